//! `format = "capture"`: an mdfan capture (`mdfan_feed::capture`, docs/CAPTURE.md) replayed as a feed: the
//! records a subscriber received, in order, at the recorded pace (`ts_recv_ns`), a speed-up or as fast as
//! possible, optionally from and to a `ts_recv_ns` or a venue position. Records the publisher makes for one
//! session (heartbeats, end of stream, snapshot markers) are left out; a snapshot's own records (flagged
//! `SNAPSHOT`: the books rebuilt after a gap or a late join) are replayed as they came, so books built from the
//! replay equal the captured session's. A gap the capture recorded is counted (the replay cannot give what
//! the session never had) and logged. The subscriber stream's `seq` and the publisher's `ts_send_ticks` are set
//! anew by this publisher.
//!
//! A replay from a bound (`from_ts_recv_ns`, `from_venue_pos`) begins with an opening snapshot: the records
//! before the bound are read into books (as the captured subscriber kept them) and each book goes out as
//! snapshot records (flagged `SNAPSHOT`: a `Clear`, then its orders or levels) before the first record inside
//! the bound, so books built from the replay equal the captured session's from there on. The replay ends at the
//! first record past a `to_` bound (the capture is in receive order).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_feed::capture::{Item, Reader};
use mdfan_wire::control::BookKind;
use mdfan_wire::{BookUpdate, Symbology};
use serde::Deserialize;

use super::{Checker, FeedCounters, FeedTraits, Opened, Records};
use crate::config::{ConfigError, FeedFormat, Pace};
use crate::{PublisherError, RunReport};

/// The `[feed]` keys of `format = "capture"`.
pub const FEED_KEYS: &[&str] = &[
    "format",
    "path",
    "name",
    "pace",
    "max_gap_ms",
    "symbols",
    "from_ts_recv_ns",
    "to_ts_recv_ns",
    "from_venue_pos",
    "to_venue_pos",
];

/// `[feed]` for `format = "capture"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureFeed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// The capture's folder (required), resolved against the config file's folder.
    #[serde(default)]
    pub path: PathBuf,
    /// The capture's name (its segments' prefix); default: the folder's only capture.
    #[serde(default)]
    pub name: Option<String>,
    /// Replay pace.
    #[serde(default = "crate::config::default_pace")]
    pub pace: Pace,
    /// Under realtime or factor pacing, gaps in ts_recv longer than this are shortened to it, in ms.
    #[serde(default = "crate::config::default_max_gap_ms")]
    pub max_gap_ms: u64,
    /// A symbol file added to the capture's own symbology.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
    /// Replay records from this `ts_recv_ns` on (ns since the UNIX epoch); default: the first.
    #[serde(default)]
    pub from_ts_recv_ns: Option<u64>,
    /// ... up to this `ts_recv_ns` (inclusive); default: the last.
    #[serde(default)]
    pub to_ts_recv_ns: Option<u64>,
    /// Replay records from this venue position on (`mdfan_wire::record`, "Venue position"); default: the first.
    #[serde(default)]
    pub from_venue_pos: Option<u64>,
    /// ... up to this venue position (inclusive).
    #[serde(default)]
    pub to_venue_pos: Option<u64>,
}

impl CaptureFeed {
    /// Checks the keys and resolves the paths.
    pub(crate) fn check(&mut self, c: &Checker<'_>) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            return Err(c.bad("feed.format", "\"capture\" needs feed.path (the capture's folder)"));
        }
        if let (Some(a), Some(b)) = (self.from_ts_recv_ns, self.to_ts_recv_ns) {
            if a > b {
                return Err(c.bad("feed.to_ts_recv_ns", format!("{b} is before feed.from_ts_recv_ns {a}")));
            }
        }
        if let (Some(a), Some(b)) = (self.from_venue_pos, self.to_venue_pos) {
            if a > b {
                return Err(c.bad("feed.to_venue_pos", format!("{b} is before feed.from_venue_pos {a}")));
            }
        }
        self.path = c.resolve(&self.path);
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        Ok(())
    }

    /// Whether `r` is before the replay's `from_` bounds.
    fn before(&self, r: &BookUpdate) -> bool {
        self.from_ts_recv_ns.is_some_and(|t| r.ts_recv_ns < t) || self.from_venue_pos.is_some_and(|p| r.venue_pos < p)
    }

    /// Whether `r` is past the replay's `to_` bounds.
    fn past(&self, r: &BookUpdate) -> bool {
        self.to_ts_recv_ns.is_some_and(|t| r.ts_recv_ns > t) || self.to_venue_pos.is_some_and(|p| r.venue_pos > p)
    }
}

/// What a capture replay counted, readable from any thread.
#[derive(Debug, Default)]
pub struct CaptureCounters {
    /// Records read from the capture.
    pub read: AtomicU64,
    /// Records replayed.
    pub replayed: AtomicU64,
    /// Records left out: made by the publisher for one session (heartbeats, end of stream, snapshot markers) or
    /// outside the bounds.
    pub left_out: AtomicU64,
    /// Gaps the capture recorded (the session missed records there), and the seqs they cover.
    pub gaps: AtomicU64,
    /// See `gaps`.
    pub missed: AtomicU64,
    /// Records of the opening snapshot (a replay from a bound).
    pub opening_snapshot: AtomicU64,
    /// Sessions that begin again in the capture (a recorder restarted: its `seq` counts from 1 again).
    pub restarts: AtomicU64,
}

/// A copy of [`CaptureCounters`] for the run report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureReport {
    /// See [`CaptureCounters::read`].
    pub read: u64,
    /// See [`CaptureCounters::replayed`].
    pub replayed: u64,
    /// See [`CaptureCounters::left_out`].
    pub left_out: u64,
    /// See [`CaptureCounters::gaps`].
    pub gaps: u64,
    /// See [`CaptureCounters::missed`].
    pub missed: u64,
    /// See [`CaptureCounters::opening_snapshot`].
    pub opening_snapshot: u64,
    /// See [`CaptureCounters::restarts`].
    pub restarts: u64,
}

impl CaptureReport {
    /// `feed format=capture read=.. replayed=.. left_out=.. gaps=.. missed=.. opening_snapshot=.. restarts=..`.
    pub fn line(&self) -> String {
        format!(
            "feed format=capture read={} replayed={} left_out={} gaps={} missed={} opening_snapshot={} restarts={}",
            self.read, self.replayed, self.left_out, self.gaps, self.missed, self.opening_snapshot, self.restarts
        )
    }
}

impl CaptureCounters {
    fn report(&self) -> CaptureReport {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CaptureReport {
            read: ld(&self.read),
            replayed: ld(&self.replayed),
            left_out: ld(&self.left_out),
            gaps: ld(&self.gaps),
            missed: ld(&self.missed),
            opening_snapshot: ld(&self.opening_snapshot),
            restarts: ld(&self.restarts),
        }
    }
}

impl FeedCounters for CaptureCounters {
    fn publish(&self, file: &mut mdfan_tuning::counters::CountersWriter) {
        use mdfan_tuning::counters::MetricKind::Counter;
        let r = self.report();
        file.set("mdfan_capture_replayed_total", "", Counter, r.replayed);
        file.set("mdfan_capture_left_out_total", "", Counter, r.left_out);
        file.set("mdfan_capture_gaps_total", "", Counter, r.gaps);
    }

    fn report(&self, into: &mut RunReport) {
        into.capture = Some(CaptureCounters::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![CaptureCounters::report(self).line()]
    }
}

/// Opens the capture (its first segment's header is read here: the book its records build, its symbology).
pub(crate) fn open(f: &CaptureFeed) -> Result<Opened, PublisherError> {
    let capture_err = |e: mdfan_feed::capture::CaptureError| PublisherError::Capture(e);
    let mut reader = Reader::open(&f.path, f.name.as_deref(), false).map_err(capture_err)?;
    let Some(Item::Segment(meta)) = reader.next().map_err(capture_err)? else {
        return Err(PublisherError::Capture(mdfan_feed::capture::CaptureError::Format {
            path: f.path.clone(),
            offset: 0,
            detail: "no segment to replay".into(),
        }));
    };
    if meta.first_record > 0 {
        // Its first segments were deleted (retention): the books their records built are not in what is left,
        // and a replay would build every book without its start (orders it never saw added, levels missing),
        // silently wrong. Refused, naming what is gone.
        return Err(PublisherError::Capture(mdfan_feed::capture::CaptureError::Format {
            path: f.path.clone(),
            offset: 0,
            detail: format!(
                "capture {}: its first segment is {} (the {} records before it, in segments 1 to {}, are gone): a \
                 replay would build every book without its start; replay a capture that still has its first segment",
                meta.name,
                meta.segment,
                meta.first_record,
                meta.segment.saturating_sub(1)
            ),
        }));
    }
    let book = if meta.book == "mbp" { BookKind::Mbp } else { BookKind::Mbo };
    let mut symbology = Symbology::new();
    for d in &meta.symbology {
        symbology.insert(d.clone());
    }
    let counters = Arc::new(CaptureCounters::default());
    let c = Arc::clone(&counters);
    let bounds = f.clone();
    let name = format!("capture {} ({})", f.path.display(), meta.name);
    // The captured feed's identity, so that a replay says what the stream was; a capture without one, its own.
    let identity = if meta.feed.is_unknown() {
        mdfan_wire::FeedIdentity::new("capture", "", meta.name.clone())
    } else {
        meta.feed.clone()
    };
    // Before the `from_` bound: the books the captured subscriber kept, for the opening snapshot.
    // As many price-level books as the publisher's own book keeper holds (`price_level_instruments` below).
    let mbp_capacity = if book == BookKind::Mbp { symbology.len().max(4096) } else { 1 };
    let new_mbp = move || mdfan_wire::MbpBooks::with_capacity(mbp_capacity);
    let (mut books, mut mbp) = (mdfan_wire::Books::new(), new_mbp());
    // Records the rebuild refused for want of room (books past `mbp_capacity`), and the first one's instrument.
    let (mut refused, mut first_refused) = (0u64, 0u32);
    let (mut started, mut rebuilt) = (false, 0u64);
    let mut pending: std::collections::VecDeque<BookUpdate> = std::collections::VecDeque::new();
    // A restart (a recorder started again, its subscriber's books empty): every book replayed so far is
    // cleared, as the captured subscriber's were.
    let mut restarts = mdfan_feed::capture::Restarts::default();
    let mbp_flag = if book == BookKind::Mbp { mdfan_wire::record::flags::MBP } else { 0 };
    let bounded = f.from_ts_recv_ns.is_some()
        || f.to_ts_recv_ns.is_some()
        || f.from_venue_pos.is_some()
        || f.to_venue_pos.is_some();
    // The end of the replay: bounds that held no record (past the end, before the start, a `from_` of one kind
    // past a `to_` of the other) are said, not only counted (`replayed=0`).
    let ended = move |c: &CaptureCounters| {
        if bounded && c.replayed.load(Ordering::Relaxed) == 0 {
            tracing::warn!(
                read = c.read.load(Ordering::Relaxed),
                "the replay's bounds (from_/to_ keys of [feed]) hold no record of the capture: nothing replayed"
            );
        }
    };
    let source = Records::new(move || loop {
        if let Some(r) = pending.pop_front() {
            return Ok(Some(r));
        }
        let item = reader.next().map_err(|e| e.to_string())?;
        match item {
            None => {
                if let Some(t) = reader.torn() {
                    tracing::warn!(torn = t, "the capture ends on a block that is not whole: replayed up to it");
                }
                ended(&c);
                return Ok(None);
            }
            Some(Item::Record(r)) => {
                c.read.fetch_add(1, Ordering::Relaxed);
                if let Some(clears) = restarts.record(&r) {
                    c.restarts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        record = c.read.load(Ordering::Relaxed) - 1,
                        books = clears.len(),
                        "the capture holds a restarted session here: every book so far is cleared"
                    );
                    if started {
                        pending.extend(clears.into_iter().map(|x| BookUpdate { flags: x.flags | mbp_flag, ..x }));
                    } else {
                        (books, mbp) = (mdfan_wire::Books::new(), new_mbp());
                    }
                }
                if !started && bounds.before(&r) {
                    // Kept as the captured subscriber kept it (a book refused here was refused there too).
                    let _ = books.apply(&r);
                    if let Err(mdfan_wire::mbp::MbpError::Full { instrument_id, .. }) = mbp.apply(&r) {
                        first_refused = if refused == 0 { instrument_id } else { first_refused };
                        refused += 1;
                    }
                    rebuilt += 1;
                    c.left_out.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if bounds.past(&r) {
                    c.left_out.fetch_add(1, Ordering::Relaxed);
                    ended(&c);
                    return Ok(None);
                }
                if mdfan_feed::capture::is_session_record(&r) {
                    c.left_out.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if !started {
                    started = true;
                    if refused > 0 {
                        tracing::warn!(
                            refused,
                            first_instrument_id = first_refused,
                            capacity = mbp_capacity,
                            "the opening snapshot leaves out price-level books: more instruments than the publisher \
                             keeps books for (its symbology's, at least 4096)"
                        );
                    }
                    if rebuilt > 0 {
                        let mut opening = Vec::new();
                        if book == BookKind::Mbp {
                            mbp.snapshot_into(None, &mut opening);
                        } else {
                            for (id, b) in books.iter_sorted() {
                                b.snapshot_into(id, &mut opening);
                            }
                        }
                        c.opening_snapshot.store(opening.len() as u64, Ordering::Relaxed);
                        pending.extend(opening);
                        (books, mbp) = (mdfan_wire::Books::new(), mdfan_wire::MbpBooks::with_capacity(1));
                    }
                }
                c.replayed.fetch_add(1, Ordering::Relaxed);
                let r = BookUpdate { seq: 0, ts_send_ticks: 0, ..r };
                if pending.is_empty() {
                    return Ok(Some(r));
                }
                pending.push_back(r);
            }
            Some(Item::Gap { expected, got }) => {
                c.gaps.fetch_add(1, Ordering::Relaxed);
                let missed = c.missed.load(Ordering::Relaxed).saturating_add(got.saturating_sub(expected));
                c.missed.store(missed, Ordering::Relaxed); // this thread is its only writer
                tracing::warn!(expected, got, "the capture recorded a gap: the session missed these records");
            }
            Some(Item::Segment(_) | Item::Stop { .. }) => {}
        }
    });
    Ok(Opened {
        source: Box::new(source),
        traits: FeedTraits {
            live: false,
            book,
            price_level_instruments: (book == BookKind::Mbp).then_some(symbology.len().max(4096)),
            identity,
        },
        counters: vec![counters],
        symbology,
        definitions: None,
        name,
        bound: Default::default(),
    })
}
