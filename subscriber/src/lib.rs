//! mdfan-subscriber: the library a strategy embeds to receive records from an mdfan publisher.
//!
//! ```no_run
//! use mdfan_subscriber::{Event, Subscriber, SubscriberConfig};
//! let mut sub = Subscriber::connect(&SubscriberConfig::new("127.0.0.1:7700", "my-strategy"))?;
//! let mut books = mdfan_wire::Books::new();
//! loop {
//!     sub.poll(256, |event| match event {
//!         Event::Record(r) => { let _ = books.apply(r); }      // borrowed in place from the ring
//!         Event::Gap { expected, got } => eprintln!("gap: expected seq {expected}, got {got}"),
//!         Event::Corrupt { .. } | Event::Closed(_) => {}
//!     });
//! #   break;
//! }
//! # Ok::<(), mdfan_subscriber::SubscribeError>(())
//! ```
//!
//! [`Subscriber::poll`] busy-polls the ring's CQ once per call and hands each record to the callback, borrowed
//! from ring memory (no copy); the slot is released to the publisher after the callback returns. Every jump in
//! seq is reported as [`Event::Gap`] before the record that follows it, never skipped silently. `poll` makes no
//! syscall and allocates nothing; [`Subscriber::check_control`] (a socket read) is for idle time.
#![forbid(unsafe_code)]

pub mod latency;
pub mod report;

use std::io::{ErrorKind, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use mdfan_fabric::shm::ShmLocalRing;
use mdfan_fabric::{CloseReason, LocalRing, PeerState};
use mdfan_wire::control::{self, ControlMsg, Subscribe};
use mdfan_wire::ring::{seq_from_imm, slot_index};
use mdfan_wire::BookUpdate;

pub use latency::{ClockSource, Latency};

/// How to reach the publisher and what ring to offer it.
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    /// Publisher control endpoint, `host:port`.
    pub endpoint: String,
    /// Name shown in the publisher's logs and counters (at most 64 bytes).
    pub name: String,
    /// Ring size in slots (power of two, 64 B each). Default 131,072 (8 MiB): holds the whole bundled replay.
    pub ring_slots: u32,
    /// Folder for the shared-memory ring file; must be the publisher's `fabric.shm_dir`. Default /dev/shm.
    pub shm_dir: PathBuf,
    /// instrument_ids wanted; `None` (default) = all.
    pub instruments: Option<Vec<u32>>,
    /// Time allowed for connecting and for the publisher's answer. Default 2 s.
    pub timeout: Duration,
}

impl SubscriberConfig {
    /// Defaults for everything but the endpoint and name.
    pub fn new(endpoint: &str, name: &str) -> SubscriberConfig {
        SubscriberConfig {
            endpoint: endpoint.to_owned(),
            name: name.to_owned(),
            ring_slots: 131_072,
            shm_dir: PathBuf::from(mdfan_fabric::shm::DEFAULT_DIR),
            instruments: None,
            timeout: Duration::from_secs(2),
        }
    }
}

/// Why a subscription could not be set up. Each names the endpoint or the ring.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    /// The endpoint does not resolve or nobody accepts there.
    #[error("publisher {endpoint}: cannot connect: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    /// The ring could not be created.
    #[error("publisher {endpoint}: {source}")]
    Ring {
        endpoint: String,
        #[source]
        source: mdfan_fabric::FabricError,
    },
    /// The control exchange failed (closed, timed out, garbage).
    #[error("publisher {endpoint}: control: {source}")]
    Control {
        endpoint: String,
        #[source]
        source: control::ControlError,
    },
    /// The publisher refused, with its reason.
    #[error("publisher {endpoint} refused: {reason}")]
    Rejected { endpoint: String, reason: String },
    /// The publisher answered something other than accept or reject.
    #[error("publisher {endpoint}: unexpected answer {answer}")]
    Unexpected { endpoint: String, answer: String },
}

/// What [`Subscriber::poll`] hands the callback.
#[derive(Debug)]
pub enum Event<'a> {
    /// The next record, borrowed from the ring. Valid only inside the callback.
    Record(&'a BookUpdate),
    /// seq jumped: records `expected..got` are missing. Reported before record `got`.
    Gap {
        /// The seq that was due.
        expected: u64,
        /// The seq that arrived.
        got: u64,
    },
    /// A completion named a slot whose record carries another seq (torn or stale slot); the record is not
    /// delivered and the stream goes on.
    Corrupt {
        /// The seq rebuilt from the immediate.
        seq: u64,
        /// The seq found in the slot.
        slot_seq: u64,
    },
    /// The publisher closed the ring (after everything it wrote was delivered).
    Closed(CloseReason),
}

/// Stream counters, updated by `poll`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Records delivered (control records such as end of stream included).
    pub records: u64,
    /// Jumps in seq.
    pub gaps: u64,
    /// Records missing in those jumps.
    pub missed: u64,
    /// Completions whose slot did not carry the expected seq.
    pub corrupt: u64,
    /// The seq due next.
    pub next_seq: u64,
}

/// A connected subscription: the ring (owned here), the control connection, the seq tracker.
pub struct Subscriber {
    ring: ShmLocalRing,
    control: TcpStream,
    endpoint: String,
    session_id: u64,
    stats: StreamStats,
    latency: Option<Latency>,
    closed: Option<CloseReason>,
    control_closed: bool,
}

impl Subscriber {
    /// Creates the ring, connects, subscribes, and waits for the publisher's accept.
    ///
    /// # Errors
    /// [`SubscribeError`] naming the endpoint: cannot connect, ring creation failed, refused, bad answer.
    pub fn connect(cfg: &SubscriberConfig) -> Result<Subscriber, SubscribeError> {
        let endpoint = cfg.endpoint.clone();
        let connect_err = |source| SubscribeError::Connect { endpoint: endpoint.clone(), source };
        let addr = cfg
            .endpoint
            .to_socket_addrs()
            .map_err(connect_err)?
            .next()
            .ok_or_else(|| connect_err(std::io::Error::new(ErrorKind::NotFound, "no address")))?;
        let mut stream = TcpStream::connect_timeout(&addr, cfg.timeout).map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        stream.set_read_timeout(Some(cfg.timeout)).map_err(connect_err)?;
        let (mut ring, grant) = ShmLocalRing::create(&cfg.shm_dir, cfg.ring_slots)
            .map_err(|source| SubscribeError::Ring { endpoint: endpoint.clone(), source })?;
        let sub = ControlMsg::Subscribe(Subscribe {
            name: cfg.name.clone(),
            instruments: cfg.instruments.clone(),
            ring: grant,
        });
        let ctl_err = |source| SubscribeError::Control { endpoint: endpoint.clone(), source };
        control::write_msg(&mut stream, &sub).map_err(|e| ctl_err(e.into()))?;
        let answer = control::read_msg(&mut stream).map_err(ctl_err)?;
        ring.unlink();
        let session_id = match answer {
            ControlMsg::Accept(a) => a.session_id,
            ControlMsg::Reject(r) => return Err(SubscribeError::Rejected { endpoint, reason: r.reason }),
            other => return Err(SubscribeError::Unexpected { endpoint, answer: format!("{other:?}") }),
        };
        stream.set_nonblocking(true).map_err(connect_err)?;
        Ok(Subscriber {
            ring,
            control: stream,
            endpoint,
            session_id,
            stats: StreamStats { next_seq: 1, ..StreamStats::default() },
            latency: None,
            closed: None,
            control_closed: false,
        })
    }

    /// Records each record's one-way latency (publisher post to this poll) into an HDR histogram.
    pub fn with_latency(mut self) -> Subscriber {
        self.latency = Some(Latency::new());
        self
    }

    /// Reaps up to `max` completions and hands each record (and any gap before it) to `f`. Returns the number
    /// of completions reaped; 0 means the CQ was empty. When the CQ is empty and the publisher has closed the
    /// ring, `f` gets [`Event::Closed`] once.
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, mut f: F) -> usize {
        let mut n = 0;
        let slot_count = self.ring.slot_count();
        while n < max {
            let Some(c) = self.ring.poll_cq() else { break };
            n += 1;
            let expected = self.stats.next_seq;
            let seq = seq_from_imm(c.imm_data, expected);
            let record = self.ring.slot(slot_index(seq, slot_count));
            if record.seq != seq {
                self.stats.corrupt += 1;
                f(Event::Corrupt { seq, slot_seq: record.seq });
                continue;
            }
            if seq != expected {
                self.stats.gaps += 1;
                self.stats.missed += seq.wrapping_sub(expected);
                f(Event::Gap { expected, got: seq });
            }
            if let Some(l) = &mut self.latency {
                l.record(record.ts_send_ticks);
            }
            self.stats.records += 1;
            self.stats.next_seq = seq + 1;
            f(Event::Record(record));
        }
        if n > 0 {
            self.ring.release(self.stats.next_seq - 1);
        } else if self.closed.is_none() {
            if let PeerState::Closed(reason) = self.ring.peer_state() {
                self.closed = Some(reason);
                f(Event::Closed(reason));
            }
        }
        n
    }

    /// Reads the control connection without blocking (a syscall: call it when idle). Returns `false` once the
    /// publisher's control connection is gone (closed or errored), `true` while it is up.
    pub fn check_control(&mut self) -> bool {
        if self.control_closed {
            return false;
        }
        let mut buf = [0u8; 512];
        match self.control.read(&mut buf) {
            Ok(0) => self.control_closed = true,
            Ok(_) => {} // Bye or other notices; the ring's peer state carries the reason
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => self.control_closed = true,
        }
        !self.control_closed
    }

    /// Stream counters.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    /// The latency histogram, if enabled.
    pub fn latency(&self) -> Option<&Latency> {
        self.latency.as_ref()
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
        self.closed
    }
}
