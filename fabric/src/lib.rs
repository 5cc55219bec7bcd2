//! mdfan-fabric: moving 64-byte records into a remote ring with one-sided WRITE-with-immediate.
//!
//! The contract every provider keeps (the shared-memory one here, RDMA verbs behind the `verbs` feature):
//!
//! - The **receiver** (subscriber) owns its ring: it allocates and registers the ring and CQ memory, and
//!   grants the sender write access to that ring only ([`wire::control::RingGrant`]).
//! - The **sender** (publisher) writes a record into a remote slot and delivers a 32-bit immediate
//!   ([`RemoteRing::write_with_imm`]); the receiver reaps the immediate from its CQ by busy polling
//!   ([`LocalRing::poll_cq`]) and only then reads the slot, through the [`Completion`] (borrowed from the ring:
//!   no slot is reachable otherwise), as with RDMA (IB vol. 1, 9.4.3 and o9-20: WRITE data is visible once its
//!   completion is).
//! - The receiver publishes how far it has consumed ([`LocalRing::release`]); the sender reads it
//!   ([`RemoteRing::consumed_seq`]) to know when the ring is full. No sender ever waits on a receiver inside
//!   these calls: a full ring is the caller's decision (its slow-consumer policy).
//!
//! Hot-path calls return small `Copy` errors ([`PostError`]); set-up returns [`FabricError`], which names the
//! path, device or field that failed.
//!
//! `unsafe` lives in the provider modules only ([`shm`], and `verbs::ffi`), in [`sigbus`] (the SIGBUS handler
//! for the shm rings the publisher maps) and in [`fdpass`] (a ring passed as a file descriptor); everything above
//! is safe Rust.
#![warn(missing_docs)]

pub mod any;
pub mod credit;
pub mod fdpass;
pub mod nic_clock;
pub mod peer;
pub mod send_stamps;
pub mod shm;
pub mod sigbus;

#[cfg(feature = "verbs")]
pub mod verbs;
pub mod verbs_config;

pub use any::{AnyLocalRing, AnyRemoteRing, AnySender, FabricConfig, Peer, PreparedLocalRing, Provider};
pub use mdfan_wire as wire;
pub use mdfan_wire::control::CloseReason;
use mdfan_wire::BookUpdate;
pub use send_stamps::SendStamp;

/// One reaped completion: the immediate a WRITE-with-immediate delivered, and the record it names, borrowed in
/// place from the ring.
///
/// Returned by [`LocalRing::poll_cq`] with the lifetime of that `&mut` borrow of the ring, so the record can be
/// read only while nothing else touches the ring: it cannot outlive a later poll, nor a [`LocalRing::release`]
/// (after which the sender may be rewriting the slot).
///
/// ```compile_fail,E0499
/// use mdfan_fabric::LocalRing;
/// fn read_after_release(ring: &mut impl LocalRing) -> u64 {
///     let Some(c) = ring.poll_cq() else { return 0 };
///     ring.release(c.seq()); // `*ring` is still borrowed by `c`
///     c.record().map_or(0, |r| r.seq)
/// }
/// ```
///
/// Copy what you need first:
///
/// ```
/// use mdfan_fabric::LocalRing;
/// fn read_then_release(ring: &mut impl LocalRing) -> Option<u64> {
///     let c = ring.poll_cq()?;
///     let (seq, order_id) = (c.seq(), c.record()?.order_id);
///     ring.release(seq);
///     Some(order_id)
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion<'ring> {
    /// The 32-bit immediate: the low 32 bits of the record's seq (`wire::ring::imm_from_seq`).
    pub imm_data: u32,
    seq: u64,
    record: Option<&'ring BookUpdate>,
    nic_ticks: Option<u64>,
}

impl<'ring> Completion<'ring> {
    /// What a provider hands out: `record` only for a seq its [`ReadWindow`] says is readable.
    #[inline]
    pub(crate) fn new(imm_data: u32, seq: u64, record: Option<&'ring BookUpdate>) -> Completion<'ring> {
        Completion { imm_data, seq, record, nic_ticks: None }
    }

    /// The same completion with the NIC's raw completion timestamp `nic_ticks` (the verbs provider, from a CQ
    /// created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`; also a test double replaying recorded timestamps).
    #[inline]
    pub fn with_nic_ticks(self, nic_ticks: Option<u64>) -> Completion<'ring> {
        Completion { nic_ticks, ..self }
    }

    /// The NIC's raw completion timestamp of this completion: ticks of its `hca_core_clock`, wrapping at the
    /// counter width ([`LocalRing::nic_clock`] gives both; [`nic_clock`] converts). `None` when the provider has no
    /// NIC clock (shared memory; verbs on a device without completion timestamps, such as Soft-RoCE).
    #[inline]
    pub fn nic_ticks(&self) -> Option<u64> {
        self.nic_ticks
    }

    /// The seq the immediate names: rebuilt from `imm_data` against the ring's release position
    /// (`wire::ring::seq_from_imm`).
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The record in the slot [`Completion::seq`] maps to (`seq mod slot_count`), read in place: 64 bytes, align 64.
    /// `None` when that seq is at or below what was already released (a duplicate or stale completion): its slot
    /// may be being rewritten by then, so it is not readable. Check the record's own `seq` against
    /// [`Completion::seq`] before trusting it (a sender that broke the protocol may have put another there).
    #[inline]
    pub fn record(&self) -> Option<&'ring BookUpdate> {
        self.record
    }
}

/// Which seqs a receiver may read and release: every provider's [`LocalRing`] keeps one, so that safe code cannot
/// read a slot the sender may be writing.
///
/// - A completion for seq `s` hands out its slot only if `s > released` (the sender writes seq `s` into that slot
///   only after the seq it replaces, `s - slot_count`, was released, and never reuses it before `s` is released).
/// - [`LocalRing::release`] never goes past the highest seq a completion named (`completed`): a release of seqs
///   not yet completed would let the sender overwrite slots a later completion hands out.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadWindow {
    released: u64,
    completed: u64,
}

impl ReadWindow {
    /// The seq `imm_data` names, and whether its slot may be read.
    #[inline]
    pub(crate) fn complete_imm(&mut self, imm_data: u32) -> (u64, bool) {
        let seq = mdfan_wire::ring::seq_from_imm(imm_data, self.released + 1);
        (seq, self.complete_seq(seq))
    }

    /// Records a completion of `seq`; whether its slot may be read.
    #[inline]
    pub(crate) fn complete_seq(&mut self, seq: u64) -> bool {
        if seq <= self.released {
            return false;
        }
        self.completed = self.completed.max(seq);
        true
    }

    /// The release to publish for `consumed_seq`: clamped to what was completed; `None` if nothing moves.
    #[inline]
    pub(crate) fn release(&mut self, consumed_seq: u64) -> Option<u64> {
        let seq = consumed_seq.min(self.completed);
        if seq <= self.released {
            return None;
        }
        self.released = seq;
        Some(seq)
    }

    /// The highest seq released.
    #[inline]
    pub(crate) fn released(&self) -> u64 {
        self.released
    }
}

/// What the receiver knows about its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// No sender has attached yet.
    Waiting,
    /// A sender is attached and may write.
    Attached,
    /// The sender closed the ring, with its reason.
    Closed(CloseReason),
}

/// Hot-path failure of a post. `Copy`, never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The slot index is outside the ring (a caller bug; nothing was written).
    #[error("slot index {slot} is outside a ring of {slot_count} slots")]
    SlotOutOfRange {
        /// The slot index asked for.
        slot: u32,
        /// Slots in the ring.
        slot_count: u32,
    },
    /// The send queue is full: the caller must poll completions before posting more (verbs).
    #[error("send queue full")]
    SendQueueFull,
    /// The transport reported an error; the ring is unusable (e.g. the QP moved to ERR).
    #[error("fabric error {code}")]
    Transport {
        /// The transport's code (verbs: the `ibv_wc_status`, or an errno).
        code: i32,
    },
}

/// Set-up / control-path failure. Each variant names what failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// An OS call on a named path failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The OS call (`open`, `mmap`, ...).
        op: &'static str,
        /// The path it was called on.
        path: String,
        #[source]
        /// The OS error.
        source: std::io::Error,
    },
    /// The ring memory or grant is not what the protocol allows.
    #[error("ring {path}: {detail}")]
    BadRing {
        /// The path it was called on.
        path: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A grant names a fabric this build or this endpoint does not serve.
    #[error("fabric {0} is not supported here")]
    Unsupported(String),
    /// An RDMA verbs call failed (verbs provider).
    #[error("{call} failed on {object}: {source}")]
    Verbs {
        /// The verbs call (`ibv_reg_mr`, ...).
        call: &'static str,
        /// What it was called on (device, QP, MR).
        object: String,
        #[source]
        /// The OS error.
        source: std::io::Error,
    },
    /// A provider setting is out of its range; the message names the field and the value it had.
    #[error("{0}")]
    BadSetting(String),
    /// A provider this build does not have (verbs without the `verbs` feature).
    #[error("fabric {0} is not in this build (rebuild with its feature: --features mdfan-publisher/{0},mdfan-subscribe/{0})")]
    NotBuilt(Provider),
    /// One end offered a ring (or accept) for another provider than the other end serves.
    #[error("a {offered} {what} was offered to an end that serves fabric {served}")]
    Mismatch {
        /// The provider of what was offered.
        offered: Provider,
        /// `ring` (a subscriber's grant) or `accept` (a publisher's answer).
        what: &'static str,
        /// The provider of the end that refused it.
        served: Provider,
    },
    /// A local user asked for a ring file another user owns (the publisher attaches a shared-memory ring only
    /// for its owner).
    #[error("ring {path}: owned by {owner}, but the subscriber asking for it is {peer}: a ring is attached only for its owner")]
    NotOwner {
        /// The ring's path (or `fd:N`).
        path: String,
        /// Its owner, `uid N (name)`.
        owner: String,
        /// The control connection's user, `uid N (name)`.
        peer: String,
    },
    /// No usable RDMA device.
    #[error("no RDMA device: {0}")]
    NoDevice(String),
}

/// The receiver's side of a ring: owned by the subscriber, busy-polled by one thread.
pub trait LocalRing {
    /// Slots in the ring (a power of two).
    fn slot_count(&self) -> u32;
    /// Reaps at most one completion, without blocking, and hands out the record it names ([`Completion::record`]),
    /// borrowed from the ring until the next call on it. `None`: nothing new.
    fn poll_cq(&mut self) -> Option<Completion<'_>>;
    /// [`LocalRing::poll_cq`] for a caller that knows the seq it expects next: a provider may use it to complete
    /// that record's write sooner (the shm provider also polls the expected slot's stamp, which saves a cache-line
    /// transfer). Either way, what is returned is a completion.
    #[inline]
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<Completion<'_>> {
        let _ = expected_seq;
        self.poll_cq()
    }
    /// Publishes that every seq up to and including `consumed_seq` has been read: those slots may be reused. Never
    /// goes past the highest seq a completion named, nor backwards (a larger value is clamped, a smaller one
    /// ignored).
    fn release(&mut self, consumed_seq: u64);
    /// What the sender last said about the ring.
    fn peer_state(&self) -> PeerState;
    /// The clock of [`Completion::nic_ticks`]: `None` when completions carry no NIC timestamp (the default; shm;
    /// verbs on a device that reports none, such as Soft-RoCE).
    fn nic_clock(&self) -> Option<nic_clock::NicClock> {
        None
    }
    /// A fresh mapping of [`Completion::nic_ticks`] onto `CLOCK_REALTIME`: the provider samples both clocks now
    /// and fits the sample with its previous one (see [`nic_clock::NicRealtime`]). Control path (the verbs
    /// provider calls `ibv_query_rt_values_ex(3)` and `clock_gettime`): call it at connect and every second or so,
    /// not per completion. `None` when there is no NIC clock or it cannot be read (the default).
    fn nic_realtime(&mut self) -> Option<nic_clock::NicRealtime> {
        None
    }
}

/// The sender's side of a ring: owned by the publisher's session for one subscriber.
pub trait RemoteRing {
    /// Slots in the remote ring (a power of two).
    fn slot_count(&self) -> u32;
    /// The highest seq the receiver has released (0 before any). May lag the receiver slightly.
    fn consumed_seq(&mut self) -> u64;
    /// Writes `record` into remote slot `slot` and delivers `imm_data` to the receiver's CQ. The caller has
    /// checked ring space. May be batched until [`RemoteRing::flush`] (one doorbell for several writes).
    ///
    /// # Errors
    /// [`PostError`]; nothing was delivered when it is returned.
    fn write_with_imm(&mut self, slot: u32, record: &BookUpdate, imm_data: u32) -> Result<(), PostError>;
    /// Makes every write so far visible to the receiver (rings the doorbell). A no-op on shared memory.
    ///
    /// # Errors
    /// [`PostError::Transport`] when the transport failed.
    fn flush(&mut self) -> Result<(), PostError>;
    /// Tells the receiver the ring is closed, and why. Writes after this are not delivered.
    fn close(&mut self, reason: CloseReason);
    /// The clock of [`SendStamp::nic_ticks`]: `Some` when this ring's send completions carry NIC timestamps
    /// (verbs on a device with `hca_core_clock`, its send CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`);
    /// `None` otherwise (the default; shm; Soft-RoCE).
    fn send_nic_clock(&self) -> Option<nic_clock::NicClock> {
        None
    }
    /// The signalled writes whose completions were reaped with a NIC timestamp since the last call (by
    /// [`RemoteRing::write_with_imm`] or [`RemoteRing::flush`]), oldest first, each with its post time (the
    /// record's `ts_send_ticks`); afterwards there are none. Hot path: no allocation, no syscall. Empty without
    /// [`RemoteRing::send_nic_clock`] (the default).
    #[inline]
    fn take_send_stamps(&mut self) -> &[SendStamp] {
        &[]
    }
    /// Send stamps dropped because more completions were reaped between two [`RemoteRing::take_send_stamps`]
    /// than the provider holds ([`send_stamps::SEND_STAMPS`]), since the ring was attached.
    fn send_stamps_lost(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::ReadWindow;

    #[test]
    fn a_release_never_passes_the_highest_completed_seq_nor_goes_back() {
        let mut w = ReadWindow::default();
        assert_eq!(w.release(5), None, "nothing completed yet: nothing may be released");
        assert_eq!(w.complete_imm(1), (1, true));
        assert_eq!(w.complete_imm(2), (2, true));
        assert_eq!(w.release(10), Some(2), "clamped to the highest completed seq");
        assert_eq!(w.release(1), None, "never backwards");
        assert_eq!(w.complete_imm(2), (2, false), "a released seq's slot is not handed out again");
        assert_eq!(w.complete_imm(7), (7, true), "a gap: 3..7 were never written");
        assert_eq!(w.release(7), Some(7));
        assert_eq!(w.released(), 7);
    }

    #[test]
    fn seqs_are_rebuilt_across_the_32_bit_immediate_wrap() {
        let mut w = ReadWindow::default();
        let near = (1u64 << 32) - 2;
        assert!(w.complete_seq(near));
        assert_eq!(w.release(near), Some(near));
        assert_eq!(w.complete_imm(u32::MAX), ((1 << 32) - 1, true));
        assert_eq!(w.complete_imm(0), (1 << 32, true));
        assert_eq!(w.complete_imm(1), ((1 << 32) + 1, true));
        assert_eq!(w.complete_imm((near & 0xffff_ffff) as u32), (near, false), "stale: already released");
    }
}
