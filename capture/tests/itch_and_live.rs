//! Captures of the other feeds, replayed: the bundled ITCH 5.0 snippet (order level, by stock locate) and the
//! live CME MDP 3.0 feed from lines A and B with 2% loss on each (price level, arbitrated, `mdfan-feedsim` on
//! loopback). `mdfan-capture record` (the binary) keeps what a publisher sends while a direct
//! subscriber takes the same stream; a second publisher replays the capture (`format = "capture"`) to two
//! subscribers, whose record streams equal the direct subscriber's record for record (the publisher's own
//! fields, `seq` and `ts_send_ticks`, aside), so their books equal it after every record.
//! The MDP 3.0 books are also the data README's (data/cme-mdp3-sbe-v8-pcap-20160927/README.md, "Book replay").

#[path = "../../feed/tests/support/mdp3.rs"]
mod mdp3_ref;
mod support;

use std::net::SocketAddrV4;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_feedsim::{Impairment, Mdp3, SimConfig};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{BookUpdate, MbpBooks};
use support::{dir, subscribe, venue, WATCHDOG};

/// `mdfan-capture record` of `endpoint` into `d` (name `cap`), attached once its first segment exists.
fn recorder(endpoint: &str, d: &Path) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_mdfan-capture"))
        .args(["record", "--connect", endpoint, "--dir", d.to_str().unwrap(), "--name", "cap"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WATCHDOG;
    while !d.join("cap-000001.mdcap").exists() {
        assert!(Instant::now() < deadline, "the recorder did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn wait_ok(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Replays capture `d` through a publisher to two subscribers; each one's records equal `direct`'s.
fn replay_equals(d: &Path, direct: &[BookUpdate]) -> Vec<BookUpdate> {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 2\ncounters_dir = \"\"\n\n[feed]\nformat = \"capture\"\npath = {d:?}\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("replay.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    let run = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs"));
    let (a, b) = (subscribe(&endpoint, "replay-a"), subscribe(&endpoint, "replay-b"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let report = run.join().unwrap();
    assert_eq!(report.capture.map(|c| (c.gaps, c.missed)), Some((0, 0)));
    let want: Vec<BookUpdate> = direct.iter().map(venue).collect();
    for (who, got) in [("replay-a", &a), ("replay-b", &b)] {
        let got: Vec<BookUpdate> = got.iter().map(venue).collect();
        assert_eq!(got.len(), want.len(), "{who}");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!("{who}: record {i} differs: {:?} against {:?}", got[i], want[i]);
        }
    }
    a
}

#[test]
fn a_capture_of_the_itch_snippet_replays_record_for_record() {
    let d = dir("itch");
    let snippet = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50");
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 2\ncounters_dir = \"\"\n\n[feed]\nformat = \"itch50\"\npath = {snippet:?}\nsession_date = \"2019-12-30\"\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("itch.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    let run = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs"));
    let rec = recorder(&endpoint, &d);
    let direct = subscribe(&endpoint, "direct").join().unwrap();
    let report = run.join().unwrap();
    wait_ok(rec);
    assert_eq!(direct.len() as u64, report.records, "every record the publisher normalised");
    for locate in [3672, 6556] {
        assert!(direct.iter().any(|r| r.instrument_id == locate), "the excerpt README's HDS and QQQ: {locate}");
    }
    replay_equals(&d, &direct);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_capture_of_the_live_mdp3_feed_with_loss_replays_record_for_record_to_the_reference_book() {
    let d = dir("mdp3");
    let text = "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = \"\"\n\n[feed]\nformat = \"mdp3\"\n\n[lines]\na = \"127.0.0.1:0\"\nb = \"127.0.0.1:0\"\ngap_timeout_ms = 10000\nend_after_idle_ms = 2000\n\n[fabric]\nprovider = \"shm\"\n";
    let p = Publisher::bind(Config::parse(text, Path::new("live.toml")).unwrap()).expect("binds its lines");
    let endpoint = p.local_addr().to_string();
    let [a, b]: [SocketAddrV4; 2] = p.line_addrs().expect("a live feed has lines");
    let run = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs"));
    let rec = recorder(&endpoint, &d);
    let direct = subscribe(&endpoint, "direct");
    let loss = Impairment { loss: 0.02, ..Impairment::default() };
    let sim = SimConfig {
        pcap: mdp3_ref::capture_path(),
        line_a: None,
        line_b: None,
        send_a: a,
        send_b: b,
        speed: 0.0,
        impair_a: loss,
        impair_b: loss,
        seed: 13,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: None,
    };
    mdfan_feedsim::run(&sim, &mut Mdp3::default(), &AtomicBool::new(false)).expect("the simulator plays the capture");
    let direct = direct.join().unwrap();
    run.join().unwrap();
    wait_ok(rec);
    let replayed = replay_equals(&d, &direct);
    let mut books = MbpBooks::with_capacity(64);
    for r in &replayed {
        books.apply(r).expect("a price-level record the book takes");
    }
    mdp3_ref::assert_reference_book("replayed", books.get(mdp3_ref::SECURITY), mdp3_ref::SECURITY);
    let _ = std::fs::remove_dir_all(&d);
}
