//! Symbol files: security id → symbol, display factor and tick size, for a feed whose capture carries no
//! instrument definitions (CME MDP 3.0 sends them, template 54 `MDInstrumentDefinitionFuture54`, on the
//! instrument-definition channel, not on the incremental feed; CME "MDP 3.0 - Security Definition").
//!
//! The format is CSV (RFC 4180, read with the `csv` crate), UTF-8, one instrument per line after a header line
//! naming the four columns, in any order; blank lines and lines starting with `#` are skipped; spaces around a
//! value are trimmed:
//!
//! ```text
//! # security_id: the MDP 3.0 SecurityID (tag 48), the records' instrument_id
//! security_id,symbol,display_factor,tick_size
//! 174969,6CZ6,0.0001,0.5
//! ```
//!
//! | column | meaning | CME tag |
//! |---|---|---|
//! | `security_id` | the records' instrument_id, 0 to 4,294,967,295 | 48 `SecurityID` |
//! | `symbol` | 1 to 64 bytes, no spaces, unique in the file | 55 `Symbol` |
//! | `display_factor` | decimal > 0, at most 9 decimals: price a person reads = feed price × this | 9787 `DisplayFactor` |
//! | `tick_size` | decimal ≥ 0, at most 9 decimals, in the feed's price units (before the display factor); 0 or empty = unknown | 969 `MinPriceIncrement` |
//!
//! Values are parsed exactly as decimals (no floating point) into [`InstrumentDef::display_factor_e9`] and
//! [`InstrumentDef::tick_size_e9`]. A security id or symbol given twice is an error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mdfan_wire::{InstrumentDef, Symbology};

/// Longest symbol accepted, in bytes.
pub const MAX_SYMBOL_BYTES: usize = 64;

/// Why a symbol file could not be used: one line naming the file, and the line and column when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("symbols {}: {}{}{detail}", path.display(), line.map_or(String::new(), |l| format!("line {l}: ")), field.map_or(String::new(), |f| format!("field {f}: ")))]
pub struct SymbolFileError {
    /// The symbol file.
    pub path: PathBuf,
    /// 1-based line, when the error is on one.
    pub line: Option<u64>,
    /// The column, when the error is in one.
    pub field: Option<&'static str>,
    /// What is wrong.
    pub detail: String,
}

const COLUMNS: [&str; 4] = ["security_id", "symbol", "display_factor", "tick_size"];

/// Reads and checks a symbol file (module docs).
///
/// # Errors
/// [`SymbolFileError`] naming the file (cannot read it), or the line and field of the first bad value.
pub fn load_symbol_file(path: &Path) -> Result<Symbology, SymbolFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| SymbolFileError {
        path: path.to_owned(),
        line: None,
        field: None,
        detail: format!("cannot read: {e}"),
    })?;
    parse_symbol_file(&text, path)
}

/// Parses a symbol file's text; `path` only names it in errors.
///
/// # Errors
/// As [`load_symbol_file`].
pub fn parse_symbol_file(text: &str, path: &Path) -> Result<Symbology, SymbolFileError> {
    let err = |line: Option<u64>, field: Option<&'static str>, detail: String| SymbolFileError {
        path: path.to_owned(),
        line,
        field,
        detail,
    };
    let mut reader =
        csv::ReaderBuilder::new().comment(Some(b'#')).trim(csv::Trim::All).flexible(true).from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| err(csv_line(text, &e), None, csv_detail(e)))?.clone();
    let header_line = header.position().map(|p| line_of(text, p.byte()));
    if header.is_empty() {
        return Err(err(None, None, format!("empty: expected a header line `{}`", COLUMNS.join(","))));
    }
    // Column index of each of COLUMNS.
    let mut at = [usize::MAX; 4];
    for (i, name) in header.iter().enumerate() {
        let Some(k) = COLUMNS.iter().position(|c| *c == name) else {
            return Err(err(
                header_line,
                None,
                format!("unknown column `{name}` in the header (expected {})", COLUMNS.join(", ")),
            ));
        };
        if at[k] != usize::MAX {
            return Err(err(header_line, None, format!("column `{name}` given twice in the header")));
        }
        at[k] = i;
    }
    if let Some(k) = at.iter().position(|&i| i == usize::MAX) {
        return Err(err(header_line, None, format!("the header has no column `{}`", COLUMNS[k])));
    }
    let mut symbology = Symbology::new();
    let mut id_line: HashMap<u32, u64> = HashMap::new();
    let mut symbol_line: HashMap<String, u64> = HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| err(csv_line(text, &e), None, csv_detail(e)))?;
        // the record's line, counted only for a message (counting it for every record would be quadratic)
        let byte = record.position().map(|p| p.byte());
        let line = || byte.map_or(0, |b| line_of(text, b));
        if record.len() != header.len() {
            return Err(err(
                Some(line()),
                None,
                format!("{} values, the header has {} columns", record.len(), header.len()),
            ));
        }
        let value = |k: usize| record.get(at[k]).unwrap_or("");
        let field_err = |k: usize, detail: String| err(Some(line()), Some(COLUMNS[k]), detail);

        let id_text = value(0);
        let instrument_id: u32 = id_text
            .parse()
            .map_err(|_| field_err(0, format!("`{id_text}` is not a security id (0 to {})", u32::MAX)))?;
        let symbol = value(1);
        if symbol.is_empty() || symbol.len() > MAX_SYMBOL_BYTES || symbol.contains(char::is_whitespace) {
            return Err(field_err(1, format!("`{symbol}`: 1 to {MAX_SYMBOL_BYTES} bytes without spaces")));
        }
        let display_factor_e9 = parse_decimal_e9(value(2)).map_err(|d| field_err(2, d))?;
        if display_factor_e9 == 0 {
            return Err(field_err(2, "0: must be above 0".into()));
        }
        let tick_size_e9 = match value(3) {
            "" => 0,
            t => parse_decimal_e9(t).map_err(|d| field_err(3, d))?,
        };
        if let Some(first) = id_line.insert(instrument_id, byte.unwrap_or(0)) {
            return Err(field_err(0, format!("{instrument_id} already given on line {}", line_of(text, first))));
        }
        if let Some(first) = symbol_line.insert(symbol.to_owned(), byte.unwrap_or(0)) {
            return Err(field_err(1, format!("{symbol} already given on line {}", line_of(text, first))));
        }
        symbology.insert(InstrumentDef { instrument_id, symbol: symbol.to_owned(), display_factor_e9, tick_size_e9 });
    }
    Ok(symbology)
}

/// The 1-based line of the record the `csv` crate says starts at `byte`. Its own line count skips comment
/// lines, and its byte offset is where it began looking, before the comment and blank lines it skipped: those
/// are skipped here too.
fn line_of(text: &str, byte: u64) -> u64 {
    let mut start = (byte as usize).min(text.len());
    let mut line = 1 + text.as_bytes()[..start].iter().filter(|&&b| b == b'\n').count() as u64;
    while let Some(rest) = text.get(start..) {
        let this = rest.split('\n').next().unwrap_or("");
        let skipped = this.trim().is_empty() || this.starts_with('#');
        if !skipped || start + this.len() >= text.len() {
            break;
        }
        start += this.len() + 1;
        line += 1;
    }
    line
}

fn csv_line(text: &str, e: &csv::Error) -> Option<u64> {
    e.position().map(|p| line_of(text, p.byte()))
}

fn csv_detail(e: csv::Error) -> String {
    match e.into_kind() {
        csv::ErrorKind::Utf8 { err, .. } => format!("not UTF-8: {err}"),
        other => format!("{other:?}"),
    }
}

/// A non-negative decimal (`0.0001`, `12`, `.5`) as an integer in units of 10⁻⁹, exactly.
///
/// # Errors
/// Not a plain decimal, more than 9 decimals, or too large for an `i64` in units of 10⁻⁹.
fn parse_decimal_e9(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a decimal number of at most 9 decimals, 0 or above (like 0.0001)");
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || frac.len() > 9 {
        return Err(bad());
    }
    let int: i64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
    let frac_e9: i64 = format!("{frac:0<9}").parse().map_err(|_| bad())?;
    int.checked_mul(1_000_000_000)
        .and_then(|v| v.checked_add(frac_e9))
        .ok_or_else(|| format!("`{text}` is too large (at most {})", i64::MAX / 1_000_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Symbology, String> {
        parse_symbol_file(text, Path::new("/etc/mdfan/symbols.csv")).map_err(|e| e.to_string())
    }

    #[test]
    fn decimals_parse_exactly() {
        assert_eq!(parse_decimal_e9("0.0001"), Ok(100_000));
        assert_eq!(parse_decimal_e9("0.5"), Ok(500_000_000));
        assert_eq!(parse_decimal_e9(".5"), Ok(500_000_000));
        assert_eq!(parse_decimal_e9("12"), Ok(12_000_000_000));
        assert_eq!(parse_decimal_e9("0.000000001"), Ok(1));
        assert!(parse_decimal_e9("0.0000000001").unwrap_err().contains("at most 9 decimals"));
        assert!(parse_decimal_e9("-1").is_err());
        assert!(parse_decimal_e9("1e-4").is_err());
        assert!(parse_decimal_e9(".").is_err());
        assert!(parse_decimal_e9("9223372037").unwrap_err().contains("too large"));
    }

    #[test]
    fn a_good_file_parses_with_comments_blank_lines_spaces_and_any_column_order() {
        let s = parse(
            "# assumed, see README\n\nsymbol, security_id ,tick_size,display_factor\n6CZ6,174969,0.5,0.0001\n\
             # another\n ESH4 , 17077 , , 1\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        let c = s.get(174969).unwrap();
        assert_eq!((c.symbol.as_str(), c.display_factor_e9, c.tick_size_e9), ("6CZ6", 100_000, 500_000_000));
        assert_eq!(s.format_price(174969, 7_580_500_000_000), "0.75805");
        let es = s.get(17077).unwrap();
        assert_eq!((es.symbol.as_str(), es.display_factor_e9, es.tick_size_e9), ("ESH4", 1_000_000_000, 0));
    }

    #[test]
    fn bad_lines_are_named_with_their_line_and_field() {
        const P: &str = "symbols /etc/mdfan/symbols.csv: ";
        let head = "security_id,symbol,display_factor,tick_size\n";
        let bad = |body: &str| parse(&format!("{head}174969,6CZ6,0.0001,0.5\n{body}")).unwrap_err();
        assert_eq!(
            bad("17077x,ESH4,1,0.25\n"),
            format!("{P}line 3: field security_id: `17077x` is not a security id (0 to 4294967295)")
        );
        assert_eq!(
            bad("17077,ES H4,1,0.25\n"),
            format!("{P}line 3: field symbol: `ES H4`: 1 to 64 bytes without spaces")
        );
        assert_eq!(bad("17077,,1,0.25\n"), format!("{P}line 3: field symbol: ``: 1 to 64 bytes without spaces"));
        assert_eq!(
            bad("17077,ESH4,1e-4,0.25\n"),
            format!(
                "{P}line 3: field display_factor: `1e-4` is not a decimal number of at most 9 decimals, 0 or above (like 0.0001)"
            )
        );
        assert_eq!(bad("17077,ESH4,0,0.25\n"), format!("{P}line 3: field display_factor: 0: must be above 0"));
        assert!(bad("17077,ESH4,1,-0.25\n").starts_with(&format!("{P}line 3: field tick_size: `-0.25`")));
        assert_eq!(bad("17077,ESH4,1\n"), format!("{P}line 3: 3 values, the header has 4 columns"));
        assert_eq!(
            bad("# c\n174969,ESH4,1,0.25\n"),
            format!("{P}line 4: field security_id: 174969 already given on line 2")
        );
        assert_eq!(bad("17077,6CZ6,1,0.25\n"), format!("{P}line 3: field symbol: 6CZ6 already given on line 2"));
        assert_eq!(
            parse("security_id,symbol,display_factor,tick\n").unwrap_err(),
            format!("{P}line 1: unknown column `tick` in the header (expected security_id, symbol, display_factor, tick_size)")
        );
        assert_eq!(
            parse("security_id,symbol,display_factor\n1,A,1\n").unwrap_err(),
            format!("{P}line 1: the header has no column `tick_size`")
        );
        assert_eq!(
            parse("# nothing\n").unwrap_err(),
            format!("{P}empty: expected a header line `security_id,symbol,display_factor,tick_size`")
        );
        let missing = load_symbol_file(Path::new("/nonexistent/symbols.csv")).unwrap_err().to_string();
        assert!(missing.starts_with("symbols /nonexistent/symbols.csv: cannot read: "), "{missing}");
    }
}
