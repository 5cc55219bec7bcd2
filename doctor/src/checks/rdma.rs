//! RDMA: the device, its port, the GID table, MTU and link speed (`/sys/class/infiniband`, Documentation/ABI/
//! stable/sysfs-class-infiniband; `ibv_devinfo` for the active MTU, which sysfs does not show).

use std::net::Ipv6Addr;

use super::{finding, leading_number, no_device, Target};
use crate::{Area, Finding, Inputs, Source, Verdict};

const AREA: Area = Area::Rdma;

pub(super) fn device(t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "rdma.device";
    const WHY: &str = "the verbs fabric needs an RDMA device; without one only the shm fabric (one host) can run";
    let wanted = inputs.device.clone().unwrap_or_else(|| "an RDMA device (e.g. mlx5_0)".to_owned());
    let listed = if t.devices.is_empty() { "none".to_owned() } else { t.devices.join(", ") };
    match &t.device {
        Some(d) => {
            let net = t.netdev.as_deref().unwrap_or("no netdev");
            finding(ID, AREA, Verdict::Pass, format!("{d} on {net} (devices: {listed})"), wanted, WHY, "")
        }
        None => {
            let verdict = if inputs.need_rdma || inputs.device.is_some() { Verdict::Fail } else { Verdict::Warn };
            let found = match &inputs.device {
                Some(d) => format!("no {d} (devices: {listed})"),
                None => "no RDMA device (/sys/class/infiniband is empty or absent)".to_owned(),
            };
            let fix = "load the NIC's RDMA driver (modprobe mlx5_ib; `rdma link` lists what it made), or run \
                       with --fabric shm on one host";
            finding(ID, AREA, verdict, found, wanted, WHY, fix)
        }
    }
}

pub(super) fn port(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "rdma.port";
    const WANTED: &str = "ACTIVE, LinkUp, Ethernet (RoCE)";
    const WHY: &str = "a QP cannot connect over a port that is not ACTIVE; a flapping link drops in-flight WRITEs \
                       and every subscriber on it";
    let Some(dev) = &t.device else { return no_device(ID, AREA, WANTED, WHY) };
    let base = format!("/sys/class/infiniband/{dev}/ports/{}", inputs.port);
    // "4: ACTIVE", "5: LinkUp": the name after the number.
    let name = |f: &str| {
        src.read_trim(&format!("{base}/{f}")).map(|s| s.split_once(": ").map_or(s.clone(), |(_, n)| n.to_owned()))
    };
    let (Some(state), Some(phys)) = (name("state"), name("phys_state")) else {
        let found = format!("no port {} on {dev}", inputs.port);
        return finding(ID, AREA, Verdict::Fail, found, WANTED, WHY, format!("ibv_devinfo -d {dev}"));
    };
    let layer = src.read_trim(&format!("{base}/link_layer")).unwrap_or_else(|| "unknown".to_owned());
    let found = format!("{state}, {phys}, {layer}");
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let verdict = if state != "ACTIVE" {
        Verdict::Fail
    } else if layer != "Ethernet" {
        Verdict::Warn // InfiniBand: verbs work, but the RoCE checks do not apply
    } else {
        Verdict::Pass
    };
    let fix = format!("ip link set {netdev} up; check the cable and switch port (ethtool {netdev}); rdma link show");
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}

/// A GID as sysfs prints it (`0000:0000:0000:0000:0000:ffff:0a00:0001`), as an address.
fn parse_gid(text: &str) -> Option<Ipv6Addr> {
    let hex: String = text.trim().split(':').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok().map(Ipv6Addr::from))?
}

/// One used GID table entry.
struct GidEntry {
    index: u32,
    addr: Ipv6Addr,
    kind: String,
    ndev: String,
}

impl GidEntry {
    fn show(&self) -> String {
        let ip = self.addr.to_ipv4_mapped().map_or(self.addr.to_string(), |v4| v4.to_string());
        format!("{}: {ip} {} on {}", self.index, self.kind, self.ndev)
    }
}

fn gid_table(src: &dyn Source, dev: &str, port: u32) -> Vec<GidEntry> {
    let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
    let mut out = Vec::new();
    for name in src.list(&format!("{base}/gids")).unwrap_or_default() {
        let (Ok(index), Some(addr)) =
            (name.parse::<u32>(), src.read(&format!("{base}/gids/{name}")).as_deref().and_then(parse_gid))
        else {
            continue;
        };
        if addr.is_unspecified() {
            continue;
        }
        // Unused entries fail to read (EINVAL) in gid_attrs; a used one names its type and netdev.
        let kind = src.read_trim(&format!("{base}/gid_attrs/types/{name}")).unwrap_or_else(|| "?".to_owned());
        let ndev = src.read_trim(&format!("{base}/gid_attrs/ndevs/{name}")).unwrap_or_else(|| "?".to_owned());
        out.push(GidEntry { index, addr, kind, ndev });
    }
    out
}

pub(super) fn gid(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "rdma.gid";
    const WANTED: &str = "a RoCE v2 GID holding the netdev's IPv4 address";
    const WHY: &str = "RoCE v2 is routable UDP/IP and carries DSCP and ECN, which PFC classification and DCQCN \
                       need; RoCE v1 and link-local GIDs do neither across a routed fabric";
    let Some(dev) = &t.device else { return no_device(ID, AREA, WANTED, WHY) };
    let table = gid_table(src, dev, inputs.port);
    let v2: Vec<&GidEntry> = table.iter().filter(|g| g.kind.eq_ignore_ascii_case("RoCE v2")).collect();
    let found = if v2.is_empty() {
        let kinds: Vec<String> = table.iter().map(GidEntry::show).collect();
        if kinds.is_empty() {
            "no GID in use".to_owned()
        } else {
            format!("no RoCE v2 GID; {}", kinds.join("; "))
        }
    } else {
        let shown: Vec<String> = v2.iter().map(|g| g.show()).collect();
        format!("{}; {} other in use", shown.join("; "), table.len() - v2.len())
    };
    let verdict = if v2.iter().any(|g| g.addr.to_ipv4_mapped().is_some()) {
        Verdict::Pass
    } else if v2.is_empty() {
        Verdict::Fail
    } else {
        Verdict::Warn // RoCE v2 on IPv6 only: routable, but mdfan's default choice wants IPv4
    };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let fix = format!(
        "ip addr add ADDR/PREFIX dev {netdev} (the kernel adds its RoCE v2 GID); set gid_index / --gid-index to \
         that entry on both hosts (show_gids lists the table)"
    );
    finding(ID, AREA, verdict, found, WANTED, WHY, fix)
}

/// The RoCE MTU the kernel derives from a netdev MTU: the largest IB MTU that fits after the RoCE v2 headers
/// (GRH 40, UDP 8, BTH 12, the largest extension 28+4, ICRC 4: 96 bytes), as in the kernel's `iboe_get_mtu`.
pub fn roce_mtu_for(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room)
}

pub(super) fn mtu(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "rdma.mtu";
    const WHY: &str = "mdfan writes one 64-byte record per WRITE, which any MTU carries; what matters is that the \
                       active MTU follows the netdev's (else the port was not reconfigured) and that path_mtu_bytes \
                       on both hosts is at or below it";
    let Some(dev) = &t.device else { return no_device(ID, AREA, "active_mtu = what the netdev MTU allows", WHY) };
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let Some(net_mtu) = src.read_trim(&format!("/sys/class/net/{netdev}/mtu")).and_then(|s| s.parse::<u32>().ok())
    else {
        let found = format!("no MTU for netdev {netdev}");
        return finding(ID, AREA, Verdict::Unknown, found, "active_mtu = what the netdev MTU allows", WHY, "");
    };
    let expected = roce_mtu_for(net_mtu).unwrap_or(0);
    let wanted = format!("active_mtu {expected} (netdev MTU {net_mtu}); 4096 needs a netdev MTU >= 4192");
    let port = inputs.port.to_string();
    let active = src.command(&["ibv_devinfo", "-d", dev, "-i", &port]).and_then(|out| {
        let line = out.lines().find(|l| l.trim_start().starts_with("active_mtu:"))?;
        line.split(':').nth(1)?.split_whitespace().next()?.parse::<u32>().ok()
    });
    let fix = format!(
        "ip link set {netdev} mtu 9000 (the same on the switch ports and the peer); path_mtu_bytes at or below \
         active_mtu on both hosts"
    );
    match active {
        None => {
            let found = format!("netdev {netdev} MTU {net_mtu}; active_mtu unknown (no ibv_devinfo)");
            finding(ID, AREA, Verdict::Unknown, found, wanted, WHY, fix)
        }
        Some(a) => {
            let found = format!("active_mtu {a}, netdev {netdev} MTU {net_mtu}");
            let verdict = if a == expected { Verdict::Pass } else { Verdict::Warn };
            finding(ID, AREA, verdict, found, wanted, WHY, fix)
        }
    }
}

pub(super) fn speed(src: &dyn Source, t: &Target, inputs: &Inputs) -> Finding {
    const ID: &str = "rdma.speed";
    const WANTED: &str = ">= 25 Gb/s";
    const WHY: &str = "serialisation delay and burst headroom: a 64-byte WRITE takes 5 ns on the wire at 100 Gb/s \
                       and 51 ns at 10 Gb/s, and a market-open burst queues behind every record before it";
    let Some(dev) = &t.device else { return no_device(ID, AREA, WANTED, WHY) };
    let Some(rate) = src.read_trim(&format!("/sys/class/infiniband/{dev}/ports/{}/rate", inputs.port)) else {
        return finding(ID, AREA, Verdict::Unknown, "no rate in sysfs", WANTED, WHY, "");
    };
    let gbps = leading_number(&rate).unwrap_or(0.0);
    let netdev = t.netdev.as_deref().unwrap_or("NETDEV");
    let net = src
        .read_trim(&format!("/sys/class/net/{netdev}/speed"))
        .map_or(String::new(), |s| format!("; {netdev} {s} Mb/s"));
    let verdict = if gbps >= 25.0 { Verdict::Pass } else { Verdict::Warn };
    let fix = format!("ethtool {netdev} (autonegotiation, cable, switch port speed)");
    finding(ID, AREA, verdict, format!("{rate}{net}"), WANTED, WHY, fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_follows_the_kernel_rule() {
        assert_eq!(roce_mtu_for(9000), Some(4096));
        assert_eq!(roce_mtu_for(4200), Some(4096));
        assert_eq!(roce_mtu_for(4191), Some(2048));
        assert_eq!(roce_mtu_for(1500), Some(1024));
        assert_eq!(roce_mtu_for(300), None);
    }

    #[test]
    fn gids_parse_into_addresses() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001\n").unwrap();
        assert_eq!(g.to_ipv4_mapped().unwrap().to_string(), "10.0.0.1");
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:0a00:27ff:fe4e:4b4f").unwrap().to_string(),
            "fe80::a00:27ff:fe4e:4b4f"
        );
        assert_eq!(parse_gid("fe80::1"), None);
    }
}
