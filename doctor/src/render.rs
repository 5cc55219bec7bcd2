//! Printing findings: a table for people, JSON for scripts.

use std::fmt::Write as _;

use crate::{Finding, Verdict};

/// The table (check, verdict, found, wanted), then for each finding that did not pass, why and the fix.
pub fn table(findings: &[Finding]) -> String {
    let w_id = findings.iter().map(|f| f.id.len()).max().unwrap_or(5).max(5);
    let w_found = findings.iter().map(|f| f.found.chars().count()).max().unwrap_or(5).clamp(5, 60);
    let mut out = String::new();
    let _ = writeln!(out, "{:w_id$}  {:7}  {:w_found$}  wanted", "check", "verdict", "found");
    for f in findings {
        let _ = writeln!(out, "{:w_id$}  {:7}  {:w_found$}  {}", f.id, f.verdict.as_str(), f.found, f.wanted);
    }
    // Unknowns with nothing to do (no RDMA device behind an RDMA check) stay in the table only.
    let notes: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.verdict != Verdict::Pass && !(f.verdict == Verdict::Unknown && f.fix.is_empty()))
        .collect();
    if !notes.is_empty() {
        out.push('\n');
    }
    for f in notes {
        let _ = writeln!(out, "{} ({}): {}", f.id, f.verdict.as_str(), f.found);
        let _ = writeln!(out, "  why: {}", f.why);
        if !f.fix.is_empty() {
            let _ = writeln!(out, "  fix: {}", f.fix);
        }
    }
    let count = |v: Verdict| findings.iter().filter(|f| f.verdict == v).count();
    let _ = writeln!(
        out,
        "\n{} pass, {} warn, {} fail, {} unknown",
        count(Verdict::Pass),
        count(Verdict::Warn),
        count(Verdict::Fail),
        count(Verdict::Unknown)
    );
    out
}

/// A JSON array of `{id, area, verdict, found, wanted, why, fix}`.
pub fn json(findings: &[Finding]) -> String {
    serde_json::to_string_pretty(findings).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
