//! A loom model of the shared-memory ring's hand-off (`mdfan_fabric::shm`): every interleaving of one writer and
//! one reader, under the C++11 memory model loom implements, for a ring of two slots and three records (so the
//! writer reuses a slot, after the reader released it).
//!
//! What it models, with the orderings of `shm.rs`:
//! - the writer (`ShmRemoteRing::write_with_imm`): waits for space (`consumed_seq`, Acquire), writes the
//!   record's body, stores the seq word (the slot's stamp, Release), then the CQ entry `(lap << 32) | imm`
//!   (Release);
//! - the reader (`ShmLocalRing::poll_cq_expecting` / `poll_cq`): completes the expected seq from its stamp
//!   (Acquire) or from the CQ entry at its position (Acquire, lap-checked, a lap ahead stepped over), reads the
//!   body, then releases the seq (`release`, Release).
//!
//! The body is a `loom::cell::UnsafeCell` written and read non-atomically: loom fails the model if a read is not
//! ordered after the write it must see, or a rewrite not after the read (a torn or racing slot). The real code
//! stores the body with relaxed atomics and reads it through `&BookUpdate`; the threaded shm unit test checks
//! that code itself under Miri. The negative models (a relaxed stamp, a relaxed CQ entry, no flow control) show
//! the model can fail.
//!
//! Runs with every `cargo test` (well under a second; LOOM_MAX_PREEMPTIONS overrides the bound of 3 preemptions).

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const SLOTS: u64 = 2;
const RECORDS: u64 = 3;

/// The orderings (and flow control) under test.
#[derive(Clone, Copy)]
struct Protocol {
    stamp: Ordering,
    cq_entry: Ordering,
    flow_control: bool,
}

const SHM: Protocol = Protocol { stamp: Ordering::Release, cq_entry: Ordering::Release, flow_control: true };

struct Slot {
    stamp: AtomicU64,
    body: UnsafeCell<[u64; 2]>,
}

struct Ring {
    slots: [Slot; SLOTS as usize],
    cq: [AtomicU64; SLOTS as usize],
    consumed: AtomicU64,
}

fn body_of(seq: u64) -> [u64; 2] {
    [seq * 10, seq * 100 + 7]
}

fn writer(ring: &Ring, p: Protocol) {
    for seq in 1..=RECORDS {
        while p.flow_control && seq - ring.consumed.load(Ordering::Acquire) > SLOTS {
            thread::yield_now();
        }
        let slot = &ring.slots[(seq % SLOTS) as usize];
        // SAFETY: a valid pointer to the cell's value; loom checks the write is not concurrent with a read.
        slot.body.with_mut(|b| unsafe { *b = body_of(seq) });
        slot.stamp.store(seq, p.stamp);
        let pos = seq - 1; // one CQ entry per write, in seq order
        let lap = pos / SLOTS + 1;
        ring.cq[(pos % SLOTS) as usize].store((lap << 32) | seq, p.cq_entry);
    }
}

/// Reads every record in order; `stamp_first[i]` chooses how record `i + 1` is looked for first.
fn reader(ring: &Ring, stamp_first: [bool; RECORDS as usize]) -> Vec<u64> {
    let (mut expected, mut cq_pos, mut got) = (1u64, 0u64, Vec::new());
    while expected <= RECORDS {
        let slot = &ring.slots[(expected % SLOTS) as usize];
        let seq = if stamp_first[(expected - 1) as usize] && slot.stamp.load(Ordering::Acquire) == expected {
            cq_pos += 1; // a stamp completion takes the record's CQ position
            expected
        } else {
            let lap = cq_pos / SLOTS + 1;
            let entry = ring.cq[(cq_pos % SLOTS) as usize].load(Ordering::Acquire);
            if entry >> 32 == lap + 1 {
                cq_pos += 1; // a lap ahead: its record was completed from the stamp and released
                continue;
            }
            if entry >> 32 != lap {
                thread::yield_now();
                continue;
            }
            cq_pos += 1;
            entry & 0xffff_ffff
        };
        assert_eq!(seq, expected, "records complete in seq order");
        // SAFETY: a valid pointer to the cell's value; loom checks the read is not concurrent with a write.
        let body = ring.slots[(seq % SLOTS) as usize].body.with(|b| unsafe { *b });
        assert_eq!(body, body_of(seq), "seq {seq}: a torn or overwritten slot");
        got.push(seq);
        ring.consumed.store(seq, Ordering::Release);
        expected += 1;
    }
    got
}

fn model(p: Protocol, stamp_first: [bool; RECORDS as usize]) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(move || {
        let ring = Arc::new(Ring {
            slots: std::array::from_fn(|_| Slot { stamp: AtomicU64::new(0), body: UnsafeCell::new([0; 2]) }),
            cq: std::array::from_fn(|_| AtomicU64::new(0)),
            consumed: AtomicU64::new(0),
        });
        let w = Arc::clone(&ring);
        let t = thread::spawn(move || writer(&w, p));
        let got = reader(&ring, stamp_first);
        t.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn every_record_is_whole_when_completed_from_its_stamp() {
    model(SHM, [true; 3]);
}

#[test]
fn every_record_is_whole_when_completed_from_the_cq() {
    model(SHM, [false; 3]);
}

#[test]
fn every_record_is_whole_when_stamp_and_cq_completions_mix() {
    model(SHM, [true, false, true]);
    model(SHM, [false, true, false]);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_stamp_lets_the_reader_see_a_torn_record() {
    model(Protocol { stamp: Ordering::Relaxed, ..SHM }, [true; 3]);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_relaxed_cq_entry_lets_the_reader_see_a_torn_record() {
    model(Protocol { cq_entry: Ordering::Relaxed, ..SHM }, [false; 3]);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn without_flow_control_the_writer_overwrites_a_slot_being_read() {
    model(Protocol { flow_control: false, ..SHM }, [true; 3]);
}
