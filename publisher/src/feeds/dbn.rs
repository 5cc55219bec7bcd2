//! `format = "dbn"`: a Databento DBN MBO file (v1 to v3, plain or zstd), replayed. Records: order-level, as
//! `mdfan_feed::dbn::normalize_mbo` makes them; symbols from the file's metadata mappings.

use std::path::PathBuf;

use mdfan_feed::dbn::MboStream;
use mdfan_wire::control::BookKind;
use serde::Deserialize;

use super::{Checker, FeedTraits, Opened, Records};
use crate::config::{ConfigError, FeedFormat, Pace};
use crate::PublisherError;

/// The `[feed]` keys of `format = "dbn"`.
pub const FEED_KEYS: &[&str] = &["format", "path", "pace", "max_gap_ms", "symbols"];

/// `[feed]` for `format = "dbn"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DbnFeed {
    #[allow(dead_code)]
    format: FeedFormat,
    /// The file (required), resolved against the config file's folder.
    #[serde(default)]
    pub path: PathBuf,
    /// Replay pace.
    #[serde(default = "crate::config::default_pace")]
    pub pace: Pace,
    /// Under realtime or factor pacing, gaps in ts_recv longer than this are shortened to it, in ms.
    #[serde(default = "crate::config::default_max_gap_ms")]
    pub max_gap_ms: u64,
    /// A symbol file (`mdfan_feed::symbols`) whose definitions are added to the file's, replacing those of the
    /// same instrument_id; resolved against the config file's folder.
    #[serde(default)]
    pub symbols: Option<PathBuf>,
}

impl DbnFeed {
    /// Checks the keys and resolves the paths.
    pub(crate) fn check(&mut self, c: &Checker<'_>) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            return Err(c.bad("feed.format", "\"dbn\" needs feed.path (the file to replay)"));
        }
        self.path = c.resolve(&self.path);
        self.symbols = self.symbols.as_deref().map(|p| c.resolve(p));
        Ok(())
    }
}

/// Opens the file (its metadata is checked here) as a record source.
pub(crate) fn open(f: &DbnFeed) -> Result<Opened, PublisherError> {
    let mut stream = MboStream::open(&f.path)?;
    let symbology = stream.symbology().clone();
    let identity = mdfan_wire::FeedIdentity::new("dbn", stream.dataset(), super::file_name(&f.path));
    Ok(Opened {
        source: Box::new(Records::new(move || stream.next_update().map_err(|e| e.to_string()))),
        traits: FeedTraits { live: false, book: BookKind::Mbo, price_level_instruments: None, identity },
        counters: Vec::new(),
        symbology,
        definitions: None,
        name: f.path.display().to_string(),
        bound: Default::default(),
    })
}
