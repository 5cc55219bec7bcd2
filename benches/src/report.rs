//! Report files, one folder per run:
//!
//! - `<name>.hgrm`: each histogram's percentile distribution, the text HdrHistogram's
//!   `outputPercentileDistribution` prints and the standard plotters read (values in ns);
//! - `<name>.hlog`: each histogram's interval log (HdrHistogram V2 deflate-compressed, one interval per round),
//!   which `HistogramLogProcessor` and the HdrHistogram log plotters read;
//! - `summary.json`: `context` (machine, cores, clock, tuning, scenario), `figures` (every headline figure and
//!   ratio under a stable key) and `targets` (each target, its limit, the measured value, met or not);
//! - `summary.md` and `report.html` (with SVG charts, see [`crate::plot`]): the run's context and the headline
//!   tables ([`crate::tables`]) under human names ([`display_name`]), the targets, then every figure by key.
//!
//! Keys: `<histogram>.<pNN>_ns`, `.max_ns`, `.count`; `ratio.<a>_vs_<b>.<pNN>` (which: [`add_ratio_figures`]; the
//! ping-pong ones are medians of per-round ratios, with `.<pNN>.min`/`.max` and the merged histograms' ratio as
//! `ratio.<a>_vs_<b>.merged.<pNN>`: [`crate::rounds`]); `pingpong.rounds`, `pingpong.stalled.rounds`;
//! scenario figures such as `mdfan.replay.subs2.rate_per_s`. A key keeps its meaning across versions; new figures
//! get new keys.

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

/// The percentile rank rule of every figure of a report: the value at quantile `q` (0 < q <= 1) of a histogram
/// of `N` values is the highest value equivalent (same bucket, 3 significant digits) to the value of rank
/// `k = max(1, floor(q * N + 0.5))`, counting from the lowest: `q * N` rounded half up to the nearest rank. This is
/// HdrHistogram_py's rule (`get_target_count_at_percentile`), taken exactly in integers (q to 1e-7), so a reader
/// of the `.hlog` files with HdrHistogram_py gets the same figures. (The `hdrhistogram` crate's
/// `value_at_quantile` takes the rank up, `ceil(q * N)`, in floating point: for `N` = 68,825 at p99.99 that is rank
/// 68,819 against 68,818, a different value where the tail is sparse. Java's HdrHistogram also rounds up, after
/// taking one ulp off the percentile; the two references agree whenever `q * N` is a whole number, as for every
/// ping-pong of a run: 20,000 per round.)
pub fn value_at(h: &Histogram<u64>, q: f64) -> u64 {
    let n = u128::from(h.len());
    if n == 0 {
        return 0;
    }
    let q_e7 = (q.clamp(0.0, 1.0) * 1e7).round() as u128;
    let rank = ((q_e7 * n + 5_000_000) / 10_000_000).max(1) as u64;
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= rank {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    h.max()
}

/// Adds `<name>.<pNN>_ns` and `<name>.max_ns` / `.count` for a histogram ([`value_at`]'s rank rule).
pub fn add_figures(figures: &mut BTreeMap<String, f64>, name: &str, h: &Histogram<u64>) {
    for (k, q) in PERCENTILES {
        figures.insert(format!("{name}.{k}_ns"), value_at(h, q) as f64);
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

/// The one-way latency variants, in the order the report lists them: the limit, mdfan, the peers.
pub const LATENCY_VARIANTS: [&str; 7] = [
    "baseline.cacheline",
    "mdfan.shm.pingpong",
    "baseline.aeron",
    "baseline.aeron_c",
    "baseline.iceoryx2",
    "mdfan.verbs.pingpong",
    "baseline.perftest",
];

/// The latency ratios a run gives, mdfan first: (mdfan's ping-pong, a baseline ping-pong). `baseline.aeron_best`
/// is no measurement of its own: see [`add_best_aeron`].
pub const PINGPONG_RATIOS: [(&str, &str); 7] = [
    ("mdfan.shm.pingpong", "baseline.cacheline"),
    ("mdfan.shm.pingpong", "baseline.aeron"),
    ("mdfan.shm.pingpong", "baseline.aeron_c"),
    ("mdfan.shm.pingpong", "baseline.aeron_best"),
    ("mdfan.shm.pingpong", "baseline.iceoryx2"),
    ("mdfan.verbs.pingpong", "baseline.perftest"),
    ("mdfan.verbs.pingpong", "baseline.cacheline"),
];

/// The two Aeron IPC measurements of a run: the Rust harness over rusteron ([`crate::aeron`]) and Aeron's own C
/// samples ([`crate::aeron_c`]).
pub const AERON_VARIANTS: [&str; 2] = ["baseline.aeron", "baseline.aeron_c"];

/// Which Aeron measurement ([`AERON_VARIANTS`]) was faster at percentile `p` (`p50`, `p999`, ..): the lower
/// `<variant>.<p>_ns`; on a tie, Aeron's own samples. `None` when neither was measured.
pub fn best_aeron(figures: &BTreeMap<String, f64>, p: &str) -> Option<&'static str> {
    let mut best: Option<(&'static str, f64)> = None;
    for v in AERON_VARIANTS {
        if let Some(&ns) = figures.get(&format!("{v}.{p}_ns")) {
            if best.is_none_or(|(_, b)| ns <= b) {
                best = Some((v, ns));
            }
        }
    }
    best.map(|(v, _)| v)
}

/// Adds `baseline.aeron_best.<pNN>_ns` for each of [`RATIO_PERCENTILES`]: the lower of the two Aeron
/// measurements at that percentile ([`best_aeron`] says which), so that mdfan is held against the better Aeron
/// figure, whichever harness produced it. Percentile by percentile: the two may differ (one may win at p50, the
/// other at p99.9).
pub fn add_best_aeron(figures: &mut BTreeMap<String, f64>) {
    for p in RATIO_PERCENTILES {
        if let Some(v) = best_aeron(figures, p) {
            let ns = figures[&format!("{v}.{p}_ns")];
            figures.insert(format!("baseline.aeron_best.{p}_ns"), ns);
        }
    }
}

/// Adds every ratio figure of a run to `figures` (which holds its histograms' percentiles and its scalars); a
/// ratio whose two figures are not both there (a peer not built, the replay skipped) is left out.
///
/// Only ratios between like-for-like measurements of the same run are given, because only those say something
/// about mdfan:
/// - `ratio.<mdfan ping-pong>_vs_<baseline ping-pong>.<pNN>` for each pair of [`PINGPONG_RATIOS`]: one-way latency
///   (round trip / 2) of one message at a time, the same message size, the same two cores, the same counts,
///   interleaved in every round, compared at the same percentile; `baseline.aeron_best` is the better of the two
///   Aeron measurements at each percentile ([`add_best_aeron`], added here first). Written here from the histograms
///   merged over the run; `write_report` then moves these to `ratio.<a>_vs_<b>.merged.<pNN>` and puts the median of
///   the per-round ratios in their place ([`crate::rounds`]);
/// - `ratio.mdfan.replay.subs<N>_vs_baseline.dbn_decode.rate` and `…_vs_baseline.dbn_decode_mem.rate`: records/s of
///   the replay to N subscribers against records/s of decoding the same capture alone (file, or in memory); the
///   same for `mdfan.replay_yield` (hot loop and subscribers yielding when idle) and `mdfan.replay_hot_feed`
///   (the feed decoded on the hot loop's thread).
///
/// - `ratio.mdfan.fanout.extra_sub_vs_baseline.store64`: the hot loop's cost of one more subscriber against
///   that of 64 bytes more stored per record ([`crate::fanout::add_figures`]).
///
/// Not given (earlier versions wrote them): the open loop's post-to-poll against the cache line,
/// `ratio.mdfan.shm.openloop.<rate>.post_to_poll_vs_baseline.cacheline.<pNN>`. The open loop posts on a schedule
/// into rings that hold what the receiver has not polled yet, so its post-to-poll counts the time a record waits
/// behind the ones before it; at rate `max` the sender runs ahead of the receiver by design and the figure is a
/// queue's depth (hundreds of times the cache line, or a fraction of it at p99.99 where the cache line's own
/// outliers dominate). A quotient of a queueing time and an idle hand-off means nothing; the open loop's own
/// figures are in the report's open-loop table.
pub fn add_ratio_figures(figures: &mut BTreeMap<String, f64>) {
    add_best_aeron(figures);
    for (num, den) in PINGPONG_RATIOS {
        add_ratios(figures, num, den);
    }
    add_scalar_ratios(figures);
}

/// The ITCH 5.0 inputs of the decode benchmark ([`crate::itch`]).
pub const ITCH_INPUTS: [&str; 2] = ["snippet", "synthetic"];

/// The ratios of scalar figures (within one round when `figures` is one round's: `Scalars::per_round_ratios`):
/// the replay's records/s against DBN decode's, the fan-out slopes ([`crate::fanout::add_figures`]), and the
/// decoders against their references, time over time (ns over ns, at most 1.0 or 1.5 is the target):
/// - `ratio.mdfan.itch_decode_vs_baseline.itch5_hashmap.<input>` (and `…itch5_parse.<input>`, the floor) per
///   message, for each of [`ITCH_INPUTS`]; `….instructions` beside each, of the callgrind counts;
/// - `ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_packet` (the per-packet times' p50s) and `.per_entry`
///   (a pass's time over the entries of every template); `….instructions` of the callgrind counts.
pub fn add_scalar_ratios(figures: &mut BTreeMap<String, f64>) {
    let decode = figures.get("baseline.dbn_decode.rate_per_s").copied();
    let mem = figures.get("baseline.dbn_decode_mem.rate_per_s").copied();
    for stem in REPLAY_STEMS {
        for (subs, rate) in replay_rates_of(figures, stem) {
            for (den, d) in [("baseline.dbn_decode", decode), ("baseline.dbn_decode_mem", mem)] {
                if let Some(d) = d.filter(|d| *d > 0.0) {
                    figures.insert(format!("ratio.mdfan.{stem}.subs{subs}_vs_{den}.rate"), rate / d);
                }
            }
        }
    }
    crate::fanout::add_figures(figures);
    let mut quotient = |key: String, num: String, den: String| {
        if let (Some(n), Some(d)) = (figures.get(&num), figures.get(&den)) {
            if *d > 0.0 {
                let q = n / d;
                figures.insert(key, q);
            }
        }
    };
    for input in ITCH_INPUTS {
        for den in ["baseline.itch5_hashmap", "baseline.itch5_parse"] {
            for unit in ["ns_per_message", "instructions_per_message"] {
                let key = format!("ratio.mdfan.itch_decode_vs_{den}.{input}");
                let key = if unit == "ns_per_message" { key } else { format!("{key}.instructions") };
                quotient(key, format!("mdfan.itch_decode.{input}.{unit}"), format!("{den}.{input}.{unit}"));
            }
        }
    }
    let r = "ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe";
    for (key, unit) in [
        ("per_packet", "packet_p50_ns"),
        ("per_entry", "ns_per_entry"),
        ("per_packet.instructions", "instructions_per_packet"),
        ("per_entry.instructions", "instructions_per_entry"),
    ] {
        quotient(format!("{r}.{key}"), format!("mdfan.mdp3_decode.{unit}"), format!("baseline.mdp3_sbe.{unit}"));
    }
}

/// The replay scenarios' key stems: busy-spinning (`replay`), yielding when idle (`replay_yield`), the feed
/// decoded on the hot loop's thread (`replay_hot_feed`).
pub const REPLAY_STEMS: [&str; 3] = ["replay", "replay_yield", "replay_hot_feed"];

/// The replay scenario `stem`'s ([`REPLAY_STEMS`]) records/s by subscriber count
/// (`mdfan.<stem>.subs<N>.rate_per_s`), fewest subscribers first.
pub fn replay_rates_of(figures: &BTreeMap<String, f64>, stem: &str) -> Vec<(usize, f64)> {
    let prefix = format!("mdfan.{stem}.subs");
    let mut v: Vec<(usize, f64)> = figures
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix(prefix.as_str())?.strip_suffix(".rate_per_s")?;
            Some((n.parse().ok()?, *v))
        })
        .collect();
    v.sort_by_key(|&(n, _)| n);
    v
}

/// The open-loop rates measured (`mdfan.shm.openloop.<rate>.…` keys: `r20k`, `r1m`, `max`), slowest first.
pub fn openloop_rates(figures: &BTreeMap<String, f64>) -> Vec<String> {
    let mut v: Vec<String> = figures
        .keys()
        .filter_map(|k| k.strip_prefix("mdfan.shm.openloop.")?.split_once('.').map(|(r, _)| r.to_owned()))
        .collect();
    v.sort_by_key(|r| (rate_per_s(r), r.clone()));
    v.dedup();
    v
}

/// A rate key's records/s: `r20k` → 20,000, `r1m` → 1,000,000, `r1500` → 1,500; `max` (and anything else) → `u64::MAX`.
pub fn rate_per_s(key: &str) -> u64 {
    let Some(n) = key.strip_prefix('r') else { return u64::MAX };
    let (digits, scale) = match n.as_bytes().last() {
        Some(b'k') => (&n[..n.len() - 1], 1_000),
        Some(b'm') => (&n[..n.len() - 1], 1_000_000),
        _ => (n, 1),
    };
    digits.parse::<u64>().map_or(u64::MAX, |d| d.saturating_mul(scale))
}

/// A rate key as read: `r20k` → "20k/s", `r1m` → "1M/s", `max` → "max".
pub fn rate_name(key: &str) -> String {
    match key.strip_prefix('r') {
        Some(n) => format!("{}/s", n.strip_suffix('m').map_or_else(|| n.to_owned(), |m| format!("{m}M"))),
        None => key.to_owned(),
    }
}

/// The human name of a measurement key, the one summary.md, report.html and the charts' legends show (the
/// keys stay in summary.json and the flat figures list): `baseline.cacheline` → "cache line (limit)",
/// `mdfan.shm.openloop.r20k.post_to_poll` → "open loop 20k/s: post to poll". An unknown key is its own name.
pub fn display_name(key: &str) -> String {
    let fixed = match key {
        "baseline.cacheline" => "cache line (limit)",
        "mdfan.shm.pingpong" => "mdfan shm",
        "baseline.aeron" => "Aeron IPC (rusteron harness)",
        "baseline.aeron_c" => "Aeron IPC (cping/cpong)",
        "baseline.aeron_best" => "Aeron IPC (the better of the two)",
        "baseline.iceoryx2" => "iceoryx2",
        "mdfan.verbs.pingpong" => "mdfan verbs",
        "baseline.perftest" => "perftest write_with_imm",
        "baseline.dbn_decode" => "DBN decode of the capture file (zstd + DBN)",
        "baseline.dbn_decode_mem" => "DBN decode in memory",
        "mdfan.replay" => "mdfan replay + normalize + fan-out",
        "mdfan.mdp3_decode" => "MDP 3.0 decode + normalize (line A, into the journal)",
        "mdfan.mdp3_decode.packet" => "MDP 3.0 packet to records",
        "baseline.mdp3_sbe" => "MDP 3.0 reference (sbe_gen views of CME's schema)",
        "mdfan.itch_decode" => "ITCH 5.0 decode + normalize (snippet, into the journal)",
        "baseline.itch5_hashmap" => "ITCH 5.0 reference (itch5 parse + std HashMap order table)",
        "baseline.itch5_parse" => "itch5 parse alone (floor)",
        "mdfan.mdp3_loopback" => "MDP 3.0 over loopback UDP to the subscriber",
        "mdfan.mdp3_loopback.wire_to_poll" => "MDP 3.0 over loopback: wire to poll",
        "mdfan.mdp3_loopback.post_to_poll" => "MDP 3.0 over loopback: post to poll",
        "strategy.book_apply" => "pre-allocated book (HotBooks)",
        "baseline.reference_book_apply" => "reference book (Books)",
        _ => "",
    };
    if !fixed.is_empty() {
        return fixed.to_owned();
    }
    let stage = |s: &str| match s {
        "decode_to_post" => "decode to post".to_owned(),
        "post_to_poll" => "post to poll".to_owned(),
        "end_to_end" => "end to end".to_owned(),
        "cycle" => "sender cycle".to_owned(),
        other => other.replace('_', " "),
    };
    if let Some(rest) = key.strip_prefix("mdfan.shm.openloop.") {
        return match rest.split_once('.') {
            Some((rate, s)) => format!("open loop {}: {}", rate_name(rate), stage(s)),
            None => format!("open loop {}", rate_name(rest)),
        };
    }
    let replay = [
        ("mdfan.replay.subs", "mdfan replay"),
        ("mdfan.replay_yield.subs", "mdfan replay (yielding idle)"),
        ("mdfan.replay_hot_feed.subs", "mdfan replay (feed on the hot thread)"),
    ];
    if let Some((rest, name)) = replay.iter().find_map(|(p, name)| Some((key.strip_prefix(p)?, name))) {
        let (n, s) = rest.split_once('.').unwrap_or((rest, ""));
        let subs = if n == "1" { "1 subscriber".to_owned() } else { format!("{n} subscribers") };
        return match s {
            "" => format!("{name}, {subs}"),
            "cycle" => format!("{name}, {subs}: hot loop cycle"),
            s => format!("{name}, {subs}: {}", stage(s)),
        };
    }
    key.to_owned()
}

/// A percentile key suffix as read: `p50` → "p50", `p999` → "p99.9", `p99999` → "p99.999".
pub fn percentile_label(p: &str) -> String {
    match percentile_of(p) {
        Some(v) => format!("p{}", trim_float(v)),
        None => p.to_owned(),
    }
}

/// The percentile a key suffix names, `p50` → 50.0, `p999` → 99.9 (two digits, then the decimals), `p50_ns` too.
pub fn percentile_of(suffix: &str) -> Option<f64> {
    let digits = suffix.strip_prefix('p')?;
    let digits = digits.strip_suffix("_ns").unwrap_or(digits);
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    format!("{}.{}", &digits[..2], &digits[2..]).trim_end_matches('.').parse().ok()
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Whether a figure is a count (printed as an integer): `.count`, `.records`, `.rounds`, `.subscribers`,
/// `.late_posts`, `.attempts`.
pub fn is_count(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    matches!(last, "count" | "records" | "rounds" | "subscribers" | "late_posts" | "attempts")
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
    /// Why the run is not fit for comparison (`host::unfit`): then the target is neither met nor missed.
    pub unfit: Option<String>,
}

impl Target {
    pub fn new(figures: &BTreeMap<String, f64>, what: &str, key: &str, limit: f64, at_most: bool) -> Target {
        Target { what: what.into(), key: key.into(), limit, at_most, value: figures.get(key).copied(), unfit: None }
    }

    /// The same target in a run unfit for comparison for the reasons `why` (none: unchanged).
    pub fn unfit_if(mut self, why: &[String]) -> Target {
        if !why.is_empty() {
            self.unfit = Some(why.join("; "));
        }
        self
    }

    /// Whether the figure is within the limit, whatever the run's fitness.
    pub fn within(&self) -> Option<bool> {
        self.value.map(|v| if self.at_most { v <= self.limit } else { v >= self.limit })
    }

    /// `Some(true)` met, `Some(false)` missed, `None` not measured or not judged (the run unfit).
    pub fn met(&self) -> Option<bool> {
        if self.unfit.is_some() {
            return None;
        }
        self.within()
    }

    /// "met", "missed by 23%", "not measured", or "not judged: the run is unfit for comparison (...)".
    pub fn verdict(&self) -> String {
        if let (Some(why), Some(_)) = (&self.unfit, self.value) {
            return format!("not judged: the run is not fit for comparison ({why})");
        }
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
    std::fs::write(dir.join("summary.md"), markdown(context, figures, targets))?;
    Ok(())
}

/// `summary.md`: the run's context and the headline tables ([`crate::tables`]), the targets, then every figure
/// under its key.
pub fn markdown(context: &serde_json::Value, figures: &BTreeMap<String, f64>, targets: &[Target]) -> String {
    let mut md = String::from("# mdfan-bench summary\n\n");
    for t in crate::tables::all(context, figures) {
        md.push_str(&t.markdown());
    }
    md.push_str("## Targets\n\n| target | figure | limit | measured | verdict |\n|---|---|---:|---:|---|\n");
    for t in targets {
        let v = t.value.map_or("-".into(), |v| format!("{v:.2}"));
        let _ = writeln!(md, "| {} | `{}` | {:.2} | {v} | {} |", t.what, t.key, t.limit, t.verdict());
    }
    md.push_str(
        "\n## All figures\n\nEvery figure under its `summary.json` key (ns unless the key says otherwise).\n\n",
    );
    md.push_str("| figure | value |\n|---|---:|\n");
    for (k, v) in in_reading_order(figures) {
        let _ = writeln!(md, "| `{k}` | {} |", fmt_value(k, *v));
    }
    md
}

/// The figures in reading order: see [`figure_order`].
pub fn in_reading_order(figures: &BTreeMap<String, f64>) -> Vec<(&String, &f64)> {
    let mut v: Vec<_> = figures.iter().collect();
    v.sort_by_cached_key(|(k, _)| figure_order(k));
    v
}

/// A key's place in a listing: keys of one histogram (or one ratio) together, its percentiles in numeric order
/// (p50 < p90 < p99 < p99.9 < p99.99 < p99.999), then `max`, then `count`; other keys as text sorts them.
pub fn figure_order(key: &str) -> (String, u8, u64, String) {
    let (base, last) = key.rsplit_once('.').unwrap_or(("", key));
    let (class, pct) = match (last, percentile_of(last)) {
        (_, Some(p)) => (0, (p * 1e6) as u64),
        ("max_ns" | "max", None) => (1, 0),
        ("count", None) => (2, 0),
        _ => return (key.to_owned(), 0, 0, String::new()),
    };
    (base.to_owned(), class, pct, key.to_owned())
}

/// A figure as text: ratios with two decimals and an `x`, counts as integers, the rest rounded.
pub fn fmt_value(key: &str, v: f64) -> String {
    if key.starts_with("ratio.") {
        fmt_ratio(v)
    } else if is_count(key) || key.ends_with("_ns") {
        format!("{v:.0}")
    } else if v.abs() < 100.0 && v.fract() != 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// A ratio: `6.31x`, `0.043x` below 0.1.
pub fn fmt_ratio(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.1 {
        format!("{v:.3}x")
    } else {
        format!("{v:.2}x")
    }
}

/// A latency in ns with its unit, three significant digits at most: `165 ns`, `22.7 µs`, `2.09 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    let sig = |v: f64, unit: &str| {
        let digits = if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        };
        format!("{v:.digits$} {unit}")
    };
    if ns < 10_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        sig(ns / 1e3, "µs")
    } else if ns < 1e9 {
        sig(ns / 1e6, "ms")
    } else {
        sig(ns / 1e9, "s")
    }
}

/// Records per second: `151.8k/s`, `3.53M/s`.
pub fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k/s", v / 1e3)
    } else {
        format!("{v:.0}/s")
    }
}

/// An integer with thousands separators: `68,792`.
pub fn fmt_int(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// A run folder's `summary.json`: its `context` (`null` when absent) and its figures.
pub struct Summary {
    pub context: serde_json::Value,
    pub figures: BTreeMap<String, f64>,
}

/// Reads a run folder's `summary.json`.
pub fn read_summary(dir: &Path) -> anyhow::Result<Summary> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let figures = v
        .get("figures")
        .and_then(|f| f.as_object())
        .ok_or_else(|| anyhow::anyhow!("{}: no `figures` object", path.display()))?;
    Ok(Summary {
        context: v.get("context").cloned().unwrap_or_default(),
        figures: figures.iter().filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f))).collect(),
    })
}

/// Context keys that differ from run to run on one machine and do not change what the figures mean (the folder of
/// Aeron's cping/cpong depends on the checkout; whether they ran is in `peers_built`).
const VOLATILE_CONTEXT: [&str; 6] =
    ["started_unix_s", "elapsed_s", "verbs_rounds", "pingpong_rounds", "tuning.hugepages_free", "aeron_c_samples"];

/// How two runs' contexts differ, one line per key (`cpu: "AMD EPYC" in A, "Intel Xeon" in B`): the machine,
/// cores, kernel, clock, pinning, peers built and scenario, everything but [`VOLATILE_CONTEXT`]; the capture by
/// file name (its folder depends on the checkout). A key only one run has (a run of an older version, which
/// `version` tells) is not a difference.
pub fn context_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    flatten(&key, v, out);
                }
            }
            serde_json::Value::String(s) if prefix == "capture" => {
                let name = Path::new(s).file_name().map_or(s.clone(), |n| n.to_string_lossy().into_owned());
                out.insert(prefix.to_owned(), serde_json::Value::String(name).to_string());
            }
            other => {
                out.insert(prefix.to_owned(), other.to_string());
            }
        }
    }
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", a, &mut fa);
    flatten("", b, &mut fb);
    let keys: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| !VOLATILE_CONTEXT.iter().any(|v| *k == v || k.starts_with(&format!("{v}."))))
        .filter_map(|k| {
            let (va, vb) = (fa.get(k)?, fb.get(k)?);
            (va != vb).then(|| format!("{k}: {va} in A, {vb} in B"))
        })
        .collect()
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
