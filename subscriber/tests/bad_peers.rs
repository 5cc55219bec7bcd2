//! Bad peers: a subscriber pointed at a dead endpoint, and garbage on the publisher's control endpoint. The
//! publisher refuses each bad message with a reason and goes on serving the good subscriber.

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;

use common::*;
use mdfan_wire::control::{self, ControlMsg};

#[test]
fn a_dead_endpoint_is_one_line_naming_it() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("127.0.0.1:{port}");
    let out = Command::new(bin("mdfan-subscribe")).args(["--connect", &endpoint]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("publisher {endpoint}: cannot connect")), "{err}");
}

/// A listener on this host that holds connections half made until data comes (`TCP_DEFER_ACCEPT`) has no
/// connected socket to say which user it is (sock_diag reports its request socket as uid 0): the subscriber sends
/// it nothing, neither its token nor its ring, and says why (a breaker's fake publisher, run as nobody this
/// way, got a strategy's token past the check of the publisher's user).
#[test]
fn a_listener_deferring_its_accept_is_sent_nothing() {
    use std::os::fd::AsRawFd as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let seconds: libc::c_int = 5;
    // SAFETY: setsockopt reads `seconds` (an int, its size given) during the call only.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&seconds as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    let endpoint = listener.local_addr().unwrap().to_string();
    let mut cfg = mdfan_subscriber::SubscriberConfig::new(&endpoint, "wary");
    cfg.token = Some("9c1e0b7d6a5f4e3d2c1b0a9f8e7d6c5b".into());
    let err = mdfan_subscriber::Subscriber::connect(&cfg).err().expect("refused").to_string();
    assert_eq!(
        err,
        format!(
            "publisher {endpoint}: on this host, but no connected socket answers there to say which user listens (a \
             listener deferring its accept?): nothing sent to it"
        )
    );
    // the connection, closed, reaches the listener with its end and not one byte
    listener.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(10)),
            Err(e) => panic!("the closed connection never reached the listener: {e}"),
        }
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut conn, &mut got).unwrap();
    assert!(got.is_empty(), "the subscriber sent {} bytes", got.len());
}

fn send_raw(addr: std::net::SocketAddr, bytes: &[u8]) -> Result<ControlMsg, control::ControlError> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    control::read_msg(&mut s)
}

fn rejected(reply: Result<ControlMsg, control::ControlError>) -> String {
    match reply {
        Ok(ControlMsg::Reject(r)) => r.reason,
        other => panic!("expected a reject, got {other:?}"),
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[test]
fn bad_control_messages_are_refused_with_a_reason_and_the_publisher_goes_on() {
    let publisher = start_publisher(&esh4::snapshot_file(), 1, "");
    let addr = publisher.addr;

    let r = rejected(send_raw(addr, &frame(br#"{"v":0,"msg":{"type":"bye","reason":"old"}}"#)));
    assert!(
        r.contains("version 0 is not supported")
            && r.contains(&format!("speaks version {}", control::PROTOCOL_VERSION)),
        "{r}"
    );
    let r = rejected(send_raw(addr, &frame(b"\x00\x01garbage\xff")));
    assert!(r.contains("malformed"), "{r}");
    let r = rejected(send_raw(addr, &u32::MAX.to_le_bytes()));
    assert!(r.contains("exceeds"), "{r}");
    let r = rejected(send_raw(addr, &frame(br#"{"v":6,"msg":{"type":"bye","reason":"peer_gone"}}"#)));
    assert_eq!(r, "expected a subscribe message, got bye");
    let r = rejected(send_raw(
        addr,
        &frame(br#"{"v":6,"msg":{"type":"subscribe","name":"x","instruments":null,"ring":{"fabric":"shm","path":"/etc/passwd","slot_count":64}}}"#),
    ));
    assert!(r.contains("/etc/passwd") && r.contains("path must be"), "{r}");
    let r = rejected(send_raw(
        addr,
        &frame(br#"{"v":6,"msg":{"type":"subscribe","name":"x","instruments":null,"ring":{"fabric":"shm","path":"/dev/shm/mdfan-ring-x","slot_count":1000}}}"#),
    ));
    assert!(r.contains("ring.slot_count") && r.contains("1000"), "{r}");
    // a ring on another fabric than the one this publisher serves
    let r = rejected(send_raw(
        addr,
        &frame(br#"{"v":6,"msg":{"type":"subscribe","name":"x","instruments":null,"ring":{"fabric":"verbs","endpoint":{"qpn":1,"psn":2,"gid":"00000000000000000000ffff7f000001","lid":0},"ring_addr":4096,"ring_rkey":7,"slot_count":1024}}}"#),
    ));
    assert_eq!(r, "field ring: a verbs ring was offered to an end that serves fabric shm");
    // truncated: a length that promises more than is sent, then the peer goes away
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&frame(br#"{"v":6,"msg""#)[..10]).unwrap();
    }

    // the publisher still serves a real subscriber to the end
    assert_serves_the_snapshot_book(addr);
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!(report.sessions.len(), 1);
    assert_eq!(report.sessions[0].sent - report.sessions[0].heartbeats, esh4::SNAPSHOT_RECORDS + 1);
}

#[test]
fn a_bad_ring_size_is_a_usage_error_before_connecting() {
    let out = Command::new(bin("mdfan-subscribe"))
        .args(["--connect", "127.0.0.1:1", "--ring-slots", "100"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--ring-slots: ring slot_count 100 must be a power of two"), "{err}");
}

#[test]
fn a_peer_that_drips_bytes_cannot_hold_the_handshake() {
    // Accepts, promises a 4 KiB frame, then sends one byte every 300 ms: each read succeeds, the frame never
    // completes. The subscriber gives up after its handshake timeout (2 s) in all.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dripper = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.write_all(&4096u32.to_le_bytes());
        for _ in 0..30 {
            std::thread::sleep(std::time::Duration::from_millis(300));
            if s.write_all(b"x").is_err() {
                break;
            }
        }
    });
    let out = Command::new(bin("mdfan-subscribe")).args(["--connect", &addr.to_string()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("publisher {addr}: control: no answer within 2s")), "{err}");
    dripper.join().unwrap();
}

/// A client that floods snapshot requests (5,000 in one write): past its rate
/// (`publisher.snapshot_requests_per_s`, 10) each request is refused and counted, and at 4 s' worth refused the
/// session is ended (`protocol_error`, naming the flood); the snapshots it got are what its rate allows, not one
/// per delivery. The other subscriber gets the whole replay, exact.
#[test]
fn a_snapshot_request_flood_is_rate_limited_counted_and_ended_and_others_are_served() {
    use mdfan_fabric::shm::{ShmLocalRing, DEFAULT_DIR};
    use mdfan_wire::control::{SlowConsumerPolicy, SnapshotRequest, Subscribe};
    let publisher = start_publisher(&esh4::main_file(), 2, "");
    let addr = publisher.addr;
    // a client with a real ring of its own, that floods snapshot requests
    let (local, grant) = ShmLocalRing::create(std::path::Path::new(DEFAULT_DIR), 64).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let sub = ControlMsg::Subscribe(Subscribe { policy: SlowConsumerPolicy::Resync, ..Subscribe::new("flood", grant) });
    control::write_msg(&mut s, &sub).unwrap();
    assert!(matches!(control::read_msg(&mut s), Ok(ControlMsg::Accept(_))));
    // the second subscriber starts the replay; the flood comes once it is attached
    let mut good = Watched::new(spawn_subscriber(addr, "good", &[]));
    good.wait_for_line("subscribed ");
    let req = control::encode(&ControlMsg::SnapshotRequest(SnapshotRequest { gap_from_seq: 1 }));
    let flood: Vec<u8> = req.iter().copied().cycle().take(req.len() * 5000).collect();
    s.write_all(&flood).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let bye = loop {
        match control::read_msg(&mut s) {
            Ok(ControlMsg::Bye(bye)) => break bye,
            Ok(_) => {}
            Err(e) => panic!("the flooding client gets a bye: {e}"),
        }
    };
    assert_eq!(bye.reason, mdfan_fabric::CloseReason::ProtocolError, "{bye:?}");
    assert_eq!(
        bye.detail,
        "snapshot request flood: 40 refused in a row past the limit of 10 a second (publisher.snapshot_requests_per_s)"
    );
    let (code, lines, err) = good.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_clean(&lines, "good");
    drop(s);
    drop(local);
    let report = publisher.handle.join().unwrap().unwrap();
    let flood = report.session("flood").unwrap();
    assert_eq!(flood.end, Some(mdfan_fabric::CloseReason::ProtocolError), "{}", flood.line());
    // 40 in a row ended it; a token that came back meanwhile served one request and restarted the run, so the
    // total may be higher (46 in one CI run), never lower
    assert!(flood.snapshot_requests_refused >= 40, "{}", flood.line());
    // a burst of 10 taken, 10 more a second while the flood was read (served, or collapsed into a pending
    // one), the others refused: nowhere near one per request
    assert!((10..100).contains(&flood.snapshot_requests), "{}", flood.snapshot_requests);
    assert!(flood.snapshots <= flood.snapshot_requests, "{} snapshots", flood.snapshots);
}

/// Runs one `mdfan-subscribe` against `addr` (replaying the snapshot file) and checks it ends with the
/// start-of-day book.
fn assert_serves_the_snapshot_book(addr: std::net::SocketAddr) {
    let good = wait_with_watchdog(spawn_subscriber(addr, "good", &[]));
    let lines = stdout_lines(&good);
    assert_eq!(good.status.code(), Some(0), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("instrument=17077 symbol=ESH4 records=8725 gaps=0 last_seq=691 orders=8725")),
        "{lines:?}"
    );
}

/// Usage mistakes are usage errors (exit 2, one line saying what is wrong), found before connecting.
#[test]
fn usage_mistakes_exit_2_naming_the_flag() {
    let sub = |args: &[&str]| {
        let out = Command::new(bin("mdfan-subscribe")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = sub(&["--connect", "127.0.0.1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("\"127.0.0.1\" has no port: use HOST:PORT"), "{err}");
    let (code, err) = sub(&["--connect", "127.0.0.1:http"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("port \"http\" is not a number"), "{err}");
    let beyond = mdfan_tuning::allowed_cores().iter().max().copied().unwrap_or(0) + 1;
    let (code, err) = sub(&["--core", &beyond.to_string()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("--core {beyond}: this process may run on cores")), "{err}");
}

/// With `--reconnect-ms`, a publisher that never comes up ends in one line saying how many tries were made.
#[test]
fn a_reconnect_budget_that_runs_out_says_how_many_tries() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = Command::new(bin("mdfan-subscribe"))
        .args(["--connect", &format!("127.0.0.1:{port}"), "--reconnect-ms", "350"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("gave up after ") && err.contains(" tries in 350 ms (--reconnect-ms)"), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
}
