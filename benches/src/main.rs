//! `mdfan-bench`: mdfan's tail latency and throughput beside baselines measured in the same run.
//!
//! ```text
//! mdfan-bench run --out DIR [--config bench.toml] [--rounds 3] [--count 20000] [--warmup 2000]
//!                 [--rates 100000,500000,1000000,max] [--subscribers 1,2,4] [--source replay|synthetic]
//!                 [--cores 0,1] [--shm-dir /dev/shm] [--stall-threshold-ns 1000000]
//! mdfan-bench compare RUN_A RUN_B
//! ```
//!
//! Each round measures, in this order, on the same two pinned cores (A sends, B receives):
//! - `baseline.cacheline`: a cache-line ping-pong, one-way = round trip / 2 (the physical limit);
//! - the peers compiled in (features `aeron`, `iceoryx2`): `baseline.aeron`, `baseline.iceoryx2`, the same
//!   ping-pong with 64-byte messages;
//! - `baseline.aeron_c`: [`aeron_c`], Aeron's own C `cping`/`cpong` over `aeron:ipc` (child processes, 64-byte
//!   messages), when `ops/build-aeron-samples` has built them (else skipped with a note); the targets hold mdfan
//!   against the better of the two Aeron figures at each percentile (`baseline.aeron_best`);
//! - `mdfan.shm.pingpong`: one record each way through mdfan's shm WRITE-with-immediate, CQ poll and in-place
//!   read; one-way = round trip / 2;
//! - `probe.shm.<variant>`: [`probe`]: the shm one-way path built up step by step as separate ping-pongs (the
//!   same line every time; one stamp store into rings of 8 to 1,024 slots; the record's words; the CQ entry; the
//!   reader's CQ loads; a credit round trip per record; the fabric API; the publisher session with the subscriber
//!   receiver), with `ratio.probe.shm.<variant>_vs_baseline.cacheline.<pNN>` the median over rounds of each
//!   round's ratio to that round's cache line: which step costs more than one cache-line transfer;
//! - `mdfan.shm.openloop.<rate>.*`: [`openloop`] at each rate: feed record normalization and posts to every
//!   subscriber ring on a fixed schedule, with per-stage histograms and coordinated omission corrected;
//! - `mdfan.replay.subs<N>.*`: [`replay`]: the real publisher replaying the bundled capture at pace `max` to N
//!   subscribers of the real subscriber library; and `baseline.dbn_decode`, the same capture decoded alone.
//!   `mdfan.replay_yield.subs<N>.*`: the same with the hot loop and the subscriber thread yielding when idle
//!   (`publisher.hot_idle = "yield"`), so that the unpinned feed thread is not starved on a 2-core host;
//!   `mdfan.replay_hot_feed.subs<N>.*` with the feed decoded on the hot loop's thread
//!   (`publisher.feed_on_hot_thread = true`): two busy threads.
//! - `mdfan.fanout.subs<N>.*` and `baseline.store64.subs<N>.*`: [`fanout`]: the hot loop's time per record
//!   fanning the capture out of its journal to N subscriber rings (1, 2, 4, 8, 16: rings in this process, not
//!   processes), the subscriber side's time per record, and the limit, 64-byte stores of the same records into
//!   N ring-like buffers; the cost of one more subscriber of each (slopes) and their quotient.
//! - `mdfan.mdp3_decode.*` and `baseline.mdp3_walk`: [`mdp3`]: the live CME feed's decode + normalise over the
//!   bundled MDP 3.0 capture's line A, against a bare walk of the same packets' `MsgSize` fields, and each
//!   packet's decode time; `mdfan.mdp3_loopback.*`: [`mdp3_loopback`]: the same packets over loopback UDP into
//!   a line socket, decoded into an shm ring and polled by the subscriber library: wire-to-poll beside
//!   post-to-poll.
//! - `mdfan.itch_decode.*` and `baseline.itch_walk`: [`itch`]: Nasdaq ITCH 5.0 decode + normalise over the
//!   bundled snippet, against a bare walk of the same bytes' length prefixes (with the MDP 3.0 decode; the same
//!   `--no-mdp3` skips both).
//! - `strategy.book_apply` and `baseline.reference_book_apply`: [`book_apply`]: every record of the capture
//!   (normalised once, outside the timing) applied to the subscriber library's pre-allocated `HotBooks` and to the
//!   reference `Books`, ns per record (TSC, the read cost subtracted); the final book must be the reference's
//!   (and, on ESH4, the known one) or the run fails.
//!
//! With `--fabric verbs` (feature `verbs`), each round measures, after `baseline.cacheline`:
//! - `mdfan.verbs.pingpong`: the same ping-pong over two verbs rings on one RDMA device (`--device`);
//! - `baseline.perftest`: perftest's `ib_write_lat --write_with_imm` (64 B) on that device, every sample.
//!
//! The machine is shared and noisy, so only ratios within one run mean anything: `ratio.<a>_vs_<b>.<pNN>`, and
//! only between like-for-like measurements (see [`report::add_ratio_figures`]). Host stalls of 2 to 8 ms land on
//! whichever probe runs, so the ping-pong ratios are the median of per-round ratios (many short rounds), and a
//! round whose cache-line maximum exceeds `stall_threshold_ns` (`--stall-threshold-ns`, default 1 ms) is listed as
//! stalled and left out of the medians ([`rounds`]). The report folder: see [`report`];
//! what a reader sees first: [`tables`]. On a terminal, a progress bar shows on stderr while the rounds run.
#![deny(unsafe_code)] // one audited exception: the fan-out limit maps ring-like shared memory (fanout::store_limit)

#[cfg(feature = "aeron")]
mod aeron;
mod aeron_c;
mod book_apply;
mod callgrind;
mod consumers;
mod fanout;
mod host;
#[cfg(feature = "iceoryx2")]
mod iceoryx2;
mod itch;
mod mdp3;
mod mdp3_loopback;
mod openloop;
mod pingpong;
mod plant;
mod plot;
mod probe;
mod replay;
mod report;
#[cfg(test)]
mod report_tests;
mod rounds;
mod shm;
#[cfg(any(feature = "aeron", feature = "iceoryx2"))]
mod spin;
mod tables;
#[cfg(feature = "verbs")]
mod verbs;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use clap::{Parser, Subcommand};
use hdrhistogram::Histogram;
use mdfan_fabric::Provider;
use serde::Deserialize;

/// Pins the calling thread to `core`, if given; a failure is reported (the figures would mean less) but the
/// run goes on.
pub(crate) fn pin(core: Option<usize>) {
    if let Some(c) = core {
        if let Err(e) = mdfan_tuning::pin_current_thread(c) {
            PIN_FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            eprintln!("mdfan-bench: warning: {e}");
        }
    }
}

/// Threads that could not be pinned during the run (the report says so).
static PIN_FAILURES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs `f` on a new thread of this (never pinned) main thread and waits for it: every measurement starts from
/// the process's full CPU mask, so the threads it makes (Aeron's conductors, the publisher's) are not stuck on a
/// core an earlier measurement pinned.
fn fresh<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|sc| sc.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// 1 ns .. 10 s, 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds are valid")
}

#[derive(Parser)]
#[command(name = "mdfan-bench", version, about = "mdfan latency and throughput beside baselines of the same run")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure and write a report folder. Flags override the `--config` file's keys.
    Run(Box<RunArgs>),
    /// Run one decoder over one fixed input (what `run` counts instructions of under callgrind): `itch-snippet-mdfan`,
    /// `itch-snippet-itch5_hashmap`, `itch-snippet-itch5_parse`, `itch-synthetic-*` (the same three), `mdp3-mdfan`,
    /// `mdp3-sbe`; and the hot-hot merge's `merge-one-leg`, `merge-two-legs` (units: records).
    Decode {
        #[arg(long)]
        case: String,
        #[arg(long, default_value_t = 3)]
        passes: u32,
    },
    /// The plant's consumers (capture, exports, the NATS bridge) against the publisher's max replay of the same
    /// stream, in one run: writes OUT/consumers.md (benches/src/consumers.rs). Needs the release binaries of
    /// mdfan-capture and mdfan-bridge beside this one, and nats-server on PATH for the bridge.
    Consumers {
        /// Report folder (created).
        #[arg(long)]
        out: PathBuf,
        /// Rounds (the figures are their medians).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
        rounds: u32,
        /// ESH4's records this many times over (an instrument each).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeats: u32,
    },
    /// The plant: a hot-hot pair's merged stream beside its legs, the merge's cost per record, the relay's hop,
    /// and the upstream publisher's fan-out cost to strategies direct or through one relay, in one run: writes
    /// OUT/plant.md and its charts (benches/src/plant.rs). Needs the release binaries of mdfan-relay and
    /// mdfan-feedsim beside this one. The defaults take about a minute on 2 cores; `--rounds 1 --repeats 2`
    /// about 10 s.
    Plant {
        /// Report folder (created).
        #[arg(long)]
        out: PathBuf,
        /// Rounds (the figures are their medians).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
        rounds: u32,
        /// ESH4's records this many times over (an instrument each) in the fan-out's stream.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        repeats: u32,
        /// The relay hop's replay speed-up over ESH4's own timestamps.
        #[arg(long, default_value_t = 1000.0)]
        speedup: f64,
        /// Only these parts: pair, merge, relay, fanout (default: all).
        #[arg(long, value_delimiter = ',', value_parser = ["pair", "merge", "relay", "fanout"])]
        parts: Vec<String>,
    },
    /// Print two runs' figures side by side with the ratio B/A.
    Compare {
        /// The earlier run's folder.
        a: PathBuf,
        /// The later run's folder.
        b: PathBuf,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Report folder (created).
    #[arg(long)]
    out: PathBuf,
    /// A TOML scenario file (keys as the flags, with `_` for `-`; see benches/scenarios/).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Rounds; each runs every measurement once, interleaved.
    #[arg(long)]
    rounds: Option<u32>,
    /// Measured messages per latency measurement per round.
    #[arg(long)]
    count: Option<u64>,
    /// Open-loop measured time per rate per round, ms (instead of `--count`; not for rate `max`).
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Warm-up messages before each measurement (not recorded).
    #[arg(long)]
    warmup: Option<u64>,
    /// Open-loop rates, records per second, or `max`.
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<String>>,
    /// Subscriber counts for the open loop's fan-out and the replay throughput.
    #[arg(long, value_delimiter = ',')]
    subscribers: Option<Vec<usize>>,
    /// Open-loop record source: `replay` (the bundled capture, normalized per record) or `synthetic`.
    #[arg(long)]
    source: Option<String>,
    /// The two cores, `A,B` (default: the first two this process may use).
    #[arg(long, value_delimiter = ',')]
    cores: Option<Vec<usize>>,
    /// Folder for the shm rings.
    #[arg(long)]
    shm_dir: Option<PathBuf>,
    /// The capture replayed (default: the bundled ESH4 file).
    #[arg(long)]
    capture: Option<PathBuf>,
    /// A round whose cache-line probe's maximum exceeds this many ns is flagged as hit by a host stall and left
    /// out of the per-round ratio medians (default 1000000, 1 ms; see `rounds`).
    #[arg(long)]
    stall_threshold_ns: Option<u64>,
    /// Skip the replay throughput scenario (and the fan-out scaling one).
    #[arg(long)]
    no_replay: bool,
    /// Subscriber counts for the fan-out scaling scenario (`mdfan.fanout.subs<N>`; rings, not processes).
    #[arg(long, value_delimiter = ',')]
    fanout: Option<Vec<usize>>,
    /// Skip the MDP 3.0 and ITCH 5.0 decode scenarios.
    #[arg(long)]
    no_mdp3: bool,
    /// Skip the decoders' instruction counts under `valgrind --tool=callgrind` (run when valgrind is on PATH).
    #[arg(long)]
    no_callgrind: bool,
    /// Messages of the synthetic ITCH stream's timed part, after its million-order build-up (default 1000000).
    #[arg(long)]
    itch_synthetic_messages: Option<usize>,
    /// mdfan's fabric: `shm` (every scenario) or `verbs` (the ping-pong beside perftest's `ib_write_lat
    /// --write_with_imm` on the same RDMA device; needs the `verbs` feature).
    #[arg(long)]
    fabric: Option<Provider>,
    /// RDMA device for `--fabric verbs` (default: the first one).
    #[arg(long)]
    device: Option<String>,
    /// GID index for `--fabric verbs` (default: mdfan picks from sysfs, RoCE v2 IPv4-mapped first; perftest 0).
    #[arg(long)]
    gid_index: Option<u32>,
}

/// A scenario, from a TOML file and/or the command line. Every key is optional.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Scenario {
    rounds: u32,
    count: u64,
    duration_ms: Option<u64>,
    warmup: u64,
    stall_threshold_ns: u64,
    rates: Vec<RateSpec>,
    subscribers: Vec<usize>,
    source: String,
    cores: Vec<usize>,
    shm_dir: PathBuf,
    capture: Option<PathBuf>,
    replay: bool,
    fanout: Vec<usize>,
    mdp3: bool,
    callgrind: bool,
    itch_synthetic_messages: usize,
    fabric: Provider,
    device: Option<String>,
    gid_index: Option<u32>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            rounds: 3,
            count: 20_000,
            duration_ms: None,
            warmup: 2_000,
            stall_threshold_ns: rounds::DEFAULT_STALL_THRESHOLD_NS,
            rates: ["100000", "500000", "1000000", "max"].map(|r| RateSpec::Text(r.into())).to_vec(),
            subscribers: vec![1, 2, 4],
            source: "replay".into(),
            cores: Vec::new(),
            shm_dir: PathBuf::from(mdfan_fabric::shm::DEFAULT_DIR),
            capture: None,
            replay: true,
            fanout: vec![1, 2, 4, 8, 16],
            mdp3: true,
            callgrind: true,
            itch_synthetic_messages: itch::STEADY_MESSAGES,
            fabric: Provider::Shm,
            device: None,
            gid_index: None,
        }
    }
}

impl Scenario {
    fn from_args(a: &RunArgs) -> anyhow::Result<Scenario> {
        let mut s = match &a.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
            }
            None => Scenario::default(),
        };
        macro_rules! take {
            ($($f:ident),*) => { $( if let Some(v) = &a.$f { s.$f = v.clone(); } )* };
        }
        take!(rounds, count, warmup, stall_threshold_ns, subscribers, source, cores, shm_dir, fanout);
        if let Some(n) = a.itch_synthetic_messages {
            s.itch_synthetic_messages = n;
        }
        if a.no_callgrind {
            s.callgrind = false;
        }
        if let Some(r) = &a.rates {
            s.rates = r.iter().map(|r| RateSpec::Text(r.clone())).collect();
        }
        if a.duration_ms.is_some() {
            s.duration_ms = a.duration_ms;
        }
        if a.capture.is_some() {
            s.capture = a.capture.clone();
        }
        if a.no_replay {
            s.replay = false;
            s.fanout.clear();
        }
        if a.no_mdp3 {
            s.mdp3 = false;
        }
        if let Some(f) = a.fabric {
            s.fabric = f;
        }
        if a.device.is_some() {
            s.device = a.device.clone();
        }
        if a.gid_index.is_some() {
            s.gid_index = a.gid_index;
        }
        s.fabric.check_built().map_err(|e| anyhow::anyhow!("--fabric {}: {e}", s.fabric))?;
        anyhow::ensure!(s.rounds >= 1, "rounds must be at least 1");
        anyhow::ensure!(s.count >= 1, "count must be at least 1");
        anyhow::ensure!(!s.subscribers.is_empty(), "subscribers: give at least one count");
        anyhow::ensure!(s.subscribers.iter().all(|&n| (1..=64).contains(&n)), "subscribers must be 1..=64 each");
        anyhow::ensure!(s.fanout.iter().all(|&n| (1..=64).contains(&n)), "fanout: subscriber counts must be 1..=64");
        anyhow::ensure!(matches!(s.source.as_str(), "replay" | "synthetic"), "source must be replay or synthetic");
        let from = a.config.as_ref().map_or(String::new(), |p| format!(" (in {})", p.display()));
        let mut rates = Vec::new();
        for r in &s.rates {
            let rate = r.rate().map_err(|e| anyhow::anyhow!("{e}{from}"))?;
            anyhow::ensure!(!rates.contains(&rate), "rates: {} is given twice{from}", rate_key(rate));
            rates.push(rate);
        }
        let mut subs = s.subscribers.clone();
        subs.sort_unstable();
        subs.dedup();
        anyhow::ensure!(subs.len() == s.subscribers.len(), "subscribers: a count is given twice{from}");
        anyhow::ensure!(s.duration_ms != Some(0), "duration_ms must be at least 1{from}");
        if let [x, y] = s.cores.as_slice() {
            anyhow::ensure!(x != y, "cores: the sender and the receiver need two different cores, got {x},{y}");
        }
        anyhow::ensure!(
            s.fabric == Provider::Verbs || (s.device.is_none() && s.gid_index.is_none()),
            "device and gid_index are for --fabric verbs"
        );
        Ok(s)
    }
}

/// An open-loop rate as written: a number of records/s, or text (`"max"`, `"500000"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged, expecting = "a rate: records per second (a positive integer) or \"max\"")]
enum RateSpec {
    Number(u64),
    Text(String),
}

impl RateSpec {
    fn rate(&self) -> anyhow::Result<Option<u64>> {
        match self {
            RateSpec::Number(n) => parse_rate(&n.to_string()),
            RateSpec::Text(t) => parse_rate(t),
        }
    }
}

/// `max` → `None`; a number of records/s (1..=100M) → `Some`.
fn parse_rate(r: &str) -> anyhow::Result<Option<u64>> {
    if r == "max" {
        return Ok(None);
    }
    match r.replace('_', "").parse::<u64>() {
        Ok(v) if (1..=100_000_000).contains(&v) => Ok(Some(v)),
        _ => anyhow::bail!("rate {r:?}: give records per second (1..=100000000) or `max`"),
    }
}

/// `100k`, `1m`, `max`: the rate's name in figure keys.
fn rate_key(rate: Option<u64>) -> String {
    match rate {
        None => "max".into(),
        Some(r) if r % 1_000_000 == 0 => format!("r{}m", r / 1_000_000),
        Some(r) if r % 1_000 == 0 => format!("r{}k", r / 1_000),
        Some(r) => format!("r{r}"),
    }
}

fn main() {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Run(a) => Scenario::from_args(&a).and_then(|s| run(&a.out, &s)),
        Cmd::Decode { case, passes } => callgrind::decode(&repo_root(), &case, passes),
        Cmd::Compare { a, b } => compare(&a, &b),
        Cmd::Consumers { out, rounds, repeats } => consumers::run(&out, rounds, repeats),
        Cmd::Plant { out, rounds, repeats, speedup, parts } => {
            let allowed = mdfan_tuning::allowed_cores();
            let cores = match allowed.as_slice() {
                [a, b, ..] => (Some(*a), Some(*b)),
                _ => (None, None),
            };
            plant::run(&out, &plant::Options { rounds, repeats, speedup, parts }, cores)
        }
    };
    if let Err(e) = result {
        eprintln!("mdfan-bench: error: {e:#}");
        std::process::exit(1);
    }
}

/// Every histogram of a run, one interval per round.
struct Recorder {
    run_start: Instant,
    run_start_wall: SystemTime,
    hists: BTreeMap<String, report::Intervals>,
}

impl Recorder {
    fn add(&mut self, name: &str, started: Instant, h: Histogram<u64>) {
        let start = started.duration_since(self.run_start);
        self.hists.entry(name.to_owned()).or_default().0.push((start, started.elapsed(), h));
    }
}

/// Medians of per-round scalar figures.
/// The run's scalar figures, round by round: every figure a target reads is the median over rounds of that round's
/// value (a ratio is taken within each round first: [`Scalars::per_round_ratios`]).
#[derive(Default)]
struct Scalars(Vec<BTreeMap<String, f64>>);

impl Scalars {
    /// Starts the next round's figures.
    fn start_round(&mut self) {
        self.0.push(BTreeMap::new());
    }
    /// A figure of the round under way.
    fn add(&mut self, key: String, v: f64) {
        if self.0.is_empty() {
            self.start_round();
        }
        if let Some(r) = self.0.last_mut() {
            r.insert(key, v);
        }
    }
    /// Each figure's median over the rounds that measured it (of an even count, the upper middle one).
    fn medians(&self) -> BTreeMap<String, f64> {
        let mut all: BTreeMap<&String, Vec<f64>> = BTreeMap::new();
        for r in &self.0 {
            for (k, v) in r {
                all.entry(k).or_default().push(*v);
            }
        }
        all.into_iter()
            .map(|(k, mut v)| {
                v.sort_by(f64::total_cmp);
                (k.clone(), v[v.len() / 2])
            })
            .collect()
    }
    /// The figures [`report::add_scalar_ratios`] derives (the replay, fan-out and decoder ratios and the fan-out
    /// slopes), taken in each round from that round's figures, then the median over rounds: one method for every
    /// target.
    fn per_round_ratios(&self) -> BTreeMap<String, f64> {
        let mut derived = Scalars::default();
        for r in &self.0 {
            let mut m = r.clone();
            report::add_scalar_ratios(&mut m);
            derived.start_round();
            for (k, v) in m.into_iter().filter(|(k, _)| !r.contains_key(k)) {
                derived.add(k, v);
            }
        }
        derived.medians()
    }
}

fn run(out: &Path, s: &Scenario) -> anyhow::Result<()> {
    let tuning = mdfan_tuning::TuningReport::read(); // before any pinning narrows this thread's mask
    let allowed = mdfan_tuning::allowed_cores();
    let (a, b) = match s.cores.as_slice() {
        [a, b] => (Some(*a), Some(*b)),
        [] if allowed.len() >= 2 => (Some(allowed[0]), Some(allowed[1])),
        [] => (None, None),
        other => anyhow::bail!("cores takes two cores, got {other:?}"),
    };
    for c in [a, b].into_iter().flatten() {
        anyhow::ensure!(allowed.contains(&c), "cores: {c} is not one this process may use ({allowed:?})");
    }
    if s.fabric == Provider::Shm {
        anyhow::ensure!(s.shm_dir.is_dir(), "shm_dir {}: not a directory", s.shm_dir.display());
    }
    match std::fs::read_dir(out) {
        Ok(mut entries) => anyhow::ensure!(
            entries.next().is_none(),
            "out {}: not empty (a run's files would mix with what is there): give a new folder",
            out.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if out.exists() && !out.is_dir() => anyhow::bail!("out {}: not a directory ({e})", out.display()),
        Err(e) => anyhow::bail!("out {}: {e}", out.display()),
    }
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("out {}: {e}", out.display()))?;
    let capture = s.capture.clone().unwrap_or_else(|| repo_root().join(replay::CAPTURE));
    let source = match (s.fabric, s.source.as_str()) {
        (Provider::Shm, "replay") => openloop::Source::Replay(mdfan_feed::dbn::load_mbo_file(&capture)?.records.into()),
        _ => openloop::Source::Synthetic,
    };
    // the capture's records, normalized once: what the fan-out limit's stores copy
    let fanout_records: Vec<mdfan_wire::BookUpdate> = match (&source, s.fanout.is_empty()) {
        (openloop::Source::Replay(msgs), false) => {
            msgs.iter().filter_map(|m| mdfan_feed::dbn::normalize_mbo(m).ok()).collect()
        }
        _ => Vec::new(),
    };
    let mdp3_packets = match (s.fabric, s.mdp3) {
        (Provider::Shm, true) => mdp3::line_a(&repo_root().join(mdp3::CAPTURE))?,
        _ => Vec::new(),
    };
    // the ITCH inputs: the bundled snippet and the synthetic day-shaped stream over a million live orders
    let itch_inputs = match (s.fabric, s.mdp3) {
        (Provider::Shm, true) => {
            vec![itch::Input::snippet(&repo_root().join(itch::SNIPPET))?, itch::synthetic(s.itch_synthetic_messages, 7)]
        }
        _ => Vec::new(),
    };
    let book_records = match s.fabric {
        Provider::Shm => book_apply::records(&capture)?,
        Provider::Verbs => Vec::new(),
    };
    let esh4 = capture.file_name() == Path::new(replay::CAPTURE).file_name();
    // passes of the 5,000 packets: for the rates (each pass timed whole), and for the per-packet histogram
    let mdp3_passes = (s.count / 1_000).clamp(3, 100) as usize;
    let rates: Vec<Option<u64>> = s.rates.iter().map(RateSpec::rate).collect::<anyhow::Result<_>>()?;
    let open_subs = *s.subscribers.iter().find(|&&n| n == 2).unwrap_or(&s.subscribers[0]);
    let run_start_wall = SystemTime::now();
    let mut rec = Recorder { run_start: Instant::now(), run_start_wall, hists: BTreeMap::new() };
    let mut scalars = Scalars::default();
    let mut verbs_rounds = Vec::new();
    let (count, warmup) = (s.count, s.warmup);
    let aeron_c_dir = match s.fabric {
        Provider::Shm => aeron_c::samples_dir(),
        Provider::Verbs => None,
    };
    if s.fabric == Provider::Shm && aeron_c_dir.is_none() {
        eprintln!(
            "mdfan-bench: note: baseline.aeron_c skipped: Aeron's cping/cpong are not built (ops/build-aeron-samples \
             after a --features aeron build, or ${} naming their folder)",
            aeron_c::SAMPLES_ENV
        );
    }
    let progress = Progress::new(s, rates.len(), aeron_c_dir.is_some(), std::io::stderr().is_terminal());
    let host_start = host::Sample::read();
    let mut loads = Vec::new();
    for round in 1..=s.rounds {
        progress.round(round, s.rounds);
        scalars.start_round();
        loads.extend(host::load_1m());
        let t = Instant::now();
        let h = progress.step("baseline.cacheline", || fresh(|| pingpong::run(a, b, warmup, count)));
        let line = h.clone();
        rec.add("baseline.cacheline", t, h);
        if s.fabric == Provider::Verbs {
            let r = progress.step("mdfan.verbs.pingpong", || fresh(|| verbs_round(s, round, a, b)))?;
            verbs_rounds.push(r.record(&mut rec));
            continue;
        }
        #[cfg(feature = "aeron")]
        {
            let t = Instant::now();
            let h = progress.step("baseline.aeron", || fresh(|| aeron::pingpong(a, b, warmup, count)))?;
            rec.add("baseline.aeron", t, h);
        }
        if let Some(dir) = &aeron_c_dir {
            // Child processes pinned by taskset: nothing of this process runs on the cores meanwhile.
            let t = Instant::now();
            let h = progress.step("baseline.aeron_c", || aeron_c::pingpong(dir, a, b, warmup, count))?;
            rec.add("baseline.aeron_c", t, h);
        }
        #[cfg(feature = "iceoryx2")]
        {
            let t = Instant::now();
            let h = progress.step("baseline.iceoryx2", || fresh(|| iceoryx2::pingpong(a, b, warmup, count)))?;
            rec.add("baseline.iceoryx2", t, h);
        }
        let t = Instant::now();
        let h = progress.step("mdfan.shm.pingpong", || fresh(|| shm::pingpong(&s.shm_dir, a, b, warmup, count)))?;
        rec.add("mdfan.shm.pingpong", t, h);
        let probes = progress.step("probe.shm", || probe::round(&s.shm_dir, a, b, warmup, count))?;
        probe::record(&mut rec, &mut scalars, &line, probes);
        for &rate in &rates {
            let n = match (rate, s.duration_ms) {
                (Some(r), Some(ms)) => (r * ms / 1000).max(1),
                _ => count,
            };
            let spec = openloop::Spec {
                subscribers: open_subs,
                rate_per_s: rate,
                warmup,
                count: n,
                source: source.clone(),
                ring_slots: 1 << 16,
            };
            let base = format!("mdfan.shm.openloop.{}", rate_key(rate));
            let t = Instant::now();
            let m = progress.step(&base, || fresh(|| openloop::run(&s.shm_dir, a, b, &spec)))?;
            rec.add(&format!("{base}.decode_to_post"), t, m.decode_to_post);
            rec.add(&format!("{base}.post_to_poll"), t, m.post_to_poll);
            rec.add(&format!("{base}.end_to_end"), t, m.end_to_end);
            rec.add(&format!("{base}.cycle"), t, m.cycle);
            scalars.add(format!("{base}.late_posts"), m.late_posts as f64);
            scalars.add(format!("{base}.rate_per_s"), m.rate_per_s);
            scalars.add(format!("{base}.sender_ns_per_record_per_sub"), m.sender_ns_per_record_per_sub);
        }
        if s.replay {
            let d = progress.step("baseline.dbn_decode", || replay::dbn_decode_rates(&capture, 3))?;
            scalars.add("baseline.dbn_decode.rate_per_s".into(), d.file_per_s);
            scalars.add("baseline.dbn_decode_mem.rate_per_s".into(), d.mem_per_s);
            scalars.add("baseline.dbn_decode.records".into(), d.records as f64);
            for (idle, &subs) in [replay::Idle::Spin, replay::Idle::Yield, replay::Idle::HotFeed]
                .into_iter()
                .flat_map(|idle| s.subscribers.iter().map(move |subs| (idle, subs)))
            {
                let base = format!("mdfan.{}.subs{subs}", idle.stem());
                let t = Instant::now();
                let r = progress.step(&base, || fresh(|| replay::run(&capture, &s.shm_dir, subs, a, b, idle)))?;
                rec.add(&format!("{base}.post_to_poll"), t, r.post_to_poll);
                rec.add(&format!("{base}.cycle"), t, r.cycle);
                rec.add(&format!("{base}.decode_to_post"), t, r.decode_to_post);
                scalars.add(format!("{base}.rate_per_s"), r.rate_per_s);
                scalars.add(format!("{base}.records"), r.records as f64);
                scalars.add(format!("{base}.cpu_ns_per_record_per_sub"), r.cpu_ns_per_record_per_sub);
                scalars.add(format!("{base}.feed_cpu_ns_per_record"), r.feed_cpu_ns_per_record);
                scalars.add(format!("{base}.hot_cpu_ns_per_record_per_sub"), r.hot_cpu_ns_per_record_per_sub);
                scalars.add(format!("{base}.poll_cpu_ns_per_record_per_sub"), r.poll_cpu_ns_per_record_per_sub);
                scalars.add(format!("{base}.blocked_share"), r.blocked_share);
            }
        }
        if !fanout_records.is_empty() {
            for &subs in &s.fanout {
                let base = format!("mdfan.fanout.subs{subs}");
                let f = progress.step(&base, || fresh(|| fanout::run(&capture, &s.shm_dir, subs, a, b)))?;
                scalars.add(format!("{base}.records"), f.records as f64);
                scalars.add(format!("{base}.hot_ns_per_record"), f.hot_ns_per_record);
                scalars.add(format!("{base}.hot_ns_per_record_per_sub"), f.hot_ns_per_record / subs as f64);
                scalars.add(format!("{base}.sub_ns_per_record"), f.sub_ns_per_record);
                let base = format!("baseline.store64.subs{subs}");
                let ns = progress.step(&base, || fanout::store_limit(&fanout_records, subs, &s.shm_dir, a, b))?;
                scalars.add(format!("{base}.ns_per_record"), ns);
                scalars.add(format!("{base}.ns_per_record_per_sub"), ns / subs as f64);
            }
        }
        for input in &itch_inputs {
            // snippet: 1,000 messages a pass (tens of us): ten times the MDP 3.0 passes; synthetic: a million
            // messages after a million-order build-up (about half a second a pass for the three): one pass
            let passes = if input.name == "snippet" { mdp3_passes * 10 } else { 1 };
            let ns = progress.step(&format!("mdfan.itch_decode.{}", input.name), || {
                fresh(|| {
                    pin(a);
                    itch::ns_per_message(input, passes)
                })
            })?;
            for (d, ns) in itch::Decoder::ALL.into_iter().zip(ns) {
                scalars.add(format!("{}.{}.ns_per_message", d.key(), input.name), ns);
            }
        }
        if !mdp3_packets.is_empty() {
            let pk = &mdp3_packets;
            let (mdfan_ns, ref_ns) = progress.step("mdfan.mdp3_decode", || {
                fresh(|| {
                    pin(a);
                    mdp3::pass_ns(pk, mdp3_passes)
                })
            })?;
            scalars.add("mdfan.mdp3_decode.packets_per_s".into(), mdp3::PACKETS as f64 * 1e9 / mdfan_ns);
            scalars.add("mdfan.mdp3_decode.records_per_s".into(), mdp3::RECORDS as f64 * 1e9 / mdfan_ns);
            scalars.add("mdfan.mdp3_decode.ns_per_entry".into(), mdfan_ns / mdp3::ENTRIES as f64);
            scalars.add("baseline.mdp3_sbe.ns_per_entry".into(), ref_ns / mdp3::ENTRIES as f64);
            let t = Instant::now();
            let (h, hr) = progress.step("mdfan.mdp3_decode.packet", || {
                fresh(|| {
                    pin(a);
                    mdp3::packet_latency(pk, mdp3_passes)
                })
            })?;
            scalars.add("mdfan.mdp3_decode.packet_p50_ns".into(), h.value_at_quantile(0.5) as f64);
            scalars.add("baseline.mdp3_sbe.packet_p50_ns".into(), hr.value_at_quantile(0.5) as f64);
            rec.add("mdfan.mdp3_decode.packet", t, h);
            rec.add("baseline.mdp3_sbe.packet", t, hr);
            let t = Instant::now();
            let lb = progress
                .step("mdfan.mdp3_loopback", || fresh(|| mdp3_loopback::loopback(pk, mdp3_passes, &s.shm_dir, a, b)))?;
            rec.add("mdfan.mdp3_loopback.wire_to_poll", t, lb.wire_to_poll);
            rec.add("mdfan.mdp3_loopback.post_to_poll", t, lb.post_to_poll);
            scalars.add("mdfan.mdp3_loopback.packets".into(), lb.packets as f64);
            let hw = lb.stamp == mdfan_lines::StampKind::Hardware;
            scalars.add("mdfan.mdp3_loopback.hardware_stamp".into(), f64::from(u8::from(hw)));
        }
        if !book_records.is_empty() {
            let t = Instant::now();
            let m = progress.step("strategy.book_apply", || {
                fresh(|| {
                    pin(a);
                    book_apply::run(&book_records, round % 2 == 1, esh4)
                })
            })?;
            rec.add("strategy.book_apply", t, m.hot);
            rec.add("baseline.reference_book_apply", t, m.reference);
            scalars.add("strategy.book_apply.tsc_overhead_ns".into(), m.tsc_overhead_ns);
        }
    }
    progress.finish();
    let mut host_figures = BTreeMap::new();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    host::add_figures(&mut host_figures, host_start, host::Sample::read(), &loads, cores);
    for (k, v) in host_figures {
        scalars.add(k, v);
    }
    if s.callgrind && s.fabric == Provider::Shm && s.mdp3 {
        if callgrind::available() {
            for case in callgrind::CASES {
                progress.line(&format!("mdfan-bench: callgrind {case}"));
                for (key, v) in callgrind::figures(case, out)? {
                    scalars.add(key, v);
                }
            }
        } else {
            eprintln!("mdfan-bench: note: valgrind is not on PATH: no instruction counts (apt-get install valgrind)");
        }
    }

    let context = RunContext {
        scenario: s,
        cores: (a, b),
        tuning: &tuning,
        aeron_c: aeron_c_dir.as_deref(),
        verbs_rounds: &verbs_rounds,
        rates: &rates,
        open_loop_subscribers: open_subs,
        source: source.name(),
        capture: &capture,
        started: run_start_wall,
        elapsed: rec.run_start.elapsed(),
    }
    .to_json();
    let report = write_report(out, &context, &rec, &scalars, &s.subscribers, &rates, s.stall_threshold_ns)?;
    let mut figures: Vec<(&String, &f64)> = report.figures.iter().collect();
    figures.sort_by_key(|(k, _)| report::figure_order(k)); // p50 < p90 < ... < p99999 < max, as in summary.md
    for (k, v) in figures {
        println!("{k}={}", report::fmt_value(k, *v).trim_end_matches('x'));
    }
    for t in &report.targets {
        println!("target {}: {} ({})", t.key, t.verdict(), t.what);
    }
    if let Some(line) = rounds::stall_line(&report.figures) {
        println!("{line}");
    }
    println!("report={}", out.display());
    Ok(())
}

/// Progress on stderr while the rounds run: when stderr is a terminal, a bar of the measurements done with the
/// one under way; otherwise hidden (CI logs and tests see only the `round k/n` lines, as before). It draws only
/// when a measurement starts or ends, from the calling thread: no ticking thread wakes up on the measuring cores.
struct Progress {
    bar: indicatif::ProgressBar,
    round: std::cell::Cell<(u32, u32)>,
}

impl Progress {
    /// A bar of every measurement of the run (`rates` open-loop rates, `aeron_c`: Aeron's cping/cpong built),
    /// shown if `visible`.
    fn new(s: &Scenario, rates: usize, aeron_c: bool, visible: bool) -> Progress {
        let per_round = 1 + match s.fabric {
            Provider::Verbs => 1,
            Provider::Shm => {
                usize::from(cfg!(feature = "aeron"))
                    + usize::from(aeron_c)
                    + usize::from(cfg!(feature = "iceoryx2"))
                    + 2 // mdfan.shm.pingpong, probe.shm
                    + rates
                    + if s.replay { 1 + 2 * s.subscribers.len() } else { 0 }
                    + 2 * s.fanout.len()
                    + if s.mdp3 { 3 } else { 0 }
                    + 1 // book apply
            }
        };
        let total = u64::from(s.rounds) * per_round as u64;
        let target =
            if visible { indicatif::ProgressDrawTarget::stderr() } else { indicatif::ProgressDrawTarget::hidden() };
        let bar = indicatif::ProgressBar::with_draw_target(Some(total), target);
        let style = indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
        bar.set_style(style);
        Progress { bar, round: std::cell::Cell::new((0, s.rounds)) }
    }

    /// Runs one measurement (`key`, shown by its [`report::display_name`]) and counts it done.
    fn step<T>(&self, key: &str, f: impl FnOnce() -> T) -> T {
        let (round, rounds) = self.round.get();
        self.bar.set_message(format!("round {round}/{rounds}: {}", report::display_name(key)));
        let out = f();
        self.bar.inc(1);
        out
    }

    /// Starts round `round` of `rounds`: its line on stderr, as without the bar.
    fn round(&self, round: u32, rounds: u32) {
        self.round.set((round, rounds));
        self.line(&format!("mdfan-bench: round {round}/{rounds}"));
    }

    /// A line on stderr, above the bar when it is shown.
    fn line(&self, s: &str) {
        if self.bar.is_hidden() {
            eprintln!("{s}");
        } else {
            self.bar.suspend(|| eprintln!("{s}"));
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// What `summary.json`'s `context` records of a run.
struct RunContext<'a> {
    scenario: &'a Scenario,
    cores: (Option<usize>, Option<usize>),
    tuning: &'a mdfan_tuning::TuningReport,
    /// The folder of Aeron's cping/cpong/aeronmd when they ran (`baseline.aeron_c`).
    aeron_c: Option<&'a Path>,
    verbs_rounds: &'a [serde_json::Value],
    rates: &'a [Option<u64>],
    open_loop_subscribers: usize,
    source: &'a str,
    capture: &'a Path,
    started: SystemTime,
    elapsed: std::time::Duration,
}

impl RunContext<'_> {
    /// The `context` object; its keys are stable (other tools read them), new ones are only added.
    fn to_json(&self) -> serde_json::Value {
        let s = self.scenario;
        let (a, b) = self.cores;
        let peers_built: Vec<&str> = [("aeron", cfg!(feature = "aeron")), ("iceoryx2", cfg!(feature = "iceoryx2"))]
            .into_iter()
            .chain([("aeron_c", self.aeron_c.is_some()), ("verbs", cfg!(feature = "verbs"))])
            .filter_map(|(name, on)| on.then_some(name))
            .collect();
        serde_json::json!({
            "cores": [a, b],
            "pinning": match (a, PIN_FAILURES.load(std::sync::atomic::Ordering::Relaxed)) {
                (None, _) => "off (fewer than two allowed cores)".to_owned(),
                (Some(_), 0) => "every measuring thread pinned".to_owned(),
                (Some(_), n) => format!("{n} threads could not be pinned"),
            },
            "clock": clock_name(),
            "clocksource": std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .unwrap_or_default().trim(),
            "fabric": { "kind": s.fabric, "device": s.device, "gid_index": s.gid_index },
            "verbs_rounds": self.verbs_rounds,
            "rounds": s.rounds,
            "duration_ms": s.duration_ms,
            "peers_built": peers_built,
            "aeron_c_samples": self.aeron_c.map(|p| p.display().to_string()),
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            "count_per_round": s.count,
            "warmup": s.warmup,
            "rates": self.rates.iter().map(|&r| rate_key(r)).collect::<Vec<_>>(),
            "subscribers": s.subscribers,
            "replay": s.replay,
            "mdp3": s.mdp3,
            "open_loop_subscribers": self.open_loop_subscribers,
            "source": self.source,
            "capture": self.capture.display().to_string(),
            "tuning": self.tuning,
            "host": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
            "cpu": cpu_model(),
            "started_unix_s": self.started.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "elapsed_s": (self.elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "version": env!("CARGO_PKG_VERSION"),
        })
    }
}

/// A run's report as written: every figure (medians of the scalars, each histogram's percentiles, the ratios)
/// and the targets.
struct Report {
    figures: BTreeMap<String, f64>,
    targets: Vec<report::Target>,
}

/// Writes the report folder of a run: each histogram's `.hgrm` and `.hlog`, `summary.json` and `summary.md`, the
/// charts and `report.html`. `scalars` are the run's scalar figures (medians over rounds). The ping-pong ratios
/// are medians of per-round ratios, rounds whose cache-line maximum exceeds `stall_threshold_ns` left out
/// ([`rounds`]); the per-round table goes into the context as `pingpong_rounds`.
fn write_report(
    out: &Path,
    context: &serde_json::Value,
    rec: &Recorder,
    scalars: &Scalars,
    subscribers: &[usize],
    rates: &[Option<u64>],
    stall_threshold_ns: u64,
) -> anyhow::Result<Report> {
    let mut figures = scalars.medians();
    let mut totals = BTreeMap::new();
    for (name, intervals) in &rec.hists {
        let h = intervals.total();
        std::fs::write(out.join(format!("{name}.hgrm")), report::hgrm(&h))?;
        std::fs::write(out.join(format!("{name}.hlog")), report::hlog(name, rec.run_start_wall, intervals)?)?;
        report::add_figures(&mut figures, name, &h);
        totals.insert(name.clone(), h);
    }
    report::add_ratio_figures(&mut figures);
    // one method: the scalar ratios (and the fan-out slopes) are medians over rounds of each round's own, as the
    // ping-pong ratios below are
    figures.extend(scalars.per_round_ratios());
    report::add_ratios(&mut figures, "strategy.book_apply", "baseline.reference_book_apply");
    let per_round = rounds::per_round(&rounds::probes_of(&rec.hists), &report::PINGPONG_RATIOS, stall_threshold_ns);
    per_round.add_figures(&mut figures);
    let mut context = context.clone();
    if let Some(c) = context.as_object_mut() {
        c.insert("pingpong_rounds".into(), per_round.to_json());
    }
    let context = &context;
    let targets = targets(&figures);
    report::write_summary(out, context, &figures, &targets)?;
    let charts = charts(&totals, &figures, subscribers, rates)?;
    for (i, chart) in charts.iter().enumerate() {
        std::fs::write(out.join(format!("chart-{}.svg", i + 1)), &chart.svg)?;
    }
    std::fs::write(out.join("report.html"), plot::html(context, &charts, &targets, &figures))?;
    Ok(Report { figures, targets })
}

/// The issue's targets, as far as this run measured them: (what, figure key, limit, at most).
/// The Aeron targets read `baseline.aeron_best` (the better of the two Aeron measurements at that percentile) and
/// say which one it was.
fn targets(f: &BTreeMap<String, f64>) -> Vec<report::Target> {
    let unfit = host::unfit(f);
    let pp = "ratio.mdfan.shm.pingpong_vs_baseline";
    let aeron = |p: &str| match report::best_aeron(f, p) {
        Some(v) => format!("the better Aeron IPC figure (here {})", report::display_name(v)),
        None => "the better Aeron IPC figure".to_owned(),
    };
    [
        ("shm one-way p50 <= 1.0x cache-line".into(), format!("{pp}.cacheline.p50"), 1.0, true),
        ("shm one-way p99 <= 1.1x cache-line".into(), format!("{pp}.cacheline.p99"), 1.1, true),
        ("shm one-way p99.9 <= 1.25x cache-line".into(), format!("{pp}.cacheline.p999"), 1.25, true),
        (format!("shm one-way p50 <= 1.0x {}", aeron("p50")), format!("{pp}.aeron_best.p50"), 1.0, true),
        (format!("shm one-way p99.9 <= 0.7x {}", aeron("p999")), format!("{pp}.aeron_best.p999"), 0.7, true),
        ("shm one-way p50 <= 0.3x iceoryx2".into(), format!("{pp}.iceoryx2.p50"), 0.3, true),
        (
            "replay + normalize + fan-out to 2 subscribers >= 0.8x DBN decode of the capture file (zstd + DBN)".into(),
            "ratio.mdfan.replay.subs2_vs_baseline.dbn_decode.rate".into(),
            0.8,
            false,
        ),
        (
            "the same with hot_idle = \"yield\" and yielding subscribers (a host with fewer cores than busy threads)"
                .into(),
            "ratio.mdfan.replay_yield.subs2_vs_baseline.dbn_decode.rate".into(),
            0.8,
            false,
        ),
        (
            "the same with the feed decoded on the hot loop's thread (feed_on_hot_thread = true, both spinning)".into(),
            "ratio.mdfan.replay_hot_feed.subs2_vs_baseline.dbn_decode.rate".into(),
            0.8,
            false,
        ),
        (
            "fan-out: hot-loop cost per record per extra subscriber <= 1.5x the 64-byte store limit (same run)".into(),
            "ratio.mdfan.fanout.extra_sub_vs_baseline.store64".into(),
            1.5,
            true,
        ),
        (
            "ITCH 5.0 decode + normalize, bundled snippet: time per message <= 1.0x itch5 parse + HashMap order table"
                .into(),
            "ratio.mdfan.itch_decode_vs_baseline.itch5_hashmap.snippet".into(),
            1.0,
            true,
        ),
        (
            "ITCH 5.0 decode + normalize, synthetic day over a million live orders: time per message <= 1.0x itch5 \
             parse + HashMap order table"
                .into(),
            "ratio.mdfan.itch_decode_vs_baseline.itch5_hashmap.synthetic".into(),
            1.0,
            true,
        ),
        (
            "MDP 3.0 decode + normalize: time per packet (p50) <= 1.5x the sbe_gen reference reading the same fields"
                .into(),
            "ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_packet".into(),
            1.5,
            true,
        ),
        (
            "MDP 3.0 decode + normalize: time per entry <= 1.5x the sbe_gen reference reading the same fields".into(),
            "ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe.per_entry".into(),
            1.5,
            true,
        ),
        (
            "verbs one-way p50 <= 1.15x perftest write-with-imm (Soft-RoCE run)".into(),
            "ratio.mdfan.verbs.pingpong_vs_baseline.perftest.p50".into(),
            1.15,
            true,
        ),
    ]
    .into_iter()
    .map(|(what, key, limit, at_most): (String, String, f64, bool)| {
        let mut why = unfit.clone();
        // a replay target is judged only on a host with a core per busy thread (3: feed, hot loop, subscriber poll;
        // 2 with the feed on the hot thread)
        let busy = if key.contains("replay_hot_feed") { 2.0 } else { 3.0 };
        if let (true, Some(&cores)) = (key.contains(".replay"), f.get("host.cores")) {
            if cores < busy {
                why.push(format!(
                    "{cores:.0} cores for {busy:.0} busy threads: replay judged only with a core per busy thread"
                ));
            }
        }
        report::Target::new(f, &what, &key, limit, at_most).unfit_if(&why)
    })
    .collect()
}

/// The report's charts, legends in [`report::display_name`]s: one-way latency of every ping-pong variant measured,
/// the open loop's stages at the first rate, and replay throughput by subscriber count (`chart-1.svg` ..).
fn charts(
    totals: &BTreeMap<String, Histogram<u64>>,
    figures: &BTreeMap<String, f64>,
    subscribers: &[usize],
    rates: &[Option<u64>],
) -> anyhow::Result<Vec<plot::Chart>> {
    let mut charts = Vec::new();
    let pick = |keys: &[String]| -> Vec<(String, &Histogram<u64>)> {
        keys.iter().filter_map(|k| totals.get(k).map(|h| (report::display_name(k), h))).collect()
    };
    let latency = |title: &str, series: &[(String, &Histogram<u64>)]| -> anyhow::Result<String> {
        let refs: Vec<(&str, &Histogram<u64>)> = series.iter().map(|(n, h)| (n.as_str(), *h)).collect();
        plot::latency_by_percentile(title, &refs)
    };
    let one_way: Vec<String> = report::LATENCY_VARIANTS.iter().map(|s| s.to_string()).collect();
    let title = "One-way latency by percentile (ping-pong RTT/2, same cores, same run)";
    let svg = latency(title, &pick(&one_way))?;
    charts.push(plot::Chart { kind: plot::ChartKind::Latency, title: title.to_owned(), svg });
    if let Some(&rate) = rates.first() {
        let base = format!("mdfan.shm.openloop.{}", rate_key(rate));
        // no cache line beside these: post to poll and end to end count the time a record queues behind the ones
        // before it, not a hand-off (`report::add_ratio_figures`)
        let stages: Vec<String> =
            ["decode_to_post", "post_to_poll", "end_to_end", "cycle"].iter().map(|s| format!("{base}.{s}")).collect();
        let series = pick(&stages);
        if series.len() > 1 {
            let title = format!("Open loop at {}: latency per stage by percentile", report::rate_name(&rate_key(rate)));
            let svg = latency(&title, &series)?;
            charts.push(plot::Chart { kind: plot::ChartKind::OpenLoop, title, svg });
        }
    }
    let points: Vec<(usize, f64)> = subscribers
        .iter()
        .filter_map(|&n| figures.get(&format!("mdfan.replay.subs{n}.rate_per_s")).map(|&r| (n, r)))
        .collect();
    if !points.is_empty() {
        let name = report::display_name("baseline.dbn_decode");
        let reference = figures.get("baseline.dbn_decode.rate_per_s").map(|&r| (name.as_str(), r));
        let title = "Replay throughput against subscriber count (pace max, policy block)";
        let svg = plot::throughput(title, &points, reference)?;
        charts.push(plot::Chart { kind: plot::ChartKind::Throughput, title: title.to_owned(), svg });
    }
    let series: Vec<(String, Vec<(usize, f64)>)> = [
        ("mdfan.fanout", "hot_ns_per_record", "hot loop"),
        ("baseline.store64", "ns_per_record", "64 B store limit"),
        ("mdfan.fanout", "sub_ns_per_record", "subscriber side (per subscriber)"),
    ]
    .iter()
    .map(|(stem, what, name)| (name.to_string(), fanout::curve(figures, stem, what)))
    .filter(|(_, pts)| !pts.is_empty())
    .collect();
    if !series.is_empty() {
        let title = "Fan-out: ns per record against subscriber count (rings in one process, same run)";
        let svg = plot::cost_by_subscribers(title, &series)?;
        charts.push(plot::Chart { kind: plot::ChartKind::Fanout, title: title.to_owned(), svg });
    }
    Ok(charts)
}

/// One round's verbs measurements: mdfan's ping-pong and perftest's, each with its start time, and the
/// round's summary for the report's context.
struct VerbsRound {
    mdfan: (Instant, Histogram<u64>),
    perftest: (Instant, Histogram<u64>),
    summary: serde_json::Value,
}

impl VerbsRound {
    fn record(self, rec: &mut Recorder) -> serde_json::Value {
        rec.add("mdfan.verbs.pingpong", self.mdfan.0, self.mdfan.1);
        rec.add("baseline.perftest", self.perftest.0, self.perftest.1);
        self.summary
    }
}

/// One round's verbs measurements, after the cache-line baseline: mdfan's verbs ping-pong and perftest on the same
/// device and cores (mdfan first in odd rounds, perftest first in even ones, so neither always follows the other).
#[cfg(feature = "verbs")]
fn verbs_round(s: &Scenario, round: u32, a: Option<usize>, b: Option<usize>) -> anyhow::Result<VerbsRound> {
    let (device, gid) = (s.device.as_deref(), s.gid_index);
    let perftest = || -> anyhow::Result<(Instant, verbs::Perftest)> {
        let t = Instant::now();
        Ok((t, fresh(|| verbs::perftest(device, gid, a, b, s.warmup, s.count))?))
    };
    let first = if round.is_multiple_of(2) { Some(perftest()?) } else { None };
    let t = Instant::now();
    let (h, nic_clock) = fresh(|| verbs::pingpong(device, gid, a, b, s.warmup, s.count))?;
    let (tp, p) = match first {
        Some(p) => p,
        None => perftest()?,
    };
    if p.op != "write_with_imm" {
        eprintln!("mdfan-bench: warning: this perftest has no --write_with_imm; baseline.perftest is a plain WRITE");
    }
    let summary = serde_json::json!({
        "round": round,
        "mdfan_verbs_p50_ns": h.value_at_quantile(0.5),
        "perftest_p50_ns": p.hist.value_at_quantile(0.5),
        "clocks": {
            "mdfan.verbs.pingpong": "tsc",
            "baseline.perftest": "perftest's own cycle counter",
            "nic": nic_clock,
        },
        "perftest": {
            "command": p.command,
            "op": p.op,
            "version": p.version,
            "attempts": p.attempts,
            "own_p50_p99_p999_ns": p.own_p50_p99_p999_ns,
        },
    });
    Ok(VerbsRound { mdfan: (t, h), perftest: (tp, p.hist), summary })
}

#[cfg(not(feature = "verbs"))]
fn verbs_round(_: &Scenario, _: u32, _: Option<usize>, _: Option<usize>) -> anyhow::Result<VerbsRound> {
    anyhow::bail!("--fabric verbs needs the `verbs` feature")
}

/// What `quanta` reads: the TSC when the CPU reports an invariant TSC and RDTSCP (Linux's `nonstop_tsc` and
/// `rdtscp` flags), else `clock_gettime(CLOCK_MONOTONIC)` (as in a VM whose CPU model hides the invariant TSC).
fn clock_name() -> &'static str {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info.lines().find_map(|l| l.strip_prefix("flags")).unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    if has("nonstop_tsc") && has("rdtscp") {
        "tsc"
    } else {
        "clock_gettime(CLOCK_MONOTONIC)"
    }
}

/// The repository root (the bench's manifest is in benches/).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned()))
        .unwrap_or_default()
}

/// `compare RUN_A RUN_B`: see [`compare_to`].
fn compare(a: &Path, b: &Path) -> anyhow::Result<()> {
    let (ra, rb) = (report::read_summary(a)?, report::read_summary(b)?);
    compare_to(&ra, &rb, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    Ok(())
}

/// Warns on `err`, one line per key, where the two runs' contexts differ (machine, cores, kernel, clock, pinning,
/// peers built, scenario: their figures are then not like for like), then lists on `out` every figure of either
/// run with B/A, in [`report::figure_order`] (percentiles numerically), counts as integers. A closed `out`
/// (`| head`) ends the listing quietly.
fn compare_to(
    ra: &report::Summary,
    rb: &report::Summary,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) {
    for d in report::context_differences(&ra.context, &rb.context) {
        let _ = writeln!(err, "mdfan-bench: warning: the runs' contexts differ: {d}");
    }
    let mut keys: Vec<&String> =
        ra.figures.keys().chain(rb.figures.keys()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    keys.sort_by_cached_key(|k| report::figure_order(k));
    let value = |k: &str, v: Option<&f64>| match v {
        None => "-".to_owned(),
        Some(v) if report::is_count(k) || (k.ends_with("_ns") && v.fract() == 0.0) => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    };
    if writeln!(out, "{:<70} {:>14} {:>14} {:>8}", "figure", "A", "B", "B/A").is_err() {
        return;
    }
    for k in keys {
        let (va, vb) = (ra.figures.get(k), rb.figures.get(k));
        let ratio = match (va, vb) {
            (Some(a), Some(b)) if *a != 0.0 => format!("{:.2}", b / a),
            _ => "-".to_owned(),
        };
        if writeln!(out, "{k:<70} {:>14} {:>14} {ratio:>8}", value(k, va), value(k, vb)).is_err() {
            return;
        }
    }
}
