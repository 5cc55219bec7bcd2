//! What a feed adds to the simulator: [`Feed`], with the CME MDP 3.0 implementation [`Mdp3`].
//!
//! The player is feed-agnostic: it reads UDP payloads from a capture, impairs and sends them. A feed tells it
//! three things:
//! - the packet sequence number ([`Feed::seq`], the same [`SeqExtractor`] the line receiver arbitrates with), used
//!   for `--drop-seqs` and by the recovery server;
//! - how to turn a captured payload into the datagram to send ([`Feed::encode`]): a capture of the feed itself
//!   passes through; a feed synthesised from another source (for Nasdaq ITCH: messages framed into MoldUDP64
//!   packets with session, sequence number and message count) encodes here;
//! - the feed's recovery channel ([`Feed::recovery`], a [`RecoveryServer`]): CME MDP 3.0 market recovery (a
//!   snapshot channel cycling the book state of every instrument, built from the simulator's own state), or
//!   MoldUDP64 retransmission (requests by sequence number and count, answered from the packets sent). A feed
//!   opens it with [`Feed::open_recovery`] when [`crate::SimConfig::recovery`] asks; [`crate::run`] hands it
//!   every published packet and polls it. MDP 3.0: [`crate::snapshot::Mdp3SnapshotServer`].

use std::net::SocketAddrV4;

use mdfan_lines::{Line, Mdp3Seq, SeqExtractor};

use crate::snapshot::Mdp3SnapshotServer;
use crate::SimError;

/// Snapshot loop period by default, ms.
pub const DEFAULT_INTERVAL_MS: u64 = 20;
/// How long the recovery server keeps serving after the capture's last packet by default, ms.
pub const DEFAULT_LINGER_MS: u64 = 1_000;

/// The recovery server a run opens ([`crate::SimConfig::recovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// MDP 3.0: where the snapshot feed is sent, a multicast group (sent on 127.0.0.1, TTL 0) or a loopback
    /// address. MoldUDP64: where the retransmission server listens, a loopback address only.
    pub addr: SocketAddrV4,
    /// Period of the snapshot loop, ms (at least 1; unused by MoldUDP64).
    pub interval_ms: u64,
    /// How long it keeps serving after the capture's last packet was sent, ms.
    pub linger_ms: u64,
    /// Keep the state but send nothing: a recovery channel that never answers (tests).
    pub silent: bool,
    /// Where multicast goes ([`crate::run`] sets it from [`crate::SimConfig::multicast`]).
    pub multicast: crate::sender::MulticastScope,
}

impl RecoveryConfig {
    /// Sending to `addr` with the default interval and linger, not silent.
    pub fn new(addr: SocketAddrV4) -> Self {
        RecoveryConfig {
            addr,
            interval_ms: DEFAULT_INTERVAL_MS,
            linger_ms: DEFAULT_LINGER_MS,
            silent: false,
            multicast: crate::sender::MulticastScope::Loopback,
        }
    }
}

/// Answers a feed's recovery requests from the simulator's own state (snapshot channel or retransmissions).
pub trait RecoveryServer {
    /// The packet `seq` was published (called once per packet, before impairment, in line-A order).
    fn published(&mut self, seq: u64, payload: &[u8]);
    /// Does due recovery work (send a snapshot cycle, answer requests) without blocking; returns the datagrams
    /// it sent. Called between sends and while the player waits for the next one.
    fn poll(&mut self, now_ns: u64) -> std::io::Result<usize>;
}

/// What a feed adds to the simulator. See the [module docs](self).
pub trait Feed {
    /// Short name for logs and the summary ("mdp3").
    fn name(&self) -> &'static str;

    /// The packet's sequence number, or `None` when the payload cannot carry one.
    fn seq(&self, payload: &[u8]) -> Option<u64>;

    /// Sequence numbers the packet carries (`seq..seq + seq_count`): 1 by default (one seq per packet);
    /// MoldUDP64: the message count (0 for a heartbeat or end of session). `--drop-seqs` drops a packet when
    /// any of its sequence numbers is in the range.
    fn seq_count(&self, payload: &[u8]) -> u64 {
        let _ = payload;
        1
    }

    /// Writes the datagram to send on `line` for one captured payload into `out` (cleared by the caller). The
    /// default passes the payload through.
    fn encode(&mut self, line: Line, payload: &[u8], out: &mut Vec<u8>) {
        let _ = line;
        out.extend_from_slice(payload);
    }

    /// The feed's recovery server, if it has one.
    fn recovery(&mut self) -> Option<&mut dyn RecoveryServer> {
        None
    }

    /// Changes the capture before the run is planned (every line, the recovery server's view included). The
    /// default leaves it as read.
    fn rewrite_capture(&self, capture: &mut crate::Capture) {
        let _ = capture;
    }

    /// Opens the feed's recovery server as `cfg` asks ([`crate::run`] calls it when
    /// [`crate::SimConfig::recovery`] is set, and then serves it through [`Feed::recovery`]).
    ///
    /// # Errors
    /// [`SimError::NoRecovery`] by default (the feed has none); the server's own error otherwise.
    fn open_recovery(&self, cfg: &RecoveryConfig) -> Result<Box<dyn RecoveryServer>, SimError> {
        let _ = cfg;
        Err(SimError::NoRecovery(self.name()))
    }
}

/// CME Globex MDP 3.0 incremental feed: `MsgSeqNum` is payload bytes 0..4 (u32 LE); packets pass through,
/// their `SecurityID`s moved by `security_id_offset` (a capture played as a second channel with other ids;
/// [`mdfan_feed::mdp3::map_security_ids`]; a packet that does not decode is played as captured). Market recovery:
/// [`Feed::open_recovery`] opens the snapshot feed ([`Mdp3SnapshotServer`]), built from the packets as played.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mdp3 {
    /// Added to every `SecurityID` of the capture (0: as captured); an id it would take past Int32 is left as
    /// captured.
    pub security_id_offset: i32,
}

impl Feed for Mdp3 {
    fn name(&self) -> &'static str {
        "mdp3"
    }

    fn seq(&self, payload: &[u8]) -> Option<u64> {
        Mdp3Seq.seq(payload)
    }

    fn rewrite_capture(&self, capture: &mut crate::Capture) {
        if self.security_id_offset == 0 {
            return;
        }
        let offset = self.security_id_offset;
        for p in &mut capture.packets {
            let _ = mdfan_feed::mdp3::map_security_ids(&mut p.payload, |id| {
                id.checked_add(offset).filter(|moved| (0..i32::MAX).contains(moved)).unwrap_or(id)
            });
        }
    }

    fn open_recovery(&self, cfg: &RecoveryConfig) -> Result<Box<dyn RecoveryServer>, SimError> {
        Ok(Box::new(Mdp3SnapshotServer::open(cfg)?))
    }
}

/// Several recovery servers served as one (the snapshot feed and a definition loop): each sees every packet and
/// is polled in turn.
pub(crate) struct Servers(pub(crate) Vec<Box<dyn RecoveryServer>>);

impl RecoveryServer for Servers {
    fn published(&mut self, seq: u64, payload: &[u8]) {
        for s in &mut self.0 {
            s.published(seq, payload);
        }
    }

    fn poll(&mut self, now_ns: u64) -> std::io::Result<usize> {
        let mut sent = 0;
        for s in &mut self.0 {
            sent += s.poll(now_ns)?;
        }
        Ok(sent)
    }
}

/// A feed with the recovery server [`crate::run`] opened for it.
pub(crate) struct WithRecovery<'a> {
    pub(crate) feed: &'a mut dyn Feed,
    pub(crate) server: Box<dyn RecoveryServer>,
}

impl Feed for WithRecovery<'_> {
    fn name(&self) -> &'static str {
        self.feed.name()
    }

    fn seq(&self, payload: &[u8]) -> Option<u64> {
        self.feed.seq(payload)
    }

    fn seq_count(&self, payload: &[u8]) -> u64 {
        self.feed.seq_count(payload)
    }

    fn encode(&mut self, line: Line, payload: &[u8], out: &mut Vec<u8>) {
        self.feed.encode(line, payload, out);
    }

    fn recovery(&mut self) -> Option<&mut dyn RecoveryServer> {
        Some(self.server.as_mut())
    }

    fn rewrite_capture(&self, capture: &mut crate::Capture) {
        self.feed.rewrite_capture(capture);
    }
}
