//! The lossless-Ethernet pillars RoCE stands on: PFC on the RoCE priority, DSCP trust and the DSCP -> priority
//! map, ECN for DCQCN, the traffic class mdfan's packets carry. Read from iproute2's `dcb` (dcb-pfc(8),
//! dcb-app(8), dcb-apptrust(8)), mlx5's `ecn` sysfs (`/sys/class/net/IF/ecn/roce_{np,rp}/enable/PRIO`) and
//! `mlnx_qos` where `dcb` says nothing; "unknown" when the NIC exposes none of them.

use super::{finding, no_device, Target};
use crate::{Area, Finding, Inputs, Source, Verdict};

const AREA: Area = Area::Lossless;

/// The per-priority PFC state from `dcb pfc show dev IF` (`prio-pfc 0:off 1:off 2:off 3:on ...`; the first
/// releases printed `pg-pfc`).
pub fn parse_pfc(text: &str) -> Option<[bool; 8]> {
    let line = text.lines().find(|l| {
        let l = l.trim_start();
        l.starts_with("prio-pfc") || l.starts_with("pg-pfc")
    })?;
    let mut on = [false; 8];
    for item in line.split_whitespace().skip(1) {
        let (p, v) = item.split_once(':')?;
        *on.get_mut(p.parse::<usize>().ok()?)? = v == "on";
    }
    Some(on)
}

fn prio_list(on: &[bool; 8]) -> String {
    let v: Vec<String> = (0..8).filter(|p| on[*p]).map(|p| p.to_string()).collect();
    v.join(",")
}

pub(super) fn pfc(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "lossless.pfc";
    const WHY: &str = "RoCE's go-back-N recovery turns one dropped packet into a retransmit timeout (milliseconds); \
                       PFC pauses the RoCE priority instead of dropping. On other priorities it only spreads pauses \
                       (head-of-line blocking, pause storms) to traffic that does not need it";
    let prio = inputs.roce_priority;
    let wanted = format!("PFC on priority {prio} only");
    let Some(_) = &t.device else { return no_device(ID, AREA, &wanted, WHY) };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let fix = format!("dcb pfc set dev {netdev} prio-pfc all:off {prio}:on (and the same on the switch ports)");
    let Some(on) = src.command(&["dcb", "pfc", "show", "dev", netdev]).as_deref().and_then(parse_pfc) else {
        let found = format!("dcb pfc show dev {netdev}: no answer (no dcb tool or no DCB on the netdev)");
        return finding(ID, AREA, Verdict::Unknown, found, wanted, WHY, fix);
    };
    let others = (0..8u8).any(|p| p != prio && on[usize::from(p)]);
    let verdict = match (on[usize::from(prio) & 7], others) {
        (false, _) => Verdict::Fail,
        (true, true) => Verdict::Warn,
        (true, false) => Verdict::Pass,
    };
    let found = if on.contains(&true) {
        format!("PFC on priority {}", prio_list(&on))
    } else {
        "PFC off on every priority".to_owned()
    };
    finding(ID, AREA, verdict, found, wanted, WHY, fix)
}

/// The trust mode: `dcb apptrust show dev IF` (`order pcp dscp`), else `mlnx_qos -i IF`
/// (`Priority trust state: dscp`).
fn trust_mode(src: &dyn Source, netdev: &str) -> Option<String> {
    if let Some(out) = src.command(&["dcb", "apptrust", "show", "dev", netdev]) {
        if let Some(line) = out.lines().find(|l| l.trim_start().starts_with("order")) {
            let order: Vec<&str> = line.split_whitespace().skip(1).map(|s| s.trim_end_matches(',')).collect();
            return Some(order.join(" "));
        }
    }
    let out = src.command(&["mlnx_qos", "-i", netdev])?;
    let line = out.lines().find(|l| l.to_ascii_lowercase().contains("trust state"))?;
    Some(line.split(':').nth(1)?.trim().to_owned())
}

pub(super) fn trust(src: &dyn Source, t: &Target) -> Finding {
    const ID: &str = "lossless.trust";
    const WANTED: &str = "trust dscp";
    const WHY: &str = "RoCE v2 packets are usually untagged, so only their DSCP can put them on the PFC priority; \
                       in PCP trust an untagged packet lands on priority 0, which is lossy";
    let Some(_) = &t.device else { return no_device(ID, AREA, WANTED, WHY) };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let fix = format!("dcb apptrust set dev {netdev} order dscp (older mlx5 tools: mlnx_qos -i {netdev} --trust dscp)");
    match trust_mode(src, netdev) {
        None => {
            let found = "neither dcb apptrust nor mlnx_qos answered";
            finding(ID, AREA, Verdict::Unknown, found, WANTED, WHY, fix)
        }
        Some(mode) => {
            let verdict = if mode.split_whitespace().any(|m| m == "dscp") { Verdict::Pass } else { Verdict::Warn };
            finding(ID, AREA, verdict, format!("trust {mode}"), WANTED, WHY, fix)
        }
    }
}

/// DSCP -> priority entries from `dcb app show dev IF dscp-prio` (`dscp-prio 24:3 26:3`; symbolic names such as
/// `CS3:3` are printed unless `-N`, so the doctor asks with `-N`).
pub fn parse_dscp_map(text: &str) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with("dscp-prio")) {
        for item in line.split_whitespace().skip(1) {
            if let Some((d, p)) = item.split_once(':') {
                if let (Ok(d), Ok(p)) = (d.parse(), p.parse()) {
                    out.push((d, p));
                }
            }
        }
    }
    out
}

pub(super) fn dscp(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "lossless.dscp";
    const WHY: &str = "the DSCP mdfan marks must map to the PFC priority, or RoCE traffic rides a lossy priority \
                       and every congestion drop costs a retransmit timeout";
    let dscp = inputs.traffic_class >> 2;
    let prio = inputs.roce_priority;
    let wanted = format!("DSCP {dscp} -> priority {prio}");
    let Some(_) = &t.device else { return no_device(ID, AREA, &wanted, WHY) };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let fix = format!("dcb app add dev {netdev} dscp-prio {dscp}:{prio}");
    let Some(out) = src.command(&["dcb", "-N", "app", "show", "dev", netdev, "dscp-prio"]) else {
        let found = format!("dcb app show dev {netdev}: no answer");
        return finding(ID, AREA, Verdict::Unknown, found, wanted, WHY, fix);
    };
    let map = parse_dscp_map(&out);
    let mapped: Vec<u8> = map.iter().filter(|(d, _)| *d == dscp).map(|(_, p)| *p).collect();
    let (verdict, found) = match mapped.as_slice() {
        [] => {
            // No APP entry: the NIC's default DSCP -> priority (mlx5: DSCP / 8).
            let default = dscp / 8;
            let v = if default == prio { Verdict::Warn } else { Verdict::Fail };
            (v, format!("no dscp-prio entry for {dscp} (mlx5 default {dscp}/8 = priority {default})"))
        }
        [p] if *p == prio => (Verdict::Pass, format!("DSCP {dscp} -> priority {p}")),
        ps => {
            let list: Vec<String> = ps.iter().map(u8::to_string).collect();
            (Verdict::Fail, format!("DSCP {dscp} -> priority {}", list.join(",")))
        }
    };
    finding(ID, AREA, verdict, found, wanted, WHY, fix)
}

pub(super) fn traffic_class(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "lossless.traffic_class";
    const WANTED: &str = "a non-zero DSCP, the same on publisher, subscribers and the perftest baseline";
    const WHY: &str = "traffic class 0 is the best-effort class, queued with bulk traffic; the baseline measured on \
                       another class than mdfan's is not a baseline";
    let Some(dev) = &t.device else { return no_device(ID, AREA, WANTED, WHY) };
    let tc = inputs.traffic_class;
    let mut found = format!("traffic_class {tc} = DSCP {} ECN {}", tc >> 2, tc & 3);
    // rdma_cm's default ToS (configfs): what perftest's -R and other rdma_cm tools use. mdfan does not use rdma_cm.
    let cm = format!("/sys/kernel/config/rdma_cm/{dev}/ports/{}/default_roce_tos", inputs.port);
    if let Some(tos) = src.read_trim(&cm) {
        found.push_str(&format!("; rdma_cm default_roce_tos {tos}"));
    }
    let verdict = if tc >> 2 == 0 { Verdict::Warn } else { Verdict::Pass };
    let fix = "traffic_class = 104 (DSCP 26 << 2) in the publisher's [fabric.verbs], --traffic-class 104 on \
               subscribers, ib_write_lat --tclass=104; then run the doctor with --traffic-class 104";
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}

pub(super) fn ecn(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "lossless.ecn";
    const WHY: &str = "DCQCN: the receiver (notification point) answers ECN marks with CNPs and the sender \
                       (reaction point) slows down, so queues stay short before PFC has to pause the link; without \
                       it congestion is met by pauses alone (pause storms, victim flows)";
    let prio = inputs.roce_priority;
    let wanted = format!("ECN on for RoCE priority {prio}: roce_np and roce_rp enabled");
    let Some(_) = &t.device else { return no_device(ID, AREA, &wanted, WHY) };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let read = |point: &str| src.read_trim(&format!("/sys/class/net/{netdev}/ecn/{point}/enable/{prio}"));
    let fix = format!(
        "echo 1 > /sys/class/net/{netdev}/ecn/roce_np/enable/{prio}; echo 1 > \
         /sys/class/net/{netdev}/ecn/roce_rp/enable/{prio} (and ECN marking on the switch queue)"
    );
    match (read("roce_np"), read("roce_rp")) {
        (Some(np), Some(rp)) => {
            let verdict = if np == "1" && rp == "1" { Verdict::Pass } else { Verdict::Warn };
            finding(ID, AREA, verdict, format!("roce_np {np}, roce_rp {rp}"), wanted, WHY, fix)
        }
        _ => {
            let found = format!("no /sys/class/net/{netdev}/ecn (not mlx5, or a driver without it)");
            finding(ID, AREA, Verdict::Unknown, found, wanted, WHY, fix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_lines_parse() {
        let on =
            parse_pfc("pfc-cap 8 macsec-bypass off delay 0\nprio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:on\n");
        assert_eq!(on, Some([false, false, false, true, false, false, false, true]));
        assert_eq!(parse_pfc("pg-pfc 0:on 1:off").map(|a| a[0]), Some(true));
        assert_eq!(parse_pfc("pfc-cap 8\n"), None);
    }

    #[test]
    fn dscp_maps_parse() {
        assert_eq!(parse_dscp_map("dscp-prio 24:3 26:3 46:5\n"), vec![(24, 3), (26, 3), (46, 5)]);
        assert_eq!(parse_dscp_map("default-prio 0\n"), vec![]);
    }
}
