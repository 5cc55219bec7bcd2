//! CME MDP 3.0 packets from an untrusted network: the input is one UDP payload, decoded by
//! `feed::mdp3::Mdp3Decoder` and its book entries normalised and applied to `MbpBooks`. A packet may be refused
//! (`DecodeError`), a record may be refused (`MbpError`), nothing may panic. A refused packet must deliver no
//! event and count as bad; an accepted one must count its messages by template exactly as it reports them. The
//! simulator's `SecurityID` rewrite (`map_security_ids`) leaves a packet it refuses as it was, and what it writes
//! decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_feed::mdp3::{book_record, stale_record, Event, Mdp3Decoder};
use mdfan_wire::MbpBooks;

fuzz_target!(|data: &[u8]| {
    let mut dec = Mdp3Decoder::with_capacity(16);
    let mut books = MbpBooks::with_capacity(16);
    let mut events = 0u64;
    let mut next_book = 0u16; // the BookEntry::index the packet's next book entry may take, at the least
    let res = dec.decode_packet(data, 1, |info, ev| {
        events += 1;
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
