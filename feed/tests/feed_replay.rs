//! The bundled ESH4 capture, decoded, normalised and replayed into a book: every reference value of
//! data/README.md, and the errors for missing, truncated and corrupt files.

#[path = "support/esh4.rs"]
mod esh4;

use mdfan_feed::dbn::{load_mbo_file, normalize_mbo, FeedError};
use mdfan_wire::{Books, Kind, Level, Side};

fn lvl((price_e9, size, orders): (i64, u64, u32)) -> Level {
    Level { price_e9, size, orders }
}

#[test]
fn replaying_the_capture_matches_every_reference_checkpoint_and_the_final_top_10() {
    let file = load_mbo_file(&esh4::main_file()).expect("bundled file loads");
    assert_eq!(file.records.len() as u64, esh4::RECORDS);
    assert_eq!(file.dataset, "GLBX.MDP3");
    let mut books = Books::new();
    let mut checkpoints = esh4::CHECKPOINTS.iter().peekable();
    let mut snapshot_flagged = 0u64;
    for (i, msg) in file.records.iter().enumerate() {
        let r = normalize_mbo(msg).unwrap();
        if r.flags & mdfan_wire::flags::SNAPSHOT != 0 {
            snapshot_flagged += 1;
            assert_eq!(r.kind(), Some(Kind::Add));
        }
        books.apply(&r).unwrap_or_else(|e| panic!("record {}: {e}", i + 1));
        if let Some(cp) = checkpoints.next_if(|cp| cp.after_record == i as u64 + 1) {
            let b = books.get(esh4::INSTRUMENT_ID).unwrap();
            assert_eq!(b.last_venue_seq, cp.venue_seq, "venue_seq after record {}", cp.after_record);
            assert_eq!(b.order_count(), cp.orders, "orders after record {}", cp.after_record);
            assert_eq!(b.level_count(Side::Bid), cp.levels_bid, "bid levels after record {}", cp.after_record);
            assert_eq!(b.level_count(Side::Ask), cp.levels_ask, "ask levels after record {}", cp.after_record);
            assert_eq!(b.bbo(), (Some(lvl(cp.best_bid)), Some(lvl(cp.best_ask))), "bbo after {}", cp.after_record);
        }
    }
    assert!(checkpoints.next().is_none(), "every checkpoint was reached");
    assert_eq!(snapshot_flagged, esh4::SNAPSHOT_RECORDS);
    let b = books.get(esh4::INSTRUMENT_ID).unwrap();
    assert_eq!(b.top(Side::Bid, 10), esh4::TOP_BIDS.map(lvl).to_vec());
    assert_eq!(b.top(Side::Ask, 10), esh4::TOP_ASKS.map(lvl).to_vec());
    assert_eq!(b.last_ts_recv_ns, esh4::LAST_TS_RECV_NS);
    assert_eq!(b.last_ts_event_ns, esh4::LAST_TS_EVENT_NS);
    assert_eq!(books.iter_sorted().len(), 1, "one instrument only");
}

#[test]
fn the_snapshot_file_alone_gives_the_start_of_day_book() {
    let file = load_mbo_file(&esh4::snapshot_file()).unwrap();
    assert_eq!(file.records.len() as u64, esh4::SNAPSHOT_RECORDS);
    let mut books = Books::new();
    for msg in &file.records {
        books.apply(&normalize_mbo(msg).unwrap()).unwrap();
    }
    let cp = &esh4::CHECKPOINTS[0];
    let b = books.get(esh4::INSTRUMENT_ID).unwrap();
    assert_eq!((b.order_count(), b.level_count(Side::Bid), b.level_count(Side::Ask)), (8_725, 892, 559));
    assert_eq!(b.bbo(), (Some(lvl(cp.best_bid)), Some(lvl(cp.best_ask))));
    assert_eq!(b.last_venue_seq, 691);
}

fn load_err(p: &std::path::Path) -> FeedError {
    match load_mbo_file(p) {
        Ok(f) => panic!("{} loaded {} records instead of failing", p.display(), f.records.len()),
        Err(e) => e,
    }
}

fn tmp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mdfan-wire-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn devices_and_directories_are_not_read() {
    for p in ["/dev/zero", "/tmp"] {
        let err = load_err(std::path::Path::new(p));
        assert!(matches!(err, FeedError::NotAFile { .. }), "{p}: {err}");
        assert_eq!(err.to_string(), format!("feed {p}: not a regular file"));
    }
}

#[test]
fn a_missing_file_names_the_path() {
    let err = load_err(std::path::Path::new("/nonexistent/feed.dbn.zst"));
    assert!(matches!(err, FeedError::Open { .. }));
    assert!(err.to_string().contains("/nonexistent/feed.dbn.zst"), "{err}");
}

#[test]
fn a_truncated_file_is_refused_not_replayed_short() {
    // Decompress, cut the DBN stream in the middle of a record, and store it uncompressed.
    let raw = esh4::decompressed(&esh4::snapshot_file());
    let cut = &raw[..raw.len() - 20];
    let p = tmp("truncated.dbn", cut);
    let err = load_err(&p);
    assert!(matches!(err, FeedError::Decode { .. }), "{err}");
    assert!(err.to_string().contains("truncated.dbn"), "{err}");
    assert!(!err.to_string().contains("decompressed"), "a plain file's offset is the file's: {err}");
    // and a truncated zstd stream
    let z = std::fs::read(esh4::snapshot_file()).unwrap();
    let p = tmp("truncated.dbn.zst", &z[..z.len() / 2]);
    let err = load_err(&p);
    assert!(matches!(err, FeedError::Read { .. } | FeedError::Decode { .. }), "{err}");
    assert!(err.to_string().contains("truncated.dbn.zst: record "), "{err}");
    assert!(err.to_string().contains(" at byte "), "{err}");
    assert!(err.to_string().contains(" of the decompressed stream: "), "the offset is not the file's: {err}");
}

#[test]
fn corrupt_files_are_refused_with_the_record_or_field() {
    let p = tmp("garbage.dbn", b"this is not a DBN file at all, just text");
    assert!(matches!(load_err(&p), FeedError::Open { .. }));
    // A bad action byte in record 3.
    let mut raw = esh4::decompressed(&esh4::snapshot_file());
    let first = esh4::first_record_offset(&raw);
    let action_at = first + 2 * 56 + 38; // MboMsg: hd(16) order_id price size flags channel_id action
    raw[action_at] = b'Z';
    let p = tmp("bad-action.dbn", &raw);
    let err = load_err(&p);
    assert!(
        matches!(err, FeedError::Field { record: 3, field: "action", .. }),
        "expected a field error on record 3, got: {err}"
    );
}

#[test]
fn records_of_the_wrong_length_are_refused_not_misread() {
    // Found by fuzzing (fuzz/fuzz_targets/dbn_mbo.rs): a short MBO record, or one whose length would leave the
    // next record misaligned, made the dbn decoder panic.
    let raw = esh4::decompressed(&esh4::snapshot_file());
    let first = esh4::first_record_offset(&raw);
    for (words, want) in [(13u8, "MBO record length 52 bytes, expected 56"), (15, "MBO record length 60 bytes")] {
        let mut bad = raw.clone();
        bad[first + 56] = words; // record 2's length, in 4-byte words
        let p = tmp(&format!("len-{words}.dbn"), &bad);
        let err = load_err(&p);
        assert!(matches!(err, FeedError::Decode { record: 2, .. }), "{err}");
        assert!(err.to_string().contains(want), "{err}");
    }
}
