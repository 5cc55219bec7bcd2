//! The MoldUDP64 session receiver with exact sequences: gaps filled by answers (in order and out of order),
//! a request retried then given up, foreign sessions, count/bytes mismatches, duplicates, heartbeats, end of
//! session, the window bound and the jump guard (a stray packet far ahead held, a confirmed jump taken).

use mdfan_feed::mold_session::{
    parse_request, Origin, SessionConfig, SessionError, SessionEvent, SessionReceiver, Start,
};
use mdfan_feed::moldudp64::{MoldError, END_OF_SESSION};

const SESSION: &[u8; 10] = b"000010059B";
const MS: u64 = 1_000_000;

/// A downstream packet of `session` whose messages are `first, first+1, ...`, each message the 8 bytes of its
/// sequence number (so a test can check what came out).
fn packet_of(session: &[u8; 10], first: u64, n: u16) -> Vec<u8> {
    let mut p = session.to_vec();
    p.extend_from_slice(&first.to_be_bytes());
    p.extend_from_slice(&n.to_be_bytes());
    if n != END_OF_SESSION {
        for s in first..first + u64::from(n) {
            p.extend_from_slice(&8u16.to_be_bytes());
            p.extend_from_slice(&s.to_be_bytes());
        }
    }
    p
}

fn packet(first: u64, n: u16) -> Vec<u8> {
    packet_of(SESSION, first, n)
}

/// [`packet`] with bytes changed: each `(back, mask)` XORs `mask` into the byte `back` bytes from the end (1: the
/// last byte, that of the last message).
fn packet_changed(first: u64, n: u16, changes: &[(usize, u8)]) -> Vec<u8> {
    let mut p = packet(first, n);
    let len = p.len();
    for &(back, mask) in changes {
        p[len - back] ^= mask;
    }
    p
}

/// What came out, in a comparable form.
#[derive(Debug, PartialEq, Eq)]
enum Out {
    /// seq, retransmitted
    Msg(u64, bool),
    /// seq, count, attempt
    Req(u64, u16, u32),
    Hole(u64, u64),
    /// the lowest seq whose copies differed
    Mismatch(u64),
    End(u64),
}

struct Rx {
    rx: SessionReceiver,
    out: Vec<Out>,
}

impl Rx {
    fn new(cfg: SessionConfig) -> Rx {
        Rx { rx: SessionReceiver::new(cfg), out: Vec::new() }
    }

    fn push(&mut self, payload: &[u8], origin: Origin) -> Result<(), SessionError> {
        let out = &mut self.out;
        self.rx.on_packet(payload, origin, 7, &mut |e| out.push(conv(e)))
    }

    fn tick(&mut self, now_ns: u64) {
        let out = &mut self.out;
        self.rx.tick(now_ns, &mut |e| out.push(conv(e)));
    }

    fn take(&mut self) -> Vec<Out> {
        std::mem::take(&mut self.out)
    }
}

fn conv(e: SessionEvent<'_>) -> Out {
    match e {
        SessionEvent::Message { seq, retransmitted, message, ts_recv_ns } => {
            assert_eq!(message, seq.to_be_bytes(), "the message of seq {seq}");
            assert_eq!(ts_recv_ns, 7);
            Out::Msg(seq, retransmitted)
        }
        SessionEvent::Request { packet, seq, count, attempt } => {
            assert_eq!(parse_request(&packet), Some((*SESSION, seq, count)));
            // The spec's layout, byte for byte: session, seq u64 BE, count u16 BE.
            assert_eq!(&packet[..10], SESSION);
            assert_eq!(packet[10..18], seq.to_be_bytes());
            assert_eq!(packet[18..20], count.to_be_bytes());
            Out::Req(seq, count, attempt)
        }
        SessionEvent::Hole { first, last } => Out::Hole(first, last),
        SessionEvent::CopyMismatch { seq } => Out::Mismatch(seq),
        SessionEvent::EndOfSession { next_seq } => Out::End(next_seq),
    }
}

fn msgs(seqs: std::ops::RangeInclusive<u64>, retransmitted: bool) -> Vec<Out> {
    seqs.map(|s| Out::Msg(s, retransmitted)).collect()
}

#[test]
fn a_gap_is_filled_by_the_answer_to_its_request() {
    let mut rx = Rx::new(SessionConfig { start: Start::One, ..SessionConfig::default() });
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    rx.push(&packet(5, 2), Origin::LineA).unwrap(); // 3 and 4 lost
    assert_eq!(rx.take(), msgs(1..=2, false));
    assert!(rx.rx.has_hole());
    rx.tick(0);
    // The span from the oldest hole to the highest sequence number known: 3..=6 (5 and 6 would come back as
    // duplicates; this server sends only what was missing).
    assert_eq!(rx.take(), [Out::Req(3, 4, 1)]);
    rx.tick(10 * MS); // within the timeout: nothing
    assert_eq!(rx.take(), []);
    rx.push(&packet(3, 2), Origin::Retransmission).unwrap();
    let mut want = msgs(3..=4, true);
    want.extend(msgs(5..=6, false));
    assert_eq!(rx.take(), want);
    rx.tick(20 * MS);
    assert_eq!(rx.take(), []);
    let c = *rx.rx.counters();
    assert_eq!(
        (c.messages, c.retransmitted_messages, c.gaps, c.requests, c.retries, c.given_up_holes, c.packets),
        (6, 2, 1, 1, 0, 0, [2, 0, 1])
    );
    assert_eq!(rx.rx.next_seq(), 7);
}

#[test]
fn answers_out_of_order_and_in_parts_are_merged_in_order() {
    // Starts at the first packet seen (N = 1: its word is taken; the start rule has its own test).
    let mut rx = Rx::new(SessionConfig { confirm_packets: 1, ..SessionConfig::default() });
    rx.push(&packet(100, 1), Origin::LineA).unwrap();
    rx.push(&packet(110, 1), Origin::LineA).unwrap(); // 101..=109 lost
    rx.tick(0);
    assert_eq!(rx.take(), [Out::Msg(100, false), Out::Req(101, 10, 1)]);
    // The server answers in three packets; the last part arrives first.
    rx.push(&packet(107, 3), Origin::Retransmission).unwrap();
    rx.push(&packet(104, 3), Origin::Retransmission).unwrap();
    assert_eq!(rx.take(), []);
    rx.push(&packet(101, 3), Origin::Retransmission).unwrap();
    let mut want = msgs(101..=109, true);
    want.push(Out::Msg(110, false));
    assert_eq!(rx.take(), want);
    // A part answer: the rest of the span is asked for once the timeout passes, as a first try again.
    rx.push(&packet(120, 1), Origin::LineA).unwrap();
    rx.tick(MS);
    rx.push(&packet(111, 4), Origin::Retransmission).unwrap();
    rx.tick(2 * MS);
    let mut want = vec![Out::Req(111, 10, 1)];
    want.extend(msgs(111..=114, true));
    assert_eq!(rx.take(), want);
    rx.tick(51 * MS);
    assert_eq!(rx.take(), [Out::Req(115, 6, 1)]);
    assert_eq!((rx.rx.counters().requests, rx.rx.counters().retries), (3, 0));
}

#[test]
fn a_request_that_times_out_is_retried_then_the_exact_hole_is_given_up() {
    let cfg = SessionConfig { start: Start::One, request_timeout_ns: 50 * MS, retries: 2, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 3), Origin::LineA).unwrap();
    rx.push(&packet(8, 2), Origin::LineB).unwrap(); // 4..=7 lost on both lines
    rx.tick(0);
    rx.tick(49 * MS);
    rx.tick(50 * MS);
    rx.tick(100 * MS);
    rx.tick(149 * MS);
    assert!(rx.rx.has_hole());
    rx.tick(150 * MS); // the last try timed out
    let mut want = msgs(1..=3, false);
    // The span 4..=9 is asked for (8 and 9 are held); after the last try its one hole is given up.
    want.extend([Out::Req(4, 6, 1), Out::Req(4, 6, 2), Out::Req(4, 6, 3), Out::Hole(4, 7)]);
    want.extend(msgs(8..=9, false));
    assert_eq!(rx.take(), want);
    assert!(!rx.rx.has_hole());
    // The answer comes after all: late copies are duplicates.
    rx.push(&packet(4, 4), Origin::Retransmission).unwrap();
    assert_eq!(rx.take(), []);
    let c = *rx.rx.counters();
    assert_eq!(
        (c.requests, c.retries, c.given_up_holes, c.given_up_messages, c.duplicates, c.messages),
        (3, 2, 1, 4, 4, 5)
    );
}

#[test]
fn without_a_request_server_a_hole_waits_one_timeout_for_the_other_line() {
    let cfg =
        SessionConfig { requests: false, request_timeout_ns: 10 * MS, confirm_packets: 1, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 1), Origin::LineA).unwrap();
    rx.push(&packet(3, 1), Origin::LineA).unwrap();
    rx.push(&packet(6, 1), Origin::LineA).unwrap();
    rx.tick(0);
    rx.push(&packet(2, 1), Origin::LineB).unwrap(); // line B had 2
    rx.tick(5 * MS);
    rx.tick(15 * MS);
    assert_eq!(
        rx.take(),
        [Out::Msg(1, false), Out::Msg(2, false), Out::Msg(3, false), Out::Hole(4, 5), Out::Msg(6, false)]
    );
    assert_eq!(rx.rx.counters().requests, 0);
}

#[test]
fn a_foreign_session_and_a_count_that_disagrees_with_the_bytes_are_counted_and_dropped() {
    let mut rx = Rx::new(SessionConfig { start: Start::One, ..SessionConfig::default() });
    rx.push(&packet(1, 1), Origin::LineA).unwrap();
    let e = rx.push(&packet_of(b"000010059D", 2, 1), Origin::LineA).unwrap_err();
    assert_eq!(e, SessionError::ForeignSession { expected: *SESSION, got: *b"000010059D", seq: 2 });
    assert_eq!(
        e.to_string(),
        "MoldUDP64 packet seq 2, field session: \"000010059D\" is not this receiver's session \"000010059B\""
    );
    // Count 3, two messages' bytes.
    let mut bad = packet(2, 2);
    bad[19] = 3;
    let e = rx.push(&bad, Origin::LineB).unwrap_err();
    assert_eq!(
        e,
        SessionError::Malformed(MoldError::Truncated {
            sequence_number: 2,
            message_count: 3,
            message: 3,
            field: "message length",
            offset: 40
        })
    );
    // Count 1, two messages' bytes.
    bad[19] = 1;
    assert!(matches!(rx.push(&bad, Origin::LineB), Err(SessionError::Malformed(MoldError::TrailingBytes { .. }))));
    rx.push(&packet(2, 1), Origin::LineB).unwrap();
    assert_eq!(rx.take(), msgs(1..=2, false));
    let c = *rx.rx.counters();
    assert_eq!((c.foreign_session, c.bad_packets, c.messages, c.packets), (1, 2, 2, [2, 3, 0]));
}

/// Line B's copy of 50..=52 carries other bytes in 51 and 52 (a line that carries what the venue did not send):
/// reported once, after the packet, at the lowest (51), and counted per message; an identical copy (the
/// re-request server's) is a plain duplicate; a copy that differs in 50 alone is reported at 50. Nothing is
/// delivered twice.
#[test]
fn copies_of_a_message_already_handed_out_that_differ_are_reported() {
    let mut rx = Rx::new(SessionConfig { confirm_packets: 1, ..SessionConfig::default() });
    rx.push(&packet(50, 3), Origin::LineA).unwrap();
    assert_eq!(rx.take(), msgs(50..=52, false));
    // 52's last byte, and 51's (2 length bytes + 8 message bytes further back)
    let forged = packet_changed(50, 3, &[(1, 1), (11, 1)]);
    rx.push(&forged, Origin::LineB).unwrap();
    assert_eq!(rx.take(), [Out::Mismatch(51)]);
    rx.push(&packet(50, 3), Origin::Retransmission).unwrap();
    assert_eq!(rx.take(), []);
    rx.push(&packet_changed(50, 1, &[(1, 0x80)]), Origin::Retransmission).unwrap();
    assert_eq!(rx.take(), [Out::Mismatch(50)]);
    let c = *rx.rx.counters();
    assert_eq!((c.messages, c.duplicates, c.copy_mismatches), (3, 7, 3));
}

#[test]
fn a_held_packet_and_a_copy_grouped_otherwise_at_its_sequence_number_are_no_mismatch() {
    // Line A's first packet (1..=3) waits for its confirmation; line B's at the same sequence number carries
    // 1..=2 only (another grouping of the same messages): packets of different counts are not copies of each
    // other, so nothing differs; the messages are compared once handed out. Then a changed copy of 2 is one.
    let mut rx = Rx::new(SessionConfig { confirm_packets: 2, ..SessionConfig::default() });
    rx.push(&packet(1, 3), Origin::LineA).unwrap();
    rx.push(&packet(1, 2), Origin::LineB).unwrap();
    assert_eq!(rx.take(), []);
    rx.push(&packet(4, 1), Origin::LineA).unwrap();
    assert_eq!(rx.take(), msgs(1..=4, false));
    rx.push(&packet_changed(2, 1, &[(1, 1)]), Origin::LineB).unwrap();
    assert_eq!(rx.take(), [Out::Mismatch(2)]);
    let c = *rx.rx.counters();
    assert_eq!((c.messages, c.copy_mismatches), (4, 1));
}

#[test]
fn duplicates_from_both_lines_and_double_answers_are_dropped() {
    let mut rx = Rx::new(SessionConfig { confirm_packets: 1, ..SessionConfig::default() });
    rx.push(&packet(50, 3), Origin::LineA).unwrap();
    rx.push(&packet(50, 3), Origin::LineB).unwrap();
    rx.push(&packet(55, 1), Origin::LineB).unwrap();
    rx.push(&packet(55, 1), Origin::LineA).unwrap(); // waiting already
    rx.tick(0);
    rx.push(&packet(53, 2), Origin::Retransmission).unwrap();
    rx.push(&packet(53, 2), Origin::Retransmission).unwrap();
    let mut want = msgs(50..=52, false);
    want.push(Out::Req(53, 3, 1));
    want.extend(msgs(53..=54, true));
    want.push(Out::Msg(55, false));
    assert_eq!(rx.take(), want);
    assert_eq!((rx.rx.counters().duplicates, rx.rx.counters().messages), (3 + 1 + 2, 6));
}

#[test]
fn heartbeats_reveal_a_gap_at_the_tail_and_end_of_session_ends_after_it() {
    // (the end taken at the first tick after it: `an_end_of_session_is_held_until_no_message_contradicts_it`)
    let cfg = SessionConfig {
        retries: 0,
        request_timeout_ns: MS,
        confirm_packets: 1,
        end_confirm_ns: 0,
        ..SessionConfig::default()
    };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(10, 2), Origin::LineA).unwrap();
    rx.push(&packet(12, 0), Origin::LineA).unwrap(); // heartbeat: next is 12, nothing missing
    rx.tick(0);
    assert_eq!(rx.take(), msgs(10..=11, false));
    rx.push(&packet(14, 0), Origin::LineA).unwrap(); // heartbeat: 12 and 13 were sent and lost
    rx.tick(0);
    assert_eq!(rx.take(), [Out::Req(12, 2, 1)]);
    rx.push(&packet(14, END_OF_SESSION), Origin::LineA).unwrap();
    assert_eq!(rx.take(), [], "the end waits for the hole");
    rx.push(&packet(12, 1), Origin::Retransmission).unwrap();
    rx.tick(MS); // 13 never comes: no retry (retries 0), given up
    assert_eq!(rx.take(), [Out::Msg(12, true), Out::Req(13, 1, 1)]);
    rx.tick(2 * MS);
    assert_eq!(rx.take(), [Out::Hole(13, 13), Out::End(14)]);
    assert!(rx.rx.is_ended());
    rx.push(&packet(14, 1), Origin::LineA).unwrap();
    assert_eq!(rx.take(), [], "nothing after the end");
    let c = *rx.rx.counters();
    assert_eq!((c.heartbeats, c.gaps, c.given_up_holes), (2, 1, 1));
}

#[test]
fn a_message_past_the_window_gives_up_the_oldest_hole_and_says_so() {
    let cfg = SessionConfig { start: Start::One, window_messages: 8, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 1), Origin::LineA).unwrap();
    rx.push(&packet(4, 2), Origin::LineA).unwrap(); // 2, 3 missing; 4, 5 wait
    rx.push(&packet(12, 1), Origin::LineA).unwrap(); // 12 - 2 >= 8: 2..=4 must make room
    let mut want = vec![Out::Msg(1, false), Out::Hole(2, 3)];
    want.extend(msgs(4..=5, false));
    assert_eq!(rx.take(), want);
    assert_eq!(rx.rx.next_seq(), 6);
    rx.push(&packet(6, 6), Origin::LineB).unwrap();
    assert_eq!(rx.take(), msgs(6..=12, false));
    let c = *rx.rx.counters();
    assert_eq!((c.overflow_holes, c.given_up_holes, c.given_up_messages), (1, 1, 2));
}

#[test]
fn random_bytes_never_panic() {
    let mut rx = SessionReceiver::new(SessionConfig { window_messages: 4, ..SessionConfig::default() });
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut p = packet((x % 64) + 1, (x >> 8) as u16 % 4);
        if x.is_multiple_of(5) {
            let at = (x >> 16) as usize % p.len();
            p[at] ^= (x >> 24) as u8;
        }
        if x.is_multiple_of(7) {
            p.truncate((x >> 32) as usize % p.len());
        }
        let _ = rx.on_packet(&p, Origin::LineA, i, &mut |_| {});
        rx.tick(i * MS, &mut |_| {});
    }
}

#[test]
fn a_dead_server_gives_up_every_hole_of_a_span_at_once_not_one_hole_per_timeout() {
    let cfg = SessionConfig { start: Start::One, request_timeout_ns: 50 * MS, retries: 1, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    rx.push(&packet(4, 1), Origin::LineA).unwrap(); // 3 lost
    rx.push(&packet(6, 2), Origin::LineA).unwrap(); // 5 lost
    rx.tick(0);
    rx.tick(50 * MS);
    rx.tick(99 * MS);
    assert!(rx.rx.has_hole());
    rx.tick(100 * MS); // the last try timed out: both holes of the span 3..=7 go
    let mut want = msgs(1..=2, false);
    want.extend([Out::Req(3, 5, 1), Out::Req(3, 5, 2), Out::Hole(3, 3), Out::Msg(4, false), Out::Hole(5, 5)]);
    want.extend(msgs(6..=7, false));
    assert_eq!(rx.take(), want);
    let c = *rx.rx.counters();
    assert_eq!((c.requests, c.retries, c.given_up_holes, c.given_up_messages, c.messages), (2, 1, 2, 2, 5));
}

/// The adversarial packet: the right session, sequence number 10^12, one message.
const STRAY: u64 = 1_000_000_000_000;

#[test]
fn a_stray_packet_far_ahead_is_held_and_the_stream_goes_on() {
    let cfg = SessionConfig { start: Start::One, window_messages: 16, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 3), Origin::LineA).unwrap();
    rx.push(&packet(STRAY, 1), Origin::LineA).unwrap();
    assert!(!rx.rx.has_hole(), "a held suspect opens no hole");
    rx.push(&packet(4, 3), Origin::LineA).unwrap();
    rx.push(&packet(4, 3), Origin::LineB).unwrap();
    rx.tick(0);
    rx.tick(10_000 * MS);
    rx.push(&packet(7, 2), Origin::LineB).unwrap();
    // A packet exactly at the window's edge past the highest known (9 + 16) is a suspect too; one just
    // inside it (9 + 15 = 24) is an ordinary gap.
    rx.push(&packet(25, 1), Origin::LineA).unwrap();
    assert_eq!(rx.take(), msgs(1..=8, false));
    assert!(!rx.rx.has_hole());
    rx.push(&packet(9, 3), Origin::LineA).unwrap();
    rx.push(&packet(12, 0), Origin::LineA).unwrap(); // heartbeat
    rx.push(&packet(12, END_OF_SESSION), Origin::LineA).unwrap();
    rx.tick(20_000 * MS);
    rx.tick(22_000 * MS); // the end taken once nothing contradicted it for end_confirm_ns (1 s)
    let mut want = msgs(9..=11, false);
    want.push(Out::End(12));
    assert_eq!(rx.take(), want);
    let c = *rx.rx.counters();
    assert_eq!(
        (c.jumps_held, c.jumps_taken, c.jumps_dropped, c.gaps, c.requests, c.given_up_holes, c.given_up_messages),
        (2, 0, 1, 0, 0, 0, 0)
    );
    assert_eq!((c.messages, c.duplicates), (11, 3));
}

#[test]
fn a_real_jump_is_taken_when_a_second_packet_continuing_it_confirms_it() {
    // N = 2 (the default 3 has its own test below): the hole handling after a confirmed jump.
    let cfg = SessionConfig {
        start: Start::One,
        confirm_packets: 2,
        window_messages: 16,
        retries: 0,
        request_timeout_ns: MS,
        ..SessionConfig::default()
    };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    // After an outage the stream is at 1,000: the first packet there is held ...
    rx.push(&packet(1_000, 2), Origin::LineA).unwrap();
    rx.tick(0);
    assert_eq!(rx.take(), msgs(1..=2, false));
    assert!(!rx.rx.has_hole());
    // ... the next one (line B's, continuing from it) confirms it: the hole 3..=999 is handled as today for
    // messages past the window (each gives up as few of the oldest as make room), the rest is requested, and
    // both packets go out in order.
    rx.push(&packet(1_002, 2), Origin::LineB).unwrap();
    let mut want = vec![Out::Hole(3, 984), Out::Hole(985, 985), Out::Hole(986, 986), Out::Hole(987, 987)];
    assert_eq!(rx.take(), want);
    assert!(rx.rx.has_hole());
    rx.tick(0);
    assert_eq!(rx.take(), [Out::Req(988, 16, 1)]);
    rx.tick(MS); // no retry: given up
    want = vec![Out::Hole(988, 999)];
    want.extend(msgs(1_000..=1_003, false));
    assert_eq!(rx.take(), want);
    assert!(!rx.rx.has_hole());
    let c = *rx.rx.counters();
    assert_eq!(
        (c.jumps_held, c.jumps_taken, c.jumps_dropped, c.gaps, c.overflow_holes, c.given_up_messages, c.messages),
        (1, 1, 0, 1, 4, 997, 6)
    );
}

#[test]
fn a_second_stray_that_does_not_confirm_the_first_replaces_it() {
    let cfg = SessionConfig { start: Start::One, window_messages: 16, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    rx.push(&packet(STRAY, 1), Origin::LineA).unwrap(); // held
    rx.push(&packet(3, 1), Origin::LineA).unwrap(); // in the window: processed, the suspect stays held
    rx.push(&packet(500, 1), Origin::LineB).unwrap(); // far from the held one: replaces it
    rx.push(&packet(4, 1), Origin::LineA).unwrap();
    rx.push(&packet(STRAY + 1, 1), Origin::LineA).unwrap(); // would have confirmed the first: replaces 500
    rx.push(&packet(5, 1), Origin::LineA).unwrap();
    rx.push(&packet(510, 1), Origin::LineB).unwrap(); // near 500, but 500 is gone: replaces STRAY + 1
    rx.tick(0);
    assert_eq!(rx.take(), msgs(1..=5, false));
    assert!(!rx.rx.has_hole());
    let c = *rx.rx.counters();
    assert_eq!((c.jumps_held, c.jumps_taken, c.jumps_dropped, c.gaps, c.requests), (4, 0, 3, 0, 0));
    // The last one held is still confirmable: 511 and 512 continue 510 (N = 3).
    rx.push(&packet(511, 1), Origin::LineA).unwrap();
    rx.push(&packet(512, 1), Origin::LineB).unwrap();
    let want = vec![Out::Hole(6, 494), Out::Hole(495, 495), Out::Hole(496, 496)];
    assert_eq!(rx.take(), want);
    let c = *rx.rx.counters();
    assert_eq!((c.jumps_held, c.jumps_taken, c.overflow_holes), (5, 1, 3));
}

#[test]
fn a_stray_before_the_feed_or_on_both_lines_confirms_nothing() {
    // The attacks on `start = "first_seen"` (default N = 3): one packet with sequence number STRAY
    // before the feed, sent to both lines, sets no start; the feed's first three packets do.
    let mut rx = Rx::new(SessionConfig { window_messages: 16, ..SessionConfig::default() });
    rx.push(&packet(STRAY, 1), Origin::LineA).unwrap();
    rx.push(&packet(STRAY, 1), Origin::LineB).unwrap();
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    rx.push(&packet(1, 2), Origin::LineB).unwrap();
    rx.push(&packet(3, 1), Origin::LineB).unwrap();
    assert_eq!(rx.take(), []);
    rx.push(&packet(4, 2), Origin::LineA).unwrap();
    assert_eq!(rx.take(), msgs(1..=5, false));
    // Mid-stream: the same stray on both lines is one copy, held and never taken; the stream goes on.
    for origin in [Origin::LineA, Origin::LineB] {
        rx.push(&packet(STRAY + 7, 1), origin).unwrap();
    }
    rx.push(&packet(6, 2), Origin::LineB).unwrap();
    rx.tick(0);
    assert_eq!(rx.take(), msgs(6..=7, false));
    let c = *rx.rx.counters();
    // Duplicates: the second copy of each stray, and line B's copy of packet 1 (one copy: it was held).
    assert_eq!((c.jumps_held, c.jumps_taken, c.jumps_dropped, c.gaps, c.requests), (1, 0, 1, 0, 0));
    assert_eq!((c.messages, c.duplicates), (7, 3));
}

/// An end-of-session packet anyone could forge (the session's name, the next sequence number, count 0xFFFF) does
/// not end the day alone: a message packet at or past its sequence number contradicts it (counted, the stream goes
/// on); one that nothing contradicts for `end_confirm_ns` of the caller's clock is taken.
#[test]
fn an_end_of_session_is_held_until_no_message_contradicts_it() {
    let cfg = SessionConfig { start: Start::One, end_confirm_ns: 2_000 * MS, ..SessionConfig::default() };
    let mut rx = Rx::new(cfg);
    rx.push(&packet(1, 2), Origin::LineA).unwrap();
    rx.push(&packet(3, END_OF_SESSION), Origin::LineB).unwrap(); // forged: the venue's stream goes on at 3
    rx.tick(0);
    rx.tick(1_000 * MS);
    assert_eq!(rx.take(), msgs(1..=2, false), "held, not taken");
    rx.push(&packet(3, 2), Origin::LineA).unwrap();
    rx.tick(5_000 * MS);
    assert_eq!(rx.take(), msgs(3..=4, false), "contradicted: the stream goes on, no end");
    assert!(!rx.rx.is_ended());
    assert_eq!(rx.rx.counters().ends_contradicted, 1);
    // The venue's end: taken once 2 s pass with no message at or past it (a copy on the other line changes
    // nothing), counted from the first tick after it.
    rx.push(&packet(5, END_OF_SESSION), Origin::LineA).unwrap();
    rx.push(&packet(5, END_OF_SESSION), Origin::LineB).unwrap();
    rx.tick(6_000 * MS);
    rx.tick(7_999 * MS);
    assert_eq!(rx.take(), [], "within end_confirm_ns");
    rx.tick(8_000 * MS);
    assert_eq!(rx.take(), [Out::End(5)]);
    assert!(rx.rx.is_ended());
    assert_eq!(rx.rx.counters().ends_contradicted, 1);
}
