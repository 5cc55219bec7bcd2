//! A counters file: a process's counters in a small shared-memory file that another process (`mdfan-stat`)
//! reads live, after Aeron's CnC counters. The writer is a control thread that copies its counters in
//! periodically (the hot loop keeps bumping its own atomics and never touches this file).
//!
//! Layout (little-endian, one file, `HEADER_BYTES + slots x SLOT_BYTES` bytes):
//!
//! | offset | size | field | meaning |
//! |---:|---:|---|---|
//! | 0 | 8 | magic | `b"MDFANCTR"` |
//! | 8 | 4 | version | [`VERSION`] |
//! | 12 | 4 | slots | slot capacity |
//! | 16 | 8 | generation | seqlock: odd while the writer rewrites the table |
//! | 24 | 4 | pid | the writer's process id |
//! | 28 | 4 | state | 1 running, 2 ended (the writer closed it: the values are final) |
//! | 32 | 8 | updated_ns | `CLOCK_REALTIME` of the last rewrite, ns since the UNIX epoch |
//! | 40 | 4 | used | slots in use, `0..used` |
//! | 44 | 20 | role | `publisher` or `subscriber`, NUL-padded UTF-8 |
//! | 64 | 64 | name | the writer's name (endpoint, subscriber name), NUL-padded |
//!
//! Each slot (`SLOT_BYTES` = 192): value u64 @0, kind u32 @8 (1 counter: only grows; 2 gauge), metric name @16
//! (48 bytes, Prometheus style, e.g. `mdfan_session_sent_total`), labels @64 (128 bytes, `key="value",...`).
//!
//! A reader copies the table between two loads of `generation` and retries while it is odd or changed (the
//! writer bumps it to odd, writes, bumps it to even, with the fences a seqlock needs). The file stays after the
//! writer exits, marked ended, so the last values of a process that died are still there to read.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::MmapMut;

/// File format version.
pub const VERSION: u32 = 1;
/// Header size, bytes.
pub const HEADER_BYTES: usize = 128;
/// Slot size, bytes.
pub const SLOT_BYTES: usize = 192;
const MAGIC: &[u8; 8] = b"MDFANCTR";
const METRIC_BYTES: usize = 48;
const LABEL_BYTES: usize = 128;

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows (Prometheus `counter`).
    Counter,
    /// Goes up and down (Prometheus `gauge`).
    Gauge,
}

/// One counter as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    /// Prometheus-style name.
    pub name: String,
    /// `key="value",...` (may be empty).
    pub labels: String,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The value.
    pub value: u64,
}

/// A counters file read back whole ([`read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `publisher` or `subscriber`.
    pub role: String,
    /// The writer's name.
    pub name: String,
    /// The writer's pid.
    pub pid: u32,
    /// Whether the writer closed the file (values final).
    pub ended: bool,
    /// Last rewrite, ns since the UNIX epoch.
    pub updated_ns: u64,
    /// The counters, in the writer's order.
    pub metrics: Vec<Metric>,
}

/// Why a counters file could not be created or read.
#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    /// Opening, sizing or mapping the file failed.
    #[error("counters file {path}: {what}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a counters file of this version, or cut short.
    #[error("counters file {path}: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        detail: String,
    },
    /// The writer kept rewriting while the reader tried to copy it.
    #[error("counters file {path}: still being rewritten after {tries} tries")]
    Busy {
        /// The file.
        path: PathBuf,
        /// Tries made.
        tries: u32,
    },
}

/// The writer's end of a counters file. Not on any hot path: one control thread owns it.
pub struct CountersWriter {
    map: MmapMut,
    path: PathBuf,
    slots: usize,
    /// Rows staged by [`CountersWriter::set`] since [`CountersWriter::begin`].
    used: usize,
}

fn word64(map: &MmapMut, offset: usize) -> &AtomicU64 {
    let bytes = &map[offset..offset + 8];
    assert_eq!(bytes.as_ptr() as usize % 8, 0, "8-aligned");
    // SAFETY: the range is in bounds and 8-aligned (asserted; the map is page-aligned and every offset used is a
    // multiple of 8); AtomicU64 has the size and alignment of u64, and every access to these bytes, in this
    // process and in readers mapping the same file, is atomic.
    unsafe { &*(bytes.as_ptr() as *const AtomicU64) }
}

fn word32(map: &MmapMut, offset: usize) -> &AtomicU32 {
    let bytes = &map[offset..offset + 4];
    assert_eq!(bytes.as_ptr() as usize % 4, 0, "4-aligned");
    // SAFETY: as `word64`, for a 4-aligned u32.
    unsafe { &*(bytes.as_ptr() as *const AtomicU32) }
}

fn put_str(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len());
    // cut on a char boundary so the field stays UTF-8
    let n = (0..=n).rev().find(|&k| s.is_char_boundary(k)).unwrap_or(0);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n..].fill(0);
}

fn get_str(src: &[u8]) -> String {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..end]).into_owned()
}

/// Writes `s` (cut to `len` bytes, NUL-padded) at `offset` as atomic 8-byte words, so a reader copying it
/// meanwhile races on nothing (it retries on the generation instead).
fn store_str(map: &MmapMut, offset: usize, len: usize, s: &str) {
    let mut buf = [0u8; LABEL_BYTES];
    put_str(&mut buf[..len], s);
    for (k, chunk) in buf[..len].chunks_exact(8).enumerate() {
        word64(map, offset + 8 * k).store(u64::from_le_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
    }
}

/// Reads a string written by [`store_str`].
fn load_str(map: &MmapMut, offset: usize, len: usize) -> String {
    let mut buf = [0u8; LABEL_BYTES];
    for k in 0..len / 8 {
        buf[8 * k..8 * k + 8].copy_from_slice(&word64(map, offset + 8 * k).load(Ordering::Relaxed).to_le_bytes());
    }
    get_str(&buf[..len])
}

impl CountersWriter {
    /// Creates (or replaces) the file at `path` with room for `slots` counters, marked running.
    ///
    /// # Errors
    /// [`CountersError::Io`] naming the file and the step.
    pub fn create(path: &Path, role: &str, name: &str, slots: usize) -> Result<CountersWriter, CountersError> {
        let io = |what| move |source| CountersError::Io { path: path.to_owned(), what, source };
        let bytes = HEADER_BYTES + slots * SLOT_BYTES;
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io("open"))?;
        file.set_len(bytes as u64).map_err(io("set_len"))?;
        // SAFETY: the file was just created and sized by this process; other processes only read it, through
        // atomics for the words that change, and the file's length never changes while mapped.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io("mmap"))?;
        map[..8].copy_from_slice(MAGIC);
        map[8..12].copy_from_slice(&VERSION.to_le_bytes());
        map[12..16].copy_from_slice(&(slots as u32).to_le_bytes());
        map[24..28].copy_from_slice(&std::process::id().to_le_bytes());
        put_str(&mut map[44..64], role);
        put_str(&mut map[64..128], name);
        let w = CountersWriter { map, path: path.to_owned(), slots, used: 0 };
        word32(&w.map, 28).store(1, Ordering::Release);
        Ok(w)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a rewrite of the table: the generation goes odd (readers wait), rows are then set in order with
    /// [`CountersWriter::set`], and [`CountersWriter::commit`] ends it.
    pub fn begin(&mut self) {
        let g = word64(&self.map, 16);
        g.store(g.load(Ordering::Relaxed) | 1, Ordering::Relaxed);
        // Release fence: a reader that sees any row written below also sees the odd generation on its re-check.
        fence(Ordering::Release);
        self.used = 0;
    }

    /// Sets the next row; rows past the capacity are dropped (the reader sees the first `slots`).
    pub fn set(&mut self, name: &str, labels: &str, kind: MetricKind, value: u64) {
        if self.used == self.slots {
            return;
        }
        let at = HEADER_BYTES + self.used * SLOT_BYTES;
        word64(&self.map, at).store(value, Ordering::Relaxed);
        let k = match kind {
            MetricKind::Counter => 1u32,
            MetricKind::Gauge => 2,
        };
        word32(&self.map, at + 8).store(k, Ordering::Relaxed);
        // The name and labels change only while the generation is odd; a reader that copied them torn retries.
        store_str(&self.map, at + 16, METRIC_BYTES, name);
        store_str(&self.map, at + 64, LABEL_BYTES, labels);
        self.used += 1;
    }

    /// Ends a rewrite: stores `used` and `updated_ns`, then an even generation (Release).
    pub fn commit(&mut self, updated_ns: u64) {
        word32(&self.map, 40).store(self.used as u32, Ordering::Relaxed);
        word64(&self.map, 32).store(updated_ns, Ordering::Relaxed);
        let g = word64(&self.map, 16);
        g.store((g.load(Ordering::Relaxed) | 1) + 1, Ordering::Release);
    }

    /// Marks the file ended (the values are final). Also done on drop.
    pub fn close(&mut self) {
        word32(&self.map, 28).store(2, Ordering::Release);
        let _ = self.map.flush();
    }
}

impl Drop for CountersWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Reads a counters file whole, consistent (seqlock: retried while the writer rewrites it).
///
/// # Errors
/// [`CountersError::Io`] when it cannot be opened; [`CountersError::Format`] naming the field when it is not a
/// counters file of this version; [`CountersError::Busy`] when the writer kept rewriting for about 2 s.
pub fn read(path: &Path) -> Result<Snapshot, CountersError> {
    let io = |what| move |source| CountersError::Io { path: path.to_owned(), what, source };
    let bad = |detail: String| CountersError::Format { path: path.to_owned(), detail };
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io("open"))?;
    let len = file.metadata().map_err(io("stat"))?.len() as usize;
    if len < HEADER_BYTES {
        return Err(bad(format!("{len} bytes, shorter than the {HEADER_BYTES}-byte header")));
    }
    // SAFETY: mapped read-write only so the words can be read as atomics (the writer's stores are atomic); this
    // side never writes. A file cut shorter meanwhile would fault: the writer never shrinks it.
    let map = unsafe { MmapMut::map_mut(&file) }.map_err(io("mmap"))?;
    if &map[..8] != MAGIC {
        return Err(bad("field magic: not MDFANCTR".into()));
    }
    let version = u32::from_le_bytes(map[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(format!("field version: {version}, this reader knows {VERSION}")));
    }
    let slots = u32::from_le_bytes(map[12..16].try_into().expect("4 bytes")) as usize;
    if HEADER_BYTES + slots * SLOT_BYTES > len {
        return Err(bad(format!(
            "field slots: {slots} slots need {} bytes, the file has {len}",
            HEADER_BYTES + slots * SLOT_BYTES
        )));
    }
    // The writer rewrites in microseconds, but it can be descheduled in the middle: yield a while, then sleep
    // 1 ms between tries, for up to about 2 s.
    const TRIES: u32 = 2_100;
    let wait = |k: u32| {
        if k < 100 {
            std::thread::yield_now()
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1))
        }
    };
    for k in 0..TRIES {
        let g1 = word64(&map, 16).load(Ordering::Acquire);
        if g1 & 1 == 1 {
            wait(k);
            continue;
        }
        let used = (word32(&map, 40).load(Ordering::Relaxed) as usize).min(slots);
        let mut metrics = Vec::with_capacity(used);
        for i in 0..used {
            let at = HEADER_BYTES + i * SLOT_BYTES;
            let kind = match word32(&map, at + 8).load(Ordering::Relaxed) {
                1 => MetricKind::Counter,
                _ => MetricKind::Gauge,
            };
            metrics.push(Metric {
                value: word64(&map, at).load(Ordering::Relaxed),
                kind,
                name: load_str(&map, at + 16, METRIC_BYTES),
                labels: load_str(&map, at + 64, LABEL_BYTES),
            });
        }
        let updated_ns = word64(&map, 32).load(Ordering::Relaxed);
        let state = word32(&map, 28).load(Ordering::Acquire);
        fence(Ordering::Acquire);
        if word64(&map, 16).load(Ordering::Relaxed) != g1 {
            wait(k);
            continue;
        }
        return Ok(Snapshot {
            role: get_str(&map[44..64]),
            name: get_str(&map[64..128]),
            pid: u32::from_le_bytes(map[24..28].try_into().expect("4 bytes")),
            ended: state == 2,
            updated_ns,
            metrics,
        });
    }
    Err(CountersError::Busy { path: path.to_owned(), tries: TRIES })
}

impl Snapshot {
    /// The value of `name` with exactly `labels`, if present.
    pub fn get(&self, name: &str, labels: &str) -> Option<u64> {
        self.metrics.iter().find(|m| m.name == name && m.labels == labels).map(|m| m.value)
    }

    /// Prometheus text exposition format (version 0.0.4): a `# TYPE` line per metric name, then each sample
    /// with its labels plus `role` and `name` (the writer's), e.g. `mdfan_session_sent_total{instance="127.0.0.1:
    /// 7700",session="1",subscriber="a"} 68825`.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut typed: Vec<&str> = Vec::new();
        for m in &self.metrics {
            if !typed.contains(&m.name.as_str()) {
                typed.push(&m.name);
                let t = if m.kind == MetricKind::Counter { "counter" } else { "gauge" };
                out.push_str(&format!("# TYPE {} {t}\n", m.name));
            }
            let instance = format!("role=\"{}\",instance=\"{}\"", self.role, self.name.replace('"', "'"));
            let labels = if m.labels.is_empty() { instance } else { format!("{instance},{}", m.labels) };
            out.push_str(&format!("{}{{{labels}}} {}\n", m.name, m.value));
        }
        out
    }
}

/// The counters files (`mdfan-*.counters`) in `dir`, sorted by name.
///
/// # Errors
/// The directory cannot be read.
pub fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("mdfan-") && n.ends_with(".counters"))
        })
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_written_reads_back_and_a_closed_file_says_ended() {
        let dir = std::env::temp_dir().join(format!("mdfan-counters-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mdfan-publisher-x.counters");
        let mut w = CountersWriter::create(&path, "publisher", "127.0.0.1:7700", 3).unwrap();
        w.begin();
        w.set("mdfan_records_total", "", MetricKind::Counter, 68_792);
        w.set("mdfan_session_lag", "session=\"1\",subscriber=\"a\"", MetricKind::Gauge, 117);
        w.set("mdfan_x", "", MetricKind::Gauge, 1);
        w.set("mdfan_dropped_past_capacity", "", MetricKind::Gauge, 9);
        w.commit(5);
        let s = read(&path).unwrap();
        assert_eq!(
            (s.role.as_str(), s.name.as_str(), s.pid, s.ended, s.updated_ns),
            ("publisher", "127.0.0.1:7700", std::process::id(), false, 5)
        );
        assert_eq!(s.metrics.len(), 3, "the fourth row did not fit");
        assert_eq!(s.get("mdfan_records_total", ""), Some(68_792));
        assert_eq!(s.get("mdfan_session_lag", "session=\"1\",subscriber=\"a\""), Some(117));
        assert_eq!(
            s.prometheus().lines().take(2).collect::<Vec<_>>(),
            [
                "# TYPE mdfan_records_total counter",
                "mdfan_records_total{role=\"publisher\",instance=\"127.0.0.1:7700\"} 68792"
            ]
        );
        drop(w);
        assert!(read(&path).unwrap().ended);
        assert_eq!(list(&dir).unwrap(), std::slice::from_ref(&path));
        std::fs::write(&path, [b'x'; 200]).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.ends_with("field magic: not MDFANCTR"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reader_never_sees_a_half_written_table() {
        let dir = std::env::temp_dir().join(format!("mdfan-counters-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mdfan-race.counters");
        let mut w = CountersWriter::create(&path, "publisher", "race", 8).unwrap();
        w.begin();
        w.commit(0);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), std::sync::Arc::clone(&done));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                loop {
                    let last = done.load(Ordering::Relaxed);
                    let s = match read(&path) {
                        Ok(s) => s,
                        Err(CountersError::Busy { .. }) => continue, // this writer never pauses; a real one does
                        Err(e) => panic!("{e}"),
                    };
                    // every row of one rewrite carries the same value: a torn copy would mix two
                    if let Some(first) = s.metrics.first() {
                        assert!(s
                            .metrics
                            .iter()
                            .all(|m| m.value == first.value && m.name == format!("m{}", m.value % 3)));
                    }
                    reads += 1;
                    if last {
                        break reads;
                    }
                }
            })
        };
        for v in 0..20_000u64 {
            w.begin();
            for _ in 0..8 {
                w.set(&format!("m{}", v % 3), "", MetricKind::Gauge, v);
            }
            w.commit(v);
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
