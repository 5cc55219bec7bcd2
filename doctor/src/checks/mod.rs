//! The checks, as functions of a [`Source`] and the operator's [`Inputs`].
//!
//! Ids are stable (the runbook and scripts key on them): `rdma.*`, `lossless.*`, `host.*`. With no hot cores
//! given, the checks about hot cores say [`Verdict::Unknown`] and show what they found.

use crate::{Area, Finding, Inputs, Source, Verdict};

mod host;
mod lossless;
mod rdma;
mod timestamping;

/// The RDMA device and netdev the checks look at, resolved once from the inputs and the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The RDMA device (`mlx5_0`), if the host has one.
    pub device: Option<String>,
    /// Every RDMA device listed.
    pub devices: Vec<String>,
    /// The netdev (`--netdev`, else the one the RDMA device sits on).
    pub netdev: Option<String>,
}

impl Target {
    /// Resolves the device (`--device`, else the first listed) and its netdev.
    pub fn resolve(src: &dyn Source, inputs: &Inputs) -> Target {
        let devices = src.list("/sys/class/infiniband").unwrap_or_default();
        let device = match &inputs.device {
            Some(d) => devices.iter().find(|x| *x == d).cloned(),
            None => devices.first().cloned(),
        };
        let netdev = inputs.netdev.clone().or_else(|| {
            let dev = device.as_ref()?;
            src.list(&format!("/sys/class/infiniband/{dev}/device/net")).and_then(|v| v.into_iter().next()).or_else(
                || {
                    let ndevs = format!("/sys/class/infiniband/{dev}/ports/{}/gid_attrs/ndevs", inputs.port);
                    src.list(&ndevs)?.iter().find_map(|i| src.read_trim(&format!("{ndevs}/{i}")))
                },
            )
        });
        Target { device, devices, netdev }
    }
}

/// Builds a finding.
pub(crate) fn finding(
    id: &str,
    area: Area,
    verdict: Verdict,
    found: impl Into<String>,
    wanted: impl Into<String>,
    why: &str,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        id: id.to_owned(),
        area,
        verdict,
        found: found.into(),
        wanted: wanted.into(),
        why: why.to_owned(),
        fix: fix.into(),
    }
}

/// Every check, in the order printed: RDMA, lossless Ethernet, host.
pub fn all(src: &dyn Source, inputs: &Inputs) -> Vec<Finding> {
    let t = Target::resolve(src, inputs);
    let mut out = vec![
        rdma::device(&t, inputs),
        rdma::port(src, &t, inputs),
        rdma::gid(src, &t, inputs),
        rdma::mtu(src, &t, inputs),
        rdma::speed(src, &t, inputs),
        lossless::pfc(src, &t, inputs),
        lossless::trust(src, &t),
        lossless::dscp(src, &t, inputs),
        lossless::traffic_class(src, &t, inputs),
        lossless::ecn(src, &t, inputs),
        host::cores(src, inputs),
    ];
    out.extend(host::isolation(src, inputs));
    out.extend([
        host::governor(src, inputs),
        host::cstates(src, inputs),
        host::smt(src, inputs),
        host::thp(src),
        host::hugepages(src, inputs),
        host::swap(src),
        host::numa(src, &t, inputs),
        host::irq(src, &t, inputs),
        host::memlock(src, inputs),
        host::shm(src, inputs),
        host::clocksource(src),
        host::tsc(src),
        host::ptp(src, &t),
    ]);
    out.extend(timestamping::checks(src, &inputs.line_interfaces));
    out
}

/// The checks whose findings cost tail latency but do not stop a run: what a binary logs as warnings at start
/// and lists with its report.
pub const TAIL_LATENCY: [&str; 10] = [
    "host.isolcpus",
    "host.nohz_full",
    "host.rcu_nocbs",
    "host.governor",
    "host.cstates",
    "host.smt",
    "host.irq",
    "host.thp",
    "host.swap",
    "host.clocksource",
];

/// The [`TAIL_LATENCY`] findings that warn or fail on this host.
pub fn tail_warnings(src: &dyn Source, inputs: &Inputs) -> Vec<Finding> {
    all(src, inputs)
        .into_iter()
        .filter(|f| TAIL_LATENCY.contains(&f.id.as_str()) && matches!(f.verdict, Verdict::Warn | Verdict::Fail))
        .collect()
}

/// The checks whose failure makes mdfan fail at start or lie about what it does, for the publisher's and
/// subscriber's preflight: `host.memlock` (ring registration and `mlockall`), `host.shm` (ring files fit),
/// `host.cores` (the hot cores exist and this process may run on them) and, when `inputs.need_rdma`,
/// `rdma.device`. In that order; callers refuse to start on any [`Verdict::Fail`] ([`crate::exit_code`]).
pub fn preflight(src: &dyn Source, inputs: &Inputs) -> Vec<Finding> {
    let mut out = vec![host::memlock(src, inputs), host::shm(src, inputs), host::cores(src, inputs)];
    if inputs.need_rdma {
        out.push(rdma::device(&Target::resolve(src, inputs), inputs));
    }
    out
}

/// A finding for a check that needs an RDMA device when there is none.
pub(crate) fn no_device(id: &str, area: Area, wanted: &str, why: &str) -> Finding {
    finding(id, area, Verdict::Unknown, "no RDMA device", wanted, why, "")
}

/// Parses a number that may carry a unit after it (`100 Gb/sec (4X EDR)` -> 100).
pub(crate) fn leading_number(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}
