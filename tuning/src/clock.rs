//! The TSC and `CLOCK_REALTIME`: one anchor pairing a TSC reading with the realtime clock, the base of every
//! mapping of TSC stamps onto realtime (the subscriber's wire-to-poll clock, the publisher's post times for
//! post-to-send-completion).

use std::time::{SystemTime, UNIX_EPOCH};

/// Reads `CLOCK_REALTIME` (`SystemTime::now()`, vDSO) between two reads of `clock`'s raw TSC and pins it to their
/// midpoint; of up to 3 tries, the one with the narrowest window (a thread descheduled between the reads would
/// pin it far off), stopping at the first under 1 µs. Returns (raw TSC ticks, ns since the UNIX epoch).
/// Control path: three vDSO calls at most.
#[cold]
pub fn realtime_anchor(clock: &quanta::Clock) -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..3 {
        let before = clock.raw();
        let ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let after = clock.raw();
        let width = after.saturating_sub(before);
        if width < best.0 {
            best = (width, before + width / 2, ns);
        }
        if clock.delta_as_nanos(0, width) < 1_000 {
            break;
        }
    }
    (best.1, best.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_anchor_pins_realtime_to_the_tsc_reading_between_its_reads() {
        let (clock, mock) = quanta::Clock::mock();
        mock.increment(5_000);
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        let (ticks, ns) = realtime_anchor(&clock);
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        // the mock does not move between reads: the window is empty and its midpoint the mock's value
        assert_eq!(ticks, clock.raw());
        assert!((before..=after).contains(&ns), "{before} <= {ns} <= {after}");
    }
}
