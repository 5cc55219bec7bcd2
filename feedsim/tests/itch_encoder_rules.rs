//! The ITCH encoder's rules record by record: CME's fill-then-cancel reconciled, modifies as replaces (or a new
//! add when ITCH already executed the order away), clears as deletes, trades, and what ITCH cannot carry
//! (negative or too fine prices, trades without a side, orders never added) skipped and counted. Each message is
//! decoded back with the feed crate's decoder and normaliser into `wire::Books`.

#[path = "../../feed/tests/support/dbn_file.rs"]
mod dbn_file;
mod support;

use mdfan_feedsim::ItchEncoder;
use mdfan_wire::{InstrumentDef, Level, Side, Symbology};

use support::itch_book::ItchBook;

const E9: i64 = 1_000_000_000;
const MIDNIGHT_NS: u64 = 500;

fn px(cents: i64) -> i64 {
    cents * E9 / 100
}

fn lv(cents: i64, size: u64, orders: u32) -> Level {
    Level { price_e9: px(cents), size, orders }
}

#[test]
fn each_dbn_action_becomes_the_itch_messages_that_keep_the_same_book() {
    let mut symbology = Symbology::new();
    symbology.insert(InstrumentDef::new(7, "ESH4"));
    let mut enc = ItchEncoder::new(MIDNIGHT_NS, &symbology);
    let mut book = ItchBook::new(MIDNIGHT_NS);
    let mut seq = 0u64;
    let mut step = |enc: &mut ItchEncoder, book: &mut ItchBook, m: dbn::MboMsg| -> String {
        let mut types = String::new();
        enc.encode(&m, &mut |msg: &[u8]| {
            seq += 1;
            types.push(msg[0] as char);
            book.message(seq, 0, msg);
        });
        types
    };
    let mbo = |inst: u32, s: u32, action: u8, side: u8, order_id: u64, price_e9: i64, size: u32| {
        dbn_file::mbo(inst, s, action, side, order_id, price_e9, size, 0)
    };
    let top =
        |book: &ItchBook, locate: u32, side: Side| book.books.get(locate).map(|b| b.top(side, 5)).unwrap_or_default();

    // Start of messages and ESH4's directory come before the first add.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 1, b'A', b'B', 1, px(10_000), 5)), "SRA");
    assert_eq!(book.norm.symbol(1), Some("ESH4"));
    assert_eq!(step(&mut enc, &mut book, mbo(7, 2, b'A', b'A', 2, px(10_025), 4)), "A");
    // CME fill then cancel of the same 2 shares: E takes them, the cancel has nothing left to do.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 3, b'F', b'B', 1, px(10_000), 2)), "E");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 4, b'C', b'B', 1, px(10_000), 2)), "");
    assert_eq!(top(&book, 1, Side::Bid), [lv(10_000, 3, 1)]);
    // Executed away in ITCH, then modified in DBN: a new add at the new price and size.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 5, b'F', b'B', 1, px(10_000), 3)), "E");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 6, b'M', b'B', 1, px(9_975), 6)), "A");
    assert_eq!(top(&book, 1, Side::Bid), [lv(9_975, 6, 1)]);
    // Modify to a new price: U; a partial cancel: X.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 7, b'M', b'A', 2, px(10_050), 4)), "U");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 8, b'C', b'A', 2, px(10_050), 1)), "X");
    assert_eq!(top(&book, 1, Side::Ask), [lv(10_050, 3, 1)]);
    // Prices ITCH cannot carry: negative (a spread) and finer than 1/10,000; the order's later cancel is unknown.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 9, b'A', b'B', 3, -E9, 1)), "");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 10, b'C', b'B', 3, -E9, 1)), "");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 11, b'A', b'B', 4, px(10_000) + 1, 1)), "");
    // An instrument without a mapping: the next locate, its id as the symbol.
    assert_eq!(step(&mut enc, &mut book, mbo(8, 12, b'A', b'B', 5, px(5_000), 1)), "RA");
    assert_eq!(book.norm.symbol(2), Some("8"));
    // Trades: with a side a P, without one skipped.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 13, b'T', b'A', 0, px(10_050), 1)), "P");
    assert_eq!(step(&mut enc, &mut book, mbo(7, 14, b'T', b'N', 0, px(10_050), 1)), "");
    // A clear of ESH4 deletes its two resting orders; instrument 8 keeps its own.
    assert_eq!(step(&mut enc, &mut book, mbo(7, 15, b'R', b'N', 0, 0, 0)), "DD");
    assert_eq!((top(&book, 1, Side::Bid), top(&book, 1, Side::Ask)), (vec![], vec![]));
    assert_eq!(top(&book, 2, Side::Bid), [lv(5_000, 1, 1)]);
    // A modify to a negative price takes the order out of ITCH.
    assert_eq!(step(&mut enc, &mut book, mbo(8, 16, b'M', b'B', 5, -E9, 1)), "D");
    assert_eq!(top(&book, 2, Side::Bid), []);

    let s = enc.stats();
    assert_eq!((s.records, s.messages(), s.price_unrepresentable, s.unknown_order, s.skipped), (16, 15, 3, 1, 1));
    // ts_event is 1,000 + seq: ns after MIDNIGHT_NS, none clamped.
    assert_eq!(s.ts_clamped, 0);
    assert_eq!(book.norm.stats().unknown_references(), 0);
    assert_eq!(book.norm.resting_orders(), 0);
}
