//! `mdfan-capture record` (the binary) keeps a publisher's ESH4 replay on disk; a second publisher replays the
//! capture (`format = "capture"`) to two subscribers, whose record streams equal the one a direct subscriber of
//! the first received (the publisher's own fields, `seq` and `ts_send_ticks`, aside) and whose books equal the
//! data README's final ESH4 book. Then a capture killed with SIGKILL mid-stream: its next start says what it
//! kept and cut, and the two runs' capture replays to the same final book.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{BookUpdate, Books, Event, Health, Kind, Side, Subscriber, SubscriberConfig};

const WATCHDOG: Duration = Duration::from_secs(180);

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mdfan-capture-bin-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A publisher of `feed` (a `[feed]` section's body) waiting for `wait_for` subscribers; its endpoint and thread.
fn publisher(feed: &str, wait_for: usize) -> (String, JoinHandle<mdfan_publisher::RunReport>) {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = {wait_for}\ncounters_dir = \"\"\n\n[feed]\n{feed}\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("capture-test.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    (endpoint, std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs")))
}

/// A subscriber's records (heartbeats and the end of stream aside), until the stream ends.
fn subscribe(endpoint: &str, name: &str) -> JoinHandle<Vec<BookUpdate>> {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.ring_slots = 1 << 17;
    let mut sub = Subscriber::connect(&cfg).expect("subscribes");
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog: {} not ended", sub.endpoint());
            let n = sub.poll(1024, |e| {
                if let Event::Record(r) = e {
                    if !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) {
                        out.push(*r);
                    }
                }
            });
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            if let Some(Health::Ended(_)) = sub.maintain_if_due() {
                return out;
            }
        }
    })
}

/// The record as a venue event: the publisher's own fields cleared.
fn venue(r: &BookUpdate) -> BookUpdate {
    BookUpdate { seq: 0, ts_send_ticks: 0, ..*r }
}

fn assert_final_book(who: &str, records: &[BookUpdate]) {
    let mut books = Books::new();
    for r in records {
        books.apply(r).unwrap_or_else(|e| panic!("{who}: {e}"));
    }
    let b = books.get(esh4::INSTRUMENT_ID).unwrap_or_else(|| panic!("{who}: no ESH4 book"));
    assert_eq!(b.order_count(), 11_217, "{who}");
    let top = |side| b.top(side, 10).iter().map(|l| (l.price_e9, l.size, l.orders)).collect::<Vec<_>>();
    assert_eq!(top(Side::Bid), esh4::TOP_BIDS, "{who}: bids");
    assert_eq!(top(Side::Ask), esh4::TOP_ASKS, "{who}: asks");
}

fn capture(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mdfan-capture"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

#[test]
fn a_capture_of_the_esh4_replay_replays_to_the_same_records_and_book() {
    let d = dir("esh4");
    let (endpoint, first) = publisher(&format!("format = \"dbn\"\npath = {:?}", esh4::main_file()), 2);
    let recorder = capture(&[
        "record",
        "--connect",
        &endpoint,
        "--dir",
        d.to_str().unwrap(),
        "--name",
        "esh4",
        "--rotate-mb",
        "1",
    ])
    .spawn()
    .unwrap();
    // The recorder attaches first (the publisher waits for two), then the direct subscriber.
    let deadline = Instant::now() + WATCHDOG;
    while !d.join("esh4-000001.mdcap").exists() {
        assert!(Instant::now() < deadline, "the recorder did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let direct = subscribe(&endpoint, "direct");
    let direct = direct.join().unwrap();
    first.join().unwrap();
    let out = recorder.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("records={} ", esh4::RECORDS + 1)) && text.contains(" end=end_of_stream"), "{text}");
    assert_eq!(direct.len() as u64, esh4::RECORDS);
    assert_final_book("direct", &direct);

    // What the capture holds, by its own report.
    let out = capture(&["report", d.to_str().unwrap()]).output().unwrap();
    let rep = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{rep}");
    assert!(rep.contains(&format!("records={} gaps=0 missed=0", esh4::RECORDS + 1)), "{rep}");
    assert!(
        rep.contains(&format!("last_ts_recv_ns={}", esh4::LAST_TS_RECV_NS)) && rep.contains("stop=end_of_stream"),
        "{rep}"
    );
    assert!(rep.contains("capture kind=EndOfStream records=1 "), "{rep}");
    assert!(rep.lines().next().unwrap().starts_with("capture segments=5 "), "1 MiB segments: {rep}");

    // The capture replayed to two subscribers: the same venue records, the same book.
    let (endpoint, second) = publisher(&format!("format = \"capture\"\npath = {d:?}"), 2);
    let (a, b) = (subscribe(&endpoint, "replay-a"), subscribe(&endpoint, "replay-b"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let report = second.join().unwrap();
    assert_eq!(
        report.capture.map(|c| (c.read, c.replayed, c.left_out, c.gaps)),
        Some((esh4::RECORDS + 1, esh4::RECORDS, 1, 0)),
        "the end of stream left out"
    );
    let want: Vec<BookUpdate> = direct.iter().map(venue).collect();
    for (who, got) in [("replay-a", &a), ("replay-b", &b)] {
        assert_eq!(got.len(), want.len(), "{who}");
        let got: Vec<BookUpdate> = got.iter().map(venue).collect();
        assert!(got == want, "{who}: the replayed records equal the direct subscriber's, record for record");
        assert_final_book(who, &got);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_capture_killed_mid_stream_says_what_it_kept_on_restart_and_both_runs_replay_to_the_book() {
    let d = dir("kill");
    // Paced at 600x (the two hours in about 12 s): the recorder is killed early in the replay.
    let (endpoint, first) = publisher(&format!("format = \"dbn\"\npath = {:?}\npace = 600.0", esh4::main_file()), 1);
    let args = ["record", "--connect", &endpoint, "--dir", d.to_str().unwrap(), "--name", "run", "--block-ms", "1"];
    let mut killed = capture(&args).spawn().unwrap();
    // Killed once it has written a few thousand records (the replay goes on for seconds after).
    let deadline = Instant::now() + WATCHDOG;
    while mdfan_feed::capture::report(&d, Some("run")).map_or(0, |r| r.records) < 5_000 {
        assert!(Instant::now() < deadline, "the recorder wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill().unwrap(); // SIGKILL
    let _ = killed.wait();
    let kept = mdfan_feed::capture::report(&d, Some("run")).unwrap();
    assert!(kept.records > 0 && kept.stop.is_none(), "killed mid-stream: {:?}", kept.lines());
    // The next start cuts what the kill left half written, says what it kept, and goes on (a snapshot first).
    let again = capture(&args).spawn().unwrap();
    let out = again.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let recovered = text.lines().find(|l| l.starts_with("capture recovered segment=")).expect(&text);
    assert!(recovered.contains("run-000001.mdcap kept_blocks="), "{recovered}");
    let kept_records: u64 =
        recovered.split("kept_records=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(kept_records <= kept.records && kept_records > 0, "{recovered}");
    first.join().unwrap();
    let all = mdfan_feed::capture::report(&d, Some("run")).unwrap();
    assert_eq!((all.segments, all.stop), (2, Some(mdfan_feed::capture::StopReason::EndOfStream)), "{:?}", all.lines());
    // Replayed: the first run's records, then the second's snapshot and the rest: the final book.
    let (endpoint, second) = publisher(&format!("format = \"capture\"\npath = {d:?}"), 1);
    let replay = subscribe(&endpoint, "replay").join().unwrap();
    second.join().unwrap();
    assert_final_book("replay of both runs", &replay);
    assert!(
        replay.iter().any(|r| r.flags & mdfan_subscriber::flags::SNAPSHOT != 0),
        "the second run began with a snapshot"
    );
    let _ = std::fs::remove_dir_all(&d);
}
