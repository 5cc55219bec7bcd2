//! CME MDP 3.0 packets from an untrusted network: the input is one UDP payload, decoded by
//! `feed::mdp3::Mdp3Decoder` and its book entries normalised and applied to `MbpBooks`. A packet may be refused
//! (`DecodeError`), a record may be refused (`MbpError`), nothing may panic. A refused packet must deliver no
//! event and count as bad; an accepted one must count its messages by template exactly as it reports them. The
//! simulator's `SecurityID` rewrite (`map_security_ids`) leaves a packet it refuses as it was, and what it writes
//! decodes. The lean path a price-level handler takes (`decode_book_packet`) gives the same result, the same book
//! entries and gaps, and the same counters as `decode_packet`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_feed::mdp3::{book_record, stale_record, BookEntry, BookSink, Event, Mdp3Decoder, Mdp3Stats, MessageInfo};
use mdfan_wire::MbpBooks;

fuzz_target!(|data: &[u8]| {
    let mut dec = Mdp3Decoder::with_capacity(16);
    let mut books = MbpBooks::with_capacity(16);
    let mut events = 0u64;
    let mut seen = Vec::new(); // the book entries and gaps, as (entry, or gap's (security, expected, got, index))
    let mut next_book = 0u16; // the BookEntry::index the packet's next book entry may take, at the least
    let res = dec.decode_packet(data, 1, |info, ev| {
        events += 1;
        match *ev {
            Event::Book(e) => seen.push((*info, Some(e), None)),
            Event::RptSeqGap { security_id, expected, got, book_index } => {
                seen.push((*info, None, Some((security_id, expected, got, book_index))))
            }
            _ => {}
        }
        let r = match ev {
            Event::Book(e) => {
                // entries are numbered in packet order, those not delivered (a stale RptSeq) counted too
                assert!(e.index >= next_book, "book entry index {} after {next_book}", e.index);
                next_book = e.index.saturating_add(1);
                book_record(info, e)
            }
            Event::RptSeqGap { security_id, expected, got, .. } => stale_record(info, *security_id, *expected, *got),
            _ => return,
        };
        let _ = books.apply(&r); // a refused record (level 0, a 17th instrument) is fine here
    });
    let s = dec.stats();
    match res {
        Err(e) => {
            assert_eq!(events, 0, "a refused packet delivered events: {e}");
            assert_eq!((s.bad_packets, s.packets, s.messages), (1, 0, 0));
        }
        Ok(out) => {
            assert_eq!((s.bad_packets, s.packets), (0, 1));
            assert_eq!(s.messages, u64::from(out.messages));
            assert!(s.templates.iter().sum::<u64>() <= s.messages);
        }
    }
    let mut lean = Mdp3Decoder::with_capacity(16);
    let mut sink = Seen(Vec::new());
    assert_eq!(lean.decode_book_packet(data, 1, &mut sink), res, "lean path's result");
    assert_eq!(sink.0, seen, "lean path's events");
    assert_eq!(Mdp3Stats { book_path_packets: 0, ..lean.stats().clone() }, *dec.stats(), "lean path's counters");
    let mut copy = data.to_vec();
    match mdfan_feed::mdp3::map_security_ids(&mut copy, |id| id.wrapping_add(1) & i32::MAX) {
        Err(_) => assert_eq!(copy, data, "a refused packet is left as it was"),
        Ok(_) => {
            let mut fresh = Mdp3Decoder::with_capacity(16);
            if let Err(e) = fresh.decode_packet(&copy, 1, |_, _| {}) {
                panic!("a rewritten packet does not decode: {e}");
            }
        }
    }
});

type Entry = (MessageInfo, Option<BookEntry>, Option<(i32, u32, u32, u16)>);

/// What the lean path handed on.
struct Seen(Vec<Entry>);

impl BookSink for Seen {
    fn book(&mut self, info: &MessageInfo, entry: &BookEntry) {
        self.0.push((*info, Some(*entry), None));
    }
    fn rpt_seq_gap(&mut self, info: &MessageInfo, security_id: i32, expected: u32, got: u32, book_index: u16) {
        self.0.push((*info, None, Some((security_id, expected, got, book_index))));
    }
}
