//! Instrument definitions a live feed learns while it runs, handed from the feed thread to the conductor: a
//! Nasdaq ITCH Stock Directory (`R`) message, or a CME MDP 3.0 instrument definition (template 27, 29, 41 on a
//! channel's definition feed).
//!
//! One rtrb SPSC queue ([`definition_queue`]) of fixed-size, `Copy` entries ([`DefinitionEntry`]: nothing is
//! allocated on the feed thread). The feed thread never waits on it: an entry that finds the queue full is
//! dropped and counted ([`DefinitionReceiver::dropped`]; the conductor logs it). The conductor drains it every
//! pass (before it answers handshakes) into its `Symbology`; a later definition of an instrument replaces the
//! earlier one (and the feed's own replaces a symbol file's). Subscribers attaching from then on can subscribe
//! by those symbols and get the definitions in their `Accept` (an `Accept` is the only way definitions reach a
//! subscriber).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_wire::{InstrumentDef, Symbology};

/// One definition as the feed thread hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefinitionEntry {
    /// An ITCH 5.0 Stock Directory message ([`crate::live_itch::DirectoryEntry`]).
    Stock(crate::live_itch::DirectoryEntry),
    /// An MDP 3.0 instrument definition from channel `channel`.
    Mdp3 {
        /// The channel id (`[[feed.channels]]` `id`; 0 for `[lines]`' one channel).
        channel: u16,
        /// The definition as decoded.
        definition: mdfan_feed::mdp3::InstrumentDefinition,
    },
}

impl DefinitionEntry {
    /// The definition the symbology keeps; `None` for an MDP 3.0 symbol that is empty or not printable ASCII.
    pub fn definition(&self) -> Option<InstrumentDef> {
        match self {
            DefinitionEntry::Stock(d) => Some(d.definition()),
            DefinitionEntry::Mdp3 { definition, .. } => definition.instrument_def(),
        }
    }
}

/// A definition queue of `entries` entries, allocated here: the feed thread's end and the conductor's.
pub fn definition_queue(entries: usize) -> (DefinitionSender, DefinitionReceiver) {
    let (tx, rx) = rtrb::RingBuffer::new(entries);
    let dropped = Arc::new(AtomicU64::new(0));
    (DefinitionSender { tx, dropped: Arc::clone(&dropped) }, DefinitionReceiver { rx, dropped, refused: 0 })
}

/// The feed thread's end of the definition queue ([module docs](self)).
pub struct DefinitionSender {
    tx: rtrb::Producer<DefinitionEntry>,
    dropped: Arc<AtomicU64>,
}

impl DefinitionSender {
    /// Hands `entry` on without waiting: if the queue is full it is dropped and counted (`false`).
    #[inline]
    pub fn send(&mut self, entry: DefinitionEntry) -> bool {
        let sent = self.tx.push(entry).is_ok();
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Entries dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The conductor's end of the definition queue ([module docs](self)).
pub struct DefinitionReceiver {
    rx: rtrb::Consumer<DefinitionEntry>,
    dropped: Arc<AtomicU64>,
    refused: u64,
}

impl DefinitionReceiver {
    /// Inserts the definition of every entry waiting into `symbology`, in the order they came (a later one of
    /// the same instrument replaces the earlier); returns how many went in. An MDP 3.0 definition without a
    /// usable symbol is counted ([`DefinitionReceiver::refused`]) and left out.
    pub fn drain_into(&mut self, symbology: &mut Symbology) -> usize {
        let mut n = 0;
        while let Ok(entry) = self.rx.pop() {
            match entry.definition() {
                Some(def) => {
                    symbology.insert(def);
                    n += 1;
                }
                None => self.refused += 1,
            }
        }
        n
    }

    /// Entries the feed thread dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// MDP 3.0 definitions left out for their symbol (empty, or not printable ASCII).
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live_itch::DirectoryEntry;

    #[test]
    fn entries_become_definitions_in_order_and_a_full_queue_drops_and_counts() {
        let (mut tx, mut rx) = definition_queue(2);
        let mut symbol_bytes = [0u8; 20];
        symbol_bytes[..4].copy_from_slice(b"6CZ6");
        let definition = mdfan_feed::mdp3::InstrumentDefinition {
            template_id: 27,
            tot_num_reports: Some(1),
            update_action: b'A',
            last_update_time_ns: 0,
            symbol_bytes,
            security_id: 174_969,
            min_price_increment_e9: Some(500_000_000),
            display_factor_e9: 100_000,
        };
        tx.send(DefinitionEntry::Mdp3 { channel: 310, definition });
        tx.send(DefinitionEntry::Stock(DirectoryEntry { stock_locate: 9, stock: *b"AAPL    " }));
        tx.send(DefinitionEntry::Stock(DirectoryEntry { stock_locate: 10, stock: *b"MSFT    " }));
        assert_eq!((tx.dropped(), rx.dropped()), (1, 1), "the third found the queue full");
        let mut s = Symbology::new();
        assert_eq!(rx.drain_into(&mut s), 2);
        assert_eq!(
            s.get(174_969).map(|d| (d.symbol.as_str(), d.display_factor_e9, d.tick_size_e9)),
            Some(("6CZ6", 100_000, 500_000_000))
        );
        assert_eq!(s.get(9).map(|d| d.symbol.as_str()), Some("AAPL"));
        assert_eq!(s.get(10), None);
        let mut bad = definition;
        bad.symbol_bytes = [b' '; 20];
        tx.send(DefinitionEntry::Mdp3 { channel: 310, definition: bad });
        assert_eq!((rx.drain_into(&mut s), rx.refused()), (0, 1));
    }
}
