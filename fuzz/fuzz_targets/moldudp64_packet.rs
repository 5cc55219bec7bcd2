//! MoldUDP64 downstream packets from an untrusted network: the input is a sequence of UDP payloads (each a 2-byte
//! big-endian length, then the payload), each parsed by `feed::moldudp64::Packet` and fed to a
//! `mold_session::SessionReceiver` on line A or B (the low bit of the length's high byte). Nothing may panic.
//! Invariants: a packet that parses has exactly `messages_in_packet` blocks, contiguous from its header, each
//! numbered from its sequence number; the receiver hands out messages in strictly increasing sequence order,
//! each at most once, and never a message inside a hole it reported given up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_feed::mold_session::{Origin, SessionConfig, SessionEvent, SessionReceiver};
use mdfan_feed::moldudp64::Packet;

fuzz_target!(|data: &[u8]| {
    let mut rx =
        SessionReceiver::new(SessionConfig { window_messages: 64, requests: false, ..SessionConfig::default() });
    let mut last_delivered: Option<u64> = None;
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut at = 0usize;
    let mut now_ns = 1_000u64;
    while at + 2 <= data.len() {
        let len = usize::from(u16::from_be_bytes([data[at] & 0x7f, data[at + 1]]));
        let origin = if data[at] & 0x80 == 0 { Origin::LineA } else { Origin::LineB };
        let payload = &data[at + 2..(at + 2 + len).min(data.len())];
        at += 2 + len;
        if let Ok(p) = Packet::parse(payload) {
            let blocks: Vec<_> = p.messages().collect();
            assert_eq!(blocks.len(), usize::from(p.messages_in_packet()));
            let mut expect_at = 20;
            for (i, b) in blocks.iter().enumerate() {
                assert_eq!(b.offset, expect_at, "blocks are contiguous");
                assert_eq!(b.sequence_number, p.sequence_number + i as u64);
                expect_at += 2 + b.message.len();
            }
            assert_eq!(expect_at, payload.len(), "the blocks fill the packet");
        }
        now_ns += 1_000_000;
        let mut check = |e: SessionEvent<'_>| match e {
            SessionEvent::Message { seq, .. } => {
                if let Some(prev) = last_delivered {
                    assert!(seq > prev, "message {seq} after {prev}: out of order or twice");
                }
                assert!(!holes.iter().any(|&(f, l)| (f..=l).contains(&seq)), "message {seq} inside a given-up hole");
                last_delivered = Some(seq);
            }
            SessionEvent::Hole { first, last } => {
                assert!(first <= last);
                if let Some(prev) = last_delivered {
                    assert!(first > prev, "hole {first}..={last} behind message {prev}");
                }
                holes.push((first, last));
            }
            _ => {}
        };
        let _ = rx.on_packet(payload, origin, now_ns, &mut check);
        rx.tick(now_ns, &mut check);
    }
});
