//! A histogram of hot-loop duty-cycle times that another thread can read while the hot loop writes it.
//!
//! Log-linear buckets: 16 per power of two (so a value is known within 6.25%), 63 powers: 1,008 `AtomicU64`s,
//! written with Relaxed load+store by the single writer, read with Relaxed loads by anyone. Values are TSC
//! ticks; the reader converts.

use std::sync::atomic::{AtomicU64, Ordering};

const SUB_BITS: u32 = 4;
const SUBS: usize = 1 << SUB_BITS;
const BUCKETS: usize = 63 * SUBS;

/// See the module docs.
pub struct CycleHistogram {
    buckets: [AtomicU64; BUCKETS],
    max: AtomicU64,
}

impl std::fmt::Debug for CycleHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleHistogram").field("count", &self.count()).field("max", &self.max()).finish()
    }
}

impl Default for CycleHistogram {
    fn default() -> Self {
        CycleHistogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), max: AtomicU64::new(0) }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUBS as u64 {
        return v as usize;
    }
    let log = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (log - SUB_BITS)) as usize & (SUBS - 1);
    (log - SUB_BITS + 1) as usize * SUBS + sub
}

/// The largest value a bucket holds.
fn bucket_upper(b: usize) -> u64 {
    if b < SUBS {
        return b as u64;
    }
    let log = (b / SUBS) as u32 + SUB_BITS - 1;
    let step = 1u128 << (log - SUB_BITS);
    ((1u128 << log) + ((b % SUBS) as u128 + 1) * step - 1).min(u64::MAX as u128) as u64
}

impl CycleHistogram {
    /// Records one value (single writer).
    #[inline]
    pub fn record(&self, v: u64) {
        let b = &self.buckets[bucket_of(v)];
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if v > self.max.load(Ordering::Relaxed) {
            self.max.store(v, Ordering::Relaxed);
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The largest value recorded.
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Every non-empty bucket as (largest value it holds, capped at the max recorded; count), ascending.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        let max = self.max();
        self.buckets
            .iter()
            .enumerate()
            .map(|(b, c)| (bucket_upper(b).min(max), c.load(Ordering::Relaxed)))
            .filter(|&(_, c)| c > 0)
            .collect()
    }

    /// An upper bound of the `q` quantile (0..=1), within 6.25%; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(b).min(self.max());
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_upper_bounds_within_a_quarter() {
        let h = CycleHistogram::default();
        for v in 1..=1000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 1000);
        assert_eq!(h.max(), 1000);
        let p50 = h.quantile(0.5);
        assert!((500..=625).contains(&p50), "{p50}");
        let p999 = h.quantile(0.999);
        assert!((999..=1000).contains(&p999), "{p999}");
        assert_eq!(h.quantile(1.0), 1000);
        h.record(1_000_000);
        assert_eq!(h.max(), 1_000_000);
    }

    #[test]
    fn every_value_lands_in_a_bucket_that_bounds_it() {
        for v in [0u64, 1, 2, 3, 4, 5, 7, 8, 9, 100, 1023, 1024, 1025, u64::MAX / 3, u64::MAX] {
            let b = bucket_of(v);
            assert!(bucket_upper(b) >= v, "{v}: bucket {b} upper {}", bucket_upper(b));
            if b > 0 {
                assert!(bucket_upper(b - 1) < v, "{v}: previous bucket upper {}", bucket_upper(b - 1));
            }
        }
    }
}
