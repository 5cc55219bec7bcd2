//! The fan-out agent: the hot loop, pinned to its core.
//!
//! One duty cycle: drain control commands (new sessions, removals) from the conductor's rtrb queue, check the
//! shutdown flag, wait for the record's pacing time (busy spin), normalise the next DBN record into a
//! [`BookUpdate`] on the stack, offer it to every session in turn (rotating the start so no subscriber is
//! always first), flush, retire sessions that must go. Nothing here allocates, makes a syscall, locks or logs:
//! sessions move in and out by value through the queues into preallocated storage, counters are atomics the conductor reads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_fabric::CloseReason;
use mdfan_wire::feed::dbn::{normalize_mbo, DbnMboMsg};
use mdfan_wire::{BookUpdate, Kind};

use crate::session::{Offer, Session};

/// Conductor -> hot loop.
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
}

/// Hot loop -> conductor.
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
}

/// Hot-loop counters, read by the conductor.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct AgentCounters {
    /// Feed records normalised and offered.
    pub records: AtomicU64,
    /// Feed records that failed to normalise (skipped; none for a file that loaded).
    pub feed_errors: AtomicU64,
    /// Longest duty cycle seen since the replay started, in TSC ticks.
    pub max_cycle_ticks: AtomicU64,
}

/// What the hot loop did, returned when it ends.
pub struct AgentReport {
    /// Records replayed.
    pub records: u64,
    /// TSC ticks from the first record to the end-of-stream records.
    pub replay_ticks: u64,
    /// Sessions still attached at the end (closed with end of stream or shutdown).
    pub sessions: Vec<Session>,
    /// Why the replay ended.
    pub end: CloseReason,
}

/// The hot loop's owned state.
pub struct FanoutAgent {
    pub(crate) records: Arc<[DbnMboMsg]>,
    /// Per record, ns after the first at which it may be sent (`None`: pace `max`).
    pub(crate) schedule_ns: Option<Arc<[u64]>>,
    pub(crate) sessions: Vec<Session>,
    pub(crate) commands: rtrb::Consumer<Command>,
    pub(crate) events: rtrb::Producer<Event>,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) wait_for: usize,
    pub(crate) clock: quanta::Clock,
    pub(crate) counters: Arc<AgentCounters>,
    /// Sessions retired while the event queue was full; drained first on every cycle.
    pub(crate) retire_backlog: Vec<(Session, CloseReason)>,
    pub(crate) rotate: usize,
}

impl FanoutAgent {
    fn drain_commands(&mut self) {
        while let Ok(cmd) = self.commands.pop() {
            match cmd {
                Command::Add(s) => {
                    if self.sessions.len() < self.sessions.capacity() {
                        self.sessions.push(s);
                    } else {
                        // The conductor never sends more than max_subscribers; refuse rather than allocate.
                        self.retire(s, CloseReason::FabricError);
                    }
                }
                Command::Remove { id, reason } => {
                    if let Some(i) = self.sessions.iter().position(|s| s.id == id) {
                        let mut s = self.sessions.swap_remove(i);
                        s.close(reason);
                        self.retire(s, reason);
                    }
                }
            }
        }
    }

    fn retire(&mut self, session: Session, reason: CloseReason) {
        if let Err(rtrb::PushError::Full(Event::Retired { session, reason })) =
            self.events.push(Event::Retired { session, reason })
        {
            if self.retire_backlog.len() < self.retire_backlog.capacity() {
                self.retire_backlog.push((session, reason));
            } else {
                // Cannot happen (backlog capacity = max sessions); dropping here would unmap on the hot path.
                drop(session);
            }
        }
    }

    fn drain_backlog(&mut self) {
        while let Some((session, reason)) = self.retire_backlog.pop() {
            match self.events.push(Event::Retired { session, reason }) {
                Ok(()) => {}
                Err(rtrb::PushError::Full(Event::Retired { session, reason })) => {
                    self.retire_backlog.push((session, reason));
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Offers one record to every session, starting at a rotating index so no subscriber is always first,
    /// then flushes every ring (one doorbell per session per record batch) and retires sessions that failed.
    #[inline]
    fn fan_out(&mut self, record: &BookUpdate, all: bool) {
        let n = self.sessions.len();
        if n == 0 {
            return;
        }
        self.rotate = if self.rotate + 1 >= n { 0 } else { self.rotate + 1 };
        let mut any_dead = false;
        let mut k = self.rotate;
        for _ in 0..n {
            let s = &mut self.sessions[k];
            if s.dead.is_none() {
                let mut r = *record;
                let now = self.clock.raw();
                let outcome = if all { s.post(&mut r, now) } else { s.offer(&mut r, now) };
                if let Offer::Drop(reason) = outcome {
                    s.dead = Some(reason);
                    any_dead = true;
                }
            }
            k = if k + 1 == n { 0 } else { k + 1 };
        }
        for s in self.sessions.iter_mut() {
            if s.dead.is_none() && s.flush().is_err() {
                s.dead = Some(CloseReason::FabricError);
                any_dead = true;
            }
        }
        if any_dead {
            self.reap_dead();
        }
    }

    /// Closes and retires every session marked dead.
    fn reap_dead(&mut self) {
        let mut k = self.sessions.len();
        while k > 0 {
            k -= 1;
            if let Some(reason) = self.sessions[k].dead {
                let mut s = self.sessions.swap_remove(k);
                s.close(reason);
                self.retire(s, reason);
            }
        }
    }

    /// Runs the replay to its end or to shutdown. Blocks the calling (pinned) thread.
    pub fn run(mut self) -> AgentReport {
        // Wait for the first subscribers. Nothing is live yet, so a short sleep is fine here.
        while self.sessions.len() < self.wait_for {
            self.drain_commands();
            self.drain_backlog();
            if self.shutdown.load(Ordering::Relaxed) {
                return self.finish(CloseReason::Shutdown, 0, 0);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = self.events.push(Event::Started { sessions: self.sessions.len() });
        let records = Arc::clone(&self.records);
        let schedule = self.schedule_ns.clone();
        let start = self.clock.raw();
        let start_instant = self.clock.now();
        let mut end = CloseReason::EndOfStream;
        let mut max_cycle = 0u64;
        let mut cycle_start = start;
        for (i, msg) in records.iter().enumerate() {
            self.drain_commands();
            if !self.retire_backlog.is_empty() {
                self.drain_backlog();
            }
            if self.shutdown.load(Ordering::Relaxed) {
                end = CloseReason::Shutdown;
                break;
            }
            if let Some(schedule) = &schedule {
                let due = schedule[i];
                while (self.clock.now() - start_instant).as_nanos() < due as u128 {
                    if self.shutdown.load(Ordering::Relaxed) {
                        break;
                    }
                    std::hint::spin_loop();
                }
                cycle_start = self.clock.raw();
            }
            match normalize_mbo(msg) {
                Ok(record) => self.fan_out(&record, false),
                Err(_) => bump(&self.counters.feed_errors),
            }
            self.counters.records.store(i as u64 + 1, Ordering::Relaxed);
            let now = self.clock.raw();
            let cycle = now.wrapping_sub(cycle_start);
            if cycle > max_cycle {
                max_cycle = cycle;
                self.counters.max_cycle_ticks.store(cycle, Ordering::Relaxed);
            }
            cycle_start = now;
        }
        let replayed = self.counters.records.load(Ordering::Relaxed);
        let ticks = self.clock.raw().wrapping_sub(start);
        self.finish(end, replayed, ticks)
    }

    fn finish(mut self, end: CloseReason, records: u64, replay_ticks: u64) -> AgentReport {
        self.drain_commands();
        let eos = BookUpdate::control(Kind::EndOfStream);
        self.fan_out(&eos, true);
        for s in self.sessions.iter_mut() {
            s.close(end);
        }
        self.drain_backlog();
        AgentReport { records, replay_ticks, sessions: std::mem::take(&mut self.sessions), end }
    }
}

#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}
