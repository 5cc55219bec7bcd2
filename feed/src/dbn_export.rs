//! Order-level records back to DBN MBO: the inverse of [`crate::dbn`]'s mapping, for `mdfan-capture export
//! --dbn` (so Databento's tools and any DBN reader take a capture).
//!
//! Source: Databento DBN docs ("DBN encoding", "MBO" schema; "Symbology": a raw-symbol request maps each
//! symbol to its instrument_id per date interval). The file is DBN version 3, schema MBO, `stype_in`
//! `raw_symbol`, `stype_out` `instrument_id`, `ts_out` off; plain, or zstd-compressed (one frame) when asked.
//!
//! | record field                 | `MboMsg` field                 | note                                      |
//! |------------------------------|--------------------------------|-------------------------------------------|
//! | `kind`                       | `action`                       | Add `A`, Modify `M`, Cancel `C`, Trade `T`, Fill `F`, Clear `R`, NoAction `N` |
//! | `side`, `flags`              | `side`, `flags`                | unchanged                                 |
//! | `instrument_id`              | `hd.instrument_id`             |                                           |
//! | `order_id`, `price_e9`, `size` | `order_id`, `price`, `size`  |                                           |
//! | `venue_pos`                  | `sequence`                     | the venue seq ([`BookUpdate::venue_seq`]), low 32 bits |
//! | `ts_event_ns`, `ts_recv_ns`  | `hd.ts_event`, `ts_recv`       |                                           |
//! | (none)                       | `hd.publisher_id`, `channel_id`, `ts_in_delta` | 0: the record does not carry them |
//!
//! Records of other kinds (snapshot markers, heartbeats, the end of stream, stale marks, trading and feed
//! status, price-level kinds) have no MBO form: [`MboWriter::push`] leaves them out and counts them.
//! The metadata's mappings are the symbology's instruments over the dates `start_ns`..`end_ns` touch.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use dbn::encode::dbn::{MetadataEncoder, RecordEncoder};
use dbn::encode::EncodeRecord;
pub use dbn::Metadata;
use dbn::{FlagSet, MappingInterval, MboMsg, RecordHeader, SType, Schema, SymbolMapping};
use mdfan_wire::{BookUpdate, InstrumentDef, Kind};

const NS_PER_DAY: u64 = 86_400_000_000_000;

/// A DBN file being written, or one that could not be: named with the path.
#[derive(Debug, thiserror::Error)]
#[error("DBN export {path}: {detail}")]
pub struct ExportError {
    /// The file.
    pub path: PathBuf,
    /// What failed.
    pub detail: String,
}

/// The DBN action of an order-level kind; `None` for a kind MBO has no record for.
pub fn action_of(kind: Kind) -> Option<u8> {
    Some(match kind {
        Kind::Add => b'A',
        Kind::Modify => b'M',
        Kind::Cancel => b'C',
        Kind::Trade => b'T',
        Kind::Fill => b'F',
        Kind::Clear => b'R',
        Kind::NoAction => b'N',
        _ => return None,
    })
}

/// `r` as an `MboMsg` (module docs); `None` when its kind has no MBO form.
pub fn to_mbo(r: &BookUpdate) -> Option<MboMsg> {
    let action = action_of(r.kind()?)?;
    Some(MboMsg {
        hd: RecordHeader::new::<MboMsg>(dbn::rtype::MBO, 0, r.instrument_id, r.ts_event_ns),
        order_id: r.order_id,
        price: r.price_e9,
        size: r.size,
        flags: FlagSet::new(r.flags),
        channel_id: 0,
        action: action as std::ffi::c_char,
        side: r.side as std::ffi::c_char,
        ts_recv: r.ts_recv_ns,
        ts_in_delta: 0,
        sequence: r.venue_seq() as u32,
    })
}

/// Whether `metadata` encodes as DBN (a dataset of at most 15 ASCII characters, symbols DBN can hold): the
/// encoder's own error, before any file is written.
///
/// # Errors
/// The DBN encoder's message.
pub fn check_metadata(metadata: &Metadata) -> Result<(), String> {
    MetadataEncoder::new(&mut Vec::<u8>::new()).encode(metadata).map_err(|e| e.to_string())
}

/// The DBN metadata of an export (module docs): `dataset` as given, `start_ns` and `end_ns` (exclusive) the
/// records' `ts_recv` span, a raw-symbol mapping per instrument of `symbology` over the days it touches.
pub fn metadata(dataset: &str, symbology: &[InstrumentDef], start_ns: u64, end_ns: u64) -> Metadata {
    let day = |ns: u64| time::Date::from_julian_day(2_440_588 + (ns / NS_PER_DAY) as i32).unwrap_or(time::Date::MIN);
    let (first, after_last) = (day(start_ns), day(end_ns.max(start_ns + 1) - 1).next_day().unwrap_or(time::Date::MAX));
    let mappings = symbology
        .iter()
        .map(|d| SymbolMapping {
            raw_symbol: d.symbol.clone(),
            intervals: vec![MappingInterval {
                start_date: first,
                end_date: after_last,
                symbol: d.instrument_id.to_string(),
            }],
        })
        .collect();
    Metadata::builder()
        .dataset(dataset.to_owned())
        .schema(Some(Schema::Mbo))
        .start(start_ns)
        .end(NonZeroU64::new(end_ns))
        .stype_in(Some(SType::RawSymbol))
        .stype_out(SType::InstrumentId)
        .symbols(symbology.iter().map(|d| d.symbol.clone()).collect())
        .mappings(mappings)
        .build()
}

/// The file's bytes: plain, or through one zstd frame finished explicitly (so a failure to finish is an error,
/// not a drop that loses it).
enum Sink {
    Plain(BufWriter<File>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Zstd(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Zstd(w) => w.flush(),
        }
    }
}

/// Writes MBO records to a DBN file (module docs).
pub struct MboWriter {
    path: PathBuf,
    sink: Sink,
    /// Records written.
    pub written: u64,
    /// Records left out (no MBO form).
    pub left_out: u64,
}

impl MboWriter {
    /// Starts a DBN stream with `metadata` in `file` (created by the caller), zstd-compressed if `zstd`.
    ///
    /// # Errors
    /// [`ExportError`] naming `path` when the metadata cannot be written.
    pub fn new(file: File, path: &Path, metadata: &Metadata, zstd: bool) -> Result<MboWriter, ExportError> {
        let err = |detail: String| ExportError { path: path.to_owned(), detail };
        let out = BufWriter::with_capacity(1 << 20, file);
        let mut sink = if zstd {
            Sink::Zstd(zstd::stream::write::Encoder::new(out, 3).map_err(|e| err(format!("zstd: {e}")))?)
        } else {
            Sink::Plain(out)
        };
        MetadataEncoder::new(&mut sink).encode(metadata).map_err(|e| err(format!("metadata: {e}")))?;
        Ok(MboWriter { path: path.to_owned(), sink, written: 0, left_out: 0 })
    }

    /// Writes `r` as an MBO record; `false` (and counted in `left_out`) when it has no MBO form.
    ///
    /// # Errors
    /// [`ExportError`] naming the file when it cannot be written.
    pub fn push(&mut self, r: &BookUpdate) -> Result<bool, ExportError> {
        let Some(m) = to_mbo(r) else {
            self.left_out += 1;
            return Ok(false);
        };
        RecordEncoder::new(&mut self.sink).encode_record(&m).map_err(|e| ExportError {
            path: self.path.clone(),
            detail: format!("record {}: {e}", self.written + 1),
        })?;
        self.written += 1;
        Ok(true)
    }

    /// Ends the stream (the zstd frame), flushes and fsyncs the file.
    ///
    /// # Errors
    /// [`ExportError`] naming the file.
    pub fn finish(self) -> Result<(), ExportError> {
        let err =
            |what: &str, e: std::io::Error| ExportError { path: self.path.clone(), detail: format!("{what}: {e}") };
        let out = match self.sink {
            Sink::Plain(w) => w,
            Sink::Zstd(w) => w.finish().map_err(|e| err("finishing the zstd frame", e))?,
        };
        let file = out.into_inner().map_err(|e| err("flush", e.into_error()))?;
        file.sync_all().map_err(|e| err("fsync", e))
    }
}
