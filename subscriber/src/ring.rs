//! The subscriber's ring, whichever fabric it is on, behind one type (static dispatch by `match`).

use mdfan_fabric::shm::ShmLocalRing;
use mdfan_fabric::{Completion, FabricError, LocalRing, PeerState};
use mdfan_wire::control::{AcceptFabric, RingGrant};
use mdfan_wire::BookUpdate;

use crate::SubscriberConfig;

/// Which fabric a subscriber offers.
#[derive(Debug, Clone, Default)]
pub enum Fabric {
    /// A ring in shared memory on the publisher's host.
    #[default]
    Shm,
    /// A ring registered with an RDMA device, written by the publisher over an RC QP.
    #[cfg(feature = "verbs")]
    Verbs(mdfan_fabric::verbs::VerbsConfig),
}

/// A ring on any fabric.
// One per subscriber, created once and never moved on the hot path; boxing the larger variant would add a
// pointer chase to every poll.
#[allow(clippy::large_enum_variant)]
pub enum AnyLocalRing {
    /// Shared memory.
    Shm(ShmLocalRing),
    /// RDMA verbs.
    #[cfg(feature = "verbs")]
    Verbs(mdfan_fabric::verbs::VerbsLocalRing),
}

/// A ring created and granted, waiting for the publisher's accept.
#[allow(clippy::large_enum_variant)] // lives for one handshake
pub(crate) enum PreparedRing {
    Shm(ShmLocalRing),
    #[cfg(feature = "verbs")]
    Verbs(mdfan_fabric::verbs::PreparedVerbsLocalRing),
}

impl PreparedRing {
    /// Creates the ring the config asks for, and its grant.
    pub(crate) fn create(cfg: &SubscriberConfig) -> Result<(PreparedRing, RingGrant), FabricError> {
        match &cfg.fabric {
            Fabric::Shm => ShmLocalRing::create(&cfg.shm_dir, cfg.ring_slots).map(|(r, g)| (PreparedRing::Shm(r), g)),
            #[cfg(feature = "verbs")]
            Fabric::Verbs(vc) => {
                let device = mdfan_fabric::verbs::VerbsDevice::open(vc)?;
                mdfan_fabric::verbs::VerbsLocalRing::create(&device, cfg.ring_slots)
                    .map(|(r, g)| (PreparedRing::Verbs(r), g))
            }
        }
    }

    /// Removes what only set-up needed (the shm file's name).
    pub(crate) fn unlink(&mut self) {
        match self {
            PreparedRing::Shm(r) => r.unlink(),
            #[cfg(feature = "verbs")]
            PreparedRing::Verbs(_) => {}
        }
    }

    /// Completes the connection with the publisher's accept (verbs: QP to RTR/RTS, first credit).
    #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
    pub(crate) fn connect(self, accept: &AcceptFabric) -> Result<AnyLocalRing, FabricError> {
        match self {
            PreparedRing::Shm(r) => Ok(AnyLocalRing::Shm(r)),
            #[cfg(feature = "verbs")]
            PreparedRing::Verbs(r) => r.connect(accept).map(AnyLocalRing::Verbs),
        }
    }
}

macro_rules! dispatch {
    ($ring:expr, $r:ident => $call:expr) => {
        match $ring {
            AnyLocalRing::Shm($r) => $call,
            #[cfg(feature = "verbs")]
            AnyLocalRing::Verbs($r) => $call,
        }
    };
}

impl LocalRing for AnyLocalRing {
    #[inline]
    fn slot_count(&self) -> u32 {
        dispatch!(self, r => r.slot_count())
    }
    #[inline]
    fn poll_cq(&mut self) -> Option<Completion> {
        dispatch!(self, r => r.poll_cq())
    }
    #[inline]
    fn slot(&self, index: u32) -> &BookUpdate {
        dispatch!(self, r => r.slot(index))
    }
    #[inline]
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<Completion> {
        dispatch!(self, r => r.poll_cq_expecting(expected_seq))
    }
    #[inline]
    fn release(&mut self, consumed_seq: u64) {
        dispatch!(self, r => r.release(consumed_seq))
    }
    #[inline]
    fn peer_state(&self) -> PeerState {
        dispatch!(self, r => r.peer_state())
    }
}
