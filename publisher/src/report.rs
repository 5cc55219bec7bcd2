//! The publisher's final report: one line per session and the run's totals (also what SIGUSR1 prints).

use std::sync::atomic::Ordering;

use mdfan_fabric::CloseReason;
use mdfan_wire::control::SlowConsumerPolicy;

use crate::send_clock::SendCompletionCounters;
use crate::session::SessionCounters;

/// One session's post-to-send-completion figures, `clock=nic` ([`crate::send_clock`]): ns from the hot loop's
/// post of a signalled WRITE to its send completion's NIC timestamp, both on `CLOCK_REALTIME`. Quantiles are
/// upper bounds within 6.25% (the max is exact).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendCompletionReport {
    /// Completions recorded.
    pub count: u64,
    /// Stamped completions reaped before the first NIC/TSC-to-realtime mapping (not recorded).
    pub unaligned: u64,
    /// Stamps the ring could not hold between two takes (not recorded).
    pub lost: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
}

impl SendCompletionReport {
    /// The figures as the hot loop left them.
    pub(crate) fn read(c: &SendCompletionCounters) -> SendCompletionReport {
        SendCompletionReport {
            count: c.ns.count(),
            unaligned: c.unaligned.load(Ordering::Relaxed),
            lost: c.lost.load(Ordering::Relaxed),
            p50_ns: c.ns.quantile(0.5),
            p99_ns: c.ns.quantile(0.99),
            p999_ns: c.ns.quantile(0.999),
            max_ns: c.ns.max(),
        }
    }
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
    /// Post-to-send-completion on the NIC clock; `None` when the ring's send completions carry no NIC
    /// timestamps (shm, Soft-RoCE, a device without `hca_core_clock`).
    pub send_completion: Option<SendCompletionReport>,
    /// Snapshot requests taken (served, or collapsed into a pending one).
    pub snapshot_requests: u64,
    /// Snapshot requests refused past `publisher.snapshot_requests_per_s`.
    pub snapshot_requests_refused: u64,
}

impl SessionReport {
    /// A session not yet counted; `send_stamped`: its send completions carry NIC timestamps.
    pub(crate) fn new(id: u64, name: String, policy: SlowConsumerPolicy, send_stamped: bool) -> SessionReport {
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
            send_completion: send_stamped.then(SendCompletionReport::default),
            snapshot_requests: 0,
            snapshot_requests_refused: 0,
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
        if let Some(sc) = &mut self.send_completion {
            *sc = SendCompletionReport::read(&c.send_completion);
        }
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

    /// `send_completion id=1 name=a clock=nic count=.. unaligned=.. lost=.. p50_ns=.. p99_ns=.. p99.9_ns=..
    /// max_ns=..`: post-to-send-completion ([`SendCompletionReport`]). `None` when the session's send completions
    /// carry no NIC timestamps. With stamps but no mapping (the device's clock could not be read against
    /// `CLOCK_REALTIME`): `send_completion id=1 name=a clock=nic: not available (NIC clock not readable against
    /// CLOCK_REALTIME; N completions stamped)`.
    pub fn send_completion_line(&self) -> Option<String> {
        let sc = self.send_completion?;
        if sc.count == 0 && sc.unaligned > 0 {
            return Some(format!(
                "send_completion id={} name={} clock=nic: not available (NIC clock not readable against CLOCK_REALTIME; {} completions stamped)",
                self.id, self.name, sc.unaligned
            ));
        }
        Some(format!(
            "send_completion id={} name={} clock=nic count={} unaligned={} lost={} p50_ns={} p99_ns={} p99.9_ns={} max_ns={}",
            self.id, self.name, sc.count, sc.unaligned, sc.lost, sc.p50_ns, sc.p99_ns, sc.p999_ns, sc.max_ns
        ))
    }
}

/// The `clocks` line when no session's send completions carried NIC timestamps (shm, Soft-RoCE, a device without
/// `hca_core_clock`): the hot loop's duty cycle is TSC reads (quanta); there is no post-to-send-completion figure.
pub const CLOCKS_LINE_NO_NIC: &str = "clocks cycle=tsc send_completion=nic:not_available";

/// The `clocks` line when at least one session's send completions carried NIC timestamps: its figures follow in
/// `send_completion id=.. clock=nic ..` lines ([`SessionReport::send_completion_line`]).
pub const CLOCKS_LINE_NIC: &str = "clocks cycle=tsc send_completion=nic";

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
    /// A live MDP 3.0 feed's counters at the end (lines, arbitration, losses, decoding), one per channel in
    /// config order; empty for another feed.
    pub live: Vec<crate::live::LiveReport>,
    /// A live ITCH 5.0 feed's MoldUDP64 counters at the end (packets, gaps, requests, holes); `None` otherwise.
    pub moldudp64: Option<crate::live_itch::MoldReport>,
    /// A LOBSTER replay's check (messages, order-book rows checked); `None` otherwise.
    pub lobster: Option<crate::feeds::lobster::LobsterReport>,
    /// A capture replay's counts (records, gaps, records left out); `None` otherwise.
    pub capture: Option<crate::feeds::capture::CaptureReport>,
    /// A relay's counters (`format = "mdfan"`).
    pub relay: Option<crate::feeds::relay::RelayReport>,
    /// An ITCH 5.0 file replay's counts (messages, skipped by type); `None` otherwise.
    pub itch_file: Option<crate::feeds::itch::ItchFileReport>,
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

    /// The line after the run report naming the clock of each figure: [`CLOCKS_LINE_NIC`] when any session's
    /// send completions carried NIC timestamps, else [`CLOCKS_LINE_NO_NIC`].
    pub fn clocks_line(&self) -> &'static str {
        if self.sessions.iter().any(|s| s.send_completion.is_some()) {
            CLOCKS_LINE_NIC
        } else {
            CLOCKS_LINE_NO_NIC
        }
    }

    /// The session report of `name`.
    pub fn session(&self, name: &str) -> Option<&SessionReport> {
        self.sessions.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_clock::SendCompletionCounters;
    use std::sync::atomic::Ordering;

    fn run(sessions: Vec<SessionReport>) -> RunReport {
        RunReport {
            records: 0,
            replay_ns: 0,
            sessions,
            cycle_p50_ns: 0,
            cycle_p999_ns: 0,
            cycle_max_ns: 0,
            cycle_buckets_ns: Vec::new(),
            decode_to_post_buckets_ns: Vec::new(),
            end: CloseReason::EndOfStream,
            feed_error: None,
            live: Vec::new(),
            moldudp64: None,
            lobster: None,
            capture: None,
            relay: None,
            itch_file: None,
        }
    }

    #[test]
    fn unstamped_sessions_say_not_available_and_print_no_send_completion_line() {
        let r = SessionReport::new(1, "a".into(), SlowConsumerPolicy::Resync, false);
        assert_eq!(r.send_completion_line(), None);
        assert_eq!(run(vec![r]).clocks_line(), "clocks cycle=tsc send_completion=nic:not_available");
        assert_eq!(run(Vec::new()).clocks_line(), CLOCKS_LINE_NO_NIC);
    }

    #[test]
    fn a_stamped_session_prints_its_figures_on_the_nic_clock() {
        let c = SessionCounters::default();
        let sc: &SendCompletionCounters = &c.send_completion;
        for ns in [1_000u64, 1_000, 2_000, 40_000] {
            sc.ns.record(ns);
        }
        sc.unaligned.store(3, Ordering::Relaxed);
        sc.lost.store(1, Ordering::Relaxed);
        let mut r = SessionReport::new(7, "b".into(), SlowConsumerPolicy::Block, true);
        r.update(&c, &quanta::Clock::new());
        // 1,000 is in [992, 1,023], 2,000 in [1,984, 2,047] (16 buckets per power of two); the max is exact
        assert_eq!(
            r.send_completion,
            Some(SendCompletionReport {
                count: 4,
                unaligned: 3,
                lost: 1,
                p50_ns: 1_023,
                p99_ns: 40_000,
                p999_ns: 40_000,
                max_ns: 40_000
            })
        );
        assert_eq!(
            r.send_completion_line().unwrap(),
            "send_completion id=7 name=b clock=nic count=4 unaligned=3 lost=1 p50_ns=1023 p99_ns=40000 p99.9_ns=40000 max_ns=40000"
        );
        let unstamped = SessionReport::new(8, "c".into(), SlowConsumerPolicy::Resync, false);
        assert_eq!(run(vec![unstamped, r]).clocks_line(), "clocks cycle=tsc send_completion=nic");
    }

    #[test]
    fn stamps_without_a_mapping_say_the_clock_was_not_readable() {
        let c = SessionCounters::default();
        c.send_completion.unaligned.store(5, Ordering::Relaxed);
        let mut r = SessionReport::new(2, "d".into(), SlowConsumerPolicy::Resync, true);
        r.update(&c, &quanta::Clock::new());
        assert_eq!(
            r.send_completion_line().unwrap(),
            "send_completion id=2 name=d clock=nic: not available (NIC clock not readable against CLOCK_REALTIME; 5 completions stamped)"
        );
    }
}
