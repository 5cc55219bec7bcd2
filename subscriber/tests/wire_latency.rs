//! Wire-to-poll in the subscriber library: recorded only when the publisher's `Accept` says the records'
//! `ts_recv_ns` is a live receive stamp, and then only for records that carry their own datagram's stamp.
//!
//! A stand-in publisher on loopback answers the subscriber's `Subscribe` with an `Accept` naming a
//! `ts_recv_clock`, attaches its shm ring and writes records whose `ts_recv_ns` is set to `CLOCK_REALTIME` minus a
//! known delay, so the recorded wire-to-poll cannot be below that delay.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mdfan_fabric::shm::{ShmRemoteRing, DEFAULT_DIR};
use mdfan_fabric::RemoteRing;
use mdfan_subscriber::{CloseReason, Event, Kind, Subscriber, SubscriberConfig, TsRecvClock};
use mdfan_wire::control::{self, Accept, AcceptFabric, ControlMsg};
use mdfan_wire::{flags, BookUpdate};

/// The delay built into every stamped record: its `ts_recv_ns` is realtime this long before it is written.
const DELAY_NS: u64 = 5_000_000;

fn realtime_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Serves one subscriber: accept with `clock`, then 3 stamped records, one flagged `BAD_TS_RECV`, one with
/// `ts_recv_ns` 0, one snapshot record (flagged `SNAPSHOT`, carrying a stamp), and end of stream.
fn publisher(listener: TcpListener, clock: TsRecvClock) {
    let (mut s, _) = listener.accept().unwrap();
    let ControlMsg::Subscribe(sub) = control::read_msg(&mut s).unwrap() else { panic!("expected a subscribe") };
    let mut ring =
        ShmRemoteRing::attach(&sub.ring, Path::new(DEFAULT_DIR), Some(mdfan_fabric::shm::current_euid())).unwrap();
    let accept = Accept {
        session_id: 1,
        first_seq: 1,
        fabric: AcceptFabric::Shm,
        policy: sub.policy,
        heartbeat_interval_ms: 10,
        definitions: Vec::new(),
        ts_recv_clock: clock,
        book: mdfan_wire::control::BookKind::Mbo,
        feed: Default::default(),
    };
    control::write_msg(&mut s, &ControlMsg::Accept(accept)).unwrap();
    let slots = sub.ring.slot_count() as u64;
    let stamped = |f: u8| BookUpdate {
        ts_recv_ns: realtime_ns() - DELAY_NS,
        instrument_id: 7,
        price_e9: 100_000_000_000,
        size: 1,
        order_id: 1,
        flags: f,
        ..BookUpdate::control(Kind::Add)
    };
    let records = [
        stamped(0),
        stamped(flags::LAST),
        stamped(flags::BAD_TS_RECV),
        BookUpdate { ts_recv_ns: 0, ..stamped(0) },
        stamped(flags::SNAPSHOT),
        stamped(flags::LAST),
        BookUpdate::control(Kind::EndOfStream),
    ];
    for (i, r) in records.into_iter().enumerate() {
        let seq = i as u64 + 1;
        let r = BookUpdate { seq, ..r };
        ring.write_with_imm((seq % slots) as u32, &r, seq as u32).unwrap();
    }
    ring.flush().unwrap();
    ring.close(CloseReason::EndOfStream);
    // keep the control connection until the subscriber has read everything
    let _ = control::read_msg(&mut s);
}

/// Subscribes with latency on and polls to the ring's close; returns the subscriber.
fn run(clock: TsRecvClock) -> Subscriber {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || publisher(listener, clock));
    let mut cfg = SubscriberConfig::new(&addr, "wire");
    cfg.ring_slots = 64;
    let mut sub = Subscriber::connect(&cfg).unwrap().with_latency();
    assert_eq!(sub.ts_recv_clock(), clock);
    assert_eq!(sub.book_kind(), mdfan_wire::control::BookKind::Mbo, "as the accept said");
    let (mut closed, mut records) = (false, 0);
    let watchdog = Instant::now() + Duration::from_secs(30); // a hang guard, not a timing check
    while !closed {
        assert!(Instant::now() < watchdog, "the ring never closed ({records} records)");
        sub.poll(16, |e| match e {
            Event::Record(_) => records += 1,
            Event::Closed(reason) => {
                assert_eq!(reason, CloseReason::EndOfStream);
                closed = true
            }
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(records, 7);
    drop(server); // detached: the stand-in returns once the caller drops the subscriber (its connection closes)
    sub
}

#[test]
fn a_replay_records_no_wire_to_poll() {
    let sub = run(TsRecvClock::None);
    assert_eq!(sub.latency().unwrap().histogram().len(), 7, "post-to-poll counts every record");
    assert!(sub.wire_latency().is_none());
}

#[test]
fn a_live_software_stamp_records_wire_to_poll_for_each_stamped_record() {
    let sub = run(TsRecvClock::Software);
    assert_eq!(sub.latency().unwrap().histogram().len(), 7);
    let wire = sub.wire_latency().expect("a live clock records wire-to-poll");
    // 3 stamped records; not the BAD_TS_RECV one, the unstamped one, the snapshot record or the end of stream
    assert_eq!(wire.histogram().len(), 3);
    // each was stamped DELAY_NS before it was written, so none can read less (the histogram keeps values to 3
    // significant digits: the top of the lowest value's bucket)
    let h = wire.histogram();
    assert!(h.highest_equivalent(h.min()) >= DELAY_NS, "{}", h.min());
    assert_eq!(wire.source().as_str(), "realtime(sw-stamp)");
    assert_eq!(
        mdfan_subscriber::report::wire_latency_line(wire).split(' ').take(3).collect::<Vec<_>>(),
        ["wire_to_poll", "clock=realtime(sw-stamp)", "count=3"]
    );
}

#[test]
fn a_hardware_stamp_is_labelled_as_such() {
    let sub = run(TsRecvClock::Hardware);
    let wire = sub.wire_latency().unwrap();
    assert_eq!(wire.histogram().len(), 3);
    assert_eq!(wire.source().as_str(), "realtime(hw-stamp)");
}
