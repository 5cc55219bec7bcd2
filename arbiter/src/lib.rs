//! mdfan-arbiter: one sans-IO arbiter over redundant copies of a sequenced stream, used by the CME MDP 3.0 line
//! pair (`mdfan_lines::Arbiter`: a copy is a datagram, its position the packet's `MsgSeqNum`) and by the
//! MoldUDP64 session receiver (`mdfan_feed::mold_session`: a copy is a downstream packet, its units the messages
//! it carries, their positions the MoldUDP64 sequence numbers). It knows no socket, no clock and no feed format:
//! the caller offers copies with the time and gets units out in position order.
//!
//! ## Words
//!
//! - A **position** ([`Position`]) is where a unit sits in the stream: dense (every position between two known
//!   ones exists), totally ordered. `u64` is one (a packet or message sequence number).
//! - A **copy** ([`LineCopy`]) is what one line brought: its first position, the [`Line`] it came on (line A,
//!   line B, or a recovery source such as a re-request server), the caller's metadata `M` (receive stamp, ...)
//!   and its bytes. A copy holds one unit (a datagram) or several (a MoldUDP64 packet: the caller's `process`
//!   callback of [`Arbiter::offer`] splits it and [`Arbiter::place`]s each unit).
//!
//! ## Rules
//!
//! - **Start.** The first position expected is [`Arbiter::start_at`]'s (the caller knows it: a snapshot feed,
//!   MoldUDP64 sequence number 1), or that of the first of [`ArbiterConfig::confirm_copies`] (N) copies at
//!   consecutive positions, each starting where the one before it ended (on either line: copies of one position
//!   count once, so the same stray datagram sent to both lines is one copy). Until then every copy is held as a
//!   candidate (N - 1 buffers of [`ArbiterConfig::held_bytes`], allocated at construction;
//!   [`ArbiterCounters::start_held`]); a copy that does not continue the candidates replaces them
//!   ([`ArbiterCounters::jumps_dropped`]). One datagram with a bogus sequence number before the feed therefore
//!   sets nothing: the real stream's first N copies set the start and go out in order. A run of candidates a
//!   stray displaced less than a window before the confirmed run (line B's stray read between line A's first
//!   copies) moves the start back to it: what it held is then a gap, never skipped.
//! - **In order.** The unit at the expected position is delivered at once ([`Event::Data`]), borrowed from the
//!   offered bytes; the units waiting behind it follow in order. A unit ahead of the expected position waits in a
//!   slot of a fixed window ([`ArbiterConfig::window`] slots of [`ArbiterConfig::slot_bytes`], allocated at
//!   construction): a line that lost it is filled from the other without reordering the output.
//! - **Duplicates.** A unit at a position already delivered or already waiting is counted
//!   ([`ArbiterCounters::duplicates`]) and dropped; one at a position already declared missing is `late`.
//! - **Gaps.** A run of missing positions is declared when the caller's policy gives it up
//!   ([`Arbiter::give_up_to`]: MoldUDP64's last retry), when each of lines A and B has moved more than
//!   [`ArbiterConfig::line_tolerance`] past it ([`Arbiter::settle`]), when the first unit past it has waited
//!   [`ArbiterConfig::gap_timeout_ns`] ([`Arbiter::tick`], which the caller runs once its sockets are drained;
//!   so holes one dead line leaves in a row time out side by side, never one timeout after another), or when an arriving unit would not fit in the window (an *overflow*:
//!   as few of the oldest missing positions as make room). [`GapReports`] says how runs come out: coalesced into
//!   one [`Event::Gap`] right before the unit that ends them (MDP 3.0), or one event per run at once (MoldUDP64).
//! - **Suspect jumps.** A copy whose first position is a window or more past the highest position known is not
//!   acted on alone: one stray datagram (a bogus sender on the group, a corrupt sequence number, a replay of
//!   another day) must not declare billions of positions missing. It is held (one buffer of
//!   [`ArbiterConfig::held_bytes`] per candidate, allocated at construction; [`ArbiterCounters::jumps_held`]) and
//!   taken only when the stream is seen to have moved there by the start rule's test: N copies at consecutive
//!   positions from the held one on (either line; the same position on both lines counts once, so neither two
//!   stray datagrams nor one stray sent to both lines confirm a jump when N is 3 or more). They are then
//!   processed in position order as any copy ([`ArbiterCounters::jumps_taken`]), so the positions before them
//!   overflow the window as above. A suspect that does not continue the held ones replaces them
//!   ([`ArbiterCounters::jumps_dropped`]); a suspect that carries no unit (a heartbeat) is dropped. With
//!   [`ArbiterConfig::held_joins_when_reached`] a held copy the stream comes within a window of is processed as
//!   an ordinary one ([`Arbiter::release_reached`]).
//! - **Resets.** With [`ArbiterConfig::resets`], a copy a window or more *below* the highest position its own line
//!   brought (the line went back: a venue's sequence reset, or a stray) is a suspect reset, held and confirmed
//!   by the same N-copies rule ([`ArbiterCounters::resets_held`]); once confirmed the old stream ends (what
//!   waits goes out, its holes reported), [`Event::Reset`] says where the new one starts, and the held copies
//!   are processed as its first ([`ArbiterCounters::resets`]). A line that is merely behind the other never
//!   went back on itself, so its copies stay duplicates; and after a reset, a line that has not gone back yet
//!   (its copies still within a window of its old stream's highest, or above it) brings the old stream's tail:
//!   dropped as [`ArbiterCounters::late`], not a jump, until its first copy of the new stream.
//! - **Per-copy checks.** Before arbitration every copy goes through the arbiter's [`CopyChecks`]
//!   ([`CopyChecks::admit`]: per-line source checks; a refused copy is counted in
//!   [`ArbiterCounters::refused`] and never competes, so the other line's copy of that position wins); every
//!   delivered unit and every duplicate goes through it too ([`CopyChecks::delivered`],
//!   [`CopyChecks::duplicate`]: where copies of one position are compared). [`NoChecks`] admits everything.
//!
//! Decisions depend only on the arrival order and the `now_ns` values passed in, so the machine is tested and
//! fuzzed without sockets. After construction nothing here allocates; nothing panics on any input.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt::Debug;

/// Where a unit sits in a stream: dense and totally ordered (see the crate docs).
pub trait Position: Copy + Ord + Default + Debug {
    /// `self - earlier` in positions, 0 when `self` is not after `earlier`.
    fn distance_from(self, earlier: Self) -> u64;
    /// The position `n` after this one (saturating at the last position).
    fn after(self, n: u64) -> Self;
    /// The position `n` before this one (saturating at the first position).
    fn before(self, n: u64) -> Self;
    /// A key whose low bits index the window: positions less than a window apart have distinct low bits.
    fn key(self) -> u64;
}

impl Position for u64 {
    fn distance_from(self, earlier: u64) -> u64 {
        self.saturating_sub(earlier)
    }

    fn after(self, n: u64) -> u64 {
        self.saturating_add(n)
    }

    fn before(self, n: u64) -> u64 {
        self.saturating_sub(n)
    }

    fn key(self) -> u64 {
        self
    }
}

/// Where a copy came from: one of the two redundant lines, or a recovery source (a re-request server's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Line {
    /// Line A.
    A = 0,
    /// Line B.
    B = 1,
    /// A recovery source: the answers of a re-request server.
    Recovery = 2,
}

impl Line {
    /// The index of this line in per-line arrays (A = 0, B = 1, recovery = 2).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The other line of the pair (a recovery source has none: itself).
    pub fn other(self) -> Line {
        match self {
            Line::A => Line::B,
            Line::B => Line::A,
            Line::Recovery => Line::Recovery,
        }
    }

    /// "A", "B" or "recovery".
    pub fn name(self) -> &'static str {
        match self {
            Line::A => "A",
            Line::B => "B",
            Line::Recovery => "recovery",
        }
    }
}

/// One line's copy of the unit(s) at a position.
#[derive(Debug, Clone, Copy)]
pub struct LineCopy<'a, P, M> {
    /// The position of its (first) unit.
    pub pos: P,
    /// The line it came on.
    pub line: Line,
    /// The caller's metadata (receive stamp, ...), carried through the window unchanged.
    pub meta: M,
    /// Its bytes, borrowed for the call (a delivered unit: for the callback's duration).
    pub bytes: &'a [u8],
}

/// What the arbiter hands to its caller, in position order.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a, P, M> {
    /// The next unit.
    Data(LineCopy<'a, P, M>),
    /// Positions `first..=last` came on no line (or were given up); the next `Data`, if any, is past `last`.
    Gap {
        /// First missing position.
        first: P,
        /// Last missing position.
        last: P,
    },
    /// The stream was re-based ([`ArbiterConfig::resets`]): the lines went back a window or more and N copies
    /// at consecutive positions confirmed it (a venue's sequence reset). What waited of the old stream went out
    /// before, its holes reported; the next `Data` is at `first` or past it (a `Gap` between).
    Reset {
        /// The first position of the new stream.
        first: P,
    },
}

/// How runs of missing positions are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapReports {
    /// Adjacent runs are merged into one [`Event::Gap`], emitted right before the next delivered unit (or by
    /// [`Arbiter::flush`]).
    Coalesced,
    /// Each run given up is one [`Event::Gap`], emitted at once.
    EachRun,
}

/// Sizes, thresholds and the rules in force.
#[derive(Debug, Clone)]
pub struct ArbiterConfig {
    /// Units that may wait behind a missing position (slots, allocated at construction; rounded up to a power of
    /// two, at least 1). Also the suspect-jump bound.
    pub window: usize,
    /// Largest unit a slot holds, bytes. A longer one that has to wait is counted as `oversize` and dropped.
    pub slot_bytes: usize,
    /// Largest copy held as a suspect jump, bytes. A longer suspect is counted as `oversize` and dropped.
    pub held_bytes: usize,
    /// How gaps are reported.
    pub gap_reports: GapReports,
    /// `Some(t)`: a missing position is a gap once each of lines A and B has delivered a position more than `t`
    /// past it ([`Arbiter::settle`]). `None`: not by this rule.
    pub line_tolerance: Option<u64>,
    /// `Some(t)`: a missing position is a gap once units have waited ahead of it while the expected position did
    /// not move for `t` ns of the caller's clock ([`Arbiter::tick`]). `None`: not by this rule.
    pub gap_timeout_ns: Option<u64>,
    /// Whether a held suspect is processed as an ordinary copy once the expected position comes within a window of
    /// it ([`Arbiter::release_reached`]); otherwise it stays held until confirmed or replaced.
    pub held_joins_when_reached: bool,
    /// N: copies at consecutive positions that set the start (without [`Arbiter::start_at`]) or confirm a suspect
    /// jump (crate docs, "Start" and "Suspect jumps"). 1 takes the first copy's word; at least 3 keeps two stray
    /// datagrams from confirming anything. Clamped to 1..=window.
    pub confirm_copies: usize,
    /// Whether a copy a window or more below the highest position its own line brought is a suspect *reset*
    /// (held, and confirmed as a jump is: then the stream is re-based, [`Event::Reset`]); otherwise it is a
    /// duplicate or late as any copy below the expected position.
    pub resets: bool,
}

/// The default of [`ArbiterConfig::confirm_copies`]: two stray datagrams never confirm a start or a jump.
pub const DEFAULT_CONFIRM_COPIES: usize = 3;

/// The arbiter's counters. With one unit per copy (datagrams), every copy offered is counted exactly once in
/// `refused`, `delivered`, `recovery_delivered`, `duplicates`, `late`, `oversize` or `jumps_dropped`, or is
/// still waiting or held ([`Arbiter::held`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArbiterCounters {
    /// Copies offered per line (A, B).
    pub received: [u64; 2],
    /// Units delivered, by the line whose copy won (A, B).
    pub delivered: [u64; 2],
    /// Copies offered by a recovery source.
    pub recovery_received: u64,
    /// Units delivered from a recovery source's copy.
    pub recovery_delivered: u64,
    /// Copies refused by the [`CopyChecks`] before arbitration.
    pub refused: u64,
    /// Copies of a position already delivered or already waiting: dropped.
    pub duplicates: u64,
    /// Copies of a position already declared missing, or of the old stream after a reset: dropped.
    pub late: u64,
    /// Units longer than a slot that would have had to wait, and suspects longer than the held buffer: dropped.
    pub oversize: u64,
    /// Positions declared missing.
    pub gap_seqs: u64,
    /// `Event::Gap` events emitted.
    pub gap_events: u64,
    /// Gap decisions made by the timeout.
    pub gap_timeouts: u64,
    /// Gap decisions forced because an arriving unit did not fit in the window.
    pub gap_overflows: u64,
    /// Copies held as a suspect jump (a window or more past the highest position known).
    pub jumps_held: u64,
    /// Suspect jumps taken: another copy confirmed the stream moved there.
    pub jumps_taken: u64,
    /// Held copies dropped: suspects (or candidates for the start) replaced by a copy that did not continue them,
    /// and suspects carrying no unit.
    pub jumps_dropped: u64,
    /// Copies held as candidates for the start (before it was set).
    pub start_held: u64,
    /// Copies held as suspect resets (a window or more below what their line brought).
    pub resets_held: u64,
    /// Resets taken: the stream re-based ([`Event::Reset`]).
    pub resets: u64,
}

/// Checks applied to each copy (the crate docs, "Per-copy checks"); every method has a default that accepts.
pub trait CopyChecks<P, M> {
    /// Whether `copy` may take part in arbitration (a per-line source check, a sequence reset, ...). A refused
    /// copy is counted in [`ArbiterCounters::refused`] and dropped.
    fn admit(&mut self, copy: &LineCopy<'_, P, M>) -> bool {
        let _ = copy;
        true
    }

    /// A unit was delivered (the winning copy of its position).
    fn delivered(&mut self, unit: &LineCopy<'_, P, M>) {
        let _ = unit;
    }

    /// A unit at a position already delivered or waiting came again (compare it with the winner here):
    /// `waiting` holds the first copy's bytes while it still waits in the arbiter (held or in the window), `None`
    /// once it was delivered.
    fn duplicate(&mut self, unit: &LineCopy<'_, P, M>, waiting: Option<&[u8]>) {
        let _ = (unit, waiting);
    }
}

/// The two copies of a position compared: a hash of each delivered unit ([`copy_hash`]), kept per position in a
/// window (`window` slots, rounded up to a power of two, allocated at construction), against each duplicate's.
/// Copies that differ are counted ([`CopyHashes::mismatches`]) and the lowest such position waits for the caller
/// ([`CopyHashes::take_mismatch`]). A duplicate that comes while the first copy still waits in the arbiter
/// (not delivered yet) is compared with it byte for byte; one that comes after its slot here was reused is not
/// compared. As [`CopyChecks`] it admits every
/// copy; a caller with more checks (sources) holds one and forwards to it.
#[derive(Debug, Clone)]
pub struct CopyHashes {
    /// `slots[key & mask]` = (key, hash of the delivered copy); `u64::MAX` keys are empty.
    slots: Box<[(u64, u64)]>,
    mask: u64,
    mismatch: Option<u64>,
    mismatches: u64,
}

impl CopyHashes {
    /// A window of `window` positions (at least 1, rounded up to a power of two).
    pub fn new(window: usize) -> CopyHashes {
        let n = window.max(1).next_power_of_two();
        CopyHashes {
            slots: vec![(u64::MAX, 0); n].into_boxed_slice(),
            mask: n as u64 - 1,
            mismatch: None,
            mismatches: 0,
        }
    }

    /// The unit at `key` (its position's [`Position::key`]) was delivered with `bytes`.
    pub fn delivered(&mut self, key: u64, bytes: &[u8]) {
        self.slots[(key & self.mask) as usize] = (key, copy_hash(bytes));
    }

    /// A second copy of `key` came with `bytes`; returns whether it differs from the delivered one (counted, and
    /// kept for [`CopyHashes::take_mismatch`]).
    pub fn duplicate(&mut self, key: u64, bytes: &[u8]) -> bool {
        let (k, hash) = self.slots[(key & self.mask) as usize];
        self.note(key, k == key && hash != copy_hash(bytes))
    }

    /// A second copy of `key` came with `bytes` while the first, `first`, still waits (not delivered, so not
    /// hashed yet): compared byte for byte; returns whether they differ (counted and kept as by
    /// [`CopyHashes::duplicate`]).
    pub fn duplicate_of_waiting(&mut self, key: u64, bytes: &[u8], first: &[u8]) -> bool {
        self.note(key, bytes != first)
    }

    fn note(&mut self, key: u64, differs: bool) -> bool {
        if differs {
            self.mismatches += 1;
            self.mismatch = Some(self.mismatch.map_or(key, |m| m.min(key)));
        }
        differs
    }

    /// The lowest key whose copies differed since the last call, if any.
    pub fn take_mismatch(&mut self) -> Option<u64> {
        self.mismatch.take()
    }

    /// Positions whose copies differed, so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }
}

impl<P: Position, M> CopyChecks<P, M> for CopyHashes {
    fn delivered(&mut self, unit: &LineCopy<'_, P, M>) {
        CopyHashes::delivered(self, unit.pos.key(), unit.bytes);
    }

    fn duplicate(&mut self, unit: &LineCopy<'_, P, M>, waiting: Option<&[u8]>) {
        match waiting {
            Some(first) => self.duplicate_of_waiting(unit.pos.key(), unit.bytes, first),
            None => CopyHashes::duplicate(self, unit.pos.key(), unit.bytes),
        };
    }
}

/// A hash of a copy's bytes, 8 at a time (FNV-1a's constants over little-endian words, the tail and the length
/// folded in): on the feed thread for every delivered copy and every duplicate, so a word, not a byte, per step.
/// Not a MAC: it tells a line that carries other bytes, not a forger who can choose them (source checks do).
pub fn copy_hash(bytes: &[u8]) -> u64 {
    let step = |h: u64, w: u64| (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    let words = bytes.chunks_exact(8);
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    let h = words.fold(0xcbf2_9ce4_8422_2325, |h, w| step(h, u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))));
    step(step(h, u64::from_le_bytes(tail)), bytes.len() as u64)
}

/// Admits every copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoChecks;

impl<P, M> CopyChecks<P, M> for NoChecks {}

/// What made a gap.
#[derive(Clone, Copy)]
enum GapCause {
    GivenUp,
    BothLinesPast,
    Timeout,
    Overflow,
}

#[derive(Clone, Copy)]
struct Slot<P, M> {
    pos: P,
    occupied: bool,
    len: usize,
    line: Line,
    meta: M,
    /// When it came (the caller's clock): a waiting unit shows the hole before it open since then.
    since_ns: u64,
}

impl<P: Copy, M: Copy> Slot<P, M> {
    fn holding(c: &LineCopy<'_, P, M>) -> Self {
        Slot { pos: c.pos, occupied: true, len: c.bytes.len(), line: c.line, meta: c.meta, since_ns: 0 }
    }

    fn copy<'a>(&self, bytes: &'a [u8]) -> LineCopy<'a, P, M> {
        LineCopy { pos: self.pos, line: self.line, meta: self.meta, bytes }
    }
}

/// The arbiter. See the [crate docs](crate) for the rules; `P` is the position, `M` the caller's metadata of a
/// copy, `K` the per-copy checks.
pub struct Arbiter<P: Position, M: Copy, K = NoChecks> {
    cfg: ArbiterConfig,
    mask: u64,
    next: Option<P>,
    /// One past the highest position known.
    high: Option<P>,
    max_seen: [Option<P>; 2],
    /// Per line, the highest position of the stream before the last reset, until the line goes back too.
    old_high: [Option<P>; 2],
    slots: Box<[Slot<P, M>]>,
    store: Box<[u8]>,
    waiting: usize,
    /// Since when the expected position has not moved while units wait ahead of it (the caller's clock).
    stalled_since_ns: Option<u64>,
    /// The caller's clock at the current `offer` or `tick`.
    now_ns: u64,
    /// Missing positions declared but not yet reported (coalesced reports).
    open_gap: Option<(P, P)>,
    /// `history[key & mask]` = (position, was a gap) for recent positions below `next`.
    history: Box<[Option<(P, bool)>]>,
    /// The copies held as a suspect jump or as candidates for the start (`held[..held_len]`, consecutive), their
    /// bytes in `held_store` (`held_bytes` each).
    held: Box<[Slot<P, M>]>,
    held_len: usize,
    /// One past the last position the held copies carry.
    held_end: P,
    held_store: Box<[u8]>,
    checks: K,
    counters: ArbiterCounters,
    /// The last position (`P::after` saturates there) was delivered: every unit is a duplicate from now on.
    at_end: bool,
    /// A reset was confirmed: the next [`Arbiter::place`] re-bases the stream here first.
    pending_reset: Option<P>,
    /// The first positions of the last two runs of start candidates a copy replaced (before the start was set):
    /// a stray that displaced the feed's first copies must not make the stream start past them silently.
    dropped_starts: [Option<P>; 2],
}

impl<P: Position, M: Copy + Default> Arbiter<P, M, NoChecks> {
    /// An arbiter without per-copy checks; every buffer allocated now (`window` × `slot_bytes` +
    /// (`confirm_copies` - 1) × `held_bytes`).
    pub fn new(cfg: ArbiterConfig) -> Self {
        Self::with_checks(cfg, NoChecks)
    }
}

impl<P: Position, M: Copy + Default, K: CopyChecks<P, M>> Arbiter<P, M, K> {
    /// An arbiter with the given per-copy checks; every buffer allocated now.
    pub fn with_checks(cfg: ArbiterConfig, checks: K) -> Self {
        let window = cfg.window.max(1).next_power_of_two();
        let confirm = cfg.confirm_copies.clamp(1, window);
        let empty = Slot { pos: P::default(), occupied: false, len: 0, line: Line::A, meta: M::default(), since_ns: 0 };
        Self {
            mask: window as u64 - 1,
            next: None,
            high: None,
            max_seen: [None; 2],
            old_high: [None; 2],
            slots: vec![empty; window].into_boxed_slice(),
            store: vec![0; window * cfg.slot_bytes].into_boxed_slice(),
            waiting: 0,
            stalled_since_ns: None,
            now_ns: 0,
            open_gap: None,
            history: vec![None; window].into_boxed_slice(),
            held: vec![empty; confirm - 1].into_boxed_slice(),
            held_len: 0,
            held_end: P::default(),
            held_store: vec![0; (confirm - 1) * cfg.held_bytes].into_boxed_slice(),
            checks,
            counters: ArbiterCounters::default(),
            at_end: false,
            pending_reset: None,
            dropped_starts: [None; 2],
            cfg: ArbiterConfig { window, confirm_copies: confirm, ..cfg },
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &ArbiterCounters {
        &self.counters
    }

    /// The per-copy checks.
    pub fn checks(&self) -> &K {
        &self.checks
    }

    /// The per-copy checks, to change their state.
    pub fn checks_mut(&mut self) -> &mut K {
        &mut self.checks
    }

    /// The window, in positions (a power of two).
    pub fn window(&self) -> u64 {
        self.mask + 1
    }

    /// The next position the arbiter will deliver (`None` before the start).
    pub fn next(&self) -> Option<P> {
        self.next
    }

    /// One past the highest position known (`None` before the start).
    pub fn high(&self) -> Option<P> {
        self.high
    }

    /// Whether positions are missing: the expected one is below the highest known.
    pub fn has_hole(&self) -> bool {
        matches!((self.next, self.high), (Some(n), Some(h)) if n < h)
    }

    /// Units waiting behind a missing position.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Whether a suspect jump (or a candidate for the start) is held.
    pub fn holds_suspect(&self) -> bool {
        self.held_len > 0
    }

    /// Copies held: suspects of a jump, or candidates for the start (fewer than
    /// [`ArbiterConfig::confirm_copies`]).
    pub fn held(&self) -> usize {
        self.held_len
    }

    /// Sets the first position expected, if none is set yet.
    pub fn start_at(&mut self, pos: P) {
        if self.next.is_none() {
            self.next = Some(pos);
            self.high = Some(pos);
        }
    }

    /// Records that positions up to `end` (exclusive) exist, as a copy's header says before its units are placed
    /// (a MoldUDP64 packet's count, a heartbeat). Returns whether `first` lies past the highest position known
    /// (the copy opens a gap).
    pub fn raise_high(&mut self, first: P, end: P) -> bool {
        let opened = self.high.is_some_and(|h| first > h);
        self.high = Some(self.high.map_or(end, |h| h.max(end)));
        opened
    }

    /// Offers one copy holding one unit at `now_ns` (the caller's clock): [`Arbiter::offer_units`] with 1.
    pub fn offer<O: ?Sized, F>(&mut self, copy: LineCopy<'_, P, M>, now_ns: u64, out: &mut O, process: F) -> bool
    where
        F: FnMut(&mut Self, LineCopy<'_, P, M>, bool, &mut O),
    {
        self.offer_units(copy, 1, now_ns, out, process)
    }

    /// Offers one copy carrying `units` units (positions `copy.pos` up to `copy.pos + units`, exclusive; 0 for a
    /// heartbeat) at `now_ns` (the caller's clock): per-copy checks, then the start and suspect-jump rules, then
    /// `process(arbiter, copy, held, out)` for the copy (and, once the start or a jump is confirmed, first for
    /// the held copies, `held` true, in position order). `process` places the copy's units with
    /// [`Arbiter::place`]; it may also call [`Arbiter::raise_high`]. Returns whether the copy was processed now
    /// (false: refused, held, dropped, or a duplicate of a held one).
    pub fn offer_units<O: ?Sized, F>(
        &mut self,
        copy: LineCopy<'_, P, M>,
        units: u64,
        now_ns: u64,
        out: &mut O,
        mut process: F,
    ) -> bool
    where
        F: FnMut(&mut Self, LineCopy<'_, P, M>, bool, &mut O),
    {
        self.now_ns = now_ns;
        match copy.line {
            Line::A | Line::B => self.counters.received[copy.line.index()] += 1,
            Line::Recovery => self.counters.recovery_received += 1,
        }
        if !self.checks.admit(&copy) {
            self.counters.refused += 1;
            return false;
        }
        let window = self.window();
        if let Line::A | Line::B = copy.line {
            let i = copy.line.index();
            if let Some(old) = self.old_high[i] {
                if copy.pos.after(window) > old {
                    // The old stream's tail on a line that has not reset yet.
                    self.counters.late += 1;
                    return false;
                }
                self.old_high[i] = None;
            }
        }
        let own_high = match copy.line {
            Line::A | Line::B => self.max_seen[copy.line.index()],
            Line::Recovery => None,
        };
        let backward = self.cfg.resets && own_high.is_some_and(|m| m.distance_from(copy.pos) >= window);
        if let (Some(high), false) = (self.high, backward) {
            if copy.pos.distance_from(high) < window {
                process(self, copy, false, out);
                return true;
            }
        }
        // A candidate for the start, a suspect jump, or a suspect reset.
        let starting = self.next.is_none();
        if units == 0 {
            self.counters.jumps_dropped += 1;
            return false;
        }
        if let Some(i) = self.held[..self.held_len].iter().position(|h| h.pos == copy.pos) {
            self.counters.duplicates += 1;
            // The held copies are one run: a copy's units reach the next one's position (the last, `held_end`).
            // Two copies compare byte for byte only when each holds the one unit: copies of several units at one
            // position may group the units otherwise (a MoldUDP64 retransmission), which is no mismatch.
            let end = if i + 1 < self.held_len { self.held[i + 1].pos } else { self.held_end };
            let at = i * self.cfg.held_bytes;
            let waiting =
                (units == 1 && end.distance_from(copy.pos) == 1).then(|| &self.held_store[at..at + self.held[i].len]);
            self.checks.duplicate(&copy, waiting);
            return false;
        }
        let continues =
            self.held_len > 0 && copy.pos == self.held_end && copy.pos.distance_from(self.held[0].pos) < window;
        let run = if continues { self.held_len } else { 0 };
        let confirmed = run + 1 >= self.cfg.confirm_copies;
        if !confirmed && copy.bytes.len() > self.cfg.held_bytes {
            self.counters.oversize += 1;
            return false;
        }
        if !continues {
            if starting && self.held_len > 0 {
                self.dropped_starts = [self.dropped_starts[1], Some(self.held[0].pos)];
            }
            self.counters.jumps_dropped += self.held_len as u64;
            self.held_len = 0;
        }
        if confirmed {
            let first = if run > 0 { self.held[0].pos } else { copy.pos };
            if starting {
                // Candidates a stray displaced just before the confirmed run were the feed's first copies: start
                // there, so what lies between is a gap (re-requested, or a loss the caller reports), never skipped.
                let displaced = self.dropped_starts.iter().flatten().copied();
                let earliest = displaced.filter(|d| *d < first && first.distance_from(*d) < window).min();
                self.start_at(earliest.unwrap_or(first));
            } else if backward {
                // Re-based by the first `place` (which has the caller's event sink).
                self.counters.resets += 1;
                self.pending_reset = Some(first);
            } else {
                self.counters.jumps_taken += 1;
            }
            self.process_held(out, &mut process);
            process(self, copy, false, out);
            return true;
        }
        let at = self.held_len * self.cfg.held_bytes;
        self.held_store[at..at + copy.bytes.len()].copy_from_slice(copy.bytes);
        self.held[self.held_len] = Slot::holding(&copy);
        self.held_len += 1;
        self.held_end = copy.pos.after(units);
        if starting {
            self.counters.start_held += 1;
        } else if backward {
            self.counters.resets_held += 1;
        } else {
            self.counters.jumps_held += 1;
        }
        false
    }

    /// Ends the old stream (what waits goes out, its holes reported) and starts a new one at `first`.
    fn rebase(&mut self, first: P, out: &mut impl FnMut(Event<'_, P, M>)) {
        // Up to the highest known position or one past the highest waiting unit (a unit that overflowed the
        // window waits above `high`; found by the ab_arbiter fuzz target).
        let waiting_end = self.slots.iter().filter(|s| s.occupied).map(|s| s.pos.after(1)).max();
        if let Some(end) = self.high.max(waiting_end) {
            self.advance_to(end, GapCause::GivenUp, out);
        }
        self.flush_gap(out);
        for s in self.slots.iter_mut() {
            s.occupied = false;
        }
        self.history.iter_mut().for_each(|h| *h = None);
        self.waiting = 0;
        self.stalled_since_ns = None;
        self.old_high = self.max_seen;
        self.max_seen = [None; 2];
        self.at_end = false;
        self.next = Some(first);
        self.high = Some(first);
        out(Event::Reset { first });
    }

    /// Processes the held copies (and lets them go) through `process`, in position order.
    fn process_held<O: ?Sized, F>(&mut self, out: &mut O, process: &mut F)
    where
        F: FnMut(&mut Self, LineCopy<'_, P, M>, bool, &mut O),
    {
        let n = std::mem::replace(&mut self.held_len, 0);
        // Moved out for the calls and back (no allocation): the copies borrow it while `process` needs `self`.
        let store = std::mem::take(&mut self.held_store);
        let bytes = self.cfg.held_bytes;
        for i in 0..n {
            let h = self.held[i];
            process(self, h.copy(&store[i * bytes..i * bytes + h.len]), true, out);
        }
        self.held_store = store;
    }

    /// With [`ArbiterConfig::held_joins_when_reached`]: once the expected position is within a window of the held
    /// suspects, processes them as ordinary copies through `process` (as in [`Arbiter::offer`]).
    pub fn release_reached<O: ?Sized, F>(&mut self, out: &mut O, mut process: F)
    where
        F: FnMut(&mut Self, LineCopy<'_, P, M>, bool, &mut O),
    {
        let first = self.held[..self.held_len].first().map(|h| h.pos);
        // Ahead of the expected position and within a window of it: a suspect jump the stream caught up with. A
        // held copy below it is a suspect reset, which only its own N-copy run confirms.
        let reached = matches!((first, self.next), (Some(f), Some(n)) if f >= n && f.distance_from(n) < self.window());
        if self.cfg.held_joins_when_reached && reached {
            self.process_held(out, &mut process);
        }
    }

    /// Places one unit: below the expected position a duplicate (or `late`); the expected one delivered, with
    /// what waits behind it; ahead of it, waiting in its slot (after an overflow if it does not fit).
    pub fn place(&mut self, unit: LineCopy<'_, P, M>, out: &mut impl FnMut(Event<'_, P, M>)) {
        if let Some(first) = self.pending_reset.take() {
            self.rebase(first, out);
        }
        if let Line::A | Line::B = unit.line {
            let seen = &mut self.max_seen[unit.line.index()];
            *seen = Some(seen.map_or(unit.pos, |m| m.max(unit.pos)));
        }
        self.start_at(unit.pos);
        let Some(mut next) = self.next else { return };
        if unit.pos < next || self.at_end {
            let h = self.history[(unit.pos.key() & self.mask) as usize];
            if h == Some((unit.pos, true)) {
                self.counters.late += 1;
            } else {
                self.counters.duplicates += 1;
                self.checks.duplicate(&unit, None);
            }
            return;
        }
        if unit.pos.distance_from(next) >= self.window() {
            // No room to wait: give up the oldest missing positions until this one fits.
            self.counters.gap_overflows += 1;
            self.advance_to(unit.pos.after(1).before(self.window()), GapCause::Overflow, out);
            next = self.next.unwrap_or(next);
        }
        if unit.pos == next {
            self.deliver(unit, out);
            self.drain(out);
            return;
        }
        let idx = (unit.pos.key() & self.mask) as usize;
        if self.slots[idx].occupied {
            // Same position (the window guarantees no other one maps here while this one waits).
            self.counters.duplicates += 1;
            let at = idx * self.cfg.slot_bytes;
            self.checks.duplicate(&unit, Some(&self.store[at..at + self.slots[idx].len]));
            return;
        }
        if unit.bytes.len() > self.cfg.slot_bytes {
            self.counters.oversize += 1;
            return;
        }
        let at = idx * self.cfg.slot_bytes;
        self.store[at..at + unit.bytes.len()].copy_from_slice(unit.bytes);
        self.slots[idx] = Slot { since_ns: self.now_ns, ..Slot::holding(&unit) };
        self.waiting += 1;
        self.stalled_since_ns.get_or_insert(self.now_ns);
    }

    fn deliver(&mut self, unit: LineCopy<'_, P, M>, out: &mut impl FnMut(Event<'_, P, M>)) {
        match unit.line {
            Line::A | Line::B => self.counters.delivered[unit.line.index()] += 1,
            Line::Recovery => self.counters.recovery_delivered += 1,
        }
        self.remember(unit.pos, false);
        let next = unit.pos.after(1);
        // The last position has no next: nothing comes after it (found by the ab_arbiter fuzz target).
        self.at_end = next == unit.pos;
        self.next = Some(next);
        self.high = Some(self.high.map_or(next, |h| h.max(next)));
        self.flush_gap(out);
        self.checks.delivered(&unit);
        out(Event::Data(unit));
    }

    fn remember(&mut self, pos: P, gap: bool) {
        self.history[(pos.key() & self.mask) as usize] = Some((pos, gap));
    }

    fn slot_holds(&self, pos: P) -> bool {
        let s = &self.slots[(pos.key() & self.mask) as usize];
        s.occupied && s.pos == pos
    }

    /// Delivers the waiting units from the expected position on, up to the first hole. Called after every move
    /// of the expected position: restarts the stall clock while units still wait.
    fn drain(&mut self, out: &mut impl FnMut(Event<'_, P, M>)) {
        while self.waiting > 0 {
            let Some(next) = self.next else { break };
            if !self.slot_holds(next) {
                break;
            }
            let idx = (next.key() & self.mask) as usize;
            let slot = self.slots[idx];
            self.slots[idx].occupied = false;
            self.waiting -= 1;
            let at = idx * self.cfg.slot_bytes;
            // Moved out for the call and back (no allocation): the unit borrows it while `deliver` needs `self`.
            let store = std::mem::take(&mut self.store);
            self.deliver(slot.copy(&store[at..at + slot.len]), out);
            self.store = store;
        }
        // The next hole has been open since the first unit past it came, not since now: holes that one dead line
        // leaves in a row are timed out side by side, not one gap_timeout after another.
        self.stalled_since_ns =
            if self.waiting == 0 { None } else { Some(self.first_waiting_since().unwrap_or(self.now_ns)) };
    }

    /// When the first unit waiting past the expected position came (a window's scan at most).
    fn first_waiting_since(&self) -> Option<u64> {
        let next = self.next?;
        let end = next.after(self.window());
        let mut p = next;
        while p < end {
            if self.slot_holds(p) {
                return Some(self.slots[(p.key() & self.mask) as usize].since_ns);
            }
            p = p.after(1);
        }
        None
    }

    /// Moves the expected position up to `target`: waiting units go out, missing runs are declared gaps. Every
    /// waiting unit lies within a window of the expected position, so each scan is bounded by the window.
    fn advance_to(&mut self, target: P, cause: GapCause, out: &mut impl FnMut(Event<'_, P, M>)) {
        if self.next.is_none_or(|next| next >= target) {
            // Nothing moves (and the stall clock keeps running).
            return;
        }
        while let Some(next) = self.next {
            if next >= target {
                break;
            }
            if self.waiting == 0 {
                self.declare_gap(next, target, cause, out);
                break;
            }
            if self.slot_holds(next) {
                self.drain(out);
                continue;
            }
            let limit = next.after(self.window()).min(target);
            let mut end = next.after(1);
            while end < limit && !self.slot_holds(end) {
                end = end.after(1);
            }
            self.declare_gap(next, end, cause, out);
        }
        self.drain(out);
    }

    /// Declares `first..end` missing and moves past it.
    fn declare_gap(&mut self, first: P, end: P, cause: GapCause, out: &mut impl FnMut(Event<'_, P, M>)) {
        let count = end.distance_from(first);
        if count == 0 {
            return;
        }
        // Only the last window of positions can still be told apart from a duplicate.
        let mut p = first.after(count.saturating_sub(self.window()));
        while p < end {
            self.remember(p, true);
            p = p.after(1);
        }
        let last = end.before(1);
        // Saturating: across resets the runs of several streams add up.
        self.counters.gap_seqs = self.counters.gap_seqs.saturating_add(count);
        match cause {
            GapCause::GivenUp | GapCause::BothLinesPast | GapCause::Overflow => {}
            GapCause::Timeout => self.counters.gap_timeouts += 1,
        }
        match self.cfg.gap_reports {
            GapReports::EachRun => self.emit_gap((first, last), out),
            GapReports::Coalesced => {
                self.open_gap = match self.open_gap {
                    Some((f, l)) if l.after(1) == first => Some((f, last)),
                    Some(run) => {
                        self.emit_gap(run, out);
                        Some((first, last))
                    }
                    None => Some((first, last)),
                };
            }
        }
        self.next = Some(end);
        self.high = Some(self.high.map_or(end, |h| h.max(end)));
    }

    fn emit_gap(&mut self, (first, last): (P, P), out: &mut impl FnMut(Event<'_, P, M>)) {
        self.counters.gap_events += 1;
        out(Event::Gap { first, last });
    }

    /// Reports the open run of missing positions (before the unit that closes it).
    fn flush_gap(&mut self, out: &mut impl FnMut(Event<'_, P, M>)) {
        if let Some(run) = self.open_gap.take() {
            self.emit_gap(run, out);
        }
    }

    /// Reports the run of missing positions declared so far without waiting for the unit that closes it (at the
    /// end of a stream). A run that grows afterwards is reported again from its next position.
    pub fn flush(&mut self, out: &mut impl FnMut(Event<'_, P, M>)) {
        self.flush_gap(out);
    }

    /// Gives up every missing position below `target` (the caller's policy decided: a re-request's last try timed
    /// out); the waiting units between go out.
    pub fn give_up_to(&mut self, target: P, out: &mut impl FnMut(Event<'_, P, M>)) {
        self.advance_to(target, GapCause::GivenUp, out);
    }

    /// Applies [`ArbiterConfig::line_tolerance`]: declares the missing positions both lines A and B have moved
    /// past. Call it after each offer.
    pub fn settle(&mut self, out: &mut impl FnMut(Event<'_, P, M>)) {
        let Some(tolerance) = self.cfg.line_tolerance else { return };
        if let (Some(a), Some(b), true) = (self.max_seen[0], self.max_seen[1], self.waiting > 0) {
            // Both lines past the missing position by more than the tolerance: neither will bring it.
            self.advance_to(a.min(b).before(tolerance), GapCause::BothLinesPast, out);
        }
    }

    /// Applies the line tolerance and [`ArbiterConfig::gap_timeout_ns`] with the caller's clock. Call it only when
    /// the lines have nothing more to read (their sockets are drained): a copy still queued on the slower line
    /// must not lose to the clock.
    pub fn tick(&mut self, now_ns: u64, out: &mut impl FnMut(Event<'_, P, M>)) {
        self.now_ns = now_ns;
        self.settle(out);
        let Some(timeout) = self.cfg.gap_timeout_ns else { return };
        let (Some(since), Some(next)) = (self.stalled_since_ns, self.next) else { return };
        if self.waiting == 0 || now_ns.saturating_sub(since) < timeout {
            return;
        }
        // Up to the first waiting unit.
        let mut p = next;
        let end = next.after(self.window());
        while p < end && !self.slot_holds(p) {
            p = p.after(1);
        }
        if p < end {
            self.advance_to(p, GapCause::Timeout, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ArbiterConfig {
        ArbiterConfig {
            window: 8,
            slot_bytes: 8,
            held_bytes: 8,
            gap_reports: GapReports::Coalesced,
            line_tolerance: Some(0),
            gap_timeout_ns: None,
            held_joins_when_reached: true,
            confirm_copies: 3,
            resets: true,
        }
    }

    /// Offers `(line, pos)` copies (bytes = the position) and returns `Ok(pos)` per unit, `Err((first, last))`
    /// per gap.
    fn run<K: CopyChecks<u64, ()>>(a: &mut Arbiter<u64, (), K>, input: &[(Line, u64)]) -> Vec<Result<u64, (u64, u64)>> {
        let mut got = Vec::new();
        for &(line, pos) in input {
            let bytes = pos.to_le_bytes();
            let out = &mut |e: Event<'_, u64, ()>| match e {
                Event::Data(c) => {
                    assert_eq!(c.bytes, c.pos.to_le_bytes());
                    got.push(Ok(c.pos))
                }
                Event::Gap { first, last } => got.push(Err((first, last))),
                Event::Reset { first } => got.push(Err((first, 0))),
            };
            a.offer(LineCopy { pos, line, meta: (), bytes: &bytes }, 0, out, |a, c, _, out| a.place(c, out));
            a.settle(out);
        }
        got
    }

    /// Refuses every copy of line A at odd positions (a stand-in for a per-line source check).
    struct RefuseOddOnA;

    impl CopyChecks<u64, ()> for RefuseOddOnA {
        fn admit(&mut self, c: &LineCopy<'_, u64, ()>) -> bool {
            !(c.line == Line::A && c.pos % 2 == 1)
        }
    }

    #[test]
    fn a_refused_copy_never_competes_and_the_other_lines_copy_wins() {
        let mut a = Arbiter::with_checks(cfg(), RefuseOddOnA);
        let got = run(&mut a, &[(Line::A, 2), (Line::A, 3), (Line::B, 3), (Line::A, 4), (Line::B, 4)]);
        assert_eq!(got, vec![Ok(2), Ok(3), Ok(4)]);
        let c = *a.counters();
        assert_eq!((c.refused, c.delivered, c.duplicates), (1, [2, 1], 1));
    }

    #[test]
    fn a_recovery_copy_fills_a_hole_and_is_counted_apart() {
        let mut cfg = cfg();
        cfg.line_tolerance = None;
        let mut a = Arbiter::new(cfg);
        a.start_at(1);
        let got = run(&mut a, &[(Line::A, 1), (Line::A, 3), (Line::Recovery, 2)]);
        assert_eq!(got, vec![Ok(1), Ok(2), Ok(3)]);
        let c = *a.counters();
        assert_eq!((c.received, c.recovery_received, c.delivered, c.recovery_delivered), ([2, 0], 1, [2, 0], 1));
    }

    #[test]
    fn a_stray_sent_to_both_lines_confirms_nothing_and_a_far_jump_costs_a_window_not_its_length() {
        let mut a = Arbiter::new(cfg());
        a.start_at(1);
        let far = 1u64 << 40;
        // `far` on both lines is one copy: held, and the stream goes on.
        let got =
            run(&mut a, &[(Line::A, 1), (Line::B, 1), (Line::A, far), (Line::B, far), (Line::A, 2), (Line::B, 2)]);
        assert_eq!(got, vec![Ok(1), Ok(2)]);
        assert_eq!((a.counters().jumps_held, a.counters().jumps_taken, a.held()), (1, 0, 1));
        // Three consecutive positions from `far` on: the stream moved there. Declaring 2^40 positions missing
        // visits one window of them, not 2^40.
        let got = run(&mut a, &[(Line::A, far + 1), (Line::B, far + 1), (Line::A, far + 2), (Line::B, far + 2)]);
        assert_eq!(got, vec![Err((3, far - 1)), Ok(far), Ok(far + 1), Ok(far + 2)]);
        let c = *a.counters();
        // Duplicates: line A's 1 and 2 on B, B's `far` and `far + 1` while held, B's `far + 2`.
        assert_eq!((c.jumps_held, c.jumps_taken, c.duplicates, c.gap_seqs), (2, 1, 5, far - 3));
        assert_eq!(a.next(), Some(far + 3));
    }

    /// Line A and B copies of `range`, interleaved.
    fn both(range: std::ops::RangeInclusive<u64>) -> Vec<(Line, u64)> {
        range.flat_map(|p| [(Line::A, p), (Line::B, p)]).collect()
    }

    #[test]
    fn one_stray_before_the_feed_sets_no_start_the_feeds_first_copies_do() {
        for stray_lines in [&[Line::A][..], &[Line::A, Line::B]] {
            let mut a = Arbiter::new(cfg());
            let mut input: Vec<_> = stray_lines.iter().map(|&l| (l, 0xFFFF_FF00)).collect();
            input.extend(both(1..=10));
            assert_eq!(run(&mut a, &input), (1..=10).map(Ok).collect::<Vec<_>>(), "stray on {stray_lines:?}");
            let c = *a.counters();
            // Held for the start: the stray, then 1 and 2 (3 confirms); the stray dropped by 1.
            assert_eq!((c.start_held, c.jumps_dropped, c.jumps_held, c.gap_seqs), (3, 1, 0, 0));
            assert_eq!(c.duplicates, 10 + stray_lines.len() as u64 - 1);
        }
    }

    /// The feed's first copy held as a start candidate, then displaced by a stray on the other line (the lines'
    /// sockets are read one after the other, so line B's stray can come between line A's copies): the start is
    /// set where the displaced run began, and its copy, dropped, is a gap, never silently skipped.
    #[test]
    fn a_stray_that_displaces_the_feeds_first_copy_leaves_a_gap_not_a_later_start() {
        let mut a = Arbiter::new(cfg());
        let mut input = vec![(Line::A, 0xFFFF_FF00), (Line::A, 1), (Line::B, 0xFFFF_FF00)];
        input.extend([(Line::A, 2), (Line::A, 3), (Line::A, 4), (Line::B, 2)]); // both lines past 1: a gap
        assert_eq!(run(&mut a, &input), [Err((1, 1)), Ok(2), Ok(3), Ok(4)]);
        let c = *a.counters();
        assert_eq!((c.gap_seqs, c.jumps_taken), (1, 0));
    }

    #[test]
    fn a_seq_reset_confirmed_by_three_consecutive_copies_re_bases_the_stream_a_lagging_line_does_not() {
        let mut a = Arbiter::new(cfg());
        a.start_at(1000);
        // Line B lags more than a window behind A: its copies are duplicates, not a reset (it never went back).
        let mut input: Vec<_> = (1000..1020).map(|p| (Line::A, p)).collect();
        input.extend((1000..1005).map(|p| (Line::B, p)));
        let got = run(&mut a, &input);
        assert_eq!(got, (1000..1020).map(Ok).collect::<Vec<_>>());
        assert_eq!((a.counters().resets_held, a.counters().duplicates), (0, 5));
        // One stray far below on line A: held, never taken; the stream goes on.
        assert_eq!(run(&mut a, &[(Line::A, 7), (Line::A, 1020)]), vec![Ok(1020)]);
        assert_eq!((a.counters().resets_held, a.counters().resets, a.held()), (1, 0, 1));
        // The venue restarts at 1 on both lines: 1, 2, 3 (B's copies count once) re-base the stream.
        let got = run(
            &mut a,
            &[(Line::A, 1), (Line::B, 1), (Line::A, 2), (Line::B, 2), (Line::A, 3), (Line::B, 3), (Line::A, 4)],
        );
        assert_eq!(got, vec![Err((1, 0)), Ok(1), Ok(2), Ok(3), Ok(4)], "Reset at 1, then the new stream");
        let c = *a.counters();
        assert_eq!((c.resets_held, c.resets, c.jumps_dropped, a.next()), (3, 1, 1, Some(5)));
    }

    #[test]
    fn the_last_position_is_delivered_once() {
        let mut a = Arbiter::new(ArbiterConfig { confirm_copies: 1, ..cfg() });
        let got =
            run(&mut a, &[(Line::A, u64::MAX - 1), (Line::A, u64::MAX), (Line::B, u64::MAX), (Line::A, u64::MAX)]);
        assert_eq!(got, vec![Ok(u64::MAX - 1), Ok(u64::MAX)]);
        assert_eq!(a.counters().duplicates, 2);
    }

    #[test]
    fn two_stray_headers_of_one_line_mid_stream_confirm_no_jump() {
        let mut a = Arbiter::new(cfg());
        a.start_at(1);
        let mut input = both(1..=5);
        input.extend([(Line::A, 0xFFFF_FFF0), (Line::A, 0xFFFF_FFF1)]);
        input.extend(both(6..=10));
        assert_eq!(run(&mut a, &input), (1..=10).map(Ok).collect::<Vec<_>>());
        let c = *a.counters();
        assert_eq!((c.jumps_held, c.jumps_taken, c.gap_seqs, c.gap_events, a.held()), (2, 0, 0, 0, 2));
        // A third at the next position would be the stream's word (N = 3): the limit of what positions can tell.
        let mut two = Arbiter::new(ArbiterConfig { confirm_copies: 2, ..cfg() });
        two.start_at(1);
        run(&mut two, &input);
        assert_eq!(two.counters().jumps_taken, 1, "with N = 2 the two strays are taken: the default is 3");
    }
}
