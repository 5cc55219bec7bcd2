//! Probes of the shm one-way path, step by step (mdfan issue 12, item 1): which step of a record's hand-off
//! costs more than one cache-line transfer. `perf c2c` needs hardware counters these hosts do not have, so each
//! step is its own ping-pong, built up from the cache line to the full product path and measured in every round
//! beside `baseline.cacheline` (one message each way at a time, one-way = round trip / 2, the same two cores).
//!
//! The variants are [`VARIANTS`], each with what one message is. Raw variants build the hand-off from atomics
//! on heap arrays with the shm segment's alignment (64-byte slots, the CQ on lines of its own, the consumed seq
//! on a 128-byte line of its own), one step at a time: the same line every time, then a stamp store into the
//! next slot of rings of 8 to 1,024 slots (and 64 slots placed to share one L1 set, or spread over 64 pages),
//! then the record's other words, the CQ entry, the reader's periodic CQ load and a credit round trip per record;
//! `fabric` and `session` are the product's own code on real ring files under the run's `--shm-dir`.
//!
//! Figures: `probe.shm.<variant>.<pNN>_ns` (histograms over all rounds) and
//! `ratio.probe.shm.<variant>_vs_baseline.cacheline.<pNN>`: the median over rounds of each round's ratio of the
//! variant to that round's cache line (the cores' placement moves the cache line between about 55 and 200 ns
//! from minute to minute, so only a round's own baseline is comparable).

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use hdrhistogram::Histogram;
use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing};
use mdfan_fabric::{AnyRemoteRing, LocalRing, RemoteRing};
use mdfan_publisher::session::{Post, Session};
use mdfan_subscriber::{Event, Receiver, SlowConsumerPolicy};
use mdfan_wire::ring::{imm_from_seq, slot_index};
use mdfan_wire::{BookUpdate, Kind};

/// Slots per probe ring (as the `mdfan.shm.pingpong` rings).
const SLOTS: usize = 1024;
/// Empty polls between the reader's CQ loads in `slot_cq_poll` / `slot_cq_idle` (the fabric's `CQ_POLL_INTERVAL`).
const CQ_POLL_INTERVAL: u32 = mdfan_fabric::shm::CQ_POLL_INTERVAL;

/// The variants, in the order each round measures them and the report lists them: (name, what one message is).
pub const VARIANTS: [(&str, &str); 18] = [
    ("line", "one 8-byte store into the same line every time (this harness's cache line)"),
    ("stamp_ring8", "one 8-byte stamp store into the next 64-byte slot of an 8-slot ring (512 B)"),
    ("stamp_ring64", "the same, 64-slot ring (4 KiB)"),
    ("stamp_ring128", "the same, 128-slot ring (8 KiB)"),
    ("stamp_ring256", "the same, 256-slot ring (16 KiB)"),
    ("stamp", "the same, 1,024-slot ring (64 KiB, as mdfan.shm.pingpong's rings)"),
    ("stamp_ring64_sameset", "64 slots 4 KiB apart (64 pages, one L1 set)"),
    ("stamp_ring64_spread", "64 slots 4,160 B apart (64 pages, 64 L1 sets)"),
    ("stamp_scatter", "1,024-slot ring visited with a stride of 97 slots (no sequential prefetch)"),
    ("stamp_warm_both", "stamp; writer loads its next slot after each store, reader the slot two ahead"),
    ("stamp_own_both", "stamp; writer takes its next slot owned (atomic add of 0), reader loads two ahead"),
    ("slot", "words 1..8 relaxed, then the stamp with release (store_slot); reader reads all 8 words"),
    ("slot_cq", "slot, then an 8-byte CQ entry with release on the CQ lines (store_cq_entry)"),
    ("slot_cq_poll", "slot_cq; reader loads the CQ on every 1,024th empty poll of the run (poll_cq_expecting)"),
    ("slot_cq_idle", "slot_cq; reader loads the CQ only after 1,024 empty polls in a row"),
    ("slot_credit", "slot_cq; reader stores its consumed seq per record, writer loads it per record"),
    ("fabric", "ShmRemoteRing::write_with_imm, ShmLocalRing::poll_cq_expecting + release on ring files"),
    ("session", "publisher Session::try_post, subscriber Receiver::poll, on ring files"),
];

/// The figure key stem of a variant: `probe.shm.<variant>`.
pub fn key(variant: &str) -> String {
    format!("probe.shm.{variant}")
}

/// One 64-byte slot: 8 words, word 0 the stamp.
#[repr(C, align(64))]
#[derive(Default)]
struct Slot([AtomicU64; 8]);

/// A word on a 128-byte line pair of its own (the adjacent-line prefetcher pulls pairs).
#[repr(C, align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// What the raw ring variants do on top of a stamp store.
#[derive(Clone, Copy)]
struct Steps {
    /// Store into the same slot every message (`line`), else into the next slot of the ring.
    same_slot: bool,
    /// Slots in rotation (up to `SLOTS`).
    ring: usize,
    /// Message `seq` goes to slot `((seq * stride) mod ring) * spread` (1, 1: in order, as the product).
    stride: usize,
    /// See `stride`: slots this far apart (in 64-byte slots).
    spread: usize,
    /// Store words 1..8 (relaxed) before the stamp, and read them after it.
    words: bool,
    /// Store a CQ entry after the stamp.
    cq: bool,
    /// Reader loads the CQ: `Some(true)` after `CQ_POLL_INTERVAL` empty polls in a row, `Some(false)` every
    /// `CQ_POLL_INTERVAL`-th empty poll counted over the whole run.
    cq_poll: Option<bool>,
    /// Reader stores its consumed seq after each record; writer loads it before each.
    credit: bool,
    /// Writer loads the stamp of the slot this many messages ahead after each message (0: none).
    warm: u64,
    /// Reader loads the stamp of the slot this many messages ahead as soon as it has seen a stamp (0: none).
    reader_warm: u64,
    /// Writer takes the line of the slot this many messages ahead for writing after each message (an atomic
    /// add of 0 to its stamp: the line comes over owned, as PREFETCHW brings it; 0: none).
    own_ahead: u64,
}

/// One direction of a raw probe: a ring of slots, a CQ and a consumed seq, each on lines of its own.
struct RawRing {
    slots: Box<[Slot]>,
    /// `SLOTS` CQ entries, 8 to a 64-byte line.
    cq: Box<[Slot]>,
    consumed: Box<Padded>,
}

impl RawRing {
    fn new() -> Arc<RawRing> {
        Arc::new(RawRing {
            // room for 64 slots 65 lines apart (`stamp_ring64_spread`)
            slots: (0..SLOTS * 8).map(|_| Slot::default()).collect(),
            cq: (0..SLOTS / 8).map(|_| Slot::default()).collect(),
            consumed: Box::default(),
        })
    }

    fn cq_entry(&self, seq: u64) -> &AtomicU64 {
        let i = seq as usize % SLOTS;
        &self.cq[i / 8].0[i % 8]
    }
}

/// A thread's end of a raw probe: it writes `tx` and reads `rx`.
struct RawSide {
    steps: Steps,
    tx: Arc<RawRing>,
    rx: Arc<RawRing>,
    idle_polls: u32,
}

impl RawSide {
    fn slot(&self, ring: &RawRing, seq: u64) -> usize {
        if self.steps.same_slot {
            0
        } else {
            ((seq as usize).wrapping_mul(self.steps.stride) % self.steps.ring * self.steps.spread) % ring.slots.len()
        }
    }

    #[inline]
    fn send(&mut self, seq: u64, ticks: u64) {
        let s = self.steps;
        if s.credit {
            black_box(self.tx.consumed.0.load(Ordering::Acquire));
        }
        let slot = &self.tx.slots[self.slot(&self.tx, seq)].0;
        if s.words {
            slot[1].store(ticks, Ordering::Relaxed);
            for (i, w) in slot.iter().enumerate().skip(2) {
                w.store(seq ^ i as u64, Ordering::Relaxed);
            }
        }
        // Release: words 1..8 before the stamp, as `store_slot`.
        slot[0].store(seq, Ordering::Release);
        if s.cq {
            self.tx.cq_entry(seq).store(seq, Ordering::Release);
        }
        if s.own_ahead > 0 {
            black_box(self.tx.slots[self.slot(&self.tx, seq + s.own_ahead)].0[0].fetch_add(0, Ordering::Relaxed));
        }
        if s.warm > 0 {
            black_box(self.tx.slots[self.slot(&self.tx, seq + s.warm)].0[0].load(Ordering::Relaxed));
        }
    }

    /// Spins until `seq` arrives; returns word 1 (the sender's ticks) when words are written.
    #[inline]
    fn recv(&mut self, seq: u64) -> u64 {
        let s = self.steps;
        let slot = &self.rx.slots[self.slot(&self.rx, seq)].0;
        while slot[0].load(Ordering::Acquire) != seq {
            if s.cq_poll.is_some() {
                self.idle_polls = self.idle_polls.wrapping_add(1);
                if self.idle_polls.is_multiple_of(CQ_POLL_INTERVAL) {
                    black_box(self.rx.cq_entry(seq).load(Ordering::Acquire));
                }
            }
            std::hint::spin_loop();
        }
        if s.cq_poll == Some(true) {
            self.idle_polls = 0;
        }
        if s.reader_warm > 0 {
            black_box(self.rx.slots[self.slot(&self.rx, seq + s.reader_warm)].0[0].load(Ordering::Relaxed));
        }
        let mut ticks = 0;
        if s.words {
            ticks = slot[1].load(Ordering::Relaxed);
            for w in slot.iter().skip(2) {
                black_box(w.load(Ordering::Relaxed));
            }
        }
        if s.credit {
            self.rx.consumed.0.store(seq, Ordering::Release);
        }
        ticks
    }
}

/// Either end of a ping-pong.
trait Side: Send {
    /// Sends message `seq` carrying the sender's clock `ticks`.
    fn send(&mut self, seq: u64, ticks: u64);
    /// Waits for message `seq`.
    fn recv(&mut self, seq: u64);
}

impl Side for RawSide {
    fn send(&mut self, seq: u64, ticks: u64) {
        RawSide::send(self, seq, ticks);
    }
    fn recv(&mut self, seq: u64) {
        black_box(RawSide::recv(self, seq));
    }
}

/// The fabric API, as `shm::pingpong`.
struct FabricSide {
    tx: ShmRemoteRing,
    rx: ShmLocalRing,
}

impl Side for FabricSide {
    fn send(&mut self, seq: u64, ticks: u64) {
        let r = BookUpdate { seq, ts_send_ticks: ticks as u32, ..BookUpdate::control(Kind::Add) };
        let slot = slot_index(seq, self.tx.slot_count());
        self.tx.write_with_imm(slot, &r, imm_from_seq(seq)).expect("a probe ring post");
    }
    fn recv(&mut self, seq: u64) {
        loop {
            if let Some(c) = self.rx.poll_cq_expecting(seq) {
                black_box(*c.record().expect("a probe ring's completion has its record"));
                self.rx.release(seq);
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// The publisher's session and the subscriber's receiver over the fabric.
struct SessionSide {
    tx: Session,
    rx: Receiver<ShmLocalRing>,
}

impl Side for SessionSide {
    fn send(&mut self, _seq: u64, ticks: u64) {
        let mut r = BookUpdate::control(Kind::Add);
        // The ring is never full in a ping-pong (one record in flight each way).
        assert_eq!(self.tx.try_post(&mut r, ticks), Post::Sent, "a probe session post");
    }
    fn recv(&mut self, seq: u64) {
        loop {
            let mut got = 0;
            self.rx.poll(1, |e| {
                if let Event::Record(r) = e {
                    got = r.seq;
                }
            });
            if got == seq {
                return;
            }
            assert_eq!(got, 0, "probe session: seq {got} while {seq} was due");
            std::hint::spin_loop();
        }
    }
}

/// Runs `warmup + count` round trips, `a` on `a_core` sending first; returns the one-way histogram (ns).
fn pingpong<S: Side + 'static>(
    mut a: S,
    mut b: S,
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> Histogram<u64> {
    let total = warmup + count;
    let start = Arc::new(Barrier::new(2));
    let responder = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            crate::pin(b_core);
            start.wait();
            for seq in 1..=total {
                b.recv(seq);
                b.send(seq, 0);
            }
        })
    };
    crate::pin(a_core);
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    start.wait();
    for seq in 1..=total {
        let t0 = clock.raw();
        a.send(seq, t0);
        a.recv(seq);
        let rtt = clock.delta_as_nanos(t0, clock.raw());
        if seq > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    responder.join().expect("probe responder thread");
    hist
}

fn raw(steps: Steps, a: Option<usize>, b: Option<usize>, warmup: u64, count: u64) -> Histogram<u64> {
    let (ab, ba) = (RawRing::new(), RawRing::new());
    let side_a = RawSide { steps, tx: Arc::clone(&ab), rx: Arc::clone(&ba), idle_polls: 0 };
    let side_b = RawSide { steps, tx: ba, rx: ab, idle_polls: 0 };
    pingpong(side_a, side_b, a, b, warmup, count)
}

/// Measures `variant` once (see the module docs).
fn measure(
    variant: &str,
    dir: &Path,
    a: Option<usize>,
    b: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Histogram<u64>> {
    let slot = Steps {
        same_slot: false,
        ring: SLOTS,
        stride: 1,
        spread: 1,
        words: true,
        cq: false,
        cq_poll: None,
        credit: false,
        warm: 0,
        reader_warm: 0,
        own_ahead: 0,
    };
    let stamp = Steps { words: false, ..slot };
    let slot_cq = Steps { cq: true, ..slot };
    let steps = match variant {
        "line" => Steps { same_slot: true, ..stamp },
        "stamp_ring8" => Steps { ring: 8, ..stamp },
        "stamp_ring64" => Steps { ring: 64, ..stamp },
        "stamp_ring128" => Steps { ring: 128, ..stamp },
        "stamp_ring256" => Steps { ring: 256, ..stamp },
        "stamp" => stamp,
        "stamp_ring64_sameset" => Steps { ring: 64, spread: 64, ..stamp },
        "stamp_ring64_spread" => Steps { ring: 64, spread: 65, ..stamp },
        "stamp_scatter" => Steps { stride: 97, ..stamp },
        "stamp_warm_both" => Steps { warm: 1, reader_warm: 2, ..stamp },
        "stamp_own_both" => Steps { own_ahead: 1, reader_warm: 2, ..stamp },
        "slot" => slot,
        "slot_cq" => slot_cq,
        "slot_cq_poll" => Steps { cq_poll: Some(false), ..slot_cq },
        "slot_cq_idle" => Steps { cq_poll: Some(true), ..slot_cq },
        "slot_credit" => Steps { credit: true, ..slot_cq },
        "fabric" => {
            let (a_rx, b_tx) = crate::shm::ring(dir, SLOTS as u32)?;
            let (b_rx, a_tx) = crate::shm::ring(dir, SLOTS as u32)?;
            let (sa, sb) = (FabricSide { tx: a_tx, rx: a_rx }, FabricSide { tx: b_tx, rx: b_rx });
            return Ok(pingpong(sa, sb, a, b, warmup, count));
        }
        "session" => {
            let (a_rx, b_tx) = crate::shm::ring(dir, SLOTS as u32)?;
            let (b_rx, a_tx) = crate::shm::ring(dir, SLOTS as u32)?;
            let session =
                |tx| Session::new(0, "probe".into(), AnyRemoteRing::Shm(tx), SlowConsumerPolicy::Block, None, 0, None);
            let sa = SessionSide { tx: session(a_tx), rx: Receiver::new(a_rx) };
            let sb = SessionSide { tx: session(b_tx), rx: Receiver::new(b_rx) };
            return Ok(pingpong(sa, sb, a, b, warmup, count));
        }
        other => anyhow::bail!("probe: no variant {other:?}"),
    };
    Ok(raw(steps, a, b, warmup, count))
}

/// One round of every variant, each on a fresh thread (as the other measurements): `(variant, start, histogram)`.
pub fn round(
    dir: &Path,
    a: Option<usize>,
    b: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Vec<(&'static str, Instant, Histogram<u64>)>> {
    let mut out = Vec::with_capacity(VARIANTS.len());
    for (v, _) in VARIANTS {
        let t = Instant::now();
        let h = crate::fresh(|| measure(v, dir, a, b, warmup, count))?;
        out.push((v, t, h));
    }
    Ok(out)
}

/// Records one round of the probes: each variant's histogram (`probe.shm.<variant>`) and its ratios to the
/// round's cache line `line`, `ratio.probe.shm.<variant>_vs_baseline.cacheline.<pNN>` (a scalar per round; the
/// report gives the median over rounds).
pub fn record(
    rec: &mut crate::Recorder,
    scalars: &mut crate::Scalars,
    line: &Histogram<u64>,
    round: Vec<(&'static str, Instant, Histogram<u64>)>,
) {
    for (v, t, h) in round {
        for (p, q) in crate::report::PERCENTILES {
            let d = crate::report::value_at(line, q) as f64;
            if crate::report::RATIO_PERCENTILES.contains(&p) && d > 0.0 {
                let r = crate::report::value_at(&h, q) as f64 / d;
                scalars.add(format!("ratio.{}_vs_baseline.cacheline.{p}", key(v)), r);
            }
        }
        rec.add(&key(v), t, h);
    }
}
