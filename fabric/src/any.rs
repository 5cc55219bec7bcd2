//! The fabric as one concept: which provider, its settings, and its rings behind one type each, with static
//! dispatch by `match` (no vtable on the hot path).
//!
//! Everything above the fabric (publisher, subscriber, CLIs, bench) names providers through this module only:
//!
//! | type | side | what it is |
//! |---|---|---|
//! | [`Provider`] | both | the provider's name, as configs and CLIs spell it (`shm`, `verbs`) |
//! | [`FabricConfig`] | both | a provider with its settings |
//! | [`PreparedLocalRing`] | subscriber | a ring created and granted ([`PreparedLocalRing::create`]), before the accept |
//! | [`AnyLocalRing`] | subscriber | the connected ring ([`LocalRing`]) |
//! | [`AnySender`] | publisher | a provider opened once ([`AnySender::open`]); attaches each subscriber's grant |
//! | [`AnyRemoteRing`] | publisher | one subscriber's ring ([`RemoteRing`]) |
//!
//! Adding a provider: its module (a `LocalRing`, a `RemoteRing`, create/attach), a [`Provider`] name, a variant
//! in each enum here and an arm in `dispatch!` and in the four constructors below. Nothing outside this crate
//! changes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use mdfan_wire::control::{AcceptFabric, RingGrant};
use mdfan_wire::BookUpdate;

use crate::shm::{ShmLocalRing, ShmRemoteRing};
use crate::{CloseReason, Completion, FabricError, LocalRing, PeerState, PostError, RemoteRing};

/// A fabric provider, by name. Every provider is named here whether or not this build has it, so a config
/// asking for one that is missing gets [`FabricError::NotBuilt`] (naming the feature), not "unknown variant".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Shared memory on this host: the ring is a file in a tmpfs folder (default `/dev/shm`), mapped by both.
    #[default]
    Shm,
    /// RDMA verbs (RoCE v2 or InfiniBand): an RC QP per subscriber, WRITE_WITH_IMM into a registered MR.
    /// Needs the `verbs` feature.
    Verbs,
}

impl Provider {
    /// Every provider, in the order CLIs list them.
    pub const ALL: [Provider; 2] = [Provider::Shm, Provider::Verbs];

    /// The name configs and CLIs use.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Shm => "shm",
            Provider::Verbs => "verbs",
        }
    }

    /// Whether this build has the provider (verbs needs the `verbs` feature).
    pub fn is_built(self) -> bool {
        match self {
            Provider::Shm => true,
            Provider::Verbs => cfg!(feature = "verbs"),
        }
    }

    /// The provider a grant is for.
    pub fn of_grant(grant: &RingGrant) -> Provider {
        match grant {
            RingGrant::Shm { .. } | RingGrant::ShmFd { .. } => Provider::Shm,
            RingGrant::Verbs { .. } => Provider::Verbs,
        }
    }

    /// [`FabricError::NotBuilt`] unless this build has the provider.
    ///
    /// # Errors
    /// Names the provider and the feature that builds it.
    pub fn check_built(self) -> Result<(), FabricError> {
        if self.is_built() {
            Ok(())
        } else {
            Err(FabricError::NotBuilt(self))
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Provider, String> {
        Provider::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Provider::ALL.iter().map(|p| p.name()).collect();
            format!("unknown fabric {s:?} (one of {})", names.join(", "))
        })
    }
}

/// A provider with its settings: what [`PreparedLocalRing::create`] and [`AnySender::open`] need.
#[derive(Debug, Clone)]
pub enum FabricConfig {
    /// Shared memory.
    Shm {
        /// The tmpfs folder ring files live in; publisher and subscriber must name the same one.
        dir: PathBuf,
    },
    /// RDMA verbs: device, port, GID and QP attributes.
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::VerbsConfig),
}

impl Default for FabricConfig {
    /// Shared memory in [`crate::shm::DEFAULT_DIR`].
    fn default() -> Self {
        FabricConfig::Shm { dir: PathBuf::from(crate::shm::DEFAULT_DIR) }
    }
}

impl FabricConfig {
    /// The provider these settings are for.
    pub fn provider(&self) -> Provider {
        match self {
            FabricConfig::Shm { .. } => Provider::Shm,
            #[cfg(feature = "verbs")]
            FabricConfig::Verbs(_) => Provider::Verbs,
        }
    }
}

/// Dispatches one call to whichever provider `$value` holds. Every enum below has one variant per provider,
/// named as in [`Provider`].
macro_rules! dispatch {
    ($enum:ident, $value:expr, $r:ident => $call:expr) => {
        match $value {
            $enum::Shm($r) => $call,
            #[cfg(feature = "verbs")]
            $enum::Verbs($r) => $call,
        }
    };
}

/// A subscriber's ring, created and granted, waiting for the publisher's accept.
// Lives for one handshake; boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum PreparedLocalRing {
    /// Shared memory (ready as soon as it exists).
    Shm(ShmLocalRing),
    /// RDMA verbs: MR registered, receive queue posted, QP in INIT.
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::PreparedVerbsLocalRing),
}

impl PreparedLocalRing {
    /// Creates a ring of `slot_count` slots on the configured provider, and the grant to send the publisher.
    ///
    /// # Errors
    /// [`FabricError`] naming the folder, device or field that failed.
    pub fn create(cfg: &FabricConfig, slot_count: u32) -> Result<(PreparedLocalRing, RingGrant), FabricError> {
        match cfg {
            FabricConfig::Shm { dir } => {
                ShmLocalRing::create(dir, slot_count).map(|(r, g)| (PreparedLocalRing::Shm(r), g))
            }
            #[cfg(feature = "verbs")]
            FabricConfig::Verbs(vc) => {
                let device = crate::verbs::VerbsDevice::open(vc)?;
                crate::verbs::VerbsLocalRing::create(&device, slot_count).map(|(r, g)| (PreparedLocalRing::Verbs(r), g))
            }
        }
    }

    /// As [`PreparedLocalRing::create`], for a publisher reached over its Unix-domain socket: a shared-memory
    /// ring is made with no name ([`ShmLocalRing::create_sealed`]) and its descriptor is returned, to be sent
    /// with the subscribe frame (`SCM_RIGHTS`, [`crate::fdpass::send_with_fd`]); a verbs ring as `create`, with
    /// no descriptor.
    ///
    /// # Errors
    /// As [`PreparedLocalRing::create`].
    pub fn create_to_pass(
        cfg: &FabricConfig,
        slot_count: u32,
    ) -> Result<(PreparedLocalRing, RingGrant, Option<std::os::fd::OwnedFd>), FabricError> {
        match cfg {
            FabricConfig::Shm { .. } => {
                ShmLocalRing::create_sealed(slot_count).map(|(r, g, fd)| (PreparedLocalRing::Shm(r), g, Some(fd)))
            }
            #[cfg(feature = "verbs")]
            FabricConfig::Verbs(_) => Self::create(cfg, slot_count).map(|(r, g)| (r, g, None)),
        }
    }

    /// The provider the ring is on.
    pub fn provider(&self) -> Provider {
        match self {
            PreparedLocalRing::Shm(_) => Provider::Shm,
            #[cfg(feature = "verbs")]
            PreparedLocalRing::Verbs(_) => Provider::Verbs,
        }
    }

    /// Removes what only set-up needed (the shm file's name, once the publisher has mapped it).
    pub fn unlink(&mut self) {
        match self {
            PreparedLocalRing::Shm(r) => r.unlink(),
            #[cfg(feature = "verbs")]
            PreparedLocalRing::Verbs(_) => {}
        }
    }

    /// Completes the connection with the publisher's accept (verbs: QP to RTR/RTS and the first credit).
    ///
    /// # Errors
    /// [`FabricError`] when the accept is for another provider or the connection fails.
    pub fn connect(self, accept: &AcceptFabric) -> Result<AnyLocalRing, FabricError> {
        match (self, accept) {
            (PreparedLocalRing::Shm(r), AcceptFabric::Shm) => Ok(AnyLocalRing::Shm(r)),
            #[cfg(feature = "verbs")]
            (PreparedLocalRing::Verbs(r), accept @ AcceptFabric::Verbs { .. }) => {
                r.connect(accept).map(AnyLocalRing::Verbs)
            }
            (ring, accept) => Err(FabricError::Mismatch {
                offered: match accept {
                    AcceptFabric::Shm => Provider::Shm,
                    AcceptFabric::Verbs { .. } => Provider::Verbs,
                },
                what: "accept",
                served: ring.provider(),
            }),
        }
    }
}

/// A subscriber's connected ring, on any provider.
// One per subscriber, created once and never moved on the hot path; boxing the larger variant would add a
// pointer chase to every poll.
#[allow(clippy::large_enum_variant)]
pub enum AnyLocalRing {
    /// Shared memory.
    Shm(ShmLocalRing),
    /// RDMA verbs.
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::VerbsLocalRing),
}

impl LocalRing for AnyLocalRing {
    #[inline]
    fn slot_count(&self) -> u32 {
        dispatch!(AnyLocalRing, self, r => r.slot_count())
    }
    #[inline]
    fn poll_cq(&mut self) -> Option<Completion<'_>> {
        dispatch!(AnyLocalRing, self, r => r.poll_cq())
    }
    #[inline]
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<Completion<'_>> {
        dispatch!(AnyLocalRing, self, r => r.poll_cq_expecting(expected_seq))
    }
    #[inline]
    fn release(&mut self, consumed_seq: u64) {
        dispatch!(AnyLocalRing, self, r => r.release(consumed_seq))
    }
    #[inline]
    fn peer_state(&self) -> PeerState {
        dispatch!(AnyLocalRing, self, r => r.peer_state())
    }
    fn nic_clock(&self) -> Option<crate::nic_clock::NicClock> {
        dispatch!(AnyLocalRing, self, r => r.nic_clock())
    }
    fn nic_realtime(&mut self) -> Option<crate::nic_clock::NicRealtime> {
        dispatch!(AnyLocalRing, self, r => r.nic_realtime())
    }
}

/// The publisher's side of a provider: opened once, then attaches each subscriber's grant.
pub enum AnySender {
    /// Shared memory: rings must be files in `dir`.
    Shm {
        /// The only folder granted ring files may be in.
        dir: PathBuf,
    },
    /// RDMA verbs: the device, PD and the credit MR every session shares.
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::VerbsPublisher),
}

impl AnySender {
    /// Opens the configured provider (verbs: the device, its PD and the credit MR).
    ///
    /// # Errors
    /// [`FabricError`] naming the device or field that failed.
    pub fn open(cfg: &FabricConfig) -> Result<AnySender, FabricError> {
        match cfg {
            FabricConfig::Shm { dir } => {
                crate::shm::check_dir(dir)?;
                Ok(AnySender::Shm { dir: dir.clone() })
            }
            #[cfg(feature = "verbs")]
            FabricConfig::Verbs(vc) => crate::verbs::VerbsPublisher::open(vc).map(AnySender::Verbs),
        }
    }

    /// The provider this sender serves.
    pub fn provider(&self) -> Provider {
        match self {
            AnySender::Shm { .. } => Provider::Shm,
            #[cfg(feature = "verbs")]
            AnySender::Verbs(_) => Provider::Verbs,
        }
    }

    /// The device's NIC completion clock, when it has one (verbs on a device with `hca_core_clock`; `None` on shm
    /// and Soft-RoCE). A ring stamps its send completions with it when [`RemoteRing::send_nic_clock`] says so.
    pub fn nic_clock(&self) -> Option<crate::nic_clock::NicClock> {
        match self {
            AnySender::Shm { .. } => None,
            #[cfg(feature = "verbs")]
            AnySender::Verbs(v) => v.device().nic_clock(),
        }
    }

    /// A fresh mapping of the device's NIC clock onto `CLOCK_REALTIME` ([`crate::nic_clock::NicRealtime`]): a
    /// pair sampled now, fitted with the previous one. Control path (`ibv_query_rt_values_ex(3)` and
    /// `clock_gettime`): call it at a session's start and every second or so, never per completion. `None` without
    /// a NIC clock or when it cannot be read.
    pub fn nic_realtime(&mut self) -> Option<crate::nic_clock::NicRealtime> {
        match self {
            AnySender::Shm { .. } => None,
            #[cfg(feature = "verbs")]
            AnySender::Verbs(v) => v.nic_realtime(),
        }
    }

    /// Attaches a subscriber's grant for `peer` (who asks, and the ring's descriptor when it came with the
    /// frame): maps (shm) or connects to (verbs) its ring, and returns the settings its accept carries back. An
    /// shm ring is attached only for its owner ([`ShmRemoteRing::attach`], [`ShmRemoteRing::attach_fd`]); a
    /// verbs ring is reached through its QP and rkey, whoever asks.
    ///
    /// # Errors
    /// [`FabricError::Mismatch`] when the grant is for another provider than this sender's (the message
    /// names both); [`FabricError::BadRing`] for an fd grant without its descriptor (or a descriptor without
    /// one); otherwise what the provider reports, naming the path or QP.
    pub fn attach(&self, grant: &RingGrant, peer: Peer) -> Result<(AnyRemoteRing, AcceptFabric), FabricError> {
        let shm = |r: ShmRemoteRing| (AnyRemoteRing::Shm(r), AcceptFabric::Shm);
        let no_fd = |detail: &str| FabricError::BadRing { path: "fd".into(), detail: detail.into() };
        match (self, grant, peer.ring_fd) {
            (_, RingGrant::ShmFd { .. }, None) => {
                Err(no_fd("a shm_fd grant came without its descriptor (it travels only over a Unix-domain socket)"))
            }
            (_, RingGrant::Shm { .. } | RingGrant::Verbs { .. }, Some(_)) => {
                Err(no_fd("a descriptor came with a grant that names no descriptor"))
            }
            (AnySender::Shm { dir }, RingGrant::Shm { .. }, None) => {
                ShmRemoteRing::attach(grant, dir, peer.uid).map(shm)
            }
            (AnySender::Shm { .. }, RingGrant::ShmFd { .. }, Some(fd)) => match peer.uid {
                Some(uid) => ShmRemoteRing::attach_fd(grant, fd, uid).map(shm),
                None => Err(no_fd("the peer's user is unknown (no SO_PEERCRED)")),
            },
            #[cfg(feature = "verbs")]
            (AnySender::Verbs(v), RingGrant::Verbs { .. }, None) => {
                v.attach(grant).map(|(r, a)| (AnyRemoteRing::Verbs(Box::new(r)), a))
            }
            (sender, grant, _) => Err(FabricError::Mismatch {
                offered: Provider::of_grant(grant),
                what: "ring",
                served: sender.provider(),
            }),
        }
    }
}

/// Who asks the publisher to attach a ring ([`AnySender::attach`]).
#[derive(Debug, Default)]
pub struct Peer {
    /// The local user at the control connection's other end (`SO_PEERCRED` on a Unix-domain socket; the owner
    /// of the peer's socket on a loopback TCP connection); `None` for a peer on another host or one not found.
    pub uid: Option<u32>,
    /// The ring's descriptor, when it came with the subscribe frame (`SCM_RIGHTS`: [`RingGrant::ShmFd`]).
    pub ring_fd: Option<std::os::fd::OwnedFd>,
}

impl Peer {
    /// This process's own user, no descriptor: a ring file this process created (tests, benchmarks).
    pub fn this_user() -> Peer {
        Peer { uid: Some(crate::shm::current_euid()), ring_fd: None }
    }
}

/// One subscriber's ring as the publisher writes it, on any provider.
pub enum AnyRemoteRing {
    /// Same-host shared memory.
    Shm(ShmRemoteRing),
    /// RDMA verbs (RC QP, WRITE_WITH_IMM); boxed so a session stays small to move through the publisher's
    /// queues.
    #[cfg(feature = "verbs")]
    Verbs(Box<crate::verbs::VerbsRemoteRing>),
}

impl AnyRemoteRing {
    /// Whether the subscriber's side is connected (always on shm; on verbs, once its first credit landed).
    pub fn ready(&self) -> bool {
        match self {
            AnyRemoteRing::Shm(_) => true,
            #[cfg(feature = "verbs")]
            AnyRemoteRing::Verbs(r) => r.peer_connected(),
        }
    }

    /// Waits at most `timeout` until everything posted has completed, so the last record (end of stream)
    /// reached the subscriber before the ring is torn down. Off the hot path; returns at once on shm.
    pub fn drain(&mut self, timeout: Duration) {
        match self {
            AnyRemoteRing::Shm(_) => {}
            #[cfg(feature = "verbs")]
            AnyRemoteRing::Verbs(r) => {
                let _ = r.drain(timeout);
            }
        }
        let _ = timeout;
    }

    /// What broke the ring, named (verbs: the `ibv_wc_status` or errno), if anything did.
    pub fn failure(&self) -> Option<&'static str> {
        match self {
            AnyRemoteRing::Shm(r) => r.failure(),
            #[cfg(feature = "verbs")]
            AnyRemoteRing::Verbs(r) => r.failure().map(crate::verbs::wc_status_name),
        }
    }
}

impl RemoteRing for AnyRemoteRing {
    #[inline]
    fn slot_count(&self) -> u32 {
        dispatch!(AnyRemoteRing, self, r => r.slot_count())
    }
    #[inline]
    fn consumed_seq(&mut self) -> u64 {
        dispatch!(AnyRemoteRing, self, r => r.consumed_seq())
    }
    #[inline]
    fn write_with_imm(&mut self, slot: u32, record: &BookUpdate, imm_data: u32) -> Result<(), PostError> {
        dispatch!(AnyRemoteRing, self, r => r.write_with_imm(slot, record, imm_data))
    }
    #[inline]
    fn flush(&mut self) -> Result<(), PostError> {
        dispatch!(AnyRemoteRing, self, r => r.flush())
    }
    fn close(&mut self, reason: CloseReason) {
        dispatch!(AnyRemoteRing, self, r => r.close(reason))
    }
    fn send_nic_clock(&self) -> Option<crate::nic_clock::NicClock> {
        dispatch!(AnyRemoteRing, self, r => r.send_nic_clock())
    }
    #[inline]
    fn take_send_stamps(&mut self) -> &[crate::SendStamp] {
        dispatch!(AnyRemoteRing, self, r => r.take_send_stamps())
    }
    fn send_stamps_lost(&self) -> u64 {
        dispatch!(AnyRemoteRing, self, r => r.send_stamps_lost())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_round_trip_and_unknown_names_list_the_known_ones() {
        for p in Provider::ALL {
            assert_eq!(p.name().parse::<Provider>(), Ok(p));
        }
        assert_eq!("rdma".parse::<Provider>(), Err("unknown fabric \"rdma\" (one of shm, verbs)".to_owned()));
        assert_eq!(Provider::Verbs.is_built(), cfg!(feature = "verbs"));
    }

    #[test]
    fn a_grant_for_another_provider_is_refused_naming_both() {
        let sender = AnySender::open(&FabricConfig::default()).unwrap();
        let grant = RingGrant::Verbs {
            endpoint: mdfan_wire::control::VerbsEndpoint { qpn: 1, psn: 2, gid: "0".repeat(32), lid: 0 },
            ring_addr: 4096,
            ring_rkey: 7,
            slot_count: 1024,
        };
        let err = sender.attach(&grant, Peer::default()).err().expect("a verbs grant on an shm sender");
        assert_eq!(err.to_string(), "a verbs ring was offered to an end that serves fabric shm");
        assert_eq!(
            Provider::Verbs.check_built().err().map(|e| e.to_string()),
            (!cfg!(feature = "verbs"))
                .then(|| "fabric verbs is not in this build (rebuild with its feature: --features mdfan-publisher/verbs,mdfan-subscribe/verbs)".into())
        );
    }
}
