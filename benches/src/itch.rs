//! Nasdaq TotalView-ITCH 5.0 decode speed (issue 14, "Speed"), over the bundled 2019-12-30 snippet
//! (`data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50`: 1,000 messages of dense
//! order flow from 09:30:00, 35,570 bytes of BinaryFILE framing), in memory, on one core:
//!
//! - `baseline.itch_walk`: the floor of any decoder: walk the messages by their 2-byte big-endian length
//!   prefixes, summing the lengths. Nothing is decoded.
//! - `mdfan.itch_decode`: [`decode_message`] and [`ItchNormalizer::normalize`] (the order reference table, up to
//!   three 64-byte records per message) with each record copied into a pre-allocated ring of 4,096 records, a
//!   stand-in for the publisher's journal (its slot copy, without the seqlock stamps and the readers).
//!
//! Both run the same bytes the same number of passes, interleaved pass by pass, so the ratio
//! (`ratio.mdfan.itch_decode_vs_baseline.itch_walk.rate`, messages/s over messages/s; target >= 0.5) compares
//! them under the same load. The normaliser is sized as the publisher sizes it (room for 2^20 resting orders)
//! and emptied before each pass, untimed, as a start of day (System Event `O`) does ([`reset`]): a second pass
//! through a full one would find every reference of the first still resting. The absolute messages/s depend on the host; `mdfan-bench run` records
//! its CPU model beside them.
//!
//! Also compiled into the criterion micro-benchmarks (`benches/benches/micro.rs`, group `itch`).

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use crate::mdp3::Ring;
use mdfan_feed::itch::{
    decode_message, eastern_midnight_ns, Body, Header, ItchNormalizer, Message, LENGTH_PREFIX_BYTES,
};

/// The bundled snippet (relative to the repository root).
pub const SNIPPET: &str = "data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50";
/// Messages in the snippet (its README).
pub const MESSAGES: u64 = 1_000;
/// Message bytes in the snippet, length prefixes excluded (35,570 - 2 x 1,000).
pub const MESSAGE_BYTES: u64 = 33_570;
/// Records the snippet normalises into: 560 `Add` (A 367, F 193), 28 `Cancel` (the D of orders added inside
/// it), 8 `Trade` (P 4, Q 4) and 216 `InstrumentStale` (one per locate whose first reference was to an order
/// added before 09:30: the README's 399 unknown references fall on 216 locates), checked by hand with a separate
/// walk of the file.
pub const RECORDS: u64 = 812;
/// Resting orders the normaliser is sized for, as the publisher does (`Publisher::bind`).
const ORDER_CAPACITY: usize = 1 << 20;

/// The snippet's bytes, the message count checked.
pub fn snippet(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (messages, _) = walk(&bytes);
    anyhow::ensure!(messages == MESSAGES, "{}: {messages} messages, not {MESSAGES}", path.display());
    Ok(bytes)
}

/// The baseline: the length prefixes walked and summed. Returns (messages, message bytes).
#[inline(never)]
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

/// One pass of decode + normalise into `ring` through `norm`: every message framed in `file`. Returns the records
/// emitted, or the first decode error.
#[inline(never)]
pub fn decode(norm: &mut ItchNormalizer, file: &[u8], ring: &mut Ring) -> anyhow::Result<u64> {
    let (mut n, mut pos, mut venue_seq) = (0u64, 0usize, 0u32);
    let mut records = mdfan_feed::itch::Records::default();
    while pos + LENGTH_PREFIX_BYTES <= file.len() {
        let len = usize::from(u16::from_be_bytes([file[pos], file[pos + 1]]));
        let body = file.get(pos + LENGTH_PREFIX_BYTES..pos + LENGTH_PREFIX_BYTES + len).unwrap_or(&[]);
        let m = decode_message(body, pos as u64)?;
        venue_seq = venue_seq.wrapping_add(1);
        norm.normalize_into(&m, venue_seq, 0, &mut records);
        for r in records.as_slice() {
            ring.push(r);
            n += 1;
        }
        pos += LENGTH_PREFIX_BYTES + len;
    }
    Ok(n)
}

/// What [`rates`] measured (medians over the passes).
pub struct Rates {
    pub walk_messages_per_s: f64,
    pub decode_messages_per_s: f64,
    pub decode_records_per_s: f64,
}

/// `passes` passes of each, interleaved; the median pass of each. Checks every pass's counts.
pub fn rates(file: &[u8], passes: usize) -> anyhow::Result<Rates> {
    let mut ring = Ring::default();
    let (mut walk_s, mut decode_s) = (Vec::new(), Vec::new());
    let mut norm = normalizer();
    // one untimed pass first: the reference table's pages mapped (see `reset`)
    decode(&mut norm, file, &mut ring)?;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let (messages, bytes) = black_box(walk(black_box(file)));
        walk_s.push(t.elapsed().as_secs_f64());
        anyhow::ensure!((messages, bytes) == (MESSAGES, MESSAGE_BYTES), "walk: {messages} messages, {bytes} bytes");
        reset(&mut norm); // untimed
        let t = Instant::now();
        let records = decode(&mut norm, black_box(file), &mut ring)?;
        decode_s.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(records == RECORDS, "decode: {records} records, not {RECORDS}");
    }
    let passes = walk_s.len() as u64 + 1;
    anyhow::ensure!(ring.written() == RECORDS * passes, "ring: {} records written", ring.written());
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2].max(1e-12)
    };
    let (w, d) = (median(&mut walk_s), median(&mut decode_s));
    Ok(Rates {
        walk_messages_per_s: MESSAGES as f64 / w,
        decode_messages_per_s: MESSAGES as f64 / d,
        decode_records_per_s: RECORDS as f64 / d,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snippet_walks_to_its_readme_count_and_decodes_to_its_records() {
        let file = snippet(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(SNIPPET)).unwrap();
        assert_eq!(file.len(), 35_570);
        assert_eq!(walk(&file), (MESSAGES, MESSAGE_BYTES));
        let mut ring = Ring::default();
        assert_eq!(decode(&mut normalizer(), &file, &mut ring).unwrap(), RECORDS);
        let r = rates(&file, 3).unwrap();
        assert!(r.walk_messages_per_s > 0.0 && r.decode_messages_per_s > 0.0);
    }
}
