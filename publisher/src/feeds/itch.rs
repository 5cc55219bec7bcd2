//! `format = "itch50"`: Nasdaq TotalView-ITCH 5.0, from a BinaryFILE (plain or gzip, replayed) or, with a
//! `[lines]` section, live over MoldUDP64 ([`crate::live_itch`]). Records: order-level, keyed by stock locate
//! (`mdfan_feed::itch`); symbols from the Stock Directory (`R`) messages.

use std::path::PathBuf;
use std::sync::Arc;

use mdfan_wire::control::BookKind;
use mdfan_wire::BookUpdate;
use serde::Deserialize;

use super::{Checker, FeedCounters, FeedTraits, Opened, Records};
use crate::config::{line_set, ConfigError, FeedFormat, MoldStart, Pace};
use crate::{PublisherError, RunReport, TsRecvClockCell};

/// The `[feed]` keys of `format = "itch50"`.
pub const FEED_KEYS: &[&str] = &["format", "path", "session_date", "pace", "max_gap_ms", "symbols"];
/// The `[lines]` keys of a live ITCH feed besides the ones every line set reads (`config::LINE_SET_KEYS`).
pub const LINES_KEYS: &[&str] =
    &["retransmit", "retransmit_timeout_ms", "retransmit_retries", "session", "start", "window_messages", "max_orders"];

/// `[feed]` for `format = "itch50"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItchFeed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// The BinaryFILE (a file feed; none with `[lines]`), resolved against the config file's folder.
    #[serde(default)]
    pub path: PathBuf,
    /// The trading day, `YYYY-MM-DD` (required): ITCH timestamps are ns since its midnight, US Eastern time.
    #[serde(default)]
    pub session_date: Option<String>,
    /// Replay pace (a file).
    #[serde(default = "crate::config::default_pace")]
    pub pace: Pace,
    /// Under realtime or factor pacing, gaps in ts_recv longer than this are shortened to it, in ms.
    #[serde(default = "crate::config::default_max_gap_ms")]
    pub max_gap_ms: u64,
    /// A symbol file whose definitions are added to the Stock Directory's.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
    /// `[lines]`: a live feed over MoldUDP64; `None`: the file.
    #[serde(skip)]
    pub lines: Option<MoldLines>,
}

line_set! {
    /// `[lines]` of a live ITCH 5.0 feed over MoldUDP64: line A, an optional line B (arbitrated by MoldUDP64
    /// sequence number), the re-request server. Source: Nasdaq "MoldUDP64 Protocol Specification" 1.00.
    pub struct MoldLines {
        /// The MoldUDP64 re-request server (unicast ip:port) gaps are requested from. `None`: a hole waits
        /// `retransmit_timeout_ms` for the other line, then is given up (its locates marked stale).
        #[serde(default)]
        pub retransmit: Option<std::net::SocketAddrV4>,
        /// How long a request waits for its answer before it is sent again, in ms. 1 to 60,000; default 50.
        #[serde(default = "crate::config::default_retransmit_timeout_ms")]
        pub retransmit_timeout_ms: u64,
        /// Requests sent again after the first times out, before the hole is given up. 0 to 100; default 3.
        #[serde(default = "crate::config::default_retransmit_retries")]
        pub retransmit_retries: u32,
        /// The MoldUDP64 session (up to 10 ASCII characters, space-padded). Default: the first packet's.
        #[serde(default)]
        pub session: Option<String>,
        /// `"first_seen"` (default: start at the first packet seen) or `"one"` (expect the session from
        /// sequence number 1, requesting what came before the first packet).
        #[serde(default)]
        pub start: MoldStart,
        /// Messages that may wait behind a hole (64-byte slots allocated at start). 16 to 2^24; default 65,536.
        #[serde(default = "crate::config::default_window_messages")]
        pub window_messages: usize,
        /// Resting orders the order reference table holds at most: an add past them is refused, counted
        /// (`orders_refused`) and its stock locate marked stale, so forged adds under new references cannot
        /// grow the table until memory runs out (about 64 bytes an order at the most). 1,024 to 2^28; default
        /// 2^24 (16,777,216, about 1 GiB).
        #[serde(default = "crate::config::default_max_orders")]
        pub max_orders: usize,
    }
}

impl ItchFeed {
    /// US Eastern midnight of `session_date`, ns since the UNIX epoch (checked by [`ItchFeed::check`]).
    pub fn midnight_ns(&self) -> Option<u64> {
        self.session_date.as_deref().and_then(crate::config::session_midnight_ns)
    }

    /// Checks the keys (and `[lines]`) and resolves the paths.
    pub(crate) fn check(&mut self, c: &Checker<'_>) -> Result<(), ConfigError> {
        let date = self.session_date.as_deref().unwrap_or_default();
        let Some(lines) = &self.lines else {
            if self.path.as_os_str().is_empty() {
                return Err(c.bad("feed.format", "\"itch50\" needs feed.path (the file to replay)"));
            }
            if self.midnight_ns().is_none() {
                return Err(c.bad(
                    "feed.session_date",
                    format!("{date:?}: \"itch50\" needs the file's trading day as YYYY-MM-DD"),
                ));
            }
            self.path = c.resolve(&self.path);
            self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
            return Ok(());
        };
        let Some(a) = &lines.a else {
            return Err(c.bad("lines", "a live feed needs line A (lines.a)"));
        };
        if !self.path.as_os_str().is_empty() {
            return Err(c.bad("feed.path", "a live feed (\"itch50\" with [lines]) reads [lines], not a file"));
        }
        if self.pace != Pace::Max {
            return Err(c.bad("feed.pace", "a live feed is sent as it arrives: only \"max\""));
        }
        if self.midnight_ns().is_none() {
            return Err(c.bad(
                "feed.session_date",
                format!("{date:?}: \"itch50\" needs the session's trading day as YYYY-MM-DD"),
            ));
        }
        if lines.b.as_ref().is_some_and(|b| b.addr == a.addr) && a.port() != 0 {
            return Err(c.bad("lines.b", format!("{a}: the same address as line A")));
        }
        if !(1..=60_000).contains(&lines.retransmit_timeout_ms) {
            let v = lines.retransmit_timeout_ms;
            return Err(c.bad("lines.retransmit_timeout_ms", format!("{v}: must be 1 to 60000")));
        }
        if lines.retransmit_retries > 100 {
            let v = lines.retransmit_retries;
            return Err(c.bad("lines.retransmit_retries", format!("{v}: must be 0 to 100")));
        }
        if let Some(s) = &lines.session {
            if s.is_empty() || s.len() > 10 || !s.is_ascii() {
                return Err(c.bad("lines.session", format!("{s:?}: must be 1 to 10 ASCII characters")));
            }
        }
        if !(16..=1 << 24).contains(&lines.window_messages) {
            let v = lines.window_messages;
            return Err(c.bad("lines.window_messages", format!("{v}: must be 16 to 16777216")));
        }
        if !(1 << 10..=1 << 28).contains(&lines.max_orders) {
            let v = lines.max_orders;
            return Err(c.bad("lines.max_orders", format!("{v}: must be 1024 to 268435456")));
        }
        lines.check_shared(c)?;
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        Ok(())
    }
}

impl FeedCounters for crate::live_itch::MoldCounters {
    fn publish(&self, file: &mut mdfan_tuning::counters::CountersWriter) {
        crate::counter_sets::publish_mold(self, file);
    }

    fn report(&self, into: &mut RunReport) {
        into.moldudp64 = Some(crate::live_itch::MoldCounters::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![crate::live_itch::MoldCounters::report(self).line()]
    }
}

/// Opens the file (its Stock Directory read first) or binds the lines.
pub(crate) fn open(f: &ItchFeed, ts_recv_clock: &TsRecvClockCell) -> Result<Opened, PublisherError> {
    let midnight = f.midnight_ns().expect("checked by the config");
    let Some(lines) = &f.lines else { return open_file(f, midnight) };
    super::live_clock(ts_recv_clock);
    // Symbols: the Stock Directory messages as they come, to the conductor (live_itch's module docs).
    let (to_conductor, from_feed) = crate::definitions::definition_queue(crate::live_itch::DIRECTORY_QUEUE_ENTRIES);
    let live = crate::live_itch::LiveItch::open(lines, midnight, ts_recv_clock.clone(), to_conductor)?;
    let (counters, addrs) = (live.counters(), live.line_addrs());
    let name = match lines.b {
        Some(_) => format!("itch50 moldudp64 line_a={} line_b={}", addrs[0], addrs[1]),
        None => format!("itch50 moldudp64 line_a={} line_b=none", addrs[0]),
    };
    Ok(Opened {
        source: Box::new(live),
        traits: FeedTraits {
            live: true,
            book: BookKind::Mbo,
            price_level_instruments: None,
            identity: mdfan_wire::FeedIdentity::new("moldudp64", "", format!("line_a={}", addrs[0])),
        },
        counters: vec![Arc::clone(&counters) as Arc<dyn FeedCounters>],
        symbology: Default::default(),
        definitions: Some(from_feed),
        name,
        bound: super::Bound { channels: Vec::new(), mold: Some((counters, addrs)) },
    })
}

/// A BinaryFILE: each message normalised (order-level records keyed by stock locate; up to three per message),
/// the venue seq = the message's position in the file. The file has no capture times, so `ts_recv_ns` is the
/// message's own (absolute) timestamp, flagged `BAD_TS_RECV` (paced replays follow the exchange's clock; no
/// wire-to-poll is measured). Symbols: a first pass over the file's Stock Directory messages, so that every
/// subscriber, however early it attaches, gets every definition in its Accept (a table the feed thread filled as
/// it went would race the first attaches, which come before the replay). A file cut or corrupt somewhere gives
/// the definitions before that place: the replay meets the same error there, after the records before it, and
/// ends with feed_error.
fn open_file(f: &ItchFeed, midnight: u64) -> Result<Opened, PublisherError> {
    let mut file = mdfan_feed::itch::ItchFile::open(&f.path)?;
    let mut normalizer = mdfan_feed::itch::ItchNormalizer::new(midnight, 1 << 20);
    let (symbology, _stopped) = mdfan_feed::itch::stock_directory(&f.path)?;
    let (mut queued, mut next, mut position) = ([BookUpdate::control(mdfan_wire::Kind::NoAction); 3], 3usize, 0u64);
    let mut len = 0usize;
    let mut records = mdfan_feed::itch::Records::default();
    let counters = Arc::new(ItchFileCounters::default());
    let c = Arc::clone(&counters);
    let mut skipped_stored = 0u64;
    let source = Records::new(move || loop {
        if next < len {
            next += 1;
            return Ok(Some(queued[next - 1]));
        }
        let venue_seq = position.wrapping_add(1);
        if file.next_into(&mut normalizer, venue_seq, &mut records).map_err(|e| e.to_string())?.is_none() {
            return Ok(None);
        }
        position = venue_seq;
        c.messages.store(position, std::sync::atomic::Ordering::Relaxed);
        let skipped = &normalizer.stats().skipped;
        if skipped.total() != skipped_stored {
            skipped_stored = skipped.total();
            c.skipped.store(skipped);
        }
        len = records.as_slice().len();
        next = 0;
        for (slot, r) in queued.iter_mut().zip(records.as_slice()) {
            *slot = BookUpdate { ts_recv_ns: r.ts_event_ns, flags: r.flags | mdfan_wire::flags::BAD_TS_RECV, ..*r };
        }
    });
    Ok(Opened {
        source: Box::new(source),
        traits: FeedTraits {
            live: false,
            book: BookKind::Mbo,
            price_level_instruments: None,
            identity: mdfan_wire::FeedIdentity::new("itch5", "", super::file_name(&f.path)),
        },
        counters: vec![counters],
        symbology,
        definitions: None,
        name: f.path.display().to_string(),
        bound: Default::default(),
    })
}

/// What an ITCH 5.0 file replay counted, readable from any thread: messages read, and the messages skipped (no
/// record and nothing kept: NOII, RPII, LULD collars, types ITCH 5.0 does not define, ...) by type byte, with the
/// byte offset of the first of each type in the file.
#[derive(Debug, Default)]
pub struct ItchFileCounters {
    /// Messages read from the file.
    pub messages: std::sync::atomic::AtomicU64,
    /// Skipped messages by type; `first_seq` holds the byte offset of the first's length prefix.
    pub skipped: crate::live_itch::SkippedCounters,
}

/// A copy of [`ItchFileCounters`] for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItchFileReport {
    /// See [`ItchFileCounters::messages`].
    pub messages: u64,
    /// Each type skipped: type byte, count, byte offset of the first.
    pub skipped: Vec<(u8, u64, u64)>,
}

impl ItchFileReport {
    /// `feed format=itch50 messages=.. skipped=I:2@1024,J:1@4096` (type, count, the byte offset of the first;
    /// `none` when nothing was skipped).
    pub fn line(&self) -> String {
        format!(
            "feed format=itch50 messages={} skipped={}",
            self.messages,
            crate::live_itch::skipped_text(&self.skipped)
        )
    }
}

impl ItchFileCounters {
    fn report(&self) -> ItchFileReport {
        ItchFileReport {
            messages: self.messages.load(std::sync::atomic::Ordering::Relaxed),
            skipped: self.skipped.each(),
        }
    }
}

impl FeedCounters for ItchFileCounters {
    fn publish(&self, file: &mut mdfan_tuning::counters::CountersWriter) {
        use mdfan_tuning::counters::MetricKind::{Counter, Gauge};
        let r = ItchFileCounters::report(self);
        file.set("mdfan_itch_messages_total", "", Counter, r.messages);
        for &(t, n, first) in &r.skipped {
            let l = format!("type=\"{}\"", mdfan_feed::itch::type_label(t));
            file.set("mdfan_itch_skipped_total", &l, Counter, n);
            file.set("mdfan_itch_skipped_first_offset_bytes", &l, Gauge, first);
        }
    }

    fn report(&self, into: &mut RunReport) {
        into.itch_file = Some(ItchFileCounters::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![ItchFileCounters::report(self).line()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters file's rows of an ITCH file replay: messages, and each skipped type with its count and the
    /// byte offset of its first.
    #[test]
    fn an_itch_file_replay_writes_its_skipped_messages_by_type_into_the_counters_file() {
        let c = ItchFileCounters::default();
        c.messages.store(1000, std::sync::atomic::Ordering::Relaxed);
        let mut skipped = mdfan_feed::itch::Skipped::default();
        for at in [802, 900, 950, 990] {
            skipped.note(b'I', at);
        }
        skipped.note(b'S', 54);
        c.skipped.store(&skipped);
        let dir = std::env::temp_dir().join(format!("mdfan-itch-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.counters");
        let _ = std::fs::remove_file(&path);
        let mut w = mdfan_tuning::counters::CountersWriter::create(&path, "publisher", "test", 16).unwrap();
        w.begin();
        FeedCounters::publish(&c, &mut w);
        w.commit(1);
        let snap = mdfan_tuning::counters::read(&path).unwrap();
        assert_eq!(snap.get("mdfan_itch_messages_total", ""), Some(1000));
        assert_eq!(snap.get("mdfan_itch_skipped_total", "type=\"I\""), Some(4));
        assert_eq!(snap.get("mdfan_itch_skipped_first_offset_bytes", "type=\"I\""), Some(802));
        assert_eq!(snap.get("mdfan_itch_skipped_total", "type=\"S\""), Some(1));
        assert_eq!(snap.get("mdfan_itch_skipped_first_offset_bytes", "type=\"S\""), Some(54));
        drop(w);
        let _ = std::fs::remove_dir_all(dir);
    }
}
