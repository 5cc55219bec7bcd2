//! What else the host did during a run (issue 25, item 5): CPU time from `/proc/stat` at the run's start and
//! end (busy share of all cores, and steal: time the hypervisor ran another guest while this one wanted the CPU),
//! and the 1-minute load average from `/proc/loadavg` at the start of each round. The bench's own measuring
//! threads are two busy threads (load about 2 on their own); anything above is other work queued for the same
//! cores.
//!
//! Figures: `host.cores`, `host.cpu_busy_share`, `host.steal_share` (of all CPU time of the run, 0 to 1),
//! `host.load_1m.median`, `host.load_1m.max`. [`unfit`] names what makes a run unfit for comparison.

use std::collections::BTreeMap;

/// Steal above this share of the run's CPU time makes the run unfit: the hypervisor took the cores from under
/// the measurements often enough to move medians, not only tails.
pub const STEAL_UNFIT_SHARE: f64 = 0.05;

/// A median 1-minute load average above this many times the host's cores makes the run unfit: as many runnable
/// threads again as the cores beside the bench's own, so a measuring thread waits for a core about half the time.
pub const LOAD_UNFIT_PER_CORE: f64 = 2.0;

/// More than this share of rounds stalled (`rounds`) makes the run unfit.
pub const STALLED_UNFIT_SHARE: f64 = 1.0 / 3.0;

/// The `cpu` line of `/proc/stat`: user, nice, system, idle, iowait, irq, softirq, steal (USER_HZ ticks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    ticks: [u64; 8],
}

impl Sample {
    /// `/proc/stat` now; `None` where it cannot be read.
    pub fn read() -> Option<Sample> {
        Sample::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The aggregate `cpu` line of a `/proc/stat` text.
    pub fn parse(stat: &str) -> Option<Sample> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let mut ticks = [0u64; 8];
        for (t, v) in ticks.iter_mut().zip(line.split_whitespace().skip(1)) {
            *t = v.parse().ok()?;
        }
        Some(Sample { ticks })
    }

    /// (busy share, steal share) of all CPU time between `self` and `later`: busy = everything but idle and
    /// iowait; steal counted apart (it is in neither).
    pub fn shares(&self, later: &Sample) -> (f64, f64) {
        let d: Vec<u64> = self.ticks.iter().zip(later.ticks).map(|(a, b)| b.saturating_sub(*a)).collect();
        let total: u64 = d.iter().sum();
        if total == 0 {
            return (0.0, 0.0);
        }
        let idle = d[3] + d[4];
        let steal = d[7];
        ((total - idle - steal) as f64 / total as f64, steal as f64 / total as f64)
    }
}

/// The 1-minute load average now.
pub fn load_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// The host figures (module docs) of a run: `/proc/stat` at start and end, the load averages sampled.
pub fn add_figures(
    figures: &mut BTreeMap<String, f64>,
    start: Option<Sample>,
    end: Option<Sample>,
    loads: &[f64],
    cores: usize,
) {
    figures.insert("host.cores".into(), cores as f64);
    if let (Some(a), Some(b)) = (start, end) {
        let (busy, steal) = a.shares(&b);
        figures.insert("host.cpu_busy_share".into(), busy);
        figures.insert("host.steal_share".into(), steal);
    }
    if let Some(s) = crate::rounds::spread(loads) {
        figures.insert("host.load_1m.median".into(), s.median);
        figures.insert("host.load_1m.max".into(), s.max);
    }
}

/// Why the run is not fit for comparison (empty: fit): more than a third of the rounds stalled, CPU steal above
/// [`STEAL_UNFIT_SHARE`], a median load above [`LOAD_UNFIT_PER_CORE`] per core. A run that is unfit meets no
/// target (`report::Target`).
pub fn unfit(figures: &BTreeMap<String, f64>) -> Vec<String> {
    let mut why = Vec::new();
    let get = |k: &str| figures.get(k).copied();
    if let (Some(rounds), Some(stalled)) = (get("pingpong.rounds"), get("pingpong.stalled.rounds")) {
        if rounds > 0.0 && stalled / rounds > STALLED_UNFIT_SHARE {
            why.push(format!("{stalled:.0} of {rounds:.0} rounds stalled (more than a third)"));
        }
    }
    if let Some(steal) = get("host.steal_share").filter(|&s| s > STEAL_UNFIT_SHARE) {
        why.push(format!(
            "CPU steal {:.1}% of the run's CPU time (above {:.0}%)",
            steal * 100.0,
            STEAL_UNFIT_SHARE * 100.0
        ));
    }
    if let (Some(load), Some(cores)) = (get("host.load_1m.median"), get("host.cores")) {
        if cores > 0.0 && load > LOAD_UNFIT_PER_CORE * cores {
            why.push(format!(
                "load average {load:.1} (median over rounds) on {cores:.0} cores (above {:.0} per core)",
                LOAD_UNFIT_PER_CORE
            ));
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_and_busy_shares_come_from_the_cpu_line() {
        let a = Sample::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n").unwrap();
        let b = Sample::parse("cpu  400 0 150 1100 50 0 0 300 0 0\n").unwrap();
        // deltas: user 300, system 100, idle 300, steal 300 of 1,000
        assert_eq!(a.shares(&b), (0.4, 0.3));
        assert_eq!(Sample::parse("intr 1 2\n"), None);
    }

    #[test]
    fn a_run_is_unfit_for_each_reason_it_names() {
        let mut f = BTreeMap::from([
            ("pingpong.rounds".to_owned(), 25.0),
            ("pingpong.stalled.rounds".to_owned(), 8.0),
            ("host.cores".to_owned(), 2.0),
            ("host.steal_share".to_owned(), 0.01),
            ("host.load_1m.median".to_owned(), 3.9),
        ]);
        assert!(unfit(&f).is_empty());
        f.insert("pingpong.stalled.rounds".into(), 9.0);
        f.insert("host.steal_share".into(), 0.08);
        f.insert("host.load_1m.median".into(), 10.96);
        assert_eq!(
            unfit(&f),
            [
                "9 of 25 rounds stalled (more than a third)",
                "CPU steal 8.0% of the run's CPU time (above 5%)",
                "load average 11.0 (median over rounds) on 2 cores (above 2 per core)",
            ]
        );
    }
}
