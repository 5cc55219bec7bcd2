//! CME MDP 3.0 market recovery without sockets: SnapshotFullRefresh38 decoding (schema v8 layout, blockLength,
//! refused input naming the field) and `Mdp3Channel`'s rules for applying or ignoring a snapshot.

use mdfan_feed::mdp3::{
    decode_snapshot_packet, write_packet_header, write_snapshot_message, BookEntryType, DecodeError, Event,
    Mdp3Decoder, Problem, SnapshotEntry, SnapshotRefresh, LOCAL_MKT_DATE_NULL,
};
use mdfan_feed::mdp3_channel::{Mdp3Channel, RecoveryStatus};
use mdfan_wire::{flags, BookUpdate, Kind, MbpBooks, MbpLevel, Side};

const SECURITY: i32 = 9;

fn root(security_id: i32, last_msg_seq_num_processed: u32, rpt_seq: u32) -> SnapshotRefresh {
    SnapshotRefresh {
        last_msg_seq_num_processed,
        tot_num_reports: 2,
        security_id,
        rpt_seq,
        transact_time_ns: 1_474_999_999_000_000_001,
        last_update_time_ns: 1_474_000_000_000_000_000,
        trade_date: 17_072,
        trading_status: 17,
        high_limit_price_e9: Some(7_700_000_000_000),
        low_limit_price_e9: None,
        max_price_variation_e9: Some(10_000_000_000),
        entries: 0,
    }
}

fn level(entry_type: u8, price_level: i8, px_tenths: i64, size: i32, orders: i32) -> SnapshotEntry {
    SnapshotEntry {
        security_id: 0,
        price_e9: Some(px_tenths * 100_000_000),
        size: Some(size),
        orders: Some(orders),
        price_level: Some(price_level),
        trading_reference_date: LOCAL_MKT_DATE_NULL,
        open_close_settl_flag: 255,
        settl_price_type: 0,
        entry_type,
        book: None,
        last_book_entry: false,
    }
}

/// Bid 7580.5 x 8 (5) at 1, 7579.5 x 13 (8) at 3 (2 unknown); ask 7581.5 x 19 (9) at 1; a trade; implied bid.
fn entries() -> Vec<SnapshotEntry> {
    let mut trade = level(b'2', 0, 75_810, 3, 0);
    trade.price_level = None;
    vec![
        level(b'0', 1, 75_805, 8, 5),
        level(b'0', 3, 75_795, 13, 8),
        level(b'1', 1, 75_815, 19, 9),
        level(b'E', 1, 75_800, 2, 1),
        trade,
    ]
}

fn snapshot_packet(seq: u32, msgs: &[(SnapshotRefresh, Vec<SnapshotEntry>)]) -> Vec<u8> {
    let mut p = Vec::new();
    write_packet_header(&mut p, seq, 42);
    for (s, e) in msgs {
        write_snapshot_message(&mut p, s, e);
    }
    p
}

fn decode(p: &[u8]) -> Result<Vec<Event>, DecodeError> {
    let mut events = Vec::new();
    decode_snapshot_packet(p, 7, |_, ev| events.push(*ev))?;
    Ok(events)
}

#[test]
fn template_38_decodes_every_field_by_the_v8_layout() {
    let p = snapshot_packet(3, &[(root(SECURITY, 1_000, 77), entries())]);
    // MsgSize 2 + SBE header 8 + root 59 + groupSize 3 + 5 x 22
    assert_eq!(p.len(), 12 + 2 + 8 + 59 + 3 + 5 * 22);
    assert_eq!(u16::from_le_bytes([p[14], p[15]]), 59, "root blockLength");
    let events = decode(&p).unwrap();
    assert_eq!(events.len(), 6);
    assert_eq!(events[0], Event::Snapshot(SnapshotRefresh { entries: 5, ..root(SECURITY, 1_000, 77) }));
    let Event::SnapshotEntry(e) = events[1] else { panic!("{:?}", events[1]) };
    assert_eq!(
        e,
        SnapshotEntry { security_id: SECURITY, book: Some(BookEntryType::Bid), ..level(b'0', 1, 75_805, 8, 5) }
    );
    let books: Vec<(Option<BookEntryType>, bool)> = events[1..]
        .iter()
        .map(|e| match e {
            Event::SnapshotEntry(e) => (e.book, e.last_book_entry),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        books,
        [
            (Some(BookEntryType::Bid), false),
            (Some(BookEntryType::Bid), false),
            (Some(BookEntryType::Offer), false),
            (Some(BookEntryType::ImpliedBid), true),
            (None, false),
        ]
    );
    let Event::SnapshotEntry(trade) = events[5] else { panic!() };
    assert_eq!((trade.entry_type, trade.price_level, trade.size), (b'2', None, Some(3)));
    // The incremental decoder delivers the same events (no RptSeq check) and counts the template.
    let mut dec = Mdp3Decoder::default();
    let mut same = Vec::new();
    dec.decode_packet(&p, 7, |_, ev| same.push(*ev)).unwrap();
    assert_eq!((same, dec.stats().templates[38], dec.stats().rpt_seq_entries), (events, 1, 0));
}

#[test]
fn a_longer_block_length_is_skipped_as_a_newer_schema_would_send_it() {
    let p = snapshot_packet(3, &[(root(SECURITY, 1_000, 77), entries()[..1].to_vec())]);
    // root 59 -> 63 and entry 22 -> 25: 4 + 3 extra bytes inserted where they belong
    let mut q = p[..12 + 10 + 59].to_vec();
    q.extend_from_slice(&[0xAA; 4]);
    q.extend_from_slice(&25u16.to_le_bytes());
    q.push(1);
    q.extend_from_slice(&p[12 + 10 + 59 + 3..]);
    q.extend_from_slice(&[0xBB; 3]);
    let size = (q.len() - 12) as u16;
    q[12..14].copy_from_slice(&size.to_le_bytes());
    q[14..16].copy_from_slice(&63u16.to_le_bytes());
    assert_eq!(decode(&q).unwrap(), decode(&p).unwrap());
}

#[test]
fn bad_template_38_input_is_refused_naming_the_field() {
    let p = snapshot_packet(3, &[(root(SECURITY, 1_000, 77), entries())]);
    let check = |q: &[u8], field: &str, entry: u16, problem: Problem| {
        let e = decode(q).unwrap_err();
        assert_eq!((e.msg_seq_num, e.message, e.template_id), (Some(3), 1, Some(38)), "{e}");
        assert_eq!((e.field, e.entry, e.problem), (field, entry, problem), "{e}");
        assert!(e.to_string().contains("SnapshotFullRefresh38"), "{e}");
        // nothing delivered, whichever decoder
        let mut dec = Mdp3Decoder::default();
        assert!(dec.decode_packet(q, 0, |_, _| panic!("nothing delivered")).is_err());
        assert!(decode_snapshot_packet(q, 0, |_, _| panic!("nothing delivered")).is_err());
    };
    // root blockLength below LastMsgSeqNumProcessed..MaxPriceVariation
    let mut q = p.clone();
    q[14..16].copy_from_slice(&58u16.to_le_bytes());
    check(&q, "blockLength", 0, Problem::BlockLengthTooShort { got: 58, min: 59 });
    // NoMDEntries blockLength below MDEntryPx..MDEntryType
    let g = 12 + 10 + 59;
    let mut q = p.clone();
    q[g..g + 2].copy_from_slice(&21u16.to_le_bytes());
    check(&q, "NoMDEntries", 0, Problem::BlockLengthTooShort { got: 21, min: 22 });
    // a group that says 6 entries where 5 are: truncated (MsgSize says where the message ends)
    let mut q = p.clone();
    q[g + 2] = 6;
    check(&q, "NoMDEntries", 0, Problem::Truncated { need: 3 + 6 * 22, have: 3 + 5 * 22 });
    // the packet cut inside the group: the message is truncated
    let e = decode(&p[..p.len() - 5]).unwrap_err();
    assert_eq!((e.field, e.problem), ("MsgSize", Problem::Truncated { need: p.len() - 12, have: p.len() - 17 }));
    // MDEntryType outside the schema enum, in entry 2
    let mut q = p.clone();
    q[g + 3 + 22 + 21] = b'Z';
    check(&q, "NoMDEntries.MDEntryType", 2, Problem::BadValue { value: i64::from(b'Z') });
    // a book entry without a position (null, 0 or negative MDPriceLevel)
    for bad in [127u8, 0, 0xFF] {
        let mut q = p.clone();
        q[g + 3 + 2 * 22 + 16] = bad;
        check(&q, "NoMDEntries.MDPriceLevel", 3, Problem::BadValue { value: i64::from(bad as i8) });
    }
    // a negative SecurityID
    let mut q = p.clone();
    q[22 + 8..22 + 12].copy_from_slice(&(-4i32).to_le_bytes());
    check(&q, "SecurityID", 0, Problem::BadValue { value: -4 });
    // a price mantissa that overflows 1e-9 units
    let mut q = p.clone();
    q[22 + 35..22 + 43].copy_from_slice(&(i64::MAX / 10).to_le_bytes());
    check(&q, "HighLimitPrice", 0, Problem::PriceOverflow { mantissa: i64::MAX / 10 });
    // bytes after the group
    let mut q = p.clone();
    q.push(0);
    let size = (q.len() - 12) as u16;
    q[12..14].copy_from_slice(&size.to_le_bytes());
    check(&q, "MsgSize", 0, Problem::TrailingBytes { left: 1 });
}

/// One MDIncrementalRefreshBook32 packet (schema v8): one entry of `SECURITY`.
fn book_packet(seq: u32, rpt_seq: u32, action: u8, side: u8, level: u8, px_tenths: i64, size: i32) -> Vec<u8> {
    book_packet_of(seq, &[(rpt_seq, action, side, level, px_tenths, size)])
}

/// One MDIncrementalRefreshBook32 packet (schema v8) of one message whose entries, all of `SECURITY`, are
/// (`RptSeq`, `MDUpdateAction`, `MDEntryType`, `MDPriceLevel`, price in tenths, size).
fn book_packet_of(seq: u32, entries: &[(u32, u8, u8, u8, i64, i32)]) -> Vec<u8> {
    let mut p = Vec::new();
    write_packet_header(&mut p, seq, 1);
    let mut body = 5u64.to_le_bytes().to_vec();
    body.extend_from_slice(&[0x80, 0, 0]); // MatchEventIndicator EndOfEvent, 2 padding bytes: root 11
    body.extend_from_slice(&32u16.to_le_bytes());
    body.push(entries.len() as u8);
    for &(rpt_seq, action, side, level, px_tenths, size) in entries {
        body.extend_from_slice(&(px_tenths * 1_000_000).to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        body.extend_from_slice(&SECURITY.to_le_bytes());
        body.extend_from_slice(&rpt_seq.to_le_bytes());
        body.extend_from_slice(&1i32.to_le_bytes());
        body.extend_from_slice(&[level, action, side, 0, 0, 0, 0, 0]);
    }
    body.extend_from_slice(&24u16.to_le_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // 5 padding bytes, numInGroup 0
    p.extend_from_slice(&(10 + body.len() as u16).to_le_bytes());
    for v in [11u16, 32, 1, 8] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&body);
    p
}

/// An entry's venue position is its index among the packet's book entries whatever the channel recovered: after
/// a snapshot at `RptSeq` 3, a packet whose first entry (`RptSeq` 3) is already in the snapshot delivers its
/// second at index 1, as a channel that lost nothing does. (A hot-hot pair compares its two publishers' copies
/// by position: counting only the delivered entries once made two different entries one position, seen as a
/// divergence in `hot_hot::two_live_mdp3_publishers_with_a_hole_each`.)
#[test]
fn an_entry_keeps_its_position_in_the_packet_when_an_entry_before_it_is_already_in_the_snapshot() {
    let packet = book_packet_of(13, &[(3, 1, b'0', 1, 75_700, 1), (4, 1, b'0', 1, 75_806, 4)]);
    let run = |ch: &mut Mdp3Channel, p: &[u8]| {
        let mut records = Vec::new();
        ch.on_packet(p, 500, &mut |r: &BookUpdate| records.push(*r));
        records
    };
    let mut whole = Mdp3Channel::with_capacity(4);
    let all = run(&mut whole, &packet);
    let positions: Vec<(u64, u64)> = all.iter().map(|r| (r.venue_seq(), r.venue_pos & 0xFFFF)).collect();
    assert_eq!(positions, [(13, 0), (13, 1)]);
    let mut recovered = Mdp3Channel::with_capacity(4);
    run(&mut recovered, &book_packet(10, 1, 0, b'0', 1, 75_700, 1));
    recovered.on_lost_packets(11, 12, 600, &mut |_| {});
    let snap = snapshot_packet(1, &[(root(SECURITY, 12, 3), entries())]);
    assert_eq!(recovered.on_snapshot_packet(&snap, 700, &mut |_| {}), 5);
    assert!(!recovered.is_stale(SECURITY));
    let after = run(&mut recovered, &packet);
    assert_eq!(after, [all[1]], "the entry RptSeq 4 alone, at index 1");
    assert_eq!(recovered.decoder().stats().rpt_seq_stale, 1);
}

#[test]
fn the_channel_applies_a_snapshot_that_covers_the_loss_and_ignores_older_ones() {
    let mut ch = Mdp3Channel::with_capacity(4);
    let mut books = MbpBooks::with_capacity(4);
    let mut records: Vec<BookUpdate> = Vec::new();
    let feed = |ch: &mut Mdp3Channel, books: &mut MbpBooks, records: &mut Vec<BookUpdate>, p: &[u8]| {
        let mut out = |r: &BookUpdate| {
            books.apply(r).unwrap();
            records.push(*r);
        };
        if p[16..18] == [38, 0] {
            ch.on_snapshot_packet(p, 500, &mut out)
        } else {
            ch.on_packet(p, 500, &mut out)
        }
    };
    feed(&mut ch, &mut books, &mut records, &book_packet(10, 1, 0, b'0', 1, 75_700, 1));
    assert!(!ch.needs_recovery());
    assert_eq!(ch.recovery_status(1_000), RecoveryStatus::Idle);
    // a snapshot of a good security: ignored
    let snap = |seq: u32, last: u32, rpt: u32| snapshot_packet(seq, &[(root(SECURITY, last, rpt), entries())]);
    assert_eq!(feed(&mut ch, &mut books, &mut records, &snap(1, 10, 1)), 0);
    // packets 11..=12 lost on both lines: stale until a snapshot covering 12
    ch.on_lost_packets(11, 12, 600, &mut |r| {
        books.apply(r).unwrap();
    });
    assert!(ch.needs_recovery() && ch.is_stale(SECURITY) && books.get(9).unwrap().is_stale());
    assert_eq!(
        ch.recovery_status(600 + 1_000),
        RecoveryStatus::Waiting { stale: 1, since_ns: 600, snapshot_packets: 0 }
    );
    // LastMsgSeqNumProcessed 11 does not cover the loss; RptSeq 0 is older than the 1 the channel took
    assert_eq!(feed(&mut ch, &mut books, &mut records, &snap(2, 11, 5)), 0);
    assert_eq!(feed(&mut ch, &mut books, &mut records, &snap(3, 12, 0)), 0);
    assert!(ch.is_stale(SECURITY));
    // this one: Clear, then the 4 book levels (the trade entry is no level)
    records.clear();
    assert_eq!(feed(&mut ch, &mut books, &mut records, &snap(4, 12, 3)), 5);
    let kinds: Vec<(Kind, u8)> = records.iter().map(|r| (r.kind().unwrap(), r.flags)).collect();
    let (lvl, last) = (flags::MBP | flags::SNAPSHOT, flags::MBP | flags::SNAPSHOT | flags::IMPLIED | flags::LAST);
    assert_eq!(
        kinds,
        [
            (Kind::Clear, lvl),
            (Kind::LevelNew, lvl),
            (Kind::LevelNew, lvl),
            (Kind::LevelNew, lvl),
            (Kind::LevelNew, last)
        ]
    );
    assert!(records.iter().all(|r| (r.instrument_id, r.venue_seq(), r.ts_recv_ns) == (9, 12, 500)));
    assert_eq!(records[0].order_id, 3, "the Clear carries the snapshot's RptSeq");
    // Good again; the loop names 2 reports (TotNumReports) and covered 1: the channel's hole stays open for a
    // security not seen yet, and the snapshot feed is still needed.
    assert!(!ch.is_stale(SECURITY) && ch.needs_recovery());
    assert_eq!(ch.channel_hole(), Some((11, 12)));
    let b = books.get(9).unwrap();
    let l = |tenths: i64, size: u32, orders: u32| Some(MbpLevel { price_e9: tenths * 100_000_000, size, orders });
    assert!(!b.is_stale());
    assert_eq!(b.top(Side::Bid, 3), [l(75_805, 8, 5), None, l(75_795, 13, 8)]);
    assert_eq!(b.top(Side::Ask, 2), [l(75_815, 19, 9), None]);
    assert_eq!(b.implied_top(Side::Bid, 1), [l(75_800, 2, 1)]);
    // incrementals already in the snapshot (RptSeq <= 3) are dropped; 4 applies, in order
    records.clear();
    assert_eq!(feed(&mut ch, &mut books, &mut records, &book_packet(13, 3, 1, b'0', 1, 1, 1)), 0);
    assert_eq!(feed(&mut ch, &mut books, &mut records, &book_packet(14, 4, 1, b'0', 1, 75_806, 4)), 1);
    assert_eq!(
        books.get(9).unwrap().level(Side::Bid, 1),
        Some(MbpLevel { price_e9: 7_580_600_000_000, size: 4, orders: 1 })
    );
    // a second snapshot of the now good security: ignored
    assert_eq!(feed(&mut ch, &mut books, &mut records, &snap(5, 14, 4)), 0);
    let c = ch.counters();
    assert_eq!(
        (c.snapshot_packets, c.snapshots, c.snapshots_applied, c.snapshots_ignored, c.snapshots_older),
        (5, 5, 1, 4, 2)
    );
    assert_eq!((c.recovered, c.stale_marked, c.stale_now, c.snapshot_level_records), (1, 1, 0, 4));
    assert_eq!((c.rpt_seq_stale_records, ch.decoder().stats().rpt_seq_stale), (0, 1));
    assert_eq!(ch.recovery_status(u64::MAX), RecoveryStatus::Idle);
    // a refused snapshot packet is counted and kept
    let mut bad = snap(6, 14, 4);
    bad[14..16].copy_from_slice(&3u16.to_le_bytes());
    assert_eq!(feed(&mut ch, &mut books, &mut records, &bad), 0);
    assert_eq!(ch.counters().bad_snapshot_packets, 1);
    assert_eq!(ch.last_error().unwrap().field, "blockLength");
}

#[test]
fn a_recovery_that_outlasts_the_timeout_is_reported_once_and_stays_stale() {
    let mut ch = Mdp3Channel::with_capacity(4);
    ch.set_recovery_timeout_ns(1_000);
    ch.on_packet(&book_packet(10, 1, 0, b'1', 1, 75_700, 1), 100, &mut |_| {});
    // an RptSeq jump marks the security stale until a snapshot covering that packet
    let mut stale = Vec::new();
    ch.on_packet(&book_packet(11, 3, 1, b'1', 1, 75_700, 2), 200, &mut |r| stale.push(*r));
    assert_eq!(stale[0].kind(), Some(Kind::InstrumentStale));
    assert!(ch.needs_recovery());
    assert_eq!(ch.recovery_status(1_200), RecoveryStatus::Waiting { stale: 1, since_ns: 200, snapshot_packets: 0 });
    let timed_out = RecoveryStatus::TimedOut { stale: 1, since_ns: 200, snapshot_packets: 0 };
    assert_eq!(ch.recovery_status(1_201), timed_out);
    assert_eq!(ch.recovery_status(5_000), timed_out);
    assert_eq!(ch.counters().recovery_timeouts, 1, "once per episode");
    assert!(ch.is_stale(SECURITY));
    // covering packet 10 only is not enough for a stale mark made by packet 11
    let p = snapshot_packet(1, &[(root(SECURITY, 10, 3), entries())]);
    assert_eq!(ch.on_snapshot_packet(&p, 6_000, &mut |_| {}), 0);
    let p = snapshot_packet(2, &[(root(SECURITY, 11, 3), entries())]);
    assert_eq!(ch.on_snapshot_packet(&p, 6_000, &mut |_| {}), 5);
    assert_eq!(ch.recovery_status(9_000), RecoveryStatus::Idle);
}

#[test]
fn a_msg_seq_num_reset_makes_every_book_stale_until_a_snapshot_of_the_new_sequence_covers_it() {
    let mut ch = Mdp3Channel::with_capacity(4);
    let mut books = MbpBooks::with_capacity(4);
    let feed = |ch: &mut Mdp3Channel, books: &mut MbpBooks, p: &[u8]| {
        let mut out = |r: &BookUpdate| books.apply(r).unwrap();
        let n =
            if p[16..18] == [38, 0] { ch.on_snapshot_packet(p, 500, &mut out) } else { ch.on_packet(p, 500, &mut out) };
        (n, books.get(9).map(|b| b.is_stale()))
    };
    assert_eq!(feed(&mut ch, &mut books, &book_packet(500, 40, 0, b'0', 1, 75_700, 1)), (1, Some(false)));
    // Without a reset, MsgSeqNum 1 after 500 is a stale packet to the decoder: dropped.
    assert_eq!(feed(&mut ch, &mut books, &book_packet(1, 1, 0, b'1', 1, 75_710, 2)), (0, Some(false)));
    assert_eq!(ch.decoder().stats().stale_packets, 1);
    // The arbiter re-based the lines at 1: every book stale, the decoder takes the new sequence.
    let mut marks = Vec::new();
    assert_eq!(ch.on_seq_reset(1, 600, &mut |r| marks.push(*r)), 1);
    books.apply(&marks[0]).unwrap();
    assert_eq!(
        (marks[0].kind(), marks[0].order_id, marks[0].flags),
        (Some(Kind::InstrumentStale), 1, flags::MAYBE_BAD_BOOK)
    );
    assert!(ch.is_stale(SECURITY) && ch.needs_recovery() && books.get(9).unwrap().is_stale());
    assert_eq!(feed(&mut ch, &mut books, &book_packet(1, 1, 0, b'1', 1, 75_710, 2)), (1, Some(true)));
    // The snapshot feed's loop still on the old sequence (LastMsgSeqNumProcessed 500, RptSeq 40: "past" the
    // new first packet by number only) is no recovery: ignored, the book stays stale.
    let snap = |seq: u32, last: u32, rpt: u32| snapshot_packet(seq, &[(root(SECURITY, last, rpt), entries())]);
    assert_eq!(feed(&mut ch, &mut books, &snap(90, 500, 40)), (0, Some(true)));
    assert_eq!(ch.counters().snapshots_old_sequence, 1);
    // A snapshot that has not processed the new sequence's first packet does not cover it; one that has does.
    assert_eq!(feed(&mut ch, &mut books, &snap(1, 0, 1)), (0, Some(true)));
    assert_eq!(feed(&mut ch, &mut books, &snap(2, 1, 1)), (5, Some(false)));
    let c = ch.counters();
    assert_eq!((c.seq_resets, c.recovered, c.stale_now, c.snapshots_applied), (1, 1, 0, 1));
    assert_eq!((c.snapshots_ignored, c.snapshots_old_sequence), (2, 1));
    // The loop names 2 reports and covered one: the hole at 1 stays open for a security not seen yet.
    assert_eq!(ch.channel_hole(), Some((1, 1)));
    // The second sequence goes to 50, then a second reset (to 1 again): the second sequence's loop (50) is the
    // old one now, not the first's (500), and is ignored; the third's covers the book.
    assert_eq!(feed(&mut ch, &mut books, &book_packet(50, 2, 0, b'1', 1, 75_720, 3)), (1, Some(false)));
    let mut marks = Vec::new();
    assert_eq!(ch.on_seq_reset(1, 700, &mut |r| marks.push(*r)), 1);
    books.apply(&marks[0]).unwrap();
    assert_eq!(feed(&mut ch, &mut books, &book_packet(1, 1, 0, b'1', 1, 75_730, 4)), (1, Some(true)));
    assert_eq!(feed(&mut ch, &mut books, &snap(3, 50, 2)), (0, Some(true)));
    assert_eq!(ch.counters().snapshots_old_sequence, 2);
    assert_eq!(feed(&mut ch, &mut books, &snap(4, 1, 1)), (5, Some(false)));
}
