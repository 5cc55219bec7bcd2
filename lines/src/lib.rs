//! mdfan-lines: receiving an exchange feed from its two redundant UDP lines (A and B) and arbitrating them.
//!
//! - [`socket`]: [`LineSocket`], one line's UDP socket (multicast join or unicast bind, a sized receive buffer,
//!   non-blocking `recvmsg` with an `SO_TIMESTAMPING` receive stamp per datagram).
//! - [`seq`]: [`SeqExtractor`], the one thing arbitration needs from a feed (its packet sequence number), with
//!   the CME MDP 3.0 implementation [`Mdp3Seq`].
//! - [`arbiter`]: [`Arbiter`], the crate `mdfan-arbiter`'s sans-IO arbiter set for datagrams (a seq per
//!   datagram), fed by the caller's clock: first copy of each seq wins, duplicates are counted and dropped,
//!   packets ahead of a hole wait in a fixed window, and a seq that neither line delivered becomes a
//!   [`Event::Gap`].
//! - [`hwstamp`]: hardware receive stamps: `SIOCSHWTSTAMP` as `lines.hw_timestamps` says, and the PHC mapped
//!   onto `CLOCK_REALTIME`.
//! - [`receiver`]: [`LineReceiver`], the two sockets and the arbiter glued together with pre-allocated buffers.
//!
//! Nothing here allocates per datagram: every buffer is sized when the receiver is built. This crate knows no
//! simulator and no decoder: the publisher's feed handler uses it with a feed's [`SeqExtractor`].
// One module holds unsafe code: `hwstamp`'s ioctls (SIOCETHTOOL, SIOC[GS]HWTSTAMP, PTP_SYS_OFFSET_*).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod arbiter;
pub mod hwstamp;
pub mod receiver;
pub mod seq;
pub mod socket;

pub use arbiter::{
    Arbiter, ArbiterConfig, ArbiterCounters, CopyCheckCounters, Datagram, Event, Line, SourceCounts, MAX_SOURCES,
};
pub use hwstamp::{HwStampError, HwStampState, HwTimestamps};
pub use receiver::{LineReceiver, ReceiverConfig};
pub use seq::{Mdp3Seq, SeqExtractor};
pub use socket::{realtime_ns, LineConfig, LineError, LineSocket, Received, StampKind};
