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
#![warn(missing_docs)]

pub mod agent;
pub mod config;
pub mod cycles;
pub mod queue;
pub mod session;

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mdfan_fabric::{AnyRemoteRing, AnySender, CloseReason, FabricError};
use mdfan_feed::dbn::{load_mbo_file, normalize_mbo, DbnMboMsg, FeedError, MboFile};
use mdfan_wire::control::{self, Accept, AcceptFabric, Bye, ControlError, ControlMsg, Reject, Subscribe};
use mdfan_wire::Books;

use crate::agent::{AgentCounters, AgentReport, AgentTiming, Command, Event, FanoutAgent};
use crate::config::{Config, Pace};
use crate::session::{Session, SessionCounters};
use mdfan_wire::control::SlowConsumerPolicy;

pub use config::ConfigError;

/// How long a new control connection has to send its subscribe message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// The conductor's idle sleep between passes (it is off the hot path).
const CONDUCTOR_TICK: Duration = Duration::from_millis(1);
/// How long an accepted subscriber's side has to come up (verbs: its QP to RTS and first credit).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Control frames read from one connection per conductor pass.
const FRAMES_PER_PASS: usize = 8;
/// How long a retiring ring may take to complete what was posted to it.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(200);

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
        /// The control endpoint (`publisher.listen`).
        endpoint: String,
        #[source]
        /// What failed underneath.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    /// The fabric could not be opened (e.g. no RDMA device).
    #[error("fabric {provider}: {source}")]
    Fabric {
        /// The provider's name (`shm`, `verbs`).
        provider: &'static str,
        #[source]
        /// What failed underneath.
        source: mdfan_fabric::FabricError,
    },
}

/// One subscriber's line in the final report (and in counter dumps).
#[derive(Debug, Clone)]
pub struct SessionReport {
    /// Session id.
    pub id: u64,
    /// Subscriber name.
    pub name: String,
    /// Its slow-consumer policy.
    pub policy: SlowConsumerPolicy,
    /// Records written (live, snapshot, catch-up, heartbeats, end of stream).
    pub sent: u64,
    /// Live records filtered out.
    pub filtered: u64,
    /// Live records skipped on a full ring (policy resync).
    pub skipped: u64,
    /// Snapshots delivered.
    pub snapshots: u64,
    /// Feed records re-sent after snapshots.
    pub catchup: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Posts that found the ring full.
    pub ring_full: u64,
    /// Time the hot loop waited for it (policy block), in ns.
    pub blocked_ns: u64,
    /// Last seq written.
    pub last_seq: u64,
    /// Records written but not yet released by the subscriber (as last seen).
    pub lag: u64,
    /// How the session ended (`None` while it runs).
    pub end: Option<CloseReason>,
}

impl SessionReport {
    fn new(id: u64, name: String, policy: SlowConsumerPolicy) -> SessionReport {
        SessionReport {
            id,
            name,
            policy,
            sent: 0,
            filtered: 0,
            skipped: 0,
            snapshots: 0,
            catchup: 0,
            heartbeats: 0,
            ring_full: 0,
            blocked_ns: 0,
            last_seq: 0,
            lag: 0,
            end: None,
        }
    }

    fn update(&mut self, c: &SessionCounters, clock: &quanta::Clock) {
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        self.sent = ld(&c.sent);
        self.filtered = ld(&c.filtered);
        self.skipped = ld(&c.skipped);
        self.snapshots = ld(&c.snapshots);
        self.catchup = ld(&c.catchup);
        self.heartbeats = ld(&c.heartbeats);
        self.ring_full = ld(&c.ring_full);
        self.blocked_ns = clock.delta_as_nanos(0, ld(&c.blocked_ticks));
        self.last_seq = ld(&c.last_seq);
        self.lag = self.last_seq.saturating_sub(ld(&c.consumed_seq));
    }

    /// `subscriber id=1 name=a policy=resync sent=.. ... end=end_of_stream`.
    pub fn line(&self) -> String {
        format!(
            "subscriber id={} name={} policy={} sent={} filtered={} skipped={} snapshots={} catchup={} heartbeats={} ring_full={} blocked_ns={} last_seq={} lag={} end={}",
            self.id,
            self.name,
            self.policy.as_str(),
            self.sent,
            self.filtered,
            self.skipped,
            self.snapshots,
            self.catchup,
            self.heartbeats,
            self.ring_full,
            self.blocked_ns,
            self.last_seq,
            self.lag,
            self.end.map_or("running", |e| e.as_str())
        )
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Feed records replayed.
    pub records: u64,
    /// Wall time of the replay in ns (first record to the last one fanned out).
    pub replay_ns: u64,
    /// Every session that attached, in attach order.
    pub sessions: Vec<SessionReport>,
    /// Hot-loop duty cycle: p50, p99.9 and max, in ns (upper bounds within 6.25%).
    pub cycle_p50_ns: u64,
    /// See `cycle_p50_ns`.
    pub cycle_p999_ns: u64,
    /// See `cycle_p50_ns`.
    pub cycle_max_ns: u64,
    /// The whole duty-cycle histogram: (upper bound in ns, count) per non-empty bucket, ascending.
    pub cycle_buckets_ns: Vec<(u64, u64)>,
    /// Per live record posted, start of its normalization to its posts' stamp, as `cycle_buckets_ns`.
    pub decode_to_post_buckets_ns: Vec<(u64, u64)>,
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

    /// The session report of `name`.
    pub fn session(&self, name: &str) -> Option<&SessionReport> {
        self.sessions.iter().find(|s| s.name == name)
    }
}

/// A bound, loaded publisher, ready to run.
pub struct Publisher {
    cfg: Config,
    listener: TcpListener,
    feed: MboFile,
    dump: Arc<AtomicBool>,
    counters: Arc<AgentCounters>,
    sender: AnySender,
}

/// How far the replay is, readable from any thread while [`Publisher::run`] runs (for a progress display).
#[derive(Clone)]
pub struct Progress {
    counters: Arc<AgentCounters>,
    total: u64,
}

impl Progress {
    /// Feed records fanned out so far.
    pub fn records(&self) -> u64 {
        self.counters.records.load(Ordering::Relaxed)
    }

    /// Feed records in all.
    pub fn total(&self) -> u64 {
        self.total
    }
}

impl Publisher {
    /// Loads and checks the feed, then binds the control endpoint.
    ///
    /// # Errors
    /// [`PublisherError::Feed`] naming the file and record; [`PublisherError::Listen`] naming the endpoint.
    pub fn bind(cfg: Config) -> Result<Publisher, PublisherError> {
        let feed = load_mbo_file(&cfg.feed.path)?;
        let sender = AnySender::open(&cfg.fabric.resolved)
            .map_err(|source| PublisherError::Fabric { provider: cfg.fabric.provider.name(), source })?;
        let listen_err = |source| PublisherError::Listen { endpoint: cfg.publisher.listen.clone(), source };
        let listener = TcpListener::bind(&cfg.publisher.listen).map_err(listen_err)?;
        listener.set_nonblocking(true).map_err(listen_err)?;
        Ok(Publisher {
            cfg,
            listener,
            feed,
            dump: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(AgentCounters::default()),
            sender,
        })
    }

    /// A handle on the replay's progress.
    pub fn progress(&self) -> Progress {
        Progress { counters: Arc::clone(&self.counters), total: self.feed.records.len() as u64 }
    }

    /// The bound control endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The loaded feed.
    pub fn feed(&self) -> &MboFile {
        &self.feed
    }

    /// Set this flag (e.g. from SIGUSR1) to have the conductor print every counter once.
    pub fn dump_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.dump)
    }

    /// Runs the replay to its end, or until `shutdown` is set. Blocks; the calling thread is the conductor.
    ///
    /// # Errors
    /// [`PublisherError::Thread`] if the hot loop cannot be started.
    pub fn run(self, shutdown: Arc<AtomicBool>) -> Result<RunReport, PublisherError> {
        let Publisher { cfg, listener, feed, dump, counters, sender } = self;
        let max = cfg.publisher.max_subscribers;
        let (cmd_tx, cmd_rx) = rtrb::RingBuffer::<Command>::new(max * 4);
        let (evt_tx, mut evt_rx) = rtrb::RingBuffer::<Event>::new(max * 4);
        let clock = quanta::Clock::new();
        let ticks_per_ms = ticks_per_ms(&clock);
        let records: Arc<[DbnMboMsg]> = feed.records.into();
        let agent = FanoutAgent {
            records: Arc::clone(&records),
            schedule_ns: schedule(&records, cfg.feed.pace, cfg.feed.max_gap_ms),
            sessions: Vec::with_capacity(max),
            commands: cmd_rx,
            events: queue::Outbox::new(evt_tx, max * 4),
            shutdown: Arc::clone(&shutdown),
            wait_for: cfg.publisher.wait_for_subscribers,
            clock: clock.clone(),
            timing: AgentTiming {
                heartbeat_ticks: cfg.publisher.heartbeat_interval_ms * ticks_per_ms,
                stall_ticks: cfg.publisher.stall_timeout_ms * ticks_per_ms,
            },
            counters: Arc::clone(&counters),
            rotate: 0,
            last_heartbeat_check: 0,
        };
        let hot_core = cfg.publisher.hot_core;
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
        if cfg.publisher.lock_memory {
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
            cmd_tx: queue::Outbox::new(cmd_tx, max * 4),
            next_id: 1,
            conns: Vec::new(),
            reports: Vec::new(),
            live: Vec::new(),
            handshakes: mpsc::channel(),
            records: Arc::clone(&records),
            instruments: feed_instruments(&records),
            counters: Arc::clone(&counters),
            books: Books::new(),
            applied: 0,
            clock: clock.clone(),
            pending: Vec::new(),
            sender,
        };
        let agent_report: AgentReport = loop {
            conductor.flush_backlog();
            conductor.accept(&listener);
            conductor.finish_handshakes();
            conductor.admit_ready();
            conductor.watch_connections();
            while let Ok(event) = evt_rx.pop() {
                conductor.on_event(event);
            }
            if dump.swap(false, Ordering::Relaxed) {
                conductor.dump();
            }
            if hot.is_finished() {
                break hot.join().expect("the hot loop does not panic");
            }
            std::thread::sleep(CONDUCTOR_TICK);
        };
        while let Ok(event) = evt_rx.pop() {
            conductor.on_event(event);
        }
        let mut sessions = agent_report.sessions;
        for s in sessions.iter_mut() {
            s.ring_mut().drain(DRAIN_TIMEOUT);
            conductor.record_end(s, agent_report.end);
        }
        drop(sessions);
        conductor.say_bye(agent_report.end);
        let to_ns = |t: u64| clock.delta_as_nanos(0, t);
        let cycles = &counters.cycles;
        Ok(RunReport {
            records: agent_report.records,
            replay_ns: to_ns(agent_report.replay_ticks),
            sessions: conductor.reports,
            cycle_p50_ns: to_ns(cycles.quantile(0.5)),
            cycle_p999_ns: to_ns(cycles.quantile(0.999)),
            cycle_max_ns: to_ns(cycles.max()),
            cycle_buckets_ns: cycles.buckets().into_iter().map(|(t, n)| (to_ns(t), n)).collect(),
            decode_to_post_buckets_ns: counters
                .decode_to_post
                .buckets()
                .into_iter()
                .map(|(t, n)| (to_ns(t), n))
                .collect(),
            end: agent_report.end,
        })
    }
}

/// TSC ticks per millisecond, measured against quanta's calibrated conversion.
fn ticks_per_ms(clock: &quanta::Clock) -> u64 {
    let t0 = clock.raw();
    std::thread::sleep(Duration::from_millis(5));
    let t1 = clock.raw();
    let ns = clock.delta_as_nanos(t0, t1).max(1);
    ((t1.wrapping_sub(t0)) as u128 * 1_000_000 / ns as u128).max(1) as u64
}

/// Per-record send times for paced replay: ns after the first record, from ts_recv deltas shortened to
/// `max_gap_ms` and divided by the speed-up factor. `None` for pace `max`.
pub fn schedule(records: &[DbnMboMsg], pace: Pace, max_gap_ms: u64) -> Option<Arc<[u64]>> {
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

/// Ids for a message: at most 20, then how many more.
fn id_list(ids: &[u32]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids.iter().take(SHOWN).map(u32::to_string).collect::<Vec<_>>().join(", ");
    if ids.len() > SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    text
}

/// The instrument_ids a feed carries, sorted.
fn feed_instruments(records: &[DbnMboMsg]) -> Vec<u32> {
    let mut ids: Vec<u32> = records.iter().map(|r| r.hd.instrument_id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A subscriber's control connection, read without blocking.
struct Conn {
    session_id: u64,
    stream: TcpStream,
    name: String,
    filter: Option<Vec<u32>>,
    /// Bytes read but not yet a whole frame.
    buf: Vec<u8>,
    /// A snapshot for this session is on its way to the hot loop or being sent.
    snapshot_pending: bool,
    /// The gap seq of the last request served.
    served_gap: u64,
    /// A request for a later gap that came while a snapshot was pending: served when that one is done. Any
    /// number of requests in between collapse into this one, so a flood costs one snapshot per delivery.
    rerequest: Option<u64>,
}

/// A live session's counters, for dumps.
struct Live {
    id: u64,
    counters: Arc<SessionCounters>,
}

type Handshake = (TcpStream, SocketAddr, Result<ControlMsg, ControlError>);

struct Conductor<'a> {
    cfg: &'a Config,
    /// To the hot loop; what does not fit waits, in order, for the next pass.
    cmd_tx: queue::Outbox<Command>,
    next_id: u64,
    conns: Vec<Conn>,
    reports: Vec<SessionReport>,
    live: Vec<Live>,
    handshakes: (mpsc::Sender<Handshake>, mpsc::Receiver<Handshake>),
    records: Arc<[DbnMboMsg]>,
    /// The instrument_ids of the feed, sorted.
    instruments: Vec<u32>,
    counters: Arc<AgentCounters>,
    /// The publisher's books, brought up to the hot loop's position when a snapshot is needed.
    books: Books,
    /// Feed records applied to `books`.
    applied: u64,
    clock: quanta::Clock,
    /// Accepted sessions whose subscriber side is not connected yet, with their deadline.
    pending: Vec<(Session, std::time::Instant)>,
    /// The fabric provider, opened once; attaches each subscriber's ring.
    sender: AnySender,
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
                        let msg = control::read_msg_within(&mut stream, HANDSHAKE_TIMEOUT);
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
                    Self::reject(&mut stream, peer, format!("expected a subscribe message, got {}", other.kind()));
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
                Ok((ring, fabric)) => self.admit(stream, peer, sub, ring, fabric),
                Err(reason) => Self::reject(&mut stream, peer, reason),
            }
        }
    }

    fn attach(&self, sub: &Subscribe) -> Result<(AnyRemoteRing, AcceptFabric), String> {
        if sub.name.len() > 64 {
            return Err(format!("field name: {} bytes, at most 64", sub.name.len()));
        }
        if self.live.len() >= self.cfg.publisher.max_subscribers {
            return Err(format!("publisher is full: {} subscribers", self.cfg.publisher.max_subscribers));
        }
        if !self.cfg.publisher.policies.contains(&sub.policy) {
            let allowed: Vec<&str> = self.cfg.publisher.policies.iter().map(|p| p.as_str()).collect();
            return Err(format!(
                "field policy: {} is not allowed by this publisher (allowed: {})",
                sub.policy.as_str(),
                allowed.join(", ")
            ));
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
            // A file feed knows every instrument it will ever carry: an id it does not have is a mistake (a
            // live feed, which learns instruments as it goes, will keep such a request pending instead).
            let unknown: Vec<u32> =
                ids.iter().copied().filter(|id| self.instruments.binary_search(id).is_err()).collect();
            if !unknown.is_empty() {
                return Err(format!(
                    "field instruments: {} not in this feed (it has {})",
                    id_list(&unknown),
                    id_list(&self.instruments)
                ));
            }
        }
        self.sender.attach(&sub.ring).map_err(|e| match e {
            FabricError::Mismatch { .. } => format!("field ring: {e}"),
            e => e.to_string(),
        })
    }

    /// Brings the publisher's books up to the hot loop's position and snapshots the instruments in `filter`.
    /// Returns the records and the position (feed records included).
    fn snapshot(&mut self, filter: Option<&[u32]>) -> (Vec<mdfan_wire::BookUpdate>, u64) {
        let position = self.counters.records.load(Ordering::Relaxed);
        while self.applied < position {
            if let Ok(r) = normalize_mbo(&self.records[self.applied as usize]) {
                if let Err(e) = self.books.apply(&r) {
                    tracing::warn!(record = self.applied + 1, cause = %e, "publisher book refused a feed record");
                }
            }
            self.applied += 1;
        }
        (self.books.snapshot(filter, position), position)
    }

    fn admit(
        &mut self,
        mut stream: TcpStream,
        peer: SocketAddr,
        sub: Subscribe,
        ring: AnyRemoteRing,
        fabric: AcceptFabric,
    ) {
        let id = self.next_id;
        let accept = ControlMsg::Accept(Accept {
            session_id: id,
            first_seq: 1,
            fabric,
            policy: sub.policy,
            heartbeat_interval_ms: self.cfg.publisher.heartbeat_interval_ms,
        });
        if let Err(e) = control::write_msg(&mut stream, &accept) {
            tracing::warn!(%peer, cause = %e, "subscriber went away during the handshake");
            return;
        }
        self.next_id += 1;
        // Mid-stream joiners start from a snapshot at the hot loop's position; the hot loop then sends them
        // the feed from that position on, and they go live once caught up. Before the replay starts the
        // position is 0 and the snapshot empty.
        let started = self.counters.records.load(Ordering::Relaxed) > 0;
        let (snapshot, position) = if started && sub.snapshot {
            let (records, position) = self.snapshot(sub.instruments.as_deref());
            (Some(records), position)
        } else {
            (None, self.counters.records.load(Ordering::Relaxed))
        };
        let snapshot_records = snapshot.as_ref().map_or(0, Vec::len);
        let session = Session::new(id, sub.name.clone(), ring, sub.policy, sub.instruments.clone(), position, snapshot);
        let counters = Arc::clone(&session.counters);
        // The hot loop gets the session once the subscriber's side is connected (at once on shm).
        self.pending.push((session, std::time::Instant::now() + CONNECT_TIMEOUT));
        tracing::info!(
            %peer,
            session = id,
            name = %sub.name,
            slots = sub.ring.slot_count(),
            policy = sub.policy.as_str(),
            from_record = position,
            snapshot_records,
            "subscriber attached"
        );
        let _ = stream.set_nonblocking(true);
        self.conns.push(Conn {
            session_id: id,
            stream,
            name: sub.name.clone(),
            filter: sub.instruments.clone(),
            buf: Vec::new(),
            snapshot_pending: false,
            served_gap: 0,
            rerequest: None,
        });
        self.reports.push(SessionReport::new(id, sub.name, sub.policy));
        self.live.push(Live { id, counters });
    }

    /// Sends a command to the hot loop, or keeps it (in order) until the queue has room: nothing is dropped.
    fn send(&mut self, cmd: Command) {
        self.cmd_tx.send(cmd);
    }

    fn flush_backlog(&mut self) {
        self.cmd_tx.flush();
    }

    /// Builds a snapshot for the session of connection `k` (asked for after the gap at `gap_from_seq`) and sends
    /// it to the hot loop.
    fn serve_snapshot(&mut self, k: usize, gap_from_seq: u64) {
        self.conns[k].snapshot_pending = true;
        self.conns[k].served_gap = gap_from_seq;
        let id = self.conns[k].session_id;
        let filter = self.conns[k].filter.clone();
        let (records, position) = self.snapshot(filter.as_deref());
        tracing::info!(
            session = id,
            name = %self.conns[k].name,
            gap_from_seq,
            records = records.len(),
            position,
            "snapshot requested"
        );
        self.send(Command::Snapshot { id, records, position });
    }

    /// Hands connected sessions to the hot loop; drops those whose subscriber never connected.
    fn admit_ready(&mut self) {
        let mut k = 0;
        while k < self.pending.len() {
            let (session, deadline) = &mut self.pending[k];
            if session.ring_mut().ready() {
                let (session, _) = self.pending.swap_remove(k);
                let id = session.id;
                tracing::debug!(session = id, "subscriber connected; handed to the hot loop");
                self.send(Command::Add(session));
            } else if std::time::Instant::now() > *deadline {
                let (mut session, _) = self.pending.swap_remove(k);
                tracing::warn!(session = session.id, name = %session.name, "subscriber's side never connected; dropped");
                session.close(CloseReason::FabricError);
                self.record_end(&session, CloseReason::FabricError);
                if let Some(i) = self.conns.iter().position(|c| c.session_id == session.id) {
                    let mut conn = self.conns.swap_remove(i);
                    let _ = conn.stream.set_nonblocking(false);
                    let bye = ControlMsg::Bye(Bye {
                        reason: CloseReason::FabricError,
                        detail: "the subscriber's QP never connected".into(),
                    });
                    let _ = control::write_msg(&mut conn.stream, &bye);
                }
            } else {
                k += 1;
            }
        }
    }

    /// Reads every control connection: snapshot requests are served; a closed connection means a dead
    /// subscriber, whose session is removed from the hot loop; garbage closes the connection with a reason.
    fn watch_connections(&mut self) {
        let mut buf = [0u8; 4096];
        let mut k = 0;
        while k < self.conns.len() {
            let mut closed = None;
            loop {
                match self.conns[k].stream.read(&mut buf) {
                    Ok(0) => {
                        closed = Some((CloseReason::PeerGone, "control connection closed".to_owned()));
                        break;
                    }
                    Ok(n) => self.conns[k].buf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        closed = Some((CloseReason::PeerGone, format!("control connection failed: {e}")));
                        break;
                    }
                }
            }
            // At most a few frames per connection per pass, so one chatty peer cannot hold up the others.
            for _ in 0..FRAMES_PER_PASS {
                match control::take_frame(&mut self.conns[k].buf) {
                    None => break,
                    Some(Err(e)) => {
                        closed = Some((CloseReason::ProtocolError, format!("bad control message: {e}")));
                        self.conns[k].buf.clear();
                        break;
                    }
                    Some(Ok(ControlMsg::SnapshotRequest(req))) => {
                        let c = &mut self.conns[k];
                        if !c.snapshot_pending {
                            self.serve_snapshot(k, req.gap_from_seq);
                        } else if req.gap_from_seq > c.served_gap {
                            // one snapshot at a time per session; a later gap is served when this one is done
                            c.rerequest = Some(c.rerequest.unwrap_or(0).max(req.gap_from_seq));
                        }
                    }
                    Some(Ok(ControlMsg::Bye(bye))) => {
                        let said = format!("subscriber said bye: {} {}", bye.reason.as_str(), bye.detail);
                        closed = Some((CloseReason::PeerGone, said.trim_end().to_owned()));
                        break;
                    }
                    Some(Ok(other)) => {
                        closed =
                            Some((CloseReason::ProtocolError, format!("unexpected control message {}", other.kind())));
                        break;
                    }
                }
            }
            if let Some((reason, detail)) = closed {
                let mut conn = self.conns.swap_remove(k);
                tracing::info!(session = conn.session_id, name = %conn.name, reason = reason.as_str(), %detail,
                    "subscriber leaving");
                let _ = conn.stream.set_nonblocking(false);
                let _ = control::write_msg(&mut conn.stream, &ControlMsg::Bye(Bye { reason, detail }));
                self.send(Command::Remove { id: conn.session_id, reason });
            } else {
                k += 1;
            }
        }
    }

    fn record_end(&mut self, s: &Session, end: CloseReason) {
        if let Some(r) = self.reports.iter_mut().find(|r| r.id == s.id) {
            r.update(&s.counters, &self.clock);
            r.end = Some(end);
        }
        self.live.retain(|l| l.id != s.id);
    }

    fn dump(&mut self) {
        for l in &self.live {
            if let Some(r) = self.reports.iter_mut().find(|r| r.id == l.id) {
                r.update(&l.counters, &self.clock);
            }
        }
        // Marked `counters` (the final report's lines are not), with the final report's names.
        for r in &self.reports {
            println!("counters {}", r.line());
        }
        let c = &self.counters.cycles;
        let to_ns = |t| self.clock.delta_as_nanos(0, t);
        println!(
            "counters replay records={} cycle_p50_ns={} cycle_p999_ns={} cycle_max_ns={} end=running",
            self.counters.records.load(Ordering::Relaxed),
            to_ns(c.quantile(0.5)),
            to_ns(c.quantile(0.999)),
            to_ns(c.max())
        );
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Started { sessions } => tracing::info!(sessions, "replay started"),
            Event::SnapshotDone { id, delivered, records } => {
                tracing::info!(session = id, delivered, records = records.len(), "snapshot done");
                if let Some(k) = self.conns.iter().position(|c| c.session_id == id) {
                    self.conns[k].snapshot_pending = false;
                    if let Some(gap) = self.conns[k].rerequest.take() {
                        self.serve_snapshot(k, gap);
                    }
                }
                drop(records); // freed here, off the hot path
            }
            Event::Retired { mut session, reason } => {
                session.ring_mut().drain(DRAIN_TIMEOUT);
                self.record_end(&session, reason);
                let failure = session.ring_mut().failure();
                if reason != CloseReason::EndOfStream {
                    let sent = session.counters.sent.load(Ordering::Relaxed);
                    let (id, name) = (session.id, &session.name);
                    match failure {
                        Some(detail) => tracing::warn!(session = id, %name, reason = reason.as_str(), %detail, sent,
                            "subscriber dropped"),
                        None => {
                            tracing::warn!(session = id, %name, reason = reason.as_str(), sent, "subscriber dropped")
                        }
                    }
                }
                if let Some(i) = self.conns.iter().position(|c| c.session_id == session.id) {
                    let mut conn = self.conns.swap_remove(i);
                    let _ = conn.stream.set_nonblocking(false);
                    let bye = ControlMsg::Bye(Bye { reason, detail: failure.unwrap_or_default().to_owned() });
                    let _ = control::write_msg(&mut conn.stream, &bye);
                }
                drop(session); // unmaps the ring, here, off the hot path
            }
        }
    }

    fn say_bye(&mut self, end: CloseReason) {
        for conn in &mut self.conns {
            let _ = conn.stream.set_nonblocking(false);
            let _ = control::write_msg(&mut conn.stream, &ControlMsg::Bye(Bye::new(end)));
        }
    }
}
