//! Pacing a replay: per-record send times from the capture's ts_recv, and the TSC rate the hot loop waits in.

use std::sync::Arc;
use std::time::Duration;

use mdfan_feed::dbn::DbnMboMsg;

use crate::config::Pace;

/// TSC ticks per millisecond, measured against quanta's calibrated conversion.
pub(crate) fn ticks_per_ms(clock: &quanta::Clock) -> u64 {
    let t0 = clock.raw();
    std::thread::sleep(Duration::from_millis(5));
    let t1 = clock.raw();
    let ns = clock.delta_as_nanos(t0, t1).max(1);
    ((t1.wrapping_sub(t0)) as u128 * 1_000_000 / ns as u128).max(1) as u64
}

/// Per-record send times for paced replay: ns after the first record, from ts_recv deltas shortened to
/// `max_gap_ms` and divided by the speed-up factor. `None` for pace `max`.
pub fn schedule(records: &[DbnMboMsg], pace: Pace, max_gap_ms: u64) -> Option<Arc<[u64]>> {
    let factor = match pace {
        Pace::Max => return None,
        Pace::Realtime => 1.0,
        Pace::Factor(f) => f,
    };
    let max_gap_ns = max_gap_ms.saturating_mul(1_000_000);
    let mut at = 0f64;
    let mut prev = records.first().map_or(0, |r| r.ts_recv);
    Some(
        records
            .iter()
            .map(|r| {
                let gap = r.ts_recv.saturating_sub(prev).min(max_gap_ns);
                prev = r.ts_recv.max(prev);
                at += gap as f64 / factor;
                at as u64
            })
            .collect(),
    )
}
