//! DBN MBO files: load, validate and normalise.
//!
//! Source: Databento DBN docs ("DBN encoding", "MBO" schema; the `dbn` crate's `MboMsg`, 56 bytes, rtype
//! 0xA0). Files may be plain or zstd-compressed, DBN version 1 to 3; records are read as they are (MBO's layout
//! did not change between versions).
//!
//! Mapping from `MboMsg` to [`BookUpdate`]:
//!
//! | DBN field      | record field    | note                                          |
//! |----------------|-----------------|-----------------------------------------------|
//! | `action`       | `kind`          | `A` Add, `M` Modify, `C` Cancel, `T` Trade, `F` Fill, `R` Clear, `N` NoAction (no book change) |
//! | `side`         | `side`          | `B`, `A`, `N` unchanged                        |
//! | `flags`        | `flags`         | unchanged (LAST 0x80, SNAPSHOT 0x20, ...)      |
//! | `hd.instrument_id` | `instrument_id` |                                           |
//! | `order_id`, `price`, `size` | same, `price` as `price_e9` |                      |
//! | `sequence`     | `venue_seq`     | unchanged                                     |
//! | `hd.ts_event`, `ts_recv` | `ts_event_ns`, `ts_recv_ns` |                       |
//!
//! `seq` and `ts_send_ticks` are the publisher's to fill per subscriber at post time.

use std::path::{Path, PathBuf};

use std::io::Read;

use dbn::decode::{DbnDecoder, DbnMetadata, DecodeRecordRef, DynReader};
use dbn::{MboMsg, Schema, VersionUpgradePolicy};

use mdfan_wire::{BookUpdate, Kind, Side};

pub use dbn::MboMsg as DbnMboMsg;

/// Why a DBN file could not be used. Every variant names the file; decode errors also name the record.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The file could not be opened, or its header (metadata) could not be decoded.
    #[error("feed {path}: cannot open DBN file: {detail}")]
    Open {
        /// The DBN file.
        path: PathBuf,
        /// The decoder's message.
        detail: String,
    },
    /// The file holds another schema than MBO.
    #[error("feed {path}: schema is {schema}, expected mbo")]
    Schema {
        /// The DBN file.
        path: PathBuf,
        /// The schema the file holds.
        schema: String,
    },
    /// A record could not be decoded (corrupt or truncated file). `record` is 1-based.
    #[error("feed {path}: record {record}: {detail}")]
    Decode {
        /// The DBN file.
        path: PathBuf,
        /// 1-based index of the record.
        record: u64,
        /// The decoder's message.
        detail: String,
    },
    /// The (zstd) stream could not be read to its end: truncated or corrupt compressed data.
    #[error("feed {path}: stream unreadable after {bytes_read} decompressed bytes (truncated or corrupt): {detail}")]
    Read {
        /// The DBN file.
        path: PathBuf,
        /// Decompressed bytes read before the failure.
        bytes_read: usize,
        /// The decoder's message.
        detail: String,
    },
    /// A record decoded but one of its fields is not valid for MBO. `record` is 1-based.
    #[error("feed {path}: record {record}: field {field}: {detail}")]
    Field {
        /// The DBN file.
        path: PathBuf,
        /// 1-based index of the record.
        record: u64,
        /// The field's name in DBN's `MboMsg`.
        field: &'static str,
        /// The decoder's message.
        detail: String,
    },
    /// The file is not a regular file (a directory, a device, a FIFO).
    #[error("feed {path}: not a regular file")]
    NotAFile {
        /// The DBN file.
        path: PathBuf,
    },
    /// The decompressed stream is larger than [`MAX_FEED_BYTES`].
    #[error("feed {path}: more than {MAX_FEED_BYTES} bytes once decompressed")]
    TooLarge {
        /// The DBN file.
        path: PathBuf,
    },
    /// The file holds no records at all.
    #[error("feed {path}: no MBO records")]
    Empty {
        /// The DBN file.
        path: PathBuf,
    },
}

/// Why one MBO message could not be normalised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    /// `action` is not one of `A M C T F R N`.
    #[error("action {0:?} is not one of A, M, C, T, F, R, N")]
    Action(char),
    /// `side` is not one of `B A N`.
    #[error("side {0:?} is not one of B, A, N")]
    Side(char),
}

impl NormalizeError {
    fn field(&self) -> &'static str {
        match self {
            NormalizeError::Action(_) => "action",
            NormalizeError::Side(_) => "side",
        }
    }
}

/// Maps one DBN action character to a [`Kind`].
#[inline]
pub fn kind_from_action(action: u8) -> Result<Kind, NormalizeError> {
    Ok(match action {
        b'A' => Kind::Add,
        b'M' => Kind::Modify,
        b'C' => Kind::Cancel,
        b'T' => Kind::Trade,
        b'F' => Kind::Fill,
        b'R' => Kind::Clear,
        b'N' => Kind::NoAction,
        other => return Err(NormalizeError::Action(other as char)),
    })
}

/// Normalises one MBO message into a record with `seq` and `ts_send_ticks` zero. Allocation-free.
#[inline]
pub fn normalize_mbo(msg: &MboMsg) -> Result<BookUpdate, NormalizeError> {
    let kind = kind_from_action(msg.action as u8)?;
    let side = Side::from_u8(msg.side as u8).ok_or(NormalizeError::Side(msg.side as u8 as char))?;
    Ok(BookUpdate {
        seq: 0,
        ts_event_ns: msg.hd.ts_event,
        ts_recv_ns: msg.ts_recv,
        ts_send_ticks: 0,
        price_e9: msg.price,
        order_id: msg.order_id,
        instrument_id: msg.hd.instrument_id,
        size: msg.size,
        venue_seq: msg.sequence,
        kind: kind as u8,
        side: side as u8,
        flags: msg.flags.raw(),
        _pad: 0,
    })
}

/// A whole MBO file, decoded and checked, ready to replay.
#[derive(Debug, Clone)]
pub struct MboFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The DBN dataset named in the metadata, e.g. `GLBX.MDP3`.
    pub dataset: String,
    /// Every record, in file order. 56 bytes each.
    pub records: Vec<MboMsg>,
}

/// Reads and checks a whole DBN MBO file (plain or zstd).
///
/// Every record is decoded and normalised once here, so a corrupt, truncated or foreign file is refused
/// before anything is sent, with an error naming the file, the record number and the field.
///
/// # Errors
/// [`FeedError`]: the file cannot be opened or its metadata decoded, it is not MBO, a record is corrupt or
/// truncated, a field is invalid, or it holds no records.
pub fn load_mbo_file(path: &Path) -> Result<MboFile, FeedError> {
    let open_err = |detail: String| FeedError::Open { path: path.to_owned(), detail };
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(FeedError::NotAFile { path: path.to_owned() }),
        Err(e) => return Err(open_err(format!("opening file to decode at path '{}': {e}", path.display()))),
    }
    // Decompress (when zstd) into memory first: the `dbn` decoder stops quietly at a partial record, so the
    // record framing is checked here before decoding, and a truncated file is an error, not a short replay.
    let mut raw = Vec::new();
    DynReader::from_file(path)
        .map_err(|e| open_err(e.to_string()))?
        .take(MAX_FEED_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| FeedError::Read { path: path.to_owned(), bytes_read: raw.len(), detail: e.to_string() })?;
    if raw.len() as u64 > MAX_FEED_BYTES {
        return Err(FeedError::TooLarge { path: path.to_owned() });
    }
    decode_mbo_bytes(path, &raw)
}

/// The largest decompressed feed file loaded into memory: 4 GiB (about 76 million MBO records).
pub const MAX_FEED_BYTES: u64 = 4 << 30;

/// Decodes and checks a decompressed DBN MBO stream already in memory; `path` only names it in errors.
///
/// # Errors
/// As [`load_mbo_file`], except opening and decompressing.
pub fn decode_mbo_bytes(path: &Path, raw: &[u8]) -> Result<MboFile, FeedError> {
    let open_err = |detail: String| FeedError::Open { path: path.to_owned(), detail };
    check_framing(path, raw)?;
    let mut decoder =
        DbnDecoder::with_upgrade_policy(raw, VersionUpgradePolicy::AsIs).map_err(|e| open_err(e.to_string()))?;
    let metadata = decoder.metadata().clone();
    if metadata.schema != Some(Schema::Mbo) {
        return Err(FeedError::Schema {
            path: path.to_owned(),
            schema: metadata.schema.map_or("mixed".to_owned(), |s| s.to_string()),
        });
    }
    let mut records = Vec::new();
    loop {
        let record = records.len() as u64 + 1;
        let decode_err = |detail: String| FeedError::Decode { path: path.to_owned(), record, detail };
        let rec = match decoder.decode_record_ref() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => return Err(decode_err(e.to_string())),
        };
        let Some(msg) = rec.get::<MboMsg>() else {
            return Err(decode_err(format!("rtype {:#04x} is not an MBO record (0xa0)", rec.header().rtype)));
        };
        if let Err(e) = normalize_mbo(msg) {
            return Err(FeedError::Field { path: path.to_owned(), record, field: e.field(), detail: e.to_string() });
        }
        records.push(*msg);
    }
    if records.is_empty() {
        return Err(FeedError::Empty { path: path.to_owned() });
    }
    Ok(MboFile { path: path.to_owned(), dataset: metadata.dataset, records })
}

/// DBN rtype of `MboMsg`.
const MBO_RTYPE: u8 = 0xa0;
/// Size of `MboMsg` in bytes.
const MBO_BYTES: usize = std::mem::size_of::<MboMsg>();

/// Walks the record framing of a decompressed DBN stream: `b"DBN"`, a version byte, a u32 LE metadata length,
/// the metadata, then records whose first header byte is their length in 4-byte words (DBN docs, "Record
/// header"). The records must end exactly at the end of the stream.
fn check_framing(path: &Path, raw: &[u8]) -> Result<(), FeedError> {
    let open_err = |detail: &str| FeedError::Open { path: path.to_owned(), detail: detail.to_owned() };
    if raw.len() < 8 || &raw[..3] != b"DBN" {
        return Err(open_err("not a DBN stream (no `DBN` prefix)"));
    }
    let metadata_len = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]) as usize;
    let mut pos = 8usize.saturating_add(metadata_len);
    if pos > raw.len() {
        return Err(open_err("metadata runs past the end of the file"));
    }
    let mut record = 0u64;
    while pos < raw.len() {
        record += 1;
        let len_bytes = raw[pos] as usize * 4;
        let rtype = raw.get(pos + 1).copied().unwrap_or(0);
        // Every record here must be a whole MboMsg: the decoder below assumes 8-byte aligned records of the
        // size their rtype implies, and a shorter one would make it panic.
        if rtype == MBO_RTYPE && len_bytes != MBO_BYTES {
            return Err(FeedError::Decode {
                path: path.to_owned(),
                record,
                detail: format!("MBO record length {len_bytes} bytes, expected {MBO_BYTES}"),
            });
        }
        if len_bytes < 16 || !len_bytes.is_multiple_of(8) {
            return Err(FeedError::Decode {
                path: path.to_owned(),
                record,
                detail: format!("record length {len_bytes} bytes is not a whole number of 8-byte words of at least 16"),
            });
        }
        if pos + len_bytes > raw.len() {
            return Err(FeedError::Decode {
                path: path.to_owned(),
                record,
                detail: format!("truncated: record needs {len_bytes} bytes, {} left at end of file", raw.len() - pos),
            });
        }
        pos += len_bytes;
    }
    Ok(())
}
