//! Who is at the other end of a control connection: its address and, when it is on this host, its local user.
//!
//! - A Unix-domain connection: `SO_PEERCRED` (unix(7)), the credentials of the process that connected.
//! - A TCP connection from this host (loopback, or one of this host's addresses): the owner of the peer's own
//!   socket, found with one exact `SOCK_DIAG_BY_FAMILY` lookup (sock_diag(7), `inet_diag_req_v2` with the
//!   connection's 4-tuple as the peer sees it) that answers `idiag_uid`, the user whose process created that
//!   socket. No local user can make it name another (short of handing its socket to another user's process).
//! - A TCP connection from another host: no local user (`None`); it may attach RDMA rings, never a shared-memory
//!   ring ([`mdfan_fabric::shm::ShmRemoteRing::attach`] needs the owner).

use std::net::{IpAddr, SocketAddr};

pub use mdfan_fabric::peer::tcp_peer_uid;

/// The other end of a control connection, for logs, throttling and ring ownership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerInfo {
    /// The peer's address as logs show it (`127.0.0.1:53211`, or `unix` for a Unix-domain peer).
    pub addr: String,
    /// Its IP address (`None` on a Unix-domain socket).
    pub ip: Option<IpAddr>,
    /// Its local user, when it is on this host and could be identified.
    pub uid: Option<u32>,
    /// Its process id (Unix-domain peers only).
    pub pid: Option<i32>,
}

impl PeerInfo {
    /// A TCP peer at `peer`, connected to our `local` address: its user looked up when it is local.
    pub fn tcp(local: SocketAddr, peer: SocketAddr) -> PeerInfo {
        PeerInfo { addr: peer.to_string(), ip: Some(peer.ip()), uid: tcp_peer_uid(local, peer), pid: None }
    }

    /// A Unix-domain peer: `SO_PEERCRED`.
    pub fn unix(stream: &std::os::unix::net::UnixStream) -> PeerInfo {
        let cred = mdfan_fabric::peer::unix_peer(stream);
        PeerInfo { addr: "unix".into(), ip: None, uid: cred.map(|c| c.0), pid: cred.map(|c| c.1) }
    }

    /// `uid=N` or `uid=unknown`, for logs.
    pub fn uid_text(&self) -> String {
        self.uid.map_or_else(|| "unknown".to_owned(), |u| u.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Unix-domain peer's user and process (the lookups themselves: `mdfan_fabric::peer`'s tests).
    #[test]
    fn a_unix_peer_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let info = PeerInfo::unix(&a);
        let me = mdfan_fabric::shm::current_euid();
        assert_eq!((info.uid, info.pid), (Some(me), Some(std::process::id() as i32)));
    }
}
