//! Open-loop load through mdfan's per-record path: normalize a feed record, then WRITE-with-immediate it into
//! every subscriber's ring; one pinned receiver thread busy-polls all the rings and reads each record in place.
//!
//! The sender does the publisher hot loop's per-record work (`feed::dbn::normalize_mbo`, a ring-space
//! check and one post per subscriber) at a fixed rate, on a schedule fixed before the run: record `i` is due
//! at `start + i / rate`. Each record carries its due time (in `ts_recv_ns`, which this bench owns) and its
//! post time (`ts_send_ticks`), so the receiver measures both the fabric alone (post to poll) and the
//! end-to-end latency from the due time, which counts the time a record waited behind a late sender or a full
//! ring (coordinated omission corrected, as wrk2 does). At rate `max` every record is due when the previous
//! one was posted.
//!
//! Histograms (ns): `decode_to_post` (start of normalization to the post into each ring, so the last ring's
//! figure includes the posts before it), `post_to_poll`, `end_to_end`, and `cycle` (the sender's work for one
//! record: normalization plus every post, excluding the wait for its due time).

use std::path::Path;
use std::sync::{Arc, Barrier};

use hdrhistogram::Histogram;
use mdfan_fabric::{LocalRing, RemoteRing};
use mdfan_feed::dbn::normalize_mbo;
use mdfan_wire::ring::{has_space, imm_from_seq, slot_index};
use mdfan_wire::{BookUpdate, Kind};

/// Where records come from.
#[derive(Clone)]
pub enum Source {
    /// The bundled capture's MBO records, normalized one by one as sent (cycled when the run is longer).
    Replay(Arc<[dbn::MboMsg]>),
    /// Made-up Add/Modify/Cancel records of one instrument (no normalization cost).
    Synthetic,
}

impl Source {
    pub fn name(&self) -> &'static str {
        match self {
            Source::Replay(_) => "replay",
            Source::Synthetic => "synthetic",
        }
    }

    #[inline]
    fn record(&self, i: u64) -> BookUpdate {
        match self {
            Source::Replay(msgs) => {
                // Every record of the bundled file normalizes (checked at load); a failure is a bench bug.
                normalize_mbo(&msgs[(i % msgs.len() as u64) as usize]).unwrap_or(BookUpdate::control(Kind::Heartbeat))
            }
            Source::Synthetic => {
                let kind = [Kind::Add, Kind::Modify, Kind::Cancel][(i % 3) as usize];
                BookUpdate {
                    order_id: i / 3 + 1,
                    price_e9: 4_800_000_000_000 + (i % 16) as i64 * 250_000_000,
                    size: 1 + (i % 7) as u32,
                    instrument_id: 17077,
                    ..BookUpdate::control(kind)
                }
            }
        }
    }
}

/// One open-loop run.
pub struct Spec {
    pub subscribers: usize,
    /// Records per second; `None`: as fast as the rings take them.
    pub rate_per_s: Option<u64>,
    pub warmup: u64,
    pub count: u64,
    pub source: Source,
    pub ring_slots: u32,
}

/// What a run measured (ns).
pub struct Measured {
    pub decode_to_post: Histogram<u64>,
    pub post_to_poll: Histogram<u64>,
    pub end_to_end: Histogram<u64>,
    pub cycle: Histogram<u64>,
    /// Posts that found their ring full at their due time (they waited; counted in end_to_end).
    pub late_posts: u64,
    /// Measured records (per subscriber) over the measured part's wall time.
    pub rate_per_s: f64,
    /// The sender's busy time (sum of `cycle`) per record per subscriber, ns.
    pub sender_ns_per_record_per_sub: f64,
}

fn ticks_per_s(clock: &quanta::Clock) -> f64 {
    let t0 = clock.raw();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t1 = clock.raw();
    (t1 - t0) as f64 * 1e9 / clock.delta_as_nanos(t0, t1).max(1) as f64
}

/// Runs `spec` from `tx_core` (sender) to `rx_core` (the receiver polling every ring).
pub fn run(dir: &Path, tx_core: Option<usize>, rx_core: Option<usize>, spec: &Spec) -> anyhow::Result<Measured> {
    let slots = spec.ring_slots;
    let mut locals = Vec::with_capacity(spec.subscribers);
    let mut remotes = Vec::with_capacity(spec.subscribers);
    for _ in 0..spec.subscribers.max(1) {
        let (local, remote) = crate::shm::ring(dir, slots)?;
        locals.push(local);
        remotes.push(remote);
    }
    let total = spec.warmup + spec.count;
    let warmup = spec.warmup;
    let start = Arc::new(Barrier::new(2));
    let receiver = {
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            crate::pin(rx_core);
            let clock = quanta::Clock::new();
            let (mut post, mut e2e) = (crate::new_histogram(), crate::new_histogram());
            let mut next = vec![1u64; locals.len()];
            let mut done = 0;
            let (mut first, mut last) = (0u64, 0u64);
            start.wait();
            while done < locals.len() {
                for (k, local) in locals.iter_mut().enumerate() {
                    if next[k] > total {
                        continue;
                    }
                    let Some(c) = local.poll_cq_expecting(next[k]) else {
                        continue;
                    };
                    let now = clock.raw();
                    // in order, never lapped: every completion hands out its record
                    let r = *c.record().expect("a bench ring's completion has its record");
                    local.release(r.seq);
                    if r.seq > warmup {
                        if first == 0 {
                            first = now;
                        }
                        last = now;
                        post.saturating_record(clock.delta_as_nanos(0, r.ticks_since_send(now)).max(1));
                        e2e.saturating_record(clock.delta_as_nanos(r.ts_recv_ns, now).max(1));
                    }
                    next[k] = r.seq + 1;
                    if next[k] > total {
                        done += 1;
                    }
                }
                std::hint::spin_loop();
            }
            (post, e2e, clock.delta_as_nanos(first, last))
        })
    };
    crate::pin(tx_core);
    let clock = quanta::Clock::new();
    let interval_ticks = spec.rate_per_s.map(|r| ticks_per_s(&clock) / r.max(1) as f64);
    let (mut decode_to_post, mut cycle) = (crate::new_histogram(), crate::new_histogram());
    let mut consumed = vec![0u64; remotes.len()];
    let mut late_posts = 0;
    let mut busy_ticks = 0u64;
    start.wait();
    let t_start = clock.raw();
    let mut due = t_start;
    for seq in 1..=total {
        if let Some(interval) = interval_ticks {
            due = t_start + ((seq - 1) as f64 * interval) as u64;
            while clock.raw() < due {
                std::hint::spin_loop();
            }
        }
        let t0 = clock.raw();
        let mut r = spec.source.record(seq);
        r.seq = seq;
        r.ts_recv_ns = due;
        for (k, remote) in remotes.iter_mut().enumerate() {
            let mut late = false;
            while !has_space(seq, consumed[k], slots) {
                consumed[k] = remote.consumed_seq();
                late = true;
                std::hint::spin_loop();
            }
            late_posts += late as u64;
            r.ts_send_ticks = clock.raw() as u32;
            // The slot is in range and the ring open for the whole run: a failure is a bench bug.
            remote.write_with_imm(slot_index(seq, slots), &r, imm_from_seq(seq)).expect("a benchmark ring post");
            if seq > warmup {
                decode_to_post.saturating_record(clock.delta_as_nanos(t0, clock.raw()).max(1));
            }
        }
        let t1 = clock.raw();
        if seq > warmup {
            cycle.saturating_record(clock.delta_as_nanos(t0, t1).max(1));
            busy_ticks += t1 - t0;
        }
        if interval_ticks.is_none() {
            due = t1;
        }
    }
    let (post_to_poll, end_to_end, span_ns) =
        receiver.join().map_err(|_| anyhow::anyhow!("open loop: receiver thread panicked"))?;
    let per = (spec.count.max(1) * remotes.len() as u64) as f64;
    Ok(Measured {
        decode_to_post,
        post_to_poll,
        end_to_end,
        cycle,
        late_posts,
        rate_per_s: if span_ns > 0 { spec.count.saturating_sub(1) as f64 * 1e9 / span_ns as f64 } else { 0.0 },
        sender_ns_per_record_per_sub: clock.delta_as_nanos(0, busy_ticks) as f64 / per,
    })
}
