//! `format = "mdp3"`: live CME MDP 3.0 channels ([`crate::live`]), each from its lines A and B, with its market
//! recovery and instrument definition feeds. One channel from `[lines]`, or several from `[[feed.channels]]` with
//! `[lines]` holding what they share. Records: price-level (MBP) records. Source: CME Client Systems Wiki, "MDP
//! 3.0 - Market Data Incremental Feed", "MDP 3.0 - Market Recovery", "MDP 3.0 - Security Definition".

use std::path::PathBuf;
use std::sync::Arc;

use mdfan_wire::control::BookKind;
use mdfan_wire::Symbology;
use serde::Deserialize;

use super::{Checker, FeedCounters, FeedTraits, Opened};
use crate::config::{line_set, ConfigError, FeedFormat, LineAddr};
use crate::live::{LiveCounters, Mdp3Channels};
use crate::{ChannelInfo, PublisherError, RunReport, TsRecvClockCell};

/// The `[feed]` keys of `format = "mdp3"`.
pub const FEED_KEYS: &[&str] = &["format", "symbols", "channels"];
/// The `[lines]` keys of an MDP 3.0 feed besides the ones every line set reads (`config::LINE_SET_KEYS`).
pub const LINES_KEYS: &[&str] =
    &["snapshot", "definitions", "recovery_timeout_ms", "gap_timeout_ms", "line_tolerance", "instruments"];

/// Entries the definition queue holds for a live MDP 3.0 feed with definition feeds: a definition loop's
/// instruments come again on its next turn, so a burst past this is only late (about 70 bytes an entry).
pub const DEFINITION_QUEUE_ENTRIES: usize = 1 << 16;

/// `[feed]` for `format = "mdp3"` (with `[lines]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mdp3Feed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// A symbol file (`mdfan_feed::symbols`: security id, symbol, display factor, tick size), for channels
    /// without a definition feed; resolved against the config file's folder.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
    /// `[[feed.channels]]`: the channels, each with its own lines; empty: one channel, from `[lines]`.
    #[serde(default)]
    pub channels: Vec<ChannelSection>,
    /// `[lines]` (every key defaulted when the file has none, with `[[feed.channels]]`).
    #[serde(skip)]
    pub lines: Option<Mdp3Lines>,
}

line_set! {
    /// `[lines]` of a live MDP 3.0 feed: one channel's lines A and B, its market recovery and definition feeds
    /// (without `[[feed.channels]]`), and what every channel shares (arbitration, recovery, sizes).
    pub struct Mdp3Lines {
        /// The market recovery (snapshot) feed, as line A. `None`: packets lost on both lines leave their
        /// instruments stale.
        #[serde(default)]
        pub snapshot: Option<LineAddr>,
        /// The instrument definition feed (MDInstrumentDefinitionFuture27, Spread29, Option41 in a loop), as
        /// line A: each definition's symbol, display factor and tick size go into the symbology (replacing a
        /// symbol file's entry of the same `SecurityID`). `None`: symbols from the symbol files only.
        #[serde(default)]
        pub definitions: Option<LineAddr>,
        /// How long stale instruments wait for the snapshot feed before the recovery is reported as timed out
        /// (they stay stale; a later snapshot still recovers them), in ms. 1 to 3,600,000; default 5,000.
        #[serde(default = "crate::config::default_recovery_timeout_ms")]
        pub recovery_timeout_ms: u64,
        /// A seq missing on both lines while later packets wait this long is a gap, in ms. 1 to 60,000; default 10.
        #[serde(default = "crate::config::default_gap_timeout_ms")]
        pub gap_timeout_ms: u64,
        /// A seq is also a gap once both lines are this many seqs past it. Default 8.
        #[serde(default = "crate::config::default_line_tolerance")]
        pub line_tolerance: u64,
        /// Securities each channel reserves room for (sequence table, stale list), before it allocates. 1 to
        /// 2^20; default 4,096.
        #[serde(default = "crate::config::default_instruments")]
        pub instruments: usize,
    }
}

/// One `[[feed.channels]]` entry: a CME MDP 3.0 channel (CME's `config.xml`: its incremental feeds A and B, its
/// market recovery feed, its instrument definition feed). Its records carry `id` in their venue position
/// (`mdfan_wire::record`, "Venue position"), and its counters carry it as a label.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelSection {
    /// The channel's number (CME's channel id, 1 to 65535): unique among the channels.
    pub id: u16,
    /// Incremental feed A, as `lines.a`.
    pub a: LineAddr,
    /// Incremental feed B, as `lines.b`.
    pub b: LineAddr,
    /// Market recovery, as `lines.snapshot`.
    #[serde(default)]
    pub snapshot: Option<LineAddr>,
    /// Instrument definitions, as `lines.definitions`.
    #[serde(default)]
    pub definitions: Option<LineAddr>,
    /// A symbol file for this channel's instruments (relative to the config file's folder), added after
    /// `feed.symbols`; an instrument two channels' files both name is refused at start.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
}

/// One MDP 3.0 channel as the publisher opens it ([`Mdp3Feed::channels`]): from `[[feed.channels]]`, or the
/// one channel `[lines]` names (id 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mdp3ChannelConfig {
    /// The channel id (0: the one unnamed channel of `[lines]`).
    pub id: u16,
    /// Where its keys are in the config: `lines` or `feed.channels[N]` (1-based), for errors.
    pub key: String,
    /// Line A.
    pub a: LineAddr,
    /// Line B.
    pub b: LineAddr,
    /// Market recovery.
    pub snapshot: Option<LineAddr>,
    /// Instrument definitions.
    pub definitions: Option<LineAddr>,
    /// The channel's own symbol file.
    pub symbols: Option<PathBuf>,
}

impl Mdp3Feed {
    /// `[lines]` as checked.
    pub fn lines(&self) -> &Mdp3Lines {
        self.lines.as_ref().expect("Mdp3Feed::check sets [lines]")
    }

    /// The channels, in order: each `[[feed.channels]]` entry, or the one channel of `[lines]` (id 0).
    pub fn channels(&self) -> Vec<Mdp3ChannelConfig> {
        let Some(lines) = &self.lines else { return Vec::new() };
        if self.channels.is_empty() {
            let (Some(a), Some(b)) = (&lines.a, &lines.b) else { return Vec::new() };
            return vec![Mdp3ChannelConfig {
                id: 0,
                key: "lines".into(),
                a: a.clone(),
                b: b.clone(),
                snapshot: lines.snapshot.clone(),
                definitions: lines.definitions.clone(),
                symbols: None,
            }];
        }
        (self.channels.iter().enumerate())
            .map(|(i, c)| Mdp3ChannelConfig {
                id: c.id,
                key: format!("feed.channels[{}]", i + 1),
                a: c.a.clone(),
                b: c.b.clone(),
                snapshot: c.snapshot.clone(),
                definitions: c.definitions.clone(),
                symbols: c.symbols.clone(),
            })
            .collect()
    }

    /// Checks the keys, `[lines]` (`lines`, taken in) and the channels, and resolves the paths.
    pub(crate) fn check(&mut self, lines: Option<Mdp3Lines>, c: &Checker<'_>) -> Result<(), ConfigError> {
        let lines = match lines {
            Some(l) => l,
            None if !self.channels.is_empty() => {
                // The channels share [lines]' settings: all defaults without one.
                Mdp3Lines::deserialize(toml::Table::new()).expect("every [lines] key has a default")
            }
            None => {
                return Err(
                    c.bad("feed.format", "\"mdp3\" needs a [lines] section (lines A and B) or [[feed.channels]]")
                )
            }
        };
        if self.channels.is_empty() {
            if lines.a.is_none() {
                return Err(c.bad("lines", "\"mdp3\" needs line A (lines.a), or [[feed.channels]]"));
            }
            if lines.b.is_none() {
                return Err(c.bad("lines", "\"mdp3\" needs line B (lines.b)"));
            }
        } else {
            for (key, set) in [
                ("lines.a", lines.a.is_some()),
                ("lines.b", lines.b.is_some()),
                ("lines.snapshot", lines.snapshot.is_some()),
                ("lines.definitions", lines.definitions.is_some()),
            ] {
                if set {
                    return Err(c.bad(key, "with [[feed.channels]], each channel names its own lines"));
                }
            }
        }
        if !(1..=3_600_000).contains(&lines.recovery_timeout_ms) {
            let v = lines.recovery_timeout_ms;
            return Err(c.bad("lines.recovery_timeout_ms", format!("{v}: must be 1 to 3600000")));
        }
        if !(1..=60_000).contains(&lines.gap_timeout_ms) {
            return Err(c.bad("lines.gap_timeout_ms", format!("{}: must be 1 to 60000", lines.gap_timeout_ms)));
        }
        if !(1..=1 << 20).contains(&lines.instruments) {
            return Err(c.bad("lines.instruments", format!("{}: must be 1 to 1048576", lines.instruments)));
        }
        let channels = self.channels.len().max(1);
        if lines.instruments.saturating_mul(channels) > 1 << 20 {
            return Err(c.bad(
                "lines.instruments",
                format!(
                    "{} x {channels} channels: at most 1048576 instruments in all (each channel reserves lines.instruments)",
                    lines.instruments
                ),
            ));
        }
        lines.check_shared(c)?;
        self.lines = Some(lines);
        self.check_channels(c)?;
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        for ch in &mut self.channels {
            ch.symbols = ch.symbols.as_deref().map(|p| c.resolve(p));
        }
        Ok(())
    }

    /// The channels' own mistakes, each named with the line of its entry's key: a repeated id, two lines (of
    /// any channels, snapshot and definition feeds included) on one address, an id of 0.
    fn check_channels(&self, c: &Checker<'_>) -> Result<(), ConfigError> {
        let channels = self.channels();
        let at = |ch: &Mdp3ChannelConfig, field: &str| {
            let line = match ch.key.strip_prefix("feed.channels[") {
                Some(n) => {
                    let k: usize = n.trim_end_matches(']').parse().unwrap_or(1);
                    c.entry_line("feed.channels", k - 1, field)
                }
                None => c.key_line(&format!("lines.{field}")),
            };
            format!("{}key {}.{field}", line.map_or(String::new(), |n| format!("line {n}: ")), ch.key)
        };
        let mut ids = std::collections::BTreeMap::new();
        let mut addrs: std::collections::BTreeMap<std::net::SocketAddrV4, String> = std::collections::BTreeMap::new();
        for ch in &channels {
            if ch.key != "lines" && ch.id == 0 {
                return Err(c.error(format!("{}: 0: a channel id is 1 to 65535", at(ch, "id"))));
            }
            if let Some(first) = ids.insert(ch.id, ch.key.clone()) {
                return Err(c.error(format!("{}: {}: already the id of {first}", at(ch, "id"), ch.id)));
            }
            let lines = [
                ("a", Some(&ch.a)),
                ("b", Some(&ch.b)),
                ("snapshot", ch.snapshot.as_ref()),
                ("definitions", ch.definitions.as_ref()),
            ];
            for (field, line) in lines {
                let Some(line) = line.filter(|l| l.port() != 0) else { continue };
                if let Some(first) = addrs.insert(line.addr, format!("{}.{field}", ch.key)) {
                    return Err(c.error(format!("{}: {}: the same address as {first}", at(ch, field), line.addr)));
                }
            }
        }
        Ok(())
    }
}

/// The channels' own symbol files (`[[feed.channels]]` `symbols`), together, and which channel each of their
/// instruments belongs to; an instrument_id, or a symbol, two channels' files both name is refused, naming both
/// files.
pub(crate) fn channel_symbols(f: &Mdp3Feed) -> Result<(Symbology, Vec<(u32, u16)>), PublisherError> {
    let mut all = Symbology::new();
    let mut owned = Vec::new();
    let channels = f.channels();
    let mut by_id: std::collections::BTreeMap<u32, (&str, &std::path::Path)> = std::collections::BTreeMap::new();
    let mut by_symbol: std::collections::BTreeMap<String, (&str, &std::path::Path)> = std::collections::BTreeMap::new();
    let refuse = |path: &std::path::Path, detail: String| {
        PublisherError::Symbols(mdfan_feed::symbols::SymbolFileError {
            path: path.to_owned(),
            line: None,
            field: None,
            detail,
        })
    };
    for c in &channels {
        let Some(path) = &c.symbols else { continue };
        let defs = mdfan_feed::symbols::load_symbol_file(path)?;
        for d in defs.iter() {
            if let Some((key, first)) = by_id.insert(d.instrument_id, (&c.key, path)) {
                let detail = format!(
                    "security_id {} ({}.symbols) is also in {key}'s symbol file {}: instrument ids must be unique across channels",
                    d.instrument_id,
                    c.key,
                    first.display()
                );
                return Err(refuse(path, detail));
            }
            if let Some((key, first)) = by_symbol.insert(d.symbol.clone(), (&c.key, path)) {
                let detail = format!(
                    "symbol {} ({}.symbols) is also in {key}'s symbol file {}: a symbol names one instrument",
                    d.symbol,
                    c.key,
                    first.display()
                );
                return Err(refuse(path, detail));
            }
            owned.push((d.instrument_id, c.id));
        }
        all.extend(defs);
    }
    Ok((all, owned))
}

impl FeedCounters for LiveCounters {
    fn publish(&self, file: &mut mdfan_tuning::counters::CountersWriter) {
        crate::counter_sets::publish_live(self, file);
    }

    fn report(&self, into: &mut RunReport) {
        into.live.push(LiveCounters::report(self));
    }

    fn lines(&self) -> Vec<String> {
        vec![LiveCounters::report(self).line()]
    }
}

/// Binds every channel's lines (and snapshot and definition feeds).
pub(crate) fn open(f: &Mdp3Feed, ts_recv_clock: &TsRecvClockCell) -> Result<Opened, PublisherError> {
    // The lines ask the kernel for receive stamps (SO_TIMESTAMPING): software at least, until the first
    // datagrams say which (the feed thread refines it: hardware when the NIC stamps).
    super::live_clock(ts_recv_clock);
    let (channels, lines) = (f.channels(), f.lines());
    let (to_conductor, definitions) = if channels.iter().any(|c| c.definitions.is_some()) {
        let (tx, rx) = crate::definitions::definition_queue(DEFINITION_QUEUE_ENTRIES);
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let (symbology, owned) = channel_symbols(f)?;
    let live = Mdp3Channels::open(lines, &channels, ts_recv_clock.clone(), to_conductor, &owned)?;
    let info: Vec<ChannelInfo> = live
        .channels()
        .iter()
        .map(|c| ChannelInfo {
            id: c.id(),
            counters: c.counters(),
            lines: c.line_addrs(),
            snapshot: c.snapshot_addr(),
            definitions: c.definitions_addr(),
        })
        .collect();
    let name = info.iter().map(|c| {
        let [a, b] = c.lines;
        if f.channels.is_empty() {
            format!("line_a={a} line_b={b}")
        } else {
            format!("channel={} line_a={a} line_b={b}", c.id)
        }
    });
    let name = format!("mdp3 {}", name.collect::<Vec<_>>().join(" "));
    Ok(Opened {
        source: Box::new(live),
        traits: FeedTraits {
            live: true,
            book: BookKind::Mbp,
            price_level_instruments: Some(lines.instruments * channels.len().max(1)),
            identity: mdfan_wire::FeedIdentity::new(
                "mdp3",
                "GLBX.MDP3",
                info.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(","),
            ),
        },
        counters: info.iter().map(|c| Arc::clone(&c.counters) as Arc<dyn FeedCounters>).collect(),
        symbology,
        definitions,
        name,
        bound: super::Bound { channels: info, mold: None },
    })
}
