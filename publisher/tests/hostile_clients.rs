//! Hostile clients on a shared host (issue 27): a client that never reads its control connection, one that
//! forges audit lines through its name or its bye, one that guesses tokens, a symlink planted where the counters
//! file goes and a counters file truncated under its writer and its reader. Each must cost the publisher nothing
//! but a bounded buffer, a counter and a line: the healthy subscribers beside them end with the reference book.
//!
//! The never-reading client connects with a 4 KiB receive buffer and a 536-byte MSS, so the kernel holds almost
//! nothing of what is sent to it (on loopback's 64 KiB MSS it would take some 2.8 MB first), and asks for an
//! `Accept` of about 400 KB (every definition of a 4,000-line symbol file).

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::io::BufRead as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_fabric::shm::{ShmLocalRing, DEFAULT_DIR};
use mdfan_fabric::CloseReason;
use mdfan_publisher::config::Config;
use mdfan_publisher::{counters_path, Publisher, PublisherError, RunReport};
use mdfan_subscriber::{Books, Event, Health, Kind, Side, Subscriber, SubscriberConfig};
use mdfan_tuning::counters;
use mdfan_wire::control::{self, ControlMsg, SlowConsumerPolicy, Subscribe};

const ESH4: u32 = esh4::INSTRUMENT_ID;
/// Longest any wait below may take before the test fails (a watchdog, not a timing assertion).
const WATCHDOG: Duration = Duration::from_secs(120);

/// One test of this file at a time: two of them bound how long the control plane may take, and five publishers
/// with their subscribers on a 2-core host would measure each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A folder of this test's own under the temp dir (0755, root's: a folder the publisher accepts).
fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mdfan-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A symbol file of `n` instruments no feed record names (ids from 1,000,000), so an `Accept` carrying every
/// definition is about 90 bytes times `n`.
fn symbol_file(dir: &Path, n: u32) -> PathBuf {
    let path = dir.join("symbols.csv");
    let mut text = String::from("security_id,symbol,display_factor,tick_size\n");
    for i in 0..n {
        text.push_str(&format!("{},SYMBOL{i:06},1,0.25\n", 1_000_000 + i));
    }
    std::fs::write(&path, text).unwrap();
    path
}

struct Running {
    addr: SocketAddr,
    shutdown: Arc<AtomicBool>,
    dump: Arc<AtomicBool>,
    handle: JoinHandle<Result<RunReport, PublisherError>>,
}

/// A publisher in this process over ESH4, with more `[publisher]` and `[feed]` lines (and a whole `[access]`
/// section in `access`).
fn start(publisher_keys: &str, feed_keys: &str, access: &str) -> Running {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nhot_idle = \"yield\"\n{publisher_keys}\n\n[feed]\nformat = \"dbn\"\npath = {:?}\n{feed_keys}\n\n[fabric]\nprovider = \"shm\"\n\n{access}",
        esh4::main_file()
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("hostile.toml")).unwrap()).unwrap();
    let (addr, dump) = (publisher.local_addr(), publisher.dump_flag());
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&shutdown);
    let handle = std::thread::spawn(move || publisher.run(flag));
    Running { addr, shutdown, dump, handle }
}

/// A healthy subscriber's end of the run.
struct Healthy {
    books: Books,
    book_records: u64,
    gaps: u64,
    end: String,
    /// From just before its connect to its snapshot's `SnapshotEnd` (a late joiner's).
    snapshot_after: Option<Duration>,
}

/// Connects `name` (ESH4 only: a small accept) at `endpoint` and reads it to its end on a thread of its own.
fn healthy(endpoint: &str, name: &str, token: Option<&str>) -> JoinHandle<Healthy> {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.instruments = Some(vec![ESH4]);
    cfg.token = token.map(str::to_owned);
    let asked = Instant::now();
    let mut sub = Subscriber::connect(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
    std::thread::spawn(move || {
        let mut h = Healthy { books: Books::new(), book_records: 0, gaps: 0, end: String::new(), snapshot_after: None };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog");
            let n = sub.poll(256, |e| match e {
                Event::Record(r) => {
                    match r.kind() {
                        Some(Kind::SnapshotEnd) => h.snapshot_after = Some(asked.elapsed()),
                        Some(Kind::Heartbeat | Kind::EndOfStream | Kind::SnapshotBegin) => {}
                        _ => h.book_records += 1,
                    }
                    h.books.apply(r).expect("every record applies");
                }
                Event::Gap { .. } => h.gaps += 1,
                _ => {}
            });
            if n == 0 {
                // a 2-core host: a subscriber that spins (or only yields) takes a core from the conductor, and
                // each one more would slow the later joiners' snapshots: this is not what is measured here
                std::thread::sleep(Duration::from_micros(100));
            }
            if let Some(Health::Ended(end)) = sub.maintain_if_due() {
                h.end = end.as_str().to_owned();
                return h;
            }
        }
    })
}

/// The final book of data/README.md.
fn assert_reference_book(h: &Healthy, who: &str) {
    let cp = &esh4::CHECKPOINTS[4];
    let book = h.books.get(ESH4).unwrap_or_else(|| panic!("{who}: no ESH4 book"));
    assert_eq!(h.end, "end_of_stream", "{who}");
    assert_eq!(book.order_count(), cp.orders, "{who}");
    assert_eq!((book.level_count(Side::Bid), book.level_count(Side::Ask)), (cp.levels_bid, cp.levels_ask), "{who}");
    let (bid, ask) = book.bbo();
    let (bid, ask) = (bid.unwrap(), ask.unwrap());
    assert_eq!((bid.price_e9, bid.size, bid.orders), cp.best_bid, "{who}");
    assert_eq!((ask.price_e9, ask.size, ask.orders), cp.best_ask, "{who}");
}

/// A client that never reads its control connection: a 4 KiB receive buffer and a 536-byte MSS set before it
/// connects (so the publisher's socket takes only some 50 KB for it), a real ring of its own (so it is accepted,
/// and read on a thread of its own until the publisher closes it: a full ring is the hot loop's matter, bounded
/// by the stall timeout, not the control plane's), and a subscribe for `instruments` without a snapshot (a
/// snapshot's catch-up would hold a file feed's journal and share the hot loop with the healthy joiners' own:
/// the hot loop's matter too). Returns the socket (keep it) and the ring's reader.
fn never_reader(addr: SocketAddr, name: &str, instruments: Option<Vec<u32>>) -> (TcpStream, JoinHandle<()>) {
    use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket::socket(AddressFamily::Inet, SockType::Stream, SockFlag::empty(), None).unwrap();
    socket::setsockopt(&fd, sockopt::RcvBuf, &4096).unwrap();
    socket::setsockopt(&fd, sockopt::TcpMaxSeg, &536).unwrap();
    let SocketAddr::V4(at) = addr else { unreachable!() };
    socket::connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(at)).unwrap();
    let mut s = TcpStream::from(fd);
    let (ring, grant) = ShmLocalRing::create(Path::new(DEFAULT_DIR), 4096).unwrap();
    let sub =
        Subscribe { instruments, policy: SlowConsumerPolicy::Resync, snapshot: false, ..Subscribe::new(name, grant) };
    control::write_msg(&mut s, &ControlMsg::Subscribe(sub)).unwrap();
    let reader = std::thread::spawn(move || {
        let mut rx = mdfan_subscriber::Receiver::new(ring);
        let deadline = Instant::now() + WATCHDOG;
        while rx.closed().is_none() && Instant::now() < deadline {
            if rx.poll(4096, |_| {}) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    (s, reader)
}

/// Waits until `f` holds (polled every millisecond); returns how long that took.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < WATCHDOG, "watchdog: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    t.elapsed()
}

/// Issue 27's first break: a client that never reads froze the conductor (blocking writes, no deadline): late
/// subscribers got no answer, SIGUSR1 printed nothing, the counters file went stale. Here, with two such clients
/// attached (one asking for 23,500 copies of ESH4, which is one instrument; one whose accept carries 4,000
/// definitions), a late joiner's snapshot comes within 100 ms of a late joiner's before them, a counter dump is
/// served within 100 ms, the counters file stays fresh, and the second client is closed at its write deadline
/// (counted). Every healthy subscriber ends with the reference book.
#[test]
fn a_client_that_never_reads_delays_no_snapshot_no_signal_and_is_closed_at_its_write_deadline() {
    let _serial = one_at_a_time();
    let dir = folder("never-reads");
    let symbols = symbol_file(&dir, 4_000);
    let p = start(
        &format!("wait_for_subscribers = 1\ncounters_dir = {dir:?}\nkeep_counters = true"),
        &format!("pace = 500\nsymbols = {symbols:?}"),
        "",
    );
    let endpoint = p.addr.to_string();
    let first = healthy(&endpoint, "first", None);
    std::thread::sleep(Duration::from_millis(300)); // the replay runs
    let before = healthy(&endpoint, "before", None);
    let (mut copies, _copies_ring) = never_reader(p.addr, "copies", Some(vec![ESH4; 23_500]));
    let (_all, _all_ring) = never_reader(p.addr, "all-definitions", None);
    std::thread::sleep(Duration::from_millis(300)); // both accepted; the second's accept waits in its buffer
    let after = healthy(&endpoint, "after", None);
    // (a pass that builds a joiner's snapshot takes its time: the dump is asked for once that is done)
    std::thread::sleep(Duration::from_millis(200));
    p.dump.store(true, Ordering::Relaxed);
    let dump_took = wait_until("the counter dump", || !p.dump.load(Ordering::Relaxed));
    assert!(dump_took < Duration::from_millis(100), "SIGUSR1's dump waited {dump_took:?}");
    let path = counters_path(&dir, p.addr);
    let file = counters::read(&path).unwrap();
    let age_ms = mdfan_lines::realtime_ns().saturating_sub(file.updated_ns) / 1_000_000;
    assert!(age_ms < 1_000, "the counters file is rewritten every 100 ms: {age_ms} ms old");
    // the accept of 23,500 copies of one id carries one definition
    copies.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match control::read_msg(&mut copies).unwrap() {
        ControlMsg::Accept(a) => assert_eq!(a.definitions.iter().map(|d| d.instrument_id).collect::<Vec<_>>(), [ESH4]),
        other => panic!("{other:?}"),
    }
    drop(copies);
    let closed = |f: &counters::Snapshot| f.get("mdfan_control_closed_total", "cause=\"write_deadline\"");
    wait_until("the never-reading client closed at its write deadline", || {
        counters::read(&path).is_ok_and(|f| closed(&f) == Some(1))
    });
    let (first, before, after) = (first.join().unwrap(), before.join().unwrap(), after.join().unwrap());
    let report = p.handle.join().unwrap().unwrap();
    for (h, who) in [(&first, "first"), (&before, "before"), (&after, "after")] {
        assert_reference_book(h, who);
        assert_eq!(h.gaps, 0, "{who}");
    }
    assert_eq!(first.book_records, esh4::RECORDS, "the first one had every record");
    let (b, a) = (before.snapshot_after.expect("a late joiner's snapshot"), after.snapshot_after.unwrap());
    assert!(a < b + Duration::from_millis(100), "snapshot before the clients that never read {b:?}, after {a:?}");
    let all = report.session("all-definitions").unwrap();
    assert_eq!(all.end, Some(CloseReason::PeerGone), "{}", all.line());
    let f = counters::read(&path).unwrap();
    assert_eq!((closed(&f), f.get("mdfan_control_closed_total", "cause=\"out_overflow\"")), (Some(1), Some(0)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM (the shutdown flag) while a client does not read what it was sent: the publisher ends the stream and
/// returns within a second, and the healthy subscriber's book is the file's book at the record it ended after.
#[test]
fn sigterm_is_served_within_a_second_while_a_client_never_reads() {
    let _serial = one_at_a_time();
    let dir = folder("sigterm");
    let symbols = symbol_file(&dir, 4_000);
    let p = start("wait_for_subscribers = 1\ncounters_dir = \"\"", &format!("pace = 500\nsymbols = {symbols:?}"), "");
    let sub = healthy(&p.addr.to_string(), "healthy", None);
    std::thread::sleep(Duration::from_millis(300));
    let (stuck, ring) = never_reader(p.addr, "stuck", None);
    // the test's own watchdog: without it, a publisher stuck writing to this client would wait for it forever
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(10));
        drop((stuck, ring));
    });
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    p.shutdown.store(true, Ordering::Relaxed);
    let report = p.handle.join().unwrap().unwrap();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    assert_eq!(report.end, CloseReason::Shutdown);
    let h = sub.join().unwrap();
    assert_eq!((h.end.as_str(), h.gaps), ("publisher_shutdown", 0));
    assert!(h.book_records > 0 && h.book_records < esh4::RECORDS, "cut mid-replay: {}", h.book_records);
    // the reference: the file's first `book_records` records into a book of our own
    let mut stream = mdfan_feed::dbn::MboStream::open(&esh4::main_file()).unwrap();
    let mut want = Books::new();
    for _ in 0..h.book_records {
        want.apply(&stream.next_update().unwrap().unwrap()).unwrap();
    }
    let (got, want) = (h.books.get(ESH4).unwrap(), want.get(ESH4).unwrap());
    assert_eq!(got.order_count(), want.order_count());
    for side in [Side::Bid, Side::Ask] {
        assert_eq!(got.top(side, 10), want.top(side, 10), "{side:?}");
        assert_eq!(got.level_count(side), want.level_count(side), "{side:?}");
    }
    let _ = release; // ends on its own
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A publisher process (text logs on stderr, `RUST_LOG=info`) over ESH4 at `publisher_keys`; returns the
/// child, the endpoint (a free port) and its stderr's path.
fn publisher_process(dir: &Path, publisher_keys: &str, access: &str) -> (std::process::Child, SocketAddr, PathBuf) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:{port}\"\nhot_idle = \"yield\"\n{publisher_keys}\n\n[feed]\nformat = \"dbn\"\npath = {:?}\n\n{access}",
        esh4::main_file()
    );
    let cfg = dir.join("publisher.toml");
    std::fs::write(&cfg, text).unwrap();
    let log = dir.join("stderr.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mdfan-publisher"))
        .args(["--config", cfg.to_str().unwrap()])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("publisher listening="), "{line}");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, format!("127.0.0.1:{port}").parse().unwrap(), log)
}

/// Sends `sub` on a fresh connection and returns the answer.
fn ask(addr: SocketAddr, sub: Subscribe) -> (TcpStream, ControlMsg) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    control::write_msg(&mut s, &ControlMsg::Subscribe(sub)).unwrap();
    let answer = control::read_msg(&mut s).unwrap();
    (s, answer)
}

fn subscribe(name: &str, ring: mdfan_wire::control::RingGrant, token: Option<&str>) -> Subscribe {
    Subscribe { policy: SlowConsumerPolicy::Resync, token: token.map(str::to_owned), ..Subscribe::new(name, ring) }
}

/// Issue 27's audit log break: in the text format, a newline or ESC in a subscriber's name (no `[access]`) or in
/// a `Bye`'s detail forged whole audit lines, and a long name made one line as long. Here the name is refused
/// (a control character) and the detail escaped: each stays inside one line, no ESC reaches the log, and every
/// line is short; the real accepts are the only `subscriber attached` lines.
#[test]
fn an_audit_line_with_a_newline_or_escape_in_a_name_or_a_bye_stays_one_line() {
    let _serial = one_at_a_time();
    let dir = folder("audit");
    let (mut child, addr, log) = publisher_process(&dir, "wait_for_subscribers = 2\ncounters_dir = \"\"", "");
    let forged = "z\n2026-12-01T00:00:00.000000Z  INFO mdfan_audit: subscriber attached name=strategy-z";
    let (_ring, grant) = ShmLocalRing::create(Path::new(DEFAULT_DIR), 64).unwrap();
    match ask(addr, subscribe(&forged[..60], grant, None)).1 {
        ControlMsg::Reject(r) => {
            assert_eq!(r.reason, "field name: a control character at byte 1 (names are printable text)")
        }
        other => panic!("a name with a newline was not refused: {other:?}"),
    }
    let (_ring, grant) = ShmLocalRing::create(Path::new(DEFAULT_DIR), 64).unwrap();
    match ask(addr, subscribe(&"n".repeat(400_000), grant, None)).1 {
        ControlMsg::Reject(r) => assert_eq!(r.reason, "field name: 400000 bytes, at most 64"),
        other => panic!("{other:?}"),
    }
    let healthy = healthy(&addr.to_string(), "healthy", None);
    let (_ring, grant) = ShmLocalRing::create(Path::new(DEFAULT_DIR), 64).unwrap();
    let (mut leaving, answer) = ask(addr, subscribe("leaving", grant, None));
    assert!(matches!(answer, ControlMsg::Accept(_)), "{answer:?}");
    // the replay starts once both are attached; a bye in the same pass as the accept would undo that
    std::thread::sleep(Duration::from_millis(200));
    let detail = format!("done{}\u{1b}[2J", &forged[1..]);
    let bye = ControlMsg::Bye(mdfan_wire::control::Bye { reason: CloseReason::PeerGone, detail });
    control::write_msg(&mut leaving, &bye).unwrap();
    let h = healthy.join().unwrap();
    assert_reference_book(&h, "healthy");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains('\u{1b}'), "an ESC reached the log:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.iter().all(|l| l.len() < 2_000), "a line longer than 2,000 bytes");
    assert!(!lines.iter().any(|l| l.starts_with("2026-12-01T00:00:00")), "a forged line:\n{text}");
    let attached: Vec<&&str> =
        lines.iter().filter(|l| l.contains("subscriber attached") && !l.contains("subscriber leaving")).collect();
    assert_eq!(attached.len(), 2, "the healthy one and `leaving`: {attached:#?}");
    assert!(attached.iter().all(|l| l.contains("name=healthy") || l.contains("name=leaving")), "{attached:#?}");
    let left = lines.iter().find(|l| l.contains("subscriber leaving")).expect("a leave line");
    assert!(
        left.contains("subscriber said bye: peer_gone done\\n2026-12-01T00:00:00.000000Z  INFO mdfan_audit"),
        "{left}"
    );
    assert!(left.contains("strategy-z\\u{1b}[2J"), "{left}");
    std::fs::remove_dir_all(&dir).unwrap();
}

const TOKEN: &str = "9c1e5d0b7a3f42e68d1c0b9a8f7e6d5c";

/// Issue 27's weak spot: 10,000 wrong tokens in 10 s with no throttling. Here a peer (address and local user)
/// that failed 10 times in its 10 s window is refused unchecked (even with the right token) until the window
/// ends, both counted; three failures are logged one by one, the rest are summed up. The right token over the
/// Unix-domain socket (another peer) is served, exact.
#[test]
fn failed_authentications_are_throttled_per_peer_counted_and_a_healthy_subscriber_is_served() {
    let _serial = one_at_a_time();
    let dir = folder("auth");
    let sock = dir.join("publisher.sock");
    let access = format!("[access]\n[[access.subscribers]]\nname = \"strat\"\ntoken = \"{TOKEN}\"\n");
    let keys =
        format!("wait_for_subscribers = 1\ncounters_dir = {dir:?}\nkeep_counters = true\nlisten_unix = {sock:?}");
    let (mut child, addr, log) = publisher_process(&dir, &keys, &access);
    let grant = mdfan_wire::control::RingGrant::Shm { path: "/dev/shm/mdfan-ring-none".into(), slot_count: 64 };
    let mut reasons = Vec::new();
    for i in 0..200 {
        let token = format!("{TOKEN}-wrong-{i}");
        match ask(addr, subscribe("strat", grant.clone(), Some(&token))).1 {
            ControlMsg::Reject(r) => reasons.push(r.reason),
            other => panic!("{other:?}"),
        }
    }
    let not_accepted = "field token: not accepted for subscriber \"strat\"";
    assert!(reasons[..10].iter().all(|r| r == not_accepted), "{:?}", &reasons[..10]);
    let uid = mdfan_fabric::shm::current_euid();
    let throttled = format!("too many failed authentications from 127.0.0.1 uid {uid}: 10 in 10 s; try again in ");
    assert!(reasons[10..].iter().all(|r| r.starts_with(&throttled)), "{:?}", &reasons[10..12]);
    match ask(addr, subscribe("strat", grant, Some(TOKEN))).1 {
        ControlMsg::Reject(r) => assert!(r.reason.starts_with(&throttled), "{}", r.reason),
        other => panic!("this peer is throttled, whatever its token: {other:?}"),
    }
    let endpoint = format!("unix:{}", sock.display());
    let h = healthy(&endpoint, "strat", Some(TOKEN)).join().unwrap();
    assert_reference_book(&h, "strat");
    assert_eq!((h.book_records, h.gaps), (esh4::RECORDS, 0));
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let f = counters::read(&counters_path(&dir, addr)).unwrap();
    assert_eq!(f.get("mdfan_auth_failures_total", ""), Some(10));
    assert_eq!(f.get("mdfan_auth_throttled_total", ""), Some(191));
    assert_eq!(f.get("mdfan_control_rejects_total", ""), Some(201));
    let text = std::fs::read_to_string(&log).unwrap();
    let refused = text.lines().filter(|l| l.contains("subscriber refused")).count();
    assert_eq!(refused, 3, "3 failures logged one by one, the rest summed up:\n{text}");
    assert!(!sock.exists(), "the socket is removed at the end");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One peer holding idle connections (a breaker's 600, replaced every 1.2 s, as another local user) took every
/// handshake place: every other subscriber was closed with nothing said, and each timed-out connection wrote a
/// log line. Now a peer has at most `MAX_HANDSHAKES_PER_PEER` (64) in progress: its next one is refused with a
/// reason it can read, the timeouts are logged summed up, and once they are gone a subscriber is served.
#[test]
fn one_peer_holding_idle_connections_is_refused_past_its_share_and_logged_summed_up() {
    use mdfan_publisher::conductor::MAX_HANDSHAKES_PER_PEER;
    let _serial = one_at_a_time();
    let dir = folder("idle-peer");
    let keys = format!("wait_for_subscribers = 1\ncounters_dir = {dir:?}\nkeep_counters = true");
    let (mut child, addr, log) = publisher_process(&dir, &keys, "");
    let idle: Vec<TcpStream> = (0..MAX_HANDSHAKES_PER_PEER).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // the publisher takes them in order: the next one is past this peer's share
    std::thread::sleep(Duration::from_millis(300));
    let mut next = TcpStream::connect(addr).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let uid = mdfan_fabric::shm::current_euid();
    match control::read_msg(&mut next).unwrap() {
        ControlMsg::Reject(r) => assert!(
            r.reason.starts_with(&format!("too many connections from this peer (uid {uid}, 127.0.0.1:"))
                && r.reason.ends_with("have not subscribed yet (64): this one is refused"),
            "{}",
            r.reason
        ),
        other => panic!("{other:?}"),
    }
    // the idle ones time out (2 s) and are refused; then a subscriber is served whole
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match control::read_msg(&mut s).unwrap() {
            ControlMsg::Reject(r) => assert_eq!(r.reason, "bad subscribe message: no answer within 2s"),
            other => panic!("{other:?}"),
        }
    }
    let h = healthy(&addr.to_string(), "after", None).join().unwrap();
    assert_reference_book(&h, "after");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let f = counters::read(&counters_path(&dir, addr)).unwrap();
    assert_eq!(f.get("mdfan_control_closed_total", "cause=\"peer_handshake_limit\""), Some(1));
    assert_eq!(f.get("mdfan_control_closed_total", "cause=\"handshake_timeout\""), Some(64));
    let text = std::fs::read_to_string(&log).unwrap();
    let count = |what: &str| text.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count("sent no subscribe message within 2000 ms"), 1, "64 timeouts, one line:\n{text}");
    assert_eq!(count("holds too many connections that have not subscribed"), 1, "{text}");
    assert_eq!(count("subscriber refused"), 0, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 27's counters-file breaks: a symlink planted at the counters file's name made the publisher overwrite
/// its target; a counters file truncated under the publisher or under `mdfan-stat` killed them with SIGBUS. Here
/// the link is left alone (the publisher runs without a counters file, and says so), and a file truncated again
/// and again under both kills neither: the publisher's writes extend it again, `mdfan-stat` says the file is
/// short. The subscriber of each run ends with the reference book.
#[test]
fn a_planted_symlink_is_not_followed_and_a_truncated_counters_file_kills_nothing() {
    let _serial = one_at_a_time();
    let dir = folder("counters");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let at: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let precious = dir.join("precious");
    std::fs::write(&precious, b"keep me").unwrap();
    let link = counters_path(&dir, at);
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let text = format!(
        "[publisher]\nlisten = \"{at}\"\nhot_idle = \"yield\"\nwait_for_subscribers = 1\ncounters_dir = {dir:?}\n\n[feed]\nformat = \"dbn\"\npath = {:?}\n",
        esh4::main_file()
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("planted.toml")).unwrap()).unwrap();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let h = healthy(&at.to_string(), "one", None).join().unwrap();
    assert_reference_book(&h, "one");
    run.join().unwrap().unwrap();
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me", "the link's target is untouched");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "and the link is left alone");
    std::fs::remove_file(&link).unwrap();

    // a run whose counters file is truncated every few ms, with mdfan-stat reading it meanwhile
    let p =
        start(&format!("wait_for_subscribers = 1\ncounters_dir = {dir:?}\nkeep_counters = true"), "pace = 2000", "");
    let path = counters_path(&dir, p.addr);
    let sub = healthy(&p.addr.to_string(), "two", None);
    let done = Arc::new(AtomicBool::new(false));
    let cutter = {
        let (path, done) = (path.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut cuts = 0u32;
            while !done.load(Ordering::Relaxed) {
                if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                    let _ = f.set_len(if cuts.is_multiple_of(2) { 0 } else { 200 });
                    cuts += 1;
                }
                std::thread::sleep(Duration::from_millis(3));
            }
            cuts
        })
    };
    let (mut runs, mut short) = (0, 0);
    while !sub.is_finished() && runs < 40 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdfan-stat")).arg(&path).output().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), None, "mdfan-stat was killed");
        short += usize::from(!out.status.success());
        runs += 1;
    }
    let h = sub.join().unwrap();
    done.store(true, Ordering::Relaxed);
    assert!(cutter.join().unwrap() > 10, "the file was cut again and again");
    assert_reference_book(&h, "two");
    let report = p.handle.join().unwrap().unwrap();
    assert_eq!(report.records, esh4::RECORDS, "the publisher lived through it");
    assert!(runs > 0, "mdfan-stat ran {runs} times ({short} found the file cut)");
    std::fs::remove_dir_all(&dir).unwrap();
}
