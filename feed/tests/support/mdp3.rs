//! Reference values of the bundled CME MDP 3.0 capture (data/cme-mdp3-sbe-v8-pcap-20160927/README.md), shared
//! by the tests that decode it (`#[path]`-included).
#![allow(dead_code)]

use std::path::PathBuf;

use mdfan_wire::MbpLevel;

/// The security whose book the README gives.
pub const SECURITY: u32 = 174_969;

/// The capture file.
pub fn capture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap")
}

/// Price as the README prints it (mantissa x 1e-7, e.g. 7580.5) in 1e-9 units: tenths x 1e8.
pub fn lv(tenths: i64, size: u32, orders: u32) -> Option<MbpLevel> {
    Some(MbpLevel { price_e9: tenths * 100_000_000, size, orders })
}

/// README "Book replay, one instrument": security 174969, top 5 bids.
pub fn reference_bids() -> [Option<MbpLevel>; 5] {
    [lv(75_805, 8, 5), lv(75_800, 16, 9), lv(75_795, 13, 8), lv(75_790, 17, 7), lv(75_785, 18, 5)]
}

/// README "Book replay, one instrument": security 174969, top 5 asks.
pub fn reference_asks() -> [Option<MbpLevel>; 5] {
    [lv(75_815, 19, 9), lv(75_820, 9, 6), lv(75_825, 18, 5), lv(75_830, 6, 3), lv(75_835, 7, 4)]
}

/// Asserts that `book` (instrument `id`'s, as `who` kept it) is the README's book: top 5 bids and asks, not
/// stale.
pub fn assert_reference_book(who: &str, book: Option<&mdfan_wire::MbpBook>, id: u32) {
    let b = book.unwrap_or_else(|| panic!("{who}: no book for {id}"));
    assert_eq!(b.top(mdfan_wire::Side::Bid, 5), reference_bids(), "{who} {id}: bids");
    assert_eq!(b.top(mdfan_wire::Side::Ask, 5), reference_asks(), "{who} {id}: asks");
    assert!(!b.is_stale(), "{who} {id}");
}
