//! Per-subscriber state on the publisher: the remote ring, the stream's seq, flow control, the slow-consumer
//! policy, snapshot and catch-up progress, and counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_fabric::{AnyRemoteRing, CloseReason, PostError, RemoteRing};

use crate::send_clock::{SendClockMap, SendCompletionCounters};
use mdfan_wire::control::SlowConsumerPolicy;
use mdfan_wire::ring::{imm_from_seq, slot_index, slot_is_free};
use mdfan_wire::BookUpdate;

/// Counters of one session, written by the hot loop (single writer, Relaxed stores) and read by the
/// conductor. Aligned to 128 bytes so two sessions' counters never share a line pair.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct SessionCounters {
    /// Records written to the ring (live, snapshot, catch-up, heartbeats, end of stream). This and `last_seq`
    /// are published by the hot loop at least every heartbeat interval / 8, not per record
    /// ([`Session::publish_counters`]).
    pub sent: AtomicU64,
    /// Live records not for this subscriber (instrument filter).
    pub filtered: AtomicU64,
    /// Live records skipped because the ring was full (policy `resync`); each left a gap in seq.
    pub skipped: AtomicU64,
    /// Snapshots fully delivered.
    pub snapshots: AtomicU64,
    /// Records re-sent from the feed after a snapshot (catch-up).
    pub catchup: AtomicU64,
    /// Heartbeat records sent.
    pub heartbeats: AtomicU64,
    /// Times a post found the ring full (a live record each time; catching up, once per stall: the hot loop
    /// retries the same record every cycle).
    pub ring_full: AtomicU64,
    /// TSC ticks the hot loop spent waiting for this subscriber (policy `block`).
    pub blocked_ticks: AtomicU64,
    /// The last seq written.
    pub last_seq: AtomicU64,
    /// The subscriber's consumed seq, as last read by the hot loop (lag = last_seq - consumed_seq).
    pub consumed_seq: AtomicU64,
    /// Commands for this session (its `Add`, then each `Snapshot`) the hot loop has taken and covers with its
    /// journal floor, stored (Release) after the hot loop's journal cursor that holds that floor: until it counts a command,
    /// the conductor holds the journal at that command's position itself, so a late joiner's position is never
    /// overwritten on its way to the hot loop (a file feed).
    pub adopted: AtomicU64,
    /// Why the subscriber left (a [`CloseReason`] as `u32`; 0 while it has not), stored by the conductor when it
    /// sees the control connection close, a bye or garbage, just before it sends `Command::Remove`:
    /// a hot loop waiting on the ring (policy `block`, the end of stream) reads it and stops waiting, so a
    /// subscriber killed with a full ring costs the others nothing more, not the stall timeout.
    pub left: std::sync::atomic::AtomicU32,
    /// Post-to-send-completion, `clock=nic` ([`crate::send_clock`]): recorded only when the ring's send
    /// completions carry NIC timestamps ([`RemoteRing::send_nic_clock`]).
    pub send_completion: SendCompletionCounters,
}

#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    add(c, 1);
}

#[inline]
pub(crate) fn add(c: &AtomicU64, n: u64) {
    // Single writer (the hot loop): a load + store is enough and avoids a locked RMW.
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Result of one post attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    /// Written with the next seq.
    Sent,
    /// The ring has no free slot; nothing written, seq unchanged.
    Full,
    /// The fabric failed; the session must end.
    Failed(CloseReason),
}

/// The publisher's state for one subscriber.
pub struct Session {
    /// The publisher-wide id of this session.
    pub id: u64,
    /// The subscriber's name.
    pub name: String,
    /// What happens when its ring is full.
    pub policy: SlowConsumerPolicy,
    ring: AnyRemoteRing,
    slot_count: u32,
    /// The seq the next record will carry (starts at 1).
    next_seq: u64,
    /// The consumed seq last read from the subscriber; refreshed only when the ring looks full.
    cached_consumed: u64,
    /// The last seq actually written (skipped seqs are never written).
    last_written: u64,
    /// Records written (what `counters.sent` shows once published: [`Session::publish_counters`]).
    sent: u64,
    /// Sorted instrument_ids wanted, with [`mdfan_wire::CHANNEL_INSTRUMENT_ID`]; `None` = all.
    filter: Option<Box<[u32]>>,
    /// Counters the conductor reads.
    pub counters: Arc<SessionCounters>,
    /// Set by the hot loop when the session must end; it is retired at the end of the cycle.
    pub(crate) dead: Option<CloseReason>,
    /// The next feed record (index) this session needs; it is live when this equals the hot loop's position.
    pub(crate) feed_pos: u64,
    /// Snapshot records still to send (and the index of the next), before catching up from `feed_pos`.
    pub(crate) snapshot: Option<(Vec<BookUpdate>, usize)>,
    /// Records were skipped since the last snapshot (policy `resync`): the subscriber owes us a request.
    pub(crate) owes_resync: bool,
    /// Catching up, it needed a journal position already overwritten: it waits for a fresh snapshot.
    pub(crate) catchup_lost: bool,
    /// Whether its catch-up holds a file feed's journal (its position is not overwritten until it has read it).
    /// Cleared once it has held the journal full for `publisher.catchup_hold_ms`
    /// ([`crate::agent::Event::HoldReleased`]), set again by its next snapshot.
    pub(crate) holds_journal: bool,
    /// Times its hold was released ([`crate::agent::MAX_HOLD_RELEASES`] at most).
    pub(crate) hold_releases: u32,
    /// TSC when the ring was first found full in the current stall; 0 when not stalled.
    pub(crate) stalled_since: u64,
    /// TSC stamp of the last record written (0 before any): heartbeats go to sessions quiet for an interval.
    last_post_ticks: u64,
    /// Commands taken since the last housekeeping pass, not yet counted in `counters.adopted`.
    pub(crate) adopt_pending: u64,
    /// The ring's send completions carry NIC timestamps ([`RemoteRing::send_nic_clock`], read once at creation).
    send_stamped: bool,
}

impl Session {
    /// A session over an attached ring that needs feed records from `feed_pos` on, after `snapshot` if any.
    pub fn new(
        id: u64,
        name: String,
        ring: AnyRemoteRing,
        policy: SlowConsumerPolicy,
        filter: Option<Vec<u32>>,
        feed_pos: u64,
        snapshot: Option<Vec<BookUpdate>>,
    ) -> Session {
        let slot_count = ring.slot_count();
        let send_stamped = ring.send_nic_clock().is_some();
        // Records about the whole channel (a feed status) go to every subscriber, filtered or not.
        let filter = filter.map(|mut f| {
            f.push(mdfan_wire::CHANNEL_INSTRUMENT_ID);
            f.sort_unstable();
            f.dedup();
            f.into_boxed_slice()
        });
        Session {
            id,
            name,
            policy,
            ring,
            slot_count,
            next_seq: 1,
            cached_consumed: 0,
            last_written: 0,
            sent: 0,
            filter,
            counters: Arc::new(SessionCounters::default()),
            dead: None,
            feed_pos,
            snapshot: snapshot.map(|s| (s, 0)),
            owes_resync: false,
            catchup_lost: false,
            holds_journal: true,
            hold_releases: 0,
            stalled_since: 0,
            last_post_ticks: 0,
            adopt_pending: 0,
            send_stamped,
        }
    }

    /// Whether this subscriber wants records of `instrument_id`.
    #[inline]
    pub fn wants(&self, instrument_id: u32) -> bool {
        match &self.filter {
            Some(f) => f.binary_search(&instrument_id).is_ok(),
            None => true,
        }
    }

    /// The instrument filter, sorted (`None` = all).
    pub fn filter(&self) -> Option<&[u32]> {
        self.filter.as_deref()
    }

    /// Whether the slot of the next seq is free ([`slot_is_free`]), refreshing the cached consumed seq if needed.
    #[inline]
    pub fn has_space(&mut self) -> bool {
        let free = |s: &Session| slot_is_free(s.next_seq, s.cached_consumed, s.last_written, s.slot_count);
        if free(self) {
            return true;
        }
        self.refresh_consumed();
        free(self)
    }

    /// Reads the subscriber's consumed seq now. A subscriber that released something is not stalled, whether or
    /// not that freed the slot the next seq needs: the stall timeout counts from its last release.
    #[inline]
    pub fn refresh_consumed(&mut self) {
        let consumed = self.ring.consumed_seq();
        if consumed > self.cached_consumed {
            self.stalled_since = 0;
        }
        self.cached_consumed = consumed;
        self.counters.consumed_seq.store(consumed, Ordering::Relaxed);
        self.publish_counters();
    }

    /// Stores the records written and the last seq into [`SessionCounters`] (`sent`, `last_seq`) for the
    /// conductor. Not per post (two more stores per subscriber per record): the hot loop calls it with every
    /// [`Session::refresh_consumed`] (every 1,024 records, on a full ring), on each heartbeat look (every
    /// heartbeat interval / 8) and at [`Session::close`].
    #[inline]
    pub fn publish_counters(&self) {
        self.counters.sent.store(self.sent, Ordering::Relaxed);
        self.counters.last_seq.store(self.last_written, Ordering::Relaxed);
        if self.send_stamped {
            self.counters.send_completion.lost.store(self.ring.send_stamps_lost(), Ordering::Relaxed);
        }
    }

    /// Tries to write `record` with the next seq, stamping `seq` and `ts_send_ticks`. Allocation-free, no
    /// syscalls (on shm; on verbs, the doorbell is in `flush`).
    #[inline]
    pub fn try_post(&mut self, record: &mut BookUpdate, ts_send_ticks: u64) -> Post {
        if !self.has_space() {
            return Post::Full;
        }
        let seq = self.next_seq;
        record.seq = seq;
        // a fan-out posts one record to every session with one stamp: stored once, not once per session (the
        // record keeps the low 32 bits: `wire::record`)
        let stamp = ts_send_ticks as u32;
        if record.ts_send_ticks != stamp {
            record.ts_send_ticks = stamp;
        }
        match self.ring.write_with_imm(slot_index(seq, self.slot_count), record, imm_from_seq(seq)) {
            Ok(()) => {
                self.next_seq = seq + 1;
                self.last_written = seq;
                if self.stalled_since != 0 {
                    self.stalled_since = 0;
                }
                self.last_post_ticks = ts_send_ticks;
                self.sent += 1;
                Post::Sent
            }
            Err(PostError::SendQueueFull) => Post::Full,
            Err(_) => Post::Failed(CloseReason::FabricError),
        }
    }

    /// Gives up a live record under policy `resync`: its seq is consumed, so the subscriber sees the gap.
    #[inline]
    pub fn skip(&mut self) {
        self.next_seq += 1;
        self.owes_resync = true;
        bump(&self.counters.skipped);
    }

    /// Notes that the ring was full at `now`; returns true once it has been full for more than
    /// `timeout_ticks` without the subscriber releasing anything (a release restarts the count).
    #[inline]
    pub fn stalled_too_long(&mut self, now: u64, timeout_ticks: u64) -> bool {
        if self.stalled_since == 0 {
            self.stalled_since = now;
            false
        } else {
            now.wrapping_sub(self.stalled_since) > timeout_ticks
        }
    }

    /// Rings the doorbell for the writes posted so far.
    #[inline]
    pub fn flush(&mut self) -> Result<(), PostError> {
        self.ring.flush()
    }

    /// Records the send completions the ring reaped with NIC timestamps since the last call
    /// ([`RemoteRing::take_send_stamps`]) into `counters.send_completion`, mapped with `map` (counted as
    /// unaligned without one). After [`Session::flush`]; nothing to do on a ring without send timestamps.
    #[inline]
    pub fn record_send_completions(&mut self, map: Option<&SendClockMap>) {
        if !self.send_stamped {
            return; // shm, Soft-RoCE: a field of the session, not a call through the ring, per flush
        }
        let stamps = self.ring.take_send_stamps();
        if !stamps.is_empty() {
            self.counters.send_completion.record(stamps, map, self.last_post_ticks);
        }
    }

    /// Whether this session's send completions carry NIC timestamps (post-to-send-completion is measured).
    pub fn send_completions_stamped(&self) -> bool {
        self.send_stamped
    }

    /// The ring (for readiness, drain and failure details, off the hot path).
    pub fn ring_mut(&mut self) -> &mut AnyRemoteRing {
        &mut self.ring
    }

    /// Tells the subscriber the ring is closed; the counters get their final values.
    pub fn close(&mut self, reason: CloseReason) {
        self.publish_counters();
        self.ring.close(reason);
    }

    /// The TSC stamp of the last record written to this session (0 before any).
    #[inline]
    pub fn last_post_ticks(&self) -> u64 {
        self.last_post_ticks
    }

    /// The seq the next record would carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether the session is following the live feed (not sending a snapshot or catching up at `pos`).
    #[inline]
    pub fn is_live_at(&self, pos: u64) -> bool {
        self.snapshot.is_none() && self.feed_pos == pos
    }
}
