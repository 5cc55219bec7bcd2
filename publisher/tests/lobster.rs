//! LOBSTER through the publisher (`format = "lobster"`): the AMZN level-1 sample of
//! data/lobster-nasdaq-2012-06-21-level1/ replayed to a subscriber of the library, subscribed by the symbol the
//! file name gives, whose price-level book ends at data/README.md's final level-1 book.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Health, Kind, MbpBooks, MbpLevel, Side, Subscriber, SubscriberConfig};

const MESSAGES: &str = "AMZN_2012-06-21_34200000_57600000_message_1.csv";

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/lobster-nasdaq-2012-06-21-level1").join(name)
}

#[test]
fn the_amzn_sample_replays_through_the_publisher_to_the_readme_level_1_book() {
    let text =
        format!("[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"lobster\"\npath = {:?}\n", data(MESSAGES));
    let publisher = Publisher::bind(Config::parse(&text, Path::new("lobster-test.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut cfg = SubscriberConfig::new(&endpoint, "lobster");
    cfg.symbols = Some(vec!["AMZN".into()]);
    let mut sub = Subscriber::connect(&cfg).unwrap();
    assert_eq!(sub.symbol(1), Some("AMZN"));
    assert_eq!(sub.book_kind(), mdfan_subscriber::BookKind::Mbp, "LOBSTER's records are its order-book file's levels");
    let mut books = MbpBooks::with_capacity(1);
    let (mut errors, mut gaps, mut trades, mut levels, mut last, mut other) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut first_ts_event_ns, mut last_venue_seq) = (None, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| match e {
            // Heartbeats (while the publisher waits) and the end of stream are the stream's, not the feed's.
            Event::Record(r) if matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) => {}
            Event::Record(r) => {
                match r.kind() {
                    Some(Kind::Trade) => trades += 1,
                    Some(k) if k.is_level() => levels += 1,
                    _ => other += 1,
                }
                if r.is_last() {
                    last += 1;
                }
                first_ts_event_ns.get_or_insert(r.ts_event_ns);
                last_venue_seq = r.venue_seq();
                if books.apply(r).is_err() {
                    errors += 1;
                }
            }
            Event::Gap { .. } => gaps += 1,
            _ => {}
        });
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            assert_eq!(end.as_str(), "end_of_stream");
            break;
        }
    }
    let report = run.join().unwrap().unwrap();
    assert_eq!(report.records, 66_491, "11,419 trades + 55,072 level-1 records (data/README.md, LOBSTER)");
    let checked = report.lobster.expect("a LOBSTER replay reports its check");
    assert_eq!((checked.messages, checked.rows_checked), (57_515, 57_514), "every row after the first, checked");
    assert_eq!(checked.line(), "feed format=lobster messages=57515 orderbook_rows_checked=57514");
    assert_eq!((trades, levels, other, errors, gaps), (11_419, 55_072, 0, 0, 0));
    assert_eq!((last, last_venue_seq), (57_515, 57_515), "one F_LAST per message, venue_seq = its line");
    // 2012-06-21 00:00 US Eastern (EDT, UTC-4) = 04:00 UTC, plus 34200.017459617 s.
    assert_eq!(first_ts_event_ns, Some(1_340_251_200_000_000_000 + 34_200_017_459_617));
    let book = books.get(1).unwrap();
    let lv = |price_e9, size| Some(MbpLevel { price_e9, size, orders: 0 });
    assert_eq!(book.bbo(), (lv(220_510_000_000, 249), lv(220_640_000_000, 100)), "bid 220.51 x 249 / ask 220.64 x 100");
    assert_eq!((book.level(Side::Bid, 2), book.level(Side::Ask, 2)), (None, None));
}

#[test]
fn lobster_config_errors_name_the_key() {
    let parse = |extra: &str| {
        let text = format!("[feed]\nformat = \"lobster\"\n{extra}");
        Config::parse(&text, Path::new("lobster.toml")).unwrap_err().to_string()
    };
    let e = parse("");
    assert!(e.ends_with("key feed.format: \"lobster\" needs feed.path (the message CSV to replay)"), "{e}");
    let e = parse(&format!("path = {:?}\nsession_date = \"2012-06-31x\"\n", data(MESSAGES)));
    assert!(e.contains("key feed.session_date: \"2012-06-31x\": want the file's trading day as YYYY-MM-DD"), "{e}");
    let text = "[feed]\nformat = \"dbn\"\npath = \"x.dbn\"\norderbook = \"y.csv\"\n";
    let e = Config::parse(text, Path::new("dbn.toml")).unwrap_err().to_string();
    assert!(e.contains("line 4: key feed.orderbook: only for feed.format = \"lobster\""), "{e}");
}

#[test]
fn a_missing_orderbook_file_is_refused_naming_it() {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"lobster\"\npath = {:?}\norderbook = \"nowhere_orderbook_1.csv\"\n",
        data(MESSAGES)
    );
    let e = Publisher::bind(Config::parse(&text, Path::new("/tmp/lobster.toml")).unwrap()).err().unwrap().to_string();
    assert!(e.starts_with("/tmp/nowhere_orderbook_1.csv: cannot open: "), "{e}");
}

/// Polls `sub` to its end of stream, applying every record to a price-level book; also returns the level records
/// that came in a snapshot.
fn drain(sub: &mut Subscriber) -> (MbpBooks, u64) {
    let (mut books, mut snapshot_levels) = (MbpBooks::with_capacity(1), 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| {
            if let Event::Record(r) = e {
                books.apply(r).unwrap();
                if r.flags & mdfan_subscriber::flags::SNAPSHOT != 0 && r.kind().is_some_and(Kind::is_level) {
                    snapshot_levels += 1;
                }
            }
        });
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            assert_eq!(end.as_str(), "end_of_stream");
            return (books, snapshot_levels);
        }
    }
}

#[test]
fn a_late_joiner_gets_the_level_1_book_in_its_snapshot() {
    // Paced (gaps shortened to 1 ms, 20x: about 3 s), so the second subscriber joins mid-stream.
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"lobster\"\npath = {:?}\npace = 20\nmax_gap_ms = 1\n",
        data(MESSAGES)
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("lobster-late.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut early = Subscriber::connect(&SubscriberConfig::new(&endpoint, "early")).unwrap();
    let first = std::thread::spawn(move || drain(&mut early));
    std::thread::sleep(Duration::from_millis(300));
    let mut late = Subscriber::connect(&SubscriberConfig::new(&endpoint, "late")).unwrap();
    let (late_books, late_snapshot_levels) = drain(&mut late);
    assert_eq!(late.stats().snapshots_received, 1);
    assert_eq!(late_snapshot_levels, 2, "the snapshot carries level 1 of both sides");
    let (early_books, early_snapshot_levels) = first.join().unwrap();
    assert_eq!(early_snapshot_levels, 0);
    run.join().unwrap().unwrap();
    let lv = |price_e9, size| Some(MbpLevel { price_e9, size, orders: 0 });
    for books in [&early_books, &late_books] {
        assert_eq!(books.get(1).unwrap().bbo(), (lv(220_510_000_000, 249), lv(220_640_000_000, 100)));
    }
}

#[test]
fn a_row_the_messages_cannot_give_ends_the_stream_with_feed_error_naming_the_line() {
    let dir = std::env::temp_dir().join(format!("mdfan-lobster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let messages = dir.join("XYZ_2012-06-21_34200000_57600000_message_1.csv");
    std::fs::write(&messages, "34200.1,1,1,100,2239500,-1\n34200.2,1,2,50,2239500,-1\n").unwrap();
    // Row 2 says 140 shares at the ask; the messages give 150.
    let book = dir.join("XYZ_2012-06-21_34200000_57600000_orderbook_1.csv");
    std::fs::write(&book, "2239500,100,2231800,100\n2239500,140,2231800,100\n").unwrap();
    let text = format!("[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"lobster\"\npath = {messages:?}\n");
    let publisher = Publisher::bind(Config::parse(&text, Path::new("lobster-bad.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut sub = Subscriber::connect(&SubscriberConfig::new(&endpoint, "bad")).unwrap();
    assert_eq!(sub.symbol(1), Some("XYZ"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let end = loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |_| {});
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            break end;
        }
    };
    assert_eq!(end.as_str(), "feed_error");
    let report = run.join().unwrap().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(report.records, 2, "message 1's two level records went out before the error");
    let e = report.feed_error.unwrap();
    let want = format!("{}: line 2: the level-1 book after message 2 does not match this row: ", book.display());
    assert!(e.starts_with(&want), "{e}");
}
