//! LOBSTER message and order-book rows from a file someone downloaded: the input is split at its first 0 byte
//! into a message CSV and an order-book CSV (level 1 or 2: the first byte's low bit), replayed by
//! `feed::lobster::LobsterFeed`. A row may be refused (`LobsterError`: the replay stops there), nothing may panic.
//! Invariants: each message gives at least one record, the last (and only the last) carrying `F_LAST`, every record
//! on `INSTRUMENT_ID` with the venue seq = the message's line; applied to an `MbpBooks` the records give back the
//! order-book row after each message (levels 1..=LEVEL of each side).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_feed::lobster::{BookReader, LobsterFeed, MessageReader, INSTRUMENT_ID, PRICE_E9_PER_UNIT};
use mdfan_wire::{flags, MbpBooks, Side};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let levels = 1 + usize::from(first & 1);
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (messages, rows) = (&rest[..split], rest.get(split + 1..).unwrap_or(&[]));
    let path = std::path::Path::new("fuzz.csv");
    let mut feed = LobsterFeed::new(MessageReader::new(messages, path), BookReader::new(rows, path, levels), 0);
    let mut books = MbpBooks::with_capacity(1);
    let mut line = 0u64;
    while let Ok(Some((_, recs))) = feed.next_message() {
        line += 1;
        let recs = recs.as_slice();
        assert!(!recs.is_empty());
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.flags & flags::LAST != 0, i + 1 == recs.len(), "F_LAST on the last record only");
            assert_eq!(r.instrument_id, INSTRUMENT_ID);
            assert_eq!((r.venue_seq(), r.venue_index()), (line, i as u16));
            books.apply(r).expect("the feed's records apply");
        }
        let row = feed.row();
        for side in [Side::Ask, Side::Bid] {
            for (n, want) in row.side(side).iter().enumerate() {
                let got = books.get(INSTRUMENT_ID).and_then(|b| b.level(side, n + 1));
                let want = want.map(|l| (l.price * PRICE_E9_PER_UNIT, l.size));
                assert_eq!(got.map(|l| (l.price_e9, u64::from(l.size))), want, "line {line} {side:?} level {}", n + 1);
            }
        }
    }
});
