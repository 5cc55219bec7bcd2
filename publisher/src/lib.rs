//! mdfan-publisher: replay a feed, normalise it, fan every record out to every subscriber's ring.
//!
//! Two agents ([`mdfan_tuning::Agent`]: a `do_work` duty cycle that returns the work it did, run by a runner
//! that idles on 0):
//! - the **hot loop** ([`agent::FanoutAgent`]), on thread `mdfan-hot` pinned to `publisher.hot_core`: idling with
//!   a backoff ([`agent::WAITING_IDLE`]) while it waits for its first subscribers, busy-spinning once live;
//! - the **conductor** ([`Conductor`], on the thread that calls [`Publisher::run`], backoff up to 1 ms when
//!   idle): accepts subscribers on the control endpoint, checks their
//!   [`Subscribe`](mdfan_wire::control::Subscribe), attaches their rings, hands sessions to the hot loop through
//!   an rtrb queue, watches control connections for dead peers, logs what the hot loop reports (drops,
//!   retirements, the end) and frees retired sessions' memory off the hot path.
//!
//! [`Publisher::bind`] loads and checks the feed and binds the endpoint, so every input error surfaces before
//! anything runs; [`Publisher::run`] takes a shutdown flag (set by SIGINT/SIGTERM in the binary);
//! [`Publisher::into_agents`] builds the two agents without threads, for a caller (a test) that steps both.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod conductor;
pub mod config;
pub mod cycles;
mod pacing;
pub mod queue;
mod report;
pub mod session;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mdfan_fabric::AnySender;
use mdfan_feed::dbn::{load_mbo_file, DbnMboMsg, FeedError, MboFile};
use mdfan_wire::Books;

use mdfan_tuning::{run_agent, run_agent_until, Agent, IdleStrategy};

use crate::agent::{AgentCounters, AgentTiming, Command, Event, FanoutAgent, Phase};
pub use crate::conductor::Conductor;
use crate::config::Config;

pub use config::ConfigError;
pub use pacing::schedule;
pub use report::{RunReport, SessionReport};

/// How long a new control connection has to send its subscribe message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

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

    /// Builds the two agents of a run without starting any thread: the hot loop ([`FanoutAgent`]) and the
    /// conductor ([`Conductor`]), joined by their rtrb queues. [`Publisher::run`] runs each on its own thread;
    /// a test can step both on one (`fanout.do_work(); conductor.do_work();` until the conductor
    /// [is done](mdfan_tuning::Agent::is_done), then [`Conductor::take_report`]). Measures the TSC rate (a 5 ms
    /// sleep) and builds the pacing schedule.
    pub fn into_agents(self, shutdown: Arc<AtomicBool>) -> Agents {
        let Publisher { cfg, listener, feed, dump, counters, sender } = self;
        let max = cfg.publisher.max_subscribers;
        let (cmd_tx, cmd_rx) = rtrb::RingBuffer::<Command>::new(max * 4);
        let (evt_tx, evt_rx) = rtrb::RingBuffer::<Event>::new(max * 4);
        let clock = quanta::Clock::new();
        let ticks_per_ms = pacing::ticks_per_ms(&clock);
        let records: Arc<[DbnMboMsg]> = feed.records.into();
        let fanout = FanoutAgent {
            records: Arc::clone(&records),
            schedule_ns: schedule(&records, cfg.feed.pace, cfg.feed.max_gap_ms),
            sessions: Vec::with_capacity(max),
            commands: cmd_rx,
            events: queue::Outbox::new(evt_tx, max * 4),
            shutdown,
            wait_for: cfg.publisher.wait_for_subscribers,
            clock: clock.clone(),
            timing: AgentTiming {
                heartbeat_ticks: cfg.publisher.heartbeat_interval_ms * ticks_per_ms,
                stall_ticks: cfg.publisher.stall_timeout_ms * ticks_per_ms,
            },
            counters: Arc::clone(&counters),
            rotate: 0,
            last_heartbeat_check: 0,
            phase: Phase::Waiting,
            pos: 0,
            start_ticks: 0,
            start_instant: clock.now(),
            cycle_start: 0,
            replay_ticks: 0,
        };
        let conductor = Conductor {
            cmd_tx: queue::Outbox::new(cmd_tx, max * 4),
            listener,
            events: evt_rx,
            dump,
            report: None,
            finished: false,
            next_id: 1,
            conns: Vec::new(),
            reports: Vec::new(),
            live: Vec::new(),
            handshakes: mpsc::channel(),
            instruments: conductor::feed_instruments(&records),
            records,
            counters,
            books: Books::new(),
            applied: 0,
            clock,
            pending: Vec::new(),
            sender,
            cfg,
        };
        Agents { fanout, conductor }
    }

    /// Runs the replay to its end, or until `shutdown` is set. Blocks; the calling thread is the conductor's,
    /// under [`conductor::CONDUCTOR_IDLE`]. The hot loop runs on thread `mdfan-hot`, pinned to
    /// `publisher.hot_core`: under [`agent::WAITING_IDLE`] while it waits for subscribers, then busy-spinning.
    /// The pinning is logged here, not on the hot thread.
    ///
    /// # Errors
    /// [`PublisherError::Thread`] if the hot loop cannot be started.
    pub fn run(self, shutdown: Arc<AtomicBool>) -> Result<RunReport, PublisherError> {
        let endpoint = self.local_addr();
        let (feed_path, records) = (self.feed.path.clone(), self.feed.records.len());
        let (hot_core, control_core) = (self.cfg.publisher.hot_core, self.cfg.publisher.control_core);
        let (lock_memory, wait_for) = (self.cfg.publisher.lock_memory, self.cfg.publisher.wait_for_subscribers);
        let Agents { mut fanout, mut conductor } = self.into_agents(shutdown);
        let (pinned_tx, pinned_rx) = mpsc::sync_channel(1);
        let hot = std::thread::Builder::new()
            .name(fanout.role_name().to_owned())
            .spawn(move || {
                let pinned = hot_core.map(|core| (core, mdfan_tuning::pin_current_thread(core)));
                let _ = pinned_tx.send(pinned);
                run_agent_until(&mut fanout, agent::WAITING_IDLE, |a| !a.is_waiting());
                run_agent(&mut fanout, IdleStrategy::BusySpin);
                // Handed back, so what it still holds (commands that came after the end: sessions, snapshot
                // buffers) is freed on the conductor's thread, where a teardown failure may be logged.
                fanout
            })
            .map_err(|e| PublisherError::Thread("hot loop", e))?;
        match pinned_rx.recv() {
            Ok(Some((core, Ok(())))) => tracing::info!(core, "hot loop pinned"),
            Ok(Some((core, Err(e)))) => tracing::warn!(core, cause = %e, "hot loop not pinned"),
            Ok(None) | Err(_) => {}
        }
        if let Some(core) = control_core {
            if let Err(e) = mdfan_tuning::pin_current_thread(core) {
                tracing::warn!(cause = %e, "control thread not pinned");
            }
        }
        if lock_memory {
            if let Err(e) = mdfan_tuning::lock_memory() {
                tracing::warn!(cause = %e, "memory not locked");
            }
        }
        tracing::info!(%endpoint, feed = %feed_path.display(), records, wait_for, "publisher ready");
        run_agent_until(&mut conductor, conductor::CONDUCTOR_IDLE, |_| hot.is_finished());
        let fanout = hot.join().expect("the hot loop does not panic");
        // The hot loop is done, so its last event (`Finished`) is in the queue: a few more passes handle it.
        run_agent(&mut conductor, conductor::CONDUCTOR_IDLE);
        drop(fanout);
        Ok(conductor.take_report().expect("a finished conductor has its report"))
    }
}

/// The two agents of a run, built by [`Publisher::into_agents`].
pub struct Agents {
    /// The hot loop.
    pub fanout: FanoutAgent,
    /// The control plane.
    pub conductor: Conductor,
}
