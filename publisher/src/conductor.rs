//! The conductor: the publisher's control plane, an [`Agent`] run on the thread that calls
//! [`crate::Publisher::run`] under a backoff idle strategy ([`CONDUCTOR_IDLE`]). One duty cycle
//! ([`Conductor::do_work`]) is one pass: move waiting commands into the hot loop's queue, follow the journal,
//! take a live ITCH feed's Stock Directory definitions into the symbology (`Conductor::take_definitions`),
//! accept new control connections, finish handshakes (attach rings), hand connected sessions to the hot loop,
//! read control connections (snapshot requests, departures), handle what the hot loop reports (retirements,
//! snapshot buffers, the end of the replay) and print the counters when asked; while a session's send completions
//! carry NIC timestamps, it maps the NIC clock and the TSC onto `CLOCK_REALTIME` for the hot loop about once a
//! second (`Conductor::refresh_send_clock`). It logs what the hot loop cannot and frees retired
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
use mdfan_wire::{Books, InstrumentDef, Symbology};

use mdfan_tuning::{Agent, IdleStrategy};

use crate::agent::{AgentCounters, AgentReport, Command, Event};
use crate::config::Config;
use crate::journal::{FeedState, Journal};
use crate::queue;
use crate::report::{RunReport, SessionReport};
use crate::send_clock::{SendClockMap, TscRealtime, SEND_CLOCK_REALIGN};
use crate::session::{Session, SessionCounters};
use crate::HANDSHAKE_TIMEOUT;

/// Checks `sub` against the publisher's `[access]` list: a known name with its token (compared in constant
/// time), asking for no more than its entitlement. The reason names the field and says what is allowed.
pub(crate) fn check_access(access: &crate::config::AccessSection, sub: &Subscribe) -> Result<(), String> {
    let entry = check_token(access, sub)?;
    let Some(allowed) = &entry.instruments else { return Ok(()) };
    let may = || allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    match &sub.instruments {
        None => Err(format!("field instruments: every instrument asked; {:?} may have only {}", sub.name, may())),
        Some(ids) => {
            let refused: Vec<String> = ids.iter().filter(|id| !allowed.contains(id)).map(u32::to_string).collect();
            if refused.is_empty() {
                Ok(())
            } else {
                Err(format!("field instruments: {} not entitled; {:?} may have {}", refused.join(","), sub.name, may()))
            }
        }
    }
}

/// The `[access]` entry of `sub`'s name if its token matches (compared in constant time); the reason for a
/// `Reject` otherwise. An unknown name and a wrong token read the same, so a refusal does not tell which names
/// exist.
pub(crate) fn check_token<'a>(
    access: &'a crate::config::AccessSection,
    sub: &Subscribe,
) -> Result<&'a crate::config::AccessEntry, String> {
    use subtle::ConstantTimeEq as _;
    let Some(token) = &sub.token else {
        return Err(format!(
            "field token: missing: this publisher authenticates its subscribers ({:?} sent none)",
            sub.name
        ));
    };
    let entry = access.subscribers.iter().find(|e| e.name == sub.name);
    match entry {
        Some(e) if bool::from(e.token.as_bytes().ct_eq(token.as_bytes())) => Ok(e),
        _ => Err(format!("field token: not accepted for subscriber {:?}", sub.name)),
    }
}

/// The `tracing` target of the audit log: connects (`event = "accept"`), refusals (`refuse`, with the reason),
/// departures (`leave`), drops (`drop`, with the reason) and access reloads (`reload`). Select it with
/// `RUST_LOG=mdfan_audit=info` or read it from the JSON log (`--log-json`).
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

/// Ids for a message: at most 20, then how many more.
fn id_list(ids: &[u32]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids.iter().take(SHOWN).map(u32::to_string).collect::<Vec<_>>().join(", ");
    if ids.len() > SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    text
}

/// Strings for a message: at most 20, then how many more.
fn text_list(items: &[&str]) -> String {
    const SHOWN: usize = 20;
    let mut text = items.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    text
}

/// An accept whose definitions would make it larger than a control frame may be keeps the first ones that fit
/// (halving; logged): the subscriber still gets its records, some without a symbol.
fn fit_in_a_frame(mut msg: ControlMsg) -> ControlMsg {
    let ControlMsg::Accept(accept) = &mut msg else { return msg };
    let all = accept.definitions.len();
    let limit = 4 + control::MAX_FRAME_BYTES as usize;
    while !accept.definitions.is_empty() && control::encode(&ControlMsg::Accept(accept.clone())).len() > limit {
        accept.definitions.truncate(accept.definitions.len() / 2);
    }
    if accept.definitions.len() < all {
        tracing::warn!(
            sent = accept.definitions.len(),
            known = all,
            "too many instrument definitions for one accept frame: only the first ones are sent"
        );
    }
    msg
}

/// Turns the symbols `sub` names into instrument_ids added to its `instruments` (which then filter: a
/// subscriber naming only symbols gets only those), and leaves `symbols` empty. Every instrument_id of a
/// symbol counts (more than one when the symbol named several instruments over the feed's dates).
///
/// # Errors
/// The reason for a `Reject`: a symbol this publisher does not know (named, with how many it knows), an
/// empty or too long list.
pub(crate) fn resolve_symbols(symbology: &Symbology, sub: &mut Subscribe) -> Result<(), String> {
    let Some(symbols) = sub.symbols.take() else { return Ok(()) };
    if symbols.is_empty() {
        return Err("field symbols: empty (leave it out to get every instrument)".into());
    }
    if symbols.len() > 1 << 16 {
        return Err(format!("field symbols: {} symbols, at most 65536", symbols.len()));
    }
    let mut ids = sub.instruments.take().unwrap_or_default();
    let mut unknown = Vec::new();
    for symbol in &symbols {
        match symbology.ids_of(symbol) {
            found if found.is_empty() => unknown.push(symbol.as_str()),
            found => ids.extend(found),
        }
    }
    if !unknown.is_empty() {
        let known: Vec<&str> = symbology.iter().map(|d| d.symbol.as_str()).collect();
        let have = match known.len() {
            0 => "it knows no symbols: the feed has no symbol mappings and no feed.symbols file is set".to_owned(),
            1 => format!("it knows 1 symbol: {}", known[0]),
            n => format!("it knows {n} symbols: {}", text_list(&known)),
        };
        return Err(format!("field symbols: {} not known to this publisher ({have})", text_list(&unknown)));
    }
    ids.sort_unstable();
    ids.dedup();
    sub.instruments = Some(ids);
    Ok(())
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
    /// Commands sent to the hot loop for this session: its `Add`, then each `Snapshot`.
    commands: u64,
    counters: Arc<SessionCounters>,
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
    /// The counters file `mdfan-stat` reads (`publisher.counters_dir`), rewritten every [`COUNTERS_PERIOD`].
    pub(crate) counters_file: Option<mdfan_tuning::counters::CountersWriter>,
    /// When the counters file was last rewritten.
    pub(crate) counters_written: std::time::Instant,
    /// A live feed's counters.
    pub(crate) live_feed: Option<Arc<crate::live::LiveCounters>>,
    /// A live ITCH 5.0 feed's MoldUDP64 counters.
    pub(crate) itch_feed: Option<Arc<crate::live_itch::MoldCounters>>,
    /// Set (e.g. by SIGHUP) to have the next pass re-read `[access]` from the config file.
    pub(crate) reload: Arc<AtomicBool>,
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
    /// The instruments the publisher can name: subscribers' `symbols` resolve against it, and each `Accept`
    /// carries the definitions of the subscriber's instruments.
    pub(crate) symbology: Symbology,
    /// A live ITCH 5.0 feed's Stock Directory messages, from the feed thread: drained into `symbology` every
    /// pass ([`Conductor::take_definitions`]).
    pub(crate) directory: Option<crate::live_itch::DirectoryReceiver>,
    /// Stock Directory messages the feed thread dropped (queue full) that were already logged.
    pub(crate) definitions_dropped_logged: u64,
    /// Journal positions scanned for instruments.
    pub(crate) seen: u64,
    /// Handshakes waiting for the feed to show the instruments they name ([`Conductor::instruments_unsettled`]).
    pub(crate) deferred: Vec<Handshake>,
    pub(crate) counters: Arc<AgentCounters>,
    /// The publisher's books, kept at the hot loop's position from the journal (every pass).
    pub(crate) books: Books,
    /// The publisher's price-level books, kept as `books`, for a feed that carries price levels (a live MDP 3.0
    /// channel, a LOBSTER file); `None` for an order-level feed (DBN, ITCH), whose records (an ITCH
    /// `InstrumentStale`, say) must not make price-level books.
    pub(crate) mbp: Option<mdfan_wire::MbpBooks>,
    /// Each instrument's last trading status record of each status kind (ITCH `H`, `Y`, `h`), kept as `books`
    /// and keyed by (instrument_id, [`mdfan_wire::StatusKind`] byte), so a snapshot carries them: a late joiner
    /// or a resync knows a halt that began before its snapshot. Grows by one entry per instrument and kind seen.
    pub(crate) statuses: std::collections::BTreeMap<(u32, u8), mdfan_wire::BookUpdate>,
    /// Feed records applied to `books`.
    pub(crate) applied: u64,
    pub(crate) clock: quanta::Clock,
    /// Accepted sessions whose subscriber side is not connected yet, with their deadline.
    pub(crate) pending: Vec<(Session, std::time::Instant)>,
    /// Journal positions held for sessions until the hot loop holds them ([`Hold`]).
    pub(crate) holds: Vec<Hold>,
    /// The fabric provider, opened once; attaches each subscriber's ring.
    pub(crate) sender: AnySender,
    /// Which clock stamped `ts_recv_ns`, as each accept says it (`Publisher::set_ts_recv_clock`).
    pub(crate) ts_recv_clock: crate::TsRecvClockCell,
    /// A session whose send completions carry NIC timestamps was admitted: the clocks are mapped onto
    /// `CLOCK_REALTIME` for the hot loop from then on ([`Conductor::refresh_send_clock`]).
    pub(crate) sends_stamped: bool,
    /// When the clocks were last mapped for the hot loop (`None`: never).
    pub(crate) send_clock_at: Option<std::time::Instant>,
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
        tracing::warn!(target: AUDIT, %peer, %reason, event = "refuse", "subscriber refused");
        let msg = ControlMsg::Reject(Reject { reason, publisher_version: control::PROTOCOL_VERSION });
        let _ = control::write_msg(stream, &msg);
    }

    /// Answers every subscribe message read so far (attach and accept, or reject). Returns how many.
    pub(crate) fn finish_handshakes(&mut self) -> usize {
        let mut n = 0;
        let mut deferred = std::mem::take(&mut self.deferred).into_iter();
        while let Some((mut stream, peer, mut msg)) = deferred.next().or_else(|| self.handshakes.1.try_recv().ok()) {
            if let Ok(ControlMsg::Subscribe(sub)) = &mut msg {
                // Who it is first: an unauthenticated peer learns nothing, not even which symbols exist.
                let token = self.cfg.access.as_ref().map_or(Ok(()), |a| check_token(a, sub).map(|_| ()));
                if let Err(reason) = token.and_then(|()| resolve_symbols(&self.symbology, sub)) {
                    n += 1;
                    Self::reject(&mut stream, peer, reason);
                    continue;
                }
            }
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
        if self.cfg.lines.is_some() {
            return false; // a live feed never settles: an id not seen yet is accepted (it may come)
        }
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
        if let Some(access) = &self.cfg.access {
            check_access(access, sub)?;
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
                // A symbol the subscriber asked for resolved to one of these: name it beside its id.
                let named: Vec<String> = unknown
                    .iter()
                    .map(|id| self.symbology.get(*id).map_or(id.to_string(), |d| format!("{id} ({})", d.symbol)))
                    .collect();
                let named: Vec<&str> = named.iter().map(String::as_str).collect();
                let known: Vec<u32> = self.instruments.iter().copied().collect();
                return Err(format!(
                    "field instruments: {} not in this feed, no record of it (it has {})",
                    text_list(&named),
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
                    if let Some(Err(e)) = self.mbp.as_mut().map(|mbp| mbp.apply(&r)) {
                        tracing::warn!(record = self.applied + 1, cause = %e, "publisher price-level book refused a feed record");
                    }
                    if let Some(status) = r.status() {
                        self.statuses.insert((r.instrument_id, status.kind as u8), r);
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
        // Holds the hot loop has taken over are let go (Acquire: pairs with its Release of `adopted`, after its
        // `hot_done`); the others keep the journal at their positions.
        self.holds.retain(|h| h.counters.adopted.load(Ordering::Acquire) < h.command);
        let held = self.holds.iter().map(|h| h.position).min().unwrap_or(u64::MAX);
        self.journal.conductor_done(self.applied.min(held));
        work
    }

    /// A live ITCH feed's Stock Directory messages that came since the last pass, into `symbology` (a later one
    /// of a stock locate replaces the earlier definition): subscribers attaching from now on can name them and
    /// get their definitions. Logs the messages the feed thread dropped because the queue was full. Returns the
    /// definitions taken.
    pub(crate) fn take_definitions(&mut self) -> usize {
        let Some(directory) = self.directory.as_mut() else { return 0 };
        let n = directory.drain_into(&mut self.symbology);
        let dropped = self.itch_feed.as_ref().map_or(0, |c| c.definitions_dropped.load(Ordering::Relaxed));
        if dropped > self.definitions_dropped_logged {
            tracing::warn!(
                dropped = dropped - self.definitions_dropped_logged,
                dropped_total = dropped,
                queue_entries = crate::live_itch::DIRECTORY_QUEUE_ENTRIES,
                "Stock Directory messages dropped: the queue to the conductor was full; their symbols stay unknown"
            );
            self.definitions_dropped_logged = dropped;
        }
        n
    }

    /// Holds the journal at `position` for session `k`'s command just sent (its `commands`), unless the feed is
    /// live: a live feed cannot wait (a late joiner whose position is overwritten gets a fresh snapshot).
    fn hold(&mut self, k: usize, position: u64) {
        if self.live_feed.is_some() || self.itch_feed.is_some() {
            return;
        }
        let c = &self.conns[k];
        let hold = Hold { session_id: c.session_id, position, command: c.commands, counters: Arc::clone(&c.counters) };
        self.holds.push(hold);
    }

    /// Brings the publisher's books up to the hot loop's position and snapshots the instruments in `filter`:
    /// `SnapshotBegin`, the order books, the price-level books, each instrument's last trading status records
    /// (flagged [`mdfan_wire::flags::SNAPSHOT`]), `SnapshotEnd`; the markers' `size` counts the books.
    /// Returns the records and the position (feed records included).
    pub(crate) fn snapshot(&mut self, filter: Option<&[u32]>) -> (Vec<mdfan_wire::BookUpdate>, u64) {
        self.follow_journal();
        let position = self.applied;
        let mut records = self.books.snapshot(filter, position);
        let end = records.pop().expect("a snapshot ends with SnapshotEnd");
        if let Some(mbp) = self.mbp.as_ref().filter(|mbp| !mbp.is_empty()) {
            let books = mbp.snapshot_into(filter, &mut records) as u32;
            records[0].size += books;
        }
        let wanted = |id: &u32| filter.is_none_or(|f| f.contains(id));
        records.extend(
            self.statuses
                .iter()
                .filter(|((id, _), _)| wanted(id))
                .map(|(_, r)| mdfan_wire::BookUpdate { flags: r.flags | mdfan_wire::flags::SNAPSHOT, ..*r }),
        );
        records.push(mdfan_wire::BookUpdate { size: records[0].size, ..end });
        (records, position)
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
        let accept = fit_in_a_frame(ControlMsg::Accept(Accept {
            session_id: id,
            first_seq: 1,
            fabric,
            policy: sub.policy,
            heartbeat_interval_ms: self.cfg.publisher.heartbeat_interval_ms,
            definitions: self.definitions_for(sub.instruments.as_deref()),
            ts_recv_clock: self.ts_recv_clock.get(),
        }));
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
        let send_stamped = session.send_completions_stamped();
        if send_stamped && !self.sends_stamped {
            self.sends_stamped = true;
            self.refresh_send_clock(); // before its first post: the hot loop gets the mapping ahead of the session
        }
        let counters = Arc::clone(&session.counters);
        // The hot loop gets the session once the subscriber's side is connected (at once on shm).
        self.pending.push((session, std::time::Instant::now() + CONNECT_TIMEOUT));
        tracing::info!(
            target: AUDIT,
            event = "accept",
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
            commands: 1, // the Add, sent once the subscriber's side is connected
            counters: Arc::clone(&counters),
        });
        self.hold(self.conns.len() - 1, position);
        self.reports.push(SessionReport::new(id, sub.name, sub.policy, send_stamped));
        self.live.push(Live { id, counters });
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
        self.send_clock_at = Some(std::time::Instant::now());
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

    /// Builds a snapshot for the session of connection `k` (asked for after the gap at `gap_from_seq`) and sends
    /// it to the hot loop.
    pub(crate) fn serve_snapshot(&mut self, k: usize, gap_from_seq: u64) {
        self.conns[k].snapshot_pending = true;
        self.conns[k].served_gap = gap_from_seq;
        self.conns[k].commands += 1;
        let id = self.conns[k].session_id;
        let filter = self.conns[k].filter.clone();
        let (records, position) = self.snapshot(filter.as_deref());
        self.hold(k, position);
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
                tracing::info!(target: AUDIT, event = "leave", session = conn.session_id, name = %conn.name,
                    reason = reason.as_str(), %detail, "subscriber leaving");
                let _ = conn.stream.set_nonblocking(false);
                let _ = control::write_msg(&mut conn.stream, &ControlMsg::Bye(Bye { reason, detail }));
                conn.counters.left.store(reason as u32, Ordering::Relaxed);
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
        self.holds.retain(|h| h.session_id != s.id);
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
            if let Some(line) = r.send_completion_line() {
                let _ = writeln!(out, "counters {line}");
            }
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
        if let Some(live) = &self.live_feed {
            let _ = writeln!(out, "counters {}", live.report().line());
        }
        if let Some(mold) = &self.itch_feed {
            let _ = writeln!(out, "counters {}", mold.report().line());
        }
    }

    /// Rewrites the counters file (see [`mdfan_tuning::counters`]): the run's, the live feed's and every
    /// session's counters, live sessions first, then ended ones newest first (rows past the file's capacity are
    /// left out). Names and labels are Prometheus style; `mdfan-stat` prints them.
    pub(crate) fn write_counters(&mut self) {
        use mdfan_tuning::counters::MetricKind::{Counter, Gauge};
        let Some(mut file) = self.counters_file.take() else { return };
        for l in &self.live {
            if let Some(r) = self.reports.iter_mut().find(|r| r.id == l.id) {
                r.update(&l.counters, &self.clock);
            }
        }
        file.begin();
        let c = &self.counters;
        let to_ns = |t| self.clock.delta_as_nanos(0, t);
        file.set("mdfan_records_total", "", Counter, c.records.load(Ordering::Relaxed));
        file.set("mdfan_feed_read_total", "", Counter, self.journal.published());
        file.set("mdfan_feed_done", "", Gauge, u64::from(self.journal.state() != FeedState::Running));
        file.set("mdfan_hot_cycle_ns", "quantile=\"0.5\"", Gauge, to_ns(c.cycles.quantile(0.5)));
        file.set("mdfan_hot_cycle_ns", "quantile=\"0.999\"", Gauge, to_ns(c.cycles.quantile(0.999)));
        file.set("mdfan_hot_cycle_ns", "quantile=\"1\"", Gauge, to_ns(c.cycles.max()));
        file.set("mdfan_subscribers", "", Gauge, self.live.len() as u64);
        if let Some(live) = &self.live_feed {
            let f = live.report();
            for (i, line) in ["a", "b"].into_iter().enumerate() {
                let l = format!("line=\"{line}\"");
                file.set("mdfan_line_datagrams_total", &l, Counter, f.datagrams[i]);
                file.set("mdfan_line_refused_total", &l, Counter, f.refused[i]);
                file.set("mdfan_line_delivered_total", &l, Counter, f.delivered[i]);
            }
            file.set("mdfan_feed_duplicates_total", "", Counter, f.duplicates);
            file.set("mdfan_feed_late_total", "", Counter, f.late);
            file.set("mdfan_feed_jumps_held_total", "", Counter, f.jumps[0]);
            file.set("mdfan_feed_jumps_taken_total", "", Counter, f.jumps[1]);
            file.set("mdfan_feed_lost_seqs_total", "", Counter, f.gap_seqs);
            file.set("mdfan_feed_lost_runs_total", "", Counter, f.gap_runs);
            file.set("mdfan_feed_bad_packets_total", "", Counter, f.bad_packets);
            file.set("mdfan_feed_level_records_total", "", Counter, f.level_records);
            file.set("mdfan_feed_stale_records_total", "", Counter, f.stale_records);
            file.set("mdfan_feed_snapshot_packets_total", "", Counter, f.snapshot_packets);
            file.set("mdfan_feed_recovered_total", "", Counter, f.recovered);
            file.set("mdfan_feed_stale_instruments", "", Gauge, f.stale_now);
            file.set("mdfan_feed_recovery_timeouts_total", "", Counter, f.recovery_timeouts);
        }
        if let Some(mold) = &self.itch_feed {
            let f = mold.report();
            for (i, origin) in ["a", "b", "retransmit"].into_iter().enumerate() {
                file.set("mdfan_mold_packets_total", &format!("origin=\"{origin}\""), Counter, f.packets[i]);
            }
            file.set("mdfan_mold_heartbeats_total", "", Counter, f.heartbeats);
            file.set("mdfan_mold_messages_total", "", Counter, f.messages);
            file.set("mdfan_mold_retransmitted_messages_total", "", Counter, f.retransmitted);
            file.set("mdfan_mold_duplicates_total", "", Counter, f.duplicates);
            file.set("mdfan_mold_gaps_total", "", Counter, f.gaps);
            file.set("mdfan_mold_requests_total", "", Counter, f.requests);
            file.set("mdfan_mold_retries_total", "", Counter, f.retries);
            file.set("mdfan_mold_given_up_holes_total", "", Counter, f.given_up_holes);
            file.set("mdfan_mold_given_up_messages_total", "", Counter, f.given_up_messages);
            file.set("mdfan_mold_foreign_session_total", "", Counter, f.foreign_session);
            file.set("mdfan_mold_bad_packets_total", "", Counter, f.bad_packets);
            file.set("mdfan_mold_definitions_dropped_total", "", Counter, f.definitions_dropped);
            file.set("mdfan_mold_jumps_held_total", "", Counter, f.jumps_held);
            file.set("mdfan_mold_jumps_taken_total", "", Counter, f.jumps_taken);
            file.set("mdfan_feed_stale_records_total", "", Counter, f.stale_records);
        }
        let order = self
            .reports
            .iter()
            .filter(|r| r.end.is_none())
            .chain(self.reports.iter().rev().filter(|r| r.end.is_some()));
        for r in order {
            let name: String = r.name.chars().filter(|ch| !matches!(ch, '"' | '\\' | '\n')).collect();
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
        self.counters_written = std::time::Instant::now();
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
                        Some(detail) => tracing::warn!(target: AUDIT, event = "drop", session = id, %name,
                            reason = reason.as_str(), %detail, sent, "subscriber dropped"),
                        None => tracing::warn!(target: AUDIT, event = "drop", session = id, %name,
                            reason = reason.as_str(), sent, "subscriber dropped"),
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
            live: self.live_feed.as_ref().map(|c| c.report()),
            moldudp64: self.itch_feed.as_ref().map(|c| c.report()),
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
    use mdfan_wire::control::{RingGrant, SlowConsumerPolicy};

    fn symbology() -> Symbology {
        let six_c = InstrumentDef {
            display_factor_e9: 100_000,
            tick_size_e9: 500_000_000,
            ..InstrumentDef::new(174969, "6CZ6")
        };
        [InstrumentDef::new(17077, "ESH4"), six_c].into_iter().collect()
    }

    fn sub(instruments: Option<Vec<u32>>, symbols: Option<&[&str]>) -> Subscribe {
        Subscribe {
            name: "a".into(),
            instruments,
            symbols: symbols.map(|s| s.iter().map(|s| s.to_string()).collect()),
            ring: RingGrant::Shm { path: "/dev/shm/x".into(), slot_count: 64 },
            policy: SlowConsumerPolicy::Resync,
            snapshot: true,
            token: None,
        }
    }

    #[test]
    fn symbols_resolve_into_the_instrument_filter() {
        let s = symbology();
        let mut only = sub(None, Some(&["ESH4"]));
        resolve_symbols(&s, &mut only).unwrap();
        assert_eq!((only.instruments, only.symbols), (Some(vec![17077]), None));
        let mut both = sub(Some(vec![174969, 9]), Some(&["ESH4", "6CZ6"]));
        resolve_symbols(&s, &mut both).unwrap();
        assert_eq!(both.instruments, Some(vec![9, 17077, 174969]));
        let mut none = sub(Some(vec![9]), None);
        resolve_symbols(&s, &mut none).unwrap();
        assert_eq!(none.instruments, Some(vec![9]));
    }

    #[test]
    fn an_unknown_symbol_is_refused_by_name_with_what_is_known() {
        let e = resolve_symbols(&symbology(), &mut sub(None, Some(&["ESH4", "XYZ", "esh4"]))).unwrap_err();
        assert_eq!(e, "field symbols: XYZ, esh4 not known to this publisher (it knows 2 symbols: ESH4, 6CZ6)");
        let one: Symbology = [InstrumentDef::new(17077, "ESH4")].into_iter().collect();
        let e = resolve_symbols(&one, &mut sub(None, Some(&["XYZ"]))).unwrap_err();
        assert_eq!(e, "field symbols: XYZ not known to this publisher (it knows 1 symbol: ESH4)");
        let e = resolve_symbols(&Symbology::new(), &mut sub(None, Some(&["XYZ"]))).unwrap_err();
        assert!(
            e.ends_with("(it knows no symbols: the feed has no symbol mappings and no feed.symbols file is set)"),
            "{e}"
        );
        let e = resolve_symbols(&symbology(), &mut sub(None, Some(&[]))).unwrap_err();
        assert_eq!(e, "field symbols: empty (leave it out to get every instrument)");
    }

    /// A live ITCH publisher's conductor (lines on 127.0.0.1, port 0; no counters file) whose Stock Directory
    /// queue is 2 entries long, its feed end the test's.
    fn live_itch_conductor() -> (Conductor, crate::live_itch::DirectorySender) {
        let text = "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = \"\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n\
                    [lines]\na = \"127.0.0.1:0\"\n\n[fabric]\nprovider = \"shm\"\n";
        let cfg = Config::parse(text, std::path::Path::new("live-itch-unit.toml")).unwrap();
        let mut conductor = crate::Publisher::bind(cfg).unwrap().into_agents(Arc::default()).conductor;
        assert!(conductor.directory.is_some(), "a live ITCH feed hands its Stock Directory to the conductor");
        let (tx, rx) = crate::live_itch::directory_queue(2);
        conductor.directory = Some(rx);
        (conductor, tx)
    }

    #[test]
    fn the_conductor_takes_stock_directory_entries_into_its_symbology_each_pass() {
        use crate::live_itch::DirectoryEntry;
        let (mut conductor, mut tx) = live_itch_conductor();
        let entry = |locate, stock: &[u8; 8]| DirectoryEntry { stock_locate: locate, stock: *stock };
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
        // The feed thread publishes its drop count; the conductor logs each increase once.
        let counters = Arc::clone(conductor.itch_feed.as_ref().unwrap());
        counters.definitions_dropped.store(tx.dropped(), Ordering::Relaxed);
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
            })
        };
        let few: Vec<InstrumentDef> = symbology().iter().cloned().collect();
        assert_eq!(fit_in_a_frame(accept(few.clone())), accept(few));
        let many: Vec<InstrumentDef> = (0..40_000).map(|i| InstrumentDef::new(i, format!("SYM{i:05}"))).collect();
        assert!(control::encode(&accept(many.clone())).len() > 4 + control::MAX_FRAME_BYTES as usize);
        let ControlMsg::Accept(fitted) = fit_in_a_frame(accept(many.clone())) else { unreachable!() };
        // 40,000 definitions of about 90 bytes: halved until they fit, 20,000.
        assert_eq!(fitted.definitions, many[..20_000].to_vec());
        let frame = control::encode(&ControlMsg::Accept(fitted));
        assert!(frame.len() <= 4 + control::MAX_FRAME_BYTES as usize);
    }

    /// The start-of-day ITCH file (data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_first1000.itch) gives
    /// locates 1 (A), 2 (AA) and 3 (AAAU) a Stock Trading Action `T` and a Reg SHO `0` each (A's at venue_seq 82
    /// and 83, AAAU's at 583 and 584) and no order: replayed to no subscriber, a snapshot of locates 1 and 3
    /// carries those four status records, flagged as snapshot records, between its markers (which count no book).
    #[test]
    fn a_snapshot_carries_each_instruments_last_trading_statuses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_first1000.itch");
        let text = format!(
            "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 0\n\n[feed]\nformat = \"itch50\"\npath = {path:?}\nsession_date = \"2019-12-30\"\n"
        );
        let publisher = crate::Publisher::bind(Config::parse(&text, std::path::Path::new("t.toml")).unwrap()).unwrap();
        let crate::Agents { mut feed, mut fanout, mut conductor } =
            publisher.into_agents(Arc::new(AtomicBool::new(false)));
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
                (r.instrument_id, r.venue_seq, s.kind as u8, s.state, r.flags & mdfan_wire::flags::SNAPSHOT != 0)
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
}
