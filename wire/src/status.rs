//! Per-instrument trading status, kept from [`Kind::TradingStatus`] records: [`TradingStates`]; the live feed's
//! state, from [`Kind::FeedStatus`] records: [`FeedHealth`].
//!
//! A record carries one of three statuses (layout: [`crate::record`], "Trading status records"; source: Nasdaq
//! TotalView-ITCH 5.0 sections 4.2.2 `H`, 4.2.3 `Y`, 4.2.8 `h`); each instrument keeps the last of each kind, as
//! the venue's own state machine does: a trading action does not end an operational halt, nor the reverse.
//! Order books ignore these records, so a strategy that wants both feeds every record to its books and to a
//! [`TradingStates`].
//!
//! A snapshot (a late join, a resync) carries each instrument's last status record of each kind, as the publisher
//! applied it (flag [`crate::flags::SNAPSHOT`] added), before its `SnapshotEnd`: a subscriber that joins during a
//! halt learns of it. A resync's copies apply as any record does (they count in [`InstrumentStatus::records`]).

use std::collections::BTreeMap;

use crate::record::{BookUpdate, FeedState, Kind, Status, StatusKind};

/// One instrument's last statuses (each `None` until a record of that kind came).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstrumentStatus {
    /// Stock Trading Action (`H`): the state (`H` halted, `P` paused, `Q` quotation only, `T` trading) and the
    /// reason (4 ASCII bytes, space-padded).
    pub trading: Option<(u8, [u8; 4])>,
    /// Reg SHO (`Y`): `0` no price test, `1` restriction in effect, `2` restriction remains in effect.
    pub reg_sho: Option<u8>,
    /// Operational Halt (`h`): the action (`H` halted, `T` resumed) and the market code (`Q`, `B`, `X`).
    pub operational_halt: Option<(u8, u8)>,
    /// Status records applied.
    pub records: u64,
    /// `venue_seq` of the last one.
    pub last_venue_seq: u64,
    /// `ts_event_ns` of the last one (ns since the UNIX epoch).
    pub last_ts_event_ns: u64,
}

impl InstrumentStatus {
    /// Whether the instrument cannot trade now: its trading state is `H` (halted) or `P` (paused), or an
    /// operational halt is in force. `Q` (quotation only) is not a halt: quotes may be entered.
    pub fn is_halted(&self) -> bool {
        matches!(self.trading, Some((b'H' | b'P', _))) || matches!(self.operational_halt, Some((b'H', _)))
    }

    fn apply(&mut self, s: Status, r: &BookUpdate) {
        match s.kind {
            StatusKind::Trading => self.trading = Some((s.state, s.reason)),
            StatusKind::RegSho => self.reg_sho = Some(s.state),
            StatusKind::OperationalHalt => self.operational_halt = Some((s.state, s.reason[0])),
        }
        self.records += 1;
        self.last_venue_seq = r.venue_seq();
        self.last_ts_event_ns = r.ts_event_ns;
    }
}

/// instrument_id → [`InstrumentStatus`], fed every record (others are ignored). Allocates once per new
/// instrument (status records are rare: a few per instrument per day).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TradingStates {
    by_id: BTreeMap<u32, InstrumentStatus>,
}

impl TradingStates {
    /// An empty table.
    pub fn new() -> TradingStates {
        TradingStates::default()
    }

    /// Applies `r` if it is a [`Kind::TradingStatus`] record of a status kind this build knows; returns whether
    /// it was one. Every other record is ignored (`false`).
    pub fn apply(&mut self, r: &BookUpdate) -> bool {
        if r.kind != Kind::TradingStatus as u8 {
            return false;
        }
        let Some(s) = r.status() else { return false };
        self.by_id.entry(r.instrument_id).or_default().apply(s, r);
        true
    }

    /// The statuses of `instrument_id`, if any record named it.
    pub fn get(&self, instrument_id: u32) -> Option<&InstrumentStatus> {
        self.by_id.get(&instrument_id)
    }

    /// Every instrument with a status, by increasing instrument_id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &InstrumentStatus)> {
        self.by_id.iter().map(|(id, s)| (*id, s))
    }

    /// Instruments with a status.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no status record came.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// The live feed's state, kept from [`Kind::FeedStatus`] records (layout: [`crate::record`], "Feed status
/// records"): whether the publisher's lines are silent now, since when, and how often they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedHealth {
    /// Whether the last feed status record said [`FeedState::Silent`].
    pub silent: bool,
    /// `ts_event_ns` of the last record: the last datagram before the silence, or the first after it (ns since
    /// the UNIX epoch); 0 before any.
    pub since_ns: u64,
    /// Silences on the feed so far, as the publisher counts them (a snapshot's copy carries the count too).
    pub silences: u32,
    /// How long the last silence that ended lasted, in ns (0 before one ended).
    pub last_silence_ns: u64,
}

impl FeedHealth {
    /// Applies `r` if it is a [`Kind::FeedStatus`] record of a state this build knows; returns whether it was
    /// one. Every other record is ignored (`false`).
    pub fn apply(&mut self, r: &BookUpdate) -> bool {
        let Some(state) = r.feed_state() else { return false };
        self.silent = state == FeedState::Silent;
        self.since_ns = r.ts_event_ns;
        self.silences = r.size;
        if state == FeedState::Live {
            self.last_silence_ns = r.order_id;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u32, kind: StatusKind, state: u8, reason: &[u8; 4], venue_seq: u64) -> BookUpdate {
        BookUpdate {
            venue_pos: crate::record::venue_position(venue_seq, 0),
            ..BookUpdate::trading_status(id, Status { kind, state, reason: *reason })
        }
    }

    #[test]
    fn each_status_kind_keeps_its_last_state() {
        let mut t = TradingStates::new();
        assert!(!t.apply(&BookUpdate::control(Kind::Add)));
        assert!(t.apply(&rec(7, StatusKind::Trading, b'H', b"T1  ", 1)));
        assert!(t.get(7).unwrap().is_halted());
        assert!(t.apply(&rec(7, StatusKind::RegSho, b'1', b"    ", 2)));
        assert!(t.apply(&rec(7, StatusKind::OperationalHalt, b'H', b"Q   ", 3)));
        assert!(t.apply(&rec(7, StatusKind::Trading, b'T', b"    ", 4)));
        let s = *t.get(7).unwrap();
        assert_eq!(s.trading, Some((b'T', *b"    ")));
        assert_eq!(
            (s.reg_sho, s.operational_halt, s.records, s.last_venue_seq),
            (Some(b'1'), Some((b'H', b'Q')), 4, 4)
        );
        assert!(s.is_halted(), "trading resumed, but the operational halt is still in force");
        t.apply(&rec(7, StatusKind::OperationalHalt, b'T', b"Q   ", 5));
        assert!(!t.get(7).unwrap().is_halted());
        // An unknown status kind is not applied.
        assert!(!t.apply(&BookUpdate { order_id: 1, ..rec(8, StatusKind::Trading, b'H', b"    ", 6) }));
        assert_eq!((t.len(), t.iter().map(|(id, _)| id).collect::<Vec<_>>()), (1, vec![7]));
    }

    #[test]
    fn feed_health_follows_silent_and_live_records() {
        let mut h = FeedHealth::default();
        assert!(!h.apply(&BookUpdate::control(Kind::Heartbeat)));
        assert!(h.apply(&BookUpdate::feed_status(FeedState::Silent, 100, 2_000, 1)));
        assert_eq!(h, FeedHealth { silent: true, since_ns: 100, silences: 1, last_silence_ns: 0 });
        assert!(h.apply(&BookUpdate::feed_status(FeedState::Live, 5_100, 5_000, 1)));
        assert_eq!(h, FeedHealth { silent: false, since_ns: 5_100, silences: 1, last_silence_ns: 5_000 });
        // A state this build does not know changes nothing.
        assert!(!h.apply(&BookUpdate { level: b'?', ..BookUpdate::feed_status(FeedState::Silent, 9, 9, 2) }));
        assert!(!h.silent);
    }
}
