//! Helpers shared by the subscriber crate's end-to-end tests: an in-process publisher on a free port, and
//! `mdfan-subscribe` child processes with a watchdog.
//!
//! The same tests run on either fabric: shared memory by default, RDMA verbs when `MDFAN_TEST_FABRIC=verbs`
//! (built with `--features mdfan-subscriber/verbs,mdfan-publisher/verbs`; device `MDFAN_TEST_DEVICE`, default
//! rxe0, GID index `MDFAN_TEST_GID_INDEX`, default 1), which is how ops/softroce/run-e2e runs them inside the
//! Soft-RoCE VM. There, `MDFAN_TEST_BIN_DIR` names the folder holding the binaries and `MDFAN_DATA_DIR` the data.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::{Publisher, PublisherError, RunReport};

/// Longest any child may run before the test kills it and fails (a watchdog, not a timing assertion):
/// 120 s, or `MDFAN_TEST_WATCHDOG_S` (the VM runs under software emulation).
pub fn watchdog() -> Duration {
    let s = std::env::var("MDFAN_TEST_WATCHDOG_S").ok().and_then(|v| v.parse().ok()).unwrap_or(120);
    Duration::from_secs(s)
}

/// Whether these tests run on verbs (`MDFAN_TEST_FABRIC=verbs`).
pub fn on_verbs() -> bool {
    std::env::var("MDFAN_TEST_FABRIC").is_ok_and(|f| f == "verbs")
}

/// The RDMA device the verbs tests use (`MDFAN_TEST_DEVICE`, default rxe0).
pub fn verbs_device() -> String {
    std::env::var("MDFAN_TEST_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

/// The GID index the verbs tests use (`MDFAN_TEST_GID_INDEX`, default 1).
pub fn verbs_gid_index() -> String {
    std::env::var("MDFAN_TEST_GID_INDEX").unwrap_or_else(|_| "1".into())
}

/// The `[fabric]` section for the fabric under test.
fn fabric_section() -> String {
    if on_verbs() {
        format!(
            // rnr_retry = 7: the stall suite stops a subscriber for up to 3 s with a ring larger than the receive
            // queue the device allows (rxe's max_qp_wr clamps it), and expects resync to see it through, as a
            // recorder would be configured; the default (6 x 0.64 ms) would fail such a QP with
            // IBV_WC_RNR_RETRY_EXC_ERR once its receive queue ran dry
            "[fabric]\nprovider = \"verbs\"\n\n[fabric.verbs]\ndevice = \"{}\"\ngid_index = {}\nsend_queue_depth = 4096\nsignal_every = 64\nrnr_retry = 7\n",
            verbs_device(),
            verbs_gid_index()
        )
    } else {
        "[fabric]\nprovider = \"shm\"\n".into()
    }
}

/// The folder cargo puts this workspace's binaries in for the profile this test was built with
/// (`target/<profile>`, the parent of the test's own `deps/`).
pub fn bin_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.parent().and_then(Path::parent).expect("a test runs from target/<profile>/deps").to_path_buf()
}

/// A binary of this workspace (`mdfan-publisher`, `mdfan-subscribe`): in `$MDFAN_TEST_BIN_DIR` when set (the
/// VM), else built once per test process in this test's profile (a no-op when up to date, so never stale: the
/// CLI is its own package, so `cargo test -p mdfan-subscriber` would not build it).
pub fn bin(name: &str) -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("MDFAN_TEST_BIN_DIR") {
        return Path::new(&dir).join(name);
    }
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| cargo_build(&["-p", "mdfan-publisher", "-p", "mdfan-subscribe"]));
    bin_dir().join(name)
}

/// `cargo build -q ARGS` in the profile this test was built with (its artifacts land in [`bin_dir`]); panics
/// naming the arguments if the build fails.
pub fn cargo_build(args: &[&str]) {
    let release = bin_dir().file_name().is_some_and(|d| d == "release");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q"])
        .args(args)
        .args(release.then_some("--release"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build {} failed", args.join(" "));
}

pub struct RunningPublisher {
    pub addr: SocketAddr,
    pub shutdown: Arc<AtomicBool>,
    pub handle: JoinHandle<Result<RunReport, PublisherError>>,
}

/// A publisher config text for `feed` on `listen`. `extra_publisher` goes in `[publisher]`, `extra_feed` in
/// `[feed]` (e.g. `pace = 100`).
pub fn config_text(listen: &str, feed: &Path, wait_for: usize, extra_publisher: &str, extra_feed: &str) -> String {
    format!(
        "[publisher]\nlisten = \"{listen}\"\nwait_for_subscribers = {wait_for}\n{extra_publisher}\n\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n{extra_feed}\n\n{}",
        feed.display(),
        fabric_section()
    )
}

/// Starts a publisher on 127.0.0.1:0 replaying `feed`, waiting for `wait_for` subscribers. `extra_feed` is
/// appended to the `[feed]` section (e.g. `pace = 100`).
pub fn start_publisher(feed: &Path, wait_for: usize, extra_feed: &str) -> RunningPublisher {
    start_publisher_with(feed, wait_for, "", extra_feed)
}

/// As [`start_publisher`], with extra `[publisher]` keys too.
pub fn start_publisher_with(feed: &Path, wait_for: usize, extra_publisher: &str, extra_feed: &str) -> RunningPublisher {
    let text = config_text("127.0.0.1:0", feed, wait_for, extra_publisher, extra_feed);
    let cfg = Config::parse(&text, Path::new("test.toml")).expect("test config parses");
    let publisher = Publisher::bind(cfg).expect("publisher binds");
    let addr = publisher.local_addr();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&shutdown);
    let handle = std::thread::spawn(move || publisher.run(flag));
    RunningPublisher { addr, shutdown, handle }
}

/// A publisher process (not in-process: the tests that use it kill or stop it) replaying `feed` with `extra_feed`
/// in its `[feed]` section (e.g. `pace = 500`), on a free port, with its config in a folder of its own named after
/// `tag`. Returns the endpoint, the config's folder (remove it at the end) and a function that starts the process
/// and waits until it says it listens (it loads and checks the feed first, which takes a while under software
/// emulation); call it again to restart the publisher on the same endpoint.
pub fn publisher_process(
    tag: &str,
    feed: &Path,
    wait_for: usize,
    extra_feed: &str,
) -> (SocketAddr, std::path::PathBuf, impl Fn() -> Watched) {
    let listen = format!("127.0.0.1:{}", free_port());
    let dir = std::env::temp_dir().join(format!("mdfan-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("publisher.toml");
    // Its counters file in `dir` (which the test removes), not /dev/shm: a publisher the test kills leaves it.
    let counters = format!("counters_dir = {dir:?}");
    std::fs::write(&cfg, config_text(&listen, feed, wait_for, &counters, extra_feed)).unwrap();
    let start = move || {
        let child = Command::new(bin("mdfan-publisher"))
            .args(["--config", cfg.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut publisher = Watched::new(child);
        publisher.wait_for_line("publisher listening=");
        publisher
    };
    (listen.parse().unwrap(), dir, start)
}

/// Spawns `mdfan-subscribe` against `addr` with extra arguments; stdout and stderr are captured.
pub fn spawn_subscriber(addr: SocketAddr, name: &str, extra: &[&str]) -> Child {
    let mut cmd = Command::new(bin("mdfan-subscribe"));
    cmd.args(["--connect", &addr.to_string(), "--name", name, "--idle", "yield"]);
    if on_verbs() {
        cmd.args(["--fabric", "verbs", "--device", &verbs_device(), "--gid-index", &verbs_gid_index()]);
    }
    cmd.args(extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mdfan-subscribe starts")
}

/// Waits until `child` ends or the watchdog passes; in the second case returns false once it is gone. An
/// overstaying child is first sent SIGTERM and given 5 s to end on its own (`mdfan-subscribe` then prints its
/// closing `stream` line, `end=interrupted`, with its seq, heartbeats and state: what the failure report needs),
/// and only then killed; stderr says which.
fn ended_within_watchdog(child: &mut Child) -> bool {
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > watchdog() {
            // not `signal`: the child may have ended since the look above
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let asked = Instant::now();
            while child.try_wait().expect("try_wait").is_none() {
                if asked.elapsed() > Duration::from_secs(5) {
                    eprintln!("watchdog: pid {} did not end within 5 s of SIGTERM: killed", child.id());
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Waits for a child with the watchdog; kills it and panics if it overstays.
pub fn wait_with_watchdog(mut child: Child) -> Output {
    let ended = ended_within_watchdog(&mut child);
    let out = child.wait_with_output().expect("output");
    if !ended {
        panic!(
            "watchdog: child ran over {:?}\nstdout:\n{}\nstderr:\n{}",
            watchdog(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// An `mdfan-subscribe` run's stdout lines, once it ended (watchdog as [`wait_with_watchdog`]); panics with its exit
/// status and stderr when it printed no closing `stream ` line (it ended on an error: the reason is on stderr).
pub fn finished_lines(child: Child) -> Vec<String> {
    finished(Watched::new(child))
}

/// As [`finished_lines`], for a child already [`Watched`].
pub fn finished(child: Watched) -> Vec<String> {
    let (code, lines, stderr) = child.finish();
    assert!(
        lines.iter().any(|l| l.starts_with("stream ")),
        "mdfan-subscribe ended ({code:?}) without its stream line\nstdout:\n{}\nstderr:\n{stderr}",
        lines.join("\n")
    );
    lines
}

pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// The key=value fields of one output line.
pub fn fields(line: &str) -> std::collections::HashMap<&str, &str> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}

/// A free TCP port on 127.0.0.1 (bound and released; std sets SO_REUSEADDR, so a publisher can reuse it).
pub fn free_port() -> u16 {
    // Below the ephemeral range (32768 and up by default): a port the kernel hands out for `:0` is also one it
    // may give a client socket of this host before the test's server binds it, or binds it again after a kill
    // (seen in the Soft-RoCE VM: a publisher exiting on its bind, seconds after this returned). Each test
    // process walks its own stretch of 20000..32000.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(97);
    for _ in 0..12_000 {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 20_000 + (start.wrapping_add(n) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in 20000..32000");
}

/// Sends a signal to a child process.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -{sig} {}", child.id());
}

/// The final-book part of the summary line, without the record and gap counts (which differ after a
/// resync or a late join).
pub fn final_book() -> String {
    let cp = &crate::esh4::CHECKPOINTS[4];
    format!(
        "last_seq={} orders={} levels_bid={} levels_ask={} bbo=4810.00x22/4810.25x28",
        cp.venue_seq, cp.orders, cp.levels_bid, cp.levels_ask
    )
}

pub fn top_levels(lines: &[String]) -> Vec<String> {
    lines.iter().filter(|l| l.contains(" side=")).cloned().collect()
}

/// Asserts the subscriber's final book equals the reference (summary and top 10 per side).
pub fn assert_exact(lines: &[String], who: &str) {
    let summary = lines
        .iter()
        .find(|l| l.starts_with("instrument=17077 symbol=ESH4 "))
        .unwrap_or_else(|| panic!("{who}: no summary:\n{}", lines.join("\n")));
    assert!(summary.ends_with(&final_book()), "{who}: {summary}");
    assert_eq!(top_levels(lines).len(), 20, "{who}");
    let levels = top_levels(lines);
    assert_eq!(levels[0], "instrument=17077 side=bid level=1 price=4810.00 size=22 orders=22", "{who}");
    assert_eq!(levels[9], "instrument=17077 side=bid level=10 price=4807.75 size=50 orders=23", "{who}");
    assert_eq!(levels[10], "instrument=17077 side=ask level=1 price=4810.25 size=28 orders=18", "{who}");
    assert_eq!(levels[19], "instrument=17077 side=ask level=10 price=4812.50 size=55 orders=24", "{who}");
}

/// Asserts a subscriber that never fell behind: exact book, every record, no gap.
pub fn assert_clean(lines: &[String], who: &str) {
    assert_exact(lines, who);
    let subscribed: Vec<&String> = lines.iter().filter(|l| l.starts_with("subscribed ")).collect();
    assert!(!subscribed.is_empty() && subscribed.iter().all(|l| l.ends_with(" book=mbo")), "{who}: {subscribed:?}");
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    for (k, v) in [("gaps", "0"), ("missed", "0"), ("book_errors", "0"), ("corrupt", "0"), ("end", "end_of_stream")] {
        assert_eq!(stream[k], v, "{who}: {k}");
    }
    assert_eq!(stream["book_records"], crate::esh4::RECORDS.to_string(), "{who}");
}

/// A child process whose stdout is read as it comes, so a test can wait for a line before acting.
pub struct Watched {
    pub child: Child,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Watched {
    /// Starts reading `child`'s piped stdout.
    pub fn new(mut child: Child) -> Watched {
        use std::io::BufRead;
        let out = child.stdout.take().expect("stdout is piped");
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Watched { child, lines, reader: Some(reader) }
    }

    /// Waits until a line starting with `prefix` was printed; panics (with what was printed) if the process
    /// ends or the watchdog passes first.
    pub fn wait_for_line(&mut self, prefix: &str) {
        let start = Instant::now();
        loop {
            if self.lines.lock().unwrap().iter().any(|l| l.starts_with(prefix)) {
                return;
            }
            let ended = self.child.try_wait().expect("try_wait").is_some();
            if ended {
                // Its last lines may still be in the pipe: read them all before judging (on a loaded host the
                // reader thread can lag the process's exit).
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                    continue;
                }
            }
            if ended || start.elapsed() > watchdog() {
                let mut err = String::new();
                if ended {
                    if let Some(mut e) = self.child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                }
                let out = self.lines.lock().unwrap().join("\n");
                panic!("no line `{prefix}...` (ended: {ended}); stdout so far:\n{out}\nstderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the process with the watchdog; returns its exit code, its stdout lines and its stderr.
    pub fn finish(mut self) -> (Option<i32>, Vec<String>, String) {
        use std::io::Read;
        let ended = ended_within_watchdog(&mut self.child);
        let status = self.child.wait().expect("wait");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let lines = std::mem::take(&mut *self.lines.lock().unwrap());
        if !ended {
            panic!("watchdog: child ran over {:?}; stdout:\n{}\nstderr:\n{err}", watchdog(), lines.join("\n"));
        }
        (status.code(), lines, err)
    }
}

/// A DBN file (`src`, one of the bundled captures) with a second, quiet instrument: one copy of the first record
/// for `quiet_id` right after it, and nothing more for that id. Written as a plain (uncompressed) DBN file under
/// the temp dir, named after `tag` and the process; returns its path.
pub fn with_quiet_instrument(src: &Path, quiet_id: u32, tag: &str) -> std::path::PathBuf {
    let mut raw = crate::esh4::decompressed(src);
    let first = crate::esh4::first_record_offset(&raw);
    let mut quiet = raw[first..first + 56].to_vec();
    quiet[4..8].copy_from_slice(&quiet_id.to_le_bytes());
    raw.splice(first + 56..first + 56, quiet);
    let path = std::env::temp_dir().join(format!("mdfan-{tag}-quiet-{quiet_id}-{}.dbn", std::process::id()));
    std::fs::write(&path, &raw).unwrap();
    path
}
