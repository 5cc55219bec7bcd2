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
//!   MoldUDP64 retransmission (requests by sequence number and count, answered from the packets sent). Not
//!   implemented yet for MDP 3.0: `Mdp3::recovery` is `None`, and this is the extension point.

use mdfan_lines::{Line, Mdp3Seq, SeqExtractor};

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
}

/// CME Globex MDP 3.0 incremental feed: `MsgSeqNum` is payload bytes 0..4 (u32 LE); packets pass through.
/// Market recovery (the snapshot channel) is the documented extension point: [`Feed::recovery`] is `None`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mdp3;

impl Feed for Mdp3 {
    fn name(&self) -> &'static str {
        "mdp3"
    }

    fn seq(&self, payload: &[u8]) -> Option<u64> {
        Mdp3Seq.seq(payload)
    }
}
