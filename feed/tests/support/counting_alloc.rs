//! A counting global allocator for the no-allocation tests (`#[path]`-included, one per test binary): it counts
//! only the calls made on the thread inside [`calls_during`], so the test harness's other threads (its main
//! thread waits on the test's with a timeout, and may allocate meanwhile) cannot disturb a count.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the calls of the thread that is counting.
pub struct Counting;

thread_local! {
    /// Whether this thread's allocator calls are counted, and how many allocations (alloc, alloc_zeroed,
    /// realloc) and frees were (const-initialised, no destructor: using them never allocates).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static FREES: Cell<u64> = const { Cell::new(0) };
}

fn note(counter: &'static std::thread::LocalKey<Cell<u64>>) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = counter.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s guarantees
// hold; the counting touches only const thread-locals, which do not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCATIONS);
        // SAFETY: forwarded as received; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCATIONS);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(&ALLOCATIONS);
        // SAFETY: `ptr` and `layout` came from this allocator, which is `System`'s; the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(&FREES);
        // SAFETY: `ptr` and `layout` came from this allocator, which is `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What this thread asked of the allocator while `f` ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    /// alloc, alloc_zeroed and realloc calls.
    pub allocations: u64,
    /// dealloc calls.
    pub frees: u64,
}

/// Runs `f` on this thread, counting this thread's allocator calls meanwhile.
pub fn calls_during<T>(f: impl FnOnce() -> T) -> (Calls, T) {
    let (a, d) = (ALLOCATIONS.with(Cell::get), FREES.with(Cell::get));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (Calls { allocations: ALLOCATIONS.with(Cell::get) - a, frees: FREES.with(Cell::get) - d }, out)
}
