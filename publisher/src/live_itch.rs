//! The live Nasdaq TotalView-ITCH 5.0 feed handler: MoldUDP64 from lines A (and B) into the journal, gaps
//! filled from the re-request server.
//!
//! [`LiveItch`] glues, on the feed thread (`mdfan-feed`): the line sockets ([`LineSocket`]: multicast join or
//! unicast bind, `SO_TIMESTAMPING` receive stamps), the request socket (a UDP socket connected to
//! `lines.retransmit`: requests go out on it and the answers, ordinary downstream packets, come back on it), the
//! sans-IO MoldUDP64 session receiver ([`SessionReceiver`]: messages in sequence order, A/B duplicates dropped
//! by sequence number, holes requested, retried, and after the last retry given up), the ITCH decoder
//! ([`decode_message`]), the [`ItchNormalizer`] (order-level records keyed by stock locate, `venue_seq` = the
//! MoldUDP64 sequence number's low 32 bits) and the journal's writer.
//!
//! A hole given up marks every stock locate seen so far stale: one `InstrumentStale` record each (the kind
//! subscribers already see for MDP 3.0), since an ITCH stream has no per-instrument sequence. The normaliser
//! keeps them unsynced until the start of the next day (System Event `O`); references it then does not know
//! are counted and skipped as for a file. A message that does not decode (counted in `bad_packets`; a file
//! replay would stop there) marks its own stock locate stale, or every locate when its locate is not one seen
//! before ([`ItchNormalizer::mark_undecodable`]): the stream goes on, and no book stays silently wrong.
//!
//! **Symbols.** Each Stock Directory (`R`) message is handed to the conductor, off the hot loop's path, through
//! the definition queue ([`crate::definitions`], [`DIRECTORY_QUEUE_ENTRIES`] entries): a [`DirectoryEntry`] (the
//! stock locate and the 8 bytes of its Stock field, `Copy`: nothing allocated on the feed thread). The feed
//! thread never waits on it: an entry that finds the queue full is dropped and counted
//! ([`MoldCounters::definitions_dropped`]; the conductor logs it). The conductor drains the queue every pass
//! (before it answers handshakes) into its `Symbology`: `instrument_id` = the stock locate, the symbol without
//! its padding, tick 0.0001 (`mdfan_feed::itch::stock_definition`'s definition: prices print with ITCH's 4
//! decimals); a later `R` of the same locate replaces the earlier definition. A subscriber can then subscribe by
//! symbol and gets the definitions in its `Accept`, but only the symbols of `R` messages seen before the
//! subscriber attached: a subscriber attached earlier keeps the definitions its `Accept` carried (an `Accept`
//! is the only way definitions reach a subscriber). (An ITCH *file* is read for its Stock Directory in a first
//! pass before the replay instead: every subscriber gets every definition.)
//!
//! As [`crate::live`]: while records are pending (the journal is full) the sockets are not read and their
//! receive buffers (`lines.rcvbuf_bytes`) hold the backlog. After warm-up nothing here allocates (the pending
//! buffer holds one poll's records plus one stale mark per locate); a request is one `send` on the feed thread.
//! Each poll reads `CLOCK_REALTIME` once (vDSO) for the request timeouts.
//!
//! Source: Nasdaq "MoldUDP64 Protocol Specification" 1.00 ("Downstream Packets", "Request Packets"); Nasdaq
//! "TotalView-ITCH 5.0" specification.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_feed::itch::{Body, ItchNormalizer, Message, Records, Symbol, PRICE4_TICK_E9};
use mdfan_feed::mold_session::{Origin, SessionConfig, SessionEvent, SessionReceiver, Start};
use mdfan_lines::{realtime_ns, LineError, LineSocket, SourceCounts, StampKind};
use mdfan_wire::{BookUpdate, InstrumentDef};

use crate::config::{LineRole, MoldStart};
use crate::definitions::{DefinitionEntry, DefinitionSender};
use crate::feeds::itch::MoldLines;
use crate::feeds::{FeedSource, FeedSourceError, Step};
use crate::journal::JournalWriter;

/// Datagrams read per duty cycle at most.
const POLL_BUDGET: usize = 16;
/// Records one poll can make: a 1,472-byte packet holds at most 115 ITCH messages (13 bytes at least with
/// their length), each up to three records.
const POLL_RECORDS: usize = POLL_BUDGET * 115 * 3;

/// Entries the definition queue ([`crate::definitions::definition_queue`]) holds for a live ITCH feed: one per possible stock locate (a u16), so a
/// whole day's directory (the `R` messages come in a burst before the open, one per locate) fits even if the
/// conductor drained none of it meanwhile. 10 bytes each: 640 KiB, allocated when the feed opens.
pub const DIRECTORY_QUEUE_ENTRIES: usize = 1 << 16;

/// One Stock Directory (`R`, spec 4.2.1) message as the feed thread hands it to the conductor: fixed size,
/// `Copy`, no `String` made on the feed thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// The stock locate: the records' instrument_id.
    pub stock_locate: u16,
    /// The Stock field as sent: 8 bytes, space-padded.
    pub stock: [u8; 8],
}

impl DirectoryEntry {
    /// The definition it gives, as `mdfan_feed::itch::stock_definition`: instrument_id = the stock locate, the
    /// symbol without its padding, display factor 1, tick size `PRICE4_TICK_E9` (4 decimals).
    pub fn definition(&self) -> InstrumentDef {
        InstrumentDef {
            tick_size_e9: PRICE4_TICK_E9,
            ..InstrumentDef::new(u32::from(self.stock_locate), Symbol(self.stock).as_str())
        }
    }
}

/// What the live ITCH feed counted, readable from any thread (Relaxed; stored by the feed thread after each poll
/// that read something or changed a hole).
#[derive(Debug, Default)]
pub struct MoldCounters {
    /// Packets read on line A, line B, and answers on the request socket.
    pub packets: [AtomicU64; 3],
    /// Heartbeats (count 0) among them.
    pub heartbeats: AtomicU64,
    /// ITCH messages handed out in sequence order.
    pub messages: AtomicU64,
    /// Of those, messages that came from the re-request server.
    pub retransmitted: AtomicU64,
    /// Copies of messages already handed out (the other line, a second answer): dropped.
    pub duplicates: AtomicU64,
    /// Gaps opened (a packet past the highest sequence number known).
    pub gaps: AtomicU64,
    /// Request packets sent, retries included.
    pub requests: AtomicU64,
    /// Of those, retries after a timeout.
    pub retries: AtomicU64,
    /// Holes given up (retries exhausted, or no room to wait).
    pub given_up_holes: AtomicU64,
    /// Messages in those holes.
    pub given_up_messages: AtomicU64,
    /// Packets of another MoldUDP64 session: dropped.
    pub foreign_session: AtomicU64,
    /// Datagrams on line A, line B from a source address the line does not list (`lines.a.sources`,
    /// `lines.b.sources`): dropped before the session receiver, so a forged copy never beats the real one.
    pub foreign_sources: [AtomicU64; 2],
    /// Packets whose message count disagrees with their bytes, and ITCH messages that did not decode: dropped.
    pub bad_packets: AtomicU64,
    /// Order-level records written to the journal (stale marks included).
    pub records: AtomicU64,
    /// `InstrumentStale` records written (holes given up, unknown references).
    pub stale_records: AtomicU64,
    /// Messages naming an order reference the table does not hold (E, C, X, D, U; the locate marked stale):
    /// `ItchNormalizer`'s count, all types together. Orders added before the feed was joined, or forged or lost
    /// messages.
    pub unknown_references: AtomicU64,
    /// Adds of a reference that still rests (the locate marked stale).
    pub duplicate_references: AtomicU64,
    /// Executions or cancels of more shares than rest (cut to what rests; the locate marked stale).
    pub too_many_shares: AtomicU64,
    /// Adds refused because `lines.max_orders` orders already rested (the locate marked stale): a day bigger
    /// than the limit, or a flood of forged adds.
    pub orders_refused: AtomicU64,
    /// Requests whose `send` failed.
    pub send_errors: AtomicU64,
    /// Datagrams per line (A, B) by where their receive stamp came from: hardware, software, user.
    pub stamps: [[AtomicU64; 3]; 2],
    /// Each line's hardware stamping and PHC mapping, as opened.
    pub hw: crate::live::LineStamps,
    /// Stock Directory messages not handed to the conductor because its queue was full (their symbols are
    /// unknown to subscribers attaching later).
    pub definitions_dropped: AtomicU64,
    /// Suspect jumps held: packets `lines.window_messages` or more past the highest sequence number known, not
    /// acted on until a second one confirms them (a stray datagram is only counted here).
    pub jumps_held: AtomicU64,
    /// Suspect jumps confirmed by a second packet and taken (the hole before them handled as any other).
    pub jumps_taken: AtomicU64,
    /// ITCH messages skipped (no record, nothing kept: NOII, LULD collars, types ITCH 5.0 does not define, ...).
    pub skipped: SkippedCounters,
    /// Messages whose later copy (the other line, a re-request answer) carried other bytes: each taken as a loss
    /// of unknown content (every locate seen marked stale, later ones stale on sight, until the next day).
    pub copy_mismatches: AtomicU64,
    /// End-of-session packets contradicted by a later message before they were taken: forged or stray, the day
    /// went on (`mold_session` module docs, "End").
    pub ends_contradicted: AtomicU64,
    /// Silences: `lines.silent_after_ms` passed with no datagram on any line (`crate::live::SilenceWatch`).
    pub silences: AtomicU64,
    /// 1 while the feed is silent (a gauge).
    pub silent_now: AtomicU64,
}

/// ITCH messages skipped by type byte, and where the first of each type was (0 while none): its MoldUDP64
/// sequence number live ([`MoldCounters::skipped`]), the byte offset of its length prefix in a file
/// (`feeds::itch::ItchFileCounters`).
#[derive(Debug)]
pub struct SkippedCounters {
    /// Messages skipped, by type byte.
    pub count: [AtomicU64; 256],
    /// Where the first skipped message of each type was.
    pub first_seq: [AtomicU64; 256],
}

impl SkippedCounters {
    /// Stores the normaliser's skipped counts (the feed thread, when their total moved).
    pub fn store(&self, skipped: &mdfan_feed::itch::Skipped) {
        for (t, n, first) in skipped.iter() {
            self.first_seq[usize::from(t)].store(first, Ordering::Relaxed);
            self.count[usize::from(t)].store(n, Ordering::Relaxed);
        }
    }

    /// `(type byte, count, first)` of each type skipped, by type byte.
    pub fn each(&self) -> Vec<(u8, u64, u64)> {
        (0..=255u8)
            .filter_map(|t| {
                let n = self.count[usize::from(t)].load(Ordering::Relaxed);
                (n > 0).then(|| (t, n, self.first_seq[usize::from(t)].load(Ordering::Relaxed)))
            })
            .collect()
    }
}

/// `I:2@17,J:1@40` (type, count, where the first was), or `none`.
pub fn skipped_text(skipped: &[(u8, u64, u64)]) -> String {
    if skipped.is_empty() {
        return "none".to_owned();
    }
    let each = skipped.iter().map(|&(t, n, at)| format!("{}:{n}@{at}", mdfan_feed::itch::type_label(t)));
    each.collect::<Vec<_>>().join(",")
}

impl Default for SkippedCounters {
    fn default() -> Self {
        SkippedCounters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            first_seq: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A copy of [`MoldCounters`] for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoldReport {
    /// See [`MoldCounters::packets`].
    pub packets: [u64; 3],
    /// See [`MoldCounters::heartbeats`].
    pub heartbeats: u64,
    /// See [`MoldCounters::messages`].
    pub messages: u64,
    /// See [`MoldCounters::retransmitted`].
    pub retransmitted: u64,
    /// See [`MoldCounters::duplicates`].
    pub duplicates: u64,
    /// See [`MoldCounters::gaps`].
    pub gaps: u64,
    /// See [`MoldCounters::requests`].
    pub requests: u64,
    /// See [`MoldCounters::retries`].
    pub retries: u64,
    /// See [`MoldCounters::given_up_holes`].
    pub given_up_holes: u64,
    /// See [`MoldCounters::given_up_messages`].
    pub given_up_messages: u64,
    /// See [`MoldCounters::foreign_session`].
    pub foreign_session: u64,
    /// See [`MoldCounters::foreign_sources`]: line A, line B.
    pub foreign_sources: [u64; 2],
    /// See [`MoldCounters::bad_packets`].
    pub bad_packets: u64,
    /// See [`MoldCounters::records`].
    pub records: u64,
    /// See [`MoldCounters::stale_records`].
    pub stale_records: u64,
    /// See [`MoldCounters::unknown_references`].
    pub unknown_references: u64,
    /// See [`MoldCounters::duplicate_references`].
    pub duplicate_references: u64,
    /// See [`MoldCounters::too_many_shares`].
    pub too_many_shares: u64,
    /// See [`MoldCounters::orders_refused`].
    pub orders_refused: u64,
    /// See [`MoldCounters::send_errors`].
    pub send_errors: u64,
    /// See [`MoldCounters::stamps`]: `[line][hardware, software, user]`.
    pub stamps: [[u64; 3]; 2],
    /// See [`MoldCounters::hw`].
    pub hw: Vec<String>,
    /// See [`MoldCounters::definitions_dropped`].
    pub definitions_dropped: u64,
    /// See [`MoldCounters::jumps_held`].
    pub jumps_held: u64,
    /// See [`MoldCounters::jumps_taken`].
    pub jumps_taken: u64,
    /// See [`MoldCounters::skipped`]: each type skipped, with its count and the sequence number of the first.
    pub skipped: Vec<(u8, u64, u64)>,
    /// See [`MoldCounters::copy_mismatches`].
    pub copy_mismatches: u64,
    /// See [`MoldCounters::ends_contradicted`].
    pub ends_contradicted: u64,
    /// See [`MoldCounters::silences`].
    pub silences: u64,
    /// See [`MoldCounters::silent_now`].
    pub silent_now: u64,
}

impl MoldCounters {
    /// A copy of every counter.
    pub fn report(&self) -> MoldReport {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MoldReport {
            packets: [ld(&self.packets[0]), ld(&self.packets[1]), ld(&self.packets[2])],
            heartbeats: ld(&self.heartbeats),
            messages: ld(&self.messages),
            retransmitted: ld(&self.retransmitted),
            duplicates: ld(&self.duplicates),
            gaps: ld(&self.gaps),
            requests: ld(&self.requests),
            retries: ld(&self.retries),
            given_up_holes: ld(&self.given_up_holes),
            given_up_messages: ld(&self.given_up_messages),
            foreign_session: ld(&self.foreign_session),
            foreign_sources: self.foreign_sources.each_ref().map(ld),
            bad_packets: ld(&self.bad_packets),
            records: ld(&self.records),
            stale_records: ld(&self.stale_records),
            unknown_references: ld(&self.unknown_references),
            duplicate_references: ld(&self.duplicate_references),
            too_many_shares: ld(&self.too_many_shares),
            orders_refused: ld(&self.orders_refused),
            send_errors: ld(&self.send_errors),
            stamps: self.stamps.each_ref().map(|l| l.each_ref().map(ld)),
            hw: self.hw.lines(),
            definitions_dropped: ld(&self.definitions_dropped),
            jumps_held: ld(&self.jumps_held),
            jumps_taken: ld(&self.jumps_taken),
            skipped: self.skipped.each(),
            copy_mismatches: ld(&self.copy_mismatches),
            ends_contradicted: ld(&self.ends_contradicted),
            silences: ld(&self.silences),
            silent_now: ld(&self.silent_now),
        }
    }

    /// Stores the normaliser's skipped counts (the feed thread, when their total moved).
    fn store_skipped(&self, skipped: &mdfan_feed::itch::Skipped) {
        self.skipped.store(skipped);
    }

    /// Stores the normaliser's counts of references it could not apply (the feed thread, after each poll).
    fn store_references(&self, stats: &mdfan_feed::itch::NormalizerStats) {
        self.unknown_references.store(stats.unknown_references(), Ordering::Relaxed);
        self.duplicate_references.store(stats.duplicate_reference, Ordering::Relaxed);
        self.too_many_shares.store(stats.too_many_shares, Ordering::Relaxed);
        self.orders_refused.store(stats.orders_refused, Ordering::Relaxed);
    }
}

impl MoldReport {
    /// `feed format=itch50 packets=a/b/retransmit messages=.. gaps=.. requests=.. ... skipped=I:2@17,J:1@40`
    /// (`skipped`: type, count, the MoldUDP64 sequence number of the first; `none` when nothing was skipped).
    pub fn line(&self) -> String {
        let skipped = skipped_text(&self.skipped);
        format!(
            "feed format=itch50 packets={}/{}/{} heartbeats={} messages={} retransmitted={} duplicates={} copy_mismatches={} gaps={} requests={} retries={} given_up_holes={} given_up_messages={} foreign_session={} foreign_sources={}/{} bad_packets={} records={} stale_records={} unknown_references={} duplicate_references={} too_many_shares={} orders_refused={} send_errors={} silences={} silent_now={} definitions_dropped={} jumps_held={} jumps_taken={} ends_contradicted={} stamps={} skipped={skipped}",
            self.packets[0],
            self.packets[1],
            self.packets[2],
            self.heartbeats,
            self.messages,
            self.retransmitted,
            self.duplicates,
            self.copy_mismatches,
            self.gaps,
            self.requests,
            self.retries,
            self.given_up_holes,
            self.given_up_messages,
            self.foreign_session,
            self.foreign_sources[0],
            self.foreign_sources[1],
            self.bad_packets,
            self.records,
            self.stale_records,
            self.unknown_references,
            self.duplicate_references,
            self.too_many_shares,
            self.orders_refused,
            self.send_errors,
            self.silences,
            self.silent_now,
            self.definitions_dropped,
            self.jumps_held,
            self.jumps_taken,
            self.ends_contradicted,
            crate::live::stamps_text(&self.stamps)
        )
    }
}

/// Everything a poll's callback writes to, apart from the session receiver.
struct Sink<'a> {
    normalizer: &'a mut ItchNormalizer,
    pending: &'a mut Vec<BookUpdate>,
    directory: &'a mut DefinitionSender,
    request: Option<&'a UdpSocket>,
    send_errors: &'a mut u64,
    decode_errors: &'a mut u64,
    stale_records: &'a mut u64,
    /// One message's records (made once per poll, emptied by each message).
    records: Records,
}

impl Sink<'_> {
    fn on(&mut self, e: SessionEvent<'_>) {
        match e {
            SessionEvent::Message { seq, ts_recv_ns, message, .. } => {
                match self.normalizer.normalize_bytes(message, seq, ts_recv_ns, seq, &mut self.records) {
                    Ok(m) => {
                        // (an order-book message was normalised in place: no Message comes back)
                        if let Some(Message { header, body: Body::StockDirectory(d) }) = m {
                            let entry = DirectoryEntry { stock_locate: header.stock_locate, stock: d.stock.0 };
                            let _ = self.directory.send(DefinitionEntry::Stock(entry));
                        }
                        for r in self.records.as_slice() {
                            if r.kind() == Some(mdfan_wire::Kind::InstrumentStale) {
                                *self.stale_records += 1;
                            }
                            self.pending.push(*r);
                        }
                    }
                    Err(_) => {
                        // Counted, and the book it may have changed marked unsynced: never silently wrong.
                        *self.decode_errors += 1;
                        let pending = &mut *self.pending;
                        *self.stale_records +=
                            self.normalizer.mark_undecodable(message, seq, ts_recv_ns, &mut |r| pending.push(r));
                    }
                }
            }
            SessionEvent::Request { packet, .. } => {
                if let Some(sock) = self.request {
                    if sock.send(&packet).is_err() {
                        *self.send_errors += 1;
                    }
                }
            }
            // A message whose copies differ went out as one of them: of unknown content, as a hole's (every
            // locate seen stale, a locate first seen later stale on sight, until the next day).
            SessionEvent::Hole { first: seq, .. } | SessionEvent::CopyMismatch { seq } => {
                let pending = &mut *self.pending;
                *self.stale_records += self.normalizer.mark_all_stale(seq, realtime_ns(), &mut |r| pending.push(r));
            }
            SessionEvent::EndOfSession { .. } => {}
        }
    }
}

/// The live ITCH 5.0 over MoldUDP64 feed handler. See the [module docs](self).
pub struct LiveItch {
    lines: Vec<LineSocket>,
    /// Per line, the source addresses it takes datagrams from (`lines.a.sources`; empty: any).
    sources: [Vec<std::net::Ipv4Addr>; 2],
    /// Per line, datagrams dropped for their source, by source.
    foreign_sources: [SourceCounts; 2],
    /// The dropped total last logged (by source).
    logged_foreign: u64,
    request: Option<UdpSocket>,
    buf: Vec<u8>,
    session: SessionReceiver,
    normalizer: ItchNormalizer,
    pending: Vec<BookUpdate>,
    /// Stock Directory messages to the conductor.
    directory: DefinitionSender,
    head: usize,
    counters: Arc<MoldCounters>,
    end_after_idle_ns: u64,
    last_datagram_ns: u64,
    silence: crate::live::SilenceWatch,
    /// `[line][hardware, software, user]`.
    stamps: [[u64; 3]; 2],
    send_errors: u64,
    decode_errors: u64,
    stale_records: u64,
    records: u64,
    /// The skipped total last stored into the counters.
    skipped_stored: u64,
    /// Errors and holes already logged.
    logged: (u64, u64),
    /// The dropped-packets warning, rate-limited ([`DropLog`]).
    drops: DropLog,
    /// The last packet refused, logged with the counts (off the hot loop: this is the feed thread).
    last_error: Option<mdfan_feed::mold_session::SessionError>,
    ts_recv_clock: crate::TsRecvClockCell,
}

impl LiveItch {
    /// Opens line A (and B), connects the request socket to `lines.retransmit` if set, and reserves every
    /// buffer. `midnight_ns` is `feed.session_date`'s US Eastern midnight (ITCH times are ns since it). Stock
    /// Directory messages go into `directory` (the conductor holds its other end).
    ///
    /// # Errors
    /// [`LineError`] naming the address, the socket call and the config key.
    pub fn open(
        lines: &MoldLines,
        midnight_ns: u64,
        ts_recv_clock: crate::TsRecvClockCell,
        directory: DefinitionSender,
    ) -> Result<LiveItch, LineError> {
        let a = lines.a.as_ref().expect("the config requires lines.a for a live feed");
        let mut keys = crate::live::LineKeys::default().with(a, "lines.a", lines.line_config(a, LineRole::A).interface);
        if let Some(b) = &lines.b {
            keys = keys.with(b, "lines.b", lines.line_config(b, LineRole::B).interface);
        }
        let mut socks = vec![LineSocket::open(&lines.line_config(a, LineRole::A)).map_err(|e| keys.name(e))?];
        if let Some(b) = &lines.b {
            socks.push(LineSocket::open(&lines.line_config(b, LineRole::B)).map_err(|e| keys.name(e))?);
        }
        for s in &socks {
            if s.rcvbuf_bytes() < lines.rcvbuf_bytes {
                tracing::warn!(line = %s.local_addr(), rcvbuf_bytes = s.rcvbuf_bytes(), wanted_bytes = lines.rcvbuf_bytes,
                    "line receive buffer smaller than lines.rcvbuf_bytes: a burst may be lost (then requested). Raise net.core.rmem_max, or run with CAP_NET_ADMIN");
            }
        }
        let request = match lines.retransmit {
            Some(server) => {
                let open_err = |what: &'static str| {
                    move |source: std::io::Error| {
                        let source =
                            std::io::Error::new(source.kind(), format!("{source} (config key lines.retransmit)"));
                        LineError::Open { addr: server, what, source }
                    }
                };
                let sock = UdpSocket::bind(SocketAddrV4::new(lines.interface, 0)).map_err(open_err("bind"))?;
                sock.connect(server).map_err(open_err("connect"))?;
                sock.set_nonblocking(true).map_err(open_err("O_NONBLOCK"))?;
                Some(sock)
            }
            None => None,
        };
        let session = lines.session.as_ref().map(|s| {
            let mut b = [b' '; 10];
            b[..s.len()].copy_from_slice(s.as_bytes());
            b
        });
        let cfg = SessionConfig {
            start: match lines.start {
                MoldStart::FirstSeen => Start::FirstSeen,
                MoldStart::One => Start::One,
            },
            session,
            window_messages: lines.window_messages,
            slot_bytes: 64,
            requests: request.is_some(),
            request_timeout_ns: lines.retransmit_timeout_ms * 1_000_000,
            retries: lines.retransmit_retries,
            max_request_messages: 1_000,
            confirm_packets: lines.confirm_packets,
            // An end of session is taken once nothing contradicted it for 1 s (`mold_session`, "End"), or half the
            // quiet that would call the feed silent or end it on idle, if shorter: the end comes first.
            end_confirm_ns: [lines.silent_after_ms, lines.end_after_idle_ms]
                .into_iter()
                .filter(|&ms| ms > 0)
                .fold(1_000, |a, ms| a.min(ms / 2))
                * 1_000_000,
        };
        let counters = Arc::new(MoldCounters::default());
        counters.hw.set(socks.iter().zip(["a", "b"]).map(|(s, n)| (n, s)).collect(), None);
        Ok(LiveItch {
            lines: socks,
            sources: [a.sources.clone(), lines.b.as_ref().map_or_else(Vec::new, |b| b.sources.clone())],
            foreign_sources: Default::default(),
            logged_foreign: 0,
            request,
            buf: vec![0; 65_536],
            session: SessionReceiver::new(cfg),
            normalizer: ItchNormalizer::new(midnight_ns, 1 << 20).with_max_orders(lines.max_orders),
            pending: Vec::with_capacity(POLL_RECORDS + (1 << 16)),
            directory,
            head: 0,
            counters,
            end_after_idle_ns: lines.end_after_idle_ms * 1_000_000,
            silence: crate::live::SilenceWatch::new(lines.silent_after_ms),
            last_datagram_ns: 0,
            stamps: [[0; 3]; 2],
            send_errors: 0,
            decode_errors: 0,
            stale_records: 0,
            records: 0,
            skipped_stored: 0,
            logged: (0, 0),
            drops: DropLog::default(),
            last_error: None,
            ts_recv_clock,
        })
    }

    /// The counters, for the run report and the counters file.
    pub fn counters(&self) -> Arc<MoldCounters> {
        Arc::clone(&self.counters)
    }

    /// The lines' bound addresses (A, and B if configured; B = A otherwise).
    pub fn line_addrs(&self) -> [SocketAddrV4; 2] {
        let a = self.lines[0].local_addr();
        [a, self.lines.get(1).map_or(a, LineSocket::local_addr)]
    }

    /// One duty cycle: the pending records into the journal; if they all went in, one poll of the lines and
    /// the request socket, then the session receiver's timers.
    ///
    /// # Errors
    /// A socket read that failed for a reason other than "nothing to read".
    pub(crate) fn poll(&mut self, writer: &mut JournalWriter) -> Result<Step, LineError> {
        let mut written = self.drain(writer);
        if self.head < self.pending.len() {
            return Ok(Step::Work(written));
        }
        let now_ns = realtime_ns();
        let mut read = 0;
        // Line packets that brought messages new to the session, or a heartbeat: what keeps the feed live. A stray
        // or forged stream (truncated, foreign source or session, not MoldUDP64) or a replay of messages already
        // handed out does not hide a silence.
        let mut heard = 0;
        let mut idle = [false; 3];
        let mut last_error = None;
        let first_new = self.pending.len();
        let LiveItch {
            lines,
            sources,
            foreign_sources,
            request,
            buf,
            session,
            normalizer,
            pending,
            directory,
            send_errors,
            decode_errors,
            stale_records,
            stamps,
            ..
        } = self;
        let mut sink = Sink {
            normalizer,
            pending,
            directory,
            request: request.as_ref(),
            send_errors,
            decode_errors,
            stale_records,
            records: Records::default(),
        };
        while read < POLL_BUDGET && idle.iter().filter(|i| **i).count() < 3 {
            for (src, is_idle) in idle.iter_mut().enumerate() {
                if *is_idle || read >= POLL_BUDGET {
                    continue;
                }
                let (len, ts_recv_ns, origin) = if src < 2 {
                    let Some(sock) = lines.get_mut(src) else {
                        *is_idle = true;
                        continue;
                    };
                    let Some(r) = sock.recv(buf)? else {
                        *is_idle = true;
                        continue;
                    };
                    stamps[src][match r.stamp {
                        StampKind::Hardware => 0,
                        StampKind::Software => 1,
                        StampKind::User | StampKind::None => 2,
                    }] += 1;
                    if r.truncated {
                        read += 1;
                        continue;
                    }
                    if !sources[src].is_empty() && !sources[src].contains(&r.src) {
                        foreign_sources[src].count(r.src);
                        read += 1;
                        continue;
                    }
                    (r.len, r.ts_recv_ns, if src == 0 { Origin::LineA } else { Origin::LineB })
                } else {
                    let Some(sock) = sink.request else {
                        *is_idle = true;
                        continue;
                    };
                    match sock.recv(buf) {
                        Ok(n) => (n, now_ns, Origin::Retransmission),
                        Err(_) => {
                            // WouldBlock (nothing to read), or an ICMP port unreachable from a server not up yet:
                            // either way nothing to hand on; an unanswered request is retried, then given up.
                            *is_idle = true;
                            continue;
                        }
                    }
                };
                read += 1;
                // the order-table lines of the datagram's messages fetched together (a hint; see `prefetch_packet`)
                sink.normalizer.prefetch_packet(&buf[..len]);
                let before = (session.counters().messages, session.counters().heartbeats);
                match session.on_packet(&buf[..len], origin, ts_recv_ns, &mut |e| sink.on(e)) {
                    Ok(()) if origin != Origin::Retransmission => {
                        heard += usize::from((session.counters().messages, session.counters().heartbeats) != before);
                    }
                    Ok(()) => {}
                    Err(e) => last_error = Some(e),
                }
            }
        }
        session.tick(now_ns, &mut |e| sink.on(e));
        if last_error.is_some() {
            self.last_error = last_error;
        }
        let ended = session.is_ended();
        self.silence.after_poll(now_ns, heard, self.last_datagram_ns, &mut self.pending, first_new);
        if heard > 0 {
            self.last_datagram_ns = now_ns;
        }
        self.publish_counters();
        written += self.drain(writer);
        if self.head < self.pending.len() {
            return Ok(Step::Work(written.max(read)));
        }
        let idle_end = self.end_after_idle_ns > 0
            && self.last_datagram_ns > 0
            && now_ns.saturating_sub(self.last_datagram_ns) > self.end_after_idle_ns
            && !self.session.has_hole();
        if ended || idle_end {
            return Ok(Step::Ended);
        }
        Ok(Step::Work(written.max(read)))
    }

    /// Writes pending records into the journal until it is full; returns how many went in.
    fn drain(&mut self, writer: &mut JournalWriter) -> usize {
        let written = crate::live::drain_pending(&mut self.pending, &mut self.head, writer);
        self.records += written as u64;
        written
    }

    fn publish_counters(&mut self) {
        let c = &*self.counters;
        let st = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let s = *self.session.counters();
        for i in 0..3 {
            st(&c.packets[i], s.packets[i]);
            for line in 0..2 {
                st(&c.stamps[line][i], self.stamps[line][i]);
            }
        }
        st(&c.heartbeats, s.heartbeats);
        st(&c.messages, s.messages);
        st(&c.retransmitted, s.retransmitted_messages);
        st(&c.duplicates, s.duplicates);
        st(&c.copy_mismatches, s.copy_mismatches);
        st(&c.ends_contradicted, s.ends_contradicted);
        st(&c.gaps, s.gaps);
        st(&c.requests, s.requests);
        st(&c.retries, s.retries);
        st(&c.given_up_holes, s.given_up_holes);
        st(&c.given_up_messages, s.given_up_messages);
        st(&c.foreign_session, s.foreign_session);
        st(&c.foreign_sources[0], self.foreign_sources[0].total());
        st(&c.foreign_sources[1], self.foreign_sources[1].total());
        crate::live::log_foreign_sources(&self.foreign_sources, &mut self.logged_foreign, None);
        st(&c.bad_packets, s.bad_packets + self.decode_errors);
        st(&c.records, self.records);
        st(&c.stale_records, self.stale_records);
        st(&c.send_errors, self.send_errors);
        st(&c.definitions_dropped, self.directory.dropped());
        st(&c.jumps_held, s.jumps_held);
        st(&c.jumps_taken, s.jumps_taken);
        st(&c.silences, u64::from(self.silence.silences()));
        st(&c.silent_now, u64::from(self.silence.is_silent()));
        c.store_references(self.normalizer.stats());
        let skipped = &self.normalizer.stats().skipped;
        if skipped.total() != self.skipped_stored {
            self.skipped_stored = skipped.total();
            c.store_skipped(skipped);
        }
        use mdfan_wire::control::TsRecvClock;
        let clock = crate::live::ts_recv_clock_of(&self.stamps);
        if clock != self.ts_recv_clock.get() && clock != TsRecvClock::None {
            self.ts_recv_clock.set(clock);
        }
        if s.given_up_holes > self.logged.1 {
            tracing::warn!(holes = s.given_up_holes - self.logged.1, lost_messages_total = s.given_up_messages,
                "MoldUDP64 messages given up after the last retransmission request: every stock locate seen is marked stale");
            self.logged.1 = s.given_up_holes;
        }
        let errors = s.foreign_session + s.bad_packets + self.decode_errors + self.send_errors;
        if errors > self.logged.0 {
            self.logged.0 = errors;
            if self.drops.due([s.foreign_session, s.bad_packets, self.decode_errors, self.send_errors], realtime_ns()) {
                tracing::warn!(
                    foreign_session = s.foreign_session,
                    bad_packets = s.bad_packets,
                    bad_messages = self.decode_errors,
                    send_errors = self.send_errors,
                    "MoldUDP64 packets dropped (logged on each new kind, else at most every 10 s; the counters count each)"
                );
            }
        }
    }
}

/// How often the dropped-packets warning repeats while drops of kinds already logged go on (a second sender on
/// the group, say, sends a foreign session's packets all day).
const DROP_LOG_PERIOD_NS: u64 = 10_000_000_000;

/// The "MoldUDP64 packets dropped" warning, rate-limited as the live MDP 3.0 path logs a loss: at once for a kind
/// of drop not logged before (foreign session, bad packet, bad message, send error), then at most once per
/// [`DROP_LOG_PERIOD_NS`] with the totals. The counters are not limited.
#[derive(Debug, Default)]
struct DropLog {
    /// The totals last logged, by kind.
    logged: [u64; 4],
    /// When they were logged, ns since the UNIX epoch.
    at_ns: u64,
}

impl DropLog {
    /// Whether the totals `counts` are to be logged at `now_ns`; if so, they are the ones logged from then on.
    fn due(&mut self, counts: [u64; 4], now_ns: u64) -> bool {
        let new_kind = counts.iter().zip(&self.logged).any(|(c, l)| *c > 0 && *l == 0);
        let more = counts.iter().zip(&self.logged).any(|(c, l)| c > l);
        if new_kind || (more && now_ns.saturating_sub(self.at_ns) >= DROP_LOG_PERIOD_NS) {
            self.logged = counts;
            self.at_ns = now_ns;
            return true;
        }
        false
    }
}

impl FeedSource for LiveItch {
    fn step(&mut self, writer: &mut JournalWriter) -> Result<Step, FeedSourceError> {
        Ok(self.poll(writer)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_feed::itch::decode_message;

    /// The field names of a `key=value ...` line, in order.
    fn keys(line: &str) -> Vec<&str> {
        line.split_whitespace().filter_map(|kv| kv.split_once('=').map(|(k, _)| k)).collect()
    }

    #[test]
    fn the_readme_names_every_field_of_the_counters_line_in_order() {
        let readme = include_str!("../../README.md");
        let at = readme.find("`feed format=itch50 packets=A/B/retransmit").expect("README: the ITCH counters line");
        let template = &readme[at + 1..];
        let template = &template[..template.find('`').expect("README: the counters line's closing backquote")];
        assert_eq!(keys(template), keys(&MoldReport::default().line()));
    }

    /// A Stock Directory message (ITCH 5.0 section 4.2.1, 39 bytes) for `locate` and `stock`.
    fn stock_directory_message(locate: u16, stock: &[u8; 8]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(locate.to_be_bytes());
        m.extend(0u16.to_be_bytes()); // tracking number
        m.extend(&34_200_000_000_000u64.to_be_bytes()[2..]); // 09:30, 6 bytes
        m.extend(stock);
        m.extend([b'Q', b'N']); // market category, financial status
        m.extend(100u32.to_be_bytes()); // round lot size
        m.extend([b'N', b'C', b'Z', b' ', b'P', b'N', b' ', b'1', b'N']); // round lots only .. ETP flag
        m.extend(0u32.to_be_bytes()); // ETP leverage factor
        m.push(b'N'); // inverse
        assert_eq!(m.len(), 39);
        m
    }

    /// `messages` (sequence number, bytes) handed to a poll's [`Sink`] in order: the normaliser after them, the
    /// records made, and the messages that did not decode.
    fn through_sink(messages: &[(u64, &[u8])]) -> (ItchNormalizer, Vec<BookUpdate>, u64) {
        let (mut directory, _rx) = crate::definitions::definition_queue(4);
        let (mut normalizer, mut pending) = (ItchNormalizer::new(0, 16), Vec::new());
        let (mut send_errors, mut decode_errors, mut stale_records) = (0, 0, 0);
        let mut sink = Sink {
            normalizer: &mut normalizer,
            pending: &mut pending,
            directory: &mut directory,
            request: None,
            send_errors: &mut send_errors,
            decode_errors: &mut decode_errors,
            stale_records: &mut stale_records,
            records: Records::default(),
        };
        for &(seq, message) in messages {
            sink.on(SessionEvent::Message { seq, ts_recv_ns: 1, retransmitted: false, message });
        }
        (normalizer, pending, decode_errors)
    }

    #[test]
    fn skipped_messages_reach_the_report_line_by_type_with_the_first_ones_sequence_number() {
        let header = |t: u8, len: usize| {
            let mut m = vec![t, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
            m.resize(len, b' ');
            m
        };
        // A NOII (50 bytes) whose cross type (byte 48) is `Z`, an unknown one; a LULD collar `J` (35 bytes, prices
        // zero); an unknown type `z`; a second NOII.
        let mut noii = header(b'I', 50);
        noii[11..28].fill(0);
        noii[36..48].fill(0);
        noii[48] = b'Z';
        let mut collar = header(b'J', 35);
        collar[19..35].fill(0);
        let unknown = header(b'z', 13);
        let (normalizer, pending, decode_errors) = through_sink(&[(5, &noii), (6, &collar), (7, &unknown), (9, &noii)]);
        assert_eq!((decode_errors, pending.len()), (0, 0), "decoded, no record");
        let counters = MoldCounters::default();
        counters.store_skipped(&normalizer.stats().skipped);
        let report = counters.report();
        assert_eq!(report.skipped, vec![(b'I', 2, 5), (b'J', 1, 6), (b'z', 1, 7)]);
        assert!(report.line().ends_with(" skipped=I:2@5,J:1@6,z:1@7"), "{}", report.line());
        assert!(MoldReport::default().line().ends_with(" skipped=none"));
    }

    /// The references the normaliser could not apply (an unknown one, an add of one that rests, more shares
    /// taken than rest) reach the report line and the counters file, not only the stale marks they cause.
    #[test]
    fn references_the_normaliser_could_not_apply_are_counted_in_the_report() {
        // type, locate 1, tracking 0, timestamp 0, then the order reference (bytes 11..19)
        let head = |t: u8, order_ref: u64| {
            let mut m = vec![t, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
            m.extend(order_ref.to_be_bytes());
            m
        };
        let add = |order_ref: u64| {
            let mut m = head(b'A', order_ref);
            m.push(b'B');
            m.extend(100u32.to_be_bytes());
            m.extend(b"TEST    ");
            m.extend(10_000u32.to_be_bytes());
            m
        };
        let mut executed = head(b'E', 7);
        executed.extend(500u32.to_be_bytes()); // 500 of the 100 that rest
        executed.extend(1u64.to_be_bytes()); // match number
        let mut delete_unknown = head(b'D', 99);
        delete_unknown.truncate(19);
        let (first, second) = (add(7), add(7));
        let (normalizer, pending, decode_errors) =
            through_sink(&[(1, &first), (2, &second), (3, &executed), (4, &delete_unknown)]);
        assert_eq!(decode_errors, 0);
        // the first add, the over-execution's fill and cancel; stale marks for the duplicate, the
        // over-execution and the unknown delete go once per locate (the locate is stale after the first)
        assert_eq!(pending.iter().filter(|r| r.kind() == Some(mdfan_wire::Kind::Add)).count(), 1);
        let counters = MoldCounters::default();
        counters.store_references(normalizer.stats());
        let report = counters.report();
        assert_eq!((report.unknown_references, report.duplicate_references, report.too_many_shares), (1, 1, 1));
        assert!(
            report.line().contains(" unknown_references=1 duplicate_references=1 too_many_shares=1 orders_refused=0 "),
            "{}",
            report.line()
        );
        // adds refused past lines.max_orders (feed::itch's test refuses them) reach the report the same way
        let stats = mdfan_feed::itch::NormalizerStats { orders_refused: 3, ..normalizer.stats().clone() };
        counters.store_references(&stats);
        assert_eq!(counters.report().orders_refused, 3);
    }

    #[test]
    fn an_entry_gives_the_definition_the_stock_directory_file_pass_gives() {
        let m = decode_message(&stock_directory_message(6514, b"META    "), 0).unwrap();
        let Body::StockDirectory(d) = &m.body else { panic!("an R message: {m:?}") };
        let entry = DirectoryEntry { stock_locate: m.header.stock_locate, stock: d.stock.0 };
        assert_eq!(entry.definition(), mdfan_feed::itch::stock_definition(&m.header, d));
        assert_eq!(entry.definition(), InstrumentDef { tick_size_e9: 100_000, ..InstrumentDef::new(6514, "META") });
        assert_eq!(entry.definition().format_price(80 * 1_000_000_000), "80.0000");
    }

    #[test]
    fn the_conductor_drain_replaces_a_locates_symbol_and_a_full_queue_drops_and_counts() {
        let (mut tx, mut rx) = crate::definitions::definition_queue(3);
        let entry =
            |locate, stock: &[u8; 8]| DefinitionEntry::Stock(DirectoryEntry { stock_locate: locate, stock: *stock });
        let mut symbology = mdfan_wire::Symbology::new();
        assert_eq!(rx.drain_into(&mut symbology), 0);
        tx.send(entry(6514, b"FB      "));
        tx.send(entry(5528, b"IVOO    "));
        tx.send(entry(6514, b"META    ")); // the same locate again: replaces FB
        tx.send(entry(464, b"AMC     ")); // a fourth in a queue of 3: dropped, counted
        assert_eq!(tx.dropped(), 1);
        assert_eq!(rx.drain_into(&mut symbology), 3);
        let defs: Vec<(u32, &str, i64)> =
            symbology.iter().map(|d| (d.instrument_id, d.symbol.as_str(), d.tick_size_e9)).collect();
        assert_eq!(defs, [(5528, "IVOO", 100_000), (6514, "META", 100_000)]);
        assert_eq!((symbology.ids_of("META"), symbology.ids_of("FB")), (vec![6514], vec![]));
        // Drained: room again, nothing more dropped; AMC comes once sent again.
        tx.send(entry(464, b"AMC     "));
        assert_eq!((tx.dropped(), rx.drain_into(&mut symbology)), (1, 1));
        assert_eq!((symbology.len(), symbology.symbol(464)), (3, Some("AMC")));
    }

    #[test]
    fn dropped_packets_are_logged_once_per_new_kind_then_once_per_period() {
        const S: u64 = 1_000_000_000;
        let mut d = DropLog::default();
        let t0 = 1_700_000_000 * S;
        // a foreign session's packets, one 16-datagram poll after another: logged once, then not for 10 s
        assert!(d.due([1, 0, 0, 0], t0));
        let polls: Vec<bool> = (1..=100).map(|i| d.due([1 + 16 * i, 0, 0, 0], t0 + i * S / 20)).collect();
        assert_eq!(polls.iter().filter(|due| **due).count(), 0);
        // a bad packet is a new kind: logged at once
        assert!(d.due([1601, 1, 0, 0], t0 + 6 * S));
        assert!(!d.due([1617, 1, 0, 0], t0 + 15 * S));
        // 10 s after the last log, more drops of known kinds are logged again, with the totals
        assert!(d.due([1633, 1, 0, 0], t0 + 16 * S));
        assert_eq!(d.logged, [1633, 1, 0, 0]);
        // nothing more dropped: nothing to log, however long after
        assert!(!d.due([1633, 1, 0, 0], t0 + 60 * S));
        assert!(d.due([1633, 1, 0, 1], t0 + 61 * S), "a send error is a new kind");
    }
}
