//! `mdfan-bridge` against real `nats-server` processes (Debian's package; JetStream, a temporary store) that the
//! tests start themselves, and `mdfan-nats-book` rebuilding ESH4's book from them: exact against the data
//! README's final book (orders 11,217; 922 bid and 565 ask levels; 4810.00 x 22 / 4810.25 x 28).
//!
//! - **Another host, a late join, a server restart** (root: network namespaces): the server and the bridge in
//!   a "plant" namespace, the consumers in a "research" one, joined by a veth pair. One consumer from the start,
//!   the server restarted mid-stream, one consumer joining late, one after the end.
//! - **NATS slow, the publisher never notices**: the server frozen (SIGSTOP) mid-stream; a direct subscriber of
//!   the same publisher gets every record without a gap, the bridge counts what it could not publish, resyncs
//!   the instrument, and a consumer after the end is exact.
//! - **A 3-node cluster loses a node**: three servers with routes on loopback ports, the stream with 3 replicas,
//!   one node SIGKILLed mid-stream: the consumer's book is exact, and the stream holds at least every message
//!   the bridge had acknowledged.
//!
//! Without `nats-server` on PATH each test says `SKIP nats` on stderr (which `.ci/run` refuses) and passes.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Health, Kind, Subscriber, SubscriberConfig};

const WATCHDOG: Duration = Duration::from_secs(180);
const PREFIX: &str = "md.glbx.0";
/// The data README's final ESH4 book, as `mdfan-nats-book` prints it.
const BOOK: &str = "stale=false orders=11217 levels_bid=922 levels_ask=565 bbo=4810.00x22/4810.25x28";

fn have_nats(test: &str) -> bool {
    let ok = Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        {
            // on the process's stderr, not the test's captured output: .ci/run must see it
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP nats {test}: nats-server not found (Debian: apt-get install nats-server)"
            );
        }
    }
    ok
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mdfan-bridge-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `nats-server` with JetStream; killed when dropped.
struct Nats {
    child: Child,
    args: Vec<String>,
    netns: Option<String>,
    addr: String,
}

impl Nats {
    fn start(netns: Option<&str>, addr: &str, port: u16, store: &Path, extra: &[String]) -> Nats {
        let mut args: Vec<String> =
            ["-js", "-a", addr, "-p", &port.to_string(), "-sd", store.to_str().unwrap()].map(String::from).to_vec();
        args.extend_from_slice(extra);
        let mut n = Nats {
            child: spawn_nats(netns, &args),
            args,
            netns: netns.map(String::from),
            addr: format!("{addr}:{port}"),
        };
        n.wait_ready();
        n
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // In a namespace the port is not reachable from here: wait for the server's own line instead.
            if self.netns.is_none() && TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            if self.netns.is_some() {
                let probe = Command::new("ip")
                    .args(["netns", "exec", self.netns.as_deref().unwrap(), "bash", "-c"])
                    .arg(format!("exec 3<>/dev/tcp/{}", self.addr.replace(':', "/")))
                    .output();
                if probe.is_ok_and(|o| o.status.success()) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "nats-server {} did not start", self.addr);
            assert!(self.child.try_wait().unwrap().is_none(), "nats-server {} exited", self.addr);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// SIGTERM, wait, and start again with the same store.
    fn restart(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        self.child = spawn_nats(self.netns.as_deref(), &self.args);
        self.wait_ready();
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn in_netns(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

fn spawn_nats(netns: Option<&str>, args: &[String]) -> Child {
    in_netns(netns, "nats-server").args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("nats-server")
}

/// A publisher of ESH4 at `pace` waiting for `wait_for` subscribers, listening on loopback and on `unix`.
fn publisher(pace: f64, wait_for: usize, unix: Option<&Path>) -> (String, JoinHandle<mdfan_publisher::RunReport>) {
    let unix = unix.map_or(String::new(), |p| format!("listen_unix = {p:?}\n"));
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n{unix}wait_for_subscribers = {wait_for}\ncounters_dir = \"\"\n\n[feed]\nformat = \"dbn\"\npath = {:?}\npace = {pace:?}\n\n[fabric]\nprovider = \"shm\"\n",
        esh4::main_file()
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("bridge-test.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    (endpoint, std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs")))
}

fn bridge(netns: Option<&str>, connect: &str, nats: &str, stream: &str, extra: &[&str]) -> Child {
    in_netns(netns, env!("CARGO_BIN_EXE_mdfan-bridge"))
        .args(["--connect", connect, "--nats", nats, "--stream", stream, "--prefix", PREFIX])
        .args(["--snapshot-every-s", "1", "--report-s", "0", "--ack-timeout-ms", "1000"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mdfan-bridge")
}

fn nats_book(netns: Option<&str>, nats: &str, stream: &str) -> Child {
    in_netns(netns, env!("CARGO_BIN_EXE_mdfan-nats-book"))
        .args(["--nats", nats, "--stream", stream, "--prefix", PREFIX, "--symbol", "ESH4", "--idle-exit-s", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mdfan-nats-book")
}

/// A child's exit and output; the watchdog kills it.
fn finish(who: &str, mut child: Child) -> (Option<i32>, String, String) {
    let deadline = Instant::now() + WATCHDOG;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("watchdog: {who}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The consumer's book line: exact, and its fields by name.
fn assert_exact(who: &str, (code, out, err): &(Option<i32>, String, String)) -> String {
    let line = out.lines().rev().find(|l| l.starts_with("nats-book ")).unwrap_or_else(|| panic!("{who}: {out}{err}"));
    assert_eq!(*code, Some(0), "{who}: {out}{err}");
    assert!(line.starts_with("nats-book symbol=ESH4 token=ESH4 instrument_id=17077 "), "{who}: {line}");
    assert!(line.ends_with(BOOK), "{who}: {line}\n{err}");
    line.to_owned()
}

/// An `mdfan-bridge` (upstream 127.0.0.1:1, never reached) that must exit 1 on its NATS setup: its stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-bridge"))
        .args(["--connect", "127.0.0.1:1"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    err
}

fn field(line: &str, name: &str) -> u64 {
    line.split(&format!(" {name}="))
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {line}"))
}

/// Waits for the bridge's `bridge stream=` ready line.
fn wait_bridge_ready(child: &mut Child) -> std::io::Lines<std::io::BufReader<std::process::ChildStdout>> {
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the bridge's first line").unwrap();
    assert!(first.starts_with("bridge stream="), "{first}");
    lines
}

/// The bridge's last counters line, after its exit.
fn bridge_end(mut child: Child, lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) -> String {
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    let mut err = String::new();
    use std::io::Read;
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{rest:?}\n{err}");
    rest.last().cloned().unwrap_or_else(|| panic!("no counters line: {err}"))
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2) runs");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces joined by a veth pair: plant 10.77.0.1, research 10.77.0.2; deleted when dropped.
struct Hosts {
    plant: String,
    research: String,
}

impl Hosts {
    fn make() -> Hosts {
        let id = std::process::id();
        let h = Hosts { plant: format!("mdfan-plant-{id}"), research: format!("mdfan-research-{id}") };
        for ns in [&h.plant, &h.research] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let (a, b) = (format!("mbp-{id}"), format!("mbr-{id}"));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", &h.plant]);
        ip(&["link", "set", &b, "netns", &h.research]);
        ip(&["-n", &h.plant, "addr", "add", "10.77.0.1/24", "dev", &a]);
        ip(&["-n", &h.research, "addr", "add", "10.77.0.2/24", "dev", &b]);
        ip(&["-n", &h.plant, "link", "set", &a, "up"]);
        ip(&["-n", &h.research, "link", "set", &b, "up"]);
        h
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in [&self.plant, &self.research] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

#[test]
fn a_consumer_on_another_host_rebuilds_the_book_from_the_start_after_a_restart_and_joining_late() {
    if !have_nats("netns") {
        return;
    }
    if !nix::unistd::Uid::effective().is_root() {
        {
            // on the process's stderr, not the test's captured output: .ci/run must see it
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIP nats netns: network namespaces need root");
        }
        return;
    }
    let d = tempdir("netns");
    let hosts = Hosts::make();
    let (plant, research) = (Some(hosts.plant.as_str()), Some(hosts.research.as_str()));
    let mut server = Nats::start(plant, "10.77.0.1", 4222, &d.join("js"), &[]);
    let url = "nats://10.77.0.1:4222";
    // Paced at 600x: the session's two hours in about 12 s.
    let sock = d.join("publisher.sock");
    let (_, publisher) = publisher(600.0, 1, Some(&sock));
    let mut b = bridge(plant, &format!("unix:{}", sock.display()), url, "ESH4", &[]);
    let lines = wait_bridge_ready(&mut b);
    let first = nats_book(research, url, "ESH4");
    std::thread::sleep(Duration::from_secs(3));
    server.restart();
    std::thread::sleep(Duration::from_secs(3));
    let late = nats_book(research, url, "ESH4");
    publisher.join().unwrap();
    let counters = bridge_end(b, lines);
    assert!(field(&counters, "connects") >= 2, "connected, then again after the restart: {counters}");
    let after = nats_book(research, url, "ESH4");
    let first = assert_exact("from the start", &finish("first", first));
    let late = assert_exact("joined late", &finish("late", late));
    let after = assert_exact("after the end", &finish("after", after));
    for line in [&first, &late, &after] {
        assert!(field(line, "start_seq") > 1 && field(line, "snapshots") >= 1, "began from a snapshot: {line}");
    }
    assert!(field(&first, "start_seq") < field(&late, "start_seq"), "{first}\n{late}");
    drop(server);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_frozen_server_never_slows_the_publisher_and_the_bridge_resyncs_after_it() {
    if !have_nats("frozen") {
        return;
    }
    let d = tempdir("frozen");
    let port = free_port();
    let server = Nats::start(None, "127.0.0.1", port, &d.join("js"), &[]);
    let url = format!("nats://127.0.0.1:{port}");
    let (endpoint, publisher) = publisher(600.0, 2, None);
    let mut b = bridge(None, &endpoint, &url, "ESH4", &["--queue", "1024", "--in-flight", "64"]);
    let lines = wait_bridge_ready(&mut b);
    // A direct subscriber of the same publisher: every record, no gap.
    let mut cfg = SubscriberConfig::new(&endpoint, "direct");
    cfg.ring_slots = 1 << 17;
    let mut sub = Subscriber::connect(&cfg).unwrap();
    let direct = std::thread::spawn(move || {
        let (mut records, deadline) = (0u64, Instant::now() + WATCHDOG);
        loop {
            assert!(Instant::now() < deadline, "watchdog: direct");
            sub.poll(1024, |e| {
                if let Event::Record(r) = e {
                    if !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) {
                        records += 1;
                    }
                }
            });
            if let Some(Health::Ended(_)) = sub.maintain_if_due() {
                return (records, sub.stats().gaps);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    server.signal(nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    server.signal(nix::sys::signal::Signal::SIGCONT);
    publisher.join().unwrap();
    assert_eq!(direct.join().unwrap(), (esh4::RECORDS, 0), "the publisher's other subscriber saw nothing of it");
    let counters = bridge_end(b, lines);
    assert!(
        field(&counters, "failed") + field(&counters, "dropped") > 0 && field(&counters, "resyncs") > 0,
        "what could not be published is counted and resynced: {counters}"
    );
    let after = assert_exact("after the end", &finish("after", nats_book(None, &url, "ESH4")));
    assert!(field(&after, "snapshots") >= 1, "{after}");
    drop(server);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_three_node_cluster_loses_a_node_and_the_book_and_every_acknowledged_message_stay() {
    if !have_nats("cluster") {
        return;
    }
    let d = tempdir("cluster");
    let (client, route): (Vec<u16>, Vec<u16>) = (0..3).map(|_| (free_port(), free_port())).unzip();
    let routes = route.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let mut nodes: Vec<Option<Nats>> = (0..3)
        .map(|i| {
            let extra = [
                "-n".to_owned(),
                format!("node{i}"),
                "--cluster_name".to_owned(),
                "mdfan".to_owned(),
                "--cluster".to_owned(),
                format!("nats://127.0.0.1:{}", route[i]),
                "--routes".to_owned(),
                routes.clone(),
            ];
            Some(Nats::start(None, "127.0.0.1", client[i], &d.join(format!("js{i}")), &extra))
        })
        .collect();
    let urls: Vec<String> = client.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect();
    let (endpoint, publisher) = publisher(600.0, 1, None);
    let mut b = bridge(None, &endpoint, &urls.join(","), "ESH4", &["--replicas", "3"]);
    let lines = wait_bridge_ready(&mut b);
    // The consumer reads from the two nodes that stay.
    let consumer = nats_book(None, &urls[1..].join(","), "ESH4");
    std::thread::sleep(Duration::from_secs(4));
    nodes[0].as_ref().unwrap().signal(nix::sys::signal::Signal::SIGKILL);
    nodes[0] = None;
    publisher.join().unwrap();
    let counters = bridge_end(b, lines);
    let line = assert_exact("cluster consumer", &finish("consumer", consumer));
    assert!(field(&line, "updates") > 0, "{line}");
    // Every acknowledged message is in the stream (which deletes nothing within its max age).
    let acked = field(&counters, "acked");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stored = rt.block_on(async {
        let client = async_nats::connect(urls[1..].to_vec()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        js.get_stream("ESH4").await.unwrap().info().await.unwrap().state.messages
    });
    assert!(acked > 0 && stored >= acked, "stored {stored}, acknowledged {acked}: {counters}");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&d);
}

/// A signal makes the bridge drain what it holds to NATS (at most about 35 s); to a server that froze that is
/// the whole wait, so a second signal ends it at once with 130 (before, it was ignored: an operator's stop waited
/// out the drain, and `timeout` or a second Ctrl-C could not end it).
#[test]
fn a_second_signal_ends_a_bridge_draining_to_a_frozen_server_at_once() {
    use nix::sys::signal::{kill, Signal};
    if !have_nats("second-signal") {
        return;
    }
    let d = tempdir("second-signal");
    let port = free_port();
    let server = Nats::start(None, "127.0.0.1", port, &d.join("js"), &[]);
    let url = format!("nats://127.0.0.1:{port}");
    let (endpoint, publisher) = publisher(600.0, 1, None);
    let mut b = bridge(None, &endpoint, &url, "ESH4", &[]);
    let _lines = wait_bridge_ready(&mut b);
    let pid = nix::unistd::Pid::from_raw(b.id() as i32);
    std::thread::sleep(Duration::from_secs(1));
    server.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(500)); // publishes wait for acknowledgements that do not come
    kill(pid, Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(b.try_wait().unwrap().is_none(), "the first signal drains, and the server is frozen: it waits");
    let second = Instant::now();
    kill(pid, Signal::SIGTERM).unwrap();
    let (code, _, err) = finish("second signal", b);
    assert_eq!(code, Some(130), "{err}");
    assert!(second.elapsed() < Duration::from_secs(10), "at once, not after the drain: {:?}", second.elapsed());
    server.signal(Signal::SIGCONT);
    publisher.join().unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&d);
}

/// A bridge stopped mid-stream (SIGTERM: a restart for a new config or binary) sends no `end`, so a consumer
/// goes on; a second bridge on the same stream and prefix attaches to the same publisher late (its session
/// begins with a snapshot), begins each instrument with a snapshot of its own run, and the consumer, which takes
/// nothing of the new run before that snapshot, ends exact at the publisher's end. A consumer started after the
/// end starts from the second run's snapshot.
#[test]
fn a_bridge_stopped_and_started_again_mid_stream_leaves_its_consumers_exact() {
    if !have_nats("restart") {
        return;
    }
    let d = tempdir("restart");
    let port = free_port();
    let server = Nats::start(None, "127.0.0.1", port, &d.join("js"), &[]);
    let url = format!("nats://127.0.0.1:{port}");
    let (endpoint, publisher) = publisher(600.0, 1, None);
    // Update messages of at most 256 bytes: 4 records (ESH4 at 600x has bursts of more within --batch-us).
    let small = ["--batch-bytes", "256"];
    let mut first = bridge(None, &endpoint, &url, "ESH4", &small);
    let first_lines = wait_bridge_ready(&mut first);
    let live = nats_book(None, &url, "ESH4");
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let first_out: Vec<String> = first_lines.map_while(Result::ok).collect();
    assert_eq!(first.wait().unwrap().code(), Some(130), "{first_out:?}");
    let mut second = bridge(None, &endpoint, &url, "ESH4", &small);
    let second_lines = wait_bridge_ready(&mut second);
    publisher.join().unwrap();
    let counters = bridge_end(second, second_lines);
    assert!(field(&counters, "records_in") > 0, "{counters}");
    let live = assert_exact("live across the restart", &finish("live", live));
    assert!(field(&live, "snapshots") >= 2, "the first run's and the second's: {live}");
    let after = assert_exact("after the end", &finish("after", nats_book(None, &url, "ESH4")));
    assert!(field(&after, "start_seq") > 1, "{after}");
    assert_eq!(field(&live, "max_update_records"), 4, "--batch-bytes 256 fills and closes at 4 records: {live}");
    assert!(field(&after, "max_update_records") <= 4, "{after}");
    // The stream is this prefix's: a bridge of another prefix on it is refused before it subscribes.
    let err = refused(&["--nats", &url, "--stream", "ESH4", "--prefix", "md.other"]);
    assert!(err.contains("stream ESH4 exists and takes subjects [\"md.glbx.0.>\"], not md.other.>"), "{err}");
    // Replicas a single server cannot give: refused at once, naming the server's reason, not retried for 30 s.
    let err = refused(&["--nats", &url, "--stream", "R3", "--replicas", "3"]);
    assert!(err.contains("stream R3: jetstream error: replicas > 1 not supported in non-clustered mode"), "{err}");
    assert!(!err.contains("(retrying)"), "{err}");
    // A consumer of a stream that is not there waits --idle-exit-s at most, then names the streams there.
    let absent = in_netns(None, env!("CARGO_BIN_EXE_mdfan-nats-book"))
        .args(["--nats", &url, "--stream", "MDFAN", "--symbol", "ESH4", "--idle-exit-s", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mdfan-nats-book");
    let (code, _, err) = finish("absent stream", absent);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("stream MDFAN: not there after 2 s") && err.contains("(streams there: ESH4)"), "{err}");
    drop(server);
    let _ = std::fs::remove_dir_all(&d);
}
