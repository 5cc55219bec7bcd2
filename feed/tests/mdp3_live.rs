//! The live MDP 3.0 path over loopback UDP: `mdfan-feedsim` plays the bundled capture on lines A and B (seeded
//! impairments), `mdfan-lines` receives and arbitrates them, [`Mdp3Channel`] turns packets into records, and
//! `MbpBooks` keeps the books. Reference values: data/cme-mdp3-sbe-v8-pcap-20160927/README.md.
//!
//! The receiver's sockets get a 32 MiB buffer (SO_RCVBUFFORCE as root: CI runs as root), which holds the whole
//! capture, so the kernel drops nothing even when this thread falls behind; gaps are decided by both lines moving
//! past a seq (the timeout is set far out, 10 s, so a host stall cannot decide one).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mdfan_feed::mdp3_channel::Mdp3Channel;
use mdfan_feedsim::{run, Impairment, Mdp3, SimConfig, Summary};
use mdfan_lines::{
    realtime_ns, ArbiterConfig, ArbiterCounters, Event, Line, LineConfig, LineReceiver, Mdp3Seq, ReceiverConfig,
};
use mdfan_wire::{flags, BookUpdate, Kind, MbpBooks, Side};

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
}

/// Plays the capture onto two unicast loopback lines and runs the handler's path until everything sent arrived.
fn run_live(tweak: impl FnOnce(&mut SimConfig)) -> Outcome {
    let big =
        |port| LineConfig { rcvbuf_bytes: 32 << 20, ..LineConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) };
    let mut rcfg = ReceiverConfig::new(big(0), big(0));
    rcfg.arbiter = ArbiterConfig { gap_timeout_ns: 10_000_000_000, ..ArbiterConfig::default() };
    let mut rx = LineReceiver::open(&rcfg, Mdp3Seq).expect("open the lines");
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
        recovery: None,
    };
    tweak(&mut cfg);
    let shutdown = AtomicBool::new(false);
    let mut channel = Mdp3Channel::with_capacity(64);
    let mut books = MbpBooks::with_capacity(64);
    let (mut stale, mut unstamped) = (Vec::new(), 0u64);
    let mut book_errors = Vec::new();
    let summary = std::thread::scope(|s| {
        let mut sim = Some(s.spawn(|| run(&cfg, &mut Mdp3, &shutdown)));
        let mut summary: Option<Summary> = None;
        let start = Instant::now();
        loop {
            let mut to_books = |r: &BookUpdate| {
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
            })
            .expect("poll");
            if let Some(h) = sim.take_if(|h| h.is_finished()) {
                summary = Some(h.join().expect("simulator thread").expect("simulator run"));
            }
            if let Some(sm) = &summary {
                if rx.line_counters().datagrams == [sm.lines[0].sent, sm.lines[1].sent] {
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
    Outcome { summary, arbiter: *rx.arbiter_counters(), channel, books, stale, unstamped }
}

#[test]
fn two_percent_loss_on_each_line_gives_the_reference_book_with_no_gap() {
    let loss = Impairment { loss: 0.02, ..Impairment::default() };
    let o = run_live(|c| {
        c.impair_a = loss;
        c.impair_b = loss;
        c.seed = 13;
    });
    let [la, lb] = &o.summary.lines;
    // Seed 13: 100 packets lost on A, 114 on B, none on both (mdfan-feedsim's own test pins these).
    assert_eq!((la.dropped, lb.dropped), (100, 114));
    let a = o.arbiter;
    assert_eq!(a.delivered[0] + a.delivered[1], PACKETS, "every packet once");
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
    let o = run_live(|c| c.drop_seqs = Some((first, last)));
    let a = o.arbiter;
    assert_eq!((a.gap_seqs, a.gap_events), (40, 1));
    let c = o.channel.counters();
    assert_eq!((c.packets, c.lost_runs, c.lost_packets), (PACKETS - 40, 1, 40));
    // One stale mark per security the channel had carried before the hole, all for that hole; the RptSeq jumps the
    // hole leaves behind follow as per-instrument stale records.
    let by_loss: Vec<&BookUpdate> = o.stale.iter().filter(|r| r.flags & flags::MAYBE_BAD_BOOK != 0).collect();
    assert!(!by_loss.is_empty());
    assert_eq!(by_loss.len() as u64, c.lost_stale_records);
    assert!(by_loss.iter().all(|r| (r.order_id, r.size, r.venue_seq) == (first, 40, first as u32)));
    let mut ids: Vec<u32> = by_loss.iter().map(|r| r.instrument_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), by_loss.len(), "each security once");
    assert!(ids.contains(&SECURITY));
    assert_eq!(c.rpt_seq_stale_records, (o.stale.len() - by_loss.len()) as u64);
    // Without market recovery the books stay stale: never silently wrong.
    assert!(o.books.get(SECURITY).expect("174969 has a book").is_stale());
}
