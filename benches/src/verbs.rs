//! mdfan over real RDMA verbs, beside perftest's `ib_write_lat --write_with_imm` on the same device (feature
//! `verbs`; `mdfan-bench run --fabric verbs`).
//!
//! - [`pingpong`]: two verbs rings on one device between two pinned threads of this process, one record out and
//!   one back, each a `write_with_imm` + `flush` (one doorbell per record, as the publisher posts live) reaped with
//!   `poll_cq` and read in place; one-way = round trip / 2, the method of `shm::pingpong` and of the cache-line
//!   baseline. Set-up is the real provider's handshake (`VerbsLocalRing::create`, `VerbsPublisher::attach`,
//!   `PreparedVerbsLocalRing::connect`, the first credit), with one device context per role and side, as the
//!   publisher and subscriber processes each have their own.
//! - [`perftest`]: perftest's `ib_write_lat` as server and client on the same device and the same two cores (client
//!   where the pinger runs, server where the responder runs), 64-byte messages, `-F`,
//!   `--write_with_imm` when the binary has it; every sample read from its `-U` listing (unsorted: the first
//!   `warmup` are dropped, as the mdfan ping-pong drops its own), so the histogram has every percentile.
//!   perftest's samples are also half a round trip: the time between two of the client's posts, over 2.
//!
//! perftest is looked for as `$MDFAN_PERFTEST`, else `/usr/local/bin/ib_write_lat_imm` (what
//! `ops/softroce/build-perftest` puts into the VM), else `ib_write_lat` on `PATH`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use hdrhistogram::Histogram;
use mdfan_fabric::verbs::{wc_status_name, VerbsConfig, VerbsDevice, VerbsLocalRing, VerbsPublisher, VerbsRemoteRing};
use mdfan_fabric::{LocalRing, PostError, RemoteRing};
use mdfan_wire::ring::{imm_from_seq, slot_index};
use mdfan_wire::{BookUpdate, Kind};

/// Slots per ring. One record is in flight at a time, so the ring never fills (a credit comes every 128).
const SLOTS: u32 = 1024;
/// Longest a set-up step or one record may take before the run is declared stuck (rxe under emulation on a busy
/// host: tens of ms at worst).
const STUCK: Duration = Duration::from_secs(10);
/// Longest one perftest client may run.
const PERFTEST_TIMEOUT: Duration = Duration::from_secs(120);
/// perftest runs per measurement when its clock calibration fails (it then prints `inf` for every sample).
const PERFTEST_ATTEMPTS: u32 = 3;

fn post_error(e: PostError) -> anyhow::Error {
    match e {
        PostError::Transport { code } => anyhow!("verbs transport error {code} ({})", wc_status_name(code)),
        other => anyhow!("verbs post: {other}"),
    }
}

/// Creates a ring on `subscriber`, attaches `publisher` to it and connects it, then waits for the first credit
/// (the publisher's sign that the subscriber's QP is live).
fn ring(publisher: &VerbsPublisher, subscriber: &VerbsDevice) -> anyhow::Result<(VerbsLocalRing, VerbsRemoteRing)> {
    let (prepared, grant) = VerbsLocalRing::create(subscriber, SLOTS)?;
    let (remote, accept) = publisher.attach(&grant)?;
    let mut local = prepared.connect(&accept)?;
    let t = Instant::now();
    while !remote.peer_connected() {
        // reaps the credit write's own completion
        if local.poll_cq().is_some() {
            bail!("a verbs ring delivered a completion before any write");
        }
        if let Some(code) = local.failure() {
            bail!("a verbs ring failed while connecting: {code} ({})", wc_status_name(code));
        }
        if t.elapsed() > STUCK {
            bail!("the subscriber's first credit write never reached the publisher ({STUCK:?})");
        }
        std::hint::spin_loop();
    }
    Ok((local, remote))
}

/// Writes `seq` (stamped `ts_send_ticks`) and rings the doorbell.
#[inline]
fn send(remote: &mut VerbsRemoteRing, seq: u64, ts_send_ticks: u32) -> anyhow::Result<()> {
    let r = BookUpdate { seq, ts_send_ticks, ..BookUpdate::control(Kind::Add) };
    loop {
        match remote.write_with_imm(slot_index(seq, SLOTS), &r, imm_from_seq(seq)) {
            Ok(()) => break,
            // not with one record in flight; `flush` reaps the send completions that make room
            Err(PostError::SendQueueFull) => remote.flush().map_err(post_error)?,
            Err(e) => return Err(post_error(e)),
        }
    }
    remote.flush().map_err(post_error)
}

/// Spins until the completion of `expected` and returns its record, read in place.
#[inline]
fn reap(local: &mut VerbsLocalRing, expected: u64) -> anyhow::Result<BookUpdate> {
    let mut spins = 0u32;
    let mut since: Option<Instant> = None;
    loop {
        if let Some(c) = local.poll_cq() {
            let seq = c.seq();
            let Some(&r) = c.record() else {
                bail!("verbs ring: expected seq {expected}, got a stale completion {seq}")
            };
            if seq != expected || r.seq != expected {
                bail!("verbs ring: expected seq {expected}, got a completion for {seq} and a slot holding {}", r.seq);
            }
            local.release(seq);
            return Ok(r);
        }
        spins = spins.wrapping_add(1);
        if spins & 0xffff == 0 {
            if let Some(code) = local.failure() {
                bail!("verbs ring failed waiting for seq {expected}: {code} ({})", wc_status_name(code));
            }
            let t = *since.get_or_insert_with(Instant::now);
            if t.elapsed() > STUCK {
                bail!("verbs ring: seq {expected} did not arrive within {STUCK:?}");
            }
        }
        std::hint::spin_loop();
    }
}

/// What the device's NIC clock is to these figures, for the report: the ping-pong is timed with the TSC whether or
/// not the device reports completion timestamps; this says whether it does (Soft-RoCE does not).
pub fn nic_clock_text(device: &VerbsDevice) -> String {
    match device.nic_clock() {
        None => "not available (device reports no completion timestamps)".to_owned(),
        Some(c) => format!(
            "{} kHz, {}-bit counter (completion timestamps not used by these figures)",
            c.khz(),
            64 - c.mask().leading_zeros()
        ),
    }
}

/// One-way latency by ping-pong over two verbs rings on `device` (ns), and [`nic_clock_text`] of the device.
pub fn pingpong(
    device: Option<&str>,
    gid_index: Option<u32>,
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<(Histogram<u64>, String)> {
    let cfg = VerbsConfig { device: device.map(str::to_owned), gid_index, ..VerbsConfig::default() };
    let (a_pub, a_sub) = (VerbsPublisher::open(&cfg)?, VerbsDevice::open(&cfg)?);
    let nic_clock = nic_clock_text(&a_sub);
    let (b_pub, b_sub) = (VerbsPublisher::open(&cfg)?, VerbsDevice::open(&cfg)?);
    let (mut b_local, mut a_to_b) = ring(&a_pub, &b_sub).context("verbs ring A -> B")?;
    let (mut a_local, mut b_to_a) = ring(&b_pub, &a_sub).context("verbs ring B -> A")?;
    let total = warmup + count;
    let start = Arc::new(Barrier::new(2));
    let responder = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || -> anyhow::Result<()> {
            crate::pin(b_core);
            start.wait();
            for seq in 1..=total {
                let r = reap(&mut b_local, seq)?;
                send(&mut b_to_a, seq, r.ts_send_ticks)?;
            }
            Ok(())
        })
    };
    crate::pin(a_core);
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    start.wait();
    let pinger = (|| {
        for seq in 1..=total {
            let t0 = clock.raw();
            send(&mut a_to_b, seq, t0 as u32)?;
            let r = reap(&mut a_local, seq)?;
            let rtt = clock.delta_as_nanos(0, r.ticks_since_send(clock.raw()));
            if seq > warmup {
                hist.saturating_record((rtt / 2).max(1));
            }
        }
        anyhow::Ok(())
    })();
    let responded = responder.join().map_err(|_| anyhow!("verbs responder thread panicked"))?;
    pinger.context("verbs ping-pong")?;
    responded.context("verbs ping-pong responder")?;
    Ok((hist, nic_clock))
}

/// What one perftest measurement gave.
#[derive(Debug)]
pub struct Perftest {
    /// One-way latency (ns) of every sample after the warm-up: perftest's half round trip.
    pub hist: Histogram<u64>,
    /// The client's command line.
    pub command: String,
    /// `write_with_imm`, or `write` when this perftest has no `--write_with_imm`.
    pub op: &'static str,
    /// perftest's `--version`.
    pub version: String,
    /// perftest's own summary of the same run over every sample, warm-up included (ns): `t_typical` (its
    /// median), `99%`, `99.9%`.
    pub own_p50_p99_p999_ns: Option<[f64; 3]>,
    /// Runs it took (a run whose clock calibration failed is repeated).
    pub attempts: u32,
}

/// Runs perftest's `ib_write_lat` server (on `b_core`) and client (on `a_core`: the cores of the mdfan ping-pong's
/// responder and pinger) on `device` (`-s 64 -n warmup+iterations -F`, `--write_with_imm` when available) and
/// returns the one-way latency of the `iterations` samples after the first `warmup`.
pub fn perftest(
    device: Option<&str>,
    gid_index: Option<u32>,
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    iterations: u64,
) -> anyhow::Result<Perftest> {
    let bin = find_perftest()?;
    let help = output_of(&bin, &["--help"])?;
    let (op, imm) = if help.contains("--write_with_imm") { ("write_with_imm", true) } else { ("write", false) };
    let version = output_of(&bin, &["--version"])?
        .lines()
        .find(|l| l.contains("Version"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("unknown")
        .to_owned();
    let n = (warmup + iterations + 1).max(5); // n exchanges give n - 1 samples; perftest wants at least 5
    let mut args: Vec<String> = Vec::new();
    if let Some(d) = device {
        args.extend(["-d".into(), d.into()]);
    }
    if let Some(g) = gid_index {
        args.extend(["-x".into(), g.to_string()]);
    }
    args.extend(["-s", "64", "-n"].map(String::from));
    args.push(n.to_string());
    args.push("-F".into());
    if imm {
        args.push("--write_with_imm".into());
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        let port = free_port()?;
        let mut server_args = args.clone();
        server_args.extend(["-p".into(), port.to_string()]);
        let mut client_args = server_args.clone();
        client_args.extend(["-U".into(), "127.0.0.1".into()]);
        let command = format!("{} {}", bin.display(), client_args.join(" "));
        let mut server = Proc::spawn_on(b_core, &bin, &server_args)?;
        if let Err(e) = wait_listening(port, &mut server) {
            let (_, out) = server.finish(Duration::ZERO);
            bail!("perftest server `{}`: {e}\n{out}", bin.display());
        }
        let (client_status, client_out) = Proc::spawn_on(a_core, &bin, &client_args)?.finish(PERFTEST_TIMEOUT);
        let server_wait = if client_status.is_some_and(|s| s.success()) { STUCK } else { Duration::ZERO };
        let (server_status, server_out) = server.finish(server_wait);
        let ok = |s: Option<ExitStatus>| s.is_some_and(|s| s.success());
        if !ok(client_status) || !ok(server_status) {
            bail!(
                "perftest failed (client {}, server {}): {command}\n-- client:\n{client_out}\n-- server:\n{server_out}",
                describe(client_status),
                describe(server_status)
            );
        }
        match parse_samples(&client_out) {
            Ok(samples) => {
                if samples.len() as u64 <= warmup {
                    bail!("perftest printed {} samples for -n {n}: {command}\n{client_out}", samples.len());
                }
                let mut hist = crate::new_histogram();
                for us in samples.iter().skip(warmup as usize) {
                    hist.saturating_record(((us * 1000.0).round() as u64).max(1));
                }
                return Ok(Perftest {
                    hist,
                    command,
                    op,
                    version,
                    own_p50_p99_p999_ns: parse_summary(&client_out),
                    attempts,
                });
            }
            Err(Samples::NotFinite) if attempts < PERFTEST_ATTEMPTS => {
                eprintln!("mdfan-bench: perftest's clock calibration failed (it printed inf); running it again");
            }
            Err(Samples::NotFinite) => {
                bail!("perftest's clock calibration failed {attempts} times (every sample inf): {command}")
            }
            Err(Samples::Missing) => {
                bail!("no per-sample listing (`-U`) in perftest's output: {command}\n{client_out}")
            }
        }
    }
}

/// `$MDFAN_PERFTEST`, else `/usr/local/bin/ib_write_lat_imm`, else `ib_write_lat` on `PATH`.
fn find_perftest() -> anyhow::Result<PathBuf> {
    const IMM: &str = "/usr/local/bin/ib_write_lat_imm";
    if let Some(p) = std::env::var_os("MDFAN_PERFTEST") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { bail!("MDFAN_PERFTEST={}: no such file", p.display()) };
    }
    if Path::new(IMM).is_file() {
        return Ok(IMM.into());
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("ib_write_lat")).find(|p| p.is_file()));
    on_path.ok_or_else(|| {
        anyhow!(
            "perftest not found: no $MDFAN_PERFTEST, no {IMM} (ops/softroce/build-perftest builds one with \
             --write_with_imm) and no ib_write_lat on PATH (Debian: apt install perftest)"
        )
    })
}

/// stdout and stderr of `bin args` (perftest's `--help` exits 1, so the status is not checked).
fn output_of(bin: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(bin).args(args).output().with_context(|| format!("running {}", bin.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// A TCP port nobody listens on right now (the kernel's pick), for perftest's out-of-band exchange.
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free TCP port for perftest")?;
    Ok(l.local_addr()?.port())
}

/// Waits until some socket listens on TCP `port` (`/proc/net/tcp{,6}`; connecting would use up the server's one
/// accept).
fn wait_listening(port: u16, server: &mut Proc) -> anyhow::Result<()> {
    let want = format!(":{port:04X}");
    let t = Instant::now();
    loop {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
                let mut cols = l.split_whitespace();
                let local = cols.nth(1).unwrap_or("");
                let state = cols.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        });
        if listening {
            return Ok(());
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            bail!("exited ({status}) before listening on port {port}");
        }
        if t.elapsed() > STUCK {
            bail!("not listening on port {port} after {STUCK:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process whose stdout and stderr are read as they come (perftest can print more than a pipe holds).
struct Proc {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

impl Proc {
    /// Starts `bin` pinned to `core`: from a thread pinned there, whose CPU mask the child inherits. (Not from the
    /// calling thread: it may be pinned to another core, and a server and client sharing one core take turns at
    /// the scheduler's tick, ~10 ms a sample.)
    fn spawn_on(core: Option<usize>, bin: &Path, args: &[String]) -> anyhow::Result<Proc> {
        let (bin, args) = (bin.to_owned(), args.to_vec());
        std::thread::spawn(move || {
            crate::pin(core);
            Proc::spawn(&bin, &args)
        })
        .join()
        .map_err(|_| anyhow!("the thread starting perftest panicked"))?
    }

    fn spawn(bin: &Path, args: &[String]) -> anyhow::Result<Proc> {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        }
        let stdout = reader(child.stdout.take().expect("piped"));
        let stderr = reader(child.stderr.take().expect("piped"));
        Ok(Proc { child, stdout, stderr })
    }

    /// Waits up to `timeout` for the exit, then kills it (status `None`); returns stdout followed by stderr.
    fn finish(mut self, timeout: Duration) -> (Option<ExitStatus>, String) {
        let t = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if t.elapsed() < timeout => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        let out = self.stdout.join().unwrap_or_default() + &self.stderr.join().unwrap_or_default();
        (status, out)
    }
}

fn describe(s: Option<ExitStatus>) -> String {
    s.map_or_else(|| "killed after its timeout".to_owned(), |s| s.to_string())
}

#[derive(Debug, PartialEq)]
enum Samples {
    /// No `#, usec` listing.
    Missing,
    /// The listing holds inf or nan (perftest's cycles-to-usec calibration failed).
    NotFinite,
}

/// The samples (usec) of perftest's `-U`/`-H` listing: a `#, usec` line, then `i, value` lines.
fn parse_samples(out: &str) -> Result<Vec<f64>, Samples> {
    let mut lines = out.lines().skip_while(|l| l.trim() != "#, usec");
    lines.next().ok_or(Samples::Missing)?;
    let mut samples = Vec::new();
    for l in lines {
        let Some((_, v)) = l.split_once(", ") else { break };
        let Ok(v) = v.trim().parse::<f64>() else { break };
        if !v.is_finite() {
            return Err(Samples::NotFinite);
        }
        samples.push(v);
    }
    if samples.is_empty() {
        return Err(Samples::Missing);
    }
    Ok(samples)
}

/// perftest's own summary row (`t_typical`, `99%`, `99.9%`, usec) as ns, when finite.
fn parse_summary(out: &str) -> Option<[f64; 3]> {
    let mut lines = out.lines();
    let mut row = None;
    while let Some(l) = lines.next() {
        if l.contains("t_typical") {
            row = lines.next().filter(|r| r.split_whitespace().next().is_some_and(|c| c.parse::<u64>().is_ok()));
        }
    }
    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
    let cols: Vec<f64> = row?.split_whitespace().map(|c| c.parse().unwrap_or(f64::NAN)).collect();
    let pick = [*cols.get(4)?, *cols.get(7)?, *cols.get(8)?].map(|us| us * 1000.0);
    pick.iter().all(|v| v.is_finite()).then_some(pick)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of perftest 6.24's client output with `-U` (trimmed).
    const OUT: &str = "\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n\
#, usec\n\
1, 10491.9\n\
2, 81.4754\n\
3, 20.3616\n\
4, 19.5\n\
---------------------------------------------------------------------------------------\n\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n\
 64      5          19.50          10491.90      20.68    \t       834.91      \t2281.27\t\t10022.32 \t\t10491.90\n\
---------------------------------------------------------------------------------------\n";

    #[test]
    fn samples_and_summary_are_read() {
        assert_eq!(parse_samples(OUT).unwrap(), vec![10491.9, 81.4754, 20.3616, 19.5]);
        let s = parse_summary(OUT).unwrap();
        assert!((s[0] - 20680.0).abs() < 0.01 && (s[1] - 10022320.0).abs() < 0.01, "{s:?}");
        assert!((s[2] - 10491900.0).abs() < 0.01, "{s:?}");
    }

    #[test]
    fn a_failed_calibration_is_named() {
        let inf = "#, usec\n1, inf\n2, inf\n---\n #bytes t_typical\n 64      2          inf     inf\n";
        assert_eq!(parse_samples(inf), Err(Samples::NotFinite));
        assert_eq!(parse_summary(inf), None);
        assert_eq!(parse_samples("no listing\n"), Err(Samples::Missing));
    }
}
