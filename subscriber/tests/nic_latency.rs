//! NIC-to-poll in the receiver, fed by recorded NIC completion timestamps.
//!
//! No device here reports completion timestamps (Soft-RoCE has none), so a test double wraps an shm ring and
//! stamps its completions with raw values recorded as an mlx5 CQ reports them (156.25 MHz, a 48-bit counter,
//! crossing its wrap), and maps them onto `CLOCK_REALTIME` the way the verbs provider does from its clock pairs.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use mdfan_fabric::nic_clock::{NicClock, NicRealtime, RtPair};
use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing, DEFAULT_DIR};
use mdfan_fabric::{Completion, LocalRing, PeerState, RemoteRing};
use mdfan_subscriber::receiver::Receiver;
use mdfan_subscriber::report::{nic_latency_line, NIC_NOT_AVAILABLE};
use mdfan_wire::{BookUpdate, Kind};

const MASK48: u64 = (1 << 48) - 1;
/// Raw completion timestamps of five receive completions, 1,000 ticks (6.4 µs) apart, the counter wrapping
/// between the second and the third.
const RECORDED: [u64; 5] = [MASK48 - 1_499, MASK48 - 499, 500, 1_500, 2_500];

/// An shm ring whose completions carry the recorded NIC timestamps, in order, mapped onto realtime so that the
/// last one is `lead_ns` before the moment the mapping is made.
struct StampedRing {
    inner: ShmLocalRing,
    clock: Option<NicClock>,
    stamps: std::vec::IntoIter<u64>,
    lead_ns: u64,
    mappings: u32,
}

impl LocalRing for StampedRing {
    fn slot_count(&self) -> u32 {
        self.inner.slot_count()
    }
    fn poll_cq(&mut self) -> Option<Completion<'_>> {
        let stamps = &mut self.stamps;
        let with_clock = self.clock.is_some();
        self.inner.poll_cq().map(|c| c.with_nic_ticks(if with_clock { stamps.next() } else { None }))
    }
    fn release(&mut self, consumed_seq: u64) {
        self.inner.release(consumed_seq)
    }
    fn peer_state(&self) -> PeerState {
        self.inner.peer_state()
    }
    fn nic_clock(&self) -> Option<NicClock> {
        self.clock
    }
    fn nic_realtime(&mut self) -> Option<NicRealtime> {
        let clock = self.clock?;
        self.mappings += 1;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        Some(NicRealtime::from_pair(clock, RtPair { nic_ticks: RECORDED[4], realtime_ns: now - self.lead_ns }))
    }
}

fn ring_with(clock: Option<NicClock>, lead_ns: u64) -> (StampedRing, ShmRemoteRing) {
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let ring = StampedRing { inner: local, clock, stamps: RECORDED.to_vec().into_iter(), lead_ns, mappings: 0 };
    (ring, remote)
}

fn write(remote: &mut ShmRemoteRing, n: u64) {
    for seq in 1..=n {
        let r = BookUpdate { seq, ..BookUpdate::control(Kind::Heartbeat) };
        remote.write_with_imm(seq as u32 % 64, &r, seq as u32).unwrap();
    }
    remote.flush().unwrap();
}

#[test]
fn recorded_completion_timestamps_feed_the_nic_histogram_beside_the_tsc_one() {
    // the mapping puts the last recorded completion at the moment it is made, so completion i records its
    // distance from the last ((4 - i) x 1,000 ticks of 6.4 ns: 25,600 ns for the first, across the wrap) plus
    // the time from the mapping to the poll; exact values are asserted on NicLatency itself (src/latency.rs)
    let (ring, mut remote) = ring_with(Some(NicClock::new(156_250, MASK48).unwrap()), 0);
    let mut rx = Receiver::new(ring);
    rx.enable_latency();
    write(&mut remote, 5);
    let mut got = 0;
    while got < 5 {
        got += rx.poll(16, |_| {});
    }
    let nic = rx.nic_latency().expect("a ring with NIC timestamps arms NIC-to-poll");
    let h = nic.histogram();
    assert_eq!((h.len(), nic.unaligned()), (5, 0));
    assert_eq!(rx.latency().unwrap().histogram().len(), 5, "the TSC histogram beside it");
    // the first completion is 25,600 ns before the mapping (less the realtime anchor's error, well under a µs)
    assert!(h.max() >= 24_600, "{}", h.max());
    assert!(h.min() < h.max(), "{} {}", h.min(), h.max());
    let line = nic_latency_line(Some(nic));
    assert!(line.starts_with("nic_to_poll clock=nic count=5 unaligned=0 p50_ns="), "{line}");
    rx.refresh_nic_realtime();
    assert_eq!(rx.nic_latency().unwrap().histogram().len(), 5, "a new mapping keeps what was recorded");
}

#[test]
fn without_nic_timestamps_there_is_no_nic_histogram_and_the_report_says_so() {
    let (ring, mut remote) = ring_with(None, 0);
    let mut rx = Receiver::new(ring);
    rx.enable_latency();
    write(&mut remote, 3);
    let mut got = 0;
    while got < 3 {
        got += rx.poll(16, |_| {});
    }
    assert_eq!(rx.latency().unwrap().histogram().len(), 3);
    assert!(rx.nic_latency().is_none());
    assert_eq!(nic_latency_line(rx.nic_latency()), NIC_NOT_AVAILABLE);
    assert_eq!(NIC_NOT_AVAILABLE, "nic_to_poll clock=nic: not available (device reports no completion timestamps)");
}
