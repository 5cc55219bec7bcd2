//! The text `mdfan-subscribe` prints: one key=value line per instrument, top levels, latency percentiles.

use mdfan_wire::{Book, BookUpdate, InstrumentStatus, Level, MbpBook, MbpLevel, Side, Symbology};

use hdrhistogram::Histogram;

use crate::latency::{Latency, NicLatency, WireLatency};

/// `4810.25x22`, the price at the instrument's precision ([`Symbology::format_price`]), or `-` for no level.
pub fn level_text(symbology: &Symbology, instrument_id: u32, l: Option<Level>) -> String {
    match l {
        Some(l) => format!("{}x{}", symbology.format_price(instrument_id, l.price_e9), l.size),
        None => "-".into(),
    }
}

/// `instrument=17077` followed by ` symbol=ESH4` when `symbology` knows the instrument.
pub fn instrument_text(symbology: &Symbology, instrument_id: u32) -> String {
    match symbology.symbol(instrument_id) {
        Some(symbol) => format!("instrument={instrument_id} symbol={symbol}"),
        None => format!("instrument={instrument_id}"),
    }
}

/// `instrument=17077 symbol=ESH4 records=68792 gaps=0 last_seq=59585 orders=11217 levels_bid=922 levels_ask=565
/// bbo=4810.00x22/4810.25x28`: `symbol` only when `symbology` knows the instrument, prices at its precision;
/// `records` counts the book records of this instrument, `gaps` the stream's seq jumps, `last_seq` the last venue
/// sequence applied.
pub fn summary_line(symbology: &Symbology, instrument_id: u32, book: &Book, gaps: u64) -> String {
    let (bid, ask) = book.bbo();
    let level = |l| level_text(symbology, instrument_id, l);
    format!(
        "{} records={} gaps={gaps} last_seq={} orders={} levels_bid={} levels_ask={} bbo={}/{}",
        instrument_text(symbology, instrument_id),
        book.records,
        book.last_venue_seq,
        book.order_count(),
        book.level_count(Side::Bid),
        book.level_count(Side::Ask),
        level(bid),
        level(ask),
    )
}

/// The best `n` levels of each side, one line each, prices at the instrument's precision: `instrument=17077
/// side=bid level=1 price=4810.00 size=22 orders=22`.
pub fn level_lines(symbology: &Symbology, instrument_id: u32, book: &Book, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (side, name) in [(Side::Bid, "bid"), (Side::Ask, "ask")] {
        for (i, l) in book.top(side, n).iter().enumerate() {
            out.push(level_line(symbology, instrument_id, name, i + 1, Some((l.price_e9, l.size, l.orders))));
        }
    }
    out
}

/// One level line of [`level_lines`] and [`mbp_level_lines`]: `level` is 1-based; `l` is (price_e9, size,
/// orders), `None` for an empty MBP position (`price=- size=0 orders=0`).
fn level_line(
    symbology: &Symbology,
    instrument_id: u32,
    side: &str,
    level: usize,
    l: Option<(i64, u64, u32)>,
) -> String {
    let (price, size, orders) = match l {
        Some((price_e9, size, orders)) => (symbology.format_price(instrument_id, price_e9), size, orders),
        None => ("-".to_owned(), 0, 0),
    };
    format!("instrument={instrument_id} side={side} level={level} price={price} size={size} orders={orders}")
}

fn mbp_level(symbology: &Symbology, instrument_id: u32, l: Option<MbpLevel>) -> String {
    match l {
        Some(l) => format!("{}x{}", symbology.format_price(instrument_id, l.price_e9), l.size),
        None => "-".into(),
    }
}

/// A price-level (MBP) book: `instrument=174969 book=mbp records=731 gaps=0 last_seq=17352799 stale=false
/// levels_bid=10 levels_ask=10 bbo=7580.50x8/7581.50x19` (`symbol=` after the id when the symbology knows it):
/// `records` counts the level, clear and stale records of this instrument, `gaps` the stream's seq jumps,
/// `last_seq` the venue sequence (MDP 3.0 `MsgSeqNum`; `CHANNEL:MsgSeqNum` on a channel with an id) of the last
/// one, `stale` whether the venue feed lost updates
/// of it that no recovery has replaced yet, `levels_*` the positions known (of 10). Prices are printed exactly, at
/// the instrument's precision: MDP 3.0's mantissa x 10^-7 times the display factor when the symbology has one, else
/// mantissa x 10^-7 as the venue sent it.
pub fn mbp_summary_line(symbology: &Symbology, book: &MbpBook, gaps: u64) -> String {
    let (bid, ask) = book.bbo();
    let id = book.instrument_id();
    let known = |side| book.top(side, mdfan_wire::mbp::MBP_DEPTH).iter().filter(|l| l.is_some()).count();
    // A channel of a publisher of several MDP 3.0 channels: its id, then its MsgSeqNum alone.
    let pos = BookUpdate { venue_pos: book.last_venue_pos(), ..BookUpdate::control(mdfan_wire::Kind::NoAction) };
    let last_seq = match pos.venue_channel() {
        0 => book.last_venue_seq().to_string(),
        channel => format!("{}:{}", channel, pos.msg_seq_num()),
    };
    format!(
        "{} book=mbp records={} gaps={gaps} last_seq={last_seq} stale={} levels_bid={} levels_ask={} bbo={}/{}",
        instrument_text(symbology, id),
        book.records(),
        book.is_stale(),
        known(Side::Bid),
        known(Side::Ask),
        mbp_level(symbology, id, bid),
        mbp_level(symbology, id, ask),
    )
}

/// Positions 1 to `n` of each side of a price-level book, one line each, as [`level_lines`]:
/// `instrument=174969 side=bid level=1 price=7580.50 size=8 orders=5`, down to the deepest position the feed
/// filled ([`MbpBook::filled_depth`]: a level-1 feed prints level 1 only). An empty position prints `price=-
/// size=0 orders=0`; one the feed never filled (the book started without a snapshot) prints `price=? size=?
/// orders=?`: unknown, not empty.
pub fn mbp_level_lines(symbology: &Symbology, book: &MbpBook, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let id = book.instrument_id();
    for (side, name) in [(Side::Bid, "bid"), (Side::Ask, "ask")] {
        for (i, l) in book.top(side, n.min(book.filled_depth(side))).iter().enumerate() {
            if l.is_none() && !book.ever_filled(side, i + 1) {
                out.push(format!("instrument={id} side={name} level={} price=? size=? orders=?", i + 1));
                continue;
            }
            out.push(level_line(symbology, id, name, i + 1, l.map(|l| (l.price_e9, u64::from(l.size), l.orders))));
        }
    }
    out
}

/// An instrument's trading status ([`mdfan_wire::TradingStates`]): `status instrument=2 symbol=AA trading=T
/// reason=- reg_sho=0 operational_halt=- halted=false records=2 last_seq=266` (`symbol=` when the symbology
/// knows it). `trading` is the Stock Trading Action state (`H` halted, `P` paused, `Q` quotation only, `T`
/// trading) and `reason` its reason code, trimmed; `reg_sho` the Reg SHO indicator (`0`, `1`, `2`);
/// `operational_halt` the action and market code (`HQ`: halted on Nasdaq); `-` for what no record said yet.
/// `halted` is [`InstrumentStatus::is_halted`]; `last_seq` the venue sequence of the last status record.
pub fn status_line(symbology: &Symbology, instrument_id: u32, s: &InstrumentStatus) -> String {
    let ascii = |b: &[u8]| {
        let t = String::from_utf8_lossy(b).trim().to_owned();
        if t.is_empty() {
            "-".to_owned()
        } else {
            t
        }
    };
    let (trading, reason) = match s.trading {
        Some((state, reason)) => (ascii(&[state]), ascii(&reason)),
        None => ("-".to_owned(), "-".to_owned()),
    };
    format!(
        "status {} trading={trading} reason={reason} reg_sho={} operational_halt={} halted={} records={} last_seq={}",
        instrument_text(symbology, instrument_id),
        s.reg_sho.map_or("-".to_owned(), |b| ascii(&[b])),
        s.operational_halt.map_or("-".to_owned(), |(action, market)| ascii(&[action, market])),
        s.is_halted(),
        s.records,
        s.last_venue_seq,
    )
}

/// `latency clock=tsc count=N p50_ns=.. p90_ns=.. p99_ns=.. p99.9_ns=.. p99.99_ns=.. max_ns=..`.
pub fn latency_line(l: &Latency) -> String {
    let h = l.histogram();
    format!("latency clock={} count={} {}", l.source().as_str(), h.len(), quantiles_text(h))
}

/// `p50_ns=.. p90_ns=.. p99_ns=.. p99.9_ns=.. p99.99_ns=.. max_ns=..` of a histogram in ns: the tail every latency
/// line shares.
fn quantiles_text(h: &Histogram<u64>) -> String {
    format!(
        "p50_ns={} p90_ns={} p99_ns={} p99.9_ns={} p99.99_ns={} max_ns={}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.value_at_quantile(0.9999),
        h.max()
    )
}

/// `wire_to_poll clock=realtime(sw-stamp) count=N p50_ns=.. p90_ns=.. p99_ns=.. p99.9_ns=.. p99.99_ns=..
/// max_ns=..`: datagram receipt (the record's `ts_recv_ns`) to the poll, printed beside [`latency_line`].
pub fn wire_latency_line(w: &WireLatency) -> String {
    let h = w.histogram();
    format!("wire_to_poll clock={} count={} {}", w.source().as_str(), h.len(), quantiles_text(h))
}

/// What [`nic_latency_line`] prints when the ring's completions carry no NIC timestamps (shm, Soft-RoCE, a device
/// without `hca_core_clock`).
pub const NIC_NOT_AVAILABLE: &str = "nic_to_poll clock=nic: not available (device reports no completion timestamps)";

/// `nic_to_poll clock=nic count=N unaligned=N p50_ns=.. p90_ns=.. p99_ns=.. p99.9_ns=.. p99.99_ns=.. max_ns=..`: the
/// receive completion's NIC timestamp (mapped onto `CLOCK_REALTIME`) to the poll ([`NicLatency`]), printed beside
/// [`latency_line`] (`clock=tsc`); `unaligned` counts completions stamped before the NIC clock could be mapped.
/// `None` (no NIC timestamps) prints [`NIC_NOT_AVAILABLE`]; a device whose clock could not be read against
/// `CLOCK_REALTIME` prints `nic_to_poll clock=nic: not available (NIC clock not readable against CLOCK_REALTIME;
/// N completions stamped)`.
pub fn nic_latency_line(n: Option<&NicLatency>) -> String {
    let Some(n) = n else { return NIC_NOT_AVAILABLE.to_owned() };
    if !n.is_aligned() {
        return format!(
            "nic_to_poll clock=nic: not available (NIC clock not readable against CLOCK_REALTIME; {} completions stamped)",
            n.unaligned()
        );
    }
    let h = n.histogram();
    format!(
        "nic_to_poll clock={} count={} unaligned={} {}",
        n.source().as_str(),
        h.len(),
        n.unaligned(),
        quantiles_text(h)
    )
}
