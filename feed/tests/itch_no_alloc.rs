//! The ITCH hot path allocates nothing after warm-up: decoding every message of the snippet file from memory
//! (MoldUDP64-style blocks borrowed from one buffer) and normalising it, with the reference table reserved up
//! front, makes no heap allocation. A counting global allocator, in a test binary of its own.

use std::path::Path;

use mdfan_feed::itch::{decode_message, eastern_midnight_ns, ItchNormalizer, ItchStats};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::calls_during;

#[test]
fn decoding_and_normalising_the_snippet_allocates_nothing() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50");
    let bytes = std::fs::read(path).unwrap();
    let mut norm = ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).unwrap(), 4096);
    let mut stats = ItchStats::default();
    let (mut at, mut pos, mut records) = (0usize, 0u64, 0u64);
    let (calls, ()) = calls_during(|| {
        while let Some(len) = bytes.get(at..at + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) {
            let body = &bytes[at + 2..at + 2 + len];
            let m = decode_message(body, at as u64).unwrap();
            stats.count(&m, len);
            pos += 1;
            records += norm.normalize(&m, pos, 0).as_slice().len() as u64;
            at += 2 + len;
        }
    });
    assert_eq!(calls.allocations, 0);
    assert_eq!((stats.messages, pos), (1000, 1000));
    assert!(records > 0);
    assert_eq!(norm.resting_orders(), 532);
}
