//! A/B arbitration: a sans-IO state machine fed by the caller's clock.
//!
//! Rules:
//! - The first datagram seen sets the next expected seq (a feed handler recovers anything before it from the
//!   feed's snapshot channel).
//! - The expected seq is delivered at once, from whichever line brought it first; the packets already waiting
//!   behind it follow, in seq order.
//! - A packet ahead of the expected seq waits in a slot of a fixed window (`window` slots, pre-allocated), so a
//!   line that lost a packet is filled from the other line without reordering the output.
//! - A copy of a seq already delivered (or already waiting) is a duplicate: counted and dropped. A copy of a seq
//!   already declared a gap is counted as `late` and dropped.
//! - The expected seq is declared missing (a gap) when each line has moved past it by more than
//!   `line_tolerance` seqs (both lines lost it), when packets have waited ahead of it while it did not move for
//!   `gap_timeout_ns` (a line is silent or dead; applied by [`Arbiter::tick`] only, which the caller runs once
//!   both sockets are drained), or when an arriving seq would not fit in the window (a jump, once confirmed: below). Consecutive missing seqs
//!   come out as one [`Event::Gap`], emitted right before the datagram that ends the run.
//! - A datagram whose seq lies a window or more past the expected one is a suspect jump: one stray datagram (a
//!   bogus sender on the group, a corrupt `MsgSeqNum`) must not declare billions of seqs missing and make every
//!   real packet after it a duplicate. It is held (one pre-allocated slot) and taken only when another datagram,
//!   on either line, also lies past the window and within a window of it (the stream really moved there, as after
//!   an outage): the seqs below the window are then declared missing as for an overflow, and both are delivered
//!   or wait in seq order. A datagram inside the window leaves the held one alone; a new suspect that does not
//!   confirm it replaces it (`jumps_dropped`). A stray datagram is therefore held and never acted on.
//!
//! Decisions depend only on the arrival order and the `now_ns` values passed in, so the machine can be tested and
//! fuzzed without sockets.

use crate::socket::StampKind;

/// One of the two redundant lines of a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// Line A.
    A = 0,
    /// Line B.
    B = 1,
}

impl Line {
    /// The index of this line in per-line arrays (A = 0, B = 1).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The other line.
    pub fn other(self) -> Line {
        match self {
            Line::A => Line::B,
            Line::B => Line::A,
        }
    }

    /// "A" or "B".
    pub fn name(self) -> &'static str {
        match self {
            Line::A => "A",
            Line::B => "B",
        }
    }
}

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
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        Self {
            window: 4096,
            // Ethernet MTU 1500 less IPv4 (20) and UDP (8) headers; CME MDP 3.0 packets stay below it.
            max_payload_bytes: 1472,
            line_tolerance: 8,
            gap_timeout_ns: 100_000_000,
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
    /// The UDP payload, borrowed for the callback's duration.
    pub payload: &'a [u8],
}

/// What the arbiter hands to its caller, in seq order.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
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

/// The arbiter's counters. Every datagram offered is counted exactly once in `delivered`, `duplicates`, `late`,
/// `oversize` or `jumps_dropped`, or is still `waiting` or held as a suspect jump (at most one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArbiterCounters {
    /// Datagrams offered per line (A, B).
    pub received: [u64; 2],
    /// Datagrams delivered, by the line whose copy won (A, B).
    pub delivered: [u64; 2],
    /// Copies of a seq already delivered or already waiting: dropped.
    pub duplicates: u64,
    /// Copies of a seq already declared a gap: dropped.
    pub late: u64,
    /// Payloads longer than `max_payload_bytes` that would have had to wait: dropped.
    pub oversize: u64,
    /// Seqs declared missing.
    pub gap_seqs: u64,
    /// `Event::Gap` events emitted (runs of missing seqs; a run is reported when the datagram after it is
    /// delivered, or by [`Arbiter::flush`]).
    pub gap_events: u64,
    /// Gap decisions made by the timeout.
    pub gap_timeouts: u64,
    /// Gap decisions forced because an arriving seq did not fit in the window.
    pub gap_overflows: u64,
    /// Datagrams held as a suspect jump (a window or more past the expected seq; module docs).
    pub jumps_held: u64,
    /// Suspect jumps taken: another datagram confirmed the stream moved there.
    pub jumps_taken: u64,
    /// Suspect jumps dropped: replaced by a later suspect that did not confirm them.
    pub jumps_dropped: u64,
}

/// What made a gap.
#[derive(Clone, Copy)]
enum GapCause {
    BothLinesPast,
    Timeout,
    Overflow,
}

#[derive(Clone, Copy)]
struct Slot {
    seq: u64,
    occupied: bool,
    len: usize,
    line: Line,
    ts_recv_ns: u64,
    stamp: StampKind,
}

impl Slot {
    /// An occupied slot describing `d` (its bytes are copied by the caller).
    fn holding(d: &Datagram<'_>) -> Slot {
        Slot {
            seq: d.seq,
            occupied: true,
            len: d.payload.len(),
            line: d.line,
            ts_recv_ns: d.ts_recv_ns,
            stamp: d.stamp,
        }
    }
}

const EMPTY_SLOT: Slot = Slot { seq: 0, occupied: false, len: 0, line: Line::A, ts_recv_ns: 0, stamp: StampKind::None };

/// A datagram held as a suspect jump: its slot (`occupied` = held) and bytes in `Arbiter::suspect_store`.
type Suspect = Slot;

/// History of the last `window` seqs below the expected one: delivered, or declared a gap.
const HISTORY_NONE: u64 = u64::MAX;

/// The A/B arbiter. See the [module docs](self) for the rules.
pub struct Arbiter {
    cfg: ArbiterConfig,
    mask: u64,
    next: Option<u64>,
    max_seen: [Option<u64>; 2],
    slots: Vec<Slot>,
    store: Vec<u8>,
    waiting: usize,
    /// Since when the expected seq has not moved while packets wait ahead of it (the caller's clock).
    stalled_since_ns: Option<u64>,
    /// The caller's clock at the current `offer` or `tick`.
    now_ns: u64,
    /// Missing seqs declared but not yet reported: one `Event::Gap` per run, emitted when the run closes.
    open_gap: Option<(u64, u64)>,
    /// `history[s & mask]` = `s << 1 | was_gap` for recent seqs `s` below `next`.
    history: Vec<u64>,
    /// The datagram held as a suspect jump (`occupied`), and its bytes.
    suspect: Suspect,
    suspect_store: Vec<u8>,
    counters: ArbiterCounters,
}

impl Arbiter {
    /// An arbiter with every buffer allocated now (`window * max_payload_bytes` bytes of payload store).
    pub fn new(cfg: ArbiterConfig) -> Self {
        let window = cfg.window.max(1).next_power_of_two();
        Self {
            mask: window as u64 - 1,
            next: None,
            max_seen: [None; 2],
            slots: vec![EMPTY_SLOT; window],
            store: vec![0; window * cfg.max_payload_bytes],
            waiting: 0,
            stalled_since_ns: None,
            now_ns: 0,
            open_gap: None,
            history: vec![HISTORY_NONE; window],
            suspect: EMPTY_SLOT,
            suspect_store: vec![0; cfg.max_payload_bytes],
            counters: ArbiterCounters::default(),
            cfg: ArbiterConfig { window, ..cfg },
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &ArbiterCounters {
        &self.counters
    }

    /// The next seq the arbiter will deliver (`None` before the first datagram).
    pub fn next_seq(&self) -> Option<u64> {
        self.next
    }

    /// Datagrams waiting behind a missing seq.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Offers one datagram received on `line`; delivers through `out` whatever became deliverable.
    pub fn offer(&mut self, d: Datagram<'_>, now_ns: u64, out: &mut impl FnMut(Event<'_>)) {
        self.now_ns = now_ns;
        let li = d.line.index();
        self.counters.received[li] += 1;
        let next = *self.next.get_or_insert(d.seq);
        if d.seq > next + self.mask && !self.confirms_jump(&d, out) {
            return;
        }
        self.place(d, out);
        self.resolve_progress(out);
        if self.suspect.occupied && self.next.is_some_and(|next| self.suspect.seq < next + self.mask + 1) {
            // The stream came within a window of the held datagram: it is an ordinary one now.
            self.release_suspect(out);
        }
    }

    /// `d` lies a window or more past the expected seq (module docs): if it confirms the held suspect, takes the
    /// jump (the seqs below the window of both declared missing, the held one delivered or waiting) and returns
    /// true, so `d` goes on as any datagram inside the window; otherwise holds it (a same-seq copy of the held one
    /// is a duplicate) and returns false.
    fn confirms_jump(&mut self, d: &Datagram<'_>, out: &mut impl FnMut(Event<'_>)) -> bool {
        let window = self.mask + 1;
        let held = self.suspect;
        if held.occupied && held.seq == d.seq {
            self.counters.duplicates += 1;
            return false;
        }
        if held.occupied && held.seq.abs_diff(d.seq) < window {
            self.counters.jumps_taken += 1;
            self.advance_to(held.seq.max(d.seq) - window + 1, GapCause::Overflow, out);
            self.release_suspect(out);
            return true;
        }
        if d.payload.len() > self.cfg.max_payload_bytes {
            self.counters.oversize += 1;
            return false;
        }
        if held.occupied {
            self.counters.jumps_dropped += 1;
        }
        self.counters.jumps_held += 1;
        self.suspect_store[..d.payload.len()].copy_from_slice(d.payload);
        self.suspect = Slot::holding(d);
        false
    }

    /// Applies the gap timeout with the caller's clock. Call it only when both lines have nothing more to read
    /// (their sockets are drained): a packet still queued on the slower line must not lose to the clock.
    pub fn tick(&mut self, now_ns: u64, out: &mut impl FnMut(Event<'_>)) {
        self.now_ns = now_ns;
        self.resolve_progress(out);
        self.resolve_timeout(now_ns, out);
    }

    /// Takes the held suspect as a datagram inside the window (the jump was confirmed, or the expected seq came
    /// within a window of it): delivered if it is the expected seq, else waiting in its slot; one the stream
    /// already moved past is a duplicate (or `late`, its seq declared missing).
    fn release_suspect(&mut self, out: &mut impl FnMut(Event<'_>)) {
        let held = self.suspect;
        self.suspect.occupied = false;
        // Moved out for the call and back (no allocation): the datagram borrows it while `place` needs `self`.
        let store = std::mem::take(&mut self.suspect_store);
        let (seq, line, ts_recv_ns, stamp) = (held.seq, held.line, held.ts_recv_ns, held.stamp);
        self.place(Datagram { seq, line, ts_recv_ns, stamp, payload: &store[..held.len] }, out);
        self.suspect_store = store;
    }

    /// Places a datagram inside the window: below the expected seq a duplicate (or `late`, its seq declared
    /// missing); the expected seq delivered, with what waits behind it; ahead of it, waiting in its slot.
    fn place(&mut self, d: Datagram<'_>, out: &mut impl FnMut(Event<'_>)) {
        let li = d.line.index();
        self.max_seen[li] = Some(self.max_seen[li].map_or(d.seq, |m| m.max(d.seq)));
        let next = self.next.unwrap_or(d.seq);
        if d.seq < next {
            let h = self.history[(d.seq & self.mask) as usize];
            if h != HISTORY_NONE && h >> 1 == d.seq && h & 1 == 1 {
                self.counters.late += 1;
            } else {
                self.counters.duplicates += 1;
            }
        } else if d.seq == next {
            self.counters.delivered[li] += 1;
            self.remember(d.seq, false);
            self.next = Some(next + 1);
            self.flush_gap(out);
            out(Event::Data(d));
            self.drain(out);
        } else {
            self.park(d, self.now_ns);
        }
    }

    fn park(&mut self, d: Datagram<'_>, now_ns: u64) {
        let idx = (d.seq & self.mask) as usize;
        let slot = &mut self.slots[idx];
        if slot.occupied {
            // Same seq (the window guarantees no other seq maps here while this one waits).
            self.counters.duplicates += 1;
            return;
        }
        if d.payload.len() > self.cfg.max_payload_bytes {
            self.counters.oversize += 1;
            return;
        }
        let at = idx * self.cfg.max_payload_bytes;
        self.store[at..at + d.payload.len()].copy_from_slice(d.payload);
        *slot = Slot::holding(&d);
        self.waiting += 1;
        self.stalled_since_ns.get_or_insert(now_ns);
    }

    fn remember(&mut self, seq: u64, gap: bool) {
        self.history[(seq & self.mask) as usize] = seq << 1 | u64::from(gap);
    }

    /// Delivers the waiting packets from the expected seq on, up to the first hole. Called after every move
    /// of the expected seq: restarts the stall clock while packets still wait.
    fn drain(&mut self, out: &mut impl FnMut(Event<'_>)) {
        while self.waiting > 0 {
            let Some(next) = self.next else { break };
            let idx = (next & self.mask) as usize;
            let slot = self.slots[idx];
            if !(slot.occupied && slot.seq == next) {
                break;
            }
            self.slots[idx].occupied = false;
            self.waiting -= 1;
            self.counters.delivered[slot.line.index()] += 1;
            self.remember(next, false);
            self.next = Some(next + 1);
            let at = idx * self.cfg.max_payload_bytes;
            self.flush_gap(out);
            out(Event::Data(Datagram {
                seq: slot.seq,
                line: slot.line,
                ts_recv_ns: slot.ts_recv_ns,
                stamp: slot.stamp,
                payload: &self.store[at..at + slot.len],
            }));
        }
        self.stalled_since_ns = if self.waiting == 0 { None } else { Some(self.now_ns) };
    }

    /// Declares the missing seqs below `target` (delivering the waiting ones between) as gaps.
    fn advance_to(&mut self, target: u64, cause: GapCause, out: &mut impl FnMut(Event<'_>)) {
        while let Some(next) = self.next {
            if next >= target {
                return;
            }
            let idx = (next & self.mask) as usize;
            if self.slots[idx].occupied && self.slots[idx].seq == next {
                self.drain(out);
                continue;
            }
            // A run of missing seqs: up to the next waiting one or the target.
            let mut last = next;
            while last + 1 < target {
                let i = ((last + 1) & self.mask) as usize;
                if self.slots[i].occupied && self.slots[i].seq == last + 1 {
                    break;
                }
                last += 1;
            }
            self.declare_gap(next, last, cause, out);
        }
    }

    fn declare_gap(&mut self, first: u64, last: u64, cause: GapCause, out: &mut impl FnMut(Event<'_>)) {
        for s in first..=last {
            self.remember(s, true);
        }
        self.counters.gap_seqs += last - first + 1;
        self.open_gap = match self.open_gap {
            Some((f, l)) if l + 1 == first => Some((f, last)),
            Some(run) => {
                self.emit_gap(run, out);
                Some((first, last))
            }
            None => Some((first, last)),
        };
        match cause {
            GapCause::BothLinesPast => {}
            GapCause::Timeout => self.counters.gap_timeouts += 1,
            GapCause::Overflow => self.counters.gap_overflows += 1,
        }
        self.next = Some(last + 1);
        self.drain(out);
    }

    fn emit_gap(&mut self, (first, last): (u64, u64), out: &mut impl FnMut(Event<'_>)) {
        self.counters.gap_events += 1;
        out(Event::Gap { first, last });
    }

    /// Reports the open run of missing seqs (before the datagram that closes it).
    fn flush_gap(&mut self, out: &mut impl FnMut(Event<'_>)) {
        if let Some(run) = self.open_gap.take() {
            self.emit_gap(run, out);
        }
    }

    /// Reports the run of missing seqs declared so far without waiting for the datagram that closes it (at the
    /// end of a stream). A run that grows afterwards is reported again from its next seq.
    pub fn flush(&mut self, out: &mut impl FnMut(Event<'_>)) {
        self.flush_gap(out);
    }

    /// Declares the gaps that the lines' progress decides.
    fn resolve_progress(&mut self, out: &mut impl FnMut(Event<'_>)) {
        // Both lines past the missing seq by more than the tolerance: neither will bring it.
        if let (Some(a), Some(b)) = (self.max_seen[0], self.max_seen[1]) {
            let both_past = a.min(b).saturating_sub(self.cfg.line_tolerance);
            if self.waiting > 0 {
                self.advance_to(both_past, GapCause::BothLinesPast, out);
            }
        }
    }

    /// Declares the gap that the timeout decides.
    fn resolve_timeout(&mut self, now_ns: u64, out: &mut impl FnMut(Event<'_>)) {
        if self.waiting > 0 {
            if let Some(since) = self.stalled_since_ns {
                if now_ns.saturating_sub(since) >= self.cfg.gap_timeout_ns {
                    // Up to the first waiting packet.
                    if let Some(next) = self.next {
                        let first_waiting = (next..next + self.mask + 1).find(|s| {
                            let sl = &self.slots[(s & self.mask) as usize];
                            sl.occupied && sl.seq == *s
                        });
                        if let Some(fw) = first_waiting {
                            self.advance_to(fw, GapCause::Timeout, out);
                        }
                    }
                }
            }
        }
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
                Datagram { seq, line, ts_recv_ns: 7, stamp: StampKind::Software, payload: &bytes },
                now_ns,
                &mut |e| match e {
                    Event::Data(d) => {
                        assert_eq!(d.payload, d.seq.to_le_bytes());
                        got.push(Ok(d.seq))
                    }
                    Event::Gap { first, last } => got.push(Err((first, last))),
                },
            );
        }
        got
    }

    fn cfg(tolerance: u64) -> ArbiterConfig {
        ArbiterConfig { window: 8, max_payload_bytes: 16, line_tolerance: tolerance, gap_timeout_ns: 1_000 }
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
    fn the_timeout_restarts_when_the_expected_seq_moves() {
        let mut a = Arbiter::new(cfg(0));
        assert_eq!(run(&mut a, &[(A, 1), (A, 3), (A, 5)], 0), vec![Ok(1)]);
        // 2 comes at 500: 2 and 3 go out, 4 is missing from then on.
        assert_eq!(run(&mut a, &[(B, 2)], 500), vec![Ok(2), Ok(3)]);
        let mut gaps = Vec::new();
        a.tick(1_499, &mut |e| gaps.push(matches!(e, Event::Gap { .. })));
        assert!(gaps.is_empty());
        a.tick(1_500, &mut |e| gaps.push(matches!(e, Event::Gap { first: 4, last: 4 })));
        assert_eq!(gaps, vec![true, false], "the gap, then 5");
        assert_eq!((a.next_seq(), a.waiting()), (Some(6), 0));
    }

    /// Every datagram offered is accounted for once (the counters' invariant), `held` = a suspect is held.
    fn assert_accounted(a: &Arbiter, held: u64) {
        let c = a.counters();
        let out = c.delivered[0] + c.delivered[1] + c.duplicates + c.late + c.oversize + c.jumps_dropped;
        assert_eq!(c.received[0] + c.received[1], out + a.waiting() as u64 + held, "{c:?}");
    }

    #[test]
    fn a_jump_beyond_the_window_is_taken_once_a_second_datagram_confirms_it() {
        let mut a = Arbiter::new(cfg(0));
        // Window 8: 20 lies past it (next 2): held, nothing decided.
        assert_eq!(run(&mut a, &[(A, 1), (A, 3), (A, 20)], 0), vec![Ok(1)]);
        assert_eq!((a.waiting(), a.counters().jumps_held, a.counters().gap_seqs), (1, 1, 0));
        // 13 lies past it too and within a window of 20: the stream moved. 20 needs next >= 13: 2 and 4..=12 are
        // declared missing, 3 delivered between, 13 delivered, 20 waits.
        assert_eq!(run(&mut a, &[(A, 13)], 0), vec![Err((2, 2)), Ok(3), Err((4, 12)), Ok(13)]);
        let c = *a.counters();
        assert_eq!((c.jumps_taken, c.gap_overflows, c.gap_seqs, a.waiting()), (1, 2, 10, 1));
        let got = run(&mut a, &[(B, 14), (B, 15), (B, 16), (B, 17), (B, 18), (B, 19)], 0);
        assert_eq!(got, (14..=20).map(Ok).collect::<Vec<_>>());
        assert_accounted(&a, 0);
    }

    #[test]
    fn a_stray_datagram_far_ahead_is_held_and_the_stream_goes_on() {
        let mut a = Arbiter::new(cfg(0));
        let got = run(&mut a, &[(A, 1), (B, 1), (A, 2), (A, 0xFFFF_FFFF), (B, 2), (A, 3), (B, 3), (B, 4), (A, 4)], 0);
        assert_eq!(got, vec![Ok(1), Ok(2), Ok(3), Ok(4)]);
        let c = *a.counters();
        assert_eq!((c.jumps_held, c.jumps_taken, c.gap_seqs, c.duplicates, a.next_seq()), (1, 0, 0, 4, Some(5)));
        assert_accounted(&a, 1);
        // A second stray that does not confirm the first replaces it.
        assert_eq!(run(&mut a, &[(B, 1 << 40), (A, 5)], 0), vec![Ok(5)]);
        assert_eq!((a.counters().jumps_held, a.counters().jumps_dropped), (2, 1));
        assert_accounted(&a, 1);
    }

    #[test]
    fn a_held_datagram_the_stream_comes_within_a_window_of_is_an_ordinary_one() {
        let mut a = Arbiter::new(cfg(0));
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
