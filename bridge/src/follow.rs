//! [`Follower`]: one instrument's book from its messages, in stream order (crate docs, "Why a late or lagging
//! consumer is exact"). Sans I/O: the caller reads the messages (async-nats, any client) and hands over each
//! one's headers and payload.

use mdfan_wire::record::format_price_e9;
use mdfan_wire::{BookUpdate, Books, MbpBooks, Side};

use crate::message::{records, MessageKind, Meta};

/// What a follower has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// Snapshots applied.
    pub snapshots: u64,
    /// Update messages applied.
    pub updates: u64,
    /// Records applied (snapshots' and updates').
    pub records: u64,
    /// Records in the largest update message applied (the bridge's `--batch-bytes` / 64 at most).
    pub max_update_records: u64,
    /// Holes in the instrument's update numbers (a publish that was lost).
    pub gaps: u64,
    /// `stale` and `gap` messages.
    pub stale_marks: u64,
    /// Update messages left out: already applied (a number at or below the last) or while the book was stale;
    /// and `end` messages that did not match the book (another run, another update number).
    pub skipped: u64,
    /// Updates of another bridge run than the book's (a restarted bridge): the book is stale until a snapshot.
    pub other_run: u64,
    /// Records a book refused (the book is stale until the next snapshot).
    pub book_errors: u64,
}

/// One instrument's book, kept from its subject's messages.
#[derive(Debug, Clone)]
pub struct Follower {
    books: Books,
    mbp: MbpBooks,
    /// The update number due next (0: none seen yet).
    expected: u64,
    /// The bridge run the book follows (its last snapshot's, or its first update's).
    run: Option<String>,
    /// The instrument the book is of (its last snapshot's, or its first update's).
    instrument_id: Option<u32>,
    stale: bool,
    ended: bool,
    stats: FollowStats,
}

impl Default for Follower {
    fn default() -> Follower {
        Follower::new()
    }
}

impl Follower {
    /// No book yet: from the first snapshot, or from update 1 (a stream read from its start).
    pub fn new() -> Follower {
        Follower {
            books: Books::new(),
            mbp: MbpBooks::with_capacity(1),
            expected: 0,
            run: None,
            instrument_id: None,
            stale: false,
            ended: false,
            stats: FollowStats::default(),
        }
    }

    /// Applies one message of the instrument's subjects (or `PREFIX.status`).
    ///
    /// # Errors
    /// A payload that is not records (named); the book is then stale until the next snapshot.
    pub fn apply(&mut self, meta: &Meta, payload: &[u8]) -> Result<(), String> {
        // A message of another run than the book's (a restarted bridge numbers its updates anew): only a snapshot
        // can be applied to this book; an update of another run makes it stale, anything else of it is left out.
        if self.run.as_ref().is_some_and(|r| *r != meta.run) {
            match meta.kind {
                MessageKind::Update => {
                    self.stats.other_run += 1;
                    self.stale = true;
                    return Ok(());
                }
                MessageKind::Stale | MessageKind::Gap | MessageKind::End => {
                    self.stats.skipped += 1;
                    return Ok(());
                }
                MessageKind::Snapshot | MessageKind::Status => {}
            }
        }
        match meta.kind {
            MessageKind::Snapshot => {
                let rs = records(payload, meta.zstd).inspect_err(|_| self.stale = true)?;
                consistent(meta, &rs).inspect_err(|_| self.stale = true)?;
                self.books = Books::new();
                self.mbp = MbpBooks::with_capacity(1);
                self.stale = false;
                self.apply_records(&rs);
                self.expected = meta.inst_seq + 1;
                self.run = Some(meta.run.clone());
                self.instrument_id = meta.instrument_id.or(rs.first().map(|r| r.instrument_id)).or(self.instrument_id);
                self.stats.snapshots += 1;
            }
            MessageKind::Update => {
                let due = if self.expected == 0 { 1 } else { self.expected };
                if meta.inst_seq < due && self.expected != 0 {
                    self.stats.skipped += 1;
                    return Ok(());
                }
                if meta.inst_seq > due {
                    self.stats.gaps += 1;
                    self.stale = true;
                }
                self.expected = meta.inst_seq + 1;
                self.run.get_or_insert_with(|| meta.run.clone());
                if self.stale {
                    self.stats.skipped += 1;
                    return Ok(());
                }
                let rs = records(payload, meta.zstd).inspect_err(|_| self.stale = true)?;
                consistent(meta, &rs).inspect_err(|_| self.stale = true)?;
                self.instrument_id = self.instrument_id.or(meta.instrument_id).or(rs.first().map(|r| r.instrument_id));
                self.apply_records(&rs);
                self.stats.updates += 1;
                self.stats.max_update_records = self.stats.max_update_records.max(rs.len() as u64);
            }
            MessageKind::Stale | MessageKind::Gap => {
                self.stale = true;
                self.stats.stale_marks += 1;
            }
            // The end of the run the book follows, after the update the book is at; anything else (a forged or
            // stray end) is left out.
            MessageKind::End if self.expected != 0 && meta.inst_seq + 1 == self.expected => self.ended = true,
            MessageKind::End => self.stats.skipped += 1,
            MessageKind::Status => {}
        }
        Ok(())
    }

    fn apply_records(&mut self, rs: &[BookUpdate]) {
        for r in rs {
            let mbo = self.books.apply(r);
            let mbp = self.mbp.apply(r);
            if mbo.is_err() || mbp.is_err() {
                self.stats.book_errors += 1;
                self.stale = true;
            }
            self.stats.records += 1;
        }
    }

    /// Whether the book is not known good: a hole, a stale mark or a refused record since the last snapshot,
    /// or nothing applied yet.
    pub fn stale(&self) -> bool {
        self.stale || self.expected == 0
    }

    /// Whether the `end` message came.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// What it has seen.
    pub fn stats(&self) -> FollowStats {
        self.stats
    }

    /// The instrument_id the book is of: its last snapshot's, or (read from the stream's start) its first
    /// update's; `None` before either. A symbol's snapshot may name another id than the book had (a new bridge run
    /// after a re-listing, or ITCH's stock locates, which change daily): the book is that instrument's from there.
    pub fn instrument_id(&self) -> Option<u32> {
        self.instrument_id
    }

    /// The order book (order-level feeds).
    pub fn books(&self) -> &Books {
        &self.books
    }

    /// The price-level book (price-level feeds).
    pub fn mbp(&self) -> &MbpBooks {
        &self.mbp
    }

    /// `orders=.. levels_bid=.. levels_ask=.. bbo=BIDxSIZE/ASKxSIZE` of `instrument_id`'s order book, or
    /// `book=mbp bbo=..` of its price-level book, prices as `format_price_e9` writes them (`-` for an empty
    /// side).
    pub fn summary(&self, instrument_id: u32) -> String {
        let px = |l: Option<(i64, u64)>| l.map_or("-".to_owned(), |(p, s)| format!("{}x{s}", format_price_e9(p)));
        if let Some(b) = self.books.get(instrument_id) {
            let (bid, ask) = b.bbo();
            return format!(
                "orders={} levels_bid={} levels_ask={} bbo={}/{}",
                b.order_count(),
                b.level_count(Side::Bid),
                b.level_count(Side::Ask),
                px(bid.map(|l| (l.price_e9, l.size))),
                px(ask.map(|l| (l.price_e9, l.size)))
            );
        }
        if let Some(b) = self.mbp.get(instrument_id) {
            let (bid, ask) = b.bbo();
            let top = |l: Option<mdfan_wire::MbpLevel>| l.map(|l| (l.price_e9, u64::from(l.size)));
            return format!(
                "book=mbp levels_bid={} levels_ask={} bbo={}/{}",
                b.filled_depth(Side::Bid),
                b.filled_depth(Side::Ask),
                px(top(bid)),
                px(top(ask))
            );
        }
        "orders=0 levels_bid=0 levels_ask=0 bbo=-/-".to_owned()
    }
}

/// Whether `rs` is what `meta`'s headers say it is: every record of `Mdfan-Instrument-Id`, and an update's
/// first and last records at the seqs of `Mdfan-Seq` (a message cut short or put together by hand is not
/// applied: the book goes stale until the next snapshot).
fn consistent(meta: &Meta, rs: &[BookUpdate]) -> Result<(), String> {
    if let Some(id) = meta.instrument_id {
        if let Some(r) = rs.iter().find(|r| r.instrument_id != id) {
            return Err(format!(
                "{} {}: a record of instrument {} in a message of instrument {id} ({})",
                meta.kind.as_str(),
                meta.inst_seq,
                r.instrument_id,
                crate::message::INSTRUMENT_ID
            ));
        }
    }
    if let (MessageKind::Update, Some((first, last))) = (meta.kind, meta.seq) {
        let got = (rs.first().map(|r| r.seq), rs.last().map(|r| r.seq));
        if got != (Some(first), Some(last)) {
            return Err(format!(
                "update {}: {} says seqs {first}-{last}, the records are {}: not applied",
                meta.inst_seq,
                crate::message::SEQ,
                match got {
                    (Some(a), Some(b)) => format!("{a}-{b}"),
                    _ => "none".into(),
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{compress, push_record};
    use mdfan_wire::Kind;

    const ID: u32 = 7;

    fn add(order_id: u64, price: i64, size: u32) -> BookUpdate {
        BookUpdate {
            instrument_id: ID,
            order_id,
            price_e9: price * 1_000_000_000,
            size,
            side: Side::Bid as u8,
            ..BookUpdate::control(Kind::Add)
        }
    }

    fn payload(rs: &[BookUpdate]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in rs {
            push_record(&mut out, r);
        }
        out
    }

    fn meta(kind: MessageKind, inst_seq: u64) -> Meta {
        Meta { kind, run: "r1".into(), inst_seq, zstd: kind == MessageKind::Snapshot, instrument_id: None, seq: None }
    }

    /// A message whose records are not what its headers say (a snapshot of instrument 7 holding another's
    /// records; an update cut short, its `Mdfan-Seq` naming more than it holds) is refused, naming both, and
    /// the book goes stale (it was applied and the book reported good); the next snapshot makes it good again.
    #[test]
    fn a_message_whose_records_are_not_what_its_headers_say_is_refused_and_the_book_goes_stale() {
        let mut f = Follower::new();
        let of = |kind, inst_seq, seq| Meta { instrument_id: Some(ID), seq, ..meta(kind, inst_seq) };
        let clear = BookUpdate { instrument_id: ID, ..BookUpdate::control(Kind::Clear) };
        let forged = [BookUpdate { instrument_id: 999, ..clear }, BookUpdate { instrument_id: 999, ..add(1, 100, 5) }];
        let e = f.apply(&of(MessageKind::Snapshot, 1, None), &compress(&forged)).unwrap_err();
        assert_eq!(e, "snapshot 1: a record of instrument 999 in a message of instrument 7 (Mdfan-Instrument-Id)");
        assert!(f.stale());
        f.apply(&of(MessageKind::Snapshot, 1, None), &compress(&[clear, add(1, 100, 5)])).unwrap();
        assert!(!f.stale());
        let (a, b) = (BookUpdate { seq: 10, ..add(2, 101, 1) }, BookUpdate { seq: 11, ..add(3, 102, 1) });
        let e = f.apply(&of(MessageKind::Update, 2, Some((10, 12))), &payload(&[a, b])).unwrap_err();
        assert_eq!(e, "update 2: Mdfan-Seq says seqs 10-12, the records are 10-11: not applied");
        assert!(f.stale());
        assert_eq!(f.summary(ID), "orders=1 levels_bid=1 levels_ask=0 bbo=100.00x5/-", "nothing of it applied");
        f.apply(&of(MessageKind::Snapshot, 2, None), &compress(&[clear, add(1, 100, 5)])).unwrap();
        f.apply(&of(MessageKind::Update, 3, Some((10, 11))), &payload(&[a, b])).unwrap();
        assert!(!f.stale());
        assert_eq!(f.summary(ID), "orders=3 levels_bid=3 levels_ask=0 bbo=102.00x1/-");
    }

    /// From update 1; a duplicate is left out; a hole makes the book stale and later updates are left out
    /// until a snapshot, which the updates after it continue; a stale mark waits for a snapshot too.
    #[test]
    fn holes_and_stale_marks_wait_for_a_snapshot_and_duplicates_are_left_out() {
        let mut f = Follower::new();
        assert!(f.stale(), "nothing yet");
        f.apply(&meta(MessageKind::Update, 1), &payload(&[add(1, 100, 5)])).unwrap();
        f.apply(&meta(MessageKind::Update, 2), &payload(&[add(2, 101, 1)])).unwrap();
        f.apply(&meta(MessageKind::Update, 2), &payload(&[add(9, 99, 1)])).unwrap();
        assert!(!f.stale());
        assert_eq!(f.summary(ID), "orders=2 levels_bid=2 levels_ask=0 bbo=101.00x1/-");
        f.apply(&meta(MessageKind::Update, 4), &payload(&[add(3, 102, 1)])).unwrap();
        assert!(f.stale());
        f.apply(&meta(MessageKind::Update, 5), &payload(&[add(4, 103, 1)])).unwrap();
        assert_eq!(f.summary(ID), "orders=2 levels_bid=2 levels_ask=0 bbo=101.00x1/-", "nothing applied while stale");
        let mut snap = vec![BookUpdate { instrument_id: ID, ..BookUpdate::control(Kind::Clear) }];
        snap.extend([add(1, 100, 5), add(2, 101, 1), add(3, 102, 1), add(4, 103, 1)]);
        f.apply(&meta(MessageKind::Snapshot, 5), &compress(&snap)).unwrap();
        assert!(!f.stale());
        f.apply(&meta(MessageKind::Update, 6), &payload(&[add(5, 104, 2)])).unwrap();
        assert_eq!(f.summary(ID), "orders=5 levels_bid=5 levels_ask=0 bbo=104.00x2/-");
        f.apply(&meta(MessageKind::Stale, 6), &[]).unwrap();
        assert!(f.stale());
        f.apply(&meta(MessageKind::End, 6), &[]).unwrap();
        assert!(f.ended());
        assert_eq!(
            f.stats(),
            FollowStats {
                snapshots: 1,
                updates: 3,
                records: 8,
                max_update_records: 1,
                gaps: 1,
                stale_marks: 1,
                skipped: 3,
                other_run: 0,
                book_errors: 0
            }
        );
    }

    /// A late consumer starts from a snapshot: the updates at or below its number are left out.
    #[test]
    fn a_late_start_from_a_snapshot_leaves_out_what_it_holds() {
        let mut f = Follower::new();
        let snap = [BookUpdate { instrument_id: ID, ..BookUpdate::control(Kind::Clear) }, add(1, 100, 5)];
        f.apply(&meta(MessageKind::Snapshot, 10), &compress(&snap)).unwrap();
        f.apply(&meta(MessageKind::Update, 10), &payload(&[add(1, 100, 5)])).unwrap();
        f.apply(&meta(MessageKind::Update, 11), &payload(&[add(2, 100, 1), add(3, 99, 2)])).unwrap();
        assert_eq!(f.summary(ID), "orders=3 levels_bid=2 levels_ask=0 bbo=100.00x6/-");
        assert!(!f.stale());
        // The left-out update 10 (1 record) counts neither as applied nor in the largest update.
        assert_eq!((f.stats().updates, f.stats().max_update_records), (1, 2));
        // A first update other than 1 with no snapshot: stale.
        let mut g = Follower::new();
        g.apply(&meta(MessageKind::Update, 3), &payload(&[add(1, 100, 5)])).unwrap();
        assert!(g.stale());
        // A payload that is not records: an error, and stale.
        let mut h = Follower::new();
        assert!(h.apply(&meta(MessageKind::Update, 1), &[0u8; 10]).is_err());
        assert!(h.stale());
    }

    /// A restarted bridge numbers its updates anew: its messages make the book stale until its snapshot, and an
    /// `end` counts only from the book's run at the book's update number.
    #[test]
    fn another_runs_messages_wait_for_its_snapshot_and_a_stray_end_is_left_out() {
        let mut f = Follower::new();
        let snap = [BookUpdate { instrument_id: ID, ..BookUpdate::control(Kind::Clear) }];
        f.apply(&meta(MessageKind::Snapshot, 0), &compress(&snap)).unwrap();
        f.apply(&meta(MessageKind::Update, 1), &payload(&[add(1, 100, 5)])).unwrap();
        f.apply(&meta(MessageKind::Update, 2), &payload(&[add(2, 101, 5)])).unwrap();
        // A forged end with an old number: left out.
        f.apply(&meta(MessageKind::End, 1), &[]).unwrap();
        assert!(!f.ended());
        let run2 = |kind, inst_seq| Meta { run: "r2".into(), ..meta(kind, inst_seq) };
        f.apply(&run2(MessageKind::Update, 1), &payload(&[add(3, 99, 1)])).unwrap();
        assert!(f.stale(), "a new run's update is not applied to the old run's book");
        assert_eq!(f.summary(ID), "orders=2 levels_bid=2 levels_ask=0 bbo=101.00x5/-");
        let snap2 = [BookUpdate { instrument_id: ID, ..BookUpdate::control(Kind::Clear) }, add(3, 99, 1)];
        f.apply(&run2(MessageKind::Snapshot, 1), &compress(&snap2)).unwrap();
        assert!(!f.stale());
        f.apply(&run2(MessageKind::Update, 2), &payload(&[add(4, 98, 1)])).unwrap();
        f.apply(&meta(MessageKind::End, 2), &[]).unwrap();
        assert!(!f.ended(), "the old run's end");
        f.apply(&run2(MessageKind::End, 2), &[]).unwrap();
        assert!(f.ended());
        assert_eq!(f.summary(ID), "orders=2 levels_bid=2 levels_ask=0 bbo=99.00x1/-");
        assert_eq!((f.stats().other_run, f.stats().skipped), (1, 2));
    }

    /// A new bridge run may name the symbol under another instrument_id (a re-listing; ITCH's daily stock
    /// locates): its snapshot moves the book to that id, and `instrument_id` says which.
    #[test]
    fn a_snapshot_under_another_instrument_id_moves_the_book_to_it() {
        let mut f = Follower::new();
        assert_eq!(f.instrument_id(), None);
        f.apply(&meta(MessageKind::Update, 1), &payload(&[add(1, 100, 5)])).unwrap();
        assert_eq!(f.instrument_id(), Some(ID));
        const NEW: u32 = ID + 1;
        let new_add = BookUpdate { instrument_id: NEW, ..add(1, 98, 3) };
        let snap = [BookUpdate { instrument_id: NEW, ..BookUpdate::control(Kind::Clear) }, new_add];
        let run2 = Meta { run: "r2".into(), instrument_id: Some(NEW), ..meta(MessageKind::Snapshot, 0) };
        f.apply(&run2, &compress(&snap)).unwrap();
        assert_eq!(f.instrument_id(), Some(NEW));
        assert_eq!(f.summary(NEW), "orders=1 levels_bid=1 levels_ask=0 bbo=98.00x3/-");
        assert_eq!(f.summary(ID), "orders=0 levels_bid=0 levels_ask=0 bbo=-/-", "the old id's book is gone");
        assert!(!f.stale());
    }
}
