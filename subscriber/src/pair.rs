//! Hot-hot: one stream from two publishers of the same venue lines, merged by venue position.
//!
//! Two publishers (two processes, in production on two hosts) ingest the same lines and publish the same
//! records; each record carries its venue position (`wire::record`, "Venue position"), which both compute
//! identically. A [`PairSubscriber`] attaches a ring on each (its *legs*) and hands the strategy one stream: every
//! venue record once, in venue order, first arrival wins, with a `seq` of its own (1, 2, 3, ...). A gap or a
//! stale mark reaches the strategy only when both legs lack the data.
//!
//! ```no_run
//! use std::time::Duration;
//! use mdfan_subscriber::{
//!     Event, IdleStrategy, Idler, Kind, MbpBooks, PairHealth, PairSubscriber, Reconnect, SubscriberConfig,
//! };
//!
//! // One config per publisher; each leg reconnects under its own policy while the other carries the stream.
//! let mut a = SubscriberConfig::new("10.0.0.1:7700", "my-strategy");
//! a.reconnect = Some(Reconnect::within(Duration::from_secs(30)));
//! let b = SubscriberConfig { endpoint: "10.0.0.2:7700".into(), ..a.clone() };
//! let mut pair = PairSubscriber::connect(&a, &b)?;
//! // CME MDP 3.0 sends price levels (MbpBooks); an order-level feed (DBN, ITCH) would take Books
//! let (mut books, mut idler, mut done) = (MbpBooks::with_capacity(4096), Idler::new(IdleStrategy::BusySpin), false);
//! while !done {
//!     let mut gap = false;
//!     let n = pair.poll(256, |event| match event {
//!         Event::Record(r) if r.kind() == Some(Kind::EndOfStream) => done = true,
//!         Event::Record(r) => {
//!             let _ = books.apply(r); // one stream: each venue record once, in venue order
//!         }
//!         // both publishers lacked the data: the books are stale until a snapshot passes
//!         Event::Gap { .. } => gap = true,
//!         Event::Closed(_) => done = true,
//!         Event::Stale { .. } | Event::Corrupt { .. } => {}
//!     });
//!     if let Some(why) = pair.last_gap().filter(|_| gap) {
//!         eprintln!("merged gap at seq {}: {:?} on leg {}, the other {:?}", why.seq, why.cause, why.leg, why.other);
//!     }
//!     idler.idle(n);
//!     match pair.maintain_if_due() {
//!         Some(PairHealth::LegDown { leg, .. }) => eprintln!("publisher {leg} down; the other carries on"),
//!         Some(PairHealth::Ended(_)) => break,
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Merge`] is the rule without any I/O (tests drive it directly):
//!
//! - **High-water mark.** Per channel ([`BookUpdate::venue_channel`]), the last venue position delivered. A
//!   record at or below it is a duplicate: counted, and compared with the copy delivered (the last
//!   [`RECENT_RECORDS`] kept; later ones are counted `uncompared`) on every field the venue decides (`seq`,
//!   `ts_send_ticks` and `ts_recv_ns` are each publisher's own). Copies that differ are a *divergence*: the two
//!   publishers disagree, so the leg whose copy came second is left out of the merge from then on
//!   (`quarantined`: an operator's matter, its session goes on), and the merged books are declared stale
//!   ([`Event::Gap`]) until the other leg's snapshot passes through.
//! - **In step.** A leg is *in step* on a channel when it holds every record of that channel past the mark:
//!   from its start (a stream from seq 1), from its snapshot's end (`SnapshotEnd` carries the venue position it
//!   is consistent with), or from its first record after a loss of its own (a ring gap, a reconnect). Only a leg
//!   in step delivers past the mark. The records of a leg out of step wait (`waited`, up to [`WAITING_RECORDS`];
//!   past that they are dropped, `held`) while the other leg is up and in step, and pass or turn duplicates once
//!   it has caught up: a leg that leads never has to fall behind to be in step again. When neither leg is in
//!   step, the merged stream takes the out-of-step leg's record after an [`Event::Gap`] one seq wide (how many
//!   venue records were lost is not known): the books are stale until a leg's snapshot passes through
//!   ([`PairSubscriber`] asks for one). A base leg that lost records of its own before any mark was known
//!   (during a file's opening venue snapshot, say) gives a gap too.
//! - **Stale marks** (`InstrumentStale`) are not merged by position (a publisher writes a loss's marks at the
//!   first lost position, whatever the other leg had there). A leg's mark for a loss the other leg, up and in
//!   step, may fill is dropped (`stale_filled`), and that leg is out of step until its own recovery of the
//!   instrument and until the mark has passed both the loss and the recovery's position (its publisher drops
//!   the instrument's records up to there, by `RptSeq`). A market recovery (price-level records flagged
//!   `SNAPSHOT`) is its own leg's repair, at a position of its own choosing, so it never passes while the other
//!   leg is in the merge. A mark reaches the strategy only from a leg the other cannot vouch for: a loss both
//!   legs had. From there the merged stream is that leg's alone (`benched` on the other), its later marks and
//!   its own market recoveries included, exactly as a single publisher's; the other leg comes back, after a
//!   gap, only when that one goes down.
//! - **A file's opening venue snapshot** (order-level records flagged `SNAPSHOT`, whose positions repeat and are
//!   not in order) is placed by count: the n-th record of an instrument's snapshot is the same on both legs
//!   (both publishers replay the same file), so it passes from whichever leg sends it first, and a leg that
//!   dies in the middle leaves the rest to the other, which goes on from the first record not passed. A leg
//!   that lost records of its own since its start is not counted. After a session snapshot passed, only the
//!   venue snapshot records that follow it on its own leg pass (a snapshot taken while that publisher was still
//!   replaying the opening); that leg lost there is a gap.
//! - **Session snapshots.** The first leg's snapshot (or its stream from seq 1) is the merged stream's start; a
//!   later one passes through only while the merged books are stale, and is otherwise dropped (the leg's own
//!   resync, after its own gap). One that passes puts the books at its leg's point, which may be behind what the
//!   other leg already sent: the other leg learns again from its next record what it holds past the mark, and
//!   waits until the mark reaches it. A repair is asked of the leg in step that is furthest on. While a session
//!   snapshot passes, the other leg's records wait for its end (or its leg going down: a gap). Where no mark is
//!   known yet on a channel, only a leg that holds what the merged stream holds sets it: one streaming from its
//!   seq 1 that lost nothing (when the merged stream began at the start too), or the one whose snapshot the books
//!   came from, continuous since; the other leg waits for it, and its stale mark there is dropped when such a
//!   leg (or one whose snapshot is passing) may have the data. Heartbeats are dropped; a `FeedStatus` passes when it changes what the legs say
//!   together (silent only when every leg that is up is silent). The end of stream passes once every leg in
//!   the merge has sent it (or went down, or fell silent) and nothing of it waits: a leg that ends first may
//!   have less than the other, and one that lags may still have records to give. A leg that shuts down or fails
//!   ends only its leg while the other is up. A leg's own ring gap is a merged gap unless the other leg, in step
//!   and not silent, can give what it lost. A leg silent for [`PairSubscriber::set_leg_give_up`] (default
//!   [`DEFAULT_LEG_GIVE_UP`], kept apart from the session's shorter silence report) vouches for nothing, so what
//!   waits for it goes on with a gap.
//!
//! A publisher with several MDP 3.0 channels: the mark and the steps are per channel; a snapshot's end carries
//! the position of one channel (the last record's), the others are taken from the snapshot leg's first record.
//!
//! **Cost.** In the steady state (both legs in step, nothing waiting, recovering or covered by a snapshot) a
//! venue record takes a fast path: find its channel's mark, then deliver it or compare it as a duplicate. Which
//! legs may take it is recomputed after every other event; a property test checks that the merge hands out and
//! counts exactly what the full rule does on random scripts. The `pair_merge` micro bench times it, and
//! `mdfan-bench plant` gives its cost per record beside the merged stream's latency and each leg's
//! ([`PairSubscriber::with_latency`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use mdfan_fabric::CloseReason;
use mdfan_wire::{flags, BookUpdate, FeedState, Kind};

use crate::{End, Event, Health, State, SubscribeError, Subscriber, SubscriberConfig};

/// How many delivered records a [`Merge`] keeps to compare duplicates with (a power of two; 256 KiB, so the
/// table stays in a core's L2): a copy that comes more than about this many records after the first is counted
/// (`uncompared`), not compared. Kept by venue position in hashed slots, where a later record can take an
/// earlier one's: a copy 4,096 records behind is still compared with probability 1/e. (`mdfan-bench plant`,
/// merge cost, 2026-12-06: 65,536 slots, 4 MiB, cost 37-45 ns per record in hashed slots and 16 ns in consecutive
/// ones, against 11 ns with these 4,096.)
pub const RECENT_RECORDS: usize = 4_096;

/// How many records of a leg that is out of step a [`Merge`] keeps, waiting for the other leg to catch up
/// (4 MiB per leg): past that, a record is dropped and the leg is in step again only once the other leg has
/// passed it.
pub const WAITING_RECORDS: usize = 65_536;

/// The legs of a pair.
pub const LEGS: usize = 2;

/// One leg's counters ([`Merge::leg_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LegStats {
    /// Venue records this leg delivered first (market recoveries and venue snapshots included).
    pub delivered_first: u64,
    /// Venue records that arrived after the other leg's copy.
    pub duplicates: u64,
    /// Duplicates that came too long after the first copy to be compared ([`RECENT_RECORDS`]).
    pub uncompared: u64,
    /// Duplicates that differed from the copy delivered.
    pub divergences: u64,
    /// Records kept waiting because this leg was out of step while the other was in step.
    pub waited: u64,
    /// Records dropped because this leg was out of step while the other was in step and its waiting room
    /// ([`WAITING_RECORDS`]) was full.
    pub held: u64,
    /// Left out of the merge after a divergence.
    pub quarantined: bool,
    /// Left out while the merged stream follows the other leg alone, after a loss both legs had (until that
    /// leg goes down).
    pub benched: bool,
    /// Stale marks dropped because the other leg was in step (it held the data, or marked the loss itself).
    pub stale_filled: u64,
    /// Session snapshots dropped: the merged books did not need them.
    pub snapshots_dropped: u64,
    /// Records of a market recovery or a venue snapshot (flagged `SNAPSHOT` outside a session snapshot) dropped:
    /// the other leg's copy passed, or the merged book did not need them.
    pub recovery_dropped: u64,
    /// Gaps in this leg's own ring.
    pub gaps: u64,
    /// Times this leg went down (ended, vanished, reconnecting).
    pub downs: u64,
    /// How many merged records behind the first copy this leg's last duplicate arrived.
    pub trail_records: u64,
    /// The most it trailed.
    pub max_trail_records: u64,
}

/// The merged stream's counters ([`Merge::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Records delivered to the strategy.
    pub records: u64,
    /// Gaps delivered (neither leg had the data, or a divergence).
    pub gaps: u64,
    /// Divergences seen (both legs).
    pub divergences: u64,
    /// Session snapshots passed through (the first included).
    pub snapshots: u64,

    /// The merged seq due next.
    pub next_seq: u64,
}

/// One instrument's order-level venue snapshot ([`Merge`]'s `venue_counts`).
#[derive(Debug, Clone, Copy, Default)]
struct VenueCount {
    /// Records of it delivered.
    passed: u32,
    /// Records of it each leg sent in its current session.
    seen: [u32; LEGS],
}

/// Per-channel mark: `(channel, last delivered position + 1)`; `None`: not known yet (after a snapshot that did
/// not say it, until the snapshot's leg delivers on that channel).
type Marks = Vec<(u16, Option<u64>)>;

#[derive(Debug, Clone, Default)]
struct Leg {
    up: bool,
    started: bool,
    /// Per channel: this leg holds every record past this key (position + 1); `None` in the table: not known
    /// until its next record there. A channel not in the table takes `default`.
    complete: Marks,
    default: Option<u64>,
    in_snapshot: bool,
    passing: bool,
    /// Its session began with a stream from seq 1 and lost nothing since: its venue snapshot records are counted
    /// ([`VenueCount`]).
    venue_counting: bool,
    /// Instruments whose stale mark from this leg was dropped (the other leg had the data). While any is here
    /// the leg is out of step: it lacks their records. An instrument leaves with the leg's recovery of it, after
    /// which the leg lacks only its records up to the recovery's position (its publisher drops them by
    /// `RptSeq`): the leg is in step again once the mark has passed that position.
    dropped_marks: HashSet<u32>,

    feed_silent: bool,
    /// This leg sent its end of stream (normal), not passed yet.
    ended: bool,
    /// Left out of the merge after a divergence (its copy differed from the one delivered first).
    quarantined: bool,
    /// Left out while the merged stream follows the other leg alone (after a loss both had).
    benched: bool,
    /// Records past the mark kept while this leg is out of step, in its order.
    waiting: VecDeque<BookUpdate>,
    /// Its session reported a silence (set by [`PairSubscriber::maintain`]).
    silent: bool,
    /// The highest venue position this leg sent (any channel), for the end of stream.
    max_pos: u64,
    stats: LegStats,
}

impl Leg {
    /// The key this leg is complete after on `ch`, learning it from a record at `key` when not known.
    fn complete_for(&mut self, ch: u16, key: Option<u64>) -> Option<u64> {
        match self.complete.iter_mut().find(|(c, _)| *c == ch) {
            Some((_, v)) => {
                if v.is_none() {
                    *v = key.map(|k| k - 1);
                }
                *v
            }
            None => match self.default {
                Some(d) => Some(d),
                None => {
                    let v = key.map(|k| k - 1);
                    self.complete.push((ch, v));
                    v
                }
            },
        }
    }

    /// Up, not quarantined, not benched: its records may enter the merge.
    fn usable(&self) -> bool {
        self.up && !self.quarantined && !self.benched
    }

    fn peek_complete(&self, ch: u16) -> Option<u64> {
        self.complete.iter().find(|(c, _)| *c == ch).map_or(self.default, |(_, v)| *v)
    }

    fn set_complete(&mut self, ch: u16, v: Option<u64>) {
        match self.complete.iter_mut().find(|(c, _)| *c == ch) {
            Some((_, old)) => *old = v,
            None => self.complete.push((ch, v)),
        }
    }

    /// A record at `key` this leg cannot deliver yet (out of step) while the other leg can: kept waiting while
    /// there is room; else dropped, and this leg no longer holds it for the merge, so it is in step again only
    /// once the mark has passed it.
    fn hold(&mut self, ch: u16, key: u64, r: &BookUpdate) {
        if self.waiting.len() < WAITING_RECORDS {
            self.stats.waited += 1;
            self.waiting.push_back(*r);
            return;
        }
        self.stats.held += 1;
        let c = self.peek_complete(ch).map_or(key, |c| c.max(key));
        self.set_complete(ch, Some(c));
    }

    /// A loss of its own (ring gap, snapshot start, new session): nothing known until its next records.
    fn discontinuity(&mut self) {
        self.venue_counting = false;
        self.waiting.clear();
        self.complete.clear();
        self.default = None;
    }
}

/// The merge rule, without I/O (module docs). Feed it each leg's events ([`Merge::on_event`]) and tell it when
/// a leg goes down or starts a new session; it calls the callback with the merged events. Allocates nothing per
/// record (the duplicate table is made once; the instrument sets grow only with stale marks and with each
/// instrument's first market recovery or venue snapshot).
pub struct Merge {
    marks: Marks,
    /// The index in `marks` of the fast path's last channel (where it looks first).
    mark_hint: usize,
    legs: [Leg; LEGS],
    /// The leg whose snapshot (or stream from seq 1) the merged books started from, or last passed through.
    base: Option<usize>,
    next_seq: u64,
    /// A merged gap not yet repaired by a snapshot passed through.
    stale: bool,
    /// A snapshot is wanted from a leg (read and cleared by [`Merge::take_snapshot_wanted`]).
    snapshot_wanted: bool,
    /// The table of delivered records (module docs, "Cost"), at [`slot`] of their venue position.
    recent: Box<[BookUpdate; RECENT_RECORDS]>,
    /// Instruments a delivered stale mark made stale, until a recovery or a session snapshot passed.
    stale_instruments: HashSet<u32>,
    /// Order-level venue snapshots (a DBN file's opening), per instrument: how many records of it passed, and
    /// how many each leg sent (module docs).
    venue_counts: HashMap<u32, VenueCount>,
    /// The leg whose session snapshot passed last, while it stays continuous: it holds every record after the
    /// merged books' point, and its venue snapshot records after the snapshot (one taken while its publisher was
    /// still replaying the file's opening snapshot) pass.
    snapshot_leg: Option<usize>,
    /// That leg has sent venue snapshot records since its session snapshot and no venue record yet: losing it
    /// now cuts the merged venue snapshot (a gap).
    venue_tail_open: bool,
    /// After a session snapshot passed: per instrument, the key up to which its book in the snapshot covers its
    /// records (dropped from either leg until one past it comes).
    covered: HashMap<u32, u64>,
    /// A session snapshot passed: the books came whole from it, and no venue snapshot passes after it.
    session_snapshot_passed: bool,

    feed_silent: bool,
    ended: bool,
    last_divergence: Option<Divergence>,
    last_gap: Option<MergedGap>,
    /// A leg's normal end of stream, passed once every usable leg has sent one.
    end_record: Option<BookUpdate>,
    end_reason: Option<CloseReason>,
    /// The leg followed alone after a loss both legs had.
    sole: Option<usize>,
    /// A merged gap to deliver at the next poll (found where no callback was at hand): its cause and leg.
    gap_owed: Option<(GapCause, usize)>,
    /// Per leg: its records may take the fast path ([`Merge::refresh_fast`]).
    fast: [bool; LEGS],
    /// Never the fast path (tests compare both).
    slow_only: bool,
    stats: MergeStats,
}

/// Why the merge delivered a gap ([`Merge::last_gap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapCause {
    /// A leg lost records of its own (a ring gap) and no other leg could give them (down, silent, or out of
    /// step itself).
    LegGap,
    /// A leg lost records while its session snapshot was passing through (the merged books were emptied by its
    /// `SnapshotBegin`).
    SnapshotCut,
    /// A leg's record lay past the mark while no leg held every record between.
    NeitherInStep,
    /// No mark was known yet on the record's channel and the leg the merged stream started from lost records of
    /// its own first.
    BaseLost,
    /// The leg followed alone (after a loss both had), or every leg in the merge, went down: the other comes
    /// back from its next record.
    LegBack,
    /// The stream ended with records that only a leg that never gave them held.
    EndIncomplete,
    /// Two publishers' copies of a venue position differed.
    Divergence,
}

impl GapCause {
    /// The name printed by `mdfan-subscribe` (`cause=`).
    pub fn as_str(self) -> &'static str {
        match self {
            GapCause::LegGap => "leg_gap",
            GapCause::SnapshotCut => "snapshot_cut",
            GapCause::NeitherInStep => "neither_in_step",
            GapCause::BaseLost => "base_lost",
            GapCause::LegBack => "leg_back",
            GapCause::EndIncomplete => "end_incomplete",
            GapCause::Divergence => "divergence",
        }
    }
}

/// What the other leg was when the merge gave a gap ([`MergedGap::other`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherLeg {
    /// Down (no session), quarantined or benched.
    Out,
    /// Up, but its session reported a silence.
    Silent,
    /// Up, and not holding every record past the mark (a loss of its own, not repaired).
    OutOfStep,
    /// Up and in step.
    InStep,
}

impl OtherLeg {
    /// The name printed by `mdfan-subscribe` (`other=`).
    pub fn as_str(self) -> &'static str {
        match self {
            OtherLeg::Out => "out",
            OtherLeg::Silent => "silent",
            OtherLeg::OutOfStep => "out_of_step",
            OtherLeg::InStep => "in_step",
        }
    }
}

/// The last gap the merge delivered, and why ([`Merge::last_gap`]): what an operator reads to tell a loss both
/// publishers had from a rule of the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergedGap {
    /// The merged seq the gap took: the `expected` of its [`Event::Gap`].
    pub seq: u64,
    /// Why.
    pub cause: GapCause,
    /// The leg whose loss or record it was: 0 for the first endpoint, 1 for the second.
    pub leg: usize,
    /// What the other leg was at that moment.
    pub other: OtherLeg,
}

/// Two copies of one venue position that differ ([`Merge::last_divergence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence {
    /// The leg whose copy arrived second.
    pub leg: usize,
    /// The copy delivered (with its merged seq).
    pub delivered: BookUpdate,
    /// The other leg's copy.
    pub this_leg: BookUpdate,
}

impl Default for Merge {
    fn default() -> Self {
        Merge::new()
    }
}

/// The fields the venue decides: two publishers of a pair give equal values. Every field but `seq` (offset 0),
/// `ts_recv_ns` (offset 16) and `ts_send_ticks` (offset 56), compared as the record's 64-bit words (wire::record
/// layout).
#[inline]
fn same_venue_fields(a: &BookUpdate, b: &BookUpdate) -> bool {
    // word 7 holds ts_send_ticks (its first 4 bytes) then kind, side, flags and level
    const TS_SEND_TICKS_BITS: u64 = u64::from_ne_bytes([0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
    const VENUE_BITS: [u64; 8] = [0, !0, 0, !0, !0, !0, !0, !TS_SEND_TICKS_BITS];
    let (a, b) = (a.as_words(), b.as_words());
    let mut differ = 0;
    for i in 0..8 {
        differ |= (a[i] ^ b[i]) & VENUE_BITS[i];
    }
    differ == 0
}

/// The kinds [`Merge::on_record_fast`] takes (indexed by the kind byte): the venue's book and trade records, no
/// control record and no stale mark.
const FAST_KINDS: [bool; 256] = {
    let kinds = [
        Kind::Add,
        Kind::Modify,
        Kind::Cancel,
        Kind::Trade,
        Kind::Fill,
        Kind::Clear,
        Kind::LevelNew,
        Kind::LevelChange,
        Kind::LevelDelete,
        Kind::LevelDeleteThru,
        Kind::LevelDeleteFrom,
        Kind::NoAction,
        Kind::TradingStatus,
    ];
    let (mut table, mut i) = ([false; 256], 0);
    while i < kinds.len() {
        table[kinds[i] as usize] = true;
        i += 1;
    }
    table
};

/// The slot of venue position `pos` in the table of delivered records: the top bits of a multiplicative
/// (Fibonacci) hash, as many as the table has (12 for [`RECENT_RECORDS`]), so that positions spread over all of
/// it (the shift once stayed at 12 bits while the table had 65,536 slots: 15/16 of it was never used).
fn slot(pos: u64) -> usize {
    const BITS: u32 = RECENT_RECORDS.trailing_zeros();
    (pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS)) as usize
}

impl Merge {
    /// A merge expecting both legs to start (seq 1 of each).
    pub fn new() -> Merge {
        let mut legs: [Leg; LEGS] = Default::default();
        for l in &mut legs {
            l.up = true;
            l.complete.reserve(16);
            l.waiting.reserve_exact(WAITING_RECORDS);
        }
        let mut stale_instruments = HashSet::new();
        stale_instruments.reserve(1024);
        Merge {
            marks: Vec::with_capacity(16),
            mark_hint: 0,
            legs,
            base: None,
            next_seq: 1,
            stale: false,
            snapshot_wanted: false,
            recent: vec![BookUpdate { seq: 0, ..BookUpdate::control(Kind::Heartbeat) }; RECENT_RECORDS]
                .into_boxed_slice()
                .try_into()
                .expect("a table of RECENT_RECORDS records"),
            stale_instruments,
            venue_counts: HashMap::new(),
            snapshot_leg: None,
            venue_tail_open: false,
            covered: HashMap::new(),
            session_snapshot_passed: false,

            feed_silent: false,
            ended: false,
            last_divergence: None,
            last_gap: None,
            end_record: None,
            end_reason: None,
            sole: None,
            gap_owed: None,
            fast: [false; LEGS],
            slow_only: false,
            stats: MergeStats { next_seq: 1, ..MergeStats::default() },
        }
    }

    /// The merged stream's counters.
    pub fn stats(&self) -> MergeStats {
        MergeStats { next_seq: self.next_seq, ..self.stats }
    }

    /// Leg `leg`'s counters.
    pub fn leg_stats(&self, leg: usize) -> LegStats {
        LegStats { quarantined: self.legs[leg].quarantined, benched: self.legs[leg].benched, ..self.legs[leg].stats }
    }

    /// Whether the merged books are stale: a merged gap (or divergence) not yet repaired by a snapshot.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Instruments a stale mark that reached the strategy made stale, not yet repaired by a session snapshot.
    pub fn stale_instruments(&self) -> usize {
        self.stale_instruments.len()
    }

    /// Whether leg `leg` is up (it has not ended, vanished or begun reconnecting since its last session began).
    pub fn leg_up(&self, leg: usize) -> bool {
        self.legs[leg].up
    }

    /// Whether leg `leg`'s records may enter the merge: up, and not left out after a divergence.
    pub fn leg_usable(&self, leg: usize) -> bool {
        self.legs[leg].usable()
    }

    /// Whether leg `leg` holds every record past the merged mark on every channel it has told of.
    pub fn leg_in_step(&self, leg: usize) -> bool {
        let l = &self.legs[leg];
        l.usable()
            && l.dropped_marks.is_empty()
            && self.marks.iter().all(|(ch, m)| matches!((l.peek_complete(*ch), m), (Some(c), Some(m)) if c <= *m))
    }

    /// Whether leg `leg` may set the mark of a channel that has none: it holds what the merged stream holds there.
    /// Either it streams from its seq 1 and lost nothing, and so did the merged stream (no session snapshot
    /// passed: the file's opening snapshot was placed by count), or the books came from its session snapshot and
    /// it lost nothing since (that snapshot's end may carry no position: one taken before its first venue record).
    fn sets_mark(&self, leg: usize) -> bool {
        let l = &self.legs[leg];
        l.usable()
            && l.dropped_marks.is_empty()
            && ((l.default == Some(0) && !self.session_snapshot_passed) || self.snapshot_leg == Some(leg))
    }

    /// Whether leg `o` can give what another leg lost: usable, not silent, untainted, in step on every channel
    /// the merge knows (or, before any mark, continuous since its start or snapshot).
    fn vouches(&self, o: usize) -> bool {
        let l = &self.legs[o];
        l.usable()
            && !l.silent
            && l.dropped_marks.is_empty()
            && !l.in_snapshot
            && (l.default.is_some() || !l.complete.is_empty())
            && self.marks.iter().all(|(ch, m)| match (l.peek_complete(*ch), m) {
                (Some(c), Some(m)) => c <= *m,
                (Some(_), None) => true,
                (None, _) => false,
            })
    }

    /// Whether leg `e` holds every record past the mark on every channel the merge knows, and lost nothing of its
    /// own it has not recovered.
    fn in_step_now(&self, e: usize) -> bool {
        let l = &self.legs[e];
        // where the merged stream has no mark, only a leg that may set it holds what it needs
        let unmarked_ok = self.sets_mark(e);
        l.dropped_marks.is_empty()
            && (l.default.is_some() || !l.complete.is_empty())
            && self.marks.iter().all(|(ch, m)| match (l.peek_complete(*ch), m) {
                (Some(c), Some(m)) => c <= *m,
                (Some(_), None) => unmarked_ok,
                (None, _) => false,
            })
            && (unmarked_ok || l.complete.iter().all(|(ch, _)| self.mark(*ch).is_some()))
    }

    /// Leg `leg` is silent (its publisher sent nothing, heartbeats included, for its silence timeout) or not:
    /// a silent leg vouches for nothing, so what waits for it is not held up.
    pub fn set_leg_silent(&mut self, leg: usize, silent: bool) {
        self.legs[leg].silent = silent;
    }

    /// Why the merged stream ended, once it has: the end of stream's reason, or the last leg's close.
    pub fn end_reason(&self) -> Option<CloseReason> {
        self.end_reason
    }

    /// Whether the merged stream has ended (an end of stream passed, or both legs are down for good).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The last divergence seen, for the report (the merged stream has already said `Gap`).
    pub fn last_divergence(&self) -> Option<&Divergence> {
        self.last_divergence.as_ref()
    }

    /// The last gap the merged stream delivered, with its cause.
    pub fn last_gap(&self) -> Option<&MergedGap> {
        self.last_gap.as_ref()
    }

    /// The leg the merged stream follows alone after a loss both legs had (until it goes down).
    pub fn sole(&self) -> Option<usize> {
        self.sole
    }

    /// A snapshot is wanted (after a merged gap): true once per gap.
    pub fn take_snapshot_wanted(&mut self) -> bool {
        std::mem::take(&mut self.snapshot_wanted)
    }

    /// Leg `leg` is down (its session ended or was lost). A snapshot it was passing through is abandoned.
    pub fn leg_down(&mut self, leg: usize) {
        self.take_leg_down(leg);
        self.refresh_fast();
    }

    fn take_leg_down(&mut self, leg: usize) {
        let l = &mut self.legs[leg];
        if !l.up {
            return;
        }
        l.up = false;
        l.stats.downs += 1;
        l.discontinuity();
        let was_passing = std::mem::take(&mut l.passing);
        l.in_snapshot = false;
        self.snapshot_leg_lost(leg);
        if was_passing && self.gap_owed.is_none() {
            // the merged books were emptied by its SnapshotBegin: a gap (before anything else the merge hands
            // out), stale until another snapshot passes
            self.gap_owed = Some((GapCause::SnapshotCut, leg));
        }
        if !self.legs.iter().any(Leg::usable) {
            // No leg left in the merge but one left out after a divergence: better its stream, from a snapshot
            // after a gap, than none.
            for o in &mut self.legs {
                if o.up && o.quarantined {
                    o.quarantined = false;
                    o.discontinuity();
                    self.gap_owed = Some((GapCause::LegBack, leg));
                }
            }
        }
        if self.sole == Some(leg) {
            // The leg followed alone is gone: the others come back, each from its next record (after a gap:
            // what they hold since the loss both had is not known here).
            self.sole = None;
            for o in &mut self.legs {
                if o.benched {
                    o.benched = false;
                    o.discontinuity();
                }
            }
            // what they hold is not known against the merged stream (their own repairs of the loss): a gap,
            // then a snapshot
            self.gap_owed = Some((GapCause::LegBack, leg));
        }
    }

    /// Leg `leg` began a new session (a reconnect): its stream starts again at its seq 1, with a snapshot.
    pub fn leg_restarted(&mut self, leg: usize) {
        let l = &mut self.legs[leg];
        l.up = true;
        l.started = false;
        l.ended = false;
        l.in_snapshot = false;
        l.passing = false;
        l.feed_silent = false;
        l.dropped_marks.clear();
        l.max_pos = 0;
        l.quarantined = false;
        l.discontinuity();
        self.snapshot_leg_lost(leg);
        // its stream starts again: its venue snapshot records are counted from its first
        self.venue_counts.values_mut().for_each(|c| c.seen[leg] = 0);
        self.refresh_fast();
    }

    /// Leg `leg` lost records or went: if the venue snapshot tail after its session snapshot was passing, the
    /// merged books lack the rest of it (a gap).
    fn snapshot_leg_lost(&mut self, leg: usize) {
        if self.snapshot_leg == Some(leg) {
            self.snapshot_leg = None;
            if std::mem::take(&mut self.venue_tail_open) && self.gap_owed.is_none() {
                self.gap_owed = Some((GapCause::SnapshotCut, leg));
            }
        }
    }

    fn mark(&self, ch: u16) -> Option<u64> {
        self.marks.iter().find(|(c, _)| *c == ch).and_then(|(_, m)| *m)
    }

    fn set_mark(&mut self, ch: u16, v: Option<u64>) {
        match self.marks.iter_mut().find(|(c, _)| *c == ch) {
            Some((_, m)) => *m = v,
            None => self.marks.push((ch, v)),
        }
    }

    /// Whether another leg than `leg` is up (not quarantined) and in step on `ch` at mark `m`.
    fn other_in_step(&self, leg: usize, ch: u16, m: u64) -> bool {
        (0..LEGS).any(|o| {
            let l = &self.legs[o];
            // (a silent leg still counts here: on a loaded host a live leg falls silent for 50 ms while its
            // data is on the way; what waits for it is released by `flush` if it stays silent)
            o != leg && l.usable() && l.dropped_marks.is_empty() && l.peek_complete(ch).is_some_and(|c| c <= m)
        })
    }

    fn emit<F: FnMut(Event<'_>)>(&mut self, r: &BookUpdate, f: &mut F) {
        let copy = BookUpdate { seq: self.next_seq, ..*r };
        self.next_seq += 1;
        self.stats.records += 1;
        f(Event::Record(&copy));
    }

    /// A venue record delivered first: kept in the table of delivered records with its merged seq (for the
    /// other leg's copy to be compared with), and that copy handed out. One 64-byte copy, made whole.
    #[inline]
    fn emit_kept<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        let kept = &mut self.recent[slot(r.venue_pos)];
        *kept = *r;
        kept.seq = self.next_seq;
        self.next_seq += 1;
        self.stats.records += 1;
        self.legs[leg].stats.delivered_first += 1;
        f(Event::Record(kept));
    }

    /// What the leg other than `leg` is, for a gap's report.
    fn other_leg(&self, leg: usize) -> OtherLeg {
        let o = (leg + 1) % LEGS;
        let l = &self.legs[o];
        if !l.usable() {
            OtherLeg::Out
        } else if l.silent {
            OtherLeg::Silent
        } else if self.in_step_now(o) {
            OtherLeg::InStep
        } else {
            OtherLeg::OutOfStep
        }
    }

    /// A merged gap: one seq wide, the books stale until a snapshot passes. None while one is unrepaired (the
    /// strategy knows already).
    fn emit_gap<F: FnMut(Event<'_>)>(&mut self, cause: GapCause, leg: usize, f: &mut F) {
        if self.stale || self.ended {
            return;
        }
        self.last_gap = Some(MergedGap { seq: self.next_seq, cause, leg, other: self.other_leg(leg) });
        f(Event::Gap { expected: self.next_seq, got: self.next_seq + 1 });
        self.next_seq += 1;
        self.stats.gaps += 1;
        self.stale = true;
        self.snapshot_wanted = true;
    }

    /// A venue record delivered: mark moved, kept for comparison.
    fn deliver<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, ch: u16, key: u64, f: &mut F) {
        self.set_mark(ch, Some(key));
        self.emit_kept(leg, r, f);
    }

    /// One event of leg `leg`'s session, as its [`Subscriber::poll`] handed it; merged events go to `f`.
    #[inline]
    pub fn on_event<F: FnMut(Event<'_>)>(&mut self, leg: usize, ev: Event<'_>, f: &mut F) {
        if let Event::Record(r) = ev {
            if self.fast[leg] && self.on_record_fast(leg, r, f) {
                return;
            }
        }
        self.on_event_slow(leg, ev, f);
        self.refresh_fast();
    }

    /// The steady state's record (module docs, "Cost"): a venue record of a leg in step, on a channel whose mark
    /// is known, while nothing waits, recovers or is covered by a snapshot. Delivered or compared as a duplicate
    /// exactly as the full rule would; `false` (nothing done) for anything else.
    #[inline]
    fn on_record_fast<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) -> bool {
        if !FAST_KINDS[usize::from(r.kind)] || r.flags & flags::SNAPSHOT != 0 {
            return false;
        }
        let ch = r.venue_channel();
        let i = match self.marks.get(self.mark_hint) {
            Some((c, _)) if *c == ch => self.mark_hint,
            _ => {
                let Some(i) = self.marks.iter().position(|(c, _)| *c == ch) else { return false };
                self.mark_hint = i;
                i
            }
        };
        let Some(m) = self.marks[i].1 else { return false };
        let l = &mut self.legs[leg];
        l.max_pos = l.max_pos.max(r.venue_pos);
        let key = r.venue_pos.saturating_add(1);
        if key <= m {
            self.on_duplicate(leg, r, f);
            if self.legs[leg].quarantined {
                self.refresh_fast();
            }
            return true;
        }
        self.marks[i].1 = Some(key);
        self.emit_kept(leg, r, f);
        true
    }

    /// Which legs may take [`Merge::on_record_fast`]: recomputed after every event or call that changes the
    /// merge's state other than the fast path's own (the mark moving, a duplicate counted).
    fn refresh_fast(&mut self) {
        let plain = !self.slow_only
            && !self.ended
            && self.covered.is_empty()
            && !self.venue_tail_open
            && self.gap_owed.is_none();
        for leg in 0..LEGS {
            let l = &self.legs[leg];
            self.fast[leg] = plain
                && l.usable()
                && l.started
                && !l.in_snapshot
                && !l.passing
                && l.waiting.is_empty()
                && self.in_step_now(leg);
        }
    }

    fn on_event_slow<F: FnMut(Event<'_>)>(&mut self, leg: usize, ev: Event<'_>, f: &mut F) {
        if let Some((cause, owed_by)) = self.gap_owed.take() {
            self.emit_gap(cause, owed_by, f); // found where no callback was at hand: before anything else
        }
        match ev {
            Event::Record(r) => self.on_record(leg, r, f),
            Event::Gap { .. } => {
                self.snapshot_leg_lost(leg);
                let l = &mut self.legs[leg];
                l.stats.gaps += 1;
                l.discontinuity();
                // a session that begins with a gap did not stream from its seq 1
                l.started = true;
                let was_passing = std::mem::take(&mut l.passing);
                // a snapshot cut by a gap is over (its leg asks for another)
                l.in_snapshot = false;
                // What this leg lost, only a leg in step on every channel can give: else the merged stream has
                // lost it too.
                let covered = (0..LEGS).any(|o| o != leg && self.vouches(o));
                if (was_passing || !covered) && !self.stale {
                    let cause = if was_passing { GapCause::SnapshotCut } else { GapCause::LegGap };
                    self.emit_gap(cause, leg, f);
                }
            }
            Event::Stale { .. } | Event::Corrupt { .. } => {} // counted by the leg's own receiver
            Event::Closed(reason) => {
                self.leg_down(leg);
                self.end_if_all_down(reason, f);
            }
        }
    }

    /// Both legs down for good: the merged stream closes with the last one's reason.
    fn end_if_all_down<F: FnMut(Event<'_>)>(&mut self, reason: CloseReason, f: &mut F) {
        if !self.ended && self.legs.iter().all(|l| !l.up) {
            self.ended = true;
            self.end_reason = Some(reason);
            f(Event::Closed(reason));
        }
    }

    fn on_record<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        if self.ended {
            return;
        }
        let kind = r.kind();
        let first = !self.legs[leg].started;
        self.legs[leg].started = true;
        if first && kind != Some(Kind::SnapshotBegin) && self.base.is_none() {
            // A stream from its seq 1 without a snapshot: from the feed's start.
            self.base = Some(leg);
        }
        if first && kind != Some(Kind::SnapshotBegin) {
            self.legs[leg].default = Some(0);
            self.legs[leg].venue_counting = true;
        }
        match kind {
            Some(Kind::Heartbeat) => {}
            Some(Kind::SnapshotBegin) => {
                let other_passing = self.legs.iter().any(|l| l.passing);
                let repair = self.stale || !self.stale_instruments.is_empty();
                let pass = (self.base.is_none() || repair)
                    && !self.legs[leg].quarantined
                    && !self.legs[leg].benched
                    && !other_passing;
                self.snapshot_leg_lost(leg);
                let l = &mut self.legs[leg];
                l.discontinuity();
                l.in_snapshot = true;
                l.passing = pass;
                if pass {
                    // it holds every book: no venue snapshot passes after it but its own leg's tail
                    self.session_snapshot_passed = true;
                    self.base = Some(leg);
                    self.marks.iter_mut().for_each(|(_, m)| *m = None);
                    self.snapshot_leg = None;
                    self.venue_tail_open = false;
                    self.covered.clear();
                    self.stale_instruments.clear();
                    self.emit(r, f);
                } else {
                    l.stats.snapshots_dropped += 1;
                }
            }
            Some(Kind::SnapshotEnd) => {
                let l = &mut self.legs[leg];
                l.in_snapshot = false;
                let passing = std::mem::take(&mut l.passing);
                let ch = r.venue_channel();
                if r.venue_pos != 0 {
                    l.set_complete(ch, Some(r.venue_pos + 1));
                }
                if passing {
                    l.dropped_marks.clear(); // its snapshot is the merged books now
                    if r.venue_pos != 0 {
                        self.set_mark(ch, Some(r.venue_pos + 1));
                    }
                    // The books went to this leg's point, behind or ahead of what the others sent: what they hold
                    // past the mark is learnt again from their next records.
                    for o in (0..LEGS).filter(|o| *o != leg) {
                        self.snapshot_leg_lost(o);
                        self.legs[o].discontinuity();
                    }
                    self.snapshot_leg = Some(leg);
                    self.stale = false;
                    self.stats.snapshots += 1;
                    self.emit(r, f);
                }
            }
            _ if self.legs[leg].in_snapshot && self.legs[leg].passing => {
                // Each book stands at its own position (a market recovery may have put it past the snapshot's
                // end): the instrument's records up to there are in it, from either leg.
                if r.instrument_id != mdfan_wire::CHANNEL_INSTRUMENT_ID && r.venue_pos != 0 {
                    let until = self.covered.entry(r.instrument_id).or_insert(0);
                    *until = (*until).max(r.venue_pos.saturating_add(1));
                }
                if kind == Some(Kind::InstrumentStale) {
                    // that publisher's book is stale too: its recovery will be wanted
                    self.stale_instruments.insert(r.instrument_id);
                }
                self.emit(r, f)
            }
            _ if self.legs[leg].in_snapshot => {} // a snapshot the merged books do not need
            Some(Kind::EndOfStream) => self.on_end(leg, r, f),
            Some(Kind::FeedStatus) => {
                self.legs[leg].feed_silent = r.feed_state() == Some(FeedState::Silent);
                let silent = self.legs.iter().filter(|l| l.up).all(|l| l.feed_silent);
                if silent != self.feed_silent {
                    self.feed_silent = silent;
                    self.emit(r, f);
                }
            }
            // Market recovery (price-level records flagged SNAPSHOT, all at the snapshot's position) and a venue
            // snapshot of orders (a DBN file's, whose positions repeat): by instrument.
            _ if r.flags & flags::SNAPSHOT != 0 => self.on_recovery(leg, r, f),
            None => {}
            Some(_) => self.on_venue(leg, r, f),
        }
    }

    fn on_end<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        if r.end_reason() == Some(CloseReason::EndOfStream) {
            // The stream ends when every leg in the merge has said so (or gone): a leg that ends first may have
            // less than the other (another feed, a shorter file), and what the other still sends is delivered.
            // A leg out of the merge (quarantined, benched) does not end it.
            if !self.legs[leg].usable() {
                return;
            }
            self.legs[leg].ended = true;
            self.end_record = Some(*r);
            self.flush(f);
            return;
        }
        let other_up = (0..LEGS).any(|o| o != leg && self.legs[o].usable());
        if !other_up {
            // the last leg up shut down or failed: the merged stream ends as it did
            self.flush(f);
            self.ended = true;
            self.end_reason = r.end_reason();
            self.emit(r, f);
        }
        // else: one leg shut down or failed while the other is up: its Closed takes it down
    }

    /// The end of stream passes from a leg that sent it (nothing of it waiting) once no other usable leg is
    /// past it: every other has ended too, or has sent nothing beyond the last position this one sent.
    fn try_end<F: FnMut(Event<'_>)>(&mut self, f: &mut F) {
        let Some(end) = self.end_record else { return };
        if self.ended {
            return;
        }
        // Every leg still in the merge (usable, not silent) has ended, and nothing of it waits: a leg that ends
        // first may have less than the other, and one that lags still has records to give.
        // Complete if a leg that ended holds everything up to its end (in step: nothing it lost was left to a leg
        // that has not given it yet).
        let whole = (0..LEGS).any(|e| self.legs[e].usable() && self.legs[e].ended && self.in_step_now(e));
        // A silent leg counts as done only then: otherwise it may be the one that still has what is missing,
        // and the end waits for it to end or go down.
        let done = |l: &Leg| !l.usable() || (l.ended && l.waiting.is_empty()) || (l.silent && whole && !l.passing);
        if self.legs.iter().all(done) && self.legs.iter().any(|l| l.usable() && l.ended) {
            if !whole {
                let leg = (0..LEGS).find(|e| self.legs[*e].ended).unwrap_or(0);
                self.emit_gap(GapCause::EndIncomplete, leg, f); // what is missing is said with a gap first
            }
            self.ended = true;
            self.end_reason = Some(CloseReason::EndOfStream);
            self.emit(&end, f);
        }
    }

    /// Market recovery (records flagged SNAPSHOT outside a session snapshot): module docs.
    fn on_recovery<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        let id = r.instrument_id;
        let alone = self.sole == Some(leg) || (0..LEGS).all(|o| o == leg || !self.legs[o].usable());
        if r.flags & flags::MBP != 0 && alone && self.legs[leg].usable() && self.legs[leg].dropped_marks.is_empty() {
            // The merged stream is this leg's alone: its recovery is the repair, as for a single publisher.
            self.stale_instruments.remove(&id);
            self.legs[leg].stats.delivered_first += 1;
            self.emit(r, f);
            return;
        }
        if r.flags & flags::MBP != 0 {
            // A market recovery never passes: it is this leg's repair of its own loss, at a position of its own
            // choosing (the snapshot feed runs ahead of or behind the incrementals), and its publisher drops the
            // instrument's records up to that position (by `RptSeq`). So the leg vouches for nothing up to there
            // until the mark has passed it; an instrument the merged stream marked stale is repaired by a session
            // snapshot instead (module docs).
            self.legs[leg].dropped_marks.remove(&id);
            self.legs[leg].stats.recovery_dropped += 1;
            let (ch, key) = (r.venue_channel(), r.venue_pos.saturating_add(1));
            let l = &mut self.legs[leg];
            let c = l.peek_complete(ch).map_or(key, |c| c.max(key));
            l.set_complete(ch, Some(c));
            return;
        }
        // An order-level venue snapshot (a DBN file's opening, whose positions repeat and are not in order).
        if self.session_snapshot_passed {
            // The books came whole from a session snapshot of one leg, at one point of its stream: only that leg's
            // venue snapshot records after it are missing from them (its publisher was still replaying the
            // opening when it took the snapshot).
            if self.snapshot_leg == Some(leg) && self.legs[leg].usable() {
                self.venue_tail_open = true;
                self.legs[leg].stats.delivered_first += 1;
                self.emit(r, f);
            } else {
                self.legs[leg].stats.recovery_dropped += 1;
            }
            return;
        }
        // Before any session snapshot, by count: the n-th record of an instrument's venue snapshot is the same on
        // both legs (both publishers replay the same file), so it passes from whichever leg sends it first, as a
        // venue record does by position. A leg that lost records of its own since its start cannot be counted.
        if !self.legs[leg].venue_counting {
            self.legs[leg].stats.recovery_dropped += 1;
            return;
        }
        let c = self.venue_counts.entry(id).or_default();
        c.seen[leg] += 1;
        if c.seen[leg] != c.passed + 1 || !self.legs[leg].usable() {
            self.legs[leg].stats.recovery_dropped += 1; // the other leg's copy passed (or will)
            return;
        }
        c.passed = c.seen[leg];
        self.legs[leg].stats.delivered_first += 1;
        self.emit(r, f);
    }

    fn on_venue<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        if self.venue_tail_open && self.snapshot_leg == Some(leg) {
            self.venue_tail_open = false; // its venue snapshot is over: its incrementals follow
        }
        let l = &mut self.legs[leg];
        l.max_pos = l.max_pos.max(r.venue_pos);
        if r.kind() == Some(Kind::InstrumentStale) {
            self.on_stale_mark(leg, r, f);
            return;
        }
        if self.legs[leg].quarantined || self.legs[leg].benched {
            return;
        }
        if !self.legs[leg].waiting.is_empty() {
            // behind what it already keeps waiting: in order
            let ch = r.venue_channel();
            self.legs[leg].hold(ch, r.venue_pos.saturating_add(1), r);
            self.drain(leg, f);
            return;
        }
        if !self.place(leg, r, false, f) {
            self.legs[leg].hold(r.venue_channel(), r.venue_pos.saturating_add(1), r);
        }
    }

    /// Delivers `r` from `leg`, or counts it as a duplicate; `false` when it must wait (the leg is out of step
    /// and the other leg can deliver it). `force`: the other leg cannot (it went down, or the stream ends).
    fn place<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, force: bool, f: &mut F) -> bool {
        let ch = r.venue_channel();
        let key = r.venue_pos.saturating_add(1);
        if !self.covered.is_empty() {
            if let Some(&until) = self.covered.get(&r.instrument_id) {
                if key <= until {
                    return true; // in the snapshot that passed
                }
                self.covered.remove(&r.instrument_id);
            }
        }
        let tainted = !self.legs[leg].dropped_marks.is_empty();
        let known_before = self.legs[leg].peek_complete(ch).is_some();
        let complete = self.legs[leg].complete_for(ch, Some(key));
        let Some(m) = self.mark(ch) else {
            // The mark is not known on this channel: a leg that holds what the merged stream holds sets it
            // ([`Merge::sets_mark`]); another leg's records wait for one (a loss of their own since: a gap first).
            if self.sets_mark(leg) {
                self.base = Some(leg);
                self.legs[leg].set_complete(ch, Some(key - 1));
                self.deliver(leg, r, ch, key, f);
            } else if !force
                && (0..LEGS).any(|o| o != leg && (self.sets_mark(o) || (self.legs[o].usable() && self.legs[o].passing)))
            {
                if !known_before {
                    self.legs[leg].set_complete(ch, None); // learnt again from this record when it is placed
                }
                return false;
            } else {
                self.base = Some(leg);
                self.legs[leg].set_complete(ch, Some(key - 1));
                self.legs[leg].dropped_marks.clear();
                self.emit_gap(GapCause::BaseLost, leg, f);
                self.deliver(leg, r, ch, key, f);
            }
            return true;
        };
        if key <= m {
            self.on_duplicate(leg, r, f);
            return true;
        }
        let in_step = complete.is_some_and(|c| c <= m) && !tainted;
        if in_step {
            self.deliver(leg, r, ch, key, f);
        } else if self.other_in_step(leg, ch, m) && !force {
            return false;
        } else {
            // Neither leg can vouch for what lies between the mark and this record: the stream follows this leg
            // from here, after a gap.
            self.legs[leg].set_complete(ch, Some(key - 1));
            self.legs[leg].dropped_marks.clear();
            self.emit_gap(GapCause::NeitherInStep, leg, f);
            self.deliver(leg, r, ch, key, f);
        }
        true
    }

    /// Places what `leg` keeps waiting, in order, as far as it can.
    fn drain<F: FnMut(Event<'_>)>(&mut self, leg: usize, f: &mut F) {
        while let Some(r) = self.legs[leg].waiting.front().copied() {
            if !self.place(leg, &r, false, f) {
                break;
            }
            self.legs[leg].waiting.pop_front();
        }
    }

    /// Places what the legs keep waiting once the other leg has moved the mark, or (`force`) whatever they keep,
    /// when no other leg will deliver it. No allocation; a check per leg when nothing waits.
    pub fn flush<F: FnMut(Event<'_>)>(&mut self, f: &mut F) {
        if self.gap_owed.is_none() && self.end_record.is_none() && self.legs.iter().all(|l| l.waiting.is_empty()) {
            return;
        }
        if let Some((cause, leg)) = self.gap_owed.take() {
            if !self.ended {
                self.emit_gap(cause, leg, f);
            }
        }
        for leg in 0..LEGS {
            if !self.legs[leg].waiting.is_empty() {
                self.drain(leg, f);
                // (never into a session snapshot passing through: its leg ends it, or goes down)
                let force = !(0..LEGS)
                    .any(|o| o != leg && self.legs[o].usable() && !self.legs[o].silent && !self.legs[o].ended)
                    && !self.legs.iter().any(|l| l.passing);
                if force {
                    while let Some(r) = self.legs[leg].waiting.pop_front() {
                        self.place(leg, &r, true, f);
                    }
                }
            }
        }
        self.try_end(f);
        self.refresh_fast();
    }

    /// A stale mark is not merged by position: a publisher writes the marks of a loss at the first lost
    /// position, and the mark of an instrument first seen after a loss before its first record, within the
    /// packet (so that leg's later records of the packet have other indices than the other leg's). It passes
    /// unless the other leg, up and in step, may hold the data; then it is dropped and this leg is out of step
    /// until its own recovery of the instrument is over.
    fn on_stale_mark<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        if self.legs[leg].quarantined || self.legs[leg].benched {
            return;
        }
        let ch = r.venue_channel();
        // the other leg may hold the data: in step past the mark, or, where there is no mark yet, one that may set
        // it or whose session snapshot is passing (it holds everything after its point)
        let filled = match self.mark(ch) {
            Some(m) => self.other_in_step(leg, ch, m),
            None => (0..LEGS).any(|o| o != leg && (self.sets_mark(o) || self.legs[o].passing)),
        };
        if filled {
            let l = &mut self.legs[leg];
            l.stats.stale_filled += 1;
            l.dropped_marks.insert(r.instrument_id);
            // it lacks what the mark says from here (the loss): in step only once the mark has passed it
            let key = r.venue_pos.saturating_add(1);
            let c = l.peek_complete(ch).map_or(key, |c| c.max(key));
            l.set_complete(ch, Some(c));
            return;
        }
        if self.sole.is_none() && (0..LEGS).any(|o| o != leg && self.legs[o].usable()) {
            // A loss both legs had: from here the merged stream is this leg's alone (its marks, its own market
            // recovery, which only its own stream is consistent with); the other sits out until this one goes
            // down. Never a book made of two publishers' repairs.
            self.sole = Some(leg);
            for o in (0..LEGS).filter(|o| *o != leg) {
                self.legs[o].benched = true;
                self.legs[o].waiting.clear();
            }
        }
        if self.sole != Some(leg) {
            // no other leg was up: the only repair is this leg's own recovery or a session snapshot
            self.stale_instruments.insert(r.instrument_id);
        }
        self.legs[leg].stats.delivered_first += 1;
        self.emit(r, f);
    }

    #[inline(always)]
    fn on_duplicate<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        let kept = &self.recent[slot(r.venue_pos)];
        let l = &mut self.legs[leg];
        l.stats.duplicates += 1;
        if kept.venue_pos != r.venue_pos || kept.seq == 0 {
            l.stats.uncompared += 1; // no longer kept: counted, not compared
            return;
        }
        let trail = self.next_seq.saturating_sub(kept.seq);
        l.stats.trail_records = trail;
        l.stats.max_trail_records = l.stats.max_trail_records.max(trail);
        if !l.dropped_marks.is_empty() {
            return; // its publisher marked packets stale: their indices may differ from the other leg's
        }
        if !same_venue_fields(kept, r) {
            self.diverged(leg, r, f);
        }
    }

    /// Leg `leg`'s copy `r` differs from the delivered one: the two publishers disagree, and the merged books may
    /// hold records of both. This leg (whose copy came second) is left out from here; the books are stale until
    /// the other leg's snapshot passes.
    #[cold]
    #[inline(never)]
    fn diverged<F: FnMut(Event<'_>)>(&mut self, leg: usize, r: &BookUpdate, f: &mut F) {
        let kept = self.recent[slot(r.venue_pos)];
        let l = &mut self.legs[leg];
        l.stats.divergences += 1;
        l.quarantined = true;
        l.waiting.clear();
        self.stats.divergences += 1;
        self.last_divergence = Some(Divergence { leg, delivered: kept, this_leg: *r });
        if !self.stale {
            self.emit_gap(GapCause::Divergence, leg, f);
        }
    }
}

/// What [`PairSubscriber::maintain`] found: the merged stream's health and each leg's moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairHealth {
    /// Records or heartbeats arrive on a leg at least.
    Ok,
    /// Every leg that is up has been silent past its silence timeout: the shortest silence.
    Silent(Duration),
    /// Leg `leg` went down: `end` when for good, `None` when its reconnect policy is trying. The merged stream
    /// goes on from the other leg.
    LegDown {
        /// 0 for the first endpoint, 1 for the second.
        leg: usize,
        /// Why it ended, when it ended for good.
        end: Option<End>,
    },
    /// Leg `leg` has a session again (its first connect, when it was down at the start, or a reconnect); it
    /// rejoins the merge once it is in step.
    LegUp {
        /// 0 for the first endpoint, 1 for the second.
        leg: usize,
        /// The new session's id.
        session_id: u64,
    },
    /// The merged stream ended: an end of stream passed, or both legs are down for good (the last one's end).
    Ended(End),
}

struct PairLeg {
    cfg: SubscriberConfig,
    sub: Option<Subscriber>,
    /// Down for good (no reconnect policy, or its budget ran out).
    ended: Option<End>,
    /// Next connect try while `sub` is `None` (the first connect failed) and a reconnect policy allows it.
    next_try: Option<std::time::Instant>,
    since: std::time::Instant,
    silent: Option<Duration>,
    error: Option<SubscribeError>,
    /// Each session of this leg records latency ([`PairSubscriber::with_latency`]).
    latency: bool,
}

/// How long a leg's silence lasts before the merge stops counting on it by default
/// ([`PairSubscriber::set_leg_give_up`]): 500 ms, ten times the session's default silence report. A live
/// publisher on a loaded host (or under emulation) can send nothing, heartbeats included, for the 50 ms of the
/// report while its records are on the way; giving up on it then turns a loss the other leg would have filled
/// into a merged gap. The wait costs only when both legs are in trouble at once: records of the other leg wait
/// only behind a loss of its own.
pub const DEFAULT_LEG_GIVE_UP: Duration = Duration::from_millis(500);

/// A strategy's subscription to a hot-hot pair: a [`Subscriber`] on each publisher, merged by venue position
/// ([`Merge`]: module docs). [`PairSubscriber::poll`] hands the merged events exactly as
/// [`Subscriber::poll`] does (records borrowed for the callback, their `seq` the merged stream's);
/// [`PairSubscriber::maintain`] keeps both sessions (their snapshots, resyncs and reconnects under each
/// config's policy) and says when a leg goes down or comes back.
pub struct PairSubscriber {
    legs: [PairLeg; LEGS],
    merge: Merge,
    events: VecDeque<PairHealth>,
    end: Option<End>,
    /// When a snapshot was last asked for to repair the merged books.
    last_repair: Option<std::time::Instant>,
    clock: quanta::Clock,
    last_maintain: u64,
    maintain_interval: Duration,
    /// A leg silent this long vouches for nothing ([`PairSubscriber::set_leg_give_up`]).
    leg_give_up: Duration,
    /// The merged stream's post-to-handout latency, when on ([`PairSubscriber::with_latency`]).
    latency: Option<crate::Latency>,
}

impl PairSubscriber {
    /// Connects to both publishers (each config's endpoint, name, ring and policy; snapshots are always asked
    /// for). A leg whose first connect fails starts down when its config has a reconnect policy (it is tried
    /// again every interval, and reported [`PairHealth::LegUp`] when it connects); otherwise it is an error.
    ///
    /// # Errors
    /// The first connect error of a leg without a reconnect policy, or of both legs.
    pub fn connect(a: &SubscriberConfig, b: &SubscriberConfig) -> Result<PairSubscriber, SubscribeError> {
        let now = std::time::Instant::now();
        let mut legs = Vec::with_capacity(LEGS);
        let mut errors = Vec::new();
        for cfg in [a, b] {
            let mut cfg = cfg.clone();
            cfg.snapshot = true;
            let (sub, error) = match Subscriber::connect(&cfg) {
                Ok(s) => (Some(s), None),
                Err(e) if cfg.reconnect.is_some() => (None, Some(e)),
                Err(e) => return Err(e),
            };
            if let Some(e) = &error {
                errors.push(e.to_string());
            }
            legs.push(PairLeg {
                next_try: sub.is_none().then_some(now),
                cfg,
                sub,
                ended: None,
                since: now,
                silent: None,
                error,
                latency: false,
            });
        }
        if legs.iter().all(|l| l.sub.is_none()) {
            let leg = legs.swap_remove(0);
            return Err(leg.error.expect("a leg without a session has its error"));
        }
        let mut merge = Merge::new();
        for (i, l) in legs.iter().enumerate() {
            if l.sub.is_none() {
                merge.leg_down(i);
            }
        }
        let interval = a.maintain_interval.min(b.maintain_interval);
        let clock = quanta::Clock::new();
        let last_maintain = clock.raw();
        let legs: [PairLeg; LEGS] = legs.try_into().map_err(|_| ()).expect("two legs");
        Ok(PairSubscriber {
            legs,
            merge,
            events: VecDeque::new(),
            end: None,
            last_repair: None,
            clock,
            last_maintain,
            maintain_interval: interval,
            leg_give_up: DEFAULT_LEG_GIVE_UP,
            latency: None,
        })
    }

    /// Records post-to-poll latency on each leg ([`Subscriber::with_latency`], read with
    /// [`PairSubscriber::leg`]`(i)?.latency()`; every copy a leg polls, duplicates included) and on the merged
    /// stream ([`PairSubscriber::latency`]: from the post of the copy handed out to its handout, so a record that
    /// waited in the merge counts its wait). One more TSC read per record handed out.
    pub fn with_latency(mut self) -> PairSubscriber {
        for leg in &mut self.legs {
            leg.latency = true;
            if let Some(sub) = leg.sub.take() {
                leg.sub = Some(sub.with_latency());
            }
        }
        self.latency = Some(crate::Latency::new());
        self
    }

    /// The merged stream's latency histogram (ns; post of the copy handed out to its handout), if enabled.
    pub fn latency(&self) -> Option<&crate::Latency> {
        self.latency.as_ref()
    }

    /// How long a leg's session must have been silent (nothing, heartbeats included) before the merge stops
    /// counting on that leg to fill what the other lost ([`DEFAULT_LEG_GIVE_UP`] unless set). Shorter than the
    /// leg's `silence_timeout` means at its silence report. The leg's silence is reported
    /// ([`PairHealth::Silent`] when every leg is) at the session's `silence_timeout` either way.
    pub fn set_leg_give_up(&mut self, give_up: Duration) {
        self.leg_give_up = give_up;
    }

    /// Polls each leg once (up to `max` completions each) and hands the merged events to `f`. Returns the
    /// completions reaped on both legs; 0 means nothing was ready. No syscall, no allocation.
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, mut f: F) -> usize {
        let Self { legs, merge, latency, .. } = self;
        let mut n = 0;
        match latency {
            None => {
                for (i, leg) in legs.iter_mut().enumerate() {
                    if let Some(sub) = leg.sub.as_mut() {
                        n += sub.poll(max, |ev| merge.on_event(i, ev, &mut f));
                    }
                }
                merge.flush(&mut f);
            }
            Some(l) => {
                let mut timed = |ev: Event<'_>| {
                    if let Event::Record(r) = &ev {
                        l.record(r.ts_send_ticks);
                    }
                    f(ev)
                };
                for (i, leg) in legs.iter_mut().enumerate() {
                    if let Some(sub) = leg.sub.as_mut() {
                        n += sub.poll(max, |ev| merge.on_event(i, ev, &mut timed));
                    }
                }
                merge.flush(&mut timed);
            }
        }
        n
    }

    /// [`PairSubscriber::maintain`] at most once per the configs' shorter `maintain_interval`.
    #[inline]
    pub fn maintain_if_due(&mut self) -> Option<PairHealth> {
        let now = self.clock.raw();
        if self.clock.delta_as_nanos(self.last_maintain, now) < self.maintain_interval.as_nanos() as u64 {
            return None;
        }
        self.last_maintain = now;
        Some(self.maintain())
    }

    /// Runs each leg's [`Subscriber::maintain`] (and a leg's connect tries while it has no session), takes a leg
    /// down or up in the merge, and asks a leg for a snapshot after a merged gap. Returns one move per call
    /// (a leg's, queued, first), else the merged health.
    pub fn maintain(&mut self) -> PairHealth {
        for i in 0..LEGS {
            self.maintain_leg(i);
        }
        // Instruments still stale after a repair (the publisher's own books were stale when it took the
        // snapshot): ask again, once a second.
        let again = self.merge.stale_instruments() > 0
            && self.last_repair.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if self.merge.take_snapshot_wanted() || again {
            self.last_repair = Some(std::time::Instant::now());
            let leg = (0..LEGS)
                .filter(|i| self.legs[*i].sub.is_some() && self.merge.leg_usable(*i))
                // in step first, then the one furthest on: a leg behind would take the books back in time
                .max_by_key(|i| (self.merge.leg_in_step(*i), self.merge.legs[*i].max_pos));
            if let Some(sub) = leg.and_then(|i| self.legs[i].sub.as_mut()) {
                sub.request_snapshot();
            }
        }
        if let Some(e) = self.events.pop_front() {
            return e;
        }
        if let Some(end) = self.end {
            return PairHealth::Ended(end);
        }
        if self.merge.ended() {
            // The end of stream passed, or both legs closed: the merged stream's reason. (Both legs lost
            // without a close: their own ends, reported by `leg_ended`.)
            let end = End::Closed(self.merge.end_reason().unwrap_or(CloseReason::EndOfStream));
            self.end = Some(end);
            return PairHealth::Ended(end);
        }
        let mut up = self.legs.iter().filter(|l| l.sub.is_some() && l.ended.is_none()).peekable();
        if up.peek().is_none() {
            return PairHealth::Ok;
        }
        // silent only when every leg up is: the shortest silence
        up.try_fold(Duration::MAX, |d, l| l.silent.map(|s| d.min(s))).map_or(PairHealth::Ok, PairHealth::Silent)
    }

    fn maintain_leg(&mut self, i: usize) {
        let leg = &mut self.legs[i];
        if leg.ended.is_some() {
            return;
        }
        let Some(sub) = leg.sub.as_mut() else {
            // Down since the start: try again under its policy.
            let (Some(at), Some(policy)) = (leg.next_try, leg.cfg.reconnect) else { return };
            if std::time::Instant::now() < at {
                return;
            }
            match Subscriber::connect(&leg.cfg) {
                Ok(s) => {
                    let s = if leg.latency { s.with_latency() } else { s };
                    let session_id = s.session_id();
                    leg.sub = Some(s);
                    leg.next_try = None;
                    leg.error = None;
                    self.merge.leg_restarted(i);
                    self.events.push_back(PairHealth::LegUp { leg: i, session_id });
                }
                Err(e) => {
                    leg.error = Some(e);
                    if leg.since.elapsed() >= policy.budget {
                        let end = End::GaveUp { tries: 0 };
                        leg.ended = Some(end);
                        self.leg_ended(i, end);
                    } else {
                        leg.next_try = Some(std::time::Instant::now() + policy.interval);
                    }
                }
            }
            return;
        };
        leg.silent = None;
        let health = sub.maintain();
        self.merge.set_leg_silent(i, matches!(health, Health::Silent(d) if d >= self.leg_give_up));
        match health {
            Health::Ok => {}
            Health::Silent(d) => leg.silent = Some(d),
            Health::Reconnecting { tries: 0 } => {
                self.merge.leg_down(i);
                self.events.push_back(PairHealth::LegDown { leg: i, end: None });
            }
            Health::Reconnecting { .. } => {}
            Health::Reconnected { session_id } => {
                self.merge.leg_restarted(i);
                self.events.push_back(PairHealth::LegUp { leg: i, session_id });
            }
            Health::Ended(end) => {
                leg.ended = Some(end);
                self.leg_ended(i, end);
            }
        }
    }

    fn leg_ended(&mut self, i: usize, end: End) {
        self.merge.leg_down(i);
        self.events.push_back(PairHealth::LegDown { leg: i, end: Some(end) });
        if self.legs.iter().all(|l| l.ended.is_some()) && !self.merge.ended() {
            self.end = Some(end);
        }
    }

    /// The merged stream's counters.
    pub fn stats(&self) -> MergeStats {
        self.merge.stats()
    }

    /// Leg `leg`'s merge counters.
    pub fn leg_stats(&self, leg: usize) -> LegStats {
        self.merge.leg_stats(leg)
    }

    /// Leg `leg`'s session, while it has one.
    pub fn leg(&self, leg: usize) -> Option<&Subscriber> {
        self.legs[leg].sub.as_ref()
    }

    /// Leg `leg`'s state: its session's ([`Subscriber::state`]), or `Reconnecting` while its first connect is
    /// still being tried, or `Ended`.
    pub fn leg_state(&self, leg: usize) -> State {
        let l = &self.legs[leg];
        match (&l.sub, l.ended) {
            (_, Some(end)) => State::Ended(end),
            (Some(s), None) => s.state(),
            (None, None) => State::Reconnecting { tries: 0 },
        }
    }

    /// The last connect error of a leg that has no session.
    pub fn leg_error(&self, leg: usize) -> Option<&SubscribeError> {
        self.legs[leg].error.as_ref()
    }

    /// Whether the merged books are stale (a gap both legs had, or a divergence, not yet repaired).
    pub fn is_stale(&self) -> bool {
        self.merge.is_stale()
    }

    /// The last divergence (two copies of a venue position that differed).
    pub fn last_divergence(&self) -> Option<&Divergence> {
        self.merge.last_divergence()
    }

    /// The last gap the merged stream delivered, with its cause and what the other leg was. Read it after
    /// [`PairSubscriber::poll`] returns (the callback cannot borrow the pair): note the `Event::Gap` there. One gap
    /// is delivered per loss: while the books are stale (until a snapshot passes) a further loss gives none.
    pub fn last_gap(&self) -> Option<&MergedGap> {
        self.merge.last_gap()
    }

    /// The symbology of a leg with a session (both publishers name the same instruments).
    pub fn symbology(&self) -> Option<&crate::Symbology> {
        self.legs.iter().find_map(|l| l.sub.as_ref()).map(Subscriber::symbology)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::venue_position;

    #[test]
    fn the_table_of_delivered_records_is_used_whole() {
        // DBN-like positions (one record per venue seq) and MDP 3.0-like ones (four entries per packet)
        for per_seq in [1u16, 4] {
            let slots: HashSet<usize> = (0..RECENT_RECORDS as u64)
                .map(|i| slot(venue_position(1_000_000 + i / u64::from(per_seq), (i % u64::from(per_seq)) as u16)))
                .collect();
            // a random function fills 1 - 1/e of its range: 63% of the slots
            assert!(slots.len() > RECENT_RECORDS / 2, "{} slots of {RECENT_RECORDS} used", slots.len());
            assert!(slots.iter().all(|s| *s < RECENT_RECORDS));
        }
    }

    /// What the strategy saw: `(seq, venue seq, kind, size)` per record, `(expected, 0, None, 0)` per gap (a
    /// merged gap takes one seq).
    type Seen = Vec<(u64, u64, Option<Kind>, u32)>;

    fn add(venue_seq: u64) -> BookUpdate {
        BookUpdate {
            venue_pos: venue_position(venue_seq, 0),
            instrument_id: 7,
            order_id: venue_seq,
            size: 1,
            flags: flags::LAST,
            ..BookUpdate::control(Kind::Add)
        }
    }

    fn marker(kind: Kind, venue_seq: u64) -> BookUpdate {
        BookUpdate { venue_pos: venue_position(venue_seq, 0), flags: flags::SNAPSHOT, ..BookUpdate::control(kind) }
    }

    fn end(reason: CloseReason) -> BookUpdate {
        BookUpdate { size: reason as u32, ..BookUpdate::control(Kind::EndOfStream) }
    }

    fn feed(m: &mut Merge, seen: &mut Seen, leg: usize, records: &[BookUpdate]) {
        for r in records {
            m.on_event(leg, Event::Record(r), &mut |e| push(seen, e));
        }
    }

    fn gap(m: &mut Merge, seen: &mut Seen, leg: usize) {
        m.on_event(leg, Event::Gap { expected: 1, got: 2 }, &mut |e| push(seen, e));
    }

    fn push(seen: &mut Seen, e: Event<'_>) {
        match e {
            Event::Record(r) => seen.push((r.seq, r.venue_seq(), r.kind(), r.size)),
            Event::Gap { expected, .. } => seen.push((expected, 0, None, 0)),
            _ => {}
        }
    }

    fn adds(range: std::ops::RangeInclusive<u64>) -> Vec<BookUpdate> {
        range.map(add).collect()
    }

    /// The venue seqs of the records delivered, in order, and whether the merged seqs ran 1, 2, 3, ...
    fn venue_seqs(seen: &Seen) -> (Vec<u64>, bool) {
        let seqs = seen.iter().filter(|s| s.2 == Some(Kind::Add)).map(|s| s.1).collect();
        let contiguous = seen.iter().enumerate().all(|(i, s)| s.0 == i as u64 + 1);
        (seqs, contiguous)
    }

    /// One step of a random script for both legs ([`the_fast_path_gives_exactly_what_the_full_rule_gives`]).
    #[derive(Debug, Clone)]
    enum Op {
        /// The leg's next venue record (a duplicate if the other leg sent it; `diverge`: a differing copy).
        Next {
            leg: usize,
            diverge: bool,
        },
        /// The leg lost this many records in its ring.
        Lose {
            leg: usize,
            n: u64,
        },
        /// The leg's session snapshot at its position begins (`SnapshotBegin`, a `Clear`); the records that follow
        /// until its end are in it.
        SnapshotBegin {
            leg: usize,
        },
        SnapshotEnd {
            leg: usize,
        },
        /// An order-level venue snapshot record (flagged `SNAPSHOT`, a DBN file's) of an instrument at the leg's
        /// position.
        VenueSnapshot {
            leg: usize,
            instrument: u32,
        },
        /// A stale mark at the leg's position, then its market recovery there.
        StaleThenRecovery {
            leg: usize,
            recover: bool,
        },
        Down {
            leg: usize,
        },
        Restart {
            leg: usize,
            back: u64,
        },
        Silent {
            leg: usize,
            silent: bool,
        },
        End {
            leg: usize,
        },
        Flush,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let leg = 0..LEGS;
        prop_oneof![
            40 => (leg.clone(), proptest::bool::weighted(0.02)).prop_map(|(leg, diverge)| Op::Next { leg, diverge }),
            3 => (leg.clone(), 1..20u64).prop_map(|(leg, n)| Op::Lose { leg, n }),
            2 => leg.clone().prop_map(|leg| Op::SnapshotBegin { leg }),
            3 => leg.clone().prop_map(|leg| Op::SnapshotEnd { leg }),
            3 => (leg.clone(), 7..9u32).prop_map(|(leg, instrument)| Op::VenueSnapshot { leg, instrument }),
            2 => (leg.clone(), any::<bool>()).prop_map(|(leg, recover)| Op::StaleThenRecovery { leg, recover }),
            1 => leg.clone().prop_map(|leg| Op::Down { leg }),
            1 => (leg.clone(), 0..30u64).prop_map(|(leg, back)| Op::Restart { leg, back }),
            2 => (leg.clone(), any::<bool>()).prop_map(|(leg, silent)| Op::Silent { leg, silent }),
            1 => leg.prop_map(|leg| Op::End { leg }),
            5 => Just(Op::Flush),
        ]
    }

    /// Venue record `n` of the script's stream: two channels interleaved, two instruments, book and trade kinds.
    fn venue_record(n: u64) -> BookUpdate {
        let kinds = [Kind::Add, Kind::Trade, Kind::LevelChange, Kind::Cancel, Kind::NoAction];
        BookUpdate {
            venue_pos: mdfan_wire::mdp3_venue_position((n % 2) as u16, (n / 4 + 1) as u32, (n / 2 % 2) as u16),
            instrument_id: 7 + u32::from(n.is_multiple_of(3)),
            order_id: n,
            size: 1 + (n % 5) as u32,
            flags: flags::LAST,
            ..BookUpdate::control(kinds[(n % 5) as usize])
        }
    }

    /// Everything the merge handed out and counted, for a script run on `m`.
    fn run_script(mut m: Merge, ops: &[Op]) -> (Vec<String>, MergeStats, [LegStats; LEGS], Option<MergedGap>) {
        let mut out = Vec::new();
        let mut next = [0u64; LEGS];
        let mut f = |e: Event<'_>| {
            out.push(match e {
                Event::Record(r) => format!("{} {:?} {:x} {}", r.seq, r.kind(), r.venue_pos, r.size),
                other => format!("{other:?}"),
            })
        };
        for op in ops {
            match *op {
                Op::Next { leg, diverge } => {
                    let mut r = venue_record(next[leg]);
                    if diverge {
                        r.size += 100;
                    }
                    next[leg] += 1;
                    m.on_event(leg, Event::Record(&r), &mut f);
                }
                Op::Lose { leg, n } => {
                    next[leg] += n;
                    m.on_event(leg, Event::Gap { expected: 1, got: 2 }, &mut f);
                }
                Op::SnapshotBegin { leg } => {
                    let at = venue_record(next[leg].saturating_sub(1)).venue_pos;
                    let snap = [
                        BookUpdate { flags: flags::SNAPSHOT, ..BookUpdate::control(Kind::SnapshotBegin) },
                        BookUpdate {
                            instrument_id: 7,
                            venue_pos: at,
                            flags: flags::SNAPSHOT,
                            ..BookUpdate::control(Kind::Clear)
                        },
                    ];
                    for r in &snap {
                        m.on_event(leg, Event::Record(r), &mut f);
                    }
                }
                Op::SnapshotEnd { leg } => {
                    let at = venue_record(next[leg].saturating_sub(1)).venue_pos;
                    let r =
                        BookUpdate { venue_pos: at, flags: flags::SNAPSHOT, ..BookUpdate::control(Kind::SnapshotEnd) };
                    m.on_event(leg, Event::Record(&r), &mut f);
                }
                Op::VenueSnapshot { leg, instrument } => {
                    let r = BookUpdate { instrument_id: instrument, flags: flags::SNAPSHOT, ..venue_record(next[leg]) };
                    m.on_event(leg, Event::Record(&r), &mut f);
                }
                Op::StaleThenRecovery { leg, recover } => {
                    let at = venue_record(next[leg]).venue_pos;
                    let stale =
                        BookUpdate { venue_pos: at, instrument_id: 7, ..BookUpdate::control(Kind::InstrumentStale) };
                    m.on_event(leg, Event::Record(&stale), &mut f);
                    if recover {
                        let rec = BookUpdate {
                            venue_pos: at,
                            instrument_id: 7,
                            flags: flags::SNAPSHOT | flags::MBP | flags::LAST,
                            ..BookUpdate::control(Kind::Clear)
                        };
                        m.on_event(leg, Event::Record(&rec), &mut f);
                    }
                }
                Op::Down { leg } => m.leg_down(leg),
                Op::Restart { leg, back } => {
                    m.leg_restarted(leg);
                    next[leg] = next[leg].saturating_sub(back);
                }
                Op::Silent { leg, silent } => m.set_leg_silent(leg, silent),
                Op::End { leg } => m.on_event(leg, Event::Record(&end(CloseReason::EndOfStream)), &mut f),
                Op::Flush => m.flush(&mut f),
            }
        }
        m.flush(&mut f);
        (out, m.stats(), [m.leg_stats(0), m.leg_stats(1)], m.last_gap().copied())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The fast path is an optimisation only: on any script of records, losses, snapshots, stale marks,
        /// recoveries, legs going down and up, silences and ends, a merge that may take it hands out exactly what
        /// one that never does hands out, and counts the same.
        #[test]
        fn the_fast_path_gives_exactly_what_the_full_rule_gives(ops in proptest::collection::vec(op(), 1..400)) {
            let slow = Merge { slow_only: true, ..Merge::new() };
            proptest::prop_assert_eq!(run_script(Merge::new(), &ops), run_script(slow, &ops));
        }
    }

    #[test]
    fn copies_are_compared_on_every_field_the_venue_decides_and_no_other() {
        let a = BookUpdate { price_e9: 4_810_250_000_000, side: b'B', ts_event_ns: 11, ..add(5) };
        let publisher_own = [
            BookUpdate { seq: 99, ..a },
            BookUpdate { ts_recv_ns: 12345, ..a },
            BookUpdate { ts_send_ticks: u32::MAX, ..a },
        ];
        for b in &publisher_own {
            assert!(same_venue_fields(&a, b), "{b:?}");
        }
        let venue = [
            BookUpdate { ts_event_ns: 12, ..a },
            BookUpdate { venue_pos: a.venue_pos + 1, ..a },
            BookUpdate { price_e9: a.price_e9 + 1, ..a },
            BookUpdate { order_id: a.order_id ^ 1 << 63, ..a },
            BookUpdate { instrument_id: 8, ..a },
            BookUpdate { size: 2, ..a },
            BookUpdate { kind: Kind::Cancel as u8, ..a },
            BookUpdate { side: b'A', ..a },
            BookUpdate { flags: 0, ..a },
            BookUpdate { level: 1, ..a },
        ];
        for b in &venue {
            assert!(!same_venue_fields(&a, b), "{b:?}");
        }
    }

    #[test]
    fn the_script_takes_the_fast_path() {
        // a script of plain records on both legs: most of them take it (else the property above proves little)
        let ops: Vec<Op> = (0..200).map(|i| Op::Next { leg: i % 2, diverge: false }).collect();
        let mut m = Merge::new();
        let mut fast = 0;
        let mut next = [0u64; LEGS];
        for op in &ops {
            if let Op::Next { leg, .. } = *op {
                let r = venue_record(next[leg]);
                next[leg] += 1;
                if m.fast[leg] {
                    fast += 1;
                }
                m.on_event(leg, Event::Record(&r), &mut |_| {});
            }
        }
        assert!(fast >= 190, "{fast} of 200 took the fast path");
        assert_eq!((m.stats().records, m.leg_stats(1).duplicates), (100, 100));
    }

    #[test]
    fn two_equal_legs_give_every_record_once_in_order_and_the_second_copies_are_counted() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=5));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        feed(&mut m, &mut seen, 1, &adds(4..=8)); // leg 1 overtakes
        feed(&mut m, &mut seen, 0, &adds(6..=8));
        assert_eq!(venue_seqs(&seen), ((1..=8).collect(), true));
        let (a, b) = (m.leg_stats(0), m.leg_stats(1));
        assert_eq!((a.delivered_first, a.duplicates, b.delivered_first, b.duplicates), (5, 3, 3, 5));
        assert_eq!((a.divergences + b.divergences, m.stats().gaps), (0, 0));
        assert_eq!(b.max_trail_records, 5, "leg 1's copy of venue seq 1 came 5 records after leg 0's");
    }

    #[test]
    fn a_gap_on_one_leg_is_filled_by_the_other_and_never_reaches_the_strategy() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=4));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        gap(&mut m, &mut seen, 0); // leg 0 lost 5..=9 in its ring
        feed(&mut m, &mut seen, 0, &adds(10..=12)); // ahead, out of step: held
        assert_eq!(venue_seqs(&seen).0, (1..=4).collect::<Vec<_>>());
        feed(&mut m, &mut seen, 1, &adds(4..=12));
        feed(&mut m, &mut seen, 0, &adds(13..=14)); // in step again: it delivers first
        feed(&mut m, &mut seen, 1, &adds(13..=14));
        assert_eq!(venue_seqs(&seen), ((1..=14).collect(), true));
        assert_eq!(m.stats().gaps, 0);
        assert!(!m.is_stale());
        let a = m.leg_stats(0);
        assert_eq!((a.gaps, a.waited, a.held, a.delivered_first), (1, 4, 0, 6), "10..=13 waited, then 13 passed");
    }

    #[test]
    fn a_leg_that_dies_leaves_the_other_to_carry_the_stream_without_a_gap() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=6));
        feed(&mut m, &mut seen, 1, &adds(1..=4));
        m.leg_down(0);
        feed(&mut m, &mut seen, 1, &adds(5..=9));
        feed(&mut m, &mut seen, 1, &[end(CloseReason::EndOfStream)]);
        assert_eq!(venue_seqs(&seen), ((1..=9).collect(), true));
        assert_eq!(seen.last().unwrap().2, Some(Kind::EndOfStream));
        assert!(m.ended());
        assert_eq!((m.stats().gaps, m.leg_stats(0).downs), (0, 1));
    }

    #[test]
    fn a_loss_on_both_legs_is_one_gap_then_a_snapshot_passes_and_the_books_are_good_again() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=4));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        gap(&mut m, &mut seen, 0);
        gap(&mut m, &mut seen, 1);
        feed(&mut m, &mut seen, 1, &adds(8..=9)); // neither leg holds 5..=7: a gap, then leg 1's records
        feed(&mut m, &mut seen, 0, &adds(9..=10));
        assert!(m.is_stale() && m.take_snapshot_wanted());
        assert_eq!(seen.iter().filter(|s| s.2.is_none()).count(), 1, "{seen:?}");
        let g = MergedGap { seq: 5, cause: GapCause::LegGap, leg: 1, other: OtherLeg::OutOfStep };
        assert_eq!(m.last_gap(), Some(&g), "leg 1's ring gap, after leg 0's own: nobody held 5..=7");
        // leg 0's own resync snapshot passes through, then its stream from the snapshot's position
        feed(
            &mut m,
            &mut seen,
            0,
            &[marker(Kind::SnapshotBegin, 0), marker(Kind::Clear, 10), marker(Kind::SnapshotEnd, 10)],
        );
        assert!(!m.is_stale());
        feed(&mut m, &mut seen, 1, &adds(10..=11));
        feed(&mut m, &mut seen, 0, &adds(11..=12));
        // a later snapshot of leg 1 (its own resync) is not needed: dropped
        feed(&mut m, &mut seen, 1, &[marker(Kind::SnapshotBegin, 0), marker(Kind::SnapshotEnd, 12)]);
        feed(&mut m, &mut seen, 1, &adds(13..=13));
        let (adds_seen, contiguous) = venue_seqs(&seen);
        assert_eq!(adds_seen, vec![1, 2, 3, 4, 8, 9, 10, 11, 12, 13]);
        assert!(contiguous, "{seen:?}");
        let kinds: Vec<Option<Kind>> = seen.iter().map(|s| s.2).collect();
        assert_eq!(kinds.iter().filter(|k| **k == Some(Kind::SnapshotBegin)).count(), 1);
        assert_eq!((m.stats().gaps, m.stats().snapshots, m.leg_stats(1).snapshots_dropped), (1, 1, 1));
    }

    #[test]
    fn a_stale_mark_the_other_leg_fills_never_reaches_the_strategy_and_one_both_had_is_repaired_by_a_snapshot() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let stale = BookUpdate {
            venue_pos: venue_position(5, 0),
            instrument_id: 7,
            ..BookUpdate::control(Kind::InstrumentStale)
        };
        let recovery = [
            BookUpdate { instrument_id: 7, flags: flags::SNAPSHOT | flags::MBP, ..marker(Kind::Clear, 6) },
            BookUpdate {
                instrument_id: 7,
                flags: flags::SNAPSHOT | flags::MBP | flags::LAST,
                ..marker(Kind::LevelNew, 6)
            },
        ];
        feed(&mut m, &mut seen, 0, &adds(1..=4));
        feed(&mut m, &mut seen, 1, &adds(1..=4));
        feed(&mut m, &mut seen, 0, &[stale]); // leg 0 lost venue seq 5..=6
        feed(&mut m, &mut seen, 0, &adds(7..=8));
        feed(&mut m, &mut seen, 0, &recovery);
        assert!(!m.leg_in_step(0), "it lacks what the mark has not passed yet");
        feed(&mut m, &mut seen, 1, &adds(5..=8));
        assert_eq!(venue_seqs(&seen), ((1..=8).collect(), true));
        assert!(m.leg_in_step(0), "recovered, and the mark is past what it held and what its recovery covers");
        assert!(seen.iter().all(|s| s.2 == Some(Kind::Add)), "{seen:?}");
        let a = m.leg_stats(0);
        assert_eq!((a.stale_filled, a.recovery_dropped, m.stats().gaps), (1, 2, 0));
        // both legs lose venue seq 9: the mark passes once, and from there the merged stream is the leg whose mark
        // passed, alone (its own recovery repairs it, as for a single publisher); the other sits out
        let stale9 = BookUpdate { venue_pos: venue_position(9, 0), ..stale };
        let recovery9 = recovery.map(|r| BookUpdate { venue_pos: venue_position(9, 0), ..r });
        feed(&mut m, &mut seen, 1, &[stale9]);
        feed(&mut m, &mut seen, 0, &[stale9]);
        assert_eq!((m.sole(), m.leg_stats(1).benched), (Some(0), true));
        feed(&mut m, &mut seen, 1, &recovery9);
        feed(&mut m, &mut seen, 0, &recovery9);
        feed(&mut m, &mut seen, 1, &adds(10..=10));
        feed(&mut m, &mut seen, 0, &adds(10..=11));
        let tail: Vec<(Option<Kind>, u64)> = seen[8..].iter().map(|s| (s.2, s.1)).collect();
        use Kind::{Add, Clear, InstrumentStale, LevelNew};
        assert_eq!(
            tail,
            [(InstrumentStale, 9), (Clear, 9), (LevelNew, 9), (Add, 10), (Add, 11)].map(|(k, v)| (Some(k), v))
        );
        assert!(venue_seqs(&seen).1, "no gap: {seen:?}");
        // the leg followed alone goes down: the other comes back, after a gap (its own repairs are not known here)
        m.leg_down(0);
        m.flush(&mut |e| push(&mut seen, e));
        assert_eq!((m.sole(), m.leg_stats(1).benched, seen.last().unwrap().2), (None, false, None));
    }

    #[test]
    fn two_copies_that_differ_are_a_divergence_and_the_books_are_stale_until_a_snapshot() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=3));
        feed(&mut m, &mut seen, 1, &adds(1..=2));
        feed(&mut m, &mut seen, 1, &[BookUpdate { size: 99, ..add(3) }]);
        assert_eq!((m.stats().divergences, m.leg_stats(1).divergences), (1, 1));
        assert!(m.is_stale() && m.take_snapshot_wanted());
        assert_eq!(seen.last().unwrap().2, None, "a gap after the divergence: {seen:?}");
        let d = m.last_divergence().unwrap();
        assert_eq!((d.leg, d.delivered.size, d.this_leg.size, d.delivered.seq), (1, 1, 99, 3));
        let g = MergedGap { seq: 4, cause: GapCause::Divergence, leg: 1, other: OtherLeg::InStep };
        assert_eq!(m.last_gap(), Some(&g));
        // leg 1 is left out: only leg 0 delivers, even when leg 1 is first
        assert!(m.leg_stats(1).quarantined && !m.leg_usable(1));
        feed(&mut m, &mut seen, 1, &adds(4..=5));
        feed(&mut m, &mut seen, 0, &adds(4..=5));
        assert_eq!(venue_seqs(&seen).0, vec![1, 2, 3, 4, 5]);
        assert_eq!(m.leg_stats(1).delivered_first, 0);
    }

    #[test]
    fn a_late_leg_joins_from_its_snapshot_and_delivers_only_once_in_step() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        // leg 0 joins at venue seq 3, leg 1 at venue seq 6
        feed(
            &mut m,
            &mut seen,
            0,
            &[marker(Kind::SnapshotBegin, 0), marker(Kind::Clear, 3), marker(Kind::SnapshotEnd, 3)],
        );
        feed(
            &mut m,
            &mut seen,
            1,
            &[marker(Kind::SnapshotBegin, 0), marker(Kind::Clear, 6), marker(Kind::SnapshotEnd, 6)],
        );
        feed(&mut m, &mut seen, 1, &adds(7..=8)); // out of step (the mark is at 3): held
        feed(&mut m, &mut seen, 0, &adds(4..=7));
        feed(&mut m, &mut seen, 1, &adds(9..=9)); // in step now (complete after 6 <= mark 7)
        feed(&mut m, &mut seen, 0, &adds(8..=9));
        let (adds_seen, contiguous) = venue_seqs(&seen);
        assert_eq!((adds_seen, contiguous), ((4..=9).collect(), true));
        let b = m.leg_stats(1);
        assert_eq!(
            (b.waited, b.held, b.delivered_first, b.snapshots_dropped),
            (3, 0, 2, 1),
            "7..=8 waited; 8 and 9 from it"
        );
    }

    #[test]
    fn a_loss_on_the_base_leg_during_a_files_opening_snapshot_is_a_gap() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let snapshot: Vec<BookUpdate> =
            (0..3).map(|i| BookUpdate { flags: flags::SNAPSHOT, order_id: 100 + i, ..add(1) }).collect();
        feed(&mut m, &mut seen, 0, &snapshot);
        feed(&mut m, &mut seen, 1, &snapshot[..1]);
        gap(&mut m, &mut seen, 0);
        gap(&mut m, &mut seen, 1);
        feed(&mut m, &mut seen, 0, &adds(9..=9)); // no mark yet, and leg 0 lost records since it became the base
        assert_eq!(seen.iter().filter(|s| s.2.is_none()).count(), 1, "{seen:?}");
        assert_eq!(m.last_gap().map(|g| (g.cause, g.leg)), Some((GapCause::LegGap, 1)), "the second leg's loss");
        assert!(m.is_stale());
    }

    /// A session snapshot of instrument 7's book (a `Clear`) consistent with venue seq `at`.
    fn session_snapshot(at: u64) -> [BookUpdate; 3] {
        [
            marker(Kind::SnapshotBegin, 0),
            BookUpdate { instrument_id: 7, ..marker(Kind::Clear, at) },
            marker(Kind::SnapshotEnd, at),
        ]
    }

    /// Record `n` (from 1) of a DBN file's opening venue snapshot: flagged `SNAPSHOT`, positions not in order.
    fn venue_snap(n: u64) -> BookUpdate {
        BookUpdate { venue_pos: venue_position(3 - n % 3, 0), flags: flags::SNAPSHOT, order_id: 100 + n, ..add(1) }
    }

    /// The order ids of the venue snapshot records delivered, in order.
    fn venue_snap_ids(seen: &[(u64, u64, Option<Kind>, u32, u64)]) -> Vec<u64> {
        seen.iter().filter(|s| s.4 >= 100).map(|s| s.4 - 100).collect()
    }

    fn feed_ids(m: &mut Merge, seen: &mut Vec<(u64, u64, Option<Kind>, u32, u64)>, leg: usize, records: &[BookUpdate]) {
        for r in records {
            m.on_event(leg, Event::Record(r), &mut |e| match e {
                Event::Record(r) => seen.push((r.seq, r.venue_seq(), r.kind(), r.size, r.order_id)),
                Event::Gap { expected, .. } => seen.push((expected, 0, None, 0, 0)),
                _ => {}
            });
        }
    }

    #[test]
    fn a_files_opening_snapshot_passes_once_by_count_whichever_leg_leads_and_survives_the_leaders_death() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=8).map(venue_snap).collect();
        feed_ids(&mut m, &mut seen, 0, &snap[..3]); // leg 0 leads: 1..=3
        feed_ids(&mut m, &mut seen, 1, &snap[..5]); // leg 1 overtakes: 4, 5 from it
        feed_ids(&mut m, &mut seen, 0, &snap[3..6]); // 6 from leg 0
        m.leg_down(0); // killed in the middle of the file's opening snapshot
        feed_ids(&mut m, &mut seen, 1, &snap[5..]); // 7, 8 from leg 1
        feed_ids(&mut m, &mut seen, 1, &adds(10..=12)); // its stream from the start: no gap
        assert_eq!(venue_snap_ids(&seen), (1..=8).collect::<Vec<_>>(), "{seen:?}");
        assert!(seen.iter().all(|s| s.2.is_some()), "no gap: {seen:?}");
        assert_eq!(seen.iter().filter(|s| s.2 == Some(Kind::Add) && s.4 < 100).count(), 3);
        assert!(seen.iter().enumerate().all(|(i, s)| s.0 == i as u64 + 1));
        let (a, b) = (m.leg_stats(0), m.leg_stats(1));
        assert_eq!((a.delivered_first, a.recovery_dropped, b.delivered_first, b.recovery_dropped), (4, 2, 7, 4));
        assert!(!m.is_stale() && m.stats().gaps == 0);
    }

    #[test]
    fn a_leg_that_lost_records_in_the_opening_snapshot_is_not_counted_and_the_cut_is_a_gap() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=6).map(venue_snap).collect();
        feed_ids(&mut m, &mut seen, 0, &snap[..4]);
        feed_ids(&mut m, &mut seen, 1, &snap[..2]);
        gap(&mut m, &mut Seen::new(), 1); // leg 1 lost 3 in its ring (leg 0 had it: no merged gap)
        feed_ids(&mut m, &mut seen, 1, &snap[3..]); // not counted: dropped
        m.leg_down(0);
        feed_ids(&mut m, &mut seen, 1, &adds(10..=11));
        assert_eq!(venue_snap_ids(&seen), vec![1, 2, 3, 4], "{seen:?}");
        assert_eq!(seen.iter().filter(|s| s.2.is_none()).count(), 1, "5 and 6 were lost with leg 0: {seen:?}");
        assert_eq!(m.last_gap().map(|g| g.cause), Some(GapCause::BaseLost));
    }

    #[test]
    fn a_session_snapshot_taken_during_the_opening_snapshot_is_followed_by_that_legs_tail_only() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=6).map(venue_snap).collect();
        // a late strategy: leg 1 joins with a session snapshot taken after venue snapshot record 3 of its file
        feed_ids(
            &mut m,
            &mut seen,
            1,
            &[
                marker(Kind::SnapshotBegin, 0),
                BookUpdate { order_id: 103, ..venue_snap(3) },
                marker(Kind::SnapshotEnd, 3),
            ],
        );
        feed_ids(&mut m, &mut seen, 0, &snap); // leg 0 from its start: its venue snapshot is not needed
        feed_ids(&mut m, &mut seen, 1, &snap[3..]); // leg 1's tail: 4..=6
        feed_ids(&mut m, &mut seen, 0, &adds(10..=11));
        feed_ids(&mut m, &mut seen, 1, &adds(10..=12));
        assert_eq!(venue_snap_ids(&seen), vec![3, 4, 5, 6], "{seen:?}");
        assert!(seen.iter().all(|s| s.2.is_some()), "no gap: {seen:?}");
        assert_eq!(m.leg_stats(0).recovery_dropped, 6);
        // the same, but leg 1 goes down in its tail: the merged books lack the rest of it
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        feed_ids(&mut m, &mut seen, 1, &[marker(Kind::SnapshotBegin, 0), marker(Kind::SnapshotEnd, 3)]);
        feed_ids(&mut m, &mut seen, 1, &snap[3..4]);
        m.leg_down(1);
        m.flush(&mut |e| push(&mut Seen::new(), e));
        assert!(m.is_stale());
        assert_eq!(m.last_gap().map(|g| (g.cause, g.leg)), Some((GapCause::SnapshotCut, 1)));
        // a session snapshot whose end carries no position (taken before its publisher's first venue record):
        // the leg's records after it are the books' next ones, whatever the other leg does
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let end_at_0 = BookUpdate { flags: flags::SNAPSHOT, ..BookUpdate::control(Kind::SnapshotEnd) };
        feed_ids(&mut m, &mut seen, 1, &[marker(Kind::SnapshotBegin, 0), end_at_0]);
        feed_ids(&mut m, &mut seen, 0, &adds(1..=2));
        feed_ids(&mut m, &mut seen, 1, &adds(1..=3));
        feed_ids(&mut m, &mut seen, 0, &adds(3..=4));
        assert!(seen.iter().all(|s| s.2.is_some()), "no gap: {seen:?}");
        assert_eq!(seen.iter().filter(|s| s.2 == Some(Kind::Add)).map(|s| s.1).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_repair_snapshot_from_a_leg_behind_makes_the_leg_ahead_wait_and_loses_nothing() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=3));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        m.leg_down(0);
        feed(&mut m, &mut seen, 1, &adds(4..=6));
        gap(&mut m, &mut seen, 1); // the only leg up loses 7: a merged gap
        feed(&mut m, &mut seen, 1, &adds(8..=10));
        assert!(m.is_stale());
        // leg 0 is back, behind: its session snapshot at venue seq 8 repairs the books
        m.leg_restarted(0);
        feed(
            &mut m,
            &mut seen,
            0,
            &[marker(Kind::SnapshotBegin, 0), marker(Kind::Clear, 8), marker(Kind::SnapshotEnd, 8)],
        );
        assert!(!m.is_stale());
        feed(&mut m, &mut seen, 1, &adds(11..=11)); // ahead of the books now: waits
        feed(&mut m, &mut seen, 0, &adds(9..=12));
        feed(&mut m, &mut seen, 1, &adds(12..=13));
        let adds_seen = venue_seqs(&seen).0;
        assert_eq!(adds_seen, vec![1, 2, 3, 4, 5, 6, 8, 9, 10, 9, 10, 11, 12, 13], "{seen:?}");
        assert_eq!(m.stats().gaps, 1);
    }

    // A breaker helper's scripts (stop 38): each handed a strategy a wrong stream, or a gap it need not have.

    #[test]
    fn records_never_enter_a_passing_snapshot_even_while_its_leg_is_silent() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        // leg 1 joins first, with a session snapshot at venue seq 5: the merged stream's start
        feed(
            &mut m,
            &mut seen,
            1,
            &[marker(Kind::SnapshotBegin, 0), BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 5) }],
        );
        // leg 0 streams from its seq 1 meanwhile: 1..=5 are in the snapshot (dropped), 6..=8 wait (the base is leg 1)
        feed(&mut m, &mut seen, 0, &adds(1..=8));
        m.set_leg_silent(1, true); // leg 1's session reports a silence in the middle of its snapshot
        m.flush(&mut |e| push(&mut seen, e));
        m.set_leg_silent(1, false);
        feed(&mut m, &mut seen, 1, &[marker(Kind::SnapshotEnd, 5)]);
        feed(&mut m, &mut seen, 1, &adds(6..=9));
        feed(&mut m, &mut seen, 0, &adds(9..=10));
        // before the fix (stop 38): SnapshotBegin, Clear@5, Gap, 6, 7, 8, SnapshotEnd@5, 6, 7, 8, 9, 10 and not stale
        let adds_seen: Vec<u64> = seen.iter().filter(|s| s.2 == Some(Kind::Add)).map(|s| s.1).collect();
        assert_eq!(adds_seen, vec![6, 7, 8, 9, 10], "6..=8 applied twice, once inside the snapshot: {seen:?}");
    }

    #[test]
    fn a_stale_mark_during_the_other_legs_passing_snapshot_is_filled_by_it() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let stale9 = BookUpdate {
            venue_pos: venue_position(9, 0),
            instrument_id: 7,
            ..BookUpdate::control(Kind::InstrumentStale)
        };
        feed(&mut m, &mut seen, 0, &adds(1..=4));
        feed(&mut m, &mut seen, 1, &adds(1..=4));
        gap(&mut m, &mut seen, 0);
        gap(&mut m, &mut seen, 1); // both lost 5..=7: one merged gap, the books stale
        feed(&mut m, &mut seen, 0, &adds(8..=8));
        // leg 1's repair snapshot at venue seq 8 passes through; meanwhile leg 0's publisher loses venue seq 9
        feed(
            &mut m,
            &mut seen,
            1,
            &[marker(Kind::SnapshotBegin, 0), BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 8) }],
        );
        feed(&mut m, &mut seen, 0, &[stale9]);
        feed(&mut m, &mut seen, 1, &[marker(Kind::SnapshotEnd, 8)]);
        feed(&mut m, &mut seen, 1, &adds(9..=11)); // leg 1 has 9
        feed(&mut m, &mut seen, 0, &adds(10..=11));
        assert!(
            !seen.iter().any(|s| s.2 == Some(Kind::InstrumentStale)),
            "leg 0's stale mark passed although leg 1, whose snapshot was passing, had venue seq 9: {seen:?}"
        );
    }

    #[test]
    fn a_new_session_that_begins_with_a_ring_gap_is_not_a_stream_from_the_start() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=5));
        feed(&mut m, &mut seen, 1, &adds(1..=5));
        // leg 1's publisher connection drops; its new session (snapshot at venue seq 7, then 8, 9, ...) overflows its
        // ring before the first poll: the receiver reports Gap { expected: 1, .. } and leg 1 goes on from venue seq 10
        m.leg_down(1);
        m.leg_restarted(1);
        gap(&mut m, &mut seen, 1); // leg 0 is in step: no merged gap (right)
        feed(&mut m, &mut seen, 1, &adds(10..=11));
        feed(&mut m, &mut seen, 0, &adds(6..=11));
        // before the fix (stop 38): 1..=5, 10, 11 with no gap, 6..=9 dropped as duplicates of leg 0 (mark already past them)
        assert_eq!(venue_seqs(&seen), ((1..=11).collect(), true), "{seen:?}");
    }

    #[test]
    fn the_base_leg_reconnecting_inside_the_opening_snapshot_leaves_it_to_the_leg_from_the_start() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=6).map(venue_snap).collect();
        feed_ids(&mut m, &mut seen, 0, &snap[..2]); // leg 0 from its seq 1: the base; opening records 1, 2 pass
        feed_ids(&mut m, &mut seen, 1, &snap[..1]); // leg 1 from its seq 1, behind
                                                    // leg 0's session is lost and reconnects to its (running) publisher: a session snapshot at venue seq 9
        m.leg_down(0);
        m.leg_restarted(0);
        feed_ids(&mut m, &mut seen, 0, &session_snapshot(9));
        feed_ids(&mut m, &mut seen, 0, &adds(10..=11));
        feed_ids(&mut m, &mut seen, 1, &snap[1..]);
        feed_ids(&mut m, &mut seen, 1, &adds(5..=11));
        // before the fix (stop 38): opening 1, 2, venue 10, 11, opening 3..=6, no gap; venue 5..=9 never (leg 1 had them all)
        let adds_seen: Vec<u64> = seen.iter().filter(|s| s.2 == Some(Kind::Add) && s.4 < 100).map(|s| s.1).collect();
        assert!(seen.iter().all(|s| s.2.is_some()), "no gap: {seen:?}");
        assert_eq!(adds_seen, (5..=11).collect::<Vec<_>>(), "{seen:?}");
    }

    #[test]
    fn the_only_leg_reconnecting_inside_the_opening_snapshot_says_what_it_lost() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=6).map(venue_snap).collect();
        m.leg_down(1); // leg 1's publisher is not there (its first connect failed)
        feed_ids(&mut m, &mut seen, 0, &snap[..2]);
        m.leg_down(0);
        m.leg_restarted(0); // reconnects to its running publisher: a session snapshot at venue seq 9
        feed_ids(&mut m, &mut seen, 0, &session_snapshot(9));
        feed_ids(&mut m, &mut seen, 0, &adds(10..=11));
        // before the fix (stop 38): opening 1, 2, then venue 10, 11: no gap and no snapshot
        assert!(
            seen.iter().any(|s| s.2.is_none() || s.2 == Some(Kind::SnapshotBegin)),
            "neither a gap nor the snapshot: {seen:?}"
        );
    }

    #[test]
    fn a_leg_going_down_inside_its_passing_snapshot_gives_a_gap() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let i8 = |n: u64| BookUpdate { instrument_id: 8, ..add(n) };
        // both legs join mid-stream: leg 1's snapshot (at venue seq 5) is first and passes; leg 0's (at 6) is dropped
        feed(
            &mut m,
            &mut seen,
            1,
            &[marker(Kind::SnapshotBegin, 0), BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 5) }],
        );
        feed(
            &mut m,
            &mut seen,
            0,
            &[
                marker(Kind::SnapshotBegin, 0),
                BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 6) },
                BookUpdate { instrument_id: 8, ..marker(Kind::Clear, 4) },
                marker(Kind::SnapshotEnd, 6),
            ],
        );
        m.leg_down(1); // leg 1 dies before instrument 8's book and its SnapshotEnd
        feed(&mut m, &mut seen, 0, &[i8(7), add(8)]);
        m.flush(&mut |e| push(&mut seen, e));
        // before the fix (stop 38): SnapshotBegin, Clear 7 @5, then 7 (instrument 8, on an empty book) and 8; venue seq 6 never; no gap
        assert!(seen.iter().any(|s| s.2.is_none()), "no Event::Gap reached the strategy: {seen:?}");
    }

    #[test]
    fn the_end_is_not_whole_from_a_leg_that_never_gave_what_the_books_lack() {
        let (mut m, mut seen) = (Merge::new(), Vec::new());
        let snap: Vec<BookUpdate> = (1..=6).map(venue_snap).collect();
        feed_ids(&mut m, &mut seen, 0, &snap[..2]); // leg 0 from its seq 1: the base, inside the file's opening
                                                    // leg 1's session is lost and reconnects to its publisher, which has finished the file: a session snapshot at
                                                    // the last venue seq (12), then the end of stream
        m.leg_down(1);
        m.leg_restarted(1);
        feed_ids(
            &mut m,
            &mut seen,
            1,
            &[
                marker(Kind::SnapshotBegin, 0),
                BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 12) },
                marker(Kind::SnapshotEnd, 12),
            ],
        );
        feed_ids(&mut m, &mut seen, 1, &[end(CloseReason::EndOfStream)]);
        m.set_leg_silent(0, true); // leg 0 is slow (or: m.leg_down(0))
        m.flush(&mut |e| match e {
            Event::Record(r) => seen.push((r.seq, r.venue_seq(), r.kind(), r.size, r.order_id)),
            Event::Gap { expected, .. } => seen.push((expected, 0, None, 0, 0)),
            _ => {}
        });
        // before the fix (stop 38): opening 1, 2, then EndOfStream, no gap: the books lack opening 3..=6 and venue seq 10..=12
        assert!(!m.ended() || seen.iter().any(|s| s.2.is_none()), "the end passed without a gap: {seen:?}");
    }

    #[test]
    fn the_end_never_passes_inside_a_passing_snapshot() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        // leg 1 joins first, with a session snapshot at venue seq 5 (the merged stream's start): its book of 7 is a
        // Clear and an order
        feed(
            &mut m,
            &mut seen,
            1,
            &[marker(Kind::SnapshotBegin, 0), BookUpdate { instrument_id: 7, ..marker(Kind::Clear, 5) }],
        );
        m.set_leg_silent(1, true); // then its session reports a silence
        feed(&mut m, &mut seen, 0, &adds(1..=5)); // leg 0 from its seq 1 gives the whole file and ends
        feed(&mut m, &mut seen, 0, &[end(CloseReason::EndOfStream)]);
        // before the fix (stop 38): SnapshotBegin, Clear 7, EndOfStream: book 7 empty, no gap, no SnapshotEnd
        assert!(!m.ended() || seen.iter().any(|s| s.2.is_none()), "ended inside the snapshot, no gap: {seen:?}");
    }

    #[test]
    fn a_stale_mark_on_a_channel_with_no_mark_yet_is_filled_by_a_leg_from_the_start() {
        use mdfan_wire::mdp3_venue_position as pos;
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let lvl = |ch: u16, seq: u32, id: u32| BookUpdate {
            venue_pos: pos(ch, seq, 0),
            instrument_id: id,
            size: 1,
            flags: flags::MBP | flags::LAST,
            ..BookUpdate::control(Kind::LevelNew)
        };
        // both legs from their seq 1; channel 1 (instrument 7) is busy, channel 2 (instrument 8) has had nothing yet
        let ch1: Vec<BookUpdate> = (1..=3).map(|s| lvl(1, s, 7)).collect();
        feed(&mut m, &mut seen, 0, &ch1);
        feed(&mut m, &mut seen, 1, &ch1);
        // leg 0's publisher loses channel 2's packet 1 on both its lines: its stale mark for instrument 8 there
        let stale = BookUpdate {
            venue_pos: pos(2, 1, 0),
            instrument_id: 8,
            flags: flags::MAYBE_BAD_BOOK | flags::LAST,
            ..BookUpdate::control(Kind::InstrumentStale)
        };
        feed(&mut m, &mut seen, 0, &[stale]);
        feed(&mut m, &mut seen, 1, &[lvl(2, 1, 8), lvl(1, 4, 7)]); // leg 1 has it
        feed(&mut m, &mut seen, 0, &[lvl(1, 4, 7)]);
        // before the fix (stop 38): 7@1..3, InstrumentStale(8), 7@4 from leg 0; leg 1 benched (its 8@1 never passes)
        assert!(!seen.iter().any(|s| s.2 == Some(Kind::InstrumentStale)), "{seen:?}");
    }

    #[test]
    fn the_base_leg_reconnecting_never_skips_a_channel_with_no_mark_yet_silently() {
        use mdfan_wire::mdp3_venue_position as pos;
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        let lvl = |ch: u16, seq: u32| BookUpdate {
            venue_pos: pos(ch, seq, 0),
            instrument_id: 6 + u32::from(ch),
            size: seq,
            flags: flags::MBP | flags::LAST,
            ..BookUpdate::control(Kind::LevelNew)
        };
        feed(&mut m, &mut seen, 1, &[lvl(2, 1)]); // leg 1 from its seq 1: the base; channel 1 has no mark yet
        m.leg_down(1);
        m.leg_restarted(1); // reconnects to its running publisher: a session snapshot after channel 1's packet 1
        feed(
            &mut m,
            &mut seen,
            1,
            &[
                marker(Kind::SnapshotBegin, 0),
                BookUpdate { venue_pos: pos(1, 1, 0), instrument_id: 7, ..marker(Kind::Clear, 0) },
                BookUpdate { venue_pos: pos(2, 1, 0), instrument_id: 8, ..marker(Kind::Clear, 0) },
                BookUpdate { venue_pos: pos(1, 1, 0), ..marker(Kind::SnapshotEnd, 0) },
            ],
        );
        feed(&mut m, &mut seen, 1, &[lvl(1, 2)]);
        // leg 0 from its seq 1 had channel 1's packet 1
        feed(&mut m, &mut seen, 0, &[lvl(2, 1), lvl(1, 1), lvl(1, 2)]);
        // before the fix (stop 38): 8@(2,1), 7@(1,2); 7@(1,1) is dropped as a duplicate; no gap
        // 7@(1,1) comes, or a gap says it is missing (leg 0 had not started when leg 1 reconnected)
        let sizes: Vec<u32> = seen.iter().map(|s| s.3).collect();
        assert!(sizes == vec![1, 1, 2] || sizes == vec![1, 0, 2], "{seen:?}");
    }

    #[test]
    fn a_ring_gap_inside_a_dropped_snapshot_ends_it() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=4));
        feed(&mut m, &mut seen, 1, &adds(1..=4));
        gap(&mut m, &mut seen, 0); // leg 0 lost 5 (leg 1 in step: no merged gap)
        feed(&mut m, &mut seen, 0, &adds(6..=6));
        // its own resync snapshot (at 8, dropped: the books do not need it) is cut by another ring gap: its
        // SnapshotEnd and 9 lost
        feed(&mut m, &mut seen, 0, &[marker(Kind::SnapshotBegin, 0)]);
        gap(&mut m, &mut seen, 0);
        feed(&mut m, &mut seen, 0, &adds(10..=20)); // swallowed as "a snapshot the merged books do not need"
        feed(&mut m, &mut seen, 1, &adds(5..=12));
        gap(&mut m, &mut seen, 1); // leg 1 loses 13..=15, which leg 0 sent
        feed(&mut m, &mut seen, 1, &adds(16..=20));
        assert_eq!(m.stats().gaps, 0, "leg 0 had 13..=15: {seen:?}");
    }

    #[test]
    fn a_leg_that_ends_with_less_than_the_other_does_not_end_the_stream() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 1, &adds(1..=5));
        feed(&mut m, &mut seen, 0, &adds(1..=3));
        feed(&mut m, &mut seen, 0, &[end(CloseReason::EndOfStream)]); // leg 1 already sent past 3
        assert!(!m.ended());
        feed(&mut m, &mut seen, 1, &adds(6..=7));
        feed(&mut m, &mut seen, 1, &[end(CloseReason::EndOfStream)]);
        assert!(m.ended());
        assert_eq!(venue_seqs(&seen).0, (1..=7).collect::<Vec<_>>());
        // the other way round: the leg behind may still have more; the end waits for it, or for it to fall silent
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=5));
        feed(&mut m, &mut seen, 1, &adds(1..=2));
        feed(&mut m, &mut seen, 0, &[end(CloseReason::EndOfStream)]);
        assert!(!m.ended());
        m.set_leg_silent(1, true);
        m.flush(&mut |e| push(&mut seen, e));
        assert!(m.ended());
        assert_eq!(seen.last().unwrap().2, Some(Kind::EndOfStream));
        assert_eq!(m.end_reason(), Some(CloseReason::EndOfStream));
    }

    #[test]
    fn a_leg_that_lost_records_of_its_own_ends_only_after_the_other_gave_them_even_if_it_falls_silent() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=3));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        gap(&mut m, &mut seen, 0); // leg 1 can give what leg 0 lost: no merged gap
        feed(&mut m, &mut seen, 0, &[marker(Kind::SnapshotBegin, 0), marker(Kind::SnapshotEnd, 10)]);
        feed(&mut m, &mut seen, 0, &[end(CloseReason::EndOfStream)]);
        m.set_leg_silent(1, true); // the other is slow, not gone
        m.flush(&mut |e| push(&mut seen, e));
        assert!(!m.ended(), "leg 0 lacks 4..=10, which only leg 1 can give: {seen:?}");
        m.set_leg_silent(1, false);
        feed(&mut m, &mut seen, 1, &adds(4..=10));
        feed(&mut m, &mut seen, 1, &[end(CloseReason::EndOfStream)]);
        assert!(m.ended());
        assert_eq!(venue_seqs(&seen), ((1..=10).collect(), true));
        // the leg that can give it goes down instead: the end comes with a gap first
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=3));
        feed(&mut m, &mut seen, 1, &adds(1..=3));
        gap(&mut m, &mut seen, 0);
        feed(&mut m, &mut seen, 0, &[marker(Kind::SnapshotBegin, 0), marker(Kind::SnapshotEnd, 10)]);
        feed(&mut m, &mut seen, 0, &[end(CloseReason::EndOfStream)]);
        m.leg_down(1);
        m.flush(&mut |e| push(&mut seen, e));
        let kinds: Vec<Option<Kind>> = seen[3..].iter().map(|s| s.2).collect();
        assert_eq!(kinds, vec![None, Some(Kind::EndOfStream)], "{seen:?}");
    }

    #[test]
    fn one_leg_shutting_down_does_not_end_the_stream_and_the_end_passes_once() {
        let (mut m, mut seen) = (Merge::new(), Seen::new());
        feed(&mut m, &mut seen, 0, &adds(1..=2));
        feed(&mut m, &mut seen, 1, &adds(1..=2));
        feed(&mut m, &mut seen, 0, &[end(CloseReason::Shutdown)]);
        m.on_event(0, Event::Closed(CloseReason::Shutdown), &mut |e| push(&mut seen, e));
        assert!(!m.ended());
        feed(&mut m, &mut seen, 1, &adds(3..=4));
        feed(&mut m, &mut seen, 1, &[end(CloseReason::EndOfStream)]);
        assert!(m.ended());
        let ends: Vec<u32> = seen.iter().filter(|s| s.2 == Some(Kind::EndOfStream)).map(|s| s.3).collect();
        assert_eq!(ends, vec![CloseReason::EndOfStream as u32]);
        assert_eq!(venue_seqs(&seen).0, vec![1, 2, 3, 4]);
    }
}
