//! The report folder as a reader gets it, built from a synthetic run through the same functions `run` uses
//! ([`crate::write_report`] with a [`crate::RunContext`]): the tables, the names, the ratios kept, `compare`;
//! and `report.html` rendered by a headless Chromium when one is installed (skipped, and passing, otherwise).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;

use crate::report::{self, Summary};
use crate::{Recorder, Report, RunContext, Scenario};

/// A fresh, empty folder under the system's temp dir; removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("mdfan-bench-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` values: per 1,000, 980 of `base` ns, 19 of 3 x `base` and one of `tail` (so p50 = `base`, p99 and p99.9 =
/// 3 x `base`, p99.99 = max = `tail` for 5,000 values).
fn hist(base: u64, tail: u64, n: u64) -> Histogram<u64> {
    let mut h = crate::new_histogram();
    for i in 0..n {
        let v = match i % 1000 {
            0 => tail,
            1..=19 => base * 3,
            _ => base,
        };
        h.record(v).unwrap();
    }
    h
}

/// A run with the cache line, mdfan shm and both Aeron IPC measurements (the rusteron harness and Aeron's
/// cping/cpong; no iceoryx2, no verbs), the open loop at 20k/s and max, and the replay to 1 and 2 subscribers,
/// written into `out` as `run` writes its report. cping/cpong is the better Aeron at p50, p99 and p99.9 (200 and
/// 600 ns against 280 and 840), the rusteron harness at p99.99 (28 µs against 40 µs).
fn synthetic_run(out: &Path) -> (Report, serde_json::Value) {
    let start = Instant::now();
    let mut rec = Recorder { run_start: start, run_start_wall: SystemTime::now(), hists: BTreeMap::new() };
    let mut add = |name: &str, h: Histogram<u64>| rec.add(name, start, h);
    add("baseline.cacheline", hist(100, 12_000, 5_000));
    add("mdfan.shm.pingpong", hist(110, 13_000, 5_000));
    add("baseline.aeron", hist(280, 28_000, 5_000));
    add("baseline.aeron_c", hist(200, 40_000, 5_000));
    let mut scalars = crate::Scalars::default();
    for (rate, queue) in [("r20k", 1), ("max", 500)] {
        let base = format!("mdfan.shm.openloop.{rate}");
        add(&format!("{base}.decode_to_post"), hist(800, 50_000, 10_000));
        add(&format!("{base}.post_to_poll"), hist(150 * queue, 2_000_000, 10_000));
        add(&format!("{base}.end_to_end"), hist(160 * queue, 2_100_000, 10_000));
        add(&format!("{base}.cycle"), hist(900, 60_000, 5_000));
        scalars.add(format!("{base}.late_posts"), if queue > 1 { 12.0 } else { 0.0 });
        scalars.add(format!("{base}.rate_per_s"), if queue > 1 { 2_400_000.0 } else { 20_000.0 });
        scalars.add(format!("{base}.sender_ns_per_record_per_sub"), 450.0);
    }
    scalars.add("baseline.dbn_decode.rate_per_s".into(), 3_500_000.0);
    scalars.add("baseline.dbn_decode_mem.rate_per_s".into(), 9_400_000.0);
    scalars.add("baseline.dbn_decode.records".into(), 68_792.0);
    for (stem, subs) in [("replay", 1usize), ("replay", 2), ("replay_yield", 1), ("replay_yield", 2)] {
        let base = format!("mdfan.{stem}.subs{subs}");
        add(&format!("{base}.post_to_poll"), hist(2_000, 900_000, 68_792));
        add(&format!("{base}.cycle"), hist(700, 20_000, 68_792));
        add(&format!("{base}.decode_to_post"), hist(45, 1_400, 68_792));
        let rate_per_s = if stem == "replay" { 4_000_000.0 } else { 6_000_000.0 };
        scalars.add(format!("{base}.rate_per_s"), rate_per_s / subs as f64);
        scalars.add(format!("{base}.records"), 68_792.0);
        scalars.add(format!("{base}.cpu_ns_per_record_per_sub"), 250.0 / subs as f64);
        scalars.add(format!("{base}.blocked_share"), 0.1 * subs as f64);
    }
    scalars.add("mdfan.mdp3_decode.packets_per_s".into(), 10_000_000.0);
    scalars.add("mdfan.mdp3_decode.records_per_s".into(), 11_700_000.0);
    scalars.add("mdfan.mdp3_decode.ns_per_entry".into(), 80.0);
    scalars.add("baseline.mdp3_sbe.ns_per_entry".into(), 20.0);
    scalars.add("mdfan.mdp3_decode.packet_p50_ns".into(), 90.0);
    scalars.add("baseline.mdp3_sbe.packet_p50_ns".into(), 60.0);
    scalars.add("mdfan.mdp3_decode.instructions_per_packet".into(), 1_052.0);
    scalars.add("baseline.mdp3_sbe.instructions_per_packet".into(), 156.0);
    for (stem, snippet, synthetic) in [
        ("mdfan.itch_decode", 40.0, 150.0),
        ("baseline.itch5_hashmap", 20.0, 300.0),
        ("baseline.itch5_parse", 3.0, 4.0),
    ] {
        scalars.add(format!("{stem}.snippet.ns_per_message"), snippet);
        scalars.add(format!("{stem}.synthetic.ns_per_message"), synthetic);
    }
    add("mdfan.mdp3_decode.packet", hist(90, 25_000, 25_000));
    add("mdfan.mdp3_loopback.wire_to_poll", hist(9_000, 900_000, 29_240));
    add("mdfan.mdp3_loopback.post_to_poll", hist(800, 90_000, 29_240));
    scalars.add("mdfan.mdp3_loopback.hardware_stamp".into(), 0.0);
    add("strategy.book_apply", hist(40, 3_000, 68_792));
    add("baseline.reference_book_apply", hist(100, 9_000, 68_792));
    scalars.add("strategy.book_apply.tsc_overhead_ns".into(), 10.0);
    let scenario = Scenario { rounds: 1, count: 5_000, warmup: 500, subscribers: vec![1, 2], ..Scenario::default() };
    let rates = [Some(20_000), None];
    let tuning = mdfan_tuning::TuningReport::read();
    let context = RunContext {
        scenario: &scenario,
        cores: (Some(0), Some(1)),
        tuning: &tuning,
        aeron_c: Some(Path::new("/somewhere/target/release/aeron-samples")),
        verbs_rounds: &[],
        rates: &rates,
        open_loop_subscribers: 2,
        source: "replay",
        capture: Path::new("/somewhere/data/esh4-glbx-mdp3-20231225.mbo.dbn.zst"),
        started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_010_281),
        elapsed: Duration::from_millis(63_400),
    }
    .to_json();
    let threshold = crate::rounds::DEFAULT_STALL_THRESHOLD_NS;
    let report = crate::write_report(out, &context, &rec, &scalars, &[1, 2], &rates, threshold).unwrap();
    (report, context)
}

/// The text of `md` from the line `from` up to (not including) the line `to` (or the end).
fn section<'a>(md: &'a str, from: &str, to: &str) -> &'a str {
    let start = md.find(from).unwrap_or_else(|| panic!("no {from:?} in:\n{md}"));
    let end = md[start..].find(to).map_or(md.len(), |e| start + e);
    &md[start..end]
}

/// No figure key in the text a reader reads first (the keys are in the flat list and the targets only).
fn assert_no_raw_keys(what: &str, text: &str) {
    for raw in ["baseline.", "mdfan.shm", "mdfan.replay", "mdfan.verbs", "ratio.", "openloop", "_ns"] {
        assert!(!text.contains(raw), "{what} shows the raw key {raw:?}:\n{text}");
    }
}

#[test]
fn the_report_leads_with_tables_in_human_names_and_gives_only_like_for_like_ratios() {
    let dir = TempDir::new("report");
    let (report, context) = synthetic_run(&dir.0);
    let md = std::fs::read_to_string(dir.0.join("summary.md")).unwrap();

    // The context is a table, not a JSON line.
    assert!(md.starts_with("# mdfan-bench summary\n\n## Run\n"), "{md}");
    assert!(!md.contains("Context: `{") && !md.contains("\"capture\":"), "{md}");
    let run = section(&md, "## Run", "## One-way latency");
    for row in [
        "| host |",
        "| CPU model |",
        "| cores | 0, 1 (A sends, B receives) |",
        "| clock source |",
        "| kernel |",
        "| tuning | every measuring thread pinned;",
        // what this build has (CI also runs these tests with the peers built), and Aeron's cping/cpong
        "| peers built | ",
        "aeron_c",
        "| rounds | 1 |",
        "| count per round | 5,000 per measurement (after 500 warm-up) |",
        "| duration | 63 s of measuring |",
        "| scenario | open loop at 20k/s, max to 2 subscribers, the capture's records; replay to 1, 2 subscribers |",
        "| started | 2026-11-30 03:44 UTC |",
        "| capture | esh4-glbx-mdp3-20231225.mbo.dbn.zst |",
    ] {
        assert!(run.contains(row), "no {row:?} in:\n{run}");
    }

    // The headline tables, in order, before the targets and the flat list.
    let mut at = 0;
    for heading in [
        "## One-way latency",
        "## mdfan against each baseline",
        "## mdfan against each baseline, round by round",
        "## Book apply per record",
        "## Replay throughput",
        "## Open loop",
        "## MDP 3.0 decode",
        "## MDP 3.0 over loopback UDP",
        "## Ping-pong ratios in each round",
        "## Targets",
        "## All figures",
    ] {
        let found = md[at..].find(heading).unwrap_or_else(|| panic!("no {heading:?} after byte {at}:\n{md}"));
        at += found + heading.len();
    }
    let headline = section(&md, "## One-way latency", "## Targets");
    assert_no_raw_keys("summary.md's headline tables", headline);

    let latency = section(&md, "## One-way latency", "## mdfan against");
    assert!(latency.contains("|  | p50 | p99 | p99.9 | p99.99 | max | samples |"), "{latency}");
    assert!(latency.contains("\n| cache line (limit) | 100 ns |"), "{latency}");
    assert!(latency.contains("\n| mdfan shm | 110 ns |"), "{latency}");
    assert!(
        latency.contains("\n| Aeron IPC (rusteron harness) | 280 ns |") && latency.contains("| 28.0 µs | 5,000 |"),
        "{latency}"
    );
    assert!(latency.contains("\n| Aeron IPC (cping/cpong) | 200 ns | 600 ns | 600 ns | 40.0 µs |"), "{latency}");
    // The better-of-two is no measurement: no row of its own.
    assert!(!latency.contains("better"), "{latency}");
    // Variants this run did not measure are simply not there.
    assert!(!latency.contains("iceoryx2") && !latency.contains("verbs") && !latency.contains("perftest"), "{latency}");

    let ratios = section(&md, "## mdfan against", "## mdfan against each baseline, round by round");
    assert!(ratios.contains("\n| mdfan shm | cache line (limit) | 1.10x |"), "{ratios}");
    assert!(ratios.contains("\n| mdfan shm | Aeron IPC (rusteron harness) | 0.39x |"), "{ratios}");
    assert!(ratios.contains("\n| mdfan shm | Aeron IPC (cping/cpong) | 0.55x | 0.55x | 0.55x | 0.32x |"), "{ratios}");
    assert!(ratios.contains("\n| mdfan shm | Aeron IPC (the better of the two) | 0.55x | 0.55x | 0.55x | 0.46x |"));
    assert!(
        ratios.contains(
            "The better Aeron IPC figure, which the targets use: p50 Aeron IPC (cping/cpong), p99 Aeron IPC \
             (cping/cpong), p99.9 Aeron IPC (cping/cpong), p99.99 Aeron IPC (rusteron harness)."
        ),
        "{ratios}"
    );
    assert_eq!(ratios.matches("\n| mdfan").count(), 4, "{ratios}");
    // The better-of-two figures, percentile by percentile, and the Aeron targets read them and say which it was.
    for (p, from) in [("p50", "aeron_c"), ("p99", "aeron_c"), ("p999", "aeron_c"), ("p9999", "aeron")] {
        let best = report.figures[&format!("baseline.aeron_best.{p}_ns")];
        assert_eq!(best, report.figures[&format!("baseline.{from}.{p}_ns")], "{p}");
    }
    assert_eq!(report.figures["baseline.aeron_best.p50_ns"], 200.0);
    let aeron_target = |key: &str| report.targets.iter().find(|t| t.key == key).unwrap_or_else(|| panic!("{key}"));
    let t = aeron_target("ratio.mdfan.shm.pingpong_vs_baseline.aeron_best.p999");
    assert_eq!(
        (t.what.as_str(), t.value, t.met()),
        (
            "shm one-way p99.9 <= 0.7x the better Aeron IPC figure (here Aeron IPC (cping/cpong))",
            Some(330.0 / 600.0),
            Some(true)
        )
    );
    let t = aeron_target("ratio.mdfan.shm.pingpong_vs_baseline.aeron_best.p50");
    assert_eq!((t.limit, t.value, t.met()), (1.0, Some(110.0 / 200.0), Some(true)));

    // One round: the medians are that round's ratios, with no spread; nothing flagged.
    let by_round = section(&md, "## mdfan against each baseline, round by round", "## Book apply");
    assert!(by_round.contains("over 1 of 1 rounds; 0 flagged (cache-line max above 1.00 ms)"), "{by_round}");
    assert!(by_round.contains("\n| mdfan shm | cache line (limit) | 1.10x (1.10x to 1.10x) |"), "{by_round}");
    let book = section(&md, "## Book apply per record", "## Replay throughput");
    assert!(book.contains("\n| pre-allocated book (HotBooks) | 40 ns | 120 ns |"), "{book}");
    assert!(book.contains("\n| reference book (Books) | 100 ns |") && book.contains("p50 0.40x"), "{book}");
    let each = section(&md, "## Ping-pong ratios in each round", "## Targets");
    assert!(each.contains("| round | cache-line max | cache line (limit) p50 |"), "{each}");
    assert!(each.contains("\n| 1 | 12.0 µs | 1.10x | 1.10x | 1.10x | 0.39x |"), "{each}");
    assert!(each.contains("Flagged: none."), "{each}");
    assert_eq!(report.figures["ratio.mdfan.shm.pingpong_vs_baseline.cacheline.merged.p50"], 1.1);
    assert_eq!(report.figures["pingpong.stalled.rounds"], 0.0);

    let throughput = section(&md, "## Replay throughput", "## Open loop");
    assert!(throughput.contains("The capture decoded alone: 3.50M/s from the file (zstd + DBN), 9.40M/s in memory."));
    assert!(throughput.contains("\n| spin | 1 | 4.00M/s | 1.14x | 0.43x | 250 | 10% |"), "{throughput}");
    assert!(throughput.contains("\n| spin | 2 | 2.00M/s | 0.57x | 0.21x | 125 | 20% |"), "{throughput}");
    assert!(throughput.contains("\n| yield | 1 | 6.00M/s | 1.71x | 0.64x | 250 | 10% |"), "{throughput}");
    assert!(throughput.contains("\n| yield | 2 | 3.00M/s | 0.86x | 0.32x | 125 | 20% |"), "{throughput}");

    let open = section(&md, "## Open loop", "## MDP 3.0 decode");
    let rows: Vec<&str> = open.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| rate asked")).collect();
    assert_eq!(rows.len(), 2, "{open}");
    assert!(rows[0].starts_with("| 20k/s | 20.0k/s |") && rows[1].starts_with("| max | 2.40M/s |"), "{open}");

    // MDP 3.0: mdfan against the sbe_gen reference per packet and per entry, with callgrind's counts
    let mdp3 = section(&md, "## MDP 3.0 decode", "## MDP 3.0 over loopback");
    assert!(mdp3.contains("\n| mdfan decode + normalize | 90.0 ns | 80.0 ns | 1052 | - |"), "{mdp3}");
    assert!(mdp3.contains("\n| mdfan / reference (target <= 1.5x) | 1.50x | 4.00x | 6.74x | - |"), "{mdp3}");
    assert_eq!(report.figures["ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_entry"], 4.0);
    let itch = section(&md, "## ITCH 5.0 decode", "## The shm one-way path");
    assert!(itch.contains("\n| snippet (1,000 messages) | 40.0 ns | 20.0 ns | 3.0 ns | 2.00x |"), "{itch}");
    assert!(itch.contains("\n| synthetic day, 1M live orders | 150.0 ns | 300.0 ns | 4.0 ns | 0.50x |"), "{itch}");
    let target = |key: &str| report.targets.iter().find(|t| t.key == key).unwrap_or_else(|| panic!("no {key}"));
    let t = target("ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_packet");
    assert_eq!((t.met(), t.verdict().as_str()), (Some(true), "met"));
    let t = target("ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_entry");
    assert_eq!((t.met(), t.verdict().as_str()), (Some(false), "missed by 167%"));
    assert_eq!(target("ratio.mdfan.itch_decode_vs_baseline.itch5_hashmap.synthetic").met(), Some(true));
    // and wire-to-poll beside post-to-poll, each with its clock
    let lb = section(&md, "## MDP 3.0 over loopback", "## Ping-pong ratios in each round");
    assert!(lb.contains("\n| wire to poll | realtime (sw stamp) | 9007 ns |"), "{lb}");
    assert!(lb.contains("\n| post to poll | tsc | 800 ns |") && lb.contains("| 29,240 |"), "{lb}");
    let replay = |stem: &str| {
        let key = format!("ratio.mdfan.{stem}.subs2_vs_baseline.dbn_decode.rate");
        let t = report.targets.iter().find(|t| t.key == key).unwrap_or_else(|| panic!("no target {key}"));
        (t.met(), t.verdict())
    };
    assert_eq!(replay("replay").0, Some(false));
    assert_eq!(replay("replay_yield").0, Some(true), "0.86x against 0.8x: {:?}", replay("replay_yield").1);

    // The flat list keeps every key, percentiles in numeric order, counts as integers.
    let all = section(&md, "## All figures", "\n\n\n");
    let p = |k: &str| all.find(&format!("| `{k}` |")).unwrap_or_else(|| panic!("no {k} in:\n{all}"));
    assert!(p("baseline.cacheline.p99_ns") < p("baseline.cacheline.p999_ns"));
    assert!(p("baseline.cacheline.p99999_ns") < p("baseline.cacheline.max_ns"));
    assert!(all.contains("| `mdfan.replay.subs1.records` | 68792 |"), "{all}");

    // Only like-for-like ratios: ping-pong against ping-pong, the replay's rate against the decode's.
    let ratio_keys: Vec<&String> = report.figures.keys().filter(|k| k.starts_with("ratio.")).collect();
    assert!(!ratio_keys.is_empty());
    for k in &ratio_keys {
        let pingpong = report::PINGPONG_RATIOS.iter().any(|(n, d)| k.starts_with(&format!("ratio.{n}_vs_{d}.")));
        let replay = report::REPLAY_STEMS.iter().any(|stem| k.starts_with(&format!("ratio.mdfan.{stem}.subs")))
            && k.ends_with(".rate");
        let mdp3 = k.starts_with("ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.");
        let itch = k.starts_with("ratio.mdfan.itch_decode_vs_baseline.itch5_");
        let book = k.starts_with("ratio.strategy.book_apply_vs_baseline.reference_book_apply.");
        assert!(pingpong || replay || mdp3 || itch || book, "a ratio that is not like for like: {k}");
        assert!(!k.contains("openloop"), "{k}");
    }
    assert!(!md.contains("openloop.max.post_to_poll_vs"), "{md}");

    // summary.json: the context as it was (every key other tools read), the figures, the targets.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("summary.json")).unwrap()).unwrap();
    // ... plus the per-round ping-pong ratios, written with the report
    let mut written = json["context"].clone();
    let rounds = written.as_object_mut().unwrap().remove("pingpong_rounds").expect("context.pingpong_rounds");
    assert_eq!(written, context);
    assert_eq!(rounds["flagged"], serde_json::json!([]));
    assert_eq!(rounds["rounds"][0]["ratios"]["mdfan.shm.pingpong_vs_baseline.cacheline"]["p50"], 1.1);
    for key in [
        "cores",
        "pinning",
        "clock",
        "clocksource",
        "fabric",
        "verbs_rounds",
        "rounds",
        "duration_ms",
        "peers_built",
        "kernel",
        "count_per_round",
        "warmup",
        "rates",
        "subscribers",
        "open_loop_subscribers",
        "source",
        "capture",
        "tuning",
        "host",
        "cpu",
        "started_unix_s",
        "version",
    ] {
        assert!(json["context"].get(key).is_some(), "summary.json's context lost {key:?}");
    }
    assert_eq!(json["figures"].as_object().unwrap().len(), report.figures.len());
    assert_eq!(json["targets"].as_array().unwrap().len(), report.targets.len());

    // The charts' legends and the page: human names, never keys.
    let legends = [
        (1, &["cache line (limit)", "mdfan shm", "Aeron IPC (rusteron harness)", "Aeron IPC (cping/cpong)"][..]),
        (2, &["open loop 20k/s: decode to post", "open loop 20k/s: post to poll"][..]),
        (3, &["mdfan replay + normalize + fan-out", "DBN decode of the capture file (zstd + DBN)"][..]),
    ];
    for (n, names) in legends {
        let svg = std::fs::read_to_string(dir.0.join(format!("chart-{n}.svg"))).unwrap();
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>').map(|(_, rest)| rest.split('<').next().unwrap_or_default().trim()))
            .collect();
        for name in names {
            assert!(texts.contains(name), "chart-{n}.svg has no {name:?}: {texts:?}");
        }
        for t in &texts {
            assert!(!t.starts_with("baseline.") && !t.starts_with("mdfan.") && !t.contains("_vs_"), "chart-{n}: {t:?}");
        }
        // queueing times are not drawn beside the cache line's hand-off
        assert!(n != 2 || !texts.contains(&"cache line (limit)"), "chart-2.svg draws the cache line: {texts:?}");
    }
    let html = std::fs::read_to_string(dir.0.join("report.html")).unwrap();
    assert!(!html.contains("&quot;capture&quot;") && !html.contains("{\"capture\""), "raw context in report.html");
    assert!(html.contains("<th scope=row>CPU model</th>") && html.contains("<th scope=row>mdfan shm</th>"));
    assert_eq!(html.matches("<svg").count(), 3);
    let headline = section(&html, "<h2>One-way latency</h2>", "<h2>Targets</h2>");
    assert_no_raw_keys("report.html's tables", headline.split("<svg").next().unwrap_or_default());
}

#[test]
fn compare_orders_percentiles_numerically_prints_counts_as_integers_and_warns_on_other_contexts() {
    let figures = |scale: f64| -> BTreeMap<String, f64> {
        [
            ("x.p9999_ns", 900.0),
            ("x.p50_ns", 100.0),
            ("x.max_ns", 1000.0),
            ("x.p999_ns", 500.0),
            ("x.p90_ns", 120.0),
            ("x.count", 20_000.0),
            ("x.p99_ns", 200.0),
            ("x.p99999_ns", 950.0),
            ("mdfan.replay.subs2.records", 68_792.0),
            ("mdfan.replay.subs2.rate_per_s", 1_234_567.5),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v * scale))
        .collect()
    };
    let context = |cpu: &str, pinning: &str| {
        serde_json::json!({"cpu": cpu, "cores": [0, 1], "kernel": "6.1", "clock": "tsc", "pinning": pinning,
            "peers_built": [], "started_unix_s": 1, "tuning": {"hugepages_free": 3, "isolcpus": null},
            "capture": "/a/esh4.dbn.zst", "aeron_c_samples": "/a/target/release/aeron-samples"})
    };
    let a = Summary { context: context("AMD EPYC", "every measuring thread pinned"), figures: figures(1.0) };
    let mut b_context = context("Intel Xeon", "every measuring thread pinned");
    b_context["started_unix_s"] = 2.into(); // differs every run: no warning
    b_context["tuning"]["hugepages_free"] = 0.into(); // ditto
    b_context["capture"] = "/b/esh4.dbn.zst".into(); // the same capture in another checkout
    b_context["aeron_c_samples"] = "/b/target/release/aeron-samples".into(); // ditto, cping/cpong's folder
    b_context["peers_built"] = serde_json::json!(["aeron"]);
    b_context["replay"] = true.into(); // a key A's (older) version did not write: no warning
    let b = Summary { context: b_context, figures: figures(2.0) };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    crate::compare_to(&a, &b, &mut out, &mut err);
    let (out, err) = (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap());
    assert_eq!(
        err,
        "mdfan-bench: warning: the runs' contexts differ: cpu: \"AMD EPYC\" in A, \"Intel Xeon\" in B\n\
         mdfan-bench: warning: the runs' contexts differ: peers_built: [] in A, [\"aeron\"] in B\n"
    );
    let keys: Vec<&str> = out.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(
        keys,
        [
            "mdfan.replay.subs2.rate_per_s",
            "mdfan.replay.subs2.records",
            "x.p50_ns",
            "x.p90_ns",
            "x.p99_ns",
            "x.p999_ns",
            "x.p9999_ns",
            "x.p99999_ns",
            "x.max_ns",
            "x.count",
        ]
    );
    let row = |k: &str| {
        out.lines().find(|l| l.starts_with(&format!("{k} "))).unwrap().split_whitespace().skip(1).collect::<Vec<_>>()
    };
    assert_eq!(row("x.count"), ["20000", "40000", "2.00"]);
    assert_eq!(row("mdfan.replay.subs2.records"), ["68792", "137584", "2.00"]);
    assert_eq!(row("x.p50_ns"), ["100", "200", "2.00"]);
    assert_eq!(row("mdfan.replay.subs2.rate_per_s"), ["1234567.50", "2469135.00", "2.00"]);

    let same = Summary { context: a.context.clone(), figures: BTreeMap::new() };
    let mut err = Vec::new();
    crate::compare_to(&a, &same, &mut Vec::new(), &mut err);
    assert!(err.is_empty(), "{}", String::from_utf8_lossy(&err));
}

#[test]
fn figures_format_for_a_reader() {
    assert_eq!(report::fmt_ns(165.0), "165 ns");
    assert_eq!(report::fmt_ns(9_999.0), "9999 ns");
    assert_eq!(report::fmt_ns(22_703.0), "22.7 µs");
    assert_eq!(report::fmt_ns(2_088_959.0), "2.09 ms");
    assert_eq!(report::fmt_ns(427_032_575.0), "427 ms");
    assert_eq!(report::fmt_ns(1_200_000_000.0), "1.20 s");
    assert_eq!(report::fmt_rate(151_828.0), "151.8k/s");
    assert_eq!(report::fmt_int(68_792.0), "68,792");
    assert_eq!(report::fmt_int(999.0), "999");
    assert_eq!(report::percentile_label("p9999"), "p99.99");
    assert_eq!(report::percentile_label("p50"), "p50");
    assert_eq!(report::rate_per_s("r20k"), 20_000);
    assert_eq!(report::rate_per_s("r1m"), 1_000_000);
    assert_eq!(report::rate_name("r1m"), "1M/s");
    assert_eq!(report::fmt_value("mdfan.replay.subs1.records", 68_792.0), "68792");
    for (key, name) in [
        ("baseline.cacheline", "cache line (limit)"),
        ("mdfan.shm.pingpong", "mdfan shm"),
        ("baseline.aeron", "Aeron IPC (rusteron harness)"),
        ("baseline.aeron_c", "Aeron IPC (cping/cpong)"),
        ("baseline.aeron_best", "Aeron IPC (the better of the two)"),
        ("baseline.iceoryx2", "iceoryx2"),
        ("mdfan.verbs.pingpong", "mdfan verbs"),
        ("baseline.perftest", "perftest write_with_imm"),
        ("mdfan.shm.openloop.max.end_to_end", "open loop max: end to end"),
        ("mdfan.replay.subs1.cycle", "mdfan replay, 1 subscriber: hot loop cycle"),
        ("mdfan.replay_yield.subs2", "mdfan replay (yielding idle), 2 subscribers"),
    ] {
        assert_eq!(report::display_name(key), name);
    }
}

#[test]
fn progress_is_hidden_when_stderr_is_not_a_terminal() {
    let p = crate::Progress::new(&Scenario::default(), 4, true, false);
    assert!(p.bar.is_hidden());
    assert_eq!(p.step("baseline.cacheline", || 7), 7);
    assert_eq!(p.bar.position(), 1);
    // 3 rounds of: cache line, the peers built and Aeron's cping/cpong, mdfan shm, the shm probes, 4 rates, DBN
    // decode, 3 replays spinning and 3 yielding, the fan-out and its store limit at 1, 2, 4, 8 and 16
    // subscribers, MDP 3.0 rates and per-packet latency, MDP 3.0 over loopback, book apply.
    let peers = u64::from(cfg!(feature = "aeron")) + u64::from(cfg!(feature = "iceoryx2")) + 1;
    assert_eq!(p.bar.length(), Some(3 * (1 + peers + 2 + 4 + 1 + 2 * 3 + 2 * 5 + 3 + 1)));
}

/// A Chromium (or Chrome) binary: `$MDFAN_CHROMIUM`, else the first of the usual names on `PATH`.
fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MDFAN_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

/// Prints past the test harness's capture, so a skip shows in a plain `cargo test`.
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// What the page reports of itself: put before `</body>`, it records every `<svg>`'s rendered size and
/// visibility and the errors the page raised (a resource that did not load, a script error) into `<pre id=probe>`,
/// which `--dump-dom` prints.
const PROBE_HEAD: &str = "<script>window.__errors=[];window.addEventListener('error',function(e){\
    __errors.push(String(e.message||(e.target&&(e.target.src||e.target.href))||e.type));},true);</script>";
const PROBE_BODY: &str = "<script>(function(){var out={errors:window.__errors,svgs:[],tables:\
    document.querySelectorAll('table').length,h1:(document.querySelector('h1')||{}).textContent};\
    document.querySelectorAll('svg').forEach(function(s){var r=s.getBoundingClientRect(),cs=getComputedStyle(s);\
    out.svgs.push({w:r.width,h:r.height,shown:cs.display!=='none'&&cs.visibility!=='hidden'&&cs.opacity!=='0',\
    lines:s.querySelectorAll('polyline,path').length,texts:s.querySelectorAll('text').length});});\
    var p=document.createElement('pre');p.id='probe';p.textContent=JSON.stringify(out);document.body.appendChild(p);})();\
    </script>";

#[test]
fn the_html_report_renders_in_headless_chromium() {
    let Some(chromium) = find_chromium() else {
        say("SKIP the_html_report_renders_in_headless_chromium: no chromium binary (apt-get install chromium, \
             or set MDFAN_CHROMIUM)");
        return;
    };
    let dir = TempDir::new("chromium");
    synthetic_run(&dir.0);
    let html = std::fs::read_to_string(dir.0.join("report.html")).unwrap();
    assert!(html.contains("<head>") && html.contains("</body>"));
    let probed = html.replacen("<head>", &format!("<head>{PROBE_HEAD}"), 1).replacen(
        "</body>",
        &format!("{PROBE_BODY}</body>"),
        1,
    );
    let page = dir.0.join("probed-report.html");
    std::fs::write(&page, probed).unwrap();
    let profile = dir.0.join("profile");
    let (stdout, stderr) = (dir.0.join("chromium.out"), dir.0.join("chromium.err"));
    let mut child = std::process::Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", chromium.display()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish within 120 s", chromium.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (dom, log) = (std::fs::read_to_string(&stdout).unwrap(), std::fs::read_to_string(&stderr).unwrap());
    assert!(status.success(), "{} exited with {status}:\n{log}", chromium.display());

    // The page's own console messages (the report has no script: any at all is an error, such as an SVG
    // attribute the renderer rejects).
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages:\n{}", console.join("\n"));

    let probe = dom
        .split_once("<pre id=\"probe\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(p, _)| p.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("the page did not render (no probe in the DOM):\n{dom}\n{log}"));
    let probe: serde_json::Value = serde_json::from_str(&probe).unwrap_or_else(|e| panic!("{e}: {probe}"));
    assert_eq!(probe["errors"], serde_json::json!([]), "{probe}");
    assert_eq!(probe["h1"], "mdfan-bench report", "{probe}");
    assert!(probe["tables"].as_u64().unwrap() >= 7, "{probe}");
    let svgs = probe["svgs"].as_array().unwrap();
    assert_eq!(svgs.len(), 3, "{probe}");
    for s in svgs {
        let (w, h) = (s["w"].as_f64().unwrap(), s["h"].as_f64().unwrap());
        assert!(w > 100.0 && h > 100.0, "a chart renders {w} x {h}: {s}");
        assert_eq!(s["shown"], true, "{s}");
        assert!(s["lines"].as_u64().unwrap() >= 1 && s["texts"].as_u64().unwrap() >= 5, "an empty chart: {s}");
    }
    assert!(dom.contains("cache line (limit)") && dom.contains("<h2>Replay throughput</h2>"));
    say(&format!("the_html_report_renders_in_headless_chromium: rendered by {}", chromium.display()));
}

#[test]
fn the_bundled_scenarios_parse_and_the_full_one_has_many_short_rounds() {
    let full: Scenario = toml::from_str(include_str!("../scenarios/full.toml")).unwrap();
    assert_eq!((full.rounds, full.count, full.stall_threshold_ns), (25, 20_000, 1_000_000));
    let smoke: Scenario = toml::from_str(include_str!("../scenarios/smoke.toml")).unwrap();
    assert_eq!(smoke.stall_threshold_ns, crate::rounds::DEFAULT_STALL_THRESHOLD_NS);
}

/// HdrHistogram_py's percentile rule (`get_target_count_at_percentile`, `get_value_at_percentile`), as it reads a
/// `.hlog`: rank `int(p * N / 100 + 0.5)` (at least 1), the highest equivalent value of the bucket reaching it.
fn hdrhistogram_py_value_at(h: &Histogram<u64>, percentile: f64) -> u64 {
    let rank = ((percentile * h.len() as f64 / 100.0 + 0.5) as u64).max(1);
    let mut seen = 0;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= rank {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    0
}

#[test]
fn every_percentile_follows_hdrhistogram_py_where_the_crate_takes_the_rank_up() {
    // 68,825 values (a replay's post-to-poll count): p99.99 is rank 68,818.1 -> HdrHistogram_py 68,818, the
    // crate's value_at_quantile ceil() 68,819; a sparse tail puts those two ranks in different buckets.
    let mut h = crate::new_histogram();
    for i in 0..68_825u64 {
        h.record(if i < 68_818 { 100 } else { 10_000 + i }).unwrap();
    }
    let py = hdrhistogram_py_value_at(&h, 99.99);
    assert_eq!(py, h.highest_equivalent(100));
    assert_ne!(h.value_at_quantile(0.9999), py, "the crate's rule differs here");
    assert_eq!(report::value_at(&h, 0.9999), py);
    for (key, q) in report::PERCENTILES {
        for n in [1u64, 7, 5_000, 20_000, 68_825, 731_000] {
            let mut h = crate::new_histogram();
            for i in 0..n {
                h.record(1 + (i * 7_919) % 100_000).unwrap();
            }
            assert_eq!(report::value_at(&h, q), hdrhistogram_py_value_at(&h, q * 100.0), "{key} of {n}");
        }
    }
    // and, where HdrHistogram_py is installed (pip install hdrhistogram), the .hlog read back by it
    let dir = TempDir::new("hlog");
    let mut iv = report::Intervals::default();
    iv.0.push((Duration::ZERO, Duration::from_secs(1), h.clone()));
    std::fs::write(dir.0.join("x.hlog"), report::hlog("x", SystemTime::now(), &iv).unwrap()).unwrap();
    let script = "import sys\nfrom hdrh.log import HistogramLogReader\nfrom hdrh.histogram import HdrHistogram\n\
                  acc = HdrHistogram(1, 10000000000, 3)\nr = HistogramLogReader(sys.argv[1], acc)\n\
                  while r.add_next_interval_histogram() is not None: pass\nprint(acc.get_value_at_percentile(99.99))\n";
    match std::process::Command::new("python3").arg("-c").arg(script).arg(dir.0.join("x.hlog")).output() {
        Ok(o) if o.status.success() => {
            let v: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
            assert_eq!(v, report::value_at(&h, 0.9999), "HdrHistogram_py read the .hlog");
        }
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'hdrh'") => {
            say("HdrHistogram_py not installed: the .hlog read-back skipped (pip install hdrhistogram)")
        }
        Ok(o) => panic!("HdrHistogram_py on the .hlog: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => say(&format!("no python3 ({e}): the .hlog read-back skipped")),
    }
}

#[test]
fn report_html_has_every_section_of_summary_md_and_a_flagged_round_is_named() {
    let dir = TempDir::new("sections");
    synthetic_run(&dir.0);
    let md = std::fs::read_to_string(dir.0.join("summary.md")).unwrap();
    let html = std::fs::read_to_string(dir.0.join("report.html")).unwrap();
    let sections: Vec<&str> = md.lines().filter_map(|l| l.strip_prefix("## ")).collect();
    assert!(sections.contains(&"ITCH 5.0 decode") && sections.contains(&"MDP 3.0 decode"), "{sections:?}");
    for s in sections {
        assert!(html.contains(&format!("<h2>{}</h2>", crate::tables::escape(s))), "report.html lacks {s:?}");
    }
    let round = |n: usize, flagged: bool| crate::rounds::Round {
        round: n,
        stall_probe_max_ns: Some(if flagged { 4.1e6 } else { 9e3 }),
        flagged,
        ratios: BTreeMap::new(),
    };
    let one =
        crate::rounds::PingpongRounds { threshold_ns: 1_000_000, rounds: vec![round(10, false), round(11, true)] };
    let t = crate::tables::rounds(&serde_json::json!({ "pingpong_rounds": one.to_json() })).unwrap();
    assert!(t.note.ends_with("Flagged: round 11."), "{}", t.note);
    let two = crate::rounds::PingpongRounds { threshold_ns: 1_000_000, rounds: vec![round(3, true), round(11, true)] };
    let t = crate::tables::rounds(&serde_json::json!({ "pingpong_rounds": two.to_json() })).unwrap();
    assert!(t.note.ends_with("Flagged: 2 rounds: 3, 11."), "{}", t.note);
}

#[test]
fn scalar_targets_read_the_median_of_per_round_ratios_and_an_unfit_run_meets_none() {
    // two rounds whose replay and decode each move: the ratio of the medians (upper middle of 2: 6M / 12M = 0.5)
    // is not the median of the rounds' ratios (0.8 and 0.25: upper middle 0.8)
    let mut s = crate::Scalars::default();
    for (replay, decode) in [(8e6, 10e6), (3e6, 12e6)] {
        s.start_round();
        s.add("mdfan.replay_hot_feed.subs2.rate_per_s".into(), replay);
        s.add("baseline.dbn_decode.rate_per_s".into(), decode);
    }
    let r = s.per_round_ratios();
    assert_eq!(r["ratio.mdfan.replay_hot_feed.subs2_vs_baseline.dbn_decode.rate"], 0.8);
    let mut f = s.medians();
    f.extend(r);
    f.insert("host.cores".into(), 2.0);
    let t = crate::targets(&f);
    let hot_feed = t.iter().find(|t| t.key == "ratio.mdfan.replay_hot_feed.subs2_vs_baseline.dbn_decode.rate").unwrap();
    assert_eq!((hot_feed.value, hot_feed.met()), (Some(0.8), Some(true)));
    // 9 of 25 rounds stalled: more than a third, nothing is judged
    f.insert("pingpong.rounds".into(), 25.0);
    f.insert("pingpong.stalled.rounds".into(), 9.0);
    let t = crate::targets(&f);
    let hot_feed = t.iter().find(|t| t.key.contains("replay_hot_feed")).unwrap();
    assert_eq!(hot_feed.met(), None);
    assert!(hot_feed.verdict().starts_with("not judged: the run is not fit for comparison (9 of 25 rounds stalled"));
}
