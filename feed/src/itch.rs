//! Nasdaq TotalView-ITCH 5.0: message decoding, the BinaryFILE source, and normalisation of the order-level
//! messages into [`BookUpdate`] records.
//!
//! Source: Nasdaq TotalView-ITCH 5.0 specification (section 3: data types; section 4, message formats: 4.1
//! system event; 4.2 stock related messages; 4.3 add order; 4.4 modify order; 4.5 trade messages; 4.6 NOII; 4.7
//! RPII; 4.8 DLCR; section numbers as we read the spec's table of contents, not re-checked against the PDF). Offsets
//! below are the specification's; every message was also checked against the bundled real files
//! (data/nasdaq-itch50-20191230-binaryfile-excerpts/, data/nasdaq-itch50-moldudp64-pcap-20230822/).
//!
//! ## Why hand-written
//!
//! The crate registry has ITCH 5.0 parsers (`itchy` 0.3, nom-based; `itch5` 0.1). Judged from their published
//! docs only (not run on the bundled files, for lack of time): `itchy`'s message list has no DLCR (`O`)
//! message, it pulls in nom, arrayvec and a 128-bit decimal type for prices, and its `MessageStream` owns the file
//! I/O; `itch5` is a handler-callback parser without a documented skip-and-count of unknown types. Neither gives
//! errors naming the offset and field. The layouts are fixed-size and short, so this module reads them directly,
//! in the shape of [`crate::mdp3`].
//!
//! Speed: `mdfan-bench` (`benches/src/itch.rs`, criterion group `itch`) times [`ItchFile`] + decode + normalise
//! against a real decoder of the same bytes in the same run (the `itch5` crate's parse plus a `std` `HashMap`
//! order table of the same capacity, yielding the same side, price and remaining shares), on the bundled snippet
//! and on a synthetic day over a million live orders, with callgrind's instruction counts beside the times (the
//! report's "ITCH 5.0 decode" table has the figures of a run).
//!
//! ## Framing
//!
//! BinaryFILE (and each MoldUDP64 message block, see [`crate::moldudp64`]): a u16 big-endian length, then that
//! many bytes of one message. All integers are big-endian and unsigned. [`ItchFile`] streams a BinaryFILE, plain
//! or gzip (Nasdaq ships `.gz`), one message at a time; its errors ([`ItchFileError`]) name the file and the byte
//! offset of the message's length prefix in the decompressed stream.
//!
//! ## Common header (every message), 11 bytes
//!
//! | offset | size | field | |
//! |---:|---:|---|---|
//! | 0 | 1 | message type | ASCII |
//! | 1 | 2 | stock locate | 0 for market-wide messages; the record's `instrument_id` |
//! | 3 | 2 | tracking number | Nasdaq internal |
//! | 5 | 6 | timestamp | ns since midnight (US Eastern); refused at or past 24 h |
//!
//! ## Messages (offsets after the header; total length = the spec's, a shorter one is refused, longer ones are
//! accepted and their extra bytes counted in [`ItchStats::longer_than_spec`])
//!
//! | type | name (spec section) | length | fields (offset) |
//! |---|---|---:|---|
//! | `S` | System Event (4.1) | 12 | event code (11) |
//! | `R` | Stock Directory (4.2.1) | 39 | stock (11, 8), market category (19), financial status (20), round lot size u32 (21), round lots only (25), issue classification (26), issue sub-type (27, 2), authenticity (29), short sale threshold (30), IPO flag (31), LULD reference price tier (32), ETP flag (33), ETP leverage factor u32 (34), inverse indicator (38) |
//! | `H` | Stock Trading Action (4.2.2) | 25 | stock (11, 8), trading state (19), reserved (20), reason (21, 4) |
//! | `Y` | Reg SHO Restriction (4.2.3) | 20 | stock (11, 8), Reg SHO action (19) |
//! | `L` | Market Participant Position (4.2.4) | 26 | MPID (11, 4), stock (15, 8), primary market maker (23), market maker mode (24), market participant state (25) |
//! | `V` | MWCB Decline Level (4.2.5.1) | 35 | level 1, 2, 3: u64 price, 8 decimals (11, 19, 27) |
//! | `W` | MWCB Status (4.2.5.2) | 12 | breached level (11) |
//! | `K` | IPO Quoting Period Update (4.2.6) | 28 | stock (11, 8), IPO quotation release time u32 s since midnight (19), release qualifier (23), IPO price u32 (24) |
//! | `J` | LULD Auction Collar (4.2.7) | 35 | stock (11, 8), reference price (19), upper collar (23), lower collar (27), extension u32 (31) |
//! | `h` | Operational Halt (4.2.8) | 21 | stock (11, 8), market code (19), operational halt action (20) |
//! | `A` | Add Order, no MPID (4.3.1) | 36 | order reference number u64 (11), buy/sell (19), shares u32 (20), stock (24, 8), price u32 (32) |
//! | `F` | Add Order with MPID (4.3.2) | 40 | as `A`, then attribution MPID (36, 4) |
//! | `E` | Order Executed (4.4.1) | 31 | order reference number (11), executed shares u32 (19), match number u64 (23) |
//! | `C` | Order Executed with Price (4.4.2) | 36 | as `E`, then printable (31), execution price u32 (32) |
//! | `X` | Order Cancel (4.4.3) | 23 | order reference number (11), cancelled shares u32 (19) |
//! | `D` | Order Delete (4.4.4) | 19 | order reference number (11) |
//! | `U` | Order Replace (4.4.5) | 35 | original order reference number (11), new order reference number (19), shares u32 (27), price u32 (31) |
//! | `P` | Trade, non-cross (4.5.1) | 44 | order reference number (11), buy/sell (19), shares u32 (20), stock (24, 8), price u32 (32), match number (36) |
//! | `Q` | Cross Trade (4.5.2) | 40 | shares u64 (11), stock (19, 8), cross price u32 (27), match number (31), cross type (39) |
//! | `B` | Broken Trade (4.5.3) | 19 | match number (11) |
//! | `I` | NOII (4.6) | 50 | paired shares u64 (11), imbalance shares u64 (19), imbalance direction (27), stock (28, 8), far price (36), near price (40), current reference price (44), cross type (48), price variation indicator (49) |
//! | `N` | RPII (4.7) | 20 | stock (11, 8), interest flag (19) |
//! | `O` | DLCR price discovery (4.8) | 48 | stock (11, 8), open eligibility status (19), minimum allowable price (20), maximum allowable price (24), near execution price (28), near execution time u64 ns (32), lower price range collar (40), upper price range collar (44) |
//!
//! Prices are u32 with 4 implied decimals, turned into 1e-9 units exactly (x 10^5); MWCB levels are u64 with 8
//! implied decimals (x 10, refused if that passes `i64`). Symbols (stock, 8 bytes) and MPIDs (4 bytes) are
//! space-padded ASCII and must be printable. Buy/sell must be `B` or `S`. Other one-byte codes are passed through
//! unchecked (Nasdaq adds codes without a new version).
//!
//! An unknown message type is not an error: [`decode_message`] returns [`Body::Unknown`] and the caller skips it
//! by its length prefix; [`ItchStats::unknown`] counts them. An empty message (length 0) is refused.
//!
//! ## Normalisation ([`ItchNormalizer`])
//!
//! `instrument_id` = stock locate; `order_id` = order reference number; `ts_event_ns` = the session's US Eastern
//! midnight (ns since the UNIX epoch, [`eastern_midnight_ns`]) + the timestamp; `venue_pos` = the caller's
//! position of the message in its stream (1-based message index in a file; the MoldUDP64 sequence number on the
//! wire) and the record's index within the message (`wire::record`, "Venue position"); the tracking number is
//! not used (it is not a sequence). [`flags::LAST`] is set on
//! the last record of each message.
//!
//! | message | records |
//! |---|---|
//! | `A`, `F` | `Add` (side, shares, price); the reference is remembered with its locate, side, price and shares |
//! | `E` | `Fill` at the resting price, executed shares; then `Cancel` of the executed shares (the order goes at 0) |
//! | `C` | `Fill` at the execution price; then `Cancel` of the executed shares at the resting price (the resting price does not move) |
//! | `X` | `Cancel` of the cancelled shares |
//! | `D` | `Cancel` of all the shares left |
//! | `U` | `Cancel` of the original reference (all shares left); then `Add` of the new reference, same side and locate, new shares and price |
//! | `P` | `Trade` (side, shares, price; `order_id` = the reference, 0 since 2014) |
//! | `Q` | `Trade`, side `N`, shares saturated to u32 |
//! | `H` | `TradingStatus`: status kind `H`, state = trading state (`H`, `P`, `Q`, `T`), reason = the 4-byte reason |
//! | `Y` | `TradingStatus`: status kind `Y`, state = Reg SHO action (`0`, `1`, `2`), reason 4 spaces |
//! | `h` | `TradingStatus`: status kind `h`, state = operational halt action (`H`, `T`), reason = market code + 3 spaces |
//! | other | no record, counted by type in [`NormalizerStats::no_record`]; all but `R` and System Event `O` also in [`NormalizerStats::skipped`], with where the first was |
//!
//! The `TradingStatus` layout is in `mdfan_wire::record` ("Trading status records"). The per-instrument states
//! are the three above; the others give no record and are counted: `S`, `V` and `W` are market-wide (stock
//! locate 0), `J` (LULD auction collar) carries an auction's collar prices, not a state, and `L`, `K`, `I`, `N`,
//! `O` are about participants, IPOs and auctions (and `B`, a broken trade, changes no book); a caller can read
//! them all from [`Message`]. `R` (Stock Directory) gives no record either: its symbols reach subscribers in
//! the handshake ([`stock_directory`]).
//!
//! A reference that is not known (the stream joined mid-day, or an order the table lost) is counted
//! ([`NormalizerStats::unknown_reference`], by type) and the message skipped; the first time on a locate, one
//! [`Kind::InstrumentStale`] record ([`StaleBook::Order`], `order_id` = the reference) marks that book unsynced. Executions or cancels
//! of more shares than rest are cut to what rests, counted, and mark the locate stale too (a third record after
//! `Fill` and `Cancel`); so does an add of a live reference (skipped). The only clear point in ITCH is the start of the day: System Event `O`
//! (start of messages) empties the reference table and marks every locate synced again (no snapshot exists on
//! TotalView-ITCH; no `Clear` record is sent, as the books are empty then).
//!
//! ## Allocation and panics
//!
//! Decoding reads a borrowed slice and never allocates or panics. The normaliser allocates its tables once (the
//! locate → symbol table, 65,536 entries; the stale bitset; the reference table at the capacity given), and
//! only again if more orders rest than that capacity.

use std::fmt;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use mdfan_wire::{flags, venue_position, BookUpdate, InstrumentDef, Kind, Side, StaleBook, StatusKind, Symbology};

use crate::order_table::OrderTable;

/// The common header: type, stock locate, tracking number, timestamp (spec 4).
pub const HEADER_BYTES: usize = 11;
/// The BinaryFILE and MoldUDP64 length prefix, u16 big-endian.
pub const LENGTH_PREFIX_BYTES: usize = 2;
/// 4-decimal prices to 1e-9 units.
const PRICE4_TO_E9: i64 = 100_000;
/// 8-decimal prices (MWCB levels) to 1e-9 units.
const PRICE8_TO_E9: i64 = 10;
/// One day in ns: a timestamp at or past it is refused.
pub const DAY_NS: u64 = 86_400_000_000_000;

/// The specification's length of a message type, header included; `None` for a type ITCH 5.0 does not define.
/// (A table lookup: it runs for every message.)
pub const fn message_length(msg_type: u8) -> Option<usize> {
    match LENGTHS[msg_type as usize] {
        0 => None,
        n => Some(n as usize),
    }
}

/// [`spec_length`] of each type byte, 0 for none.
const LENGTHS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut t = 0;
    while t < 256 {
        if let Some(n) = spec_length(t as u8) {
            table[t] = n as u8;
        }
        t += 1;
    }
    table
};

/// The lengths of spec section 4, by type.
const fn spec_length(msg_type: u8) -> Option<usize> {
    Some(match msg_type {
        b'S' | b'W' => 12,
        b'R' => 39,
        b'H' => 25,
        b'Y' | b'N' => 20,
        b'L' => 26,
        b'V' | b'J' | b'U' => 35,
        b'K' => 28,
        b'h' => 21,
        b'A' | b'C' => 36,
        b'F' | b'Q' => 40,
        b'E' => 31,
        b'X' => 23,
        b'D' | b'B' => 19,
        b'P' => 44,
        b'I' => 50,
        b'O' => 48,
        _ => return None,
    })
}

/// The specification's name of a message type, or `"unknown"`.
pub const fn type_name(msg_type: u8) -> &'static str {
    match msg_type {
        b'S' => "System Event",
        b'R' => "Stock Directory",
        b'H' => "Stock Trading Action",
        b'Y' => "Reg SHO Restriction",
        b'L' => "Market Participant Position",
        b'V' => "MWCB Decline Level",
        b'W' => "MWCB Status",
        b'K' => "IPO Quoting Period Update",
        b'J' => "LULD Auction Collar",
        b'h' => "Operational Halt",
        b'A' => "Add Order",
        b'F' => "Add Order with MPID",
        b'E' => "Order Executed",
        b'C' => "Order Executed with Price",
        b'X' => "Order Cancel",
        b'D' => "Order Delete",
        b'U' => "Order Replace",
        b'P' => "Trade",
        b'Q' => "Cross Trade",
        b'B' => "Broken Trade",
        b'I' => "NOII",
        b'N' => "RPII",
        b'O' => "DLCR",
        _ => "unknown",
    }
}

/// An 8-byte space-padded stock symbol (spec 3, Alpha).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Symbol(pub [u8; 8]);

impl Default for Symbol {
    /// All spaces: no symbol.
    fn default() -> Self {
        Symbol([b' '; 8])
    }
}

impl Symbol {
    /// The symbol without its padding.
    pub fn as_str(&self) -> &str {
        let s = std::str::from_utf8(&self.0).unwrap_or("");
        s.trim_end_matches(' ')
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A 4-byte space-padded market participant id (MPID, spec 3, Alpha).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mpid(pub [u8; 4]);

impl Mpid {
    /// The MPID without its padding.
    pub fn as_str(&self) -> &str {
        let s = std::str::from_utf8(&self.0).unwrap_or("");
        s.trim_end_matches(' ')
    }
}

impl fmt::Debug for Mpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// The common header of every message (spec 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// The message type byte.
    pub msg_type: u8,
    /// Stock locate: the instrument (0 for market-wide messages).
    pub stock_locate: u16,
    /// Tracking number (Nasdaq internal).
    pub tracking_number: u16,
    /// ns since midnight, US Eastern.
    pub timestamp_ns: u64,
}

/// Stock Directory (spec 4.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockDirectory {
    /// Symbol.
    pub stock: Symbol,
    /// Market category (`Q`, `G`, `S`, `N`, `A`, `P`, `Z`, `V`, space).
    pub market_category: u8,
    /// Financial status indicator.
    pub financial_status: u8,
    /// Round lot size in shares.
    pub round_lot_size: u32,
    /// Round lots only (`Y`/`N`).
    pub round_lots_only: u8,
    /// Issue classification.
    pub issue_classification: u8,
    /// Issue sub-type (2 bytes).
    pub issue_subtype: [u8; 2],
    /// Authenticity (`P` live, `T` test).
    pub authenticity: u8,
    /// Short sale threshold indicator.
    pub short_sale_threshold: u8,
    /// IPO flag.
    pub ipo_flag: u8,
    /// LULD reference price tier.
    pub luld_tier: u8,
    /// ETP flag.
    pub etp_flag: u8,
    /// ETP leverage factor.
    pub etp_leverage_factor: u32,
    /// Inverse indicator.
    pub inverse: u8,
}

/// Add Order (spec 4.3.1) and Add Order with MPID (4.3.2, `mpid` set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddOrder {
    /// Order reference number.
    pub order_ref: u64,
    /// `B` buy or `S` sell.
    pub buy_sell: u8,
    /// Shares.
    pub shares: u32,
    /// Symbol.
    pub stock: Symbol,
    /// Price in 1e-9 units.
    pub price_e9: i64,
    /// Attribution MPID (`F` only).
    pub mpid: Option<Mpid>,
}

/// NOII (spec 4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imbalance {
    /// Paired shares.
    pub paired_shares: u64,
    /// Imbalance shares.
    pub imbalance_shares: u64,
    /// Imbalance direction (`B`, `S`, `N`, `O`, `P`).
    pub direction: u8,
    /// Symbol.
    pub stock: Symbol,
    /// Far price, 1e-9 units.
    pub far_price_e9: i64,
    /// Near price, 1e-9 units.
    pub near_price_e9: i64,
    /// Current reference price, 1e-9 units.
    pub reference_price_e9: i64,
    /// Cross type.
    pub cross_type: u8,
    /// Price variation indicator.
    pub price_variation: u8,
}

/// DLCR price discovery (spec 4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dlcr {
    /// Symbol.
    pub stock: Symbol,
    /// Open eligibility status.
    pub open_eligibility: u8,
    /// Minimum allowable price, 1e-9 units.
    pub min_price_e9: i64,
    /// Maximum allowable price, 1e-9 units.
    pub max_price_e9: i64,
    /// Near execution price, 1e-9 units.
    pub near_price_e9: i64,
    /// Near execution time, ns since midnight.
    pub near_time_ns: u64,
    /// Lower price range collar, 1e-9 units.
    pub lower_collar_e9: i64,
    /// Upper price range collar, 1e-9 units.
    pub upper_collar_e9: i64,
}

/// A decoded message body (layouts in the module docs).
#[allow(missing_docs)] // the fields are named as in the specification's tables (module docs)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `S` (4.1).
    SystemEvent { event_code: u8 },
    /// `R` (4.2.1).
    StockDirectory(StockDirectory),
    /// `H` (4.2.2).
    TradingAction { stock: Symbol, trading_state: u8, reason: [u8; 4] },
    /// `Y` (4.2.3).
    RegSho { stock: Symbol, action: u8 },
    /// `L` (4.2.4).
    ParticipantPosition { mpid: Mpid, stock: Symbol, primary_market_maker: u8, mode: u8, state: u8 },
    /// `V` (4.2.5.1).
    MwcbDeclineLevel { level1_e9: i64, level2_e9: i64, level3_e9: i64 },
    /// `W` (4.2.5.2).
    MwcbStatus { breached_level: u8 },
    /// `K` (4.2.6).
    IpoQuotingPeriod { stock: Symbol, release_time_s: u32, qualifier: u8, price_e9: i64 },
    /// `J` (4.2.7).
    LuldAuctionCollar { stock: Symbol, reference_e9: i64, upper_e9: i64, lower_e9: i64, extension: u32 },
    /// `h` (4.2.8).
    OperationalHalt { stock: Symbol, market_code: u8, action: u8 },
    /// `A` (4.3.1), `F` (4.3.2).
    AddOrder(AddOrder),
    /// `E` (4.4.1).
    Executed { order_ref: u64, shares: u32, match_number: u64 },
    /// `C` (4.4.2).
    ExecutedWithPrice { order_ref: u64, shares: u32, match_number: u64, printable: u8, price_e9: i64 },
    /// `X` (4.4.3).
    Cancel { order_ref: u64, shares: u32 },
    /// `D` (4.4.4).
    Delete { order_ref: u64 },
    /// `U` (4.4.5).
    Replace { original_ref: u64, new_ref: u64, shares: u32, price_e9: i64 },
    /// `P` (4.5.1).
    Trade { order_ref: u64, buy_sell: u8, shares: u32, stock: Symbol, price_e9: i64, match_number: u64 },
    /// `Q` (4.5.2).
    CrossTrade { shares: u64, stock: Symbol, price_e9: i64, match_number: u64, cross_type: u8 },
    /// `B` (4.5.3).
    BrokenTrade { match_number: u64 },
    /// `I` (4.6).
    Imbalance(Imbalance),
    /// `N` (4.7).
    RetailInterest { stock: Symbol, interest_flag: u8 },
    /// `O` (4.8).
    Dlcr(Dlcr),
    /// A type ITCH 5.0 does not define: skipped by its length. The header is decoded only if the message
    /// holds one (else zero but the type).
    Unknown { len: usize },
}

/// One decoded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// The common header.
    pub header: Header,
    /// The body.
    pub body: Body,
}

/// What is wrong with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Shorter than its type's length.
    #[error("{have} bytes, the type has {need}")]
    Truncated {
        /// Bytes present.
        have: usize,
        /// The specification's length.
        need: usize,
    },
    /// A length prefix of 0.
    #[error("0 bytes, a message has at least its type byte")]
    Empty,
    /// A field holds a value the specification does not allow.
    #[error("value {0} (0x{0:x}) is not one the specification allows")]
    BadValue(u64),
    /// A price that does not fit `i64` once scaled to 1e-9.
    #[error("price {0} does not fit i64 once scaled to 1e-9")]
    PriceOverflow(u64),
}

/// A message refused: names its byte offset (in the file or MoldUDP64 payload, of its length prefix), type and
/// field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ITCH message at byte {offset}, type {} ({}), field {field}: {problem}", TypeByte(*msg_type), type_name(*msg_type))]
pub struct DecodeError {
    /// Byte offset of the message's length prefix.
    pub offset: u64,
    /// The message type byte (0 for an empty message).
    pub msg_type: u8,
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong.
    pub problem: Problem,
}

/// A message type byte as errors show it: the letter when it is printable ASCII, else hex (`0x00` for an empty
/// message, which has none), so an error line never carries a control byte.
struct TypeByte(u8);

impl fmt::Display for TypeByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "{}", self.0 as char)
        } else {
            write!(f, "0x{:02x}", self.0)
        }
    }
}

/// Checked big-endian reads over one message, each naming its field on failure.
struct Reader<'a> {
    b: &'a [u8],
    offset: u64,
    msg_type: u8,
}

impl Reader<'_> {
    fn err(&self, field: &'static str, problem: Problem) -> DecodeError {
        DecodeError { offset: self.offset, msg_type: self.msg_type, field, problem }
    }
    fn bytes<const N: usize>(&self, at: usize, field: &'static str) -> Result<[u8; N], DecodeError> {
        self.b
            .get(at..at + N)
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or_else(|| self.err(field, Problem::Truncated { have: self.b.len(), need: at + N }))
    }
    fn u8(&self, at: usize, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.bytes::<1>(at, field)?[0])
    }
    fn u16(&self, at: usize, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.bytes(at, field)?))
    }
    fn u32(&self, at: usize, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.bytes(at, field)?))
    }
    fn u64(&self, at: usize, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.bytes(at, field)?))
    }
    fn u48(&self, at: usize, field: &'static str) -> Result<u64, DecodeError> {
        let b: [u8; 6] = self.bytes(at, field)?;
        Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }
    fn price4(&self, at: usize, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from(self.u32(at, field)?) * PRICE4_TO_E9)
    }
    fn price8(&self, at: usize, field: &'static str) -> Result<i64, DecodeError> {
        let raw = self.u64(at, field)?;
        i64::try_from(raw)
            .ok()
            .and_then(|v| v.checked_mul(PRICE8_TO_E9))
            .ok_or_else(|| self.err(field, Problem::PriceOverflow(raw)))
    }
    fn printable<const N: usize>(&self, at: usize, field: &'static str) -> Result<[u8; N], DecodeError> {
        let b = self.bytes::<N>(at, field)?;
        match b.iter().find(|&&c| !(0x20..0x7f).contains(&c)) {
            Some(&c) => Err(self.err(field, Problem::BadValue(u64::from(c)))),
            None => Ok(b),
        }
    }
    fn stock(&self, at: usize) -> Result<Symbol, DecodeError> {
        Ok(Symbol(self.printable(at, "stock")?))
    }
    fn mpid(&self, at: usize, field: &'static str) -> Result<Mpid, DecodeError> {
        Ok(Mpid(self.printable(at, field)?))
    }
    fn buy_sell(&self, at: usize) -> Result<u8, DecodeError> {
        match self.u8(at, "buy/sell")? {
            c @ (b'B' | b'S') => Ok(c),
            c => Err(self.err("buy/sell", Problem::BadValue(u64::from(c)))),
        }
    }
}

/// The specification's length of a type [`book_message`] reads (0 for any other, which it never asks for).
const fn book_len(msg_type: u8) -> usize {
    match message_length(msg_type) {
        Some(n) => n,
        None => 0,
    }
}

/// Big-endian fields of a message whose length was checked: `at` is a constant at each call, so these compile
/// to plain loads.
#[inline(always)]
fn be16<const N: usize>(b: &[u8; N], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline(always)]
fn be32<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline(always)]
fn be64<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    u64::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5], b[at + 6], b[at + 7]])
}

/// Whether each of the 8 bytes of `v` is printable ASCII (0x20 to 0x7e), a word at a time: a byte below 0x20
/// borrows into its high bit when 0x20 is taken from it (and a borrow only starts at such a byte), a byte above
/// 0x7e has its high bit set once 1 is added or had it already (and a carry only starts at 0xff, which had).
#[inline(always)]
const fn all_printable(v: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = v.wrapping_sub(ONES * 0x20) & !v & HIGH;
    let above = (v.wrapping_add(ONES) | v) & HIGH;
    below | above == 0
}

/// The message header of a message whose length was checked; `None` for a timestamp at or past 24 h.
#[inline(always)]
fn book_header<const N: usize>(b: &[u8; N]) -> Option<Header> {
    let t = u64::from(be16(b, 5)) << 32 | u64::from(be32(b, 7));
    (t < DAY_NS).then(|| Header {
        msg_type: b[0],
        stock_locate: be16(b, 1),
        tracking_number: be16(b, 3),
        timestamp_ns: t,
    })
}

/// Side of a book message: `B` or `S`, else `None`.
#[inline(always)]
fn book_side(c: u8) -> Option<u8> {
    matches!(c, b'B' | b'S').then_some(c)
}

/// 4-decimal price to 1e-9 units.
#[inline(always)]
fn book_price4(raw: u32) -> i64 {
    i64::from(raw) * PRICE4_TO_E9
}

/// An 8-byte symbol at `at`, if every byte is printable.
#[inline(always)]
fn book_stock<const N: usize>(b: &[u8; N], at: usize) -> Option<Symbol> {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5], b[at + 6], b[at + 7]];
    all_printable(u64::from_le_bytes(v)).then_some(Symbol(v))
}

/// The fields `A` and `F` share (spec 4.3.1, 4.3.2), from a message whose length was checked.
#[inline(always)]
fn add_order<const N: usize>(b: &[u8; N], mpid: Option<Mpid>) -> Option<AddOrder> {
    Some(AddOrder {
        order_ref: be64(b, 11),
        buy_sell: book_side(b[19])?,
        shares: be32(b, 20),
        stock: book_stock(b, 24)?,
        price_e9: book_price4(be32(b, 32)),
        mpid,
    })
}

/// The order-book messages (`A`, `F`, `E`, `C`, `X`, `D`, `U`, `P`: spec 4.3 to 4.5.1) read in place, each
/// field at its fixed offset once the length is checked: what [`decode_message`] gives for them. `None` for any
/// other type and for any message one of its checks refuses (length, timestamp, buy/sell, a symbol or MPID that
/// is not printable): [`decode_message`] then decodes it field by field and names the field.
#[inline(always)]
fn book_message(b: &[u8]) -> Option<Message> {
    let (header, body) = match *b.first()? {
        b'A' => {
            let b = b.first_chunk::<{ book_len(b'A') }>()?;
            (book_header(b)?, Body::AddOrder(add_order(b, None)?))
        }
        b'F' => {
            let b = b.first_chunk::<{ book_len(b'F') }>()?;
            let mpid = [b[36], b[37], b[38], b[39]];
            // checked as 8 bytes, padded with spaces (printable)
            if !all_printable(u64::from_le_bytes([mpid[0], mpid[1], mpid[2], mpid[3], b' ', b' ', b' ', b' '])) {
                return None;
            }
            (book_header(b)?, Body::AddOrder(add_order(b, Some(Mpid(mpid)))?))
        }
        b'E' => {
            let b = b.first_chunk::<{ book_len(b'E') }>()?;
            let body = Body::Executed { order_ref: be64(b, 11), shares: be32(b, 19), match_number: be64(b, 23) };
            (book_header(b)?, body)
        }
        b'C' => {
            let b = b.first_chunk::<{ book_len(b'C') }>()?;
            let body = Body::ExecutedWithPrice {
                order_ref: be64(b, 11),
                shares: be32(b, 19),
                match_number: be64(b, 23),
                printable: b[31],
                price_e9: book_price4(be32(b, 32)),
            };
            (book_header(b)?, body)
        }
        b'X' => {
            let b = b.first_chunk::<{ book_len(b'X') }>()?;
            (book_header(b)?, Body::Cancel { order_ref: be64(b, 11), shares: be32(b, 19) })
        }
        b'D' => {
            let b = b.first_chunk::<{ book_len(b'D') }>()?;
            (book_header(b)?, Body::Delete { order_ref: be64(b, 11) })
        }
        b'U' => {
            let b = b.first_chunk::<{ book_len(b'U') }>()?;
            let body = Body::Replace {
                original_ref: be64(b, 11),
                new_ref: be64(b, 19),
                shares: be32(b, 27),
                price_e9: book_price4(be32(b, 31)),
            };
            (book_header(b)?, body)
        }
        b'P' => {
            let b = b.first_chunk::<{ book_len(b'P') }>()?;
            let body = Body::Trade {
                order_ref: be64(b, 11),
                buy_sell: book_side(b[19])?,
                shares: be32(b, 20),
                stock: book_stock(b, 24)?,
                price_e9: book_price4(be32(b, 32)),
                match_number: be64(b, 36),
            };
            (book_header(b)?, body)
        }
        _ => return None,
    };
    Some(Message { header, body })
}

/// Decodes one message (the bytes after its length prefix); `offset` (of the length prefix) only names it in
/// errors. An unknown type gives [`Body::Unknown`], not an error. The order-book types are read in place first
/// (each field at its offset once the length is checked); a message that fails any check there, and every other
/// type, is decoded field by field, which names the field at fault.
///
/// # Errors
/// [`DecodeError`] for an empty message, a known type shorter than the spec's length, a timestamp at or past
/// 24 h, a buy/sell other than `B`/`S`, a symbol or MPID that is not printable ASCII, or an MWCB level past
/// `i64` once scaled.
pub fn decode_message(b: &[u8], offset: u64) -> Result<Message, DecodeError> {
    match book_message(b) {
        Some(m) => Ok(m),
        None => decode_fields(b, offset),
    }
}

/// [`decode_message`] field by field, each read checked and named in its error.
fn decode_fields(b: &[u8], offset: u64) -> Result<Message, DecodeError> {
    let Some(&msg_type) = b.first() else {
        return Err(DecodeError { offset, msg_type: 0, field: "length", problem: Problem::Empty });
    };
    let r = Reader { b, offset, msg_type };
    let Some(need) = message_length(msg_type) else {
        let header = if b.len() >= HEADER_BYTES { header(&r).unwrap_or_default() } else { Header::default() };
        return Ok(Message { header: Header { msg_type, ..header }, body: Body::Unknown { len: b.len() } });
    };
    if b.len() < need {
        return Err(r.err("length", Problem::Truncated { have: b.len(), need }));
    }
    let header = header(&r)?;
    if header.timestamp_ns >= DAY_NS {
        return Err(r.err("timestamp", Problem::BadValue(header.timestamp_ns)));
    }
    let body = match msg_type {
        b'S' => Body::SystemEvent { event_code: r.u8(11, "event code")? },
        b'R' => Body::StockDirectory(StockDirectory {
            stock: r.stock(11)?,
            market_category: r.u8(19, "market category")?,
            financial_status: r.u8(20, "financial status indicator")?,
            round_lot_size: r.u32(21, "round lot size")?,
            round_lots_only: r.u8(25, "round lots only")?,
            issue_classification: r.u8(26, "issue classification")?,
            issue_subtype: r.bytes(27, "issue sub-type")?,
            authenticity: r.u8(29, "authenticity")?,
            short_sale_threshold: r.u8(30, "short sale threshold indicator")?,
            ipo_flag: r.u8(31, "IPO flag")?,
            luld_tier: r.u8(32, "LULD reference price tier")?,
            etp_flag: r.u8(33, "ETP flag")?,
            etp_leverage_factor: r.u32(34, "ETP leverage factor")?,
            inverse: r.u8(38, "inverse indicator")?,
        }),
        b'H' => Body::TradingAction {
            stock: r.stock(11)?,
            trading_state: r.u8(19, "trading state")?,
            reason: r.bytes(21, "reason")?,
        },
        b'Y' => Body::RegSho { stock: r.stock(11)?, action: r.u8(19, "Reg SHO action")? },
        b'L' => Body::ParticipantPosition {
            mpid: r.mpid(11, "MPID")?,
            stock: r.stock(15)?,
            primary_market_maker: r.u8(23, "primary market maker")?,
            mode: r.u8(24, "market maker mode")?,
            state: r.u8(25, "market participant state")?,
        },
        b'V' => Body::MwcbDeclineLevel {
            level1_e9: r.price8(11, "level 1")?,
            level2_e9: r.price8(19, "level 2")?,
            level3_e9: r.price8(27, "level 3")?,
        },
        b'W' => Body::MwcbStatus { breached_level: r.u8(11, "breached level")? },
        b'K' => Body::IpoQuotingPeriod {
            stock: r.stock(11)?,
            release_time_s: r.u32(19, "IPO quotation release time")?,
            qualifier: r.u8(23, "IPO quotation release qualifier")?,
            price_e9: r.price4(24, "IPO price")?,
        },
        b'J' => Body::LuldAuctionCollar {
            stock: r.stock(11)?,
            reference_e9: r.price4(19, "auction collar reference price")?,
            upper_e9: r.price4(23, "upper auction collar price")?,
            lower_e9: r.price4(27, "lower auction collar price")?,
            extension: r.u32(31, "auction collar extension")?,
        },
        b'h' => Body::OperationalHalt {
            stock: r.stock(11)?,
            market_code: r.u8(19, "market code")?,
            action: r.u8(20, "operational halt action")?,
        },
        b'A' | b'F' => Body::AddOrder(AddOrder {
            order_ref: r.u64(11, "order reference number")?,
            buy_sell: r.buy_sell(19)?,
            shares: r.u32(20, "shares")?,
            stock: r.stock(24)?,
            price_e9: r.price4(32, "price")?,
            mpid: if msg_type == b'F' { Some(r.mpid(36, "attribution")?) } else { None },
        }),
        b'E' => Body::Executed {
            order_ref: r.u64(11, "order reference number")?,
            shares: r.u32(19, "executed shares")?,
            match_number: r.u64(23, "match number")?,
        },
        b'C' => Body::ExecutedWithPrice {
            order_ref: r.u64(11, "order reference number")?,
            shares: r.u32(19, "executed shares")?,
            match_number: r.u64(23, "match number")?,
            printable: r.u8(31, "printable")?,
            price_e9: r.price4(32, "execution price")?,
        },
        b'X' => {
            Body::Cancel { order_ref: r.u64(11, "order reference number")?, shares: r.u32(19, "cancelled shares")? }
        }
        b'D' => Body::Delete { order_ref: r.u64(11, "order reference number")? },
        b'U' => Body::Replace {
            original_ref: r.u64(11, "original order reference number")?,
            new_ref: r.u64(19, "new order reference number")?,
            shares: r.u32(27, "shares")?,
            price_e9: r.price4(31, "price")?,
        },
        b'P' => Body::Trade {
            order_ref: r.u64(11, "order reference number")?,
            buy_sell: r.buy_sell(19)?,
            shares: r.u32(20, "shares")?,
            stock: r.stock(24)?,
            price_e9: r.price4(32, "price")?,
            match_number: r.u64(36, "match number")?,
        },
        b'Q' => Body::CrossTrade {
            shares: r.u64(11, "shares")?,
            stock: r.stock(19)?,
            price_e9: r.price4(27, "cross price")?,
            match_number: r.u64(31, "match number")?,
            cross_type: r.u8(39, "cross type")?,
        },
        b'B' => Body::BrokenTrade { match_number: r.u64(11, "match number")? },
        b'I' => Body::Imbalance(Imbalance {
            paired_shares: r.u64(11, "paired shares")?,
            imbalance_shares: r.u64(19, "imbalance shares")?,
            direction: r.u8(27, "imbalance direction")?,
            stock: r.stock(28)?,
            far_price_e9: r.price4(36, "far price")?,
            near_price_e9: r.price4(40, "near price")?,
            reference_price_e9: r.price4(44, "current reference price")?,
            cross_type: r.u8(48, "cross type")?,
            price_variation: r.u8(49, "price variation indicator")?,
        }),
        b'N' => Body::RetailInterest { stock: r.stock(11)?, interest_flag: r.u8(19, "interest flag")? },
        b'O' => Body::Dlcr(Dlcr {
            stock: r.stock(11)?,
            open_eligibility: r.u8(19, "open eligibility status")?,
            min_price_e9: r.price4(20, "minimum allowable price")?,
            max_price_e9: r.price4(24, "maximum allowable price")?,
            near_price_e9: r.price4(28, "near execution price")?,
            near_time_ns: r.u64(32, "near execution time")?,
            lower_collar_e9: r.price4(40, "lower price range collar")?,
            upper_collar_e9: r.price4(44, "upper price range collar")?,
        }),
        // `message_length` returned Some: every defined type is matched above.
        _ => Body::Unknown { len: b.len() },
    };
    Ok(Message { header, body })
}

fn header(r: &Reader<'_>) -> Result<Header, DecodeError> {
    Ok(Header {
        msg_type: r.msg_type,
        stock_locate: r.u16(1, "stock locate")?,
        tracking_number: r.u16(3, "tracking number")?,
        timestamp_ns: r.u48(5, "timestamp")?,
    })
}

/// Messages decoded, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItchStats {
    /// Messages decoded (unknown types included).
    pub messages: u64,
    /// Messages by type byte.
    pub by_type: [u64; 256],
    /// Messages of a type ITCH 5.0 does not define: skipped by their length prefix.
    pub unknown: u64,
    /// Messages of a known type longer than the specification's length (the extra bytes are ignored).
    pub longer_than_spec: u64,
}

impl Default for ItchStats {
    fn default() -> Self {
        ItchStats { messages: 0, by_type: [0; 256], unknown: 0, longer_than_spec: 0 }
    }
}

impl ItchStats {
    /// Counts one decoded message of `len` bytes.
    pub fn count(&mut self, m: &Message, len: usize) {
        self.count_type(m.header.msg_type, len);
    }

    /// Counts one decoded message of type `msg_type` and `len` bytes.
    #[inline]
    pub fn count_type(&mut self, msg_type: u8, len: usize) {
        self.messages += 1;
        self.by_type[usize::from(msg_type)] += 1;
        match message_length(msg_type) {
            None => self.unknown += 1,
            Some(need) if len > need => self.longer_than_spec += 1,
            Some(_) => {}
        }
    }

    /// Messages of one type.
    pub fn of(&self, msg_type: u8) -> u64 {
        self.by_type[usize::from(msg_type)]
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
const fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Day of the month of the `n`th Sunday (1-based) of a month.
const fn nth_sunday(y: i64, m: u32, n: u32) -> u32 {
    // 1970-01-01 was a Thursday: weekday (0 = Sunday) = (days + 4) mod 7.
    let wd = (days_from_civil(y, m, 1) + 4).rem_euclid(7) as u32;
    1 + (7 - wd) % 7 + 7 * (n - 1)
}

/// Midnight US Eastern of a session date, in ns since the UNIX epoch: the base ITCH timestamps are added to.
/// US daylight time (UTC-4) from the second Sunday of March to the first Sunday of November (rules since
/// 2007), UTC-5 otherwise; the switch is at 02:00 local, so midnight of the switch day keeps the old offset.
/// `None` for a date before 1970 or not in the calendar.
pub fn eastern_midnight_ns(year: i32, month: u32, day: u32) -> Option<u64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    let y = i64::from(year);
    let days = days_from_civil(y, month, day);
    if days_from_civil(y, month, 1) + 31 < days || (month < 12 && days_from_civil(y, month + 1, 1) <= days) {
        return None;
    }
    let dst_start = days_from_civil(y, 3, nth_sunday(y, 3, 2));
    let dst_end = days_from_civil(y, 11, nth_sunday(y, 11, 1));
    let offset_h: i64 = if days > dst_start && days <= dst_end { 4 } else { 5 };
    u64::try_from((days * 24 + offset_h) * 3_600_000_000_000).ok()
}

/// A resting order, as the normaliser remembers it (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resting {
    locate: u16,
    side: Side,
    price_e9: i64,
    shares: u32,
}

impl Default for Resting {
    fn default() -> Resting {
        Resting { locate: 0, side: Side::None, price_e9: 0, shares: 0 }
    }
}

/// Up to three records from one message (an over-execution: `Fill`, `Cancel`, `InstrumentStale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Records {
    recs: [BookUpdate; 3],
    len: u8,
}

impl Default for Records {
    fn default() -> Self {
        Records::none()
    }
}

impl Records {
    const fn none() -> Records {
        Records { recs: [BookUpdate::control(Kind::NoAction); 3], len: 0 }
    }
    /// Appends `r` (whose venue position has index 0) as the message's next record: its index is its place.
    fn push(&mut self, r: BookUpdate) {
        if let Some(slot) = self.recs.get_mut(usize::from(self.len)) {
            *slot = BookUpdate { venue_pos: r.venue_pos | u64::from(self.len), ..r };
            self.len += 1;
        }
    }
    /// The records, in order.
    #[inline]
    pub fn as_slice(&self) -> &[BookUpdate] {
        &self.recs[..usize::from(self.len)]
    }
}

/// What the normaliser counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalizerStats {
    /// Messages whose order reference was not known, by type (skipped).
    pub unknown_reference: [u64; 256],
    /// Adds of a reference still resting (skipped; the locate marked stale).
    pub duplicate_reference: u64,
    /// Executions or cancels of more shares than rest (cut to what rests; the locate marked stale).
    pub too_many_shares: u64,
    /// Adds refused because [`ItchNormalizer::with_max_orders`] orders already rested (skipped; the locate
    /// marked stale).
    pub orders_refused: u64,
    /// Messages that gave no record (status and other non-book messages), by type: the documented gap.
    pub no_record: [u64; 256],
    /// Messages skipped (no record and nothing kept from them: every type but System Event `O` and Stock
    /// Directory among `no_record`, and the types ITCH 5.0 does not define), by type, with where the first was.
    pub skipped: Skipped,
    /// Locates first seen after messages of unknown content were lost that day: marked stale on sight.
    pub stale_on_sight: u64,
}

impl Default for NormalizerStats {
    fn default() -> Self {
        NormalizerStats {
            unknown_reference: [0; 256],
            duplicate_reference: 0,
            too_many_shares: 0,
            orders_refused: 0,
            no_record: [0; 256],
            skipped: Skipped::default(),
            stale_on_sight: 0,
        }
    }
}

/// Messages skipped, by type byte: how many, and where the first one was (what the caller names a message by:
/// the byte offset of its length prefix in a file, its MoldUDP64 sequence number on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    count: [u64; 256],
    first_at: [u64; 256],
}

impl Default for Skipped {
    fn default() -> Self {
        Skipped { count: [0; 256], first_at: [0; 256] }
    }
}

impl Skipped {
    /// Counts one message of `msg_type` found at `at`.
    #[inline]
    pub fn note(&mut self, msg_type: u8, at: u64) {
        let i = usize::from(msg_type);
        if self.count[i] == 0 {
            self.first_at[i] = at;
        }
        self.count[i] += 1;
    }

    /// `(count, where the first was)` for one type; `None` if none was skipped.
    pub fn get(&self, msg_type: u8) -> Option<(u64, u64)> {
        let i = usize::from(msg_type);
        (self.count[i] > 0).then(|| (self.count[i], self.first_at[i]))
    }

    /// Skipped messages over all types.
    pub fn total(&self) -> u64 {
        self.count.iter().sum()
    }

    /// `(type byte, count, first at)` of each type skipped, by type byte.
    pub fn iter(&self) -> impl Iterator<Item = (u8, u64, u64)> + '_ {
        (0..=255u8).filter_map(|t| self.get(t).map(|(n, at)| (t, n, at)))
    }
}

/// A message type byte as a report names it: the letter (`I`, `J`), or `0x..` for a byte that is not an ASCII
/// letter or digit.
pub fn type_label(msg_type: u8) -> String {
    if msg_type.is_ascii_alphanumeric() {
        char::from(msg_type).to_string()
    } else {
        format!("{msg_type:#04x}")
    }
}

impl fmt::Display for Skipped {
    /// `I:2@120,J:1@170,0x7f:1@220` (type, count, where the first was), or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        for (t, n, at) in self.iter() {
            write!(f, "{}{}:{n}@{at}", if any { "," } else { "" }, type_label(t))?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl NormalizerStats {
    /// Unknown references over all types.
    pub fn unknown_references(&self) -> u64 {
        self.unknown_reference.iter().sum()
    }
}

/// Turns ITCH messages into [`BookUpdate`] records (rules in the module docs), keeping the order reference
/// table and the locate → symbol table from Stock Directory messages.
pub struct ItchNormalizer {
    midnight_ns: u64,
    /// order reference → resting order.
    orders: OrderTable<Resting>,
    symbols: Box<[Symbol]>,
    stale: Box<[u64]>,
    /// Locates any message named (a bitset, 65,536 bits), for [`ItchNormalizer::mark_all_stale`].
    seen: Box<[u64]>,
    /// Messages of unknown content were lost today ([`ItchNormalizer::mark_all_stale`]): a locate first seen
    /// now may have had messages in them, so it is stale on sight. Cleared at the start of the day.
    lost: bool,
    /// Resting orders past which an add is refused ([`ItchNormalizer::with_max_orders`]).
    max_orders: usize,
    stats: NormalizerStats,
}

impl fmt::Debug for ItchNormalizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItchNormalizer")
            .field("midnight_ns", &self.midnight_ns)
            .field("resting_orders", &self.orders.len())
            .finish_non_exhaustive()
    }
}

impl ItchNormalizer {
    /// A normaliser for the session whose US Eastern midnight is `midnight_ns` ([`eastern_midnight_ns`]), with
    /// room for `order_capacity` resting orders before its reference table grows.
    pub fn new(midnight_ns: u64, order_capacity: usize) -> ItchNormalizer {
        ItchNormalizer {
            midnight_ns,
            orders: OrderTable::with_capacity(order_capacity),
            symbols: vec![Symbol::default(); 1 << 16].into_boxed_slice(),
            stale: vec![0u64; (1 << 16) / 64].into_boxed_slice(),
            seen: vec![0u64; (1 << 16) / 64].into_boxed_slice(),
            lost: false,
            max_orders: usize::MAX,
            stats: NormalizerStats::default(),
        }
    }

    /// At most `max_orders` resting orders: an add past them is refused, counted
    /// ([`NormalizerStats::orders_refused`]) and its locate marked stale (its book is missing an order), so the
    /// reference table (32 bytes an order, at most three quarters full) stays under about
    /// `max_orders` x 64 bytes. Without it (the default: no limit) a live feed's forged adds, each under a new
    /// reference, grow the table until memory runs out.
    pub fn with_max_orders(mut self, max_orders: usize) -> ItchNormalizer {
        self.max_orders = max_orders;
        self
    }

    /// What was counted so far.
    pub fn stats(&self) -> &NormalizerStats {
        &self.stats
    }

    /// Orders resting now (over all locates).
    pub fn resting_orders(&self) -> usize {
        self.orders.len()
    }

    /// Starts fetching the order-table line that message `next` (its bytes after the length prefix) will touch, if
    /// it references an order (`A`, `F`, `E`, `C`, `X`, `D`, `U`: the reference at bytes 11..19, spec 1.3 and
    /// 4.3 to 4.5). A feed handler that can see the next message calls it before it normalises this one, so that
    /// the next message's cache miss (a million live orders do not fit a cache) overlaps this one's work. A hint:
    /// a message too short or of another type is passed over, and nothing changes.
    #[inline(always)]
    pub fn prefetch_for(&self, next: &[u8]) {
        if let (Some(&t), Some(r)) = (next.first(), next.get(11..19)) {
            if matches!(t, b'A' | b'F' | b'E' | b'C' | b'X' | b'D' | b'U') {
                self.orders.prefetch(u64::from_be_bytes(r.try_into().expect("8 bytes")));
            }
        }
    }

    /// [`ItchNormalizer::prefetch_for`] for each message of a MoldUDP64 downstream packet (a 20-byte header: session,
    /// sequence number, message count; then each message after its 2-byte big-endian length: MoldUDP64 1.00,
    /// "Downstream Packets"), at most 64 of them. A live feed handler calls it when a datagram arrives, before the
    /// session receiver hands its messages over one at a time, so that their order-table lines are fetched together.
    /// A hint: a packet that does not parse is passed over from where it stops, and nothing changes.
    #[inline]
    pub fn prefetch_packet(&self, packet: &[u8]) {
        let Some(count) = packet.get(18..20).map(|c| u16::from_be_bytes([c[0], c[1]])) else { return };
        let mut at = crate::moldudp64::HEADER_BYTES;
        for _ in 0..count.min(64) {
            let Some(len) = packet.get(at..at + 2).map(|l| usize::from(u16::from_be_bytes([l[0], l[1]]))) else {
                return;
            };
            let Some(message) = packet.get(at + 2..at + 2 + len) else { return };
            self.prefetch_for(message);
            at += 2 + len;
        }
    }

    /// The symbol a Stock Directory gave this locate, if any.
    pub fn symbol(&self, stock_locate: u16) -> Option<&str> {
        let s = self.symbols.get(usize::from(stock_locate))?.as_str();
        (!s.is_empty()).then_some(s)
    }

    /// Whether this locate's book is marked unsynced (module docs).
    pub fn is_stale(&self, stock_locate: u16) -> bool {
        let i = usize::from(stock_locate);
        self.stale.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Marks `locate` stale; the record announcing it the first time (message `cx`'s, on that locate).
    fn mark_stale(&mut self, cx: &Ctx, locate: u16, order_ref: u64) -> Option<BookUpdate> {
        let i = usize::from(locate);
        let w = self.stale.get_mut(i / 64)?;
        let bit = 1u64 << (i % 64);
        if *w & bit != 0 {
            return None;
        }
        *w |= bit;
        Some(BookUpdate {
            level: StaleBook::Order as u8,
            instrument_id: u32::from(locate),
            ..cx.rec(Kind::InstrumentStale, Side::None, order_ref, 0, 0)
        })
    }

    /// Messages were lost from the stream (a MoldUDP64 hole given up): every locate seen so far and not yet
    /// stale is marked unsynced, each with one [`Kind::InstrumentStale`] record about the order book (`order_id`
    /// 0, the venue position the first lost message's sequence number and the record's index among these, `ts_event_ns` and `ts_recv_ns` = `ts_recv_ns`) handed to `out`. ITCH has
    /// no per-instrument sequence, so a hole may have touched any of them, and a locate not seen yet may have
    /// had its first messages in it: from now until the start of the next day (System Event `O`) a locate first
    /// seen is marked stale on sight (its [`Kind::InstrumentStale`] before its message's records). Returns the
    /// records made. Allocates nothing.
    pub fn mark_all_stale(&mut self, venue_seq: u64, ts_recv_ns: u64, out: &mut impl FnMut(BookUpdate)) -> u64 {
        self.lost = true;
        let mut made = 0;
        for (w, (seen, stale)) in self.seen.iter().zip(self.stale.iter_mut()).enumerate() {
            let mut fresh = *seen & !*stale;
            *stale |= *seen;
            while fresh != 0 {
                let bit = fresh.trailing_zeros();
                fresh &= fresh - 1;
                let index = u16::try_from(made).unwrap_or(u16::MAX);
                made += 1;
                out(BookUpdate {
                    venue_pos: venue_position(venue_seq, index),
                    ts_event_ns: ts_recv_ns,
                    ts_recv_ns,
                    flags: flags::LAST,
                    ..BookUpdate::stale((w as u32) * 64 + bit, StaleBook::Order)
                });
            }
        }
        made
    }

    /// A message of the stream that did not decode (a live feed goes on past it): the book it may have changed is
    /// marked unsynced, never left silently wrong. Its stock locate (bytes 1..3, big-endian), if the message has
    /// them and that locate is a known instrument (a message named it before), gets one
    /// [`Kind::InstrumentStale`] record about its order book (`order_id` 0, venue seq `venue_seq`, `ts_event_ns` =
    /// `ts_recv_ns`); otherwise
    /// every locate seen so far is marked, as for a hole ([`ItchNormalizer::mark_all_stale`]). Records go to `out`
    /// (none for a locate already stale); returns how many. Allocates nothing.
    pub fn mark_undecodable(
        &mut self,
        message: &[u8],
        venue_seq: u64,
        ts_recv_ns: u64,
        out: &mut impl FnMut(BookUpdate),
    ) -> u64 {
        let locate = message.get(1..3).map(|b| u16::from_be_bytes([b[0], b[1]])).filter(|&l| l != 0);
        let i = usize::from(locate.unwrap_or(0));
        let known = locate.is_some() && self.seen.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0);
        if !known {
            return self.mark_all_stale(venue_seq, ts_recv_ns, out);
        }
        let cx = Ctx {
            msg_type: message[0],
            locate: i as u16,
            ts_event_ns: ts_recv_ns,
            ts_recv_ns,
            venue_pos: venue_position(venue_seq, 0),
        };
        match self.mark_stale(&cx, cx.locate, 0) {
            Some(r) => {
                out(BookUpdate { flags: flags::LAST, ..r });
                1
            }
            None => 0,
        }
    }

    /// The records of one message; `venue_seq` is its position in the stream and `ts_recv_ns` its receive
    /// (capture) time, 0 if unknown (module docs). [`ItchNormalizer::normalize_into`] without the copies.
    pub fn normalize(&mut self, m: &Message, venue_seq: u64, ts_recv_ns: u64) -> Records {
        let mut out = Records::none();
        self.normalize_into(m, venue_seq, ts_recv_ns, &mut out);
        out
    }

    /// [`ItchNormalizer::normalize`] into `out`, which is emptied first: a feed handler keeps one [`Records`]
    /// and neither initialises nor copies three 64-byte records per message. A skipped message is named by its
    /// `venue_seq` in [`NormalizerStats::skipped`].
    pub fn normalize_into(&mut self, m: &Message, venue_seq: u64, ts_recv_ns: u64, out: &mut Records) {
        self.normalize_at(m, venue_seq, ts_recv_ns, venue_seq, out);
    }

    /// [`ItchNormalizer::normalize_into`], a skipped message named by `at` in [`NormalizerStats::skipped`]
    /// (a file's byte offset; the MoldUDP64 sequence number, all 64 bits).
    pub fn normalize_at(&mut self, m: &Message, venue_seq: u64, ts_recv_ns: u64, at: u64, out: &mut Records) {
        self.normalize_message(m, venue_seq, ts_recv_ns, at, out);
    }

    /// One message's bytes (after its length prefix) decoded and normalised into `out` (emptied first): an
    /// order-book message (`A`, `F`, `E`, `C`, `X`, `D`, `U`, `P`) is read in place and normalised in one pass,
    /// never stored as a [`Message`] (`Ok(None)`); any other is decoded ([`decode_message`]), normalised, and
    /// returned for what else the caller does with it (a Stock Directory's definition). `at` names the message
    /// in errors and in [`NormalizerStats::skipped`] (a file's byte offset, a MoldUDP64 sequence number).
    ///
    /// # Errors
    /// [`DecodeError`] as [`decode_message`]; nothing is normalised then (`out` is empty).
    #[inline(always)]
    pub fn normalize_bytes(
        &mut self,
        b: &[u8],
        venue_seq: u64,
        ts_recv_ns: u64,
        at: u64,
        out: &mut Records,
    ) -> Result<Option<Message>, DecodeError> {
        out.len = 0;
        if let Some(m) = book_message(b) {
            self.normalize_message(&m, venue_seq, ts_recv_ns, at, out);
            return Ok(None);
        }
        let m = decode_fields(b, at)?;
        self.normalize_at(&m, venue_seq, ts_recv_ns, at, out);
        Ok(Some(m))
    }

    /// [`ItchNormalizer::normalize_at`]'s body, inlined after [`book_message`] in
    /// [`ItchNormalizer::normalize_bytes`], so that an order-book message goes from its bytes to its records
    /// without being stored as a [`Message`] first.
    #[inline(always)]
    fn normalize_message(&mut self, m: &Message, venue_seq: u64, ts_recv_ns: u64, at: u64, out: &mut Records) {
        out.len = 0;
        let h = &m.header;
        let cx = self.begin(h, venue_seq, ts_recv_ns, out);
        match m.body {
            Body::SystemEvent { event_code: b'O' } => {
                self.orders.clear();
                self.stale.fill(0);
                self.lost = false;
                self.stats.no_record[usize::from(h.msg_type)] += 1;
            }
            Body::StockDirectory(d) => {
                if let Some(s) = self.symbols.get_mut(usize::from(h.stock_locate)) {
                    *s = d.stock;
                }
                self.stats.no_record[usize::from(h.msg_type)] += 1;
            }
            Body::TradingAction { trading_state, reason, .. } => {
                out.push(cx.status(StatusKind::Trading, trading_state, reason));
            }
            Body::RegSho { action, .. } => out.push(cx.status(StatusKind::RegSho, action, *b"    ")),
            Body::OperationalHalt { market_code, action, .. } => {
                out.push(cx.status(StatusKind::OperationalHalt, action, [market_code, b' ', b' ', b' ']));
            }
            Body::AddOrder(a) => {
                let side = side_of(a.buy_sell);
                self.add(&cx, h.stock_locate, a.order_ref, side, a.price_e9, a.shares, out);
            }
            Body::Executed { order_ref, shares, .. } => {
                self.take_off(&cx, order_ref, shares, Fill::AtRestingPrice, out);
            }
            Body::ExecutedWithPrice { order_ref, shares, price_e9, .. } => {
                self.take_off(&cx, order_ref, shares, Fill::At(price_e9), out);
            }
            Body::Cancel { order_ref, shares } => self.take_off(&cx, order_ref, shares, Fill::None, out),
            // D and U act on the order's instrument, as E, C and X do, whatever this message's locate says (a
            // corrupt or forged message): the record goes where the table says the order rests.
            Body::Delete { order_ref } => match self.orders.remove(order_ref) {
                Some(o) => out.push(BookUpdate {
                    instrument_id: u32::from(o.locate),
                    ..cx.rec(Kind::Cancel, o.side, order_ref, o.price_e9, o.shares)
                }),
                None => self.unknown(&cx, order_ref, out),
            },
            Body::Replace { original_ref, new_ref, shares, price_e9 } => match self.orders.remove(original_ref) {
                Some(o) => {
                    out.push(BookUpdate {
                        instrument_id: u32::from(o.locate),
                        ..cx.rec(Kind::Cancel, o.side, original_ref, o.price_e9, o.shares)
                    });
                    // the new order is the original's instrument's, whatever this message's locate says
                    self.add(&cx, o.locate, new_ref, o.side, price_e9, shares, out);
                }
                None => self.unknown(&cx, original_ref, out),
            },
            Body::Trade { order_ref, buy_sell, shares, price_e9, .. } => {
                out.push(cx.rec(Kind::Trade, side_of(buy_sell), order_ref, price_e9, shares));
            }
            Body::CrossTrade { shares, price_e9, .. } => {
                let size = u32::try_from(shares).unwrap_or(u32::MAX);
                out.push(cx.rec(Kind::Trade, Side::None, 0, price_e9, size));
            }
            _ => {
                self.stats.no_record[usize::from(h.msg_type)] += 1;
                self.stats.skipped.note(h.msg_type, at);
            }
        }
        out.mark_last();
    }

    /// What every record of message `h` shares; the locate is noted as seen, and marked stale on sight (its
    /// record into `out`) when messages of unknown content were lost today and this is its first message.
    #[inline(always)]
    fn begin(&mut self, h: &Header, venue_seq: u64, ts_recv_ns: u64, out: &mut Records) -> Ctx {
        let cx = Ctx {
            msg_type: h.msg_type,
            locate: h.stock_locate,
            ts_event_ns: self.midnight_ns.saturating_add(h.timestamp_ns),
            ts_recv_ns,
            venue_pos: venue_position(venue_seq, 0),
        };
        // Locate 0 is no instrument: system-wide messages (System Event, MWCB) carry it (spec 1.1, "Stock Locate").
        if let Some(w) = self.seen.get_mut(usize::from(h.stock_locate) / 64).filter(|_| h.stock_locate != 0) {
            let first_seen = *w & (1 << (h.stock_locate % 64)) == 0;
            *w |= 1 << (h.stock_locate % 64);
            if first_seen && self.lost {
                // Messages of unknown content were lost today: this locate's first ones may have been among them.
                self.stats.stale_on_sight += 1;
                out.extend(self.mark_stale(&cx, cx.locate, 0));
            }
        }
        cx
    }

    /// A new order `order_ref` of `locate` resting: its `Add`, or, if the reference still rests (counted), the
    /// locate marked stale; or, past [`ItchNormalizer::with_max_orders`], refused (counted) and the locate marked
    /// stale.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn add(
        &mut self,
        cx: &Ctx,
        locate: u16,
        order_ref: u64,
        side: Side,
        price_e9: i64,
        shares: u32,
        out: &mut Records,
    ) {
        // The stale mark goes on the order's locate (a U's original's), whatever the message's says.
        let full = self.orders.len() >= self.max_orders;
        if !full && self.orders.insert_new(order_ref, Resting { locate, side, price_e9, shares }) {
            out.push(BookUpdate {
                instrument_id: u32::from(locate),
                ..cx.rec(Kind::Add, side, order_ref, price_e9, shares)
            });
        } else if full && self.orders.get_mut(order_ref).is_none() {
            self.stats.orders_refused += 1;
            out.extend(self.mark_stale(cx, locate, order_ref));
        } else {
            self.stats.duplicate_reference += 1;
            out.extend(self.mark_stale(cx, locate, order_ref));
        }
    }

    /// A reference the table does not hold: whose it was is unknown, so the message's locate is marked stale.
    #[cold]
    fn unknown(&mut self, cx: &Ctx, order_ref: u64, out: &mut Records) {
        self.stats.unknown_reference[usize::from(cx.msg_type)] += 1;
        out.extend(self.mark_stale(cx, cx.locate, order_ref));
    }

    /// E, C and X: a `Fill` (E, C), then a `Cancel` of the shares; a third record, `InstrumentStale`, if more
    /// shares were taken than rest.
    #[inline(always)]
    fn take_off(&mut self, cx: &Ctx, order_ref: u64, shares: u32, fill: Fill, out: &mut Records) {
        let mut taken = 0;
        let taken_off = self.orders.update(order_ref, |o| {
            taken = shares.min(o.shares);
            o.shares -= taken;
            o.shares == 0
        });
        let Some(o_copy) = taken_off else {
            return self.unknown(cx, order_ref, out);
        };
        let fill_price_e9 = match fill {
            Fill::None => None,
            Fill::AtRestingPrice => Some(o_copy.price_e9),
            Fill::At(p) => Some(p),
        };
        let instrument_id = u32::from(o_copy.locate);
        if let Some(price_e9) = fill_price_e9 {
            let fill = cx.rec(Kind::Fill, o_copy.side, order_ref, price_e9, taken);
            out.push(BookUpdate { instrument_id, ..fill });
        }
        let cancel = cx.rec(Kind::Cancel, o_copy.side, order_ref, o_copy.price_e9, taken);
        out.push(BookUpdate { instrument_id, ..cancel });
        if taken < shares {
            self.stats.too_many_shares += 1;
            out.extend(self.mark_stale(cx, o_copy.locate, order_ref));
        }
    }
}

/// What every record of one message shares (its index in the venue position 0: [`Records::push`] sets it).
#[derive(Debug, Clone, Copy)]
struct Ctx {
    msg_type: u8,
    locate: u16,
    ts_event_ns: u64,
    ts_recv_ns: u64,
    venue_pos: u64,
}

impl Ctx {
    /// A record of this message's locate, built whole in one go.
    #[inline(always)]
    fn rec(&self, kind: Kind, side: Side, order_id: u64, price_e9: i64, size: u32) -> BookUpdate {
        BookUpdate {
            seq: 0,
            ts_event_ns: self.ts_event_ns,
            ts_recv_ns: self.ts_recv_ns,
            venue_pos: self.venue_pos,
            price_e9,
            order_id,
            instrument_id: u32::from(self.locate),
            size,
            ts_send_ticks: 0,
            kind: kind as u8,
            side: side as u8,
            flags: 0,
            level: 0,
        }
    }

    /// A trading status record (`H`, `Y`, `h`): `order_id` the status kind, `level` the state, `size` the reason.
    fn status(&self, kind: StatusKind, state: u8, reason: [u8; 4]) -> BookUpdate {
        BookUpdate {
            order_id: kind as u64,
            level: state,
            size: u32::from_le_bytes(reason),
            ..self.rec(Kind::TradingStatus, Side::None, 0, 0, 0)
        }
    }
}

impl Records {
    fn extend(&mut self, r: Option<BookUpdate>) {
        if let Some(r) = r {
            self.push(r);
        }
    }

    /// The message's last record gets [`flags::LAST`].
    #[inline(always)]
    fn mark_last(&mut self) {
        if let Some(i) = usize::from(self.len).checked_sub(1) {
            if let Some(last) = self.recs.get_mut(i) {
                last.flags |= flags::LAST;
            }
        }
    }
}

/// Whether an execution or cancel gives a `Fill` record first, and at which price.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// `X`: no fill.
    None,
    /// `E`: at the resting order's price.
    AtRestingPrice,
    /// `C`: at the execution price.
    At(i64),
}

fn side_of(buy_sell: u8) -> Side {
    if buy_sell == b'B' {
        Side::Bid
    } else {
        Side::Ask
    }
}

/// Why a BinaryFILE could not be read. Every variant names the file; read and decode errors the byte offset
/// (in the decompressed stream) of the message's length prefix.
#[derive(Debug, thiserror::Error)]
pub enum ItchFileError {
    /// The file could not be opened.
    #[error("ITCH file {path}: cannot open: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Reading failed (or the gzip stream is corrupt).
    #[error("ITCH file {path}: byte {offset}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Byte offset reached.
        offset: u64,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file ends inside a length prefix or a message.
    #[error("ITCH file {path}: byte {offset}: ends inside a {what} ({have} of {need} bytes)")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Byte offset of the length prefix.
        offset: u64,
        /// `"length prefix"` or `"message"`.
        what: &'static str,
        /// Bytes present.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A message was refused.
    #[error("ITCH file {path}: {source}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What was refused (offset, type, field).
        source: DecodeError,
    },
}

/// Bytes an [`ItchFile`] reads from its source at a time: a message is decoded in place from this window, so
/// the per-message cost is the decode, not a `Read::read` call and a copy per message.
const WINDOW_BYTES: usize = 256 * 1024;

/// Nasdaq's BinaryFILE (u16 big-endian length + message, repeated), plain or gzip (told by the gzip magic, so a
/// `.gz` name is not needed and a misnamed file still reads), read one message at a time: memory does not grow
/// with the file, and no allocation is made after the first (one 256 KiB window is refilled from the source, a
/// message decoded in place where it lies in the window; only the tail of a message cut by the window's end is
/// moved to its front before the next fill).
pub struct ItchFile<R> {
    path: PathBuf,
    reader: R,
    /// `buf[start..end]` holds bytes read and not yet consumed.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source returned 0 (end of stream).
    eof: bool,
    offset: u64,
    stats: ItchStats,
}

impl<R> fmt::Debug for ItchFile<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItchFile").field("path", &self.path).field("offset", &self.offset).finish_non_exhaustive()
    }
}

impl ItchFile<Box<dyn Read + Send>> {
    /// Opens a BinaryFILE; gzip is detected by its magic bytes (`1f 8b`).
    ///
    /// # Errors
    /// [`ItchFileError::Open`].
    pub fn open(path: &Path) -> Result<Self, ItchFileError> {
        let open = |source| ItchFileError::Open { path: path.to_owned(), source };
        let mut file = BufReader::new(std::fs::File::open(path).map_err(open)?);
        let gz = {
            use std::io::BufRead;
            file.fill_buf().map_err(open)?.starts_with(&[0x1f, 0x8b])
        };
        let reader: Box<dyn Read + Send> =
            if gz { Box::new(flate2::bufread::MultiGzDecoder::new(file)) } else { Box::new(file) };
        Ok(ItchFile::from_reader(path, reader))
    }
}

/// A message's bytes from [`ItchFile`]'s window: the byte offset of its length prefix, the message (after the
/// prefix), and what follows it in the window.
type RawMessage<'a> = (u64, &'a [u8], &'a [u8]);

impl<R: Read> ItchFile<R> {
    /// Reads BinaryFILE framing from `reader` (already decompressed); `path` names it in errors.
    pub fn from_reader(path: &Path, reader: R) -> Self {
        ItchFile {
            path: path.to_owned(),
            reader,
            buf: vec![0; WINDOW_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            stats: ItchStats::default(),
        }
    }

    /// Reads `reader` next, from its first byte, keeping the window's memory and the counts (a replay of the
    /// same or the next file without a new 256 KiB allocation, whose zeroing costs as much as decoding a few
    /// thousand messages).
    pub fn restart(&mut self, reader: R) {
        self.reader = reader;
        (self.start, self.end, self.eof, self.offset) = (0, 0, false, 0);
    }

    /// Messages decoded so far, by type.
    pub fn stats(&self) -> &ItchStats {
        &self.stats
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes at least `n` unconsumed bytes available in the window (`n` at most its size), reading from the
    /// source as much as fits; returns the bytes available (fewer than `n` only at the end of the stream).
    #[inline]
    fn fill(&mut self, n: usize) -> Result<usize, ItchFileError> {
        if self.end - self.start >= n || self.eof {
            return Ok(self.end - self.start);
        }
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < n {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(ItchFileError::Read { path: self.path.clone(), offset: self.offset, source })
                }
            }
        }
        Ok(self.end)
    }

    /// The next message's bytes (after the length prefix), undecoded and not counted, with the byte offset of
    /// its length prefix; `None` at the end of the file.
    #[inline]
    fn next_raw(&mut self) -> Result<Option<(u64, &[u8])>, ItchFileError> {
        Ok(self.next_raw_and_rest()?.map(|(at, b, _)| (at, b)))
    }

    /// [`ItchFile::next_raw`], and the bytes after the message in the window (the next message's length prefix
    /// and as much of it as was read).
    #[inline(always)]
    fn next_raw_and_rest(&mut self) -> Result<Option<RawMessage<'_>>, ItchFileError> {
        let at = self.offset;
        // the common case: the window holds the length prefix and the whole message
        let avail = self.end - self.start;
        if avail >= LENGTH_PREFIX_BYTES {
            let len = usize::from(u16::from_be_bytes([self.buf[self.start], self.buf[self.start + 1]]));
            if avail >= LENGTH_PREFIX_BYTES + len {
                let body = self.start + LENGTH_PREFIX_BYTES;
                self.start = body + len;
                self.offset += (LENGTH_PREFIX_BYTES + len) as u64;
                return Ok(Some((at, &self.buf[body..body + len], &self.buf[self.start..self.end])));
            }
        }
        let truncated = |path: &Path, what, have, need| ItchFileError::Truncated {
            path: path.to_owned(),
            offset: at,
            what,
            have,
            need,
        };
        let got = self.fill(LENGTH_PREFIX_BYTES)?;
        if got == 0 {
            return Ok(None);
        }
        if got < LENGTH_PREFIX_BYTES {
            return Err(truncated(&self.path, "length prefix", got, LENGTH_PREFIX_BYTES));
        }
        let len = usize::from(u16::from_be_bytes([self.buf[self.start], self.buf[self.start + 1]]));
        let got = self.fill(LENGTH_PREFIX_BYTES + len)?;
        if got < LENGTH_PREFIX_BYTES + len {
            return Err(truncated(&self.path, "message", got - LENGTH_PREFIX_BYTES, len));
        }
        let body = self.start + LENGTH_PREFIX_BYTES;
        self.start = body + len;
        self.offset += (LENGTH_PREFIX_BYTES + len) as u64;
        Ok(Some((at, &self.buf[body..body + len], &self.buf[self.start..self.end])))
    }

    /// The next message normalized by `norm` into `out` (emptied first): [`ItchFile::next_message`] then
    /// [`ItchNormalizer::normalize_at`] with venue seq `venue_seq` and the message's byte offset, the decoded
    /// message read where it was decoded (not moved through a `Result`: the publisher's file path). Returns the
    /// byte offset of the message's length prefix; `None` at the end of the file.
    ///
    /// # Errors
    /// [`ItchFileError`] as [`ItchFile::next_message`]; `out` is then empty.
    #[inline(always)]
    pub fn next_into(
        &mut self,
        norm: &mut ItchNormalizer,
        venue_seq: u64,
        out: &mut Records,
    ) -> Result<Option<u64>, ItchFileError> {
        out.len = 0;
        let Some((at, b, rest)) = self.next_raw_and_rest()? else { return Ok(None) };
        let (msg_type, len) = (b.first().copied().unwrap_or(0), b.len());
        norm.prefetch_for(rest.get(LENGTH_PREFIX_BYTES..).unwrap_or_default());
        norm.normalize_bytes(b, venue_seq, 0, at, out)
            .map_err(|source| ItchFileError::Decode { path: self.path.clone(), source })?;
        self.stats.count_type(msg_type, len);
        Ok(Some(at))
    }

    /// The next message and the byte offset of its length prefix; `None` at the end of the file.
    ///
    /// # Errors
    /// [`ItchFileError`]: the stream stops there; the messages before it were delivered.
    pub fn next_message(&mut self) -> Result<Option<(u64, Message)>, ItchFileError> {
        let Some((at, b)) = self.next_raw()? else { return Ok(None) };
        let len = b.len();
        let msg = decode_message(b, at).map_err(|source| ItchFileError::Decode { path: self.path.clone(), source })?;
        self.stats.count(&msg, len);
        Ok(Some((at, msg)))
    }
}

/// ITCH prices have 4 implied decimals (spec section 3, Price(4)): the tick size a Stock Directory definition
/// gets (0.0001 in units of 10⁻⁹), so prices print with 4 decimals. This is the price format's resolution, not
/// the Reg NMS minimum increment (0.01 at or above $1), which ITCH does not send.
pub const PRICE4_TICK_E9: i64 = 100_000;

/// The definition a Stock Directory message (`R`, spec 4.2.1) gives: `instrument_id` = its stock locate, the
/// symbol without its padding, display factor 1, tick size [`PRICE4_TICK_E9`] (4 decimals).
pub fn stock_definition(header: &Header, directory: &StockDirectory) -> InstrumentDef {
    InstrumentDef {
        tick_size_e9: PRICE4_TICK_E9,
        ..InstrumentDef::new(u32::from(header.stock_locate), directory.stock.as_str())
    }
}

/// Every Stock Directory (`R`, spec 4.2.1) definition in a BinaryFILE (plain or gzip), read in one pass before
/// the replay: stock locate → symbol ([`stock_definition`]); a later `R` of the same locate replaces an earlier
/// one. Only `R` messages are decoded (and empty ones refused, as the replay would: past one, the framing is
/// lost); the rest are skipped by their length prefix, so the pass costs one read
/// of the file (for a full day's file, a few seconds of the start; the day's `R` messages come first, before
/// 04:00, but an IPO may add one later, hence the whole file).
///
/// The pass stops at the first place it cannot read past (the file ends inside a message, an empty message, an
/// `R` message that does not decode, a read or gzip error) and returns the definitions found before it, with that
/// error (naming the file and the byte offset) as the second value: the replay meets the same error at the same
/// place after the messages before it, so the caller lets the replay report it (nothing is logged here).
///
/// # Errors
/// [`ItchFileError`] when the file cannot be opened.
pub fn stock_directory(path: &Path) -> Result<(Symbology, Option<ItchFileError>), ItchFileError> {
    let mut file = ItchFile::open(path)?;
    let mut symbology = Symbology::new();
    loop {
        let (at, b) = match file.next_raw() {
            Ok(Some(m)) => m,
            Ok(None) => return Ok((symbology, None)),
            Err(e) => return Ok((symbology, Some(e))),
        };
        if !matches!(b.first(), Some(&b'R') | None) {
            continue;
        }
        match decode_message(b, at) {
            Ok(Message { header, body: Body::StockDirectory(d) }) => {
                symbology.insert(stock_definition(&header, &d));
            }
            Ok(_) => {}
            Err(source) => return Ok((symbology, Some(ItchFileError::Decode { path: file.path.clone(), source }))),
        }
    }
}

#[cfg(test)]
mod tests {
    mod in_place {
        use super::super::*;
        use proptest::prelude::*;

        /// A message of a book type around its length, its fields random; the checked ones (buy/sell, the
        /// timestamp, a symbol's and an MPID's bytes) mostly valid, and invalid at the edges of what they allow.
        fn book_bytes() -> impl Strategy<Value = Vec<u8>> {
            let text = prop_oneof![
                12 => 0x20u8..0x7f,
                1 => prop::sample::select(vec![0x00u8, 0x1f, 0x7f, 0x80, 0xff]),
            ];
            (
                prop::sample::select(b"AFECXDUP".to_vec()),
                -1i32..=2,
                prop::collection::vec(any::<u8>(), 44),
                prop::collection::vec(text, 12),
                prop::sample::select(vec![b'B', b'S', b'B', b'S', b'X', 0]),
                any::<bool>(),
            )
                .prop_map(|(t, extra, mut body, text, side, near_midnight)| {
                    let need = message_length(t).unwrap_or(0);
                    body[0] = t;
                    let ts = if near_midnight {
                        DAY_NS - 1 + u64::from(body[10] % 3) // the day's edge
                    } else {
                        u64::from_be_bytes([0, 0, body[5], body[6], body[7], body[8], body[9], body[10]]) % DAY_NS
                    };
                    body[5..11].copy_from_slice(&ts.to_be_bytes()[2..]);
                    if matches!(t, b'A' | b'F' | b'P') {
                        body[19] = side;
                        body[24..32].copy_from_slice(&text[..8]);
                    }
                    if t == b'F' {
                        body[36..40].copy_from_slice(&text[8..]);
                    }
                    body.resize((need as i32 + extra).max(1) as usize, b' ');
                    body
                })
        }

        proptest! {
            /// Read in place, a book message is exactly what the field-by-field decoder gives, and the in-place
            /// reader gives up only where that decoder refuses the message.
            #[test]
            fn a_book_message_read_in_place_is_the_one_decoded_field_by_field(b in book_bytes()) {
                match (book_message(&b), decode_fields(&b, 7)) {
                    (Some(m), Ok(d)) => prop_assert_eq!(m, d),
                    (Some(m), Err(e)) => prop_assert!(false, "in place {m:?}, field by field {e}"),
                    (None, Ok(d)) => prop_assert!(false, "in place refused {d:?}"),
                    (None, Err(_)) => {}
                }
            }
        }

        #[test]
        fn printable_is_0x20_to_0x7e_in_every_byte_of_the_word() {
            for c in 0..=255u8 {
                for at in 0..8 {
                    let mut w = [b'A'; 8];
                    w[at] = c;
                    assert_eq!(all_printable(u64::from_le_bytes(w)), (0x20..0x7f).contains(&c), "byte {c:#x} at {at}");
                }
            }
        }
    }

    use super::*;

    fn msg(bytes: &[u8]) -> Result<Message, DecodeError> {
        decode_message(bytes, 0)
    }

    #[test]
    fn eastern_midnight_follows_daylight_time() {
        // 2019-12-30: EST, midnight = 05:00 UTC.
        assert_eq!(eastern_midnight_ns(2019, 12, 30), Some(1_577_682_000 * 1_000_000_000));
        // 2023-08-22: EDT, midnight = 04:00 UTC.
        assert_eq!(eastern_midnight_ns(2023, 8, 22), Some(1_692_676_800 * 1_000_000_000));
        // 2023-03-12 (second Sunday): midnight still EST; 03-13 EDT.
        assert_eq!(eastern_midnight_ns(2023, 3, 12), Some(1_678_597_200 * 1_000_000_000));
        assert_eq!(eastern_midnight_ns(2023, 3, 13), Some(1_678_680_000 * 1_000_000_000));
        // 2023-11-05 (first Sunday): midnight still EDT; 11-06 EST.
        assert_eq!(eastern_midnight_ns(2023, 11, 5), Some(1_699_156_800 * 1_000_000_000));
        assert_eq!(eastern_midnight_ns(2023, 11, 6), Some(1_699_246_800 * 1_000_000_000));
        assert_eq!(eastern_midnight_ns(2023, 2, 30), None);
        assert_eq!(eastern_midnight_ns(2023, 13, 1), None);
    }

    /// An add of 100 @ 10.0000 on `locate`, reference `order_ref`.
    fn add(locate: u16, order_ref: u64) -> Vec<u8> {
        let mut a = vec![0u8; 36];
        a[0] = b'A';
        a[1..3].copy_from_slice(&locate.to_be_bytes());
        a[11..19].copy_from_slice(&order_ref.to_be_bytes());
        a[19] = b'B';
        a[20..24].copy_from_slice(&100u32.to_be_bytes());
        a[24..32].copy_from_slice(b"AAPL    ");
        a[32..36].copy_from_slice(&100_000u32.to_be_bytes());
        a
    }

    /// A source that hands out at most 1,000 bytes a read (as a gzip decoder or a pipe does).
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(1_000);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn messages_cut_by_the_window_or_the_reads_decode_whole_and_a_cut_tail_names_its_bytes() {
        // 8,000 adds of 38 framed bytes: 304,000 bytes, more than the 256 KiB window, so messages straddle both
        // the window's end and the 1,000-byte reads
        let mut file = Vec::new();
        for r in 1..=8_000u64 {
            file.extend_from_slice(&36u16.to_be_bytes());
            file.extend_from_slice(&add(7, r));
        }
        let mut f = ItchFile::from_reader(Path::new("t"), Trickle(&file));
        let mut n = 0u64;
        while let Some((at, m)) = f.next_message().unwrap() {
            n += 1;
            assert_eq!(at, (n - 1) * 38);
            assert!(matches!(m.body, Body::AddOrder(a) if a.order_ref == n), "{m:?}");
        }
        assert_eq!(n, 8_000);
        // the last message cut by 3 bytes: the 7,999 before it, then the error naming its offset and bytes
        let cut = &file[..file.len() - 3];
        let mut f = ItchFile::from_reader(Path::new("t"), Trickle(cut));
        for _ in 0..7_999 {
            f.next_message().unwrap().unwrap();
        }
        let e = f.next_message().unwrap_err();
        assert!(
            matches!(e, ItchFileError::Truncated { offset: 303_962, what: "message", have: 33, need: 36, .. }),
            "{e}"
        );
        // restart reads a new source from its first byte
        f.restart(Trickle(&file[..38]));
        assert_eq!(f.next_message().unwrap().map(|(at, _)| at), Some(0));
        assert!(f.next_message().unwrap().is_none());
    }

    /// The records `n` makes of message bytes `m` at `seq`: (kind, instrument, order reference).
    fn kinds(n: &mut ItchNormalizer, m: &[u8], seq: u64) -> Vec<(Option<Kind>, u32, u64)> {
        let m = msg(m).unwrap();
        n.normalize(&m, seq, 0).as_slice().iter().map(|r| (r.kind(), r.instrument_id, r.order_id)).collect()
    }

    #[test]
    fn past_max_orders_an_add_is_refused_and_its_locate_marked_stale() {
        let mut n = ItchNormalizer::new(0, 16).with_max_orders(2);
        assert_eq!(kinds(&mut n, &add(5, 1), 1), [(Some(Kind::Add), 5, 1)]);
        assert_eq!(kinds(&mut n, &add(5, 2), 2), [(Some(Kind::Add), 5, 2)]);
        // the third resting order: refused, its locate stale, the others' books untouched
        assert_eq!(kinds(&mut n, &add(7, 3), 3), [(Some(Kind::InstrumentStale), 7, 3)]);
        assert_eq!((n.stats().orders_refused, n.is_stale(7), n.is_stale(5)), (1, true, false));
        // a Delete makes room: the next add rests
        let mut d = vec![0u8; 19];
        d[0] = b'D';
        d[1..3].copy_from_slice(&5u16.to_be_bytes());
        d[11..19].copy_from_slice(&1u64.to_be_bytes());
        assert_eq!(kinds(&mut n, &d, 4), [(Some(Kind::Cancel), 5, 1)]);
        assert_eq!(kinds(&mut n, &add(5, 4), 5), [(Some(Kind::Add), 5, 4)]);
        assert_eq!(n.stats().orders_refused, 1);
    }

    /// A U whose new reference still rests, and an E of more shares than rest, under another locate than the
    /// order's (corrupt or forged): the stale mark goes on the order's locate, whose book lost or mistook the
    /// order; the message's locate keeps its exact book. A duplicate add when the table is full is a duplicate.
    #[test]
    fn a_reference_that_cannot_apply_marks_the_orders_locate_stale_not_the_messages() {
        let mut n = ItchNormalizer::new(0, 16).with_max_orders(3);
        let head = |t: u8, locate: u16, order_ref: u64, len: usize| {
            let mut m = vec![0u8; len];
            m[0] = t;
            m[1..3].copy_from_slice(&locate.to_be_bytes());
            m[11..19].copy_from_slice(&order_ref.to_be_bytes());
            m
        };
        kinds(&mut n, &add(1, 1), 1);
        kinds(&mut n, &add(2, 100), 2);
        // U under locate 2: original 1 (locate 1's), new reference 100 (resting on locate 2)
        let mut u = head(b'U', 2, 1, 35);
        u[19..27].copy_from_slice(&100u64.to_be_bytes());
        u[27..31].copy_from_slice(&100u32.to_be_bytes());
        u[31..35].copy_from_slice(&100_000u32.to_be_bytes());
        assert_eq!(kinds(&mut n, &u, 3), [(Some(Kind::Cancel), 1, 1), (Some(Kind::InstrumentStale), 1, 100)]);
        assert_eq!((n.is_stale(1), n.is_stale(2), n.stats().duplicate_reference), (true, false, 1));
        // E under locate 9 of 500 shares of order 100 (locate 2's, 100 rest)
        let mut e = head(b'E', 9, 100, 31);
        e[19..23].copy_from_slice(&500u32.to_be_bytes());
        let got = kinds(&mut n, &e, 4);
        assert_eq!(got[2..], [(Some(Kind::InstrumentStale), 2, 100)]);
        assert_eq!((n.is_stale(2), n.is_stale(9), n.stats().too_many_shares), (true, false, 1));
        // a full table (3 resting): an add of a resting reference is a duplicate, a new one refused
        kinds(&mut n, &add(3, 7), 5);
        kinds(&mut n, &add(3, 8), 6);
        kinds(&mut n, &add(4, 9), 7);
        assert_eq!(kinds(&mut n, &add(3, 7), 8), [(Some(Kind::InstrumentStale), 3, 7)]);
        assert_eq!((n.stats().duplicate_reference, n.stats().orders_refused), (2, 0));
        kinds(&mut n, &add(5, 10), 9);
        assert_eq!((n.stats().duplicate_reference, n.stats().orders_refused), (2, 1));
    }

    #[test]
    fn an_undecodable_message_marks_its_known_locate_stale_else_every_locate() {
        let mut n = ItchNormalizer::new(0, 16);
        for (i, locate) in [5u16, 7].into_iter().enumerate() {
            let m = msg(&add(locate, i as u64 + 1)).unwrap();
            assert_eq!(n.normalize(&m, i as u64 + 1, 0).as_slice().len(), 1);
        }
        let mut got = Vec::new();
        // A Delete (19 bytes) of locate 7 cut to 15: locate 7 alone, once.
        let cut = [b'D', 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(msg(&cut).is_err());
        assert_eq!(n.mark_undecodable(&cut, 3, 99, &mut |r| got.push(r)), 1);
        assert_eq!(n.mark_undecodable(&cut, 4, 99, &mut |r| got.push(r)), 0, "already stale");
        assert_eq!((n.is_stale(5), n.is_stale(7)), (false, true));
        // Too short to name a locate, or a locate never seen (9): every locate seen, those not stale yet (5).
        assert_eq!(n.mark_undecodable(b"D", 5, 99, &mut |r| got.push(r)), 1);
        assert_eq!(n.mark_undecodable(&[b'D', 0, 9], 6, 99, &mut |r| got.push(r)), 0);
        assert!(got.iter().all(|r| r.stale_book() == Some(StaleBook::Order)), "about the order book");
        let got: Vec<_> = got.iter().map(|r| (r.kind(), r.instrument_id, r.venue_seq(), r.ts_recv_ns)).collect();
        assert_eq!(got, [(Some(Kind::InstrumentStale), 7, 3, 99), (Some(Kind::InstrumentStale), 5, 5, 99)]);
    }

    #[test]
    fn after_a_hole_a_locate_first_seen_is_stale_on_sight_until_the_next_day() {
        let mut n = ItchNormalizer::new(0, 16);
        let kinds = |r: &Records| r.as_slice().iter().map(|r| (r.kind(), r.instrument_id)).collect::<Vec<_>>();
        assert_eq!(kinds(&n.normalize(&msg(&add(5, 1)).unwrap(), 1, 0)), [(Some(Kind::Add), 5)]);
        assert_eq!(n.mark_all_stale(2, 99, &mut |_| {}), 1);
        // Locate 7 first appears after the hole: its first messages may have been in it.
        let got = n.normalize(&msg(&add(7, 2)).unwrap(), 3, 0);
        assert_eq!(kinds(&got), [(Some(Kind::InstrumentStale), 7), (Some(Kind::Add), 7)]);
        assert_eq!(got.as_slice()[0].stale_book(), Some(StaleBook::Order));
        assert!(n.is_stale(7));
        assert_eq!(kinds(&n.normalize(&msg(&add(7, 3)).unwrap(), 4, 0)), [(Some(Kind::Add), 7)], "once");
        assert_eq!(n.stats().stale_on_sight, 1);
        // The next day starts clean: a new locate is good.
        let mut start = [0u8; 12];
        start[0] = b'S';
        start[11] = b'O';
        n.normalize(&msg(&start).unwrap(), 5, 0);
        assert_eq!(kinds(&n.normalize(&msg(&add(9, 4)).unwrap(), 6, 0)), [(Some(Kind::Add), 9)]);
        assert!(!n.is_stale(9));
    }

    #[test]
    fn short_messages_name_the_field() {
        let e = msg(&[b'A', 0, 1]).unwrap_err();
        assert_eq!((e.msg_type, e.field), (b'A', "length"));
        assert_eq!(e.problem, Problem::Truncated { have: 3, need: 36 });
        assert_eq!(msg(&[]).unwrap_err().problem, Problem::Empty);
    }

    #[test]
    fn bad_side_and_timestamp_are_refused() {
        let mut a = [0u8; 36];
        a[0] = b'A';
        a[19] = b'Z';
        a[24..32].copy_from_slice(b"AAPL    ");
        let e = msg(&a).unwrap_err();
        assert_eq!((e.field, e.problem), ("buy/sell", Problem::BadValue(u64::from(b'Z'))));
        a[19] = b'B';
        assert!(msg(&a).is_ok());
        a[5..11].copy_from_slice(&[0xff; 6]);
        assert_eq!(msg(&a).unwrap_err().field, "timestamp");
    }

    #[test]
    fn unknown_types_decode_as_unknown() {
        let m = msg(&[b'z', 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 9, 9]).unwrap();
        assert_eq!(m.body, Body::Unknown { len: 13 });
        assert_eq!((m.header.msg_type, m.header.stock_locate, m.header.timestamp_ns), (b'z', 7, 1));
        assert_eq!(msg(b"z").unwrap().body, Body::Unknown { len: 1 });
    }

    #[test]
    fn mwcb_levels_have_eight_decimals() {
        let mut v = [0u8; 35];
        v[0] = b'V';
        v[11..19].copy_from_slice(&(3_000_000_000_000u64).to_be_bytes()); // 30000.00000000
        v[19..27].copy_from_slice(&(2_800_000_000_000u64).to_be_bytes());
        v[27..35].copy_from_slice(&(u64::MAX).to_be_bytes());
        assert_eq!(msg(&v).unwrap_err().field, "level 3");
        v[27..35].copy_from_slice(&(2_500_000_000_000u64).to_be_bytes());
        let Body::MwcbDeclineLevel { level1_e9, level2_e9, level3_e9 } = msg(&v).unwrap().body else { panic!() };
        assert_eq!((level1_e9, level2_e9, level3_e9), (30_000_000_000_000, 28_000_000_000_000, 25_000_000_000_000));
    }
}
