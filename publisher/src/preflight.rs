//! Preflight: the host checks of `mdfan-doctor` that decide whether a run can start or would lie, run by
//! `mdfan-publisher` (and `mdfan-subscribe`) before anything is allocated.
//!
//! - **Failures** stop the start, one line each naming the check, the value found and the value wanted:
//!   `host.memlock` (when memory is locked or registered: `lock_memory`, or the verbs fabric), `host.shm` (the
//!   shared-memory folder has room), `host.cores` (the configured cores exist and are allowed), `rdma.device`
//!   (the verbs fabric needs an RDMA device).
//! - **Warnings** are the tail-latency findings (isolation, governor, C-states, SMT sibling, IRQs on the hot
//!   cores, THP, swap, clocksource): logged at start and listed again under the run report.
//!
//! The checks and their ids are `mdfan_doctor::checks` (docs/RUNBOOK.md explains each).

use mdfan_doctor::{checks, Finding, Inputs, Rooted, Verdict};

use crate::config::Config;

/// What preflight found.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// Findings that stop the start.
    pub failures: Vec<Finding>,
    /// Tail-latency findings (warn or fail): logged, listed in the run report.
    pub warnings: Vec<Finding>,
}

impl Preflight {
    /// Runs the checks on `root` (`/` for this host; a recorded tree in tests) for what `inputs` describe.
    /// `memlock`: whether `host.memlock` can fail the start (memory is locked or registered).
    pub fn run(root: &str, inputs: &Inputs, memlock: bool) -> Preflight {
        let src = Rooted::new(root);
        let failures = checks::preflight(&src, inputs)
            .into_iter()
            .filter(|f| f.verdict == Verdict::Fail && (memlock || f.id != "host.memlock"))
            .collect();
        let warnings = checks::tail_warnings(&src, inputs);
        Preflight { failures, warnings }
    }

    /// The publisher's preflight for `cfg`: its hot and control cores, the journal as the memory it locks (with
    /// `lock_memory`), the shm folder, an RDMA device for the verbs fabric.
    pub fn for_publisher(cfg: &Config) -> Preflight {
        let verbs = cfg.fabric.provider == mdfan_fabric::Provider::Verbs;
        let inputs = Inputs {
            hot_cores: [cfg.publisher.hot_core, cfg.publisher.control_core].into_iter().flatten().collect(),
            ring_bytes: cfg.publisher.lock_memory.then_some(cfg.journal.records * 128),
            shm_dir: cfg.fabric.shm_dir.display().to_string(),
            need_rdma: verbs,
            ..Inputs::default()
        };
        Preflight::run("/", &inputs, cfg.publisher.lock_memory || verbs)
    }
}

/// One line for a finding: `host.shm: found /dev/shm: 1.0 MiB free of 1.0 MiB; wanted /dev/shm: >= 9.0 MiB free
/// (fix: ...)`.
pub fn line(f: &Finding) -> String {
    let fix = if f.fix.is_empty() { String::new() } else { format!(" (fix: {})", f.fix) };
    format!("{}: found {}; wanted {}{fix}", f.id, f.found, f.wanted)
}
