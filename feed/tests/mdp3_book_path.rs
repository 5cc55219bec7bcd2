//! `Mdp3Decoder::decode_book_packet` (the lean path a price-level handler takes) against `decode_packet` (the full
//! decoder): over the bundled capture, lines A and B through one decoder (so B's copies are stale), and over the
//! capture's packets corrupted at random. Each packet must give the same result, the same book entries and
//! `RptSeq` gaps in the same order, and the same counters; the capture's packets must take the lean path.

use std::net::SocketAddrV4;

use mdfan_feed::mdp3::{BookEntry, BookSink, DecodeError, Event, Mdp3Decoder, Mdp3Stats, MessageInfo, PacketOutcome};
use mdfan_feed::pcap::read_udp_pcapng;
use proptest::prelude::*;

#[path = "support/mdp3.rs"]
mod mdp3_ref;

/// What a book handler sees of one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Book(MessageInfo, BookEntry),
    Gap { info: MessageInfo, security_id: i32, expected: u32, got: u32, book_index: u16 },
}

#[derive(Default)]
struct Collect(Vec<Seen>);

impl BookSink for Collect {
    fn book(&mut self, info: &MessageInfo, entry: &BookEntry) {
        self.0.push(Seen::Book(*info, *entry));
    }
    fn rpt_seq_gap(&mut self, info: &MessageInfo, security_id: i32, expected: u32, got: u32, book_index: u16) {
        self.0.push(Seen::Gap { info: *info, security_id, expected, got, book_index });
    }
}

/// Both decoders, fed the same packets.
struct Pair {
    full: Mdp3Decoder,
    lean: Mdp3Decoder,
}

impl Pair {
    fn new() -> Pair {
        Pair { full: Mdp3Decoder::with_capacity(64), lean: Mdp3Decoder::with_capacity(64) }
    }

    /// Decodes `payload` both ways and checks they agree. Returns the result.
    fn check(&mut self, payload: &[u8]) -> Result<PacketOutcome, DecodeError> {
        let mut want = Vec::new();
        let full = self.full.decode_packet(payload, 7, |info, ev| match *ev {
            Event::Book(e) => want.push(Seen::Book(*info, e)),
            Event::RptSeqGap { security_id, expected, got, book_index } => {
                want.push(Seen::Gap { info: *info, security_id, expected, got, book_index })
            }
            _ => {}
        });
        let mut got = Collect::default();
        let lean = self.lean.decode_book_packet(payload, 7, &mut got);
        assert_eq!(lean, full, "result of {payload:02x?}");
        assert_eq!(got.0, want, "events of {payload:02x?}");
        assert_eq!(without_book_path(self.lean.stats()), *self.full.stats(), "counters after {payload:02x?}");
        full
    }
}

fn without_book_path(s: &Mdp3Stats) -> Mdp3Stats {
    Mdp3Stats { book_path_packets: 0, ..s.clone() }
}

/// Line A's and line B's packets (UDP payloads), in capture order.
type Lines = (Vec<Vec<u8>>, Vec<Vec<u8>>);

fn capture() -> Lines {
    let cap = read_udp_pcapng(&mdp3_ref::capture_path()).expect("bundled capture reads");
    let (a, b): (SocketAddrV4, SocketAddrV4) =
        ("224.0.31.11:14320".parse().unwrap(), "224.0.32.11:15320".parse().unwrap());
    let line = |g| cap.packets.iter().filter(|p| p.dst == g).map(|p| p.payload.clone()).collect::<Vec<_>>();
    (line(a), line(b))
}

#[test]
fn the_capture_takes_the_lean_path_and_decodes_as_the_full_decoder() {
    let (a, b) = capture();
    assert_eq!((a.len(), b.len()), (5_000, 5_000));
    let mut pair = Pair::new();
    for (pa, pb) in a.iter().zip(&b) {
        assert!(!pair.check(pa).unwrap().stale);
        assert!(pair.check(pb).unwrap().stale); // line B's copy of the same MsgSeqNum
    }
    let s = pair.lean.stats();
    // every packet of both lines on the lean path; line A's counts (the capture's README)
    assert_eq!((s.book_path_packets, s.packets, s.stale_packets, s.messages), (10_000, 5_000, 5_000, 5_299));
    assert_eq!((s.rpt_seq_entries, s.rpt_seq_gaps, s.packet_gaps, s.bad_packets), (6_195, 0, 0, 0));
}

#[test]
fn a_gap_in_the_middle_of_the_day_shows_alike_on_both_paths() {
    let (a, _) = capture();
    let mut pair = Pair::new();
    // every third packet lost: MsgSeqNum and RptSeq jumps, gap events before book and non-book entries
    for p in a.iter().step_by(3) {
        pair.check(p).unwrap();
    }
    let s = pair.lean.stats();
    assert_eq!(s.book_path_packets, 1_667);
    assert_eq!(
        (s.rpt_seq_entries, s.rpt_seq_gaps, s.packet_gaps, s.packets_missed),
        (2_042, 1_384, 1_666, 3_332),
        "{s:?}"
    );
}

/// A corruption of a capture packet: bytes overwritten at random (most of them in the message headers and group
/// dimensions near the front), and maybe a cut.
fn corrupted() -> impl Strategy<Value = (usize, Vec<(usize, u8)>, Option<usize>)> {
    (0usize..5_000, proptest::collection::vec((0usize..96, any::<u8>()), 1..4), proptest::option::of(0usize..200))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    /// A packet corrupted anywhere is refused, or decoded, alike by both paths, with the same counters; the
    /// decoders keep their state from one case to the next (RptSeq of the capture's securities).
    #[test]
    fn a_corrupted_packet_gives_the_same_result_on_both_paths(cases in proptest::collection::vec(corrupted(), 1..20)) {
        let (a, _) = capture_once();
        let mut pair = Pair::new();
        for (i, edits, cut) in cases {
            let mut p = a[i].clone();
            for (at, v) in edits {
                let at = at % p.len();
                p[at] = v;
            }
            if let Some(cut) = cut {
                p.truncate(cut.min(p.len()));
            }
            pair.check(&p).ok();
        }
    }
}

fn capture_once() -> &'static Lines {
    static CAPTURE: std::sync::OnceLock<Lines> = std::sync::OnceLock::new();
    CAPTURE.get_or_init(capture)
}
