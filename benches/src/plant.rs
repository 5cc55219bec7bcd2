//! The plant of issue 28 in one run (`mdfan-bench plant`): a hot-hot pair's merged stream beside its two legs,
//! the merge's cost per record, the relay's hop, and the upstream publisher's fan-out cost with strategies served
//! directly and through one relay. Everything over shm on this host; the publishers are the library's (in this
//! process), the relay and the exchange are the `mdfan-relay` and `mdfan-feedsim` binaries beside this one
//! (`cargo build --release -p mdfan-publisher -p mdfan-feedsim`).
//!
//! - **pair**: two publishers join the same CME MDP 3.0 lines A and B (loopback multicast, the bench's own
//!   ports), as the two hosts of a pair do, and `mdfan-feedsim` plays the bundled capture onto them at 400x
//!   without loss. (Two file replays would not do: each
//!   starts its pace clock when its own subscriber comes, so one leg trails the other by the connect time, and
//!   the trailing leg's post-to-poll says nothing of when the merged stream could have had the record.)
//!   The legs are merged as [`mdfan_subscriber::PairSubscriber::poll`] merges them ([`Merge`] over two [`Subscriber`]s), with a
//!   TSC read at each copy a leg polls and at each record handed out. Every latency runs from the venue record's
//!   *first post* (the earlier of the two publishers' `ts_send_ticks` for its venue position): to leg A's poll
//!   of its copy, to leg B's, and to the merged handout. (Each leg's own post-to-poll would not do: the leg that
//!   posts later can show less of it while giving the record later.) Records with a copy on one leg only are
//!   counted and left out (at most 1%). Checked each round: 0 merged gaps, 0 divergences, both publishers
//!   published as many records. Target: at
//!   p50, p99 and p99.9 the merged figure is at most 1.1x the better leg's, each round's ratio to
//!   `min(leg A, leg B)`, the median over rounds. The ratio is of two distributions of the same records in the
//!   same run, so it is judged on any host; the absolute figures are the scheduler's where cores are short.
//! - **merge cost**: ESH4's records after its opening venue snapshot, on two legs (leg A's copy, then leg B's,
//!   compared and dropped) through [`Merge`], against the same records handed straight to the strategy's
//!   callback (what a single leg's poll does past the ring); ns per record from the TSC around each batch of
//!   [`BATCH`] records, p50 over the batches. Target: merged minus one leg at most 10 ns (CPU work on one
//!   thread: judged on any host; the `pair_merge` micro bench times the same). Beside it, where valgrind is
//!   installed, the instructions per record of both (`mdfan-bench decode --case merge-one-leg` and
//!   `merge-two-legs` under callgrind, as the decoders'), which the host's noise does not move.
//! - **relay hop**: one publisher replays ESH4 at the speed-up to a direct strategy and to `mdfan-relay`, which
//!   serves a second strategy (both polled by one thread). Direct: the direct strategy's post-to-poll. Through
//!   the relay: the relayed strategy's poll of the n-th venue record minus the publisher's post of the same
//!   record to the direct strategy (its `ts_send_ticks`; the relay stamps its own), the two streams checked
//!   equal record by record (venue position, order id). Target: p50 through minus p50 direct at most 1.5x the
//!   p50 of a cache-line transfer (ping-pong one-way, same round), judged on a host with a core per busy thread
//!   (5: the publisher's hot loop and feed, the relay's feed and hot loop, the strategies' thread); with fewer,
//!   every thread yields when idle and the figures measure the scheduler: printed, not judged.
//! - **fan-out**: one publisher replays ESH4 `--repeats` times over (a capture, an instrument per repetition)
//!   at pace max, its feed decoded on its hot loop's thread (one busy thread whose CPU clock is the publisher's
//!   whole cost), to 1, 4 and 8 direct strategies, and to one relay serving 1, 4 and 8. Rings hold the whole
//!   stream, so nobody blocks or resyncs (checked: 0 gaps everywhere), and the downstream is held while the
//!   publisher runs (the strategies poll after its end; the relay is stopped with SIGSTOP until then): the hot
//!   thread runs alone. The figure: its CPU time per record (its kernel CPU clock). Target: through the relay, at every count, within 10% of one direct
//!   strategy (ratio at most 1.10, the median over rounds; CPU time: judged on any host).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use hdrhistogram::Histogram;
use mdfan_publisher::config::{Config, HotIdle};
use mdfan_publisher::{Publisher, RunReport};
use mdfan_subscriber::pair::Merge;
use mdfan_subscriber::{Event, Idler, Kind, Latency, SlowConsumerPolicy, Subscriber, SubscriberConfig};
use mdfan_wire::{flags, BookUpdate};

use crate::consumers::median;
use crate::replay::{ThreadCpu, CAPTURE, HOT_THREAD};

/// Records per timed batch of the merge cost (16 KiB of records: the TSC reads are 2 per batch).
pub const BATCH: usize = 256;
/// Strategy counts of the fan-out curve.
const FANOUT: [usize; 3] = [1, 4, 8];
/// Percentiles of the pair target (and their names).
const PAIR_PERCENTILES: [(f64, &str); 3] = [(50.0, "p50"), (99.0, "p99"), (99.9, "p999")];

/// `mdfan-bench plant` options.
pub struct Options {
    pub rounds: u32,
    /// ESH4 this many times over in the fan-out's stream.
    pub repeats: u32,
    /// The relay hop's replay speed-up over ESH4's own timestamps.
    pub speedup: f64,
    /// The parts to run: `pair`, `merge`, `relay`, `fanout` (all when empty).
    pub parts: Vec<String>,
}

impl Options {
    fn runs(&self, part: &str) -> bool {
        self.parts.is_empty() || self.parts.iter().any(|p| p == part)
    }
}

/// One round's figures.
#[derive(Default)]
struct Round {
    leg_a: Option<Histogram<u64>>,
    leg_b: Option<Histogram<u64>>,
    merged: Option<Histogram<u64>>,
    /// Venue records the merged stream handed out.
    pair_records: u64,
    /// (one leg, merged) ns per record at p50 over batches.
    merge_ns: (f64, f64),
    direct: Option<Histogram<u64>>,
    relayed: Option<Histogram<u64>>,
    cacheline: Option<Histogram<u64>>,
    /// (strategies, hot-thread CPU ns per record) served directly, and through one relay.
    fanout_direct: Vec<(usize, f64)>,
    fanout_relay: Vec<(usize, f64)>,
}

fn shm_dir() -> PathBuf {
    std::env::var_os("MDFAN_BENCH_SHM_DIR").map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// A publisher of the library replaying `feed` (the `[feed]` table's lines) over shm; `keys` are more
/// `[publisher]` lines. Returns its endpoint and its running thread.
fn publisher(
    feed: &str,
    keys: &str,
    wait_for: usize,
    what: &str,
) -> anyhow::Result<(String, std::thread::JoinHandle<anyhow::Result<RunReport>>)> {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = {wait_for}\ncounters_dir = \"\"\n{keys}\
         \n[feed]\n{feed}\n[fabric]\nprovider = \"shm\"\nshm_dir = {:?}\n",
        shm_dir()
    );
    let p = Publisher::bind(Config::parse(&text, Path::new(&format!("mdfan-bench plant {what}")))?)?;
    let endpoint = p.local_addr().to_string();
    let run = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).map_err(|e| anyhow!("{e}")));
    Ok((endpoint, run))
}

fn esh4_feed(speedup: f64) -> String {
    format!("format = \"dbn\"\npath = {:?}\npace = {speedup:?}\n", crate::repo_root().join(CAPTURE))
}

fn sub_config(endpoint: &str, name: &str, ring_slots: u32) -> SubscriberConfig {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.ring_slots = ring_slots;
    cfg.fabric = mdfan_fabric::FabricConfig::Shm { dir: shm_dir() };
    cfg.silence_timeout = Duration::from_secs(5);
    cfg
}

fn joined(h: std::thread::JoinHandle<anyhow::Result<RunReport>>, what: &str) -> anyhow::Result<RunReport> {
    h.join().map_err(|_| anyhow!("{what}: the publisher panicked"))?
}

/// Whether `r` is a venue record (not one session's heartbeat, snapshot marker or end, nor a status the relay
/// adds of its own).
fn venue_record(r: &BookUpdate) -> bool {
    !mdfan_feed::capture::is_session_record(r) && !matches!(r.kind(), Some(Kind::FeedStatus | Kind::InstrumentStale))
}

/// The capture the pair's publishers get from `mdfan-feedsim` (relative to the repository root).
const MDP3_PCAP: &str = "data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap";
/// Its speed-up over the capture's own pace (14 minutes of it: about 2 s).
const FEEDSIM_SPEED: &str = "400";

/// A free UDP port on 127.0.0.1 (for a line's group: the bench's own, so no other run's traffic joins it).
fn free_udp_port() -> anyhow::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn pair_round(r: &mut Round) -> anyhow::Result<()> {
    let (pa, pb, ps) = (free_udp_port()?, free_udp_port()?, free_udp_port()?);
    let feed = format!(
        "format = \"mdp3\"\n\n[lines]\na = \"224.0.31.11:{pa}\"\nb = \"224.0.32.11:{pb}\"\n\
         snapshot = \"224.0.31.43:{ps}\"\ninterface = \"127.0.0.1\"\nrcvbuf_bytes = 33554432\n\
         gap_timeout_ms = 1000\nend_after_idle_ms = 500\n"
    );
    let (a, run_a) = publisher(&feed, "hot_idle = \"yield\"\n", 1, "pair A")?;
    let (b, run_b) = publisher(&feed, "hot_idle = \"yield\"\n", 1, "pair B")?;
    // both legs from their first record, merged as `PairSubscriber::poll` merges them, with each copy's and each
    // handout's TSC read kept for the figures after the run
    let mut legs = [
        Subscriber::connect(&sub_config(&a, "bench-pair", 1 << 17))?,
        Subscriber::connect(&sub_config(&b, "bench-pair-b", 1 << 17))?,
    ];
    let mut sim = Command::new(crate::consumers::binary("mdfan-feedsim")?)
        .current_dir(crate::repo_root())
        .args(["--pcap", MDP3_PCAP, "--speed", FEEDSIM_SPEED])
        .args(["--send-a", &format!("224.0.31.11:{pa}"), "--send-b", &format!("224.0.32.11:{pb}")])
        .args(["--snapshot", &format!("224.0.31.43:{ps}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("mdfan-feedsim")?;
    let clock = quanta::Clock::new();
    let mut merge = Merge::new();
    // per leg, each venue copy polled: (venue position, its post in TSC ticks (low 32 bits), the poll);
    // merged, each venue record handed out: (venue position, the handout)
    let mut copies = [Vec::<(u64, u32, u64)>::new(), Vec::new()];
    let mut handed = Vec::<(u64, u64)>::new();
    let (done, closed) = (std::cell::Cell::new(false), std::cell::Cell::new(None));
    let mut out = |e: Event<'_>| match e {
        Event::Record(x) if x.kind() == Some(Kind::EndOfStream) => done.set(true),
        Event::Record(x) if venue_record(x) => handed.push((x.venue_pos, clock.raw())),
        Event::Closed(why) => closed.set(Some(why)),
        _ => {}
    };
    let mut idler = Idler::new(HotIdle::Yield.strategy());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut n = 0;
        for (i, (sub, kept)) in legs.iter_mut().zip(copies.iter_mut()).enumerate() {
            n += sub.poll(256, |ev| {
                if let Event::Record(x) = &ev {
                    if venue_record(x) && x.flags & flags::SNAPSHOT == 0 {
                        kept.push((x.venue_pos, x.ts_send_ticks, clock.raw()));
                    }
                }
                merge.on_event(i, ev, &mut out);
            });
        }
        merge.flush(&mut out);
        for sub in &mut legs {
            sub.maintain_if_due();
        }
        idler.idle(n);
        if Instant::now() > deadline {
            let _ = sim.kill();
            bail!("pair: no end of stream in 120 s");
        }
        if done.get() {
            break;
        }
        if closed.get().is_some() || merge.ended() {
            bail!("pair: the merged stream closed before its end of stream ({:?})", closed.get());
        }
    }
    let sim = sim.wait_with_output()?;
    ensure!(sim.status.success(), "mdfan-feedsim: {}", String::from_utf8_lossy(&sim.stderr));
    let (ra, rb) = (joined(run_a, "pair A")?, joined(run_b, "pair B")?);
    let s = merge.stats();
    let (la, lb) = (merge.leg_stats(0), merge.leg_stats(1));
    ensure!(
        s.gaps == 0 && s.divergences == 0 && la.divergences == 0 && lb.divergences == 0,
        "pair: the merged stream had {} gaps and {} divergences (legs {} and {})",
        s.gaps,
        s.divergences,
        la.divergences,
        lb.divergences
    );
    ensure!(ra.records == rb.records, "pair: the publishers published {} and {} records", ra.records, rb.records);
    // every latency from the venue record's first post on either leg (module docs)
    let mut posts: std::collections::HashMap<u64, [Option<(u32, u64)>; 2]> = std::collections::HashMap::new();
    for (leg, kept) in copies.iter().enumerate() {
        for &(pos, post, poll) in kept {
            posts.entry(pos).or_default()[leg].get_or_insert((post, poll));
        }
    }
    // ticks from each post to `at`, signed (the other leg may post after this leg's poll); the earlier post is
    // the larger interval
    let since_first = |at: u64, a: u32, b: u32| {
        let (da, db) = ((at as u32).wrapping_sub(a) as i32, (at as u32).wrapping_sub(b) as i32);
        clock.delta_as_nanos(0, da.max(db).max(0) as u64).clamp(1, 10_000_000_000)
    };
    let (mut ha, mut hb, mut hm) = (crate::new_histogram(), crate::new_histogram(), crate::new_histogram());
    let mut one_copy = 0u64;
    for &(pos, at) in &handed {
        let Some([Some((pa, poll_a)), Some((pb, poll_b))]) = posts.get(&pos).copied() else {
            one_copy += 1;
            continue;
        };
        ha.saturating_record(since_first(poll_a, pa, pb));
        hb.saturating_record(since_first(poll_b, pa, pb));
        hm.saturating_record(since_first(at, pa, pb));
    }
    let venue = handed.len() as u64;
    ensure!(
        venue > 0 && one_copy * 100 <= venue,
        "pair: {one_copy} of the {venue} venue records handed out came from one leg only"
    );
    (r.leg_a, r.leg_b, r.merged) = (Some(ha), Some(hb), Some(hm));
    r.pair_records = venue;
    Ok(())
}

/// The merge cost's input (module docs): ESH4's records after its opening venue snapshot, each with its venue
/// sequence (DBN `sequence`), and the span of those sequences.
pub struct MergeInput {
    base: Vec<(u64, BookUpdate)>,
    span: u64,
}

impl MergeInput {
    /// ESH4 from the bundled capture.
    pub fn load() -> anyhow::Result<MergeInput> {
        let file = mdfan_feed::dbn::load_mbo_file(&crate::repo_root().join(CAPTURE))?;
        let span = file.records.iter().map(|m| u64::from(m.sequence)).max().unwrap_or(0) + 1;
        let mut base = Vec::with_capacity(file.records.len());
        for m in &file.records {
            let r = mdfan_feed::dbn::normalize_mbo(m).map_err(|e| anyhow!("{e}"))?;
            // the opening venue snapshot's positions repeat: it is placed by count, not by the fast path timed
            if r.flags & flags::SNAPSHOT == 0 {
                base.push((u64::from(m.sequence), r));
            }
        }
        Ok(MergeInput { base, span })
    }

    /// Pass `pass`'s records as a leg's subscriber gets them: seq on from `seq`, venue positions `pass` spans
    /// past the first pass's (each pass at venue seqs past the last, as a longer day would).
    pub fn pass(&self, pass: u64, seq: &mut u64) -> Vec<BookUpdate> {
        let mut run = mdfan_wire::VenueRun::default();
        self.base
            .iter()
            .map(|(venue_seq, r)| {
                *seq += 1;
                BookUpdate { seq: *seq, venue_pos: run.position(venue_seq + pass * self.span), ..*r }
            })
            .collect()
    }
}

/// One leg: `records` handed straight to the strategy's callback (what a single leg's poll does past the ring);
/// the sum of their sizes.
#[inline(never)]
pub fn one_leg(records: &[BookUpdate]) -> u64 {
    let mut size = 0u64;
    let mut f = |e: Event<'_>| {
        if let Event::Record(x) = e {
            size += u64::from(x.size);
        }
    };
    for r in records {
        f(Event::Record(std::hint::black_box(r)));
    }
    size
}

/// Two legs: each of `records` through `m` as leg A's copy, then leg B's (compared and dropped); the sum of the
/// sizes handed to the callback.
#[inline(never)]
pub fn two_legs(m: &mut Merge, records: &[BookUpdate]) -> u64 {
    let mut size = 0u64;
    for r in records {
        for leg in 0..2 {
            m.on_event(leg, Event::Record(std::hint::black_box(r)), &mut |e| {
                if let Event::Record(x) = e {
                    size += u64::from(x.size);
                }
            });
        }
    }
    size
}

/// The merge cost in instructions (callgrind, which the host's noise does not move): a sentence for the report,
/// empty without valgrind.
fn merge_instructions(out: &Path) -> String {
    if !crate::callgrind::available() {
        return String::new();
    }
    let count = |case| crate::callgrind::instructions_per_unit(case, crate::callgrind::PASSES, out);
    match (count("merge-one-leg"), count("merge-two-legs")) {
        (Ok(one), Ok(two)) => format!(
            " Instructions per record (valgrind --tool=callgrind, {} passes): one leg {one:.0}, two legs merged \
             {two:.0}, the merge {:.0}.",
            crate::callgrind::PASSES,
            two - one
        ),
        (Err(e), _) | (_, Err(e)) => format!(" Instructions per record: callgrind failed: {e:#}."),
    }
}

/// The merge cost (module docs): (one leg, merged) ns per record at p50 over batches of [`BATCH`]. One merge
/// takes the stream four times over, the first untimed: its table of delivered records (256 KiB) is faulted in
/// then, as after a session's first minutes.
fn merge_cost() -> anyhow::Result<(f64, f64)> {
    let input = MergeInput::load()?;
    let clock = quanta::Clock::new();
    let per_record = |t0: u64, t1: u64| clock.delta_as_nanos(t0, t1) as f64 / BATCH as f64;
    let (mut one, mut two) = (Vec::new(), Vec::new());
    let (mut m, mut seq) = (Merge::new(), 0u64);
    for pass in 0..4u64 {
        let src = input.pass(pass, &mut seq);
        let want: u64 = src.iter().map(|r| u64::from(r.size)).sum();
        for chunk in src.chunks_exact(BATCH) {
            let t0 = clock.raw();
            std::hint::black_box(one_leg(chunk));
            if pass > 0 {
                one.push(per_record(t0, clock.raw()));
            }
        }
        let (before, dups_before) = (m.stats().records, m.leg_stats(1).duplicates);
        let mut size = 0u64;
        for chunk in src.chunks(BATCH) {
            let t0 = clock.raw();
            size += two_legs(&mut m, chunk);
            if pass > 0 && chunk.len() == BATCH {
                two.push(per_record(t0, clock.raw()));
            }
        }
        let (st, b) = (m.stats(), m.leg_stats(1));
        ensure!(
            size == want && st.gaps == 0 && st.records - before == src.len() as u64,
            "merge cost: pass {pass} handed out {} records ({size} of {want} lots), {} gaps",
            st.records - before,
            st.gaps
        );
        ensure!(
            b.duplicates - dups_before == src.len() as u64 && b.divergences == 0,
            "merge cost: {} duplicates of {}, {} divergences",
            b.duplicates - dups_before,
            src.len(),
            b.divergences
        );
    }
    Ok((median(one), median(two)))
}

/// `mdfan-relay` with its upstream `upstream`, serving over shm; its endpoint once bound.
struct Relay {
    child: Child,
    endpoint: String,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

impl Relay {
    /// `work`: a folder for its config.
    fn start(work: &Path, upstream: &str, ring_slots: u32) -> anyhow::Result<Relay> {
        let config = work.join("relay.toml");
        std::fs::write(
            &config,
            format!(
                "[publisher]\nlisten = \"127.0.0.1:0\"\nhot_idle = \"yield\"\ncounters_dir = \"\"\n\n\
                 [feed]\nformat = \"mdfan\"\nconnect = [{upstream:?}]\nname = \"bench-relay\"\n\
                 ring_slots = {ring_slots}\nshm_dir = {shm:?}\nsilence_timeout_ms = 5000\n\n\
                 [journal]\nrecords = {ring_slots}\n\n[fabric]\nprovider = \"shm\"\nshm_dir = {shm:?}\n",
                shm = shm_dir()
            ),
        )?;
        let bin = crate::consumers::binary("mdfan-relay")?;
        let mut child = Command::new(&bin)
            .args(["--config", config.to_str().context("temp path")?])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| bin.display().to_string())?;
        let stdout = child.stdout.take().context("relay stdout")?;
        let stderr = child.stderr.take().context("relay stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let out = std::thread::spawn(move || {
            let mut all = String::new();
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("publisher listening=") {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                }
                all += &line;
                all.push('\n');
            }
            all
        });
        let err = std::thread::spawn(move || {
            // drained so the relay never blocks on a full pipe; shown only when it fails
            let mut log = String::new();
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                log += &line;
                log.push('\n');
            }
            log
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(endpoint) => Ok(Relay { child, endpoint, out, err }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{}: no `publisher listening=` line in 30 s: {}", bin.display(), err.join().unwrap_or_default())
            }
        }
    }

    /// Sends `signal` to the relay process.
    fn signal(&self, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
        // our own child, not yet waited for: its pid is not reused
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).with_context(|| format!("kill({pid}, {signal})"))
    }

    /// Waits for the relay's own end (the upstream's end of stream ends it); its report.
    fn wait(mut self) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait()? {
                let out = self.out.join().unwrap_or_default();
                let err = self.err.join().unwrap_or_default();
                ensure!(status.success(), "mdfan-relay exited {status}: {out}{err}");
                return Ok(out);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("mdfan-relay did not end within 120 s of its upstream's end");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn relay_round(work: &Path, speedup: f64, cores: (Option<usize>, Option<usize>), r: &mut Round) -> anyhow::Result<()> {
    // on a thread of its own: it pins the thread it runs on, and every thread started later inherits the mask
    r.cacheline = Some(
        std::thread::scope(|sc| sc.spawn(|| crate::pingpong::run(cores.0, cores.1, 10_000, 200_000)).join())
            .map_err(|_| anyhow!("the cache-line ping-pong panicked"))?,
    );
    let (upstream, run) = publisher(&esh4_feed(speedup), "hot_idle = \"yield\"\n", 2, "relay hop")?;
    let relay = Relay::start(work, &upstream, 1 << 17)?;
    // the relayed strategy first, then the direct one: the publisher starts on its second session, and both
    // strategies see the stream from its first record
    let mut relayed = Subscriber::connect(&sub_config(&relay.endpoint, "bench-relayed", 1 << 17))?;
    let mut direct = Subscriber::connect(&sub_config(&upstream, "bench-direct", 1 << 17))?.with_latency();
    let clock = quanta::Clock::new();
    // per venue record: (venue position, order id, the post to the direct strategy's ring in TSC ticks) and
    // (venue position, order id, the relayed strategy's poll in TSC ticks)
    let (mut d, mut s) = (Vec::<(u64, u64, u32)>::new(), Vec::<(u64, u64, u64)>::new());
    let (mut d_open, mut s_open) = (true, true);
    let mut idler = Idler::new(HotIdle::Yield.strategy());
    let deadline = Instant::now() + Duration::from_secs(600);
    while d_open || s_open {
        let mut n = 0;
        if d_open {
            n += direct.poll(256, |e| match e {
                Event::Record(x) if venue_record(x) => d.push((x.venue_pos, x.order_id, x.ts_send_ticks)),
                Event::Closed(_) => d_open = false,
                _ => {}
            });
        }
        if s_open {
            n += relayed.poll(256, |e| match e {
                Event::Record(x) if venue_record(x) => s.push((x.venue_pos, x.order_id, clock.raw())),
                Event::Closed(_) => s_open = false,
                _ => {}
            });
        }
        idler.idle(n);
        for (sub, open) in [(&mut direct, &mut d_open), (&mut relayed, &mut s_open)] {
            if let Some(mdfan_subscriber::Health::Ended(_)) = sub.maintain_if_due() {
                *open = false;
            }
        }
        ensure!(Instant::now() < deadline, "relay hop: no end of stream in 600 s");
    }
    let report = joined(run, "relay hop")?;
    relay.wait()?;
    ensure!(
        direct.stats().gaps == 0 && relayed.stats().gaps == 0,
        "relay hop: gaps (direct {}, relayed {})",
        direct.stats().gaps,
        relayed.stats().gaps
    );
    ensure!(
        d.len() as u64 == report.records && s.len() == d.len(),
        "relay hop: the publisher sent {} records, the direct strategy got {}, the relayed one {}",
        report.records,
        d.len(),
        s.len()
    );
    let mut through = Latency::new();
    for (k, (dr, sr)) in d.iter().zip(&s).enumerate() {
        ensure!(
            (dr.0, dr.1) == (sr.0, sr.1),
            "relay hop: record {k} differs (direct venue position {} order {}, relayed {} {})",
            dr.0,
            dr.1,
            sr.0,
            sr.1
        );
        through.record_at(dr.2, sr.2);
    }
    r.direct = direct.latency().map(|l| l.histogram().clone());
    r.relayed = Some(through.histogram().clone());
    Ok(())
}

/// The fan-out stream: ESH4 `repeats` times over as a capture in `dir` (records returned).
fn fanout_stream(dir: &Path, repeats: u32) -> anyhow::Result<u64> {
    crate::consumers::write_stream(dir, repeats)
}

/// Tries of one fan-out measurement whose hot thread the CPU sampler never read (see [`fanout`]).
const FANOUT_TRIES: u32 = 3;

/// The fan-out publisher's hot-thread CPU ns per record with `strategies` served directly or through a relay.
/// The sampler ([`ThreadCpu`]) sleeps between reads: a hot thread that lived a few ms (a small `--repeats`) on
/// a busy host can end unread; that measurement is run again, up to [`FANOUT_TRIES`] times.
fn fanout(stream: &Path, records: u64, strategies: usize, via_relay: bool) -> anyhow::Result<f64> {
    for _ in 1..FANOUT_TRIES {
        if let Some(ns) = fanout_once(stream, records, strategies, via_relay)? {
            return Ok(ns);
        }
    }
    fanout_once(stream, records, strategies, via_relay)?.ok_or_else(|| {
        anyhow::anyhow!(
            "fan-out: thread {HOT_THREAD} ended unread by the CPU sampler in {FANOUT_TRIES} tries (a busy host and a \
             short stream: raise --repeats)"
        )
    })
}

/// One fan-out measurement: `None` when the sampler never read the hot thread's CPU clock.
fn fanout_once(stream: &Path, records: u64, strategies: usize, via_relay: bool) -> anyhow::Result<Option<f64>> {
    let ring = (records + 65_536).next_power_of_two().min(1 << 24) as u32;
    let feed = format!("format = \"capture\"\npath = {stream:?}\npace = \"max\"\n");
    let keys = "hot_idle = \"spin\"\nfeed_on_hot_thread = true\n";
    let cpu = ThreadCpu::start(&[HOT_THREAD]);
    // the publisher starts on its last session, a gate closed as soon as it is made: every strategy (of the relay
    // too) has subscribed by then, so each gets the stream from its first record; the gate costs both ways alike
    let sessions = if via_relay { 1 } else { strategies };
    let (upstream, run) = publisher(&feed, keys, sessions + 1, "fan-out")?;
    let (relay, endpoint) = if via_relay {
        let r = Relay::start(stream.parent().unwrap_or(stream), &upstream, ring)?;
        let e = r.endpoint.clone();
        (Some(r), e)
    } else {
        (None, upstream.clone())
    };
    let mut subs = Vec::with_capacity(strategies);
    for k in 0..strategies {
        let mut cfg = sub_config(&endpoint, &format!("bench-fanout-{k}"), ring);
        cfg.policy = SlowConsumerPolicy::Resync;
        subs.push(Subscriber::connect(&cfg)?);
    }
    // the downstream is held while the publisher runs: the strategies poll after its end (their rings hold the
    // stream), the relay is stopped (SIGSTOP; its upstream ring holds the stream): the hot thread runs alone,
    // and its CPU clock is its own work, not the scheduler's on a host with fewer cores than threads
    if let Some(r) = &relay {
        r.signal(nix::sys::signal::Signal::SIGSTOP)?;
    }
    let mut gate = Subscriber::connect(&sub_config(&upstream, "bench-gate", 1024))?;
    let (mut started, deadline) = (false, Instant::now() + Duration::from_secs(30));
    while !started {
        gate.poll(1, |e| started |= matches!(e, Event::Record(_) | Event::Closed(_)));
        ensure!(Instant::now() < deadline, "fan-out: the publisher did not start in 30 s");
        std::thread::yield_now();
    }
    drop(gate);
    let report = joined(run, "fan-out")?;
    let hot_ns = cpu.stop().get(HOT_THREAD).copied().unwrap_or(0);
    if let Some(r) = &relay {
        r.signal(nix::sys::signal::Signal::SIGCONT)?;
    }
    let mut open = vec![true; strategies];
    let mut idler = Idler::new(HotIdle::Yield.strategy());
    let deadline = Instant::now() + Duration::from_secs(120);
    while open.iter().any(|o| *o) {
        let mut n = 0;
        for (sub, o) in subs.iter_mut().zip(open.iter_mut()).filter(|(_, o)| **o) {
            n += sub.poll(1024, |e| {
                if let Event::Closed(_) = e {
                    *o = false;
                }
            });
            if let Some(mdfan_subscriber::Health::Ended(_)) = sub.maintain_if_due() {
                *o = false;
            }
        }
        idler.idle(n);
        ensure!(Instant::now() < deadline, "fan-out: no end of stream in 120 s");
    }
    if let Some(r) = relay {
        r.wait()?;
    }
    for (k, s) in subs.iter().enumerate() {
        ensure!(s.stats().gaps == 0, "fan-out: strategy {k} had {} gaps (a ring too small?)", s.stats().gaps);
    }
    ensure!(report.records >= records, "fan-out: the publisher replayed {} of {records} records", report.records);
    Ok((hot_ns > 0).then(|| hot_ns as f64 / report.records as f64))
}

fn p(h: &Option<Histogram<u64>>, q: f64) -> f64 {
    h.as_ref().map_or(0.0, |h| h.value_at_quantile(q / 100.0) as f64)
}

/// `mdfan-bench plant`: writes `out/plant.md` (and its charts) and prints it.
pub fn run(out: &Path, opts: &Options, cores: (Option<usize>, Option<usize>)) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let host_cores = mdfan_tuning::allowed_cores().len();
    let work = out.join("plant-work");
    let _ = std::fs::remove_dir_all(&work);
    let stream = work.join("stream");
    std::fs::create_dir_all(&stream)?;
    let records = if opts.runs("fanout") { fanout_stream(&stream, opts.repeats)? } else { 0 };
    let mut rounds = Vec::new();
    for i in 0..opts.rounds {
        eprintln!("mdfan-bench plant: round {} of {}", i + 1, opts.rounds);
        let mut r = Round::default();
        if opts.runs("pair") {
            pair_round(&mut r).context("pair")?;
        }
        if opts.runs("merge") {
            r.merge_ns = merge_cost().context("merge cost")?;
        }
        if opts.runs("relay") {
            relay_round(&work, opts.speedup, cores, &mut r).context("relay hop")?;
        }
        for &n in FANOUT.iter().filter(|_| opts.runs("fanout")) {
            r.fanout_direct.push((n, fanout(&stream, records, n, false).context("fan-out, direct")?));
            r.fanout_relay.push((n, fanout(&stream, records, n, true).context("fan-out, relay")?));
        }
        rounds.push(r);
    }
    let instructions = if opts.runs("merge") { merge_instructions(out) } else { String::new() };
    let md = render(&rounds, opts, records, host_cores, &instructions)?;
    std::fs::write(out.join("plant.md"), &md)?;
    let last = rounds.last().context("no rounds")?;
    let (a, b, m) = (last.leg_a.as_ref(), last.leg_b.as_ref(), last.merged.as_ref());
    if let (Some(a), Some(b), Some(m)) = (a, b, m) {
        let svg = crate::plot::latency_by_percentile(
            "hot-hot pair: from the first post to each leg's poll and to the merged handout (last round)",
            &[("leg A", a), ("leg B", b), ("merged", m)],
        )?;
        std::fs::write(out.join("pair-latency.svg"), svg)?;
    }
    if opts.runs("fanout") {
        let med = |f: fn(&Round) -> &Vec<(usize, f64)>| -> Vec<(usize, f64)> {
            FANOUT.iter().enumerate().map(|(i, &n)| (n, median(rounds.iter().map(|r| f(r)[i].1).collect()))).collect()
        };
        let svg = crate::plot::cost_by_subscribers(
            "publisher hot-thread CPU per record: strategies direct or through one relay",
            &[
                ("direct".to_owned(), med(|r| &r.fanout_direct)),
                ("through one relay".to_owned(), med(|r| &r.fanout_relay)),
            ],
        )?;
        std::fs::write(out.join("relay-fanout.svg"), svg)?;
    }
    print!("{md}");
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// The report; `merge_instructions` is [`merge_instructions`]'s sentence.
fn render(
    rounds: &[Round],
    opts: &Options,
    records: u64,
    cores: usize,
    merge_instructions: &str,
) -> anyhow::Result<String> {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let n = rounds.len();
    let mut what = Vec::new();
    if opts.runs("pair") {
        let merged = median(rounds.iter().map(|r| r.pair_records as f64).collect());
        what.push(format!(
            "pair: the CME MDP 3.0 capture at {FEEDSIM_SPEED}x on lines A and B, {merged} venue records merged"
        ));
    }
    if opts.runs("relay") {
        what.push(format!("relay hop: ESH4 at {}x its own pace", opts.speedup));
    }
    if opts.runs("merge") {
        what.push("merge cost: ESH4 after its opening snapshot, 3 timed passes".to_owned());
    }
    if opts.runs("fanout") {
        what.push(format!("fan-out: {records} records (ESH4 x {}) at pace max", opts.repeats));
    }
    let title: Vec<&str> =
        [("pair", "hot-hot pair"), ("merge", "merge cost"), ("relay", "relay"), ("fanout", "fan-out")]
            .into_iter()
            .filter(|(part, _)| opts.runs(part))
            .map(|(_, name)| name)
            .collect();
    let mut md = format!(
        "# The plant: {}\n\nMedians of {n} round{} (each figure's rule in benches/src/plant.rs). {}.\n",
        title.join(", "),
        if n == 1 { "" } else { "s" },
        what.join("; ")
    );
    if opts.runs("pair") {
        md += "\n## Hot-hot pair\n\n| percentile, from the first post | leg A's poll ns | leg B's poll ns | merged handout ns | merged / better leg | target | met |\n|---|---|---|---|---|---|---|\n";
    }
    for (q, name) in PAIR_PERCENTILES.iter().copied().filter(|_| opts.runs("pair")) {
        let ratio =
            median(rounds.iter().map(|r| p(&r.merged, q) / p(&r.leg_a, q).min(p(&r.leg_b, q)).max(1.0)).collect());
        let med = |f: fn(&Round) -> &Option<Histogram<u64>>| median(rounds.iter().map(|r| p(f(r), q)).collect());
        md += &format!(
            "| {name} | {:.0} | {:.0} | {:.0} | {ratio:.2} | <= 1.1x | {} |\n",
            med(|r| &r.leg_a),
            med(|r| &r.leg_b),
            med(|r| &r.merged),
            yes(ratio <= 1.1)
        );
    }
    let (one, two) =
        (median(rounds.iter().map(|r| r.merge_ns.0).collect()), median(rounds.iter().map(|r| r.merge_ns.1).collect()));
    md += &if !opts.runs("merge") {
        String::new()
    } else {
        format!(
            "\nMerge cost per record at p50 over batches of {BATCH}: one leg to the callback {one:.1} ns, two legs \
             merged {two:.1} ns: the merge costs {:.1} ns (target <= 10 ns: {}).{}\n",
            two - one,
            yes(two - one <= 10.0),
            merge_instructions
        )
    };
    if opts.runs("relay") {
        let busy = 5;
        let judged = cores >= busy;
        md += "\n## Relay hop\n\n| percentile | direct ns | through the relay ns | added ns | cache-line one-way ns |\n|---|---|---|---|---|\n";
        for (q, name) in [(50.0, "p50"), (99.0, "p99"), (99.9, "p999")] {
            let med = |f: fn(&Round) -> &Option<Histogram<u64>>| median(rounds.iter().map(|r| p(f(r), q)).collect());
            let added = median(rounds.iter().map(|r| p(&r.relayed, q) - p(&r.direct, q)).collect());
            md += &format!(
                "| {name} | {:.0} | {:.0} | {added:.0} | {:.0} |\n",
                med(|r| &r.direct),
                med(|r| &r.relayed),
                med(|r| &r.cacheline)
            );
        }
        let hop = median(
            rounds
                .iter()
                .map(|r| (p(&r.relayed, 50.0) - p(&r.direct, 50.0)) / p(&r.cacheline, 50.0).max(1.0))
                .collect(),
        );
        md += &format!(
            "\nThe hop at p50 is {hop:.1}x a cache-line transfer (target <= 1.5x): {}.\n",
            if judged {
                yes(hop <= 1.5).to_owned()
            } else {
                format!(
                    "not judged here: {busy} busy threads on {cores} cores, so every thread yields when idle and the \
                     latencies are the scheduler's"
                )
            }
        );
    }
    if opts.runs("fanout") {
        md += "\n## Fan-out: the upstream publisher's hot-thread CPU per record\n\n| strategies | direct ns | through one relay ns | relay / one direct (median of the rounds' ratios) | target | met |\n|---|---|---|---|---|---|\n";
        for (i, &k) in FANOUT.iter().enumerate() {
            let direct = median(rounds.iter().map(|r| r.fanout_direct[i].1).collect());
            let relay = median(rounds.iter().map(|r| r.fanout_relay[i].1).collect());
            let ratio = median(rounds.iter().map(|r| r.fanout_relay[i].1 / r.fanout_direct[0].1.max(1e-9)).collect());
            md += &format!("| {k} | {direct:.0} | {relay:.0} | {ratio:.2} | <= 1.10 | {} |\n", yes(ratio <= 1.10));
        }
    }
    md += &format!("\nHost: {} ({cores} cores).", crate::cpu_model());
    if opts.runs("fanout") {
        md += " In the fan-out, the hot thread decodes the feed too (`feed_on_hot_thread`), so its CPU clock is the \
               publisher's whole cost per record: decode, then one write per session.";
    }
    md += "\n";
    Ok(md)
}
