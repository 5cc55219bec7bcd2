//! Symbology: which instrument an `instrument_id` is (its symbol) and how its prices print.
//!
//! Control plane only: a [`Symbology`] is built when the feed opens, travels in the handshake
//! ([`crate::control::Accept::definitions`]) and is read when a subscriber prints; nothing on the hot path
//! looks at it (a [`BookUpdate`](crate::BookUpdate) carries only the numeric `instrument_id`).
//!
//! Sources, each filling the same [`InstrumentDef`]:
//! - DBN metadata symbol mappings (Databento docs, "Symbology": `stype_in` raw symbol → `stype_out`
//!   instrument_id per date interval), decoded by `mdfan-feed` (`MboStream::symbology`).
//! - CME MDP 3.0 instrument definitions (schema v8 templates 27, 29, 41 on a channel's definition feed; CME "MDP
//!   3.0 - Security Definition"), decoded by `mdfan-feed` (`mdp3::InstrumentDefinition::instrument_def`), or a
//!   symbol file in their stead (security id → symbol, display factor, tick size; `feed::symbols`).
//! - Nasdaq ITCH Stock Directory (`R`) messages: `mdfan_feed::itch::stock_directory` reads a file's, one
//!   [`InstrumentDef`] per stock locate (tick 0.0001: ITCH's 4 decimals).
//!
//! Prices: a record's `price_e9` is the feed's price in units of 10⁻⁹. The price a person reads is
//! `price_e9 × 10⁻⁹ × display factor` (CME "MDP 3.0 - Security Definition", tag 9787 `DisplayFactor`: 1 for
//! DBN files and ES, 10⁻⁴ for 6C whose MDP 3.0 prices are mantissa × 10⁻⁷ like 7580.5). It prints exactly, with
//! at least the decimals of the displayed tick size (tick size × display factor; 0.00005 for 6C → 5 decimals),
//! or at least two when the tick size is unknown (a DBN MBO file carries none), and never rounded: a price finer
//! than its tick prints every digit it has.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// 10⁹: a display factor of 1 in [`InstrumentDef::display_factor_e9`].
pub const DISPLAY_FACTOR_ONE_E9: i64 = 1_000_000_000;

fn one_e9() -> i64 {
    DISPLAY_FACTOR_ONE_E9
}

/// One instrument: its id, symbol and price display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstrumentDef {
    /// The id records carry (`BookUpdate::instrument_id`; DBN instrument_id, MDP 3.0 security id, ITCH stock
    /// locate).
    pub instrument_id: u32,
    /// The venue's symbol (`ESH4`, `6CZ6`, `AAPL`).
    pub symbol: String,
    /// The display factor in units of 10⁻⁹ (CME tag 9787 `DisplayFactor` × 10⁹): 1,000,000,000 = 1 (default),
    /// 100,000 = 0.0001. Always positive.
    #[serde(default = "one_e9")]
    pub display_factor_e9: i64,
    /// The minimum price increment in the feed's price units (like `price_e9`, before the display factor), in
    /// units of 10⁻⁹ (CME tag 969 `MinPriceIncrement` × 10⁹; ES 0.25 → 250,000,000). 0 = unknown (default).
    #[serde(default)]
    pub tick_size_e9: i64,
}

impl InstrumentDef {
    /// An instrument with display factor 1 and an unknown tick size (what DBN metadata gives).
    pub fn new(instrument_id: u32, symbol: impl Into<String>) -> InstrumentDef {
        InstrumentDef {
            instrument_id,
            symbol: symbol.into(),
            display_factor_e9: DISPLAY_FACTOR_ONE_E9,
            tick_size_e9: 0,
        }
    }

    /// The fewest decimals a price of this instrument prints with: those of the displayed tick size
    /// (`tick_size × display factor`), or 2 when the tick size is unknown.
    pub fn min_decimals(&self) -> usize {
        if self.tick_size_e9 <= 0 {
            return 2;
        }
        let tick_e18 = self.tick_size_e9 as i128 * self.display_factor_e9 as i128;
        significant_decimals(tick_e18.unsigned_abs())
    }

    /// Formats a record's `price_e9` as the price a person reads (× the display factor), exactly, with at least
    /// [`InstrumentDef::min_decimals`] decimals: ES `4810.25`; 6C mantissa 7580.5 (`price_e9`
    /// 7,580,500,000,000) with display factor 0.0001 and tick 0.5 → `0.75805`.
    pub fn format_price(&self, price_e9: i64) -> String {
        let e18 = price_e9 as i128 * self.display_factor_e9 as i128;
        format_e18(e18, self.min_decimals())
    }
}

/// The decimals needed to write `e18` (a value in units of 10⁻¹⁸) exactly.
fn significant_decimals(e18: u128) -> usize {
    let frac = e18 % 1_000_000_000_000_000_000;
    if frac == 0 {
        return 0;
    }
    let digits = format!("{frac:018}");
    digits.trim_end_matches('0').len()
}

fn format_e18(e18: i128, min_decimals: usize) -> String {
    let sign = if e18 < 0 { "-" } else { "" };
    let abs = e18.unsigned_abs();
    let units = abs / 1_000_000_000_000_000_000;
    let frac = format!("{:018}", abs % 1_000_000_000_000_000_000);
    let keep = significant_decimals(abs).max(min_decimals.min(18));
    if keep == 0 {
        format!("{sign}{units}")
    } else {
        format!("{sign}{units}.{}", &frac[..keep])
    }
}

/// instrument_id → [`InstrumentDef`], from any of the sources in the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symbology {
    by_id: BTreeMap<u32, InstrumentDef>,
    /// symbol → its instrument_ids: [`Symbology::ids_of`] without a scan (a subscribe may name thousands).
    by_symbol: BTreeMap<String, BTreeSet<u32>>,
}

impl Symbology {
    /// An empty symbology (every instrument unknown).
    pub fn new() -> Symbology {
        Symbology::default()
    }

    /// Adds or replaces the definition of `def.instrument_id`; returns the one it replaced. The hook for every
    /// source (an ITCH `R` message, a symbol file line, a DBN mapping).
    pub fn insert(&mut self, def: InstrumentDef) -> Option<InstrumentDef> {
        let id = def.instrument_id;
        self.by_symbol.entry(def.symbol.clone()).or_default().insert(id);
        let old = self.by_id.insert(id, def)?;
        if old.symbol != self.by_id[&id].symbol {
            if let Some(ids) = self.by_symbol.get_mut(&old.symbol) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.by_symbol.remove(&old.symbol);
                }
            }
        }
        Some(old)
    }

    /// Adds every definition of `other`, replacing those with the same instrument_id.
    pub fn extend(&mut self, other: Symbology) {
        for def in other.by_id.into_values() {
            self.insert(def);
        }
    }

    /// The definition of `instrument_id`, if known.
    pub fn get(&self, instrument_id: u32) -> Option<&InstrumentDef> {
        self.by_id.get(&instrument_id)
    }

    /// The symbol of `instrument_id`, if known.
    pub fn symbol(&self, instrument_id: u32) -> Option<&str> {
        self.get(instrument_id).map(|d| d.symbol.as_str())
    }

    /// Every instrument_id whose symbol is `symbol` (exact, case-sensitive), in increasing order: usually one;
    /// more when a symbol named different instruments over the feed's dates.
    pub fn ids_of(&self, symbol: &str) -> Vec<u32> {
        self.by_symbol.get(symbol).map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }

    /// Formats `price_e9` of `instrument_id` at its precision ([`InstrumentDef::format_price`]); an unknown
    /// instrument prints as [`crate::record::format_price_e9`] does (display factor 1, at least two decimals).
    pub fn format_price(&self, instrument_id: u32, price_e9: i64) -> String {
        match self.get(instrument_id) {
            Some(d) => d.format_price(price_e9),
            None => crate::record::format_price_e9(price_e9),
        }
    }

    /// The definitions, by increasing instrument_id.
    pub fn iter(&self) -> impl Iterator<Item = &InstrumentDef> {
        self.by_id.values()
    }

    /// How many instruments are known.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no instrument is known.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl FromIterator<InstrumentDef> for Symbology {
    fn from_iter<I: IntoIterator<Item = InstrumentDef>>(iter: I) -> Symbology {
        let mut s = Symbology::new();
        for d in iter {
            s.insert(d);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn six_c() -> InstrumentDef {
        InstrumentDef { display_factor_e9: 100_000, tick_size_e9: 500_000_000, ..InstrumentDef::new(174969, "6CZ6") }
    }

    #[test]
    fn prices_print_at_the_instruments_precision() {
        let es = InstrumentDef { tick_size_e9: 250_000_000, ..InstrumentDef::new(17077, "ESH4") };
        assert_eq!(es.min_decimals(), 2);
        assert_eq!(es.format_price(4_810_250_000_000), "4810.25");
        assert_eq!(es.format_price(4_799_000_000_000), "4799.00");
        // Unknown tick: as format_price_e9 (at least two decimals).
        let dbn = InstrumentDef::new(17077, "ESH4");
        assert_eq!(dbn.format_price(4_799_000_000_000), "4799.00");
        assert_eq!(dbn.format_price(123_400_000), "0.1234");
        // MDP 3.0: mantissa 7580.5 x 10^-7 (price_e9 = mantissa x 100) times display factor 0.0001.
        let c = six_c();
        assert_eq!(c.min_decimals(), 5);
        assert_eq!(c.format_price(7_580_500_000_000), "0.75805");
        assert_eq!(c.format_price(7_580_000_000_000), "0.75800");
        assert_eq!(c.format_price(-7_580_000_000_000), "-0.75800");
        // Finer than the tick: every digit, never rounded.
        assert_eq!(c.format_price(7_580_510_000_000), "0.758051");
        // Nasdaq: 4 decimals from a 0.0001 tick.
        let itch = InstrumentDef { tick_size_e9: 100_000, ..InstrumentDef::new(1, "AAPL") };
        assert_eq!(itch.format_price(189_500_000_000), "189.5000");
        // Whole ticks print no decimal point; extremes do not overflow.
        let whole = InstrumentDef { tick_size_e9: 1_000_000_000, ..InstrumentDef::new(2, "X") };
        assert_eq!(whole.format_price(42_000_000_000), "42");
        let huge = InstrumentDef { display_factor_e9: i64::MAX, ..InstrumentDef::new(3, "Y") };
        assert_eq!(huge.format_price(i64::MIN), "-85070591730234615856.620279821087277056");
    }

    #[test]
    fn lookups_by_id_and_symbol() {
        let mut s = Symbology::new();
        assert!(s.is_empty());
        assert_eq!(s.insert(InstrumentDef::new(17077, "ESH4")), None);
        s.insert(six_c());
        s.insert(InstrumentDef::new(9, "ESH4"));
        assert_eq!(s.len(), 3);
        assert_eq!(s.symbol(17077), Some("ESH4"));
        assert_eq!(s.symbol(174969), Some("6CZ6"));
        assert_eq!(s.symbol(1), None);
        assert_eq!(s.ids_of("ESH4"), vec![9, 17077]);
        assert_eq!(s.ids_of("esh4"), Vec::<u32>::new());
        assert_eq!(s.format_price(174969, 7_580_500_000_000), "0.75805");
        assert_eq!(s.format_price(1, 7_580_500_000_000), "7580.50");
        let replaced = s.insert(InstrumentDef::new(9, "ESM4")).map(|d| d.symbol);
        assert_eq!(replaced.as_deref(), Some("ESH4"));
        assert_eq!(s.iter().map(|d| d.instrument_id).collect::<Vec<_>>(), vec![9, 17077, 174969]);
        // A replaced definition's old symbol no longer finds it; the new one does.
        assert_eq!((s.ids_of("ESH4"), s.ids_of("ESM4")), (vec![17077], vec![9]));
        let mut other = Symbology::new();
        other.insert(InstrumentDef::new(17077, "ESZ3"));
        other.insert(InstrumentDef::new(5, "ESH4"));
        s.extend(other);
        assert_eq!((s.ids_of("ESH4"), s.ids_of("ESZ3"), s.symbol(17077)), (vec![5], vec![17077], Some("ESZ3")));
        assert_eq!(s.len(), 4);
    }
}
