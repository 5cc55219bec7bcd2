//! `format = "lobster"`: a LOBSTER message CSV replayed with its order-book CSV, every message checked against
//! its row (`mdfan_feed::lobster`). Records: price-level (MBP) records of the order-book rows, and trades.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mdfan_tuning::counters::{CountersWriter, MetricKind};
use mdfan_wire::control::BookKind;
use mdfan_wire::Symbology;
use serde::Deserialize;

use super::{Checker, FeedCounters, FeedTraits, Opened, Records};
use crate::config::{ConfigError, FeedFormat, Pace};
use crate::{PublisherError, RunReport};

/// The `[feed]` keys of `format = "lobster"`.
pub const FEED_KEYS: &[&str] = &["format", "path", "orderbook", "session_date", "pace", "max_gap_ms", "symbols"];

/// `[feed]` for `format = "lobster"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LobsterFeed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// The message CSV (required), resolved against the config file's folder.
    #[serde(default)]
    pub path: PathBuf,
    /// The order-book CSV that goes with `path`, relative to the config file's folder. Default: `path` with
    /// `_message_` replaced by `_orderbook_` in its file name.
    #[serde(default)]
    pub orderbook: Option<PathBuf>,
    /// The trading day (LOBSTER times are seconds after its US Eastern midnight), `YYYY-MM-DD`. Default: the
    /// date in the message file's name.
    #[serde(default)]
    pub session_date: Option<String>,
    /// Replay pace.
    #[serde(default = "crate::config::default_pace")]
    pub pace: Pace,
    /// Under realtime or factor pacing, gaps in ts_recv longer than this are shortened to it, in ms.
    #[serde(default = "crate::config::default_max_gap_ms")]
    pub max_gap_ms: u64,
    /// A symbol file added to the ticker the file's name gives.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
}

impl LobsterFeed {
    /// Checks the keys and resolves the paths.
    pub(crate) fn check(&mut self, c: &Checker<'_>) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            return Err(c.bad("feed.format", "\"lobster\" needs feed.path (the message CSV to replay)"));
        }
        if let Some(date) = self.session_date.as_deref() {
            if crate::config::session_midnight_ns(date).is_none() {
                return Err(c.bad("feed.session_date", format!("{date:?}: want the file's trading day as YYYY-MM-DD")));
            }
        }
        self.path = c.resolve(&self.path);
        self.orderbook = self.orderbook.as_deref().map(|p| c.resolve(p));
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        Ok(())
    }
}

/// What a LOBSTER replay checked, readable from any thread (Relaxed; stored by the feed thread after each
/// message).
#[derive(Debug, Default)]
pub struct LobsterCounters {
    /// Messages read (= order-book rows read: the files go together row by row).
    pub messages: AtomicU64,
    /// Order-book rows equal to the level-1 book the messages rebuilt (rows 2 on: row 1 is where the rebuild
    /// starts). A row that differs stops the replay (`feed_error`, naming its line).
    pub rows_checked: AtomicU64,
}

/// A copy of [`LobsterCounters`] for the run report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LobsterReport {
    /// See [`LobsterCounters::messages`].
    pub messages: u64,
    /// See [`LobsterCounters::rows_checked`].
    pub rows_checked: u64,
}

impl LobsterCounters {
    /// A copy of both counters.
    pub fn report(&self) -> LobsterReport {
        LobsterReport {
            messages: self.messages.load(Ordering::Relaxed),
            rows_checked: self.rows_checked.load(Ordering::Relaxed),
        }
    }
}

impl LobsterReport {
    /// `feed format=lobster messages=57515 orderbook_rows_checked=57514`: every order-book row after the first
    /// was equal to the level-1 book the messages gave (the first is where the rebuild starts).
    pub fn line(&self) -> String {
        format!("feed format=lobster messages={} orderbook_rows_checked={}", self.messages, self.rows_checked)
    }
}

impl FeedCounters for LobsterCounters {
    fn publish(&self, file: &mut CountersWriter) {
        let r = self.report();
        file.set("mdfan_lobster_messages_total", "", MetricKind::Counter, r.messages);
        file.set("mdfan_lobster_rows_checked_total", "", MetricKind::Counter, r.rows_checked);
    }

    fn report(&self, into: &mut RunReport) {
        into.lobster = Some(LobsterCounters::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![LobsterCounters::report(self).line()]
    }
}

/// Opens the two files (their names and first rows are checked here) as a record source: records as
/// `mdfan_feed::lobster` documents them (price-level records of the order-book rows and trades, `venue_seq` = the
/// message's line, `ts_recv_ns` = `ts_event_ns` flagged `BAD_TS_RECV`). A row the messages cannot give stops the
/// replay with the error naming the order-book file and line: the two files do not belong together.
pub(crate) fn open(f: &LobsterFeed) -> Result<Opened, PublisherError> {
    let name = mdfan_feed::lobster::FileName::parse(&f.path)?;
    let (y, m, d) = name.date;
    let midnight = match f.session_date.as_deref().and_then(crate::config::session_midnight_ns) {
        Some(ns) => ns,
        None => mdfan_feed::itch::eastern_midnight_ns(y, m, d).ok_or_else(|| {
            mdfan_feed::lobster::LobsterError::FileName {
                file: f.path.clone(),
                detail: format!("date {y:04}-{m:02}-{d:02} is not in the calendar"),
            }
        })?,
    };
    let mut feed = mdfan_feed::lobster::LobsterFeed::open(&f.path, f.orderbook.as_deref(), midnight)?;
    let mut symbology = Symbology::new();
    symbology.insert(mdfan_wire::InstrumentDef::new(mdfan_feed::lobster::INSTRUMENT_ID, name.ticker));
    let counters = Arc::new(LobsterCounters::default());
    let c = Arc::clone(&counters);
    let (mut queued, mut next) = (Vec::new(), 0usize);
    let source = Records::new(move || loop {
        if next < queued.len() {
            next += 1;
            return Ok(Some(queued[next - 1]));
        }
        let Some((_, records)) = feed.next_message().map_err(|e| e.to_string())? else { return Ok(None) };
        queued.clear();
        queued.extend_from_slice(records.as_slice());
        next = 0;
        c.messages.store(feed.counts().total(), Ordering::Relaxed);
        c.rows_checked.store(feed.level1().map_or(0, |b| b.consistent), Ordering::Relaxed);
    });
    Ok(Opened {
        source: Box::new(source),
        traits: FeedTraits {
            live: false,
            book: BookKind::Mbp,
            price_level_instruments: Some(1),
            identity: mdfan_wire::FeedIdentity::new("lobster", "", super::file_name(&f.path)),
        },
        counters: vec![counters],
        symbology,
        definitions: None,
        name: f.path.display().to_string(),
        bound: Default::default(),
    })
}
