//! `mdfan-bench`: mdfan's latency beside the physical limit, measured interleaved in one run.
//!
//! ```text
//! mdfan-bench run --out DIR [--rounds 3] [--count 20000] [--warmup 2000] [--rate 100000] [--cores 0,1]
//! mdfan-bench compare RUN_A RUN_B
//! ```
//!
//! A run measures, in each round and in this order, on the same two pinned cores:
//! - `baseline.cacheline`: a cache-line ping-pong, one-way = round trip / 2 (the physical limit);
//! - `mdfan.shm.pingpong`: mdfan's shm WRITE-with-immediate + CQ poll + in-place read, one record each way,
//!   one-way = round trip / 2;
//! - `mdfan.shm.openloop.post_to_poll` / `.end_to_end`: records at a fixed rate through one ring; end to end
//!   counts from the intended send time (coordinated omission corrected).
//!
//! The machine is shared and noisy, so only ratios within one run mean anything: `ratio.<a>_vs_<b>.<pNN>`.
//! The folder gets one `.hgrm` per histogram, `summary.json` (stable keys) and `summary.md`.
//!
//! Not yet here (issue 5): Aeron IPC and iceoryx2 baselines, verbs and perftest, the replay-driven throughput
//! scenario, per-stage feed-decode histograms, `.hlog` interval logs, the HTML/SVG report, criterion benches.
#![forbid(unsafe_code)]

#[cfg(feature = "aeron")]
mod aeron;
#[cfg(feature = "iceoryx2")]
mod iceoryx2;
mod pingpong;
mod report;
mod shm;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;

/// Pins the calling thread to `core`, if given; a failure is reported (the figures would mean less) but the
/// run goes on.
pub(crate) fn pin(core: Option<usize>) {
    if let Some(c) = core {
        if let Err(e) = mdfan_tuning::pin_current_thread(c) {
            eprintln!("mdfan-bench: warning: {e}");
        }
    }
}

/// 1 ns .. 10 s, 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds are valid")
}

#[derive(Parser)]
#[command(name = "mdfan-bench", version, about = "mdfan latency beside baselines of the same run")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure and write a report folder.
    Run {
        /// Report folder (created).
        #[arg(long)]
        out: PathBuf,
        /// Rounds; each runs every measurement once, interleaved.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Measured messages per measurement per round.
        #[arg(long, default_value_t = 20_000)]
        count: u64,
        /// Warm-up messages before each measurement (not recorded).
        #[arg(long, default_value_t = 2_000)]
        warmup: u64,
        /// Open-loop rate, records per second.
        #[arg(long, default_value_t = 100_000)]
        rate: u64,
        /// The two cores, `A,B` (default: the first two this process may use).
        #[arg(long, value_delimiter = ',')]
        cores: Vec<usize>,
        /// Folder for the shm rings.
        #[arg(long, default_value = mdfan_fabric::shm::DEFAULT_DIR)]
        shm_dir: PathBuf,
    },
    /// Print two runs' figures side by side with the ratio B/A.
    Compare {
        /// The earlier run's folder.
        a: PathBuf,
        /// The later run's folder.
        b: PathBuf,
    },
}

fn main() {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Run { out, rounds, count, warmup, rate, cores, shm_dir } => {
            run(&out, rounds, count, warmup, rate, &cores, &shm_dir)
        }
        Cmd::Compare { a, b } => compare(&a, &b),
    };
    if let Err(e) = result {
        eprintln!("mdfan-bench: error: {e}");
        std::process::exit(1);
    }
}

fn run(
    out: &std::path::Path,
    rounds: u32,
    count: u64,
    warmup: u64,
    rate: u64,
    cores: &[usize],
    shm_dir: &std::path::Path,
) -> anyhow::Result<()> {
    let tuning = mdfan_tuning::TuningReport::read(); // before any pinning narrows this thread's mask
    let allowed = mdfan_tuning::allowed_cores();
    let (a, b) = match cores {
        [a, b] => (Some(*a), Some(*b)),
        [] if allowed.len() >= 2 => (Some(allowed[0]), Some(allowed[1])),
        [] => (None, None),
        other => anyhow::bail!("--cores takes two cores, got {other:?}"),
    };
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    let mut hists: BTreeMap<&str, Histogram<u64>> = BTreeMap::new();
    let mut late_posts = 0;
    for round in 1..=rounds {
        eprintln!("mdfan-bench: round {round}/{rounds}");
        let h = pingpong::run(a, b, warmup, count);
        merge(&mut hists, "baseline.cacheline", &h);
        let h = shm::pingpong(shm_dir, a, b, warmup, count)?;
        merge(&mut hists, "mdfan.shm.pingpong", &h);
        let o = shm::open_loop(shm_dir, a, b, rate, warmup, count)?;
        merge(&mut hists, "mdfan.shm.openloop.post_to_poll", &o.post_to_poll);
        merge(&mut hists, "mdfan.shm.openloop.end_to_end", &o.end_to_end);
        late_posts += o.late_posts;
    }
    let mut figures = BTreeMap::new();
    for (name, h) in &hists {
        std::fs::write(out.join(format!("{name}.hgrm")), report::hgrm(h))?;
        report::add_figures(&mut figures, name, h);
    }
    report::add_ratios(&mut figures, "mdfan.shm.pingpong", "baseline.cacheline");
    report::add_ratios(&mut figures, "mdfan.shm.openloop.post_to_poll", "baseline.cacheline");
    figures.insert("mdfan.shm.openloop.late_posts".into(), late_posts as f64);
    figures.insert("mdfan.shm.openloop.rate_per_s".into(), rate as f64);
    let context = serde_json::json!({
        "cores": [a, b],
        "clock": "tsc",
        "rounds": rounds,
        "count_per_round": count,
        "warmup": warmup,
        "tuning": tuning,
        "host": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        "cpu": cpu_model(),
    });
    report::write_summary(out, &context, &figures)?;
    for (k, v) in &figures {
        if k.starts_with("ratio.") {
            println!("{k}={v:.2}");
        } else {
            println!("{k}={v:.0}");
        }
    }
    println!("report={}", out.display());
    Ok(())
}

fn merge(hists: &mut BTreeMap<&'static str, Histogram<u64>>, name: &'static str, h: &Histogram<u64>) {
    hists.entry(name).or_insert_with(new_histogram).add(h).expect("same bounds");
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned()))
        .unwrap_or_default()
}

fn compare(a: &std::path::Path, b: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let (fa, fb) = (report::read_figures(a)?, report::read_figures(b)?);
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) ends the listing quietly.
    let mut line = |s: String| writeln!(out, "{s}").is_ok();
    line(format!("{:<60} {:>14} {:>14} {:>8}", "figure", "A", "B", "B/A"));
    for (k, va) in &fa {
        let row = match fb.get(k) {
            Some(vb) => {
                let ratio = if *va != 0.0 { format!("{:.2}", vb / va) } else { "-".into() };
                format!("{k:<60} {va:>14.2} {vb:>14.2} {ratio:>8}")
            }
            None => format!("{k:<60} {va:>14.2} {:>14} {:>8}", "-", "-"),
        };
        if !line(row) {
            return Ok(());
        }
    }
    for (k, vb) in fb.iter().filter(|(k, _)| !fa.contains_key(*k)) {
        if !line(format!("{k:<60} {:>14} {vb:>14.2} {:>8}", "-", "-")) {
            return Ok(());
        }
    }
    Ok(())
}
