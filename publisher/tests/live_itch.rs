//! Live Nasdaq TotalView-ITCH 5.0 over MoldUDP64 through the whole publisher, on loopback unicast: the bundled
//! real packets (data/nasdaq-itch50-moldudp64-pcap-20230822/README.md gives every value asserted here) sent to
//! line A (and B), with the publisher's session receiver, ITCH decoder and normaliser in front of the journal, to
//! a subscriber built on the subscriber library. A small re-request server in the test answers MoldUDP64
//! request packets from the capture's messages (or never answers). Stock Directory messages put in front of the
//! META packet give the publisher its symbols as they come.
//!
//! No timing is asserted: the test waits for the publisher's counters to reach each expected value (under a
//! watchdog), and the stream ends on end of session or after `end_after_idle_ms` of silence.

use std::net::{SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_feed::moldudp64::{Packet, END_OF_SESSION};
use mdfan_feed::pcap::read_udp_capture;
use mdfan_publisher::config::Config;
use mdfan_publisher::live_itch::MoldCounters;
use mdfan_publisher::{Publisher, RunReport};
use mdfan_subscriber::{BookUpdate, Event, Health, Kind, Side, SubscribeError, Subscriber, SubscriberConfig};
use mdfan_wire::{InstrumentDef, Symbology};

#[path = "support/itch_messages.rs"]
mod itch_messages;

const WATCHDOG: Duration = Duration::from_secs(60);
const SESSION: &[u8; 10] = b"000010059B";
/// The 38-message META packet (locate 6514): sequence numbers 19,009,117 ..= 19,009,154.
const META_FIRST: u64 = 19_009_117;
const META: u32 = 6514;

fn capture(name: &str) -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nasdaq-itch50-moldudp64-pcap-20230822").join(name);
    read_udp_capture(&path).expect("the bundled capture reads").packets.into_iter().map(|p| p.payload).collect()
}

/// The nine Nasdaq packets (session 000010059B), in sequence order.
fn nasdaq_packets() -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = [
        "OrderReplaceMessage",
        "AddOrderNoMpidAttributionMessage",
        "OrderDeleteMessage",
        "OrderExecutedMessage",
        "NetOrderImbalanceIndicatorMessage",
        "Multiple.Packets",
        "MarketParticipantPositionMessage",
        "StockTradingActionMessage",
    ]
    .iter()
    .flat_map(|n| capture(&format!("nasdaq/{n}.pcap")))
    .collect();
    all.sort_by_key(|p| Packet::parse(p).unwrap().sequence_number);
    assert_eq!(all.len(), 9);
    all
}

/// The META packet's 38 messages, by sequence number.
fn meta_messages() -> Vec<(u64, Vec<u8>)> {
    let raw = capture("nasdaq/Multiple.Packets.pcap");
    let p = raw.iter().map(|r| Packet::parse(r).unwrap()).find(|p| p.message_count == 38).unwrap();
    p.messages().map(|b| (b.sequence_number, b.message.to_vec())).collect()
}

/// A downstream packet of SESSION: `first` and the messages after it (empty with `count` 0 or `END_OF_SESSION`).
fn downstream(first: u64, count: u16, messages: &[Vec<u8>]) -> Vec<u8> {
    let mut p = SESSION.to_vec();
    p.extend_from_slice(&first.to_be_bytes());
    p.extend_from_slice(&count.to_be_bytes());
    for m in messages {
        p.extend_from_slice(&(m.len() as u16).to_be_bytes());
        p.extend_from_slice(m);
    }
    p
}

fn publisher(retransmit: Option<SocketAddrV4>, b: bool, extra: &str) -> Publisher {
    publisher_on("\"127.0.0.1:0\"", retransmit, b, extra)
}

/// As [`publisher`], with line A given as `a` (a TOML string or table).
fn publisher_on(a: &str, retransmit: Option<SocketAddrV4>, b: bool, extra: &str) -> Publisher {
    let retransmit = retransmit.map_or(String::new(), |a| format!("retransmit = \"{a}\"\n"));
    let b = if b { "b = \"127.0.0.1:0\"\n" } else { "" };
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n[lines]\na = {a}\n{b}{retransmit}rcvbuf_bytes = 1048576\nend_after_idle_ms = 2000\n{extra}\n[fabric]\nprovider = \"shm\"\n"
    );
    let cfg = Config::parse(&text, Path::new("live-itch-test.toml")).expect("test config parses");
    Publisher::bind(cfg).expect("publisher binds its lines and endpoint")
}

/// The ready line's feed: line B's address only when the config has a line B (without one it printed line A's
/// address as line B's).
#[test]
fn the_feed_name_says_line_b_none_without_a_line_b() {
    let p = publisher(None, false, "");
    let [a, _] = p.line_addrs().unwrap();
    assert_eq!(p.feed_name(), format!("itch50 moldudp64 line_a={a} line_b=none"));
    let p = publisher(None, true, "");
    let [a, b] = p.line_addrs().unwrap();
    assert_ne!(a, b);
    assert_eq!(p.feed_name(), format!("itch50 moldudp64 line_a={a} line_b={b}"));
}

/// The META packet's 38 messages, without their sequence numbers.
fn meta_bodies() -> Vec<Vec<u8>> {
    meta_messages().into_iter().map(|(_, m)| m).collect()
}

/// Ends the session after the META packet (an end-of-session packet from `tx` to line `a`) and waits for the
/// publisher's run and the subscriber: the run's MoldUDP64 counters and every feed record the subscriber got.
fn end_session(
    tx: &UdpSocket,
    a: SocketAddrV4,
    h: Running,
    sub: JoinHandle<Vec<BookUpdate>>,
) -> (mdfan_publisher::live_itch::MoldReport, Vec<BookUpdate>) {
    tx.send_to(&downstream(META_FIRST + 38, END_OF_SESSION, &[]), a).unwrap();
    let report = h.join().unwrap().expect("publisher run");
    let got = sub.join().unwrap();
    (report.moldudp64.expect("the MoldUDP64 counters are in the run report"), got)
}

/// Every record a subscriber got (feed records only).
fn subscribe(endpoint: &str) -> JoinHandle<Vec<BookUpdate>> {
    subscribe_with(SubscriberConfig::new(endpoint, "itch")).1
}

/// As [`subscribe`], for `cfg` (its ring made 4,096 slots); also returns the definitions its Accept carried.
fn subscribe_with(mut cfg: SubscriberConfig) -> (Symbology, JoinHandle<Vec<BookUpdate>>) {
    cfg.ring_slots = 4096;
    let mut sub = Subscriber::connect(&cfg).expect("subscribe");
    assert_eq!(sub.book_kind(), mdfan_subscriber::BookKind::Mbo, "ITCH 5.0 builds order books");
    let symbology = sub.symbology().clone();
    // A live feed does not wait for subscribers: the first heartbeat says the hot loop serves this session, so
    // nothing the test sends after it goes out before the subscriber is there.
    let (deadline, mut live) = (Instant::now() + WATCHDOG, false);
    while !live {
        assert!(Instant::now() < deadline, "watchdog: no heartbeat");
        sub.poll(16, |e| live |= matches!(e, Event::Record(r) if r.kind() == Some(Kind::Heartbeat)));
        let _ = sub.maintain_if_due();
        std::thread::yield_now();
    }
    let h = std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber not ended");
            let n = sub.poll(256, |e| {
                if let Event::Record(r) = e {
                    // A snapshot would mean the subscriber joined after records went out: not the case here,
                    // and its records are not the feed's.
                    if r.flags & mdfan_subscriber::flags::SNAPSHOT == 0
                        && !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream))
                    {
                        got.push(*r);
                    }
                }
            });
            if n == 0 {
                std::thread::yield_now();
            }
            if let Some(Health::Ended(_)) = sub.maintain_if_due() {
                return got;
            }
        }
    });
    (symbology, h)
}

/// Waits (watchdog) until `what` holds for the publisher's counters.
fn wait_for(c: &MoldCounters, what: &str, f: impl Fn(&mdfan_publisher::live_itch::MoldReport) -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !f(&c.report()) {
        assert!(Instant::now() < deadline, "watchdog: {what}: {:?}", c.report());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The publisher's thread.
type Running = std::thread::JoinHandle<Result<RunReport, mdfan_publisher::PublisherError>>;

fn run(p: Publisher) -> (Running, Arc<MoldCounters>, [SocketAddrV4; 2], String) {
    let counters = p.mold_counters().expect("a live ITCH feed has MoldUDP64 counters");
    let lines = p.line_addrs().expect("a live feed has lines");
    let endpoint = p.local_addr().to_string();
    let h = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))));
    (h, counters, lines, endpoint)
}

fn of_kind(got: &[BookUpdate], k: Kind) -> Vec<&BookUpdate> {
    got.iter().filter(|r| r.kind() == Some(k)).collect()
}

/// Shares and orders per side of the META adds.
fn meta_sides(got: &[BookUpdate]) -> [(u64, u64, i64, i64); 2] {
    [Side::Bid, Side::Ask].map(|side| {
        let adds: Vec<&BookUpdate> =
            of_kind(got, Kind::Add).into_iter().filter(|r| r.instrument_id == META && r.side == side as u8).collect();
        let shares = adds.iter().map(|r| u64::from(r.size)).sum();
        let lo = adds.iter().map(|r| r.price_e9).min().unwrap_or(0);
        let hi = adds.iter().map(|r| r.price_e9).max().unwrap_or(0);
        (adds.len() as u64, shares, lo, hi)
    })
}

const E7: i64 = 10_000_000; // cents to 1e-9

/// The README's META packet: bids 19 orders at 80.00-80.52, 562 shares; asks 19 orders at 357.33-358.00, 499.
const META_REFERENCE: [(u64, u64, i64, i64); 2] =
    [(19, 562, 8_000 * E7, 8_052 * E7), (19, 499, 35_733 * E7, 35_800 * E7)];

#[test]
fn the_bundled_nasdaq_packets_on_lines_a_and_b_reach_a_subscriber_with_every_hole_reported() {
    // No re-request server: a hole waits retransmit_timeout_ms (for the other line), then is given up. The
    // capture's excerpts are sparse (no two packets consecutive): with confirm_packets = 1 each packet's word is
    // taken, for the start and for the jumps (the default 3 holds them: publisher/tests, the stray tests).
    let extra = "retransmit_timeout_ms = 5\nconfirm_packets = 1\n";
    let (h, counters, [a, b], endpoint) = run(publisher(None, true, extra));
    let sub = subscribe(&endpoint);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (mut messages, mut lost) = (0u64, 0u64);
    let mut next = 0u64;
    for p in nasdaq_packets() {
        let mold = Packet::parse(&p).unwrap();
        if next != 0 {
            lost += mold.sequence_number - next;
        }
        next = mold.next_sequence_number();
        messages += u64::from(mold.message_count);
        tx.send_to(&p, a).unwrap();
        tx.send_to(&p, b).unwrap();
        // One packet at a time: the hole before it is given up before the next comes, so which locates it marks
        // stale does not depend on the machine's pace.
        wait_for(&counters, "messages handed out and holes given up", |r| {
            r.messages == messages && r.given_up_messages == lost && r.duplicates == messages
        });
        if mold.sequence_number == 14_757_701 {
            // After the first packet set the session: a BX packet (session 000010059D) and a copy of the first
            // packet cut by one byte (its count says 1 message, its bytes hold less) are counted and dropped.
            tx.send_to(&capture("bx/OrderDeleteMessage.pcap")[0], a).unwrap();
            tx.send_to(&p[..p.len() - 1], a).unwrap();
            wait_for(&counters, "foreign and bad packets", |r| r.foreign_session == 1 && r.bad_packets == 1);
        }
    }
    let report = h.join().unwrap().expect("publisher run");
    let got = sub.join().unwrap();
    let mold = report.moldudp64.expect("the MoldUDP64 counters are in the run report");
    // 9 Nasdaq packets, 46 messages (README "Totals"), from 14,757,701 to 34,147,961: the rest are holes.
    assert_eq!((mold.packets, mold.messages, mold.duplicates), ([11, 9, 0], 46, 46));
    assert_eq!((mold.gaps, mold.given_up_messages), (7, 34_147_961 - 14_757_701 + 1 - 46));
    assert!(mold.given_up_holes >= 7, "{mold:?}");
    assert_eq!((mold.requests, mold.retransmitted, mold.foreign_session, mold.bad_packets), (0, 0, 1, 1));
    // Three of the seven holes between the capture's packets are 65,536 messages or more (the window): the packet
    // after each is a jump, taken on its own word (N = 1), never held.
    assert_eq!((mold.jumps_held, mold.jumps_taken), (0, 3), "{}", mold.line());
    // A 37 + F 2 = 39 adds: IVOO (locate 5528, ref 23508286, B 1600 @ 87.39) and the 38 of META.
    let adds = of_kind(&got, Kind::Add);
    assert_eq!(adds.len(), 39);
    let ivoo = adds.iter().find(|r| r.instrument_id == 5528).expect("the IVOO add");
    assert_eq!(
        (ivoo.order_id, ivoo.side, ivoo.size, ivoo.price_e9, ivoo.venue_seq()),
        (23_508_286, Side::Bid as u8, 1600, 8_739 * E7, 14_757_721)
    );
    let meta_seqs: Vec<u64> = adds.iter().filter(|r| r.instrument_id == META).map(|r| r.venue_seq()).collect();
    assert_eq!(meta_seqs, (META_FIRST..META_FIRST + 38).collect::<Vec<_>>());
    assert_eq!(meta_sides(&got), META_REFERENCE);
    // Every locate seen before the last hole is marked stale exactly once (unknown references of U, D, E, and
    // the holes); AMC (locate 464, H) is first seen after the last hole: stale on sight (its first messages may
    // have been in a hole).
    let mut stale: Vec<u32> = of_kind(&got, Kind::InstrumentStale).iter().map(|r| r.instrument_id).collect();
    stale.sort_unstable();
    assert_eq!(stale, [464, 2345, 2737, 3517, 3731, 5528, 6462, 6514, 7603]);
    assert_eq!(mold.stale_records, 9);
}

/// A re-request server on 127.0.0.1: answers each request with the messages it asks for, from `messages`, in
/// packets of up to 10; with `silent`, reads requests and never answers. Returns its address and the requests
/// it got.
fn server(
    messages: Vec<(u64, Vec<u8>)>,
    silent: bool,
    stop: Arc<AtomicBool>,
) -> (SocketAddrV4, JoinHandle<Vec<(u64, u16)>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let addr = match sock.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let h = std::thread::spawn(move || {
        let mut asked = Vec::new();
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
            let (session, seq, count) =
                mdfan_feed::mold_session::parse_request(&buf[..n]).expect("a 20-byte MoldUDP64 request packet");
            assert_eq!(&session, SESSION);
            asked.push((seq, count));
            if silent {
                continue;
            }
            let wanted: Vec<&(u64, Vec<u8>)> =
                messages.iter().filter(|(s, _)| (seq..seq + u64::from(count)).contains(s)).collect();
            for chunk in wanted.chunks(10) {
                let body: Vec<Vec<u8>> = chunk.iter().map(|(_, m)| m.clone()).collect();
                sock.send_to(&downstream(chunk[0].0, chunk.len() as u16, &body), from).unwrap();
            }
        }
        asked
    });
    (addr, h)
}

/// Sends the META messages one per packet on line A, dropping those `lost` says, then a heartbeat (which shows
/// a loss at the tail) and, once `done` holds, end of session.
fn play_meta(
    a: SocketAddrV4,
    lost: &[u64],
    counters: &MoldCounters,
    done: impl Fn(&mdfan_publisher::live_itch::MoldReport) -> bool,
) {
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (seq, m) in meta_messages() {
        if !lost.contains(&seq) {
            tx.send_to(&downstream(seq, 1, &[m]), a).unwrap();
        }
    }
    tx.send_to(&downstream(META_FIRST + 38, 0, &[]), a).unwrap();
    wait_for(counters, "every hole answered or given up", done);
    tx.send_to(&downstream(META_FIRST + 38, END_OF_SESSION, &[]), a).unwrap();
}

/// Seeded loss: the META sequence numbers lost on line A (never the first, which starts the session).
fn seeded_loss(seed: u64) -> Vec<u64> {
    let mut x = seed;
    (META_FIRST + 1..META_FIRST + 38)
        .filter(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 33).is_multiple_of(4)
        })
        .collect()
}

/// Runs of consecutive sequence numbers in `seqs` (sorted).
fn runs(seqs: &[u64]) -> u64 {
    seqs.iter().enumerate().filter(|(i, s)| *i == 0 || seqs[i - 1] + 1 != **s).count() as u64
}

#[test]
fn seeded_loss_is_filled_from_the_retransmission_server_and_nothing_is_missing() {
    let lost = seeded_loss(7);
    assert!(runs(&lost) >= 2, "seed 7 loses {lost:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, srv) = server(meta_messages(), false, Arc::clone(&stop));
    let (h, counters, [a, _], endpoint) = run(publisher(Some(addr), false, "retransmit_timeout_ms = 200\n"));
    let sub = subscribe(&endpoint);
    play_meta(a, &lost, &counters, |r| r.messages == 38);
    let report = h.join().unwrap().expect("publisher run");
    stop.store(true, Ordering::Relaxed);
    let asked = srv.join().unwrap();
    let got = sub.join().unwrap();
    let mold = report.moldudp64.unwrap();
    assert_eq!(
        (mold.messages, mold.retransmitted, mold.given_up_holes, mold.stale_records),
        (38, lost.len() as u64, 0, 0)
    );
    assert_eq!(mold.requests, asked.len() as u64);
    // Each request asks for a span from a lost message (up to the highest one received then); together they
    // cover every lost message.
    assert!(asked.iter().all(|(seq, _)| lost.contains(seq)), "{asked:?} against {lost:?}");
    for l in &lost {
        assert!(asked.iter().any(|&(seq, n)| (seq..seq + u64::from(n)).contains(l)), "{l} never asked: {asked:?}");
    }
    let seqs: Vec<u64> = of_kind(&got, Kind::Add).iter().map(|r| r.venue_seq()).collect();
    assert_eq!(seqs, (META_FIRST..META_FIRST + 38).collect::<Vec<_>>(), "every message, in order");
    assert_eq!(meta_sides(&got), META_REFERENCE);
    assert!(of_kind(&got, Kind::InstrumentStale).is_empty());
}

#[test]
fn a_server_that_never_answers_ends_in_holes_reported_downstream_and_counted() {
    let lost = seeded_loss(7);
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, srv) = server(meta_messages(), true, Arc::clone(&stop));
    let (h, counters, [a, _], endpoint) =
        run(publisher(Some(addr), false, "retransmit_timeout_ms = 5\nretransmit_retries = 2\n"));
    let sub = subscribe(&endpoint);
    let holes = runs(&lost);
    play_meta(a, &lost, &counters, |r| r.given_up_holes == holes);
    let report = h.join().unwrap().expect("publisher run");
    stop.store(true, Ordering::Relaxed);
    let asked = srv.join().unwrap();
    let got = sub.join().unwrap();
    let mold = report.moldudp64.unwrap();
    // Each span (from the oldest hole to the highest message received when it was asked for; how many depends
    // on how far the packets had come) is asked 1 + 2 times, then every hole in it is given up.
    let spans = mold.requests / 3;
    assert!((1..=holes).contains(&spans), "{mold:?}");
    assert_eq!((mold.requests, mold.retries, asked.len() as u64), (3 * spans, 2 * spans, 3 * spans));
    assert_eq!((mold.given_up_holes, mold.given_up_messages), (holes, lost.len() as u64));
    assert_eq!((mold.messages, mold.retransmitted), (38 - lost.len() as u64, 0));
    // The first request starts at the first lost message and covers its run at least.
    let first_len = (0..lost.len()).take_while(|i| lost[*i] == lost[0] + *i as u64).count();
    assert!(asked[0].0 == lost[0] && usize::from(asked[0].1) >= first_len, "{asked:?} against {lost:?}");
    // The hole reaches the subscriber: META (the only locate seen) is marked stale, once.
    let stale = of_kind(&got, Kind::InstrumentStale);
    assert_eq!(stale.len(), 1);
    assert_eq!((stale[0].instrument_id, stale[0].venue_seq()), (META, lost[0]));
    // An order-level stale mark (wire::record, "Stale marks"): flag LAST, not MBP; order_id 0 for messages lost.
    // mdfan-subscribe prints it `cause=lost_messages first_lost=..` and counts it against META's order book.
    assert_eq!((stale[0].flags, stale[0].order_id, stale[0].size), (mdfan_subscriber::flags::LAST, 0, 0));
    assert_eq!(of_kind(&got, Kind::Add).len(), 38 - lost.len());
}

/// The reason the publisher gave for refusing a subscriber asking for `symbols`.
fn refused(endpoint: &str, symbols: &[&str]) -> String {
    let mut cfg = SubscriberConfig::new(endpoint, "refused");
    cfg.ring_slots = 4096;
    cfg.symbols = Some(symbols.iter().map(|s| s.to_string()).collect());
    match Subscriber::connect(&cfg) {
        Err(SubscribeError::Rejected { reason, .. }) => reason,
        Err(e) => panic!("not a refusal: {e}"),
        Ok(_) => panic!("{symbols:?} accepted"),
    }
}

#[test]
fn stock_directory_messages_on_the_line_let_later_subscribers_subscribe_by_symbol_with_the_definition() {
    // Two packets make the session here: each packet's word sets the start (confirm_packets = 1).
    let (h, counters, [a, _], endpoint) = run(publisher(None, false, "confirm_packets = 1\n"));
    // Before any R message the publisher knows no symbol; a subscriber attached now gets no definitions.
    let reason = refused(&endpoint, &["META"]);
    assert_eq!(
        reason,
        "field symbols: META not known to this publisher (it knows no symbols yet: no symbol mappings, symbol file \
         or definition the feed gave so far)"
    );
    let (early_defs, early) = subscribe_with(SubscriberConfig::new(&endpoint, "early"));
    assert!(early_defs.is_empty(), "{early_defs:?}");
    // Three R messages just before the META packet (META_FIRST - 3 ..): locate 6514 as FB, 5528 as IVOO, then
    // 6514 again as META, which replaces FB. Stamped as META's first message.
    let meta = meta_messages();
    let stamp = meta[0].1[5..11].iter().fold(0u64, |ns, &b| ns << 8 | u64::from(b));
    let directory = [
        itch_messages::stock_directory(META as u16, b"FB      ", stamp),
        itch_messages::stock_directory(5528, b"IVOO    ", stamp),
        itch_messages::stock_directory(META as u16, b"META    ", stamp),
    ];
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST - 3, 3, &directory), a).unwrap();
    wait_for(&counters, "the Stock Directory messages handed out", |r| r.messages == 3);
    // A subscriber attaching now names META by symbol and gets its definition (4 decimals); FB is gone.
    assert_eq!(
        refused(&endpoint, &["FB"]),
        "field symbols: FB not known to this publisher (it knows 2 symbols: IVOO, META)"
    );
    let mut cfg = SubscriberConfig::new(&endpoint, "late");
    cfg.symbols = Some(vec!["META".into()]);
    let (late_defs, late) = subscribe_with(cfg);
    let defs: Vec<InstrumentDef> = late_defs.iter().cloned().collect();
    assert_eq!(defs, [InstrumentDef { tick_size_e9: 100_000, ..InstrumentDef::new(META, "META") }]);
    assert_eq!(late_defs.format_price(META, 8_000 * E7), "80.0000");
    // The META packet (38 adds), then end of session.
    let packet = capture("nasdaq/Multiple.Packets.pcap")
        .into_iter()
        .find(|p| Packet::parse(p).unwrap().message_count == 38)
        .unwrap();
    tx.send_to(&packet, a).unwrap();
    wait_for(&counters, "the META adds handed out", |r| r.messages == 41);
    tx.send_to(&downstream(META_FIRST + 38, END_OF_SESSION, &[]), a).unwrap();
    let report = h.join().unwrap().expect("publisher run");
    let mold = report.moldudp64.unwrap();
    assert_eq!((mold.messages, mold.gaps, mold.given_up_holes, mold.definitions_dropped), (41, 0, 0, 0));
    // The late subscriber gets META's records, the reference adds; the early one got the same adds, no symbols.
    let (late, early) = (late.join().unwrap(), early.join().unwrap());
    assert!(late.iter().all(|r| r.instrument_id == META), "only META's records");
    assert_eq!(meta_sides(&late), META_REFERENCE);
    assert_eq!(meta_sides(&early), META_REFERENCE);
    assert_eq!(of_kind(&late, Kind::Add).len(), 38);
}

/// The META packet's messages in one packet on line A, its 10th (an add) cut to 20 of its 36 bytes (the MoldUDP64
/// framing stays whole: its length prefix says 20): that message does not decode, so it is counted and META's
/// book is marked stale at its sequence number (one `InstrumentStale`), never left silently short of an order;
/// the other 37 adds arrive.
#[test]
fn a_message_that_does_not_decode_marks_its_instrument_stale() {
    // One packet makes the session here: its word sets the start (confirm_packets = 1).
    let (h, counters, [a, _], endpoint) = run(publisher(None, false, "confirm_packets = 1\n"));
    let sub = subscribe(&endpoint);
    let mut messages = meta_bodies();
    assert_eq!((messages[9][0], messages[9].len()), (b'A', 36));
    messages[9].truncate(20);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST, 38, &messages), a).unwrap();
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    assert_eq!((mold.messages, mold.bad_packets, mold.stale_records), (38, 1, 1), "{}", mold.line());
    assert_eq!(of_kind(&got, Kind::Add).len(), 37);
    let stale: Vec<_> = of_kind(&got, Kind::InstrumentStale).iter().map(|r| (r.instrument_id, r.venue_seq())).collect();
    assert_eq!(stale, [(META, META_FIRST + 9)]);
}

/// Line A lists its source (127.0.0.1). A forged copy of the META packet, its 10th message cut short, sent first
/// from 127.0.0.2: without the source check it wins arbitration (one bad message, META marked stale, 37 adds);
/// with it, it is dropped and counted, and the real packet that follows gives every add.
#[test]
fn a_forged_copy_from_a_source_the_line_does_not_list_is_dropped_and_counted() {
    let line_a = "{ addr = \"127.0.0.1:0\", sources = [\"127.0.0.1\"] }";
    let (h, counters, [a, _], endpoint) = run(publisher_on(line_a, None, false, "confirm_packets = 1\n"));
    let sub = subscribe(&endpoint);
    let messages = meta_bodies();
    let mut forged = messages.clone();
    forged[9].truncate(20);
    let foreign = UdpSocket::bind("127.0.0.2:0").expect("127.0.0.2 is a loopback address");
    foreign.send_to(&downstream(META_FIRST, 38, &forged), a).unwrap();
    wait_for(&counters, "the forged packet dropped", |r| r.foreign_sources == [1, 0]);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST, 38, &messages), a).unwrap();
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    assert_eq!((mold.messages, mold.bad_packets, mold.stale_records, mold.foreign_sources), (38, 0, 0, [1, 0]));
    assert!(mold.line().contains(" foreign_session=0 foreign_sources=1/0 bad_packets=0 "), "{}", mold.line());
    assert_eq!(of_kind(&got, Kind::Add).len(), 38);
    assert_eq!(meta_sides(&got), META_REFERENCE);
    assert!(of_kind(&got, Kind::InstrumentStale).is_empty());
}

/// A forged end of session mid-stream (the session's name, the next sequence number, count 0xFFFF: anyone on the
/// multicast network can send it) does not end the day: the venue's next packet contradicts it (counted), every
/// META message reaches the subscriber in order, and the venue's own end ends the run.
#[test]
fn a_forged_end_of_session_mid_stream_is_contradicted_and_the_day_goes_on() {
    let (h, counters, [a, _], endpoint) = run(publisher(None, false, "confirm_packets = 1\n"));
    let sub = subscribe(&endpoint);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let messages = meta_bodies();
    tx.send_to(&downstream(META_FIRST, 19, &messages[..19]), a).unwrap();
    wait_for(&counters, "the first 19 messages handed out", |r| r.messages == 19);
    tx.send_to(&downstream(META_FIRST + 19, END_OF_SESSION, &[]), a).unwrap();
    tx.send_to(&downstream(META_FIRST + 19, 19, &messages[19..]), a).unwrap();
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    assert_eq!((mold.messages, mold.ends_contradicted, mold.stale_records), (38, 1, 0), "{}", mold.line());
    assert!(mold.line().contains(" ends_contradicted=1 "), "{}", mold.line());
    let seqs: Vec<u64> = of_kind(&got, Kind::Add).iter().map(|r| r.venue_seq()).collect();
    assert_eq!(seqs, (META_FIRST..META_FIRST + 38).collect::<Vec<_>>(), "every message, in order");
    assert_eq!(meta_sides(&got), META_REFERENCE);
}

/// One stray packet of the right session at sequence number 10^12, mid-stream on line A (an adversarial tester's
/// datagram): the session receiver holds it as a suspect jump (counted, never acted on alone), so no hole is
/// opened, nothing is requested or given up, every META message reaches the subscriber in order, and the run
/// ends on idle (which needs no open hole).
#[test]
fn a_stray_packet_far_ahead_mid_stream_is_held_and_the_run_ends() {
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, srv) = server(meta_messages(), true, Arc::clone(&stop));
    let (h, counters, [a, _], endpoint) = run(publisher(Some(addr), false, "retransmit_timeout_ms = 5\n"));
    let sub = subscribe(&endpoint);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let meta = meta_messages();
    for (i, (seq, m)) in meta.iter().enumerate() {
        tx.send_to(&downstream(*seq, 1, std::slice::from_ref(m)), a).unwrap();
        if i == 18 {
            tx.send_to(&downstream(1_000_000_000_000, 1, std::slice::from_ref(&meta[0].1)), a).unwrap();
        }
    }
    wait_for(&counters, "every message handed out, the stray held", |r| r.messages == 38 && r.jumps_held == 1);
    let report = h.join().unwrap().expect("publisher run ends on idle");
    stop.store(true, Ordering::Relaxed);
    let asked = srv.join().unwrap();
    let got = sub.join().unwrap();
    let mold = report.moldudp64.unwrap();
    assert_eq!(
        (mold.messages, mold.gaps, mold.requests, mold.given_up_holes, mold.given_up_messages),
        (38, 0, 0, 0, 0),
        "{}",
        mold.line()
    );
    assert_eq!((mold.jumps_held, mold.jumps_taken, asked.len()), (1, 0, 0));
    assert!(
        mold.line().ends_with(" jumps_held=1 jumps_taken=0 ends_contradicted=0 stamps=a:0/39/0,b:0/0/0 skipped=none"),
        "{}",
        mold.line()
    );
    let seqs: Vec<u64> = of_kind(&got, Kind::Add).iter().map(|r| r.venue_seq()).collect();
    assert_eq!(seqs, (META_FIRST..META_FIRST + 38).collect::<Vec<_>>(), "every message, in order");
    assert_eq!(meta_sides(&got), META_REFERENCE);
    assert!(of_kind(&got, Kind::InstrumentStale).is_empty());
}

/// Connects a subscriber to instrument META only and returns, once its first heartbeat came (its snapshot, if any,
/// is before it), every record it got so far but heartbeats, and a thread that collects the rest to the end.
fn subscribe_meta_only(endpoint: &str) -> (Vec<BookUpdate>, JoinHandle<Vec<BookUpdate>>) {
    let mut cfg = SubscriberConfig::new(endpoint, "meta-only");
    cfg.ring_slots = 4096;
    cfg.instruments = Some(vec![META]);
    let mut sub = Subscriber::connect(&cfg).expect("subscribe");
    let (deadline, mut first, mut live) = (Instant::now() + WATCHDOG, Vec::new(), false);
    while !live {
        assert!(Instant::now() < deadline, "watchdog: no heartbeat");
        sub.poll(16, |e| match e {
            Event::Record(r) if r.kind() == Some(Kind::Heartbeat) => live = true,
            Event::Record(r) => first.push(*r),
            _ => {}
        });
        let _ = sub.maintain_if_due();
        std::thread::yield_now();
    }
    let h = std::thread::spawn(move || {
        let (mut got, deadline) = (Vec::new(), Instant::now() + WATCHDOG);
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber not ended");
            sub.poll(256, |e| {
                if let Event::Record(r) = e {
                    if !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) {
                        got.push(*r);
                    }
                }
            });
            if let Some(Health::Ended(_)) = sub.maintain_if_due() {
                return got;
            }
            std::thread::yield_now();
        }
    });
    (first, h)
}

/// The lines go quiet after the META packet's first 19 messages for longer than `lines.silent_after_ms` (500 ms),
/// but for a forged stream from 127.0.0.2 (line A lists 127.0.0.1), one packet every 100 ms, and a replay of the
/// 19 messages handed out, which must not hide the silence (they did: every datagram read counted); then the
/// other 19 come. Subscribers get one `FeedStatus` silent record after the 19th add and one live record
/// before the 20th (the stream does not end); a subscriber that joins during the silence, filtered to META alone,
/// learns the silent state before its first heartbeat, then gets the live record; the counters say one silence, over.
#[test]
fn a_feed_that_goes_quiet_is_reported_silent_then_live_and_a_joiner_during_the_silence_learns_it() {
    use mdfan_subscriber::{flags, FeedHealth, FeedState, CHANNEL_INSTRUMENT_ID};
    let line_a = "{ addr = \"127.0.0.1:0\", sources = [\"127.0.0.1\"] }";
    let extra = "silent_after_ms = 500\nconfirm_packets = 1\n";
    let (h, counters, [a, _], endpoint) = run(publisher_on(line_a, None, false, extra));
    let sub = subscribe(&endpoint);
    let messages = meta_bodies();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST, 19, &messages[..19]), a).unwrap();
    wait_for(&counters, "the first 19 messages handed out", |r| r.messages == 19);
    let foreign = UdpSocket::bind("127.0.0.2:0").expect("127.0.0.2 is a loopback address");
    let forged = downstream(META_FIRST + 19, 19, &messages[19..]);
    let mut sent = 0u64;
    while counters.report().silent_now == 0 {
        assert!(sent < 100, "a forged stream kept the feed live: {:?}", counters.report());
        foreign.send_to(&forged, a).unwrap();
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    // and, silent, three more do not make it live again
    for _ in 0..3 {
        foreign.send_to(&forged, a).unwrap();
    }
    wait_for(&counters, "the forged packets dropped", |r| r.foreign_sources == [sent + 3, 0]);
    assert_eq!((counters.report().silent_now, counters.report().silences), (1, 1));
    // nor does a replay, from the venue's own source, of the 19 messages already handed out
    tx.send_to(&downstream(META_FIRST, 19, &messages[..19]), a).unwrap();
    wait_for(&counters, "the replay taken as duplicates", |r| r.duplicates == 19);
    assert_eq!((counters.report().silent_now, counters.report().silences), (1, 1));
    let (snapshot, joiner) = subscribe_meta_only(&endpoint);
    tx.send_to(&downstream(META_FIRST + 19, 19, &messages[19..]), a).unwrap();
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    let ((mold, got), joined) = (end_session(&tx, a, h, sub), joiner.join().unwrap());
    assert_eq!((mold.messages, mold.silences, mold.silent_now), (38, 1, 0));
    assert!(mold.line().contains(" send_errors=0 silences=1 silent_now=0 "), "{}", mold.line());

    // The early subscriber: 19 adds, silent, live, 19 adds.
    let kinds: Vec<Kind> = got.iter().filter_map(|r| r.kind()).collect();
    let at = |k: Kind, state| got.iter().position(|r| r.kind() == Some(k) && r.feed_state() == Some(state));
    let (silent, live) =
        (at(Kind::FeedStatus, FeedState::Silent).unwrap(), at(Kind::FeedStatus, FeedState::Live).unwrap());
    assert_eq!(kinds.iter().filter(|k| **k == Kind::FeedStatus).count(), 2);
    assert_eq!((silent, live), (19, 20), "{kinds:?}");
    assert!(kinds[..19].iter().chain(&kinds[21..]).all(|k| *k == Kind::Add) && kinds.len() == 40, "{kinds:?}");
    let (s, l) = (got[silent], got[live]);
    assert_eq!(
        (s.instrument_id, s.order_id, s.size, s.flags),
        (CHANNEL_INSTRUMENT_ID, 500_000_000, 1, flags::LAST | flags::BAD_TS_RECV)
    );
    assert_eq!(s.venue_seq(), META_FIRST + 18, "the last message before the silence");
    assert_eq!((l.instrument_id, l.size, l.venue_seq()), (CHANNEL_INSTRUMENT_ID, 1, META_FIRST + 18));
    assert!(l.order_id > 500_000_000 && l.ts_event_ns > s.ts_event_ns, "the silence outlasted its bound: {l:?}");
    assert_eq!(meta_sides(&got), META_REFERENCE);

    // The joiner, filtered to META: before its first heartbeat, the 19 resting orders and the silent state. The
    // state comes in the snapshot, or, when the snapshot was cut before the publisher's books had applied the
    // silent record, right after it from the journal (both seen on this host; `BookKeeper`'s unit test pins the
    // snapshot's copy). Then live, and the other 19 adds.
    let mut health = FeedHealth::default();
    let snap_status: Vec<&BookUpdate> = snapshot.iter().filter(|r| r.kind() == Some(Kind::FeedStatus)).collect();
    assert_eq!(snap_status.len(), 1, "{snapshot:?}");
    assert!(health.apply(snap_status[0]) && health.silent, "{:?}", snap_status[0]);
    assert_eq!((snap_status[0].size, snap_status[0].order_id), (1, 500_000_000));
    assert_eq!(snapshot.iter().filter(|r| r.kind() == Some(Kind::Add)).count(), 19);
    assert_eq!(joined.iter().filter(|r| r.kind() == Some(Kind::Add)).count(), 19);
    assert_eq!(joined[0].feed_state(), Some(FeedState::Live), "{:?}", joined[0]);
    assert!(health.apply(&joined[0]) && !health.silent && health.silences == 1 && health.last_silence_ns == l.order_id);
}

/// Lines A and B. The META packet on line A; then line B's copy of it with message 10's price changed (a line
/// that carries what the venue did not send). The copies are compared: the mismatch is counted and taken as a
/// loss of unknown content at that sequence number, so META (the one locate seen) is marked stale there; the 38
/// adds delivered are line A's, exact.
#[test]
fn a_copy_on_line_b_that_differs_from_the_message_handed_out_marks_the_channel_stale() {
    let (h, counters, [a, b], endpoint) = run(publisher(None, true, "confirm_packets = 1\n"));
    let sub = subscribe(&endpoint);
    let messages = meta_bodies();
    let mut other = messages.clone();
    assert_eq!(other[9][0], b'A', "an Add Order");
    *other[9].last_mut().unwrap() ^= 1; // the price's last byte
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST, 38, &messages), a).unwrap();
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    tx.send_to(&downstream(META_FIRST, 38, &other), b).unwrap();
    wait_for(&counters, "the copies compared", |r| r.duplicates == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    assert_eq!((mold.messages, mold.duplicates, mold.copy_mismatches, mold.stale_records), (38, 38, 1, 1));
    assert!(mold.line().contains(" duplicates=38 copy_mismatches=1 gaps=0 "), "{}", mold.line());
    assert_eq!(meta_sides(&got), META_REFERENCE, "line A's adds");
    let stale = of_kind(&got, Kind::InstrumentStale);
    assert_eq!(stale.len(), 1);
    assert_eq!((stale[0].instrument_id, stale[0].order_id, stale[0].venue_seq()), (META, 0, META_FIRST + 9));
    let last_add = got.iter().rposition(|r| r.kind() == Some(Kind::Add)).unwrap();
    assert!(got.iter().position(|r| r.kind() == Some(Kind::InstrumentStale)).unwrap() > last_add);
}

/// Issue 26's strays on a MoldUDP64 session with the default guard (3 packets at consecutive sequence numbers):
/// one packet of the right session at sequence number 10^12 sent to lines A and B before the feed (with
/// `start = "first_seen"` it used to set the start, and the same stray on both lines confirmed itself), then
/// the META messages one per packet on line A, with the same kind of stray sent to both lines after the 19th.
/// No stray sets the start or confirms a jump: every META message reaches the subscriber in order, nothing is
/// given up or stale, and the strays are counted as held, never taken.
#[test]
fn strays_before_the_feed_and_on_both_lines_set_no_start_and_confirm_no_jump() {
    // A retransmission server: the lines' sockets are read one after the other, so line B's stray may come
    // between line A's first packets and displace the first as a start candidate; the start is then still the
    // first, and its message a hole that is asked for (the arbiter's rule), never skipped.
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, srv) = server(meta_messages(), false, Arc::clone(&stop));
    let (h, counters, [a, b], endpoint) = run(publisher(Some(addr), true, "retransmit_timeout_ms = 5\n"));
    let sub = subscribe(&endpoint);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let meta = meta_messages();
    let stray = |seq: u64| downstream(seq, 1, std::slice::from_ref(&meta[0].1));
    for line in [a, b] {
        tx.send_to(&stray(1_000_000_000_000), line).unwrap();
    }
    for (i, (seq, m)) in meta.iter().enumerate() {
        tx.send_to(&downstream(*seq, 1, std::slice::from_ref(m)), a).unwrap();
        if i == 18 {
            for line in [a, b] {
                tx.send_to(&stray(2_000_000_000_000), line).unwrap();
            }
        }
    }
    wait_for(&counters, "every message handed out", |r| r.messages == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    stop.store(true, Ordering::Relaxed);
    let asked = srv.join().unwrap();
    assert_eq!(
        (mold.messages, mold.given_up_holes, mold.stale_records, mold.jumps_taken),
        (38, 0, 0, 0),
        "{}",
        mold.line()
    );
    // At most the first message was asked for (when line B's stray displaced it), and given.
    assert!(
        mold.gaps <= 1 && mold.retransmitted == mold.gaps && asked.len() as u64 == mold.requests,
        "{}",
        mold.line()
    );
    assert!(mold.jumps_held >= 1, "the strays are counted: {}", mold.line());
    let seqs: Vec<u64> = of_kind(&got, Kind::Add).iter().map(|r| r.venue_seq()).collect();
    assert_eq!(seqs, (META_FIRST..META_FIRST + 38).collect::<Vec<_>>(), "every message, in order");
    assert_eq!(meta_sides(&got), META_REFERENCE);
    assert!(of_kind(&got, Kind::InstrumentStale).is_empty());
}

/// A forged copy of the META packet (message 10's price changed) sent ahead of the real one from the feed's own
/// address, which no source check can tell apart: it wins arbitration, but the real copy that follows on line B
/// is compared with it and differs, so META is marked stale at that message (never a book told good that the
/// venue did not send) and the mismatch is counted.
#[test]
fn a_forged_packet_from_the_feeds_own_address_ahead_of_the_real_one_marks_the_instrument_stale() {
    let (h, counters, [a, b], endpoint) = run(publisher(None, true, "confirm_packets = 1\n"));
    let sub = subscribe(&endpoint);
    let messages = meta_bodies();
    let mut forged = messages.clone();
    *forged[9].last_mut().unwrap() ^= 1; // the price's last byte
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&downstream(META_FIRST, 38, &forged), a).unwrap();
    wait_for(&counters, "the forged copy handed out", |r| r.messages == 38);
    tx.send_to(&downstream(META_FIRST, 38, &messages), b).unwrap();
    wait_for(&counters, "the real copy compared", |r| r.duplicates == 38);
    let (mold, got) = end_session(&tx, a, h, sub);
    assert_eq!((mold.messages, mold.copy_mismatches, mold.stale_records), (38, 1, 1), "{}", mold.line());
    let stale = of_kind(&got, Kind::InstrumentStale);
    assert_eq!(stale.len(), 1);
    assert_eq!((stale[0].instrument_id, stale[0].venue_seq()), (META, META_FIRST + 9));
    // The forged add went out (its price one tick of the last byte off the real one's), then META stale.
    let add = |msgs: &[Vec<u8>]| i64::from(u32::from_be_bytes(msgs[9][32..36].try_into().unwrap()));
    let tenth = got.iter().find(|r| r.kind() == Some(Kind::Add) && r.venue_seq() == META_FIRST + 9).unwrap();
    assert_eq!(tenth.price_e9, add(&forged) * 100_000, "the forged copy's price");
    assert_ne!(add(&forged), add(&messages));
    let last_add = got.iter().rposition(|r| r.kind() == Some(Kind::Add)).unwrap();
    assert!(got.iter().position(|r| r.kind() == Some(Kind::InstrumentStale)).unwrap() > last_add, "then stale");
}
