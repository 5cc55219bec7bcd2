//! Peer baseline: Aeron IPC (`aeron:ipc`, Aeron C 1.54 through rusteron 0.2.16) between two pinned threads, the
//! same ping-pong as the cache-line baseline: one 64-byte message out on one stream, the same bytes back on a
//! second, one-way = round trip / 2.
//!
//! Each run starts its own embedded media driver in `/dev/shm/mdfan-bench-aeron-<pid>-<n>` and deletes that
//! folder afterwards. Each thread has its own Aeron client (the wrappers are not `Send`), created before the
//! thread pins itself, so the client's conductor thread gets the mask the thread had at that moment, not the
//! hot core. A caller that has already pinned its own thread passes that pin on to the driver and both client
//! conductors: call [`pingpong`] from a thread that is not pinned.
//!
//! The driver runs in `SHARED` threading mode: one agent thread does the conductor, sender, receiver and
//! native-resource work (`DEDICATED` would start four threads, three of them idle for IPC). Its idle strategy
//! sleeps [`DRIVER_IDLE_SLEEP`] between empty duty cycles (Aeron's default, backoff, ends at a 1 ms park), so on a
//! 2-core machine where both cores spin it preempts a hot thread about 100 times a second instead of about 1,000;
//! the client conductors sleep Aeron's default 16 ms. On the IPC data path nothing waits for the driver: the
//! subscriber reads the publication's log buffer directly. The driver only moves the publication limit forward,
//! and [`IPC_TERM_BYTES`] sizes the window so the publisher never reaches the limit within one sleep (a
//! publication that does is counted and reported on stderr).
//!
//! Measured here (19 interleaved runs of 5 x 20,000 round trips, one-way p99.9 as a multiple of the cache-line
//! p99.9 of the same run, median): SHARED + `sleep-ns` 10 ms 1.4x, SHARED + backoff 9.7x, DEDICATED + backoff
//! 12x; p50 was 3.0x in all three.
//!
//! Against Aeron's own C samples ([`crate::aeron_c`], `baseline.aeron_c`: cping/cpong through aeronmd, the same
//! driver configuration, the same cores, interleaved in every round), measured 2026-11-30 on the shared 2-core
//! AMD EPYC host, 5 rounds of 20,000 round trips per run, one-way p50 of this harness over cping/cpong's p50 in
//! the same run (absolute figures move from minute to minute here, with the cores' placement: the cache line's
//! p50 was 40 to 45 ns in some runs, 155 to 165 ns in others):
//!
//! - sending with `try_claim_owned`, copy, `commit` (this harness until then): 1.37x (130 against 95 ns, cache
//!   line 40 ns), 1.72x, 1.63x; in a run under a load average of 12, 1.51x (370 against 245 ns);
//! - sending with `offer`, as cping does, all else unchanged: 1.13x, 0.79x (95 against 120 ns, cache line
//!   45 ns), 1.11x, the runs alternating with the three above.
//!
//! So the claim path through rusteron (a buffer-claim wrapper, claim, then commit) made most of the difference,
//! and this harness offers now. What it is not, measured with the C samples alone (5 interleaved runs of each
//! variant, 20,000 round trips, pooled): where the client conductors run: with every process pinned whole by
//! `taskset` (conductors on the hot cores, as `baseline.aeron_c` runs) and with only cping's and cpong's main
//! threads pinned (conductors and driver free, as this harness pins) p50 was 95 ns both, p99 140 and 135 ns; nor
//! the warm-up (2,000 or 300,000 round trips: p50 95 ns both). The clock works the other way: cping stamps with
//! `clock_gettime` (vDSO) where this harness reads the TSC (about 10 ns). What remains is noise of the same size
//! as the difference (0.79x to 1.13x) and the poll: this harness polls the subscription with a closure, cping
//! polls the image directly. At p99.9 either may be the better one from run to run (the C driver shares core A
//! with cping, this harness's driver thread is not pinned). The targets use the better of the two at each
//! percentile (`baseline.aeron_best`).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::spin::Wait;

use anyhow::{anyhow, bail};
use hdrhistogram::Histogram;
use rusteron_client::{Aeron, AeronContext, AeronExclusivePublication, AeronOfferError, AeronSubscription, Handlers};
use rusteron_media_driver::bindings::aeron_threading_mode_enum;
use rusteron_media_driver::{AeronDriver, AeronDriverContext};

/// The one channel both streams use: the driver's shared-memory transport within one host.
const CHANNEL: &std::ffi::CStr = c"aeron:ipc";
/// Ping -> pong.
const PING_STREAM_ID: i32 = 1001;
/// Pong -> ping.
const PONG_STREAM_ID: i32 = 1002;
/// Payload of each message: one cache line, the size of a record.
const MESSAGE_BYTES: usize = 64;
/// Fragments one `poll` may deliver; ping-pong has one message in flight, the rest is slack.
const FRAGMENT_LIMIT: usize = 10;
/// Driver idle sleep between empty duty cycles (Aeron's `sleep-ns` strategy).
const DRIVER_IDLE_SLEEP: &std::ffi::CStr = c"10ms";
/// IPC term length: 3 terms of 32 MiB per publication, pre-touched (192 MiB per run in /dev/shm). The publisher
/// may run half a term ahead of the subscriber between two driver duty cycles: 16 MiB is about 175,000 messages
/// of 96 bytes framed, over 10 ms even at a 55 ns one-way latency.
const IPC_TERM_BYTES: usize = 32 << 20;
/// Longest wait for the driver, a client, a publication or a subscription to come up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one reply (host stalls here reach a few ms; this only catches a dead peer).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// One-way latency by Aeron IPC ping-pong (ns): `warmup` round trips, then `count` recorded ones.
///
/// # Errors
/// The media driver or a client could not start (the error names the aeron dir), a publication or subscription
/// could not be added (names the side and stream), a publication closed, or a peer stopped answering for
/// [`REPLY_TIMEOUT`].
pub fn pingpong(
    a_core: Option<usize>,
    b_core: Option<usize>,
    warmup: u64,
    count: u64,
) -> anyhow::Result<Histogram<u64>> {
    let driver = Driver::launch()?;
    let dir = driver.dir_c()?;
    let total = warmup + count;
    // Set by ping when it is done or gives up (also on unwind), so pong never spins on after it.
    let stop = Arc::new(AtomicBool::new(false));
    let pong = {
        let (dir, stop) = (dir.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("aeron-pong".into())
            .spawn(move || {
                let result = pong(&dir, b_core, total, &stop);
                if result.is_err() {
                    stop.store(true, Ordering::Release);
                }
                result
            })
            .map_err(|e| anyhow!("aeron: cannot start the pong thread: {e}"))?
    };
    let ping = {
        let _stop_on_exit = StopOnDrop(&stop);
        ping(&dir, a_core, warmup, total, &stop)
    };
    let pong = pong.join().unwrap_or_else(|_| Err(anyhow!("aeron: the pong thread panicked")));
    drop(driver);
    match (ping, pong) {
        (Ok(h), Ok(())) => Ok(h),
        (Ok(_), Err(e)) | (Err(e), Ok(())) => Err(e),
        // A pong failure is usually why ping gave up: name it first.
        (Err(ping), Err(pong)) => Err(anyhow!("{pong:#}; then ping: {ping:#}")),
    }
}

/// An embedded media driver in its own folder under /dev/shm; stopped and the folder deleted on drop.
struct Driver {
    driver: Option<AeronDriver>,
    dir: PathBuf,
}

impl Driver {
    fn launch() -> anyhow::Result<Driver> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(format!("/dev/shm/mdfan-bench-aeron-{}-{n}", std::process::id()));
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            anyhow!("aeron: media driver start in {}: {what}: {e}", dir.display())
        };
        let dir_c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| fail("dir name", &e))?;
        let ctx = AeronDriverContext::new().map_err(|e| fail("context", &e))?;
        ctx.set_dir(&dir_c).map_err(|e| fail("dir", &e))?;
        ctx.set_dir_delete_on_start(true).map_err(|e| fail("delete on start", &e))?;
        ctx.set_dir_delete_on_shutdown(true).map_err(|e| fail("delete on shutdown", &e))?;
        ctx.set_threading_mode(aeron_threading_mode_enum::AERON_THREADING_MODE_SHARED)
            .map_err(|e| fail("threading mode SHARED", &e))?;
        // Init args first: setting the strategy loads it with the args set at that moment.
        ctx.set_shared_idle_strategy_init_args(DRIVER_IDLE_SLEEP).map_err(|e| fail("idle strategy args", &e))?;
        ctx.set_shared_idle_strategy(c"sleep-ns").map_err(|e| fail("idle strategy sleep-ns", &e))?;
        ctx.set_ipc_term_buffer_length(IPC_TERM_BYTES).map_err(|e| fail("ipc term length", &e))?;
        // Whole files up front; the clients pre-touch them, so no page fault lands on the measured path.
        ctx.set_term_buffer_sparse_file(false).map_err(|e| fail("sparse files off", &e))?;
        let driver = AeronDriver::new(&ctx).map_err(|e| fail("init", &e))?;
        // From here on, dropping `this` closes the driver and removes the folder.
        let this = Driver { driver: Some(driver), dir: dir.clone() };
        if let Some(d) = &this.driver {
            // `false`: Aeron runs the shared agent on a thread of its own.
            d.start(false).map_err(|e| fail("start", &e))?;
        }
        Ok(this)
    }

    fn dir_c(&self) -> anyhow::Result<CString> {
        CString::new(self.dir.as_os_str().as_encoded_bytes())
            .map_err(|e| anyhow!("aeron: dir {}: {e}", self.dir.display()))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // aeron_driver_close: stops and joins the agent thread, then deletes the dir (delete on shutdown).
        drop(self.driver.take());
        remove_dir(&self.dir);
    }
}

/// Removes what the driver left of `dir`; a failure is said, not hidden.
fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => eprintln!("mdfan-bench: warning: aeron: cannot remove {}: {e}", dir.display()),
    }
}

/// Sets the flag when dropped: ping's exit, normal or by unwinding, releases pong.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A started client of the driver in `dir`, for the calling thread only.
fn client(dir: &CString, side: &str) -> anyhow::Result<Aeron> {
    let shown = dir.to_string_lossy();
    let fail = |what: &str, e: &dyn std::fmt::Display| anyhow!("aeron: {side} client in {shown}: {what}: {e}");
    let ctx = AeronContext::new().map_err(|e| fail("context", &e))?;
    ctx.set_dir(dir).map_err(|e| fail("dir", &e))?;
    ctx.set_pre_touch_mapped_memory(true).map_err(|e| fail("pre-touch", &e))?;
    let side_owned = side.to_owned();
    // Called on the client's conductor thread, off the measured path.
    ctx.set_error_handler(Some(move |code: i32, msg: &str| {
        eprintln!("mdfan-bench: aeron: {side_owned} client error {code}: {msg}");
    }))
    .map_err(|e| fail("error handler", &e))?;
    let aeron = Aeron::new(&ctx).map_err(|e| fail("init", &e))?;
    aeron.start().map_err(|e| fail("start", &e))?;
    Ok(aeron)
}

/// The thread's publication on `publish_to` and subscription on `subscribe_to`.
fn ports(
    aeron: &Aeron,
    side: &str,
    publish_to: i32,
    subscribe_to: i32,
) -> anyhow::Result<(AeronExclusivePublication, AeronSubscription)> {
    let publication = aeron
        .async_add_exclusive_publication(CHANNEL, publish_to)
        .and_then(|a| a.poll_blocking(SETUP_TIMEOUT))
        .map_err(|e| anyhow!("aeron: {side}: publication on stream {publish_to}: {e}"))?;
    let subscription = aeron
        .async_add_subscription(CHANNEL, subscribe_to, Handlers::NONE, Handlers::NONE)
        .and_then(|a| a.poll_blocking(SETUP_TIMEOUT))
        .map_err(|e| anyhow!("aeron: {side}: subscription on stream {subscribe_to}: {e}"))?;
    Ok((publication, subscription))
}

/// Offers `msg`: Aeron copies the 64 bytes into the log buffer behind a frame header and publishes them, as
/// cping and cpong do (`aeron_exclusive_publication_offer`); spins while the publication is back-pressured or not
/// yet connected. Returns whether it had to wait for the limit (back pressure). Not `try_claim_owned` + commit:
/// through rusteron that path cost this harness 1.4x to 1.7x cping's p50 (see the module docs).
#[inline]
fn send(
    publication: &AeronExclusivePublication,
    msg: &[u8; MESSAGE_BYTES],
    wait: &mut Wait,
    side: &str,
) -> anyhow::Result<bool> {
    let mut back_pressured = false;
    wait.reset();
    loop {
        match publication.offer(msg) {
            Ok(_) => return Ok(back_pressured),
            Err(e) if e.is_retryable() => {
                back_pressured |= matches!(e, AeronOfferError::BackPressured);
                wait.idle(SETUP_TIMEOUT, &|| format!("{side}: offer ({e})"))?;
            }
            Err(e) => bail!("aeron: {side}: offer: {e}"),
        }
    }
}

fn seq_of(buf: &[u8]) -> u64 {
    buf.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The measuring side: sends `seq` in the first 8 bytes, waits for the same `seq` back.
fn ping(
    dir: &CString,
    core: Option<usize>,
    warmup: u64,
    total: u64,
    stop: &AtomicBool,
) -> anyhow::Result<Histogram<u64>> {
    let aeron = client(dir, "ping")?;
    let (publication, subscription) = ports(&aeron, "ping", PING_STREAM_ID, PONG_STREAM_ID)?;
    crate::pin(core);
    let mut wait = Wait::new("aeron", stop);
    // Both directions up: pong subscribes to our stream, and its publication has reached our subscription.
    while !(publication.is_connected() && subscription.is_connected()) {
        wait.idle(SETUP_TIMEOUT, &|| "ping: waiting for pong to connect".into())?;
    }
    let clock = quanta::Clock::new();
    let mut hist = crate::new_histogram();
    let mut msg = [0u8; MESSAGE_BYTES];
    let (mut replies, mut last_seq, mut back_pressured) = (0u64, 0u64, 0u64);
    for seq in 1..=total {
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        let t0 = clock.raw();
        back_pressured += send(&publication, &msg, &mut wait, "ping")? as u64;
        wait.reset();
        // One poll may hand over more than one message: count messages, not polls.
        while replies < seq {
            let n = subscription
                .poll_fn(
                    |buf, _header| {
                        replies += 1;
                        last_seq = seq_of(buf);
                    },
                    FRAGMENT_LIMIT,
                )
                .map_err(|e| anyhow!("aeron: ping: poll: {e}"))?;
            if n == 0 {
                wait.idle(REPLY_TIMEOUT, &|| format!("ping: reply to message {seq}"))?;
            }
        }
        let rtt = clock.delta_as_nanos(t0, clock.raw());
        if replies != seq || last_seq != seq {
            bail!("aeron: ping: after message {seq} came {replies} replies, the last one for message {last_seq}");
        }
        if seq > warmup {
            hist.saturating_record((rtt / 2).max(1));
        }
    }
    if back_pressured > 0 {
        eprintln!("mdfan-bench: warning: aeron: {back_pressured} pings waited for the publication limit");
    }
    Ok(hist)
}

/// The echoing side: replies to each message from inside the fragment handler with the same 64 bytes.
fn pong(dir: &CString, core: Option<usize>, total: u64, stop: &AtomicBool) -> anyhow::Result<()> {
    let aeron = client(dir, "pong")?;
    let (publication, subscription) = ports(&aeron, "pong", PONG_STREAM_ID, PING_STREAM_ID)?;
    crate::pin(core);
    let mut wait = Wait::new("aeron", stop);
    let mut send_wait = Wait::new("aeron", stop);
    let mut echoed = 0u64;
    let mut failure = None;
    let mut msg = [0u8; MESSAGE_BYTES];
    while echoed < total {
        let n = subscription
            .poll_fn(
                |buf, _header| {
                    if failure.is_some() {
                        return;
                    }
                    let len = buf.len().min(MESSAGE_BYTES);
                    msg[..len].copy_from_slice(&buf[..len]);
                    match send(&publication, &msg, &mut send_wait, "pong") {
                        Ok(_) => echoed += 1,
                        Err(e) => failure = Some(e),
                    }
                },
                FRAGMENT_LIMIT,
            )
            .map_err(|e| anyhow!("aeron: pong: poll: {e}"))?;
        if let Some(e) = failure.take() {
            return Err(e);
        }
        if n == 0 {
            // The first message may take the whole setup of the ping side.
            let timeout = if echoed == 0 { SETUP_TIMEOUT } else { REPLY_TIMEOUT };
            wait.idle(timeout, &|| format!("pong: message {}", echoed + 1))?;
        } else {
            wait.reset();
        }
    }
    // Keep the publication until ping has read the last reply.
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeron_ipc_pingpong_records_every_message() {
        crate::pingpong::check_peer_pingpong(pingpong);
        let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
            .expect("/dev/shm")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("mdfan-bench-aeron-{}-", std::process::id())))
            .collect();
        assert!(leftovers.is_empty(), "aeron dirs left behind: {leftovers:?}");
    }
}
