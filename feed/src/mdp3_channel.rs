//! One CME MDP 3.0 incremental channel as a live feed handler sees it, sans I/O: arbitrated packets in
//! (`MsgSeqNum` order, after the A/B arbitration of `mdfan-lines`), records out.
//!
//! - [`Mdp3Channel::on_packet`]: decodes one packet ([`Mdp3Decoder::decode_book_packet`]) and hands each book
//!   entry to the caller as a price-level record ([`book_record`](crate::mdp3::book_record)), and each `RptSeq`
//!   jump as a [`Kind::InstrumentStale`] record naming the security ([`stale_record`]). A packet the decoder
//!   refuses is counted (the error is kept for the report) and the channel goes on.
//! - [`Mdp3Channel::on_lost_packets`]: packets neither line delivered (`mdfan_lines::Event::Gap`). A lost packet
//!   may have carried an update of any instrument of the channel, so every security the channel has carried so far
//!   is marked stale: one [`Kind::InstrumentStale`] record each ([`StaleBook::PriceLevel`]), its venue
//!   position the first lost `MsgSeqNum` and the record's index among these,
//!   `order_id` = that same `MsgSeqNum` and `size` = the number of packets lost (saturated to `u32`), flag
//!   [`flags::MAYBE_BAD_BOOK`] (the per-`RptSeq` stale records carry no flag). A gap is never silent.
//! - [`Mdp3Channel::on_snapshot_packet`]: market recovery. Packets of the channel's market recovery (snapshot)
//!   feed, SnapshotFullRefresh38 per instrument ([`decode_snapshot_packet`]). While a security is stale, a
//!   snapshot of it is applied when it covers what made it stale (`LastMsgSeqNumProcessed` at or past the last
//!   lost `MsgSeqNum`, or the packet that showed its `RptSeq` jump) and is not older than the book the channel
//!   has (`RptSeq` at or above the last `RptSeq` the channel took for it): the channel emits a [`Kind::Clear`]
//!   for the instrument ([`snapshot_clear_record`]: flags [`flags::MBP`] | [`flags::SNAPSHOT`], `order_id` =
//!   the snapshot's `RptSeq`, venue seq = its `LastMsgSeqNumProcessed`), then one [`Kind::LevelNew`] per book
//!   level ([`snapshot_level_record`]: outright and implied, flagged like the incremental level records plus
//!   `SNAPSHOT`, `LAST` on the last), and the security is good again. The decoder's `RptSeq` for it is set to
//!   the snapshot's, so incremental entries already in the snapshot (`RptSeq` at or below) are dropped and the
//!   next one is checked against it. An older snapshot is ignored (the next loop brings a newer one); so is a
//!   snapshot of a security that is not stale (counted in [`ChannelCounters::snapshots_ignored`]).
//!
//! **Good again**: for subscribers, the `Clear` flagged `SNAPSHOT` that follows an `InstrumentStale` of the same
//! instrument is the signal: `mdfan_wire::MbpBook` drops its stale mark on it, and the levels that follow (up
//! to the one flagged `LAST`) are the book as of the snapshot. For the caller, [`Mdp3Channel::needs_recovery`]
//! says whether anything is stale (so a live handler reads the snapshot feed only then, as CME recommends),
//! [`Mdp3Channel::is_stale`] asks per security, and [`Mdp3Channel::recovery_status`] reports a recovery that
//! takes longer than [`Mdp3Channel::set_recovery_timeout_ns`] (counted once per episode in
//! [`ChannelCounters::recovery_timeouts`]; the securities stay stale, the caller logs it, e.g. a snapshot feed
//! that never answered: [`RecoveryStatus::TimedOut`] with `snapshot_packets` 0).
//!
//! **A hole of unknown content makes the channel stale.** A lost packet may also have carried the first messages
//! of a security the channel has not seen yet, whose `RptSeq` cannot show the jump. So from a loss on, until a
//! full snapshot loop after it covered every security of the channel, a security first seen in the incremental
//! feed is marked stale on sight (one [`Kind::InstrumentStale`] before its first record, `order_id` the hole's
//! first `MsgSeqNum`, `size` its packets, flag [`flags::MAYBE_BAD_BOOK`]; counted in
//! [`ChannelCounters::stale_on_sight`]) and waits for a snapshot like the others; a security first seen in a
//! snapshot that covers the hole is taken from it (stale mark, then its `Clear` and levels). The loop has
//! covered the channel when snapshots covering the hole came for as many securities as its `TotNumReports`;
//! [`Mdp3Channel::channel_hole`] says whether one is open, [`Mdp3Channel::needs_recovery`] is true meanwhile.
//!
//! The caller owns the sockets, the clock and the journal: this type makes no syscall. After warm-up (the
//! channel's securities seen once) it allocates nothing: the security table is reserved up front
//! ([`Mdp3Channel::with_capacity`]) and grows only past it.
//!
//! Source: CME Client Systems Wiki, "MDP 3.0 - Market Recovery" (a gap on both feeds: recover the instruments
//! from the snapshot channel; `LastMsgSeqNumProcessed` and `RptSeq` synchronise a snapshot with the incremental
//! feed) and "MDP 3.0 - Packet Sequence Number".

use rustc_hash::FxHashMap;

use mdfan_wire::{flags, venue_position, BookUpdate, StaleBook};

use crate::mdp3::{
    book_record_at, decode_snapshot_packet, snapshot_clear_record, snapshot_level_record, stale_record, BookEntry,
    BookSink, DecodeError, Event, Mdp3Decoder, MessageInfo, SnapshotRefresh,
};

/// How long [`Mdp3Channel::recovery_status`] waits before it reports [`RecoveryStatus::TimedOut`] by default:
/// 5 s (a CME snapshot loop takes well under that on most channels).
pub const DEFAULT_RECOVERY_TIMEOUT_NS: u64 = 5_000_000_000;

/// What a channel counted (all since construction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelCounters {
    /// Packets handed to [`Mdp3Channel::on_packet`].
    pub packets: u64,
    /// Of those, refused by the decoder (see [`Mdp3Channel::last_error`]).
    pub bad_packets: u64,
    /// Price-level records emitted (book entries, `Clear` for a book reset).
    pub level_records: u64,
    /// `InstrumentStale` records emitted for `RptSeq` jumps.
    pub rpt_seq_stale_records: u64,
    /// Runs of packets lost on both lines ([`Mdp3Channel::on_lost_packets`] calls).
    pub lost_runs: u64,
    /// Packets lost on both lines.
    pub lost_packets: u64,
    /// `InstrumentStale` records emitted for lost packets (securities marked, summed over the runs).
    pub lost_stale_records: u64,
    /// Securities that went from good to stale (by a loss or an `RptSeq` jump).
    pub stale_marked: u64,
    /// Securities stale now (a gauge: marked and not recovered yet).
    pub stale_now: u64,
    /// Packets handed to [`Mdp3Channel::on_snapshot_packet`].
    pub snapshot_packets: u64,
    /// Of those, refused by the decoder (see [`Mdp3Channel::last_error`]).
    pub bad_snapshot_packets: u64,
    /// SnapshotFullRefresh38 messages seen.
    pub snapshots: u64,
    /// Snapshots applied: each brought one stale security back (a `Clear` and its levels emitted).
    pub snapshots_applied: u64,
    /// Snapshots ignored: of a security that is not stale (or not of this channel's), or older than needed.
    pub snapshots_ignored: u64,
    /// Of `snapshots_ignored`, those older than needed (the next loop's is awaited).
    pub snapshots_older: u64,
    /// Of `snapshots_ignored`, those of the sequence before a `MsgSeqNum` reset (the snapshot feed's loop still
    /// on the old sequence: its `LastMsgSeqNumProcessed` nearer the old sequence's last than the new one's
    /// position; [`Mdp3Channel::on_seq_reset`]).
    pub snapshots_old_sequence: u64,
    /// Level records emitted from snapshots.
    pub snapshot_level_records: u64,
    /// Securities recovered (stale, then good again from a snapshot).
    pub recovered: u64,
    /// Recovery episodes that outlasted the recovery timeout ([`Mdp3Channel::recovery_status`]).
    pub recovery_timeouts: u64,
    /// Securities first seen while a hole was open: marked stale on sight (module docs).
    pub stale_on_sight: u64,
    /// Holes closed: a snapshot loop after the hole covered every security of the channel.
    pub holes_covered: u64,
    /// `MsgSeqNum` resets taken ([`Mdp3Channel::on_seq_reset`]).
    pub seq_resets: u64,
}

/// Where market recovery stands ([`Mdp3Channel::recovery_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryStatus {
    /// Nothing is stale: the snapshot feed is not needed.
    Idle,
    /// `stale` securities wait for a snapshot since `since_ns` (when the first of them went stale), within the
    /// timeout; `snapshot_packets` came since then.
    Waiting {
        /// Securities stale now.
        stale: u64,
        /// When this episode began, ns since the UNIX epoch (the caller's clock).
        since_ns: u64,
        /// Snapshot packets handed in since.
        snapshot_packets: u64,
    },
    /// As `Waiting`, past the recovery timeout: the securities stay stale; `snapshot_packets` 0 means the
    /// snapshot feed never answered. Counted once per episode in [`ChannelCounters::recovery_timeouts`].
    TimedOut {
        /// Securities stale now.
        stale: u64,
        /// When this episode began, ns since the UNIX epoch.
        since_ns: u64,
        /// Snapshot packets handed in since.
        snapshot_packets: u64,
    },
}

/// Entries of [`Securities`]' cache (a CME channel carries tens to a few thousand securities).
const SLOT_CACHE: usize = 256;

/// Per-security state: the list in first-seen order, an index, and the stale marks.
#[derive(Debug)]
struct Securities {
    list: Vec<i32>,
    index: FxHashMap<i32, usize>,
    /// A direct-mapped cache in front of `index` (slot `security_id % SLOT_CACHE`): a security's index never
    /// changes once given, so a hit is final. `-1` (never a `SecurityID`, checked non-negative) is empty.
    cache: Box<[(i32, u32); SLOT_CACHE]>,
    /// Per security (same order as `list`): `Some(MsgSeqNum)` while stale, the incremental packet a snapshot
    /// must cover (`LastMsgSeqNumProcessed` at or past it) to be applied.
    stale: Vec<Option<u32>>,
    stale_now: u64,
    /// The open hole of unknown content: (first, last) `MsgSeqNum` lost since the channel was last covered.
    hole: Option<(u64, u64)>,
    /// Per security: a snapshot covering the open hole came for it; and how many.
    covered: Vec<bool>,
    covered_now: u64,
    /// When the current recovery episode began, and the snapshot packets seen since.
    since_ns: Option<u64>,
    snapshot_packets_since: u64,
    timeout_counted: bool,
}

impl Securities {
    /// The security's index, and whether it is new.
    #[inline]
    fn slot_new(&mut self, security_id: i32) -> (usize, bool) {
        let c = self.cache[security_id as usize % SLOT_CACHE];
        if c.0 == security_id {
            return (c.1 as usize, false);
        }
        self.slot_miss(security_id)
    }

    /// [`Securities::slot_new`] past its cache: the index (a new security is added), and the cache slot filled.
    #[inline(never)]
    fn slot_miss(&mut self, security_id: i32) -> (usize, bool) {
        let (i, new) = match self.index.get(&security_id) {
            Some(&i) => (i, false),
            None => {
                self.list.push(security_id);
                self.stale.push(None);
                self.covered.push(false);
                self.index.insert(security_id, self.list.len() - 1);
                (self.list.len() - 1, true)
            }
        };
        if let Ok(index) = u32::try_from(i) {
            self.cache[security_id as usize % SLOT_CACHE] = (security_id, index);
        }
        (i, new)
    }

    /// The stale mark of a security first seen while the hole `(first, last)` is open, at `venue_seq` (its
    /// index within the packet is the caller's).
    fn on_sight(&mut self, i: usize, (first, last): (u64, u64), venue_seq: u64, ts_recv_ns: u64) -> BookUpdate {
        self.mark(i, last.min(u64::from(u32::MAX)) as u32, ts_recv_ns);
        BookUpdate {
            ts_recv_ns,
            order_id: first,
            size: (last - first + 1).min(u64::from(u32::MAX)) as u32,
            venue_pos: venue_position(venue_seq, 0),
            flags: flags::MAYBE_BAD_BOOK,
            ..BookUpdate::stale(self.list[i] as u32, StaleBook::PriceLevel)
        }
    }

    /// Marks `i` stale until a snapshot covering `msg_seq_num`; returns whether it was good before.
    fn mark(&mut self, i: usize, msg_seq_num: u32, ts_ns: u64) -> bool {
        let was_good = self.stale[i].is_none();
        self.stale[i] = Some(self.stale[i].map_or(msg_seq_num, |m| m.max(msg_seq_num)));
        if was_good {
            if self.stale_now == 0 {
                self.since_ns = Some(ts_ns);
                self.snapshot_packets_since = 0;
                self.timeout_counted = false;
            }
            self.stale_now += 1;
        }
        was_good
    }

    fn recover(&mut self, i: usize) {
        if self.stale[i].take().is_some() {
            self.stale_now -= 1;
            if self.stale_now == 0 {
                self.since_ns = None;
            }
        }
    }
}

/// [`Mdp3Channel::on_packet`]'s records of one packet.
///
/// A record's index is its book entry's index in the packet, counted by the decoder over every book entry (one
/// whose `RptSeq` is stale after a market recovery too, though not delivered); a stale mark written inside the
/// packet (an instrument first seen after a loss, an `RptSeq` jump) takes the index of the entry it precedes. So
/// the entries' positions do not depend on what this handler lost or recovered: both publishers of a hot-hot pair
/// give each entry the same position.
struct Records<'a, F> {
    secs: &'a mut Securities,
    counters: &'a mut ChannelCounters,
    out: &'a mut F,
    emitted: usize,
}

impl<F: FnMut(&BookUpdate)> Records<'_, F> {
    /// The security's index; a security first seen while a hole is open is marked stale first (its record at
    /// the position `entry` of `info`'s packet).
    #[inline(always)]
    fn sight(&mut self, security_id: i32, info: &MessageInfo, entry: u64) -> usize {
        let (i, new) = self.secs.slot_new(security_id);
        if let (true, Some(hole)) = (new, self.secs.hole) {
            self.counters.stale_marked += 1;
            self.counters.stale_on_sight += 1;
            let r = self.secs.on_sight(i, hole, u64::from(info.msg_seq_num), info.ts_recv_ns);
            self.emitted += 1;
            (self.out)(&BookUpdate { venue_pos: r.venue_pos | entry, ..r });
        }
        i
    }
}

impl<F: FnMut(&BookUpdate)> BookSink for Records<'_, F> {
    #[inline(always)]
    fn book(&mut self, info: &MessageInfo, e: &BookEntry) {
        let entry = u64::from(e.index);
        self.sight(e.security_id, info, entry);
        self.counters.level_records += 1;
        self.emitted += 1;
        (self.out)(&book_record_at(info, e, entry));
    }

    #[inline(always)]
    fn rpt_seq_gap(&mut self, info: &MessageInfo, security_id: i32, expected: u32, got: u32, book_index: u16) {
        let entry = u64::from(book_index);
        let i = self.sight(security_id, info, entry);
        if self.secs.mark(i, info.msg_seq_num, info.ts_recv_ns) {
            self.counters.stale_marked += 1;
        }
        self.counters.rpt_seq_stale_records += 1;
        self.emitted += 1;
        let r = stale_record(info, security_id, expected, got);
        (self.out)(&BookUpdate { venue_pos: r.venue_pos | entry, ..r });
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Mdp3Channel {
    decoder: Mdp3Decoder,
    /// Every security the channel carried, in first-seen order, and their stale marks.
    secs: Securities,
    counters: ChannelCounters,
    last_error: Option<DecodeError>,
    recovery_timeout_ns: u64,
    /// After a `MsgSeqNum` reset: the last `MsgSeqNum` of the sequence before it, until the new sequence passes
    /// it or a loop of the new one covers the channel (a snapshot of the old loop is not a recovery).
    old_sequence_last: Option<u32>,
}

impl Mdp3Channel {
    /// A channel with room for `instruments` securities (decoder `RptSeq` table and the stale list) before it
    /// allocates.
    pub fn with_capacity(instruments: usize) -> Mdp3Channel {
        Mdp3Channel {
            decoder: Mdp3Decoder::with_capacity(instruments),
            secs: Securities {
                list: Vec::with_capacity(instruments),
                index: FxHashMap::with_capacity_and_hasher(instruments, Default::default()),
                cache: Box::new([(-1, 0); SLOT_CACHE]),
                stale: Vec::with_capacity(instruments),
                stale_now: 0,
                hole: None,
                covered: Vec::with_capacity(instruments),
                covered_now: 0,
                since_ns: None,
                snapshot_packets_since: 0,
                timeout_counted: false,
            },
            counters: ChannelCounters::default(),
            last_error: None,
            recovery_timeout_ns: DEFAULT_RECOVERY_TIMEOUT_NS,
            old_sequence_last: None,
        }
    }

    /// Decodes one packet received at `ts_recv_ns` (ns since the UNIX epoch: the datagram's receive stamp) and
    /// hands its records to `out`, in packet order. Returns the records emitted. An `RptSeq` jump marks its
    /// security stale until a snapshot covering this packet. A packet the decoder refuses is counted
    /// (`bad_packets`, [`Mdp3Channel::last_error`]) and, since which securities it carried is unknown, taken as
    /// lost: [`Mdp3Channel::on_lost_packets`] for its `MsgSeqNum` (every security stale until recovered), never a
    /// silent hole in a book.
    pub fn on_packet(&mut self, payload: &[u8], ts_recv_ns: u64, out: &mut impl FnMut(&BookUpdate)) -> usize {
        self.counters.packets += 1;
        let mut records = Records { secs: &mut self.secs, counters: &mut self.counters, out, emitted: 0 };
        let result = self.decoder.decode_book_packet(payload, ts_recv_ns, &mut records);
        let mut emitted = records.emitted;
        if let Err(e) = result {
            self.counters.bad_packets += 1;
            self.last_error = Some(e);
            if let Some(seq) = payload.get(..4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))) {
                emitted += self.on_lost_packets(seq, seq, ts_recv_ns, out);
            }
        }
        if let (Some(old), Some(now)) = (self.old_sequence_last, self.decoder.last_msg_seq_num()) {
            if now >= old {
                self.old_sequence_last = None; // the new sequence is past the old one: no more telling them apart
            }
        }
        self.counters.stale_now = self.secs.stale_now;
        emitted
    }

    /// Packets `first..=last` (`MsgSeqNum`) came on neither line: marks every security carried so far stale (see
    /// the module docs for the record) until a snapshot covering `last`. Returns the records emitted.
    pub fn on_lost_packets(
        &mut self,
        first: u64,
        last: u64,
        ts_recv_ns: u64,
        out: &mut impl FnMut(&BookUpdate),
    ) -> usize {
        let lost = last.saturating_sub(first) + 1;
        self.counters.lost_runs += 1;
        self.counters.lost_packets += lost;
        let last_lost = last.min(u64::from(u32::MAX)) as u32;
        // The channel is stale until a snapshot loop after this hole covers it (module docs).
        self.secs.hole = Some(self.secs.hole.map_or((first, last), |(f, l)| (f.min(first), l.max(last))));
        self.secs.covered.iter_mut().for_each(|c| *c = false);
        self.secs.covered_now = 0;
        for i in 0..self.secs.list.len() {
            let security_id = self.secs.list[i];
            if self.secs.mark(i, last_lost, ts_recv_ns) {
                self.counters.stale_marked += 1;
            }
            out(&BookUpdate {
                ts_recv_ns,
                order_id: first,
                size: lost.min(u64::from(u32::MAX)) as u32,
                venue_pos: venue_position(first, u16::try_from(i).unwrap_or(u16::MAX)),
                flags: flags::MAYBE_BAD_BOOK,
                ..BookUpdate::stale(security_id as u32, StaleBook::PriceLevel)
            });
        }
        self.counters.lost_stale_records += self.secs.list.len() as u64;
        self.counters.stale_now = self.secs.stale_now;
        self.secs.list.len()
    }

    /// The lines' `MsgSeqNum` went back and the arbiter re-based the stream at `first` (`mdfan_lines::Event::
    /// SeqReset`: a venue's sequence reset, confirmed by consecutive datagrams on the lines): the decoder forgets
    /// its `MsgSeqNum` and `RptSeq`s, every security is stale until a snapshot of the new sequence covers `first`
    /// (`LastMsgSeqNumProcessed` at or past it), one [`Kind::InstrumentStale`] each as for a loss (`order_id` =
    /// `first`, `size` 0, venue position `first`), and the channel hole is open at `first` (a security first
    /// seen now is stale on sight). Counted in [`ChannelCounters::seq_resets`]. Returns the records emitted.
    ///
    /// Until the new sequence passes the old one's last `MsgSeqNum`, or a loop of the new sequence covers the
    /// channel, a snapshot whose `LastMsgSeqNumProcessed` is past the new position and nearer the old sequence's
    /// last is the snapshot feed's loop still on the old sequence: ignored (`snapshots_old_sequence`), never taken
    /// as covering the reset.
    pub fn on_seq_reset(&mut self, first: u64, ts_recv_ns: u64, out: &mut impl FnMut(&BookUpdate)) -> usize {
        self.counters.seq_resets += 1;
        // The sequence that just ended (a second reset before its loop came: that one's, not the first's, which
        // would let its loop through); kept when it had no packet.
        if let Some(last) = self.decoder.last_msg_seq_num() {
            self.old_sequence_last = Some(last);
        }
        self.decoder.reset_sequences();
        let must_cover = first.min(u64::from(u32::MAX)) as u32;
        self.secs.hole = Some((first, first));
        self.secs.covered.iter_mut().for_each(|c| *c = false);
        self.secs.covered_now = 0;
        for i in 0..self.secs.list.len() {
            // The old sequence's mark (a higher MsgSeqNum) no longer means anything: replaced.
            self.secs.recover(i);
            if self.secs.mark(i, must_cover, ts_recv_ns) {
                self.counters.stale_marked += 1;
            }
            out(&BookUpdate {
                ts_recv_ns,
                order_id: first,
                venue_pos: venue_position(first, u16::try_from(i).unwrap_or(u16::MAX)),
                flags: flags::MAYBE_BAD_BOOK,
                ..BookUpdate::stale(self.secs.list[i] as u32, StaleBook::PriceLevel)
            });
        }
        self.counters.lost_stale_records += self.secs.list.len() as u64;
        self.counters.stale_now = self.secs.stale_now;
        self.secs.list.len()
    }

    /// Market recovery: decodes one packet of the channel's snapshot feed received at `ts_recv_ns` and applies
    /// the snapshots of stale securities (module docs: a `Clear` then one `LevelNew` per level, in message
    /// order, to `out`). Returns the records emitted. A refused packet emits nothing and is counted (the error
    /// is kept in [`Mdp3Channel::last_error`]). Allocates nothing.
    pub fn on_snapshot_packet(&mut self, payload: &[u8], ts_recv_ns: u64, out: &mut impl FnMut(&BookUpdate)) -> usize {
        self.counters.snapshot_packets += 1;
        self.secs.snapshot_packets_since += 1;
        let (decoder, secs, counters) = (&mut self.decoder, &mut self.secs, &mut self.counters);
        let old_sequence_last = self.old_sequence_last;
        let mut applying: Option<SnapshotRefresh> = None;
        let (mut emitted, mut covered_channel) = (0, false);
        let result = decode_snapshot_packet(payload, ts_recv_ns, |info, event| match event {
            Event::Snapshot(s) => {
                applying = None;
                counters.snapshots += 1;
                if let Some(old) = old_sequence_last {
                    let (done, now) = (s.last_msg_seq_num_processed, decoder.last_msg_seq_num().unwrap_or(0));
                    if done > now && done - now > old.saturating_sub(done) {
                        counters.snapshots_ignored += 1;
                        counters.snapshots_old_sequence += 1;
                        return;
                    }
                }
                let covers_hole = secs.hole.filter(|&(_, last)| u64::from(s.last_msg_seq_num_processed) >= last);
                if let Some(hole) = covers_hole {
                    // A security the channel has not seen, while a hole is open: it may have been in the hole.
                    let (i, new) = secs.slot_new(s.security_id);
                    if new {
                        counters.stale_marked += 1;
                        counters.stale_on_sight += 1;
                        let r = secs.on_sight(i, hole, u64::from(s.last_msg_seq_num_processed), info.ts_recv_ns);
                        out(&r);
                        emitted += 1;
                    }
                }
                let stale = secs.index.get(&s.security_id).and_then(|&i| Some((i, secs.stale[i]?)));
                let Some((i, must_cover)) = stale else {
                    counters.snapshots_ignored += 1;
                    return;
                };
                let older = s.last_msg_seq_num_processed < must_cover
                    || decoder.rpt_seq(s.security_id).is_some_and(|taken| s.rpt_seq < taken);
                if older {
                    counters.snapshots_ignored += 1;
                    counters.snapshots_older += 1;
                    return;
                }
                decoder.resync_rpt_seq(s.security_id, s.rpt_seq);
                secs.recover(i);
                if covers_hole.is_some() && !secs.covered[i] {
                    secs.covered[i] = true;
                    secs.covered_now += 1;
                    if secs.covered_now >= u64::from(s.tot_num_reports) {
                        // The loop after the hole covered every security of the channel.
                        secs.hole = None;
                        counters.holes_covered += 1;
                        covered_channel = true;
                    }
                }
                counters.snapshots_applied += 1;
                counters.recovered += 1;
                out(&snapshot_clear_record(info, s));
                emitted += 1;
                applying = Some(*s);
            }
            Event::SnapshotEntry(e) => {
                if let Some(r) = applying.as_ref().and_then(|s| snapshot_level_record(info, s, e)) {
                    counters.snapshot_level_records += 1;
                    emitted += 1;
                    out(&r);
                }
            }
            _ => {}
        });
        if let Err(e) = result {
            self.counters.bad_snapshot_packets += 1;
            self.last_error = Some(e);
        }
        if covered_channel {
            self.old_sequence_last = None; // the snapshot feed is on the new sequence
        }
        self.counters.stale_now = self.secs.stale_now;
        emitted
    }

    /// Whether any security is stale, or a hole is open (module docs): the caller needs the snapshot feed (and
    /// may leave it otherwise).
    pub fn needs_recovery(&self) -> bool {
        self.secs.stale_now > 0 || self.secs.hole.is_some()
    }

    /// The open hole of unknown content, `(first, last)` `MsgSeqNum`: securities first seen now are stale on
    /// sight until a snapshot loop after it covers the channel (module docs). `None`: no hole, or covered.
    pub fn channel_hole(&self) -> Option<(u64, u64)> {
        self.secs.hole
    }

    /// Whether `security_id` is stale now (marked by a loss or an `RptSeq` jump, not recovered yet).
    pub fn is_stale(&self, security_id: i32) -> bool {
        self.secs.index.get(&security_id).is_some_and(|&i| self.secs.stale[i].is_some())
    }

    /// How long a recovery may take before [`Mdp3Channel::recovery_status`] says [`RecoveryStatus::TimedOut`],
    /// ns ([`DEFAULT_RECOVERY_TIMEOUT_NS`] unless set).
    pub fn set_recovery_timeout_ns(&mut self, timeout_ns: u64) {
        self.recovery_timeout_ns = timeout_ns;
    }

    /// Where market recovery stands at `now_ns` (the caller's clock, as given to the `on_*` calls). The first
    /// call past the timeout in an episode counts [`ChannelCounters::recovery_timeouts`]; the securities stay
    /// stale (the caller logs it and keeps reading the snapshot feed).
    pub fn recovery_status(&mut self, now_ns: u64) -> RecoveryStatus {
        let Some(since_ns) = self.secs.since_ns.filter(|_| self.secs.stale_now > 0) else {
            return RecoveryStatus::Idle;
        };
        let (stale, snapshot_packets) = (self.secs.stale_now, self.secs.snapshot_packets_since);
        if now_ns.saturating_sub(since_ns) <= self.recovery_timeout_ns {
            return RecoveryStatus::Waiting { stale, since_ns, snapshot_packets };
        }
        if !self.secs.timeout_counted {
            self.secs.timeout_counted = true;
            self.counters.recovery_timeouts += 1;
        }
        RecoveryStatus::TimedOut { stale, since_ns, snapshot_packets }
    }

    /// The counters.
    pub fn counters(&self) -> &ChannelCounters {
        &self.counters
    }

    /// The decoder (its own counters: templates, sequence checks).
    pub fn decoder(&self) -> &Mdp3Decoder {
        &self.decoder
    }

    /// The last decode error, naming the packet, message, template and field.
    pub fn last_error(&self) -> Option<&DecodeError> {
        self.last_error.as_ref()
    }

    /// The securities the channel has carried, in first-seen order.
    pub fn securities(&self) -> &[i32] {
        &self.secs.list
    }
}
