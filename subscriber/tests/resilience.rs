//! Stalled, dropped, killed and late subscribers, and a killed publisher, on shared memory. In every case the
//! subscribers that did nothing wrong end with the exact reference book, and the one that did either ends
//! exact too (resync, late join, reconnect) or is dropped with its reason.
//!
//! The replays are paced (500x: the capture plays in about 6.5 s) so there is a "mid-stream" to act in; the
//! sleeps below place events inside it. Nothing here asserts a duration.

#[path = "support/mod.rs"]
mod common;
#[path = "../../wire/tests/support/esh4.rs"]
mod esh4;

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use common::*;
use mdfan_fabric::CloseReason;

const PACE: &str = "pace = 500";

/// The final-book part of the summary line, without the record and gap counts (which differ after a
/// resync or a late join).
fn final_book() -> String {
    let cp = &esh4::CHECKPOINTS[4];
    format!(
        "last_seq={} orders={} levels_bid={} levels_ask={} bbo=4810.00x22/4810.25x28",
        cp.venue_seq, cp.orders, cp.levels_bid, cp.levels_ask
    )
}

fn top_levels(lines: &[String]) -> Vec<String> {
    lines.iter().filter(|l| l.contains(" side=")).cloned().collect()
}

/// Asserts the subscriber's final book equals the reference (summary and top 10 per side).
fn assert_exact(lines: &[String], who: &str) {
    let summary = lines
        .iter()
        .find(|l| l.starts_with("instrument=17077 "))
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
fn assert_clean(lines: &[String], who: &str) {
    assert_exact(lines, who);
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    for (k, v) in [("gaps", "0"), ("missed", "0"), ("book_errors", "0"), ("corrupt", "0"), ("end", "end_of_stream")] {
        assert_eq!(stream[k], v, "{who}: {k}");
    }
    assert_eq!(stream["book_records"], esh4::RECORDS.to_string(), "{who}");
}

/// Replays to a steady subscriber and one with a small ring under `policy`, which is SIGSTOPped for 2 s
/// mid-stream; returns both outputs and the publisher's report.
fn stall_one(policy: &str) -> (std::process::Output, std::process::Output, mdfan_publisher::RunReport) {
    let allow_all = r#"policies = ["disconnect", "resync", "block"]"#;
    let publisher = start_publisher_with(&esh4::main_file(), 2, allow_all, PACE);
    let a = spawn_subscriber(publisher.addr, "steady", &[]);
    let b = spawn_subscriber(publisher.addr, "stalled", &["--policy", policy, "--ring-slots", "1024"]);
    sleep(Duration::from_millis(1500));
    signal(&b, "STOP");
    sleep(Duration::from_secs(2));
    signal(&b, "CONT");
    let (a, b) = (wait_with_watchdog(a), wait_with_watchdog(b));
    (a, b, publisher.handle.join().unwrap().unwrap())
}

#[test]
fn a_stalled_resync_subscriber_detects_the_gap_and_rebuilds_from_a_snapshot() {
    let (a, b, report) = stall_one("resync");
    let (a, b) = (stdout_lines(&a), stdout_lines(&b));

    assert_clean(&a, "steady");
    assert_exact(&b, "stalled");
    let stream = fields(b.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_ne!(stream["gaps"], "0", "the stall left a gap: {b:?}");
    assert_ne!(stream["snapshots"], "0", "and a snapshot repaired it: {b:?}");
    assert_eq!(stream["book_errors"], "0", "{b:?}");
    assert_eq!(stream["end"], "end_of_stream");
    assert!(b.iter().any(|l| l.starts_with("gap expected_seq=")), "{b:?}");
    let stalled = report.session("stalled").unwrap();
    assert!(stalled.skipped > 0 && stalled.snapshots > 0, "{}", stalled.line());
    assert_eq!(stalled.end, Some(CloseReason::EndOfStream));
    let steady = report.session("steady").unwrap();
    assert_eq!((steady.skipped, steady.snapshots), (0, 0), "{}", steady.line());
}

#[test]
fn a_stalled_disconnect_subscriber_is_dropped_with_a_reason_and_the_other_is_exact() {
    let (a, b, report) = stall_one("disconnect");
    assert_clean(&stdout_lines(&a), "steady");
    assert_eq!(b.status.code(), Some(3), "dropped subscribers exit 3");
    let b = stdout_lines(&b);
    let stream = fields(b.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["gaps"], stream["end"]), ("0", "ring_full"), "{b:?}");
    assert_eq!(report.session("stalled").unwrap().end, Some(CloseReason::RingFull));
    assert_eq!(report.session("steady").unwrap().end, Some(CloseReason::EndOfStream));
}

#[test]
fn a_stalled_block_subscriber_loses_nothing_and_the_publisher_counts_the_wait() {
    let (a, b, report) = stall_one("block");
    assert_clean(&stdout_lines(&a), "steady");
    assert_clean(&stdout_lines(&b), "stalled");
    let stalled = report.session("stalled").unwrap();
    assert_eq!((stalled.skipped, stalled.end), (0, Some(CloseReason::EndOfStream)), "{}", stalled.line());
    assert!(stalled.blocked_ns > 0, "the wait is counted: {}", stalled.line());
}

#[test]
fn a_killed_subscriber_is_noticed_and_a_late_joiner_ends_exact() {
    let publisher = start_publisher(&esh4::main_file(), 2, PACE);
    let a = spawn_subscriber(publisher.addr, "steady", &[]);
    let mut b = spawn_subscriber(publisher.addr, "doomed", &[]);
    sleep(Duration::from_millis(1500));
    b.kill().unwrap(); // SIGKILL
    let _ = b.wait();
    sleep(Duration::from_millis(500));
    let late = spawn_subscriber(publisher.addr, "late", &[]);
    let (a, late) = (wait_with_watchdog(a), wait_with_watchdog(late));
    let report = publisher.handle.join().unwrap().unwrap();
    assert_clean(&stdout_lines(&a), "steady");
    let late = stdout_lines(&late);
    assert_exact(&late, "late");
    let stream = fields(late.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["gaps"], stream["book_errors"], stream["snapshots"]), ("0", "0", "1"), "{late:?}");
    assert!(late.iter().any(|l| l.starts_with("snapshot_begin seq=1 instruments=1 ")), "{late:?}");
    // On shm the publisher learns of the death from the closed control connection; on verbs the QP usually
    // fails first (its credit write-back or an RNR retry runs out): either names the dead subscriber.
    let doomed = report.session("doomed").unwrap().end;
    assert!(matches!(doomed, Some(CloseReason::PeerGone | CloseReason::FabricError)), "{doomed:?}");
    let l = report.session("late").unwrap();
    assert_eq!((l.snapshots, l.end), (1, Some(CloseReason::EndOfStream)), "{}", l.line());
    // it got the snapshot (one Add per resting order: thousands) on top of what followed it
    assert!(l.sent > 1_000, "{}", l.line());
}

/// Reads the publisher's stdout until it says it is listening (it loads and checks the feed first, which
/// takes a while under software emulation).
fn wait_listening(publisher: &mut std::process::Child) {
    use std::io::BufRead;
    let out = publisher.stdout.take().expect("publisher stdout is piped");
    let mut lines = std::io::BufReader::new(out).lines();
    match lines.next() {
        Some(Ok(l)) if l.starts_with("publisher listening=") => {}
        other => panic!("publisher did not start: {other:?}"),
    }
    // keep draining what it prints later so it never blocks on a full pipe
    std::thread::spawn(move || lines.for_each(drop));
}

#[test]
fn a_killed_publisher_is_reported_and_reconnecting_subscribers_end_exact_on_its_restart() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let dir = std::env::temp_dir().join(format!("mdfan-resilience-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("publisher.toml");
    std::fs::write(&cfg, config_text(&listen, &esh4::main_file(), 2, "", PACE)).unwrap();
    let start = || {
        Command::new(publisher_bin())
            .args(["--config", cfg.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = start();
    wait_listening(&mut first);
    let addr = listen.parse().unwrap();
    let args = ["--reconnect-ms", "30000"];
    let a = spawn_subscriber(addr, "a", &args);
    let b = spawn_subscriber(addr, "b", &args);
    sleep(Duration::from_millis(1500));
    first.kill().unwrap(); // SIGKILL, mid-stream
    let _ = first.wait();
    sleep(Duration::from_millis(500));
    let mut second = start();
    let (a, b) = (wait_with_watchdog(a), wait_with_watchdog(b));
    if !(a.status.success() && b.status.success()) {
        let _ = second.kill();
        panic!(
            "a subscriber failed:\na: {:?}\n{}\nb: {:?}\n{}",
            a.status,
            stdout_lines(&a).join("\n"),
            b.status,
            stdout_lines(&b).join("\n")
        );
    }
    let second = wait_with_watchdog(second);
    assert_eq!(second.status.code(), Some(0));
    for (out, who) in [(a, "a"), (b, "b")] {
        let lines = stdout_lines(&out);
        assert_eq!(out.status.code(), Some(0), "{who}: {lines:?}");
        assert_exact(&lines, who);
        let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
        assert_eq!((stream["reconnects"], stream["end"]), ("1", "end_of_stream"), "{who}: {lines:?}");
        let gone =
            lines.iter().position(|l| l.starts_with("publisher_gone after_seq=")).expect("the death is reported");
        let back = lines.iter().position(|l| l.starts_with("reconnected session=")).expect("and the reconnection");
        assert!(gone < back, "{who}: {lines:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
