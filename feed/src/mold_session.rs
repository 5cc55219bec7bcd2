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
//!   whole day). [`Start::FirstSeen`]: the first of [`SessionConfig::confirm_packets`] (N, default 3) packets
//!   at consecutive sequence numbers, each starting where the one before it ended, sets the next sequence
//!   number (a receiver that joins mid-session; what came before is not requested). Either line counts; the
//!   same packet on both lines counts once, so one stray packet (on one line or both) sets nothing. The
//!   packets before the start is set are held, not lost: they go out in order once it is.
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
//!   buffer of [`MAX_PACKET_BYTES`] (N - 1 of them, allocated at construction), it is counted
//!   ([`SessionCounters::jumps_held`]) and the stream goes on. It is taken only when N packets at consecutive
//!   sequence numbers from it on came (either line, or an answer; a copy of a held packet counts once: the
//!   same stray sent to both lines confirms nothing, nor do two strays when N is 3 or more; the stream really
//!   moved there, as after a long outage). Then they are processed in sequence order, as any
//!   packet past the highest known (the hole before them is requested and given up by the rules above), and
//!   the jump is counted ([`SessionCounters::jumps_taken`]). A packet within the window is processed as usual
//!   and leaves the held suspects alone; a suspect that does not continue the held ones replaces them (they
//!   are dropped: [`SessionCounters::jumps_dropped`]; a suspect longer than the buffer is counted
//!   [`SessionCounters::oversize`] and dropped; a heartbeat far ahead is dropped).
//! - **Copies compared.** Every message handed out leaves a hash of its bytes (`mdfan_arbiter::CopyHashes`, a
//!   window of `window_messages` sequence numbers); a later copy of it (the other line, an answer from the
//!   re-request server) with other bytes means one source carries what the venue did not send: counted
//!   ([`SessionCounters::copy_mismatches`]) and reported once per packet, after it
//!   ([`SessionEvent::CopyMismatch`], the lowest such sequence number). The message already went out, so its
//!   effect cannot be taken back: the caller treats it as a loss of unknown content. A copy that comes while the
//!   first still waits behind a hole is not compared.
//! - **End.** An end-of-session packet (count `0xFFFF`) says the next sequence number is the last + 1. It is
//!   held, not acted on alone: a datagram anyone on the multicast network can forge must not end the day. A
//!   message packet at or past its sequence number contradicts it (counted,
//!   [`SessionCounters::ends_contradicted`], and forgotten); once [`SessionConfig::end_confirm_ns`] of the
//!   caller's clock ([`SessionReceiver::tick`]) pass without one, it is taken. Then, once every message before it
//!   went out (or was given up), [`SessionEvent::EndOfSession`] is emitted once and later packets are ignored.
//!
//! The window, duplicates, hole reports and the jump guard are `mdfan_arbiter`'s (one arbiter for every feed:
//! a copy is a packet, its units the messages, positions the sequence numbers, each hole reported at once); this
//! module adds what is MoldUDP64's: the session, heartbeats, requests and retries, the end of session.
//!
//! Decisions depend only on the packets and the `now_ns` values given, so the machine is tested without
//! sockets. After construction nothing here allocates; nothing panics on any input.

use crate::moldudp64::{MoldError, Packet, PacketKind, HEADER_BYTES};
use mdfan_arbiter::{Arbiter, ArbiterConfig, CopyHashes, Event as ArbiterEvent, GapReports, Line, LineCopy};

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
    /// Messages that may wait behind a hole (slots allocated at construction; rounded up to a power of two).
    /// Default 65,536.
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
    /// N: packets at consecutive sequence numbers (each starting where the one before it ended; either line, the
    /// same packet on both lines counting once) that set the start under [`Start::FirstSeen`] or confirm a
    /// suspect jump. Default [`mdfan_arbiter::DEFAULT_CONFIRM_COPIES`] (3): two stray packets, or one stray sent
    /// to both lines, confirm nothing.
    pub confirm_packets: usize,
    /// How long an end-of-session packet waits, ns of the caller's clock (from the first [`SessionReceiver::tick`]
    /// after it), for a message packet at or past its sequence number that would contradict it, before it is
    /// taken (module docs, "End"). Longer than the gaps of a quiet stream; 0: taken at the next tick. Default 1 s
    /// (less than the `end_after_idle_ms` of the demos and tests, 2 s and more, so that the end comes first).
    pub end_confirm_ns: u64,
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
            confirm_packets: mdfan_arbiter::DEFAULT_CONFIRM_COPIES,
            end_confirm_ns: 1_000_000_000,
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
    /// A copy of message `seq`, already handed out, came again with other bytes (module docs, "Copies
    /// compared"): the message that went out may not be the venue's.
    CopyMismatch {
        /// The lowest such sequence number in the packet.
        seq: u64,
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
    /// Messages handed out whose later copy differed ([`SessionEvent::CopyMismatch`]).
    pub copy_mismatches: u64,
    /// End-of-session packets contradicted by a message packet at or past their sequence number before they were
    /// taken (module docs, "End"): forged, or stray.
    pub ends_contradicted: u64,
}

/// The arbitration engine a session uses: positions are MoldUDP64 sequence numbers, copies are downstream
/// packets, units their messages, the metadata the packet's receive time; the copies of a message compared.
type Engine = Arbiter<u64, u64, CopyHashes>;

impl Origin {
    fn line(self) -> Line {
        match self {
            Origin::LineA => Line::A,
            Origin::LineB => Line::B,
            Origin::Retransmission => Line::Recovery,
        }
    }
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

/// What the session counts itself (the rest comes from the engine's counters).
#[derive(Debug, Clone, Copy, Default)]
struct Own {
    packets: [u64; 3],
    heartbeats: u64,
    gaps: u64,
    requests: u64,
    retries: u64,
    foreign_session: u64,
    bad_packets: u64,
    ends_contradicted: u64,
}

/// An end-of-session packet not taken yet (module docs, "End").
#[derive(Debug, Clone, Copy)]
struct EndHeld {
    seq: u64,
    /// The first tick after it (the caller's clock).
    since_ns: Option<u64>,
}

/// The receiver. See the [module docs](self).
pub struct SessionReceiver {
    cfg: SessionConfig,
    session: Option<[u8; 10]>,
    engine: Engine,
    in_flight: Option<InFlight>,
    /// The end-of-session packet's sequence number, once taken.
    end_at: Option<u64>,
    /// An end-of-session packet waiting to be taken or contradicted.
    end_held: Option<EndHeld>,
    ended: bool,
    own: Own,
    /// `own` and the engine's counters, as of the last call.
    counters: SessionCounters,
}

impl std::fmt::Debug for SessionReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionReceiver")
            .field("next", &self.next_seq())
            .field("high", &self.engine.high())
            .field("waiting", &self.engine.waiting())
            .finish_non_exhaustive()
    }
}

/// The engine's events as the session's.
fn relay<'o>(out: &'o mut impl FnMut(SessionEvent<'_>)) -> impl FnMut(ArbiterEvent<'_, u64, u64>) + 'o {
    move |e| match e {
        ArbiterEvent::Data(c) => out(SessionEvent::Message {
            seq: c.pos,
            ts_recv_ns: c.meta,
            retransmitted: c.line == Line::Recovery,
            message: c.bytes,
        }),
        ArbiterEvent::Gap { first, last } => out(SessionEvent::Hole { first, last }),
        // Resets are off for a session (see `SessionReceiver::new`).
        ArbiterEvent::Reset { .. } => {}
    }
}

impl SessionReceiver {
    /// A receiver; allocates its window (`window_messages`, rounded up to a power of two, × (`slot_bytes` + 56)
    /// bytes; at least one slot) and the suspect-jump buffer ([`MAX_PACKET_BYTES`]).
    pub fn new(cfg: SessionConfig) -> SessionReceiver {
        let mut engine = Engine::with_checks(
            ArbiterConfig {
                window: cfg.window_messages,
                slot_bytes: cfg.slot_bytes,
                held_bytes: MAX_PACKET_BYTES,
                gap_reports: GapReports::EachRun,
                line_tolerance: None,
                gap_timeout_ns: None,
                held_joins_when_reached: false,
                confirm_copies: cfg.confirm_packets,
                // A new MoldUDP64 session is a new session (refused as foreign), never a reset of this one.
                resets: false,
            },
            CopyHashes::new(cfg.window_messages),
        );
        if cfg.start == Start::One {
            engine.start_at(1);
        }
        SessionReceiver {
            session: cfg.session,
            engine,
            in_flight: None,
            end_at: None,
            end_held: None,
            ended: false,
            own: Own::default(),
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
        self.engine.next().unwrap_or(0)
    }

    /// Whether messages are missing (a hole before the highest sequence number known).
    pub fn has_hole(&self) -> bool {
        self.engine.has_hole()
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
        let r = self.take_packet(payload, origin, ts_recv_ns, out);
        if let Some(seq) = self.engine.checks_mut().take_mismatch() {
            out(SessionEvent::CopyMismatch { seq });
        }
        self.sync_counters();
        r
    }

    fn take_packet(
        &mut self,
        payload: &[u8],
        origin: Origin,
        ts_recv_ns: u64,
        out: &mut impl FnMut(SessionEvent<'_>),
    ) -> Result<(), SessionError> {
        self.own.packets[origin as usize] += 1;
        let p = match Packet::parse(payload) {
            Ok(p) => p,
            Err(e) => {
                self.own.bad_packets += 1;
                return Err(e.into());
            }
        };
        match self.session {
            Some(s) if s != p.session => {
                self.own.foreign_session += 1;
                return Err(SessionError::ForeignSession { expected: s, got: p.session, seq: p.sequence_number });
            }
            Some(_) => {}
            None => self.session = Some(p.session),
        }
        if self.ended {
            return Ok(());
        }
        // Under `Start::FirstSeen` the first `confirm_packets` consecutive packets set the start (the engine's rule).
        let copy = LineCopy { pos: p.sequence_number, line: origin.line(), meta: ts_recv_ns, bytes: payload };
        let units = match p.kind() {
            PacketKind::Messages => u64::from(p.message_count),
            PacketKind::Heartbeat | PacketKind::EndOfSession => 0,
        };
        let (own, end_held) = (&mut self.own, &mut self.end_held);
        self.engine.offer_units(copy, units, ts_recv_ns, out, |engine, c, held, out| {
            // The copy offered now was parsed above; a held one is parsed again (it parsed when it was held).
            let parsed;
            let packet = if held {
                let Ok(h) = Packet::parse(c.bytes) else { return };
                parsed = h;
                &parsed
            } else {
                &p
            };
            process(engine, packet, c.line, c.meta, own, end_held, out);
        });
        self.check_end(out);
        Ok(())
    }

    /// Timers: asks for the oldest hole, asks again after a timeout, gives it up after the last retry. Call it
    /// after each batch of packets and when idle.
    pub fn tick(&mut self, now_ns: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        self.run_timers(now_ns, out);
        if let Some(h) = self.end_held.as_mut() {
            let since = *h.since_ns.get_or_insert(now_ns);
            if now_ns.saturating_sub(since) >= self.cfg.end_confirm_ns {
                self.end_at = Some(h.seq);
                self.end_held = None;
                self.check_end(out);
            }
        }
        self.sync_counters();
    }

    fn run_timers(&mut self, now_ns: u64, out: &mut impl FnMut(SessionEvent<'_>)) {
        while self.has_hole() && !self.ended {
            let first = self.next_seq();
            match self.in_flight {
                Some(f) if first < f.end && now_ns.saturating_sub(f.sent_ns) < self.cfg.request_timeout_ns => {
                    return; // waiting for the answer
                }
                Some(f) if first < f.end && self.cfg.requests && (first != f.seq || f.attempt <= self.cfg.retries) => {
                    // Timed out: ask again for what the span still misses. Progress since the last try (an answer
                    // that filled its first hole) restarts the tries.
                    let attempt = if first == f.seq { f.attempt + 1 } else { 1 };
                    if attempt > 1 {
                        self.own.retries += 1;
                    }
                    let count = u16::try_from(f.end - first).unwrap_or(u16::MAX);
                    self.request(first, count, f.end, attempt, now_ns, out);
                    return;
                }
                Some(f) if first < f.end => {
                    // The last try timed out: give up what the span still misses and go on after it.
                    self.in_flight = None;
                    self.engine.give_up_to(f.end, &mut relay(out));
                    self.check_end(out);
                }
                _ => {
                    let span = self.engine.high().unwrap_or(first) - first;
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
        self.own.requests += 1;
        self.in_flight = Some(InFlight { seq, end, sent_ns: now_ns, attempt });
        out(SessionEvent::Request { packet, seq, count, attempt });
    }

    fn check_end(&mut self, out: &mut impl FnMut(SessionEvent<'_>)) {
        if let Some(end) = self.end_at {
            if !self.ended && self.next_seq() >= end && !self.has_hole() {
                self.ended = true;
                self.in_flight = None;
                out(SessionEvent::EndOfSession { next_seq: self.next_seq() });
            }
        }
    }

    fn sync_counters(&mut self) {
        let (o, e) = (&self.own, self.engine.counters());
        self.counters = SessionCounters {
            packets: o.packets,
            heartbeats: o.heartbeats,
            messages: e.delivered[0] + e.delivered[1] + e.recovery_delivered,
            retransmitted_messages: e.recovery_delivered,
            duplicates: e.duplicates + e.late,
            gaps: o.gaps,
            requests: o.requests,
            retries: o.retries,
            given_up_holes: e.gap_events,
            given_up_messages: e.gap_seqs,
            overflow_holes: e.gap_overflows,
            oversize: e.oversize,
            foreign_session: o.foreign_session,
            bad_packets: o.bad_packets,
            jumps_held: e.jumps_held,
            jumps_taken: e.jumps_taken,
            jumps_dropped: e.jumps_dropped,
            copy_mismatches: self.engine.checks().mismatches(),
            ends_contradicted: o.ends_contradicted,
        };
    }
}

/// Acts on a parsed packet of this session (the rules of the module docs but the jump guard, which the engine
/// applied): its header raises the highest sequence number known, its messages are placed.
fn process(
    engine: &mut Engine,
    p: &Packet<'_>,
    line: Line,
    ts_recv_ns: u64,
    own: &mut Own,
    end_held: &mut Option<EndHeld>,
    out: &mut impl FnMut(SessionEvent<'_>),
) {
    let seq = p.sequence_number;
    match p.kind() {
        PacketKind::Heartbeat => {
            own.heartbeats += 1;
            own.gaps += u64::from(engine.raise_high(seq, seq));
        }
        PacketKind::EndOfSession => {
            own.gaps += u64::from(engine.raise_high(seq, seq));
            // held until confirmed (module docs, "End"); another copy of the same end changes nothing
            if end_held.is_none_or(|h| h.seq != seq) {
                *end_held = Some(EndHeld { seq, since_ns: None });
            }
        }
        PacketKind::Messages => {
            if end_held.is_some_and(|h| p.next_sequence_number() > h.seq) {
                // a message at or past the end's sequence number: the end was not the venue's
                own.ends_contradicted += 1;
                *end_held = None;
            }
            own.gaps += u64::from(engine.raise_high(seq, p.next_sequence_number()));
            let out = &mut relay(out);
            for b in p.messages() {
                engine.place(LineCopy { pos: b.sequence_number, line, meta: ts_recv_ns, bytes: b.message }, out);
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
