//! `mdfan-nats-book`: the consumer example. Rebuilds one instrument's exact book from an `mdfan-bridge`
//! stream on NATS JetStream, from any host that reaches the server (no RDMA, no mdfan publisher): the last
//! snapshot of the instrument (stream sequence N), then its updates from N + 1 (the crate docs' rules, in
//! `mdfan_bridge::follow::Follower`), through an ordered consumer that survives a server restart.
//!
//! Prints `nats-book symbol=.. token=.. instrument_id=.. start_seq=.. snapshots=.. updates=.. records=.. max_update_records=.. gaps=..
//! stale_marks=.. stale=.. orders=.. levels_bid=.. levels_ask=.. bbo=BIDxSIZE/ASKxSIZE` when the bridge's `end`
//! message comes (or on SIGINT/SIGTERM, or after `--idle-exit-s` without a message), and with `--every-s` as it
//! goes. Exit status: 0 after `end` with a book known good; 1 on a setup error (named: a stream still not there
//! after 30 s, or `--idle-exit-s`, is one); 2 for bad usage; 4 when
//! the book is stale at the end; 5 after `--idle-exit-s` without the end (`ended=false`: the book as of the last
//! message); 130 on a signal. A consumer the server lost (a restart, a node that died) is made again from the
//! message after the last one taken.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::jetstream::consumer::DeliverPolicy;
use clap::Parser;
use futures::StreamExt;
use mdfan_bridge::follow::Follower;
use mdfan_bridge::message::Meta;
use mdfan_bridge::subject::{id_token, token, Subjects};

#[derive(Parser, Debug)]
#[command(name = "mdfan-nats-book", version, about = "One instrument's book from an mdfan-bridge JetStream stream")]
struct Args {
    /// NATS server URL(s), comma-separated.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// The bridge's stream.
    #[arg(long, default_value = "MDFAN")]
    stream: String,
    /// The bridge's subject prefix.
    #[arg(long, default_value = "md")]
    prefix: String,
    /// The instrument's symbol (as the publisher names it).
    #[arg(long, conflicts_with = "instrument_id")]
    symbol: Option<String>,
    /// The instrument's id, for an instrument the publisher names no symbol for (its subject token is _id<N>).
    #[arg(long)]
    instrument_id: Option<u32>,
    /// Print the book line this often too, s (0: only at the end).
    #[arg(long, default_value_t = 0)]
    every_s: u64,
    /// Stop after this long without a message, s (0: wait for the end).
    #[arg(long, default_value_t = 0)]
    idle_exit_s: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Ok(subjects) = Subjects::new(&args.prefix) else {
        eprintln!("mdfan-nats-book: --prefix {:?}: dot-separated tokens of A-Z a-z 0-9 _ -", args.prefix);
        return ExitCode::from(2);
    };
    let (tok, shown) = match (&args.symbol, args.instrument_id) {
        (Some(s), _) if s.is_empty() => {
            eprintln!("mdfan-nats-book: --symbol is empty");
            return ExitCode::from(2);
        }
        (Some(s), _) => (token(Some(s), 0), s.clone()),
        (None, Some(id)) => (id_token(id), id_token(id)),
        (None, None) => {
            eprintln!("mdfan-nats-book: name the instrument: --symbol or --instrument-id");
            return ExitCode::from(2);
        }
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&shutdown));
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mdfan-nats-book: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(follow(&args, &subjects, &tok, &shown, &shutdown)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mdfan-nats-book: {e}");
            ExitCode::from(1)
        }
    }
}

async fn follow(args: &Args, subjects: &Subjects, tok: &str, shown: &str, shutdown: &AtomicBool) -> Result<u8, String> {
    let urls: Vec<&str> = args.nats.split(',').map(str::trim).collect();
    let client = async_nats::ConnectOptions::new()
        .name("mdfan-nats-book")
        .max_reconnects(None)
        .connect(urls)
        .await
        .map_err(|e| format!("NATS {}: cannot connect: {e}", args.nats))?;
    let js = jetstream::new(client);
    // Not there yet (the bridge makes it): waited for, 30 s or --idle-exit-s; any other answer (a bad name) is
    // final.
    let wait_s = if args.idle_exit_s > 0 { args.idle_exit_s } else { 30 };
    let deadline = Instant::now() + Duration::from_secs(wait_s);
    let mut said = false;
    let stream = loop {
        match js.get_stream(&args.stream).await {
            Ok(s) => break s,
            Err(e) if e.to_string().contains("not found") && Instant::now() < deadline => {
                if shutdown.load(Ordering::Relaxed) {
                    return Ok(130);
                }
                if !said {
                    eprintln!("mdfan-nats-book: stream {}: {e} (waiting for it up to {wait_s} s)", args.stream);
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) if e.to_string().contains("not found") => {
                let mut names = js.stream_names();
                let mut there = Vec::new();
                while let Ok(Some(Ok(n))) = tokio::time::timeout(Duration::from_secs(2), names.next()).await {
                    there.push(n);
                }
                return Err(format!(
                    "NATS {}: stream {}: not there after {wait_s} s: the bridge's --stream (and its --prefix) must \
                     be given (streams there: {})",
                    args.nats,
                    args.stream,
                    if there.is_empty() { "none".to_owned() } else { there.join(", ") }
                ));
            }
            Err(e) => return Err(format!("NATS {}: stream {}: {e}", args.nats, args.stream)),
        }
    };
    let mut f = Follower::new();
    let mut instrument_id = args.instrument_id;
    // The last snapshot, if the bridge sent one: the updates after it follow. One that cannot be read (damaged,
    // forged) is passed over: the instrument's messages are read from the stream's start instead.
    let start_seq = match stream.get_last_raw_message_by_subject(&subjects.snapshot(tok)).await {
        Ok(m) => {
            let applied =
                Meta::read(|k| m.headers.get(k).map(|v| v.as_str())).and_then(|meta| f.apply(&meta, &m.payload));
            match applied {
                Ok(()) => {
                    instrument_id = instrument_id.or_else(|| header_id(&m.headers));
                    m.sequence + 1
                }
                Err(e) => {
                    eprintln!(
                        "mdfan-nats-book: {} seq {}: {e}: reading {tok} from the stream's start",
                        m.subject, m.sequence
                    );
                    f = Follower::new();
                    1
                }
            }
        }
        Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => 1,
        Err(e) => return Err(format!("stream {}: the last snapshot of {tok}: {e}", args.stream)),
    };
    let filter = subjects.instrument(tok);
    let mut messages = read_from(&stream, &filter, start_seq, shutdown).await?;
    let mut last_seq = start_seq.saturating_sub(1);
    let line = |f: &Follower, id: Option<u32>| {
        let s = f.stats();
        format!(
            "nats-book symbol={shown} token={tok} instrument_id={} start_seq={start_seq} snapshots={} updates={} records={} max_update_records={} gaps={} stale_marks={} skipped={} ended={} stale={} {}",
            id.map_or("-".to_owned(), |i| i.to_string()),
            s.snapshots,
            s.updates,
            s.records,
            s.max_update_records,
            s.gaps,
            s.stale_marks,
            s.skipped,
            f.ended(),
            f.stale(),
            id.map_or("orders=0 levels_bid=0 levels_ask=0 bbo=-/-".to_owned(), |i| f.summary(i))
        )
    };
    let (mut last_print, mut last_message, mut hinted) = (Instant::now(), Instant::now(), false);
    let mut last_check = Instant::now();
    loop {
        if shutdown.load(Ordering::Relaxed) {
            println!("{}", line(&f, instrument_id));
            return Ok(130);
        }
        let hint_after =
            Duration::from_secs(if args.idle_exit_s > 0 { (args.idle_exit_s / 2).clamp(1, 10) } else { 10 });
        if !hinted && last_seq == start_seq.saturating_sub(1) && last_message.elapsed() >= hint_after {
            hinted = true;
            eprintln!(
                "mdfan-nats-book: nothing on {filter} yet: the bridge names an instrument by its symbol \
                 ({tok} here) or, without one, _id<instrument_id> (--instrument-id); is the symbol the publisher's?"
            );
        }
        if args.idle_exit_s > 0 && last_message.elapsed() >= Duration::from_secs(args.idle_exit_s) {
            println!("{}", line(&f, instrument_id));
            return Ok(5);
        }
        if args.every_s > 0 && last_print.elapsed() >= Duration::from_secs(args.every_s) {
            println!("{}", line(&f, instrument_id));
            last_print = Instant::now();
        }
        let next = match tokio::time::timeout(Duration::from_millis(200), messages.next()).await {
            Err(_) => {
                // Quiet for a while: if the stream holds a message of this instrument past the last one taken,
                // the consumer is stuck (a cluster node died under it without a word): a new one from there.
                if last_message.elapsed() >= STUCK_AFTER && last_check.elapsed() >= STUCK_AFTER {
                    last_check = Instant::now();
                    let mut newest = 0;
                    for subject in [subjects.update(tok), subjects.snapshot(tok)] {
                        if let Ok(m) = stream.get_last_raw_message_by_subject(&subject).await {
                            newest = newest.max(m.sequence);
                        }
                    }
                    if newest > last_seq {
                        eprintln!(
                            "mdfan-nats-book: the stream holds {filter} up to sequence {newest}, the consumer gave {last_seq}: reading again from {}",
                            last_seq + 1
                        );
                        messages = read_from(&stream, &filter, last_seq + 1, shutdown).await?;
                    }
                }
                continue;
            }
            Ok(Some(Ok(m))) => m,
            failed => {
                // The consumer is gone (a server restart loses an ephemeral consumer; a node died): a new one
                // from the message after the last one taken.
                let why = match failed {
                    Ok(Some(Err(e))) => e.to_string(),
                    _ => "the message stream ended".to_owned(),
                };
                eprintln!("mdfan-nats-book: {why}: reading again from stream sequence {}", last_seq + 1);
                messages = read_from(&stream, &filter, last_seq + 1, shutdown).await?;
                continue;
            }
        };
        let seq = next.info().map(|i| i.stream_sequence).unwrap_or(0);
        if seq <= last_seq {
            continue;
        }
        last_seq = seq;
        last_message = Instant::now();
        let Some(headers) = next.headers.as_ref() else {
            eprintln!("mdfan-nats-book: {} seq {seq}: no headers: not an mdfan-bridge message", next.subject);
            continue;
        };
        instrument_id = instrument_id.or_else(|| header_id(headers));
        let meta = match Meta::read(|k| headers.get(k).map(|v| v.as_str())) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("mdfan-nats-book: {} seq {seq}: {e}", next.subject);
                continue;
            }
        };
        let was = f.instrument_id();
        if let Err(e) = f.apply(&meta, &next.payload) {
            eprintln!("mdfan-nats-book: {} seq {seq}: {e} (stale until the next snapshot)", next.subject);
        }
        // A snapshot of the symbol under another id (a new bridge run after a re-listing, or ITCH's daily stock
        // locates): the book is that instrument's now, and the line names it.
        if args.instrument_id.is_none() {
            if let (Some(was), Some(id)) = (was.or(instrument_id), f.instrument_id()) {
                if was != id {
                    eprintln!(
                        "mdfan-nats-book: {} seq {seq}: {shown} is instrument_id {id} from here (was {was}): the \
                         book follows it",
                        next.subject
                    );
                }
            }
            instrument_id = f.instrument_id().or(instrument_id);
        }
        if f.ended() {
            println!("{}", line(&f, instrument_id));
            return Ok(if f.stale() { 4 } else { 0 });
        }
    }
}

/// An ordered consumer of `filter` from stream sequence `from`, retried (every 500 ms) until the server takes it.
async fn read_from(
    stream: &jetstream::stream::Stream,
    filter: &str,
    from: u64,
    shutdown: &AtomicBool,
) -> Result<jetstream::consumer::pull::Ordered, String> {
    loop {
        let config = jetstream::consumer::pull::OrderedConfig {
            filter_subject: filter.to_owned(),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: from },
            ..Default::default()
        };
        let attempt = async {
            stream.create_consumer(config).await.map_err(|e| e.to_string())?.messages().await.map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(m) => return Ok(m),
            // A filter the stream does not take (a wrong --prefix) is final.
            Err(e) if e.contains("filter subject") => {
                return Err(format!("a consumer of {filter}: {e} (is --prefix the bridge's?)"))
            }
            Err(e) if !shutdown.load(Ordering::Relaxed) => {
                eprintln!("mdfan-nats-book: a consumer of {filter} from {from}: {e} (retrying)");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(format!("a consumer of {filter} from {from}: {e}")),
        }
    }
}

/// How long without a message before the stream is asked whether the consumer fell behind it.
const STUCK_AFTER: Duration = Duration::from_secs(3);

fn header_id(h: &async_nats::HeaderMap) -> Option<u32> {
    h.get(mdfan_bridge::message::INSTRUMENT_ID).and_then(|v| v.as_str().parse().ok())
}
