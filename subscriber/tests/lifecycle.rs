//! The subscriber's session state machine, driven by `Subscriber::maintain` as a strategy drives it (poll, then
//! `maintain_if_due`), in this process against a publisher: a reconnect after the publisher is killed and
//! restarted, giving up when the budget runs out, and no reconnect after an end the publisher chose (end of
//! stream, shutdown). Each test asserts the exact sequence of `Health` reports and `State`s a strategy sees.
//!
//! Shared memory only: the strategy here builds its config with the default fabric (the crate docs' state
//! machine is the same on verbs; `resilience.rs` runs the CLI's reconnect on both).

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use mdfan_subscriber::report::summary_line;
use mdfan_subscriber::{
    Books, CloseReason, End, Event, Health, Kind, Reconnect, State, SubscribeError, Subscriber, SubscriberConfig,
};

const PACE: &str = "pace = 500";

/// A minimal strategy: applies every book record, resets its books on `Reconnected`, and keeps every `Health`
/// report other than `Ok` and `Silent` (consecutive repeats dropped) with the `State` right after it.
struct Strategy {
    sub: Subscriber,
    books: Books,
    end_of_stream: bool,
    healths: Vec<Health>,
    states: Vec<State>,
}

impl Strategy {
    fn connect(cfg: &SubscriberConfig) -> Strategy {
        let sub = Subscriber::connect(cfg).expect("subscribes");
        assert_eq!(sub.state(), State::Live);
        Strategy { sub, books: Books::new(), end_of_stream: false, healths: Vec::new(), states: Vec::new() }
    }

    /// One turn of the loop: poll, then housekeeping when due.
    fn step(&mut self) {
        let (books, eos) = (&mut self.books, &mut self.end_of_stream);
        let n = self.sub.poll(256, |event| {
            if let Event::Record(r) = event {
                match r.kind() {
                    Some(Kind::EndOfStream) => *eos = true,
                    Some(Kind::Heartbeat | Kind::SnapshotEnd) => {}
                    _ => {
                        let _ = books.apply(r);
                    }
                }
            }
        });
        if n == 0 {
            std::thread::yield_now(); // two shared cores: leave them to the publisher
        }
        let Some(health) = self.sub.maintain_if_due() else { return };
        if matches!(health, Health::Ok | Health::Silent(_)) || self.healths.last() == Some(&health) {
            return;
        }
        if let Health::Reconnected { .. } = health {
            self.books = Books::new(); // a new stream from seq 1
        }
        self.healths.push(health);
        self.states.push(self.sub.state());
    }

    /// Steps until `done` holds; panics with what was seen if the watchdog passes first.
    fn run_until(&mut self, what: &str, done: impl Fn(&Strategy) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < watchdog(), "watchdog: no {what}; health reports so far: {:?}", self.healths);
            self.step();
        }
    }

    fn last_health(&self) -> Option<Health> {
        self.healths.last().copied()
    }

    /// The final book's summary line, asserted equal to the reference.
    fn assert_exact(&self) {
        let book = self.books.get(esh4::INSTRUMENT_ID).expect("a book");
        // The symbol comes from the accept of the current session (after a reconnect, the new one's).
        let line = summary_line(self.sub.symbology(), esh4::INSTRUMENT_ID, book, 0);
        assert!(line.starts_with("instrument=17077 symbol=ESH4 records="), "{line}");
        assert!(line.ends_with(&final_book()), "{line}");
    }
}

fn config(addr: SocketAddr, name: &str, reconnect: Option<Reconnect>) -> SubscriberConfig {
    let mut cfg = SubscriberConfig::new(&addr.to_string(), name);
    cfg.reconnect = reconnect;
    cfg
}

/// These tests build a shm subscriber in process.
fn shm_only() -> bool {
    if on_verbs() {
        eprintln!("skipped: shared memory only");
    }
    !on_verbs()
}

#[test]
fn a_killed_publisher_is_reconnected_to_once_it_is_back_and_the_books_end_exact() {
    if !shm_only() {
        return;
    }
    let (addr, dir, start) = publisher_process("lifecycle-restart", &esh4::main_file(), 1, PACE);
    let mut first = start();
    let policy = Reconnect { budget: Duration::from_secs(60), interval: Duration::from_millis(100) };
    let mut s = Strategy::connect(&config(addr, "restarts", Some(policy)));
    assert_eq!(s.sub.session_id(), 1);
    s.run_until("records", |s| s.sub.stats().records > 1_000);
    first.child.kill().unwrap(); // SIGKILL mid-stream: no Bye, the control connection just closes
    let _ = first.finish();
    // Nobody listens now: each try is refused. Restart the publisher after the second failed try.
    s.run_until("a second failed try", |s| s.last_health() == Some(Health::Reconnecting { tries: 2 }));
    match s.sub.reconnect_error() {
        Some(SubscribeError::Connect { endpoint, .. }) => assert_eq!(endpoint, &addr.to_string()),
        other => panic!("expected a refused connection, got {other:?}"),
    }
    assert_eq!(s.sub.stats().reconnects, 0);
    let second = start();
    s.run_until("the reconnection", |s| matches!(s.last_health(), Some(Health::Reconnected { .. })));
    assert!(s.sub.reconnect_error().is_none());
    s.run_until("the end of stream", |s| s.end_of_stream);
    s.run_until("the end", |s| matches!(s.last_health(), Some(Health::Ended(_))));
    assert_eq!(second.finish().0, Some(0));
    let _ = std::fs::remove_dir_all(&dir);

    let eos = End::Closed(CloseReason::EndOfStream);
    assert_eq!(
        s.healths,
        [
            Health::Reconnecting { tries: 0 },
            Health::Reconnecting { tries: 1 },
            Health::Reconnecting { tries: 2 },
            Health::Reconnected { session_id: 1 }, // the restarted publisher's first session
            Health::Ended(eos),
        ]
    );
    assert_eq!(
        s.states,
        [
            State::Reconnecting { tries: 0 },
            State::Reconnecting { tries: 1 },
            State::Reconnecting { tries: 2 },
            State::Live,
            State::Ended(eos),
        ]
    );
    let stats = s.sub.stats();
    // the new session's whole stream, from seq 1: every record, the end-of-stream one and heartbeats included
    assert_eq!((stats.reconnects, stats.gaps, stats.missed), (1, 0, 0), "{stats:?}");
    s.assert_exact();
    // Ended is for good: maintain says it again, poll finds nothing
    assert_eq!(s.sub.maintain(), Health::Ended(eos));
    assert_eq!(s.sub.poll(256, |_| {}), 0);
}

#[test]
fn a_killed_publisher_that_stays_away_ends_the_subscription_when_the_budget_runs_out() {
    if !shm_only() {
        return;
    }
    let (addr, dir, start) = publisher_process("lifecycle-giveup", &esh4::main_file(), 1, PACE);
    let mut publisher = start();
    // A zero budget: one try, then give up (a longer budget makes more tries, as many as fit in it).
    let policy = Reconnect { budget: Duration::ZERO, interval: Duration::from_millis(100) };
    let mut s = Strategy::connect(&config(addr, "gives-up", Some(policy)));
    s.run_until("records", |s| s.sub.stats().records > 1_000);
    publisher.child.kill().unwrap();
    let _ = publisher.finish();
    let _ = std::fs::remove_dir_all(&dir);
    s.run_until("the end", |s| matches!(s.last_health(), Some(Health::Ended(_))));

    let gave_up = End::GaveUp { tries: 1 };
    assert_eq!(s.healths, [Health::Reconnecting { tries: 0 }, Health::Ended(gave_up)]);
    assert_eq!(s.states, [State::Reconnecting { tries: 0 }, State::Ended(gave_up)]);
    assert_eq!((gave_up.as_str(), gave_up.reason()), ("publisher_gone", None));
    assert!(matches!(s.sub.reconnect_error(), Some(SubscribeError::Connect { .. })), "{:?}", s.sub.reconnect_error());
    assert_eq!(s.sub.stats().reconnects, 0);
    assert_eq!(s.sub.maintain(), Health::Ended(gave_up));
}

/// With a reconnect policy, the end of stream and a publisher's shutdown are still ends: never reconnected.
#[test]
fn an_end_the_publisher_chose_is_not_reconnected() {
    if !shm_only() {
        return;
    }
    let policy = Some(Reconnect::within(Duration::from_secs(60)));
    // the whole (short) capture, to its end of stream
    let publisher = start_publisher(&esh4::snapshot_file(), 1, "");
    let mut s = Strategy::connect(&config(publisher.addr, "to-the-end", policy));
    s.run_until("the end", |s| matches!(s.last_health(), Some(Health::Ended(_))));
    publisher.handle.join().unwrap().unwrap();
    let eos = End::Closed(CloseReason::EndOfStream);
    assert!(s.end_of_stream);
    assert_eq!(
        (s.healths.as_slice(), s.states.as_slice()),
        ([Health::Ended(eos)].as_slice(), [State::Ended(eos)].as_slice())
    );
    assert_eq!(s.sub.stats().reconnects, 0);

    // a paced replay, shut down mid-stream (what SIGINT does to mdfan-publisher)
    let publisher = start_publisher(&esh4::main_file(), 1, PACE);
    let mut s = Strategy::connect(&config(publisher.addr, "shut-down", policy));
    s.run_until("records", |s| s.sub.stats().records > 1_000);
    publisher.shutdown.store(true, Ordering::Relaxed);
    s.run_until("the end", |s| matches!(s.last_health(), Some(Health::Ended(_))));
    let _ = publisher.handle.join().unwrap();
    let shutdown = End::Closed(CloseReason::Shutdown);
    assert_eq!(
        (s.healths.as_slice(), s.states.as_slice()),
        ([Health::Ended(shutdown)].as_slice(), [State::Ended(shutdown)].as_slice())
    );
    assert_eq!((shutdown.as_str(), s.sub.stats().reconnects), ("publisher_shutdown", 0));
}

/// `connect_with_retry` while nobody listens: one try without a policy or with a zero budget (its own error),
/// several within a budget (then the count, the budget and the last error).
#[test]
fn connect_with_retry_tries_within_the_budget_and_says_how_many_tries() {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let refused = |r: Result<Subscriber, SubscribeError>| match r {
        Err(SubscribeError::Connect { endpoint, .. }) => assert_eq!(endpoint, addr.to_string()),
        Err(e) => panic!("expected a refused connection, got {e}"),
        Ok(_) => panic!("nobody listens at {addr}"),
    };
    refused(Subscriber::connect_with_retry(&config(addr, "once", None), || false));
    let zero = Reconnect { budget: Duration::ZERO, interval: Duration::from_millis(100) };
    refused(Subscriber::connect_with_retry(&config(addr, "zero", Some(zero)), || false));
    // asked to stop before the first wait: one try
    let budget = Reconnect::within(Duration::from_millis(350));
    refused(Subscriber::connect_with_retry(&config(addr, "stopped", Some(budget)), || true));
    match Subscriber::connect_with_retry(&config(addr, "retries", Some(budget)), || false) {
        Err(e @ SubscribeError::GaveUp { .. }) => {
            let SubscribeError::GaveUp { tries, budget: b, ref source } = e else { unreachable!() };
            // 350 ms at one try per 100 ms: at least 2 tries (the first at 0 ms cannot exhaust the budget)
            assert!(tries >= 2, "{e}");
            assert_eq!(b, Duration::from_millis(350));
            assert!(matches!(**source, SubscribeError::Connect { .. }), "{e}");
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("gave up after {tries} tries in 350 ms: publisher {addr}: cannot connect")),
                "{text}"
            );
        }
        Err(e) => panic!("expected GaveUp, got {e}"),
        Ok(_) => panic!("nobody listens at {addr}"),
    }
}

/// `connect_with_retry` against a publisher that dies during the handshake (it accepts the control connection
/// and closes it before answering, as a publisher killed or restarting then does): a reconnect policy tries
/// again within its budget, as for one not up yet; without a policy the one try's own error.
#[test]
fn connect_with_retry_tries_again_when_the_publisher_goes_away_during_the_handshake() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = std::sync::Arc::clone(&accepted);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            count.fetch_add(1, Ordering::Relaxed);
            drop(conn); // closed before any answer
        }
    });
    let gone = |e: &SubscribeError| matches!(e, SubscribeError::Control { .. }) && e.is_transient();
    match Subscriber::connect_with_retry(&config(addr, "no-policy", None), || false) {
        Err(e) => assert!(gone(&e), "{e}"),
        Ok(_) => panic!("the publisher at {addr} never answers"),
    }
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
    let budget = Reconnect::within(Duration::from_millis(350));
    match Subscriber::connect_with_retry(&config(addr, "retries", Some(budget)), || false) {
        Err(SubscribeError::GaveUp { tries, source, .. }) => {
            assert!(tries >= 2, "{tries} tries");
            assert!(gone(&source), "{source}");
            assert_eq!(accepted.load(Ordering::Relaxed), 1 + tries);
        }
        Err(e) => panic!("expected GaveUp after several tries, got {e}"),
        Ok(_) => panic!("the publisher at {addr} never answers"),
    }
}

/// The reconnect rule, for every way a session ends.
#[test]
fn only_a_vanished_publisher_or_a_broken_transport_allows_reconnecting() {
    let reasons = [
        CloseReason::EndOfStream,
        CloseReason::RingFull,
        CloseReason::Shutdown,
        CloseReason::FabricError,
        CloseReason::Stalled,
        CloseReason::PeerGone,
        CloseReason::ProtocolError,
    ];
    for r in reasons {
        assert_eq!(End::Closed(r).allows_reconnect(), r == CloseReason::FabricError, "{r:?}");
        assert!(!End::Bye(r).allows_reconnect(), "{r:?}");
        assert_eq!((End::Closed(r).as_str(), End::Bye(r).reason()), (r.as_str(), Some(r)));
    }
    assert!(End::Vanished.allows_reconnect());
    assert!(!End::GaveUp { tries: 3 }.allows_reconnect());
    assert_eq!(End::Vanished.as_str(), "publisher_gone");
}
