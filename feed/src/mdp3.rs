//! CME Globex MDP 3.0 incremental feed: SBE decoding, sequence checks and normalisation into level records.
//!
//! Sources: CME's MDP 3.0 SBE message schema `templates_FixBinary.xml` (schema id 1, version 8,
//! `description="20160701"`, bundled in data/cme-mdp3-sbe-v8-pcap-20160927/), CME Client Systems Wiki "MDP 3.0 -
//! Binary Packet Header", "MDP 3.0 - Message Header", "MDP 3.0 - Market by Price - Multiple Depth Book", and
//! the FIX SBE 1.0 specification (message header, repeating groups, `blockLength` for schema extension).
//! Hand-written from the schema: every offset below is the XML's `offset` attribute.
//!
//! ## Packet (one UDP payload), all little-endian
//!
//! | offset | size | field | |
//! |---:|---:|---|---|
//! | 0 | 4 | `MsgSeqNum` u32 | packet sequence number of the channel |
//! | 4 | 8 | `SendingTime` u64 | ns since the UNIX epoch |
//! | 12 | .. | messages, back to back, to the end of the payload | |
//!
//! ## Message
//!
//! | offset | size | field | |
//! |---:|---:|---|---|
//! | 0 | 2 | `MsgSize` u16 | the whole message, these 2 bytes included |
//! | 2 | 2 | `blockLength` u16 | root block bytes (a newer schema may send more than we read: skipped) |
//! | 4 | 2 | `templateId` u16 | |
//! | 6 | 2 | `schemaId` u16 | must be 1 |
//! | 8 | 2 | `version` u16 | groups added in a later version (`sinceVersion`) are read only from it on |
//! | 10 | `blockLength` | root block | |
//! | .. | .. | repeating groups: `groupSize` = `blockLength` u16, `numInGroup` u8 (3 B); `groupSize8Byte` = `blockLength` u16, 5 padding bytes, `numInGroup` u8 (8 B); then `numInGroup` entries of `blockLength` bytes | |
//!
//! Every root block and group entry is read with the `blockLength` the message carries (never a hard-coded
//! size); a `blockLength` below the end of the last field this decoder reads is refused
//! ([`Problem::BlockLengthTooShort`]), a larger one skips the extra bytes.
//!
//! ## Templates decoded
//!
//! | id | name | root (bytes read) | group `NoMDEntries`: fields read (offset) | event |
//! |---:|---|---|---|---|
//! | 4 | ChannelReset4 | TransactTime (0), MatchEventIndicator (8): 9 | ApplID i16 (0): 2 | [`Event::ChannelReset`]; RptSeq state is dropped |
//! | 12 | AdminHeartbeat12 | none: 0 | none | [`Event::Heartbeat`] |
//! | 30 | SecurityStatus30 | TransactTime (0), SecurityGroup (8, 6 chars), Asset (14, 6 chars), SecurityID Int32NULL (20), TradeDate (24), MatchEventIndicator (26), SecurityTradingStatus (27), HaltReason (28), SecurityTradingEvent (29): 30 | none | [`Event::SecurityStatus`] |
//! | 32 | MDIncrementalRefreshBook32 | TransactTime, MatchEventIndicator: 9 | MDEntryPx PRICENULL (0), MDEntrySize Int32NULL (8), SecurityID (12), RptSeq (16), NumberOfOrders Int32NULL (20), MDPriceLevel (24), MDUpdateAction (25), MDEntryType (26): 27; then `NoOrderIDEntries` (groupSize8Byte, since v7, counted) | [`Event::Book`] |
//! | 33 | MDIncrementalRefreshDailyStatistics33 | 9 | SecurityID (12), RptSeq (16): 20 | [`Event::Other`] |
//! | 34 | MDIncrementalRefreshLimitsBanding34 | 9 | SecurityID (24), RptSeq (28): 32 | [`Event::Other`] |
//! | 35 | MDIncrementalRefreshSessionStatistics35 | 9 | MDEntryPx PRICE (0), SecurityID (8), RptSeq (12), OpenCloseSettlFlag (16), MDUpdateAction (17), MDEntryType (18), MDEntrySize Int32NULL (19, since v8, read when the block has it): 19 | [`Event::Statistics`] |
//! | 36 | MDIncrementalRefreshTrade36 | 9 | SecurityID (12), RptSeq (16): 20 | [`Event::Other`] |
//! | 37 | MDIncrementalRefreshVolume37 | 9 | MDEntrySize (0), SecurityID (4), RptSeq (8), MDUpdateAction (12): 13 | [`Event::Volume`] |
//! | 27, 29, 41 | MDInstrumentDefinitionFuture27, Spread29, Option41 (instrument definition feed; also sent on the incremental feed when an instrument is created) | TotNumReports (1), SecurityUpdateAction (5), LastUpdateTime (6), Symbol (35, 20 chars), SecurityID (55), MinPriceIncrement (27: 91, 29: 94, 41: 111), DisplayFactor FLOAT (27: 99, 29: 102, 41: 127): 107 / 110 / 135; the groups after the root (events, feed types, attributes, lot rules, legs, underlyings) end the message and are not read | none read | [`Event::Definition`] |
//! | 38 | SnapshotFullRefresh38 (market recovery feed) | LastMsgSeqNumProcessed (0), TotNumReports (4), SecurityID (8), RptSeq (12), TransactTime (16), LastUpdateTime (24), TradeDate (32), MDSecurityTradingStatus (34), HighLimitPrice (35), LowLimitPrice (43), MaxPriceVariation (51): 59 | MDEntryPx PRICENULL (0), MDEntrySize Int32NULL (8), NumberOfOrders Int32NULL (12), MDPriceLevel Int8NULL (16), TradingReferenceDate (17), OpenCloseSettlFlag (19), SettlPriceType (20), MDEntryType (21): 22 | [`Event::Snapshot`], then one [`Event::SnapshotEntry`] per entry |
//! | 42 | MDIncrementalRefreshTradeSummary42 | 9 | MDEntryPx PRICE (0), MDEntrySize (8), SecurityID (12), RptSeq (16), NumberOfOrders Int32NULL (20), AggressorSide (24), MDUpdateAction (25): 26; then `NoOrderIDEntries` (groupSize8Byte, OrderID (0), LastQty (8): 12, counted) | [`Event::TradeSummary`] |
//!
//! A SnapshotFullRefresh38 is the state of one instrument on the market recovery (snapshot) feed: its book
//! levels (`MDEntryType` `0`/`1`/`E`/`F`, which must carry an `MDPriceLevel` of 1 or more) and statistics,
//! consistent with the incremental feed up to `LastMsgSeqNumProcessed` and the instrument's `RptSeq`. Snapshot
//! packets are decoded by [`decode_snapshot_packet`] (no sequence state: a snapshot feed loops), and
//! [`snapshot_clear_record`]/[`snapshot_level_record`] turn one into records; [`write_snapshot_message`] writes
//! one (for the simulator's snapshot server and tests). Given to [`Mdp3Decoder::decode_packet`], the same
//! messages are delivered without `RptSeq` checks.
//!
//! Any other template id is skipped by its `MsgSize` and counted ([`Mdp3Stats::unknown_templates`],
//! [`Event::Unknown`]). Prices are `PRICE`/`PRICENULL`: an int64 mantissa with exponent -7 (null `i64::MAX`),
//! converted exactly to 1e-9 units (x 100; a mantissa that overflows that is refused).
//!
//! ## Sequencing
//!
//! - Packet level ([`SeqTracker`] on `MsgSeqNum`): a jump forward is a gap (counted, reported in
//!   [`PacketOutcome::gap`], the packet still decoded); a `MsgSeqNum` at or below the last one taken is stale
//!   (a duplicate from the other feed, or replayed): counted and not decoded.
//! - Instrument level (`RptSeq` per `SecurityID`, over every template carrying it): the first one seen is taken
//!   as is; a jump forward is an [`Event::RptSeqGap`] naming the security, delivered before the entry; an
//!   `RptSeq` at or below the last is stale: counted, the entry is not delivered. A ChannelReset4 forgets them
//!   all (CME restarts `RptSeq` at 1 after a channel reset).
//!
//! ## Errors and allocation
//!
//! A packet is validated whole before anything is delivered or any state changes: a bad packet is refused with
//! a [`DecodeError`] naming its `MsgSeqNum`, the message (1-based index in the packet), the template and the
//! field, and nothing of it reaches the caller. The packet is decoded once: its events go into a buffer the
//! decoder owns (room for [`EVENTS_PER_PACKET`]) and are delivered from there once the whole packet has
//! decoded. Decoding never panics and never allocates, except the growth of that buffer for a packet with more
//! events and of the `RptSeq` table when more instruments appear than [`Mdp3Decoder::with_capacity`] reserved.
//!
//! A price-level handler needs only the book entries and the `RptSeq` gaps: [`Mdp3Decoder::decode_book_packet`]
//! hands those to a [`BookSink`] with the same checks and counters. A packet of the templates a book feed carries
//! (12, 30, 32, 35, 37, 42) takes its lean path: checked whole without building events (the same field decoders),
//! then decoded straight into the sink, with no buffer; any other packet goes through `decode_packet`.
//! `feed/tests/mdp3_book_path.rs` and the `mdp3_packet` fuzz target hold the two paths to the same output.

use rustc_hash::FxHashMap;

use mdfan_wire::{flags, venue_position, BookUpdate, Kind, Side, StaleBook};

/// Binary packet header: `MsgSeqNum` u32 + `SendingTime` u64.
pub const PACKET_HEADER_BYTES: usize = 12;
/// `MsgSize` u16 before each message.
pub const MSG_SIZE_BYTES: usize = 2;
/// SBE message header: `blockLength`, `templateId`, `schemaId`, `version`, u16 each.
pub const SBE_HEADER_BYTES: usize = 8;
/// `schemaId` of the MDP 3.0 market data schema.
pub const SCHEMA_ID: u16 = 1;
/// `groupSize`: `blockLength` u16 + `numInGroup` u8.
const GROUP_SIZE_BYTES: usize = 3;
/// `groupSize8Byte`: `blockLength` u16 + 5 padding bytes + `numInGroup` u8 (at offset 7).
const GROUP_SIZE_8BYTE_BYTES: usize = 8;
/// Root block of every incremental refresh: TransactTime u64 (0) + MatchEventIndicator u8 (8).
const INCREMENTAL_ROOT_BYTES: u16 = 9;
/// `PRICE` exponent is -7; records use 1e-9 units: x 100.
const PRICE_E7_TO_E9: i64 = 100;
/// Null of `PRICENULL`, `Int32NULL`, `uInt8NULL` and `uInt32NULL` (schema `nullValue`).
const PRICE_NULL: i64 = i64::MAX;
const INT32_NULL: i32 = i32::MAX;
const UINT8_NULL: u8 = u8::MAX;
const INT8_NULL: i8 = i8::MAX;
/// Null of `LocalMktDate` (TradeDate, TradingReferenceDate).
pub const LOCAL_MKT_DATE_NULL: u16 = u16::MAX;
/// SnapshotFullRefresh38's root block (schema `blockLength`).
pub const SNAPSHOT_ROOT_BYTES: u16 = 59;
/// SnapshotFullRefresh38's `NoMDEntries` entry (schema `blockLength`).
pub const SNAPSHOT_ENTRY_BYTES: u16 = 22;
/// The template id of SnapshotFullRefresh38.
pub const SNAPSHOT_TEMPLATE_ID: u16 = 38;
/// The schema version this crate writes (v8).
pub const SCHEMA_VERSION: u16 = 8;
/// Template ids below this are counted one by one in [`Mdp3Stats::templates`].
pub const TEMPLATE_COUNTERS: usize = 64;
/// MatchEventIndicator bit 7: last message of the matching event (schema set `MatchEventIndicator`).
pub const END_OF_EVENT: u8 = 0x80;

/// The template's name in the schema, or `"unknown"`.
pub const fn template_name(template_id: u16) -> &'static str {
    match template_id {
        4 => "ChannelReset4",
        12 => "AdminHeartbeat12",
        15 => "AdminLogin15",
        16 => "AdminLogout16",
        27 => "MDInstrumentDefinitionFuture27",
        29 => "MDInstrumentDefinitionSpread29",
        30 => "SecurityStatus30",
        32 => "MDIncrementalRefreshBook32",
        33 => "MDIncrementalRefreshDailyStatistics33",
        34 => "MDIncrementalRefreshLimitsBanding34",
        35 => "MDIncrementalRefreshSessionStatistics35",
        36 => "MDIncrementalRefreshTrade36",
        37 => "MDIncrementalRefreshVolume37",
        38 => "SnapshotFullRefresh38",
        39 => "QuoteRequest39",
        41 => "MDInstrumentDefinitionOption41",
        42 => "MDIncrementalRefreshTradeSummary42",
        43 => "MDIncrementalRefreshOrderBook43",
        44 => "SnapshotFullRefreshOrderBook44",
        _ => "unknown",
    }
}

/// What is wrong in a [`DecodeError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The packet or message ends before the field: `need` bytes from the field's start, `have` there.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A root or group `blockLength` shorter than the fields this decoder reads from it.
    BlockLengthTooShort {
        /// The `blockLength` sent.
        got: u16,
        /// The least this decoder accepts (end of the last field it reads).
        min: u16,
    },
    /// `MsgSize` below the `MsgSize` + SBE header bytes (10).
    MsgSizeTooSmall {
        /// The `MsgSize` sent.
        got: u16,
    },
    /// `schemaId` other than [`SCHEMA_ID`].
    SchemaId {
        /// The `schemaId` sent.
        got: u16,
    },
    /// A value outside the field's enum (or a negative `SecurityID`).
    BadValue {
        /// The value, widened.
        value: i64,
    },
    /// A price mantissa whose 1e-9 value does not fit in an i64.
    PriceOverflow {
        /// The mantissa (units of 1e-7).
        mantissa: i64,
    },
    /// The root block and groups end before `MsgSize` says the message does (bytes left over).
    TrailingBytes {
        /// Bytes between the last group and the message's end.
        left: usize,
    },
}

/// A packet that could not be decoded, named down to the field. Nothing of the packet was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", DisplayDecodeError(self))]
pub struct DecodeError {
    /// The packet's `MsgSeqNum`; `None` when the packet is shorter than its header.
    pub msg_seq_num: Option<u32>,
    /// 1-based index of the message in the packet; 0 for the packet header.
    pub message: u16,
    /// The message's `templateId`, once read.
    pub template_id: Option<u16>,
    /// The field, as the schema names it (`Group.Field` inside a repeating group, with the 1-based entry index
    /// in [`DecodeError::entry`]).
    pub field: &'static str,
    /// 1-based entry of the repeating group, or 0 outside groups.
    pub entry: u16,
    /// What is wrong.
    pub problem: Problem,
}

struct DisplayDecodeError<'a>(&'a DecodeError);

impl core::fmt::Display for DisplayDecodeError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let e = self.0;
        match e.msg_seq_num {
            Some(s) => write!(f, "MDP 3.0 packet MsgSeqNum {s}")?,
            None => write!(f, "MDP 3.0 packet (no header)")?,
        }
        if e.message > 0 {
            write!(f, ", message {}", e.message)?;
        }
        if let Some(t) = e.template_id {
            write!(f, " (template {t} {})", template_name(t))?;
        }
        write!(f, ", field {}", e.field)?;
        if e.entry > 0 {
            write!(f, " of entry {}", e.entry)?;
        }
        match e.problem {
            Problem::Truncated { need, have } => write!(f, ": truncated, need {need} bytes, have {have}"),
            Problem::BlockLengthTooShort { got, min } => write!(f, ": blockLength {got} below {min}"),
            Problem::MsgSizeTooSmall { got } => write!(f, ": MsgSize {got} below 10"),
            Problem::SchemaId { got } => write!(f, ": schemaId {got}, expected {SCHEMA_ID}"),
            Problem::BadValue { value } => write!(f, ": invalid value {value}"),
            Problem::PriceOverflow { mantissa } => write!(f, ": mantissa {mantissa} overflows 1e-9 units"),
            Problem::TrailingBytes { left } => write!(f, ": {left} bytes left after the last group"),
        }
    }
}

/// The binary packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// Packet sequence number of the channel.
    pub msg_seq_num: u32,
    /// When CME sent the packet, ns since the UNIX epoch.
    pub sending_time_ns: u64,
}

/// Reads the binary packet header.
///
/// # Errors
/// [`Problem::Truncated`] for a payload shorter than 12 bytes.
pub fn packet_header(payload: &[u8]) -> Result<PacketHeader, DecodeError> {
    if payload.len() < PACKET_HEADER_BYTES {
        return Err(DecodeError {
            msg_seq_num: None,
            message: 0,
            template_id: None,
            field: "MsgSeqNum/SendingTime",
            entry: 0,
            problem: Problem::Truncated { need: PACKET_HEADER_BYTES, have: payload.len() },
        });
    }
    Ok(PacketHeader { msg_seq_num: le_u32(payload, 0), sending_time_ns: le_u64(payload, 4) })
}

/// Where an [`Event`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageInfo {
    /// The packet's `MsgSeqNum`.
    pub msg_seq_num: u32,
    /// The packet's `SendingTime`, ns since the UNIX epoch.
    pub sending_time_ns: u64,
    /// When the packet was received (captured), ns since the UNIX epoch, as the caller gave it.
    pub ts_recv_ns: u64,
    /// 1-based index of the message in the packet.
    pub message: u16,
    /// The message's `templateId`.
    pub template_id: u16,
    /// The message's `TransactTime` (matching-engine time, ns since the UNIX epoch); 0 for templates without.
    pub transact_time_ns: u64,
    /// The message's `MatchEventIndicator` bits; 0 for templates without.
    pub match_event_indicator: u8,
}

/// `MDUpdateAction` (schema enum `MDUpdateAction`, uInt8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateAction {
    /// 0 New.
    New,
    /// 1 Change.
    Change,
    /// 2 Delete.
    Delete,
    /// 3 DeleteThru.
    DeleteThru,
    /// 4 DeleteFrom.
    DeleteFrom,
    /// 5 Overlay.
    Overlay,
}

impl UpdateAction {
    const fn from_u8(v: u8) -> Option<UpdateAction> {
        Some(match v {
            0 => UpdateAction::New,
            1 => UpdateAction::Change,
            2 => UpdateAction::Delete,
            3 => UpdateAction::DeleteThru,
            4 => UpdateAction::DeleteFrom,
            5 => UpdateAction::Overlay,
            _ => return None,
        })
    }
}

/// `MDEntryType` of a book entry (schema enum `MDEntryTypeBook`, char).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookEntryType {
    /// `0` bid.
    Bid,
    /// `1` offer.
    Offer,
    /// `E` implied bid.
    ImpliedBid,
    /// `F` implied offer.
    ImpliedOffer,
    /// `J` book reset: empty the instrument's book.
    BookReset,
}

impl BookEntryType {
    const fn from_u8(v: u8) -> Option<BookEntryType> {
        Some(match v {
            b'0' => BookEntryType::Bid,
            b'1' => BookEntryType::Offer,
            b'E' => BookEntryType::ImpliedBid,
            b'F' => BookEntryType::ImpliedOffer,
            b'J' => BookEntryType::BookReset,
            _ => return None,
        })
    }
}

/// One `NoMDEntries` entry of MDIncrementalRefreshBook32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookEntry {
    /// `MDEntryPx` in 1e-9 units (mantissa x 100); `None` when null.
    pub price_e9: Option<i64>,
    /// `MDEntrySize`, contracts; `None` when null.
    pub size: Option<i32>,
    /// `SecurityID` (checked non-negative).
    pub security_id: i32,
    /// `RptSeq`.
    pub rpt_seq: u32,
    /// `NumberOfOrders`; `None` when null.
    pub orders: Option<i32>,
    /// `MDPriceLevel`, 1 = best.
    pub price_level: u8,
    /// `MDUpdateAction`.
    pub action: UpdateAction,
    /// `MDEntryType`.
    pub entry_type: BookEntryType,
    /// Whether this is the message's last `NoMDEntries` entry.
    pub last_in_message: bool,
    /// 0-based index of this entry among the packet's MDIncrementalRefreshBook32 entries, every entry counted
    /// (one whose `RptSeq` is stale too, though it is not delivered): the index of its venue position, which
    /// both publishers of a pair compute alike whatever each has recovered (saturates at `u16::MAX`).
    pub index: u16,
}

/// One entry of MDIncrementalRefreshSessionStatistics35.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatisticsEntry {
    /// `MDEntryPx` in 1e-9 units.
    pub price_e9: i64,
    /// `SecurityID`.
    pub security_id: i32,
    /// `RptSeq`.
    pub rpt_seq: u32,
    /// `OpenCloseSettlFlag` (uInt8NULL; 255 null).
    pub open_close_settl_flag: u8,
    /// `MDUpdateAction`.
    pub action: UpdateAction,
    /// `MDEntryType` character (`4` open, `7` high, `8` low, `N` highest bid, `O` lowest offer).
    pub entry_type: u8,
    /// `MDEntrySize` (since version 8); `None` when null or absent.
    pub size: Option<i32>,
}

/// One entry of MDIncrementalRefreshVolume37.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeEntry {
    /// `MDEntrySize`: cumulative traded volume of the session.
    pub volume: i32,
    /// `SecurityID`.
    pub security_id: i32,
    /// `RptSeq`.
    pub rpt_seq: u32,
    /// `MDUpdateAction`.
    pub action: UpdateAction,
}

/// One `NoMDEntries` entry of MDIncrementalRefreshTradeSummary42.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TradeEntry {
    /// `MDEntryPx` in 1e-9 units.
    pub price_e9: i64,
    /// `MDEntrySize`: quantity, contracts.
    pub size: i32,
    /// `SecurityID`.
    pub security_id: i32,
    /// `RptSeq`.
    pub rpt_seq: u32,
    /// `NumberOfOrders`; `None` when null.
    pub orders: Option<i32>,
    /// `AggressorSide`: 0 none, 1 buy, 2 sell; 255 null.
    pub aggressor_side: u8,
    /// `MDUpdateAction`.
    pub action: UpdateAction,
}

/// SecurityStatus30's root block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityStatus {
    /// `SecurityGroup`, 6 chars, NUL-padded.
    pub security_group: [u8; 6],
    /// `Asset`, 6 chars, NUL-padded.
    pub asset: [u8; 6],
    /// `SecurityID`; `None` when null (the status is for the whole group).
    pub security_id: Option<i32>,
    /// `TradeDate`, days since the UNIX epoch (65535 null).
    pub trade_date: u16,
    /// `SecurityTradingStatus` (e.g. 17 ReadyToTrade, 21 PreOpen; 255 null).
    pub trading_status: u8,
    /// `HaltReason`.
    pub halt_reason: u8,
    /// `SecurityTradingEvent`.
    pub trading_event: u8,
}

/// An instrument definition (MDInstrumentDefinitionFuture27, Spread29 or Option41): what the publisher's
/// symbology needs of it. Source: CME Client Systems Wiki, "MDP 3.0 - Security Definition"; tags 55 `Symbol`,
/// 48 `SecurityID`, 969 `MinPriceIncrement`, 9787 `DisplayFactor`, 980 `SecurityUpdateAction`, 911
/// `TotNumReports`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstrumentDefinition {
    /// The template it came in: 27 (future), 29 (spread) or 41 (option).
    pub template_id: u16,
    /// `TotNumReports`: definitions in one loop of the definition feed; `None` when null.
    pub tot_num_reports: Option<u32>,
    /// `SecurityUpdateAction`: `A` add, `D` delete, `M` modify.
    pub update_action: u8,
    /// `LastUpdateTime`, ns since the UNIX epoch.
    pub last_update_time_ns: u64,
    /// `Symbol`, 20 bytes as sent (NUL- or space-padded); [`InstrumentDefinition::symbol`] trims it.
    pub symbol_bytes: [u8; 20],
    /// `SecurityID` (checked non-negative).
    pub security_id: i32,
    /// `MinPriceIncrement` in 1e-9 units of the feed's prices; `None` when null (an option may have none).
    pub min_price_increment_e9: Option<i64>,
    /// `DisplayFactor` (FLOAT: mantissa x 10^-7) in 1e-9 units (1,000,000,000 = 1; checked above 0).
    pub display_factor_e9: i64,
}

impl InstrumentDefinition {
    /// The symbol without its padding; `None` when it is not printable ASCII or is empty.
    pub fn symbol(&self) -> Option<&str> {
        let end = self.symbol_bytes.iter().position(|&b| b == 0).unwrap_or(self.symbol_bytes.len());
        let s = std::str::from_utf8(&self.symbol_bytes[..end]).ok()?.trim_end();
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic())).then_some(s)
    }

    /// As the publisher's symbology keeps it (`mdfan_wire::InstrumentDef`: id, symbol, display factor, tick
    /// size; an unknown tick size is 0); `None` for a symbol [`InstrumentDefinition::symbol`] refuses.
    pub fn instrument_def(&self) -> Option<mdfan_wire::InstrumentDef> {
        Some(mdfan_wire::InstrumentDef {
            instrument_id: self.security_id as u32,
            symbol: self.symbol()?.to_owned(),
            display_factor_e9: self.display_factor_e9,
            tick_size_e9: self.min_price_increment_e9.unwrap_or(0),
        })
    }
}

/// Root-block offsets of a definition template: (the bytes read, `MinPriceIncrement`, `DisplayFactor`).
const fn definition_layout(template_id: u16) -> Option<(u16, usize, usize)> {
    match template_id {
        27 => Some((107, 91, 99)),
        29 => Some((110, 94, 102)),
        41 => Some((135, 111, 127)),
        _ => None,
    }
}

/// MDInstrumentDefinitionFuture27's root block length in schema version 8.
pub const DEFINITION_FUTURE_ROOT_BYTES: u16 = 216;
/// MDInstrumentDefinitionFuture27's template id.
pub const DEFINITION_FUTURE_TEMPLATE_ID: u16 = 27;

/// SnapshotFullRefresh38's root block: one instrument's state on the market recovery feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRefresh {
    /// `LastMsgSeqNumProcessed`: the incremental feed's `MsgSeqNum` this state is consistent with.
    pub last_msg_seq_num_processed: u32,
    /// `TotNumReports`: messages in one loop of the snapshot feed.
    pub tot_num_reports: u32,
    /// `SecurityID` (checked non-negative).
    pub security_id: i32,
    /// `RptSeq`: the instrument's last `RptSeq` this state includes.
    pub rpt_seq: u32,
    /// `TransactTime` of the last event the instrument took part in, ns since the UNIX epoch.
    pub transact_time_ns: u64,
    /// `LastUpdateTime`: last instrument definition change on the channel, ns since the UNIX epoch.
    pub last_update_time_ns: u64,
    /// `TradeDate`, days since the UNIX epoch ([`LOCAL_MKT_DATE_NULL`] null).
    pub trade_date: u16,
    /// `MDSecurityTradingStatus` (e.g. 17 ReadyToTrade, 21 PreOpen; 255 null).
    pub trading_status: u8,
    /// `HighLimitPrice` in 1e-9 units; `None` when null.
    pub high_limit_price_e9: Option<i64>,
    /// `LowLimitPrice` in 1e-9 units; `None` when null.
    pub low_limit_price_e9: Option<i64>,
    /// `MaxPriceVariation` in 1e-9 units; `None` when null.
    pub max_price_variation_e9: Option<i64>,
    /// `NoMDEntries` `numInGroup`: the entries that follow as [`Event::SnapshotEntry`].
    pub entries: u8,
}

/// One `NoMDEntries` entry of SnapshotFullRefresh38.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// The message's `SecurityID` (from the root block).
    pub security_id: i32,
    /// `MDEntryPx` in 1e-9 units; `None` when null.
    pub price_e9: Option<i64>,
    /// `MDEntrySize`; `None` when null.
    pub size: Option<i32>,
    /// `NumberOfOrders`; `None` when null.
    pub orders: Option<i32>,
    /// `MDPriceLevel` (1 = best); `None` when null. Checked 1 or more for book entries.
    pub price_level: Option<i8>,
    /// `TradingReferenceDate`, days since the UNIX epoch ([`LOCAL_MKT_DATE_NULL`] null).
    pub trading_reference_date: u16,
    /// `OpenCloseSettlFlag` (255 null).
    pub open_close_settl_flag: u8,
    /// `SettlPriceType` bits.
    pub settl_price_type: u8,
    /// `MDEntryType` character (schema enum `MDEntryType`, checked).
    pub entry_type: u8,
    /// The book side of a book entry (`0`/`1`/`E`/`F`); `None` for statistics entries.
    pub book: Option<BookEntryType>,
    /// Whether this is the message's last book entry (its last level record).
    pub last_book_entry: bool,
}

/// The `MDEntryType` values of the schema enum `MDEntryType` (SnapshotFullRefresh38).
const fn snapshot_entry_type_valid(v: u8) -> bool {
    matches!(
        v,
        b'0' | b'1'
            | b'2'
            | b'4'
            | b'6'
            | b'7'
            | b'8'
            | b'B'
            | b'C'
            | b'E'
            | b'F'
            | b'J'
            | b'N'
            | b'O'
            | b'W'
            | b'e'
            | b'g'
    )
}

/// The book side of a snapshot `MDEntryType`: `0`/`1`/`E`/`F`; `None` for the others.
pub const fn snapshot_book_type(v: u8) -> Option<BookEntryType> {
    match v {
        b'0' => Some(BookEntryType::Bid),
        b'1' => Some(BookEntryType::Offer),
        b'E' => Some(BookEntryType::ImpliedBid),
        b'F' => Some(BookEntryType::ImpliedOffer),
        _ => None,
    }
}

/// One decoded item, in packet order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// ChannelReset4 entry: the channel's books are to be emptied; `ApplID` names the channel.
    ChannelReset {
        /// `ApplID`.
        appl_id: i16,
    },
    /// AdminHeartbeat12.
    Heartbeat,
    /// SecurityStatus30.
    SecurityStatus(SecurityStatus),
    /// A price-level book entry (template 32).
    Book(BookEntry),
    /// The `NoOrderIDEntries` count of a template 32 or 42 message (after its entries), when not 0.
    OrderIdEntries {
        /// `numInGroup`.
        count: u8,
    },
    /// A session statistics entry (template 35).
    Statistics(StatisticsEntry),
    /// A volume entry (template 37).
    Volume(VolumeEntry),
    /// A trade summary entry (template 42).
    TradeSummary(TradeEntry),
    /// An entry of a template whose content is not decoded beyond its sequence (33, 34, 36).
    Other {
        /// `SecurityID`.
        security_id: i32,
        /// `RptSeq`.
        rpt_seq: u32,
    },
    /// `RptSeq` of `security_id` jumped: `expected` was due, `got` came (delivered before that entry).
    RptSeqGap {
        /// The instrument.
        security_id: i32,
        /// The `RptSeq` due.
        expected: u32,
        /// The `RptSeq` received.
        got: u32,
        /// The [`BookEntry::index`] of that entry when it is a book entry; otherwise the index the packet's next
        /// book entry takes (the book entries before it).
        book_index: u16,
    },
    /// A SnapshotFullRefresh38 root block (market recovery feed); its entries follow.
    Snapshot(SnapshotRefresh),
    /// An instrument definition (templates 27, 29, 41).
    Definition(InstrumentDefinition),
    /// An entry of the SnapshotFullRefresh38 before it.
    SnapshotEntry(SnapshotEntry),
    /// A template this decoder does not know, skipped by its `MsgSize`.
    Unknown {
        /// `templateId`.
        template_id: u16,
        /// `MsgSize`.
        msg_size: u16,
    },
}

impl Event {
    /// The (`SecurityID`, `RptSeq`) of an incremental entry (templates 32, 33, 34, 35, 36, 37, 42), the ones the
    /// decoder checks per instrument; `None` for every other event.
    pub fn security_rpt_seq(&self) -> Option<(i32, u32)> {
        rpt_seq_of(self)
    }
}

/// Decoder counters (all since construction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mdp3Stats {
    /// Packets decoded (not stale).
    pub packets: u64,
    /// Packets refused with a [`DecodeError`].
    pub bad_packets: u64,
    /// Packets whose `MsgSeqNum` was at or below the last one taken: not decoded.
    pub stale_packets: u64,
    /// `MsgSeqNum` jumps.
    pub packet_gaps: u64,
    /// Packets missed in those jumps.
    pub packets_missed: u64,
    /// Messages decoded (unknown ones included).
    pub messages: u64,
    /// Messages per `templateId` below [`TEMPLATE_COUNTERS`].
    pub templates: [u64; TEMPLATE_COUNTERS],
    /// Messages of a template this decoder does not know (skipped).
    pub unknown_templates: u64,
    /// Template 32 entries, by `MDUpdateAction` (index = the action's value, 0..=5).
    pub book_actions: [u64; 6],
    /// Template 32 entries, by `MDEntryType`: bid, offer, implied bid, implied offer, book reset.
    pub book_entry_types: [u64; 5],
    /// `NoOrderIDEntries` entries of templates 32 and 42.
    pub order_id_entries: u64,
    /// Entries checked against their instrument's `RptSeq`.
    pub rpt_seq_entries: u64,
    /// `RptSeq` jumps.
    pub rpt_seq_gaps: u64,
    /// Entries whose `RptSeq` was at or below their instrument's last: not delivered.
    pub rpt_seq_stale: u64,
    /// Packets [`Mdp3Decoder::decode_book_packet`] took on its lean path (stale ones included); the others went
    /// through [`Mdp3Decoder::decode_packet`].
    pub book_path_packets: u64,
}

impl Default for Mdp3Stats {
    fn default() -> Self {
        Mdp3Stats {
            packets: 0,
            bad_packets: 0,
            stale_packets: 0,
            packet_gaps: 0,
            packets_missed: 0,
            messages: 0,
            templates: [0; TEMPLATE_COUNTERS],
            unknown_templates: 0,
            book_actions: [0; 6],
            book_entry_types: [0; 5],
            order_id_entries: 0,
            rpt_seq_entries: 0,
            rpt_seq_gaps: 0,
            rpt_seq_stale: 0,
            book_path_packets: 0,
        }
    }
}

/// What [`Mdp3Decoder::decode_packet`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketOutcome {
    /// The packet header.
    pub header: PacketHeader,
    /// `Some((expected, got))` when `MsgSeqNum` jumped over missing packets before this one.
    pub gap: Option<(u32, u32)>,
    /// The packet was stale (at or below the last `MsgSeqNum` taken): nothing was decoded or delivered.
    pub stale: bool,
    /// Messages in the packet (0 when stale).
    pub messages: u16,
}

/// Packet sequence tracking: the next `MsgSeqNum` due.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqTracker {
    /// The last sequence number taken; `None` before the first.
    pub last: Option<u32>,
}

/// What [`SeqTracker::observe`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// The first, or the one due.
    InOrder,
    /// A jump: `expected` was due.
    Gap {
        /// The sequence number due.
        expected: u32,
    },
    /// At or below the last one taken.
    Stale,
}

impl SeqTracker {
    /// Checks `seq` and takes it unless stale.
    pub fn observe(&mut self, seq: u32) -> SeqCheck {
        let check = match self.last {
            None => SeqCheck::InOrder,
            Some(last) if seq <= last => return SeqCheck::Stale,
            Some(last) if seq == last.wrapping_add(1) => SeqCheck::InOrder,
            Some(last) => SeqCheck::Gap { expected: last.wrapping_add(1) },
        };
        self.last = Some(seq);
        check
    }
}

/// Entries of [`RptSeqTable`]'s cache.
const RPT_SEQ_CACHE: usize = 256;

/// The last `RptSeq` of each security: a map, and a direct-mapped cache in front of it (slot
/// `security_id % RPT_SEQ_CACHE`) that holds the current value of the securities it holds (written back to the
/// map when another security takes the slot). `-1` (never a `SecurityID`, checked non-negative) is empty.
#[derive(Debug, Clone)]
struct RptSeqTable {
    map: FxHashMap<i32, u32>,
    cache: Box<[(i32, u32); RPT_SEQ_CACHE]>,
}

impl RptSeqTable {
    fn with_capacity(instruments: usize) -> RptSeqTable {
        RptSeqTable {
            map: FxHashMap::with_capacity_and_hasher(instruments, Default::default()),
            cache: Box::new([(-1, 0); RPT_SEQ_CACHE]),
        }
    }

    /// The cache slot holding `security_id`, if any (a negative id, never decoded, is only ever in the map).
    fn cached(&mut self, security_id: i32) -> Option<&mut (i32, u32)> {
        let slot = &mut self.cache[security_id as u32 as usize % RPT_SEQ_CACHE];
        (security_id >= 0 && slot.0 == security_id).then_some(slot)
    }

    fn get(&self, security_id: i32) -> Option<u32> {
        match self.cache[security_id as u32 as usize % RPT_SEQ_CACHE] {
            (id, v) if id == security_id && id >= 0 => Some(v),
            _ => self.map.get(&security_id).copied(),
        }
    }

    fn set(&mut self, security_id: i32, rpt_seq: u32) {
        match self.cached(security_id) {
            Some((_, v)) => *v = rpt_seq,
            None => {
                self.map.insert(security_id, rpt_seq);
            }
        }
    }

    /// Takes `got` as `security_id`'s last `RptSeq` unless it is at or below the last one (`Err`: stale).
    /// Returns the last one before it (`None` for its first).
    #[inline]
    fn take(&mut self, security_id: i32, got: u32) -> Result<Option<u32>, ()> {
        if let Some((_, last)) = self.cached(security_id) {
            if got <= *last {
                return Err(());
            }
            return Ok(Some(std::mem::replace(last, got)));
        }
        self.take_miss(security_id, got)
    }

    #[inline(never)]
    fn take_miss(&mut self, security_id: i32, got: u32) -> Result<Option<u32>, ()> {
        let last = self.map.get(&security_id).copied();
        if last.is_some_and(|last| got <= last) {
            return Err(());
        }
        if security_id < 0 {
            self.map.insert(security_id, got);
            return Ok(last);
        }
        let slot = &mut self.cache[security_id as u32 as usize % RPT_SEQ_CACHE];
        if slot.0 >= 0 {
            self.map.insert(slot.0, slot.1); // written back: the map holds it again
        }
        *slot = (security_id, got);
        Ok(last)
    }

    fn clear(&mut self) {
        self.map.clear();
        self.cache.fill((-1, 0));
    }
}

/// Events the decoder's packet buffer has room for without growing: a 1,472-byte packet (a 1,500-byte MTU)
/// holds at most 112 entries of 13 bytes (VolumeEntry37's, the smallest book, trade, volume or statistics
/// entry), one event each. A packet with more (ChannelReset4's 2-byte entries) grows the buffer once.
pub const EVENTS_PER_PACKET: usize = 128;

/// The MDP 3.0 decoder of one channel: packet and instrument sequence state, counters (module docs).
#[derive(Debug, Clone)]
pub struct Mdp3Decoder {
    packets: SeqTracker,
    rpt_seq: RptSeqTable,
    stats: Mdp3Stats,
    /// The packet being decoded: its events, delivered once all of it has decoded.
    events: Vec<(MessageInfo, Event)>,
}

impl Default for Mdp3Decoder {
    fn default() -> Self {
        Mdp3Decoder::with_capacity(DEFAULT_INSTRUMENTS)
    }
}

/// Instruments the `RptSeq` table reserves room for by default (a CME channel carries up to a few thousand).
pub const DEFAULT_INSTRUMENTS: usize = 4096;

impl Mdp3Decoder {
    /// A decoder whose `RptSeq` table has room for `instruments` without growing.
    pub fn with_capacity(instruments: usize) -> Mdp3Decoder {
        Mdp3Decoder {
            packets: SeqTracker::default(),
            rpt_seq: RptSeqTable::with_capacity(instruments),
            stats: Mdp3Stats::default(),
            events: Vec::with_capacity(EVENTS_PER_PACKET),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Mdp3Stats {
        &self.stats
    }

    /// The last `MsgSeqNum` taken.
    pub fn last_msg_seq_num(&self) -> Option<u32> {
        self.packets.last
    }

    /// The last `RptSeq` taken for `security_id` (any template carrying one); `None` before its first.
    pub fn rpt_seq(&self, security_id: i32) -> Option<u32> {
        self.rpt_seq.get(security_id)
    }

    /// A `MsgSeqNum` reset of the channel (the venue restarted its packet sequence, e.g. CME's weekly start):
    /// forgets the last `MsgSeqNum` and every `RptSeq`, so the new sequence is taken from its first packet.
    pub fn reset_sequences(&mut self) {
        self.packets.last = None;
        self.rpt_seq.clear();
    }

    /// Market recovery: `security_id`'s state was replaced by a snapshot that includes everything up to
    /// `rpt_seq`. From now on its entries at or below `rpt_seq` are stale (counted, not delivered) and
    /// `rpt_seq + 1` is the one due. Allocates only for a security the table has not held before.
    pub fn resync_rpt_seq(&mut self, security_id: i32, rpt_seq: u32) {
        self.rpt_seq.set(security_id, rpt_seq);
    }

    /// Decodes one packet (one UDP payload) received at `ts_recv_ns`, calling `on_event` for each item in order
    /// (module docs: the packet is validated whole first; a stale packet is counted and not decoded).
    ///
    /// # Errors
    /// [`DecodeError`] naming the packet, message, template and field; nothing was delivered and no state but
    /// [`Mdp3Stats::bad_packets`] changed.
    pub fn decode_packet(
        &mut self,
        payload: &[u8],
        ts_recv_ns: u64,
        mut on_event: impl FnMut(&MessageInfo, &Event),
    ) -> Result<PacketOutcome, DecodeError> {
        let header = match packet_header(payload) {
            Ok(h) => h,
            Err(e) => {
                self.stats.bad_packets += 1;
                return Err(e);
            }
        };
        let Mdp3Decoder { packets, rpt_seq, stats, events } = self;
        // Decode the whole packet into the buffer; deliver nothing yet.
        events.clear();
        let messages = match walk_packet(payload, header, ts_recv_ns, &mut |info, ev| events.push((*info, *ev))) {
            Ok(n) => n,
            Err(e) => {
                stats.bad_packets += 1;
                return Err(e);
            }
        };
        let Some(gap) = observe(packets, stats, header.msg_seq_num) else {
            return Ok(PacketOutcome { header, gap: None, stale: true, messages: 0 });
        };
        count_templates(stats, payload);
        let mut next_book = 0u16; // BookEntry::index of the packet's next book entry, stale ones counted
        for (info, ev) in events.iter() {
            deliver(rpt_seq, stats, &mut next_book, info, ev, &mut on_event);
        }
        Ok(PacketOutcome { header, gap, stale: false, messages })
    }
}

impl Mdp3Decoder {
    /// [`Mdp3Decoder::decode_packet`] for a price-level feed handler: the same validation, sequencing and
    /// counters, and the same events in the same order, of which only [`Event::Book`] and [`Event::RptSeqGap`]
    /// reach `sink`.
    ///
    /// A packet whose messages are all of the templates a book feed carries (12, 30, 32, 35, 37, 42) takes a
    /// lean path ([`Mdp3Stats::book_path_packets`]): it is checked whole first without building any event (the
    /// same checks as `decode_packet`'s, on the same field decoders), then decoded once, straight into `sink`.
    /// Any other packet, and one that fails those checks, goes through `decode_packet`, which names the error.
    ///
    /// # Errors
    /// As [`Mdp3Decoder::decode_packet`].
    pub fn decode_book_packet(
        &mut self,
        payload: &[u8],
        ts_recv_ns: u64,
        sink: &mut impl BookSink,
    ) -> Result<PacketOutcome, DecodeError> {
        let (Some(header), true) = (payload.first_chunk::<PACKET_HEADER_BYTES>(), book_path_valid(payload)) else {
            return self.decode_book_packet_full(payload, ts_recv_ns, sink);
        };
        let header = PacketHeader { msg_seq_num: le_u32(header, 0), sending_time_ns: le_u64(header, 4) };
        let Mdp3Decoder { packets, rpt_seq, stats, .. } = self;
        stats.book_path_packets += 1;
        let Some(gap) = observe(packets, stats, header.msg_seq_num) else {
            return Ok(PacketOutcome { header, gap: None, stale: true, messages: 0 });
        };
        let mut info = MessageInfo {
            msg_seq_num: header.msg_seq_num,
            sending_time_ns: header.sending_time_ns,
            ts_recv_ns,
            message: 0,
            template_id: 0,
            transact_time_ns: 0,
            match_event_indicator: 0,
        };
        let mut books = 0u16; // book entries so far in the packet: BookEntry::index
        let mut pos = PACKET_HEADER_BYTES;
        // book_path_valid checked every message: each has its layout and its entries decode
        while let Some(m) = payload.get(pos..).and_then(book_layout) {
            pos += m.msg_size;
            info.message = info.message.saturating_add(1);
            info.template_id = m.template_id;
            stats.messages += 1;
            stats.templates[usize::from(m.template_id) % TEMPLATE_COUNTERS] += 1;
            stats.order_id_entries += u64::from(m.order_entries);
            if m.count == 0 {
                continue; // 12, 30, or no entries: nothing for a book
            }
            let Some(root) = m.root.first_chunk::<INCREMENTAL_ROOT_BYTES_USIZE>() else { continue };
            info.transact_time_ns = u64::from_le_bytes(fixed(root, 0));
            info.match_event_indicator = root[8];
            // One loop per template, so the template is matched once a message, not once an entry.
            let mut sequenced = |security_id: i32, got: u32, books: u16| {
                if let Sequenced::Gap { expected } = sequence(rpt_seq, stats, security_id, got) {
                    sink.rpt_seq_gap(&info, security_id, expected, got, books);
                }
            };
            match m.template_id {
                32 => {
                    for i in 0..m.count {
                        let Some(Ok(e)) = m.entry(i).map(|f| book32_entry(f, i + 1 == m.count, books)) else {
                            continue;
                        };
                        books = books.saturating_add(1);
                        stats.book_actions[e.action as usize] += 1;
                        stats.book_entry_types[e.entry_type as usize] += 1;
                        match sequence(rpt_seq, stats, e.security_id, e.rpt_seq) {
                            Sequenced::Stale => continue,
                            Sequenced::Gap { expected } => {
                                sink.rpt_seq_gap(&info, e.security_id, expected, e.rpt_seq, e.index)
                            }
                            Sequenced::InOrder => {}
                        }
                        sink.book(&info, &e);
                    }
                }
                35 => {
                    for i in 0..m.count {
                        if let Some(Ok(e)) =
                            m.entry_bytes(i).and_then(|b| Some(statistics35_entry(b.first_chunk()?, b)))
                        {
                            sequenced(e.security_id, e.rpt_seq, books);
                        }
                    }
                }
                37 => {
                    for i in 0..m.count {
                        if let Some(Ok(e)) = m.entry(i).map(volume37_entry) {
                            sequenced(e.security_id, e.rpt_seq, books);
                        }
                    }
                }
                _ => {
                    for i in 0..m.count {
                        if let Some(Ok(e)) = m.entry(i).map(trade42_entry) {
                            sequenced(e.security_id, e.rpt_seq, books);
                        }
                    }
                }
            }
        }
        Ok(PacketOutcome { header, gap, stale: false, messages: info.message })
    }

    /// [`Mdp3Decoder::decode_book_packet`] of a packet off the lean path, through `decode_packet` (kept out of
    /// line: the lean path's code stays small).
    #[cold]
    #[inline(never)]
    fn decode_book_packet_full(
        &mut self,
        payload: &[u8],
        ts_recv_ns: u64,
        sink: &mut impl BookSink,
    ) -> Result<PacketOutcome, DecodeError> {
        self.decode_packet(payload, ts_recv_ns, |info, ev| match *ev {
            Event::Book(ref e) => sink.book(info, e),
            Event::RptSeqGap { security_id, expected, got, book_index } => {
                sink.rpt_seq_gap(info, security_id, expected, got, book_index)
            }
            _ => {}
        })
    }
}

/// What [`Mdp3Decoder::decode_book_packet`] hands on: the two events a price-level feed handler turns into
/// records.
pub trait BookSink {
    /// A MDIncrementalRefreshBook32 entry ([`Event::Book`]), in sequence.
    fn book(&mut self, info: &MessageInfo, entry: &BookEntry);
    /// An `RptSeq` jump ([`Event::RptSeqGap`]), before the entry that showed it.
    fn rpt_seq_gap(&mut self, info: &MessageInfo, security_id: i32, expected: u32, got: u32, book_index: u16);
}

/// Takes a valid packet's `MsgSeqNum` (counters): `None` when it is stale, else its gap, if any.
fn observe(packets: &mut SeqTracker, stats: &mut Mdp3Stats, msg_seq_num: u32) -> Option<Option<(u32, u32)>> {
    let gap = match packets.observe(msg_seq_num) {
        SeqCheck::Stale => {
            stats.stale_packets += 1;
            return None;
        }
        SeqCheck::InOrder => None,
        SeqCheck::Gap { expected } => {
            stats.packet_gaps += 1;
            stats.packets_missed += u64::from(msg_seq_num.wrapping_sub(expected));
            Some((expected, msg_seq_num))
        }
    };
    stats.packets += 1;
    Some(gap)
}

/// Delivers one event of a valid packet after the instrument-level checks (module docs, "Sequencing"), with
/// its counters. `next_book`: the [`BookEntry::index`] the packet's next book entry takes (an
/// [`Event::RptSeqGap`] before a non-book entry names it).
#[inline(always)]
fn deliver(
    rpt_seq: &mut RptSeqTable,
    stats: &mut Mdp3Stats,
    next_book: &mut u16,
    info: &MessageInfo,
    ev: &Event,
    on_event: &mut impl FnMut(&MessageInfo, &Event),
) {
    let book_index = *next_book;
    let sequenced = match ev {
        Event::Book(e) => {
            *next_book = e.index.saturating_add(1);
            stats.book_actions[e.action as usize] += 1;
            stats.book_entry_types[e.entry_type as usize] += 1;
            Some((e.security_id, e.rpt_seq))
        }
        Event::OrderIdEntries { count } => {
            stats.order_id_entries += u64::from(*count);
            None
        }
        Event::Unknown { .. } => {
            stats.unknown_templates += 1;
            None
        }
        Event::ChannelReset { .. } => {
            rpt_seq.clear();
            None
        }
        ev => rpt_seq_of(ev),
    };
    if let Some((security_id, got)) = sequenced {
        match sequence(rpt_seq, stats, security_id, got) {
            Sequenced::Stale => return,
            Sequenced::Gap { expected } => {
                on_event(info, &Event::RptSeqGap { security_id, expected, got, book_index });
            }
            Sequenced::InOrder => {}
        }
    }
    on_event(info, ev);
}

/// What [`sequence`] found of an entry's `RptSeq`.
enum Sequenced {
    /// The first of its security, or the one due.
    InOrder,
    /// A jump: `expected` was due (the entry is delivered after the gap).
    Gap { expected: u32 },
    /// At or below the last one taken: not delivered.
    Stale,
}

/// Takes `got` as `security_id`'s `RptSeq` (module docs, "Sequencing"), with its counters.
#[inline(always)]
fn sequence(rpt_seq: &mut RptSeqTable, stats: &mut Mdp3Stats, security_id: i32, got: u32) -> Sequenced {
    stats.rpt_seq_entries += 1;
    let Ok(last) = rpt_seq.take(security_id, got) else {
        stats.rpt_seq_stale += 1;
        return Sequenced::Stale;
    };
    match last.filter(|&last| got != last.wrapping_add(1)) {
        Some(last) => {
            stats.rpt_seq_gaps += 1;
            Sequenced::Gap { expected: last.wrapping_add(1) }
        }
        None => Sequenced::InOrder,
    }
}

/// Counts the messages of an already validated packet by template.
fn count_templates(stats: &mut Mdp3Stats, payload: &[u8]) {
    let mut pos = PACKET_HEADER_BYTES;
    while let Some(h) = payload.get(pos..pos + MSG_SIZE_BYTES + SBE_HEADER_BYTES) {
        stats.messages += 1;
        if let Some(n) = stats.templates.get_mut(usize::from(le_u16(h, 4))) {
            *n += 1;
        }
        pos += usize::from(le_u16(h, 0)).max(1);
    }
}

fn rpt_seq_of(ev: &Event) -> Option<(i32, u32)> {
    match *ev {
        Event::Book(e) => Some((e.security_id, e.rpt_seq)),
        Event::Statistics(e) => Some((e.security_id, e.rpt_seq)),
        Event::Volume(e) => Some((e.security_id, e.rpt_seq)),
        Event::TradeSummary(e) => Some((e.security_id, e.rpt_seq)),
        Event::Other { security_id, rpt_seq } => Some((security_id, rpt_seq)),
        _ => None,
    }
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The error context of one message.
#[derive(Clone, Copy)]
struct Ctx {
    msg_seq_num: u32,
    message: u16,
    template_id: Option<u16>,
}

impl Ctx {
    fn err(self, field: &'static str, entry: u16, problem: Problem) -> DecodeError {
        DecodeError {
            msg_seq_num: Some(self.msg_seq_num),
            message: self.message,
            template_id: self.template_id,
            field,
            entry,
            problem,
        }
    }
}

/// One block (root or group entry) with its checked length.
#[derive(Clone, Copy)]
struct Block<'a> {
    b: &'a [u8],
    ctx: Ctx,
    entry: u16,
}

impl Block<'_> {
    // Callers check `b.len()` against the fields' end before reading (BlockLengthTooShort), so these index in
    // range; `get` keeps a miscounted offset from ever panicking.
    fn u8(&self, at: usize) -> u8 {
        self.b.get(at).copied().unwrap_or(0)
    }
    fn u16(&self, at: usize) -> u16 {
        self.b.get(at..at + 2).map_or(0, |s| le_u16(s, 0))
    }
    fn u32(&self, at: usize) -> u32 {
        self.b.get(at..at + 4).map_or(0, |s| le_u32(s, 0))
    }
    fn i32(&self, at: usize) -> i32 {
        self.u32(at) as i32
    }
    fn u64(&self, at: usize) -> u64 {
        self.b.get(at..at + 8).map_or(0, |s| le_u64(s, 0))
    }
    fn i64(&self, at: usize) -> i64 {
        self.b.get(at..at + 8).map_or(0, |s| le_u64(s, 0)) as i64
    }
    fn opt_i32(&self, at: usize) -> Option<i32> {
        Some(self.i32(at)).filter(|v| *v != INT32_NULL)
    }
    fn security_id(&self, at: usize, field: &'static str) -> Result<i32, DecodeError> {
        let v = self.i32(at);
        if v < 0 {
            return Err(self.ctx.err(field, self.entry, Problem::BadValue { value: v.into() }));
        }
        Ok(v)
    }
    fn price_e9(&self, at: usize, field: &'static str) -> Result<Option<i64>, DecodeError> {
        let m = self.i64(at);
        if m == PRICE_NULL {
            return Ok(None);
        }
        m.checked_mul(PRICE_E7_TO_E9)
            .map(Some)
            .ok_or_else(|| self.ctx.err(field, self.entry, Problem::PriceOverflow { mantissa: m }))
    }
}

/// The body of one message after its SBE header, read front to back.
struct Body<'a> {
    b: &'a [u8],
    pos: usize,
    ctx: Ctx,
}

impl<'a> Body<'a> {
    /// The root block, of `block_length` bytes, needing at least `min`.
    fn root(&mut self, block_length: u16, min: u16) -> Result<Block<'a>, DecodeError> {
        if block_length < min {
            return Err(self.ctx.err("blockLength", 0, Problem::BlockLengthTooShort { got: block_length, min }));
        }
        let len = usize::from(block_length);
        let b = self
            .b
            .get(..len)
            .ok_or_else(|| self.ctx.err("root block", 0, Problem::Truncated { need: len, have: self.b.len() }))?;
        self.pos = len;
        Ok(Block { b, ctx: self.ctx, entry: 0 })
    }

    /// The group at the read position ([`group_at`]), the position moved past it.
    #[inline]
    fn group(&mut self, name: &'static str, eight_byte: bool, min: u16) -> Result<Group<'a>, DecodeError> {
        let (entries, block_length, count, end) =
            group_at(self.b, self.pos, eight_byte, min).map_err(|problem| group_err(self.ctx, name, problem))?;
        self.pos = end;
        Ok(Group { entries, block_length, count, ctx: self.ctx })
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.b.len().saturating_sub(self.pos) {
            0 => Ok(()),
            left => Err(self.ctx.err("MsgSize", 0, Problem::TrailingBytes { left })),
        }
    }
}

/// The repeating group at `pos` of a message body (FIX SBE 1.0, "Repeating groups"): its dimensions
/// (`groupSize`, 3 bytes, or `groupSize8Byte`, 8, by `eight_byte`) with a `blockLength` of at least `min`, and its
/// entries, which must end inside the body. Returns (the entries, `blockLength`, `numInGroup`, the position after
/// the group). Errors: [`Problem::Truncated`] (the dimensions or the entries), [`Problem::BlockLengthTooShort`].
#[inline(always)]
fn group_at(body: &[u8], pos: usize, eight_byte: bool, min: u16) -> Result<(&[u8], usize, u8, usize), Problem> {
    let dim = if eight_byte { GROUP_SIZE_8BYTE_BYTES } else { GROUP_SIZE_BYTES };
    let rest = body.get(pos..).unwrap_or_default();
    let (Some(head), Some(&count)) = (rest.first_chunk::<2>(), rest.get(dim - 1)) else {
        return Err(Problem::Truncated { need: dim, have: rest.len() });
    };
    let block_length = u16::from_le_bytes(*head);
    if block_length < min {
        return Err(Problem::BlockLengthTooShort { got: block_length, min });
    }
    let bytes = usize::from(block_length) * usize::from(count);
    let Some(entries) = rest.get(dim..dim + bytes) else {
        return Err(Problem::Truncated { need: dim + bytes, have: rest.len() });
    };
    Ok((entries, usize::from(block_length), count, pos + dim + bytes))
}

#[cold]
fn group_err(ctx: Ctx, name: &'static str, problem: Problem) -> DecodeError {
    ctx.err(name, 0, problem)
}

struct Group<'a> {
    entries: &'a [u8],
    block_length: usize,
    count: u8,
    ctx: Ctx,
}

impl<'a> Group<'a> {
    /// The error of entry `i` (0-based; the error names it 1-based).
    #[cold]
    fn err(&self, i: u8, field: &'static str, problem: Problem) -> DecodeError {
        self.ctx.err(field, u16::from(i) + 1, problem)
    }

    fn entry(&self, i: u8) -> Block<'a> {
        let at = usize::from(i) * self.block_length;
        Block { b: &self.entries[at..at + self.block_length], ctx: self.ctx, entry: u16::from(i) + 1 }
    }
}

/// Walks every message of a packet, calling `sink` per event; returns the message count.
fn walk_packet<F: FnMut(&MessageInfo, &Event)>(
    payload: &[u8],
    header: PacketHeader,
    ts_recv_ns: u64,
    sink: &mut F,
) -> Result<u16, DecodeError> {
    let mut pos = PACKET_HEADER_BYTES;
    let mut message = 0u16;
    let mut books = 0u16; // book entries so far in the packet: BookEntry::index
    while pos < payload.len() {
        message = message.saturating_add(1);
        let mut ctx = Ctx { msg_seq_num: header.msg_seq_num, message, template_id: None };
        let rest = &payload[pos..];
        if rest.len() < MSG_SIZE_BYTES + SBE_HEADER_BYTES {
            return Err(ctx.err(
                "MsgSize/SBE header",
                0,
                Problem::Truncated { need: MSG_SIZE_BYTES + SBE_HEADER_BYTES, have: rest.len() },
            ));
        }
        let msg_size = le_u16(rest, 0);
        let template_id = le_u16(rest, 4);
        ctx.template_id = Some(template_id);
        if usize::from(msg_size) < MSG_SIZE_BYTES + SBE_HEADER_BYTES {
            return Err(ctx.err("MsgSize", 0, Problem::MsgSizeTooSmall { got: msg_size }));
        }
        if usize::from(msg_size) > rest.len() {
            return Err(ctx.err("MsgSize", 0, Problem::Truncated { need: msg_size.into(), have: rest.len() }));
        }
        let schema_id = le_u16(rest, 6);
        if schema_id != SCHEMA_ID {
            return Err(ctx.err("schemaId", 0, Problem::SchemaId { got: schema_id }));
        }
        let (block_length, version) = (le_u16(rest, 2), le_u16(rest, 8));
        let body = Body { b: &rest[MSG_SIZE_BYTES + SBE_HEADER_BYTES..usize::from(msg_size)], pos: 0, ctx };
        let info = MessageInfo {
            msg_seq_num: header.msg_seq_num,
            sending_time_ns: header.sending_time_ns,
            ts_recv_ns,
            message,
            template_id,
            transact_time_ns: 0,
            match_event_indicator: 0,
        };
        decode_message(body, block_length, version, info, msg_size, &mut books, sink)?;
        pos += usize::from(msg_size);
    }
    Ok(message)
}

/// Reads `N` bytes at `at` of a fixed-size block (offsets are constants at every call, so no bounds check is
/// left after inlining).
#[inline(always)]
fn fixed<const N: usize, const W: usize>(f: &[u8; N], at: usize) -> [u8; W] {
    let mut w = [0u8; W];
    w.copy_from_slice(&f[at..at + W]);
    w
}

/// `MDEntryPx` (`PRICENULL` mantissa, exponent -7) in 1e-9 units; `None` when null. Errors: `field` and
/// [`Problem::PriceOverflow`].
#[inline(always)]
fn price_e9_of(m: i64, field: &'static str) -> Result<Option<i64>, (&'static str, Problem)> {
    if m == PRICE_NULL {
        return Ok(None);
    }
    m.checked_mul(PRICE_E7_TO_E9).map(Some).ok_or((field, Problem::PriceOverflow { mantissa: m }))
}

/// A `SecurityID`, refused when negative.
#[inline(always)]
fn security_id_of(v: i32, field: &'static str) -> Result<i32, (&'static str, Problem)> {
    if v < 0 {
        return Err((field, Problem::BadValue { value: v.into() }));
    }
    Ok(v)
}

/// An `MDUpdateAction`, refused outside the schema's enum.
#[inline(always)]
fn action_of(v: u8, field: &'static str) -> Result<UpdateAction, (&'static str, Problem)> {
    UpdateAction::from_u8(v).ok_or((field, Problem::BadValue { value: v.into() }))
}

#[inline(always)]
fn opt_i32(v: i32) -> Option<i32> {
    Some(v).filter(|v| *v != INT32_NULL)
}

/// One MDIncrementalRefreshBook32 `NoMDEntries` entry from its first 27 bytes (schema offsets: MDEntryPx 0,
/// MDEntrySize 8, SecurityID 12, RptSeq 16, NumberOfOrders 20, MDPriceLevel 24, MDUpdateAction 25,
/// MDEntryType 26). Errors: the field's name and what is wrong with it.
#[inline(always)]
fn book32_entry(f: &[u8; 27], last_in_message: bool, index: u16) -> Result<BookEntry, (&'static str, Problem)> {
    let price_e9 = price_e9_of(i64::from_le_bytes(fixed(f, 0)), "NoMDEntries.MDEntryPx")?;
    let security_id = security_id_of(i32::from_le_bytes(fixed(f, 12)), "NoMDEntries.SecurityID")?;
    Ok(BookEntry {
        price_e9,
        size: opt_i32(i32::from_le_bytes(fixed(f, 8))),
        security_id,
        rpt_seq: u32::from_le_bytes(fixed(f, 16)),
        orders: opt_i32(i32::from_le_bytes(fixed(f, 20))),
        price_level: f[24],
        action: action_of(f[25], "NoMDEntries.MDUpdateAction")?,
        entry_type: BookEntryType::from_u8(f[26])
            .ok_or(("NoMDEntries.MDEntryType", Problem::BadValue { value: f[26].into() }))?,
        last_in_message,
        index,
    })
}

/// One MDIncrementalRefreshSessionStatistics35 entry from its first 19 bytes, and `MDEntrySize` when the entry
/// has 23 or more (`e`: the whole entry). Errors as [`book32_entry`].
#[inline(always)]
fn statistics35_entry(f: &[u8; 19], e: &[u8]) -> Result<StatisticsEntry, (&'static str, Problem)> {
    Ok(StatisticsEntry {
        price_e9: price_e9_of(i64::from_le_bytes(fixed(f, 0)), "NoMDEntries.MDEntryPx")?.unwrap_or(PRICE_NULL),
        security_id: security_id_of(i32::from_le_bytes(fixed(f, 8)), "NoMDEntries.SecurityID")?,
        rpt_seq: u32::from_le_bytes(fixed(f, 12)),
        open_close_settl_flag: f[16],
        action: action_of(f[17], "NoMDEntries.MDUpdateAction")?,
        entry_type: f[18],
        size: e.get(19..23).and_then(|s| s.first_chunk::<4>()).and_then(|s| opt_i32(i32::from_le_bytes(*s))),
    })
}

/// One MDIncrementalRefreshVolume37 entry from its first 13 bytes. Errors as [`book32_entry`].
#[inline(always)]
fn volume37_entry(f: &[u8; 13]) -> Result<VolumeEntry, (&'static str, Problem)> {
    Ok(VolumeEntry {
        volume: i32::from_le_bytes(fixed(f, 0)),
        security_id: security_id_of(i32::from_le_bytes(fixed(f, 4)), "NoMDEntries.SecurityID")?,
        rpt_seq: u32::from_le_bytes(fixed(f, 8)),
        action: action_of(f[12], "NoMDEntries.MDUpdateAction")?,
    })
}

/// One MDIncrementalRefreshTradeSummary42 `NoMDEntries` entry from its first 26 bytes. Errors as
/// [`book32_entry`]; `AggressorSide` is checked first.
#[inline(always)]
fn trade42_entry(f: &[u8; 26]) -> Result<TradeEntry, (&'static str, Problem)> {
    let aggressor = f[24];
    if aggressor > 2 && aggressor != UINT8_NULL {
        return Err(("NoMDEntries.AggressorSide", Problem::BadValue { value: aggressor.into() }));
    }
    Ok(TradeEntry {
        price_e9: price_e9_of(i64::from_le_bytes(fixed(f, 0)), "NoMDEntries.MDEntryPx")?.unwrap_or(PRICE_NULL),
        size: i32::from_le_bytes(fixed(f, 8)),
        security_id: security_id_of(i32::from_le_bytes(fixed(f, 12)), "NoMDEntries.SecurityID")?,
        rpt_seq: u32::from_le_bytes(fixed(f, 16)),
        orders: opt_i32(i32::from_le_bytes(fixed(f, 20))),
        aggressor_side: aggressor,
        action: action_of(f[25], "NoMDEntries.MDUpdateAction")?,
    })
}

/// Group layout of the templates read for their `RptSeq` only: (min entry bytes, SecurityID, RptSeq offsets).
const fn rpt_seq_only_layout(template_id: u16) -> Option<(u16, usize, usize)> {
    match template_id {
        33 => Some((20, 12, 16)),
        34 => Some((32, 24, 28)),
        36 => Some((20, 12, 16)),
        _ => None,
    }
}

fn decode_message<F: FnMut(&MessageInfo, &Event)>(
    mut body: Body<'_>,
    block_length: u16,
    version: u16,
    mut info: MessageInfo,
    msg_size: u16,
    books: &mut u16,
    sink: &mut F,
) -> Result<(), DecodeError> {
    const ENTRIES: &str = "NoMDEntries";
    let template_id = info.template_id;
    let incremental = matches!(template_id, 4 | 32..=37 | 42);
    if incremental {
        let root = body.root(block_length, INCREMENTAL_ROOT_BYTES)?;
        info.transact_time_ns = root.i64(0) as u64;
        info.match_event_indicator = root.u8(8);
    }
    match template_id {
        4 => {
            let g = body.group(ENTRIES, false, 2)?;
            body.finish()?;
            for i in 0..g.count {
                sink(&info, &Event::ChannelReset { appl_id: g.entry(i).u16(0) as i16 });
            }
        }
        12 => {
            body.root(block_length, 0)?;
            body.finish()?;
            sink(&info, &Event::Heartbeat);
        }
        30 => {
            let r = body.root(block_length, STATUS30_ROOT_BYTES)?;
            body.finish()?;
            info.transact_time_ns = r.i64(0) as u64;
            info.match_event_indicator = r.u8(26);
            let mut security_group = [0u8; 6];
            security_group.copy_from_slice(&r.b[8..14]);
            let mut asset = [0u8; 6];
            asset.copy_from_slice(&r.b[14..20]);
            sink(
                &info,
                &Event::SecurityStatus(SecurityStatus {
                    security_group,
                    asset,
                    security_id: r.opt_i32(20),
                    trade_date: r.u16(24),
                    trading_status: r.u8(27),
                    halt_reason: r.u8(28),
                    trading_event: r.u8(29),
                }),
            );
        }
        32 => {
            let g = body.group(ENTRIES, false, BOOK32_ENTRY_BYTES)?;
            let orders =
                if version >= 7 { Some(body.group("NoOrderIDEntries", true, ORDER_ID32_BYTES)?) } else { None };
            body.finish()?;
            // Every entry is at least 27 bytes (`group` checked the block length): read at fixed offsets.
            for (i, chunk) in (0..g.count).zip(g.entries.chunks_exact(g.block_length)) {
                let Some(f) = chunk.first_chunk::<27>() else { break };
                let entry =
                    book32_entry(f, i + 1 == g.count, *books).map_err(|(field, problem)| g.err(i, field, problem))?;
                *books = books.saturating_add(1);
                sink(&info, &Event::Book(entry));
            }
            if let Some(o) = orders.filter(|o| o.count > 0) {
                sink(&info, &Event::OrderIdEntries { count: o.count });
            }
        }
        35 => {
            let g = body.group(ENTRIES, false, STATISTICS35_ENTRY_BYTES)?;
            body.finish()?;
            for (i, e) in (0..g.count).zip(g.entries.chunks_exact(g.block_length)) {
                let Some(f) = e.first_chunk::<19>() else { break };
                let entry = statistics35_entry(f, e).map_err(|(field, problem)| g.err(i, field, problem))?;
                sink(&info, &Event::Statistics(entry));
            }
        }
        37 => {
            let g = body.group(ENTRIES, false, VOLUME37_ENTRY_BYTES)?;
            body.finish()?;
            for (i, e) in (0..g.count).zip(g.entries.chunks_exact(g.block_length)) {
                let Some(f) = e.first_chunk::<13>() else { break };
                let entry = volume37_entry(f).map_err(|(field, problem)| g.err(i, field, problem))?;
                sink(&info, &Event::Volume(entry));
            }
        }
        42 => {
            let g = body.group(ENTRIES, false, TRADE42_ENTRY_BYTES)?;
            let orders = body.group("NoOrderIDEntries", true, ORDER_ID42_BYTES)?;
            body.finish()?;
            for (i, e) in (0..g.count).zip(g.entries.chunks_exact(g.block_length)) {
                let Some(f) = e.first_chunk::<26>() else { break };
                let entry = trade42_entry(f).map_err(|(field, problem)| g.err(i, field, problem))?;
                sink(&info, &Event::TradeSummary(entry));
            }
            if orders.count > 0 {
                sink(&info, &Event::OrderIdEntries { count: orders.count });
            }
        }
        27 | 29 | 41 => {
            let (min, tick_at, factor_at) = definition_layout(template_id).expect("27, 29, 41 have a layout");
            // The groups after the root end the message (MsgSize bounds it); none is read.
            let r = body.root(block_length, min)?;
            let security_id = r.security_id(55, "SecurityID")?;
            if security_id == INT32_NULL {
                return Err(r.ctx.err("SecurityID", 0, Problem::BadValue { value: security_id.into() }));
            }
            let factor = r.i64(factor_at);
            let display_factor_e9 = match factor.checked_mul(PRICE_E7_TO_E9) {
                Some(f) if f > 0 && factor != PRICE_NULL => f,
                _ => return Err(r.ctx.err("DisplayFactor", 0, Problem::BadValue { value: factor })),
            };
            let mut symbol_bytes = [0u8; 20];
            symbol_bytes.copy_from_slice(&r.b[35..55]);
            info.transact_time_ns = r.u64(6);
            info.match_event_indicator = r.u8(0);
            sink(
                &info,
                &Event::Definition(InstrumentDefinition {
                    template_id,
                    tot_num_reports: Some(r.u32(1)).filter(|n| *n != u32::MAX),
                    update_action: r.u8(5),
                    last_update_time_ns: r.u64(6),
                    symbol_bytes,
                    security_id,
                    min_price_increment_e9: r.price_e9(tick_at, "MinPriceIncrement")?,
                    display_factor_e9,
                }),
            );
        }
        38 => {
            let r = body.root(block_length, SNAPSHOT_ROOT_BYTES)?;
            let g = body.group(ENTRIES, false, SNAPSHOT_ENTRY_BYTES)?;
            body.finish()?;
            let security_id = r.security_id(8, "SecurityID")?;
            let snapshot = SnapshotRefresh {
                last_msg_seq_num_processed: r.u32(0),
                tot_num_reports: r.u32(4),
                security_id,
                rpt_seq: r.u32(12),
                transact_time_ns: r.u64(16),
                last_update_time_ns: r.u64(24),
                trade_date: r.u16(32),
                trading_status: r.u8(34),
                high_limit_price_e9: r.price_e9(35, "HighLimitPrice")?,
                low_limit_price_e9: r.price_e9(43, "LowLimitPrice")?,
                max_price_variation_e9: r.price_e9(51, "MaxPriceVariation")?,
                entries: g.count,
            };
            info.transact_time_ns = snapshot.transact_time_ns;
            sink(&info, &Event::Snapshot(snapshot));
            let last_book = (0..g.count).rev().find(|&i| snapshot_book_type(g.entry(i).u8(21)).is_some());
            for i in 0..g.count {
                let e = g.entry(i);
                let entry_type = e.u8(21);
                if !snapshot_entry_type_valid(entry_type) {
                    return Err(info_err(&e, "NoMDEntries.MDEntryType", entry_type));
                }
                let book = snapshot_book_type(entry_type);
                let level = e.u8(16) as i8;
                let price_level = Some(level).filter(|l| *l != INT8_NULL);
                if book.is_some() && price_level.is_none_or(|l| l < 1) {
                    return Err(e.ctx.err(
                        "NoMDEntries.MDPriceLevel",
                        e.entry,
                        Problem::BadValue { value: level.into() },
                    ));
                }
                let entry = SnapshotEntry {
                    security_id,
                    price_e9: e.price_e9(0, "NoMDEntries.MDEntryPx")?,
                    size: e.opt_i32(8),
                    orders: e.opt_i32(12),
                    price_level,
                    trading_reference_date: e.u16(17),
                    open_close_settl_flag: e.u8(19),
                    settl_price_type: e.u8(20),
                    entry_type,
                    book,
                    last_book_entry: last_book == Some(i),
                };
                sink(&info, &Event::SnapshotEntry(entry));
            }
        }
        t => match rpt_seq_only_layout(t) {
            Some((min, sec_at, rpt_at)) => {
                // Later groups of these templates (none in v8) end the message; MsgSize bounds it.
                let g = body.group(ENTRIES, false, min)?;
                for i in 0..g.count {
                    let e = g.entry(i);
                    let security_id = e.security_id(sec_at, "NoMDEntries.SecurityID")?;
                    sink(&info, &Event::Other { security_id, rpt_seq: e.u32(rpt_at) });
                }
            }
            None => sink(&info, &Event::Unknown { template_id: t, msg_size }),
        },
    }
    Ok(())
}

// The least blockLength decode_message takes of each root block and group entry it reads (the end of the last
// field it reads; the module docs' templates table), shared with the book path's layout check.
const STATUS30_ROOT_BYTES: u16 = 30;
const BOOK32_ENTRY_BYTES: u16 = 27;
const ORDER_ID32_BYTES: u16 = 22;
const STATISTICS35_ENTRY_BYTES: u16 = 19;
const VOLUME37_ENTRY_BYTES: u16 = 13;
const TRADE42_ENTRY_BYTES: u16 = 26;
const ORDER_ID42_BYTES: u16 = 12;

/// [`INCREMENTAL_ROOT_BYTES`] as a length.
const INCREMENTAL_ROOT_BYTES_USIZE: usize = INCREMENTAL_ROOT_BYTES as usize;

/// One message on the book path ([`Mdp3Decoder::decode_book_packet`]), its layout checked as
/// [`decode_message`] checks it.
#[derive(Clone, Copy)]
struct BookLayout<'a> {
    template_id: u16,
    /// `MsgSize`.
    msg_size: usize,
    /// The root block (`blockLength` bytes).
    root: &'a [u8],
    /// `NoMDEntries`' entries (none for 12 and 30).
    entries: &'a [u8],
    /// `NoMDEntries`' `blockLength` (1 for 12 and 30: never 0, it is a chunk size).
    entry_bytes: usize,
    /// `NoMDEntries`' `numInGroup`.
    count: u8,
    /// `NoOrderIDEntries`' `numInGroup` (32 from version 7, and 42).
    order_entries: u8,
}

impl<'a> BookLayout<'a> {
    /// Entry `i` of `NoMDEntries`, whole (`None` past the last). Indexed, not `chunks_exact`: that divides by the
    /// entry size, a division per message.
    #[inline(always)]
    fn entry_bytes(&self, i: u8) -> Option<&'a [u8]> {
        let at = usize::from(i) * self.entry_bytes;
        self.entries.get(at..at + self.entry_bytes)
    }

    /// The first `N` bytes of entry `i` (the fields read; [`book_layout`] checked the entry size against them).
    #[inline(always)]
    fn entry<const N: usize>(&self, i: u8) -> Option<&'a [u8; N]> {
        self.entry_bytes(i)?.first_chunk()
    }
}

/// The layout of the message at the start of `rest` when it is of a template the book path takes (12, 30, 32,
/// 35, 37, 42) and its header, root block and groups pass [`walk_packet`]'s and [`decode_message`]'s checks;
/// `None` otherwise (another template, or an error `decode_packet` will name).
#[inline(always)]
fn book_layout(rest: &[u8]) -> Option<BookLayout<'_>> {
    let h = rest.first_chunk::<{ MSG_SIZE_BYTES + SBE_HEADER_BYTES }>()?;
    let field = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    let (msg_size, block_length, template_id) = (usize::from(field(0)), field(2), field(4));
    if msg_size < h.len() || field(6) != SCHEMA_ID {
        return None;
    }
    // (root block, NoMDEntries entry, NoOrderIDEntries entry): the least blockLength of each decode_message takes
    let (root_min, entry_min, orders_min) = match template_id {
        12 => (0, None, None),
        30 => (STATUS30_ROOT_BYTES, None, None),
        32 => (INCREMENTAL_ROOT_BYTES, Some(BOOK32_ENTRY_BYTES), (field(8) >= 7).then_some(ORDER_ID32_BYTES)),
        35 => (INCREMENTAL_ROOT_BYTES, Some(STATISTICS35_ENTRY_BYTES), None),
        37 => (INCREMENTAL_ROOT_BYTES, Some(VOLUME37_ENTRY_BYTES), None),
        42 => (INCREMENTAL_ROOT_BYTES, Some(TRADE42_ENTRY_BYTES), Some(ORDER_ID42_BYTES)),
        _ => return None,
    };
    let body = rest.get(h.len()..msg_size)?;
    let root = body.get(..usize::from(block_length)).filter(|_| block_length >= root_min)?;
    let mut m = BookLayout { template_id, msg_size, root, entries: &[], entry_bytes: 1, count: 0, order_entries: 0 };
    let mut pos = root.len();
    if let Some(min) = entry_min {
        (m.entries, m.entry_bytes, m.count, pos) = group_at(body, pos, false, min).ok()?;
    }
    if let Some(min) = orders_min {
        (_, _, m.order_entries, pos) = group_at(body, pos, true, min).ok()?;
    }
    (pos == body.len()).then_some(m)
}

/// Whether every message of `payload` (a packet of at least its header) has a [`book_layout`] and every entry
/// of it decodes (the field decoders [`decode_message`] uses: prices, `SecurityID`s, enums).
#[inline(never)]
fn book_path_valid(payload: &[u8]) -> bool {
    let mut pos = PACKET_HEADER_BYTES;
    while pos < payload.len() {
        let Some(m) = book_layout(&payload[pos..]) else { return false };
        pos += m.msg_size;
        let mut entries = 0..m.count;
        let valid = match m.template_id {
            32 => entries.all(|i| m.entry(i).is_some_and(|f| book32_entry(f, false, 0).is_ok())),
            35 => entries.all(|i| {
                m.entry_bytes(i).and_then(|e| Some(statistics35_entry(e.first_chunk()?, e).is_ok())) == Some(true)
            }),
            37 => entries.all(|i| m.entry(i).is_some_and(|f| volume37_entry(f).is_ok())),
            42 => entries.all(|i| m.entry(i).is_some_and(|f| trade42_entry(f).is_ok())),
            _ => true,
        };
        if !valid {
            return false;
        }
    }
    payload.len() >= PACKET_HEADER_BYTES
}

fn info_err(e: &Block<'_>, field: &'static str, value: u8) -> DecodeError {
    e.ctx.err(field, e.entry, Problem::BadValue { value: value.into() })
}

/// The level record of a template 32 entry (mapping in `mdfan_wire::record`, "Price-level (MBP) records"):
/// a `BookReset` entry becomes `Clear`. `seq` and `ts_send_ticks` are left 0 for the publisher.
pub fn book_record(info: &MessageInfo, e: &BookEntry) -> BookUpdate {
    book_record_at(info, e, 0)
}

/// [`book_record`] with `index` (the entry's index within its packet) in the venue position's low bits.
#[inline]
pub(crate) fn book_record_at(info: &MessageInfo, e: &BookEntry, index: u64) -> BookUpdate {
    let (side, implied) = match e.entry_type {
        BookEntryType::Bid => (Side::Bid, false),
        BookEntryType::Offer => (Side::Ask, false),
        BookEntryType::ImpliedBid => (Side::Bid, true),
        BookEntryType::ImpliedOffer => (Side::Ask, true),
        BookEntryType::BookReset => (Side::None, false),
    };
    let kind = match (e.entry_type, e.action) {
        (BookEntryType::BookReset, _) => Kind::Clear,
        (_, UpdateAction::New) => Kind::LevelNew,
        (_, UpdateAction::Change | UpdateAction::Overlay) => Kind::LevelChange,
        (_, UpdateAction::Delete) => Kind::LevelDelete,
        (_, UpdateAction::DeleteThru) => Kind::LevelDeleteThru,
        (_, UpdateAction::DeleteFrom) => Kind::LevelDeleteFrom,
    };
    let mut f = flags::MBP;
    if implied {
        f |= flags::IMPLIED;
    }
    if e.last_in_message && info.match_event_indicator & END_OF_EVENT != 0 {
        f |= flags::LAST;
    }
    BookUpdate {
        ts_event_ns: info.transact_time_ns,
        ts_recv_ns: info.ts_recv_ns,
        price_e9: e.price_e9.unwrap_or(i64::MAX),
        order_id: e.orders.map_or(0, |n| n.max(0) as u64),
        instrument_id: e.security_id as u32,
        size: e.size.map_or(0, |s| s.max(0) as u32),
        venue_pos: venue_position(u64::from(info.msg_seq_num), 0) | index,
        level: if kind == Kind::Clear { 0 } else { e.price_level },
        side: side as u8,
        flags: f,
        ..BookUpdate::control(kind)
    }
}

/// The [`Kind::InstrumentStale`] record (about the price-level book) for an [`Event::RptSeqGap`]: `order_id` =
/// `RptSeq` expected, `size` = `RptSeq` received.
pub fn stale_record(info: &MessageInfo, security_id: i32, expected: u32, got: u32) -> BookUpdate {
    BookUpdate {
        ts_event_ns: info.transact_time_ns,
        ts_recv_ns: info.ts_recv_ns,
        order_id: u64::from(expected),
        size: got,
        venue_pos: venue_position(u64::from(info.msg_seq_num), 0),
        ..BookUpdate::stale(security_id as u32, StaleBook::PriceLevel)
    }
}

/// Decodes one packet of the market recovery (snapshot) feed received at `ts_recv_ns`, calling `on_event` for
/// each item in order (SnapshotFullRefresh38 as [`Event::Snapshot`] then its [`Event::SnapshotEntry`]s; any
/// other template as in [`Mdp3Decoder::decode_packet`], without `RptSeq` checks). Keeps no state: a snapshot
/// feed loops, and its `MsgSeqNum` is only the caller's concern. Allocates nothing.
///
/// # Errors
/// [`DecodeError`] naming the packet, message, template and field; the packet is validated whole first, so
/// nothing was delivered.
pub fn decode_snapshot_packet(
    payload: &[u8],
    ts_recv_ns: u64,
    mut on_event: impl FnMut(&MessageInfo, &Event),
) -> Result<PacketHeader, DecodeError> {
    let header = packet_header(payload)?;
    walk_packet(payload, header, ts_recv_ns, &mut |_, _| {})?;
    walk_packet(payload, header, ts_recv_ns, &mut |info, ev| on_event(info, ev))?;
    Ok(header)
}

/// Decodes one packet of an instrument definition feed received at `ts_recv_ns`, calling `on_definition` for
/// each definition in order (templates 27, 29, 41; any other template is skipped, as the snapshot feed's
/// messages are). Keeps no state: the definition feed loops. Allocates nothing.
///
/// # Errors
/// [`DecodeError`] naming the packet, message, template and field; the packet is validated whole first, so
/// nothing was delivered.
pub fn decode_definition_packet(
    payload: &[u8],
    ts_recv_ns: u64,
    mut on_definition: impl FnMut(&InstrumentDefinition),
) -> Result<PacketHeader, DecodeError> {
    let header = packet_header(payload)?;
    walk_packet(payload, header, ts_recv_ns, &mut |_, _| {})?;
    walk_packet(payload, header, ts_recv_ns, &mut |_, ev| {
        if let Event::Definition(d) = ev {
            on_definition(d);
        }
    })?;
    Ok(header)
}

/// The `SecurityID` offsets of a template: in its root block, or in each `NoMDEntries` entry (the group right
/// after the root block).
enum SecurityIdAt {
    Root(usize),
    Entries(usize),
}

const fn security_id_at(template_id: u16) -> Option<SecurityIdAt> {
    Some(match template_id {
        27 | 29 | 41 => SecurityIdAt::Root(55),
        30 => SecurityIdAt::Root(20),
        38 => SecurityIdAt::Root(8),
        32 | 33 | 36 | 42 => SecurityIdAt::Entries(12),
        34 => SecurityIdAt::Entries(24),
        35 => SecurityIdAt::Entries(8),
        37 => SecurityIdAt::Entries(4),
        _ => return None,
    })
}

/// Rewrites every `SecurityID` of an MDP 3.0 packet in place with `map` (the root's of templates 27, 29, 30,
/// 38 and 41, unless null; each `NoMDEntries` entry's of templates 32 to 37 and 42): for a simulator that plays
/// one capture as a second channel with other ids. Returns the ids rewritten.
///
/// # Errors
/// The packet as [`decode_snapshot_packet`] checks it (sizes, `blockLength`s, groups, values): nothing is
/// changed then.
pub fn map_security_ids(payload: &mut [u8], mut map: impl FnMut(i32) -> i32) -> Result<usize, DecodeError> {
    let header = packet_header(payload)?;
    walk_packet(payload, header, 0, &mut |_, _| {})?;
    let mut rewritten = 0;
    let mut pos = PACKET_HEADER_BYTES;
    while pos + MSG_SIZE_BYTES + SBE_HEADER_BYTES <= payload.len() {
        let msg_size = usize::from(le_u16(payload, pos));
        let (block_length, template_id) = (usize::from(le_u16(payload, pos + 2)), le_u16(payload, pos + 4));
        let root = pos + MSG_SIZE_BYTES + SBE_HEADER_BYTES;
        let mut rewrite = |payload: &mut [u8], at: usize| {
            let v = le_u32(payload, at) as i32;
            if v != INT32_NULL {
                payload[at..at + 4].copy_from_slice(&map(v).to_le_bytes());
                rewritten += 1;
            }
        };
        match security_id_at(template_id) {
            Some(SecurityIdAt::Root(at)) => rewrite(payload, root + at),
            Some(SecurityIdAt::Entries(at)) => {
                let group = root + block_length;
                let (entry_bytes, count) = (usize::from(le_u16(payload, group)), usize::from(payload[group + 2]));
                for i in 0..count {
                    rewrite(payload, group + GROUP_SIZE_BYTES + i * entry_bytes + at);
                }
            }
            None => {}
        }
        pos += msg_size;
    }
    Ok(rewritten)
}

/// The bytes [`write_definition_message`] appends (`MsgSize`): the v8 root block and four empty groups.
pub const DEFINITION_MESSAGE_BYTES: usize =
    MSG_SIZE_BYTES + SBE_HEADER_BYTES + DEFINITION_FUTURE_ROOT_BYTES as usize + 4 * GROUP_SIZE_BYTES;

/// Appends one MDInstrumentDefinitionFuture27 (schema v8 layout) to `out`, for a simulator's definition loop
/// and tests: `d`'s fields at their offsets (`template_id` is ignored: always 27), `SecurityIDSource` `8`,
/// `SecurityExchange` `XCME`, every other field null or blank, and the four groups (`NoEvents`,
/// `NoMDFeedTypes`, `NoInstAttrib`, `NoLotTypeRules`) empty. Prices are written as mantissas (1e-9 / 100).
pub fn write_definition_message(out: &mut Vec<u8>, d: &InstrumentDefinition) {
    let start = out.len();
    out.extend_from_slice(&(DEFINITION_MESSAGE_BYTES as u16).to_le_bytes());
    for v in [DEFINITION_FUTURE_ROOT_BYTES, DEFINITION_FUTURE_TEMPLATE_ID, SCHEMA_ID, SCHEMA_VERSION] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let root = out.len();
    out.resize(root + usize::from(DEFINITION_FUTURE_ROOT_BYTES), 0);
    let r = &mut out[root..];
    let put = |r: &mut [u8], at: usize, b: &[u8]| r[at..at + b.len()].copy_from_slice(b);
    put(r, 1, &d.tot_num_reports.unwrap_or(u32::MAX).to_le_bytes());
    r[5] = d.update_action;
    put(r, 6, &d.last_update_time_ns.to_le_bytes());
    r[14] = UINT8_NULL; // MDSecurityTradingStatus
    put(r, 19, b"XCME");
    put(r, 35, &d.symbol_bytes);
    put(r, 55, &d.security_id.to_le_bytes());
    put(r, 91, &d.min_price_increment_e9.map_or(PRICE_NULL, |p| p / PRICE_E7_TO_E9).to_le_bytes());
    put(r, 99, &(d.display_factor_e9 / PRICE_E7_TO_E9).to_le_bytes());
    for at in [107, 108, 109] {
        r[at] = UINT8_NULL; // MainFraction, SubFraction, PriceDisplayFormat
    }
    for at in [140, 148, 165, 173, 181, 205] {
        put(r, at, &PRICE_NULL.to_le_bytes());
    }
    for at in [157, 161, 189, 195, 199] {
        put(r, at, &INT32_NULL.to_le_bytes());
    }
    put(r, 193, &LOCAL_MKT_DATE_NULL.to_le_bytes());
    put(r, 214, &LOCAL_MKT_DATE_NULL.to_le_bytes());
    r[203] = INT8_NULL as u8;
    r[204] = INT8_NULL as u8;
    for block_length in [9u16, 4, 4, 5] {
        out.extend_from_slice(&block_length.to_le_bytes());
        out.push(0);
    }
    debug_assert_eq!(out.len() - start, DEFINITION_MESSAGE_BYTES);
}

/// The [`Kind::Clear`] that starts an instrument's recovery from a snapshot: `instrument_id` = `SecurityID`,
/// venue seq = `LastMsgSeqNumProcessed`, `order_id` = the snapshot's `RptSeq`, `ts_event_ns` =
/// `TransactTime`, flags [`flags::MBP`] | [`flags::SNAPSHOT`]. It empties the book and ends its stale mark.
pub fn snapshot_clear_record(info: &MessageInfo, s: &SnapshotRefresh) -> BookUpdate {
    BookUpdate {
        ts_event_ns: s.transact_time_ns,
        ts_recv_ns: info.ts_recv_ns,
        order_id: u64::from(s.rpt_seq),
        instrument_id: s.security_id as u32,
        venue_pos: venue_position(u64::from(s.last_msg_seq_num_processed), 0),
        flags: flags::MBP | flags::SNAPSHOT,
        ..BookUpdate::control(Kind::Clear)
    }
}

/// The [`Kind::LevelNew`] of a snapshot book entry (`None` for a statistics entry): fields as [`book_record`]
/// (`MDEntryPx` -> `price_e9`, `MDEntrySize` -> `size`, `NumberOfOrders` -> `order_id`, `MDPriceLevel` ->
/// `level`, `IMPLIED` for `E`/`F`), venue seq = `LastMsgSeqNumProcessed`, flags [`flags::MBP`] |
/// [`flags::SNAPSHOT`], and [`flags::LAST`] on the message's last book entry. Applied in message order after
/// [`snapshot_clear_record`], the entries rebuild the book's positions exactly (each New lands below the ones
/// before it).
pub fn snapshot_level_record(info: &MessageInfo, s: &SnapshotRefresh, e: &SnapshotEntry) -> Option<BookUpdate> {
    let (side, implied) = match e.book? {
        BookEntryType::Bid => (Side::Bid, false),
        BookEntryType::Offer => (Side::Ask, false),
        BookEntryType::ImpliedBid => (Side::Bid, true),
        BookEntryType::ImpliedOffer => (Side::Ask, true),
        BookEntryType::BookReset => return None,
    };
    let mut f = flags::MBP | flags::SNAPSHOT;
    if implied {
        f |= flags::IMPLIED;
    }
    if e.last_book_entry {
        f |= flags::LAST;
    }
    Some(BookUpdate {
        ts_event_ns: s.transact_time_ns,
        ts_recv_ns: info.ts_recv_ns,
        price_e9: e.price_e9.unwrap_or(i64::MAX),
        order_id: e.orders.map_or(0, |n| n.max(0) as u64),
        instrument_id: e.security_id as u32,
        size: e.size.map_or(0, |v| v.max(0) as u32),
        venue_pos: venue_position(u64::from(s.last_msg_seq_num_processed), 0),
        level: e.price_level.map_or(0, |l| l.max(0) as u8),
        side: side as u8,
        flags: f,
        ..BookUpdate::control(Kind::LevelNew)
    })
}

/// Appends the binary packet header (`MsgSeqNum`, `SendingTime`) to `out`.
pub fn write_packet_header(out: &mut Vec<u8>, msg_seq_num: u32, sending_time_ns: u64) {
    out.extend_from_slice(&msg_seq_num.to_le_bytes());
    out.extend_from_slice(&sending_time_ns.to_le_bytes());
}

/// The bytes [`write_snapshot_message`] appends for `entries` entries (`MsgSize`).
pub const fn snapshot_message_bytes(entries: usize) -> usize {
    MSG_SIZE_BYTES
        + SBE_HEADER_BYTES
        + SNAPSHOT_ROOT_BYTES as usize
        + GROUP_SIZE_BYTES
        + entries * SNAPSHOT_ENTRY_BYTES as usize
}

/// Appends one SnapshotFullRefresh38 (schema v8 layout, module docs) to `out`: `MsgSize`, SBE header, `s`'s
/// root block (`s.entries` is ignored: the group holds `entries`), then `NoMDEntries` (at most 255 entries;
/// more are not written). Prices are written as mantissas (1e-9 / 100; `None` as null), so a price not a
/// multiple of 100 in 1e-9 units is rounded toward zero. `SnapshotEntry::security_id`, `book` and
/// `last_book_entry` are not on the wire (the decoder derives them).
pub fn write_snapshot_message(out: &mut Vec<u8>, s: &SnapshotRefresh, entries: &[SnapshotEntry]) {
    let entries = &entries[..entries.len().min(usize::from(u8::MAX))];
    let size = snapshot_message_bytes(entries.len());
    let mantissa = |p: Option<i64>| p.map_or(PRICE_NULL, |p| p / PRICE_E7_TO_E9);
    out.extend_from_slice(&(size as u16).to_le_bytes());
    for v in [SNAPSHOT_ROOT_BYTES, SNAPSHOT_TEMPLATE_ID, SCHEMA_ID, SCHEMA_VERSION] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&s.last_msg_seq_num_processed.to_le_bytes());
    out.extend_from_slice(&s.tot_num_reports.to_le_bytes());
    out.extend_from_slice(&s.security_id.to_le_bytes());
    out.extend_from_slice(&s.rpt_seq.to_le_bytes());
    out.extend_from_slice(&s.transact_time_ns.to_le_bytes());
    out.extend_from_slice(&s.last_update_time_ns.to_le_bytes());
    out.extend_from_slice(&s.trade_date.to_le_bytes());
    out.push(s.trading_status);
    for p in [s.high_limit_price_e9, s.low_limit_price_e9, s.max_price_variation_e9] {
        out.extend_from_slice(&mantissa(p).to_le_bytes());
    }
    out.extend_from_slice(&SNAPSHOT_ENTRY_BYTES.to_le_bytes());
    out.push(entries.len() as u8);
    for e in entries {
        out.extend_from_slice(&mantissa(e.price_e9).to_le_bytes());
        out.extend_from_slice(&e.size.unwrap_or(INT32_NULL).to_le_bytes());
        out.extend_from_slice(&e.orders.unwrap_or(INT32_NULL).to_le_bytes());
        out.push(e.price_level.unwrap_or(INT8_NULL) as u8);
        out.extend_from_slice(&e.trading_reference_date.to_le_bytes());
        out.push(e.open_close_settl_flag);
        out.push(e.settl_price_type);
        out.push(e.entry_type);
    }
}

#[cfg(test)]
mod rpt_seq_table_tests {
    use super::{RptSeqTable, RPT_SEQ_CACHE};
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The cached table answers exactly as a plain map, whichever securities share a cache slot.
        #[test]
        fn the_cached_table_answers_as_a_plain_map(
            ops in proptest::collection::vec((0u8..4, -2i32..6, 0u32..8), 1..200)
        ) {
            let mut table = RptSeqTable::with_capacity(4);
            let mut model: HashMap<i32, u32> = HashMap::new();
            for (op, k, v) in ops {
                // six securities over two cache slots (0, 256, 512 share one, 1, 257, 513 the other), and -1
                // and -2, never decoded (a negative SecurityID is refused) but asked of the public calls: -1 falls
                // on the slot of 255 and matches its empty mark
                let id = if k < 0 { k } else { (k % 2) + (k / 2) * RPT_SEQ_CACHE as i32 };
                match op {
                    0 | 1 => {
                        let want = match model.get(&id).copied() {
                            Some(last) if v <= last => Err(()),
                            last => {
                                model.insert(id, v);
                                Ok(last)
                            }
                        };
                        prop_assert_eq!(table.take(id, v), want);
                    }
                    2 => {
                        table.set(id, v);
                        model.insert(id, v);
                    }
                    _ => {
                        if v == 0 {
                            table.clear();
                            model.clear();
                        }
                    }
                }
                prop_assert_eq!(table.get(id), model.get(&id).copied());
            }
        }
    }
}
