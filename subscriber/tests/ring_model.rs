//! Property tests of the ring protocol: the publisher's session (flow control, `resync` skipping) writing
//! through the real shared-memory fabric into the real receiver, under random interleavings of writes and
//! polls (a subscriber that stalls is one that does not poll for a while). Whatever the interleaving, no
//! record is delivered twice, out of order, or under a wrong seq, and every record that was not delivered
//! was reported as part of a gap.

use std::collections::BTreeMap;
use std::path::Path;

use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing, CQ_POLL_INTERVAL, DEFAULT_DIR};
use mdfan_fabric::AnyRemoteRing;
use mdfan_publisher::session::{Post, Session};
use mdfan_subscriber::{Event, Receiver};
use mdfan_wire::control::SlowConsumerPolicy;
use mdfan_wire::{BookUpdate, Kind};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// The publisher offers this many records (skipping, as `resync` does, when the ring is full).
    Publish(usize),
    /// The subscriber polls up to this many completions.
    Poll(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(prop_oneof![(1usize..200).prop_map(Op::Publish), (1usize..200).prop_map(Op::Poll)], 1..60)
}

/// What the receiver handed over, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    Record { seq: u64, order_id: u64 },
    Gap { expected: u64, got: u64 },
    Other(String),
}

fn run(ops: &[Op], slots: u32) -> (BTreeMap<u64, u64>, u64, Vec<Seen>) {
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, slots).unwrap();
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let mut session =
        Session::new(1, "model".into(), AnyRemoteRing::Shm(remote), SlowConsumerPolicy::Resync, None, 0, None);
    let mut rx = Receiver::new(local);
    let mut written = BTreeMap::new(); // seq -> order_id of every record actually written
    let mut feed = 0u64;
    let mut seen = Vec::new();
    let poll = |rx: &mut Receiver<ShmLocalRing>, max: usize, seen: &mut Vec<Seen>| {
        rx.poll(max, |e| {
            seen.push(match e {
                Event::Record(r) => Seen::Record { seq: r.seq, order_id: r.order_id },
                Event::Gap { expected, got } => Seen::Gap { expected, got },
                other => Seen::Other(format!("{other:?}")),
            })
        })
    };
    for op in ops {
        match *op {
            Op::Publish(n) => {
                for _ in 0..n {
                    feed += 1;
                    let mut r = BookUpdate { order_id: feed, ..BookUpdate::control(Kind::Add) };
                    let seq = session.next_seq();
                    match session.try_post(&mut r, 0) {
                        Post::Sent => {
                            written.insert(seq, feed);
                        }
                        Post::Full => session.skip(),
                        Post::Failed(reason) => panic!("post failed: {reason:?}"),
                    }
                }
            }
            Op::Poll(n) => {
                poll(&mut rx, n, &mut seen);
            }
        }
    }
    // Drain: on shm a record after a gap shows only on the CQ, which an idle reader reads every
    // CQ_POLL_INTERVAL polls; so the reader is done after two intervals of empty polls.
    let mut empty = 0;
    while empty < 2 * CQ_POLL_INTERVAL {
        empty = if poll(&mut rx, usize::MAX, &mut seen) > 0 { 0 } else { empty + 1 };
    }
    (written, session.next_seq(), seen)
}

fn check(written: &BTreeMap<u64, u64>, next_seq: u64, seen: &[Seen]) -> Result<(), TestCaseError> {
    let mut expected = 1u64;
    let mut delivered = 0usize;
    let mut gap_reported_to: Option<u64> = None;
    for s in seen {
        match *s {
            Seen::Gap { expected: e, got } => {
                prop_assert_eq!(e, expected, "a gap starts at the seq that was due");
                prop_assert!(got > e);
                gap_reported_to = Some(got);
            }
            Seen::Record { seq, order_id } => {
                if seq != expected {
                    prop_assert_eq!(gap_reported_to, Some(seq), "a jump to {} came without its gap event", seq);
                }
                gap_reported_to = None;
                prop_assert_eq!(written.get(&seq), Some(&order_id), "seq {} carries the record written with it", seq);
                expected = seq + 1;
                delivered += 1;
            }
            Seen::Other(ref o) => prop_assert!(false, "unexpected event {}", o),
        }
    }
    prop_assert_eq!(delivered, written.len(), "every written record is delivered exactly once");
    // every seq the publisher used is either delivered or inside a reported gap (or a trailing skip)
    let skipped = (1..next_seq).filter(|s| !written.contains_key(s)).count() as u64;
    let missed: u64 =
        seen.iter().filter_map(|s| if let Seen::Gap { expected, got } = s { Some(got - expected) } else { None }).sum();
    let trailing = next_seq - expected;
    prop_assert_eq!(missed + trailing, skipped);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn writes_stalls_and_skips_never_reorder_duplicate_or_hide_a_loss(ops in ops()) {
        let (written, next_seq, seen) = run(&ops, 64);
        check(&written, next_seq, &seen)?;
    }
}

#[test]
fn a_publisher_that_never_outruns_the_ring_delivers_everything_without_a_gap() {
    let ops: Vec<Op> = (0..50).flat_map(|_| [Op::Publish(60), Op::Poll(60)]).collect();
    let (written, next_seq, seen) = run(&ops, 64);
    assert_eq!(written.len(), 3000);
    assert_eq!(next_seq, 3001);
    assert!(seen.iter().all(|s| matches!(s, Seen::Record { .. })));
    check(&written, next_seq, &seen).unwrap();
}

#[test]
fn a_stalled_reader_sees_exactly_one_gap_per_stall_with_the_exact_bounds() {
    // 64 written, 36 skipped while the reader stalls, then it drains and the writer resumes.
    let ops = [Op::Publish(100), Op::Poll(1000), Op::Publish(10)];
    let (written, next_seq, seen) = run(&ops, 64);
    assert_eq!(next_seq, 111);
    assert_eq!(written.len(), 74);
    let gaps: Vec<&Seen> = seen.iter().filter(|s| matches!(s, Seen::Gap { .. })).collect();
    assert_eq!(gaps, [&Seen::Gap { expected: 65, got: 101 }]);
    check(&written, next_seq, &seen).unwrap();
}
