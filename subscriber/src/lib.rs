//! mdfan-subscriber: the library a strategy embeds to receive records from an mdfan publisher.
//!
//! ```no_run
//! use mdfan_subscriber::{Books, CloseReason, Event, Health, IdleStrategy, Idler, Kind, Subscriber, SubscriberConfig};
//!
//! mdfan_subscriber::pin_current_thread(0)?; // a core of its own (not the publisher's hot_core): it never sleeps
//! let mut sub = Subscriber::connect(&SubscriberConfig::new("127.0.0.1:7700", "my-strategy"))?;
//! let (mut books, mut idler) = (Books::new(), Idler::new(IdleStrategy::BusySpin));
//! let (mut done, mut complete) = (false, false);
//! while !done {
//!     let n = sub.poll(256, |event| match event {
//!         Event::Record(r) if r.kind() == Some(Kind::EndOfStream) => {
//!             // complete only at the replay's end: a publisher that stopped early or a failed feed ends so too
//!             (done, complete) = (true, r.end_reason() == Some(CloseReason::EndOfStream));
//!         }
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
//!     if let Some(Health::Ended(_why)) = sub.maintain_if_due() {
//!         break; // the publisher ended the session (sub.bye() has its words) or vanished
//!     }
//! }
//! if !complete {
//!     eprintln!("the stream did not end whole: the books are partial");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Two programs to start from, each run against a publisher the way its header says (e.g. beside
//! `ops/run-demo`): `examples/bbo.rs` is this loop as a program; `examples/strategy.rs` is a strategy skeleton
//! to copy: a pinned thread, a spin poll, books applied per record, the BBO after each venue event, gaps and
//! stale books, reconnects under a [`Reconnect`] policy, and latency percentiles at the end.
//!
//! Two publishers of the same lines (a hot-hot pair, on two hosts): [`PairSubscriber::connect`] takes a config
//! per publisher and is polled like a [`Subscriber`]; it merges both sessions by venue position into one stream
//! (module [`pair`]: the rules, and what a strategy sees when a publisher dies, stalls or loses data).
//!
//! On a hot path, [`HotBooks`] is a drop-in for [`Books`] (the same results, record for record) that allocates
//! everything in [`HotBooks::with_capacity`] and nothing per record.
//!
//! # Which book for which feed
//!
//! [`Books`] and [`HotBooks`] are order books (MBO): they apply the order kinds (`Add`, `Modify`, `Cancel`,
//! `Clear`, ...) of the order-level feeds, DBN MBO files and Nasdaq ITCH 5.0, and ignore the rest. The
//! price-level feeds, CME MDP 3.0 (live) and LOBSTER, send price-level records (`LevelNew`, `LevelChange`,
//! `LevelDelete`, [`MbpBook`] docs) that only [`MbpBooks`] applies: with `Books` alone such a feed leaves every
//! book empty. A strategy that may face either feeds every record to both (each ignores the other's kinds), as
//! `mdfan-subscribe` does. `InstrumentStale` records (a loss on both lines, an `RptSeq` jump, an unknown ITCH
//! order reference; [`BookUpdate::stale_book`] says whether the order book or the price-level book) mark a book
//! stale until a snapshot or market recovery rebuilds it ([`MbpBook::is_stale`];
//! for order books the record is delivered for the strategy to act on), and `TradingStatus` records (ITCH halts)
//! go to a [`TradingStates`]. A live feed whose lines went quiet for the publisher's `lines.silent_after_ms` sends
//! one `FeedStatus` record (to every subscriber, whatever its filter; a snapshot carries the last one), and another
//! when datagrams come again: a [`FeedHealth`] keeps the state. Silent is not ended: the books stand as the last
//! datagram left them and the stream goes on; trade on them only if the venue is known to be quiet.
//!
//! [`Subscriber::poll`] busy-polls the ring's CQ once per call and hands each record to the callback, borrowed
//! from ring memory (no copy); the slot is released to the publisher after the callback returns. Every jump in
//! seq is reported as [`Event::Gap`] before the record that follows it, never skipped silently. `poll` makes no
//! syscall and allocates nothing; [`Subscriber::maintain`] (control socket, snapshot requests, liveness,
//! reconnects) makes syscalls: call it through [`Subscriber::maintain_if_due`], which runs it at most once per
//! millisecond.
//!
//! # What a strategy sees
//!
//! - Normal: `Record`s with seq 1, 2, 3, ... (heartbeats included when the feed is idle), then the
//!   `EndOfStream` record and `Closed(EndOfStream)`. A publisher that stops early (`Shutdown`) or whose feed
//!   failed (`FeedError`) also ends with an `EndOfStream` record, then `Closed` with that reason: read
//!   [`BookUpdate::end_reason`] (or the `Closed` reason) before trusting the books as complete.
//! - Policy `resync`, after falling a ring behind: `Gap { expected, got }`, then live records (the book is
//!   stale from here); [`Subscriber::maintain`] asks for a snapshot; then `SnapshotBegin` (empty every book),
//!   per instrument a `Clear` and its resting orders as `Add`s, `SnapshotEnd`, the feed records since the
//!   snapshot, and the live stream: the book is exact again from `SnapshotEnd` on.
//! - Policy `disconnect`: what was written before the drop, then `Closed(RingFull)`.
//! - Policy `block`: never a gap; the publisher waits (up to its stall timeout) for this subscriber.
//! - A dead or silent publisher: [`Subscriber::maintain`] returns [`Health::Silent`] after the silence
//!   timeout, and once the session is lost either [`Health::Ended`] or, with a reconnect policy
//!   ([`SubscriberConfig::reconnect`]), [`Health::Reconnecting`] and then [`Health::Reconnected`] (seq restarts
//!   at 1; drop your books: a snapshot or the replay from the start follows). The state machine below.
//!
//! # Session lifecycle
//!
//! A [`Subscriber`] is a session state machine ([`Subscriber::state`] says where it stands). `poll` moves it
//! between `Live` and `Stale` (by what it delivers); [`Subscriber::maintain`] makes every other move and
//! reports it as a [`Health`]. A session is *lost* when the ring was closed ([`Event::Closed`] delivered), or
//! when the control connection closed and a poll since found the ring empty (so everything the publisher wrote
//! before it left has been delivered).
//!
//! ```text
//!  Subscriber::connect / connect_with_retry   (they block until accepted: no Connecting state to observe)
//!    |
//!    v         poll: Event::Gap                  maintain: nothing for silence_timeout
//!  Live  ----------------------> Stale { .. }    Live or Stale ------------------------> Silent(d)
//!    ^   <----------------------                 Silent(d) ---- poll: a record ----> Live or Stale
//!    |         poll: its SnapshotEnd
//!    |
//!    |  maintain: the session is lost (from Live, Stale or Silent), with an End
//!    |    +-- no policy, or not End::allows_reconnect() -------------------> Ended(End)
//!    |    +-- a policy and End::allows_reconnect() ---> Reconnecting { tries: 0 }
//!    |                                                   | maintain: one try per interval (blocks <= timeout)
//!    |                                                   +-- fails, budget left ---> Reconnecting { tries + 1 }
//!    |                                                   +-- fails past budget ----> Ended(GaveUp { tries })
//!    +---------- succeeds: Health::Reconnected { session_id } ---+
//! ```
//!
//! | state | entered when (the [`Health`] that says so) | what the strategy does | left when |
//! |---|---|---|---|
//! | [`State::Live`] | connected; reconnected ([`Health::Reconnected`]); the `SnapshotEnd` after a gap | apply records; trade on the books after a record with `is_last()` | a gap, a silence, a loss |
//! | [`State::Stale`] | a poll delivered [`Event::Gap`] ([`Subscriber::is_stale`]) | keep applying but do not trust the books; `maintain` asks for a snapshot (policy resync; `snapshot_requested` once it has) | the poll that delivers that snapshot's `SnapshotEnd` (`SnapshotBegin` has emptied the books) |
//! | [`State::Silent`] | `maintain` found nothing, heartbeats included, for `silence_timeout` and a poll since found the ring empty ([`Health::Silent`]) | the publisher is hung, stopped or cut off: the books may be old | the next record or heartbeat |
//! | [`State::Reconnecting`] | a loss that [`End::allows_reconnect`] with [`SubscriberConfig::reconnect`] set ([`Health::Reconnecting`] `{ tries: 0 }`, then one per `maintain`) | the books are dead: stop trading on them | a try succeeds ([`Health::Reconnected`]: drop the books, seq restarts at 1) or fails past the budget |
//! | [`State::Ended`] | any other loss, or the budget ran out ([`Health::Ended`], repeated by every later `maintain`) | stop; [`End`] says why, [`Subscriber::bye`] has the publisher's words | never (but [`Subscriber::reconnect`] by hand starts a new session) |
//!
//! When several hold, `state()` names the first of `Ended`, `Reconnecting`, `Silent`, `Stale`, `Live`.
//!
//! **Reconnect policy.** [`SubscriberConfig::reconnect`] is `None` by default: a loss is [`Health::Ended`] and
//! reconnecting is the caller's ([`Subscriber::reconnect`]). With `Some(`[`Reconnect`]` { budget, interval })`,
//! a loss that [`End::allows_reconnect`] (the publisher vanished without a `Bye`, or the ring's transport broke:
//! `End::Closed(FabricError)`) makes `maintain` try a new session every `interval` (100 ms with
//! [`Reconnect::within`]) until a try fails `budget` after the loss; an end the publisher chose (end of stream,
//! shutdown, ring full, stalled, any `Bye`) is never retried. Each try creates a ring and makes the control
//! exchange: the `maintain` call that makes it blocks for up to [`SubscriberConfig::timeout`] (default 2 s)
//! when the endpoint accepts but does not answer (a refused connection fails at once), so a strategy that
//! cannot afford that stall on its trading thread should watch [`State::Reconnecting`] and not count on
//! `maintain` being quick meanwhile. [`Subscriber::connect_with_retry`] applies the same policy to the first
//! connection (waiting for a publisher that is not up yet). [`Subscriber::reconnect_error`] has the last failed
//! try's error. Books: drop them at [`Health::Reconnected`]; counters ([`Subscriber::stats`]) carry on, with
//! `reconnects` counting the new sessions and `next_seq` the new stream.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod latency;
pub mod pair;
pub mod receiver;
pub mod report;
mod stat;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use mdfan_fabric::PreparedLocalRing;
use mdfan_wire::control::{self, ControlMsg, SnapshotRequest, Subscribe};

pub use latency::{ClockSource, Latency, NicLatency, TsRecvClock, WireLatency};
pub use pair::{GapCause, MergedGap, OtherLeg, PairHealth, PairSubscriber, DEFAULT_LEG_GIVE_UP};
pub use receiver::{Event, Receiver, StreamStats};

// What a strategy needs besides this crate's own types, so one dependency is enough.
/// The HDR histogram type [`Latency::histogram`] and its siblings return (the `hdrhistogram` crate's, so a
/// strategy reads percentiles without depending on that crate itself).
pub use hdrhistogram::Histogram;
pub use mdfan_fabric::{AnyLocalRing, CloseReason, FabricConfig, Provider};
pub use mdfan_tuning::{allowed_cores, pin_current_thread, IdleStrategy, Idler, TuningError};
pub use mdfan_wire::control::{BookKind, Bye, FeedIdentity, SlowConsumerPolicy};
pub use mdfan_wire::record::{flags, format_price_e9};
pub use mdfan_wire::{
    mdp3_venue_position, venue_position, Book, BookCapacity, BookError, BookUpdate, Books, FeedHealth, FeedState,
    HotBook, HotBooks, InstrumentDef, InstrumentStatus, Kind, Level, LevelIter, MbpBook, MbpBooks, MbpError, MbpLevel,
    RestingOrder, Side, StaleBook, Status, StatusKind, Symbology, TradingStates, CHANNEL_INSTRUMENT_ID, MBP_DEPTH,
};

/// How to reach the publisher and what ring to offer it.
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    /// Publisher control endpoint: `host:port` (TCP), or `unix:PATH` for the publisher's Unix-domain socket on
    /// this host (`publisher.listen_unix`), over which a shared-memory ring is passed as a file descriptor (no
    /// ring file at all), so this process may run as another user than the publisher.
    pub endpoint: String,
    /// Name shown in the publisher's logs and counters (at most 64 bytes).
    pub name: String,
    /// Ring size in slots (power of two, 64 B each). Default 131,072 (8 MiB): holds the whole bundled replay.
    pub ring_slots: u32,
    /// Which fabric to offer the publisher, with its settings (for shm, the ring file's folder: the
    /// publisher's `fabric.shm_dir`). Default shared memory in /dev/shm.
    pub fabric: FabricConfig,
    /// instrument_ids wanted; `None` (default) = all (unless `symbols` names some).
    pub instruments: Option<Vec<u32>>,
    /// Symbols wanted (`ESH4`), resolved by the publisher into instrument_ids and added to `instruments`: with
    /// `instruments` `None`, only these. A symbol the publisher does not know makes it refuse
    /// ([`SubscribeError::Rejected`] naming the symbol). `None` (default) = none named.
    pub symbols: Option<Vec<String>>,
    /// Time allowed for connecting and for the publisher's answer. Default 2 s.
    pub timeout: Duration,
    /// What the publisher does when this ring is full. Default `resync`.
    pub policy: SlowConsumerPolicy,
    /// Start with a snapshot of the current books when joining mid-stream. Default true.
    pub snapshot: bool,
    /// The token the publisher's `[access]` config gives this subscriber's name, if it authenticates
    /// subscribers. Default none.
    pub token: Option<String>,
    /// Folder for this subscriber's counters file (`mdfan-subscriber-<name>-<pid>.counters`, read by
    /// `mdfan-stat`), rewritten by [`Subscriber::maintain`] every 100 ms and removed on drop. Default none.
    pub counters_dir: Option<std::path::PathBuf>,
    /// No record (heartbeats included) for this long makes [`Subscriber::maintain`] report
    /// [`Health::Silent`]. Default 50 ms.
    pub silence_timeout: Duration,
    /// How often [`Subscriber::maintain_if_due`] lets [`Subscriber::maintain`] run. Default 1 ms.
    pub maintain_interval: Duration,
    /// What [`Subscriber::maintain`] does when the session is lost in a way that allows it
    /// ([`End::allows_reconnect`]), and how long [`Subscriber::connect_with_retry`] keeps trying. `None`
    /// (default): never reconnect; [`Health::Ended`] is reported and [`Subscriber::reconnect`] is the caller's.
    pub reconnect: Option<Reconnect>,
    /// A publisher on this host is trusted when it runs as root, as this process's user, as user `mdfan` (the
    /// service's), or as this uid; any other is refused before the token or the ring is sent
    /// ([`SubscribeError::UntrustedPublisher`]: another local user could listen where the publisher is expected
    /// while it is down). Its user is the control connection's other end (`SO_PEERCRED` on a Unix-domain socket;
    /// the owner of the publisher's TCP socket on this host, `mdfan_fabric::peer`). A publisher on another host
    /// is not checked. Default `None`.
    pub publisher_uid: Option<u32>,
}

/// A reconnect policy ([`SubscriberConfig::reconnect`]): try every `interval` until `budget` has passed.
///
/// Each try is [`Subscriber::reconnect`] (or [`Subscriber::connect`]): it creates a ring and makes the control
/// exchange, so it blocks its thread for up to [`SubscriberConfig::timeout`] (default 2 s) when the endpoint
/// accepts but does not answer; a refused connection fails at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// Give up once a try fails this long after the loss was found (for
    /// [`Subscriber::connect_with_retry`]: after the first try began). The try that runs over it is the last.
    pub budget: Duration,
    /// Wait between the end of a failed try and the start of the next. Default 100 ms.
    pub interval: Duration,
}

impl Reconnect {
    /// Tries every 100 ms for up to `budget`.
    pub fn within(budget: Duration) -> Reconnect {
        Reconnect { budget, interval: Duration::from_millis(100) }
    }
}

impl SubscriberConfig {
    /// A subscriber's token as its process is given it: the first line of `file` (trimmed), or else the
    /// `MDFAN_TOKEN` environment variable (empty: none). Not a command-line flag with the token itself: command
    /// lines are visible to every user of the host.
    ///
    /// # Errors
    /// The file cannot be read, or its first line is empty: the message names the file.
    pub fn token_from(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
        match file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| format!("--token-file {}: {e}", path.display()))?;
                match text.lines().next().map(str::trim) {
                    Some(t) if !t.is_empty() => Ok(Some(t.to_owned())),
                    _ => Err(format!("--token-file {}: empty", path.display())),
                }
            }
            None => Ok(std::env::var("MDFAN_TOKEN").ok().filter(|t| !t.is_empty())),
        }
    }

    /// Defaults for everything but the endpoint and name.
    pub fn new(endpoint: &str, name: &str) -> SubscriberConfig {
        SubscriberConfig {
            endpoint: endpoint.to_owned(),
            name: name.to_owned(),
            ring_slots: 131_072,
            fabric: FabricConfig::default(),
            instruments: None,
            symbols: None,
            timeout: Duration::from_secs(2),
            policy: SlowConsumerPolicy::Resync,
            snapshot: true,
            token: None,
            counters_dir: None,
            silence_timeout: Duration::from_millis(50),
            maintain_interval: Duration::from_millis(1),
            reconnect: None,
            publisher_uid: None,
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
    /// The process at the endpoint, on this host, runs as a user this subscriber does not trust
    /// ([`SubscriberConfig::publisher_uid`]): nothing was sent to it, the token and the ring included.
    #[error(
        "publisher {endpoint}: it runs as uid {uid}, which is neither root, you (uid {me}), user mdfan, nor the \
         publisher_uid configured: nothing sent to it (another local user listening where the publisher is \
         expected?)"
    )]
    UntrustedPublisher {
        /// The publisher's control endpoint.
        endpoint: String,
        /// The user the process at the endpoint runs as.
        uid: u32,
        /// This process's user.
        me: u32,
    },
    /// The endpoint is on this host but no connected socket of a user answers there (a listener that holds
    /// connections half made until data comes): nothing was sent to it.
    #[error(
        "publisher {endpoint}: on this host, but no connected socket answers there to say which user listens (a \
         listener deferring its accept?): nothing sent to it"
    )]
    UnknownPublisher {
        /// The publisher's control endpoint.
        endpoint: String,
    },
    /// [`Subscriber::connect_with_retry`] made more than one try and the last failed: nobody accepted within the
    /// [`Reconnect::budget`], or a later try failed otherwise.
    #[error("gave up after {tries} tries in {} ms: {source}", budget.as_millis())]
    GaveUp {
        /// Tries made, the failed last one included.
        tries: u32,
        /// The policy's budget.
        budget: Duration,
        /// The last try's error.
        #[source]
        source: Box<SubscribeError>,
    },
}

impl SubscribeError {
    /// Whether the publisher was not there or went away during the handshake: nobody accepted at the endpoint
    /// ([`SubscribeError::Connect`]), or the control connection failed, closed or timed out before the answer
    /// ([`SubscribeError::Control`] with [`control::ControlError::Io`], `Closed` or `Timeout`): what a reconnect
    /// policy waits out ([`Subscriber::connect_with_retry`]). A refusal, an answer that is not the protocol or
    /// its version, or a ring that cannot be set up here is not: trying again would fail the same way.
    pub fn is_transient(&self) -> bool {
        use control::ControlError;
        match self {
            SubscribeError::Connect { .. } => true,
            SubscribeError::Control { source, .. } => {
                matches!(source, ControlError::Io(_) | ControlError::Closed | ControlError::Timeout(_))
            }
            _ => false,
        }
    }
}

/// What [`Subscriber::maintain`] found: the transitions of [`State`] a strategy acts on (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Records or heartbeats are arriving (the books may still be stale after a gap: [`Subscriber::is_stale`]).
    Ok,
    /// Nothing arrived for longer than the silence timeout (the publisher may be hung or stopped): how long.
    /// Reported by every `maintain` while the silence lasts (about once per ms through `maintain_if_due`): act
    /// on the first, as `examples/bbo.rs` does.
    Silent(Duration),
    /// The session is lost (everything it delivered has been polled) and the reconnect policy is trying to make
    /// a new one: `tries` made so far. Reported first with `tries: 0` by the `maintain` that found the loss:
    /// from there the books are dead (stop trading on them); then once per `maintain` until it succeeds or gives
    /// up.
    Reconnecting {
        /// Tries made so far (each failed).
        tries: u32,
    },
    /// Once, after a successful reconnect: a new session. Its stream restarts at seq 1; drop the books (a
    /// snapshot, or the publisher's replay from its start, follows).
    Reconnected {
        /// The new session's id.
        session_id: u64,
    },
    /// The subscription ended for good, and why; every later `maintain` says the same. Nothing more will
    /// arrive (a caller may still [`Subscriber::reconnect`] by hand).
    Ended(End),
}

/// Why a subscription ended ([`Health::Ended`], [`State::Ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The ring was closed with this reason ([`Event::Closed`] was delivered): on shm the publisher's reason;
    /// on verbs `FabricError` when this side's QP failed (its peer may have died).
    Closed(CloseReason),
    /// The publisher ended the session and said why on the control connection ([`Subscriber::bye`] has the
    /// detail); on verbs this is how every publisher-side close is learnt.
    Bye(CloseReason),
    /// The control connection closed without a `Bye`: the publisher was killed, or its host or the network
    /// failed.
    Vanished,
    /// The reconnect policy ran out of budget; [`Subscriber::reconnect_error`] has the last try's error.
    GaveUp {
        /// Tries made.
        tries: u32,
    },
}

impl End {
    /// Whether a reconnect policy reconnects after this end: when the publisher vanished ([`End::Vanished`]) or
    /// the transport under the ring broke (`Closed(FabricError)`), so a publisher restarted, or a path repaired,
    /// can be found again. Never after the publisher ended the session itself: any other close reason in the
    /// ring (end of stream, shutdown, ring full, stalled, ...) or any [`End::Bye`] (one sent because this
    /// subscriber's QP never connected would come back after every reconnect).
    pub fn allows_reconnect(self) -> bool {
        matches!(self, End::Vanished | End::Closed(CloseReason::FabricError))
    }

    /// The close reason, when the publisher or the ring gave one.
    pub fn reason(self) -> Option<CloseReason> {
        match self {
            End::Closed(r) | End::Bye(r) => Some(r),
            End::Vanished | End::GaveUp { .. } => None,
        }
    }

    /// A name for reports: the close reason's ([`CloseReason::as_str`]), else `publisher_gone`.
    pub fn as_str(self) -> &'static str {
        self.reason().map_or("publisher_gone", CloseReason::as_str)
    }
}

/// Where a subscription stands ([`Subscriber::state`]); the crate docs draw the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Records arrive in seq order; books built from them are exact.
    Live,
    /// A gap has not been repaired yet: the books are stale. `snapshot_requested`: `maintain` has asked for the
    /// snapshot (policy resync) and it has not ended yet; `false` while it is owed (the next `maintain` asks).
    Stale {
        /// The snapshot request is sent and pending.
        snapshot_requested: bool,
    },
    /// `maintain` found nothing (not even a heartbeat) for this long, past the silence timeout, and nothing has
    /// arrived since.
    Silent(Duration),
    /// The session is lost and the reconnect policy is trying: tries made so far.
    Reconnecting {
        /// Tries made so far (each failed).
        tries: u32,
    },
    /// Ended for good.
    Ended(End),
}

impl State {
    /// A name for reports and counters: `live`, `stale`, `silent`, `reconnecting`, `ended`.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Live => "live",
            State::Stale { .. } => "stale",
            State::Silent(_) => "silent",
            State::Reconnecting { .. } => "reconnecting",
            State::Ended(_) => "ended",
        }
    }
}

/// Lifecycle beyond a running session, driven by [`Subscriber::maintain`].
#[derive(Debug, Clone, Copy)]
enum Phase {
    Running,
    Reconnecting { tries: u32, since: Instant, next_try: Instant },
    Ended(End),
}

/// How often `maintain` samples the NIC and realtime clocks again for NIC-to-poll (a NIC crystal 50 ppm off
/// would otherwise move the figure 50 µs per second).
pub const NIC_REALIGN: Duration = Duration::from_secs(1);

/// The control connection: TCP, or the publisher's Unix-domain socket.
enum ControlStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl ControlStream {
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            ControlStream::Tcp(s) => s.set_nonblocking(on),
            ControlStream::Unix(s) => s.set_nonblocking(on),
        }
    }
}

impl Read for ControlStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ControlStream::Tcp(s) => s.read(buf),
            ControlStream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for ControlStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            ControlStream::Tcp(s) => s.write(buf),
            ControlStream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl control::TimedStream for ControlStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            ControlStream::Tcp(s) => s.set_read_timeout(timeout),
            ControlStream::Unix(s) => s.set_read_timeout(timeout),
        }
    }
}

/// What a successful handshake gives.
struct Opened {
    ring: AnyLocalRing,
    control: ControlStream,
    session_id: u64,
    policy: SlowConsumerPolicy,
    symbology: Symbology,
    ts_recv_clock: TsRecvClock,
    book: BookKind,
    feed: FeedIdentity,
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
    control: ControlStream,
    endpoint: String,
    session_id: u64,
    policy: SlowConsumerPolicy,
    /// The definitions the publisher sent in its accept.
    symbology: Symbology,
    /// The book its accept said the records build.
    book: BookKind,
    /// The feed its accept named.
    feed: FeedIdentity,
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
    /// TSC of the last NIC-to-realtime sample ([`Receiver::refresh_nic_realtime`], every [`NIC_REALIGN`]).
    last_nic_realign: u64,
    /// A snapshot was requested and has not ended yet.
    resync_requested: bool,
    snapshots_requested: u64,
    /// Snapshots received when the last one was requested.
    snapshots_at_request: u64,
    reconnects: u64,
    /// Where the lifecycle stands beyond the running session (reconnecting, ended).
    phase: Phase,
    /// `(quiet_for, last_rx)` when `maintain` last reported [`Health::Silent`]: silent while `last_rx` is unchanged.
    silent: Option<(Duration, u64)>,
    /// The last failed reconnect try's error.
    reconnect_error: Option<SubscribeError>,
    /// The counters file ([`SubscriberConfig::counters_dir`]).
    stat: Option<stat::StatFile>,
}

impl Subscriber {
    /// Creates the ring, connects, subscribes, and waits for the publisher's accept.
    ///
    /// # Errors
    /// [`SubscribeError`] naming the endpoint: cannot connect, ring creation failed, refused, bad answer.
    pub fn connect(cfg: &SubscriberConfig) -> Result<Subscriber, SubscribeError> {
        let Opened { ring, control, session_id, policy, symbology, ts_recv_clock, book, feed } = Self::open(cfg)?;
        let clock = quanta::Clock::new();
        let last_rx = clock.raw();
        let mut rx = Receiver::new(ring);
        rx.set_ts_recv_clock(ts_recv_clock);
        Ok(Subscriber {
            cfg: cfg.clone(),
            rx,
            bye: None,
            control_buf: Vec::new(),
            control_out: Vec::new(),
            control,
            endpoint: cfg.endpoint.clone(),
            session_id,
            policy,
            symbology,
            book,
            feed,
            control_closed: false,
            empty_polls: 0,
            empty_polls_at_close: 0,
            clock,
            last_rx,
            silence_suspected: None,
            last_maintain: last_rx,
            last_nic_realign: last_rx,
            resync_requested: false,
            snapshots_requested: 0,
            snapshots_at_request: 0,
            reconnects: 0,
            phase: Phase::Running,
            silent: None,
            reconnect_error: None,
            stat: cfg.counters_dir.as_deref().and_then(|d| stat::StatFile::create(d, &cfg.name, &cfg.endpoint)),
        })
    }

    /// [`Subscriber::connect`], tried again every [`Reconnect::interval`] while the publisher is not there
    /// ([`SubscribeError::is_transient`]: nobody accepts at the endpoint, or the control connection closed, reset
    /// or timed out during the handshake, as when the publisher dies or restarts then), for up to the [`Reconnect::budget`] of
    /// [`SubscriberConfig::reconnect`]; one try when that is `None`. `stop` is asked before each wait: `true`
    /// gives up at once (e.g. a signal flag). Blocks its thread meanwhile; each try may block up to
    /// [`SubscriberConfig::timeout`].
    ///
    /// # Errors
    /// The first try's error when it was the only one; otherwise [`SubscribeError::GaveUp`] with the number of
    /// tries and the last error (nobody accepted within the budget, or a later try failed for another reason,
    /// which is not retried: a refusal or a ring that cannot be created would fail again).
    pub fn connect_with_retry(
        cfg: &SubscriberConfig,
        mut stop: impl FnMut() -> bool,
    ) -> Result<Subscriber, SubscribeError> {
        let Some(policy) = cfg.reconnect else { return Subscriber::connect(cfg) };
        let start = Instant::now();
        let mut tries = 0u32;
        loop {
            tries += 1;
            match Subscriber::connect(cfg) {
                Err(e) if e.is_transient() && start.elapsed() < policy.budget && !stop() => {
                    std::thread::sleep(policy.interval)
                }
                Err(e) if tries > 1 => {
                    return Err(SubscribeError::GaveUp { tries, budget: policy.budget, source: Box::new(e) })
                }
                other => return other,
            }
        }
    }

    fn open(cfg: &SubscriberConfig) -> Result<Opened, SubscribeError> {
        let endpoint = cfg.endpoint.clone();
        let connect_err = |source| SubscribeError::Connect { endpoint: endpoint.clone(), source };
        let ring_err = |source| SubscribeError::Ring { endpoint: endpoint.clone(), source };
        // The ring first (registering it and posting its receive queue can take a while on verbs), so the
        // handshake that follows is only a Subscribe and its answer, well within the publisher's timeout.
        let (mut ring, grant, ring_fd, mut stream) = match cfg.endpoint.strip_prefix("unix:") {
            Some(path) => {
                let (ring, grant, fd) =
                    PreparedLocalRing::create_to_pass(&cfg.fabric, cfg.ring_slots).map_err(ring_err)?;
                let stream = UnixStream::connect(path).map_err(connect_err)?;
                (ring, grant, fd, ControlStream::Unix(stream))
            }
            None => {
                let addr = cfg
                    .endpoint
                    .to_socket_addrs()
                    .map_err(connect_err)?
                    .next()
                    .ok_or_else(|| connect_err(std::io::Error::new(ErrorKind::NotFound, "no address")))?;
                let (ring, grant) = PreparedLocalRing::create(&cfg.fabric, cfg.ring_slots).map_err(ring_err)?;
                let stream = TcpStream::connect_timeout(&addr, cfg.timeout).map_err(connect_err)?;
                stream.set_nodelay(true).map_err(connect_err)?;
                (ring, grant, None, ControlStream::Tcp(stream))
            }
        };
        // Who listens there, before anything is sent to it (the token, the ring's descriptor or name).
        let publisher_uid = match &stream {
            ControlStream::Unix(s) => mdfan_fabric::peer::unix_peer(s).map(|(uid, _)| uid),
            ControlStream::Tcp(s) => match (s.local_addr(), s.peer_addr()) {
                (Ok(local), Ok(peer)) if mdfan_fabric::peer::is_this_host(peer.ip()) => {
                    use mdfan_fabric::peer::TcpPeer;
                    // On this host its socket has a user. A listener that holds connections half made until data
                    // comes (TCP_DEFER_ACCEPT) has none to tell: asked again for 20 ms, then refused. No answer at
                    // all (sock_diag unavailable) leaves it unchecked, as another host's.
                    let deadline = std::time::Instant::now() + Duration::from_millis(20);
                    loop {
                        match mdfan_fabric::peer::tcp_peer(local, peer) {
                            TcpPeer::User(uid) => break Some(uid),
                            TcpPeer::HalfMade if std::time::Instant::now() < deadline => {
                                std::thread::sleep(Duration::from_millis(1))
                            }
                            TcpPeer::HalfMade => return Err(SubscribeError::UnknownPublisher { endpoint }),
                            TcpPeer::Unknown => break None,
                        }
                    }
                }
                _ => None, // another host's
            },
        };
        if let Some(uid) = publisher_uid {
            let me = mdfan_fabric::shm::current_euid();
            let service = mdfan_tuning::counters::user_id(mdfan_tuning::counters::GROUP);
            if uid != 0 && uid != me && Some(uid) != service && Some(uid) != cfg.publisher_uid {
                return Err(SubscribeError::UntrustedPublisher { endpoint, uid, me });
            }
        }
        control::TimedStream::set_read_timeout(&stream, Some(cfg.timeout)).map_err(connect_err)?;
        let sub = ControlMsg::Subscribe(Subscribe {
            name: cfg.name.clone(),
            instruments: cfg.instruments.clone(),
            symbols: cfg.symbols.clone(),
            ring: grant,
            policy: cfg.policy,
            snapshot: cfg.snapshot,
            token: cfg.token.clone(),
        });
        let ctl_err = |source| SubscribeError::Control { endpoint: endpoint.clone(), source };
        let sent = match (&stream, &ring_fd) {
            (ControlStream::Unix(s), Some(fd)) => {
                mdfan_fabric::fdpass::send_with_fd(s, &control::encode(&sub), std::os::fd::AsFd::as_fd(fd))
            }
            _ => control::write_msg(&mut stream, &sub),
        };
        sent.map_err(|e| ctl_err(e.into()))?;
        drop(ring_fd); // the publisher holds its own descriptor now; the mapping stays
        let answer = control::read_msg_within(&mut stream, cfg.timeout).map_err(ctl_err)?;
        ring.unlink();
        let accept = match answer {
            ControlMsg::Accept(a) => a,
            ControlMsg::Reject(r) => return Err(SubscribeError::Rejected { endpoint, reason: r.reason }),
            other => return Err(SubscribeError::Unexpected { endpoint, answer: other.kind().to_owned() }),
        };
        let ring = ring.connect(&accept.fabric).map_err(ring_err)?;
        stream.set_nonblocking(true).map_err(connect_err)?;
        Ok(Opened {
            ring,
            control: stream,
            session_id: accept.session_id,
            policy: accept.policy,
            symbology: accept.definitions.into_iter().collect(),
            ts_recv_clock: accept.ts_recv_clock,
            book: accept.book,
            feed: accept.feed,
        })
    }

    /// Makes a new session with the same config, now (one try; it blocks up to [`SubscriberConfig::timeout`]).
    /// With a reconnect policy [`Subscriber::maintain`] calls it; without one, call it after [`Health::Ended`]
    /// if you want to go on. The stream restarts at seq 1; the caller must drop its books: a snapshot (when the
    /// publisher is mid-stream) or the replay from its start follows. On success the state is [`State::Live`].
    ///
    /// # Errors
    /// As [`Subscriber::connect`]; the old session is gone either way, and the state is unchanged.
    pub fn reconnect(&mut self) -> Result<(), SubscribeError> {
        let Opened { ring, control, session_id, policy, symbology, ts_recv_clock, book, feed } = Self::open(&self.cfg)?;
        self.rx.restart(ring);
        self.book = book;
        self.feed = feed;
        self.rx.set_ts_recv_clock(ts_recv_clock);
        self.control = control;
        self.session_id = session_id;
        self.policy = policy;
        self.symbology = symbology;
        self.reconnects += 1;
        self.control_closed = false;
        self.silence_suspected = None;
        self.bye = None;
        self.control_buf.clear();
        self.control_out.clear();
        self.resync_requested = false;
        self.last_rx = self.clock.raw();
        self.phase = Phase::Running;
        self.silent = None;
        self.reconnect_error = None;
        Ok(())
    }

    /// Records each record's one-way latency (publisher post to this poll) into an HDR histogram
    /// ([`Subscriber::latency`]), and, when the publisher's `Accept` said the records' `ts_recv_ns` is a live
    /// receive stamp ([`TsRecvClock`]; never for a file replay), wire-to-poll too (datagram receipt to this poll,
    /// [`Subscriber::wire_latency`]). Costs one TSC read per record for both (see [`latency`]). Every record
    /// counts, heartbeats and the end-of-stream record included (so a replay of N book records gives about N + 2),
    /// and the histograms go on across a reconnect (as [`Subscriber::stats`] does): reset them yourself on
    /// [`Health::Reconnected`] for per-session figures.
    pub fn with_latency(mut self) -> Subscriber {
        self.rx.enable_latency();
        self
    }

    /// Reaps up to `max` completions and hands each record (and any gap before it) to `f`. Returns the number
    /// of completions reaped; 0 means nothing was ready. When nothing is ready and the publisher has closed the
    /// ring, `f` gets [`Event::Closed`] once. On shm the expected record is taken from its slot's stamp and the CQ
    /// is read on every `mdfan_fabric::shm::CQ_POLL_INTERVAL`-th empty poll only, so a record after a gap shows
    /// up to that many empty polls later (a busy-polling reader: microseconds).
    ///
    /// `f` runs while the subscriber is borrowed, so it cannot call [`Subscriber::symbol`] or
    /// [`Subscriber::format_price`]: take what it needs before the loop (`let sym = sub.symbology().clone();`,
    /// control plane, taken again after [`Health::Reconnected`]) and call [`Symbology::symbol`] or
    /// [`Symbology::format_price`] on that copy, off the hot path.
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
    ///
    /// It drives the session's [`State`]: it reports the loss of a session once a poll has drained the ring
    /// ([`Health::Ended`], or with a reconnect policy that allows it [`Health::Reconnecting`]), and while
    /// reconnecting it makes one try per [`Reconnect::interval`]: such a call blocks for up to
    /// [`SubscriberConfig::timeout`] (a refused connection fails at once).
    pub fn maintain(&mut self) -> Health {
        let now = self.clock.raw();
        if self.clock.delta_as_nanos(self.last_nic_realign, now) >= NIC_REALIGN.as_nanos() as u64 {
            self.last_nic_realign = now;
            self.rx.refresh_nic_realtime();
        }
        let health = self.maintain_session();
        if self.stat.is_some() {
            let (stats, state, ended) = (self.stats(), self.state(), matches!(health, Health::Ended(_)));
            let (session_id, latency, nic) = (self.session_id, self.rx.latency(), self.rx.nic_latency());
            if let Some(f) = &mut self.stat {
                f.write(&stats, session_id, state.as_str(), latency, nic, ended);
            }
        }
        health
    }

    fn maintain_session(&mut self) -> Health {
        match self.phase {
            Phase::Ended(end) => return Health::Ended(end),
            Phase::Reconnecting { tries, since, next_try } => return self.reconnect_step(tries, since, next_try),
            Phase::Running => {}
        }
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
        // The ring's close comes after its last record (the receiver reads the CQ once more before reporting it).
        if let Some(reason) = self.rx.closed() {
            return self.lose(End::Closed(reason));
        }
        if self.control_closed {
            if !was_closed {
                self.empty_polls_at_close = self.empty_polls;
            }
            // Lost only once a poll after the close found the ring empty: the publisher wrote everything before
            // it closed the connection, and a poll that starts after we saw the close sees all of it.
            let drained = self.empty_polls > self.empty_polls_at_close;
            if !drained {
                return Health::Ok;
            }
            let end = self.bye.as_ref().map_or(End::Vanished, |bye| End::Bye(bye.reason));
            return self.lose(end);
        }
        let quiet_ns = self.clock.delta_as_nanos(self.last_rx, self.clock.raw());
        if quiet_ns <= self.cfg.silence_timeout.as_nanos() as u64 {
            self.silence_suspected = None;
            self.silent = None;
            return Health::Ok;
        }
        match self.silence_suspected {
            // nothing arrived since the suspicion and a poll since found the ring empty: the publisher's silence
            Some((rx, polls)) if rx == self.last_rx && self.empty_polls > polls => {
                let quiet = Duration::from_nanos(quiet_ns);
                self.silent = Some((quiet, self.last_rx));
                Health::Silent(quiet)
            }
            Some((rx, _)) if rx == self.last_rx => Health::Ok,
            // this thread may simply not have run (descheduled, a long callback): wait for a poll to say
            _ => {
                self.silence_suspected = Some((self.last_rx, self.empty_polls));
                Health::Ok
            }
        }
    }

    /// The session is over (`end`): reconnecting under the policy when it allows, else ended for good.
    fn lose(&mut self, end: End) -> Health {
        self.silent = None;
        match self.cfg.reconnect {
            Some(_) if end.allows_reconnect() => {
                let now = Instant::now();
                self.phase = Phase::Reconnecting { tries: 0, since: now, next_try: now };
                Health::Reconnecting { tries: 0 }
            }
            _ => {
                self.phase = Phase::Ended(end);
                Health::Ended(end)
            }
        }
    }

    /// One reconnect try when it is due (the loss was found at `since`; `tries` failed so far).
    fn reconnect_step(&mut self, tries: u32, since: Instant, next_try: Instant) -> Health {
        let Some(policy) = self.cfg.reconnect else {
            // `lose` enters Reconnecting only with a policy, and the config is not changed afterwards
            self.phase = Phase::Ended(End::GaveUp { tries });
            return Health::Ended(End::GaveUp { tries });
        };
        if Instant::now() < next_try {
            return Health::Reconnecting { tries };
        }
        let tries = tries + 1;
        match self.reconnect() {
            Ok(()) => Health::Reconnected { session_id: self.session_id },
            Err(e) => {
                self.reconnect_error = Some(e);
                if since.elapsed() >= policy.budget {
                    self.phase = Phase::Ended(End::GaveUp { tries });
                    Health::Ended(End::GaveUp { tries })
                } else {
                    self.phase = Phase::Reconnecting { tries, since, next_try: Instant::now() + policy.interval };
                    Health::Reconnecting { tries }
                }
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

    /// Asks the publisher for a snapshot now (policy resync or not), as a gap would: sent by the next
    /// [`Subscriber::maintain`]; the books are stale until its `SnapshotEnd` ([`Subscriber::is_stale`]). A
    /// snapshot already pending makes this a no-op. Control path (it queues a frame).
    pub fn request_snapshot(&mut self) {
        if self.resync_requested || self.control_closed {
            return;
        }
        let req = ControlMsg::SnapshotRequest(SnapshotRequest { gap_from_seq: self.rx.stats().next_seq });
        self.control_out.extend_from_slice(&control::encode(&req));
        self.resync_requested = true;
        self.snapshots_at_request = self.rx.stats().snapshots_received;
        self.snapshots_requested += 1;
    }

    /// What the publisher said when it ended this session ([`Bye`]: a typed [`CloseReason`] and a detail),
    /// once it has. Read it after [`Health::Ended`] with [`End::Bye`].
    pub fn bye(&self) -> Option<&Bye> {
        self.bye.as_ref()
    }

    /// Whether a gap is not yet repaired by a snapshot (the books are stale): from the poll that delivered the
    /// [`Event::Gap`] to the one that delivered the `SnapshotEnd` of the snapshot it asked for.
    pub fn is_stale(&self) -> bool {
        self.rx.unrepaired_gap().is_some() || self.snapshot_pending()
    }

    /// A snapshot was requested and its `SnapshotEnd` has not been delivered yet.
    fn snapshot_pending(&self) -> bool {
        self.resync_requested && self.rx.stats().snapshots_received <= self.snapshots_at_request
    }

    /// Where the subscription stands (see the crate docs' state machine). `Ended` and `Reconnecting` are as the
    /// last [`Subscriber::maintain`] left them; `Silent` as it found it, until a record arrives; `Stale` as the
    /// last poll left it. No syscall.
    pub fn state(&self) -> State {
        match self.phase {
            Phase::Ended(end) => State::Ended(end),
            Phase::Reconnecting { tries, .. } => State::Reconnecting { tries },
            Phase::Running => match self.silent {
                Some((quiet, rx)) if rx == self.last_rx => State::Silent(quiet),
                _ if self.is_stale() => State::Stale { snapshot_requested: self.snapshot_pending() },
                _ => State::Live,
            },
        }
    }

    /// The error of the last failed reconnect try (while [`State::Reconnecting`] with `tries > 0`, and after
    /// [`End::GaveUp`]); `None` after a successful one.
    pub fn reconnect_error(&self) -> Option<&SubscribeError> {
        self.reconnect_error.as_ref()
    }

    /// The policy the publisher applies to this subscriber.
    pub fn policy(&self) -> SlowConsumerPolicy {
        self.policy
    }

    /// Stream counters.
    pub fn stats(&self) -> StreamStats {
        StreamStats { snapshots_requested: self.snapshots_requested, reconnects: self.reconnects, ..self.rx.stats() }
    }

    /// The latency histogram (post-to-poll: the publisher's TSC stamp to this poll), if enabled.
    pub fn latency(&self) -> Option<&Latency> {
        self.rx.latency()
    }

    /// The NIC-to-poll histogram (the receive completion's NIC timestamp, mapped onto `CLOCK_REALTIME`, to this
    /// poll; `clock=nic`, see [`latency`]), when latency is enabled and the ring's completions carry NIC
    /// timestamps; `None` on shm and on devices without them (Soft-RoCE).
    pub fn nic_latency(&self) -> Option<&NicLatency> {
        self.rx.nic_latency()
    }

    /// The definitions (symbol, display factor, tick size) of this subscriber's instruments that the publisher
    /// knows, as its accept carried them (replaced on a reconnect); empty when it knows none. Control plane: read
    /// it to print, not per record on the hot path.
    pub fn symbology(&self) -> &Symbology {
        &self.symbology
    }

    /// The symbol of `instrument_id`, if the publisher sent its definition.
    pub fn symbol(&self, instrument_id: u32) -> Option<&str> {
        self.symbology.symbol(instrument_id)
    }

    /// `price_e9` of `instrument_id` as a person reads it, exactly, at the instrument's precision
    /// ([`InstrumentDef::format_price`]: × its display factor, at least its tick's decimals); an instrument
    /// without a definition prints as [`format_price_e9`] does. Allocates: not for the hot path.
    pub fn format_price(&self, instrument_id: u32, price_e9: i64) -> String {
        self.symbology.format_price(instrument_id, price_e9)
    }

    /// The wire-to-poll histogram (`CLOCK_REALTIME` at this poll minus the record's `ts_recv_ns`, the
    /// datagram's receive stamp; ns), when latency is enabled and the publisher said `ts_recv_ns` is a live
    /// stamp; `None` for a file replay. [`WireLatency::source`] names the clocks.
    pub fn wire_latency(&self) -> Option<&WireLatency> {
        self.rx.wire_latency()
    }

    /// What the publisher said the records' `ts_recv_ns` is (its `Accept`): [`TsRecvClock::None`] for a replay.
    pub fn ts_recv_clock(&self) -> TsRecvClock {
        self.rx.ts_recv_clock()
    }

    /// Which book this feed's records build, as the publisher's `Accept` said: [`BookKind::Mbo`] (keep
    /// [`Books`] or [`HotBooks`]) or [`BookKind::Mbp`] (keep [`MbpBooks`]); [`BookKind::Unknown`] from a
    /// publisher that does not say (tell by the records: price-level ones carry [`flags::MBP`]).
    pub fn book_kind(&self) -> BookKind {
        self.book
    }

    /// What the feed is, as the publisher's `Accept` named it (format, venue's dataset, channel; a relay passes
    /// its upstream's on): empty fields where the publisher does not know, or does not say.
    pub fn feed(&self) -> &FeedIdentity {
        &self.feed
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
