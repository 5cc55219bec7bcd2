//! One control connection as the conductor holds it: non-blocking both ways, with bounded buffers, so that no
//! peer can make the conductor wait or hold unbounded memory.
//!
//! - **In**: bytes are read while the socket has them, up to [`IN_BUFFER_BYTES`] past what frames consumed
//!   (more stays in the kernel, and TCP's window pushes back on the peer); frames are taken with a limit sized to
//!   what the protocol allows at that point ([`SUBSCRIBE_FRAME_BYTES`] before the accept,
//!   [`SESSION_FRAME_BYTES`] after it). On a Unix-domain socket the file descriptors that come with the bytes
//!   (`SCM_RIGHTS`: a ring) are counted and the first one kept
//!   ([`ControlConn::take_fd`]); the others are closed as they come.
//! - **Out**: frames are queued ([`ControlConn::queue`]) and written as the socket takes them
//!   ([`ControlConn::flush`]); at most [`OUT_BUFFER_BYTES`] may wait, and whatever waits must be gone within
//!   [`WRITE_DEADLINE`] of the moment the buffer stopped being empty ([`ControlConn::overdue`]). A peer past
//!   either is closed by its owner with a logged reason: a client with a 4 KiB receive buffer that never reads
//!   costs one buffer, never the conductor's time.

use std::io::{self, ErrorKind, Read as _, Write as _};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use mdfan_wire::control::{self, ControlError, ControlMsg};

use crate::peer::PeerInfo;

/// Bytes that may wait to be written to one peer: the largest frame (an `Accept` fitted to
/// [`control::MAX_FRAME_BYTES`]) and a `Bye` after it.
pub const OUT_BUFFER_BYTES: usize = control::MAX_FRAME_BYTES as usize + 64 * 1024;
/// How long bytes may wait to be written to a peer (from when its out buffer stopped being empty) before it is
/// closed: it does not read its control connection.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(2);
/// Largest frame read from a peer before its accept: a `Subscribe` (ids and symbols are capped well below:
/// [`crate::access::MAX_INSTRUMENTS`], [`crate::access::MAX_SYMBOLS`]).
pub const SUBSCRIBE_FRAME_BYTES: u32 = 512 * 1024;
/// Largest frame read from an attached subscriber: a `SnapshotRequest` or a `Bye`.
pub const SESSION_FRAME_BYTES: u32 = 4 * 1024;
/// Bytes read ahead of the frames taken, per connection.
pub const IN_BUFFER_BYTES: usize = SUBSCRIBE_FRAME_BYTES as usize + 4;

/// A control socket: TCP, or Unix-domain (which may carry file descriptors).
pub enum Stream {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix-domain connection.
    Unix(UnixStream),
}

impl Stream {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)
            }
            Stream::Unix(s) => s.set_nonblocking(true),
        }
    }

    fn read_into(&mut self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => mdfan_fabric::fdpass::recv_with_fds(s, buf, fds),
        }
    }

    fn write_from(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
}

/// What a read pass found.
#[derive(Debug)]
pub enum Received {
    /// This many bytes (0: nothing new).
    Bytes(usize),
    /// The peer closed its end (after the bytes already in the buffer).
    Closed,
    /// The socket failed.
    Failed(io::Error),
}

/// Why a frame could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// Bytes already waiting.
    pub waiting: usize,
    /// The frame's size.
    pub frame: usize,
}

/// One control connection (see the module docs).
pub struct ControlConn {
    stream: Stream,
    /// Who is at the other end.
    pub peer: PeerInfo,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    out_pos: usize,
    /// When `out` stopped being empty.
    out_since: Option<Instant>,
    /// The first descriptor received and not taken yet; later ones are closed on arrival (counted in
    /// `fds_received`), so a peer that sends descriptors with every write holds at most one of the publisher's.
    fds: Vec<OwnedFd>,
    fds_received: usize,
}

impl ControlConn {
    /// Takes a freshly accepted socket (made non-blocking here).
    ///
    /// # Errors
    /// Setting the socket non-blocking failed.
    pub fn new(stream: Stream, peer: PeerInfo) -> io::Result<ControlConn> {
        stream.set_nonblocking()?;
        Ok(ControlConn {
            stream,
            peer,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            out_since: None,
            fds: Vec::new(),
            fds_received: 0,
        })
    }

    /// Reads what the socket has, up to [`IN_BUFFER_BYTES`] buffered.
    pub fn receive(&mut self) -> Received {
        let mut got = 0;
        let mut chunk = [0u8; 16 * 1024];
        while self.inbuf.len() < IN_BUFFER_BYTES {
            let room = (IN_BUFFER_BYTES - self.inbuf.len()).min(chunk.len());
            let held = self.fds.len();
            let read = self.stream.read_into(&mut chunk[..room], &mut self.fds);
            self.fds_received += self.fds.len() - held;
            self.fds.truncate(1);
            match read {
                Ok(0) => return Received::Closed,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    got += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Received::Failed(e),
            }
        }
        Received::Bytes(got)
    }

    /// The next whole frame read, refusing one longer than `limit` (`what` is what the protocol expects here).
    pub fn take_frame(&mut self, limit: u32, what: &'static str) -> Option<Result<ControlMsg, ControlError>> {
        control::take_frame_limited(&mut self.inbuf, limit, what)
    }

    /// Drops what was read and not taken (after a frame that cannot be used).
    pub fn discard_input(&mut self) {
        self.inbuf.clear();
    }

    /// The first file descriptor received (a Unix-domain peer's ring), taken, and how many came in all since the
    /// connection opened (more than 1: not a subscribe message this protocol sends).
    pub fn take_fd(&mut self) -> (Option<OwnedFd>, usize) {
        (self.fds.pop(), self.fds_received)
    }

    /// Queues `msg` and writes what the socket takes now.
    ///
    /// # Errors
    /// [`Overflow`] when it would put more than [`OUT_BUFFER_BYTES`] in wait (nothing is queued).
    pub fn queue(&mut self, msg: &ControlMsg) -> Result<(), Overflow> {
        let frame = control::encode(msg);
        let waiting = self.waiting();
        if waiting + frame.len() > OUT_BUFFER_BYTES {
            return Err(Overflow { waiting, frame: frame.len() });
        }
        if waiting == 0 {
            self.out.clear();
            self.out_pos = 0;
            self.out_since = Some(Instant::now());
        }
        self.out.extend_from_slice(&frame);
        let _ = self.flush();
        Ok(())
    }

    /// Bytes queued and not yet written.
    pub fn waiting(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Writes what the socket takes without blocking. Returns the bytes written.
    ///
    /// # Errors
    /// The socket failed (the peer is gone).
    pub fn flush(&mut self) -> io::Result<usize> {
        let mut wrote = 0;
        while self.out_pos < self.out.len() {
            match self.stream.write_from(&self.out[self.out_pos..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_pos += n;
                    wrote += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            self.out_since = None;
        }
        Ok(wrote)
    }

    /// Whether bytes have waited longer than [`WRITE_DEADLINE`]: the peer does not read.
    pub fn overdue(&self, now: Instant) -> bool {
        self.out_since.is_some_and(|t| now.duration_since(t) > WRITE_DEADLINE)
    }

    /// Whether nothing waits to be written.
    pub fn drained(&self) -> bool {
        self.waiting() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::control::{Bye, CloseReason};

    /// A connection and its client end, whose receive buffer is 4 KiB (set before it connects, so the window
    /// it offers stays small).
    fn pair() -> (ControlConn, TcpStream) {
        use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = socket::socket(AddressFamily::Inet, SockType::Stream, SockFlag::empty(), None).unwrap();
        socket::setsockopt(&fd, sockopt::RcvBuf, &4096).unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else { unreachable!() };
        socket::connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(at)).unwrap();
        let client = TcpStream::from(fd);
        let (server, peer) = listener.accept().unwrap();
        let info = PeerInfo { addr: peer.to_string(), ip: Some(peer.ip()), uid: None, pid: None };
        (ControlConn::new(Stream::Tcp(server), info).unwrap(), client)
    }

    /// A peer that never reads: queueing never blocks, what waits is bounded (once the kernel's buffers are full,
    /// a frame that does not fit is refused), and the deadline says when to give up on it.
    #[test]
    fn a_peer_that_never_reads_fills_a_bounded_buffer_and_goes_overdue() {
        let (mut conn, client) = pair();
        let big = ControlMsg::Bye(Bye { reason: CloseReason::PeerGone, detail: "x".repeat(1 << 20) });
        let t = Instant::now();
        let mut overflow = None;
        for _ in 0..64 {
            if let Err(e) = conn.queue(&big) {
                overflow = Some(e);
                break;
            }
            assert!(conn.waiting() <= OUT_BUFFER_BYTES);
        }
        assert!(t.elapsed() < Duration::from_secs(2), "queueing never waits for the peer: {:?}", t.elapsed());
        let e = overflow.expect("64 MiB never fit the kernel's buffers of a peer that does not read");
        assert!(e.waiting + e.frame > OUT_BUFFER_BYTES && e.waiting <= OUT_BUFFER_BYTES, "{e:?}");
        assert!(!conn.overdue(Instant::now()));
        assert!(conn.overdue(Instant::now() + WRITE_DEADLINE + Duration::from_millis(1)));
        drop(client);
    }

    /// A Unix-domain peer that sends a descriptor with every write (before its subscribe is whole, and after it
    /// was taken) makes the connection hold at most one of them; all are counted.
    #[test]
    fn a_peer_that_sends_a_descriptor_with_every_write_holds_at_most_one() {
        let (server, client) = UnixStream::pair().unwrap();
        let info = PeerInfo { addr: "unix".into(), ip: None, uid: None, pid: None };
        let mut conn = ControlConn::new(Stream::Unix(server), info).unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        for round in 0..2 {
            for _ in 0..50 {
                mdfan_fabric::fdpass::send_with_fd(&client, b"x", std::os::fd::AsFd::as_fd(&file)).unwrap();
                conn.receive();
                assert!(conn.fds.len() <= 1, "round {round}: {} descriptors held", conn.fds.len());
            }
            let (fd, received) = conn.take_fd();
            assert_eq!((fd.is_some(), received, conn.fds.len()), (true, 50 * (round + 1), 0));
        }
    }

    /// Frames come out whole whatever the read boundaries; a length past the limit is refused from its prefix.
    #[test]
    fn frames_are_taken_whole_and_a_length_past_the_limit_is_refused() {
        let (mut conn, mut client) = pair();
        let bye = control::encode(&ControlMsg::Bye(Bye::new(CloseReason::PeerGone)));
        client.write_all(&bye[..3]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(conn.receive(), Received::Bytes(3)));
        assert!(conn.take_frame(SESSION_FRAME_BYTES, "bye").is_none(), "not whole yet");
        client.write_all(&bye[3..]).unwrap();
        client.write_all(&(SESSION_FRAME_BYTES + 1).to_le_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        conn.receive();
        assert!(matches!(conn.take_frame(SESSION_FRAME_BYTES, "bye"), Some(Ok(ControlMsg::Bye(_)))));
        let e = conn.take_frame(SESSION_FRAME_BYTES, "snapshot_request or bye").unwrap().unwrap_err().to_string();
        assert_eq!(
            e,
            "control frame length 4097 bytes exceeds the 4096-byte limit for a snapshot_request or bye frame"
        );
        drop(client);
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(conn.receive(), Received::Closed));
    }
}
