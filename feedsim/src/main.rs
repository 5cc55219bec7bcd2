//! `mdfan-feedsim`: plays a pcap/pcapng capture onto UDP lines A and B, or a DBN MBO file synthesised as Nasdaq
//! TotalView-ITCH 5.0 over MoldUDP64 with a retransmission server (see the crate docs and README).
//!
//! Exit status: 0 after a full run, 1 on a bad capture or destination (one line on stderr), 2 for bad usage, 130
//! when stopped by SIGINT/SIGTERM (it stops sending, or stops its recovery server's linger, and prints its summary
//! lines first: `end=interrupted` when packets were left unsent; a line's `read` and `dropped` are then still the
//! whole plan's, decided before the first send, and `sent` what went out).

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;
use mdfan_feedsim::feed::{DEFAULT_INTERVAL_MS, DEFAULT_LINGER_MS};
use mdfan_feedsim::moldudp64::{
    capture_of, synthesize, SynthOptions, DEFAULT_HEARTBEAT_INTERVAL_NS, DEFAULT_MAX_PAYLOAD_BYTES, SYNTH_GROUP_A,
    SYNTH_GROUP_B,
};
use mdfan_feedsim::{
    run, run_capture, DefinitionsConfig, Impairment, Mdp3, MoldItch, MulticastScope, RecoveryConfig, RetransmitOptions,
    Session, SimConfig,
};

/// Plays the UDP datagrams of a pcap/pcapng capture onto lines A and B (multicast on 127.0.0.1 with TTL 0, or
/// loopback unicast), at the recorded pace or faster, with seeded loss, duplication and reordering per line.
/// The feed is CME MDP 3.0 (MsgSeqNum = payload bytes 0..4, little-endian). With --dbn instead of --pcap: a DBN
/// MBO file synthesised as Nasdaq TotalView-ITCH 5.0 over MoldUDP64 (same packets on A and, with --send-b, B),
/// with a MoldUDP64 retransmission server (--retransmit).
#[derive(Parser, Debug)]
#[command(name = "mdfan-feedsim", version)]
struct Cli {
    /// The capture (pcap or pcapng; Ethernet, IPv4, UDP).
    #[arg(long, required_unless_present = "dbn", conflicts_with = "dbn")]
    pcap: Option<PathBuf>,
    /// A DBN MBO file (plain or zstd) to synthesise as ITCH 5.0 over MoldUDP64, paced by its ts_recv.
    #[arg(long)]
    dbn: Option<PathBuf>,
    /// The MoldUDP64 session (up to 10 ASCII characters, space-padded).
    #[arg(long, default_value = "MDFAN00001", requires = "dbn")]
    itch_session: String,
    /// Largest MoldUDP64 packet (UDP payload, header included), bytes; 72 at least.
    #[arg(long, default_value_t = DEFAULT_MAX_PAYLOAD_BYTES, requires = "dbn")]
    itch_max_payload_bytes: usize,
    /// A heartbeat (message count 0) per this much idle time, ms; 0 = none.
    #[arg(long, default_value_t = DEFAULT_HEARTBEAT_INTERVAL_NS / 1_000_000, requires = "dbn")]
    itch_heartbeat_ms: u64,
    /// The session date the ITCH timestamps count from (US Eastern midnight) [default: the UTC date of the first
    /// record's ts_recv].
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_date, requires = "dbn")]
    itch_session_date: Option<(i32, u32, u32)>,
    /// Serve MoldUDP64 retransmission requests on this loopback address (answers go to the requester).
    #[arg(long, value_name = "127.0.0.1:PORT", requires = "dbn")]
    retransmit: Option<SocketAddrV4>,
    /// How long the retransmission server keeps serving after the last packet, ms.
    #[arg(long, default_value_t = DEFAULT_LINGER_MS, requires = "retransmit")]
    retransmit_linger_ms: u64,
    /// Answer this many requests, then none.
    #[arg(long, requires = "retransmit")]
    retransmit_max_requests: Option<u64>,
    /// Stop answering once this MoldUDP64 sequence number was published.
    #[arg(long, requires = "retransmit")]
    retransmit_die_after_seq: Option<u64>,
    /// Keep the messages but never answer.
    #[arg(long, requires = "retransmit")]
    retransmit_silent: bool,
    /// The capture's destination (group:port) played as line A [default: the first in the file].
    #[arg(long, value_name = "GROUP:PORT")]
    line_a: Option<SocketAddrV4>,
    /// The capture's destination played as line B [default: the second in the file].
    #[arg(long, value_name = "GROUP:PORT")]
    line_b: Option<SocketAddrV4>,
    /// Where line A goes: a multicast group (sent with IP_MULTICAST_IF 127.0.0.1, TTL 0) or 127.0.0.1:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    send_a: SocketAddrV4,
    /// Where line B goes (as --send-a); with --dbn, no line B without it.
    #[arg(long, value_name = "ADDR:PORT", required_unless_present = "dbn")]
    send_b: Option<SocketAddrV4>,
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
    /// Drop these MsgSeqNums (MoldUDP64: packets holding any of these sequence numbers) on both lines
    /// (FIRST-LAST, inclusive).
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_range)]
    drop_seqs: Option<(u64, u64)>,
    /// Serve the MDP 3.0 snapshot feed (market recovery) to this address (multicast group or 127.0.0.1:PORT):
    /// a loop of SnapshotFullRefresh38 per instrument from the simulator's own books.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "dbn")]
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
    /// Add this to every SecurityID of the capture (its snapshot loop follows): the same capture played as a
    /// second channel, with ids of its own.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=1_000_000_000), conflicts_with = "dbn")]
    security_id_offset: i32,
    /// Serve an MDP 3.0 instrument definition feed to this address (multicast group or 127.0.0.1:PORT): a loop
    /// of MDInstrumentDefinitionFuture27, one per instrument of --definitions-symbols.
    #[arg(long, value_name = "ADDR:PORT", requires = "definitions_symbols", conflicts_with = "dbn")]
    definitions: Option<SocketAddrV4>,
    /// The symbol file whose instruments the definition loop defines (security_id,symbol,display_factor,tick_size).
    #[arg(long, value_name = "FILE", requires = "definitions")]
    definitions_symbols: Option<PathBuf>,
    /// Period of the definition loop, ms.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    definitions_interval_ms: u64,
    /// Send multicast where this network namespace's routes send it, TTL 1, instead of on 127.0.0.1 with TTL 0:
    /// only inside a network namespace of a test's own (refused in the one its parent runs in), as an exchange host joined
    /// to a colo host by veth.
    #[arg(long)]
    netns_multicast: bool,
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

fn parse_date(s: &str) -> Result<(i32, u32, u32), String> {
    let mut it = s.splitn(3, '-').map(|p| p.parse::<u32>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(y)), Some(Ok(m)), Some(Ok(d))) if y >= 1970 && (1..=12).contains(&m) && (1..=31).contains(&d) => {
            Ok((y as i32, m, d))
        }
        _ => Err(format!("{s:?}: expected YYYY-MM-DD, e.g. 2023-12-25")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // SIGINT/SIGTERM set the flag (as in mdfan-publisher): the run stops at its next send or linger poll and
    // returns its summary, printed below, then exit 130.
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&shutdown)) {
            eprintln!("mdfan-feedsim: cannot install the SIGINT/SIGTERM handler: {e}");
            return ExitCode::from(1);
        }
    }
    let result = match &cli.dbn {
        Some(dbn) => run_dbn(&cli, dbn, &shutdown),
        None => run_pcap(&cli, &shutdown),
    };
    match result {
        Ok(summary) => {
            println!("{summary}");
            if shutdown.load(Ordering::Relaxed) {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("mdfan-feedsim: {e}");
            ExitCode::from(1)
        }
    }
}

fn config(cli: &Cli, source: PathBuf, send_b: SocketAddrV4) -> SimConfig {
    SimConfig {
        pcap: source,
        line_a: cli.line_a,
        line_b: cli.line_b,
        send_a: cli.send_a,
        send_b,
        speed: cli.speed,
        impair_a: Impairment { loss: cli.loss_a, dup: cli.dup, reorder: cli.reorder },
        impair_b: Impairment { loss: cli.loss_b, dup: cli.dup, reorder: cli.reorder },
        seed: cli.seed,
        drop_seqs: cli.drop_seqs,
        recovery: None,
        multicast: if cli.netns_multicast { MulticastScope::NamespaceRoutes } else { MulticastScope::Loopback },
        definitions: None,
    }
}

fn run_pcap(cli: &Cli, shutdown: &AtomicBool) -> Result<mdfan_feedsim::Summary, Box<dyn std::error::Error>> {
    let (Some(pcap), Some(send_b)) = (&cli.pcap, cli.send_b) else { unreachable!("clap requires both without --dbn") };
    let mut cfg = config(cli, pcap.clone(), send_b);
    cfg.recovery = cli.snapshot.map(|addr| RecoveryConfig {
        interval_ms: cli.snapshot_interval_ms,
        linger_ms: cli.snapshot_linger_ms,
        silent: cli.snapshot_silent,
        ..RecoveryConfig::new(addr)
    });
    if let (Some(addr), Some(symbols)) = (cli.definitions, &cli.definitions_symbols) {
        let instruments: Vec<_> = mdfan_feed::symbols::load_symbol_file(symbols)?.iter().cloned().collect();
        if let Some(d) = instruments.iter().find(|d| d.instrument_id >= i32::MAX as u32) {
            return Err(format!(
                "--definitions-symbols {}: security_id {} is past an MDP 3.0 SecurityID (Int32, below 2147483647)",
                symbols.display(),
                d.instrument_id
            )
            .into());
        }
        cfg.definitions = Some(DefinitionsConfig { addr, instruments, interval_ms: cli.definitions_interval_ms });
    }
    Ok(run(&cfg, &mut Mdp3 { security_id_offset: cli.security_id_offset }, shutdown)?)
}

fn run_dbn(
    cli: &Cli,
    dbn: &std::path::Path,
    shutdown: &AtomicBool,
) -> Result<mdfan_feedsim::Summary, Box<dyn std::error::Error>> {
    let session = Session::new(&cli.itch_session).map_err(|e| format!("--itch-session: {e}"))?;
    let opts = SynthOptions {
        session,
        max_payload_bytes: cli.itch_max_payload_bytes,
        heartbeat_interval_ns: cli.itch_heartbeat_ms.saturating_mul(1_000_000),
        session_date: cli.itch_session_date,
    };
    let synth = synthesize(dbn, &opts)?;
    // Without --send-b, line B has no packets (its destination is line A's and is never sent to).
    let mut cfg = config(cli, dbn.to_owned(), cli.send_b.unwrap_or(cli.send_a));
    cfg.recovery = cli.retransmit.map(|addr| RecoveryConfig {
        linger_ms: cli.retransmit_linger_ms,
        silent: cli.retransmit_silent,
        ..RecoveryConfig::new(addr)
    });
    let mut feed = MoldItch {
        session,
        max_payload_bytes: cli.itch_max_payload_bytes,
        retransmit: RetransmitOptions {
            max_requests: cli.retransmit_max_requests,
            die_after_seq: cli.retransmit_die_after_seq,
        },
    };
    let capture = capture_of(&synth.packets, cli.send_b.is_some());
    let s = &synth.stats;
    println!(
        "feedsim itch records={} messages={} last_seq={} packets={} price_unrepresentable={} unknown_order={} skipped={} ts_clamped={}",
        s.records,
        s.messages(),
        synth.last_seq,
        synth.packets.len(),
        s.price_unrepresentable,
        s.unknown_order,
        s.skipped,
        s.ts_clamped
    );
    Ok(run_capture(&cfg, capture, [SYNTH_GROUP_A, SYNTH_GROUP_B], &mut feed, shutdown)?)
}
