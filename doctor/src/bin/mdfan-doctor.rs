//! `mdfan-doctor`: checks this host (or a recorded tree with `--root`) for mdfan over RoCE and prints each
//! finding: pass / warn / fail / unknown, the value found and wanted, why it matters and the fix.
//!
//! Exit codes: 0 when nothing failed (pass, warn, unknown), 1 when a check failed, 2 for bad usage.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use mdfan_doctor::{checks, cpulist, exit_code, render, Inputs, Rooted};

/// Checks a host for mdfan: RDMA device, port, GIDs, MTU and speed; PFC, DSCP trust and map, ECN (DCQCN);
/// core isolation, power management, SMT, memory, NUMA, IRQs, memlock, /dev/shm, clocks.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The cores the hot loops will be pinned to, as a CPU list (`1,3` or `2-3`).
    #[arg(long)]
    hot_cores: Option<CoreList>,
    /// Bytes of ring memory this host will register and lock (memlock, /dev/shm and hugepage checks).
    #[arg(long)]
    ring_bytes: Option<u64>,
    /// Where shared-memory rings are created.
    #[arg(long, default_value = "/dev/shm")]
    shm_dir: String,
    /// The RDMA device (default: the first listed).
    #[arg(long)]
    device: Option<String>,
    /// The RDMA port.
    #[arg(long, default_value_t = 1)]
    port: u32,
    /// The netdev (default: the one the RDMA device sits on).
    #[arg(long)]
    netdev: Option<String>,
    /// This host will run the verbs fabric: no RDMA device is a failure, not a warning.
    #[arg(long)]
    verbs: bool,
    /// The IP traffic class of mdfan's RoCE v2 packets: `traffic_class` in the publisher's `[fabric.verbs]` and
    /// `--traffic-class` of the subscribers (DSCP << 2, e.g. 104 for DSCP 26). mdfan's default is 0.
    #[arg(long, default_value_t = 0)]
    traffic_class: u8,
    /// The priority the network runs lossless (PFC) for RoCE.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=7))]
    roce_priority: u8,
    /// An interface the feed's lines come in on (repeatable): its hardware receive timestamping is checked
    /// (`ethtool -T`, `hwstamp_ctl -i`, phc2sys and `phc_ctl IF cmp`).
    #[arg(long = "line-interface")]
    line_interfaces: Vec<String>,
    /// Read the host from this tree instead of `/` (a recorded sysfs/procfs snapshot; tools' output from its
    /// `cmd/` folder).
    #[arg(long, default_value = "/")]
    root: String,
    /// Print a JSON array of findings instead of the table.
    #[arg(long)]
    json: bool,
}

/// A CPU list argument (`1,3`, `2-5`), one value for clap.
#[derive(Debug, Clone)]
struct CoreList(Vec<usize>);

impl std::str::FromStr for CoreList {
    type Err = String;
    fn from_str(s: &str) -> Result<CoreList, String> {
        cpulist::parse(s).map(CoreList).ok_or_else(|| format!("not a CPU list: {s:?} (e.g. 1,3 or 2-5)"))
    }
}

fn main() -> ExitCode {
    let args = Args::parse(); // exits 2 on bad usage
    let inputs = Inputs {
        hot_cores: args.hot_cores.map(|c| c.0).unwrap_or_default(),
        ring_bytes: args.ring_bytes,
        shm_dir: args.shm_dir,
        device: args.device,
        port: args.port,
        netdev: args.netdev,
        need_rdma: args.verbs,
        traffic_class: args.traffic_class,
        roce_priority: args.roce_priority,
        line_interfaces: args.line_interfaces,
    };
    // A mistyped --root would make every check "unknown" and the run look clean.
    if !std::path::Path::new(&args.root).join("proc").is_dir() && !std::path::Path::new(&args.root).join("sys").is_dir()
    {
        eprintln!(
            "mdfan-doctor: error: --root {}: no proc/ or sys/ under it (a host root or a recorded tree)",
            args.root
        );
        return ExitCode::from(2);
    }
    let src = Rooted::new(args.root);
    let findings = checks::all(&src, &inputs);
    let text = if args.json { render::json(&findings) + "\n" } else { render::table(&findings) };
    // A closed stdout (`| head`) is not an error worth a panic.
    let _ = std::io::stdout().write_all(text.as_bytes());
    ExitCode::from(exit_code(&findings) as u8)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Args;

    #[test]
    fn the_command_line_is_well_formed_and_parses_core_lists() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["mdfan-doctor", "--hot-cores", "1,3-4", "--json"]).unwrap();
        assert_eq!(a.hot_cores.unwrap().0, vec![1, 3, 4]);
        assert!(Args::try_parse_from(["mdfan-doctor", "--hot-cores", "x"]).is_err());
        assert!(Args::try_parse_from(["mdfan-doctor", "--roce-priority", "8"]).is_err());
    }
}
