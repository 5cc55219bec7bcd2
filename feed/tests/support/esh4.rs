//! Reference values for the bundled ESH4 capture (data/README.md), shared by the tests of several crates
//! (`#[path]`-included). Prices in units of 1e-9.
#![allow(dead_code)]

use std::path::PathBuf;

/// ESH4's instrument_id.
pub const INSTRUMENT_ID: u32 = 17077;
/// Records in esh4-glbx-mdp3-20231225.mbo.dbn.zst.
pub const RECORDS: u64 = 68_792;
/// Records in the start-of-day snapshot.
pub const SNAPSHOT_RECORDS: u64 = 8_725;

const PX: i64 = 1_000_000_000;
const fn px(cents: i64) -> i64 {
    cents * PX / 100
}

/// The state of the book after a given record.
pub struct Checkpoint {
    pub after_record: u64,
    pub venue_seq: u64,
    pub orders: usize,
    pub levels_bid: usize,
    pub levels_ask: usize,
    /// (price_e9, size, orders)
    pub best_bid: (i64, u64, u32),
    pub best_ask: (i64, u64, u32),
}

pub const CHECKPOINTS: [Checkpoint; 5] = [
    Checkpoint {
        after_record: 8_725,
        venue_seq: 691,
        orders: 8_725,
        levels_bid: 892,
        levels_ask: 559,
        best_bid: (px(479_900), 16, 4),
        best_ask: (px(479_950), 23, 4),
    },
    Checkpoint {
        after_record: 20_000,
        venue_seq: 16_270,
        orders: 9_796,
        levels_bid: 917,
        levels_ask: 567,
        best_bid: (px(480_675), 11, 6),
        best_ask: (px(480_700), 7, 6),
    },
    Checkpoint {
        after_record: 40_000,
        venue_seq: 34_356,
        orders: 10_629,
        levels_bid: 923,
        levels_ask: 563,
        best_bid: (px(480_950), 10, 7),
        best_ask: (px(480_975), 104, 9),
    },
    Checkpoint {
        after_record: 60_000,
        venue_seq: 51_721,
        orders: 11_203,
        levels_bid: 920,
        levels_ask: 568,
        best_bid: (px(480_975), 25, 21),
        best_ask: (px(481_000), 36, 17),
    },
    Checkpoint {
        after_record: 68_792,
        venue_seq: 59_585,
        orders: 11_217,
        levels_bid: 922,
        levels_ask: 565,
        best_bid: (px(481_000), 22, 22),
        best_ask: (px(481_025), 28, 18),
    },
];

/// Final top 10 bids, (price_e9, size, orders).
pub const TOP_BIDS: [(i64, u64, u32); 10] = [
    (px(481_000), 22, 22),
    (px(480_975), 47, 22),
    (px(480_950), 50, 23),
    (px(480_925), 60, 30),
    (px(480_900), 85, 33),
    (px(480_875), 56, 26),
    (px(480_850), 57, 28),
    (px(480_825), 61, 28),
    (px(480_800), 91, 32),
    (px(480_775), 50, 23),
];
/// Final top 10 asks, (price_e9, size, orders).
pub const TOP_ASKS: [(i64, u64, u32); 10] = [
    (px(481_025), 28, 18),
    (px(481_050), 40, 27),
    (px(481_075), 41, 24),
    (px(481_100), 60, 29),
    (px(481_125), 65, 36),
    (px(481_150), 67, 37),
    (px(481_175), 69, 30),
    (px(481_200), 75, 28),
    (px(481_225), 47, 23),
    (px(481_250), 55, 24),
];
pub const LAST_TS_RECV_NS: u64 = 1_703_548_799_446_821_072;
pub const LAST_TS_EVENT_NS: u64 = 1_703_548_799_446_724_905;

/// The repository's data folder, found from this crate's manifest dir (every crate sits one below the root),
/// or `$MDFAN_DATA_DIR` when set (test binaries run inside the Soft-RoCE VM).
pub fn data_dir() -> PathBuf {
    match std::env::var_os("MDFAN_DATA_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/cme-glbx-mdp3-es-mbo-dbn"),
    }
}
pub fn main_file() -> PathBuf {
    data_dir().join("esh4-glbx-mdp3-20231225.mbo.dbn.zst")
}
pub fn snapshot_file() -> PathBuf {
    data_dir().join("esh4-glbx-mdp3-20231224.mbo.dbn.zst")
}

/// The decompressed bytes of a bundled capture (zstd or plain DBN).
pub fn decompressed(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let file = std::fs::read(path).expect("a bundled capture");
    let mut out = Vec::new();
    dbn::decode::DynReader::new_inferred(file.as_slice()).unwrap().read_to_end(&mut out).unwrap();
    out
}

/// Where the first record starts in decompressed DBN: b"DBN", a version byte, a u32 metadata length, the metadata
/// (DBN docs, "DBN encoding"). MBO records are 56 bytes; their header holds the instrument_id at bytes 4..8.
pub fn first_record_offset(raw: &[u8]) -> usize {
    assert_eq!(&raw[..3], b"DBN");
    8 + u32::from_le_bytes(raw[4..8].try_into().unwrap()) as usize
}
