//! Hardware receive timestamps on each line interface (`lines.hw_timestamps` in the publisher's config): what
//! the NIC can stamp (`ethtool -T IF`: capabilities, PHC index, receive filters), whether hardware receive
//! stamping is on now (`hwstamp_ctl -i IF`: `rx_filter`), and whether phc2sys keeps the PHC and the system clock
//! in step (a `phc2sys` process; `phc_ctl IF cmp`: the PHC minus `CLOCK_REALTIME` now).
//!
//! Sources: ethtool(8) `-T` (`Capabilities:` with `hardware-receive` and `hardware-raw-clock`, `PTP Hardware
//! Clock: N` or `none`, `Hardware Receive Filter Modes:` with `all`); linuxptp hwstamp_ctl(8) (`current
//! settings:`, `tx_type N`, `rx_filter N`; 1 is `HWTSTAMP_FILTER_ALL`) and phc_ctl(8) `cmp` (`offset from
//! CLOCK_REALTIME is Nns`).

use crate::checks::finding;
use crate::{Area, Finding, Source, Verdict};

const AREA: Area = Area::Host;

/// What `ethtool -T` says of one interface.
#[derive(Debug, Default, PartialEq, Eq)]
struct TsInfo {
    hw_rx: bool,
    raw_clock: bool,
    phc: Option<u32>,
    filters: Vec<String>,
}

fn parse_ethtool_t(text: &str) -> TsInfo {
    let mut info = TsInfo::default();
    let mut section = "";
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("PTP Hardware Clock:") {
            info.phc = v.trim().parse().ok();
            section = "";
        } else if t.ends_with(':') {
            section = t;
        } else if section == "Capabilities:" {
            info.hw_rx |= t.starts_with("hardware-receive");
            info.raw_clock |= t.starts_with("hardware-raw-clock");
        } else if section == "Hardware Receive Filter Modes:" && !t.is_empty() {
            info.filters.push(t.split_whitespace().next().unwrap_or("").to_owned());
        }
    }
    info
}

/// The three findings for each of `interfaces`.
pub(super) fn checks(src: &dyn Source, interfaces: &[String]) -> Vec<Finding> {
    interfaces.iter().flat_map(|i| [capability(src, i), rx_on(src, i), phc_sync(src, i)]).collect()
}

fn ts_info(src: &dyn Source, ifname: &str) -> Option<TsInfo> {
    src.command(&["ethtool", "-T", ifname]).map(|t| parse_ethtool_t(&t))
}

fn capability(src: &dyn Source, ifname: &str) -> Finding {
    let id = format!("lines.hw_timestamping.{ifname}");
    const WANTED: &str = "hardware-receive and hardware-raw-clock, a PHC, receive filter all";
    const WHY: &str = "only a NIC that stamps every received packet (filter all) on its PHC measures wire-to-poll \
                       from the wire; software stamps add the kernel's receive path";
    let fix = "a NIC with a PHC (ConnectX, E810, X710); mdfan-publisher switches stamping on (lines.hw_timestamps)";
    let Some(info) = ts_info(src, ifname) else {
        return finding(&id, AREA, Verdict::Unknown, "ethtool -T gave nothing", WANTED, WHY, fix);
    };
    let phc = info.phc.map_or("no PHC".to_owned(), |p| format!("PHC /dev/ptp{p}"));
    let found = format!(
        "{ifname}: {}, {phc}, receive filters {}",
        if info.hw_rx && info.raw_clock { "hardware receive stamps" } else { "software stamps only" },
        if info.filters.is_empty() { "none listed".to_owned() } else { info.filters.join(",") }
    );
    let ok = info.hw_rx && info.raw_clock && info.phc.is_some() && info.filters.iter().any(|f| f == "all");
    finding(&id, AREA, if ok { Verdict::Pass } else { Verdict::Warn }, found, WANTED, WHY, fix)
}

fn rx_on(src: &dyn Source, ifname: &str) -> Finding {
    let id = format!("lines.hw_rx.{ifname}");
    const WANTED: &str = "rx_filter 1 (all)";
    const WHY: &str = "with stamping off the NIC stamps nothing: every datagram gets a software stamp";
    let fix = format!(
        "mdfan-publisher does it at start (lines.hw_timestamps = \"if_available\" or \"required\", as root); by hand: hwstamp_ctl -i {ifname} -r 1"
    );
    if !ts_info(src, ifname).is_some_and(|i| i.hw_rx) {
        return finding(&id, AREA, Verdict::Unknown, "no hardware receive stamping to switch on", WANTED, WHY, fix);
    }
    let Some(text) = src.command(&["hwstamp_ctl", "-i", ifname]) else {
        return finding(&id, AREA, Verdict::Unknown, "hwstamp_ctl gave nothing (linuxptp)", WANTED, WHY, fix);
    };
    let rx = text.lines().find_map(|l| l.trim().strip_prefix("rx_filter")?.trim().parse::<u32>().ok());
    match rx {
        Some(1) => finding(&id, AREA, Verdict::Pass, format!("{ifname}: rx_filter 1 (all)"), WANTED, WHY, ""),
        Some(n) => finding(&id, AREA, Verdict::Warn, format!("{ifname}: rx_filter {n}"), WANTED, WHY, fix),
        None => finding(&id, AREA, Verdict::Unknown, "hwstamp_ctl printed no rx_filter", WANTED, WHY, fix),
    }
}

/// The TAI - UTC offset a PHC kept in TAI by ptp4l shows against `CLOCK_REALTIME` (since 2017), ns.
const TAI_UTC_NS: i64 = 37_000_000_000;

fn phc_sync(src: &dyn Source, ifname: &str) -> Finding {
    let id = format!("lines.phc_sync.{ifname}");
    const WANTED: &str = "phc2sys running; PHC - CLOCK_REALTIME within 1000 ns (or of TAI - UTC, 37 s)";
    const WHY: &str = "hardware stamps are PHC time: mdfan maps them onto CLOCK_REALTIME itself \
                       (PTP_SYS_OFFSET_*), but a system clock that drifts from the PHC makes wire-to-poll mix clocks";
    let fix = format!("phc2sys -s {ifname} -c CLOCK_REALTIME -w (with ptp4l -i {ifname})");
    let Some(phc) = ts_info(src, ifname).and_then(|i| i.phc) else {
        return finding(&id, AREA, Verdict::Unknown, format!("{ifname}: no PHC"), WANTED, WHY, "");
    };
    let running = src.list("/proc").unwrap_or_default().iter().any(|p| {
        p.bytes().all(|b| b.is_ascii_digit()) && src.read_trim(&format!("/proc/{p}/comm")).as_deref() == Some("phc2sys")
    });
    let offset = src.command(&["phc_ctl", ifname, "cmp"]).and_then(|t| {
        let at = t.find("offset from CLOCK_REALTIME is ")? + "offset from CLOCK_REALTIME is ".len();
        t[at..].split("ns").next()?.trim().parse::<i64>().ok()
    });
    let off_text =
        offset.map_or("offset unknown (phc_ctl gave nothing)".to_owned(), |o| format!("PHC - CLOCK_REALTIME {o} ns"));
    let found = format!("/dev/ptp{phc}: phc2sys {}, {off_text}", if running { "running" } else { "not running" });
    let in_step = offset.is_some_and(|o| o.abs() <= 1_000 || (o - TAI_UTC_NS).abs() <= 1_000);
    let verdict = match (running, offset) {
        (true, Some(_)) if in_step => Verdict::Pass,
        (true, None) => Verdict::Unknown,
        _ => Verdict::Warn,
    };
    finding(&id, AREA, verdict, found, WANTED, WHY, if verdict == Verdict::Pass { String::new() } else { fix })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_t_of_old_and_new_ethtool_parses_alike() {
        let new = "Time stamping parameters for eth1:\nCapabilities:\n\thardware-transmit\n\thardware-receive\n\thardware-raw-clock\nPTP Hardware Clock: 3\nHardware Transmit Timestamp Modes:\n\toff\n\ton\nHardware Receive Filter Modes:\n\tnone\n\tall\n";
        let old = "Time stamping parameters for eth1:\nCapabilities:\n\thardware-transmit     (SOF_TIMESTAMPING_TX_HARDWARE)\n\thardware-receive      (SOF_TIMESTAMPING_RX_HARDWARE)\n\thardware-raw-clock    (SOF_TIMESTAMPING_RAW_HARDWARE)\nPTP Hardware Clock: 3\nHardware Transmit Timestamp Modes:\n\toff                   (HWTSTAMP_TX_OFF)\nHardware Receive Filter Modes:\n\tnone                  (HWTSTAMP_FILTER_NONE)\n\tall                   (HWTSTAMP_FILTER_ALL)\n";
        let want = TsInfo { hw_rx: true, raw_clock: true, phc: Some(3), filters: vec!["none".into(), "all".into()] };
        assert_eq!(parse_ethtool_t(new), want);
        assert_eq!(parse_ethtool_t(old), want);
        let none = parse_ethtool_t("Capabilities:\n\tsoftware-receive\nPTP Hardware Clock: none\n");
        assert_eq!((none.hw_rx, none.phc), (false, None));
    }
}
