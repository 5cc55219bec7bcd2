//! Who is at the other end of a control connection on this host: its local user.
//!
//! - A Unix-domain connection: `SO_PEERCRED` (unix(7)), the credentials of the process at the other end (for a
//!   connecting client, the process that connected; for a listening server, the one that listened).
//! - A TCP connection between two sockets of this host (loopback, or one of this host's addresses): the owner of
//!   the other end's own socket, found with one exact `SOCK_DIAG_BY_FAMILY` lookup (sock_diag(7),
//!   `inet_diag_req_v2` with the connection's 4-tuple as the other end sees it) that answers `idiag_uid`, the user
//!   whose process created that socket (an accepted socket takes its listener's). No local user can make it name
//!   another (short of handing its socket to another user's process).
//! - A TCP connection to or from another host: no local user (`None`).
//!
//! The publisher uses it to know who subscribes (access lists, ring ownership); a subscriber, to know who
//! publishes before it sends its token and its ring.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd as _;

use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType};

/// The local user at the other end of a Unix-domain connection (`SO_PEERCRED`): its uid, and its pid.
pub fn unix_peer(stream: &std::os::unix::net::UnixStream) -> Option<(u32, i32)> {
    let cred = socket::getsockopt(stream, socket::sockopt::PeerCredentials).ok()?;
    Some((cred.uid(), cred.pid()))
}

/// sock_diag's message type (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// netlink flags (linux/netlink.h).
const NLM_F_REQUEST: u16 = 1;
/// netlink error message type.
const NLMSG_ERROR: u16 = 2;
/// `INET_DIAG_NOCOOKIE`: look the socket up by its 4-tuple, not by a cookie.
const NO_COOKIE: u32 = !0;
/// Offset of `idiag_uid` in a reply: nlmsghdr (16) + family, state, timer, retrans (4) + `inet_diag_sockid`
/// (48) + expires, rqueue, wqueue (12).
const UID_AT: usize = 16 + 4 + 48 + 12;
/// Offset of `idiag_state` in a reply: after nlmsghdr (16) and `idiag_family` (1).
const STATE_AT: usize = 17;
/// `TCP_ESTABLISHED` and `TCP_SYN_RECV` (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;
const TCP_SYN_RECV: u8 = 3;

/// Whether `ip` is one of this host's addresses (loopback, or one a socket can bind to): a TCP peer there has a
/// local user that [`tcp_peer_uid`] can name.
pub fn is_this_host(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The owner of the TCP socket at `peer` connected to our socket at `local`, if that socket is on this host (see
/// the module docs). `None` for another host's, or when the lookup fails ([`tcp_peer`] says which).
pub fn tcp_peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    match tcp_peer(local, peer) {
        TcpPeer::User(uid) => Some(uid),
        TcpPeer::HalfMade | TcpPeer::Unknown => None,
    }
}

/// What sock_diag says of the TCP socket at `peer` connected to our socket at `local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpPeer {
    /// A connected socket of this host, created by this user's process.
    User(u32),
    /// A socket of this host that is not connected yet (`SYN_RECV`: a listener deferring its accept holds a
    /// request socket until data comes, which sock_diag reports as uid 0): no user can be told.
    HalfMade,
    /// No answer: another host's, none at that address (yet), one closing (its process closed it), or sock_diag
    /// unavailable.
    Unknown,
}

/// See [`TcpPeer`].
pub fn tcp_peer(local: SocketAddr, peer: SocketAddr) -> TcpPeer {
    diag_answer(local, peer).unwrap_or(TcpPeer::Unknown)
}

/// [`tcp_peer`]'s lookup; `None` for [`TcpPeer::Unknown`].
fn diag_answer(local: SocketAddr, peer: SocketAddr) -> Option<TcpPeer> {
    let (family, src, dst) = match (peer.ip(), local.ip()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => (nix::libc::AF_INET as u8, v4_words(p.octets()), v4_words(l.octets())),
        (IpAddr::V6(p), IpAddr::V6(l)) => (nix::libc::AF_INET6 as u8, v6_words(p.octets()), v6_words(l.octets())),
        _ => return None,
    };
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes()); // nlmsg_len
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid
    req.extend_from_slice(&[family, nix::libc::IPPROTO_TCP as u8, 0, 0]); // family, protocol, ext, pad
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // idiag_states: any
                                                    // inet_diag_sockid of the socket we look for: its source is the peer, its destination us (ports and
                                                    // addresses in network order)
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    for w in src.iter().chain(&dst) {
        req.extend_from_slice(w);
    }
    req.extend_from_slice(&0u32.to_ne_bytes()); // idiag_if
    req.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    req.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    debug_assert_eq!(req.len(), 72);
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    let timeout = nix::sys::time::TimeVal::new(0, 100_000);
    let _ = socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &timeout);
    socket::sendto(fd.as_raw_fd(), &req, &NetlinkAddr::new(0, 0), MsgFlags::empty()).ok()?;
    let mut reply = [0u8; 512];
    let n = socket::recv(fd.as_raw_fd(), &mut reply, MsgFlags::empty()).ok()?;
    let kind = u16::from_ne_bytes(reply.get(4..6)?.try_into().ok()?);
    if n < UID_AT + 4 || kind == NLMSG_ERROR {
        return None;
    }
    // the answer must be about the socket asked for (its ports as sent), a whole connected one: a listener that
    // defers its accept (TCP_DEFER_ACCEPT) has only a request socket until data comes, which reports uid 0
    if reply.get(20..24)? != &req[24..28] {
        return None;
    }
    match *reply.get(STATE_AT)? {
        TCP_ESTABLISHED => Some(TcpPeer::User(u32::from_ne_bytes(reply[UID_AT..UID_AT + 4].try_into().ok()?))),
        TCP_SYN_RECV => Some(TcpPeer::HalfMade),
        _ => None, // closing (its process closed it): no user to name, and nobody reads it any more
    }
}

fn v4_words(o: [u8; 4]) -> [[u8; 4]; 4] {
    [o, [0; 4], [0; 4], [0; 4]]
}

fn v6_words(o: [u8; 16]) -> [[u8; 4]; 4] {
    [[o[0], o[1], o[2], o[3]], [o[4], o[5], o[6], o[7]], [o[8], o[9], o[10], o[11]], [o[12], o[13], o[14], o[15]]]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback connection's ends are both found as this process's user, each seen from the other; an address
    /// with no socket is nobody's; a Unix-domain peer is this process.
    #[test]
    #[cfg_attr(miri, ignore = "netlink and TCP sockets")]
    fn a_loopback_peer_is_this_user_and_a_made_up_one_is_nobody() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let me = crate::shm::current_euid();
        assert_eq!(tcp_peer_uid(server.local_addr().unwrap(), peer), Some(me));
        assert_eq!(peer, client.local_addr().unwrap());
        // the client's view: the server's accepted socket
        assert_eq!(tcp_peer_uid(client.local_addr().unwrap(), client.peer_addr().unwrap()), Some(me));
        assert!(is_this_host("127.0.0.2".parse().unwrap()) && is_this_host("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_this_host("192.0.2.77".parse().unwrap()), "TEST-NET-1 is no address of this host");
        // a listener deferring its accept holds only a request socket (uid 0 in sock_diag): no user named
        let deferred = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let one: libc::c_int = 5;
        // SAFETY: setsockopt reads `one` (an int, its size given) during the call only.
        let rc = unsafe {
            libc::setsockopt(
                deferred.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let c = std::net::TcpStream::connect(deferred.local_addr().unwrap()).unwrap();
        assert_eq!(tcp_peer(c.local_addr().unwrap(), c.peer_addr().unwrap()), TcpPeer::HalfMade);
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(tcp_peer_uid(server.local_addr().unwrap(), nobody), None);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(unix_peer(&a), Some((me, std::process::id() as i32)));
    }
}
