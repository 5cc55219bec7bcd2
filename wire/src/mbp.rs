//! Price-level (market-by-price, MBP-10) books: one [`MbpBook`] per instrument, [`MbpBooks`] for many.
//!
//! A book holds, per side, [`MBP_DEPTH`] (10) numbered positions, 1 = best, each empty or holding one
//! [`MbpLevel`] (price, total quantity, order count), for the outright book and, apart, for the implied book
//! (records flagged [`flags::IMPLIED`]). It is fed the level kinds of [`crate::record`] with CME MDP 3.0's
//! multiple-depth rules (CME Client Systems Wiki, "MDP 3.0 - Market by Price - Multiple Depth Book" and
//! "Implied Book"; data/cme-mdp3-sbe-v8-pcap-20160927/README.md, "Book replay"):
//!
//! | kind | MDP 3.0 `MDUpdateAction` | effect on `side`, position `level` = N |
//! |---|---|---|
//! | [`Kind::LevelNew`] | 0 New | insert at N; N..9 move to N+1..10; the level pushed past 10 goes |
//! | [`Kind::LevelChange`] | 1 Change, 5 Overlay | replace position N |
//! | [`Kind::LevelDelete`] | 2 Delete | remove position N; N+1..10 move up one; position 10 becomes empty |
//! | [`Kind::LevelDeleteThru`] | 3 DeleteThru | empty the whole side |
//! | [`Kind::LevelDeleteFrom`] | 4 DeleteFrom | remove positions 1..=N; the rest move up N |
//! | [`Kind::Clear`] | book reset (`MDEntryType` `J`), snapshot start | empty both sides, both books; not stale |
//! | [`Kind::InstrumentStale`] with [`StaleBook::PriceLevel`] | (a `RptSeq` gap) | mark the book stale until the next `Clear` (an order book's stale mark is ignored) |
//!
//! A book that started without a snapshot cannot know the levels it never saw: a New or Change at a position
//! deeper than what was filled leaves the positions above it empty (the "padding" of the data README), and the
//! views return them as `None`. An update at a position past [`MBP_DEPTH`] is counted
//! ([`MbpBook::beyond_depth`]) and otherwise ignored, as CME tells clients to drop levels past the book's depth.
//!
//! Nothing allocates after construction: a book is a fixed array, [`MbpBooks`] reserves room for its
//! instruments up front and refuses one more than that.

use crate::record::{flags, BookUpdate, Kind, Side, StaleBook};

/// Price levels kept per side (CME's MBP depth for most futures, tag 264 `MarketDepth` = 10).
pub const MBP_DEPTH: usize = 10;

/// One aggregated price level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MbpLevel {
    /// Price in units of 1e-9 (`i64::MAX` when the venue sent a null price).
    pub price_e9: i64,
    /// Total quantity at the level, in contracts (MDP 3.0 `MDEntrySize`).
    pub size: u32,
    /// Number of orders at the level (MDP 3.0 `NumberOfOrders`; 0 when null).
    pub orders: u32,
}

/// Why a record could not be applied to a price-level book; the books are unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MbpError {
    /// A level kind with `level` 0 (positions start at 1).
    #[error(
        "instrument {instrument_id}: price level 0 in a {kind:?} record (venue_seq {venue_seq}); levels start at 1"
    )]
    LevelZero {
        /// The record's instrument.
        instrument_id: u32,
        /// The record's kind.
        kind: Kind,
        /// The record's `venue_seq`.
        venue_seq: u64,
    },
    /// A level kind whose side byte is not `B` or `A`.
    #[error(
        "instrument {instrument_id}: side byte {side:#04x} in a {kind:?} record (venue_seq {venue_seq}); want B or A"
    )]
    BadSide {
        /// The record's instrument.
        instrument_id: u32,
        /// The record's kind.
        kind: Kind,
        /// The side byte found.
        side: u8,
        /// The record's `venue_seq`.
        venue_seq: u64,
    },
    /// A new instrument while [`MbpBooks`] already holds as many as it reserved room for.
    #[error("instrument {instrument_id}: no room for another price-level book (capacity {capacity} instruments)")]
    Full {
        /// The instrument that did not fit.
        instrument_id: u32,
        /// The capacity given to [`MbpBooks::with_capacity`].
        capacity: usize,
    },
}

type Positions = [Option<MbpLevel>; MBP_DEPTH];

/// The price-level book of one instrument (rules in the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MbpBook {
    instrument_id: u32,
    /// Outright bids, asks, implied bids, implied asks (index: [`MbpBook::slot`]).
    sides: [Positions; 4],
    /// Per side (as `sides`), bit N-1: position N held a level at some point since the book was made or last
    /// cleared (what the feed filled; a position never filled is unknown, not known empty).
    filled: [u16; 4],
    stale: bool,
    records: u64,
    beyond_depth: u64,
    last_venue_pos: u64,
}

impl MbpBook {
    /// An empty, not stale book.
    pub const fn new(instrument_id: u32) -> MbpBook {
        MbpBook {
            instrument_id,
            sides: [[None; MBP_DEPTH]; 4],
            filled: [0; 4],
            stale: false,
            records: 0,
            beyond_depth: 0,
            last_venue_pos: 0,
        }
    }

    const fn slot(side: Side, implied: bool) -> usize {
        (matches!(side, Side::Ask) as usize) + 2 * (implied as usize)
    }

    /// The book's instrument.
    pub const fn instrument_id(&self) -> u32 {
        self.instrument_id
    }

    /// Whether an [`Kind::InstrumentStale`] came since the last `Clear`: the levels may be wrong.
    pub const fn is_stale(&self) -> bool {
        self.stale
    }

    /// Records applied (level kinds, `Clear` and `InstrumentStale`).
    pub const fn records(&self) -> u64 {
        self.records
    }

    /// Level updates ignored because their position was deeper than [`MBP_DEPTH`].
    pub const fn beyond_depth(&self) -> u64 {
        self.beyond_depth
    }

    /// The venue seq of the last record applied ([`BookUpdate::venue_seq`]).
    pub const fn last_venue_seq(&self) -> u64 {
        self.last_venue_pos >> crate::record::VENUE_INDEX_BITS
    }

    /// The venue position of the last record applied.
    pub const fn last_venue_pos(&self) -> u64 {
        self.last_venue_pos
    }

    /// Appends the records that rebuild this book from empty, for a snapshot: `Clear`, then one
    /// [`Kind::LevelNew`] per filled position (outright bids, asks, then implied bids, asks; each side best
    /// first, so every insert lands below what is there and moves nothing), then [`Kind::InstrumentStale`] if the
    /// book is stale (its levels are the publisher's best knowledge, not the venue's). Every record carries
    /// [`flags::SNAPSHOT`] and `venue_pos` = the last one applied (the stale mark says [`StaleBook::PriceLevel`]); a level record carries its price, size, order
    /// count (in `order_id`) and position (in `level`), as a live one does. Applied in order to an empty
    /// [`MbpBook`] it gives back this book's levels and stale mark. Returns the records appended.
    pub fn snapshot_into(&self, out: &mut Vec<BookUpdate>) -> usize {
        let before = out.len();
        let base = BookUpdate {
            instrument_id: self.instrument_id,
            venue_pos: self.last_venue_pos,
            flags: flags::SNAPSHOT | flags::MBP,
            ..BookUpdate::control(Kind::Clear)
        };
        out.push(base);
        for (slot, positions) in self.sides.iter().enumerate() {
            let side = if slot % 2 == 0 { Side::Bid } else { Side::Ask };
            let implied = if slot >= 2 { flags::IMPLIED } else { 0 };
            for (i, l) in positions.iter().enumerate() {
                let Some(l) = l else { continue };
                out.push(BookUpdate {
                    price_e9: l.price_e9,
                    size: l.size,
                    order_id: u64::from(l.orders),
                    level: i as u8 + 1,
                    side: side as u8,
                    flags: base.flags | implied,
                    kind: Kind::LevelNew as u8,
                    ..base
                });
            }
        }
        if self.stale {
            out.push(BookUpdate {
                flags: flags::SNAPSHOT,
                kind: Kind::InstrumentStale as u8,
                level: StaleBook::PriceLevel as u8,
                ..base
            });
        }
        out.len() - before
    }

    /// Position `level` (1 = best) of the outright `side`; `None` when empty, unknown or past the depth.
    pub fn level(&self, side: Side, level: usize) -> Option<MbpLevel> {
        self.top(side, MBP_DEPTH).get(level.checked_sub(1)?).copied().flatten()
    }

    /// The deepest position (1 = best) of the outright `side` that held a level since the book was made or last
    /// cleared: 0 when none did. A level-1 feed's book never goes past 1.
    pub fn filled_depth(&self, side: Side) -> usize {
        if side == Side::None {
            return 0;
        }
        16 - self.filled[Self::slot(side, false)].leading_zeros() as usize
    }

    /// Whether position `level` (1 = best) of the outright `side` held a level since the book was made or last
    /// cleared. An empty position that never did is unknown (the book started without a snapshot, and the feed
    /// filled a deeper one first), not known to be empty.
    pub fn ever_filled(&self, side: Side, level: usize) -> bool {
        side != Side::None
            && (1..=MBP_DEPTH).contains(&level)
            && self.filled[Self::slot(side, false)] & (1 << (level - 1)) != 0
    }

    /// Best outright bid and best outright ask (position 1 of each side).
    pub fn bbo(&self) -> (Option<MbpLevel>, Option<MbpLevel>) {
        (self.level(Side::Bid, 1), self.level(Side::Ask, 1))
    }

    /// Positions 1..=n (n capped at [`MBP_DEPTH`]) of the outright `side`, best first; `&[]` for `Side::None`.
    pub fn top(&self, side: Side, n: usize) -> &[Option<MbpLevel>] {
        self.top_of(side, false, n)
    }

    /// Positions 1..=n of the implied `side` (records flagged [`flags::IMPLIED`]), best first.
    pub fn implied_top(&self, side: Side, n: usize) -> &[Option<MbpLevel>] {
        self.top_of(side, true, n)
    }

    fn top_of(&self, side: Side, implied: bool, n: usize) -> &[Option<MbpLevel>] {
        if side == Side::None {
            return &[];
        }
        &self.sides[Self::slot(side, implied)][..n.min(MBP_DEPTH)]
    }

    /// Applies one record: the level kinds, `Clear` and `InstrumentStale` as in the module docs; every other
    /// kind is ignored (`Ok`). The record's `instrument_id` is not checked ([`MbpBooks`] routes by it).
    ///
    /// # Errors
    /// [`MbpError::LevelZero`] or [`MbpError::BadSide`] for a level kind that names no position or side; the
    /// book is then unchanged.
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), MbpError> {
        let Some(kind) = r.kind() else { return Ok(()) };
        match kind {
            Kind::Clear => {
                self.sides = [[None; MBP_DEPTH]; 4];
                self.filled = [0; 4];
            }
            // A stale mark about an order book is not this book's.
            Kind::InstrumentStale if r.stale_book() != Some(StaleBook::PriceLevel) => return Ok(()),
            Kind::InstrumentStale => {
                self.stale = true;
                self.records += 1;
                self.last_venue_pos = r.venue_pos;
                return Ok(());
            }
            k if k.is_level() => self.apply_level(k, r)?,
            _ => return Ok(()),
        }
        if kind == Kind::Clear {
            self.stale = false;
        }
        self.records += 1;
        self.last_venue_pos = r.venue_pos;
        Ok(())
    }

    fn apply_level(&mut self, kind: Kind, r: &BookUpdate) -> Result<(), MbpError> {
        let (instrument_id, venue_seq) = (r.instrument_id, r.venue_seq());
        let side = match r.side() {
            Some(s @ (Side::Bid | Side::Ask)) => s,
            _ => return Err(MbpError::BadSide { instrument_id, kind, side: r.side, venue_seq }),
        };
        if r.level == 0 && kind != Kind::LevelDeleteThru {
            return Err(MbpError::LevelZero { instrument_id, kind, venue_seq });
        }
        let n = usize::from(r.level);
        let slot = Self::slot(side, r.flags & flags::IMPLIED != 0);
        let positions = &mut self.sides[slot];
        let entry = Some(MbpLevel {
            price_e9: r.price_e9,
            size: r.size,
            orders: u32::try_from(r.order_id).unwrap_or(u32::MAX),
        });
        match kind {
            Kind::LevelDeleteThru => *positions = [None; MBP_DEPTH],
            Kind::LevelDeleteFrom => {
                let gone = n.min(MBP_DEPTH);
                positions.copy_within(gone.., 0);
                positions[MBP_DEPTH - gone..].fill(None);
            }
            _ if n > MBP_DEPTH => self.beyond_depth += 1,
            Kind::LevelNew => {
                positions.copy_within(n - 1..MBP_DEPTH - 1, n);
                positions[n - 1] = entry;
            }
            Kind::LevelChange => positions[n - 1] = entry,
            Kind::LevelDelete => {
                positions.copy_within(n.., n - 1);
                positions[MBP_DEPTH - 1] = None;
            }
            _ => {}
        }
        for (i, l) in self.sides[slot].iter().enumerate() {
            if l.is_some() {
                self.filled[slot] |= 1 << i;
            }
        }
        Ok(())
    }
}

/// Price-level books for many instruments, in a table reserved up front (no allocation after
/// [`MbpBooks::with_capacity`]); lookups are a binary search by instrument id.
#[derive(Debug, Clone)]
pub struct MbpBooks {
    /// Sorted by instrument id; never grows past `capacity`.
    books: Vec<MbpBook>,
    capacity: usize,
}

impl MbpBooks {
    /// Room for `max_instruments` books (992 bytes each on x86-64: 4 sides x 10 positions x 24 B, plus
    /// counters), reserved now.
    pub fn with_capacity(max_instruments: usize) -> MbpBooks {
        MbpBooks { books: Vec::with_capacity(max_instruments), capacity: max_instruments }
    }

    /// Applies a record to its instrument's book, making the book on the first level record, `Clear` or
    /// `InstrumentStale` of an instrument; `SnapshotBegin` empties every book and marks it stale until the
    /// snapshot's `Clear` of it (a book the snapshot leaves out is unknown, not empty); other kinds are ignored.
    ///
    /// # Errors
    /// As [`MbpBook::apply`], and [`MbpError::Full`] for one instrument more than the capacity. A refused
    /// record makes no book and changes none.
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), MbpError> {
        match r.kind() {
            Some(Kind::SnapshotBegin) => {
                // Empty, and unknown until the snapshot's own `Clear` of the book: a book the publisher does not
                // send (a live publisher that has not recovered it yet) is not known to be empty.
                let empty = BookUpdate { venue_pos: r.venue_pos, ..BookUpdate::control(Kind::Clear) };
                for b in &mut self.books {
                    b.apply(&empty)?;
                    b.apply(&BookUpdate {
                        venue_pos: r.venue_pos,
                        ..BookUpdate::stale(b.instrument_id, StaleBook::PriceLevel)
                    })?;
                }
                Ok(())
            }
            Some(k) if k.is_level() || k == Kind::Clear || r.stale_book() == Some(StaleBook::PriceLevel) => {
                match self.books.binary_search_by_key(&r.instrument_id, |b| b.instrument_id) {
                    Ok(i) => self.books[i].apply(r),
                    Err(i) => {
                        if self.books.len() == self.capacity {
                            return Err(MbpError::Full { instrument_id: r.instrument_id, capacity: self.capacity });
                        }
                        let mut book = MbpBook::new(r.instrument_id);
                        book.apply(r)?;
                        self.books.insert(i, book);
                        Ok(())
                    }
                }
            }
            _ => Ok(()),
        }
    }

    /// The book of `instrument_id`, if a record made one.
    pub fn get(&self, instrument_id: u32) -> Option<&MbpBook> {
        self.books.binary_search_by_key(&instrument_id, |b| b.instrument_id).ok().map(|i| &self.books[i])
    }

    /// Every book, by ascending instrument id.
    pub fn iter(&self) -> impl Iterator<Item = &MbpBook> {
        self.books.iter()
    }

    /// Appends a snapshot of the books in `filter` (all when `None`), by ascending instrument id, each as
    /// [`MbpBook::snapshot_into`] writes it. Returns the number of books written.
    pub fn snapshot_into(&self, filter: Option<&[u32]>, out: &mut Vec<BookUpdate>) -> usize {
        let mut n = 0;
        for b in self.books.iter().filter(|b| filter.is_none_or(|f| f.contains(&b.instrument_id))) {
            b.snapshot_into(out);
            n += 1;
        }
        n
    }

    /// Number of books.
    pub fn len(&self) -> usize {
        self.books.len()
    }

    /// Whether no record made a book yet.
    pub fn is_empty(&self) -> bool {
        self.books.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lv(kind: Kind, side: Side, level: u8, price_e9: i64, size: u32) -> BookUpdate {
        BookUpdate {
            instrument_id: 5,
            price_e9,
            size,
            order_id: u64::from(size) + 100,
            level,
            side: side as u8,
            flags: flags::MBP,
            ..BookUpdate::control(kind)
        }
    }

    fn at(price_e9: i64, size: u32) -> Option<MbpLevel> {
        Some(MbpLevel { price_e9, size, orders: size + 100 })
    }

    fn prices(b: &MbpBook, side: Side) -> Vec<Option<i64>> {
        b.top(side, MBP_DEPTH).iter().map(|l| l.map(|l| l.price_e9)).collect()
    }

    #[test]
    fn a_snapshot_rebuilds_padded_implied_and_stale_books_exactly() {
        let mut b = MbpBook::new(5);
        b.apply(&lv(Kind::LevelNew, Side::Bid, 1, 100, 1)).unwrap();
        b.apply(&lv(Kind::LevelNew, Side::Bid, 4, 97, 4)).unwrap(); // padded: positions 2 and 3 unknown
        b.apply(&lv(Kind::LevelNew, Side::Ask, 1, 101, 2)).unwrap();
        let implied = BookUpdate { flags: flags::MBP | flags::IMPLIED, ..lv(Kind::LevelNew, Side::Ask, 2, 103, 6) };
        b.apply(&implied).unwrap();
        b.apply(&BookUpdate {
            venue_pos: crate::record::venue_position(77, 0),
            ..BookUpdate::stale(5, StaleBook::PriceLevel)
        })
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(b.snapshot_into(&mut out), 6, "Clear, 4 levels, InstrumentStale");
        let kinds: Vec<_> = out.iter().map(|r| r.kind().unwrap()).collect();
        use Kind::*;
        assert_eq!(kinds, [Clear, LevelNew, LevelNew, LevelNew, LevelNew, InstrumentStale]);
        assert_eq!(
            out.iter().map(|r| r.level).collect::<Vec<_>>(),
            [0, 1, 4, 1, 2, StaleBook::PriceLevel as u8],
            "the stale mark names its book"
        );
        assert!(out.iter().all(|r| r.flags & flags::SNAPSHOT != 0 && r.instrument_id == 5 && r.venue_seq() == 77));
        // applied to a book that held something else, it gives back the same levels and the stale mark
        let mut c = MbpBook::new(5);
        c.apply(&lv(Kind::LevelNew, Side::Bid, 1, 50, 9)).unwrap();
        for r in &out {
            c.apply(r).unwrap();
        }
        assert_eq!(c.sides, b.sides);
        assert_eq!(prices(&c, Side::Bid), [Some(100), None, None, Some(97), None, None, None, None, None, None]);
        assert!(c.is_stale());
        assert_eq!(c.implied_top(Side::Ask, 2), &[None, at(103, 6)]);
        // a book that is not stale has no stale record; MbpBooks filters by instrument
        let mut books = MbpBooks::with_capacity(4);
        books.apply(&lv(Kind::LevelNew, Side::Bid, 1, 100, 1)).unwrap();
        books.apply(&BookUpdate { instrument_id: 9, ..lv(Kind::LevelNew, Side::Ask, 1, 7, 1) }).unwrap();
        let mut out = Vec::new();
        assert_eq!(books.snapshot_into(Some(&[9]), &mut out), 1);
        assert_eq!(
            out.iter().map(|r| (r.instrument_id, r.kind().unwrap())).collect::<Vec<_>>(),
            [(9, Clear), (9, LevelNew)]
        );
    }

    #[test]
    fn new_change_delete_shift_as_cme_describes() {
        let mut b = MbpBook::new(5);
        for (i, p) in [100, 99, 98, 97, 96].into_iter().enumerate() {
            b.apply(&lv(Kind::LevelNew, Side::Bid, i as u8 + 1, p, 10 + i as u32)).unwrap();
        }
        // New at 2 pushes 99.. down
        b.apply(&lv(Kind::LevelNew, Side::Bid, 2, 995, 7)).unwrap();
        assert_eq!(b.top(Side::Bid, 3), &[at(100, 10), at(995, 7), at(99, 11)]);
        // Delete at 1 pulls everything up; the last position empties
        b.apply(&lv(Kind::LevelDelete, Side::Bid, 1, 100, 10)).unwrap();
        assert_eq!(
            prices(&b, Side::Bid),
            [Some(995), Some(99), Some(98), Some(97), Some(96), None, None, None, None, None]
        );
        b.apply(&lv(Kind::LevelChange, Side::Bid, 2, 99, 3)).unwrap();
        assert_eq!(b.level(Side::Bid, 2), at(99, 3));
        assert_eq!(b.bbo(), (at(995, 7), None));
        assert_eq!(b.records(), 8);
    }

    #[test]
    fn new_at_full_depth_drops_the_tenth_and_deep_updates_are_counted() {
        let mut b = MbpBook::new(5);
        for n in 1..=10u8 {
            b.apply(&lv(Kind::LevelNew, Side::Ask, n, i64::from(n), 1)).unwrap();
        }
        b.apply(&lv(Kind::LevelNew, Side::Ask, 1, 0, 1)).unwrap();
        assert_eq!(prices(&b, Side::Ask), (0..10).map(Some).collect::<Vec<_>>());
        b.apply(&lv(Kind::LevelNew, Side::Ask, 11, 50, 1)).unwrap();
        b.apply(&lv(Kind::LevelChange, Side::Ask, 12, 50, 1)).unwrap();
        assert_eq!(b.beyond_depth(), 2);
        assert_eq!(prices(&b, Side::Ask), (0..10).map(Some).collect::<Vec<_>>());
        assert!(b.top(Side::Bid, 10).iter().all(Option::is_none));
    }

    #[test]
    fn a_new_deeper_than_the_book_leaves_unknown_positions_empty() {
        let mut b = MbpBook::new(5);
        b.apply(&lv(Kind::LevelNew, Side::Bid, 3, 98, 1)).unwrap();
        assert_eq!(b.top(Side::Bid, 4), &[None, None, at(98, 1), None]);
        b.apply(&lv(Kind::LevelNew, Side::Bid, 1, 100, 2)).unwrap();
        assert_eq!(b.top(Side::Bid, 4), &[at(100, 2), None, None, at(98, 1)]);
    }

    #[test]
    fn delete_thru_and_delete_from() {
        let mut b = MbpBook::new(5);
        for n in 1..=6u8 {
            b.apply(&lv(Kind::LevelNew, Side::Ask, n, i64::from(n), 1)).unwrap();
            b.apply(&lv(Kind::LevelNew, Side::Bid, n, -i64::from(n), 1)).unwrap();
        }
        b.apply(&lv(Kind::LevelDeleteFrom, Side::Ask, 4, 0, 0)).unwrap();
        assert_eq!(prices(&b, Side::Ask)[..3], [Some(5), Some(6), None]);
        b.apply(&lv(Kind::LevelDeleteFrom, Side::Ask, 200, 0, 0)).unwrap();
        assert!(b.top(Side::Ask, 10).iter().all(Option::is_none));
        b.apply(&lv(Kind::LevelDeleteThru, Side::Bid, 0, 0, 0)).unwrap();
        assert!(b.top(Side::Bid, 10).iter().all(Option::is_none));
    }

    #[test]
    fn implied_levels_are_kept_apart() {
        let mut b = MbpBook::new(5);
        b.apply(&lv(Kind::LevelNew, Side::Bid, 1, 100, 1)).unwrap();
        let implied = BookUpdate { flags: flags::MBP | flags::IMPLIED, ..lv(Kind::LevelNew, Side::Bid, 1, 101, 2) };
        b.apply(&implied).unwrap();
        assert_eq!(b.top(Side::Bid, 1), &[at(100, 1)]);
        assert_eq!(b.implied_top(Side::Bid, 2), &[at(101, 2), None]);
    }

    #[test]
    fn stale_until_clear_and_bad_records_change_nothing() {
        let mut books = MbpBooks::with_capacity(2);
        books.apply(&lv(Kind::LevelNew, Side::Bid, 1, 100, 1)).unwrap();
        // An order book's stale mark is not a price-level book's: no book is made or marked.
        books.apply(&BookUpdate::stale(5, StaleBook::Order)).unwrap();
        books.apply(&BookUpdate::stale(6, StaleBook::Order)).unwrap();
        assert!(!books.get(5).unwrap().is_stale());
        assert!(books.get(6).is_none());
        books.apply(&lv(Kind::InstrumentStale, Side::None, StaleBook::PriceLevel as u8, 0, 0)).unwrap();
        assert!(books.get(5).unwrap().is_stale());
        let before = books.get(5).unwrap().clone();
        assert_eq!(
            books.apply(&BookUpdate {
                venue_pos: crate::record::venue_position(9, 0),
                ..lv(Kind::LevelNew, Side::Bid, 0, 1, 1)
            }),
            Err(MbpError::LevelZero { instrument_id: 5, kind: Kind::LevelNew, venue_seq: 9 })
        );
        assert!(matches!(
            books.apply(&lv(Kind::LevelChange, Side::None, 1, 1, 1)),
            Err(MbpError::BadSide { side: b'N', .. })
        ));
        assert_eq!(books.get(5), Some(&before));
        books.apply(&lv(Kind::Clear, Side::None, 0, 0, 0)).unwrap();
        let b = books.get(5).unwrap();
        assert!(!b.is_stale() && b.bbo() == (None, None));
        // order-level kinds are not for this book
        books.apply(&BookUpdate { instrument_id: 6, ..lv(Kind::Add, Side::Bid, 0, 1, 1) }).unwrap();
        assert!(books.get(6).is_none());
        // capacity: a third instrument is refused and makes no book
        books.apply(&BookUpdate { instrument_id: 1, ..lv(Kind::LevelNew, Side::Ask, 1, 1, 1) }).unwrap();
        assert_eq!(
            books.apply(&BookUpdate { instrument_id: 9, ..lv(Kind::LevelNew, Side::Ask, 1, 1, 1) }),
            Err(MbpError::Full { instrument_id: 9, capacity: 2 })
        );
        assert_eq!(books.iter().map(MbpBook::instrument_id).collect::<Vec<_>>(), [1, 5]);
        books.apply(&BookUpdate::control(Kind::SnapshotBegin)).unwrap();
        assert!(books.iter().all(|b| b.bbo() == (None, None) && b.is_stale()), "empty, unknown until covered");
        books.apply(&lv(Kind::Clear, Side::None, 0, 0, 0)).unwrap();
        let stale: Vec<u32> = books.iter().filter(|b| b.is_stale()).map(MbpBook::instrument_id).collect();
        assert_eq!(stale, [1], "the snapshot's Clear of 5 makes it known; 1, left out, stays unknown");
    }
}
