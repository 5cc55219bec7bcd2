//! One-way latency into HDR histograms: post-to-poll and wire-to-poll.
//!
//! **Post-to-poll** ([`Latency`]): the publisher stamps each record with its TSC (`ts_send_ticks`, raw `quanta`
//! counter) as it posts; the subscriber reads the same invariant TSC when it reaps the completion and records the
//! difference, scaled to ns with quanta's calibration. Same host only: two hosts' TSCs are unrelated (NIC
//! completion timestamps are the cross-host clock).
//!
//! **Wire-to-poll** ([`WireLatency`]): a live feed stamps each datagram on receipt (`SO_TIMESTAMPING`, software
//! or hardware; the publisher's `Accept` says which, [`TsRecvClock`]) and the stamp travels in the record as
//! `ts_recv_ns` (ns since the UNIX epoch). The subscriber records `CLOCK_REALTIME` now minus `ts_recv_ns`. Same
//! host, or hosts whose realtime clocks are disciplined together (PTP): the figure carries their offset.
//!
//! **NIC-to-poll** ([`NicLatency`], `clock=nic`): where the device reports completion timestamps (verbs on a NIC
//! with `hca_core_clock`, e.g. mlx5; never Soft-RoCE or shm), the receive completion's NIC timestamp, mapped
//! onto `CLOCK_REALTIME` through pairs of NIC-clock and realtime readings the ring samples about once a second
//! ([`mdfan_fabric::nic_clock::NicRealtime`]: wrap handled, rate measured between pairs), to `CLOCK_REALTIME` at the
//! strategy's poll. It is how long the record's completion waited between the NIC stamping its completion and the
//! strategy reaping it: the host side of the latency, free of the publisher's clock, and comparable across hosts
//! (unlike post-to-poll). Its error is the pair's: the width of the realtime window around the NIC clock read
//! halved. Without timestamps the report says so once
//! ([`crate::report::nic_latency_line`]).
//!
//! The clock on the poll path: [`RealtimeClock`] reads `CLOCK_REALTIME` as an anchor (`std::time::SystemTime`,
//! `clock_gettime` through the vDSO: no syscall with a TSC clocksource) at most once per
//! [`REANCHOR_NS`] (1 ms) and otherwise extends it with the TSC read post-to-poll takes anyway (quanta's
//! calibration), so a record costs no clock read beyond post-to-poll's. Re-anchoring every ms bounds the TSC's
//! drift against an NTP-slewed `CLOCK_REALTIME` to well under a µs (500 ppm, the kernel's slew limit, is
//! 0.5 µs per ms). `cargo bench -p mdfan-bench --bench micro -- wire_clock` compares it with `SystemTime::now()`
//! (measured 2026-11-30 on this 2-core VM, clocksource tsc: `SystemTime::now()` 49 ns, the TSC 15 ns, the anchored
//! clock 14 ns with its own TSC read; in the receiver it shares post-to-poll's read).

use hdrhistogram::Histogram;
use mdfan_fabric::nic_clock::NicRealtime;
pub use mdfan_wire::control::TsRecvClock;

/// Which clock fed a histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// The CPU's time-stamp counter, read through quanta.
    Tsc,
    /// The NIC's completion timestamps, mapped onto `CLOCK_REALTIME` ([`NicLatency`]).
    Nic,
    /// `CLOCK_REALTIME` now against a receive stamp in `ts_recv_ns` taken by this clock (wire-to-poll).
    Realtime(TsRecvClock),
}

impl ClockSource {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ClockSource::Tsc => "tsc",
            ClockSource::Nic => "nic",
            ClockSource::Realtime(TsRecvClock::Software) => "realtime(sw-stamp)",
            ClockSource::Realtime(TsRecvClock::Hardware) => "realtime(hw-stamp)",
            ClockSource::Realtime(TsRecvClock::User) => "realtime(user-stamp)",
            ClockSource::Realtime(TsRecvClock::None) => "realtime(no-stamp)",
        }
    }
}

/// Largest latency the histogram tracks, in ns; larger values are clamped to it (10 s).
pub const MAX_TRACKABLE_NS: u64 = 10_000_000_000;

/// A latency histogram in ns with the clock that feeds it.
pub struct Latency {
    hist: Histogram<u64>,
    clock: quanta::Clock,
    source: ClockSource,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    /// 1 ns .. 10 s at 3 significant digits (~200 KiB, allocated here, never on record).
    pub fn new() -> Latency {
        Latency {
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("static bounds are valid"),
            clock: quanta::Clock::new(),
            source: ClockSource::Tsc,
        }
    }

    /// Records now minus `ts_send_ticks` (the low 32 bits of the publisher's TSC at post: the interval is taken
    /// modulo 2^32 ticks, exact below about 1.4 s at 3 GHz; `wire::record`). A stamp from the future (another
    /// clock; an interval of 2^31 ticks or more) records 1 ns.
    #[inline]
    pub fn record(&mut self, ts_send_ticks: u32) {
        self.record_at(ts_send_ticks, self.clock.raw());
    }

    /// [`Latency::record`] with the TSC already read (`now_ticks`, raw quanta counter), so one read serves
    /// post-to-poll and wire-to-poll.
    #[inline]
    pub fn record_at(&mut self, ts_send_ticks: u32, now_ticks: u64) {
        let ticks = (now_ticks as u32).wrapping_sub(ts_send_ticks);
        let ns = if ticks < 1 << 31 { self.clock.delta_as_nanos(0, u64::from(ticks)) } else { 1 };
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
    }

    /// The TSC now (raw quanta counter), for [`Latency::record_at`].
    #[inline]
    pub fn now_ticks(&self) -> u64 {
        self.clock.raw()
    }

    /// The clock that reads the TSC (calibrated), for a [`WireLatency`] that shares its reads.
    pub fn clock(&self) -> &quanta::Clock {
        &self.clock
    }

    /// The histogram (ns).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The clock that fed it.
    pub fn source(&self) -> ClockSource {
        self.source
    }
}

/// How often [`RealtimeClock`] reads `CLOCK_REALTIME` again, in ns of TSC time (1 ms).
pub const REANCHOR_NS: u64 = 1_000_000;

/// `CLOCK_REALTIME` in ns since the UNIX epoch, read from the TSC between anchors (module docs): an anchor
/// (`SystemTime::now()`, vDSO) at most every [`REANCHOR_NS`], the TSC delta since it otherwise.
pub struct RealtimeClock {
    clock: quanta::Clock,
    anchor_ticks: u64,
    anchor_ns: u64,
    reanchor_ticks: u64,
}

impl RealtimeClock {
    /// Anchors on `clock` (the TSC, calibrated) now.
    pub fn new(clock: quanta::Clock) -> RealtimeClock {
        // ticks per REANCHOR_NS from the calibration: the ns of a large tick count, scaled back
        let probe = 1u64 << 40;
        let probe_ns = clock.delta_as_nanos(0, probe).max(1);
        let reanchor_ticks = ((probe as u128 * REANCHOR_NS as u128) / probe_ns as u128).max(1) as u64;
        let mut c = RealtimeClock { clock, anchor_ticks: 0, anchor_ns: 0, reanchor_ticks };
        c.anchor();
        c
    }

    /// Anchors on `CLOCK_REALTIME` now ([`mdfan_tuning::clock::realtime_anchor`]).
    #[cold]
    fn anchor(&mut self) {
        (self.anchor_ticks, self.anchor_ns) = mdfan_tuning::clock::realtime_anchor(&self.clock);
    }

    /// `CLOCK_REALTIME` at TSC reading `now_ticks` (raw quanta counter, read by the caller), ns since the
    /// UNIX epoch. Re-anchors first when the last anchor is older than [`REANCHOR_NS`].
    #[inline]
    pub fn realtime_ns_at(&mut self, now_ticks: u64) -> u64 {
        if now_ticks.wrapping_sub(self.anchor_ticks) >= self.reanchor_ticks {
            self.anchor();
        }
        if now_ticks >= self.anchor_ticks {
            self.anchor_ns + self.clock.delta_as_nanos(self.anchor_ticks, now_ticks)
        } else {
            self.anchor_ns.saturating_sub(self.clock.delta_as_nanos(now_ticks, self.anchor_ticks))
        }
    }

    /// `CLOCK_REALTIME` now, ns since the UNIX epoch.
    #[inline]
    pub fn realtime_ns(&mut self) -> u64 {
        let now = self.clock.raw();
        self.realtime_ns_at(now)
    }
}

/// Wire-to-poll: `CLOCK_REALTIME` at the poll minus the record's `ts_recv_ns` (its datagram's receive stamp),
/// in ns, into an HDR histogram (1 ns .. [`MAX_TRACKABLE_NS`], 3 significant digits; a stamp from the future,
/// e.g. clocks apart, records 1 ns; past the top, the top). Labelled with the stamp's clock
/// ([`WireLatency::source`]: `realtime(sw-stamp)`, `realtime(hw-stamp)`, `realtime(user-stamp)`).
pub struct WireLatency {
    hist: Histogram<u64>,
    now: RealtimeClock,
    stamp: TsRecvClock,
}

impl WireLatency {
    /// A histogram for receive stamps of clock `stamp`, reading `CLOCK_REALTIME` through `clock` (module docs).
    /// Allocates the histogram (~200 KiB) here, never on record.
    pub fn new(stamp: TsRecvClock, clock: quanta::Clock) -> WireLatency {
        WireLatency {
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("static bounds are valid"),
            now: RealtimeClock::new(clock),
            stamp,
        }
    }

    /// Records realtime at TSC reading `now_ticks` minus `ts_recv_ns` (ns since the UNIX epoch). A record
    /// without a stamp (`ts_recv_ns` 0) is not recorded (the receiver also skips records flagged
    /// `BAD_TS_RECV` or `SNAPSHOT`).
    #[inline]
    pub fn record_at(&mut self, ts_recv_ns: u64, now_ticks: u64) {
        if ts_recv_ns == 0 {
            return;
        }
        let now_ns = self.now.realtime_ns_at(now_ticks);
        let ns = now_ns.saturating_sub(ts_recv_ns);
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
    }

    /// The histogram (ns).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The clock pair that fed it: [`ClockSource::Realtime`] with the stamp's clock.
    pub fn source(&self) -> ClockSource {
        ClockSource::Realtime(self.stamp)
    }

    /// Which clock stamped `ts_recv_ns`.
    pub fn stamp(&self) -> TsRecvClock {
        self.stamp
    }
}

/// NIC-to-poll (module docs): `CLOCK_REALTIME` at the poll minus the receive completion's NIC timestamp mapped
/// onto `CLOCK_REALTIME`, in ns, into an HDR histogram (1 ns .. [`MAX_TRACKABLE_NS`], 3 significant digits; a
/// completion stamped after the poll, i.e. a mapping off by more than the latency, records 1 ns). Labelled
/// [`ClockSource::Nic`] (`clock=nic`). Completions that arrive before the first mapping are counted in
/// [`NicLatency::unaligned`], not recorded.
pub struct NicLatency {
    hist: Histogram<u64>,
    now: RealtimeClock,
    to_realtime: Option<NicRealtime>,
    unaligned: u64,
}

impl NicLatency {
    /// A histogram reading `CLOCK_REALTIME` at the poll through `clock` (the TSC post-to-poll reads; module
    /// docs), mapping NIC ticks with `to_realtime` (`None` until the ring can give one). Allocates the
    /// histogram (~200 KiB) here, never on record.
    pub fn new(clock: quanta::Clock, to_realtime: Option<NicRealtime>) -> NicLatency {
        NicLatency {
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("static bounds are valid"),
            now: RealtimeClock::new(clock),
            to_realtime,
            unaligned: 0,
        }
    }

    /// Replaces the NIC-to-realtime mapping (a fresh pair from the ring); `None` keeps the current one.
    pub fn set_to_realtime(&mut self, to_realtime: Option<NicRealtime>) {
        if to_realtime.is_some() {
            self.to_realtime = to_realtime;
        }
    }

    /// Records realtime at TSC reading `now_ticks` (raw quanta counter, read by the caller) minus the realtime
    /// of raw NIC completion timestamp `nic_ticks`.
    #[inline]
    pub fn record_at(&mut self, nic_ticks: u64, now_ticks: u64) {
        let poll_realtime_ns = self.now.realtime_ns_at(now_ticks);
        self.record_realtime(nic_ticks, poll_realtime_ns);
    }

    /// Records `poll_realtime_ns` (`CLOCK_REALTIME` at the poll, ns since the UNIX epoch) minus the realtime of
    /// raw NIC completion timestamp `nic_ticks`: [`NicLatency::record_at`] once the poll's time is known.
    #[inline]
    pub fn record_realtime(&mut self, nic_ticks: u64, poll_realtime_ns: u64) {
        let Some(map) = self.to_realtime else {
            self.unaligned += 1;
            return;
        };
        let ns = poll_realtime_ns.saturating_sub(map.realtime_ns(nic_ticks));
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
    }

    /// The histogram (ns).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Completions with a NIC timestamp that came before any NIC-to-realtime mapping (not recorded).
    pub fn unaligned(&self) -> u64 {
        self.unaligned
    }

    /// Whether a NIC-to-realtime mapping is in place.
    pub fn is_aligned(&self) -> bool {
        self.to_realtime.is_some()
    }

    /// [`ClockSource::Nic`].
    pub fn source(&self) -> ClockSource {
        ClockSource::Nic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn post_to_poll_reads_the_32_bit_stamp_across_its_wrap() {
        let mut l = Latency::new();
        // Posted 100,000 ticks before a poll that comes after the low 32 bits wrapped.
        let now = (7 << 32) + 40_000;
        l.record_at((now - 100_000) as u32, now);
        let want = l.clock.delta_as_nanos(0, 100_000);
        assert!(l.hist.equivalent(l.hist.max(), want), "{} ns recorded, {want} ns wanted", l.hist.max());
        // A stamp from the future (another clock) is 1 ns, not 2^32 ticks.
        l.hist.reset();
        l.record_at((now as u32).wrapping_add(10), now);
        assert_eq!((l.hist.len(), l.hist.max()), (1, 1));
    }

    #[test]
    fn the_anchored_clock_reads_realtime() {
        let mut c = RealtimeClock::new(quanta::Clock::new());
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        let t = c.realtime_ns();
        std::thread::sleep(std::time::Duration::from_millis(3)); // past REANCHOR_NS: the next read re-anchors
        let t2 = c.realtime_ns();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        // within the anchor's own error (the TSC reads around SystemTime::now, a few µs under a busy host)
        assert!(t + 1_000_000 > before && t < after, "{before} {t} {after}");
        assert!(t2 >= t + 2_000_000 && t2 < after + 1_000_000, "{t} {t2} {after}");
    }

    #[test]
    fn wire_latency_skips_unstamped_records_and_is_labelled_with_its_clock() {
        let clock = quanta::Clock::new();
        let mut w = WireLatency::new(TsRecvClock::Software, clock.clone());
        w.record_at(0, clock.raw());
        assert_eq!(w.histogram().len(), 0);
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 - 5_000_000;
        w.record_at(stamp, clock.raw());
        assert_eq!(w.histogram().len(), 1);
        let h = w.histogram();
        assert!(h.highest_equivalent(h.min()) >= 5_000_000, "{}", h.min()); // 5 ms, to the histogram's precision
        w.record_at(u64::MAX / 2, clock.raw()); // from the future
        assert_eq!(w.histogram().min(), 1);
        assert_eq!(w.source().as_str(), "realtime(sw-stamp)");
        assert_eq!(ClockSource::Realtime(TsRecvClock::Hardware).as_str(), "realtime(hw-stamp)");
    }
}

#[cfg(test)]
mod nic_tests {
    use super::*;
    use mdfan_fabric::nic_clock::{NicClock, RtPair};

    /// 2025-12-01 00:00:00 UTC in ns since the UNIX epoch.
    const BASE_NS: u64 = 1_764_547_200_000_000_000;

    #[test]
    fn nic_to_poll_records_recorded_completions_exactly_and_counts_unaligned_ones() {
        let clock = NicClock::new(156_250, (1 << 48) - 1).unwrap(); // mlx5: 6.4 ns per tick, 48 bits
        let mut l = NicLatency::new(quanta::Clock::new(), None);
        l.record_realtime(1_000, BASE_NS);
        assert_eq!((l.unaligned(), l.histogram().len(), l.is_aligned()), (1, 0, false));
        let pair = RtPair { nic_ticks: (1 << 48) - 100, realtime_ns: BASE_NS };
        l.set_to_realtime(Some(mdfan_fabric::nic_clock::NicRealtime::from_pair(clock, pair)));
        l.set_to_realtime(None); // keeps it
                                 // completions 100 ticks (640 ns) after the pair, just past the counter's wrap, polled 1,000 ns after it
        l.record_realtime(0, BASE_NS + 1_000);
        // 1,000 ticks before the pair (6,400 ns), polled at the pair
        l.record_realtime((1 << 48) - 1_100, BASE_NS);
        // stamped after the poll: 1 ns
        l.record_realtime(10, BASE_NS);
        let h = l.histogram();
        assert_eq!((h.len(), l.unaligned()), (3, 1));
        assert_eq!(h.count_at(360), 1);
        assert_eq!(h.count_at(6_400), 1);
        assert_eq!(h.min(), 1);
        assert_eq!(l.source().as_str(), "nic");
    }
}
