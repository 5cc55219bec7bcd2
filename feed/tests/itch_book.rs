//! The ITCH order-level rules, message by message, through `wire::Books`: E, C and X take shares off (C at its
//! own execution price without moving the resting price), D removes, U replaces on the same side and locate,
//! unknown references mark the locate stale until System Event `O`.

use mdfan_feed::itch::{AddOrder, Body, Header, ItchNormalizer, Message, Mpid, Symbol};
use mdfan_wire::{flags, BookUpdate, Books, Kind, Level, Side, Status, StatusKind};

const LOCATE: u16 = 42;
const MIDNIGHT_NS: u64 = 1_577_682_000_000_000_000;
const E9: i64 = 1_000_000_000;

fn px(cents: i64) -> i64 {
    cents * E9 / 100
}

fn m(msg_type: u8, ts_ns: u64, body: Body) -> Message {
    Message { header: Header { msg_type, stock_locate: LOCATE, tracking_number: 0, timestamp_ns: ts_ns }, body }
}

fn add(order_ref: u64, buy_sell: u8, shares: u32, cents: i64, mpid: Option<&[u8; 4]>) -> Message {
    let body = Body::AddOrder(AddOrder {
        order_ref,
        buy_sell,
        shares,
        stock: Symbol(*b"TEST    "),
        price_e9: px(cents),
        mpid: mpid.map(|b| Mpid(*b)),
    });
    m(if mpid.is_some() { b'F' } else { b'A' }, 1_000, body)
}

struct Run {
    norm: ItchNormalizer,
    books: Books,
    seq: u64,
}

impl Run {
    fn new() -> Run {
        Run { norm: ItchNormalizer::new(MIDNIGHT_NS, 64), books: Books::new(), seq: 0 }
    }
    fn feed(&mut self, msg: Message) -> Vec<BookUpdate> {
        self.seq += 1;
        let recs = self.norm.normalize(&msg, self.seq, 7).as_slice().to_vec();
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.flags & flags::LAST != 0, i + 1 == recs.len(), "LAST only on the message's last record");
            assert_eq!(
                (r.venue_seq(), r.venue_index(), r.ts_recv_ns),
                (self.seq, i as u16, 7),
                "the message, the record in it"
            );
            assert_eq!(r.ts_event_ns, MIDNIGHT_NS + msg.header.timestamp_ns);
            self.books.apply(r).unwrap();
        }
        recs
    }
    fn levels(&self, side: Side) -> Vec<Level> {
        self.books.get(u32::from(LOCATE)).map(|b| b.top(side, 10)).unwrap_or_default()
    }
}

fn lv(cents: i64, size: u64, orders: u32) -> Level {
    Level { price_e9: px(cents), size, orders }
}

fn kinds(recs: &[BookUpdate]) -> Vec<(Kind, u64, i64, u32)> {
    recs.iter().map(|r| (r.kind().unwrap(), r.order_id, r.price_e9, r.size)).collect()
}

/// A message whose stock locate is not its order's (corrupt or forged: Nasdaq never sends one) acts on the order's
/// instrument, as the order table has it, for every kind of reference (E, X, D, U): no record lands on the
/// message's locate, and the order's book stays what the table says.
#[test]
fn a_reference_under_another_locate_acts_on_the_orders_instrument() {
    let mut run = Run::new();
    run.feed(add(1, b'B', 100, 1000, None));
    run.feed(add(2, b'B', 50, 999, None));
    run.feed(add(3, b'S', 70, 1005, None));
    let other = |msg_type, body| Message {
        header: Header { msg_type, stock_locate: LOCATE + 1, tracking_number: 0, timestamp_ns: 2_000 },
        body,
    };
    let r = run.feed(other(b'E', Body::Executed { order_ref: 1, shares: 10, match_number: 1 }));
    assert_eq!(r.iter().map(|r| r.instrument_id).collect::<Vec<_>>(), [42, 42]);
    let r = run.feed(other(b'D', Body::Delete { order_ref: 2 }));
    assert_eq!((kinds(&r), r[0].instrument_id), (vec![(Kind::Cancel, 2, px(999), 50)], 42));
    let r = run.feed(other(b'U', Body::Replace { original_ref: 3, new_ref: 4, shares: 20, price_e9: px(1006) }));
    assert_eq!(kinds(&r), [(Kind::Cancel, 3, px(1005), 70), (Kind::Add, 4, px(1006), 20)]);
    assert_eq!(r.iter().map(|r| r.instrument_id).collect::<Vec<_>>(), [42, 42]);
    assert_eq!(run.levels(Side::Bid), [lv(1000, 90, 1)]);
    assert_eq!(run.levels(Side::Ask), [lv(1006, 20, 1)]);
    assert!(run.books.get(u32::from(LOCATE) + 1).is_none_or(|b| b.order_count() == 0));
}

#[test]
fn executions_cancels_deletes_and_replaces() {
    let mut run = Run::new();
    run.feed(add(1, b'B', 100, 1000, None));
    run.feed(add(2, b'B', 50, 1000, None));
    let r = run.feed(add(3, b'S', 200, 1005, Some(b"UBSS")));
    assert_eq!((r[0].kind(), r[0].side(), r[0].instrument_id), (Some(Kind::Add), Some(Side::Ask), 42));
    assert_eq!(run.levels(Side::Bid), [lv(1000, 150, 2)]);

    // E: a fill at the resting price, then 30 shares off.
    let r = run.feed(m(b'E', 2_000, Body::Executed { order_ref: 1, shares: 30, match_number: 9 }));
    assert_eq!(kinds(&r), [(Kind::Fill, 1, px(1000), 30), (Kind::Cancel, 1, px(1000), 30)]);
    assert_eq!(run.levels(Side::Bid), [lv(1000, 120, 2)]);

    // C: the fill at the execution price; the resting price does not move; the order goes at 0.
    let r = run.feed(m(
        b'C',
        3_000,
        Body::ExecutedWithPrice { order_ref: 2, shares: 50, match_number: 10, printable: b'Y', price_e9: px(999) },
    ));
    assert_eq!(kinds(&r), [(Kind::Fill, 2, px(999), 50), (Kind::Cancel, 2, px(1000), 50)]);
    assert_eq!(run.levels(Side::Bid), [lv(1000, 70, 1)]);

    // X: a partial cancel, no fill.
    let r = run.feed(m(b'X', 4_000, Body::Cancel { order_ref: 3, shares: 50 }));
    assert_eq!(kinds(&r), [(Kind::Cancel, 3, px(1005), 50)]);
    assert_eq!(run.levels(Side::Ask), [lv(1005, 150, 1)]);

    // U: the original goes (all it has left), the new reference comes on the same side and locate.
    let r = run.feed(m(b'U', 5_000, Body::Replace { original_ref: 3, new_ref: 4, shares: 300, price_e9: px(1010) }));
    assert_eq!(kinds(&r), [(Kind::Cancel, 3, px(1005), 150), (Kind::Add, 4, px(1010), 300)]);
    assert_eq!((r[1].side(), r[1].instrument_id), (Some(Side::Ask), 42));
    assert_eq!(run.levels(Side::Ask), [lv(1010, 300, 1)]);

    // D: whatever is left.
    let r = run.feed(m(b'D', 6_000, Body::Delete { order_ref: 1 }));
    assert_eq!(kinds(&r), [(Kind::Cancel, 1, px(1000), 70)]);
    assert!(run.levels(Side::Bid).is_empty());

    // P and Q: trades, no book change.
    let r = run.feed(m(
        b'P',
        7_000,
        Body::Trade {
            order_ref: 0,
            buy_sell: b'S',
            shares: 5,
            stock: Symbol(*b"TEST    "),
            price_e9: px(1002),
            match_number: 11,
        },
    ));
    assert_eq!((kinds(&r), r[0].side()), (vec![(Kind::Trade, 0, px(1002), 5)], Some(Side::Ask)));
    let r = run.feed(m(
        b'Q',
        8_000,
        Body::CrossTrade {
            shares: 1 << 40,
            stock: Symbol(*b"TEST    "),
            price_e9: px(1003),
            match_number: 12,
            cross_type: b'O',
        },
    ));
    assert_eq!((kinds(&r), r[0].side()), (vec![(Kind::Trade, 0, px(1003), u32::MAX)], Some(Side::None)));
    assert_eq!(run.levels(Side::Ask), [lv(1010, 300, 1)]);
    assert_eq!(run.norm.resting_orders(), 1);
    assert!(!run.norm.is_stale(LOCATE));
    // Per-instrument status messages give one TradingStatus record each; books ignore it.
    let r = run.feed(m(
        b'H',
        9_000,
        Body::TradingAction { stock: Symbol(*b"TEST    "), trading_state: b'H', reason: *b"LUDP" },
    ));
    let status = |kind, state, reason: &[u8; 4]| Some(Status { kind, state, reason: *reason });
    assert_eq!(
        r.iter().map(|r| (r.instrument_id, r.status())).collect::<Vec<_>>(),
        [(u32::from(LOCATE), status(StatusKind::Trading, b'H', b"LUDP"))]
    );
    assert_eq!((r[0].kind(), r[0].side(), r[0].price_e9), (Some(Kind::TradingStatus), Some(Side::None), 0));
    let r = run.feed(m(b'Y', 9_001, Body::RegSho { stock: Symbol(*b"TEST    "), action: b'1' }));
    assert_eq!(r[0].status(), status(StatusKind::RegSho, b'1', b"    "));
    let r = run.feed(m(
        b'h',
        9_002,
        Body::OperationalHalt { stock: Symbol(*b"TEST    "), market_code: b'Q', action: b'H' },
    ));
    assert_eq!(r[0].status(), status(StatusKind::OperationalHalt, b'H', b"Q   "));
    assert_eq!(run.levels(Side::Ask), [lv(1010, 300, 1)]);
    // Market-wide status gives no record and is counted.
    assert!(run.feed(m(b'W', 9_003, Body::MwcbStatus { breached_level: b'1' })).is_empty());
    assert_eq!(run.norm.stats().no_record[usize::from(b'W')], 1);
    assert_eq!(run.norm.stats().no_record[usize::from(b'H')], 0);
}

#[test]
fn unknown_references_mark_the_locate_stale_until_start_of_messages() {
    let mut run = Run::new();
    let r = run.feed(m(b'E', 1, Body::Executed { order_ref: 77, shares: 1, match_number: 1 }));
    assert_eq!(kinds(&r), [(Kind::InstrumentStale, 77, 0, 0)]);
    assert!(run.norm.is_stale(LOCATE));
    // Only the first unknown reference on a locate is announced; every one is counted.
    assert!(run.feed(m(b'D', 2, Body::Delete { order_ref: 78 })).is_empty());
    assert!(run.feed(m(b'U', 3, Body::Replace { original_ref: 79, new_ref: 80, shares: 1, price_e9: 1 })).is_empty());
    let s = run.norm.stats();
    assert_eq!(
        (s.unknown_reference[usize::from(b'E')], s.unknown_reference[usize::from(b'D')], s.unknown_references()),
        (1, 1, 3)
    );
    assert_eq!(run.norm.resting_orders(), 0, "a replace of an unknown reference adds nothing");

    // Start of messages: a clear point.
    run.feed(add(5, b'B', 10, 500, None));
    assert!(run.feed(m(b'S', 4, Body::SystemEvent { event_code: b'O' })).is_empty());
    assert!(!run.norm.is_stale(LOCATE));
    assert_eq!(run.norm.resting_orders(), 0);

    // An execution of more than rests is cut to what rests, counted, and marks the locate stale.
    let mut run = Run::new();
    run.feed(add(5, b'B', 10, 500, None));
    let r = run.feed(m(b'E', 5, Body::Executed { order_ref: 5, shares: 15, match_number: 2 }));
    assert_eq!(
        kinds(&r),
        [(Kind::Fill, 5, px(500), 10), (Kind::Cancel, 5, px(500), 10), (Kind::InstrumentStale, 5, 0, 0)]
    );
    assert_eq!(run.norm.stats().too_many_shares, 1);
    assert!(run.norm.is_stale(LOCATE));
    // A cancel of more than rests: cut, no fill; the locate is already stale, so no second announcement.
    run.feed(add(7, b'S', 10, 600, None));
    let r = run.feed(m(b'X', 6, Body::Cancel { order_ref: 7, shares: 11 }));
    assert_eq!(kinds(&r), [(Kind::Cancel, 7, px(600), 10)]);
    assert_eq!(run.norm.stats().too_many_shares, 2);
    // An add of a live reference is skipped and counted.
    run.feed(add(6, b'B', 10, 500, None));
    let r = run.feed(add(6, b'S', 20, 600, None));
    assert!(r.is_empty(), "the locate is already stale: no second announcement");
    assert_eq!(run.norm.stats().duplicate_reference, 1);
    assert_eq!(run.levels(Side::Bid), [lv(500, 10, 1)]);
}
