//! LOBSTER files (lobsterdata.com): a message CSV and its order-book CSV, read as they go, the level-1 book
//! rebuilt from the messages and checked against the order-book CSV after every message, and the result
//! normalised into [`BookUpdate`] records.
//!
//! Source: `LOBSTER_SampleFiles_ReadMe.txt` (LOBSTER, Humboldt-Universität zu Berlin, version 01 Sept 2013),
//! bundled in data/lobster-nasdaq-2012-06-21-level1/, sections "Message File", "Orderbook File" and "Notes".
//!
//! ## The files
//!
//! Names: `TICKER_YYYY-MM-DD_StartTime_EndTime_message_LEVEL.csv` and `..._orderbook_LEVEL.csv` (StartTime and
//! EndTime in ms after midnight; LEVEL = the number of price levels per side). Both are headerless CSV with one
//! row per event: order-book row *i* is the book **after** message *i*.
//!
//! | message column | field | unit / meaning |
//! |---|---|---|
//! | 1 | time | seconds after midnight (the exchange's local time, US Eastern), up to 9 decimals; read exactly into ns |
//! | 2 | type | [`EventType`]: 1 submit, 2 partial cancel, 3 delete, 4 visible execution, 5 hidden execution, 6 cross trade, 7 trading halt |
//! | 3 | order_id | the order reference number (0 for hidden executions and halts; for a cross trade -1 to -4, LOBSTER's ids of the opening, closing and other crosses, held in [`Message::cross`]) |
//! | 4 | size | shares |
//! | 5 | price | dollars x 10,000 (91.14 is `911400`); for a halt: -1 halt, 0 quoting, 1 resume ([`HaltState`]) |
//! | 6 | direction | 1 buy (bid) order, -1 sell (ask) order: the side of the *resting* order |
//!
//! Order-book columns, per level N = 1, 2, ...: ask price N, ask size N, bid price N, bid size N (prices in
//! dollars x 10,000). A level the book does not have is the dummy price 9999999999 (ask) or -9999999999 (bid)
//! with size 0: [`BookRow`] holds it as `None`.
//!
//! Type 6 is not in the bundled ReadMe; LOBSTER's online documentation names it a cross trade (an auction
//! execution), which does not change the book: it is read like a hidden execution, its order id -1 to -4 (the
//! cross, not an order) kept in [`Message::cross`] and sent as order id 0. For type 7 the ReadMe says the
//! order-book row repeats the previous one.
//!
//! ## The level-1 check ([`Level1Book`])
//!
//! A level-1 message file holds only the events that touch the best level, so a book built from the messages
//! alone cannot know what lies below the top. The check starts from order-book row 1 and applies message *i*
//! (i >= 2) to it, then compares with row *i* (data/README.md, LOBSTER section):
//! - a submit at a better price than the best (or on an empty side) is the new best level; at the best price it
//!   adds `size`; at a worse price nothing changes;
//! - a partial cancel, delete or visible execution at the best price subtracts `size`; if the level empties, the
//!   next level is taken from row *i*, whose price must differ (the best price moved) and whose other side must
//!   be unchanged; at another price nothing changes;
//! - hidden executions, cross trades and halts change nothing.
//!
//! ## What subscribers get ([`LobsterFeed`])
//!
//! The order book as LOBSTER gives it, as price-level (MBP) records, and the executions as trades:
//! - per message, a [`Kind::Trade`] for a visible or hidden execution or a cross trade (price, size, order_id;
//!   `side` = the aggressor, the side opposite the resting order: an execution of a sell order is a buy
//!   trade, as the ReadMe's note says);
//! - then, per level that changed between row *i* − 1 and row *i* (ask side first, then bid; deepest level
//!   first), a [`Kind::LevelChange`] (the level as row *i* has it, replacing that position) or a
//!   [`Kind::LevelDelete`] (the level is empty now) at that `level`, flagged [`flags::MBP`], `size` = the level's
//!   shares, `order_id` = 0 (LOBSTER gives no order count); before message 1 the book is empty;
//! - a halt (type 7) gives a [`Kind::TradingStatus`] record, as ITCH's Stock Trading Action `H` does (layout in
//!   `mdfan_wire::record`, "Trading status records": status kind `H`, state `H` halted for price -1, `Q`
//!   quotation only for 0, `T` trading for 1, reason 4 spaces: LOBSTER keeps none);
//! - a message that gives none of these (a row unchanged) gives one [`Kind::NoAction`];
//! - the last record of a message carries [`flags::LAST`]: after it, a subscriber's price-level book
//!   equals order-book row *i*.
//!
//! Submits, cancels and deletes are not sent as order (MBO) records: the file has an order only while it touches
//! the best level, so an order book built from them would hold orders that left unseen and cancel orders it never
//! had. Every record: `instrument_id` = [`INSTRUMENT_ID`] (LOBSTER has no ids; the symbol is the file name's
//! ticker), venue seq = the message's line number in the file (an empty line is an error, so the lines are the
//! rows) and the record's index within the message (`wire::record`, "Venue position"), `ts_event_ns` = the session date's US Eastern midnight +
//! the message time, `ts_recv_ns` = `ts_event_ns` flagged [`flags::BAD_TS_RECV`] (the files have no capture
//! time), prices as `price_e9` = price x 100,000.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use mdfan_wire::record::flags;
use mdfan_wire::{venue_position, BookUpdate, Kind, Side, Status, StatusKind};

/// The `instrument_id` of every record of a LOBSTER file (the files carry one ticker and no id).
pub const INSTRUMENT_ID: u32 = 1;
/// `price_e9` per unit of a LOBSTER price (1/10,000 dollar).
pub const PRICE_E9_PER_UNIT: i64 = 100_000;
/// The dummy ask price of a level the book does not have (ReadMe, "Unoccupied Price Levels").
pub const DUMMY_ASK_PRICE: i64 = 9_999_999_999;
/// The dummy bid price of a level the book does not have.
pub const DUMMY_BID_PRICE: i64 = -9_999_999_999;
/// Digits after the decimal point a message time may have (ns).
pub const MAX_TIME_DECIMALS: usize = 9;
/// The latest message time, in ns after midnight: 24 h (times are seconds after midnight of one trading day).
pub const MAX_TIME_NS: u64 = 86_400 * 1_000_000_000;
/// The highest price a record can carry, in LOBSTER units (dollars x 10,000): `price_e9` must fit an i64.
pub const MAX_PRICE: i64 = i64::MAX / PRICE_E9_PER_UNIT;

/// A LOBSTER message type (message column 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// 1: submission of a new limit order.
    Submit = 1,
    /// 2: cancellation (partial deletion of a limit order).
    PartialCancel = 2,
    /// 3: deletion (total deletion of a limit order).
    Delete = 3,
    /// 4: execution of a visible limit order.
    VisibleExecution = 4,
    /// 5: execution of a hidden limit order; the book does not change.
    HiddenExecution = 5,
    /// 6: cross trade (auction), from LOBSTER's online documentation; the book does not change.
    CrossTrade = 6,
    /// 7: trading halt indicator (the price column says which: [`HaltState`]).
    Halt = 7,
}

impl EventType {
    /// The type of a message's column 2, `None` for any other number.
    pub fn from_number(n: i64) -> Option<EventType> {
        Some(match n {
            1 => EventType::Submit,
            2 => EventType::PartialCancel,
            3 => EventType::Delete,
            4 => EventType::VisibleExecution,
            5 => EventType::HiddenExecution,
            6 => EventType::CrossTrade,
            7 => EventType::Halt,
            _ => return None,
        })
    }
}

/// What a type 7 message says, from its price column (ReadMe, "Trading Halts").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltState {
    /// Price -1: trading halts.
    Halted,
    /// Price 0: quoting resumes.
    Quoting,
    /// Price 1: trading resumes.
    Resumed,
}

/// One row of a message CSV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Time after midnight, in ns (column 1, read exactly).
    pub time_ns: u64,
    /// Column 2.
    pub event: EventType,
    /// Column 3: the order reference number (0 for a cross trade whose column 3 names the cross).
    pub order_id: u64,
    /// A cross trade's (type 6) column 3 when it names the cross, -1 to -4 (LOBSTER's online documentation:
    /// the opening, closing and other crosses); 0 otherwise.
    pub cross: i8,
    /// Column 4: shares.
    pub size: u32,
    /// Column 5: dollars x 10,000 (for a halt: -1, 0 or 1, see [`HaltState`]).
    pub price: i64,
    /// Column 6: the resting order's side, 1 → [`Side::Bid`], -1 → [`Side::Ask`].
    pub side: Side,
}

impl Message {
    /// For a type 7 message, what it says.
    pub fn halt_state(&self) -> Option<HaltState> {
        match (self.event, self.price) {
            (EventType::Halt, -1) => Some(HaltState::Halted),
            (EventType::Halt, 0) => Some(HaltState::Quoting),
            (EventType::Halt, 1) => Some(HaltState::Resumed),
            _ => None,
        }
    }
}

/// One occupied price level of an order-book row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Dollars x 10,000.
    pub price: i64,
    /// Shares.
    pub size: u64,
}

/// One row of an order-book CSV: levels 1..=LEVEL per side, `None` where LOBSTER wrote the dummy price.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BookRow {
    /// Ask levels, best (lowest) first.
    pub asks: Vec<Option<Level>>,
    /// Bid levels, best (highest) first.
    pub bids: Vec<Option<Level>>,
}

impl BookRow {
    /// The levels of `side` (an empty slice for [`Side::None`]).
    pub fn side(&self, side: Side) -> &[Option<Level>] {
        match side {
            Side::Ask => &self.asks,
            Side::Bid => &self.bids,
            Side::None => &[],
        }
    }

    /// The best level of `side`.
    pub fn best(&self, side: Side) -> Option<Level> {
        self.side(side).first().copied().flatten()
    }
}

/// Why a LOBSTER file could not be read; every variant names the file, and the line and field where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LobsterError {
    /// The file cannot be opened.
    #[error("{file}: cannot open: {source}")]
    Open {
        /// The file.
        file: PathBuf,
        /// What failed underneath.
        #[source]
        source: std::io::Error,
    },
    /// The file name is not `TICKER_YYYY-MM-DD_Start_End_message_LEVEL.csv` (or `_orderbook_`).
    #[error("{file}: file name: {detail}")]
    FileName {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The CSV itself could not be read (I/O, or not UTF-8), or an empty line (a LOBSTER file has none).
    #[error("{file}: line {line}: {detail}")]
    Csv {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// The csv crate's description.
        detail: String,
    },
    /// A row with the wrong number of fields.
    #[error("{file}: line {line}: {found} fields; want {want}")]
    Fields {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// Fields found.
        found: usize,
        /// Fields a row must have.
        want: usize,
    },
    /// A field that cannot be read.
    #[error("{file}: line {line}: field {field}: {value:?}: {detail}")]
    Field {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: u64,
        /// The field's name (`time`, `type`, `order_id`, `size`, `price`, `direction`, `ask_price_1`, ...).
        field: String,
        /// The text found.
        value: String,
        /// What is wrong with it.
        detail: &'static str,
    },
    /// The order-book file ended before the message file, or after it.
    #[error("{file}: {detail}")]
    Length {
        /// The order-book file.
        file: PathBuf,
        /// Which file ended first, and where.
        detail: String,
    },
    /// The level-1 book rebuilt from the messages differs from the order-book row.
    #[error("{file}: line {line}: the level-1 book after message {line} does not match this row: {detail}")]
    Mismatch {
        /// The order-book file.
        file: PathBuf,
        /// 1-based line (= the message's line).
        line: u64,
        /// What the messages gave and what the row says.
        detail: String,
    },
}

/// What a LOBSTER file name says: `TICKER_YYYY-MM-DD_StartTime_EndTime_KIND_LEVEL.csv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileName {
    /// The ticker (`AMZN`).
    pub ticker: String,
    /// The trading day: year, month, day.
    pub date: (i32, u32, u32),
    /// Start of the file's period, ms after midnight.
    pub start_ms: u64,
    /// End of the file's period, ms after midnight.
    pub end_ms: u64,
    /// Price levels per side.
    pub levels: usize,
}

impl FileName {
    /// Parses the name of a message or order-book file.
    ///
    /// # Errors
    /// [`LobsterError::FileName`] naming the part that is wrong.
    pub fn parse(path: &Path) -> Result<FileName, LobsterError> {
        let bad = |detail: String| LobsterError::FileName { file: path.to_path_buf(), detail };
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| bad("not UTF-8".into()))?;
        let stem = name.strip_suffix(".csv").ok_or_else(|| bad("does not end in .csv".into()))?;
        let parts: Vec<&str> = stem.split('_').collect();
        let want = "want TICKER_YYYY-MM-DD_StartTime_EndTime_message_LEVEL.csv (or _orderbook_)";
        let [ticker, date, start, end, kind, level] = parts[..] else { return Err(bad(want.into())) };
        if ticker.is_empty() || !matches!(kind, "message" | "orderbook") {
            return Err(bad(want.into()));
        }
        let mut d = date.splitn(3, '-');
        let ymd = (|| Some((d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?)))();
        let date = ymd.ok_or_else(|| bad(format!("date {date:?}: want YYYY-MM-DD")))?;
        let num = |s: &str, what: &str| s.parse::<u64>().map_err(|_| bad(format!("{what} {s:?}: want a number")));
        let (start_ms, end_ms) = (num(start, "StartTime")?, num(end, "EndTime")?);
        let levels = num(level, "LEVEL")? as usize;
        if !(1..=255).contains(&levels) {
            return Err(bad(format!("LEVEL {levels}: want 1 to 255")));
        }
        Ok(FileName { ticker: ticker.to_string(), date, start_ms, end_ms, levels })
    }
}

/// The order-book file that goes with a message file: `_message_` replaced by `_orderbook_` in its name.
pub fn orderbook_path(message_path: &Path) -> Option<PathBuf> {
    let name = message_path.file_name()?.to_str()?;
    let at = name.rfind("_message_")?;
    let book = format!("{}_orderbook_{}", &name[..at], &name[at + "_message_".len()..]);
    Some(message_path.with_file_name(book))
}

/// Parses a message time, seconds after midnight with up to 9 decimals (`34200.017459617`), into ns, exactly
/// (no floating point). `Err` says what is wrong: empty, a sign, a non-digit, more than 9 decimals, past 24 h.
pub fn parse_time_ns(text: &str) -> Result<u64, &'static str> {
    if text.starts_with('-') {
        return Err("a negative time; want seconds after midnight");
    }
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err("want seconds after midnight as digits with up to 9 decimals");
    }
    if frac.len() > MAX_TIME_DECIMALS {
        return Err("more than 9 decimals (ns is the finest LOBSTER gives)");
    }
    let past = "past 24 h after midnight";
    let secs: u64 = secs.parse().map_err(|_| past)?;
    let mut ns = 0u64;
    for i in 0..MAX_TIME_DECIMALS {
        ns = ns * 10 + frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
    }
    secs.checked_mul(1_000_000_000).and_then(|s| s.checked_add(ns)).filter(|&t| t <= MAX_TIME_NS).ok_or(past)
}

fn csv_reader<R: Read>(input: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(input)
}

/// Reads the next CSV row into `row`: its 1-based physical line, `None` at the end. Errors name the file and the
/// line. The csv reader skips empty lines without a word; a LOBSTER file has none (every line is a message or a
/// book row), so an empty line, anywhere, is a corrupt file: an error naming that line (and the line numbers of
/// errors and `venue_seq` stay the file's own). The reader's position says where it is: a row read from line
/// `n` leaves it at line `n + 1` (or still `n`, for a last line without a line break); more means it skipped
/// empty lines, the first of them at `n`. A row that starts on the line the previous one (`last`) was read from
/// followed a lone carriage return, which the csv reader takes as a row's end without counting a line: also an
/// error (two rows on one line would share a `venue_seq`).
fn next_row<R: Read>(
    rdr: &mut csv::Reader<R>,
    row: &mut csv::StringRecord,
    file: &Path,
    last: u64,
) -> Result<Option<u64>, LobsterError> {
    let before = rdr.position().line();
    let more = rdr.read_record(row).map_err(|e| {
        let detail = match e.kind() {
            csv::ErrorKind::Utf8 { err, .. } => format!("not UTF-8: {err}"),
            _ => e.to_string(),
        };
        LobsterError::Csv { file: file.to_path_buf(), line: e.position().map_or(before, |p| p.line()), detail }
    })?;
    let after = rdr.position().line();
    if after > before + u64::from(more) {
        let detail = "empty line (a LOBSTER file has none: every line is a message or an order-book row)".into();
        return Err(LobsterError::Csv { file: file.to_path_buf(), line: before, detail });
    }
    if more && before == last {
        let detail = "a lone carriage return ends a row (a LOBSTER line ends with a line feed)".into();
        return Err(LobsterError::Csv { file: file.to_path_buf(), line: before, detail });
    }
    Ok(more.then_some(before))
}

fn field_err(file: &Path, line: u64, field: &str, value: &str, detail: &'static str) -> LobsterError {
    LobsterError::Field { file: file.to_path_buf(), line, field: field.to_string(), value: value.to_string(), detail }
}

/// A message CSV, read row by row (streamed: memory does not grow with the file).
pub struct MessageReader<R: Read> {
    file: PathBuf,
    rdr: csv::Reader<R>,
    row: csv::StringRecord,
    line: u64,
}

impl MessageReader<File> {
    /// Opens a message CSV.
    ///
    /// # Errors
    /// [`LobsterError::Open`] naming the file.
    pub fn open(path: &Path) -> Result<MessageReader<File>, LobsterError> {
        let f = File::open(path).map_err(|source| LobsterError::Open { file: path.to_path_buf(), source })?;
        Ok(MessageReader::new(f, path))
    }
}

impl<R: Read> MessageReader<R> {
    /// Reads messages from `input`; `file` names it in errors.
    pub fn new(input: R, file: &Path) -> MessageReader<R> {
        MessageReader { file: file.to_path_buf(), rdr: csv_reader(input), row: csv::StringRecord::new(), line: 0 }
    }

    /// The 1-based line of the last message read (0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The next message, `None` at the end of the file.
    ///
    /// # Errors
    /// [`LobsterError::Csv`], [`LobsterError::Fields`] (not 6 fields) or [`LobsterError::Field`] naming the file,
    /// the line and the field: a time that is not seconds with up to 9 decimals or is past 24 h, a type not 1 to 7, an order_id,
    /// size or price that is not an integer in range, a direction not 1 or -1.
    pub fn next_message(&mut self) -> Result<Option<Message>, LobsterError> {
        let Some(line) = next_row(&mut self.rdr, &mut self.row, &self.file, self.line)? else {
            return Ok(None);
        };
        self.line = line;
        let (file, row) = (&self.file, &self.row);
        if row.len() != 6 {
            return Err(LobsterError::Fields { file: file.clone(), line, found: row.len(), want: 6 });
        }
        let f = |i: usize| row.get(i).unwrap_or_default();
        let bad = |i: usize, name: &str, detail| field_err(file, line, name, f(i), detail);
        let time_ns = parse_time_ns(f(0)).map_err(|d| bad(0, "time", d))?;
        let event = f(1)
            .parse()
            .ok()
            .and_then(EventType::from_number)
            .ok_or_else(|| bad(1, "type", "want a message type 1 to 7"))?;
        let (order_id, cross) = match f(2) {
            "-1" | "-2" | "-3" | "-4" if event == EventType::CrossTrade => (0, f(2).parse().unwrap_or_default()),
            id => (id.parse().map_err(|_| bad(2, "order_id", "want an integer 0 to 2^64-1"))?, 0),
        };
        let size = f(3).parse().map_err(|_| bad(3, "size", "want shares, an integer 0 to 2^32-1"))?;
        let price: i64 = f(4).parse().map_err(|_| bad(4, "price", "want dollars x 10,000 as an integer"))?;
        let side = match f(5) {
            "1" => Side::Bid,
            "-1" => Side::Ask,
            _ => return Err(bad(5, "direction", "want 1 (buy order) or -1 (sell order)")),
        };
        if event == EventType::Halt && !(-1..=1).contains(&price) {
            return Err(bad(4, "price", "a type 7 (halt) message's price is -1, 0 or 1"));
        }
        if price > MAX_PRICE {
            return Err(bad(4, "price", "above 92233720368547 (dollars x 10,000), the most a record carries"));
        }
        if event != EventType::Halt && price <= 0 {
            return Err(bad(4, "price", "want a positive price (dollars x 10,000)"));
        }
        Ok(Some(Message { time_ns, event, order_id, cross, size, price, side }))
    }
}

/// An order-book CSV, read row by row into one reused [`BookRow`].
pub struct BookReader<R: Read> {
    file: PathBuf,
    rdr: csv::Reader<R>,
    row: csv::StringRecord,
    line: u64,
    levels: usize,
    book: BookRow,
}

impl BookReader<File> {
    /// Opens an order-book CSV of `levels` price levels per side.
    ///
    /// # Errors
    /// [`LobsterError::Open`] naming the file.
    pub fn open(path: &Path, levels: usize) -> Result<BookReader<File>, LobsterError> {
        let f = File::open(path).map_err(|source| LobsterError::Open { file: path.to_path_buf(), source })?;
        Ok(BookReader::new(f, path, levels))
    }
}

const LEVEL_FIELDS: [&str; 4] = ["ask_price", "ask_size", "bid_price", "bid_size"];

impl<R: Read> BookReader<R> {
    /// Reads rows of `levels` levels per side (4 x `levels` fields) from `input`; `file` names it in errors.
    pub fn new(input: R, file: &Path, levels: usize) -> BookReader<R> {
        let book = BookRow { asks: vec![None; levels], bids: vec![None; levels] };
        BookReader {
            file: file.to_path_buf(),
            rdr: csv_reader(input),
            row: csv::StringRecord::new(),
            line: 0,
            levels,
            book,
        }
    }

    /// The 1-based line of the last row read (0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The file read.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The next row, `None` at the end of the file.
    ///
    /// # Errors
    /// [`LobsterError::Csv`], [`LobsterError::Fields`] (not 4 x levels fields) or [`LobsterError::Field`] naming
    /// the field (`ask_price_1`, `bid_size_2`, ...): not an integer, a negative size, a price that is not
    /// positive (other than the dummy), a dummy price with a size.
    pub fn next_row(&mut self) -> Result<Option<&BookRow>, LobsterError> {
        let Some(line) = next_row(&mut self.rdr, &mut self.row, &self.file, self.line)? else {
            return Ok(None);
        };
        self.line = line;
        let (file, row) = (&self.file, &self.row);
        if row.len() != 4 * self.levels {
            return Err(LobsterError::Fields { file: file.clone(), line, found: row.len(), want: 4 * self.levels });
        }
        for n in 0..self.levels {
            for (k, side) in [(0, Side::Ask), (2, Side::Bid)] {
                let i = 4 * n + k;
                let (p, s) = (row.get(i).unwrap_or_default(), row.get(i + 1).unwrap_or_default());
                let name = |j: usize| format!("{}_{}", LEVEL_FIELDS[j], n + 1);
                let price: i64 = p.parse().map_err(|_| field_err(file, line, &name(k), p, "want an integer"))?;
                let size: u64 =
                    s.parse().map_err(|_| field_err(file, line, &name(k + 1), s, "want shares, an integer >= 0"))?;
                let dummy = if side == Side::Ask { DUMMY_ASK_PRICE } else { DUMMY_BID_PRICE };
                let level = if price == dummy {
                    if size != 0 {
                        return Err(field_err(file, line, &name(k + 1), s, "an empty level (dummy price) has size 0"));
                    }
                    None
                } else if price <= 0 || price > MAX_PRICE {
                    return Err(field_err(
                        file,
                        line,
                        &name(k),
                        p,
                        "want a positive price up to 92233720368547, or the dummy price",
                    ));
                } else {
                    Some(Level { price, size })
                };
                match side {
                    Side::Ask => self.book.asks[n] = level,
                    _ => self.book.bids[n] = level,
                }
            }
        }
        Ok(Some(&self.book))
    }
}

/// Whether `a` is a better price than `b` on `side` (higher bid, lower ask).
fn better(side: Side, a: i64, b: i64) -> bool {
    if side == Side::Bid {
        a > b
    } else {
        a < b
    }
}

/// The level-1 book rebuilt from the messages, checked against each order-book row (module docs, "The level-1
/// check").
#[derive(Debug, Clone, Default)]
pub struct Level1Book {
    ask: Option<Level>,
    bid: Option<Level>,
    /// Transitions checked and found equal to the row.
    pub consistent: u64,
    /// Of those, transitions where a best level emptied and the next one was taken from the row.
    pub taken_from_row: u64,
}

impl Level1Book {
    /// A book set to `row`'s level 1 (the start: row 1, the book after message 1).
    pub fn from_row(row: &BookRow) -> Level1Book {
        Level1Book { ask: row.best(Side::Ask), bid: row.best(Side::Bid), ..Level1Book::default() }
    }

    /// The best level of `side`.
    pub fn best(&self, side: Side) -> Option<Level> {
        if side == Side::Bid {
            self.bid
        } else {
            self.ask
        }
    }

    fn best_mut(&mut self, side: Side) -> &mut Option<Level> {
        if side == Side::Bid {
            &mut self.bid
        } else {
            &mut self.ask
        }
    }

    /// Applies `m` and compares the result with `row` (the row after `m`). `Err` describes the difference; the
    /// book is then set to the row.
    pub fn apply(&mut self, m: &Message, row: &BookRow) -> Result<(), String> {
        let before = (self.ask, self.bid);
        let side = m.side;
        let other = if side == Side::Bid { Side::Ask } else { Side::Bid };
        let result = match m.event {
            EventType::Submit => {
                let best = self.best_mut(side);
                match best {
                    Some(l) if l.price == m.price => l.size += u64::from(m.size),
                    Some(l) if !better(side, m.price, l.price) => {}
                    _ => *best = Some(Level { price: m.price, size: u64::from(m.size) }),
                }
                Ok(())
            }
            EventType::PartialCancel | EventType::Delete | EventType::VisibleExecution => {
                let taken = self.best(side).filter(|l| l.price == m.price);
                match taken {
                    Some(l) if l.size < u64::from(m.size) => {
                        Err(format!("{side:?} level 1 holds {} shares, the message takes {}", l.size, m.size))
                    }
                    Some(l) if l.size == u64::from(m.size) => {
                        // The level emptied: level-1 data does not say what the next level is; the row does.
                        let next = row.best(side);
                        if next.is_some_and(|n| !better(side, l.price, n.price)) {
                            Err(format!("{side:?} level 1 at {} emptied but the row's best is {next:?}", l.price))
                        } else if row.best(other) != self.best(other) {
                            Err(format!("{other:?} changed on a {:?} of the {side:?} side", m.event))
                        } else {
                            *self.best_mut(side) = next;
                            self.taken_from_row += 1;
                            Ok(())
                        }
                    }
                    Some(l) => {
                        *self.best_mut(side) = Some(Level { price: l.price, size: l.size - u64::from(m.size) });
                        Ok(())
                    }
                    None => Ok(()),
                }
            }
            EventType::HiddenExecution | EventType::CrossTrade | EventType::Halt => Ok(()),
        };
        let result = result.and_then(|()| {
            let want = (row.best(Side::Ask), row.best(Side::Bid));
            if (self.ask, self.bid) == want {
                Ok(())
            } else {
                Err(format!(
                    "from ask {:?} bid {:?}, the messages give ask {:?} bid {:?}; the row says ask {:?} bid {:?}",
                    before.0, before.1, self.ask, self.bid, want.0, want.1
                ))
            }
        });
        match result {
            Ok(()) => self.consistent += 1,
            Err(_) => (self.ask, self.bid) = (row.best(Side::Ask), row.best(Side::Bid)),
        }
        result
    }
}

/// Messages per type and side: `[type 1..=7][0 = sell, 1 = buy]` (index 0 unused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts(pub [[u64; 2]; 8]);

impl MessageCounts {
    /// Messages of `event` on `side` (`Side::None`: both sides).
    pub fn get(&self, event: EventType, side: Side) -> u64 {
        let c = self.0[event as usize];
        match side {
            Side::Ask => c[0],
            Side::Bid => c[1],
            Side::None => c[0] + c[1],
        }
    }

    /// Every message counted.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c[0] + c[1]).sum()
    }
}

/// The records of one message: at most a trade and one record per level and side, or a `NoAction`.
#[derive(Debug, Clone, Default)]
pub struct MessageRecords {
    records: Vec<BookUpdate>,
}

impl MessageRecords {
    /// The records, in order; the last carries [`flags::LAST`].
    pub fn as_slice(&self) -> &[BookUpdate] {
        &self.records
    }
}

/// A LOBSTER message file and its order-book file, replayed together: each message checked (the level-1 rebuild)
/// and normalised into records (module docs, "What subscribers get").
pub struct LobsterFeed<R: Read = File, B: Read = File> {
    messages: MessageReader<R>,
    rows: BookReader<B>,
    prev: BookRow,
    level1: Option<Level1Book>,
    midnight_ns: u64,
    counts: MessageCounts,
    out: MessageRecords,
}

impl LobsterFeed {
    /// Opens a message file and its order-book file (`None`: the message file's name with `_message_` →
    /// `_orderbook_`). The levels per side come from the message file's name; ts_event is `midnight_ns` (the
    /// session date's US Eastern midnight, ns since the UNIX epoch) + the message time.
    ///
    /// # Errors
    /// [`LobsterError::FileName`] for a message file name that is not LOBSTER's, [`LobsterError::Open`].
    pub fn open(message_path: &Path, orderbook: Option<&Path>, midnight_ns: u64) -> Result<LobsterFeed, LobsterError> {
        let name = FileName::parse(message_path)?;
        let book_path = match orderbook {
            Some(p) => p.to_path_buf(),
            None => orderbook_path(message_path).ok_or_else(|| LobsterError::FileName {
                file: message_path.to_path_buf(),
                detail: "no _message_ in it to find the order-book file by".into(),
            })?,
        };
        let messages = MessageReader::open(message_path)?;
        let rows = BookReader::open(&book_path, name.levels)?;
        Ok(LobsterFeed::new(messages, rows, midnight_ns))
    }
}

impl<R: Read, B: Read> LobsterFeed<R, B> {
    /// A replay of `messages` checked against `rows`.
    pub fn new(messages: MessageReader<R>, rows: BookReader<B>, midnight_ns: u64) -> LobsterFeed<R, B> {
        let levels = rows.levels;
        let prev = BookRow { asks: vec![None; levels], bids: vec![None; levels] };
        let out = MessageRecords { records: Vec::with_capacity(1 + 2 * levels) };
        LobsterFeed { messages, rows, prev, level1: None, midnight_ns, counts: MessageCounts::default(), out }
    }

    /// Messages read so far, per type and side.
    pub fn counts(&self) -> &MessageCounts {
        &self.counts
    }

    /// The level-1 check so far (`None` before the first message).
    pub fn level1(&self) -> Option<&Level1Book> {
        self.level1.as_ref()
    }

    /// The order-book row after the last message.
    pub fn row(&self) -> &BookRow {
        &self.prev
    }

    /// The next message with its records, `None` once both files ended together.
    ///
    /// # Errors
    /// Any [`MessageReader::next_message`] or [`BookReader::next_row`] error; [`LobsterError::Length`] when one
    /// file ends before the other; [`LobsterError::Mismatch`] naming the order-book line when the level-1 book
    /// rebuilt from the messages differs from the row (the two files do not belong together, or one is corrupt).
    pub fn next_message(&mut self) -> Result<Option<(Message, &MessageRecords)>, LobsterError> {
        let m = self.messages.next_message()?;
        let line = self.messages.line();
        let book_file = self.rows.file.clone();
        let Some(row) = self.rows.next_row()? else {
            return match m {
                None => Ok(None),
                Some(_) => Err(LobsterError::Length {
                    file: book_file,
                    detail: format!("ends after {} rows; the message file goes on at line {line}", line - 1),
                }),
            };
        };
        let Some(m) = m else {
            return Err(LobsterError::Length {
                file: book_file,
                detail: format!("row {} has no message: the message file ends after {line} lines", line + 1),
            });
        };
        let too_big = |field: String, v: u64| LobsterError::Field {
            file: book_file.clone(),
            line,
            field,
            value: v.to_string(),
            detail: "more shares than a record carries (2^32-1)",
        };
        match &mut self.level1 {
            None => self.level1 = Some(Level1Book::from_row(row)),
            Some(b) => {
                b.apply(&m, row).map_err(|detail| LobsterError::Mismatch { file: book_file.clone(), line, detail })?
            }
        }
        self.counts.0[m.event as usize][usize::from(m.side == Side::Bid)] += 1;
        let ts_event_ns = self.midnight_ns + m.time_ns;
        let base = BookUpdate {
            ts_event_ns,
            ts_recv_ns: ts_event_ns,
            instrument_id: INSTRUMENT_ID,
            venue_pos: venue_position(line, 0),
            flags: flags::BAD_TS_RECV,
            ..BookUpdate::control(Kind::NoAction)
        };
        let out = &mut self.out.records;
        out.clear();
        if matches!(m.event, EventType::VisibleExecution | EventType::HiddenExecution | EventType::CrossTrade) {
            out.push(BookUpdate {
                kind: Kind::Trade as u8,
                side: if m.side == Side::Bid { Side::Ask as u8 } else { Side::Bid as u8 },
                price_e9: m.price * PRICE_E9_PER_UNIT,
                size: m.size,
                order_id: m.order_id,
                ..base
            });
        }
        for side in [Side::Ask, Side::Bid] {
            // Deepest first: LOBSTER's empty levels are the deepest ones, so a delete never shifts an occupied
            // level, and a change replaces its position in place.
            for (n, (was, now)) in self.prev.side(side).iter().zip(row.side(side)).enumerate().rev() {
                let kind = match (was, now) {
                    (a, b) if a == b => continue,
                    (_, Some(_)) => Kind::LevelChange,
                    (_, None) => Kind::LevelDelete,
                };
                let (price_e9, size) = match now {
                    Some(l) => (
                        l.price * PRICE_E9_PER_UNIT,
                        u32::try_from(l.size).map_err(|_| {
                            too_big(format!("{}_size_{}", if side == Side::Ask { "ask" } else { "bid" }, n + 1), l.size)
                        })?,
                    ),
                    None => (0, 0),
                };
                let level = (n + 1) as u8;
                out.push(BookUpdate {
                    kind: kind as u8,
                    side: side as u8,
                    price_e9,
                    size,
                    level,
                    flags: base.flags | flags::MBP,
                    ..base
                });
            }
        }
        if let Some(state) = m.halt_state() {
            let state = match state {
                HaltState::Halted => b'H',
                HaltState::Quoting => b'Q',
                HaltState::Resumed => b'T',
            };
            let status = Status { kind: StatusKind::Trading, state, reason: *b"    " };
            out.push(BookUpdate {
                ts_event_ns,
                ts_recv_ns: ts_event_ns,
                venue_pos: base.venue_pos,
                flags: base.flags,
                ..BookUpdate::trading_status(INSTRUMENT_ID, status)
            });
        }
        if out.is_empty() {
            out.push(base);
        }
        if let Some(last) = out.last_mut() {
            last.flags |= flags::LAST;
        }
        // Each record's index within the message completes its venue position.
        for (i, r) in out.iter_mut().enumerate() {
            r.venue_pos |= u64::from(u16::try_from(i).unwrap_or(u16::MAX));
        }
        self.prev.clone_from(row);
        Ok(Some((m, &self.out)))
    }
}
