//! mdfan-publisher: replay a feed, normalise it, fan every record out to every subscriber's ring.
//!
//! Threads:
//! - the **hot loop** ([`agent::FanoutAgent`]), pinned to `publisher.hot_core`, busy-polling;
//! - the **conductor** (the thread that calls [`Publisher::run`]): accepts subscribers on the control
//!   endpoint, checks their [`Subscribe`](mdfan_wire::control::Subscribe), attaches their rings, hands sessions
//!   to the hot loop through an rtrb queue, watches control connections for dead peers, logs what the hot loop
//!   reports (drops, retirements) and frees retired sessions' memory off the hot path.
//!
//! [`Publisher::bind`] loads and checks the feed and binds the endpoint, so every input error surfaces before
//! anything runs; [`Publisher::run`] takes a shutdown flag (set by SIGINT/SIGTERM in the binary).
#![forbid(unsafe_code)]

pub mod agent;
pub mod config;
pub mod session;

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mdfan_fabric::shm::ShmRemoteRing;
use mdfan_fabric::CloseReason;
use mdfan_wire::control::{self, Accept, AcceptFabric, ControlError, ControlMsg, Reject, RingGrant, Subscribe};
use mdfan_wire::feed::dbn::{load_mbo_file, FeedError, MboFile};

use crate::agent::{AgentCounters, AgentReport, Command, Event, FanoutAgent};
use crate::config::{Config, Pace, Provider};
use crate::session::{Session, SessionRing};

pub use config::ConfigError;

/// How long a new control connection has to send its subscribe message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// The conductor's idle sleep between passes (it is off the hot path).
const CONDUCTOR_TICK: Duration = Duration::from_millis(1);

/// Why the publisher could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum PublisherError {
    /// The config is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The feed is unusable.
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// The control endpoint could not be bound.
    #[error("control endpoint {endpoint}: cannot listen: {source}")]
    Listen {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

/// One subscriber's line in the final report.
#[derive(Debug, Clone)]
pub struct SessionReport {
    /// Session id.
    pub id: u64,
    /// Subscriber name.
    pub name: String,
    /// Records posted (end of stream included).
    pub sent: u64,
    /// Records filtered out.
    pub filtered: u64,
    /// Last seq posted.
    pub last_seq: u64,
    /// How the session ended.
    pub end: CloseReason,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Feed records replayed.
    pub records: u64,
    /// Wall time of the replay in ns (first record to end of stream).
    pub replay_ns: u64,
    /// Every session that attached, in attach order.
    pub sessions: Vec<SessionReport>,
    /// Longest hot-loop duty cycle, in ns.
    pub max_cycle_ns: u64,
    /// Why the run ended.
    pub end: CloseReason,
}

impl RunReport {
    /// Records per second over the replay.
    pub fn rate_per_s(&self) -> f64 {
        if self.replay_ns == 0 {
            0.0
        } else {
            self.records as f64 * 1e9 / self.replay_ns as f64
        }
    }
}

/// A bound, loaded publisher, ready to run.
pub struct Publisher {
    cfg: Config,
    listener: TcpListener,
    feed: MboFile,
}

impl Publisher {
    /// Loads and checks the feed, then binds the control endpoint.
    ///
    /// # Errors
    /// [`PublisherError::Feed`] naming the file and record; [`PublisherError::Listen`] naming the endpoint.
    pub fn bind(cfg: Config) -> Result<Publisher, PublisherError> {
        let feed = load_mbo_file(&cfg.feed.path)?;
        let listener = TcpListener::bind(&cfg.publisher.listen)
            .map_err(|source| PublisherError::Listen { endpoint: cfg.publisher.listen.clone(), source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| PublisherError::Listen { endpoint: cfg.publisher.listen.clone(), source })?;
        Ok(Publisher { cfg, listener, feed })
    }

    /// The bound control endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The loaded feed.
    pub fn feed(&self) -> &MboFile {
        &self.feed
    }

    /// Runs the replay to its end, or until `shutdown` is set. Blocks; the calling thread is the conductor.
    ///
    /// # Errors
    /// [`PublisherError::Thread`] if the hot loop cannot be started.
    pub fn run(self, shutdown: Arc<AtomicBool>) -> Result<RunReport, PublisherError> {
        let Publisher { cfg, listener, feed } = self;
        let max = cfg.publisher.max_subscribers;
        let (cmd_tx, cmd_rx) = rtrb::RingBuffer::<Command>::new(max * 2);
        let (evt_tx, mut evt_rx) = rtrb::RingBuffer::<Event>::new(max * 2);
        let counters = Arc::new(AgentCounters::default());
        let clock = quanta::Clock::new();
        let records: Arc<[_]> = feed.records.into();
        let schedule_ns = schedule(&records, cfg.feed.pace, cfg.feed.max_gap_ms);
        let agent = FanoutAgent {
            records: Arc::clone(&records),
            schedule_ns,
            sessions: Vec::with_capacity(max),
            commands: cmd_rx,
            events: evt_tx,
            shutdown: Arc::clone(&shutdown),
            wait_for: cfg.publisher.wait_for_subscribers,
            clock: clock.clone(),
            counters: Arc::clone(&counters),
            retire_backlog: Vec::with_capacity(max),
            rotate: 0,
        };
        let hot_core = cfg.publisher.hot_core;
        let lock = cfg.publisher.lock_memory;
        let hot = std::thread::Builder::new()
            .name("mdfan-hot".into())
            .spawn(move || {
                if let Some(core) = hot_core {
                    match mdfan_tuning::pin_current_thread(core) {
                        Ok(()) => tracing::info!(core, "hot loop pinned"),
                        Err(e) => tracing::warn!(cause = %e, "hot loop not pinned"),
                    }
                }
                agent.run()
            })
            .map_err(|e| PublisherError::Thread("hot loop", e))?;
        if let Some(core) = cfg.publisher.control_core {
            if let Err(e) = mdfan_tuning::pin_current_thread(core) {
                tracing::warn!(cause = %e, "control thread not pinned");
            }
        }
        if lock {
            if let Err(e) = mdfan_tuning::lock_memory() {
                tracing::warn!(cause = %e, "memory not locked");
            }
        }
        tracing::info!(
            endpoint = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            feed = %feed.path.display(),
            records = records.len(),
            wait_for = cfg.publisher.wait_for_subscribers,
            "publisher ready"
        );

        let mut conductor = Conductor {
            cfg: &cfg,
            cmd_tx,
            next_id: 1,
            conns: Vec::new(),
            attached: Vec::new(),
            handshakes: mpsc::channel(),
            live_sessions: 0,
        };
        let agent_report: AgentReport = loop {
            conductor.accept(&listener);
            conductor.finish_handshakes();
            conductor.watch_connections();
            while let Ok(event) = evt_rx.pop() {
                conductor.on_event(event);
            }
            if hot.is_finished() {
                break hot.join().expect("the hot loop does not panic");
            }
            std::thread::sleep(CONDUCTOR_TICK);
        };
        while let Ok(event) = evt_rx.pop() {
            conductor.on_event(event);
        }
        for s in &agent_report.sessions {
            conductor.record_end(s, agent_report.end);
        }
        conductor.say_bye(agent_report.end);
        let ticks_to_ns = |t: u64| clock.delta_as_nanos(0, t);
        Ok(RunReport {
            records: agent_report.records,
            replay_ns: ticks_to_ns(agent_report.replay_ticks),
            sessions: conductor.attached,
            max_cycle_ns: ticks_to_ns(counters.max_cycle_ticks.load(Ordering::Relaxed)),
            end: agent_report.end,
        })
    }
}

/// Per-record send times for paced replay: ns after the first record, from ts_recv deltas shortened to
/// `max_gap_ms` and divided by the speed-up factor. `None` for pace `max`.
pub fn schedule(records: &[mdfan_wire::feed::dbn::DbnMboMsg], pace: Pace, max_gap_ms: u64) -> Option<Arc<[u64]>> {
    let factor = match pace {
        Pace::Max => return None,
        Pace::Realtime => 1.0,
        Pace::Factor(f) => f,
    };
    let max_gap_ns = max_gap_ms.saturating_mul(1_000_000);
    let mut at = 0f64;
    let mut prev = records.first().map_or(0, |r| r.ts_recv);
    Some(
        records
            .iter()
            .map(|r| {
                let gap = r.ts_recv.saturating_sub(prev).min(max_gap_ns);
                prev = r.ts_recv.max(prev);
                at += gap as f64 / factor;
                at as u64
            })
            .collect(),
    )
}

struct Conn {
    session_id: u64,
    stream: TcpStream,
    name: String,
}

type Handshake = (TcpStream, SocketAddr, Result<ControlMsg, ControlError>);

struct Conductor<'a> {
    cfg: &'a Config,
    cmd_tx: rtrb::Producer<Command>,
    next_id: u64,
    conns: Vec<Conn>,
    attached: Vec<SessionReport>,
    handshakes: (mpsc::Sender<Handshake>, mpsc::Receiver<Handshake>),
    live_sessions: usize,
}

impl Conductor<'_> {
    /// Accepts new control connections; each reads its subscribe message on a short-lived thread with a
    /// timeout, so a silent or slow peer never holds up the conductor.
    fn accept(&mut self, listener: &TcpListener) {
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let tx = self.handshakes.0.clone();
                    let spawned = std::thread::Builder::new().name("mdfan-handshake".into()).spawn(move || {
                        let mut stream = stream;
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
                        let msg = control::read_msg(&mut stream);
                        let _ = tx.send((stream, peer, msg));
                    });
                    if let Err(e) = spawned {
                        tracing::warn!(%peer, cause = %e, "cannot start a handshake thread; connection closed");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    return;
                }
            }
        }
    }

    fn reject(stream: &mut TcpStream, peer: SocketAddr, reason: String) {
        tracing::warn!(%peer, %reason, "subscriber refused");
        let msg = ControlMsg::Reject(Reject { reason, publisher_version: control::PROTOCOL_VERSION });
        let _ = control::write_msg(stream, &msg);
    }

    fn finish_handshakes(&mut self) {
        while let Ok((mut stream, peer, msg)) = self.handshakes.1.try_recv() {
            let sub = match msg {
                Ok(ControlMsg::Subscribe(sub)) => sub,
                Ok(other) => {
                    let kind = format!("{other:?}");
                    let kind = kind.split(['(', ' ', '{']).next().unwrap_or("?").to_owned();
                    Self::reject(&mut stream, peer, format!("expected a subscribe message, got {kind}"));
                    continue;
                }
                Err(ControlError::Version { got }) => {
                    Self::reject(
                        &mut stream,
                        peer,
                        format!(
                            "control protocol version {got} is not supported; this publisher speaks version {}",
                            control::PROTOCOL_VERSION
                        ),
                    );
                    continue;
                }
                Err(e) => {
                    Self::reject(&mut stream, peer, format!("bad subscribe message: {e}"));
                    continue;
                }
            };
            match self.attach(&sub) {
                Ok(ring) => self.admit(stream, peer, sub, ring),
                Err(reason) => Self::reject(&mut stream, peer, reason),
            }
        }
    }

    fn attach(&self, sub: &Subscribe) -> Result<SessionRing, String> {
        if sub.name.len() > 64 {
            return Err(format!("field name: {} bytes, at most 64", sub.name.len()));
        }
        if self.live_sessions >= self.cfg.publisher.max_subscribers {
            return Err(format!("publisher is full: {} subscribers", self.cfg.publisher.max_subscribers));
        }
        let slots = sub.ring.slot_count();
        let (lo, hi) = (self.cfg.fabric.ring_slots_min, self.cfg.fabric.ring_slots_max);
        if !slots.is_power_of_two() || slots < lo || slots > hi {
            return Err(format!("field ring.slot_count: {slots} is not a power of two in {lo}..={hi}"));
        }
        if let Some(ids) = &sub.instruments {
            if ids.len() > 1 << 16 {
                return Err(format!("field instruments: {} ids, at most 65536", ids.len()));
            }
        }
        match (&sub.ring, self.cfg.fabric.provider) {
            (RingGrant::Shm { .. }, Provider::Shm) => ShmRemoteRing::attach(&sub.ring, &self.cfg.fabric.shm_dir)
                .map(SessionRing::Shm)
                .map_err(|e| e.to_string()),
            (RingGrant::Verbs { .. }, Provider::Shm) => {
                Err("this publisher serves fabric shm; the subscriber offered a verbs ring".into())
            }
            (_, Provider::Verbs) => Err("fabric verbs is not available in this publisher build".into()),
        }
    }

    fn admit(&mut self, mut stream: TcpStream, peer: SocketAddr, sub: Subscribe, ring: SessionRing) {
        let id = self.next_id;
        let accept = ControlMsg::Accept(Accept { session_id: id, first_seq: 1, fabric: AcceptFabric::Shm });
        if let Err(e) = control::write_msg(&mut stream, &accept) {
            tracing::warn!(%peer, cause = %e, "subscriber went away during the handshake");
            return;
        }
        self.next_id += 1;
        let session = Session::new(id, sub.name.clone(), ring, sub.instruments.clone());
        if self.cmd_tx.push(Command::Add(session)).is_err() {
            tracing::error!(%peer, "hot loop command queue full; subscriber dropped");
            return;
        }
        tracing::info!(%peer, session = id, name = %sub.name, slots = sub.ring.slot_count(), "subscriber attached");
        let _ = stream.set_nonblocking(true);
        self.conns.push(Conn { session_id: id, stream, name: sub.name.clone() });
        self.attached.push(SessionReport {
            id,
            name: sub.name,
            sent: 0,
            filtered: 0,
            last_seq: 0,
            end: CloseReason::EndOfStream,
        });
        self.live_sessions += 1;
    }

    /// A closed control connection means a dead subscriber: its session is removed from the hot loop.
    fn watch_connections(&mut self) {
        let mut buf = [0u8; 256];
        let mut k = 0;
        while k < self.conns.len() {
            let closed = match self.conns[k].stream.read(&mut buf) {
                Ok(0) => true,
                Ok(_) => false, // a subscriber has nothing to say after subscribe; ignore
                Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                Err(_) => true,
            };
            if closed {
                let conn = self.conns.swap_remove(k);
                tracing::info!(session = conn.session_id, name = %conn.name, "control connection closed");
                let _ = self.cmd_tx.push(Command::Remove { id: conn.session_id, reason: CloseReason::FabricError });
            } else {
                k += 1;
            }
        }
    }

    fn record_end(&mut self, s: &Session, end: CloseReason) {
        if let Some(r) = self.attached.iter_mut().find(|r| r.id == s.id) {
            r.sent = s.counters.sent.load(Ordering::Relaxed);
            r.filtered = s.counters.filtered.load(Ordering::Relaxed);
            r.last_seq = s.counters.last_seq.load(Ordering::Relaxed);
            r.end = end;
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Started { sessions } => tracing::info!(sessions, "replay started"),
            Event::Retired { session, reason } => {
                self.record_end(&session, reason);
                self.live_sessions = self.live_sessions.saturating_sub(1);
                let level_warn = reason != CloseReason::EndOfStream;
                if level_warn {
                    tracing::warn!(
                        session = session.id,
                        name = %session.name,
                        reason = reason.as_str(),
                        sent = session.counters.sent.load(Ordering::Relaxed),
                        "subscriber dropped"
                    );
                }
                if let Some(i) = self.conns.iter().position(|c| c.session_id == session.id) {
                    let mut conn = self.conns.swap_remove(i);
                    let _ = conn.stream.set_nonblocking(false);
                    let bye = ControlMsg::Bye { reason: reason.as_str().into() };
                    let _ = control::write_msg(&mut conn.stream, &bye);
                }
                drop(session); // unmaps the ring, here, off the hot path
            }
        }
    }

    fn say_bye(&mut self, end: CloseReason) {
        for conn in &mut self.conns {
            let _ = conn.stream.set_nonblocking(false);
            let _ = control::write_msg(&mut conn.stream, &ControlMsg::Bye { reason: end.as_str().into() });
        }
    }
}
