//! The live CME feed's decode speed against a reference decoder of the same packets (issue 25, item 2), over line A
//! of the bundled MDP 3.0 capture (`data/cme-mdp3-sbe-v8-pcap-20160927/`, 5,000 packets, 5,299 messages, 6,195
//! entries), in memory, on one core:
//!
//! - `mdfan.mdp3_decode`: [`Mdp3Channel::on_packet`] (validate, decode, sequence checks, normalise into 64-byte
//!   price-level records) with each record copied into a pre-allocated ring of 4,096 records, a stand-in for the
//!   publisher's journal (its slot copy, without the seqlock stamps and the readers).
//! - `baseline.mdp3_sbe` (the reference): views that the `sbe_gen` code generator (crate registry) made from CME's
//!   schema at build time (`benches/build.rs`), reading every field of every entry that mdfan's normalisation
//!   reads ([`reference`]), each entry written into a ring of the same size. Of the generators on the registry,
//!   `sbe_gen` 0.7.3 is the one that works on this schema: `ironsbe-codegen` 0.8.0 refuses it (it takes only an
//!   `sbe:` or unprefixed `messageSchema`, CME's is `ns2:`), and with the prefix renamed its code reads every
//!   one-byte enum and set (`MDUpdateAction`, `MDEntryType`, `MatchEventIndicator`) as a `u64`, eight bytes from
//!   the field's offset: wrong values, and past the end of the buffer at the packet's last entry. Real Logic's
//!   `sbe-tool` needs Java, which these machines do not have.
//!
//! Figures: `<decoder>.ns_per_entry` (a pass's median time over the entries), `<decoder>.packet_p50_ns` (the TSC
//! around each packet, the two decoders interleaved packet by packet), their ratios
//! `ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_entry` and `.per_packet` (target: at most 1.5x each); and
//! the per-packet histograms `mdfan.mdp3_decode.packet`, `baseline.mdp3_sbe.packet`. Each pass uses a new channel
//! (made before it is timed): the decoder refuses a `MsgSeqNum` it has passed, so a second pass through one
//! channel would decode nothing.
//!
//! Also compiled into the criterion micro-benchmarks (`benches/benches/micro.rs`, group `mdp3`).

use std::hint::black_box;
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;
use mdfan_feed::mdp3::{MSG_SIZE_BYTES, PACKET_HEADER_BYTES};
use mdfan_feed::mdp3_channel::Mdp3Channel;
use mdfan_wire::BookUpdate;

/// The bundled MDP 3.0 capture (relative to the repository root).
pub const CAPTURE: &str = "data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap";
/// Line A's group in that capture.
pub const LINE_A: &str = "224.0.31.11:14320";
/// Line A's packets, messages and book records (the capture's README; `feed/tests/mdp3_capture.rs`).
pub const PACKETS: usize = 5_000;
/// Messages in line A's packets (every template).
pub const MESSAGES: u64 = 5_299;
/// Price-level records line A normalises into (no `RptSeq` gap, so no stale record).
pub const RECORDS: u64 = 5_848;
/// The stand-in journal's size, in records (a power of two).
const RING_RECORDS: usize = 4_096;
/// Securities the channel is sized for up front.
const INSTRUMENTS: usize = 64;

/// Line A's packets, `(receive time in ns, UDP payload)`, in capture order; the counts checked.
pub fn line_a(capture: &Path) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    let cap = mdfan_feed::pcap::read_udp_pcapng(capture)?;
    let a: SocketAddrV4 = LINE_A.parse().expect("a valid address");
    let packets: Vec<(u64, Vec<u8>)> =
        cap.packets.into_iter().filter(|p| p.dst == a).map(|p| (p.ts_ns, p.payload)).collect();
    anyhow::ensure!(
        packets.len() == PACKETS,
        "{}: {} packets on line A, not {PACKETS}",
        capture.display(),
        packets.len()
    );
    Ok(packets)
}

/// The stand-in journal of the decode benches (MDP 3.0 and ITCH): pre-allocated 64-byte records, written round
/// the ring.
pub struct Ring {
    slots: Vec<BookUpdate>,
    next: usize,
}

impl Default for Ring {
    fn default() -> Self {
        Ring { slots: vec![BookUpdate::control(mdfan_wire::Kind::Clear); RING_RECORDS], next: 0 }
    }
}

impl Ring {
    #[inline]
    pub(crate) fn push(&mut self, r: &BookUpdate) {
        self.slots[self.next & (RING_RECORDS - 1)] = *r;
        self.next += 1;
    }
}

/// One pass of decode + normalise into `ring` through a fresh `channel`. Returns the records emitted.
#[inline(never)]
pub fn decode(channel: &mut Mdp3Channel, packets: &[(u64, Vec<u8>)], ring: &mut Ring) -> u64 {
    let mut n = 0u64;
    for (ts, p) in packets {
        n += channel.on_packet(p, *ts, &mut |r| ring.push(r)) as u64;
    }
    n
}

/// A fresh channel, checked to decode line A whole: used before timing.
pub fn channel() -> Mdp3Channel {
    Mdp3Channel::with_capacity(INSTRUMENTS)
}

/// The generated views (build.rs: `sbe_gen` over CME's schema).
#[allow(dead_code, non_camel_case_types, non_snake_case, unused, clippy::all)]
pub mod sbe {
    include!(concat!(env!("OUT_DIR"), "/mdp3_sbe.rs"));
}

/// What the reference reads of one `NoMDEntries` entry (any template): every field mdfan's normalisation uses,
/// written into [`EntryRing`] as mdfan writes its 64-byte records into [`Ring`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    pub transact_time_ns: u64,
    /// Mantissa, exponent -7 (`PRICE`/`PRICENULL`); `i64::MAX` null.
    pub price: i64,
    pub security_id: i32,
    pub rpt_seq: u32,
    pub size: i32,
    pub orders: i32,
    pub level: u8,
    pub action: u8,
    pub entry_type: u8,
    pub template_id: u8,
}

/// The reference's output ring (pre-allocated, written round).
pub struct EntryRing {
    slots: Vec<Entry>,
    next: usize,
}

impl Default for EntryRing {
    fn default() -> Self {
        EntryRing { slots: vec![Entry::default(); RING_RECORDS], next: 0 }
    }
}

impl EntryRing {
    #[inline]
    fn push(&mut self, e: Entry) {
        self.slots[self.next & (RING_RECORDS - 1)] = e;
        self.next += 1;
    }
    /// Entries written so far.
    #[cfg(test)]
    pub fn written(&self) -> u64 {
        self.next as u64
    }
}

/// What one reference pass counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReferenceCounts {
    pub messages: u64,
    /// `NoMDEntries` entries over every template.
    pub entries: u64,
    /// `NoOrderIDEntries` entries (templates 32 and 42), each read (OrderID, and LastQty for 42).
    pub order_entries: u64,
    /// A checksum of the root fields read (SecurityStatus30's, TransactTime of the others) and the order entries.
    pub checksum: u64,
}

/// Entries of line A over every template's `NoMDEntries` (templates 32, 35, 37 and 42: the capture's README,
/// "Per-instrument sequence", 6,195 entries carrying `RptSeq`).
pub const ENTRIES: u64 = 6_195;
/// Order-ID entries of line A (template 42: 166; template 32's groups are empty).
pub const ORDER_ENTRIES: u64 = 166;

/// The reference decoder (issue 25, item 2): the views `sbe_gen` generated from CME's schema, over one packet
/// after the other, reading every field of every entry of the templates line A carries (12, 30, 32, 35, 37, 42;
/// the fields of mdfan's templates table, `feed::mdp3`), each entry written into `out`. Other templates are
/// skipped by `MsgSize`. A message the views refuse (too short for its header, block or group) is an error
/// naming the packet and message.
#[inline(never)]
pub fn reference(packets: &[(u64, Vec<u8>)], out: &mut EntryRing) -> anyhow::Result<ReferenceCounts> {
    use sbe::message_header::MessageHeader;
    let mut c = ReferenceCounts::default();
    for (i, (_, p)) in packets.iter().enumerate() {
        let bad = |what: &str| anyhow::anyhow!("reference: packet {i}: {what}");
        let seq = p.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(|| bad("header"))?;
        c.checksum = c.checksum.wrapping_add(u64::from(seq));
        let mut pos = PACKET_HEADER_BYTES;
        while pos + MSG_SIZE_BYTES <= p.len() {
            let size = usize::from(u16::from_le_bytes([p[pos], p[pos + 1]]));
            let msg = p
                .get(pos + MSG_SIZE_BYTES..pos + size)
                .filter(|_| size >= MSG_SIZE_BYTES)
                .ok_or_else(|| bad("MsgSize"))?;
            pos += size;
            let (h, body) = MessageHeader::parse_prefix(msg).ok_or_else(|| bad("message header"))?;
            c.messages += 1;
            let template = h.template_id.get();
            let ok = match template {
                30 => reference_status(body, h, &mut c),
                32 => reference_book(body, h, out, &mut c),
                35 => reference_statistics(body, h, out, &mut c),
                37 => reference_volume(body, h, out, &mut c),
                42 => reference_trade_summary(body, h, out, &mut c),
                _ => Some(()),
            };
            ok.ok_or_else(|| bad(&format!("template {template} does not fit its views")))?;
        }
    }
    Ok(c)
}

fn reference_status(body: &[u8], h: &sbe::message_header::MessageHeader, c: &mut ReferenceCounts) -> Option<()> {
    let (m, _) = sbe::security_status30::parse_with_header(body, h)?;
    let fields = [
        m.transact_time()?.get(),
        m.security_group()?.iter().fold(0u64, |a, &b| a << 8 | u64::from(b)),
        m.asset()?.iter().fold(0u64, |a, &b| a << 8 | u64::from(b)),
        m.security_id()?.get() as u64,
        u64::from(m.trade_date()?.get()),
        u64::from(m.match_event_indicator()?.0),
        u64::from(m.security_trading_status()?.0),
        u64::from(m.halt_reason()?.0),
        u64::from(m.security_trading_event()?.0),
    ];
    c.checksum = fields.iter().fold(c.checksum, |a, &f| a.wrapping_add(f));
    Some(())
}

fn reference_book(
    body: &[u8],
    h: &sbe::message_header::MessageHeader,
    out: &mut EntryRing,
    c: &mut ReferenceCounts,
) -> Option<()> {
    use sbe::md_incremental_refresh_book32 as m;
    let (root, rest) = m::parse_with_header(body, h)?;
    let transact_time_ns = root.transact_time()?.get();
    c.checksum = c.checksum.wrapping_add(u64::from(root.match_event_indicator()?.0));
    let group = m::parse_no_md_entries(rest)?;
    let mut entries = group.iter();
    for _ in 0..group.count() {
        let e = entries.next()?;
        out.push(Entry {
            transact_time_ns,
            price: e.md_entry_px()?.mantissa.get(),
            size: e.md_entry_size()?.get(),
            security_id: e.security_id()?.get(),
            rpt_seq: e.rpt_seq()?.get(),
            orders: e.number_of_orders()?.get(),
            level: *e.md_price_level()?,
            action: e.md_update_action()?.0,
            entry_type: e.md_entry_type()?.0,
            template_id: 32,
        });
        c.entries += 1;
    }
    let orders = m::parse_no_order_id_entries(entries.remainder())?;
    let mut it = orders.iter();
    for _ in 0..orders.count() {
        let o = it.next()?;
        c.checksum = c.checksum.wrapping_add(o.order_id()?.get());
        c.order_entries += 1;
    }
    Some(())
}

fn reference_statistics(
    body: &[u8],
    h: &sbe::message_header::MessageHeader,
    out: &mut EntryRing,
    c: &mut ReferenceCounts,
) -> Option<()> {
    use sbe::md_incremental_refresh_session_statistics35 as m;
    let (root, rest) = m::parse_with_header(body, h)?;
    let transact_time_ns = root.transact_time()?.get();
    c.checksum = c.checksum.wrapping_add(u64::from(root.match_event_indicator()?.0));
    let group = m::parse_no_md_entries(rest)?;
    let mut entries = group.iter();
    for _ in 0..group.count() {
        let e = entries.next()?;
        out.push(Entry {
            transact_time_ns,
            price: e.md_entry_px()?.mantissa.get(),
            security_id: e.security_id()?.get(),
            rpt_seq: e.rpt_seq()?.get(),
            level: e.open_close_settl_flag()?.0,
            action: e.md_update_action()?.0,
            entry_type: e.md_entry_type()?.0,
            // since version 8: absent from an older block
            size: e.md_entry_size().map_or(i32::MAX, |s| s.get()),
            orders: 0,
            template_id: 35,
        });
        c.entries += 1;
    }
    Some(())
}

fn reference_volume(
    body: &[u8],
    h: &sbe::message_header::MessageHeader,
    out: &mut EntryRing,
    c: &mut ReferenceCounts,
) -> Option<()> {
    use sbe::md_incremental_refresh_volume37 as m;
    let (root, rest) = m::parse_with_header(body, h)?;
    let transact_time_ns = root.transact_time()?.get();
    c.checksum = c.checksum.wrapping_add(u64::from(root.match_event_indicator()?.0));
    let group = m::parse_no_md_entries(rest)?;
    let mut entries = group.iter();
    for _ in 0..group.count() {
        let e = entries.next()?;
        out.push(Entry {
            transact_time_ns,
            size: e.md_entry_size()?.get(),
            security_id: e.security_id()?.get(),
            rpt_seq: e.rpt_seq()?.get(),
            action: e.md_update_action()?.0,
            template_id: 37,
            ..Entry::default()
        });
        c.entries += 1;
    }
    Some(())
}

fn reference_trade_summary(
    body: &[u8],
    h: &sbe::message_header::MessageHeader,
    out: &mut EntryRing,
    c: &mut ReferenceCounts,
) -> Option<()> {
    use sbe::md_incremental_refresh_trade_summary42 as m;
    let (root, rest) = m::parse_with_header(body, h)?;
    let transact_time_ns = root.transact_time()?.get();
    c.checksum = c.checksum.wrapping_add(u64::from(root.match_event_indicator()?.0));
    let group = m::parse_no_md_entries(rest)?;
    let mut entries = group.iter();
    for _ in 0..group.count() {
        let e = entries.next()?;
        out.push(Entry {
            transact_time_ns,
            price: e.md_entry_px()?.mantissa.get(),
            size: e.md_entry_size()?.get(),
            security_id: e.security_id()?.get(),
            rpt_seq: e.rpt_seq()?.get(),
            orders: e.number_of_orders()?.get(),
            entry_type: e.aggressor_side()?.0,
            action: e.md_update_action()?.0,
            template_id: 42,
            level: 0,
        });
        c.entries += 1;
    }
    let orders = m::parse_no_order_id_entries(entries.remainder())?;
    let mut it = orders.iter();
    for _ in 0..orders.count() {
        let o = it.next()?;
        c.checksum = c.checksum.wrapping_add(o.order_id()?.get()).wrapping_add(o.last_qty()?.get() as u64);
        c.order_entries += 1;
    }
    Some(())
}

/// One reference pass, its counts checked against line A's.
pub fn reference_checked(packets: &[(u64, Vec<u8>)], out: &mut EntryRing) -> anyhow::Result<ReferenceCounts> {
    let c = reference(packets, out)?;
    anyhow::ensure!(
        (c.messages, c.entries, c.order_entries) == (MESSAGES, ENTRIES, ORDER_ENTRIES),
        "reference: {c:?}, not {MESSAGES} messages, {ENTRIES} entries, {ORDER_ENTRIES} order entries"
    );
    Ok(c)
}

/// Median ns of a pass of mdfan's decode + normalise and of the reference over line A, `passes` passes each,
/// interleaved pass by pass; every pass's counts checked. Returns (mdfan, reference).
pub fn pass_ns(packets: &[(u64, Vec<u8>)], passes: usize) -> anyhow::Result<(f64, f64)> {
    let mut ring = Ring::default();
    let mut entries = EntryRing::default();
    let (mut mdfan_s, mut ref_s) = (Vec::new(), Vec::new());
    for _ in 0..passes.max(1) {
        let mut ch = channel();
        let t = Instant::now();
        let records = decode(&mut ch, black_box(packets), &mut ring);
        mdfan_s.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(records == RECORDS, "decode: {records} records, not {RECORDS}");
        anyhow::ensure!(ch.counters().bad_packets == 0, "decode: {:?}", ch.last_error());
        let t = Instant::now();
        let c = reference_checked(black_box(packets), &mut entries)?;
        ref_s.push(t.elapsed().as_secs_f64());
        black_box(c.checksum);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e9
    };
    Ok((median(&mut mdfan_s), median(&mut ref_s)))
}

/// Per-packet decode time (TSC around each packet, ns) of mdfan's decode + normalise (`on_packet`) and of the
/// reference over `passes` passes, packet by packet interleaved (mdfan, then the reference, on the same packet), a
/// fresh channel each pass (the first pass is a warm-up and not recorded). Returns (mdfan, reference).
pub fn packet_latency(packets: &[(u64, Vec<u8>)], passes: usize) -> anyhow::Result<(Histogram<u64>, Histogram<u64>)> {
    let clock = quanta::Clock::new();
    let new = || Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds are valid");
    let (mut h, mut hr) = (new(), new());
    let mut ring = Ring::default();
    let mut entries = EntryRing::default();
    for pass in 0..=passes.max(1) {
        let mut ch = channel();
        for packet in packets {
            let t0 = clock.raw();
            let n = ch.on_packet(&packet.1, packet.0, &mut |r| ring.push(r));
            let t1 = clock.raw();
            let c = reference(std::slice::from_ref(packet), &mut entries)?;
            let t2 = clock.raw();
            black_box((n, c.checksum));
            if pass > 0 {
                h.saturating_record(clock.delta_as_nanos(t0, t1).max(1));
                hr.saturating_record(clock.delta_as_nanos(t1, t2).max(1));
            }
        }
        anyhow::ensure!(ch.counters().level_records == RECORDS, "pass {pass}: {:?}", ch.counters());
    }
    Ok((h, hr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_reference_reads_every_entry_of_line_a_with_mdfans_values() {
        let packets = line_a(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(CAPTURE)).unwrap();
        let mut out = EntryRing::default();
        let c = reference_checked(&packets, &mut out).unwrap();
        assert_eq!(out.written(), ENTRIES);
        // the book entries the reference reads are the ones mdfan normalises, in order: over the first 2,000
        // packets (fewer entries than either ring holds), entry i of template 32 is record i
        let (mut out, mut ring) = (EntryRing::default(), Ring::default());
        reference(&packets[..2_000], &mut out).unwrap();
        let records = decode(&mut channel(), &packets[..2_000], &mut ring) as usize;
        let book: Vec<Entry> = out.slots[..out.next].iter().copied().filter(|e| e.template_id == 32).collect();
        assert_eq!(book.len(), records);
        assert!(records > 1_000, "{records}");
        for (e, r) in book.iter().zip(&ring.slots[..records]) {
            assert_eq!((e.security_id as u32, e.price * 100), (r.instrument_id, r.price_e9), "{e:?} {r:?}");
        }
        assert!(c.checksum != 0);
        let (ns_mdfan, ns_ref) = pass_ns(&packets, 2).unwrap();
        assert!(ns_mdfan > 0.0 && ns_ref > 0.0);
    }
}
