//! The text `mdfan-subscribe` prints: one key=value line per instrument, top levels, latency percentiles.

use mdfan_wire::record::format_price_e9;
use mdfan_wire::{Book, Level, Side};

use crate::latency::{Latency, WireLatency};

fn level(l: Option<Level>) -> String {
    match l {
        Some(l) => format!("{}x{}", format_price_e9(l.price_e9), l.size),
        None => "-".into(),
    }
}

/// `instrument=17077 records=68792 gaps=0 last_seq=59585 orders=11217 levels_bid=922 levels_ask=565
/// bbo=4810.00x22/4810.25x28`: `records` counts the book records of this instrument, `gaps` the stream's seq
/// jumps, `last_seq` the last venue sequence applied.
pub fn summary_line(instrument_id: u32, book: &Book, gaps: u64) -> String {
    let (bid, ask) = book.bbo();
    format!(
        "instrument={instrument_id} records={} gaps={gaps} last_seq={} orders={} levels_bid={} levels_ask={} bbo={}/{}",
        book.records,
        book.last_venue_seq,
        book.order_count(),
        book.level_count(Side::Bid),
        book.level_count(Side::Ask),
        level(bid),
        level(ask),
    )
}

/// The best `n` levels of each side, one line each: `instrument=17077 side=bid level=1 price=4810.00 size=22
/// orders=22`.
pub fn level_lines(instrument_id: u32, book: &Book, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (side, name) in [(Side::Bid, "bid"), (Side::Ask, "ask")] {
        for (i, l) in book.top(side, n).iter().enumerate() {
            out.push(format!(
                "instrument={instrument_id} side={name} level={} price={} size={} orders={}",
                i + 1,
                format_price_e9(l.price_e9),
                l.size,
                l.orders
            ));
        }
    }
    out
}

/// `latency clock=tsc count=N p50_ns=.. p90_ns=.. p99_ns=.. p99.9_ns=.. p99.99_ns=.. max_ns=..`.
pub fn latency_line(l: &Latency) -> String {
    let h = l.histogram();
    format!(
        "latency clock={} count={} p50_ns={} p90_ns={} p99_ns={} p99.9_ns={} p99.99_ns={} max_ns={}",
        l.source().as_str(),
        h.len(),
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
    format!(
        "wire_to_poll clock={} count={} p50_ns={} p90_ns={} p99_ns={} p99.9_ns={} p99.99_ns={} max_ns={}",
        w.source().as_str(),
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.value_at_quantile(0.9999),
        h.max()
    )
}
