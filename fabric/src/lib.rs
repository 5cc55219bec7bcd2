//! mdfan-fabric: moving 64-byte records into a remote ring with one-sided WRITE-with-immediate.
//!
//! The contract every provider keeps (the shared-memory one here, RDMA verbs behind the `verbs` feature):
//!
//! - The **receiver** (subscriber) owns its ring: it allocates and registers the ring and CQ memory, and
//!   grants the sender write access to that ring only ([`wire::control::RingGrant`]).
//! - The **sender** (publisher) writes a record into a remote slot and delivers a 32-bit immediate
//!   ([`RemoteRing::write_with_imm`]); the receiver reaps the immediate from its CQ by busy polling
//!   ([`LocalRing::poll_cq`]) and only then reads the slot ([`LocalRing::slot`]), as with RDMA (IB vol. 1,
//!   9.4.3 and o9-20: WRITE data is visible once its completion is).
//! - The receiver publishes how far it has consumed ([`LocalRing::release`]); the sender reads it
//!   ([`RemoteRing::consumed_seq`]) to know when the ring is full. No sender ever waits on a receiver inside
//!   these calls: a full ring is the caller's decision (its slow-consumer policy).
//!
//! Hot-path calls return small `Copy` errors ([`PostError`]); set-up returns [`FabricError`], which names the
//! path, device or field that failed.
//!
//! `unsafe` lives in the provider modules only ([`shm`], and `verbs::ffi`); everything above is safe Rust.
#![warn(missing_docs)]

pub mod any;
pub mod credit;
pub mod shm;

#[cfg(feature = "verbs")]
pub mod verbs;
pub mod verbs_config;

pub use any::{AnyLocalRing, AnyRemoteRing, AnySender, FabricConfig, PreparedLocalRing, Provider};
pub use mdfan_wire as wire;
pub use mdfan_wire::control::CloseReason;
use mdfan_wire::BookUpdate;

/// One reaped completion: the immediate a WRITE-with-immediate delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The 32-bit immediate: the low 32 bits of the record's seq (`wire::ring::imm_from_seq`).
    pub imm_data: u32,
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
    /// No usable RDMA device.
    #[error("no RDMA device: {0}")]
    NoDevice(String),
}

/// The receiver's side of a ring: owned by the subscriber, busy-polled by one thread.
pub trait LocalRing {
    /// Slots in the ring (a power of two).
    fn slot_count(&self) -> u32;
    /// Reaps at most one completion, without blocking. `None`: nothing new.
    fn poll_cq(&mut self) -> Option<Completion>;
    /// The record in slot `index` (`< slot_count`), borrowed in place. Read it only after the completion that
    /// named it was reaped, and only until its seq is released.
    fn slot(&self, index: u32) -> &BookUpdate;
    /// [`LocalRing::poll_cq`] for a caller that knows the seq it expects next: a provider may use it to complete
    /// that record's write sooner (the shm provider also polls the expected slot's stamp, which saves a cache-line
    /// transfer). Either way, what is returned is a completion: the slot it names may be read.
    #[inline]
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<Completion> {
        let _ = expected_seq;
        self.poll_cq()
    }
    /// Publishes that every seq up to and including `consumed_seq` has been read: those slots may be reused.
    fn release(&mut self, consumed_seq: u64);
    /// What the sender last said about the ring.
    fn peer_state(&self) -> PeerState;
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
}
