//! One line's UDP socket: multicast join or unicast bind, a sized receive buffer, non-blocking `recvmsg` with a
//! receive timestamp per datagram from `SO_TIMESTAMPING`.
//!
//! Timestamps: the socket asks for software receive stamps (taken by the kernel when the datagram enters the
//! stack) and for raw hardware stamps (taken by the NIC, only when its driver supports it and hardware
//! timestamping is on for the device: [`LineConfig::hw_timestamps`], [`crate::hwstamp`], switches it on with
//! `SIOCSHWTSTAMP` at open). A hardware stamp is PHC time: it is mapped onto `CLOCK_REALTIME` through the line's
//! [`PhcMap`] (one atomic load); without a mapping yet, the datagram's software stamp is used. Each
//! [`Received`] says which one it got ([`StampKind`]); when the kernel gave none, the socket reads
//! `CLOCK_REALTIME` right after `recvmsg` and says so ([`StampKind::User`]). On loopback it is always software.

use std::io::IoSliceMut;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn, TimestampingFlag, Timestamps,
};
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::hwstamp::{self, HwStampState, HwTimestamps, PhcMap};
use std::sync::Arc;

/// How often a line's PHC offset is measured again, off the hot path.
const PHC_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a receive timestamp came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampKind {
    /// The NIC's clock (`SO_TIMESTAMPING` raw hardware stamp).
    Hardware,
    /// The kernel's clock when the datagram entered the stack (`SO_TIMESTAMPING` software stamp).
    Software,
    /// No kernel stamp came: `CLOCK_REALTIME` read by this process right after `recvmsg`.
    User,
    /// Not stamped (only in placeholder values, never on a received datagram).
    None,
}

impl StampKind {
    /// "hardware", "software", "user" or "none".
    pub fn name(self) -> &'static str {
        match self {
            StampKind::Hardware => "hardware",
            StampKind::Software => "software",
            StampKind::User => "user",
            StampKind::None => "none",
        }
    }
}

/// How to open one line.
#[derive(Debug, Clone)]
pub struct LineConfig {
    /// Address to receive on: a multicast group and port (the socket binds the group and joins it), or a
    /// unicast address and port (the socket binds it). Port 0 picks a free port ([`LineSocket::local_addr`]).
    pub addr: SocketAddrV4,
    /// Interface address to join a multicast group on (127.0.0.1 for tests on one machine).
    pub interface: Ipv4Addr,
    /// Receive buffer to ask for, bytes. Set with `SO_RCVBUFFORCE` when the process may (root, or
    /// CAP_NET_ADMIN), else `SO_RCVBUF`, which the kernel caps at `net.core.rmem_max`.
    pub rcvbuf_bytes: usize,
    /// Whether to switch the device's hardware receive stamping on (`lines.hw_timestamps`): the device is the
    /// one holding `interface` (multicast) or the bound address (unicast).
    pub hw_timestamps: HwTimestamps,
    /// The source addresses the venue publishes this line from (`lines.a.sources`): a datagram from any other is
    /// dropped before arbitration and counted by source ([`crate::arbiter::SourceCounts`]). Empty: any source.
    /// At most [`crate::arbiter::MAX_SOURCES`]. On a multicast line the join is source-specific as well
    /// (IGMPv3 `IP_ADD_SOURCE_MEMBERSHIP`, one per source, RFC 3376 / RFC 4607), so the kernel and the
    /// network's switches drop other senders first; where the kernel refuses that, an any-source join
    /// ([`LineSocket::source_specific`] says which), and the per-datagram check either way.
    pub sources: Vec<Ipv4Addr>,
}

impl LineConfig {
    /// A line on `addr`, joining on 127.0.0.1 when it is multicast, with an 8 MiB receive buffer and hardware
    /// stamps if available.
    pub fn new(addr: SocketAddrV4) -> Self {
        Self {
            addr,
            interface: Ipv4Addr::LOCALHOST,
            rcvbuf_bytes: 8 << 20,
            hw_timestamps: HwTimestamps::IfAvailable,
            sources: Vec::new(),
        }
    }
}

/// A line could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// A socket call failed while opening the line.
    #[error("line {addr}: {what}: {source}")]
    Open {
        /// The line's address.
        addr: SocketAddrV4,
        /// The call that failed.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// `recvmsg` failed with something other than "nothing to read".
    #[error("line {addr}: recvmsg: {source}")]
    Recv {
        /// The line's address.
        addr: SocketAddrV4,
        /// The OS error.
        source: Errno,
    },
}

/// One datagram read by [`LineSocket::recv`].
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Payload bytes written into the caller's buffer.
    pub len: usize,
    /// The datagram was longer than the buffer (the rest is lost: `MSG_TRUNC`).
    pub truncated: bool,
    /// Receive timestamp, ns since the UNIX epoch.
    pub ts_recv_ns: u64,
    /// Where `ts_recv_ns` came from.
    pub stamp: StampKind,
    /// The datagram's source address (0.0.0.0 if the kernel gave none).
    pub src: Ipv4Addr,
}

/// One line's socket. Reads never block.
pub struct LineSocket {
    sock: Socket,
    addr: SocketAddrV4,
    local: SocketAddrV4,
    rcvbuf_bytes: usize,
    cmsg: Vec<u8>,
    hw: HwStampState,
    phc: Option<Arc<PhcMap>>,
    source_specific: bool,
    /// Sources were listed for a multicast line but the kernel refused the source-specific join.
    ssm_refused: bool,
    /// The sources the line takes datagrams from (`LineConfig::sources`; empty: any).
    sources: Vec<Ipv4Addr>,
}

/// Hardware stamping for `cfg`'s device and, when on, its PHC mapped. `Required` fails where the device cannot
/// or its PHC cannot be read; `IfAvailable` then says why in the state's note.
fn hardware_stamps(cfg: &LineConfig) -> std::io::Result<(HwStampState, Option<Arc<PhcMap>>)> {
    let ip = if cfg.addr.ip().is_multicast() { cfg.interface } else { *cfg.addr.ip() };
    let device = if cfg.hw_timestamps == HwTimestamps::Off { None } else { hwstamp::device_of(ip) };
    let dev = hwstamp::IoctlDevice::new()?;
    let mut hw = hwstamp::enable(&dev, device.as_deref(), cfg.hw_timestamps)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let Some(phc) = hw.phc_index() else { return Ok((hw, None)) };
    match hwstamp::map_phc(phc, PHC_SAMPLE_PERIOD) {
        Ok(map) => Ok((hw, Some(map))),
        Err(e) if cfg.hw_timestamps == HwTimestamps::Required => {
            Err(std::io::Error::new(e.kind(), format!("device {}: PHC: {e}", device.unwrap_or_default())))
        }
        Err(e) => {
            hw.hardware = false;
            hw.note = format!("software stamps: hardware stamping is on, but the PHC cannot be read: {e}");
            Ok((hw, None))
        }
    }
}

/// `CLOCK_REALTIME` now, ns since the UNIX epoch (0 if the clock cannot be read).
pub fn realtime_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, |t| timespec_ns(&t))
}

fn timespec_ns(t: &TimeSpec) -> u64 {
    (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64)
}

impl LineSocket {
    /// Opens the line: `SO_REUSEADDR` for a multicast group (other processes on the host may join it too; a
    /// unicast address is this socket's alone, so a second process binding it fails instead of taking part of its
    /// datagrams), the receive buffer, `SO_TIMESTAMPING` (software and hardware receive
    /// stamps), bind, and for a multicast address `IP_ADD_MEMBERSHIP` on `cfg.interface` (with `cfg.sources`,
    /// `IP_ADD_SOURCE_MEMBERSHIP` per source, falling back to `IP_ADD_MEMBERSHIP` where it fails); non-blocking. Then
    /// hardware stamping as `cfg.hw_timestamps` says ([`hwstamp::enable`]) and, when it is on, the PHC mapped
    /// ([`hwstamp::map_phc`]); [`LineSocket::hw_state`] says what came of it.
    ///
    /// # Errors
    /// [`LineError::Open`] naming the call that failed; with `hw_timestamps` `required`, naming what the device
    /// lacks or refused.
    pub fn open(cfg: &LineConfig) -> Result<Self, LineError> {
        let addr = cfg.addr;
        let err = |what: &'static str| move |source: std::io::Error| LineError::Open { addr, what, source };
        let errno = |what: &'static str| move |e: Errno| LineError::Open { addr, what, source: e.into() };
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(err("socket"))?;
        if addr.ip().is_multicast() {
            sock.set_reuse_address(true).map_err(err("SO_REUSEADDR"))?;
        }
        if setsockopt(&sock, sockopt::RcvBufForce, &cfg.rcvbuf_bytes).is_err() {
            sock.set_recv_buffer_size(cfg.rcvbuf_bytes).map_err(err("SO_RCVBUF"))?;
        }
        let flags = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_RX_HARDWARE
            | TimestampingFlag::SOF_TIMESTAMPING_RAW_HARDWARE;
        setsockopt(&sock, sockopt::Timestamping, &flags).map_err(errno("SO_TIMESTAMPING"))?;
        sock.bind(&SockAddr::from(addr)).map_err(err("bind"))?;
        let (mut source_specific, mut ssm_refused) = (false, false);
        if addr.ip().is_multicast() {
            source_specific = !cfg.sources.is_empty()
                && cfg.sources.iter().all(|s| sock.join_ssm_v4(s, addr.ip(), &cfg.interface).is_ok());
            if !source_specific {
                if !cfg.sources.is_empty() {
                    // Leave what did join: an any-source membership beside source ones is refused (EINVAL).
                    ssm_refused = true;
                    for s in &cfg.sources {
                        let _ = sock.leave_ssm_v4(s, addr.ip(), &cfg.interface);
                    }
                }
                sock.join_multicast_v4(addr.ip(), &cfg.interface).map_err(err("IP_ADD_MEMBERSHIP"))?;
            }
        }
        sock.set_nonblocking(true).map_err(err("O_NONBLOCK"))?;
        let local = sock
            .local_addr()
            .map_err(err("getsockname"))?
            .as_socket_ipv4()
            .ok_or_else(|| err("getsockname")(std::io::Error::other("not an IPv4 address")))?;
        let rcvbuf_bytes = sock.recv_buffer_size().map_err(err("SO_RCVBUF (read back)"))?;
        let (hw, phc) = hardware_stamps(cfg).map_err(err("hardware timestamps"))?;
        Ok(Self {
            sock,
            addr,
            local,
            rcvbuf_bytes,
            cmsg: nix::cmsg_space!(Timestamps),
            hw,
            phc,
            source_specific,
            ssm_refused,
            sources: cfg.sources.clone(),
        })
    }

    /// Whether a datagram from `src` is one this line takes: `src` is among its sources, or it lists none. A
    /// socket read by the [`crate::LineReceiver`] has the arbiter check this; a side feed's reader (market
    /// recovery, instrument definitions) checks it itself.
    pub fn takes_source(&self, src: Ipv4Addr) -> bool {
        self.sources.is_empty() || self.sources.contains(&src)
    }

    /// Whether the multicast join is source-specific (IGMPv3, one membership per `sources` entry): false for a
    /// unicast line, a line without sources, or a kernel that refused it.
    pub fn source_specific(&self) -> bool {
        self.source_specific
    }

    /// Whether sources were listed for this multicast line and the kernel refused the source-specific join (the
    /// line joined for any source; the per-datagram check still drops the others).
    pub fn source_specific_refused(&self) -> bool {
        self.ssm_refused
    }

    /// What hardware stamping came to on this line's device (the log and the report print
    /// [`HwStampState::line`]).
    pub fn hw_state(&self) -> &HwStampState {
        &self.hw
    }

    /// The line's PHC → `CLOCK_REALTIME` mapping, when hardware stamps are on.
    pub fn phc_map(&self) -> Option<&Arc<PhcMap>> {
        self.phc.as_ref()
    }

    /// The address the socket is bound to (the group or unicast address, with the real port).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The receive buffer the kernel granted, bytes (Linux reports twice the size asked for: the other half
    /// is its bookkeeping).
    pub fn rcvbuf_bytes(&self) -> usize {
        self.rcvbuf_bytes
    }

    /// Reads one datagram into `buf` if one is waiting (`Ok(None)` if not). Allocates nothing.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<Received>, LineError> {
        let fd = self.sock.as_raw_fd();
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<SockaddrIn>(fd, &mut iov, Some(&mut self.cmsg), MsgFlags::MSG_DONTWAIT) {
            Ok(m) => m,
            Err(Errno::EAGAIN | Errno::EINTR) => return Ok(None),
            Err(source) => return Err(LineError::Recv { addr: self.addr, source }),
        };
        let mut stamp = (0, StampKind::User);
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmTimestampsns(ts) = c {
                    let hw = timespec_ns(&ts.hw_raw);
                    let sw = timespec_ns(&ts.system);
                    // A hardware stamp is PHC time: mapped, or the software stamp when it cannot be (yet).
                    let mapped = (hw != 0).then(|| self.phc.as_ref()?.to_realtime(hw)).flatten();
                    if let Some(t) = mapped {
                        stamp = (t, StampKind::Hardware);
                    } else if sw != 0 {
                        stamp = (sw, StampKind::Software);
                    }
                }
            }
        }
        let (len, truncated) = (msg.bytes, msg.flags.contains(MsgFlags::MSG_TRUNC));
        let src = msg.address.map_or(Ipv4Addr::UNSPECIFIED, |a| a.ip());
        if stamp.1 == StampKind::User {
            stamp.0 = realtime_ns();
        }
        Ok(Some(Received { len, truncated, ts_recv_ns: stamp.0, stamp: stamp.1, src }))
    }
}
