//! mdfan's own path on shared memory: a 64-byte record written with `RemoteRing::write_with_imm` into a ring,
//! reaped with `LocalRing::poll_cq` and read in place, between two pinned threads.
//!
//! - [`pingpong`]: one record out on one ring, one back on a second ring; one-way = round trip / 2. The same
//!   method as the cache-line baseline, so the two compare directly.
//! - [`open_loop`]: records sent at a fixed rate, each stamped with its intended send time (coordinated omission
//!   corrected, as wrk2 does) and its actual post time; the receiver records post -> poll and intended -> poll.

use std::path::Path;
use std::sync::{Arc, Barrier};

use hdrhistogram::Histogram;
use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing};
use mdfan_fabric::{LocalRing, RemoteRing};
use mdfan_wire::ring::{has_space, imm_from_seq, slot_index};
use mdfan_wire::{BookUpdate, Kind};

fn ring(dir: &Path, slots: u32) -> anyhow::Result<(ShmLocalRing, ShmRemoteRing)> {
    let (mut local, grant) = ShmLocalRing::create(dir, slots)?;
    let remote = ShmRemoteRing::attach(&grant, dir)?;
    local.unlink();
    Ok((local, remote))
}

/// Writes `seq` into `remote` (the caller keeps within the ring) with `ts` stamps.
#[inline]
fn write(remote: &mut ShmRemoteRing, seq: u64, ts_send_ticks: u64, intended_ticks: u64) {
    let r = BookUpdate { seq, ts_send_ticks, ts_recv_ns: intended_ticks, ..BookUpdate::control(Kind::Add) };
    let slots = remote.slot_count();
    // The slot index is in range and the ring stays open for the whole run: a failure is a bug in the bench.
    remote.write_with_imm(slot_index(seq, slots), &r, imm_from_seq(seq)).expect("a benchmark ring post");
}

/// Spins until the next completion and returns the record, in place.
#[inline]
fn reap(local: &mut ShmLocalRing) -> BookUpdate {
    loop {
        if let Some(c) = local.poll_cq() {
            let slots = local.slot_count();
            // the seq in the slot names itself; the benchmark rings never wrap faster than they are read
            let seq_low = c.imm_data;
            let r = *local.slot(slot_index(seq_low as u64, slots));
            local.release(r.seq);
            return r;
        }
        std::hint::spin_loop();
    }
}

/// One-way latency by ping-pong over two rings (ns).
pub fn pingpong(
    dir: &Path,
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Histogram<u64>> {
    let (mut a_local, mut b_to_a) = ring(dir, 1024)?;
    let (mut b_local, mut a_to_b) = ring(dir, 1024)?;
    let total = warmup + count;
    let start = Arc::new(Barrier::new(2));
    let responder = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            crate::pin(b_core);
            start.wait();
            for _ in 1..=total {
                let r = reap(&mut b_local);
                write(&mut b_to_a, r.seq, r.ts_send_ticks, 0);
            }
        })
    };
    crate::pin(a_core);
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    start.wait();
    for seq in 1..=total {
        let t0 = clock.raw();
        write(&mut a_to_b, seq, t0, 0);
        let r = reap(&mut a_local);
        let rtt = clock.delta_as_nanos(r.ts_send_ticks, clock.raw());
        if seq > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    responder.join().map_err(|_| anyhow::anyhow!("responder thread panicked"))?;
    Ok(hist)
}

/// Histograms of an open-loop run (ns).
pub struct OpenLoop {
    /// Actual post to the receiver's poll.
    pub post_to_poll: Histogram<u64>,
    /// Intended send time to the receiver's poll (includes the sender's own queueing).
    pub end_to_end: Histogram<u64>,
    /// Records the ring was too full to take at their intended time (sent late; counted in end_to_end).
    pub late_posts: u64,
}

/// Sends `warmup + count` records at `rate_per_s` from `tx_core` to `rx_core` through one ring.
pub fn open_loop(
    dir: &Path,
    tx_core: Option<usize>,
    rx_core: Option<usize>,
    rate_per_s: u64,
    warmup: u64,
    count: u64,
) -> anyhow::Result<OpenLoop> {
    const SLOTS: u32 = 1 << 16;
    let (mut local, mut remote) = ring(dir, SLOTS)?;
    let total = warmup + count;
    let start = Arc::new(Barrier::new(2));
    let receiver = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            crate::pin(rx_core);
            let clock = quanta::Clock::new();
            let (mut post, mut e2e) = (crate::new_histogram(), crate::new_histogram());
            start.wait();
            for _ in 1..=total {
                let r = reap(&mut local);
                let now = clock.raw();
                if r.seq > warmup {
                    post.saturating_record(clock.delta_as_nanos(r.ts_send_ticks, now).max(1));
                    e2e.saturating_record(clock.delta_as_nanos(r.ts_recv_ns, now).max(1));
                }
            }
            (post, e2e)
        })
    };
    crate::pin(tx_core);
    let clock = quanta::Clock::new();
    let ticks_per_s = {
        let t0 = clock.raw();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t1 = clock.raw();
        (t1 - t0) as f64 * 1e9 / clock.delta_as_nanos(t0, t1).max(1) as f64
    };
    let interval_ticks = ticks_per_s / rate_per_s.max(1) as f64;
    start.wait();
    let t_start = clock.raw();
    let mut late_posts = 0;
    let mut consumed = 0u64;
    for seq in 1..=total {
        let intended = t_start + ((seq - 1) as f64 * interval_ticks) as u64;
        while clock.raw() < intended {
            std::hint::spin_loop();
        }
        let mut late = false;
        while !has_space(seq, consumed, SLOTS) {
            consumed = remote.consumed_seq();
            late = true;
            std::hint::spin_loop();
        }
        late_posts += late as u64;
        write(&mut remote, seq, clock.raw(), intended);
    }
    let (post_to_poll, end_to_end) = receiver.join().map_err(|_| anyhow::anyhow!("receiver thread panicked"))?;
    Ok(OpenLoop { post_to_poll, end_to_end, late_posts })
}
