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
mod conductor;
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

use crate::agent::{AgentCounters, AgentReport, AgentTiming, Command, Event, FanoutAgent};
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
        let ticks_per_ms = pacing::ticks_per_ms(&clock);
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

        let mut conductor = conductor::Conductor {
            cfg: &cfg,
            cmd_tx: queue::Outbox::new(cmd_tx, max * 4),
            next_id: 1,
            conns: Vec::new(),
            reports: Vec::new(),
            live: Vec::new(),
            handshakes: mpsc::channel(),
            records: Arc::clone(&records),
            instruments: conductor::feed_instruments(&records),
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
            std::thread::sleep(conductor::CONDUCTOR_TICK);
        };
        while let Ok(event) = evt_rx.pop() {
            conductor.on_event(event);
        }
        let mut sessions = agent_report.sessions;
        for s in sessions.iter_mut() {
            s.ring_mut().drain(conductor::DRAIN_TIMEOUT);
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
