//! NIC completion timestamps: raw ticks of the HCA's free-running clock, to nanoseconds.
//!
//! A CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` gives each WC the value of a counter that runs at
//! `hca_core_clock` kHz and is `completion_timestamp_mask` wide (both from `ibv_query_device_ex(3)`; mlx5:
//! 48 bits at 156.25 MHz or 1 GHz). The counter wraps, so only differences mean anything, and a long-running
//! reader extends it to 64 bits ([`TickExtender`]). rxe has no such clock (mask 0): [`NicClock::new`] returns
//! `None` and the provider reports no timestamps.
//!
//! Pure arithmetic, no allocation: usable on the hot path ([`TickExtender::extend`] is a subtract and a mask).
#![forbid(unsafe_code)]

/// A NIC clock: its rate and counter width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicClock {
    khz: u64,
    mask: u64,
}

impl NicClock {
    /// A clock of `hca_core_clock_khz` kHz whose counter is `completion_timestamp_mask` (2^w - 1, w >= 1).
    /// `None` when either is 0 or the mask is not a run of low bits: the device has no usable timestamps.
    pub fn new(hca_core_clock_khz: u64, completion_timestamp_mask: u64) -> Option<NicClock> {
        let mask = completion_timestamp_mask;
        if hca_core_clock_khz == 0 || mask == 0 || mask & mask.wrapping_add(1) != 0 {
            return None;
        }
        Some(NicClock { khz: hca_core_clock_khz, mask })
    }

    /// Clock rate in kHz.
    pub fn khz(&self) -> u64 {
        self.khz
    }

    /// The counter mask (2^width - 1).
    pub fn mask(&self) -> u64 {
        self.mask
    }

    /// Converts a tick count (a difference, or an extended 64-bit count) to ns, rounding down; saturates at
    /// `u64::MAX`. One 128-bit division: convert when reporting, not per completion.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        u64::try_from(ticks as u128 * 1_000_000 / self.khz as u128).unwrap_or(u64::MAX)
    }

    /// Ticks from raw counter value `earlier` to `later`, across at most one wrap of the counter.
    #[inline]
    pub fn elapsed_ticks(&self, earlier: u64, later: u64) -> u64 {
        later.wrapping_sub(earlier) & self.mask
    }

    /// Nanoseconds from raw counter value `earlier` to `later`, across at most one wrap.
    #[inline]
    pub fn elapsed_ns(&self, earlier: u64, later: u64) -> u64 {
        self.ticks_to_ns(self.elapsed_ticks(earlier, later))
    }

    /// How long the counter takes to wrap, in ns: a [`TickExtender`] must see a value at least this often.
    pub fn wrap_period_ns(&self) -> u64 {
        self.ticks_to_ns(self.mask).saturating_add(self.ticks_to_ns(1))
    }
}

/// Extends the raw, wrapping counter into a 64-bit monotonic tick count, for a reader that sees values in order
/// and at least once per wrap period.
#[derive(Debug, Clone, Copy)]
pub struct TickExtender {
    clock: NicClock,
    last_raw: u64,
    extended: u64,
    started: bool,
}

impl TickExtender {
    /// A fresh extender; the first value it sees becomes its origin's raw value (extended = raw).
    pub fn new(clock: NicClock) -> TickExtender {
        TickExtender { clock, last_raw: 0, extended: 0, started: false }
    }

    /// The 64-bit tick count for raw counter value `raw` (masked to the counter width).
    #[inline]
    pub fn extend(&mut self, raw: u64) -> u64 {
        let raw = raw & self.clock.mask;
        if self.started {
            self.extended = self.extended.wrapping_add(self.clock.elapsed_ticks(self.last_raw, raw));
        } else {
            self.extended = raw;
            self.started = true;
        }
        self.last_raw = raw;
        self.extended
    }

    /// As [`TickExtender::extend`], converted to ns on the NIC's own time line (arbitrary epoch).
    #[inline]
    pub fn extend_ns(&mut self, raw: u64) -> u64 {
        let ticks = self.extend(raw);
        self.clock.ticks_to_ns(ticks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MASK48: u64 = (1 << 48) - 1;

    #[test]
    fn no_clock_without_rate_or_with_a_bad_mask() {
        assert!(NicClock::new(0, MASK48).is_none());
        assert!(NicClock::new(156_250, 0).is_none(), "rxe reports mask 0");
        assert!(NicClock::new(156_250, 0xff00).is_none(), "mask must be low bits");
        assert!(NicClock::new(156_250, u64::MAX).is_some());
    }

    #[test]
    fn converts_ticks_at_common_hca_clocks() {
        let ghz = NicClock::new(1_000_000, MASK48).unwrap();
        assert_eq!(ghz.ticks_to_ns(1), 1);
        assert_eq!(ghz.ticks_to_ns(123_456_789), 123_456_789);
        // ConnectX-4/5: 156.25 MHz = 6.4 ns per tick
        let cx = NicClock::new(156_250, MASK48).unwrap();
        assert_eq!(cx.ticks_to_ns(5), 32);
        assert_eq!(cx.ticks_to_ns(1), 6);
        assert_eq!(cx.ticks_to_ns(156_250_000), 1_000_000_000);
        assert_eq!(cx.ticks_to_ns(MASK48), (MASK48 as u128 * 1_000_000 / 156_250) as u64);
        // 1 kHz: 1 ms per tick, saturating at u64::MAX
        let slow = NicClock::new(1, u64::MAX).unwrap();
        assert_eq!(slow.ticks_to_ns(3), 3_000_000);
        assert_eq!(slow.ticks_to_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn differences_cross_the_counter_wrap() {
        let cx = NicClock::new(156_250, MASK48).unwrap();
        assert_eq!(cx.elapsed_ticks(MASK48 - 5, 10), 16);
        assert_eq!(cx.elapsed_ns(MASK48 - 4, 0), 32);
        assert_eq!(cx.elapsed_ticks(100, 100), 0);
        // a 32-bit counter
        let narrow = NicClock::new(1_000_000, u32::MAX as u64).unwrap();
        assert_eq!(narrow.elapsed_ticks(u32::MAX as u64, 0), 1);
        assert_eq!(narrow.wrap_period_ns(), 1 << 32);
        assert_eq!(cx.wrap_period_ns(), ((1u128 << 48) * 1_000_000 / 156_250) as u64);
    }

    #[test]
    fn the_extender_keeps_counting_across_several_wraps() {
        let narrow = NicClock::new(1_000_000, 0xffff).unwrap();
        let mut ext = TickExtender::new(narrow);
        assert_eq!(ext.extend(0xfff0), 0xfff0);
        assert_eq!(ext.extend(0x0005), 0x1_0005);
        assert_eq!(ext.extend(0x8000), 0x1_8000);
        assert_eq!(ext.extend(0x7fff), 0x2_7fff, "a smaller raw value is a wrap, not time going back");
        assert_eq!(ext.extend(0x1_0000_0003), 0x3_0003, "bits above the mask are ignored");
        assert_eq!(ext.extend_ns(0x0004), 0x3_0004);
    }

    proptest! {
        #[test]
        fn the_extended_count_is_the_sum_of_steps_shorter_than_a_wrap(
            start in 0u64..(1 << 48), steps in proptest::collection::vec(0u64..(1 << 48), 1..50)
        ) {
            let clock = NicClock::new(156_250, MASK48).unwrap();
            let mut ext = TickExtender::new(clock);
            let mut raw = start;
            let mut want = start;
            prop_assert_eq!(ext.extend(raw), want);
            for step in steps {
                raw = (raw + step) & MASK48;
                want += step;
                prop_assert_eq!(ext.extend(raw), want);
            }
        }
    }
}
