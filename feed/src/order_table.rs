//! [`OrderTable`]: an order-reference table for an order-level feed handler (ITCH 5.0's order reference
//! numbers), built for its access pattern: a million live orders, each message touching one of them at random,
//! so that nearly every lookup misses the cache.
//!
//! - Open addressing with linear probing, one 32-byte slot per order (two to a cache line, none across two): a
//!   lookup is one line, where a chained or grouped table reads two (control bytes, then the entry).
//! - The home slot is Fibonacci hashing of the reference XOR a random seed per table (one multiply, the product's
//!   top bits; Knuth, TAOCP vol. 3, 6.4): consecutive references, as a venue hands them out, land far apart, and
//!   references forged to collide cannot be chosen from outside.
//! - Removal shifts the entries after it back (TAOCP vol. 3, 6.4, Algorithm R): no tombstones, so probe lengths
//!   do not grow over a day of adds and deletes.
//! - A slot is in use when it carries the table's generation: emptying the table at a start of day is one
//!   increment, not a pass over its memory.
//! - [`OrderTable::prefetch`] starts the fetch of a reference's home slot, so that a feed handler that can see
//!   the next message overlaps its cache miss with the work on this one.
//!
//! The table grows (doubles, all entries placed again) when it is three quarters full; sized by
//! [`OrderTable::with_capacity`], it holds that many orders at most half full and never grows.

/// One slot: the key, the generation it was written in (in use when it is the table's), the value.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Slot<V> {
    key: u64,
    generation: u32,
    value: V,
}

/// Order reference → `V` (module docs). `V` is at most 20 bytes (a slot is 32, with the key and generation).
#[derive(Debug, Clone)]
pub struct OrderTable<V: Copy + Default> {
    slots: Box<[Slot<V>]>,
    mask: usize,
    /// `64 - log2(slots)`: the hash's top bits are the home slot.
    shift: u32,
    len: usize,
    /// The generation of the slots in use (never 0: a fresh or freed slot carries 0).
    generation: u32,
    /// The length past which an insert grows the table (three quarters of its slots).
    grow_at: usize,
    /// XORed into every key before it is hashed: random per table, so that the slots a key lands in cannot be
    /// known from outside (references forged to share one home slot would make every probe walk their run).
    seed: u64,
}

/// 2^64 / φ, odd: Fibonacci hashing's multiplier.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

impl<V: Copy + Default> OrderTable<V> {
    /// A table that holds `capacity` orders without growing, at most half full (slots: the power of two at or
    /// above twice `capacity`, 16 at least; 32 bytes each).
    pub fn with_capacity(capacity: usize) -> OrderTable<V> {
        use std::hash::{BuildHasher, Hasher};
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        OrderTable::with_capacity_and_seed(capacity, seed)
    }

    /// [`OrderTable::with_capacity`] with a seed of the caller's (tests: a reproducible layout).
    pub fn with_capacity_and_seed(capacity: usize, seed: u64) -> OrderTable<V> {
        const { assert!(std::mem::size_of::<Slot<V>>() == 32, "a value of at most 20 bytes") };
        let slots = capacity.saturating_mul(2).max(16).next_power_of_two();
        OrderTable {
            slots: vec![Slot { key: 0, generation: 0, value: V::default() }; slots].into_boxed_slice(),
            mask: slots - 1,
            shift: 64 - slots.trailing_zeros(),
            len: 0,
            generation: 1,
            grow_at: slots / 4 * 3,
            seed,
        }
    }

    /// Orders in the table.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no order.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        ((key ^ self.seed).wrapping_mul(FIBONACCI) >> self.shift) as usize
    }

    /// `Ok(slot)` holding `key`, or `Err(slot)`: the free slot where it would go.
    #[inline(always)]
    fn find(&self, key: u64) -> Result<usize, usize> {
        let mut i = self.home(key);
        loop {
            let s = &self.slots[i];
            if s.generation != self.generation {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Starts fetching the cache line `key` would be found in (its home slot); a hint, nothing is read.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        prefetch_read(std::ptr::from_ref(&self.slots[self.home(key)]).cast());
    }

    /// The value of `key`, to read or change in place.
    #[inline(always)]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        match self.find(key) {
            Ok(i) => Some(&mut self.slots[i].value),
            Err(_) => None,
        }
    }

    /// Inserts `key` → `value` if `key` is not in the table (returns true); a key already there is left as it
    /// is (returns false).
    #[inline(always)]
    pub fn insert_new(&mut self, key: u64, value: V) -> bool {
        let Err(mut i) = self.find(key) else { return false };
        if self.len >= self.grow_at {
            self.grow();
            let Err(j) = self.find(key) else { return false };
            i = j;
        }
        self.slots[i] = Slot { key, generation: self.generation, value };
        self.len += 1;
        true
    }

    /// Removes `key`, returning its value.
    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let i = self.find(key).ok()?;
        Some(self.remove_at(i))
    }

    /// Takes `f` to `key`'s value in place; removes the key if `f` returns true. Returns the value as `f` left it
    /// (`None`: no such key). One probe for both.
    #[inline(always)]
    pub fn update(&mut self, key: u64, f: impl FnOnce(&mut V) -> bool) -> Option<V> {
        let i = self.find(key).ok()?;
        let remove = f(&mut self.slots[i].value);
        let v = self.slots[i].value;
        if remove {
            self.remove_at(i);
        }
        Some(v)
    }

    /// Frees slot `i` (in use) and shifts back the entries of its run that may move into the hole (those whose
    /// home slot is not cyclically after the hole), so that every entry stays reachable from its home slot.
    #[inline(always)]
    fn remove_at(&mut self, i: usize) -> V {
        let value = self.slots[i].value;
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        while self.slots[j].generation == self.generation {
            let home = self.home(self.slots[j].key);
            // The entry at `j` may fill the hole if the hole lies on its probe path: from its home to `j`.
            if j.wrapping_sub(home) & self.mask >= j.wrapping_sub(hole) & self.mask {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.slots[hole].generation = 0;
        self.len -= 1;
        value
    }

    /// Empties the table (a start of day): one increment of the generation (a pass over the slots once every
    /// 2^32 - 1 clears, when it wraps).
    pub fn clear(&mut self) {
        self.len = 0;
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            for s in self.slots.iter_mut() {
                s.generation = 0;
            }
            self.generation = 1;
        }
    }

    /// Twice the slots, every entry placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let mut bigger = OrderTable::with_capacity_and_seed(self.slots.len(), self.seed);
        for s in self.slots.iter().filter(|s| s.generation == self.generation) {
            bigger.insert_new(s.key, s.value);
        }
        *self = bigger;
    }
}

/// Starts fetching `p`'s cache line into every cache level (`PREFETCHT0`); elsewhere, nothing.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_read(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHT0 is a hint: it reads no memory architecturally and never faults, whatever the address;
    // SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::OrderTable;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Take(u64, u32),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range (so that removes and takes hit) and from consecutive runs (as a venue's).
        let key = prop_oneof![0u64..64, 1_000_000u64..1_000_256, any::<u64>()];
        prop_oneof![
            8 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            4 => key.clone().prop_map(Op::Remove),
            4 => (key, 0u32..4).prop_map(|(k, v)| Op::Take(k, v)),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against `std`'s `HashMap`: the same answers to every operation, from a table small enough to grow
        /// and to wrap its probes around its end.
        #[test]
        fn the_table_answers_as_a_hash_map(ops in proptest::collection::vec(op(), 1..600)) {
            let mut t: OrderTable<u32> = OrderTable::with_capacity(4);
            let mut m: HashMap<u64, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let fresh = !m.contains_key(&k);
                        if fresh {
                            m.insert(k, v);
                        }
                        prop_assert_eq!(t.insert_new(k, v), fresh);
                    }
                    Op::Remove(k) => prop_assert_eq!(t.remove(k), m.remove(&k)),
                    Op::Take(k, n) => {
                        let want = m.get_mut(&k).map(|v| {
                            *v = v.saturating_sub(n);
                            *v
                        });
                        if want == Some(0) {
                            m.remove(&k);
                        }
                        let got = t.update(k, |v| {
                            *v = v.saturating_sub(n);
                            *v == 0
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Clear => {
                        t.clear();
                        m.clear();
                    }
                }
                prop_assert_eq!(t.len(), m.len());
            }
            for (k, v) in &m {
                prop_assert_eq!(t.get_mut(*k).copied(), Some(*v));
            }
        }
    }

    /// A table at its grow point grows for a new key only: a key already there changes nothing.
    #[test]
    fn only_a_new_key_grows_a_full_table() {
        let mut t: OrderTable<u32> = OrderTable::with_capacity_and_seed(0, 7);
        for k in 0..12 {
            assert!(t.insert_new(k, 1));
        }
        assert_eq!((t.slots.len(), t.grow_at, t.len()), (16, 12, 12));
        assert!(!t.insert_new(3, 2));
        assert_eq!((t.slots.len(), t.get_mut(3).copied()), (16, Some(1)));
        assert!(t.insert_new(12, 2));
        assert_eq!((t.slots.len(), t.len()), (32, 13));
        assert!((0..13).all(|k| t.get_mut(k).is_some()));
    }

    /// A million consecutive references (a venue's) in a table sized for them: placed without growing, every
    /// one found, and the longest probe short (Fibonacci hashing spreads runs evenly).
    #[test]
    fn consecutive_references_spread_and_need_no_growth() {
        for seed in [0, 0x5555_5555_5555_5555, 0xdead_beef_0bad_f00d, u64::MAX] {
            consecutive_references_spread(seed);
        }
    }

    fn consecutive_references_spread(seed: u64) {
        let mut t: OrderTable<u32> = OrderTable::with_capacity_and_seed(1 << 20, seed);
        let slots = t.slots.len();
        for k in 0..1u64 << 20 {
            assert!(t.insert_new(100_000_000 + k, k as u32));
        }
        assert_eq!((t.slots.len(), t.len()), (slots, 1 << 20));
        let longest = (0..1u64 << 20)
            .map(|k| {
                let key = 100_000_000 + k;
                let at = t.find(key).expect("found");
                at.wrapping_sub(t.home(key)) & t.mask
            })
            .max()
            .unwrap();
        assert!(longest < 16, "seed {seed:#x}: longest probe {longest}");
    }
}
