//! DBN MBO files: decoded as a stream, checked and normalised record by record.
//!
//! Source: Databento DBN docs ("DBN encoding": the `DBN` prefix, version byte, u32 LE metadata length and
//! metadata, then records whose first header byte is their length in 4-byte words; "MBO" schema: the `dbn`
//! crate's `MboMsg`, 56 bytes, rtype 0xA0). Files may be plain or zstd-compressed (one or more concatenated
//! zstd frames, skippable frames among them, RFC 8878 section 3.1.2: `pzstd` starts its files with one), DBN
//! version 1 to 3: the metadata is decoded by the `dbn` crate for its version, and records are read as they are
//! (MBO's layout did not change between versions).
//!
//! Live-style files (what the Databento live gateway sends, saved as is): the metadata's `schema` may be unset
//! (mixed) or MBO, `stype_in` unset, and `ts_out` on, so every record carries the gateway's send time as 8 more
//! bytes (an MBO record is then 64 bytes). Records other than MBO are skipped and counted
//! ([`MboStream::skipped`]): the gateway's `SymbolMappingMsg` (rtype 0x16), whose instrument_id →
//! `stype_out_symbol` goes into the symbology, `SystemMsg` (0x17: heartbeats) and `ErrorMsg` (0x15); in a file
//! whose schema is unset, records of any other schema too. A record's `ts_out` has no place in the 64-byte
//! [`BookUpdate`]: it is kept beside it, [`MboStream::ts_out`] (and [`MboFile::ts_out`]).
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
//! | `sequence`     | `venue_pos`     | the venue seq; [`MboStream`] numbers the records of one `sequence` 0, 1, ... (`wire::record`, "Venue position") |
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

use mdfan_wire::{venue_position, BookUpdate, InstrumentDef, Kind, Side, Symbology, VenueRun};

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

impl FeedError {
    /// Marks a record error's offset as one in the decompressed stream (the error was made before the stream
    /// knew it was compressed).
    fn set_decompressed(&mut self, zstd: bool) {
        match self {
            FeedError::Decode { decompressed, .. }
            | FeedError::Read { decompressed, .. }
            | FeedError::Field { decompressed, .. } => *decompressed = zstd,
            _ => {}
        }
    }
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

/// Normalises one MBO message into a record with `seq` and `ts_send_ticks` zero, its venue position the
/// message's `sequence` and index 0 ([`MboStream::next_update`] numbers the records of one `sequence`).
/// Allocation-free.
#[inline]
pub fn normalize_mbo(msg: &MboMsg) -> Result<BookUpdate, NormalizeError> {
    let kind = kind_from_action(msg.action as u8)?;
    let side = Side::from_u8(msg.side as u8).ok_or(NormalizeError::Side(msg.side as u8 as char))?;
    Ok(BookUpdate {
        seq: 0,
        ts_event_ns: msg.hd.ts_event,
        ts_recv_ns: msg.ts_recv,
        venue_pos: venue_position(u64::from(msg.sequence), 0),
        price_e9: msg.price,
        order_id: msg.order_id,
        instrument_id: msg.hd.instrument_id,
        size: msg.size,
        ts_send_ticks: 0,
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
    /// Every MBO record, in file order. 56 bytes each.
    pub records: Vec<MboMsg>,
    /// Each record's `ts_out` (the live gateway's send time, ns since the UNIX epoch), one per record, when the
    /// metadata has `ts_out` on; empty otherwise.
    pub ts_out: Vec<u64>,
    /// Records other than MBO skipped (module docs).
    pub skipped: u64,
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
    let (mut records, mut ts_out) = (Vec::new(), Vec::new());
    while let Some(msg) = stream.next_msg()? {
        records.push(msg);
        ts_out.extend(stream.ts_out());
    }
    if records.is_empty() {
        return Err(FeedError::Empty { path: stream.path });
    }
    Ok(MboFile { path: stream.path, dataset: stream.dataset, records, ts_out, skipped: stream.skipped })
}

/// DBN rtype of `MboMsg`.
const MBO_RTYPE: u8 = 0xa0;
/// DBN rtypes of the live gateway's `ErrorMsg`, `SymbolMappingMsg` and `SystemMsg` (heartbeats).
const RTYPE_ERROR: u8 = dbn::rtype::ERROR;
const RTYPE_SYMBOL_MAPPING: u8 = dbn::rtype::SYMBOL_MAPPING;
const RTYPE_SYSTEM: u8 = dbn::rtype::SYSTEM;
/// Size of `MboMsg` in bytes.
const MBO_BYTES: usize = std::mem::size_of::<MboMsg>();
/// Bytes of the `ts_out` that follows every record of a file whose metadata has `ts_out` on.
const TS_OUT_BYTES: usize = 8;
/// Bytes of a DBN record header (length, rtype, publisher_id, instrument_id, ts_event): the shortest record.
const HEADER_BYTES: usize = 16;
/// The longest record a length byte can give (255 4-byte words).
const MAX_RECORD_BYTES: usize = 255 * 4;
/// The largest metadata block accepted, in bytes (a corrupt length must not allocate gigabytes).
const MAX_METADATA_BYTES: usize = 64 << 20;
/// Bytes of the (decompressing) read buffer.
const READ_BUFFER_BYTES: usize = 1 << 16;

/// What one read gives: the next MBO record with its `ts_out`, or the end, or why not.
type Read1 = Result<Option<(MboMsg, Option<u64>)>, FeedError>;

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
    /// The metadata has `ts_out` on: every record is followed by 8 bytes of gateway send time.
    has_ts_out: bool,
    /// The metadata's schema is unset (a live-style file): records of any schema are skipped, not refused.
    mixed: bool,
    /// The last record's `ts_out`.
    ts_out: Option<u64>,
    /// Records other than MBO skipped.
    skipped: u64,
    /// What the first read gave: [`MboStream::from_reader`] reads up to the first MBO record, so the in-band
    /// symbol mappings before it are in the symbology once the stream is open.
    pending: Option<Read1>,
    /// The file is zstd-compressed: errors say `offset` counts decompressed bytes.
    decompressed: bool,
    /// Set once the stream ended or failed: nothing more is read.
    done: bool,
    /// Numbers the records of one `sequence` (their venue index).
    run: VenueRun,
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
        let file = std::fs::File::open(path)
            .map_err(|e| open_err(format!("opening file to decode at path '{}': {e}", path.display())))?;
        let zstd = is_zstd(path);
        let compression = if zstd { dbn::Compression::Zstd } else { dbn::Compression::None };
        let reader = DynReader::with_buffer(BufReader::new(file), compression).map_err(|e| open_err(e.to_string()))?;
        let mut stream = MboStream::from_reader(path, BufReader::with_capacity(READ_BUFFER_BYTES, reader))?;
        stream.decompressed = zstd;
        if let Some(Err(e)) = &mut stream.pending {
            e.set_decompressed(zstd);
        }
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
        if let Some(schema) = metadata.schema.filter(|s| *s != Schema::Mbo) {
            return Err(FeedError::Schema { path: path.to_owned(), schema: schema.to_string() });
        }
        let symbology = symbology_from_metadata(&metadata).map_err(open_err)?;
        let mut stream = MboStream {
            path: path.to_owned(),
            reader,
            symbology,
            dataset: metadata.dataset,
            version,
            records: 0,
            offset: header.len() as u64,
            has_ts_out: metadata.ts_out,
            mixed: metadata.schema.is_none(),
            ts_out: None,
            skipped: 0,
            pending: None,
            decompressed: false,
            done: false,
            run: VenueRun::default(),
        };
        stream.pending = Some(stream.read_msg());
        Ok(stream)
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

    /// MBO records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records other than MBO skipped so far (symbol mappings, heartbeats and other gateway messages; in a file
    /// of unset schema, records of other schemas).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The `ts_out` (live gateway send time, ns since the UNIX epoch) of the record the last
    /// [`MboStream::next_msg`] returned; `None` when the file has no `ts_out`.
    pub fn ts_out(&self) -> Option<u64> {
        self.ts_out
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
        let result = match self.pending.take() {
            Some(first) => first,
            None => self.read_msg(),
        };
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result.map(|r| {
            r.map(|(msg, ts_out)| {
                self.ts_out = ts_out;
                msg
            })
        })
    }

    /// As [`MboStream::next_msg`], normalised into a [`BookUpdate`] (`seq` and `ts_send_ticks` zero; the venue
    /// position the record's `sequence` and its index among the consecutive records of that `sequence`).
    ///
    /// # Errors
    /// As [`MboStream::next_msg`].
    pub fn next_update(&mut self) -> Result<Option<BookUpdate>, FeedError> {
        let Some(m) = self.next_msg()? else { return Ok(None) };
        let r = normalize_mbo(&m).expect("next_msg checked it normalises");
        Ok(Some(BookUpdate { venue_pos: self.run.position(u64::from(m.sequence)), ..r }))
    }

    /// Reads records up to the next MBO record (skipping and counting the others, taking in the symbol
    /// mappings), with its `ts_out`.
    fn read_msg(&mut self) -> Read1 {
        let mut buf = [0u8; MAX_RECORD_BYTES];
        loop {
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
            let extra = if self.has_ts_out { TS_OUT_BYTES } else { 0 };
            if len_bytes < HEADER_BYTES + extra {
                return Err(decode_err(
                    &self.path,
                    format!("record length {len_bytes} bytes, under the {} of a header", HEADER_BYTES + extra),
                ));
            }
            // Reads `part` of the record: the file ending first is a truncated record, any other failure the
            // stream's.
            let read_part = |reader: &mut R, path: &Path, part: &mut [u8]| match read_full(reader, part) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Err(decode_err(path, format!("truncated: record needs {len_bytes} bytes, the file ends before")))
                }
                Err(e) => Err(read_err(path, e)),
            };
            // The rtype says what length the record must have before the rest of it is read.
            read_part(&mut self.reader, &self.path, &mut buf[1..2])?;
            let rtype = buf[1];
            let mbo_len = MBO_BYTES + extra;
            if rtype == MBO_RTYPE && len_bytes != mbo_len {
                let with = if self.has_ts_out { " (56 and 8 of ts_out)" } else { "" };
                return Err(decode_err(
                    &self.path,
                    format!("MBO record length {len_bytes} bytes, expected {mbo_len}{with}"),
                ));
            }
            let skippable = matches!(rtype, RTYPE_ERROR | RTYPE_SYMBOL_MAPPING | RTYPE_SYSTEM) || self.mixed;
            if rtype != MBO_RTYPE && !skippable {
                return Err(decode_err(&self.path, format!("rtype {rtype:#04x} is not an MBO record (0xa0)")));
            }
            read_part(&mut self.reader, &self.path, &mut buf[2..len_bytes])?;
            self.offset += len_bytes as u64;
            if rtype != MBO_RTYPE {
                self.skipped += 1;
                if rtype == RTYPE_SYMBOL_MAPPING {
                    self.take_mapping(&buf[..len_bytes]).map_err(|detail| decode_err(&self.path, detail))?;
                }
                continue;
            }
            let msg = mbo_from_bytes(buf[..MBO_BYTES].try_into().expect("56 bytes"));
            if let Err(e) = normalize_mbo(&msg) {
                self.offset = offset;
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
            let ts_out =
                self.has_ts_out.then(|| u64::from_le_bytes(buf[MBO_BYTES..mbo_len].try_into().expect("8 bytes")));
            return Ok(Some((msg, ts_out)));
        }
    }

    /// Puts an in-band `SymbolMappingMsg` (`bytes`, the whole record) into the symbology: its header's
    /// instrument_id named by its `stype_out_symbol` (the raw symbol), or by its `stype_in_symbol` when the
    /// output is empty. The first name of an instrument_id wins, as for the metadata's mappings.
    fn take_mapping(&mut self, bytes: &[u8]) -> Result<(), String> {
        // The dbn crate's upgrade path asserts the record is as long as its version's struct: check it here, so a
        // short record is an error naming its length, not a panic.
        let need_bytes = if self.version == 1 {
            std::mem::size_of::<dbn::v1::SymbolMappingMsg>()
        } else {
            std::mem::size_of::<dbn::v3::SymbolMappingMsg>()
        } + if self.has_ts_out { 8 } else { 0 };
        if bytes.len() < need_bytes {
            return Err(format!(
                "symbol mapping: record length {} bytes, DBN version {} needs at least {need_bytes}",
                bytes.len(),
                self.version
            ));
        }
        let mut decoder = dbn::decode::dbn::RecordDecoder::with_version(
            bytes,
            self.version,
            dbn::VersionUpgradePolicy::UpgradeToV3,
            self.has_ts_out,
        )
        .map_err(|e| format!("symbol mapping: {e}"))?;
        let rec = decoder.decode_ref().map_err(|e| format!("symbol mapping: {e}"))?;
        let mapping = rec
            .as_ref()
            .ok_or_else(|| "symbol mapping: not a whole SymbolMappingMsg".to_owned())?
            .try_get::<dbn::v3::SymbolMappingMsg>()
            .map_err(|e| format!("symbol mapping: {e}"))?;
        let out = mapping.stype_out_symbol().map_err(|e| format!("symbol mapping stype_out_symbol: {e}"))?;
        let symbol = if out.is_empty() {
            mapping.stype_in_symbol().map_err(|e| format!("symbol mapping stype_in_symbol: {e}"))?
        } else {
            out
        };
        let id = mapping.hd.instrument_id;
        if !symbol.is_empty() && self.symbology.get(id).is_none() {
            self.symbology.insert(InstrumentDef::new(id, symbol));
        }
        Ok(())
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

/// Whether the file starts with a zstd frame: a Zstandard frame's magic (RFC 8878 section 3.1.1: 0xFD2FB528,
/// little-endian) or a skippable frame's (section 3.1.2: 0x184D2A50 to 0x184D2A5F, what `pzstd` writes first).
fn is_zstd(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    if std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_err() {
        return false;
    }
    let magic = u32::from_le_bytes(magic);
    magic == 0xFD2F_B528 || (0x184D_2A50..=0x184D_2A5F).contains(&magic)
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
