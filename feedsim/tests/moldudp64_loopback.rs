//! The ESH4 file as ITCH 5.0 over MoldUDP64, played on line A to 127.0.0.1 with 2% seeded loss; a plain UDP
//! socket in the test receives it and fills every gap with real MoldUDP64 request packets to the simulator's
//! retransmission server. The receiver ends with each sequence number 1..=N exactly once and the data README's
//! book. The retransmission server on its own: other sessions, malformed requests, silent, and the knobs that
//! stop it mid-run.
//!
//! Speed 0 (as fast as possible); the kernel may also drop datagrams when the test reads slower than the
//! simulator sends: those gaps are filled the same way. Requests are re-sent after 100 ms without an answer
//! (pacing only, never asserted). A watchdog fails a run that has not completed after 120 s.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;
mod support;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mdfan_feed::moldudp64::{Packet, PacketKind};
use mdfan_feedsim::moldudp64::{
    capture_of, request_packet, synthesize, MoldItch, MoldRetransmitServer, RetransmitOptions, Session, SynthOptions,
    DEFAULT_MAX_PAYLOAD_BYTES, SYNTH_GROUP_A, SYNTH_GROUP_B,
};
use mdfan_feedsim::{run_capture, Impairment, RecoveryConfig, RecoveryServer, SimConfig};
use mdfan_wire::{Level, Side};
use socket2::{Domain, Protocol, Socket, Type};

use support::itch_book::ItchBook;

const SESSION: &str = "ESH4LOOP";

fn receiver() -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    // Large, so that fewer datagrams are dropped by the kernel (any are recovered anyway).
    let _ = s.set_recv_buffer_size(32 << 20);
    s.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into()).unwrap();
    let s: UdpSocket = s.into();
    s.set_nonblocking(true).unwrap();
    s
}

fn free_port() -> SocketAddrV4 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    match s.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!("bound on IPv4"),
    }
}

fn lv(l: (i64, u64, u32)) -> Level {
    Level { price_e9: l.0, size: l.1, orders: l.2 }
}

#[test]
fn two_percent_loss_filled_by_retransmission_gives_every_seq_once_and_the_reference_book() {
    let session = Session::new(SESSION).unwrap();
    let opts = SynthOptions { heartbeat_interval_ns: 0, ..SynthOptions::new(session) };
    let synth = synthesize(&esh4::main_file(), &opts).unwrap();
    let n = synth.last_seq;
    assert_eq!(n, 62_574);
    let rx = receiver();
    let rx_addr = match rx.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => unreachable!(),
    };
    let retransmit = free_port();
    let cfg = SimConfig {
        pcap: esh4::main_file(),
        line_a: None,
        line_b: None,
        send_a: rx_addr,
        send_b: rx_addr,
        speed: 0.0,
        impair_a: Impairment { loss: 0.02, ..Impairment::default() },
        impair_b: Impairment::default(),
        seed: 7,
        drop_seqs: None,
        multicast: Default::default(),
        definitions: None,
        recovery: Some(RecoveryConfig { linger_ms: 120_000, ..RecoveryConfig::new(retransmit) }),
    };
    let mut feed =
        MoldItch { session, max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES, retransmit: RetransmitOptions::default() };
    let capture = capture_of(&synth.packets, false);
    let shutdown = AtomicBool::new(false);

    // Message i (1-based seq) once received: its bytes; the order in which seqs were first delivered.
    let mut messages: Vec<Option<Vec<u8>>> = vec![None; n as usize + 1];
    let mut delivered: Vec<u64> = Vec::with_capacity(n as usize);
    let (mut duplicates, mut requests_sent, mut end_of_session) = (0u64, 0u64, false);
    let summary = std::thread::scope(|s| {
        let sim = s.spawn(|| run_capture(&cfg, capture, [SYNTH_GROUP_A, SYNTH_GROUP_B], &mut feed, &shutdown));
        let start = Instant::now();
        let mut last_data = Instant::now();
        let mut high = 1u64; // next seq after the highest seen
        let mut requested: Vec<Option<Instant>> = vec![None; n as usize + 2];
        let mut buf = vec![0u8; 65_536];
        while delivered.len() < n as usize {
            assert!(start.elapsed() < Duration::from_secs(120), "watchdog: {} of {n} after 120 s", delivered.len());
            match rx.recv_from(&mut buf) {
                Ok((len, _)) => {
                    last_data = Instant::now();
                    let p = Packet::parse(&buf[..len]).unwrap();
                    assert_eq!(p.session_str(), SESSION);
                    if p.kind() == PacketKind::EndOfSession {
                        end_of_session = true;
                    }
                    high = high.max(p.next_sequence_number());
                    for b in p.messages() {
                        let slot = &mut messages[b.sequence_number as usize];
                        if slot.is_some() {
                            duplicates += 1;
                        } else {
                            *slot = Some(b.message.to_vec());
                            delivered.push(b.sequence_number);
                        }
                    }
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("recv: {e}"),
            }
            // Quiet for 200 ms: the play is over (or stalled); everything up to N may be asked for.
            if end_of_session || last_data.elapsed() > Duration::from_millis(200) {
                high = n + 1;
            }
            let mut seq = 1u64;
            while seq < high {
                if messages[seq as usize].is_some() {
                    seq += 1;
                    continue;
                }
                let first = seq;
                while seq < high && messages[seq as usize].is_none() && seq - first < 2_000 {
                    seq += 1;
                }
                let due = requested[first as usize].is_none_or(|t| t.elapsed() > Duration::from_millis(100));
                if due {
                    let req = request_packet(&session, first, (seq - first) as u16);
                    rx.send_to(&req, retransmit).unwrap();
                    requested[first as usize] = Some(Instant::now());
                    requests_sent += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        shutdown.store(true, Ordering::Relaxed);
        sim.join().unwrap().unwrap()
    });

    // Every seq once.
    let mut sorted = delivered.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=n).collect::<Vec<u64>>());
    // The seeded 2% loss of line A: 45,517 packets (no heartbeats), each lost one a gap to fill.
    let a = &summary.lines[0];
    assert_eq!(a.read, 45_517);
    assert_eq!((a.dropped, a.sent), (896, 45_517 - 896), "seed 7's plan");
    assert_eq!(summary.lines[1].read, 0, "line B idle");
    assert!(requests_sent > 0 && summary.recovery_sent.unwrap() > 0, "{summary}");
    println!("{summary} requests_sent={requests_sent} duplicates={duplicates}");

    let mut book = ItchBook::new(synth.midnight_ns);
    for seq in 1..=n {
        book.message(seq, 0, messages[seq as usize].as_deref().unwrap());
    }
    let b = book.books.get(1).unwrap();
    assert_eq!(b.order_count(), 11_217);
    assert_eq!((b.level_count(Side::Bid), b.level_count(Side::Ask)), (922, 565));
    assert_eq!(b.top(Side::Bid, 10), esh4::TOP_BIDS.map(lv));
    assert_eq!(b.top(Side::Ask, 10), esh4::TOP_ASKS.map(lv));
}

/// A server with messages 1..=`n` published (packets of `per_packet` messages of 3 bytes each).
fn server(opts: RetransmitOptions, silent: bool, n: u64, per_packet: u64) -> MoldRetransmitServer {
    let session = Session::new("SRV0001").unwrap();
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    // 72 bytes: the smallest max payload the server takes (header and one 50-byte NOII message).
    let mut s = MoldRetransmitServer::bind(addr, session, 72, opts, silent).unwrap();
    let mut seq = 1;
    while seq <= n {
        let mut p = Vec::new();
        let count = per_packet.min(n - seq + 1);
        mdfan_feedsim::moldudp64::write_header(&mut p, &session, seq, count as u16);
        for k in seq..seq + count {
            p.extend_from_slice(&3u16.to_be_bytes());
            p.extend_from_slice(&[b'm', (k >> 8) as u8, k as u8]);
        }
        s.published(seq, &p);
        seq += count;
    }
    s
}

/// Sends `req` to the server, polls it once, and returns what came back (the answer is on the loopback
/// socket's queue when `sendto` returns, so one non-blocking drain sees all of it).
fn ask(s: &mut MoldRetransmitServer, client: &UdpSocket, req: &[u8]) -> Vec<(u64, u16, Vec<Vec<u8>>)> {
    client.send_to(req, s.local_addr().unwrap()).unwrap();
    s.poll(0).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match client.recv_from(&mut buf) {
            Ok((len, _)) => {
                assert!(len <= 72, "an answer packet of {len} bytes, above the 72-byte max payload");
                let p = Packet::parse(&buf[..len]).unwrap();
                assert_eq!(p.session_str(), "SRV0001");
                out.push((p.sequence_number, p.message_count, p.messages().map(|b| b.message.to_vec()).collect()));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return out,
            Err(e) => panic!("{e}"),
        }
    }
}

fn msg(k: u64) -> Vec<u8> {
    vec![b'm', (k >> 8) as u8, k as u8]
}

#[test]
fn the_retransmission_server_answers_its_own_session_only() {
    let mut s = server(RetransmitOptions::default(), false, 20, 4);
    assert_eq!(s.last_seq(), 20);
    let client = receiver();
    let own = Session::new("SRV0001").unwrap();
    // 72-byte packets: header 20 + 10 messages of 2 + 3 bytes = 70.
    let got = ask(&mut s, &client, &request_packet(&own, 3, 14));
    assert_eq!(
        got,
        [(3, 10, (3..=12).map(msg).collect::<Vec<_>>()), (13, 4, (13..=16).map(msg).collect())],
        "seqs 3..=16 in two packets"
    );
    // Another session: nothing.
    assert_eq!(ask(&mut s, &client, &request_packet(&Session::new("OTHER").unwrap(), 3, 10)), []);
    // Partly published: the published part; wholly beyond: nothing.
    assert_eq!(ask(&mut s, &client, &request_packet(&own, 19, 5)), [(19, 2, vec![msg(19), msg(20)])]);
    assert_eq!(ask(&mut s, &client, &request_packet(&own, 21, 1)), []);
    // Malformed: short, count 0, seq 0.
    assert_eq!(ask(&mut s, &client, &request_packet(&own, 1, 1)[..19]), []);
    assert_eq!(ask(&mut s, &client, &request_packet(&own, 1, 0)), []);
    assert_eq!(ask(&mut s, &client, &request_packet(&own, 0, 1)), []);
    let c = s.counters();
    assert_eq!((c.requests, c.answered, c.packets_sent, c.messages_sent), (7, 2, 3, 16));
    assert_eq!((c.wrong_session, c.beyond, c.malformed, c.refused), (1, 1, 3, 0));
}

#[test]
fn the_retransmission_server_can_be_silent_or_stop_mid_run() {
    let own = Session::new("SRV0001").unwrap();
    let client = receiver();
    let mut silent = server(RetransmitOptions::default(), true, 5, 5);
    assert_eq!(ask(&mut silent, &client, &request_packet(&own, 1, 5)), []);
    assert_eq!(silent.counters().refused, 1);

    let mut two = server(RetransmitOptions { max_requests: Some(2), ..Default::default() }, false, 5, 5);
    assert_eq!(ask(&mut two, &client, &request_packet(&own, 1, 1)).len(), 1);
    assert_eq!(ask(&mut two, &client, &request_packet(&own, 2, 1)).len(), 1);
    assert_eq!(ask(&mut two, &client, &request_packet(&own, 3, 1)), []);
    assert_eq!((two.counters().answered, two.counters().refused), (2, 1));

    // Dies once seq 8 is published: packets of 4 messages, so at the second packet (seqs 5..=8).
    let mut dies = server(RetransmitOptions { die_after_seq: Some(8), ..Default::default() }, false, 4, 4);
    assert_eq!(ask(&mut dies, &client, &request_packet(&own, 1, 1)), [(1, 1, vec![msg(1)])]);
    let mut p = Vec::new();
    mdfan_feedsim::moldudp64::write_header(&mut p, &own, 5, 4);
    for k in 5..=8 {
        p.extend_from_slice(&3u16.to_be_bytes());
        p.extend_from_slice(&msg(k));
    }
    dies.published(5, &p);
    assert_eq!(ask(&mut dies, &client, &request_packet(&own, 1, 1)), []);
    assert_eq!(dies.counters().refused, 1);
}
