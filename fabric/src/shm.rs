//! The shared-memory provider: WRITE-with-immediate semantics between processes on one host.
//!
//! The subscriber creates one file (under `/dev/shm` by default) per ring and grants the publisher its path;
//! the publisher maps it read-write. A "write with immediate" is a 64-byte copy into the slot followed by a
//! release store of a CQ entry; the receiver's acquire load of that CQ entry is what makes the slot visible,
//! the same contract as an RDMA completion.
//!
//! # Segment layout (little-endian, offsets in bytes)
//!
//! | offset            | size                  | what                            | written by   |
//! |------------------:|----------------------:|---------------------------------|--------------|
//! | 0                 | 64                    | [`RingHeader`]                  | subscriber, once |
//! | 128               | 8 (line of 128)       | consumed seq (`AtomicU64`)      | subscriber   |
//! | 256               | 8 (line of 128)       | producer state word (`AtomicU64`: low 32 state, high 32 [`CloseReason`]) | publisher |
//! | 4096              | `cq_entries * 8`      | CQ entries (`AtomicU64` each)   | publisher    |
//! | [`slots_offset`]  | `slot_count * 64`     | slots ([`BookUpdate`])          | publisher    |
//!
//! Each moving word has a 128-byte line of its own (two 64-byte lines: the adjacent-line prefetcher on x86-64
//! pulls pairs), so the subscriber's consumed seq never shares a line with what the publisher writes.
//!
//! # CQ entries
//!
//! Entry `p mod cq_entries` for the `p`-th write (from 0) holds `(lap << 32) | imm_data` with
//! `lap = p / cq_entries + 1`, so a zeroed entry is never valid and the reader tells a fresh entry from last
//! lap's by the lap alone: there is no shared head/tail pair to bounce between cores. The writer never laps the
//! reader, because it writes only while the ring has space and each write is one entry: at most `slot_count`
//! (= `cq_entries`) completions are ever unreaped.
//!
//! # Completing from the slot's stamp
//!
//! Unlike an RDMA NIC, this writer orders its stores: it writes a record's bytes 8..64, then its seq word (the
//! slot's stamp) with release ordering, then the CQ entry. A reader that knows the seq it expects polls that
//! slot's stamp ([`LocalRing::poll_cq_expecting`]): seeing the expected seq there, it holds the whole record
//! without touching the CQ line, so a reap costs about one cache-line hand-off. Such a completion consumes its CQ
//! position: the entry (stored right after, or already there) is never read. This is exact because the writer
//! writes seqs in increasing order and every earlier write was delivered (from its stamp or its entry), so the
//! expected record's entry is the one at the reader's CQ position. Anything other than the expected seq (a gap:
//! that seq is never written) comes through the CQ, which an idle reader reads every [`CQ_POLL_INTERVAL`] polls:
//! a gap shows that many empty polls later. An entry found a lap ahead of the reader's position (only possible
//! if a writer broke the increasing-seq rule) belongs to a released record and is stepped over.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use mdfan_wire::control::RingGrant;
use mdfan_wire::ring::{check_slot_count, imm_from_seq, slot_index, RingHeader, RECORD_SIZE_BYTES};
use mdfan_wire::BookUpdate;
use memmap2::{MmapMut, MmapOptions};

use crate::{CloseReason, Completion, FabricError, LocalRing, PeerState, PostError, Provider, ReadWindow, RemoteRing};

/// Where rings are created unless told otherwise.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// Every ring file's name starts with this; the publisher maps nothing else.
pub const FILE_PREFIX: &str = "mdfan-ring-";

const CONSUMER_OFFSET: usize = 128;
const PRODUCER_OFFSET: usize = 256;
const CQ_OFFSET: usize = 4096;
const PAGE_BYTES: usize = 4096;

const STATE_WAITING: u32 = 0;
const STATE_ATTACHED: u32 = 1;
const STATE_CLOSED: u32 = 2;

/// Byte offset of slot 0 in a segment whose CQ has `cq_entries` entries.
pub const fn slots_offset(cq_entries: u32) -> usize {
    CQ_OFFSET + (cq_entries as usize * 8).div_ceil(PAGE_BYTES) * PAGE_BYTES
}

/// Total segment size in bytes for `slot_count` slots (and as many CQ entries).
pub const fn segment_bytes(slot_count: u32) -> usize {
    slots_offset(slot_count) + slot_count as usize * RECORD_SIZE_BYTES
}

/// A mapped ring segment, with typed views of its moving words.
struct Segment {
    /// The first byte of the segment: page-aligned, [`segment_bytes`] long, valid while `memory` is.
    base: *mut u8,
    len: usize,
    /// Owns the memory `base` points to.
    #[allow(dead_code)] // held for its Drop
    memory: Memory,
    path: PathBuf,
    slot_count: u32,
}

/// The memory a [`Segment`] views.
enum Memory {
    /// A shared mapping of the ring file (both processes map the same file).
    Map(#[allow(dead_code)] MmapMut), // held for its Drop (munmap)
    /// One heap allocation shared by both ends in this process: what the tests (and Miri, which cannot map
    /// files) run the protocol on.
    #[cfg(test)]
    Heap(#[allow(dead_code)] std::sync::Arc<heap::HeapSegment>), // held for its Drop
}

// SAFETY: `base` points into `memory`, which the segment owns (a mapping, or a shared heap allocation kept alive
// by its Arc); the segment is used by one thread at a time (through `&mut` of its ring), and every word another
// thread or process may touch at the same time is accessed atomically (see the layout above).
unsafe impl Send for Segment {}

impl Segment {
    fn mapped(mut map: MmapMut, path: PathBuf, slot_count: u32) -> Segment {
        Segment { base: map.as_mut_ptr(), len: map.len(), memory: Memory::Map(map), path, slot_count }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= self.len);
        // SAFETY: the segment is page-aligned and `offset` a multiple of 8 inside it (checked against the segment
        // size when the segment was created or attached), so the pointer is valid and aligned for AtomicU64,
        // which has u64's layout. The words at these offsets are only ever accessed atomically, by every
        // process that maps the file, and the reference lives no longer than `self.memory`.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn consumed(&self) -> &AtomicU64 {
        self.word(CONSUMER_OFFSET)
    }

    fn producer(&self) -> &AtomicU64 {
        self.word(PRODUCER_OFFSET)
    }

    fn cq_entry(&self, index: u32) -> &AtomicU64 {
        self.word(CQ_OFFSET + (index & (self.slot_count - 1)) as usize * 8)
    }

    fn slot_ptr(&self, index: u32) -> *const BookUpdate {
        let offset = slots_offset(self.slot_count) + (index & (self.slot_count - 1)) as usize * RECORD_SIZE_BYTES;
        // SAFETY: `offset` is inside the segment (index masked to the slot count, size checked at set-up).
        unsafe { self.base.add(offset) as *const BookUpdate }
    }

    /// Word 0 of slot `index`: the record's `seq`, the slot's stamp (only ever accessed atomically).
    fn slot_stamp(&self, index: u32) -> &AtomicU64 {
        self.word(slots_offset(self.slot_count) + (index & (self.slot_count - 1)) as usize * RECORD_SIZE_BYTES)
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FabricError + 'a {
    move |source| FabricError::Io { op, path: path.display().to_string(), source }
}

/// Sizes a new ring file to `len` bytes with its pages reserved (`posix_fallocate`), so a folder too small for
/// the ring (a small tmpfs such as Docker's 64 MiB /dev/shm) is an error here, naming the folder, the bytes needed
/// and the bytes free, and never a SIGBUS when the publisher first writes a slot.
fn reserve(file: &File, len: usize, dir: &Path, path: &Path) -> Result<(), FabricError> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is an open, writable descriptor we own for the whole call; posix_fallocate reads no memory
    // of ours.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC => Err(FabricError::BadRing {
            path: path.display().to_string(),
            detail: format!(
                "the ring needs {len} bytes and {} has {} bytes free (a bigger --shm-dir / fabric.shm_dir, or fewer \
                 --ring-slots)",
                dir.display(),
                free_bytes(dir).map_or_else(|| "an unknown number of".to_owned(), |b| b.to_string())
            ),
        }),
        errno => Err(FabricError::Io {
            op: "reserve",
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(errno),
        }),
    }
}

/// Bytes free for an unprivileged writer in the file system holding `dir` (`statvfs`), if it answers.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path that outlives the call; `st` is writable memory of the right type,
    // read only after statvfs reported success (it then filled it in).
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // fsblkcnt_t and c_ulong are u64 here, not on every target
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Removes ring files left in `dir` by processes that no longer exist (a subscriber killed between creating its
/// ring and the publisher's accept). Names are `mdfan-ring-<pid>-<n>`; a pid with no /proc entry is gone.
fn sweep_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FILE_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The subscriber's ring in shared memory (the receiver side).
pub struct ShmLocalRing {
    seg: Segment,
    /// CQ entries reaped so far.
    cq_pos: u64,
    cq_shift: u32,
    linked: bool,
    /// Polls that found the expected stamp absent (the CQ is read on every [`CQ_POLL_INTERVAL`]-th).
    idle_polls: u32,
    /// Which slots completions may hand out, and how far a release may go.
    window: ReadWindow,
}

static RING_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Names tried after the first, taken, one ([`ShmLocalRing::create`]).
const RING_NAME_TRIES: u32 = 4;

/// 64 bits from the kernel's random source (`getrandom(2)`); the time's nanoseconds if it fails (it does not,
/// once the pool is ready at boot).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`, which lives across the call.
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if got == b.len() as isize {
        return u64::from_le_bytes(b);
    }
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl ShmLocalRing {
    /// Creates a ring of `slot_count` slots in a new file under `dir`, and the grant to send the publisher.
    ///
    /// The file is created with mode 0600 and a unique name (`mdfan-ring-<pid>-<n>`, or, when another user took
    /// that name, `mdfan-ring-<pid>-<n>-<64 random bits in hex>`); call
    /// [`ShmLocalRing::unlink`] once the publisher has mapped it (after its accept), so nothing is left behind if
    /// either side dies. Memory: [`segment_bytes`] (`slot_count * 72` bytes plus two pages).
    ///
    /// # Errors
    /// [`FabricError::BadRing`] for a slot count that is not a power of two in range; [`FabricError::Io`] when
    /// the file cannot be created, sized or mapped.
    pub fn create(dir: &Path, slot_count: u32) -> Result<(ShmLocalRing, RingGrant), FabricError> {
        check_dir(dir)?;
        sweep_stale(dir);
        let header = RingHeader::new(slot_count, 1)
            .map_err(|e| FabricError::BadRing { path: dir.display().to_string(), detail: e.to_string() })?;
        // O_EXCL | O_NOFOLLOW: a name someone planted (a file, a symlink to somewhere else) fails here. The
        // plain name is predictable (pid, counter), so another user may have taken it in a shared folder: the
        // next tries add 64 random bits, which nobody can take ahead.
        let (pid, mut tries) = (std::process::id(), 0);
        let (file, path) = loop {
            let n = RING_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = match tries {
                0 => dir.join(format!("{FILE_PREFIX}{pid}-{n}")),
                _ => dir.join(format!("{FILE_PREFIX}{pid}-{n}-{:016x}", random_u64())),
            };
            let created = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path);
            match created {
                Ok(file) => break (file, path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < RING_NAME_TRIES => tries += 1,
                Err(e) => return Err(io_err("create", &path)(e)),
            }
        };
        let len = segment_bytes(slot_count);
        let mapped = reserve(&file, len, dir, &path).and_then(|()| {
            // SAFETY: the file was just created by us with O_EXCL and has exactly `len` bytes; its contents
            // change under the map only through the atomics and slots of the documented layout.
            unsafe { MmapOptions::new().len(len).populate().map_mut(&file) }.map_err(io_err("mmap", &path))
        });
        let mut map = match mapped {
            Ok(map) => map,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        map[..64].copy_from_slice(bytemuck::bytes_of(&header));
        let grant = RingGrant::Shm { path: path.display().to_string(), slot_count };
        let ring = ShmLocalRing {
            seg: Segment::mapped(map, path, slot_count),
            cq_pos: 0,
            cq_shift: slot_count.trailing_zeros(),
            linked: true,
            idle_polls: 0,
            window: ReadWindow::default(),
        };
        Ok((ring, grant))
    }

    /// Creates a ring of `slot_count` slots with no name at all: a `memfd_create(2)` file, its pages reserved
    /// (`posix_fallocate`), header written, then sealed against shrinking and growing (`F_SEAL_SHRINK |
    /// F_SEAL_GROW | F_SEAL_SEAL`, fcntl(2) "File Sealing"), so nobody, the publisher included, can truncate it
    /// under a mapping. Returns the ring, the grant ([`RingGrant::ShmFd`]) and the descriptor to pass to the
    /// publisher with the subscribe frame over its Unix-domain socket ([`crate::fdpass::send_with_fd`]); no
    /// other process can open it, so it needs no file mode, owner or folder to guard. Memory: [`segment_bytes`].
    ///
    /// # Errors
    /// [`FabricError::BadRing`] for a bad slot count or a host with too little shared memory; [`FabricError::Io`]
    /// when the file cannot be created, sized, mapped or sealed.
    pub fn create_sealed(slot_count: u32) -> Result<(ShmLocalRing, RingGrant, std::os::fd::OwnedFd), FabricError> {
        let label = PathBuf::from("memfd:mdfan-ring");
        let header = RingHeader::new(slot_count, 1)
            .map_err(|e| FabricError::BadRing { path: label.display().to_string(), detail: e.to_string() })?;
        let fd = crate::fdpass::memfd(c"mdfan-ring").map_err(io_err("memfd_create", &label))?;
        let file = File::from(fd);
        let len = segment_bytes(slot_count);
        reserve(&file, len, Path::new("/dev/shm (memfd)"), &label)?;
        // SAFETY: the file was just created by us, nobody else holds it, and it has exactly `len` bytes; its
        // contents change under the map only through the atomics and slots of the documented layout.
        let mut map =
            unsafe { MmapOptions::new().len(len).populate().map_mut(&file) }.map_err(io_err("mmap", &label))?;
        map[..64].copy_from_slice(bytemuck::bytes_of(&header));
        crate::fdpass::seal_size(&file).map_err(io_err("seal", &label))?;
        let ring = ShmLocalRing {
            seg: Segment::mapped(map, label, slot_count),
            cq_pos: 0,
            cq_shift: slot_count.trailing_zeros(),
            linked: false,
            idle_polls: 0,
            window: ReadWindow::default(),
        };
        Ok((ring, RingGrant::ShmFd { slot_count }, file.into()))
    }

    /// Removes the ring's file name; both mappings stay valid. Idempotent.
    pub fn unlink(&mut self) {
        if self.linked {
            self.linked = false;
            let _ = std::fs::remove_file(&self.seg.path);
        }
    }

    /// The ring file's path.
    pub fn path(&self) -> &Path {
        &self.seg.path
    }
}

impl Drop for ShmLocalRing {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// While the expected stamp is absent, the CQ is read once every this many polls (a power of two).
pub const CQ_POLL_INTERVAL: u32 = 1024;

impl ShmLocalRing {
    /// Completes the write of `expected_seq` if its slot's stamp shows it; it takes the next CQ position. A seq
    /// already released is never completed this way (its slot may hold a newer record by now).
    #[inline]
    fn complete_from_stamp(&mut self, expected_seq: u64) -> bool {
        if expected_seq <= self.window.released() {
            return false;
        }
        // SYNC POINT: Acquire pairs with the Release store of the seq word in `ShmRemoteRing::store_slot`.
        let stamp = self.seg.slot_stamp(slot_index(expected_seq, self.seg.slot_count)).load(Ordering::Acquire);
        if stamp != expected_seq {
            return false;
        }
        self.cq_pos += 1;
        self.window.complete_seq(expected_seq)
    }

    /// Reaps one CQ entry: its immediate.
    #[inline]
    fn reap_cq(&mut self) -> Option<u32> {
        loop {
            let index = self.cq_pos as u32; // masked in cq_entry
            let lap = ((self.cq_pos >> self.cq_shift) as u32).wrapping_add(1);
            // SYNC POINT: Acquire pairs with the Release store in `ShmRemoteRing::store_cq_entry`; once the entry
            // of this lap is seen, the 64 bytes the writer stored into the slot before it are visible too.
            let entry = self.seg.cq_entry(index).load(Ordering::Acquire);
            let entry_lap = (entry >> 32) as u32;
            if entry_lap == lap {
                self.cq_pos += 1;
                return Some(entry as u32);
            }
            if entry_lap != lap.wrapping_add(1) {
                return None;
            }
            // A lap ahead: the writer reused this position, so its record was released; step over it.
            self.cq_pos += 1;
        }
    }

    /// The completion of `seq`, with its slot when the window says it may be read.
    #[inline]
    fn completion(&self, imm_data: u32, seq: u64, readable: bool) -> Completion<'_> {
        let record = readable.then(|| {
            // SAFETY: the pointer is in bounds and 64-byte aligned (page-aligned segment, 64-byte slots). `seq` was
            // completed (its stamp or CQ entry seen with acquire ordering, so its bytes are visible) and is above
            // the released seq: a writer keeping the protocol does not touch this slot again until `seq` is
            // released, which needs `&mut self`, and the returned borrow of `self` ends before that.
            unsafe { &*self.seg.slot_ptr(slot_index(seq, self.seg.slot_count)) }
        });
        Completion::new(imm_data, seq, record)
    }
}

impl LocalRing for ShmLocalRing {
    fn slot_count(&self) -> u32 {
        self.seg.slot_count
    }

    #[inline]
    fn poll_cq(&mut self) -> Option<Completion<'_>> {
        let imm_data = self.reap_cq()?;
        let (seq, readable) = self.window.complete_imm(imm_data);
        Some(self.completion(imm_data, seq, readable))
    }

    /// Completes the write of `expected_seq` from its slot's stamp, or reaps the CQ. The writer stores a record's
    /// seq word last, with release ordering, after the other 56 bytes (see [`ShmRemoteRing::write_with_imm`]):
    /// once this side's acquire load sees `expected_seq` there, the whole record is visible, as it would be after
    /// its CQ entry. The CQ line is read only on every [`CQ_POLL_INTERVAL`]-th poll that finds the stamp absent
    /// (so a gap shows that much later). A reader that also spins on the CQ line pulls it back from the writer on
    /// every record: about 1.4x a cache-line hand-off against about 1.05x for the stamp alone (mdfan-bench, on
    /// the Xeon host). On the AMD EPYC hosts the stamp alone costs about 1.5x once the ring rotates through 256
    /// slots or more (1.0x to 1.1x over 64 or fewer), with or without the CQ entry: see `probe.shm.*` in mdfan-bench.
    #[inline]
    fn poll_cq_expecting(&mut self, expected_seq: u64) -> Option<Completion<'_>> {
        if self.complete_from_stamp(expected_seq) {
            return Some(self.completion(imm_from_seq(expected_seq), expected_seq, true));
        }
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.idle_polls & (CQ_POLL_INTERVAL - 1) != 0 {
            return None;
        }
        self.poll_cq()
    }

    #[inline]
    fn release(&mut self, consumed_seq: u64) {
        if let Some(seq) = self.window.release(consumed_seq) {
            // SYNC POINT: Release pairs with the Acquire load in `ShmRemoteRing::consumed_seq`: every read of the
            // released slots happens before the writer may reuse them.
            self.seg.consumed().store(seq, Ordering::Release);
        }
    }

    fn peer_state(&self) -> PeerState {
        // Acquire pairs with the Release store in `attach`/`close`.
        let word = self.seg.producer().load(Ordering::Acquire);
        match word as u32 {
            STATE_WAITING => PeerState::Waiting,
            STATE_ATTACHED => PeerState::Attached,
            _ => PeerState::Closed(CloseReason::from_u32((word >> 32) as u32).unwrap_or(CloseReason::FabricError)),
        }
    }
}

/// The publisher's handle on one subscriber's shared-memory ring (the sender side).
pub struct ShmRemoteRing {
    /// The mapping's registration with the SIGBUS handler ([`crate::sigbus`]): a subscriber that truncates its
    /// ring file fails its own session, not the publisher. Declared before `seg`: unregistered before unmapped.
    guard: Option<crate::sigbus::Guard>,
    seg: Segment,
    /// CQ entries written so far.
    cq_pos: u64,
    cq_shift: u32,
    closed: bool,
    /// The CPU has `PREFETCHW` ([`has_prefetchw`], read once at attach).
    prefetchw: bool,
}

impl ShmRemoteRing {
    /// Maps the ring a subscriber granted by name ([`RingGrant::Shm`]) for the local user `peer_uid` (the uid of
    /// the control connection's other end: `SO_PEERCRED`, or the owner of the loopback TCP socket). Only files
    /// named `mdfan-ring-*` directly under `allowed_dir` (a folder [`check_dir`] accepts) are taken, opened with
    /// `O_NOFOLLOW`, and only a regular file with one link, owned by `peer_uid`, whose size and header match the
    /// grant: a local user naming another's ring is refused naming both ([`FabricError::NotOwner`]).
    ///
    /// # Errors
    /// [`FabricError::Mismatch`] for a grant of another kind, [`FabricError::NotOwner`], [`FabricError::BadRing`]
    /// naming the field that does not match (and when `peer_uid` is unknown: a remote or unidentified peer),
    /// [`FabricError::Io`] when the file cannot be opened or mapped.
    pub fn attach(grant: &RingGrant, allowed_dir: &Path, peer_uid: Option<u32>) -> Result<ShmRemoteRing, FabricError> {
        let RingGrant::Shm { path, slot_count } = grant else {
            return Err(FabricError::Mismatch {
                offered: Provider::of_grant(grant),
                what: "ring",
                served: Provider::Shm,
            });
        };
        let bad = |detail: String| FabricError::BadRing { path: path.clone(), detail };
        let path_buf = PathBuf::from(path);
        let name_ok = path_buf.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(FILE_PREFIX));
        if path_buf.parent() != Some(allowed_dir) || !name_ok {
            return Err(bad(format!("path must be {}/{FILE_PREFIX}*", allowed_dir.display())));
        }
        let slot_count = check_slot_count(*slot_count as u64).map_err(|e| bad(e.to_string()))?;
        let Some(peer_uid) = peer_uid else {
            return Err(bad(
                "the publisher cannot tell which local user asks for it (a peer not on this host, or its socket not \
                 found): a shared-memory ring is attached only for a known local user"
                    .into(),
            ));
        };
        check_dir(allowed_dir)?;
        // O_NOFOLLOW: the name checked above must be the file itself, not a symlink to somewhere else;
        // O_NONBLOCK: a FIFO planted under the name cannot hold the open (it is refused below).
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path_buf)
            .map_err(|source| open_error(&path_buf, source))?;
        let meta = file.metadata().map_err(io_err("stat", &path_buf))?;
        if !meta.file_type().is_file() || meta.file_type().is_fifo() {
            return Err(bad("not a regular file".into()));
        }
        // A ring has exactly one name (its owner's) until the owner unlinks it after the accept: a second
        // link is someone trying to have the publisher write into another subscriber's ring.
        let links = std::os::unix::fs::MetadataExt::nlink(&meta);
        if links != 1 {
            return Err(bad(format!("has {links} links, expected 1")));
        }
        let owner = std::os::unix::fs::MetadataExt::uid(&meta);
        if owner != peer_uid {
            return Err(FabricError::NotOwner {
                path: path.clone(),
                owner: user_label(owner),
                peer: user_label(peer_uid),
            });
        }
        Self::map_checked(file, &meta, path_buf, slot_count)
    }

    /// Maps a ring passed as a file descriptor ([`RingGrant::ShmFd`], received with the subscribe frame over the
    /// publisher's Unix-domain socket, `SCM_RIGHTS`) for the local user `peer_uid` (`SO_PEERCRED`): a regular
    /// file owned by `peer_uid`, sealed against shrinking (`F_SEAL_SHRINK`: it can never be truncated under the
    /// mapping), whose size and header match the grant.
    ///
    /// # Errors
    /// As [`ShmRemoteRing::attach`]; [`FabricError::BadRing`] for a file that is not sealed.
    pub fn attach_fd(grant: &RingGrant, fd: std::os::fd::OwnedFd, peer_uid: u32) -> Result<ShmRemoteRing, FabricError> {
        let RingGrant::ShmFd { slot_count } = grant else {
            return Err(FabricError::Mismatch {
                offered: Provider::of_grant(grant),
                what: "ring",
                served: Provider::Shm,
            });
        };
        let label = PathBuf::from(format!("fd:{}", std::os::fd::AsRawFd::as_raw_fd(&fd)));
        let bad = |detail: String| FabricError::BadRing { path: label.display().to_string(), detail };
        let slot_count = check_slot_count(*slot_count as u64).map_err(|e| bad(e.to_string()))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(io_err("stat", &label))?;
        if !meta.file_type().is_file() {
            return Err(bad("not a regular file".into()));
        }
        let owner = std::os::unix::fs::MetadataExt::uid(&meta);
        if owner != peer_uid {
            return Err(FabricError::NotOwner {
                path: label.display().to_string(),
                owner: user_label(owner),
                peer: user_label(peer_uid),
            });
        }
        let seals = crate::fdpass::seals(&file).map_err(io_err("fcntl F_GET_SEALS", &label))?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad(
                "not sealed against shrinking (F_SEAL_SHRINK): it could be truncated under the mapping".into()
            ));
        }
        Self::map_checked(file, &meta, label, slot_count)
    }

    /// Maps an opened ring file whose owner was checked: size, then the mapping under the SIGBUS guard (before
    /// its first read: the header), then the header, then the one-time WAITING -> ATTACHED claim.
    fn map_checked(
        file: File,
        meta: &std::fs::Metadata,
        path_buf: PathBuf,
        slot_count: u32,
    ) -> Result<ShmRemoteRing, FabricError> {
        let bad = |detail: String| FabricError::BadRing { path: path_buf.display().to_string(), detail };
        let len = segment_bytes(slot_count);
        if meta.len() != len as u64 {
            return Err(bad(format!("size {} bytes, expected {len} for {slot_count} slots", meta.len())));
        }
        // SAFETY: the file had the exact size of the layout when checked; its contents change under the map only
        // through the atomics and slots of the documented layout (the owner is the subscriber process). If its
        // owner truncates it meanwhile, an access past the new end faults with SIGBUS, which the guard registered
        // right below (before any access, the header's included) contains.
        let map =
            unsafe { MmapOptions::new().len(len).populate().map_mut(&file) }.map_err(io_err("mmap", &path_buf))?;
        let seg = Segment::mapped(map, path_buf, slot_count);
        let guard = crate::sigbus::Guard::new(seg.base, seg.len);
        if guard.is_none() {
            tracing::warn!(path = %seg.path.display(), "shm: ring mapped without SIGBUS protection (table full or \
                no handler): a subscriber that truncates it would kill the publisher");
        }
        let mut header = [0u8; 64];
        for (k, chunk) in header.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&seg.word(8 * k).load(Ordering::Acquire).to_le_bytes());
        }
        if guard.as_ref().is_some_and(|g| g.faulted()) {
            return Err(FabricError::BadRing {
                path: seg.path.display().to_string(),
                detail: "truncated while being attached (SIGBUS)".into(),
            });
        }
        let header: RingHeader = bytemuck::pod_read_unaligned(&header);
        let shown = seg.path.display().to_string();
        let bad = |detail: String| FabricError::BadRing { path: shown.clone(), detail };
        header.validate().map_err(|e| bad(format!("header: {e}")))?;
        if header.slot_count != slot_count {
            return Err(bad(format!("header slot_count {} differs from the grant's {slot_count}", header.slot_count)));
        }
        let ring = ShmRemoteRing {
            guard,
            seg,
            cq_pos: 0,
            cq_shift: slot_count.trailing_zeros(),
            closed: false,
            prefetchw: has_prefetchw(),
        };
        // Only a fresh ring may be attached, and only once: WAITING -> ATTACHED, atomically (a second attach of
        // the same ring, by this or another publisher session, fails here). Release: the subscriber that sees
        // ATTACHED also sees nothing else yet (no writes happened).
        if let Err(word) = ring.seg.producer().compare_exchange(
            STATE_WAITING as u64,
            STATE_ATTACHED as u64,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            return Err(bad(format!("already attached (producer state word {word:#x})")));
        }
        Ok(ring)
    }
}

/// The error of opening a granted ring file: `EACCES` says what to do (the publisher runs as another user than
/// the ring's owner, and a ring is 0600: the Unix-domain socket passes the ring itself).
fn open_error(path: &Path, source: std::io::Error) -> FabricError {
    if source.kind() == std::io::ErrorKind::PermissionDenied {
        return FabricError::BadRing {
            path: path.display().to_string(),
            detail: format!(
                "open: {source}: the publisher runs as {} and the ring is its owner's alone (mode 0600); a \
                 subscriber running as another user connects to the publisher's Unix-domain socket \
                 (publisher.listen_unix; `--connect unix:PATH`), which passes the ring itself",
                user_label(current_euid())
            ),
        };
    }
    io_err("open", path)(source)
}

/// This process's effective uid.
pub fn current_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `uid N (name)`, the name from /etc/passwd when it has one (`uid N` otherwise), for messages about local users.
pub fn user_label(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|text| {
        text.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
        })
    });
    match name {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// Checks a folder that holds rings or counters files: it exists, is owned by root or by this process's user,
/// and nobody else may replace a file in it (not group- or world-writable, unless it has the sticky bit, as
/// `/dev/shm` and `/tmp` do: then only a file's owner may remove or rename it).
///
/// # Errors
/// [`FabricError::BadRing`] naming the folder and what is wrong.
pub fn check_dir(dir: &Path) -> Result<(), FabricError> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let bad = |detail: String| FabricError::BadRing { path: dir.display().to_string(), detail };
    let meta = std::fs::metadata(dir).map_err(io_err("stat", dir))?;
    if !meta.is_dir() {
        return Err(bad("not a directory".into()));
    }
    let (owner, mode) = (meta.uid(), meta.permissions().mode());
    if owner != 0 && owner != current_euid() {
        return Err(bad(format!(
            "folder owned by {}, not by root or {} (this process): its owner could replace any file in it",
            user_label(owner),
            user_label(current_euid())
        )));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(bad(format!(
            "folder mode {:04o}: writable by others without the sticky bit, so any local user could replace a file \
             in it (chmod +t, or a folder of mdfan's own)",
            mode & 0o7777
        )));
    }
    Ok(())
}

impl ShmRemoteRing {
    /// What broke the ring, if anything did: its file was truncated under the publisher's mapping (an access
    /// faulted with SIGBUS, and the pages were replaced with zeros: [`crate::sigbus`]).
    pub fn failure(&self) -> Option<&'static str> {
        self.guard.as_ref().is_some_and(|g| g.faulted()).then_some("ring file truncated under the mapping (SIGBUS)")
    }

    /// The first half of a write: the record into its slot. The caller checked (through `consumed_seq`) that the
    /// subscriber released the slot's previous record. Bytes 8..64 first, as one 8-byte and three 16-byte
    /// copies on the record's 16-byte boundaries (four store-buffer entries, not eight: a fan-out to many rings
    /// is bound by them; and each load lies inside one of the stores that just wrote the record on the
    /// caller's stack, so it is forwarded from them, where a load straddling two would wait for both), then the
    /// seq word (the slot's stamp) with release ordering: a reader that sees the new seq there sees the whole
    /// record (`ShmLocalRing::poll_cq_expecting`).
    #[inline]
    fn store_slot(&mut self, slot: u32, record: &BookUpdate) {
        let dst = self.seg.slot_ptr(slot) as *mut u8;
        let src = record as *const BookUpdate as *const u8;
        // SAFETY: `dst` is slot `slot`'s 64 bytes inside the segment (`slot_ptr` masks the index; the size was
        // checked at set-up), 64-byte aligned (page-aligned segment, 64-byte slots), and `src` a record of 64
        // bytes, 64-byte aligned (`BookUpdate` is `align(64)`), so every access below is in bounds and aligned
        // for its type; they cannot overlap (a record in this process's memory, a mapped ring). No one reads
        // bytes 8..64 of this slot now: the subscriber released its previous record (the caller checked) and
        // reads the slot again only after the Release store of its stamp below, which orders these bytes before
        // it. The stamp word itself is only ever accessed atomically.
        unsafe {
            (dst.add(8) as *mut u64).write((src.add(8) as *const u64).read());
            for off in [16, 32, 48] {
                (dst.add(off) as *mut u128).write((src.add(off) as *const u128).read());
            }
        }
        // SYNC POINT: Release publishes bytes 8..64 to the Acquire load of the stamp in `poll_cq_expecting`.
        self.seg.slot_stamp(slot).store(record.seq, Ordering::Release);
    }

    /// The second half: the completion.
    #[inline]
    fn store_cq_entry(&mut self, imm_data: u32) {
        let lap = ((self.cq_pos >> self.cq_shift) as u32).wrapping_add(1);
        // SYNC POINT: Release publishes the slot bytes written before to the reader's Acquire in `poll_cq`.
        // Relaxed would let the entry become visible before the record.
        self.seg.cq_entry(self.cq_pos as u32).store(((lap as u64) << 32) | imm_data as u64, Ordering::Release);
        self.cq_pos += 1;
    }
}

/// How many slots ahead of a write the writer fetches the slot's line ([`prefetch_write`]).
const PREFETCH_SLOTS_AHEAD: u32 = 4;

/// How many CQ lines (8 entries each) ahead of a write the writer fetches, once per line.
const PREFETCH_CQ_LINES_AHEAD: u64 = 2;

/// Whether this CPU has `PREFETCHW` (CPUID 8000_0001h ECX bit 8, `PRFCHW`; AMD since K8, Intel since Broadwell).
fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            // SAFETY: CPUID exists on every x86_64 CPU; leaf 8000_0001h exists on every x86_64 CPU (long mode is
            // reported there). (Safe to call on newer toolchains; the block keeps older ones building.)
            #[allow(unused_unsafe)]
            let r = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
            r.ecx & (1 << 8) != 0
        }
        #[cfg(any(not(target_arch = "x86_64"), miri))]
        {
            false
        }
    })
}

/// Asks for the cache line of `p` in a writable state (`PREFETCHW` where `prefetchw` says the CPU has it
/// ([`has_prefetchw`]), else `PREFETCHT0`): a
/// hint, it never faults (a prefetch of any address is harmless) and costs an instruction.
#[inline]
fn prefetch_write(p: *const u8, prefetchw: bool) {
    // (Miri runs no inline assembly or prefetch intrinsics: a hint, so nothing is lost there.)
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        if prefetchw {
            // SAFETY: PREFETCHW is a hint: it reads no memory architecturally and never faults; the CPU has it
            // (checked above).
            unsafe {
                std::arch::asm!("prefetchw byte ptr [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
            };
        } else {
            // SAFETY: as above; SSE is part of x86_64.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8) };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = (p, prefetchw);
}

impl RemoteRing for ShmRemoteRing {
    fn slot_count(&self) -> u32 {
        self.seg.slot_count
    }

    #[inline]
    fn consumed_seq(&mut self) -> u64 {
        // SYNC POINT: Acquire pairs with the subscriber's Release in `ShmLocalRing::release`: its reads of the
        // slots up to this seq are finished before we overwrite them.
        self.seg.consumed().load(Ordering::Acquire)
    }

    #[inline]
    fn write_with_imm(&mut self, slot: u32, record: &BookUpdate, imm_data: u32) -> Result<(), PostError> {
        if slot >= self.seg.slot_count || self.closed {
            return Err(PostError::SlotOutOfRange { slot, slot_count: self.seg.slot_count });
        }
        self.store_slot(slot, record);
        self.store_cq_entry(imm_data);
        // The lines of later writes are fetched now, so that their stores hit the cache: a fan-out to N rings
        // otherwise waits on N line fetches per record, with its store buffer full of stores behind them. Far
        // enough ahead not to take the line a subscriber that keeps up is polling (the next seq's slot).
        prefetch_write(self.seg.slot_ptr(slot.wrapping_add(PREFETCH_SLOTS_AHEAD)) as *const u8, self.prefetchw);
        if self.cq_pos.is_multiple_of(8) {
            prefetch_write(
                self.seg.cq_entry((self.cq_pos + 8 * PREFETCH_CQ_LINES_AHEAD) as u32) as *const _ as *const u8,
                self.prefetchw,
            );
        }
        Ok(())
    }

    /// Nothing to ring on shared memory; fails once the ring's file was truncated under the mapping
    /// ([`ShmRemoteRing::failure`]).
    #[inline]
    fn flush(&mut self) -> Result<(), PostError> {
        match &self.guard {
            Some(g) if g.faulted() => Err(PostError::Transport { code: libc::SIGBUS }),
            _ => Ok(()),
        }
    }

    fn close(&mut self, reason: CloseReason) {
        self.closed = true;
        // Release: everything written before the close is visible to a reader that sees it.
        self.seg.producer().store(STATE_CLOSED as u64 | ((reason as u64) << 32), Ordering::Release);
    }
}

/// A segment on the heap, shared by both ends in one process: the protocol without files or mappings, for the
/// tests and for Miri (which cannot map files).
#[cfg(test)]
mod heap {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::*;

    /// One zeroed, page-aligned allocation of [`segment_bytes`].
    pub(super) struct HeapSegment {
        ptr: *mut u8,
        layout: Layout,
    }

    // SAFETY: the allocation is only reached through `Segment`s, whose shared words are atomics (see `Segment`).
    unsafe impl Send for HeapSegment {}
    // SAFETY: as above; `HeapSegment` itself exposes nothing but its Drop.
    unsafe impl Sync for HeapSegment {}

    impl Drop for HeapSegment {
        fn drop(&mut self) {
            // SAFETY: allocated in `pair` with this layout, freed once (the last Arc).
            unsafe { dealloc(self.ptr, self.layout) }
        }
    }

    /// A connected ring pair of `slot_count` slots on one heap segment, as `create` + `attach` leave it.
    pub(super) fn pair(slot_count: u32) -> (ShmLocalRing, ShmRemoteRing) {
        let header = RingHeader::new(slot_count, 1).expect("a valid slot count");
        let len = segment_bytes(slot_count);
        let layout = Layout::from_size_align(len, PAGE_BYTES).expect("a segment layout");
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {len}-byte segment");
        // SAFETY: the allocation is `len >= 64` bytes, nobody else holds it yet.
        unsafe { std::ptr::copy_nonoverlapping(bytemuck::bytes_of(&header).as_ptr(), ptr, 64) };
        let memory = Arc::new(HeapSegment { ptr, layout });
        let seg =
            || Segment { base: ptr, len, memory: Memory::Heap(Arc::clone(&memory)), path: PathBuf::new(), slot_count };
        let local = ShmLocalRing {
            seg: seg(),
            cq_pos: 0,
            cq_shift: slot_count.trailing_zeros(),
            linked: false,
            idle_polls: 0,
            window: ReadWindow::default(),
        };
        let remote = ShmRemoteRing {
            guard: None,
            seg: seg(),
            cq_pos: 0,
            cq_shift: slot_count.trailing_zeros(),
            closed: false,
            prefetchw: super::has_prefetchw(),
        };
        remote.seg.producer().store(STATE_ATTACHED as u64, Ordering::Release);
        (local, remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::ring::{imm_from_seq, seq_from_imm, slot_index};
    use mdfan_wire::Kind;

    fn rec(seq: u64) -> BookUpdate {
        BookUpdate { seq, order_id: seq * 10, ..BookUpdate::control(Kind::Add) }
    }

    /// A connected pair through a ring file in /dev/shm, as in production; on the heap under Miri (which cannot
    /// map files).
    fn pair(slots: u32) -> (ShmLocalRing, ShmRemoteRing) {
        if cfg!(miri) {
            return super::heap::pair(slots);
        }
        let dir = Path::new(DEFAULT_DIR);
        let (local, grant) = ShmLocalRing::create(dir, slots).unwrap();
        let remote = ShmRemoteRing::attach(&grant, dir, Some(current_euid())).unwrap();
        (local, remote)
    }

    /// A ring's plain name (pid, counter) is predictable, so another user may take it ahead in a shared folder:
    /// the subscriber then takes a name with 64 random bits (a breaker's planted names made every subscriber of
    /// a TCP publisher with shm rings fail with `File exists`), and the planted files are left alone.
    #[test]
    fn names_taken_ahead_are_stepped_over_with_a_random_name() {
        if cfg!(miri) {
            return; // no files under Miri
        }
        let dir = std::env::temp_dir().join(format!("mdfan-ring-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (pid, next) = (std::process::id(), RING_COUNTER.load(Ordering::Relaxed));
        // every plain name this process will try next (other tests of this process take some meanwhile)
        for n in next..next + 4096 {
            std::fs::write(dir.join(format!("{FILE_PREFIX}{pid}-{n}")), b"planted").unwrap();
        }
        let (local, grant) = ShmLocalRing::create(&dir, 64).unwrap();
        let RingGrant::Shm { path, .. } = &grant else { panic!("{grant:?}") };
        let name = Path::new(path).file_name().unwrap().to_str().unwrap().to_owned();
        let parts: Vec<&str> = name.strip_prefix(FILE_PREFIX).unwrap().split('-').collect();
        assert!(parts.len() == 3 && parts[2].len() == 16, "a random name: {name}");
        assert_eq!(std::fs::read(dir.join(format!("{FILE_PREFIX}{pid}-{}", parts[1]))).unwrap(), b"planted");
        drop(local);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_is_seen_only_through_its_completion_and_wraps_the_ring() {
        let (mut local, mut remote) = pair(64);
        assert_eq!(local.peer_state(), PeerState::Attached);
        assert!(local.poll_cq().is_none());
        let mut last = 0u64;
        // three laps of the ring and the CQ
        for seq in 1..=200u64 {
            assert!(mdfan_wire::ring::has_space(seq, remote.consumed_seq(), 64));
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
            let c = local.poll_cq().expect("one completion per write");
            let got = seq_from_imm(c.imm_data, last + 1);
            assert_eq!((got, c.seq()), (seq, seq));
            assert_eq!(c.record(), Some(&rec(seq)));
            assert!(local.poll_cq().is_none());
            local.release(got);
            last = got;
        }
        remote.close(CloseReason::EndOfStream);
        assert_eq!(local.peer_state(), PeerState::Closed(CloseReason::EndOfStream));
    }

    #[test]
    fn the_writer_sees_a_full_ring_through_the_consumed_seq() {
        let (mut local, mut remote) = pair(64);
        for seq in 1..=64u64 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
        }
        assert!(!mdfan_wire::ring::has_space(65, remote.consumed_seq(), 64));
        for _ in 0..10 {
            local.poll_cq().unwrap();
        }
        local.release(10);
        assert_eq!(remote.consumed_seq(), 10);
        assert!(mdfan_wire::ring::has_space(74, remote.consumed_seq(), 64));
        assert!(!mdfan_wire::ring::has_space(75, remote.consumed_seq(), 64));
    }

    /// Polls with `expected` until a completion, at most two CQ poll intervals.
    fn reap(local: &mut ShmLocalRing, expected: u64) -> Option<Reaped> {
        (0..2 * CQ_POLL_INTERVAL).find_map(|_| local.poll_cq_expecting(expected).map(Reaped::from))
    }

    /// A completion, copied out of the ring.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Reaped {
        imm_data: u32,
        seq: u64,
        record: Option<BookUpdate>,
    }

    impl From<Completion<'_>> for Reaped {
        fn from(c: Completion<'_>) -> Reaped {
            Reaped { imm_data: c.imm_data, seq: c.seq(), record: c.record().copied() }
        }
    }

    /// What a completion of `seq` carries when its slot holds `rec(seq)`.
    fn got(seq: u64) -> Option<Reaped> {
        Some(Reaped { imm_data: imm_from_seq(seq), seq, record: Some(rec(seq)) })
    }

    #[test]
    fn a_stamped_slot_completes_before_its_cq_entry_which_is_never_read() {
        let (mut local, mut remote) = pair(64);
        // The writer stored record 1 but not yet its CQ entry: the CQ alone shows nothing...
        remote.store_slot(slot_index(1, 64), &rec(1));
        assert!(local.poll_cq().is_none());
        // ...the expected slot's stamp completes it (and only for that seq).
        assert!(reap(&mut local, 2).is_none());
        assert_eq!(local.poll_cq_expecting(1).map(Reaped::from), got(1));
        local.release(1);
        assert_eq!(remote.consumed_seq(), 1);
        // The entry arrives late; it is not delivered again, and the next write completes in order.
        remote.store_cq_entry(imm_from_seq(1));
        assert!(reap(&mut local, 2).is_none());
        remote.write_with_imm(slot_index(2, 64), &rec(2), imm_from_seq(2)).unwrap();
        assert_eq!(local.poll_cq_expecting(2).map(|c| c.imm_data), Some(2));
        assert!(reap(&mut local, 3).is_none());
        assert_eq!(local.cq_pos, 2);
    }

    #[test]
    fn a_gap_comes_through_the_cq_after_at_most_one_poll_interval() {
        let (mut local, mut remote) = pair(64);
        for seq in 1..=3 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
            assert_eq!(local.poll_cq_expecting(seq).map(|c| c.imm_data), Some(seq as u32));
        }
        local.release(3);
        // The writer skips 4 and 5 (a gap): slot 4 never holds seq 4, so only the CQ names 6.
        remote.write_with_imm(slot_index(6, 64), &rec(6), imm_from_seq(6)).unwrap();
        let polls = (1..=CQ_POLL_INTERVAL).find(|_| local.poll_cq_expecting(4).is_some());
        assert!(polls.is_some(), "no completion within one interval");
        assert_eq!(local.cq_pos, 4);
        // Back on the stamp path for 7.
        remote.write_with_imm(slot_index(7, 64), &rec(7), imm_from_seq(7)).unwrap();
        assert_eq!(local.poll_cq_expecting(7).map(|c| c.imm_data), Some(7));
    }

    #[test]
    fn a_writer_breaking_seq_order_costs_a_stale_completion_never_a_lost_or_stuck_one() {
        let (mut local, mut remote) = pair(64);
        remote.write_with_imm(slot_index(1, 64), &rec(1), imm_from_seq(1)).unwrap();
        assert_eq!(local.poll_cq_expecting(1).map(|c| c.imm_data), Some(1));
        local.release(1);
        // A rewrite of seq 1 (a broken writer), then 2: the stamp completes 2 at the rewrite's CQ position...
        remote.write_with_imm(slot_index(1, 64), &rec(1), imm_from_seq(1)).unwrap();
        remote.write_with_imm(slot_index(2, 64), &rec(2), imm_from_seq(2)).unwrap();
        assert_eq!(local.poll_cq_expecting(2).map(|c| c.imm_data), Some(2));
        local.release(2);
        // ...so the CQ, read when idle, hands over 2's entry again: seq 2 < expected 3, a stale completion the
        // receiver reports, after which reader and writer agree again.
        // Its slot is not handed out: seq 2 was released, so the writer may be reusing it.
        assert_eq!(reap(&mut local, 3), Some(Reaped { imm_data: 2, seq: 2, record: None }));
        // A whole ring more arrives in order, from stamps and (when idle) the CQ.
        for seq in 3..=66u64 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
        }
        for seq in 3..=66u64 {
            let c = reap(&mut local, seq).expect("every record arrives");
            assert_eq!(seq_from_imm(c.imm_data, seq), seq);
            local.release(seq);
        }
        assert!(reap(&mut local, 67).is_none());
    }

    #[test]
    fn an_entry_a_lap_ahead_of_the_reader_is_stepped_over() {
        let (mut local, mut remote) = pair(64);
        // Positions 0 and 1 already hold the next lap's entries (as after a writer broke the seq order and ran
        // a ring ahead of a reader that had released everything).
        for seq in 1..=66u64 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
        }
        assert_eq!(local.poll_cq().map(|c| c.imm_data), Some(3), "positions 0 and 1 were a lap ahead");
    }

    #[test]
    fn a_reader_that_never_idles_never_reads_the_cq_and_stays_in_step() {
        let (mut local, mut remote) = pair(64);
        for seq in 1..=1000u64 {
            assert!(mdfan_wire::ring::has_space(seq, remote.consumed_seq(), 64), "seq {seq}");
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
            let c = local.poll_cq_expecting(seq).expect("the record is there");
            assert_eq!(seq_from_imm(c.imm_data, seq), seq);
            local.release(seq);
        }
        assert_eq!((local.cq_pos, local.idle_polls), (1000, 0));
        assert!(local.poll_cq().is_none(), "every entry's position was taken by its stamp completion");
    }

    #[test]
    #[cfg_attr(miri, ignore = "files and mappings")]
    fn attach_refuses_paths_outside_the_dir_wrong_sizes_and_bad_headers() {
        let dir = Path::new(DEFAULT_DIR);
        let me = Some(current_euid());
        let outside = RingGrant::Shm { path: "/etc/passwd".into(), slot_count: 64 };
        let e = ShmRemoteRing::attach(&outside, dir, me).err().unwrap().to_string();
        assert!(e.contains("/etc/passwd") && e.contains("path must be"), "{e}");
        let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
        let RingGrant::Shm { path, .. } = &grant else { unreachable!() };
        let wrong = RingGrant::Shm { path: path.clone(), slot_count: 128 };
        let e = ShmRemoteRing::attach(&wrong, dir, me).err().unwrap().to_string();
        assert!(e.contains("size"), "{e}");
        // a file of the right size with a zeroed header
        let fake = dir.join(format!("{FILE_PREFIX}test-{}", std::process::id()));
        std::fs::write(&fake, vec![0u8; segment_bytes(64)]).unwrap();
        let g = RingGrant::Shm { path: fake.display().to_string(), slot_count: 64 };
        let e = ShmRemoteRing::attach(&g, dir, me).err().unwrap().to_string();
        std::fs::remove_file(&fake).unwrap();
        assert!(e.contains("magic"), "{e}");
        // a second attach of an attached ring, and a hard link to it, are refused
        let _first = ShmRemoteRing::attach(&grant, dir, me).unwrap();
        let e = ShmRemoteRing::attach(&grant, dir, me).err().unwrap().to_string();
        assert!(e.contains("already attached"), "{e}");
        let hard = dir.join(format!("{FILE_PREFIX}hard-{}", std::process::id()));
        std::fs::hard_link(path, &hard).unwrap();
        let g = RingGrant::Shm { path: hard.display().to_string(), slot_count: 64 };
        let e = ShmRemoteRing::attach(&g, dir, me).err().unwrap().to_string();
        std::fs::remove_file(&hard).unwrap();
        assert!(e.contains("has 2 links"), "{e}");
        // a symlink with an accepted name, pointing at a valid ring, is refused
        let link = dir.join(format!("{FILE_PREFIX}link-{}", std::process::id()));
        std::os::unix::fs::symlink(path, &link).unwrap();
        let g = RingGrant::Shm { path: link.display().to_string(), slot_count: 64 };
        let e = ShmRemoteRing::attach(&g, dir, me).err().unwrap().to_string();
        std::fs::remove_file(&link).unwrap();
        assert!(e.starts_with("open ") && e.contains("link"), "{e}");
        drop(local);
        assert!(!Path::new(path).exists(), "dropping the local ring unlinks its file");
    }

    /// A subscriber that truncates its ring file under the publisher's mapping: the publisher's next write faults
    /// with SIGBUS, which the guard contains (without it the test process dies): the write lands on zero pages,
    /// and the ring fails at its flush, naming the cause.
    #[test]
    #[cfg_attr(miri, ignore = "files, mappings and signals")]
    fn a_ring_file_truncated_under_the_mapping_fails_the_ring_not_the_process() {
        let dir = Path::new(DEFAULT_DIR);
        let me = Some(current_euid());
        let (local, grant) = ShmLocalRing::create(dir, 64).unwrap();
        let RingGrant::Shm { path, .. } = &grant else { unreachable!() };
        let mut remote = ShmRemoteRing::attach(&grant, dir, me).unwrap();
        let record = BookUpdate { seq: 1, ..BookUpdate::control(mdfan_wire::Kind::Heartbeat) };
        remote.write_with_imm(0, &record, 1).unwrap();
        assert!(remote.flush().is_ok() && remote.failure().is_none());
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(0).unwrap();
        let record = BookUpdate { seq: 2, ..record };
        remote.write_with_imm(1, &record, 2).unwrap(); // faults, is contained, lands on zero pages
        assert_eq!(remote.flush(), Err(PostError::Transport { code: libc::SIGBUS }));
        assert_eq!(remote.failure(), Some("ring file truncated under the mapping (SIGBUS)"));
        assert_eq!(remote.consumed_seq(), 0, "the range now holds zero pages");
        remote.write_with_imm(2, &BookUpdate { seq: 3, ..record }, 3).unwrap(); // and stays writable
        drop(remote);
        drop(local);
    }

    #[test]
    fn a_stale_stamp_from_the_previous_lap_never_completes_a_write() {
        let (mut local, mut remote) = pair(64);
        for seq in 1..=64u64 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
            assert_eq!(reap(&mut local, seq).map(|r| r.imm_data), Some(seq as u32));
            local.release(seq);
        }
        // Slot 1 holds seq 1 (released); 65 is due there. Its words 1..8 are being written, its stamp not yet.
        let mut half = rec(65);
        half.seq = 1;
        remote.store_slot(slot_index(65, 64), &half);
        assert!(reap(&mut local, 65).is_none(), "seq 1's stamp (and 65's words) do not complete 65");
        remote.store_slot(slot_index(65, 64), &rec(65));
        assert_eq!(local.poll_cq_expecting(65).map(Reaped::from), got(65));
    }

    #[test]
    fn positions_lapped_by_the_writer_then_a_gap_right_after_them_report_the_gap_exactly() {
        let (mut local, mut remote) = pair(64);
        // Eight records from their stamps, released.
        for seq in 1..=8u64 {
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
            assert_eq!(local.poll_cq_expecting(seq).map(|c| c.imm_data), Some(seq as u32));
            local.release(seq);
        }
        // The writer skips 9 and fills the ring with 10..=72: CQ positions 8..=70, the last seven of which lap the
        // entries of 1..=7 (positions the stamp completions already took).
        for seq in 10..=72u64 {
            assert!(mdfan_wire::ring::has_space(seq, remote.consumed_seq(), 64));
            remote.write_with_imm(slot_index(seq, 64), &rec(seq), imm_from_seq(seq)).unwrap();
        }
        assert!(!mdfan_wire::ring::has_space(73, remote.consumed_seq(), 64));
        // 9's slot never held 9; the CQ names 10 next: the gap.
        assert_eq!(reap(&mut local, 9), got(10));
        let mut expected = 11;
        while expected <= 72 {
            assert_eq!(reap(&mut local, expected), got(expected), "every record after the gap");
            local.release(expected);
            expected += 1;
        }
        assert!(reap(&mut local, 73).is_none());
    }

    /// One step of a model of the protocol at the granularity of the writer's two stores (the slot with its
    /// stamp, then the CQ entry), interleaved at random with the reader's polls.
    #[derive(Debug, Clone)]
    enum Step {
        /// The writer takes this many steps: finishing a write (its CQ entry), or starting the next one (its slot)
        /// when the ring has space and skipping that seq (policy resync) when not.
        Write(usize),
        /// The reader polls up to this many completions (stopping at the first empty poll), then releases.
        Poll(usize),
        /// The reader polls one CQ poll interval's worth of times.
        Idle,
    }

    struct Model {
        local: ShmLocalRing,
        remote: ShmRemoteRing,
        slots: u32,
        /// The writer's next seq, the last seq it wrote, and the seq whose slot is stored but not its CQ entry.
        next_seq: u64,
        last_written: u64,
        pending: Option<u64>,
        written: Vec<u64>,
        skipped: Vec<u64>,
        /// The reader's next expected seq, what it delivered, and the gaps it saw.
        expected: u64,
        delivered: Vec<u64>,
        gaps: Vec<(u64, u64)>,
    }

    impl Model {
        fn new(slots: u32) -> Model {
            let (local, remote) = pair(slots);
            Model {
                local,
                remote,
                slots,
                next_seq: 1,
                last_written: 0,
                pending: None,
                written: Vec::new(),
                skipped: Vec::new(),
                expected: 1,
                delivered: Vec::new(),
                gaps: Vec::new(),
            }
        }

        fn writer_step(&mut self) {
            if let Some(seq) = self.pending.take() {
                self.remote.store_cq_entry(imm_from_seq(seq));
                return;
            }
            let consumed = self.remote.consumed_seq();
            // `Session::has_space`: the publisher's rule.
            let space = mdfan_wire::ring::slot_is_free(self.next_seq, consumed, self.last_written, self.slots);
            let seq = self.next_seq;
            self.next_seq += 1;
            if space {
                self.remote.store_slot(slot_index(seq, self.slots), &rec(seq));
                self.pending = Some(seq);
                self.last_written = seq;
                self.written.push(seq);
            } else {
                self.skipped.push(seq);
            }
        }

        /// Polls up to `max` completions, as `Receiver::poll` does. `Err` says what went wrong.
        fn poll(&mut self, max: usize) -> Result<usize, String> {
            let mut n = 0;
            while n < max {
                let Some(c) = self.local.poll_cq_expecting(self.expected) else { break };
                n += 1;
                let seq = seq_from_imm(c.imm_data, self.expected);
                if seq < self.expected || c.seq() != seq {
                    return Err(format!(
                        "stale completion {seq} (ring says {}) while {} was due",
                        c.seq(),
                        self.expected
                    ));
                }
                let Some(&r) = c.record() else { return Err(format!("completion {seq} hands out no slot")) };
                if r != rec(seq) {
                    return Err(format!("completion {seq} found slot {r:?}"));
                }
                if seq != self.expected {
                    self.gaps.push((self.expected, seq));
                }
                self.delivered.push(seq);
                self.expected = seq + 1;
            }
            if n > 0 {
                self.local.release(self.expected - 1);
            }
            Ok(n)
        }

        fn run(&mut self, steps: &[Step]) -> Result<(), String> {
            for step in steps {
                match *step {
                    Step::Write(k) => (0..k).for_each(|_| self.writer_step()),
                    Step::Poll(max) => {
                        self.poll(max)?;
                    }
                    Step::Idle => {
                        for _ in 0..CQ_POLL_INTERVAL {
                            self.poll(usize::MAX)?;
                        }
                    }
                }
            }
            // The writer finishes its last write; the reader drains over two CQ poll intervals.
            if self.pending.is_some() {
                self.writer_step();
            }
            let mut empty = 0;
            while empty < 2 * CQ_POLL_INTERVAL {
                empty = if self.poll(usize::MAX)? > 0 { 0 } else { empty + 1 };
            }
            if self.delivered != self.written {
                return Err(format!("delivered {:?}\nwritten {:?}", self.delivered, self.written));
            }
            let mut in_gaps: Vec<u64> = self.gaps.iter().flat_map(|&(e, g)| e..g).collect();
            in_gaps.extend(self.expected..self.next_seq);
            if in_gaps != self.skipped {
                return Err(format!(
                    "gaps {:?} (and {}.. trailing), skipped {:?}",
                    self.gaps, self.expected, self.skipped
                ));
            }
            Ok(())
        }
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        prop::collection::vec(
            prop_oneof![
                4 => (1usize..160).prop_map(Step::Write),
                4 => (1usize..80).prop_map(Step::Poll),
                1 => Just(Step::Idle),
            ],
            1..80,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        #[test]
        #[cfg_attr(miri, ignore = "256 cases: too slow under Miri")]
        fn split_writes_interleaved_with_polls_deliver_each_record_once_in_order_and_report_each_skip(
            steps in steps()
        ) {
            let mut m = Model::new(64);
            if let Err(e) = m.run(&steps) {
                proptest::prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "16,000 steps: too slow under Miri")]
    fn split_writes_one_step_apart_from_each_poll_over_many_laps() {
        // The tightest interleaving: every write's slot, then a poll, then its CQ entry, then a poll; with a skip
        // run every few laps.
        let mut m = Model::new(64);
        let mut steps = Vec::new();
        for i in 0..4000 {
            steps.push(Step::Write(1));
            steps.push(Step::Poll(1 + i % 3));
            if i % 500 == 499 {
                steps.push(Step::Write(200)); // fills the ring and skips
                steps.push(Step::Idle);
            }
        }
        m.run(&steps).unwrap();
        assert!(!m.skipped.is_empty() && !m.gaps.is_empty());
    }

    /// Writer and reader on two threads, as publisher and subscriber are: every record arrives whole, in order,
    /// through both completion paths (the stamp, and the CQ when the reader idles), over several laps. Under Miri
    /// this is the data-race check of the slot hand-off: the writer's relaxed word stores and release stamp / CQ
    /// entry against the reader's acquire loads and plain reads of the slot, and the consumed seq back.
    #[test]
    fn a_writer_thread_and_a_reader_thread_hand_over_every_record_whole() {
        const SLOTS: u32 = 64;
        let total: u64 = if cfg!(miri) { 200 } else { 20_000 };
        let (mut local, mut remote) = pair(SLOTS);
        let writer = std::thread::spawn(move || {
            let mut seq = 1;
            while seq <= total {
                if mdfan_wire::ring::has_space(seq, remote.consumed_seq(), SLOTS) {
                    remote.write_with_imm(slot_index(seq, SLOTS), &rec(seq), imm_from_seq(seq)).unwrap();
                    seq += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            remote.close(CloseReason::EndOfStream);
        });
        let (mut expected, mut from_cq) = (1u64, 0u64);
        while expected <= total {
            // every 7th record is looked for on the CQ only, as a reader after a gap does
            let polled = if expected % 7 == 0 { local.poll_cq() } else { local.poll_cq_expecting(expected) };
            let Some(c) = polled else {
                std::thread::yield_now();
                continue;
            };
            assert_eq!((c.seq(), c.record()), (expected, Some(&rec(expected))), "seq {expected}");
            from_cq += u64::from(expected % 7 == 0);
            local.release(expected);
            expected += 1;
        }
        writer.join().unwrap();
        assert!(local.poll_cq().is_none(), "one completion per record");
        assert_eq!(local.peer_state(), PeerState::Closed(CloseReason::EndOfStream));
        assert_eq!(from_cq, total / 7);
    }
}
