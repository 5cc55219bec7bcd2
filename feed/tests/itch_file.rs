//! ITCH 5.0 BinaryFILE excerpts (data/nasdaq-itch50-20191230-binaryfile-excerpts/): every count and book level
//! asserted here is from that folder's README.

use std::path::{Path, PathBuf};

use mdfan_feed::itch::{eastern_midnight_ns, stock_directory, Body, ItchFile, ItchNormalizer};
use mdfan_wire::{BookUpdate, Books, Kind, Level, Side, Status, StatusKind, TradingStates};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nasdaq-itch50-20191230-binaryfile-excerpts").join(name)
}

const E9: i64 = 1_000_000_000;

fn px(cents: i64) -> i64 {
    cents * E9 / 100
}

/// Decodes and normalises a whole file: (the file's stats, the normaliser, every record).
fn replay(name: &str) -> (mdfan_feed::itch::ItchStats, ItchNormalizer, Vec<BookUpdate>, Vec<Body>) {
    let mut file = ItchFile::open(&data(name)).unwrap();
    let mut norm = ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).unwrap(), 1024);
    let (mut records, mut bodies) = (Vec::new(), Vec::new());
    let mut pos = 0u64;
    while let Some((_, m)) = file.next_message().unwrap() {
        pos += 1;
        records.extend_from_slice(norm.normalize(&m, pos, 0).as_slice());
        bodies.push(m.body);
    }
    (file.stats().clone(), norm, records, bodies)
}

#[test]
fn snippet_counts_types_and_unknown_references() {
    let (stats, norm, records, _) = replay("12302019_SNIPPET.NASDAQ_ITCH50");
    assert_eq!(stats.messages, 1000);
    let counts: Vec<(char, u64)> = b"SAFECXDUPQI".iter().map(|&t| (t as char, stats.of(t))).collect();
    assert_eq!(
        counts,
        [
            ('S', 1),
            ('A', 367),
            ('F', 193),
            ('E', 28),
            ('C', 1),
            ('X', 6),
            ('D', 167),
            ('U', 225),
            ('P', 4),
            ('Q', 4),
            ('I', 4)
        ]
    );
    assert_eq!((stats.unknown, stats.longer_than_spec), (0, 0));
    let s = norm.stats();
    let unknown: Vec<(char, u64)> =
        b"DUEXC".iter().map(|&t| (t as char, s.unknown_reference[usize::from(t)])).collect();
    assert_eq!(unknown, [('D', 139), ('U', 225), ('E', 28), ('X', 6), ('C', 1)]);
    assert_eq!(s.unknown_references(), 399);
    assert_eq!((s.duplicate_reference, s.too_many_shares), (0, 0));
    assert_eq!(norm.resting_orders(), 532);
    // Timestamps: the first at 09:30:00.000000230 ET, i.e. 14:30 UTC on 2019-12-30.
    let first = records.first().unwrap();
    assert_eq!(first.ts_event_ns, eastern_midnight_ns(2019, 12, 30).unwrap() + 34_200_000_000_230);
    assert!(records.windows(2).all(|w| w[0].ts_event_ns <= w[1].ts_event_ns));
}

#[test]
fn snippet_hds_and_qqq_books() {
    let (_, norm, records, _) = replay("12302019_SNIPPET.NASDAQ_ITCH50");
    let mut books = Books::new();
    for r in &records {
        books.apply(r).unwrap();
    }
    // HDS, locate 3672: 85 adds (A 46, F 39), 22 bid and 21 ask levels.
    let hds: Vec<&BookUpdate> = records.iter().filter(|r| r.instrument_id == 3672).collect();
    assert_eq!(hds.iter().filter(|r| r.kind == Kind::Add as u8).count(), 85);
    assert_eq!(hds.iter().filter(|r| r.kind == Kind::InstrumentStale as u8).count(), 1);
    assert!(norm.is_stale(3672));
    // Every stale mark (one per locate whose first reference was to an order before 09:30) carries LAST and
    // nothing else: subscribers tell an order-book mark from MDP 3.0's so (wire::record, "Stale marks").
    let stale: Vec<&BookUpdate> = records.iter().filter(|r| r.kind == Kind::InstrumentStale as u8).collect();
    assert_eq!(stale.len(), 216);
    assert!(stale.iter().all(|r| r.flags == mdfan_wire::flags::LAST && r.order_id != 0), "{stale:?}");
    let book = books.get(3672).unwrap();
    assert_eq!((book.level_count(Side::Bid), book.level_count(Side::Ask)), (22, 21));
    let lv = |c, size, orders| Level { price_e9: px(c), size, orders };
    assert_eq!(
        book.top(Side::Bid, 5),
        [lv(4007, 100, 1), lv(4005, 7, 1), lv(3990, 200, 1), lv(3982, 500, 1), lv(3963, 100, 1)]
    );
    assert_eq!(
        book.top(Side::Ask, 5),
        [lv(4060, 100, 1), lv(4089, 100, 1), lv(4100, 369, 4), lv(4120, 30, 1), lv(4125, 100, 1)]
    );
    // QQQ, locate 6556.
    let qqq = books.get(6556).unwrap().bbo();
    assert_eq!(qqq, (Some(lv(21351, 100, 1)), Some(lv(21352, 500, 2))));
    assert!(!norm.is_stale(6556));
}

#[test]
fn first1000_counts_and_symbols() {
    let (stats, norm, records, bodies) = replay("12302019_first1000.itch");
    assert_eq!(stats.messages, 1000);
    let counts: Vec<u64> = b"SRHY".iter().map(|&t| stats.of(t)).collect();
    assert_eq!(counts, [1, 993, 3, 3]);
    assert_eq!(bodies.first(), Some(&Body::SystemEvent { event_code: b'O' }));
    // No order messages: the only records are the 3 trading actions and 3 Reg SHO indicators, all "trading,
    // no price test" (the README's H 3, Y 3; checked by hand: locates 1 A, 2 AA, 3 AAAU, messages 82/83,
    // 265/266, 583/584).
    let got: Vec<_> = records.iter().map(|r| (r.venue_seq(), r.instrument_id, r.kind(), r.status())).collect();
    let st = |kind, state, reason: &[u8; 4]| Some(Status { kind, state, reason: *reason });
    let (trading, no_test) = (st(StatusKind::Trading, b'T', b"    "), st(StatusKind::RegSho, b'0', b"    "));
    let k = Some(Kind::TradingStatus);
    assert_eq!(
        got,
        [
            (82, 1, k, trading),
            (83, 1, k, no_test),
            (265, 2, k, trading),
            (266, 2, k, no_test),
            (583, 3, k, trading),
            (584, 3, k, no_test)
        ]
    );
    // 03:09:14.328694637 ET on 2019-12-30 (EST): the first H's timestamp after midnight.
    assert_eq!(records[0].ts_event_ns, eastern_midnight_ns(2019, 12, 30).unwrap() + 11_354_328_694_637);
    let mut states = TradingStates::new();
    records.iter().for_each(|r| assert!(states.apply(r)));
    assert_eq!(states.len(), 3);
    let aa = states.get(2).unwrap();
    assert_eq!(
        (aa.trading, aa.reg_sho, aa.operational_halt, aa.is_halted()),
        (Some((b'T', *b"    ")), Some(b'0'), None, false)
    );
    let symbols: Vec<&str> = (1..=993).map(|l| norm.symbol(l).unwrap()).collect();
    assert_eq!(symbols.len(), 993);
    assert_eq!((symbols[0], symbols[992]), ("A", "BPFH"));
    assert_eq!((norm.symbol(13), norm.symbol(393), norm.symbol(687)), (Some("AAPL"), Some("AMZN"), Some("BABA")));
    assert_eq!(norm.symbol(994), None);
    let mut sorted = symbols.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 993, "993 distinct symbols");
}

#[test]
fn first1000_stock_directory_gives_993_definitions_at_4_decimals() {
    let (symbology, stopped) = stock_directory(&data("12302019_first1000.itch")).unwrap();
    assert!(stopped.is_none(), "read to its end: {stopped:?}");
    assert_eq!(symbology.len(), 993);
    let ids: Vec<u32> = symbology.iter().map(|d| d.instrument_id).collect();
    assert_eq!(ids, (1..=993).collect::<Vec<u32>>());
    assert_eq!((symbology.symbol(1), symbology.symbol(993)), (Some("A"), Some("BPFH")));
    assert_eq!(
        (symbology.ids_of("AAPL"), symbology.ids_of("AMZN"), symbology.ids_of("BABA")),
        (vec![13], vec![393], vec![687])
    );
    let aapl = symbology.get(13).unwrap();
    assert_eq!((aapl.display_factor_e9, aapl.tick_size_e9, aapl.min_decimals()), (E9, 100_000, 4));
    assert_eq!(symbology.format_price(13, px(21351)), "213.5100");
    // The snippet (cut after 09:30) has no Stock Directory message.
    let (none, stopped) = stock_directory(&data("12302019_SNIPPET.NASDAQ_ITCH50")).unwrap();
    assert!(none.is_empty() && stopped.is_none());
    let e = stock_directory(&data("no-such-file")).unwrap_err().to_string();
    assert!(e.contains("no-such-file"), "{e}");
}

#[test]
fn snippet_hds_skips_13_unknown_references() {
    // Only HDS's messages (locate 3672), through a normaliser of their own: 13 skipped (U 10, D 2, C 1).
    let mut file = ItchFile::open(&data("12302019_SNIPPET.NASDAQ_ITCH50")).unwrap();
    let mut norm = ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).unwrap(), 256);
    let (mut adds, mut messages) = (0, 0);
    while let Some((_, m)) = file.next_message().unwrap() {
        if m.header.stock_locate == 3672 {
            messages += 1;
            adds += norm.normalize(&m, 0, 0).as_slice().iter().filter(|r| r.kind == Kind::Add as u8).count();
        }
    }
    assert_eq!((messages, adds), (99, 85));
    let s = norm.stats();
    let skipped: Vec<u64> = b"UDC".iter().map(|&t| s.unknown_reference[usize::from(t)]).collect();
    assert_eq!((skipped, s.unknown_references()), (vec![10, 2, 1], 13));
}
