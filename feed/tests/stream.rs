//! The streaming decoder: DBN versions 1 to 3, multi-frame zstd, and a truncated file that stops after the records
//! before the cut, naming the record and its byte offset.

#[path = "support/dbn_file.rs"]
mod dbn_file;

use dbn_file::{encode, mbo, zstd_frame, LAST};
use mdfan_feed::dbn::{decode_mbo_bytes, load_mbo_file, FeedError, MboStream};
use std::path::Path;

/// 100 adds of instrument 9, prices 1.0001 .. 1.0100, ids 1..=100.
fn adds() -> Vec<dbn::MboMsg> {
    (1..=100u32).map(|i| mbo(9, i, b'A', b'B', i as u64, 1_000_000_000 + i as i64 * 100_000, i, LAST)).collect()
}

/// Where the records start in a plain DBN stream (after the prefix and metadata).
fn records_start(raw: &[u8]) -> usize {
    8 + u32::from_le_bytes(raw[4..8].try_into().unwrap()) as usize
}

#[test]
fn versions_1_to_3_decode_to_the_same_records() {
    let want = adds();
    for version in 1..=3u8 {
        let raw = encode(version, &want);
        assert_eq!(raw[3], version);
        let file = decode_mbo_bytes(Path::new("v.dbn"), &raw).unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(file.records.len(), 100, "v{version}");
        for (got, want) in file.records.iter().zip(&want) {
            assert_eq!(
                (got.hd.instrument_id, got.order_id, got.price, got.size, got.sequence, got.ts_recv),
                (want.hd.instrument_id, want.order_id, want.price, want.size, want.sequence, want.ts_recv),
                "v{version}"
            );
        }
    }
}

#[test]
fn a_file_of_several_zstd_frames_is_read_to_its_end() {
    let raw = encode(3, &adds());
    let cut = records_start(&raw) + 37 * 56 + 20; // frames split mid-record, as a writer's flushes may fall
    let mut z = zstd_frame(&raw[..cut]);
    z.extend(zstd_frame(&raw[cut..cut + 40 * 56]));
    z.extend(zstd_frame(&raw[cut + 40 * 56..]));
    let path = std::env::temp_dir().join(format!("mdfan-feed-frames-{}.dbn.zst", std::process::id()));
    std::fs::write(&path, &z).unwrap();
    let file = load_mbo_file(&path);
    std::fs::remove_file(&path).ok();
    let file = file.unwrap();
    assert_eq!(file.records.len(), 100);
    assert_eq!(file.records.last().unwrap().order_id, 100);
    assert_eq!(file.dataset, "TEST.MBO");
}

#[test]
fn a_truncated_stream_gives_the_records_before_the_cut_then_names_record_and_byte() {
    let raw = encode(2, &adds());
    let start = records_start(&raw);
    let cut = &raw[..start + 61 * 56 + 30]; // record 62 cut after 30 of its 56 bytes
    let mut stream = MboStream::from_reader(Path::new("cut.dbn"), cut).unwrap();
    let mut ids = Vec::new();
    let err = loop {
        match stream.next_update() {
            Ok(Some(r)) => ids.push(r.order_id),
            Ok(None) => panic!("a truncated stream ended quietly after {} records", ids.len()),
            Err(e) => break e,
        }
    };
    assert_eq!(ids, (1..=61).collect::<Vec<u64>>());
    let offset = (start + 61 * 56) as u64;
    assert!(matches!(err, FeedError::Decode { record: 62, offset: o, .. } if o == offset), "{err}");
    assert_eq!(
        err.to_string(),
        format!("feed cut.dbn: record 62 at byte {offset}: truncated: record needs 56 bytes, the file ends before")
    );
    assert!(matches!(stream.next_update(), Ok(None)), "nothing more after the error");
}
