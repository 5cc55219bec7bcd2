//! `mdfan-feedsim`: plays a pcap/pcapng capture onto UDP lines A and B (see the crate docs and README).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use mdfan_feedsim::feed::{DEFAULT_INTERVAL_MS, DEFAULT_LINGER_MS};
use mdfan_feedsim::{run, Impairment, Mdp3, RecoveryConfig, SimConfig};

/// Plays the UDP datagrams of a pcap/pcapng capture onto lines A and B (multicast on 127.0.0.1 with TTL 0, or
/// loopback unicast), at the recorded pace or faster, with seeded loss, duplication and reordering per line.
/// The feed is CME MDP 3.0 (MsgSeqNum = payload bytes 0..4, little-endian).
#[derive(Parser, Debug)]
#[command(name = "mdfan-feedsim", version)]
struct Cli {
    /// The capture (pcap or pcapng; Ethernet, IPv4, UDP).
    #[arg(long)]
    pcap: PathBuf,
    /// The capture's destination (group:port) played as line A [default: the first in the file].
    #[arg(long, value_name = "GROUP:PORT")]
    line_a: Option<SocketAddrV4>,
    /// The capture's destination played as line B [default: the second in the file].
    #[arg(long, value_name = "GROUP:PORT")]
    line_b: Option<SocketAddrV4>,
    /// Where line A goes: a multicast group (sent with IP_MULTICAST_IF 127.0.0.1, TTL 0) or 127.0.0.1:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    send_a: SocketAddrV4,
    /// Where line B goes (as --send-a).
    #[arg(long, value_name = "ADDR:PORT")]
    send_b: SocketAddrV4,
    /// Pace: 1 = as recorded, 10 = ten times faster, 0 = as fast as possible.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Fraction of line A's packets lost at random (0..=1).
    #[arg(long, default_value_t = 0.0)]
    loss_a: f64,
    /// Fraction of line B's packets lost at random (0..=1).
    #[arg(long, default_value_t = 0.0)]
    loss_b: f64,
    /// Fraction of each line's packets sent twice (0..=1).
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Fraction of each line's packets held back behind the next one (0..=1).
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Seed of the impairment model: the same seed drops, duplicates and reorders the same packets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Drop these MsgSeqNums on both lines (FIRST-LAST, inclusive).
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_range)]
    drop_seqs: Option<(u64, u64)>,
    /// Serve the MDP 3.0 snapshot feed (market recovery) to this address (multicast group or 127.0.0.1:PORT):
    /// a loop of SnapshotFullRefresh38 per instrument from the simulator's own books.
    #[arg(long, value_name = "ADDR:PORT")]
    snapshot: Option<SocketAddrV4>,
    /// Period of the snapshot loop, ms.
    #[arg(long, default_value_t = DEFAULT_INTERVAL_MS, value_parser = clap::value_parser!(u64).range(1..))]
    snapshot_interval_ms: u64,
    /// How long the snapshot feed keeps serving after the capture's last packet, ms.
    #[arg(long, default_value_t = DEFAULT_LINGER_MS)]
    snapshot_linger_ms: u64,
    /// The snapshot feed keeps its books but never sends (a recovery channel that never answers).
    #[arg(long, requires = "snapshot")]
    snapshot_silent: bool,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once('-').ok_or("expected FIRST-LAST, e.g. 17347900-17347939")?;
    let first: u64 = a.trim().parse().map_err(|e| format!("FIRST {a:?}: {e}"))?;
    let last: u64 = b.trim().parse().map_err(|e| format!("LAST {b:?}: {e}"))?;
    if first > last {
        return Err(format!("FIRST {first} is above LAST {last}"));
    }
    Ok((first, last))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = SimConfig {
        pcap: cli.pcap,
        line_a: cli.line_a,
        line_b: cli.line_b,
        send_a: cli.send_a,
        send_b: cli.send_b,
        speed: cli.speed,
        impair_a: Impairment { loss: cli.loss_a, dup: cli.dup, reorder: cli.reorder },
        impair_b: Impairment { loss: cli.loss_b, dup: cli.dup, reorder: cli.reorder },
        seed: cli.seed,
        drop_seqs: cli.drop_seqs,
        recovery: cli.snapshot.map(|addr| RecoveryConfig {
            addr,
            interval_ms: cli.snapshot_interval_ms,
            linger_ms: cli.snapshot_linger_ms,
            silent: cli.snapshot_silent,
        }),
    };
    let shutdown = AtomicBool::new(false);
    match run(&cfg, &mut Mdp3, &shutdown) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mdfan-feedsim: {e}");
            ExitCode::from(1)
        }
    }
}
