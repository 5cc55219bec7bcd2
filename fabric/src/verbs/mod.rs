//! The RDMA verbs provider (feature `verbs`): RC queue pairs, one-sided WRITE-with-immediate into the
//! subscriber's registered ring, credits written back into the publisher's memory.
//!
//! Built on rdma-sys 0.3 (libibverbs of rdma-core 44, Debian 12). Every raw call is in [`ffi`]; the rest of this
//! module is safe Rust (`#![forbid(unsafe_code)]` in each file).
//!
//! # Who registers what
//!
//! | side       | object                                  | access                     | written by            |
//! |------------|-----------------------------------------|----------------------------|-----------------------|
//! | subscriber | ring MR: `slot_count * 64` bytes        | LOCAL_WRITE + REMOTE_WRITE | publisher (WRITE_WITH_IMM) |
//! | subscriber | credit source: 8 bytes                  | local only                 | subscriber            |
//! | publisher  | credit word: 8 bytes, one MR per subscriber | LOCAL_WRITE + REMOTE_WRITE | that subscriber (RDMA WRITE) |
//! | publisher  | staging slots: `send_queue_depth * 64` bytes | local only            | publisher             |
//!
//! Each ring, on either side, has its own protection domain, QP and CQ. An RC QP can reach only MRs of its own PD,
//! so a subscriber can write its own credit word and nothing else of the publisher (not another subscriber's
//! credit word, even if it guessed the rkey), and a publisher connected to one ring cannot write another ring
//! of the same subscriber process. A QP that fails affects only its own ring.
//!
//! # Set-up, mapped onto the control messages ([`crate::wire::control`])
//!
//! 1. Subscriber: [`VerbsDevice::open`], then [`VerbsLocalRing::create`]: registers the ring, creates its QP,
//!    moves it RESET -> INIT and fills its receive queue. The returned [`RingGrant::Verbs`] (QP number, PSN, GID,
//!    LID, ring address, ring rkey, slot count) goes in `Subscribe.ring`.
//! 2. Publisher: on `Subscribe`, [`VerbsPublisher::attach`] with that grant: creates the session's PD, CQ, QP,
//!    staging slots and credit word, and moves its QP RESET -> INIT -> RTR -> RTS against the grant's endpoint.
//!    The returned [`AcceptFabric::Verbs`] (its QP number, PSN, GID, LID, credit address and rkey) goes in
//!    `Accept.fabric`.
//! 3. Subscriber: on `Accept`, [`PreparedVerbsLocalRing::connect`] with `accept.fabric`: INIT -> RTR -> RTS, then
//!    writes its consumed seq (0) into the credit word. That first credit is the publisher's sign that the
//!    subscriber's QP is live ([`VerbsRemoteRing::peer_connected`]); writes posted earlier are not lost (RC
//!    retransmits them until the peer reaches RTR, `timeout` x `retry_cnt`), but waiting for it avoids the retry.
//! 4. End: the publisher sends the end-of-stream record, then [`crate::RemoteRing::close`] and
//!    [`VerbsRemoteRing::drain`]; the subscriber learns of a normal end from that record (and the reason of any
//!    other close from the control channel's `Bye`), never from the ring: a verbs ring has no state word the
//!    publisher could write. A transport failure shows as [`crate::PeerState::Closed`]`(FabricError)`.
//!
//! # Hot path
//!
//! `write_with_imm`, `flush`, `consumed_seq` (publisher) and `poll_cq`, `slot`, `release` (subscriber) never
//! allocate, lock or log; the only calls out are `ibv_post_send`/`ibv_post_recv` (the doorbell: MMIO on a NIC,
//! a `write(2)` into the kernel on rxe) and `ibv_poll_cq`. Use one [`VerbsDevice`] per role (publisher, subscriber)
//! and per thread that sets up rings; rings themselves are `Send` and owned by one thread at a time.
//!
//! # Byte orders
//!
//! `imm_data` travels in network order: the sender puts `imm.to_be()` in the WR (`__be32`), the receiver takes
//! `u32::from_be` of the WC's (both in [`ffi`]); [`crate::Completion::imm_data`] is in host order, as on shm.
//! The credit word is a little-endian u64, like every other mdfan wire field.

pub mod ffi;
pub mod gid;
mod local;
mod remote;
pub mod status;
pub mod timestamp;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;

pub use crate::verbs_config::{self as config, CqApi, VerbsConfig};
pub use gid::{GidChoice, GidType};
pub use local::{PreparedVerbsLocalRing, VerbsLocalRing};
pub use remote::{VerbsPublisher, VerbsRemoteRing};
pub use status::wc_status_name;
pub use timestamp::{NicClock, NicRealtime, RtPair, TickExtender};

use crate::wire::control::VerbsEndpoint;
#[cfg(doc)]
use crate::wire::control::{AcceptFabric, RingGrant};
use crate::FabricError;
use ffi::{CompletionQueue, Context, DeviceCaps, RtrAttrs, RtsAttrs};

/// PSNs and QP numbers are 24 bits (IB vol. 1, 9.7.1 / 10.2.4).
const MASK_24: u32 = 0x00ff_ffff;

/// The chosen port and address of a [`VerbsDevice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port_num: u8,
    /// GID index used as `sgid_index`.
    pub gid_index: u32,
    /// The GID at that index (`ibv_query_gid`).
    pub gid: [u8; 16],
    /// Its type from sysfs, if sysfs has it.
    pub gid_type: Option<GidType>,
    /// How the index was chosen.
    pub gid_choice: GidChoice,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// `enum ibv_mtu` of the path MTU used: the config's, lowered to the port's active MTU.
    pub path_mtu_code: u32,
    /// [`ffi::LINK_LAYER_ETHERNET`] (RoCE) or [`ffi::LINK_LAYER_INFINIBAND`].
    pub link_layer: u8,
}

struct DeviceInner {
    ctx: Arc<Context>,
    port: PortInfo,
    cfg: VerbsConfig,
    clock: Option<NicClock>,
}

/// An opened RDMA device with its chosen port and GID, and the config every ring made from it uses. Cheap to
/// clone (an `Arc`); rings keep it alive.
#[derive(Clone)]
pub struct VerbsDevice {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice").field("name", &self.name()).field("port", &self.inner.port).finish()
    }
}

impl VerbsDevice {
    /// Validates `cfg`, opens its device, queries the port and picks the GID index (see [`gid::choose_gid`];
    /// logged at info level with how it was chosen).
    ///
    /// # Errors
    /// [`FabricError::BadRing`] for an invalid config; [`FabricError::NoDevice`] when there is no such device, or
    /// no usable GID on the port; [`FabricError::Verbs`] when a query fails.
    pub fn open(cfg: &VerbsConfig) -> Result<VerbsDevice, FabricError> {
        Self::open_with_sysfs(cfg, Path::new(gid::SYSFS_INFINIBAND))
    }

    /// As [`VerbsDevice::open`], reading GID types under `sysfs_root` instead of `/sys/class/infiniband`.
    ///
    /// # Errors
    /// As [`VerbsDevice::open`].
    pub fn open_with_sysfs(cfg: &VerbsConfig, sysfs_root: &Path) -> Result<VerbsDevice, FabricError> {
        cfg.validate()?;
        let ctx = Context::open(cfg.device.as_deref())?;
        let name = ctx.name().to_string();
        let port_num = cfg.port_num;
        let attr = ctx.query_port(port_num)?;
        if attr.state != ffi::PORT_ACTIVE {
            tracing::warn!(device = %name, port = port_num, state = attr.state,
                "verbs: port is not ACTIVE (4); connections will not come up until it is");
        }
        let table = gid::read_gid_table(&gid::port_dir(sysfs_root, &name, port_num), attr.gid_tbl_len);
        let (gid_index, gid_type, gid_choice) = if table.is_empty() {
            // No sysfs (a container without /sys/class/infiniband): take the configured index, else 0.
            let index = cfg.gid_index.unwrap_or(0);
            let choice = if cfg.gid_index.is_some() { GidChoice::Configured } else { GidChoice::FirstUsed };
            tracing::warn!(device = %name, port = port_num, gid_index = index,
                "verbs: no GID table in sysfs; GID type unknown");
            (index, None, choice)
        } else {
            let (entry, choice) = gid::choose_gid(&table, cfg.gid_index)
                .map_err(|why| FabricError::NoDevice(format!("{name} port {port_num}: {why}")))?;
            (entry.index, entry.kind, choice)
        };
        let gid = ctx.query_gid(port_num, gid_index)?;
        if gid == [0u8; 16] {
            return Err(FabricError::NoDevice(format!("{name} port {port_num}: GID index {gid_index} is empty")));
        }
        if gid_index > u8::MAX as u32 {
            return Err(FabricError::NoDevice(format!("{name} port {port_num}: GID index {gid_index} is over 255")));
        }
        let cfg_mtu = config::path_mtu_code(cfg.path_mtu_bytes).unwrap_or(3);
        let path_mtu_code = if attr.active_mtu == 0 { cfg_mtu } else { cfg_mtu.min(attr.active_mtu) };
        let caps = ctx.caps();
        let clock = NicClock::new(caps.hca_core_clock_khz, caps.completion_timestamp_mask);
        tracing::info!(
            device = %name,
            port = port_num,
            gid_index,
            gid = %gid::gid_to_hex(&gid),
            gid_type = %gid_type.as_ref().map_or("unknown".to_string(), |t| t.to_string()),
            how = gid_choice.as_str(),
            path_mtu_bytes = config::path_mtu_bytes(path_mtu_code),
            completion_timestamps = clock.is_some(),
            dead_peer_detection_ms = cfg.dead_peer_detection().as_millis() as u64,
            rnr_exhaustion_ms = cfg.rnr_exhaustion().map_or(-1.0, |d| d.as_secs_f64() * 1e3),
            rnr_retry_forever = cfg.rnr_retry == 7,
            "verbs: device open, GID chosen"
        );
        let port = PortInfo {
            port_num,
            gid_index,
            gid,
            gid_type,
            gid_choice,
            lid: attr.lid,
            path_mtu_code,
            link_layer: attr.link_layer,
        };
        Ok(VerbsDevice { inner: Arc::new(DeviceInner { ctx, port, cfg: cfg.clone(), clock }) })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        self.inner.ctx.name()
    }

    /// The chosen port and address.
    pub fn port(&self) -> &PortInfo {
        &self.inner.port
    }

    /// The config rings made from this device use.
    pub fn config(&self) -> &VerbsConfig {
        &self.inner.cfg
    }

    /// The device's attributes.
    pub fn caps(&self) -> DeviceCaps {
        self.inner.ctx.caps()
    }

    /// The NIC completion clock, when the device has one (`None` on rxe).
    pub fn nic_clock(&self) -> Option<NicClock> {
        self.inner.clock
    }

    /// Samples a NIC/realtime pair with `ibv_query_rt_values_ex` ([`ffi::Context::query_rt_pair`]) and fits it
    /// with `last`, the caller's previous pair, which it then replaces ([`NicRealtime::from_pairs`]; the first
    /// alone at `clock`'s nominal rate). `None` when the device cannot read its clock (logged at debug level).
    /// Control path: a ring calls it at its start and about once a second.
    pub(crate) fn sample_nic_realtime(&self, clock: NicClock, last: &mut Option<RtPair>) -> Option<NicRealtime> {
        let pair = match self.context().query_rt_pair() {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(device = %self.name(), cause = %e, "verbs: NIC clock not readable");
                return None;
            }
        };
        let fit = match *last {
            Some(earlier) => NicRealtime::from_pairs(clock, earlier, pair),
            None => NicRealtime::from_pair(clock, pair),
        };
        *last = Some(pair);
        Some(fit)
    }

    /// The opened context.
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.ctx
    }

    /// Our side of a connection for a QP: its number, initial PSN, and this port's GID and LID.
    fn endpoint(&self, qpn: u32, psn: u32) -> VerbsEndpoint {
        VerbsEndpoint { qpn, psn, gid: gid::gid_to_hex(&self.inner.port.gid), lid: self.inner.port.lid }
    }

    fn rtr_attrs(&self, remote: &Remote) -> RtrAttrs {
        let (port, cfg) = (&self.inner.port, &self.inner.cfg);
        RtrAttrs {
            port_num: port.port_num,
            path_mtu: port.path_mtu_code,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            dgid: remote.gid,
            dlid: remote.lid,
            sgid_index: port.gid_index as u8,
            hop_limit: cfg.hop_limit,
            traffic_class: cfg.traffic_class,
            min_rnr_timer: cfg.min_rnr_timer,
            max_dest_rd_atomic: 1,
        }
    }

    fn rts_attrs(&self, sq_psn: u32) -> RtsAttrs {
        let cfg = &self.inner.cfg;
        RtsAttrs { sq_psn, timeout: cfg.timeout, retry_cnt: cfg.retry_cnt, rnr_retry: cfg.rnr_retry, max_rd_atomic: 1 }
    }

    /// A CQ of `depth` entries per [`VerbsConfig::cq_api`]; `want_timestamps` for a CQ (the subscriber's receive CQ,
    /// the publisher's send CQ) whose WCs should carry NIC timestamps (when the device has them).
    fn create_cq(&self, depth: u32, want_timestamps: bool) -> Result<Arc<CompletionQueue>, FabricError> {
        let ctx = &self.inner.ctx;
        let timestamps = want_timestamps && self.inner.clock.is_some();
        match self.inner.cfg.cq_api {
            CqApi::Classic => CompletionQueue::create(ctx, depth),
            CqApi::Extended => CompletionQueue::create_ex(ctx, depth, timestamps),
            CqApi::Auto if timestamps => match CompletionQueue::create_ex(ctx, depth, true) {
                Ok(cq) => Ok(cq),
                Err(e) => {
                    tracing::info!(device = %ctx.name(), cause = %e,
                        "verbs: no CQ with completion timestamps; using the classic CQ");
                    CompletionQueue::create(ctx, depth)
                }
            },
            CqApi::Auto => CompletionQueue::create(ctx, depth),
        }
    }
}

/// A peer's endpoint, checked and parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Remote {
    qpn: u32,
    psn: u32,
    gid: [u8; 16],
    lid: u16,
}

/// Checks a peer's [`VerbsEndpoint`] (24-bit QPN and PSN, 32 hex digits of GID); `whose` names it in errors.
fn parse_endpoint(ep: &VerbsEndpoint, whose: &str) -> Result<Remote, FabricError> {
    let bad = |detail: String| FabricError::BadRing { path: format!("verbs endpoint of {whose}"), detail };
    if ep.qpn > MASK_24 || ep.qpn == 0 {
        return Err(bad(format!("qpn {:#x} is not a 24-bit QP number above 0", ep.qpn)));
    }
    if ep.psn > MASK_24 {
        return Err(bad(format!("psn {:#x} is over 24 bits", ep.psn)));
    }
    let gid = gid::gid_from_hex(&ep.gid).ok_or_else(|| bad(format!("gid {:?} is not 32 hex digits", ep.gid)))?;
    Ok(Remote { qpn: ep.qpn, psn: ep.psn, gid, lid: ep.lid })
}

/// A random 24-bit initial PSN (IB vol. 1, 9.7.1: any start; random makes a stale packet of an old connection
/// unlikely to be accepted). Seeded from the process's random hash keys: no extra dependency, no syscall.
fn random_psn() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & MASK_24
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_field_by_field() {
        let ok = VerbsEndpoint { qpn: 0x11, psn: 0xabcdef, gid: "00000000000000000000ffff7f000001".into(), lid: 0 };
        let r = parse_endpoint(&ok, "test").unwrap();
        assert_eq!((r.qpn, r.psn, r.gid[15], r.gid[10]), (0x11, 0xabcdef, 1, 0xff));
        let e = parse_endpoint(&VerbsEndpoint { qpn: 1 << 24, ..ok.clone() }, "sub-a").unwrap_err().to_string();
        assert!(e.contains("qpn 0x1000000") && e.contains("sub-a"), "{e}");
        let e = parse_endpoint(&VerbsEndpoint { psn: 1 << 24, ..ok.clone() }, "x").unwrap_err().to_string();
        assert!(e.contains("psn"), "{e}");
        let e = parse_endpoint(&VerbsEndpoint { gid: "fe80::1".into(), ..ok }, "x").unwrap_err().to_string();
        assert!(e.contains("gid \"fe80::1\""), "{e}");
    }

    #[test]
    fn psns_are_24_bit_and_vary() {
        let psns: Vec<u32> = (0..16).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|&p| p <= MASK_24));
        assert!(psns.iter().any(|&p| p != psns[0]), "{psns:?}");
    }

    #[test]
    fn opening_without_a_device_names_ibv_get_device_list() {
        let has_rdma = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
        if has_rdma {
            return; // covered by the VM run (examples/verbs_loopback.rs)
        }
        let e = VerbsDevice::open(&VerbsConfig::default()).unwrap_err();
        assert!(matches!(e, FabricError::NoDevice(_)), "{e}");
        assert!(e.to_string().contains("ibv_get_device_list"), "{e}");
        let bad = VerbsConfig { path_mtu_bytes: 100, ..Default::default() };
        assert!(VerbsDevice::open(&bad).unwrap_err().to_string().contains("path_mtu_bytes 100"));
    }

    #[test]
    fn rings_are_send() {
        fn send<T: Send>() {}
        send::<VerbsLocalRing>();
        send::<PreparedVerbsLocalRing>();
        send::<VerbsRemoteRing>();
        send::<VerbsPublisher>();
        send::<VerbsDevice>();
    }
}
