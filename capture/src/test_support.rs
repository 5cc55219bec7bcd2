//! A capture writer for the unit tests: a fresh folder under the temp dir, small blocks, no compression.

use std::path::PathBuf;

use mdfan_feed::capture::{Fsync, SegmentMeta, Writer, WriterConfig, FORMAT_VERSION};
use mdfan_wire::InstrumentDef;

/// A new folder `tag` (emptied) and a writer of capture `name` in it whose session builds a `book` book with
/// `symbology`.
pub fn writer(tag: &str, name: &str, book: &str, symbology: Vec<InstrumentDef>) -> (PathBuf, Writer) {
    let dir = std::env::temp_dir().join(format!("mdfan-capture-unit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w = reopen(&dir, name, book, symbology);
    (dir, w)
}

/// A writer of capture `name` in `dir` as it is (a recorder started again: its session's `seq` from 1).
pub fn reopen(dir: &std::path::Path, name: &str, book: &str, symbology: Vec<InstrumentDef>) -> Writer {
    let dir = dir.to_owned();
    let cfg = WriterConfig {
        dir: dir.clone(),
        name: name.into(),
        rotate_bytes: 1 << 20,
        rotate_ns: 0,
        block_records: 2,
        block_ms: 10,
        fsync: Fsync::Rotation,
        compress: false,
    };
    let meta = SegmentMeta {
        format_version: FORMAT_VERSION,
        name: String::new(),
        segment: 0,
        created_ns: 0,
        source: "127.0.0.1:7700".into(),
        session: "unit".into(),
        book: book.into(),
        feed: mdfan_wire::FeedIdentity::new("dbn", "GLBX.MDP3", "unit.dbn"),
        symbology,
        fsync: String::new(),
        first_record: 0,
        run_id: None,
        run_first_segment: None,
    };
    Writer::open(cfg, meta, 1).unwrap().0
}
