//! Nasdaq TotalView-ITCH 5.0 through the publisher (`format = "itch50"`): the BinaryFILE snippet of
//! data/nasdaq-itch50-20191230-binaryfile-excerpts/ replayed to a subscriber of the library, whose order books
//! equal the same file normalised in-process, and the HDS and QQQ books of that folder's README; symbols from
//! Stock Directory messages (subscribing by symbol) and trading status records (the start-of-day file).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_feed::itch::{eastern_midnight_ns, ItchFile, ItchNormalizer};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{
    BookUpdate, Books, Event, Health, Kind, Level, Side, StatusKind, Subscriber, SubscriberConfig, TradingStates,
};

#[path = "support/itch_messages.rs"]
mod itch_messages;

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
    let (mut want, mut records, mut want_errors, mut pos) = (Books::new(), 0u64, 0u64, 0u64);
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
    // Messages that give no record are counted by type, with the byte offset of the first (issue 26): the
    // README's 4 NOII (`I`) and the system event `Q` (start of market hours), found here by walking the file's
    // length prefixes (2 bytes, big-endian, then the message: its first byte the type).
    let raw = std::fs::read(data(SNIPPET)).unwrap();
    let first_of = |t: u8| {
        let mut at = 0usize;
        while raw[at + 2] != t {
            at += 2 + usize::from(u16::from_be_bytes([raw[at], raw[at + 1]]));
        }
        at as u64
    };
    let itch = report.itch_file.expect("an ITCH file replay reports its counts");
    assert_eq!(itch.skipped, [(b'I', 4, first_of(b'I')), (b'S', 1, first_of(b'S'))]);
    assert_eq!(itch.messages, 1000);
    assert_eq!(
        itch.line(),
        format!("feed format=itch50 messages=1000 skipped=I:4@{},S:1@{}", first_of(b'I'), first_of(b'S'))
    );
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

/// A Stock Directory message (ITCH 5.0 section 4.2.1, 39 bytes) with its BinaryFILE length prefix: the snippet
/// (cut after 09:30) has none, so the test puts this one for QQQ (locate 6556, as in the README) in front of it.
/// Framed with its 2-byte length prefix, as in a BinaryFILE.
fn stock_directory_message(locate: u16, symbol: &[u8; 8], timestamp_ns: u64) -> Vec<u8> {
    let m = itch_messages::stock_directory(locate, symbol, timestamp_ns);
    let mut framed = (m.len() as u16).to_be_bytes().to_vec();
    framed.extend(m);
    framed
}

/// Binds a publisher on `file` (waiting for 1 subscriber), runs it on a thread; the subscriber `name` asking
/// for `symbols` collects every record until the end of stream. Returns the records and the subscriber.
fn replay_to(file: &Path, name: &str, symbols: &[&str]) -> (Vec<BookUpdate>, Subscriber) {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\npath = {file:?}\nsession_date = \"2019-12-30\"\n"
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("itch-test.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut cfg = SubscriberConfig::new(&endpoint, name);
    // no symbols: every instrument
    cfg.symbols = (!symbols.is_empty()).then(|| symbols.iter().map(|s| s.to_string()).collect());
    let mut sub = Subscriber::connect(&cfg).unwrap();
    let (records, end) = read_to_end(&mut sub);
    assert_eq!(end, "end_of_stream");
    run.join().unwrap().unwrap();
    (records, sub)
}

/// Polls `sub` until its session ends (watchdog 120 s, a gap fails): its feed records (no heartbeat, no end of
/// stream) and how the session ended.
fn read_to_end(sub: &mut Subscriber) -> (Vec<BookUpdate>, &'static str) {
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| match e {
            Event::Record(r) if !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) => records.push(*r),
            Event::Gap { expected, got } => panic!("gap {expected}..{got}"),
            _ => {}
        });
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            return (records, end.as_str());
        }
    }
}

#[test]
fn a_subscriber_asking_for_qqq_by_symbol_gets_only_qqqs_records_and_the_readme_book() {
    let path = std::env::temp_dir().join(format!("mdfan-itch-qqq-{}.itch", std::process::id()));
    let mut bytes = stock_directory_message(6556, b"QQQ     ", 11_000_000_000_000);
    bytes.extend(std::fs::read(data(SNIPPET)).unwrap());
    std::fs::write(&path, &bytes).unwrap();
    let (records, sub) = replay_to(&path, "qqq", &["QQQ"]);
    let _ = std::fs::remove_file(&path);
    // The README: QQQ has 13 A and 2 D in the snippet, all of orders added inside it: 15 records, nothing else.
    assert!(records.iter().all(|r| r.instrument_id == 6556), "only QQQ's records");
    let kinds = |k| records.iter().filter(|r| r.kind() == Some(k)).count();
    assert_eq!((records.len(), kinds(Kind::Add), kinds(Kind::Cancel)), (15, 13, 2));
    let mut books = Books::new();
    records.iter().for_each(|r| books.apply(r).unwrap());
    let lv = |c, size, orders| Level { price_e9: px(c), size, orders };
    assert_eq!(books.get(6556).unwrap().bbo(), (Some(lv(21351, 100, 1)), Some(lv(21352, 500, 2))));
    // The definition came in the Accept: the symbol, and prices at ITCH's 4 decimals.
    let defs: Vec<_> = sub.symbology().iter().map(|d| (d.instrument_id, d.symbol.clone())).collect();
    assert_eq!(defs, [(6556, "QQQ".to_owned())]);
    assert_eq!(sub.symbology().format_price(6556, px(21351)), "213.5100");
}

#[test]
fn the_start_of_day_file_gives_symbols_and_trading_states_to_a_subscriber() {
    // 12302019_first1000.itch: R 993 (A is locate 1, AAAU 3), then per stock H (trading) and Y (no price test);
    // the README's H 3, Y 3 are for locates 1, 2, 3. A subscriber for A and AAAU gets those two's 4 records.
    let (records, sub) = replay_to(&data("12302019_first1000.itch"), "status", &["A", "AAAU"]);
    let got: Vec<_> =
        records.iter().map(|r| (r.venue_seq(), r.instrument_id, r.status().map(|s| (s.kind, s.state)))).collect();
    let (h, y) = (Some((StatusKind::Trading, b'T')), Some((StatusKind::RegSho, b'0')));
    assert_eq!(got, [(82, 1, h), (83, 1, y), (583, 3, h), (584, 3, y)]);
    let mut states = TradingStates::new();
    records.iter().for_each(|r| assert!(states.apply(r)));
    let a = states.get(1).unwrap();
    assert_eq!(
        (a.trading, a.reg_sho, a.is_halted(), a.last_venue_seq),
        (Some((b'T', *b"    ")), Some(b'0'), false, 83)
    );
    assert!(states.get(2).is_none(), "AA was not asked for");
    let s = sub.symbology();
    assert_eq!((s.len(), s.symbol(1), s.symbol(3)), (2, Some("A"), Some("AAAU")));
}

/// An unfiltered subscriber of the start-of-day file gets every one of its 993 Stock Directory definitions in its
/// Accept (about 90 kB of them: more than the 64 KiB a control frame could once hold, which cut them to 496).
#[test]
fn an_unfiltered_subscriber_gets_all_993_definitions_of_the_start_of_day_file() {
    let (records, sub) = replay_to(&data("12302019_first1000.itch"), "all", &[]);
    assert!(!records.is_empty());
    let s = sub.symbology();
    assert_eq!((s.len(), s.symbol(1), s.symbol(3), s.symbol(993)), (993, Some("A"), Some("AAAU"), Some("BPFH")));
}

/// A symbol the publisher knows whose stock has no record in the file (AAPL, locate 13, in the start-of-day file,
/// whose records are the statuses of A, AA and AAAU) is refused naming the symbol beside the locate it resolved to.
#[test]
fn a_known_symbol_without_records_is_refused_naming_the_symbol() {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\npath = {:?}\nsession_date = \"2019-12-30\"\n",
        data("12302019_first1000.itch")
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("itch-test.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&shutdown);
    let run = std::thread::spawn(move || publisher.run(flag));
    let mut cfg = SubscriberConfig::new(&endpoint, "aapl");
    cfg.symbols = Some(vec!["AAPL".to_owned()]);
    let err = Subscriber::connect(&cfg).err().expect("refused").to_string();
    shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    run.join().unwrap().unwrap();
    assert!(err.contains("field instruments: 13 (AAPL) not in this feed, no record of it (it has 1, 2, 3)"), "{err}");
}

/// The start-of-day file cut inside message 501 (an `R` at byte 20,407, 3 of its 39 bytes left): the publisher
/// starts (its Stock Directory pass keeps the 495 definitions before the cut), replays the records of the 500
/// messages before it (the H and Y of locates 1 and 2) to the subscriber, then ends the stream with feed_error
/// naming the byte. It used to refuse to start (`byte 20407: ends inside a message`, exit 1), delivering nothing.
#[test]
fn a_cut_start_of_day_file_replays_the_records_and_definitions_before_the_cut_then_feed_error() {
    let bytes = std::fs::read(data("12302019_first1000.itch")).unwrap();
    assert_eq!(&bytes[20_407..20_410], &[0, 39, b'R']);
    let path = std::env::temp_dir().join(format!("mdfan-itch-cut-{}.itch", std::process::id()));
    std::fs::write(&path, &bytes[..20_412]).unwrap();
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\npath = {path:?}\nsession_date = \"2019-12-30\"\n"
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("itch-test.toml")).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let mut sub = Subscriber::connect(&SubscriberConfig::new(&endpoint, "cut")).unwrap();
    let (records, end) = read_to_end(&mut sub);
    let report = run.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(end, "feed_error");
    let got: Vec<_> =
        records.iter().map(|r| (r.venue_seq(), r.instrument_id, r.status().map(|s| (s.kind, s.state)))).collect();
    let (h, y) = (Some((StatusKind::Trading, b'T')), Some((StatusKind::RegSho, b'0')));
    assert_eq!(got, [(82, 1, h), (83, 1, y), (265, 2, h), (266, 2, y)]);
    assert_eq!(report.records, 4);
    assert_eq!(
        report.feed_error.as_deref(),
        Some(format!("ITCH file {}: byte 20407: ends inside a message (3 of 39 bytes)", path.display()).as_str())
    );
    let s = sub.symbology();
    assert_eq!((s.len(), s.symbol(1), s.symbol(495), s.symbol(496)), (495, Some("A"), Some("ARGT"), None));
}
