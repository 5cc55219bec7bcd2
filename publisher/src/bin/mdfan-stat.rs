//! `mdfan-stat`: reads the counters files mdfan processes keep in shared memory (`mdfan-*.counters`, layout in
//! `mdfan_tuning::counters`) and prints them: a table per process, refreshed with `--watch-ms`, or Prometheus
//! text (`--prometheus`) for a node-exporter textfile collector.
//!
//! Exit status: 0; 1 when a file named on the command line cannot be read (one line on stderr naming it and the
//! field); 2 for bad usage.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use mdfan_tuning::counters::{self, Snapshot};

/// Print the counters of running (and ended) mdfan publishers.
#[derive(Parser)]
#[command(name = "mdfan-stat", version)]
struct Args {
    /// Counters files to read; default: every `mdfan-*.counters` in --dir.
    files: Vec<PathBuf>,
    /// Folder to look in (the publisher's `counters_dir`).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Prometheus text exposition format instead of tables.
    #[arg(long)]
    prometheus: bool,
    /// Redraw every this many ms until interrupted (tables only).
    #[arg(long)]
    watch_ms: Option<u64>,
}

fn main() {
    let args = Args::parse();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("mdfan-stat: error: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: &Args) -> Result<(), String> {
    loop {
        let files = if args.files.is_empty() {
            counters::list(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?
        } else {
            args.files.clone()
        };
        let mut snapshots = Vec::new();
        for f in &files {
            match counters::read(f) {
                Ok(s) => snapshots.push((f.clone(), s)),
                // a file named by the user must be readable; one found in the folder may be a leftover
                Err(e) if !args.files.is_empty() => return Err(e.to_string()),
                Err(e) => eprintln!("mdfan-stat: skipping {}: {e}", f.display()),
            }
        }
        let text = if args.prometheus { prometheus(&snapshots) } else { tables(&snapshots, &args.dir) };
        let mut out = std::io::stdout().lock();
        if args.watch_ms.is_some() && !args.prometheus {
            let _ = write!(out, "\x1b[H\x1b[2J"); // home, clear
        }
        if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
            std::process::exit(141); // stdout closed (`| head`)
        }
        match args.watch_ms {
            Some(ms) if !args.prometheus => std::thread::sleep(Duration::from_millis(ms.max(50))),
            _ => return Ok(()),
        }
    }
}

/// Every file's samples in the Prometheus text format, each metric's samples together under one `# TYPE` line (as
/// the format requires when several processes export the same names), plus per file
/// `mdfan_counters_state{..,state="running|ended|dead"} 1` and `mdfan_counters_updated_seconds` (so a dead
/// process, whose values stopped, can be alerted on).
fn prometheus(snapshots: &[(PathBuf, Snapshot)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut groups: std::collections::HashMap<String, (String, Vec<String>)> = std::collections::HashMap::new();
    let mut add = |name: &str, kind: &str, sample: String| {
        let g = groups.entry(name.to_owned()).or_insert_with(|| {
            order.push(name.to_owned());
            (kind.to_owned(), Vec::new())
        });
        g.1.push(sample);
    };
    for (_, s) in snapshots {
        let mut kind = "gauge";
        for line in s.prometheus().lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                kind = if t.ends_with(" counter") { "counter" } else { "gauge" };
                continue;
            }
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            add(name, kind, line.to_owned());
        }
        let instance = format!("role=\"{}\",instance=\"{}\"", s.role, s.name.replace('"', "'"));
        let state = match state(s) {
            "running" => "running",
            "ended" => "ended",
            _ => "dead",
        };
        add("mdfan_counters_state", "gauge", format!("mdfan_counters_state{{{instance},state=\"{state}\"}} 1"));
        let secs = s.updated_ns as f64 / 1e9;
        add(
            "mdfan_counters_updated_seconds",
            "gauge",
            format!("mdfan_counters_updated_seconds{{{instance}}} {secs:.3}"),
        );
    }
    let mut out = String::new();
    for name in &order {
        let (kind, samples) = &groups[name];
        out.push_str(&format!("# TYPE {name} {kind}\n"));
        for sample in samples {
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

fn state(s: &Snapshot) -> &'static str {
    if s.ended {
        "ended"
    } else if Path::new(&format!("/proc/{}", s.pid)).exists() {
        "running"
    } else {
        "dead (did not close its counters: the values are its last)"
    }
}

/// The label `key`'s value in `labels` (`key="value",...`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// One block per file: the run's counters, then a row per session.
fn tables(snapshots: &[(PathBuf, Snapshot)], dir: &Path) -> String {
    if snapshots.is_empty() {
        return format!("no mdfan counters files (mdfan-*.counters) in {}\n", dir.display());
    }
    let now_ns = mdfan_lines::realtime_ns();
    let mut out = String::new();
    for (path, s) in snapshots {
        // 0: created (at bind) but never rewritten, e.g. a process that died before its first 100 ms.
        let age = match s.updated_ns {
            0 => "updated=never".to_owned(),
            t => format!("updated_ms_ago={}", now_ns.saturating_sub(t) / 1_000_000),
        };
        out.push_str(&format!("{} {} pid={} {} {age} file={}\n", s.role, s.name, s.pid, state(s), path.display()));
        for m in s.metrics.iter().filter(|m| !m.name.starts_with("mdfan_session_")) {
            let labels = if m.labels.is_empty() { String::new() } else { format!("{{{}}}", m.labels) };
            out.push_str(&format!("  {}{labels} {}\n", m.name.trim_start_matches("mdfan_"), m.value));
        }
        const COLUMNS: [&str; 9] =
            ["sent", "filtered", "skipped", "snapshots", "catchup", "ring_full", "lag", "last_seq", "end"];
        let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
        for m in s.metrics.iter().filter(|m| m.name.starts_with("mdfan_session_")) {
            let (Some(id), Some(name)) = (label(&m.labels, "session"), label(&m.labels, "subscriber")) else {
                continue;
            };
            let k = match rows.iter().position(|r| r.0 == id) {
                Some(k) => k,
                None => {
                    rows.push((id.to_owned(), name.to_owned(), vec!["-".to_owned(); COLUMNS.len()]));
                    rows.len() - 1
                }
            };
            let short = m.name.trim_start_matches("mdfan_session_").trim_end_matches("_total");
            if short == "end" {
                rows[k].2[COLUMNS.len() - 1] = label(&m.labels, "reason").unwrap_or("?").to_owned();
            } else if let Some(col) = COLUMNS.iter().position(|c| *c == short) {
                rows[k].2[col] = m.value.to_string();
            }
        }
        if rows.is_empty() {
            continue;
        }
        let mut table = vec![std::iter::once("session".to_owned())
            .chain(std::iter::once("subscriber".to_owned()))
            .chain(COLUMNS.iter().map(|c| (*c).to_owned()))
            .collect::<Vec<_>>()];
        for (id, name, cols) in rows {
            table.push(std::iter::once(id).chain(std::iter::once(name)).chain(cols).collect());
        }
        let widths: Vec<usize> =
            (0..table[0].len()).map(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
        for row in &table {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect();
            out.push_str(&format!("  {}\n", cells.join("  ")));
        }
    }
    out
}
