//! The A/B arbiter (`mdfan_arbiter::Arbiter`, as the MDP 3.0 lines and the MoldUDP64 session use it) fed random
//! datagram sequences on lines A, B and a recovery source, with random clock ticks, flushes and give-ups. The
//! first byte picks the rules (window 4 to 32, N = `confirm_copies` 1 or 3, line tolerance 0 to 3, coalesced or
//! per-run gap reports, held suspects joining when reached); then each 3 bytes are one step: an op byte and a
//! 16-bit value (a position near the stream, an absolute one, a far jump, one near `u64::MAX`; or a tick).
//! Nothing may panic. Invariants: every position is delivered at most once, in increasing order; the events
//! cover the stream without a hole: each `Data` or `Gap` starts right after the last position the one before it
//! ended (every missing position is reported), a `Reset` starting the stream again at its position; a delivered
//! unit carries its own bytes; every copy offered is accounted for once in the counters (or is waiting or held).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_arbiter::{Arbiter, ArbiterConfig, Event, GapReports, Line, LineCopy};

fuzz_target!(|data: &[u8]| {
    let Some((&rules, steps)) = data.split_first() else { return };
    let cfg = ArbiterConfig {
        window: 4 << (rules & 3),
        slot_bytes: 8,
        held_bytes: 8,
        gap_reports: if rules & 0x40 == 0 { GapReports::Coalesced } else { GapReports::EachRun },
        line_tolerance: if rules & 0x20 == 0 { Some(u64::from((rules >> 2) & 3)) } else { None },
        gap_timeout_ns: Some(1_000),
        held_joins_when_reached: rules & 0x80 != 0,
        confirm_copies: if rules & 0x10 != 0 { 3 } else { 1 },
        resets: true,
    };
    let mut arb: Arbiter<u64, ()> = Arbiter::new(cfg);
    // One past the last position an event covered (None before the first event); `u64::MAX` delivered ends it.
    let (mut covered, mut at_end): (Option<u64>, bool) = (None, false);
    let mut check = |e: Event<'_, u64, ()>| {
        if let Event::Reset { first } = e {
            // A new stream: it starts at `first` or past it.
            covered = Some(first);
            at_end = false;
            return;
        }
        let (first, last) = match e {
            Event::Data(c) => {
                assert_eq!(c.bytes[..8], c.pos.to_le_bytes(), "unit {} carries another's bytes", c.pos);
                (c.pos, c.pos)
            }
            Event::Gap { first, last } => {
                assert!(first <= last, "gap {first}..={last}");
                (first, last)
            }
            Event::Reset { .. } => unreachable!(),
        };
        assert!(!at_end, "event {first}..={last} after the last position u64::MAX");
        if let Some(end) = covered {
            assert_eq!(
                first, end,
                "event {first}..={last} after the stream reached {end}: a position twice or unreported"
            );
        }
        covered = last.checked_add(1);
        at_end = covered.is_none();
    };
    let (mut cursor, mut now_ns, mut offered) = (100u64, 0u64, 0u64);
    for step in steps.chunks_exact(3) {
        let (op, v) = (step[0], u16::from_be_bytes([step[1], step[2]]));
        if op & 0xC0 == 0xC0 {
            match op & 3 {
                0 => {
                    now_ns += u64::from(v);
                    arb.tick(now_ns, &mut check);
                }
                1 => arb.flush(&mut check),
                2 => arb.give_up_to(cursor.saturating_add(u64::from(v % 64)), &mut check),
                _ => arb.start_at(u64::from(v)),
            }
            continue;
        }
        let pos = match (op >> 3) & 3 {
            0 => cursor.saturating_add(u64::from(v % 16)).saturating_sub(4),
            1 => u64::from(v),
            2 => cursor.saturating_add(u64::from(v) << 24),
            _ => u64::MAX - u64::from(v % 8),
        };
        if op & 0x18 != 0x08 {
            cursor = pos;
        }
        let line = match op & 3 {
            0 => Line::A,
            1 => Line::B,
            _ if op & 4 != 0 => Line::Recovery,
            _ => Line::A,
        };
        // A unit is its position's bytes (8), or 16 bytes (longer than a slot) now and then.
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&pos.to_le_bytes());
        let len = if op & 0x20 != 0 && op & 0x07 == 0x07 { 16 } else { 8 };
        offered += 1;
        arb.offer(LineCopy { pos, line, meta: (), bytes: &bytes[..len] }, now_ns, &mut check, |a, c, _, out| {
            a.place(c, out)
        });
        arb.settle(&mut check);
        arb.release_reached(&mut check, |a, c, _, out| a.place(c, out));
    }
    let c = *arb.counters();
    let out = c.delivered[0]
        + c.delivered[1]
        + c.recovery_delivered
        + c.duplicates
        + c.late
        + c.oversize
        + c.refused
        + c.jumps_dropped;
    assert_eq!(c.received[0] + c.received[1] + c.recovery_received, offered);
    assert_eq!(offered, out + arb.waiting() as u64 + arb.held() as u64, "a copy unaccounted for: {c:?}");
});
