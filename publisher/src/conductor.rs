//! The conductor: the publisher's control plane, an [`Agent`] run on the thread that calls
//! [`crate::Publisher::run`] under a backoff idle strategy ([`CONDUCTOR_IDLE`]). One duty cycle
//! ([`Conductor::do_work`]) is one pass: move waiting commands into the hot loop's queue, accept new control
//! connections, finish handshakes (attach rings), hand connected sessions to the hot loop, read control
//! connections (snapshot requests, departures), handle what the hot loop reports (retirements, snapshot buffers,
//! the end of the replay) and print the counters when asked. It logs what the hot loop cannot and frees retired
//! sessions' memory. Everything here may block briefly, allocate and log; nothing here runs on the hot loop's
//! thread. It is done once the hot loop's [`Event::Finished`] has been handled: the run report is then in
//! [`Conductor::take_report`].

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use mdfan_fabric::{AnyRemoteRing, AnySender, CloseReason, FabricError};
use mdfan_wire::control::{self, Accept, AcceptFabric, Bye, ControlError, ControlMsg, Reject, Subscribe};
use mdfan_wire::Books;

use mdfan_tuning::{Agent, IdleStrategy};

use crate::agent::{AgentCounters, AgentReport, Command, Event};
use crate::config::Config;
use crate::journal::{FeedState, Journal};
use crate::queue;
use crate::report::{RunReport, SessionReport};
use crate::session::{Session, SessionCounters};
use crate::HANDSHAKE_TIMEOUT;

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

/// Ids for a message: at most 20, then how many more.
fn id_list(ids: &[u32]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids.iter().take(SHOWN).map(u32::to_string).collect::<Vec<_>>().join(", ");
    if ids.len() > SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    text
}

/// A subscriber's control connection, read without blocking.
pub(crate) struct Conn {
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
pub(crate) struct Live {
    id: u64,
    counters: Arc<SessionCounters>,
}

type Handshake = (TcpStream, SocketAddr, Result<ControlMsg, ControlError>);

/// The control plane's state. See the module docs.
pub struct Conductor {
    pub(crate) cfg: Config,
    /// The control endpoint, non-blocking.
    pub(crate) listener: TcpListener,
    /// From the hot loop.
    pub(crate) events: rtrb::Consumer<Event>,
    /// Set (e.g. by SIGUSR1) to have the next pass print every counter.
    pub(crate) dump: Arc<AtomicBool>,
    /// The run report, once the hot loop has finished and the conductor has wrapped up (until taken).
    pub(crate) report: Option<RunReport>,
    /// The hot loop's end has been handled: nothing more to do.
    pub(crate) finished: bool,
    /// To the hot loop; what does not fit waits, in order, for the next pass.
    pub(crate) cmd_tx: queue::Outbox<Command>,
    pub(crate) next_id: u64,
    pub(crate) conns: Vec<Conn>,
    pub(crate) reports: Vec<SessionReport>,
    pub(crate) live: Vec<Live>,
    pub(crate) handshakes: (mpsc::Sender<Handshake>, mpsc::Receiver<Handshake>),
    /// Normalised feed records, filled by the feed handler.
    pub(crate) journal: Arc<Journal>,
    /// The instrument_ids seen in the journal so far.
    pub(crate) instruments: std::collections::BTreeSet<u32>,
    /// Journal positions scanned for instruments.
    pub(crate) seen: u64,
    /// Handshakes waiting for the feed to show the instruments they name ([`Conductor::instruments_unsettled`]).
    pub(crate) deferred: Vec<Handshake>,
    pub(crate) counters: Arc<AgentCounters>,
    /// The publisher's books, kept at the hot loop's position from the journal (every pass).
    pub(crate) books: Books,
    /// Feed records applied to `books`.
    pub(crate) applied: u64,
    pub(crate) clock: quanta::Clock,
    /// Accepted sessions whose subscriber side is not connected yet, with their deadline.
    pub(crate) pending: Vec<(Session, std::time::Instant)>,
    /// The fabric provider, opened once; attaches each subscriber's ring.
    pub(crate) sender: AnySender,
    /// Which clock stamped `ts_recv_ns`, as each accept says it (`Publisher::set_ts_recv_clock`).
    pub(crate) ts_recv_clock: crate::TsRecvClockCell,
}

impl Conductor {
    /// Accepts new control connections; each reads its subscribe message on a short-lived thread with a
    /// timeout, so a silent or slow peer never holds up the conductor. Returns the connections accepted.
    pub(crate) fn accept(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    n += 1;
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
                Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    return n;
                }
            }
        }
    }

    pub(crate) fn reject(stream: &mut TcpStream, peer: SocketAddr, reason: String) {
        tracing::warn!(%peer, %reason, "subscriber refused");
        let msg = ControlMsg::Reject(Reject { reason, publisher_version: control::PROTOCOL_VERSION });
        let _ = control::write_msg(stream, &msg);
    }

    /// Answers every subscribe message read so far (attach and accept, or reject). Returns how many.
    pub(crate) fn finish_handshakes(&mut self) -> usize {
        let mut n = 0;
        let mut deferred = std::mem::take(&mut self.deferred).into_iter();
        while let Some((mut stream, peer, msg)) = deferred.next().or_else(|| self.handshakes.1.try_recv().ok()) {
            if !matches!(&msg, Ok(ControlMsg::Subscribe(sub)) if self.instruments_unsettled(sub)) {
                n += 1;
            } else {
                // Names an instrument not seen yet while the feed is still being read: asked again next pass.
                self.deferred.push((stream, peer, msg));
                continue;
            }
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
        n
    }

    /// Whether `sub` names an instrument not seen in the journal yet while more may still be learnt before the
    /// replay: the feed is still being read and the journal has room (a file no longer than the journal is
    /// read whole before anyone needs it). Such a handshake waits; once this is false, [`Conductor::attach`]
    /// refuses ids the whole feed does not carry, and accepts unknown ids only for a feed longer than the journal.
    ///
    /// Also while this conductor has not yet scanned every record published: the feed may have ended since the
    /// last pass, and [`Conductor::attach`] judges an unknown id only against a whole scan.
    pub(crate) fn instruments_unsettled(&self, sub: &Subscribe) -> bool {
        let Some(ids) = &sub.instruments else { return false };
        let more_to_learn = self.journal.state() == FeedState::Running && !self.journal.is_full();
        let unscanned = self.seen < self.journal.published();
        ids.iter().any(|id| !self.instruments.contains(id)) && (more_to_learn || unscanned)
    }

    pub(crate) fn attach(&self, sub: &Subscribe) -> Result<(AnyRemoteRing, AcceptFabric), String> {
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
            // Once the whole feed has been read (a file no longer than the journal is read before the replay
            // starts) the publisher knows every instrument it carries: an id it does not have is a mistake.
            // While the feed is still being read, an id not seen yet may still come: accepted.
            let whole = self.journal.state() != FeedState::Running && self.seen == self.journal.published();
            let unknown: Vec<u32> = ids.iter().copied().filter(|id| !self.instruments.contains(id)).collect();
            if whole && !unknown.is_empty() {
                let known: Vec<u32> = self.instruments.iter().copied().collect();
                return Err(format!(
                    "field instruments: {} not in this feed (it has {})",
                    id_list(&unknown),
                    id_list(&known)
                ));
            }
        }
        self.sender.attach(&sub.ring).map_err(|e| match e {
            FabricError::Mismatch { .. } => format!("field ring: {e}"),
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
        while self.applied < position {
            match self.journal.read(self.applied) {
                Some(r) => {
                    if let Err(e) = self.books.apply(&r) {
                        tracing::warn!(record = self.applied + 1, cause = %e, "publisher book refused a feed record");
                    }
                }
                // The journal keeps every position until this conductor is done with it: never expected.
                None => {
                    tracing::error!(record = self.applied + 1, "journal record gone before the conductor applied it")
                }
            }
            self.applied += 1;
            work += 1;
        }
        self.journal.conductor_done(self.applied);
        work
    }

    /// Brings the publisher's books up to the hot loop's position and snapshots the instruments in `filter`.
    /// Returns the records and the position (feed records included).
    pub(crate) fn snapshot(&mut self, filter: Option<&[u32]>) -> (Vec<mdfan_wire::BookUpdate>, u64) {
        self.follow_journal();
        let position = self.applied;
        (self.books.snapshot(filter, position), position)
    }

    pub(crate) fn admit(
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
            ts_recv_clock: self.ts_recv_clock.get(),
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

    /// Builds a snapshot for the session of connection `k` (asked for after the gap at `gap_from_seq`) and sends
    /// it to the hot loop.
    pub(crate) fn serve_snapshot(&mut self, k: usize, gap_from_seq: u64) {
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

    /// Hands connected sessions to the hot loop; drops those whose subscriber never connected. Returns how many
    /// it handed over or dropped.
    pub(crate) fn admit_ready(&mut self) -> usize {
        let mut n = 0;
        let mut k = 0;
        while k < self.pending.len() {
            let (session, deadline) = &mut self.pending[k];
            if session.ring_mut().ready() {
                let (session, _) = self.pending.swap_remove(k);
                n += 1;
                let id = session.id;
                tracing::debug!(session = id, "subscriber connected; handed to the hot loop");
                self.send(Command::Add(session));
            } else if std::time::Instant::now() > *deadline {
                let (mut session, _) = self.pending.swap_remove(k);
                n += 1;
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
        n
    }

    /// Reads every control connection: snapshot requests are served; a closed connection means a dead
    /// subscriber, whose session is removed from the hot loop; garbage closes the connection with a reason.
    /// Returns the reads that brought bytes plus the connections closed.
    pub(crate) fn watch_connections(&mut self) -> usize {
        let mut n = 0;
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
                    Ok(got) => {
                        n += 1;
                        self.conns[k].buf.extend_from_slice(&buf[..got]);
                    }
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
                n += 1;
            } else {
                k += 1;
            }
        }
        n
    }

    pub(crate) fn record_end(&mut self, s: &Session, end: CloseReason) {
        if let Some(r) = self.reports.iter_mut().find(|r| r.id == s.id) {
            r.update(&s.counters, &self.clock);
            r.end = Some(end);
        }
        self.live.retain(|l| l.id != s.id);
    }

    pub(crate) fn dump(&mut self) {
        for l in &self.live {
            if let Some(r) = self.reports.iter_mut().find(|r| r.id == l.id) {
                r.update(&l.counters, &self.clock);
            }
        }
        // Marked `counters` (the final report's lines are not), with the final report's names. A stdout that
        // cannot take them (a closed pipe) loses the dump, nothing else.
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        for r in &self.reports {
            let _ = writeln!(out, "counters {}", r.line());
        }
        let c = &self.counters.cycles;
        let to_ns = |t| self.clock.delta_as_nanos(0, t);
        let _ = writeln!(
            out,
            "counters replay records={} cycle_p50_ns={} cycle_p999_ns={} cycle_max_ns={} end=running",
            self.counters.records.load(Ordering::Relaxed),
            to_ns(c.quantile(0.5)),
            to_ns(c.quantile(0.999)),
            to_ns(c.max())
        );
    }

    pub(crate) fn on_event(&mut self, event: Event) {
        match event {
            Event::Started { sessions } => tracing::info!(sessions, "replay started"),
            Event::Finished(report) => self.wrap_up(report),
            Event::CatchupLost { id } => {
                tracing::info!(session = id, "catch-up needs records the journal no longer holds: a fresh snapshot");
                if let Some(k) = self.conns.iter().position(|c| c.session_id == id) {
                    if self.conns[k].snapshot_pending {
                        self.conns[k].rerequest = Some(self.conns[k].rerequest.unwrap_or(0));
                    } else {
                        self.serve_snapshot(k, 0);
                    }
                }
            }
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

    pub(crate) fn say_bye(&mut self, end: CloseReason) {
        for conn in &mut self.conns {
            let _ = conn.stream.set_nonblocking(false);
            let _ = control::write_msg(&mut conn.stream, &ControlMsg::Bye(Bye::new(end)));
        }
    }

    /// The end of the run, after the hot loop's last event: waits (bounded) for each remaining session's last
    /// writes to complete, records how it ended, frees it, says bye on every control connection and writes the
    /// run report.
    fn wrap_up(&mut self, agent: AgentReport) {
        self.finished = true;
        let mut sessions = agent.sessions;
        for s in sessions.iter_mut() {
            s.ring_mut().drain(DRAIN_TIMEOUT);
            self.record_end(s, agent.end);
        }
        drop(sessions); // unmapped here, off the hot path
        self.say_bye(agent.end);
        let clock = &self.clock;
        let to_ns = |t: u64| clock.delta_as_nanos(0, t);
        let cycles = &self.counters.cycles;
        self.report = Some(RunReport {
            records: agent.records,
            replay_ns: to_ns(agent.replay_ticks),
            sessions: std::mem::take(&mut self.reports),
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
        });
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
    /// is the last.
    fn do_work(&mut self) -> usize {
        if self.finished {
            return 0;
        }
        let mut work = self.flush_backlog();
        work += self.follow_journal();
        work += self.accept();
        work += self.finish_handshakes();
        work += self.admit_ready();
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
        work
    }

    fn is_done(&self) -> bool {
        self.finished
    }
}
