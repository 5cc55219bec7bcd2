//! A counters file: a process's counters in a small file (in a tmpfs folder) that another process (`mdfan-stat`)
//! reads live, after Aeron's CnC counters. The writer is a control thread that copies its counters in
//! periodically (the hot loop keeps bumping its own atomics and never touches this file).
//!
//! Layout (little-endian, one file, exactly `HEADER_BYTES + slots x SLOT_BYTES` bytes):
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
//! **No mapping on either side.** The writer rewrites with `pwrite(2)` and a reader copies with `pread(2)`: a
//! file someone truncates, or a full tmpfs, is an error of that call, never a SIGBUS in the publisher or in
//! `mdfan-stat` (a shared mapping of a file another user can change is one). The seqlock is kept in the file: the
//! writer stores an odd generation, the rows, `used`/`updated_ns`, then the next even generation; a reader copies
//! the header, the rows and the header again and retries while the generation is odd or changed.
//!
//! **Who may write it.** [`CountersWriter::create`] makes the file with `O_CREAT | O_EXCL | O_NOFOLLOW` (a name
//! someone planted, a symlink to somewhere else, is never opened), mode 0640 and, where the group exists, group
//! [`GROUP`] (`mdfan`: operators in it read every file, nobody else does), its pages reserved
//! (`posix_fallocate`), in a folder nobody else may replace files in. A file already there under the same name is
//! removed only when it is this user's, a counters file, and its writer is gone ("dead": the same endpoint started
//! again); anything else is left alone and the writer runs without a file. [`read`] opens with `O_NOFOLLOW`,
//! checks magic, version, sizes and every row, and [`Snapshot::standing`] says whether to trust it: a file whose
//! owner is not its writer's user, whose owner is neither root, the reader, nor in group `mdfan`, or that says it
//! is a publisher's and is owned by neither root, the reader, nor user `mdfan`, is [`Standing::Suspect`] and is
//! not exported.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// File format version.
pub const VERSION: u32 = 1;
/// Header size, bytes.
pub const HEADER_BYTES: usize = 128;
/// Slot size, bytes.
pub const SLOT_BYTES: usize = 192;
/// The group counters files are given (where it exists): who may read them besides their owner.
pub const GROUP: &str = "mdfan";
/// The file mode of a counters file: owner writes, group [`GROUP`] reads, nobody else.
pub const MODE: u32 = 0o640;
/// The most slots a counters file may have (48 MiB of rows): more than any writer makes (a publisher: 32, 40 per
/// feed counter set and 28 per session of at most 4,096), so a larger header is not a counters file's, and a
/// reader never allocates for a file some other user planted with a huge slot count.
pub const MAX_SLOTS: usize = 1 << 18;
const MAGIC: &[u8; 8] = b"MDFANCTR";
const METRIC_BYTES: usize = 48;
const LABEL_BYTES: usize = 128;
const GENERATION_AT: u64 = 16;

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
    /// The file's owner (uid), group (gid) and permission bits, as `fstat` gave them.
    pub owner: u32,
    /// See [`Snapshot::owner`].
    pub group: u32,
    /// See [`Snapshot::owner`].
    pub mode: u32,
}

/// What a reader makes of a counters file ([`Snapshot::standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Its writer is alive.
    Running,
    /// Its writer closed it: the values are final.
    Ended,
    /// Its writer is gone without closing it (killed): the values are its last, `age_ns` old.
    Dead {
        /// Since the last rewrite, ns; `None` when it never wrote a table (killed before its first).
        age_ns: Option<u64>,
    },
    /// Not to be trusted (it may be forged): why. Never exported.
    Suspect(String),
}

impl Standing {
    /// `running`, `ended`, `dead` or `suspect`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Standing::Running => "running",
            Standing::Ended => "ended",
            Standing::Dead { .. } => "dead",
            Standing::Suspect(_) => "suspect",
        }
    }
}

/// Why a counters file could not be created or read.
#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    /// Opening, sizing or writing the file failed.
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
    /// A file or folder that must not be used (another user's, a symlink, a folder others may write to).
    #[error("counters file {path}: {detail}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why, naming the owner or mode.
        detail: String,
    },
    /// The writer is gone and left the table half rewritten (generation odd): killed in the middle of a rewrite.
    /// Its next start on the same name replaces the file, as any dead writer's ([`CountersWriter::create`]).
    #[error("counters file {path}: its writer, pid {pid}, is gone and left the table half rewritten (generation odd)")]
    Torn {
        /// The file.
        path: PathBuf,
        /// The writer's pid, which no longer runs.
        pid: u32,
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
    file: File,
    path: PathBuf,
    slots: usize,
    /// The rows staged by [`CountersWriter::set`] since [`CountersWriter::begin`], `used * SLOT_BYTES` bytes.
    rows: Vec<u8>,
    used: usize,
    generation: u64,
    /// The last write error, kept once (the writer goes on: the file is an aid, not the run).
    failed: Option<std::io::Error>,
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

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// This process's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The uid of user `name` in /etc/passwd, if it is there.
pub fn user_id(name: &str) -> Option<u32> {
    id_in("/etc/passwd", name)
}

/// The gid of group `name` in /etc/group, if it is there.
pub fn group_id(name: &str) -> Option<u32> {
    id_in("/etc/group", name)
}

/// The id (third field) of the entry named `name` in a colon-separated database such as /etc/passwd or
/// /etc/group (passwd(5), group(5)).
fn id_in(database: &str, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(database).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// The user a live process runs as (the owner of its /proc entry: its effective uid), `None` when it is gone.
fn process_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid())
}

/// Checks the folder a counters file goes in: owned by root or this user, and nobody else may replace a file in
/// it (not group- or world-writable unless it has the sticky bit, as `/dev/shm` does).
fn check_folder(path: &Path) -> Result<(), CountersError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let refused = |detail: String| CountersError::Refused { path: path.to_owned(), detail };
    let meta = std::fs::metadata(dir).map_err(|source| CountersError::Io {
        path: path.to_owned(),
        what: "stat its folder",
        source,
    })?;
    let (owner, mode) = (meta.uid(), meta.permissions().mode());
    if owner != 0 && owner != effective_uid() {
        return Err(refused(format!("folder {} is owned by uid {owner}, not by root or this user", dir.display())));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refused(format!(
            "folder {} has mode {:04o}: others may replace files in it (no sticky bit)",
            dir.display(),
            mode & 0o7777
        )));
    }
    Ok(())
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode [`MODE`]).
fn create_exclusive(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Whether the file at `path` may be removed to make room for a new writer: this user's own regular file with
/// one link, a counters file, whose writer closed it or is gone. The reason otherwise.
fn removable(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("stat: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("a {} is there, not a counters file", kind_of(&meta)));
    }
    if meta.uid() != effective_uid() {
        return Err(format!("it is owned by uid {}, not by this user (uid {})", meta.uid(), effective_uid()));
    }
    if meta.nlink() != 1 {
        return Err(format!("it has {} links", meta.nlink()));
    }
    let s = match read(path) {
        Err(CountersError::Torn { .. }) => return Ok(()), // its writer died mid-rewrite
        got => got.map_err(|e| format!("not a readable counters file ({e})"))?,
    };
    if !s.ended && process_uid(s.pid) == Some(meta.uid()) {
        return Err(format!("its writer, pid {}, is still running", s.pid));
    }
    Ok(())
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        "symlink"
    } else if t.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

/// Removes this user's counters files in `dir` named `<prefix>*.counters` whose writers are gone (the files a
/// killed process left, FC-43), so the next run of the same writer starts clean. Returns how many went.
pub fn prune_dead(dir: &Path, prefix: &str) -> usize {
    let Ok(files) = list(dir) else { return 0 };
    let mine =
        files.into_iter().filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)));
    mine.filter(|p| removable(p).is_ok() && std::fs::remove_file(p).is_ok()).count()
}

impl CountersWriter {
    /// Creates the file at `path` with room for `slots` counters, marked running: exclusively, mode [`MODE`],
    /// group [`GROUP`] where it exists and this process may give it, its bytes reserved, in a folder nobody else
    /// may replace files in. A file already there is replaced only if it is a dead writer's counters file of this
    /// user (see the module docs).
    ///
    /// # Errors
    /// [`CountersError::Refused`] for a folder others may write to or a name taken by anything but a dead
    /// counters file of this user's (named: a symlink, another user's file, a live writer's); [`CountersError::Io`]
    /// naming the step (`ENOSPC` at `reserve` for a full tmpfs).
    pub fn create(path: &Path, role: &str, name: &str, slots: usize) -> Result<CountersWriter, CountersError> {
        let io = |what| move |source| CountersError::Io { path: path.to_owned(), what, source };
        if slots > MAX_SLOTS {
            return Err(CountersError::Refused {
                path: path.to_owned(),
                detail: format!("{slots} slots, more than the {MAX_SLOTS} a reader takes"),
            });
        }
        check_folder(path)?;
        let file = match create_exclusive(path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                removable(path).map_err(|why| CountersError::Refused {
                    path: path.to_owned(),
                    detail: format!("the name is taken and was left alone: {why}"),
                })?;
                std::fs::remove_file(path).map_err(io("remove the dead writer's file"))?;
                create_exclusive(path).map_err(io("create"))?
            }
            other => other.map_err(io("create"))?,
        };
        let made = (|| {
            // the umask may have taken bits off; and the group that may read it
            file.set_permissions(std::fs::Permissions::from_mode(MODE)).map_err(io("chmod"))?;
            if let Some(gid) = group_id(GROUP) {
                let _ = std::os::unix::fs::fchown(&file, None, Some(gid)); // EPERM: not a member; the file stays 0640
            }
            let bytes = HEADER_BYTES + slots * SLOT_BYTES;
            use std::os::fd::AsRawFd as _;
            // SAFETY: `file` is an open, writable descriptor owned for the whole call; posix_fallocate reads no
            // memory of ours.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
            if rc != 0 {
                return Err(io("reserve")(std::io::Error::from_raw_os_error(rc)));
            }
            let mut header = [0u8; HEADER_BYTES];
            header[..8].copy_from_slice(MAGIC);
            header[8..12].copy_from_slice(&VERSION.to_le_bytes());
            header[12..16].copy_from_slice(&(slots as u32).to_le_bytes());
            header[24..28].copy_from_slice(&std::process::id().to_le_bytes());
            header[28..32].copy_from_slice(&1u32.to_le_bytes());
            put_str(&mut header[44..64], role);
            put_str(&mut header[64..128], name);
            file.write_all_at(&header, 0).map_err(io("write"))
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        Ok(CountersWriter {
            file,
            path: path.to_owned(),
            slots,
            rows: Vec::with_capacity(slots * SLOT_BYTES),
            used: 0,
            generation: 0,
            failed: None,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first write error since the file was created, if any (the writer goes on after one).
    pub fn failure(&self) -> Option<&std::io::Error> {
        self.failed.as_ref()
    }

    fn write_at(&mut self, bytes: &[u8], at: u64) {
        if let Err(e) = self.file.write_all_at(bytes, at) {
            self.failed.get_or_insert(e);
        }
    }

    /// Starts a rewrite of the table: the generation goes odd (readers wait), rows are then staged in order with
    /// [`CountersWriter::set`], and [`CountersWriter::commit`] writes them.
    pub fn begin(&mut self) {
        self.generation |= 1;
        let g = self.generation.to_le_bytes();
        self.write_at(&g, GENERATION_AT);
        self.rows.clear();
        self.used = 0;
    }

    /// Stages the next row; rows past the capacity are dropped (the reader sees the first `slots`).
    pub fn set(&mut self, name: &str, labels: &str, kind: MetricKind, value: u64) {
        if self.used == self.slots {
            return;
        }
        let mut row = [0u8; SLOT_BYTES];
        row[..8].copy_from_slice(&value.to_le_bytes());
        let k: u32 = match kind {
            MetricKind::Counter => 1,
            MetricKind::Gauge => 2,
        };
        row[8..12].copy_from_slice(&k.to_le_bytes());
        put_str(&mut row[16..16 + METRIC_BYTES], name);
        put_str(&mut row[64..64 + LABEL_BYTES], labels);
        self.rows.extend_from_slice(&row);
        self.used += 1;
    }

    /// Ends a rewrite: writes the rows, `used` and `updated_ns`, then the next even generation.
    pub fn commit(&mut self, updated_ns: u64) {
        let rows = std::mem::take(&mut self.rows);
        self.write_at(&rows, HEADER_BYTES as u64);
        self.rows = rows;
        let mut mid = [0u8; 12];
        mid[..8].copy_from_slice(&updated_ns.to_le_bytes());
        mid[8..].copy_from_slice(&(self.used as u32).to_le_bytes());
        self.write_at(&mid, 32);
        self.generation = (self.generation | 1) + 1;
        let g = self.generation.to_le_bytes();
        self.write_at(&g, GENERATION_AT);
    }

    /// Marks the file ended (the values are final). Also done on drop.
    pub fn close(&mut self) {
        self.write_at(&2u32.to_le_bytes(), 28);
    }
}

impl Drop for CountersWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether `name` is a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
fn metric_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `labels` is `key="value",...` with label names and values a Prometheus parser takes as they are
/// (values without `"`, `\` or control characters: the writers strip those).
fn labels_ok(labels: &str) -> bool {
    let mut rest = labels;
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once("=\"") else { return false };
        let Some((value, after)) = after.split_once('"') else { return false };
        if !metric_name_ok(key) || key.contains(':') || value.chars().any(|c| c == '\\' || c.is_control()) {
            return false;
        }
        rest = match after.strip_prefix(',') {
            Some(next) if !next.is_empty() => next,
            None if after.is_empty() => after,
            _ => return false,
        };
    }
    true
}

/// Reads a counters file whole and consistent (seqlock: retried while the writer rewrites it), with copies
/// (`pread`): a file truncated meanwhile is an error, never a SIGBUS. Checks the file is a regular file with one
/// link (`O_NOFOLLOW`), its magic, version and size, and every row's kind, name and labels.
///
/// # Errors
/// [`CountersError::Io`] when it cannot be opened; [`CountersError::Format`] naming the field when it is not a
/// counters file of this version (or cut short); [`CountersError::Torn`] when the writer died mid-rewrite;
/// [`CountersError::Busy`] when the writer kept rewriting for about 2 s.
pub fn read(path: &Path) -> Result<Snapshot, CountersError> {
    let io = |what| move |source| CountersError::Io { path: path.to_owned(), what, source };
    let bad = |detail: String| CountersError::Format { path: path.to_owned(), detail };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(io("open"))?;
    let meta = file.metadata().map_err(io("stat"))?;
    if !meta.file_type().is_file() {
        return Err(bad(format!("not a regular file (a {})", kind_of(&meta))));
    }
    if meta.nlink() != 1 {
        return Err(bad(format!("has {} links, expected 1", meta.nlink())));
    }
    let copy = |buf: &mut [u8], at: u64| -> Result<(), CountersError> {
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], at + got as u64) {
                Ok(0) => {
                    return Err(bad(format!(
                        "cut short: {} bytes where {} were expected at offset {at}",
                        at as usize + got,
                        at as usize + buf.len()
                    )))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("read")(e)),
            }
        }
        Ok(())
    };
    let len = meta.len() as usize;
    let mut header = [0u8; HEADER_BYTES];
    if len < HEADER_BYTES {
        return Err(bad(format!("{len} bytes, shorter than the {HEADER_BYTES}-byte header")));
    }
    copy(&mut header, 0)?;
    if &header[..8] != MAGIC {
        return Err(bad("field magic: not MDFANCTR".into()));
    }
    let version = u32_at(&header, 8);
    if version != VERSION {
        return Err(bad(format!("field version: {version}, this reader knows {VERSION}")));
    }
    let slots = u32_at(&header, 12) as usize;
    if slots > MAX_SLOTS {
        return Err(bad(format!("field slots: {slots}, more than the {MAX_SLOTS} a writer makes")));
    }
    let want = HEADER_BYTES as u64 + slots as u64 * SLOT_BYTES as u64;
    if want != len as u64 {
        return Err(bad(format!("field slots: {slots} slots need {want} bytes, the file has {len}")));
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
    let mut rows = Vec::new();
    for k in 0..TRIES {
        copy(&mut header, 0)?;
        let g1 = u64_at(&header, GENERATION_AT as usize);
        if g1 & 1 == 1 {
            // A writer killed mid-rewrite never makes it even: asked once at the start and once after the yields.
            let pid = u32_at(&header, 24);
            if k == 0 || k == 100 {
                match process_uid(pid) {
                    None => return Err(CountersError::Torn { path: path.to_owned(), pid }),
                    // not its writer's (a file planted with a live pid): not waited for
                    Some(uid) if uid != meta.uid() => {
                        return Err(bad(format!(
                            "field pid: {pid}, mid-rewrite, runs as uid {uid}, not the file's owner (uid {}): not \
                             its writer",
                            meta.uid()
                        )))
                    }
                    Some(_) => {}
                }
            }
            wait(k);
            continue;
        }
        let used = (u32_at(&header, 40) as usize).min(slots);
        rows.resize(used * SLOT_BYTES, 0);
        copy(&mut rows, HEADER_BYTES as u64)?;
        let mut again = [0u8; 8];
        copy(&mut again, GENERATION_AT)?;
        if u64::from_le_bytes(again) != g1 {
            wait(k);
            continue;
        }
        let mut metrics = Vec::with_capacity(used);
        for (i, row) in rows.chunks_exact(SLOT_BYTES).enumerate() {
            let kind = match u32_at(row, 8) {
                1 => MetricKind::Counter,
                2 => MetricKind::Gauge,
                k => return Err(bad(format!("slot {i}: field kind: {k}, not 1 (counter) or 2 (gauge)"))),
            };
            let (name, labels) = (get_str(&row[16..16 + METRIC_BYTES]), get_str(&row[64..64 + LABEL_BYTES]));
            if !metric_name_ok(&name) {
                return Err(bad(format!("slot {i}: field name: {name:?} is not a metric name")));
            }
            if !labels_ok(&labels) {
                return Err(bad(format!("slot {i} ({name}): field labels: {labels:?} is not key=\"value\",...")));
            }
            metrics.push(Metric { value: u64_at(row, 0), kind, name, labels });
        }
        return Ok(Snapshot {
            role: get_str(&header[44..64]),
            name: get_str(&header[64..128]),
            pid: u32_at(&header, 24),
            ended: u32_at(&header, 28) == 2,
            updated_ns: u64_at(&header, 32),
            metrics,
            owner: meta.uid(),
            group: meta.gid(),
            mode: meta.permissions().mode() & 0o7777,
        });
    }
    Err(CountersError::Busy { path: path.to_owned(), tries: TRIES })
}

/// Why a file with these permission bits, owner and group cannot be trusted by a reader running as
/// `reader_uid` (see [`Snapshot::standing`]), from its metadata alone: its mode lets others write it, or its
/// owner is neither root, the reader, nor in group [`GROUP`]. `None`: it may be read.
fn suspect_owner(mode: u32, owner: u32, group: u32, reader_uid: u32) -> Option<String> {
    if mode & 0o022 != 0 {
        return Some(format!("mode {mode:04o}: others may write it"));
    }
    let trusted_group = group_id(GROUP).is_some_and(|g| g == group);
    (owner != 0 && owner != reader_uid && !trusted_group).then(|| {
        format!(
            "owned by uid {owner} (group {group}), which is neither root, you (uid {reader_uid}), nor group {GROUP}"
        )
    })
}

/// [`Snapshot::standing`]'s verdict on the file at `path` from its metadata alone (`lstat`: a symlink is judged
/// as itself), before any read: `Some` of why it is suspect. A reader skips such a file's contents (another
/// user's file may claim any size or a writer forever mid-rewrite). `None` also when it cannot be stat'ed:
/// [`read`] then names the error.
pub fn suspect_file(path: &Path, reader_uid: u32) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    suspect_owner(meta.permissions().mode() & 0o7777, meta.uid(), meta.gid(), reader_uid)
}

/// A Prometheus label value with `\`, `"` and newlines escaped (text format 0.0.4), other control characters
/// dropped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

impl Snapshot {
    /// The value of `name` with exactly `labels`, if present.
    pub fn get(&self, name: &str, labels: &str) -> Option<u64> {
        self.metrics.iter().find(|m| m.name == name && m.labels == labels).map(|m| m.value)
    }

    /// Whether this file can be trusted, for a reader running as `reader_uid` at `now_ns` (see the module docs):
    /// [`Standing::Suspect`] when its mode lets others write it, when its writer is alive but runs as another
    /// user than the file's owner, when its owner is neither root, the reader, nor in group [`GROUP`] (the
    /// file's group), or when it says it is a publisher's and its owner is neither root, the reader, nor user
    /// [`GROUP`] (the publisher service's user: a strategy in the group cannot pass for a publisher); otherwise
    /// running, ended or dead (writer gone, with the values' age).
    pub fn standing(&self, reader_uid: u32, now_ns: u64) -> Standing {
        if self.mode & 0o022 != 0 {
            return Standing::Suspect(format!("mode {:04o}: others may write it", self.mode));
        }
        let publisher_user = user_id(GROUP).is_some_and(|u| u == self.owner);
        if self.role == "publisher" && self.owner != 0 && self.owner != reader_uid && !publisher_user {
            return Standing::Suspect(format!(
                "a publisher's file owned by uid {}, which is neither root, you (uid {reader_uid}), nor user {GROUP}",
                self.owner
            ));
        }
        if let Some(why) = suspect_owner(self.mode, self.owner, self.group, reader_uid) {
            return Standing::Suspect(why);
        }
        match process_uid(self.pid) {
            Some(uid) if uid != self.owner && !self.ended => Standing::Suspect(format!(
                "owned by uid {}, but its writer, pid {}, runs as uid {uid}",
                self.owner, self.pid
            )),
            _ if self.ended => Standing::Ended,
            Some(_) => Standing::Running,
            None => Standing::Dead { age_ns: (self.updated_ns > 0).then(|| now_ns.saturating_sub(self.updated_ns)) },
        }
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
            let instance = self.instance_labels();
            let labels = if m.labels.is_empty() { instance } else { format!("{instance},{}", m.labels) };
            out.push_str(&format!("{}{{{labels}}} {}\n", m.name, m.value));
        }
        out
    }

    /// `role="...",instance="..."`, escaped.
    pub fn instance_labels(&self) -> String {
        format!("role=\"{}\",instance=\"{}\"", escape_label(&self.role), escape_label(&self.name))
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

    /// A fresh folder of this user's under the temp dir (mode 0700: nobody else may write there).
    fn folder(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mdfan-counters-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    /// A publisher's counters file `file` in `dir` of `slots` slots, one counter written, its writer kept.
    fn one_counter(dir: &Path, file: &str, slots: usize) -> CountersWriter {
        let mut w = CountersWriter::create(&dir.join(file), "publisher", file, slots).unwrap();
        w.begin();
        w.set("mdfan_records_total", "", MetricKind::Counter, 1);
        w.commit(1);
        w
    }

    #[test]
    fn a_table_written_reads_back_and_a_closed_file_says_ended() {
        let dir = folder("test");
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
            (s.role.as_str(), s.name.as_str(), s.pid, s.ended, s.updated_ns, s.mode),
            ("publisher", "127.0.0.1:7700", std::process::id(), false, 5, MODE)
        );
        assert_eq!(s.standing(effective_uid(), 0), Standing::Running);
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
        let s = read(&path).unwrap();
        assert!(s.ended);
        assert_eq!(s.standing(effective_uid(), 0), Standing::Ended);
        assert_eq!(list(&dir).unwrap(), std::slice::from_ref(&path));
        std::fs::write(&path, [b'x'; 200]).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.ends_with("field magic: not MDFANCTR"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A symlink planted at the name is never followed (its target is untouched) and never replaced; a dead
    /// writer's file of this user is replaced; a folder others may write to is refused.
    #[test]
    fn the_name_is_created_exclusively_a_planted_symlink_is_left_alone_and_a_dead_file_is_pruned() {
        let dir = folder("plant");
        let path = dir.join("mdfan-publisher-127.0.0.1_7720.counters");
        let target = dir.join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let e = CountersWriter::create(&path, "publisher", "x", 4).err().unwrap().to_string();
        assert!(e.contains("the name is taken and was left alone: a symlink is there"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me", "the link's target is untouched");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "and the link is not removed");
        std::fs::remove_file(&path).unwrap();
        // a file left by a writer that is gone (pid 0x7fffffff does not exist): pruned, the new file takes the name
        let mut dead = CountersWriter::create(&path, "publisher", "old", 4).unwrap();
        dead.file.write_all_at(&0x7fff_fff0u32.to_le_bytes(), 24).unwrap();
        // killed before its first table: no age to show (it read as 57 years, from a time of 0)
        let s = read(&path).unwrap();
        assert_eq!(s.standing(effective_uid(), 9_000_000_000), Standing::Dead { age_ns: None });
        dead.begin();
        dead.commit(2_000_000_000);
        dead.file.write_all_at(&0x7fff_fff0u32.to_le_bytes(), 24).unwrap();
        std::mem::forget(dead); // not closed: as a killed process leaves it
        let s = read(&path).unwrap();
        assert_eq!(s.standing(effective_uid(), 9_000_000_000), Standing::Dead { age_ns: Some(7_000_000_000) });
        let w = CountersWriter::create(&path, "publisher", "new", 4).unwrap();
        assert_eq!(read(&path).unwrap().name, "new");
        drop(w);
        // killed in the middle of a rewrite (generation odd): torn, said at once (not `Busy` after 2 s of
        // retries), and replaced all the same
        let mut torn = CountersWriter::create(&path, "publisher", "torn", 4).unwrap();
        torn.begin();
        torn.file.write_all_at(&0x7fff_fff0u32.to_le_bytes(), 24).unwrap();
        std::mem::forget(torn);
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("its writer, pid 2147483632, is gone and left the table half rewritten"), "{e}");
        let w = CountersWriter::create(&path, "publisher", "new", 4).unwrap();
        assert_eq!(read(&path).unwrap().name, "new");
        // this writer is alive: a second one for the same name is refused
        let e = CountersWriter::create(&path, "publisher", "again", 4).err().unwrap().to_string();
        assert!(e.contains("is still running") || e.contains("left alone"), "{e}");
        drop(w);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = CountersWriter::create(&dir.join("mdfan-y.counters"), "publisher", "y", 4).err().unwrap().to_string();
        assert!(e.contains("others may replace files in it (no sticky bit)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file cut short under a reader (or before it) is an error naming the size, never a crash; rows that are
    /// not metric names and labels are refused naming the slot; a file others may write is suspect.
    #[test]
    fn truncated_malformed_and_world_writable_files_are_errors_or_suspect_never_a_crash() {
        let dir = folder("cut");
        let path = dir.join("mdfan-publisher-cut.counters");
        let mut w = one_counter(&dir, "mdfan-publisher-cut.counters", 8);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(500).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("field slots: 8 slots need 1664 bytes, the file has 500"), "{e}");
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(40).unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("40 bytes, shorter than the 128-byte header"), "{e}");
        // the writer goes on writing (pwrite extends the file again): no signal, an error at most
        w.begin();
        w.set("mdfan_records_total", "", MetricKind::Counter, 2);
        w.commit(2);
        drop(w);
        let mut forged = CountersWriter::create(&dir.join("mdfan-forged.counters"), "publisher", "f", 2).unwrap();
        forged.begin();
        forged.set("mdfan_session_lag", "session=\"1\"} 999999\nmdfan_x{a=\"b", MetricKind::Gauge, 7);
        forged.commit(1);
        let e = read(forged.path()).unwrap_err().to_string();
        assert!(e.contains("slot 0 (mdfan_session_lag): field labels"), "{e}");
        forged.begin();
        forged.set("mdfan_ok", "", MetricKind::Gauge, 7);
        forged.commit(1);
        std::fs::set_permissions(forged.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let s = read(forged.path()).unwrap();
        assert_eq!(s.standing(effective_uid(), 0), Standing::Suspect("mode 0666: others may write it".into()));
        // A strategy's user in group mdfan writes a file that says it is a publisher's: suspect, whatever its group.
        let other = 4_242_424;
        let planted = Snapshot { owner: other, group: group_id(GROUP).unwrap_or(other), mode: MODE, ..s };
        assert_eq!(
            planted.standing(effective_uid(), 0),
            Standing::Suspect(format!(
                "a publisher's file owned by uid {other}, which is neither root, you (uid {}), nor user mdfan",
                effective_uid()
            ))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file some other user planted in the counters folder (a shared /dev/shm) is judged before it is read,
    /// and what it claims is bounded: a slot count past [`MAX_SLOTS`] (a breaker's 10^8, a sparse 19 GB file,
    /// made `mdfan-stat` abort on a 19 GB allocation) is an error naming the field; a writer forever
    /// mid-rewrite whose pid runs as another user than the file's owner (pid 1) is no writer of it, so the
    /// reader does not wait 2 s on it; a file owned by another user is suspect from its metadata alone.
    #[test]
    fn a_planted_file_claiming_a_huge_table_or_a_writer_it_has_not_is_refused_at_once() {
        let dir = folder("planted");
        let path = one_counter(&dir, "mdfan-publisher-planted.counters", 2).path().to_owned();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let slots: u32 = 100_000_000;
        file.write_all_at(&slots.to_le_bytes(), 12).unwrap();
        file.write_all_at(&slots.to_le_bytes(), 40).unwrap(); // used
        file.set_len(HEADER_BYTES as u64 + u64::from(slots) * SLOT_BYTES as u64).unwrap(); // sparse
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("field slots: 100000000, more than the 262144 a writer makes"), "{e}");
        let e = CountersWriter::create(&dir.join("mdfan-big.counters"), "publisher", "b", MAX_SLOTS + 1);
        assert!(e.err().unwrap().to_string().contains("262145 slots, more than the 262144 a reader takes"));
        if effective_uid() != 0 {
            return; // (another user's file takes root to make)
        }
        let path = one_counter(&dir, "mdfan-publisher-busy.counters", 2).path().to_owned();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&1u64.to_le_bytes(), GENERATION_AT).unwrap(); // odd: mid-rewrite
        file.write_all_at(&1u32.to_le_bytes(), 24).unwrap(); // pid 1, root's
        std::os::unix::fs::fchown(&file, Some(65_534), None).unwrap();
        let t = std::time::Instant::now();
        let e = read(&path).unwrap_err().to_string();
        assert!(e.contains("field pid: 1, mid-rewrite, runs as uid 0, not the file's owner (uid 65534)"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "not waited for: {:?}", t.elapsed());
        let why = suspect_file(&path, 0).expect("another user's file is suspect");
        assert!(why.starts_with("owned by uid 65534 (group "), "{why}");
        assert_eq!(suspect_file(&dir.join("mdfan-publisher-planted.counters"), 0), None, "root's own");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn labels_are_checked_pair_by_pair() {
        for good in ["", "a=\"1\"", "session=\"1\",subscriber=\"a b\"", "quantile=\"0.5\",clock=\"nic\""] {
            assert!(labels_ok(good), "{good}");
        }
        for bad in ["a", "a=1", "a=\"1\",", "a=\"1\"b=\"2\"", "1a=\"x\"", "a=\"x\ny\"", "a=\"x\\\"", "a:b=\"x\""] {
            assert!(!labels_ok(bad), "{bad}");
        }
    }

    #[test]
    fn a_reader_never_sees_a_half_written_table() {
        let dir = folder("race");
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
                    let last = done.load(std::sync::atomic::Ordering::Relaxed);
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
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert!(w.failure().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
