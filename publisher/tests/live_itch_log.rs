//! Live ITCH's "MoldUDP64 packets dropped" warning is rate-limited: a second sender on the group with another
//! MoldUDP64 session (finding: 2,845 warnings, one per 16-datagram poll) gives one warning, then at most one per
//! 10 s; a new kind of drop (a packet too short for its header) is warned about at once. The counters count
//! every packet. Alone in its test binary: it installs the process's tracing subscriber to read the log.

use std::io::Write;
use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;

const WATCHDOG: Duration = Duration::from_secs(60);

/// The log, as the publisher's feed thread writes it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A MoldUDP64 heartbeat (count 0) of `session` at `seq`.
fn heartbeat(session: &[u8; 10], seq: u64) -> Vec<u8> {
    let mut p = session.to_vec();
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes());
    p
}

#[test]
fn a_foreign_session_all_along_is_warned_about_once_per_period_and_counted_in_full() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).init();
    let text = "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n[lines]\na = \"127.0.0.1:0\"\nsession = \"000010059B\"\nrcvbuf_bytes = 1048576\n\n[fabric]\nprovider = \"shm\"\n";
    let cfg = Config::parse(text, Path::new("live-itch-log.toml")).expect("test config parses");
    let p = Publisher::bind(cfg).expect("publisher binds");
    let counters = p.mold_counters().expect("MoldUDP64 counters");
    let line_a = p.line_addrs().expect("lines")[0];
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let started = Instant::now();
    let h = std::thread::spawn(move || p.run(flag));
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let wait_for = |what: &str, f: &dyn Fn(&mdfan_publisher::live_itch::MoldReport) -> bool| {
        let deadline = Instant::now() + WATCHDOG;
        while !f(&counters.report()) {
            assert!(Instant::now() < deadline, "watchdog: {what}: {:?}", counters.report());
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // Five batches of 20 packets of another session, each read before the next is sent: five polls at least.
    for batch in 1..=5u64 {
        for i in 0..20 {
            tx.send_to(&heartbeat(b"OTHER     ", batch * 100 + i), line_a).unwrap();
        }
        wait_for("a batch read", &|r| r.foreign_session == 20 * batch);
    }
    // A packet too short for the MoldUDP64 header (20 bytes): a new kind.
    tx.send_to(b"short", line_a).unwrap();
    wait_for("the bad packet read", &|r| r.bad_packets == 1);
    let elapsed = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = h.join().unwrap().expect("publisher run");
    let mold = report.moldudp64.expect("the MoldUDP64 report");
    assert_eq!((mold.foreign_session, mold.bad_packets, mold.messages), (100, 1, 0));
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("MoldUDP64 packets dropped")).collect();
    // The first foreign packet and the first bad one each at once; any other only after 10 s of this run.
    let most = 2 + elapsed.as_secs() / 10;
    assert!((2..=most as usize).contains(&warnings.len()), "{} warnings in {elapsed:?}:\n{text}", warnings.len());
    assert!(warnings[0].contains("foreign_session=") && warnings[0].contains("bad_packets=0"), "{}", warnings[0]);
    assert!(warnings.last().unwrap().contains("foreign_session=100 bad_packets=1"), "{text}");
}
