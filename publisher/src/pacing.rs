//! Pacing a replay: each record's send time from the capture's ts_recv, computed as the records come, and the
//! TSC rate the hot loop waits in.

use std::time::Duration;

use crate::config::Pace;

/// TSC ticks per millisecond, measured against quanta's calibrated conversion.
pub(crate) fn ticks_per_ms(clock: &quanta::Clock) -> u64 {
    let t0 = clock.raw();
    std::thread::sleep(Duration::from_millis(5));
    let t1 = clock.raw();
    let ns = clock.delta_as_nanos(t0, t1).max(1);
    ((t1.wrapping_sub(t0)) as u128 * 1_000_000 / ns as u128).max(1) as u64
}

/// Per-record send times for a paced replay, one record at a time (the feed is streamed, so there is no
/// schedule to build ahead): ns after the first record, from ts_recv deltas shortened to `max_gap_ms` and
/// divided by the speed-up factor. Allocation-free; a few float operations per record.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// `None`: pace `max`, nothing waits.
    factor: Option<f64>,
    max_gap_ns: u64,
    /// ts_recv of the latest record so far (`None` before the first).
    prev_ts_recv: Option<u64>,
    /// ns after the first record at which the last record given to [`Pacer::due_ns`] may be sent.
    at_ns: f64,
    /// The position `at_ns` belongs to (`u64::MAX`: none yet).
    at_pos: u64,
}

impl Pacer {
    /// A pacer for `pace`, shortening idle gaps to `max_gap_ms`.
    pub fn new(pace: Pace, max_gap_ms: u64) -> Pacer {
        let factor = match pace {
            Pace::Max => None,
            Pace::Realtime => Some(1.0),
            Pace::Factor(f) => Some(f),
        };
        Pacer {
            factor,
            max_gap_ns: max_gap_ms.saturating_mul(1_000_000),
            prev_ts_recv: None,
            at_ns: 0.0,
            at_pos: u64::MAX,
        }
    }

    /// Whether records wait for their time (not pace `max`).
    pub fn is_paced(&self) -> bool {
        self.factor.is_some()
    }

    /// When record `pos` (with `ts_recv_ns`) may be sent, in ns after the first record; `None` for pace `max`.
    /// Call it for positions in order; asking again for the same position gives the same answer.
    #[inline]
    pub fn due_ns(&mut self, pos: u64, ts_recv_ns: u64) -> Option<u64> {
        let factor = self.factor?;
        if self.at_pos != pos {
            let prev = self.prev_ts_recv.unwrap_or(ts_recv_ns);
            let gap = ts_recv_ns.saturating_sub(prev).min(self.max_gap_ns);
            self.prev_ts_recv = Some(ts_recv_ns.max(prev));
            self.at_ns += gap as f64 / factor;
            self.at_pos = pos;
        }
        Some(self.at_ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_divided_by_the_factor_and_shortened_to_the_max_gap() {
        let mut p = Pacer::new(Pace::Factor(10.0), 1);
        let ts = [1_000_000_000u64, 1_000_500_000, 1_000_500_000, 1_900_000_000, 1_800_000_000, 1_900_000_100];
        let due: Vec<u64> = ts.iter().enumerate().map(|(i, t)| p.due_ns(i as u64, *t).unwrap()).collect();
        // 0.5 ms / 10; 0; a 899.5 ms gap shortened to 1 ms, / 10; ts_recv going back adds nothing; 100 ns / 10
        assert_eq!(due, [0, 50_000, 50_000, 150_000, 150_000, 150_010]);
        assert_eq!(p.due_ns(5, 1_900_000_100), Some(150_010), "the same position, the same answer");
        assert_eq!(Pacer::new(Pace::Max, 1000).due_ns(0, 5), None);
    }
}
