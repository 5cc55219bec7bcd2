//! `mdfan-capture export --dbn`: an order-level (MBO) capture as a DBN MBO file (`mdfan_feed::dbn_export`:
//! the field mapping, the metadata), plain or zstd-compressed by the file name (`.zst`).
//!
//! Two passes over the capture: the first finds the book kind (a price-level capture is refused: DBN MBO
//! has no form for level records), the instruments (every segment's symbology) and the `ts_recv` span the
//! metadata states; the second writes the records. Records with no MBO form (snapshot markers, the end of
//! stream, stale marks, trading and feed status) are left out and counted; gaps cannot be said in DBN MBO
//! and are counted too (the Parquet export keeps them).

use std::path::Path;

use mdfan_feed::capture::{is_session_record, Item, Reader, Restarts};
use mdfan_feed::dbn_export::{check_metadata, metadata, MboWriter};
use mdfan_wire::InstrumentDef;

/// What a DBN export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exported {
    /// MBO records written.
    pub records: u64,
    /// Records left out (no MBO form).
    pub left_out: u64,
    /// Gaps in the capture, which DBN cannot carry.
    pub gaps: u64,
    /// Restarted sessions, each begun with a Clear of every book so far.
    pub restarts: u64,
}

/// What a DBN export of a capture will write, checked before anything is ([`plan`], then [`export`]).
pub struct Plan {
    meta: mdfan_feed::dbn_export::Metadata,
    gaps: u64,
}

/// Reads capture `name` in `dir` once for what the DBN file's metadata needs (symbology, first and last
/// `ts_recv_ns`, `dataset`) and checks it can be written: every segment order-level, the metadata encodable.
///
/// # Errors
/// The capture cannot be read or holds a price-level book, or DBN cannot hold `dataset`, named.
pub fn plan(dir: &Path, name: Option<&str>, dataset: &str) -> Result<Plan, String> {
    let mut reader = Reader::open(dir, name, false).map_err(|e| e.to_string())?;
    let mut symbology: Vec<InstrumentDef> = Vec::new();
    let (mut first_ns, mut last_ns, mut gaps) = (u64::MAX, 0u64, 0u64);
    while let Some(item) = reader.next().map_err(|e| e.to_string())? {
        match item {
            Item::Segment(m) => {
                if m.book != "mbo" {
                    return Err(format!(
                        "capture {} segment {}: its book is {:?}: DBN MBO holds order-level records only (--parquet \
                         takes any capture)",
                        m.name, m.segment, m.book
                    ));
                }
                for d in m.symbology {
                    if !symbology.iter().any(|s| s.instrument_id == d.instrument_id) {
                        symbology.push(d);
                    }
                }
            }
            Item::Record(r) if !is_session_record(&r) => {
                first_ns = first_ns.min(r.ts_recv_ns);
                last_ns = last_ns.max(r.ts_recv_ns);
            }
            Item::Gap { .. } => gaps += 1,
            Item::Record(_) | Item::Stop { .. } => {}
        }
    }
    if first_ns == u64::MAX {
        (first_ns, last_ns) = (0, 0);
    }
    let meta = metadata(dataset, &symbology, first_ns, last_ns.saturating_add(1));
    check_metadata(&meta).map_err(|e| format!("--dbn: dataset {dataset:?}: {e}"))?;
    Ok(Plan { meta, gaps })
}

/// Writes capture `name` in `dir` to `out` as DBN MBO, as `plan` (from [`plan`]) says.
///
/// # Errors
/// The capture cannot be read, or `out` cannot be written (or exists), named.
pub fn export(dir: &Path, name: Option<&str>, out: &Path, plan: Plan) -> Result<(Exported, Option<String>), String> {
    let Plan { meta, gaps } = plan;
    let zstd = out.extension().is_some_and(|e| e == "zst");
    crate::output::write_new(out, |file, partial| {
        let mut w = MboWriter::new(file, partial, &meta, zstd).map_err(|e| e.to_string())?;
        let mut reader = Reader::open(dir, name, false).map_err(|e| e.to_string())?;
        // A restarted session (a recorder started again: its subscriber's books empty) begins with a Clear
        // (action R, flagged snapshot) of every book so far, as the replay of the capture does.
        let mut restarts = Restarts::default();
        while let Some(item) = reader.next().map_err(|e| e.to_string())? {
            if let Item::Record(r) = item {
                for clear in restarts.record(&r).unwrap_or_default() {
                    w.push(&clear).map_err(|e| e.to_string())?;
                }
                w.push(&r).map_err(|e| e.to_string())?;
            }
        }
        let done = Exported { records: w.written, left_out: w.left_out, gaps, restarts: restarts.found.len() as u64 };
        w.finish().map_err(|e| e.to_string())?;
        Ok((done, reader.torn().map(str::to_owned)))
    })
}

#[cfg(test)]
mod tests {
    use mdfan_feed::capture::StopReason;
    use mdfan_wire::{BookUpdate, Kind};

    /// A capture holding a restarted session (a recorder started again, its books empty): the DBN file clears
    /// every book so far where it begins (action R), so its final books are the second session's alone, as the
    /// replay's; the Parquet file names the row it begins at (`mdfan.restart_rows`).
    #[test]
    fn a_restarted_session_begins_with_a_clear_of_every_book_in_the_dbn_file() {
        let syms = || vec![mdfan_wire::InstrumentDef::new(7, "ESH4"), mdfan_wire::InstrumentDef::new(8, "ESM4")];
        let add = |seq: u64, instrument_id: u32, order_id: u64| BookUpdate {
            seq,
            instrument_id,
            order_id,
            price_e9: 4_810_000_000_000,
            size: 2,
            side: mdfan_wire::Side::Bid as u8,
            ts_event_ns: 1_000 + seq,
            ts_recv_ns: 2_000 + seq,
            flags: 0x80,
            ..BookUpdate::control(Kind::Add)
        };
        let (dir, mut w) = crate::test_support::writer("dbn-restart", "r", "mbo", syms());
        for (seq, id, order) in [(1, 7, 1), (2, 8, 2)] {
            w.record(&add(seq, id, order), 1).unwrap();
        }
        w.stop(StopReason::Interrupted, 2).unwrap();
        let mut w = crate::test_support::reopen(&dir, "r", "mbo", syms());
        w.record(&add(1, 7, 3), 3).unwrap();
        w.stop(StopReason::EndOfStream, 4).unwrap();

        let out = dir.join("r.dbn");
        let plan = super::plan(&dir, None, "GLBX.MDP3").unwrap();
        let (done, _) = super::export(&dir, None, &out, plan).unwrap();
        assert_eq!((done.records, done.restarts), (5, 1), "3 adds and a Clear of each of the 2 books");
        let mut back = mdfan_feed::dbn::MboStream::open(&out).unwrap();
        let mut books = mdfan_wire::Books::new();
        let mut kinds = Vec::new();
        while let Some(r) = back.next_update().unwrap() {
            kinds.push((r.kind(), r.instrument_id));
            books.apply(&r).unwrap();
        }
        let want = [(Kind::Add, 7), (Kind::Add, 8), (Kind::Clear, 7), (Kind::Clear, 8), (Kind::Add, 7)];
        assert_eq!(kinds, want.map(|(k, i)| (Some(k), i)));
        assert_eq!(books.get(7).map(|b| b.order_count()), Some(1), "order 3 alone");
        assert_eq!(books.get(8).map(|b| b.order_count()).unwrap_or(0), 0);

        let pq = dir.join("r.parquet");
        crate::parquet::export(&dir, None, &pq, crate::parquet::RowGroups { rows: 1000, span_ns: 0 }).unwrap();
        let reader = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&pq).unwrap()).unwrap();
        use parquet::file::reader::FileReader as _;
        let kv = reader.metadata().file_metadata().key_value_metadata().unwrap();
        let rows = kv.iter().find(|k| k.key == "mdfan.restart_rows").and_then(|k| k.value.clone());
        assert_eq!(rows.as_deref(), Some("[2]"), "the second session begins at row 2");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A price-level capture has no DBN MBO form: refused naming the segment, and no file is left behind.
    #[test]
    fn a_price_level_capture_is_refused_and_leaves_no_file() {
        let (dir, mut w) = crate::test_support::writer("dbn", "levels", "mbp", Vec::new());
        w.record(&BookUpdate { seq: 1, level: 1, ..BookUpdate::control(Kind::LevelNew) }, 1).unwrap();
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let out = dir.join("levels.dbn");
        let e = super::plan(&dir, None, "").err().unwrap();
        assert_eq!(
            e,
            "capture levels segment 1: its book is \"mbp\": DBN MBO holds order-level records only (--parquet takes \
             any capture)"
        );
        assert!(!out.exists() && !dir.join(format!("levels.dbn.partial.{}", std::process::id())).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
