//! The journal: a bounded, pre-allocated ring of normalised [`BookUpdate`] records between the feed handler and
//! its readers.
//!
//! One producer, the feed handler ([`crate::feeds::FeedAgent`], thread `mdfan-feed`), decodes the feed as it goes
//! and appends each record at the next position (0, 1, 2, ...); position `p` lives in slot `p mod records`.
//! Readers follow it by position, each registered when the journal is made ([`ReaderSpec`], [`ReaderId`]) with its
//! own cursor (the positions it is done with) and a declaration: whether it may be lapped. The publisher's are
//! the hot loop ([`HOT_LOOP`]: the live stream and late joiners' catch-up) and the conductor ([`CONDUCTOR`]: it
//! keeps the publisher's [`Books`](mdfan_wire::Books) current from it, for snapshots), neither of which may be
//! lapped; a reader that may be (one that must never slow the feed; the publisher registers none, and
//! `mdfan-capture` records from a subscriber session) is not waited for, and finds what it missed with
//! [`Journal::oldest`]. The producer never overwrites a position a reader that may not be lapped still
//! needs: it waits while `published - min(cursors) == records`. So memory is `records` x 128 B whatever the
//! feed's length, and a feed longer than the journal keeps running. The hot loop's cursor is held
//! back to the lowest position a session catching up still has to send (a late joiner after its snapshot), so the
//! file feed waits for it rather than overwriting what it needs; while it waits, the live stream waits too, for at
//! most the stall timeout of a session that stops reading. (Without that floor a snapshot that takes longer to
//! deliver than the journal takes to wrap would be followed by another, forever, on a slow fabric.) Only a
//! session whose position was overwritten before it reached the hot loop finds it gone ([`Journal::read`]
//! returns `None`): it then gets a fresh snapshot from the conductor's books.
//!
//! Each slot is a seqlock made of atomics (the crate forbids `unsafe`): the producer stores 0 in the slot's
//! stamp, a Release fence, the record's eight words (Relaxed), then the stamp `p + 1` (Release), then
//! `published = p + 1` (Release). A reader loads the stamp (Acquire, pairs with that store: the words are
//! visible), the words, an Acquire fence, and the stamp again: the record is whole only if both stamps are
//! `p + 1` (a producer overwriting the slot meanwhile changed the stamp first). The memory is allocated and
//! written once at start (pre-faulted); nothing here allocates, locks or makes a syscall after that.

use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use mdfan_wire::BookUpdate;

/// Records a journal holds by default: 131,072 (2^17, 16 MiB), more than the bundled capture's 68,792.
pub const DEFAULT_RECORDS: u64 = 1 << 17;
/// Smallest journal, in records.
pub const MIN_RECORDS: u64 = 1 << 10;
/// Largest journal, in records (2^28: 32 GiB).
pub const MAX_RECORDS: u64 = 1 << 28;
/// Whether the feed is still being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedState {
    /// More records may come.
    Running,
    /// The feed ended normally: every record is published.
    Ended,
    /// The feed stopped on an error ([`Journal::error`]): the records before it are published.
    Failed,
}

/// The journal's memory (`journal.records` x 128 B) could not be allocated on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal.records = {records}: cannot allocate the journal's {bytes} bytes ({records} records x 128 B) on this host; lower [journal] records")]
pub struct JournalAllocError {
    /// The records asked for (`journal.records`).
    pub records: u64,
    /// The bytes they need.
    pub bytes: u128,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 128, "JournalAllocError's text says 128 B a record");

/// One slot: the seqlock stamp (position + 1 of the record in it, 0 while being written) and the record's words.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    stamp: AtomicU64,
    words: [AtomicU64; 8],
}

/// A value on a cache-line pair of its own (128 bytes: adjacent-line prefetchers move lines in pairs), so that
/// the writer of one position counter does not take the line of another from its readers: the feed handler
/// stores `published` per record, each reader its cursor (the hot loop per record).
#[repr(align(128))]
struct Padded<T>(T);

/// The journal. See the module docs.
pub struct Journal {
    slots: Box<[Slot]>,
    mask: u64,
    /// Records appended (the next position), stored with Release after the slot's stamp.
    published: Padded<AtomicU64>,
    /// Each reader's cursor: the positions it is done with (it reads from there on), stored with Release by it.
    cursors: Box<[Padded<AtomicU64>]>,
    /// Each reader's declaration, in registration order.
    readers: Box<[ReaderSpec]>,
    /// [`FeedState`] as a byte, stored with Release after the last `published`.
    state: AtomicU8,
    /// Why the feed failed (read by the conductor, off the hot path).
    error: Mutex<Option<String>>,
}

/// A reader of the journal, as it is registered ([`Journal::with_readers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderSpec {
    /// Its name, for logs and reports.
    pub name: &'static str,
    /// Whether the producer may overwrite positions it has not read: a reader that must never slow the feed
    /// (a recorder) may be lapped, and learns what it missed from [`Journal::oldest`]; one that may not (the hot
    /// loop, the conductor) makes the producer wait.
    pub may_be_lapped: bool,
}

/// A registered reader: its index in the registration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderId(pub usize);

/// The hot loop's cursor ([`Journal::new`] registers it first).
pub const HOT_LOOP: ReaderId = ReaderId(0);
/// The conductor's cursor ([`Journal::new`] registers it second).
pub const CONDUCTOR: ReaderId = ReaderId(1);

/// The publisher's readers: the hot loop, then the conductor; neither may be lapped. The conductor hands a late
/// joiner's position over to the hot loop (it lets go of it once the hot loop's cursor holds it,
/// `SessionCounters::adopted`), and the producer loads the cursors from the last registered to the first, so a
/// conductor cursor that no longer holds a position is followed by a hot-loop cursor that does.
pub const PUBLISHER_READERS: [ReaderSpec; 2] =
    [ReaderSpec { name: "hot_loop", may_be_lapped: false }, ReaderSpec { name: "conductor", may_be_lapped: false }];

impl Journal {
    /// A journal of `records` slots (a power of two) with the publisher's readers ([`PUBLISHER_READERS`]).
    ///
    /// # Errors
    /// As [`Journal::with_readers`].
    pub fn new(records: u64) -> Result<Arc<Journal>, JournalAllocError> {
        Journal::with_readers(records, &PUBLISHER_READERS)
    }

    /// A journal of `records` slots (a power of two), allocated and written once here (pre-faulted), read by
    /// `readers` (their [`ReaderId`]s are their indices; every cursor starts at 0).
    ///
    /// # Errors
    /// [`JournalAllocError`] (naming `journal.records` and the bytes wanted) when the host cannot give the
    /// memory: the allocation is fallible, so a journal too large for the host is an error, not an abort.
    pub fn with_readers(records: u64, readers: &[ReaderSpec]) -> Result<Arc<Journal>, JournalAllocError> {
        assert!(records.is_power_of_two(), "journal records must be a power of two (checked by the config)");
        let bytes = u128::from(records) * std::mem::size_of::<Slot>() as u128;
        let too_big = || JournalAllocError { records, bytes };
        let n = usize::try_from(records).map_err(|_| too_big())?;
        let mut slots: Vec<Slot> = Vec::new();
        slots.try_reserve_exact(n).map_err(|_| too_big())?;
        slots.resize_with(n, Slot::default);
        let slots = slots.into_boxed_slice();
        Ok(Arc::new(Journal {
            slots,
            mask: records - 1,
            published: Padded(AtomicU64::new(0)),
            cursors: readers.iter().map(|_| Padded(AtomicU64::new(0))).collect(),
            readers: readers.into(),
            state: AtomicU8::new(0),
            error: Mutex::new(None),
        }))
    }

    /// Slots, in records.
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Records appended so far (positions `0..published` exist or existed). Acquire: pairs with the producer's
    /// Release store, so every record below it is readable.
    #[inline]
    pub fn published(&self) -> u64 {
        self.published.0.load(Ordering::Acquire)
    }

    /// Whether the feed is still read. Load it before [`Journal::published`]: once it is not `Running`, the
    /// `published` read after it is final.
    #[inline]
    pub fn state(&self) -> FeedState {
        match self.state.load(Ordering::Acquire) {
            0 => FeedState::Running,
            1 => FeedState::Ended,
            _ => FeedState::Failed,
        }
    }

    /// Why the feed failed, once [`FeedState::Failed`].
    pub fn error(&self) -> Option<String> {
        self.error.lock().map(|e| e.clone()).unwrap_or(None)
    }

    /// The record at position `pos` (below [`Journal::published`]), or `None` if it was overwritten (or is not
    /// written yet). Allocation-free; a few loads.
    #[inline]
    pub fn read(&self, pos: u64) -> Option<BookUpdate> {
        let slot = &self.slots[(pos & self.mask) as usize];
        let want = pos + 1;
        // Acquire: pairs with the producer's Release store of this stamp; the words it wrote before are visible.
        if slot.stamp.load(Ordering::Acquire) != want {
            return None;
        }
        let mut bytes = [0u8; 64];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(&slot.words) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
        }
        // The fence orders the word loads before the second stamp load: if the producer began to overwrite the
        // slot (stamp 0, Release fence, words) before we read a word, this load sees a changed stamp.
        fence(Ordering::Acquire);
        if slot.stamp.load(Ordering::Relaxed) != want {
            return None;
        }
        Some(BookUpdate::from_bytes(&bytes))
    }

    /// The lowest position the producer must keep (the lowest cursor of the readers that may not be lapped),
    /// loading them from the last registered to the first (see [`PUBLISHER_READERS`]). Acquire: pairs with
    /// their Release stores; their reads of the positions below happen before the producer reuses the slots.
    fn kept_from(&self) -> u64 {
        let mut low = u64::MAX;
        for (c, r) in self.cursors.iter().zip(self.readers.iter()).rev() {
            if !r.may_be_lapped {
                low = low.min(c.0.load(Ordering::Acquire));
            }
        }
        if low == u64::MAX {
            self.published() // every reader may be lapped: nothing holds the producer
        } else {
            low
        }
    }

    /// Whether the producer must wait for a reader before it can append (every slot holds a record a reader
    /// that may not be lapped still needs).
    pub fn is_full(&self) -> bool {
        self.published() - self.kept_from().min(self.published()) >= self.capacity()
    }

    /// Reader `id` is done with every position below `pos`. Release: its reads of them happen before the
    /// producer (Acquire) reuses their slots. Allocation-free, one store.
    #[inline]
    pub fn done(&self, id: ReaderId, pos: u64) {
        self.cursors[id.0].0.store(pos, Ordering::Release);
    }

    /// Reader `id`'s cursor (the positions it said it is done with).
    pub fn cursor(&self, id: ReaderId) -> u64 {
        self.cursors[id.0].0.load(Ordering::Acquire)
    }

    /// The readers, in registration order.
    pub fn readers(&self) -> &[ReaderSpec] {
        &self.readers
    }

    /// The oldest position still in the journal (`published - capacity`, or 0): a reader that may be lapped and
    /// is behind it lost the positions between its cursor and it.
    pub fn oldest(&self) -> u64 {
        self.published().saturating_sub(self.capacity())
    }

    fn end(&self, state: FeedState) {
        // Release: a reader that sees the state also sees the last `published`.
        self.state.store(if state == FeedState::Ended { 1 } else { 2 }, Ordering::Release);
    }
}

/// The producer's end of a [`Journal`] (one per journal).
pub struct JournalWriter {
    journal: Arc<Journal>,
    next: u64,
    /// The lowest reader position last seen: the producer may write up to `readers_done + capacity`.
    readers_done: u64,
}

impl JournalWriter {
    /// The only writer of `journal` (which must be new).
    pub fn new(journal: Arc<Journal>) -> JournalWriter {
        JournalWriter { journal, next: 0, readers_done: 0 }
    }

    /// Appends `record` if a slot is free (every reader that may not be lapped is done with the position it
    /// replaces); `false` when the journal is full (try again later).
    pub fn try_push(&mut self, record: &BookUpdate) -> bool {
        let j = &*self.journal;
        if self.next - self.readers_done >= j.capacity() {
            self.readers_done = j.kept_from();
            if self.next - self.readers_done >= j.capacity() {
                return false;
            }
        }
        let slot = &j.slots[(self.next & j.mask) as usize];
        slot.stamp.store(0, Ordering::Relaxed);
        // Release fence: a reader that loads any of the words below also sees the stamp 0 on its second look.
        fence(Ordering::Release);
        for (word, chunk) in slot.words.iter().zip(record.as_bytes().chunks_exact(8)) {
            word.store(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
        }
        // Release: publishes the words to a reader that loads this stamp with Acquire.
        slot.stamp.store(self.next + 1, Ordering::Release);
        self.next += 1;
        // Release: every record below `published` is whole for a reader that loads it with Acquire.
        j.published.0.store(self.next, Ordering::Release);
        true
    }

    /// The feed ended normally.
    pub fn end(&self) {
        self.journal.end(FeedState::Ended);
    }

    /// The feed failed with `error`; the records before it stay published.
    pub fn fail(&self, error: String) {
        if let Ok(mut e) = self.journal.error.lock() {
            *e = Some(error);
        }
        self.journal.end(FeedState::Failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::Kind;

    fn rec(i: u64) -> BookUpdate {
        BookUpdate {
            order_id: i,
            price_e9: i as i64 * 7,
            venue_pos: mdfan_wire::venue_position(i, 0),
            ..BookUpdate::control(Kind::Add)
        }
    }

    #[test]
    fn the_writer_waits_for_both_readers_and_an_overwritten_position_reads_as_none() {
        let j = Journal::new(MIN_RECORDS).unwrap();
        let mut w = JournalWriter::new(Arc::clone(&j));
        for i in 0..MIN_RECORDS {
            assert!(w.try_push(&rec(i)));
        }
        assert!(j.is_full());
        assert!(!w.try_push(&rec(MIN_RECORDS)), "full: neither reader is done with position 0");
        j.done(HOT_LOOP, 10);
        assert!(!w.try_push(&rec(MIN_RECORDS)), "the conductor still needs position 0");
        j.done(CONDUCTOR, 3);
        for i in MIN_RECORDS..MIN_RECORDS + 3 {
            assert!(w.try_push(&rec(i)), "positions 0..3 are free");
        }
        assert!(!w.try_push(&rec(MIN_RECORDS + 3)));
        assert_eq!(j.published(), MIN_RECORDS + 3);
        assert_eq!(j.read(2), None, "position 2 was overwritten by position 2 + capacity");
        assert_eq!(j.read(3), Some(rec(3)));
        assert_eq!(j.read(MIN_RECORDS + 2), Some(rec(MIN_RECORDS + 2)));
        assert_eq!(j.read(MIN_RECORDS + 3), None, "not written yet");
        assert_eq!(j.state(), FeedState::Running);
        w.fail("feed x: record 9 at byte 99: truncated".into());
        assert_eq!(
            (j.state(), j.error().as_deref()),
            (FeedState::Failed, Some("feed x: record 9 at byte 99: truncated"))
        );
    }

    #[test]
    fn a_reader_that_may_be_lapped_never_holds_the_producer_and_learns_what_it_lost() {
        let readers = [
            ReaderSpec { name: "hot_loop", may_be_lapped: false },
            ReaderSpec { name: "recorder", may_be_lapped: true },
        ];
        let (hot, recorder) = (ReaderId(0), ReaderId(1));
        let j = Journal::with_readers(MIN_RECORDS, &readers).unwrap();
        let mut w = JournalWriter::new(Arc::clone(&j));
        for i in 0..MIN_RECORDS {
            assert!(w.try_push(&rec(i)));
        }
        assert!(!w.try_push(&rec(MIN_RECORDS)), "the hot loop still needs position 0; the recorder is not waited for");
        j.done(hot, MIN_RECORDS);
        for i in MIN_RECORDS..MIN_RECORDS + 100 {
            assert!(w.try_push(&rec(i)), "the recorder at 0 does not hold position {i}");
        }
        assert_eq!((j.cursor(recorder), j.oldest()), (0, 100), "it was lapped: positions 0..100 are gone");
        assert_eq!(j.read(99), None);
        assert_eq!(j.read(100), Some(rec(100)));
        // Only readers that may be lapped: nothing holds the producer.
        let free = Journal::with_readers(MIN_RECORDS, &readers[1..]).unwrap();
        let mut w = JournalWriter::new(Arc::clone(&free));
        assert!((0..3 * MIN_RECORDS).all(|i| w.try_push(&rec(i))));
        assert_eq!(free.readers(), &readers[1..]);
    }

    #[test]
    fn a_journal_the_host_cannot_hold_is_an_error_naming_the_key_and_bytes_not_an_abort() {
        // 2^50 records x 128 B = 2^57 bytes: more than any x86-64 or aarch64 address space, so the allocator
        // refuses it whatever the host's memory and overcommit policy.
        let e = Journal::new(1 << 50).err().expect("no host holds 2^57 bytes");
        assert_eq!(e, JournalAllocError { records: 1 << 50, bytes: 1 << 57 });
        assert_eq!(
            e.to_string(),
            "journal.records = 1125899906842624: cannot allocate the journal's 144115188075855872 bytes \
             (1125899906842624 records x 128 B) on this host; lower [journal] records"
        );
    }

    #[test]
    fn a_reader_thread_sees_every_record_whole_while_the_writer_wraps() {
        let j = Journal::new(MIN_RECORDS).unwrap();
        let mut w = JournalWriter::new(Arc::clone(&j));
        const N: u64 = 50_000;
        let reader = {
            let j = Arc::clone(&j);
            std::thread::spawn(move || {
                let mut pos = 0;
                while pos < N {
                    if pos < j.published() {
                        assert_eq!(j.read(pos), Some(rec(pos)), "position {pos}");
                        pos += 1;
                        j.done(HOT_LOOP, pos);
                        j.done(CONDUCTOR, pos);
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        };
        for i in 0..N {
            while !w.try_push(&rec(i)) {
                std::thread::yield_now();
            }
        }
        w.end();
        reader.join().unwrap();
        assert_eq!((j.state(), j.published()), (FeedState::Ended, N));
    }
}
