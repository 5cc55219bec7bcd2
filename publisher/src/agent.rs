//! The fan-out agent: the hot loop, an [`Agent`] whose duty cycle [`FanoutAgent::do_work`] steps a small state
//! machine. A runner calls it on the pinned hot thread ([`crate::Publisher::run`]); a test can step it beside the
//! conductor on one thread ([`crate::Publisher::into_agents`]).
//!
//! Phases:
//! - **waiting** for `wait_for_subscribers` sessions: each cycle drains commands and sends heartbeats; it
//!   returns 0 when nothing changed, and the hot runner idles this phase with [`WAITING_IDLE`] (a backoff up to
//!   1 ms sleeps), so a publisher nobody has subscribed to yet does not burn a core.
//! - **live**: one cycle drains control commands from the conductor's rtrb queue (new sessions, removals,
//!   snapshots, clock mappings), checks the shutdown flag, serves sessions that are sending a snapshot or
//!   catching up (a bounded number of records each); then, if the next record is not due yet (paced replay),
//!   flushes those catch-up writes, sends heartbeats that are due and returns 0 (the runner busy-spins once and calls again: this is
//!   the pacing wait; the same when the feed handler has not published the next record yet); otherwise copies
//!   the record from the [`Journal`] into a [`BookUpdate`] on the stack, offers it to every
//!   live session (rotating the start so no subscriber is always first) under that session's slow-consumer
//!   policy, flushes, retires sessions that must go and returns 1. After the last record the cycles wait
//!   (bounded by the stall timeout) for sessions still catching up or owing a resync request; one still catching
//!   up then is dropped `Stalled`, never sent a normal end of stream over a partial book.
//! - **finishing**: end of stream to every session, then the sessions go to the conductor in
//!   [`Event::Finished`]; once every event is in the queue the agent is done.
//!
//! Nothing here allocates, frees, makes a syscall, locks or logs: sessions and snapshot buffers move in and
//! out by value through the rtrb queues into preallocated storage; counters are atomics the conductor reads;
//! what the conductor should log travels as an [`Event`]. The only waits inside a cycle are the spin on a full
//! ring of a `block` subscriber (bounded by the stall timeout, and counted) and, at the end, on a full ring
//! that must take end of stream (bounded the same way).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_fabric::CloseReason;
use mdfan_tuning::{Agent, IdleStrategy};
use mdfan_wire::control::SlowConsumerPolicy;
use mdfan_wire::{BookUpdate, Kind};

use crate::cycles::CycleHistogram;
use crate::journal::{FeedState, Journal};
use crate::pacing::Pacer;
use crate::queue::Outbox;
use crate::send_clock::SendClockMap;
use crate::session::{add, bump, Post, Session};

/// Every this many feed records (a power of two) the hot loop reads each subscriber's consumed seq, for the lag
/// counter.
const LAG_REFRESH_RECORDS: u64 = 1024;

/// One live record in this many (a power of two) has its journal-read-to-post time recorded
/// ([`AgentCounters::decode_to_post`]): the TSC read that needs costs about as much as a post.
pub const DECODE_TO_POST_SAMPLE: u64 = 64;

/// Records a catching-up session may be sent per duty cycle, so a snapshot never stalls the live stream.
pub const CATCHUP_BUDGET: usize = 256;

/// Times a session catching up on a file feed may have its journal hold released
/// (`FanoutAgent::bound_hold`); the next time it holds the journal full that long it is dropped (`stalled`).
/// Each fresh snapshot re-arms the hold, so a joiner that stopped once catches up; one that keeps stopping
/// costs the others at most this many `publisher.catchup_hold_ms`.
pub const MAX_HOLD_RELEASES: u32 = 3;

/// Conductor -> hot loop.
// Moved by value through a preallocated rtrb queue: boxing the session would make the hot thread free it.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// A new attached session.
    Add(Session),
    /// End a session (its control connection closed).
    Remove {
        /// Session id.
        id: u64,
        /// Reported to the subscriber.
        reason: CloseReason,
    },
    /// Send these snapshot records to a session, then the feed from `position` on.
    Snapshot {
        /// Session id.
        id: u64,
        /// `SnapshotBegin`, per instrument `Clear` + `Add`s, `SnapshotEnd` (wire::Books::snapshot).
        records: Vec<BookUpdate>,
        /// Feed records the snapshot includes; catch-up starts at this index.
        position: u64,
    },
    /// A fresh mapping of the NIC clock and the TSC onto `CLOCK_REALTIME` (taken by the conductor about once a
    /// second while a session's send completions are stamped): post-to-send-completion uses it from now on.
    SendClock(SendClockMap),
}

/// Hot loop -> conductor.
// Moved by value through a preallocated rtrb queue: boxing the session would make the hot thread allocate.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// The replay started with this many sessions.
    Started {
        /// Sessions attached at start.
        sessions: usize,
    },
    /// A session left the hot loop; the conductor frees it.
    Retired {
        /// The session, closed.
        session: Session,
        /// Why.
        reason: CloseReason,
    },
    /// The last event: the replay ended (end of stream sent to every session, each closed). The conductor
    /// drains the sessions' rings, says bye on their control connections and writes the run report.
    Finished(AgentReport),
    /// A session catching up held a file feed's journal full for `publisher.catchup_hold_ms`: it no longer
    /// holds it (the feed goes on for the others); if its position is overwritten it gets a fresh snapshot,
    /// which holds the journal again. After [`MAX_HOLD_RELEASES`] the next one drops it instead (`stalled`).
    HoldReleased {
        /// Session id.
        id: u64,
        /// The journal position it held.
        position: u64,
        /// Its releases so far, this one included.
        releases: u32,
    },
    /// A catching-up session needs a journal position that was overwritten: the conductor sends it a fresh
    /// snapshot (its books are current); until then the session gets nothing.
    CatchupLost {
        /// Session id.
        id: u64,
    },
    /// A snapshot buffer the hot loop is done with (sent, replaced, or for a session that is gone): freed by
    /// the conductor.
    SnapshotDone {
        /// Session id.
        id: u64,
        /// Whether it was delivered whole.
        delivered: bool,
        /// The buffer.
        records: Vec<BookUpdate>,
    },
}

/// Hot-loop counters, read by the conductor.
#[derive(Default)]
#[repr(align(128))]
pub struct AgentCounters {
    /// Feed records fanned out: every live session has been offered records `0..records`.
    pub records: AtomicU64,
    /// Journal records the hot loop found overwritten at its own position (skipped; never expected: the
    /// journal does not overwrite a position before the hot loop is done with it).
    pub feed_errors: AtomicU64,
    /// Duty-cycle times in TSC ticks.
    pub cycles: CycleHistogram,
    /// For one live record in [`DECODE_TO_POST_SAMPLE`] posted to at least one session: TSC ticks from its read
    /// out of the journal to the stamp its posts carry.
    pub decode_to_post: CycleHistogram,
}

/// Timing knobs, in TSC ticks (converted once by the conductor).
#[derive(Debug, Clone, Copy)]
pub struct AgentTiming {
    /// Send a heartbeat to a live session that was sent nothing for this long.
    pub heartbeat_ticks: u64,
    /// A full ring that releases nothing for this long ends the session (`stalled`).
    pub stall_ticks: u64,
    /// Longest a file feed's journal may stay full because a session catching up holds it (the feed handler
    /// waits, and every live session with it); after that the sessions at the floor stop holding it.
    pub catchup_hold_ticks: u64,
}

/// What the hot loop did, sent to the conductor when it ends ([`Event::Finished`]).
pub struct AgentReport {
    /// Records replayed.
    pub records: u64,
    /// TSC ticks from the first record to the last one fanned out.
    pub replay_ticks: u64,
    /// Sessions still attached at the end (closed with end of stream or shutdown).
    pub sessions: Vec<Session>,
    /// Why the replay ended.
    pub end: CloseReason,
}

/// Where the agent is in its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for `wait_for_subscribers` sessions.
    Waiting,
    /// Replaying from `pos`; once the feed is done, waiting (bounded) for sessions still catching up.
    Live,
    /// End of stream sent, the report handed over; events still waiting for room in the queue.
    Finishing,
    /// Nothing more to do.
    Done,
}

/// The hot loop's owned state.
pub struct FanoutAgent {
    /// Normalised feed records, filled by the feed handler; the hot loop reads position `pos`.
    pub(crate) journal: Arc<Journal>,
    /// When each record is due (pace `feed.pace`).
    pub(crate) pacer: Pacer,
    pub(crate) sessions: Vec<Session>,
    pub(crate) commands: rtrb::Consumer<Command>,
    pub(crate) events: Outbox<Event>,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) wait_for: usize,
    pub(crate) clock: quanta::Clock,
    pub(crate) timing: AgentTiming,
    pub(crate) counters: Arc<AgentCounters>,
    pub(crate) rotate: usize,
    /// TSC of the last look for sessions owed a heartbeat.
    pub(crate) last_heartbeat_check: u64,
    pub(crate) phase: Phase,
    /// The next feed record to fan out.
    pub(crate) pos: u64,
    /// TSC when the replay started (the first live cycle).
    pub(crate) start_ticks: u64,
    /// The same moment, for the pacing schedule.
    pub(crate) start_instant: quanta::Instant,
    /// TSC at which the current duty cycle started, for the cycle histogram.
    pub(crate) cycle_start: u64,
    /// TSC ticks from the first record to the last one fanned out; 0 until the feed is done.
    pub(crate) replay_ticks: u64,
    /// The lowest journal position a session catching up still has to read (`u64::MAX`: none), worked out by
    /// each catch-up pass: the hot loop tells the journal it is done only below it, so the feed handler waits
    /// for a late joiner instead of overwriting what it has yet to send it.
    pub(crate) catchup_floor: u64,
    /// Whether the journal is held for sessions catching up (a file feed: it can wait; a live feed cannot).
    pub(crate) hold_for_catchup: bool,
    /// TSC since when the journal has been full with the catch-up floor at its oldest record (the feed handler
    /// waits for a late joiner, and so does every live session); 0 when not.
    pub(crate) floor_full_since: u64,
    /// Whether the last catch-up pass found a session behind (or a command may have made one): only then does a
    /// duty cycle walk the sessions for catch-up. With every session live, a cycle walks them once, to post.
    pub(crate) catching_up: bool,
    /// [`Journal::published`] as last read: records below it can be read without looking again.
    pub(crate) published_seen: u64,
    /// The conductor's last [`Command::SendClock`]: maps send completion stamps onto `CLOCK_REALTIME`.
    pub(crate) send_clock: Option<SendClockMap>,
}

impl FanoutAgent {
    fn emit(&mut self, event: Event) {
        self.events.send(event);
    }

    fn drain_backlog(&mut self) {
        self.events.flush();
    }

    /// Applies the conductor's commands; whether there were any.
    fn drain_commands(&mut self) -> bool {
        let mut any = false;
        while let Ok(cmd) = self.commands.pop() {
            any = true;
            match cmd {
                Command::Add(mut s) => {
                    if self.sessions.len() < self.sessions.capacity() {
                        s.adopt_pending += 1;
                        self.sessions.push(s);
                    } else {
                        // The conductor never admits more than max_subscribers; refuse rather than grow.
                        let mut s = s;
                        s.close(CloseReason::FabricError);
                        self.emit(Event::Retired { session: s, reason: CloseReason::FabricError });
                    }
                }
                Command::Remove { id, reason } => {
                    if let Some(s) = self.sessions.iter_mut().find(|s| s.id == id) {
                        s.dead = Some(reason);
                    }
                    self.reap_dead();
                }
                Command::Snapshot { id, records, position } => {
                    match self.sessions.iter_mut().find(|s| s.id == id && s.dead.is_none()) {
                        Some(s) => {
                            let old = s.snapshot.replace((records, 0));
                            s.feed_pos = position;
                            s.owes_resync = false;
                            s.catchup_lost = false;
                            s.holds_journal = true; // re-armed: a fresh snapshot is caught up holding the journal
                            s.adopt_pending += 1;
                            if let Some((records, _)) = old {
                                self.emit(Event::SnapshotDone { id, delivered: false, records });
                            }
                        }
                        None => self.emit(Event::SnapshotDone { id, delivered: false, records }),
                    }
                }
                Command::SendClock(map) => self.send_clock = Some(map),
            }
        }
        any
    }

    /// Closes and retires every session marked dead.
    fn reap_dead(&mut self) {
        let mut k = self.sessions.len();
        while k > 0 {
            k -= 1;
            if let Some(reason) = self.sessions[k].dead {
                let mut s = self.sessions.swap_remove(k);
                s.close(reason);
                self.emit(Event::Retired { session: s, reason });
            }
        }
    }

    /// Rings every session's doorbell and records the send completions reaped with NIC timestamps.
    fn flush_all(&mut self) {
        let mut any_dead = false;
        let map = self.send_clock;
        for s in self.sessions.iter_mut() {
            if s.dead.is_none() && s.flush().is_err() {
                s.dead = Some(CloseReason::FabricError);
                any_dead = true;
            }
            s.record_send_completions(map.as_ref());
        }
        if any_dead {
            self.reap_dead();
        }
    }

    /// Offers live record `pos` to every session that is live at `pos`, rotating the start. Every post of the
    /// record carries one stamp, read once before the first (the TSC read costs about as much as a post), and
    /// goes from one copy of the record on the stack (each post sets only its seq). Returns whether a session
    /// was marked dead. `t_read`: the TSC when the record was read from the journal, for one record in
    /// [`DECODE_TO_POST_SAMPLE`] (`None` for the others); `now`: the cycle's TSC read, the record's send stamp.
    #[inline]
    fn fan_out_live(&mut self, record: &BookUpdate, pos: u64, t_read: Option<u64>, now: u64) -> bool {
        let n = self.sessions.len();
        if n == 0 {
            return false;
        }
        self.rotate = if self.rotate + 1 >= n { 0 } else { self.rotate + 1 };
        let stall = self.timing.stall_ticks;
        let mut k = self.rotate;
        let mut sent = false;
        let mut died = false;
        let r = &mut BookUpdate { ts_send_ticks: now as u32, ..*record };
        for _ in 0..n {
            let s = &mut self.sessions[k];
            k = if k + 1 == n { 0 } else { k + 1 };
            if s.dead.is_some() || !s.is_live_at(pos) {
                continue;
            }
            if pos & (LAG_REFRESH_RECORDS - 1) == 0 {
                s.refresh_consumed(); // one read of the subscriber's line, for the lag counter
            }
            s.feed_pos = pos + 1; // handled one way or another below
            if !s.wants(record.instrument_id) {
                bump(&s.counters.filtered);
                continue;
            }
            match s.try_post(r, now) {
                Post::Sent => sent = true,
                Post::Failed(reason) => s.dead = Some(reason),
                Post::Full => {
                    bump(&s.counters.ring_full);
                    match s.policy {
                        SlowConsumerPolicy::Disconnect => s.dead = Some(CloseReason::RingFull),
                        SlowConsumerPolicy::Resync => {
                            if s.stalled_too_long(now, stall) {
                                s.dead = Some(CloseReason::Stalled);
                            } else {
                                s.skip();
                            }
                        }
                        SlowConsumerPolicy::Block => {
                            let t = self.clock.raw();
                            post_waiting(s, r, &self.clock, t, stall, &self.shutdown);
                            add(&s.counters.blocked_ticks, self.clock.raw().wrapping_sub(t));
                        }
                    }
                }
            }
            died |= s.dead.is_some();
        }
        if let (true, Some(t_read)) = (sent, t_read) {
            // Every post of this record carries the same stamp: one value per record, not per post.
            self.counters.decode_to_post.record(now.wrapping_sub(t_read));
        }
        died
    }

    /// Sends snapshot and catch-up records to the sessions behind `pos`, at most [`CATCHUP_BUDGET`] each.
    /// Returns whether any session is still behind.
    fn serve_catchup(&mut self, pos: u64) -> bool {
        let mut behind = false;
        let mut floor = u64::MAX;
        let stall = self.timing.stall_ticks;
        for k in 0..self.sessions.len() {
            let s = &mut self.sessions[k];
            if s.dead.is_some() || s.is_live_at(pos) {
                continue;
            }
            if s.catchup_lost {
                behind = true; // waiting for its fresh snapshot
                continue;
            }
            let mut budget = CATCHUP_BUDGET;
            let mut lost = false;
            let mut done_snapshot = None;
            while budget > 0 {
                let now = self.clock.raw();
                let next_snap = s.snapshot.as_ref().map(|(snap, idx)| snap.get(*idx).copied());
                let post = if let Some(next) = next_snap {
                    let Some(mut r) = next else {
                        done_snapshot = s.snapshot.take().map(|(v, _)| v);
                        bump(&s.counters.snapshots);
                        continue;
                    };
                    let p = s.try_post(&mut r, now);
                    if p == Post::Sent {
                        if let Some((_, idx)) = &mut s.snapshot {
                            *idx += 1;
                        }
                    }
                    p
                } else if s.feed_pos < pos {
                    let Some(mut r) = self.journal.read(s.feed_pos) else {
                        // overwritten: the journal moved on past this session's position
                        s.catchup_lost = true;
                        lost = true;
                        break;
                    };
                    if !s.wants(r.instrument_id) {
                        s.feed_pos += 1;
                        budget -= 1;
                        continue;
                    }
                    let p = s.try_post(&mut r, now);
                    if p == Post::Sent {
                        s.feed_pos += 1;
                        bump(&s.counters.catchup);
                    }
                    p
                } else {
                    break;
                };
                match post {
                    Post::Sent => budget -= 1,
                    Post::Failed(reason) => {
                        s.dead = Some(reason);
                        break;
                    }
                    Post::Full => {
                        if s.stalled_since == 0 {
                            bump(&s.counters.ring_full); // once per stall: the retries each cycle are the same one
                        }
                        if s.stalled_too_long(now, stall) {
                            s.dead = Some(CloseReason::Stalled);
                        }
                        break;
                    }
                }
            }
            let id = s.id;
            if !s.is_live_at(pos) && s.dead.is_none() {
                behind = true;
                if !s.catchup_lost && s.holds_journal {
                    floor = floor.min(s.feed_pos);
                }
            }
            if let Some(records) = done_snapshot {
                self.emit(Event::SnapshotDone { id, delivered: true, records });
            }
            if lost {
                self.emit(Event::CatchupLost { id });
            }
        }
        if self.hold_for_catchup && floor != u64::MAX {
            floor = self.bound_hold(floor, pos);
        }
        // A live feed cannot wait for a late joiner: it overwrites, and the joiner gets a fresh snapshot.
        self.catchup_floor = if self.hold_for_catchup { floor } else { u64::MAX };
        self.journal.done(crate::journal::HOT_LOOP, pos.min(self.catchup_floor));
        behind
    }

    /// Bounds how long catching-up sessions may stop a file feed: while the journal is full with `floor` (the
    /// lowest position a holding session still needs) at its oldest record, the feed handler cannot append, and
    /// once the hot loop has fanned out every record published (`pos`) every live session waits with it. Once
    /// that has lasted `catchup_hold_ticks`, the sessions at the floor stop holding the journal
    /// ([`Event::HoldReleased`]): the feed overwrites past them, and one that then needs an overwritten position
    /// gets a fresh snapshot (`CatchupLost`), which holds the journal again. A session that has been released
    /// [`MAX_HOLD_RELEASES`] times is dropped (`stalled`) instead of released again. Returns the floor of the
    /// sessions that still hold it.
    fn bound_hold(&mut self, floor: u64, pos: u64) -> u64 {
        let published = self.journal.published();
        if published < floor.saturating_add(self.journal.capacity()) || pos < published {
            self.floor_full_since = 0;
            return floor;
        }
        let now = self.clock.raw();
        if self.floor_full_since == 0 {
            self.floor_full_since = now;
            return floor;
        }
        if now.wrapping_sub(self.floor_full_since) <= self.timing.catchup_hold_ticks {
            return floor;
        }
        self.floor_full_since = 0;
        let mut rest = u64::MAX;
        for k in 0..self.sessions.len() {
            let s = &mut self.sessions[k];
            if s.dead.is_some() || s.is_live_at(pos) || s.catchup_lost || !s.holds_journal {
                continue;
            }
            if s.feed_pos == floor {
                if s.hold_releases >= MAX_HOLD_RELEASES {
                    s.dead = Some(CloseReason::Stalled); // retired by the caller's reap
                    continue;
                }
                s.hold_releases += 1;
                s.holds_journal = false;
                let (id, releases) = (s.id, s.hold_releases);
                self.emit(Event::HoldReleased { id, position: floor, releases });
            } else {
                rest = rest.min(s.feed_pos);
            }
        }
        rest
    }

    /// Sends a heartbeat to every live session that was sent nothing for the heartbeat interval, whatever the
    /// others received (a subscriber filtered to a quiet instrument must not think the publisher silent). Looks
    /// at most 8 times per interval. A full ring gets none (it has records to read) and no seq is used up for it.
    fn heartbeat_if_due(&mut self, pos: u64) {
        let now = self.clock.raw();
        let interval = self.timing.heartbeat_ticks;
        if now.wrapping_sub(self.last_heartbeat_check) < interval / 8 {
            return;
        }
        self.last_heartbeat_check = now;
        let mut sent = false;
        for s in self.sessions.iter_mut() {
            s.publish_counters(); // the conductor's view of sent and last_seq, at most interval / 8 old
            if s.dead.is_some() || !s.is_live_at(pos) || now.wrapping_sub(s.last_post_ticks()) < interval {
                continue;
            }
            s.refresh_consumed();
            let mut hb = BookUpdate::control(Kind::Heartbeat);
            if s.try_post(&mut hb, now) == Post::Sent {
                bump(&s.counters.heartbeats);
                sent = true;
            }
        }
        if sent {
            self.flush_all();
        }
    }

    /// One pass of housekeeping: commands, backlog, and, when a command came or a session was behind at the
    /// last look, catch-up and dead sessions. Returns whether a session is behind.
    #[inline]
    fn housekeeping(&mut self, pos: u64) -> bool {
        let commands = self.drain_commands();
        if self.events.has_waiting() {
            self.drain_backlog();
        }
        if commands || self.catching_up {
            self.catching_up = self.serve_catchup(pos);
            self.reap_dead();
        }
        if commands {
            // serve_catchup has stored the hot loop's cursor that covers the new positions: the conductor may let go
            for s in self.sessions.iter_mut().filter(|s| s.adopt_pending > 0) {
                let adopted = &s.counters.adopted;
                adopted.store(adopted.load(Ordering::Relaxed) + s.adopt_pending, Ordering::Release);
                s.adopt_pending = 0;
            }
        }
        self.catching_up
    }

    /// The waiting phase: housekeeping (sessions arrive as commands, heartbeats go to those already here) until
    /// `wait_for` sessions are attached. Returns the sessions that arrived or left (0: idle).
    fn wait_cycle(&mut self) -> usize {
        let before = self.sessions.len();
        self.housekeeping(0);
        if self.shutdown.load(Ordering::Relaxed) {
            self.finish(CloseReason::Shutdown, 0, 0);
            return 1;
        }
        self.heartbeat_if_due(0);
        if self.sessions.len() >= self.wait_for {
            self.emit(Event::Started { sessions: self.sessions.len() });
            self.start_ticks = self.clock.raw();
            self.start_instant = self.clock.now();
            self.cycle_start = self.start_ticks;
            self.phase = Phase::Live;
            return 1;
        }
        self.sessions.len().abs_diff(before)
    }

    /// One live duty cycle: housekeeping, then the next record if it is due (returns 1), or, while it is not
    /// (or once the feed is done and sessions are still catching up), what the old pacing spin did between two
    /// looks at the clock (flush catch-up writes, heartbeats) and 0, so the runner's idle strategy spins once.
    #[inline]
    fn live_cycle(&mut self) -> usize {
        let pos = self.pos;
        let behind = self.housekeeping(pos);
        if self.shutdown.load(Ordering::Relaxed) {
            self.end_replay(CloseReason::Shutdown);
            return 1;
        }
        // The journal's counters are read only when the hot loop has caught up with what it last saw published:
        // the feed handler stores `published` for every record, and a read per cycle would pull its line over.
        // The state first: once it is not `Running`, the `published` read after it is final.
        let state = if pos < self.published_seen { FeedState::Running } else { self.journal.state() };
        if pos >= self.published_seen {
            self.published_seen = self.journal.published();
        }
        if pos == self.published_seen {
            if state == FeedState::Running {
                // The feed handler is behind (or the feed is live and quiet): like a pacing wait, so the next
                // record's duty cycle is timed from now, not from the last one.
                self.cycle_start = self.clock.raw();
                if behind {
                    self.flush_all();
                }
                self.heartbeat_if_due(pos);
                return 0;
            }
            if self.replay_ticks == 0 {
                self.replay_ticks = self.clock.raw().wrapping_sub(self.start_ticks);
            }
            let end = if state == FeedState::Ended { CloseReason::EndOfStream } else { CloseReason::FeedError };
            // The feed is done; wait (bounded) for sessions that are catching up or owe a resync request.
            let owed = self.sessions.iter().any(|s| s.dead.is_none() && s.owes_resync);
            if (!behind && !owed)
                || self.clock.raw().wrapping_sub(self.start_ticks + self.replay_ticks) > self.timing.stall_ticks
            {
                self.end_replay(end);
                return 1;
            }
            self.flush_all();
            self.heartbeat_if_due(pos);
            return 0;
        }
        let record = self.journal.read(pos);
        if let Some(due) = record.and_then(|r| self.pacer.due_ns(pos, r.ts_recv_ns)) {
            if (self.clock.now() - self.start_instant).as_nanos() < due as u128 {
                if behind {
                    self.flush_all();
                }
                self.heartbeat_if_due(pos);
                return 0;
            }
            // A paced cycle is timed from the moment its record was due, not from the end of the last one.
            self.cycle_start = self.clock.raw();
        }
        let t_read = (pos & (DECODE_TO_POST_SAMPLE - 1) == 0).then(|| self.clock.raw());
        // The cycle's one TSC read: the record's send stamp, and the end of this duty cycle (cycles are timed
        // stamp to stamp) and the heartbeat look's clock below.
        let now = self.clock.raw();
        let died = match record {
            Some(record) => self.fan_out_live(&record, pos, t_read, now),
            None => {
                bump(&self.counters.feed_errors);
                false
            }
        };
        self.flush_all();
        if died {
            self.reap_dead();
        }
        self.pos = pos + 1;
        self.counters.records.store(pos + 1, Ordering::Relaxed);
        self.journal.done(crate::journal::HOT_LOOP, (pos + 1).min(self.catchup_floor));
        if now.wrapping_sub(self.last_heartbeat_check) >= self.timing.heartbeat_ticks / 8 {
            // A hot loop running behind its schedule (or at pace `max`) has no pacing wait to send them from.
            self.heartbeat_if_due(pos + 1);
        }
        self.counters.cycles.record(now.wrapping_sub(self.cycle_start));
        self.cycle_start = now;
        1
    }

    fn end_replay(&mut self, end: CloseReason) {
        if self.replay_ticks == 0 {
            self.replay_ticks = self.clock.raw().wrapping_sub(self.start_ticks);
        }
        self.finish(end, self.pos, self.replay_ticks);
    }

    /// Sends end of stream to every session (waiting, bounded by the stall timeout, for a full ring), closes
    /// each with `end`, and hands them to the conductor in [`Event::Finished`].
    fn finish(&mut self, end: CloseReason, records: u64, replay_ticks: u64) {
        self.drain_commands();
        if end == CloseReason::EndOfStream {
            // A session still behind (its snapshot or catch-up unfinished) once the bounded wait for it is over did
            // not get the whole stream, and nothing in its seq says so: dropped `Stalled`, never a normal end over
            // a partial book. (One that owes a resync request saw its gap: it gets the end, after the gap.)
            for s in self.sessions.iter_mut().filter(|s| s.dead.is_none()) {
                if !s.is_live_at(records) {
                    s.dead = Some(CloseReason::Stalled);
                }
            }
        }
        let start = self.clock.raw();
        for s in self.sessions.iter_mut() {
            if s.dead.is_some() {
                continue;
            }
            // `size` carries why the stream ended (a CloseReason), so the subscriber can tell a complete replay
            // from a publisher shutdown.
            let mut eos = BookUpdate { size: end as u32, ..BookUpdate::control(Kind::EndOfStream) };
            // not `shutdown`: even a stopping publisher gives a full ring its stall timeout to take end of stream
            post_waiting(s, &mut eos, &self.clock, start, self.timing.stall_ticks, &AtomicBool::new(false));
        }
        self.flush_all();
        self.reap_dead();
        for s in self.sessions.iter_mut() {
            s.refresh_consumed();
            s.close(end);
        }
        let report = AgentReport { records, replay_ticks, sessions: std::mem::take(&mut self.sessions), end };
        self.emit(Event::Finished(report));
        self.finish_cycle();
    }

    /// After [`FanoutAgent::finish`]: moves what is still waiting into the event queue; done once it is empty.
    fn finish_cycle(&mut self) -> usize {
        let waiting = self.events.has_waiting();
        if waiting {
            self.drain_backlog();
        }
        self.phase = if self.events.has_waiting() { Phase::Finishing } else { Phase::Done };
        waiting as usize
    }

    /// Whether the agent is still waiting for its first `wait_for_subscribers` sessions (no record sent yet).
    /// The hot thread's runner idles this phase with a backoff ([`WAITING_IDLE`]) and busy-spins once it ends.
    pub fn is_waiting(&self) -> bool {
        self.phase == Phase::Waiting
    }
}

/// The hot runner's idle strategy while the agent [is waiting](FanoutAgent::is_waiting) for subscribers: nothing
/// is live yet, so it sleeps (up to 1 ms per empty duty cycle, as the loop did before it was an agent) instead
/// of burning a core a subscriber process on the same host may need. Once live: [`IdleStrategy::BusySpin`].
pub const WAITING_IDLE: IdleStrategy =
    IdleStrategy::Backoff { spins: 0, yields: 0, max_park: std::time::Duration::from_millis(1) };

impl Agent for FanoutAgent {
    fn role_name(&self) -> &str {
        "mdfan-hot"
    }

    /// One duty cycle of the phase the agent is in (see the module docs). Returns the records fanned out (1 or
    /// 0), or while waiting the sessions that came or went; 1 too for a cycle that changed phase.
    #[inline]
    fn do_work(&mut self) -> usize {
        match self.phase {
            Phase::Live => self.live_cycle(),
            Phase::Waiting => self.wait_cycle(),
            Phase::Finishing => self.finish_cycle(),
            Phase::Done => 0,
        }
    }

    fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
}

/// Posts `record` to `s`, spinning while its ring is full, until it is sent, the fabric fails (the session is
/// marked dead with that reason), the subscriber left (the conductor set its `SessionCounters::left`: marked dead
/// with that reason), or the ring has stayed full for `stall_ticks` since `start` (marked dead, `Stalled`) or
/// `give_up` (the publisher's shutdown flag) is set (marked dead, `Shutdown`: the subscriber was waited for, not
/// given up on). The hot loop's only wait on a subscriber: policy `block`, and the end-of-stream record.
fn post_waiting(
    s: &mut Session,
    record: &mut BookUpdate,
    clock: &quanta::Clock,
    start: u64,
    stall_ticks: u64,
    give_up: &AtomicBool,
) {
    loop {
        let now = clock.raw();
        match s.try_post(record, now) {
            Post::Sent => return,
            Post::Failed(reason) => {
                s.dead = Some(reason);
                return;
            }
            Post::Full if give_up.load(Ordering::Relaxed) => {
                s.dead = Some(CloseReason::Shutdown);
                return;
            }
            Post::Full if s.counters.left.load(Ordering::Relaxed) != 0 => {
                let left = CloseReason::from_u32(s.counters.left.load(Ordering::Relaxed));
                s.dead = Some(left.unwrap_or(CloseReason::PeerGone));
                return;
            }
            Post::Full if now.wrapping_sub(start) > stall_ticks => {
                s.dead = Some(CloseReason::Stalled);
                return;
            }
            Post::Full => std::hint::spin_loop(),
        }
    }
}
