//! The MDP 3.0 hot path allocates nothing: decoding every packet of feed A, normalising its book entries and
//! applying them to `MbpBooks` (reserved up front) makes no heap allocation. A counting global allocator, in a
//! test binary of its own so no other test's allocations are counted.

use std::path::PathBuf;

use mdfan_feed::mdp3::{book_record, stale_record, Event, Mdp3Decoder};
use mdfan_feed::pcap::read_udp_pcapng;
use mdfan_wire::MbpBooks;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::calls_during;

#[test]
fn decoding_normalising_and_applying_feed_a_allocates_nothing() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap");
    let cap = read_udp_pcapng(&path).unwrap();
    let a: Vec<_> = cap.packets.iter().filter(|p| p.dst.port() == 14_320).collect();
    assert_eq!(a.len(), 5_000);
    let mut dec = Mdp3Decoder::with_capacity(64);
    let mut books = MbpBooks::with_capacity(64);
    let (mut records, mut errors) = (0u64, 0u64);
    let (calls, ()) = calls_during(|| {
        for p in &a {
            let out = dec.decode_packet(&p.payload, p.ts_ns, |info, ev| {
                let r = match ev {
                    Event::Book(e) => book_record(info, e),
                    Event::RptSeqGap { security_id, expected, got, .. } => {
                        stale_record(info, *security_id, *expected, *got)
                    }
                    _ => return,
                };
                records += 1;
                errors += u64::from(books.apply(&r).is_err());
            });
            errors += u64::from(out.is_err());
        }
    });
    assert_eq!((records, errors), (5_848, 0));
    assert_eq!(calls.allocations, 0, "heap allocations while decoding");
}
