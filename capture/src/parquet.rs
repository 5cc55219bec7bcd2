//! `mdfan-capture export --parquet`: a capture as one Parquet file for research (pyarrow, polars, DuckDB,
//! Spark), one row per record, in capture order.
//!
//! Columns (all non-null except `symbol` and `price`):
//!
//! | column          | Arrow type                   | from the record (`mdfan_wire::BookUpdate`)                    |
//! |-----------------|------------------------------|---------------------------------------------------------------|
//! | `capture_index` | UInt64                       | the record's index in the capture, from 0 (session records count) |
//! | `seq`           | UInt64                       | `seq`: the subscriber stream's sequence                       |
//! | `ts_event`      | Timestamp(ns, "UTC")         | `ts_event_ns`                                                 |
//! | `ts_recv`       | Timestamp(ns, "UTC")         | `ts_recv_ns`                                                  |
//! | `venue_pos`     | UInt64                       | `venue_pos` as sent (venue seq << 16 \| index; MDP 3.0: channel in the top 16 bits) |
//! | `instrument_id` | UInt32                       | `instrument_id`                                               |
//! | `symbol`        | Utf8, null if not named      | the segment's symbology (what the publisher named at session start) |
//! | `kind`          | Utf8                         | `kind` in snake case (`add`, `level_change`, ...; `unknown_N`) |
//! | `side`          | Utf8                         | `side`: `B`, `A`, `N` (DBN's characters)                      |
//! | `price`         | Decimal128(18, 9), nullable  | `price_e9` exactly; null for `i64::MAX` (undefined) and for a price of a billion or more (counted) |
//! | `size`          | UInt32                       | `size`                                                        |
//! | `order_id`      | UInt64                       | `order_id`                                                    |
//! | `level`         | UInt8                        | `level`                                                       |
//! | `flags`         | UInt8                        | `flags` (DBN flags: 0x80 last, 0x20 snapshot, ...)            |
//!
//! The records the publisher makes for one session (heartbeats, the end of stream, snapshot markers) are not
//! rows. The file's key-value metadata carries what is not a row: `mdfan.source`, `mdfan.session`, `mdfan.book`,
//! `mdfan.symbology` (JSON, as in the segment header), `mdfan.gaps` (JSON list of `{"expected", "got"}`: seqs
//! that never reached the capture), `mdfan.restarts` (JSON list of `{"record", "last_ts_recv_ns",
//! "next_ts_recv_ns"}`: where a writer started again; what came between is not in the capture), `mdfan.restart_rows`
//! (JSON list: the row each restarted session begins at; its subscriber's books were empty there, so a reader
//! clears every book before that row),
//! `mdfan.session_records` (how many were left out), `mdfan.stop` (how the capture stopped, or `none` for one
//! still being written), `mdfan.prices_out_of_range` (rows whose price `price` cannot hold),
//! `mdfan.timestamps_out_of_range` (rows with a time past `i64::MAX` ns, null in `ts_event` or `ts_recv`). A row
//! group ends at `--row-group-s` boundaries of `ts_recv` (default an hour: a day's capture is about 24 groups) or after
//! `--row-group-rows` rows (default 1 Mi), whichever comes first; every column but `kind` and `side` has min/max
//! statistics, so a reader filtering on `ts_recv` or `instrument_id` skips what it does not need.
//! Encodings: the rising columns and `order_id` delta-encoded, the others dictionary-encoded. Compression: zstd
//! level 1, but for `ts_event`, `ts_recv` and `order_id`, whose deltas it shrank by 30%, 30% and 7% for a tenth
//! of the export's instructions. `kind` and `side` have no statistics (a handful of values in every group).
//!
//! The file is written as `OUT.partial.PID` and put in place when whole (`crate::output`): a reader never sees
//! half a file, and an existing OUT is never overwritten.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Decimal128Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use mdfan_feed::capture::{is_session_record, Item, Reader, StopReason};
use mdfan_wire::{BookUpdate, Kind};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowLeafColumn, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

/// Rows per Arrow batch handed to the writer (bounds memory; row groups are cut by the writer).
const BATCH_ROWS: usize = 65_536;

/// Decimal precision and scale of `price`: 18 digits, 9 of them decimals (the record's 1e-9), so a price below a
/// billion (every real one) is exact and Parquet stores it as an INT64 (a 19th digit would make it a 9-byte
/// FIXED_LEN_BYTE_ARRAY: a third of the export's time went to hashing and comparing those).
pub const PRICE_PRECISION: u8 = 18;
/// The smallest `price_e9` magnitude [`PRICE_PRECISION`] cannot hold (a billion, in the record's 1e-9 units): such
/// a price (a corrupt or synthetic record) is written as null and counted in `mdfan.prices_out_of_range`.
pub const PRICE_E9_LIMIT: i64 = 1_000_000_000_000_000_000;
/// See [`PRICE_PRECISION`].
pub const PRICE_SCALE: i8 = 9;

/// How rows are grouped: a row group ends after `rows` rows, and where the records' `ts_recv` enters a later span
/// of `span_ns` than any before it (since the UNIX epoch; 0: by rows only). A record whose `ts_recv` goes back
/// (a restarted session's, a venue's clock step) stays in the group it is in: a row group per such record would
/// cost a group's metadata and memory per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowGroups {
    /// Rows at most per row group.
    pub rows: usize,
    /// The time span per row group, ns (0: none).
    pub span_ns: u64,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// Rows (records).
    pub rows: u64,
    /// Row groups.
    pub row_groups: usize,
    /// Gaps the capture recorded (in `mdfan.gaps`).
    pub gaps: u64,
    /// The file's size, bytes.
    pub bytes: u64,
    /// Rows whose price `price` cannot hold (|price_e9| >= [`PRICE_E9_LIMIT`], not `i64::MAX`): null there.
    pub prices_out_of_range: u64,
    /// Rows whose `ts_event_ns` or `ts_recv_ns` is past `i64::MAX` ns (DBN's undefined timestamp is `u64::MAX`):
    /// null there.
    pub timestamps_out_of_range: u64,
}

/// The file's schema (module docs).
pub fn schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("capture_index", DataType::UInt64, false),
        Field::new("seq", DataType::UInt64, false),
        Field::new("ts_event", ts.clone(), true),
        Field::new("ts_recv", ts, true),
        Field::new("venue_pos", DataType::UInt64, false),
        Field::new("instrument_id", DataType::UInt32, false),
        Field::new("symbol", DataType::Utf8, true),
        Field::new("kind", DataType::Utf8, false),
        Field::new("side", DataType::Utf8, false),
        Field::new("price", DataType::Decimal128(PRICE_PRECISION, PRICE_SCALE), true),
        Field::new("size", DataType::UInt32, false),
        Field::new("order_id", DataType::UInt64, false),
        Field::new("level", DataType::UInt8, false),
        Field::new("flags", DataType::UInt8, false),
    ]))
}

/// A record kind's name in the `kind` column.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Add => "add",
        Kind::Modify => "modify",
        Kind::Cancel => "cancel",
        Kind::Trade => "trade",
        Kind::Fill => "fill",
        Kind::Clear => "clear",
        Kind::SnapshotBegin => "snapshot_begin",
        Kind::SnapshotEnd => "snapshot_end",
        Kind::Heartbeat => "heartbeat",
        Kind::EndOfStream => "end_of_stream",
        Kind::LevelNew => "level_new",
        Kind::LevelChange => "level_change",
        Kind::LevelDelete => "level_delete",
        Kind::LevelDeleteThru => "level_delete_thru",
        Kind::LevelDeleteFrom => "level_delete_from",
        Kind::InstrumentStale => "instrument_stale",
        Kind::NoAction => "no_action",
        Kind::TradingStatus => "trading_status",
        Kind::FeedStatus => "feed_status",
    }
}

/// What `kind` says for each kind byte: the name of each kind, `unknown_N` for the others.
fn kind_names() -> Vec<String> {
    (0..=u8::MAX)
        .map(|b| match Kind::from_u8(b) {
            Some(k) => kind_name(k).to_owned(),
            None => format!("unknown_{b}"),
        })
        .collect()
}

/// What `side` says for each side byte: the byte as a character when it is ASCII, `?` otherwise.
fn side_names() -> Vec<String> {
    (0..=u8::MAX).map(|b| if b.is_ascii() { char::from(b).to_string() } else { "?".to_owned() }).collect()
}

/// Rows written with a null because their column cannot hold the value: prices (`|price_e9|` at or past
/// [`PRICE_E9_LIMIT`]), times (past `i64::MAX` ns).
#[derive(Debug, Default)]
struct Nulled {
    prices: u64,
    timestamps: u64,
}

/// No symbol: the instrument is not in the segment's symbology.
const NO_SYMBOL: u32 = u32::MAX;

/// One batch being gathered: the records as they came, and what each row adds to its record (its capture index,
/// its symbol as an index into the export's names). The columns are cut from it at the end, one tight pass each.
struct Columns {
    records: Vec<BookUpdate>,
    capture_index: Vec<u64>,
    symbol: Vec<u32>,
}

impl Columns {
    fn new() -> Columns {
        Columns {
            records: Vec::with_capacity(BATCH_ROWS),
            capture_index: Vec::with_capacity(BATCH_ROWS),
            symbol: Vec::with_capacity(BATCH_ROWS),
        }
    }

    fn rows(&self) -> usize {
        self.records.len()
    }

    fn push(&mut self, index: u64, r: &BookUpdate, symbol: u32) {
        self.records.push(*r);
        self.capture_index.push(index);
        self.symbol.push(symbol);
    }

    /// The batch (new vectors in place at full capacity). `names`: the symbols the rows' indexes point into;
    /// `kinds` and `sides`: [`kind_names`], [`side_names`]; `nulled` counts the values written as null because their
    /// column cannot hold them.
    fn finish(
        &mut self,
        schema: &SchemaRef,
        names: &[String],
        kinds: &[String],
        sides: &[String],
        nulled: &mut Nulled,
    ) -> Result<RecordBatch, String> {
        let Columns { records: recs, capture_index, symbol } = std::mem::replace(self, Columns::new());
        // A time past i64's ns (2262; DBN's undefined timestamp is u64::MAX) is null, not a negative time.
        nulled.timestamps +=
            recs.iter().filter(|r| r.ts_event_ns > i64::MAX as u64 || r.ts_recv_ns > i64::MAX as u64).count() as u64;
        let priced = |r: &BookUpdate| r.price_e9 != i64::MAX && r.price_e9.unsigned_abs() < PRICE_E9_LIMIT as u64;
        nulled.prices += recs.iter().filter(|r| r.price_e9 != i64::MAX && !priced(r)).count() as u64;
        let u64s = |f: fn(&BookUpdate) -> u64| UInt64Array::from_iter_values(recs.iter().map(f));
        let ts = |f: fn(&BookUpdate) -> u64| {
            TimestampNanosecondArray::from_iter(recs.iter().map(|r| i64::try_from(f(r)).ok())).with_timezone("UTC")
        };
        let price = Decimal128Array::new(
            recs.iter().map(|r| i128::from(r.price_e9)).collect(),
            Some(NullBuffer::from_iter(recs.iter().map(priced))),
        )
        .with_precision_and_scale(PRICE_PRECISION, PRICE_SCALE)
        .map_err(|e| format!("building a batch: {e}"))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(capture_index)),
            Arc::new(u64s(|r| r.seq)),
            Arc::new(ts(|r| r.ts_event_ns)),
            Arc::new(ts(|r| r.ts_recv_ns)),
            Arc::new(u64s(|r| r.venue_pos)),
            Arc::new(UInt32Array::from_iter_values(recs.iter().map(|r| r.instrument_id))),
            Arc::new(StringArray::from_iter(symbol.iter().map(|&k| names.get(k as usize).map(String::as_str)))),
            Arc::new(StringArray::from_iter_values(recs.iter().map(|r| kinds[usize::from(r.kind)].as_str()))),
            Arc::new(StringArray::from_iter_values(recs.iter().map(|r| sides[usize::from(r.side)].as_str()))),
            Arc::new(price),
            Arc::new(UInt32Array::from_iter_values(recs.iter().map(|r| r.size))),
            Arc::new(u64s(|r| r.order_id)),
            Arc::new(UInt8Array::from_iter_values(recs.iter().map(|r| r.level))),
            Arc::new(UInt8Array::from_iter_values(recs.iter().map(|r| r.flags))),
        ];
        RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| format!("building a batch: {e}"))
    }
}

/// Writes the capture `name` in `dir` (default: the folder's only one) to `out` as Parquet (module docs).
///
/// Errors: the capture cannot be read (named by segment and offset), `out` exists, or it cannot be written
/// (named with the path). A capture a killed writer left torn is exported up to its last whole block; the
/// returned `torn` says where it was cut.
pub fn export(
    dir: &Path,
    name: Option<&str>,
    out: &Path,
    groups: RowGroups,
) -> Result<(Exported, Option<String>), String> {
    crate::output::write_new(out, |file, partial| write(dir, name, file, partial, groups))
}

/// Row groups written with their columns encoded on worker threads (one per core, up to 4; parquet's
/// `ArrowColumnWriter`s, each column on one worker), the batches of a group sent to them as they come. A group
/// ends at `max_rows` rows or by [`Groups::finish_group`].
struct Groups<'a> {
    file: SerializedFileWriter<&'a File>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    max_rows: usize,
    /// The group being encoded: its rows, and each worker's thread and input.
    open: Option<(usize, Vec<Worker>)>,
    written: usize,
}

type Worker = (
    std::thread::JoinHandle<parquet::errors::Result<Vec<(usize, ArrowColumnChunk)>>>,
    std::sync::mpsc::Sender<(usize, ArrowLeafColumn)>,
);

impl<'a> Groups<'a> {
    fn new(writer: ArrowWriter<&'a File>, schema: SchemaRef, max_rows: usize) -> parquet::errors::Result<Groups<'a>> {
        let (file, factory) = writer.into_serialized_writer()?;
        Ok(Groups { file, factory, schema, max_rows, open: None, written: 0 })
    }

    fn write(&mut self, batch: &RecordBatch) -> parquet::errors::Result<()> {
        let mut batch = batch.clone();
        while batch.num_rows() > 0 {
            let rows = self.open.as_ref().map_or(0, |(r, _)| *r);
            let take = batch.num_rows().min(self.max_rows - rows);
            self.send(&batch.slice(0, take))?;
            batch = batch.slice(take, batch.num_rows() - take);
            if self.open.as_ref().is_some_and(|(r, _)| *r >= self.max_rows) {
                self.finish_group()?;
            }
        }
        Ok(())
    }

    fn send(&mut self, batch: &RecordBatch) -> parquet::errors::Result<()> {
        if self.open.is_none() {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
            let mut writers: Vec<Vec<(usize, parquet::arrow::arrow_writer::ArrowColumnWriter)>> =
                (0..threads).map(|_| Vec::new()).collect();
            for (i, w) in self.factory.create_column_writers(self.written)?.into_iter().enumerate() {
                writers[i % threads].push((i, w));
            }
            let workers = writers
                .into_iter()
                .map(|mut mine| {
                    let (tx, rx) = std::sync::mpsc::channel::<(usize, ArrowLeafColumn)>();
                    let handle = std::thread::spawn(move || {
                        for (i, leaf) in rx {
                            if let Some((_, w)) = mine.iter_mut().find(|(c, _)| *c == i) {
                                w.write(&leaf)?;
                            }
                        }
                        mine.into_iter().map(|(i, w)| w.close().map(|chunk| (i, chunk))).collect()
                    });
                    (handle, tx)
                })
                .collect();
            self.open = Some((0, workers));
        }
        let Some((rows, workers)) = self.open.as_mut() else { unreachable!("opened above") };
        let threads = workers.len();
        for (i, (field, array)) in self.schema.fields().iter().zip(batch.columns()).enumerate() {
            for leaf in compute_leaves(field, array)? {
                workers[i % threads]
                    .1
                    .send((i, leaf))
                    .map_err(|_| parquet::errors::ParquetError::General("a column worker stopped".into()))?;
            }
        }
        *rows += batch.num_rows();
        Ok(())
    }

    /// Ends the group being encoded (if any): waits for its columns and writes them in order.
    fn finish_group(&mut self) -> parquet::errors::Result<()> {
        let Some((_, workers)) = self.open.take() else { return Ok(()) };
        let mut chunks = Vec::new();
        for (handle, tx) in workers {
            drop(tx);
            let done = handle
                .join()
                .map_err(|_| parquet::errors::ParquetError::General("a column worker panicked".into()))??;
            chunks.extend(done);
        }
        chunks.sort_by_key(|(i, _)| *i);
        let mut group = self.file.next_row_group()?;
        for (_, chunk) in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.written += 1;
        Ok(())
    }

    /// Ends the last group and the file (its footer); the row groups written.
    fn close(mut self) -> parquet::errors::Result<usize> {
        self.finish_group()?;
        Ok(self.file.close()?.num_row_groups())
    }
}

fn write(
    dir: &Path,
    name: Option<&str>,
    file: File,
    path: &Path,
    groups: RowGroups,
) -> Result<(Exported, Option<String>), String> {
    let mut reader = Reader::open(dir, name, false).map_err(|e| e.to_string())?;
    let schema = schema();
    let zstd = ZstdLevel::try_new(1).map_err(|e| e.to_string())?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(zstd))
        .set_max_row_group_row_count(Some(groups.rows.max(1)));
    // Columns that rise record by record (or nearly): deltas, not a dictionary that would only overflow.
    for col in ["capture_index", "seq", "ts_event", "ts_recv", "venue_pos"] {
        props = props
            .set_column_dictionary_enabled(ColumnPath::from(col), false)
            .set_column_encoding(ColumnPath::from(col), Encoding::DELTA_BINARY_PACKED);
    }
    // Order ids are nearly all distinct.
    let mut props = props
        .set_column_dictionary_enabled(ColumnPath::from("order_id"), false)
        .set_column_encoding(ColumnPath::from("order_id"), Encoding::DELTA_BINARY_PACKED)
        .set_column_compression(ColumnPath::from("order_id"), Compression::UNCOMPRESSED);
    for col in ["ts_event", "ts_recv"] {
        props = props.set_column_compression(ColumnPath::from(col), Compression::UNCOMPRESSED);
    }
    for col in ["kind", "side"] {
        props = props
            .set_column_statistics_enabled(ColumnPath::from(col), parquet::file::properties::EnabledStatistics::None);
    }
    let props = props.build();
    let io = |e: parquet::errors::ParquetError| format!("{}: {e}", path.display());
    let max_rows = groups.rows.max(1);
    let arrow = ArrowWriter::try_new(&file, Arc::clone(&schema), Some(props)).map_err(io)?;
    let mut writer = Groups::new(arrow, Arc::clone(&schema), max_rows).map_err(io)?;
    let mut cols = Columns::new();
    let (kinds, sides) = (kind_names(), side_names());
    // Each symbol once in `names` (`name_index`: where); `symbols` maps an instrument to its name's index, the
    // current segment's symbology.
    let (mut names, mut symbols): (Vec<String>, HashMap<u32, u32>) = (Vec::new(), HashMap::new());
    let mut name_index: HashMap<String, u32> = HashMap::new();
    let mut last_symbol: Option<(u32, u32)> = None;
    let mut nulled = Nulled::default();
    let (mut source, mut session, mut book, mut symbology) = (String::new(), String::new(), String::new(), "[]".into());
    let mut gaps = Vec::new();
    let mut stop = "none".to_owned();
    let (mut rows, mut index) = (0u64, 0u64);
    let mut span: Option<u64> = None; // the latest span entered
    let (mut restarts, mut session_records) = (mdfan_feed::capture::Restarts::default(), 0u64);
    let mut restart_rows: Vec<u64> = Vec::new();
    while let Some(item) = reader.next().map_err(|e| e.to_string())? {
        match item {
            Item::Segment(m) => {
                symbols.clear();
                for d in &m.symbology {
                    let k = *name_index.entry(d.symbol.clone()).or_insert_with(|| {
                        names.push(d.symbol.clone());
                        names.len() as u32 - 1
                    });
                    symbols.insert(d.instrument_id, k);
                }
                last_symbol = None;
                symbology = serde_json::to_string(&m.symbology).map_err(|e| e.to_string())?;
                (source, session, book) = (m.source, m.session, m.book);
            }
            Item::Record(r) => {
                if restarts.record(&r).is_some() {
                    restart_rows.push(rows); // the restarted session's first row (session records are no rows)
                }
                let capture_index = index;
                index += 1;
                if is_session_record(&r) {
                    // Made by the publisher for one session (heartbeats, the end, snapshot markers): not market
                    // data, and their zero timestamps would spoil the columns' statistics.
                    session_records += 1;
                    continue;
                }
                if let Some(bucket) = r.ts_recv_ns.checked_div(groups.span_ns) {
                    if span.is_some_and(|s| bucket > s) {
                        // A later time span: what is pending closes the row group.
                        if cols.rows() > 0 {
                            writer.write(&cols.finish(&schema, &names, &kinds, &sides, &mut nulled)?).map_err(io)?;
                        }
                        writer.finish_group().map_err(io)?;
                    }
                    span = span.max(Some(bucket));
                }
                let symbol = match last_symbol {
                    Some((id, k)) if id == r.instrument_id => k,
                    _ => {
                        let k = symbols.get(&r.instrument_id).copied().unwrap_or(NO_SYMBOL);
                        last_symbol = Some((r.instrument_id, k));
                        k
                    }
                };
                cols.push(capture_index, &r, symbol);
                rows += 1;
                if cols.rows() == BATCH_ROWS {
                    writer.write(&cols.finish(&schema, &names, &kinds, &sides, &mut nulled)?).map_err(io)?;
                }
            }
            Item::Gap { expected, got } => gaps.push(serde_json::json!({ "expected": expected, "got": got })),
            Item::Stop { reason, .. } => stop = reason.map_or("unknown", StopReason::as_str).to_owned(),
        }
    }
    if cols.rows() > 0 {
        writer.write(&cols.finish(&schema, &names, &kinds, &sides, &mut nulled)?).map_err(io)?;
    }
    let gap_count = gaps.len() as u64;
    for (k, v) in [
        ("mdfan.source", source),
        ("mdfan.session", session),
        ("mdfan.book", book),
        ("mdfan.symbology", symbology),
        ("mdfan.gaps", serde_json::Value::Array(gaps).to_string()),
        ("mdfan.restarts", serde_json::to_string(&restarts.found).map_err(|e| e.to_string())?),
        ("mdfan.restart_rows", serde_json::to_string(&restart_rows).map_err(|e| e.to_string())?),
        ("mdfan.session_records", session_records.to_string()),
        ("mdfan.stop", stop),
        ("mdfan.prices_out_of_range", nulled.prices.to_string()),
        ("mdfan.timestamps_out_of_range", nulled.timestamps.to_string()),
    ] {
        writer.file.append_key_value_metadata(KeyValue::new(k.to_owned(), v));
    }
    let row_groups = writer.close().map_err(io)?;
    file.sync_all().map_err(|e| format!("{}: fsync: {e}", path.display()))?;
    let bytes = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    let exported = Exported {
        rows,
        row_groups,
        gaps: gap_count,
        bytes,
        prices_out_of_range: nulled.prices,
        timestamps_out_of_range: nulled.timestamps,
    };
    Ok((exported, reader.torn().map(str::to_owned)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Decimal128Type;
    use arrow_array::Array;
    use mdfan_wire::{InstrumentDef, Side};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn record(seq: u64, instrument_id: u32, kind: Kind, price_e9: i64) -> BookUpdate {
        BookUpdate {
            seq,
            ts_event_ns: 1_000 + seq,
            ts_recv_ns: 2_000 + seq,
            venue_pos: seq << 16,
            price_e9,
            order_id: 70 + seq,
            instrument_id,
            size: 3,
            ts_send_ticks: 9,
            kind: kind as u8,
            side: Side::Ask as u8,
            flags: 0x80,
            level: 0,
        }
    }

    /// The file's key-value metadata (`mdfan.*`).
    fn kv(reader: &ParquetRecordBatchReaderBuilder<File>) -> HashMap<String, String> {
        let kv = reader.metadata().file_metadata().key_value_metadata().expect("mdfan.* metadata");
        kv.iter().map(|k| (k.key.clone(), k.value.clone().unwrap_or_default())).collect()
    }

    /// A capture with a gap, a record of an instrument the symbology does not name, one without a price and one
    /// of a kind this build does not know: each lands in its column or in the metadata as the docs say.
    #[test]
    fn gaps_unnamed_instruments_missing_prices_and_unknown_kinds_are_kept() {
        let (dir, mut w) = crate::test_support::writer("parquet", "t", "mbo", vec![InstrumentDef::new(7, "ESH4")]);
        w.record(&record(1, 7, Kind::Add, 4_810_250_000_000), 1).unwrap();
        w.gap(2, 5, 1).unwrap();
        w.record(&record(5, 8, Kind::Trade, i64::MAX), 1).unwrap();
        let mut odd = record(6, 7, Kind::Add, -1);
        odd.kind = 200;
        w.record(&odd, 1).unwrap();
        w.stop(StopReason::Interrupted, 2).unwrap();

        let out = dir.join("t.parquet");
        let (done, torn) = export(&dir, None, &out, RowGroups { rows: 2, span_ns: 0 }).unwrap();
        assert_eq!((done.rows, done.row_groups, done.gaps, torn), (3, 2, 1, None));
        assert!(!dir.join(format!("t.parquet.partial.{}", std::process::id())).exists());
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&out).unwrap()).unwrap();
        let kv = kv(&reader);
        assert_eq!(kv["mdfan.gaps"], r#"[{"expected":2,"got":5}]"#);
        assert_eq!((kv["mdfan.stop"].as_str(), kv["mdfan.session"].as_str()), ("interrupted", "unit"));
        let (mut symbols, mut kinds, mut prices) = (Vec::new(), Vec::new(), Vec::new());
        for b in reader.build().unwrap() {
            let b = b.unwrap();
            let col = |c: &str| b.column_by_name(c).unwrap().clone();
            let (symbol, kind, price) = (col("symbol"), col("kind"), col("price"));
            let (symbol, kind) = (symbol.as_string::<i32>(), kind.as_string::<i32>());
            let price = price.as_primitive::<Decimal128Type>();
            for i in 0..b.num_rows() {
                symbols.push(symbol.is_valid(i).then(|| symbol.value(i).to_owned()));
                kinds.push(kind.value(i).to_owned());
                prices.push(price.is_valid(i).then(|| price.value_as_string(i)));
            }
        }
        assert_eq!(symbols, [Some("ESH4".to_owned()), None, Some("ESH4".to_owned())]);
        assert_eq!(kinds, ["add", "trade", "unknown_200"]);
        assert_eq!(prices, [Some("4810.250000000".to_owned()), None, Some("-0.000000001".to_owned())]);
        // By time: spans of 3 ns are [2001, 2004), [2004, 2007): seq 1 (ts_recv 2001) alone, then seqs 5 and 6
        // (2005, 2006) together.
        let by_time = dir.join("t-by-time.parquet");
        let (done, _) = export(&dir, None, &by_time, RowGroups { rows: 1000, span_ns: 3 }).unwrap();
        assert_eq!((done.rows, done.row_groups), (3, 2));
        // ts_recv going back and forth across a span's edge (a breaker's capture did so on every record): it
        // goes back within the later group, not into a group per record.
        let (dir2, mut w) =
            crate::test_support::writer("parquet-back", "t", "mbo", vec![InstrumentDef::new(7, "ESH4")]);
        for seq in 1..=100 {
            let ts_recv_ns = if seq % 2 == 0 { 3_600_000_000_000 } else { 1 };
            w.record(&BookUpdate { ts_recv_ns, ..record(seq, 7, Kind::Add, 4_810_250_000_000) }, 1).unwrap();
        }
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let back = dir2.join("t.parquet");
        let (done, _) = export(&dir2, None, &back, RowGroups { rows: 1000, span_ns: 60_000_000_000 }).unwrap();
        assert_eq!((done.rows, done.row_groups), (100, 2), "seq 1 alone, then the 99 others");
        let _ = std::fs::remove_dir_all(&dir2);
        // Never over an existing file; nothing left behind.
        let e = export(&dir, None, &out, RowGroups { rows: 2, span_ns: 0 }).unwrap_err();
        assert!(e.ends_with("t.parquet: exists already (an export never overwrites a file)"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `price` holds 18 digits: the largest price below a billion is exact; a billion or more (no real price) is
    /// null there and counted, in the result and the file's metadata; `i64::MAX` (no price) is null, not counted.
    #[test]
    fn a_price_of_a_billion_or_more_is_null_and_counted() {
        let (dir, mut w) =
            crate::test_support::writer("parquet-range", "t", "mbo", vec![InstrumentDef::new(7, "ESH4")]);
        for (seq, price_e9) in
            [(1, 999_999_999_999_999_999), (2, PRICE_E9_LIMIT), (3, -PRICE_E9_LIMIT), (4, i64::MAX), (5, i64::MIN)]
        {
            w.record(&record(seq, 7, Kind::Add, price_e9), 1).unwrap();
        }
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let out = dir.join("t.parquet");
        let (done, _) = export(&dir, None, &out, RowGroups { rows: 1000, span_ns: 0 }).unwrap();
        assert_eq!((done.rows, done.prices_out_of_range), (5, 3));
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&out).unwrap()).unwrap();
        assert_eq!(kv(&reader)["mdfan.prices_out_of_range"], "3");
        let mut prices = Vec::new();
        for b in reader.build().unwrap() {
            let b = b.unwrap();
            let price = b.column_by_name("price").unwrap().as_primitive::<Decimal128Type>().clone();
            prices.extend((0..b.num_rows()).map(|i| price.is_valid(i).then(|| price.value_as_string(i))));
        }
        assert_eq!(prices, [Some("999999999.999999999".to_owned()), None, None, None, None]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A time past `i64::MAX` ns (DBN's undefined timestamp, `u64::MAX`) is null in its column and counted, not
    /// written as a negative time.
    #[test]
    fn a_timestamp_past_i64_is_null_and_counted() {
        let (dir, mut w) = crate::test_support::writer("parquet-ts", "t", "mbo", vec![InstrumentDef::new(7, "ESH4")]);
        w.record(&record(1, 7, Kind::Add, 1), 1).unwrap();
        w.record(&BookUpdate { ts_event_ns: u64::MAX, ..record(2, 7, Kind::Add, 1) }, 1).unwrap();
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let out = dir.join("t.parquet");
        let (done, _) = export(&dir, None, &out, RowGroups { rows: 1000, span_ns: 0 }).unwrap();
        assert_eq!((done.rows, done.timestamps_out_of_range), (2, 1));
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&out).unwrap()).unwrap();
        assert_eq!(kv(&reader)["mdfan.timestamps_out_of_range"], "1");
        let mut ts = Vec::new();
        for b in reader.build().unwrap() {
            let b = b.unwrap();
            let col = b.column_by_name("ts_event").unwrap();
            let col = col.as_primitive::<arrow_array::types::TimestampNanosecondType>();
            ts.extend((0..b.num_rows()).map(|i| col.is_valid(i).then(|| col.value(i))));
        }
        assert_eq!(ts, [Some(1_001), None]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
