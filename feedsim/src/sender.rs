//! Where a line's datagrams go: a multicast group sent on the loopback interface with TTL 0, or a unicast
//! address on loopback. No other destination is accepted: the simulator never sends off this machine.
//!
//! One exception, for tests that stand in for an exchange and a colo host with network namespaces joined by
//! veth ([`MulticastScope::NamespaceRoutes`]): multicast sent where the calling thread's namespace routes it,
//! with TTL 1, and only from a thread in a namespace made below the one the process was started from
//! ([`in_own_netns`]), which is checked when the socket opens. Such a namespace reaches only what the test joined
//! it to.

use std::net::{Ipv4Addr, SocketAddrV4};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// A destination was refused or its socket could not be set up or written.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Not a multicast group and not a loopback address.
    #[error("line {line} destination {dest}: only a multicast group (sent on 127.0.0.1 with TTL 0) or a loopback address (127.0.0.0/8) is allowed")]
    NotLocal {
        /// "A" or "B".
        line: &'static str,
        /// The destination given.
        dest: SocketAddrV4,
    },
    /// [`MulticastScope::NamespaceRoutes`] asked for by a thread in the network namespace its process was started
    /// from (or one [`in_own_netns`] cannot tell apart from it).
    #[error("line {line} destination {dest}: multicast by the namespace's routes only from a network namespace of the test's own (this thread shares its parent processes' namespace, or /proc does not say)")]
    NotOwnNamespace {
        /// "A" or "B".
        line: &'static str,
        /// The destination given.
        dest: SocketAddrV4,
    },
    /// A socket call failed.
    #[error("line {line} destination {dest}: {what}: {source}")]
    Socket {
        /// "A" or "B".
        line: &'static str,
        /// The destination.
        dest: SocketAddrV4,
        /// The call that failed.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Where multicast datagrams go (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MulticastScope {
    /// Out the loopback interface (`IP_MULTICAST_IF` 127.0.0.1), TTL 0: never off this host.
    #[default]
    Loopback,
    /// Where the calling thread's network namespace routes the group, TTL 1: only from a thread in a namespace
    /// of its own ([`in_own_netns`]).
    NamespaceRoutes,
}

/// Whether the calling thread is in a network namespace someone made below the one this process was started
/// from: its namespace (`/proc/thread-self/ns/net`) differs from its process's main thread's or from an
/// ancestor process's (walking up the parents, `/proc/PID/stat`). `false` when that cannot be read, and for a
/// process whose every ancestor shares its namespace (pid 1's namespace, as far as this can tell; pid 1 itself is
/// often unreadable in a container).
pub fn in_own_netns() -> bool {
    let ns = |path: &str| std::fs::read_link(path).ok();
    let Some(mine) = ns("/proc/thread-self/ns/net") else { return false };
    if ns("/proc/self/ns/net").is_some_and(|leader| leader != mine) {
        return true;
    }
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = parent_pid(pid).filter(|p| *p > 0) else { return false };
        match ns(&format!("/proc/{parent}/ns/net")) {
            Some(theirs) if theirs != mine => return true,
            Some(_) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// The parent of process `pid` (`/proc/PID/stat`'s fourth field, read after the command's closing parenthesis).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// Refuses a destination that is neither a multicast group nor a loopback address.
pub fn check_dest(line: &'static str, dest: SocketAddrV4) -> Result<(), SendError> {
    if dest.ip().is_multicast() || dest.ip().is_loopback() {
        Ok(())
    } else {
        Err(SendError::NotLocal { line, dest })
    }
}

/// One line's sending socket.
pub struct LineSender {
    sock: Socket,
    line: &'static str,
    dest: SocketAddrV4,
    to: SockAddr,
}

impl LineSender {
    /// A socket for `dest`: multicast with `IP_MULTICAST_IF` 127.0.0.1, TTL 0 and loop on, or unicast to a
    /// loopback address.
    pub fn open(line: &'static str, dest: SocketAddrV4) -> Result<Self, SendError> {
        Self::open_scoped(line, dest, MulticastScope::Loopback)
    }

    /// As [`LineSender::open`], multicast going where `scope` says (module docs).
    pub fn open_scoped(line: &'static str, dest: SocketAddrV4, scope: MulticastScope) -> Result<Self, SendError> {
        let err = |what: &'static str| move |source| SendError::Socket { line, dest, what, source };
        check_dest(line, dest)?;
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(err("socket"))?;
        if dest.ip().is_multicast() {
            match scope {
                MulticastScope::Loopback => {
                    sock.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).map_err(err("IP_MULTICAST_IF"))?;
                    sock.set_multicast_ttl_v4(0).map_err(err("IP_MULTICAST_TTL"))?;
                }
                MulticastScope::NamespaceRoutes => {
                    if !in_own_netns() {
                        return Err(SendError::NotOwnNamespace { line, dest });
                    }
                    sock.set_multicast_ttl_v4(1).map_err(err("IP_MULTICAST_TTL"))?;
                }
            }
            sock.set_multicast_loop_v4(true).map_err(err("IP_MULTICAST_LOOP"))?;
        }
        Ok(Self { sock, line, dest, to: SockAddr::from(dest) })
    }

    /// The destination.
    pub fn dest(&self) -> SocketAddrV4 {
        self.dest
    }

    /// Sends one datagram (blocking).
    pub fn send(&self, payload: &[u8]) -> Result<(), SendError> {
        let (line, dest) = (self.line, self.dest);
        let n = self.sock.send_to(payload, &self.to).map_err(|source| SendError::Socket {
            line,
            dest,
            what: "sendto",
            source,
        })?;
        if n != payload.len() {
            let source = std::io::Error::other(format!("sent {n} of {} bytes", payload.len()));
            return Err(SendError::Socket { line, dest, what: "sendto", source });
        }
        Ok(())
    }
}
