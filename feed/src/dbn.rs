//! DBN MBO files: decoded as a stream, checked and normalised record by record.
//!
//! Source: Databento DBN docs ("DBN encoding": the `DBN` prefix, version byte, u32 LE metadata length and
//! metadata, then records whose first header byte is their length in 4-byte words; "MBO" schema: the `dbn`
//! crate's `MboMsg`, 56 bytes, rtype 0xA0). Files may be plain or zstd-compressed (one or more concatenated
//! zstd frames), DBN version 1 to 3: the metadata is decoded by the `dbn` crate for its version, and records
//! are read as they are (MBO's layout did not change between versions).
//!
//! [`MboStream`] reads one record at a time from a buffered (decompressing) reader: memory does not grow with
//! the file, and there is no size limit. A record that is truncated, of the wrong length or type, or with a
//! field that is not valid MBO, stops the stream with a [`FeedError`] naming the file, the record (1-based) and
//! its byte offset in the decompressed DBN stream; the records before it were delivered.
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
//!
//! Symbology ([`MboStream::symbology`]): the metadata's symbol mappings (Databento docs, "Symbology": per
//! requested symbol, the `stype_out` symbol for each date interval) become instrument_id → symbol, for the
//! intervals that overlap the file's `start`..`end` dates. A file requested by raw symbol (`stype_in`
//! `raw_symbol`, `stype_out` `instrument_id`, as the bundled ESH4 files: `ESH4` → 17077) maps each interval's
//! instrument_id to the raw symbol; one requested by instrument_id maps the other way. Other symbology types
//! (continuous, parent) carry no raw symbol and give an empty symbology. DBN carries no tick size or display
//! factor, so each definition has display factor 1 and an unknown tick size.

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use dbn::decode::dbn::MetadataDecoder;
use dbn::decode::DynReader;
use dbn::{FlagSet, MboMsg, SType, Schema};

use mdfan_wire::{BookUpdate, InstrumentDef, Kind, Side, Symbology};

pub use dbn::MboMsg as DbnMboMsg;

/// Why a DBN file could not be used. Every variant names the file; decode errors also name the record and its
/// byte offset in the decompressed DBN stream.
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
    #[error("feed {path}: record {record} at byte {offset}{}: {detail}", of_stream(*decompressed))]
    Decode {
        /// The DBN file.
        path: PathBuf,
        /// 1-based index of the record.
        record: u64,
        /// Where the record starts, in bytes from the start of the decompressed DBN stream.
        offset: u64,
        /// The file is zstd-compressed, so `offset` is not a position in the file (the message says so).
        decompressed: bool,
        /// What is wrong.
        detail: String,
    },
    /// The (zstd) stream could not be read: truncated or corrupt compressed data.
    #[error("feed {path}: record {record} at byte {offset}{}: stream unreadable (truncated or corrupt): {detail}", of_stream(*decompressed))]
    Read {
        /// The DBN file.
        path: PathBuf,
        /// 1-based index of the record being read.
        record: u64,
        /// Decompressed bytes read before the failure.
        offset: u64,
        /// The file is zstd-compressed, so `offset` is not a position in the file (the message says so).
        decompressed: bool,
        /// The decompressor's message.
        detail: String,
    },
    /// A record decoded but one of its fields is not valid for MBO. `record` is 1-based.
    #[error("feed {path}: record {record} at byte {offset}{}: field {field}: {detail}", of_stream(*decompressed))]
    Field {
        /// The DBN file.
        path: PathBuf,
        /// 1-based index of the record.
        record: u64,
        /// Where the record starts, in bytes from the start of the decompressed DBN stream.
        offset: u64,
        /// The file is zstd-compressed, so `offset` is not a position in the file (the message says so).
        decompressed: bool,
        /// The field's name in DBN's `MboMsg`.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The file is not a regular file (a directory, a device, a FIFO).
    #[error("feed {path}: not a regular file")]
    NotAFile {
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
        level: 0,
    })
}

/// A whole MBO file, decoded and checked (tests, benches and fuzz targets; the publisher streams with
/// [`MboStream`]).
#[derive(Debug, Clone)]
pub struct MboFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The DBN dataset named in the metadata, e.g. `GLBX.MDP3`.
    pub dataset: String,
    /// Every record, in file order. 56 bytes each.
    pub records: Vec<MboMsg>,
}

/// Reads and checks a whole DBN MBO file (plain or zstd) into memory, through [`MboStream`]: for tests and
/// benches. Memory grows with the file; the publisher streams instead.
///
/// # Errors
/// As [`MboStream::open`] and [`MboStream::next_msg`]; [`FeedError::Empty`] for a file without records.
pub fn load_mbo_file(path: &Path) -> Result<MboFile, FeedError> {
    collect(MboStream::open(path)?)
}

/// Decodes and checks a decompressed DBN MBO stream already in memory; `path` only names it in errors.
///
/// # Errors
/// As [`load_mbo_file`], except opening and decompressing.
pub fn decode_mbo_bytes(path: &Path, raw: &[u8]) -> Result<MboFile, FeedError> {
    collect(MboStream::from_reader(path, raw)?)
}

fn collect<R: Read>(mut stream: MboStream<R>) -> Result<MboFile, FeedError> {
    let mut records = Vec::new();
    while let Some(msg) = stream.next_msg()? {
        records.push(msg);
    }
    if records.is_empty() {
        return Err(FeedError::Empty { path: stream.path });
    }
    Ok(MboFile { path: stream.path, dataset: stream.dataset, records })
}

/// DBN rtype of `MboMsg`.
const MBO_RTYPE: u8 = 0xa0;
/// Size of `MboMsg` in bytes.
const MBO_BYTES: usize = std::mem::size_of::<MboMsg>();
/// The largest metadata block accepted, in bytes (a corrupt length must not allocate gigabytes).
const MAX_METADATA_BYTES: usize = 64 << 20;
/// Bytes of the (decompressing) read buffer.
const READ_BUFFER_BYTES: usize = 1 << 16;

/// A DBN MBO file read record by record. See the module docs.
pub struct MboStream<R> {
    path: PathBuf,
    reader: R,
    symbology: Symbology,
    dataset: String,
    version: u8,
    /// Records read so far.
    records: u64,
    /// Decompressed bytes consumed so far (the offset of the next record).
    offset: u64,
    /// The file is zstd-compressed: errors say `offset` counts decompressed bytes.
    decompressed: bool,
    /// Set once the stream ended or failed: nothing more is read.
    done: bool,
}

impl MboStream<BufReader<DynReader<'static, BufReader<std::fs::File>>>> {
    /// Opens a DBN MBO file (plain or zstd, detected from its first bytes) and decodes its metadata.
    ///
    /// # Errors
    /// [`FeedError::NotAFile`], [`FeedError::Open`] (missing, unreadable, not DBN, bad metadata),
    /// [`FeedError::Schema`] (not MBO).
    pub fn open(path: &Path) -> Result<Self, FeedError> {
        let open_err = |detail: String| FeedError::Open { path: path.to_owned(), detail };
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(FeedError::NotAFile { path: path.to_owned() }),
            Err(e) => return Err(open_err(format!("opening file to decode at path '{}': {e}", path.display()))),
        }
        let reader = DynReader::from_file(path).map_err(|e| open_err(e.to_string()))?;
        let mut stream = MboStream::from_reader(path, BufReader::with_capacity(READ_BUFFER_BYTES, reader))?;
        stream.decompressed = is_zstd(path);
        Ok(stream)
    }
}

impl<R: Read> MboStream<R> {
    /// Reads the DBN prefix and metadata from `reader` (decompressed DBN bytes); `path` names it in errors.
    ///
    /// # Errors
    /// [`FeedError::Open`] (not DBN, bad metadata), [`FeedError::Schema`] (not MBO).
    pub fn from_reader(path: &Path, mut reader: R) -> Result<Self, FeedError> {
        let open_err = |detail: String| FeedError::Open { path: path.to_owned(), detail };
        let mut prefix = [0u8; 8];
        read_full(&mut reader, &mut prefix).map_err(|e| open_err(format!("reading the DBN prefix: {e}")))?;
        if &prefix[..3] != b"DBN" {
            return Err(open_err("not a DBN stream (no `DBN` prefix)".to_owned()));
        }
        let version = prefix[3];
        let metadata_len = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]) as usize;
        if metadata_len > MAX_METADATA_BYTES {
            return Err(open_err(format!("metadata length {metadata_len} bytes is over {MAX_METADATA_BYTES}")));
        }
        let mut header = prefix.to_vec();
        header.resize(8 + metadata_len, 0);
        read_full(&mut reader, &mut header[8..])
            .map_err(|e| open_err(format!("metadata runs past the end of the file: {e}")))?;
        let metadata = MetadataDecoder::new(&header[..]).decode().map_err(|e| open_err(e.to_string()))?;
        if metadata.schema != Some(Schema::Mbo) {
            return Err(FeedError::Schema {
                path: path.to_owned(),
                schema: metadata.schema.map_or("mixed".to_owned(), |s| s.to_string()),
            });
        }
        let symbology = symbology_from_metadata(&metadata).map_err(open_err)?;
        Ok(MboStream {
            path: path.to_owned(),
            reader,
            symbology,
            dataset: metadata.dataset,
            version,
            records: 0,
            offset: header.len() as u64,
            decompressed: false,
            done: false,
        })
    }

    /// The file (or the name given to [`MboStream::from_reader`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The DBN dataset named in the metadata, e.g. `GLBX.MDP3`.
    pub fn dataset(&self) -> &str {
        &self.dataset
    }

    /// instrument_id → symbol from the metadata's symbol mappings (module docs, "Symbology"); empty when the
    /// file carries none usable.
    pub fn symbology(&self) -> &Symbology {
        &self.symbology
    }

    /// The DBN version byte of the file (1 to 3).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record, checked (whole, MBO, 56 bytes, its action and side valid), or `None` at the end of
    /// the file. After an error or the end, every call returns `Ok(None)`.
    ///
    /// # Errors
    /// [`FeedError::Read`] (the decompressor failed), [`FeedError::Decode`] (truncated record, bad length or
    /// rtype), [`FeedError::Field`] (bad action or side); each names the record and its byte offset.
    pub fn next_msg(&mut self) -> Result<Option<MboMsg>, FeedError> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_msg();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    /// As [`MboStream::next_msg`], normalised into a [`BookUpdate`] (`seq` and `ts_send_ticks` zero).
    ///
    /// # Errors
    /// As [`MboStream::next_msg`].
    pub fn next_update(&mut self) -> Result<Option<BookUpdate>, FeedError> {
        Ok(self.next_msg()?.map(|m| normalize_mbo(&m).expect("next_msg checked it normalises")))
    }

    fn read_msg(&mut self) -> Result<Option<MboMsg>, FeedError> {
        let (record, offset, decompressed) = (self.records + 1, self.offset, self.decompressed);
        let decode_err = |path: &Path, detail: String| FeedError::Decode {
            path: path.to_owned(),
            record,
            offset,
            decompressed,
            detail,
        };
        let read_err = |path: &Path, e: std::io::Error| FeedError::Read {
            path: path.to_owned(),
            record,
            offset,
            decompressed,
            detail: e.to_string(),
        };
        let mut buf = [0u8; MBO_BYTES];
        // The first byte tells the end of the file (nothing more) from a record.
        let first = loop {
            match self.reader.read(&mut buf[..1]) {
                Ok(0) => return Ok(None),
                Ok(_) => break buf[0],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_err(&self.path, e)),
            }
        };
        let len_bytes = first as usize * 4;
        // Every record of an MBO file is a whole 56-byte MboMsg (the rtype is checked once it is read).
        if len_bytes != MBO_BYTES {
            return Err(decode_err(&self.path, format!("MBO record length {len_bytes} bytes, expected {MBO_BYTES}")));
        }
        match read_full(&mut self.reader, &mut buf[1..]) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(decode_err(
                    &self.path,
                    format!("truncated: record needs {len_bytes} bytes, the file ends before"),
                ))
            }
            Err(e) => return Err(read_err(&self.path, e)),
        }
        if buf[1] != MBO_RTYPE {
            return Err(decode_err(&self.path, format!("rtype {:#04x} is not an MBO record (0xa0)", buf[1])));
        }
        let msg = mbo_from_bytes(&buf);
        if let Err(e) = normalize_mbo(&msg) {
            return Err(FeedError::Field {
                path: self.path.clone(),
                record,
                offset,
                decompressed,
                field: e.field(),
                detail: e.to_string(),
            });
        }
        self.records = record;
        self.offset += len_bytes as u64;
        Ok(Some(msg))
    }
}

/// How an error names `offset`'s stream: nothing for a plain file (the offset is the file's), else that it
/// counts decompressed bytes.
fn of_stream(decompressed: bool) -> &'static str {
    if decompressed {
        " of the decompressed stream"
    } else {
        ""
    }
}

/// Whether the file starts with the zstd frame magic (RFC 8878 section 3.1.1: 0xFD2FB528, little-endian).
fn is_zstd(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == [0x28, 0xB5, 0x2F, 0xFD]
}

/// Julian day number of 1970-01-01.
const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
/// Nanoseconds in a day.
const NS_PER_DAY: u64 = 86_400_000_000_000;

/// The symbology of the metadata's mappings over the file's dates (module docs). The first mapping of an
/// instrument_id wins.
///
/// # Errors
/// A mapping whose instrument_id side is not a `u32`, named with its raw symbol and interval.
fn symbology_from_metadata(metadata: &dbn::Metadata) -> Result<Symbology, String> {
    let id_out = metadata.stype_out == SType::InstrumentId;
    let id_in = metadata.stype_in == Some(SType::InstrumentId);
    if !(id_out || id_in) {
        return Ok(Symbology::new());
    }
    // The file's dates as Julian day numbers: [first, last] (an `end` at midnight excludes that day).
    let first = UNIX_EPOCH_JULIAN_DAY + (metadata.start / NS_PER_DAY) as i64;
    let last = metadata.end.map_or(i64::MAX, |e| UNIX_EPOCH_JULIAN_DAY + ((e.get() - 1) / NS_PER_DAY) as i64);
    let mut symbology = Symbology::new();
    for mapping in &metadata.mappings {
        for iv in &mapping.intervals {
            // The interval covers start_date..end_date, its end exclusive.
            let (from, to) = (iv.start_date.to_julian_day() as i64, iv.end_date.to_julian_day() as i64);
            if iv.symbol.is_empty() || to <= first || from > last {
                continue;
            }
            let (id_text, symbol) =
                if id_out { (&iv.symbol, &mapping.raw_symbol) } else { (&mapping.raw_symbol, &iv.symbol) };
            let id: u32 = id_text.parse().map_err(|_| {
                format!(
                    "metadata symbol mapping `{}` for {}..{}: `{id_text}` is not an instrument_id (0 to {})",
                    mapping.raw_symbol,
                    iv.start_date,
                    iv.end_date,
                    u32::MAX
                )
            })?;
            if symbology.get(id).is_none() {
                symbology.insert(InstrumentDef::new(id, symbol.as_str()));
            }
        }
    }
    Ok(symbology)
}

/// Fills `buf` from `reader`; `UnexpectedEof` when the reader ends first.
fn read_full<R: Read>(reader: &mut R, buf: &mut [u8]) -> std::io::Result<()> {
    reader.read_exact(buf)
}

/// An `MboMsg` from its 56 little-endian bytes (DBN docs, "MBO": header 16 B (length, rtype, publisher_id u16,
/// instrument_id u32, ts_event u64), order_id u64 @16, price i64 @24, size u32 @32, flags u8 @36, channel_id u8
/// @37, action @38, side @39, ts_recv u64 @40, ts_in_delta i32 @48, sequence u32 @52).
fn mbo_from_bytes(b: &[u8; MBO_BYTES]) -> MboMsg {
    let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let mut msg = MboMsg::default();
    msg.hd.rtype = b[1];
    msg.hd.publisher_id = u16_at(2);
    msg.hd.instrument_id = u32_at(4);
    msg.hd.ts_event = u64_at(8);
    msg.order_id = u64_at(16);
    msg.price = u64_at(24) as i64;
    msg.size = u32_at(32);
    msg.flags = FlagSet::new(b[36]);
    msg.channel_id = b[37];
    msg.action = b[38] as std::ffi::c_char;
    msg.side = b[39] as std::ffi::c_char;
    msg.ts_recv = u64_at(40);
    msg.ts_in_delta = u32_at(48) as i32;
    msg.sequence = u32_at(52);
    msg
}
