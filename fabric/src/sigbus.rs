//! SIGBUS containment for the subscriber rings the publisher maps ([`crate::shm::ShmRemoteRing`]).
//!
//! A ring is a file the subscriber created; the publisher maps it shared. If the subscriber (or anyone with the
//! file open) truncates it, the publisher's next access to a page past the new end faults with `SIGBUS`
//! (mmap(2), "Errors"), whose default action kills the publisher and with it every other subscriber. So each
//! mapping is registered here while it lives ([`Guard`]), and a process-wide `SIGBUS` handler, installed with the
//! first guard, handles a fault inside a registered range the way Wayland compositors handle a client's shm
//! pool: it maps anonymous zero pages over the whole range (`MAP_FIXED`), so the faulting access is retried and
//! succeeds, and marks the guard faulted; the ring's owner then fails the session ([`Guard::faulted`]). A fault
//! anywhere else goes to the handler that was installed before (Rust's own, for stack overflows), or to the
//! default action: the process dies as it would have.
//!
//! The registry is a fixed table of [`MAX_GUARDED`] ranges read with atomics only, so the handler is
//! async-signal-safe: atomics, `mmap(2)` and `sigaction(2)`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Mappings guarded at once; a ring attached beyond this is mapped unguarded (and logged by its caller).
pub const MAX_GUARDED: usize = 1024;

/// `start` of a slot being filled in or emptied: never matches an address.
const CLAIMED: usize = 1;

struct Slot {
    /// First byte of the range; 0: free; [`CLAIMED`]: being set.
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the array's initialiser: each slot gets its own atomics
const FREE: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), faulted: AtomicBool::new(false) };
static SLOTS: [Slot; MAX_GUARDED] = [FREE; MAX_GUARDED];
static INSTALL: Once = Once::new();
/// The `SIGBUS` action before ours (`None` if ours could not be installed).
static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

/// One mapped range registered with the handler; unregistered on drop, which must come before the range is
/// unmapped (a later mapping at the same address must not be mistaken for it).
#[derive(Debug)]
pub struct Guard {
    index: usize,
}

impl Guard {
    /// Registers `len` bytes from `start` (a shared mapping of a file someone else may truncate). `None` when the
    /// table is full or the handler could not be installed: the range is then not protected.
    pub fn new(start: *mut u8, len: usize) -> Option<Guard> {
        INSTALL.call_once(install);
        PREVIOUS.get()?.as_ref()?;
        let start = start as usize;
        if start <= CLAIMED || len == 0 {
            return None;
        }
        let index = SLOTS
            .iter()
            .position(|s| s.start.compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
        let s = &SLOTS[index];
        s.faulted.store(false, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        // SYNC POINT: Release publishes `len` to the handler's Acquire of `start`.
        s.start.store(start, Ordering::Release);
        Some(Guard { index })
    }

    /// Whether an access to the range faulted (its file was truncated): the range now holds anonymous zero pages,
    /// not the file. One relaxed load.
    #[inline]
    pub fn faulted(&self) -> bool {
        SLOTS[self.index].faulted.load(Ordering::Relaxed)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &SLOTS[self.index];
        s.start.store(CLAIMED, Ordering::Release);
        s.len.store(0, Ordering::Relaxed);
        s.start.store(0, Ordering::Release);
    }
}

fn install() {
    // SAFETY: a zeroed `sigaction` is a valid value (no handler, empty mask, no flags); sigemptyset and
    // sigaction are given valid pointers to it and to `old`, which they fill in.
    let previous = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(libc::SIGBUS, &action, &mut old) == 0).then_some(old)
    };
    let _ = PREVIOUS.set(previous);
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler; for SIGBUS `si_addr` is the address.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &SLOTS {
        // SYNC POINT: Acquire pairs with `Guard::new`'s Release: `len` is the range's.
        let start = s.start.load(Ordering::Acquire);
        if start <= CLAIMED {
            continue;
        }
        let len = s.len.load(Ordering::Relaxed);
        if addr >= start && addr - start < len {
            // SAFETY: `start..start + len` is a mapping this process made and still holds (its guard is
            // registered until before it is unmapped); replacing it with anonymous pages of the same size keeps
            // every pointer into it valid. mmap is async-signal-safe.
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                s.faulted.store(true, Ordering::Relaxed);
                return; // the access is retried, on zero pages
            }
            break;
        }
    }
    // Not a ring's: the handler before ours decides (Rust's reports a stack overflow, or restores the default
    // action so that the retried access kills the process, as without us).
    match PREVIOUS.get().copied().flatten() {
        Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: with SA_SIGINFO the previous handler has this signature; it gets our arguments.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the previous handler takes the signal number only.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: resetting SIGBUS to its default action; a zeroed sigaction with SIG_DFL is valid.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}
