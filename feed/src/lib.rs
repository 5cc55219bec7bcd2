//! mdfan-feed: exchange input, decoded and normalised into [`BookUpdate`](mdfan_wire::BookUpdate) records.
//!
//! - [`dbn`]: Databento Binary Encoding, MBO schema (CME Globex MDP 3.0 via `GLBX.MDP3`).
//! - [`mdp3`]: CME Globex MDP 3.0 itself (SBE schema 1 v8): packets, messages, sequence checks, and price-level
//!   records for [`mdfan_wire::MbpBooks`].
//! - [`mdp3_channel`]: one MDP 3.0 channel for a live handler: arbitrated packets in, level and stale records
//!   out, packets lost on both lines turned into stale marks, and market recovery from the snapshot feed (sans
//!   I/O: the caller owns the sockets).
//! - [`symbols`]: symbol files (security id → symbol, display factor, tick size) for MDP 3.0, whose incremental
//!   feed carries no instrument definitions.
//! - [`pcap`]: UDP datagrams (time, group:port, payload) from a pcapng or classic pcap capture, for tests and replay.
//! - [`itch`]: Nasdaq TotalView-ITCH 5.0: messages, the BinaryFILE source (plain or gzip), and order-level
//!   records keyed by stock locate.
//! - [`lobster`]: LOBSTER message and order-book CSVs: the level-1 book rebuilt from the messages and checked
//!   against the order-book file per message, price-level records and trades.
//! - [`moldudp64`]: MoldUDP64 downstream packets (session, sequence number, message blocks), sans I/O.
//! - [`mold_session`]: a MoldUDP64 session receiver: messages in sequence order, gaps, retransmission requests,
//!   holes given up and reported (sans I/O).
//! - [`order_table`]: the order reference table of an order-level handler (ITCH): open addressing sized for a
//!   million live orders, with a prefetch of the next message's line.
//! - [`capture`]: mdfan's own capture format (the normalised stream a subscriber received, in checksummed blocks
//!   and segments): its writer, its reader (following a segment as it grows), recovery of a torn end, report.
//!
//! Only the publisher (and the bench and fuzz targets) depend on this crate: no DBN, zstd or other decoder type
//! is visible past it, and a strategy that embeds `mdfan-subscriber` compiles none of them. No sockets,
//! clocks or threads live here: decoders take bytes or a file and give records (and the capture writer, given the
//! time, writes files). One `unsafe` block in all: the order table's prefetch hint, which reads no memory.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod dbn;
pub mod dbn_export;
pub mod itch;
pub mod lobster;
pub mod mdp3;
pub mod mdp3_channel;
pub mod mold_session;
pub mod moldudp64;
pub mod order_table;
pub mod pcap;
pub mod symbols;
