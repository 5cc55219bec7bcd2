//! The hot-path book (`HotBooks`) against the reference book (`Books`) on the bundled ESH4 capture, after every
//! record: the capture as it is (and every reference value of data/README.md on the hot book), the capture with
//! `Clear` records and snapshots injected as a venue's recovery sends them (ESM4-style), and the capture with
//! orders replaced by a cancel of the whole old order and an add under a new order_id (ARL-style replace pairs,
//! as an ITCH 'U' replace is normalised). Both books get every record; they must return the same result (the same
//! `BookError` for a refused record) and hold the same book after it.

#[path = "support/esh4.rs"]
mod esh4;

use std::collections::HashMap;

use mdfan_feed::dbn::{load_mbo_file, normalize_mbo};
use mdfan_wire::{flags, BookCapacity, BookUpdate, Books, HotBook, HotBooks, Kind, Level, Side};

/// Sized for ESH4 (which peaks at 11,237 orders, 928 bid and 575 ask levels), a few instruments.
const ESH4_CAPACITY: BookCapacity = BookCapacity::new(16_384, 2_048, 4);
/// ES's tick, 0.25 in units of 1e-9.
const TICK_E9: i64 = 250_000_000;
/// Levels compared on every record (with the level counts, BBO, order count and `last_*`); all of them every
/// `FULL_EVERY` records, after every injected clear and snapshot, and at the end. (All levels after every record
/// takes 40 s in a debug build; wire/tests/hot_book_props.rs compares all levels after every random record.)
const TOP: usize = 10;
const FULL_EVERY: usize = 25;

fn esh4_records() -> Vec<BookUpdate> {
    let file = load_mbo_file(&esh4::main_file()).expect("bundled file loads");
    let records: Vec<BookUpdate> = file.records.iter().map(|m| normalize_mbo(m).expect("a valid record")).collect();
    assert_eq!(records.len() as u64, esh4::RECORDS);
    records
}

fn lvl((price_e9, size, orders): (i64, u64, u32)) -> Level {
    Level { price_e9, size, orders }
}

/// One book against the reference: `depth` levels per side (all with `usize::MAX`), counts, BBO, `last_*`.
fn assert_book(hot: &HotBook, reference: &mdfan_wire::Book, depth: usize, what: &dyn std::fmt::Display) {
    for side in [Side::Bid, Side::Ask] {
        assert_eq!(hot.level_count(side), reference.level_count(side), "{what}: {side:?} level count");
        let want = reference.top(side, depth);
        assert!(hot.levels(side).take(depth).eq(want.iter().copied()), "{what}: {side:?} levels to depth {depth}");
    }
    assert_eq!(hot.bbo(), reference.bbo(), "{what}: bbo");
    assert_eq!(hot.order_count(), reference.order_count(), "{what}: resting orders");
    assert_eq!(
        (hot.last_venue_seq, hot.last_ts_recv_ns, hot.last_ts_event_ns, hot.records),
        (reference.last_venue_seq, reference.last_ts_recv_ns, reference.last_ts_event_ns, reference.records),
        "{what}: last venue_seq, ts_recv, ts_event, records"
    );
}

/// Every instrument of both.
fn assert_books(hot: &HotBooks, reference: &Books, depth: usize, what: &dyn std::fmt::Display) {
    let mut ids: Vec<u32> = hot.iter().map(|(id, _)| id).collect();
    ids.sort_unstable();
    let want: Vec<u32> = reference.iter_sorted().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, want, "{what}: instruments");
    for id in want {
        assert_book(hot.get(id).expect("hot book"), reference.get(id).expect("reference book"), depth, what);
    }
}

/// Applies `records` to the reference and to each hot book, checking after every record (top `TOP` levels, all
/// levels every `FULL_EVERY` records, after each record `full_after` says so, and at the end). Returns how many
/// records the books refused.
fn replay_and_compare(
    records: &[BookUpdate],
    reference: &mut Books,
    hot: &mut [&mut HotBooks],
    full_after: impl Fn(usize, &BookUpdate) -> bool,
) -> usize {
    let mut refused = 0;
    for (i, r) in records.iter().enumerate() {
        let want = reference.apply(r);
        refused += want.is_err() as usize;
        let depth =
            if (i + 1) % FULL_EVERY == 0 || i + 1 == records.len() || full_after(i, r) { usize::MAX } else { TOP };
        for (n, h) in hot.iter_mut().enumerate() {
            let what =
                format!("hot book {n}, record {} of {} ({:?} order_id {})", i + 1, records.len(), r.kind(), r.order_id);
            assert_eq!(h.apply(r), want, "{what}: result");
            assert_books(h, reference, depth, &what);
        }
    }
    refused
}

#[test]
fn hot_books_equal_the_reference_after_every_record_of_esh4_and_meet_every_checkpoint() {
    let records = esh4_records();
    let mut reference = Books::new();
    let mut sized = HotBooks::with_capacity(ESH4_CAPACITY);
    // Far too small: grows (allocating) all the way, and must stay exact.
    let mut tiny = HotBooks::with_capacity(BookCapacity::new(1, 1, 0));
    let mut checkpoints = esh4::CHECKPOINTS.iter().peekable();
    for (i, r) in records.iter().enumerate() {
        let want = reference.apply(r);
        assert!(want.is_ok(), "record {}: {want:?}", i + 1);
        let what = format!("record {} ({:?} order_id {})", i + 1, r.kind(), r.order_id);
        assert_eq!(sized.apply(r), want, "{what}");
        assert_eq!(tiny.apply(r), want, "{what}");
        let depth = if (i + 1) % FULL_EVERY == 0 { usize::MAX } else { TOP };
        assert_books(&sized, &reference, depth, &what);
        assert_books(&tiny, &reference, depth, &what);
        if let Some(cp) = checkpoints.next_if(|cp| cp.after_record == i as u64 + 1) {
            let b = sized.get(esh4::INSTRUMENT_ID).expect("ESH4's book");
            let n = cp.after_record;
            assert_eq!(b.last_venue_seq, cp.venue_seq, "venue_seq after record {n}");
            assert_eq!(b.order_count(), cp.orders, "orders after record {n}");
            assert_eq!(b.level_count(Side::Bid), cp.levels_bid, "bid levels after record {n}");
            assert_eq!(b.level_count(Side::Ask), cp.levels_ask, "ask levels after record {n}");
            assert_eq!(b.bbo(), (Some(lvl(cp.best_bid)), Some(lvl(cp.best_ask))), "bbo after record {n}");
        }
    }
    assert!(checkpoints.next().is_none(), "every checkpoint was reached");
    assert_books(&sized, &reference, usize::MAX, &"the end");
    assert_books(&tiny, &reference, usize::MAX, &"the end");
    let b = sized.get(esh4::INSTRUMENT_ID).unwrap();
    let mut top = [Level::default(); 10];
    assert_eq!(b.top_into(Side::Bid, &mut top), 10);
    assert_eq!(top, esh4::TOP_BIDS.map(lvl));
    assert_eq!(b.top_into(Side::Ask, &mut top), 10);
    assert_eq!(top, esh4::TOP_ASKS.map(lvl));
    assert_eq!((b.last_ts_recv_ns, b.last_ts_event_ns), (esh4::LAST_TS_RECV_NS, esh4::LAST_TS_EVENT_NS));
    assert_eq!(b.records, esh4::RECORDS);
    assert_eq!(sized.len(), 1, "one instrument only");
    assert_eq!(sized.growths(), 0, "sized for ESH4: nothing grew");
    assert!(tiny.growths() > 10, "the tiny books grew: {}", tiny.growths());
}

/// The capture with clears and snapshots injected after some of its records, as a venue's recovery sends them
/// (CME's MBO for ESM4 carries `R` clear records; each is followed by the book rebuilt from a snapshot). `truth`
/// replays the capture alone and provides the snapshots, so a bare clear (whose later cancels the books must
/// refuse) is repaired by the next snapshot.
fn with_clears(records: &[BookUpdate]) -> Vec<BookUpdate> {
    let id = esh4::INSTRUMENT_ID;
    let clear = |instrument_id: u32, like: &BookUpdate| BookUpdate {
        instrument_id,
        venue_pos: mdfan_wire::venue_position(like.venue_seq(), 0),
        ts_recv_ns: like.ts_recv_ns,
        ts_event_ns: like.ts_event_ns,
        flags: flags::LAST | flags::MAYBE_BAD_BOOK,
        ..BookUpdate::control(Kind::Clear)
    };
    let mut truth = Books::new();
    let mut out = Vec::with_capacity(records.len() * 3);
    // A clear as the very first record: it makes an empty book.
    out.push(clear(id, &records[0]));
    for (i, r) in records.iter().enumerate() {
        out.push(*r);
        truth.apply(r).expect("the capture applies");
        let n = i + 1;
        match n {
            // Mid-snapshot: a bare clear. The rest of the snapshot rests; the live stream's cancels of the
            // cleared orders are refused until the snapshot after record 8,725.
            4_000 => out.push(clear(id, r)),
            // End of the start-of-day snapshot: a full snapshot (SnapshotBegin drops every book).
            8_725 | 35_000 => out.extend(truth.snapshot(None, n as u64)),
            // The ESM4 pattern: Clear, then the instrument's resting orders as Adds (a Clear first, from the
            // snapshot), all flagged SNAPSHOT, the last LAST.
            20_000 => truth.get(id).expect("ESH4's book").snapshot_into(id, &mut out),
            // A bare clear of ESH4, a clear and a trade of instruments never seen (each makes an empty book).
            30_000 => {
                out.push(clear(id, r));
                out.push(clear(999, r));
                out.push(BookUpdate { instrument_id: 998, ..*r });
            }
            // Two clears in a row, then the rebuild.
            50_000 => {
                out.push(clear(id, r));
                out.push(clear(id, r));
                truth.get(id).expect("ESH4's book").snapshot_into(id, &mut out);
            }
            // A clear right after the last record.
            68_792 => out.push(clear(id, r)),
            _ => {}
        }
    }
    out
}

#[test]
fn hot_books_equal_the_reference_after_every_record_with_clears_and_snapshots_injected() {
    let records = esh4_records();
    let stream = with_clears(&records);
    assert!(stream.len() > records.len() + 4 * 9_000, "{} records", stream.len());
    let mut reference = Books::new();
    let mut sized = HotBooks::with_capacity(ESH4_CAPACITY);
    let refused = replay_and_compare(&stream, &mut reference, &mut [&mut sized], |_, r| {
        matches!(r.kind(), Some(Kind::Clear | Kind::SnapshotBegin | Kind::SnapshotEnd))
            || r.is_last() && r.flags & flags::SNAPSHOT != 0
    });
    // The bare clears made the books refuse the cancels of orders they no longer knew.
    assert!(refused > 100, "{refused} records refused");
    // Every rebuild restored the capture's book: the last record's state is the reference end state, and the
    // final clear emptied it.
    let b = sized.get(esh4::INSTRUMENT_ID).unwrap();
    assert_eq!((b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask)), (0, 0, 0));
    assert_eq!(b.last_venue_seq, esh4::CHECKPOINTS[4].venue_seq);
    assert_eq!(sized.len(), 1, "the snapshot after record 35,000 dropped instruments 998 and 999");
    assert_eq!(sized.growths(), 0);
}

#[test]
fn the_book_rebuilt_from_injected_snapshots_is_the_capture_s_own() {
    // The same stream without its final clear: the end state is data/README.md's.
    let records = esh4_records();
    let mut stream = with_clears(&records);
    assert_eq!(stream.pop().and_then(|r| r.kind()), Some(Kind::Clear));
    let mut hot = HotBooks::with_capacity(ESH4_CAPACITY);
    for r in &stream {
        let _ = hot.apply(r);
    }
    let b = hot.get(esh4::INSTRUMENT_ID).unwrap();
    let end = &esh4::CHECKPOINTS[4];
    assert_eq!(
        (b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask)),
        (end.orders, end.levels_bid, end.levels_ask)
    );
    assert_eq!(b.bbo(), (Some(lvl(end.best_bid)), Some(lvl(end.best_ask))));
    assert!(b.levels(Side::Bid).take(10).eq(esh4::TOP_BIDS.map(lvl)));
    assert!(b.levels(Side::Ask).take(10).eq(esh4::TOP_ASKS.map(lvl)));
}

/// The capture with resting orders replaced, ARL-style: a `Cancel` of the whole old order, then an `Add` under
/// a new order_id at a price up to a tick away and a size the same or one larger (one venue event: only the
/// `Add` is flagged LAST), as ITCH's 'U' (replace) is normalised. Later records of the old order name the new
/// one, as the venue's would. Orders are chosen at every `EVERY`th record among those the capture added
/// earlier that still rest, tracked here independently of both books. Returns the stream and the pairs.
fn with_replace_pairs(records: &[BookUpdate]) -> (Vec<BookUpdate>, usize) {
    const EVERY: usize = 23;
    // What rests, by current order_id: (side, price_e9, size).
    let mut resting: HashMap<u64, (u8, i64, u32)> = HashMap::new();
    // The capture's order_id → its current id after replaces.
    let mut renamed: HashMap<u64, u64> = HashMap::new();
    let mut added: Vec<u64> = Vec::new();
    let mut out = Vec::with_capacity(records.len() * 2);
    let mut pairs = 0usize;
    let mut next_id = 1u64 << 62;
    for (i, r) in records.iter().enumerate() {
        let r = BookUpdate { order_id: renamed.get(&r.order_id).copied().unwrap_or(r.order_id), ..*r };
        out.push(r);
        match r.kind() {
            Some(Kind::Add) => {
                resting.insert(r.order_id, (r.side, r.price_e9, r.size));
                added.push(r.order_id);
            }
            Some(Kind::Modify) => {
                resting.insert(r.order_id, (r.side, r.price_e9, r.size));
            }
            Some(Kind::Cancel) => {
                let left = resting.get(&r.order_id).expect("the capture cancels what rests").2 - r.size;
                if left == 0 {
                    resting.remove(&r.order_id);
                } else {
                    resting.get_mut(&r.order_id).unwrap().2 = left;
                }
            }
            Some(Kind::Clear) => resting.clear(),
            _ => {}
        }
        if i % EVERY != 0 || added.is_empty() {
            continue;
        }
        // An order the capture added earlier, spread over its whole history (young and old orders).
        let original = added[(i.wrapping_mul(7_919)) % added.len()];
        let current = renamed.get(&original).copied().unwrap_or(original);
        let Some(&(side, price_e9, size)) = resting.get(&current) else { continue };
        let new_id = next_id;
        next_id += 1;
        let (new_price, new_size) = (price_e9 + TICK_E9 * (pairs % 3) as i64 - TICK_E9, size + (pairs % 2) as u32);
        let base = BookUpdate { flags: 0, ..r };
        out.push(BookUpdate { kind: Kind::Cancel as u8, side, order_id: current, price_e9, size, ..base });
        out.push(BookUpdate {
            kind: Kind::Add as u8,
            side,
            order_id: new_id,
            price_e9: new_price,
            size: new_size,
            flags: flags::LAST,
            ..base
        });
        resting.remove(&current);
        resting.insert(new_id, (side, new_price, new_size));
        renamed.insert(original, new_id);
        pairs += 1;
    }
    (out, pairs)
}

#[test]
fn hot_books_equal_the_reference_after_every_record_with_arl_style_replace_pairs() {
    let records = esh4_records();
    let (stream, pairs) = with_replace_pairs(&records);
    assert!(pairs > 1_500, "{pairs} replace pairs");
    let mut reference = Books::new();
    let mut sized = HotBooks::with_capacity(ESH4_CAPACITY);
    let refused = replay_and_compare(&stream, &mut reference, &mut [&mut sized], |_, _| false);
    assert_eq!(refused, 0, "every replace names a resting order and every later record its new id");
    assert_eq!(sized.growths(), 0);
    // Some replaced orders were still resting at the end, under their new ids.
    let b = sized.get(esh4::INSTRUMENT_ID).unwrap();
    let renamed_resting = b.orders().filter(|(id, _)| *id >= 1 << 62).count();
    assert!(renamed_resting > 100, "{renamed_resting} replaced orders rest at the end");
    assert_eq!(b.order_count(), reference.get(esh4::INSTRUMENT_ID).unwrap().order_count());
}
