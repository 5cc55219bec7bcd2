//! The normalised update record: [`BookUpdate`].
//!
//! One record is exactly one 64-byte cache line, `#[repr(C, align(64))]`, little-endian on the wire (every
//! platform mdfan runs on is little-endian; a big-endian build is refused at compile time). It is written by the
//! publisher straight into a subscriber's ring slot with one RDMA WRITE-with-immediate (or its shared-memory
//! equivalent) and read in place by the subscriber through [`bytemuck`], without a copy.
//!
//! | offset | size | field            | unit / meaning                                                      |
//! |-------:|-----:|------------------|---------------------------------------------------------------------|
//! |      0 |    8 | `seq`            | this subscriber stream's sequence, contiguous from 1                |
//! |      8 |    8 | `ts_event_ns`    | matching-engine time, ns since the UNIX epoch (DBN `ts_event`)      |
//! |     16 |    8 | `ts_recv_ns`     | capture time, ns since the UNIX epoch (DBN `ts_recv`)               |
//! |     24 |    8 | `venue_pos`      | the venue position ("Venue position", below): venue seq << 16 \| index |
//! |     32 |    8 | `price_e9`       | price in units of 1e-9 (DBN fixed point); `i64::MAX` = undefined    |
//! |     40 |    8 | `order_id`       | venue order id (DBN `order_id`); level kinds: the level's order count |
//! |     48 |    4 | `instrument_id`  | venue instrument id (DBN `instrument_id`; MDP 3.0 `SecurityID`)     |
//! |     52 |    4 | `size`           | quantity (DBN `size`); level kinds: the level's total quantity      |
//! |     56 |    4 | `ts_send_ticks`  | publisher TSC at post time, its low 32 bits (raw `quanta` counter, same-host only; read with wrapping subtraction) |
//! |     60 |    1 | `kind`           | [`Kind`]                                                            |
//! |     61 |    1 | `side`           | [`Side`] as ASCII: `B`, `A`, `N`                                    |
//! |     62 |    1 | `flags`          | DBN flags, passed through ([`flags::LAST`], [`flags::SNAPSHOT`] ...)|
//! |     63 |    1 | `level`          | level kinds: the 1-based price level (MDP 3.0 `MDPriceLevel`); `TradingStatus`: the state; else 0 |
//!
//! Sources: DBN `MboMsg` field definitions (Databento DBN docs, "MBO" schema; `dbn::MboMsg`).
//!
//! Layout history: until control protocol version 4, bytes 24..32 held `ts_send_ticks` (the whole TSC) and bytes
//! 56..60 `venue_seq` (the venue's sequence, low 32 bits). Version 4 gives those 12 bytes to the venue position (8)
//! and a 32-bit `ts_send_ticks` (4): a post-to-poll interval is read as `now - ts_send_ticks` modulo 2^32 ticks,
//! exact below 2^32 ticks (about 1.4 s at 3 GHz), which a record waiting in a ring longer than that folds.
//!
//! ## Venue position
//!
//! `venue_pos` is a key both publishers of a pair compute identically for the same venue event, totally
//! ordered within the record's channel: the venue's own sequence number in the high 48 bits
//! ([`BookUpdate::venue_seq`]; its low 48 bits, [`VENUE_SEQ_MAX`]) and the record's index among the records
//! that sequence number produced in the low 16 ([`BookUpdate::venue_index`]; [`venue_position`] builds it):
//!
//! | feed | venue seq (high 48 bits) | index (low 16 bits) |
//! |---|---|---|
//! | CME MDP 3.0 (live) | the channel id in its top 16 bits, the packet's `MsgSeqNum` (u32) below ([`mdp3_venue_position`]) | the book entry's index among the packet's book entries, counting those a publisher does not deliver (`RptSeq` already in its market recovery's snapshot); a stale mark inside a packet (an `RptSeq` jump, an instrument first seen after a loss) shares the index of the entry it precedes, so entries have the same positions whatever a publisher lost; stale marks of a loss: their index among them, at the first lost `MsgSeqNum` |
//! | MoldUDP64 / ITCH 5.0 (live) | the message's MoldUDP64 sequence number (u64) | the record's index within the message (stale marks of a hole: within its first message) |
//! | ITCH 5.0 file | the message's index in the file | the record's index within the message |
//! | DBN MBO file | the record's DBN `sequence` | the record's index among the consecutive records of that `sequence` |
//! | LOBSTER files | the message's line in the message file | the record's index within the message |
//!
//! A publisher may carry several MDP 3.0 channels (`[[feed.channels]]`, each its own `MsgSeqNum` sequence):
//! the channel id (the config's `id`, CME's channel number; 0 for a publisher's one unnamed channel) is the top
//! 16 bits of `venue_pos` ([`BookUpdate::venue_channel`]), so positions of two channels never compare equal and
//! each channel's are totally ordered; [`BookUpdate::msg_seq_num`] is the `MsgSeqNum` alone. The other feeds
//! have one channel, and their venue seqs stay below 2^32 (a MoldUDP64 session past 2^32 messages would reach
//! into those bits: [`BookUpdate::venue_channel`] is an MDP 3.0 notion).
//!
//! Records the publisher makes (snapshot records, feed status, heartbeats, end of stream) carry the position
//! their book had reached (snapshots), the last one the feed handed out (feed status) or 0; they are not venue
//! events. MDP 3.0 market recovery is the one exception to the order: its records (a `Clear` flagged
//! [`flags::SNAPSHOT`], then the levels) carry the snapshot's `LastMsgSeqNumProcessed`, which the snapshot feed
//! (its own socket) may deliver ahead of the incrementals around them; that book is then the one at that
//! `MsgSeqNum`, and its instrument's incrementals up to it are dropped by `RptSeq`.
//!
//! ## Price-level (MBP) records
//!
//! The level kinds ([`Kind::LevelNew`], [`Kind::LevelChange`], [`Kind::LevelDelete`], [`Kind::LevelDeleteThru`],
//! [`Kind::LevelDeleteFrom`]) carry one aggregated price level of a market-by-price book, as CME MDP 3.0 sends
//! them in `MDIncrementalRefreshBook32` (SBE schema 1 v8, group `NoMDEntries`). Same 64 bytes, the fields reused:
//!
//! | field           | MDP 3.0 source (template 32 entry)                    | meaning                                   |
//! |-----------------|-------------------------------------------------------|-------------------------------------------|
//! | `price_e9`      | `MDEntryPx` (mantissa x 1e-7) x 100, exact            | the level's price; `i64::MAX` when null   |
//! | `size`          | `MDEntrySize` (Int32NULL)                             | total quantity at the level; 0 when null  |
//! | `order_id`      | `NumberOfOrders` (Int32NULL)                          | orders at the level; 0 when null          |
//! | `level`         | `MDPriceLevel` (uInt8)                                | 1 = best                                  |
//! | `side`          | `MDEntryType` `0`/`E` -> `B`, `1`/`F` -> `A`          | bid or ask                                |
//! | `flags`         | [`flags::MBP`] always; [`flags::IMPLIED`] for `E`/`F`; [`flags::LAST`] on the last entry of a message with `MatchEventIndicator` bit 7 (EndOfEvent) | |
//! | `venue_pos`     | the packet's `MsgSeqNum`, the record's index in it   | "Venue position"                          |
//! | `ts_event_ns`   | `TransactTime`                                        | ns since the UNIX epoch                   |
//! | `ts_recv_ns`    | the capture (or socket) time of the packet            | ns since the UNIX epoch                   |
//!
//! [`Kind::InstrumentStale`] names an instrument whose book can no longer be trusted (a per-instrument
//! `RptSeq` gap); `venue_seq` is the packet that showed it, `order_id` the `RptSeq` expected and `size` the one
//! received (saturated to `u32`). Packets lost on both lines mark every security of the channel the same way,
//! flag [`flags::MAYBE_BAD_BOOK`] (`order_id` = the first lost `MsgSeqNum`, `size` = packets lost). It stays
//! stale until a `Clear` (a snapshot or book reset) rebuilds it. MDP 3.0's stale marks say
//! [`StaleBook::PriceLevel`] ("Stale marks", below).
//!
//! ## Nasdaq TotalView-ITCH 5.0 (`mdfan_feed::itch`)
//!
//! Order kinds as for DBN MBO: `instrument_id` = stock locate, `order_id` = order reference number, venue seq =
//! the message's position in its stream (file index, or MoldUDP64 sequence number), `ts_event_ns` =
//! US Eastern midnight of the session + the ITCH timestamp. An execution is a `Fill` (at the execution price for
//! `C`) followed by a `Cancel` of the executed shares. [`Kind::InstrumentStale`] marks a locate whose order
//! book lost an order (a reference the stream never added, more shares executed than rest, an add of a live
//! reference); there `order_id` is that order reference number and `size` 0. A MoldUDP64 hole given up marks
//! every locate seen so far, and a live message that does not decode its locate (or every locate seen):
//! `order_id` 0, venue seq the first lost (or the undecodable) message's sequence number. All say
//! [`StaleBook::Order`] ("Stale marks", below) and carry [`flags::LAST`], as the last record of their message.
//! The per-instrument status messages become [`Kind::TradingStatus`] records (below); the market-wide ones
//! (system event, MWCB decline level and status) and the others (IPO, LULD collar, NOII, RPII, DLCR, market
//! participant position) give no record: the decoder counts them.
//!
//! A relay (`mdfan-relay`) that missed records upstream (a gap in its upstream ring, a lost upstream session)
//! marks every instrument it knows: [`Kind::InstrumentStale`] with [`flags::MAYBE_BAD_BOOK`], the book kind its
//! feed builds, `order_id` and `size` 0. The upstream's snapshot then rebuilds each book with a `Clear`, which
//! ends the mark (for an order book as for a price-level one).
//!
//! ## Stale marks: order book or price-level book
//!
//! A [`Kind::InstrumentStale`] says which book it is about in `level` (byte 63, [`BookUpdate::stale_book`]):
//! [`StaleBook::Order`] (1) is an order-level feed's (ITCH: the instrument's order book is unsynced; no
//! price-level book exists for it), [`StaleBook::PriceLevel`] (2) a price-level feed's (MDP 3.0: the
//! instrument's price-level book is stale until a `Clear` flagged `MBP`; also what a price-level book's snapshot
//! carries for a stale book). `MbpBooks` applies only the price-level ones; flags say nothing about the book
//! (before protocol version 4 they did: `LAST` without `MBP` meant the order book).
//!
//! ## Trading status records ([`Kind::TradingStatus`])
//!
//! The state of one instrument's trading, from Nasdaq TotalView-ITCH 5.0 section 4.2.2 Stock Trading Action
//! (`H`), 4.2.3 Reg SHO Short Sale Price Test Restricted Indicator (`Y`) and 4.2.8 Operational Halt (`h`). Same
//! 64 bytes, the fields reused ([`BookUpdate::status`] decodes them):
//!
//! | field (offset) | meaning |
//! |---|---|
//! | `instrument_id` (48) | the instrument (ITCH stock locate) |
//! | `order_id` (40) | which status, as the ITCH message type: [`StatusKind`] `H` (72) trading state, `Y` (89) Reg SHO, `h` (104) operational halt |
//! | `level` (63) | the state, one ASCII byte: `H`: `H` halted, `P` paused, `Q` quotation only, `T` trading; `Y`: `0` no price test, `1` restriction in effect (intraday drop), `2` restriction remains in effect; `h`: `H` halted, `T` resumed |
//! | `size` (52..56) | the reason, 4 ASCII bytes in the venue's order (`u32::from_le_bytes` of them): `H`: the trading action reason (`T1  `, or 4 spaces); `h`: the market code (`Q` Nasdaq, `B` BX, `X` PSX) then 3 spaces; `Y`: 4 spaces |
//! | `price_e9` (32) | 0 |
//! | `side` (61) | `N` |
//! | `flags` (62) | [`flags::LAST`] |
//! | `venue_seq`, `ts_event_ns`, `ts_recv_ns` | as for the order kinds |
//!
//! Books ignore the kind; `crate::status::TradingStates` keeps the last state of each instrument.
//!
//! ## Feed status records ([`Kind::FeedStatus`])
//!
//! A live feed whose lines (A and B both) deliver no datagram for `lines.silent_after_ms` is *silent*: the
//! publisher writes one [`FeedState::Silent`] record, and one [`FeedState::Live`] record when a datagram comes
//! again. A silent feed is not an ended one (the stream goes on; heartbeats keep coming): books stand as the last
//! datagram left them, and whether the venue was idle or the feed was lost is for the strategy to judge (a lost
//! feed's hole shows as stale marks once it comes back). Same 64 bytes, the fields reused
//! ([`BookUpdate::feed_state`] decodes them):
//!
//! | field (offset) | meaning |
//! |---|---|
//! | `instrument_id` (48) | [`CHANNEL_INSTRUMENT_ID`]: about the whole channel (the publisher sends it to every subscriber) |
//! | `level` (63) | the state, one ASCII byte: `S` silent, `L` live again |
//! | `ts_event_ns` (8) | `CLOCK_REALTIME` of the last datagram before the silence (`S`), of the first after it (`L`); ns since the UNIX epoch |
//! | `ts_recv_ns` (16) | `CLOCK_REALTIME` when the publisher wrote the record (not a receive stamp: [`flags::BAD_TS_RECV`], so no wire-to-poll sample is taken of it) |
//! | `order_id` (40) | `S`: the bound, `lines.silent_after_ms`, in ns; `L`: how long the silence lasted, in ns |
//! | `size` (52..56) | silences so far on this feed, this one included |
//! | `venue_pos` (24) | the last venue position the channel delivered before the record (before any: the channel's id alone, [`BookUpdate::venue_channel`]): a publisher with several MDP 3.0 channels watches each for silence on its own |
//! | `side` (61), `flags` (62) | `N`; [`flags::LAST`] \| [`flags::BAD_TS_RECV`] |
//!
//! A snapshot carries the feed's last status record (flag [`flags::SNAPSHOT`] added): a subscriber that joins
//! during a silence learns of it. Books ignore the kind; `crate::status::FeedHealth` keeps the state.

use bytemuck::{Pod, Zeroable};

/// Size of one record on the wire and in a ring slot, in bytes.
pub const RECORD_SIZE_BYTES: usize = 64;

#[cfg(target_endian = "big")]
compile_error!("mdfan's wire format is little-endian; big-endian targets are not supported");

/// DBN record flags, passed through unchanged in [`BookUpdate::flags`] (DBN docs, "Flags").
pub mod flags {
    /// Last record of one venue event: the book is consistent only after a record carrying it.
    pub const LAST: u8 = 0x80;
    /// Top-of-book message (DBN `F_TOB`).
    pub const TOB: u8 = 0x40;
    /// Part of a snapshot (DBN `F_SNAPSHOT`), e.g. the start-of-day book replay.
    pub const SNAPSHOT: u8 = 0x20;
    /// Aggregated price level, not an individual order (DBN `F_MBP`).
    pub const MBP: u8 = 0x10;
    /// `ts_recv` is inaccurate (DBN `F_BAD_TS_RECV`).
    pub const BAD_TS_RECV: u8 = 0x08;
    /// The venue reported a gap or a book it could not keep (DBN `F_MAYBE_BAD_BOOK`).
    pub const MAYBE_BAD_BOOK: u8 = 0x04;
    /// mdfan's own (DBN leaves bit 0 unused): a level record of the implied book (MDP 3.0 `MDEntryType`
    /// `E` implied bid / `F` implied offer), kept apart from the outright book.
    pub const IMPLIED: u8 = 0x01;
}

/// What a record does. Stored as one byte at offset 60.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Add an order (DBN action `A`).
    Add = 1,
    /// Replace an order's price and size (DBN action `M`).
    Modify = 2,
    /// Remove `size` from an order; the order goes when it reaches 0 (DBN action `C`).
    Cancel = 3,
    /// A trade with an aggressor not in the book (DBN action `T`); does not change the book.
    Trade = 4,
    /// A fill of a resting order (DBN action `F`); does not change the book, a `C`/`M` follows.
    Fill = 5,
    /// Empty the instrument's book (DBN action `R`).
    Clear = 6,
    /// The records that follow, up to [`Kind::SnapshotEnd`], rebuild the book from empty.
    SnapshotBegin = 7,
    /// The snapshot is complete; `venue_pos` is the venue position it is consistent with.
    SnapshotEnd = 8,
    /// Liveness only: the feed is idle. Carries a seq so the subscriber can prove nothing was missed.
    Heartbeat = 9,
    /// The publisher has sent everything it will send on this stream; `size` holds why (the fabric's
    /// `CloseReason` as a number: 1 end of the feed, 3 publisher shutdown, 8 the feed failed).
    EndOfStream = 10,
    /// Insert a price level at `level` on `side`, shifting the deeper levels down one (the one pushed past the
    /// book's depth goes). MDP 3.0 `MDUpdateAction` 0 (New). Layout: module docs, "Price-level (MBP) records".
    LevelNew = 11,
    /// Replace the price level at `level` (price, size, order count). MDP 3.0 `MDUpdateAction` 1 (Change), and
    /// 5 (Overlay), which replaces the entry in place the same way.
    LevelChange = 12,
    /// Remove the price level at `level`, shifting the deeper levels up one. MDP 3.0 `MDUpdateAction` 2 (Delete).
    LevelDelete = 13,
    /// Remove every price level of `side`. MDP 3.0 `MDUpdateAction` 3 (DeleteThru).
    LevelDeleteThru = 14,
    /// Remove the price levels 1 through `level` of `side`, shifting the deeper ones up. MDP 3.0
    /// `MDUpdateAction` 4 (DeleteFrom).
    LevelDeleteFrom = 15,
    /// The instrument's book missed updates and is stale; `level` says which book ([`StaleBook`]): MDP 3.0, its
    /// price-level book (a per-instrument sequence gap: `order_id` = the sequence expected, `size` = the one
    /// received; or packets lost), until a `Clear` rebuilds it; ITCH, its order book (an order lost). Module
    /// docs, "Stale marks".
    InstrumentStale = 16,
    /// No book change (DBN action `N`): the venue's event carries only flags or other information, e.g. a
    /// record with `F_LAST` that closes an event. Books count it and move their venue seq, nothing else.
    NoAction = 17,
    /// An instrument's trading status changed (halted, paused, quotation only, trading; Reg SHO; operational
    /// halt): layout in the module docs, "Trading status records"; decoded by [`BookUpdate::status`]. No book
    /// changes.
    TradingStatus = 18,
    /// The live feed's lines went silent, or came back: layout in the module docs, "Feed status records";
    /// decoded by [`BookUpdate::feed_state`]. No book changes; every subscriber gets it, whatever its instrument
    /// filter (`instrument_id` is [`CHANNEL_INSTRUMENT_ID`]).
    FeedStatus = 19,
}

impl Kind {
    /// Decodes the byte at offset 60; `None` for a value no publisher writes.
    pub const fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Add,
            2 => Kind::Modify,
            3 => Kind::Cancel,
            4 => Kind::Trade,
            5 => Kind::Fill,
            6 => Kind::Clear,
            7 => Kind::SnapshotBegin,
            8 => Kind::SnapshotEnd,
            9 => Kind::Heartbeat,
            10 => Kind::EndOfStream,
            11 => Kind::LevelNew,
            12 => Kind::LevelChange,
            13 => Kind::LevelDelete,
            14 => Kind::LevelDeleteThru,
            15 => Kind::LevelDeleteFrom,
            16 => Kind::InstrumentStale,
            17 => Kind::NoAction,
            18 => Kind::TradingStatus,
            19 => Kind::FeedStatus,
            _ => return None,
        })
    }

    /// Whether this kind updates a price-level (MBP) book ([`Kind::LevelNew`] .. [`Kind::LevelDeleteFrom`]).
    pub const fn is_level(self) -> bool {
        matches!(
            self,
            Kind::LevelNew | Kind::LevelChange | Kind::LevelDelete | Kind::LevelDeleteThru | Kind::LevelDeleteFrom
        )
    }
}

/// Order side, stored as DBN's ASCII character at offset 61.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Bid (DBN `B`).
    Bid = b'B',
    /// Ask / offer (DBN `A`).
    Ask = b'A',
    /// No side (DBN `N`), e.g. a trade whose aggressor is unknown.
    None = b'N',
}

impl Side {
    /// Decodes DBN's side character; `None` for any other byte.
    pub const fn from_u8(v: u8) -> Option<Side> {
        match v {
            b'B' => Some(Side::Bid),
            b'A' => Some(Side::Ask),
            b'N' => Some(Side::None),
            _ => None,
        }
    }
}

/// Which status a [`Kind::TradingStatus`] record carries: the ITCH message type it came from, in `order_id`.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusKind {
    /// Stock Trading Action (ITCH 5.0 section 4.2.2, `H`): state `H` halted, `P` paused, `Q` quotation only,
    /// `T` trading; reason the trading action reason code.
    Trading = b'H',
    /// Reg SHO Short Sale Price Test Restricted Indicator (section 4.2.3, `Y`): state `0`, `1` or `2`.
    RegSho = b'Y',
    /// Operational Halt (section 4.2.8, `h`): state `H` halted or `T` resumed; reason the market code.
    OperationalHalt = b'h',
}

impl StatusKind {
    /// Decodes the ITCH message type byte; `None` for any other byte.
    pub const fn from_u8(v: u8) -> Option<StatusKind> {
        match v {
            b'H' => Some(StatusKind::Trading),
            b'Y' => Some(StatusKind::RegSho),
            b'h' => Some(StatusKind::OperationalHalt),
            _ => None,
        }
    }
}

/// The `instrument_id` of records about a whole channel rather than one instrument ([`Kind::FeedStatus`]):
/// `u32::MAX`, which no venue id mdfan reads reaches (ITCH stock locates are 16-bit, MDP 3.0 `SecurityID`s and
/// DBN ids stay below it). The publisher sends such records to every subscriber, whatever its filter.
pub const CHANNEL_INSTRUMENT_ID: u32 = u32::MAX;

/// The state a [`Kind::FeedStatus`] record carries, in `level` (module docs, "Feed status records").
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FeedState {
    /// No datagram on any line for `lines.silent_after_ms`.
    Silent = b'S',
    /// Datagrams again after a silence.
    Live = b'L',
}

impl FeedState {
    /// Decodes the `level` byte; `None` for any other byte.
    pub const fn from_u8(v: u8) -> Option<FeedState> {
        match v {
            b'S' => Some(FeedState::Silent),
            b'L' => Some(FeedState::Live),
            _ => None,
        }
    }
}

/// Bits of [`BookUpdate::venue_pos`] that hold the record's index within its venue event (module docs, "Venue
/// position").
pub const VENUE_INDEX_BITS: u32 = 16;

/// The largest venue sequence number a position holds: 2^48 - 1 (a sequence number past it keeps its low 48
/// bits).
pub const VENUE_SEQ_MAX: u64 = (1 << (64 - VENUE_INDEX_BITS)) - 1;

/// The venue position of the record `index` of the venue event `venue_seq` (module docs, "Venue position"):
/// `venue_seq`'s low 48 bits, then `index`.
#[inline]
pub const fn venue_position(venue_seq: u64, index: u16) -> u64 {
    (venue_seq & VENUE_SEQ_MAX) << VENUE_INDEX_BITS | index as u64
}

/// Bits of [`BookUpdate::venue_pos`] below an MDP 3.0 channel id (module docs, "Venue position"): 48.
pub const VENUE_CHANNEL_SHIFT: u32 = 48;

/// The venue position of record `index` of MDP 3.0 packet `msg_seq_num` on channel `channel` (module docs,
/// "Venue position"): `channel << 48 | msg_seq_num << 16 | index`.
#[inline]
pub const fn mdp3_venue_position(channel: u16, msg_seq_num: u32, index: u16) -> u64 {
    (channel as u64) << VENUE_CHANNEL_SHIFT | venue_position(msg_seq_num as u64, index)
}

/// Numbers the consecutive records of one venue seq 0, 1, 2, ... (their index in the venue event), for a source
/// whose records carry the venue's sequence number but not their index within its event (DBN MBO).
#[derive(Debug, Clone, Copy, Default)]
pub struct VenueRun {
    last: Option<u64>,
    next_index: u16,
}

impl VenueRun {
    /// The position of the next record, whose venue seq is `venue_seq`: index 0 after a record of another seq,
    /// else one more than the last (saturating at `u16::MAX`).
    #[inline]
    pub fn position(&mut self, venue_seq: u64) -> u64 {
        if self.last != Some(venue_seq) {
            self.last = Some(venue_seq);
            self.next_index = 0;
        }
        let index = self.next_index;
        self.next_index = index.saturating_add(1);
        venue_position(venue_seq, index)
    }
}

/// Which book a [`Kind::InstrumentStale`] is about, in its `level` byte (module docs, "Stale marks").
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StaleBook {
    /// The instrument's order book (an order-level feed: ITCH, DBN MBO).
    Order = 1,
    /// The instrument's price-level book (a price-level feed: MDP 3.0, LOBSTER).
    PriceLevel = 2,
}

impl StaleBook {
    /// Decodes a stale mark's `level` byte; `None` for a value no publisher writes.
    pub const fn from_u8(v: u8) -> Option<StaleBook> {
        match v {
            1 => Some(StaleBook::Order),
            2 => Some(StaleBook::PriceLevel),
            _ => None,
        }
    }
}

/// A [`Kind::TradingStatus`] record's content (module docs, "Trading status records").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    /// Which status.
    pub kind: StatusKind,
    /// The state, one ASCII byte (`b'T'` trading, ...).
    pub state: u8,
    /// The reason, 4 ASCII bytes as the venue sent them (space-padded).
    pub reason: [u8; 4],
}

/// One normalised order-book update: 64 bytes, align 64, no implicit padding (layout in the module docs).
///
/// `Pod`: any 64 bytes are a valid `BookUpdate`, so a slot can be viewed in place with [`bytemuck::from_bytes`];
/// use [`BookUpdate::kind`] and [`BookUpdate::side`] to decode the enum bytes (they return `None` for garbage).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BookUpdate {
    /// This subscriber stream's sequence, contiguous from 1. Offset 0.
    pub seq: u64,
    /// Matching-engine time, ns since the UNIX epoch. Offset 8.
    pub ts_event_ns: u64,
    /// Capture (feed receive) time, ns since the UNIX epoch. Offset 16.
    pub ts_recv_ns: u64,
    /// The venue position: the venue's sequence number << 16 | the record's index within that event (module
    /// docs, "Venue position"; [`BookUpdate::venue_seq`], [`BookUpdate::venue_index`]). Offset 24.
    pub venue_pos: u64,
    /// Price in units of 1e-9 (4810.25 is `4_810_250_000_000`). Offset 32.
    pub price_e9: i64,
    /// Venue order id. Offset 40.
    pub order_id: u64,
    /// Venue instrument id. Offset 48.
    pub instrument_id: u32,
    /// Quantity: for `Cancel` the quantity cancelled, for `Add`/`Modify` the resting quantity. Offset 52.
    pub size: u32,
    /// The low 32 bits of the publisher's TSC when the record was posted (raw `quanta::Clock::raw`); an interval
    /// is `(now as u32).wrapping_sub(ts_send_ticks)`. Offset 56.
    pub ts_send_ticks: u32,
    /// [`Kind`] as a byte. Offset 60.
    pub kind: u8,
    /// [`Side`] as an ASCII byte. Offset 61.
    pub side: u8,
    /// DBN flags ([`flags`]). Offset 62.
    pub flags: u8,
    /// Level kinds: the 1-based price level (MDP 3.0 `MDPriceLevel`, 1 = best); `TradingStatus`: the state;
    /// `InstrumentStale`: which book ([`StaleBook`]); zero for every other kind. Offset 63.
    pub level: u8,
}

const _: () = assert!(core::mem::size_of::<BookUpdate>() == RECORD_SIZE_BYTES);
const _: () = assert!(core::mem::align_of::<BookUpdate>() == RECORD_SIZE_BYTES);

impl BookUpdate {
    /// A zeroed record of the given kind (used for heartbeats, end of stream and snapshot markers).
    pub const fn control(kind: Kind) -> BookUpdate {
        BookUpdate {
            seq: 0,
            ts_event_ns: 0,
            ts_recv_ns: 0,
            venue_pos: 0,
            price_e9: 0,
            order_id: 0,
            instrument_id: 0,
            size: 0,
            ts_send_ticks: 0,
            kind: kind as u8,
            side: Side::None as u8,
            flags: 0,
            level: 0,
        }
    }

    /// Why the stream ended, for a [`Kind::EndOfStream`] record (its `size` holds the reason): `EndOfStream` for a
    /// complete replay, `Shutdown` for a publisher that stopped early, `FeedError` for a feed that failed (the
    /// books are then partial). `None` for any other kind, or a reason this build does not know.
    #[inline]
    pub fn end_reason(&self) -> Option<crate::control::CloseReason> {
        if self.kind != Kind::EndOfStream as u8 {
            return None;
        }
        crate::control::CloseReason::from_u32(self.size)
    }

    /// A trading status record of `instrument_id` (layout in the module docs, "Trading status records").
    pub const fn trading_status(instrument_id: u32, status: Status) -> BookUpdate {
        BookUpdate {
            instrument_id,
            order_id: status.kind as u64,
            size: u32::from_le_bytes(status.reason),
            level: status.state,
            flags: flags::LAST,
            ..BookUpdate::control(Kind::TradingStatus)
        }
    }

    /// What a [`Kind::TradingStatus`] record says; `None` for any other kind, or a status kind this build does
    /// not know.
    #[inline]
    pub fn status(&self) -> Option<Status> {
        if self.kind != Kind::TradingStatus as u8 {
            return None;
        }
        let kind = StatusKind::from_u8(u8::try_from(self.order_id).ok()?)?;
        Some(Status { kind, state: self.level, reason: self.size.to_le_bytes() })
    }

    /// A [`Kind::FeedStatus`] record (layout in the module docs, "Feed status records"): `state`, at
    /// `ts_event_ns`, with `duration_ns` (the bound for [`FeedState::Silent`], the silence's length for
    /// [`FeedState::Live`]) and `silences` so far.
    pub const fn feed_status(state: FeedState, ts_event_ns: u64, duration_ns: u64, silences: u32) -> BookUpdate {
        BookUpdate {
            instrument_id: CHANNEL_INSTRUMENT_ID,
            ts_event_ns,
            order_id: duration_ns,
            size: silences,
            level: state as u8,
            flags: flags::LAST | flags::BAD_TS_RECV,
            ..BookUpdate::control(Kind::FeedStatus)
        }
    }

    /// The state a [`Kind::FeedStatus`] record carries; `None` for any other kind, or a state this build does
    /// not know.
    #[inline]
    pub const fn feed_state(&self) -> Option<FeedState> {
        if self.kind != Kind::FeedStatus as u8 {
            return None;
        }
        FeedState::from_u8(self.level)
    }

    /// The decoded kind, or `None` if the byte is not a [`Kind`].
    #[inline]
    pub const fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.kind)
    }

    /// The decoded side, or `None` if the byte is not `B`, `A` or `N`.
    #[inline]
    pub const fn side(&self) -> Option<Side> {
        Side::from_u8(self.side)
    }

    /// A [`Kind::InstrumentStale`] of `instrument_id` about `book` (its other fields 0, side `N`).
    pub const fn stale(instrument_id: u32, book: StaleBook) -> BookUpdate {
        BookUpdate { instrument_id, level: book as u8, ..BookUpdate::control(Kind::InstrumentStale) }
    }

    /// Which book a [`Kind::InstrumentStale`] is about; `None` for another kind or an unknown `level`.
    #[inline]
    pub const fn stale_book(&self) -> Option<StaleBook> {
        if self.kind != Kind::InstrumentStale as u8 {
            return None;
        }
        StaleBook::from_u8(self.level)
    }

    /// Raw TSC ticks from the post (`ts_send_ticks`) to `now_ticks` (a raw TSC read on the same host), modulo
    /// 2^32: exact for an interval below 2^32 ticks (module docs, "Layout history").
    #[inline]
    pub const fn ticks_since_send(&self, now_ticks: u64) -> u64 {
        (now_ticks as u32).wrapping_sub(self.ts_send_ticks) as u64
    }

    /// The venue's sequence number of the event this record came from (the high 48 bits of `venue_pos`: DBN
    /// `sequence`, MDP 3.0 `MsgSeqNum`, the MoldUDP64 sequence number, a file's message index).
    #[inline]
    pub const fn venue_seq(&self) -> u64 {
        self.venue_pos >> VENUE_INDEX_BITS
    }

    /// The record's index within its venue event (the low 16 bits of `venue_pos`).
    #[inline]
    pub const fn venue_index(&self) -> u16 {
        self.venue_pos as u16
    }

    /// An MDP 3.0 record's channel id (the top 16 bits of `venue_pos`; module docs, "Venue position"): 0 for a
    /// publisher's one unnamed channel.
    #[inline]
    pub const fn venue_channel(&self) -> u16 {
        (self.venue_pos >> VENUE_CHANNEL_SHIFT) as u16
    }

    /// An MDP 3.0 record's packet `MsgSeqNum` (bits 16..48 of `venue_pos`), without its channel.
    #[inline]
    pub const fn msg_seq_num(&self) -> u32 {
        (self.venue_pos >> VENUE_INDEX_BITS) as u32
    }

    /// Whether the record ends a venue event (DBN `F_LAST`).
    #[inline]
    pub const fn is_last(&self) -> bool {
        self.flags & flags::LAST != 0
    }

    /// The record's 64 bytes, as written to a slot.
    #[inline]
    pub fn as_bytes(&self) -> &[u8; RECORD_SIZE_BYTES] {
        bytemuck::cast_ref(self)
    }

    /// The record's 64 bytes as eight native-endian 64-bit words, word `i` at byte offset `8 * i` (compared
    /// whole, a word at a time: the pair's merge).
    #[inline]
    pub fn as_words(&self) -> &[u64; RECORD_SIZE_BYTES / 8] {
        bytemuck::cast_ref(self)
    }

    /// Views 64 bytes as a record, in place. Any bit pattern is accepted; check `kind()`/`side()`.
    #[inline]
    pub fn from_bytes(bytes: &[u8; RECORD_SIZE_BYTES]) -> BookUpdate {
        bytemuck::pod_read_unaligned(bytes)
    }
}

/// Formats a 1e-9 fixed-point price as the shortest exact decimal with at least two decimals: `4810.25`,
/// `4799.00`, `0.1234`, `-1.50`, `0.000000001`. Nothing is rounded or truncated, so two different prices never
/// print the same (a feed's prices carry no precision of their own: DBN MBO files say nothing about tick size,
/// so the decimals shown are those the price needs, and never fewer than CME's two for ES).
pub fn format_price_e9(price_e9: i64) -> String {
    let sign = if price_e9 < 0 { "-" } else { "" };
    let abs = price_e9.unsigned_abs();
    let units = abs / 1_000_000_000;
    let nanos = format!("{:09}", abs % 1_000_000_000);
    let frac = nanos.trim_end_matches('0');
    let frac = if frac.len() < 2 { &nanos[..2] } else { frac };
    format!("{sign}{units}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn size_alignment_and_offsets_match_the_documented_layout() {
        assert_eq!(size_of::<BookUpdate>(), 64);
        assert_eq!(align_of::<BookUpdate>(), 64);
        assert_eq!(offset_of!(BookUpdate, seq), 0);
        assert_eq!(offset_of!(BookUpdate, ts_event_ns), 8);
        assert_eq!(offset_of!(BookUpdate, ts_recv_ns), 16);
        assert_eq!(offset_of!(BookUpdate, venue_pos), 24);
        assert_eq!(offset_of!(BookUpdate, price_e9), 32);
        assert_eq!(offset_of!(BookUpdate, order_id), 40);
        assert_eq!(offset_of!(BookUpdate, instrument_id), 48);
        assert_eq!(offset_of!(BookUpdate, size), 52);
        assert_eq!(offset_of!(BookUpdate, ts_send_ticks), 56);
        assert_eq!(offset_of!(BookUpdate, kind), 60);
        assert_eq!(offset_of!(BookUpdate, side), 61);
        assert_eq!(offset_of!(BookUpdate, flags), 62);
        assert_eq!(offset_of!(BookUpdate, level), 63);
    }

    #[test]
    fn bytes_are_little_endian_at_their_offsets() {
        let mut r = BookUpdate::control(Kind::Cancel);
        r.seq = 0x0102_0304_0506_0708;
        r.price_e9 = 4_810_250_000_000;
        r.instrument_id = 17077;
        r.side = Side::Ask as u8;
        r.flags = flags::LAST | flags::SNAPSHOT;
        let b = r.as_bytes();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[32..40], &4_810_250_000_000i64.to_le_bytes());
        assert_eq!(&b[48..52], &17077u32.to_le_bytes());
        assert_eq!(b[60], 3);
        assert_eq!(b[61], b'A');
        assert_eq!(b[62], 0xA0);
        assert_eq!(b[63], 0);
        assert_eq!(BookUpdate::from_bytes(b), r);
        let l = BookUpdate { level: 10, flags: flags::MBP | flags::IMPLIED, ..BookUpdate::control(Kind::LevelNew) };
        assert_eq!((l.as_bytes()[60], l.as_bytes()[62], l.as_bytes()[63]), (11, 0x11, 10));
    }

    #[test]
    fn a_venue_position_orders_by_venue_seq_then_index_and_a_stale_mark_names_its_book() {
        let p = venue_position(17_347_815, 3);
        let r = BookUpdate { venue_pos: p, ..BookUpdate::control(Kind::LevelNew) };
        assert_eq!((r.venue_seq(), r.venue_index()), (17_347_815, 3));
        assert!(venue_position(7, u16::MAX) < venue_position(8, 0));
        assert_eq!(venue_position(VENUE_SEQ_MAX + 5, 1), venue_position(4, 1), "the low 48 bits");
        assert_eq!(r.as_bytes()[24..32], p.to_le_bytes());
        assert_eq!(BookUpdate::stale(5, StaleBook::Order).stale_book(), Some(StaleBook::Order));
        assert_eq!(BookUpdate::stale(5, StaleBook::PriceLevel).as_bytes()[63], 2);
        assert_eq!(BookUpdate::control(Kind::InstrumentStale).stale_book(), None, "level 0 names no book");
        assert_eq!(BookUpdate { level: 2, ..BookUpdate::control(Kind::LevelNew) }.stale_book(), None);
    }

    #[test]
    fn an_mdp3_position_carries_its_channel_above_the_msg_seq_num_and_orders_within_it() {
        let p = mdp3_venue_position(310, 17_347_815, 3);
        assert_eq!(p, 310 << 48 | 17_347_815 << 16 | 3);
        let r = BookUpdate { venue_pos: p, ..BookUpdate::control(Kind::LevelNew) };
        assert_eq!((r.venue_channel(), r.msg_seq_num(), r.venue_index()), (310, 17_347_815, 3));
        assert_eq!(r.venue_seq(), 310 << 32 | 17_347_815, "the venue seq holds the channel");
        assert_eq!(mdp3_venue_position(0, 9, 1), venue_position(9, 1), "channel 0: the plain position");
        assert!(mdp3_venue_position(7, u32::MAX, u16::MAX) < mdp3_venue_position(8, 0, 0), "no spill into the id");
        assert!(mdp3_venue_position(7, 5, 0) < mdp3_venue_position(7, 6, 0));
        assert_ne!(mdp3_venue_position(7, 5, 0), mdp3_venue_position(8, 5, 0), "two channels never meet");
    }

    #[test]
    fn an_end_of_stream_record_says_why_the_stream_ended() {
        use crate::control::CloseReason;
        let eos = |size| BookUpdate { size, ..BookUpdate::control(Kind::EndOfStream) };
        assert_eq!(eos(1).end_reason(), Some(CloseReason::EndOfStream));
        assert_eq!(eos(3).end_reason(), Some(CloseReason::Shutdown));
        assert_eq!(eos(8).end_reason(), Some(CloseReason::FeedError));
        assert_eq!(eos(999).end_reason(), None);
        assert_eq!(BookUpdate { size: 1, ..BookUpdate::control(Kind::Add) }.end_reason(), None);
    }

    #[test]
    fn enum_bytes_decode_and_garbage_is_refused() {
        for v in 1..=19u8 {
            assert_eq!(Kind::from_u8(v).map(|k| k as u8), Some(v));
        }
        assert_eq!(Kind::from_u8(17), Some(Kind::NoAction));
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Kind::from_u8(18), Some(Kind::TradingStatus));
        assert_eq!(Kind::from_u8(19), Some(Kind::FeedStatus));
        let f = BookUpdate::feed_status(FeedState::Silent, 7, 2_000_000_000, 1);
        assert_eq!(
            (f.feed_state(), f.instrument_id, f.order_id, f.size, f.flags),
            (Some(FeedState::Silent), u32::MAX, 2_000_000_000, 1, flags::LAST | flags::BAD_TS_RECV)
        );
        assert_eq!(BookUpdate { level: b'X', ..f }.feed_state(), None);
        assert_eq!(BookUpdate::control(Kind::Heartbeat).feed_state(), None);
        assert_eq!(Kind::from_u8(20), None);
        assert!(Kind::LevelDeleteFrom.is_level() && !Kind::InstrumentStale.is_level() && !Kind::Add.is_level());
        assert_eq!(Side::from_u8(b'B'), Some(Side::Bid));
        assert_eq!(Side::from_u8(b'X'), None);
    }

    #[test]
    fn a_trading_status_record_carries_kind_state_and_reason_at_their_offsets() {
        let st = Status { kind: StatusKind::Trading, state: b'H', reason: *b"T1  " };
        let r = BookUpdate { venue_pos: crate::record::venue_position(82, 0), ..BookUpdate::trading_status(6556, st) };
        let b = r.as_bytes();
        assert_eq!(&b[40..48], &72u64.to_le_bytes());
        assert_eq!(&b[48..52], &6556u32.to_le_bytes());
        assert_eq!(&b[52..56], b"T1  ");
        assert_eq!((b[60], b[61], b[62], b[63]), (18, b'N', flags::LAST, b'H'));
        assert_eq!(BookUpdate::from_bytes(b).status(), Some(st));
        assert_eq!(BookUpdate { order_id: u64::from(b'Z'), ..r }.status(), None);
        assert_eq!(BookUpdate::control(Kind::Add).status(), None);
        assert_eq!(StatusKind::from_u8(b'h'), Some(StatusKind::OperationalHalt));
    }

    #[test]
    fn prices_format_exactly_with_at_least_two_decimals() {
        assert_eq!(format_price_e9(4_810_250_000_000), "4810.25");
        assert_eq!(format_price_e9(4_799_000_000_000), "4799.00");
        assert_eq!(format_price_e9(-1_500_000_000), "-1.50");
        assert_eq!(format_price_e9(0), "0.00");
        assert_eq!(format_price_e9(123_400_000), "0.1234");
        assert_eq!(format_price_e9(123_600_000), "0.1236");
        assert_eq!(format_price_e9(1), "0.000000001");
        assert_eq!(format_price_e9(-100_000_000), "-0.10");
        assert_eq!(format_price_e9(i64::MIN), "-9223372036.854775808");
    }
}
