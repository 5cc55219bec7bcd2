//! mdfan-wire: everything that crosses a boundary as bytes, and nothing that moves them.
//!
//! - [`record`]: [`BookUpdate`], the 64-byte normalised order-book update (one cache line, one RDMA WRITE).
//! - [`ring`]: the subscriber ring's header and slot layout, and how `imm_data` carries the seq.
//! - [`control`]: the versioned control-plane handshake (subscribe, accept, reject).
//! - [`book`]: L3 orders aggregated to L2 levels, per instrument, with Databento's replay rules: the reference
//!   book (std maps; it writes snapshots, and tests check everything else against it).
//! - [`hot_book`]: the same book for a strategy's hot path ([`HotBook`], [`HotBooks`]): sized up front with
//!   [`BookCapacity`], no allocation per record, O(1) best price, MBP-N views that borrow; identical to
//!   [`Book`]/[`Books`] after every record.
//! - [`mbp`]: price-level (MBP-10) books fed the level kinds, with CME MDP 3.0's rules.
//! - [`symbology`]: instrument_id → symbol and price display ([`Symbology`], [`InstrumentDef`]), control plane only.
//! - [`status`]: per-instrument trading status from [`Kind::TradingStatus`] records ([`TradingStates`]), the
//!   live feed's silences from [`Kind::FeedStatus`] records ([`FeedHealth`]).
//!
//! No sockets, clocks, threads or feed decoders live here (those are in `mdfan-feed`): the book takes records.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod book;
pub mod control;
pub mod hot_book;
pub mod mbp;
pub mod record;
pub mod ring;
pub mod status;
pub mod symbology;

pub use book::{Book, BookError, Books, Level};
pub use control::FeedIdentity;
pub use hot_book::{BookCapacity, HotBook, HotBooks, LevelIter, RestingOrder};
pub use mbp::{MbpBook, MbpBooks, MbpError, MbpLevel, MBP_DEPTH};
pub use record::{
    flags, mdp3_venue_position, venue_position, BookUpdate, FeedState, Kind, Side, StaleBook, Status, StatusKind,
    VenueRun, CHANNEL_INSTRUMENT_ID, VENUE_CHANNEL_SHIFT, VENUE_SEQ_MAX,
};
pub use status::{FeedHealth, InstrumentStatus, TradingStates};
pub use symbology::{InstrumentDef, Symbology};
