//! The physical limit: a cache-line ping-pong between two pinned threads. One-way latency = round trip / 2.
//!
//! Each side owns one 128-byte-aligned line (two 64-byte lines: the adjacent-line prefetcher pulls pairs) and
//! writes a counter into it; the other side spins (with PAUSE) until it sees the value it waits for. Nothing
//! else is shared, so the round trip is two cache-line transfers between the cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use hdrhistogram::Histogram;

#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

/// Runs `warmup + count` round trips between `ping_core` and `pong_core`; returns the one-way histogram (ns).
pub fn run(ping_core: Option<usize>, pong_core: Option<usize>, warmup: u64, count: u64) -> Histogram<u64> {
    let ping = Arc::new(Line::default());
    let pong = Arc::new(Line::default());
    let start = Arc::new(Barrier::new(2));
    let total = warmup + count;
    let responder = {
        let (ping, pong, start) = (Arc::clone(&ping), Arc::clone(&pong), Arc::clone(&start));
        std::thread::spawn(move || {
            crate::pin(pong_core);
            start.wait();
            for i in 1..=total {
                // Acquire/Release: the value is the message; nothing else is published.
                while ping.0.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.0.store(i, Ordering::Release);
            }
        })
    };
    crate::pin(ping_core);
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    start.wait();
    for i in 1..=total {
        let t0 = clock.raw();
        ping.0.store(i, Ordering::Release);
        while pong.0.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        let rtt = clock.delta_as_nanos(t0, clock.raw());
        if i > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    responder.join().expect("pong thread");
    hist
}

/// Tests that spin two threads take this first: `cargo test` runs tests in parallel, and two spinning
/// ping-pongs on a 2-core machine would time the scheduler instead of the path under test.
#[cfg(all(test, any(feature = "aeron", feature = "iceoryx2")))]
pub(crate) fn exclusive_cores() -> std::sync::MutexGuard<'static, ()> {
    static CORES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it leaves nothing half-done behind: go on.
    CORES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A peer ping-pong's test: `run` on the first two allowed cores, 200 warm-up and 2,000 measured messages,
/// alone on the cores; returns the histogram after checking it holds exactly 2,000 plausible values.
#[cfg(all(test, any(feature = "aeron", feature = "iceoryx2")))]
pub fn check_peer_pingpong(
    run: impl FnOnce(Option<usize>, Option<usize>, u64, u64) -> anyhow::Result<Histogram<u64>>,
) -> Histogram<u64> {
    let _cores = exclusive_cores();
    let cores = mdfan_tuning::allowed_cores();
    let (warmup, count) = (200, 2_000);
    let h = run(cores.first().copied(), cores.get(1).copied(), warmup, count).expect("the peer ping-pong");
    assert_eq!(h.len(), count);
    let p50 = h.value_at_quantile(0.5);
    assert!(p50 > 0 && p50 < 1_000_000, "p50 {p50} ns");
    h
}
