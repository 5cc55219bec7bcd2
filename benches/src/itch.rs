//! Nasdaq TotalView-ITCH 5.0 decode speed against a real decoder (issue 25, item 2), the same bytes in the same
//! run, in memory, on one core. Two inputs:
//!
//! - the bundled snippet (`data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50`: 1,000
//!   messages of dense order flow from 09:30:00, 35,570 bytes of BinaryFILE framing);
//! - a synthetic day-shaped stream ([`synthetic`]): 1,000,000 orders added first (the build-up, untimed), then
//!   [`STEADY_MESSAGES`] messages of the mix a trading day has (adds, deletes, replaces, executions, cancels,
//!   trades) over the million live orders, each reference picked at random among them, so the order tables miss
//!   the cache as in production. Only the steady part is timed.
//!
//! Three decoders read each input:
//!
//! - `mdfan.itch_decode`: the publisher's path: [`ItchFile::next_into`] over the bytes (its 256 KiB window, a
//!   message decoded in place and normalised, the next message's order-table line prefetched) with the order
//!   reference table sized as the publisher sizes it (room for 2^20 resting orders), each record copied into a
//!   pre-allocated ring of 4,096 64-byte records (the journal's stand-in).
//! - `baseline.itch5_hashmap` (the reference): the `itch5` crate's zero-copy parse (`itch5::Parser`, one handler
//!   call per message) plus a `std` `HashMap` order table of the same capacity that yields the same information
//!   for every message that references an order: its locate, side, price and remaining shares (adds insert,
//!   executions and cancels take shares off, deletes and replaces remove, replaces insert the new reference), each
//!   such result written into a ring of the same size.
//! - `baseline.itch5_parse` (a floor, not a target): `itch5`'s parse alone, reading one field per message.
//!
//! Figures: `<decoder>.<input>.ns_per_message` (median pass), and the target's
//! `ratio.mdfan.itch_decode_vs_baseline.itch5_hashmap.<input>` (time over time: at most 1.0). Rounds interleave
//! the three, pass by pass. Before each pass the tables are emptied untimed, as a start of day (System Event `O`)
//! does ([`reset`]), keeping their pages mapped.
//!
//! Instructions per message (`valgrind --tool=callgrind`, which does not move with the host's noise): the
//! `decode` subcommand runs one decoder over one input inside a function of its own that callgrind collects alone
//! (`--toggle-collect`), see `crate::callgrind`.
//!
//! Also compiled into the criterion micro-benchmarks (`benches/benches/micro.rs`, group `itch`).

use std::collections::HashMap;
use std::hint::black_box;
use std::io::Read;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::mdp3::Ring;
use itch5::messages as m5;
use mdfan_feed::itch::{eastern_midnight_ns, Body, Header, ItchFile, ItchNormalizer, Message, LENGTH_PREFIX_BYTES};

/// The bundled snippet (relative to the repository root).
pub const SNIPPET: &str = "data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50";
/// Messages in the snippet (its README).
pub const MESSAGES: u64 = 1_000;
/// Message bytes in the snippet, length prefixes excluded (35,570 - 2 x 1,000).
#[cfg(test)]
pub const MESSAGE_BYTES: u64 = 33_570;
/// Records the snippet normalises into: 560 `Add` (A 367, F 193), 28 `Cancel` (the D of orders added inside
/// it), 8 `Trade` (P 4, Q 4) and 216 `InstrumentStale` (one per locate whose first reference was to an order
/// added before 09:30: the README's 399 unknown references fall on 216 locates), checked by hand with a separate
/// walk of the file.
pub const RECORDS: u64 = 812;
/// Messages of the snippet the reference table answers (an order it knows): the 560 adds and the 28 deletes of
/// orders added inside it (the other references are to orders added before 09:30).
pub const SNIPPET_ANSWERS: u64 = 588;
/// Resting orders the normaliser is sized for, as the publisher does (`Publisher::bind`).
pub const ORDER_CAPACITY: usize = 1 << 20;
/// Orders live in the synthetic stream once its build-up is done.
pub const LIVE_ORDERS: usize = 1_000_000;
/// Messages of the synthetic stream after the build-up (the timed part).
pub const STEADY_MESSAGES: usize = 1_000_000;
/// Stock locates the synthetic stream spreads its orders over (Nasdaq lists about 8,000 to 9,000).
const SYNTHETIC_LOCATES: u16 = 8_192;

/// The snippet's bytes, the message count checked.
pub fn snippet(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (messages, _) = walk(&bytes);
    anyhow::ensure!(messages == MESSAGES, "{}: {messages} messages, not {MESSAGES}", path.display());
    Ok(bytes)
}

/// The length prefixes walked and summed: the messages' count and bytes. Returns (messages, message bytes).
pub fn walk(file: &[u8]) -> (u64, u64) {
    let (mut messages, mut bytes, mut pos) = (0u64, 0u64, 0usize);
    while pos + LENGTH_PREFIX_BYTES <= file.len() {
        let len = usize::from(u16::from_be_bytes([file[pos], file[pos + 1]]));
        messages += 1;
        bytes += len as u64;
        pos += LENGTH_PREFIX_BYTES + len;
    }
    (messages, bytes)
}

/// One input: the bytes before the timed part (played untimed before each pass: the synthetic build-up; empty
/// for the snippet) and the timed part, with what a pass over the timed part must give.
pub struct Input {
    pub name: &'static str,
    pub build_up: Arc<[u8]>,
    pub timed: Arc<[u8]>,
    pub messages: u64,
    /// mdfan's records over the timed part.
    pub records: u64,
    /// Messages of the timed part the reference's order table answers.
    pub answers: u64,
}

impl Input {
    /// The bundled snippet.
    pub fn snippet(path: &Path) -> anyhow::Result<Input> {
        Ok(Input {
            name: "snippet",
            build_up: Arc::from(&[][..]),
            timed: snippet(path)?.into(),
            messages: MESSAGES,
            records: RECORDS,
            answers: SNIPPET_ANSWERS,
        })
    }
}

/// xorshift64*: deterministic, seeded, fast.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// The synthetic day-shaped stream (module docs): [`LIVE_ORDERS`] adds (A and F, references increasing as
/// Nasdaq's do), then `steady` messages: 39% adds, 36% deletes, 9% replaces, 6% executions (half of them of the
/// whole order), 5% partial cancels, 3% executions with price (partial), 2% non-displayed trades, each reference
/// picked uniformly among the live orders. Timestamps from 09:30:00 on, 1 µs apart. Every reference is to a live
/// order and every cancel or execution takes fewer shares than rest, so mdfan's normaliser emits no stale mark.
pub fn synthetic(steady: usize, seed: u64) -> Input {
    let mut rng = Rng(seed | 1);
    // live orders: (reference, shares), swap-removed
    let mut live: Vec<(u64, u32)> = Vec::with_capacity(LIVE_ORDERS + steady);
    let mut next_ref = 1u64;
    let mut ts = 34_200_000_000_000u64; // 09:30:00
    let (mut build_up, mut timed) = (Vec::with_capacity(LIVE_ORDERS * 40), Vec::with_capacity(steady * 36));
    let header = |out: &mut Vec<u8>, len: usize, tag: u8, locate: u16, ts: u64| {
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.push(tag);
        out.extend_from_slice(&locate.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&ts.to_be_bytes()[2..]);
    };
    let add = |out: &mut Vec<u8>, rng: &mut Rng, live: &mut Vec<(u64, u32)>, next_ref: &mut u64, ts: u64| {
        let locate = 1 + rng.below(u64::from(SYNTHETIC_LOCATES)) as u16;
        let mpid = rng.below(3) == 0;
        let shares = 100 * (1 + rng.below(20) as u32);
        let price = 10_000 + rng.below(5_000_000) as u32;
        header(out, if mpid { 40 } else { 36 }, if mpid { b'F' } else { b'A' }, locate, ts);
        out.extend_from_slice(&next_ref.to_be_bytes());
        out.push(if rng.below(2) == 0 { b'B' } else { b'S' });
        out.extend_from_slice(&shares.to_be_bytes());
        out.extend_from_slice(b"SYNTH   ");
        out.extend_from_slice(&price.to_be_bytes());
        if mpid {
            out.extend_from_slice(b"NSDQ");
        }
        live.push((*next_ref, shares));
        *next_ref += 1;
    };
    for _ in 0..LIVE_ORDERS {
        add(&mut build_up, &mut rng, &mut live, &mut next_ref, ts);
        ts += 10;
    }
    let mut records = 0u64;
    for _ in 0..steady {
        ts += 1_000;
        let pick = rng.below(100);
        let i = rng.below(live.len() as u64) as usize;
        let (order_ref, shares) = live[i];
        let locate = 0; // mdfan and the reference take the locate from the resting order, not the message
        match pick {
            0..=38 => {
                add(&mut timed, &mut rng, &mut live, &mut next_ref, ts);
                records += 1;
            }
            39..=74 => {
                header(&mut timed, 19, b'D', locate, ts);
                timed.extend_from_slice(&order_ref.to_be_bytes());
                live.swap_remove(i);
                records += 1;
            }
            75..=83 => {
                let new_shares = 100 * (1 + rng.below(20) as u32);
                header(&mut timed, 35, b'U', locate, ts);
                timed.extend_from_slice(&order_ref.to_be_bytes());
                timed.extend_from_slice(&next_ref.to_be_bytes());
                timed.extend_from_slice(&new_shares.to_be_bytes());
                timed.extend_from_slice(&(10_000 + rng.below(5_000_000) as u32).to_be_bytes());
                live[i] = (next_ref, new_shares);
                next_ref += 1;
                records += 2;
            }
            84..=89 => {
                let whole = rng.below(2) == 0 || shares <= 1;
                let taken = if whole { shares } else { 1 + rng.below(u64::from(shares - 1)) as u32 };
                header(&mut timed, 31, b'E', locate, ts);
                timed.extend_from_slice(&order_ref.to_be_bytes());
                timed.extend_from_slice(&taken.to_be_bytes());
                timed.extend_from_slice(&next_ref.to_be_bytes()); // match number
                if whole {
                    live.swap_remove(i);
                } else {
                    live[i].1 -= taken;
                }
                records += 2;
            }
            90..=97 if shares > 1 => {
                let taken = 1 + rng.below(u64::from(shares - 1)) as u32;
                if pick <= 94 {
                    header(&mut timed, 23, b'X', locate, ts);
                    timed.extend_from_slice(&order_ref.to_be_bytes());
                    timed.extend_from_slice(&taken.to_be_bytes());
                    records += 1;
                } else {
                    header(&mut timed, 36, b'C', locate, ts);
                    timed.extend_from_slice(&order_ref.to_be_bytes());
                    timed.extend_from_slice(&taken.to_be_bytes());
                    timed.extend_from_slice(&next_ref.to_be_bytes());
                    timed.push(b'Y');
                    timed.extend_from_slice(&(10_000 + rng.below(5_000_000) as u32).to_be_bytes());
                    records += 2;
                }
                live[i].1 -= taken;
            }
            _ => {
                // a non-displayed trade (P): no resting order, order reference 0
                header(&mut timed, 44, b'P', 1 + rng.below(u64::from(SYNTHETIC_LOCATES)) as u16, ts);
                timed.extend_from_slice(&0u64.to_be_bytes());
                timed.push(b'B');
                timed.extend_from_slice(&100u32.to_be_bytes());
                timed.extend_from_slice(b"SYNTH   ");
                timed.extend_from_slice(&12_345u32.to_be_bytes());
                timed.extend_from_slice(&next_ref.to_be_bytes());
                records += 1;
            }
        }
    }
    let (messages, _) = walk(&timed);
    // every message but the trades (P) references an order the table holds; a replace answers twice (the old
    // order gone, the new one added)
    let answers = messages - count_type(&timed, b'P') + count_type(&timed, b'U');
    Input { name: "synthetic", build_up: build_up.into(), timed: timed.into(), messages, records, answers }
}

fn count_type(file: &[u8], tag: u8) -> u64 {
    let (mut n, mut pos) = (0, 0);
    while pos + LENGTH_PREFIX_BYTES < file.len() {
        let len = usize::from(u16::from_be_bytes([file[pos], file[pos + 1]]));
        n += u64::from(file[pos + LENGTH_PREFIX_BYTES] == tag);
        pos += LENGTH_PREFIX_BYTES + len;
    }
    n
}

/// A fresh normaliser for the snippet's day, sized as the publisher's.
pub fn normalizer() -> ItchNormalizer {
    ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).expect("a valid date"), ORDER_CAPACITY)
}

/// Empties `norm`'s reference table and stale marks as the start of a day does (System Event `O`), keeping its
/// memory: the next pass runs on a table whose pages are already mapped, as a publisher's is after its first
/// minutes. (A fresh table's first inserts each fault in a page of its 2^20-order allocation, which costs more
/// than the decoding: measured once, 1 ms per pass instead of tens of us. That is a start-of-day cost, not the
/// steady state.)
pub fn reset(norm: &mut ItchNormalizer) {
    let start_of_messages = Message {
        header: Header { msg_type: b'S', ..Header::default() },
        body: Body::SystemEvent { event_code: b'O' },
    };
    norm.normalize(&start_of_messages, 0, 0);
}

/// An input's bytes as an [`ItchFile`]'s source: shared, read from the start by each pass.
#[derive(Clone)]
pub struct Bytes {
    data: Arc<[u8]>,
    pos: usize,
}

impl Bytes {
    pub fn new(data: &Arc<[u8]>) -> Bytes {
        Bytes { data: Arc::clone(data), pos: 0 }
    }
}

impl Read for Bytes {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

/// A reader of inputs for mdfan: one [`ItchFile`] whose window is allocated once, as the publisher's is once per
/// file.
pub fn itch_file() -> ItchFile<Bytes> {
    ItchFile::from_reader(Path::new("bench"), Bytes::new(&Arc::from(&[][..])))
}

/// mdfan: one pass of [`ItchFile`] + decode + normalise into `ring` over `file`, as the publisher's feed thread
/// runs it. Returns the records emitted, or the first error.
#[inline(never)]
pub fn mdfan_pass(
    reader: &mut ItchFile<Bytes>,
    norm: &mut ItchNormalizer,
    file: &Arc<[u8]>,
    ring: &mut Ring,
) -> anyhow::Result<u64> {
    reader.restart(Bytes::new(file));
    let (mut n, mut venue_seq) = (0u64, 0u64);
    let mut records = mdfan_feed::itch::Records::default();
    while reader.next_into(norm, venue_seq.wrapping_add(1), &mut records)?.is_some() {
        venue_seq = venue_seq.wrapping_add(1);
        for r in records.as_slice() {
            ring.push(r);
            n += 1;
        }
    }
    Ok(n)
}

/// The largest MoldUDP64 packet [`mold_packets`] makes, bytes (a 1,500-byte MTU less IPv4 and UDP headers, rounded
/// down).
#[allow(dead_code)] // (the criterion micro bench's, `benches/benches/micro.rs`; not in `mdfan-bench run`)
pub const MOLD_PACKET_BYTES: usize = 1_400;

/// `file`'s messages (BinaryFILE framing) as MoldUDP64 downstream packets of at most [`MOLD_PACKET_BYTES`]: a
/// 20-byte header (session `BENCH`, sequence number, message count), then the message blocks, which are framed as
/// in the file. The live feed's framing, for [`mold_pass`].
#[allow(dead_code)] // as MOLD_PACKET_BYTES
pub fn mold_packets(file: &[u8]) -> Vec<Vec<u8>> {
    let mut packets: Vec<Vec<u8>> = Vec::new();
    let (mut pos, mut seq) = (0usize, 1u64);
    while pos + LENGTH_PREFIX_BYTES <= file.len() {
        let len = LENGTH_PREFIX_BYTES + usize::from(u16::from_be_bytes([file[pos], file[pos + 1]]));
        let full = packets.last().is_none_or(|p| p.len() + len > MOLD_PACKET_BYTES);
        if full {
            let mut p = Vec::with_capacity(MOLD_PACKET_BYTES);
            p.extend_from_slice(b"BENCH     ");
            p.extend_from_slice(&seq.to_be_bytes());
            p.extend_from_slice(&0u16.to_be_bytes());
            packets.push(p);
        }
        let p = packets.last_mut().expect("a packet");
        p.extend_from_slice(&file[pos..pos + len]);
        let count = u16::from_be_bytes([p[18], p[19]]) + 1;
        p[18..20].copy_from_slice(&count.to_be_bytes());
        (pos, seq) = (pos + len, seq + 1);
    }
    packets
}

/// mdfan's live path over `packets` in order (the session receiver's bookkeeping aside: no loss, no line B):
/// each packet's messages decoded and normalised in place into `ring`, the packet's order-table lines prefetched
/// first ([`ItchNormalizer::prefetch_packet`], as `publisher::live_itch` does) or not. Returns the records.
#[allow(dead_code)] // as MOLD_PACKET_BYTES
#[inline(never)]
pub fn mold_pass(
    norm: &mut ItchNormalizer,
    packets: &[Vec<u8>],
    ring: &mut Ring,
    prefetch: bool,
) -> anyhow::Result<u64> {
    let mut records = mdfan_feed::itch::Records::default();
    let mut n = 0u64;
    for p in packets {
        if prefetch {
            norm.prefetch_packet(p);
        }
        let mut seq = u64::from_be_bytes(p[10..18].try_into().expect("8 bytes"));
        let mut at = mdfan_feed::moldudp64::HEADER_BYTES;
        while at + LENGTH_PREFIX_BYTES <= p.len() {
            let len = usize::from(u16::from_be_bytes([p[at], p[at + 1]]));
            let message = &p[at + LENGTH_PREFIX_BYTES..at + LENGTH_PREFIX_BYTES + len];
            norm.normalize_bytes(message, seq, 0, seq, &mut records).map_err(|e| anyhow::anyhow!("{e}"))?;
            for r in records.as_slice() {
                ring.push(r);
                n += 1;
            }
            (at, seq) = (at + LENGTH_PREFIX_BYTES + len, seq + 1);
        }
    }
    Ok(n)
}

/// What the reference order table remembers of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefOrder {
    pub locate: u16,
    pub side: u8,
    pub price: u32,
    pub shares: u32,
}

/// What the reference yields for a message that references an order it holds: the order's reference, its
/// locate, side and price, the shares it has left (0: gone), and the message's timestamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer {
    pub order_ref: u64,
    pub timestamp_ns: u64,
    pub price: u32,
    pub shares: u32,
    pub locate: u16,
    pub side: u8,
}

/// The reference's output ring (pre-allocated, written round), the stand-in for mdfan's.
pub struct AnswerRing {
    slots: Vec<Answer>,
    next: usize,
}

impl Default for AnswerRing {
    fn default() -> Self {
        AnswerRing { slots: vec![Answer::default(); 4_096], next: 0 }
    }
}

impl AnswerRing {
    #[inline]
    fn push(&mut self, a: Answer) {
        let i = self.next & (self.slots.len() - 1);
        self.slots[i] = a;
        self.next += 1;
    }
    /// Answers written so far.
    pub fn written(&self) -> u64 {
        self.next as u64
    }
}

/// The reference: `itch5`'s parse handing each message to this handler, a `std` `HashMap` order table.
pub struct Reference {
    pub orders: HashMap<u64, RefOrder>,
    pub out: AnswerRing,
}

impl Reference {
    /// A table of [`ORDER_CAPACITY`] orders, as mdfan's.
    pub fn new() -> Reference {
        Reference { orders: HashMap::with_capacity(ORDER_CAPACITY), out: AnswerRing::default() }
    }

    #[inline]
    fn answer(&mut self, order_ref: u64, o: RefOrder, ts: &m5::Timestamp) {
        self.out.push(Answer {
            order_ref,
            timestamp_ns: ts.to_u64(),
            price: o.price,
            shares: o.shares,
            locate: o.locate,
            side: o.side,
        });
    }

    #[inline]
    fn add(&mut self, order_ref: u64, o: RefOrder, ts: &m5::Timestamp) {
        if self.orders.insert(order_ref, o).is_none() {
            self.answer(order_ref, o, ts);
        }
    }

    #[inline]
    fn take(&mut self, order_ref: u64, shares: u32, ts: &m5::Timestamp) {
        if let Some(o) = self.orders.get_mut(&order_ref) {
            o.shares = o.shares.saturating_sub(shares);
            let left = *o;
            if left.shares == 0 {
                self.orders.remove(&order_ref);
            }
            self.answer(order_ref, left, ts);
        }
    }
}

impl Default for Reference {
    fn default() -> Self {
        Reference::new()
    }
}

fn side_byte(s: m5::BuySellIndicator) -> u8 {
    match s {
        m5::BuySellIndicator::Buy => b'B',
        m5::BuySellIndicator::Sell => b'S',
        m5::BuySellIndicator::Unknown(c) => c,
    }
}

/// An add (A or F, the same fields): the order as the reference table keeps it.
macro_rules! ref_order {
    ($m:expr) => {
        RefOrder {
            locate: $m.stock_locate(),
            side: side_byte($m.buy_sell_indicator()),
            price: $m.price().into_u32(),
            shares: $m.shares(),
        }
    };
}

impl itch5::MessageHandler for Reference {
    fn on_add_order_no_mpid_attribution(&mut self, m: &m5::AddOrderNoMPIDAttribution) -> ControlFlow<()> {
        self.add(m.order_reference_number(), ref_order!(m), m.timestamp());
        ControlFlow::Continue(())
    }
    fn on_add_order_with_mpid_attribution(&mut self, m: &m5::AddOrderWithMPIDAttribution) -> ControlFlow<()> {
        self.add(m.order_reference_number(), ref_order!(m), m.timestamp());
        ControlFlow::Continue(())
    }
    fn on_order_executed(&mut self, m: &m5::OrderExecuted) -> ControlFlow<()> {
        self.take(m.order_reference_number(), m.executed_shares(), m.timestamp());
        ControlFlow::Continue(())
    }
    fn on_order_executed_with_price(&mut self, m: &m5::OrderExecutedWithPrice) -> ControlFlow<()> {
        self.take(m.order_reference_number(), m.executed_shares(), m.timestamp());
        ControlFlow::Continue(())
    }
    fn on_order_cancel(&mut self, m: &m5::OrderCancel) -> ControlFlow<()> {
        self.take(m.order_reference_number(), m.cancelled_shares(), m.timestamp());
        ControlFlow::Continue(())
    }
    fn on_order_delete(&mut self, m: &m5::OrderDelete) -> ControlFlow<()> {
        let order_ref = m.order_reference_number();
        if let Some(o) = self.orders.remove(&order_ref) {
            self.answer(order_ref, RefOrder { shares: 0, ..o }, m.timestamp());
        }
        ControlFlow::Continue(())
    }
    fn on_order_replace(&mut self, m: &m5::OrderReplace) -> ControlFlow<()> {
        let old = m.original_order_reference_number();
        if let Some(o) = self.orders.remove(&old) {
            self.answer(old, RefOrder { shares: 0, ..o }, m.timestamp());
            let new = RefOrder { price: m.price().into_u32(), shares: m.shares(), ..o };
            self.add(m.new_order_reference_number(), new, m.timestamp());
        }
        ControlFlow::Continue(())
    }
}

/// The reference: one pass of `itch5`'s parse + the `HashMap` table over `file`. Returns the answers written.
#[inline(never)]
pub fn reference_pass(r: &mut Reference, file: &[u8]) -> anyhow::Result<u64> {
    let before = r.out.written();
    itch5::Parser::new(file).parse_stream(r).map_err(|e| anyhow::anyhow!("itch5: {e:?}"))?;
    Ok(r.out.written() - before)
}

/// The floor: `itch5`'s parse alone, every message handed to a handler that reads its stock locate into a sum
/// (so that nothing is optimised away). Returns the messages parsed.
#[inline(never)]
pub fn parse_pass(file: &[u8]) -> anyhow::Result<u64> {
    struct Count(u64, u64);
    macro_rules! count {
        ($($f:ident: $t:ty => $locate:ident),* $(,)?) => {
            impl itch5::MessageHandler for Count {
                $(fn $f(&mut self, m: &$t) -> ControlFlow<()> {
                    self.0 += 1;
                    self.1 = self.1.wrapping_add(u64::from(m.$locate()));
                    ControlFlow::Continue(())
                })*
            }
        };
    }
    count!(
        on_system_event: m5::SystemEvent => stock_locate,
        on_stock_directory: m5::StockDirectory => stock_locate,
        on_stock_trading_action: m5::StockTradingAction => stock_locate,
        on_reg_sho_restriction: m5::RegSHORestriction => locate_code,
        on_market_participant_position: m5::MarketParticipantPosition => stock_locate,
        on_mwcb_decline_level: m5::MWCBDeclineLevel => stock_locate,
        on_mwcb_status: m5::MWCBStatus => stock_locate,
        on_quoting_period_update: m5::QuotingPeriodUpdate => stock_locate,
        on_luld_auction_collar: m5::LULDAuctionCollar => stock_locate,
        on_operational_halt: m5::OperationalHalt => stock_locate,
        on_add_order_no_mpid_attribution: m5::AddOrderNoMPIDAttribution => stock_locate,
        on_add_order_with_mpid_attribution: m5::AddOrderWithMPIDAttribution => stock_locate,
        on_order_executed: m5::OrderExecuted => stock_locate,
        on_order_executed_with_price: m5::OrderExecutedWithPrice => stock_locate,
        on_order_cancel: m5::OrderCancel => stock_locate,
        on_order_delete: m5::OrderDelete => stock_locate,
        on_order_replace: m5::OrderReplace => stock_locate,
        on_trade: m5::Trade => stock_locate,
        on_cross_trade: m5::CrossTrade => stock_locate,
        on_broken_trade: m5::BrokenTrade => stock_locate,
        on_net_order_imbalance_indicator: m5::NetOrderImbalanceIndicator => stock_locate,
        on_retail_price_improvement_indicator: m5::RetailPriceImprovementIndicator => stock_locate,
        on_direct_listing_with_capital_raise_price_discovery: m5::DirectListingwithCapitalRaisePriceDiscovery => stock_locate,
    );
    let mut c = Count(0, 0);
    itch5::Parser::new(file).parse_stream(&mut c).map_err(|e| anyhow::anyhow!("itch5: {e:?}"))?;
    black_box(c.1);
    Ok(c.0)
}

/// The three decoders, by the key stem their figures carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    Mdfan,
    Reference,
    Parse,
}

impl Decoder {
    pub const ALL: [Decoder; 3] = [Decoder::Mdfan, Decoder::Reference, Decoder::Parse];
    /// The figure stem: `mdfan.itch_decode`, `baseline.itch5_hashmap`, `baseline.itch5_parse`.
    pub fn key(self) -> &'static str {
        match self {
            Decoder::Mdfan => "mdfan.itch_decode",
            Decoder::Reference => "baseline.itch5_hashmap",
            Decoder::Parse => "baseline.itch5_parse",
        }
    }
    /// The name `decode --decoder` takes.
    pub fn arg(self) -> &'static str {
        match self {
            Decoder::Mdfan => "mdfan",
            Decoder::Reference => "itch5_hashmap",
            Decoder::Parse => "itch5_parse",
        }
    }
}

/// One decoder's state across passes: the tables stay allocated (and their pages mapped), emptied before each pass.
pub struct Bench {
    file: ItchFile<Bytes>,
    norm: ItchNormalizer,
    ring: Ring,
    reference: Reference,
}

impl Default for Bench {
    fn default() -> Self {
        Bench { file: itch_file(), norm: normalizer(), ring: Ring::default(), reference: Reference::new() }
    }
}

impl Bench {
    /// Empties `d`'s table and plays `input`'s build-up through it (untimed).
    pub fn prepare(&mut self, d: Decoder, input: &Input) -> anyhow::Result<()> {
        match d {
            Decoder::Mdfan => {
                reset(&mut self.norm);
                let n = mdfan_pass(&mut self.file, &mut self.norm, &input.build_up, &mut self.ring)?;
                anyhow::ensure!(n == walk(&input.build_up).0, "mdfan build-up: {n} records");
            }
            Decoder::Reference => {
                self.reference.orders.clear();
                let n = reference_pass(&mut self.reference, &input.build_up)?;
                anyhow::ensure!(n == walk(&input.build_up).0, "reference build-up: {n} answers");
            }
            Decoder::Parse => {}
        }
        Ok(())
    }

    /// The timed part through `d` once; checks its count.
    #[inline(never)]
    pub fn run(&mut self, d: Decoder, input: &Input) -> anyhow::Result<()> {
        let (got, want, what) = match d {
            Decoder::Mdfan => (
                mdfan_pass(&mut self.file, &mut self.norm, black_box(&input.timed), &mut self.ring)?,
                input.records,
                "records",
            ),
            Decoder::Reference => {
                (reference_pass(&mut self.reference, black_box(&input.timed))?, input.answers, "answers")
            }
            Decoder::Parse => (parse_pass(black_box(&input.timed))?, input.messages, "messages"),
        };
        anyhow::ensure!(got == want, "{} over the {}: {got} {what}, not {want}", d.key(), input.name);
        Ok(())
    }
}

/// Median ns per message of each decoder over `passes` passes of `input`, interleaved pass by pass.
pub fn ns_per_message(input: &Input, passes: usize) -> anyhow::Result<[f64; 3]> {
    let mut b = Bench::default();
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..passes.max(1) {
        for (i, d) in Decoder::ALL.into_iter().enumerate() {
            b.prepare(d, input)?;
            let t = Instant::now();
            b.run(d, input)?;
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    Ok(times.map(|mut v| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e9 / input.messages as f64
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snippet_input() -> Input {
        Input::snippet(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(SNIPPET)).unwrap()
    }

    #[test]
    fn the_snippet_decodes_to_its_records_and_the_reference_answers_the_same_orders() {
        let input = snippet_input();
        assert_eq!(input.timed.len(), 35_570);
        assert_eq!(walk(&input.timed), (MESSAGES, MESSAGE_BYTES));
        let mut ring = Ring::default();
        assert_eq!(mdfan_pass(&mut itch_file(), &mut normalizer(), &input.timed, &mut ring).unwrap(), RECORDS);
        let mut r = Reference::new();
        assert_eq!(reference_pass(&mut r, &input.timed).unwrap(), SNIPPET_ANSWERS);
        // the 560 adds rest, less the 28 deleted
        assert_eq!(r.orders.len(), 532);
        assert_eq!(parse_pass(&input.timed).unwrap(), MESSAGES);
        let ns = ns_per_message(&input, 3).unwrap();
        assert!(ns.iter().all(|&v| v > 0.0));
    }

    #[test]
    fn the_synthetic_stream_keeps_a_million_orders_and_both_tables_agree_on_every_one() {
        let input = synthetic(20_000, 7);
        assert_eq!(walk(&input.build_up).0, LIVE_ORDERS as u64);
        assert_eq!(input.messages, 20_000);
        let mut norm = normalizer();
        let mut ring = Ring::default();
        let mut file = itch_file();
        assert_eq!(mdfan_pass(&mut file, &mut norm, &input.build_up, &mut ring).unwrap(), LIVE_ORDERS as u64);
        assert_eq!(mdfan_pass(&mut file, &mut norm, &input.timed, &mut ring).unwrap(), input.records);
        // no stale mark: every reference was known and no execution took more than rests
        assert_eq!(norm.stats().unknown_references(), 0);
        assert_eq!(norm.stats().too_many_shares, 0);
        let mut r = Reference::new();
        reference_pass(&mut r, &input.build_up).unwrap();
        assert_eq!(reference_pass(&mut r, &input.timed).unwrap(), input.answers);
        assert_eq!(r.orders.len(), norm.resting_orders());
        assert!((990_000..1_010_000).contains(&r.orders.len()), "{} live", r.orders.len());
        assert_eq!(parse_pass(&input.timed).unwrap(), input.messages);
    }
}
