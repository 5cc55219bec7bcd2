//! One-way latency, publisher post to subscriber poll, into an HDR histogram.
//!
//! The publisher stamps each record with its TSC (`ts_send_ticks`, raw `quanta` counter) as it posts; the
//! subscriber reads the same invariant TSC when it reaps the completion and records the difference, scaled to
//! ns with quanta's calibration. Same host only: two hosts' TSCs are unrelated (NIC completion timestamps are
//! the cross-host clock).

use hdrhistogram::Histogram;

/// Which clock fed a histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// The CPU's time-stamp counter, read through quanta.
    Tsc,
    /// The NIC's completion timestamps.
    Nic,
}

impl ClockSource {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ClockSource::Tsc => "tsc",
            ClockSource::Nic => "nic",
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

    /// Records now minus `ts_send_ticks`. A stamp from the future (another clock) records 0 ns... as 1 ns.
    #[inline]
    pub fn record(&mut self, ts_send_ticks: u64) {
        let now = self.clock.raw();
        let ns = if now > ts_send_ticks { self.clock.delta_as_nanos(ts_send_ticks, now) } else { 1 };
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKABLE_NS));
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
