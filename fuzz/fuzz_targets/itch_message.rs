//! Nasdaq TotalView-ITCH 5.0 messages from a file or the wire: the input is a BinaryFILE stream (2-byte
//! big-endian length, then the message), read by `feed::itch::ItchFile` and each message normalised by
//! `ItchNormalizer`. A message may be refused (`ItchFileError`: the stream stops there), nothing may panic.
//! Invariants: the file reader consumes exactly the length prefixes and messages it hands out (offsets are
//! contiguous), each message gives at most 3 records, the last of which carries `F_LAST`, and the normaliser
//! counts every message it gave no record for; a message also decodes alone (`decode_message`) to the same
//! result as through the file, and `ItchFile::next_into` (the publisher's path: decode and normalise in one
//! call) gives the same records as `next_message` then `normalize_at`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mdfan_feed::itch::{decode_message, ItchFile, ItchNormalizer, Records};
use mdfan_wire::flags;

fuzz_target!(|data: &[u8]| {
    let mut file = ItchFile::from_reader(std::path::Path::new("fuzz.itch"), data);
    let mut norm = ItchNormalizer::new(0, 64);
    let mut out = Records::default();
    let (mut file_into, mut norm_into) =
        (ItchFile::from_reader(std::path::Path::new("fuzz.itch"), data), ItchNormalizer::new(0, 64));
    let mut out_into = Records::default();
    let (mut next_offset, mut n, mut empty) = (0u64, 0u64, 0u64);
    loop {
        let Ok(Some((offset, m))) = file.next_message() else { break };
        assert_eq!(offset, next_offset, "messages are contiguous");
        let len = u64::from(u16::from_be_bytes([data[offset as usize], data[offset as usize + 1]]));
        next_offset = offset + 2 + len;
        let body = &data[offset as usize + 2..next_offset as usize];
        assert_eq!(decode_message(body, offset).as_ref(), Ok(&m), "alone as through the file");
        n += 1;
        let (no_record, unknown, stale_before) = (
            norm.stats().no_record.iter().sum::<u64>(),
            norm.stats().unknown_references(),
            norm.stats().too_many_shares,
        );
        norm.normalize_at(&m, n, 0, offset, &mut out);
        let recs = out.as_slice();
        assert_eq!(
            file_into.next_into(&mut norm_into, n, &mut out_into).ok().flatten(),
            Some(offset),
            "next_into: {m:?}"
        );
        assert_eq!(out_into.as_slice(), recs, "next_into gives next_message's records: {m:?}");
        assert!(recs.len() <= 3);
        if let Some(last) = recs.last() {
            assert_ne!(last.flags & flags::LAST, 0, "the last record of a message carries F_LAST");
            assert!(recs[..recs.len() - 1].iter().all(|r| r.flags & flags::LAST == 0));
            assert!(recs.iter().enumerate().all(|(i, r)| (r.venue_seq(), r.venue_index()) == (n, i as u16)));
        } else {
            empty += 1;
            let s = norm.stats();
            let counted = s.no_record.iter().sum::<u64>() - no_record
                + (s.unknown_references() - unknown)
                + (s.too_many_shares - stale_before);
            // An unknown reference seen again on a locate already stale gives no record and is counted once.
            assert!(counted >= 1 || s.duplicate_reference > 0, "a message with no record is counted: {m:?}");
        }
    }
    assert!(next_offset <= data.len() as u64);
    assert_eq!(file.stats().messages, u64::from(n));
    assert!(norm.stats().skipped.total() <= empty);
});
