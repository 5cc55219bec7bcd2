//! `HotBooks` against the reference `Books` on random records over a few instruments, order ids and prices:
//! adds, cancels, modifies, clears, trades, fills, snapshot markers, heartbeats, and records the books must refuse
//! (unknown and duplicate orders, cancels too large, bad sides, bad kinds). After every record both give the
//! same result (the same `BookError`) and hold the same books: instruments, every level of both sides, counts,
//! BBO, `last_*`, `records`, and the resting orders themselves. One `HotBooks` is sized far too small (it must
//! grow and stay exact), one is sized for the test (it must never grow).

use mdfan_wire::{BookCapacity, BookUpdate, Books, HotBooks, Kind, Side};
use proptest::prelude::*;

const PX: i64 = 250_000_000;

fn kind_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        30 => Just(Kind::Add as u8),
        25 => Just(Kind::Cancel as u8),
        20 => Just(Kind::Modify as u8),
        3 => Just(Kind::Clear as u8),
        3 => Just(Kind::Trade as u8),
        3 => Just(Kind::Fill as u8),
        1 => Just(Kind::SnapshotBegin as u8),
        1 => prop_oneof![Just(Kind::SnapshotEnd as u8), Just(Kind::Heartbeat as u8), Just(Kind::EndOfStream as u8)],
        1 => prop_oneof![Just(0u8), Just(11u8), Just(255u8)],
    ]
}

fn side_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        20 => Just(b'B'),
        20 => Just(b'A'),
        1 => Just(b'N'),
        1 => Just(b'x'),
    ]
}

fn price() -> impl Strategy<Value = i64> {
    prop_oneof![
        30 => (4_790i64..4_800).prop_map(|p| p * 4 * PX),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(0i64),
    ]
}

fn record() -> impl Strategy<Value = BookUpdate> {
    (kind_byte(), side_byte(), 0u64..12, price(), 0u32..6, 1u32..=3).prop_map(
        |(kind, side, order_id, price_e9, size, instrument_id)| BookUpdate {
            kind,
            side,
            order_id,
            price_e9,
            size,
            instrument_id,
            ..BookUpdate::control(Kind::Add)
        },
    )
}

/// Everything both kinds of books show must be equal.
fn assert_same(hot: &HotBooks, reference: &Books, what: &str) {
    let mut ids: Vec<u32> = hot.iter().map(|(id, _)| id).collect();
    ids.sort_unstable();
    let want: Vec<u32> = reference.iter_sorted().into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, want, "{what}: instruments");
    assert_eq!(hot.len(), want.len());
    for id in want {
        let (h, r) = (hot.get(id).expect("hot book"), reference.get(id).expect("reference book"));
        for side in [Side::Bid, Side::Ask, Side::None] {
            assert_eq!(h.levels(side).collect::<Vec<_>>(), r.top(side, usize::MAX), "{what}: {id} {side:?}");
            assert_eq!(h.level_count(side), r.level_count(side), "{what}: {id} {side:?} count");
        }
        assert_eq!(h.bbo(), r.bbo(), "{what}: {id} bbo");
        assert_eq!(h.order_count(), r.order_count(), "{what}: {id} orders");
        assert_eq!(
            (h.last_venue_seq, h.last_ts_recv_ns, h.last_ts_event_ns, h.records),
            (r.last_venue_seq, r.last_ts_recv_ns, r.last_ts_event_ns, r.records),
            "{what}: {id} last_* and records"
        );
        // The resting orders themselves, through the reference's snapshot (one Add per order).
        let mut snap = Vec::new();
        r.snapshot_into(id, &mut snap);
        let mut want: Vec<(u64, u8, i64, u32)> =
            snap[1..].iter().map(|a| (a.order_id, a.side, a.price_e9, a.size)).collect();
        let mut got: Vec<(u64, u8, i64, u32)> =
            h.orders().map(|(oid, o)| (oid, o.side as u8, o.price_e9, o.size)).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{what}: {id} resting orders");
        for (oid, side, price_e9, size) in want {
            let o = h.order(oid).expect("a resting order");
            assert_eq!((o.side as u8, o.price_e9, o.size), (side, price_e9, size));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn hot_books_equal_the_reference_after_every_record(records in prop::collection::vec(record(), 0..400)) {
        let mut reference = Books::new();
        let mut tiny = HotBooks::with_capacity(BookCapacity::new(1, 1, 1));
        let mut sized = HotBooks::with_capacity(BookCapacity::new(12, 16, 3));
        for (i, r) in records.iter().enumerate() {
            let r = BookUpdate { venue_pos: mdfan_wire::venue_position(i as u64 + 1, 0), ts_recv_ns: 2 * i as u64, ts_event_ns: 3 * i as u64, ..*r };
            let want = reference.apply(&r);
            let what = format!("record {i} {r:?}");
            prop_assert_eq!(tiny.apply(&r), want, "{}", what);
            prop_assert_eq!(sized.apply(&r), want, "{}", what);
            assert_same(&tiny, &reference, &format!("tiny, {what}"));
            assert_same(&sized, &reference, &format!("sized, {what}"));
        }
        prop_assert_eq!(sized.growths(), 0, "sized for 12 orders, 16 levels, 3 instruments: never grows");
    }
}
