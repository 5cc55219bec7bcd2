//! Decodes MoldUDP64 packets of ITCH 5.0 into a book, with the feed crate's decoder and normaliser.
#![allow(dead_code)]

use mdfan_feed::itch::{decode_message, ItchNormalizer};
use mdfan_feed::moldudp64::Packet;
use mdfan_wire::Books;

/// The receiver's side: every message through `decode_message` + `ItchNormalizer` into `wire::Books`.
pub struct ItchBook {
    pub norm: ItchNormalizer,
    pub books: Books,
    pub messages: u64,
}

impl ItchBook {
    pub fn new(midnight_ns: u64) -> ItchBook {
        ItchBook { norm: ItchNormalizer::new(midnight_ns, 16_384), books: Books::new(), messages: 0 }
    }

    /// One message, in sequence order.
    pub fn message(&mut self, seq: u64, offset: usize, msg: &[u8]) {
        let m = decode_message(msg, offset as u64).unwrap_or_else(|e| panic!("seq {seq}: {e}"));
        for r in self.norm.normalize(&m, seq, 0).as_slice() {
            self.books.apply(r).unwrap_or_else(|e| panic!("seq {seq}: {e:?}"));
        }
        self.messages += 1;
    }

    /// Every message of one downstream packet.
    pub fn packet(&mut self, payload: &[u8]) {
        let p = Packet::parse(payload).unwrap();
        for b in p.messages() {
            self.message(b.sequence_number, b.offset, b.message);
        }
    }
}
