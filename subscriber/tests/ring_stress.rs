//! Concurrent stress test of the shared-memory ring protocol: the publisher's real [`Session`] (flow control
//! through `consumed_seq`, policy `resync` skips) on one thread writing through the real shm fabric, and the real
//! [`Receiver`] (which completes writes from the expected slot's stamp, owes their CQ entries and reads the CQ
//! only every `CQ_POLL_INTERVAL` empty polls) on another. Ring sizes 64 and 1024; the writer bursts and pauses,
//! and either waits for space (never outrunning the ring), skips when full (`resync`), or mixes both per burst;
//! the reader stalls (spins, yields, sleeps) and polls with small and large `max`.
//!
//! Whatever the interleaving: no record is delivered twice or out of order, every record carries the payload
//! written with its seq (all eight words, so a torn record shows), every seq that was not delivered lies inside
//! a reported gap (or after the last record), nothing is stale or corrupt, no record comes after
//! `Event::Closed`, and the reader finishes: after the close it stops after `2 * CQ_POLL_INTERVAL` empty polls
//! with everything written delivered (a CQ the reader can no longer read shows as records missing).
//!
//! `MDFAN_STRESS_MS` sets the time budget per ring size (default 1500 ms); `MDFAN_STRESS_SEED` the first seed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing, CQ_POLL_INTERVAL, DEFAULT_DIR};
use mdfan_fabric::AnyRemoteRing;
use mdfan_fabric::CloseReason;
use mdfan_publisher::session::{Post, Session};
use mdfan_subscriber::{Event, Receiver};
use mdfan_wire::control::SlowConsumerPolicy;
use mdfan_wire::{BookUpdate, Kind};

/// xorshift64*: small, seedable, good enough to pick behaviours.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `1 / n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// The record written for feed item `f` (from 1): every word derived from `f`, so a record mixed from two
/// writes (torn) does not check out.
fn payload(f: u64, kind: Kind) -> BookUpdate {
    BookUpdate {
        ts_event_ns: f.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ts_recv_ns: !f,
        price_e9: (f as i64).wrapping_mul(-7),
        order_id: f,
        instrument_id: (f as u32) ^ 0x5A5A_5A5A,
        size: (f >> 2) as u32 ^ 0xFFFF,
        venue_pos: f.rotate_left(13),
        ..BookUpdate::control(kind)
    }
}

/// Whether `r` is exactly what was written for its feed item (seq aside; `ts_send_ticks` carries the item too).
fn intact(r: &BookUpdate) -> bool {
    let f = r.order_id;
    let kind = if r.kind == Kind::EndOfStream as u8 { Kind::EndOfStream } else { Kind::Add };
    let want = BookUpdate { seq: r.seq, ts_send_ticks: f as u32, ..payload(f, kind) };
    *r == want
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterMode {
    /// Waits for space (`has_space` through `consumed_seq`): never a skip.
    Wait,
    /// Skips when full, as policy `resync` does.
    Skip,
    /// Each burst either waits or skips.
    Mixed,
}

/// What the reader saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Record { seq: u64, f: u64, intact: bool },
    Gap { expected: u64, got: u64 },
    Stale { seq: u64, expected: u64 },
    Corrupt { seq: u64, slot_seq: u64 },
    Closed,
}

struct Written {
    /// `by_seq[s]`: the feed item written with seq `s`, 0 when `s` was skipped.
    by_seq: Vec<u64>,
    /// The seq the next record would have had (every seq below was written or skipped).
    next_seq: u64,
    count: usize,
    skipped: u64,
    /// The writer gave up waiting for space: the reader stopped releasing.
    stuck: bool,
}

/// How long a writer waits for one free slot before it calls the reader stuck (the reader's stalls are
/// shorter than a millisecond).
const WAIT_LIMIT: Duration = Duration::from_secs(10);

fn pause(rng: &mut Rng) {
    match rng.below(16) {
        0..=7 => {}
        8..=11 => (0..rng.below(2000)).for_each(|_| std::hint::spin_loop()),
        12 | 13 => std::thread::yield_now(),
        _ => std::thread::sleep(Duration::from_micros(rng.below(200))),
    }
}

/// Posts `r`, waiting for space (as policy `block` and the end of stream do); false after [`WAIT_LIMIT`].
fn post_waiting(session: &mut Session, r: &mut BookUpdate, f: u64) -> bool {
    let start = Instant::now();
    for spins in 0u64.. {
        match session.try_post(r, f) {
            Post::Sent => return true,
            Post::Full if spins % 1024 == 1023 && start.elapsed() > WAIT_LIMIT => return false,
            Post::Full => std::hint::spin_loop(),
            Post::Failed(reason) => panic!("post failed: {reason:?}"),
        }
    }
    unreachable!()
}

fn writer(mut session: Session, seed: u64, slots: u32, items: u64) -> Written {
    let mut rng = Rng::new(seed ^ 0xA5A5);
    let mode = match rng.below(3) {
        0 => WriterMode::Wait,
        1 => WriterMode::Skip,
        _ => WriterMode::Mixed,
    };
    let mut by_seq = vec![0u64];
    let mut count = 0;
    let mut f = 0u64;
    let mut stuck = false;
    'feed: while f < items {
        let burst = 1 + rng.below(3 * slots as u64);
        let skip = match mode {
            WriterMode::Wait => false,
            WriterMode::Skip => true,
            WriterMode::Mixed => rng.one_in(2),
        };
        for _ in 0..burst.min(items - f) {
            f += 1;
            let mut r = payload(f, Kind::Add);
            assert_eq!(by_seq.len() as u64, session.next_seq());
            let sent = match session.try_post(&mut r, f) {
                Post::Sent => true,
                Post::Full if skip => {
                    session.skip();
                    false
                }
                Post::Full if post_waiting(&mut session, &mut r, f) => true,
                Post::Full => {
                    stuck = true;
                    break 'feed;
                }
                Post::Failed(reason) => panic!("post failed: {reason:?}"),
            };
            by_seq.push(if sent { f } else { 0 });
            count += sent as usize;
        }
        pause(&mut rng);
    }
    // End of stream: waits for space (as the publisher's `finish` does), then the close.
    if !stuck {
        f += 1;
        let mut eos = payload(f, Kind::EndOfStream);
        stuck = !post_waiting(&mut session, &mut eos, f);
        if !stuck {
            by_seq.push(f);
            count += 1;
        }
    }
    session.close(if stuck { CloseReason::Stalled } else { CloseReason::EndOfStream });
    let next_seq = session.next_seq();
    assert_eq!(by_seq.len() as u64, next_seq);
    let skipped = session.counters.skipped.load(Ordering::Relaxed);
    Written { by_seq, next_seq, count, skipped, stuck }
}

/// The reader: until it has seen the close, polls with a random `max` and stalls now and then; after the close,
/// polls until `2 * CQ_POLL_INTERVAL` polls in a row found nothing.
fn reader(mut rx: Receiver<ShmLocalRing>, seed: u64, slots: u32, give_up: Arc<AtomicBool>) -> Vec<Seen> {
    let mut rng = Rng::new(seed ^ 0x5A5A);
    let mut seen = Vec::new();
    let mut closed = false;
    let mut empty = 0u32;
    while empty < 2 * CQ_POLL_INTERVAL {
        if give_up.load(Ordering::Relaxed) {
            break;
        }
        let max = if closed {
            usize::MAX
        } else {
            match rng.below(6) {
                0 => 1,
                1 => 2,
                2 => 1 + rng.below(8) as usize,
                3 => slots as usize / 2,
                _ => usize::MAX,
            }
        };
        let n = events(&mut rx, max, &mut seen);
        if rx.closed().is_some() {
            closed = true;
        }
        if closed {
            empty = if n > 0 { 0 } else { empty + 1 };
        } else if rng.one_in(64) {
            pause(&mut rng);
        }
    }
    seen
}

/// Checks everything the module docs promise; `Err` says what broke, first thing first.
fn check(w: &Written, seen: &[Seen]) -> Result<(), String> {
    if w.stuck {
        return Err(format!(
            "the writer waited {WAIT_LIMIT:?} for space at seq {}: the reader stopped releasing",
            w.next_seq
        ));
    }
    let mut expected = 1u64;
    let mut delivered = 0usize;
    let mut gap_to: Option<u64> = None;
    let mut closed_at: Option<usize> = None;
    let mut gap_missed = 0u64;
    for (i, s) in seen.iter().enumerate() {
        match *s {
            Seen::Gap { expected: e, got } => {
                if e != expected || got <= e {
                    return Err(format!("event {i}: gap {e}..{got} while {expected} was due"));
                }
                if let Some(k) = (e..got).find(|&k| w.by_seq.get(k as usize).is_some_and(|&f| f != 0)) {
                    return Err(format!("event {i}: gap {e}..{got} covers seq {k}, which was written"));
                }
                gap_missed += got - e;
                gap_to = Some(got);
            }
            Seen::Record { seq, f, intact } => {
                if let Some(c) = closed_at {
                    return Err(format!("event {i}: record seq {seq} after Closed (event {c})"));
                }
                if seq < expected {
                    return Err(format!("event {i}: seq {seq} delivered again or out of order ({expected} due)"));
                }
                if seq != expected && gap_to != Some(seq) {
                    return Err(format!("event {i}: jump from {expected} to {seq} without its gap"));
                }
                let want = w.by_seq.get(seq as usize).copied().unwrap_or(0);
                if want == 0 {
                    return Err(format!("event {i}: seq {seq} delivered but never written"));
                }
                if f != want || !intact {
                    return Err(format!("event {i}: seq {seq} carries item {f} (intact {intact}), written {want}"));
                }
                gap_to = None;
                expected = seq + 1;
                delivered += 1;
            }
            Seen::Closed => {
                if closed_at.is_some() {
                    return Err(format!("event {i}: Closed twice"));
                }
                closed_at = Some(i);
            }
            Seen::Stale { .. } | Seen::Corrupt { .. } => return Err(format!("event {i}: {s:?}")),
        }
    }
    if closed_at.is_none() {
        return Err("no Closed event".into());
    }
    if delivered != w.count {
        let missing: Vec<u64> = (expected..w.next_seq).filter(|&s| w.by_seq[s as usize] != 0).take(8).collect();
        return Err(format!(
            "{delivered} of {} written records delivered; next due {expected}, written and not delivered: {missing:?}",
            w.count
        ));
    }
    // Every seq used is delivered, inside a reported gap, or a trailing skip (none here: end of stream is last).
    let trailing = w.next_seq - expected;
    if gap_missed + trailing != w.skipped || trailing != 0 {
        return Err(format!("{} seqs skipped, gaps report {gap_missed}, {trailing} trailing", w.skipped));
    }
    Ok(())
}

struct Outcome {
    written: usize,
    skipped: u64,
    gaps: usize,
}

fn run_once(seed: u64, slots: u32, items: u64) -> Result<Outcome, String> {
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, slots).unwrap();
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let session =
        Session::new(1, "stress".into(), AnyRemoteRing::Shm(remote), SlowConsumerPolicy::Resync, None, 0, None);
    let rx = Receiver::new(local);
    let give_up = Arc::new(AtomicBool::new(false));
    let reader = {
        let give_up = Arc::clone(&give_up);
        std::thread::spawn(move || reader(rx, seed, slots, give_up))
    };
    let writer = std::thread::spawn(move || writer(session, seed, slots, items));
    let written = writer.join().map_err(|_| format!("seed {seed}, {slots} slots: writer panicked"))?;
    // The reader ends by itself after the close (its empty polls); the deadline turns one that never does into a
    // failure instead of a hang.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let stuck = !reader.is_finished();
    give_up.store(true, Ordering::Relaxed);
    let seen = reader.join().map_err(|_| format!("seed {seed}, {slots} slots: reader panicked"))?;
    if stuck {
        return Err(format!("seed {seed}, {slots} slots: the reader was still polling 20 s after the close"));
    }
    check(&written, &seen).map_err(|e| format!("seed {seed}, {slots} slots: {e}"))?;
    let gaps = seen.iter().filter(|s| matches!(s, Seen::Gap { .. })).count();
    Ok(Outcome { written: written.count, skipped: written.skipped, gaps })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn a_concurrent_writer_and_reader_never_lose_duplicate_reorder_or_tear_a_record() {
    let budget = Duration::from_millis(env_u64("MDFAN_STRESS_MS", 1500));
    let first_seed = env_u64("MDFAN_STRESS_SEED", 1);
    let mut failures = Vec::new();
    for slots in [64u32, 1024] {
        let start = Instant::now();
        let (mut runs, mut written, mut skipped, mut gaps) = (0u64, 0usize, 0u64, 0usize);
        let mut seed = first_seed;
        while start.elapsed() < budget || runs < 4 {
            let items = 500 + Rng::new(seed).below(16 * slots as u64);
            match run_once(seed, slots, items) {
                Ok(o) => {
                    written += o.written;
                    skipped += o.skipped;
                    gaps += o.gaps;
                }
                Err(e) => failures.push(e),
            }
            runs += 1;
            seed += 1;
        }
        eprintln!("{slots} slots: {runs} runs, {written} records written, {skipped} skipped in {gaps} gaps");
        assert!(skipped > 0 && gaps > 0, "{slots} slots: the writer never skipped; the test lost its teeth");
    }
    assert!(
        failures.is_empty(),
        "{} failing runs, first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

// The cases the stress test found, made exact.

fn events(rx: &mut Receiver<impl mdfan_fabric::LocalRing>, max: usize, seen: &mut Vec<Seen>) -> usize {
    events_with(rx, max, false, seen)
}

fn events_with(
    rx: &mut Receiver<impl mdfan_fabric::LocalRing>,
    max: usize,
    thorough: bool,
    seen: &mut Vec<Seen>,
) -> usize {
    let push = |e: Event<'_>| {
        seen.push(match e {
            Event::Record(r) => Seen::Record { seq: r.seq, f: r.order_id, intact: intact(r) },
            Event::Gap { expected, got } => Seen::Gap { expected, got },
            Event::Stale { seq, expected } => Seen::Stale { seq, expected },
            Event::Corrupt { seq, slot_seq } => Seen::Corrupt { seq, slot_seq },
            Event::Closed(_) => Seen::Closed,
        })
    };
    if thorough {
        rx.poll_thorough(max, push)
    } else {
        rx.poll(max, push)
    }
}

#[test]
fn only_a_thorough_poll_proves_the_ring_empty_after_a_gap() {
    // Resync again, the ring still open: 1 written, 2 skipped, 3 written. On shm a plain poll looks for seq 2's
    // stamp and reads the CQ only every CQ_POLL_INTERVAL-th empty poll, so it may say "nothing" while 3 waits in
    // the CQ (with a yielding idler on a loaded host, for seconds: long enough for the subscriber to take it for
    // the publisher's silence). A thorough poll reads the CQ and finds it.
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
    let mut remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let mut rx = Receiver::new(local);
    use mdfan_fabric::RemoteRing;
    use mdfan_wire::ring::{imm_from_seq, slot_index};
    for seq in [1, 3] {
        let r = BookUpdate { seq, ts_send_ticks: seq as u32, ..payload(seq, Kind::Add) };
        remote.write_with_imm(slot_index(seq, 64), &r, imm_from_seq(seq)).unwrap();
    }
    let mut seen = Vec::new();
    assert_eq!(events_with(&mut rx, usize::MAX, false, &mut seen), 1);
    assert_eq!(events_with(&mut rx, usize::MAX, false, &mut seen), 0, "a plain poll misses 3 behind the gap");
    assert_eq!(events_with(&mut rx, usize::MAX, true, &mut seen), 1);
    assert_eq!(seen, [rec(1), Seen::Gap { expected: 2, got: 3 }, rec(3)]);
    assert_eq!(events_with(&mut rx, usize::MAX, true, &mut seen), 0, "now the ring is empty");
}

fn rec(seq: u64) -> Seen {
    Seen::Record { seq, f: seq, intact: true }
}

#[test]
fn closed_comes_after_a_record_that_follows_a_gap() {
    // The publisher under resync: 1 written, 2 skipped (the ring was full at the time), end of stream as 3, close.
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
    let mut remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let mut rx = Receiver::new(local);
    use mdfan_fabric::RemoteRing;
    use mdfan_wire::ring::{imm_from_seq, slot_index};
    let write = |remote: &mut ShmRemoteRing, seq: u64, kind: Kind| {
        let r = BookUpdate { seq, ts_send_ticks: seq as u32, ..payload(seq, kind) };
        remote.write_with_imm(slot_index(seq, 64), &r, imm_from_seq(seq)).unwrap();
    };
    write(&mut remote, 1, Kind::Add);
    write(&mut remote, 3, Kind::EndOfStream);
    remote.close(CloseReason::EndOfStream);
    let mut seen = Vec::new();
    for _ in 0..2 * CQ_POLL_INTERVAL {
        events(&mut rx, usize::MAX, &mut seen);
    }
    assert_eq!(seen, [rec(1), Seen::Gap { expected: 2, got: 3 }, rec(3), Seen::Closed]);
}

/// A ring whose writer runs (one write, then the close) right after the reader's first empty poll: the
/// interleaving where the reader's poll finds nothing and its next load sees the close.
struct WriterBetweenPollAndClose {
    local: ShmLocalRing,
    remote: Option<ShmRemoteRing>,
}

impl mdfan_fabric::LocalRing for WriterBetweenPollAndClose {
    fn slot_count(&self) -> u32 {
        self.local.slot_count()
    }
    fn poll_cq(&mut self) -> Option<mdfan_fabric::Completion<'_>> {
        self.local.poll_cq()
    }
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<mdfan_fabric::Completion<'_>> {
        let c = self.local.poll_cq_expecting(expected_seq);
        if c.is_none() {
            if let Some(mut remote) = self.remote.take() {
                use mdfan_fabric::RemoteRing;
                let r = BookUpdate {
                    seq: expected_seq,
                    ts_send_ticks: expected_seq as u32,
                    ..payload(expected_seq, Kind::EndOfStream)
                };
                remote.write_with_imm(mdfan_wire::ring::slot_index(expected_seq, 64), &r, expected_seq as u32).unwrap();
                remote.close(CloseReason::EndOfStream);
            }
        }
        c
    }
    fn release(&mut self, consumed_seq: u64) {
        self.local.release(consumed_seq)
    }
    fn peer_state(&self) -> mdfan_fabric::PeerState {
        self.local.peer_state()
    }
}

#[test]
fn closed_comes_after_a_record_written_between_an_empty_poll_and_the_close() {
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let mut rx = Receiver::new(WriterBetweenPollAndClose { local, remote: Some(remote) });
    let mut seen = Vec::new();
    for _ in 0..2 * CQ_POLL_INTERVAL {
        events(&mut rx, usize::MAX, &mut seen);
    }
    assert_eq!(seen, [rec(1), Seen::Closed]);
}

#[test]
fn a_snapshot_repairs_every_gap_before_it_not_only_the_one_it_was_asked_for() {
    // Under resync: a gap (2 skipped), the snapshot request for it (take_gap), a second gap (4 skipped) before the
    // snapshot starts, then SnapshotBegin: the snapshot rebuilds the books past both, so nothing is left unrepaired.
    let dir = Path::new(DEFAULT_DIR);
    let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
    let mut remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid())).unwrap();
    let mut rx = Receiver::new(local);
    use mdfan_fabric::RemoteRing;
    use mdfan_wire::ring::{imm_from_seq, slot_index};
    let write = |remote: &mut ShmRemoteRing, seq: u64, kind: Kind| {
        let r = BookUpdate { seq, ts_send_ticks: seq as u32, ..payload(seq, kind) };
        remote.write_with_imm(slot_index(seq, 64), &r, imm_from_seq(seq)).unwrap();
    };
    let mut seen = Vec::new();
    let drain = |rx: &mut Receiver<ShmLocalRing>, seen: &mut Vec<Seen>| {
        while events_with(rx, usize::MAX, true, seen) > 0 {}
    };
    write(&mut remote, 1, Kind::Add);
    write(&mut remote, 3, Kind::Add);
    drain(&mut rx, &mut seen);
    assert_eq!(rx.take_gap(), Some(2), "the gap a snapshot is asked for");
    write(&mut remote, 5, Kind::Add);
    drain(&mut rx, &mut seen);
    assert_eq!(rx.unrepaired_gap(), Some(4), "a second gap while the snapshot is on its way");
    write(&mut remote, 6, Kind::SnapshotBegin);
    drain(&mut rx, &mut seen);
    assert_eq!(rx.unrepaired_gap(), None, "the snapshot covers both");
    write(&mut remote, 8, Kind::SnapshotEnd);
    drain(&mut rx, &mut seen);
    assert_eq!(rx.unrepaired_gap(), Some(7), "a gap inside the snapshot is not repaired by it");
    let gaps: Vec<&Seen> = seen.iter().filter(|s| matches!(s, Seen::Gap { .. })).collect();
    assert_eq!(
        gaps,
        [&Seen::Gap { expected: 2, got: 3 }, &Seen::Gap { expected: 4, got: 5 }, &Seen::Gap { expected: 7, got: 8 }]
    );
}
