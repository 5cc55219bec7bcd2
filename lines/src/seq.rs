//! What arbitration needs from a feed: the sequence number of a packet.

/// Reads a feed's packet sequence number from a UDP payload.
///
/// A feed plugs into the line receiver (and into `mdfan-feedsim`) through this trait. Return `None` for a
/// payload too short to carry one, or whose framing shows it is not one whole packet of the feed (a copy cut
/// short or mangled on one line); the receiver counts it as refused and drops it before arbitration, so the
/// other line's copy of that seq wins instead of being dropped as a duplicate of a copy nobody can decode.
pub trait SeqExtractor {
    /// The packet's sequence number, or `None` when the payload cannot carry one or is not a whole packet.
    fn seq(&self, payload: &[u8]) -> Option<u64>;
}

/// CME Globex MDP 3.0: the binary packet header starts with `MsgSeqNum`, a little-endian u32 (payload bytes
/// 0..4), followed by `SendingTime` (u64 ns); then messages, each led by its `MsgSize` (u16, little-endian, the
/// whole message with these 2 bytes, at least 10 with the 8-byte SBE message header). A payload whose messages'
/// `MsgSize`s do not end exactly at its end is not a whole packet: `None` (the walk costs a few ns a packet).
/// Source: CME "MDP 3.0 - Packet Structure Overview" (binary packet header, message size).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mdp3Seq;

/// Binary packet header bytes: `MsgSeqNum` u32 + `SendingTime` u64.
const MDP3_PACKET_HEADER_BYTES: usize = 12;
/// The least `MsgSize`: the size field itself and the SBE message header.
const MDP3_MIN_MSG_BYTES: usize = 2 + 8;

impl SeqExtractor for Mdp3Seq {
    fn seq(&self, payload: &[u8]) -> Option<u64> {
        let b: [u8; 4] = payload.get(0..4)?.try_into().ok()?;
        let mut pos = MDP3_PACKET_HEADER_BYTES;
        while pos < payload.len() {
            let size = usize::from(u16::from_le_bytes(payload.get(pos..pos + 2)?.try_into().ok()?));
            if size < MDP3_MIN_MSG_BYTES {
                return None;
            }
            pos += size;
        }
        (pos == payload.len()).then_some(u64::from(u32::from_le_bytes(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet header (`MsgSeqNum` 17,347,815, a SendingTime) and messages of the given `MsgSize`s, each
    /// filled with its size's low byte after the size field.
    fn packet(sizes: &[u16]) -> Vec<u8> {
        let mut p = [0xe7, 0xb4, 0x08, 0x01, 1, 2, 3, 4, 5, 6, 7, 8].to_vec();
        for &s in sizes {
            p.extend_from_slice(&s.to_le_bytes());
            p.extend(std::iter::repeat_n(s as u8, usize::from(s) - 2));
        }
        p
    }

    #[test]
    fn mdp3_seq_is_first_four_bytes_little_endian() {
        assert_eq!(Mdp3Seq.seq(&packet(&[])), Some(17_347_815), "a header alone (no message) is whole");
        assert_eq!(Mdp3Seq.seq(&packet(&[10, 96, 43])), Some(17_347_815));
        assert_eq!(Mdp3Seq.seq(&[0xe7, 0xb4, 0x08, 0x01, 0xff]), None, "a header cut short");
        assert_eq!(Mdp3Seq.seq(&[1, 2, 3]), None);
    }

    #[test]
    fn an_mdp3_packet_whose_msg_sizes_do_not_end_at_its_end_is_refused() {
        let whole = packet(&[10, 96, 43]);
        assert_eq!(Mdp3Seq.seq(&whole[..whole.len() - 3]), None, "cut inside the last message");
        assert_eq!(Mdp3Seq.seq(&whole[..whole.len() - 44]), None, "cut inside the last MsgSize");
        assert_eq!(Mdp3Seq.seq(&[whole.as_slice(), &[0]].concat()), None, "a stray byte after the last message");
        assert_eq!(Mdp3Seq.seq(&packet(&[10, 9])), None, "MsgSize 9 is below the SBE header's");
        let mut zero = packet(&[10, 96]);
        zero[22..24].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(Mdp3Seq.seq(&zero), None, "MsgSize 0 would never move on");
    }
}
