//! Live ITCH 5.0 over MoldUDP64 end to end: `mdfan-feedsim` writes the bundled ESH4 DBN file as ITCH 5.0 framed in
//! MoldUDP64 (62,574 messages, ESH4 at stock locate 1) and plays it on line A to the publisher (format `itch50`
//! with `[lines]`, on 127.0.0.1 unicast) with seeded loss, answering the publisher's request packets from its
//! retransmission server. A subscriber built on the subscriber library keeps the order-level books.
//!
//! - With 2% loss and a server that answers: the subscriber's ESH4 book equals the DBN replay's reference
//!   (data/README.md: 11,217 orders, 922 / 565 levels, the top ten of each side), nothing is given up and nothing
//!   is marked stale.
//! - With the server dying once the 30,000th message is published: every message is either delivered or in a
//!   hole the publisher gave up and reported (delivered + given up = 62,574), and each hole reaches the subscriber
//!   as an `InstrumentStale` for ESH4: nothing is silently wrong.
//!
//! The play runs as fast as possible. The kernel may drop datagrams too when the feed thread falls behind on this
//! 2-core machine; those are requested and filled the same way (or, after the server died, given up and
//! reported), so the counts asserted here are the ones that hold whatever the kernel drops. While the server
//! answers, a request is re-sent after 1 s without an answer, 5 times, so a host stall does not give a hole up.
//! No timing is asserted; a watchdog fails a run that has not ended.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_feedsim::moldudp64::{
    capture_of, synthesize, MoldItch, RetransmitOptions, Session, SynthOptions, DEFAULT_MAX_PAYLOAD_BYTES,
    SYNTH_GROUP_A, SYNTH_GROUP_B,
};
use mdfan_feedsim::{run_capture, Impairment, RecoveryConfig, SimConfig, Summary};
use mdfan_publisher::config::Config;
use mdfan_publisher::live_itch::MoldReport;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Books, Event, Health, Kind, Level, Side, Subscriber, SubscriberConfig};

const SESSION: &str = "ESH4LIVE";
/// ESH4's stock locate: the encoder numbers the file's instruments from 1 (ESH4 is its only one).
const ESH4_LOCATE: u32 = 1;
/// Messages the encoder writes for the file (feedsim's own tests pin this).
const MESSAGES: u64 = 62_574;
const WATCHDOG: Duration = Duration::from_secs(180);

/// What the subscriber saw.
struct Seen {
    books: Books,
    book_errors: u64,
    gaps: u64,
    /// `InstrumentStale` records, by instrument.
    stale: Vec<u32>,
}

fn free_udp_port() -> SocketAddrV4 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    match s.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        std::net::SocketAddr::V6(_) => unreachable!("bound on IPv4"),
    }
}

/// Plays ESH4 as ITCH over MoldUDP64 with 2% seeded loss on line A into a live publisher and one subscriber;
/// the retransmission server stops answering once `die_after_seq` was published; the publisher re-sends a
/// request after `retransmit_timeout_ms`, `retries` times. Returns the publisher's
/// MoldUDP64 counters, what the subscriber saw, and feedsim's summary.
fn play(die_after_seq: Option<u64>, retransmit_timeout_ms: u64, retries: u32) -> (MoldReport, Seen, Summary) {
    let session = Session::new(SESSION).unwrap();
    let synth =
        synthesize(&esh4::main_file(), &SynthOptions { heartbeat_interval_ns: 0, ..SynthOptions::new(session) })
            .unwrap();
    assert_eq!(synth.last_seq, MESSAGES);
    let retransmit = free_udp_port();
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-12-24\"\n\n\
         [lines]\na = \"127.0.0.1:0\"\nretransmit = \"{retransmit}\"\nretransmit_timeout_ms = {retransmit_timeout_ms}\n\
         retransmit_retries = {retries}\nsession = \"{SESSION}\"\nstart = \"one\"\nrcvbuf_bytes = 33554432\n\
         end_after_idle_ms = 3000\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("live-itch-feedsim.toml")).unwrap()).unwrap();
    let line_a = publisher.line_addrs().expect("a live feed has lines")[0];
    let endpoint = publisher.local_addr().to_string();
    let running = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));

    let mut sub = Subscriber::connect(&SubscriberConfig::new(&endpoint, "itch-live")).expect("subscribe");
    // A live feed does not wait: the first heartbeat says the hot loop serves this session before anything plays.
    let deadline = Instant::now() + WATCHDOG;
    let mut live = false;
    while !live {
        assert!(Instant::now() < deadline, "watchdog: no heartbeat");
        sub.poll(16, |e| live |= matches!(e, Event::Record(r) if r.kind() == Some(Kind::Heartbeat)));
        let _ = sub.maintain_if_due();
        std::thread::yield_now();
    }
    let subscriber = std::thread::spawn(move || {
        let mut seen = Seen { books: Books::new(), book_errors: 0, gaps: 0, stale: Vec::new() };
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber not ended");
            let n = sub.poll(256, |e| match e {
                Event::Record(r) => {
                    if r.kind() == Some(Kind::InstrumentStale) {
                        seen.stale.push(r.instrument_id);
                    }
                    if seen.books.apply(r).is_err() {
                        seen.book_errors += 1;
                    }
                }
                Event::Gap { .. } => seen.gaps += 1,
                _ => {}
            });
            if n == 0 {
                std::thread::yield_now();
            }
            if let Some(Health::Ended(end)) = sub.maintain_if_due() {
                assert_eq!(end.as_str(), "end_of_stream");
                return seen;
            }
        }
    });

    let cfg = SimConfig {
        pcap: esh4::main_file(),
        line_a: None,
        line_b: None,
        send_a: line_a,
        send_b: line_a,
        speed: 0.0,
        impair_a: Impairment { loss: 0.02, ..Impairment::default() },
        impair_b: Impairment::default(),
        seed: 7,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: Some(RecoveryConfig { linger_ms: 150_000, ..RecoveryConfig::new(retransmit) }),
    };
    let retransmit = RetransmitOptions { die_after_seq, ..RetransmitOptions::default() };
    let mut feed = MoldItch { session, max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES, retransmit };
    let shutdown = AtomicBool::new(false);
    let (report, summary) = std::thread::scope(|s| {
        let sim = s.spawn(|| {
            run_capture(&cfg, capture_of(&synth.packets, false), [SYNTH_GROUP_A, SYNTH_GROUP_B], &mut feed, &shutdown)
        });
        // The publisher ends on the end-of-session packet (or 3 s of silence) once every message before it is
        // out or given up; the simulator's server lingers until then.
        let report = running.join().unwrap().expect("publisher run");
        shutdown.store(true, Ordering::Relaxed);
        (report, sim.join().unwrap().expect("feedsim run"))
    });
    let seen = subscriber.join().unwrap();
    (report.moldudp64.expect("the MoldUDP64 counters are in the run report"), seen, summary)
}

fn lv(l: (i64, u64, u32)) -> Level {
    Level { price_e9: l.0, size: l.1, orders: l.2 }
}

#[test]
fn esh4_as_itch_with_two_percent_loss_is_filled_by_retransmission_and_ends_on_the_reference_book() {
    let (mold, seen, summary) = play(None, 1_000, 5);
    println!("{summary}\n{mold:?}");
    // Seed 7's plan on line A: 896 of the 45,517 packets lost (feedsim's own test pins these).
    assert_eq!((summary.lines[0].read, summary.lines[0].dropped), (45_517, 896));
    assert_eq!(mold.messages, MESSAGES, "{mold:?}");
    assert_eq!((mold.given_up_holes, mold.given_up_messages, mold.stale_records), (0, 0, 0), "{mold:?}");
    assert!(mold.retransmitted > 0 && mold.requests > 0 && mold.packets[2] > 0, "{mold:?}");
    assert_eq!((mold.foreign_session, mold.bad_packets), (0, 0));
    assert_eq!((seen.gaps, seen.book_errors), (0, 0));
    assert!(seen.stale.is_empty(), "{:?}", seen.stale);
    let b = seen.books.get(ESH4_LOCATE).expect("ESH4's book");
    assert_eq!(b.order_count(), 11_217);
    assert_eq!((b.level_count(Side::Bid), b.level_count(Side::Ask)), (922, 565));
    assert_eq!(b.top(Side::Bid, 10), esh4::TOP_BIDS.map(lv));
    assert_eq!(b.top(Side::Ask, 10), esh4::TOP_ASKS.map(lv));
}

#[test]
fn a_retransmission_server_that_dies_mid_run_leaves_holes_that_are_reported_downstream_never_silent() {
    // The default 50 ms and 3 retries: a dead server costs 200 ms per span of up to 1,000 messages.
    let (mold, seen, summary) = play(Some(30_000), 50, 3);
    println!("{summary}\n{mold:?}");
    // Every message is accounted for: delivered, or in a hole given up and reported.
    assert_eq!(mold.messages + mold.given_up_messages, MESSAGES, "{mold:?}");
    assert!(mold.given_up_holes > 0 && mold.given_up_messages > 0, "seed 7 loses packets after 30,000: {mold:?}");
    // The first given-up hole marks every locate seen (ESH4 alone: locate 0 of the system events is no
    // instrument) stale, once: it stays stale (ITCH has no snapshot), and the mark reaches the subscriber.
    assert_eq!(mold.stale_records, 1, "{mold:?}");
    assert_eq!(seen.stale, [ESH4_LOCATE]);
    // Before it died the server answered: what was lost before 30,000 came back.
    assert!(mold.retransmitted > 0, "{mold:?}");
    assert_eq!(seen.gaps, 0, "the fan-out itself lost nothing");
}
