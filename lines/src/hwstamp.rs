//! Hardware receive timestamps: switching the NIC's receive stamping on, and mapping its PTP hardware clock
//! (PHC) onto `CLOCK_REALTIME`.
//!
//! Sources: the kernel's Documentation/networking/timestamping.rst ("Hardware Timestamping Implementation:
//! Device Drivers": `SIOCSHWTSTAMP` / `SIOCGHWTSTAMP` with a `struct hwtstamp_config`, the driver writing back
//! what it granted), include/uapi/linux/net_tstamp.h (`HWTSTAMP_FILTER_*`, `SOF_TIMESTAMPING_*`),
//! include/uapi/linux/ethtool.h (`ETHTOOL_GET_TS_INFO`, `struct ethtool_ts_info`: the capabilities and the PHC
//! index), include/uapi/linux/ptp_clock.h (`PTP_SYS_OFFSET_PRECISE`, `PTP_SYS_OFFSET_EXTENDED`).
//!
//! [`enable`] is the decision, on any [`Device`] (the kernel through [`IoctlDevice`], or recorded answers in
//! tests): with [`HwTimestamps::Off`] nothing is asked; otherwise the device's capabilities are read, and if it
//! stamps received packets in hardware with `HWTSTAMP_FILTER_ALL` (the only filter that covers arbitrary UDP:
//! the others select PTP or NTP packets) and has a PHC, its current state is read and, unless it already stamps
//! every packet, `SIOCSHWTSTAMP` asks for `HWTSTAMP_FILTER_ALL` (TX left as it was, so a ptp4l on the same port
//! keeps its TX stamps). What the driver granted is what counts. [`HwTimestamps::IfAvailable`] falls back to
//! software stamps with the reason ([`HwStampState::note`]); [`HwTimestamps::Required`] refuses
//! ([`HwStampError`]).
//!
//! Mapping ([`PhcMap`]): a raw hardware stamp is PHC time. Where phc2sys keeps the system clock on the PHC (it
//! runs, and the PHC reads within [`DISCIPLINED_NS`] of `CLOCK_REALTIME`), stamps are used as they are
//! ([`Mapping::Phc2sys`]); otherwise the PHC − `CLOCK_REALTIME` offset is sampled off the hot path, once a
//! second on thread `mdfan-phc`, with `PTP_SYS_OFFSET_PRECISE` (a device cross-timestamp: no uncertainty beyond
//! the device's) or, where the driver has none, `PTP_SYS_OFFSET_EXTENDED` (25 reads of the PHC each between two
//! system clock reads: the narrowest window wins, its half-width is the uncertainty), and the hot path
//! subtracts the last offset (one relaxed atomic load, no syscall).
//!
//! The ioctls need `unsafe` (a pointer in `struct ifreq`): they are the [`sys`] module, the only unsafe code of
//! this crate.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// `lines.hw_timestamps`: whether mdfan switches the NIC's hardware receive stamping on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HwTimestamps {
    /// Never ask the device; the socket takes software stamps.
    Off,
    /// Switch hardware stamping on where the device can (and its PHC can be mapped); else software stamps, the
    /// reason logged and reported.
    #[default]
    IfAvailable,
    /// Switch it on or refuse to open the line.
    Required,
}

impl HwTimestamps {
    /// `off`, `if_available` or `required` (the config's words).
    pub fn name(self) -> &'static str {
        match self {
            HwTimestamps::Off => "off",
            HwTimestamps::IfAvailable => "if_available",
            HwTimestamps::Required => "required",
        }
    }
}

/// `SOF_TIMESTAMPING_RX_HARDWARE` (net_tstamp.h).
pub const SOF_TIMESTAMPING_RX_HARDWARE: u32 = 1 << 2;
/// `SOF_TIMESTAMPING_RAW_HARDWARE`.
pub const SOF_TIMESTAMPING_RAW_HARDWARE: u32 = 1 << 6;
/// `HWTSTAMP_FILTER_NONE`.
pub const HWTSTAMP_FILTER_NONE: u32 = 0;
/// `HWTSTAMP_FILTER_ALL`: every received packet.
pub const HWTSTAMP_FILTER_ALL: u32 = 1;
/// `HWTSTAMP_TX_OFF`.
pub const HWTSTAMP_TX_OFF: u32 = 0;
/// `ETHTOOL_GET_TS_INFO` (ethtool.h).
pub const ETHTOOL_GET_TS_INFO: u32 = 0x41;
/// Bytes of `struct ethtool_ts_info`.
pub const TS_INFO_BYTES: usize = 44;
/// Bytes of `struct hwtstamp_config`.
pub const HWTSTAMP_CONFIG_BYTES: usize = 12;
/// A PHC within this of `CLOCK_REALTIME`, with phc2sys running, is taken as disciplined to it, ns.
pub const DISCIPLINED_NS: u64 = 1_000_000;

/// The name of an `HWTSTAMP_FILTER_*` value (net_tstamp.h), `filter_N` for one this build does not know.
pub fn filter_name(f: u32) -> String {
    const NAMES: [&str; 16] = [
        "none",
        "all",
        "some",
        "ptp_v1_l4_event",
        "ptp_v1_l4_sync",
        "ptp_v1_l4_delay_req",
        "ptp_v2_l4_event",
        "ptp_v2_l4_sync",
        "ptp_v2_l4_delay_req",
        "ptp_v2_l2_event",
        "ptp_v2_l2_sync",
        "ptp_v2_l2_delay_req",
        "ptp_v2_event",
        "ptp_v2_sync",
        "ptp_v2_delay_req",
        "ntp_all",
    ];
    NAMES.get(f as usize).map_or_else(|| format!("filter_{f}"), |n| (*n).to_owned())
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// A device's timestamping capabilities (`struct ethtool_ts_info`, what `ethtool -T` prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsInfo {
    /// `SOF_TIMESTAMPING_*` bits the device supports.
    pub so_timestamping: u32,
    /// The PHC, `/dev/ptpN`; `None` for -1 (no PHC).
    pub phc_index: Option<u32>,
    /// Bit N: `HWTSTAMP_TX_*` value N is supported.
    pub tx_types: u32,
    /// Bit N: `HWTSTAMP_FILTER_*` value N is supported.
    pub rx_filters: u32,
}

impl TsInfo {
    /// Decodes the 44 bytes the kernel fills (cmd u32, so_timestamping u32, phc_index s32, tx_types u32, 3
    /// reserved, rx_filters u32, 3 reserved; native byte order). `None` for a shorter buffer.
    pub fn from_bytes(b: &[u8]) -> Option<TsInfo> {
        if b.len() < TS_INFO_BYTES {
            return None;
        }
        let phc = u32_at(b, 8) as i32;
        Some(TsInfo {
            so_timestamping: u32_at(b, 4),
            phc_index: u32::try_from(phc).ok(),
            tx_types: u32_at(b, 12),
            rx_filters: u32_at(b, 28),
        })
    }

    /// The request: cmd = `ETHTOOL_GET_TS_INFO`, the rest zero.
    pub fn request() -> [u8; TS_INFO_BYTES] {
        let mut b = [0u8; TS_INFO_BYTES];
        b[..4].copy_from_slice(&ETHTOOL_GET_TS_INFO.to_ne_bytes());
        b
    }

    /// Whether the device stamps received packets in hardware (RX_HARDWARE and RAW_HARDWARE).
    pub fn hw_rx(&self) -> bool {
        let want = SOF_TIMESTAMPING_RX_HARDWARE | SOF_TIMESTAMPING_RAW_HARDWARE;
        self.so_timestamping & want == want
    }

    /// Whether `HWTSTAMP_FILTER_ALL` is among its receive filters.
    pub fn filter_all(&self) -> bool {
        self.rx_filters & (1 << HWTSTAMP_FILTER_ALL) != 0
    }

    /// The receive filters' names, `+`-joined (`none+all`), or `none_listed`.
    pub fn rx_filter_names(&self) -> String {
        let names: Vec<String> = (0..32).filter(|i| self.rx_filters & (1 << i) != 0).map(filter_name).collect();
        if names.is_empty() {
            "none_listed".to_owned()
        } else {
            names.join("+")
        }
    }
}

/// A device's hardware stamping state (`struct hwtstamp_config`: flags, tx_type, rx_filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwConfig {
    /// `HWTSTAMP_FLAG_*`.
    pub flags: u32,
    /// `HWTSTAMP_TX_*`.
    pub tx_type: u32,
    /// `HWTSTAMP_FILTER_*`.
    pub rx_filter: u32,
}

impl HwConfig {
    /// Decodes the 12 bytes (three ints, native byte order); `None` for a shorter buffer.
    pub fn from_bytes(b: &[u8]) -> Option<HwConfig> {
        (b.len() >= HWTSTAMP_CONFIG_BYTES).then(|| HwConfig {
            flags: u32_at(b, 0),
            tx_type: u32_at(b, 4),
            rx_filter: u32_at(b, 8),
        })
    }

    /// The 12 bytes.
    pub fn to_bytes(self) -> [u8; HWTSTAMP_CONFIG_BYTES] {
        let mut b = [0u8; HWTSTAMP_CONFIG_BYTES];
        b[..4].copy_from_slice(&self.flags.to_ne_bytes());
        b[4..8].copy_from_slice(&self.tx_type.to_ne_bytes());
        b[8..].copy_from_slice(&self.rx_filter.to_ne_bytes());
        b
    }
}

/// What a device answers: the kernel ([`IoctlDevice`]) or recorded answers (tests).
pub trait Device {
    /// `ETHTOOL_GET_TS_INFO` of `ifname`.
    fn ts_info(&self, ifname: &str) -> std::io::Result<TsInfo>;
    /// `SIOCGHWTSTAMP`: the device's stamping state now.
    fn get(&self, ifname: &str) -> std::io::Result<HwConfig>;
    /// `SIOCSHWTSTAMP`: asks for `want`; returns what the driver granted (it writes the config back).
    fn set(&self, ifname: &str, want: HwConfig) -> std::io::Result<HwConfig>;
}

/// What [`enable`] found and did on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwStampState {
    /// The network device (`ens1f0np0`), `None` when the line's address names none (0.0.0.0).
    pub device: Option<String>,
    /// What the config asked.
    pub mode: HwTimestamps,
    /// The device's capabilities, if it answered.
    pub ts_info: Option<TsInfo>,
    /// Its state before (`SIOCGHWTSTAMP`), if it answered.
    pub before: Option<HwConfig>,
    /// What the driver granted (`SIOCSHWTSTAMP`'s answer, or the state before when it already stamped every
    /// packet); `None` when nothing was asked.
    pub granted: Option<HwConfig>,
    /// Whether received datagrams come with hardware stamps now.
    pub hardware: bool,
    /// Why not, or what was done, in words for the log and the report.
    pub note: String,
}

impl HwStampState {
    /// The PHC index when hardware stamping is on.
    pub fn phc_index(&self) -> Option<u32> {
        self.ts_info.and_then(|t| t.phc_index).filter(|_| self.hardware)
    }

    /// `hw_timestamps=required device=eth1 hardware=true granted=all phc=/dev/ptp0 note="..."`.
    pub fn line(&self) -> String {
        format!(
            "hw_timestamps={} device={} hardware={} granted={} phc={} note=\"{}\"",
            self.mode.name(),
            self.device.as_deref().unwrap_or("-"),
            self.hardware,
            self.granted.map_or("-".to_owned(), |g| filter_name(g.rx_filter)),
            self.phc_index().map_or("-".to_owned(), |i| format!("/dev/ptp{i}")),
            self.note
        )
    }
}

/// `lines.hw_timestamps = "required"` and the device cannot: the device and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lines.hw_timestamps = \"required\", device {device}: {why}")]
pub struct HwStampError {
    /// The network device, or the address that named none.
    pub device: String,
    /// What it lacks or refused.
    pub why: String,
}

/// Switches hardware receive stamping on for `device` as `mode` says (module docs). `device` `None`: the line's
/// address names no device (a wildcard bind).
///
/// # Errors
/// With [`HwTimestamps::Required`] only: [`HwStampError`] naming the device and what it lacks (no hardware RX
/// stamping, no `HWTSTAMP_FILTER_ALL`, no PHC), or the ioctl that failed (`EPERM` without CAP_NET_ADMIN).
pub fn enable(dev: &impl Device, device: Option<&str>, mode: HwTimestamps) -> Result<HwStampState, HwStampError> {
    let mut st = HwStampState {
        device: device.map(str::to_owned),
        mode,
        ts_info: None,
        before: None,
        granted: None,
        hardware: false,
        note: String::new(),
    };
    let fallback = |mut st: HwStampState, why: String| {
        if mode == HwTimestamps::Required {
            return Err(HwStampError { device: st.device.clone().unwrap_or_else(|| "-".to_owned()), why });
        }
        st.note = format!("software stamps: {why}");
        Ok(st)
    };
    if mode == HwTimestamps::Off {
        st.note = "software stamps: lines.hw_timestamps = \"off\"".to_owned();
        return Ok(st);
    }
    let Some(ifname) = device else {
        return fallback(st, "the line's address names no network device (bind a device's address)".to_owned());
    };
    let info = match dev.ts_info(ifname) {
        Ok(i) => i,
        Err(e) => return fallback(st, format!("ETHTOOL_GET_TS_INFO: {e}")),
    };
    st.ts_info = Some(info);
    if !info.hw_rx() {
        return fallback(st, format!("no hardware receive stamping (so_timestamping {:#x})", info.so_timestamping));
    }
    if !info.filter_all() {
        let why = format!("receive filters {}: none stamps every UDP datagram (want all)", info.rx_filter_names());
        return fallback(st, why);
    }
    if info.phc_index.is_none() {
        return fallback(st, "no PTP hardware clock to map its stamps onto CLOCK_REALTIME".to_owned());
    }
    st.before = dev.get(ifname).ok();
    let granted = match st.before {
        Some(b) if b.rx_filter == HWTSTAMP_FILTER_ALL => {
            st.note = "already on (rx_filter all)".to_owned();
            b
        }
        before => {
            let tx_type = before.map_or(HWTSTAMP_TX_OFF, |b| b.tx_type);
            let want = HwConfig { flags: 0, tx_type, rx_filter: HWTSTAMP_FILTER_ALL };
            match dev.set(ifname, want) {
                Ok(g) => {
                    st.note = format!(
                        "switched on: rx_filter {} -> {}",
                        before.map_or("unknown".to_owned(), |b| filter_name(b.rx_filter)),
                        filter_name(g.rx_filter)
                    );
                    g
                }
                Err(e) => return fallback(st, format!("SIOCSHWTSTAMP rx_filter all: {e}")),
            }
        }
    };
    st.granted = Some(granted);
    if granted.rx_filter != HWTSTAMP_FILTER_ALL {
        let why = format!("the driver granted rx_filter {}, not all", filter_name(granted.rx_filter));
        return fallback(st, why);
    }
    st.hardware = true;
    Ok(st)
}

/// One PHC − `CLOCK_REALTIME` measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhcOffset {
    /// PHC time minus `CLOCK_REALTIME`, ns: a hardware stamp minus this is `CLOCK_REALTIME`.
    pub offset_ns: i64,
    /// Half the window the PHC read fell in (0 for a device cross-timestamp), ns.
    pub uncertainty_ns: u64,
    /// `precise` (`PTP_SYS_OFFSET_PRECISE`) or `extended` (`PTP_SYS_OFFSET_EXTENDED`).
    pub method: &'static str,
}

/// A `struct ptp_clock_time` as ns.
pub fn ptp_time_ns(sec: i64, nsec: u32) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

/// The offset from `PTP_SYS_OFFSET_EXTENDED` samples, each `[system before, PHC, system after]` in ns: the
/// sample with the narrowest system window (the read least disturbed), PHC minus the window's midpoint, the
/// uncertainty its half-width. `None` without a sample, or with a window that runs backwards.
pub fn offset_from_extended(samples: &[[i128; 3]]) -> Option<PhcOffset> {
    let best = samples.iter().filter(|s| s[2] >= s[0]).min_by_key(|s| s[2] - s[0])?;
    let mid = best[0] + (best[2] - best[0]) / 2;
    Some(PhcOffset {
        offset_ns: i64::try_from(best[1] - mid).ok()?,
        uncertainty_ns: u64::try_from((best[2] - best[0] + 1) / 2).ok()?,
        method: "extended",
    })
}

/// The offset from a `PTP_SYS_OFFSET_PRECISE` answer: the device time and `CLOCK_REALTIME` of one
/// cross-timestamp, ns.
pub fn offset_from_precise(device_ns: i128, realtime_ns: i128) -> Option<PhcOffset> {
    Some(PhcOffset { offset_ns: i64::try_from(device_ns - realtime_ns).ok()?, uncertainty_ns: 0, method: "precise" })
}

/// How hardware stamps become `CLOCK_REALTIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// phc2sys keeps the system clock on the PHC: stamps are used as they are.
    Phc2sys,
    /// The sampled offset is subtracted.
    Sampled,
}

/// The PHC → `CLOCK_REALTIME` mapping of one line, shared between the sampler and the socket: atomics only.
#[derive(Debug)]
pub struct PhcMap {
    mapping: Mapping,
    offset_ns: AtomicI64,
    uncertainty_ns: AtomicU64,
    samples: AtomicU64,
    method_precise: AtomicBool,
    valid: AtomicBool,
}

impl PhcMap {
    /// A mapping of `mapping` kind, valid once a first offset is stored (at once for [`Mapping::Phc2sys`]).
    pub fn new(mapping: Mapping) -> PhcMap {
        PhcMap {
            mapping,
            offset_ns: AtomicI64::new(0),
            uncertainty_ns: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            method_precise: AtomicBool::new(false),
            valid: AtomicBool::new(mapping == Mapping::Phc2sys),
        }
    }

    /// Stores a new measurement (the sampler).
    pub fn store(&self, o: PhcOffset) {
        self.offset_ns.store(o.offset_ns, Ordering::Relaxed);
        self.uncertainty_ns.store(o.uncertainty_ns, Ordering::Relaxed);
        self.method_precise.store(o.method == "precise", Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.valid.store(true, Ordering::Release);
    }

    /// A hardware stamp (PHC ns) as `CLOCK_REALTIME` ns; `None` before the first offset. Two relaxed loads.
    #[inline]
    pub fn to_realtime(&self, hw_ns: u64) -> Option<u64> {
        if !self.valid.load(Ordering::Acquire) {
            return None;
        }
        match self.mapping {
            Mapping::Phc2sys => Some(hw_ns),
            Mapping::Sampled => {
                u64::try_from(i128::from(hw_ns) - i128::from(self.offset_ns.load(Ordering::Relaxed))).ok()
            }
        }
    }

    /// `mapping=sampled method=extended offset_ns=.. uncertainty_ns=.. samples=..`, or `mapping=phc2sys`.
    pub fn line(&self) -> String {
        match self.mapping {
            Mapping::Phc2sys => {
                "mapping=phc2sys (the system clock follows the PHC: stamps used as they are)".to_owned()
            }
            Mapping::Sampled => format!(
                "mapping=sampled method={} offset_ns={} uncertainty_ns={} samples={}",
                if self.method_precise.load(Ordering::Relaxed) { "precise" } else { "extended" },
                self.offset_ns.load(Ordering::Relaxed),
                self.uncertainty_ns.load(Ordering::Relaxed),
                self.samples.load(Ordering::Relaxed)
            ),
        }
    }

    /// The kind.
    pub fn mapping(&self) -> Mapping {
        self.mapping
    }
}

/// Whether a phc2sys process runs (a `/proc/PID/comm` under `proc_root` reads `phc2sys`).
pub fn phc2sys_running(proc_root: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(proc_root) else { return false };
    dir.flatten().any(|e| {
        e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "phc2sys")
    })
}

/// Opens `/dev/ptpN`, measures the offset once, and returns the line's mapping: [`Mapping::Phc2sys`] when
/// phc2sys runs and the PHC is within [`DISCIPLINED_NS`] of `CLOCK_REALTIME`, else [`Mapping::Sampled`] with a
/// thread (`mdfan-phc`) measuring again every `period` while the map is alive.
///
/// # Errors
/// The PHC cannot be opened or read (neither `PTP_SYS_OFFSET_PRECISE` nor `_EXTENDED` answers).
pub fn map_phc(phc_index: u32, period: std::time::Duration) -> std::io::Result<Arc<PhcMap>> {
    let path = format!("/dev/ptp{phc_index}");
    let phc = std::fs::File::open(&path).map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
    let first = sys::measure(&phc).map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
    if phc2sys_running(Path::new("/proc")) && first.offset_ns.unsigned_abs() <= DISCIPLINED_NS {
        return Ok(Arc::new(PhcMap::new(Mapping::Phc2sys)));
    }
    let map = Arc::new(PhcMap::new(Mapping::Sampled));
    map.store(first);
    let weak = Arc::downgrade(&map);
    std::thread::Builder::new().name("mdfan-phc".into()).spawn(move || loop {
        std::thread::sleep(period);
        let Some(map) = weak.upgrade() else { return };
        if let Ok(o) = sys::measure(&phc) {
            map.store(o);
        }
    })?;
    Ok(map)
}

/// The kernel's answers: ioctls on a UDP socket (`SIOCETHTOOL`, `SIOCGHWTSTAMP`, `SIOCSHWTSTAMP`).
pub struct IoctlDevice {
    sock: std::net::UdpSocket,
}

impl IoctlDevice {
    /// A device prober (one unbound UDP socket, the ioctls' handle).
    ///
    /// # Errors
    /// The socket cannot be made.
    pub fn new() -> std::io::Result<IoctlDevice> {
        Ok(IoctlDevice { sock: std::net::UdpSocket::bind("0.0.0.0:0")? })
    }
}

impl Device for IoctlDevice {
    fn ts_info(&self, ifname: &str) -> std::io::Result<TsInfo> {
        let mut b = TsInfo::request();
        sys::ifreq_ioctl(&self.sock, ifname, sys::SIOCETHTOOL, &mut b)?;
        TsInfo::from_bytes(&b).ok_or_else(|| std::io::Error::other("short ethtool_ts_info"))
    }

    fn get(&self, ifname: &str) -> std::io::Result<HwConfig> {
        let mut b = [0u8; HWTSTAMP_CONFIG_BYTES];
        sys::ifreq_ioctl(&self.sock, ifname, sys::SIOCGHWTSTAMP, &mut b)?;
        HwConfig::from_bytes(&b).ok_or_else(|| std::io::Error::other("short hwtstamp_config"))
    }

    fn set(&self, ifname: &str, want: HwConfig) -> std::io::Result<HwConfig> {
        let mut b = want.to_bytes();
        sys::ifreq_ioctl(&self.sock, ifname, sys::SIOCSHWTSTAMP, &mut b)?;
        HwConfig::from_bytes(&b).ok_or_else(|| std::io::Error::other("short hwtstamp_config"))
    }
}

/// The network device that holds `addr` (getifaddrs), `None` for 0.0.0.0 or an address no device has.
pub fn device_of(addr: std::net::Ipv4Addr) -> Option<String> {
    if addr.is_unspecified() {
        return None;
    }
    nix::ifaddrs::getifaddrs().ok()?.find_map(|i| {
        let a = i.address?;
        (a.as_sockaddr_in()?.ip() == addr).then_some(i.interface_name)
    })
}

/// The ioctls, the only `unsafe` code of this crate. Each call passes the kernel a pointer to a buffer this
/// function owns for the call's duration, of the size the ioctl's structure has; nothing is kept.
#[allow(unsafe_code)]
mod sys {
    use std::os::fd::AsRawFd;

    /// `SIOCETHTOOL` (sockios.h).
    pub const SIOCETHTOOL: libc::c_ulong = 0x8946;
    /// `SIOCSHWTSTAMP`.
    pub const SIOCSHWTSTAMP: libc::c_ulong = 0x89b0;
    /// `SIOCGHWTSTAMP`.
    pub const SIOCGHWTSTAMP: libc::c_ulong = 0x89b1;
    /// `PTP_SYS_OFFSET_PRECISE` = `_IOWR('=', 8, struct ptp_sys_offset_precise)` (64 bytes).
    const PTP_SYS_OFFSET_PRECISE: libc::c_ulong = iowr(8, 64);
    /// `PTP_SYS_OFFSET_EXTENDED` = `_IOWR('=', 9, struct ptp_sys_offset_extended)` (16 + 25 x 3 x 16 bytes).
    const PTP_SYS_OFFSET_EXTENDED: libc::c_ulong = iowr(9, 16 + 25 * 3 * 16);
    /// Samples asked of `PTP_SYS_OFFSET_EXTENDED` (`PTP_MAX_SAMPLES`).
    const SAMPLES: usize = 25;

    /// `_IOWR('=', nr, size)` (asm-generic/ioctl.h: dir 3 << 30, size << 16, type << 8, nr).
    const fn iowr(nr: libc::c_ulong, size: libc::c_ulong) -> libc::c_ulong {
        (3 << 30) | (size << 16) | ((b'=' as libc::c_ulong) << 8) | nr
    }

    /// `struct ifreq` as these ioctls use it: the name, then a pointer to the request's structure, padded to
    /// the 40 bytes of the kernel's union.
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }

    /// The `ifreq` ioctl `req` on `ifname` with `buf` as its structure (read and written by the kernel).
    pub fn ifreq_ioctl(
        sock: &std::net::UdpSocket,
        ifname: &str,
        req: libc::c_ulong,
        buf: &mut [u8],
    ) -> std::io::Result<()> {
        let name = ifname.as_bytes();
        if name.is_empty() || name.len() >= 16 || name.contains(&0) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("device name {ifname:?}")));
        }
        // The structure each request reads and writes: `struct ethtool_ts_info` (11 x u32) and `struct
        // hwtstamp_config` (3 x u32). A shorter buffer, or another request, is refused here, so this safe function
        // never lets the kernel write past `buf`.
        let need_bytes = match req {
            SIOCETHTOOL => 44,
            SIOCSHWTSTAMP | SIOCGHWTSTAMP => 12,
            _ => return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("ioctl {req:#x}"))),
        };
        if buf.len() < need_bytes {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("ioctl {req:#x}: buffer of {} bytes, needs {need_bytes}", buf.len()),
            ));
        }
        let mut ifr = IfReq { name: [0; 16], data: buf.as_mut_ptr().cast(), _pad: [0; 16] };
        ifr.name[..name.len()].copy_from_slice(name);
        // SAFETY: `ifr` is a valid `struct ifreq` (NUL-terminated name, a pointer to `buf`), and `buf` holds at
        // least the structure `req` reads and writes (checked above); both outlive the call and nothing keeps the
        // pointer after it.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, &mut ifr as *mut IfReq) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Measures the PHC against `CLOCK_REALTIME`: `PTP_SYS_OFFSET_PRECISE`, else `PTP_SYS_OFFSET_EXTENDED`.
    pub fn measure(phc: &std::fs::File) -> std::io::Result<super::PhcOffset> {
        let fd = phc.as_raw_fd();
        let mut precise = [0u8; 64];
        // SAFETY: `precise` is the 64 bytes of `struct ptp_sys_offset_precise` the request's size encodes; it
        // outlives the call.
        let rc = unsafe { libc::ioctl(fd, PTP_SYS_OFFSET_PRECISE as _, precise.as_mut_ptr()) };
        if rc == 0 {
            let t = |i: usize| {
                let sec = i64::from_ne_bytes(precise[i..i + 8].try_into().expect("8 bytes"));
                super::ptp_time_ns(sec, u32::from_ne_bytes(precise[i + 8..i + 12].try_into().expect("4 bytes")))
            };
            // device @0, sys_realtime @16, sys_monoraw @32
            return super::offset_from_precise(t(0), t(16)).ok_or_else(|| std::io::Error::other("offset overflow"));
        }
        let mut ext = vec![0u8; 16 + SAMPLES * 3 * 16];
        ext[..4].copy_from_slice(&(SAMPLES as u32).to_ne_bytes());
        // SAFETY: `ext` is the 1,216 bytes of `struct ptp_sys_offset_extended` the request's size encodes
        // (n_samples = 25, the rest zero: CLOCK_REALTIME), and outlives the call.
        let rc = unsafe { libc::ioctl(fd, PTP_SYS_OFFSET_EXTENDED as _, ext.as_mut_ptr()) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        super::offset_from_extended(&extended_samples(&ext)).ok_or_else(|| std::io::Error::other("no usable sample"))
    }

    /// The `[system before, PHC, system after]` triples of a filled `struct ptp_sys_offset_extended`.
    pub fn extended_samples(ext: &[u8]) -> Vec<[i128; 3]> {
        let n = (u32::from_ne_bytes(ext[..4].try_into().expect("4 bytes")) as usize).min(SAMPLES);
        let t = |i: usize| {
            let sec = i64::from_ne_bytes(ext[i..i + 8].try_into().expect("8 bytes"));
            super::ptp_time_ns(sec, u32::from_ne_bytes(ext[i + 8..i + 12].try_into().expect("4 bytes")))
        };
        (0..n).map(|s| [t(16 + s * 48), t(16 + s * 48 + 16), t(16 + s * 48 + 32)]).collect()
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_ptp_ioctl_numbers_are_the_kernels() {
            // include/uapi/linux/ptp_clock.h as `strace` prints them on x86-64.
            assert_eq!(super::PTP_SYS_OFFSET_PRECISE, 0xc0403d08);
            assert_eq!(super::PTP_SYS_OFFSET_EXTENDED, 0xc4c03d09);
        }

        #[test]
        fn a_buffer_shorter_than_the_requests_structure_never_reaches_the_kernel() {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut short = [0u8; 11];
            let e = super::ifreq_ioctl(&sock, "lo", super::SIOCSHWTSTAMP, &mut short).unwrap_err();
            assert_eq!(e.to_string(), "ioctl 0x89b0: buffer of 11 bytes, needs 12");
            let e = super::ifreq_ioctl(&sock, "lo", super::SIOCETHTOOL, &mut [0u8; 43]).unwrap_err();
            assert_eq!(e.to_string(), "ioctl 0x8946: buffer of 43 bytes, needs 44");
            let e = super::ifreq_ioctl(&sock, "lo", 0x8913, &mut [0u8; 64]).unwrap_err();
            assert_eq!(e.to_string(), "ioctl 0x8913");
        }
    }
}

pub use sys::extended_samples;

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io;

    /// ethtool_ts_info bytes as a driver fills them.
    fn ts_info_bytes(so: u32, phc: i32, tx: u32, rx: u32) -> [u8; TS_INFO_BYTES] {
        let mut b = [0u8; TS_INFO_BYTES];
        for (i, v) in [(0, ETHTOOL_GET_TS_INFO), (4, so), (8, phc as u32), (12, tx), (28, rx)] {
            b[i..i + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }

    /// mlx5 (ConnectX-6 Dx, `ethtool -T ens1f0np0`): hardware and software TX/RX, raw hardware, PHC 0, TX off/on,
    /// RX filters none and all (mlx5e_ethtool_get_ts_info).
    const MLX5: (u32, i32, u32, u32) = (0x5f, 0, 0b11, 0b11);
    /// virtio-net: software RX/TX only, no PHC (ethtool_op_get_ts_info).
    const VIRTIO: (u32, i32, u32, u32) = (0x1a, -1, 0, 0);
    /// igb (Intel 82576): hardware stamps and a PHC, but only PTP filters, no `all` (igb_ethtool_get_ts_info:
    /// none, ptp_v1_l4_sync, ptp_v1_l4_delay_req, ptp_v2_event).
    const I82576: (u32, i32, u32, u32) = (0x5f, 1, 0b11, 1 | 1 << 4 | 1 << 5 | 1 << 12);

    /// A device answering as recorded; `set` grants `grant` (or fails with `set_err`) and remembers the request.
    struct Recorded {
        info: [u8; TS_INFO_BYTES],
        state: RefCell<HwConfig>,
        grant: Option<u32>,
        set_err: Option<io::ErrorKind>,
        asked: RefCell<Vec<HwConfig>>,
    }

    impl Recorded {
        fn new((so, phc, tx, rx): (u32, i32, u32, u32), rx_now: u32) -> Recorded {
            Recorded {
                info: ts_info_bytes(so, phc, tx, rx),
                state: RefCell::new(HwConfig { flags: 0, tx_type: 1, rx_filter: rx_now }),
                grant: None,
                set_err: None,
                asked: RefCell::new(Vec::new()),
            }
        }
    }

    impl Device for Recorded {
        fn ts_info(&self, _: &str) -> io::Result<TsInfo> {
            Ok(TsInfo::from_bytes(&self.info).unwrap())
        }
        fn get(&self, _: &str) -> io::Result<HwConfig> {
            Ok(*self.state.borrow())
        }
        fn set(&self, _: &str, want: HwConfig) -> io::Result<HwConfig> {
            self.asked.borrow_mut().push(want);
            if let Some(k) = self.set_err {
                return Err(io::Error::from(k));
            }
            let granted = HwConfig { rx_filter: self.grant.unwrap_or(want.rx_filter), ..want };
            *self.state.borrow_mut() = granted;
            Ok(granted)
        }
    }

    #[test]
    fn a_connectx_is_switched_to_rx_filter_all_keeping_its_tx_mode() {
        let dev = Recorded::new(MLX5, HWTSTAMP_FILTER_NONE);
        let st = enable(&dev, Some("ens1f0np0"), HwTimestamps::Required).unwrap();
        assert!(st.hardware);
        assert_eq!(st.phc_index(), Some(0));
        assert_eq!(*dev.asked.borrow(), [HwConfig { flags: 0, tx_type: 1, rx_filter: HWTSTAMP_FILTER_ALL }]);
        assert_eq!(
            st.line(),
            "hw_timestamps=required device=ens1f0np0 hardware=true granted=all phc=/dev/ptp0 note=\"switched on: rx_filter none -> all\""
        );
        // Already on: nothing is asked.
        let dev = Recorded::new(MLX5, HWTSTAMP_FILTER_ALL);
        let st = enable(&dev, Some("ens1f0np0"), HwTimestamps::IfAvailable).unwrap();
        assert!(st.hardware && dev.asked.borrow().is_empty());
        assert_eq!(st.note, "already on (rx_filter all)");
    }

    #[test]
    fn a_device_without_hardware_stamps_falls_back_or_refuses() {
        let dev = Recorded::new(VIRTIO, HWTSTAMP_FILTER_NONE);
        let st = enable(&dev, Some("enp1s0"), HwTimestamps::IfAvailable).unwrap();
        assert!(!st.hardware && dev.asked.borrow().is_empty());
        assert_eq!(st.note, "software stamps: no hardware receive stamping (so_timestamping 0x1a)");
        let e = enable(&dev, Some("enp1s0"), HwTimestamps::Required).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lines.hw_timestamps = \"required\", device enp1s0: no hardware receive stamping (so_timestamping 0x1a)"
        );
        // Off asks nothing at all.
        let st = enable(&dev, Some("enp1s0"), HwTimestamps::Off).unwrap();
        assert_eq!((st.hardware, st.ts_info), (false, None));
    }

    #[test]
    fn ptp_only_filters_do_not_cover_market_data() {
        let dev = Recorded::new(I82576, HWTSTAMP_FILTER_NONE);
        let e = enable(&dev, Some("eno1"), HwTimestamps::Required).unwrap_err();
        assert_eq!(
            e.why,
            "receive filters none+ptp_v1_l4_sync+ptp_v1_l4_delay_req+ptp_v2_event: none stamps every UDP datagram (want all)"
        );
        // A driver that lists `all` but grants a PTP filter; one that refuses (no CAP_NET_ADMIN).
        let mut dev = Recorded::new(MLX5, HWTSTAMP_FILTER_NONE);
        dev.grant = Some(12);
        let st = enable(&dev, Some("eth1"), HwTimestamps::IfAvailable).unwrap();
        assert_eq!(
            (st.hardware, st.note.as_str()),
            (false, "software stamps: the driver granted rx_filter ptp_v2_event, not all")
        );
        let mut dev = Recorded::new(MLX5, HWTSTAMP_FILTER_NONE);
        dev.set_err = Some(io::ErrorKind::PermissionDenied);
        let e = enable(&dev, Some("eth1"), HwTimestamps::Required).unwrap_err();
        assert!(e.why.starts_with("SIOCSHWTSTAMP rx_filter all: "), "{e}");
        // No PHC, no mapping.
        let dev = Recorded::new((0x5f, -1, 0b11, 0b11), HWTSTAMP_FILTER_NONE);
        assert_eq!(
            enable(&dev, Some("eth2"), HwTimestamps::Required).unwrap_err().why,
            "no PTP hardware clock to map its stamps onto CLOCK_REALTIME"
        );
        assert!(enable(&dev, None, HwTimestamps::Required).unwrap_err().why.contains("names no network device"));
    }

    #[test]
    fn the_extended_offset_takes_the_narrowest_window() {
        // A filled ptp_sys_offset_extended, three samples (sec, nsec) as a driver writes them: the PHC runs
        // 37 s + 250 ns ahead (TAI); sample 2 has the narrowest window (100 ns).
        let mut ext = vec![0u8; 16 + 25 * 48];
        ext[..4].copy_from_slice(&3u32.to_ne_bytes());
        let put = |ext: &mut Vec<u8>, at: usize, sec: i64, nsec: u32| {
            ext[at..at + 8].copy_from_slice(&sec.to_ne_bytes());
            ext[at + 8..at + 12].copy_from_slice(&nsec.to_ne_bytes());
        };
        let sys = 1_700_000_000i64;
        for (s, (before, after)) in [(1_000u32, 1_900u32), (5_000, 5_100), (9_000, 9_500)].into_iter().enumerate() {
            let mid = before + (after - before) / 2;
            put(&mut ext, 16 + s * 48, sys, before);
            put(&mut ext, 16 + s * 48 + 16, sys + 37, mid + 250);
            put(&mut ext, 16 + s * 48 + 32, sys, after);
        }
        let samples = extended_samples(&ext);
        assert_eq!(samples.len(), 3);
        let o = offset_from_extended(&samples).unwrap();
        assert_eq!(o, PhcOffset { offset_ns: 37_000_000_250, uncertainty_ns: 50, method: "extended" });
        let map = PhcMap::new(Mapping::Sampled);
        assert_eq!(map.to_realtime(1), None, "no offset yet");
        map.store(o);
        let hw = (sys as u64 + 37) * 1_000_000_000 + 123_456;
        assert_eq!(map.to_realtime(hw), Some(sys as u64 * 1_000_000_000 + 123_456 - 250));
        assert_eq!(map.line(), "mapping=sampled method=extended offset_ns=37000000250 uncertainty_ns=50 samples=1");
        let p = offset_from_precise(2_000_000_123, 2_000_000_000).unwrap();
        assert_eq!((p.offset_ns, p.uncertainty_ns), (123, 0));
        assert_eq!(PhcMap::new(Mapping::Phc2sys).to_realtime(42), Some(42));
    }

    #[test]
    fn phc2sys_is_found_by_its_comm() {
        let dir = std::env::temp_dir().join(format!("mdfan-proc-{}", std::process::id()));
        for (pid, comm) in [("1", "systemd\n"), ("812", "ptp4l\n"), ("self", "phc2sys\n")] {
            std::fs::create_dir_all(dir.join(pid)).unwrap();
            std::fs::write(dir.join(pid).join("comm"), comm).unwrap();
        }
        assert!(!phc2sys_running(&dir), "self is not a pid");
        std::fs::create_dir_all(dir.join("813")).unwrap();
        std::fs::write(dir.join("813/comm"), "phc2sys\n").unwrap();
        assert!(phc2sys_running(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_loopback_line_opens_with_software_stamps_or_refuses_when_hardware_is_required() {
        use crate::{LineConfig, LineSocket};
        let cfg = LineConfig::new("127.0.0.1:0".parse().unwrap());
        let line = LineSocket::open(&cfg).unwrap();
        let hw = line.hw_state();
        assert_eq!((hw.device.as_deref(), hw.hardware, line.phc_map().is_none()), (Some("lo"), false, true));
        assert_eq!(
            hw.line(),
            "hw_timestamps=if_available device=lo hardware=false granted=- phc=- note=\"software stamps: no hardware receive stamping (so_timestamping 0x1a)\""
        );
        let e =
            LineSocket::open(&LineConfig { hw_timestamps: HwTimestamps::Required, ..cfg }).err().unwrap().to_string();
        assert!(
            e.starts_with("line 127.0.0.1:0: hardware timestamps: lines.hw_timestamps = \"required\", device lo: "),
            "{e}"
        );
        assert!(e.ends_with("device lo: no hardware receive stamping (so_timestamping 0x1a)"), "{e}");
    }

    #[test]
    fn loopback_answers_the_real_ioctl_with_software_stamps_only() {
        // The kernel here: `lo` has no driver get_ts_info (ethtool_op_get_ts_info: software only, no PHC).
        let dev = IoctlDevice::new().unwrap();
        let info = dev.ts_info("lo").unwrap();
        assert_eq!((info.hw_rx(), info.phc_index), (false, None));
        let st = enable(&dev, device_of(std::net::Ipv4Addr::LOCALHOST).as_deref(), HwTimestamps::IfAvailable).unwrap();
        assert_eq!(st.device.as_deref(), Some("lo"));
        assert!(!st.hardware);
        assert!(dev.get("lo").is_err(), "SIOCGHWTSTAMP on lo: EOPNOTSUPP");
    }
}
