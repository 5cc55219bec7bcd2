//! Report files: one `.hgrm` (HdrHistogram percentile distribution, the text the standard HdrHistogram
//! plotters read) per histogram, `summary.json` (every headline figure under a stable key), `summary.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;

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
    let _ = writeln!(out, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), h.distinct_values());
    out
}

/// The percentiles every report gives, with their key suffixes.
pub const PERCENTILES: [(&str, f64); 5] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999)];

/// Adds `<name>.<pNN>_ns` and `<name>.max_ns` / `.count` for a histogram.
pub fn add_figures(figures: &mut BTreeMap<String, f64>, name: &str, h: &Histogram<u64>) {
    for (k, q) in PERCENTILES {
        figures.insert(format!("{name}.{k}_ns"), h.value_at_quantile(q) as f64);
    }
    figures.insert(format!("{name}.max_ns"), h.max() as f64);
    figures.insert(format!("{name}.count"), h.len() as f64);
}

/// Adds `ratio.<num>_vs_<den>.<pNN>` for two histograms already in `figures`.
pub fn add_ratios(figures: &mut BTreeMap<String, f64>, num: &str, den: &str) {
    for (k, _) in PERCENTILES {
        let (n, d) = (figures[&format!("{num}.{k}_ns")], figures[&format!("{den}.{k}_ns")]);
        if d > 0.0 {
            figures.insert(format!("ratio.{num}_vs_{den}.{k}"), n / d);
        }
    }
}

/// Writes `summary.json` and `summary.md` into `dir`.
pub fn write_summary(dir: &Path, context: &serde_json::Value, figures: &BTreeMap<String, f64>) -> anyhow::Result<()> {
    let json = serde_json::json!({ "context": context, "figures": figures });
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    let mut md = String::from("# mdfan-bench summary\n\n");
    let _ = writeln!(md, "Context: `{}`\n", serde_json::to_string(context)?);
    md.push_str("| figure | value |\n|---|---:|\n");
    for (k, v) in figures {
        let _ = writeln!(md, "| `{k}` | {} |", fmt_value(k, *v));
    }
    std::fs::write(dir.join("summary.md"), md)?;
    Ok(())
}

fn fmt_value(key: &str, v: f64) -> String {
    if key.starts_with("ratio.") {
        format!("{v:.2}x")
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
