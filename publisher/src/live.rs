//! The live feed handler: CME MDP 3.0 channels, each from its lines A and B, into the journal.
//!
//! A publisher carries one channel (`[lines]`) or several (`[[feed.channels]]`, [`Mdp3Channels`]): each its own
//! lines, `MsgSeqNum` sequence, arbiter, market recovery and definitions, polled in turn by the one feed thread
//! into the one journal. A channel's records carry its id in their venue position (`mdfan_wire::record`, "Venue
//! position"); its stale marks, recoveries and silences are its own; its counters carry it (`channel=` in the
//! report line, a `channel` label in the counters file). An instrument_id belongs to the first channel that
//! carries it: another channel's records of it are dropped and counted (`instrument_collisions`), so one
//! channel cannot write into another's book (symbol files that overlap are refused at start).
//!
//! [`LiveMdp3`], one channel, glues three sans-IO pieces to the journal, on the feed thread (`mdfan-feed`):
//! [`LineReceiver`] (the two UDP sockets, `SO_TIMESTAMPING` receive stamps and the A/B arbiter: the first copy of
//! each `MsgSeqNum` wins), [`Mdp3Channel`] (SBE decoding, per-instrument `RptSeq` checks, packets lost on both
//! lines marked stale per instrument) and the journal's writer.
//!
//! A live feed cannot be paused, so it never waits for anything but the journal, and then without reading: while
//! records of the last poll are still pending (the journal is full: the hot loop or the conductor is behind) it
//! does not read the sockets, whose receive buffers (`lines.rcvbuf_bytes`) absorb the backlog. A backlog longer
//! than the buffers loses datagrams in the kernel; the arbiter then sees them missing on both lines and the
//! channel marks the instruments stale: a loss is never silent. The hot loop does not hold the journal for a
//! late joiner's catch-up on a live feed (a joiner that falls a whole journal behind gets a fresh snapshot).
//!
//! Lines that deliver nothing for `lines.silent_after_ms` make the channel *silent* ([`SilenceWatch`]): a
//! `FeedStatus` record (carrying the channel's id in its venue position) to every subscriber, another when
//! datagrams come again. Silence is not an end: only `lines.end_after_idle_ms` (tests, demos) ends a live stream
//! by itself, once every channel was idle that long.
//!
//! A channel's instrument definition feed (`definitions`: MDInstrumentDefinitionFuture27, Spread29, Option41 in
//! a loop) is read every poll; a definition new or changed (by `LastUpdateTime`) goes to the conductor
//! ([`crate::definitions`]), whose symbology then names it for subscribers attaching from then on.
//!
//! After warm-up nothing here allocates: the pending buffer, the arbiter's window and the receive buffer are
//! sized at start. Each poll reads `CLOCK_REALTIME` once (vDSO) for the arbiter's gap timeout.
//!
//! Source: CME Client Systems Wiki, "MDP 3.0 - Market Data Incremental Feed" (A and B feeds, arbitration by
//! `MsgSeqNum`), "MDP 3.0 - Market Recovery".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_feed::mdp3_channel::{Mdp3Channel, RecoveryStatus};
use mdfan_lines::{
    realtime_ns, ArbiterConfig, Event, LineConfig, LineError, LineReceiver, LineSocket, Mdp3Seq, ReceiverConfig,
    SourceCounts,
};
use mdfan_wire::{BookUpdate, FeedState};

use crate::config::{LineAddr, LineRole};
use crate::definitions::{DefinitionEntry, DefinitionSender};
use crate::feeds::mdp3::{Mdp3ChannelConfig, Mdp3Lines};
use crate::feeds::{FeedSource, FeedSourceError, Step};
use crate::journal::JournalWriter;

/// Datagrams read per duty cycle at most.
const POLL_BUDGET: usize = 16;
/// Records the pending buffer holds before it would grow (a 1,472-byte MDP 3.0 packet carries at most 45 book
/// entries of 32 bytes).
const PENDING_RECORDS: usize = POLL_BUDGET * 64;

/// What the live feed counted, readable from any thread (Relaxed; published by the feed thread after each poll
/// that read something).
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// The channel's id (`[[feed.channels]]` `id`; 0 for `[lines]`' one channel).
    pub channel: u16,
    /// Datagrams read on line A, line B.
    pub datagrams: [AtomicU64; 2],
    /// Of those, datagrams dropped before arbitration, per line: longer than the receive buffer, or not a whole
    /// MDP 3.0 packet (`mdfan_lines::Mdp3Seq`: its `MsgSize`s do not end at its end), so the other line's copy
    /// of that seq wins.
    pub refused: [AtomicU64; 2],
    /// Packets delivered by the arbiter (first copies), by the line that won: A, B.
    pub delivered: [AtomicU64; 2],
    /// Second copies dropped by the arbiter (the other line had delivered the seq).
    pub duplicates: AtomicU64,
    /// Copies that came after their seq was declared a gap.
    pub late: AtomicU64,
    /// Datagrams a window or more ahead of the expected seq, held until another confirmed the jump
    /// (`mdfan_lines::Arbiter`: one stray datagram is never acted on); jumps taken; held datagrams dropped (a
    /// suspect or start candidate replaced by one that did not continue it: strays); datagrams held as
    /// candidates for the first expected seq (before the start was set).
    pub jumps: [AtomicU64; 4],
    /// Per line (A, B), datagrams from a source the line does not list (`lines.a.sources`): dropped before
    /// arbitration (by source: the feed thread's warning names them).
    pub foreign: [AtomicU64; 2],
    /// Seqs whose copies on lines A and B differed: taken as lost (the channel marked stale and recovered).
    pub copy_mismatches: AtomicU64,
    /// `MsgSeqNum` resets taken (both lines went back; the channel re-based, marked stale and recovered).
    pub seq_resets: AtomicU64,
    /// Seqs lost on both lines.
    pub gap_seqs: AtomicU64,
    /// Runs of seqs lost on both lines.
    pub gap_runs: AtomicU64,
    /// Packets the decoder refused (see the log for the last error).
    pub bad_packets: AtomicU64,
    /// Price-level records written to the journal.
    pub level_records: AtomicU64,
    /// `InstrumentStale` records written (lost packets, securities stale on sight after a hole, `RptSeq` jumps).
    pub stale_records: AtomicU64,
    /// Datagrams per line (A, B) whose receive stamp came from the NIC (hardware), the kernel (software), or
    /// `CLOCK_REALTIME` at read time (user).
    pub stamps: [[AtomicU64; 3]; 2],
    /// Each line's hardware stamping and PHC mapping, as opened.
    pub hw: LineStamps,
    /// Snapshot-feed (market recovery) packets read while something was stale.
    pub snapshot_packets: AtomicU64,
    /// Snapshots applied: a stale instrument rebuilt (`Clear` + its levels).
    pub recovered: AtomicU64,
    /// Instruments stale now (a gauge).
    pub stale_now: AtomicU64,
    /// Recoveries that ran past `lines.recovery_timeout_ms` (the instruments stay stale).
    pub recovery_timeouts: AtomicU64,
    /// Silences: `lines.silent_after_ms` passed with no datagram on any line ([`SilenceWatch`]).
    pub silences: AtomicU64,
    /// 1 while the feed is silent (a gauge).
    pub silent_now: AtomicU64,
    /// Packets read on the instrument definition feed.
    pub definition_packets: AtomicU64,
    /// Of those, packets the decoder refused.
    pub bad_definition_packets: AtomicU64,
    /// Instruments the definition feed defined (each counted once, again when its `LastUpdateTime` changes).
    pub definitions: AtomicU64,
    /// Records of an instrument another channel carries, dropped (the first channel to carry an instrument_id
    /// owns it).
    pub instrument_collisions: AtomicU64,
    /// Definitions not taken: an instrument another channel owns, a symbol that is empty or not printable
    /// ASCII, a negative tick size, or past `lines.instruments` defined instruments (a flood).
    pub definitions_refused: AtomicU64,
    /// Definitions not handed to the conductor because its queue was full (taken again from the loop's next
    /// turn).
    pub definitions_dropped: AtomicU64,
    /// Datagrams on the snapshot feed, the definition feed, from a source it does not list (`sources`): dropped.
    pub side_foreign: [AtomicU64; 2],
}

/// A copy of [`LiveCounters`] for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveReport {
    /// See [`LiveCounters::channel`].
    pub channel: u16,
    /// See [`LiveCounters::datagrams`].
    pub datagrams: [u64; 2],
    /// See [`LiveCounters::refused`].
    pub refused: [u64; 2],
    /// See [`LiveCounters::delivered`].
    pub delivered: [u64; 2],
    /// See [`LiveCounters::duplicates`].
    pub duplicates: u64,
    /// See [`LiveCounters::late`].
    pub late: u64,
    /// See [`LiveCounters::jumps`]: held, taken, dropped, held for the start.
    pub jumps: [u64; 4],
    /// See [`LiveCounters::foreign`].
    pub foreign: [u64; 2],
    /// See [`LiveCounters::copy_mismatches`].
    pub copy_mismatches: u64,
    /// See [`LiveCounters::seq_resets`].
    pub seq_resets: u64,
    /// See [`LiveCounters::gap_seqs`].
    pub gap_seqs: u64,
    /// See [`LiveCounters::gap_runs`].
    pub gap_runs: u64,
    /// See [`LiveCounters::bad_packets`].
    pub bad_packets: u64,
    /// See [`LiveCounters::level_records`].
    pub level_records: u64,
    /// See [`LiveCounters::stale_records`].
    pub stale_records: u64,
    /// See [`LiveCounters::stamps`]: `[line][hardware, software, user]`.
    pub stamps: [[u64; 3]; 2],
    /// See [`LiveCounters::hw`]: one [`LineStamps::lines`] line per line.
    pub hw: Vec<String>,
    /// See [`LiveCounters::snapshot_packets`].
    pub snapshot_packets: u64,
    /// See [`LiveCounters::recovered`].
    pub recovered: u64,
    /// See [`LiveCounters::stale_now`].
    pub stale_now: u64,
    /// See [`LiveCounters::recovery_timeouts`].
    pub recovery_timeouts: u64,
    /// See [`LiveCounters::silences`].
    pub silences: u64,
    /// See [`LiveCounters::silent_now`].
    pub silent_now: u64,
    /// See [`LiveCounters::definition_packets`].
    pub definition_packets: u64,
    /// See [`LiveCounters::bad_definition_packets`].
    pub bad_definition_packets: u64,
    /// See [`LiveCounters::definitions`].
    pub definitions: u64,
    /// See [`LiveCounters::instrument_collisions`].
    pub instrument_collisions: u64,
    /// See [`LiveCounters::definitions_refused`].
    pub definitions_refused: u64,
    /// See [`LiveCounters::definitions_dropped`].
    pub definitions_dropped: u64,
    /// See [`LiveCounters::side_foreign`]: snapshot feed, definition feed.
    pub side_foreign: [u64; 2],
}

impl LiveCounters {
    /// A copy of every counter.
    pub fn report(&self) -> LiveReport {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LiveReport {
            channel: self.channel,
            datagrams: [ld(&self.datagrams[0]), ld(&self.datagrams[1])],
            refused: [ld(&self.refused[0]), ld(&self.refused[1])],
            delivered: [ld(&self.delivered[0]), ld(&self.delivered[1])],
            duplicates: ld(&self.duplicates),
            late: ld(&self.late),
            jumps: [ld(&self.jumps[0]), ld(&self.jumps[1]), ld(&self.jumps[2]), ld(&self.jumps[3])],
            foreign: [ld(&self.foreign[0]), ld(&self.foreign[1])],
            copy_mismatches: ld(&self.copy_mismatches),
            seq_resets: ld(&self.seq_resets),
            gap_seqs: ld(&self.gap_seqs),
            gap_runs: ld(&self.gap_runs),
            bad_packets: ld(&self.bad_packets),
            level_records: ld(&self.level_records),
            stale_records: ld(&self.stale_records),
            stamps: self.stamps.each_ref().map(|l| l.each_ref().map(ld)),
            hw: self.hw.lines(),
            snapshot_packets: ld(&self.snapshot_packets),
            recovered: ld(&self.recovered),
            stale_now: ld(&self.stale_now),
            recovery_timeouts: ld(&self.recovery_timeouts),
            silences: ld(&self.silences),
            silent_now: ld(&self.silent_now),
            definition_packets: ld(&self.definition_packets),
            bad_definition_packets: ld(&self.bad_definition_packets),
            definitions: ld(&self.definitions),
            instrument_collisions: ld(&self.instrument_collisions),
            definitions_refused: ld(&self.definitions_refused),
            definitions_dropped: ld(&self.definitions_dropped),
            side_foreign: [ld(&self.side_foreign[0]), ld(&self.side_foreign[1])],
        }
    }
}

impl LiveReport {
    /// Which clock stamped the datagrams: `hardware`, `software`, `user`, a mix (`software+user`), or `none`.
    pub fn stamp_clock(&self) -> String {
        let names: Vec<&str> = ["hardware", "software", "user"]
            .into_iter()
            .zip([0, 1, 2].map(|k| self.stamps[0][k] + self.stamps[1][k]))
            .filter(|(_, n)| *n > 0)
            .map(|(s, _)| s)
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join("+")
        }
    }

    /// `feed format=mdp3 channel=310 datagrams=a/b refused=a/b delivered=a/b duplicates=.. late=..
    /// jumps_held=.. jumps_taken=.. jumps_dropped=.. start_held=.. lost_seqs=.. ...`: one channel's; `a/b` figures are per line, the others
    /// the channel's arbitrated stream's (a jump is held or taken once, whichever line brought it).
    pub fn line(&self) -> String {
        format!(
            "feed format=mdp3 channel={} datagrams={}/{} refused={}/{} delivered={}/{} duplicates={} late={} jumps_held={} jumps_taken={} jumps_dropped={} start_held={} lost_seqs={} lost_runs={} bad_packets={} level_records={} stale_records={} snapshot_packets={} recovered={} stale_now={} recovery_timeouts={} foreign_sources={}/{} copy_mismatches={} seq_resets={} silences={} silent_now={} definitions={} definition_packets={} bad_definition_packets={} definitions_refused={} definitions_dropped={} foreign_side={}/{} instrument_collisions={} ts_recv={} stamps={}",
            self.channel,
            self.datagrams[0],
            self.datagrams[1],
            self.refused[0],
            self.refused[1],
            self.delivered[0],
            self.delivered[1],
            self.duplicates,
            self.late,
            self.jumps[0],
            self.jumps[1],
            self.jumps[2],
            self.jumps[3],
            self.gap_seqs,
            self.gap_runs,
            self.bad_packets,
            self.level_records,
            self.stale_records,
            self.snapshot_packets,
            self.recovered,
            self.stale_now,
            self.recovery_timeouts,
            self.foreign[0],
            self.foreign[1],
            self.copy_mismatches,
            self.seq_resets,
            self.silences,
            self.silent_now,
            self.definitions,
            self.definition_packets,
            self.bad_definition_packets,
            self.definitions_refused,
            self.definitions_dropped,
            self.side_foreign[0],
            self.side_foreign[1],
            self.instrument_collisions,
            self.stamp_clock(),
            stamps_text(&self.stamps)
        )
    }
}

/// Per line, `a:H/S/U,b:H/S/U`: datagrams stamped by the NIC (hardware), the kernel (software), this process
/// (user).
pub fn stamps_text(stamps: &[[u64; 3]]) -> String {
    let each = stamps.iter().zip(["a", "b"]).map(|(s, l)| format!("{l}:{}/{}/{}", s[0], s[1], s[2]));
    each.collect::<Vec<_>>().join(",")
}

/// What `ts_recv_ns` is, from the stamps of every line (`[line][hardware, software, user]`): hardware only when
/// every stamp was (a mix is as good as its worst), `None` before any datagram.
pub fn ts_recv_clock_of(stamps: &[[u64; 3]]) -> mdfan_wire::control::TsRecvClock {
    use mdfan_wire::control::TsRecvClock;
    let seen = |k: usize| stamps.iter().any(|s| s[k] > 0);
    if seen(2) {
        TsRecvClock::User
    } else if seen(1) {
        TsRecvClock::Software
    } else if seen(0) {
        TsRecvClock::Hardware
    } else {
        TsRecvClock::None
    }
}

/// Each line's hardware stamping state and PHC mapping, set once the lines are open; read by the report.
#[derive(Debug, Default)]
pub struct LineStamps(std::sync::OnceLock<Vec<LineStamp>>);

/// One line's name (`a`, `b`), hardware stamping state and PHC mapping.
type LineStamp = (&'static str, mdfan_lines::HwStampState, Option<Arc<mdfan_lines::hwstamp::PhcMap>>);

impl LineStamps {
    /// Records the lines (`a`, `b`) as opened and logs each.
    pub(crate) fn set(&self, lines: Vec<(&'static str, &LineSocket)>, channel: Option<u16>) {
        let ch = channel_label(channel);
        for (n, s) in lines.iter().filter(|(_, s)| s.source_specific_refused()) {
            tracing::warn!(line = n, group = %s.local_addr(),
                "IP_ADD_SOURCE_MEMBERSHIP refused{ch}: the line joined for any source (every datagram's source is still checked)");
        }
        let v: Vec<_> = lines.into_iter().map(|(n, s)| (n, s.hw_state().clone(), s.phc_map().cloned())).collect();
        let _ = self.0.set(v);
        for l in self.lines() {
            match channel {
                Some(c) => tracing::info!("channel={c} {l}"),
                None => tracing::info!("{l}"),
            }
        }
    }

    /// `line=a hw_timestamps=if_available device=lo hardware=false granted=- phc=- note="..."`, with
    /// ` mapping=...` (the PHC offset now and its uncertainty) when hardware stamps are on; one per line.
    pub fn lines(&self) -> Vec<String> {
        let Some(v) = self.0.get() else { return Vec::new() };
        v.iter()
            .map(|(n, hw, phc)| match phc {
                Some(m) => format!("line={n} {} {}", hw.line(), m.line()),
                None => format!("line={n} {}", hw.line()),
            })
            .collect()
    }
}

/// ` channel=ID` for a log line of channel `channel` (`None`: a feed of one channel, ITCH's).
pub(crate) fn channel_label(channel: Option<u16>) -> String {
    channel.map_or(String::new(), |c| format!(" channel={c}"))
}

/// Names a line that could not be opened as the config names it (`lines.a`, `feed.channels[2].snapshot`), with
/// the interface that joins it for a multicast group.
#[derive(Default)]
pub(crate) struct LineKeys {
    keys: Vec<(std::net::SocketAddrV4, String, std::net::Ipv4Addr)>,
}

impl LineKeys {
    /// Adds `line` (under config key `key`, joined on `interface`).
    pub(crate) fn with(mut self, line: &LineAddr, key: &str, interface: std::net::Ipv4Addr) -> LineKeys {
        self.keys.push((line.addr, key.to_owned(), interface));
        self
    }

    /// `e` with the config key of its address (and the interface of a multicast join) in its text.
    pub(crate) fn name(&self, e: LineError) -> LineError {
        match e {
            LineError::Open { addr, what, source } => {
                let Some((_, key, interface)) = self.keys.iter().find(|(a, _, _)| *a == addr) else {
                    return LineError::Open { addr, what, source };
                };
                let on = if addr.ip().is_multicast() { format!(" on interface {interface}") } else { String::new() };
                LineError::Open {
                    addr,
                    what,
                    source: std::io::Error::new(source.kind(), format!("{source} (config key {key}{on})")),
                }
            }
            other => other,
        }
    }
}

/// Logs the datagrams the lines dropped for their source (both live feeds), named by source (the first few), at
/// the first and each time the total doubles (this is the feed thread: a forger's flood must not become a log
/// flood): an operator tells a misconfigured list from a forger. `logged` is the total last logged.
pub(crate) fn log_foreign_sources(foreign: &[SourceCounts; 2], logged: &mut u64, channel: Option<u16>) {
    let total = foreign[0].total() + foreign[1].total();
    if total > logged.saturating_mul(2) {
        let by: Vec<String> = (foreign.iter().zip(["A", "B"]))
            .flat_map(|(f, l)| f.by_source.iter().filter(|e| e.1 > 0).map(move |e| format!("{l}:{}={}", e.0, e.1)))
            .collect();
        tracing::warn!(
            dropped_total = total,
            by_source = by.join(","),
            "datagrams from sources the lines do not list (lines.a.sources, lines.b.sources){}: dropped",
            channel_label(channel)
        );
        *logged = total;
    }
}

/// Feed silence (`lines.silent_after_ms`), for both live feeds: after `after_ns` with no datagram on any line
/// (once one came) one [`FeedState::Silent`] record, and one [`FeedState::Live`] record ahead of the records of
/// the first datagram after it (layout: `mdfan_wire::record`, "Feed status records"). The stream goes on.
#[derive(Debug)]
pub(crate) struct SilenceWatch {
    after_ns: u64,
    silent: bool,
    /// `CLOCK_REALTIME` of the last datagram before the silence.
    since_ns: u64,
    silences: u32,
    /// The last venue position the feed handed out (what the records carry).
    last_venue_pos: u64,
    /// The MDP 3.0 channel watched, for the log (`None`: a feed of one channel).
    channel: Option<u16>,
}

impl SilenceWatch {
    pub(crate) fn new(after_ms: u64) -> SilenceWatch {
        SilenceWatch {
            after_ns: after_ms.saturating_mul(1_000_000),
            silent: false,
            since_ns: 0,
            silences: 0,
            last_venue_pos: 0,
            channel: None,
        }
    }

    /// Watching MDP 3.0 channel `id`: its records' venue positions carry it before any came, and the log names it.
    pub(crate) fn for_channel(mut self, id: u16) -> SilenceWatch {
        self.channel = Some(id);
        self.last_venue_pos = u64::from(id) << mdfan_wire::VENUE_CHANNEL_SHIFT;
        self
    }

    /// After one poll of the lines: `read` datagrams came at `now_ns` (the last before it at `last_datagram_ns`,
    /// 0 before any), whose records are `pending[first_new..]`. Writes the feed status record due, if any, into
    /// `pending` (a `Live` one before `first_new`).
    pub(crate) fn after_poll(
        &mut self,
        now_ns: u64,
        read: usize,
        last_datagram_ns: u64,
        pending: &mut Vec<BookUpdate>,
        first_new: usize,
    ) {
        if read > 0 {
            if self.silent {
                self.silent = false;
                let silence_ns = now_ns.saturating_sub(self.since_ns);
                let r = BookUpdate {
                    ts_recv_ns: now_ns,
                    venue_pos: self.last_venue_pos,
                    ..BookUpdate::feed_status(FeedState::Live, now_ns, silence_ns, self.silences)
                };
                pending.insert(first_new.min(pending.len()), r);
                tracing::info!(
                    silence_ms = silence_ns / 1_000_000,
                    silences = self.silences,
                    "feed live again{}: datagrams on the lines",
                    channel_label(self.channel)
                );
            }
            if let Some(r) = pending.last() {
                self.last_venue_pos = r.venue_pos;
            }
        } else if !self.silent
            && self.after_ns > 0
            && last_datagram_ns > 0
            && now_ns.saturating_sub(last_datagram_ns) > self.after_ns
        {
            self.silent = true;
            self.since_ns = last_datagram_ns;
            self.silences = self.silences.saturating_add(1);
            pending.push(BookUpdate {
                ts_recv_ns: now_ns,
                venue_pos: self.last_venue_pos,
                ..BookUpdate::feed_status(FeedState::Silent, last_datagram_ns, self.after_ns, self.silences)
            });
            tracing::warn!(
                silent_after_ms = self.after_ns / 1_000_000,
                silences = self.silences,
                "feed silent{}: no datagram on any line (a FeedStatus record to every subscriber; the stream goes on)",
                channel_label(self.channel)
            );
        }
    }

    /// Whether the feed is silent now.
    pub(crate) fn is_silent(&self) -> bool {
        self.silent
    }

    /// Silences so far.
    pub(crate) fn silences(&self) -> u32 {
        self.silences
    }
}

/// Which channel owns each instrument_id, for a publisher of several channels ([`Mdp3Channels`]): the first to
/// carry it. Sized for `lines.instruments` per channel at start.
pub(crate) struct Owners {
    by_id: std::collections::HashMap<u32, u16>,
    /// Collisions already logged, by (instrument_id, the intruding channel).
    logged: std::collections::HashSet<(u32, u16)>,
}

impl Owners {
    /// Room for `n` instruments; `seed`: (instrument_id, channel) of the channels' own symbol files, which own
    /// their instruments from the start.
    fn with_capacity(n: usize, seed: &[(u32, u16)]) -> Owners {
        let mut by_id = std::collections::HashMap::with_capacity(n.max(seed.len()));
        by_id.extend(seed.iter().copied());
        Owners { by_id, logged: std::collections::HashSet::new() }
    }

    /// Whether channel `channel` may write `r` (a record about no instrument always may); logs a collision once.
    fn admit(&mut self, r: &BookUpdate, channel: u16) -> bool {
        r.instrument_id == mdfan_wire::CHANNEL_INSTRUMENT_ID || self.admit_id(r.instrument_id, channel)
    }

    /// Whether channel `channel` may write about instrument `id` (its records, its definition): it owns it, or
    /// nobody does yet (it owns it from now on). Logs a collision once.
    fn admit_id(&mut self, id: u32, channel: u16) -> bool {
        let owner = *self.by_id.entry(id).or_insert(channel);
        if owner != channel && self.logged.insert((id, channel)) {
            tracing::error!(
                instrument_id = id,
                owner_channel = owner,
                channel,
                "an instrument_id two channels carry: the later channel's records of it are dropped \
                 (instrument_collisions); CME security ids are unique, so two channels' lines may be crossed"
            );
        }
        owner == channel
    }
}

/// The live CME MDP 3.0 feed handler: the channels of one publisher, polled in turn by the feed thread into
/// the one journal. See the [module docs](self).
pub struct Mdp3Channels {
    channels: Vec<LiveMdp3>,
    /// Which channels ended (`lines.end_after_idle_ms`).
    ended: Vec<bool>,
    /// With more than one channel, who owns each instrument_id.
    owners: Option<Owners>,
    /// Instrument definitions to the conductor (`None` when no channel has a definition feed).
    definitions: Option<DefinitionSender>,
    /// The channel polled first next time (they take turns at going first).
    next: usize,
}

impl Mdp3Channels {
    /// Opens every channel of `channels` (lines, snapshot and definition feeds) as `lines` says; definitions go
    /// into `definitions` (the conductor holds its other end). `owned`: (instrument_id, channel id) the channels'
    /// own symbol files name: with several channels, those instruments are theirs from the start (another
    /// channel's records or definitions of them are refused).
    ///
    /// # Errors
    /// [`LineError`] naming the line's address, the socket call and its config key.
    pub fn open(
        lines: &Mdp3Lines,
        channels: &[Mdp3ChannelConfig],
        ts_recv_clock: crate::TsRecvClockCell,
        definitions: Option<DefinitionSender>,
        owned: &[(u32, u16)],
    ) -> Result<Mdp3Channels, LineError> {
        let opened =
            channels.iter().map(|c| LiveMdp3::open(lines, c, ts_recv_clock.clone())).collect::<Result<Vec<_>, _>>()?;
        let n = opened.len();
        Ok(Mdp3Channels {
            channels: opened,
            ended: vec![false; n],
            owners: (n > 1).then(|| Owners::with_capacity(lines.instruments * n, owned)),
            definitions,
            next: 0,
        })
    }

    /// The channels, in config order.
    pub fn channels(&self) -> &[LiveMdp3] {
        &self.channels
    }

    /// One duty cycle: every channel not ended takes one ([`LiveMdp3::step`]), starting with a different one
    /// each time. Ended once every channel ended.
    ///
    /// # Errors
    /// The first channel's socket read that failed for a reason other than "nothing to read".
    pub(crate) fn step_all(&mut self, writer: &mut JournalWriter) -> Result<Step, LineError> {
        let n = self.channels.len();
        let mut work = 0;
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.ended[i] {
                continue;
            }
            let shared = Shared { owners: self.owners.as_mut(), definitions: self.definitions.as_mut() };
            match self.channels[i].step(writer, shared)? {
                Step::Work(w) => work += w,
                Step::Ended => {
                    self.ended[i] = true;
                    work += 1;
                }
            }
        }
        self.next = (self.next + 1) % n.max(1);
        if self.ended.iter().all(|e| *e) {
            return Ok(Step::Ended);
        }
        Ok(Step::Work(work))
    }
}

impl FeedSource for Mdp3Channels {
    fn step(&mut self, writer: &mut JournalWriter) -> Result<Step, FeedSourceError> {
        Ok(self.step_all(writer)?)
    }
}

/// What the channels of one publisher share, lent to each channel's duty cycle.
pub(crate) struct Shared<'a> {
    owners: Option<&'a mut Owners>,
    definitions: Option<&'a mut DefinitionSender>,
}

/// One live CME MDP 3.0 channel. See the [module docs](self).
pub struct LiveMdp3 {
    rx: LineReceiver<Mdp3Seq>,
    /// The channel id, in the top 16 bits of every record's venue position.
    channel_bits: u64,
    channel_id: u16,
    /// The market recovery (snapshot) feed, read only while an instrument is stale.
    snapshot: Option<LineSocket>,
    snapshot_buf: Vec<u8>,
    /// The instrument definition feed, read every poll.
    definitions: Option<LineSocket>,
    /// Each instrument's `LastUpdateTime` as last handed to the conductor.
    defined: std::collections::HashMap<i32, u64>,
    channel: Mdp3Channel,
    /// Records of the last poll not yet in the journal, from `head`.
    pending: Vec<BookUpdate>,
    head: usize,
    counters: Arc<LiveCounters>,
    end_after_idle_ns: u64,
    /// `CLOCK_REALTIME` of the last datagram read, 0 before the first.
    last_datagram_ns: u64,
    silence: SilenceWatch,
    /// The decoder error last logged, so each new one is logged once (off the hot loop: this is the feed thread).
    errors_logged: u64,
    /// Definition packets refused when last logged.
    definition_errors_logged: u64,
    /// Recovery timeouts already logged.
    timeouts_logged: u64,
    /// Gap runs and recoveries already logged.
    logged: (u64, u64),
    /// Datagrams from foreign sources when last logged.
    logged_foreign: u64,
    /// The side feeds' and the channel set's counts (the feed thread's own, published with the others).
    side_counts: SideCounts,
    /// Definitions refused when last logged.
    refused_logged: u64,
    /// Instruments the definition feed may define (`lines.instruments`).
    defined_capacity: usize,
    /// What the accepts say stamped `ts_recv_ns`.
    ts_recv_clock: crate::TsRecvClockCell,
}

impl LiveMdp3 {
    /// Opens channel `ch`'s lines A and B (and its snapshot and definition feeds) as `lines` says and reserves
    /// every buffer. `ts_recv_clock` is told which clock stamps the datagrams once the first ones came
    /// (hardware when any did, else software, else user), so the accepts sent after it let subscribers measure
    /// wire-to-poll.
    ///
    /// # Errors
    /// [`LineError`] naming the line's address, the socket call that failed and its config key.
    pub fn open(
        lines: &Mdp3Lines,
        ch: &Mdp3ChannelConfig,
        ts_recv_clock: crate::TsRecvClockCell,
    ) -> Result<LiveMdp3, LineError> {
        let mut keys = LineKeys::default();
        let named = [("a", Some(&ch.a), LineRole::A), ("b", Some(&ch.b), LineRole::B)].into_iter().chain([
            ("snapshot", ch.snapshot.as_ref(), LineRole::A),
            ("definitions", ch.definitions.as_ref(), LineRole::A),
        ]);
        for (field, line, role) in named {
            if let Some(line) = line {
                keys = keys.with(line, &format!("{}.{field}", ch.key), lines.line_config(line, role).interface);
            }
        }
        let mut cfg = ReceiverConfig::new(lines.line_config(&ch.a, LineRole::A), lines.line_config(&ch.b, LineRole::B));
        cfg.arbiter = ArbiterConfig {
            gap_timeout_ns: lines.gap_timeout_ms * 1_000_000,
            line_tolerance: lines.line_tolerance,
            confirm_packets: lines.confirm_packets,
            ..ArbiterConfig::default()
        };
        let rx = LineReceiver::open(&cfg, Mdp3Seq).map_err(|e| keys.name(e))?;
        for line in [mdfan_lines::Line::A, mdfan_lines::Line::B] {
            let got = rx.socket(line).rcvbuf_bytes();
            if got < lines.rcvbuf_bytes {
                tracing::warn!(
                    channel = ch.id,
                    line = line.name(),
                    rcvbuf_bytes = got,
                    wanted_bytes = lines.rcvbuf_bytes,
                    "line receive buffer smaller than lines.rcvbuf_bytes: a burst may be lost on both lines (then \
                     the instruments go stale). Raise net.core.rmem_max, or run with CAP_NET_ADMIN"
                );
            }
        }
        // Small buffers: while nothing is stale the snapshot feed is not read, and what queued meanwhile is old;
        // a definition loop is read as it comes.
        let side_feed = |line: &Option<LineAddr>| -> Result<Option<LineSocket>, LineError> {
            let Some(line) = line else { return Ok(None) };
            let cfg = LineConfig { rcvbuf_bytes: 4 << 20, ..lines.line_config(line, LineRole::A) };
            LineSocket::open(&cfg).map(Some).map_err(|e| keys.name(e))
        };
        let snapshot = side_feed(&ch.snapshot)?;
        let definitions = side_feed(&ch.definitions)?;
        let counters = Arc::new(LiveCounters { channel: ch.id, ..LiveCounters::default() });
        let lines_named = vec![("a", rx.socket(mdfan_lines::Line::A)), ("b", rx.socket(mdfan_lines::Line::B))];
        counters.hw.set(lines_named, Some(ch.id));
        let mut channel = Mdp3Channel::with_capacity(lines.instruments);
        channel.set_recovery_timeout_ns(lines.recovery_timeout_ms * 1_000_000);
        let channel_bits = u64::from(ch.id) << mdfan_wire::VENUE_CHANNEL_SHIFT;
        let silence = SilenceWatch::new(lines.silent_after_ms).for_channel(ch.id);
        Ok(LiveMdp3 {
            rx,
            channel_bits,
            channel_id: ch.id,
            snapshot,
            snapshot_buf: vec![0; 65_536],
            definitions,
            defined: std::collections::HashMap::with_capacity(lines.instruments),
            channel,
            pending: Vec::with_capacity(PENDING_RECORDS),
            head: 0,
            counters,
            end_after_idle_ns: lines.end_after_idle_ms * 1_000_000,
            last_datagram_ns: 0,
            silence,
            errors_logged: 0,
            definition_errors_logged: 0,
            timeouts_logged: 0,
            logged: (0, 0),
            logged_foreign: 0,
            side_counts: SideCounts::default(),
            refused_logged: 0,
            defined_capacity: lines.instruments,
            ts_recv_clock,
        })
    }

    /// The channel's id.
    pub fn id(&self) -> u16 {
        self.channel_id
    }

    /// The counters, for the run report and a progress display.
    pub fn counters(&self) -> Arc<LiveCounters> {
        Arc::clone(&self.counters)
    }

    /// The lines' bound addresses (A, B): what a test or a simulator sends to when the config asked for port 0.
    pub fn line_addrs(&self) -> [std::net::SocketAddrV4; 2] {
        [self.rx.socket(mdfan_lines::Line::A).local_addr(), self.rx.socket(mdfan_lines::Line::B).local_addr()]
    }

    /// The snapshot feed's bound address, if the channel has one.
    pub fn snapshot_addr(&self) -> Option<std::net::SocketAddrV4> {
        self.snapshot.as_ref().map(LineSocket::local_addr)
    }

    /// The definition feed's bound address, if the channel has one.
    pub fn definitions_addr(&self) -> Option<std::net::SocketAddrV4> {
        self.definitions.as_ref().map(LineSocket::local_addr)
    }

    /// Reads the snapshot feed while an instrument is stale (up to `POLL_BUDGET` datagrams), handing each packet
    /// to the channel; while nothing is stale, drains it unread (what queued is older than anything needed next).
    /// Returns the datagrams read.
    fn poll_snapshot(&mut self, now_ns: u64) -> Result<usize, LineError> {
        let Some(sock) = &mut self.snapshot else { return Ok(0) };
        let mut read = 0;
        while read < POLL_BUDGET {
            let Some(r) = sock.recv(&mut self.snapshot_buf)? else { break };
            read += 1;
            if !sock.takes_source(r.src) {
                self.side_counts.foreign[0] += 1;
                continue;
            }
            if self.channel.needs_recovery() && !r.truncated {
                let (pending, bits) = (&mut self.pending, self.channel_bits);
                self.channel.on_snapshot_packet(&self.snapshot_buf[..r.len], r.ts_recv_ns, &mut |rec| {
                    pending.push(tagged(rec, bits))
                });
            }
        }
        if let RecoveryStatus::TimedOut { stale, since_ns, snapshot_packets } = self.channel.recovery_status(now_ns) {
            if self.channel.counters().recovery_timeouts > self.timeouts_logged {
                self.timeouts_logged = self.channel.counters().recovery_timeouts;
                let waited_ms = now_ns.saturating_sub(since_ns) / 1_000_000;
                let why = if snapshot_packets == 0 {
                    "the snapshot feed never answered"
                } else {
                    "no snapshot covered them (a loop of another MsgSeqNum sequence, another channel's, or older)"
                };
                tracing::warn!(channel = self.channel_id, stale, waited_ms, snapshot_packets, snapshot_feed = ?self.snapshot_addr(),
                    "market recovery timed out: the instruments stay stale: {why}");
            }
        }
        Ok(read)
    }

    /// Reads the definition feed (up to `POLL_BUDGET` datagrams), from the sources it lists only: each
    /// definition new or changed (by `LastUpdateTime`) goes to the conductor, unless another channel owns its
    /// instrument, its symbol is unusable, its tick size negative, or the channel already defined
    /// `lines.instruments` instruments (each counted, `definitions_refused`). A delete (`SecurityUpdateAction`
    /// `D`) changes nothing: the instrument keeps its last definition. One the conductor's full queue drops is
    /// counted and taken again from the loop's next turn. A packet that does not decode is counted and logged
    /// once per doubling. Returns the datagrams read.
    fn poll_definitions(&mut self, shared: &mut Shared<'_>) -> Result<usize, LineError> {
        let (Some(sock), Some(to_conductor)) = (&mut self.definitions, shared.definitions.as_deref_mut()) else {
            return Ok(0);
        };
        let mut owners = shared.owners.as_deref_mut();
        let mut read = 0;
        let (defined, c, channel) = (&mut self.defined, &mut self.side_counts, self.channel_id);
        let capacity = self.defined_capacity;
        while read < POLL_BUDGET {
            let Some(r) = sock.recv(&mut self.snapshot_buf)? else { break };
            read += 1;
            c.definition_packets += 1;
            if !sock.takes_source(r.src) {
                c.foreign[1] += 1;
                continue;
            }
            if r.truncated {
                c.bad_definition_packets += 1;
                continue;
            }
            let decoded = mdfan_feed::mdp3::decode_definition_packet(&self.snapshot_buf[..r.len], r.ts_recv_ns, |d| {
                let id = d.security_id as u32;
                if d.update_action == b'D' || defined.get(&d.security_id) == Some(&d.last_update_time_ns) {
                    return;
                }
                let usable = d.instrument_def().is_some() && d.min_price_increment_e9.is_none_or(|t| t >= 0);
                let room = defined.len() < capacity || defined.contains_key(&d.security_id);
                if !usable || !room || owners.as_deref_mut().is_some_and(|o| !o.admit_id(id, channel)) {
                    c.definitions_refused += 1;
                    return;
                }
                if to_conductor.send(DefinitionEntry::Mdp3 { channel, definition: *d }) {
                    defined.insert(d.security_id, d.last_update_time_ns);
                    c.definitions += 1;
                } else {
                    c.definitions_dropped += 1;
                }
            });
            if let Err(e) = decoded {
                c.bad_definition_packets += 1;
                if c.bad_definition_packets > self.definition_errors_logged.saturating_mul(2) {
                    self.definition_errors_logged = c.bad_definition_packets;
                    tracing::warn!(channel, bad_definition_packets = c.bad_definition_packets, cause = %e,
                        "instrument definition packet refused");
                }
            }
        }
        if c.definitions_refused > self.refused_logged.saturating_mul(2) {
            self.refused_logged = c.definitions_refused;
            tracing::warn!(
                channel,
                definitions_refused = c.definitions_refused,
                defined = defined.len(),
                capacity,
                "instrument definitions refused: another channel's instrument, an unusable symbol or \
                tick, or more instruments than lines.instruments"
            );
        }
        Ok(read)
    }

    /// One duty cycle: the pending records into the journal; if they all went in, one poll of the lines.
    ///
    /// # Errors
    /// A socket read that failed for a reason other than "nothing to read" ([`LineError::Recv`]).
    pub(crate) fn step(&mut self, writer: &mut JournalWriter, mut shared: Shared<'_>) -> Result<Step, LineError> {
        let mut written = self.drain(writer, &mut shared);
        if self.head < self.pending.len() {
            return Ok(Step::Work(written)); // the journal is full: the sockets hold the rest
        }
        let now_ns = realtime_ns();
        let snapshot_read = self.poll_snapshot(now_ns)? + self.poll_definitions(&mut shared)?;
        written += self.drain(writer, &mut shared);
        if self.head < self.pending.len() {
            return Ok(Step::Work(written));
        }
        let first_new = self.pending.len();
        let delivered_before = self.rx.arbiter_counters().delivered;
        let (channel, pending, bits) = (&mut self.channel, &mut self.pending, self.channel_bits);
        let mut out = |r: &BookUpdate| pending.push(tagged(r, bits));
        let read = self.rx.poll(now_ns, POLL_BUDGET, &mut |e| match e {
            Event::Data(d) => {
                channel.on_packet(d.payload, d.ts_recv_ns, &mut out);
            }
            Event::Gap { first, last } => {
                channel.on_lost_packets(first, last, now_ns, &mut out);
            }
            // The copy delivered may be what the venue did not send: as a loss (stale, recovered).
            Event::CopyMismatch { seq } => {
                channel.on_lost_packets(seq, seq, now_ns, &mut out);
            }
            // The venue restarted its MsgSeqNum: stale until the snapshot feed of the new sequence covers it.
            Event::SeqReset { first } => {
                channel.on_seq_reset(first, now_ns, &mut out);
            }
        })?;
        // What keeps the feed live: packets delivered, new to the channel. A stray or forged stream (cut short, no
        // MDP 3.0 packet, from a source the line does not list) or a replay of packets already delivered does not.
        let delivered = self.rx.arbiter_counters().delivered;
        let heard = (delivered[0] + delivered[1] - delivered_before[0] - delivered_before[1]) as usize;
        let silent = self.silence.is_silent();
        self.silence.after_poll(now_ns, heard, self.last_datagram_ns, &mut self.pending, first_new);
        if read > 0 || snapshot_read > 0 || silent != self.silence.is_silent() {
            if heard > 0 {
                self.last_datagram_ns = now_ns;
            }
            self.publish_counters();
        } else if self.end_after_idle_ns > 0
            && self.last_datagram_ns > 0
            && now_ns.saturating_sub(self.last_datagram_ns) > self.end_after_idle_ns
            // a recovery under way (with a snapshot feed to recover from) finishes or times out first
            && !(self.snapshot.is_some() && matches!(self.channel.recovery_status(now_ns), RecoveryStatus::Waiting { .. }))
        {
            // The end of a played capture: a run of seqs still open is reported before the stream ends.
            let (channel, pending, bits) = (&mut self.channel, &mut self.pending, self.channel_bits);
            self.rx.flush(&mut |e| {
                if let Event::Gap { first, last } = e {
                    channel.on_lost_packets(first, last, now_ns, &mut |r| pending.push(tagged(r, bits)));
                }
            });
            written += self.drain(writer, &mut shared);
            self.publish_counters();
            if self.head == self.pending.len() {
                return Ok(Step::Ended);
            }
        }
        written += self.drain(writer, &mut shared);
        Ok(Step::Work(written.max(read + snapshot_read)))
    }

    /// Writes pending records into the journal until it is full; returns how many went in. With several
    /// channels, a record of an instrument another channel owns is dropped and counted.
    fn drain(&mut self, writer: &mut JournalWriter, shared: &mut Shared<'_>) -> usize {
        match shared.owners.as_deref_mut() {
            None => drain_pending(&mut self.pending, &mut self.head, writer),
            Some(owners) => {
                let (channel, collisions) = (self.channel_id, &mut self.side_counts.collisions);
                drain_pending_where(&mut self.pending, &mut self.head, writer, |r| {
                    let admit = owners.admit(r, channel);
                    *collisions += u64::from(!admit);
                    admit
                })
            }
        }
    }

    fn publish_counters(&mut self) {
        let c = &*self.counters;
        let st = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let lines = self.rx.line_counters();
        let arb = self.rx.arbiter_counters();
        let ch = self.channel.counters();
        for i in 0..2 {
            st(&c.datagrams[i], lines.datagrams[i]);
            st(&c.refused[i], lines.truncated[i] + lines.refused[i]);
            st(&c.delivered[i], arb.delivered[i]);
        }
        for (line, kinds) in c.stamps.iter().enumerate() {
            for (k, a) in kinds.iter().enumerate() {
                st(a, lines.stamps[line][k]);
            }
        }
        use mdfan_wire::control::TsRecvClock;
        let clock = ts_recv_clock_of(&lines.stamps);
        if clock != self.ts_recv_clock.get() && clock != TsRecvClock::None {
            self.ts_recv_clock.set(clock);
        }
        st(&c.duplicates, arb.duplicates);
        st(&c.late, arb.late);
        st(&c.jumps[0], arb.jumps_held);
        st(&c.jumps[1], arb.jumps_taken);
        st(&c.jumps[2], arb.jumps_dropped);
        st(&c.jumps[3], arb.start_held);
        let checks = self.rx.arbiter().check_counters();
        st(&c.foreign[0], checks.foreign[0].total());
        st(&c.foreign[1], checks.foreign[1].total());
        st(&c.copy_mismatches, checks.copy_mismatches);
        st(&c.seq_resets, ch.seq_resets);
        log_foreign_sources(&checks.foreign, &mut self.logged_foreign, Some(self.channel_id));
        st(&c.gap_seqs, arb.gap_seqs);
        st(&c.gap_runs, arb.gap_events);
        st(&c.bad_packets, ch.bad_packets);
        st(&c.level_records, ch.level_records);
        st(&c.stale_records, ch.rpt_seq_stale_records + ch.lost_stale_records + ch.stale_on_sight);
        st(&c.snapshot_packets, ch.snapshot_packets);
        st(&c.recovered, ch.recovered);
        st(&c.stale_now, ch.stale_now);
        st(&c.recovery_timeouts, ch.recovery_timeouts);
        st(&c.silences, u64::from(self.silence.silences()));
        st(&c.silent_now, u64::from(self.silence.is_silent()));
        let side = &self.side_counts;
        st(&c.definition_packets, side.definition_packets);
        st(&c.definitions, side.definitions);
        st(&c.bad_definition_packets, side.bad_definition_packets);
        st(&c.instrument_collisions, side.collisions);
        st(&c.definitions_refused, side.definitions_refused);
        st(&c.definitions_dropped, side.definitions_dropped);
        st(&c.side_foreign[0], side.foreign[0]);
        st(&c.side_foreign[1], side.foreign[1]);
        // What an operator must hear of at once (this is the feed thread, not the hot loop): a loss on both lines,
        // and each recovery from the snapshot feed.
        let channel = self.channel_id;
        if arb.gap_events > self.logged.0 {
            tracing::warn!(channel, runs = arb.gap_events - self.logged.0, lost_seqs_total = arb.gap_seqs,
                stale_instruments = ch.stale_now,
                "MsgSeqNums lost on both lines A and B: the instruments they may touch are marked stale until recovered");
            self.logged.0 = arb.gap_events;
        }
        if ch.recovered > self.logged.1 {
            tracing::info!(
                channel,
                recovered = ch.recovered - self.logged.1,
                recovered_total = ch.recovered,
                stale_instruments = ch.stale_now,
                "instruments rebuilt from the market recovery (snapshot) feed"
            );
            self.logged.1 = ch.recovered;
        }
        if ch.bad_packets > self.errors_logged {
            self.errors_logged = ch.bad_packets;
            if let Some(e) = self.channel.last_error() {
                tracing::warn!(channel, bad_packets = ch.bad_packets, cause = %e, "MDP 3.0 packet refused");
            }
        }
    }
}

/// What a channel counts of its side feeds and its place among the channels (published into [`LiveCounters`]).
#[derive(Debug, Default)]
struct SideCounts {
    definition_packets: u64,
    definitions: u64,
    bad_definition_packets: u64,
    definitions_refused: u64,
    definitions_dropped: u64,
    /// Snapshot feed, definition feed.
    foreign: [u64; 2],
    collisions: u64,
}

/// `r` with the channel's id (`bits`, already shifted) in its venue position.
#[inline]
fn tagged(r: &BookUpdate, bits: u64) -> BookUpdate {
    BookUpdate { venue_pos: r.venue_pos | bits, ..*r }
}

/// Writes `pending[*head..]` into the journal until it is full and returns how many went in; once all went in,
/// empties `pending` (its capacity kept) and resets `head`. The live feeds' hand-off: records of a poll that did
/// not fit wait here, and the lines are not read again until they are in.
pub(crate) fn drain_pending(pending: &mut Vec<BookUpdate>, head: &mut usize, writer: &mut JournalWriter) -> usize {
    drain_pending_where(pending, head, writer, |_| true)
}

/// As [`drain_pending`], leaving out (never writing) the records `keep` refuses; they count as gone through.
pub(crate) fn drain_pending_where(
    pending: &mut Vec<BookUpdate>,
    head: &mut usize,
    writer: &mut JournalWriter,
    mut keep: impl FnMut(&BookUpdate) -> bool,
) -> usize {
    let mut written = 0;
    while *head < pending.len() {
        let r = &pending[*head];
        if keep(r) {
            if !writer.try_push(r) {
                break;
            }
            written += 1;
        }
        *head += 1;
    }
    if *head == pending.len() {
        pending.clear();
        *head = 0;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::control::TsRecvClock;

    #[test]
    fn ts_recv_is_hardware_only_when_every_stamp_was() {
        assert_eq!(ts_recv_clock_of(&[[0; 3]; 2]), TsRecvClock::None);
        assert_eq!(ts_recv_clock_of(&[[10, 0, 0], [7, 0, 0]]), TsRecvClock::Hardware);
        assert_eq!(ts_recv_clock_of(&[[10, 0, 0], [6, 1, 0]]), TsRecvClock::Software, "one software stamp on B");
        assert_eq!(ts_recv_clock_of(&[[10, 3, 1], [0; 3]]), TsRecvClock::User);
        assert_eq!(stamps_text(&[[10, 0, 0], [6, 1, 0]]), "a:10/0/0,b:6/1/0");
    }
}
