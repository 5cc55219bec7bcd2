//! Market recovery allocates nothing after warm-up: `Mdp3Channel` taking feed A with 40 packets lost on both
//! lines, marking its securities stale, then decoding a loop of the snapshot feed (SnapshotFullRefresh38, as
//! `mdfan-feedsim` serves it) and applying it makes no heap allocation once the channel's table is reserved.
//! A counting global allocator, in a test binary of its own so no other test's allocations are counted.

use std::path::PathBuf;

use mdfan_feed::mdp3_channel::Mdp3Channel;
use mdfan_feed::pcap::read_udp_pcapng;
use mdfan_feedsim::snapshot::SnapshotState;
use mdfan_wire::{BookUpdate, MbpBooks};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::calls_during;

#[test]
fn losing_packets_and_recovering_from_snapshots_allocates_nothing() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap");
    let cap = read_udp_pcapng(&path).unwrap();
    let a: Vec<_> = cap.packets.iter().filter(|p| p.dst.port() == 14_320).collect();
    assert_eq!(a.len(), 5_000);
    // The snapshot feed's loop for the whole capture, encoded before counting (the simulator's side).
    let mut state = SnapshotState::default();
    for p in &a {
        state.publish(&p.payload).unwrap();
    }
    let mut loop_packets: Vec<Vec<u8>> = Vec::new();
    state
        .encode_loop(1, 0, |p| {
            loop_packets.push(p.to_vec());
            Ok::<(), ()>(())
        })
        .unwrap();
    let mut ch = Mdp3Channel::with_capacity(64);
    let mut books = MbpBooks::with_capacity(64);
    let mut errors = 0u64;
    let mut out = |r: &BookUpdate| errors += u64::from(books.apply(r).is_err());
    let (first, last) = (17_350_000u32, 17_350_039u32);
    let (calls, stale) = calls_during(|| {
        for p in &a {
            let seq = u32::from_le_bytes([p.payload[0], p.payload[1], p.payload[2], p.payload[3]]);
            if (first..=last).contains(&seq) {
                continue;
            }
            if seq == last + 1 {
                ch.on_lost_packets(first.into(), last.into(), p.ts_ns, &mut out);
            }
            ch.on_packet(&p.payload, p.ts_ns, &mut out);
        }
        let stale = ch.counters().stale_now;
        for p in &loop_packets {
            ch.on_snapshot_packet(p, 1, &mut out);
        }
        stale
    });
    assert_eq!(calls.allocations, 0, "heap allocations while losing and recovering");
    assert_eq!(errors, 0);
    let c = ch.counters();
    // 29 carried before the hole, 10 first seen after it (stale on sight); the loop covers all 39 and the hole.
    assert_eq!((stale, c.snapshots_applied, c.stale_now, c.snapshots), (39, 39, 0, 39));
    assert_eq!((c.stale_on_sight, c.holes_covered, ch.channel_hole()), (10, 1, None));
    assert!(books.iter().all(|b| !b.is_stale()));
}
