//! mdfan-feedsim: the exchange side for tests and demos.
//!
//! Plays the UDP datagrams of a pcap/pcapng capture onto two lines (A and B), at the recorded pace or faster,
//! with seeded, deterministic loss, duplication and reordering per line, and an optional seq range dropped on
//! both lines.
//!
//! - [`capture`]: reading the capture (pcap or pcapng; Ethernet, IPv4, UDP; timestamps in ns).
//! - [`impair`]: the per-line impairment model.
//! - [`feed`]: what a feed adds ([`Feed`]: seq extraction, an encoder hook, a recovery-server hook), with CME MDP
//!   3.0 ([`Mdp3`]).
//! - [`snapshot`]: CME MDP 3.0 market recovery, the snapshot feed served from the simulator's own books.
//! - [`itch`]: Nasdaq TotalView-ITCH 5.0 synthesised from DBN MBO ([`ItchEncoder`], sans I/O).
//! - [`moldudp64`]: those messages framed into MoldUDP64 packets ([`MoldFramer`]), played as the feed
//!   [`MoldItch`] ([`run_capture`] over the in-memory packets, [`moldudp64::capture_of`]), with a MoldUDP64
//!   retransmission server ([`MoldRetransmitServer`]).
//! - [`sender`]: the sockets (multicast on 127.0.0.1 with TTL 0, or loopback unicast; nothing else).
//! - [`plan`] and [`play`]: which datagram goes out on which line when, and sending it.
//!
//! The binary `mdfan-feedsim` is a thin CLI over [`run`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod definitions;
pub mod feed;
pub mod impair;
pub mod itch;
pub mod moldudp64;
pub mod sender;
pub mod snapshot;

use std::fmt;
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mdfan_lines::Line;

pub use capture::{read_capture, Capture, CaptureError, UdpPacket};
pub use definitions::{DefinitionLoop, DefinitionsConfig};
pub use feed::{Feed, Mdp3, RecoveryConfig, RecoveryServer};
pub use impair::{plan_line, Impairment, LinePlan};
pub use itch::{EncoderStats, ItchEncoder};
pub use moldudp64::{MoldFramer, MoldItch, MoldRetransmitServer, RetransmitOptions, Session};
pub use sender::{LineSender, MulticastScope, SendError};

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The capture.
    pub pcap: PathBuf,
    /// The capture's destination (group:port) played as line A; `None`: the first in the file.
    pub line_a: Option<SocketAddrV4>,
    /// The capture's destination played as line B; `None`: the second in the file.
    pub line_b: Option<SocketAddrV4>,
    /// Where line A goes.
    pub send_a: SocketAddrV4,
    /// Where line B goes.
    pub send_b: SocketAddrV4,
    /// 1 = the recorded pace, 10 = ten times faster, 0 = as fast as possible.
    pub speed: f64,
    /// Line A's impairment.
    pub impair_a: Impairment,
    /// Line B's impairment.
    pub impair_b: Impairment,
    /// Seed of the impairment model.
    pub seed: u64,
    /// Seqs `first..=last` dropped on both lines.
    pub drop_seqs: Option<(u64, u64)>,
    /// The feed's recovery server (MDP 3.0: the snapshot feed); `None`: no recovery channel.
    pub recovery: Option<RecoveryConfig>,
    /// Where multicast goes ([`MulticastScope`]): the loopback interface (default), or a test's own network
    /// namespace's routes.
    pub multicast: MulticastScope,
    /// An MDP 3.0 instrument definition loop ([`definitions`]); `None`: none.
    pub definitions: Option<DefinitionsConfig>,
}

/// A run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The capture could not be read.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// A line's source group is not in the capture, or the capture has too few groups.
    #[error("{}: {detail}; the capture's UDP destinations: {}", pcap.display(), list(groups))]
    Groups {
        /// The capture.
        pcap: PathBuf,
        /// What is missing.
        detail: String,
        /// The destinations found.
        groups: Vec<SocketAddrV4>,
    },
    /// `--speed` is negative or not a number.
    #[error("speed {0}: must be 0 (as fast as possible) or a positive factor of the recorded pace")]
    Speed(f64),
    /// An impairment fraction is outside 0..=1.
    #[error("{what} {value}: must be a fraction in 0..=1")]
    Fraction {
        /// The option.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// A socket could not be opened or written.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The feed's recovery server failed.
    #[error("recovery server: {0}")]
    Recovery(std::io::Error),
    /// A recovery server was asked of a feed that has none.
    #[error("feed {0} has no recovery server")]
    NoRecovery(&'static str),
}

fn list(groups: &[SocketAddrV4]) -> String {
    let v: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// One line's part of a [`Plan`] and what was done with it.
#[derive(Debug, Clone)]
pub struct LineSummary {
    /// A or B.
    pub line: Line,
    /// The capture's destination played on this line.
    pub group: SocketAddrV4,
    /// Where it was sent.
    pub dest: SocketAddrV4,
    /// Packets of this line in the capture (the whole plan, also when the run was interrupted).
    pub read: u64,
    /// Datagrams sent (duplicates included).
    pub sent: u64,
    /// Packets the plan leaves out: random loss plus `--drop-seqs` (decided before the first send, so the whole
    /// plan's, also when the run was interrupted).
    pub dropped: u64,
    /// Of `dropped`, those in the `--drop-seqs` range.
    pub dropped_by_seq: u64,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Packets held back behind their successor.
    pub reordered: u64,
    /// Seqs of the dropped packets (feed seq; packets without one are left out), ascending.
    pub dropped_seqs: Vec<u64>,
}

impl fmt::Display for LineSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line={} group={} dest={} read={} sent={} dropped={} dropped_by_seq={} duplicated={} reordered={}",
            self.line.name(),
            // a synthesised capture's placeholder (no group was ever sent to) names no group
            if [moldudp64::SYNTH_GROUP_A, moldudp64::SYNTH_GROUP_B].contains(&self.group) {
                "synthesised".to_owned()
            } else {
                self.group.to_string()
            },
            self.dest,
            self.read,
            self.sent,
            self.dropped,
            self.dropped_by_seq,
            self.duplicated,
            self.reordered
        )
    }
}

/// One datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendEvent {
    /// The line.
    pub line: Line,
    /// Index into the capture's packets.
    pub packet: usize,
    /// Capture time that paces it, ns.
    pub ts_ns: u64,
}

/// Which datagram goes out on which line, in send order (by capture time; line A first on a tie).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The capture.
    pub capture: Capture,
    /// The sends, in order.
    pub events: Vec<SendEvent>,
    /// Per line (A, B); `sent` is what the plan will send.
    pub lines: [LineSummary; 2],
    /// Line A's packets (indices into the capture), in file order: the published stream a recovery server sees,
    /// before impairment.
    pub published: Vec<usize>,
    /// Where multicast goes.
    pub multicast: MulticastScope,
}

fn check_fraction(what: &'static str, value: f64) -> Result<(), SimError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(SimError::Fraction { what, value })
    }
}

/// Checks the run's knobs: speed, impairment fractions, destinations.
fn check_config(cfg: &SimConfig) -> Result<(), SimError> {
    if !(cfg.speed >= 0.0 && cfg.speed.is_finite()) {
        return Err(SimError::Speed(cfg.speed));
    }
    for (what, imp) in [("--loss-a/--dup/--reorder", cfg.impair_a), ("--loss-b/--dup/--reorder", cfg.impair_b)] {
        check_fraction(what, imp.loss)?;
        check_fraction(what, imp.dup)?;
        check_fraction(what, imp.reorder)?;
    }
    sender::check_dest("A", cfg.send_a)?;
    sender::check_dest("B", cfg.send_b)?;
    Ok(())
}

/// Reads the capture and plans the run: picks the lines' groups, applies the impairment model, orders the sends.
pub fn plan(cfg: &SimConfig, feed: &dyn Feed) -> Result<Plan, SimError> {
    check_config(cfg)?;
    let mut capture = read_capture(&cfg.pcap)?;
    feed.rewrite_capture(&mut capture);
    let groups = capture.groups();
    let pick = |want: Option<SocketAddrV4>, nth: usize, name: &str| -> Result<SocketAddrV4, SimError> {
        let err = |detail: String| SimError::Groups { pcap: cfg.pcap.clone(), detail, groups: groups.clone() };
        match want {
            Some(g) if groups.contains(&g) => Ok(g),
            Some(g) => Err(err(format!("line {name} group {g} has no packet"))),
            None => groups.get(nth).copied().ok_or_else(|| err(format!("no group {} for line {name}", nth + 1))),
        }
    };
    let group = [pick(cfg.line_a, 0, "A")?, pick(cfg.line_b, 1, "B")?];
    Ok(plan_capture(cfg, feed, capture, group))
}

/// Plans a run over a capture already in memory (a synthesised feed, [`moldudp64::capture_of`]): `group` are
/// the capture destinations played as lines A and B (a group without packets leaves its line idle). Checks
/// nothing; [`plan`] and [`run_capture`] do.
pub fn plan_capture(cfg: &SimConfig, feed: &dyn Feed, capture: Capture, group: [SocketAddrV4; 2]) -> Plan {
    let dest = [cfg.send_a, cfg.send_b];
    let imp = [cfg.impair_a, cfg.impair_b];
    let mut events = Vec::new();
    let mut published = Vec::new();
    let lines = [Line::A, Line::B].map(|line| {
        let li = line.index();
        let idx: Vec<usize> = (0..capture.packets.len()).filter(|&i| capture.packets[i].dst == group[li]).collect();
        if line == Line::A {
            published.clone_from(&idx);
        }
        let ts: Vec<u64> = idx.iter().map(|&i| capture.packets[i].ts_ns).collect();
        let seq_of = |k: usize| feed.seq(&capture.packets[idx[k]].payload);
        // A packet goes when any of its seqs is in the range (MoldUDP64 packets carry several).
        let forced = |k: usize| match (cfg.drop_seqs, seq_of(k)) {
            (Some((first, last)), Some(s)) => {
                let count = feed.seq_count(&capture.packets[idx[k]].payload);
                count > 0 && s <= last && s.saturating_add(count - 1) >= first
            }
            _ => false,
        };
        let p = plan_line(&ts, &imp[li], cfg.seed, line, forced);
        events.extend(p.sends.iter().map(|s| SendEvent { line, packet: idx[s.packet], ts_ns: s.ts_ns }));
        let mut dropped_seqs: Vec<u64> = p.lost.iter().chain(&p.dropped_by_seq).filter_map(|&k| seq_of(k)).collect();
        dropped_seqs.sort_unstable();
        LineSummary {
            line,
            group: group[li],
            dest: dest[li],
            read: idx.len() as u64,
            sent: p.sends.len() as u64,
            dropped: (p.lost.len() + p.dropped_by_seq.len()) as u64,
            dropped_by_seq: p.dropped_by_seq.len() as u64,
            duplicated: p.duplicated,
            reordered: p.reordered,
            dropped_seqs,
        }
    });
    // Stable: line A's sends come first in `events`, so A wins a tie.
    events.sort_by_key(|e| e.ts_ns);
    Plan { capture, events, lines, published, multicast: cfg.multicast }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Per line (A, B).
    pub lines: [LineSummary; 2],
    /// UDP/IPv4 packets in the capture (all groups).
    pub packets: u64,
    /// Capture packets that were not UDP/IPv4 (skipped).
    pub skipped: u64,
    /// The feed's name.
    pub feed: &'static str,
    /// Wall time spent sending.
    pub elapsed: Duration,
    /// Stopped early by the shutdown flag.
    pub interrupted: bool,
    /// Datagrams the recovery server sent (linger included); `None` without one.
    pub recovery_sent: Option<u64>,
    /// Packets the instrument definition loop sent (linger included); `None` without one.
    pub definitions_sent: Option<u64>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // a line the capture has nothing for (line B of a synthesised feed without --send-b) is left out
        for l in self.lines.iter().filter(|l| l.read > 0 || l.line == Line::A) {
            writeln!(f, "feedsim {l}")?;
        }
        write!(
            f,
            "feedsim feed={} packets={} skipped={} sent={} elapsed_ms={:.1} end={}",
            self.feed,
            self.packets,
            self.skipped,
            self.lines[0].sent + self.lines[1].sent,
            self.elapsed.as_secs_f64() * 1e3,
            if self.interrupted { "interrupted" } else { "complete" }
        )?;
        if let Some(n) = self.recovery_sent {
            write!(f, " recovery_sent={n}")?;
        }
        if let Some(n) = self.definitions_sent {
            write!(f, " definitions_sent={n}")?;
        }
        Ok(())
    }
}

/// Waits until `due` (sleeps while far, then spins) and polls the recovery server meanwhile.
fn wait_until(due: Instant, feed: &mut dyn Feed, shutdown: &AtomicBool) -> Result<u64, SimError> {
    /// Below this, spin instead of sleeping: a sleep can overshoot by the timer slack (~50 us) or more.
    const SPIN_BELOW: Duration = Duration::from_micros(200);
    let mut sent = 0;
    loop {
        sent += poll_recovery(feed)?;
        let now = Instant::now();
        if now >= due || shutdown.load(Ordering::Relaxed) {
            return Ok(sent);
        }
        let left = due - now;
        if left > SPIN_BELOW {
            std::thread::sleep((left - SPIN_BELOW).min(Duration::from_millis(1)));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Polls the feed's recovery server, if any; returns the datagrams it sent.
fn poll_recovery(feed: &mut dyn Feed) -> Result<u64, SimError> {
    match feed.recovery() {
        Some(r) => Ok(r.poll(mdfan_lines::realtime_ns()).map_err(SimError::Recovery)? as u64),
        None => Ok(0),
    }
}

/// Keeps the feed's recovery server serving for `linger` after the last send (stops early on `shutdown`);
/// returns the datagrams it sent.
pub fn linger(feed: &mut dyn Feed, linger: Duration, shutdown: &AtomicBool) -> Result<u64, SimError> {
    let end = Instant::now() + linger;
    let mut sent = 0;
    while Instant::now() < end && !shutdown.load(Ordering::Relaxed) {
        sent += poll_recovery(feed)?;
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(sent)
}

/// Sends a plan: each datagram at `start + (ts - first ts) / speed` (at once with speed 0). Stops early when
/// `shutdown` is set.
pub fn play(plan: Plan, speed: f64, feed: &mut dyn Feed, shutdown: &AtomicBool) -> Result<Summary, SimError> {
    let senders = [
        LineSender::open_scoped("A", plan.lines[0].dest, plan.multicast)?,
        LineSender::open_scoped("B", plan.lines[1].dest, plan.multicast)?,
    ];
    let mut lines = plan.lines;
    let planned = [lines[0].sent, lines[1].sent];
    lines[0].sent = 0;
    lines[1].sent = 0;
    let packets = &plan.capture.packets;
    let mut out = Vec::with_capacity(65_536);
    let mut published = 0usize;
    let start = Instant::now();
    let t0 = plan.events.first().map_or(0, |e| e.ts_ns);
    let mut interrupted = false;
    let mut recovery_sent = 0;
    for e in &plan.events {
        if shutdown.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        if speed > 0.0 {
            let offset_ns = e.ts_ns.saturating_sub(t0) as f64 / speed;
            recovery_sent += wait_until(start + Duration::from_nanos(offset_ns as u64), feed, shutdown)?;
            if shutdown.load(Ordering::Relaxed) {
                // stopped while waiting: this datagram is not due yet, so it is not sent
                interrupted = true;
                break;
            }
        }
        let li = e.line.index();
        let payload = &packets[e.packet].payload;
        // The published stream, up to this send's time.
        while let Some(&k) = plan.published.get(published) {
            if packets[k].ts_ns > e.ts_ns {
                break;
            }
            published += 1;
            if let (Some(seq), Some(r)) = (feed.seq(&packets[k].payload), feed.recovery()) {
                r.published(seq, &packets[k].payload);
            }
        }
        out.clear();
        feed.encode(e.line, payload, &mut out);
        senders[li].send(&out)?;
        lines[li].sent += 1;
        recovery_sent += poll_recovery(feed)?;
    }
    debug_assert!(interrupted || (lines[0].sent, lines[1].sent) == (planned[0], planned[1]));
    Ok(Summary {
        lines,
        packets: packets.len() as u64,
        skipped: plan.capture.skipped,
        feed: feed.name(),
        elapsed: start.elapsed(),
        interrupted,
        recovery_sent: feed.recovery().map(|_| recovery_sent),
        definitions_sent: None,
    })
}

/// Plans and plays a run. With [`SimConfig::recovery`], the feed's recovery server is opened first
/// ([`Feed::open_recovery`]), sees every published packet, is polled between sends and keeps serving for
/// `linger_ms` after the last one.
pub fn run(cfg: &SimConfig, feed: &mut dyn Feed, shutdown: &AtomicBool) -> Result<Summary, SimError> {
    let p = plan(cfg, feed)?;
    play_with_recovery(cfg, p, feed, shutdown)
}

/// As [`run`], over a capture already in memory ([`plan_capture`]; `cfg.pcap` only names the source).
pub fn run_capture(
    cfg: &SimConfig,
    capture: Capture,
    group: [SocketAddrV4; 2],
    feed: &mut dyn Feed,
    shutdown: &AtomicBool,
) -> Result<Summary, SimError> {
    check_config(cfg)?;
    let p = plan_capture(cfg, feed, capture, group);
    play_with_recovery(cfg, p, feed, shutdown)
}

fn play_with_recovery(
    cfg: &SimConfig,
    p: Plan,
    feed: &mut dyn Feed,
    shutdown: &AtomicBool,
) -> Result<Summary, SimError> {
    let mut servers: Vec<Box<dyn RecoveryServer>> = Vec::new();
    let mut linger_ms = 0;
    if let Some(rc) = &cfg.recovery {
        servers.push(feed.open_recovery(&RecoveryConfig { multicast: cfg.multicast, ..*rc })?);
        linger_ms = rc.linger_ms;
    }
    let mut definitions_sent = None;
    if let Some(dc) = &cfg.definitions {
        let l = DefinitionLoop::open(dc, cfg.multicast)?;
        definitions_sent = Some(l.packets_sent());
        servers.push(Box::new(l));
        linger_ms = linger_ms.max(feed::DEFAULT_LINGER_MS);
    }
    if servers.is_empty() {
        return play(p, cfg.speed, feed, shutdown);
    }
    let server: Box<dyn RecoveryServer> =
        if servers.len() == 1 { servers.pop().expect("one") } else { Box::new(feed::Servers(servers)) };
    let mut with = feed::WithRecovery { feed, server };
    let mut summary = play(p, cfg.speed, &mut with, shutdown)?;
    let lingered = linger(&mut with, Duration::from_millis(linger_ms), shutdown)?;
    let definitions = definitions_sent.map(|n| n.load(Ordering::Relaxed));
    summary.recovery_sent = summary
        .recovery_sent
        .map(|n| (n + lingered).saturating_sub(definitions.unwrap_or(0)))
        .filter(|_| cfg.recovery.is_some());
    summary.definitions_sent = definitions;
    Ok(summary)
}
