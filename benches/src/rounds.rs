//! Ping-pong ratios per round, and the rounds a host stall hit.
//!
//! The machines are shared: host stalls of 2 to 8 ms land on whichever probe is running, and a ratio of histograms
//! merged over the whole run lets one stall decide a tail percentile (p99.9 of the ratio to the cache line swung
//! from 0.8x to 5x between runs). So a run has many short rounds, every ping-pong variant measured once in each,
//! interleaved; for every pair of [`PINGPONG_RATIOS`] this run has, each round gives its own ratio at each of
//! [`RATIO_PERCENTILES`], and the figure the targets read, `ratio.<a>_vs_<b>.<pNN>`, is the **median of the
//! per-round ratios** over the rounds not flagged, with their spread beside it (`….<pNN>.min`, `….<pNN>.max`).
//! The ratio of the merged histograms stays as a secondary figure, `ratio.<a>_vs_<b>.merged.<pNN>`.
//!
//! **Stall flag.** A round whose cache-line probe (`baseline.cacheline`, a bare cache-line ping-pong with no
//! software of its own that could pause) has a maximum above the scenario's `stall_threshold_ns` (default
//! [`DEFAULT_STALL_THRESHOLD_NS`], 1 ms: about 5,000 times its p50 on these machines, below the 2 ms the shortest
//! stall seen lasts) was hit by a host stall: it is listed with its ratios and left out of the medians. When every
//! round is flagged, the medians are taken over all rounds and `pingpong.stalled.all_flagged` is 1.
//!
//! Figures (summary.json): `pingpong.rounds`, `pingpong.stalled.rounds`, `pingpong.stalled.all_flagged` (0 or 1),
//! `pingpong.stall_threshold_ns`; the ratios above. The per-round table is `context.pingpong_rounds`
//! ([`PingpongRounds::to_json`]).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::report::{Intervals, PINGPONG_RATIOS, RATIO_PERCENTILES};

/// The default stall threshold: a round whose cache-line probe's maximum exceeds 1 ms (1,000,000 ns) is flagged.
pub const DEFAULT_STALL_THRESHOLD_NS: u64 = 1_000_000;

/// The probe whose maximum flags a round.
pub const STALL_PROBE: &str = "baseline.cacheline";

/// One probe in one round: its one-way latency at each of [`RATIO_PERCENTILES`] and its maximum, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    pub pct_ns: [f64; RATIO_PERCENTILES.len()],
    pub max_ns: f64,
}

impl Probe {
    /// A histogram's values (ns).
    pub fn of(h: &Histogram<u64>) -> Probe {
        let q = |p: &str| crate::report::PERCENTILES.iter().find(|(k, _)| *k == p).map_or(0.5, |(_, q)| *q);
        Probe { pct_ns: RATIO_PERCENTILES.map(|p| crate::report::value_at(h, q(p)) as f64), max_ns: h.max() as f64 }
    }
}

/// One round's ratios: for each pair key `<a>_vs_<b>`, the ratio at each of [`RATIO_PERCENTILES`] (`None` when
/// the denominator is 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    /// 1-based.
    pub round: usize,
    /// The stall probe's maximum this round, ns (`None` if this run has no such probe).
    pub stall_probe_max_ns: Option<f64>,
    pub flagged: bool,
    pub ratios: BTreeMap<String, [Option<f64>; RATIO_PERCENTILES.len()]>,
}

/// Every round's ping-pong ratios, the flags, and the threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct PingpongRounds {
    pub threshold_ns: u64,
    pub rounds: Vec<Round>,
}

/// A per-round ratio's summary over the rounds used: median (of an even count, the mean of the middle two),
/// smallest, largest, and how many rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

/// The median, min and max of `v` (`None` when empty).
pub fn spread(v: &[f64]) -> Option<Spread> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => return None,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    Some(Spread { median, min: v[0], max: v[n - 1], rounds: n })
}

/// The pair key, `<a>_vs_<b>`, as in `ratio.<a>_vs_<b>.<pNN>`.
pub fn pair_key(num: &str, den: &str) -> String {
    format!("{num}_vs_{den}")
}

/// The per-round values of every histogram of `hists` that is a ping-pong probe (a side of [`PINGPONG_RATIOS`]),
/// one [`Probe`] per interval (round), in order.
pub fn probes_of(hists: &BTreeMap<String, Intervals>) -> BTreeMap<String, Vec<Probe>> {
    hists
        .iter()
        .filter(|(name, _)| PINGPONG_RATIOS.iter().any(|(n, d)| n == name || d == name) || *name == STALL_PROBE)
        .map(|(name, iv)| (name.clone(), iv.0.iter().map(|(_, _, h)| Probe::of(h)).collect()))
        .collect()
}

/// Pure: the per-round ratios of every pair of `pairs` both of whose probes `probes` holds, and each round's
/// flag (its [`STALL_PROBE`] maximum above `threshold_ns`). Rounds are counted to the shortest series of the
/// probes in use (every probe is measured once per round).
pub fn per_round(probes: &BTreeMap<String, Vec<Probe>>, pairs: &[(&str, &str)], threshold_ns: u64) -> PingpongRounds {
    let present: Vec<(&str, &str, &[Probe], &[Probe])> =
        pairs.iter().filter_map(|&(n, d)| Some((n, d, probes.get(n)?.as_slice(), probes.get(d)?.as_slice()))).collect();
    let count = present.iter().map(|(_, _, a, b)| a.len().min(b.len())).min().unwrap_or(0);
    let stall = probes.get(STALL_PROBE);
    let rounds = (0..count)
        .map(|i| {
            let stall_probe_max_ns = stall.and_then(|s| s.get(i)).map(|p| p.max_ns);
            let ratios = present
                .iter()
                .map(|(n, d, a, b)| {
                    let r = std::array::from_fn(|k| (b[i].pct_ns[k] > 0.0).then(|| a[i].pct_ns[k] / b[i].pct_ns[k]));
                    (pair_key(n, d), r)
                })
                .collect();
            Round {
                round: i + 1,
                stall_probe_max_ns,
                flagged: stall_probe_max_ns.is_some_and(|m| m > threshold_ns as f64),
                ratios,
            }
        })
        .collect();
    PingpongRounds { threshold_ns, rounds }
}

impl PingpongRounds {
    /// Whether every round is flagged (then the medians use all rounds).
    pub fn all_flagged(&self) -> bool {
        !self.rounds.is_empty() && self.rounds.iter().all(|r| r.flagged)
    }

    /// The rounds the medians use: the unflagged ones, or all when every round is flagged.
    pub fn used(&self) -> impl Iterator<Item = &Round> {
        let all = self.all_flagged();
        self.rounds.iter().filter(move |r| all || !r.flagged)
    }

    /// The spread of pair `key`'s per-round ratio at percentile index `k` over the rounds used.
    pub fn spread_of(&self, key: &str, k: usize) -> Option<Spread> {
        let v: Vec<f64> = self.used().filter_map(|r| r.ratios.get(key)?[k]).collect();
        spread(&v)
    }

    /// The pair keys these rounds have, in [`PINGPONG_RATIOS`] order.
    pub fn pair_keys(&self) -> Vec<String> {
        let Some(first) = self.rounds.first() else { return Vec::new() };
        PINGPONG_RATIOS.iter().map(|(n, d)| pair_key(n, d)).filter(|k| first.ratios.contains_key(k)).collect()
    }

    /// Writes the figures (module docs) into `figures`: `ratio.<pair>.<pNN>` becomes the median of the per-round
    /// ratios; whatever was there (the merged histograms' ratio) moves to `ratio.<pair>.merged.<pNN>`.
    pub fn add_figures(&self, figures: &mut BTreeMap<String, f64>) {
        if self.rounds.is_empty() {
            return;
        }
        for key in self.pair_keys() {
            for (k, p) in RATIO_PERCENTILES.iter().enumerate() {
                let base = format!("ratio.{key}.{p}");
                if let Some(merged) = figures.remove(&base) {
                    figures.insert(format!("ratio.{key}.merged.{p}"), merged);
                }
                if let Some(s) = self.spread_of(&key, k) {
                    figures.insert(base.clone(), s.median);
                    figures.insert(format!("{base}.min"), s.min);
                    figures.insert(format!("{base}.max"), s.max);
                }
            }
        }
        let flagged = self.rounds.iter().filter(|r| r.flagged).count();
        figures.insert("pingpong.rounds".into(), self.rounds.len() as f64);
        figures.insert("pingpong.stalled.rounds".into(), flagged as f64);
        figures.insert("pingpong.stalled.all_flagged".into(), f64::from(u8::from(self.all_flagged())));
        figures.insert("pingpong.stall_threshold_ns".into(), self.threshold_ns as f64);
    }

    /// `context.pingpong_rounds` of summary.json: the threshold, the stall probe, the flagged rounds' numbers,
    /// and every round with its stall-probe maximum and its ratios by pair and percentile key.
    pub fn to_json(&self) -> serde_json::Value {
        let rounds: Vec<serde_json::Value> = self
            .rounds
            .iter()
            .map(|r| {
                let ratios: serde_json::Map<String, serde_json::Value> = r
                    .ratios
                    .iter()
                    .map(|(k, v)| {
                        let by_p: serde_json::Map<String, serde_json::Value> =
                            RATIO_PERCENTILES.iter().zip(v).map(|(p, x)| ((*p).to_owned(), (*x).into())).collect();
                        (k.clone(), by_p.into())
                    })
                    .collect();
                serde_json::json!({
                    "round": r.round,
                    "flagged": r.flagged,
                    "stall_probe_max_ns": r.stall_probe_max_ns,
                    "ratios": ratios,
                })
            })
            .collect();
        serde_json::json!({
            "threshold_ns": self.threshold_ns,
            "stall_probe": STALL_PROBE,
            "flagged": self.rounds.iter().filter(|r| r.flagged).map(|r| r.round).collect::<Vec<_>>(),
            "all_flagged": self.all_flagged(),
            "rounds": rounds,
        })
    }
}

/// One line for the console: how many rounds the ping-pong ratio medians use and how many a stall hit, with a
/// warning when fewer than half are left (the medians then rest on few rounds); `None` without ping-pong rounds.
pub fn stall_line(figures: &BTreeMap<String, f64>) -> Option<String> {
    let rounds = *figures.get("pingpong.rounds")?;
    let stalled = figures.get("pingpong.stalled.rounds").copied().unwrap_or(0.0);
    let threshold = figures.get("pingpong.stall_threshold_ns").copied().unwrap_or(0.0);
    let all = figures.get("pingpong.stalled.all_flagged").is_some_and(|&v| v > 0.0);
    let mut line = format!(
        "pingpong rounds: {stalled:.0} of {rounds:.0} stalled (cache-line max > {threshold:.0} ns), left out of the \
         ratio medians"
    );
    if all {
        line.push_str("; every round stalled: the medians use all of them");
    } else if 2.0 * (rounds - stalled) < rounds {
        line.push_str(&format!("; warning: the medians rest on {:.0} rounds", rounds - stalled));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(p: [f64; 4], max: f64) -> Probe {
        Probe { pct_ns: p, max_ns: max }
    }

    const PAIRS: [(&str, &str); 2] =
        [("mdfan.shm.pingpong", "baseline.cacheline"), ("mdfan.shm.pingpong", "baseline.aeron")];

    /// Five recorded rounds (values as a run on these machines gives them): round 3's cache line was hit by a
    /// 4.1 ms stall (its p99.99 too), round 5's mdfan probe by one at p99.99 only.
    fn recorded() -> BTreeMap<String, Vec<Probe>> {
        BTreeMap::from([
            (
                "baseline.cacheline".to_owned(),
                vec![
                    probe([60.0, 80.0, 100.0, 400.0], 9_000.0),
                    probe([55.0, 75.0, 90.0, 300.0], 12_000.0),
                    probe([62.0, 85.0, 120.0, 4_100_000.0], 4_100_000.0),
                    probe([200.0, 240.0, 300.0, 900.0], 30_000.0),
                    probe([58.0, 78.0, 96.0, 350.0], 1_000_000.0),
                ],
            ),
            (
                "mdfan.shm.pingpong".to_owned(),
                vec![
                    probe([66.0, 88.0, 125.0, 500.0], 10_000.0),
                    probe([55.0, 90.0, 99.0, 600.0], 20_000.0),
                    probe([62.0, 85.0, 120.0, 700.0], 15_000.0),
                    probe([210.0, 252.0, 330.0, 1_800.0], 40_000.0),
                    probe([58.0, 78.0, 120.0, 2_800_000.0], 2_800_000.0),
                ],
            ),
        ])
    }

    #[test]
    fn a_round_whose_cache_line_max_passes_the_threshold_is_flagged_and_left_out_of_the_medians() {
        let r = per_round(&recorded(), &PAIRS, 1_000_000);
        // aeron was not measured: one pair
        assert_eq!(r.pair_keys(), vec!["mdfan.shm.pingpong_vs_baseline.cacheline".to_owned()]);
        assert_eq!(r.rounds.iter().map(|r| r.flagged).collect::<Vec<_>>(), [false, false, true, false, false]);
        // exactly at the threshold is not above it (round 5)
        assert_eq!(r.rounds[4].stall_probe_max_ns, Some(1_000_000.0));
        let key = "mdfan.shm.pingpong_vs_baseline.cacheline";
        assert_eq!(r.rounds[0].ratios[key], [Some(1.1), Some(1.1), Some(1.25), Some(1.25)]);
        // p50 over rounds 1, 2, 4, 5: 1.1, 1.0, 1.05, 1.0 → median (1.0 + 1.05) / 2
        assert_eq!(r.spread_of(key, 0), Some(Spread { median: 1.025, min: 1.0, max: 1.1, rounds: 4 }));
        // p99.9: 1.25, 1.1, 1.1, 1.25 → 1.175
        let s = r.spread_of(key, 2).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (1.175, 1.1, 1.25, 4));
        let mut f = BTreeMap::from([(format!("ratio.{key}.p999"), 0.8)]);
        r.add_figures(&mut f);
        assert_eq!(f[&format!("ratio.{key}.merged.p999")], 0.8);
        assert_eq!(f[&format!("ratio.{key}.p999")], 1.175);
        assert_eq!(f[&format!("ratio.{key}.p999.max")], 1.25);
        assert_eq!(f["pingpong.rounds"], 5.0);
        assert_eq!(f["pingpong.stalled.rounds"], 1.0);
        assert_eq!(f["pingpong.stalled.all_flagged"], 0.0);
        assert_eq!(f["pingpong.stall_threshold_ns"], 1_000_000.0);
        assert_eq!(
            stall_line(&f).as_deref(),
            Some("pingpong rounds: 1 of 5 stalled (cache-line max > 1000000 ns), left out of the ratio medians")
        );
        let j = r.to_json();
        assert_eq!(j["flagged"], serde_json::json!([3]));
        assert_eq!(j["rounds"][2]["ratios"][key]["p50"], serde_json::json!(1.0));
    }

    #[test]
    fn when_every_round_is_flagged_the_medians_use_them_all() {
        let r = per_round(&recorded(), &PAIRS, 5_000);
        assert!(r.all_flagged());
        let key = "mdfan.shm.pingpong_vs_baseline.cacheline";
        // p50 over all five: 1.1, 1.0, 1.0, 1.05, 1.0 → 1.0
        assert_eq!(r.spread_of(key, 0), Some(Spread { median: 1.0, min: 1.0, max: 1.1, rounds: 5 }));
        let mut f = BTreeMap::new();
        r.add_figures(&mut f);
        assert_eq!((f["pingpong.stalled.rounds"], f["pingpong.stalled.all_flagged"]), (5.0, 1.0));
        assert!(stall_line(&f).unwrap().ends_with("; every round stalled: the medians use all of them"));
        assert_eq!(stall_line(&BTreeMap::new()), None);
    }

    #[test]
    fn rounds_are_counted_to_the_shortest_probe_and_a_zero_denominator_gives_no_ratio() {
        let mut p = recorded();
        p.get_mut("mdfan.shm.pingpong").unwrap().truncate(2);
        p.get_mut("baseline.cacheline").unwrap()[1].pct_ns[0] = 0.0;
        let r = per_round(&p, &PAIRS, 1_000_000);
        assert_eq!(r.rounds.len(), 2);
        assert_eq!(r.rounds[1].ratios["mdfan.shm.pingpong_vs_baseline.cacheline"][0], None);
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[3.0, 1.0, 2.0]).map(|s| s.median), Some(2.0));
    }
}
