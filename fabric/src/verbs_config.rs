//! [`VerbsConfig`]: every knob of the verbs provider, with its unit, default and valid range.
//!
//! Loaded from TOML (or built in code with `..VerbsConfig::default()`), checked once with
//! [`VerbsConfig::validate`] before any device is opened. Unknown keys are refused, so a typo is an error and not
//! a silent default. Compiled in every build (the provider itself needs the `verbs` feature), so a publisher
//! config's `[fabric.verbs]` is checked whole wherever it is loaded.
//!
//! ```toml
//! [fabric.verbs]
//! device = "mlx5_0"          # default: the first device libibverbs lists
//! port_num = 1
//! gid_index = 3              # default: chosen from sysfs (RoCE v2, IPv4-mapped first)
//! path_mtu_bytes = 1024
//! timeout = 14               # 4.096 us * 2^14 = 67 ms per ACK timeout (1..=31; 0 = forever is refused)
//! retry_cnt = 7
//! rnr_retry = 6              # RNR NAK retries (7 = forever); 6 x 0.64 ms: a dry receive queue fails the QP in 3.8 ms
//! min_rnr_timer = 12         # IB code 12 = 0.64 ms
//! send_queue_depth = 256
//! signal_every = 32
//! post_batch = 16
//! recv_queue_depth = 1024     # default: the ring's slot count (clamped to the device)
//! recv_repost_batch = 32
//! credit_every = 64          # default: slot_count / 8, at most 256
//! cq_api = "auto"            # "auto" | "classic" | "extended"
//! ```
#![forbid(unsafe_code)]

use serde::Deserialize;

use crate::FabricError;

/// Which CQ API the provider uses (`ibv_create_cq` + `ibv_poll_cq`, or `ibv_create_cq_ex` + `ibv_start_poll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CqApi {
    /// The extended CQ with NIC completion timestamps on the subscriber's receive CQ and the publisher's send CQ
    /// when the device reports a timestamp clock (`ibv_query_device_ex`: `completion_timestamp_mask != 0`); the
    /// classic CQ otherwise, and whenever `ibv_create_cq_ex` refuses. The default.
    #[default]
    Auto,
    /// Always `ibv_create_cq` / `ibv_poll_cq`; no timestamps.
    Classic,
    /// Always `ibv_create_cq_ex` / `ibv_start_poll` (with timestamps when the device has them). Fails set-up if
    /// the device has no extended CQ. Mostly for testing the extended poll path on devices without timestamps.
    Extended,
}

/// Verbs provider settings. Every field has a documented default (see [`Default`]); units are in the names or
/// the docs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerbsConfig {
    /// RDMA device name as `ibv_devices` prints it (`mlx5_0`, `rxe0`). Default: the first device listed.
    pub device: Option<String>,
    /// Port of the device, numbered from 1. Default 1.
    pub port_num: u8,
    /// GID table index for the RoCE/IB address (IB vol. 1, 4.1.1; the `sgid_index` of the address vector).
    /// Default: chosen at start from `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<idx>`: the first
    /// RoCE v2 GID holding an IPv4-mapped address, else the first RoCE v2 GID, else the first non-zero GID. Valid
    /// 0..=255 (and below the port's GID table length).
    pub gid_index: Option<u32>,
    /// Largest payload per packet, in bytes: 256, 512, 1024, 2048 or 4096; lowered to the port's active MTU.
    /// Default 1024 (a record is 64 bytes, so this only matters for the path, not the payload). IB vol. 1, 9.7.7.
    pub path_mtu_bytes: u32,
    /// Local ACK timeout as the IB exponent: 4.096 us * 2^timeout. Valid 1..=31 (0 means infinite and is refused:
    /// a dead peer would never be noticed). Default 14 (67 ms). IB vol. 1, 9.7.6.1.3 / `ibv_modify_qp(3)`
    /// `timeout`. See [`VerbsConfig::dead_peer_detection`].
    pub timeout: u8,
    /// Transport retries after an ACK timeout before the QP goes to ERR (`IBV_WC_RETRY_EXC_ERR`). Valid 0..=7.
    /// Default 7.
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (receiver had no receive WR posted), each after the receiver's `min_rnr_timer`;
    /// past them the QP goes to ERR (`IBV_WC_RNR_RETRY_EXC_ERR`: `fabric_error`). 7 = retry forever: a
    /// subscriber that stops re-posting receives (stopped, hung) would then hold the publisher's QP and its send
    /// queue for as long as it lives. Valid 0..=7. Default 6 (worst case: [`VerbsConfig::rnr_exhaustion`], 3.8 ms
    /// with the default timer; a recorder that may stop for seconds sets 7 or a longer `min_rnr_timer`).
    pub rnr_retry: u8,
    /// Delay the receiver asks for in its RNR NAK, as the IB code (IB vol. 1, table 45: 12 = 0.64 ms,
    /// 14 = 1.28 ms, 0 = 655 ms). Valid 0..=31. Default 12.
    pub min_rnr_timer: u8,
    /// Hop limit of the GRH (RoCE v2: the IP TTL). Default 64.
    pub hop_limit: u8,
    /// Traffic class of the GRH (RoCE v2: the IP DSCP << 2 | ECN). Default 0. Set the DSCP your lossless class
    /// maps to (e.g. 26 << 2 = 104).
    pub traffic_class: u8,
    /// Send WRs per publisher QP (`max_send_wr`): how many writes may be posted and not yet completed. Memory
    /// per subscriber: `send_queue_depth * 64` bytes of registered staging slots plus the provider's WQEs.
    /// Valid 1..=device `max_qp_wr`. Default 256.
    pub send_queue_depth: u32,
    /// One send WR in `signal_every` asks for a WC (selective signalling); the others are reaped with it.
    /// Valid 1..=`send_queue_depth`. Default 32.
    pub signal_every: u32,
    /// Writes collected before one `ibv_post_send` (doorbell batching); `flush` posts a shorter batch.
    /// Valid 1..=`send_queue_depth`. Default 16.
    pub post_batch: u32,
    /// Receive WRs kept posted on a subscriber QP (each WRITE-with-immediate consumes one). This, not the ring,
    /// bounds how far a subscriber that stops reaping its CQ can fall behind: past it the publisher's QP sees RNR
    /// NAKs (retried every `min_rnr_timer`), its send queue fills and its post counts as a full ring. Default:
    /// the ring's slot count, so the ring means what it says. Either way clamped to the device's `max_qp_wr` and
    /// to its `max_cqe` (the CQ holds every receive; `ibv_devinfo -v` shows both). Valid 1..=2^20.
    pub recv_queue_depth: Option<u32>,
    /// Receive WRs re-posted per `ibv_post_recv` (one doorbell for this many). Valid 1..=`recv_queue_depth`;
    /// lowered to the depth in use. Default 32.
    pub recv_repost_batch: u32,
    /// The subscriber writes its consumed seq back to the publisher (one 8-byte RDMA WRITE) once per this many
    /// released records. Default: `slot_count / 8`, at most 256; always lowered to `slot_count / 2` so the
    /// publisher never waits for a credit that cannot come.
    pub credit_every: Option<u32>,
    /// Which CQ API to use. Default [`CqApi::Auto`].
    pub cq_api: CqApi,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port_num: 1,
            gid_index: None,
            path_mtu_bytes: 1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            min_rnr_timer: 12,
            hop_limit: 64,
            traffic_class: 0,
            send_queue_depth: 256,
            signal_every: 32,
            post_batch: 16,
            recv_queue_depth: None,
            recv_repost_batch: 32,
            credit_every: None,
            cq_api: CqApi::Auto,
        }
    }
}

/// The delay an RNR NAK asks for, by its 5-bit code (IB vol. 1, table 45: 0 = 655.36 ms, 1 = 0.01 ms, ...,
/// 12 = 0.64 ms, ..., 31 = 491.52 ms); codes above 31 read as 31.
pub fn rnr_timer(code: u8) -> std::time::Duration {
    const US_X100: [u32; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
        4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    std::time::Duration::from_micros(US_X100[code.min(31) as usize] as u64 * 10)
}

/// Most credits the default `credit_every` waits for.
const DEFAULT_CREDIT_EVERY_MAX: u32 = 256;
/// Largest `recv_queue_depth` accepted (no device offers more per QP; mlx5 has 32 768).
const MAX_RECV_QUEUE_DEPTH: u32 = 1 << 20;

/// The IB path MTU code (`enum ibv_mtu`: 1 = 256 B .. 5 = 4096 B) for a size in bytes, `None` if not one of them.
pub const fn path_mtu_code(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// Bytes of an IB path MTU code (`enum ibv_mtu`), 0 for an unknown code.
pub const fn path_mtu_bytes(code: u32) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

impl VerbsConfig {
    /// Checks every field against its documented range.
    ///
    /// How long a sender takes, at worst, to see a dead receiver: its QP goes to ERR (`IBV_WC_RETRY_EXC_ERR`)
    /// after `retry_cnt + 1` local ACK timeouts of 4.096 us * 2^`timeout` each (IB vol. 1, 9.7.6.1.3; C9-140).
    /// A receiver that answers but has no receive WR posted is not dead: RNR retries (`rnr_retry`, 7 = forever)
    /// are not counted here.
    pub fn dead_peer_detection(&self) -> std::time::Duration {
        let ack_timeout_ns = 4_096u64 << self.timeout.min(31);
        std::time::Duration::from_nanos(ack_timeout_ns * (self.retry_cnt as u64 + 1))
    }

    /// How long a sender retries, at worst, against a receiver whose receive queue stays dry before its QP goes
    /// to ERR (`IBV_WC_RNR_RETRY_EXC_ERR`): `rnr_retry` waits of the RNR timer (IB vol. 1, table 45, the code the
    /// receiver advertises: here this config's `min_rnr_timer`, the same on both ends with the defaults). `None`
    /// for `rnr_retry = 7`: forever.
    pub fn rnr_exhaustion(&self) -> Option<std::time::Duration> {
        (self.rnr_retry < 7).then(|| rnr_timer(self.min_rnr_timer) * self.rnr_retry as u32)
    }

    /// # Errors
    /// [`FabricError::BadSetting`] naming the field and its value.
    pub fn validate(&self) -> Result<(), FabricError> {
        let bad = |detail: String| Err(FabricError::BadSetting(detail));
        if self.port_num == 0 {
            return bad("port_num 0: ports are numbered from 1".into());
        }
        if let Some(g) = self.gid_index {
            if g > u8::MAX as u32 {
                return bad(format!("gid_index {g} is over 255 (the address vector's sgid_index is 8 bits)"));
            }
        }
        if path_mtu_code(self.path_mtu_bytes).is_none() {
            return bad(format!("path_mtu_bytes {} must be 256, 512, 1024, 2048 or 4096", self.path_mtu_bytes));
        }
        if self.timeout == 0 {
            return bad("timeout 0 waits forever for an ACK: a dead subscriber would hang its QP with no error; \
                 use 1..=31 (an exponent: 4.096 us * 2^timeout; 14 = 67 ms)"
                .into());
        }
        if self.timeout > 31 {
            return bad(format!("timeout {} must be 1..=31 (an exponent: 4.096 us * 2^timeout)", self.timeout));
        }
        if self.retry_cnt > 7 {
            return bad(format!("retry_cnt {} must be 0..=7", self.retry_cnt));
        }
        if self.rnr_retry > 7 {
            return bad(format!("rnr_retry {} must be 0..=7 (7 = forever)", self.rnr_retry));
        }
        if self.min_rnr_timer > 31 {
            return bad(format!("min_rnr_timer {} must be 0..=31 (an IB code)", self.min_rnr_timer));
        }
        if self.send_queue_depth == 0 {
            return bad("send_queue_depth 0: at least one send WR is needed".into());
        }
        if !(1..=self.send_queue_depth).contains(&self.signal_every) {
            return bad(format!(
                "signal_every {} must be 1..=send_queue_depth ({})",
                self.signal_every, self.send_queue_depth
            ));
        }
        if !(1..=self.send_queue_depth).contains(&self.post_batch) {
            return bad(format!(
                "post_batch {} must be 1..=send_queue_depth ({})",
                self.post_batch, self.send_queue_depth
            ));
        }
        if let Some(depth) = self.recv_queue_depth.filter(|d| !(1..=MAX_RECV_QUEUE_DEPTH).contains(d)) {
            return bad(format!("recv_queue_depth {depth} must be 1..={MAX_RECV_QUEUE_DEPTH}"));
        }
        let recv_depth = self.recv_queue_depth.unwrap_or(MAX_RECV_QUEUE_DEPTH);
        if !(1..=recv_depth).contains(&self.recv_repost_batch) {
            return bad(format!(
                "recv_repost_batch {} must be 1..=recv_queue_depth ({recv_depth})",
                self.recv_repost_batch
            ));
        }
        if self.credit_every == Some(0) {
            return bad("credit_every 0: at least one record per credit".into());
        }
        Ok(())
    }

    /// The receive WRs to keep posted for a ring of `slot_count` slots, before the device's limits:
    /// `recv_queue_depth`, or the slot count.
    pub fn recv_queue_depth_for(&self, slot_count: u32) -> u32 {
        self.recv_queue_depth.unwrap_or(slot_count)
    }

    /// The credit interval for a ring of `slot_count` slots: `credit_every`, or `slot_count / 8` capped at 256,
    /// and never more than `slot_count / 2` (nor less than 1).
    pub fn credit_every_for(&self, slot_count: u32) -> u32 {
        let wanted = self.credit_every.unwrap_or((slot_count / 8).min(DEFAULT_CREDIT_EVERY_MAX));
        wanted.min(slot_count / 2).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones_and_valid() {
        let c = VerbsConfig::default();
        assert_eq!(c.port_num, 1);
        assert_eq!(c.gid_index, None);
        assert_eq!(c.path_mtu_bytes, 1024);
        assert_eq!((c.timeout, c.retry_cnt, c.rnr_retry, c.min_rnr_timer), (14, 7, 6, 12));
        assert_eq!((c.send_queue_depth, c.signal_every, c.post_batch), (256, 32, 16));
        assert_eq!((c.recv_queue_depth, c.recv_repost_batch), (None, 32));
        assert_eq!((c.recv_queue_depth_for(131_072), c.recv_queue_depth_for(1024)), (131_072, 1024));
        assert_eq!(c.cq_api, CqApi::Auto);
        c.validate().unwrap();
    }

    #[test]
    fn an_empty_table_is_the_default_and_fields_parse() {
        let empty: VerbsConfig = toml::from_str("").unwrap();
        assert_eq!(empty, VerbsConfig::default());
        let c: VerbsConfig = toml::from_str(
            "device = \"rxe0\"\ngid_index = 1\npath_mtu_bytes = 4096\nsignal_every = 8\ncredit_every = 4\ncq_api = \"extended\"\n",
        )
        .unwrap();
        assert_eq!(c.device.as_deref(), Some("rxe0"));
        assert_eq!(c.gid_index, Some(1));
        assert_eq!(c.path_mtu_bytes, 4096);
        assert_eq!(c.signal_every, 8);
        assert_eq!(c.credit_every, Some(4));
        assert_eq!(c.cq_api, CqApi::Extended);
        assert_eq!(c.send_queue_depth, 256, "unnamed fields keep their default");
        c.validate().unwrap();
    }

    #[test]
    fn the_dead_peer_bound_follows_timeout_and_retry_cnt() {
        // defaults: 8 ACK timeouts of 4.096 us * 2^14 = 67.1 ms each
        assert_eq!(VerbsConfig::default().dead_peer_detection().as_nanos(), 8 * 4_096 * (1 << 14));
        // a dry receive queue: 6 retries of 0.64 ms (code 12) by default; 7 is forever
        assert_eq!(VerbsConfig::default().rnr_exhaustion(), Some(std::time::Duration::from_micros(3_840)));
        assert_eq!(VerbsConfig { rnr_retry: 7, ..Default::default() }.rnr_exhaustion(), None);
        let slow = VerbsConfig { rnr_retry: 3, min_rnr_timer: 0, ..Default::default() };
        assert_eq!(slow.rnr_exhaustion(), Some(std::time::Duration::from_micros(3 * 655_360)));
        assert_eq!(
            (rnr_timer(1), rnr_timer(31)),
            (std::time::Duration::from_micros(10), std::time::Duration::from_micros(491_520))
        );
        let fast = VerbsConfig { timeout: 10, retry_cnt: 2, ..Default::default() };
        assert_eq!(fast.dead_peer_detection().as_nanos(), 3 * 4_096 * (1 << 10));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let e = toml::from_str::<VerbsConfig>("gid_idx = 1").unwrap_err().to_string();
        assert!(e.contains("gid_idx"), "{e}");
        let e = toml::from_str::<VerbsConfig>("cq_api = \"fast\"").unwrap_err().to_string();
        assert!(e.contains("fast"), "{e}");
        let cases: [(VerbsConfig, &str); 11] = [
            (VerbsConfig { path_mtu_bytes: 1500, ..Default::default() }, "path_mtu_bytes 1500"),
            (VerbsConfig { timeout: 32, ..Default::default() }, "timeout 32"),
            (VerbsConfig { timeout: 0, ..Default::default() }, "timeout 0 waits forever for an ACK"),
            (VerbsConfig { retry_cnt: 8, ..Default::default() }, "retry_cnt 8"),
            (VerbsConfig { signal_every: 0, ..Default::default() }, "signal_every 0"),
            (VerbsConfig { post_batch: 257, ..Default::default() }, "post_batch 257"),
            (VerbsConfig { port_num: 0, ..Default::default() }, "port_num 0"),
            (VerbsConfig { gid_index: Some(256), ..Default::default() }, "gid_index 256"),
            (VerbsConfig { credit_every: Some(0), ..Default::default() }, "credit_every 0"),
            (VerbsConfig { recv_queue_depth: Some(0), ..Default::default() }, "recv_queue_depth 0"),
            (
                VerbsConfig { recv_queue_depth: Some(16), recv_repost_batch: 32, ..Default::default() },
                "recv_repost_batch 32 must be 1..=recv_queue_depth (16)",
            ),
        ];
        for (cfg, want) in cases {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{want}: {e}");
        }
    }

    #[test]
    fn credit_interval_defaults_to_an_eighth_capped_and_never_over_half_the_ring() {
        let c = VerbsConfig::default();
        assert_eq!(c.credit_every_for(64), 8);
        assert_eq!(c.credit_every_for(1024), 128);
        assert_eq!(c.credit_every_for(131_072), 256);
        let c = VerbsConfig { credit_every: Some(100), ..Default::default() };
        assert_eq!(c.credit_every_for(64), 32);
        assert_eq!(c.credit_every_for(1024), 100);
        let c = VerbsConfig { credit_every: Some(1), ..Default::default() };
        assert_eq!(c.credit_every_for(64), 1);
    }

    #[test]
    fn path_mtu_codes_follow_enum_ibv_mtu() {
        assert_eq!(path_mtu_code(256), Some(1));
        assert_eq!(path_mtu_code(4096), Some(5));
        assert_eq!(path_mtu_code(9000), None);
        for code in 1..=5 {
            assert_eq!(path_mtu_code(path_mtu_bytes(code)), Some(code));
        }
        assert_eq!(path_mtu_bytes(0), 0);
    }
}
