//! The conductor: the publisher's control plane, an [`Agent`] run on the thread that calls
//! [`crate::Publisher::run`] under a backoff idle strategy ([`CONDUCTOR_IDLE`]). One duty cycle
//! ([`Conductor::do_work`]) is one pass: move waiting commands into the hot loop's queue, follow the journal
//! (the [`BookKeeper`]'s books at the hot loop's position), take a live ITCH feed's Stock Directory definitions
//! into the symbology (`Conductor::take_definitions`), accept new control connections (TCP and the Unix-domain
//! socket), read handshakes and answer them (attach rings), hand connected sessions to the hot loop, read and
//! write every session's control connection (snapshot requests, departures, byes), handle what the hot loop
//! reports (retirements, snapshot buffers, the end of the replay), print the counters when asked and rewrite the
//! counters file by walking the registered [`CounterSet`]s; while a session's send completions carry NIC
//! timestamps, it maps the NIC clock and the TSC onto `CLOCK_REALTIME` for the hot loop about once a second
//! (`Conductor::refresh_send_clock`). It logs what the hot loop cannot and frees retired sessions' memory.
//!
//! **Nothing a client does can stall it.** Every socket is non-blocking and every connection has bounded
//! buffers and a write deadline ([`crate::conn`]): a pass never waits for a peer, so SIGTERM and SIGUSR1 are
//! served within a pass (a millisecond idle, the work of the pass otherwise) whatever the clients do. Accepts
//! and frames per pass are bounded, handshakes in progress too ([`MAX_HANDSHAKES`]), and nothing a client sends
//! makes the publisher build a frame larger than [`control::MAX_FRAME_BYTES`] ([`crate::access::check_subscribe`]
//! de-duplicates and caps the lists; [`fit_in_a_frame`] the definitions).
//!
//! **One entry per session** ([`SessionEntry`]): its control connection, report, holds, snapshot state and rate,
//! and where it is in its life ([`Stage`]: connecting, live, leaving); an ended session leaves only its
//! report. It is done once the hot loop's [`Event::Finished`] has been handled: the run report is then in
//! [`Conductor::take_report`].

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_fabric::{AnyRemoteRing, AnySender, CloseReason, FabricError, Peer};
use mdfan_wire::control::{self, Accept, AcceptFabric, Bye, ControlError, ControlMsg, Reject, Subscribe};
use mdfan_wire::{InstrumentDef, Symbology};

use mdfan_tuning::counters::CountersWriter;
use mdfan_tuning::{Agent, IdleStrategy};

use crate::access::{self, shown, shown_name, AuthThrottle, FailureLog, PeerKey, TokenBucket};
use crate::agent::{AgentCounters, AgentReport, Command, Event};
use crate::book_keeper::BookKeeper;
use crate::config::Config;
use crate::conn::{ControlConn, Overflow, Received, Stream, SESSION_FRAME_BYTES, SUBSCRIBE_FRAME_BYTES};
use crate::counter_sets::{ControlCounters, CounterSet, RunCounters};
use crate::journal::{FeedState, Journal};
use crate::peer::PeerInfo;
use crate::queue;
use crate::report::{RunReport, SessionReport};
use crate::send_clock::{SendClockMap, TscRealtime, SEND_CLOCK_REALIGN};
use crate::session::{Session, SessionCounters};
use crate::HANDSHAKE_TIMEOUT;

/// The `tracing` target of the audit log: connects (`event = "accept"`), refusals (`refuse`, with the reason),
/// failed authentications summed up per peer (`auth_summary`), departures (`leave`), drops (`drop`, with the
/// reason) and access reloads (`reload`). Every name and detail a peer chose is escaped and bounded
/// ([`crate::access::shown`]). Read it with the other logs (`RUST_LOG=info`, the default) or from the JSON log
/// (`--log-json`).
pub const AUDIT: &str = "mdfan_audit";

/// How often the conductor rewrites the counters file.
pub const COUNTERS_PERIOD: Duration = Duration::from_millis(100);

/// The conductor runner's idle strategy: after a pass that did nothing it sleeps, from 1 us doubling to 1 ms (it is
/// off the hot path; a pass that did something resets it, so a handshake in progress is served promptly).
pub const CONDUCTOR_IDLE: IdleStrategy = IdleStrategy::Backoff { spins: 0, yields: 0, max_park: CONDUCTOR_MAX_PARK };
/// The conductor's longest idle sleep between passes.
pub(crate) const CONDUCTOR_MAX_PARK: Duration = Duration::from_millis(1);
/// How long an accepted subscriber's side has to come up (verbs: its QP to RTS and first credit).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Control frames read from one connection per conductor pass.
pub(crate) const FRAMES_PER_PASS: usize = 8;
/// How long a retiring ring may take to complete what was posted to it.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_millis(200);
/// Connections accepted per pass (per listener): a connect flood cannot hold a pass.
pub const ACCEPTS_PER_PASS: usize = 64;
/// Handshakes (connections that have not subscribed yet) in progress at once; past it a new connection is closed
/// at once (counted: `mdfan_control_closed_total{cause="handshake_limit"}`).
pub const MAX_HANDSHAKES: usize = 512;
/// Handshakes in progress at once from one peer (its local user when it is on this host, else its address): past
/// it the peer's new connection is refused at once, so one local user holding idle connections cannot take every
/// [`MAX_HANDSHAKES`] place and lock the others out (counted: `mdfan_control_closed_total{cause="peer_handshake_limit"}`).
pub const MAX_HANDSHAKES_PER_PEER: usize = 64;
/// How long the end of the run waits, in all, for its last byes to be written.
pub const BYE_FLUSH: Duration = Duration::from_millis(100);
/// Snapshot requests refused for a session's rate, times `publisher.snapshot_requests_per_s`, after which the
/// session is ended (`Bye` `protocol_error`): a flood, not a subscriber resyncing.
pub const SNAPSHOT_FLOOD_SECONDS: u64 = 4;

/// An accept whose definitions would make it larger than a control frame may be keeps the first ones that fit
/// (logged): the subscriber still gets its records, some without a symbol. Each definition is sized once (its
/// JSON and a comma), so fitting costs one encoding of the definitions, not one per try.
fn fit_in_a_frame(mut msg: ControlMsg) -> ControlMsg {
    let ControlMsg::Accept(accept) = &mut msg else { return msg };
    let limit = 4 + control::MAX_FRAME_BYTES as usize;
    let definitions = std::mem::take(&mut accept.definitions);
    let all = definitions.len();
    // the frame without its definitions, plus `,"definitions":[]`
    let mut used = control::encode(&ControlMsg::Accept(accept.clone())).len() + ",\"definitions\":[]".len();
    let mut keep = 0;
    for d in &definitions {
        let bytes = serde_json::to_vec(d).map_or(usize::MAX / 2, |v| v.len()) + 1;
        if used + bytes > limit {
            break;
        }
        used += bytes;
        keep += 1;
    }
    accept.definitions = definitions;
    accept.definitions.truncate(keep);
    if keep < all {
        tracing::warn!(
            sent = keep,
            known = all,
            "too many instrument definitions for one accept frame: only the first ones are sent"
        );
    }
    msg
}

/// A journal position the conductor holds for a session (a file feed) until the hot loop has taken the command
/// that starts the session there, and holds it itself ([`SessionCounters::adopted`] reaches `command`).
/// Without it, a late joiner whose snapshot position was overwritten on its way to the hot loop got a fresh
/// snapshot at a fresh position, which could be overwritten the same way, forever, while the feed ran ahead.
pub(crate) struct Hold {
    session_id: u64,
    position: u64,
    /// The session's command count this hold waits for.
    command: u64,
    counters: Arc<SessionCounters>,
}

/// Where a session is in its life.
enum Stage {
    /// Accepted, its subscriber's side not connected yet (verbs: its QP to RTS, the first credit); handed to the
    /// hot loop once it is, dropped (`fabric_error`) past the deadline.
    Connecting { session: Box<Session>, deadline: Instant },
    /// In the hot loop.
    Live,
    /// Its control connection ended: the hot loop was told to remove it; its retirement is awaited.
    Leaving,
}

/// One snapshot at a time per session, and a rate: see [`Conductor::on_snapshot_request`].
struct SnapshotState {
    /// A snapshot for this session is on its way to the hot loop or being sent.
    pending: bool,
    /// The gap seq of the last request served.
    served_gap: u64,
    /// A request for a later gap that came while a snapshot was pending: served when that one is done. Any
    /// number of requests in between collapse into this one.
    rerequest: Option<u64>,
    /// Commands sent to the hot loop for this session: its `Add`, then each `Snapshot`.
    commands: u64,
    /// Requests the subscriber may still make (`publisher.snapshot_requests_per_s`).
    bucket: TokenBucket,
    /// Requests refused for the rate.
    refused: u64,
    /// Requests refused since the last one served: a flood is this many, not a session's total.
    refused_run: u64,
}

/// The conductor's entry for one subscriber session (see the module docs).
struct SessionEntry {
    id: u64,
    name: String,
    /// The control connection; `None` once it is closed or closing.
    conn: Option<ControlConn>,
    filter: Option<Vec<u32>>,
    counters: Arc<SessionCounters>,
    report: SessionReport,
    stage: Stage,
    snapshot: SnapshotState,
    /// Journal positions held for it until the hot loop holds them ([`Hold`]).
    holds: Vec<Hold>,
}

/// A connection that has not subscribed yet.
struct Handshake {
    conn: ControlConn,
    /// When it must have sent its subscribe message.
    deadline: Instant,
    /// Authenticated, resolved and filtered to its entitlement, waiting for the feed to show the instruments it
    /// names ([`Conductor::instruments_unsettled`]), with the ring's descriptor if one came.
    waiting: Option<(Subscribe, Option<OwnedFd>)>,
}

/// What [`crate::Publisher::into_agents`] hands the conductor: the one place it is built from
/// ([`Conductor::new`]).
pub(crate) struct Parts {
    pub(crate) cfg: Config,
    /// The TCP control endpoint (`publisher.listen`), non-blocking.
    pub(crate) listener: TcpListener,
    /// The Unix-domain control endpoint (`publisher.listen_unix`), non-blocking.
    pub(crate) unix_listener: Option<UnixListener>,
    /// From the hot loop.
    pub(crate) events: rtrb::Consumer<Event>,
    /// To the hot loop.
    pub(crate) cmd_tx: queue::Outbox<Command>,
    /// Set (e.g. by SIGUSR1) to have the next pass print every counter.
    pub(crate) dump: Arc<AtomicBool>,
    /// Set (e.g. by SIGHUP) to have the next pass re-read `[access]` from the config file.
    pub(crate) reload: Arc<AtomicBool>,
    /// Normalised feed records, filled by the feed handler.
    pub(crate) journal: Arc<Journal>,
    /// The hot loop's counters.
    pub(crate) counters: Arc<AgentCounters>,
    /// The instruments the publisher can name.
    pub(crate) symbology: Symbology,
    /// A live feed's instrument definitions (ITCH Stock Directory, MDP 3.0 definition feeds), from the feed
    /// thread.
    pub(crate) definitions: Option<crate::definitions::DefinitionReceiver>,
    /// The fabric provider, opened once.
    pub(crate) sender: AnySender,
    /// Which clock stamped `ts_recv_ns`.
    pub(crate) ts_recv_clock: crate::TsRecvClockCell,
    /// The counters file `mdfan-stat` reads.
    pub(crate) counters_file: Option<CountersWriter>,
    /// The feed's counters (none, one, or one per live MDP 3.0 channel).
    pub(crate) feed_counters: Vec<Arc<dyn crate::feeds::FeedCounters>>,
    /// What the conductor must know of the feed.
    pub(crate) traits: crate::feeds::FeedTraits,
    pub(crate) clock: quanta::Clock,
}

/// The control plane's state. See the module docs.
pub struct Conductor {
    pub(crate) cfg: Config,
    listener: TcpListener,
    unix_listener: Option<UnixListener>,
    events: rtrb::Consumer<Event>,
    dump: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    /// The counters file (`publisher.counters_dir`), rewritten every [`COUNTERS_PERIOD`].
    counters_file: Option<CountersWriter>,
    counters_written: Instant,
    /// A failed write of the counters file was logged.
    counters_failure_logged: bool,
    /// What the counters file shows besides the control plane's and the sessions' rows.
    counter_sets: Vec<Box<dyn CounterSet>>,
    /// The feed's counters (for the counters file, the dump and the report).
    feed_counters: Vec<Arc<dyn crate::feeds::FeedCounters>>,
    /// What the conductor must know of the feed: live or a file, the book its records build, price-level books.
    traits: crate::feeds::FeedTraits,
    /// The run report, once the hot loop has finished and the conductor has wrapped up (until taken).
    report: Option<RunReport>,
    /// The hot loop's end has been handled: nothing more to do.
    finished: bool,
    /// To the hot loop; what does not fit waits, in order, for the next pass.
    cmd_tx: queue::Outbox<Command>,
    next_id: u64,
    /// The sessions not ended, by id.
    sessions: BTreeMap<u64, SessionEntry>,
    /// The reports of the sessions that ended, in the order they ended.
    ended: Vec<SessionReport>,
    /// Connections that have not subscribed yet.
    handshakes: Vec<Handshake>,
    /// Connections writing their last frame (a `Reject`, a `Bye`) before they close.
    closing: Vec<ControlConn>,
    /// Normalised feed records, filled by the feed handler.
    journal: Arc<Journal>,
    /// The instrument_ids seen in the journal so far.
    instruments: std::collections::BTreeSet<u32>,
    /// The instruments the publisher can name: subscribers' `symbols` resolve against it, and each `Accept`
    /// carries the definitions of the subscriber's instruments.
    pub(crate) symbology: Symbology,
    /// A live feed's instrument definitions, from the feed thread: drained into `symbology` every pass
    /// ([`Conductor::take_definitions`]).
    pub(crate) definitions: Option<crate::definitions::DefinitionReceiver>,
    /// Definitions the feed thread dropped (queue full) that were already logged.
    pub(crate) definitions_dropped_logged: u64,
    /// MDP 3.0 definitions without a usable symbol when last logged.
    definitions_refused_logged: u64,
    /// Journal positions scanned for instruments.
    seen: u64,
    counters: Arc<AgentCounters>,
    /// The publisher's books, kept at the hot loop's position from the journal (every pass).
    keeper: BookKeeper,
    clock: quanta::Clock,
    /// The fabric provider, opened once; attaches each subscriber's ring.
    sender: AnySender,
    /// Which clock stamped `ts_recv_ns`, as each accept says it (`Publisher::set_ts_recv_clock`).
    ts_recv_clock: crate::TsRecvClockCell,
    /// A session whose send completions carry NIC timestamps was admitted: the clocks are mapped onto
    /// `CLOCK_REALTIME` for the hot loop from then on ([`Conductor::refresh_send_clock`]).
    sends_stamped: bool,
    /// When the clocks were last mapped for the hot loop (`None`: never).
    send_clock_at: Option<Instant>,
    /// The control plane's own counts.
    control: ControlCounters,
    /// Failed authentications per peer.
    throttle: AuthThrottle,
    /// When the auth throttle's windows were last summed up.
    throttle_checked: Instant,
    /// When a handshake-limit refusal was last logged (one line a second at most).
    handshake_limit_logged: Option<Instant>,
    /// When the per-peer handshake limit was last logged, and a handshake timeout (both summed up).
    peer_limit_logged: Option<Instant>,
    timeouts_logged: Option<Instant>,
}

/// Why a session's control connection ended, as the conductor closes it.
struct Leaving {
    reason: CloseReason,
    detail: String,
}

impl Conductor {
    /// Builds the conductor from what the publisher bound and opened, with its invariants: no session, no
    /// connection, the books empty at position 0 (price-level books only for a feed that carries price levels),
    /// the counter sets registered (the run's, then the live feed's).
    pub(crate) fn new(parts: Parts) -> Conductor {
        let Parts {
            cfg,
            listener,
            unix_listener,
            events,
            cmd_tx,
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
        } = parts;
        // Price-level books for snapshots, for a feed that carries price levels.
        let price_levels = traits.price_level_instruments;
        let mut counter_sets: Vec<Box<dyn CounterSet>> = vec![Box::new(RunCounters {
            counters: Arc::clone(&counters),
            journal: Arc::clone(&journal),
            clock: clock.clone(),
        })];
        for c in &feed_counters {
            counter_sets.push(Box::new(Arc::clone(c)));
        }
        let now = Instant::now();
        Conductor {
            cfg,
            listener,
            unix_listener,
            events,
            dump,
            reload,
            counters_file,
            counters_written: now,
            counters_failure_logged: false,
            counter_sets,
            feed_counters,
            traits,
            report: None,
            finished: false,
            cmd_tx,
            next_id: 1,
            sessions: BTreeMap::new(),
            ended: Vec::new(),
            handshakes: Vec::new(),
            closing: Vec::new(),
            journal,
            instruments: std::collections::BTreeSet::new(),
            symbology,
            definitions,
            definitions_dropped_logged: 0,
            definitions_refused_logged: 0,
            seen: 0,
            counters,
            keeper: BookKeeper::new(price_levels),
            clock,
            sender,
            ts_recv_clock,
            sends_stamped: false,
            send_clock_at: None,
            control: ControlCounters::default(),
            throttle: AuthThrottle::default(),
            throttle_checked: now,
            handshake_limit_logged: None,
            peer_limit_logged: None,
            timeouts_logged: None,
        }
    }

    /// The control plane's own counts so far.
    pub fn control_counters(&self) -> ControlCounters {
        self.control
    }

    /// Accepts new control connections, at most [`ACCEPTS_PER_PASS`] per listener: each becomes a handshake,
    /// read without blocking until its subscribe message is whole or [`HANDSHAKE_TIMEOUT`] has passed. Returns
    /// the connections accepted.
    pub(crate) fn accept(&mut self) -> usize {
        let mut n = 0;
        for _ in 0..ACCEPTS_PER_PASS {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    n += 1;
                    let local = stream.local_addr().unwrap_or_else(|_| self.local_addr());
                    self.take_connection(Stream::Tcp(stream), PeerInfo::tcp(local, peer));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    break;
                }
            }
        }
        for _ in 0..ACCEPTS_PER_PASS {
            let Some(listener) = &self.unix_listener else { break };
            match listener.accept() {
                Ok((stream, _)) => {
                    n += 1;
                    let peer = PeerInfo::unix(&stream);
                    self.take_connection(Stream::Unix(stream), peer);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed on the Unix-domain socket");
                    break;
                }
            }
        }
        n
    }

    fn local_addr(&self) -> std::net::SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    fn take_connection(&mut self, stream: Stream, peer: PeerInfo) {
        self.control.connections += 1;
        let same_peer = |h: &Handshake| match peer.uid {
            Some(uid) => h.conn.peer.uid == Some(uid),
            None => h.conn.peer.uid.is_none() && h.conn.peer.ip == peer.ip,
        };
        if self.handshakes.iter().filter(|h| same_peer(h)).count() >= MAX_HANDSHAKES_PER_PEER {
            self.control.handshakes_over_peer_limit += 1;
            let reason = format!(
                "too many connections from this peer (uid {}, {}) have not subscribed yet ({MAX_HANDSHAKES_PER_PEER}): \
                 this one is refused",
                peer.uid_text(),
                peer.addr
            );
            if self.peer_limit_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                self.peer_limit_logged = Some(Instant::now());
                tracing::warn!(target: AUDIT, event = "refuse", peer = %peer.addr, uid = %peer.uid_text(),
                    max = MAX_HANDSHAKES_PER_PEER, refused_total = self.control.handshakes_over_peer_limit,
                    "one peer holds too many connections that have not subscribed: its new ones are refused (logged \
                     at most every 10 s)");
            }
            if let Ok(conn) = ControlConn::new(stream, peer) {
                self.refuse(conn, reason, true); // (logged summed up above)
            }
            return;
        }
        if self.handshakes.len() >= MAX_HANDSHAKES {
            self.control.handshakes_over_limit += 1;
            if self.handshake_limit_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                self.handshake_limit_logged = Some(Instant::now());
                tracing::warn!(target: AUDIT, event = "refuse", peer = %peer.addr, max = MAX_HANDSHAKES,
                    closed_total = self.control.handshakes_over_limit,
                    "too many connections have not subscribed yet: new ones are closed at once");
            }
            return; // dropped: closed
        }
        match ControlConn::new(stream, peer) {
            Ok(conn) => {
                self.handshakes.push(Handshake { conn, deadline: Instant::now() + HANDSHAKE_TIMEOUT, waiting: None })
            }
            Err(e) => tracing::warn!(cause = %e, "cannot make a control connection non-blocking; closed"),
        }
    }

    /// Sends `reason` as a `Reject` on `conn` (written as the peer reads it; the connection closes after it or
    /// at its write deadline) and logs it in the audit log, unless `quiet` (a throttled peer's refusals are
    /// summed up instead).
    fn refuse(&mut self, conn: ControlConn, reason: String, quiet: bool) {
        self.control.rejects += 1;
        if !quiet {
            tracing::warn!(target: AUDIT, peer = %conn.peer.addr, uid = %conn.peer.uid_text(),
                reason = %shown(&reason, 2 * access::MAX_SHOWN_BYTES), event = "refuse", "subscriber refused");
        }
        let msg = ControlMsg::Reject(Reject { reason, publisher_version: control::PROTOCOL_VERSION });
        self.last_word(conn, &msg);
    }

    /// Queues a connection's last message (a reject or a bye) and keeps the connection among the closing ones
    /// until it is written; one that does not fit what already waits (a peer that does not read) is closed now,
    /// counted as `out_overflow`.
    /// One already past its write deadline is closed at once (counted as `write_deadline` where that was found).
    fn last_word(&mut self, mut conn: ControlConn, msg: &ControlMsg) {
        if conn.overdue(Instant::now()) {
            return;
        }
        match conn.queue(msg) {
            Err(_) => self.control.out_overflow += 1,
            Ok(()) if !conn.drained() => self.closing.push(conn),
            Ok(()) => {}
        }
    }

    /// Reads every handshake and answers those whose subscribe message is whole (attach and accept, or reject);
    /// refuses those past their deadline. Returns how many it answered or dropped.
    pub(crate) fn finish_handshakes(&mut self) -> usize {
        let mut n = 0;
        let mut k = 0;
        let now = Instant::now();
        while k < self.handshakes.len() {
            let unsettled = self.handshakes[k].waiting.as_ref().map(|(sub, _)| self.instruments_unsettled(sub));
            if let Some(unsettled) = unsettled {
                if unsettled {
                    k += 1;
                    continue;
                }
                let h = self.handshakes.swap_remove(k);
                let (sub, fd) = h.waiting.expect("checked above");
                self.attach_and_admit(h.conn, sub, fd);
                n += 1;
                continue;
            }
            let h = &mut self.handshakes[k];
            let received = h.conn.receive();
            let frame = h.conn.take_frame(SUBSCRIBE_FRAME_BYTES, "subscribe");
            let msg = match (frame, received) {
                (Some(msg), _) => msg,
                (None, Received::Closed | Received::Failed(_)) => {
                    // gone before its subscribe message was whole: nobody to answer
                    self.handshakes.swap_remove(k);
                    n += 1;
                    continue;
                }
                (None, _) if now > h.deadline => {
                    // Logged summed up (a peer holding idle connections would write a line per connection).
                    let h = self.handshakes.swap_remove(k);
                    n += 1;
                    self.control.handshake_timeouts += 1;
                    if self.timeouts_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        self.timeouts_logged = Some(Instant::now());
                        tracing::warn!(target: AUDIT, event = "refuse", peer = %h.conn.peer.addr,
                            uid = %h.conn.peer.uid_text(), timed_out_total = self.control.handshake_timeouts,
                            "a connection sent no subscribe message within {} ms: refused (logged at most every 10 s, \
                             with the total)", HANDSHAKE_TIMEOUT.as_millis());
                    }
                    let reason = format!("bad subscribe message: {}", ControlError::Timeout(HANDSHAKE_TIMEOUT));
                    self.refuse(h.conn, reason, true);
                    continue;
                }
                (None, _) => {
                    k += 1;
                    continue;
                }
            };
            let h = self.handshakes.swap_remove(k);
            n += 1;
            let mut conn = h.conn;
            let sub = match msg {
                Ok(ControlMsg::Subscribe(sub)) => sub,
                Ok(other) => {
                    self.refuse(conn, format!("expected a subscribe message, got {}", other.kind()), false);
                    continue;
                }
                Err(ControlError::Version { got }) => {
                    let reason = format!(
                        "control protocol version {got} is not supported; this publisher speaks version {}",
                        control::PROTOCOL_VERSION
                    );
                    self.refuse(conn, reason, false);
                    continue;
                }
                Err(e) => {
                    conn.discard_input();
                    self.refuse(conn, format!("bad subscribe message: {e}"), false);
                    continue;
                }
            };
            self.consider(conn, sub);
        }
        n
    }

    /// A whole subscribe message: its shape, who sent it (throttled, authenticated), its symbols and
    /// entitlement; then it is attached, or waits for the feed to show its instruments.
    fn consider(&mut self, mut conn: ControlConn, mut sub: Subscribe) {
        let (fd, received) = conn.take_fd();
        if received > 1 {
            let reason =
                format!("bad subscribe message: {received} file descriptors came with it, at most 1 (the ring)");
            return self.refuse(conn, reason, false);
        }
        if let Err(reason) = access::check_subscribe(&mut sub) {
            return self.refuse(conn, reason, false);
        }
        // Who it is first: an unauthenticated peer learns nothing, not even which symbols exist.
        let mut entry = None;
        if let Some(access) = &self.cfg.access {
            let key = PeerKey { ip: conn.peer.ip, uid: conn.peer.uid };
            let now = Instant::now();
            if let Err(reason) = self.throttle.check(key, now) {
                self.control.auth_throttled += 1;
                return self.refuse(conn, reason, true);
            }
            match access::authenticate(access, &sub, conn.peer.uid) {
                Ok(e) => entry = Some(e.clone()),
                Err(reason) => {
                    self.control.auth_failures += 1;
                    let quiet = self.throttle.failed(key, now) == FailureLog::Quiet;
                    return self.refuse(conn, reason, quiet);
                }
            }
        }
        if let Err(reason) = access::resolve_symbols(&self.symbology, &mut sub) {
            return self.refuse(conn, reason, false);
        }
        if let Some(entry) = &entry {
            match access::entitled_filter(entry, &sub) {
                Ok(filter) => sub.instruments = filter,
                Err(reason) => return self.refuse(conn, reason, false),
            }
        }
        if self.instruments_unsettled(&sub) {
            // Names an instrument not seen yet while the feed is still being read: asked again each pass.
            let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
            self.handshakes.push(Handshake { conn, deadline, waiting: Some((sub, fd)) });
            return;
        }
        self.attach_and_admit(conn, sub, fd);
    }

    fn attach_and_admit(&mut self, conn: ControlConn, sub: Subscribe, fd: Option<OwnedFd>) {
        match self.attach(&sub, &conn.peer, fd) {
            Ok((ring, fabric)) => self.admit(conn, sub, ring, fabric),
            Err(reason) => self.refuse(conn, reason, false),
        }
    }

    /// The definitions a subscriber filtered to `filter` (`None`: every instrument) gets in its `Accept`: those
    /// this publisher knows.
    pub(crate) fn definitions_for(&self, filter: Option<&[u32]>) -> Vec<InstrumentDef> {
        match filter {
            Some(ids) => ids.iter().filter_map(|id| self.symbology.get(*id).cloned()).collect(),
            None => self.symbology.iter().cloned().collect(),
        }
    }

    /// Whether `sub` names an instrument not seen in the journal yet while more may still be learnt before the
    /// replay: the feed is still being read and the journal has room (a file no longer than the journal is
    /// read whole before anyone needs it). Such a handshake waits; once this is false, [`Conductor::attach`]
    /// refuses ids the whole feed does not carry, and accepts unknown ids only for a feed longer than the journal.
    ///
    /// Also while this conductor has not yet scanned every record published: the feed may have ended since the
    /// last pass, and [`Conductor::attach`] judges an unknown id only against a whole scan. Never for a live feed.
    pub(crate) fn instruments_unsettled(&self, sub: &Subscribe) -> bool {
        let Some(ids) = &sub.instruments else { return false };
        if self.traits.live {
            return false; // a live feed never settles: an id not seen yet is accepted (it may come)
        }
        let more_to_learn = self.journal.state() == FeedState::Running && !self.journal.is_full();
        let unscanned = self.seen < self.journal.published();
        ids.iter().any(|id| !self.instruments.contains(id)) && (more_to_learn || unscanned)
    }

    /// Checks what the publisher itself limits (room, policy, ring size, a second session of a live name, the
    /// instruments the feed carries) and attaches the ring for `peer` (an shm ring only for its owner).
    pub(crate) fn attach(
        &mut self,
        sub: &Subscribe,
        peer: &PeerInfo,
        ring_fd: Option<OwnedFd>,
    ) -> Result<(AnyRemoteRing, AcceptFabric), String> {
        if self.sessions.len() >= self.cfg.publisher.max_subscribers {
            return Err(format!("publisher is full: {} subscribers", self.cfg.publisher.max_subscribers));
        }
        if !self.cfg.publisher.allow_duplicate_names {
            if let Some(e) = self.sessions.values().find(|e| e.name == sub.name) {
                self.control.duplicate_names += 1;
                return Err(format!(
                    "field name: a subscriber named \"{}\" is attached already (session {}); this publisher \
                     refuses a second one (publisher.allow_duplicate_names)",
                    shown_name(&sub.name),
                    e.id
                ));
            }
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
            // Once the whole feed has been read (a file no longer than the journal is read before the replay
            // starts) the publisher knows every instrument it carries: an id it does not have is a mistake.
            // While the feed is still being read, an id not seen yet may still come: accepted.
            let whole = self.journal.state() != FeedState::Running && self.seen == self.journal.published();
            let unknown: Vec<u32> = ids.iter().copied().filter(|id| !self.instruments.contains(id)).collect();
            if whole && !unknown.is_empty() {
                // A symbol the subscriber asked for resolved to one of these: name it beside its id.
                let named: Vec<String> = unknown
                    .iter()
                    .map(|id| self.symbology.get(*id).map_or(id.to_string(), |d| format!("{id} ({})", d.symbol)))
                    .collect();
                let named: Vec<&str> = named.iter().map(String::as_str).collect();
                let known: Vec<u32> = self.instruments.iter().copied().collect();
                return Err(format!(
                    "field instruments: {} not in this feed, no record of it (it has {})",
                    access::text_list(&named),
                    access::id_list(&known)
                ));
            }
        }
        self.sender.attach(&sub.ring, Peer { uid: peer.uid, ring_fd }).map_err(|e| match e {
            FabricError::Mismatch { .. } | FabricError::NotOwner { .. } => format!("field ring: {e}"),
            e => e.to_string(),
        })
    }

    /// Follows the journal: notes the instruments of records not seen yet, and applies to the publisher's
    /// books every record the hot loop has fanned out, so they stay at its position; then tells the journal
    /// it is done with them (the feed handler may reuse their slots). Returns the records applied or scanned.
    pub(crate) fn follow_journal(&mut self) -> usize {
        let mut work = 0;
        let published = self.journal.published();
        let mut last = None;
        while self.seen < published {
            if let Some(r) = self.journal.read(self.seen) {
                if last != Some(r.instrument_id) {
                    self.instruments.insert(r.instrument_id);
                    last = Some(r.instrument_id);
                }
            }
            self.seen += 1;
            work += 1;
        }
        let position = self.counters.records.load(Ordering::Relaxed);
        while self.keeper.applied() < position {
            // The journal keeps every position until this conductor is done with it: `None` is never expected.
            let r = self.journal.read(self.keeper.applied());
            self.keeper.apply(r.as_ref());
            work += 1;
        }
        // Holds the hot loop has taken over are let go (Acquire: pairs with its Release of `adopted`, after its
        // the hot loop's cursor); the others keep the journal at their positions.
        let mut held = u64::MAX;
        for e in self.sessions.values_mut() {
            e.holds.retain(|h| h.counters.adopted.load(Ordering::Acquire) < h.command);
            held = e.holds.iter().map(|h| h.position).fold(held, u64::min);
        }
        self.journal.done(crate::journal::CONDUCTOR, self.keeper.applied().min(held));
        work
    }

    /// A live feed's definitions that came since the last pass (ITCH Stock Directory messages, MDP 3.0
    /// instrument definitions: [`crate::definitions`]), into `symbology` (a later one of an instrument replaces
    /// the earlier definition): subscribers attaching from now on can name them and get their definitions. Logs
    /// the entries the feed thread dropped because the queue was full. Returns the definitions taken.
    pub(crate) fn take_definitions(&mut self) -> usize {
        let Some(queue) = self.definitions.as_mut() else { return 0 };
        let n = queue.drain_into(&mut self.symbology);
        let dropped = queue.dropped();
        if dropped > self.definitions_dropped_logged {
            tracing::warn!(
                dropped = dropped - self.definitions_dropped_logged,
                dropped_total = dropped,
                "instrument definitions dropped: the queue to the conductor was full; their symbols stay unknown \
                 (an MDP 3.0 definition feed sends them again on its next loop)"
            );
            self.definitions_dropped_logged = dropped;
        }
        if queue.refused() > self.definitions_refused_logged {
            tracing::warn!(
                refused_total = queue.refused(),
                "MDP 3.0 instrument definitions without a printable symbol: left out of the symbology"
            );
            self.definitions_refused_logged = queue.refused();
        }
        n
    }

    /// Holds the journal at `position` for session `id`'s command just sent (its `commands`), unless the feed is
    /// live: a live feed cannot wait (a late joiner whose position is overwritten gets a fresh snapshot).
    fn hold(&mut self, id: u64, position: u64) {
        if self.traits.live {
            return;
        }
        let Some(e) = self.sessions.get_mut(&id) else { return };
        let hold = Hold { session_id: id, position, command: e.snapshot.commands, counters: Arc::clone(&e.counters) };
        debug_assert_eq!(hold.session_id, e.id);
        e.holds.push(hold);
    }

    /// Brings the publisher's books up to the hot loop's position and snapshots the instruments in `filter`
    /// ([`BookKeeper::snapshot`]). Returns the records and the position (feed records included).
    pub(crate) fn snapshot(&mut self, filter: Option<&[u32]>) -> (Vec<mdfan_wire::BookUpdate>, u64) {
        self.follow_journal();
        (self.keeper.snapshot(filter), self.keeper.applied())
    }

    /// Answers an attached ring with `Accept` (queued on its connection) and makes its entry: a mid-stream
    /// joiner starts from a snapshot at the hot loop's position; the hot loop gets the session once the
    /// subscriber's side is connected ([`Conductor::admit_ready`]).
    fn admit(&mut self, mut conn: ControlConn, sub: Subscribe, ring: AnyRemoteRing, fabric: AcceptFabric) {
        let id = self.next_id;
        let filter = sub.instruments.clone();
        let accept = fit_in_a_frame(ControlMsg::Accept(Accept {
            session_id: id,
            first_seq: 1,
            fabric,
            policy: sub.policy,
            heartbeat_interval_ms: self.cfg.publisher.heartbeat_interval_ms,
            definitions: self.definitions_for(filter.as_deref()),
            ts_recv_clock: self.ts_recv_clock.get(),
            book: self.traits.book,
            feed: self.traits.identity.clone(),
        }));
        if let Err(Overflow { waiting, frame }) = conn.queue(&accept) {
            // never with a fresh connection (the buffer holds the largest frame): a bug if seen
            tracing::error!(peer = %conn.peer.addr, waiting, frame, "accept does not fit the out buffer; dropped");
            return;
        }
        self.next_id += 1;
        // Mid-stream joiners start from a snapshot at the hot loop's position; the hot loop then sends them
        // the feed from that position on, and they go live once caught up. Before the replay starts the
        // position is 0 and the snapshot empty.
        let started = self.counters.records.load(Ordering::Relaxed) > 0;
        let (snapshot, position) = if started && sub.snapshot {
            let (records, position) = self.snapshot(filter.as_deref());
            (Some(records), position)
        } else {
            (None, self.counters.records.load(Ordering::Relaxed))
        };
        let snapshot_records = snapshot.as_ref().map_or(0, Vec::len);
        let session = Session::new(id, sub.name.clone(), ring, sub.policy, filter.clone(), position, snapshot);
        let send_stamped = session.send_completions_stamped();
        if send_stamped && !self.sends_stamped {
            self.sends_stamped = true;
            self.refresh_send_clock(); // before its first post: the hot loop gets the mapping ahead of the session
        }
        tracing::info!(
            target: AUDIT,
            event = "accept",
            peer = %conn.peer.addr,
            uid = %conn.peer.uid_text(),
            session = id,
            name = %shown_name(&sub.name),
            slots = sub.ring.slot_count(),
            policy = sub.policy.as_str(),
            from_record = position,
            snapshot_records,
            "subscriber attached"
        );
        let counters = Arc::clone(&session.counters);
        let entry = SessionEntry {
            id,
            name: sub.name.clone(),
            conn: Some(conn),
            filter,
            counters,
            report: SessionReport::new(id, sub.name, sub.policy, send_stamped),
            stage: Stage::Connecting { session: Box::new(session), deadline: Instant::now() + CONNECT_TIMEOUT },
            snapshot: SnapshotState {
                pending: false,
                served_gap: 0,
                rerequest: None,
                commands: 1, // the Add, sent once the subscriber's side is connected
                bucket: TokenBucket::new(self.cfg.publisher.snapshot_requests_per_s, Instant::now()),
                refused: 0,
                refused_run: 0,
            },
            holds: Vec::new(),
        };
        self.sessions.insert(id, entry);
        self.hold(id, position);
    }

    /// Once a session's send completions carry NIC timestamps, every [`SEND_CLOCK_REALIGN`]: maps the device's
    /// NIC clock (`AnySender::nic_realtime`: `ibv_query_rt_values_ex` between two realtime reads, fitted with the
    /// previous pair) and the TSC ([`TscRealtime::sample`]) onto `CLOCK_REALTIME` and sends both to the hot loop
    /// ([`Command::SendClock`]), which maps post-to-send-completion with them. Control path. Returns 1 when it
    /// sent a mapping; a NIC clock that cannot be read sends none (the stamps stay unaligned; logged at debug
    /// level by the provider) and is tried again a period later.
    pub(crate) fn refresh_send_clock(&mut self) -> usize {
        if !self.sends_stamped || self.send_clock_at.is_some_and(|t| t.elapsed() < SEND_CLOCK_REALIGN) {
            return 0;
        }
        self.send_clock_at = Some(Instant::now());
        let Some(nic) = self.sender.nic_realtime() else { return 0 };
        let tsc = TscRealtime::sample(&self.clock);
        self.send(Command::SendClock(SendClockMap { nic, tsc }));
        1
    }

    /// Sends a command to the hot loop, or keeps it (in order) until the queue has room: nothing is dropped.
    pub(crate) fn send(&mut self, cmd: Command) {
        self.cmd_tx.send(cmd);
    }

    /// Moves waiting commands into the hot loop's queue; returns whether any were waiting.
    pub(crate) fn flush_backlog(&mut self) -> usize {
        let waiting = self.cmd_tx.has_waiting();
        if waiting {
            self.cmd_tx.flush();
        }
        waiting as usize
    }

    /// Builds a snapshot for session `id` (asked for after the gap at `gap_from_seq`) and sends it to the hot
    /// loop.
    pub(crate) fn serve_snapshot(&mut self, id: u64, gap_from_seq: u64) {
        let Some(e) = self.sessions.get_mut(&id) else { return };
        e.snapshot.pending = true;
        e.snapshot.served_gap = gap_from_seq;
        e.snapshot.commands += 1;
        let filter = e.filter.clone();
        let (records, position) = self.snapshot(filter.as_deref());
        self.hold(id, position);
        let name = self.sessions.get(&id).map_or_else(String::new, |e| shown_name(&e.name));
        tracing::info!(session = id, name = %name, gap_from_seq, records = records.len(), position, "snapshot requested");
        self.send(Command::Snapshot { id, records, position });
    }

    /// A subscriber's snapshot request: one snapshot at a time per session (a request for a later gap that
    /// arrives while one is pending is kept and served when that one is done, so any number of requests in
    /// between cost one snapshot), and at most `publisher.snapshot_requests_per_s` requests a second, each
    /// request taking a token whether it is served or collapsed; a request without one is refused (counted),
    /// and a session with [`SNAPSHOT_FLOOD_SECONDS`] seconds' worth refused in a row (none served between) is
    /// ended. Returns why it must end.
    fn on_snapshot_request(&mut self, id: u64, gap_from_seq: u64) -> Option<Leaving> {
        let rate = u64::from(self.cfg.publisher.snapshot_requests_per_s.max(1));
        let e = self.sessions.get_mut(&id)?;
        if !e.snapshot.bucket.take(Instant::now()) {
            e.snapshot.refused += 1;
            e.snapshot.refused_run += 1;
            e.report.snapshot_requests_refused = e.snapshot.refused;
            self.control.snapshot_requests_refused += 1;
            if e.snapshot.refused_run >= SNAPSHOT_FLOOD_SECONDS * rate {
                self.control.snapshot_floods += 1;
                return Some(Leaving {
                    reason: CloseReason::ProtocolError,
                    detail: format!(
                        "snapshot request flood: {} refused in a row past the limit of {rate} a second \
                         (publisher.snapshot_requests_per_s)",
                        e.snapshot.refused_run
                    ),
                });
            }
            return None;
        }
        e.report.snapshot_requests += 1;
        e.snapshot.refused_run = 0;
        if !e.snapshot.pending {
            self.serve_snapshot(id, gap_from_seq);
        } else if gap_from_seq > e.snapshot.served_gap {
            e.snapshot.rerequest = Some(e.snapshot.rerequest.unwrap_or(0).max(gap_from_seq));
        }
        None
    }

    /// Hands connected sessions to the hot loop; drops those whose subscriber never connected. Returns how many
    /// it handed over or dropped.
    pub(crate) fn admit_ready(&mut self) -> usize {
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut late = Vec::new();
        for (id, e) in self.sessions.iter_mut() {
            if let Stage::Connecting { session, deadline } = &mut e.stage {
                if session.ring_mut().ready() {
                    ready.push(*id);
                } else if now > *deadline {
                    late.push(*id);
                }
            }
        }
        for id in &ready {
            let e = self.sessions.get_mut(id).expect("listed above");
            let Stage::Connecting { session, .. } = std::mem::replace(&mut e.stage, Stage::Live) else { continue };
            tracing::debug!(session = id, "subscriber connected; handed to the hot loop");
            self.send(Command::Add(*session));
        }
        for id in &late {
            let mut e = self.sessions.remove(id).expect("listed above");
            let Stage::Connecting { mut session, .. } = std::mem::replace(&mut e.stage, Stage::Leaving) else {
                continue;
            };
            tracing::warn!(session = id, name = %shown_name(&e.name), "subscriber's side never connected; dropped");
            session.close(CloseReason::FabricError);
            let bye = Bye { reason: CloseReason::FabricError, detail: "the subscriber's QP never connected".into() };
            self.end_session(e, CloseReason::FabricError, Some(bye));
            drop(session);
        }
        ready.len() + late.len()
    }

    /// Reads and writes every session's control connection: snapshot requests are served; a closed connection
    /// (or a bye, garbage, a connection that does not read what it is sent) means a departed subscriber, whose
    /// session is removed from the hot loop. Also writes the closing connections. Returns the reads that brought
    /// bytes plus the connections closed.
    pub(crate) fn watch_connections(&mut self) -> usize {
        let mut n = 0;
        let now = Instant::now();
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        for id in ids {
            let Some(e) = self.sessions.get_mut(&id) else { continue };
            let Some(conn) = e.conn.as_mut() else { continue };
            let mut leaving = match conn.receive() {
                Received::Bytes(0) => None,
                Received::Bytes(_) => {
                    n += 1;
                    None
                }
                Received::Closed => {
                    Some(Leaving { reason: CloseReason::PeerGone, detail: "control connection closed".into() })
                }
                Received::Failed(err) => {
                    Some(Leaving { reason: CloseReason::PeerGone, detail: format!("control connection failed: {err}") })
                }
            };
            // At most a few frames per connection per pass, so one chatty peer cannot hold up the others. Frames
            // already read count even when the peer closed after them.
            for _ in 0..FRAMES_PER_PASS {
                let Some(conn) = self.sessions.get_mut(&id).and_then(|e| e.conn.as_mut()) else { break };
                match conn.take_frame(SESSION_FRAME_BYTES, "snapshot_request or bye") {
                    None => break,
                    Some(Err(err)) => {
                        conn.discard_input();
                        leaving = Some(Leaving {
                            reason: CloseReason::ProtocolError,
                            detail: format!("bad control message: {err}"),
                        });
                        break;
                    }
                    Some(Ok(ControlMsg::SnapshotRequest(req))) => {
                        if let Some(l) = self.on_snapshot_request(id, req.gap_from_seq) {
                            leaving = Some(l);
                            break;
                        }
                    }
                    Some(Ok(ControlMsg::Bye(bye))) => {
                        let said = format!(
                            "subscriber said bye: {} {}",
                            bye.reason.as_str(),
                            shown(&bye.detail, access::MAX_SHOWN_BYTES)
                        );
                        leaving = Some(Leaving { reason: CloseReason::PeerGone, detail: said.trim_end().to_owned() });
                        break;
                    }
                    Some(Ok(other)) => {
                        leaving = Some(Leaving {
                            reason: CloseReason::ProtocolError,
                            detail: format!("unexpected control message {}", other.kind()),
                        });
                        break;
                    }
                }
            }
            if leaving.is_none() {
                if let Some(conn) = self.sessions.get_mut(&id).and_then(|e| e.conn.as_mut()) {
                    if let Err(err) = conn.flush() {
                        leaving = Some(Leaving {
                            reason: CloseReason::PeerGone,
                            detail: format!("control connection failed: {err}"),
                        });
                    } else if conn.overdue(now) {
                        self.control.write_deadline += 1;
                        leaving = Some(Leaving {
                            reason: CloseReason::PeerGone,
                            detail: format!(
                                "closed by the publisher: {} bytes unread past the {} ms write deadline (the \
                                 subscriber does not read its control connection)",
                                conn.waiting(),
                                crate::conn::WRITE_DEADLINE.as_millis()
                            ),
                        });
                    }
                }
            }
            if let Some(l) = leaving {
                self.leave(id, l);
                n += 1;
            }
        }
        n + self.flush_closing(now)
    }

    /// Writes the closing connections; drops those done, failed or past their write deadline. Returns how many
    /// went.
    fn flush_closing(&mut self, now: Instant) -> usize {
        let before = self.closing.len();
        self.closing.retain_mut(|c| c.flush().is_ok() && !c.drained() && !c.overdue(now));
        before - self.closing.len()
    }

    /// A subscriber's control connection ended (`l` says why): logged, a bye queued (the connection closes after
    /// it), and the session taken out of the hot loop (a live one: `Command::Remove`, with the reason stored
    /// where a hot loop waiting on its ring sees it) or ended here (one still connecting).
    fn leave(&mut self, id: u64, l: Leaving) {
        let Some(e) = self.sessions.get_mut(&id) else { return };
        tracing::info!(target: AUDIT, event = "leave", session = id, name = %shown_name(&e.name),
            reason = l.reason.as_str(), detail = %l.detail, "subscriber leaving");
        let bye = Bye { reason: l.reason, detail: l.detail };
        if let Some(conn) = e.conn.take() {
            self.last_word(conn, &ControlMsg::Bye(bye));
        }
        let Some(e) = self.sessions.get_mut(&id) else { return };
        e.counters.left.store(l.reason as u32, Ordering::Relaxed);
        match std::mem::replace(&mut e.stage, Stage::Leaving) {
            Stage::Live => self.send(Command::Remove { id, reason: l.reason }),
            Stage::Connecting { mut session, .. } => {
                session.close(l.reason);
                let e = self.sessions.remove(&id).expect("present");
                self.end_session(e, l.reason, None);
                drop(session); // unmaps the ring, here, off the hot path
            }
            Stage::Leaving => {}
        }
    }

    /// Ends a session's entry: its report takes the final counters and `end`, a last `bye` goes on its
    /// connection if it still has one, and the report joins the ended ones.
    fn end_session(&mut self, mut e: SessionEntry, end: CloseReason, bye: Option<Bye>) {
        e.report.update(&e.counters, &self.clock);
        e.report.end = Some(end);
        if let Some(conn) = e.conn.take() {
            self.last_word(conn, &ControlMsg::Bye(bye.unwrap_or_else(|| Bye::new(end))));
        }
        self.ended.push(e.report);
    }

    /// Every session's report, live ones updated now, in id order.
    fn reports(&mut self) -> Vec<&SessionReport> {
        for e in self.sessions.values_mut() {
            e.report.update(&e.counters, &self.clock);
        }
        let mut all: Vec<&SessionReport> = self.ended.iter().chain(self.sessions.values().map(|e| &e.report)).collect();
        all.sort_by_key(|r| r.id);
        all
    }

    pub(crate) fn dump(&mut self) {
        // Marked `counters` (the final report's lines are not), with the final report's names. A stdout that
        // cannot take them (a closed pipe) loses the dump, nothing else.
        use std::io::Write as _;
        let mut lines = Vec::new();
        for r in self.reports() {
            lines.push(format!("counters {}", r.line()));
            if let Some(line) = r.send_completion_line() {
                lines.push(format!("counters {line}"));
            }
        }
        let c = &self.counters.cycles;
        let to_ns = |t| self.clock.delta_as_nanos(0, t);
        lines.push(format!(
            "counters replay records={} cycle_p50_ns={} cycle_p999_ns={} cycle_max_ns={} end=running",
            self.counters.records.load(Ordering::Relaxed),
            to_ns(c.quantile(0.5)),
            to_ns(c.quantile(0.999)),
            to_ns(c.max())
        ));
        for c in &self.feed_counters {
            lines.extend(c.lines().into_iter().map(|l| format!("counters {l}")));
        }
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    /// Rewrites the counters file (see [`mdfan_tuning::counters`]): every registered counter set, the control
    /// plane's counts, then every session's counters, live sessions first, then ended ones newest first (rows
    /// past the file's capacity are left out).
    pub(crate) fn write_counters(&mut self) {
        use mdfan_tuning::counters::MetricKind::{Counter, Gauge};
        let Some(mut file) = self.counters_file.take() else { return };
        for e in self.sessions.values_mut() {
            e.report.update(&e.counters, &self.clock);
        }
        file.begin();
        for set in &self.counter_sets {
            set.publish(&mut file);
        }
        self.control.publish(&mut file, self.sessions.len() as u64);
        let order = self.sessions.values().map(|e| &e.report).chain(self.ended.iter().rev());
        for r in order {
            let name: String = r.name.chars().filter(|ch| !matches!(ch, '"' | '\\') && !ch.is_control()).collect();
            let l = format!("session=\"{}\",subscriber=\"{name}\"", r.id);
            for (metric, v) in [
                ("mdfan_session_sent_total", r.sent),
                ("mdfan_session_filtered_total", r.filtered),
                ("mdfan_session_skipped_total", r.skipped),
                ("mdfan_session_snapshots_total", r.snapshots),
                ("mdfan_session_catchup_total", r.catchup),
                ("mdfan_session_heartbeats_total", r.heartbeats),
                ("mdfan_session_ring_full_total", r.ring_full),
                ("mdfan_session_blocked_ns_total", r.blocked_ns),
                ("mdfan_session_snapshot_requests_total", r.snapshot_requests),
                ("mdfan_session_snapshot_requests_refused_total", r.snapshot_requests_refused),
            ] {
                file.set(metric, &l, Counter, v);
            }
            if let Some(sc) = &r.send_completion {
                file.set("mdfan_session_send_completion_total", &l, Counter, sc.count);
                file.set("mdfan_session_send_completion_unaligned_total", &l, Counter, sc.unaligned);
                for (q, v) in [("0.5", sc.p50_ns), ("0.99", sc.p99_ns), ("0.999", sc.p999_ns), ("1", sc.max_ns)] {
                    file.set(
                        "mdfan_session_send_completion_ns",
                        &format!("{l},quantile=\"{q}\",clock=\"nic\""),
                        Gauge,
                        v,
                    );
                }
            }
            file.set("mdfan_session_last_seq", &l, Gauge, r.last_seq);
            file.set("mdfan_session_lag", &l, Gauge, r.lag);
            let end = r.end.map_or("running", CloseReason::as_str);
            file.set("mdfan_session_end", &format!("{l},reason=\"{end}\""), Gauge, 1);
        }
        file.commit(mdfan_lines::realtime_ns());
        if let (Some(e), false) = (file.failure(), self.counters_failure_logged) {
            self.counters_failure_logged = true; // once: the file is an aid, the run goes on
            tracing::warn!(file = %file.path().display(), cause = %e, "counters file: a write failed; mdfan-stat may show old values");
        }
        self.counters_written = Instant::now();
        self.counters_file = Some(file);
    }

    /// Re-reads the config file and takes its `[access]` section (tokens and entitlements) for the subscriptions
    /// that come next; sessions already attached keep running. Anything else that changed needs a restart, and
    /// a file that no longer parses changes nothing; both are logged.
    pub(crate) fn reload_access(&mut self) {
        let Some(path) = self.cfg.source.clone() else {
            tracing::warn!(target: AUDIT, event = "reload", "SIGHUP: this config was not loaded from a file; nothing re-read");
            return;
        };
        match Config::load(&path) {
            Ok(new) => {
                let n = new.access.as_ref().map(|a| a.subscribers.len());
                self.cfg.access = new.access;
                match n {
                    Some(n) => {
                        tracing::info!(target: AUDIT, event = "reload", config = %path.display(), subscribers = n,
                        "access list re-read: applies to new subscriptions")
                    }
                    None => tracing::warn!(target: AUDIT, event = "reload", config = %path.display(),
                        "access list re-read: no [access] section any more: anyone may subscribe"),
                }
            }
            Err(e) => {
                tracing::error!(target: AUDIT, event = "reload", cause = %e, "SIGHUP: config not re-read; access unchanged")
            }
        }
    }

    /// One summary line per peer whose failed authentications went past what was logged one by one, once its
    /// window ends (every second at most).
    fn summarise_auth_failures(&mut self) {
        if self.throttle_checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.throttle_checked = Instant::now();
        for (peer, failures, refused) in self.throttle.summaries(Instant::now()) {
            tracing::warn!(target: AUDIT, event = "auth_summary", %peer, failures, refused_unchecked = refused,
                window_s = access::AUTH_WINDOW.as_secs(),
                "failed authentications from one peer in one window (the first ones were logged one by one)");
        }
    }

    pub(crate) fn on_event(&mut self, event: Event) {
        match event {
            Event::Started { sessions } => tracing::info!(sessions, "fan-out started"),
            Event::Finished(report) => self.wrap_up(report),
            Event::HoldReleased { id, position, releases } => tracing::warn!(
                session = id,
                position,
                releases,
                max_releases = crate::agent::MAX_HOLD_RELEASES,
                hold_ms = self.cfg.publisher.catchup_hold_ms,
                "a session catching up held the journal full this long: the feed goes on without it (a fresh \
                 snapshot if it falls off the journal; dropped as stalled after max_releases)"
            ),
            Event::CatchupLost { id } => {
                tracing::info!(session = id, "catch-up needs records the journal no longer holds: a fresh snapshot");
                if let Some(e) = self.sessions.get_mut(&id) {
                    if e.snapshot.pending {
                        e.snapshot.rerequest = Some(e.snapshot.rerequest.unwrap_or(0));
                    } else {
                        self.serve_snapshot(id, 0);
                    }
                }
            }
            Event::SnapshotDone { id, delivered, records } => {
                tracing::info!(session = id, delivered, records = records.len(), "snapshot done");
                if let Some(e) = self.sessions.get_mut(&id) {
                    e.snapshot.pending = false;
                    if let Some(gap) = e.snapshot.rerequest.take() {
                        self.serve_snapshot(id, gap);
                    }
                }
                drop(records); // freed here, off the hot path
            }
            Event::Retired { mut session, reason } => {
                session.ring_mut().drain(DRAIN_TIMEOUT);
                let failure = session.ring_mut().failure();
                if reason != CloseReason::EndOfStream {
                    let sent = session.counters.sent.load(Ordering::Relaxed);
                    let (id, name) = (session.id, shown_name(&session.name));
                    match failure {
                        Some(detail) => tracing::warn!(target: AUDIT, event = "drop", session = id, %name,
                            reason = reason.as_str(), %detail, sent, "subscriber dropped"),
                        None => tracing::warn!(target: AUDIT, event = "drop", session = id, %name,
                            reason = reason.as_str(), sent, "subscriber dropped"),
                    }
                }
                if let Some(e) = self.sessions.remove(&session.id) {
                    let bye = Bye { reason, detail: failure.unwrap_or_default().to_owned() };
                    self.end_session(e, reason, Some(bye));
                }
                drop(session); // unmaps the ring, here, off the hot path
            }
        }
    }

    /// The end of the run, after the hot loop's last event: waits (bounded) for each remaining session's last
    /// writes to complete, records how it ended, frees it, says bye on every control connection (written for
    /// [`BYE_FLUSH`] at most in all, whatever the peers read) and writes the run report.
    fn wrap_up(&mut self, agent: AgentReport) {
        self.finished = true;
        let mut sessions = agent.sessions;
        for s in sessions.iter_mut() {
            s.ring_mut().drain(DRAIN_TIMEOUT);
        }
        // A session the hot loop never served (still connecting, or handed over after its last command was read)
        // got none of the stream: at the end of a complete replay it ends `stalled` with a word why, never with
        // a normal end over an empty book (as `FanoutAgent::finish` ends one whose catch-up was unfinished).
        let served: std::collections::BTreeSet<u64> = sessions.iter().map(|s| s.id).collect();
        for (id, mut e) in std::mem::take(&mut self.sessions) {
            let unserved = !served.contains(&id) && matches!(e.stage, Stage::Connecting { .. } | Stage::Live);
            let (end, bye) = if unserved && agent.end == CloseReason::EndOfStream {
                let detail = "subscribed as the feed ended: no record of the stream reached this session".into();
                (CloseReason::Stalled, Some(Bye { reason: CloseReason::Stalled, detail }))
            } else {
                (agent.end, None)
            };
            if let Stage::Connecting { session, .. } = &mut e.stage {
                session.close(end);
            }
            self.end_session(e, end, bye);
        }
        drop(sessions); // unmapped here, off the hot path
                        // Connections still in their handshake are told, not just closed (a subscriber would take a silent close
                        // for a publisher that died, and try again).
        for h in std::mem::take(&mut self.handshakes) {
            let reason = format!("the feed ended ({}) before this subscription was answered", agent.end.as_str());
            self.refuse(h.conn, reason, false);
        }
        let deadline = Instant::now() + BYE_FLUSH;
        while !self.closing.is_empty() && Instant::now() < deadline {
            self.flush_closing(Instant::now());
            if !self.closing.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.closing.clear();
        if let Some(path) = &self.cfg.publisher.listen_unix {
            let _ = std::fs::remove_file(path);
        }
        // The final values, then the file is marked ended (it stays for a post-mortem read).
        self.write_counters();
        if let Some(mut file) = self.counters_file.take() {
            file.close();
            if !self.cfg.publisher.keep_counters {
                let _ = std::fs::remove_file(file.path());
            }
        }
        let clock = &self.clock;
        let to_ns = |t: u64| clock.delta_as_nanos(0, t);
        let cycles = &self.counters.cycles;
        let mut reports = std::mem::take(&mut self.ended);
        reports.sort_by_key(|r| r.id);
        let mut report = RunReport {
            records: agent.records,
            replay_ns: to_ns(agent.replay_ticks),
            sessions: reports,
            cycle_p50_ns: to_ns(cycles.quantile(0.5)),
            cycle_p999_ns: to_ns(cycles.quantile(0.999)),
            cycle_max_ns: to_ns(cycles.max()),
            cycle_buckets_ns: cycles.buckets().into_iter().map(|(t, n)| (to_ns(t), n)).collect(),
            decode_to_post_buckets_ns: self
                .counters
                .decode_to_post
                .buckets()
                .into_iter()
                .map(|(t, n)| (to_ns(t), n))
                .collect(),
            end: agent.end,
            feed_error: (agent.end == CloseReason::FeedError).then(|| self.journal.error()).flatten(),
            live: Vec::new(),
            moldudp64: None,
            lobster: None,
            capture: None,
            relay: None,
            itch_file: None,
        };
        for c in &self.feed_counters {
            c.report(&mut report);
        }
        self.report = Some(report);
    }

    /// The run report, once the conductor [is done](Agent::is_done) (taken once).
    pub fn take_report(&mut self) -> Option<RunReport> {
        self.report.take()
    }
}

impl Agent for Conductor {
    fn role_name(&self) -> &str {
        "mdfan-conductor"
    }

    /// One pass (see the module docs). Returns the work it found: commands moved, connections accepted,
    /// handshakes answered, sessions handed over or dropped, control reads and departures, hot-loop events,
    /// a counter dump. After the hot loop's [`Event::Finished`] nothing more is read: the pass that handled it
    /// is the last. No step waits for a peer.
    fn do_work(&mut self) -> usize {
        if self.finished {
            return 0;
        }
        let mut work = self.flush_backlog();
        work += self.follow_journal();
        work += self.take_definitions();
        work += self.accept();
        work += self.finish_handshakes();
        work += self.admit_ready();
        work += self.refresh_send_clock();
        work += self.watch_connections();
        while !self.finished {
            let Ok(event) = self.events.pop() else { break };
            self.on_event(event);
            work += 1;
        }
        if self.dump.swap(false, Ordering::Relaxed) {
            self.dump();
            work += 1;
        }
        if self.reload.swap(false, Ordering::Relaxed) {
            self.reload_access();
            work += 1;
        }
        self.summarise_auth_failures();
        if self.counters_file.is_some() && self.counters_written.elapsed() >= COUNTERS_PERIOD {
            self.write_counters();
        }
        work
    }

    fn is_done(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::resolve_symbols;
    use crate::access::tests::{sub, symbology};
    use mdfan_wire::control::SlowConsumerPolicy;

    /// A live ITCH publisher's conductor (lines on 127.0.0.1, port 0; no counters file) whose Stock Directory
    /// queue is 2 entries long, its feed end the test's.
    fn live_itch_conductor() -> (Conductor, crate::definitions::DefinitionSender) {
        let text = "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = \"\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n\
                    [lines]\na = \"127.0.0.1:0\"\n\n[fabric]\nprovider = \"shm\"\n";
        let cfg = Config::parse(text, std::path::Path::new("live-itch-unit.toml")).unwrap();
        let mut conductor = crate::Publisher::bind(cfg).unwrap().into_agents(Arc::default()).conductor;
        assert!(conductor.definitions.is_some(), "a live ITCH feed hands its Stock Directory to the conductor");
        let (tx, rx) = crate::definitions::definition_queue(2);
        conductor.definitions = Some(rx);
        (conductor, tx)
    }

    #[test]
    fn the_conductor_takes_stock_directory_entries_into_its_symbology_each_pass() {
        use crate::definitions::DefinitionEntry;
        use crate::live_itch::DirectoryEntry;
        let (mut conductor, mut tx) = live_itch_conductor();
        let entry =
            |locate, stock: &[u8; 8]| DefinitionEntry::Stock(DirectoryEntry { stock_locate: locate, stock: *stock });
        assert!(conductor.symbology.is_empty());
        tx.send(entry(6514, b"FB      "));
        tx.send(entry(5528, b"IVOO    "));
        tx.send(entry(464, b"AMC     ")); // the queue holds 2: dropped and counted on the feed side
        assert_eq!(tx.dropped(), 1);
        conductor.do_work();
        let defs = |c: &Conductor| -> Vec<(u32, String, i64)> {
            c.symbology.iter().map(|d| (d.instrument_id, d.symbol.clone(), d.tick_size_e9)).collect()
        };
        assert_eq!(defs(&conductor), [(5528, "IVOO".into(), 100_000), (6514, "FB".into(), 100_000)]);
        // A later R of locate 6514 replaces FB: META resolves, FB no longer does.
        tx.send(entry(6514, b"META    "));
        assert_eq!(conductor.take_definitions(), 1);
        assert_eq!(defs(&conductor), [(5528, "IVOO".into(), 100_000), (6514, "META".into(), 100_000)]);
        let mut meta = sub(None, Some(&["META"]));
        resolve_symbols(&conductor.symbology, &mut meta).unwrap();
        assert_eq!(meta.instruments, Some(vec![6514]));
        let e = resolve_symbols(&conductor.symbology, &mut sub(None, Some(&["FB"]))).unwrap_err();
        assert_eq!(e, "field symbols: FB not known to this publisher (it knows 2 symbols: IVOO, META)");
        assert_eq!(
            conductor.definitions_for(Some(&[6514])),
            [InstrumentDef { tick_size_e9: 100_000, ..InstrumentDef::new(6514, "META") }]
        );
        // The drop the first pass logged is not logged again.
        assert_eq!((conductor.take_definitions(), conductor.definitions_dropped_logged), (0, 1));
    }

    #[test]
    fn an_accept_with_more_definitions_than_a_frame_holds_keeps_the_first_that_fit() {
        let accept = |definitions| {
            ControlMsg::Accept(Accept {
                session_id: 1,
                first_seq: 1,
                fabric: AcceptFabric::Shm,
                policy: SlowConsumerPolicy::Resync,
                heartbeat_interval_ms: 10,
                definitions,
                ts_recv_clock: Default::default(),
                book: Default::default(),
                feed: Default::default(),
            })
        };
        let few: Vec<InstrumentDef> = symbology().iter().cloned().collect();
        assert_eq!(fit_in_a_frame(accept(few.clone())), accept(few));
        let many: Vec<InstrumentDef> = (0..40_000).map(|i| InstrumentDef::new(i, format!("SYM{i:05}"))).collect();
        assert!(control::encode(&accept(many.clone())).len() > 4 + control::MAX_FRAME_BYTES as usize);
        let ControlMsg::Accept(fitted) = fit_in_a_frame(accept(many.clone())) else { unreachable!() };
        // 40,000 definitions of about 90 bytes: the first ones, as many as fit, and not one more
        let kept = fitted.definitions.len();
        assert!((20_000..40_000).contains(&kept), "{kept}");
        assert_eq!(fitted.definitions, many[..kept].to_vec());
        let frame = control::encode(&ControlMsg::Accept(fitted));
        assert!(frame.len() <= 4 + control::MAX_FRAME_BYTES as usize, "{}", frame.len());
        let one_more = control::encode(&accept(many[..kept + 1].to_vec()));
        assert!(one_more.len() > 4 + control::MAX_FRAME_BYTES as usize, "{}", one_more.len());
    }

    /// The start-of-day ITCH file (data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_first1000.itch) gives
    /// locates 1 (A), 2 (AA) and 3 (AAAU) a Stock Trading Action `T` and a Reg SHO `0` each (A's at venue_seq 82
    /// and 83, AAAU's at 583 and 584) and no order: replayed to no subscriber, a snapshot of locates 1 and 3
    /// carries those four status records, flagged as snapshot records, between its markers (which count no book).
    /// The start-of-day ITCH snippet's publisher (data/nasdaq-itch50-20191230-binaryfile-excerpts/
    /// 12302019_first1000.itch, no subscriber awaited, no counters file), split into its three agents for a test
    /// to drive by hand; its control endpoint.
    fn itch_snippet_agents() -> (crate::Agents, std::net::SocketAddr) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_first1000.itch");
        let text = format!(
            "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 0\ncounters_dir = \"\"\n\n[feed]\nformat = \"itch50\"\npath = {path:?}\nsession_date = \"2019-12-30\"\n"
        );
        let publisher = crate::Publisher::bind(Config::parse(&text, std::path::Path::new("t.toml")).unwrap()).unwrap();
        let addr = publisher.local_addr();
        (publisher.into_agents(Arc::new(AtomicBool::new(false))), addr)
    }

    #[test]
    fn a_snapshot_carries_each_instruments_last_trading_statuses() {
        let (crate::Agents { mut feed, mut fanout, mut conductor }, _) = itch_snippet_agents();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !fanout.is_done() {
            assert!(std::time::Instant::now() < deadline, "watchdog");
            feed.do_work();
            fanout.do_work();
            conductor.do_work();
        }
        let (records, _) = conductor.snapshot(Some(&[1, 3]));
        let kinds: Vec<_> = records.iter().map(|r| r.kind()).collect();
        use mdfan_wire::Kind::{SnapshotBegin, SnapshotEnd, TradingStatus};
        assert_eq!(
            kinds,
            [SnapshotBegin, TradingStatus, TradingStatus, TradingStatus, TradingStatus, SnapshotEnd].map(Some)
        );
        let statuses: Vec<_> = records[1..5]
            .iter()
            .map(|r| {
                let s = r.status().unwrap();
                (r.instrument_id, r.venue_seq(), s.kind as u8, s.state, r.flags & mdfan_wire::flags::SNAPSHOT != 0)
            })
            .collect();
        assert_eq!(
            statuses,
            [
                (1, 82, b'H', b'T', true),
                (1, 83, b'Y', b'0', true),
                (3, 583, b'H', b'T', true),
                (3, 584, b'Y', b'0', true)
            ]
        );
        assert_eq!((records[0].size, records[5].size), (0, 0), "no book");
        let (all, _) = conductor.snapshot(None);
        assert_eq!(all.iter().filter(|r| r.status().is_some()).count(), 6, "locates 1, 2 and 3");
    }

    /// A subscriber whose handshake the conductor answers after the hot loop has ended a complete replay (its
    /// `Finished` already queued) got none of the stream: it is ended `stalled` with a word why, on its control
    /// connection and in the run report, never given a normal end over an empty book; a connection that has not
    /// subscribed yet is refused, saying the feed ended. (Seen on Soft-RoCE: a relay
    /// restarted as its upstream's file ended relayed nothing and took the end for a restart.)
    #[test]
    fn a_session_that_subscribes_as_the_replay_ends_is_ended_stalled_not_given_a_normal_end() {
        use mdfan_fabric::shm::{ShmLocalRing, DEFAULT_DIR};
        let (crate::Agents { mut feed, mut fanout, mut conductor }, addr) = itch_snippet_agents();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !fanout.is_done() {
            assert!(std::time::Instant::now() < deadline, "watchdog");
            feed.do_work();
            fanout.do_work(); // the conductor does not run: the hot loop's `Finished` waits in its queue
        }
        let (ring, grant) = ShmLocalRing::create(std::path::Path::new(DEFAULT_DIR), 64).unwrap();
        let mut silent = std::net::TcpStream::connect(addr).unwrap(); // connected, never subscribes
        let mut late = std::net::TcpStream::connect(addr).unwrap();
        control::write_msg(&mut late, &ControlMsg::Subscribe(Subscribe::new("late", grant))).unwrap();
        // accepted, answered and handed to the hot loop, which will never read the command
        while !conductor.sessions.values().any(|e| matches!(e.stage, Stage::Live)) {
            assert!(std::time::Instant::now() < deadline, "watchdog");
            conductor.follow_journal();
            conductor.accept();
            conductor.finish_handshakes();
            conductor.admit_ready();
        }
        while !conductor.is_done() {
            assert!(std::time::Instant::now() < deadline, "watchdog");
            conductor.do_work();
        }
        late.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(matches!(control::read_msg(&mut late), Ok(ControlMsg::Accept(_))));
        let bye = Bye {
            reason: CloseReason::Stalled,
            detail: "subscribed as the feed ended: no record of the stream reached this session".into(),
        };
        assert_eq!(control::read_msg(&mut late).unwrap(), ControlMsg::Bye(bye));
        // the one still in its handshake is told too (a silent close reads as a publisher that died)
        silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let reject = Reject {
            reason: "the feed ended (end_of_stream) before this subscription was answered".into(),
            publisher_version: control::PROTOCOL_VERSION,
        };
        assert_eq!(control::read_msg(&mut silent).unwrap(), ControlMsg::Reject(reject));
        let report = conductor.take_report().unwrap();
        assert_eq!(report.end, CloseReason::EndOfStream);
        let session = report.session("late").unwrap();
        assert_eq!((session.end, session.sent), (Some(CloseReason::Stalled), 0), "{}", session.line());
        drop(ring);
    }
}
