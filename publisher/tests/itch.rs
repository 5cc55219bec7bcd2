//! Nasdaq TotalView-ITCH 5.0 through the publisher (`format = "itch50"`): the BinaryFILE snippet of
//! data/nasdaq-itch50-20191230-binaryfile-excerpts/ replayed to a subscriber of the library, whose order books
//! equal the same file normalised in-process, and the HDS and QQQ books of that folder's README.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_feed::itch::{eastern_midnight_ns, ItchFile, ItchNormalizer};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Books, Event, Health, Level, Side, Subscriber, SubscriberConfig};

const SNIPPET: &str = "12302019_SNIPPET.NASDAQ_ITCH50";

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nasdaq-itch50-20191230-binaryfile-excerpts").join(name)
}

fn px(cents: i64) -> i64 {
    cents * 10_000_000
}

#[test]
fn the_itch_snippet_replays_through_the_publisher_to_the_readme_books() {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\npath = {:?}\nsession_date = \"2019-12-30\"\n",
        data(SNIPPET)
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("itch-test.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut sub = Subscriber::connect(&SubscriberConfig::new(&endpoint, "itch")).unwrap();
    let (mut books, mut errors, mut gaps) = (Books::new(), 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| match e {
            Event::Record(r) if books.apply(r).is_err() => errors += 1,
            Event::Gap { .. } => gaps += 1,
            _ => {}
        });
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            assert_eq!(end.as_str(), "end_of_stream");
            break;
        }
    }
    let report = run.join().unwrap().unwrap();
    // The same file normalised here: the records and books the publisher must have fanned out.
    let mut file = ItchFile::open(&data(SNIPPET)).unwrap();
    let mut norm = ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).unwrap(), 1024);
    let (mut want, mut records, mut want_errors, mut pos) = (Books::new(), 0u64, 0u64, 0u32);
    while let Some((_, m)) = file.next_message().unwrap() {
        pos += 1;
        for r in norm.normalize(&m, pos, 0).as_slice() {
            records += 1;
            if want.apply(r).is_err() {
                want_errors += 1;
            }
        }
    }
    assert_eq!(report.records, records, "every normalised record went out");
    assert_eq!((gaps, errors), (0, want_errors));
    let (got, exp) = (books.iter_sorted(), want.iter_sorted());
    assert_eq!(got.len(), exp.len());
    for ((id, b), (wid, w)) in got.iter().zip(&exp) {
        assert_eq!(id, wid);
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(b.top(side, usize::MAX), w.top(side, usize::MAX), "locate {id} {side:?}");
        }
    }
    // The excerpt README: HDS (locate 3672) and QQQ (locate 6556).
    let lv = |c, size, orders| Level { price_e9: px(c), size, orders };
    let hds = books.get(3672).unwrap();
    assert_eq!((hds.level_count(Side::Bid), hds.level_count(Side::Ask)), (22, 21));
    assert_eq!(hds.top(Side::Bid, 2), [lv(4007, 100, 1), lv(4005, 7, 1)]);
    assert_eq!(hds.top(Side::Ask, 3), [lv(4060, 100, 1), lv(4089, 100, 1), lv(4100, 369, 4)]);
    assert_eq!(books.get(6556).unwrap().bbo(), (Some(lv(21351, 100, 1)), Some(lv(21352, 500, 2))));
}

#[test]
fn an_itch_config_without_a_session_date_is_refused_naming_the_key() {
    let text = format!("[feed]\nformat = \"itch50\"\npath = {:?}\n", data(SNIPPET));
    let e = Config::parse(&text, Path::new("itch.toml")).unwrap_err().to_string();
    assert!(e.ends_with("key feed.session_date: \"\": \"itch50\" needs the file's trading day as YYYY-MM-DD"), "{e}");
    let bad_date = format!("{text}session_date = \"2019-13-30\"\n");
    let e = Config::parse(&bad_date, Path::new("itch.toml")).unwrap_err().to_string();
    assert!(e.contains("key feed.session_date: \"2019-13-30\": "), "{e}");
}
