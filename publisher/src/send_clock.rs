//! Post-to-send-completion, `clock=nic`: how long the NIC took from the hot loop's post of a signalled WRITE to
//! its send completion (the subscriber's NIC ACKed it), per session.
//!
//! Where a session's send CQ carries NIC completion timestamps (verbs on a device with `hca_core_clock`, e.g.
//! mlx5; never shm or Soft-RoCE), the ring pairs each signalled WR's post TSC with its completion's NIC ticks
//! ([`mdfan_fabric::SendStamp`]). Both go onto `CLOCK_REALTIME`: the NIC ticks through
//! [`mdfan_fabric::nic_clock::NicRealtime`] (pairs of NIC-clock and realtime readings, wrap handled, rate measured
//! between pairs), the TSC through [`TscRealtime`] (one realtime read pinned between two TSC reads, at quanta's
//! calibrated rate). Both mappings are taken by the conductor, off the hot path, when a stamped session is
//! admitted and every [`SEND_CLOCK_REALIGN`] after, and reach the hot loop as one [`SendClockMap`]
//! (`agent::Command::SendClock`). The hot loop then records, per stamp, `nic_realtime(completion) -
//! tsc_realtime(post)` in ns into the session's [`SendCompletionCounters`]: two multiplies and a histogram
//! bucket, no syscall, no allocation. Stamps taken before the first mapping are counted (`unaligned`), not
//! recorded.
//!
//! The figure's error is the two mappings': each pair's realtime window halved (about a µs on a quiet host) plus
//! the TSC's drift against an NTP-slewed realtime since the last mapping (at most 500 ppm, 0.5 ms per second
//! in the worst case; typically a few ppm).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mdfan_fabric::nic_clock::NicRealtime;
use mdfan_fabric::send_stamps::extend_tsc;
use mdfan_fabric::SendStamp;

use crate::cycles::CycleHistogram;

/// How often the conductor maps both clocks onto `CLOCK_REALTIME` again while a stamped session exists (1 s,
/// as the subscriber's `NIC_REALIGN`).
pub const SEND_CLOCK_REALIGN: Duration = Duration::from_secs(1);

/// Fraction bits of [`TscRealtime`]'s fixed-point ns-per-tick rate.
const RATE_FRACTION_BITS: u32 = 32;

/// Maps raw TSC readings (quanta's raw counter) onto `CLOCK_REALTIME`, ns since the UNIX epoch: `base_ns +
/// (ticks - base_ticks) * rate`, the difference read as signed, the rate a 32.32 fixed-point ns per tick,
/// rounded to the nearest ns. 24 bytes, `Copy`; converting is one 64x64-bit multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscRealtime {
    base_ticks: u64,
    base_ns: u64,
    ns_per_tick_q32: u64,
}

impl TscRealtime {
    /// `CLOCK_REALTIME` `base_ns` at TSC `base_ticks`, `ns_per_tick_q32` ns per tick times 2^32.
    pub fn new(base_ticks: u64, base_ns: u64, ns_per_tick_q32: u64) -> TscRealtime {
        TscRealtime { base_ticks, base_ns, ns_per_tick_q32 }
    }

    /// Samples now: a realtime anchor ([`mdfan_tuning::clock::realtime_anchor`]: `CLOCK_REALTIME` pinned to the
    /// midpoint of two TSC reads, the narrowest of 3 tries), the rate from `clock`'s calibration (ns of 2^32
    /// ticks). Control path.
    pub fn sample(clock: &quanta::Clock) -> TscRealtime {
        let (ticks, ns) = mdfan_tuning::clock::realtime_anchor(clock);
        TscRealtime::new(ticks, ns, clock.delta_as_nanos(0, 1 << RATE_FRACTION_BITS))
    }

    /// `CLOCK_REALTIME` at TSC reading `ticks`, ns since the UNIX epoch; saturates at 0 and `u64::MAX`.
    #[inline]
    pub fn realtime_ns(&self, ticks: u64) -> u64 {
        let diff = ticks.wrapping_sub(self.base_ticks) as i64;
        let half = 1u128 << (RATE_FRACTION_BITS - 1);
        let ns = ((diff.unsigned_abs() as u128 * self.ns_per_tick_q32 as u128 + half) >> RATE_FRACTION_BITS)
            .min(u64::MAX as u128) as u64;
        if diff >= 0 {
            self.base_ns.saturating_add(ns)
        } else {
            self.base_ns.saturating_sub(ns)
        }
    }
}

/// Both clocks of a [`SendStamp`] onto `CLOCK_REALTIME`: what the conductor sends the hot loop. 56 bytes, `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendClockMap {
    /// The device's NIC clock (its send completions' timestamps).
    pub nic: NicRealtime,
    /// The hot loop's TSC (the post times).
    pub tsc: TscRealtime,
}

impl SendClockMap {
    /// Post-to-send-completion of `stamp` in ns: the completion's realtime minus the post's. 0 for a
    /// completion that maps before its post (the mappings' error is larger than the latency).
    #[inline]
    pub fn post_to_completion_ns(&self, stamp: SendStamp) -> u64 {
        self.nic.realtime_ns(stamp.nic_ticks).saturating_sub(self.tsc.realtime_ns(stamp.post_tsc))
    }
}

/// One session's post-to-send-completion figures, written by the hot loop (single writer, Relaxed) and read by
/// the conductor: a histogram in ns (log-linear, [`CycleHistogram`]: an upper bound within 6.25%, the max
/// exact) and what was not recorded.
#[derive(Debug, Default)]
pub struct SendCompletionCounters {
    /// Post-to-send-completion, ns.
    pub ns: CycleHistogram,
    /// Stamped completions reaped before the conductor's first [`SendClockMap`] (not recorded).
    pub unaligned: AtomicU64,
    /// Stamps the ring could not hold between two takes ([`mdfan_fabric::RemoteRing::send_stamps_lost`]).
    pub lost: AtomicU64,
}

impl SendCompletionCounters {
    /// Records `stamps` with `map`, or counts them as unaligned without one. `last_post_tsc` is the TSC of the
    /// session's latest post, at or after every stamp's (a stamp holds the low 32 bits of its post's TSC:
    /// [`mdfan_fabric::send_stamps::extend_tsc`]).
    #[inline]
    pub fn record(&self, stamps: &[SendStamp], map: Option<&SendClockMap>, last_post_tsc: u64) {
        match map {
            Some(map) => {
                for &stamp in stamps {
                    let post_tsc = extend_tsc(stamp.post_tsc as u32, last_post_tsc);
                    self.ns.record(map.post_to_completion_ns(SendStamp { post_tsc, ..stamp }));
                }
            }
            None => {
                let u = &self.unaligned;
                u.store(u.load(Ordering::Relaxed) + stamps.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_fabric::nic_clock::{NicClock, RtPair};
    use mdfan_fabric::send_stamps::SendStampLog;
    use std::time::{SystemTime, UNIX_EPOCH};

    const MASK48: u64 = (1 << 48) - 1;
    /// 2025-12-01 00:00:00 UTC in ns since the UNIX epoch.
    const BASE_NS: u64 = 1_764_547_200_000_000_000;
    /// A 2.5 GHz TSC: 0.4 ns per tick, times 2^32 (exact: 0.4 * 2^32 = 1,717,986,918.4, rounded down).
    const TSC_0_4_NS_Q32: u64 = 1_717_986_918;

    #[test]
    fn the_tsc_maps_onto_realtime_either_side_of_its_base() {
        let tsc = TscRealtime::new(1_000_000, BASE_NS, TSC_0_4_NS_Q32);
        assert_eq!(tsc.realtime_ns(1_000_000), BASE_NS);
        assert_eq!(tsc.realtime_ns(1_002_500), BASE_NS + 1_000);
        assert_eq!(tsc.realtime_ns(997_500), BASE_NS - 1_000, "a post before the mapping");
        assert_eq!(tsc.realtime_ns(1_000_003), BASE_NS + 1, "1.2 ns rounds to 1");
        assert_eq!(tsc.realtime_ns(1_000_004), BASE_NS + 2, "1.6 ns rounds to 2");
        // across the u64 wrap of the counter
        let wrap = TscRealtime::new(u64::MAX - 4, BASE_NS, 1 << 32);
        assert_eq!(wrap.realtime_ns(5), BASE_NS + 10);
    }

    #[test]
    fn the_sampled_mapping_uses_the_calibrated_rate() {
        let (clock, mock) = quanta::Clock::mock();
        mock.increment(5_000);
        let tsc = TscRealtime::sample(&clock);
        // the mock counts ns: 1 ns per tick, and its reads do not move, so the base is the mock's value
        assert_eq!(tsc.ns_per_tick_q32, 1 << 32);
        assert_eq!(tsc.base_ticks, clock.raw());
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(tsc.base_ns <= now && tsc.base_ns + 60_000_000_000 > now, "{} {now}", tsc.base_ns);
    }

    /// The whole path with recorded mlx5 values: post TSCs, the two mappings, raw 48-bit completion timestamps
    /// across the counter's wrap, through the ring's log, into the session's histogram.
    #[test]
    fn recorded_send_completions_land_in_the_histogram_exactly() {
        let nic = NicClock::new(156_250, MASK48).unwrap(); // ConnectX-5: 6.4 ns per tick
        let mut log = SendStampLog::new(nic, 256);
        // the hot loop posts signalled WRs 31 and 63 (signal_every 32) at these TSCs (2.5 GHz), on both sides of
        // a wrap of the TSC's low 32 bits, which is all the record (and so the ring's log) keeps
        const K: u64 = (1 << 32) - 10_040_000;
        let (post_31, post_63) = (10_000_000 + K, 10_080_000 + K); // the second 32 µs after the first
        log.posted(31, 31, u64::from(post_31 as u32));
        log.posted(63, 63, u64::from(post_63 as u32));
        // the NIC completes them just before and just after its 48-bit counter wraps
        log.completed(31, MASK48 - 99); // 100 ticks before the wrap
        log.completed(63, 5_250); // 5,350 ticks (34,240 ns) later
        let stamps: Vec<SendStamp> = log.take().to_vec();
        assert_eq!(stamps[1].nic_ticks, MASK48 + 5_251, "extended across the wrap");

        let counters = SendCompletionCounters::default();
        counters.record(&stamps[..1], None, post_63); // before any mapping: counted, not recorded
        assert_eq!((counters.unaligned.load(Ordering::Relaxed), counters.ns.count()), (1, 0));

        // the conductor's mappings: the NIC pair at the 200th tick before the wrap, realtime BASE_NS; the TSC
        // base taken between the two posts, 40,000 ticks (16,000 ns) after post 31, at realtime BASE_NS + 15,400
        // (so post 31 is at BASE_NS - 600, before the base, and post 63 at BASE_NS + 31,400, after it)
        let map = SendClockMap {
            nic: NicRealtime::from_pair(nic, RtPair { nic_ticks: MASK48 - 199, realtime_ns: BASE_NS }),
            tsc: TscRealtime::new(10_040_000 + K, BASE_NS + 15_400, TSC_0_4_NS_Q32),
        };
        assert_eq!(map.tsc.realtime_ns(post_31), BASE_NS - 600);
        assert_eq!(map.tsc.realtime_ns(post_63), BASE_NS + 31_400);
        // WR 31: completed 100 ticks (640 ns) after the pair: 640 + 600 = 1,240 ns after its post
        let whole = |s: SendStamp| SendStamp { post_tsc: extend_tsc(s.post_tsc as u32, post_63), ..s };
        assert_eq!((whole(stamps[0]).post_tsc, whole(stamps[1]).post_tsc), (post_31, post_63));
        assert_eq!(map.post_to_completion_ns(whole(stamps[0])), 1_240);
        // WR 63: posted 32,000 ns after WR 31, completed 5,450 ticks (34,880 ns) after the pair: 3,480 ns
        assert_eq!(map.post_to_completion_ns(whole(stamps[1])), 3_480);
        counters.record(&stamps, Some(&map), post_63);
        assert_eq!(counters.ns.count(), 2);
        assert_eq!(counters.ns.max(), 3_480);
        // 1,240 is in [1,216, 1,279], 3,480 in [3,456, 3,583] (16 buckets per power of two)
        assert_eq!(counters.ns.buckets(), vec![(1_279, 1), (3_480, 1)]);
        assert_eq!(counters.ns.quantile(0.5), 1_279);
        assert_eq!(counters.unaligned.load(Ordering::Relaxed), 1);

        // a completion that maps before its post (mapping error larger than the latency) records 0
        let early = SendStamp { post_tsc: post_63, nic_ticks: MASK48 - 199 };
        assert_eq!(map.post_to_completion_ns(early), 0);
    }
}
