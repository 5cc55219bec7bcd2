//! The receive side of one stream, without any I/O of its own: reap completions, check seq, report gaps,
//! hand records over in place. [`crate::Subscriber`] wraps it with the control connection; tests drive it
//! directly over any [`LocalRing`].

use mdfan_fabric::{CloseReason, LocalRing, PeerState};
use mdfan_wire::{flags, BookUpdate, Kind};

use crate::latency::{Latency, NicLatency, TsRecvClock, WireLatency};

/// What [`Receiver::poll`] hands the callback.
#[derive(Debug)]
pub enum Event<'a> {
    /// The next record, borrowed from the ring. Valid only inside the callback.
    Record(&'a BookUpdate),
    /// seq jumped: records `expected..got` are missing. Reported before record `got`.
    Gap {
        /// The seq that was due.
        expected: u64,
        /// The seq that arrived.
        got: u64,
    },
    /// A completion named a seq at or below one already delivered (a duplicate or a reordering); the record
    /// is not delivered again.
    Stale {
        /// The seq rebuilt from the immediate.
        seq: u64,
        /// The seq that was due.
        expected: u64,
    },
    /// A completion named a slot whose record carries another seq (torn or overwritten slot); the record is
    /// not delivered and the stream goes on.
    Corrupt {
        /// The seq rebuilt from the immediate.
        seq: u64,
        /// The seq found in the slot.
        slot_seq: u64,
    },
    /// The publisher closed the ring (after everything it wrote was delivered).
    Closed(CloseReason),
}

/// Stream counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Records delivered (control records such as heartbeats and end of stream included).
    pub records: u64,
    /// Jumps in seq.
    pub gaps: u64,
    /// Records missing in those jumps.
    pub missed: u64,
    /// Completions whose slot did not carry the seq they named.
    pub corrupt: u64,
    /// Completions for a seq already passed.
    pub stale: u64,
    /// The seq due next.
    pub next_seq: u64,
    /// Snapshots requested (after gaps).
    pub snapshots_requested: u64,
    /// Snapshots received whole (`SnapshotEnd` seen).
    pub snapshots_received: u64,
    /// Reconnections made.
    pub reconnects: u64,
}

/// See the module docs.
pub struct Receiver<R: LocalRing> {
    ring: R,
    stats: StreamStats,
    latency: Option<Latency>,
    /// Wire-to-poll, once latency is on and the publisher said `ts_recv_ns` is a live stamp.
    wire: Option<WireLatency>,
    /// NIC-to-poll, once latency is on and the ring's completions carry NIC timestamps.
    nic: Option<NicLatency>,
    /// What the publisher said `ts_recv_ns` is (its `Accept`); `None` until told (a file replay).
    ts_recv_clock: TsRecvClock,
    closed: Option<CloseReason>,
    /// First seq of a gap not yet repaired by a snapshot.
    gap_from: Option<u64>,
}

impl<R: LocalRing> Receiver<R> {
    /// A receiver expecting seq 1 first.
    pub fn new(ring: R) -> Receiver<R> {
        Receiver {
            ring,
            stats: StreamStats { next_seq: 1, ..StreamStats::default() },
            latency: None,
            wire: None,
            nic: None,
            ts_recv_clock: TsRecvClock::None,
            closed: None,
            gap_from: None,
        }
    }

    /// Starts a new stream on a new ring (after a reconnect): seq 1 is due next; counters carry on.
    pub fn restart(&mut self, ring: R) {
        self.ring = ring;
        self.stats.next_seq = 1;
        self.closed = None;
        self.gap_from = None;
        self.arm_nic();
    }

    /// Records one-way latency of every record from now on: post-to-poll always, wire-to-poll while the
    /// publisher's `ts_recv_ns` is a live receive stamp ([`Receiver::set_ts_recv_clock`]), NIC-to-poll while the
    /// ring's completions carry NIC timestamps ([`LocalRing::nic_clock`]).
    pub fn enable_latency(&mut self) {
        if self.latency.is_none() {
            self.latency = Some(Latency::new());
        }
        self.arm_wire();
        self.arm_nic();
    }

    /// With latency on and a ring whose completions carry NIC timestamps: creates the NIC-to-poll histogram (once;
    /// it survives a reconnect) and takes a fresh NIC-to-realtime mapping from the ring. Control path.
    fn arm_nic(&mut self) {
        let Some(l) = &self.latency else { return };
        if self.ring.nic_clock().is_none() {
            return;
        }
        let map = self.ring.nic_realtime();
        match &mut self.nic {
            Some(n) => n.set_to_realtime(map),
            None => self.nic = Some(NicLatency::new(l.clock().clone(), map)),
        }
    }

    /// Samples the NIC and realtime clocks again ([`LocalRing::nic_realtime`]) so NIC-to-poll follows the NIC
    /// crystal's drift; a no-op without NIC timestamps. Control path (the verbs provider calls
    /// `ibv_query_rt_values_ex`): the subscriber calls it from `maintain` about once a second.
    pub fn refresh_nic_realtime(&mut self) {
        if self.nic.is_some() {
            self.arm_nic();
        }
    }

    /// What the records' `ts_recv_ns` is, as the publisher's `Accept` said ([`TsRecvClock`]); the subscriber
    /// sets it on every (re)connect. With latency on, a live clock records wire-to-poll from the next record;
    /// [`TsRecvClock::None`] (a replay) stops it. A live clock other than the one the histogram holds starts a
    /// new histogram (never two clocks in one); this allocates, off the poll path.
    pub fn set_ts_recv_clock(&mut self, clock: TsRecvClock) {
        self.ts_recv_clock = clock;
        self.arm_wire();
    }

    fn arm_wire(&mut self) {
        let (Some(l), true) = (&self.latency, self.ts_recv_clock.is_live()) else { return };
        if self.wire.as_ref().is_none_or(|w| w.stamp() != self.ts_recv_clock) {
            self.wire = Some(WireLatency::new(self.ts_recv_clock, l.clock().clone()));
        }
    }

    /// Reaps up to `max` completions; see [`crate::Subscriber::poll`]. No syscall, no allocation.
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: F) -> usize {
        self.poll_with(max, false, f)
    }

    /// [`Receiver::poll`] that, when the expected record is not there, also reads the CQ itself before saying
    /// nothing came. A plain poll may miss a record that follows a gap: on shm it looks for the expected seq's
    /// stamp and reads the CQ only every `CQ_POLL_INTERVAL` empty polls, which with a yielding idle strategy on a
    /// loaded host can take seconds. So only a thorough poll that returns 0 proves the ring empty (what the
    /// subscriber's silence and drain judgements need). Costs one CQ read more per empty poll.
    #[inline]
    pub fn poll_thorough<F: FnMut(Event<'_>)>(&mut self, max: usize, f: F) -> usize {
        self.poll_with(max, true, f)
    }

    #[inline(always)]
    fn poll_with<F: FnMut(Event<'_>)>(&mut self, max: usize, thorough: bool, mut f: F) -> usize {
        let mut n = self.reap(max, false, &mut f);
        if n == 0 && thorough {
            n = self.reap(max, true, &mut f);
        }
        if n == 0 && self.closed.is_none() {
            if let PeerState::Closed(reason) = self.ring.peer_state() {
                // Everything written before the close is visible now, but the reap above may have missed some of
                // it: a record that landed after its poll, or one after a gap (on shm only the CQ shows it, and
                // an idle reader reads the CQ every `CQ_POLL_INTERVAL` polls). Read the CQ itself before
                // reporting the close, which comes after the last record.
                n = self.reap(max, true, &mut f);
                if n == 0 {
                    self.closed = Some(reason);
                    f(Event::Closed(reason));
                }
            }
        }
        if n > 0 {
            self.ring.release(self.stats.next_seq - 1);
        }
        n
    }

    /// The loop of [`Receiver::poll`]: up to `max` completions, from `poll_cq_expecting`, or from the CQ alone
    /// (`cq_only`, once the ring is closed).
    #[inline(always)]
    fn reap<F: FnMut(Event<'_>)>(&mut self, max: usize, cq_only: bool, f: &mut F) -> usize {
        let mut n = 0;
        while n < max {
            let polled = if cq_only { self.ring.poll_cq() } else { self.ring.poll_cq_expecting(self.stats.next_seq) };
            let Some(c) = polled else { break };
            n += 1;
            let expected = self.stats.next_seq;
            let seq = c.seq();
            let nic_ticks = c.nic_ticks();
            let record = match c.record() {
                Some(record) if seq >= expected => record,
                _ => {
                    self.stats.stale += 1;
                    f(Event::Stale { seq, expected });
                    continue;
                }
            };
            if record.seq != seq {
                self.stats.corrupt += 1;
                f(Event::Corrupt { seq, slot_seq: record.seq });
                continue;
            }
            if seq != expected {
                self.stats.gaps += 1;
                self.stats.missed += seq - expected;
                if self.gap_from.is_none() {
                    self.gap_from = Some(expected);
                }
                f(Event::Gap { expected, got: seq });
            }
            if record.kind == Kind::SnapshotBegin as u8 {
                // The snapshot rebuilds every book as of a feed position after every record missed before it
                // (catch-up follows from there): it repairs every gap seen so far, not only the one it was asked for.
                self.gap_from = None;
            }
            if record.kind == Kind::SnapshotEnd as u8 {
                self.stats.snapshots_received += 1;
            }
            if let Some(l) = &mut self.latency {
                let now = l.now_ticks();
                l.record_at(record.ts_send_ticks, now);
                if let (Some(w), true) = (&mut self.wire, self.ts_recv_clock.is_live()) {
                    // only records a datagram's own stamp travels in: not a stamp the feed marked bad, not a
                    // snapshot's records (they carry the book's last stamp); heartbeats and the end carry 0
                    if record.flags & (flags::BAD_TS_RECV | flags::SNAPSHOT) == 0 {
                        w.record_at(record.ts_recv_ns, now);
                    }
                }
                if let (Some(nic), Some(ticks)) = (&mut self.nic, nic_ticks) {
                    nic.record_at(ticks, now);
                }
            }
            self.stats.records += 1;
            self.stats.next_seq = seq + 1;
            f(Event::Record(record));
        }
        n
    }

    /// Stream counters.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    /// The first seq of a gap no snapshot has been asked for yet.
    pub fn unrepaired_gap(&self) -> Option<u64> {
        self.gap_from
    }

    /// Marks the gap as being repaired (a snapshot was requested).
    pub fn take_gap(&mut self) -> Option<u64> {
        self.gap_from.take()
    }

    /// The latency histogram, if enabled.
    pub fn latency(&self) -> Option<&Latency> {
        self.latency.as_ref()
    }

    /// What the records' `ts_recv_ns` is, as last set ([`Receiver::set_ts_recv_clock`]).
    pub fn ts_recv_clock(&self) -> TsRecvClock {
        self.ts_recv_clock
    }

    /// The wire-to-poll histogram: `Some` once latency is on and the publisher said `ts_recv_ns` is a live
    /// receive stamp (never for a file replay).
    pub fn wire_latency(&self) -> Option<&WireLatency> {
        self.wire.as_ref()
    }

    /// The NIC-to-poll histogram: `Some` once latency is on and a ring's completions carried NIC timestamps
    /// (never on shm or Soft-RoCE).
    pub fn nic_latency(&self) -> Option<&NicLatency> {
        self.nic.as_ref()
    }

    /// Why the publisher closed the ring, once it has.
    pub fn closed(&self) -> Option<CloseReason> {
        self.closed
    }
}
