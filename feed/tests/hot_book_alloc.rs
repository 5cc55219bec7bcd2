//! No allocation on the hot path: the whole ESH4 capture replayed into `HotBooks` sized up front, with the
//! views a strategy reads after each record (BBO, MBP-10 of both sides, counts, a level by depth), under a
//! counting global allocator. From the first record to the last the allocator is not called once (no alloc,
//! realloc or free). A book sized too small is the control: it must grow, and the allocator must see it.
//! The counter (`support/counting_alloc.rs`) counts only calls made on the thread being measured.

#[path = "support/esh4.rs"]
mod esh4;

use std::hint::black_box;

use mdfan_feed::dbn::{load_mbo_file, normalize_mbo};
use mdfan_wire::{BookCapacity, BookUpdate, HotBooks, Level, Side};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// Allocator calls (allocations and frees) made by this thread while `f` runs.
fn calls_during<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let (c, out) = counting_alloc::calls_during(f);
    (c.allocations + c.frees, out)
}

/// Applies every record and reads what a strategy reads after each; returns a sum of what it read.
fn replay(books: &mut HotBooks, records: &[BookUpdate]) -> u64 {
    let mut seen = 0u64;
    let mut mbp = [Level::default(); 10];
    for r in records {
        if let Err(e) = books.apply(black_box(r)) {
            panic!("{e}");
        }
        let Some(book) = books.get(r.instrument_id) else { continue };
        let (bid, ask) = book.bbo();
        seen += bid.map_or(0, |l| l.size) + ask.map_or(0, |l| l.size);
        seen += book.levels(Side::Bid).take(10).map(|l| l.size).sum::<u64>();
        seen += book.top_into(Side::Ask, &mut mbp) as u64 + mbp[0].size;
        seen += book.level(Side::Bid, 5).map_or(0, |l| l.orders as u64);
        seen += (book.order_count() + book.level_count(Side::Bid) + book.level_count(Side::Ask)) as u64;
        seen += book.last_venue_seq;
        seen += book.order(r.order_id).map_or(0, |o| o.size as u64);
    }
    black_box(seen)
}

#[test]
fn replaying_esh4_into_sized_hot_books_allocates_nothing_from_the_first_record() {
    let file = load_mbo_file(&esh4::main_file()).expect("bundled file loads");
    let records: Vec<BookUpdate> = file.records.iter().map(|m| normalize_mbo(m).expect("valid")).collect();
    assert_eq!(records.len() as u64, esh4::RECORDS);

    // The counter works: a Vec made while counting is seen (its alloc and its free).
    let (calls, ()) = calls_during(|| drop(black_box(vec![1u8; 64])));
    assert_eq!(calls, 2, "the counting allocator sees an allocation and a free");

    let mut books = HotBooks::with_capacity(BookCapacity::new(16_384, 2_048, 1));
    let (calls, seen) = calls_during(|| replay(&mut books, &records));
    assert!(seen > 0);
    assert_eq!(calls, 0, "allocator calls during the replay of {} records", records.len());
    assert_eq!(books.growths(), 0);
    // The replay was the capture's: the reference end state.
    let b = books.get(esh4::INSTRUMENT_ID).expect("ESH4's book");
    let end = &esh4::CHECKPOINTS[esh4::CHECKPOINTS.len() - 1];
    assert_eq!(
        (b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask)),
        (end.orders, end.levels_bid, end.levels_ask)
    );

    // A second session into the same books after a SnapshotBegin (which empties them and keeps the memory):
    // nothing allocated either.
    let reset = BookUpdate::control(mdfan_wire::Kind::SnapshotBegin);
    let (calls, _) = calls_during(|| {
        books.apply(&reset).unwrap();
        replay(&mut books, &records)
    });
    assert_eq!(calls, 0, "allocator calls during a second replay after SnapshotBegin");

    // A clone of empty sized books is sized as well.
    books.apply(&reset).unwrap();
    let mut copy = books.clone();
    let (calls, _) = calls_during(|| replay(&mut copy, &records));
    assert_eq!(calls, 0, "allocator calls during a replay into a clone");
}

#[test]
fn books_sized_too_small_grow_and_the_allocator_sees_it() {
    let file = load_mbo_file(&esh4::main_file()).expect("bundled file loads");
    let records: Vec<BookUpdate> = file.records.iter().map(|m| normalize_mbo(m).expect("valid")).collect();
    let mut books = HotBooks::with_capacity(BookCapacity::new(1_024, 64, 1));
    let (calls, _) = calls_during(|| replay(&mut books, &records));
    assert!(books.growths() > 0);
    assert!(calls >= books.growths(), "{calls} allocator calls for {} growths", books.growths());
}
