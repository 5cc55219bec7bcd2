//! mdfan-publisher: replay a feed, normalise it, fan every record out to every subscriber's ring.
//!
//! Two agents ([`mdfan_tuning::Agent`]: a `do_work` duty cycle that returns the work it did, run by a runner
//! that idles on 0):
//! - the **hot loop** ([`agent::FanoutAgent`]), on thread `mdfan-hot` pinned to `publisher.hot_core`: idling with
//!   a backoff ([`agent::WAITING_IDLE`]) while it waits for its first subscribers, then busy-spinning (or, with
//!   `publisher.hot_idle = "yield"`, yielding after a run of empty cycles: [`config::HotIdle`]);
//! - the **conductor** ([`Conductor`], on the thread that calls [`Publisher::run`], backoff up to 1 ms when
//!   idle): accepts subscribers on the control endpoint, checks their
//!   [`Subscribe`](mdfan_wire::control::Subscribe), attaches their rings, hands sessions to the hot loop through
//!   an rtrb queue, watches control connections for dead peers, logs what the hot loop reports (drops,
//!   retirements, the end) and frees retired sessions' memory off the hot path.
//!
//! A third agent, the **feed handler** ([`journal::FeedAgent`], thread `mdfan-feed`), decodes the feed as it goes
//! and appends normalised records to the [`journal::Journal`], a bounded ring that the hot loop and the
//! conductor read; no feed-format type is visible past it.
//!
//! [`Publisher::bind`] opens the feed (its header is checked) and binds the endpoint, so those input errors
//! surface before anything runs; a record that is truncated or corrupt stops the feed where it is, after the
//! records before it were sent, and the stream ends with [`CloseReason::FeedError`](mdfan_fabric::CloseReason)
//! ([`RunReport::feed_error`] says why). [`Publisher::run`] takes a shutdown flag (set by SIGINT/SIGTERM in the
//! binary); [`Publisher::into_agents`] builds the three agents without threads, for a caller (a test) that
//! steps them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
pub mod agent;
pub mod book_keeper;
pub mod conductor;
pub mod config;
pub mod conn;
pub(crate) mod counter_sets;
pub mod cycles;
pub mod definitions;
pub mod feeds;
pub mod journal;
pub mod live;
pub mod live_itch;
mod pacing;
pub mod peer;
pub mod preflight;
pub mod queue;
mod report;
pub mod send_clock;
pub mod session;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mdfan_fabric::AnySender;
use mdfan_feed::dbn::FeedError;
use mdfan_wire::control::TsRecvClock;
use mdfan_wire::Symbology;

use mdfan_tuning::{run_agent, run_agent_until, Agent};

use crate::agent::{AgentCounters, AgentTiming, Command, Event, FanoutAgent, Phase};
pub use crate::conductor::Conductor;
use crate::config::Config;
pub use crate::counter_sets::ControlCounters;
use crate::feeds::FeedAgent;
use crate::journal::{Journal, JournalWriter};
use crate::live::LiveCounters;

pub use config::ConfigError;
pub use pacing::Pacer;
pub use report::{RunReport, SendCompletionReport, SessionReport, CLOCKS_LINE_NIC, CLOCKS_LINE_NO_NIC};

/// One live CME MDP 3.0 channel as bound ([`Publisher::channels`]).
#[derive(Debug, Clone)]
pub struct ChannelInfo {
    /// Its id (`[[feed.channels]]` `id`; 0 for `[lines]`' one channel).
    pub id: u16,
    /// Its counters.
    pub counters: Arc<LiveCounters>,
    /// Lines A and B as bound (with port 0 in the config, the ports the system picked).
    pub lines: [std::net::SocketAddrV4; 2],
    /// Its market recovery (snapshot) feed as bound.
    pub snapshot: Option<std::net::SocketAddrV4>,
    /// Its instrument definition feed as bound.
    pub definitions: Option<std::net::SocketAddrV4>,
}

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
    /// The ITCH 5.0 file cannot be opened (a message it cannot read stops the replay there instead: feed_error).
    #[error(transparent)]
    Itch(#[from] mdfan_feed::itch::ItchFileError),
    /// The journal (`journal.records`) cannot be allocated on this host.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalAllocError),
    /// The LOBSTER files cannot be opened, or their names are not LOBSTER's.
    #[error(transparent)]
    Lobster(#[from] mdfan_feed::lobster::LobsterError),
    /// A capture (`format = "capture"`) cannot be read.
    #[error(transparent)]
    Capture(mdfan_feed::capture::CaptureError),
    /// A relay's upstream session could not be made (`format = "mdfan"`): the endpoint and why.
    #[error("upstream: {0}")]
    Upstream(String),
    /// A live feed's line could not be opened.
    #[error("feed lines: {0}")]
    Lines(#[from] mdfan_lines::LineError),
    /// The symbol file (`feed.symbols`) is unusable.
    #[error(transparent)]
    Symbols(#[from] mdfan_feed::symbols::SymbolFileError),
    /// The Unix-domain control socket (`publisher.listen_unix`) could not be made.
    #[error("control socket {path}: {detail}")]
    ListenUnix {
        /// The socket's path.
        path: String,
        /// What is wrong: its folder, a file in the way, the OS error.
        detail: String,
    },
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

/// A bound publisher with its feed opened, ready to run.
pub struct Publisher {
    cfg: Config,
    listener: TcpListener,
    unix_listener: Option<std::os::unix::net::UnixListener>,
    feed: FeedAgent,
    /// What the rest of the publisher knows of the feed.
    traits: feeds::FeedTraits,
    /// The feed's counters (report, counters file, dumps).
    feed_counters: Vec<Arc<dyn feeds::FeedCounters>>,
    /// What the feed is, for logs.
    feed_name: String,
    symbology: Symbology,
    journal: Arc<Journal>,
    /// Set once the hot loop is gone: the feed handler stops.
    feed_stop: Arc<AtomicBool>,
    dump: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    counters: Arc<AgentCounters>,
    sender: AnySender,
    /// A live feed's lines as bound.
    bound: feeds::Bound,
    /// A live feed's definitions (ITCH Stock Directory, MDP 3.0 definition feeds), the conductor's end.
    definitions: Option<crate::definitions::DefinitionReceiver>,
    /// The counters file for `mdfan-stat` (`publisher.counters_dir`).
    counters_file: Option<mdfan_tuning::counters::CountersWriter>,
    ts_recv_clock: TsRecvClockCell,
}

/// Which clock stamped the records' `ts_recv_ns`, as every later `Accept` says it
/// ([`Accept::ts_recv_clock`](mdfan_wire::control::Accept::ts_recv_clock)): shared between whoever learns it (a
/// live feed handler, from its line socket's `StampKind`) and the conductor, which reads it for each accept.
/// Starts as [`TsRecvClock::None`] (a file replay: no wire-to-poll). Off the hot path: one relaxed atomic.
#[derive(Debug, Clone, Default)]
pub struct TsRecvClockCell(Arc<AtomicU8>);

impl TsRecvClockCell {
    /// Sets the clock the next accepts name.
    pub fn set(&self, clock: TsRecvClock) {
        let v = match clock {
            TsRecvClock::None => 0,
            TsRecvClock::Software => 1,
            TsRecvClock::Hardware => 2,
            TsRecvClock::User => 3,
        };
        self.0.store(v, Ordering::Relaxed);
    }

    /// The clock set last.
    pub fn get(&self) -> TsRecvClock {
        match self.0.load(Ordering::Relaxed) {
            1 => TsRecvClock::Software,
            2 => TsRecvClock::Hardware,
            3 => TsRecvClock::User,
            _ => TsRecvClock::None,
        }
    }
}

/// How far the replay is, readable from any thread while [`Publisher::run`] runs (for a progress display).
#[derive(Clone)]
pub struct Progress {
    counters: Arc<AgentCounters>,
    journal: Arc<Journal>,
}

impl Progress {
    /// Feed records fanned out so far.
    pub fn records(&self) -> u64 {
        self.counters.records.load(Ordering::Relaxed)
    }

    /// Feed records read so far (the total once [`Progress::feed_done`]).
    pub fn read(&self) -> u64 {
        self.journal.published()
    }

    /// Whether the feed has been read to its end (or failed).
    pub fn feed_done(&self) -> bool {
        self.journal.state() != journal::FeedState::Running
    }
}

impl Publisher {
    /// Opens the feed (checks its header), allocates and pre-faults the journal, binds the control endpoint.
    ///
    /// # Errors
    /// [`PublisherError::Feed`] naming the file; [`PublisherError::Journal`] when the host cannot give the journal's
    /// memory (naming `journal.records` and the bytes); [`PublisherError::Listen`] naming the endpoint.
    pub fn bind(cfg: Config) -> Result<Publisher, PublisherError> {
        let journal = Journal::new(cfg.journal.records)?;
        let feed_stop = Arc::new(AtomicBool::new(false));
        let writer = JournalWriter::new(Arc::clone(&journal));
        let ts_recv_clock = TsRecvClockCell::default();
        let opened = feeds::open(&cfg, &ts_recv_clock)?;
        let feed = FeedAgent::new(opened.source, writer, Arc::clone(&feed_stop));
        let sender = AnySender::open(&cfg.fabric.resolved)
            .map_err(|source| PublisherError::Fabric { provider: cfg.fabric.provider.name(), source })?;
        let listen_err = |source| PublisherError::Listen { endpoint: cfg.publisher.listen.clone(), source };
        let listener = TcpListener::bind(&cfg.publisher.listen).map_err(listen_err)?;
        listener.set_nonblocking(true).map_err(listen_err)?;
        let unix_listener = cfg.publisher.listen_unix.as_deref().map(listen_unix).transpose()?;
        let counters_file = counters_file(&cfg, listener.local_addr().ok(), opened.counters.len());
        Ok(Publisher {
            cfg,
            listener,
            unix_listener,
            feed,
            traits: opened.traits,
            feed_counters: opened.counters,
            feed_name: opened.name,
            symbology: opened.symbology,
            journal,
            feed_stop,
            dump: Arc::new(AtomicBool::new(false)),
            reload: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(AgentCounters::default()),
            sender,
            bound: opened.bound,
            definitions: opened.definitions,
            counters_file,
            ts_recv_clock,
        })
    }

    /// A live ITCH 5.0 feed's MoldUDP64 counters (`None` otherwise).
    pub fn mold_counters(&self) -> Option<Arc<crate::live_itch::MoldCounters>> {
        self.bound.mold.as_ref().map(|(c, _)| Arc::clone(c))
    }

    /// A live MDP 3.0 feed's first channel's counters (`None` for another feed); every channel's:
    /// [`Publisher::channels`].
    pub fn live_counters(&self) -> Option<Arc<LiveCounters>> {
        self.bound.channels.first().map(|c| Arc::clone(&c.counters))
    }

    /// A live MDP 3.0 feed's channels as bound, in config order (empty for another feed).
    pub fn channels(&self) -> &[ChannelInfo] {
        &self.bound.channels
    }

    /// A live feed's lines as bound (A, B; an MDP 3.0 feed's first channel's): with port 0 in the config, the
    /// ports the system picked. Live ITCH without line B gives A twice.
    pub fn line_addrs(&self) -> Option<[std::net::SocketAddrV4; 2]> {
        self.bound.channels.first().map(|c| c.lines).or(self.bound.mold.as_ref().map(|(_, a)| *a))
    }

    /// A live MDP 3.0 feed's (first channel's) market recovery (snapshot) feed as bound, if it has one.
    pub fn snapshot_addr(&self) -> Option<std::net::SocketAddrV4> {
        self.bound.channels.first().and_then(|c| c.snapshot)
    }

    /// What the feed is, for logs: the file, `mdp3 line_a=.. line_b=..` (with `channel=ID` before each channel's
    /// lines when the config lists channels), or `itch50 moldudp64 line_a=.. line_b=..` (`line_b=none` when the
    /// config has no line B).
    pub fn feed_name(&self) -> String {
        self.feed_name.clone()
    }

    /// Says which clock stamps the records' `ts_recv_ns`: every `Accept` sent from now on carries it, so
    /// subscribers measure wire-to-poll when it is live. A file replay leaves it at [`TsRecvClock::None`] (its
    /// `ts_recv_ns` is the capture's time); a live feed sets it from its line socket's stamp kind
    /// (`StampKind::Hardware` -> `Hardware`, `Software` -> `Software`, `User` -> `User`). Callable before
    /// [`Publisher::run`]; a feed handler that learns it later sets it through [`Publisher::ts_recv_clock_cell`].
    pub fn set_ts_recv_clock(&self, clock: TsRecvClock) {
        self.ts_recv_clock.set(clock);
    }

    /// The shared cell behind [`Publisher::set_ts_recv_clock`], for a thread that learns the clock while running.
    pub fn ts_recv_clock_cell(&self) -> TsRecvClockCell {
        self.ts_recv_clock.clone()
    }

    /// A handle on the replay's progress.
    pub fn progress(&self) -> Progress {
        Progress { counters: Arc::clone(&self.counters), journal: Arc::clone(&self.journal) }
    }

    /// The Unix-domain control socket's path (`publisher.listen_unix`), if it has one.
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        self.cfg.publisher.listen_unix.as_deref()
    }

    /// The bound control endpoint.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The feed file (a live feed: none).
    pub fn feed_path(&self) -> Option<&std::path::Path> {
        self.cfg.feed.path()
    }

    /// The instruments the publisher can name (the feed's metadata, then `feed.symbols`): what subscribers'
    /// `symbols` resolve against, and what their `Accept` carries. For a live ITCH feed, only `feed.symbols`'
    /// here: the conductor adds the Stock Directory messages as they come ([`live_itch`]'s module docs).
    pub fn symbology(&self) -> &Symbology {
        &self.symbology
    }

    /// The journal's size, in records.
    pub fn journal_records(&self) -> u64 {
        self.journal.capacity()
    }

    /// Set this flag (e.g. from SIGHUP) to have the conductor re-read `[access]` from the config file.
    pub fn reload_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.reload)
    }

    /// Set this flag (e.g. from SIGUSR1) to have the conductor print every counter once.
    pub fn dump_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.dump)
    }

    /// Builds the three agents of a run without starting any thread: the feed handler ([`FeedAgent`]), the hot
    /// loop ([`FanoutAgent`]) and the conductor ([`Conductor`]), joined by the journal and their rtrb queues.
    /// [`Publisher::run`] runs each on its own thread; a test can step all on one (`feed.do_work();
    /// fanout.do_work(); conductor.do_work();` until the conductor [is done](mdfan_tuning::Agent::is_done), then
    /// [`Conductor::take_report`]). Measures the TSC rate (a 5 ms sleep).
    pub fn into_agents(self, shutdown: Arc<AtomicBool>) -> Agents {
        let Publisher {
            cfg,
            listener,
            unix_listener,
            feed,
            traits,
            feed_counters,
            feed_name: _,
            symbology,
            journal,
            feed_stop: _,
            dump,
            reload,
            counters,
            sender,
            bound: _,
            definitions,
            counters_file,
            ts_recv_clock,
        } = self;
        let is_live = traits.live;
        let max = cfg.publisher.max_subscribers;
        let (cmd_tx, cmd_rx) = rtrb::RingBuffer::<Command>::new(max * 4);
        let (evt_tx, evt_rx) = rtrb::RingBuffer::<Event>::new(max * 4);
        let clock = quanta::Clock::new();
        let ticks_per_ms = pacing::ticks_per_ms(&clock);
        let fanout = FanoutAgent {
            journal: Arc::clone(&journal),
            pacer: Pacer::new(cfg.feed.pace(), cfg.feed.max_gap_ms()),
            sessions: Vec::with_capacity(max),
            commands: cmd_rx,
            events: queue::Outbox::new(evt_tx, max * 4),
            shutdown,
            // The market does not wait for subscribers: a live feed goes out (to whoever is attached) at once.
            wait_for: if is_live { 0 } else { cfg.publisher.wait_for_subscribers },
            clock: clock.clone(),
            timing: AgentTiming {
                heartbeat_ticks: cfg.publisher.heartbeat_interval_ms * ticks_per_ms,
                stall_ticks: cfg.publisher.stall_timeout_ms * ticks_per_ms,
                catchup_hold_ticks: cfg.publisher.catchup_hold_ms * ticks_per_ms,
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
            catchup_floor: u64::MAX,
            hold_for_catchup: !is_live,
            floor_full_since: 0,
            catching_up: true,
            published_seen: 0,
            send_clock: None,
        };
        let conductor = Conductor::new(conductor::Parts {
            cmd_tx: queue::Outbox::new(cmd_tx, max * 4),
            listener,
            unix_listener,
            events: evt_rx,
            dump,
            reload,
            journal,
            counters,
            symbology,
            definitions,
            sender,
            ts_recv_clock,
            counters_file,
            feed_counters,
            traits,
            clock,
            cfg,
        });
        Agents { feed, fanout, conductor }
    }

    /// Runs the replay to its end, or until `shutdown` is set. Blocks; the calling thread is the conductor's,
    /// under [`conductor::CONDUCTOR_IDLE`]. The hot loop runs on thread `mdfan-hot`, pinned to
    /// `publisher.hot_core`: under [`agent::WAITING_IDLE`] while it waits for subscribers, then busy-spinning
    /// (`publisher.hot_idle`, [`config::HotIdle`]).
    /// The pinning is logged here, not on the hot thread.
    ///
    /// # Errors
    /// [`PublisherError::Thread`] if the hot loop cannot be started.
    pub fn run(self, shutdown: Arc<AtomicBool>) -> Result<RunReport, PublisherError> {
        let endpoint = self.local_addr();
        let (feed_name, journal_records) = (self.feed_name(), self.journal.capacity());
        let feed_stop = Arc::clone(&self.feed_stop);
        let (hot_core, control_core) = (self.cfg.publisher.hot_core, self.cfg.publisher.control_core);
        let hot_idle = self.cfg.publisher.hot_idle.strategy();
        let lock_memory = self.cfg.publisher.lock_memory;
        // A live feed starts at once (the market does not wait).
        let wait_for = if self.traits.live { 0 } else { self.cfg.publisher.wait_for_subscribers };
        let feed_on_hot_thread = self.cfg.publisher.feed_on_hot_thread;
        let Agents { mut feed, fanout, mut conductor } = self.into_agents(shutdown);
        let (feed_thread, mut hot_agent) = if feed_on_hot_thread {
            (None, HotThread { fanout, feed: Some(feed) })
        } else {
            let feed_idle = feed.idle(hot_idle);
            let thread = std::thread::Builder::new()
                .name(feed.role_name().to_owned())
                .spawn(move || run_agent(&mut feed, feed_idle))
                .map_err(|e| PublisherError::Thread("feed", e))?;
            (Some(thread), HotThread { fanout, feed: None })
        };
        let (pinned_tx, pinned_rx) = mpsc::sync_channel(1);
        let hot = std::thread::Builder::new()
            .name(hot_agent.role_name().to_owned())
            .spawn(move || {
                let pinned = hot_core.map(|core| (core, mdfan_tuning::pin_current_thread(core)));
                let _ = pinned_tx.send(pinned);
                run_agent_until(&mut hot_agent, agent::WAITING_IDLE, |a| !a.fanout.is_waiting());
                run_agent(&mut hot_agent, hot_idle);
                // Handed back, so what it still holds (commands that came after the end: sessions, snapshot
                // buffers) is freed on the conductor's thread, where a teardown failure may be logged.
                hot_agent
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
        tracing::info!(%endpoint, feed = %feed_name, journal_records, wait_for, feed_on_hot_thread, "publisher ready");
        run_agent_until(&mut conductor, conductor::CONDUCTOR_IDLE, |_| hot.is_finished());
        let fanout = hot.join().expect("the hot loop does not panic");
        feed_stop.store(true, Ordering::Relaxed); // nobody reads the journal any more
        if let Some(feed_thread) = feed_thread {
            let _ = feed_thread.join();
        }
        // The hot loop is done, so its last event (`Finished`) is in the queue: a few more passes handle it.
        run_agent(&mut conductor, conductor::CONDUCTOR_IDLE);
        drop(fanout);
        Ok(conductor.take_report().expect("a finished conductor has its report"))
    }
}

/// What the hot thread runs: the hot loop, and with `publisher.feed_on_hot_thread` the file feed's handler too,
/// whose duty cycle (up to 256 records decoded into the journal) runs only after one of the hot loop's that sent
/// nothing (the journal had no record for it, or the next was not due yet), so a record that is ready never
/// waits for decoding.
struct HotThread<H = FanoutAgent, F = FeedAgent> {
    fanout: H,
    feed: Option<F>,
}

impl<H: Agent, F: Agent> Agent for HotThread<H, F> {
    fn role_name(&self) -> &str {
        self.fanout.role_name()
    }

    #[inline]
    fn do_work(&mut self) -> usize {
        let sent = self.fanout.do_work();
        match self.feed.as_mut() {
            Some(feed) if sent == 0 && !feed.is_done() => feed.do_work(),
            _ => sent,
        }
    }

    fn is_done(&self) -> bool {
        self.fanout.is_done()
    }
}

/// Binds the Unix-domain control socket at `path` (non-blocking, mode 0660: the owner and the socket's group,
/// the publisher's own, may connect; the folder decides who reaches it). The folder must be one nobody else may
/// replace files in; a socket left there by an earlier run of this user is replaced, anything else is refused.
fn listen_unix(path: &std::path::Path) -> Result<std::os::unix::net::UnixListener, PublisherError> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
    let err = |detail: String| PublisherError::ListenUnix { path: path.display().to_string(), detail };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    mdfan_fabric::shm::check_dir(dir).map_err(|e| err(e.to_string()))?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let me = mdfan_fabric::shm::current_euid();
        if !meta.file_type().is_socket() || meta.uid() != me {
            return Err(err(format!(
                "something else is there (a {}, owned by {}): not replaced",
                if meta.file_type().is_socket() { "socket" } else { "file that is not a socket" },
                mdfan_fabric::shm::user_label(meta.uid())
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(err("another process listens there (a publisher already running?)".into()));
        }
        std::fs::remove_file(path).map_err(|e| err(format!("cannot remove the old socket: {e}")))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(|e| err(format!("cannot listen: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(|e| err(format!("chmod: {e}")))?;
    listener.set_nonblocking(true).map_err(|e| err(format!("non-blocking: {e}")))?;
    Ok(listener)
}

/// The counters file's path for a publisher listening on `addr`: `<counters_dir>/mdfan-publisher-<ip>_<port>.counters`.
pub fn counters_path(dir: &std::path::Path, addr: SocketAddr) -> std::path::PathBuf {
    dir.join(format!("mdfan-publisher-{}_{}.counters", addr.ip(), addr.port()))
}

/// Creates the counters file (`publisher.counters_dir`), or logs why not: the run goes on without it.
fn counters_file(
    cfg: &Config,
    addr: Option<SocketAddr>,
    feed_sets: usize,
) -> Option<mdfan_tuning::counters::CountersWriter> {
    let dir = &cfg.publisher.counters_dir;
    let addr = addr?;
    if dir.as_os_str().is_empty() {
        return None;
    }
    // The run's rows, 40 per feed counter set (an MDP 3.0 channel's has 30, a MoldUDP64 session's about as many), 14 per live
    // session and as many again for ended ones.
    let slots = 32 + 40 * feed_sets + 14 * 2 * cfg.publisher.max_subscribers;
    match mdfan_tuning::counters::CountersWriter::create(
        &counters_path(dir, addr),
        "publisher",
        &addr.to_string(),
        slots,
    ) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(cause = %e, "no counters file: mdfan-stat will not see this publisher");
            None
        }
    }
}

/// The three agents of a run, built by [`Publisher::into_agents`].
pub struct Agents {
    /// The feed handler: decodes the feed into the journal.
    pub feed: FeedAgent,
    /// The hot loop.
    pub fanout: FanoutAgent,
    /// The control plane.
    pub conductor: Conductor,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent that returns the next of `work` per duty cycle (0 once they run out) and logs its calls.
    struct Scripted {
        name: &'static str,
        work: Vec<usize>,
        done_after: usize,
        calls: std::rc::Rc<std::cell::RefCell<Vec<(&'static str, usize)>>>,
    }

    impl Agent for Scripted {
        fn role_name(&self) -> &str {
            self.name
        }
        fn do_work(&mut self) -> usize {
            let n = if self.work.is_empty() { 0 } else { self.work.remove(0) };
            self.calls.borrow_mut().push((self.name, n));
            self.done_after = self.done_after.saturating_sub(1);
            n
        }
        fn is_done(&self) -> bool {
            self.done_after == 0
        }
    }

    #[test]
    fn the_hot_thread_runs_the_feed_only_after_a_hot_cycle_that_sent_nothing_and_never_once_it_is_done() {
        let calls = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let hot = Scripted { name: "hot", work: vec![0, 1, 1, 0, 0, 1], done_after: 6, calls: calls.clone() };
        // the feed appends 256, then 100 and ends (done after its second cycle)
        let feed = Scripted { name: "feed", work: vec![256, 100], done_after: 2, calls: calls.clone() };
        let mut t = HotThread { fanout: hot, feed: Some(feed) };
        assert_eq!(t.role_name(), "hot");
        let work: Vec<usize> = (0..6).map(|_| t.do_work()).collect();
        assert_eq!(work, [256, 1, 1, 100, 0, 1]);
        assert_eq!(
            *calls.borrow(),
            [("hot", 0), ("feed", 256), ("hot", 1), ("hot", 1), ("hot", 0), ("feed", 100), ("hot", 0), ("hot", 1)]
        );
        assert!(t.is_done(), "done with the hot loop");
    }
}
