//! mdfan's capture format: the normalised stream a subscriber received, kept on disk as it arrives, read back
//! for replay (`format = "capture"`), research export and incident work. Layout and rules: docs/CAPTURE.md.
//!
//! A capture is a folder of segments `NAME-NNNNNN.mdcap` (NNNNNN from 000001), each a header then blocks:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `MDFANCAP` |
//! | 8 | 2 | format version (u16 LE, [`FORMAT_VERSION`]) |
//! | 10 | 4 | metadata bytes `n` (u32 LE) |
//! | 14 | 4 | CRC-32 (IEEE) of the metadata |
//! | 18 | `n` | metadata, JSON ([`SegmentMeta`]: what was captured, from where, its symbology, when) |
//! | 18 + `n` | .. | blocks, back to back |
//!
//! A block is a 64-byte header then its payload:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `MDCB` |
//! | 4 | 1 | kind ([`BlockKind`]: 1 records, 2 gap, 3 stop) |
//! | 5 | 3 | the block's number in its segment, from 0, modulo 2^24 (u24 LE; 0 in format 1) |
//! | 8 | 4 | records in the payload (u32 LE; 0 for a gap or stop) |
//! | 12 | 4 | payload bytes (u32 LE) |
//! | 16 | 8 | records: the first record's `seq`; gap: the seq that was due; stop: the reason ([`StopReason`]) |
//! | 24 | 8 | records: the last record's `seq`; gap: the seq that came |
//! | 32 | 8 | the first record's `ts_recv_ns` (gap, stop: the capture's clock when it was written) |
//! | 40 | 8 | the last record's `ts_recv_ns` (as above) |
//! | 48 | 8 | the first record's `venue_pos` (0 for a gap or stop) |
//! | 56 | 4 | CRC-32 of the payload |
//! | 60 | 4 | CRC-32 of bytes 0..60 |
//!
//! A records block's payload is its records, 64 bytes each, as the subscriber received them
//! (`mdfan_wire::BookUpdate`, little-endian, `seq` the subscriber stream's). A block is whole only when both CRCs
//! hold: a reader stops at the first block that is not (a writer killed mid-block left it), and the next writer
//! cuts the segment there before it goes on ([`recover`]). Blocks are numbered, so that a whole block removed from a
//! segment, repeated or moved (a spliced file, its CRCs intact) is named, not read as a shorter stream. Closed
//! segments are compressed with zstd (`NAME-NNNNNN.mdcap.zst`, the same bytes) next to an index of their blocks
//! (`NAME-NNNNNN.mdidx`: per block its offset in the uncompressed segment, first seq, first `ts_recv_ns` and first
//! venue position, 32 bytes LE each), from which a reader finds where to start by time or venue position without
//! decoding records.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use mdfan_wire::{BookUpdate, FeedIdentity, InstrumentDef};
use serde::{Deserialize, Serialize};

/// The segment magic.
pub const MAGIC: &[u8; 8] = b"MDFANCAP";
/// The format version this module writes; it reads this one and [`FORMAT_VERSION_UNNUMBERED`].
pub const FORMAT_VERSION: u16 = 2;
/// Format 1: the same, but blocks not numbered (bytes 5..8 of a block header are 0), so a block removed from or
/// repeated in a segment cannot be told; read without that check.
pub const FORMAT_VERSION_UNNUMBERED: u16 = 1;
/// Block numbers count modulo this (24 bits).
const BLOCK_NUMBER_MODULO: u32 = 1 << 24;
/// The block magic.
pub const BLOCK_MAGIC: &[u8; 4] = b"MDCB";
/// Bytes of a block header.
pub const BLOCK_HEADER_BYTES: usize = 64;
/// Bytes of a segment header before its metadata.
pub const SEGMENT_HEADER_BYTES: usize = 18;
/// Records a block holds at most.
pub const MAX_BLOCK_RECORDS: usize = 1 << 12;
/// Largest metadata a segment may carry (a symbology of a few hundred thousand instruments).
pub const MAX_META_BYTES: usize = 64 << 20;
/// Bytes of one index entry.
pub const INDEX_ENTRY_BYTES: usize = 32;
/// Extension of an open (or not yet compressed) segment.
pub const SEGMENT_EXT: &str = "mdcap";
/// Extension of a closed, compressed segment.
pub const COMPRESSED_EXT: &str = "mdcap.zst";
/// Extension of a closed segment's index.
pub const INDEX_EXT: &str = "mdidx";

/// What a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Records, as received.
    Records = 1,
    /// Records the stream did not deliver: seqs `expected..got` (the subscriber's `Event::Gap`).
    Gap = 2,
    /// The capture stopped here ([`StopReason`]).
    Stop = 3,
}

impl BlockKind {
    fn from_u8(v: u8) -> Option<BlockKind> {
        match v {
            1 => Some(BlockKind::Records),
            2 => Some(BlockKind::Gap),
            3 => Some(BlockKind::Stop),
            _ => None,
        }
    }
}

/// Why a capture stopped, in its stop block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The stream ended (the publisher's end of stream).
    EndOfStream = 1,
    /// The capture process was asked to stop (SIGINT, SIGTERM).
    Interrupted = 2,
    /// A write failed (a full disk): what came after is not in the capture.
    WriteFailed = 3,
    /// The session ended otherwise (dropped, publisher gone).
    SessionEnded = 4,
}

impl StopReason {
    /// From the stop block's number.
    pub fn from_u64(v: u64) -> Option<StopReason> {
        match v {
            1 => Some(StopReason::EndOfStream),
            2 => Some(StopReason::Interrupted),
            3 => Some(StopReason::WriteFailed),
            4 => Some(StopReason::SessionEnded),
            _ => None,
        }
    }

    /// As the report prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndOfStream => "end_of_stream",
            StopReason::Interrupted => "interrupted",
            StopReason::WriteFailed => "write_failed",
            StopReason::SessionEnded => "session_ended",
        }
    }
}

/// What a segment says about itself (its header's JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentMeta {
    /// The format version ([`FORMAT_VERSION`]).
    pub format_version: u16,
    /// The capture's name (`NAME` in the file names).
    pub name: String,
    /// The segment's number in the capture, from 1.
    pub segment: u64,
    /// `CLOCK_REALTIME` when the segment was opened, ns since the UNIX epoch.
    pub created_ns: u64,
    /// Where the stream came from (the publisher's endpoint).
    pub source: String,
    /// The session it was captured as (the subscriber's name).
    pub session: String,
    /// The book its records build (`mbo` or `mbp`).
    pub book: String,
    /// The feed it is of (format, venue's dataset, channel), as the publisher named it; empty when not known.
    #[serde(default, skip_serializing_if = "FeedIdentity::is_unknown")]
    pub feed: FeedIdentity,
    /// The instruments the publisher named when the session began.
    pub symbology: Vec<InstrumentDef>,
    /// The fsync policy it was written with (`block`, `every_ms:N`, `rotation`).
    pub fsync: String,
    /// The capture-wide index of the segment's first record (records of the segments before it).
    pub first_record: u64,
    /// The writer run that wrote it (a random number a writer draws when it starts; format 2), and the segment
    /// that run began with: a segment of another run than the one before it must be its run's first (a restarted
    /// writer), not one spliced in from elsewhere. `None` when written by an older build (not checked). The
    /// writer sets both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<u64>,
    /// See `run_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_first_segment: Option<u64>,
}

/// A capture file that cannot be used, or a write that failed: named with the path and what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A file could not be read, opened or listed.
    #[error("capture {path}: {what}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The call.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A write failed (a full disk: `ENOSPC`): the bytes that did not go in.
    #[error("capture {path}: cannot write {bytes} bytes at offset {offset}: {source}")]
    Write {
        /// The segment.
        path: PathBuf,
        /// Bytes that were being written.
        bytes: usize,
        /// Where.
        offset: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A segment's bytes are not what the format says.
    #[error("capture {path}: offset {offset}: {detail}")]
    Format {
        /// The segment.
        path: PathBuf,
        /// The byte offset in the (uncompressed) segment.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
}

/// Opens a capture file for reading, refusing what is not a regular file (a FIFO named like a segment would
/// block `open` for ever; a folder fails later with a less clear error): opened `O_NONBLOCK`, then checked.
fn open_regular(path: &Path) -> Result<File, CaptureError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |what, source| CaptureError::Io { path: path.to_owned(), what, source };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| io("open", e))?;
    if !file.metadata().map_err(|e| io("stat", e))?.is_file() {
        return Err(io("open", std::io::Error::other("not a regular file")));
    }
    Ok(file)
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A block header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// What it holds.
    pub kind: BlockKind,
    /// Its number in its segment, from 0, modulo 2^24 (format 1: 0).
    pub number: u32,
    /// Records in it.
    pub count: u32,
    /// Payload bytes.
    pub payload_bytes: u32,
    /// Records: first seq; gap: the seq due; stop: the reason number.
    pub first: u64,
    /// Records: last seq; gap: the seq that came.
    pub last: u64,
    /// First `ts_recv_ns` (gap, stop: when written).
    pub first_ts_recv_ns: u64,
    /// Last `ts_recv_ns`.
    pub last_ts_recv_ns: u64,
    /// First venue position (records).
    pub first_venue_pos: u64,
    /// CRC-32 of the payload.
    pub payload_crc: u32,
}

impl BlockHeader {
    /// The header's 64 bytes (its own CRC in the last four).
    pub fn encode(&self) -> [u8; BLOCK_HEADER_BYTES] {
        let mut h = [0u8; BLOCK_HEADER_BYTES];
        h[0..4].copy_from_slice(BLOCK_MAGIC);
        h[4] = self.kind as u8;
        h[5..8].copy_from_slice(&(self.number % BLOCK_NUMBER_MODULO).to_le_bytes()[..3]);
        h[8..12].copy_from_slice(&self.count.to_le_bytes());
        h[12..16].copy_from_slice(&self.payload_bytes.to_le_bytes());
        h[16..24].copy_from_slice(&self.first.to_le_bytes());
        h[24..32].copy_from_slice(&self.last.to_le_bytes());
        h[32..40].copy_from_slice(&self.first_ts_recv_ns.to_le_bytes());
        h[40..48].copy_from_slice(&self.last_ts_recv_ns.to_le_bytes());
        h[48..56].copy_from_slice(&self.first_venue_pos.to_le_bytes());
        h[56..60].copy_from_slice(&self.payload_crc.to_le_bytes());
        let c = crc(&h[..60]);
        h[60..64].copy_from_slice(&c.to_le_bytes());
        h
    }

    /// Decodes a header; `Err` says what is wrong (magic, CRC, kind, sizes).
    pub fn decode(h: &[u8; BLOCK_HEADER_BYTES]) -> Result<BlockHeader, String> {
        if &h[0..4] != BLOCK_MAGIC {
            return Err(format!("block magic {:02x?}, not \"MDCB\"", &h[0..4]));
        }
        if crc(&h[..60]) != le_u32(h, 60) {
            return Err("block header CRC does not match".into());
        }
        let kind = BlockKind::from_u8(h[4]).ok_or_else(|| format!("block kind {}", h[4]))?;
        let (count, payload_bytes) = (le_u32(h, 8), le_u32(h, 12));
        let want = match kind {
            BlockKind::Records => count as usize * 64,
            BlockKind::Gap | BlockKind::Stop => 0,
        };
        if count as usize > MAX_BLOCK_RECORDS || payload_bytes as usize != want {
            return Err(format!("block of {count} records with {payload_bytes} payload bytes"));
        }
        Ok(BlockHeader {
            kind,
            number: u32::from_le_bytes([h[5], h[6], h[7], 0]),
            count,
            payload_bytes,
            first: le_u64(h, 16),
            last: le_u64(h, 24),
            first_ts_recv_ns: le_u64(h, 32),
            last_ts_recv_ns: le_u64(h, 40),
            first_venue_pos: le_u64(h, 48),
            payload_crc: le_u32(h, 56),
        })
    }
}

/// The segment header's bytes for `meta`.
pub fn segment_header(meta: &SegmentMeta) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("a SegmentMeta serialises");
    let mut out = Vec::with_capacity(SEGMENT_HEADER_BYTES + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc(&json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end before the first byte, an error at an end inside.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads a segment header from `r`; returns the metadata, the header's bytes and the format version.
fn read_segment_header(r: &mut impl Read, path: &Path) -> Result<(SegmentMeta, u64, u16), CaptureError> {
    let bad = |offset: u64, detail: String| CaptureError::Format { path: path.to_owned(), offset, detail };
    let io = |source| CaptureError::Io { path: path.to_owned(), what: "read", source };
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    if read_full(r, &mut h).map_err(io)? < SEGMENT_HEADER_BYTES {
        return Err(bad(0, "shorter than a segment header".into()));
    }
    if &h[0..8] != MAGIC {
        return Err(bad(0, format!("magic {:02x?}, not \"MDFANCAP\": not an mdfan capture", &h[0..8])));
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != FORMAT_VERSION && version != FORMAT_VERSION_UNNUMBERED {
        return Err(bad(
            8,
            format!("format version {version}, this build reads {FORMAT_VERSION_UNNUMBERED} and {FORMAT_VERSION}"),
        ));
    }
    let n = le_u32(&h, 10) as usize;
    if n > MAX_META_BYTES {
        return Err(bad(10, format!("metadata of {n} bytes, at most {MAX_META_BYTES}")));
    }
    let mut json = vec![0u8; n];
    if read_full(r, &mut json).map_err(io)? < n {
        return Err(bad(SEGMENT_HEADER_BYTES as u64, format!("metadata cut short (of {n} bytes)")));
    }
    if crc(&json) != le_u32(&h, 14) {
        return Err(bad(14, "metadata CRC does not match".into()));
    }
    let meta: SegmentMeta =
        serde_json::from_slice(&json).map_err(|e| bad(SEGMENT_HEADER_BYTES as u64, format!("metadata: {e}")))?;
    // (the header's version is not under a CRC; the metadata's is)
    if meta.format_version != version {
        return Err(bad(
            8,
            format!("format version {version}, but its metadata (under its CRC) says {}", meta.format_version),
        ));
    }
    Ok((meta, (SEGMENT_HEADER_BYTES + n) as u64, version))
}

/// One item of a capture, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A segment begins (its metadata).
    Segment(Box<SegmentMeta>),
    /// A record, as received.
    Record(BookUpdate),
    /// Seqs `expected..got` did not reach the capture.
    Gap {
        /// The seq that was due.
        expected: u64,
        /// The seq that came.
        got: u64,
    },
    /// The capture stopped.
    Stop {
        /// Why (`None`: a number this build does not know).
        reason: Option<StopReason>,
        /// The capture's clock then, ns since the UNIX epoch.
        at_ns: u64,
    },
}

/// What reading one segment's blocks found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentScan {
    /// Whole blocks.
    pub blocks: u64,
    /// Records in them.
    pub records: u64,
    /// Bytes up to the end of the last whole block (header included).
    pub good_bytes: u64,
    /// Bytes after it (a block cut short or damaged: a writer killed mid-write).
    pub torn_bytes: u64,
}

/// A segment's bytes: a plain file (which a writer may still be appending to) or a compressed one.
enum Source {
    Plain(BufReader<File>),
    Compressed(Box<zstd::stream::read::Decoder<'static, BufReader<File>>>),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Compressed(r) => r.read(buf),
        }
    }
}

/// Reads a segment's blocks in order.
struct SegmentReader {
    path: PathBuf,
    src: Source,
    offset: u64,
    header: [u8; BLOCK_HEADER_BYTES],
    payload: Vec<u8>,
    /// The number the next block must carry (`None`: format 1, blocks not numbered).
    next_number: Option<u32>,
}

/// What the next block read gave.
enum Next {
    Block(BlockHeader),
    /// The segment ends cleanly here.
    End,
    /// A block cut short starts here: the file ends inside it (a writer killed mid-block; `detail` says how).
    Torn(String),
    /// A whole block here is damaged (a bad header, a payload whose CRC does not match): not a torn end.
    Corrupt(String),
}

impl SegmentReader {
    fn open(path: &Path) -> Result<(SegmentReader, SegmentMeta), CaptureError> {
        let file = open_regular(path)?;
        let compressed = path.to_string_lossy().ends_with(COMPRESSED_EXT);
        let mut src = if compressed {
            let d = zstd::stream::read::Decoder::new(file).map_err(|source| CaptureError::Io {
                path: path.to_owned(),
                what: "zstd",
                source,
            })?;
            Source::Compressed(Box::new(d))
        } else {
            Source::Plain(BufReader::with_capacity(1 << 20, file))
        };
        let (meta, offset, version) = read_segment_header(&mut src, path)?;
        let r = SegmentReader {
            path: path.to_owned(),
            src,
            offset,
            header: [0; BLOCK_HEADER_BYTES],
            payload: Vec::with_capacity(MAX_BLOCK_RECORDS * 64),
            next_number: (version != FORMAT_VERSION_UNNUMBERED).then_some(0),
        };
        Ok((r, meta))
    }

    /// Back to the end of the last whole block (a plain segment a writer is still appending to: what was read of
    /// a block not whole yet is read again).
    fn rewind(&mut self) -> Result<(), CaptureError> {
        if let Source::Plain(r) = &mut self.src {
            r.seek(SeekFrom::Start(self.offset)).map_err(|source| CaptureError::Io {
                path: self.path.clone(),
                what: "seek",
                source,
            })?;
        }
        Ok(())
    }

    /// The next whole block (its payload in `self.payload`).
    fn next(&mut self) -> Result<Next, CaptureError> {
        // A compressed segment's read errors are zstd's (a damaged frame): named with the block's offset in the
        // uncompressed bytes, as damage is.
        let compressed = matches!(self.src, Source::Compressed(_));
        let (path, offset) = (&self.path, self.offset);
        let io = |source: std::io::Error| match compressed {
            true => CaptureError::Format {
                path: path.clone(),
                offset,
                detail: format!("zstd: {source}: the compressed segment is damaged in or before the block here"),
            },
            false => CaptureError::Io { path: path.clone(), what: "read", source },
        };
        let got = read_full(&mut self.src, &mut self.header).map_err(io)?;
        if got == 0 {
            return Ok(Next::End);
        }
        if got < BLOCK_HEADER_BYTES {
            return Ok(Next::Torn(format!("block header cut short ({got} of 64 bytes)")));
        }
        let h = match BlockHeader::decode(&self.header) {
            Ok(h) => h,
            // A zero-filled header is what a crash leaves past the last write (the filesystem extended the file,
            // the data never came): the end, cut short. Any other bad header is damage.
            Err(_) if self.header.iter().all(|b| *b == 0) => return Ok(Next::Torn("zero-filled block header".into())),
            Err(detail) => return Ok(Next::Corrupt(detail)),
        };
        self.payload.resize(h.payload_bytes as usize, 0);
        let got = read_full(&mut self.src, &mut self.payload).map_err(io)?;
        if got < self.payload.len() {
            return Ok(Next::Torn(format!("block payload cut short ({got} of {} bytes)", self.payload.len())));
        }
        if crc(&self.payload) != h.payload_crc {
            return Ok(Next::Corrupt("block payload CRC does not match".into()));
        }
        if let Some(detail) = header_disagrees(&h, &self.payload) {
            return Ok(Next::Corrupt(detail));
        }
        if let Some(want) = self.next_number {
            if h.number != want {
                // Whole, but not the block due: one was removed before it, or it is repeated or moved.
                let how = if h.number < want && want - h.number <= BLOCK_NUMBER_MODULO / 2 {
                    "a block repeated or moved"
                } else {
                    "blocks missing before it, or a block moved"
                };
                return Ok(Next::Corrupt(format!(
                    "block number {} where {want} was due (modulo 2^24): {how}",
                    h.number
                )));
            }
            self.next_number = Some((want + 1) % BLOCK_NUMBER_MODULO);
        }
        self.offset += (BLOCK_HEADER_BYTES + self.payload.len()) as u64;
        Ok(Next::Block(h))
    }
}

/// What a whole block's header says that its payload or its kind does not bear out (a block made or edited by
/// hand, its CRCs made again): a records block of no record, or whose first and last records' `seq`, `ts_recv_ns`
/// or first venue position are not the header's; a gap whose seq that came is not past the one due.
fn header_disagrees(h: &BlockHeader, payload: &[u8]) -> Option<String> {
    match h.kind {
        BlockKind::Records => {
            let (Some(first), Some(last)) = (payload.first_chunk::<64>(), payload.last_chunk::<64>()) else {
                return Some("a records block of no record".into());
            };
            // One block is one writer run's, of one session (a restarted recorder starts a new segment): its seqs
            // rise (with holes where heartbeats were, which are not kept).
            let seqs = payload.chunks_exact(64).map(|r| u64::from_le_bytes(r[..8].try_into().expect("8 bytes")));
            let mut prev = None;
            for (i, seq) in seqs.enumerate() {
                if prev.is_some_and(|p| seq <= p) {
                    return Some(format!(
                        "record {i} of the block has seq {seq} after {}: a block's seqs rise",
                        prev.unwrap_or_default()
                    ));
                }
                prev = Some(seq);
            }
            let (first, last) = (BookUpdate::from_bytes(first), BookUpdate::from_bytes(last));
            let header = (h.first, h.last, h.first_ts_recv_ns, h.last_ts_recv_ns, h.first_venue_pos);
            let records = (first.seq, last.seq, first.ts_recv_ns, last.ts_recv_ns, first.venue_pos);
            (header != records).then(|| {
                format!(
                    "block header (first seq, last seq, first ts_recv_ns, last ts_recv_ns, first venue_pos) \
                     {header:?} is not its records' {records:?}"
                )
            })
        }
        BlockKind::Gap => (h.last <= h.first).then(|| {
            format!("a gap block from seq {} to {}: the seq that came is not past the one due", h.first, h.last)
        }),
        BlockKind::Stop => None,
    }
}

/// Whether two segments may be of one capture: the same book and feed (format and venue; the channel may differ:
/// a file feed's is its file's name). A session of another feed or book appended would be replayed under the
/// first segment's identity.
fn same_feed(a: &SegmentMeta, b: &SegmentMeta) -> bool {
    a.book == b.book && a.feed.format == b.feed.format && a.feed.venue == b.feed.venue
}

/// A damaged block: the segment, where, and what (never taken for a torn end).
fn damaged(path: &Path, offset: u64, detail: &str) -> CaptureError {
    CaptureError::Format {
        path: path.to_owned(),
        offset,
        detail: format!("{detail}: a damaged block, not a torn end (the blocks after it are not read)"),
    }
}

/// Reads one segment (plain or compressed) to its end or to a block cut short by the end of the file.
///
/// # Errors
/// [`CaptureError`] for a file that cannot be read, whose segment header is not the format's, or with a damaged
/// block (a bad header or CRC; named with its offset).
pub fn scan_segment(path: &Path) -> Result<(SegmentMeta, SegmentScan), CaptureError> {
    let (mut r, meta) = SegmentReader::open(path)?;
    let mut scan = SegmentScan { good_bytes: r.offset, ..SegmentScan::default() };
    loop {
        match r.next()? {
            Next::Block(h) => {
                scan.blocks += 1;
                scan.records += u64::from(h.count);
                scan.good_bytes = r.offset;
            }
            Next::End => break,
            Next::Corrupt(detail) => return Err(damaged(path, r.offset, &detail)),
            Next::Torn(_) => {
                if let Ok(m) = std::fs::metadata(path) {
                    if !path.to_string_lossy().ends_with(COMPRESSED_EXT) {
                        scan.torn_bytes = m.len().saturating_sub(scan.good_bytes);
                    }
                }
                break;
            }
        }
    }
    Ok((meta, scan))
}

/// The segments of capture `name` in `dir`, in order. A segment present both compressed and plain is read from
/// the compressed file: it is made durable (fsync) before it is renamed into place, so it is whole, and the plain
/// one is what a close interrupted before its last step (removing it) left ([`recover`] removes it).
///
/// # Errors
/// [`CaptureError::Io`] when the folder cannot be listed.
pub fn segments(dir: &Path, name: &str) -> Result<Vec<(u64, PathBuf)>, CaptureError> {
    let rd =
        std::fs::read_dir(dir).map_err(|source| CaptureError::Io { path: dir.to_owned(), what: "list", source })?;
    let mut found: std::collections::BTreeMap<u64, PathBuf> = std::collections::BTreeMap::new();
    for e in rd.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(name).and_then(|r| r.strip_prefix('-')) else { continue };
        let (num, plain) = if let Some(n) = rest.strip_suffix(&format!(".{COMPRESSED_EXT}")) {
            (n, false)
        } else if let Some(n) = rest.strip_suffix(&format!(".{SEGMENT_EXT}")) {
            (n, true)
        } else {
            continue;
        };
        if num.len() != 6 || !num.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(n) = num.parse::<u64>() else { continue };
        if !plain || !found.contains_key(&n) {
            found.insert(n, e.path());
        }
    }
    Ok(found.into_iter().collect())
}

/// The name of the capture in `dir` (the prefix of its segments), when there is exactly one.
///
/// # Errors
/// [`CaptureError::Format`] when the folder holds no capture, or several.
pub fn only_capture(dir: &Path) -> Result<String, CaptureError> {
    let rd =
        std::fs::read_dir(dir).map_err(|source| CaptureError::Io { path: dir.to_owned(), what: "list", source })?;
    let mut names = std::collections::BTreeSet::new();
    for e in rd.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        for ext in [COMPRESSED_EXT, SEGMENT_EXT] {
            if let Some(stem) = file.strip_suffix(&format!(".{ext}")) {
                if let Some((name, num)) = stem.rsplit_once('-') {
                    if num.len() == 6 && num.bytes().all(|b| b.is_ascii_digit()) {
                        names.insert(name.to_owned());
                    }
                }
            }
        }
    }
    let bad = |detail: String| CaptureError::Format { path: dir.to_owned(), offset: 0, detail };
    match names.len() {
        1 => Ok(names.pop_first().expect("one")),
        0 => Err(bad("no capture segment (NAME-NNNNNN.mdcap or .mdcap.zst) in this folder".into())),
        _ => Err(bad(format!(
            "several captures in this folder ({}): name one",
            names.into_iter().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Reads a capture's items in order, segment after segment: records, gaps, stops and each segment's metadata.
/// With `follow`, the last segment is read as it grows (a writer appends to it): at its end [`Reader::next`]
/// returns `Ok(None)` until more whole blocks come (call again later), and a new segment is taken up once it
/// appears. Without `follow`, a block that is not whole ends the capture (reported by [`Reader::torn`]).
pub struct Reader {
    dir: PathBuf,
    name: String,
    follow: bool,
    /// Segments taken up so far (by number).
    done: u64,
    cur: Option<(u64, SegmentReader)>,
    /// Records of the current block not handed out yet: (payload index, count).
    pending: (usize, usize),
    queued: std::collections::VecDeque<Item>,
    torn: Option<String>,
    /// The current segment's `first_record` plus the records read of it: where the next segment must begin.
    next_first_record: Option<u64>,
    /// Blocks read of the current segment, and whether one was its stop block.
    seg_blocks: u64,
    seg_stopped: bool,
    /// The current segment was read to its end again after a later segment was seen.
    drained: bool,
    /// The writer run of the segment taken up last.
    run_id: Option<u64>,
    /// The first segment taken up's feed and book: every later one must be of the same ([`same_feed`]).
    first_meta: Option<(PathBuf, SegmentMeta)>,
    /// The current segment's index as its blocks give it (offset, first, first `ts_recv_ns`, first venue
    /// position: [`INDEX_ENTRY_BYTES`] each), checked against its `.mdidx` at its end.
    seg_index: Vec<u8>,
    /// Where the block whose records are being handed out begins.
    block_at: u64,
    /// The last record's seq handed out.
    last_seq: Option<u64>,
    /// A gap block waiting for the next record to bear it out: its seq that came, and whether it opens a
    /// restarted session (it begins at 1, at or below the last record's seq).
    gap_due: Option<(u64, bool)>,
    /// Called between the read that finds a segment's end and the folder listing that looks for a later one
    /// (the rotation race's window), in tests.
    #[cfg(test)]
    before_listing: Option<Box<dyn FnMut()>>,
}

impl Reader {
    /// A reader of capture `name` in `dir` (`None`: the folder's only capture).
    ///
    /// # Errors
    /// As [`only_capture`] and [`segments`].
    pub fn open(dir: &Path, name: Option<&str>, follow: bool) -> Result<Reader, CaptureError> {
        let name = match name {
            Some(n) => n.to_owned(),
            None => only_capture(dir)?,
        };
        Ok(Reader {
            dir: dir.to_owned(),
            name,
            follow,
            done: 0,
            cur: None,
            pending: (0, 0),
            queued: std::collections::VecDeque::new(),
            torn: None,
            next_first_record: None,
            seg_blocks: 0,
            seg_stopped: false,
            drained: false,
            run_id: None,
            first_meta: None,
            seg_index: Vec::new(),
            block_at: 0,
            last_seq: None,
            gap_due: None,
            #[cfg(test)]
            before_listing: None,
        })
    }

    /// Where the capture ended on a block that was not whole (not following): the segment and what was wrong.
    pub fn torn(&self) -> Option<&str> {
        self.torn.as_deref()
    }

    /// The next item; `Ok(None)` at the end (following: nothing more yet, ask again later: so this is not an
    /// `Iterator`).
    ///
    /// # Errors
    /// [`CaptureError`] for a segment that cannot be read or is not the format's.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Item>, CaptureError> {
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Ok(Some(item));
            }
            let Some((_, r)) = self.cur.as_mut() else {
                // The next segment, if there is one.
                let next = segments(&self.dir, &self.name)?.into_iter().find(|(n, _)| *n > self.done);
                let Some((n, path)) = next else {
                    // A closed segment's index without the segment: the segment was lost (deleted, moved), not
                    // a capture that ends here.
                    let orphan = self.next_index();
                    if self.done > 0 && orphan.exists() {
                        return Err(CaptureError::Format {
                            path: orphan,
                            offset: 0,
                            detail: format!(
                                "the index of segment {} is here but not the segment: it is missing",
                                self.done + 1
                            ),
                        });
                    }
                    return Ok(None);
                };
                let (r, meta) = SegmentReader::open(&path)?;
                // Segments follow one another without a hole, each starting where the one before ended (the
                // first one read may be any: older ones may have been deleted on purpose).
                let missing = |detail: String| CaptureError::Format { path: path.clone(), offset: 0, detail };
                if self.done > 0 && n != self.done + 1 {
                    return Err(missing(format!("segment {} to {} of this capture are missing", self.done + 1, n - 1)));
                }
                if meta.segment != n || meta.name != self.name {
                    return Err(missing(format!(
                        "its metadata says segment {} of capture {:?}: it was renamed or put here from elsewhere",
                        meta.segment, meta.name
                    )));
                }
                if let (Some(prev), Some(run)) = (self.run_id, meta.run_id) {
                    if prev != run && meta.run_first_segment != Some(n) {
                        return Err(missing(format!(
                            "it is of another writer run than segment {} and not that run's first (it began with \
                             segment {:?}): put here from another capture",
                            n - 1,
                            meta.run_first_segment
                        )));
                    }
                }
                if let Some((first_path, first)) = &self.first_meta {
                    if !same_feed(first, &meta) {
                        return Err(missing(format!(
                            "it is of {} (book {}), {} of {} (book {}): a capture holds one feed, so it was put \
                             here from another capture",
                            meta.feed,
                            meta.book,
                            first_path.display(),
                            first.feed,
                            first.book
                        )));
                    }
                } else {
                    self.first_meta = Some((path.clone(), meta.clone()));
                }
                self.run_id = meta.run_id;
                if let Some(want) = self.next_first_record.filter(|w| *w != meta.first_record) {
                    return Err(missing(format!(
                        "its first_record is {} but the segments before it hold {want} records: records are missing",
                        meta.first_record
                    )));
                }
                self.next_first_record = Some(meta.first_record);
                (self.seg_blocks, self.seg_stopped, self.drained) = (0, false, false);
                self.seg_index.clear();
                self.done = n;
                self.cur = Some((n, r));
                self.queued.push_back(Item::Segment(Box::new(meta)));
                continue;
            };
            let (at, left) = self.pending;
            if left > 0 {
                let bytes: &[u8; 64] = r.payload[at * 64..at * 64 + 64].try_into().expect("64 bytes");
                let record = BookUpdate::from_bytes(bytes);
                if let Some((got, restart)) = self.gap_due.take() {
                    // The gap's seq that came is this record's, or an earlier heartbeat's (not kept); a seq at or
                    // below the last record's begins a restarted session, which a gap at 1 must be followed by.
                    let restarted = self.last_seq.is_some_and(|last| record.seq <= last);
                    let last = self.last_seq.unwrap_or_default();
                    let why = if restart && !restarted {
                        Some(format!(
                            "opens a restarted session (seqs 1 to {got}), but it goes on from the record before the \
                             gap ({last})"
                        ))
                    } else if record.seq < got && (restart || !restarted) {
                        Some(format!("says seq {got} came"))
                    } else {
                        None // (a normal gap, then a restarted session: its first record is below `got`)
                    };
                    if let Some(why) = why {
                        return Err(damaged(
                            &r.path,
                            self.block_at,
                            &format!("record {at} of the block has seq {} after a gap block that {why}", record.seq),
                        ));
                    }
                }
                self.last_seq = Some(record.seq);
                self.pending = (at + 1, left - 1);
                if let Some(n) = self.next_first_record.as_mut() {
                    *n += 1;
                }
                return Ok(Some(Item::Record(record)));
            }
            let (path, offset) = (r.path.display().to_string(), r.offset);
            match r.next()? {
                Next::Block(_) if self.seg_stopped => {
                    // A writer opens a new segment for anything after a stop block.
                    return Err(damaged(Path::new(&path), offset, "a block after the segment's stop block"));
                }
                Next::Block(h) => match h.kind {
                    BlockKind::Records => {
                        self.index_entry(offset, &h);
                        self.seg_blocks += 1;
                        self.pending = (0, h.count as usize);
                        self.block_at = offset;
                    }
                    BlockKind::Gap => {
                        // A gap begins past the last record (heartbeats, not kept, may hold seqs between), or at
                        // 1 when it opens a restarted session (seqs count from 1 again).
                        if let Some(last) = self.last_seq.filter(|&last| h.first <= last && h.first != 1) {
                            return Err(damaged(
                                Path::new(&path),
                                offset,
                                &format!(
                                    "a gap block from seq {} to {} after a record of seq {last}: a gap begins past \
                                     the last record",
                                    h.first, h.last
                                ),
                            ));
                        }
                        self.index_entry(offset, &h);
                        self.seg_blocks += 1;
                        self.gap_due = Some((h.last, self.last_seq.is_some_and(|last| h.first <= last)));
                        return Ok(Some(Item::Gap { expected: h.first, got: h.last }));
                    }
                    BlockKind::Stop => {
                        if let Some((got, true)) = self.gap_due {
                            // (a gap past the last record may end a capture: its seq that came was a heartbeat's)
                            return Err(damaged(
                                Path::new(&path),
                                offset,
                                &format!(
                                    "a stop block after a gap block from seq 1 to {got}: a gap at 1 opens a \
                                     restarted session, and none follows"
                                ),
                            ));
                        }
                        self.index_entry(offset, &h);
                        (self.seg_blocks, self.seg_stopped) = (self.seg_blocks + 1, true);
                        let reason = StopReason::from_u64(h.first);
                        return Ok(Some(Item::Stop { reason, at_ns: h.first_ts_recv_ns }));
                    }
                },
                Next::Corrupt(detail) => return Err(damaged(Path::new(&path), offset, &detail)),
                step => {
                    #[cfg(test)]
                    if let Some(hook) = self.before_listing.as_mut() {
                        hook();
                    }
                    let newer = self.newer_segment()?;
                    if newer && !self.drained {
                        // The writer finishes a segment before it opens the next, but it may have appended to this
                        // one between the read that found its end and the listing that found the next: read on.
                        self.drained = true;
                        if let Some((_, r)) = self.cur.as_mut() {
                            r.rewind()?;
                        }
                        continue;
                    }
                    if self.follow && !newer {
                        // The writer may still be appending: what was read of a block not whole is read again.
                        if let Some((_, r)) = self.cur.as_mut() {
                            r.rewind()?;
                        }
                        return Ok(None);
                    }
                    self.cur = None;
                    if !self.follow {
                        self.check_closed_end(Path::new(&path), offset, matches!(step, Next::Torn(_)), newer)?;
                    }
                    if let Next::Torn(detail) = step {
                        if newer {
                            // A writer closes a segment whole before it opens the next: this one was cut since.
                            return Err(CaptureError::Format {
                                path: PathBuf::from(&path),
                                offset,
                                detail: format!("{detail}, and a later segment follows: this one was cut or damaged"),
                            });
                        }
                        self.torn = Some(format!("{path}: offset {offset}: {detail}"));
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// At the end of segment `path` (read up to `offset`; `torn`: it ends inside a block; `newer`: a later
    /// segment exists), when the segment is closed (compressed, or its index written: the writer finished it):
    /// it holds every block its index lists, it does not end inside a block, and, being the capture's last, it
    /// ends with a stop block (a writer that rotated opened a next segment, which is gone). A closed segment is
    /// never cut by a writer: any of these is damage or a lost file, named.
    fn check_closed_end(&self, path: &Path, offset: u64, torn: bool, newer: bool) -> Result<(), CaptureError> {
        let index = index_path(path);
        let compressed = path.to_string_lossy().ends_with(COMPRESSED_EXT);
        if !compressed && !index.exists() {
            return Ok(()); // open, or left by a killed writer: its end is the writer's
        }
        let bad = |detail: String| Err(CaptureError::Format { path: path.to_owned(), offset, detail });
        if torn {
            if newer {
                return Ok(()); // the caller says it: "a later segment follows"
            }
            return bad("a closed segment ends inside a block: it was cut or damaged".into());
        }
        if let Ok(m) = std::fs::metadata(&index) {
            if !m.is_file() {
                return bad(format!("its index ({}) is not a regular file", index.display()));
            }
            if m.len() % INDEX_ENTRY_BYTES as u64 != 0 {
                return bad(format!(
                    "its index ({}) is {} bytes, not a whole number of {INDEX_ENTRY_BYTES}-byte entries",
                    index.display(),
                    m.len()
                ));
            }
            let listed = m.len() / INDEX_ENTRY_BYTES as u64;
            if listed != self.seg_blocks {
                return bad(format!(
                    "it holds {} blocks and its index ({}) lists {listed}: the segment was cut, or the index damaged",
                    self.seg_blocks,
                    index.display()
                ));
            }
            // Same length as the blocks read: read whole, and entry for entry what the blocks say.
            let listed = std::fs::read(&index).map_err(|source| CaptureError::Io {
                path: index.clone(),
                what: "read",
                source,
            })?;
            let entries = listed.chunks_exact(INDEX_ENTRY_BYTES).zip(self.seg_index.chunks_exact(INDEX_ENTRY_BYTES));
            if let Some((k, (got, want))) = entries.enumerate().find(|(_, (got, want))| got != want) {
                let fields = |e: &[u8]| -> Vec<u64> { e.chunks_exact(8).map(|f| le_u64(f, 0)).collect() };
                return bad(format!(
                    "its index ({}) entry {k} (offset, first seq, first ts_recv_ns, first venue_pos) is {:?}, the \
                     block's {:?}: the index is damaged or not this segment's",
                    index.display(),
                    fields(got),
                    fields(want)
                ));
            }
        }
        let orphan_index = self.next_index().exists();
        if !newer && !self.seg_stopped && !orphan_index {
            // (an index of the next segment left behind: the caller names that segment as missing)
            return bad(format!(
                "the capture's last segment ({}) is closed but has no stop block: the segment after it is missing \
                 (lost, or a restarted writer closed this one and could not create the next)",
                self.done
            ));
        }
        Ok(())
    }

    /// Adds the block at `offset` to the current segment's index as its blocks give it.
    fn index_entry(&mut self, offset: u64, h: &BlockHeader) {
        for v in [offset, h.first, h.first_ts_recv_ns, h.first_venue_pos] {
            self.seg_index.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// The index file the segment after the last one taken up would have (there without its segment: that
    /// segment was lost).
    fn next_index(&self) -> PathBuf {
        self.dir.join(format!("{}-{:06}.{INDEX_EXT}", self.name, self.done + 1))
    }

    /// Whether a segment after the current one exists (the writer moved on: the current one is complete).
    fn newer_segment(&self) -> Result<bool, CaptureError> {
        Ok(segments(&self.dir, &self.name)?.iter().any(|(n, _)| *n > self.done))
    }
}

/// How often the writer makes its segment durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// After every block.
    Block,
    /// At most this many ms after a block was written.
    EveryMs(u64),
    /// When a segment is closed (rotation, stop).
    Rotation,
}

impl Fsync {
    /// As configs and reports spell it: `block`, `every_ms:N`, `rotation`.
    pub fn as_string(self) -> String {
        match self {
            Fsync::Block => "block".into(),
            Fsync::EveryMs(ms) => format!("every_ms:{ms}"),
            Fsync::Rotation => "rotation".into(),
        }
    }

    /// Parses [`Fsync::as_string`]'s spellings.
    pub fn parse(s: &str) -> Option<Fsync> {
        match s {
            "block" => Some(Fsync::Block),
            "rotation" => Some(Fsync::Rotation),
            _ => s.strip_prefix("every_ms:")?.parse().ok().filter(|ms| *ms > 0).map(Fsync::EveryMs),
        }
    }
}

/// A capture writer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// The folder (it must exist).
    pub dir: PathBuf,
    /// The capture's name: segments are `NAME-NNNNNN.mdcap`. Letters, digits, `_` and `.` only.
    pub name: String,
    /// A segment is closed once it holds this many bytes (then compressed beside its index).
    pub rotate_bytes: u64,
    /// ... or once it has been open this long, ns (0: never by time).
    pub rotate_ns: u64,
    /// Records a block holds (1 to [`MAX_BLOCK_RECORDS`]): a block is written when full, or when
    /// `block_ms` passed since its first record.
    pub block_records: usize,
    /// The longest a record waits in the writer before its block is written, ms.
    pub block_ms: u64,
    /// The fsync policy.
    pub fsync: Fsync,
    /// Compress closed segments (zstd, on a thread of their own).
    pub compress: bool,
}

/// What [`recover`] did to a segment a writer left unfinished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The segment.
    pub path: PathBuf,
    /// Its whole blocks and records, kept.
    pub scan: SegmentScan,
    /// Bytes cut off its end (a block a killed writer left unfinished).
    pub cut_bytes: u64,
}

/// What [`recover`] found: the segments it made whole, the capture's highest segment number (0 for a new
/// capture), and the number of records its segments hold (where the next segment's `first_record` starts).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Segments a writer left open or did not close (plain, no index), each made whole; the caller closes them
    /// ([`close_segment`]).
    pub recovered: Vec<Recovered>,
    /// The highest segment number.
    pub last: u64,
    /// Records of all the segments (the last one's `first_record` plus its records).
    pub records: u64,
    /// A last segment removed because it ends inside its own header (a writer that died between creating it and
    /// writing its header: it holds no record), and its bytes. The next segment takes its number.
    pub removed: Option<(PathBuf, u64)>,
    /// The last segment's path and header, if there is one: what a new writer's session must match.
    pub last_meta: Option<(PathBuf, SegmentMeta)>,
    /// Plain segments removed because their compressed twin is whole (a close interrupted before its last step).
    pub twins_removed: Vec<PathBuf>,
}

/// Whether plain segment `path` ends inside its own header (a writer that died between creating the file and
/// writing the header whole, or a crash that left the header's bytes zero): its length then. A header with
/// another magic or version is damage, not this (`None`: [`scan_segment`] names it).
fn header_cut_short(path: &Path) -> Result<Option<u64>, CaptureError> {
    let io = |what, source| CaptureError::Io { path: path.to_owned(), what, source };
    let mut f = open_regular(path)?;
    let len = f.metadata().map_err(|e| io("stat", e))?.len();
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    let got = read_full(&mut f, &mut h).map_err(|e| io("read", e))?;
    let h = &h[..got];
    if h.iter().all(|b| *b == 0) {
        // Zeros where the header should be: a crash after the filesystem extended the file, before the data
        // came; only when nothing but zeros follows (a header is made durable before any block is written, so
        // blocks behind a zeroed header are damage, named by the scan).
        if len > 1 << 16 {
            return Ok(None);
        }
        let mut rest = Vec::new();
        f.read_to_end(&mut rest).map_err(|e| io("read", e))?;
        return Ok(rest.iter().all(|b| *b == 0).then_some(len));
    }
    let magic = got.min(MAGIC.len());
    if h[..magic] != MAGIC[..magic] {
        return Ok(None);
    }
    if got < SEGMENT_HEADER_BYTES {
        return Ok(Some(len));
    }
    let meta_bytes = le_u32(h, 10) as u64;
    let version = u16::from_le_bytes([h[8], h[9]]);
    let whole =
        (version == FORMAT_VERSION || version == FORMAT_VERSION_UNNUMBERED) && meta_bytes <= MAX_META_BYTES as u64;
    Ok((whole && len < SEGMENT_HEADER_BYTES as u64 + meta_bytes).then_some(len))
}

/// Readies capture `name` for a writer after one that stopped without closing it (killed, a crash): the
/// segments not closed (plain `.mdcap` without its `.mdidx` index) are checked, and the last one is cut after
/// its last whole block when the file ends inside a block, or removed when it ends inside its own header (it
/// holds no record). A closed segment is never touched.
///
/// # Errors
/// [`CaptureError`] for a segment that cannot be read, whose header is damaged, that holds a damaged block
/// (named with its offset: a damaged block is never cut away, it must be looked at), that is not the last and
/// ends cut short, or that cannot be cut.
pub fn recover(dir: &Path, name: &str) -> Result<Recovery, CaptureError> {
    let mut out = Recovery::default();
    let mut all = segments(dir, name)?;
    // A closed segment (its index written) is never touched.
    if let Some((_, path)) =
        all.last().filter(|(_, p)| p.to_string_lossy().ends_with(SEGMENT_EXT) && !index_path(p).exists())
    {
        if let Some(bytes) = header_cut_short(path)? {
            std::fs::remove_file(path).map_err(|source| CaptureError::Io {
                path: path.clone(),
                what: "remove (its header was cut short)",
                source,
            })?;
            let _ = std::fs::remove_file(index_path(path));
            out.removed = Some((path.clone(), bytes));
            all.pop();
        }
    }
    let last = all.last().map_or(0, |(n, _)| *n);
    out.last = last;
    // A closed segment's index after the last segment: that segment was lost (a reader says so). A new segment
    // would take its number and its index would be written over: the evidence gone, the capture read as whole.
    let orphan = dir.join(format!("{name}-{:06}.{INDEX_EXT}", last + 1));
    if orphan.exists() {
        return Err(CaptureError::Format {
            path: orphan,
            offset: 0,
            detail: format!(
                "the index of segment {} is here but not the segment: it is missing (a writer would take its \
                 number); move the capture's files aside or restore the segment",
                last + 1
            ),
        });
    }
    for (n, path) in &all {
        let closed = path.to_string_lossy().ends_with(COMPRESSED_EXT) || index_path(path).exists();
        if closed && *n != last {
            continue;
        }
        let (meta, scan) = scan_segment(path)?;
        if *n == last {
            out.records = meta.first_record + scan.records;
            out.last_meta = Some((path.clone(), meta.clone()));
        }
        if closed {
            continue;
        }
        if scan.torn_bytes > 0 {
            if *n != last {
                return Err(CaptureError::Format {
                    path: path.clone(),
                    offset: scan.good_bytes,
                    detail: "ends inside a block, and a later segment follows: damaged, not cut".into(),
                });
            }
            use std::os::unix::fs::OpenOptionsExt as _;
            let f = OpenOptions::new()
                .write(true)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .open(path)
                .map_err(|source| CaptureError::Io { path: path.clone(), what: "open to cut", source })?;
            f.set_len(scan.good_bytes).map_err(|source| CaptureError::Io {
                path: path.clone(),
                what: "cut",
                source,
            })?;
            f.sync_all().map_err(|source| CaptureError::Io { path: path.clone(), what: "fsync", source })?;
        }
        out.recovered.push(Recovered { path: path.clone(), scan, cut_bytes: scan.torn_bytes });
    }
    // A plain segment beside its compressed twin: a close interrupted after the compressed file was made
    // durable and renamed into place, before the plain one was removed.
    for (_, path) in &all {
        if path.to_string_lossy().ends_with(COMPRESSED_EXT) {
            let plain = PathBuf::from(path.to_string_lossy().trim_end_matches(".zst").to_owned());
            if plain.exists() {
                // Only once the compressed file reads whole (it may have been damaged or copied in since): else
                // the plain one may be the good copy, and neither is touched.
                let listed = std::fs::metadata(index_path(path)).ok().map(|m| m.len() / INDEX_ENTRY_BYTES as u64);
                match scan_segment(path) {
                    Ok((_, scan)) if scan.torn_bytes == 0 && listed.is_none_or(|n| n == scan.blocks) => {}
                    Ok(_) | Err(_) => {
                        return Err(CaptureError::Format {
                            path: path.clone(),
                            offset: 0,
                            detail: format!(
                                "does not read whole, and a plain twin ({}) is here: move the one that is damaged \
                                 aside (a reader takes the compressed one)",
                                plain.display()
                            ),
                        })
                    }
                }
                std::fs::remove_file(&plain).map_err(|source| CaptureError::Io {
                    path: plain.clone(),
                    what: "remove (its compressed twin is whole)",
                    source,
                })?;
                out.twins_removed.push(plain);
            }
        }
    }
    // Leftovers of a compression the writer did not finish.
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            // NAME-NNNNNN.<ext>.tmp only: another capture's names may start with this one's.
            let ours = f.strip_prefix(name).and_then(|r| r.strip_prefix('-')).is_some_and(|r| {
                r.len() > 7 && r.as_bytes()[..6].iter().all(u8::is_ascii_digit) && r.as_bytes()[6] == b'.'
            });
            if ours && f.ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(out)
}

/// A writer run's id: random (std's per-process hash keys), mixed with the time and the process.
fn run_id(now_ns: u64) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ns);
    h.write_u32(std::process::id());
    h.finish()
}

/// Creates `path` afresh for writing: whatever is there is removed first (a leftover of a crash; a symlink is
/// removed, not followed), and the file is created only if nothing is there then (`O_CREAT | O_EXCL`, which
/// never follows a symlink): a user who can write the capture's folder cannot make the writer write through a
/// link planted at a name it is about to use.
fn create_private(path: &Path) -> std::io::Result<File> {
    let _ = std::fs::remove_file(path);
    OpenOptions::new().write(true).create_new(true).open(path)
}

/// The index file of segment `path` (`NAME-NNNNNN.mdidx`).
fn index_path(path: &Path) -> PathBuf {
    let s = path.to_string_lossy();
    let stem = s.trim_end_matches(&format!(".{COMPRESSED_EXT}")).trim_end_matches(&format!(".{SEGMENT_EXT}"));
    PathBuf::from(format!("{stem}.{INDEX_EXT}"))
}

/// Compresses a closed segment (`.mdcap` → `.mdcap.zst`, written beside it then renamed, the plain file then
/// removed) and writes its index (`.mdidx`). Either file present alone is a readable segment.
///
/// # Errors
/// [`CaptureError`] naming the file that could not be read or written.
pub fn close_segment(path: &Path, compress: bool) -> Result<(), CaptureError> {
    let index = index_of(path)?;
    let stem = path.to_string_lossy().trim_end_matches(&format!(".{SEGMENT_EXT}")).to_owned();
    let idx = PathBuf::from(format!("{stem}.{INDEX_EXT}"));
    // Written aside and renamed: an index present is whole (a full disk leaves no empty one marking the segment
    // closed).
    let idx_tmp = PathBuf::from(format!("{stem}.{INDEX_EXT}.tmp"));
    if let Err(source) = create_private(&idx_tmp).and_then(|mut f| f.write_all(&index)) {
        let _ = std::fs::remove_file(&idx_tmp);
        return Err(CaptureError::Io { path: idx_tmp, what: "write", source });
    }
    std::fs::rename(&idx_tmp, &idx).map_err(|source| CaptureError::Io { path: idx.clone(), what: "rename", source })?;
    if !compress {
        return Ok(());
    }
    let zst = PathBuf::from(format!("{stem}.{COMPRESSED_EXT}"));
    let tmp = PathBuf::from(format!("{stem}.{COMPRESSED_EXT}.tmp"));
    let io = |p: &Path, what: &'static str| {
        let p = p.to_owned();
        move |source| CaptureError::Io { path: p, what, source }
    };
    let mut src = File::open(path).map_err(io(path, "open"))?;
    let compressed = (|| {
        let out = create_private(&tmp).map_err(io(&tmp, "create"))?;
        let mut enc = zstd::stream::write::Encoder::new(out, 3).map_err(io(&tmp, "zstd"))?;
        // A frame checksum: damage to the compressed file is found by zstd too, not only by the block CRCs.
        enc.include_checksum(true).map_err(io(&tmp, "zstd"))?;
        std::io::copy(&mut src, &mut enc).map_err(io(&tmp, "compress"))?;
        let out = enc.finish().map_err(io(&tmp, "zstd finish"))?;
        out.sync_all().map_err(io(&tmp, "fsync"))?;
        std::fs::rename(&tmp, &zst).map_err(io(&zst, "rename"))
    })();
    if compressed.is_err() {
        // a full disk: the plain segment (whole, indexed) stays; no partial file is left beside it
        let _ = std::fs::remove_file(&tmp);
    }
    compressed?;
    std::fs::remove_file(path).map_err(io(path, "remove"))?;
    Ok(())
}

/// A segment's index: per whole block its offset, first seq, first `ts_recv_ns`, first venue position.
///
/// # Errors
/// As [`scan_segment`].
pub fn index_of(path: &Path) -> Result<Vec<u8>, CaptureError> {
    let (mut r, _) = SegmentReader::open(path)?;
    let mut out = Vec::new();
    loop {
        let at = r.offset;
        match r.next()? {
            Next::Block(h) => {
                for v in [at, h.first, h.first_ts_recv_ns, h.first_venue_pos] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Next::End | Next::Torn(_) => return Ok(out),
            Next::Corrupt(detail) => return Err(damaged(path, at, &detail)),
        }
    }
}

/// What a writer has written so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Records written.
    pub records: u64,
    /// Blocks written.
    pub blocks: u64,
    /// Gap blocks written, and the seqs they cover.
    pub gaps: u64,
    /// Seqs missing in them.
    pub missed: u64,
    /// Segments opened.
    pub segments: u64,
    /// Bytes written (all segments, uncompressed).
    pub bytes: u64,
    /// fsyncs made.
    pub fsyncs: u64,
}

/// A capture's writer lock: `DIR/NAME.lock`, locked (flock) while it lives. One writer per capture.
pub struct CaptureLock(#[allow(dead_code)] nix::fcntl::Flock<File>);

impl CaptureLock {
    /// Takes capture `name`'s lock in `dir`.
    ///
    /// # Errors
    /// [`CaptureError::Io`] naming the lock file: the folder is missing or not writable, or another writer holds
    /// the lock.
    pub fn acquire(dir: &Path, name: &str) -> Result<CaptureLock, CaptureError> {
        let path = dir.join(format!("{name}.lock"));
        // never through a symlink (ELOOP): another user's link must not make the writer create or lock its target
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|source| CaptureError::Io { path: path.clone(), what: "open the lock (not a symlink)", source })?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            CaptureError::Io {
                path: path.clone(),
                what: "lock (another mdfan-capture writes this capture; one writer per name)",
                source: e.into(),
            }
        })?;
        Ok(CaptureLock(lock))
    }
}

/// Writes a capture: records into blocks, blocks into segments, segments rotated by size and time and closed
/// (indexed, compressed on a thread of their own). Allocation-free per record after the first block.
pub struct Writer {
    cfg: WriterConfig,
    meta: SegmentMeta,
    file: File,
    path: PathBuf,
    /// Bytes in the current segment.
    seg_bytes: u64,
    /// Blocks written whole to the current segment (the next block's number, modulo 2^24).
    seg_blocks: u32,
    /// Where the space allocated to the current segment ends ([`Writer::reserve`]); `None` on a filesystem
    /// without `fallocate`.
    reserved_to: Option<u64>,
    seg_opened_ns: u64,
    /// The current block's records.
    block: Vec<u8>,
    block_count: usize,
    block_first: BookUpdate,
    block_last: BookUpdate,
    block_started_ns: u64,
    dirty_since_ns: Option<u64>,
    stats: WriterStats,
    /// Segments closed (rotated) that wait for the caller to index and compress ([`close_segment`]).
    closed: Vec<PathBuf>,
    /// Records of the capture's segments before this writer's first.
    base_records: u64,
    /// `DIR/NAME.lock`, locked (flock) while this writer lives: one writer per capture.
    _lock: CaptureLock,
    /// The `every_ms` fsyncs, made on a thread of their own so that a slow disk never stops the thread that
    /// takes records (`None` for the other policies, whose fsyncs are synchronous).
    syncer: Option<Syncer>,
}

/// A thread that makes `every_ms` fsyncs: one at a time, of the segment being written when it was asked.
struct Syncer {
    jobs: std::sync::mpsc::SyncSender<(File, PathBuf)>,
    busy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
    failed: std::sync::Arc<std::sync::Mutex<Option<CaptureError>>>,
}

impl Syncer {
    fn spawn() -> Result<Syncer, std::io::Error> {
        use std::sync::atomic::Ordering;
        let (jobs, rx) = std::sync::mpsc::sync_channel::<(File, PathBuf)>(1);
        let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (b, d, f) = (busy.clone(), done.clone(), failed.clone());
        std::thread::Builder::new().name("mdfan-capture-fsync".into()).spawn(move || {
            for (file, path) in rx {
                match file.sync_data() {
                    Ok(()) => {
                        d.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(source) => {
                        if let Ok(mut slot) = f.lock() {
                            slot.get_or_insert(CaptureError::Io { path, what: "fsync", source });
                        }
                    }
                }
                b.store(false, Ordering::Release);
            }
        })?;
        Ok(Syncer { jobs, busy, done, failed })
    }

    /// Asks for an fsync of `file` unless one is under way; whether it was asked.
    fn ask(&self, file: &File, path: &Path) -> bool {
        use std::sync::atomic::Ordering;
        if self.busy.swap(true, Ordering::AcqRel) {
            return false;
        }
        let sent = file.try_clone().is_ok_and(|f| self.jobs.send((f, path.to_owned())).is_ok());
        if !sent {
            self.busy.store(false, Ordering::Release);
        }
        sent
    }

    /// The error of a failed fsync, once.
    fn take_error(&self) -> Option<CaptureError> {
        self.failed.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// Space a writer allocates ahead of its writes, at a time (`fallocate` with `FALLOC_FL_KEEP_SIZE`: the file's
/// size, what readers see, is unchanged).
const RESERVE_CHUNK_BYTES: u64 = 4 << 20;

/// A stop block: what the reservation always keeps room for.
const STOP_BLOCK_BYTES: u64 = BLOCK_HEADER_BYTES as u64;

/// Allocates `len` bytes of `file` from `offset` (the size unchanged). `Ok(false)` where the filesystem has no
/// `fallocate` (the writer then writes without a reservation).
fn allocate(file: &File, offset: u64, len: u64) -> Result<bool, nix::errno::Errno> {
    use nix::fcntl::{fallocate, FallocateFlags};
    match fallocate(file, FallocateFlags::FALLOC_FL_KEEP_SIZE, offset as i64, len as i64) {
        Ok(()) => Ok(true),
        // Not offered by this filesystem (EINVAL: some refuse the mode rather than say they lack it).
        Err(nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::ENOSYS | nix::errno::Errno::EINVAL) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives back what was allocated past `end` and not written (best effort): a truncation to the size it has
/// (what ext4 frees preallocated blocks past the end on; a punched hole starting at the end frees nothing
/// there), then the hole for the filesystems that take that instead.
fn release(file: &File, end: u64, reserved_to: Option<u64>) {
    use nix::fcntl::{fallocate, FallocateFlags};
    if let Some(to) = reserved_to.filter(|to| *to > end) {
        let _ = file.set_len(end);
        let mode = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        let _ = fallocate(file, mode, end as i64, (to - end) as i64);
    }
}

impl Writer {
    /// Makes sure `bytes` more and then a stop block fit in space already allocated to the segment, allocating
    /// [`RESERVE_CHUNK_BYTES`] more (or, on a disk nearly full, just what is needed) when they do not. So a full
    /// disk is met here, before a write, with the room for the stop block still there: nothing of the block is
    /// written, the capture stops with a stop block and no torn end.
    ///
    /// # Errors
    /// [`CaptureError::Write`] (ENOSPC, EDQUOT, ...) naming the segment, the bytes and the offset.
    fn reserve(&mut self, bytes: u64) -> Result<(), CaptureError> {
        let Some(to) = self.reserved_to else { return Ok(()) };
        let need = self.seg_bytes + bytes + STOP_BLOCK_BYTES;
        if need <= to {
            return Ok(());
        }
        let fail = |path: &Path, offset: u64, e: nix::errno::Errno| CaptureError::Write {
            path: path.to_owned(),
            bytes: bytes as usize,
            offset,
            source: std::io::Error::from(e),
        };
        let got = match allocate(&self.file, to, need - to + RESERVE_CHUNK_BYTES) {
            Ok(true) => Some(need + RESERVE_CHUNK_BYTES),
            Ok(false) => None,
            Err(_) => match allocate(&self.file, to, need - to) {
                Ok(true) => Some(need),
                Ok(false) => None,
                Err(e) => return Err(fail(&self.path, self.seg_bytes, e)),
            },
        };
        self.reserved_to = got;
        Ok(())
    }

    /// Starts a capture in `cfg.dir`: takes the capture's lock (`DIR/NAME.lock`, flock, held while the writer
    /// lives: a second writer of the same name is refused, never lets two interleave), cuts what an earlier
    /// writer of the same name left open after its last whole block ([`recover`]; the caller closes those
    /// segments, [`close_segment`]), then opens the next segment with `meta` (its `name`, `fsync`, `segment`,
    /// `created_ns` and `first_record` set here). Returns the writer and what was recovered ([`Recovery`]).
    ///
    /// # Errors
    /// [`CaptureError`] naming the lock held by another writer, or the file that could not be read, cut or
    /// created.
    pub fn open(cfg: WriterConfig, meta: SegmentMeta, now_ns: u64) -> Result<(Writer, Recovery), CaptureError> {
        let lock = CaptureLock::acquire(&cfg.dir, &cfg.name)?;
        Writer::open_locked(lock, cfg, meta, now_ns)
    }

    /// [`Writer::open`] with the capture's lock taken already ([`CaptureLock::acquire`]: before subscribing, so
    /// that a writer refused never takes a session at the publisher).
    ///
    /// # Errors
    /// As [`Writer::open`], but for the lock.
    pub fn open_locked(
        lock: CaptureLock,
        cfg: WriterConfig,
        mut meta: SegmentMeta,
        now_ns: u64,
    ) -> Result<(Writer, Recovery), CaptureError> {
        let recovery = recover(&cfg.dir, &cfg.name)?;
        if let Some((path, prev)) = &recovery.last_meta {
            // One capture, one feed: a session of another feed or book appended would be replayed under the
            // first segment's identity (the channel may differ: a file feed's is its file's name).
            if !same_feed(prev, &meta) {
                return Err(CaptureError::Format {
                    path: path.clone(),
                    offset: 0,
                    detail: format!(
                        "capture {} here is of {} (book {}); this session is of {} (book {}): a capture holds one \
                         feed: record it under another --name or in another folder",
                        cfg.name, prev.feed, prev.book, meta.feed, meta.book
                    ),
                });
            }
        }
        let (last, records) = (recovery.last, recovery.records);
        meta.format_version = FORMAT_VERSION;
        meta.run_id = Some(run_id(now_ns));
        meta.run_first_segment = Some(last + 1);
        meta.name = cfg.name.clone();
        meta.fsync = cfg.fsync.as_string();
        meta.first_record = records;
        meta.segment = last + 1;
        meta.created_ns = now_ns;
        let (file, path, reserved_to, header_bytes) = create_segment(&cfg, &meta)?;
        let mut w = Writer {
            block: Vec::with_capacity(cfg.block_records.clamp(1, MAX_BLOCK_RECORDS) * 64),
            cfg,
            meta,
            file,
            path,
            seg_bytes: 0,
            seg_blocks: 0,
            reserved_to,
            seg_opened_ns: now_ns,
            block_count: 0,
            block_first: BookUpdate::control(mdfan_wire::Kind::NoAction),
            block_last: BookUpdate::control(mdfan_wire::Kind::NoAction),
            block_started_ns: 0,
            dirty_since_ns: None,
            stats: WriterStats::default(),
            closed: Vec::new(),
            base_records: records,
            _lock: lock,
            syncer: None,
        };
        if matches!(w.cfg.fsync, Fsync::EveryMs(_)) {
            w.syncer = Some(Syncer::spawn().map_err(|source| CaptureError::Io {
                path: w.path.clone(),
                what: "start the fsync thread for",
                source,
            })?);
        }
        w.stats.segments = 1;
        // the header, written and made durable by create_segment
        w.seg_bytes = header_bytes;
        w.stats.bytes += header_bytes;
        w.stats.fsyncs += 1;
        Ok((w, recovery))
    }

    /// The segment being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was written so far.
    pub fn stats(&self) -> WriterStats {
        let background = self.syncer.as_ref().map_or(0, |s| s.done.load(std::sync::atomic::Ordering::Relaxed));
        WriterStats { fsyncs: self.stats.fsyncs + background, ..self.stats }
    }

    /// Opens the next segment (its header written and durable); on an error (a full disk) nothing of it is left
    /// and the current one stays current, so that the stop block goes there.
    fn open_segment(&mut self, now_ns: u64) -> Result<(), CaptureError> {
        let mut meta = self.meta.clone();
        meta.segment += 1;
        meta.created_ns = now_ns;
        meta.first_record = self.base_records + self.stats.records;
        let (file, path, reserved_to, header_bytes) = create_segment(&self.cfg, &meta)?;
        release(&self.file, self.seg_bytes, self.reserved_to);
        (self.file, self.path, self.meta, self.reserved_to) = (file, path, meta, reserved_to);
        self.seg_bytes = header_bytes;
        self.seg_blocks = 0;
        self.seg_opened_ns = now_ns;
        self.stats.segments += 1;
        self.stats.bytes += header_bytes;
        self.stats.fsyncs += 1;
        self.dirty_since_ns = None;
        Ok(())
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), CaptureError> {
        self.file.write_all(bytes).map_err(|source| CaptureError::Write {
            path: self.path.clone(),
            bytes: bytes.len(),
            offset: self.seg_bytes,
            source,
        })?;
        self.seg_bytes += bytes.len() as u64;
        self.stats.bytes += bytes.len() as u64;
        Ok(())
    }

    fn sync(&mut self, now_ns: u64, force: bool) -> Result<(), CaptureError> {
        let due = force
            || match self.cfg.fsync {
                Fsync::Block => true,
                Fsync::EveryMs(ms) => self.dirty_since_ns.is_some_and(|t| now_ns.saturating_sub(t) >= ms * 1_000_000),
                Fsync::Rotation => false,
            };
        if let Some(e) = self.syncer.as_ref().and_then(Syncer::take_error) {
            return Err(e);
        }
        if due && !force && self.dirty_since_ns.is_some() {
            if let Some(syncer) = &self.syncer {
                // what was written up to here is durable once the thread's fsync returns
                if syncer.ask(&self.file, &self.path) {
                    self.dirty_since_ns = None;
                }
                return Ok(());
            }
        }
        if due && (force || self.dirty_since_ns.is_some()) {
            self.file.sync_data().map_err(|source| CaptureError::Io {
                path: self.path.clone(),
                what: "fsync",
                source,
            })?;
            self.stats.fsyncs += 1;
            self.dirty_since_ns = None;
        }
        Ok(())
    }

    /// Writes a block (its payload the first `payload_len` bytes of the current block; `records` of them), then
    /// syncs and rotates as due.
    fn write_block(
        &mut self,
        mut h: BlockHeader,
        payload_len: usize,
        records: u64,
        now_ns: u64,
    ) -> Result<(), CaptureError> {
        self.reserve((BLOCK_HEADER_BYTES + payload_len) as u64)?;
        h.number = self.seg_blocks;
        let header = h.encode();
        self.write_bytes(&header)?;
        if payload_len > 0 {
            let payload = std::mem::take(&mut self.block);
            let r = self.write_bytes(&payload[..payload_len]);
            self.block = payload;
            r?;
        }
        // Counted before a rotation, which starts the next segment's first_record here.
        self.seg_blocks = (self.seg_blocks + 1) % BLOCK_NUMBER_MODULO;
        self.stats.records += records;
        self.stats.blocks += 1;
        self.dirty_since_ns.get_or_insert(now_ns);
        self.sync(now_ns, false)?;
        if self.seg_bytes >= self.cfg.rotate_bytes
            || (self.cfg.rotate_ns > 0 && now_ns.saturating_sub(self.seg_opened_ns) >= self.cfg.rotate_ns)
        {
            self.rotate(now_ns)?;
        }
        Ok(())
    }

    /// Writes the records waiting in the current block, if any.
    ///
    /// # Errors
    /// [`CaptureError::Write`] (a full disk: the path, the bytes and where); the capture should stop.
    pub fn flush(&mut self, now_ns: u64) -> Result<(), CaptureError> {
        if self.block_count == 0 {
            return Ok(());
        }
        let n = self.block_count;
        let bytes = n * 64;
        let h = BlockHeader {
            kind: BlockKind::Records,
            number: 0, // set by write_block
            count: n as u32,
            payload_bytes: bytes as u32,
            first: self.block_first.seq,
            last: self.block_last.seq,
            first_ts_recv_ns: self.block_first.ts_recv_ns,
            last_ts_recv_ns: self.block_last.ts_recv_ns,
            first_venue_pos: self.block_first.venue_pos,
            payload_crc: crc(&self.block[..bytes]),
        };
        self.block_count = 0;
        let written = self.write_block(h, bytes, n as u64, now_ns);
        self.block.clear();
        written
    }

    /// Appends one record as received.
    ///
    /// # Errors
    /// As [`Writer::flush`], when the block it fills is written.
    pub fn record(&mut self, r: &BookUpdate, now_ns: u64) -> Result<(), CaptureError> {
        if self.block_count == 0 {
            self.block_first = *r;
            self.block_started_ns = now_ns;
        }
        self.block_last = *r;
        self.block.extend_from_slice(r.as_bytes());
        self.block_count += 1;
        if self.block_count >= self.cfg.block_records.clamp(1, MAX_BLOCK_RECORDS) {
            self.flush(now_ns)?;
        }
        Ok(())
    }

    /// Notes that seqs `expected..got` did not reach the capture (after the records before them).
    ///
    /// # Errors
    /// As [`Writer::flush`].
    pub fn gap(&mut self, expected: u64, got: u64, now_ns: u64) -> Result<(), CaptureError> {
        self.flush(now_ns)?;
        self.stats.gaps += 1;
        self.stats.missed += got.saturating_sub(expected);
        let h = BlockHeader {
            kind: BlockKind::Gap,
            number: 0, // set by write_block
            count: 0,
            payload_bytes: 0,
            first: expected,
            last: got,
            first_ts_recv_ns: now_ns,
            last_ts_recv_ns: now_ns,
            first_venue_pos: 0,
            payload_crc: crc(&[]),
        };
        self.write_block(h, 0, 0, now_ns)
    }

    /// Time-driven work, called between polls: a block whose first record waited `block_ms` is written, an
    /// `every_ms` fsync that is due is made, a segment open `rotate_ns` is rotated.
    ///
    /// # Errors
    /// As [`Writer::flush`].
    pub fn tick(&mut self, now_ns: u64) -> Result<(), CaptureError> {
        if self.block_count > 0 && now_ns.saturating_sub(self.block_started_ns) >= self.cfg.block_ms * 1_000_000 {
            self.flush(now_ns)?;
        }
        self.sync(now_ns, false)?;
        if self.cfg.rotate_ns > 0
            && now_ns.saturating_sub(self.seg_opened_ns) >= self.cfg.rotate_ns
            && self.seg_bytes > 0
        {
            self.rotate(now_ns)?;
        }
        Ok(())
    }

    /// Closes the current segment (fsync; it waits in [`Writer::take_closed`]) and opens the next.
    fn rotate(&mut self, now_ns: u64) -> Result<(), CaptureError> {
        self.sync(now_ns, true)?;
        let old = self.path.clone();
        self.open_segment(now_ns)?;
        self.closed.push(old);
        Ok(())
    }

    /// The segments closed since the last call, for the caller to index and compress ([`close_segment`]) off
    /// the thread that takes records (it reads and writes the segment whole).
    pub fn take_closed(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.closed)
    }

    /// Ends the capture: the waiting records, a stop block saying why, fsync. Returns what was written and every
    /// segment not yet handed out by [`Writer::take_closed`], the last one included, for the caller to close.
    ///
    /// # Errors
    /// As [`Writer::flush`]; on a write failure the stop block is tried anyway (it may not fit either).
    pub fn stop(mut self, reason: StopReason, now_ns: u64) -> Result<(WriterStats, Vec<PathBuf>), CaptureError> {
        let flushed = self.flush(now_ns);
        let h = BlockHeader {
            kind: BlockKind::Stop,
            number: self.seg_blocks,
            count: 0,
            payload_bytes: 0,
            first: reason as u64,
            last: 0,
            first_ts_recv_ns: now_ns,
            last_ts_recv_ns: now_ns,
            first_venue_pos: 0,
            payload_crc: crc(&[]),
        };
        let stopped = self.write_bytes(&h.encode()).and_then(|_| self.sync(now_ns, true));
        release(&self.file, self.seg_bytes, self.reserved_to);
        flushed?;
        stopped?;
        self.stats.blocks += 1;
        self.closed.push(self.path.clone());
        Ok((self.stats(), std::mem::take(&mut self.closed)))
    }
}

/// A new segment's first reservation: its header, a stop block and [`RESERVE_CHUNK_BYTES`] (or, on a disk nearly
/// full, the header and the stop block alone); `None` on a filesystem without `fallocate`.
fn reserve_new(file: &File, path: &Path, header_bytes: u64) -> Result<Option<u64>, CaptureError> {
    let need = header_bytes + STOP_BLOCK_BYTES;
    let fail = |e: nix::errno::Errno| CaptureError::Write {
        path: path.to_owned(),
        bytes: header_bytes as usize,
        offset: 0,
        source: std::io::Error::from(e),
    };
    match allocate(file, 0, need + RESERVE_CHUNK_BYTES) {
        Ok(true) => Ok(Some(need + RESERVE_CHUNK_BYTES)),
        Ok(false) => Ok(None),
        Err(_) => match allocate(file, 0, need) {
            Ok(true) => Ok(Some(need)),
            Ok(false) => Ok(None),
            Err(e) => Err(fail(e)),
        },
    }
}

/// Creates segment `meta.segment` of `cfg`'s capture (never an existing file).
///
/// Whole or not at all: written as `NAME-NNNNNN.mdcap.tmp` (its first reservation, [`reserve_new`], then its
/// header, made durable), then linked into place and the temporary name removed, so that a reader never finds
/// a segment without its header. Returns the file, its path, where its reservation ends and its header's bytes.
fn create_segment(cfg: &WriterConfig, meta: &SegmentMeta) -> Result<(File, PathBuf, Option<u64>, u64), CaptureError> {
    let path = cfg.dir.join(format!("{}-{:06}.{SEGMENT_EXT}", cfg.name, meta.segment));
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let io = |p: &Path, what: &'static str| {
        let p = p.to_owned();
        move |source| CaptureError::Io { path: p, what, source }
    };
    if path.exists() {
        return Err(CaptureError::Io {
            path,
            what: "create",
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    let _ = std::fs::remove_file(&tmp); // what a crash here left
    let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io(&path, "create"))?;
    let header = segment_header(meta);
    let mut made = || -> Result<Option<u64>, CaptureError> {
        let reserved = reserve_new(&file, &path, header.len() as u64)?;
        file.write_all(&header).map_err(|source| CaptureError::Write {
            path: path.clone(),
            bytes: header.len(),
            offset: 0,
            source,
        })?;
        file.sync_data().map_err(io(&path, "fsync"))?;
        // never over an existing file
        std::fs::hard_link(&tmp, &path).map_err(io(&path, "create"))?;
        Ok(reserved)
    };
    let made = made();
    let _ = std::fs::remove_file(&tmp);
    Ok((file, path, made?, header.len() as u64))
}

/// A place where a new writer's session begins ([`Report::restarts`], [`Restarts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Restart {
    /// The index in the capture of the restarted session's first record.
    pub record: u64,
    /// The last venue record's `ts_recv_ns` before it (0: none).
    pub last_ts_recv_ns: u64,
    /// The first venue record's `ts_recv_ns` after it (0: none yet).
    pub next_ts_recv_ns: u64,
}

/// Finds restarts in a capture's records, in order: a record whose `seq` is not above the one before it begins
/// a new session (a writer started again after a crash or a stop: its session's seq counts from 1 again, and its
/// subscriber's books were empty). A replay or an export of the capture begins such a session with a `Clear` of
/// every book so far ([`Restarts::record`]), so its books are what the captured subscriber's were.
#[derive(Debug, Clone, Default)]
pub struct Restarts {
    last_seq: u64,
    last_ts_recv_ns: u64,
    index: u64,
    /// Found so far (the last one's `next_ts_recv_ns` filled in by the next venue record).
    pub found: Vec<Restart>,
    open: bool,
    /// The instruments with a book so far (venue records; channel and session records aside).
    books: std::collections::BTreeSet<u32>,
}

impl Restarts {
    /// Takes the capture's next record. At a restart (`r` begins a new session): `Some` of a `Clear` (action R,
    /// flags `LAST | SNAPSHOT`, stamped with `r`'s `venue_pos` and `ts_recv_ns`) for every instrument with a
    /// book before `r`, in instrument_id order, to be put before `r` (none: `Some` of an empty list).
    pub fn record(&mut self, r: &BookUpdate) -> Option<Vec<BookUpdate>> {
        let mut clears = None;
        if self.index > 0 && r.seq <= self.last_seq {
            self.found.push(Restart { record: self.index, last_ts_recv_ns: self.last_ts_recv_ns, next_ts_recv_ns: 0 });
            self.open = true;
            let clear = |instrument_id| BookUpdate {
                instrument_id,
                venue_pos: r.venue_pos,
                ts_event_ns: r.ts_recv_ns,
                ts_recv_ns: r.ts_recv_ns,
                flags: mdfan_wire::record::flags::LAST | mdfan_wire::record::flags::SNAPSHOT,
                ..BookUpdate::control(mdfan_wire::Kind::Clear)
            };
            clears = Some(self.books.iter().map(|&id| clear(id)).collect());
        }
        if !is_session_record(r) {
            if self.open {
                if let Some(last) = self.found.last_mut() {
                    last.next_ts_recv_ns = r.ts_recv_ns;
                }
                self.open = false;
            }
            self.last_ts_recv_ns = r.ts_recv_ns;
            if r.instrument_id != mdfan_wire::CHANNEL_INSTRUMENT_ID {
                self.books.insert(r.instrument_id);
            }
        }
        self.last_seq = r.seq;
        self.index += 1;
        clears
    }
}

/// What a whole capture holds ([`report`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// Segments read.
    pub segments: u64,
    /// Records, by `Kind` byte (0 for a byte no kind has).
    pub by_kind: std::collections::BTreeMap<u8, u64>,
    /// Records in all.
    pub records: u64,
    /// Sum of the records' `size` by kind byte (book kinds: the quantities).
    pub size_by_kind: std::collections::BTreeMap<u8, u64>,
    /// Gap blocks, and the seqs they say are missing.
    pub gaps: u64,
    /// Seqs missing.
    pub missed: u64,
    /// The first and last venue record's `ts_recv_ns` (0 without one): records the publisher makes for one
    /// session ([`is_session_record`]) aside.
    pub first_ts_recv_ns: u64,
    /// See `first_ts_recv_ns`.
    pub last_ts_recv_ns: u64,
    /// The first and last record's `ts_event_ns`.
    pub first_ts_event_ns: u64,
    /// See `first_ts_event_ns`.
    pub last_ts_event_ns: u64,
    /// Where a writer started again on the capture (its session's seq began anew; the records between the
    /// earlier writer's end and the restart's snapshot are not in the capture): the record's index, the last
    /// venue record's `ts_recv_ns` before it and the first after.
    pub restarts: Vec<Restart>,
    /// How it stopped (its last stop block), if it did.
    pub stop: Option<StopReason>,
    /// Whether it has a stop block at all (`stop` is `None` too for a reason number this build does not know:
    /// `stop=unknown`, not `stop=none`).
    pub stopped: bool,
    /// Where it ended on a block that was not whole.
    pub torn: Option<String>,
    /// The fsync policies its segments were written with (`SegmentMeta::fsync`), each once, in order.
    pub fsync: Vec<String>,
    /// The feed its first segment names (`SegmentMeta::feed`).
    pub feed: FeedIdentity,
    /// The first segment's number and `first_record`: (1, 0) for a capture read from its start; more when the
    /// segments before were deleted (on purpose, to keep a window of days; said in the report line).
    pub first_segment: (u64, u64),
}

impl Report {
    /// `capture segments=.. records=.. gaps=.. missed=.. restarts=.. first_ts_recv_ns=.. last_ts_recv_ns=.. stop=..
    /// fsync=.. format=.. venue=.. channel=..` (the segments' fsync policies, comma-separated when a restart
    /// changed it; the feed the first segment names, `-` for what it does not know; then `first_segment=N
    /// records_before=M (..)` when the capture's first segments were deleted),
    /// one `capture restart record=.. last_ts_recv_ns=.. next_ts_recv_ns=..` line per restart, then one
    /// `capture kind=NAME records=.. size=..` line per kind.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "capture segments={} records={} gaps={} missed={} restarts={} first_ts_recv_ns={} last_ts_recv_ns={} first_ts_event_ns={} last_ts_event_ns={} stop={} fsync={} {}{}{}",
            self.segments,
            self.records,
            self.gaps,
            self.missed,
            self.restarts.len(),
            self.first_ts_recv_ns,
            self.last_ts_recv_ns,
            self.first_ts_event_ns,
            self.last_ts_event_ns,
            self.stop.map_or(if self.stopped { "unknown" } else { "none" }, StopReason::as_str),
            if self.fsync.is_empty() { "none".to_owned() } else { self.fsync.join(",") },
            self.feed,
            match self.first_segment {
                (n, first) if n > 1 || first > 0 => {
                    format!(" first_segment={n} records_before={first} (the segments before it are gone)")
                }
                _ => String::new(),
            },
            self.torn.as_ref().map_or(String::new(), |t| format!(" torn=\"{t}\"")),
        )];
        for r in &self.restarts {
            out.push(format!(
                "capture restart record={} last_ts_recv_ns={} next_ts_recv_ns={}",
                r.record, r.last_ts_recv_ns, r.next_ts_recv_ns
            ));
        }
        for (k, n) in &self.by_kind {
            let name = mdfan_wire::Kind::from_u8(*k).map_or_else(|| format!("unknown_{k}"), |k| format!("{k:?}"));
            out.push(format!(
                "capture kind={name} records={n} size={}",
                self.size_by_kind.get(k).copied().unwrap_or(0)
            ));
        }
        out
    }
}

/// Whether `r` is a record the publisher made for one session, not a venue event: a heartbeat, the end of
/// stream, a snapshot's begin or end marker (a replay leaves them out; the snapshot's own records stay).
pub fn is_session_record(r: &BookUpdate) -> bool {
    use mdfan_wire::Kind;
    matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream | Kind::SnapshotBegin | Kind::SnapshotEnd))
}

/// Reads capture `name` in `dir` (`None`: its only capture) whole and sums it up.
///
/// # Errors
/// As [`Reader::next`].
pub fn report(dir: &Path, name: Option<&str>) -> Result<Report, CaptureError> {
    let mut r = Reader::open(dir, name, false)?;
    let mut rep = Report::default();
    let mut restarts = Restarts::default();
    let mut venue_seen = false;
    while let Some(item) = r.next()? {
        match item {
            Item::Segment(m) => {
                rep.segments += 1;
                if rep.segments == 1 {
                    rep.feed = m.feed.clone();
                    rep.first_segment = (m.segment, m.first_record);
                }
                if !rep.fsync.contains(&m.fsync) {
                    rep.fsync.push(m.fsync);
                }
            }
            Item::Record(rec) => {
                let _ = restarts.record(&rec);
                if !is_session_record(&rec) {
                    if !venue_seen {
                        venue_seen = true; // (a first record's ts_recv_ns may be 0 itself)
                        rep.first_ts_recv_ns = rec.ts_recv_ns;
                        rep.first_ts_event_ns = rec.ts_event_ns;
                    }
                    rep.last_ts_recv_ns = rec.ts_recv_ns;
                    rep.last_ts_event_ns = rec.ts_event_ns;
                }
                rep.records += 1;
                *rep.by_kind.entry(rec.kind).or_default() += 1;
                *rep.size_by_kind.entry(rec.kind).or_default() += u64::from(rec.size);
            }
            Item::Gap { expected, got } => {
                rep.gaps += 1;
                rep.missed = rep.missed.saturating_add(got.saturating_sub(expected));
            }
            Item::Stop { reason, .. } => (rep.stop, rep.stopped) = (reason, true),
        }
    }
    rep.torn = r.torn().map(str::to_owned);
    rep.restarts = restarts.found;
    Ok(rep)
}

/// The byte offset in a plain segment where the block at `block_offset` ends (for tests that cut a segment
/// mid-block as a killed writer would).
///
/// # Errors
/// [`CaptureError::Io`] when the file cannot be read.
pub fn block_end(path: &Path, block_offset: u64) -> Result<u64, CaptureError> {
    let mut f = File::open(path).map_err(|source| CaptureError::Io { path: path.to_owned(), what: "open", source })?;
    f.seek(SeekFrom::Start(block_offset)).map_err(|source| CaptureError::Io {
        path: path.to_owned(),
        what: "seek",
        source,
    })?;
    let mut h = [0u8; BLOCK_HEADER_BYTES];
    f.read_exact(&mut h).map_err(|source| CaptureError::Io { path: path.to_owned(), what: "read", source })?;
    let header = BlockHeader::decode(&h).map_err(|detail| CaptureError::Format {
        path: path.to_owned(),
        offset: block_offset,
        detail,
    })?;
    Ok(block_offset + BLOCK_HEADER_BYTES as u64 + u64::from(header.payload_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rotation race: a follower that found the end of segment 1, then (before it lists the folder) the
    /// writer appends segment 1's last block and opens segment 2. The follower reads that block before it takes
    /// up segment 2: every record once, in order.
    #[test]
    fn a_follower_reads_the_block_appended_between_its_end_of_segment_and_its_listing() {
        let dir = std::env::temp_dir().join(format!("mdfan-capture-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = WriterConfig {
            dir: dir.clone(),
            name: "race".into(),
            rotate_bytes: u64::MAX,
            rotate_ns: 1_000,
            block_records: 4,
            block_ms: 1,
            fsync: Fsync::Rotation,
            compress: false,
        };
        let meta = SegmentMeta {
            format_version: FORMAT_VERSION,
            name: String::new(),
            segment: 0,
            created_ns: 0,
            source: "test".into(),
            session: "race".into(),
            book: "mbo".into(),
            feed: FeedIdentity::new("test", "", "race"),
            symbology: Vec::new(),
            fsync: String::new(),
            first_record: 0,
            run_id: None,
            run_first_segment: None,
        };
        let rec = |seq: u64| BookUpdate { seq, instrument_id: 7, ..BookUpdate::control(mdfan_wire::Kind::Trade) };
        let (mut w, _) = Writer::open(cfg, meta, 1).unwrap();
        for seq in 1..=4 {
            w.record(&rec(seq), 2).unwrap(); // segment 1's first block
        }
        let mut r = Reader::open(&dir, Some("race"), true).unwrap();
        let mut seqs = Vec::new();
        let mut take = |r: &mut Reader| {
            while let Some(item) = r.next().unwrap() {
                if let Item::Record(x) = item {
                    seqs.push(x.seq);
                }
            }
        };
        take(&mut r);
        // In the window: a second block in segment 1 (at 2,000 ns: due to rotate), then segment 2 opened and
        // given a block.
        let mut w = Some(w);
        r.before_listing = Some(Box::new(move || {
            if let Some(mut w) = w.take() {
                for seq in 5..=8 {
                    w.record(&rec(seq), 2_000).unwrap();
                }
                for seq in 9..=12 {
                    w.record(&rec(seq), 2_001).unwrap();
                }
                let _ = w.stop(StopReason::EndOfStream, 2_002).unwrap();
            }
        }));
        take(&mut r);
        assert_eq!(segments(&dir, "race").unwrap().len(), 2, "the writer rotated in the window");
        assert_eq!(seqs, (1..=12).collect::<Vec<u64>>(), "segment 1's last block read before segment 2");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
