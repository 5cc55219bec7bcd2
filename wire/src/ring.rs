//! The subscriber ring: header, slots, and how `imm_data` carries the seq.
//!
//! A subscriber owns one ring per stream: a [`RingHeader`] followed by `slot_count` slots of
//! [`RECORD_SIZE_BYTES`] each. `slot_count` is a power of two and the record with seq `s` always lands in slot
//! `s & (slot_count - 1)` ([`slot_index`]). The publisher writes a record with one RDMA WRITE-with-immediate
//! (InfiniBand Architecture Spec vol. 1, 9.4.3 "RDMA WRITE" and 9.4.5 on the immediate) whose 32-bit
//! `imm_data` is the low 32 bits of the record's seq ([`imm_from_seq`]). The subscriber reaps the immediate
//! from its CQ, rebuilds the full 64-bit seq from the seq it expects next ([`seq_from_imm`]), and checks it
//! against the `seq` field of the slot before it trusts the slot.
//!
//! # Why a slot is read only after its completion
//!
//! RDMA gives no ordering guarantee for the bytes of a WRITE as they land in the responder's memory: a reader
//! that spins on the slot could see a half-written record, and IB vol. 1 (10.8.3 / o9-20) only promises that
//! the data of a WRITE-with-immediate is visible once its completion is on the receiver's CQ. So the ring
//! protocol never reads a slot on speculation: CQ entry first, then the slot the immediate names, then the
//! check that the slot's `seq` matches. The shared-memory fabric keeps exactly this contract: its write is a
//! copy of the 64 bytes followed by a release store of the CQ entry, and the reader's acquire load of the CQ
//! entry is what makes the slot's bytes visible. (Because that writer stores the record's seq word last, with
//! release ordering, its reader may also complete a write from the expected slot's seq: see `mdfan-fabric`'s
//! shm module. The verbs reader never does.)
//!
//! # Flow control
//!
//! The subscriber publishes the highest seq it has consumed. The publisher may write seq `s` only while
//! `s - consumed_seq <= slot_count` ([`has_space`]); otherwise the ring is full and the publisher applies the
//! subscriber's slow-consumer policy. Nothing is ever overwritten before it was consumed.

use bytemuck::{Pod, Zeroable};

pub use crate::record::RECORD_SIZE_BYTES;

/// `b"MDFANRNG"` read as a little-endian u64: the first 8 bytes of every ring.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"MDFANRNG");
/// Version of the ring layout described here. Bumped on any layout change.
pub const RING_VERSION: u32 = 1;
/// Smallest ring the publisher accepts, in slots.
pub const MIN_SLOTS: u32 = 64;
/// Largest ring the publisher accepts, in slots (2^24 slots = 1 GiB of records).
pub const MAX_SLOTS: u32 = 1 << 24;

/// The first cache line of a ring: what the ring is, written once by its owner (the subscriber).
///
/// 64 bytes, align 64, little-endian. The moving positions (consumed seq, CQ) live in the fabric's own
/// cache lines after it, so this line is read-only after set-up and never bounces between cores.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct RingHeader {
    /// [`RING_MAGIC`]. Offset 0.
    pub magic: u64,
    /// [`RING_VERSION`]. Offset 8.
    pub version: u32,
    /// Bytes per slot; always [`RECORD_SIZE_BYTES`] for this version. Offset 12.
    pub slot_size_bytes: u32,
    /// Slots in the ring, a power of two in [`MIN_SLOTS`]..=[`MAX_SLOTS`]. Offset 16.
    pub slot_count: u32,
    /// Entries in the completion queue that follows (shm fabric), equal to `slot_count`. Offset 20.
    pub cq_entries: u32,
    /// Incremented by the owner each time the ring is (re)granted to a publisher. Offset 24.
    pub producer_epoch: u64,
    /// Zero. Offset 32.
    pub _reserved: [u64; 4],
}

const _: () = assert!(core::mem::size_of::<RingHeader>() == 64);

/// Why a ring geometry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// `slot_count` is not a power of two or is outside [`MIN_SLOTS`]..=[`MAX_SLOTS`].
    #[error("ring slot_count {0} must be a power of two between {MIN_SLOTS} and {MAX_SLOTS}")]
    SlotCount(u64),
    /// The header's magic is not [`RING_MAGIC`].
    #[error("ring header magic {0:#018x} is not MDFANRNG")]
    Magic(u64),
    /// The header's version is not [`RING_VERSION`].
    #[error("ring layout version {0} is not supported (this build speaks {RING_VERSION})")]
    Version(u32),
    /// The header's slot size is not [`RECORD_SIZE_BYTES`].
    #[error("ring slot_size_bytes {0} must be {RECORD_SIZE_BYTES}")]
    SlotSize(u32),
}

/// Checks a requested slot count: a power of two in [`MIN_SLOTS`]..=[`MAX_SLOTS`].
pub fn check_slot_count(slot_count: u64) -> Result<u32, RingError> {
    if slot_count.is_power_of_two() && (MIN_SLOTS as u64..=MAX_SLOTS as u64).contains(&slot_count) {
        Ok(slot_count as u32)
    } else {
        Err(RingError::SlotCount(slot_count))
    }
}

impl RingHeader {
    /// A fresh header for a ring of `slot_count` slots (checked with [`check_slot_count`]).
    pub fn new(slot_count: u32, producer_epoch: u64) -> Result<RingHeader, RingError> {
        let slot_count = check_slot_count(slot_count as u64)?;
        Ok(RingHeader {
            magic: RING_MAGIC,
            version: RING_VERSION,
            slot_size_bytes: RECORD_SIZE_BYTES as u32,
            slot_count,
            cq_entries: slot_count,
            producer_epoch,
            _reserved: [0; 4],
        })
    }

    /// Validates a header read from memory someone else wrote.
    pub fn validate(&self) -> Result<(), RingError> {
        if self.magic != RING_MAGIC {
            return Err(RingError::Magic(self.magic));
        }
        if self.version != RING_VERSION {
            return Err(RingError::Version(self.version));
        }
        if self.slot_size_bytes != RECORD_SIZE_BYTES as u32 {
            return Err(RingError::SlotSize(self.slot_size_bytes));
        }
        check_slot_count(self.slot_count as u64)?;
        if self.cq_entries != self.slot_count {
            return Err(RingError::SlotCount(self.cq_entries as u64));
        }
        Ok(())
    }
}

/// The slot that holds seq `seq` in a ring of `slot_count` slots (a power of two).
#[inline]
pub const fn slot_index(seq: u64, slot_count: u32) -> u32 {
    (seq & (slot_count as u64 - 1)) as u32
}

/// The 32-bit `imm_data` that carries `seq`: its low 32 bits.
#[inline]
pub const fn imm_from_seq(seq: u64) -> u32 {
    seq as u32
}

/// Rebuilds the full seq from a 32-bit immediate and the seq the receiver expects next.
///
/// Returns the seq whose low 32 bits are `imm` and which is nearest to `expected` (within -2^31..2^31), so a
/// stream crosses the 32-bit wrap without ambiguity as long as fewer than 2^31 records are in flight (a ring
/// holds at most [`MAX_SLOTS`]).
#[inline]
pub const fn seq_from_imm(imm: u32, expected: u64) -> u64 {
    let delta = imm.wrapping_sub(expected as u32) as i32;
    expected.wrapping_add_signed(delta as i64)
}

/// Whether seq `next_seq` may be written into a ring of `slot_count` slots whose reader has consumed up to
/// and including `consumed_seq`.
#[inline]
pub const fn has_space(next_seq: u64, consumed_seq: u64, slot_count: u32) -> bool {
    next_seq.wrapping_sub(consumed_seq) <= slot_count as u64
}

/// Whether seq `next_seq` may be written now, for a writer that has written up to `last_written_seq` (seqs
/// skipped under the `resync` policy are never written) into a ring of `slot_count` slots whose reader has
/// consumed up to and including `consumed_seq` (as the writer last learnt it).
///
/// The slot of `next_seq` is taken only if some seq the reader may not have consumed yet, one in
/// `consumed_seq + 1..=last_written_seq`, shares it. So it is free when every seq from the consumed one to
/// `next_seq` is within one ring ([`has_space`]), when everything written has been consumed, and, after skipped
/// seqs, whenever `next_seq`'s slot is outside the unconsumed span. The last case is what keeps a `resync` stream
/// moving when the writer's view of the consumed seq lags the reader's (over RDMA it learns it from credits,
/// which come in batches): it never needs that view to catch up exactly.
#[inline]
pub const fn slot_is_free(next_seq: u64, consumed_seq: u64, last_written_seq: u64, slot_count: u32) -> bool {
    if has_space(next_seq, consumed_seq, slot_count) || last_written_seq <= consumed_seq {
        return true;
    }
    let unconsumed = last_written_seq - consumed_seq;
    if unconsumed >= slot_count as u64 || next_seq <= last_written_seq {
        return false;
    }
    // seq s in consumed+1..=last_written shares next_seq's slot iff next_seq - s is a multiple of slot_count, i.e.
    // iff (next_seq - consumed - 1) mod slot_count < unconsumed.
    (next_seq - consumed_seq - 1) & (slot_count as u64 - 1) >= unconsumed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slot_index_wraps_at_the_slot_count() {
        assert_eq!(slot_index(1, 64), 1);
        assert_eq!(slot_index(63, 64), 63);
        assert_eq!(slot_index(64, 64), 0);
        assert_eq!(slot_index(65, 64), 1);
        assert_eq!(slot_index(131_072 + 5, 131_072), 5);
        assert_eq!(slot_index(u64::MAX, 1 << 24), (1 << 24) - 1);
    }

    #[test]
    fn imm_carries_the_low_32_bits_and_rebuilds_across_the_wrap() {
        let wrap = 1u64 << 32;
        assert_eq!(imm_from_seq(wrap + 7), 7);
        // in order
        assert_eq!(seq_from_imm(imm_from_seq(5), 5), 5);
        // just before and after the 32-bit wrap, expecting the one before
        assert_eq!(seq_from_imm(imm_from_seq(wrap - 1), wrap - 1), wrap - 1);
        assert_eq!(seq_from_imm(imm_from_seq(wrap), wrap - 1), wrap);
        assert_eq!(seq_from_imm(imm_from_seq(wrap + 3), wrap - 2), wrap + 3);
        // a gap that crosses the wrap, and a late (old) record across it
        assert_eq!(seq_from_imm(imm_from_seq(wrap + 1000), wrap - 1000), wrap + 1000);
        assert_eq!(seq_from_imm(imm_from_seq(wrap - 10), wrap + 10), wrap - 10);
        // second wrap
        assert_eq!(seq_from_imm(imm_from_seq(3 * wrap + 1), 3 * wrap - 1), 3 * wrap + 1);
    }

    #[test]
    fn ring_space_counts_unconsumed_slots() {
        assert!(has_space(1, 0, 64));
        assert!(has_space(64, 0, 64));
        assert!(!has_space(65, 0, 64));
        assert!(has_space(65, 1, 64));
    }

    #[test]
    fn a_slot_is_free_unless_an_unconsumed_seq_shares_it() {
        // in order: the plain ring rule
        assert!(slot_is_free(65, 1, 64, 64));
        assert!(!slot_is_free(65, 0, 64, 64));
        // everything written consumed: free however far ahead the next seq is
        assert!(slot_is_free(1_000, 64, 64, 64));
        // seqs 61..=64 unconsumed (slots 61..=63 and 0); later seqs were skipped
        assert!(!slot_is_free(1_000 * 64 + 61, 60, 64, 64));
        assert!(!slot_is_free(1_000 * 64, 60, 64, 64));
        assert!(slot_is_free(1_000 * 64 + 1, 60, 64, 64));
        assert!(slot_is_free(1_000 * 64 + 60, 60, 64, 64));
        // a whole ring unconsumed: nothing is free
        assert!(!slot_is_free(200, 64, 128, 64));
    }

    #[test]
    fn headers_validate_and_refuse_bad_geometry() {
        let h = RingHeader::new(131_072, 1).unwrap();
        assert_eq!(h.validate(), Ok(()));
        assert_eq!(RingHeader::new(1000, 1), Err(RingError::SlotCount(1000)));
        assert_eq!(RingHeader::new(32, 1), Err(RingError::SlotCount(32)));
        let mut bad = h;
        bad.magic = 0;
        assert_eq!(bad.validate(), Err(RingError::Magic(0)));
        let mut bad = h;
        bad.version = 9;
        assert_eq!(bad.validate(), Err(RingError::Version(9)));
    }

    proptest! {
        #[test]
        fn seq_rebuild_is_exact_within_half_the_imm_space(expected in 0u64..u64::MAX / 2, delta in -(1i64 << 31) + 1..(1i64 << 31)) {
            let seq = expected.wrapping_add_signed(delta);
            prop_assert_eq!(seq_from_imm(imm_from_seq(seq), expected), seq);
        }

        #[test]
        fn slot_is_free_exactly_when_no_unconsumed_seq_shares_the_slot(
            log_slots in 6u32..=10, consumed in 0u64..5_000, unconsumed in 0u64..1_200, ahead in 1u64..5_000,
        ) {
            let slots = 1u32 << log_slots;
            let last_written = consumed + unconsumed;
            let next = last_written + ahead;
            let taken = (consumed + 1..=last_written).any(|s| slot_index(s, slots) == slot_index(next, slots));
            prop_assert_eq!(slot_is_free(next, consumed, last_written, slots), !taken);
        }
    }
}
