//! A MoldUDP64 session receiver (sans I/O): downstream packets in, messages out in sequence order, gaps filled
//! by retransmission requests or reported as holes.
//!
//! Source: Nasdaq "MoldUDP64 Protocol Specification" version 1.00: "Downstream Packets" (session, sequence
//! number, message count; heartbeat = count 0, end of session = count `0xFFFF`) and "Request Packets" (a request
//! is session, 10 bytes + sequence number u64 BE + requested message count u16 BE, sent to the session's
//! re-request server, which answers with ordinary downstream packets).
//!
//! ## Rules
//!
//! - **Start.** [`Start::One`]: the first message expected is sequence number 1 (a receiver that must see the
//!   whole day). [`Start::FirstSeen`]: the first packet seen (a heartbeat too) sets the next sequence number
//!   (a receiver that joins mid-session; what came before is not requested).
//! - **Session.** The first packet's session is the session, unless [`SessionConfig::session`] names it. A
//!   packet of another session is counted ([`SessionCounters::foreign_session`]), dropped, and refused with
//!   [`SessionError::ForeignSession`]. A packet whose message count disagrees with its bytes is counted
//!   ([`SessionCounters::bad_packets`]), dropped, and refused with [`SessionError::Malformed`] (the
//!   [`MoldError`] names the sequence number, the message and the field). Neither ever panics.
//! - **In order.** Messages go out in sequence order, each once ([`SessionEvent::Message`]). A message at or
//!   below the last one handed out, or one already waiting, is a duplicate (a second line, or a second answer):
//!   counted ([`SessionCounters::duplicates`]) and dropped.
//! - **Gaps.** A packet (or heartbeat, whose sequence number is the next one expected) past the highest sequence
//!   number known opens a gap ([`SessionCounters::gaps`]). Messages beyond it wait in a window of
//!   [`SessionConfig::window_messages`] slots of [`SessionConfig::slot_bytes`] bytes each, allocated at
//!   construction. A message that would not fit in the window (its sequence number is `window_messages` or more
//!   past the next expected) first gives up the oldest missing messages, as few as make room
//!   ([`SessionCounters::overflow_holes`]): those holes are reported, never dropped silently. A message longer
//!   than `slot_bytes` that has to wait is counted ([`SessionCounters::oversize`]) and treated as not received.
//! - **Requests.** [`SessionReceiver::tick`] asks for the span from the oldest hole to the highest sequence
//!   number known ([`SessionEvent::Request`]: the 20-byte request packet; at most
//!   [`SessionConfig::max_request_messages`] messages per request), so one answer fills every hole in it (the
//!   messages already held come back as counted duplicates). While the oldest hole has not moved after
//!   [`SessionConfig::request_timeout_ns`], what the span still misses is asked for again, up to
//!   [`SessionConfig::retries`] times ([`SessionCounters::retries`]); an answer that fills the oldest hole
//!   restarts the tries for the rest of the span. After the timeout of the last try every hole left in the span
//!   is given up: one [`SessionEvent::Hole`] each (first and last sequence number), counted in
//!   [`SessionCounters::given_up_holes`] and [`SessionCounters::given_up_messages`], and the messages after it
//!   go out; the next span is asked for at once. A dead re-request server therefore costs a timeout times
//!   (retries + 1) per span of up to `max_request_messages`, not per hole. With [`SessionConfig::requests`] off
//!   (no re-request server) no request is made: a span waits one timeout (for the other line) and its holes are
//!   then given up.
//! - **Jumps.** A packet (heartbeat and end of session too) whose sequence number is `window_messages` or more
//!   past the highest sequence number known (one past it, after the messages handed out or waiting) is a
//!   *suspect jump*: one stray datagram (a wrong sequence number, a replay of another day) must not open a hole
//!   of billions of messages. The bound is the window because a packet that far ahead could not wait in it
//!   anyway (it would give up everything before it). A suspect is not acted on: its bytes are copied into one
//!   buffer of [`MAX_PACKET_BYTES`] allocated at construction, it is counted ([`SessionCounters::jumps_held`])
//!   and the stream goes on. It is taken only when a second packet confirms it: another packet (either line, or
//!   an answer) also that far ahead, whose sequence number is within `window_messages` of the held one (the
//!   stream really moved there, as after a long outage). Then both are processed in sequence order, as any
//!   packet past the highest known (the hole before them is requested and given up by the rules above), and
//!   the jump is counted ([`SessionCounters::jumps_taken`]). A packet within the window is processed as usual
//!   and leaves the held suspect alone; a suspect that does not confirm the held one replaces it (the old one
//!   is dropped: [`SessionCounters::jumps_dropped`]; so is a suspect longer than the buffer). Under
//!   [`Start::FirstSeen`] the first packet sets the stream's start and is never a suspect.
//! - **End.** An end-of-session packet (count `0xFFFF`) says the next sequence number is the last + 1; once
//!   every message before it went out (or was given up), [`SessionEvent::EndOfSession`] is emitted once and
//!   later packets are ignored.
//!
//! Decisions depend only on the packets and the `now_ns` values given, so the machine is tested without
//! sockets. After construction nothing here allocates; nothing panics on any input.

use crate::moldudp64::{MoldError, Packet, PacketKind, HEADER_BYTES};

/// Bytes of a MoldUDP64 request packet: session (10) + sequence number (8) + message count (2).
pub const REQUEST_BYTES: usize = 20;

/// Largest suspect-jump packet held, bytes (a UDP payload is at most 65,507 bytes over IPv4).
pub const MAX_PACKET_BYTES: usize = 65_536;

/// Where the receiver starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At sequence number 1: everything from the session's start is expected (and requested if missing).
    One,
    /// At the first packet seen.
    FirstSeen,
}

/// How a [`SessionReceiver`] behaves.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Where the stream starts. Default [`Start::FirstSeen`].
    pub start: Start,
    /// The session (10 ASCII bytes, space-padded); `None` (default): the first packet's.
    pub session: Option<[u8; 10]>,
    /// Messages that may wait behind a hole (slots allocated at construction). Default 65,536.
    pub window_messages: usize,
    /// Largest message a slot holds, bytes. Default 64 (every ITCH 5.0 message is at most 50).
    pub slot_bytes: usize,
    /// Whether requests are made (a re-request server is configured). Default true.
    pub requests: bool,
    /// How long a request waits for its answer before it is sent again (or, after the last, the hole is given
    /// up), ns of the caller's clock. Default 50 ms.
    pub request_timeout_ns: u64,
    /// Requests sent again after the first times out. Default 3.
    pub retries: u32,
    /// Most messages one request asks for. Default 1,000.
    pub max_request_messages: u16,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            start: Start::FirstSeen,
            session: None,
            window_messages: 65_536,
            slot_bytes: 64,
            requests: true,
            request_timeout_ns: 50_000_000,
            retries: 3,
            max_request_messages: 1_000,
        }
    }
}

/// Where a packet came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Line A (downstream multicast).
    LineA,
    /// Line B.
    LineB,
    /// An answer of the re-request server.
    Retransmission,
}

/// What the receiver hands its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent<'a> {
    /// The next message, in sequence order.
    Message {
        /// Its MoldUDP64 sequence number.
        seq: u64,
        /// The receive time of the packet that carried it (the caller's clock or stamp), ns.
        ts_recv_ns: u64,
        /// Whether it came from the re-request server.
        retransmitted: bool,
        /// The message bytes (after the length), borrowed for the callback's duration.
        message: &'a [u8],
    },
    /// Send this request packet to the re-request server.
    Request {
        /// The request: session, sequence number u64 BE, message count u16 BE.
        packet: [u8; REQUEST_BYTES],
        /// First sequence number asked for.
        seq: u64,
        /// Messages asked for.
        count: u16,
        /// 1 for the first try, 2 for the first retry, ...
        attempt: u32,
    },
    /// Messages `first..=last` were given up (retries exhausted, or no room to wait): never delivered. The next
    /// `Message`, if any, has seq `last + 1` or more.
    Hole {
        /// First sequence number lost.
        first: u64,
        /// Last sequence number lost.
        last: u64,
    },
    /// The session ended (end-of-session packet) and every message before it went out or was given up.
    EndOfSession {
        /// The sequence number after the last message.
        next_seq: u64,
    },
}

/// Why a packet was refused (counted and dropped; the receiver goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The packet's bytes disagree with its header (message count, lengths).
    #[error("{0}")]
    Malformed(#[from] MoldError),
    /// The packet belongs to another session.
    #[error(
        "MoldUDP64 packet seq {seq}, field session: {:?} is not this receiver's session {:?}",
        String::from_utf8_lossy(got),
        String::from_utf8_lossy(expected)
    )]
    ForeignSession {
        /// The receiver's session.
        expected: [u8; 10],
        /// The packet's.
        got: [u8; 10],
        /// The packet's sequence number.
        seq: u64,
    },
}

/// What the receiver counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// Packets offered, by origin (line A, line B, retransmission), refused ones included.
    pub packets: [u64; 3],
    /// Heartbeats (count 0) among them.
    pub heartbeats: u64,
    /// Messages handed out.
    pub messages: u64,
    /// Of those, messages that came from the re-request server.
    pub retransmitted_messages: u64,
    /// Copies of messages already handed out or waiting: dropped.
    pub duplicates: u64,
    /// Gaps opened (a packet past the highest sequence number known).
    pub gaps: u64,
    /// Request packets emitted, retries included.
    pub requests: u64,
    /// Of those, retries (the same hole asked for again after a timeout).
    pub retries: u64,
    /// Holes given up ([`SessionEvent::Hole`] events), overflow holes included.
    pub given_up_holes: u64,
    /// Messages in those holes.
    pub given_up_messages: u64,
    /// Holes given up because a message did not fit in the window.
    pub overflow_holes: u64,
    /// Messages longer than a slot that had to wait: dropped (the hole stays).
    pub oversize: u64,
    /// Packets of another session: dropped.
    pub foreign_session: u64,
    /// Packets whose message count disagrees with their bytes: dropped.
    pub bad_packets: u64,
    /// Suspect jumps held: packets `window_messages` or more past the highest sequence number known, not acted
    /// on until a second one confirms them (see the module docs).
    pub jumps_held: u64,
    /// Suspect jumps taken: a held packet confirmed by a second one and processed with it.
    pub jumps_taken: u64,
    /// Held suspects dropped: replaced by a suspect that did not confirm them, or longer than
    /// [`MAX_PACKET_BYTES`].
    pub jumps_dropped: u64,
}

/// A message waiting behind a hole.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Its sequence number; `u64::MAX` when empty.
    seq: u64,
    len: u16,
    retransmitted: bool,
    ts_recv_ns: u64,
}

const EMPTY: u64 = u64::MAX;

/// The suspect jump held: its packet is `held[..len]`.
#[derive(Debug, Clone, Copy)]
struct Suspect {
    /// Its first sequence number.
    seq: u64,
    len: usize,
    origin: Origin,
    ts_recv_ns: u64,
}

/// The request in flight: the span `seq..end` from the oldest hole.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    /// `next` when it was sent.
    seq: u64,
    /// One past the last sequence number the span asks for.
    end: u64,
    sent_ns: u64,
    attempt: u32,
}

/// The receiver. See the [module docs](self).
pub struct SessionReceiver {
    cfg: SessionConfig,
    session: Option<[u8; 10]>,
    /// Next sequence number to hand out; 0 before the first packet under [`Start::FirstSeen`].
    next: u64,
    /// One past the highest sequence number known to exist.
    high: u64,
    slots: Box<[Slot]>,
    bytes: Box<[u8]>,
    /// Messages waiting.
    waiting: usize,
    in_flight: Option<InFlight>,
    /// The end-of-session packet's sequence number, once seen.
    end_at: Option<u64>,
    ended: bool,
    /// The buffer of the suspect jump held ([`MAX_PACKET_BYTES`], allocated at construction).
    held: Box<[u8]>,
    suspect: Option<Suspect>,
    counters: SessionCounters,
}

impl std::fmt::Debug for SessionReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionReceiver")
            .field("next", &self.next)
            .field("high", &self.high)
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

impl SessionReceiver {
    /// A receiver; allocates its window (`window_messages` × (`slot_bytes` + 32) bytes; at least one slot) and
    /// the suspect-jump buffer ([`MAX_PACKET_BYTES`]).
    pub fn new(cfg: SessionConfig) -> SessionReceiver {
        let window = cfg.window_messages.max(1);
        let empty = Slot { seq: EMPTY, len: 0, retransmitted: false, ts_recv_ns: 0 };
        let next = if cfg.start == Start::One { 1 } else { 0 };
        SessionReceiver {
            session: cfg.session,
            next,
            high: next,
            slots: vec![empty; window].into_boxed_slice(),
            bytes: vec![0; window * cfg.slot_bytes].into_boxed_slice(),
            waiting: 0,
            in_flight: None,
            end_at: None,
            ended: false,
            held: vec![0; MAX_PACKET_BYTES].into_boxed_slice(),
            suspect: None,
            counters: SessionCounters::default(),
            cfg,
        }
    }

    /// What was counted.
    pub fn counters(&self) -> &SessionCounters {
        &self.counters
    }

    /// The session, once known.
    pub fn session(&self) -> Option<[u8; 10]> {
        self.session
    }

    /// The next sequence number to hand out (0 before the first packet under [`Start::FirstSeen`]).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Whether messages are missing (a hole before the highest sequence number known).
    pub fn has_hole(&self) -> bool {
        self.next != 0 && self.next < self.high
    }

    /// Whether [`SessionEvent::EndOfSession`] was emitted.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Takes one downstream packet (a line's, or an answer of the re-request server) received at `ts_recv_ns`;
    /// hands out what is now in order.
    ///
    /// # Errors
    /// [`SessionError`]: the packet is counted and dropped; the receiver's state is unchanged.
    pub fn on_packet(
        &mut self,
        payload: &[u8],
        origin: Origin,
        ts_recv_ns: u64,
        out: &mut impl FnMut(SessionEvent<'_>),
    ) -> Result<(), SessionError> {
        self.counters.packets[origin as usize] += 1;
        let p = match Packet::parse(payload) {
            Ok(p) => p,
            Err(e) => {
                self.counters.bad_packets += 1;
                return Err(e.into());
            }
        };
        match self.session {
            Some(s) if s != p.session => {
                self.counters.foreign_session += 1;
                return Err(SessionError::ForeignSession { expected: s, got: p.session, seq: p.sequence_number });
            }
            Some(_) => {}
            None => self.session = Some(p.session),
        }
        if self.ended {
            return Ok(());
        }
        if self.next == 0 {
            self.next = p.sequence_number.max(1);
            self.high = self.next;
        }
        let window = self.slots.len() as u64;
        if p.sequence_number.saturating_sub(self.high) >= window {
            match self.suspect {
                Some(h) if h.seq.abs_diff(p.sequence_number) < window => {
                    // Confirmed: the stream moved there. Both packets, in sequence order.
                    self.suspect = None;
                    self.counters.jumps_taken += 1;
                    let held = std::mem::take(&mut self.held);
                    if let Ok(hp) = Packet::parse(&held[..h.len]) {
                        if h.seq <= p.sequence_number {
                            self.process(&hp, h.origin, h.ts_recv_ns, out);
                            self.process(&p, origin, ts_recv_ns, out);
                        } else {
                            self.process(&p, origin, ts_recv_ns, out);
                            self.process(&hp, h.origin, h.ts_recv_ns, out);
                        }
                    }
                    self.held = held;
                }
                old => {
                    if old.is_some() {
                        self.counters.jumps_dropped += 1;
                    }
                    self.counters.jumps_held += 1;
                    if payload.len() <= self.held.len() {
                        self.held[..payload.len()].copy_from_slice(payload);
                        let seq = p.sequence_number;
                        self.suspect = Some(Suspect { seq, len: payload.len(), origin, ts_recv_ns });
                    } else {
                        self.suspect = None;
                        self.counters.jumps_dropped += 1;
                    }
                    return Ok(());
                }
            }
        } else {
            self.process(&p, origin, ts_recv_ns, out);
        }
        self.check_end(out);
        Ok(())
    }

    /// Acts on a parsed packet of this session (the rules of the module docs but the jump guard).
    fn process(&mut self, p: &Packet<'_>, origin: Origin, ts_recv_ns: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        if self.ended {
            return;
        }
        let retransmitted = origin == Origin::Retransmission;
        match p.kind() {
            PacketKind::Heartbeat => {
                self.counters.heartbeats += 1;
                self.raise_high(p.sequence_number, p.sequence_number);
            }
            PacketKind::EndOfSession => {
                self.raise_high(p.sequence_number, p.sequence_number);
                self.end_at = Some(p.sequence_number);
            }
            PacketKind::Messages => {
                self.raise_high(p.sequence_number, p.next_sequence_number());
                for b in p.messages() {
                    self.offer(b.sequence_number, b.message, retransmitted, ts_recv_ns, out);
                }
            }
        }
    }

    /// Timers: asks for the oldest hole, asks again after a timeout, gives it up after the last retry. Call it
    /// after each batch of packets and when idle.
    pub fn tick(&mut self, now_ns: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        while self.has_hole() && !self.ended {
            let first = self.next;
            match self.in_flight {
                Some(f) if first < f.end && now_ns.saturating_sub(f.sent_ns) < self.cfg.request_timeout_ns => {
                    return; // waiting for the answer
                }
                Some(f) if first < f.end && self.cfg.requests && (first != f.seq || f.attempt <= self.cfg.retries) => {
                    // Timed out: ask again for what the span still misses. Progress since the last try (an answer
                    // that filled its first hole) restarts the tries.
                    let attempt = if first == f.seq { f.attempt + 1 } else { 1 };
                    if attempt > 1 {
                        self.counters.retries += 1;
                    }
                    let count = u16::try_from(f.end - first).unwrap_or(u16::MAX);
                    self.request(first, count, f.end, attempt, now_ns, out);
                    return;
                }
                Some(f) if first < f.end => {
                    // The last try timed out: give up what the span still misses and go on after it.
                    self.in_flight = None;
                    self.advance_to(f.end, out);
                    self.check_end(out);
                }
                _ => {
                    let span = self.high - first;
                    let count = u16::try_from(span).unwrap_or(u16::MAX).min(self.cfg.max_request_messages.max(1));
                    let end = first + u64::from(count);
                    if self.cfg.requests {
                        self.request(first, count, end, 1, now_ns, out);
                    } else {
                        self.in_flight = Some(InFlight { seq: first, end, sent_ns: now_ns, attempt: 1 });
                    }
                    return;
                }
            }
        }
        if !self.has_hole() {
            self.in_flight = None;
        }
    }

    fn request(
        &mut self,
        seq: u64,
        count: u16,
        end: u64,
        attempt: u32,
        now_ns: u64,
        out: &mut impl FnMut(SessionEvent<'_>),
    ) {
        let Some(session) = self.session else { return };
        let packet = request_packet(session, seq, count);
        self.counters.requests += 1;
        self.in_flight = Some(InFlight { seq, end, sent_ns: now_ns, attempt });
        out(SessionEvent::Request { packet, seq, count, attempt });
    }

    fn raise_high(&mut self, first: u64, end: u64) {
        if first > self.high {
            self.counters.gaps += 1;
        }
        self.high = self.high.max(end);
    }

    fn slot_index(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[self.slot_index(seq)]
    }

    fn offer(
        &mut self,
        seq: u64,
        message: &[u8],
        retransmitted: bool,
        ts_recv_ns: u64,
        out: &mut impl FnMut(SessionEvent<'_>),
    ) {
        if seq < self.next {
            self.counters.duplicates += 1;
            return;
        }
        if seq == self.next {
            self.deliver(seq, message, retransmitted, ts_recv_ns, out);
            self.drain(out);
            return;
        }
        let window = self.slots.len() as u64;
        if seq - self.next >= window {
            // No room to wait: give up the oldest missing messages until this one fits.
            self.counters.overflow_holes += 1;
            self.advance_to(seq - window + 1, out);
            if seq == self.next {
                self.deliver(seq, message, retransmitted, ts_recv_ns, out);
                self.drain(out);
                return;
            }
        }
        let i = self.slot_index(seq);
        if self.slots[i].seq == seq {
            self.counters.duplicates += 1;
            return;
        }
        let (sb, Ok(len)) = (self.cfg.slot_bytes, u16::try_from(message.len())) else {
            self.counters.oversize += 1;
            return;
        };
        if message.len() > sb {
            self.counters.oversize += 1;
            return;
        }
        self.bytes[i * sb..i * sb + message.len()].copy_from_slice(message);
        self.slots[i] = Slot { seq, len, retransmitted, ts_recv_ns };
        self.waiting += 1;
    }

    fn deliver(
        &mut self,
        seq: u64,
        message: &[u8],
        retransmitted: bool,
        ts_recv_ns: u64,
        out: &mut impl FnMut(SessionEvent<'_>),
    ) {
        self.counters.messages += 1;
        if retransmitted {
            self.counters.retransmitted_messages += 1;
        }
        self.next = seq + 1;
        self.high = self.high.max(self.next);
        out(SessionEvent::Message { seq, ts_recv_ns, retransmitted, message });
    }

    /// Hands out the waiting messages that are now in order.
    fn drain(&mut self, out: &mut impl FnMut(SessionEvent<'_>)) {
        while self.waiting > 0 {
            let i = self.slot_index(self.next);
            let s = self.slots[i];
            if s.seq != self.next {
                return;
            }
            self.slots[i].seq = EMPTY;
            self.waiting -= 1;
            let sb = self.cfg.slot_bytes;
            self.counters.messages += 1;
            if s.retransmitted {
                self.counters.retransmitted_messages += 1;
            }
            self.next += 1;
            let message = &self.bytes[i * sb..i * sb + usize::from(s.len)];
            out(SessionEvent::Message {
                seq: s.seq,
                ts_recv_ns: s.ts_recv_ns,
                retransmitted: s.retransmitted,
                message,
            });
        }
    }

    /// Moves `next` up to `target`: waiting messages go out, missing runs are given up. Every waiting message
    /// lies within a window of `next`, so each scan is bounded by the window.
    fn advance_to(&mut self, target: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        let window = self.slots.len() as u64;
        while self.next < target {
            if self.waiting == 0 {
                self.give_up(self.next, target, out);
                break;
            }
            if self.slot(self.next).seq == self.next {
                self.drain(out);
                continue;
            }
            let first = self.next;
            let limit = first.saturating_add(window).min(target);
            let mut end = first;
            while end < limit && self.slot(end).seq != end {
                end += 1;
            }
            self.give_up(first, end, out);
        }
        self.drain(out);
    }

    /// Reports `first..end` as lost and moves past it.
    fn give_up(&mut self, first: u64, end: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        if end <= first {
            return;
        }
        self.counters.given_up_holes += 1;
        self.counters.given_up_messages += end - first;
        self.next = end;
        self.high = self.high.max(end);
        out(SessionEvent::Hole { first, last: end - 1 });
    }

    fn check_end(&mut self, out: &mut impl FnMut(SessionEvent<'_>)) {
        if let Some(end) = self.end_at {
            if !self.ended && self.next >= end && !self.has_hole() {
                self.ended = true;
                self.in_flight = None;
                out(SessionEvent::EndOfSession { next_seq: self.next });
            }
        }
    }
}

/// A request packet: `session`, first sequence number and message count, big-endian (spec "Request Packets").
pub fn request_packet(session: [u8; 10], seq: u64, count: u16) -> [u8; REQUEST_BYTES] {
    let mut p = [0u8; REQUEST_BYTES];
    p[..10].copy_from_slice(&session);
    p[10..18].copy_from_slice(&seq.to_be_bytes());
    p[18..20].copy_from_slice(&count.to_be_bytes());
    p
}

/// Reads a request packet: (session, sequence number, message count), or `None` if it is not 20 bytes.
pub fn parse_request(packet: &[u8]) -> Option<([u8; 10], u64, u16)> {
    if packet.len() != REQUEST_BYTES {
        return None;
    }
    let session: [u8; 10] = packet.get(..10)?.try_into().ok()?;
    let seq = u64::from_be_bytes(packet.get(10..18)?.try_into().ok()?);
    let count = u16::from_be_bytes(packet.get(18..20)?.try_into().ok()?);
    Some((session, seq, count))
}

const _: () = assert!(REQUEST_BYTES == HEADER_BYTES);
