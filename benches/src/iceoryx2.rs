//! Peer baseline: iceoryx2 publish-subscribe (`ipc::Service`, shared memory between processes, here two
//! threads) with the same ping-pong as the cache-line baseline: one 64-byte sample out on one service, the same
//! bytes back on a second, one-way = round trip / 2.
//!
//! The payload is a `[u8; 64]` placed on a 64-byte boundary in the data segment (one cache line, like a
//! record); `[u8; N]` is `ZeroCopySend` already, so no unsafe impl is needed here. Each side loans a sample,
//! writes it, sends it, and busy-polls `receive()` on its subscriber. iceoryx2 has no daemon and no background
//! thread: nothing else runs. Each thread has its own node (`ipc::Service` ports are not `Send`), as two
//! processes would; neither installs signal handlers. Service names carry the process id and a run number, so
//! runs never meet; their shared memory and node files go when the last node holding them drops. What stays is
//! iceoryx2's own 16-byte node counter in /dev/shm (`iox2_*_node.<version>.global_mgmt`), which every iceoryx2
//! user on the host shares by design.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::spin::Wait;

use anyhow::{anyhow, bail};
use hdrhistogram::Histogram;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;
use iceoryx2::service::port_factory::publish_subscribe::PortFactory as PubSub;

/// One cache line, the size of a record.
const MESSAGE_BYTES: usize = 64;
type Payload = [u8; MESSAGE_BYTES];
/// Longest wait for the other side's ports to appear.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one reply (host stalls here reach a few ms; this only catches a dead peer).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs of [`pingpong`] in this process so far; part of the service names.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// The ping and pong service names of run `run` of this process.
fn service_names(run: u64) -> (String, String) {
    let base = format!("mdfan-bench/{}/{run}", std::process::id());
    (format!("{base}/ping"), format!("{base}/pong"))
}

/// One-way latency by iceoryx2 publish-subscribe ping-pong (ns): `warmup` round trips, then `count` recorded.
///
/// # Errors
/// A node, service, publisher or subscriber could not be created (each names the side or service), a loan, send or
/// receive failed, or a peer stopped answering for [`REPLY_TIMEOUT`].
pub fn pingpong(
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Histogram<u64>> {
    let (ping_name, pong_name) = service_names(RUNS.fetch_add(1, Ordering::Relaxed));
    // The ping side creates both services, so they exist before pong opens them, and live until ping is done.
    let node = node("ping")?;
    let ping_service = service(&node, &ping_name, true)?;
    let pong_service = service(&node, &pong_name, true)?;
    let total = warmup + count;
    let stop = Arc::new(AtomicBool::new(false));
    let pong = {
        let stop = Arc::clone(&stop);
        let (ping_name, pong_name) = (ping_name.clone(), pong_name.clone());
        std::thread::Builder::new()
            .name("iceoryx2-pong".into())
            .spawn(move || {
                let result = pong(&ping_name, &pong_name, b_core, total, &stop);
                if result.is_err() {
                    stop.store(true, Ordering::Release);
                }
                result
            })
            .map_err(|e| anyhow!("iceoryx2: cannot start the pong thread: {e}"))?
    };
    let ping = {
        let _stop_on_exit = StopOnDrop(&stop);
        ping(&ping_service, &pong_service, &ping_name, &pong_name, a_core, warmup, total, &stop)
    };
    let pong = pong.join().unwrap_or_else(|_| Err(anyhow!("iceoryx2: the pong thread panicked")));
    match (ping, pong) {
        (Ok(h), Ok(())) => Ok(h),
        (Ok(_), Err(e)) | (Err(e), Ok(())) => Err(e),
        // A pong failure is usually why ping gave up: name it first.
        (Err(ping), Err(pong)) => Err(anyhow!("{pong:#}; then ping: {ping:#}")),
    }
}

/// Sets the flag when dropped: ping's exit, normal or by unwinding, releases pong.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn node(side: &str) -> anyhow::Result<Node<ipc::Service>> {
    let name = format!("mdfan-bench-{side}");
    let name = NodeName::new(&name).map_err(|e| anyhow!("iceoryx2: node name {name}: {e:?}"))?;
    NodeBuilder::new()
        .name(&name)
        // iceoryx2's defaults, given rather than searched for in config files (that search warns when it
        // finds none).
        .config(&Config::default())
        // The bench owns its signals; a node must not take SIGINT/SIGTERM from it.
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .map_err(|e| anyhow!("iceoryx2: {side} node: {e}"))
}

/// Creates (`create`) or opens the publish-subscribe service `name` of 64-byte, 64-byte-aligned payloads.
fn service(node: &Node<ipc::Service>, name: &str, create: bool) -> anyhow::Result<PubSub<ipc::Service, Payload, ()>> {
    let service_name = ServiceName::new(name).map_err(|e| anyhow!("iceoryx2: service name {name}: {e:?}"))?;
    let alignment = Alignment::new(MESSAGE_BYTES).ok_or_else(|| anyhow!("iceoryx2: alignment {MESSAGE_BYTES}"))?;
    let builder = node
        .service_builder(&service_name)
        .publish_subscribe::<Payload>()
        .payload_alignment(alignment)
        .max_publishers(1)
        .max_subscribers(1)
        .history_size(0);
    if create {
        builder.create().map_err(|e| anyhow!("iceoryx2: create service {name}: {e}"))
    } else {
        builder.open().map_err(|e| anyhow!("iceoryx2: open service {name}: {e}"))
    }
}

type Ports = (Publisher<ipc::Service, Payload, ()>, Subscriber<ipc::Service, Payload, ()>);

fn ports(
    side: &str,
    publish_to: &PubSub<ipc::Service, Payload, ()>,
    publish_name: &str,
    subscribe_to: &PubSub<ipc::Service, Payload, ()>,
    subscribe_name: &str,
) -> anyhow::Result<Ports> {
    let publisher = publish_to
        .publisher_builder()
        .create()
        .map_err(|e| anyhow!("iceoryx2: {side}: publisher on {publish_name}: {e}"))?;
    let subscriber = subscribe_to
        .subscriber_builder()
        .create()
        .map_err(|e| anyhow!("iceoryx2: {side}: subscriber on {subscribe_name}: {e}"))?;
    Ok((publisher, subscriber))
}

/// Loans a sample, writes `msg`, sends it. A send that reached no subscriber (not connected yet) is repeated.
#[inline]
fn send(
    publisher: &Publisher<ipc::Service, Payload, ()>,
    msg: &Payload,
    wait: &mut Wait,
    side: &str,
) -> anyhow::Result<()> {
    wait.reset();
    loop {
        let sample = publisher.loan_uninit().map_err(|e| anyhow!("iceoryx2: {side}: loan: {e}"))?;
        let delivered = sample.write_payload(*msg).send().map_err(|e| anyhow!("iceoryx2: {side}: send: {e}"))?;
        if delivered > 0 {
            return Ok(());
        }
        wait.idle(SETUP_TIMEOUT, &|| format!("{side}: no subscriber connected"))?;
    }
}

fn seq_of(buf: &Payload) -> u64 {
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&buf[..8]);
    u64::from_le_bytes(seq)
}

/// The measuring side: sends `seq` in the first 8 bytes, waits for the same `seq` back.
#[allow(clippy::too_many_arguments)]
fn ping(
    ping_service: &PubSub<ipc::Service, Payload, ()>,
    pong_service: &PubSub<ipc::Service, Payload, ()>,
    ping_name: &str,
    pong_name: &str,
    core: Option<usize>,
    warmup: u64,
    total: u64,
    stop: &AtomicBool,
) -> anyhow::Result<Histogram<u64>> {
    let (publisher, subscriber) = ports("ping", ping_service, ping_name, pong_service, pong_name)?;
    crate::pin(core);
    let mut wait = Wait::new("iceoryx2", stop);
    // Pong's ports are up: its subscriber on our service and its publisher on its own.
    while ping_service.dynamic_config().number_of_subscribers() == 0
        || pong_service.dynamic_config().number_of_publishers() == 0
    {
        wait.idle(SETUP_TIMEOUT, &|| "ping: waiting for pong's ports".into())?;
    }
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    let mut msg = [0u8; MESSAGE_BYTES];
    for seq in 1..=total {
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        let t0 = clock.raw();
        send(&publisher, &msg, &mut wait, "ping")?;
        wait.reset();
        let reply = loop {
            match subscriber.receive() {
                Ok(Some(sample)) => break seq_of(sample.payload()),
                Ok(None) => wait.idle(REPLY_TIMEOUT, &|| format!("ping: reply to message {seq}"))?,
                Err(e) => bail!("iceoryx2: ping: receive: {e}"),
            }
        };
        let rtt = clock.delta_as_nanos(t0, clock.raw());
        if reply != seq {
            bail!("iceoryx2: ping: message {seq} answered by a reply to message {reply}");
        }
        if seq > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    Ok(hist)
}

/// The echoing side: its own node; replies to each sample with the same 64 bytes.
fn pong(ping_name: &str, pong_name: &str, core: Option<usize>, total: u64, stop: &AtomicBool) -> anyhow::Result<()> {
    let node = node("pong")?;
    let ping_service = service(&node, ping_name, false)?;
    let pong_service = service(&node, pong_name, false)?;
    let (publisher, subscriber) = ports("pong", &pong_service, pong_name, &ping_service, ping_name)?;
    crate::pin(core);
    let (mut wait, mut send_wait) = (Wait::new("iceoryx2", stop), Wait::new("iceoryx2", stop));
    let mut echoed = 0u64;
    while echoed < total {
        match subscriber.receive() {
            Ok(Some(sample)) => {
                let msg = *sample.payload();
                drop(sample); // back to the publisher before we answer
                send(&publisher, &msg, &mut send_wait, "pong")?;
                echoed += 1;
                wait.reset();
            }
            Ok(None) => {
                // The first message may take the whole setup of the ping side.
                let timeout = if echoed == 0 { SETUP_TIMEOUT } else { REPLY_TIMEOUT };
                wait.idle(timeout, &|| format!("pong: message {}", echoed + 1))?;
            }
            Err(e) => bail!("iceoryx2: pong: receive: {e}"),
        }
    }
    // Keep the publisher until ping has read the last reply.
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iceoryx2_pubsub_pingpong_records_every_message() {
        crate::pingpong::check_peer_pingpong(pingpong);
        let (ping_name, pong_name) = service_names(RUNS.load(Ordering::Relaxed) - 1);
        for name in [ping_name, pong_name] {
            let service_name = ServiceName::new(&name).expect("a valid name");
            let exists =
                ipc::Service::does_exist(&service_name, &Config::default(), MessagingPattern::PublishSubscribe);
            assert!(matches!(exists, Ok(false)), "service {name} after the run: {exists:?}");
        }
    }
}
