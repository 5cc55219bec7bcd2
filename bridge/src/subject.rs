//! Subject names (crate docs, "Subjects").

/// An instrument's subject token for `symbol` (crate docs): bytes other than `A-Z a-z 0-9 _ -` become `_`;
/// `id<instrument_id>` for no symbol or an empty one.
pub fn token(symbol: Option<&str>, instrument_id: u32) -> String {
    match symbol.filter(|s| !s.is_empty()) {
        Some(s) => s
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' { b as char } else { '_' })
            .collect(),
        None => id_token(instrument_id),
    }
}

/// The token of an instrument with no symbol of its own: `id<instrument_id>`.
pub fn id_token(instrument_id: u32) -> String {
    format!("id{instrument_id}")
}

/// Whether `prefix` is a valid subject prefix: dot-separated tokens of `A-Z a-z 0-9 _ -`, none empty.
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix
            .split('.')
            .all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
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
    fn tokens_keep_safe_bytes_and_name_unnamed_instruments_by_id() {
        assert_eq!(token(Some("ESH4"), 17077), "ESH4");
        assert_eq!(token(Some("BRK.B"), 9), "BRK_B");
        assert_eq!(token(Some("6E Z6>*"), 9), "6E_Z6__");
        assert_eq!(token(Some(""), 9), "id9");
        assert_eq!(token(None, 17077), "id17077");
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
        for bad in ["", "md..x", "md.*", "md.>", "md x", ".md"] {
            assert!(Subjects::new(bad).is_err(), "{bad:?}");
        }
    }
}
