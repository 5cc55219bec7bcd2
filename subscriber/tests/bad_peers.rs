//! Bad peers: a subscriber pointed at a dead endpoint, and garbage on the publisher's control endpoint. The
//! publisher refuses each bad message with a reason and goes on serving the good subscriber.

#[path = "support/mod.rs"]
mod common;
#[path = "../../wire/tests/support/esh4.rs"]
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
    let out = Command::new(env!("CARGO_BIN_EXE_mdfan-subscribe")).args(["--connect", &endpoint]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("publisher {endpoint}: cannot connect")), "{err}");
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
    assert!(r.contains("version 0 is not supported") && r.contains("speaks version 1"), "{r}");
    let r = rejected(send_raw(addr, &frame(b"\x00\x01garbage\xff")));
    assert!(r.contains("malformed"), "{r}");
    let r = rejected(send_raw(addr, &u32::MAX.to_le_bytes()));
    assert!(r.contains("exceeds"), "{r}");
    let r = rejected(send_raw(addr, &frame(br#"{"v":1,"msg":{"type":"bye","reason":"x"}}"#)));
    assert!(r.contains("expected a subscribe message"), "{r}");
    let r = rejected(send_raw(
        addr,
        &frame(br#"{"v":1,"msg":{"type":"subscribe","name":"x","instruments":null,"ring":{"fabric":"shm","path":"/etc/passwd","slot_count":64}}}"#),
    ));
    assert!(r.contains("/etc/passwd") && r.contains("path must be"), "{r}");
    let r = rejected(send_raw(
        addr,
        &frame(br#"{"v":1,"msg":{"type":"subscribe","name":"x","instruments":null,"ring":{"fabric":"shm","path":"/dev/shm/mdfan-ring-x","slot_count":1000}}}"#),
    ));
    assert!(r.contains("ring.slot_count") && r.contains("1000"), "{r}");
    // truncated: a length that promises more than is sent, then the peer goes away
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&frame(br#"{"v":1,"msg""#)[..10]).unwrap();
    }

    // the publisher still serves a real subscriber to the end
    let good = wait_with_watchdog(spawn_subscriber(addr, "good", &[]));
    let lines = stdout_lines(&good);
    assert_eq!(good.status.code(), Some(0), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("instrument=17077 records=8725 gaps=0 last_seq=691 orders=8725")),
        "{lines:?}"
    );
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!(report.sessions.len(), 1);
    assert_eq!(report.sessions[0].sent - report.sessions[0].heartbeats, esh4::SNAPSHOT_RECORDS + 1);
}
