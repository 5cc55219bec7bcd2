//! Fan-out scaling: what one more subscriber costs the hot loop, against what the memory system asks for it.
//!
//! `mdfan.fanout.subs<N>`: the real publisher replays the bundled capture at pace `max` to N subscribers of the
//! real subscriber library, in two phases so that each side is timed alone:
//!
//! 1. The feed thread reads the whole capture into the journal (131,072 records hold it) before any subscriber
//!    attaches, so the replay reads only the journal.
//! 2. N subscribers attach with rings that hold the whole replay (131,072 slots), and poll nothing while the hot
//!    loop (pinned to core A, busy-spinning) fans every record out: its time per record is the publisher's own
//!    `replay_ns / records`, with no feed thread, subscriber or ring-full wait on either core.
//! 3. Then one thread pinned to core B drains each ring through the subscriber library (`poll`, book upkeep and
//!    gap checks, latency histogram off): the subscriber side's time per record.
//!
//! Rings, not processes: the subscribers are in this process, as a strategy reading several feeds would have
//! them, so 16 subscribers need no 16 cores.
//!
//! `baseline.store64.subs<N>`: the limit, measured on core A in the same round: every record of the capture
//! copied (64 bytes, a record's worth of plain stores) into N buffers laid out like N rings (slot `i` of
//! buffer `k` for record `i`), first touched on core B as the subscribers' rings are. Nothing else: no journal
//! read, no seq, no CQ entry, no credit.
//!
//! The figures per record per subscriber, and the **cost of one more subscriber**: the slope of a least-squares
//! line through (N, ns per record) over the subscriber counts measured, for the hot loop
//! (`mdfan.fanout.extra_sub_ns`) and for the stores (`baseline.store64.extra_sub_ns`); their quotient is the
//! target's ratio (`ratio.mdfan.fanout.extra_sub_vs_baseline.store64`, at most 1.5x).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Subscriber, SubscriberConfig};
use mdfan_wire::control::SlowConsumerPolicy;
use mdfan_wire::BookUpdate;

/// Slots per subscriber ring and journal records: a power of two that holds the bundled capture whole.
pub const RING_SLOTS: u32 = 131_072;

/// What one fan-out replay measured.
pub struct Fanout {
    /// Records fanned out (per subscriber).
    pub records: u64,
    /// The hot loop's time per record (to all N subscribers), ns.
    pub hot_ns_per_record: f64,
    /// The subscriber side's time per record per subscriber, ns (draining the rings after the replay).
    pub sub_ns_per_record: f64,
}

/// Replays `capture` to `subscribers` subscribers in the two phases of the module docs: hot loop on `hot_core`,
/// the draining thread on `sub_core`.
pub fn run(
    capture: &Path,
    shm_dir: &Path,
    subscribers: usize,
    hot_core: Option<usize>,
    sub_core: Option<usize>,
) -> anyhow::Result<Fanout> {
    let cfg = crate::replay::publisher_config(
        capture,
        shm_dir,
        subscribers,
        hot_core,
        &format!("max_subscribers = {subscribers}\n"),
        &format!("[journal]\nrecords = {RING_SLOTS}\n"),
        "fanout",
    )?;
    let publisher = Publisher::bind(cfg)?;
    let endpoint = publisher.local_addr().to_string();
    let progress = publisher.progress();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&shutdown);
    let handle = std::thread::spawn(move || publisher.run(flag));
    let drained = std::thread::scope(|sc| {
        sc.spawn(|| -> anyhow::Result<(u64, Duration)> {
            crate::pin(sub_core);
            let deadline = Instant::now() + Duration::from_secs(60);
            let wait = |what: &str, done: &dyn Fn() -> bool| -> anyhow::Result<()> {
                while !done() {
                    anyhow::ensure!(Instant::now() < deadline, "fanout: timed out waiting for {what}");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            };
            wait("the feed to fill the journal", &|| progress.feed_done())?;
            let total = progress.read();
            anyhow::ensure!(
                total < u64::from(RING_SLOTS),
                "fanout: the capture has {total} records, more than a {RING_SLOTS}-slot ring holds"
            );
            let mut subs = Vec::with_capacity(subscribers);
            for k in 0..subscribers {
                let mut cfg = SubscriberConfig::new(&endpoint, &format!("fanout-{k}"));
                cfg.ring_slots = RING_SLOTS;
                cfg.policy = SlowConsumerPolicy::Block;
                cfg.fabric = mdfan_fabric::FabricConfig::Shm { dir: shm_dir.to_owned() };
                subs.push(Subscriber::connect(&cfg)?);
            }
            wait("the hot loop to fan out every record", &|| progress.records() >= total)?;
            let t0 = Instant::now();
            let mut records = 0u64;
            for s in &mut subs {
                let mut ended = false;
                while !ended {
                    anyhow::ensure!(Instant::now() < deadline, "fanout: timed out draining a ring");
                    s.poll(256, |ev| match ev {
                        Event::Record(_) => records += 1,
                        Event::Closed(_) => ended = true,
                        _ => {}
                    });
                }
            }
            Ok((records, t0.elapsed()))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("fanout: subscriber thread panicked"))?
    });
    if drained.is_err() {
        shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let report = handle.join().map_err(|_| anyhow::anyhow!("fanout: publisher thread panicked"))??;
    let (received, drain) = drained?;
    let expected = report.records * subscribers as u64;
    anyhow::ensure!(
        received >= expected,
        "fanout: subscribers received {received} records, expected at least {expected} ({} each)",
        report.records
    );
    Ok(Fanout {
        records: report.records,
        hot_ns_per_record: report.replay_ns as f64 / report.records.max(1) as f64,
        sub_ns_per_record: drain.as_nanos() as f64 / received.max(1) as f64,
    })
}

/// `baseline.store64.subs<N>`: ns per record to copy each of `records` into `subscribers` ring-like buffers (see
/// the module docs), on `core`. The buffers are memory of the kind the rings are: files under `shm_dir`
/// (tmpfs), mapped shared and populated, first touched on `touch_core`. (A heap buffer would get transparent
/// huge pages where the rings get 4 KiB pages, and a lower limit than the rings' memory allows.)
pub fn store_limit(
    records: &[BookUpdate],
    subscribers: usize,
    shm_dir: &Path,
    core: Option<usize>,
    touch_core: Option<usize>,
) -> anyhow::Result<f64> {
    let n = records.len();
    anyhow::ensure!(n > 0, "store64: no records");
    let len_bytes = std::mem::size_of_val(records);
    let mut maps = std::thread::scope(|sc| {
        sc.spawn(|| -> anyhow::Result<Vec<memmap2::MmapMut>> {
            crate::pin(touch_core);
            (0..subscribers)
                .map(|k| {
                    let path = shm_dir.join(format!("mdfan-bench-store64-{}-{k}", std::process::id()));
                    let err = |e: std::io::Error| anyhow::anyhow!("store64: {}: {e}", path.display());
                    let file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&path)
                        .map_err(err)?;
                    let _ = std::fs::remove_file(&path); // the mapping keeps the memory
                    file.set_len(len_bytes as u64).map_err(err)?;
                    // SAFETY: a file this thread just made and unlinked, mapped once: nothing else maps or
                    // changes it while the map lives.
                    #[allow(unsafe_code)]
                    let mut map =
                        unsafe { memmap2::MmapOptions::new().len(len_bytes).populate().map_mut(&file) }.map_err(err)?;
                    map.fill(0xa5);
                    Ok(map)
                })
                .collect()
        })
        .join()
    })
    .map_err(|_| anyhow::anyhow!("store64: allocating thread panicked"))??;
    let ns = std::thread::scope(|sc| {
        sc.spawn(|| {
            crate::pin(core);
            let t0 = Instant::now();
            for (i, record) in records.iter().enumerate() {
                let bytes = record.as_bytes();
                for m in maps.iter_mut() {
                    m[i * 64..i * 64 + 64].copy_from_slice(bytes);
                }
            }
            std::hint::black_box(&mut maps);
            t0.elapsed().as_nanos() as f64
        })
        .join()
    })
    .map_err(|_| anyhow::anyhow!("store64: storing thread panicked"))?;
    Ok(ns / n as f64)
}

/// The slope of the least-squares line through `points` (x, y): y's growth per unit of x. `None` for fewer
/// than two distinct x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The subscriber counts this run measured the fan-out at (`mdfan.fanout.subs<N>.hot_ns_per_record`), fewest
/// first.
pub fn counts(figures: &BTreeMap<String, f64>) -> Vec<usize> {
    let mut n: Vec<usize> = figures
        .keys()
        .filter_map(|k| k.strip_prefix("mdfan.fanout.subs")?.strip_suffix(".hot_ns_per_record")?.parse().ok())
        .collect();
    n.sort_unstable();
    n
}

/// `(N, figure)` for every subscriber count measured, of the figure `<stem>.subs<N>.<what>`.
pub fn curve(figures: &BTreeMap<String, f64>, stem: &str, what: &str) -> Vec<(usize, f64)> {
    counts(figures)
        .into_iter()
        .filter_map(|n| figures.get(&format!("{stem}.subs{n}.{what}")).map(|&v| (n, v)))
        .collect()
}

/// The cost of one more subscriber (the slopes of the module docs) and their quotient, from the per-count
/// medians: `mdfan.fanout.extra_sub.ns_per_record`, `baseline.store64.extra_sub.ns_per_record`,
/// `ratio.mdfan.fanout.extra_sub_vs_baseline.store64`.
pub fn add_figures(figures: &mut BTreeMap<String, f64>) {
    let line = |stem: &str, what: &str| {
        let pts: Vec<(f64, f64)> = curve(figures, stem, what).into_iter().map(|(n, v)| (n as f64, v)).collect();
        slope(&pts)
    };
    let hot = line("mdfan.fanout", "hot_ns_per_record");
    let store = line("baseline.store64", "ns_per_record");
    if let Some(h) = hot {
        figures.insert("mdfan.fanout.extra_sub.ns_per_record".into(), h);
    }
    if let Some(s) = store {
        figures.insert("baseline.store64.extra_sub.ns_per_record".into(), s);
    }
    // A slope at or below zero is noise (a host stall in one count's replay), not a cost: no ratio, so the
    // target reads "not measured" rather than met.
    if let (Some(h), Some(s)) = (hot, store) {
        if s > 0.0 && h > 0.0 {
            figures.insert("ratio.mdfan.fanout.extra_sub_vs_baseline.store64".into(), h / s);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{add_figures, counts, slope};

    #[test]
    fn the_extra_subscriber_cost_is_the_slope_of_each_curve_and_their_quotient() {
        let mut f = BTreeMap::new();
        for (n, hot, store) in [(1, 40.0, 6.0), (2, 52.0, 12.0), (4, 76.0, 24.0), (16, 220.0, 96.0)] {
            f.insert(format!("mdfan.fanout.subs{n}.hot_ns_per_record"), hot);
            f.insert(format!("baseline.store64.subs{n}.ns_per_record"), store);
        }
        f.insert("mdfan.fanout.subs4.sub_ns_per_record".into(), 3.0); // not a count of its own
        assert_eq!(counts(&f), vec![1, 2, 4, 16]);
        add_figures(&mut f);
        assert_eq!(f["mdfan.fanout.extra_sub.ns_per_record"], 12.0);
        assert_eq!(f["baseline.store64.extra_sub.ns_per_record"], 6.0);
        assert_eq!(f["ratio.mdfan.fanout.extra_sub_vs_baseline.store64"], 2.0);
    }

    #[test]
    fn a_hot_loop_that_got_cheaper_with_more_subscribers_is_noise_not_a_met_target() {
        let mut f = BTreeMap::new();
        for (n, hot, store) in [(1, 90.0, 4.0), (2, 50.0, 8.0), (4, 40.0, 16.0)] {
            f.insert(format!("mdfan.fanout.subs{n}.hot_ns_per_record"), hot);
            f.insert(format!("baseline.store64.subs{n}.ns_per_record"), store);
        }
        add_figures(&mut f);
        assert!(f["mdfan.fanout.extra_sub.ns_per_record"] < 0.0);
        assert_eq!(f["baseline.store64.extra_sub.ns_per_record"], 4.0);
        assert!(!f.contains_key("ratio.mdfan.fanout.extra_sub_vs_baseline.store64"), "{f:?}");
    }

    #[test]
    fn the_slope_of_a_line_is_its_growth_per_subscriber() {
        let s = slope(&[(1.0, 30.0), (2.0, 40.0), (4.0, 60.0), (8.0, 100.0), (16.0, 180.0)]).unwrap();
        assert!((s - 10.0).abs() < 1e-12, "{s}");
        assert_eq!(slope(&[(1.0, 30.0)]), None);
        assert_eq!(slope(&[(2.0, 30.0), (2.0, 50.0)]), None);
        // noise around y = 5x + 20: least squares, not the end points
        assert_eq!(slope(&[(1.0, 26.0), (2.0, 29.0), (4.0, 41.0), (8.0, 59.0)]), Some(138.75 / 28.75));
    }
}
