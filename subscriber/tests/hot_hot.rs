//! A hot-hot pair: two publisher processes replay the same capture; one strategy ([`PairSubscriber`]) merges
//! them. One publisher is killed (SIGKILL) mid-stream and restarted: the strategy's stream never has a gap, each
//! venue record comes once, and the book ends exact; the leg's death and return are reported.
//!
//! The replays are paced (500x: about 6.5 s) so there is a "mid-stream" to act in. Nothing here asserts a
//! duration.

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::time::{Duration, Instant};

use common::*;
use mdfan_subscriber::{Books, Event, Kind, PairHealth, PairSubscriber, Reconnect, Side, SubscriberConfig};

const PACE: &str = "pace = 500";

#[test]
fn a_pair_merged_by_venue_position_loses_nothing_when_one_publisher_is_killed_and_restarted() {
    if on_verbs() {
        return; // the pair logic is the fabric's user, not the fabric: shared memory is enough
    }
    let (addr_a, dir_a, start_a) = publisher_process("hot-hot-a", &esh4::main_file(), 1, PACE);
    let (addr_b, dir_b, start_b) = publisher_process("hot-hot-b", &esh4::main_file(), 1, PACE);
    let mut a = Some(start_a());
    let b = start_b();
    let cfg = |addr: std::net::SocketAddr, name: &str| {
        let mut c = SubscriberConfig::new(&addr.to_string(), name);
        c.reconnect = Some(Reconnect::within(Duration::from_secs(30)));
        c
    };
    let mut pair = PairSubscriber::connect(&cfg(addr_a, "pair-a"), &cfg(addr_b, "pair-b")).expect("both legs connect");
    let (mut books, mut book_records, mut gaps, mut ended) = (Books::new(), 0u64, 0u64, false);
    let (mut seqs_ok, mut last_seq) = (true, 0u64);
    let mut moves = Vec::new();
    let (started, deadline) = (Instant::now(), Instant::now() + watchdog());
    let (mut killed, mut restarted) = (None, false);
    while !ended {
        assert!(Instant::now() < deadline, "the pair never ended: {moves:?} {:?}", pair.stats());
        pair.poll(256, |e| match e {
            Event::Record(r) => {
                seqs_ok &= r.seq == last_seq + 1;
                last_seq = r.seq;
                match r.kind() {
                    Some(Kind::EndOfStream) => ended = true,
                    Some(Kind::SnapshotBegin | Kind::SnapshotEnd | Kind::Heartbeat) => {}
                    _ => book_records += 1,
                }
                books.apply(r).expect("the merged stream applies");
            }
            Event::Gap { .. } => gaps += 1,
            _ => {}
        });
        if let Some(h) = pair.maintain_if_due() {
            if h != PairHealth::Ok {
                moves.push(h);
            }
            if let (PairHealth::Ended(end), false) = (h, ended) {
                panic!("the pair ended before the end of stream: {end:?} {moves:?}");
            }
        }
        if killed.is_none() && started.elapsed() > Duration::from_millis(1500) {
            let mut dead = a.take().unwrap();
            dead.child.kill().unwrap(); // SIGKILL, mid-stream
            let _ = dead.finish();
            killed = Some(Instant::now());
        }
        if killed.is_some_and(|k| k.elapsed() > Duration::from_millis(500)) && !restarted {
            a = Some(start_a());
            restarted = true;
        }
    }
    let stats = pair.stats();
    let (leg_a, leg_b) = (pair.leg_stats(0), pair.leg_stats(1));
    let book = books.get(esh4::INSTRUMENT_ID).expect("ESH4's book");
    let cp = &esh4::CHECKPOINTS[4];
    assert_eq!((gaps, stats.gaps, stats.divergences), (0, 0, 0), "{stats:?} {leg_a:?} {leg_b:?}");
    assert_eq!(book_records, esh4::RECORDS, "every venue record once: {stats:?} {leg_a:?} {leg_b:?}");
    assert_eq!(
        (book.order_count(), book.level_count(Side::Bid), book.level_count(Side::Ask)),
        (cp.orders, cp.levels_bid, cp.levels_ask)
    );
    let (bid, ask) = book.bbo();
    let (bid, ask) = (bid.unwrap(), ask.unwrap());
    assert_eq!(
        ((bid.price_e9, bid.size, bid.orders), (ask.price_e9, ask.size, ask.orders)),
        (cp.best_bid, cp.best_ask)
    );
    let down =
        moves.iter().position(|m| *m == PairHealth::LegDown { leg: 0, end: None }).expect("leg A's death is reported");
    let up = moves.iter().position(|m| matches!(m, PairHealth::LegUp { leg: 0, .. })).expect("and its return");
    assert!(down < up, "{moves:?}");
    assert!(leg_a.delivered_first + leg_b.delivered_first == esh4::RECORDS, "{leg_a:?} {leg_b:?}");
    assert!(leg_b.delivered_first > 0 && leg_a.downs == 1 && leg_b.downs == 0, "{leg_a:?} {leg_b:?}");
    assert!(leg_a.duplicates > 0, "the restarted leg A replays from its start: every record a duplicate {leg_a:?}");
    assert!(seqs_ok, "the merged seqs run 1, 2, 3, ... to {last_seq}");
    drop(pair);
    assert_eq!(b.finish().0, Some(0));
    if let Some(mut a) = a {
        let _ = a.child.kill();
        let _ = a.finish();
    }
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}

/// `mdfan-subscribe --connect A --connect B` on two publishers of the same capture (at full speed): the exact
/// book, every record once, no gap; each leg's line counts what it delivered first, and every copy the other
/// leg delivered first was compared (the two publishers give the same record for each venue position).
#[test]
fn mdfan_subscribe_with_two_endpoints_prints_one_exact_stream_and_each_legs_share() {
    let a = start_publisher(&esh4::main_file(), 1, "");
    let b = start_publisher(&esh4::main_file(), 1, "");
    let out = wait_with_watchdog(spawn_subscriber(a.addr, "pair", &["--connect", &b.addr.to_string()]));
    let lines = stdout_lines(&out);
    assert_eq!(out.status.code(), Some(0), "{lines:?}");
    assert_clean(&lines, "pair");
    let legs: Vec<_> = lines.iter().filter(|l| l.starts_with("leg leg=")).map(|l| fields(l)).collect();
    assert_eq!(legs.len(), 2, "{lines:?}");
    let n = |leg: usize, k: &str| legs[leg][k].parse::<u64>().unwrap();
    assert_eq!(n(0, "delivered_first") + n(1, "delivered_first"), esh4::RECORDS, "{lines:?}");
    for leg in 0..2 {
        assert_eq!((n(leg, "divergences"), n(leg, "gaps"), n(leg, "downs")), (0, 0, 0), "{lines:?}");
        assert!(n(leg, "delivered_first") + n(leg, "duplicates") + n(leg, "recovery_dropped") > 50_000, "{lines:?}");
    }
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!(stream["divergences"], "0");
    for p in [a, b] {
        p.handle.join().unwrap().expect("the publisher ends cleanly");
    }
}
