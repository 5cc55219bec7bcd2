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

fn verbs_device() -> String {
    std::env::var("MDFAN_TEST_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

fn verbs_gid_index() -> String {
    std::env::var("MDFAN_TEST_GID_INDEX").unwrap_or_else(|_| "1".into())
}

/// The `[fabric]` section for the fabric under test.
fn fabric_section() -> String {
    if on_verbs() {
        format!(
            "[fabric]\nprovider = \"verbs\"\n\n[fabric.verbs]\ndevice = \"{}\"\ngid_index = {}\nsend_queue_depth = 4096\nsignal_every = 64\n",
            verbs_device(),
            verbs_gid_index()
        )
    } else {
        "[fabric]\nprovider = \"shm\"\n".into()
    }
}

/// A binary of this workspace: next to the test's own build, or in `$MDFAN_TEST_BIN_DIR`.
pub fn bin(name: &str) -> std::path::PathBuf {
    match std::env::var_os("MDFAN_TEST_BIN_DIR") {
        Some(dir) => Path::new(&dir).join(name),
        None => Path::new(env!("CARGO_BIN_EXE_mdfan-subscribe")).with_file_name(name),
    }
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

/// Spawns `mdfan-subscribe` against `addr` with extra arguments; stdout and stderr are captured.
pub fn spawn_subscriber(addr: SocketAddr, name: &str, extra: &[&str]) -> Child {
    let mut cmd = Command::new(bin("mdfan-subscribe"));
    cmd.args(["--connect", &addr.to_string(), "--name", name, "--idle", "yield"]);
    if on_verbs() {
        cmd.args(["--fabric", "verbs", "--device", &verbs_device(), "--gid-index", &verbs_gid_index()]);
    }
    cmd.args(extra).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mdfan-subscribe starts")
}

/// Waits for a child with the watchdog; kills it and panics if it overstays.
pub fn wait_with_watchdog(mut child: Child) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > watchdog() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "watchdog: child ran over {:?}\nstdout:\n{}\nstderr:\n{}",
                watchdog(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// The key=value fields of one output line.
pub fn fields(line: &str) -> std::collections::HashMap<&str, &str> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}

/// The `mdfan-publisher` binary next to `mdfan-subscribe`, built first if this test run did not build it.
pub fn publisher_bin() -> std::path::PathBuf {
    let bin = bin("mdfan-publisher");
    if !bin.exists() && std::env::var_os("MDFAN_TEST_BIN_DIR").is_none() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "mdfan-publisher", "--bin", "mdfan-publisher"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building mdfan-publisher failed");
    }
    bin
}

/// A free TCP port on 127.0.0.1 (bound and released; std sets SO_REUSEADDR, so a publisher can reuse it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends a signal to a child process.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -{sig} {}", child.id());
}
