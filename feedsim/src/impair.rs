//! The per-line impairment model: seeded loss, duplication and reordering.
//!
//! Deterministic: the same seed, line and packet count give the same plan. Every packet draws its three random
//! numbers (loss, duplicate, reorder) whatever the probabilities, so changing `--dup` or `--reorder` does not move
//! which packets `--loss` drops. Each line has its own stream (the seed mixed with the line), so the lines lose
//! packets independently.

use mdfan_lines::Line;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Impairment probabilities of one line, each a fraction in 0..=1 of that line's packets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Impairment {
    /// A packet is not sent.
    pub loss: f64,
    /// A sent packet is sent twice in a row.
    pub dup: f64,
    /// A sent packet is held back and sent right after the line's next sent packet.
    pub reorder: f64,
}

/// One datagram to send on a line: the index of the packet in the line's list and the capture time of the slot
/// it goes out in (a held-back packet goes out in its successor's slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Send {
    /// Index into the line's packet list.
    pub packet: usize,
    /// Capture timestamp that paces this send, ns.
    pub ts_ns: u64,
}

/// What the model decided for one line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinePlan {
    /// The datagrams to send, in order.
    pub sends: Vec<Send>,
    /// Packets lost at random (indices into the line's list).
    pub lost: Vec<usize>,
    /// Packets dropped because their seq is in the `--drop-seqs` range.
    pub dropped_by_seq: Vec<usize>,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Packets held back behind their successor.
    pub reordered: u64,
}

/// A mix of the seed and the line, so that each line has its own random stream.
fn line_seed(seed: u64, line: Line) -> u64 {
    // 2^64 / golden ratio, the usual odd constant for spreading consecutive values apart.
    seed ^ (line.index() as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A uniform draw in [0, 1) from the top 53 bits.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Plans one line: `ts_ns[i]` is the capture time of the line's packet `i`, `forced_drop(i)` says whether its
/// seq is in the range dropped on both lines.
pub fn plan_line(
    ts_ns: &[u64],
    imp: &Impairment,
    seed: u64,
    line: Line,
    forced_drop: impl Fn(usize) -> bool,
) -> LinePlan {
    let mut rng = ChaCha8Rng::seed_from_u64(line_seed(seed, line));
    let mut plan = LinePlan::default();
    let mut held: Option<usize> = None;
    for (i, &ts) in ts_ns.iter().enumerate() {
        let (u_loss, u_dup, u_reorder) = (unit(&mut rng), unit(&mut rng), unit(&mut rng));
        if forced_drop(i) {
            plan.dropped_by_seq.push(i);
            continue;
        }
        if u_loss < imp.loss {
            plan.lost.push(i);
            continue;
        }
        let copies = if u_dup < imp.dup { 2 } else { 1 };
        if copies == 2 {
            plan.duplicated += 1;
        }
        if held.is_none() && u_reorder < imp.reorder {
            plan.reordered += 1;
            held = Some(i);
            // Its copies go out after the next sent packet; remember the duplicate by pushing it then.
            if copies == 2 {
                plan.sends.push(Send { packet: i, ts_ns: ts });
            }
            continue;
        }
        for _ in 0..copies {
            plan.sends.push(Send { packet: i, ts_ns: ts });
        }
        if let Some(h) = held.take() {
            plan.sends.push(Send { packet: h, ts_ns: ts });
        }
    }
    if let Some(h) = held {
        plan.sends.push(Send { packet: h, ts_ns: ts_ns[h] });
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(p: &LinePlan) -> Vec<usize> {
        p.sends.iter().map(|s| s.packet).collect()
    }

    #[test]
    fn no_impairment_sends_everything_once_in_order() {
        let ts: Vec<u64> = (0..5).map(|i| i * 10).collect();
        let p = plan_line(&ts, &Impairment::default(), 1, Line::A, |_| false);
        assert_eq!(order(&p), vec![0, 1, 2, 3, 4]);
        assert_eq!(p.sends[3].ts_ns, 30);
    }

    #[test]
    fn same_seed_same_plan_and_lines_differ() {
        let ts = vec![0u64; 5_000];
        let imp = Impairment { loss: 0.02, dup: 0.01, reorder: 0.01 };
        let a1 = plan_line(&ts, &imp, 42, Line::A, |_| false);
        let a2 = plan_line(&ts, &imp, 42, Line::A, |_| false);
        let b = plan_line(&ts, &imp, 42, Line::B, |_| false);
        assert_eq!(a1, a2);
        assert_ne!(a1.lost, b.lost);
        // Loss does not depend on the other knobs.
        let a3 = plan_line(&ts, &Impairment { loss: 0.02, ..Default::default() }, 42, Line::A, |_| false);
        assert_eq!(a1.lost, a3.lost);
        // Every packet not lost is sent, duplicates twice.
        assert_eq!(a1.sends.len() as u64, 5_000 - a1.lost.len() as u64 + a1.duplicated);
    }

    #[test]
    fn reorder_swaps_with_the_next_and_forced_drops_win() {
        let ts: Vec<u64> = (0..4).map(|i| i * 10).collect();
        let p = plan_line(&ts, &Impairment { reorder: 1.0, ..Default::default() }, 7, Line::A, |i| i == 3);
        assert_eq!(order(&p), vec![1, 0, 2]);
        assert_eq!(p.sends[1].ts_ns, 10, "the held packet goes out in its successor's slot");
        assert_eq!(p.dropped_by_seq, vec![3]);
        assert_eq!(p.reordered, 2);
    }
}
