//! The ITCH 5.0 encoder and MoldUDP64 framing on the bundled ESH4 file: decoded back with the feed crate's ITCH
//! decoder and normaliser into `wire::Books`, the stream gives the data README's final book.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;
mod support;

use mdfan_feed::itch::eastern_midnight_ns;
use mdfan_feed::moldudp64::{Packet, PacketKind, END_OF_SESSION};
use mdfan_feedsim::moldudp64::{synthesize, Session, SynthOptions, DEFAULT_MAX_PAYLOAD_BYTES};
use mdfan_wire::{Level, Side};

use support::itch_book::ItchBook;

fn lv(l: (i64, u64, u32)) -> Level {
    Level { price_e9: l.0, size: l.1, orders: l.2 }
}

#[test]
fn esh4_as_itch_over_moldudp64_replays_to_the_reference_book() {
    let opts = SynthOptions::new(Session::new("ESH4TEST").unwrap());
    let s = synthesize(&esh4::main_file(), &opts).unwrap();
    // Session date: the UTC date of the first ts_recv, 2023-12-25; US Eastern midnight is 05:00 UTC.
    assert_eq!(s.midnight_ns, eastern_midnight_ns(2023, 12, 25).unwrap());
    assert_eq!(s.midnight_ns, 1_703_480_400_000_000_000);
    assert_eq!(s.stats.records, esh4::RECORDS);
    // S O, one R (ESH4 at locate 1), ..., S C.
    assert_eq!((s.stats.of(b'S'), s.stats.of(b'R')), (2, 1));
    // 7 fills (side N, records 9,660..=9,670, at the reopen) of orders the file never added; the 8,725 snapshot
    // records are stamped before the session's midnight (ts clamped to 0); one T without a side (record 9,651).
    assert_eq!((s.stats.price_unrepresentable, s.stats.no_locate, s.stats.unknown_order), (0, 0, 7));
    assert_eq!((s.stats.ts_clamped, s.stats.skipped), (8_725, 1));
    // Per type: A 29,299, D 12,670, E 6,364, P 2,972, U 9,904, X 1,362 (62,574 messages in all).
    let per_type = [b'A', b'D', b'E', b'P', b'U', b'X'].map(|t| s.stats.of(t));
    assert_eq!(per_type, [29_299, 12_670, 6_364, 2_972, 9_904, 1_362]);
    assert_eq!(s.last_seq, 62_574);

    let mut book = ItchBook::new(s.midnight_ns);
    let mut next = 1u64;
    for (i, p) in s.packets.iter().enumerate() {
        assert!(p.payload.len() <= DEFAULT_MAX_PAYLOAD_BYTES);
        let q = Packet::parse(&p.payload).unwrap();
        assert_eq!(q.session_str(), "ESH4TEST");
        assert_eq!(q.sequence_number, next, "packet {i}");
        if i + 1 == s.packets.len() {
            assert_eq!((q.kind(), q.message_count), (PacketKind::EndOfSession, END_OF_SESSION));
        } else {
            assert_ne!(q.kind(), PacketKind::EndOfSession);
        }
        next = q.next_sequence_number();
        book.packet(&p.payload);
    }
    assert_eq!(next - 1, s.last_seq);
    assert_eq!(book.messages, s.stats.messages());
    assert_eq!(book.norm.symbol(1), Some("ESH4"));
    assert_eq!(book.norm.stats().unknown_references(), 0);
    assert_eq!(book.norm.stats().too_many_shares, 0);

    let b = book.books.get(1).expect("ESH4 is locate 1");
    let want = &esh4::CHECKPOINTS[4];
    assert_eq!(b.order_count(), want.orders);
    assert_eq!((b.level_count(Side::Bid), b.level_count(Side::Ask)), (want.levels_bid, want.levels_ask));
    assert_eq!(b.top(Side::Bid, 10), esh4::TOP_BIDS.map(lv));
    assert_eq!(b.top(Side::Ask, 10), esh4::TOP_ASKS.map(lv));
    assert_eq!(book.norm.resting_orders(), 11_217);
    let heartbeats = s.packets.iter().filter(|p| p.payload[18..20] == [0, 0]).count();
    // One per second of silence: nearly all in the pause between the snapshot and the 22:00 UTC reopen.
    assert_eq!((s.packets.len(), heartbeats), (128_643, 83_126));
}
