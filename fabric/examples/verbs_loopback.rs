//! verbs_loopback: the verbs provider end to end, in one process and one thread, over a real RDMA device.
//!
//! A [`VerbsPublisher`] and a [`VerbsLocalRing`] (each on its own device context) are connected with what the
//! control messages carry (the grant of `Subscribe.ring`, the `Accept.fabric` with the publisher's endpoint and
//! credit word), each passed through its JSON encoding. Then:
//!
//! 1. throughput: records with seq 1..=N go through a small ring many times over, the publisher writing whenever
//!    the credit the subscriber writes back says there is room; every record must arrive exactly once, in order,
//!    with the right contents;
//! 2. latency: one record at a time, post to completion (`write_with_imm` + `flush` until `poll_cq` returns it);
//! 3. fault: a second ring attached with a wrong rkey must fail with `IBV_WC_REM_ACCESS_ERR` on its own, while
//!    the first ring keeps working;
//! 4. end: an end-of-stream record, `close`, `drain`.
//!
//! Prints `verbs_loopback ok records=N ...` with latency percentiles, or fails with a message.
//!
//! In the Soft-RoCE VM (no RDMA NIC needed on the host):
//!
//! ```sh
//! cargo build --release -p mdfan-fabric --features verbs --example verbs_loopback
//! mkdir -p /tmp/job && cp target/release/examples/verbs_loopback ops/softroce/rxe-up /tmp/job/
//! ops/softroce/vmrun --share /tmp/job -- 'sh ./rxe-up && ./verbs_loopback'
//! ```
//!
//! Options: `--device NAME` (default: first device), `--gid N` (default: `$MDFAN_GID_INDEX`, else chosen from
//! sysfs), `--records N` (100000), `--slots N` (256), `--latency N` (2000 samples), `--cq-api auto|classic|extended`,
//! `--config FILE` (a [`VerbsConfig`] as TOML; `--device`/`--gid` override it, `--cq-api` is ignored with it).

use std::error::Error;
use std::time::{Duration, Instant};

use mdfan_fabric::verbs::{
    wc_status_name, CqApi, VerbsConfig, VerbsDevice, VerbsLocalRing, VerbsPublisher, VerbsRemoteRing,
};
use mdfan_fabric::wire::control::{AcceptFabric, RingGrant};
use mdfan_fabric::wire::ring::{has_space, imm_from_seq, seq_from_imm, slot_index};
use mdfan_fabric::wire::{BookUpdate, Kind};
use mdfan_fabric::{CloseReason, Completion, LocalRing, PeerState, PostError, RemoteRing};

type Res<T> = Result<T, Box<dyn Error>>;

/// Longest any phase may take before the run is declared stuck (rxe under qemu TCG is slow, not this slow).
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

struct Args {
    config: Option<String>,
    device: Option<String>,
    gid: Option<u32>,
    records: u64,
    slots: u32,
    latency: usize,
    cq_api: CqApi,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        config: None,
        device: None,
        gid: std::env::var("MDFAN_GID_INDEX").ok().map(|v| v.parse()).transpose()?,
        records: 100_000,
        slots: 256,
        latency: 2000,
        cq_api: CqApi::Auto,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--config" => a.config = Some(value()?),
            "--device" => a.device = Some(value()?),
            "--gid" => a.gid = Some(value()?.parse()?),
            "--records" => a.records = value()?.parse()?,
            "--slots" => a.slots = value()?.parse()?,
            "--latency" => a.latency = value()?.parse()?,
            "--cq-api" => {
                a.cq_api = match value()?.as_str() {
                    "auto" => CqApi::Auto,
                    "classic" => CqApi::Classic,
                    "extended" => CqApi::Extended,
                    other => return Err(format!("--cq-api {other}: auto, classic or extended").into()),
                }
            }
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(a)
}

/// The record for `seq`: contents derived from the seq, so the reader can check every byte that matters.
fn record(seq: u64) -> BookUpdate {
    BookUpdate {
        seq,
        order_id: seq.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        price_e9: seq as i64 * 250_000_000,
        size: (seq % 1000) as u32 + 1,
        instrument_id: 42,
        ..BookUpdate::control(Kind::Add)
    }
}

/// Serialises a control-message part to JSON and back, as it crosses in `Subscribe.ring` / `Accept.fabric`.
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq>(part: &T) -> Res<T> {
    let back: T = serde_json::from_slice(&serde_json::to_vec(part)?)?;
    if &back != part {
        return Err("a control-message part changed in a JSON round trip".into());
    }
    Ok(back)
}

/// Subscriber creates, publisher attaches, subscriber connects: the whole handshake through control frames.
/// `tamper` may change the grant in flight (the fault phase).
fn connect_pair(
    sub: &VerbsDevice,
    publisher: &VerbsPublisher,
    slots: u32,
    tamper: impl FnOnce(&mut RingGrant),
) -> Res<(VerbsLocalRing, VerbsRemoteRing)> {
    let (prepared, grant) = VerbsLocalRing::create(sub, slots)?;
    let mut grant: RingGrant = round_trip(&grant)?;
    tamper(&mut grant);
    let (remote, fabric) = publisher.attach(&grant)?;
    let fabric: AcceptFabric = round_trip(&fabric)?;
    let local = prepared.connect(&fabric)?;
    Ok((local, remote))
}

fn check(c: &Completion<'_>, expected: u64, slots: u32) -> Res<u64> {
    let seq = seq_from_imm(c.imm_data, expected);
    if seq != expected || c.seq() != seq {
        return Err(format!(
            "completion for seq {seq} (ring says {}) while expecting {expected} (lost, duplicated or reordered)",
            c.seq()
        )
        .into());
    }
    let got = c.record().ok_or_else(|| format!("the completion of seq {seq} hands out no record"))?;
    if *got != record(seq) {
        return Err(format!("slot {} holds {got:?}, expected the record of seq {seq}", slot_index(seq, slots)).into());
    }
    Ok(seq)
}

/// `write_with_imm`, retried (reaping send completions with `flush`) while the send queue is full.
fn write_retry(remote: &mut VerbsRemoteRing, seq: u64, slots: u32, rec: &BookUpdate) -> Res<()> {
    let t = Instant::now();
    loop {
        match remote.write_with_imm(slot_index(seq, slots), rec, imm_from_seq(seq)) {
            Ok(()) => return Ok(()),
            Err(PostError::SendQueueFull) if t.elapsed() < PHASE_TIMEOUT => remote.flush().map_err(transport)?,
            Err(e) => return Err(transport(e)),
        }
    }
}

fn transport(e: PostError) -> Box<dyn Error> {
    match e {
        PostError::Transport { code } => format!("transport error {code} ({})", wc_status_name(code)).into(),
        other => other.to_string().into(),
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verbs_loopback FAILED: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = parse_args()?;
    let slots = args.slots;
    let mut cfg: VerbsConfig = match &args.config {
        Some(path) => toml::from_str(&std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?)?,
        None => VerbsConfig { cq_api: args.cq_api, ..Default::default() },
    };
    cfg.device = args.device.clone().or(cfg.device);
    cfg.gid_index = args.gid.or(cfg.gid_index);
    // One device context per role, as two processes would have.
    let sub_dev = VerbsDevice::open(&cfg)?;
    let publisher = VerbsPublisher::open(&cfg)?;
    let (mut local, mut remote) = connect_pair(&sub_dev, &publisher, slots, |_| {})?;

    let t0 = Instant::now();
    while !remote.peer_connected() {
        // The subscriber's first credit write; poll its CQ so the credit WC is reaped.
        if local.poll_cq().is_some() {
            return Err("a completion before any write".into());
        }
        if t0.elapsed() > PHASE_TIMEOUT {
            return Err("the subscriber's first credit never reached the publisher".into());
        }
        std::hint::spin_loop();
    }

    // 1. throughput through the full ring, several laps
    let records = args.records;
    let (mut next, mut expected) = (1u64, 1u64);
    let (mut ring_full, mut sq_full) = (0u64, 0u64);
    let t_phase = Instant::now();
    while expected <= records {
        while next <= records {
            if !has_space(next, remote.consumed_seq(), slots) {
                ring_full += 1;
                break;
            }
            match remote.write_with_imm(slot_index(next, slots), &record(next), imm_from_seq(next)) {
                Ok(()) => next += 1,
                Err(PostError::SendQueueFull) => {
                    sq_full += 1;
                    break;
                }
                Err(e) => return Err(transport(e)),
            }
        }
        remote.flush().map_err(transport)?;
        while let Some(c) = local.poll_cq() {
            let seq = check(&c, expected, slots)?;
            local.release(seq);
            expected += 1;
        }
        if local.peer_state() != PeerState::Attached {
            return Err(format!("subscriber ring closed: {:?}", local.failure().map(|c| (c, wc_status_name(c)))).into());
        }
        if t_phase.elapsed() > PHASE_TIMEOUT {
            return Err(format!(
                "stuck at seq {expected} (written up to {}, credit {})",
                next - 1,
                remote.consumed_seq()
            )
            .into());
        }
    }
    let throughput_s = t_phase.elapsed().as_secs_f64();
    // nothing more may arrive
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(50) {
        if let Some(c) = local.poll_cq() {
            return Err(format!("an extra completion (imm {}) after all {records} records", c.imm_data).into());
        }
    }

    // 2. latency, one record at a time
    let mut lat_ns = Vec::with_capacity(args.latency);
    let mut nic_ts = false;
    for _ in 0..args.latency {
        let seq = next;
        let t = Instant::now();
        write_retry(&mut remote, seq, slots, &record(seq))?;
        remote.flush().map_err(transport)?;
        let c = loop {
            if let Some(c) = local.poll_cq() {
                break c;
            }
            if t.elapsed() > PHASE_TIMEOUT {
                return Err(format!("seq {seq} never arrived").into());
            }
            std::hint::spin_loop();
        };
        lat_ns.push(t.elapsed().as_nanos() as u64);
        let seq = check(&c, expected, slots)?;
        nic_ts |= local.last_completion_timestamp_ns().is_some();
        local.release(seq);
        next += 1;
        expected += 1;
    }
    lat_ns.sort_unstable();
    let pct = |p: f64| {
        lat_ns.get(((lat_ns.len() as f64 * p) as usize).min(lat_ns.len().saturating_sub(1))).copied().unwrap_or(0)
    };

    // 3. a ring with a wrong rkey fails alone
    let (mut bad_local, mut bad_remote) = connect_pair(&sub_dev, &publisher, 64, |g| {
        if let RingGrant::Verbs { ring_rkey, .. } = g {
            *ring_rkey ^= 0x5a5a_0000;
        }
    })?;
    let tf = Instant::now();
    while !bad_remote.peer_connected() {
        if bad_local.poll_cq().is_some() {
            return Err("the fault ring delivered a completion before any write".into());
        }
        if tf.elapsed() > PHASE_TIMEOUT {
            return Err("the fault ring's first credit never arrived".into());
        }
    }
    bad_remote.write_with_imm(1, &record(1), imm_from_seq(1)).map_err(transport)?;
    let fault_code = match bad_remote.drain(PHASE_TIMEOUT) {
        Err(PostError::Transport { code }) => code,
        other => return Err(format!("a write with a wrong rkey gave {other:?}, expected a transport error").into()),
    };
    if wc_status_name(fault_code) != "IBV_WC_REM_ACCESS_ERR" {
        return Err(format!(
            "wrong rkey: expected IBV_WC_REM_ACCESS_ERR, got {fault_code} ({})",
            wc_status_name(fault_code)
        )
        .into());
    }
    let tf = Instant::now();
    while bad_local.peer_state() == PeerState::Attached && tf.elapsed() < Duration::from_secs(2) {
        if bad_local.poll_cq().is_some() {
            return Err("the fault ring delivered a record".into());
        }
    }
    let fault_sub_state = match bad_local.failure() {
        Some(c) => wc_status_name(c),
        None => "still attached",
    };
    drop((bad_local, bad_remote));

    // 4. the first ring still works; end of stream
    let eos = BookUpdate { seq: next, ..BookUpdate::control(Kind::EndOfStream) };
    write_retry(&mut remote, next, slots, &eos)?;
    remote.close(CloseReason::EndOfStream);
    if !remote.drain(PHASE_TIMEOUT).map_err(transport)? {
        return Err("drain timed out".into());
    }
    if remote.write_with_imm(0, &record(1), 1).is_ok() {
        return Err("a write after close was accepted".into());
    }
    let te = Instant::now();
    let c = loop {
        if let Some(c) = local.poll_cq() {
            break c;
        }
        if te.elapsed() > PHASE_TIMEOUT {
            return Err("end-of-stream never arrived".into());
        }
    };
    let seq = seq_from_imm(c.imm_data, expected);
    let last = *c.record().ok_or("the end-of-stream completion hands out no record")?;
    if seq != expected || last.kind() != Some(Kind::EndOfStream) || last.seq != seq {
        return Err(format!("expected end-of-stream seq {expected}, got seq {seq} {last:?}").into());
    }
    local.release(seq);
    local.flush_credit();
    if local.peer_state() != PeerState::Attached {
        return Err("the good ring was closed by the other ring's fault".into());
    }

    println!(
        "verbs_loopback ok records={records} slots={slots} laps={} ring_full={ring_full} sq_full={sq_full} \
         throughput_rec_per_s={:.0} credit_every={} inline={} nic_timestamps={} fault={}/{} \
         lat_samples={} p50_ns={} p90_ns={} p99_ns={} p999_ns={} max_ns={}",
        records / slots as u64,
        records as f64 / throughput_s,
        local.credit_every(),
        remote.is_inline(),
        nic_ts,
        wc_status_name(fault_code),
        fault_sub_state,
        lat_ns.len(),
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(0.999),
        lat_ns.last().copied().unwrap_or(0),
    );
    Ok(())
}
