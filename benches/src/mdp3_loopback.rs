//! Wire-to-poll on loopback, beside post-to-poll (issue 9, "Speed"): the bundled MDP 3.0 capture's line A sent
//! over loopback UDP to a real line socket (`SO_TIMESTAMPING`), decoded and normalised into an shm ring, and
//! polled by the subscriber library's `Receiver` with latency on. See [`loopback`].

use std::path::Path;

use hdrhistogram::Histogram;
use mdfan_wire::BookUpdate;

use crate::mdp3::{channel, PACKETS, RECORDS};

/// What [`loopback`] measured.
pub struct Loopback {
    /// Wire-to-poll: the datagram's `SO_TIMESTAMPING` stamp to the subscriber's poll (`CLOCK_REALTIME`), ns.
    pub wire_to_poll: Histogram<u64>,
    /// Post-to-poll: the TSC stamp at the ring write to the subscriber's poll, ns.
    pub post_to_poll: Histogram<u64>,
    /// Which stamp the line socket got (`software` on loopback).
    pub stamp: mdfan_lines::StampKind,
    /// Packets received (of those sent).
    pub packets: u64,
}

/// Line A sent `passes` times over loopback UDP (127.0.0.1, unicast) to a [`mdfan_lines::LineSocket`]; each
/// datagram decoded by a channel (a fresh one when `MsgSeqNum` goes back, i.e. each pass) with its receive stamp
/// as `ts_recv_ns`, each record stamped (seq, TSC) and written into an shm ring in this process; the subscriber
/// library's [`mdfan_subscriber::Receiver`], told the stamp's clock, polls it with latency on: wire-to-poll beside
/// post-to-poll. Receiver on `rx_core`, subscriber on `sub_core`, both spinning then yielding (the sender,
/// unpinned, needs a core too on a 2-core host); the sender waits 20 µs between packets (yielding), so the figures
/// are the path's and not a queue's: 50,000 packets/s, about 20x the capture's own peak rate. At most 5 passes.
pub fn loopback(
    packets: &[(u64, Vec<u8>)],
    passes: usize,
    shm_dir: &Path,
    rx_core: Option<usize>,
    sub_core: Option<usize>,
) -> anyhow::Result<Loopback> {
    use mdfan_fabric::shm::{ShmLocalRing, ShmRemoteRing};
    use mdfan_fabric::{CloseReason, RemoteRing};
    use mdfan_lines::{LineConfig, LineSocket, StampKind};
    use mdfan_subscriber::{Event, Receiver, TsRecvClock};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let passes = passes.clamp(1, 5);
    let total_records = RECORDS * passes as u64;
    let slots = (total_records + 1).next_power_of_two().max(1024) as u32; // never wraps: no flow control needed
    let (mut local, grant) = ShmLocalRing::create(shm_dir, slots)?;
    let mut remote = ShmRemoteRing::attach(&grant, shm_dir, Some(mdfan_fabric::shm::current_euid()))?;
    local.unlink();
    let mut line = LineSocket::open(&LineConfig::new("127.0.0.1:0".parse().expect("an address")))?;
    let dest = line.local_addr();
    let sent_all = AtomicBool::new(false);
    let stamp_seen = std::sync::atomic::AtomicU8::new(0);
    std::thread::scope(|sc| -> anyhow::Result<Loopback> {
        let sender = sc.spawn(|| -> anyhow::Result<()> {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
            let clock = quanta::Clock::new();
            for _ in 0..passes {
                for (_, p) in packets {
                    sock.send_to(p, dest)?;
                    let t = clock.raw();
                    while clock.delta_as_nanos(t, clock.raw()) < 20_000 {
                        std::thread::yield_now();
                    }
                }
            }
            sent_all.store(true, Ordering::Release);
            Ok(())
        });
        let receiver = sc.spawn(|| -> anyhow::Result<u64> {
            crate::pin(rx_core);
            let clock = quanta::Clock::new();
            let mut buf = vec![0u8; 64 * 1024];
            let mut ch = channel();
            let (mut last_seq, mut seq, mut received, mut idle) = (0u32, 0u64, 0u64, 0u32);
            let mut done_at: Option<std::time::Instant> = None;
            loop {
                match line.recv(&mut buf)? {
                    Some(got) => {
                        idle = 0;
                        received += 1;
                        let p = &buf[..got.len];
                        let msg_seq = p.get(..4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                        if msg_seq <= last_seq {
                            ch = channel(); // the next pass (off the measured path: the stamp is already taken)
                        }
                        last_seq = msg_seq;
                        let kind = match got.stamp {
                            StampKind::Hardware => 2,
                            StampKind::Software => 1,
                            _ => 3,
                        };
                        stamp_seen.store(kind, Ordering::Relaxed);
                        ch.on_packet(p, got.ts_recv_ns, &mut |r| {
                            seq += 1;
                            let rec = BookUpdate { seq, ts_send_ticks: clock.raw() as u32, ..*r };
                            let _ = remote.write_with_imm((seq & (u64::from(slots) - 1)) as u32, &rec, seq as u32);
                        });
                    }
                    None if sent_all.load(Ordering::Acquire) => {
                        // the sender is done: whatever the kernel still holds arrives within a few ms
                        let t = *done_at.get_or_insert_with(std::time::Instant::now);
                        if received == (PACKETS * passes) as u64 || t.elapsed() > Duration::from_millis(200) {
                            break;
                        }
                    }
                    None => {
                        idle += 1;
                        if idle > 1_000 {
                            std::thread::yield_now();
                        }
                    }
                }
            }
            remote.close(CloseReason::EndOfStream);
            Ok(received)
        });
        let subscriber = sc.spawn(|| {
            crate::pin(sub_core);
            let mut rx = Receiver::new(local);
            rx.enable_latency();
            let mut empty = 0u32;
            let mut closed = false;
            while !closed {
                // told once the first stamp shows its kind (a live publisher's Accept says it up front)
                let clock = match stamp_seen.load(Ordering::Relaxed) {
                    1 => TsRecvClock::Software,
                    2 => TsRecvClock::Hardware,
                    3 => TsRecvClock::User,
                    _ => TsRecvClock::None,
                };
                if rx.ts_recv_clock() != clock {
                    rx.set_ts_recv_clock(clock);
                }
                let n = rx.poll(256, |e| closed |= matches!(e, Event::Closed(_)));
                if n == 0 {
                    empty += 1;
                    if empty > 1_000 {
                        std::thread::yield_now();
                    }
                } else {
                    empty = 0;
                }
            }
            let post = rx.latency().map(|l| l.histogram().clone());
            let wire = rx.wire_latency().map(|w| w.histogram().clone());
            (post, wire)
        });
        sender.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
        let received = receiver.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        let (post, wire) = subscriber.join().map_err(|_| anyhow::anyhow!("subscriber panicked"))?;
        let stamp = match stamp_seen.load(Ordering::Relaxed) {
            1 => StampKind::Software,
            2 => StampKind::Hardware,
            3 => StampKind::User,
            _ => StampKind::None,
        };
        let empty = || Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds are valid");
        Ok(Loopback {
            wire_to_poll: wire.unwrap_or_else(empty),
            post_to_poll: post.unwrap_or_else(empty),
            stamp,
            packets: received,
        })
    })
}
