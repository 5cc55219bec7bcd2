//! A/B arbitration of MDP 3.0-style lines (one packet per datagram, its seq in the datagram): the crate
//! `mdfan-arbiter`'s sans-IO [`mdfan_arbiter::Arbiter`] with a datagram as the copy and the packet seq as the
//! position, fed by the caller's clock.
//!
//! Rules (the arbiter crate's, with these settings):
//! - The first of `confirm_packets` (N, default 3) datagrams at consecutive seqs sets the next expected seq
//!   (either line; the same seq on both lines counts once), unless [`Arbiter::start_at`] set it; a feed
//!   handler recovers anything before it from the feed's snapshot channel. The datagrams before it are held,
//!   not lost; one stray datagram (a `MsgSeqNum` of 0xFFFFFF00 before the feed) is replaced by the real ones
//!   and sets nothing.
//! - The expected seq is delivered at once, from whichever line brought it first; the packets already waiting
//!   behind it follow, in seq order.
//! - A packet ahead of the expected seq waits in a slot of a fixed window (`window` slots, pre-allocated), so a
//!   line that lost a packet is filled from the other line without reordering the output.
//! - A copy of a seq already delivered (or already waiting) is a duplicate: counted and dropped. A copy of a seq
//!   already declared a gap is counted as `late` and dropped.
//! - The expected seq is declared missing (a gap) when each line has moved past it by more than
//!   `line_tolerance` seqs (both lines lost it), when packets have waited ahead of it while it did not move for
//!   `gap_timeout_ns` (a line is silent or dead; applied by [`Arbiter::tick`] only, which the caller runs once
//!   both sockets are drained), or when an arriving seq would not fit in the window (a jump, once confirmed:
//!   below). Consecutive missing seqs come out as one [`Event::Gap`], emitted right before the datagram that
//!   ends the run.
//! - A datagram whose seq lies a window or more past the highest seq known is a suspect jump: one stray
//!   datagram (a bogus sender on the group, a corrupt `MsgSeqNum`) must not declare billions of seqs missing and
//!   make every real packet after it a duplicate. It is held (N - 1 pre-allocated slots) and taken only when N
//!   datagrams at consecutive seqs from it on came (either line, the same seq on both counting once: the stream
//!   really moved there, as after an outage): they are then placed in seq order, the seqs below the window
//!   declared missing as for an overflow. A datagram inside the window leaves the held ones alone; a new
//!   suspect that does not continue them replaces them (`jumps_dropped`); once the stream comes within a window
//!   of the held datagrams they are ordinary ones. One stray datagram, two (0xFFFFFFF0 and 0xFFFFFFF1), or the
//!   same one on both lines, is therefore held and never acted on.
//!
//! Decisions depend only on the arrival order and the `now_ns` values passed in, so the machine can be tested and
//! fuzzed without sockets.

use std::net::Ipv4Addr;

use crate::socket::StampKind;

pub use mdfan_arbiter::{ArbiterCounters, Line, DEFAULT_CONFIRM_COPIES};

/// Sizes and thresholds of the arbiter.
#[derive(Debug, Clone)]
pub struct ArbiterConfig {
    /// Packets that may wait behind a missing seq (slots, pre-allocated; rounded up to a power of two).
    pub window: usize,
    /// Largest payload a slot holds, bytes. A longer one is counted as `oversize` and dropped.
    pub max_payload_bytes: usize,
    /// A missing seq is a gap once every line has delivered a seq more than this many seqs past it. 0 suits
    /// lines that never reorder; raise it to the deepest reordering a line shows.
    pub line_tolerance: u64,
    /// A missing seq is a gap once packets have waited ahead of it while the expected seq did not move for this
    /// long, ns of the caller's clock.
    pub gap_timeout_ns: u64,
    /// N: datagrams at consecutive seqs (either line; the same seq on both lines counts once) that set the first
    /// expected seq or confirm a jump (module docs). Default [`mdfan_arbiter::DEFAULT_CONFIRM_COPIES`] (3).
    pub confirm_packets: usize,
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        Self {
            window: 4096,
            // Ethernet MTU 1500 less IPv4 (20) and UDP (8) headers; CME MDP 3.0 packets stay below it.
            max_payload_bytes: 1472,
            line_tolerance: 8,
            gap_timeout_ns: 100_000_000,
            confirm_packets: mdfan_arbiter::DEFAULT_CONFIRM_COPIES,
        }
    }
}

/// A datagram the arbiter delivers: the first copy of its seq.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// The feed's sequence number.
    pub seq: u64,
    /// The line whose copy won.
    pub line: Line,
    /// Receive timestamp, ns since the UNIX epoch.
    pub ts_recv_ns: u64,
    /// Where the timestamp came from.
    pub stamp: StampKind,
    /// The datagram's source address (checked against the line's `sources`).
    pub src: Ipv4Addr,
    /// The UDP payload, borrowed for the callback's duration.
    pub payload: &'a [u8],
}

/// What the arbiter hands to its caller, in seq order.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// Both lines delivered `seq` and the copies differ: one line carries something the venue did not send, so
    /// what was delivered may be wrong. Handle it as a loss of `seq` (the feed handler marks the channel stale
    /// and recovers it). Counted in [`CopyCheckCounters::copy_mismatches`]; comes after the seq's `Data`.
    CopyMismatch {
        /// The seq whose copies differ.
        seq: u64,
    },
    /// Both lines went back a window or more and `confirm_packets` datagrams at consecutive seqs confirmed it
    /// (a venue's `MsgSeqNum` reset, e.g. CME's weekly start): the stream is re-based at `first` (what waited
    /// of the old one went out before). The feed handler resets its sequence state, marks the channel stale and
    /// recovers it from the snapshot feed.
    SeqReset {
        /// The first seq of the new stream.
        first: u64,
    },
    /// The next datagram.
    Data(Datagram<'a>),
    /// Seqs `first..=last` came on neither line; the next `Data` (if any) has seq `last + 1`.
    Gap {
        /// First missing seq.
        first: u64,
        /// Last missing seq.
        last: u64,
    },
}

/// A datagram's receive stamp and source: the metadata a copy carries through the window.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    /// Receive timestamp, ns since the UNIX epoch.
    pub ts_recv_ns: u64,
    /// Where the timestamp came from.
    pub stamp: StampKind,
    /// The datagram's source address.
    pub src: Ipv4Addr,
}

impl Default for Stamp {
    fn default() -> Self {
        Stamp { ts_recv_ns: 0, stamp: StampKind::None, src: Ipv4Addr::UNSPECIFIED }
    }
}

/// Most source addresses one line may list (`LineConfig::sources`), and most foreign sources counted apart.
pub const MAX_SOURCES: usize = 8;

/// Datagrams dropped because their source is not one the line lists: per foreign source (the first
/// [`MAX_SOURCES`] seen), and the rest together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceCounts {
    /// `(source, datagrams)`, in the order first seen; unused entries are `(0.0.0.0, 0)`.
    pub by_source: [(Ipv4Addr, u64); MAX_SOURCES],
    /// Datagrams from foreign sources past the first [`MAX_SOURCES`].
    pub others: u64,
}

impl Default for SourceCounts {
    fn default() -> Self {
        SourceCounts { by_source: [(Ipv4Addr::UNSPECIFIED, 0); MAX_SOURCES], others: 0 }
    }
}

impl SourceCounts {
    /// One more datagram from `src`.
    pub fn count(&mut self, src: Ipv4Addr) {
        for e in self.by_source.iter_mut() {
            if e.1 == 0 || e.0 == src {
                *e = (src, e.1 + 1);
                return;
            }
        }
        self.others += 1;
    }

    /// All datagrams dropped for their source.
    pub fn total(&self) -> u64 {
        self.by_source.iter().map(|e| e.1).sum::<u64>() + self.others
    }
}

/// What the per-copy checks counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyCheckCounters {
    /// Per line (A, B): datagrams from a source the line does not list, dropped before arbitration.
    pub foreign: [SourceCounts; 2],
    /// Seqs whose copies on lines A and B differ ([`Event::CopyMismatch`]).
    pub copy_mismatches: u64,
}

/// The per-copy checks of these lines (`mdfan_arbiter::CopyChecks`): the source of every datagram against its
/// line's list, and the two copies of a seq compared (a word-wise FNV-style hash of the delivered copy, kept per
/// seq in a window of the arbiter's size, against each duplicate's). Allocated at construction; nothing after.
pub struct LineChecks {
    sources: [[Ipv4Addr; MAX_SOURCES]; 2],
    listed: [usize; 2],
    /// The delivered copies' hashes, per seq.
    hashes: mdfan_arbiter::CopyHashes,
    counters: CopyCheckCounters,
}

impl LineChecks {
    fn new(window: usize, sources: [&[Ipv4Addr]; 2]) -> Self {
        let mut own = [[Ipv4Addr::UNSPECIFIED; MAX_SOURCES]; 2];
        let mut listed = [0; 2];
        for (l, list) in sources.iter().enumerate() {
            for (i, a) in list.iter().take(MAX_SOURCES).enumerate() {
                own[l][i] = *a;
            }
            listed[l] = list.len().min(MAX_SOURCES);
        }
        Self {
            sources: own,
            listed,
            hashes: mdfan_arbiter::CopyHashes::new(window),
            counters: CopyCheckCounters::default(),
        }
    }
}

impl mdfan_arbiter::CopyChecks<u64, Stamp> for LineChecks {
    fn admit(&mut self, c: &mdfan_arbiter::LineCopy<'_, u64, Stamp>) -> bool {
        let l = c.line.index().min(1);
        let n = self.listed[l];
        if n == 0 || self.sources[l][..n].contains(&c.meta.src) {
            return true;
        }
        self.counters.foreign[l].count(c.meta.src);
        false
    }

    fn delivered(&mut self, c: &mdfan_arbiter::LineCopy<'_, u64, Stamp>) {
        self.hashes.delivered(c.pos, c.bytes);
    }

    fn duplicate(&mut self, c: &mdfan_arbiter::LineCopy<'_, u64, Stamp>, waiting: Option<&[u8]>) {
        let differs = match waiting {
            Some(first) => self.hashes.duplicate_of_waiting(c.pos, c.bytes, first),
            None => self.hashes.duplicate(c.pos, c.bytes),
        };
        if differs {
            self.counters.copy_mismatches += 1;
        }
    }
}

/// The arbitration engine these lines use: positions are seqs, copies are datagrams.
type Engine = mdfan_arbiter::Arbiter<u64, Stamp, LineChecks>;

fn datagram(c: mdfan_arbiter::LineCopy<'_, u64, Stamp>) -> Datagram<'_> {
    Datagram {
        seq: c.pos,
        line: c.line,
        ts_recv_ns: c.meta.ts_recv_ns,
        stamp: c.meta.stamp,
        src: c.meta.src,
        payload: c.bytes,
    }
}

/// The engine's events as this module's.
fn relay<'o>(out: &'o mut impl FnMut(Event<'_>)) -> impl FnMut(mdfan_arbiter::Event<'_, u64, Stamp>) + 'o {
    move |e| match e {
        mdfan_arbiter::Event::Data(c) => out(Event::Data(datagram(c))),
        mdfan_arbiter::Event::Gap { first, last } => out(Event::Gap { first, last }),
        mdfan_arbiter::Event::Reset { first } => out(Event::SeqReset { first }),
    }
}

/// Places a datagram (one unit per copy).
fn place_one<O: FnMut(mdfan_arbiter::Event<'_, u64, Stamp>)>(
    e: &mut Engine,
    c: mdfan_arbiter::LineCopy<'_, u64, Stamp>,
    _held: bool,
    out: &mut O,
) {
    e.place(c, out);
}

/// The A/B arbiter. See the [module docs](self) for the rules.
pub struct Arbiter {
    engine: Engine,
}

impl Arbiter {
    /// An arbiter with every buffer allocated now (`window * max_payload_bytes` bytes of payload store), taking
    /// datagrams from any source.
    pub fn new(cfg: ArbiterConfig) -> Self {
        Self::with_sources(cfg, [&[], &[]])
    }

    /// As [`Arbiter::new`], taking on line A only datagrams from `sources[0]` and on line B from `sources[1]`
    /// (an empty list: any source; at most [`MAX_SOURCES`] each).
    pub fn with_sources(cfg: ArbiterConfig, sources: [&[Ipv4Addr]; 2]) -> Self {
        let checks = LineChecks::new(cfg.window, sources);
        let engine = Engine::with_checks(
            mdfan_arbiter::ArbiterConfig {
                window: cfg.window,
                slot_bytes: cfg.max_payload_bytes,
                held_bytes: cfg.max_payload_bytes,
                gap_reports: mdfan_arbiter::GapReports::Coalesced,
                line_tolerance: Some(cfg.line_tolerance),
                gap_timeout_ns: Some(cfg.gap_timeout_ns),
                held_joins_when_reached: true,
                confirm_copies: cfg.confirm_packets,
                resets: true,
            },
            checks,
        );
        Self { engine }
    }

    /// The counters so far.
    pub fn counters(&self) -> &ArbiterCounters {
        self.engine.counters()
    }

    /// The next seq the arbiter will deliver (`None` before the first datagram).
    pub fn next_seq(&self) -> Option<u64> {
        self.engine.next()
    }

    /// What the per-copy checks counted: foreign sources per line, copy mismatches.
    pub fn check_counters(&self) -> &CopyCheckCounters {
        &self.engine.checks().counters
    }

    /// Sets the first expected seq, if none is set yet (the snapshot feed said where the stream stands); without
    /// it the first `confirm_packets` datagrams at consecutive seqs set it.
    pub fn start_at(&mut self, seq: u64) {
        self.engine.start_at(seq);
    }

    /// Datagrams waiting behind a missing seq.
    pub fn waiting(&self) -> usize {
        self.engine.waiting()
    }

    /// Offers one datagram received on `line`; delivers through `out` whatever became deliverable.
    pub fn offer(&mut self, d: Datagram<'_>, now_ns: u64, out: &mut impl FnMut(Event<'_>)) {
        let meta = Stamp { ts_recv_ns: d.ts_recv_ns, stamp: d.stamp, src: d.src };
        let copy = mdfan_arbiter::LineCopy { pos: d.seq, line: d.line, meta, bytes: d.payload };
        {
            let out = &mut relay(out);
            self.engine.offer(copy, now_ns, out, place_one);
            self.engine.settle(out);
            self.engine.release_reached(out, place_one);
        }
        if let Some(seq) = self.engine.checks_mut().hashes.take_mismatch() {
            out(Event::CopyMismatch { seq });
        }
    }

    /// Applies the gap timeout with the caller's clock. Call it only when both lines have nothing more to read
    /// (their sockets are drained): a packet still queued on the slower line must not lose to the clock.
    pub fn tick(&mut self, now_ns: u64, out: &mut impl FnMut(Event<'_>)) {
        self.engine.tick(now_ns, &mut relay(out));
    }

    /// Reports the run of missing seqs declared so far without waiting for the datagram that closes it (at the
    /// end of a stream). A run that grows afterwards is reported again from its next seq.
    pub fn flush(&mut self, out: &mut impl FnMut(Event<'_>)) {
        self.engine.flush(&mut relay(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dg(line: Line, seq: u64) -> ([u8; 8], Line, u64) {
        (seq.to_le_bytes(), line, seq)
    }

    /// Offers `(line, seq)` pairs at time 0 and returns the events as `Ok(seq)` for data, `Err((first, last))`
    /// for gaps.
    fn run(a: &mut Arbiter, input: &[(Line, u64)], now_ns: u64) -> Vec<Result<u64, (u64, u64)>> {
        let mut got = Vec::new();
        for &(line, seq) in input {
            let (bytes, line, seq) = dg(line, seq);
            a.offer(
                Datagram {
                    seq,
                    line,
                    ts_recv_ns: 7,
                    stamp: StampKind::Software,
                    src: Ipv4Addr::LOCALHOST,
                    payload: &bytes,
                },
                now_ns,
                &mut |e| match e {
                    Event::Data(d) => {
                        assert_eq!(d.payload, d.seq.to_le_bytes());
                        got.push(Ok(d.seq))
                    }
                    Event::Gap { first, last } => got.push(Err((first, last))),
                    Event::CopyMismatch { seq } => panic!("copies of {seq} differ"),
                    Event::SeqReset { first } => got.push(Err((first, 0))),
                },
            );
        }
        got
    }

    fn cfg(tolerance: u64) -> ArbiterConfig {
        // The first datagram sets the start (the start rule has its own tests below).
        ArbiterConfig {
            window: 8,
            max_payload_bytes: 16,
            line_tolerance: tolerance,
            gap_timeout_ns: 1_000,
            confirm_packets: 1,
        }
    }

    use Line::{A, B};

    #[test]
    fn first_copy_wins_and_duplicates_are_dropped() {
        let mut a = Arbiter::new(cfg(0));
        let got = run(&mut a, &[(A, 10), (B, 10), (B, 11), (A, 11), (A, 12), (B, 12)], 0);
        assert_eq!(got, vec![Ok(10), Ok(11), Ok(12)]);
        let c = a.counters();
        assert_eq!((c.received, c.delivered, c.duplicates, c.gap_seqs), ([3, 3], [2, 1], 3, 0));
    }

    #[test]
    fn a_loss_on_one_line_is_filled_from_the_other_in_order() {
        let mut a = Arbiter::new(cfg(0));
        // A lost 11; B is behind.
        let got = run(&mut a, &[(A, 10), (A, 12), (A, 13), (B, 10), (B, 11), (B, 12), (B, 13)], 0);
        assert_eq!(got, vec![Ok(10), Ok(11), Ok(12), Ok(13)]);
        let c = a.counters();
        assert_eq!((c.delivered, c.duplicates, c.gap_seqs, a.waiting()), ([3, 1], 3, 0, 0));
    }

    #[test]
    fn a_seq_both_lines_lost_is_a_gap_once_both_moved_past() {
        let mut a = Arbiter::new(cfg(1));
        let got = run(&mut a, &[(A, 1), (B, 1), (A, 4), (A, 5), (B, 4)], 0);
        // B at 4 is only 2 past 2 (tolerance 1: needs > 1 past): seq 2 is a gap, 3 not yet.
        assert_eq!(got, vec![Ok(1)]);
        assert_eq!(a.counters().gap_seqs, 1);
        let got = run(&mut a, &[(B, 5)], 0);
        assert_eq!(got, vec![Err((2, 3)), Ok(4), Ok(5)]);
        let got = run(&mut a, &[(B, 2), (A, 1)], 0);
        assert!(got.is_empty());
        let c = a.counters();
        assert_eq!((c.gap_seqs, c.gap_events, c.late, c.duplicates), (2, 1, 1, 4));
    }

    #[test]
    fn a_silent_line_makes_gaps_by_timeout_only() {
        let mut a = Arbiter::new(cfg(0));
        let got = run(&mut a, &[(A, 1), (A, 3), (A, 4)], 100);
        assert_eq!(got, vec![Ok(1)]);
        let mut got = Vec::new();
        a.tick(1_099, &mut |e| got.push(matches!(e, Event::Gap { .. })));
        assert!(got.is_empty());
        a.tick(1_100, &mut |e| got.push(matches!(e, Event::Gap { first: 2, last: 2 }) || matches!(e, Event::Data(_))));
        assert_eq!(got, vec![true, true, true]);
        assert_eq!(a.counters().gap_timeouts, 1);
        assert_eq!(a.next_seq(), Some(5));
    }

    #[test]
    fn a_hole_behind_another_is_timed_from_when_it_was_seen_not_from_when_the_first_was_filled() {
        let mut a = Arbiter::new(cfg(0));
        assert_eq!(run(&mut a, &[(A, 1), (A, 3), (A, 5)], 0), vec![Ok(1)]);
        // 2 comes at 500: 2 and 3 go out; 4 has been missing since 5 came, at 0.
        assert_eq!(run(&mut a, &[(B, 2)], 500), vec![Ok(2), Ok(3)]);
        let mut gaps = Vec::new();
        a.tick(999, &mut |e| gaps.push(matches!(e, Event::Gap { .. })));
        assert!(gaps.is_empty());
        a.tick(1_000, &mut |e| gaps.push(matches!(e, Event::Gap { first: 4, last: 4 })));
        assert_eq!(gaps, vec![true, false], "the gap, then 5");
        assert_eq!((a.next_seq(), a.waiting()), (Some(6), 0));
    }

    /// A dead line B and line A losing one seq in three: every hole is declared a gap timeout after line A moved
    /// past it, side by side, so the stream never falls further behind than one timeout (it used to wait one
    /// timeout per hole, one after the other: a new user's 100 holes on a dead line ended 76 s late).
    #[test]
    fn holes_one_dead_line_leaves_in_a_row_time_out_together() {
        let mut a = Arbiter::new(cfg(0));
        // within the window (8): 3 and 6 missing
        let input: Vec<(Line, u64)> = (1..=8).filter(|s| s % 3 != 0).map(|s| (A, s)).collect();
        assert_eq!(run(&mut a, &input, 0), vec![Ok(1), Ok(2)]);
        let mut got = Vec::new();
        for _ in 0..4 {
            a.tick(1_000, &mut |e| match e {
                Event::Gap { first, last } => got.push(Err((first, last))),
                Event::Data(d) => got.push(Ok(d.seq)),
                _ => {}
            });
        }
        let want: Vec<Result<u64, (u64, u64)>> =
            (3..=8).map(|s| if s % 3 == 0 { Err((s, s)) } else { Ok(s) }).collect();
        assert_eq!(got, want, "every hole by the timeout at 1,000");
    }

    /// Every datagram offered is accounted for once (the counters' invariant), `held` = a suspect is held.
    fn assert_accounted(a: &Arbiter, held: u64) {
        let c = a.counters();
        let out = c.delivered[0] + c.delivered[1] + c.duplicates + c.late + c.oversize + c.jumps_dropped;
        assert_eq!(c.received[0] + c.received[1], out + a.waiting() as u64 + held, "{c:?}");
    }

    /// The default start and jump rule (3 datagrams at consecutive seqs), started at 1.
    fn guarded() -> Arbiter {
        let mut a = Arbiter::new(ArbiterConfig { confirm_packets: 3, ..cfg(0) });
        a.start_at(1);
        a
    }

    #[test]
    fn a_jump_beyond_the_window_is_taken_once_three_consecutive_datagrams_show_it() {
        let mut a = guarded();
        // Window 8: 20 lies past it (next 2): held, nothing decided; 13 does not continue it and replaces it.
        assert_eq!(run(&mut a, &[(A, 1), (A, 3), (A, 20), (A, 13)], 0), vec![Ok(1)]);
        let c = *a.counters();
        assert_eq!((a.waiting(), c.jumps_held, c.jumps_dropped, c.gap_seqs), (1, 2, 1, 0));
        // 14 on B and 15 on A continue 13 (B's 13 is a copy of a held one): the stream moved. 13 needs next >= 6:
        // 2 and 4..=5 are declared missing, 3 delivered between; with both lines at 14 or more (tolerance 0) the
        // rest up to 12 is missing too.
        let got = run(&mut a, &[(B, 14), (B, 13), (A, 15)], 0);
        assert_eq!(got, vec![Err((2, 2)), Ok(3), Err((4, 12)), Ok(13), Ok(14), Ok(15)]);
        let c = *a.counters();
        assert_eq!((c.jumps_held, c.jumps_taken, c.gap_seqs, c.duplicates, a.waiting()), (3, 1, 10, 1, 0));
        assert_eq!(run(&mut a, &[(B, 16), (A, 16)], 0), vec![Ok(16)]);
        assert_accounted(&a, 0);
    }

    #[test]
    fn a_stray_datagram_far_ahead_is_held_and_the_stream_goes_on() {
        let mut a = guarded();
        let got = run(&mut a, &[(A, 1), (B, 1), (A, 2), (A, 0xFFFF_FFFF), (B, 2), (A, 3), (B, 3), (B, 4), (A, 4)], 0);
        assert_eq!(got, vec![Ok(1), Ok(2), Ok(3), Ok(4)]);
        let c = *a.counters();
        assert_eq!((c.jumps_held, c.jumps_taken, c.gap_seqs, c.duplicates, a.next_seq()), (1, 0, 0, 4, Some(5)));
        assert_accounted(&a, 1);
        // A second stray that does not continue the first replaces it.
        assert_eq!(run(&mut a, &[(B, 1 << 40), (A, 5)], 0), vec![Ok(5)]);
        assert_eq!((a.counters().jumps_held, a.counters().jumps_dropped), (2, 1));
        assert_accounted(&a, 1);
    }

    #[test]
    fn foreign_sources_are_dropped_and_counted_by_source_and_differing_copies_are_reported() {
        let (feed, forger) = (Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2));
        let mut a = Arbiter::with_sources(cfg(0), [&[feed], &[feed]]);
        let mut got = Vec::new();
        let mut offer = |a: &mut Arbiter, line, seq: u64, src, byte: u8| {
            let payload = [byte; 4];
            let d = Datagram { seq, line, ts_recv_ns: 0, stamp: StampKind::Software, src, payload: &payload };
            a.offer(d, 0, &mut |e| {
                got.push(match e {
                    Event::Data(d) => format!("data {} {}", d.seq, d.payload[0]),
                    Event::Gap { first, last } => format!("gap {first}..={last}"),
                    Event::CopyMismatch { seq } => format!("mismatch {seq}"),
                    Event::SeqReset { first } => format!("reset {first}"),
                })
            });
        };
        // Forged copies of 1 and 2 from 127.0.0.2 ahead of the stream: dropped before arbitration, the real ones
        // win. Then line B's copy of 3 differs from line A's: reported after it.
        offer(&mut a, A, 1, forger, 9);
        offer(&mut a, B, 2, forger, 9);
        offer(&mut a, A, 1, feed, 1);
        offer(&mut a, B, 1, feed, 1);
        offer(&mut a, A, 2, feed, 2);
        offer(&mut a, A, 3, feed, 3);
        offer(&mut a, B, 3, feed, 7);
        assert_eq!(got, ["data 1 1", "data 2 2", "data 3 3", "mismatch 3"]);
        let c = *a.check_counters();
        assert_eq!((c.foreign[0].by_source[0], c.foreign[1].by_source[0]), ((forger, 1), (forger, 1)));
        assert_eq!((c.foreign[0].total(), c.copy_mismatches, a.counters().refused), (1, 1, 2));
    }

    #[test]
    fn a_seq_reset_on_both_lines_re_bases_the_stream_after_three_copies() {
        // CME's weekly restart: both lines go back to MsgSeqNum 1. The held copies of 1 and 2 are below the
        // expected seq; they wait for their run (they are not a jump the stream caught up with).
        let mut a = Arbiter::new(ArbiterConfig { confirm_packets: 3, ..cfg(0) });
        a.start_at(1000);
        let mut input: Vec<_> = (1000..1020).flat_map(|s| [(A, s), (B, s)]).collect();
        input.extend((1..=5).flat_map(|s| [(A, s), (B, s)]));
        let mut want: Vec<Result<u64, (u64, u64)>> = (1000..1020).map(Ok).collect();
        want.push(Err((1, 0)));
        want.extend((1..=5).map(Ok));
        assert_eq!(run(&mut a, &input, 0), want);
        let c = *a.counters();
        assert_eq!((c.resets_held, c.resets, c.gap_seqs, c.duplicates), (2, 1, 0, 20 + 5));
        assert_eq!(a.next_seq(), Some(6));

        assert_accounted(&a, 0);
    }

    #[test]
    fn after_a_reset_the_lagging_line_s_old_tail_is_late_not_a_jump() {
        // Line A restarts at 1 while line B still sends the end of the old stream (1016..1019): B's old copies are
        // late, not a jump to 1016 with a gap over 4..1015; B's new stream is duplicates of A's.
        let mut a = Arbiter::new(ArbiterConfig { confirm_packets: 3, ..cfg(0) });
        a.start_at(1000);
        let mut input: Vec<_> = (1000..1020).map(|s| (A, s)).collect();
        input.extend((1000..1016).map(|s| (B, s)));
        input.extend([(A, 1), (A, 2), (A, 3)]);
        input.extend((1016..1020).map(|s| (B, s)));
        input.extend([(B, 1), (B, 2), (B, 3), (A, 4), (B, 4), (A, 5)]);
        let mut want: Vec<Result<u64, (u64, u64)>> = (1000..1020).map(Ok).collect();
        want.push(Err((1, 0)));
        want.extend((1..=5).map(Ok));
        assert_eq!(run(&mut a, &input, 0), want);
        let c = *a.counters();
        assert_eq!((c.resets, c.late, c.jumps_held, c.jumps_taken, c.gap_seqs), (1, 4, 0, 0, 0));
        assert_eq!((c.duplicates, a.next_seq()), (16 + 4, Some(6)));

        assert_accounted(&a, 0);
    }

    #[test]
    fn a_second_copy_that_differs_from_a_waiting_first_is_reported() {
        // Line A lost 2, so A's 3 waits (the lines may be 4 apart) when B's 3 comes, out of order, with other
        // bytes: compared with the waiting copy (no hash of it yet) and reported at once; B's 2 then fills the
        // hole and A's 3 goes out.
        let mut a = Arbiter::new(cfg(4));
        let mut got = Vec::new();
        for (line, seq, byte) in [(A, 1, 1u8), (A, 3, 3), (B, 1, 1), (B, 3, 9), (B, 2, 2)] {
            let payload = [byte; 4];
            let d = Datagram {
                seq,
                line,
                ts_recv_ns: 0,
                stamp: StampKind::Software,
                src: Ipv4Addr::LOCALHOST,
                payload: &payload,
            };
            a.offer(d, 0, &mut |e| {
                got.push(match e {
                    Event::Data(d) => format!("data {} {}", d.seq, d.payload[0]),
                    Event::CopyMismatch { seq } => format!("mismatch {seq}"),
                    other => format!("{other:?}"),
                })
            });
        }
        assert_eq!(got, ["data 1 1", "mismatch 3", "data 2 2", "data 3 3"]);
        assert_eq!((a.check_counters().copy_mismatches, a.counters().duplicates), (1, 2));
    }

    #[test]
    fn a_stray_msg_seq_num_before_the_feed_does_not_silence_it() {
        // The attack: one 12-byte datagram with MsgSeqNum 0xFFFFFF00 on line A before the first real
        // packet. It used to set the expected seq, every real packet then a duplicate.
        let mut a = Arbiter::new(ArbiterConfig { confirm_packets: 3, ..cfg(0) });
        let mut input = vec![(A, 0xFFFF_FF00)];
        input.extend((1..=20).flat_map(|s| [(A, s), (B, s)]));
        assert_eq!(run(&mut a, &input, 0), (1..=20).map(Ok).collect::<Vec<_>>());
        let c = *a.counters();
        assert_eq!((c.start_held, c.jumps_dropped, c.duplicates, c.delivered), (3, 1, 20, [20, 0]));
        assert_accounted(&a, 0);
    }

    #[test]
    fn a_held_datagram_the_stream_comes_within_a_window_of_is_an_ordinary_one() {
        let mut a = guarded();
        // 12 is a window past next 2 when it comes; once next is 5 it is within the window: it waits, and goes
        // out in order.
        assert_eq!(run(&mut a, &[(A, 1), (B, 12), (A, 2), (A, 3), (A, 4)], 0), vec![Ok(1), Ok(2), Ok(3), Ok(4)]);
        assert_eq!((a.waiting(), a.counters().jumps_held), (1, 1));
        let got = run(&mut a, &[(A, 5), (A, 6), (A, 7), (A, 8), (A, 9), (A, 10), (A, 11)], 0);
        assert_eq!(got, (5..=12).map(Ok).collect::<Vec<_>>());
        let c = *a.counters();
        assert_eq!((c.jumps_taken, c.gap_seqs, c.delivered), (0, 0, [11, 1]));
        assert_accounted(&a, 0);
    }
}
