//! `mdfan-stat`: reads the counters files mdfan processes keep in shared memory (`mdfan-*.counters`, layout in
//! `mdfan_tuning::counters`) and prints them: a table per process, refreshed with `--watch-ms`, or Prometheus
//! text (`--prometheus`) for a node-exporter textfile collector (`--output FILE` writes it whole, by rename).
//!
//! Every file is opened read-only, copied (never mapped: a file truncated meanwhile is an error, not a crash)
//! and checked: magic, version, sizes, every row; and who wrote it: a file whose owner is not its writer's user,
//! or is neither root, you, nor group `mdfan`, or that others may write, is listed as `suspect` with the reason
//! and never exported (it may be forged). Owner and mode are judged before the file is read, so another user's
//! file (in a shared /dev/shm) is never read: it may claim any size or a writer forever mid-rewrite; a header of
//! more slots than any writer makes (`counters::MAX_SLOTS`) is an error. A writer that is gone without closing
//! its file shows as `dead` with the age of its values.
//!
//! Exit status: 0; 1 when a file named on the command line cannot be read or is suspect (one line on stderr
//! naming it and the field or the reason); 2 for bad usage.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use mdfan_tuning::counters::{self, escape_label, Snapshot, Standing};

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
    /// Write the output to this file instead of stdout, whole (a temporary file beside it, then a rename), as
    /// node-exporter's textfile collector wants: `--prometheus --output
    /// /var/lib/mdfan/textfile/mdfan.prom`.
    #[arg(long)]
    output: Option<PathBuf>,
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

/// A file read: its snapshot (`None` for a file found suspect from its owner and mode alone, not read) and what to
/// make of it, or why it could not be read.
type Read = (PathBuf, Result<(Option<Snapshot>, Standing), String>);

fn run(args: &Args) -> Result<(), String> {
    loop {
        let files = if args.files.is_empty() {
            counters::list(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?
        } else {
            args.files.clone()
        };
        let me = counters::effective_uid();
        let now_ns = mdfan_lines::realtime_ns();
        let mut read: Vec<Read> = Vec::new();
        for f in &files {
            // another user's file is judged before it is read: it may claim any size, or a writer forever
            // mid-rewrite (each read would wait 2 s)
            let got = match counters::suspect_file(f, me) {
                Some(why) => Ok((None, Standing::Suspect(why))),
                None => counters::read(f).map_err(|e| e.to_string()).map(|s| {
                    let standing = s.standing(me, now_ns);
                    (Some(s), standing)
                }),
            };
            // a file named by the user must be readable and trusted; one found in the folder may be a leftover
            if !args.files.is_empty() {
                match &got {
                    Err(e) => return Err(e.clone()),
                    Ok((_, Standing::Suspect(why))) => return Err(format!("{}: suspect: {why}", f.display())),
                    Ok(_) => {}
                }
            }
            if let Err(e) = &got {
                eprintln!("mdfan-stat: skipping {}: {e}", f.display());
            }
            read.push((f.clone(), got));
        }
        let text = if args.prometheus { prometheus(&read) } else { tables(&read, &args.dir, now_ns) };
        if let Some(path) = &args.output {
            write_whole(path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        } else {
            let mut out = std::io::stdout().lock();
            if args.watch_ms.is_some() && !args.prometheus {
                let _ = write!(out, "\x1b[H\x1b[2J"); // home, clear
            }
            if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
                std::process::exit(141); // stdout closed (`| head`)
            }
        }
        match args.watch_ms {
            Some(ms) if !args.prometheus => std::thread::sleep(Duration::from_millis(ms.max(50))),
            _ => return Ok(()),
        }
    }
}

/// Writes `text` to a temporary file beside `path` (created exclusively, mode 0644), then renames it over
/// `path`: a reader sees the old file or the new one, never half of one.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("mdfan.prom");
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Every trusted file's samples in the Prometheus text format, each metric's samples together under one `#
/// TYPE` line (as the format requires when several processes export the same names), plus per file
/// `mdfan_counters_state{..,state="running|ended|dead"} 1` and `mdfan_counters_updated_seconds` (so a dead
/// process, whose values stopped, can be alerted on). A suspect file gives only `mdfan_counters_suspect{file=..}
/// 1` (and a comment line with the reason): none of its rows.
fn prometheus(read: &[Read]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut groups: std::collections::HashMap<String, (String, Vec<String>)> = std::collections::HashMap::new();
    let mut add = |name: &str, kind: &str, sample: String| {
        let g = groups.entry(name.to_owned()).or_insert_with(|| {
            order.push(name.to_owned());
            (kind.to_owned(), Vec::new())
        });
        g.1.push(sample);
    };
    let mut comments = String::new();
    for (path, got) in read {
        let Ok((s, standing)) = got else { continue };
        if let Standing::Suspect(why) = standing {
            let file = escape_label(&path.display().to_string());
            comments.push_str(&format!("# mdfan-stat: suspect {file}: {}\n", escape_label(why)));
            add("mdfan_counters_suspect", "gauge", format!("mdfan_counters_suspect{{file=\"{file}\"}} 1"));
            continue;
        }
        let Some(s) = s else { continue }; // (only a suspect file is not read)
        let mut kind = "gauge";
        for line in s.prometheus().lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                kind = if t.ends_with(" counter") { "counter" } else { "gauge" };
                continue;
            }
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            add(name, kind, line.to_owned());
        }
        let instance = s.instance_labels();
        let state = standing.as_str();
        add("mdfan_counters_state", "gauge", format!("mdfan_counters_state{{{instance},state=\"{state}\"}} 1"));
        let secs = s.updated_ns as f64 / 1e9;
        add(
            "mdfan_counters_updated_seconds",
            "gauge",
            format!("mdfan_counters_updated_seconds{{{instance}}} {secs:.3}"),
        );
    }
    let mut out = comments;
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

/// How a table names a file's standing.
fn state(standing: &Standing) -> String {
    match standing {
        Standing::Dead { age_ns: Some(age_ns) } => {
            format!("dead age_s={} (did not close its counters: the values are its last)", age_ns / 1_000_000_000)
        }
        Standing::Dead { age_ns: None } => "dead age_s=- (killed before it wrote its first counters)".to_owned(),
        other => other.as_str().to_owned(),
    }
}

/// The label `key`'s value in `labels` (`key="value",...`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// One block per file: the run's counters, then a row per session; a suspect file is one line with the reason.
fn tables(read: &[Read], dir: &Path, now_ns: u64) -> String {
    if read.iter().all(|(_, r)| r.is_err()) {
        return format!("no mdfan counters files (mdfan-*.counters) in {}\n", dir.display());
    }
    let mut out = String::new();
    for (path, got) in read {
        let Ok((s, standing)) = got else { continue };
        if let Standing::Suspect(why) = standing {
            out.push_str(&format!("suspect file={}: {why} (not shown)\n", path.display()));
            continue;
        }
        let Some(s) = s else { continue }; // (only a suspect file is not read)
                                           // 0: created (at bind) but never rewritten, e.g. a process that died before its first 100 ms.
        let age = match s.updated_ns {
            0 => "updated=never".to_owned(),
            t => format!("updated_ms_ago={}", now_ns.saturating_sub(t) / 1_000_000),
        };
        out.push_str(&format!(
            "{} {} pid={} {} {age} file={}\n",
            s.role,
            s.name.escape_debug(),
            s.pid,
            state(standing),
            path.display()
        ));
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
