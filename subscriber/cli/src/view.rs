//! What `mdfan-subscribe` keeps and prints of the book records: the order books (MBO feeds), the price-level
//! books (MBP feeds), the trading states, the stale marks, `--bbo` lines, `--checkpoint` summaries and the final
//! summary. Kept apart from the polling loop so that its output can be tested on decoded feed records.

use std::collections::{BTreeSet, HashMap};

use mdfan_subscriber::report::{
    instrument_text, level_lines, level_text, mbp_level_lines, mbp_summary_line, status_line, summary_line,
};
use mdfan_subscriber::{
    flags, BookUpdate, Books, FeedHealth, FeedState, Kind, Level, MbpBooks, MbpLevel, StaleBook, TradingStates,
};
use mdfan_wire::Symbology;

/// Price-level (MBP) books this process keeps room for.
pub const MBP_INSTRUMENTS: usize = 4096;

/// Whether a record is for the price-level books (MBP: the level kinds, a `Clear` flagged MBP, a price-level
/// feed's `InstrumentStale`) rather than the order books (MBO).
fn is_mbp(r: &BookUpdate) -> bool {
    match r.kind() {
        Some(Kind::InstrumentStale) => !is_order_level_stale(r),
        Some(k) => k.is_level() || (k == Kind::Clear && r.flags & flags::MBP != 0),
        None => false,
    }
}

/// Whether an `InstrumentStale` is about an order book (ITCH: an order reference the book lost, or a MoldUDP64
/// hole given up) rather than a price-level book (MDP 3.0: an `RptSeq` jump, packets lost on both lines): the
/// mark says so in its `level` byte (wire::record, "Stale marks").
fn is_order_level_stale(r: &BookUpdate) -> bool {
    r.stale_book() == Some(StaleBook::Order)
}

/// The books and counts of one run (a reconnect starts new books: [`View::reset_books`]).
pub struct View {
    /// The definitions the publisher sent (symbols, price precision), for printing.
    pub symbology: Symbology,
    books: Books,
    mbp: MbpBooks,
    statuses: TradingStates,
    /// The live feed's silences (`FeedStatus` records), per channel (its id in the venue position; 0 for a
    /// feed of one unnamed channel).
    feed: std::collections::BTreeMap<u16, FeedHealth>,
    /// Instruments whose order book an order-level feed marked stale (ITCH); kept across a reconnect, as nothing
    /// the publisher sends clears them.
    unsynced: BTreeSet<u32>,
    /// Of `unsynced`, those marked only for records missed upstream of the publisher (a relay's marks: flag
    /// `MAYBE_BAD_BOOK`): the next `Clear` of the book (the upstream's snapshot) cures them.
    until_clear: BTreeSet<u32>,
    checkpoints: BTreeSet<u64>,
    bbo: bool,
    /// The last BBO printed, per instrument: a line is printed when *that instrument's* BBO changed.
    last_bbo: HashMap<u32, (Option<Level>, Option<Level>)>,
    last_mbp_bbo: HashMap<u32, (Option<MbpLevel>, Option<MbpLevel>)>,
    /// Stale marks received (not those of a snapshot).
    pub stale_records: u64,
    /// Book records received: every record but the stream's own (heartbeats, snapshot markers, end of stream).
    pub book_records: u64,
    /// Records a book refused while the stream had no gap.
    pub book_errors: u64,
    /// Records an order book refused between a gap and its snapshot (expected).
    pub stale_book_errors: u64,
}

impl View {
    /// A view printing `--bbo` lines if `bbo`, and the summaries after each record count in `checkpoints`.
    pub fn new(symbology: Symbology, checkpoints: BTreeSet<u64>, bbo: bool) -> View {
        View {
            symbology,
            books: Books::new(),
            mbp: MbpBooks::with_capacity(MBP_INSTRUMENTS),
            statuses: TradingStates::new(),
            feed: std::collections::BTreeMap::new(),
            unsynced: BTreeSet::new(),
            until_clear: BTreeSet::new(),
            checkpoints,
            bbo,
            last_bbo: HashMap::new(),
            last_mbp_bbo: HashMap::new(),
            stale_records: 0,
            book_records: 0,
            book_errors: 0,
            stale_book_errors: 0,
        }
    }

    /// Empties every book (a snapshot begins).
    pub fn snapshot_begin(&mut self, r: &BookUpdate) {
        let _ = self.books.apply(r);
        let _ = self.mbp.apply(r);
    }

    /// New, empty books (a reconnect); the trading states and stale marks stay (the new session's snapshot
    /// brings the last states again, and without a snapshot the last known state beats none).
    pub fn reset_books(&mut self, symbology: Symbology) {
        self.books = Books::new();
        self.mbp = MbpBooks::with_capacity(MBP_INSTRUMENTS);
        self.symbology = symbology;
    }

    /// One book record (anything but heartbeats, snapshot markers and the end of stream); `stale`: the stream
    /// had a gap whose snapshot has not come yet. Lines to print go into `out`.
    pub fn record(&mut self, r: &BookUpdate, stale: bool, out: &mut Vec<String>) {
        // A feed status is about the lines, not a book: not counted as a book record (nor as a checkpoint's).
        if r.kind() == Some(Kind::FeedStatus) {
            if self.feed.entry(r.venue_channel()).or_default().apply(r) {
                out.push(feed_status_line(r));
            }
            return;
        }
        self.book_records += 1;
        match r.kind() {
            Some(Kind::TradingStatus) => {
                self.statuses.apply(r);
            }
            _ if is_mbp(r) => self.mbp_record(r, out),
            _ => self.order_record(r, stale, out),
        }
        if self.checkpoints.contains(&self.book_records) {
            for line in self.summary_lines(0) {
                out.push(format!("checkpoint after={} {line}", self.book_records));
            }
        }
    }

    fn mbp_record(&mut self, r: &BookUpdate, out: &mut Vec<String>) {
        if r.kind() == Some(Kind::InstrumentStale) && r.flags & flags::SNAPSHOT == 0 {
            self.stale_records += 1;
            // Two causes (wire::record): packets lost on both lines (flag MAYBE_BAD_BOOK: order_id = the first
            // lost MsgSeqNum, size = packets lost), or the instrument's own RptSeq jump (order_id = RptSeq
            // expected, size = RptSeq received).
            out.push(if r.flags & flags::MAYBE_BAD_BOOK != 0 && (r.order_id, r.size) == (0, 0) {
                // A relay's mark: records missed upstream of the publisher (wire::record, "Stale marks").
                format!("instrument_stale instrument={} seq={} cause=upstream_gap", r.instrument_id, r.seq)
            } else if r.flags & flags::MAYBE_BAD_BOOK != 0 {
                format!(
                    "instrument_stale instrument={} seq={} cause=lost_packets first_lost={} lost={}",
                    r.instrument_id, r.seq, r.order_id, r.size
                )
            } else {
                format!(
                    "instrument_stale instrument={} seq={} cause=rpt_seq venue_seq={} rpt_seq_expected={} rpt_seq_got={}",
                    r.instrument_id, r.seq, r.venue_seq(), r.order_id, r.size
                )
            });
        }
        if let Err(e) = self.mbp.apply(r) {
            self.book_errors += 1;
            if self.book_errors <= 10 {
                out.push(format!("book_error seq={} {e}", r.seq));
            }
        }
        if !(self.bbo && r.is_last()) {
            return;
        }
        let Some(book) = self.mbp.get(r.instrument_id) else { return };
        let bbo = book.bbo();
        if self.last_mbp_bbo.insert(r.instrument_id, bbo) == Some(bbo) {
            return;
        }
        let id = r.instrument_id;
        let fmt = |l: Option<MbpLevel>| {
            l.map_or("-".to_owned(), |l| format!("{}x{}", self.symbology.format_price(id, l.price_e9), l.size))
        };
        out.push(self.bbo_line(r, &fmt(bbo.0), &fmt(bbo.1)));
    }

    /// `bbo instrument=.. symbol=.. seq=.. venue_seq=.. BID/ASK`.
    fn bbo_line(&self, r: &BookUpdate, bid: &str, ask: &str) -> String {
        let id = instrument_text(&self.symbology, r.instrument_id);
        format!("bbo {id} seq={} venue_seq={} {bid}/{ask}", r.seq, r.venue_seq())
    }

    fn order_record(&mut self, r: &BookUpdate, stale: bool, out: &mut Vec<String>) {
        // A trade (or fill, or no-action) changes no book; beside a price-level book (LOBSTER's trades) it is no
        // order book's either: it would print `bbo ... -/-` from an empty order book.
        if matches!(r.kind(), Some(Kind::Trade | Kind::Fill | Kind::NoAction))
            && self.mbp.get(r.instrument_id).is_some()
        {
            return;
        }
        // An order book that lost an order (ITCH): no price-level book; the order book is unsynced (ITCH has no
        // snapshot to cure it; the venue's next start of day does). `books` ignores it.
        let order_stale = is_order_level_stale(r);
        let id = r.instrument_id;
        if r.kind() == Some(Kind::Clear) && self.until_clear.remove(&id) {
            self.unsynced.remove(&id); // the upstream's snapshot rebuilds what a relay missed
        }
        let stale = stale || self.until_clear.contains(&id);
        if order_stale && r.flags & flags::SNAPSHOT != 0 {
            // A snapshot's: the book it follows is unsynced (nothing to print: the live mark was printed by
            // whoever saw it).
            if self.unsynced.insert(id) && r.flags & flags::MAYBE_BAD_BOOK != 0 {
                self.until_clear.insert(id);
            }
            return;
        }
        if order_stale && r.flags & flags::SNAPSHOT == 0 {
            self.stale_records += 1;
            if r.flags & flags::MAYBE_BAD_BOOK != 0 {
                // A relay missed records upstream (wire::record, "Stale marks"): stale until the book's next Clear.
                if self.unsynced.insert(id) {
                    self.until_clear.insert(id);
                }
                out.push(format!("instrument_stale instrument={id} seq={} cause=upstream_gap", r.seq));
                return;
            }
            self.unsynced.insert(id);
            self.until_clear.remove(&id);
            // Two causes (wire::record): messages lost (a MoldUDP64 hole given up, or a message that does not
            // decode: order_id 0, venue_seq = the first lost message), or an order reference the book cannot
            // apply.
            out.push(if r.order_id == 0 {
                format!(
                    "instrument_stale instrument={} seq={} cause=lost_messages first_lost={}",
                    r.instrument_id,
                    r.seq,
                    r.venue_seq()
                )
            } else {
                format!(
                    "instrument_stale instrument={} seq={} cause=order_ref venue_seq={} order_ref={}",
                    r.instrument_id,
                    r.seq,
                    r.venue_seq(),
                    r.order_id
                )
            });
        }
        if let Err(e) = self.books.apply(r) {
            if stale {
                self.stale_book_errors += 1; // expected between a gap and its snapshot
            } else {
                self.book_errors += 1;
                if self.book_errors <= 10 {
                    out.push(format!("book_error seq={} {e}", r.seq));
                }
            }
        }
        if !(self.bbo && r.is_last() && !order_stale) {
            return;
        }
        let Some(book) = self.books.get(r.instrument_id) else { return };
        let bbo = book.bbo();
        if self.last_bbo.insert(r.instrument_id, bbo) == Some(bbo) {
            return;
        }
        let id = r.instrument_id;
        let (bid, ask) = (level_text(&self.symbology, id, bbo.0), level_text(&self.symbology, id, bbo.1));
        out.push(self.bbo_line(r, &bid, &ask));
    }

    /// The order books to print: not the empty one a price-level feed's first trade (before its first level)
    /// left for an instrument that has a price-level book.
    fn order_books(&self) -> impl Iterator<Item = (u32, &mdfan_subscriber::Book)> + '_ {
        self.books.iter_sorted().into_iter().filter(|(id, b)| !(b.order_count() == 0 && self.mbp.get(*id).is_some()))
    }

    /// One summary line per book: order books (` stale=true` after one an order-level feed marked stale), then
    /// price-level books; `gaps` is the stream's.
    fn summary_lines(&self, gaps: u64) -> Vec<String> {
        let mut lines = Vec::new();
        for (id, book) in self.order_books() {
            let line = summary_line(&self.symbology, id, book, gaps);
            lines.push(if self.unsynced.contains(&id) { format!("{line} stale=true") } else { line });
        }
        for book in self.mbp.iter() {
            lines.push(mbp_summary_line(&self.symbology, book, gaps));
        }
        lines
    }

    /// The end-of-run lines: each book's summary and its best `levels` per side, the trading states, and the
    /// stale marks if any.
    pub fn final_lines(&self, gaps: u64, levels: usize) -> Vec<String> {
        let mut lines = Vec::new();
        for (id, book) in self.order_books() {
            let line = summary_line(&self.symbology, id, book, gaps);
            lines.push(if self.unsynced.contains(&id) { format!("{line} stale=true") } else { line });
            lines.extend(level_lines(&self.symbology, id, book, levels));
        }
        for book in self.mbp.iter() {
            lines.push(mbp_summary_line(&self.symbology, book, gaps));
            lines.extend(mbp_level_lines(&self.symbology, book, levels.min(mdfan_subscriber::MBP_DEPTH)));
        }
        for (id, status) in self.statuses.iter() {
            lines.push(status_line(&self.symbology, id, status));
        }
        for (channel, feed) in self.feed.iter().filter(|(_, f)| f.silences > 0) {
            let ch = if *channel == 0 { String::new() } else { format!(" channel={channel}") };
            lines.push(format!("feed{ch} silences={} silent_at_end={}", feed.silences, feed.silent));
        }
        if self.stale_records > 0 || self.mbp.iter().any(|b| b.is_stale()) {
            let stale_now = self.mbp.iter().filter(|b| b.is_stale()).count() + self.unsynced.len();
            lines.push(format!("stale records={} instruments_stale_at_end={stale_now}", self.stale_records));
        }
        lines
    }
}

/// `feed_silent seq=.. last_datagram_ns=.. silent_after_ms=.. silences=..` or `feed_live seq=.. at_ns=..
/// silence_ms=.. silences=..` (with ` channel=ID` after the word for a channel with an id), with
/// ` snapshot=true` for a snapshot's copy (the state when the subscriber joined).
fn feed_status_line(r: &BookUpdate) -> String {
    let ch = match r.venue_channel() {
        0 => String::new(),
        id => format!(" channel={id}"),
    };
    let line = match r.feed_state() {
        Some(FeedState::Silent) => format!(
            "feed_silent{ch} seq={} last_datagram_ns={} silent_after_ms={} silences={}",
            r.seq,
            r.ts_event_ns,
            r.order_id / 1_000_000,
            r.size
        ),
        _ => format!(
            "feed_live{ch} seq={} at_ns={} silence_ms={} silences={}",
            r.seq,
            r.ts_event_ns,
            r.order_id / 1_000_000,
            r.size
        ),
    };
    if r.flags & flags::SNAPSHOT != 0 {
        format!("{line} snapshot=true")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_subscriber::Side;
    use mdfan_wire::InstrumentDef;
    use std::path::{Path, PathBuf};

    fn data(dir: &str, name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data").join(dir).join(name)
    }

    /// The bundled MDP 3.0 capture's line A, through the live channel decoder, as a subscriber receives it
    /// (seq from 1).
    fn mdp3_records() -> Vec<BookUpdate> {
        let cap =
            mdfan_feed::pcap::read_udp_pcapng(&data("cme-mdp3-sbe-v8-pcap-20160927", "Cme.Mdp3.Sbe.v8.1.Example.pcap"))
                .unwrap();
        let line_a: std::net::SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
        let mut channel = mdfan_feed::mdp3_channel::Mdp3Channel::with_capacity(64);
        let mut out = Vec::new();
        for p in cap.packets.iter().filter(|p| p.dst == line_a) {
            channel.on_packet(&p.payload, p.ts_ns, &mut |r| out.push(*r));
        }
        for (i, r) in out.iter_mut().enumerate() {
            r.seq = i as u64 + 1;
        }
        out
    }

    /// The bundled LOBSTER AMZN files through the publisher's LOBSTER feed (seq from 1), and its symbology.
    fn lobster_records() -> (Vec<BookUpdate>, Symbology) {
        let dir = "lobster-nasdaq-2012-06-21-level1";
        let mut feed = mdfan_feed::lobster::LobsterFeed::open(
            &data(dir, "AMZN_2012-06-21_34200000_57600000_message_1.csv"),
            None,
            mdfan_feed::itch::eastern_midnight_ns(2012, 6, 21).unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        while let Some((_, recs)) = feed.next_message().unwrap() {
            out.extend_from_slice(recs.as_slice());
        }
        for (i, r) in out.iter_mut().enumerate() {
            r.seq = i as u64 + 1;
        }
        let mut symbology = Symbology::new();
        symbology.insert(InstrumentDef::new(mdfan_feed::lobster::INSTRUMENT_ID, "AMZN"));
        (out, symbology)
    }

    fn run(view: &mut View, records: &[BookUpdate]) -> Vec<String> {
        let mut out = Vec::new();
        for r in records {
            view.record(r, false, &mut out);
        }
        out
    }

    #[test]
    fn bbo_prints_a_line_only_when_that_instruments_bbo_changed() {
        let records = mdp3_records();
        let mut view = View::new(Symbology::new(), BTreeSet::new(), true);
        let lines = run(&mut view, &records);
        assert_eq!(lines.len(), 1_216, "{:?}", &lines[..5]);
        assert!(lines.iter().all(|l| l.starts_with("bbo instrument=")));
        // What one BBO for every instrument printed: a line whenever the last BBO printed, of any instrument,
        // differed: 1,487 repeats of an unchanged BBO among 2,703 lines.
        let mut mbp = MbpBooks::with_capacity(64);
        let (mut last, mut single) = (None, 0);
        for r in &records {
            let _ = mbp.apply(r);
            if r.is_last() && is_mbp(r) {
                let key = (r.instrument_id, mbp.get(r.instrument_id).map(|b| b.bbo()));
                if last != Some(key) {
                    last = Some(key);
                    single += 1;
                }
            }
        }
        assert_eq!((single, single - lines.len()), (2_703, 1_487));
        // Per instrument, consecutive lines differ.
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for l in &lines {
            let (id, rest) = l.split_once(" seq=").unwrap();
            let bbo = rest.rsplit(' ').next().unwrap();
            assert_ne!(seen.insert(id, bbo), Some(bbo), "{l}");
        }
    }

    #[test]
    fn a_checkpoint_on_a_price_level_feed_prints_the_price_level_books() {
        let records = mdp3_records();
        assert_eq!(records.len(), 5_848);
        let mut view = View::new(Symbology::new(), [5_848].into(), false);
        let lines = run(&mut view, &records);
        assert_eq!(lines.len(), 39, "one line per security of the capture");
        assert!(lines.iter().all(|l| l.starts_with("checkpoint after=5848 instrument=") && l.contains(" book=mbp ")));
        let es = lines.iter().find(|l| l.contains("instrument=174969 ")).unwrap();
        // data/cme-mdp3-sbe-v8-pcap-20160927/README.md, "Book replay": best bid 7580.5 x 8, best ask 7581.5 x 19.
        assert!(es.ends_with(" bbo=7580.50x8/7581.50x19"), "{es}");
    }

    #[test]
    fn lobster_prints_its_price_level_book_no_order_book_and_checkpoints_at_trades() {
        let (records, symbology) = lobster_records();
        // Record 1 is a trade (a hidden execution), records 2-3 row 1's levels, record 4 message 2's level,
        // record 5 a trade (message 3, a visible execution).
        assert_eq!(records[4].kind(), Some(Kind::Trade));
        let mut view = View::new(symbology, [3, 5].into(), true);
        let lines = run(&mut view, &records);
        assert!(!lines.iter().any(|l| l.ends_with(" -/-")), "no BBO of an empty book");
        let checkpoints: Vec<&String> = lines.iter().filter(|l| l.starts_with("checkpoint")).collect();
        assert_eq!(
            checkpoints,
            [
                "checkpoint after=3 instrument=1 symbol=AMZN book=mbp records=2 gaps=0 last_seq=1 stale=false levels_bid=1 levels_ask=1 bbo=223.18x100/223.95x100",
                "checkpoint after=5 instrument=1 symbol=AMZN book=mbp records=3 gaps=0 last_seq=2 stale=false levels_bid=1 levels_ask=1 bbo=223.81x21/223.95x100",
            ],
            "price-level books only: no empty order book from the trades"
        );
        let bbo: Vec<&String> = lines.iter().filter(|l| l.starts_with("bbo ")).collect();
        assert_eq!(bbo.len(), 55_071, "the price-level book's BBO changes only");
        assert_eq!(bbo[0], "bbo instrument=1 symbol=AMZN seq=3 venue_seq=1 223.18x100/223.95x100");
        let end = view.final_lines(0, 10);
        assert_eq!(
            end,
            [
                "instrument=1 symbol=AMZN book=mbp records=55072 gaps=0 last_seq=57515 stale=false levels_bid=1 levels_ask=1 bbo=220.51x249/220.64x100",
                "instrument=1 side=bid level=1 price=220.51 size=249 orders=0",
                "instrument=1 side=ask level=1 price=220.64 size=100 orders=0",
            ],
            "one book, level 1 only: the feed fills no other"
        );
    }

    #[test]
    fn a_position_the_feed_never_filled_prints_unknown_not_empty() {
        let level = |kind: Kind, side: Side, level: u8, price_e9: i64, size: u32| BookUpdate {
            instrument_id: 7,
            kind: kind as u8,
            side: side as u8,
            level,
            price_e9,
            size,
            order_id: 2,
            flags: flags::MBP | flags::LAST,
            ..BookUpdate::control(Kind::NoAction)
        };
        let mut view = View::new(Symbology::new(), BTreeSet::new(), false);
        // No snapshot: the first bid update is at position 3; an ask at 1, then deleted.
        let records = [
            level(Kind::LevelNew, Side::Bid, 3, 99_000_000_000, 5),
            level(Kind::LevelNew, Side::Ask, 1, 101_000_000_000, 4),
            level(Kind::LevelDelete, Side::Ask, 1, 101_000_000_000, 4),
        ];
        run(&mut view, &records);
        assert_eq!(
            &view.final_lines(0, 10)[1..],
            [
                "instrument=7 side=bid level=1 price=? size=? orders=?",
                "instrument=7 side=bid level=2 price=? size=? orders=?",
                "instrument=7 side=bid level=3 price=99.00 size=5 orders=2",
                "instrument=7 side=ask level=1 price=- size=0 orders=0",
            ]
        );
    }

    #[test]
    fn feed_status_records_print_silent_and_live_and_the_end_says_how_often() {
        use mdfan_subscriber::FeedState;
        let mut view = View::new(Symbology::new(), BTreeSet::new(), false);
        let silent = BookUpdate { seq: 4, ..BookUpdate::feed_status(FeedState::Silent, 1_000, 5_000_000_000, 1) };
        let live = BookUpdate { seq: 5, ..BookUpdate::feed_status(FeedState::Live, 9_000, 7_250_000_000, 1) };
        let snap = BookUpdate { flags: silent.flags | flags::SNAPSHOT, ..silent };
        assert_eq!(
            run(&mut view, &[snap, live, silent]),
            [
                "feed_silent seq=4 last_datagram_ns=1000 silent_after_ms=5000 silences=1 snapshot=true",
                "feed_live seq=5 at_ns=9000 silence_ms=7250 silences=1",
                "feed_silent seq=4 last_datagram_ns=1000 silent_after_ms=5000 silences=1",
            ]
        );
        assert_eq!(view.final_lines(0, 1), ["feed silences=1 silent_at_end=true"]);
        assert!(view.books.iter_sorted().is_empty() && view.mbp.is_empty(), "no book made");
        assert_eq!(view.book_records, 0, "a feed status is not a book record");
        // A channel of a publisher of several: named, and kept apart from the others.
        let pos = mdfan_subscriber::mdp3_venue_position(311, 17_347_900, 0);
        let other = BookUpdate {
            seq: 6,
            venue_pos: pos,
            ..BookUpdate::feed_status(FeedState::Silent, 2_000, 5_000_000_000, 1)
        };
        assert_eq!(
            run(&mut view, &[other]),
            ["feed_silent channel=311 seq=6 last_datagram_ns=2000 silent_after_ms=5000 silences=1"]
        );
        let live = BookUpdate { seq: 7, ..live };
        run(&mut view, &[live]);
        assert_eq!(
            view.final_lines(0, 1),
            ["feed silences=1 silent_at_end=false", "feed channel=311 silences=1 silent_at_end=true"]
        );
    }
}
