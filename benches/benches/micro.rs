//! Criterion micro-benchmarks of the per-record steps, on the bundled ESH4 capture (data/README.md).
//!
//! ```text
//! cargo bench -p mdfan-bench --bench micro                 # full criterion run
//! cargo bench -p mdfan-bench --bench micro -- --quick      # short mode
//! cargo bench -p mdfan-bench --bench micro -- book_apply   # one group (criterion's name filter)
//! ```
//!
//! - `record`: `encode` (stamp seq and send ticks into a record, write its 64 bytes into a cache-line-aligned
//!   buffer with `BookUpdate::as_bytes`) and `decode` (`BookUpdate::from_bytes` plus the `kind`/`side` byte
//!   checks), over 256 consecutive live records of the capture.
//! - `book_apply`: `Books::apply` per record kind on the book the whole capture builds (11,217 resting orders,
//!   922 bid and 565 ask levels): `add`, `cancel`, `modify` (to one tick away and back), `trade` and `fill` (the
//!   capture's own records; they leave the levels alone) over many records per iteration, and `clear` of the
//!   full book (one record, on a fresh copy each time). Each batch is undone untimed, so every iteration starts
//!   from the same book. `hot_add` ... `hot_clear`: the same records on `HotBooks` (the hot-path book, sized for
//!   the capture, checked against the same reference values and never growing), so the ratio shows in one run.
//! - `ring`: shm `write_with_imm` + `poll_cq` + in-place slot read (seq checked, as the subscriber does) +
//!   `release`, one record, one thread; rings of 64 slots (cache-resident) and 131,072 (the subscriber's
//!   default, 8 MiB: each write lands on a line last touched a lap ago).
//! - `dbn`: over the decompressed capture in memory, `decode` (the `dbn` crate's decoder alone, each record
//!   viewed as an `MboMsg`), `decode_mbo_bytes` (mdfan's load: framing check, decode, per-record normalise
//!   check, collect) and `normalize` (`normalize_mbo` of every decoded message, the hot loop's step).
//! - `mdp3`: over line A of the bundled MDP 3.0 capture (5,000 packets, in memory): `reference_sbe` (views
//!   generated from CME's schema by `sbe_gen`, reading every field mdfan's normalisation reads) and
//!   `decode_normalize` (`Mdp3Channel::on_packet`, each record copied into a pre-allocated ring of 64-byte
//!   records, the journal's stand-in; a fresh channel per iteration, made untimed), per packet: the issue's
//!   target is at most 1.5x the reference (`benches/src/mdp3.rs`).
//! - `itch`: `mdfan/<input>` (`ItchFile::next_into`: decode + normalise, records into the same kind
//!   of ring), `itch5_hashmap/<input>` (the `itch5` crate's parse + a `std` `HashMap` order table, the reference:
//!   target at most 1.0x) and `itch5_parse/<input>` (the parse alone, a floor), per message, on the bundled
//!   snippet and a synthetic day over a million live orders (its build-up played untimed before each iteration;
//!   `benches/src/itch.rs`); and `mold_packets/synthetic` against `mold_packets_prefetch/synthetic`, the live
//!   path's framing (the synthetic day in MoldUDP64 packets) without and with `ItchNormalizer::prefetch_packet`.
//! - `wire_clock`: the clocks a subscriber could read per record for wire-to-poll: `system_time_now`
//!   (`SystemTime::now()`, `clock_gettime(CLOCK_REALTIME)` through the vDSO), `tsc_raw` (quanta's raw TSC, what
//!   post-to-poll reads anyway) and `anchored_realtime` (`mdfan_subscriber::latency::RealtimeClock`: that TSC read
//!   turned into realtime from an anchor refreshed once per ms; what the subscriber uses).
//!
//! Throughput is in records (`mdp3`: packets; `itch`: messages). Every benchmark checks a value against the reference before it is timed (counts,
//! books and timestamps of data/README.md), so a broken benchmark fails instead of timing nothing.
#![forbid(unsafe_code)]

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;
#[allow(dead_code, unused_imports)] // the run report's half and the unit tests are not used here
#[path = "../src/itch.rs"]
mod itch;
#[allow(dead_code, unused_imports)] // the run report's half (per-packet histogram) and the unit test are not used here
#[path = "../src/mdp3.rs"]
mod mdp3;

use std::collections::HashSet;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use dbn::decode::{DbnDecoder, DecodeRecordRef, DynReader};
use dbn::{MboMsg, VersionUpgradePolicy};
use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing, DEFAULT_DIR};
use mdfan_fabric::{LocalRing, PeerState, RemoteRing};
use mdfan_feed::dbn::{decode_mbo_bytes, normalize_mbo};
use mdfan_wire::record::RECORD_SIZE_BYTES;
use mdfan_wire::ring::{imm_from_seq, slot_index};
use mdfan_wire::{BookCapacity, BookError, BookUpdate, Books, HotBooks, Kind, Level, Side};

/// The capture, loaded once for every group.
struct Capture {
    path: PathBuf,
    /// The decompressed DBN stream (metadata and records).
    raw: Vec<u8>,
    msgs: Vec<MboMsg>,
    /// `msgs` normalised, in file order.
    records: Vec<BookUpdate>,
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let path = esh4::main_file();
        let mut raw = Vec::new();
        DynReader::from_file(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .read_to_end(&mut raw)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = decode_mbo_bytes(&path, &raw).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.records.len() as u64, esh4::RECORDS, "{}: record count", path.display());
        let records: Vec<BookUpdate> =
            file.records.iter().map(|m| normalize_mbo(m).expect("checked by decode_mbo_bytes")).collect();
        Capture { path, raw, msgs: file.records, records }
    })
}

/// Records of the live session after the start-of-day snapshot.
fn live(cap: &Capture) -> &[BookUpdate] {
    &cap.records[esh4::SNAPSHOT_RECORDS as usize..]
}

// ---------------------------------------------------------------------------------------------------------------
// record

/// Records per `record` iteration: 256 x 64 B = 16 KiB in and out, inside L1d (32-48 KiB on x86-64 cores).
const RECORD_BATCH: usize = 256;

/// One cache line, as a ring slot is.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; RECORD_SIZE_BYTES]);

/// Stamps each record with its seq and send ticks, as the publisher does at post time, and writes its 64 bytes
/// into one line of `out`.
#[inline]
fn encode(src: &[BookUpdate], first_seq: u64, out: &mut [Line]) {
    for (i, (r, line)) in src.iter().zip(out.iter_mut()).enumerate() {
        let stamped = BookUpdate { seq: first_seq + i as u64, ts_send_ticks: first_seq as u32, ..*r };
        line.0 = *stamped.as_bytes();
    }
}

/// Views every line as a record and checks its kind and side bytes, as a subscriber would; returns the sum of
/// the valid records' sizes and their count, so nothing is optimised away.
#[inline]
fn decode(lines: &[Line]) -> (u64, usize) {
    let (mut size, mut valid) = (0u64, 0usize);
    for line in lines {
        let r = BookUpdate::from_bytes(&line.0);
        if r.kind().is_some() && r.side().is_some() {
            size += r.size as u64;
            valid += 1;
        }
    }
    (size, valid)
}

fn record(c: &mut Criterion) {
    let src = &live(capture())[..RECORD_BATCH];
    let mut lines = vec![Line([0; RECORD_SIZE_BYTES]); RECORD_BATCH];
    encode(src, 1, &mut lines);
    for (i, (r, line)) in src.iter().zip(&lines).enumerate() {
        let expected = BookUpdate { seq: 1 + i as u64, ts_send_ticks: 1, ..*r };
        assert_eq!(BookUpdate::from_bytes(&line.0), expected, "record {i} did not survive encode + decode");
    }
    let expected_size: u64 = src.iter().map(|r| r.size as u64).sum();
    assert_eq!(decode(&lines), (expected_size, RECORD_BATCH), "decode of the encoded batch");

    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(RECORD_BATCH as u64));
    let mut seq = 1u64;
    g.bench_function("encode", |b| {
        b.iter(|| {
            seq += RECORD_BATCH as u64;
            encode(black_box(src), seq, &mut lines);
            black_box(&lines);
        })
    });
    g.bench_function("decode", |b| b.iter(|| decode(black_box(&lines))));
    g.finish();
}

// ---------------------------------------------------------------------------------------------------------------
// book_apply

/// Records per timed batch for the kinds that are undone after each batch.
const BOOK_BATCH: usize = 1024;
/// ES's tick: 0.25 in units of 1e-9.
const TICK_E9: i64 = 250_000_000;
/// The hot books' size: the capture's book (11,237 orders at most, 928 bid and 575 ask levels) plus `add`'s
/// batch, without growing.
const HOT_CAPACITY: BookCapacity = BookCapacity::new(16_384, 2_048, 1);

/// ESH4's book as `book_apply` checks it: resting orders, bid and ask level counts, best bid and ask.
type BookState = (usize, usize, usize, Option<Level>, Option<Level>);

/// What `book_apply` measures and checks, for the reference `Books` and for `HotBooks`.
trait BenchBooks: Clone {
    fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError>;
    fn esh4(&self) -> Option<BookState>;
    /// Sum of price x size over every level of both sides of ESH4's book (units of 1e-9).
    fn resting_value(&self) -> i128;
}

impl BenchBooks for Books {
    #[inline]
    fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        Books::apply(self, r)
    }

    fn esh4(&self) -> Option<BookState> {
        let b = self.get(esh4::INSTRUMENT_ID)?;
        let (bid, ask) = b.bbo();
        Some((b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask), bid, ask))
    }

    fn resting_value(&self) -> i128 {
        let Some(book) = self.get(esh4::INSTRUMENT_ID) else { return 0 };
        [Side::Bid, Side::Ask]
            .into_iter()
            .flat_map(|side| book.top(side, usize::MAX))
            .map(|l| l.price_e9 as i128 * l.size as i128)
            .sum()
    }
}

impl BenchBooks for HotBooks {
    #[inline]
    fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        HotBooks::apply(self, r)
    }

    fn esh4(&self) -> Option<BookState> {
        let b = self.get(esh4::INSTRUMENT_ID)?;
        let (bid, ask) = b.bbo();
        Some((b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask), bid, ask))
    }

    fn resting_value(&self) -> i128 {
        let Some(book) = self.get(esh4::INSTRUMENT_ID) else { return 0 };
        [Side::Bid, Side::Ask]
            .into_iter()
            .flat_map(|side| book.levels(side))
            .map(|l| l.price_e9 as i128 * l.size as i128)
            .sum()
    }
}

/// Checks the whole-capture book against the reference end state (data/README.md).
fn check_end_book(books: &impl BenchBooks, what: &str) {
    let end = &esh4::CHECKPOINTS[esh4::CHECKPOINTS.len() - 1];
    let (orders, bids, asks, bid, ask) = books.esh4().unwrap_or_else(|| panic!("{what}: no book for ESH4"));
    let (bid, ask) = (bid.expect("a best bid"), ask.expect("a best ask"));
    let got = (orders, bids, asks, (bid.price_e9, bid.size, bid.orders), (ask.price_e9, ask.size, ask.orders));
    let want = (end.orders, end.levels_bid, end.levels_ask, end.best_bid, end.best_ask);
    assert_eq!(got, want, "{what}: book differs from the reference end state");
}

/// Applies every record of `batch`; a refusal is a broken benchmark.
#[inline]
fn apply_all(books: &mut impl BenchBooks, batch: &[BookUpdate]) {
    for r in batch {
        if let Err(e) = books.apply(black_box(r)) {
            panic!("book_apply: {e}");
        }
    }
}

/// Times `timed` applied to `books`, then applies `undo` untimed; per criterion iteration.
fn bench_batch(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    books: &mut impl BenchBooks,
    timed: &[BookUpdate],
    undo: &[BookUpdate],
) {
    g.throughput(Throughput::Elements(timed.len() as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t0 = Instant::now();
                apply_all(books, timed);
                total += t0.elapsed();
                apply_all(books, undo);
            }
            total
        })
    });
    check_end_book(books, name);
}

fn order_count(books: &impl BenchBooks) -> usize {
    books.esh4().map_or(0, |b| b.0)
}

fn with_kind(r: &BookUpdate, kind: Kind, price_e9: i64, size: u32) -> BookUpdate {
    BookUpdate { kind: kind as u8, price_e9, size, ..*r }
}

/// The batches `book_apply` times, and their undos.
struct Batches {
    /// The capture's last live Adds of orders that are gone by the end, with their own ids, prices and sizes.
    adds: Vec<BookUpdate>,
    /// A full cancel of each of `adds`.
    add_undo: Vec<BookUpdate>,
    /// Every 10th resting order as the Add that would rebuild it: BOOK_BATCH spread over all levels.
    sample: Vec<BookUpdate>,
    /// All of each sampled order's size; the undo is `sample`.
    cancels: Vec<BookUpdate>,
    /// Each sampled order one tick away (same side and size), then back.
    modifies: Vec<BookUpdate>,
    /// Every trade and fill of the capture (they change counters only).
    trades: Vec<BookUpdate>,
    fills: Vec<BookUpdate>,
    clear: BookUpdate,
}

/// Each batch must change the book exactly as its records say, and its undo must bring back the reference book
/// (checked again after each benchmark). Modify is checked halfway: every sampled order one tick up.
fn check_batches(books: &mut impl BenchBooks, b: &Batches, which: &str) {
    check_end_book(books, &format!("{which}: pre-fill"));
    let (orders, value) = (order_count(books), books.resting_value());
    let value_of = |rs: &[BookUpdate]| rs.iter().map(|r| r.price_e9 as i128 * r.size as i128).sum::<i128>();
    let sizes = b.sample.iter().map(|r| r.size as i128).sum::<i128>();
    let (up, back) = b.modifies.split_at(BOOK_BATCH);
    for (what, timed, undo, orders_after, value_after) in [
        ("add", &b.adds[..], &b.add_undo[..], orders + BOOK_BATCH, value + value_of(&b.adds)),
        ("cancel", &b.cancels, &b.sample, orders - BOOK_BATCH, value - value_of(&b.sample)),
        ("modify", up, back, orders, value + TICK_E9 as i128 * sizes),
    ] {
        apply_all(books, timed);
        assert_eq!(
            (order_count(books), books.resting_value()),
            (orders_after, value_after),
            "{which} {what}: book after"
        );
        apply_all(books, undo);
        check_end_book(books, &format!("{which}: {what}"));
    }
    apply_all(books, &b.trades);
    apply_all(books, &b.fills);
    check_end_book(books, &format!("{which}: trades and fills"));
    let mut cleared = books.clone();
    apply_all(&mut cleared, &[b.clear]);
    assert_eq!((order_count(&cleared), cleared.resting_value()), (0, 0), "{which}: clear empties the book");
}

/// One clear of the full book, on a fresh copy each time. One clear takes microseconds, the untimed copy of the
/// book it needs far longer, and criterion sizes its warm-up and samples by the timed part: keep both short, or a
/// full run spends minutes copying books.
fn bench_clear<B: BenchBooks>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, books: &B, clear: BookUpdate) {
    g.throughput(Throughput::Elements(1));
    g.sampling_mode(SamplingMode::Flat).sample_size(20);
    g.warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    g.bench_function(name, |b| {
        b.iter_batched(
            || books.clone(),
            |mut full: B| {
                apply_all(&mut full, &[clear]);
                full // dropped untimed
            },
            BatchSize::PerIteration,
        )
    });
}

fn book_apply(c: &mut Criterion) {
    let cap = capture();
    let mut books = Books::new();
    apply_all(&mut books, &cap.records);
    let mut hot = HotBooks::with_capacity(HOT_CAPACITY);
    apply_all(&mut hot, &cap.records);

    let mut resting = Vec::new();
    books.get(esh4::INSTRUMENT_ID).expect("checked").snapshot_into(esh4::INSTRUMENT_ID, &mut resting);
    let resting = &resting[1..]; // [0] is the Clear
    let resting_ids: HashSet<u64> = resting.iter().map(|r| r.order_id).collect();
    let stride = resting.len() / BOOK_BATCH;
    let sample: Vec<BookUpdate> =
        resting.iter().step_by(stride).take(BOOK_BATCH).map(|r| BookUpdate { flags: 0, ..*r }).collect();
    assert_eq!(sample.len(), BOOK_BATCH);
    let cancels_of = |adds: &[BookUpdate]| -> Vec<BookUpdate> {
        adds.iter().map(|r| with_kind(r, Kind::Cancel, r.price_e9, r.size)).collect()
    };
    let mut seen = HashSet::new();
    let mut adds: Vec<BookUpdate> = live(cap)
        .iter()
        .rev()
        .filter(|r| r.kind() == Some(Kind::Add) && !resting_ids.contains(&r.order_id) && seen.insert(r.order_id))
        .take(BOOK_BATCH)
        .copied()
        .collect();
    adds.reverse();
    assert_eq!(adds.len(), BOOK_BATCH, "live adds of orders no longer resting");
    let of_kind =
        |k: Kind| -> Vec<BookUpdate> { cap.records.iter().filter(|r| r.kind() == Some(k)).copied().collect() };
    let (trades, fills) = (of_kind(Kind::Trade), of_kind(Kind::Fill));
    assert!(!trades.is_empty() && !fills.is_empty(), "the capture has trades and fills");
    let batches = Batches {
        add_undo: cancels_of(&adds),
        adds,
        cancels: cancels_of(&sample),
        modifies: sample
            .iter()
            .map(|r| with_kind(r, Kind::Modify, r.price_e9 + TICK_E9, r.size))
            .chain(sample.iter().map(|r| with_kind(r, Kind::Modify, r.price_e9, r.size)))
            .collect(),
        sample,
        trades,
        fills,
        clear: BookUpdate { instrument_id: esh4::INSTRUMENT_ID, ..BookUpdate::control(Kind::Clear) },
    };
    check_batches(&mut books, &batches, "Books");
    check_batches(&mut hot, &batches, "HotBooks");

    // Each kind on the reference `Books`, then the same records on `HotBooks` (`hot_`), side by side.
    let b = &batches;
    let mut g = c.benchmark_group("book_apply");
    for (name, timed, undo) in [
        ("add", &b.adds[..], &b.add_undo[..]),
        ("cancel", &b.cancels, &b.sample),
        ("modify", &b.modifies, &[]),
        ("trade", &b.trades, &[]),
        ("fill", &b.fills, &[]),
    ] {
        bench_batch(&mut g, name, &mut books, timed, undo);
        bench_batch(&mut g, &format!("hot_{name}"), &mut hot, timed, undo);
    }
    assert_eq!(hot.growths(), 0, "HotBooks grew: {HOT_CAPACITY:?} is too small for the benchmark");
    bench_clear(&mut g, "clear", &books, b.clear);
    bench_clear(&mut g, "hot_clear", &hot, b.clear);
    g.finish();
}

// ---------------------------------------------------------------------------------------------------------------
// ring

/// A ring pair in this process, under /dev/shm, its file unlinked at once.
fn ring_pair(slots: u32) -> (ShmLocalRing, ShmRemoteRing) {
    let dir = Path::new(DEFAULT_DIR);
    let (mut local, grant) =
        ShmLocalRing::create(dir, slots).unwrap_or_else(|e| panic!("ring of {slots} slots in {DEFAULT_DIR}: {e}"));
    let remote = ShmRemoteRing::attach(&grant, dir, Some(mdfan_fabric::shm::current_euid()))
        .unwrap_or_else(|e| panic!("attach: {e}"));
    local.unlink();
    (local, remote)
}

/// One record through the ring, as publisher and subscriber do it: write with the seq's immediate, reap the
/// completion (the ring rebuilds the seq), read the slot in place through it and check its seq, release. Returns
/// the record (a copy, for the checked lap).
#[inline]
fn round_trip(local: &mut ShmLocalRing, remote: &mut ShmRemoteRing, template: &BookUpdate, seq: u64) -> BookUpdate {
    let slots = remote.slot_count();
    let r = BookUpdate { seq, ..*template };
    if let Err(e) = remote.write_with_imm(slot_index(seq, slots), &r, imm_from_seq(seq)) {
        panic!("ring: write of seq {seq}: {e}");
    }
    let Some(c) = local.poll_cq() else { panic!("ring: no completion for seq {seq}") };
    let got = c.seq();
    let Some(slot) = c.record() else { panic!("ring: the completion of seq {got} has no record") };
    if slot.seq != seq || got != seq {
        panic!("ring: slot holds seq {}, completion named {got}, {seq} was written", slot.seq);
    }
    let copy = *black_box(slot);
    local.release(got);
    copy
}

fn ring(c: &mut Criterion) {
    let template = live(capture())[0];
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    for slots in [64u32, 131_072] {
        let (mut local, mut remote) = ring_pair(slots);
        assert_eq!(local.peer_state(), PeerState::Attached);
        // One full lap, checked: it also faults every page in before timing.
        for seq in 1..=slots as u64 {
            assert_eq!(round_trip(&mut local, &mut remote, &template, seq), BookUpdate { seq, ..template });
            assert_eq!(remote.consumed_seq(), seq);
        }
        assert!(local.poll_cq().is_none(), "one completion per write");
        let mut seq = slots as u64;
        g.bench_with_input(BenchmarkId::new("write_poll_read_release", slots), &slots, |b, _| {
            b.iter(|| {
                seq += 1;
                round_trip(&mut local, &mut remote, &template, seq);
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------------------------
// dbn

/// The `dbn` crate's decoder alone over the decompressed stream: each record viewed as an `MboMsg`.
fn dbn_decode(raw: &[u8]) -> u64 {
    let mut decoder = DbnDecoder::with_upgrade_policy(raw, VersionUpgradePolicy::AsIs).expect("DBN metadata");
    let mut n = 0;
    while let Some(rec) = decoder.decode_record_ref().expect("a DBN record") {
        if let Some(m) = rec.get::<MboMsg>() {
            black_box(m);
            n += 1;
        }
    }
    n
}

fn dbn(c: &mut Criterion) {
    let cap = capture();
    assert_eq!(dbn_decode(&cap.raw), esh4::RECORDS, "dbn decode: record count");
    let file = decode_mbo_bytes(&cap.path, &cap.raw).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(file.records.len() as u64, esh4::RECORDS, "decode_mbo_bytes: record count");
    let last = normalize_mbo(file.records.last().expect("records")).expect("a valid record");
    assert_eq!((last.ts_recv_ns, last.ts_event_ns), (esh4::LAST_TS_RECV_NS, esh4::LAST_TS_EVENT_NS));
    drop(file);
    assert_eq!(cap.msgs.iter().filter(|m| normalize_mbo(m).is_ok()).count() as u64, esh4::RECORDS);

    let mut g = c.benchmark_group("dbn");
    // Milliseconds per iteration: flat sampling, fewer samples (criterion's advice for long routines).
    g.sampling_mode(SamplingMode::Flat).sample_size(20);
    g.throughput(Throughput::Elements(esh4::RECORDS));
    g.bench_function("decode", |b| b.iter(|| dbn_decode(black_box(&cap.raw))));
    g.bench_function("decode_mbo_bytes", |b| {
        b.iter(|| decode_mbo_bytes(&cap.path, black_box(&cap.raw)).map(|f| f.records.len()))
    });
    g.bench_function("normalize", |b| {
        b.iter(|| {
            let mut size = 0u64;
            for m in black_box(&cap.msgs) {
                if let Ok(r) = normalize_mbo(m) {
                    size += black_box(r).size as u64;
                }
            }
            size
        })
    });
    g.finish();
}

/// MDP 3.0 decode + normalise into the journal's stand-in against the reference (`sbe_gen` views reading the same
/// fields), per packet of line A.
fn mdp3(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(mdp3::CAPTURE);
    let packets = mdp3::line_a(&path).unwrap_or_else(|e| panic!("{e}"));
    // checked before timing: the reference reads every message and entry, the decoder gives every record
    let mut entries = mdp3::EntryRing::default();
    mdp3::reference_checked(&packets, &mut entries).unwrap_or_else(|e| panic!("{e}"));
    let mut ring = mdp3::Ring::default();
    assert_eq!(mdp3::decode(&mut mdp3::channel(), &packets, &mut ring), mdp3::RECORDS);
    let mut g = c.benchmark_group("mdp3");
    g.throughput(Throughput::Elements(packets.len() as u64));
    g.bench_function("reference_sbe", |b| {
        b.iter(|| mdp3::reference(black_box(&packets), &mut entries).map(|c| c.entries))
    });
    g.bench_function("decode_normalize", |b| {
        b.iter_batched(
            mdp3::channel,
            |mut ch| {
                let n = mdp3::decode(&mut ch, black_box(&packets), &mut ring);
                (ch, n) // dropped untimed
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// ITCH 5.0: mdfan's decode + normalise (through `ItchFile`, as the publisher) against `itch5` + a `HashMap` order
/// table and `itch5`'s parse alone, per message of the bundled snippet and of a synthetic day over a million live
/// orders (100,000 messages after the build-up here; `mdfan-bench run` times a million).
fn itch(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(itch::SNIPPET);
    let inputs = [itch::Input::snippet(&path).unwrap_or_else(|e| panic!("{e}")), itch::synthetic(100_000, 7)];
    let mut bench = itch::Bench::default();
    let mut g = c.benchmark_group("itch");
    for input in &inputs {
        if input.name == "synthetic" {
            g.sample_size(10);
        }
        g.throughput(Throughput::Elements(input.messages));
        for d in itch::Decoder::ALL {
            // checked before timing: every pass checks its count against the input's (records, answers, messages)
            g.bench_function(BenchmarkId::new(d.arg(), input.name), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        bench.prepare(d, input).unwrap_or_else(|e| panic!("{e}")); // untimed: tables emptied, build-up played
                        let t = Instant::now();
                        bench.run(d, input).unwrap_or_else(|e| panic!("{e}"));
                        total += t.elapsed();
                    }
                    total
                })
            });
        }
    }
    // The live path's framing (MoldUDP64 packets of the synthetic day), without and with the packet's prefetch:
    // what `ItchNormalizer::prefetch_packet` gives a live feed handler.
    let synthetic = &inputs[1];
    let packets = itch::mold_packets(&synthetic.timed);
    for prefetch in [false, true] {
        let name = if prefetch { "mold_packets_prefetch" } else { "mold_packets" };
        let (mut norm, mut ring) = (itch::normalizer(), mdp3::Ring::default());
        g.bench_function(BenchmarkId::new(name, synthetic.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // untimed: the table emptied and the build-up played, as for `mdfan/synthetic`
                    itch::reset(&mut norm);
                    let mut file = itch::itch_file();
                    itch::mdfan_pass(&mut file, &mut norm, &synthetic.build_up, &mut ring)
                        .unwrap_or_else(|e| panic!("{e}"));
                    let t = Instant::now();
                    let n = itch::mold_pass(&mut norm, black_box(&packets), &mut ring, prefetch)
                        .unwrap_or_else(|e| panic!("{e}"));
                    total += t.elapsed();
                    // checked: the same records as through the file
                    assert_eq!(n, synthetic.records, "{name}");
                }
                total
            })
        });
    }
    g.finish();
}

/// The realtime clock on the subscriber's poll path (wire-to-poll): vDSO `clock_gettime` against the TSC alone
/// and the TSC anchored to realtime.
fn wire_clock(c: &mut Criterion) {
    let tsc = quanta::Clock::new();
    let mut anchored = mdfan_subscriber::latency::RealtimeClock::new(tsc.clone());
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    // checked before timing: the anchored clock reads realtime (within 1 ms, far above its error)
    let (a, b) = (anchored.realtime_ns(), now());
    assert!(a.abs_diff(b) < 1_000_000, "anchored {a} vs SystemTime {b}");
    let mut g = c.benchmark_group("wire_clock");
    g.throughput(Throughput::Elements(1));
    g.bench_function("system_time_now", |b| b.iter(|| black_box(now())));
    g.bench_function("tsc_raw", |b| b.iter(|| black_box(tsc.raw())));
    g.bench_function("anchored_realtime", |b| b.iter(|| black_box(anchored.realtime_ns())));
    g.finish();
}

// ---------------------------------------------------------------------------------------------------------------
// pair_merge

/// The hot-hot pair's merge (`mdfan_subscriber::pair::Merge`) per record, against one leg's records handed
/// straight to the strategy's callback (what a single-leg subscriber's poll does past the ring): ESH4's live
/// records (after its opening venue snapshot, whose DBN `sequence`s are not in order) on two legs, leg A's copy
/// then leg B's (the second compared with the first and dropped). Issue 28's
/// target: the merge costs at most 10 ns per record over the single leg. A fresh merge per batch (made untimed;
/// the first touch of its tables is timed: `mdfan-bench plant --parts merge` gives the steady state).
fn pair_merge(c: &mut Criterion) {
    use mdfan_subscriber::pair::Merge;
    use mdfan_subscriber::Event;
    // each leg's stream as its subscriber gets it: seq from 1, the venue position a publisher gives each record
    // (DBN `sequence`, the index among the consecutive records of one `sequence`: wire::record, "Venue position")
    let (cap, skip) = (capture(), esh4::SNAPSHOT_RECORDS as usize);
    let mut run = mdfan_wire::VenueRun::default();
    let src: &[BookUpdate] = &cap.records[skip..]
        .iter()
        .zip(&cap.msgs[skip..])
        .enumerate()
        .map(|(i, (r, m))| BookUpdate { seq: i as u64 + 1, venue_pos: run.position(u64::from(m.sequence)), ..*r })
        .collect::<Vec<_>>();
    let sum = |m: &mut Merge| {
        let mut size = 0u64;
        for r in src {
            for leg in 0..2 {
                m.on_event(leg, Event::Record(black_box(r)), &mut |e| {
                    if let Event::Record(x) = e {
                        size += u64::from(x.size);
                    }
                });
            }
        }
        size
    };
    // checked before timing: every record once, from leg A, the copies of leg B all compared duplicates
    let want: u64 = src.iter().map(|r| u64::from(r.size)).sum();
    let mut m = Merge::new();
    assert_eq!(sum(&mut m), want, "every record once");
    let (stats, b) = (m.stats(), m.leg_stats(1));
    assert_eq!((stats.records, stats.gaps, b.duplicates, b.divergences), (src.len() as u64, 0, src.len() as u64, 0));
    let mut g = c.benchmark_group("pair_merge");
    g.throughput(Throughput::Elements(src.len() as u64));
    g.sample_size(10);
    g.bench_function("one_leg", |b| {
        b.iter(|| {
            let mut size = 0u64;
            let mut f = |e: Event<'_>| {
                if let Event::Record(x) = e {
                    size += u64::from(x.size);
                }
            };
            for r in src {
                f(Event::Record(black_box(r)));
            }
            assert_eq!(size, want);
        })
    });
    g.bench_function("two_legs_merged", |b| {
        b.iter_batched(Merge::new, |mut m| assert_eq!(sum(&mut m), want), BatchSize::LargeInput)
    });
    g.finish();
}

criterion_group!(benches, record, book_apply, ring, dbn, mdp3, itch, wire_clock, pair_merge);
criterion_main!(benches);
