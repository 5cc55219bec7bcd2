//! The live CME feed's decode speed (issue 9, "Speed"), over line A of the bundled MDP 3.0 capture
//! (`data/cme-mdp3-sbe-v8-pcap-20160927/`, 5,000 packets), in memory, on one core:
//!
//! - `baseline.mdp3_walk`: the floor of any decoder: per packet, walk the messages by their `MsgSize` u16 fields
//!   (after the 12-byte packet header), summing them. Nothing is decoded.
//! - `mdfan.mdp3_decode`: [`Mdp3Channel::on_packet`] (validate, decode, sequence checks, normalise into 64-byte
//!   price-level records) with each record copied into a pre-allocated ring of 4,096 records, a stand-in for the
//!   publisher's journal (its slot copy, without the seqlock stamps and the readers).
//!
//! Both run the same packets the same number of passes, interleaved pass by pass, so the ratio
//! (`ratio.mdfan.mdp3_decode_vs_baseline.mdp3_walk.rate`, packets/s over packets/s; target >= 0.5) compares
//! them under the same load. `mdfan.mdp3_decode.packet`: the TSC (quanta) around each `on_packet`, ns, over
//! several passes: the packet-to-record latency. Each pass uses a new channel (made before it is timed): the
//! decoder refuses a `MsgSeqNum` it has passed, so a second pass through one channel would decode nothing.
//!
//! Also compiled into the criterion micro-benchmarks (`benches/benches/micro.rs`, group `mdp3`).

use std::hint::black_box;
use std::net::SocketAddrV4;
use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;
use mdfan_feed::mdp3::{MSG_SIZE_BYTES, PACKET_HEADER_BYTES};
use mdfan_feed::mdp3_channel::Mdp3Channel;
use mdfan_wire::BookUpdate;

/// The bundled MDP 3.0 capture (relative to the repository root).
pub const CAPTURE: &str = "data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap";
/// Line A's group in that capture.
pub const LINE_A: &str = "224.0.31.11:14320";
/// Line A's packets, messages and book records (the capture's README; `feed/tests/mdp3_capture.rs`).
pub const PACKETS: usize = 5_000;
/// Messages in line A's packets (every template).
pub const MESSAGES: u64 = 5_299;
/// Price-level records line A normalises into (no `RptSeq` gap, so no stale record).
pub const RECORDS: u64 = 5_848;
/// The stand-in journal's size, in records (a power of two).
const RING_RECORDS: usize = 4_096;
/// Securities the channel is sized for up front.
const INSTRUMENTS: usize = 64;

/// Line A's packets, `(receive time in ns, UDP payload)`, in capture order; the counts checked.
pub fn line_a(capture: &Path) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    let cap = mdfan_feed::pcap::read_udp_pcapng(capture)?;
    let a: SocketAddrV4 = LINE_A.parse().expect("a valid address");
    let packets: Vec<(u64, Vec<u8>)> =
        cap.packets.into_iter().filter(|p| p.dst == a).map(|p| (p.ts_ns, p.payload)).collect();
    anyhow::ensure!(
        packets.len() == PACKETS,
        "{}: {} packets on line A, not {PACKETS}",
        capture.display(),
        packets.len()
    );
    Ok(packets)
}

/// The baseline: per packet, the messages' `MsgSize` fields walked and summed. Returns (messages, bytes).
#[inline(never)]
pub fn walk(packets: &[(u64, Vec<u8>)]) -> (u64, u64) {
    let (mut messages, mut bytes) = (0u64, 0u64);
    for (_, p) in packets {
        let mut pos = PACKET_HEADER_BYTES;
        while pos + MSG_SIZE_BYTES <= p.len() {
            let size = u16::from_le_bytes([p[pos], p[pos + 1]]) as usize;
            if size < MSG_SIZE_BYTES {
                break;
            }
            messages += 1;
            bytes += size as u64;
            pos += size;
        }
    }
    (messages, bytes)
}

/// The stand-in journal of the decode benches (MDP 3.0 and ITCH): pre-allocated 64-byte records, written round
/// the ring.
pub struct Ring {
    slots: Vec<BookUpdate>,
    next: usize,
}

impl Default for Ring {
    fn default() -> Self {
        Ring { slots: vec![BookUpdate::control(mdfan_wire::Kind::Clear); RING_RECORDS], next: 0 }
    }
}

impl Ring {
    #[inline]
    pub(crate) fn push(&mut self, r: &BookUpdate) {
        self.slots[self.next & (RING_RECORDS - 1)] = *r;
        self.next += 1;
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.next as u64
    }
}

/// One pass of decode + normalise into `ring` through a fresh `channel`. Returns the records emitted.
#[inline(never)]
pub fn decode(channel: &mut Mdp3Channel, packets: &[(u64, Vec<u8>)], ring: &mut Ring) -> u64 {
    let mut n = 0u64;
    for (ts, p) in packets {
        n += channel.on_packet(p, *ts, &mut |r| ring.push(r)) as u64;
    }
    n
}

/// A fresh channel, checked to decode line A whole: used before timing.
pub fn channel() -> Mdp3Channel {
    Mdp3Channel::with_capacity(INSTRUMENTS)
}

/// What [`rates`] measured (medians over the passes).
pub struct Rates {
    pub walk_packets_per_s: f64,
    pub decode_packets_per_s: f64,
    pub decode_records_per_s: f64,
}

/// `passes` passes of each, interleaved; the median pass of each. Checks every pass's counts.
pub fn rates(packets: &[(u64, Vec<u8>)], passes: usize) -> anyhow::Result<Rates> {
    let mut ring = Ring::default();
    let (mut walk_s, mut decode_s) = (Vec::new(), Vec::new());
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let (messages, _) = black_box(walk(black_box(packets)));
        walk_s.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(messages == MESSAGES, "walk: {messages} messages, not {MESSAGES}");
        let mut ch = channel();
        let t = Instant::now();
        let records = decode(&mut ch, black_box(packets), &mut ring);
        decode_s.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(records == RECORDS, "decode: {records} records, not {RECORDS}");
        anyhow::ensure!(ch.counters().bad_packets == 0, "decode: {:?}", ch.last_error());
    }
    let passes = walk_s.len() as u64;
    anyhow::ensure!(ring.written() == RECORDS * passes, "ring: {} records written", ring.written());
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2].max(1e-12)
    };
    let (w, d) = (median(&mut walk_s), median(&mut decode_s));
    Ok(Rates {
        walk_packets_per_s: PACKETS as f64 / w,
        decode_packets_per_s: PACKETS as f64 / d,
        decode_records_per_s: RECORDS as f64 / d,
    })
}

/// Per-packet decode + normalise time (TSC around each `on_packet`, ns) over `passes` passes, a fresh channel
/// each (its first pass is a warm-up and not recorded).
pub fn packet_latency(packets: &[(u64, Vec<u8>)], passes: usize) -> anyhow::Result<Histogram<u64>> {
    let clock = quanta::Clock::new();
    let mut h = Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds are valid");
    let mut ring = Ring::default();
    for pass in 0..=passes.max(1) {
        let mut ch = channel();
        for (ts, p) in packets {
            let t0 = clock.raw();
            let n = ch.on_packet(p, *ts, &mut |r| ring.push(r));
            let t1 = clock.raw();
            black_box(n);
            if pass > 0 {
                h.saturating_record(clock.delta_as_nanos(t0, t1).max(1));
            }
        }
        anyhow::ensure!(ch.counters().level_records == RECORDS, "pass {pass}: {:?}", ch.counters());
    }
    Ok(h)
}
