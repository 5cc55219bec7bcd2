//! `mdfan-bridge`: subscribes to an mdfan publisher as any strategy does and publishes the stream to NATS
//! JetStream (subjects, messages and the consumer's rules: the crate docs, `bridge/src/lib.rs`).
//!
//! Two threads. The session thread polls the upstream session (policy `resync`: a slow bridge gets a
//! snapshot, never stalls the publisher), keeps every instrument's book, and hands records, stale marks and
//! snapshots to the NATS thread through an SPSC ring (rtrb). It never waits for NATS: when the ring is full
//! it drops the record, counts it (`dropped`), and once there is room again sends the instrument a `stale`
//! message and a snapshot from its own book. The NATS thread (tokio, async-nats) batches each instrument's
//! records into messages of at most `--batch-bytes` or `--batch-us`, publishes them, and counts each
//! acknowledgement; a publish that fails (NATS slow, down, restarting) is counted (`failed`) and its
//! instrument resynced (stale, then a snapshot) once NATS takes messages again. Snapshots also go out every
//! `--snapshot-every-s` for each instrument that changed, so a late consumer starts near the head.
//!
//! Output: `bridge stream=.. subjects=PREFIX.> nats=..` when the stream is ready, a `bridge ...` counters line
//! every `--report-s` and at the end (`publishing_ms`: from the first record in to the last acknowledgement). Exit status: 0 after the upstream end of stream (every message sent
//! acknowledged or counted failed); 1 on a setup error (one line naming the endpoint or the server); 2 for bad
//! usage; 3 when the upstream session ended otherwise; 4 when the end could not be sent whole (NATS not taking
//! messages, or a signal during the end's drain); 130 on SIGINT/SIGTERM (after a drain of at most about 35 s; a
//! second signal exits at once).

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::HeaderMap;
use clap::Parser;
use mdfan_bridge::message::{self, MessageKind};
use mdfan_bridge::subject::{token, Subjects};
use mdfan_subscriber::{
    BookKind, BookUpdate, Books, Event, Health, Kind, MbpBooks, SlowConsumerPolicy, Subscriber, SubscriberConfig,
    Symbology,
};

#[derive(Parser, Debug)]
#[command(name = "mdfan-bridge", version, about = "Publishes an mdfan stream to NATS JetStream")]
struct Args {
    /// Publisher control endpoint: HOST:PORT, or unix:PATH.
    #[arg(long, default_value = "127.0.0.1:7700")]
    connect: String,
    /// The session's name at the publisher (default mdfan-bridge-STREAM: one per stream; the publisher refuses a
    /// second session of the same name unless it allows duplicate names).
    #[arg(long)]
    session: Option<String>,
    /// Ring size in slots (power of two; 64 B each).
    #[arg(long, default_value_t = 131_072)]
    ring_slots: u32,
    /// NATS server URL(s), comma-separated (the nodes of a cluster).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// The JetStream stream (created when missing, file storage).
    #[arg(long, default_value = "MDFAN")]
    stream: String,
    /// Subject prefix: venue and channel, e.g. md.glbx.310 (the stream takes PREFIX.>).
    #[arg(long, default_value = "md")]
    prefix: String,
    /// Replicas of a stream this bridge creates (3 on a 3-node cluster).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    replicas: u8,
    /// How long the stream keeps messages, s.
    #[arg(long, default_value_t = 86_400)]
    max_age_s: u64,
    /// An update message holds at most this many bytes of records (64 each).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    batch_bytes: u64,
    /// ... and is sent at the latest this long after its first record, µs.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    batch_us: u64,
    /// Each instrument that changed gets a snapshot this often, s (0: only after a loss).
    #[arg(long, default_value_t = 5)]
    snapshot_every_s: u64,
    /// Items the session thread may queue for the NATS thread before it drops records.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(16..=(1 << 24)))]
    queue: u64,
    /// Publishes awaiting their acknowledgement at most.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    in_flight: u64,
    /// How long a publish may wait for its acknowledgement, ms.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    ack_timeout_ms: u64,
    /// A counters line this often, s (0: only at the end).
    #[arg(long, default_value_t = 10)]
    report_s: u64,
    /// A file holding the session's token (first line), for a publisher that authenticates subscribers (its
    /// `[access]` list); MDFAN_TOKEN is read when this is not given.
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
}

/// What the session thread hands the NATS thread, in upstream order.
enum Item {
    /// The session's symbology (first: the subjects are named by it).
    Symbology(Box<Symbology>),
    /// A record of an instrument.
    Record(BookUpdate),
    /// The records that rebuild `instrument_id`'s book (from the session thread's book, after every record
    /// queued before it).
    Snapshot { instrument_id: u32, records: Vec<BookUpdate>, last_seq: u64 },
    /// `instrument_id` lost records here.
    Stale(u32),
    /// The upstream session missed seqs `expected..got`.
    Gap { expected: u64, got: u64 },
    /// A feed status record (every instrument's).
    Status(BookUpdate),
    /// Send every pending batch, wait for every acknowledgement, then say so on the drained channel (the
    /// session thread resyncs what failed before it sends `End`).
    Drain,
    /// The bridge stops: `end` messages go out on every instrument's subject when the upstream stream ended
    /// (not when the bridge is stopped or its session was lost: the stream goes on without it).
    End { upstream_ended: bool },
}

/// Counters both threads bump and the reporter reads.
#[derive(Default)]
struct Counters {
    records_in: AtomicU64,
    dropped: AtomicU64,
    resyncs: AtomicU64,
    upstream_gaps: AtomicU64,
    book_errors: AtomicU64,
    messages: AtomicU64,
    acked: AtomicU64,
    records_acked: AtomicU64,
    failed: AtomicU64,
    snapshots: AtomicU64,
    too_large: AtomicU64,
    connects: AtomicU64,
    /// A publish found no stream for its subject (deleted, or a server restarted without its store).
    stream_missing: AtomicBool,
    /// When the first record came in and when the last acknowledgement came back, µs since [`EPOCH`] (0: not
    /// yet): the span `publishing_ms` reports.
    first_record_us: AtomicU64,
    last_ack_us: AtomicU64,
    /// The second (since [`EPOCH`], plus 1) of the last failure line, and the failures not said since: a server
    /// refusing everything (a full stream) gets one line a second, not one per message.
    failure_line_s: AtomicU64,
    failures_unsaid: AtomicU64,
}

/// The process's clock origin for [`Counters`]' times.
static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// µs since [`EPOCH`], at least 1 (0 means "not yet").
fn since_epoch_us() -> u64 {
    (EPOCH.elapsed().as_micros() as u64).max(1)
}

impl Counters {
    /// Prints `line` (a publish that failed) unless a failure line was printed this second already: then it is
    /// counted, and the next line printed says how many were not.
    fn say_failure(&self, line: impl FnOnce() -> String) {
        let now_s = since_epoch_us() / 1_000_000 + 1;
        let last = self.failure_line_s.load(Ordering::Relaxed);
        if last == now_s
            || self.failure_line_s.compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            self.failures_unsaid.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.failures_unsaid.swap(0, Ordering::Relaxed) {
            0 => eprintln!("mdfan-bridge: {}", line()),
            n => eprintln!("mdfan-bridge: {} ({n} more failures since the last such line)", line()),
        }
    }

    fn line(&self, stream: &str) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "bridge stream={stream} records_in={} messages={} acked={} records_acked={} snapshots={} failed={} dropped={} resyncs={} upstream_gaps={} book_errors={} snapshot_too_large={} connects={} publishing_ms={:.1}",
            g(&self.records_in),
            g(&self.messages),
            g(&self.acked),
            g(&self.records_acked),
            g(&self.snapshots),
            g(&self.failed),
            g(&self.dropped),
            g(&self.resyncs),
            g(&self.upstream_gaps),
            g(&self.book_errors),
            g(&self.too_large),
            g(&self.connects),
            g(&self.last_ack_us).saturating_sub(g(&self.first_record_us)) as f64 / 1e3,
        )
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let subjects = match Subjects::new(&args.prefix) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mdfan-bridge: --prefix {e}");
            return ExitCode::from(2);
        }
    };
    // A token file that cannot be read is bad usage (2), found before NATS or the publisher is touched.
    let token = match SubscriberConfig::token_from(args.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mdfan-bridge: {e}");
            return ExitCode::from(2);
        }
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // The first signal sets `shutdown` (the bridge drains to NATS, at most about 35 s); a second one, with
        // `shutdown` already set, exits at once with 130 (registered first, so the first signal does not trip it).
        let second = signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&shutdown));
        if let Err(e) = second.and_then(|_| signal_hook::flag::register(sig, Arc::clone(&shutdown))) {
            eprintln!("mdfan-bridge: cannot install the SIGINT/SIGTERM handler: {e}");
            return ExitCode::from(1);
        }
    }
    match run(&args, subjects, token, &shutdown) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("mdfan-bridge: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args, subjects: Subjects, token: Option<String>, shutdown: &AtomicBool) -> Result<u8, String> {
    // NATS first (the stream made or checked): a bridge that cannot publish never takes a session at the
    // publisher.
    let counters = Arc::new(Counters::default());
    let (mut to_nats, from_session) = rtrb::RingBuffer::<Item>::new(args.queue as usize);
    let (resync_tx, resync_rx) = mpsc::channel::<u32>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    let nats = NatsSide {
        urls: args.nats.clone(),
        stream: args.stream.clone(),
        subjects,
        replicas: args.replicas as usize,
        max_age: Duration::from_secs(args.max_age_s),
        batch_bytes: args.batch_bytes as usize,
        batch_age: Duration::from_micros(args.batch_us),
        in_flight: args.in_flight as usize,
        ack_timeout: Duration::from_millis(args.ack_timeout_ms),
        symbology: Symbology::new(),
        counters: Arc::clone(&counters),
        run: run_id(),
    };
    let nats_thread = std::thread::Builder::new()
        .name("mdfan-bridge-nats".into())
        .spawn(move || nats.run(from_session, resync_tx, ready_tx, drained_tx))
        .map_err(|e| format!("cannot start the NATS thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("the NATS thread stopped before it was ready".into()),
    }
    // At most 64 bytes (a session name's limit).
    let session = args.session.clone().unwrap_or_else(|| {
        let mut s = format!("mdfan-bridge-{}", args.stream);
        while s.len() > 64 {
            s.pop();
        }
        s
    });
    let mut cfg = SubscriberConfig::new(&args.connect, &session);
    cfg.ring_slots = args.ring_slots;
    cfg.policy = SlowConsumerPolicy::Resync;
    cfg.token = token;
    let mut sub = match Subscriber::connect(&cfg) {
        Ok(sub) => sub,
        Err(e) => {
            let _ = to_nats.push(Item::End { upstream_ended: false });
            let _ = nats_thread.join();
            return Err(e.to_string());
        }
    };
    // The symbols the subjects are named by, before any record.
    let _ = to_nats.push(Item::Symbology(Box::new(sub.symbology().clone())));
    println!("bridge stream={} subjects={}.> nats={} upstream={}", args.stream, args.prefix, args.nats, sub.endpoint());
    let mut session = Session {
        out: to_nats,
        books: Books::new(),
        mbp: MbpBooks::with_capacity(1 << 16),
        book: sub.book_kind(),
        known: BTreeSet::new(),
        changed: BTreeSet::new(),
        dirty: BTreeSet::new(),
        last_seq: 0,
        in_snapshot: false,
        last_resync: HashMap::new(),
        resync_every: Duration::from_secs(1),
        counters: Arc::clone(&counters),
    };
    let report_every = (args.report_s > 0).then(|| Duration::from_secs(args.report_s));
    let snapshot_every = (args.snapshot_every_s > 0).then(|| Duration::from_secs(args.snapshot_every_s));
    let (mut last_report, mut last_snapshots) = (Instant::now(), Instant::now());
    let (code, ended) = loop {
        if shutdown.load(Ordering::Relaxed) {
            break (130, false);
        }
        let mut ended = false;
        let n = sub.poll(1024, |e| match e {
            Event::Record(r) => ended |= session.record(r),
            Event::Gap { expected, got } => session.gap(expected, got),
            _ => {}
        });
        while let Ok(id) = resync_rx.try_recv() {
            session.dirty.insert(id);
        }
        session.resync();
        if ended {
            // a signal during this drain ends it (what is not acknowledged yet is given up)
            let complete = session.finish(&resync_rx, &drained_rx, true, shutdown);
            break (if complete { 0 } else { 4 }, true);
        }
        if snapshot_every.is_some_and(|every| last_snapshots.elapsed() >= every) {
            session.periodic_snapshots();
            last_snapshots = Instant::now();
        }
        if report_every.is_some_and(|every| last_report.elapsed() >= every) {
            println!("{}", counters.line(&args.stream));
            last_report = Instant::now();
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        if let Some(Health::Ended(_)) = sub.maintain_if_due() {
            break (3, false);
        }
    };
    if !ended {
        // interrupted: this drain is the first signal's; a second one exits at once
        session.finish(&resync_rx, &drained_rx, false, &AtomicBool::new(false));
    }
    drop(session);
    let nats_result = nats_thread.join().map_err(|_| "the NATS thread panicked".to_owned())?;
    let end = match code {
        0 => "end_of_stream",
        4 => "end_of_stream_incomplete",
        130 => "interrupted",
        _ => "session_ended",
    };
    println!("{} end={end}", counters.line(&args.stream));
    nats_result?;
    Ok(code)
}

/// A value for this run's `Mdfan-Run`: the start time (ns) and the process id, in hex.
fn run_id() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("{now:x}-{:x}", std::process::id())
}

/// The session thread's side (module docs).
struct Session {
    out: rtrb::Producer<Item>,
    books: Books,
    mbp: MbpBooks,
    book: BookKind,
    /// Every instrument a record named.
    known: BTreeSet<u32>,
    /// Instruments changed since their last snapshot.
    changed: BTreeSet<u32>,
    /// Instruments that lost records (dropped here, or a publish that failed) and wait for a resync.
    dirty: BTreeSet<u32>,
    last_seq: u64,
    /// Between an upstream SnapshotBegin and SnapshotEnd (a resync of the session: every book rebuilt).
    in_snapshot: bool,
    /// When each instrument was last resynced: one resync per `resync_every` at most (a NATS outage fails many
    /// publishes of an instrument; one snapshot after it is enough).
    last_resync: HashMap<u32, Instant>,
    resync_every: Duration,
    counters: Arc<Counters>,
}

impl Session {
    /// Takes one upstream record; true at the end of stream.
    fn record(&mut self, r: &BookUpdate) -> bool {
        let before = std::mem::replace(&mut self.last_seq, r.seq);
        match r.kind() {
            Some(Kind::Heartbeat) => return false,
            Some(Kind::EndOfStream) => return true,
            Some(Kind::SnapshotBegin) => {
                self.in_snapshot = true;
                let _ = self.books.apply(r);
                let _ = self.mbp.apply(r);
                return false;
            }
            Some(Kind::SnapshotEnd) => {
                // The session's books are rebuilt: every instrument gets a snapshot (its stale mark went out
                // with the gap).
                self.in_snapshot = false;
                self.dirty.extend(self.known.iter().copied());
                return false;
            }
            Some(Kind::FeedStatus) => {
                self.push(Item::Status(*r), None);
                return false;
            }
            _ => {}
        }
        if self.counters.records_in.fetch_add(1, Ordering::Relaxed) == 0 {
            self.counters.first_record_us.store(since_epoch_us(), Ordering::Relaxed);
        }
        let id = r.instrument_id;
        if self.known.insert(id) && !self.in_snapshot {
            // An instrument's first record in this run: a snapshot of its book before it (empty, unless the
            // session began with a snapshot), so every run begins each instrument with one (crate docs).
            let records = self.snapshot_of(id);
            self.push(Item::Snapshot { instrument_id: id, records, last_seq: before }, Some(id));
        }
        let mbo = self.books.apply(r);
        let mbp = self.mbp.apply(r);
        if mbo.is_err() || mbp.is_err() {
            self.counters.book_errors.fetch_add(1, Ordering::Relaxed);
        }
        if self.in_snapshot {
            self.dirty.insert(id);
            return false;
        }
        self.changed.insert(id);
        if !self.dirty.contains(&id) {
            self.push(Item::Record(*r), Some(id));
        }
        false
    }

    fn gap(&mut self, expected: u64, got: u64) {
        self.counters.upstream_gaps.fetch_add(1, Ordering::Relaxed);
        self.push(Item::Gap { expected, got }, None);
        // Every instrument may have lost records; the session's resync snapshot (SnapshotBegin .. End) follows
        // and each gets a snapshot then.
        let known: Vec<u32> = self.known.iter().copied().collect();
        for id in known {
            if !self.dirty.contains(&id) {
                self.push(Item::Stale(id), Some(id));
            }
        }
    }

    /// Queues `item`; when the queue is full, drops it and marks `instrument` for a resync.
    fn push(&mut self, item: Item, instrument: Option<u32>) {
        if self.out.push(item).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            if let Some(id) = instrument {
                self.dirty.insert(id);
            }
        }
    }

    /// Sends each instrument that lost records a stale mark and a snapshot, while the queue has room.
    fn resync(&mut self) {
        if self.in_snapshot {
            return;
        }
        let now = Instant::now();
        let due: Vec<u32> = self
            .dirty
            .iter()
            .copied()
            .filter(|id| self.last_resync.get(id).is_none_or(|t| now.duration_since(*t) >= self.resync_every))
            .collect();
        for id in due {
            if self.out.slots() < 2 {
                return;
            }
            self.dirty.remove(&id);
            self.last_resync.insert(id, now);
            self.counters.resyncs.fetch_add(1, Ordering::Relaxed);
            let _ = self.out.push(Item::Stale(id));
            let records = self.snapshot_of(id);
            let _ = self.out.push(Item::Snapshot { instrument_id: id, records, last_seq: self.last_seq });
            self.changed.remove(&id);
        }
    }

    fn periodic_snapshots(&mut self) {
        while let Some(&id) = self.changed.first() {
            if self.out.slots() < 1 || self.in_snapshot {
                return;
            }
            self.changed.remove(&id);
            if self.dirty.contains(&id) {
                continue;
            }
            let records = self.snapshot_of(id);
            let _ = self.out.push(Item::Snapshot { instrument_id: id, records, last_seq: self.last_seq });
        }
    }

    fn snapshot_of(&self, id: u32) -> Vec<BookUpdate> {
        let mut out = Vec::new();
        match self.book {
            BookKind::Mbp => {
                if let Some(b) = self.mbp.get(id) {
                    b.snapshot_into(&mut out);
                }
            }
            _ => {
                if let Some(b) = self.books.get(id) {
                    b.snapshot_into(id, &mut out);
                }
            }
        }
        if out.is_empty() {
            out.push(BookUpdate {
                instrument_id: id,
                flags: mdfan_subscriber::flags::SNAPSHOT | mdfan_subscriber::flags::LAST,
                ..BookUpdate::control(Kind::Clear)
            });
        }
        out
    }

    /// Ends the bridge's stream exactly: until nothing is lost (or 30 s passed), resyncs every instrument that
    /// lost records, asks the NATS thread to send everything and wait for every acknowledgement, and takes the
    /// failures it reports; then queues the end (`end` messages only if the upstream stream ended). An
    /// instrument still waiting for its resync then gets a stale mark, so no consumer takes its book for good;
    /// false then. `give_up` set (a signal during the drain) ends the waiting within 50 ms: false too.
    fn finish(
        &mut self,
        resync: &mpsc::Receiver<u32>,
        drained: &mpsc::Receiver<()>,
        upstream_ended: bool,
        give_up: &AtomicBool,
    ) -> bool {
        let mut deadline = Instant::now() + Duration::from_secs(30);
        let mut gave_up = false;
        self.resync_every = Duration::ZERO;
        loop {
            while !self.dirty.is_empty() && Instant::now() < deadline && !give_up.load(Ordering::Relaxed) {
                self.resync();
                if !self.dirty.is_empty() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            if !self.wait_push(Item::Drain, deadline) {
                break;
            }
            // waited for in slices, so that a signal is seen within 50 ms
            let done = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if give_up.load(Ordering::Relaxed) {
                    (deadline, gave_up) = (Instant::now(), true);
                    break false;
                }
                match drained.recv_timeout(left.min(Duration::from_millis(50))) {
                    Ok(()) => break true,
                    Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {}
                    Err(_) => break false, // the deadline, or the NATS thread gone
                }
            };
            while let Ok(id) = resync.try_recv() {
                self.dirty.insert(id);
            }
            if !done || self.dirty.is_empty() || Instant::now() >= deadline {
                break;
            }
        }
        let dirty: Vec<u32> = std::mem::take(&mut self.dirty).into_iter().collect();
        let complete = dirty.is_empty() && !gave_up;
        for id in dirty {
            self.wait_push(Item::Stale(id), deadline);
        }
        self.wait_push(Item::End { upstream_ended }, deadline + Duration::from_secs(5));
        if !complete {
            eprintln!("mdfan-bridge: the end: some instruments could not be resent whole (NATS not taking messages); their subjects say stale");
        }
        complete
    }

    /// Queues `item`, waiting for room until `deadline`; false if there was none.
    fn wait_push(&mut self, mut item: Item, deadline: Instant) -> bool {
        loop {
            match self.out.push(item) {
                Ok(()) => return true,
                Err(rtrb::PushError::Full(back)) if Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            }
        }
    }
}

/// Whether the server refused the stream for its config (JetStream API error codes: 10074 replicas on a server
/// that is not clustered, 10052 an invalid config, 10058 a stream of that name with another config, 10065
/// subjects another stream takes): retrying cannot help.
fn is_config_refusal(e: &jetstream::context::CreateStreamError) -> bool {
    use jetstream::context::CreateStreamErrorKind;
    use jetstream::ErrorCode;
    match e.kind() {
        CreateStreamErrorKind::JetStream(js) => [
            ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
            ErrorCode::STREAM_INVALID_CONFIG,
            ErrorCode::STREAM_NAME_EXIST,
            ErrorCode::STREAM_SUBJECT_OVERLAP,
        ]
        .contains(&js.error_code()),
        _ => false,
    }
}

/// The NATS thread's settings and counters.
struct NatsSide {
    urls: String,
    stream: String,
    subjects: Subjects,
    replicas: usize,
    max_age: Duration,
    batch_bytes: usize,
    batch_age: Duration,
    in_flight: usize,
    ack_timeout: Duration,
    symbology: Symbology,
    counters: Arc<Counters>,
    /// This run's `Mdfan-Run` (crate docs).
    run: String,
}

/// One instrument's batch being filled.
struct Batch {
    token: String,
    bytes: Vec<u8>,
    first_seq: u64,
    last_seq: u64,
    first_pos: u64,
    last_pos: u64,
    started: Instant,
    /// Update messages sent (the last one's `Mdfan-Inst-Seq`).
    inst_seq: u64,
}

impl NatsSide {
    fn run(
        mut self,
        mut from_session: rtrb::Consumer<Item>,
        resync: mpsc::Sender<u32>,
        ready: mpsc::Sender<Result<(), String>>,
        drained: mpsc::Sender<()>,
    ) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the NATS runtime: {e}"))?;
        rt.block_on(async move {
            let js = match self.connect().await {
                Ok(js) => {
                    let _ = ready.send(Ok(()));
                    js
                }
                Err(e) => {
                    let _ = ready.send(Err(e.clone()));
                    return Err(e);
                }
            };
            let mut batches: HashMap<u32, Batch> = HashMap::new();
            let mut acks = tokio::task::JoinSet::new();
            let mut last_sweep = Instant::now();
            let mut last_create = Instant::now();
            loop {
                let mut got = 0;
                while let Ok(item) = from_session.pop() {
                    got += 1;
                    match item {
                        Item::Symbology(sym) => self.symbology = *sym,
                        Item::Record(r) => {
                            let b = self.batch(&mut batches, r.instrument_id);
                            if b.bytes.is_empty() {
                                (b.first_seq, b.first_pos, b.started) = (r.seq, r.venue_pos, Instant::now());
                            }
                            message::push_record(&mut b.bytes, &r);
                            (b.last_seq, b.last_pos) = (r.seq, r.venue_pos);
                            if b.bytes.len() + 64 > self.batch_bytes {
                                self.flush(&js, &mut acks, &resync, r.instrument_id, &mut batches).await;
                            }
                        }
                        Item::Snapshot { instrument_id, records, last_seq } => {
                            self.batch(&mut batches, instrument_id);
                            self.flush(&js, &mut acks, &resync, instrument_id, &mut batches).await;
                            let b = &batches[&instrument_id];
                            let mut h = self.headers(MessageKind::Snapshot, Some(instrument_id), b.inst_seq);
                            h.insert(message::SEQ, message::span(last_seq, last_seq).as_str());
                            let pos = records.first().map_or(0, |r| r.venue_pos);
                            h.insert(message::VENUE_POS, message::span(pos, pos).as_str());
                            h.insert(message::ENCODING, "zstd");
                            let subject = self.subjects.snapshot(&b.token);
                            let payload = message::compress(&records);
                            self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
                            self.publish(&js, &mut acks, &resync, subject, h, payload, Some(instrument_id), 0).await;
                        }
                        Item::Stale(id) => {
                            self.batch(&mut batches, id);
                            self.flush(&js, &mut acks, &resync, id, &mut batches).await;
                            let b = &batches[&id];
                            let h = self.headers(MessageKind::Stale, Some(id), b.inst_seq);
                            let subject = self.subjects.update(&b.token);
                            self.publish(&js, &mut acks, &resync, subject, h, Vec::new(), None, 0).await;
                        }
                        Item::Gap { expected, got } => {
                            let mut h = self.headers(MessageKind::Gap, None, 0);
                            h.insert(message::GAP, message::span(expected, got).as_str());
                            let subject = self.subjects.status();
                            self.publish(&js, &mut acks, &resync, subject, h, Vec::new(), None, 0).await;
                        }
                        Item::Status(r) => {
                            let h = self.headers(MessageKind::Status, None, 0);
                            let mut payload = Vec::with_capacity(64);
                            message::push_record(&mut payload, &r);
                            let subject = self.subjects.status();
                            self.publish(&js, &mut acks, &resync, subject, h, payload, None, 0).await;
                        }
                        Item::Drain => {
                            let ids: Vec<u32> = batches.keys().copied().collect();
                            for id in ids {
                                self.flush(&js, &mut acks, &resync, id, &mut batches).await;
                            }
                            while acks.join_next().await.is_some() {}
                            let _ = drained.send(());
                        }
                        Item::End { upstream_ended } => {
                            let ids: Vec<u32> = batches.keys().copied().collect();
                            for id in ids {
                                self.flush(&js, &mut acks, &resync, id, &mut batches).await;
                                if !upstream_ended {
                                    continue;
                                }
                                let b = &batches[&id];
                                let h = self.headers(MessageKind::End, Some(id), b.inst_seq);
                                let subject = self.subjects.update(&b.token);
                                self.publish(&js, &mut acks, &resync, subject, h, Vec::new(), None, 0).await;
                            }
                            while acks.join_next().await.is_some() {}
                            return Ok(());
                        }
                    }
                    if got >= 4096 {
                        break;
                    }
                }
                if got == 0 || last_sweep.elapsed() >= self.batch_age {
                    let due: Vec<u32> = batches
                        .iter()
                        .filter(|(_, b)| !b.bytes.is_empty() && b.started.elapsed() >= self.batch_age)
                        .map(|(id, _)| *id)
                        .collect();
                    for id in due {
                        self.flush(&js, &mut acks, &resync, id, &mut batches).await;
                    }
                    last_sweep = Instant::now();
                }
                while acks.try_join_next().is_some() {}
                if self.counters.stream_missing.load(Ordering::Relaxed)
                    && last_create.elapsed() >= Duration::from_secs(1)
                {
                    // The stream is gone (deleted, or a server restarted without its store): made again, and the
                    // instruments whose publishes failed are resent as snapshots (their resync requests).
                    last_create = Instant::now();
                    match js.get_or_create_stream(self.stream_config()).await {
                        Ok(_) => {
                            self.counters.stream_missing.store(false, Ordering::Relaxed);
                            eprintln!("mdfan-bridge: stream {} made again", self.stream);
                        }
                        Err(e) => eprintln!("mdfan-bridge: stream {}: cannot make it again: {e}", self.stream),
                    }
                }
                if got == 0 {
                    tokio::time::sleep(Duration::from_micros(50)).await;
                }
            }
        })
    }

    async fn connect(&self) -> Result<jetstream::Context, String> {
        let counters = Arc::clone(&self.counters);
        let client = async_nats::ConnectOptions::new()
            .name("mdfan-bridge")
            .max_reconnects(None)
            .event_callback(move |e| {
                let counters = Arc::clone(&counters);
                async move {
                    match e {
                        async_nats::Event::Connected => {
                            counters.connects.fetch_add(1, Ordering::Relaxed);
                            eprintln!("mdfan-bridge: NATS connected");
                        }
                        async_nats::Event::Disconnected => eprintln!("mdfan-bridge: NATS disconnected"),
                        other => eprintln!("mdfan-bridge: NATS {other}"),
                    }
                }
            })
            .connect(self.urls.split(',').map(str::trim).collect::<Vec<_>>())
            .await
            .map_err(|e| format!("NATS {}: cannot connect: {e}", self.urls))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(self.ack_timeout)
            .max_ack_inflight(self.in_flight)
            .backpressure_on_inflight(true)
            .build(client);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // A cluster elects its JetStream leader a moment after it starts: retry for a while.
            match js.get_or_create_stream(self.stream_config()).await {
                Ok(stream) => {
                    // An existing stream of that name must take this bridge's subjects, or every publish fails.
                    let taken = &stream.cached_info().config.subjects;
                    if !taken.iter().any(|p| mdfan_bridge::subject::covers(p, &self.subjects.all())) {
                        return Err(format!(
                            "NATS {}: stream {} exists and takes subjects {taken:?}, not {}: name another stream or \
                             prefix",
                            self.urls,
                            self.stream,
                            self.subjects.all()
                        ));
                    }
                    return Ok(js);
                }
                // What the server refuses for good (the config: replicas on a single server, a name or subjects
                // another stream holds) is said at once, not retried for 30 s.
                Err(e) if is_config_refusal(&e) => {
                    return Err(format!("NATS {}: stream {}: {e}", self.urls, self.stream));
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("mdfan-bridge: stream {}: {e} (retrying)", self.stream);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(format!("NATS {}: stream {}: {e}", self.urls, self.stream)),
            }
        }
    }

    fn stream_config(&self) -> jetstream::stream::Config {
        jetstream::stream::Config {
            name: self.stream.clone(),
            subjects: vec![self.subjects.all()],
            storage: jetstream::stream::StorageType::File,
            num_replicas: self.replicas,
            max_age: self.max_age,
            allow_direct: true,
            ..Default::default()
        }
    }

    fn batch<'a>(&self, batches: &'a mut HashMap<u32, Batch>, id: u32) -> &'a mut Batch {
        batches.entry(id).or_insert_with(|| Batch {
            token: token(self.symbology.symbol(id), id),
            bytes: Vec::with_capacity(self.batch_bytes),
            first_seq: 0,
            last_seq: 0,
            first_pos: 0,
            last_pos: 0,
            started: Instant::now(),
            inst_seq: 0,
        })
    }

    fn headers(&self, kind: MessageKind, instrument_id: Option<u32>, inst_seq: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(message::KIND, kind.as_str());
        h.insert(message::RUN, self.run.as_str());
        if let Some(id) = instrument_id {
            h.insert(message::INSTRUMENT_ID, id.to_string().as_str());
            h.insert(message::INST_SEQ, inst_seq.to_string().as_str());
        }
        h
    }

    /// Sends `id`'s pending records as one update message.
    async fn flush(
        &self,
        js: &jetstream::Context,
        acks: &mut tokio::task::JoinSet<()>,
        resync: &mpsc::Sender<u32>,
        id: u32,
        batches: &mut HashMap<u32, Batch>,
    ) {
        let Some(b) = batches.get_mut(&id) else { return };
        if b.bytes.is_empty() {
            return;
        }
        b.inst_seq += 1;
        let mut h = self.headers(MessageKind::Update, Some(id), b.inst_seq);
        h.insert(message::SEQ, message::span(b.first_seq, b.last_seq).as_str());
        h.insert(message::VENUE_POS, message::span(b.first_pos, b.last_pos).as_str());
        let records = (b.bytes.len() / 64) as u64;
        let payload = std::mem::replace(&mut b.bytes, Vec::with_capacity(self.batch_bytes));
        let subject = self.subjects.update(&b.token);
        self.publish(js, acks, resync, subject, h, payload, Some(id), records).await;
    }

    /// Publishes; a failure (now or at the acknowledgement) is counted and, for `resync_id`, asks the session
    /// thread for a resync of that instrument.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &self,
        js: &jetstream::Context,
        acks: &mut tokio::task::JoinSet<()>,
        resync: &mpsc::Sender<u32>,
        subject: String,
        headers: HeaderMap,
        payload: Vec<u8>,
        resync_id: Option<u32>,
        records: u64,
    ) {
        self.counters.messages.fetch_add(1, Ordering::Relaxed);
        let bytes = payload.len();
        let publish = jetstream::message::PublishMessage::build().payload(payload.into()).headers(headers);
        match js.send_publish(subject.clone(), publish).await {
            Ok(ack) => {
                let (counters, resync) = (Arc::clone(&self.counters), resync.clone());
                acks.spawn(async move {
                    match ack.await {
                        Ok(_) => {
                            counters.acked.fetch_add(1, Ordering::Relaxed);
                            counters.records_acked.fetch_add(records, Ordering::Relaxed);
                            counters.last_ack_us.fetch_max(since_epoch_us(), Ordering::Relaxed);
                        }
                        Err(e) => {
                            counters.failed.fetch_add(1, Ordering::Relaxed);
                            if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound {
                                counters.stream_missing.store(true, Ordering::Relaxed);
                            }
                            counters.say_failure(|| format!("{subject}: not acknowledged: {e}"));
                            if let Some(id) = resync_id {
                                let _ = resync.send(id);
                            }
                        }
                    }
                });
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                if e.kind() == jetstream::context::PublishErrorKind::MaxPayloadExceeded {
                    // A snapshot larger than the server takes: resyncing would only send it again.
                    self.counters.too_large.fetch_add(1, Ordering::Relaxed);
                    eprintln!("mdfan-bridge: {subject}: {bytes} bytes is more than the server's max_payload: {e}");
                } else {
                    self.counters.say_failure(|| format!("{subject}: not sent: {e}"));
                    if let Some(id) = resync_id {
                        let _ = resync.send(id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_subscriber::Side;

    fn add(seq: u64, instrument_id: u32, order_id: u64) -> BookUpdate {
        BookUpdate {
            seq,
            instrument_id,
            order_id,
            price_e9: 100_000_000_000,
            size: 1,
            side: Side::Bid as u8,
            ..BookUpdate::control(Kind::Add)
        }
    }

    fn session(queue: usize) -> (Session, rtrb::Consumer<Item>) {
        let (out, rx) = rtrb::RingBuffer::new(queue);
        let s = Session {
            out,
            books: Books::new(),
            mbp: MbpBooks::with_capacity(16),
            book: BookKind::Mbo,
            known: BTreeSet::new(),
            changed: BTreeSet::new(),
            dirty: BTreeSet::new(),
            last_seq: 0,
            in_snapshot: false,
            last_resync: HashMap::new(),
            resync_every: Duration::ZERO,
            counters: Arc::new(Counters::default()),
        };
        (s, rx)
    }

    fn drain(rx: &mut rtrb::Consumer<Item>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(item) = rx.pop() {
            out.push(match item {
                Item::Record(r) => format!("record {} {}", r.instrument_id, r.seq),
                Item::Snapshot { instrument_id, records, last_seq } => {
                    format!("snapshot {instrument_id} orders={} last_seq={last_seq}", records.len() - 1)
                }
                Item::Stale(id) => format!("stale {id}"),
                Item::Gap { expected, got } => format!("gap {expected}-{got}"),
                Item::Status(_) => "status".into(),
                Item::Drain => "drain".into(),
                Item::Symbology(_) => "symbology".into(),
                Item::End { upstream_ended } => format!("end {upstream_ended}"),
            });
        }
        out
    }

    /// A full queue drops the record and every later one of that instrument (counted), never waits; once
    /// there is room the instrument gets a stale mark and a snapshot of the book, which holds what was dropped.
    #[test]
    fn a_full_queue_drops_counts_and_resyncs_the_instrument_from_its_book() {
        let (mut s, mut rx) = session(4);
        s.record(&add(1, 7, 1)); // first sight: a snapshot of the empty book, then the record
        s.record(&add(2, 8, 2));
        s.record(&add(3, 7, 3)); // full: dropped, 7 marked
        s.record(&add(4, 8, 4)); // full: dropped, 8 marked
        assert_eq!(s.counters.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(
            drain(&mut rx),
            ["snapshot 7 orders=0 last_seq=0", "record 7 1", "snapshot 8 orders=0 last_seq=1", "record 8 2"]
        );
        s.record(&add(5, 7, 5)); // 7 waits for its resync: not queued on its own
        s.resync();
        assert_eq!(
            drain(&mut rx),
            ["stale 7", "snapshot 7 orders=3 last_seq=5", "stale 8", "snapshot 8 orders=2 last_seq=5"]
        );
        s.record(&add(6, 7, 6));
        assert_eq!(drain(&mut rx), ["record 7 6"]);
        assert_eq!(s.counters.resyncs.load(Ordering::Relaxed), 2);
    }

    /// An upstream gap marks every instrument stale; the session's resync snapshot (SnapshotBegin .. End) is
    /// not forwarded record by record: each instrument gets a snapshot of the rebuilt book after it.
    #[test]
    fn an_upstream_gap_marks_every_instrument_and_the_sessions_resync_becomes_snapshots() {
        let (mut s, mut rx) = session(64);
        s.record(&add(1, 7, 1));
        s.record(&add(2, 8, 2));
        s.gap(3, 10);
        assert_eq!(
            drain(&mut rx),
            [
                "snapshot 7 orders=0 last_seq=0",
                "record 7 1",
                "snapshot 8 orders=0 last_seq=1",
                "record 8 2",
                "gap 3-10",
                "stale 7",
                "stale 8"
            ]
        );
        s.record(&BookUpdate { seq: 10, ..BookUpdate::control(Kind::SnapshotBegin) });
        s.record(&add(11, 7, 1));
        s.record(&add(12, 7, 9));
        s.record(&BookUpdate { seq: 13, ..BookUpdate::control(Kind::SnapshotEnd) });
        s.resync();
        assert_eq!(
            drain(&mut rx),
            ["stale 7", "snapshot 7 orders=2 last_seq=13", "stale 8", "snapshot 8 orders=0 last_seq=13"]
        );
        assert_eq!(s.counters.upstream_gaps.load(Ordering::Relaxed), 1);
    }
}
