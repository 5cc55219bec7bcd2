//! DBN MBO input from an untrusted capture: a decompressed DBN stream (header, metadata, records) must be
//! loaded or refused with a `FeedError`, never panic, whatever the bytes.
//!
//! Inputs that start with the zstd magic are skipped: this target is about the decompressed stream, and a zstd
//! bomb would only measure zstd.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mdfan_feed::dbn::{decode_mbo_bytes, normalize_mbo};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&ZSTD_MAGIC) {
        return;
    }
    if let Ok(file) = decode_mbo_bytes(Path::new("fuzz-input"), data) {
        assert!(!file.records.is_empty(), "decode_mbo_bytes returned Ok with no records");
        for (i, msg) in file.records.iter().enumerate() {
            // decode_mbo_bytes promises every record it returns normalises.
            if let Err(e) = normalize_mbo(msg) {
                panic!("record {} was accepted by decode_mbo_bytes but does not normalise: {e}", i + 1);
            }
        }
    }
});
