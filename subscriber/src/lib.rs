//! mdfan-subscriber: the library a strategy embeds to receive records from an mdfan publisher.
//!
//! ```no_run
//! use mdfan_subscriber::{Books, Event, Health, IdleStrategy, Idler, Kind, Subscriber, SubscriberConfig};
//!
//! mdfan_subscriber::pin_current_thread(0)?; // a core of its own (not the publisher's hot_core): it never sleeps
//! let mut sub = Subscriber::connect(&SubscriberConfig::new("127.0.0.1:7700", "my-strategy"))?;
//! let (mut books, mut idler, mut done) = (Books::new(), Idler::new(IdleStrategy::BusySpin), false);
//! while !done {
//!     let n = sub.poll(256, |event| match event {
//!         Event::Record(r) if r.kind() == Some(Kind::EndOfStream) => done = true,
//!         Event::Record(r) => {
//!             let _ = books.apply(r); // borrowed in place from the ring
//!             if r.is_last() {
//!                 // the venue's event is complete: the book is consistent, read the BBO now
//!                 let _bbo = books.get(r.instrument_id).map(|b| b.bbo());
//!             }
//!         }
//!         Event::Gap { expected, got } => eprintln!("gap: expected seq {expected}, got {got}"),
//!         Event::Closed(_) => done = true,
//!         Event::Stale { .. } | Event::Corrupt { .. } => {}
//!     });
//!     idler.idle(n); // PAUSE when nothing came
//!     if let Some(Health::Gone) = sub.maintain_if_due() {
//!         break; // the publisher ended the session (sub.bye() says why) or vanished
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/bbo.rs` is this loop as a program. On a hot path, [`HotBooks`] is a drop-in for [`Books`] (the same
//! results, record for record) that allocates everything in [`HotBooks::with_capacity`] and nothing per record.
//!
//! [`Subscriber::poll`] busy-polls the ring's CQ once per call and hands each record to the callback, borrowed
//! from ring memory (no copy); the slot is released to the publisher after the callback returns. Every jump in
//! seq is reported as [`Event::Gap`] before the record that follows it, never skipped silently. `poll` makes no
//! syscall and allocates nothing; [`Subscriber::maintain`] (control socket, snapshot requests, liveness) makes
//! syscalls: call it through [`Subscriber::maintain_if_due`], which runs it at most once per millisecond.
//!
//! # What a strategy sees
//!
//! - Normal: `Record`s with seq 1, 2, 3, ... (heartbeats included when the feed is idle), then the
//!   `EndOfStream` record and `Closed(EndOfStream)`.
//! - Policy `resync`, after falling a ring behind: `Gap { expected, got }`, then live records (the book is
//!   stale from here); [`Subscriber::maintain`] asks for a snapshot; then `SnapshotBegin` (empty every book),
//!   per instrument a `Clear` and its resting orders as `Add`s, `SnapshotEnd`, the feed records since the
//!   snapshot, and the live stream: the book is exact again from `SnapshotEnd` on.
//! - Policy `disconnect`: what was written before the drop, then `Closed(RingFull)`.
//! - Policy `block`: never a gap; the publisher waits (up to its stall timeout) for this subscriber.
//! - A dead or silent publisher: [`Subscriber::maintain`] returns [`Health::Silent`] after the silence
//!   timeout and [`Health::Gone`] once the control connection is closed; [`Subscriber::reconnect`] then makes a
//!   new session (seq restarts at 1; drop your books: a snapshot or the replay from the start follows).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod latency;
pub mod receiver;
pub mod report;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use mdfan_fabric::PreparedLocalRing;
use mdfan_wire::control::{self, ControlMsg, SnapshotRequest, Subscribe};

pub use latency::{ClockSource, Latency};
pub use receiver::{Event, Receiver, StreamStats};

// What a strategy needs besides this crate's own types, so one dependency is enough.
pub use mdfan_fabric::{AnyLocalRing, CloseReason, FabricConfig, Provider};
pub use mdfan_tuning::{allowed_cores, pin_current_thread, IdleStrategy, Idler};
pub use mdfan_wire::control::{Bye, SlowConsumerPolicy};
pub use mdfan_wire::record::format_price_e9;
pub use mdfan_wire::{
    Book, BookCapacity, BookError, BookUpdate, Books, HotBook, HotBooks, Kind, Level, LevelIter, RestingOrder, Side,
};

/// How to reach the publisher and what ring to offer it.
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    /// Publisher control endpoint, `host:port`.
    pub endpoint: String,
    /// Name shown in the publisher's logs and counters (at most 64 bytes).
    pub name: String,
    /// Ring size in slots (power of two, 64 B each). Default 131,072 (8 MiB): holds the whole bundled replay.
    pub ring_slots: u32,
    /// Which fabric to offer the publisher, with its settings (for shm, the ring file's folder: the
    /// publisher's `fabric.shm_dir`). Default shared memory in /dev/shm.
    pub fabric: FabricConfig,
    /// instrument_ids wanted; `None` (default) = all.
    pub instruments: Option<Vec<u32>>,
    /// Time allowed for connecting and for the publisher's answer. Default 2 s.
    pub timeout: Duration,
    /// What the publisher does when this ring is full. Default `resync`.
    pub policy: SlowConsumerPolicy,
    /// Start with a snapshot of the current books when joining mid-stream. Default true.
    pub snapshot: bool,
    /// No record (heartbeats included) for this long makes [`Subscriber::maintain`] report
    /// [`Health::Silent`]. Default 50 ms.
    pub silence_timeout: Duration,
    /// How often [`Subscriber::maintain_if_due`] lets [`Subscriber::maintain`] run. Default 1 ms.
    pub maintain_interval: Duration,
}

impl SubscriberConfig {
    /// Defaults for everything but the endpoint and name.
    pub fn new(endpoint: &str, name: &str) -> SubscriberConfig {
        SubscriberConfig {
            endpoint: endpoint.to_owned(),
            name: name.to_owned(),
            ring_slots: 131_072,
            fabric: FabricConfig::default(),
            instruments: None,
            timeout: Duration::from_secs(2),
            policy: SlowConsumerPolicy::Resync,
            snapshot: true,
            silence_timeout: Duration::from_millis(50),
            maintain_interval: Duration::from_millis(1),
        }
    }
}

/// Why a subscription could not be set up. Each names the endpoint or the ring.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The endpoint does not resolve or nobody accepts there.
    #[error("publisher {endpoint}: cannot connect: {source}")]
    Connect {
        /// The publisher's control endpoint.
        endpoint: String,
        #[source]
        /// What failed underneath.
        source: std::io::Error,
    },
    /// The ring could not be created (or connected), here, before or while subscribing to `endpoint`.
    #[error("cannot set up the ring for publisher {endpoint}: {source}")]
    Ring {
        /// The publisher's control endpoint.
        endpoint: String,
        #[source]
        /// What failed underneath.
        source: mdfan_fabric::FabricError,
    },
    /// The control exchange failed (closed, timed out, garbage).
    #[error("publisher {endpoint}: control: {source}")]
    Control {
        /// The publisher's control endpoint.
        endpoint: String,
        #[source]
        /// What failed underneath.
        source: control::ControlError,
    },
    /// The publisher refused, with its reason.
    #[error("publisher {endpoint} refused: {reason}")]
    Rejected {
        /// The publisher's control endpoint.
        endpoint: String,
        /// The publisher's reason, as it sent it.
        reason: String,
    },
    /// The publisher answered something other than accept or reject.
    #[error("publisher {endpoint}: unexpected answer {answer}")]
    Unexpected {
        /// The publisher's control endpoint.
        endpoint: String,
        /// The answer's message type (`ControlMsg::kind`).
        answer: String,
    },
}

/// What [`Subscriber::maintain`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Records or heartbeats are arriving.
    Ok,
    /// Nothing arrived for longer than the silence timeout (the publisher may be hung or stopped).
    Silent(Duration),
    /// The publisher's control connection is closed and nothing more is in the ring: it is gone.
    Gone,
}

/// A connected subscription: the ring (owned here), the control connection, the seq tracker.
pub struct Subscriber {
    cfg: SubscriberConfig,
    rx: Receiver<AnyLocalRing>,
    /// The publisher's `Bye` reason, once it said one.
    bye: Option<Bye>,
    /// Bytes of an incomplete control frame.
    control_buf: Vec<u8>,
    /// Frames queued for the publisher (snapshot requests), written without blocking by `maintain`.
    control_out: Vec<u8>,
    control: TcpStream,
    endpoint: String,
    session_id: u64,
    policy: SlowConsumerPolicy,
    control_closed: bool,
    /// Thorough polls ([`Receiver::poll_thorough`]: the CQ itself read) that found nothing so far. "A poll after
    /// X found the ring empty" is `empty_polls` above its value at X: how [`Subscriber::maintain`] knows the ring
    /// was drained after the close, or that a silence is the publisher's and not this thread's (descheduled,
    /// stopped, or slow to see a record after a gap). Polls are thorough only while such a judgement is pending.
    empty_polls: u64,
    /// `empty_polls` when the control connection was seen closed.
    empty_polls_at_close: u64,
    clock: quanta::Clock,
    /// TSC of the last non-empty poll.
    last_rx: u64,
    /// `(last_rx, empty_polls)` when `maintain` first found nothing received for longer than the silence timeout:
    /// reported once a later poll also found nothing and nothing arrived meanwhile.
    silence_suspected: Option<(u64, u64)>,
    /// TSC of the last [`Subscriber::maintain_if_due`] that ran `maintain`.
    last_maintain: u64,
    /// A snapshot was requested and has not ended yet.
    resync_requested: bool,
    snapshots_requested: u64,
    /// Snapshots received when the last one was requested.
    snapshots_at_request: u64,
    reconnects: u64,
}

impl Subscriber {
    /// Creates the ring, connects, subscribes, and waits for the publisher's accept.
    ///
    /// # Errors
    /// [`SubscribeError`] naming the endpoint: cannot connect, ring creation failed, refused, bad answer.
    pub fn connect(cfg: &SubscriberConfig) -> Result<Subscriber, SubscribeError> {
        let (ring, control, session_id, policy) = Self::open(cfg)?;
        let clock = quanta::Clock::new();
        let last_rx = clock.raw();
        Ok(Subscriber {
            cfg: cfg.clone(),
            rx: Receiver::new(ring),
            bye: None,
            control_buf: Vec::new(),
            control_out: Vec::new(),
            control,
            endpoint: cfg.endpoint.clone(),
            session_id,
            policy,
            control_closed: false,
            empty_polls: 0,
            empty_polls_at_close: 0,
            clock,
            last_rx,
            silence_suspected: None,
            last_maintain: last_rx,
            resync_requested: false,
            snapshots_requested: 0,
            snapshots_at_request: 0,
            reconnects: 0,
        })
    }

    fn open(cfg: &SubscriberConfig) -> Result<(AnyLocalRing, TcpStream, u64, SlowConsumerPolicy), SubscribeError> {
        let endpoint = cfg.endpoint.clone();
        let connect_err = |source| SubscribeError::Connect { endpoint: endpoint.clone(), source };
        let addr = cfg
            .endpoint
            .to_socket_addrs()
            .map_err(connect_err)?
            .next()
            .ok_or_else(|| connect_err(std::io::Error::new(ErrorKind::NotFound, "no address")))?;
        // The ring first (registering it and posting its receive queue can take a while on verbs), so the
        // handshake that follows is only a Subscribe and its answer, well within the publisher's timeout.
        let ring_err = |source| SubscribeError::Ring { endpoint: endpoint.clone(), source };
        let (mut ring, grant) = PreparedLocalRing::create(&cfg.fabric, cfg.ring_slots).map_err(ring_err)?;
        let mut stream = TcpStream::connect_timeout(&addr, cfg.timeout).map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        stream.set_read_timeout(Some(cfg.timeout)).map_err(connect_err)?;
        let sub = ControlMsg::Subscribe(Subscribe {
            name: cfg.name.clone(),
            instruments: cfg.instruments.clone(),
            ring: grant,
            policy: cfg.policy,
            snapshot: cfg.snapshot,
        });
        let ctl_err = |source| SubscribeError::Control { endpoint: endpoint.clone(), source };
        control::write_msg(&mut stream, &sub).map_err(|e| ctl_err(e.into()))?;
        let answer = control::read_msg_within(&mut stream, cfg.timeout).map_err(ctl_err)?;
        ring.unlink();
        let accept = match answer {
            ControlMsg::Accept(a) => a,
            ControlMsg::Reject(r) => return Err(SubscribeError::Rejected { endpoint, reason: r.reason }),
            other => return Err(SubscribeError::Unexpected { endpoint, answer: other.kind().to_owned() }),
        };
        let ring = ring.connect(&accept.fabric).map_err(ring_err)?;
        stream.set_nonblocking(true).map_err(connect_err)?;
        Ok((ring, stream, accept.session_id, accept.policy))
    }

    /// Makes a new session with the same config (after [`Health::Gone`]). The stream restarts at seq 1; the
    /// caller must drop its books: a snapshot (when the publisher is mid-stream) or the replay from its start
    /// follows.
    ///
    /// # Errors
    /// As [`Subscriber::connect`]; the old session is gone either way.
    pub fn reconnect(&mut self) -> Result<(), SubscribeError> {
        let (ring, control, session_id, policy) = Self::open(&self.cfg)?;
        self.rx.restart(ring);
        self.control = control;
        self.session_id = session_id;
        self.policy = policy;
        self.reconnects += 1;
        self.control_closed = false;
        self.silence_suspected = None;
        self.bye = None;
        self.control_buf.clear();
        self.control_out.clear();
        self.resync_requested = false;
        self.last_rx = self.clock.raw();
        Ok(())
    }

    /// Records each record's one-way latency (publisher post to this poll) into an HDR histogram.
    pub fn with_latency(mut self) -> Subscriber {
        self.rx.enable_latency();
        self
    }

    /// Reaps up to `max` completions and hands each record (and any gap before it) to `f`. Returns the number
    /// of completions reaped; 0 means nothing was ready. When nothing is ready and the publisher has closed the
    /// ring, `f` gets [`Event::Closed`] once. On shm the expected record is taken from its slot's stamp and the CQ
    /// is read on every `mdfan_fabric::shm::CQ_POLL_INTERVAL`-th empty poll only, so a record after a gap shows
    /// up to that many empty polls later (a busy-polling reader: microseconds).
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: F) -> usize {
        // Only a poll that read the CQ itself may say the ring is empty: needed while a silence is suspected or
        // the control connection is closed (see `empty_polls`).
        let judging = self.silence_suspected.is_some() || self.control_closed;
        let n = if judging { self.rx.poll_thorough(max, f) } else { self.rx.poll(max, f) };
        if n > 0 {
            self.last_rx = self.clock.raw();
        } else if judging {
            self.empty_polls += 1;
        }
        n
    }

    /// [`Subscriber::maintain`], at most once per [`SubscriberConfig::maintain_interval`] (default 1 ms); `None`
    /// until it is due. Costs one TSC read when not due (no syscall), so a hot loop may call it after every poll:
    /// this is the recommended way to keep a session healthy (snapshot requests after a gap, liveness, the
    /// publisher's `Bye`) without a syscall per empty poll.
    #[inline]
    pub fn maintain_if_due(&mut self) -> Option<Health> {
        let now = self.clock.raw();
        if self.clock.delta_as_nanos(self.last_maintain, now) < self.cfg.maintain_interval.as_nanos() as u64 {
            return None;
        }
        self.last_maintain = now;
        Some(self.maintain())
    }

    /// Housekeeping for idle time (it makes syscalls, none of them blocking): reads the control connection,
    /// queues and writes the snapshot request a gap made owed (policy resync), and checks liveness. Call it on a
    /// timer, not on every empty poll: [`Subscriber::maintain_if_due`] does that.
    pub fn maintain(&mut self) -> Health {
        let was_closed = self.control_closed;
        if !self.control_closed {
            let mut buf = [0u8; 512];
            loop {
                match self.control.read(&mut buf) {
                    Ok(0) => {
                        self.control_closed = true;
                        break;
                    }
                    Ok(n) => self.control_buf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        self.control_closed = true;
                        break;
                    }
                }
            }
            // The publisher says why it ends a session in a Bye (on verbs, the ring cannot carry it).
            while let Some(frame) = control::take_frame(&mut self.control_buf) {
                match frame {
                    Ok(ControlMsg::Bye(bye)) => self.bye = Some(bye),
                    Ok(_) => {} // nothing else is sent after the accept; ignored
                    Err(_) => {
                        // an oversized or garbled frame: the stream cannot be trusted past it
                        self.control_buf.clear();
                        break;
                    }
                }
            }
        }
        if self.resync_requested && self.rx.stats().snapshots_received > self.snapshots_at_request {
            self.resync_requested = false;
        }
        if let Some(gap_from_seq) = self.rx.unrepaired_gap() {
            if self.policy == SlowConsumerPolicy::Resync && !self.resync_requested && !self.control_closed {
                let req = ControlMsg::SnapshotRequest(SnapshotRequest { gap_from_seq });
                self.control_out.extend_from_slice(&control::encode(&req));
                self.resync_requested = true;
                self.snapshots_at_request = self.rx.stats().snapshots_received;
                self.snapshots_requested += 1;
                self.rx.take_gap();
            }
        }
        self.flush_control();
        if self.control_closed {
            if !was_closed {
                self.empty_polls_at_close = self.empty_polls;
            }
            // Gone only once a poll after the close found the ring empty: the publisher wrote everything before
            // it closed the connection, and a poll that starts after we saw the close sees all of it.
            let drained = self.empty_polls > self.empty_polls_at_close;
            return if drained { Health::Gone } else { Health::Ok };
        }
        let quiet_ns = self.clock.delta_as_nanos(self.last_rx, self.clock.raw());
        if quiet_ns <= self.cfg.silence_timeout.as_nanos() as u64 {
            self.silence_suspected = None;
            return Health::Ok;
        }
        match self.silence_suspected {
            // nothing arrived since the suspicion and a poll since found the ring empty: the publisher's silence
            Some((rx, polls)) if rx == self.last_rx && self.empty_polls > polls => {
                Health::Silent(Duration::from_nanos(quiet_ns))
            }
            Some((rx, _)) if rx == self.last_rx => Health::Ok,
            // this thread may simply not have run (descheduled, a long callback): wait for a poll to say
            _ => {
                self.silence_suspected = Some((self.last_rx, self.empty_polls));
                Health::Ok
            }
        }
    }

    /// Writes what is queued for the publisher as far as the socket takes it now, never blocking (the rest waits
    /// for the next `maintain`). A write error means the connection is gone.
    fn flush_control(&mut self) {
        while !self.control_out.is_empty() && !self.control_closed {
            match self.control.write(&self.control_out) {
                Ok(0) => self.control_closed = true,
                Ok(n) => {
                    self.control_out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.control_closed = true,
            }
        }
    }

    /// What the publisher said when it ended this session ([`Bye`]: a typed [`CloseReason`] and a detail),
    /// once it has. Read it after [`Health::Gone`].
    pub fn bye(&self) -> Option<&Bye> {
        self.bye.as_ref()
    }

    /// Whether a gap is not yet repaired by a snapshot (the books are stale).
    pub fn is_stale(&self) -> bool {
        self.rx.unrepaired_gap().is_some() || self.resync_requested
    }

    /// The policy the publisher applies to this subscriber.
    pub fn policy(&self) -> SlowConsumerPolicy {
        self.policy
    }

    /// Stream counters.
    pub fn stats(&self) -> StreamStats {
        StreamStats { snapshots_requested: self.snapshots_requested, reconnects: self.reconnects, ..self.rx.stats() }
    }

    /// The latency histogram, if enabled.
    pub fn latency(&self) -> Option<&Latency> {
        self.rx.latency()
    }

    /// The publisher's session id for this subscriber.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The endpoint this subscriber is connected to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Why the publisher closed the ring, once it has.
    pub fn closed(&self) -> Option<CloseReason> {
        self.rx.closed()
    }
}
