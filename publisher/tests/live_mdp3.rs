//! The live CME MDP 3.0 path through the whole publisher: `mdfan-feedsim` plays the bundled capture onto two
//! unicast loopback lines (A and B) with seeded impairments, the publisher (format `mdp3`) arbitrates, decodes,
//! journals and fans the price-level records out over shm to subscribers built on the subscriber library, which
//! keep `MbpBooks`. Reference values: data/cme-mdp3-sbe-v8-pcap-20160927/README.md ("Book replay").
//!
//! The lines' receive buffers are 32 MiB (SO_RCVBUFFORCE: CI runs as root), which hold the whole capture, so the
//! kernel drops nothing even when the feed thread falls behind on this 2-core machine; the arbiter's gap timeout is
//! 10 s, so a host stall cannot decide a gap: losses are decided by both lines moving past a seq.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_feedsim::{run, Impairment, Mdp3, RecoveryConfig, SimConfig, Summary};
use mdfan_publisher::config::Config;
use mdfan_publisher::{Publisher, RunReport};
use mdfan_subscriber::{
    flags, BookUpdate, CloseReason, Event, Health, Kind, MbpBooks, Side, Subscriber, SubscriberConfig,
};

#[path = "../../feed/tests/support/mdp3.rs"]
mod mdp3_ref;
use mdp3_ref::{reference_asks, reference_bids, SECURITY};

const PACKETS: u64 = 5_000;
/// Book entries (template 32) in the capture: one level record each (README "Book entries").
const LEVEL_RECORDS: u64 = 5_848;
/// Securities with book entries in the capture.
const SECURITIES: usize = 39;
const WATCHDOG: Duration = Duration::from_secs(120);

/// What one subscriber saw.
struct Seen {
    books: MbpBooks,
    gaps: u64,
    snapshots: u64,
    /// Live (not snapshot) InstrumentStale records.
    stale: Vec<BookUpdate>,
    /// FeedStatus records (live and snapshot), each with the level records seen before it.
    feed: Vec<(u64, BookUpdate)>,
    level_records: u64,
    end: Option<CloseReason>,
}

fn subscribe(endpoint: &str, name: &str, symbols: Option<Vec<String>>) -> JoinHandle<Seen> {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.symbols = symbols;
    cfg.ring_slots = 16_384;
    let mut sub = Subscriber::connect(&cfg).expect("subscribe");
    assert_eq!(sub.book_kind(), mdfan_subscriber::BookKind::Mbp, "MDP 3.0 builds price-level books");
    // ops/mdp3-symbols.csv (the publisher's [feed] symbols) names 174969 6CZ6, with a display factor of 1e-4.
    if cfg.symbols.is_some() {
        assert_eq!(sub.symbol(SECURITY), Some("6CZ6"));
        assert_eq!(sub.format_price(SECURITY, 75_805 * 100_000_000), "0.75805");
    }
    // Ready once the ring has had its first completion (a heartbeat, or the snapshot a late joiner gets): the
    // hot loop serves the session. A live feed starts at once, and `connect` returns at the Accept, before the
    // hot loop takes the session up: a sender started then could be ahead of it (on a loaded host the session
    // began 142 records in, from a snapshot, and the level-record count fell short).
    let (ready, is_ready) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let mut ready = Some(ready);
        let mut seen = Seen {
            books: MbpBooks::with_capacity(64),
            gaps: 0,
            snapshots: 0,
            stale: Vec::new(),
            feed: Vec::new(),
            level_records: 0,
            end: None,
        };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber not ended");
            let n = sub.poll(256, |e| match e {
                Event::Record(r) => {
                    if r.kind() == Some(Kind::InstrumentStale) && r.flags & flags::SNAPSHOT == 0 {
                        seen.stale.push(*r);
                    }
                    if r.kind() == Some(Kind::FeedStatus) {
                        seen.feed.push((seen.level_records, *r));
                    }
                    if r.kind().is_some_and(Kind::is_level) && r.flags & flags::SNAPSHOT == 0 {
                        seen.level_records += 1;
                    }
                    seen.books.apply(r).expect("a price-level record the book takes");
                }
                Event::Gap { .. } => seen.gaps += 1,
                _ => {}
            });
            if n == 0 {
                std::thread::yield_now();
            } else if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            if let Some(Health::Ended(end)) = sub.maintain_if_due() {
                seen.end = end.reason();
                seen.snapshots = sub.stats().snapshots_received;
                return seen;
            }
        }
    });
    // (a subscriber that ends before any completion drops `ready`: the wait ends, its thread reports)
    let _ = is_ready.recv_timeout(WATCHDOG);
    handle
}

/// The market recovery feed in a run: none, served by feedsim, or one that never answers.
#[derive(Clone, Copy, PartialEq)]
enum Recovery {
    None,
    Served,
    Silent,
}

/// Binds a live publisher on two free loopback ports (and a third for the snapshot feed), attaches `early`
/// subscribers (name, instrument filter), plays the capture with `tweak`, then attaches a late joiner (all
/// instruments) after the capture was played and before the publisher ends the stream (`end_after_idle_ms` = 3 s
/// of silence; a recovery under way finishes or times out, after 1 s, first). `extra`: more `[lines]` keys.
fn run_live(
    tweak: impl FnOnce(&mut SimConfig),
    recovery: Recovery,
    early: &[(&str, Option<Vec<String>>)],
    extra: &str,
) -> (Summary, RunReport, Vec<Seen>, Seen) {
    let snapshot =
        if recovery == Recovery::None { "" } else { "snapshot = \"127.0.0.1:0\"\nrecovery_timeout_ms = 1000\n" };
    let symbols = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/mdp3-symbols.csv");
    // `extra` may name the lines itself (with their sources)
    let ab = if extra.starts_with("a = ") { "" } else { "a = \"127.0.0.1:0\"\nb = \"127.0.0.1:0\"\n" };
    let text = format!("[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"mdp3\"\nsymbols = {symbols:?}\n\n[lines]\n{ab}{snapshot}gap_timeout_ms = 10000\nend_after_idle_ms = 3000\n{extra}\n[fabric]\nprovider = \"shm\"\n");
    let cfg = Config::parse(&text, Path::new("live-test.toml")).expect("test config parses");
    // The lines ask for 32 MiB receive buffers (SO_RCVBUFFORCE as root, else capped at net.core.rmem_max): less
    // could drop a burst in the kernel on both lines, which this test would see as a loss.
    let rmem_max: u64 =
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").map_or(0, |t| t.trim().parse().unwrap_or(0));
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")));
    assert!(root || rmem_max >= 32 << 20, "run as root or raise net.core.rmem_max to 33554432 (it is {rmem_max})");
    let publisher = Publisher::bind(cfg).expect("publisher binds its lines and endpoint");
    let endpoint = publisher.local_addr().to_string();
    let [a, b]: [SocketAddrV4; 2] = publisher.line_addrs().expect("a live feed has lines");
    let snapshot = publisher.snapshot_addr();
    let publisher = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let early: Vec<JoinHandle<Seen>> =
        early.iter().map(|(name, ids)| subscribe(&endpoint, name, ids.clone())).collect();
    let mut sim = SimConfig {
        pcap: mdp3_ref::capture_path(),
        line_a: None,
        line_b: None,
        send_a: a,
        send_b: b,
        speed: 0.0,
        impair_a: Impairment::default(),
        impair_b: Impairment::default(),
        seed: 1,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: snapshot
            .map(|addr| RecoveryConfig { silent: recovery == Recovery::Silent, ..RecoveryConfig::new(addr) }),
    };
    tweak(&mut sim);
    let summary = run(&sim, &mut Mdp3::default(), &AtomicBool::new(false)).expect("the simulator plays the capture");
    let late = subscribe(&endpoint, "late", None);
    let report = publisher.join().expect("publisher thread").expect("publisher run");
    let early = early.into_iter().map(|h| h.join().expect("subscriber thread")).collect();
    (summary, report, early, late.join().expect("late subscriber thread"))
}

fn assert_reference(who: &str, seen: &Seen) {
    let b = seen.books.get(SECURITY).unwrap_or_else(|| panic!("{who}: no book for {SECURITY}"));
    assert_eq!(b.top(Side::Bid, 5), reference_bids(), "{who}: bids");
    assert_eq!(b.top(Side::Ask, 5), reference_asks(), "{who}: asks");
}

#[test]
fn two_percent_loss_on_each_line_reaches_two_subscribers_and_a_late_joiner_exact_with_no_gap() {
    let loss = Impairment { loss: 0.02, ..Impairment::default() };
    let (summary, report, early, late) = run_live(
        |c| {
            c.impair_a = loss;
            c.impair_b = loss;
            c.seed = 13;
        },
        Recovery::None,
        &[("all", None), ("one", Some(vec!["6CZ6".to_owned()]))],
        "",
    );
    let [la, lb] = &summary.lines;
    // Seed 13: 100 packets lost on A, 114 on B, none on both (mdfan-feedsim's own test pins these).
    assert_eq!((la.dropped, lb.dropped), (100, 114));
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!(live.datagrams, [PACKETS - 100, PACKETS - 114], "everything sent was read");
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS, "every packet once, from one line or the other");
    assert!(live.delivered[0] > 0 && live.delivered[1] > 0);
    assert_eq!(live.duplicates, PACKETS - 100 - 114, "each loss filled from the other line, every other copy dropped");
    assert_eq!((live.gap_seqs, live.gap_runs, live.late, live.bad_packets), (0, 0, 0, 0));
    assert_eq!((live.level_records, live.stale_records), (LEVEL_RECORDS, 0));
    assert_eq!(report.end, CloseReason::EndOfStream);
    assert_eq!(report.records, LEVEL_RECORDS, "every record journaled went out");

    let (all, one) = (&early[0], &early[1]);
    for (who, seen) in [("all", all), ("one", one), ("late", &late)] {
        assert_reference(who, seen);
        assert_eq!((seen.gaps, seen.end), (0, Some(CloseReason::EndOfStream)), "{who}");
        assert!(seen.stale.is_empty(), "{who}: nothing was lost on both lines");
        assert!(seen.books.iter().all(|b| !b.is_stale()), "{who}");
    }
    assert_eq!(all.books.len(), SECURITIES);
    assert_eq!(one.books.len(), 1, "filtered to {SECURITY}, asked for as 6CZ6");
    assert_eq!(all.books.get(SECURITY).unwrap().records(), 726, "README: 726 book entries for {SECURITY}");
    assert_eq!(all.snapshots, 0, "attached before the first packet: nothing to snapshot");
    // The late joiner rebuilt every book from the publisher's snapshot, level for level.
    assert_eq!(late.snapshots, 1);
    assert_eq!(late.books.len(), SECURITIES);
    for b in all.books.iter() {
        let l = late.books.get(b.instrument_id()).expect("the late joiner has every book");
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(l.top(side, 10), b.top(side, 10), "instrument {} {side:?}", b.instrument_id());
        }
    }
}

/// The capture's first 100 packets sent to line A cut 3 bytes short before the capture plays (as a line that
/// mangles packets would deliver them first): they are not whole packets by their `MsgSize`s, so they are refused
/// before arbitration (`refused=100/0`) and the whole copies that follow win; nothing is lost, nothing is stale,
/// and the books are exact. (Taken by the arbiter, each cut copy would have won its seq and the decoder would have
/// refused it: 100 packets' entries gone.)
#[test]
fn copies_cut_short_on_line_a_are_refused_so_the_whole_copies_win() {
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let cut: Vec<Vec<u8>> = cap
        .packets
        .iter()
        .filter(|p| p.dst == line_a)
        .take(100)
        .map(|p| p.payload[..p.payload.len() - 3].to_vec())
        .collect();
    let (summary, report, early, _late) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for p in &cut {
                tx.send_to(p, c.send_a).unwrap();
            }
        },
        Recovery::None,
        &[("all", None)],
        "",
    );
    let [la, lb] = &summary.lines;
    assert_eq!((la.dropped, lb.dropped), (0, 0));
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!(live.datagrams, [PACKETS + 100, PACKETS], "{}", live.line());
    assert_eq!(live.refused, [100, 0], "{}", live.line());
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS, "{}", live.line());
    assert_eq!((live.duplicates, live.gap_seqs, live.bad_packets, live.stale_records), (PACKETS, 0, 0, 0));
    assert_eq!(live.level_records, LEVEL_RECORDS);
    assert_reference("all", &early[0]);
    assert!(early[0].stale.is_empty());
}

/// MsgSeqNums 17,350,000 to 17,350,039 dropped on both lines: before them the channel had carried 29 securities.
const LOST: (u64, u64) = (17_350_000, 17_350_039);
const STALE_SECURITIES: u64 = 29;

fn assert_stale_marks(live_stale_records: u64, all: &Seen, one: &Seen) {
    // The loss's marks at its first MsgSeqNum; a security first seen after it is marked on sight, naming it.
    let by_loss = |s: &Seen| -> Vec<u32> {
        let marks = s.stale.iter().filter(|r| r.flags & flags::MAYBE_BAD_BOOK != 0 && r.venue_seq() == LOST.0);
        marks.map(|r| r.instrument_id).collect()
    };
    assert!(all
        .stale
        .iter()
        .filter(|r| r.flags & flags::MAYBE_BAD_BOOK != 0)
        .all(|r| (r.order_id, r.size) == (LOST.0, 40) && r.venue_seq() >= LOST.0));
    assert_eq!(by_loss(all).len() as u64, STALE_SECURITIES, "every security carried before the hole, once");
    assert_eq!(by_loss(one), [SECURITY], "the filtered subscriber gets its own instrument's mark only");
    assert_eq!(all.stale.len() as u64, live_stale_records, "every stale record reached the unfiltered subscriber");
}

#[test]
fn forty_packets_lost_on_both_lines_go_stale_then_market_recovery_rebuilds_every_book_exactly() {
    let (summary, report, early, late) = run_live(
        |c| c.drop_seqs = Some(LOST),
        Recovery::Served,
        &[("all", None), ("one", Some(vec!["6CZ6".to_owned()]))],
        "",
    );
    assert_eq!(summary.lines[0].dropped_by_seq, 40);
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!((live.gap_seqs, live.gap_runs), (40, 1));
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS - 40);
    // The 29 carried before the hole, and those first seen after it until a loop covered the channel (at least
    // 175376 and 174970, whose first messages were in the hole; how many more depends on when the loop came).
    assert!((STALE_SECURITIES + 2..=39).contains(&live.recovered), "{}", live.recovered);
    assert_eq!((live.stale_now, live.recovery_timeouts), (0, 0));
    assert!(live.snapshot_packets > 0);
    let (all, one) = (&early[0], &early[1]);
    assert_stale_marks(live.stale_records, all, one);
    for (who, seen) in [("all", all), ("one", one), ("late", &late)] {
        assert_eq!(seen.gaps, 0, "{who}: the fan-out itself lost nothing");
        assert_reference(who, seen);
        assert!(seen.books.iter().all(|b| !b.is_stale()), "{who}: every book recovered");
    }
    // the late joiner's snapshot equals what the live subscribers rebuilt
    for b in all.books.iter() {
        let l = late.books.get(b.instrument_id()).expect("the late joiner has every book");
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(l.top(side, 10), b.top(side, 10), "instrument {} {side:?}", b.instrument_id());
        }
    }
}

#[test]
fn a_snapshot_feed_that_never_answers_leaves_the_books_stale_and_says_so() {
    let (_, report, early, late) = run_live(
        |c| c.drop_seqs = Some(LOST),
        Recovery::Silent,
        &[("all", None), ("one", Some(vec!["6CZ6".to_owned()]))],
        "",
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!((live.recovered, live.stale_now, live.recovery_timeouts), (0, 39, 1));
    assert_eq!(live.snapshot_packets, 0, "the feed never answered");
    assert_eq!(report.end, CloseReason::EndOfStream, "the stream still ends normally");
    let (all, one) = (&early[0], &early[1]);
    assert_stale_marks(live.stale_records, all, one);
    assert_eq!(all.gaps, 0);
    // Never silently wrong: the securities hit stay stale, and so do the 10 first seen after the hole (stale on
    // sight: the hole held the first messages of two of them, and no snapshot loop covered it).
    let stale = all.books.iter().filter(|b| b.is_stale()).count() as u64;
    assert_eq!((stale, all.books.len() as u64), (39, 39));
    assert!(one.books.get(SECURITY).expect("a book").is_stale());
    // A strategy joining after the hole learns it from its snapshot: every book it gets is stale too.
    assert_eq!((late.snapshots, late.gaps), (1, 0));
    let stale: Vec<u32> = late.books.iter().filter(|b| b.is_stale()).map(|b| b.instrument_id()).collect();
    assert_eq!((stale.len(), late.books.len()), (39, 39), "the late joiner's snapshot carries the stale state");
    assert!(late.stale.is_empty(), "from its snapshot, not from live marks");
}

/// The capture's first 500 line-A packets sent to lines A and B, then 1.5 s with nothing on either line but
/// stray datagrams that are no MDP 3.0 packet and replays of a delivered packet (past `lines.silent_after_ms` =
/// 500), then the whole capture as feedsim plays it (its first 500 packets are
/// duplicates by then). Subscribers get one `FeedStatus` silent record after the first 500 packets' level
/// records and one live record right after it, before the 501st packet's; the books are exact. After the capture
/// the lines are quiet again: a second silent record, 500 ms in, before the stream ends at 3 s
/// (`end_after_idle_ms`). The late joiner (attached after the capture) gets a snapshot that carries the feed's
/// state at its join; the counters say two silences, the feed silent at the end.
#[test]
fn lines_that_go_quiet_mid_capture_are_reported_silent_then_live_and_the_books_stay_exact() {
    use mdfan_subscriber::{FeedState, CHANNEL_INSTRUMENT_ID};
    const FIRST: usize = 500;
    const STRAYS: u64 = 15;
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let first: Vec<Vec<u8>> =
        cap.packets.iter().filter(|p| p.dst == line_a).take(FIRST).map(|p| p.payload.clone()).collect();
    // The level records those packets make, and the MsgSeqNum of the last (bytes 0..4 of the packet header).
    let mut channel = mdfan_feed::mdp3_channel::Mdp3Channel::with_capacity(64);
    let mut first_levels = 0u64;
    for p in &first {
        channel.on_packet(p, 0, &mut |r| first_levels += u64::from(r.kind().is_some_and(Kind::is_level)));
    }
    let seq_of = |p: &[u8]| u64::from(u32::from_le_bytes(p[..4].try_into().unwrap()));
    let last_seq = seq_of(&first[FIRST - 1]);
    let end_seq = cap.packets.iter().filter(|p| p.dst == line_a).map(|p| seq_of(&p.payload)).max().unwrap();
    let (_, report, early, late) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for p in &first {
                tx.send_to(p, c.send_a).unwrap();
                tx.send_to(p, c.send_b).unwrap();
            }
            // Quiet but for a stray 5-byte datagram on line A every 100 ms (no MDP 3.0 packet: refused) and a
            // replay of the first packet (delivered long ago: a duplicate), which must not hide the silence (they
            // did: every datagram read, then every one admitted, counted).
            for _ in 0..STRAYS {
                tx.send_to(b"stray", c.send_a).unwrap();
                tx.send_to(&first[0], c.send_a).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        },
        Recovery::None,
        &[("all", None), ("one", Some(vec!["6CZ6".to_owned()]))],
        "silent_after_ms = 500\n",
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!((live.silences, live.silent_now, live.refused), (2, 1, [STRAYS, 0]), "{}", live.line());
    assert!(live.line().contains(" seq_resets=0 silences=2 silent_now=1 "), "{}", live.line());
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS, "{}", live.line());
    assert_eq!((live.duplicates, live.gap_seqs, live.stale_records), (PACKETS + 2 * FIRST as u64 + STRAYS, 0, 0));
    assert_eq!(report.end, CloseReason::EndOfStream, "silence is not an end");
    for (who, seen) in [("all", &early[0]), ("one", &early[1])] {
        assert_reference(who, seen);
        let states: Vec<(u64, Option<FeedState>)> = seen.feed.iter().map(|(n, r)| (*n, r.feed_state())).collect();
        // Filtered to 6CZ6, "one" gets the channel's feed status too, after its own level records.
        let before = if who == "all" { first_levels } else { seen.feed[0].0 };
        let after = seen.level_records;
        assert_eq!(
            states,
            [(before, Some(FeedState::Silent)), (before, Some(FeedState::Live)), (after, Some(FeedState::Silent))],
            "{who}"
        );
        assert_eq!((seen.feed[2].1.size, seen.feed[2].1.venue_seq()), (2, end_seq), "{who}");
        let (s, l) = (seen.feed[0].1, seen.feed[1].1);
        assert_eq!(
            (s.instrument_id, s.order_id, s.size, s.venue_seq()),
            (CHANNEL_INSTRUMENT_ID, 500_000_000, 1, last_seq)
        );
        assert_eq!((l.size, l.venue_seq()), (1, last_seq), "{who}");
        assert!(l.order_id > s.order_id, "{who}: the silence outlasted its bound: {l:?}");
        assert!(seen.stale.is_empty() && seen.gaps == 0, "{who}");
    }
    assert_eq!(early[0].level_records, LEVEL_RECORDS);
    // The late joiner attached after the capture, before or after the second silence: it learns the state then
    // (live, or the second silence: from its snapshot, or from the journal right after it when the snapshot was
    // cut before the publisher's books had applied it; `BookKeeper`'s unit test pins the snapshot's copy), and
    // it ends knowing the feed silent.
    let states: Vec<(Option<FeedState>, u32)> = late.feed.iter().map(|(_, r)| (r.feed_state(), r.size)).collect();
    assert!(
        states == [(Some(FeedState::Silent), 2)]
            || states == [(Some(FeedState::Live), 1), (Some(FeedState::Silent), 2)],
        "{:?}",
        late.feed
    );
    assert_reference("late", &late);
}

/// Lines A and B that list the address feedsim sends from (127.0.0.1) as their only source.
const SOURCED: &str = "a = { addr = \"127.0.0.1:0\", sources = [\"127.0.0.1\"] }\nb = { addr = \"127.0.0.1:0\", sources = [\"127.0.0.1\"] }\n";

/// The capture's line-A packets, in order.
fn line_a_packets() -> Vec<Vec<u8>> {
    let cap = mdfan_feed::pcap::read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let line_a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    cap.packets.iter().filter(|p| p.dst == line_a).map(|p| p.payload.clone()).collect()
}

/// An MDP 3.0 packet header alone (12 bytes: `MsgSeqNum`, `SendingTime`): a packet without messages.
fn empty_packet(seq: u32) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

fn msg_seq_num(p: &[u8]) -> u32 {
    u32::from_le_bytes(p[..4].try_into().unwrap())
}

/// Issue 26's stray datagrams: one header with `MsgSeqNum` 0xFFFFFF00 on line A before the feed (it used to set
/// the expected seq, so every real packet was a duplicate), then, after the capture's first 2,500 packets (sent to
/// both lines), two headers 0xFFFFFFF0 and 0xFFFFFFF1 on line A (they used to confirm a jump: every security
/// stale for good). Then the whole capture. Neither sets the start nor confirms a jump (`jumps_dropped=1
/// jumps_held=2 jumps_taken=0`): nothing is lost or stale, every book is exact.
#[test]
fn stray_datagrams_before_the_feed_and_mid_stream_confirm_nothing_and_the_books_stay_exact() {
    const FIRST: usize = 2_500;
    let packets = line_a_packets();
    let (_, report, early, _) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            tx.send_to(&empty_packet(0xFFFF_FF00), c.send_a).unwrap();
            for p in &packets[..FIRST] {
                tx.send_to(p, c.send_a).unwrap();
                tx.send_to(p, c.send_b).unwrap();
            }
            tx.send_to(&empty_packet(0xFFFF_FFF0), c.send_a).unwrap();
            tx.send_to(&empty_packet(0xFFFF_FFF1), c.send_a).unwrap();
        },
        Recovery::None,
        &[("all", None)],
        "",
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    // held mid-stream 2, taken 0; the stray before the feed held as a start candidate, then dropped when the
    // feed's first packets did not continue it; 3 held for the start (it, then the feed's first two)
    assert_eq!(live.jumps, [2, 0, 1, 3], "{}", live.line());
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS, "{}", live.line());
    assert_eq!((live.gap_seqs, live.stale_records, live.seq_resets), (0, 0, 0), "{}", live.line());
    assert_eq!(live.level_records, LEVEL_RECORDS, "{}", live.line());
    let all = &early[0];
    assert_reference("all", all);
    assert_eq!((all.books.len(), all.level_records, all.gaps), (SECURITIES, LEVEL_RECORDS, 0));
    assert!(all.stale.is_empty() && all.books.iter().all(|b| !b.is_stale()));
}

/// Issue 26's forged packets: 1,501 empty packets carrying the capture's first 1,501 `MsgSeqNum`s, sent ahead of
/// the stream to both lines from 127.0.0.2, an address the lines do not list (feedsim sends from 127.0.0.1). They
/// used to win arbitration (first copy wins), leaving 11 books wrong and `stale=false`. Now each is dropped before
/// arbitration and counted by source (`foreign=1501/1501`); every book is exact and nothing is stale.
#[test]
fn forged_packets_from_an_address_the_lines_do_not_list_are_dropped_and_counted() {
    const FORGED: usize = 1_501;
    let packets = line_a_packets();
    let (_, report, early, _) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.2:0").expect("127.0.0.2 is a loopback address");
            for p in &packets[..FORGED] {
                let forged = empty_packet(msg_seq_num(p));
                tx.send_to(&forged, c.send_a).unwrap();
                tx.send_to(&forged, c.send_b).unwrap();
            }
        },
        Recovery::None,
        &[("all", None)],
        SOURCED,
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!(live.foreign, [FORGED as u64, FORGED as u64], "{}", live.line());
    assert_eq!(live.delivered[0] + live.delivered[1], PACKETS, "{}", live.line());
    assert_eq!((live.copy_mismatches, live.gap_seqs, live.stale_records), (0, 0, 0), "{}", live.line());
    assert_eq!(live.level_records, LEVEL_RECORDS, "{}", live.line());
    let all = &early[0];
    assert_reference("all", all);
    assert_eq!((all.books.len(), all.level_records), (SECURITIES, LEVEL_RECORDS));
    assert!(all.stale.is_empty() && all.books.iter().all(|b| !b.is_stale()));
}

/// The same 1,501 forged packets from feedsim's own address, which the source check cannot tell apart: they win
/// arbitration, but the real copies that follow on lines A and B are compared with them and differ
/// (`copy_mismatches`), so the channel is marked stale at each and recovered from the snapshot feed: the
/// subscriber sees stale marks (never a wrong book it is told is good) and ends with every book exact and none
/// stale.
#[test]
fn forged_packets_from_the_feeds_own_address_differ_from_the_real_copies_so_the_channel_goes_stale_and_recovers() {
    const FORGED: usize = 1_501;
    let packets = line_a_packets();
    let (_, report, early, late) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for p in &packets[..FORGED] {
                let forged = empty_packet(msg_seq_num(p));
                tx.send_to(&forged, c.send_a).unwrap();
                tx.send_to(&forged, c.send_b).unwrap();
            }
        },
        Recovery::Served,
        &[("all", None)],
        SOURCED,
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!(live.foreign, [0, 0], "{}", live.line());
    assert!(live.copy_mismatches >= FORGED as u64, "every forged seq's real copy differs: {}", live.line());
    assert!(live.stale_records > 0 && live.recovered > 0, "{}", live.line());
    assert_eq!((live.stale_now, live.seq_resets), (0, 0), "{}", live.line());
    for (who, seen) in [("all", &early[0]), ("late", &late)] {
        assert_reference(who, seen);
        assert_eq!(seen.books.len(), SECURITIES, "{who}");
        let stale: Vec<u32> = seen.books.iter().filter(|b| b.is_stale()).map(|b| b.instrument_id()).collect();
        assert!(stale.is_empty(), "{who}: {stale:?}");
    }
    assert!(!early[0].stale.is_empty(), "the subscriber was told");
    // Every book equals a clean run's, level for level.
    let (_, _, clean, _) = run_live(|_| {}, Recovery::None, &[("clean", None)], "");
    for b in clean[0].books.iter() {
        let got = early[0].books.get(b.instrument_id()).expect("every book");
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(got.top(side, 10), b.top(side, 10), "instrument {} {side:?}", b.instrument_id());
        }
    }
}

/// A `MsgSeqNum` reset (a channel restart): the capture's first 4,500 packets on both lines, then the whole
/// capture again from its first `MsgSeqNum`, 4,500 back (more than the arbiter's window of 4,096). It used to
/// be taken as duplicates until the publisher restarted (a channel silent without a word). Now the reset is
/// confirmed by 3 packets at consecutive seqs on the new numbering, the channel is re-based (`seq_resets=1`),
/// every security is marked stale and recovered from the snapshot feed of the new sequence, and every book ends
/// exact and not stale.
#[test]
fn a_msg_seq_num_reset_rebases_the_channel_marks_it_stale_and_recovers_it() {
    const FIRST: usize = 4_500;
    let packets = line_a_packets();
    let (_, report, early, _) = run_live(
        |c| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for p in &packets[..FIRST] {
                tx.send_to(p, c.send_a).unwrap();
                tx.send_to(p, c.send_b).unwrap();
            }
        },
        Recovery::Served,
        &[("all", None)],
        "",
    );
    let live = report.live.into_iter().next().expect("a live feed reports its lines");
    assert_eq!(live.seq_resets, 1, "{}", live.line());
    assert!(live.stale_records > 0 && live.recovered > 0, "{}", live.line());
    assert_eq!(live.stale_now, 0, "{}", live.line());
    let all = &early[0];
    assert_reference("all", all);
    assert_eq!(all.books.len(), SECURITIES);
    let stale: Vec<u32> = all.books.iter().filter(|b| b.is_stale()).map(|b| b.instrument_id()).collect();
    assert!(stale.is_empty(), "{stale:?}");
    // Every security of the channel was marked at the reset (a loss of unknown content).
    let marked: std::collections::BTreeSet<u32> = all.stale.iter().map(|r| r.instrument_id).collect();
    assert!(marked.len() as u64 >= STALE_SECURITIES, "{marked:?}");
}
