//! Helpers shared by the subscriber crate's end-to-end tests: an in-process publisher on a free port, and
//! `mdfan-subscribe` child processes with a watchdog.
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

/// Longest any child may run before the test kills it and fails (a watchdog, not a timing assertion).
pub const WATCHDOG: Duration = Duration::from_secs(120);

pub struct RunningPublisher {
    pub addr: SocketAddr,
    pub shutdown: Arc<AtomicBool>,
    pub handle: JoinHandle<Result<RunReport, PublisherError>>,
}

/// A publisher config text for `feed` on `listen`. `extra_publisher` goes in `[publisher]`, `extra_feed` in
/// `[feed]` (e.g. `pace = 100`).
pub fn config_text(listen: &str, feed: &Path, wait_for: usize, extra_publisher: &str, extra_feed: &str) -> String {
    format!(
        "[publisher]\nlisten = \"{listen}\"\nwait_for_subscribers = {wait_for}\n{extra_publisher}\n\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n{extra_feed}\n\n[fabric]\nprovider = \"shm\"\n",
        feed.display()
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
    Command::new(env!("CARGO_BIN_EXE_mdfan-subscribe"))
        .args(["--connect", &addr.to_string(), "--name", name, "--idle", "yield"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mdfan-subscribe starts")
}

/// Waits for a child with the watchdog; kills it and panics if it overstays.
pub fn wait_with_watchdog(mut child: Child) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "watchdog: child ran over {WATCHDOG:?}\nstdout:\n{}\nstderr:\n{}",
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
    let bin = Path::new(env!("CARGO_BIN_EXE_mdfan-subscribe")).with_file_name("mdfan-publisher");
    if !bin.exists() {
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
