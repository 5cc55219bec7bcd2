//! The plant's consumers against the publisher that feeds them, in one run (`mdfan-bench consumers`): how fast
//! `mdfan-capture record` keeps a stream, `mdfan-capture export` writes Parquet and DBN, and `mdfan-bridge`
//! puts records into a local JetStream, each beside the publisher's own max replay rate of the same stream.
//!
//! The stream: the bundled ESH4 capture's records, `repeats` times over, each repetition as an instrument of
//! its own (instrument_id 17077 + r × 100,000, the same orders: every book stays valid), written once as an
//! mdfan capture; the publisher replays it (`format = "capture"`, pace max) in every measurement.
//!
//! - **replay** (the baseline): the publisher to one counting subscriber of the library (policy `block`, so
//!   the rate is what both sustain): records / s from the first record to the end.
//! - **capture**: the same replay to `mdfan-capture record` (the binary, policy `resync`, its default ring),
//!   records / s from its first record to its stop block (its `recording_ms`), and the gaps it had (0 means it
//!   kept up); and by CPU time, the rate its busier thread (session or writer) sustains on its own core, from
//!   the CPU clocks it reports (`session_cpu_ms`, `writer_cpu_ms`). Target: ≥ 1.0x replay with 0 gaps, read
//!   from records / s with a core per busy thread (4: the publisher's feed and hot loop, the capture's two),
//!   from CPU time on a host with fewer (the rule of the replay targets).
//! - **export**: `mdfan-capture export --parquet` and `--dbn` of the capture (binaries): rows / s. Target: Parquet
//!   ≥ 5 M rows / s.
//! - **bridge**: the same replay to `mdfan-bridge` and a `nats-server -js` on a loopback port (started here;
//!   skipped, and said so, without one on PATH): acknowledged records / s from its first record in to its last
//!   acknowledgement (its `publishing_ms`), and what it dropped. Target: ≥ 1 M records / s.
//!
//! Each figure is the median of `rounds`; the binaries are the ones beside this one (`cargo build --release -p
//! mdfan-capture -p mdfan-bridge`). Wall-clock rates on a shared 2-core host move with the noise; the ratios
//! to the replay of the same round move less.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use mdfan_feed::capture::{Fsync, SegmentMeta, Writer, WriterConfig, FORMAT_VERSION};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Health, Subscriber, SubscriberConfig};
use mdfan_wire::{BookUpdate, InstrumentDef};

/// One round's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    replay_per_s: f64,
    capture_per_s: f64,
    capture_gaps: u64,
    /// CPU ns per record of the capture's session thread and of its writing thread.
    capture_cpu_ns: (f64, f64),
    parquet_per_s: f64,
    dbn_per_s: f64,
    bridge_per_s: Option<f64>,
    bridge_dropped: u64,
}

/// Writes the bench stream (module docs) as capture `stream` in `dir`; returns its records.
pub(crate) fn write_stream(dir: &Path, repeats: u32) -> anyhow::Result<u64> {
    let file = mdfan_feed::dbn::load_mbo_file(&crate::repo_root().join(crate::replay::CAPTURE))?;
    let base: Vec<BookUpdate> = file
        .records
        .iter()
        .map(mdfan_feed::dbn::normalize_mbo)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{e}"))?;
    let ids: Vec<u32> = (0..repeats).map(|r| 17_077 + r * 100_000).collect();
    let cfg = WriterConfig {
        dir: dir.to_owned(),
        name: "stream".into(),
        rotate_bytes: 1 << 40,
        rotate_ns: 0,
        block_records: 4096,
        block_ms: 1000,
        fsync: Fsync::Rotation,
        compress: false,
    };
    let meta = SegmentMeta {
        format_version: FORMAT_VERSION,
        name: String::new(),
        segment: 0,
        created_ns: 0,
        source: "mdfan-bench".into(),
        session: "consumers".into(),
        book: "mbo".into(),
        feed: mdfan_wire::FeedIdentity::new("dbn", "GLBX.MDP3", "esh4-glbx-mdp3-20231225.mbo.dbn.zst"),
        symbology: ids.iter().enumerate().map(|(r, id)| InstrumentDef::new(*id, format!("ESH4R{r}"))).collect(),
        fsync: String::new(),
        first_record: 0,
        run_id: None,
        run_first_segment: None,
    };
    let (mut w, _) = Writer::open(cfg, meta, 0)?;
    let mut seq = 0;
    for id in &ids {
        for r in &base {
            seq += 1;
            w.record(&BookUpdate { seq, instrument_id: *id, ..*r }, 0)?;
        }
    }
    w.stop(mdfan_feed::capture::StopReason::EndOfStream, 0)?;
    Ok(seq)
}

/// A publisher replaying capture `dir` at pace max, waiting for one subscriber; its endpoint and thread.
fn publisher(dir: &Path) -> anyhow::Result<(String, std::thread::JoinHandle<anyhow::Result<()>>)> {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 1\ncounters_dir = \"\"\npolicies = [\"block\", \"resync\"]\n\n[feed]\nformat = \"capture\"\npath = {dir:?}\npace = \"max\"\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("mdfan-bench consumers"))?)?;
    let endpoint = p.local_addr().to_string();
    let run =
        std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).map(|_| ()).map_err(|e| anyhow!("{e}")));
    Ok((endpoint, run))
}

/// The baseline: records / s to a counting subscriber (policy block).
fn replay(dir: &Path, records: u64) -> anyhow::Result<f64> {
    let (endpoint, run) = publisher(dir)?;
    let mut cfg = SubscriberConfig::new(&endpoint, "bench-count");
    cfg.policy = mdfan_subscriber::SlowConsumerPolicy::Block;
    let mut sub = Subscriber::connect(&cfg)?;
    let (mut n, mut first) = (0u64, None);
    loop {
        sub.poll(4096, |e| {
            if let Event::Record(_) = e {
                first.get_or_insert_with(Instant::now);
                n += 1;
            }
        });
        if let Some(Health::Ended(_)) = sub.maintain_if_due() {
            break;
        }
    }
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    run.join().map_err(|_| anyhow!("the publisher panicked"))??;
    if n < records {
        bail!("the counting subscriber got {n} of {records} records");
    }
    Ok(records as f64 / secs.max(1e-9))
}

/// The release binary `name` beside this one (`cargo build --release -p mdfan-capture -p mdfan-bridge -p
/// mdfan-publisher`).
pub(crate) fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let here = std::env::current_exe()?;
    let p = here.parent().map(|d| d.join(name)).ok_or_else(|| anyhow!("no folder of {}", here.display()))?;
    if !p.exists() {
        bail!("{} not found: cargo build --release -p mdfan-capture -p mdfan-bridge -p mdfan-publisher", p.display());
    }
    Ok(p)
}

/// Runs `cmd` to its end; its wall time and stdout.
fn timed(mut cmd: Command, what: &str) -> anyhow::Result<(f64, String)> {
    let t = Instant::now();
    let out = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output().with_context(|| what.to_owned())?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{what}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn field(text: &str, name: &str) -> u64 {
    text.split(&format!(" {name}="))
        .last()
        .and_then(|t| t.split(' ').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// ` NAME=V` in `text` as a number with a fraction, when present.
fn field_f64(text: &str, name: &str) -> Option<f64> {
    let (_, rest) = text.rsplit_once(&format!(" {name}="))?;
    rest.split_whitespace().next()?.parse().ok()
}

fn round(work: &Path, stream: &Path, records: u64, nats: Option<&str>) -> anyhow::Result<Round> {
    let mut r = Round { replay_per_s: replay(stream, records)?, ..Round::default() };

    let cap = work.join("cap");
    let _ = std::fs::remove_dir_all(&cap);
    std::fs::create_dir_all(&cap)?;
    let (endpoint, run) = publisher(stream)?;
    let mut cmd = Command::new(binary("mdfan-capture")?);
    cmd.args(["record", "--connect", &endpoint, "--dir", cap.to_str().unwrap(), "--name", "c", "--rotate-mb", "4096"]);
    let (secs, out) = timed(cmd, "mdfan-capture record")?;
    run.join().map_err(|_| anyhow!("the publisher panicked"))??;
    // From its first record to its stop block (what it keeps up with), not its start-up nor the compression of
    // the last segment at exit; the process's life when an older binary does not say.
    let recording_s = field_f64(&out, "recording_ms").map_or(secs, |ms| ms / 1e3);
    (r.capture_per_s, r.capture_gaps) = (records as f64 / recording_s.max(1e-9), field(&out, "stream_gaps"));
    let per_record = |name| field_f64(&out, name).unwrap_or(0.0) * 1e6 / records as f64;
    r.capture_cpu_ns = (per_record("session_cpu_ms"), per_record("writer_cpu_ms"));

    for (flag, file) in [("--parquet", "x.parquet"), ("--dbn", "x.dbn.zst")] {
        let path = work.join(file);
        let _ = std::fs::remove_file(&path);
        let mut cmd = Command::new(binary("mdfan-capture")?);
        cmd.args(["export", stream.to_str().unwrap(), flag, path.to_str().unwrap()]);
        if flag == "--dbn" {
            cmd.args(["--dataset", "GLBX.MDP3"]); // DBN metadata names the dataset, which a capture does not keep
        }
        let (secs, _) = timed(cmd, "mdfan-capture export")?;
        if flag == "--parquet" {
            r.parquet_per_s = records as f64 / secs;
        } else {
            r.dbn_per_s = records as f64 / secs;
        }
    }

    if let Some(url) = nats {
        let (endpoint, run) = publisher(stream)?;
        let stream_name = format!("BENCH{}", std::process::id());
        let mut cmd = Command::new(binary("mdfan-bridge")?);
        cmd.args([
            "--connect",
            &endpoint,
            "--nats",
            url,
            "--stream",
            &stream_name,
            "--prefix",
            "bench",
            "--report-s",
            "0",
        ]);
        let (secs, out) = timed(cmd, "mdfan-bridge")?;
        run.join().map_err(|_| anyhow!("the publisher panicked"))??;
        // From its first record in to its last acknowledgement (its `publishing_ms`), not its start-up (the
        // session's snapshot, the stream's creation) nor its exit; the process's life when an older binary does
        // not say.
        let publishing_s = field_f64(&out, "publishing_ms").filter(|ms| *ms > 0.0).map_or(secs, |ms| ms / 1e3);
        r.bridge_per_s = Some(field(&out, "records_acked") as f64 / publishing_s);
        r.bridge_dropped = field(&out, "dropped");
    }
    Ok(r)
}

/// The median of `v` (the upper one of an even count; 0 for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// `mdfan-bench consumers`: writes `out/consumers.md` and prints it.
pub fn run(out: &Path, rounds: u32, repeats: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let work = out.join("consumers-work");
    let stream = work.join("stream");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&stream)?;
    let records = write_stream(&stream, repeats)?;
    let have_nats = Command::new("nats-server").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut server = None;
    let url = if have_nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd", work.join("js").to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        server = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("nats-server on 127.0.0.1:{port} did not start");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(format!("nats://127.0.0.1:{port}"))
    } else {
        None
    };
    let mut all = Vec::new();
    for i in 0..rounds {
        eprintln!("mdfan-bench consumers: round {} of {rounds}", i + 1);
        all.push(round(&work, &stream, records, url.as_deref()));
    }
    if let Some(mut s) = server {
        let _ = s.kill();
        let _ = s.wait();
    }
    let all: Vec<Round> = all.into_iter().collect::<anyhow::Result<_>>()?;
    let pick = |f: fn(&Round) -> f64| median(all.iter().map(f).collect());
    let replay = pick(|r| r.replay_per_s);
    let ratio = |f: fn(&Round) -> f64| median(all.iter().map(|r| f(r) / r.replay_per_s).collect());
    let mut md = format!(
        "# Consumers of the stream\n\n{records} records (ESH4 x {repeats}, an instrument per repetition), median of {rounds} rounds; \
         rates in records (rows) per second, ratios to the same round's replay.\n\n\
         | what | rate | ratio to replay | target | met |\n|---|---|---|---|---|\n"
    );
    let yes = |b: bool| if b { "yes" } else { "no" };
    let m = |x: f64| format!("{:.2} M/s", x / 1e6);
    md += &format!("| publisher replay to a counting subscriber (baseline) | {} | 1.00 | | |\n", m(replay));
    let (cap, cap_ratio) = (pick(|r| r.capture_per_s), ratio(|r| r.capture_per_s));
    let gaps: u64 = all.iter().map(|r| r.capture_gaps).sum();
    // The capture's run has four busy threads (the publisher's feed and hot loop, the capture's session and
    // writer): with fewer cores its records/s measures the scheduler, and the target reads CPU time instead
    // (as the replay targets do): what the busier of its threads could sustain on a core of its own.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // A run whose capture gave no CPU times (an older binary, no /proc/thread-self/schedstat) is not judged by
    // them: 0 ns would read as an unbounded rate.
    let cpu_measured = all.iter().all(|r| r.capture_cpu_ns.0 > 0.0 && r.capture_cpu_ns.1 > 0.0);
    let by_cpu = cores < 4;
    let (session_ns, writer_ns) = (pick(|r| r.capture_cpu_ns.0), pick(|r| r.capture_cpu_ns.1));
    let capacity = |r: &Round| 1e9 / r.capture_cpu_ns.0.max(r.capture_cpu_ns.1).max(1e-9);
    let (cap_cpu, cap_cpu_ratio) = (
        median(all.iter().map(capacity).collect()),
        median(all.iter().map(|r| capacity(r) / r.replay_per_s).collect()),
    );
    let judged = |this: bool, ok: bool| if this { yes(ok) } else { "not judged here" };
    md += &format!(
        "| mdfan-capture record (gaps in all rounds: {gaps}) | {} | {cap_ratio:.2} | >= 1.0x replay, 0 gaps (with a core per busy thread: 4) | {} |\n",
        m(cap),
        judged(!by_cpu, cap_ratio >= 1.0 && gaps == 0)
    );
    md += &format!(
        "| mdfan-capture record, by CPU time: records / s its busier thread sustains (session {session_ns:.0} ns, writer {writer_ns:.0} ns per record) | {} | {cap_cpu_ratio:.2} | >= 1.0x replay, 0 gaps (fewer than 4 cores) | {} |\n",
        m(cap_cpu),
        if cpu_measured { judged(by_cpu, cap_cpu_ratio >= 1.0 && gaps == 0) } else { "not measured" }
    );
    let pq = pick(|r| r.parquet_per_s);
    md += &format!(
        "| mdfan-capture export --parquet | {} | {:.2} | >= 5 M rows/s | {} |\n",
        m(pq),
        ratio(|r| r.parquet_per_s),
        yes(pq >= 5e6)
    );
    md +=
        &format!("| mdfan-capture export --dbn | {} | {:.2} | | |\n", m(pick(|r| r.dbn_per_s)), ratio(|r| r.dbn_per_s));
    if url.is_some() {
        let br = median(all.iter().filter_map(|r| r.bridge_per_s).collect());
        let dropped: u64 = all.iter().map(|r| r.bridge_dropped).sum();
        md += &format!(
            "| mdfan-bridge to a local JetStream, acknowledged (dropped in all rounds: {dropped}) | {} | {:.2} | >= 1 M records/s | {} |\n",
            m(br),
            median(all.iter().filter_map(|r| r.bridge_per_s.map(|b| b / r.replay_per_s)).collect()),
            yes(br >= 1e6)
        );
    } else {
        md += "| mdfan-bridge | not measured: no nats-server on PATH | | | |\n";
    }
    md += &format!(
        "\nHost: {} ({cores} cores). The capture's rate is judged where there is a core for each of the run's 4 busy \
         threads; with fewer, by CPU time: each capture thread's CPU clock (the kernel's per-thread clock, from its \
         first record to the end of the stream) per record, and the rate its busier thread would sustain alone.\n",
        crate::cpu_model(),
    );
    std::fs::write(out.join("consumers.md"), &md)?;
    print!("{md}");
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
