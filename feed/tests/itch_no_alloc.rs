//! The ITCH hot path allocates nothing after warm-up: decoding every message of the snippet file from memory
//! (MoldUDP64-style blocks borrowed from one buffer) and normalising it, with the reference table reserved up
//! front, makes no heap allocation. A counting global allocator, in a test binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mdfan_feed::itch::{decode_message, eastern_midnight_ns, ItchNormalizer, ItchStats};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to `System`, which upholds `GlobalAlloc`'s contract; the counter is a
// relaxed atomic add with no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout` (every allocation goes through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as for `dealloc`; `new_size` is the caller's, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decoding_and_normalising_the_snippet_allocates_nothing() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50");
    let bytes = std::fs::read(path).unwrap();
    let mut norm = ItchNormalizer::new(eastern_midnight_ns(2019, 12, 30).unwrap(), 4096);
    let mut stats = ItchStats::default();
    let (mut at, mut pos, mut records) = (0usize, 0u32, 0u64);
    COUNTING.store(true, Ordering::SeqCst);
    while let Some(len) = bytes.get(at..at + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) {
        let body = &bytes[at + 2..at + 2 + len];
        let m = decode_message(body, at as u64).unwrap();
        stats.count(&m, len);
        pos += 1;
        records += norm.normalize(&m, pos, 0).as_slice().len() as u64;
        at += 2 + len;
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    assert_eq!((stats.messages, pos), (1000, 1000));
    assert!(records > 0);
    assert_eq!(norm.resting_orders(), 532);
}
