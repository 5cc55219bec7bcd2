//! mdfan's own path on shared memory: a 64-byte record written with `RemoteRing::write_with_imm` into a ring,
//! reaped with `LocalRing::poll_cq` and read in place, between two pinned threads.
//!
//! - [`pingpong`]: one record out on one ring, one back on a second ring; one-way = round trip / 2. The same
//!   method as the cache-line baseline, so the two compare directly.
//!
//! (The open-loop scenario is [`crate::openloop`].)

use std::path::Path;
use std::sync::{Arc, Barrier};

use hdrhistogram::Histogram;
use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing};
use mdfan_fabric::{LocalRing, RemoteRing};
use mdfan_wire::ring::{imm_from_seq, slot_index};
use mdfan_wire::{BookUpdate, Kind};

/// A ring of `slots` under `dir`, its file already unlinked, and the sender's handle on it.
pub fn ring(dir: &Path, slots: u32) -> anyhow::Result<(ShmLocalRing, ShmRemoteRing)> {
    let (mut local, grant) = ShmLocalRing::create(dir, slots)?;
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid()))?;
    local.unlink();
    Ok((local, remote))
}

/// Writes `seq` into `remote` (the caller keeps within the ring) with `ts` stamps.
#[inline]
fn write(remote: &mut ShmRemoteRing, seq: u64, ts_send_ticks: u32, intended_ticks: u64) {
    let r = BookUpdate { seq, ts_send_ticks, ts_recv_ns: intended_ticks, ..BookUpdate::control(Kind::Add) };
    let slots = remote.slot_count();
    // The slot index is in range and the ring stays open for the whole run: a failure is a bug in the bench.
    remote.write_with_imm(slot_index(seq, slots), &r, imm_from_seq(seq)).expect("a benchmark ring post");
}

/// Spins until the next completion and returns the record, in place.
#[inline]
fn reap(local: &mut ShmLocalRing, expect_seq: u64) -> BookUpdate {
    loop {
        if let Some(c) = local.poll_cq_expecting(expect_seq) {
            // the benchmark rings never wrap faster than they are read: every completion has its record
            let r = *c.record().expect("a bench ring's completion has its record");
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
            for seq in 1..=total {
                let r = reap(&mut b_local, seq);
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
        write(&mut a_to_b, seq, t0 as u32, 0);
        let r = reap(&mut a_local, seq);
        let rtt = clock.delta_as_nanos(0, r.ticks_since_send(clock.raw()));
        if seq > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    responder.join().map_err(|_| anyhow::anyhow!("responder thread panicked"))?;
    Ok(hist)
}
