//! What arbitration needs from a feed: the sequence number of a packet.

/// Reads a feed's packet sequence number from a UDP payload.
///
/// A feed plugs into the line receiver (and into `mdfan-feedsim`) through this trait. Return `None` for a
/// payload too short to carry one; the receiver counts and drops it.
pub trait SeqExtractor {
    /// The packet's sequence number, or `None` when the payload cannot carry one.
    fn seq(&self, payload: &[u8]) -> Option<u64>;
}

/// CME Globex MDP 3.0: the binary packet header starts with `MsgSeqNum`, a little-endian u32 (payload bytes
/// 0..4), followed by `SendingTime` (u64 ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mdp3Seq;

impl SeqExtractor for Mdp3Seq {
    fn seq(&self, payload: &[u8]) -> Option<u64> {
        let b: [u8; 4] = payload.get(0..4)?.try_into().ok()?;
        Some(u64::from(u32::from_le_bytes(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdp3_seq_is_first_four_bytes_little_endian() {
        assert_eq!(Mdp3Seq.seq(&[0xe7, 0xb4, 0x08, 0x01, 0xff]), Some(17_347_815));
        assert_eq!(Mdp3Seq.seq(&[1, 2, 3]), None);
    }
}
