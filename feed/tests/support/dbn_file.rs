//! Small DBN MBO files written with the `dbn` crate's encoder, for tests of inputs the bundled capture lacks.
#![allow(dead_code)]

use std::ffi::c_char;
use std::path::PathBuf;

use dbn::encode::{dbn::Encoder, EncodeRecord};
use dbn::{FlagSet, MboMsg, Metadata, RecordHeader, SType, Schema};

/// DBN's `F_LAST` flag.
pub const LAST: u8 = dbn::flags::LAST;

/// One MBO record of `instrument_id`; `seq` is its DBN `sequence`, ts_event `1000 + seq`, ts_recv `2000 + seq`.
#[allow(clippy::too_many_arguments)]
pub fn mbo(
    instrument_id: u32,
    seq: u32,
    action: u8,
    side: u8,
    order_id: u64,
    price_e9: i64,
    size: u32,
    flags: u8,
) -> MboMsg {
    MboMsg {
        hd: RecordHeader::new::<MboMsg>(dbn::rtype::MBO, 1, instrument_id, 1_000 + seq as u64),
        order_id,
        price: price_e9,
        size,
        flags: FlagSet::new(flags),
        channel_id: 0,
        action: action as c_char,
        side: side as c_char,
        ts_recv: 2_000 + seq as u64,
        ts_in_delta: 0,
        sequence: seq,
    }
}

/// The DBN metadata of an MBO file (dataset `TEST.MBO`), in DBN `version` (1 to 3).
pub fn metadata(version: u8) -> Metadata {
    Metadata::builder()
        .version(version)
        .dataset("TEST.MBO".to_owned())
        .schema(Some(Schema::Mbo))
        .start(0)
        .stype_in(Some(SType::InstrumentId))
        .stype_out(SType::InstrumentId)
        .build()
}

/// Writes `records` as a plain DBN v3 MBO file under the temp dir, named after `tag` and the process.
pub fn write_dbn(tag: &str, records: &[MboMsg]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("mdfan-{tag}-{}.dbn", std::process::id()));
    std::fs::write(&path, encode(3, records)).unwrap();
    path
}

/// `records` as the bytes of a plain DBN file of `version`.
pub fn encode(version: u8, records: &[MboMsg]) -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new(), &metadata(version)).unwrap();
    for r in records {
        encoder.encode_record(r).unwrap();
    }
    encoder.get_ref().clone()
}

/// `bytes` compressed as one zstd frame.
pub fn zstd_frame(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut out = Vec::new();
    {
        let mut w = dbn::encode::DynWriter::new(&mut out, dbn::Compression::Zstd).unwrap();
        w.write_all(bytes).unwrap();
    } // the frame ends when the writer drops
    out
}
