//! Line sources over loopback: lines A and B list 127.0.0.1 (where feedsim and the venue's stand-in send from);
//! forged MDP 3.0 packets from 127.0.0.2 carrying the real seqs, sent ahead of the stream, are dropped before
//! arbitration and counted by source, so the real copies win; a copy on line B that differs from line A's is
//! reported (`Event::CopyMismatch`) after its seq.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use mdfan_lines::{realtime_ns, Event, Line, LineConfig, LineReceiver, LineSocket, Mdp3Seq, ReceiverConfig};

/// A 12-byte MDP 3.0 packet (header only: MsgSeqNum, SendingTime) whose SendingTime says who made it.
fn packet(seq: u32, sending_time: u64) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p[4..].copy_from_slice(&sending_time.to_le_bytes());
    p
}

#[test]
fn forged_packets_from_another_source_are_dropped_and_counted_and_differing_copies_reported() {
    let feed = Ipv4Addr::LOCALHOST;
    let forger_addr = Ipv4Addr::new(127, 0, 0, 2);
    let line = |sources| LineConfig { sources, ..LineConfig::new(SocketAddrV4::new(feed, 0)) };
    let cfg = ReceiverConfig::new(line(vec![feed]), line(vec![feed]));
    let mut rx = LineReceiver::open(&cfg, Mdp3Seq).expect("open the lines");
    let [a, b] = [Line::A, Line::B].map(|l| rx.socket(l).local_addr());
    let forger = UdpSocket::bind(SocketAddrV4::new(forger_addr, 0)).expect("bind 127.0.0.2");
    let venue = UdpSocket::bind(SocketAddrV4::new(feed, 0)).unwrap();
    for seq in 1..=5 {
        forger.send_to(&packet(seq, 666), a).unwrap();
        forger.send_to(&packet(seq, 666), b).unwrap();
    }
    for seq in 1..=5 {
        venue.send_to(&packet(seq, 1), a).unwrap();
        // Line B's copy of 4 carries something line A's does not.
        venue.send_to(&packet(seq, if seq == 4 { 2 } else { 1 }), b).unwrap();
    }
    let mut got = Vec::new();
    let start = Instant::now();
    while rx.line_counters().datagrams != [10, 10] {
        rx.poll(realtime_ns(), 64, &mut |e| match e {
            Event::Data(d) => got.push(format!("{} {}", d.seq, u64::from_le_bytes(d.payload[4..].try_into().unwrap()))),
            Event::Gap { first, last } => got.push(format!("gap {first}..={last}")),
            Event::CopyMismatch { seq } => got.push(format!("mismatch {seq}")),
            Event::SeqReset { first } => got.push(format!("reset {first}")),
        })
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(10), "received {:?}", rx.line_counters().datagrams);
    }
    assert_eq!(got, ["1 1", "2 1", "3 1", "4 1", "mismatch 4", "5 1"]);
    let c = *rx.arbiter().check_counters();
    assert_eq!((c.foreign[0].by_source[0], c.foreign[1].by_source[0]), ((forger_addr, 5), (forger_addr, 5)));
    assert_eq!((c.foreign[0].total() + c.foreign[1].total(), c.copy_mismatches), (10, 1));
    assert_eq!(rx.arbiter_counters().refused, 10);
}

/// A multicast line on loopback that lists 127.0.0.1 joins source-specifically (IGMPv3, one membership per
/// source): a sender on 127.0.0.2 never reaches the socket (the kernel drops it, so nothing is even counted as
/// foreign), the listed sender's datagrams all do. Without sources the same group joins for any source and the
/// second sender's datagrams arrive (then the per-datagram check is what drops them).
#[test]
fn a_multicast_line_with_sources_joins_only_those_sources() {
    let group = Ipv4Addr::new(239, 255, 42, 7);
    let open = |sources: Vec<Ipv4Addr>| {
        let line = |port| LineConfig { sources: sources.clone(), ..LineConfig::new(SocketAddrV4::new(group, port)) };
        let mut cfg = ReceiverConfig::new(line(0), line(0));
        cfg.arbiter.confirm_packets = 1;
        LineReceiver::open(&cfg, Mdp3Seq).expect("open the lines")
    };
    let sender = |ip: Ipv4Addr| {
        let s = UdpSocket::bind(SocketAddrV4::new(ip, 0)).unwrap();
        s.set_multicast_ttl_v4(0).unwrap();
        socket2::SockRef::from(&s).set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        s
    };
    let (venue, other) = (sender(Ipv4Addr::LOCALHOST), sender(Ipv4Addr::new(127, 0, 0, 2)));
    for (sources, other_arrives) in [(vec![Ipv4Addr::LOCALHOST], false), (vec![], true)] {
        let mut rx = open(sources.clone());
        assert_eq!(rx.socket(Line::A).source_specific(), !sources.is_empty());
        let a = SocketAddrV4::new(group, rx.socket(Line::A).local_addr().port());
        for seq in 1..=3 {
            other.send_to(&packet(seq, 666), a).unwrap();
        }
        for seq in 1..=3 {
            venue.send_to(&packet(seq, 1), a).unwrap();
        }
        let want = if other_arrives { 6 } else { 3 };
        let start = Instant::now();
        let mut got = Vec::new();
        while rx.line_counters().datagrams[0] < want {
            rx.poll(realtime_ns(), 64, &mut |e| {
                if let Event::Data(d) = e {
                    got.push(u64::from_le_bytes(d.payload[4..].try_into().unwrap()));
                }
            })
            .unwrap();
            assert!(start.elapsed() < Duration::from_secs(10), "received {:?}", rx.line_counters().datagrams);
        }
        // Everything sent was queued before the first read: nothing more is on its way.
        rx.poll(realtime_ns(), 64, &mut |_| {}).unwrap();
        assert_eq!(rx.line_counters().datagrams, [want, 0], "sources {sources:?}");
        if other_arrives {
            assert_eq!(got, [666, 666, 666], "any source: the first copies win");
        } else {
            assert_eq!(got, [1, 1, 1]);
            assert_eq!(rx.arbiter().check_counters().foreign[0].total(), 0, "dropped by the kernel, not by us");
        }
    }
}

/// A unicast line is its socket's alone: a second socket (another publisher started on the same config) cannot
/// bind it and take part of its datagrams; it fails naming the address and the call. A multicast group may be
/// joined by several.
#[test]
fn a_unicast_line_cannot_be_bound_twice_a_multicast_group_can() {
    let first = LineSocket::open(&LineConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).expect("open");
    let addr = first.local_addr();
    let e = LineSocket::open(&LineConfig::new(addr)).err().expect("a second bind of a unicast line fails");
    let text = e.to_string();
    assert!(text.contains(&addr.to_string()) && text.contains("bind"), "{text}");
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 0, 77), addr.port());
    let cfg = LineConfig { interface: Ipv4Addr::LOCALHOST, ..LineConfig::new(group) };
    let (_a, _b) = (LineSocket::open(&cfg).expect("join"), LineSocket::open(&cfg).expect("join again"));
}
