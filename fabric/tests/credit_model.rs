//! A model of credit write-back between a publisher session and a verbs subscriber, driven by the real decision
//! code of both sides: the subscriber's [`CreditWriter`] and the publisher's [`slot_is_free`].
//!
//! Time runs in steps. Each step the publisher offers one record (the live feed) under its slow-consumer policy,
//! then the subscriber (unless it is stopped) polls its CQ a few times. A credit is an RDMA WRITE that lands in the
//! publisher's credit word `delay` steps after it is posted and completes on the subscriber's CQ `delay` steps
//! after that; one is in flight at a time. The subscriber is stopped for a while at any point, with any ring size
//! and credit interval.
//!
//! What must hold:
//! - safety: no record is overwritten before the subscriber consumed it; seqs arrive in increasing order, and the
//!   subscriber sees a gap exactly when the publisher skipped;
//! - liveness (the issue this model was written for): once the subscriber runs again, within a bounded number of
//!   steps the publisher posts again, and a subscriber that lost records has seen the gap;
//! - convergence: once the feed stops, the publisher's view of the consumed seq equals what the subscriber
//!   consumed, within a bounded number of steps.

use std::collections::VecDeque;

use mdfan_fabric::credit::{CreditWriter, IDLE_CREDIT_POLLS};
use mdfan_wire::ring::{slot_index, slot_is_free};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Skip the record (its seq is used: the subscriber sees a gap).
    Resync,
    /// Wait until the slot frees (the feed does not advance meanwhile).
    Block,
}

#[derive(Debug, Clone)]
struct Params {
    slot_count: u32,
    credit_every: u64,
    policy: Policy,
    /// Step at which the subscriber is stopped, and for how many steps.
    stall_at: u64,
    stall_steps: u64,
    /// Steps for a credit to land, and again for its completion.
    delay: u64,
    /// Subscriber polls per step (it is at least as fast as the feed).
    polls_per_step: u32,
}

/// One credit write on the wire.
struct Credit {
    seq: u64,
    lands_at: u64,
    completes_at: u64,
    landed: bool,
}

struct Model {
    p: Params,
    // publisher
    next_seq: u64,
    last_written: u64,
    /// The consumed seq the publisher last read from its credit word.
    view: u64,
    credit_word: u64,
    skipped: u64,
    last_post_step: u64,
    // the ring: the seq in each slot
    slots: Vec<u64>,
    /// Completions delivered to the subscriber's CQ, in order.
    cq: VecDeque<u64>,
    // subscriber
    writer: CreditWriter,
    expected: u64,
    consumed: u64,
    gaps_seen: u64,
    first_gap_step: Option<u64>,
    in_flight: Option<Credit>,
}

impl Model {
    fn new(p: Params) -> Model {
        let slots = vec![0; p.slot_count as usize];
        let writer = CreditWriter::new(p.credit_every);
        Model {
            p,
            next_seq: 1,
            last_written: 0,
            view: 0,
            credit_word: 0,
            skipped: 0,
            last_post_step: 0,
            slots,
            cq: VecDeque::new(),
            writer,
            expected: 1,
            consumed: 0,
            gaps_seen: 0,
            first_gap_step: None,
            in_flight: None,
        }
    }

    fn stopped(&self, t: u64) -> bool {
        t >= self.p.stall_at && t < self.p.stall_at + self.p.stall_steps
    }

    /// `Session::has_space`: the cached view first, the credit word only when that says full.
    fn has_space(&mut self) -> bool {
        let n = self.p.slot_count;
        if slot_is_free(self.next_seq, self.view, self.last_written, n) {
            return true;
        }
        self.view = self.credit_word;
        slot_is_free(self.next_seq, self.view, self.last_written, n)
    }

    fn write(&mut self, t: u64) {
        let seq = self.next_seq;
        let slot = slot_index(seq, self.p.slot_count) as usize;
        assert!(
            self.slots[slot] <= self.consumed,
            "step {t}: seq {seq} overwrote unconsumed seq {} (consumed {})",
            self.slots[slot],
            self.consumed
        );
        self.slots[slot] = seq;
        self.cq.push_back(seq);
        self.last_written = seq;
        self.next_seq += 1;
        self.last_post_step = t;
    }

    /// The publisher offers one live record: written if its slot is free; otherwise skipped (its seq used) under
    /// `resync`, or offered again next step under `block`.
    fn publish(&mut self, t: u64) {
        if self.has_space() {
            self.write(t);
        } else if self.p.policy == Policy::Resync {
            self.next_seq += 1;
            self.skipped += 1;
        }
    }

    fn post_credit(&mut self, t: u64, seq: u64) {
        assert!(self.in_flight.is_none(), "step {t}: a second credit in flight");
        self.writer.posted(seq);
        self.in_flight =
            Some(Credit { seq, lands_at: t + self.p.delay, completes_at: t + 2 * self.p.delay, landed: false });
    }

    fn network(&mut self, t: u64) {
        if let Some(c) = &mut self.in_flight {
            if !c.landed && t >= c.lands_at {
                c.landed = true;
                self.credit_word = c.seq;
            }
        }
    }

    /// One poll of the subscriber's CQ (one `ibv_poll_cq`): a credit completion if one is due, and one record;
    /// an empty poll if neither.
    fn poll(&mut self, t: u64) {
        let mut completed = false;
        if self.in_flight.as_ref().is_some_and(|c| t >= c.completes_at) {
            self.in_flight = None;
            completed = true;
            if let Some(seq) = self.writer.on_complete() {
                self.post_credit(t, seq);
            }
        }
        let Some(seq) = self.cq.pop_front() else {
            if completed {
                return;
            }
            if let Some(seq) = self.writer.on_empty_poll() {
                self.post_credit(t, seq);
            }
            return;
        };
        assert!(seq >= self.expected, "step {t}: seq {seq} after {}", self.expected - 1);
        assert_eq!(self.slots[slot_index(seq, self.p.slot_count) as usize], seq, "step {t}: slot overwritten");
        if seq != self.expected {
            self.gaps_seen += 1;
            self.first_gap_step.get_or_insert(t);
        }
        self.expected = seq + 1;
        self.consumed = seq;
        self.writer.on_record();
        if let Some(seq) = self.writer.on_release(seq) {
            self.post_credit(t, seq);
        }
    }

    fn step(&mut self, t: u64, feeding: bool) {
        if feeding {
            self.publish(t);
        }
        self.network(t);
        if !self.stopped(t) {
            for _ in 0..self.p.polls_per_step {
                self.poll(t);
                self.network(t);
            }
        }
    }
}

/// Steps within which the stream must recover once the subscriber runs again, or converge once the feed stops:
/// draining a full ring, the idle polls before a partial credit goes out, and a few credit round trips.
fn bound(p: &Params) -> u64 {
    p.slot_count as u64 + IDLE_CREDIT_POLLS as u64 + 8 * p.delay + 64
}

fn run(p: Params) {
    let resume = p.stall_at + p.stall_steps;
    let recover_by = resume + bound(&p);
    let feed_end = recover_by + 1;
    let horizon = feed_end + bound(&p);
    let mut m = Model::new(p.clone());
    for t in 1..=horizon {
        m.step(t, t < feed_end);
        if t == recover_by {
            assert!(
                m.last_post_step > resume,
                "{p:?}: no post for {} steps after the subscriber resumed at step {resume} (last at {}): \
                 next_seq {} last_written {} publisher's consumed view {} subscriber consumed {} credit sent {}",
                recover_by - resume,
                m.last_post_step,
                m.next_seq,
                m.last_written,
                m.view,
                m.consumed,
                m.writer.sent()
            );
            if m.skipped > 0 {
                assert!(m.gaps_seen > 0, "{p:?}: {} records skipped and no gap seen by step {t}", m.skipped);
            }
        }
    }
    assert_eq!(m.consumed, m.last_written, "{p:?}: the subscriber read everything written");
    assert_eq!(
        m.credit_word,
        m.consumed,
        "{p:?}: {} steps after the feed stopped, the publisher's credit word still lags the subscriber",
        horizon - feed_end
    );
    assert_eq!(m.gaps_seen > 0, m.skipped > 0, "{p:?}: gaps seen {} skipped {}", m.gaps_seen, m.skipped);
    if p.policy == Policy::Block {
        assert_eq!(m.skipped, 0);
    }
}

fn params() -> impl Strategy<Value = Params> {
    (6u32..=12, 0u64..=3, prop::bool::ANY, 0u64..3000, 0u64..5000, 0u64..=4, 1u32..=3).prop_flat_map(
        |(log_slots, every_shape, resync, stall_at, stall_steps, delay, polls_per_step)| {
            let slot_count = 1u32 << log_slots;
            let max_every = (slot_count / 2) as u64;
            // the default (slot_count / 8), 1, the largest allowed, or anything in between
            let every = match every_shape {
                0 => Just((slot_count / 8) as u64).boxed(),
                1 => Just(1u64).boxed(),
                2 => Just(max_every).boxed(),
                _ => (1..=max_every).boxed(),
            };
            let policy = if resync { Policy::Resync } else { Policy::Block };
            every.prop_map(move |credit_every| Params {
                slot_count,
                credit_every,
                policy,
                stall_at,
                stall_steps,
                delay,
                polls_per_step,
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn credits_converge_and_a_stalled_stream_always_recovers(p in params()) {
        run(p);
    }
}

/// The run the issue reported, in model terms: a 1,024-slot ring under `resync`, credits every 128 records,
/// stopped mid-stream long enough to fill the ring several times over.
#[test]
fn a_stalled_resync_subscriber_on_a_1024_slot_ring_recovers() {
    for stall_at in [1, 500, 1000, 1021, 1024, 1500, 2047] {
        for credit_every in [1, 4, 16, 100, 128, 512] {
            run(Params {
                slot_count: 1024,
                credit_every,
                policy: Policy::Resync,
                stall_at,
                stall_steps: 4000,
                delay: 2,
                polls_per_step: 2,
            });
        }
    }
}
