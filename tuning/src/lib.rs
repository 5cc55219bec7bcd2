//! mdfan-tuning: what a hot loop needs from its host.
//!
//! - [`pin_current_thread`]: pin to one core (core_affinity; `sched_setaffinity` underneath).
//! - [`lock_memory`]: `mlockall(MCL_CURRENT | MCL_FUTURE)`, so no page of a ring is ever swapped or faulted in on
//!   the hot path.
//! - [`HugeBuffer`]: anonymous memory backed by 2 MiB hugepages where the host has them, plain pages otherwise.
//! - [`TuningReport`]: the host's tuning state (isolcpus, nohz_full, hugepages) for logs and benchmark reports.
//! - [`idle`]: what a polling thread does when a poll found nothing ([`IdleStrategy`], [`Idler`]).
//! - [`counters`]: a counters file in shared memory that another process (`mdfan-stat`) reads live.
//! - [`agent`]: a loop body with a duty cycle ([`Agent::do_work`]) and its runner ([`run_agent`]), so the
//!   publisher's hot loop and conductor run on their own threads in production and side by side in a test.
#![warn(missing_docs)]

use std::fmt;

pub mod agent;
pub mod clock;
pub mod counters;
pub mod idle;
pub use agent::{run_agent, run_agent_until, Agent, RunStats};
pub use idle::{IdleStrategy, Idler};

use memmap2::{MmapMut, MmapOptions};

/// A tuning step that did not take effect. None of these is fatal for mdfan: callers log it and go on.
#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    /// The core does not exist or the affinity call was refused.
    #[error("cannot pin to core {core}: {detail}")]
    Pin {
        /// The core asked for.
        core: usize,
        /// What the OS said.
        detail: String,
    },
    /// `mlockall` failed (typically EPERM without CAP_IPC_LOCK, or ENOMEM over RLIMIT_MEMLOCK).
    #[error("mlockall failed: {0}")]
    Mlock(#[source] std::io::Error),
    /// Even a plain anonymous map failed.
    #[error("cannot map {bytes} bytes: {source}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        #[source]
        /// The OS error.
        source: std::io::Error,
    },
}

/// Pins the calling thread to `core` (a logical CPU id as the kernel numbers them).
///
/// # Errors
/// [`TuningError::Pin`] when the core is not one of this process's allowed CPUs or the call fails.
pub fn pin_current_thread(core: usize) -> Result<(), TuningError> {
    // A cpu_set_t holds CPU_SETSIZE (1024) cores; a larger id would index past it.
    if core >= libc::CPU_SETSIZE as usize {
        return Err(TuningError::Pin {
            core,
            detail: format!("beyond the {} cores a CPU set holds", libc::CPU_SETSIZE),
        });
    }
    // Ask the kernel directly: core_affinity's list is the *calling thread's* current mask, so a thread spawned
    // by an already pinned thread would see only its parent's core.
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(TuningError::Pin {
            core,
            detail: format!("sched_setaffinity refused (this thread may use {:?})", allowed_cores()),
        })
    }
}

/// The cores this process may run on.
pub fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect()
}

/// Locks every current and future page of the process in RAM (`mlockall(MCL_CURRENT | MCL_FUTURE)`).
///
/// # Errors
/// [`TuningError::Mlock`] with the errno (EPERM, ENOMEM).
pub fn lock_memory() -> Result<(), TuningError> {
    // SAFETY: mlockall takes two flag bits and touches no memory of ours; it is always sound to call.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(TuningError::Mlock(std::io::Error::last_os_error()))
    }
}

/// Anonymous, zeroed, page-aligned memory; 2 MiB hugepages when the host has them free.
pub struct HugeBuffer {
    map: MmapMut,
    huge: bool,
}

impl HugeBuffer {
    /// Maps `bytes` (rounded up to 2 MiB for hugepages), trying `MAP_HUGETLB` first.
    ///
    /// # Errors
    /// [`TuningError::Map`] if even a plain anonymous map fails.
    pub fn alloc(bytes: usize) -> Result<HugeBuffer, TuningError> {
        const HUGE_BYTES: usize = 2 << 20;
        let huge_len = bytes.div_ceil(HUGE_BYTES) * HUGE_BYTES;
        if let Ok(map) = MmapOptions::new().len(huge_len).huge(Some(21)).map_anon() {
            return Ok(HugeBuffer { map, huge: true });
        }
        let map =
            MmapOptions::new().len(bytes.max(1)).map_anon().map_err(|source| TuningError::Map { bytes, source })?;
        Ok(HugeBuffer { map, huge: false })
    }

    /// Whether the memory is hugepage-backed.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// The memory.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// The memory, read-only.
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }
}

/// The host's tuning state, read from /proc.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TuningReport {
    /// Logical CPUs this process may use.
    pub allowed_cores: Vec<usize>,
    /// `isolcpus=` from the kernel command line, if any.
    pub isolcpus: Option<String>,
    /// `nohz_full=` from the kernel command line, if any.
    pub nohz_full: Option<String>,
    /// `HugePages_Total` (2 MiB pages).
    pub hugepages_total: u64,
    /// `HugePages_Free`.
    pub hugepages_free: u64,
}

impl TuningReport {
    /// Reads /proc/cmdline and /proc/meminfo; missing files leave fields empty.
    pub fn read() -> TuningReport {
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        let arg = |key: &str| cmdline.split_whitespace().find_map(|w| w.strip_prefix(key).map(str::to_owned));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem = |key: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        TuningReport {
            allowed_cores: allowed_cores(),
            isolcpus: arg("isolcpus="),
            nohz_full: arg("nohz_full="),
            hugepages_total: mem("HugePages_Total:"),
            hugepages_free: mem("HugePages_Free:"),
        }
    }
}

impl fmt::Display for TuningReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allowed_cores={:?} isolcpus={} nohz_full={} hugepages_total={} hugepages_free={}",
            self.allowed_cores,
            self.isolcpus.as_deref().unwrap_or("none"),
            self.nohz_full.as_deref().unwrap_or("none"),
            self.hugepages_total,
            self.hugepages_free
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_an_allowed_core_works_and_to_a_missing_one_is_an_error() {
        let cores = allowed_cores();
        assert!(!cores.is_empty());
        pin_current_thread(cores[0]).unwrap();
        let err = pin_current_thread(100_000).unwrap_err().to_string();
        assert!(err.contains("core 100000"), "{err}");
        // a thread spawned by a pinned thread can still be pinned to another allowed core
        if cores.len() >= 2 {
            let other = cores[1];
            let moved = std::thread::spawn(move || pin_current_thread(other).is_ok()).join().unwrap();
            assert!(moved, "pinning to core {other} from a thread spawned by a thread pinned to {}", cores[0]);
        }
    }

    #[test]
    fn huge_buffers_are_zeroed_and_sized() {
        let mut b = HugeBuffer::alloc(3 << 20).unwrap();
        assert!(b.as_slice().len() >= 3 << 20);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[0] = 7;
        assert_eq!(b.as_slice()[0], 7);
    }
}
