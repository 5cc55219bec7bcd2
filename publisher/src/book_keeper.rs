//! The publisher's own books, from which every snapshot is built: the order-level books, the price-level books of
//! a feed that carries price levels, and each instrument's last trading status records. The conductor applies
//! each journal record once the hot loop has fanned it out ([`BookKeeper::apply`]), so the books stand at the hot
//! loop's position, and [`BookKeeper::snapshot`] writes a late joiner's or a resync's records from them.

use mdfan_wire::{BookUpdate, Books, MbpBooks};

/// See the module docs.
pub struct BookKeeper {
    /// The order-level books.
    books: Books,
    /// Price-level books, for a feed that carries price levels (a live MDP 3.0 channel, a LOBSTER file); `None`
    /// for an order-level feed (DBN, ITCH), whose records (an ITCH `InstrumentStale`, say) must not make
    /// price-level books.
    mbp: Option<MbpBooks>,
    /// Each instrument's last trading status record of each status kind (ITCH `H`, `Y`, `h`), keyed by
    /// (instrument_id, [`mdfan_wire::StatusKind`] byte), so a snapshot carries them: a late joiner or a resync
    /// knows a halt that began before its snapshot. Grows by one entry per instrument and kind seen.
    statuses: std::collections::BTreeMap<(u32, u8), BookUpdate>,
    /// The live feed's last [`mdfan_wire::Kind::FeedStatus`] record (silent, or live again) of each channel
    /// (by [`BookUpdate::venue_channel`]), which every snapshot carries whatever its filter: a late joiner learns
    /// which channel is silent now.
    feed_status: std::collections::BTreeMap<u16, BookUpdate>,
    /// The last order-level stale mark ([`mdfan_wire::StaleBook::Order`]) of each instrument still standing, which
    /// every snapshot carries after the books (the order books themselves keep no stale state): ITCH's (an order
    /// the book lost: until the next day) and a relay's (records missed upstream, flag `MAYBE_BAD_BOOK`: until
    /// the book's next `Clear`).
    order_stale: std::collections::BTreeMap<u32, BookUpdate>,
    /// Feed records applied.
    applied: u64,
    /// The venue position of the last venue record applied (not a market recovery's, which may lag): what a
    /// snapshot's `SnapshotEnd` carries.
    last_venue_pos: u64,
}

impl BookKeeper {
    /// Empty books; price-level ones for `price_levels` instruments when the feed carries price levels.
    pub fn new(price_levels: Option<usize>) -> BookKeeper {
        BookKeeper {
            books: Books::new(),
            mbp: price_levels.map(MbpBooks::with_capacity),
            statuses: std::collections::BTreeMap::new(),
            feed_status: std::collections::BTreeMap::new(),
            order_stale: std::collections::BTreeMap::new(),
            applied: 0,
            last_venue_pos: 0,
        }
    }

    /// Feed records applied so far (the position the books stand at).
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Applies feed record number `applied() + 1` (`None`: it was gone from the journal, which is never
    /// expected: logged). A record a book refuses is logged and the books go on.
    pub fn apply(&mut self, record: Option<&BookUpdate>) {
        let n = self.applied + 1;
        self.applied += 1;
        let Some(r) = record else {
            tracing::error!(record = n, "journal record gone before the conductor applied it");
            return;
        };
        if r.flags & mdfan_wire::flags::SNAPSHOT == 0 && r.kind() != Some(mdfan_wire::Kind::FeedStatus) {
            self.last_venue_pos = r.venue_pos;
        }
        if let Err(e) = self.books.apply(r) {
            tracing::warn!(record = n, cause = %e, "publisher book refused a feed record");
        }
        if let Some(Err(e)) = self.mbp.as_mut().map(|mbp| mbp.apply(r)) {
            tracing::warn!(record = n, cause = %e, "publisher price-level book refused a feed record");
        }
        if let Some(status) = r.status() {
            self.statuses.insert((r.instrument_id, status.kind as u8), *r);
        }
        if r.feed_state().is_some() {
            self.feed_status.insert(r.venue_channel(), *r);
        }
        if r.stale_book() == Some(mdfan_wire::StaleBook::Order) {
            self.order_stale.insert(r.instrument_id, *r);
        } else if r.kind() == Some(mdfan_wire::Kind::Clear) && r.flags & mdfan_wire::flags::MBP == 0 {
            let curable = |m: &BookUpdate| m.flags & mdfan_wire::flags::MAYBE_BAD_BOOK != 0;
            if self.order_stale.get(&r.instrument_id).is_some_and(curable) {
                self.order_stale.remove(&r.instrument_id);
            }
        }
    }

    /// A snapshot of the instruments in `filter` (`None`: all) at the books' position: `SnapshotBegin`, the order
    /// books, the price-level books, each instrument's last trading status records, each channel's last feed
    /// status record (whatever the filter) and the order-level stale marks standing (all flagged
    /// [`mdfan_wire::flags::SNAPSHOT`]), `SnapshotEnd`; the
    /// markers' `size` counts the books, and `SnapshotEnd`'s `venue_pos` is the last venue record's position
    /// (the one the snapshot is consistent with; 0 before any).
    pub fn snapshot(&self, filter: Option<&[u32]>) -> Vec<BookUpdate> {
        let mut records = self.books.snapshot(filter, self.applied);
        let end = records.pop().expect("a snapshot ends with SnapshotEnd");
        if let Some(mbp) = self.mbp.as_ref().filter(|mbp| !mbp.is_empty()) {
            let books = mbp.snapshot_into(filter, &mut records) as u32;
            records[0].size += books;
        }
        let wanted = |id: &u32| filter.is_none_or(|f| f.contains(id));
        records.extend(
            self.statuses
                .iter()
                .filter(|((id, _), _)| wanted(id))
                .map(|(_, r)| r)
                .chain(self.feed_status.values())
                .chain(self.order_stale.iter().filter(|(id, _)| wanted(id)).map(|(_, r)| r))
                .map(|r| BookUpdate { flags: r.flags | mdfan_wire::flags::SNAPSHOT, ..*r }),
        );
        records.push(BookUpdate { size: records[0].size, venue_pos: self.last_venue_pos, ..end });
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An order-level stale mark stands in every snapshot (flagged SNAPSHOT, after the books) until, for a relay's
    /// mark (`MAYBE_BAD_BOOK`), a `Clear` of the book; an ITCH mark (an order the book lost) stays.
    #[test]
    fn order_level_stale_marks_are_carried_in_snapshots_until_their_clear() {
        use mdfan_wire::{flags, Kind, StaleBook};
        let mut k = BookKeeper::new(None);
        let relay_mark =
            BookUpdate { flags: flags::LAST | flags::MAYBE_BAD_BOOK, ..BookUpdate::stale(7, StaleBook::Order) };
        let itch_mark = BookUpdate { flags: flags::LAST, ..BookUpdate::stale(8, StaleBook::Order) };
        k.apply(Some(&relay_mark));
        k.apply(Some(&itch_mark));
        let marks = |k: &BookKeeper, filter: Option<&[u32]>| -> Vec<(u32, u8)> {
            let snap = k.snapshot(filter);
            assert_eq!(snap.last().unwrap().kind(), Some(Kind::SnapshotEnd));
            snap.iter()
                .filter(|r| r.kind() == Some(Kind::InstrumentStale))
                .map(|r| (r.instrument_id, r.flags))
                .collect()
        };
        let s = flags::SNAPSHOT;
        assert_eq!(marks(&k, None), [(7, relay_mark.flags | s), (8, itch_mark.flags | s)]);
        assert_eq!(marks(&k, Some(&[8])), [(8, itch_mark.flags | s)]);
        for id in [7, 8] {
            k.apply(Some(&BookUpdate {
                instrument_id: id,
                flags: flags::SNAPSHOT,
                ..BookUpdate::control(Kind::Clear)
            }));
        }
        assert_eq!(marks(&k, None), [(8, itch_mark.flags | s)], "the relay's mark cured by its Clear, ITCH's not");
    }
    use mdfan_wire::{flags, FeedState, Kind, Side, CHANNEL_INSTRUMENT_ID};

    /// A snapshot carries the feed's last status record, flagged SNAPSHOT, whatever the filter; before any, none.
    #[test]
    fn a_snapshot_carries_the_last_feed_status_whatever_its_filter() {
        let mut k = BookKeeper::new(None);
        let add = BookUpdate {
            instrument_id: 7,
            order_id: 1,
            price_e9: 10,
            size: 5,
            side: Side::Bid as u8,
            flags: flags::LAST,
            ..BookUpdate::control(Kind::Add)
        };
        k.apply(Some(&add));
        let statuses = |recs: &[BookUpdate]| -> Vec<(Option<FeedState>, u8)> {
            recs.iter().filter(|r| r.kind() == Some(Kind::FeedStatus)).map(|r| (r.feed_state(), r.flags)).collect()
        };
        assert!(statuses(&k.snapshot(None)).is_empty());
        k.apply(Some(&BookUpdate::feed_status(FeedState::Silent, 1, 2, 1)));
        k.apply(Some(&BookUpdate::feed_status(FeedState::Live, 3, 4, 1)));
        k.apply(Some(&BookUpdate::feed_status(FeedState::Silent, 5, 2, 2)));
        let want = vec![(Some(FeedState::Silent), flags::LAST | flags::BAD_TS_RECV | flags::SNAPSHOT)];
        for filter in [None, Some(&[7u32][..]), Some(&[8u32][..])] {
            let snap = k.snapshot(filter);
            assert_eq!(statuses(&snap), want, "filter {filter:?}");
            let last = snap.iter().find(|r| r.kind() == Some(Kind::FeedStatus)).unwrap();
            assert_eq!((last.instrument_id, last.size, last.ts_event_ns), (CHANNEL_INSTRUMENT_ID, 2, 5));
            assert_eq!(snap.last().unwrap().kind(), Some(Kind::SnapshotEnd), "before SnapshotEnd");
        }
        // Another channel's status (its id in the venue position): each channel's last one, by channel id.
        let ch = |state, at, silences| BookUpdate {
            venue_pos: mdfan_wire::mdp3_venue_position(311, 9, 0),
            ..BookUpdate::feed_status(state, at, 2, silences)
        };
        k.apply(Some(&ch(FeedState::Silent, 7, 1)));
        k.apply(Some(&ch(FeedState::Live, 8, 1)));
        let got: Vec<(u16, Option<FeedState>, u64)> = k
            .snapshot(None)
            .iter()
            .filter(|r| r.kind() == Some(Kind::FeedStatus))
            .map(|r| (r.venue_channel(), r.feed_state(), r.ts_event_ns))
            .collect();
        assert_eq!(got, [(0, Some(FeedState::Silent), 5), (311, Some(FeedState::Live), 8)]);
    }
}
