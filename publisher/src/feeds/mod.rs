//! The feed seam: every source of records behind one trait, one module per format, one place that opens a
//! source from the config.
//!
//! | piece | what it is |
//! |---|---|
//! | [`FeedSource`] | one duty cycle of a source into the journal ([`FeedSource::step`]), with a typed error |
//! | [`FeedTraits`] | what the rest of the publisher must know of a source: whether the journal may wait for it (a file) or not (a live feed: the market does not wait), which book its records build, how many price-level books to keep |
//! | [`FeedCounters`] | a source's counters: its rows in the counters file, its part of the run report, its lines in a SIGUSR1 dump |
//! | [`Opened`] | a source as [`open`] returns it: the source, its traits, counters, initial symbology, its definition queue (symbology updates while it runs) and its bound lines |
//! | [`FeedConfig`] | `[feed]` as a tagged table per format (`format = "..."`), each format's keys (and its `[lines]`) its module's own: unknown keys are errors, checked by that module |
//! | [`FeedAgent`] | the feed thread's agent: it holds the source and runs its duty cycles |
//!
//! Formats: [`dbn`] (a DBN MBO file), [`itch`] (an ITCH 5.0 file, or live over MoldUDP64 with `[lines]`:
//! [`crate::live_itch`]), [`lobster`] (LOBSTER CSVs), [`mdp3`] (live CME MDP 3.0 channels: [`crate::live`]),
//! [`capture`] (an mdfan capture, replayed), [`relay`] (`format = "mdfan"`: another mdfan publisher's stream,
//! for `mdfan-relay`).
//!
//! ## Adding a feed
//!
//! 1. The decoder, sans I/O, in `mdfan-feed` (a module per format; its records as `mdfan_wire::record` documents
//!    them, with their venue position).
//! 2. A module here: its `[feed]` keys (a struct with `deny_unknown_fields` and a `format` field), its `[lines]`
//!    if it is live, their checks (`check`, naming each bad key with its line through [`Checker`]), and `open`,
//!    which builds its [`FeedSource`] (a file: a record iterator in [`Records`]; live: a line set from
//!    `mdfan-lines` and the `mdfan-arbiter` arbiter), its [`FeedTraits`] and its [`FeedCounters`].
//! 3. A variant in [`FeedConfig`] and in `config::FeedFormat`, and an arm in [`open`] and in the config's
//!    format dispatch (`config::parse_feed`).
//! 4. Its record layout in `mdfan_wire::record` if it adds one; docs/ARCHITECTURE.md; a test that replays real
//!    data to its reference values.
//!
//! Nothing else in the publisher names a format.

pub mod capture;
pub mod dbn;
pub mod itch;
pub mod lobster;
pub mod mdp3;
pub mod relay;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mdfan_tuning::counters::CountersWriter;
use mdfan_tuning::Agent;
use mdfan_wire::control::{BookKind, TsRecvClock};
use mdfan_wire::{BookUpdate, Symbology};

use crate::config::{ConfigError, Pace};
use crate::journal::JournalWriter;
use crate::{PublisherError, RunReport, TsRecvClockCell};

/// The feed thread's idle strategy while the journal is full: yield a few times, then sleep from 1 us up to
/// 100 us (it waits for the hot loop and the conductor, and shares cores with them).
pub const FEED_IDLE: mdfan_tuning::IdleStrategy =
    mdfan_tuning::IdleStrategy::Backoff { spins: 0, yields: 16, max_park: std::time::Duration::from_micros(100) };
/// Records a file source appends per duty cycle at most.
const FEED_BATCH: usize = 256;

/// What one duty cycle of a source did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Records written to the journal, or datagrams read (0: nothing to do, or the journal is full).
    Work(usize),
    /// The feed ended normally (a file's end; a live feed's `lines.end_after_idle_ms`).
    Ended,
}

/// Why a source stopped: the feed ends with this error (`RunReport::feed_error`), after the records before it.
#[derive(Debug, thiserror::Error)]
pub enum FeedSourceError {
    /// A file's record or message that cannot be read: the error names the file, the byte offset or line and
    /// the field.
    #[error("{0}")]
    File(String),
    /// A relay's upstream session ended for good (`format = "mdfan"`): the endpoint and why.
    #[error("{0}")]
    Upstream(String),
    /// A live feed's socket read that failed for a reason other than "nothing to read".
    #[error("feed lines: {0}")]
    Lines(#[from] mdfan_lines::LineError),
}

/// A source of normalised records: decodes its input and appends records to the journal, one bounded duty cycle
/// at a time, on the feed thread (or a test's). It never blocks: a full journal makes it return (a live source
/// stops reading its sockets until the records it holds went in).
pub trait FeedSource: Send {
    /// One duty cycle.
    ///
    /// # Errors
    /// [`FeedSourceError`]: the feed stops there (the records before it were published).
    fn step(&mut self, writer: &mut JournalWriter) -> Result<Step, FeedSourceError>;

    /// Whether its input is a ring it busy-polls (a relay's upstream session): its thread then idles as the hot
    /// loop does (`publisher.hot_idle`) instead of parking under [`FEED_IDLE`], which would add up to 100 us
    /// to every record's way. Default false.
    fn busy_polls(&self) -> bool {
        false
    }
}

/// A feed file's name without its folder (a feed's channel in its identity).
pub(crate) fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// What the publisher must know of a source besides its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTraits {
    /// A live feed: the market does not wait, so the journal never waits for a late joiner's catch-up, the hot
    /// loop does not wait for subscribers, the records are not paced, and an instrument not seen yet may still
    /// come. `false`: a file, which waits for the journal's readers.
    pub live: bool,
    /// Which book its records build (what each `Accept` says).
    pub book: BookKind,
    /// Price-level books the conductor keeps for snapshots (`None`: an order-level feed).
    pub price_level_instruments: Option<usize>,
    /// What the feed is (what each `Accept` says, and a recorder keeps).
    pub identity: mdfan_wire::FeedIdentity,
}

/// A source's counters, read off the feed thread: written into the counters file, the run report and a dump.
pub trait FeedCounters: Send + Sync {
    /// Stages its rows of the counters file.
    fn publish(&self, file: &mut CountersWriter);
    /// Fills its part of the run report.
    fn report(&self, into: &mut RunReport);
    /// Its lines of a SIGUSR1 dump (`feed format=...`).
    fn lines(&self) -> Vec<String>;
}

/// A source as [`open`] returns it.
pub struct Opened {
    /// The source.
    pub source: Box<dyn FeedSource>,
    /// Its traits.
    pub traits: FeedTraits,
    /// Its counters (none, one, or one per live MDP 3.0 channel).
    pub counters: Vec<Arc<dyn FeedCounters>>,
    /// The instruments it names at start (a file's metadata or directory; symbol files are added by [`open`]).
    pub symbology: Symbology,
    /// Definitions it learns while it runs, for the conductor ([`crate::definitions`]).
    pub definitions: Option<crate::definitions::DefinitionReceiver>,
    /// What it is, for logs: the file, or the lines as bound.
    pub name: String,
    /// A live feed's lines as bound ([`Bound`]).
    pub bound: Bound,
}

/// A live feed's lines as bound (with port 0 in the config, the ports the system picked).
#[derive(Debug, Clone, Default)]
pub struct Bound {
    /// A live MDP 3.0 feed's channels.
    pub channels: Vec<crate::ChannelInfo>,
    /// A live ITCH feed's counters and lines (A, B; B = A without line B).
    pub mold: Option<(Arc<crate::live_itch::MoldCounters>, [std::net::SocketAddrV4; 2])>,
}

/// `[feed]`, by format: each format's keys (and `[lines]`) as its module reads them.
#[derive(Debug, Clone)]
pub enum FeedConfig {
    /// `format = "dbn"`.
    Dbn(dbn::DbnFeed),
    /// `format = "itch50"` (a file, or live with `[lines]`).
    Itch50(itch::ItchFeed),
    /// `format = "lobster"`.
    Lobster(lobster::LobsterFeed),
    /// `format = "mdp3"`.
    Mdp3(mdp3::Mdp3Feed),
    /// `format = "capture"`.
    Capture(capture::CaptureFeed),
    /// `format = "mdfan"`: another mdfan publisher's stream (a relay).
    Relay(relay::RelayFeed),
}

impl FeedConfig {
    /// The format's name, as the config spells it.
    pub fn format_name(&self) -> &'static str {
        match self {
            FeedConfig::Dbn(_) => "dbn",
            FeedConfig::Itch50(_) => "itch50",
            FeedConfig::Lobster(_) => "lobster",
            FeedConfig::Mdp3(_) => "mdp3",
            FeedConfig::Capture(_) => "capture",
            FeedConfig::Relay(_) => "mdfan",
        }
    }

    /// Whether it is a live feed (from `[lines]`).
    pub fn is_live(&self) -> bool {
        match self {
            FeedConfig::Dbn(_) | FeedConfig::Lobster(_) | FeedConfig::Capture(_) => false,
            FeedConfig::Itch50(f) => f.lines.is_some(),
            FeedConfig::Mdp3(_) | FeedConfig::Relay(_) => true,
        }
    }

    /// The replay pace (a live feed: [`Pace::Max`]).
    pub fn pace(&self) -> Pace {
        match self {
            FeedConfig::Dbn(f) => f.pace,
            FeedConfig::Itch50(f) => f.pace,
            FeedConfig::Lobster(f) => f.pace,
            FeedConfig::Capture(f) => f.pace,
            FeedConfig::Mdp3(_) | FeedConfig::Relay(_) => Pace::Max,
        }
    }

    /// `feed.max_gap_ms` (a live feed: its default, unused).
    pub fn max_gap_ms(&self) -> u64 {
        match self {
            FeedConfig::Dbn(f) => f.max_gap_ms,
            FeedConfig::Itch50(f) => f.max_gap_ms,
            FeedConfig::Lobster(f) => f.max_gap_ms,
            FeedConfig::Capture(f) => f.max_gap_ms,
            FeedConfig::Mdp3(_) | FeedConfig::Relay(_) => crate::config::default_max_gap_ms(),
        }
    }

    /// `feed.symbols`, resolved against the config's folder.
    pub fn symbols(&self) -> Option<&std::path::Path> {
        match self {
            FeedConfig::Dbn(f) => f.symbols.as_deref(),
            FeedConfig::Itch50(f) => f.symbols.as_deref(),
            FeedConfig::Lobster(f) => f.symbols.as_deref(),
            FeedConfig::Mdp3(f) => f.symbols.as_deref(),
            FeedConfig::Capture(f) => f.symbols.as_deref(),
            FeedConfig::Relay(f) => f.symbols.as_deref(),
        }
    }

    /// The file a file feed replays (`None` for a live feed).
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            FeedConfig::Dbn(f) => Some(&f.path),
            FeedConfig::Itch50(f) => f.lines.is_none().then_some(f.path.as_path()),
            FeedConfig::Lobster(f) => Some(&f.path),
            FeedConfig::Capture(f) => Some(&f.path),
            FeedConfig::Mdp3(_) | FeedConfig::Relay(_) => None,
        }
    }
}

/// Opens the source `cfg.feed` names (the one place that does): checks the file's header or binds the lines,
/// builds the records' source, its traits and counters; then adds `feed.symbols` to its symbology (for MDP 3.0,
/// under each channel's own symbol file). `ts_recv_clock` is what every `Accept` says stamped
/// `ts_recv_ns` (a live feed sets it as its datagrams come).
///
/// # Errors
/// [`PublisherError`] naming the file (and record) or the line (and config key) that failed.
pub fn open(cfg: &crate::config::Config, ts_recv_clock: &TsRecvClockCell) -> Result<Opened, PublisherError> {
    let mut opened = match &cfg.feed {
        FeedConfig::Dbn(f) => dbn::open(f)?,
        FeedConfig::Itch50(f) => itch::open(f, ts_recv_clock)?,
        FeedConfig::Lobster(f) => lobster::open(f)?,
        FeedConfig::Mdp3(f) => mdp3::open(f, ts_recv_clock)?,
        FeedConfig::Capture(f) => capture::open(f)?,
        FeedConfig::Relay(f) => relay::open(f)?,
    };
    if let Some(path) = cfg.feed.symbols() {
        let general = mdfan_feed::symbols::load_symbol_file(path)?;
        match cfg.feed {
            // An MDP 3.0 channel's own symbol file (the source's symbology) names its instruments better.
            FeedConfig::Mdp3(_) => opened.symbology = with_replacements(general, opened.symbology),
            _ => opened.symbology.extend(general),
        }
    }
    Ok(opened)
}

/// `base` with every definition of `over` replacing `base`'s of the same instrument_id.
fn with_replacements(mut base: Symbology, over: Symbology) -> Symbology {
    base.extend(over);
    base
}

/// A file source: the next record from a decoder (`None` at the file's end; an error names the file, the byte
/// offset or line, and the record), appended up to 256 per duty cycle.
pub struct Records<F> {
    next: F,
    pending: Option<BookUpdate>,
}

impl<F: FnMut() -> Result<Option<BookUpdate>, String> + Send> Records<F> {
    /// A source of `next`'s records.
    pub fn new(next: F) -> Records<F> {
        Records { next, pending: None }
    }
}

impl<F: FnMut() -> Result<Option<BookUpdate>, String> + Send> FeedSource for Records<F> {
    fn step(&mut self, writer: &mut JournalWriter) -> Result<Step, FeedSourceError> {
        let mut n = 0;
        while n < FEED_BATCH {
            let record = match self.pending.take() {
                Some(r) => r,
                None => match (self.next)().map_err(FeedSourceError::File)? {
                    Some(r) => r,
                    None => return Ok(Step::Ended),
                },
            };
            if !writer.try_push(&record) {
                self.pending = Some(record);
                break;
            }
            n += 1;
        }
        Ok(Step::Work(n))
    }
}

/// Says which clock stamped a live feed's records (software until its datagrams say otherwise).
pub(crate) fn live_clock(cell: &TsRecvClockCell) {
    cell.set(TsRecvClock::Software);
}

/// The feed handler: an [`Agent`] that runs its source's duty cycles into the journal, on thread `mdfan-feed`
/// (or stepped by a test). Done once the feed ended or failed (the error goes into the journal for the
/// conductor), or once `stop` is set (the hot loop is gone).
pub struct FeedAgent {
    source: Box<dyn FeedSource>,
    writer: JournalWriter,
    done: bool,
    stop: Arc<AtomicBool>,
}

impl FeedAgent {
    /// A feed handler running `source` into `writer`'s journal until `stop` is set.
    pub fn new(source: Box<dyn FeedSource>, writer: JournalWriter, stop: Arc<AtomicBool>) -> FeedAgent {
        FeedAgent { source, writer, done: false, stop }
    }
}

impl FeedAgent {
    /// The idle strategy its thread runs under: [`FEED_IDLE`], or `hot_idle` for a source that busy-polls.
    pub fn idle(&self, hot_idle: mdfan_tuning::IdleStrategy) -> mdfan_tuning::IdleStrategy {
        if self.source.busy_polls() {
            hot_idle
        } else {
            FEED_IDLE
        }
    }
}

impl Agent for FeedAgent {
    fn role_name(&self) -> &str {
        "mdfan-feed"
    }

    fn do_work(&mut self) -> usize {
        if self.done {
            return 0;
        }
        match self.source.step(&mut self.writer) {
            Ok(Step::Work(n)) => n,
            Ok(Step::Ended) => {
                self.writer.end();
                self.done = true;
                1
            }
            Err(e) => {
                self.writer.fail(e.to_string());
                self.done = true;
                1
            }
        }
    }

    fn is_done(&self) -> bool {
        self.done || self.stop.load(Ordering::Relaxed)
    }
}

/// Names a bad value of a config with the line that set it ([`Checker::bad`]), for the format modules' checks.
pub struct Checker<'a> {
    pub(crate) text: &'a str,
    pub(crate) path: &'a std::path::Path,
}

impl Checker<'_> {
    /// `key`'s value is not allowed: `config PATH: line N: key KEY: DETAIL`.
    pub fn bad(&self, key: &str, detail: impl Into<String>) -> ConfigError {
        crate::config::bad_key(self.text, self.path, key, detail.into())
    }

    /// A path from the config, resolved against the config file's folder.
    pub fn resolve(&self, p: &std::path::Path) -> std::path::PathBuf {
        if p.is_relative() {
            self.path.parent().unwrap_or(std::path::Path::new(".")).join(p)
        } else {
            p.to_owned()
        }
    }

    /// The 1-based line that sets `field` in entry `index` (0-based) of the array of tables `table`.
    pub fn entry_line(&self, table: &str, index: usize, field: &str) -> Option<usize> {
        crate::config::line_of_entry_key(self.text, table, index, field)
    }

    /// The 1-based line that sets the dotted `key`.
    pub fn key_line(&self, key: &str) -> Option<usize> {
        crate::config::line_of_key(self.text, key)
    }

    /// An error in `config PATH: DETAIL` form (the detail names its own line and key).
    pub fn error(&self, detail: String) -> ConfigError {
        ConfigError { path: self.path.display().to_string(), detail }
    }
}
