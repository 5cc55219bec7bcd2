//! Per-subscriber state on the publisher: the remote ring, the stream's seq, flow control and counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_fabric::shm::ShmRemoteRing;
use mdfan_fabric::{CloseReason, PostError, RemoteRing};
use mdfan_wire::ring::{has_space, imm_from_seq, slot_index};
use mdfan_wire::BookUpdate;

/// The remote ring of one session, whichever provider it came from (static dispatch).
pub enum SessionRing {
    /// Same-host shared memory.
    Shm(ShmRemoteRing),
}

impl SessionRing {
    #[inline]
    fn ring(&mut self) -> &mut dyn RemoteRing {
        match self {
            SessionRing::Shm(r) => r,
        }
    }
}

/// Counters of one session, written by the hot loop (single writer, Relaxed stores) and read by the
/// conductor. One 128-byte line so two sessions' counters never share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct SessionCounters {
    /// Records posted to the ring (the end-of-stream record included).
    pub sent: AtomicU64,
    /// Records not sent because the session was filtered out of them (instrument filter).
    pub filtered: AtomicU64,
    /// Times the ring was found full (each ends the session in this version: policy `disconnect`).
    pub ring_full: AtomicU64,
    /// Posts that failed in the fabric.
    pub post_errors: AtomicU64,
    /// The last seq posted.
    pub last_seq: AtomicU64,
}

#[inline]
fn bump(c: &AtomicU64) {
    // Single writer (the hot loop): a load + store is enough and avoids a locked RMW.
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Result of offering one record to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Written.
    Sent,
    /// Not for this subscriber.
    Filtered,
    /// The session must end, for this reason.
    Drop(CloseReason),
}

/// The publisher's state for one subscriber.
pub struct Session {
    /// The publisher-wide id of this session.
    pub id: u64,
    /// The subscriber's name.
    pub name: String,
    ring: SessionRing,
    slot_count: u32,
    /// The seq the next record will carry (starts at 1).
    next_seq: u64,
    /// The consumed seq last read from the subscriber; refreshed only when the ring looks full.
    cached_consumed: u64,
    /// Sorted instrument_ids wanted; `None` = all.
    filter: Option<Box<[u32]>>,
    /// Counters the conductor reads.
    pub counters: Arc<SessionCounters>,
    /// Set by the hot loop when the session must end; it is retired at the end of the cycle.
    pub(crate) dead: Option<CloseReason>,
}

impl Session {
    /// A session over an attached ring.
    pub fn new(id: u64, name: String, ring: SessionRing, filter: Option<Vec<u32>>) -> Session {
        let mut ring = ring;
        let slot_count = ring.ring().slot_count();
        let filter = filter.map(|mut f| {
            f.sort_unstable();
            f.dedup();
            f.into_boxed_slice()
        });
        Session {
            id,
            name,
            ring,
            slot_count,
            next_seq: 1,
            cached_consumed: 0,
            filter,
            counters: Arc::new(SessionCounters::default()),
            dead: None,
        }
    }

    /// Offers one record: filter, flow control, post. `record.seq` and `ts_send_ticks` are set here.
    /// Allocation-free, no syscalls.
    #[inline]
    pub fn offer(&mut self, record: &mut BookUpdate, ts_send_ticks: u64) -> Offer {
        if let Some(f) = &self.filter {
            if f.binary_search(&record.instrument_id).is_err() {
                bump(&self.counters.filtered);
                return Offer::Filtered;
            }
        }
        self.post(record, ts_send_ticks)
    }

    /// Posts a record to this session regardless of the filter (end of stream, heartbeats).
    #[inline]
    pub fn post(&mut self, record: &mut BookUpdate, ts_send_ticks: u64) -> Offer {
        let seq = self.next_seq;
        if !has_space(seq, self.cached_consumed, self.slot_count) {
            self.cached_consumed = self.ring.ring().consumed_seq();
            if !has_space(seq, self.cached_consumed, self.slot_count) {
                bump(&self.counters.ring_full);
                return Offer::Drop(CloseReason::RingFull);
            }
        }
        record.seq = seq;
        record.ts_send_ticks = ts_send_ticks;
        match self.ring.ring().write_with_imm(slot_index(seq, self.slot_count), record, imm_from_seq(seq)) {
            Ok(()) => {
                self.next_seq = seq + 1;
                bump(&self.counters.sent);
                self.counters.last_seq.store(seq, Ordering::Relaxed);
                Offer::Sent
            }
            Err(PostError::SendQueueFull) => {
                bump(&self.counters.ring_full);
                Offer::Drop(CloseReason::RingFull)
            }
            Err(_) => {
                bump(&self.counters.post_errors);
                Offer::Drop(CloseReason::FabricError)
            }
        }
    }

    /// Rings the doorbell for the writes posted so far.
    #[inline]
    pub fn flush(&mut self) -> Result<(), PostError> {
        self.ring.ring().flush()
    }

    /// Tells the subscriber the ring is closed.
    pub fn close(&mut self, reason: CloseReason) {
        self.ring.ring().close(reason);
    }

    /// The seq the next record would carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}
