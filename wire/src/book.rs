//! Order books: L3 orders aggregated to L2 levels, one [`Book`] per instrument, [`Books`] for many.
//!
//! Replay rules (Databento's, for MBO; see the DBN docs "Order book construction" and data/README.md):
//! - `Add` adds the order at its price and size.
//! - `Cancel` removes the size it carries (the quantity cancelled, not the quantity left); the order goes
//!   when nothing is left.
//! - `Modify` replaces the order's price and size (and side). A modify of an order the book does not know adds
//!   it, since a book that started after the order was placed cannot know it.
//! - `Clear` empties the book.
//! - `Trade` and `Fill` do not change the book: each fill is followed by its own `Cancel`/`Modify`; nor does
//!   `NoAction` (DBN `N`, a record that carries only flags).
//!
//! Records with the `SNAPSHOT` flag are applied like any other; snapshot markers, heartbeats, end of stream and
//! the price-level kinds (`Level*`, `InstrumentStale`: those are for [`crate::mbp`]) and `TradingStatus` (for [`crate::status`]) do not touch the book. Errors never leave the book half-changed: the record is refused whole.

use std::collections::{BTreeMap, HashMap};

use crate::record::{BookUpdate, Kind, Side};

/// One aggregated price level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    /// Price in units of 1e-9.
    pub price_e9: i64,
    /// Total resting quantity at this price.
    pub size: u64,
    /// Number of resting orders at this price.
    pub orders: u32,
}

#[derive(Debug, Clone, Copy)]
struct Order {
    side: Side,
    price_e9: i64,
    size: u32,
    /// Arrival order in this book (an add or a modify takes a new one): queue priority within a level.
    priority: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Agg {
    size: u64,
    orders: u32,
}

/// Why a record could not be applied. The book is unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BookError {
    /// `Cancel` for an order the book does not hold.
    #[error("instrument {instrument_id}: cancel of unknown order_id {order_id} (venue_seq {venue_seq})")]
    UnknownOrder {
        /// The record's instrument.
        instrument_id: u32,
        /// The order the record names.
        order_id: u64,
        /// The record's `venue_seq` (the venue's sequence number).
        venue_seq: u64,
    },
    /// `Cancel` larger than what rests.
    #[error("instrument {instrument_id}: cancel of {cancel} on order_id {order_id} which has only {resting} (venue_seq {venue_seq})")]
    CancelTooLarge {
        /// The record's instrument.
        instrument_id: u32,
        /// The order the record names.
        order_id: u64,
        /// Shares resting on the order.
        resting: u32,
        /// Shares the record cancels.
        cancel: u32,
        /// The record's `venue_seq` (the venue's sequence number).
        venue_seq: u64,
    },
    /// `Add` of an order_id that is already resting.
    #[error("instrument {instrument_id}: add of order_id {order_id} which is already resting (venue_seq {venue_seq})")]
    DuplicateOrder {
        /// The record's instrument.
        instrument_id: u32,
        /// The order the record names.
        order_id: u64,
        /// The record's `venue_seq` (the venue's sequence number).
        venue_seq: u64,
    },
    /// `Add`/`Modify` with side `N` or an unknown side byte.
    #[error("instrument {instrument_id}: order_id {order_id} has side byte {side:#04x}, expected B or A")]
    BadSide {
        /// The record's instrument.
        instrument_id: u32,
        /// The order the record names.
        order_id: u64,
        /// The side byte found.
        side: u8,
    },
    /// The kind byte is not a [`Kind`].
    #[error("instrument {instrument_id}: record kind byte {kind} is unknown")]
    BadKind {
        /// The record's instrument.
        instrument_id: u32,
        /// The kind byte found.
        kind: u8,
    },
}

/// One instrument's book.
#[derive(Debug, Clone, Default)]
pub struct Book {
    orders: HashMap<u64, Order>,
    bids: BTreeMap<i64, Agg>,
    asks: BTreeMap<i64, Agg>,
    /// The venue seq of the last record applied ([`BookUpdate::venue_seq`]).
    pub last_venue_seq: u64,
    /// The venue position of the last record applied (`venue_pos`).
    pub last_venue_pos: u64,
    /// ts_recv_ns of the last record applied.
    pub last_ts_recv_ns: u64,
    /// ts_event_ns of the last record applied.
    pub last_ts_event_ns: u64,
    /// Records applied (including trades and fills, which leave the levels alone).
    pub records: u64,
    next_priority: u64,
}

impl Book {
    /// An empty book.
    pub fn new() -> Book {
        Book::default()
    }

    fn side_mut(&mut self, side: Side) -> &mut BTreeMap<i64, Agg> {
        if side == Side::Bid {
            &mut self.bids
        } else {
            &mut self.asks
        }
    }

    fn level_add(&mut self, side: Side, price_e9: i64, size: u32) {
        let agg = self.side_mut(side).entry(price_e9).or_default();
        agg.size += size as u64;
        agg.orders += 1;
    }

    fn level_sub(&mut self, side: Side, price_e9: i64, size: u32, remove_order: bool) {
        let levels = self.side_mut(side);
        if let Some(agg) = levels.get_mut(&price_e9) {
            agg.size -= size as u64;
            if remove_order {
                agg.orders -= 1;
            }
            if agg.orders == 0 {
                levels.remove(&price_e9);
            }
        }
    }

    fn order_side(r: &BookUpdate) -> Result<Side, BookError> {
        match r.side() {
            Some(s @ (Side::Bid | Side::Ask)) => Ok(s),
            _ => Err(BookError::BadSide { instrument_id: r.instrument_id, order_id: r.order_id, side: r.side }),
        }
    }

    /// Applies one record with the rules in the module docs.
    ///
    /// # Errors
    /// [`BookError`] for a record that contradicts the book; the book is then unchanged.
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        let kind = r.kind().ok_or(BookError::BadKind { instrument_id: r.instrument_id, kind: r.kind })?;
        match kind {
            Kind::Add => {
                let side = Self::order_side(r)?;
                if self.orders.contains_key(&r.order_id) {
                    return Err(BookError::DuplicateOrder {
                        instrument_id: r.instrument_id,
                        order_id: r.order_id,
                        venue_seq: r.venue_seq(),
                    });
                }
                let priority = self.take_priority();
                self.orders.insert(r.order_id, Order { side, price_e9: r.price_e9, size: r.size, priority });
                self.level_add(side, r.price_e9, r.size);
            }
            Kind::Cancel => {
                let Some(order) = self.orders.get(&r.order_id).copied() else {
                    return Err(BookError::UnknownOrder {
                        instrument_id: r.instrument_id,
                        order_id: r.order_id,
                        venue_seq: r.venue_seq(),
                    });
                };
                if r.size > order.size {
                    return Err(BookError::CancelTooLarge {
                        instrument_id: r.instrument_id,
                        order_id: r.order_id,
                        resting: order.size,
                        cancel: r.size,
                        venue_seq: r.venue_seq(),
                    });
                }
                let left = order.size - r.size;
                self.level_sub(order.side, order.price_e9, r.size, left == 0);
                if left == 0 {
                    self.orders.remove(&r.order_id);
                } else if let Some(o) = self.orders.get_mut(&r.order_id) {
                    o.size = left;
                }
            }
            Kind::Modify => {
                let side = Self::order_side(r)?;
                if let Some(old) = self.orders.remove(&r.order_id) {
                    self.level_sub(old.side, old.price_e9, old.size, true);
                }
                let priority = self.take_priority();
                self.orders.insert(r.order_id, Order { side, price_e9: r.price_e9, size: r.size, priority });
                self.level_add(side, r.price_e9, r.size);
            }
            Kind::Clear => {
                self.orders.clear();
                self.bids.clear();
                self.asks.clear();
            }
            Kind::Trade | Kind::Fill | Kind::NoAction => {}
            Kind::SnapshotBegin | Kind::SnapshotEnd | Kind::Heartbeat | Kind::EndOfStream => return Ok(()),
            // Price-level records belong to a price-level book (`crate::mbp`), not to this order book.
            Kind::LevelNew
            | Kind::LevelChange
            | Kind::LevelDelete
            | Kind::LevelDeleteThru
            | Kind::LevelDeleteFrom
            | Kind::InstrumentStale
            | Kind::TradingStatus
            | Kind::FeedStatus => return Ok(()),
        }
        self.last_venue_seq = r.venue_seq();
        self.last_venue_pos = r.venue_pos;
        self.last_ts_recv_ns = r.ts_recv_ns;
        self.last_ts_event_ns = r.ts_event_ns;
        self.records += 1;
        Ok(())
    }

    fn take_priority(&mut self) -> u64 {
        self.next_priority += 1;
        self.next_priority
    }

    /// Appends this book as snapshot records: a `Clear`, then one `Add` per resting order (bids then asks,
    /// best price first, queue priority within a level), every one flagged `SNAPSHOT`, the last one also
    /// `LAST`. Each carries the book's last venue position, ts_recv_ns and ts_event_ns.
    pub fn snapshot_into(&self, instrument_id: u32, out: &mut Vec<BookUpdate>) {
        let base = BookUpdate {
            instrument_id,
            venue_pos: self.last_venue_pos,
            ts_recv_ns: self.last_ts_recv_ns,
            ts_event_ns: self.last_ts_event_ns,
            flags: crate::flags::SNAPSHOT,
            ..BookUpdate::control(Kind::Clear)
        };
        out.push(base);
        let mut orders: Vec<(&u64, &Order)> = self.orders.iter().collect();
        // Bids best (highest) first, then asks best (lowest) first; `Reverse` rather than negation, which
        // overflows at i64::MIN.
        orders.sort_by_key(|(_, o)| {
            let bid_px = if o.side == Side::Bid { Some(std::cmp::Reverse(o.price_e9)) } else { None };
            (o.side != Side::Bid, bid_px, o.price_e9, o.priority)
        });
        for (id, o) in orders {
            out.push(BookUpdate {
                kind: Kind::Add as u8,
                side: o.side as u8,
                order_id: *id,
                price_e9: o.price_e9,
                size: o.size,
                ..base
            });
        }
        if let Some(last) = out.last_mut() {
            last.flags |= crate::flags::LAST;
        }
    }

    /// Resting orders.
    pub fn order_count(&self) -> usize {
        self.orders.len()
    }

    /// Price levels on one side (`Side::None` counts 0).
    pub fn level_count(&self, side: Side) -> usize {
        match side {
            Side::Bid => self.bids.len(),
            Side::Ask => self.asks.len(),
            Side::None => 0,
        }
    }

    /// The best `n` levels of one side, best first (highest bid, lowest ask).
    pub fn top(&self, side: Side, n: usize) -> Vec<Level> {
        let lvl = |(p, a): (&i64, &Agg)| Level { price_e9: *p, size: a.size, orders: a.orders };
        match side {
            Side::Bid => self.bids.iter().rev().take(n).map(lvl).collect(),
            Side::Ask => self.asks.iter().take(n).map(lvl).collect(),
            Side::None => Vec::new(),
        }
    }

    /// Best bid and best ask, if any.
    pub fn bbo(&self) -> (Option<Level>, Option<Level>) {
        let lvl = |(p, a): (&i64, &Agg)| Level { price_e9: *p, size: a.size, orders: a.orders };
        (self.bids.iter().next_back().map(lvl), self.asks.iter().next().map(lvl))
    }
}

/// Books for many instruments, keyed by instrument_id.
#[derive(Debug, Clone, Default)]
pub struct Books {
    books: HashMap<u32, Book>,
}

impl Books {
    /// No books yet.
    pub fn new() -> Books {
        Books::default()
    }

    /// Applies a record to its instrument's book, creating the book on first sight. `SnapshotBegin` empties
    /// every book (the snapshot that follows holds every instrument of the stream); snapshot end, heartbeats
    /// and end of stream are ignored.
    ///
    /// # Errors
    /// As [`Book::apply`].
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        match r.kind() {
            Some(Kind::SnapshotBegin) => {
                self.books.clear();
                Ok(())
            }
            Some(Kind::SnapshotEnd | Kind::Heartbeat | Kind::EndOfStream) => Ok(()),
            // Price-level records (for `crate::mbp::MbpBooks`) are ignored here, without making a book.
            Some(k)
                if k.is_level() || k == Kind::InstrumentStale || k == Kind::TradingStatus || k == Kind::FeedStatus =>
            {
                Ok(())
            }
            _ => match self.books.get_mut(&r.instrument_id) {
                Some(book) => book.apply(r),
                None => {
                    // A refused record leaves nothing behind, not even an empty book.
                    let mut book = Book::new();
                    book.apply(r)?;
                    self.books.insert(r.instrument_id, book);
                    Ok(())
                }
            },
        }
    }

    /// One instrument's book.
    pub fn get(&self, instrument_id: u32) -> Option<&Book> {
        self.books.get(&instrument_id)
    }

    /// A full snapshot of the books in `filter` (all when `None`), sorted by instrument_id: `SnapshotBegin`,
    /// each book as [`Book::snapshot_into`] writes it, `SnapshotEnd`. The markers carry, in `order_id`, the
    /// number of feed records the snapshot includes (`position`) and, in `size`, the number of instruments.
    pub fn snapshot(&self, filter: Option<&[u32]>, position: u64) -> Vec<BookUpdate> {
        let books: Vec<(u32, &Book)> =
            self.iter_sorted().into_iter().filter(|(id, _)| filter.is_none_or(|f| f.contains(id))).collect();
        let instruments = books.len() as u32;
        let marker = |kind| BookUpdate {
            order_id: position,
            size: instruments,
            flags: crate::flags::SNAPSHOT,
            ..BookUpdate::control(kind)
        };
        let mut out = Vec::with_capacity(2 + books.iter().map(|(_, b)| b.order_count() + 1).sum::<usize>());
        out.push(marker(Kind::SnapshotBegin));
        for (id, book) in books {
            book.snapshot_into(id, &mut out);
        }
        out.push(marker(Kind::SnapshotEnd));
        out
    }

    /// All books, sorted by instrument_id.
    pub fn iter_sorted(&self) -> Vec<(u32, &Book)> {
        let mut v: Vec<_> = self.books.iter().map(|(k, b)| (*k, b)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PX: i64 = 1_000_000_000;

    fn rec(kind: Kind, side: Side, order_id: u64, price: i64, size: u32) -> BookUpdate {
        BookUpdate {
            order_id,
            price_e9: price * PX,
            size,
            side: side as u8,
            instrument_id: 7,
            ..BookUpdate::control(kind)
        }
    }

    fn lvl(price: i64, size: u64, orders: u32) -> Level {
        Level { price_e9: price * PX, size, orders }
    }

    #[test]
    fn adds_aggregate_into_levels_best_first() {
        let mut b = Book::new();
        b.apply(&rec(Kind::Add, Side::Bid, 1, 100, 5)).unwrap();
        b.apply(&rec(Kind::Add, Side::Bid, 2, 100, 3)).unwrap();
        b.apply(&rec(Kind::Add, Side::Bid, 3, 99, 4)).unwrap();
        b.apply(&rec(Kind::Add, Side::Ask, 4, 101, 2)).unwrap();
        b.apply(&rec(Kind::Add, Side::Ask, 5, 102, 6)).unwrap();
        assert_eq!(b.top(Side::Bid, 10), vec![lvl(100, 8, 2), lvl(99, 4, 1)]);
        assert_eq!(b.top(Side::Ask, 10), vec![lvl(101, 2, 1), lvl(102, 6, 1)]);
        assert_eq!(b.bbo(), (Some(lvl(100, 8, 2)), Some(lvl(101, 2, 1))));
        assert_eq!(b.order_count(), 5);
    }

    #[test]
    fn partial_cancel_removes_the_size_it_carries_and_full_cancel_removes_the_order() {
        let mut b = Book::new();
        b.apply(&rec(Kind::Add, Side::Bid, 1, 100, 10)).unwrap();
        b.apply(&rec(Kind::Add, Side::Bid, 2, 100, 1)).unwrap();
        b.apply(&rec(Kind::Cancel, Side::Bid, 1, 100, 4)).unwrap();
        assert_eq!(b.top(Side::Bid, 1), vec![lvl(100, 7, 2)]);
        b.apply(&rec(Kind::Cancel, Side::Bid, 1, 100, 6)).unwrap();
        assert_eq!(b.top(Side::Bid, 1), vec![lvl(100, 1, 1)]);
        assert_eq!(b.order_count(), 1);
        b.apply(&rec(Kind::Cancel, Side::Bid, 2, 100, 1)).unwrap();
        assert_eq!(b.level_count(Side::Bid), 0);
    }

    #[test]
    fn modify_to_another_price_moves_the_order_and_replaces_its_size() {
        let mut b = Book::new();
        b.apply(&rec(Kind::Add, Side::Ask, 1, 101, 5)).unwrap();
        b.apply(&rec(Kind::Add, Side::Ask, 2, 101, 2)).unwrap();
        b.apply(&rec(Kind::Modify, Side::Ask, 1, 103, 9)).unwrap();
        assert_eq!(b.top(Side::Ask, 10), vec![lvl(101, 2, 1), lvl(103, 9, 1)]);
        // same price, smaller size
        b.apply(&rec(Kind::Modify, Side::Ask, 1, 103, 4)).unwrap();
        assert_eq!(b.top(Side::Ask, 10), vec![lvl(101, 2, 1), lvl(103, 4, 1)]);
        // last order at a level moves away: the level goes
        b.apply(&rec(Kind::Modify, Side::Ask, 2, 104, 2)).unwrap();
        assert_eq!(b.top(Side::Ask, 10), vec![lvl(103, 4, 1), lvl(104, 2, 1)]);
    }

    #[test]
    fn clear_empties_the_book_and_trades_and_fills_change_nothing() {
        let mut b = Book::new();
        b.apply(&rec(Kind::Add, Side::Bid, 1, 100, 5)).unwrap();
        b.apply(&rec(Kind::Add, Side::Ask, 2, 101, 5)).unwrap();
        b.apply(&rec(Kind::Trade, Side::Bid, 0, 101, 5)).unwrap();
        b.apply(&rec(Kind::Fill, Side::Ask, 2, 101, 5)).unwrap();
        assert_eq!(b.bbo(), (Some(lvl(100, 5, 1)), Some(lvl(101, 5, 1))));
        b.apply(&rec(Kind::Clear, Side::None, 0, 0, 0)).unwrap();
        assert_eq!((b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask)), (0, 0, 0));
        assert_eq!(b.bbo(), (None, None));
        assert_eq!(b.records, 5);
    }

    #[test]
    fn a_snapshot_rebuilds_an_equal_book_in_priority_order() {
        let mut books = Books::new();
        for r in [
            rec(Kind::Add, Side::Bid, 1, 100, 5),
            rec(Kind::Add, Side::Bid, 2, 100, 3),
            rec(Kind::Add, Side::Bid, 3, 101, 1),
            rec(Kind::Add, Side::Ask, 4, 103, 2),
            rec(Kind::Add, Side::Ask, 5, 102, 6),
            rec(Kind::Modify, Side::Bid, 1, 100, 4), // loses priority to order 2
        ] {
            books.apply(&r).unwrap();
        }
        let snap = books.snapshot(None, 6);
        let kinds: Vec<_> = snap.iter().map(|r| r.kind().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                Kind::SnapshotBegin,
                Kind::Clear,
                Kind::Add,
                Kind::Add,
                Kind::Add,
                Kind::Add,
                Kind::Add,
                Kind::SnapshotEnd
            ]
        );
        let ids: Vec<u64> = snap[2..7].iter().map(|r| r.order_id).collect();
        assert_eq!(ids, [3, 2, 1, 5, 4], "bids best first then asks best first, queue priority within a level");
        assert!(snap[1..7].iter().all(|r| r.flags & crate::flags::SNAPSHOT != 0));
        assert!(snap[6].is_last() && !snap[5].is_last());
        assert_eq!((snap[0].order_id, snap[0].size), (6, 1));
        // applied to books holding other state, the snapshot gives the same levels, and only its instruments
        let mut other = Books::new();
        other.apply(&rec(Kind::Add, Side::Ask, 99, 50, 1)).unwrap();
        other.apply(&BookUpdate { instrument_id: 8, ..rec(Kind::Add, Side::Ask, 98, 50, 1) }).unwrap();
        for r in &snap {
            other.apply(r).unwrap();
        }
        let (a, b) = (books.get(7).unwrap(), other.get(7).unwrap());
        assert_eq!(a.top(Side::Bid, 10), b.top(Side::Bid, 10));
        assert_eq!(a.top(Side::Ask, 10), b.top(Side::Ask, 10));
        assert_eq!(a.order_count(), b.order_count());
        assert!(other.get(8).is_none(), "instruments not in the snapshot are gone");
        assert!(books.snapshot(Some(&[8]), 6)[1].kind() == Some(Kind::SnapshotEnd));
    }

    #[test]
    fn extreme_prices_sort_without_overflow() {
        let mut books = Books::new();
        let at = |id, side, price_e9| BookUpdate { price_e9, ..rec(Kind::Add, side, id, 0, 1) };
        for r in
            [at(1, Side::Bid, i64::MIN), at(2, Side::Bid, 0), at(3, Side::Ask, i64::MAX), at(4, Side::Ask, i64::MIN)]
        {
            books.apply(&r).unwrap();
        }
        let ids: Vec<u64> = books.snapshot(None, 4)[2..6].iter().map(|r| r.order_id).collect();
        assert_eq!(ids, [2, 1, 4, 3]);
    }

    #[test]
    fn contradicting_records_are_refused_and_leave_the_book_alone() {
        let mut b = Book::new();
        b.apply(&rec(Kind::Add, Side::Bid, 1, 100, 5)).unwrap();
        assert_eq!(
            b.apply(&rec(Kind::Cancel, Side::Bid, 9, 100, 1)),
            Err(BookError::UnknownOrder { instrument_id: 7, order_id: 9, venue_seq: 0 })
        );
        assert_eq!(
            b.apply(&rec(Kind::Cancel, Side::Bid, 1, 100, 6)),
            Err(BookError::CancelTooLarge { instrument_id: 7, order_id: 1, resting: 5, cancel: 6, venue_seq: 0 })
        );
        assert_eq!(
            b.apply(&rec(Kind::Add, Side::Bid, 1, 100, 1)),
            Err(BookError::DuplicateOrder { instrument_id: 7, order_id: 1, venue_seq: 0 })
        );
        assert!(matches!(b.apply(&rec(Kind::Add, Side::None, 3, 100, 1)), Err(BookError::BadSide { .. })));
        // Books: a refused first record of an instrument creates no book
        let mut books = Books::new();
        assert!(books.apply(&rec(Kind::Cancel, Side::Bid, 9, 100, 1)).is_err());
        assert!(books.get(7).is_none() && books.iter_sorted().is_empty());
        assert_eq!(b.top(Side::Bid, 10), vec![lvl(100, 5, 1)]);
        assert_eq!(b.records, 1);
    }

    #[test]
    fn price_level_kinds_are_ignored_by_the_order_book() {
        let mut books = Books::new();
        books.apply(&rec(Kind::Add, Side::Bid, 1, 100, 5)).unwrap();
        for kind in [
            Kind::LevelNew,
            Kind::LevelChange,
            Kind::LevelDelete,
            Kind::LevelDeleteThru,
            Kind::LevelDeleteFrom,
            Kind::InstrumentStale,
            Kind::TradingStatus,
        ] {
            let r = BookUpdate { level: 1, ..rec(kind, Side::Bid, 3, 100, 2) };
            books.apply(&r).unwrap();
            books.apply(&BookUpdate { instrument_id: 99, ..r }).unwrap();
        }
        assert!(books.get(99).is_none(), "a level record makes no order book");
        let b = books.get(7).unwrap();
        assert_eq!(b.top(Side::Bid, 10), vec![lvl(100, 5, 1)]);
        assert_eq!(b.records, 1);
    }
}
