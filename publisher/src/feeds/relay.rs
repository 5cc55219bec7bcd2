//! `format = "mdfan"`: another mdfan publisher's stream as this publisher's feed: a relay (`mdfan-relay`). One
//! upstream session (a [`Subscriber`], or a hot-hot pair merged by venue position: a [`PairSubscriber`]) is
//! polled on the feed thread and its records go into this publisher's journal as they came, so every local
//! strategy is served from this host's one copy, with this publisher's control protocol, access control,
//! snapshots (from its own books), counters file, preflight and doctor findings. A strategy connects to a relay
//! exactly as to a publisher.
//!
//! What passes, and what the relay adds:
//!
//! | upstream | downstream |
//! |---|---|
//! | a book record, a stale mark, a trading or feed status, a snapshot's records (flagged `SNAPSHOT`) | the same record, with this publisher's `seq` and `ts_send_ticks` |
//! | heartbeats, `SnapshotBegin` / `SnapshotEnd`, an end of stream other than the feed's end | nothing: they are one session's ([`mdfan_feed::capture::is_session_record`]) |
//! | a gap in the upstream ring (this relay was slow, or the upstream resynced it) | an `InstrumentStale` (flag `MAYBE_BAD_BOOK`) for every instrument the relay knows; the upstream's snapshot that the gap asks for follows, and its `Clear` rebuilds each book |
//! | the upstream silent past `silence_timeout_ms` (hung, stopped, cut off) | a `FeedStatus` silent record, and a live one when records come again |
//! | both legs of a pair down (each tried again by the pair) | silent, and live when a leg is back: the merge decides what a returning leg can vouch for, and a loss it cannot fill is its gap (above) |
//! | the upstream session lost, or ended by the upstream (`publisher_shutdown` for a restart, `stalled`, `ring_full`), or a pair ended for good | silent, every instrument stale; a new session tried every 100 ms for `reconnect_budget_ms`; once made, live, then a `Clear` (flagged `SNAPSHOT`) and a stale mark of every book (unknown until the new session's snapshot covers it; when that session has no snapshot or a snapshot of no book, the upstream building every book anew, a `Clear` of every book: empty, not unknown) |
//! | the upstream's end of the feed | the end of this stream (`end_of_stream`) |
//! | no session within the budget | the end of this stream as a feed error naming the endpoint |
//!
//! An upstream not up when the relay starts (or one that goes away during the handshake) is tried every 100 ms for `reconnect_budget_ms` before it binds.
//!
//! With two endpoints (`connect = [A, B]`) the pair's merge decides what a gap is: a leg lost alone changes
//! nothing downstream. The upstream session is unfiltered unless `instruments` names the union the local
//! strategies need; filters and entitlements apply to each local strategy as on any publisher.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mdfan_subscriber::{
    BookKind, Event, FabricConfig, Health, PairHealth, PairSubscriber, Reconnect, SlowConsumerPolicy, StaleBook,
    Subscriber, SubscriberConfig,
};
use mdfan_wire::record::flags;
use mdfan_wire::{BookUpdate, FeedState, Kind, CHANNEL_INSTRUMENT_ID};
use serde::Deserialize;

use super::{Checker, FeedCounters, FeedSource, FeedSourceError, FeedTraits, Opened, Step};
use crate::config::{ConfigError, FeedFormat};
use crate::journal::JournalWriter;
use crate::{PublisherError, RunReport};

/// The `[feed]` keys of `format = "mdfan"`.
pub const FEED_KEYS: &[&str] = &[
    "format",
    "connect",
    "name",
    "token",
    "ring_slots",
    "policy",
    "fabric",
    "shm_dir",
    "device",
    "gid_index",
    "instruments",
    "silence_timeout_ms",
    "reconnect_budget_ms",
    "connect_timeout_ms",
    "symbols",
];

/// Records the relay holds between the upstream ring and a full journal (64 B each: 512 KiB).
const PENDING_RECORDS: usize = 8192;
/// Records polled from upstream per duty cycle at most.
const POLL_BATCH: usize = 256;

/// `[feed]` for `format = "mdfan"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayFeed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// The upstream publisher's control endpoint (`host:port` or `unix:PATH`), or two: a hot-hot pair.
    #[serde(default)]
    pub connect: Vec<String>,
    /// The upstream session's name (its logs and counters; with two endpoints leg B is `NAME-b`).
    #[serde(default = "default_name")]
    pub name: String,
    /// The token the upstream's `[access]` gives `name`.
    #[serde(default)]
    pub token: Option<String>,
    /// The upstream ring, in 64-byte slots (a power of two). Default 262,144 (16 MiB).
    #[serde(default = "default_ring_slots")]
    pub ring_slots: u32,
    /// What the upstream does when this relay's ring is full: `resync` (default), `disconnect` or `block`.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// The upstream fabric: `shm` (default) or `verbs`.
    #[serde(default = "default_fabric")]
    pub fabric: String,
    /// shm: the upstream ring's folder (the upstream's `fabric.shm_dir`). Default /dev/shm.
    #[serde(default)]
    pub shm_dir: Option<std::path::PathBuf>,
    /// verbs: the RDMA device (default the first).
    #[serde(default)]
    pub device: Option<String>,
    /// verbs: the GID index (default: the device's RoCE v2 IPv4 GID).
    #[serde(default)]
    pub gid_index: Option<u32>,
    /// instrument_ids the upstream session carries (the union the local strategies need); default all.
    #[serde(default)]
    pub instruments: Option<Vec<u32>>,
    /// No record (heartbeats included) from upstream for this long: the feed is silent downstream. Default 50.
    #[serde(default = "default_silence_timeout_ms")]
    pub silence_timeout_ms: u64,
    /// How long a lost upstream session is tried again (every 100 ms) before the relay's stream ends with a
    /// feed error. Default 86,400,000 (a day).
    #[serde(default = "default_reconnect_budget_ms")]
    pub reconnect_budget_ms: u64,
    /// Time allowed for each connect and the upstream's answer. Default 2000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// A symbol file added to the upstream's symbology.
    #[serde(default)]
    pub symbols: Option<std::path::PathBuf>,
}

fn default_name() -> String {
    "mdfan-relay".into()
}
fn default_ring_slots() -> u32 {
    262_144
}
fn default_policy() -> String {
    "resync".into()
}
fn default_fabric() -> String {
    "shm".into()
}
fn default_silence_timeout_ms() -> u64 {
    50
}
fn default_reconnect_budget_ms() -> u64 {
    86_400_000
}
fn default_connect_timeout_ms() -> u64 {
    2000
}

impl RelayFeed {
    /// Checks the keys and resolves the paths.
    pub(crate) fn check(&mut self, c: &Checker<'_>) -> Result<(), ConfigError> {
        match self.connect.len() {
            1 => {}
            2 if self.connect[0] == self.connect[1] => {
                return Err(c.bad("feed.connect", "names one publisher twice: a hot-hot pair needs two"))
            }
            2 => {}
            n => {
                return Err(
                    c.bad("feed.connect", format!("{n} endpoints: one upstream publisher, or two for a hot-hot pair"))
                )
            }
        }
        if self.name.is_empty() || self.name.len() > 62 {
            return Err(c.bad("feed.name", "1 to 62 bytes (leg B is NAME-b)"));
        }
        if let Err(e) = mdfan_wire::ring::check_slot_count(self.ring_slots as u64) {
            return Err(c.bad("feed.ring_slots", e.to_string()));
        }
        if parse_policy(&self.policy).is_none() {
            return Err(c.bad("feed.policy", "\"resync\", \"disconnect\" or \"block\""));
        }
        match self.fabric.as_str() {
            "shm" if self.device.is_some() || self.gid_index.is_some() => {
                return Err(c.bad("feed.fabric", "feed.device and feed.gid_index need fabric = \"verbs\""))
            }
            "shm" => {}
            "verbs" if cfg!(feature = "verbs") => {}
            "verbs" => return Err(c.bad("feed.fabric", "\"verbs\": this build has no verbs (feature `verbs`)")),
            _ => return Err(c.bad("feed.fabric", "\"shm\" or \"verbs\"")),
        }
        if self.instruments.as_ref().is_some_and(Vec::is_empty) {
            return Err(c.bad("feed.instruments", "empty: leave it out for every instrument"));
        }
        if self.silence_timeout_ms == 0 {
            return Err(c.bad("feed.silence_timeout_ms", "must be > 0"));
        }
        if self.connect_timeout_ms == 0 {
            return Err(c.bad("feed.connect_timeout_ms", "must be > 0"));
        }
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        Ok(())
    }

    /// The upstream session's config for endpoint `i`.
    fn subscriber_config(&self, i: usize) -> SubscriberConfig {
        let name = if i == 0 { self.name.clone() } else { format!("{}-b", self.name) };
        let mut cfg = SubscriberConfig::new(&self.connect[i], &name);
        cfg.ring_slots = self.ring_slots;
        cfg.fabric = self.fabric_config();
        cfg.instruments = self.instruments.clone();
        cfg.timeout = Duration::from_millis(self.connect_timeout_ms);
        cfg.policy = parse_policy(&self.policy).unwrap_or(SlowConsumerPolicy::Resync);
        cfg.token = self.token.clone();
        cfg.silence_timeout = Duration::from_millis(self.silence_timeout_ms);
        cfg.reconnect = Some(Reconnect::within(Duration::from_millis(self.reconnect_budget_ms)));
        cfg
    }

    #[cfg(feature = "verbs")]
    fn fabric_config(&self) -> FabricConfig {
        if self.fabric == "verbs" {
            return FabricConfig::Verbs(mdfan_fabric::verbs::VerbsConfig {
                device: self.device.clone(),
                gid_index: self.gid_index,
                ..Default::default()
            });
        }
        self.shm_config()
    }

    #[cfg(not(feature = "verbs"))]
    fn fabric_config(&self) -> FabricConfig {
        self.shm_config()
    }

    fn shm_config(&self) -> FabricConfig {
        match &self.shm_dir {
            Some(dir) => FabricConfig::Shm { dir: dir.clone() },
            None => FabricConfig::default(),
        }
    }
}

fn parse_policy(s: &str) -> Option<SlowConsumerPolicy> {
    match s {
        "resync" => Some(SlowConsumerPolicy::Resync),
        "disconnect" => Some(SlowConsumerPolicy::Disconnect),
        "block" => Some(SlowConsumerPolicy::Block),
        _ => None,
    }
}

/// What a relay counted, readable from any thread.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// Upstream records written to the journal.
    pub relayed: AtomicU64,
    /// Upstream records of one session only (heartbeats, snapshot markers, an end other than the feed's).
    pub left_out: AtomicU64,
    /// Gaps in the upstream stream, and the records they missed.
    pub gaps: AtomicU64,
    /// See `gaps`.
    pub missed: AtomicU64,
    /// Stale marks the relay wrote (every known instrument, at each gap or loss).
    pub stale_marks: AtomicU64,
    /// Upstream silences past `silence_timeout_ms`.
    pub silences: AtomicU64,
    /// Upstream sessions lost (a pair: legs down), and sessions made again (legs up).
    pub downs: AtomicU64,
    /// See `downs`.
    pub ups: AtomicU64,
    /// A pair's legs that went down (the merge carried on from the other), and came back.
    pub leg_downs: AtomicU64,
    /// See `leg_downs`.
    pub leg_ups: AtomicU64,
    /// 1 while the upstream is silent or lost.
    pub silent_now: AtomicU64,
}

/// A copy of [`RelayCounters`] for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// The upstream endpoints.
    pub upstream: String,
    /// See [`RelayCounters::relayed`].
    pub relayed: u64,
    /// See [`RelayCounters::left_out`].
    pub left_out: u64,
    /// See [`RelayCounters::gaps`].
    pub gaps: u64,
    /// See [`RelayCounters::missed`].
    pub missed: u64,
    /// See [`RelayCounters::stale_marks`].
    pub stale_marks: u64,
    /// See [`RelayCounters::silences`].
    pub silences: u64,
    /// See [`RelayCounters::downs`].
    pub downs: u64,
    /// See [`RelayCounters::ups`].
    pub ups: u64,
    /// See [`RelayCounters::leg_downs`].
    pub leg_downs: u64,
    /// See [`RelayCounters::leg_ups`].
    pub leg_ups: u64,
}

impl RelayReport {
    /// `feed format=mdfan upstream=.. relayed=.. left_out=.. gaps=.. missed=.. stale_marks=.. silences=..
    /// downs=.. ups=.. leg_downs=.. leg_ups=..`.
    pub fn line(&self) -> String {
        format!(
            "feed format=mdfan upstream={} relayed={} left_out={} gaps={} missed={} stale_marks={} silences={} \
             downs={} ups={} leg_downs={} leg_ups={}",
            self.upstream,
            self.relayed,
            self.left_out,
            self.gaps,
            self.missed,
            self.stale_marks,
            self.silences,
            self.downs,
            self.ups,
            self.leg_downs,
            self.leg_ups
        )
    }
}

struct Shared {
    upstream: String,
    c: RelayCounters,
}

impl Shared {
    fn report(&self) -> RelayReport {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        RelayReport {
            upstream: self.upstream.clone(),
            relayed: ld(&c.relayed),
            left_out: ld(&c.left_out),
            gaps: ld(&c.gaps),
            missed: ld(&c.missed),
            stale_marks: ld(&c.stale_marks),
            silences: ld(&c.silences),
            downs: ld(&c.downs),
            ups: ld(&c.ups),
            leg_downs: ld(&c.leg_downs),
            leg_ups: ld(&c.leg_ups),
        }
    }
}

impl FeedCounters for Shared {
    fn publish(&self, file: &mut mdfan_tuning::counters::CountersWriter) {
        use mdfan_tuning::counters::MetricKind::{Counter, Gauge};
        let r = self.report();
        file.set("mdfan_relay_relayed_total", "", Counter, r.relayed);
        file.set("mdfan_relay_gaps_total", "", Counter, r.gaps);
        file.set("mdfan_relay_missed_total", "", Counter, r.missed);
        file.set("mdfan_relay_stale_marks_total", "", Counter, r.stale_marks);
        file.set("mdfan_relay_silences_total", "", Counter, r.silences);
        file.set("mdfan_relay_upstream_downs_total", "", Counter, r.downs);
        file.set("mdfan_relay_upstream_ups_total", "", Counter, r.ups);
        file.set("mdfan_relay_leg_downs_total", "", Counter, r.leg_downs);
        file.set("mdfan_relay_leg_ups_total", "", Counter, r.leg_ups);
        file.set("mdfan_relay_upstream_silent", "", Gauge, self.c.silent_now.load(Ordering::Relaxed));
    }

    fn report(&self, into: &mut RunReport) {
        into.relay = Some(Shared::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![Shared::report(self).line()]
    }
}

/// One upstream session or a pair.
enum Upstream {
    One(Box<Subscriber>),
    Pair(Box<PairSubscriber>),
}

/// What maintaining the upstream found, the same for one session or a pair.
enum Found {
    Ok,
    /// Silent this long.
    Silent(Duration),
    /// The session (one upstream) is lost and being tried again.
    Lost,
    /// A session again (one upstream).
    Back,
    /// A pair's leg went down or came back: the merge carries on.
    Leg(&'static str),
    /// Gone for good.
    Ended(mdfan_subscriber::End),
}

impl Upstream {
    /// Connects to the upstream of `f` (both legs of a pair: a leg down at the start is tried again by the pair).
    fn connect(f: &RelayFeed) -> Result<Upstream, mdfan_subscriber::SubscribeError> {
        Ok(if f.connect.len() == 2 {
            Upstream::Pair(Box::new(PairSubscriber::connect(&f.subscriber_config(0), &f.subscriber_config(1))?))
        } else {
            Upstream::One(Box::new(Subscriber::connect(&f.subscriber_config(0))?))
        })
    }

    /// A new session after one the upstream ended (`publisher_shutdown`, `stalled`, `ring_full`: ends the
    /// subscriber's own reconnect policy does not retry, which a relay must survive).
    fn remake(&mut self, f: &RelayFeed) -> Result<(), mdfan_subscriber::SubscribeError> {
        match self {
            Upstream::One(s) => s.reconnect(),
            Upstream::Pair(_) => {
                *self = Upstream::connect(f)?;
                Ok(())
            }
        }
    }

    /// Whether a pair has a leg with a session (always true for one upstream: its loss is reported itself).
    fn any_leg_up(&self) -> bool {
        use mdfan_subscriber::State;
        match self {
            Upstream::One(_) => true,
            Upstream::Pair(p) => {
                (0..2).any(|i| !matches!(p.leg_state(i), State::Reconnecting { .. } | State::Ended(_)))
            }
        }
    }

    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: F) -> usize {
        match self {
            Upstream::One(s) => s.poll(max, f),
            Upstream::Pair(p) => p.poll(max, f),
        }
    }

    fn maintain_if_due(&mut self) -> Option<Found> {
        match self {
            Upstream::One(s) => s.maintain_if_due().map(|h| match h {
                Health::Ok => Found::Ok,
                Health::Silent(d) => Found::Silent(d),
                Health::Reconnecting { tries: 0 } => Found::Lost,
                Health::Reconnecting { .. } => Found::Ok,
                Health::Reconnected { .. } => Found::Back,
                Health::Ended(e) => Found::Ended(e),
            }),
            Upstream::Pair(p) => p.maintain_if_due().map(|h| match h {
                PairHealth::Ok => Found::Ok,
                PairHealth::Silent(d) => Found::Silent(d),
                PairHealth::LegDown { .. } => Found::Leg("down"),
                PairHealth::LegUp { .. } => Found::Leg("up"),
                PairHealth::Ended(e) => Found::Ended(e),
            }),
        }
    }
}

/// The relay's state the poll callback changes (apart from the upstream it polls).
struct State {
    pending: std::collections::VecDeque<BookUpdate>,
    /// Every instrument the relay has seen or been told of: a gap makes each stale.
    known: std::collections::BTreeSet<u32>,
    /// The instrument last put in `known` (most records follow one of the same instrument: no tree walk then).
    last_known: Option<u32>,
    stale_book: StaleBook,
    last_venue_pos: u64,
    /// Silent or lost, and since when (realtime ns of the last record before it, set when the silence is found).
    silent: bool,
    last_rx_ns: u64,
    silence_bound_ns: u64,
    silences: u32,
    /// The upstream session (both legs of a pair) is lost: every book was marked stale.
    lost: bool,
    /// A session was made again after a loss: its snapshot has not begun yet.
    after_loss: bool,
    ended: bool,
    shared: Arc<Shared>,
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl State {
    fn new(shared: Arc<Shared>, stale_book: StaleBook, silence_bound_ns: u64) -> State {
        State {
            pending: std::collections::VecDeque::with_capacity(PENDING_RECORDS),
            known: std::collections::BTreeSet::new(),
            last_known: None,
            stale_book,
            last_venue_pos: 0,
            silent: false,
            last_rx_ns: realtime_ns(),
            silence_bound_ns,
            silences: 0,
            lost: false,
            after_loss: false,
            ended: false,
            shared,
        }
    }

    fn on_event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Record(r) if std::mem::take(&mut self.after_loss) => {
                // The new session's first record. A snapshot of books (`size`: how many) rebuilds what it covers and
                // leaves the rest stale; no snapshot, or one of no book, means the upstream knows no book yet: its
                // stream builds every book from empty, so the books are empty, not unknown.
                if !(r.kind() == Some(Kind::SnapshotBegin) && r.size > 0) {
                    self.clear_all();
                }
                self.on_event(Event::Record(r));
            }
            Event::Record(r) => match r.kind() {
                Some(Kind::EndOfStream) => {
                    if r.end_reason() == Some(mdfan_subscriber::CloseReason::EndOfStream) {
                        self.ended = true;
                    }
                    self.shared.c.left_out.fetch_add(1, Ordering::Relaxed);
                }
                _ if mdfan_feed::capture::is_session_record(r) => {
                    // The upstream's heartbeat ends a silence as a record does: its session is there again (a
                    // quiet feed's upstream sends heartbeats only; the feed's own state comes as FeedStatus).
                    if r.kind() == Some(Kind::Heartbeat) && self.silent && !self.lost {
                        self.go_live();
                    }
                    self.shared.c.left_out.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    // Live again before the first record after a silence (after a loss, `back` says it).
                    if self.silent && !self.lost {
                        self.go_live();
                    }
                    if r.instrument_id != CHANNEL_INSTRUMENT_ID
                        && r.kind() != Some(Kind::FeedStatus)
                        && self.last_known != Some(r.instrument_id)
                    {
                        self.known.insert(r.instrument_id);
                        self.last_known = Some(r.instrument_id);
                    }
                    if r.flags & flags::SNAPSHOT == 0 && r.kind() != Some(Kind::FeedStatus) {
                        self.last_venue_pos = r.venue_pos;
                    }
                    self.shared.c.relayed.fetch_add(1, Ordering::Relaxed);
                    self.pending.push_back(BookUpdate { seq: 0, ts_send_ticks: 0, ..*r });
                }
            },
            Event::Gap { expected, got } => {
                self.shared.c.gaps.fetch_add(1, Ordering::Relaxed);
                self.shared.c.missed.fetch_add(got.saturating_sub(expected), Ordering::Relaxed);
                tracing::warn!(expected, got, "upstream gap: every known instrument is stale until its snapshot");
                self.mark_all_stale();
            }
            Event::Stale { .. } | Event::Corrupt { .. } | Event::Closed(_) => {}
        }
    }

    /// An `InstrumentStale` (flag `MAYBE_BAD_BOOK`) for every instrument the relay knows.
    fn mark_all_stale(&mut self) {
        let now = realtime_ns();
        for &id in &self.known {
            self.pending.push_back(BookUpdate {
                venue_pos: self.last_venue_pos,
                ts_event_ns: now,
                ts_recv_ns: now,
                flags: flags::LAST | flags::MAYBE_BAD_BOOK | flags::BAD_TS_RECV,
                ..BookUpdate::stale(id, self.stale_book)
            });
        }
        self.shared.c.stale_marks.fetch_add(self.known.len() as u64, Ordering::Relaxed);
    }

    /// A `Clear` (flagged `SNAPSHOT`; `MBP` for a price-level book) then an `InstrumentStale` of every instrument
    /// the relay knows: a new upstream session's books are the truth, what it does not send again must not
    /// stand, and a book it does not send is not known to be empty (its snapshot's own `Clear` cures the rest).
    fn clear_all_stale(&mut self) {
        self.clear_all();
        self.mark_all_stale();
    }

    /// A `Clear` (flagged `SNAPSHOT`; `MBP` for a price-level book) of every instrument the relay knows.
    fn clear_all(&mut self) {
        let mbp = if self.stale_book == StaleBook::PriceLevel { flags::MBP } else { 0 };
        let now = realtime_ns();
        for &id in &self.known {
            self.pending.push_back(BookUpdate {
                instrument_id: id,
                venue_pos: self.last_venue_pos,
                ts_event_ns: now,
                ts_recv_ns: now,
                flags: flags::LAST | flags::SNAPSHOT | flags::BAD_TS_RECV | mbp,
                ..BookUpdate::control(Kind::Clear)
            });
        }
    }

    /// The upstream session (every leg of a pair) is lost: silent, every book stale.
    fn lose(&mut self) {
        if self.lost {
            return;
        }
        self.lost = true;
        self.shared.c.downs.fetch_add(1, Ordering::Relaxed);
        if !self.silent {
            self.last_rx_ns = realtime_ns();
        }
        self.go_silent();
        self.mark_all_stale();
    }

    /// A session again after a loss: live, every book emptied and stale until the new session's snapshot.
    fn back(&mut self) {
        if !self.lost {
            return;
        }
        self.lost = false;
        self.shared.c.ups.fetch_add(1, Ordering::Relaxed);
        self.go_live();
        self.clear_all_stale();
        self.after_loss = true;
    }

    fn feed_status(&mut self, state: FeedState, ts_event_ns: u64, duration_ns: u64) {
        let mut r = BookUpdate::feed_status(state, ts_event_ns, duration_ns, self.silences);
        r.venue_pos = self.last_venue_pos;
        r.ts_recv_ns = realtime_ns();
        self.pending.push_back(r);
    }

    fn go_silent(&mut self) {
        if self.silent {
            return;
        }
        self.silent = true;
        self.silences += 1;
        self.shared.c.silences.fetch_add(1, Ordering::Relaxed);
        self.shared.c.silent_now.store(1, Ordering::Relaxed);
        self.feed_status(FeedState::Silent, self.last_rx_ns, self.silence_bound_ns);
    }

    fn go_live(&mut self) {
        if !self.silent {
            return;
        }
        self.silent = false;
        self.shared.c.silent_now.store(0, Ordering::Relaxed);
        let now = realtime_ns();
        self.feed_status(FeedState::Live, now, now.saturating_sub(self.last_rx_ns));
    }
}

/// The relay's feed source: see the module docs.
pub struct RelaySource {
    upstream: Upstream,
    state: State,
    endpoints: String,
    feed: RelayFeed,
    /// Remaking a session the upstream ended: give up at `.0`, next try at `.1`.
    retry: Option<(std::time::Instant, std::time::Instant)>,
}

impl RelaySource {
    /// Moves what waits into the journal; returns how many went in.
    fn drain(&mut self, writer: &mut JournalWriter) -> usize {
        let mut n = 0;
        while let Some(r) = self.state.pending.front() {
            if !writer.try_push(r) {
                break;
            }
            self.state.pending.pop_front();
            n += 1;
        }
        n
    }
}

impl FeedSource for RelaySource {
    fn busy_polls(&self) -> bool {
        true
    }

    fn step(&mut self, writer: &mut JournalWriter) -> Result<Step, FeedSourceError> {
        let mut n = self.drain(writer);
        if !self.state.pending.is_empty() {
            // The journal is full: the upstream ring holds the rest (then the upstream's policy).
            return Ok(Step::Work(n));
        }
        if self.state.ended {
            return Ok(Step::Ended);
        }
        if let Some((until, next)) = self.retry {
            let now = std::time::Instant::now();
            if now < next {
                return Ok(Step::Work(n));
            }
            match self.upstream.remake(&self.feed) {
                Ok(()) => {
                    self.retry = None;
                    tracing::info!(upstream = %self.endpoints, "upstream session made again: its snapshot follows");
                    self.state.back();
                }
                Err(e) if now >= until => {
                    return Err(FeedSourceError::Upstream(format!(
                        "upstream {}: no session within feed.reconnect_budget_ms ({} ms): {e}",
                        self.endpoints, self.feed.reconnect_budget_ms
                    )));
                }
                Err(_) => self.retry = Some((until, now + Duration::from_millis(100))),
            }
            return Ok(Step::Work(n + self.drain(writer)));
        }
        if let Some(found) = self.upstream.maintain_if_due() {
            match found {
                Found::Ok => {}
                Found::Silent(quiet) => {
                    if !self.state.silent {
                        self.state.last_rx_ns = realtime_ns().saturating_sub(quiet.as_nanos() as u64);
                    }
                    self.state.go_silent();
                }
                Found::Lost => {
                    tracing::warn!(upstream = %self.endpoints, "upstream session lost: every book stale, reconnecting");
                    self.state.lose();
                }
                Found::Back => {
                    tracing::info!(upstream = %self.endpoints, "upstream session made again: its snapshot follows");
                    self.state.back();
                }
                Found::Leg(what) => {
                    tracing::warn!(upstream = %self.endpoints, leg = what, "upstream pair: a leg went {what}");
                    let c = &self.state.shared.c;
                    if what == "down" { &c.leg_downs } else { &c.leg_ups }.fetch_add(1, Ordering::Relaxed);
                    // Both legs down: the feed is silent downstream (told, not an end). The books stand: the pair's
                    // merge knows what a returning leg can vouch for, and a loss it cannot fill is its gap (then
                    // stale marks and a snapshot here), so they are neither emptied nor marked here.
                    if self.upstream.any_leg_up() {
                        self.state.go_live();
                    } else {
                        tracing::warn!(upstream = %self.endpoints, "upstream pair: both legs down: the feed is silent");
                        if !self.state.silent {
                            self.state.last_rx_ns = realtime_ns();
                        }
                        self.state.go_silent();
                    }
                }
                Found::Ended(mdfan_subscriber::End::Closed(mdfan_subscriber::CloseReason::EndOfStream)) => {
                    self.state.ended = true;
                }
                Found::Ended(end) => {
                    // Ended by the upstream (shut down for a restart, stalled, ring_full) or given up: a relay
                    // goes on trying for its budget, its strategies told (silent, every book stale).
                    tracing::warn!(upstream = %self.endpoints, end = end.as_str(), "upstream session ended: every book stale, reconnecting");
                    self.state.lose();
                    let now = std::time::Instant::now();
                    let budget = Duration::from_millis(self.feed.reconnect_budget_ms);
                    self.retry = Some((now + budget, now + Duration::from_millis(100)));
                }
            }
            n += self.drain(writer);
            if !self.state.pending.is_empty() {
                return Ok(Step::Work(n));
            }
        }
        let room = POLL_BATCH.min(PENDING_RECORDS.saturating_sub(self.state.known.len()));
        let state = &mut self.state;
        let polled = self.upstream.poll(room.max(1), |ev| state.on_event(ev));
        n += self.drain(writer);
        Ok(Step::Work(n.max(polled)))
    }
}

/// Connects upstream (one endpoint, or both of a pair: a leg down at the start is tried again) and takes its
/// symbology and book kind.
pub(crate) fn open(f: &RelayFeed) -> Result<Opened, PublisherError> {
    // An upstream not up yet (a relay started first), or one that went away during the handshake (killed or
    // restarting after it accepted: `SubscribeError::is_transient`), is tried every 100 ms for
    // reconnect_budget_ms. A refusal or a bad answer is final.
    let start = std::time::Instant::now();
    let mut warned = false;
    let upstream = loop {
        match Upstream::connect(f) {
            Ok(u) => break u,
            Err(e) if e.is_transient() && start.elapsed() < Duration::from_millis(f.reconnect_budget_ms) => {
                if !warned {
                    tracing::warn!(cause = %e, "upstream not answering yet: trying every 100 ms (feed.reconnect_budget_ms)");
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(PublisherError::Upstream(e.to_string())),
        }
    };
    // The upstream's feed, passed on (a relay is not a feed of its own).
    let identity = match &upstream {
        Upstream::Pair(pair) => (0..2).find_map(|i| pair.leg(i).map(|s| s.feed().clone())).unwrap_or_default(),
        Upstream::One(sub) => sub.feed().clone(),
    };
    let (symbology, book) = match &upstream {
        Upstream::Pair(pair) => (
            pair.symbology().cloned().unwrap_or_default(),
            (0..2).find_map(|i| pair.leg(i).map(|s| s.book_kind())).unwrap_or(BookKind::Mbo),
        ),
        Upstream::One(sub) => (sub.symbology().clone(), sub.book_kind()),
    };
    let endpoints = f.connect.join(",");
    let shared = Arc::new(Shared { upstream: endpoints.clone(), c: RelayCounters::default() });
    let mut known = std::collections::BTreeSet::new();
    known.extend(symbology.iter().map(|d| d.instrument_id));
    let stale_book = if book == BookKind::Mbp { StaleBook::PriceLevel } else { StaleBook::Order };
    let mut state = State::new(Arc::clone(&shared), stale_book, f.silence_timeout_ms * 1_000_000);
    state.known = known;
    let instruments = symbology.len();
    Ok(Opened {
        source: Box::new(RelaySource { upstream, state, endpoints: endpoints.clone(), feed: f.clone(), retry: None }),
        traits: FeedTraits {
            live: true,
            book,
            price_level_instruments: (book == BookKind::Mbp).then_some(instruments.max(4096)),
            identity,
        },
        counters: vec![shared],
        symbology,
        definitions: None,
        name: format!("mdfan upstream={endpoints}"),
        bound: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::feeds::FeedConfig;

    fn parse(feed: &str) -> Result<Config, String> {
        let text = format!("[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"mdfan\"\n{feed}\n");
        Config::parse(&text, std::path::Path::new("relay.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_relay_config_names_its_upstream_and_each_mistake_with_its_line() {
        let cfg = parse("connect = [\"10.0.0.1:7700\", \"10.0.0.2:7700\"]\nring_slots = 4096").unwrap();
        let FeedConfig::Relay(f) = &cfg.feed else { panic!("{:?}", cfg.feed) };
        assert_eq!(
            (f.connect.len(), f.ring_slots, f.name.as_str(), f.policy.as_str()),
            (2, 4096, "mdfan-relay", "resync")
        );
        assert!(cfg.feed.is_live());
        let b = f.subscriber_config(1);
        assert_eq!((b.name.as_str(), b.endpoint.as_str(), b.ring_slots), ("mdfan-relay-b", "10.0.0.2:7700", 4096));
        assert!(b.reconnect.is_some(), "a relay's upstream legs reconnect");
        for (feed, want) in [
            ("", "key feed.connect: 0 endpoints"),
            ("connect = [\"a:1\", \"a:1\"]", "line 6: key feed.connect: names one publisher twice"),
            ("connect = [\"a:1\", \"b:1\", \"c:1\"]", "line 6: key feed.connect: 3 endpoints"),
            ("connect = [\"a:1\"]\nring_slots = 1000", "line 7: key feed.ring_slots"),
            ("connect = [\"a:1\"]\npolicy = \"drop\"", "line 7: key feed.policy"),
            ("connect = [\"a:1\"]\nfabric = \"tcp\"", "line 7: key feed.fabric"),
            ("connect = [\"a:1\"]\ndevice = \"rxe0\"", "key feed.fabric: feed.device and feed.gid_index need"),
            ("connect = [\"a:1\"]\npath = \"x.dbn\"", "path"),
        ] {
            let e = parse(feed).expect_err(feed);
            assert!(e.contains(want), "{feed}: {e}");
        }
    }

    /// A silence of the upstream session ends with its next heartbeat, not only its next record: a quiet feed's
    /// upstream sends heartbeats alone (the relay demo on a busy host once ended every strategy `silent_at_end`
    /// after a 50 ms hiccup in the feed's idle tail, 327 heartbeats later). A heartbeat after a loss does not:
    /// that is `back`'s, with its snapshot.
    #[test]
    fn an_upstream_heartbeat_ends_a_silence() {
        use mdfan_wire::{BookUpdate, FeedState, Kind};
        let shared = std::sync::Arc::new(super::Shared { upstream: "a:1".into(), c: Default::default() });
        let mut s = super::State::new(shared, mdfan_wire::StaleBook::PriceLevel, 50_000_000);
        let heartbeat = BookUpdate::control(Kind::Heartbeat);
        let states =
            |s: &super::State| -> Vec<Option<FeedState>> { s.pending.iter().map(|r| r.feed_state()).collect() };
        s.on_event(mdfan_subscriber::Event::Record(&heartbeat));
        assert!(s.pending.is_empty(), "live already: nothing to say");
        s.go_silent();
        s.on_event(mdfan_subscriber::Event::Record(&heartbeat));
        assert_eq!(states(&s), [Some(FeedState::Silent), Some(FeedState::Live)]);
        assert!(!s.silent);
        assert_eq!(s.shared.c.left_out.load(std::sync::atomic::Ordering::Relaxed), 2, "heartbeats are not relayed");
        s.pending.clear();
        s.lose();
        let before = s.pending.len();
        s.on_event(mdfan_subscriber::Event::Record(&heartbeat));
        assert!(s.silent && s.pending.len() == before, "a lost session is back only through `back`");
    }

    /// An upstream that accepts the control connection and closes it unanswered (a publisher killed or
    /// restarting during the handshake) is tried again within `reconnect_budget_ms`, as one not up yet is; the
    /// relay's start gives up only at the budget, naming the upstream's last error.
    #[test]
    fn a_relay_start_tries_again_when_the_upstream_goes_away_during_the_handshake() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(AtomicU32::new(0));
        let count = std::sync::Arc::clone(&accepted);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                count.fetch_add(1, Ordering::Relaxed);
                drop(conn); // closed before any answer
            }
        });
        let cfg = parse(&format!("connect = [\"{addr}\"]\nreconnect_budget_ms = 450")).unwrap();
        let FeedConfig::Relay(f) = &cfg.feed else { panic!("{:?}", cfg.feed) };
        let e = match super::open(f) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("the upstream at {addr} never answers"),
        };
        assert!(e.contains("control"), "{e}");
        let tries = accepted.load(Ordering::Relaxed);
        assert!(tries >= 2, "{tries} handshakes in 450 ms at one per 100 ms: {e}");
    }
}
