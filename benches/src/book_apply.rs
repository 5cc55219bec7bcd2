//! Book apply cost per record, the strategy side of a feed: the bundled capture decoded and normalised into
//! [`BookUpdate`]s once (outside the timing), then every record applied in file order to
//!
//! - `strategy.book_apply`: [`HotBooks`], the pre-allocated book the subscriber library offers for a hot path
//!   (wire/src/hot_book.rs), built with [`CAPACITY`] before the pass, so the pass allocates nothing;
//! - `baseline.reference_book_apply`: [`Books`], the reference book (`BTreeMap` levels, `HashMap` orders; the one
//!   tests trust and snapshots are written from), from empty.
//!
//! Each apply is timed with the TSC (quanta raw ticks around the call, converted to ns); the cost of the two
//! back-to-back reads (the median of [`OVERHEAD_PAIRS`] pairs, measured on the same core before each pass, about
//! 10 ns on these machines) is subtracted from every sample, so the figures are the apply alone (at least 1 ns).
//! The overhead is reported as `strategy.book_apply.tsc_overhead_ns`. One pass per book per round, on core A,
//! the two books in alternating order.
//!
//! After each pass both books must hold the same book, and on the bundled ESH4 capture the known one
//! ([`ESH4_FINAL`], from data/README.md) with no growth of the hot book (no allocation inside the timing):
//! otherwise the measurement fails (a fast wrong book is no figure). Another capture (`--capture`) may outgrow
//! [`CAPACITY`]; the hot book then grows (and allocates) as it does in a strategy.

use std::hint::black_box;

use hdrhistogram::Histogram;
use mdfan_wire::{BookCapacity, BookUpdate, Books, HotBooks, Level, Side};

/// The hot books' capacity: ESH4 peaks at 11,237 orders, 928 bid and 575 ask levels; a few instruments.
pub const CAPACITY: BookCapacity = BookCapacity::new(16_384, 2_048, 4);

/// Back-to-back TSC read pairs whose median is the read cost subtracted from every sample.
pub const OVERHEAD_PAIRS: usize = 10_000;

/// The bundled ESH4 capture's book after its last record (data/README.md "Reference values"): instrument_id,
/// resting orders, bid and ask levels, best bid and best ask (price in 1e-9, size, orders).
pub struct FinalBook {
    pub instrument_id: u32,
    pub orders: usize,
    pub levels_bid: usize,
    pub levels_ask: usize,
    pub best_bid: Level,
    pub best_ask: Level,
}

/// ESH4 (esh4-glbx-mdp3-20231225.mbo.dbn.zst) after all 68,792 records: 11,217 orders, 922 / 565 levels, best
/// 4810.00 x 22 (22 orders) / 4810.25 x 28 (18 orders).
pub const ESH4_FINAL: FinalBook = FinalBook {
    instrument_id: 17_077,
    orders: 11_217,
    levels_bid: 922,
    levels_ask: 565,
    best_bid: Level { price_e9: 4_810_000_000_000, size: 22, orders: 22 },
    best_ask: Level { price_e9: 4_810_250_000_000, size: 28, orders: 18 },
};

/// The ESH4 capture's records in that file (the known book holds only after all of them).
pub const ESH4_RECORDS: usize = 68_792;

/// One round's histograms (ns per record) and the TSC read cost subtracted.
pub struct Measured {
    pub hot: Histogram<u64>,
    pub reference: Histogram<u64>,
    pub tsc_overhead_ns: f64,
}

/// The capture's records normalised, once: the timed passes read this slice.
pub fn records(capture: &std::path::Path) -> anyhow::Result<Vec<BookUpdate>> {
    let file = mdfan_feed::dbn::load_mbo_file(capture)?;
    file.records
        .iter()
        .enumerate()
        .map(|(i, m)| {
            mdfan_feed::dbn::normalize_mbo(m)
                .map_err(|e| anyhow::anyhow!("book apply: {}: record {i}: {e}", capture.display()))
        })
        .collect()
}

/// The median cost of two back-to-back `clock.raw()` reads, in ticks.
fn overhead_ticks(clock: &quanta::Clock) -> u64 {
    let mut v: Vec<u64> = (0..OVERHEAD_PAIRS)
        .map(|_| {
            let t0 = clock.raw();
            let t1 = clock.raw();
            t1.saturating_sub(t0)
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// Applies every record to `apply`, timing each; the read cost `overhead` (ticks) is taken off each sample.
fn pass(
    records: &[BookUpdate],
    clock: &quanta::Clock,
    overhead: u64,
    mut apply: impl FnMut(&BookUpdate) -> bool,
) -> (Histogram<u64>, usize) {
    let mut h = crate::new_histogram();
    let mut refused = 0;
    for r in records {
        let t0 = clock.raw();
        let ok = apply(black_box(r));
        let t1 = clock.raw();
        refused += usize::from(!black_box(ok));
        let ticks = t1.saturating_sub(t0).saturating_sub(overhead);
        h.saturating_record(clock.delta_as_nanos(0, ticks).max(1));
    }
    (h, refused)
}

/// One round: both books over `records`, the hot one first when `hot_first`, then the books checked (see the
/// module docs; `esh4`: the capture is the bundled ESH4 file, so the known final book is checked too).
pub fn run(records: &[BookUpdate], hot_first: bool, esh4: bool) -> anyhow::Result<Measured> {
    let clock = quanta::Clock::new();
    let mut hot = HotBooks::with_capacity(CAPACITY);
    let mut reference = Books::new();
    let mut overheads = Vec::with_capacity(2);
    let mut hot_pass = |clock: &quanta::Clock| {
        let o = overhead_ticks(clock);
        overheads.push(o);
        pass(records, clock, o, |r| hot.apply(r).is_ok())
    };
    let mut hot_result = None;
    if hot_first {
        hot_result = Some(hot_pass(&clock));
    }
    let o = overhead_ticks(&clock);
    let (ref_h, ref_refused) = pass(records, &clock, o, |r| reference.apply(r).is_ok());
    let (hot_h, hot_refused) = match hot_result {
        Some(r) => r,
        None => hot_pass(&clock),
    };
    overheads.push(o);
    anyhow::ensure!(
        hot_refused == ref_refused,
        "book apply: the hot book refused {hot_refused} records, the reference {ref_refused}"
    );
    same_books(&hot, &reference)?;
    if esh4 {
        // sized for ESH4: a growth would put an allocation inside the timed applies
        anyhow::ensure!(
            hot.growths() == 0,
            "book apply: the hot book grew {} times on ESH4 (capacity {CAPACITY:?})",
            hot.growths()
        );
        anyhow::ensure!(
            records.len() == ESH4_RECORDS,
            "book apply: ESH4 has {ESH4_RECORDS} records, read {}",
            records.len()
        );
        check_final(&reference, &ESH4_FINAL)?;
    }
    let mean = overheads.iter().sum::<u64>() / overheads.len() as u64;
    Ok(Measured { hot: hot_h, reference: ref_h, tsc_overhead_ns: clock.delta_as_nanos(0, mean) as f64 })
}

/// Every instrument of the hot books holds what the reference holds: every level of both sides, the order count.
fn same_books(hot: &HotBooks, reference: &Books) -> anyhow::Result<()> {
    let mut ids: Vec<u32> = hot.iter().map(|(id, _)| id).collect();
    ids.sort_unstable();
    let want: Vec<u32> = reference.iter_sorted().into_iter().map(|(id, _)| id).collect();
    anyhow::ensure!(ids == want, "book apply: instruments: hot {ids:?}, reference {want:?}");
    for id in want {
        let (h, r) = (hot.get(id).expect("listed"), reference.get(id).expect("listed"));
        anyhow::ensure!(
            h.order_count() == r.order_count(),
            "book apply: instrument {id}: orders: hot {}, reference {}",
            h.order_count(),
            r.order_count()
        );
        for side in [Side::Bid, Side::Ask] {
            anyhow::ensure!(
                h.levels(side).eq(r.top(side, usize::MAX).into_iter()),
                "book apply: instrument {id}: {side:?} levels differ between the hot and the reference book"
            );
        }
    }
    Ok(())
}

/// The reference book holds `want` (see [`ESH4_FINAL`]).
fn check_final(reference: &Books, want: &FinalBook) -> anyhow::Result<()> {
    let id = want.instrument_id;
    let b = reference.get(id).ok_or_else(|| anyhow::anyhow!("book apply: no book for instrument {id}"))?;
    let got = (b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask), b.bbo());
    let expected = (want.orders, want.levels_bid, want.levels_ask, (Some(want.best_bid), Some(want.best_ask)));
    anyhow::ensure!(
        got == expected,
        "book apply: instrument {id} after the capture: (orders, bid levels, ask levels, bbo) = {got:?}, the \
         known book (data/README.md) is {expected:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esh4() -> Vec<BookUpdate> {
        records(&crate::repo_root().join(crate::replay::CAPTURE)).unwrap()
    }

    #[test]
    fn the_whole_capture_gives_one_sample_per_record_and_the_known_book() {
        let r = esh4();
        assert_eq!(r.len(), ESH4_RECORDS);
        for hot_first in [true, false] {
            let m = run(&r, hot_first, true).unwrap();
            assert_eq!((m.hot.len(), m.reference.len()), (ESH4_RECORDS as u64, ESH4_RECORDS as u64));
        }
    }

    #[test]
    fn a_book_that_is_not_the_known_one_fails_the_measurement() {
        let r = esh4();
        // all but the last record: the right count is checked first
        let e = run(&r[..ESH4_RECORDS - 1], true, true).err().unwrap().to_string();
        assert_eq!(e, "book apply: ESH4 has 68792 records, read 68791");
        // a book past the snapshot only: both books agree, the known final book does not
        let (mut books, mut hot) = (Books::new(), HotBooks::with_capacity(CAPACITY));
        for x in &r[..8_725] {
            books.apply(x).unwrap();
            hot.apply(x).unwrap();
        }
        same_books(&hot, &books).unwrap();
        let e = check_final(&books, &ESH4_FINAL).err().unwrap().to_string();
        assert!(e.starts_with("book apply: instrument 17077 after the capture: (orders, bid levels, ask levels, bbo) = (8725, 892, 559,"), "{e}");
    }
}
