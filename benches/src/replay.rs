//! Throughput of the real product: `mdfan-publisher`'s library replays the bundled capture at pace `max` to
//! N subscribers of the `mdfan-subscriber` library (policy `block`, small rings, so the rate is what the
//! publisher and its subscribers sustain together, not what a ring can buffer), and the rate of decoding the
//! same capture with the `dbn` crate alone, measured in the same run.
//!
//! The publisher's hot loop is pinned to one core and spins for the whole replay, so its CPU time per record
//! per subscriber is the replay's wall time / records / subscribers. All subscribers are polled by one thread
//! pinned to the other core (a strategy with several feeds); their post-to-poll latencies are merged.
//!
//! The feed thread (zstd, DBN decode, normalise into the journal) is not pinned. On a host with fewer cores
//! than busy threads (2 cores: the hot loop and the subscriber thread each pin one) a spinning hot loop and a
//! spinning subscriber leave the feed thread only time slices, and the replay measures the scheduler, not
//! mdfan. [`Idle::Yield`] runs the same replay with `publisher.hot_idle = "yield"` and a subscriber thread that
//! yields after the same run of empty polls, so the feed thread gets the cores whenever the others have
//! nothing to do; [`Idle::HotFeed`] keeps both spinning and decodes the feed on the hot loop's thread
//! (`publisher.feed_on_hot_thread = true`), so there are as many busy threads as cores. All three are reported.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dbn::decode::DecodeRecord;
use hdrhistogram::Histogram;
use mdfan_publisher::config::{Config, HotIdle};
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Idler, Subscriber, SubscriberConfig};
use mdfan_wire::control::SlowConsumerPolicy;

/// The bundled capture the replay scenarios read (relative to the repository root).
pub const CAPTURE: &str = "data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst";

/// What one replay measured.
pub struct Replay {
    pub records: u64,
    /// Records per second over the replay (first record to the last one fanned out).
    pub rate_per_s: f64,
    /// The hot loop's time per record per subscriber, ns (it spins: CPU time = wall time).
    pub cpu_ns_per_record_per_sub: f64,
    /// Share of the replay the hot loop spent waiting for a full ring (policy block), summed over subscribers:
    /// near 0 the publisher sets the rate, near 1 (or above, with several) the subscribers do.
    pub blocked_share: f64,
    /// CPU time per record of each stage, ns, from the threads' own CPU clocks ([`ThreadCpu`]): the feed thread
    /// (decode + normalise into the journal; 0 with the feed on the hot thread, where it is in the hot loop's),
    /// the hot loop per subscriber, and the subscriber thread's polls per subscriber.
    pub feed_cpu_ns_per_record: f64,
    pub hot_cpu_ns_per_record_per_sub: f64,
    pub poll_cpu_ns_per_record_per_sub: f64,
    /// Every subscriber's post-to-poll latency, merged (ns).
    pub post_to_poll: Histogram<u64>,
    /// The hot loop's duty cycle (ns), from its own log-bucket histogram (upper bounds within 6.25%).
    pub cycle: Histogram<u64>,
    /// Normalization start to each post, from the hot loop's own histogram (ns, within 6.25%).
    pub decode_to_post: Histogram<u64>,
}

/// What the hot loop and the subscriber thread do on an empty poll (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Both busy-spin (`hot_idle = "spin"`, the default): a core per busy thread.
    Spin,
    /// Both yield after [`HotIdle::YIELD_AFTER_CYCLES`] empty polls in a row (`hot_idle = "yield"`).
    Yield,
    /// Both busy-spin, and the feed is decoded on the hot loop's thread whenever it has no record to send
    /// (`publisher.feed_on_hot_thread = true`): two busy threads, one per core.
    HotFeed,
}

impl Idle {
    /// The scalar name's stem: `replay` or `replay_yield`.
    pub fn stem(self) -> &'static str {
        match self {
            Idle::Spin => "replay",
            Idle::Yield => "replay_yield",
            Idle::HotFeed => "replay_hot_feed",
        }
    }

    fn hot_idle(self) -> HotIdle {
        match self {
            Idle::Spin | Idle::HotFeed => HotIdle::Spin,
            Idle::Yield => HotIdle::Yield,
        }
    }
}

/// The publisher of a bench replay: `capture` at pace `max` over shm in `shm_dir`, policy `block`, waiting for
/// `subscribers`, the hot loop on `hot_core`; `publisher_keys` are more `[publisher]` lines, `sections` more
/// sections; `what` names the scenario in errors.
pub fn publisher_config(
    capture: &Path,
    shm_dir: &Path,
    subscribers: usize,
    hot_core: Option<usize>,
    publisher_keys: &str,
    sections: &str,
    what: &str,
) -> anyhow::Result<Config> {
    let hot = hot_core.map_or(String::new(), |c| format!("hot_core = {c}\n"));
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\n{hot}{publisher_keys}wait_for_subscribers = {subscribers}\n\
         policies = [\"block\"]\n\
         [feed]\nformat = \"dbn\"\npath = {capture:?}\npace = \"max\"\n\
         {sections}\
         [fabric]\nprovider = \"shm\"\nshm_dir = {shm_dir:?}\n",
    );
    Ok(Config::parse(&text, Path::new(&format!("mdfan-bench {what}")))?)
}

/// Replays `capture` to `subscribers` subscribers; hot loop on `hot_core`, subscribers on `sub_core`, both idling
/// as `idle` says.
pub fn run(
    capture: &Path,
    shm_dir: &Path,
    subscribers: usize,
    hot_core: Option<usize>,
    sub_core: Option<usize>,
    idle: Idle,
) -> anyhow::Result<Replay> {
    let (hot_idle, hot_feed) = match idle {
        Idle::Spin => ("spin", false),
        Idle::Yield => ("yield", false),
        Idle::HotFeed => ("spin", true),
    };
    let publisher_keys = format!("hot_idle = \"{hot_idle}\"\nfeed_on_hot_thread = {hot_feed}\n");
    let cfg = publisher_config(capture, shm_dir, subscribers, hot_core, &publisher_keys, "", "replay")?;
    anyhow::ensure!(cfg.publisher.hot_idle == idle.hot_idle(), "replay config: hot_idle not {hot_idle}");
    let sub_idle = idle.hot_idle().strategy();
    let publisher = Publisher::bind(cfg)?;
    let endpoint = publisher.local_addr().to_string();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&shutdown);
    let cpu = ThreadCpu::start(&[FEED_THREAD, HOT_THREAD]);
    let handle = std::thread::spawn(move || publisher.run(flag));
    let consumer = {
        let shm_dir = shm_dir.to_owned();
        std::thread::spawn(move || -> anyhow::Result<(Histogram<u64>, u64, u64)> {
            let mut subs = Vec::with_capacity(subscribers);
            for k in 0..subscribers {
                let mut cfg = SubscriberConfig::new(&endpoint, &format!("bench-{k}"));
                cfg.ring_slots = 4096;
                cfg.policy = SlowConsumerPolicy::Block;
                cfg.fabric = mdfan_fabric::FabricConfig::Shm { dir: shm_dir.clone() };
                subs.push(Subscriber::connect(&cfg)?.with_latency());
            }
            crate::pin(sub_core);
            let cpu_start = own_cpu_ns();
            let mut open = subscribers;
            let mut closed = vec![false; subscribers];
            let mut records = 0u64;
            let mut idler = Idler::new(sub_idle);
            while open > 0 {
                let mut work = 0;
                for (k, s) in subs.iter_mut().enumerate() {
                    if closed[k] {
                        continue;
                    }
                    let mut ended = false;
                    work += s.poll(64, |ev| match ev {
                        Event::Record(_) => records += 1,
                        Event::Closed(_) => ended = true,
                        _ => {}
                    });
                    if ended {
                        closed[k] = true;
                        open -= 1;
                    }
                }
                idler.idle(work);
            }
            let poll_cpu_ns = own_cpu_ns().saturating_sub(cpu_start);
            let mut merged = crate::new_histogram();
            for s in &subs {
                if let Some(l) = s.latency() {
                    merged.add(l.histogram()).map_err(|e| anyhow::anyhow!("merging latency histograms: {e}"))?;
                }
            }
            Ok((merged, records, poll_cpu_ns))
        })
    };
    let consumed = consumer.join().map_err(|_| anyhow::anyhow!("replay: subscriber thread panicked"));
    if !matches!(consumed, Ok(Ok(_))) {
        shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let report = handle.join().map_err(|_| anyhow::anyhow!("replay: publisher thread panicked"))??;
    let cpu = cpu.stop();
    let (post_to_poll, received, poll_cpu_ns) = consumed??;
    let expected = report.records * subscribers as u64;
    // Each subscriber also gets its end-of-stream record.
    anyhow::ensure!(
        received >= expected,
        "replay: subscribers received {received} records, expected at least {expected} ({} per subscriber)",
        report.records
    );
    let to_hist = |buckets: &[(u64, u64)]| {
        let mut h = crate::new_histogram();
        for &(upper_ns, count) in buckets {
            h.saturating_record_n(upper_ns.max(1), count);
        }
        h
    };
    Ok(Replay {
        records: report.records,
        rate_per_s: report.rate_per_s(),
        cpu_ns_per_record_per_sub: report.replay_ns as f64 / (report.records.max(1) * subscribers as u64) as f64,
        feed_cpu_ns_per_record: cpu.get(FEED_THREAD).copied().unwrap_or(0) as f64 / report.records.max(1) as f64,
        hot_cpu_ns_per_record_per_sub: cpu.get(HOT_THREAD).copied().unwrap_or(0) as f64
            / (report.records.max(1) * subscribers as u64) as f64,
        poll_cpu_ns_per_record_per_sub: poll_cpu_ns as f64 / (report.records.max(1) * subscribers as u64) as f64,
        blocked_share: report.sessions.iter().map(|s| s.blocked_ns).sum::<u64>() as f64
            / report.replay_ns.max(1) as f64,
        post_to_poll,
        cycle: to_hist(&report.cycle_buckets_ns),
        decode_to_post: to_hist(&report.decode_to_post_buckets_ns),
    })
}

/// The publisher's feed and hot-loop threads (their names, `Agent::role_name`).
const FEED_THREAD: &str = "mdfan-feed";
pub(crate) const HOT_THREAD: &str = "mdfan-hot";

/// The calling thread's CPU time so far, ns: the kernel's per-thread CPU clock (`sum_exec_runtime`, what
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` reads), from `/proc/thread-self/schedstat`; 0 where unreadable.
fn own_cpu_ns() -> u64 {
    cpu_ns_of(Path::new("/proc/thread-self/schedstat"))
}

fn cpu_ns_of(schedstat: &Path) -> u64 {
    std::fs::read_to_string(schedstat).ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// The CPU time of the publisher's threads, which it starts and joins itself (no handle reaches the bench): a
/// sampler thread reads each named thread's CPU clock (`/proc/self/task/<tid>/schedstat`, the clock
/// `CLOCK_THREAD_CPUTIME_ID` reads, which counts from the thread's start) every [`ThreadCpu::PERIOD`] while it
/// lives, sleeping in between (it never spins, so it takes no core from the measured threads), and keeps the last
/// value: the thread's CPU time to within one period of its end.
pub(crate) struct ThreadCpu {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<std::collections::BTreeMap<String, u64>>,
}

impl ThreadCpu {
    const PERIOD: std::time::Duration = std::time::Duration::from_micros(500);

    pub(crate) fn start(names: &[&'static str]) -> ThreadCpu {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let names: Vec<&'static str> = names.to_vec();
        let handle = std::thread::spawn(move || {
            // tid -> (name, last CPU ns)
            let mut seen: std::collections::BTreeMap<u64, (String, u64)> = std::collections::BTreeMap::new();
            let mut sample = || {
                for e in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
                    let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else { continue };
                    let name = match seen.get(&tid) {
                        Some((n, _)) => n.clone(),
                        None => std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_owned(),
                    };
                    if !names.contains(&name.as_str()) {
                        continue;
                    }
                    let ns = cpu_ns_of(&e.path().join("schedstat"));
                    let slot = seen.entry(tid).or_insert((name, 0));
                    slot.1 = slot.1.max(ns);
                }
            };
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                sample();
                std::thread::sleep(ThreadCpu::PERIOD);
            }
            let mut by_name = std::collections::BTreeMap::new();
            for (name, ns) in seen.into_values() {
                *by_name.entry(name).or_insert(0) += ns;
            }
            by_name
        });
        ThreadCpu { stop, handle }
    }

    /// CPU ns by thread name.
    pub(crate) fn stop(self) -> std::collections::BTreeMap<String, u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Decode-only rates of `capture` with the `dbn` crate, the best of `passes` passes each (records/s):
/// `file`: the capture's bytes (read into memory once) through the zstd stream decoder and DBN record decoding,
/// what any reader of the capture pays per record; `mem`: the decompressed bytes, DBN record decoding alone
/// (a bounds check and a cast per record). No normalization, no checks.
pub struct DecodeRates {
    pub records: u64,
    pub file_per_s: f64,
    pub mem_per_s: f64,
}

pub fn dbn_decode_rates(capture: &Path, passes: u32) -> anyhow::Result<DecodeRates> {
    use std::io::Read;
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", capture.display());
    let compressed = std::fs::read(capture).map_err(|e| err(&e))?;
    let mut raw = Vec::new();
    dbn::decode::DynReader::new_inferred(&compressed[..])
        .map_err(|e| err(&e))?
        .read_to_end(&mut raw)
        .map_err(|e| err(&e))?;
    let mut rates = DecodeRates { records: 0, file_per_s: 0.0, mem_per_s: 0.0 };
    for pass in 0..passes.max(1) * 2 {
        let t0 = std::time::Instant::now();
        let (mut n, mut checksum) = (0u64, 0u64);
        let mut count = |msg: &dbn::MboMsg| {
            checksum = checksum.wrapping_add(msg.order_id);
            n += 1;
        };
        let zstd = pass % 2 == 0;
        if zstd {
            let mut decoder = dbn::decode::DbnDecoder::with_zstd(&compressed[..]).map_err(|e| err(&e))?;
            while let Some(msg) = decoder.decode_record::<dbn::MboMsg>().map_err(|e| err(&e))? {
                count(msg);
            }
        } else {
            let mut decoder = dbn::decode::DbnDecoder::with_upgrade_policy(&raw[..], dbn::VersionUpgradePolicy::AsIs)
                .map_err(|e| err(&e))?;
            while let Some(msg) = decoder.decode_record::<dbn::MboMsg>().map_err(|e| err(&e))? {
                count(msg);
            }
        }
        let rate = n as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        std::hint::black_box(checksum);
        rates.records = n;
        if zstd {
            rates.file_per_s = rates.file_per_s.max(rate);
        } else {
            rates.mem_per_s = rates.mem_per_s.max(rate);
        }
    }
    Ok(rates)
}
