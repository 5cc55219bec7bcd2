//! The publisher's final report: one line per session and the run's totals (also what SIGUSR1 prints).

use std::sync::atomic::Ordering;

use mdfan_fabric::CloseReason;
use mdfan_wire::control::SlowConsumerPolicy;

use crate::session::SessionCounters;

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
    pub(crate) fn new(id: u64, name: String, policy: SlowConsumerPolicy) -> SessionReport {
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

    pub(crate) fn update(&mut self, c: &SessionCounters, clock: &quanta::Clock) {
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

/// The line after the run report naming the clock of each figure: the hot loop's duty cycle is TSC reads (quanta); send completions are not timestamped (the publisher's send CQ is created without
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), so there is no post-to-send-completion figure on the NIC clock.
pub const CLOCKS_LINE: &str = "clocks cycle=tsc send_completion=nic:not_measured";

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
    /// With `end` [`CloseReason::FeedError`]: the feed's error (file, record, byte offset, what was wrong).
    pub feed_error: Option<String>,
    /// A live feed's counters at the end (lines, arbitration, losses, decoding); `None` for a file.
    pub live: Option<crate::live::LiveReport>,
    /// A live ITCH 5.0 feed's MoldUDP64 counters at the end (packets, gaps, requests, holes); `None` otherwise.
    pub moldudp64: Option<crate::live_itch::MoldReport>,
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
