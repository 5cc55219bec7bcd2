//! One line's UDP socket: multicast join or unicast bind, a sized receive buffer, non-blocking `recvmsg` with a
//! receive timestamp per datagram from `SO_TIMESTAMPING`.
//!
//! Timestamps: the socket asks for software receive stamps (taken by the kernel when the datagram enters the
//! stack) and for raw hardware stamps (taken by the NIC, only when its driver supports it and hardware
//! timestamping was switched on for the device with `SIOCSHWTSTAMP`, which this crate does not do). Each
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
}

impl LineConfig {
    /// A line on `addr`, joining on 127.0.0.1 when it is multicast, with an 8 MiB receive buffer.
    pub fn new(addr: SocketAddrV4) -> Self {
        Self { addr, interface: Ipv4Addr::LOCALHOST, rcvbuf_bytes: 8 << 20 }
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
}

/// One line's socket. Reads never block.
pub struct LineSocket {
    sock: Socket,
    addr: SocketAddrV4,
    local: SocketAddrV4,
    rcvbuf_bytes: usize,
    cmsg: Vec<u8>,
}

/// `CLOCK_REALTIME` now, ns since the UNIX epoch (0 if the clock cannot be read).
pub fn realtime_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, |t| timespec_ns(&t))
}

fn timespec_ns(t: &TimeSpec) -> u64 {
    (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64)
}

impl LineSocket {
    /// Opens the line: `SO_REUSEADDR`, the receive buffer, `SO_TIMESTAMPING` (software and hardware receive
    /// stamps), bind, and for a multicast address `IP_ADD_MEMBERSHIP` on `cfg.interface`; non-blocking.
    pub fn open(cfg: &LineConfig) -> Result<Self, LineError> {
        let addr = cfg.addr;
        let err = |what: &'static str| move |source: std::io::Error| LineError::Open { addr, what, source };
        let errno = |what: &'static str| move |e: Errno| LineError::Open { addr, what, source: e.into() };
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(err("socket"))?;
        sock.set_reuse_address(true).map_err(err("SO_REUSEADDR"))?;
        if setsockopt(&sock, sockopt::RcvBufForce, &cfg.rcvbuf_bytes).is_err() {
            sock.set_recv_buffer_size(cfg.rcvbuf_bytes).map_err(err("SO_RCVBUF"))?;
        }
        let flags = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_RX_HARDWARE
            | TimestampingFlag::SOF_TIMESTAMPING_RAW_HARDWARE;
        setsockopt(&sock, sockopt::Timestamping, &flags).map_err(errno("SO_TIMESTAMPING"))?;
        sock.bind(&SockAddr::from(addr)).map_err(err("bind"))?;
        if addr.ip().is_multicast() {
            sock.join_multicast_v4(addr.ip(), &cfg.interface).map_err(err("IP_ADD_MEMBERSHIP"))?;
        }
        sock.set_nonblocking(true).map_err(err("O_NONBLOCK"))?;
        let local = sock
            .local_addr()
            .map_err(err("getsockname"))?
            .as_socket_ipv4()
            .ok_or_else(|| err("getsockname")(std::io::Error::other("not an IPv4 address")))?;
        let rcvbuf_bytes = sock.recv_buffer_size().map_err(err("SO_RCVBUF (read back)"))?;
        Ok(Self { sock, addr, local, rcvbuf_bytes, cmsg: nix::cmsg_space!(Timestamps) })
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
                    if hw != 0 {
                        stamp = (hw, StampKind::Hardware);
                    } else if sw != 0 {
                        stamp = (sw, StampKind::Software);
                    }
                }
            }
        }
        let (len, truncated) = (msg.bytes, msg.flags.contains(MsgFlags::MSG_TRUNC));
        if stamp.1 == StampKind::User {
            stamp.0 = realtime_ns();
        }
        Ok(Some(Received { len, truncated, ts_recv_ns: stamp.0, stamp: stamp.1 }))
    }
}
