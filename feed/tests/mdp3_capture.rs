//! The bundled CME MDP 3.0 capture (data/cme-mdp3-sbe-v8-pcap-20160927/): read, decoded per feed and arbitrated
//! A+B, replayed into price-level books; every reference value of that folder's README. Then bad input.

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddrV4;

use mdfan_feed::mdp3::{book_record, stale_record, Event, Mdp3Decoder, Problem, UpdateAction};
use mdfan_feed::pcap::{read_udp_pcapng, UdpPacket};
use mdfan_wire::{flags, Kind, MbpBooks, Side};

const FEED_A: &str = "224.0.31.11:14320";
const FEED_B: &str = "224.0.32.11:15320";
const FIRST_SEQ: u32 = 17_347_815;
const LAST_SEQ: u32 = 17_352_814;
const PACKETS_PER_FEED: usize = 5_000;
#[path = "support/mdp3.rs"]
mod mdp3_ref;
use mdp3_ref::{reference_asks, reference_bids, SECURITY};

fn capture() -> Vec<UdpPacket> {
    let cap = read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    assert_eq!((cap.packets.len(), cap.skipped_not_udp, cap.skipped_blocks), (10_000, 0, 0));
    cap.packets
}

fn feed(packets: &[UdpPacket], group: &str) -> Vec<UdpPacket> {
    let dst: SocketAddrV4 = group.parse().unwrap();
    packets.iter().filter(|p| p.dst == dst).cloned().collect()
}

#[derive(Default)]
struct Replay {
    seqs: Vec<u32>,
    msgs_per_packet: [u64; 6],
    book_securities: BTreeSet<i32>,
    trade_entries: u64,
    trade_contracts: i64,
    last_flagged: u64,
    book_records: u64,
}

fn replay(packets: &[&UdpPacket]) -> (Mdp3Decoder, MbpBooks, Replay) {
    let mut dec = Mdp3Decoder::default();
    let mut books = MbpBooks::with_capacity(64);
    let mut r = Replay::default();
    for p in packets {
        let mut book_err = None;
        let out = dec
            .decode_packet(&p.payload, p.ts_ns, |info, ev| {
                let rec = match ev {
                    Event::Book(e) => {
                        r.book_securities.insert(e.security_id);
                        Some(book_record(info, e))
                    }
                    Event::RptSeqGap { security_id, expected, got, .. } => {
                        Some(stale_record(info, *security_id, *expected, *got))
                    }
                    Event::TradeSummary(t) => {
                        r.trade_entries += 1;
                        r.trade_contracts += i64::from(t.size);
                        None
                    }
                    _ => None,
                };
                if let Some(rec) = rec {
                    r.book_records += 1;
                    r.last_flagged += u64::from(rec.is_last());
                    if let Err(e) = books.apply(&rec) {
                        book_err = Some(e);
                    }
                }
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(book_err, None, "packet {}", out.header.msg_seq_num);
        assert!(!out.stale && out.gap.is_none(), "packet {}: {out:?}", out.header.msg_seq_num);
        r.seqs.push(out.header.msg_seq_num);
        r.msgs_per_packet[usize::from(out.messages).min(5)] += 1;
    }
    (dec, books, r)
}

fn assert_reference(dec: &Mdp3Decoder, books: &MbpBooks, r: &Replay) {
    let s = dec.stats();
    assert_eq!((s.packets, s.bad_packets, s.stale_packets, s.packet_gaps), (5_000, 0, 0, 0));
    assert_eq!((r.seqs.first(), r.seqs.last()), (Some(&FIRST_SEQ), Some(&LAST_SEQ)));
    assert!(r.seqs.windows(2).all(|w| w[1] == w[0] + 1), "MsgSeqNum contiguous");
    // README "Messages"
    assert_eq!(s.messages, 5_299);
    let templates: Vec<(usize, u64)> = s.templates.iter().copied().enumerate().filter(|(_, n)| *n > 0).collect();
    assert_eq!(templates, [(12, 6), (30, 99), (32, 4_898), (35, 179), (37, 57), (42, 60)]);
    assert_eq!(s.unknown_templates, 0);
    assert_eq!(r.msgs_per_packet, [0, 4_741, 227, 26, 4, 2]);
    // README "Book entries": New, Change, Delete; bid, offer; 39 securities; no order-ID entries in 32
    assert_eq!(s.book_actions, [2_293, 2_285, 1_270, 0, 0, 0]);
    assert_eq!(s.book_entry_types, [3_110, 2_738, 0, 0, 0]);
    assert_eq!(r.book_securities.len(), 39);
    assert_eq!(r.book_records, 5_848);
    // README "Trade summaries": 63 entries, 218 contracts, 166 order-ID entries (all from template 42)
    assert_eq!((r.trade_entries, r.trade_contracts, s.order_id_entries), (63, 218, 166));
    // README "Per-instrument sequence": 6,195 entries, 0 discontinuities
    assert_eq!((s.rpt_seq_entries, s.rpt_seq_gaps, s.rpt_seq_stale), (6_195, 0, 0));
    assert!(r.last_flagged > 0, "some book entries end an event");
    // README "Book replay": 174969's top 5 per side, and all 10 levels filled by the end
    let b = books.get(SECURITY).expect("174969 has a book");
    assert_eq!(b.top(Side::Bid, 5), reference_bids());
    assert_eq!(b.top(Side::Ask, 5), reference_asks());
    assert!(b.top(Side::Bid, 10).iter().chain(b.top(Side::Ask, 10)).all(Option::is_some));
    assert_eq!(b.bbo(), (reference_bids()[0], reference_asks()[0]));
    assert!(!b.is_stale());
    assert_eq!(books.len(), 39);
}

#[test]
fn feed_a_alone_matches_the_readme() {
    let a = feed(&capture(), FEED_A);
    assert_eq!(a.len(), PACKETS_PER_FEED);
    assert!(a.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns), "no step back within a line");
    let (dec, books, r) = replay(&a.iter().collect::<Vec<_>>());
    assert_reference(&dec, &books, &r);
}

#[test]
fn feed_b_alone_matches_the_readme() {
    let b = feed(&capture(), FEED_B);
    assert_eq!(b.len(), PACKETS_PER_FEED);
    let (dec, books, r) = replay(&b.iter().collect::<Vec<_>>());
    assert_reference(&dec, &books, &r);
}

#[test]
fn a_and_b_arbitrated_first_copy_wins_and_match_the_readme() {
    let all = capture();
    let a: SocketAddrV4 = FEED_A.parse().unwrap();
    // README: by integer capture time, B first for 4,289 pairs and A for 711; in file order B 3,744, A 1,256.
    fn first_by<'a>(order: &[&'a UdpPacket], a: SocketAddrV4) -> (Vec<&'a UdpPacket>, u32, u32) {
        let (mut seen, mut a_first, mut kept, mut dups) = (HashSet::new(), 0, Vec::new(), 0);
        for p in order {
            let seq = u32::from_le_bytes(p.payload[..4].try_into().unwrap());
            if seen.insert(seq) {
                a_first += u32::from(p.dst == a);
                kept.push(*p);
            } else {
                dups += 1;
            }
        }
        (kept, a_first, dups)
    }
    let file_order: Vec<&UdpPacket> = all.iter().collect();
    let (_, a_first_in_file, _) = first_by(&file_order, a);
    assert_eq!(a_first_in_file, 1_256);
    let mut time_order = file_order.clone();
    time_order.sort_by_key(|p| p.ts_ns); // stable; no A/B ties by the README
    assert_eq!(all.windows(2).filter(|w| w[1].ts_ns < w[0].ts_ns).count(), 612, "README: 612 steps back");
    let (kept, a_first, dups) = first_by(&time_order, a);
    assert_eq!((a_first, kept.len() - a_first as usize, dups), (711, 4_289, 5_000));
    let (dec, books, r) = replay(&kept);
    assert_reference(&dec, &books, &r);
    // Every A/B pair is byte-identical, so the arbitrated books equal one line's.
    let (_, books_a, _) = replay(&feed(&all, FEED_A).iter().collect::<Vec<_>>());
    assert!(books.iter().zip(books_a.iter()).all(|(x, y)| x == y) && books.len() == books_a.len());
    // The decoder itself refuses the second copies: feeding all 10,000 in time order gives the same result.
    let mut dec2 = Mdp3Decoder::default();
    for p in &time_order {
        dec2.decode_packet(&p.payload, p.ts_ns, |_, _| {}).unwrap();
    }
    assert_eq!((dec2.stats().packets, dec2.stats().stale_packets, dec2.stats().packet_gaps), (5_000, 5_000, 0));
    assert_eq!(dec2.stats().rpt_seq_entries, 6_195);
}

#[test]
fn records_carry_the_documented_fields() {
    let a = feed(&capture(), FEED_A);
    let mut dec = Mdp3Decoder::default();
    let mut first = None;
    for p in &a {
        dec.decode_packet(&p.payload, p.ts_ns, |info, ev| {
            if let (None, Event::Book(e)) = (&first, ev) {
                first = Some((*info, *e, book_record(info, e), p.ts_ns));
            }
        })
        .unwrap();
    }
    let (info, e, r, ts) = first.unwrap();
    assert_eq!(r.instrument_id as i32, e.security_id);
    assert_eq!(
        (r.venue_seq(), r.venue_index()),
        (u64::from(info.msg_seq_num), 0),
        "the packet; the channel numbers records"
    );
    assert_eq!(r.ts_recv_ns, ts);
    assert_eq!(r.ts_event_ns, info.transact_time_ns);
    assert_eq!(r.level, e.price_level);
    assert_eq!(Some(r.price_e9), e.price_e9);
    assert_eq!(r.size as i32, e.size.unwrap());
    assert_eq!(r.order_id as i32, e.orders.unwrap());
    let want = match e.action {
        UpdateAction::New => Kind::LevelNew,
        UpdateAction::Change | UpdateAction::Overlay => Kind::LevelChange,
        UpdateAction::Delete => Kind::LevelDelete,
        UpdateAction::DeleteThru => Kind::LevelDeleteThru,
        UpdateAction::DeleteFrom => Kind::LevelDeleteFrom,
    };
    assert_eq!(r.kind(), Some(want));
    assert!(r.flags & flags::MBP != 0 && r.flags & flags::IMPLIED == 0);
    assert!(info.transact_time_ns > 1_474_000_000_000_000_000 && r.seq == 0);
}

// ---- bad input ----

/// A real packet of feed A with one template 32 message (and its sequence number).
fn book_packet() -> Vec<u8> {
    let a = feed(&capture(), FEED_A);
    a.into_iter()
        .map(|p| p.payload)
        .find(|p| {
            p.len() > 12 + 10 && u16::from_le_bytes([p[16], p[17]]) == 32 && {
                let size = u16::from_le_bytes([p[12], p[13]]) as usize;
                12 + size == p.len()
            }
        })
        .expect("a single-message book packet")
}

fn decode(payload: &[u8]) -> Result<u64, mdfan_feed::mdp3::DecodeError> {
    let mut n = 0;
    Mdp3Decoder::default().decode_packet(payload, 0, |_, _| n += 1).map(|_| n)
}

#[test]
fn a_truncated_packet_is_refused_naming_packet_message_template_and_field() {
    let p = book_packet();
    let seq = u32::from_le_bytes(p[..4].try_into().unwrap());
    let e = decode(&p[..p.len() - 1]).unwrap_err();
    assert_eq!((e.msg_seq_num, e.message, e.template_id, e.field), (Some(seq), 1, Some(32), "MsgSize"));
    assert_eq!(e.problem, Problem::Truncated { need: p.len() - 12, have: p.len() - 13 });
    let text = e.to_string();
    assert!(text.contains(&format!("MsgSeqNum {seq}")) && text.contains("MDIncrementalRefreshBook32"), "{text}");
    // every cut: an error or (at a message boundary) a clean decode, never a panic
    let mut errors = 0;
    for cut in 0..p.len() {
        if decode(&p[..cut]).is_err() {
            errors += 1;
        }
    }
    assert_eq!(errors, p.len() - 1, "only the bare 12-byte header decodes (to no message)");
    // and the decoder's state is untouched by a refused packet: the next good one is no gap
    let mut dec = Mdp3Decoder::default();
    assert!(dec.decode_packet(&p[..p.len() - 1], 0, |_, _| panic!("nothing delivered")).is_err());
    let out = dec.decode_packet(&p, 0, |_, _| {}).unwrap();
    assert_eq!((out.gap, dec.stats().bad_packets, dec.stats().packets), (None, 1, 1));
}

#[test]
fn a_bad_block_length_is_refused() {
    let p = book_packet();
    // group NoMDEntries blockLength (after packet header 12, MsgSize 2, SBE header 8, root 11)
    let mut g = p.clone();
    let at = 12 + 2 + 8 + 11;
    assert_eq!(u16::from_le_bytes([g[at], g[at + 1]]), 32, "schema v8 entry size");
    g[at..at + 2].copy_from_slice(&20u16.to_le_bytes());
    let e = decode(&g).unwrap_err();
    assert_eq!((e.field, e.problem), ("NoMDEntries", Problem::BlockLengthTooShort { got: 20, min: 27 }));
    // root blockLength below TransactTime + MatchEventIndicator
    let mut r = p.clone();
    r[14..16].copy_from_slice(&5u16.to_le_bytes());
    let e = decode(&r).unwrap_err();
    assert_eq!((e.field, e.problem), ("blockLength", Problem::BlockLengthTooShort { got: 5, min: 9 }));
    // a larger group blockLength than the message holds: truncated
    let mut big = p.clone();
    big[at..at + 2].copy_from_slice(&200u16.to_le_bytes());
    assert!(matches!(decode(&big).unwrap_err().problem, Problem::Truncated { .. }));
    // a bad enum value names the entry
    let mut act = p;
    act[at + 3 + 25] = 9;
    let e = decode(&act).unwrap_err();
    assert_eq!((e.field, e.entry, e.problem), ("NoMDEntries.MDUpdateAction", 1, Problem::BadValue { value: 9 }));
}

/// A packet: header, then messages (template, blockLength, body).
fn packet(seq: u32, msgs: &[(u16, u16, &[u8])]) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend_from_slice(&7u64.to_le_bytes());
    for (template, block_length, body) in msgs {
        p.extend_from_slice(&(10 + body.len() as u16).to_le_bytes());
        for v in [*block_length, *template, 1, 8] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p.extend_from_slice(body);
    }
    p
}

#[test]
fn unknown_templates_are_skipped_by_size_and_counted() {
    let p = packet(5, &[(99, 3, &[1, 2, 3, 4, 5]), (12, 0, &[])]);
    let mut dec = Mdp3Decoder::default();
    let mut events = Vec::new();
    let out = dec.decode_packet(&p, 0, |_, ev| events.push(*ev)).unwrap();
    assert_eq!(events, [Event::Unknown { template_id: 99, msg_size: 15 }, Event::Heartbeat]);
    assert_eq!((out.messages, dec.stats().unknown_templates, dec.stats().templates[12]), (2, 1, 1));
    // a wrong schemaId is an error, not an unknown template
    let mut bad = p.clone();
    bad[18..20].copy_from_slice(&2u16.to_le_bytes());
    assert_eq!(decode(&bad).unwrap_err().problem, Problem::SchemaId { got: 2 });
    // MsgSize below the headers
    let mut small = p;
    small[12..14].copy_from_slice(&4u16.to_le_bytes());
    assert_eq!(decode(&small).unwrap_err().problem, Problem::MsgSizeTooSmall { got: 4 });
}

#[test]
fn a_packet_shorter_than_its_header_is_refused() {
    for len in 0..12 {
        let e = decode(&[0xAB; 11][..len]).unwrap_err();
        assert_eq!((e.msg_seq_num, e.message, e.template_id), (None, 0, None));
        assert_eq!(e.problem, Problem::Truncated { need: 12, have: len });
    }
    let mut dec = Mdp3Decoder::default();
    assert!(dec.decode_packet(&[1, 2, 3], 0, |_, _| {}).is_err());
    assert_eq!((dec.stats().bad_packets, dec.stats().packets), (1, 0));
}

#[test]
fn sequence_gaps_are_reported_per_packet_and_per_instrument() {
    // two template 37 messages for security 9: RptSeq 1, then 4 (gap), then 2 (stale); packets 10, 12, 11
    let vol = |rpt: u32| {
        let mut b = vec![0u8; 9];
        b.extend_from_slice(&16u16.to_le_bytes());
        b.push(1);
        let mut e = 100i32.to_le_bytes().to_vec();
        e.extend_from_slice(&9i32.to_le_bytes());
        e.extend_from_slice(&rpt.to_le_bytes());
        e.extend_from_slice(&[0, b'e', 0, 0]);
        b.extend_from_slice(&e);
        b
    };
    let mut dec = Mdp3Decoder::default();
    let mut events = Vec::new();
    for (seq, rpt) in [(10, 1), (12, 4), (11, 2), (13, 2)] {
        let out = dec.decode_packet(&packet(seq, &[(37, 9, &vol(rpt))]), 0, |_, ev| events.push(*ev)).unwrap();
        match seq {
            12 => assert_eq!(out.gap, Some((11, 12))),
            11 => assert!(out.stale),
            _ => assert_eq!(out.gap, None),
        }
    }
    let gaps: Vec<_> = events.iter().filter(|e| matches!(e, Event::RptSeqGap { .. })).collect();
    assert_eq!(gaps, [&Event::RptSeqGap { security_id: 9, expected: 2, got: 4, book_index: 0 }]);
    let s = dec.stats();
    assert_eq!((s.packets, s.packet_gaps, s.packets_missed, s.stale_packets), (3, 1, 1, 1));
    assert_eq!((s.rpt_seq_entries, s.rpt_seq_gaps, s.rpt_seq_stale), (3, 1, 1));
    // the stale record makes the price-level book stale
    let info = mdfan_feed::mdp3::MessageInfo {
        msg_seq_num: 12,
        sending_time_ns: 0,
        ts_recv_ns: 0,
        message: 1,
        template_id: 37,
        transact_time_ns: 0,
        match_event_indicator: 0,
    };
    let mut books = MbpBooks::with_capacity(1);
    books.apply(&stale_record(&info, 9, 2, 4)).unwrap();
    assert!(books.get(9).unwrap().is_stale());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn random_headers_after_a_valid_packet_header_never_panic(
            msgs in proptest::collection::vec((any::<u16>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..80)), 0..4)
        ) {
            let m: Vec<(u16, u16, &[u8])> = msgs.iter().map(|(t, b, body)| (*t % 48, *b % 64, body.as_slice())).collect();
            let _ = decode(&packet(1, &m));
        }
    }

    #[test]
    fn every_single_byte_change_of_a_real_packet_decodes_or_is_refused() {
        let p = book_packet();
        for i in 0..p.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut q = p.clone();
                q[i] = v;
                let _ = decode(&q);
            }
        }
    }
}

#[test]
fn a_cut_or_garbage_capture_is_refused_naming_the_file_and_block() {
    use mdfan_feed::pcap::{parse_udp_pcapng, CaptureError};
    let bytes = std::fs::read(mdp3_ref::capture_path()).unwrap();
    let name = std::path::Path::new("cut.pcapng");
    match parse_udp_pcapng(&bytes[..bytes.len() - 10], name) {
        // section header, interface description, then 10,000 packets: the last one is cut
        Err(CaptureError::Block { block, path, .. }) => assert_eq!((block, path.as_path()), (10_002, name)),
        other => panic!("{other:?}"),
    }
    let e = parse_udp_pcapng(&[0x42; 64], name).unwrap_err();
    assert!(matches!(e, CaptureError::Block { block: 1, .. }), "{e}");
    assert!(e.to_string().starts_with("capture cut.pcapng: pcapng block 1:"), "{e}");
    // every cut of the first 4 KiB: an error or fewer packets, never a panic
    for cut in 0..4096 {
        if let Ok(c) = parse_udp_pcapng(&bytes[..cut], name) {
            assert!(c.packets.len() < 30);
        }
    }
    assert!(matches!(read_udp_pcapng(std::path::Path::new("/nonexistent/x.pcapng")), Err(CaptureError::Open { .. })));
}
