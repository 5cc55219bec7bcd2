//! A book for a strategy's hot path: [`HotBook`] (one instrument), [`HotBooks`] (many), sized up front with
//! [`BookCapacity`] so that replaying a feed allocates nothing.
//!
//! **Same book as the reference.** [`HotBook::apply`] and [`HotBooks::apply`] follow the replay rules of
//! [`crate::book`] (Databento's, from the DBN docs "Order book construction"; see data/README.md): `Add` adds,
//! `Cancel` removes the size it carries, `Modify` replaces price, size and side (and adds an order it does not
//! know), `Clear` empties, `Trade`/`Fill` leave the levels alone; `SnapshotBegin` empties every book of a
//! [`HotBooks`]. They accept and refuse exactly the records [`Book::apply`](crate::Book::apply) and
//! [`Books::apply`](crate::Books::apply) do, with the same [`BookError`]s, and a refused record leaves the book
//! unchanged. After every record the levels, counts and `last_*` fields equal the reference book's (tested
//! after every record of the bundled ESH4 capture, with injected clears, snapshots and replace pairs, and with
//! random records: feed/tests/hot_book_replay.rs, wire/tests/hot_book_props.rs). The reference book stays: it
//! is the one that writes snapshots ([`Books::snapshot`](crate::Books::snapshot)) and the one tests trust.
//!
//! **Layout.**
//! - Orders: an open-addressing table of our own keyed by `order_id`, one 24-byte slot per entry (order_id,
//!   price_e9, size, side) in a power-of-two array of at least twice [`BookCapacity::orders`] slots (load factor
//!   at most 1/2). Fibonacci hashing (`order_id × 2⁶⁴/φ`, the top bits: Knuth, TAOCP vol. 3, 6.4), linear
//!   probing, and backward-shift deletion (Knuth's Algorithm R): no tombstones, so deletions never force a
//!   rehash and the table never grows while the live orders fit. The hash is not keyed: it trusts the venue's
//!   order ids, as a feed handler does (no SipHash; a hostile sender could make probes long, never wrong).
//! - Levels: per side two parallel arrays (prices, and size + order count), sorted so that the **best level is
//!   the last element**: bids by ascending price, asks by descending price (stored as `!price_e9`, which reverses
//!   the order without overflow). The best price is the last element; most activity is near the best, so an
//!   insert or removal moves only the few levels better than it.
//!
//! **Cost per record** (L levels on the side, d = the level's distance from the best, 0 at the best):
//!
//! | step | cost |
//! |---|---|
//! | order lookup, insert, delete | O(1) expected (about 1.5 probes for a hit at load 1/2) |
//! | level of a price | O(1) at the best, else O(log L) binary search over 8-byte prices |
//! | a new or emptied level | plus a move of the d better levels (d × 24 bytes) |
//! | `Clear` | O(order-table slots): a fill of the table, about 9 µs at the default capacity (2× the reference's; a rare record) |
//! | [`HotBook::bbo`], [`HotBook::level`], counts | O(1) |
//! | [`HotBook::levels`] (MBP-N: `.take(n)`), [`HotBook::top_into`] | O(n), no allocation |
//!
//! **Capacity.** [`BookCapacity`] says how many orders and levels per side one book holds, and how many
//! instruments a [`HotBooks`] pre-builds books for. Within it, nothing allocates: not `apply` (any record,
//! including refused ones, `Clear` and `SnapshotBegin`), not the views. Beyond it the book **grows** rather than
//! refuses: the order table doubles and rehashes, a level array reallocates, a [`HotBooks`] builds a book for an
//! instrument past its count. That record allocates (and a table doubling costs O(orders) once), but the book
//! stays exact: refusing would leave it wrong for the rest of the session. [`HotBook::growths`] and
//! [`HotBooks::growths`] count these events so a strategy can log them and size up; 0 after a session means
//! nothing was allocated after construction. feed/tests/hot_book_alloc.rs replays ESH4 under a counting global
//! allocator and asserts zero allocations from the first record on.
//!
//! Units: prices in 1e-9 (as [`BookUpdate::price_e9`]), sizes in contracts (shares), timestamps ns since the UNIX
//! epoch.

use std::fmt;

use crate::book::{BookError, Level};
use crate::record::{BookUpdate, Kind, Side};

/// How much one book holds without allocating, and how many books a [`HotBooks`] builds up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BookCapacity {
    /// Resting orders per instrument. The order table gets the next power of two of at least twice this many
    /// slots, 24 bytes each.
    pub orders: usize,
    /// Price levels per side per instrument (24 bytes each).
    pub levels_per_side: usize,
    /// Instruments [`HotBooks`] builds books for in advance (ignored by [`HotBook`]).
    pub instruments: usize,
}

impl BookCapacity {
    /// A capacity of `orders` resting orders and `levels_per_side` levels per side per instrument, for
    /// `instruments` instruments.
    pub const fn new(orders: usize, levels_per_side: usize, instruments: usize) -> BookCapacity {
        BookCapacity { orders, levels_per_side, instruments }
    }

    /// Order-table slots of one book: a power of two, at least `2 × orders` (and at least 8).
    pub const fn order_slots(&self) -> usize {
        IdMap::<RestingOrder>::slots_for(self.orders)
    }

    /// Bytes one book takes: its order table plus both level arrays.
    pub const fn bytes_per_book(&self) -> usize {
        self.order_slots() * ORDER_SLOT_BYTES + 2 * self.levels_per_side * LEVEL_BYTES
    }
}

impl Default for BookCapacity {
    /// One instrument of 16,384 orders and 2,048 levels per side: about 0.9 MiB, room for an outright CME
    /// future (the bundled ESH4 session peaks at 11,237 resting orders, 928 bid and 575 ask levels).
    fn default() -> BookCapacity {
        BookCapacity::new(16_384, 2_048, 1)
    }
}

/// Bytes per order-table slot (`Option<(u64, RestingOrder)>`; the `Option` lives in [`Side`]'s spare values).
const ORDER_SLOT_BYTES: usize = 24;
/// Bytes per level: an 8-byte price and a 16-byte size + order count.
const LEVEL_BYTES: usize = 24;

/// One resting order as the book holds it ([`HotBook::order`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestingOrder {
    /// Price in units of 1e-9.
    pub price_e9: i64,
    /// Quantity resting (what is left after partial cancels).
    pub size: u32,
    /// [`Side::Bid`] or [`Side::Ask`].
    pub side: Side,
}

// ---------------------------------------------------------------------------------------------------------------
// Order table

/// 2⁶⁴ / φ, odd: Fibonacci hashing spreads consecutive and strided ids over the whole table.
const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

/// An open-addressing map from u64 keys to `V`: linear probing, backward-shift deletion, load ≤ 1/2.
#[derive(Clone)]
struct IdMap<V: Copy> {
    /// A power of two long, never full (at most half used).
    slots: Vec<Option<(u64, V)>>,
    /// 64 − log2(slots.len()): the hash's top bits index the table.
    shift: u32,
    len: usize,
    /// Times the table doubled.
    growths: u64,
}

/// Where a key is, or where it would go.
#[derive(Clone, Copy)]
struct Probe {
    index: usize,
    found: bool,
}

impl<V: Copy> IdMap<V> {
    const fn slots_for(entries: usize) -> usize {
        let n = if entries < 4 { 4 } else { entries };
        match n.checked_mul(2) {
            Some(m) => match m.checked_next_power_of_two() {
                Some(slots) => slots,
                None => panic!("BookCapacity: too many orders for one table"),
            },
            None => panic!("BookCapacity: too many orders for one table"),
        }
    }

    fn with_capacity(entries: usize) -> IdMap<V> {
        let slots = Self::slots_for(entries);
        IdMap { slots: vec![None; slots], shift: 64 - slots.trailing_zeros(), len: 0, growths: 0 }
    }

    /// Entries it holds without growing.
    fn capacity(&self) -> usize {
        self.slots.len() / 2
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(FIB) >> self.shift) as usize
    }

    #[inline]
    fn probe(&self, key: u64) -> Probe {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match &self.slots[i] {
                Some((k, _)) if *k == key => return Probe { index: i, found: true },
                Some(_) => i = (i + 1) & mask,
                None => return Probe { index: i, found: false },
            }
        }
    }

    #[inline]
    fn get(&self, key: u64) -> Option<&V> {
        let p = self.probe(key);
        if p.found {
            self.slots[p.index].as_ref().map(|(_, v)| v)
        } else {
            None
        }
    }

    /// The value at a slot `probe` found.
    #[inline]
    fn at_mut(&mut self, index: usize) -> &mut V {
        match &mut self.slots[index] {
            Some((_, v)) => v,
            None => unreachable!("IdMap: slot {index} is empty"),
        }
    }

    /// Puts `key` (absent) into the empty slot `p` found; doubles the table first when it is half full.
    #[inline]
    fn insert_vacant(&mut self, mut p: Probe, key: u64, value: V) {
        debug_assert!(!p.found);
        if self.len == self.capacity() {
            self.grow();
            p = self.probe(key);
        }
        self.slots[p.index] = Some((key, value));
        self.len += 1;
    }

    /// Inserts or replaces; the old value if there was one.
    #[cfg(test)]
    fn insert(&mut self, key: u64, value: V) -> Option<V> {
        let p = self.probe(key);
        if p.found {
            Some(std::mem::replace(self.at_mut(p.index), value))
        } else {
            self.insert_vacant(p, key, value);
            None
        }
    }

    #[cfg(test)]
    fn remove(&mut self, key: u64) -> Option<V> {
        let p = self.probe(key);
        if !p.found {
            return None;
        }
        let v = *self.at_mut(p.index);
        self.remove_at(p.index);
        Some(v)
    }

    /// Empties the slot at `hole` and shifts back the entries of its probe run that may move into it, so every
    /// entry stays reachable from its home slot without tombstones.
    #[inline]
    fn remove_at(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        self.slots[hole] = None;
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some((key, _)) = self.slots[j] else { return };
            // The entry at j may fill the hole if the hole lies on its probe path, home..=j (cyclically).
            let home = self.home(key);
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
        }
    }

    fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(None);
            self.len = 0;
        }
    }

    /// Doubles the table and re-inserts every entry (allocates: only past the capacity).
    #[cold]
    fn grow(&mut self) {
        let bigger = vec![None; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        self.shift -= 1;
        self.growths += 1;
        for (key, value) in old.into_iter().flatten() {
            let p = self.probe(key);
            self.slots[p.index] = Some((key, value));
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.slots.iter().flatten().map(|(k, v)| (*k, v))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Levels

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Agg {
    size: u64,
    orders: u32,
}

/// One side's levels, best last.
struct Ladder {
    /// `price_e9 ^ flip`, strictly ascending: the best level is the last.
    keys: Vec<i64>,
    /// `aggs[i]` is the level at `keys[i]`.
    aggs: Vec<Agg>,
    /// 0 for bids (best = highest price); -1 (all ones) for asks, whose keys `!price_e9` put the lowest price last.
    flip: i64,
    /// Times an array reallocated.
    growths: u64,
}

/// A copy keeps the capacity (a derived `Clone` would give arrays just as long as the levels).
impl Clone for Ladder {
    fn clone(&self) -> Ladder {
        let mut copy = Ladder::with_capacity(self.flip, self.keys.capacity().min(self.aggs.capacity()));
        copy.keys.extend_from_slice(&self.keys);
        copy.aggs.extend_from_slice(&self.aggs);
        copy.growths = self.growths;
        copy
    }
}

impl Ladder {
    fn with_capacity(flip: i64, levels: usize) -> Ladder {
        Ladder { keys: Vec::with_capacity(levels), aggs: Vec::with_capacity(levels), flip, growths: 0 }
    }

    /// `Ok(index)` of the level at `price_e9`, or `Err(index)` where it would go.
    #[inline]
    fn find(&self, price_e9: i64) -> Result<usize, usize> {
        let key = price_e9 ^ self.flip;
        let n = self.keys.len();
        // At or beyond the best: no search.
        match self.keys.last() {
            None => return Err(0),
            Some(&best) if best == key => return Ok(n - 1),
            Some(&best) if best < key => return Err(n),
            Some(_) => {}
        }
        let i = self.keys[..n - 1].partition_point(|&k| k < key);
        if self.keys[i] == key {
            Ok(i)
        } else {
            Err(i)
        }
    }

    #[inline]
    fn add(&mut self, price_e9: i64, size: u32) {
        match self.find(price_e9) {
            Ok(i) => {
                let a = &mut self.aggs[i];
                a.size += size as u64;
                a.orders += 1;
            }
            Err(i) => {
                if self.keys.len() == self.keys.capacity() || self.aggs.len() == self.aggs.capacity() {
                    self.growths += 1;
                }
                self.keys.insert(i, price_e9 ^ self.flip);
                self.aggs.insert(i, Agg { size: size as u64, orders: 1 });
            }
        }
    }

    /// Takes `size` off the level at `price_e9`, and one order when `remove_order`; the level goes when it has
    /// no order left (as the reference book's `level_sub`).
    #[inline]
    fn sub(&mut self, price_e9: i64, size: u32, remove_order: bool) {
        if let Ok(i) = self.find(price_e9) {
            let a = &mut self.aggs[i];
            a.size -= size as u64;
            if remove_order {
                a.orders -= 1;
            }
            if a.orders == 0 {
                self.keys.remove(i);
                self.aggs.remove(i);
            }
        }
    }

    /// One order's size at `price_e9` goes from `old` to `new` (a modify that stays at its price).
    #[inline]
    fn resize(&mut self, price_e9: i64, old: u32, new: u32) {
        if let Ok(i) = self.find(price_e9) {
            let a = &mut self.aggs[i];
            a.size = a.size - old as u64 + new as u64;
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.aggs.clear();
    }

    #[inline]
    fn level_at(&self, i: usize) -> Level {
        let a = self.aggs[i];
        Level { price_e9: self.keys[i] ^ self.flip, size: a.size, orders: a.orders }
    }

    #[inline]
    fn depth(&self, depth: usize) -> Option<Level> {
        let i = self.keys.len().checked_sub(depth + 1)?;
        Some(self.level_at(i))
    }

    fn iter(&self) -> LevelIter<'_> {
        LevelIter { keys: &self.keys, aggs: &self.aggs, flip: self.flip }
    }
}

/// One side's levels, best first (highest bid, lowest ask), borrowed from the book: [`HotBook::levels`].
/// Exact-size and double-ended (`.rev()` gives worst first); `.take(n)` is an MBP-N view.
#[derive(Clone)]
pub struct LevelIter<'a> {
    keys: &'a [i64],
    aggs: &'a [Agg],
    flip: i64,
}

impl Iterator for LevelIter<'_> {
    type Item = Level;

    #[inline]
    fn next(&mut self) -> Option<Level> {
        let (&key, keys) = self.keys.split_last()?;
        let (agg, aggs) = self.aggs.split_last()?;
        (self.keys, self.aggs) = (keys, aggs);
        Some(Level { price_e9: key ^ self.flip, size: agg.size, orders: agg.orders })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.keys.len(), Some(self.keys.len()))
    }
}

impl DoubleEndedIterator for LevelIter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Level> {
        let (&key, keys) = self.keys.split_first()?;
        let (agg, aggs) = self.aggs.split_first()?;
        (self.keys, self.aggs) = (keys, aggs);
        Some(Level { price_e9: key ^ self.flip, size: agg.size, orders: agg.orders })
    }
}

impl ExactSizeIterator for LevelIter<'_> {}

impl fmt::Debug for LevelIter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// HotBook

/// One instrument's book, pre-allocated: the reference [`Book`](crate::Book)'s results with no allocation per
/// record (module docs). A clone has the same capacity.
#[derive(Clone)]
pub struct HotBook {
    orders: IdMap<RestingOrder>,
    bids: Ladder,
    asks: Ladder,
    /// The venue seq of the last record applied ([`BookUpdate::venue_seq`]).
    pub last_venue_seq: u64,
    /// ts_recv_ns of the last record applied.
    pub last_ts_recv_ns: u64,
    /// ts_event_ns of the last record applied.
    pub last_ts_event_ns: u64,
    /// Records applied (including trades and fills, which leave the levels alone).
    pub records: u64,
}

impl Default for HotBook {
    /// A book of [`BookCapacity::default`].
    fn default() -> HotBook {
        HotBook::with_capacity(BookCapacity::default())
    }
}

impl fmt::Debug for HotBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotBook")
            .field("orders", &self.order_count())
            .field("bid_levels", &self.bids.keys.len())
            .field("ask_levels", &self.asks.keys.len())
            .field("bbo", &self.bbo())
            .field("last_venue_seq", &self.last_venue_seq)
            .field("last_ts_recv_ns", &self.last_ts_recv_ns)
            .field("last_ts_event_ns", &self.last_ts_event_ns)
            .field("records", &self.records)
            .field("capacity", &self.capacity())
            .field("growths", &self.growths())
            .finish()
    }
}

#[inline]
fn order_side(r: &BookUpdate) -> Result<Side, BookError> {
    match r.side() {
        Some(s @ (Side::Bid | Side::Ask)) => Ok(s),
        _ => Err(BookError::BadSide { instrument_id: r.instrument_id, order_id: r.order_id, side: r.side }),
    }
}

impl HotBook {
    /// An empty book of [`BookCapacity::default`] (16,384 orders, 2,048 levels per side).
    pub fn new() -> HotBook {
        HotBook::default()
    }

    /// An empty book holding `capacity.orders` orders and `capacity.levels_per_side` levels per side without
    /// allocating (`capacity.instruments` is ignored). Allocates [`BookCapacity::bytes_per_book`] bytes now.
    pub fn with_capacity(capacity: BookCapacity) -> HotBook {
        HotBook {
            orders: IdMap::with_capacity(capacity.orders),
            bids: Ladder::with_capacity(0, capacity.levels_per_side),
            asks: Ladder::with_capacity(-1, capacity.levels_per_side),
            last_venue_seq: 0,
            last_ts_recv_ns: 0,
            last_ts_event_ns: 0,
            records: 0,
        }
    }

    #[inline]
    fn ladder_mut(&mut self, side: Side) -> &mut Ladder {
        if side == Side::Bid {
            &mut self.bids
        } else {
            &mut self.asks
        }
    }

    #[inline]
    fn ladder(&self, side: Side) -> Option<&Ladder> {
        match side {
            Side::Bid => Some(&self.bids),
            Side::Ask => Some(&self.asks),
            Side::None => None,
        }
    }

    /// Applies one record with the rules of [`crate::book`]: the same result, the same levels and the same
    /// [`BookError`] as [`Book::apply`](crate::Book::apply). No allocation within the capacity; O(1) expected for
    /// the order, O(1) to O(log L) for the level (module docs).
    ///
    /// # Errors
    /// [`BookError`] for a record that contradicts the book; the book is then unchanged.
    #[inline]
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        let kind = r.kind().ok_or(BookError::BadKind { instrument_id: r.instrument_id, kind: r.kind })?;
        match kind {
            Kind::Add => {
                let side = order_side(r)?;
                let p = self.orders.probe(r.order_id);
                if p.found {
                    return Err(BookError::DuplicateOrder {
                        instrument_id: r.instrument_id,
                        order_id: r.order_id,
                        venue_seq: r.venue_seq(),
                    });
                }
                self.orders.insert_vacant(p, r.order_id, RestingOrder { price_e9: r.price_e9, size: r.size, side });
                self.ladder_mut(side).add(r.price_e9, r.size);
            }
            Kind::Cancel => {
                let p = self.orders.probe(r.order_id);
                if !p.found {
                    return Err(BookError::UnknownOrder {
                        instrument_id: r.instrument_id,
                        order_id: r.order_id,
                        venue_seq: r.venue_seq(),
                    });
                }
                let order = *self.orders.at_mut(p.index);
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
                self.ladder_mut(order.side).sub(order.price_e9, r.size, left == 0);
                if left == 0 {
                    self.orders.remove_at(p.index);
                } else {
                    self.orders.at_mut(p.index).size = left;
                }
            }
            Kind::Modify => {
                let side = order_side(r)?;
                let new = RestingOrder { price_e9: r.price_e9, size: r.size, side };
                let p = self.orders.probe(r.order_id);
                if p.found {
                    let old = std::mem::replace(self.orders.at_mut(p.index), new);
                    if old.side == side && old.price_e9 == r.price_e9 {
                        // Same level: the reference's remove-then-add, in place.
                        self.ladder_mut(side).resize(r.price_e9, old.size, r.size);
                    } else {
                        self.ladder_mut(old.side).sub(old.price_e9, old.size, true);
                        self.ladder_mut(side).add(r.price_e9, r.size);
                    }
                } else {
                    self.orders.insert_vacant(p, r.order_id, new);
                    self.ladder_mut(side).add(r.price_e9, r.size);
                }
            }
            Kind::Clear => {
                self.orders.clear();
                self.bids.clear();
                self.asks.clear();
            }
            Kind::Trade | Kind::Fill | Kind::NoAction => {}
            Kind::SnapshotBegin | Kind::SnapshotEnd | Kind::Heartbeat | Kind::EndOfStream => return Ok(()),
            // Price-level records belong to a price-level book (`crate::mbp`), as in the reference.
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
        self.last_ts_recv_ns = r.ts_recv_ns;
        self.last_ts_event_ns = r.ts_event_ns;
        self.records += 1;
        Ok(())
    }

    /// Empties the book and zeroes `last_*` and `records`, as a new book, keeping its memory (and its
    /// [`growths`](HotBook::growths) count). O(order-table slots) when it held orders.
    pub fn reset(&mut self) {
        self.orders.clear();
        self.bids.clear();
        self.asks.clear();
        self.last_venue_seq = 0;
        self.last_ts_recv_ns = 0;
        self.last_ts_event_ns = 0;
        self.records = 0;
    }

    /// Resting orders. O(1).
    #[inline]
    pub fn order_count(&self) -> usize {
        self.orders.len
    }

    /// One resting order by its id. O(1) expected.
    #[inline]
    pub fn order(&self, order_id: u64) -> Option<RestingOrder> {
        self.orders.get(order_id).copied()
    }

    /// Every resting order, in table order (no particular order; no queue priority). O(order-table slots).
    pub fn orders(&self) -> impl Iterator<Item = (u64, RestingOrder)> + '_ {
        self.orders.iter().map(|(id, o)| (id, *o))
    }

    /// Price levels on one side (`Side::None` counts 0). O(1).
    #[inline]
    pub fn level_count(&self, side: Side) -> usize {
        self.ladder(side).map_or(0, |l| l.keys.len())
    }

    /// The best level of one side (highest bid, lowest ask); `None` when the side is empty or `Side::None`. O(1).
    #[inline]
    pub fn best(&self, side: Side) -> Option<Level> {
        self.level(side, 0)
    }

    /// Best bid and best ask, if any (as [`Book::bbo`](crate::Book::bbo)). O(1).
    #[inline]
    pub fn bbo(&self) -> (Option<Level>, Option<Level>) {
        (self.bids.depth(0), self.asks.depth(0))
    }

    /// The level `depth` places from the best (0 is the best) of one side, if there are that many. O(1).
    #[inline]
    pub fn level(&self, side: Side, depth: usize) -> Option<Level> {
        self.ladder(side)?.depth(depth)
    }

    /// All levels of one side, best first, borrowed: `levels(side).take(n)` is the MBP-N view
    /// ([`Book::top`](crate::Book::top) without the `Vec`). Empty for `Side::None`. O(1) to create, O(1) per level.
    #[inline]
    pub fn levels(&self, side: Side) -> LevelIter<'_> {
        match self.ladder(side) {
            Some(l) => l.iter(),
            None => LevelIter { keys: &[], aggs: &[], flip: 0 },
        }
    }

    /// Copies the best `out.len()` levels of one side into `out`, best first; returns how many there were
    /// (the rest of `out` is left alone). An MBP-N snapshot into a caller's fixed buffer. O(out.len()).
    #[inline]
    pub fn top_into(&self, side: Side, out: &mut [Level]) -> usize {
        let mut n = 0;
        for (slot, level) in out.iter_mut().zip(self.levels(side)) {
            *slot = level;
            n += 1;
        }
        n
    }

    /// What the book holds without allocating (`instruments` is 1). It is larger than it was built with after a
    /// growth.
    pub fn capacity(&self) -> BookCapacity {
        BookCapacity {
            orders: self.orders.capacity(),
            levels_per_side: self.bids.keys.capacity().min(self.asks.keys.capacity()),
            instruments: 1,
        }
    }

    /// Times this book allocated since it was built because a record did not fit its capacity (order table
    /// doublings plus level-array reallocations). 0 means no allocation after construction.
    pub fn growths(&self) -> u64 {
        self.orders.growths + self.bids.growths + self.asks.growths
    }
}

// ---------------------------------------------------------------------------------------------------------------
// HotBooks

/// Books for many instruments keyed by instrument_id, pre-built: the reference [`Books`](crate::Books)'s results
/// with no allocation per record (module docs).
///
/// [`HotBooks::with_capacity`] builds `instruments` empty books up front; an instrument's first record takes one
/// (no allocation). `SnapshotBegin` empties every book and puts them back for reuse, as the reference drops
/// them: [`HotBooks::get`] then returns `None` until the instrument's next record. Instruments are found through
/// an open-addressing table of their ids (O(1) expected). A clone has the same capacity (and allocates it all).
pub struct HotBooks {
    /// instrument_id → index into `books`.
    index: IdMap<u32>,
    /// The instruments seen since the last `SnapshotBegin`, in first-seen order.
    books: Vec<(u32, HotBook)>,
    /// Empty books ready for new instruments.
    spare: Vec<HotBook>,
    /// What each book is built with.
    per_book: BookCapacity,
    /// Books built past `per_book.instruments`, and reallocations of `books`/`spare`.
    growths: u64,
}

impl Clone for HotBooks {
    fn clone(&self) -> HotBooks {
        let mut books = Vec::with_capacity(self.books.capacity());
        books.extend(self.books.iter().cloned());
        let mut spare = Vec::with_capacity(self.spare.capacity());
        spare.extend(self.spare.iter().cloned());
        HotBooks { index: self.index.clone(), books, spare, per_book: self.per_book, growths: self.growths }
    }
}

impl Default for HotBooks {
    /// Books of [`BookCapacity::default`] (one instrument).
    fn default() -> HotBooks {
        HotBooks::with_capacity(BookCapacity::default())
    }
}

impl fmt::Debug for HotBooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotBooks")
            .field("books", &self.books)
            .field("spare", &self.spare.len())
            .field("capacity", &self.per_book)
            .field("growths", &self.growths())
            .finish()
    }
}

impl HotBooks {
    /// Books of [`BookCapacity::default`] (one instrument, 16,384 orders, 2,048 levels per side).
    pub fn new() -> HotBooks {
        HotBooks::default()
    }

    /// `capacity.instruments` empty books of `capacity.orders` orders and `capacity.levels_per_side` levels per
    /// side, all allocated now (`instruments ×` [`BookCapacity::bytes_per_book`] bytes).
    pub fn with_capacity(capacity: BookCapacity) -> HotBooks {
        HotBooks {
            index: IdMap::with_capacity(capacity.instruments),
            books: Vec::with_capacity(capacity.instruments),
            spare: (0..capacity.instruments).map(|_| HotBook::with_capacity(capacity)).collect(),
            per_book: capacity,
            growths: 0,
        }
    }

    /// Applies a record to its instrument's book, taking a pre-built book on first sight. `SnapshotBegin`
    /// empties every book (the snapshot that follows holds every instrument of the stream); snapshot end,
    /// heartbeats and end of stream are ignored. As [`Books::apply`](crate::Books::apply), record for record.
    ///
    /// # Errors
    /// As [`HotBook::apply`]; a refused first record of an instrument leaves no book behind.
    #[inline]
    pub fn apply(&mut self, r: &BookUpdate) -> Result<(), BookError> {
        match r.kind() {
            Some(Kind::SnapshotBegin) => {
                self.reset();
                Ok(())
            }
            Some(Kind::SnapshotEnd | Kind::Heartbeat | Kind::EndOfStream) => Ok(()),
            // Price-level records (for `crate::mbp::MbpBooks`) are ignored, without taking a book, as in `Books`.
            Some(k)
                if k.is_level() || k == Kind::InstrumentStale || k == Kind::TradingStatus || k == Kind::FeedStatus =>
            {
                Ok(())
            }
            _ => {
                let p = self.index.probe(r.instrument_id as u64);
                if p.found {
                    let i = *self.index.at_mut(p.index) as usize;
                    return self.books[i].1.apply(r);
                }
                self.first_record(p, r)
            }
        }
    }

    /// An instrument's first record: into a spare book, kept only if the record is accepted.
    #[cold]
    fn first_record(&mut self, p: Probe, r: &BookUpdate) -> Result<(), BookError> {
        let mut book = match self.spare.pop() {
            Some(book) => book,
            None => {
                self.growths += 1;
                HotBook::with_capacity(self.per_book)
            }
        };
        if let Err(e) = book.apply(r) {
            // Refused: the book is still empty.
            if self.spare.len() == self.spare.capacity() {
                self.growths += 1;
            }
            self.spare.push(book);
            return Err(e);
        }
        if self.books.len() == self.books.capacity() {
            self.growths += 1;
        }
        self.index.insert_vacant(p, r.instrument_id as u64, self.books.len() as u32);
        self.books.push((r.instrument_id, book));
        Ok(())
    }

    /// Drops every instrument (as `SnapshotBegin` does): each book is emptied and kept for reuse.
    pub fn reset(&mut self) {
        for (_, mut book) in self.books.drain(..) {
            book.reset();
            if self.spare.len() == self.spare.capacity() {
                self.growths += 1;
            }
            self.spare.push(book);
        }
        self.index.clear();
    }

    /// One instrument's book. O(1) expected.
    #[inline]
    pub fn get(&self, instrument_id: u32) -> Option<&HotBook> {
        let i = *self.index.get(instrument_id as u64)?;
        Some(&self.books[i as usize].1)
    }

    /// The books, in the order their instruments first appeared (since the last `SnapshotBegin`).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, &HotBook)> + '_ {
        self.books.iter().map(|(id, b)| (*id, b))
    }

    /// Instruments with a book.
    pub fn len(&self) -> usize {
        self.books.len()
    }

    /// Whether no instrument has a book.
    pub fn is_empty(&self) -> bool {
        self.books.is_empty()
    }

    /// What each book was built with, and how many were built up front.
    pub fn capacity(&self) -> BookCapacity {
        self.per_book
    }

    /// Times these books allocated since they were built because a record did not fit the capacity: the books'
    /// own [`HotBook::growths`], books built for instruments past `capacity.instruments`, and growth of the
    /// instrument table. 0 means no allocation after construction.
    pub fn growths(&self) -> u64 {
        let books: u64 =
            self.books.iter().map(|(_, b)| b.growths()).chain(self.spare.iter().map(HotBook::growths)).sum();
        self.growths + self.index.growths + books
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::{Book, Books};
    use std::collections::HashMap;

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

    fn same(hot: &HotBook, reference: &Book) {
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(hot.levels(side).collect::<Vec<_>>(), reference.top(side, usize::MAX), "{side:?}");
            assert_eq!(hot.level_count(side), reference.level_count(side));
        }
        assert_eq!(hot.bbo(), reference.bbo());
        assert_eq!(hot.order_count(), reference.order_count());
        assert_eq!(
            (hot.last_venue_seq, hot.last_ts_recv_ns, hot.last_ts_event_ns, hot.records),
            (reference.last_venue_seq, reference.last_ts_recv_ns, reference.last_ts_event_ns, reference.records)
        );
    }

    #[test]
    fn slots_are_24_bytes_as_documented() {
        assert_eq!(std::mem::size_of::<Option<(u64, RestingOrder)>>(), ORDER_SLOT_BYTES);
        assert_eq!(std::mem::size_of::<i64>() + std::mem::size_of::<Agg>(), LEVEL_BYTES);
        assert_eq!(BookCapacity::new(11_300, 1_000, 1).order_slots(), 32_768);
        assert_eq!(BookCapacity::new(0, 0, 0).order_slots(), 8);
        assert_eq!(BookCapacity::default().bytes_per_book(), 32_768 * 24 + 2 * 2_048 * 24);
    }

    #[test]
    fn levels_are_best_first_on_both_sides_with_o1_depth() {
        let mut b = HotBook::with_capacity(BookCapacity::new(8, 2, 1));
        for r in [
            rec(Kind::Add, Side::Bid, 1, 100, 5),
            rec(Kind::Add, Side::Bid, 2, 100, 3),
            rec(Kind::Add, Side::Bid, 3, 99, 4),
            rec(Kind::Add, Side::Ask, 4, 101, 2),
            rec(Kind::Add, Side::Ask, 5, 102, 6),
        ] {
            b.apply(&r).unwrap();
        }
        assert_eq!(b.levels(Side::Bid).collect::<Vec<_>>(), [lvl(100, 8, 2), lvl(99, 4, 1)]);
        assert_eq!(b.levels(Side::Ask).collect::<Vec<_>>(), [lvl(101, 2, 1), lvl(102, 6, 1)]);
        assert_eq!(b.levels(Side::Ask).rev().collect::<Vec<_>>(), [lvl(102, 6, 1), lvl(101, 2, 1)]);
        assert_eq!(b.levels(Side::Bid).len(), 2);
        assert_eq!(b.levels(Side::None).count(), 0);
        assert_eq!(b.bbo(), (Some(lvl(100, 8, 2)), Some(lvl(101, 2, 1))));
        assert_eq!(
            (b.level(Side::Bid, 1), b.level(Side::Bid, 2), b.best(Side::None)),
            (Some(lvl(99, 4, 1)), None, None)
        );
        let mut out = [Level::default(); 3];
        assert_eq!(b.top_into(Side::Ask, &mut out), 2);
        assert_eq!(out, [lvl(101, 2, 1), lvl(102, 6, 1), Level::default()]);
        assert_eq!(b.order(2), Some(RestingOrder { price_e9: 100 * PX, size: 3, side: Side::Bid }));
        assert_eq!(b.order(9), None);
        assert_eq!(b.growths(), 0);
    }

    #[test]
    fn extreme_prices_order_correctly_on_both_sides() {
        let (mut hot, mut reference) = (HotBook::new(), Book::new());
        let at = |id, side, price_e9| BookUpdate { price_e9, ..rec(Kind::Add, side, id, 0, 1) };
        for r in [
            at(1, Side::Bid, i64::MIN),
            at(2, Side::Bid, 0),
            at(3, Side::Bid, i64::MAX),
            at(4, Side::Ask, i64::MAX),
            at(5, Side::Ask, i64::MIN),
            at(6, Side::Ask, -1),
        ] {
            hot.apply(&r).unwrap();
            reference.apply(&r).unwrap();
            same(&hot, &reference);
        }
    }

    #[test]
    fn growing_past_the_capacity_keeps_the_book_exact_and_counts() {
        let (mut hot, mut reference) = (HotBook::with_capacity(BookCapacity::new(1, 1, 1)), Book::new());
        assert_eq!(hot.capacity(), BookCapacity::new(4, 1, 1));
        for i in 0..200u64 {
            let side = if i % 2 == 0 { Side::Bid } else { Side::Ask };
            let r = rec(Kind::Add, side, i, 100 + (i as i64 % 37) * if side == Side::Bid { -1 } else { 1 }, 1);
            hot.apply(&r).unwrap();
            reference.apply(&r).unwrap();
        }
        same(&hot, &reference);
        assert!(hot.growths() > 0);
        assert!(hot.capacity().orders >= 200 && hot.capacity().levels_per_side >= 37);
        // A clone keeps the capacity, not just the length.
        let sized = HotBook::with_capacity(BookCapacity::new(100, 50, 1));
        let mut copy = sized.clone();
        assert_eq!(copy.capacity(), BookCapacity::new(128, 50, 1));
        for i in 0..50 {
            copy.apply(&rec(Kind::Add, Side::Ask, i, 100 + i as i64, 1)).unwrap();
        }
        assert_eq!(copy.growths(), 0);
        // HotBooks: instruments past the pre-built count get a new book
        let mut books = HotBooks::with_capacity(BookCapacity::new(4, 4, 1));
        books.apply(&rec(Kind::Add, Side::Bid, 1, 100, 1)).unwrap();
        assert_eq!(books.growths(), 0);
        books.apply(&BookUpdate { instrument_id: 8, ..rec(Kind::Add, Side::Bid, 1, 100, 1) }).unwrap();
        assert!(books.growths() > 0);
        assert_eq!(books.len(), 2);
    }

    #[test]
    fn refused_records_match_the_reference_and_change_nothing() {
        let (mut hot, mut reference) = (HotBook::new(), Book::new());
        let ok = rec(Kind::Add, Side::Bid, 1, 100, 5);
        hot.apply(&ok).unwrap();
        reference.apply(&ok).unwrap();
        for bad in [
            rec(Kind::Cancel, Side::Bid, 9, 100, 1),
            rec(Kind::Cancel, Side::Bid, 1, 100, 6),
            rec(Kind::Add, Side::Ask, 1, 100, 1),
            rec(Kind::Add, Side::None, 3, 100, 1),
            rec(Kind::Modify, Side::None, 1, 100, 1),
            BookUpdate { side: b'x', ..rec(Kind::Modify, Side::Bid, 1, 100, 1) },
            BookUpdate { kind: 0, ..rec(Kind::Add, Side::Bid, 1, 100, 1) },
        ] {
            assert_eq!(hot.apply(&bad), reference.apply(&bad));
            assert!(hot.apply(&bad).is_err());
            same(&hot, &reference);
        }
        let mut books = HotBooks::new();
        assert!(books.apply(&rec(Kind::Cancel, Side::Bid, 9, 100, 1)).is_err());
        assert!(books.get(7).is_none() && books.is_empty());
        assert_eq!(books.spare.len(), 1, "the refused record's book went back to the pool");
    }

    #[test]
    fn snapshot_begin_drops_every_book_and_reuses_it() {
        let mut books = HotBooks::with_capacity(BookCapacity::new(16, 8, 2));
        let mut reference = Books::new();
        for r in [
            rec(Kind::Add, Side::Bid, 1, 100, 5),
            BookUpdate { instrument_id: 8, ..rec(Kind::Trade, Side::None, 0, 100, 5) },
            BookUpdate { instrument_id: 9, ..rec(Kind::Clear, Side::None, 0, 0, 0) },
        ] {
            books.apply(&r).unwrap();
            reference.apply(&r).unwrap();
        }
        assert_eq!(books.iter().map(|(id, _)| id).collect::<Vec<_>>(), [7, 8, 9]);
        assert_eq!(books.get(8).unwrap().records, 1);
        assert!(books.growths() > 0, "three instruments, two pre-built");
        books.apply(&BookUpdate::control(Kind::SnapshotBegin)).unwrap();
        reference.apply(&BookUpdate::control(Kind::SnapshotBegin)).unwrap();
        assert!(books.is_empty() && books.get(7).is_none() && reference.get(7).is_none());
        assert_eq!(books.spare.len(), 3);
        let r = BookUpdate { venue_pos: crate::venue_position(5, 0), ..rec(Kind::Add, Side::Ask, 1, 101, 2) };
        books.apply(&r).unwrap();
        reference.apply(&r).unwrap();
        same(books.get(7).unwrap(), reference.get(7).unwrap());
    }

    #[test]
    fn the_order_table_agrees_with_a_hash_map_under_collisions_and_wraparound() {
        // Few distinct keys keep the table small (16 to 256 slots): long probe runs that wrap past the end,
        // inserts and deletes interleaved.
        for distinct in [5u64, 8, 12, 120] {
            let mut map: IdMap<u32> = IdMap::with_capacity(4);
            let mut model = HashMap::new();
            let mut x = 0x1234_5678_u64 + distinct;
            for step in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = (x % distinct) * (u64::MAX / distinct) + (x >> 60) % 2;
                if (x >> 32).is_multiple_of(3) {
                    assert_eq!(map.remove(key), model.remove(&key), "step {step}");
                } else {
                    assert_eq!(map.insert(key, step), model.insert(key, step), "step {step}");
                }
                assert_eq!(map.len, model.len());
                if step.is_multiple_of(97) {
                    for (k, v) in &model {
                        assert_eq!(map.get(*k), Some(v), "step {step} key {k}");
                    }
                    assert_eq!(map.iter().count(), model.len());
                }
            }
            map.clear();
            assert_eq!((map.len, map.iter().count(), map.get(0)), (0, 0, None));
        }
    }
}
