//! The live MDP 3.0 path over loopback UDP: `mdfan-feedsim` plays the bundled capture on lines A and B (seeded
//! impairments), `mdfan-lines` receives and arbitrates them, [`Mdp3Channel`] turns packets into records, and
//! `MbpBooks` keeps the books. Reference values: data/cme-mdp3-sbe-v8-pcap-20160927/README.md.
//!
//! The receiver's sockets get a 32 MiB buffer (SO_RCVBUFFORCE as root: CI runs as root), which holds the whole
//! capture, so the kernel drops nothing even when this thread falls behind; gaps are decided by both lines moving
//! past a seq (the timeout is set far out, 10 s, so a host stall cannot decide one).
//!
//! Market recovery: a third socket receives the simulator's snapshot feed (`SimConfig::recovery`). Like a live
//! handler, the test hands its packets to the channel only while `needs_recovery()`; the others are read and
//! dropped, as if the handler had left the feed. A run ends once every datagram sent on the lines and on the
//! snapshot feed (the simulator's count, its linger included) was received.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mdfan_feed::mdp3::{book_record, Event as Mdp3Event, Mdp3Decoder};
use mdfan_feed::mdp3_channel::{Mdp3Channel, RecoveryStatus};
use mdfan_feedsim::{run, Impairment, Mdp3, RecoveryConfig, SimConfig, Summary};
use mdfan_lines::{
    realtime_ns, ArbiterConfig, ArbiterCounters, Event, Line, LineConfig, LineReceiver, LineSocket, Mdp3Seq,
    ReceiverConfig, SeqExtractor,
};
use mdfan_wire::{flags, BookUpdate, Kind, MbpBooks, Side, MBP_DEPTH};

const PACKETS: u64 = 5_000;

#[path = "support/mdp3.rs"]
mod mdp3_ref;
use mdp3_ref::{reference_asks, reference_bids, SECURITY};

struct Outcome {
    summary: Summary,
    arbiter: ArbiterCounters,
    channel: Mdp3Channel,
    books: MbpBooks,
    /// Every InstrumentStale record, in order.
    stale: Vec<BookUpdate>,
    /// Records that were not stamped with a receive time.
    unstamped: u64,
    /// Every record, in order.
    records: Vec<BookUpdate>,
    /// Snapshot feed datagrams received, and of those handed to the channel.
    snapshot_datagrams: u64,
    snapshot_fed: u64,
}

/// Plays the capture onto two unicast loopback lines and runs the handler's path until everything sent arrived.
fn run_live(tweak: impl FnOnce(&mut SimConfig, SocketAddrV4)) -> Outcome {
    let big =
        |port| LineConfig { rcvbuf_bytes: 32 << 20, ..LineConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) };
    let mut rcfg = ReceiverConfig::new(big(0), big(0));
    rcfg.arbiter = ArbiterConfig { gap_timeout_ns: 10_000_000_000, ..ArbiterConfig::default() };
    let mut rx = LineReceiver::open(&rcfg, Mdp3Seq).expect("open the lines");
    let mut snapshot_feed = LineSocket::open(&big(0)).expect("open the snapshot feed's socket");
    assert!(snapshot_feed.rcvbuf_bytes() >= 32 << 20, "snapshot feed: SO_RCVBUF: run as root or raise rmem_max");
    for line in [Line::A, Line::B] {
        let got = rx.socket(line).rcvbuf_bytes();
        assert!(got >= 32 << 20, "line {line:?}: SO_RCVBUF {got} bytes: run as root or raise net.core.rmem_max");
    }
    let mut cfg = SimConfig {
        pcap: mdp3_ref::capture_path(),
        line_a: None,
        line_b: None,
        send_a: rx.socket(Line::A).local_addr(),
        send_b: rx.socket(Line::B).local_addr(),
        speed: 0.0,
        impair_a: Impairment::default(),
        impair_b: Impairment::default(),
        seed: 1,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: None,
    };
    tweak(&mut cfg, snapshot_feed.local_addr());
    let shutdown = AtomicBool::new(false);
    let mut channel = Mdp3Channel::with_capacity(64);
    let mut books = MbpBooks::with_capacity(64);
    let (mut stale, mut unstamped, mut records) = (Vec::new(), 0u64, Vec::new());
    let (mut snapshot_datagrams, mut snapshot_fed) = (0u64, 0u64);
    let mut buf = vec![0u8; 65_536];
    let mut book_errors = Vec::new();
    let summary = std::thread::scope(|s| {
        let mut sim = Some(s.spawn(|| run(&cfg, &mut Mdp3::default(), &shutdown)));
        let mut summary: Option<Summary> = None;
        let start = Instant::now();
        loop {
            let mut to_books = |r: &BookUpdate| {
                records.push(*r);
                if r.kind() == Some(Kind::InstrumentStale) {
                    stale.push(*r);
                }
                if r.ts_recv_ns == 0 {
                    unstamped += 1;
                }
                if let Err(e) = books.apply(r) {
                    book_errors.push(e);
                }
            };
            rx.poll(realtime_ns(), 256, &mut |e| match e {
                Event::Data(d) => {
                    channel.on_packet(d.payload, d.ts_recv_ns, &mut to_books);
                }
                Event::Gap { first, last } => {
                    channel.on_lost_packets(first, last, realtime_ns(), &mut to_books);
                }
                Event::CopyMismatch { seq } => panic!("the copies of {seq} differ"),
                Event::SeqReset { first } => panic!("a reset to {first}"),
            })
            .expect("poll");
            while let Some(d) = snapshot_feed.recv(&mut buf).expect("snapshot feed recv") {
                snapshot_datagrams += 1;
                if channel.needs_recovery() {
                    snapshot_fed += 1;
                    channel.on_snapshot_packet(&buf[..d.len], d.ts_recv_ns, &mut to_books);
                }
            }
            if let Some(h) = sim.take_if(|h| h.is_finished()) {
                summary = Some(h.join().expect("simulator thread").expect("simulator run"));
            }
            if let Some(sm) = &summary {
                let got = rx.line_counters().datagrams;
                // At least (a test may send a stray datagram of its own besides the simulator's).
                if got[0] >= sm.lines[0].sent
                    && got[1] >= sm.lines[1].sent
                    && snapshot_datagrams == sm.recovery_sent.unwrap_or(0)
                {
                    break sm.clone();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "watchdog: received {:?}",
                rx.line_counters().datagrams
            );
            std::thread::yield_now();
        }
    });
    assert!(book_errors.is_empty(), "book errors: {book_errors:?}");
    Outcome {
        summary,
        arbiter: *rx.arbiter_counters(),
        channel,
        books,
        stale,
        unstamped,
        records,
        snapshot_datagrams,
        snapshot_fed,
    }
}

#[test]
fn two_percent_loss_on_each_line_gives_the_reference_book_with_no_gap() {
    let loss = Impairment { loss: 0.02, ..Impairment::default() };
    let o = run_live(|c, _| {
        c.impair_a = loss;
        c.impair_b = loss;
        c.seed = 13;
        // The attack: one 12-byte datagram with MsgSeqNum 0xFFFFFF00 on line A before the feed. It used
        // to set the expected seq (every real packet a duplicate, no book); now it is held and replaced.
        let mut stray = [0u8; 12];
        stray[..4].copy_from_slice(&0xFFFF_FF00u32.to_le_bytes());
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&stray, c.send_a).unwrap();
    });
    let [la, lb] = &o.summary.lines;
    // Seed 13: 100 packets lost on A, 114 on B, none on both (mdfan-feedsim's own test pins these).
    assert_eq!((la.dropped, lb.dropped), (100, 114));
    let a = o.arbiter;
    assert_eq!(a.delivered[0] + a.delivered[1], PACKETS, "every packet once");
    assert_eq!((a.received[0], a.jumps_dropped, a.jumps_taken), (PACKETS - 100 + 1, 1, 0), "the stray, dropped");
    assert_eq!(a.duplicates, PACKETS - 100 - 114, "each loss filled from the other line, every other copy dropped");
    assert_eq!((a.gap_seqs, a.late), (0, 0));
    let c = o.channel.counters();
    assert_eq!((c.packets, c.bad_packets, c.lost_runs, c.rpt_seq_stale_records), (PACKETS, 0, 0, 0));
    assert_eq!(c.level_records, 5_848, "README: every book entry of the capture");
    assert!(o.stale.is_empty());
    assert_eq!(o.unstamped, 0, "every record carries its datagram's receive stamp");
    let b = o.books.get(SECURITY).expect("174969 has a book");
    assert_eq!(b.top(Side::Bid, 5), reference_bids());
    assert_eq!(b.top(Side::Ask, 5), reference_asks());
    assert!(!b.is_stale());
    assert_eq!(o.books.len(), 39);
}

#[test]
fn forty_packets_lost_on_both_lines_mark_every_security_seen_so_far_stale() {
    let (first, last) = (17_350_000u64, 17_350_039u64);
    let o = run_live(|c, _| c.drop_seqs = Some((first, last)));
    let a = o.arbiter;
    assert_eq!((a.gap_seqs, a.gap_events), (40, 1));
    let c = o.channel.counters();
    assert_eq!((c.packets, c.lost_runs, c.lost_packets), (PACKETS - 40, 1, 40));
    // One stale mark per security the channel had carried before the hole, all for that hole; the RptSeq jumps the
    // hole leaves behind follow as per-instrument stale records.
    // Without market recovery the hole stays open: each security first seen after it (10 of 39; two of them,
    // 175376 and 174970, had their first messages in it) is stale on sight, naming the hole.
    let (by_loss, on_sight): (Vec<&BookUpdate>, Vec<&BookUpdate>) =
        o.stale.iter().filter(|r| r.flags & flags::MAYBE_BAD_BOOK != 0).partition(|r| r.venue_seq() == first);
    assert!(!by_loss.is_empty());
    assert_eq!(by_loss.len() as u64, c.lost_stale_records);
    assert!(by_loss.iter().chain(&on_sight).all(|r| (r.order_id, r.size) == (first, 40)));
    assert_eq!((on_sight.len() as u64, c.stale_on_sight, c.stale_marked), (10, 10, 39));
    assert!(on_sight.iter().all(|r| r.venue_seq() > last));
    let born_in_hole = [175_376, 174_970];
    assert!(born_in_hole.iter().all(|id| on_sight.iter().any(|r| r.instrument_id == *id)));
    assert_eq!(o.channel.channel_hole(), Some((first, last)));
    let mut ids: Vec<u32> = by_loss.iter().map(|r| r.instrument_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), by_loss.len(), "each security once");
    assert!(ids.contains(&SECURITY));
    assert_eq!(c.rpt_seq_stale_records, (o.stale.len() - by_loss.len() - on_sight.len()) as u64);
    // No MDP 3.0 stale mark carries LAST: subscribers tell them from ITCH's (order-book) marks so
    // (wire::record, "Stale marks").
    assert!(o.stale.len() > by_loss.len() + on_sight.len(), "RptSeq jumps too");
    assert!(
        o.stale.iter().all(|r| r.flags & flags::LAST == 0),
        "{:?}",
        o.stale.iter().find(|r| r.flags & flags::LAST != 0)
    );
    // Without market recovery the books stay stale: never silently wrong.
    assert!(o.books.get(SECURITY).expect("174969 has a book").is_stale());
}

/// The books of the whole capture without loss (line A decoded in order): what recovery must end with.
fn lossless_books() -> MbpBooks {
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let (mut dec, mut books) = (Mdp3Decoder::default(), MbpBooks::with_capacity(64));
    for p in cap.packets.iter().filter(|p| p.dst == line_a) {
        dec.decode_packet(&p.payload, p.ts_ns, |info, ev| {
            if let Mdp3Event::Book(e) = ev {
                books.apply(&book_record(info, e)).unwrap();
            }
        })
        .unwrap();
    }
    books
}

/// Replays a run's records in order into fresh books and, after each incremental packet, checks every book that
/// says it is good (not stale) against the no-loss books at the same `MsgSeqNum`: a subscriber never sees
/// `stale=false` on a book that differs from the no-loss run's (a book recovered from a snapshot taken ahead of the
/// incrementals: from the snapshot's `LastMsgSeqNumProcessed` on). Returns the book checks made.
fn assert_never_good_and_wrong(records: &[BookUpdate]) -> u64 {
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let mut packets = cap.packets.iter().filter(|p| p.dst == line_a).peekable();
    let (mut dec, mut want) = (Mdp3Decoder::default(), MbpBooks::with_capacity(64));
    let mut live = MbpBooks::with_capacity(64);
    // A snapshot may come ahead of the incrementals (its LastMsgSeqNumProcessed past the channel's position: the
    // feeds are separate sockets): its book is the no-loss book at that MsgSeqNum, and the incrementals up to it are
    // dropped by RptSeq; so it is checked from there on.
    let mut ahead_until: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    let mut checks = 0;
    for (i, r) in records.iter().enumerate() {
        live.apply(r).unwrap();
        if r.kind() == Some(Kind::Clear) && r.flags & flags::SNAPSHOT != 0 {
            ahead_until.insert(r.instrument_id, r.venue_seq());
        }
        let incremental = r.flags & flags::SNAPSHOT == 0 && r.flags & flags::MAYBE_BAD_BOOK == 0;
        if !incremental || records.get(i + 1).is_some_and(|n| n.venue_seq() == r.venue_seq()) {
            continue;
        }
        while let Some(p) =
            packets.next_if(|p| u64::from(u32::from_le_bytes(p.payload[..4].try_into().unwrap())) <= r.venue_seq())
        {
            dec.decode_packet(&p.payload, p.ts_ns, |info, ev| {
                if let Mdp3Event::Book(e) = ev {
                    want.apply(&book_record(info, e)).unwrap();
                }
            })
            .unwrap();
        }
        for b in live.iter().filter(|b| !b.is_stale()) {
            let id = b.instrument_id();
            if ahead_until.get(&id).is_some_and(|&s| s > r.venue_seq()) {
                continue;
            }
            for side in [Side::Bid, Side::Ask] {
                let w = want.get(id).map_or([None; MBP_DEPTH].to_vec(), |w| w.top(side, MBP_DEPTH).to_vec());
                assert_eq!(b.top(side, MBP_DEPTH).to_vec(), w, "{id} {side:?} says good at {}", r.venue_seq());
            }
            checks += 1;
        }
    }
    checks
}

/// The instruments that were marked stale (by the loss or an RptSeq jump), ascending.
fn stale_ids(o: &Outcome) -> Vec<u32> {
    let mut ids: Vec<u32> = o.stale.iter().map(|r| r.instrument_id).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

const DROPPED: (u64, u64) = (17_350_000, 17_350_039);
/// Securities the channel had carried before MsgSeqNum 17,350,000: each marked stale by the loss.
const LOST_STALE: u64 = 29;
/// Level records of the capture's book entries outside the 40 lost packets (5,848 - 46).
const LEVEL_RECORDS_AFTER_LOSS: u64 = 5_802;

#[test]
fn forty_packets_lost_on_both_lines_are_recovered_from_the_snapshot_feed() {
    let mut o = run_live(|c, snapshot| {
        c.drop_seqs = Some(DROPPED);
        c.recovery = Some(RecoveryConfig { interval_ms: 10, linger_ms: 300, ..RecoveryConfig::new(snapshot) });
    });
    let a = o.arbiter;
    assert_eq!((a.gap_seqs, a.gap_events), (40, 1));
    let c = o.channel.counters().clone();
    assert_eq!((c.packets, c.bad_packets, c.lost_runs, c.lost_packets), (PACKETS - 40, 0, 1, 40));
    // Stale: every security seen before the hole (the loss), each once; and those first seen after it until a
    // snapshot loop covered the channel, on sight (how many depends on when the loop came: at least the two whose
    // first messages were in the hole, 175376 at 17,350,030 and 174970 at 17,350,039).
    assert_eq!(c.lost_stale_records, LOST_STALE);
    let ids = stale_ids(&o);
    assert_eq!(ids.len() as u64, c.stale_marked);
    assert_eq!(c.stale_marked, LOST_STALE + c.stale_on_sight, "no security marked by an RptSeq jump");
    assert!((2..=10).contains(&c.stale_on_sight), "{c:?}");
    assert!(ids.contains(&SECURITY) && ids.contains(&175_376) && ids.contains(&174_970));
    // Recovered: one snapshot applied per stale security, none left stale, the hole covered.
    assert_eq!((c.snapshots_applied, c.recovered, c.stale_now), (c.stale_marked, c.stale_marked, 0));
    assert_eq!((c.holes_covered, o.channel.channel_hole()), (1, None));
    assert!(!o.channel.needs_recovery());
    assert_eq!(o.channel.recovery_status(u64::MAX), RecoveryStatus::Idle);
    assert_eq!((c.bad_snapshot_packets, c.recovery_timeouts), (0, 0));
    assert!(o.snapshot_fed > 0 && o.snapshot_fed <= o.snapshot_datagrams);
    assert_eq!(c.snapshot_packets, o.snapshot_fed);
    assert_eq!(c.snapshots, c.snapshots_applied + c.snapshots_ignored);
    // What subscribers see: per stale security, its last InstrumentStale, then a Clear flagged SNAPSHOT, then
    // its levels, the last flagged LAST.
    for &id in &ids {
        let last_stale =
            o.records.iter().rposition(|r| r.instrument_id == id && r.kind() == Some(Kind::InstrumentStale));
        let clears: Vec<usize> = (0..o.records.len())
            .filter(|&i| o.records[i].instrument_id == id && o.records[i].kind() == Some(Kind::Clear))
            .collect();
        assert_eq!(clears.len(), 1, "security {id}: one recovery");
        assert!(clears[0] > last_stale.unwrap(), "security {id}: the Clear comes after the stale mark");
        assert_eq!(o.records[clears[0]].flags, flags::MBP | flags::SNAPSHOT);
    }
    let snapshot_levels =
        o.records.iter().filter(|r| r.kind() == Some(Kind::LevelNew) && r.flags & flags::SNAPSHOT != 0);
    assert_eq!(snapshot_levels.clone().count() as u64, c.snapshot_level_records);
    assert!(c.snapshot_level_records > 0);
    // Never good and wrong, at any packet: the two securities born in the hole included.
    // (At least one book at each of the 2,185 packets before the hole; how many after depends on when the loop came.)
    let checks = assert_never_good_and_wrong(&o.records);
    assert!(checks > 2_185, "{checks} checks");
    // The books end exactly as without the loss: every instrument, every position, and 174969 the README's.
    let want = lossless_books();
    assert_eq!((o.books.len(), want.len()), (39, 39));
    for w in want.iter() {
        let b = o.books.get(w.instrument_id()).expect("every book");
        assert!(!b.is_stale(), "{} recovered", w.instrument_id());
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(b.top(side, MBP_DEPTH), w.top(side, MBP_DEPTH), "{} {side:?}", w.instrument_id());
        }
    }
    let b = o.books.get(SECURITY).expect("174969 has a book");
    assert_eq!(b.top(Side::Bid, 5), reference_bids());
    assert_eq!(b.top(Side::Ask, 5), reference_asks());
}

#[test]
fn a_snapshot_feed_that_never_answers_leaves_the_lost_securities_stale_and_says_so() {
    let o = run_live(|c, snapshot| {
        c.drop_seqs = Some(DROPPED);
        c.recovery = Some(RecoveryConfig { linger_ms: 0, silent: true, ..RecoveryConfig::new(snapshot) });
    });
    assert_eq!(o.summary.recovery_sent, Some(0));
    assert_eq!((o.snapshot_datagrams, o.snapshot_fed), (0, 0));
    let ids = stale_ids(&o);
    let mut ch = o.channel;
    let c = ch.counters().clone();
    // The hole is never covered: the 10 securities first seen after it are stale on sight too.
    assert_eq!(
        (c.lost_runs, c.lost_stale_records, c.stale_marked, c.stale_now, c.stale_on_sight),
        (1, LOST_STALE, 39, 39, 10)
    );
    assert_eq!((c.snapshot_packets, c.snapshots_applied, c.recovered), (0, 0, 0));
    assert!(ch.needs_recovery());
    // The caller's clock passes the timeout: reported (once), the securities stay stale.
    let RecoveryStatus::Waiting { since_ns, .. } = ch.recovery_status(0) else { panic!("waiting") };
    ch.set_recovery_timeout_ns(1_000_000_000);
    let timed_out = RecoveryStatus::TimedOut { stale: 39, since_ns, snapshot_packets: 0 };
    assert_eq!(ch.recovery_status(since_ns + 1_000_000_001), timed_out);
    assert_eq!(ch.recovery_status(since_ns + 9_000_000_000), timed_out);
    assert_eq!(ch.counters().recovery_timeouts, 1);
    assert_eq!(ids.len(), 39);
    for &id in &ids {
        assert!(ch.is_stale(id as i32));
        assert!(o.books.get(id).unwrap().is_stale(), "{id} stays stale: never silently wrong");
    }
    assert_eq!(c.level_records, LEVEL_RECORDS_AFTER_LOSS);
}

/// A packet the decoder refuses (here line A's MsgSeqNum 17,350,000 with its first message's `schemaId` made 2:
/// whole by its `MsgSize`s, so arbitration takes it) is never a silent hole in a book: the channel counts it and
/// takes it as lost, marking the 29 securities carried before it stale, as a loss of the same packet on both
/// lines does, until market recovery.
#[test]
fn a_packet_the_decoder_refuses_marks_every_security_stale_as_a_loss_does() {
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let mut channel = Mdp3Channel::with_capacity(64);
    let mut stale = Vec::new();
    for p in cap.packets.iter().filter(|p| p.dst == line_a) {
        let mut payload = p.payload.clone();
        if u32::from_le_bytes(payload[..4].try_into().unwrap()) == DROPPED.0 as u32 {
            payload[12 + 6..12 + 8].copy_from_slice(&2u16.to_le_bytes()); // schemaId of the first message
            assert_eq!(Mdp3Seq.seq(&payload), Some(DROPPED.0), "still a whole packet");
        }
        channel.on_packet(&payload, p.ts_ns, &mut |r| {
            if r.kind() == Some(Kind::InstrumentStale) {
                stale.push(*r);
            }
        });
    }
    let c = channel.counters();
    assert_eq!((c.packets, c.bad_packets, c.lost_runs, c.lost_packets), (PACKETS, 1, 1, 1));
    // The 29 carried before it, and the 10 first seen after it (stale on sight: no snapshot covers the hole).
    assert_eq!((c.lost_stale_records, c.stale_marked, c.stale_now, c.stale_on_sight), (LOST_STALE, 39, 39, 10));
    let (lost, rpt_seq): (Vec<&BookUpdate>, Vec<&BookUpdate>) =
        stale.iter().partition(|r| r.flags & flags::MAYBE_BAD_BOOK != 0);
    assert_eq!(lost.len(), 39);
    assert!(lost.iter().all(|r| (r.order_id, r.size) == (DROPPED.0, 1)), "each names the packet: {lost:?}");
    assert!(lost.iter().any(|r| r.instrument_id == SECURITY));
    // The refused packet carried an entry of 88307: the next one's RptSeq jumps (already stale, not re-counted).
    let rpt_seq: Vec<_> = rpt_seq.iter().map(|r| (r.instrument_id, r.venue_seq())).collect();
    assert_eq!(rpt_seq, [(88_307, DROPPED.0 + 1)]);
    assert!(channel.needs_recovery());
}
