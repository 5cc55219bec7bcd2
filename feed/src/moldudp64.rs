//! MoldUDP64 downstream packets (sans I/O): header and message blocks, validated whole before any message is
//! given out.
//!
//! Source: Nasdaq "MoldUDP64 Protocol Specification" version 1.00 (section "Downstream Packets": header, message
//! blocks; "heartbeat" and "end of session" message counts). The messages themselves are TotalView-ITCH 5.0
//! here ([`crate::itch`]).
//!
//! ## Downstream packet (one UDP payload), big-endian
//!
//! | offset | size | field | |
//! |---:|---:|---|---|
//! | 0 | 10 | session | ASCII, the MoldUDP64 session |
//! | 10 | 8 | sequence number u64 | of the first message in the packet (for a heartbeat: of the next message expected) |
//! | 18 | 2 | message count u16 | messages in the packet; 0 = heartbeat; `0xFFFF` = end of session (no messages) |
//! | 20 | .. | message blocks: message length u16, then that many bytes, `message count` times | |
//!
//! A packet is refused ([`MoldError`], naming the sequence number, the message (1-based) and the field) if the
//! header is short, a block runs past the payload, bytes are left after the last block, or the last message's
//! sequence number would not fit in a u64 (a forged header: no session gets there). Message `i` (0-based)
//! has sequence number `sequence number + i`; the next packet is expected at `sequence number + message count`.
//! Parsing borrows the payload and never allocates or panics.

/// Session (10) + sequence number (8) + message count (2).
pub const HEADER_BYTES: usize = 20;
/// Message count of an end-of-session packet.
pub const END_OF_SESSION: u16 = 0xFFFF;

/// What a packet is, from its message count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// One or more messages.
    Messages,
    /// Message count 0: the session is alive; the sequence number is the next one expected.
    Heartbeat,
    /// Message count `0xFFFF`: the session has ended.
    EndOfSession,
}

/// Why a downstream packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MoldError {
    /// Shorter than the 20-byte header.
    #[error("MoldUDP64 packet of {len} bytes: shorter than the {HEADER_BYTES}-byte header")]
    ShortHeader {
        /// Payload length.
        len: usize,
    },
    /// A message block's length or body runs past the payload.
    #[error("MoldUDP64 packet seq {sequence_number}, message {message} of {message_count}, field {field}: runs past the payload at byte {offset}")]
    Truncated {
        /// The packet's sequence number.
        sequence_number: u64,
        /// The packet's message count.
        message_count: u16,
        /// 1-based message in the packet.
        message: u16,
        /// `"message length"` or `"message"`.
        field: &'static str,
        /// Byte offset in the payload where the field starts.
        offset: usize,
    },
    /// Bytes remain after the last message block (or after a heartbeat / end-of-session header).
    #[error(
        "MoldUDP64 packet seq {sequence_number}, message count {message_count}: {extra} bytes after the last message"
    )]
    TrailingBytes {
        /// The packet's sequence number.
        sequence_number: u64,
        /// The packet's message count.
        message_count: u16,
        /// Bytes left over.
        extra: usize,
    },
    /// The sequence number of the packet's last message (sequence number + message count - 1) overflows a u64.
    #[error("MoldUDP64 packet seq {sequence_number}, message count {message_count}, field sequence number: the last message's number overflows a u64")]
    SequenceOverflow {
        /// The packet's sequence number.
        sequence_number: u64,
        /// The packet's message count.
        message_count: u16,
    },
}

/// A validated downstream packet, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The session, 10 ASCII bytes.
    pub session: [u8; 10],
    /// Sequence number of the first message (of the next expected, for a heartbeat).
    pub sequence_number: u64,
    /// The message count field as sent (0 heartbeat, `0xFFFF` end of session).
    pub message_count: u16,
    blocks: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Parses and validates one UDP payload (module docs).
    ///
    /// # Errors
    /// [`MoldError`].
    pub fn parse(payload: &'a [u8]) -> Result<Packet<'a>, MoldError> {
        let (Some(session), Some(seq), Some(count), Some(blocks)) = (
            payload.get(0..10).and_then(|s| <[u8; 10]>::try_from(s).ok()),
            payload.get(10..18).and_then(|s| <[u8; 8]>::try_from(s).ok()),
            payload.get(18..20).and_then(|s| <[u8; 2]>::try_from(s).ok()),
            payload.get(HEADER_BYTES..),
        ) else {
            return Err(MoldError::ShortHeader { len: payload.len() });
        };
        let p = Packet {
            session,
            sequence_number: u64::from_be_bytes(seq),
            message_count: u16::from_be_bytes(count),
            blocks,
        };
        let n = p.messages_in_packet();
        if n > 0 && p.sequence_number.checked_add(u64::from(n) - 1).is_none() {
            return Err(MoldError::SequenceOverflow {
                sequence_number: p.sequence_number,
                message_count: p.message_count,
            });
        }
        let mut at = 0usize;
        for i in 0..n {
            let trunc = |field, offset| MoldError::Truncated {
                sequence_number: p.sequence_number,
                message_count: p.message_count,
                message: i + 1,
                field,
                offset: HEADER_BYTES + offset,
            };
            let len = blocks
                .get(at..at + 2)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                .ok_or(trunc("message length", at))?;
            if blocks.len() < at + 2 + len {
                return Err(trunc("message", at + 2));
            }
            at += 2 + len;
        }
        if at != blocks.len() {
            return Err(MoldError::TrailingBytes {
                sequence_number: p.sequence_number,
                message_count: p.message_count,
                extra: blocks.len() - at,
            });
        }
        Ok(p)
    }

    /// Messages, heartbeat or end of session.
    pub fn kind(&self) -> PacketKind {
        match self.message_count {
            0 => PacketKind::Heartbeat,
            END_OF_SESSION => PacketKind::EndOfSession,
            _ => PacketKind::Messages,
        }
    }

    /// Messages the packet carries (0 for a heartbeat or end of session).
    pub fn messages_in_packet(&self) -> u16 {
        if self.message_count == END_OF_SESSION {
            0
        } else {
            self.message_count
        }
    }

    /// The sequence number expected after this packet.
    pub fn next_sequence_number(&self) -> u64 {
        self.sequence_number.saturating_add(u64::from(self.messages_in_packet()))
    }

    /// The session without trailing spaces.
    pub fn session_str(&self) -> &str {
        std::str::from_utf8(&self.session).unwrap_or("").trim_end_matches(' ')
    }

    /// The messages, each with its sequence number and its byte offset (of its length) in the payload.
    pub fn messages(&self) -> Messages<'a> {
        Messages { blocks: self.blocks, at: 0, seq: self.sequence_number, left: self.messages_in_packet() }
    }
}

/// One message of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// The message's sequence number.
    pub sequence_number: u64,
    /// Byte offset of its length field in the UDP payload.
    pub offset: usize,
    /// The message bytes (after the length).
    pub message: &'a [u8],
}

/// The messages of a validated [`Packet`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    blocks: &'a [u8],
    at: usize,
    seq: u64,
    left: u16,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Block<'a>;

    fn next(&mut self) -> Option<Block<'a>> {
        if self.left == 0 {
            return None;
        }
        let b = self.blocks.get(self.at..self.at + 2)?;
        let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
        let message = self.blocks.get(self.at + 2..self.at + 2 + len)?;
        let block = Block { sequence_number: self.seq, offset: HEADER_BYTES + self.at, message };
        self.at += 2 + len;
        self.seq = self.seq.wrapping_add(1);
        self.left -= 1;
        Some(block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(count: u16, blocks: &[&[u8]]) -> Vec<u8> {
        let mut p = b"SESSION001".to_vec();
        p.extend_from_slice(&42u64.to_be_bytes());
        p.extend_from_slice(&count.to_be_bytes());
        for b in blocks {
            p.extend_from_slice(&(b.len() as u16).to_be_bytes());
            p.extend_from_slice(b);
        }
        p
    }

    #[test]
    fn heartbeat_and_end_of_session() {
        let hb = packet(0, &[]);
        let p = Packet::parse(&hb).unwrap();
        assert_eq!((p.kind(), p.next_sequence_number(), p.messages().count()), (PacketKind::Heartbeat, 42, 0));
        let end = packet(END_OF_SESSION, &[]);
        let p = Packet::parse(&end).unwrap();
        assert_eq!((p.kind(), p.next_sequence_number(), p.session_str()), (PacketKind::EndOfSession, 42, "SESSION001"));
    }

    #[test]
    fn blocks_carry_sequence_numbers() {
        let raw = packet(2, &[b"abc", b""]);
        let p = Packet::parse(&raw).unwrap();
        let got: Vec<(u64, usize, &[u8])> = p.messages().map(|b| (b.sequence_number, b.offset, b.message)).collect();
        assert_eq!(got, [(42, 20, &b"abc"[..]), (43, 25, &b""[..])]);
        assert_eq!(p.next_sequence_number(), 44);
    }

    #[test]
    fn bad_packets_are_refused() {
        assert_eq!(Packet::parse(&[0; 19]), Err(MoldError::ShortHeader { len: 19 }));
        let mut raw = packet(2, &[b"abc"]);
        assert_eq!(
            Packet::parse(&raw),
            Err(MoldError::Truncated {
                sequence_number: 42,
                message_count: 2,
                message: 2,
                field: "message length",
                offset: 25
            })
        );
        raw.extend_from_slice(&[0, 9, 1]);
        assert!(matches!(Packet::parse(&raw), Err(MoldError::Truncated { field: "message", .. })));
        let extra = packet(0, &[b"x"]);
        assert_eq!(
            Packet::parse(&extra),
            Err(MoldError::TrailingBytes { sequence_number: 42, message_count: 0, extra: 3 })
        );
    }

    #[test]
    fn a_sequence_number_that_would_overflow_is_refused() {
        // Found by the moldudp64_packet fuzz target: two messages from u64::MAX would number the second 0.
        let mut raw = packet(2, &[b"a", b"b"]);
        raw[10..18].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(
            Packet::parse(&raw),
            Err(MoldError::SequenceOverflow { sequence_number: u64::MAX, message_count: 2 })
        );
        // One message at u64::MAX fits.
        let mut one = packet(1, &[b"a"]);
        one[10..18].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(Packet::parse(&one).map(|p| p.messages().last().map(|b| b.sequence_number)), Ok(Some(u64::MAX)));
    }
}
