//! `mdfan-capture`: keeps what an mdfan publisher sends on disk, in mdfan's capture format
//! (`mdfan_feed::capture`, docs/CAPTURE.md), and reads captures back.
//!
//! - `mdfan-capture record --connect EP --dir DIR --name NAME`: subscribes as any strategy does (the library,
//!   policy `resync` by default) and writes every record it receives (heartbeats aside), each gap, and how it
//!   stopped, in checksummed blocks; segments rotate by size and time and are closed (indexed, zstd-compressed)
//!   on a thread of their own. A segment a killed earlier run left open is cut after its last whole block first,
//!   and said so (`capture recovered ...`).
//! - `mdfan-capture report DIR`: what a capture holds (records per kind, sizes, gaps, first and last times).
//! - `mdfan-capture cat DIR [--follow]`: its records, one line each (following the segment being written).
//! - `mdfan-capture export DIR --parquet FILE --dbn FILE.dbn.zst`: the capture as one Parquet file, a row per
//!   record (module `parquet`), and/or as DBN MBO (module `dbn`).
//!
//! Exit status: 0 after end of stream (or a whole read); 1 on a setup or write error (one line on stderr naming
//! the endpoint or the file and the bytes); 2 for bad usage; 3 when the session ended otherwise (dropped,
//! publisher gone); 130 on SIGINT/SIGTERM.

mod dbn;
mod output;
mod parquet;
#[cfg(test)]
mod test_support;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mdfan_feed::capture::{
    close_segment, CaptureLock, Fsync, Item, Reader, SegmentMeta, StopReason, Writer, WriterConfig,
};
use mdfan_subscriber::{Event, Health, Kind, SlowConsumerPolicy, Subscriber, SubscriberConfig};

#[derive(Parser)]
#[command(name = "mdfan-capture", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Subscribe and write the stream to DIR as it arrives.
    Record {
        /// Publisher control endpoint: HOST:PORT, or unix:PATH (a relay's too). Twice for a hot-hot pair: the
        /// stream merged by venue position, each leg with its own session (the second publisher knows it as
        /// SESSION-b), a leg that goes away tried again for 60 s while the other carries the stream.
        #[arg(long, default_value = "127.0.0.1:7700", action = clap::ArgAction::Append)]
        connect: Vec<String>,
        /// The capture's folder (it must exist).
        #[arg(long)]
        dir: PathBuf,
        /// The capture's name: segments are NAME-NNNNNN.mdcap (letters, digits, '_', '.', '-' not at the end).
        #[arg(long, default_value = "capture", value_parser = capture_name)]
        name: String,
        /// The session's name at the publisher (default mdfan-capture-NAME: one per capture; the publisher refuses
        /// a second session of the same name unless it allows duplicate names).
        #[arg(long)]
        session: Option<String>,
        /// Ring size in slots (power of two; 64 B each). Default 524,288 (32 MiB, about 90 ms of the fastest
        /// replay): four times a strategy's, since a recorder runs unpinned and must ride out being descheduled
        /// on a shared host (at 128 Ki slots it missed records of a max-pace replay on a 2-core host).
        #[arg(long, default_value_t = 524_288)]
        ring_slots: u32,
        /// Slow-consumer policy: resync (default: skipped records come back as a snapshot, the gap recorded),
        /// disconnect, block (where the publisher allows it).
        #[arg(long, default_value = "resync", value_parser = policy)]
        policy: SlowConsumerPolicy,
        /// Close a segment once it holds this many MiB.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
        rotate_mb: u64,
        /// ... or once it has been open this many seconds (0: never by time).
        #[arg(long, default_value_t = 3600)]
        rotate_s: u64,
        /// Records a block holds (1 to 4096).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
        block_records: u64,
        /// The longest a record waits before its block is written, ms.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        block_ms: u64,
        /// When the capture is made durable: block (fsync after every block), every_ms:N, rotation.
        #[arg(long, default_value = "every_ms:100", value_parser = fsync)]
        fsync: Fsync,
        /// Leave closed segments uncompressed.
        #[arg(long)]
        no_compress: bool,
        /// A file holding the session's token (first line), for a publisher that authenticates subscribers (its
        /// `[access]` list); MDFAN_TOKEN is read when this is not given.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Folder for the ring file (the publisher's fabric.shm_dir).
        #[arg(long, default_value = "/dev/shm")]
        shm_dir: PathBuf,
    },
    /// What a capture holds: records per kind and their sizes, gaps, first and last times, how it stopped.
    Report {
        /// The capture's folder.
        dir: PathBuf,
        /// The capture's name (default: the folder's only one).
        #[arg(long)]
        name: Option<String>,
    },
    /// Write a capture for research: one Parquet file (a row per record; gaps and symbology in the file's
    /// metadata) and/or, for an order-level capture, a DBN MBO file (docs/CAPTURE.md, "Exports").
    #[command(group(clap::ArgGroup::new("to").required(true).multiple(true).args(["parquet", "dbn"])))]
    Export {
        /// The capture's folder.
        dir: PathBuf,
        /// The capture's name (default: the folder's only one).
        #[arg(long)]
        name: Option<String>,
        /// The Parquet file to write (it must not exist; written as FILE.partial.PID and put in place when whole).
        #[arg(long, value_name = "FILE")]
        parquet: Option<PathBuf>,
        /// Rows at most per Parquet row group.
        #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 28)))]
        row_group_rows: u64,
        /// A Parquet row group ends where ts_recv enters a later span of this many seconds than any before it (0:
        /// by rows only).
        #[arg(long, default_value_t = 3600)]
        row_group_s: u64,
        /// The DBN MBO file to write (zstd-compressed when it ends in .zst; it must not exist).
        #[arg(long, value_name = "FILE")]
        dbn: Option<PathBuf>,
        /// The dataset the DBN metadata names (e.g. GLBX.MDP3); default the venue the capture's feed named
        /// (its segment header), needed when it named none.
        #[arg(long, default_value = "", hide_default_value = true, requires = "dbn")]
        dataset: String,
    },
    /// A capture's records, one line each.
    Cat {
        /// The capture's folder.
        dir: PathBuf,
        /// The capture's name (default: the folder's only one).
        #[arg(long)]
        name: Option<String>,
        /// Follow the segment being written (until SIGINT/SIGTERM).
        #[arg(long)]
        follow: bool,
    },
}

fn capture_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
        && !s.ends_with('-');
    ok.then(|| s.to_owned()).ok_or_else(|| format!("{s:?}: 1 to 64 of A-Z a-z 0-9 _ . - (not ending in -)"))
}

fn policy(s: &str) -> Result<SlowConsumerPolicy, String> {
    match s {
        "resync" => Ok(SlowConsumerPolicy::Resync),
        "disconnect" => Ok(SlowConsumerPolicy::Disconnect),
        "block" => Ok(SlowConsumerPolicy::Block),
        _ => Err(format!("{s:?}: resync, disconnect or block")),
    }
}

fn fsync(s: &str) -> Result<Fsync, String> {
    Fsync::parse(s).ok_or_else(|| format!("{s:?}: block, every_ms:N (N > 0) or rotation"))
}

/// `CLOCK_REALTIME`, ns since the UNIX epoch.
fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&shutdown)) {
            eprintln!("mdfan-capture: cannot install the SIGINT/SIGTERM handler: {e}");
            return ExitCode::from(1);
        }
    }
    let result = match args.command {
        Command::Record {
            connect,
            dir,
            name,
            session,
            ring_slots,
            policy,
            rotate_mb,
            rotate_s,
            block_records,
            block_ms,
            fsync,
            no_compress,
            token_file,
            shm_dir,
        } => {
            // At most 64 bytes (a session name's limit); the name is ASCII.
            let session = session.unwrap_or_else(|| format!("mdfan-capture-{name}").chars().take(62).collect());
            let mut cfg = SubscriberConfig::new(&connect[0], &session);
            cfg.ring_slots = ring_slots;
            cfg.policy = policy;
            cfg.fabric = mdfan_subscriber::FabricConfig::Shm { dir: shm_dir };
            let token = match SubscriberConfig::token_from(token_file.as_deref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("mdfan-capture: {e}");
                    return ExitCode::from(2);
                }
            };
            cfg.token = token;
            let pair = match connect.as_slice() {
                [_] => None,
                [a, b] if a != b => {
                    let leg = |endpoint: &str, name: String| SubscriberConfig {
                        endpoint: endpoint.to_owned(),
                        name,
                        reconnect: Some(mdfan_subscriber::Reconnect::within(Duration::from_secs(60))),
                        ..cfg.clone()
                    };
                    Some((leg(a, session.clone()), leg(b, format!("{session}-b"))))
                }
                _ => {
                    eprintln!(
                        "mdfan-capture: --connect: once for a publisher, twice (two publishers) for a hot-hot pair"
                    );
                    return ExitCode::from(2);
                }
            };
            let writer = WriterConfig {
                dir,
                name,
                rotate_bytes: rotate_mb.saturating_mul(1 << 20), // a huge value: never by size
                rotate_ns: rotate_s.saturating_mul(1_000_000_000),
                block_records: block_records as usize,
                block_ms,
                fsync,
                compress: !no_compress,
            };
            record(&cfg, pair.as_ref(), writer, &shutdown)
        }
        Command::Report { dir, name } => mdfan_feed::capture::report(&dir, name.as_deref())
            .map(|r| {
                let mut out = std::io::stdout().lock();
                for l in r.lines() {
                    if writeln!(out, "{l}").is_err() {
                        break; // a reader that went away (`| head`): nothing more to say
                    }
                }
                0
            })
            .map_err(|e| e.to_string()),
        Command::Export { dir, name, parquet: to_parquet, row_group_rows, row_group_s, dbn: to_dbn, dataset } => {
            export(
                &dir,
                name.as_deref(),
                to_parquet.as_deref(),
                row_group_rows,
                row_group_s,
                to_dbn.as_deref(),
                &dataset,
            )
        }
        Command::Cat { dir, name, follow } => cat(&dir, name.as_deref(), follow, &shutdown),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mdfan-capture: {e}");
            ExitCode::from(1)
        }
    }
}

/// Closes segments handed to it (index, zstd) off the recording thread; returns the errors.
type Closer = (std::sync::mpsc::Sender<PathBuf>, std::thread::JoinHandle<Vec<String>>);

fn closer(compress: bool) -> Result<Closer, String> {
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    let thread = std::thread::Builder::new()
        .name("mdfan-capture-close".into())
        .spawn(move || {
            let mut errors = Vec::new();
            while let Ok(path) = rx.recv() {
                if let Err(e) = close_segment(&path, compress) {
                    errors.push(e.to_string());
                }
            }
            errors
        })
        .map_err(|e| format!("cannot start the segment-closing thread: {e}"))?;
    Ok((tx, thread))
}

/// What a recorder subscribes with: one publisher, or a hot-hot pair merged by venue position.
enum Session {
    One(Box<Subscriber>),
    Pair(Box<mdfan_subscriber::PairSubscriber>),
}

impl Session {
    fn connect(
        cfg: &SubscriberConfig,
        pair: Option<&(SubscriberConfig, SubscriberConfig)>,
        shutdown: &AtomicBool,
    ) -> Result<Session, String> {
        match pair {
            None => connect(cfg, shutdown).map(|s| Session::One(Box::new(s))),
            Some((a, b)) => mdfan_subscriber::PairSubscriber::connect(a, b)
                .map(|p| Session::Pair(Box::new(p)))
                .map_err(|e| e.to_string()),
        }
    }

    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: F) -> usize {
        match self {
            Session::One(s) => s.poll(max, f),
            Session::Pair(p) => p.poll(max, f),
        }
    }

    /// How the stream ended, once it has (a pair: a leg's loss is said on stderr, and the stream goes on).
    fn ended(&mut self) -> Option<Option<mdfan_subscriber::CloseReason>> {
        match self {
            Session::One(s) => match s.maintain_if_due() {
                Some(Health::Ended(end)) => Some(end.reason()),
                _ => None,
            },
            Session::Pair(p) => match p.maintain_if_due() {
                Some(mdfan_subscriber::PairHealth::Ended(end)) => Some(end.reason()),
                Some(mdfan_subscriber::PairHealth::LegDown { leg, end }) => {
                    let end = end.map_or("reconnecting", |e| e.as_str());
                    let (name, other) = (["a", "b"][leg], ["a", "b"][1 - leg]);
                    if p.leg(1 - leg).is_some() {
                        eprintln!("mdfan-capture: leg {name} down ({end}): leg {other} carries the stream");
                    } else {
                        eprintln!(
                            "mdfan-capture: leg {name} down ({end}), and leg {other} is down too: nothing carries \
                             the stream until one comes back"
                        );
                    }
                    None
                }
                Some(mdfan_subscriber::PairHealth::LegUp { leg, .. }) => {
                    eprintln!("mdfan-capture: leg {} up again: it rejoins the merge", ["a", "b"][leg]);
                    None
                }
                _ => None,
            },
        }
    }

    /// The subscriber of a leg that has a session (the first one's first).
    fn any_leg(&self) -> Option<&Subscriber> {
        match self {
            Session::One(s) => Some(s),
            Session::Pair(p) => (0..2).find_map(|i| p.leg(i)),
        }
    }

    fn endpoint(&self) -> String {
        match self {
            Session::One(s) => s.endpoint().to_owned(),
            Session::Pair(p) => {
                (0..2).filter_map(|i| p.leg(i).map(|s| s.endpoint().to_owned())).collect::<Vec<_>>().join(",")
            }
        }
    }

    fn symbology(&self) -> Vec<mdfan_wire::InstrumentDef> {
        match self {
            Session::One(s) => s.symbology().iter().cloned().collect(),
            Session::Pair(p) => p.symbology().map(|s| s.iter().cloned().collect()).unwrap_or_default(),
        }
    }

    /// Gaps the session's stream had (a pair: those both legs lacked).
    fn gaps(&self) -> u64 {
        match self {
            Session::One(s) => s.stats().gaps,
            Session::Pair(p) => p.stats().gaps,
        }
    }
}

/// Subscribes; while the publisher still holds a session of this name (an earlier run just killed: the
/// publisher notices its closed connection within a pass or two), tries again for up to 5 s.
fn connect(cfg: &SubscriberConfig, shutdown: &AtomicBool) -> Result<Subscriber, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match Subscriber::connect(cfg) {
            Err(mdfan_subscriber::SubscribeError::Rejected { reason, .. })
                if reason.contains("is attached already")
                    && std::time::Instant::now() < deadline
                    && !shutdown.load(Ordering::Relaxed) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other.map_err(|e| e.to_string()),
        }
    }
}

/// What the session thread hands the writing thread.
enum Handoff {
    Record(mdfan_subscriber::BookUpdate),
    Gap(u64, u64),
}

/// Records the session thread may hand over before it stops polling (the ring then holds the rest): 512 Ki,
/// 64 MiB, about 70 ms of the fastest replay.
const HANDOFF_ITEMS: usize = 1 << 19;

/// What the writing thread ends with.
struct Written {
    stats: mdfan_feed::capture::WriterStats,
    failure: Option<String>,
    /// When the last record was written (the stop block follows).
    last_record: Option<std::time::Instant>,
    /// The writing thread's CPU time from its first batch of records to the end of the stream, ns.
    cpu_ns: u64,
}

/// The calling thread's CPU time so far, ns: the kernel's per-thread clock (what
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` reads), from `/proc/thread-self/schedstat`; 0 where unreadable.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The writing thread: takes what the session thread hands over, writes blocks, closes segments (on the closing
/// thread), and, once the session thread is done and nothing is left, writes the stop block.
fn write_loop(
    mut w: Writer,
    mut rx: rtrb::Consumer<Handoff>,
    to_closer: std::sync::mpsc::Sender<PathBuf>,
    failed: &AtomicBool,
    polling_done: &AtomicBool,
    end_reason: &std::sync::atomic::AtomicU8,
) -> Written {
    let mut failure = None;
    let mut last_record = None;
    let mut cpu_first = None;
    // Nothing here waits on the wire: an empty hand-off sleeps at once (doubling to 1 ms), leaving the cores to
    // the threads that do.
    let mut idler = mdfan_subscriber::Idler::new(mdfan_subscriber::IdleStrategy::Backoff {
        spins: 0,
        yields: 0,
        max_park: Duration::from_millis(1),
    });
    loop {
        let done = polling_done.load(Ordering::Acquire);
        let now = now_ns();
        let mut n = 0;
        while let Ok(item) = rx.pop() {
            n += 1;
            let r = match item {
                Handoff::Record(r) => w.record(&r, now),
                Handoff::Gap(expected, got) => w.gap(expected, got, now),
            };
            if let Err(e) = r {
                failure = Some(e.to_string());
                break;
            }
            if n == 4096 {
                break; // time moves on for the tick
            }
        }
        if n > 0 {
            last_record = Some(std::time::Instant::now());
            cpu_first.get_or_insert_with(thread_cpu_ns);
        }
        if failure.is_none() {
            if let Err(e) = w.tick(now) {
                failure = Some(e.to_string());
            }
        }
        if failure.is_some() {
            failed.store(true, Ordering::Release);
            break;
        }
        for closed in w.take_closed() {
            let _ = to_closer.send(closed);
        }
        if done && n == 0 && rx.is_empty() {
            break;
        }
        idler.idle(n);
    }
    // From the first record to the end of the stream (the idle tail after the last record parks, at most 1 ms
    // a sleep).
    let cpu_ns = cpu_first.map_or(0, |first| thread_cpu_ns().saturating_sub(first));
    let end = if failure.is_some() {
        StopReason::WriteFailed
    } else {
        match end_reason.load(Ordering::Relaxed) {
            x if x == StopReason::EndOfStream as u8 => StopReason::EndOfStream,
            x if x == StopReason::SessionEnded as u8 => StopReason::SessionEnded,
            x if x == StopReason::WriteFailed as u8 => StopReason::WriteFailed,
            _ => StopReason::Interrupted,
        }
    };
    let before = w.stats();
    let stats = match w.stop(end, now_ns()) {
        Ok((stats, last)) => {
            for p in last {
                let _ = to_closer.send(p);
            }
            stats
        }
        Err(e) => {
            failure.get_or_insert(e.to_string());
            before
        }
    };
    drop(to_closer);
    Written { stats, failure, last_record, cpu_ns }
}

fn record(
    cfg: &SubscriberConfig,
    pair: Option<&(SubscriberConfig, SubscriberConfig)>,
    writer: WriterConfig,
    shutdown: &AtomicBool,
) -> Result<u8, String> {
    // The folder and the lock first: a recorder that cannot write never takes a session at the publisher.
    if !writer.dir.is_dir() {
        let what = if writer.dir.exists() { "not a folder" } else { "no such folder (it must exist)" };
        return Err(format!("--dir {}: {what}", writer.dir.display()));
    }
    let lock = CaptureLock::acquire(&writer.dir, &writer.name).map_err(|e| e.to_string())?;
    let mut sub = Session::connect(cfg, pair, shutdown)?;
    let (book, feed) = sub
        .any_leg()
        .map_or((mdfan_subscriber::BookKind::Unknown, Default::default()), |s| (s.book_kind(), s.feed().clone()));
    let meta = SegmentMeta {
        format_version: mdfan_feed::capture::FORMAT_VERSION,
        name: String::new(),
        segment: 0,
        created_ns: 0,
        source: sub.endpoint(),
        session: cfg.name.clone(),
        book: format!("{book:?}").to_lowercase(),
        feed,
        symbology: sub.symbology(),
        fsync: String::new(),
        first_record: 0,
        run_id: None,
        run_first_segment: None,
    };
    let (compress, fsync, dir, name) = (writer.compress, writer.fsync, writer.dir.clone(), writer.name.clone());
    let (w, recovered) = Writer::open_locked(lock, writer, meta, now_ns()).map_err(|e| e.to_string())?;
    let (to_closer, closing) = closer(compress)?;
    if let Some((path, bytes)) = &recovered.removed {
        println!(
            "capture recovered segment={} removed: it ends inside its own header ({bytes} bytes, no record); the next segment takes its number",
            path.display()
        );
    }
    for plain in &recovered.twins_removed {
        println!(
            "capture recovered segment={} removed: its compressed twin is whole (a close interrupted before it \
             removed the plain file)",
            plain.display()
        );
    }
    for r in recovered.recovered {
        println!(
            "capture recovered segment={} kept_blocks={} kept_records={} cut_bytes={}",
            r.path.display(),
            r.scan.blocks,
            r.scan.records,
            r.cut_bytes
        );
        let _ = to_closer.send(r.path);
    }
    println!(
        "capture recording dir={} name={name} segment={} fsync={}",
        dir.display(),
        w.path().display(),
        fsync.as_string()
    );
    // The session thread (this one) only polls and hands records over: a writer thread blocks, CRCs and writes
    // them, so a write the kernel makes wait (dirty pages, a slow disk) never stalls the poll. What the hand-off
    // cannot hold waits in the ring, then the publisher's policy applies.
    let (mut tx, rx) = rtrb::RingBuffer::<Handoff>::new(HANDOFF_ITEMS);
    let failed = std::sync::Arc::new(AtomicBool::new(false));
    let polling_done = std::sync::Arc::new(AtomicBool::new(false));
    let end_reason = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(StopReason::Interrupted as u8));
    let writing = {
        let (failed, polling_done, end_reason) = (failed.clone(), polling_done.clone(), end_reason.clone());
        std::thread::Builder::new()
            .name("mdfan-capture-write".into())
            .spawn(move || write_loop(w, rx, to_closer, &failed, &polling_done, &end_reason))
            .map_err(|e| format!("cannot start the writing thread: {e}"))?
    };
    // A recorder must not take a core from the publisher or the strategies on its host, nor fall a ring behind
    // while the stream flows: a few yields, then sleeps doubling to 1 ms (its ring holds ~90 ms of max replay).
    let mut idler = mdfan_subscriber::Idler::new(mdfan_subscriber::IdleStrategy::Backoff {
        spins: 0,
        yields: 16,
        max_park: Duration::from_millis(1),
    });
    let mut first_record: Option<std::time::Instant> = None;
    let mut session_cpu_first = 0;
    let end = loop {
        if shutdown.load(Ordering::Relaxed) {
            break StopReason::Interrupted;
        }
        if failed.load(Ordering::Acquire) {
            break StopReason::WriteFailed;
        }
        // each completion gives at most a gap and a record
        let room = tx.slots() / 2;
        let n = if room == 0 {
            0
        } else {
            sub.poll(room.min(1024), |e| {
                let item = match e {
                    Event::Record(r) if r.kind() == Some(Kind::Heartbeat) => return,
                    Event::Record(r) => {
                        first_record.get_or_insert_with(|| {
                            session_cpu_first = thread_cpu_ns();
                            std::time::Instant::now()
                        });
                        Handoff::Record(*r)
                    }
                    Event::Gap { expected, got } => Handoff::Gap(expected, got),
                    _ => return,
                };
                let _ = tx.push(item); // room was checked
            })
        };
        idler.idle(n);
        match sub.ended() {
            Some(Some(mdfan_subscriber::CloseReason::EndOfStream)) => break StopReason::EndOfStream,
            Some(_) => break StopReason::SessionEnded,
            None => continue,
        }
    };
    let end = if failed.load(Ordering::Acquire) { StopReason::WriteFailed } else { end };
    end_reason.store(end as u8, Ordering::Relaxed);
    polling_done.store(true, Ordering::Release);
    let session_cpu_ns = first_record.map_or(0, |_| thread_cpu_ns().saturating_sub(session_cpu_first));
    let Written { stats, failure, last_record, cpu_ns: writer_cpu_ns } =
        writing.join().map_err(|_| "the writing thread panicked".to_string())?;
    let closing_errors = closing.join().unwrap_or_default();
    let recording_ms = match (first_record, last_record) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64() * 1e3,
        _ => 0.0,
    };
    for e in &closing_errors {
        eprintln!("mdfan-capture: closing a segment: {e} (it stays readable as it is)");
    }
    let stream_gaps = sub.gaps();
    println!(
        "capture name={name} records={} blocks={} gaps={} missed={} segments={} bytes={} fsyncs={} stream_gaps={} recording_ms={recording_ms:.1} session_cpu_ms={:.1} writer_cpu_ms={:.1} end={}",
        stats.records,
        stats.blocks,
        stats.gaps,
        stats.missed,
        stats.segments,
        stats.bytes,
        stats.fsyncs,
        stream_gaps,
        session_cpu_ns as f64 / 1e6,
        writer_cpu_ns as f64 / 1e6,
        end.as_str()
    );
    if let Some(f) = failure {
        return Err(format!("{f}: the capture stopped there (the stream went on without it)"));
    }
    Ok(match end {
        StopReason::EndOfStream => 0,
        StopReason::Interrupted => 130,
        StopReason::SessionEnded | StopReason::WriteFailed => 3,
    })
}

/// The first segment's header (`None`: the capture has no segment).
fn first_segment(dir: &std::path::Path, name: Option<&str>) -> Result<Option<SegmentMeta>, String> {
    let mut r = Reader::open(dir, name, false).map_err(|e| e.to_string())?;
    match r.next().map_err(|e| e.to_string())? {
        Some(Item::Segment(m)) => Ok(Some(*m)),
        _ => Ok(None),
    }
}

fn export(
    dir: &std::path::Path,
    name: Option<&str>,
    to_parquet: Option<&std::path::Path>,
    row_group_rows: u64,
    row_group_s: u64,
    to_dbn: Option<&std::path::Path>,
    dataset: &str,
) -> Result<u8, String> {
    let torn = |t: Option<String>| {
        if let Some(t) = t {
            eprintln!("mdfan-capture: {t}: the capture ends there (a writer was killed mid-block); exported up to it");
        }
    };
    // Every target checked before any is written: one refused leaves none behind.
    if let (Some(p), Some(d)) = (to_parquet, to_dbn) {
        if p == d {
            return Err(format!("--parquet and --dbn name one file, {}: give each its own", p.display()));
        }
    }
    for out in to_parquet.into_iter().chain(to_dbn) {
        output::check_new(out)?;
    }
    let first = first_segment(dir, name)?;
    let dataset = match (to_dbn, dataset) {
        (Some(_), "") => {
            let feed = first.as_ref().map(|m| m.feed.clone()).unwrap_or_default();
            if feed.venue.is_empty() {
                return Err(format!("--dbn needs --dataset: the capture's feed named no venue's dataset ({feed})"));
            }
            feed.venue
        }
        (_, d) => d.to_owned(),
    };
    // A capture whose first segments were deleted exports what is left, row for row, and says it is not all.
    if let Some(m) = first.filter(|m| m.first_record > 0) {
        eprintln!(
            "mdfan-capture: capture {}: its first segment is {}: the {} records before it are gone (the export \
             begins there; books rebuilt from it lack their start)",
            m.name, m.segment, m.first_record
        );
    }
    // The DBN file's own conditions (order-level segments, a dataset DBN can hold) before the Parquet file.
    let dbn_plan = match to_dbn {
        Some(_) => Some(dbn::plan(dir, name, &dataset)?),
        None => None,
    };
    if let Some(out) = to_parquet {
        let groups =
            parquet::RowGroups { rows: row_group_rows as usize, span_ns: row_group_s.saturating_mul(1_000_000_000) };
        let (done, t) = parquet::export(dir, name, out, groups)?;
        torn(t);
        if done.prices_out_of_range > 0 {
            eprintln!(
                "mdfan-capture: {} rows have a price of a billion or more, which `price` (decimal 18, 9) cannot hold: \
                 null there (mdfan.prices_out_of_range)",
                done.prices_out_of_range
            );
        }
        println!(
            "export parquet={} rows={} row_groups={} gaps={} bytes={} prices_out_of_range={}",
            out.display(),
            done.rows,
            done.row_groups,
            done.gaps,
            done.bytes,
            done.prices_out_of_range
        );
        if done.timestamps_out_of_range > 0 {
            eprintln!(
                "mdfan-capture: export: {} rows have a ts_event or ts_recv past i64::MAX ns (DBN's undefined \
                 timestamp is u64::MAX): null there (mdfan.timestamps_out_of_range)",
                done.timestamps_out_of_range
            );
        }
    }
    if let (Some(out), Some(plan)) = (to_dbn, dbn_plan) {
        let (done, t) = dbn::export(dir, name, out, plan)?;
        torn(t);
        println!(
            "export dbn={} records={} left_out={} gaps_not_in_dbn={}",
            out.display(),
            done.records,
            done.left_out,
            done.gaps
        );
        if done.restarts > 0 {
            eprintln!(
                "mdfan-capture: export: the capture holds {} restarted session(s) (a recorder started again, its \
                 books empty): in the DBN file each begins with a Clear (action R) of every book so far; in the \
                 Parquet file the rows mdfan.restart_rows names",
                done.restarts
            );
        }
    }
    Ok(0)
}

fn cat(dir: &std::path::Path, name: Option<&str>, follow: bool, shutdown: &AtomicBool) -> Result<u8, String> {
    let mut r = Reader::open(dir, name, follow).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    loop {
        let written = match r.next().map_err(|e| e.to_string())? {
            Some(Item::Segment(m)) => writeln!(out, "segment {} name={} source={} session={} first_record={}", m.segment, m.name, m.source, m.session, m.first_record),
            Some(Item::Record(x)) => writeln!(
                out,
                "record seq={} kind={} instrument={} side={} price_e9={} size={} order_id={} level={} flags=0x{:02x} venue_pos={} ts_event_ns={} ts_recv_ns={}",
                x.seq,
                x.kind().map_or_else(|| format!("unknown_{}", x.kind), |k| format!("{k:?}")),
                x.instrument_id,
                x.side as char,
                x.price_e9,
                x.size,
                x.order_id,
                x.level,
                x.flags,
                x.venue_pos,
                x.ts_event_ns,
                x.ts_recv_ns
            ),
            Some(Item::Gap { expected, got }) => writeln!(out, "gap expected={expected} got={got}"),
            Some(Item::Stop { reason, at_ns }) => {
                writeln!(out, "stop reason={} at_ns={at_ns}", reason.map_or("unknown", StopReason::as_str))
            }
            None if follow && !shutdown.load(Ordering::Relaxed) => {
                let _ = out.flush();
                std::thread::sleep(Duration::from_millis(5));
                Ok(())
            }
            None => break,
        };
        if written.is_err() {
            return Ok(0); // a reader that went away (`| head`, `grep -m`): nothing more to say
        }
    }
    if let Some(t) = r.torn() {
        eprintln!("mdfan-capture: {t}: the capture ends there (a writer was killed mid-block)");
    }
    Ok(if shutdown.load(Ordering::Relaxed) { 130 } else { 0 })
}

#[cfg(test)]
mod tests {
    use mdfan_feed::capture::StopReason;
    use mdfan_wire::{BookUpdate, InstrumentDef, Kind, Side};

    /// `export --parquet A --dbn B` with B there already is refused before A is written: nothing is left behind,
    /// and the error names B.
    #[test]
    fn an_export_with_one_target_taken_writes_neither() {
        let (dir, mut w) = crate::test_support::writer("both-targets", "t", "mbo", vec![InstrumentDef::new(7, "ESH4")]);
        let add = BookUpdate {
            seq: 1,
            instrument_id: 7,
            kind: Kind::Add as u8,
            side: Side::Bid as u8,
            price_e9: 4_810_000_000_000,
            size: 2,
            order_id: 9,
            flags: 0x80,
            ..BookUpdate::control(Kind::Add)
        };
        w.record(&add, 1).unwrap();
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let (pq, dbn) = (dir.join("new.parquet"), dir.join("taken.dbn.zst"));
        std::fs::write(&dbn, b"someone's file").unwrap();
        let e = super::export(&dir, None, Some(&pq), 1 << 20, 3600, Some(&dbn), "GLBX.MDP3").unwrap_err();
        assert!(e.contains("taken.dbn.zst: exists already"), "{e}");
        assert!(!pq.exists(), "the Parquet file was not written");
        assert_eq!(std::fs::read(&dbn).unwrap(), b"someone's file");
        std::fs::remove_file(&dbn).unwrap();
        // A dataset DBN cannot hold is refused before the Parquet file too (it was written, then the DBN refused).
        let e = super::export(&dir, None, Some(&pq), 1 << 20, 3600, Some(&dbn), "GLBX.MDP3.TOO.LONG").unwrap_err();
        assert!(e.starts_with("--dbn: dataset \"GLBX.MDP3.TOO.LONG\": ") && e.contains("15 characters"), "{e}");
        assert!(!pq.exists() && !dbn.exists());
        assert_eq!(super::export(&dir, None, Some(&pq), 1 << 20, 3600, Some(&dbn), "GLBX.MDP3"), Ok(0));
        assert!(pq.exists() && dbn.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A price-level capture with `--parquet` and `--dbn`: the DBN refusal (order-level only) comes before the
    /// Parquet file is written, so the same command with `--parquet` alone then works.
    #[test]
    fn a_price_level_capture_with_both_targets_writes_neither() {
        let (dir, mut w) = crate::test_support::writer("both-mbp", "l", "mbp", vec![InstrumentDef::new(7, "ESH4")]);
        w.record(&BookUpdate { seq: 1, instrument_id: 7, level: 1, ..BookUpdate::control(Kind::LevelNew) }, 1).unwrap();
        w.stop(StopReason::EndOfStream, 2).unwrap();
        let (pq, dbn) = (dir.join("l.parquet"), dir.join("l.dbn"));
        let e = super::export(&dir, None, Some(&pq), 1 << 20, 3600, Some(&dbn), "GLBX.MDP3").unwrap_err();
        assert!(e.contains("DBN MBO holds order-level records only"), "{e}");
        assert!(!pq.exists() && !dbn.exists());
        assert_eq!(super::export(&dir, None, Some(&pq), 1 << 20, 3600, None, ""), Ok(0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
