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
use mdfan_subscriber::report::{latency_line, nic_latency_line, wire_latency_line};
use mdfan_subscriber::{
    CloseReason, End, Event, FabricConfig, Health, Kind, PairHealth, PairSubscriber, Provider, Reconnect,
    SlowConsumerPolicy, SubscribeError, Subscriber, SubscriberConfig,
};

mod view;

use view::View;

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
    /// Publisher control endpoint: HOST:PORT, or unix:PATH for the publisher's Unix-domain socket on this host
    /// (publisher.listen_unix: the ring is passed as a file descriptor, so this may run as another user). Twice
    /// for a hot-hot pair (two publishers of the same lines): one stream merged by venue position, each leg with
    /// its own session (`leg_down` / `leg_up` lines, a `leg` line each at the end; the second publisher knows it
    /// as NAME-b).
    #[arg(long, default_value = "127.0.0.1:7700", value_parser = endpoint, action = clap::ArgAction::Append)]
    connect: Vec<String>,
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
    /// Only these instrument_ids (repeatable; with --symbol, both); default all.
    #[arg(long = "instrument")]
    instruments: Vec<u32>,
    /// Only the instruments of this symbol, e.g. ESH4 (repeatable; with --instrument, both), as the publisher
    /// names them; one it does not know makes it refuse (exit 1).
    #[arg(long = "symbol")]
    symbols: Vec<String>,
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
    /// Report the publisher silent after this many ms without a record or heartbeat (at least 1).
    #[arg(long, default_value_t = 50, value_parser = silence_timeout_ms)]
    silence_timeout_ms: u64,
    /// With two --connect: how many ms a leg may be silent before the merge stops counting on it to fill what
    /// the other leg lost (a shorter silence is only reported).
    #[arg(long, default_value_t = mdfan_subscriber::DEFAULT_LEG_GIVE_UP.as_millis() as u64)]
    leg_give_up_ms: u64,
    /// When the publisher goes away without ending the stream (or is not up yet), reconnect for up to this
    /// many ms; the books are rebuilt from its snapshot or replay.
    #[arg(long)]
    reconnect_ms: Option<u64>,
    /// A file holding this subscriber's token (first line), for a publisher that authenticates subscribers
    /// (its `[access]` list); the MDFAN_TOKEN environment variable is read when this is not given. Not a flag
    /// with the token itself: command lines are visible to every user of the host.
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// Also trust a publisher on this host running as this uid (root, your own user and user `mdfan` always
    /// are): one running as any other user is refused before the token or the ring is sent.
    #[arg(long)]
    publisher_uid: Option<u32>,
    /// Folder of this subscriber's counters file (`mdfan-subscriber-NAME-PID.counters`, read by `mdfan-stat`;
    /// removed at exit).
    #[arg(long, default_value = "/dev/shm")]
    counters_dir: std::path::PathBuf,
    /// Keep no counters file.
    #[arg(long)]
    no_counters: bool,
}

/// The doctor's start-up checks that would make this run fail or lie: room in `--shm-dir` for the ring (shm),
/// RLIMIT_MEMLOCK for the ring and an RDMA device (verbs). One line each, then exit 1; nothing is created. With
/// `--core`, returns the tail-latency findings for it (isolation, governor, ...), already warned about on stderr.
fn preflight(args: &Args) -> Result<Vec<String>, CliError> {
    use mdfan_doctor::{checks, Inputs, Rooted, Verdict};
    let verbs = args.fabric == Provider::Verbs;
    let inputs = Inputs {
        hot_cores: args.core.into_iter().collect(),
        ring_bytes: Some(mdfan_fabric::shm::segment_bytes(args.ring_slots) as u64),
        shm_dir: args.shm_dir.display().to_string(),
        device: args.device.clone(),
        need_rdma: verbs,
        ..Inputs::default()
    };
    let failed: Vec<String> = checks::preflight(&Rooted::new("/"), &inputs)
        .into_iter()
        .filter(|f| f.verdict == Verdict::Fail)
        // the shm folder matters to a shm ring only; locked memory to a registered (verbs) one only
        .filter(|f| if verbs { f.id != "host.shm" } else { f.id != "host.memlock" })
        .map(|f| format!("preflight {}: found {}; wanted {} (fix: {})", f.id, f.found, f.wanted, f.fix))
        .collect();
    if !failed.is_empty() {
        return Err(CliError::Preflight(failed.join("\nmdfan-subscribe: error: ")));
    }
    // With a hot core named, what costs it tail latency: a warning now, and a `host_warning` line at the end.
    if args.core.is_none() {
        return Ok(Vec::new());
    }
    let warnings: Vec<String> = checks::tail_warnings(&Rooted::new("/"), &inputs)
        .into_iter()
        .map(|f| format!("{}: found {}; wanted {} (fix: {})", f.id, f.found, f.wanted, f.fix))
        .collect();
    for w in &warnings {
        eprintln!("mdfan-subscribe: warning: host tuning (tail latency): {w}");
    }
    Ok(warnings)
}

/// The token from `--token-file` (its first line, trimmed) or MDFAN_TOKEN.
fn token(args: &Args) -> Result<Option<String>, CliError> {
    SubscriberConfig::token_from(args.token_file.as_deref()).map_err(CliError::Usage)
}

/// `--silence-timeout-ms`: a whole number of ms from 1 (0 would find the publisher silent between any two polls,
/// and say so again after every record).
fn silence_timeout_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => {
            Err("0 ms would report the publisher silent between any two records: give 1 or more (default 50)".into())
        }
        Ok(ms) => Ok(ms),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// `--connect`: HOST:PORT with a port number (a missing port is a usage error, not a connection failure), or
/// unix:PATH.
fn endpoint(text: &str) -> Result<String, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        return if path.starts_with('/') {
            Ok(text.to_owned())
        } else {
            Err(format!("{text:?}: a Unix-domain socket's path must be absolute (unix:/run/mdfan/NAME.sock)"))
        };
    }
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
    #[error("{0}")]
    Preflight(String),
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
    mdfan_wire::ring::check_slot_count(args.ring_slots as u64)
        .map_err(|e| CliError::Usage(format!("--ring-slots: {e}")))?;
    let host_warnings = preflight(args)?;
    if args.connect.len() > 2 {
        return Err(CliError::Usage(format!(
            "--connect given {} times: once for a publisher, twice for a hot-hot pair",
            args.connect.len()
        )));
    }
    if args.connect.len() == 2 && same_endpoint(&args.connect[0], &args.connect[1]) {
        return Err(CliError::Usage(format!(
            "--connect {} and --connect {} name one publisher: a hot-hot pair needs two",
            args.connect[0], args.connect[1]
        )));
    }
    if args.connect.len() == 2 && args.no_snapshot {
        return Err(CliError::Usage(
            "--no-snapshot with two --connect: a pair's legs join from a snapshot (the merge needs its position)"
                .into(),
        ));
    }
    let mut cfg = SubscriberConfig::new(&args.connect[0], &args.name);
    cfg.ring_slots = args.ring_slots;
    cfg.fabric = fabric(args)?;
    cfg.instruments = (!args.instruments.is_empty()).then(|| args.instruments.clone());
    cfg.symbols = (!args.symbols.is_empty()).then(|| args.symbols.clone());
    cfg.policy = match args.policy {
        Policy::Disconnect => SlowConsumerPolicy::Disconnect,
        Policy::Resync => SlowConsumerPolicy::Resync,
        Policy::Block => SlowConsumerPolicy::Block,
    };
    cfg.snapshot = !args.no_snapshot;
    cfg.token = token(args)?;
    cfg.publisher_uid = args.publisher_uid;
    cfg.counters_dir = (!args.no_counters).then(|| args.counters_dir.clone());
    cfg.silence_timeout = Duration::from_millis(args.silence_timeout_ms);
    // The library reconnects (every 100 ms, for up to --reconnect-ms) when the publisher vanishes or the transport
    // breaks, and retries the first connect while nobody listens yet.
    cfg.reconnect = args.reconnect_ms.map(|ms| Reconnect::within(Duration::from_millis(ms)));
    if let Some(b) = args.connect.get(1) {
        // Leg b is NAME-b to its publisher (and in its counters file's name, which must differ from leg a's).
        let name_b: String = format!("{}-b", args.name);
        let cfg_b = SubscriberConfig { endpoint: b.clone(), name: name_b, ..cfg.clone() };
        return run_pair(args, &cfg, &cfg_b, &stop, &host_warnings);
    }
    let mut sub = match Subscriber::connect_with_retry(&cfg, || stop.load(Ordering::Relaxed)) {
        Ok(sub) => sub.with_latency(),
        Err(SubscribeError::GaveUp { tries, budget, source }) => {
            return Err(CliError::GaveUp { tries, ms: budget.as_millis(), source: *source })
        }
        Err(e) => return Err(e.into()),
    };
    out!(
        "subscribed endpoint={} session={} ring_slots={} policy={} {} book={}",
        sub.endpoint(),
        sub.session_id(),
        cfg.ring_slots,
        sub.policy().as_str(),
        sub.feed(),
        sub.book_kind().as_str()
    );

    // The definitions the publisher sent (symbols, price precision), for printing: a copy, since the poll
    // callback cannot borrow `sub`.
    let checkpoints: BTreeSet<u64> = args.checkpoints.iter().copied().collect();
    let mut view = View::new(sub.symbology().clone(), checkpoints, args.bbo);
    let mut heartbeats = 0u64;
    let mut silent_reported = false;
    let mut idler = mdfan_subscriber::Idler::new(match args.idle {
        Idle::Spin => mdfan_subscriber::IdleStrategy::BusySpin,
        Idle::Yield => mdfan_subscriber::IdleStrategy::SpinThenYield { spins: 0 },
    });
    let mut end: Option<&'static str> = None;
    let mut out = Vec::<String>::new();
    while end.is_none() {
        let mut stale = sub.is_stale();
        let n = sub.poll(256, |event| on_event(event, &mut view, &mut out, &mut heartbeats, &mut end, &mut stale));
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
                    view.reset_books(sub.symbology().clone());
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
    for line in view.final_lines(stats.gaps, args.levels) {
        out!("{line}");
    }
    out!(
        "stream records={} heartbeats={heartbeats} book_records={} gaps={} missed={} corrupt={} book_errors={} next_seq={} snapshots={} reconnects={} stale_book_errors={} end={}",
        stats.records,
        view.book_records,
        stats.gaps,
        stats.missed,
        stats.corrupt,
        view.book_errors,
        stats.next_seq,
        stats.snapshots_received,
        stats.reconnects,
        view.stale_book_errors,
        end.unwrap_or("unknown")
    );
    if let Some(l) = sub.latency() {
        out!("{}", latency_line(l));
        // the NIC's completion timestamps, or once that the device has none (shm, Soft-RoCE)
        out!("{}", nic_latency_line(sub.nic_latency()));
    }
    // datagram receipt to poll: only when the publisher's ts_recv is a live receive stamp (never on a replay)
    if let Some(w) = sub.wire_latency() {
        out!("{}", wire_latency_line(w));
    }
    for w in &host_warnings {
        out!("host_warning {w}");
    }
    Ok(match end {
        Some("end_of_stream" | "publisher_shutdown") => 0,
        Some("interrupted") => 130,
        Some("publisher_gone") => 4,
        _ => 3,
    })
}

/// What the CLI does with each event of the stream (one publisher's, or a pair's merged): books, lines to print.
fn on_event(
    event: Event<'_>,
    view: &mut View,
    out: &mut Vec<String>,
    heartbeats: &mut u64,
    end: &mut Option<&'static str>,
    stale: &mut bool,
) {
    match event {
        Event::Record(r) => match r.kind() {
            Some(Kind::EndOfStream) => {
                *end = Some(CloseReason::from_u32(r.size).map_or("end_of_stream", CloseReason::as_str))
            }
            Some(Kind::Heartbeat) => *heartbeats += 1,
            Some(Kind::SnapshotBegin) => {
                view.snapshot_begin(r); // empties every book
                out.push(format!("snapshot_begin seq={} instruments={} position={}", r.seq, r.size, r.order_id));
            }
            Some(Kind::SnapshotEnd) => {
                *stale = false;
                out.push(format!("snapshot_end seq={} position={}", r.seq, r.order_id));
            }
            _ => view.record(r, *stale, out),
        },
        Event::Gap { expected, got } => {
            *stale = true; // the books are stale until the snapshot this gap asks for has arrived
            out.push(format!("gap expected_seq={expected} got_seq={got}"));
        }
        Event::Corrupt { seq, slot_seq } => out.push(format!("corrupt seq={seq} slot_seq={slot_seq}")),
        Event::Stale { seq, expected } => out.push(format!("stale seq={seq} expected_seq={expected}")),
        Event::Closed(_) => {} // maintain reports it, with what follows from it (reconnect or end)
    }
}

/// Whether two `--connect` values name one publisher: the same text, the same resolved TCP addresses
/// (`localhost:7700` and `127.0.0.1:7700`), or the same Unix-domain socket file.
fn same_endpoint(a: &str, b: &str) -> bool {
    use std::net::ToSocketAddrs;
    if a == b {
        return true;
    }
    match (a.strip_prefix("unix:"), b.strip_prefix("unix:")) {
        (Some(x), Some(y)) => std::fs::canonicalize(x).ok().is_some_and(|x| std::fs::canonicalize(y).ok() == Some(x)),
        (None, None) => {
            let resolve = |e: &str| e.to_socket_addrs().map(|i| i.collect::<Vec<_>>()).unwrap_or_default();
            let (x, y) = (resolve(a), resolve(b));
            x.iter().any(|p| y.contains(p))
        }
        _ => false,
    }
}

/// The leg's name in lines: `a` for the first `--connect`, `b` for the second.
fn leg_name(leg: usize) -> &'static str {
    ["a", "b"][leg.min(1)]
}

/// `--connect A --connect B`: one stream from a hot-hot pair ([`PairSubscriber`]).
fn run_pair(
    args: &Args,
    cfg_a: &SubscriberConfig,
    cfg_b: &SubscriberConfig,
    stop: &AtomicBool,
    host_warnings: &[String],
) -> Result<i32, CliError> {
    let mut pair = PairSubscriber::connect(cfg_a, cfg_b)?;
    pair.set_leg_give_up(Duration::from_millis(args.leg_give_up_ms));
    for leg in 0..2 {
        match pair.leg(leg) {
            Some(sub) => out!(
                "subscribed leg={} endpoint={} session={} ring_slots={} policy={} book={}",
                leg_name(leg),
                sub.endpoint(),
                sub.session_id(),
                cfg_a.ring_slots,
                sub.policy().as_str(),
                sub.book_kind().as_str()
            ),
            None => out!(
                "leg_down leg={} endpoint={}: {}",
                leg_name(leg),
                [cfg_a, cfg_b][leg].endpoint,
                pair.leg_error(leg).map(ToString::to_string).unwrap_or_default()
            ),
        }
    }
    let checkpoints: BTreeSet<u64> = args.checkpoints.iter().copied().collect();
    let mut view = View::new(pair.symbology().cloned().unwrap_or_default(), checkpoints, args.bbo);
    let (mut heartbeats, mut silent_reported) = (0u64, false);
    let mut idler = mdfan_subscriber::Idler::new(match args.idle {
        Idle::Spin => mdfan_subscriber::IdleStrategy::BusySpin,
        Idle::Yield => mdfan_subscriber::IdleStrategy::SpinThenYield { spins: 0 },
    });
    let mut end: Option<&'static str> = None;
    let mut out = Vec::<String>::new();
    while end.is_none() {
        let mut stale = pair.is_stale();
        let n = pair.poll(256, |event| on_event(event, &mut view, &mut out, &mut heartbeats, &mut end, &mut stale));
        for line in out.drain(..) {
            match pair.last_gap().filter(|_| line.starts_with("gap ")) {
                // why the merge gave it, and what the other leg was
                Some(g) => out!("{line} cause={} leg={} other={}", g.cause.as_str(), leg_name(g.leg), g.other.as_str()),
                None => out!("{line}"),
            }
        }
        idler.idle(n);
        if let Some(health) = pair.maintain_if_due() {
            if stop.load(Ordering::Relaxed) {
                end = Some("interrupted");
            }
            match health {
                PairHealth::Ok => silent_reported = false,
                PairHealth::Silent(d) => {
                    if !silent_reported {
                        silent_reported = true;
                        out!("publishers_silent ms={}", d.as_millis());
                    }
                }
                PairHealth::LegDown { leg, end: None } => {
                    out!("leg_down leg={} after_seq={}", leg_name(leg), pair.stats().next_seq - 1)
                }
                PairHealth::LegDown { leg, end: Some(e) } => {
                    out!("leg_down leg={} after_seq={} end={}", leg_name(leg), pair.stats().next_seq - 1, e.as_str())
                }
                PairHealth::LegUp { leg, session_id } => out!("leg_up leg={} session={session_id}", leg_name(leg)),
                PairHealth::Ended(e) => {
                    if end.is_none() {
                        end = Some(e.as_str());
                    }
                }
            }
        }
    }
    let stats = pair.stats();
    for line in view.final_lines(stats.gaps, args.levels) {
        out!("{line}");
    }
    out!(
        "stream records={} heartbeats={heartbeats} book_records={} gaps={} missed=0 corrupt=0 book_errors={} next_seq={} snapshots={} divergences={} stale_book_errors={} end={}",
        stats.records,
        view.book_records,
        stats.gaps,
        view.book_errors,
        stats.next_seq,
        stats.snapshots,
        stats.divergences,
        view.stale_book_errors,
        end.unwrap_or("unknown")
    );
    for leg in 0..2 {
        let l = pair.leg_stats(leg);
        out!(
            "leg leg={} endpoint={} state={} delivered_first={} duplicates={} uncompared={} divergences={} quarantined={} benched={} waited={} held={} stale_filled={} snapshots_dropped={} recovery_dropped={} gaps={} downs={} max_trail_records={}",
            leg_name(leg),
            [cfg_a, cfg_b][leg].endpoint,
            pair.leg_state(leg).as_str(),
            l.delivered_first,
            l.duplicates,
            l.uncompared,
            l.divergences,
            l.quarantined,
            l.benched,
            l.waited,
            l.held,
            l.stale_filled,
            l.snapshots_dropped,
            l.recovery_dropped,
            l.gaps,
            l.downs,
            l.max_trail_records
        );
    }
    if let Some(d) = pair.last_divergence() {
        out!(
            "divergence leg={} venue_pos={} instrument_id={} delivered={:?} other={:?}",
            leg_name(d.leg),
            d.delivered.venue_pos,
            d.delivered.instrument_id,
            d.delivered,
            d.this_leg
        );
    }
    for w in host_warnings {
        out!("host_warning {w}");
    }
    Ok(match end {
        Some("end_of_stream" | "publisher_shutdown") => 0,
        Some("interrupted") => 130,
        Some("publisher_gone") => 4,
        _ => 3,
    })
}
