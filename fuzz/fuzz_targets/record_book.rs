//! Book replay of untrusted records: the input is a sequence of 64-byte `BookUpdate`s (a trailing partial
//! record is ignored), applied one by one to `Books`. A record may be refused (`BookError`), never panic.
//! Every `SNAPSHOT_EVERY` records and at the end, the books' snapshot is applied to fresh `Books` and to a copy
//! of the live ones holding other state: both must accept every snapshot record and end with the same
//! instruments, the same top 10 levels per side, level counts and resting-order counts as the live books.
//! A filtered snapshot (one instrument) is checked the same way.
//!
//! Every record also goes to a `HotBooks` sized far too small (so it grows): it must return the same result (the
//! same `BookError`) and hold the same instruments, counts, BBO and `last_*` as `Books` after every record, and
//! the same levels (all of them) every `SNAPSHOT_EVERY` records and at the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_wire::record::RECORD_SIZE_BYTES;
use mdfan_wire::{BookCapacity, BookUpdate, Books, HotBooks, Kind, Side};

const SNAPSHOT_EVERY: usize = 8;
const TOP: usize = 10;

fn apply_snapshot(into: &mut Books, snap: &[BookUpdate]) {
    for (i, r) in snap.iter().enumerate() {
        if let Err(e) = into.apply(r) {
            panic!("snapshot record {i} of {} refused: {e}; record {r:?}", snap.len());
        }
    }
}

/// `rebuilt` must hold exactly the instruments in `ids` (all of `live`'s when `None`), each equal to `live`'s.
fn assert_same(live: &Books, rebuilt: &Books, ids: Option<&[u32]>, what: &str) {
    let want: Vec<u32> = match ids {
        Some(ids) => ids.to_vec(),
        None => live.iter_sorted().into_iter().map(|(id, _)| id).collect(),
    };
    let got: Vec<u32> = rebuilt.iter_sorted().into_iter().map(|(id, _)| id).collect();
    assert_eq!(got, want, "{what}: instruments differ");
    for id in want {
        let (a, b) = (live.get(id).expect("live book"), rebuilt.get(id).expect("rebuilt book"));
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(a.top(side, TOP), b.top(side, TOP), "{what}: instrument {id} {side:?} top {TOP} differ");
            assert_eq!(a.level_count(side), b.level_count(side), "{what}: instrument {id} {side:?} level count");
        }
        assert_eq!(a.order_count(), b.order_count(), "{what}: instrument {id} order count differs");
    }
}

fn check_snapshot(books: &Books, position: u64) {
    let snap = books.snapshot(None, position);
    assert_eq!(snap.first().and_then(|r| r.kind()), Some(Kind::SnapshotBegin));
    assert_eq!(snap.last().and_then(|r| r.kind()), Some(Kind::SnapshotEnd));

    let mut fresh = Books::new();
    apply_snapshot(&mut fresh, &snap);
    assert_same(books, &fresh, None, "snapshot into fresh books");

    // A subscriber that resyncs applies the snapshot over whatever it held: SnapshotBegin must wipe it.
    let mut stale = books.clone();
    stale.apply(&BookUpdate { instrument_id: u32::MAX, ..BookUpdate::control(Kind::Clear) }).ok();
    apply_snapshot(&mut stale, &snap);
    assert_same(books, &stale, None, "snapshot over stale books");

    // A subscriber that asked for one instrument.
    if let Some(&(id, _)) = books.iter_sorted().first() {
        let filter = [id];
        let mut one = Books::new();
        apply_snapshot(&mut one, &books.snapshot(Some(&filter), position));
        assert_same(books, &one, Some(&filter), "filtered snapshot");
    }
}

/// The hot-path book must equal the reference: instruments, counts, BBO and `last_*` (after every record), and
/// every level of both sides when `all_levels` (every `SNAPSHOT_EVERY` records and at the end).
fn assert_hot_same(books: &Books, hot: &HotBooks, record: usize, all_levels: bool) {
    assert_eq!(hot.len(), books.iter_sorted().len(), "after record {record}: HotBooks instrument count differs");
    for (id, a) in books.iter_sorted() {
        let b = hot.get(id).unwrap_or_else(|| panic!("after record {record}: no HotBooks book for {id}"));
        for side in [Side::Bid, Side::Ask, Side::None] {
            assert_eq!(a.level_count(side), b.level_count(side), "after record {record}: {id} {side:?} level count");
            if all_levels {
                assert!(b.levels(side).eq(a.top(side, usize::MAX)), "after record {record}: {id} {side:?} levels");
            }
        }
        assert_eq!(a.bbo(), b.bbo(), "after record {record}: {id} bbo");
        assert_eq!(a.order_count(), b.order_count(), "after record {record}: {id} order count");
        assert_eq!(
            (a.last_venue_seq, a.last_ts_recv_ns, a.last_ts_event_ns, a.records),
            (b.last_venue_seq, b.last_ts_recv_ns, b.last_ts_event_ns, b.records),
            "after record {record}: {id} last_* and records"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut books = Books::new();
    let mut hot = HotBooks::with_capacity(BookCapacity::new(2, 1, 1));
    let mut applied = 0usize;
    for chunk in data.chunks_exact(RECORD_SIZE_BYTES) {
        let bytes: &[u8; RECORD_SIZE_BYTES] = chunk.try_into().expect("chunks_exact gives 64 bytes");
        let r = BookUpdate::from_bytes(bytes);
        let result = books.apply(&r); // refusals are fine
        assert_eq!(hot.apply(&r), result, "record {applied}: HotBooks and Books disagree on {r:?}");
        applied += 1;
        let every = applied.is_multiple_of(SNAPSHOT_EVERY);
        assert_hot_same(&books, &hot, applied, every);
        if every {
            check_snapshot(&books, applied as u64);
        }
    }
    assert_hot_same(&books, &hot, applied, true);
    check_snapshot(&books, applied as u64);
});
