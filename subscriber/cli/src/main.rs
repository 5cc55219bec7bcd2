//! `mdfan-subscribe --connect HOST:PORT`: subscribe, rebuild the books, print summaries and latency.
//!
//! Exit status: 0 after end of stream; 1 when the subscription cannot be set up (one line on stderr naming
//! the endpoint); 3 when the publisher dropped this subscriber; 4 when the publisher went away without ending
//! the stream (and reconnecting was off or failed); 130 on SIGINT/SIGTERM.

/// `println!` for a process whose stdout may be a pipe that closes early (`| head`): a closed pipe ends the
/// process at once with exit 141 (what a shell reports for SIGPIPE) instead of a panic; another write error is one
/// line on stderr and exit 1.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(141);
            }
            eprintln!("cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }};
}

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use mdfan_subscriber::report::{latency_line, level_lines, summary_line, wire_latency_line};
use mdfan_subscriber::{
    format_price_e9, Books, CloseReason, End, Event, FabricConfig, Health, Kind, Provider, Reconnect,
    SlowConsumerPolicy, SubscribeError, Subscriber, SubscriberConfig,
};

#[derive(Clone, Copy, ValueEnum)]
enum Policy {
    /// Be dropped when the ring is full.
    Disconnect,
    /// Be skipped while the ring is full, then rebuild from a snapshot.
    Resync,
    /// Make the publisher wait (only where it allows it).
    Block,
}

#[derive(Clone, Copy, ValueEnum)]
enum Idle {
    /// Busy-poll with a PAUSE per empty poll (lowest latency; burns the core).
    Spin,
    /// Yield the core after an empty poll (for shared cores, e.g. tests).
    Yield,
}

/// Subscribe to an mdfan publisher, rebuild its order books, print summaries and latency percentiles.
#[derive(Parser)]
#[command(name = "mdfan-subscribe", version)]
struct Args {
    /// Publisher control endpoint, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:7700", value_parser = endpoint)]
    connect: String,
    /// Name shown by the publisher.
    #[arg(long, default_value = "mdfan-subscribe")]
    name: String,
    /// Ring size in slots (power of two; 64 B each).
    #[arg(long, default_value_t = 131_072)]
    ring_slots: u32,
    /// Fabric to offer the publisher (it must serve the same one): shm (shared memory on the publisher's host)
    /// or verbs (RDMA; needs a build with the verbs feature: `--features mdfan-subscribe/verbs`).
    #[arg(long, default_value_t = Provider::Shm)]
    fabric: Provider,
    /// verbs: RDMA device name (default: the first device listed).
    #[arg(long)]
    device: Option<String>,
    /// verbs: GID index (default: the first RoCE v2 GID with an IPv4-mapped address).
    #[arg(long)]
    gid_index: Option<u32>,
    /// verbs: IP traffic class of RoCE v2 packets (DSCP << 2), e.g. 104 for DSCP 26.
    #[arg(long)]
    traffic_class: Option<u8>,
    /// Folder for the ring file (the publisher's fabric.shm_dir).
    #[arg(long, default_value = mdfan_fabric::shm::DEFAULT_DIR)]
    shm_dir: std::path::PathBuf,
    /// Only these instrument_ids (repeatable); default all.
    #[arg(long = "instrument")]
    instruments: Vec<u32>,
    /// Print the BBO each time it changes (after records with F_LAST).
    #[arg(long)]
    bbo: bool,
    /// Also print the summary after this many records (repeatable).
    #[arg(long = "checkpoint")]
    checkpoints: Vec<u64>,
    /// Levels per side printed at the end.
    #[arg(long, default_value_t = 10)]
    levels: usize,
    /// Pin the polling thread to this core.
    #[arg(long)]
    core: Option<usize>,
    /// What to do when the CQ is empty.
    #[arg(long, value_enum, default_value_t = Idle::Spin)]
    idle: Idle,
    /// What the publisher does when this subscriber's ring is full.
    #[arg(long, value_enum, default_value_t = Policy::Resync)]
    policy: Policy,
    /// Do not ask for a snapshot when joining mid-stream.
    #[arg(long)]
    no_snapshot: bool,
    /// Report the publisher silent after this many ms without a record or heartbeat.
    #[arg(long, default_value_t = 50)]
    silence_timeout_ms: u64,
    /// When the publisher goes away without ending the stream (or is not up yet), reconnect for up to this
    /// many ms; the books are rebuilt from its snapshot or replay.
    #[arg(long)]
    reconnect_ms: Option<u64>,
}

/// `--connect`: HOST:PORT with a port number (a missing port is a usage error, not a connection failure).
fn endpoint(text: &str) -> Result<String, String> {
    let missing = || format!("{text:?} has no port: use HOST:PORT, e.g. 127.0.0.1:7700");
    let (host, port) = text.rsplit_once(':').ok_or_else(missing)?;
    if host.is_empty() {
        return Err(missing());
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(text.to_owned()),
        _ => Err(format!("{text:?}: port {port:?} is not a number from 1 to 65535")),
    }
}

fn main() {
    let args = Args::parse();
    let code = match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mdfan-subscribe: error: {e}");
            if matches!(e, CliError::Usage(_)) {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Subscribe(#[from] SubscribeError),
    #[error("{0}")]
    Usage(String),
    #[error("gave up after {tries} tries in {ms} ms (--reconnect-ms): {source}")]
    GaveUp {
        tries: u32,
        ms: u128,
        #[source]
        source: SubscribeError,
    },
}

fn fabric(args: &Args) -> Result<FabricConfig, CliError> {
    let verbs_flags = args.device.is_some() || args.gid_index.is_some() || args.traffic_class.is_some();
    match args.fabric {
        Provider::Shm if verbs_flags => {
            Err(CliError::Usage("--device, --gid-index and --traffic-class need --fabric verbs".into()))
        }
        Provider::Shm => Ok(FabricConfig::Shm { dir: args.shm_dir.clone() }),
        Provider::Verbs => verbs_config(args),
    }
}

#[cfg(feature = "verbs")]
fn verbs_config(args: &Args) -> Result<FabricConfig, CliError> {
    let defaults = mdfan_fabric::verbs::VerbsConfig::default();
    Ok(FabricConfig::Verbs(mdfan_fabric::verbs::VerbsConfig {
        device: args.device.clone(),
        gid_index: args.gid_index,
        traffic_class: args.traffic_class.unwrap_or(defaults.traffic_class),
        ..defaults
    }))
}

#[cfg(not(feature = "verbs"))]
fn verbs_config(_: &Args) -> Result<FabricConfig, CliError> {
    let missing = Provider::Verbs.check_built().expect_err("verbs is not in this build");
    Err(CliError::Usage(format!("--fabric verbs: {missing}")))
}

fn run(args: &Args) -> Result<i32, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).expect("signal handlers install");
    }
    if let Some(core) = args.core {
        let allowed = mdfan_subscriber::allowed_cores();
        if !allowed.contains(&core) {
            return Err(CliError::Usage(format!("--core {core}: this process may run on cores {allowed:?} only")));
        }
        mdfan_subscriber::pin_current_thread(core).map_err(|e| CliError::Usage(format!("--core {core}: {e}")))?;
    }
    let mut cfg = SubscriberConfig::new(&args.connect, &args.name);
    mdfan_wire::ring::check_slot_count(args.ring_slots as u64)
        .map_err(|e| CliError::Usage(format!("--ring-slots: {e}")))?;
    cfg.ring_slots = args.ring_slots;
    cfg.fabric = fabric(args)?;
    cfg.instruments = (!args.instruments.is_empty()).then(|| args.instruments.clone());
    cfg.policy = match args.policy {
        Policy::Disconnect => SlowConsumerPolicy::Disconnect,
        Policy::Resync => SlowConsumerPolicy::Resync,
        Policy::Block => SlowConsumerPolicy::Block,
    };
    cfg.snapshot = !args.no_snapshot;
    cfg.silence_timeout = Duration::from_millis(args.silence_timeout_ms);
    // The library reconnects (every 100 ms, for up to --reconnect-ms) when the publisher vanishes or the transport
    // breaks, and retries the first connect while nobody listens yet.
    cfg.reconnect = args.reconnect_ms.map(|ms| Reconnect::within(Duration::from_millis(ms)));
    let mut sub = match Subscriber::connect_with_retry(&cfg, || stop.load(Ordering::Relaxed)) {
        Ok(sub) => sub.with_latency(),
        Err(SubscribeError::GaveUp { tries, budget, source }) => {
            return Err(CliError::GaveUp { tries, ms: budget.as_millis(), source: *source })
        }
        Err(e) => return Err(e.into()),
    };
    out!(
        "subscribed endpoint={} session={} ring_slots={} policy={}",
        sub.endpoint(),
        sub.session_id(),
        cfg.ring_slots,
        sub.policy().as_str()
    );

    let mut books = Books::new();
    let checkpoints: BTreeSet<u64> = args.checkpoints.iter().copied().collect();
    let mut book_records = 0u64;
    let mut book_errors = 0u64;
    let mut stale_book_errors = 0u64;
    let mut heartbeats = 0u64;
    let mut silent_reported = false;
    let mut last_bbo = None;
    let mut idler = mdfan_subscriber::Idler::new(match args.idle {
        Idle::Spin => mdfan_subscriber::IdleStrategy::BusySpin,
        Idle::Yield => mdfan_subscriber::IdleStrategy::SpinThenYield { spins: 0 },
    });
    let mut end: Option<&'static str> = None;
    let mut out = Vec::<String>::new();
    while end.is_none() {
        let mut stale = sub.is_stale();
        let n = sub.poll(256, |event| match event {
            Event::Record(r) => match r.kind() {
                Some(Kind::EndOfStream) => {
                    end = Some(CloseReason::from_u32(r.size).map_or("end_of_stream", CloseReason::as_str))
                }
                Some(Kind::Heartbeat) => heartbeats += 1,
                Some(Kind::SnapshotBegin) => {
                    let _ = books.apply(r); // empties every book
                    out.push(format!("snapshot_begin seq={} instruments={} position={}", r.seq, r.size, r.order_id));
                }
                Some(Kind::SnapshotEnd) => {
                    stale = false;
                    out.push(format!("snapshot_end seq={} position={}", r.seq, r.order_id));
                }
                _ => {
                    book_records += 1;
                    if let Err(e) = books.apply(r) {
                        if stale {
                            stale_book_errors += 1; // expected between a gap and its snapshot
                        } else {
                            book_errors += 1;
                            if book_errors <= 10 {
                                out.push(format!("book_error seq={} {e}", r.seq));
                            }
                        }
                    }
                    if checkpoints.contains(&book_records) {
                        for (id, book) in books.iter_sorted() {
                            out.push(format!("checkpoint after={book_records} {}", summary_line(id, book, 0)));
                        }
                    }
                    if args.bbo && r.is_last() {
                        if let Some(book) = books.get(r.instrument_id) {
                            let bbo = book.bbo();
                            if last_bbo != Some((r.instrument_id, bbo)) {
                                last_bbo = Some((r.instrument_id, bbo));
                                let fmt = |l: Option<mdfan_subscriber::Level>| {
                                    l.map_or("-".to_owned(), |l| format!("{}x{}", format_price_e9(l.price_e9), l.size))
                                };
                                out.push(format!(
                                    "bbo instrument={} seq={} venue_seq={} {}/{}",
                                    r.instrument_id,
                                    r.seq,
                                    r.venue_seq,
                                    fmt(bbo.0),
                                    fmt(bbo.1)
                                ));
                            }
                        }
                    }
                }
            },
            Event::Gap { expected, got } => {
                stale = true; // the books are stale until the snapshot this gap asks for has arrived
                out.push(format!("gap expected_seq={expected} got_seq={got}"));
            }
            Event::Corrupt { seq, slot_seq } => out.push(format!("corrupt seq={seq} slot_seq={slot_seq}")),
            Event::Stale { seq, expected } => out.push(format!("stale seq={seq} expected_seq={expected}")),
            Event::Closed(_) => {} // maintain reports it, with what follows from it (reconnect or end)
        });
        if !out.is_empty() {
            for line in out.drain(..) {
                out!("{line}");
            }
        }
        idler.idle(n);
        if let Some(health) = sub.maintain_if_due() {
            if stop.load(Ordering::Relaxed) {
                end = Some("interrupted");
            }
            match health {
                Health::Ok => silent_reported = false,
                Health::Silent(d) => {
                    if !silent_reported {
                        silent_reported = true;
                        out!("publisher_silent ms={}", d.as_millis());
                    }
                }
                // The library reports a loss only once a poll after it found the ring drained: everything the
                // publisher wrote before it left has been delivered. The first report says it; tries follow.
                Health::Reconnecting { tries: 0 } => out!("publisher_gone after_seq={}", sub.stats().next_seq - 1),
                Health::Reconnecting { .. } => {}
                Health::Reconnected { session_id } => {
                    books = Books::new();
                    out!("reconnected session={session_id}");
                }
                Health::Ended(e) => {
                    match e {
                        // the publisher ended this session and said why (on verbs this is the only way)
                        End::Bye(reason) => match sub.bye().map_or("", |bye| bye.detail.as_str()) {
                            _ if reason == CloseReason::EndOfStream => {} // the normal end says nothing
                            "" => out!("bye reason={}", reason.as_str()),
                            detail => out!("bye reason={} detail=\"{detail}\"", reason.as_str()),
                        },
                        End::Vanished => out!("publisher_gone after_seq={}", sub.stats().next_seq - 1),
                        End::GaveUp { tries } => {
                            let why = sub.reconnect_error().map(ToString::to_string).unwrap_or_default();
                            out!(
                                "reconnect_failed tries={tries} after_ms={}: {why}",
                                args.reconnect_ms.unwrap_or_default()
                            )
                        }
                        End::Closed(_) => {}
                    }
                    end = Some(e.as_str());
                }
            }
        }
    }

    let stats = sub.stats();
    for (id, book) in books.iter_sorted() {
        out!("{}", summary_line(id, book, stats.gaps));
        for line in level_lines(id, book, args.levels) {
            out!("{line}");
        }
    }
    out!(
        "stream records={} heartbeats={heartbeats} book_records={book_records} gaps={} missed={} corrupt={} book_errors={book_errors} next_seq={} snapshots={} reconnects={} stale_book_errors={stale_book_errors} end={}",
        stats.records,
        stats.gaps,
        stats.missed,
        stats.corrupt,
        stats.next_seq,
        stats.snapshots_received,
        stats.reconnects,
        end.unwrap_or("unknown")
    );
    if let Some(l) = sub.latency() {
        out!("{}", latency_line(l));
    }
    // datagram receipt to poll: only when the publisher's ts_recv is a live receive stamp (never on a replay)
    if let Some(w) = sub.wire_latency() {
        out!("{}", wire_latency_line(w));
    }
    Ok(match end {
        Some("end_of_stream" | "publisher_shutdown") => 0,
        Some("interrupted") => 130,
        Some("publisher_gone") => 4,
        _ => 3,
    })
}
