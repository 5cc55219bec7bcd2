//! What `mdfan-publisher` and `mdfan-relay` share: read the config, preflight, bind, run, print the report.
//!
//! `mdfan-publisher --config FILE`: replay a feed and fan it out to subscribers. `mdfan-relay --config FILE`:
//! the same with `format = "mdfan"` (another publisher's stream, `mdfan_publisher::feeds::relay`).
//!
//! Exit status: 0 after a complete replay, 1 on a config/feed/endpoint error (one line on stderr naming the
//! file, field or endpoint), 130 when stopped by SIGINT/SIGTERM (end of stream with the reason goes to every
//! subscriber first). SIGUSR1 prints every counter, each line starting with `counters ` (`counters subscriber ...`
//! per session, `counters replay ... end=running` for the hot loop). SIGHUP re-reads `[access]` (tokens and
//! entitlements, uids) from the config file, for new subscriptions; the hot loop is not touched. The first stdout
//! line is `publisher listening=HOST:PORT [unix=PATH] feed=... journal_records=N`.

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

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use mdfan_fabric::CloseReason;
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;

/// Fan market data out to every subscriber's ring: a file replayed (`format = "dbn"`, `"itch50"` or `"lobster"`), an
/// mdfan capture replayed (`format = "capture"`), a live CME MDP 3.0 channel from UDP lines A and B (`format =
/// "mdp3"`), live Nasdaq ITCH 5.0 over MoldUDP64 (`format = "itch50"` with [lines]), or another mdfan publisher's
/// stream (`format = "mdfan"`: mdfan-relay). SIGINT/SIGTERM: end of stream to every subscriber, exit 130;
/// SIGUSR1: print every counter; SIGHUP: re-read [access] for new subscriptions.
#[derive(Parser)]
#[command(version)]
pub struct Args {
    /// TOML config (see publisher/src/config.rs or ops/publisher.toml).
    #[arg(long)]
    config: PathBuf,
    /// Logs (stderr) as one JSON object per line, for journald or a log shipper; the audit log is target
    /// `mdfan_audit`.
    #[arg(long)]
    log_json: bool,
}

/// Runs the service as `role` (`mdfan-publisher`, or `mdfan-relay`, which refuses a config whose feed is not
/// `format = "mdfan"`) and exits with its status.
pub fn main_as(role: &'static str) -> ! {
    use clap::{CommandFactory, FromArgMatches};
    let args = match Args::from_arg_matches(&Args::command().name(role).bin_name(role).get_matches()) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr);
    if args.log_json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init();
    }
    let code = match run(&args, role) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{role}: error: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: &Args, role: &str) -> Result<i32, mdfan_publisher::PublisherError> {
    let cfg = Config::load(&args.config)?;
    if role == "mdfan-relay" && cfg.feed.format_name() != "mdfan" {
        eprintln!(
            "{role}: error: config {}: feed.format is \"{}\": a relay subscribes upstream (format = \"mdfan\", \
             connect = [\"HOST:PORT\"])",
            args.config.display(),
            cfg.feed.format_name()
        );
        return Ok(1);
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&shutdown)).expect("signal handlers install");
    }
    // Preflight: what would make the run fail or lie stops it here, one line each; tail-latency findings are
    // logged now and listed again after the report.
    let preflight = mdfan_publisher::preflight::Preflight::for_publisher(&cfg);
    if !preflight.failures.is_empty() {
        for f in &preflight.failures {
            eprintln!("{role}: preflight: {}", mdfan_publisher::preflight::line(f));
        }
        return Ok(1);
    }
    for f in &preflight.warnings {
        tracing::warn!(check = %f.id, found = %f.found, wanted = %f.wanted, fix = %f.fix, "host tuning (tail latency)");
    }
    let cfg_wait_for = cfg.publisher.wait_for_subscribers;
    let publisher = Publisher::bind(cfg)?;
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, publisher.dump_flag()).expect("SIGUSR1 handler installs");
    signal_hook::flag::register(signal_hook::consts::SIGHUP, publisher.reload_flag()).expect("SIGHUP handler installs");
    let unix = publisher.unix_path().map_or(String::new(), |p| format!(" unix={}", p.display()));
    out!(
        "publisher listening={}{unix} feed={} journal_records={}",
        publisher.local_addr(),
        publisher.feed_name(),
        publisher.journal_records()
    );
    let bar = progress_bar(publisher.progress(), cfg_wait_for);
    let report = publisher.run(shutdown)?;
    if let Some((done, thread)) = bar {
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = thread.join();
    }
    if report.end == CloseReason::Shutdown {
        tracing::info!(
            subscribers = report.sessions.iter().filter(|s| s.end == Some(CloseReason::Shutdown)).count(),
            records = report.records,
            "stopped by SIGINT/SIGTERM: end of stream (publisher_shutdown) sent to every attached subscriber; exiting 130"
        );
    }
    for s in &report.sessions {
        out!("{}", s.line());
    }
    out!(
        "replay records={} elapsed_ms={:.1} rate_per_s={:.0} subscribers={} cycle_p50_ns={} cycle_p999_ns={} cycle_max_ns={} end={}",
        report.records,
        report.replay_ns as f64 / 1e6,
        report.rate_per_s(),
        report.sessions.len(),
        report.cycle_p50_ns,
        report.cycle_p999_ns,
        report.cycle_max_ns,
        report.end.as_str()
    );
    out!("{}", report.clocks_line());
    for line in report.sessions.iter().filter_map(|s| s.send_completion_line()) {
        out!("{line}");
    }
    for live in &report.live {
        out!("{}", live.line());
        for l in &live.hw {
            out!("lines channel={} {l}", live.channel);
        }
    }
    if let Some(mold) = &report.moldudp64 {
        out!("{}", mold.line());
        for l in &mold.hw {
            out!("lines {l}");
        }
    }
    if let Some(lobster) = &report.lobster {
        out!("{}", lobster.line());
    }
    if let Some(capture) = &report.capture {
        out!("{}", capture.line());
    }
    if let Some(itch) = &report.itch_file {
        out!("{}", itch.line());
    }
    if let Some(relay) = &report.relay {
        out!("{}", relay.line());
    }
    for f in &preflight.warnings {
        out!("host_warning {}", mdfan_publisher::preflight::line(f));
    }
    if let Some(e) = &report.feed_error {
        // the replay stopped where the feed broke: the records before it went out, then end of stream (feed_error)
        eprintln!("{role}: error: {e}");
        return Ok(1);
    }
    Ok(if report.end == CloseReason::Shutdown { 130 } else { 0 })
}

/// A progress bar on stderr (records replayed of the feed's total), only when stderr is a terminal; updated 10
/// times a second from a thread of its own, never from the hot loop. Returns the flag that ends it and the thread.
fn progress_bar(
    progress: mdfan_publisher::Progress,
    wait_for: usize,
) -> Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return None;
    }
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let thread = std::thread::Builder::new()
        .name("mdfan-progress".into())
        .spawn(move || {
            let bar = indicatif::ProgressBar::new(progress.read());
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} records ({percent}%, eta {eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("waiting for {wait_for} subscribers"));
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let n = progress.records();
                if n > 0 {
                    bar.set_message("replay");
                }
                bar.set_length(progress.read()); // grows while the feed is read
                bar.set_position(n);
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            bar.finish_and_clear();
        })
        .ok()?;
    Some((done, thread))
}
