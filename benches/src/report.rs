//! Report files, one folder per run:
//!
//! - `<name>.hgrm`: each histogram's percentile distribution, the text HdrHistogram's
//!   `outputPercentileDistribution` prints and the standard plotters read (values in ns);
//! - `<name>.hlog`: each histogram's interval log (HdrHistogram V2 deflate-compressed, one interval per round),
//!   which `HistogramLogProcessor` and the HdrHistogram log plotters read;
//! - `summary.json`: `context` (machine, cores, clock, tuning, scenario), `figures` (every headline figure and
//!   ratio under a stable key) and `targets` (each target, its limit, the measured value, met or not);
//! - `summary.md` and `report.html` (with SVG charts, see [`crate::plot`]).
//!
//! Keys: `<histogram>.<pNN>_ns`, `.max_ns`, `.count`; `ratio.<a>_vs_<b>.<pNN>`; scenario figures such as
//! `mdfan.replay.subs2.rate_per_s`. A key keeps its meaning across versions; new figures get new keys.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Writes the percentile distribution of `h` (values in ns) as HdrHistogram's `outputPercentileDistribution`
/// does, 5 reporting ticks per half distance.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:>12} {:>14} {:>10} {:>14}\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inv = if q < 1.0 { format!("{:14.2}", 1.0 / (1.0 - q)) } else { String::new() };
        let _ = writeln!(out, "{:12.3} {:2.12} {:10} {}", v.value_iterated_to() as f64, q, total, inv);
    }
    let _ = writeln!(out, "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]", h.mean(), h.stdev());
    let _ = writeln!(out, "#[Max     = {:12.3}, Total count    = {:12}]", h.max() as f64, h.len());
    // As HdrHistogram's Java output: sub-buckets per bucket, 2 * 10^digits rounded up to a power of two.
    let sub_buckets = (2 * 10u64.pow(h.sigfig() as u32)).next_power_of_two();
    let _ = writeln!(out, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), sub_buckets);
    out
}

/// One histogram's measured intervals (one per round): start offset from the run's start, length, values.
#[derive(Default)]
pub struct Intervals(pub Vec<(Duration, Duration, Histogram<u64>)>);

impl Intervals {
    /// All intervals merged.
    pub fn total(&self) -> Histogram<u64> {
        let mut all = crate::new_histogram();
        for (_, _, h) in &self.0 {
            all.add(h).expect("every histogram has the same bounds");
        }
        all
    }
}

/// Writes an HdrHistogram interval log of `intervals` (values in ns), tagged `name`.
pub fn hlog(name: &str, run_start: SystemTime, intervals: &Intervals) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder.add_comment(&format!("mdfan-bench {name}: one interval per round, values in ns"));
    builder.add_comment("[Histogram log format version 1.3]");
    builder.with_start_time(run_start).with_base_time(run_start);
    let mut writer = builder.begin_log_with(&mut out, &mut serializer)?;
    // Tags may not hold spaces, commas or '=' (HdrHistogram log format); our names have none.
    let tag = Tag::new(name);
    for (start, length, h) in &intervals.0 {
        writer
            .write_histogram(h, *start, *length, tag)
            .map_err(|e| anyhow::anyhow!("{name}.hlog: interval at {start:?}: {e:?}"))?;
    }
    drop(writer);
    // The column legend HdrHistogram's own writer puts before the first interval (readers skip it).
    let legend = b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n";
    let at: usize = out.split_inclusive(|&c| c == b'\n').take_while(|l| l.starts_with(b"#")).map(<[u8]>::len).sum();
    out.splice(at..at, legend.iter().copied());
    Ok(out)
}

/// The percentiles every report gives, with their key suffixes.
pub const PERCENTILES: [(&str, f64); 6] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999), ("p99999", 0.99999)];

/// The percentiles ratios are given for (the p50, p99, p99.9, p99.99).
pub const RATIO_PERCENTILES: [&str; 4] = ["p50", "p99", "p999", "p9999"];

/// Adds `<name>.<pNN>_ns` and `<name>.max_ns` / `.count` for a histogram.
pub fn add_figures(figures: &mut BTreeMap<String, f64>, name: &str, h: &Histogram<u64>) {
    for (k, q) in PERCENTILES {
        figures.insert(format!("{name}.{k}_ns"), h.value_at_quantile(q) as f64);
    }
    figures.insert(format!("{name}.max_ns"), h.max() as f64);
    figures.insert(format!("{name}.count"), h.len() as f64);
}

/// Adds `ratio.<num>_vs_<den>.<pNN>` for two histograms already in `figures` (none when either is missing).
pub fn add_ratios(figures: &mut BTreeMap<String, f64>, num: &str, den: &str) {
    for k in RATIO_PERCENTILES {
        let (Some(n), Some(d)) = (figures.get(&format!("{num}.{k}_ns")), figures.get(&format!("{den}.{k}_ns"))) else {
            continue;
        };
        if *d > 0.0 {
            let r = n / d;
            figures.insert(format!("ratio.{num}_vs_{den}.{k}"), r);
        }
    }
}

/// A performance target of the issue, checked against one figure of this run.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What it says, e.g. "shm one-way p50 <= 1.0x the cache-line ping-pong".
    pub what: String,
    /// The figure key it reads.
    pub key: String,
    /// The limit (a ratio).
    pub limit: f64,
    /// `true`: the figure must be at most `limit`; `false`: at least.
    pub at_most: bool,
    /// The measured figure; `None` when this run did not measure it.
    pub value: Option<f64>,
}

impl Target {
    pub fn new(figures: &BTreeMap<String, f64>, what: &str, key: &str, limit: f64, at_most: bool) -> Target {
        Target { what: what.into(), key: key.into(), limit, at_most, value: figures.get(key).copied() }
    }

    /// `Some(true)` met, `Some(false)` missed, `None` not measured.
    pub fn met(&self) -> Option<bool> {
        self.value.map(|v| if self.at_most { v <= self.limit } else { v >= self.limit })
    }

    /// "met", "missed by 23%" or "not measured".
    pub fn verdict(&self) -> String {
        match (self.met(), self.value) {
            (Some(true), _) => "met".into(),
            (Some(false), Some(v)) => {
                let by = if self.at_most { v / self.limit - 1.0 } else { 1.0 - v / self.limit };
                format!("missed by {:.0}%", by * 100.0)
            }
            _ => "not measured".into(),
        }
    }
}

/// Writes `summary.json` and `summary.md` into `dir`.
pub fn write_summary(
    dir: &Path,
    context: &serde_json::Value,
    figures: &BTreeMap<String, f64>,
    targets: &[Target],
) -> anyhow::Result<()> {
    let targets_json: Vec<_> = targets
        .iter()
        .map(|t| {
            serde_json::json!({"what": t.what, "key": t.key, "limit": t.limit, "at_most": t.at_most,
            "value": t.value, "met": t.met(), "verdict": t.verdict()})
        })
        .collect();
    let json = serde_json::json!({ "context": context, "figures": figures, "targets": targets_json });
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    let mut md = String::from("# mdfan-bench summary\n\n");
    let _ = writeln!(md, "Context: `{}`\n", serde_json::to_string(context)?);
    md.push_str("## Targets\n\n| target | figure | limit | measured | verdict |\n|---|---|---:|---:|---|\n");
    for t in targets {
        let v = t.value.map_or("-".into(), |v| format!("{v:.2}"));
        let _ = writeln!(md, "| {} | `{}` | {:.2} | {v} | {} |", t.what, t.key, t.limit, t.verdict());
    }
    md.push_str("\n## Figures\n\n| figure | value |\n|---|---:|\n");
    for (k, v) in in_reading_order(figures) {
        let _ = writeln!(md, "| `{k}` | {} |", fmt_value(k, *v));
    }
    std::fs::write(dir.join("summary.md"), md)?;
    Ok(())
}

/// The figures with each histogram's percentiles in rising order (p50 .. p99999, then max, count) rather than
/// as text sorts them.
pub fn in_reading_order(figures: &BTreeMap<String, f64>) -> Vec<(&String, &f64)> {
    let rank = |k: &str| {
        let last = k.rsplit('.').next().unwrap_or("");
        let p = PERCENTILES.iter().position(|(name, _)| last == format!("{name}_ns") || last == *name);
        let base = match p {
            Some(_) => &k[..k.len() - last.len()],
            None => k,
        };
        (base.to_owned(), p.unwrap_or(PERCENTILES.len()), k.to_owned())
    };
    let mut v: Vec<_> = figures.iter().collect();
    v.sort_by_cached_key(|(k, _)| rank(k));
    v
}

/// A figure as text: ratios with two decimals and an `x`, the rest rounded.
pub fn fmt_value(key: &str, v: f64) -> String {
    if key.starts_with("ratio.") {
        if v != 0.0 && v.abs() < 0.1 {
            format!("{v:.3}x")
        } else {
            format!("{v:.2}x")
        }
    } else if v.abs() < 100.0 && v.fract() != 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// Reads the figures of a run folder's `summary.json`.
pub fn read_figures(dir: &Path) -> anyhow::Result<BTreeMap<String, f64>> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let figures = v
        .get("figures")
        .and_then(|f| f.as_object())
        .ok_or_else(|| anyhow::anyhow!("{}: no `figures` object", path.display()))?;
    Ok(figures.iter().filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_log_reads_back_with_its_tag_and_counts() {
        let mut intervals = Intervals::default();
        for round in 0..3u64 {
            let mut h = crate::new_histogram();
            for v in 1..=100u64 {
                h.record(v * (round + 1)).unwrap();
            }
            intervals.0.push((Duration::from_secs(round), Duration::from_millis(500), h));
        }
        let log = hlog("mdfan.shm.pingpong", SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000), &intervals)
            .unwrap();
        let text = String::from_utf8(log.clone()).unwrap();
        assert!(text.contains("#[StartTime: 1700000000.000"), "{text}");
        assert!(text.contains("#[Histogram log format version 1.3]\n"), "{text}");
        let legend = text.find("\"StartTimestamp\",\"Interval_Length\"").expect("the legend line");
        assert!(legend < text.find("Tag=").unwrap() && !text[..legend].lines().any(|l| !l.starts_with('#')));
        let mut seen = Vec::new();
        for entry in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&log) {
            if let Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(i)) = entry {
                assert_eq!(i.tag().map(|t| t.as_str()), Some("mdfan.shm.pingpong"));
                seen.push((i.start_timestamp(), i.max()));
            }
        }
        assert_eq!(
            seen,
            vec![(Duration::from_secs(0), 100.0), (Duration::from_secs(1), 200.0), (Duration::from_secs(2), 300.0)]
        );
        assert_eq!(intervals.total().len(), 300);
    }

    #[test]
    fn a_target_names_how_far_it_was_missed() {
        let figures = BTreeMap::from([("a".to_owned(), 1.5), ("b".to_owned(), 0.6)]);
        let t = Target::new(&figures, "a small", "a", 1.0, true);
        assert_eq!((t.met(), t.verdict().as_str()), (Some(false), "missed by 50%"));
        let t = Target::new(&figures, "b large", "b", 0.8, false);
        assert_eq!((t.met(), t.verdict().as_str()), (Some(false), "missed by 25%"));
        let t = Target::new(&figures, "b small", "b", 0.8, true);
        assert_eq!((t.met(), t.verdict().as_str()), (Some(true), "met"));
        assert_eq!(Target::new(&figures, "c", "c", 1.0, true).verdict(), "not measured");
    }
}
