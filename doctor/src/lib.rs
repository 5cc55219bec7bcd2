//! mdfan-doctor: is this host fit to run mdfan's hot loops over RoCE?
//!
//! Each check reads what the kernel exposes (sysfs, procfs, and optional tools such as iproute2's `dcb`) through a
//! [`Source`] and returns a [`Finding`]: a [`Verdict`], the value found, the value wanted, why it matters for tail
//! latency and the command that fixes it. Where a NIC or kernel exposes nothing, the verdict is
//! [`Verdict::Unknown`], never a guess.
//!
//! - [`checks::all`]: every check, in a fixed order (what the binary prints).
//! - [`checks::preflight`]: the checks whose failure makes mdfan fail or lie at start (memlock, `/dev/shm` space,
//!   hot cores allowed, RDMA device present), for the publisher and subscriber to run before they bind.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

pub mod checks;
pub mod cpulist;
pub mod render;
pub mod source;

pub use source::{Rooted, Source, Space};

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// As wanted.
    Pass,
    /// Works, but costs tail latency (or will under load).
    Warn,
    /// mdfan will fail, lose data or lie about its latency here.
    Fail,
    /// The host exposes nothing to judge by (no such NIC, tool or file).
    Unknown,
}

impl Verdict {
    /// Lower-case name, as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Unknown => "unknown",
        }
    }
}

/// Which part of the host a check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Area {
    /// RDMA devices, ports, GIDs, MTU, link speed.
    Rdma,
    /// The lossless-Ethernet pillars of RoCE: PFC, DSCP and trust mode, ECN (DCQCN), traffic class.
    Lossless,
    /// CPU isolation, power management, memory, clocks.
    Host,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable id (`rdma.gid`, `host.memlock`): what the runbook and scripts key on.
    pub id: String,
    /// The area.
    pub area: Area,
    /// The outcome.
    pub verdict: Verdict,
    /// The value found on this host.
    pub found: String,
    /// The value wanted.
    pub wanted: String,
    /// Why it matters for tail latency (or correctness).
    pub why: String,
    /// The command (or setting) that fixes it; empty when there is nothing to do.
    pub fix: String,
}

/// What the checks judge against: the operator's plan for this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// The cores the hot loops will be pinned to (publisher hot loop, subscriber pollers). Empty: the isolation
    /// checks report what is isolated without judging a core.
    pub hot_cores: Vec<usize>,
    /// Bytes of ring memory mdfan will register and lock (the sum of the rings on this host); `None`: not judged.
    pub ring_bytes: Option<u64>,
    /// Where shared-memory rings are created.
    pub shm_dir: String,
    /// The RDMA device to use; `None`: the first one listed.
    pub device: Option<String>,
    /// The RDMA port.
    pub port: u32,
    /// The netdev; `None`: the one the RDMA device sits on.
    pub netdev: Option<String>,
    /// Whether this host is meant to run the verbs fabric: then no RDMA device is a failure, not a warning.
    pub need_rdma: bool,
    /// The IP traffic class mdfan's RoCE v2 packets carry (`traffic_class` in `[fabric.verbs]`, `--traffic-class`
    /// of `mdfan-subscribe`): DSCP << 2 | ECN. Default 0, mdfan's own default, which is the best-effort class.
    pub traffic_class: u8,
    /// The 802.1p priority the network runs lossless (PFC) for RoCE.
    pub roce_priority: u8,
    /// The interfaces the feed's lines come in on (`lines.interface`'s device): each gets the hardware
    /// timestamping checks (`lines.hw_timestamping.IF`, `lines.hw_rx.IF`, `lines.phc_sync.IF`). Empty: none.
    pub line_interfaces: Vec<String>,
}

impl Default for Inputs {
    fn default() -> Inputs {
        Inputs {
            hot_cores: Vec::new(),
            ring_bytes: None,
            shm_dir: "/dev/shm".to_owned(),
            device: None,
            port: 1,
            netdev: None,
            need_rdma: false,
            traffic_class: 0,
            roce_priority: 3,
            line_interfaces: Vec::new(),
        }
    }
}

/// The worst verdict decides the exit code: 1 if any check failed, else 0.
pub fn exit_code(findings: &[Finding]) -> i32 {
    i32::from(findings.iter().any(|f| f.verdict == Verdict::Fail))
}
