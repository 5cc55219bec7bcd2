//! DBN actions beyond the bundled capture's: `N` (no action) is carried, changes no book, and the replay goes on.

#[path = "support/dbn_file.rs"]
mod dbn_file;

use dbn_file::{write_dbn, LAST};
use mdfan_feed::dbn::{load_mbo_file, normalize_mbo};
use mdfan_wire::{Books, Kind};

const ID: u32 = 7;

fn mbo(seq: u32, action: u8, side: u8, order_id: u64, price_e9: i64, size: u32, flags: u8) -> dbn::MboMsg {
    dbn_file::mbo(ID, seq, action, side, order_id, price_e9, size, flags)
}

#[test]
fn action_n_is_carried_and_changes_no_book() {
    let px = |cents: i64| cents * 10_000_000;
    let records = [
        mbo(1, b'A', b'B', 1, px(10_000), 5, LAST),
        mbo(2, b'A', b'A', 2, px(10_025), 4, LAST),
        mbo(3, b'T', b'A', 0, px(10_000), 2, 0),
        mbo(4, b'F', b'B', 1, px(10_000), 2, 0),
        mbo(5, b'C', b'B', 1, px(10_000), 2, LAST),
        mbo(6, b'F', b'B', 99, px(10_000), 1, 0),
        mbo(7, b'N', b'N', 0, dbn::UNDEF_PRICE, 0, LAST),
    ];
    let path = write_dbn("feed-action-n", &records);
    let file = load_mbo_file(&path).expect("a file with action N loads");
    std::fs::remove_file(&path).ok();
    assert_eq!(file.records.len(), 7);
    let mut books = Books::new();
    let mut kinds = Vec::new();
    for msg in &file.records {
        let r = normalize_mbo(msg).expect("every record normalises");
        kinds.push(r.kind());
        books.apply(&r).expect("the book takes every record");
    }
    assert_eq!(
        kinds,
        [Kind::Add, Kind::Add, Kind::Trade, Kind::Fill, Kind::Cancel, Kind::Fill, Kind::NoAction].map(Some)
    );
    let book = books.get(ID).expect("the instrument has a book");
    let (bid, ask) = book.bbo();
    let (bid, ask) = (bid.unwrap(), ask.unwrap());
    assert_eq!((bid.price_e9, bid.size, bid.orders), (100_000_000_000, 3, 1));
    assert_eq!((ask.price_e9, ask.size, ask.orders), (100_250_000_000, 4, 1));
    assert_eq!(book.order_count(), 2);
    assert_eq!(book.last_venue_seq, 7, "the N record moved the venue seq: the replay went on to its end");
}
