//! Subject names (crate docs, "Subjects").

/// An instrument's subject token for `symbol` (crate docs): `A-Z a-z 0-9 -` as they are, every other byte
/// (`_` too) as `_` and two upper-case hex digits (`BRK.B` → `BRK_2EB`), so two symbols never share a token and a
/// consumer computes it from the symbol alone; `_id<instrument_id>` for no symbol or an empty one.
pub fn token(symbol: Option<&str>, instrument_id: u32) -> String {
    match symbol.filter(|s| !s.is_empty()) {
        Some(s) => {
            let mut t = String::with_capacity(s.len());
            for b in s.bytes() {
                if b.is_ascii_alphanumeric() || b == b'-' {
                    t.push(b as char);
                } else {
                    t.push_str(&format!("_{b:02X}"));
                }
            }
            t
        }
        None => id_token(instrument_id),
    }
}

/// The token of an instrument with no symbol of its own: `_id<instrument_id>` (no symbol's token: a symbol's
/// `_` is always followed by two hex digits).
pub fn id_token(instrument_id: u32) -> String {
    format!("_id{instrument_id}")
}

/// Whether `prefix` is a valid subject prefix: dot-separated tokens of `A-Z a-z 0-9 _ -`, none empty.
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix
            .split('.')
            .all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
}

/// Whether the stream subject `pattern` (NATS wildcards: `*` one token, `>` one or more at the end) takes every
/// subject that `wanted` (itself ending in `>`, e.g. `md.glbx.0.>`) does.
pub fn covers(pattern: &str, wanted: &str) -> bool {
    let (p, w): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), wanted.split('.').collect());
    for (i, pt) in p.iter().enumerate() {
        match (*pt, w.get(i)) {
            (">", Some(_)) => return true,
            (_, None) => return false,
            ("*", Some(wt)) if *wt != ">" => {}
            (pt, Some(wt)) if pt == *wt => {}
            _ => return false,
        }
    }
    p.len() == w.len()
}

/// The subjects under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    /// Subjects under `prefix` (checked with [`valid_prefix`]).
    pub fn new(prefix: &str) -> Result<Subjects, String> {
        if valid_prefix(prefix) {
            Ok(Subjects { prefix: prefix.to_owned() })
        } else {
            Err(format!("subject prefix {prefix:?}: dot-separated tokens of A-Z a-z 0-9 _ -, none empty"))
        }
    }

    /// The stream's subjects: `PREFIX.>`.
    pub fn all(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// `PREFIX.upd.TOKEN`.
    pub fn update(&self, token: &str) -> String {
        format!("{}.upd.{token}", self.prefix)
    }

    /// `PREFIX.snap.TOKEN`.
    pub fn snapshot(&self, token: &str) -> String {
        format!("{}.snap.{token}", self.prefix)
    }

    /// `PREFIX.*.TOKEN`: one instrument's updates and snapshots.
    pub fn instrument(&self, token: &str) -> String {
        format!("{}.*.{token}", self.prefix)
    }

    /// `PREFIX.status`.
    pub fn status(&self) -> String {
        format!("{}.status", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_keep_safe_bytes_escape_the_rest_and_name_unnamed_instruments_by_id() {
        assert_eq!(token(Some("ESH4"), 17077), "ESH4");
        assert_eq!(token(Some("BRK.B"), 9), "BRK_2EB");
        assert_eq!(token(Some("6E Z6>*"), 9), "6E_20Z6_3E_2A");
        // Two symbols that one replacement character would merge stay apart.
        assert_ne!(token(Some("AB.C"), 1), token(Some("AB_C"), 2));
        assert_eq!(token(Some("AB_C"), 2), "AB_5FC");
        assert_eq!(token(Some("_id9"), 1), "_5Fid9");
        assert_eq!(token(Some(""), 9), "_id9");
        assert_eq!(token(None, 17077), "_id17077");
        let s = Subjects::new("md.glbx.310").unwrap();
        assert_eq!(
            (s.all(), s.update("ESH4"), s.snapshot("ESH4"), s.instrument("ESH4"), s.status()),
            (
                "md.glbx.310.>".into(),
                "md.glbx.310.upd.ESH4".into(),
                "md.glbx.310.snap.ESH4".into(),
                "md.glbx.310.*.ESH4".into(),
                "md.glbx.310.status".into()
            )
        );
        for (pattern, yes) in [
            ("md.glbx.310.>", true),
            ("md.>", true),
            (">", true),
            ("md.*.310.>", true),
            ("md.glbx.>", true),
            ("md.glbx.310.*", false),
            ("foo.>", false),
        ] {
            assert_eq!(covers(pattern, "md.glbx.310.>"), yes, "{pattern}");
        }
        for bad in ["", "md..x", "md.*", "md.>", "md x", ".md"] {
            assert!(Subjects::new(bad).is_err(), "{bad:?}");
        }
    }
}
