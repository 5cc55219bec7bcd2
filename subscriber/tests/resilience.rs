//! Dropped, killed and late subscribers, and a killed publisher, on shared memory (and on verbs in the Soft-RoCE
//! VM). In every case the subscribers that did nothing wrong end with the exact reference book, and the one that
//! did either ends exact too (late join, reconnect) or is dropped with its reason. Stalled subscribers, under
//! each policy, are in `stalls.rs`.
//!
//! The replays are paced (500x: the capture plays in about 6.5 s) so there is a "mid-stream" to act in; the
//! sleeps below place events inside it. Nothing here asserts a duration.

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::thread::sleep;
use std::time::Duration;

use common::*;
use mdfan_fabric::CloseReason;

const PACE: &str = "pace = 500";

#[test]
fn a_killed_subscriber_is_noticed_and_a_late_joiner_ends_exact() {
    let publisher = start_publisher(&esh4::main_file(), 2, PACE);
    let mut a = Watched::new(spawn_subscriber(publisher.addr, "steady", &[]));
    let mut b = Watched::new(spawn_subscriber(publisher.addr, "doomed", &[]));
    // the replay starts once both are in (under emulation that can take a while): then 1.5 s into it
    a.wait_for_line("subscribed ");
    b.wait_for_line("subscribed ");
    sleep(Duration::from_millis(1500));
    b.child.kill().unwrap(); // SIGKILL
    let _ = b.finish();
    sleep(Duration::from_millis(500));
    let late = spawn_subscriber(publisher.addr, "late", &[]);
    let (late, (_, a, _)) = (wait_with_watchdog(late), a.finish());
    let report = publisher.handle.join().unwrap().unwrap();
    assert_clean(&a, "steady");
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

/// A `block` subscriber stopped mid-stream until the hot loop waits on its full ring, then killed: the conductor
/// sees its control connection close and the waiting hot loop lets it go at once, `peer_gone` (on verbs its QP may
/// fail first: `fabric_error`), instead of waiting out the stall timeout, 10 minutes here, longer than the test's
/// watchdog: the steady subscriber ends exact and the replay ends normally.
#[test]
fn a_killed_block_subscriber_the_hot_loop_waits_on_is_let_go_at_once() {
    let keys = "policies = [\"disconnect\", \"resync\", \"block\"]\nstall_timeout_ms = 600000";
    let publisher = start_publisher_with(&esh4::main_file(), 2, keys, PACE);
    let mut steady = Watched::new(spawn_subscriber(publisher.addr, "steady", &[]));
    let blocking = ["--policy", "block", "--ring-slots", "1024"];
    let mut blocker = Watched::new(spawn_subscriber(publisher.addr, "blocker", &blocking));
    steady.wait_for_line("subscribed ");
    blocker.wait_for_line("subscribed ");
    signal(&blocker.child, "STOP");
    // 1.5 s of a 500x replay is some 10,000 records: its 1,024 slots fill and the hot loop waits on it
    sleep(Duration::from_millis(1500));
    blocker.child.kill().unwrap(); // SIGKILL
    let _ = blocker.finish();
    let (code, lines, _) = steady.finish();
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!(code, Some(0), "steady");
    assert_clean(&lines, "steady");
    assert_eq!((report.records, report.end), (esh4::RECORDS, CloseReason::EndOfStream));
    let b = report.session("blocker").unwrap();
    assert!(b.ring_full > 0 && b.blocked_ns > 0, "the hot loop waited on it: {}", b.line());
    assert!(matches!(b.end, Some(CloseReason::PeerGone | CloseReason::FabricError)), "{}", b.line());
}

#[test]
fn a_killed_publisher_is_reported_and_reconnecting_subscribers_end_exact_on_its_restart() {
    let (addr, dir, start) = publisher_process("resilience", &esh4::main_file(), 2, PACE);
    let mut first = start();
    let args = ["--reconnect-ms", "30000"];
    let mut a = Watched::new(spawn_subscriber(addr, "a", &args));
    let mut b = Watched::new(spawn_subscriber(addr, "b", &args));
    a.wait_for_line("subscribed ");
    b.wait_for_line("subscribed ");
    sleep(Duration::from_millis(1500));
    first.child.kill().unwrap(); // SIGKILL, mid-stream
    let _ = first.finish();
    sleep(Duration::from_millis(500));
    let mut second = start();
    let (a, b) = (a.finish(), b.finish());
    if !(a.0 == Some(0) && b.0 == Some(0)) {
        let _ = second.child.kill();
        panic!("a subscriber failed:\na: {:?}\n{}\nb: {:?}\n{}", a.0, a.1.join("\n"), b.0, b.1.join("\n"));
    }
    assert_eq!(second.finish().0, Some(0));
    for ((_, lines, _), who) in [(a, "a"), (b, "b")] {
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

/// A peer that stalls in its handshake is dropped while the publisher keeps waiting for `wait_for_subscribers`;
/// the subscriber already attached hears heartbeats meanwhile (it never reports a silent publisher) and ends
/// exact once a second subscriber lets the replay start. The stuck peer is a raw control connection that sends
/// nothing (dropped after the handshake timeout, both fabrics); on verbs also one whose Subscribe grants a QP that
/// never connects, which is told why in a Bye.
#[test]
fn a_peer_stuck_in_its_handshake_is_dropped_and_the_attached_subscriber_hears_heartbeats() {
    use mdfan_wire::control::{self, ControlMsg, RingGrant, Subscribe, VerbsEndpoint};
    use std::io::Read;

    let publisher = start_publisher(&esh4::main_file(), 2, PACE);
    // Silence is judged at 2 s, not the default 50 ms: a loaded host or an emulated VM can delay a heartbeat
    // past 50 ms (and past 1 s: `publisher_silent ms=1001` in the Soft-RoCE VM with the host loaded, its
    // latencies' max 1.19 s), while without heartbeats the 3.5 s wait below is silent from its 2nd s.
    let mut steady = Watched::new(spawn_subscriber(publisher.addr, "steady", &["--silence-timeout-ms", "2000"]));
    steady.wait_for_line("subscribed ");
    let mut silent = std::net::TcpStream::connect(publisher.addr).unwrap();
    let mut never_connects = on_verbs().then(|| {
        let mut s = std::net::TcpStream::connect(publisher.addr).unwrap();
        // A QP on the same device (the loopback GID) that does not exist: the publisher's QP reaches RTS, but
        // the first credit never comes.
        let endpoint = VerbsEndpoint { qpn: 0xabcd, psn: 1, gid: "00000000000000000000ffff7f000001".into(), lid: 0 };
        let ring = RingGrant::Verbs { endpoint, ring_addr: 0x1_0000, ring_rkey: 1, slot_count: 1024 };
        let sub = Subscribe::new("never-connects", ring);
        control::write_msg(&mut s, &ControlMsg::Subscribe(sub)).unwrap();
        s
    });
    // Longer than the handshake and QP-connect timeouts (2 s each).
    sleep(Duration::from_millis(3500));
    match control::read_msg_within(&mut silent, Duration::from_secs(5)).unwrap() {
        ControlMsg::Reject(r) => assert_eq!(r.reason, "bad subscribe message: no answer within 2s"),
        other => panic!("expected a reject naming the timeout, got {other:?}"),
    }
    silent.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(silent.read_to_end(&mut rest).unwrap(), 0, "then the connection is closed: {rest:?}");
    if let Some(s) = never_connects.as_mut() {
        let timeout = Duration::from_secs(5);
        let accept = control::read_msg_within(s, timeout).unwrap();
        assert!(matches!(accept, ControlMsg::Accept(_)), "{accept:?}");
        match control::read_msg_within(s, timeout).unwrap() {
            ControlMsg::Bye(bye) => {
                assert_eq!(
                    (bye.reason, bye.detail.as_str()),
                    (CloseReason::FabricError, "the subscriber's QP never connected")
                )
            }
            other => panic!("expected a bye, got {other:?}"),
        }
    }
    let second = spawn_subscriber(publisher.addr, "second", &[]);
    let (code, steady, _) = steady.finish();
    let second = wait_with_watchdog(second);
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!(code, Some(0), "{steady:?}");
    assert_clean(&steady, "steady");
    assert_clean(&stdout_lines(&second), "second");
    assert!(!steady.iter().any(|l| l.starts_with("publisher_silent")), "heartbeats while waiting: {steady:?}");
    let stream = fields(steady.iter().find(|l| l.starts_with("stream ")).unwrap());
    let heartbeats: u64 = stream["heartbeats"].parse().unwrap();
    // 3.5 s of waiting at one heartbeat per 10 ms: hundreds (a bound far below that, not a timing claim)
    assert!(heartbeats >= 20, "{heartbeats} heartbeats while the publisher waited: {steady:?}");
    let s = report.session("steady").unwrap();
    assert_eq!(s.end, Some(CloseReason::EndOfStream), "{}", s.line());
    if on_verbs() {
        let dropped = report.session("never-connects").unwrap();
        assert_eq!(dropped.end, Some(CloseReason::FabricError), "{}", dropped.line());
    }
}

/// Heartbeats are per session: a subscriber filtered to an instrument that has one record at the start of a paced
/// replay and none in the rest of it (about 6.5 s) is sent heartbeats while the others get records, so it never
/// reports the publisher silent and never tears down its healthy session to reconnect.
#[test]
fn a_subscriber_filtered_to_a_quiet_instrument_hears_heartbeats_and_never_reports_silence() {
    let feed = with_quiet_instrument(&esh4::main_file(), 4242, "esh4");
    let publisher = start_publisher(&feed, 2, PACE);
    let steady = spawn_subscriber(publisher.addr, "steady", &["--instrument", "17077"]);
    // Silence judged at 1 s (not 50 ms: a loaded host or an emulated VM can delay one heartbeat that long);
    // without per-session heartbeats this subscriber hears nothing for the whole 6.5 s replay.
    let args = ["--instrument", "4242", "--reconnect-ms", "30000", "--silence-timeout-ms", "1000"];
    let quiet = spawn_subscriber(publisher.addr, "quiet", &args);
    let (steady, quiet) = (wait_with_watchdog(steady), wait_with_watchdog(quiet));
    let report = publisher.handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    assert_clean(&stdout_lines(&steady), "steady");
    let lines = stdout_lines(&quiet);
    assert_eq!(quiet.status.code(), Some(0), "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("publisher_silent")), "{lines:?}");
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["book_records"], stream["gaps"]), ("1", "0"), "{lines:?}");
    assert_eq!((stream["reconnects"], stream["end"]), ("0", "end_of_stream"), "{lines:?}");
    let q = report.session("quiet").unwrap();
    assert_eq!(q.filtered, esh4::RECORDS, "{}", q.line());
    // ~6.5 s of replay at one heartbeat per 10 ms quiet: hundreds (a floor far below that, not a timing claim)
    assert!(q.heartbeats >= 100, "{}", q.line());
    assert_eq!(stream["heartbeats"], q.heartbeats.to_string(), "every heartbeat sent arrived: {lines:?}");
}

/// A publisher that stops (SIGSTOP for 1 s mid-stream) is reported silent within the timeout, and once it resumes
/// the stream goes on and ends exact: silence is judged on what arrives, and only after a poll found nothing.
#[test]
fn a_stopped_publisher_is_reported_silent_and_the_stream_resumes() {
    let (addr, dir, start) = publisher_process("silent", &esh4::main_file(), 1, PACE);
    let publisher = start();
    let mut sub = Watched::new(spawn_subscriber(addr, "watcher", &["--silence-timeout-ms", "200"]));
    sub.wait_for_line("subscribed ");
    sleep(Duration::from_millis(1500));
    signal(&publisher.child, "STOP");
    sleep(Duration::from_millis(1000));
    signal(&publisher.child, "CONT");
    let (code, lines, err) = sub.finish();
    let publisher = publisher.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((code, publisher.0), (Some(0), Some(0)), "{lines:?}\n{err}");
    assert_clean(&lines, "watcher");
    let silent: Vec<u64> =
        lines.iter().filter_map(|l| l.strip_prefix("publisher_silent ms=")).map(|ms| ms.parse().unwrap()).collect();
    assert!(!silent.is_empty(), "a stopped publisher is reported: {lines:?}");
    assert!(silent.iter().all(|&ms| ms > 200), "only past the timeout: {silent:?}");
}
