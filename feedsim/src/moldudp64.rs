//! MoldUDP64 on the exchange side: framing ITCH messages into downstream packets ([`MoldFramer`]), the feed that
//! plays them ([`MoldItch`], with [`synthesize`] building its packets from a DBN MBO file), and the
//! retransmission server ([`MoldRetransmitServer`]).
//!
//! Source: Nasdaq "MoldUDP64 Protocol Specification" version 1.00: "Downstream Packets" (session 10 bytes ASCII,
//! sequence number u64 BE of the first message, message count u16 BE, then per message a u16 BE length and the
//! message; count 0 = heartbeat, whose sequence number is the next expected; `0xFFFF` = end of session) and
//! "Request Packets" (session 10, sequence number u64 BE, requested message count u16 BE: 20 bytes, sent to the
//! retransmission server, which answers with downstream packets of the same session to the requester's address).
//! The receiving side parses with `mdfan_feed::moldudp64::Packet`.
//!
//! ## Framing ([`MoldFramer`])
//!
//! Sequence numbers from 1; messages are packed in order into packets of at most `max_payload_bytes` (UDP
//! payload, header included; [`DEFAULT_MAX_PAYLOAD_BYTES`] = 1,400). A packet is closed when the next message
//! does not fit or comes from a later `ts_recv` (one packet per DBN capture time, so the recorded pace is
//! kept). Where the source is idle for the heartbeat interval ([`DEFAULT_HEARTBEAT_INTERVAL_NS`] = 1 s; 0 = no
//! heartbeats) or more, heartbeats (count 0) are put in between, one per interval (the bundled ESH4 file has a
//! pause of about a day between its snapshot and the reopen: 83,126 heartbeats). The last packet is an end of
//! session (count `0xFFFF`, sequence number the next expected).
//!
//! ## Retransmission ([`MoldRetransmitServer`])
//!
//! Listens on a loopback UDP address. It keeps every message of every packet published (before impairment, so
//! also the ones the lines lost) and answers a request with as many downstream packets as the requested
//! messages need (each at most `max_payload_bytes`), sent unicast to the requester's address, at most
//! [`MAX_REQUEST_MESSAGES`] messages per request. A request for sequence numbers partly published is answered
//! for the part published. Counted and not answered: a request that is not 20 bytes (`malformed`), from another
//! session (`wrong_session`), with count 0 or sequence number 0 (`malformed`), or wholly beyond the last message
//! published (`beyond`). Knobs ([`RetransmitOptions`]): stop answering after N requests, or once a given
//! sequence number was published (a server that dies mid-run), and silent (never answers).

use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;

use mdfan_feed::dbn::{FeedError, MboStream};
use mdfan_feed::itch::eastern_midnight_ns;
use mdfan_feed::moldudp64::{Packet, END_OF_SESSION, HEADER_BYTES};

use crate::capture::{Capture, UdpPacket};
use crate::feed::{Feed, RecoveryConfig, RecoveryServer};
use crate::itch::{EncoderStats, ItchEncoder};
use crate::SimError;

/// Largest downstream packet by default (UDP payload bytes, header included), below a 1,500-byte Ethernet MTU.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1_400;
/// Idle time after which a heartbeat is put in by default, ns (1 s).
pub const DEFAULT_HEARTBEAT_INTERVAL_NS: u64 = 1_000_000_000;
/// Messages answered per request at most (a request's count is cut to this).
pub const MAX_REQUEST_MESSAGES: u16 = 2_000;
/// Bytes of a request packet: session (10), sequence number (8), requested message count (2).
pub const REQUEST_BYTES: usize = 20;

/// A MoldUDP64 session name: 10 ASCII bytes, space-padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session(pub [u8; 10]);

impl Session {
    /// A session from up to 10 printable ASCII characters (padded with spaces).
    ///
    /// # Errors
    /// A message naming the session and what is wrong (too long, not printable ASCII).
    pub fn new(name: &str) -> Result<Session, String> {
        if name.len() > 10 {
            return Err(format!("MoldUDP64 session {name:?}: {} bytes, at most 10", name.len()));
        }
        if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
            return Err(format!("MoldUDP64 session {name:?}: {c:?} is not printable ASCII"));
        }
        let mut s = [b' '; 10];
        s[..name.len()].copy_from_slice(name.as_bytes());
        Ok(Session(s))
    }
}

/// Writes a downstream packet header.
pub fn write_header(out: &mut Vec<u8>, session: &Session, sequence_number: u64, message_count: u16) {
    out.extend_from_slice(&session.0);
    out.extend_from_slice(&sequence_number.to_be_bytes());
    out.extend_from_slice(&message_count.to_be_bytes());
}

/// A request packet ("Request Packets"): session, first sequence number wanted, message count.
pub fn request_packet(session: &Session, sequence_number: u64, message_count: u16) -> [u8; REQUEST_BYTES] {
    let mut r = [0u8; REQUEST_BYTES];
    r[..10].copy_from_slice(&session.0);
    r[10..18].copy_from_slice(&sequence_number.to_be_bytes());
    r[18..].copy_from_slice(&message_count.to_be_bytes());
    r
}

/// One downstream packet and the capture time that paces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedPacket {
    /// When it goes out: the DBN ts_recv of its messages (ns since the UNIX epoch).
    pub ts_ns: u64,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// Packs messages into downstream packets (module docs, "Framing").
#[derive(Debug)]
pub struct MoldFramer {
    session: Session,
    max_payload_bytes: usize,
    heartbeat_interval_ns: u64,
    next_seq: u64,
    open: Vec<u8>,
    open_count: u16,
    open_ts_ns: u64,
    last_ts_ns: Option<u64>,
    packets: Vec<FramedPacket>,
}

impl MoldFramer {
    /// A framer for `session`, packets of at most `max_payload_bytes` (at least the header and one message of
    /// the longest ITCH type: 20 + 2 + 50), a heartbeat every `heartbeat_interval_ns` of idle time (0: none).
    pub fn new(session: Session, max_payload_bytes: usize, heartbeat_interval_ns: u64) -> MoldFramer {
        MoldFramer {
            session,
            max_payload_bytes: max_payload_bytes.max(HEADER_BYTES + 2 + 50),
            heartbeat_interval_ns,
            next_seq: 1,
            open: Vec::with_capacity(max_payload_bytes),
            open_count: 0,
            open_ts_ns: 0,
            last_ts_ns: None,
            packets: Vec::new(),
        }
    }

    /// Sequence number of the next message.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Adds one message, received at `ts_ns`.
    pub fn push(&mut self, ts_ns: u64, message: &[u8]) {
        let fits = self.open.len() + 2 + message.len() <= self.max_payload_bytes && self.open_count < u16::MAX - 1;
        if self.open_count > 0 && (ts_ns != self.open_ts_ns || !fits) {
            self.close();
        }
        let every = self.heartbeat_interval_ns;
        if let (Some(last), true) = (self.last_ts_ns, every > 0) {
            // One per interval of silence, none closer than half an interval to the next message.
            let mut hb = last.saturating_add(every);
            while hb <= ts_ns.saturating_sub(every / 2) && self.open_count == 0 {
                self.control(hb, 0);
                hb = hb.saturating_add(every);
            }
        }
        if self.open_count == 0 {
            self.open.clear();
            write_header(&mut self.open, &self.session, self.next_seq, 0);
            self.open_ts_ns = ts_ns;
        }
        self.open.extend_from_slice(&(message.len() as u16).to_be_bytes());
        self.open.extend_from_slice(message);
        self.open_count += 1;
        self.next_seq += 1;
        self.last_ts_ns = Some(ts_ns);
    }

    fn close(&mut self) {
        if self.open_count == 0 {
            return;
        }
        self.open[18..20].copy_from_slice(&self.open_count.to_be_bytes());
        self.packets.push(FramedPacket { ts_ns: self.open_ts_ns, payload: self.open.clone() });
        self.open_count = 0;
    }

    fn control(&mut self, ts_ns: u64, count: u16) {
        let mut p = Vec::with_capacity(HEADER_BYTES);
        write_header(&mut p, &self.session, self.next_seq, count);
        self.packets.push(FramedPacket { ts_ns, payload: p });
    }

    /// Closes the last packet, appends the end of session (at the last message's time) and returns them all.
    pub fn finish(mut self) -> Vec<FramedPacket> {
        self.close();
        let ts = self.last_ts_ns.unwrap_or(0);
        self.control(ts, END_OF_SESSION);
        self.packets
    }
}

/// What [`synthesize`] made.
#[derive(Debug, Clone)]
pub struct Synthesized {
    /// The downstream packets, in order.
    pub packets: Vec<FramedPacket>,
    /// What the encoder did.
    pub stats: EncoderStats,
    /// The last sequence number used (the messages are 1..=last_seq).
    pub last_seq: u64,
    /// The session's US Eastern midnight, ns since the UNIX epoch (the ITCH timestamps' base).
    pub midnight_ns: u64,
}

/// How [`synthesize`] frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthOptions {
    /// The MoldUDP64 session.
    pub session: Session,
    /// Largest packet, UDP payload bytes (default [`DEFAULT_MAX_PAYLOAD_BYTES`]).
    pub max_payload_bytes: usize,
    /// Heartbeat every this much idle time, ns; 0 = none (default [`DEFAULT_HEARTBEAT_INTERVAL_NS`]).
    pub heartbeat_interval_ns: u64,
    /// The session date (year, month, day) the ITCH timestamps count from; `None`: the UTC date of the first
    /// record's ts_recv.
    pub session_date: Option<(i32, u32, u32)>,
}

impl SynthOptions {
    /// The defaults for `session`.
    pub fn new(session: Session) -> SynthOptions {
        SynthOptions {
            session,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            heartbeat_interval_ns: DEFAULT_HEARTBEAT_INTERVAL_NS,
            session_date: None,
        }
    }
}

/// Encodes a DBN MBO file as ITCH 5.0 ([`ItchEncoder`]) framed in MoldUDP64 ([`MoldFramer`]) as `opts` say;
/// each message is paced by its record's ts_recv.
///
/// # Errors
/// The DBN reader's [`FeedError`] (naming the file and record); [`FeedError::Empty`] for a file without
/// records; [`FeedError::Open`] for a session date that is not a date after 1970.
pub fn synthesize(dbn: &Path, opts: &SynthOptions) -> Result<Synthesized, FeedError> {
    let mut stream = MboStream::open(dbn)?;
    let Some(first) = stream.next_msg()? else { return Err(FeedError::Empty { path: dbn.to_owned() }) };
    let (y, m, d) = opts.session_date.unwrap_or_else(|| utc_date(first.ts_recv));
    let midnight_ns = eastern_midnight_ns(y, m, d).ok_or_else(|| FeedError::Open {
        path: dbn.to_owned(),
        detail: format!("session date {y:04}-{m:02}-{d:02} is not a date after 1970"),
    })?;
    let mut enc = ItchEncoder::new(midnight_ns, stream.symbology());
    let mut framer = MoldFramer::new(opts.session, opts.max_payload_bytes, opts.heartbeat_interval_ns);
    let mut msg = Some(first);
    let mut last_ts = (first.ts_recv, first.hd.ts_event);
    while let Some(m) = msg {
        enc.encode(&m, &mut |b| framer.push(m.ts_recv, b));
        last_ts = (m.ts_recv, m.hd.ts_event);
        msg = stream.next_msg()?;
    }
    enc.finish(last_ts.1, &mut |b| framer.push(last_ts.0, b));
    let last_seq = framer.next_seq() - 1;
    Ok(Synthesized { packets: framer.finish(), stats: enc.stats().clone(), last_seq, midnight_ns })
}

/// The UTC calendar date of a UNIX time in ns (civil-from-days, H. Hinnant's algorithm).
fn utc_date(ts_ns: u64) -> (i32, u32, u32) {
    let z = (ts_ns / 86_400_000_000_000) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

/// Where the synthesised packets sit in the [`Capture`] handed to the player: line A's and line B's source
/// groups (never sent to; only names in the plan).
pub const SYNTH_GROUP_A: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(127, 0, 0, 1), 1);
/// Line B's source group of a synthesised capture.
pub const SYNTH_GROUP_B: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(127, 0, 0, 1), 2);

/// The player's capture of synthesised packets: each packet once for line A and, with `line_b`, once for B.
pub fn capture_of(packets: &[FramedPacket], line_b: bool) -> Capture {
    let mut c = Capture::default();
    for p in packets {
        for (on, dst) in [(true, SYNTH_GROUP_A), (line_b, SYNTH_GROUP_B)] {
            if on {
                c.packets.push(UdpPacket { ts_ns: p.ts_ns, src: dst, dst, payload: p.payload.clone() });
            }
        }
    }
    c
}

/// Knobs of the retransmission server (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetransmitOptions {
    /// Answer this many requests, then none (`None`: no limit).
    pub max_requests: Option<u64>,
    /// Stop answering once this sequence number was published (`None`: never).
    pub die_after_seq: Option<u64>,
}

/// Nasdaq TotalView-ITCH 5.0 over MoldUDP64: the packets pass through; seq = the packet's sequence number
/// (bytes 10..18, u64 BE); the recovery server is a [`MoldRetransmitServer`].
#[derive(Debug, Clone, Copy)]
pub struct MoldItch {
    /// The session (requests of another are not answered).
    pub session: Session,
    /// The server's largest answer packet, bytes.
    pub max_payload_bytes: usize,
    /// The server's knobs.
    pub retransmit: RetransmitOptions,
}

impl Feed for MoldItch {
    fn name(&self) -> &'static str {
        "itch-moldudp64"
    }

    fn seq(&self, payload: &[u8]) -> Option<u64> {
        let b: [u8; 8] = payload.get(10..18)?.try_into().ok()?;
        Some(u64::from_be_bytes(b))
    }

    fn seq_count(&self, payload: &[u8]) -> u64 {
        match payload.get(18..20) {
            Some(&[a, b]) if u16::from_be_bytes([a, b]) != END_OF_SESSION => u64::from(u16::from_be_bytes([a, b])),
            _ => 0,
        }
    }

    fn open_recovery(&self, cfg: &RecoveryConfig) -> Result<Box<dyn RecoveryServer>, SimError> {
        let s = MoldRetransmitServer::bind(cfg.addr, self.session, self.max_payload_bytes, self.retransmit, cfg.silent)
            .map_err(SimError::Recovery)?;
        Ok(Box::new(s))
    }
}

/// What the retransmission server counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetransmitCounters {
    /// Requests received (all).
    pub requests: u64,
    /// Requests answered (with at least one packet).
    pub answered: u64,
    /// Downstream packets sent in answers.
    pub packets_sent: u64,
    /// Messages sent in answers.
    pub messages_sent: u64,
    /// Requests not 20 bytes long, or with sequence number 0 or count 0.
    pub malformed: u64,
    /// Requests of another session.
    pub wrong_session: u64,
    /// Requests wholly beyond the last message published.
    pub beyond: u64,
    /// Requests not answered because the server is silent or stopped answering.
    pub refused: u64,
}

/// The MoldUDP64 retransmission server (module docs).
pub struct MoldRetransmitServer {
    sock: UdpSocket,
    session: Session,
    max_payload_bytes: usize,
    opts: RetransmitOptions,
    silent: bool,
    /// Message i (0-based) is sequence number i + 1: its bytes are `store[index[i]..index[i + 1]]`.
    store: Vec<u8>,
    index: Vec<usize>,
    dead: bool,
    counters: RetransmitCounters,
    answer: Vec<u8>,
}

impl MoldRetransmitServer {
    /// Binds `addr` (a loopback address; port 0 picks one, see [`MoldRetransmitServer::local_addr`]).
    ///
    /// # Errors
    /// `InvalidInput` for an address off loopback; the OS error of `bind`.
    pub fn bind(
        addr: SocketAddrV4,
        session: Session,
        max_payload_bytes: usize,
        opts: RetransmitOptions,
        silent: bool,
    ) -> std::io::Result<MoldRetransmitServer> {
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!("MoldUDP64 retransmission server address {addr}: only a loopback address (127.0.0.0/8)"),
            ));
        }
        let sock = UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        Ok(MoldRetransmitServer {
            sock,
            session,
            max_payload_bytes: max_payload_bytes.max(HEADER_BYTES + 2 + 50),
            opts,
            silent,
            store: Vec::new(),
            index: vec![0],
            dead: false,
            counters: RetransmitCounters::default(),
            answer: Vec::with_capacity(max_payload_bytes),
        })
    }

    /// The bound address.
    ///
    /// # Errors
    /// The OS error of `getsockname`.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// What was counted.
    pub fn counters(&self) -> RetransmitCounters {
        self.counters
    }

    /// The last sequence number published (0 before the first message).
    pub fn last_seq(&self) -> u64 {
        (self.index.len() - 1) as u64
    }

    /// Takes one published packet (a packet of another session, or malformed, is ignored).
    pub fn publish(&mut self, payload: &[u8]) {
        let Ok(p) = Packet::parse(payload) else { return };
        if p.session != self.session.0 || p.sequence_number != self.last_seq() + 1 {
            // Heartbeats, end of session, and packets the store already holds (or out of order: a feed that
            // numbers its own packets always publishes in order) add nothing.
            return;
        }
        for b in p.messages() {
            self.store.extend_from_slice(b.message);
            self.index.push(self.store.len());
        }
        if self.opts.die_after_seq.is_some_and(|s| self.last_seq() >= s) {
            self.dead = true;
        }
    }

    /// Handles one request from `from`; returns the packets sent.
    fn handle(&mut self, from: SocketAddr, req: &[u8]) -> std::io::Result<usize> {
        self.counters.requests += 1;
        let Ok(req) = <[u8; REQUEST_BYTES]>::try_from(req) else {
            self.counters.malformed += 1;
            return Ok(0);
        };
        if req[..10] != self.session.0 {
            self.counters.wrong_session += 1;
            return Ok(0);
        }
        let seq = u64::from_be_bytes(req[10..18].try_into().unwrap_or_default());
        let count = u16::from_be_bytes([req[18], req[19]]);
        if seq == 0 || count == 0 || count == END_OF_SESSION {
            self.counters.malformed += 1;
            return Ok(0);
        }
        if seq > self.last_seq() {
            self.counters.beyond += 1;
            return Ok(0);
        }
        let limit_hit = self.opts.max_requests.is_some_and(|n| self.counters.answered >= n);
        if self.silent || self.dead || limit_hit {
            self.counters.refused += 1;
            return Ok(0);
        }
        let last = (seq + u64::from(count.min(MAX_REQUEST_MESSAGES)) - 1).min(self.last_seq());
        let mut next = seq;
        let mut sent = 0;
        while next <= last {
            self.answer.clear();
            write_header(&mut self.answer, &self.session, next, 0);
            let mut n: u16 = 0;
            while next <= last {
                let i = (next - 1) as usize;
                let m = &self.store[self.index[i]..self.index[i + 1]];
                if n > 0 && self.answer.len() + 2 + m.len() > self.max_payload_bytes {
                    break;
                }
                self.answer.extend_from_slice(&(m.len() as u16).to_be_bytes());
                self.answer.extend_from_slice(m);
                n += 1;
                next += 1;
            }
            self.answer[18..20].copy_from_slice(&n.to_be_bytes());
            self.sock.send_to(&self.answer, from)?;
            sent += 1;
            self.counters.packets_sent += 1;
            self.counters.messages_sent += u64::from(n);
        }
        self.counters.answered += 1;
        Ok(sent)
    }
}

impl RecoveryServer for MoldRetransmitServer {
    fn published(&mut self, _seq: u64, payload: &[u8]) {
        self.publish(payload);
    }

    fn poll(&mut self, _now_ns: u64) -> std::io::Result<usize> {
        // Larger than a request: a longer datagram arrives cut to this and is counted as malformed.
        let mut buf = [0u8; 64];
        let mut sent = 0;
        loop {
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => sent += self.handle(from, &buf[..n])?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(sent),
                // A previous answer's ICMP port unreachable surfaces here on Linux; that requester is gone.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_date(0), (1970, 1, 1));
        assert_eq!(utc_date(1_703_548_799_446_821_072), (2023, 12, 25));
        assert_eq!(utc_date(951_782_400_000_000_000), (2000, 2, 29));
    }

    #[test]
    fn framing_packs_and_numbers() {
        let s = Session::new("TEST01").unwrap();
        let mut f = MoldFramer::new(s, 100, DEFAULT_HEARTBEAT_INTERVAL_NS);
        for i in 0..5u8 {
            f.push(10, &[b'x'; 30][..usize::from(i) + 26]);
        }
        f.push(3_000_000_010, b"late");
        let packets = f.finish();
        let parsed: Vec<(u64, u16, u64)> = packets
            .iter()
            .map(|p| {
                let q = Packet::parse(&p.payload).unwrap();
                assert!(p.payload.len() <= 100);
                (q.sequence_number, q.message_count, p.ts_ns)
            })
            .collect();
        // 26+2 and 27+2 fit in 100 with the header (20+28+29 = 77), the third (28+2) does not.
        assert_eq!(
            parsed,
            [
                (1, 2, 10),
                (3, 2, 10),
                (5, 1, 10),
                (6, 0, 1_000_000_010),
                (6, 0, 2_000_000_010),
                (6, 1, 3_000_000_010),
                (7, END_OF_SESSION, 3_000_000_010)
            ]
        );
        assert_eq!(&packets[0].payload[..10], b"TEST01    ");
    }

    #[test]
    fn sessions_are_checked() {
        assert!(Session::new("ELEVENCHARS").unwrap_err().contains("at most 10"));
        assert!(Session::new("caf\u{e9}").unwrap_err().contains("printable"));
    }
}
