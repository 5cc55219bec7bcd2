//! NIC completion timestamps: raw ticks of the HCA's free-running clock, to nanoseconds, and onto
//! `CLOCK_REALTIME`.
//!
//! A CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` gives each WC the value of a counter that runs at
//! `hca_core_clock` kHz and is `completion_timestamp_mask` wide (both from `ibv_query_device_ex(3)`; mlx5:
//! 48 bits at 156.25 MHz or 1 GHz). The counter wraps, so only differences mean anything, and a long-running
//! reader extends it to 64 bits ([`TickExtender`]). rxe has no such clock (mask 0): [`NicClock::new`] returns
//! `None` and the provider reports no timestamps.
//!
//! [`NicRealtime`] maps a raw counter value onto `CLOCK_REALTIME` (ns since the UNIX epoch) from paired samples
//! of both clocks ([`RtPair`]: `ibv_query_rt_values_ex(3)` read between two `clock_gettime(CLOCK_REALTIME)`, or a
//! PHC's `PTP_SYS_OFFSET`): one pair and the nominal `hca_core_clock` rate, or two pairs and the rate measured
//! between them (a NIC crystal is tens of ppm off nominal: 50 ppm is 50 µs per second away from the pair).
//!
//! Pure arithmetic, no allocation, no I/O: usable on the hot path ([`TickExtender::extend`] is a subtract and a
//! mask; [`NicRealtime::realtime_ns`] a subtract, a mask and one 64x64-bit multiply).
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

/// One reading of the NIC clock and of `CLOCK_REALTIME` taken at the same moment (as near as the reader could):
/// the verbs provider takes `ibv_query_rt_values_ex(3)`'s raw clock between two `clock_gettime(CLOCK_REALTIME)`
/// and pins it to their midpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtPair {
    /// Raw NIC counter value (ticks of `hca_core_clock`; bits above the counter's mask are ignored).
    pub nic_ticks: u64,
    /// `CLOCK_REALTIME` at that moment, ns since the UNIX epoch.
    pub realtime_ns: u64,
}

/// Fraction bits of [`NicRealtime`]'s fixed-point ns-per-tick rate.
const RATE_FRACTION_BITS: u32 = 32;

/// Maps raw NIC counter values onto `CLOCK_REALTIME`, ns since the UNIX epoch: `base_ns + (raw - base_ticks) *
/// rate`, the tick difference taken modulo the counter width and read as signed (so values up to half a wrap
/// period either side of the base convert, across the wrap), the rate a 32.32 fixed-point ns per tick.
///
/// 24 bytes, `Copy`; building one divides, converting does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicRealtime {
    mask: u64,
    base_ticks: u64,
    base_ns: u64,
    /// ns per tick, times 2^32.
    ns_per_tick_q32: u64,
}

impl NicRealtime {
    /// From one pair and `clock`'s nominal rate (`hca_core_clock`).
    pub fn from_pair(clock: NicClock, pair: RtPair) -> NicRealtime {
        let ns_per_tick_q32 = ((1_000_000u128 << RATE_FRACTION_BITS) / clock.khz() as u128).min(u64::MAX as u128);
        NicRealtime {
            mask: clock.mask(),
            base_ticks: pair.nic_ticks & clock.mask(),
            base_ns: pair.realtime_ns,
            ns_per_tick_q32: ns_per_tick_q32 as u64,
        }
    }

    /// From two pairs, `earlier` then `later`: based on `later`, at the rate measured between them. Falls back to
    /// [`NicRealtime::from_pair`]`(later)` when the pairs cannot give a rate: no ticks between them, realtime
    /// not moving forward (a step of the clock), or a rate more than 1% off the nominal one (a bad pair, or more
    /// than one wrap between them).
    pub fn from_pairs(clock: NicClock, earlier: RtPair, later: RtPair) -> NicRealtime {
        let nominal = NicRealtime::from_pair(clock, later);
        let ticks = clock.elapsed_ticks(earlier.nic_ticks & clock.mask(), later.nic_ticks & clock.mask());
        let Some(ns) = later.realtime_ns.checked_sub(earlier.realtime_ns) else { return nominal };
        if ticks == 0 || ns == 0 {
            return nominal;
        }
        let rate = ((ns as u128) << RATE_FRACTION_BITS) / ticks as u128;
        let nominal_rate = nominal.ns_per_tick_q32 as u128;
        if rate.abs_diff(nominal_rate) * 100 > nominal_rate {
            return nominal;
        }
        NicRealtime { ns_per_tick_q32: rate as u64, ..nominal }
    }

    /// The rate in use, ns per tick times 2^32.
    pub fn ns_per_tick_q32(&self) -> u64 {
        self.ns_per_tick_q32
    }

    /// `CLOCK_REALTIME` (ns since the UNIX epoch) at raw counter value `raw_ticks`, rounded to the nearest ns;
    /// saturates at 0 and `u64::MAX`. Exact within half a wrap period of the base pair (e.g. 48 bits at 1 GHz:
    /// 39 hours either side); beyond that the value aliases by a whole wrap.
    #[inline]
    pub fn realtime_ns(&self, raw_ticks: u64) -> u64 {
        let ahead = raw_ticks.wrapping_sub(self.base_ticks) & self.mask;
        let (ticks, forward) = if ahead <= self.mask / 2 { (ahead, true) } else { (self.mask - ahead + 1, false) };
        let half = 1u128 << (RATE_FRACTION_BITS - 1);
        let ns = ((ticks as u128 * self.ns_per_tick_q32 as u128 + half) >> RATE_FRACTION_BITS).min(u64::MAX as u128);
        if forward {
            self.base_ns.saturating_add(ns as u64)
        } else {
            self.base_ns.saturating_sub(ns as u64)
        }
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

    /// 2025-12-01 00:00:00 UTC, ns since the UNIX epoch: a realistic realtime base.
    const REALTIME_BASE_NS: u64 = 1_764_547_200_000_000_000;

    #[test]
    fn one_pair_maps_recorded_completion_timestamps_onto_realtime() {
        // mlx5 ConnectX-5: 156.25 MHz (6.4 ns per tick), 48-bit counter; values as a CQ would report them
        let cx = NicClock::new(156_250, MASK48).unwrap();
        let pair = RtPair { nic_ticks: 0x0000_1234_5678_9abc, realtime_ns: REALTIME_BASE_NS };
        let rt = NicRealtime::from_pair(cx, pair);
        assert_eq!(rt.realtime_ns(0x0000_1234_5678_9abc), REALTIME_BASE_NS);
        assert_eq!(rt.realtime_ns(0x0000_1234_5678_9abc + 5), REALTIME_BASE_NS + 32);
        assert_eq!(rt.realtime_ns(0x0000_1234_5678_9abc + 156_250_000), REALTIME_BASE_NS + 1_000_000_000);
        assert_eq!(rt.realtime_ns(0x0000_1234_5678_9abc - 5), REALTIME_BASE_NS - 32, "a completion before the pair");
        assert_eq!(rt.realtime_ns(0xffff_1234_5678_9abc + 5), REALTIME_BASE_NS + 32, "bits above the mask ignored");
        // 1 GHz: 1 ns per tick
        let ghz = NicClock::new(1_000_000, MASK48).unwrap();
        let rt = NicRealtime::from_pair(ghz, RtPair { nic_ticks: 1_000, realtime_ns: REALTIME_BASE_NS });
        assert_eq!(rt.realtime_ns(1_000 + 4_321), REALTIME_BASE_NS + 4_321);
        assert_eq!(rt.realtime_ns(999), REALTIME_BASE_NS - 1);
    }

    #[test]
    fn conversion_crosses_the_counter_wrap_both_ways() {
        let cx = NicClock::new(156_250, MASK48).unwrap();
        // the pair just before the 48-bit counter wraps; the completion 16 ticks later, just after
        let rt = NicRealtime::from_pair(cx, RtPair { nic_ticks: MASK48 - 10, realtime_ns: REALTIME_BASE_NS });
        assert_eq!(rt.realtime_ns(5), REALTIME_BASE_NS + 102, "16 ticks of 6.4 ns = 102.4 ns");
        // the pair just after the wrap; the completion 16 ticks before, just before it
        let rt = NicRealtime::from_pair(cx, RtPair { nic_ticks: 5, realtime_ns: REALTIME_BASE_NS });
        assert_eq!(rt.realtime_ns(MASK48 - 10), REALTIME_BASE_NS - 102);
        // a 64-bit counter wraps too
        let wide = NicClock::new(1_000_000, u64::MAX).unwrap();
        let rt = NicRealtime::from_pair(wide, RtPair { nic_ticks: u64::MAX - 1, realtime_ns: REALTIME_BASE_NS });
        assert_eq!(rt.realtime_ns(3), REALTIME_BASE_NS + 5);
        assert_eq!(rt.realtime_ns(u64::MAX - 3), REALTIME_BASE_NS - 2);
    }

    #[test]
    fn two_pairs_measure_the_rate() {
        let cx = NicClock::new(156_250, MASK48).unwrap();
        // the NIC's crystal runs 50 ppm slow: 156,250,000 ticks (1 s nominal) took 1.00005 s of realtime
        let earlier = RtPair { nic_ticks: 7_000, realtime_ns: REALTIME_BASE_NS };
        let later = RtPair { nic_ticks: 7_000 + 156_250_000, realtime_ns: REALTIME_BASE_NS + 1_000_050_000 };
        let rt = NicRealtime::from_pairs(cx, earlier, later);
        assert_eq!(rt.realtime_ns(7_000 + 312_500_000), REALTIME_BASE_NS + 2_000_100_000);
        assert_eq!(rt.realtime_ns(7_000 + 156_250_000), REALTIME_BASE_NS + 1_000_050_000, "based on the later pair");
        assert_eq!(rt.realtime_ns(7_000), REALTIME_BASE_NS, "and back to the earlier one");
        // the nominal rate would put the last one 100 µs early
        let nominal = NicRealtime::from_pair(cx, later);
        assert_eq!(nominal.realtime_ns(7_000 + 312_500_000), REALTIME_BASE_NS + 2_000_050_000);

        // two pairs either side of the wrap, at 1 GHz running 10 ppm fast
        let ghz = NicClock::new(1_000_000, MASK48).unwrap();
        let earlier = RtPair { nic_ticks: MASK48 - 499_999, realtime_ns: REALTIME_BASE_NS };
        let later = RtPair { nic_ticks: 1_000_010_000 - 500_000, realtime_ns: REALTIME_BASE_NS + 1_000_000_000 };
        let rt = NicRealtime::from_pairs(ghz, earlier, later);
        assert_eq!(rt.realtime_ns(later.nic_ticks + 1_000_010_000), REALTIME_BASE_NS + 2_000_000_000);
    }

    #[test]
    fn pairs_that_give_no_rate_fall_back_to_the_nominal_one() {
        let cx = NicClock::new(156_250, MASK48).unwrap();
        let later = RtPair { nic_ticks: 1_000, realtime_ns: REALTIME_BASE_NS };
        let nominal = NicRealtime::from_pair(cx, later);
        let same_ticks = RtPair { nic_ticks: 1_000, realtime_ns: REALTIME_BASE_NS - 5 };
        assert_eq!(NicRealtime::from_pairs(cx, same_ticks, later), nominal);
        let realtime_stepped_back = RtPair { nic_ticks: 0, realtime_ns: REALTIME_BASE_NS + 1 };
        assert_eq!(NicRealtime::from_pairs(cx, realtime_stepped_back, later), nominal);
        let rate_2_percent_off = RtPair { nic_ticks: 0, realtime_ns: REALTIME_BASE_NS - 6_528 };
        assert_eq!(NicRealtime::from_pairs(cx, rate_2_percent_off, later), nominal);
        assert_eq!(nominal.ns_per_tick_q32(), 27_487_790_694, "6.4 ns x 2^32, rounded down");
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
