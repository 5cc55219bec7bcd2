//! The publisher's three agents, the feed handler, the hot loop and the conductor, built without threads
//! ([`Publisher::into_agents`]) and stepped on the test's one thread, with the subscriber's end (its control
//! connection and a [`Receiver`] over its ring) driven in the same loop: the whole bundled capture is delivered,
//! and the agents' duty cycles add up to exact counts.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_fabric::shm::DEFAULT_DIR;
use mdfan_fabric::{AnyLocalRing, CloseReason, FabricConfig, PreparedLocalRing};
use mdfan_publisher::config::Config;
use mdfan_publisher::{Agents, Publisher};
use mdfan_subscriber::{Event, Receiver};
use mdfan_tuning::Agent;
use mdfan_wire::control::{self, ControlMsg, SlowConsumerPolicy, Subscribe};
use mdfan_wire::{Books, Kind, Level, Side};

/// The bundled capture (data/README.md): 68,792 MBO records of ESH4, instrument_id 17077.
const RECORDS: u64 = 68_792;
const INSTRUMENT: u32 = 17_077;

/// Longest the stepping loop may take before the test fails (a watchdog against a hang, not a timing assertion).
const WATCHDOG: Duration = Duration::from_secs(120);

fn feed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst")
}

/// A price in units of 1e-9 from one in hundredths (4810.25 -> 481025).
fn px(hundredths: i64) -> i64 {
    hundredths * 10_000_000
}

/// The publisher over the bundled capture at pace "max" (the default: the hot loop never waits for a record's
/// time) through a journal of 4,096 records, much smaller than the capture, so the feed handler waits for the hot
/// loop and the conductor again and again; `publisher_keys` are more `[publisher]` lines. Its three agents, not
/// started.
fn agents(publisher_keys: &str) -> (std::net::SocketAddr, mdfan_publisher::Progress, Agents) {
    let (addr, progress, _, agents) = agents_with_shutdown(publisher_keys);
    (addr, progress, agents)
}

/// [`agents`], and the shutdown flag they were built with (what SIGINT/SIGTERM set).
fn agents_with_shutdown(
    publisher_keys: &str,
) -> (std::net::SocketAddr, mdfan_publisher::Progress, Arc<AtomicBool>, Agents) {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 1\n{publisher_keys}\n[feed]\nformat = \"dbn\"\npath = \"{}\"\n\n[journal]\nrecords = 4096\n\n[fabric]\nprovider = \"shm\"\n",
        feed().display()
    );
    let cfg = Config::parse(&text, Path::new("agents-test.toml")).expect("test config parses");
    let publisher = Publisher::bind(cfg).expect("publisher binds");
    let (addr, progress) = (publisher.local_addr(), publisher.progress());
    let shutdown = Arc::new(AtomicBool::new(false));
    (addr, progress, Arc::clone(&shutdown), publisher.into_agents(shutdown))
}

#[test]
fn hot_loop_and_conductor_stepped_on_one_thread_deliver_the_whole_capture() {
    let (addr, _, Agents { mut feed, mut fanout, mut conductor }) = agents("");
    assert_eq!((fanout.role_name(), conductor.role_name()), ("mdfan-hot", "mdfan-conductor"));
    assert!(fanout.is_waiting());

    // The subscriber's end: a ring of 4,096 slots (polled after every duty cycle, it never fills) and a subscribe
    // message, which waits in the socket until the conductor accepts the connection.
    let mut sub = Sub::subscribe(addr, "one-thread", 4096);
    let mut fanout_work = 0u64;
    let deadline = Instant::now() + WATCHDOG;
    while !(conductor.is_done() && sub.rx.as_ref().is_some_and(|r| r.closed().is_some())) {
        assert!(Instant::now() < deadline, "watchdog: not done after {WATCHDOG:?}");
        if !feed.is_done() {
            feed.do_work();
        }
        if !fanout.is_done() {
            fanout_work += fanout.do_work() as u64;
        }
        if !conductor.is_done() {
            conductor.do_work();
        }
        sub.step();
        if sub.accept.is_some() && sub.rx.is_none() {
            let accept = sub.accept.as_ref().unwrap();
            assert_eq!((accept.session_id, accept.first_seq), (1, 1));
            sub.connect_ring();
        }
    }
    let report = conductor.take_report().expect("a done conductor has the run report");
    assert!(fanout.is_done());

    // every record, in order, once; then end of stream, then the close
    let rx = sub.rx.as_ref().expect("accepted");
    let stats = rx.stats();
    assert_eq!(sub.snapshots, 0, "no snapshot for a subscriber at start");
    assert_eq!(sub.book_records, RECORDS);
    assert_eq!(sub.last_venue_seq, 59_585, "the capture's last venue seq");
    assert_eq!(sub.end, Some(CloseReason::EndOfStream as u32));
    assert_eq!(rx.closed(), Some(CloseReason::EndOfStream));
    assert_eq!((stats.gaps, stats.missed, stats.corrupt, stats.stale), (0, 0, 0, 0));
    assert_eq!(stats.records, RECORDS + sub.heartbeats + 1, "book records, heartbeats and end of stream");
    assert_eq!(stats.next_seq, stats.records + 1, "seq ran from 1 without a hole");

    // the final book: data/README.md's reference values
    sub.assert_reference_book("one-thread");

    // what the conductor reported and told the subscriber
    assert_eq!((report.records, report.end), (RECORDS, CloseReason::EndOfStream));
    assert_eq!(report.sessions.len(), 1);
    let s = &report.sessions[0];
    assert_eq!((s.id, s.name.as_str(), s.end), (1, "one-thread", Some(CloseReason::EndOfStream)));
    assert_eq!((s.sent, s.heartbeats, s.last_seq, s.skipped), (stats.records, sub.heartbeats, stats.records, 0));
    sub.step(); // the bye, written before the conductor was done
    assert_eq!(sub.ctl_msgs.iter().map(ControlMsg::kind).collect::<Vec<_>>(), ["accept", "bye"]);
    assert!(
        matches!(&sub.ctl_msgs[1], ControlMsg::Bye(b) if b.reason == CloseReason::EndOfStream),
        "{:?}",
        sub.ctl_msgs[1]
    );

    // The hot loop's work: 1 for the cycle that saw the subscriber and went live, 1 per record, 1 for the cycle
    // that sent end of stream; every other cycle (waiting, heartbeats only) was idle.
    assert_eq!(fanout_work, 1 + RECORDS + 1);
}

/// One subscriber's end, driven from the test's loop: its control connection (the accept, the bye), its ring
/// (connected once [`Sub::connect_ring`] is allowed) and its own books.
struct Sub {
    ctl: TcpStream,
    ctl_buf: Vec<u8>,
    ring: Option<mdfan_fabric::PreparedLocalRing>,
    accept: Option<mdfan_wire::control::Accept>,
    /// Every control message received, in order.
    ctl_msgs: Vec<ControlMsg>,
    rx: Option<Receiver<AnyLocalRing>>,
    books: Books,
    book_records: u64,
    heartbeats: u64,
    last_venue_seq: u64,
    snapshots: u64,
    end: Option<u32>,
    /// Stopped: the ring is not polled (a strategy stuck elsewhere); the control connection still is.
    paused: bool,
}

impl Sub {
    fn subscribe(addr: std::net::SocketAddr, name: &str, ring_slots: u32) -> Sub {
        Sub::subscribe_with(addr, name, ring_slots, SlowConsumerPolicy::Disconnect)
    }

    fn subscribe_with(addr: std::net::SocketAddr, name: &str, ring_slots: u32, policy: SlowConsumerPolicy) -> Sub {
        let fabric = FabricConfig::Shm { dir: PathBuf::from(DEFAULT_DIR) };
        let (ring, grant) = PreparedLocalRing::create(&fabric, ring_slots).expect("shm ring");
        let mut ctl = TcpStream::connect(addr).expect("connect to the control endpoint");
        let subscribe = Subscribe { policy, ..Subscribe::new(name, grant) };
        control::write_msg(&mut ctl, &ControlMsg::Subscribe(subscribe)).expect("send subscribe");
        ctl.set_nonblocking(true).unwrap();
        Sub {
            ctl,
            ctl_buf: Vec::new(),
            ring: Some(ring),
            accept: None,
            ctl_msgs: Vec::new(),
            rx: None,
            books: Books::new(),
            book_records: 0,
            heartbeats: 0,
            last_venue_seq: 0,
            snapshots: 0,
            end: None,
            paused: false,
        }
    }

    /// Reads the control connection; polls the ring once it is connected.
    fn step(&mut self) {
        let mut buf = [0u8; 4096];
        match self.ctl.read(&mut buf) {
            Ok(n) => self.ctl_buf.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("control connection: {e}"),
        }
        while let Some(msg) = control::take_frame(&mut self.ctl_buf) {
            let msg = msg.expect("a well-formed control frame");
            if let ControlMsg::Accept(accept) = &msg {
                self.accept = Some(accept.clone());
            }
            self.ctl_msgs.push(msg);
        }
        let Some(rx) = self.rx.as_mut().filter(|_| !self.paused) else { return };
        let Sub { books, book_records, heartbeats, last_venue_seq, snapshots, end, .. } = self;
        rx.poll(256, |event| match event {
            Event::Record(r) => {
                match r.kind() {
                    Some(Kind::Heartbeat) => *heartbeats += 1,
                    Some(Kind::EndOfStream) => *end = Some(r.size),
                    Some(Kind::SnapshotBegin) => *snapshots += 1,
                    Some(Kind::SnapshotEnd) => {}
                    _ => {
                        *book_records += 1;
                        *last_venue_seq = r.venue_seq();
                    }
                }
                books.apply(r).expect("every record applies");
            }
            Event::Closed(_) => {}
            other => panic!("unexpected {other:?}"),
        });
    }

    /// Connects the ring (the subscriber's side of the session is ready: the conductor hands it to the hot loop).
    fn connect_ring(&mut self) {
        let accept = self.accept.as_ref().expect("accepted");
        let mut prepared = self.ring.take().expect("one connect");
        prepared.unlink();
        self.rx = Some(Receiver::new(prepared.connect(&accept.fabric).expect("connect the ring")));
    }

    fn assert_reference_book(&self, who: &str) {
        let book = self.books.get(INSTRUMENT).expect("the ESH4 book");
        assert_eq!(book.order_count(), 11_217, "{who}");
        assert_eq!((book.level_count(Side::Bid), book.level_count(Side::Ask)), (922, 565), "{who}");
        let (bid, ask) = book.bbo();
        assert_eq!(bid, Some(Level { price_e9: px(481_000), size: 22, orders: 22 }), "{who}");
        assert_eq!(ask, Some(Level { price_e9: px(481_025), size: 28, orders: 18 }), "{who}");
        let stats = self.rx.as_ref().expect("connected").stats();
        assert_eq!((stats.gaps, stats.missed, stats.corrupt), (0, 0, 0), "{who}");
        assert_eq!(self.end, Some(CloseReason::EndOfStream as u32), "{who}");
    }
}

/// A late joiner through a 4,096-record journal, with the agents stepped on one thread: its snapshot position
/// is held (by the conductor until the hot loop has the session, then by the hot loop until the joiner has
/// caught up), so it gets one snapshot, then every record after it, and the reference book; the subscriber
/// there from the start gets every record. A hold never let go would stop the feed for good (the watchdog).
#[test]
fn a_late_joiner_gets_one_snapshot_and_the_reference_book_through_a_small_journal() {
    // a ring that holds the whole capture and a snapshot: never full, read every step
    let (_, late, _) = late_joiner("catchup_hold_ms = 3600000\n", 131_072, 20_000, &mut |_, _, _| true);
    assert_eq!(late.snapshots, 1, "one snapshot, never replaced");
    assert!(late.book_records < RECORDS, "the late joiner got the records after its snapshot only");
    late.assert_reference_book("late");
}

/// How a stepped late joiner reads: it joins once the early subscriber has `join_at` records, and each step
/// `plan` says whether it reads, from (the early subscriber's records, the joiner's, paused now).
type Plan<'a> = dyn FnMut(u64, &Sub, bool) -> bool + 'a;

/// Steps the agents (`publisher_keys` more `[publisher]` lines) with an early subscriber (a ring that holds the
/// whole capture, read every step) and a late joiner with a ring of `late_slots`, read as `plan` says, until
/// both rings are closed (ended or dropped). Checks the early subscriber's book and the run's end; returns both
/// subscribers and the report.
fn late_joiner(
    publisher_keys: &str,
    late_slots: u32,
    join_at: u64,
    plan: &mut Plan<'_>,
) -> (Sub, Sub, mdfan_publisher::RunReport) {
    let (addr, progress, Agents { mut feed, mut fanout, mut conductor }) = agents(publisher_keys);
    let mut early = Sub::subscribe(addr, "early", 131_072);
    let mut late: Option<Sub> = None;
    let deadline = Instant::now() + WATCHDOG;
    let closed = |s: &Sub| s.rx.as_ref().is_some_and(|r| r.closed().is_some());
    while !(conductor.is_done() && early.end.is_some() && late.as_ref().is_some_and(closed)) {
        assert!(Instant::now() < deadline, "watchdog: not done after {WATCHDOG:?}");
        if !feed.is_done() {
            feed.do_work();
        }
        if !fanout.is_done() {
            fanout.do_work();
        }
        if !conductor.is_done() {
            conductor.do_work();
        }
        for sub in std::iter::once(&mut early).chain(late.as_mut()) {
            sub.step();
            if sub.accept.is_some() && sub.rx.is_none() {
                sub.connect_ring();
            }
        }
        if late.is_none() && early.book_records >= join_at {
            let mut l = Sub::subscribe(addr, "late", late_slots);
            l.paused = true;
            late = Some(l);
            let at = progress.records();
            assert!((join_at..RECORDS - 4096).contains(&at), "joined mid-stream at {at}");
        }
        if let Some(l) = late.as_mut() {
            l.paused = !plan(early.book_records, l, l.paused);
        }
    }
    let report = conductor.take_report().expect("a done conductor has the run report");
    assert_eq!((report.records, report.end), (RECORDS, CloseReason::EndOfStream));
    early.assert_reference_book("early");
    assert_eq!(early.book_records, RECORDS);
    (early, late.expect("the late joiner subscribed"), report)
}

/// [`late_joiner`] with a 1,024-slot ring (full long before its snapshot, the book's 11,000-odd orders, is
/// through), `publisher.catchup_hold_ms = 20` and a stall timeout of 10 minutes (so only the hold's bound lets
/// the feed go on while the joiner reads nothing).
fn stopped_joiner(join_at: u64, plan: &mut Plan<'_>) -> (Sub, Sub, mdfan_publisher::RunReport) {
    late_joiner("catchup_hold_ms = 20\nstall_timeout_ms = 600000\n", 1024, join_at, plan)
}

/// The joiner reads nothing until the early subscriber has the whole capture (which it can only have if the
/// joiner's hold was released), then reads: the journal has moved past its snapshot's position, so after that
/// snapshot it gets a fresh one and ends with the reference book.
#[test]
fn a_late_joiner_that_stops_reading_holds_the_journal_only_catchup_hold_ms() {
    let mut had_all_while_stopped = false;
    let (_, late, report) = stopped_joiner(20_000, &mut |early, l, paused| {
        if paused && early == RECORDS {
            had_all_while_stopped = l.rx.is_some() && l.book_records == 0 && l.snapshots == 0;
        }
        early == RECORDS
    });
    assert!(had_all_while_stopped, "the early subscriber had every record while the joiner read nothing");
    assert_eq!(late.snapshots, 2, "the first snapshot, then a fresh one: the journal moved past the first");
    assert!(late.book_records < RECORDS, "the late joiner got the records after its snapshots only");
    late.assert_reference_book("late");
    let (early, late) = (report.session("early").unwrap(), report.session("late").unwrap());
    assert_eq!((early.ring_full, early.snapshots), (0, 0), "{}", early.line());
    assert!(late.ring_full >= 1, "its catch-up found the ring full: {}", late.line());
    assert_eq!(late.snapshots, 2, "{}", late.line());
}

/// The same joiner reading again mid-stream, once its hold was released (the early subscriber is more than a
/// journal past where it was when the joiner joined): its fresh snapshot holds the journal again, so it catches
/// up once, with two snapshots, instead of falling off the journal snapshot after snapshot while the feed is
/// ahead of the hot loop.
#[test]
fn a_stopped_joiner_reading_again_mid_stream_catches_up_from_its_fresh_snapshot() {
    let (_, late, _) = stopped_joiner(20_000, &mut |early, _, _| early >= 20_000 + 4096 + 2_000);
    assert_eq!(late.snapshots, 2, "the first snapshot, then one fresh one that it caught up from");
    assert!(late.book_records < RECORDS, "{}", late.book_records);
    late.assert_reference_book("late");
}

/// A joiner that stops again at every snapshot it begins to read: each stop holds the journal full for
/// `catchup_hold_ms` and is released, [`mdfan_publisher::agent::MAX_HOLD_RELEASES`] times; the next stop drops it
/// as `stalled`, and the early subscriber never noticed.
#[test]
fn a_joiner_that_keeps_stopping_is_dropped_after_its_hold_releases() {
    assert_eq!(mdfan_publisher::agent::MAX_HOLD_RELEASES, 3);
    // (early's records when the joiner last stopped, the snapshots it had then)
    let mut stopped = (0u64, 0u64);
    let (_, late, report) = stopped_joiner(8_000, &mut |early, l, paused| {
        if paused {
            // more than a journal on since it stopped: its hold was released; read again
            return early > stopped.0.max(8_000) + 4096 + 500;
        }
        if l.snapshots > stopped.1 {
            stopped = (early, l.snapshots); // a snapshot began: stop again
            return false;
        }
        true
    });
    let s = report.session("late").unwrap();
    assert_eq!(s.end, Some(CloseReason::Stalled), "{}", s.line());
    assert_eq!(late.end, None, "dropped, not ended: {:?}", late.rx.as_ref().and_then(|r| r.closed()));
    assert_eq!(late.rx.as_ref().and_then(|r| r.closed()), Some(CloseReason::Stalled));
    // release 1: its first stop, before it read anything; then it stopped in the first snapshot (no hold: not
    // re-armed yet) and in the fresh ones that followed (releases 2 and 3); the stop in the third fresh one
    // would have been release 4
    assert_eq!(late.snapshots, 4, "the first snapshot and three fresh ones");
}

/// A `block` subscriber that reads nothing: the hot loop waits on its full ring (the stall timeout is 10 minutes)
/// until the shutdown flag is set (by another thread here, by SIGTERM in the binary). It was waited for, not
/// given up on: it is closed `publisher_shutdown`, not `stalled`.
#[test]
fn a_block_subscriber_waited_on_at_shutdown_is_closed_with_shutdown_not_stalled() {
    let (addr, _, shutdown, Agents { mut feed, mut fanout, mut conductor }) =
        agents_with_shutdown("policies = [\"block\"]\nstall_timeout_ms = 600000\n");
    let mut sub = Sub::subscribe_with(addr, "blocked", 1024, SlowConsumerPolicy::Block);
    sub.paused = true;
    let deadline = Instant::now() + WATCHDOG;
    let mut setter = None;
    while !conductor.is_done() {
        assert!(Instant::now() < deadline, "watchdog: not done after {WATCHDOG:?}");
        if !feed.is_done() {
            feed.do_work();
        }
        if !fanout.is_done() {
            fanout.do_work(); // spins in here once the ring is full, until the flag is set
        }
        if !conductor.is_done() {
            conductor.do_work();
        }
        sub.step();
        if sub.accept.is_some() && sub.rx.is_none() {
            sub.connect_ring();
            // its 1,024 slots fill within the first 1,024 records, a few ms: the flag comes long after
            let flag = Arc::clone(&shutdown);
            setter = Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }));
        }
    }
    setter.expect("the subscriber connected").join().unwrap();
    let report = conductor.take_report().expect("a done conductor has the run report");
    let s = report.session("blocked").unwrap();
    assert_eq!((s.end, s.sent), (Some(CloseReason::Shutdown), 1024), "{}", s.line());
    assert!(s.blocked_ns > 0, "the hot loop waited on it: {}", s.line());
    assert_eq!(report.end, CloseReason::Shutdown);
}
