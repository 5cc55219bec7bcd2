//! mdfan-feedsim -> mdfan-lines over loopback, on the bundled CME MDP 3.0 capture (lines A and B, 5,000 packets
//! each, MsgSeqNum 17,347,815..=17,352,814, byte-identical A/B pairs).
//!
//! The simulator runs at speed 0 (as fast as possible) on a thread while the test thread polls the receiver.
//! The receiver's sockets get a 32 MiB buffer (SO_RCVBUFFORCE as root), which holds the whole capture, so the
//! kernel drops nothing even if the reader falls behind. Gaps here are decided by both lines moving past a seq;
//! the gap timeout is set far out (10 s) so a host stall cannot decide one. A watchdog fails a run that has not
//! received everything after 120 s.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mdfan_feedsim::{run, Impairment, Mdp3, SimConfig, SimError, Summary};
use mdfan_lines::{
    realtime_ns, ArbiterConfig, ArbiterCounters, Event, Line, LineConfig, LineReceiver, Mdp3Seq, ReceiverConfig,
    StampKind,
};

const FIRST: u64 = 17_347_815;
const LAST: u64 = 17_352_814;
const PACKETS: u64 = 5_000;

fn capture() -> PathBuf {
    // The workspace root's data/ folder.
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap")
}

struct Outcome {
    summary: Summary,
    seqs: Vec<u64>,
    gaps: Vec<(u64, u64)>,
    counters: ArbiterCounters,
    stamps: [[u64; 3]; 2],
    unstamped: u64,
    stamp_kinds: Vec<StampKind>,
}

/// Runs the simulator against a receiver on `a`/`b` (port 0: the receiver picks) and collects what it delivers.
fn run_loopback(a: SocketAddrV4, b: SocketAddrV4, tweak: impl FnOnce(&mut SimConfig)) -> Outcome {
    let big = |addr| LineConfig { rcvbuf_bytes: 32 << 20, ..LineConfig::new(addr) };
    let mut rcfg = ReceiverConfig::new(big(a), big(b));
    rcfg.arbiter = ArbiterConfig { gap_timeout_ns: 10_000_000_000, ..ArbiterConfig::default() };
    let mut rx = LineReceiver::open(&rcfg, Mdp3Seq).expect("open the lines");
    for line in [Line::A, Line::B] {
        // Linux reports twice the size set; anything less means SO_RCVBUFFORCE was refused and rmem_max capped it.
        let got = rx.socket(line).rcvbuf_bytes();
        assert!(got >= 32 << 20, "line {line:?}: SO_RCVBUF {got} bytes: run as root or raise net.core.rmem_max");
    }
    let mut cfg = SimConfig {
        pcap: capture(),
        line_a: None,
        line_b: None,
        send_a: rx.socket(Line::A).local_addr(),
        send_b: rx.socket(Line::B).local_addr(),
        speed: 0.0,
        impair_a: Impairment::default(),
        impair_b: Impairment::default(),
        seed: 1,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: None,
    };
    tweak(&mut cfg);
    let shutdown = AtomicBool::new(false);
    let (mut seqs, mut gaps, mut unstamped, mut stamp_kinds) = (Vec::new(), Vec::new(), 0u64, Vec::new());
    let summary = std::thread::scope(|s| {
        let mut sim = Some(s.spawn(|| run(&cfg, &mut Mdp3::default(), &shutdown)));
        let mut summary: Option<Summary> = None;
        let start = Instant::now();
        loop {
            rx.poll(realtime_ns(), 256, &mut |e| match e {
                Event::Data(d) => {
                    assert_eq!(Mdp3Seq_seq(d.payload), d.seq);
                    seqs.push(d.seq);
                    if d.ts_recv_ns == 0 {
                        unstamped += 1;
                    }
                    if !stamp_kinds.contains(&d.stamp) {
                        stamp_kinds.push(d.stamp);
                    }
                }
                Event::Gap { first, last } => gaps.push((first, last)),
                Event::CopyMismatch { seq } => panic!("the copies of {seq} differ"),
                Event::SeqReset { first } => panic!("a reset to {first}"),
            })
            .expect("poll");
            if let Some(h) = sim.take_if(|h| h.is_finished()) {
                summary = Some(h.join().expect("simulator thread").expect("simulator run"));
            }
            if let Some(sm) = &summary {
                let got = rx.line_counters().datagrams;
                if got == [sm.lines[0].sent, sm.lines[1].sent] {
                    break sm.clone();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "watchdog: received {:?} of {:?}",
                rx.line_counters().datagrams,
                summary.as_ref().map(|s| [s.lines[0].sent, s.lines[1].sent])
            );
            std::thread::yield_now();
        }
    });
    // A last tick: nothing more will come.
    rx.poll(realtime_ns(), 256, &mut |_| panic!("nothing may be left")).expect("poll");
    Outcome {
        summary,
        seqs,
        gaps,
        counters: *rx.arbiter_counters(),
        stamps: rx.line_counters().stamps,
        unstamped,
        stamp_kinds,
    }
}

#[allow(non_snake_case)]
fn Mdp3Seq_seq(payload: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(payload[..4].try_into().unwrap()))
}

fn unicast() -> (SocketAddrV4, SocketAddrV4) {
    (SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
}

/// Every delivered datagram has a kernel receive stamp; on loopback it is software. Prints which.
fn check_stamps(o: &Outcome) {
    assert_eq!(o.unstamped, 0);
    let total: u64 = o.stamps.iter().flatten().sum();
    println!("receive stamps: {:?} (per line: hardware, software, user)", o.stamp_kinds);
    assert_eq!(o.stamps[0][1] + o.stamps[1][1], total, "loopback gives software stamps only");
}

fn contiguous() -> Vec<u64> {
    (FIRST..=LAST).collect()
}

#[test]
fn no_loss_unicast_delivers_every_seq_once_and_drops_every_b_copy() {
    let (a, b) = unicast();
    let o = run_loopback(a, b, |_| {});
    assert_eq!(o.seqs, contiguous());
    assert!(o.gaps.is_empty());
    let c = o.counters;
    assert_eq!(c.received, [PACKETS, PACKETS]);
    assert_eq!(c.delivered[0] + c.delivered[1], PACKETS);
    assert_eq!((c.duplicates, c.gap_seqs, c.late), (PACKETS, 0, 0));
    for l in &o.summary.lines {
        assert_eq!((l.read, l.sent, l.dropped, l.duplicated), (PACKETS, PACKETS, 0, 0));
    }
    check_stamps(&o);
}

#[test]
fn no_loss_multicast_on_loopback() {
    // Groups in the administratively scoped range, joined on 127.0.0.1; sent with IF 127.0.0.1 and TTL 0.
    let a = SocketAddrV4::new(Ipv4Addr::new(239, 255, 90, 1), 0);
    let b = SocketAddrV4::new(Ipv4Addr::new(239, 255, 90, 2), 0);
    let o = run_loopback(a, b, |_| {});
    assert_eq!(o.seqs, contiguous());
    assert!(o.gaps.is_empty());
    assert_eq!((o.counters.received, o.counters.duplicates), ([PACKETS, PACKETS], PACKETS));
    check_stamps(&o);
}

#[test]
fn two_percent_loss_per_line_is_filled_from_the_other_line() {
    let (a, b) = unicast();
    let loss = Impairment { loss: 0.02, ..Impairment::default() };
    let o = run_loopback(a, b, |c| {
        c.impair_a = loss;
        c.impair_b = loss;
        c.seed = 13;
    });
    let [la, lb] = &o.summary.lines;
    assert_eq!((la.dropped, lb.dropped), (100, 114));
    // Seed 13 loses no seq on both lines (checked here, so the expectations below are exact).
    assert!(la.dropped_seqs.iter().all(|s| lb.dropped_seqs.binary_search(s).is_err()));
    assert_eq!((la.dropped, lb.dropped), (la.dropped_seqs.len() as u64, lb.dropped_seqs.len() as u64));
    assert!(la.dropped > 0 && lb.dropped > 0);
    println!("lost: A {} B {}", la.dropped, lb.dropped);
    assert_eq!(o.seqs, contiguous());
    assert!(o.gaps.is_empty());
    let c = o.counters;
    assert_eq!(c.received, [PACKETS - la.dropped, PACKETS - lb.dropped]);
    // Each lost packet was filled by the other line's copy, which then has no duplicate.
    assert_eq!(c.duplicates, PACKETS - la.dropped - lb.dropped);
    assert_eq!(c.delivered[0] + c.delivered[1], PACKETS);
    assert_eq!((c.gap_seqs, c.late), (0, 0));
    check_stamps(&o);
}

#[test]
fn the_same_forty_seqs_dropped_on_both_lines_are_reported_as_one_gap() {
    let (a, b) = unicast();
    let (first, last) = (17_350_000, 17_350_039);
    let o = run_loopback(a, b, |c| c.drop_seqs = Some((first, last)));
    for l in &o.summary.lines {
        assert_eq!((l.dropped, l.dropped_by_seq), (40, 40));
        assert_eq!(l.dropped_seqs, (first..=last).collect::<Vec<_>>());
    }
    assert_eq!(o.gaps, vec![(first, last)]);
    let want: Vec<u64> = (FIRST..first).chain(last + 1..=LAST).collect();
    assert_eq!(o.seqs, want);
    let c = o.counters;
    assert_eq!((c.gap_seqs, c.gap_events, c.gap_timeouts, c.gap_overflows), (40, 1, 0, 0));
    assert_eq!(c.duplicates, PACKETS - 40);
    check_stamps(&o);
}

#[test]
fn duplication_and_reordering_still_deliver_in_order() {
    let (a, b) = unicast();
    let imp = Impairment { loss: 0.01, dup: 0.02, reorder: 0.02 };
    let o = run_loopback(a, b, |c| {
        c.impair_a = imp;
        c.impair_b = imp;
        c.seed = 9;
    });
    let [la, lb] = &o.summary.lines;
    assert!(la.duplicated > 0 && la.reordered > 0 && lb.duplicated > 0 && lb.reordered > 0);
    let both: Vec<u64> = la.dropped_seqs.iter().copied().filter(|s| lb.dropped_seqs.binary_search(s).is_ok()).collect();
    let want: Vec<u64> = (FIRST..=LAST).filter(|s| !both.contains(s)).collect();
    assert_eq!(o.seqs, want);
    assert_eq!(o.counters.gap_seqs, both.len() as u64);
    assert_eq!(o.counters.received, [la.sent, lb.sent]);
    assert_eq!(o.counters.duplicates, la.sent + lb.sent - want.len() as u64);
}

#[test]
fn a_truncated_capture_is_a_clear_error_naming_file_and_packet() {
    let dir = std::env::temp_dir().join(format!("mdfan-feedsim-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcapng");
    let bytes = std::fs::read(capture()).unwrap();
    // 3,000 bytes: the headers and 19 whole packets, then the file ends inside packet 20.
    std::fs::write(&cut, &bytes[..3_000]).unwrap();
    let cfg = SimConfig {
        pcap: cut.clone(),
        line_a: None,
        line_b: None,
        send_a: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
        send_b: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9),
        speed: 0.0,
        impair_a: Impairment::default(),
        impair_b: Impairment::default(),
        seed: 1,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: None,
    };
    let err = mdfan_feedsim::plan(&cfg, &Mdp3::default()).unwrap_err();
    assert!(matches!(err, SimError::Capture(mdfan_feedsim::CaptureError::Packet { packet: 20, .. })), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: packet 20 (1-based, counting every packet block): the file ends inside this packet's record (truncated capture)",
            cut.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_capture_plans_as_documented() {
    let cfg = SimConfig {
        pcap: capture(),
        line_a: Some("224.0.32.11:15320".parse().unwrap()),
        line_b: Some("224.0.31.11:14320".parse().unwrap()),
        send_a: "127.0.0.1:9".parse().unwrap(),
        send_b: "239.255.90.3:9".parse().unwrap(),
        speed: 1.0,
        impair_a: Impairment::default(),
        impair_b: Impairment::default(),
        seed: 1,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: None,
    };
    let p = mdfan_feedsim::plan(&cfg, &Mdp3::default()).unwrap();
    assert_eq!(p.capture.packets.len(), 10_000);
    assert_eq!(p.capture.skipped, 0);
    assert_eq!(p.capture.groups(), vec!["224.0.31.11:14320".parse().unwrap(), "224.0.32.11:15320".parse().unwrap()]);
    // Line A is the B feed here (the filters swap them).
    assert_eq!(p.lines[0].group, "224.0.32.11:15320".parse().unwrap());
    // The first packet in the file (README: 21:46:13.473604Z), in ns since the epoch; the first to go out is
    // older (the file is not in time order across the lines).
    assert_eq!(p.capture.packets[0].ts_ns / 1_000, 1_475_012_773_473_604);
    assert_eq!(p.events[0].ts_ns / 1_000, 1_475_012_773_473_602);
    assert!(p.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    let a_seqs: Vec<u64> = p
        .events
        .iter()
        .filter(|e| e.line == Line::A)
        .map(|e| Mdp3Seq_seq(&p.capture.packets[e.packet].payload))
        .collect();
    assert_eq!(a_seqs, contiguous());

    let mut bad = cfg.clone();
    bad.line_a = Some("224.0.31.12:14320".parse().unwrap());
    let err = mdfan_feedsim::plan(&bad, &Mdp3::default()).unwrap_err().to_string();
    assert!(err.ends_with("line A group 224.0.31.12:14320 has no packet; the capture's UDP destinations: 224.0.31.11:14320, 224.0.32.11:15320"), "{err}");
    bad.send_a = "10.1.2.3:9".parse().unwrap();
    assert!(mdfan_feedsim::plan(&bad, &Mdp3::default()).is_err());
}
