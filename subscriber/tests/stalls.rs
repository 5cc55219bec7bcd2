//! A subscriber stopped (SIGSTOP) and resumed, beside a steady one, under each slow-consumer policy: stall length
//! 0.1 s to 3 s, stall point (during the snapshot burst at the start of the capture, mid-stream, near the end),
//! ring size 1,024 to 131,072 slots. Runs on shared memory in every test run and on verbs inside the Soft-RoCE VM
//! (`ops/softroce/run-e2e`, and many times in one boot by `ops/softroce/stress-stalls`).
//!
//! Whatever the timing, the outcome must be one the policy allows:
//! - the steady subscriber is exact, with no gap;
//! - the stopped one never reports the publisher silent: the pause was its own (the library reports silence only
//!   once a poll after the quiet period also found its ring empty);
//! - `resync`: the stalled one ends with the exact book and end of stream; if the publisher skipped records, the
//!   subscriber saw the gap and a snapshot repaired it; if not, it saw no gap. Never `stalled` (issue 15: over
//!   verbs, the publisher's view of the credits never caught up and it stopped posting);
//! - `block`: exact, nothing skipped, end of stream; the wait is counted when the ring filled;
//! - `disconnect`: dropped with `ring_full` (exit 3, no gap) if the ring filled, exact otherwise.
//!
//! Where the timing makes the ring certainly fill (a 1,024-slot ring stopped for the 8,725-record burst, or for a
//! second or more mid-stream) or certainly not (131,072 slots hold the whole capture; on shared memory only: over
//! verbs the receive queue bounds what a stopped subscriber can take), the case says so and that is asserted too.
//! The replay is paced (500x: about 6.5 s).

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::thread::sleep;
use std::time::Duration;

use common::*;
use mdfan_fabric::CloseReason;

const PACE: &str = "pace = 500";

#[derive(Debug, Clone, Copy)]
enum Point {
    /// Stopped once subscribed, before the replay starts: the capture's first 8,725 records (one timestamp) go
    /// out as one burst while it is stopped.
    Burst,
    /// 1.5 s into the replay.
    Mid,
    /// 5.5 s into the replay (it lasts about 6.5 s).
    End,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    policy: &'static str,
    point: Point,
    stall_ms: u64,
    ring_slots: u32,
    /// Whether the ring certainly fills (`Some(true)`), certainly does not (`Some(false)`), or may (`None`).
    fills: Option<bool>,
}

struct Outcome {
    steady: (Option<i32>, Vec<String>, String),
    stalled: (Option<i32>, Vec<String>, String),
    report: mdfan_publisher::RunReport,
}

fn play(case: Case) -> Outcome {
    let allow_all = r#"policies = ["disconnect", "resync", "block"]"#;
    let publisher = start_publisher_with(&esh4::main_file(), 2, allow_all, PACE);
    let slots = case.ring_slots.to_string();
    // Silence judged at 1 s: the stop lasts up to 3 s, and a subscriber that was stopped must not take its own
    // pause for the publisher's silence (its ring holds records when it resumes); 1 s, not 50 ms, so that a
    // loaded host delaying a heartbeat is not counted either.
    let stalled_args = ["--policy", case.policy, "--ring-slots", slots.as_str(), "--silence-timeout-ms", "1000"];
    let (steady, mut stalled) = match case.point {
        Point::Burst => {
            let mut stalled = Watched::new(spawn_subscriber(publisher.addr, "stalled", &stalled_args));
            stalled.wait_for_line("subscribed ");
            signal(&stalled.child, "STOP");
            // the replay starts when the second subscriber is in
            let mut steady = Watched::new(spawn_subscriber(publisher.addr, "steady", &[]));
            steady.wait_for_line("subscribed ");
            (steady, stalled)
        }
        Point::Mid | Point::End => {
            let mut steady = Watched::new(spawn_subscriber(publisher.addr, "steady", &[]));
            let mut stalled = Watched::new(spawn_subscriber(publisher.addr, "stalled", &stalled_args));
            steady.wait_for_line("subscribed ");
            stalled.wait_for_line("subscribed ");
            sleep(Duration::from_millis(if matches!(case.point, Point::Mid) { 1500 } else { 5500 }));
            signal(&stalled.child, "STOP");
            (steady, stalled)
        }
    };
    sleep(Duration::from_millis(case.stall_ms));
    signal(&stalled.child, "CONT");
    stalled.wait_for_line("stream ");
    let (steady, stalled) = (steady.finish(), stalled.finish());
    Outcome { steady, stalled, report: publisher.handle.join().unwrap().unwrap() }
}

/// One case at a time: each runs a spinning hot loop and two subscribers, and where the stall lands is the point
/// of the case; cases side by side on a 2-core host starve each other's subscribers for seconds, and the
/// publisher then (rightly) ends a session that released nothing for its stall timeout.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check(case: Case) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = play(case);
    let (code, lines, err) = &out.stalled;
    let dump = format!("{case:?}\nstalled exit {code:?}:\n{}\n{err}", lines.join("\n"));
    let (steady_code, steady_lines, _) = &out.steady;
    assert_eq!(*steady_code, Some(0), "{dump}");
    assert_clean(steady_lines, "steady");
    let steady = out.report.session("steady").unwrap();
    assert_eq!((steady.skipped, steady.end), (0, Some(CloseReason::EndOfStream)), "{}", steady.line());

    let report = out.report.session("stalled").unwrap();
    let dump = format!("{dump}\npublisher: {}", report.line());
    let filled = report.ring_full > 0;
    match case.fills {
        Some(true) => assert!(filled, "the ring filling is what this case is about: {dump}"),
        // On verbs a stopped subscriber also stops re-posting receive WRs: after `recv_queue_depth` (the ring's
        // size, but clamped to the device's max_qp_wr and max_cqe) WRITE_WITH_IMMs the publisher's QP gets RNR
        // NAKs, its send queue fills and the post counts as a full ring. Only shared memory can promise a large
        // ring never fills.
        Some(false) if !on_verbs() => assert!(!filled, "the ring never fills: {dump}"),
        _ => {}
    }
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).expect("a stream line"));
    // Its own stop is not the publisher's silence. A publisher starved of the CPU for longer than the silence
    // timeout (seen in the Soft-RoCE VM on a host saturated by other work: 9.5 s) is truly silent, and then the
    // subscriber that never stopped says so too: only a silence it did not see is the stalled one's mistake.
    let silences = |ls: &[String]| ls.iter().filter(|l| l.starts_with("publisher_silent")).count();
    if silences(steady_lines) == 0 {
        assert_eq!(silences(lines), 0, "its own stop is not the publisher's: {dump}");
    } else {
        eprintln!("{case:?}: the publisher went silent for the steady subscriber too; not judged");
    }
    match case.policy {
        "resync" => {
            assert_eq!((*code, report.end), (Some(0), Some(CloseReason::EndOfStream)), "{dump}");
            assert_exact(lines, "stalled");
            assert_eq!((stream["end"], stream["book_errors"]), ("end_of_stream", "0"), "{dump}");
            if report.skipped > 0 {
                assert_ne!(stream["gaps"], "0", "skipped records leave a gap the subscriber sees: {dump}");
                assert!(lines.iter().any(|l| l.starts_with("gap expected_seq=")), "{dump}");
                assert_ne!(stream["snapshots"], "0", "and a snapshot repairs it: {dump}");
                assert!(report.snapshots > 0, "{dump}");
            } else {
                assert_eq!((stream["gaps"], stream["snapshots"]), ("0", "0"), "nothing skipped, no gap: {dump}");
            }
        }
        "block" => {
            assert_eq!((*code, report.end, report.skipped), (Some(0), Some(CloseReason::EndOfStream), 0), "{dump}");
            assert_clean(lines, "stalled");
            if filled {
                assert!(report.blocked_ns > 0, "the wait is counted: {dump}");
            }
        }
        "disconnect" => {
            if filled {
                assert_eq!((*code, report.end), (Some(3), Some(CloseReason::RingFull)), "dropped, exit 3: {dump}");
                assert_eq!((stream["gaps"], stream["end"]), ("0", "ring_full"), "{dump}");
            } else {
                assert_eq!((*code, report.end), (Some(0), Some(CloseReason::EndOfStream)), "{dump}");
                assert_clean(lines, "stalled");
            }
        }
        other => panic!("no policy {other}"),
    }
}

/// One test per case, named after it, so a failure names the case.
macro_rules! cases {
    ($($name:ident: $policy:literal, $point:ident, $ms:literal ms, $slots:literal slots, $fills:expr;)*) => {$(
        #[test]
        fn $name() {
            check(Case { policy: $policy, point: Point::$point, stall_ms: $ms, ring_slots: $slots, fills: $fills });
        }
    )*};
}

cases! {
    resync_burst_1s_1024: "resync", Burst, 1000 ms, 1024 slots, Some(true);
    resync_mid_2s_1024: "resync", Mid, 2000 ms, 1024 slots, Some(true);
    resync_mid_100ms_4096: "resync", Mid, 100 ms, 4096 slots, None;
    resync_end_3s_1024: "resync", End, 3000 ms, 1024 slots, None;
    resync_mid_3s_131072: "resync", Mid, 3000 ms, 131072 slots, Some(false);
    block_burst_3s_1024: "block", Burst, 3000 ms, 1024 slots, Some(true);
    block_mid_2s_1024: "block", Mid, 2000 ms, 1024 slots, Some(true);
    block_end_100ms_16384: "block", End, 100 ms, 16384 slots, None;
    // 100 ms is not always long enough for the publisher to post 1,024 records on a loaded host or in the VM
    disconnect_burst_100ms_1024: "disconnect", Burst, 100 ms, 1024 slots, None;
    disconnect_mid_2s_1024: "disconnect", Mid, 2000 ms, 1024 slots, Some(true);
    disconnect_end_1s_131072: "disconnect", End, 1000 ms, 131072 slots, Some(false);
}
