//! The counters file and `mdfan-stat`: a replay of the bundled ESH4 capture to one subscriber, read from outside
//! while it runs and after it ended; the file's final values equal the run report's, and `mdfan-stat
//! --prometheus` prints them.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::{counters_path, Publisher};
use mdfan_subscriber::{Event, Health, Subscriber, SubscriberConfig};
use mdfan_tuning::counters;

/// The bundled capture (data/README.md): 68,792 MBO records.
const RECORDS: u64 = 68_792;

#[test]
fn the_counters_file_is_readable_during_the_replay_and_matches_the_report_after_it() {
    let dir = std::env::temp_dir().join(format!("mdfan-stat-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let feed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst");
    // pace 2000: the capture's 2 h of ts_recv (idle gaps shortened to 1 s) play in about 1.6 s, long enough to
    // look at the file while it runs
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = {dir:?}\nkeep_counters = true\n\n[feed]\nformat = \"dbn\"\npath = {feed:?}\npace = 2000\n"
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("stat-test.toml")).unwrap()).unwrap();
    let addr = publisher.local_addr();
    let path = counters_path(&dir, addr);
    assert!(path.exists(), "created at bind: {}", path.display());
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut sub_cfg = SubscriberConfig::new(&addr.to_string(), "stat-test");
    sub_cfg.counters_dir = Some(dir.clone());
    let mut sub = Subscriber::connect(&sub_cfg).unwrap();
    let sub_path = dir.join(format!("mdfan-subscriber-stat-test-{}.counters", std::process::id()));
    assert!(sub_path.exists(), "the subscriber's counters file: {}", sub_path.display());
    let (mut records, mut looked) = (0u64, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| {
            if let Event::Record(_) = e {
                records += 1;
            }
        });
        if looked.is_none() && records > 1_000 {
            // Mid-replay: the conductor rewrites the file every 100 ms; wait for a rewrite that saw the session.
            std::thread::sleep(Duration::from_millis(250));
            let s = counters::read(&path).unwrap();
            assert_eq!((s.role.as_str(), s.name.clone(), s.ended), ("publisher", addr.to_string(), false));
            let sent = s.get("mdfan_session_sent_total", "session=\"1\",subscriber=\"stat-test\"").unwrap();
            assert!(sent > 0 && s.get("mdfan_records_total", "").unwrap() < RECORDS, "mid-replay: sent {sent}");
            assert_eq!(s.get("mdfan_subscribers", ""), Some(1));
            let _ = sub.maintain(); // writes the subscriber's file (at most every 100 ms; the first time now)
            let mine = counters::read(&sub_path).unwrap();
            assert_eq!((mine.role.as_str(), mine.name.clone()), ("subscriber", format!("stat-test@{addr}")));
            assert!(mine.get("mdfan_sub_records_total", "").unwrap() > 0);
            assert_eq!(mine.get("mdfan_sub_gaps_total", ""), Some(0));
            assert_eq!(mine.get("mdfan_sub_state", "state=\"live\""), Some(1));
            looked = Some(sent);
        }
        if let Some(Health::Ended(_)) = sub.maintain_if_due() {
            break;
        }
    }
    assert!(looked.is_some(), "looked at the file during the replay");
    // At the end the subscriber's file holds its final counts; dropping the subscriber removes it.
    let mine = counters::read(&sub_path).unwrap();
    assert_eq!(mine.get("mdfan_sub_records_total", ""), Some(records));
    assert_eq!(mine.get("mdfan_sub_state", "state=\"ended\""), Some(1));
    drop(sub);
    assert!(!sub_path.exists(), "removed with the subscriber");
    let report = run.join().unwrap().unwrap();
    assert_eq!(report.records, RECORDS);
    let s = counters::read(&path).unwrap();
    assert!(s.ended, "closed at the end, values final");
    let r = report.session("stat-test").unwrap();
    let l = "session=\"1\",subscriber=\"stat-test\"";
    assert_eq!(s.get("mdfan_records_total", ""), Some(RECORDS));
    assert_eq!(s.get("mdfan_feed_read_total", ""), Some(RECORDS));
    assert_eq!(s.get("mdfan_session_sent_total", l), Some(r.sent));
    assert_eq!(s.get("mdfan_session_heartbeats_total", l), Some(r.heartbeats));
    assert_eq!(s.get("mdfan_session_last_seq", l), Some(r.last_seq));
    assert_eq!(s.get("mdfan_session_end", &format!("{l},reason=\"end_of_stream\"")), Some(1));
    assert_eq!(s.get("mdfan_subscribers", ""), Some(0));
    assert_eq!(s.get("mdfan_hot_cycle_ns", "quantile=\"1\""), Some(report.cycle_max_ns));

    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_mdfan-stat")).arg("--prometheus").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let instance = format!("role=\"publisher\",instance=\"{addr}\"");
    assert!(text.contains("# TYPE mdfan_session_sent_total counter\n"), "{text}");
    assert!(text.contains(&format!("mdfan_session_sent_total{{{instance},{l}}} {}\n", r.sent)), "{text}");
    assert!(text.contains(&format!("mdfan_records_total{{{instance}}} {RECORDS}\n")), "{text}");
    assert!(text.contains(&format!("mdfan_counters_state{{{instance},state=\"ended\"}} 1\n")), "{text}");
    assert_eq!(text.matches("# TYPE mdfan_session_sent_total ").count(), 1, "one group per metric");
    let table = std::process::Command::new(env!("CARGO_BIN_EXE_mdfan-stat")).arg("--dir").arg(&dir).output().unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with(&format!("publisher {addr} pid={} ended ", std::process::id())), "{table}");
    let row: Vec<&str> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.get(1) == Some(&"stat-test"))
        .unwrap();
    let want: Vec<String> = [1, r.sent, r.filtered, r.skipped, r.snapshots, r.catchup, r.ring_full, r.lag, r.last_seq]
        .iter()
        .map(u64::to_string)
        .collect();
    assert_eq!(row[0], want[0]);
    assert_eq!(row[1], "stat-test");
    assert_eq!(row[2..10], want[1..], "{table}");
    assert_eq!(row[10], "end_of_stream", "{table}");
    // A file that is not a counters file, named on the command line: one line naming it and the field.
    let bad = dir.join("mdfan-bad.counters");
    std::fs::write(&bad, [0u8; 200]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdfan-stat")).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mdfan-bad.counters: field magic: not MDFANCTR"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_clean_exit_removes_the_counters_file_unless_asked_to_keep_it() {
    let dir = std::env::temp_dir().join(format!("mdfan-stat-rm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let feed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst");
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 0\ncounters_dir = {dir:?}\n\n[feed]\nformat = \"dbn\"\npath = {feed:?}\n"
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("stat-test.toml")).unwrap()).unwrap();
    let path = counters_path(&dir, publisher.local_addr());
    assert!(path.exists());
    let report = publisher.run(Arc::new(AtomicBool::new(false))).unwrap();
    assert_eq!(report.records, RECORDS);
    assert!(!path.exists(), "removed at a clean exit");
    std::fs::remove_dir_all(&dir).unwrap();
}
