//! LOBSTER AMZN 2012-06-21, level 1 (data/lobster-nasdaq-2012-06-21-level1/): every message read, the level-1
//! book rebuilt from the messages equal to the order-book CSV's row after each one, the records' price-level book
//! equal to the row after each message, and the counts and values of data/README.md (LOBSTER section).

use std::path::{Path, PathBuf};

use mdfan_feed::itch::eastern_midnight_ns;
use mdfan_feed::lobster::{
    orderbook_path, parse_time_ns, BookReader, EventType, FileName, LobsterError, LobsterFeed, Message, MessageReader,
    INSTRUMENT_ID,
};
use mdfan_wire::{flags, Kind, MbpBooks, MbpLevel, Side};

const MESSAGES: &str = "AMZN_2012-06-21_34200000_57600000_message_1.csv";

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/lobster-nasdaq-2012-06-21-level1").join(name)
}

/// A level as price (dollars x 10,000) and size, from the subscriber's side of things: price_e9 / 100,000.
fn lv(l: Option<MbpLevel>) -> Option<(i64, u32)> {
    l.map(|l| (l.price_e9 / 100_000, l.size))
}

/// The order-book CSV read here on its own (not through the reader under test): per row, ask and bid level 1.
/// Ask and bid level 1 of one row, each as (price, size) or `None` for an empty level.
type Row = (Option<(i64, u32)>, Option<(i64, u32)>);

fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(data("AMZN_2012-06-21_34200000_57600000_orderbook_1.csv")).unwrap();
    let level = |p: &str, s: &str| {
        let p: i64 = p.parse().unwrap();
        (p.abs() != 9_999_999_999).then(|| (p, s.parse().unwrap()))
    };
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (level(f[0], f[1]), level(f[2], f[3]))
        })
        .collect()
}

#[test]
fn lobster_amzn_the_rebuilt_level_1_book_equals_the_orderbook_row_after_every_message() {
    let midnight = eastern_midnight_ns(2012, 6, 21).unwrap();
    let mut feed = LobsterFeed::open(&data(MESSAGES), None, midnight).unwrap();
    let want = rows();
    assert_eq!(want.len(), 57_515);
    let mut mbp = MbpBooks::with_capacity(1);
    let (mut n, mut records, mut trades, mut levels, mut no_action) = (0usize, 0u64, 0u64, 0u64, 0u64);
    let (mut first, mut last) = (None, None);
    while let Some((m, recs)) = feed.next_message().unwrap() {
        let recs = recs.as_slice();
        assert!(!recs.is_empty());
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.is_last(), i + 1 == recs.len(), "message {}: F_LAST on the last record only", n + 1);
            assert_eq!((r.venue_seq(), r.venue_index(), r.instrument_id), (n as u64 + 1, i as u16, INSTRUMENT_ID));
            assert_eq!(r.ts_event_ns, midnight + m.time_ns);
            match r.kind() {
                Some(Kind::Trade) => trades += 1,
                Some(Kind::NoAction) => no_action += 1,
                Some(k) if k.is_level() => levels += 1,
                k => panic!("message {}: unexpected kind {k:?}", n + 1),
            }
            mbp.apply(r).unwrap();
        }
        records += recs.len() as u64;
        let book = mbp.get(INSTRUMENT_ID).unwrap();
        let got = (lv(book.level(Side::Ask, 1)), lv(book.level(Side::Bid, 1)));
        assert_eq!(got, want[n], "orderbook line {}: the records' level-1 book after message {}", n + 1, n + 1);
        if n == 0 {
            first = Some(m);
        }
        last = Some(m);
        n += 1;
    }
    assert_eq!(n, 57_515);
    // data/README.md, LOBSTER: 57,514/57,514 transitions consistent.
    let check = feed.level1().unwrap();
    assert_eq!(check.consistent, 57_514);
    let c = feed.counts();
    let per = |e| (c.get(e, Side::None), c.get(e, Side::Ask), c.get(e, Side::Bid));
    assert_eq!(per(EventType::Submit), (27_845, 14_851, 12_994));
    assert_eq!(per(EventType::PartialCancel), (16, 10, 6));
    assert_eq!(per(EventType::Delete), (18_235, 9_123, 9_112));
    assert_eq!(per(EventType::VisibleExecution), (8_974, 4_808, 4_166));
    assert_eq!(per(EventType::HiddenExecution), (2_445, 1_096, 1_349));
    assert_eq!(per(EventType::Halt), (0, 0, 0));
    assert_eq!(c.total(), 57_515);
    // first message 34200.017459617,5,0,1,2238200,-1; last 57599.95935965,3,287174077,100,2206300,-1.
    let first = first.unwrap();
    assert_eq!(
        first,
        Message {
            time_ns: 34_200_017_459_617,
            event: EventType::HiddenExecution,
            order_id: 0,
            cross: 0,
            size: 1,
            price: 2_238_200,
            side: Side::Ask
        }
    );
    assert_eq!(want[0], (Some((2_239_500, 100)), Some((2_231_800, 100))), "ask 223.95 x 100, bid 223.18 x 100");
    let last = last.unwrap();
    assert_eq!(
        last,
        Message {
            time_ns: 57_599_959_359_650,
            event: EventType::Delete,
            order_id: 287_174_077,
            cross: 0,
            size: 100,
            price: 2_206_300,
            side: Side::Ask
        }
    );
    let book = mbp.get(INSTRUMENT_ID).unwrap();
    assert_eq!(lv(book.level(Side::Ask, 1)), Some((2_206_400, 100)), "final ask 220.64 x 100");
    assert_eq!(lv(book.level(Side::Bid, 1)), Some((2_205_100, 249)), "final bid 220.51 x 249");
    assert_eq!(book.level(Side::Ask, 2), None);
    // Every execution is one trade; the price-level records and messages with neither, from the files.
    assert_eq!(trades, 8_974 + 2_445);
    assert_eq!((records, levels, no_action), (66_491, 55_072, 0));
    // A best level emptied 13,953 times: the level below came from the row (the messages cannot give it).
    assert_eq!(check.taken_from_row, 13_953);
}

#[test]
fn the_first_message_is_a_hidden_buy_trade_followed_by_the_first_row() {
    let midnight = eastern_midnight_ns(2012, 6, 21).unwrap();
    assert_eq!(midnight, 1_340_251_200_000_000_000, "2012-06-21 00:00 EDT = 04:00 UTC");
    let mut feed = LobsterFeed::open(&data(MESSAGES), None, midnight).unwrap();
    let (_, recs) = feed.next_message().unwrap().unwrap();
    let recs = recs.as_slice();
    assert_eq!(recs.len(), 3);
    let t = recs[0];
    assert_eq!(
        (t.kind(), t.side(), t.price_e9, t.size, t.order_id),
        (Some(Kind::Trade), Some(Side::Bid), 223_820_000_000, 1, 0)
    );
    assert_eq!(t.ts_event_ns, 1_340_251_200_000_000_000 + 34_200_017_459_617);
    assert_eq!((t.ts_recv_ns, t.flags), (t.ts_event_ns, flags::BAD_TS_RECV));
    let (a, b) = (recs[1], recs[2]);
    assert_eq!(
        (a.kind(), a.side(), a.level, a.price_e9, a.size),
        (Some(Kind::LevelChange), Some(Side::Ask), 1, 223_950_000_000, 100)
    );
    assert_eq!(
        (b.kind(), b.side(), b.level, b.price_e9, b.size),
        (Some(Kind::LevelChange), Some(Side::Bid), 1, 223_180_000_000, 100)
    );
    assert_eq!(b.flags, flags::MBP | flags::BAD_TS_RECV | flags::LAST);
}

#[test]
fn file_names_give_ticker_date_levels_and_the_orderbook_file() {
    let n = FileName::parse(&data(MESSAGES)).unwrap();
    assert_eq!(
        (n.ticker.as_str(), n.date, n.start_ms, n.end_ms, n.levels),
        ("AMZN", (2012, 6, 21), 34_200_000, 57_600_000, 1)
    );
    assert_eq!(orderbook_path(&data(MESSAGES)).unwrap(), data("AMZN_2012-06-21_34200000_57600000_orderbook_1.csv"));
    let e = FileName::parse(Path::new("/x/amzn.csv")).unwrap_err().to_string();
    assert!(e.starts_with("/x/amzn.csv: file name: want TICKER_YYYY-MM-DD"), "{e}");
    let e = FileName::parse(Path::new("AMZN_2012-6_1_2_message_1.csv")).unwrap_err().to_string();
    assert_eq!(e, "AMZN_2012-6_1_2_message_1.csv: file name: date \"2012-6\": want YYYY-MM-DD");
}

#[test]
fn times_are_read_exactly_to_the_ns() {
    assert_eq!(parse_time_ns("34200.017459617"), Ok(34_200_017_459_617));
    assert_eq!(parse_time_ns("57599.95935965"), Ok(57_599_959_359_650));
    assert_eq!(parse_time_ns("34200.1"), Ok(34_200_100_000_000));
    assert_eq!(parse_time_ns("34200"), Ok(34_200_000_000_000));
    // f64 would read 0.3 as 299999999.99999997 ns and round one way or the other.
    assert_eq!(parse_time_ns("0.300000001"), Ok(300_000_001));
    assert!(parse_time_ns("34200.0174596171").unwrap_err().contains("more than 9 decimals"));
    assert!(parse_time_ns("-1.5").unwrap_err().contains("negative"));
    assert_eq!(parse_time_ns("86400"), Ok(86_400_000_000_000));
    assert_eq!(parse_time_ns("86400.000000001"), Err("past 24 h after midnight"));
    assert_eq!(parse_time_ns("99999999999999999999"), Err("past 24 h after midnight"));
    assert!(parse_time_ns("").is_err() && parse_time_ns(".5").is_err() && parse_time_ns("1e3").is_err());
}

fn message_err(text: &str) -> String {
    let mut r = MessageReader::new(text.as_bytes(), Path::new("m.csv"));
    loop {
        match r.next_message() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no error in {text:?}"),
            Err(e) => return e.to_string(),
        }
    }
}

#[test]
fn bad_message_rows_name_the_file_the_line_and_the_field() {
    let ok = "34200.017459617,5,0,1,2238200,-1\n";
    assert_eq!(message_err(&format!("{ok}34200.1,1,2,3,2238200\n")), "m.csv: line 2: 5 fields; want 6");
    assert_eq!(
        message_err(&format!("{ok}{ok}34200.1,1,2,3,22x8200,1\n")),
        "m.csv: line 3: field price: \"22x8200\": want dollars x 10,000 as an integer"
    );
    assert_eq!(
        message_err("34200.1,8,2,3,2238200,1\n"),
        "m.csv: line 1: field type: \"8\": want a message type 1 to 7"
    );
    assert_eq!(
        message_err("34200.0174596171,1,2,3,2238200,1\n"),
        "m.csv: line 1: field time: \"34200.0174596171\": more than 9 decimals (ns is the finest LOBSTER gives)"
    );
    assert_eq!(
        message_err("-34200.5,1,2,3,2238200,1\n"),
        "m.csv: line 1: field time: \"-34200.5\": a negative time; want seconds after midnight"
    );
    assert_eq!(
        message_err("34200.5,1,2,3,2238200,0\n"),
        "m.csv: line 1: field direction: \"0\": want 1 (buy order) or -1 (sell order)"
    );
    assert_eq!(
        message_err("34200.5,1,2,-3,2238200,1\n"),
        "m.csv: line 1: field size: \"-3\": want shares, an integer 0 to 2^32-1"
    );
    assert_eq!(
        message_err("34200.5,1,2,3,92233720368548,1\n"),
        "m.csv: line 1: field price: \"92233720368548\": above 92233720368547 (dollars x 10,000), the most a record carries"
    );
    assert_eq!(
        message_err("34200.5,7,0,0,5,-1\n"),
        "m.csv: line 1: field price: \"5\": a type 7 (halt) message's price is -1, 0 or 1"
    );
}

/// The csv reader skips empty lines; a LOBSTER file has none, so one is a corrupt file, named by its physical line,
/// wherever it is (before a bad field further on, alone in the middle, first, last). It used to be skipped without
/// a word, and every line number after it (errors, `venue_seq`) was one short: a blank line 51 and a bad order_id
/// on line 101 gave `line 100: field order_id`.
#[test]
fn an_empty_line_is_an_error_naming_its_physical_line() {
    let ok = "34200.017459617,5,0,1,2238200,-1\n";
    let bad_id = "34200.1,1,abc,3,2238200,1\n";
    let blank_51_bad_101 = format!("{}\n{}{bad_id}", ok.repeat(50), ok.repeat(49));
    let empty = "m.csv: line {}: empty line (a LOBSTER file has none: every line is a message or an order-book row)";
    let empty = |n: u64| empty.replace("{}", &n.to_string());
    assert_eq!(message_err(&blank_51_bad_101), empty(51));
    assert_eq!(message_err(&format!("{}\n{}", ok.repeat(50), ok.repeat(50))), empty(51));
    assert_eq!(message_err(&format!("\n{ok}")), empty(1));
    assert_eq!(message_err(&format!("{ok}{ok}\n")), empty(3), "an empty last line");
    assert_eq!(message_err(&format!("{ok}{ok}\r\n")), empty(3), "an empty last line, CRLF");
    // Without the empty line, the bad order_id is named on its own line, 100.
    assert_eq!(
        message_err(&format!("{}{bad_id}", ok.repeat(99))),
        "m.csv: line 100: field order_id: \"abc\": want an integer 0 to 2^64-1"
    );
    // A file that does not end with a line break has no empty line: its two messages, on lines 1 and 2.
    let text = format!("{ok}{}", ok.trim_end());
    let mut r = MessageReader::new(text.as_bytes(), Path::new("m.csv"));
    let mut lines = Vec::new();
    while r.next_message().unwrap().is_some() {
        lines.push(r.line());
    }
    assert_eq!(lines, [1, 2]);
    // A lone carriage return ends a row for the csv reader but not a line: two rows would share line 1.
    assert_eq!(
        message_err(&format!("{}\r{ok}", ok.trim_end())),
        "m.csv: line 1: a lone carriage return ends a row (a LOBSTER line ends with a line feed)"
    );
    // The order-book file, the same.
    let mut b =
        BookReader::new("2239500,100,2231800,100\n\n2239500,100,2231800,100\n".as_bytes(), Path::new("b.csv"), 1);
    assert!(b.next_row().unwrap().is_some());
    assert_eq!(
        b.next_row().err().map(|e| e.to_string()).as_deref(),
        Some("b.csv: line 2: empty line (a LOBSTER file has none: every line is a message or an order-book row)")
    );
}

#[test]
fn halts_are_read_with_their_state() {
    let text = "36023,7,0,0,-1,-1\n36323,7,0,0,0,-1\n36723,7,0,0,1,-1\n";
    let mut r = MessageReader::new(text.as_bytes(), Path::new("m.csv"));
    let mut states = Vec::new();
    while let Some(m) = r.next_message().unwrap() {
        assert_eq!(m.event, EventType::Halt);
        states.push(m.halt_state().unwrap());
    }
    use mdfan_feed::lobster::HaltState::*;
    assert_eq!(states, [Halted, Quoting, Resumed]);
}

#[test]
fn bad_orderbook_rows_name_the_field() {
    let row_err = |text: &str| {
        let mut r = BookReader::new(text.as_bytes(), Path::new("b.csv"), 1);
        loop {
            match r.next_row() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("no error"),
                Err(e) => return e.to_string(),
            }
        }
    };
    assert_eq!(row_err("2239500,100,2231800\n"), "b.csv: line 1: 3 fields; want 4");
    assert_eq!(row_err("2239500,100,x,100\n"), "b.csv: line 1: field bid_price_1: \"x\": want an integer");
    assert_eq!(
        row_err("9999999999,5,2231800,100\n"),
        "b.csv: line 1: field ask_size_1: \"5\": an empty level (dummy price) has size 0"
    );
    assert_eq!(
        row_err("2239500,100,0,100\n"),
        "b.csv: line 1: field bid_price_1: \"0\": want a positive price up to 92233720368547, or the dummy price"
    );
    let mut r = BookReader::new("9999999999,0,-9999999999,0\n".as_bytes(), Path::new("b.csv"), 1);
    let row = r.next_row().unwrap().unwrap();
    assert_eq!((row.best(Side::Ask), row.best(Side::Bid)), (None, None), "the dummy prices are empty levels");
}

#[test]
fn a_row_the_messages_cannot_give_is_a_mismatch_naming_the_orderbook_line() {
    let messages = "34200.1,1,1,100,2239500,-1\n34200.2,1,2,50,2239500,-1\n";
    let rows = "2239500,100,2231800,100\n2239500,140,2231800,100\n";
    let mut feed = LobsterFeed::new(
        MessageReader::new(messages.as_bytes(), Path::new("m.csv")),
        BookReader::new(rows.as_bytes(), Path::new("b.csv"), 1),
        0,
    );
    feed.next_message().unwrap();
    let e = feed.next_message().unwrap_err();
    assert!(matches!(e, LobsterError::Mismatch { line: 2, .. }), "{e}");
    assert!(
        e.to_string().starts_with("b.csv: line 2: the level-1 book after message 2 does not match this row: "),
        "{e}"
    );
    // One file shorter than the other.
    let mut feed = LobsterFeed::new(
        MessageReader::new(messages.as_bytes(), Path::new("m.csv")),
        BookReader::new(&rows.as_bytes()[..24], Path::new("b.csv"), 1),
        0,
    );
    feed.next_message().unwrap();
    let e = feed.next_message().unwrap_err().to_string();
    assert_eq!(e, "b.csv: ends after 1 rows; the message file goes on at line 2");
}

#[test]
fn a_level_larger_than_a_record_carries_is_an_error_naming_the_field() {
    let mut feed = LobsterFeed::new(
        MessageReader::new("34200.1,1,1,100,2239500,-1\n".as_bytes(), Path::new("m.csv")),
        BookReader::new("2239500,5000000000,2231800,100\n".as_bytes(), Path::new("b.csv"), 1),
        0,
    );
    let e = feed.next_message().unwrap_err().to_string();
    assert_eq!(e, "b.csv: line 1: field ask_size_1: \"5000000000\": more shares than a record carries (2^32-1)");
}

/// The bundled files' first `n` message rows and order-book rows, with `extra` (message row, order-book row)
/// pairs inserted after message `after`.
fn bundled_with(n: usize, after: usize, extra: &[(&str, &str)]) -> (String, String) {
    let read = |name: &str| std::fs::read_to_string(data(name)).unwrap();
    let messages = read(MESSAGES);
    let rows = read("AMZN_2012-06-21_34200000_57600000_orderbook_1.csv");
    let (mut m, mut b) = (String::new(), String::new());
    for (i, (ml, bl)) in messages.lines().zip(rows.lines()).take(n).enumerate() {
        m += &format!("{ml}\n");
        b += &format!("{bl}\n");
        if i + 1 == after {
            for (em, eb) in extra {
                m += &format!("{em}\n");
                b += &format!("{}\n", if eb.is_empty() { bl } else { eb });
            }
        }
    }
    (m, b)
}

fn replay(messages: &str, rows: &str) -> Vec<(Message, Vec<mdfan_wire::BookUpdate>)> {
    let mut feed = LobsterFeed::new(
        MessageReader::new(messages.as_bytes(), Path::new("m.csv")),
        BookReader::new(rows.as_bytes(), Path::new("b.csv"), 1),
        eastern_midnight_ns(2012, 6, 21).unwrap(),
    );
    let mut out = Vec::new();
    while let Some((m, r)) = feed.next_message().unwrap_or_else(|e| panic!("{e}")) {
        out.push((m, r.as_slice().to_vec()));
    }
    out
}

#[test]
fn a_cross_trade_naming_its_cross_is_a_trade_with_the_book_unchanged_and_the_replay_goes_on() {
    // The bundled first 4 messages, with cross trades of order id -1 (opening cross) and -4 after message 2,
    // each with the order-book row repeated (a cross does not change the book).
    let crosses = [("34200.189700000,6,-1,5000,2238000,1", ""), ("34200.189800000,6,-4,300,2238100,-1", "")];
    let (m, b) = bundled_with(4, 2, &crosses);
    let (plain_m, plain_b) = bundled_with(4, 0, &[]);
    let got = replay(&m, &b);
    let plain = replay(&plain_m, &plain_b);
    assert_eq!(got.len(), 6, "every message read");
    for (i, (cross, price_e9, size, side)) in
        [(-1, 223_800_000_000, 5_000, Side::Ask), (-4, 223_810_000_000, 300, Side::Bid)].into_iter().enumerate()
    {
        let (msg, recs) = &got[2 + i];
        assert_eq!((msg.event, msg.order_id, msg.cross), (EventType::CrossTrade, 0, cross));
        assert_eq!(recs.len(), 1, "a trade and nothing else: the book did not change");
        let r = recs[0];
        assert_eq!(r.kind(), Some(Kind::Trade));
        assert_eq!((r.price_e9, r.size, r.order_id, r.side()), (price_e9, size, 0, Some(side)));
        assert_eq!(r.flags, flags::BAD_TS_RECV | flags::LAST);
        assert_eq!(r.venue_seq(), 3 + i as u64);
    }
    // The messages after the crosses give what they give without them (but their line numbers).
    for (g, p) in got[4..].iter().zip(&plain[2..]) {
        let strip = |v: &[mdfan_wire::BookUpdate]| {
            v.iter().map(|r| (r.kind, r.side, r.price_e9, r.size, r.level)).collect::<Vec<_>>()
        };
        assert_eq!(strip(&g.1), strip(&p.1));
    }
    let mut mbp = MbpBooks::with_capacity(1);
    for r in got.iter().flat_map(|(_, r)| r) {
        mbp.apply(r).unwrap();
    }
    let book = mbp.get(INSTRUMENT_ID).unwrap();
    // Order-book row 4: 2239500,100,2237500,74.
    assert_eq!(
        (lv(book.level(Side::Ask, 1)), lv(book.level(Side::Bid, 1))),
        (Some((2_239_500, 100)), Some((2_237_500, 74)))
    );
    // An order id of -5, or a negative one on another type, is still refused.
    for row in ["34200.2,6,-5,1,2238000,1", "34200.2,4,-1,1,2238000,1"] {
        let e = message_err(row);
        assert!(e.contains("field order_id: \"-"), "{row}: {e}");
    }
}

#[test]
fn a_halt_sets_the_trading_state_as_itch_h_does() {
    let halts =
        [("34200.190000000,7,0,0,-1,-1", ""), ("34200.190100000,7,0,0,0,-1", ""), ("34200.190200000,7,0,0,1,-1", "")];
    let (m, b) = bundled_with(4, 2, &halts);
    let got = replay(&m, &b);
    assert_eq!(got.len(), 7);
    let mut states = mdfan_wire::TradingStates::new();
    let mut seen = Vec::new();
    for (msg, recs) in &got[2..5] {
        assert_eq!(msg.event, EventType::Halt);
        assert_eq!(recs.len(), 1, "the row repeats: no level record");
        let r = recs[0];
        assert_eq!(r.kind(), Some(Kind::TradingStatus));
        assert_eq!((r.instrument_id, r.flags), (INSTRUMENT_ID, flags::BAD_TS_RECV | flags::LAST));
        let st = r.status().unwrap();
        assert_eq!((st.kind, st.reason), (mdfan_wire::StatusKind::Trading, *b"    "));
        assert!(states.apply(&r));
        seen.push((st.state, states.get(INSTRUMENT_ID).unwrap().is_halted()));
    }
    assert_eq!(seen, [(b'H', true), (b'Q', false), (b'T', false)], "halted, quotation only (not a halt), trading");
    let kinds: Vec<_> = got[5].1.iter().map(|r| r.kind()).collect();
    assert_eq!(kinds, [Some(Kind::Trade), Some(Kind::LevelChange)], "the replay goes on: message 3, an execution");
}
