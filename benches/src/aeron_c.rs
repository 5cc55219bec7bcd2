//! Peer baseline `baseline.aeron_c`: Aeron's own C ping/pong samples, `cping` and `cpong`
//! (`aeron-samples/src/main/c/` of Aeron 1.54, the source rusteron 0.2.16 vendors), through Aeron's C media driver
//! `aeronmd`, each a child process: `aeron:ipc` both ways, 64-byte messages, cping's and cpong's busy-spin idle
//! strategy (hard-coded in the samples). One-way = round trip / 2, as for every ping-pong of the report.
//!
//! `ops/build-aeron-samples` builds the three binaries against the static libraries the `aeron` feature's build
//! leaves behind (ops/run-bench runs it), with our stand-in for HdrHistogram_c (`benches/aeron-samples/`): cping's
//! `hdr_record_value` counts every round trip exactly (ns, `aeron_nano_clock`, i.e. `CLOCK_MONOTONIC`) and its
//! `hdr_percentiles_print` prints each distinct value with its count, which [`parse_cping`] reads. No bucketing
//! happens before our histogram, so this baseline's percentiles are as exact as the others'.
//!
//! Each run: `aeronmd` on core A (`taskset`), its own aeron dir `/dev/shm/mdfan-bench-aeron-c-<pid>-<n>` (deleted
//! after), then `cpong -c aeron:ipc -C aeron:ipc` on core B, then `cping ... -L 64 -w <warmup> -m <count>` on core
//! A; when cping has printed, cpong and the driver are killed. Any error (a child that exits early, cping not done
//! within [`CPING_TIMEOUT`], output that does not parse) kills every child and names the binary.
//!
//! The driver is configured as the embedded one of [`crate::aeron`] (SHARED threading mode, idle `sleep-ns` 10 ms,
//! 32 MiB IPC terms, non-sparse files, clients pre-touching the mapped log buffers), so the two Aeron figures
//! differ in what each harness does on the client side, not in the driver. What still differs: cping stamps
//! each message with `clock_gettime` (vDSO) where the Rust harness reads the TSC; cping polls the image, the Rust
//! harness the subscription; `taskset` pins whole processes, so each client's conductor thread shares its hot
//! thread's core, where the Rust harness leaves them the full mask. `crate::aeron`'s docs give the measured
//! difference and what made it.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use hdrhistogram::Histogram;

/// The three binaries `ops/build-aeron-samples` builds, in the folder [`samples_dir`] finds.
pub const BINARIES: [&str; 3] = ["aeronmd", "cpong", "cping"];
/// Environment variable naming the folder of the binaries (default: `aeron-samples/` beside `mdfan-bench`).
pub const SAMPLES_ENV: &str = "MDFAN_AERON_SAMPLES";
/// Payload of each message: one cache line, the size of a record.
const MESSAGE_BYTES: u64 = 64;
/// Longest wait for the driver's CnC file.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for cping to finish: setup, then warmup + count round trips (host stalls reach a few ms).
const CPING_TIMEOUT: Duration = Duration::from_secs(120);
/// The media driver's configuration (aeronmd reads its environment), as [`crate::aeron`]'s embedded driver.
const DRIVER_ENV: [(&str, &str); 7] = [
    ("AERON_THREADING_MODE", "SHARED"),
    ("AERON_SHARED_IDLE_STRATEGY", "sleep-ns"),
    ("AERON_SHARED_IDLE_STRATEGY_INIT_ARGS", "10ms"),
    ("AERON_IPC_TERM_BUFFER_LENGTH", "33554432"),
    ("AERON_TERM_BUFFER_SPARSE_FILE", "false"),
    ("AERON_DIR_DELETE_ON_START", "true"),
    ("AERON_DIR_DELETE_ON_SHUTDOWN", "true"),
];
/// The clients' configuration (cping and cpong read it in `aeron_context_init`).
const CLIENT_ENV: [(&str, &str); 1] = [("AERON_CLIENT_PRE_TOUCH_MAPPED_MEMORY", "true")];

/// Where the binaries are: `$MDFAN_AERON_SAMPLES`, else `aeron-samples/` beside this executable (or beside its
/// folder, for a test binary in `deps/`). `None` when no such folder holds any of them: the samples are not
/// built.
pub fn samples_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(SAMPLES_ENV) {
        return Some(PathBuf::from(d));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("aeron-samples"))
        .find(|d| BINARIES.iter().any(|b| d.join(b).is_file()))
}

/// One-way latency by Aeron's cping/cpong over `aeron:ipc` (ns): `warmup` round trips, then `count` recorded
/// ones; `a_core` runs aeronmd and cping, `b_core` cpong. `samples` is the folder of the binaries.
///
/// # Errors
/// A binary missing from `samples` (named), a child that could not start or exited early (named, with its exit
/// status and the end of its output), the driver's CnC file not there within [`DRIVER_TIMEOUT`], cping not done
/// within [`CPING_TIMEOUT`], or cping's output not as [`parse_cping`] expects.
pub fn pingpong(
    samples: &Path,
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Histogram<u64>> {
    for b in BINARIES {
        let p = samples.join(b);
        anyhow::ensure!(p.is_file(), "aeron_c: {} is missing (ops/build-aeron-samples builds it)", p.display());
    }
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from(format!("/dev/shm/mdfan-bench-aeron-c-{}-{n}", std::process::id()));
    let mut run = Run { children: Vec::new(), dir: dir.clone() };

    let mut driver = command(samples, "aeronmd", a_core, false);
    driver.env("AERON_DIR", &dir).envs(DRIVER_ENV);
    run.spawn("aeronmd", driver)?;
    let cnc = dir.join("cnc.dat");
    let since = Instant::now();
    while !cnc.is_file() {
        run.check_alive()?;
        anyhow::ensure!(
            since.elapsed() < DRIVER_TIMEOUT,
            "aeron_c: aeronmd: no {} after {DRIVER_TIMEOUT:?}",
            cnc.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    let mut pong = command(samples, "cpong", b_core, false);
    pong.args(["-c", "aeron:ipc", "-C", "aeron:ipc", "-p"]).arg(&dir).envs(CLIENT_ENV);
    run.spawn("cpong", pong)?;

    let mut ping = command(samples, "cping", a_core, true);
    ping.args(["-c", "aeron:ipc", "-C", "aeron:ipc", "-p"])
        .arg(&dir)
        .args(["-L", &MESSAGE_BYTES.to_string(), "-w", &warmup.to_string(), "-m", &count.to_string()])
        .envs(CLIENT_ENV);
    let stdout = run.spawn("cping", ping)?;
    // Read as it comes (the listing of values can pass a pipe's 64 KiB), on a thread of its own.
    let reader = std::thread::spawn(move || -> std::io::Result<String> {
        let mut text = String::new();
        stdout.expect("cping's stdout is piped").read_to_string(&mut text)?;
        Ok(text)
    });
    let since = Instant::now();
    let status = loop {
        if let Some(status) = run.children.last_mut().and_then(|c| c.1.try_wait().transpose()) {
            break status.context("aeron_c: cping: wait")?;
        }
        // cpong and the driver stay up until cping is done.
        run.check_alive_but_last()?;
        if since.elapsed() > CPING_TIMEOUT {
            drop(run);
            bail!("aeron_c: cping: not done after {CPING_TIMEOUT:?} ({warmup} + {count} round trips)");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let text = reader.join().map_err(|_| anyhow!("aeron_c: cping: the stdout reader panicked"))?;
    let text = text.context("aeron_c: cping: reading its stdout")?;
    if !status.success() {
        let err = run.stderr_tail(run.children.len() - 1);
        bail!("aeron_c: cping exited with {status}: {err}");
    }
    drop(run); // kills cpong and the driver, removes the dir
    let samples = parse_cping(&text).context("aeron_c: cping's output")?;
    anyhow::ensure!(
        samples.total == count,
        "aeron_c: cping: {} round trips recorded, {count} asked (-m {count})",
        samples.total
    );
    Ok(samples.one_way_histogram())
}

/// `samples/<name>`, under `taskset -c <core>` when pinned; no stdin; stdout piped if `stdout` (cping's figures),
/// else discarded (never a pipe nobody reads: a write to it would block or kill the child); stderr piped (shown
/// when it fails; these binaries write a few lines at most).
fn command(samples: &Path, name: &str, core: Option<usize>, stdout: bool) -> Command {
    let bin = samples.join(name);
    let mut c = match core {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(core.to_string()).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    c.stdin(Stdio::null()).stdout(if stdout { Stdio::piped() } else { Stdio::null() }).stderr(Stdio::piped());
    c
}

/// The children of one run and its aeron dir: on drop, every child still running is killed and reaped, and the
/// dir removed.
struct Run {
    children: Vec<(&'static str, Child)>,
    dir: PathBuf,
}

impl Run {
    /// Starts `name`; returns its stdout.
    fn spawn(&mut self, name: &'static str, mut cmd: Command) -> anyhow::Result<Option<std::process::ChildStdout>> {
        let mut child = cmd.spawn().map_err(|e| anyhow!("aeron_c: cannot start {name} ({cmd:?}): {e}"))?;
        let stdout = child.stdout.take();
        self.children.push((name, child));
        Ok(stdout)
    }

    /// An error naming the first child that has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        self.check_first(self.children.len())
    }

    fn check_alive_but_last(&mut self) -> anyhow::Result<()> {
        self.check_first(self.children.len().saturating_sub(1))
    }

    fn check_first(&mut self, n: usize) -> anyhow::Result<()> {
        for i in 0..n {
            let (name, child) = &mut self.children[i];
            if let Some(status) = child.try_wait().with_context(|| format!("aeron_c: {name}: wait"))? {
                let name = *name;
                let err = self.stderr_tail(i);
                bail!("aeron_c: {name} exited early with {status}: {err}");
            }
        }
        Ok(())
    }

    /// The last lines of child `i`'s stderr (after it exited), or a note that it wrote none.
    fn stderr_tail(&mut self, i: usize) -> String {
        let mut text = String::new();
        if let Some(mut e) = self.children[i].1.stderr.take() {
            let _ = e.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        match lines.len() {
            0 => "nothing on stderr".to_owned(),
            n => lines[n.saturating_sub(5)..].join(" / "),
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for (name, child) in self.children.iter_mut().rev() {
            if let Ok(None) = child.try_wait() {
                if let Err(e) = child.kill() {
                    eprintln!("mdfan-bench: warning: aeron_c: cannot kill {name}: {e}");
                }
            }
            let _ = child.wait();
        }
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("mdfan-bench: warning: aeron_c: cannot remove {}: {e}", self.dir.display()),
        }
    }
}

/// cping's round trips as our HdrHistogram stand-in printed them: each distinct value (ns) with its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpingSamples {
    /// `(round trip ns, count)`, values strictly ascending.
    pub rtt_ns: Vec<(u64, u64)>,
    /// Round trips recorded (the sum of the counts).
    pub total: u64,
}

impl CpingSamples {
    /// One-way latency (ns): each round trip / 2 (at least 1), as every ping-pong of the report.
    pub fn one_way_histogram(&self) -> Histogram<u64> {
        let mut h = crate::new_histogram();
        for &(rtt, n) in &self.rtt_ns {
            h.saturating_record_n((rtt / 2).max(1), n);
        }
        h
    }
}

/// The block our stand-in's `hdr_percentiles_print` writes into cping's stdout (`benches/aeron-samples/hdr/
/// hdr_histogram.h`): a `#[mdfan-hdr v1: ...]` line, `#[samples=N dropped=D min=A max=B]`, one `<value> <count>`
/// line per distinct value ascending, a `#[p50=...]` line for people (not read), `#[mdfan-hdr end]`. cping's own
/// lines around it are skipped.
///
/// # Errors
/// No block, or one without its end; a field missing or not a number (named, with the line number); values not
/// ascending; samples or min/max not what the lines hold; any sample dropped (a value over 2^20 ns when the
/// stand-in's list of 65,536 such values was full).
pub fn parse_cping(text: &str) -> anyhow::Result<CpingSamples> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end()));
    lines
        .by_ref()
        .find(|(_, l)| l.starts_with("#[mdfan-hdr v1"))
        .ok_or_else(|| anyhow!("no `#[mdfan-hdr v1` line: not cping built with mdfan's hdr stand-in"))?;
    let (no, head) = lines.next().ok_or_else(|| anyhow!("the output ends after the `#[mdfan-hdr v1` line"))?;
    let head = head
        .strip_prefix("#[")
        .and_then(|h| h.strip_suffix(']'))
        .ok_or_else(|| anyhow!("line {no}: expected `#[samples=.. dropped=.. min=.. max=..]`, got {head:?}"))?;
    let field = |name: &str| -> anyhow::Result<i64> {
        let v = head
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| anyhow!("line {no}: no `{name}=`"))?;
        v.parse().map_err(|e| anyhow!("line {no}: {name}={v:?}: {e}"))
    };
    let (samples, dropped, min, max) = (field("samples")?, field("dropped")?, field("min")?, field("max")?);
    anyhow::ensure!(
        dropped == 0,
        "line {no}: {dropped} round trips dropped by the hdr stand-in (over 2^20 ns, list full)"
    );
    let mut rtt_ns: Vec<(u64, u64)> = Vec::new();
    let mut ended = false;
    for (no, line) in lines {
        if line.starts_with("#[mdfan-hdr end]") {
            ended = true;
            break;
        }
        if line.starts_with("#[") {
            continue; // the percentiles line, for people
        }
        let mut it = line.split_whitespace();
        let (Some(v), Some(n), None) = (it.next(), it.next(), it.next()) else {
            bail!("line {no}: expected `<value ns> <count>`, got {line:?}");
        };
        let v: u64 = v.parse().map_err(|e| anyhow!("line {no}: value {v:?}: {e}"))?;
        let n: u64 = n.parse().map_err(|e| anyhow!("line {no}: count {n:?}: {e}"))?;
        anyhow::ensure!(n > 0, "line {no}: value {v} with count 0");
        if let Some(&(last, _)) = rtt_ns.last() {
            anyhow::ensure!(v > last, "line {no}: value {v} after {last}: values must ascend");
        }
        rtt_ns.push((v, n));
    }
    anyhow::ensure!(ended, "no `#[mdfan-hdr end]` line: cping's output was cut short");
    let total: u64 = rtt_ns.iter().map(|&(_, n)| n).sum();
    anyhow::ensure!(
        i64::try_from(total).ok() == Some(samples),
        "samples={samples} in the header, {total} in the value lines"
    );
    if let (Some(&(lo, _)), Some(&(hi, _))) = (rtt_ns.first(), rtt_ns.last()) {
        anyhow::ensure!(
            (lo as i64, hi as i64) == (min, max),
            "min={min} max={max} in the header, {lo} and {hi} in the value lines"
        );
    }
    Ok(CpingSamples { rtt_ns, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cping's whole stdout from `cping -c aeron:ipc -C aeron:ipc -L 64 -w 200 -m 1000` on this host (2026-11-30,
    /// built by ops/build-aeron-samples): 1,000 round trips, 62 distinct values, one over 2^20 ns.
    const RECORDED: &str = include_str!("../aeron-samples/testdata/cping-1000.txt");

    #[test]
    fn a_recorded_cping_output_parses_to_its_exact_round_trips() {
        let s = parse_cping(RECORDED).unwrap();
        assert_eq!(s.total, 1_000);
        assert_eq!(s.rtt_ns.len(), 62);
        assert_eq!(s.rtt_ns[..3], [(170, 1), (171, 1), (181, 1)]);
        assert_eq!(s.rtt_ns[59..], [(25_128, 1), (28_022, 1), (19_769_355, 1)]);
        assert_eq!(s.rtt_ns.iter().map(|&(v, n)| v * n).sum::<u64>(), 20_197_767);
    }

    #[test]
    fn one_way_is_half_the_round_trip_at_every_percentile() {
        let h = parse_cping(RECORDED).unwrap().one_way_histogram();
        assert_eq!(h.len(), 1_000);
        assert_eq!(h.min(), 85);
        // The stand-in's own percentiles line: p50=241 p99=7591 p99.9=28022 round trip (nearest rank, exact).
        // Below 2,048 HdrHistogram's 3 digits are exact; above, a value reads back as its bucket's highest.
        assert_eq!(h.value_at_quantile(0.5), 120);
        assert_eq!(h.value_at_quantile(0.99), h.highest_equivalent(3_795));
        assert_eq!(h.value_at_quantile(0.999), h.highest_equivalent(14_011));
        assert_eq!(h.max(), h.highest_equivalent(9_884_677));
    }

    /// The recorded block with `f` applied to its lines (cping's own lines dropped).
    fn edited(f: impl Fn(Vec<String>) -> Vec<String>) -> String {
        let block: Vec<String> =
            RECORDED.lines().skip_while(|l| !l.starts_with("#[mdfan-hdr v1")).map(str::to_owned).collect();
        f(block).join("\n")
    }

    #[test]
    fn a_cping_output_that_is_cut_dropped_or_inconsistent_is_refused_with_the_reason() {
        let err = |text: &str| format!("{:#}", parse_cping(text).unwrap_err());
        assert!(err("Publishing Ping at channel aeron:ipc\n").contains("no `#[mdfan-hdr v1` line"));
        let cut = edited(|b| b[..40].to_vec());
        assert!(err(&cut).contains("no `#[mdfan-hdr end]` line"), "{}", err(&cut));
        let dropped = edited(|mut b| {
            b[1] = "#[samples=1000 dropped=3 min=170 max=19769355]".into();
            b
        });
        assert_eq!(err(&dropped), "line 2: 3 round trips dropped by the hdr stand-in (over 2^20 ns, list full)");
        let missing = edited(|mut b| {
            b.remove(2);
            b
        });
        assert_eq!(err(&missing), "samples=1000 in the header, 999 in the value lines");
        let unordered = edited(|mut b| {
            b.swap(2, 3);
            b
        });
        assert_eq!(err(&unordered), "line 4: value 170 after 171: values must ascend");
        let bad = edited(|mut b| {
            b[2] = "170 one".into();
            b
        });
        assert_eq!(err(&bad), "line 3: count \"one\": invalid digit found in string");
        let no_max = edited(|mut b| {
            b[1] = "#[samples=1000 dropped=0 min=170]".into();
            b
        });
        assert_eq!(err(&no_max), "line 2: no `max=`");
    }

    /// The real samples, when built (`ops/build-aeron-samples`; skipped, and passing, otherwise).
    #[cfg(feature = "aeron")]
    #[test]
    fn aeron_c_pingpong_records_every_message_and_leaves_no_dir() {
        let Some(dir) = samples_dir() else {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"SKIP aeron_c_pingpong_records_every_message_and_leaves_no_dir: samples not built\n",
            );
            return;
        };
        crate::pingpong::check_peer_pingpong(|a, b, w, n| pingpong(&dir, a, b, w, n));
        let prefix = format!("mdfan-bench-aeron-c-{}-", std::process::id());
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .expect("/dev/shm")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "aeron dirs left behind: {left:?}");
    }

    #[test]
    fn a_missing_binary_is_named() {
        let dir = std::env::temp_dir().join(format!("mdfan-bench-no-samples-{}", std::process::id()));
        let e = pingpong(&dir, None, None, 1, 1).unwrap_err().to_string();
        assert_eq!(e, format!("aeron_c: {}/aeronmd is missing (ops/build-aeron-samples builds it)", dir.display()));
    }
}
