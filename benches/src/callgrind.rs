//! Instructions per message (per packet) of each decoder, counted by `valgrind --tool=callgrind` on a fixed input:
//! a count that does not move with the host's noise, beside the times that do (issue 25, item 2).
//!
//! `mdfan-bench decode --case CASE --passes N` prepares one decoder over one input (tables built, the synthetic
//! build-up played) and then runs the timed part `N` times inside [`collected`]; under callgrind with
//! `--toggle-collect=mdfan_bench::callgrind::collected` only what runs inside that function (and what it calls)
//! is counted, so the setup and the process's start are not. `mdfan-bench run` does this for every case when
//! `valgrind` is on PATH (scenario key `callgrind`, default on) and records
//! `<decoder>.<input>.instructions_per_message` (MDP 3.0: `.instructions_per_packet` and `.instructions_per_entry`).

use std::path::Path;
use std::process::Command;

use mdfan_subscriber::pair::Merge;

use crate::{itch, mdp3, plant};

/// The function callgrind counts alone.
pub const COLLECTED: &str = "mdfan_bench::callgrind::collected";

/// The decoder cases `decode --case` takes, which `mdfan-bench run` counts (`merge-one-leg` and `merge-two-legs`,
/// which `mdfan-bench plant` counts, are not among them).
pub const CASES: [&str; 8] = [
    "itch-snippet-mdfan",
    "itch-snippet-itch5_hashmap",
    "itch-snippet-itch5_parse",
    "itch-synthetic-mdfan",
    "itch-synthetic-itch5_hashmap",
    "itch-synthetic-itch5_parse",
    "mdp3-mdfan",
    "mdp3-sbe",
];

/// Messages of the synthetic stream's timed part under callgrind (the stream's build-up of a million orders is
/// played, uncounted, before it; its steady part is cut to this length to keep valgrind's 50x slowdown short).
pub const SYNTHETIC_STEADY: usize = 100_000;

/// Runs `f` where callgrind counts (never inlined, so it has a symbol of its own).
#[inline(never)]
pub fn collected(f: &mut dyn FnMut() -> anyhow::Result<()>) -> anyhow::Result<()> {
    f()
}

/// `decode --case CASE --passes N`: the case's decoder over its input, the timed part `passes` times inside
/// [`collected`]. Prints `case=.. passes=.. units=..` (units: messages or packets of one pass).
pub fn decode(root: &Path, case: &str, passes: u32) -> anyhow::Result<()> {
    if let Some(legs) = case.strip_prefix("merge-") {
        return merge(legs, passes);
    }
    let units = match case.strip_prefix("itch-") {
        Some(rest) => {
            let (input, decoder) = rest.split_once('-').ok_or_else(|| anyhow::anyhow!("case {case}: unknown"))?;
            let input = match input {
                "snippet" => itch::Input::snippet(&root.join(itch::SNIPPET))?,
                "synthetic" => itch::synthetic(SYNTHETIC_STEADY, 7),
                _ => anyhow::bail!("case {case}: unknown input {input}"),
            };
            let d = itch::Decoder::ALL
                .into_iter()
                .find(|d| d.arg() == decoder)
                .ok_or_else(|| anyhow::anyhow!("case {case}: unknown decoder {decoder}"))?;
            let mut b = itch::Bench::default();
            for _ in 0..passes {
                b.prepare(d, &input)?;
                collected(&mut || b.run(d, &input))?;
            }
            input.messages
        }
        None => {
            let packets = mdp3::line_a(&root.join(mdp3::CAPTURE))?;
            let mut ring = mdp3::Ring::default();
            let mut entries = mdp3::EntryRing::default();
            for _ in 0..passes {
                match case {
                    "mdp3-mdfan" => {
                        let mut ch = mdp3::channel();
                        collected(&mut || {
                            let n = mdp3::decode(&mut ch, &packets, &mut ring);
                            anyhow::ensure!(n == mdp3::RECORDS, "mdfan: {n} records");
                            Ok(())
                        })?;
                    }
                    "mdp3-sbe" => collected(&mut || mdp3::reference_checked(&packets, &mut entries).map(|_| ()))?,
                    _ => anyhow::bail!("case {case}: unknown"),
                }
            }
            mdp3::PACKETS as u64
        }
    };
    println!("case={case} passes={passes} units={units}");
    Ok(())
}

/// `decode --case merge-one-leg` / `merge-two-legs`: the plant's merge cost input (`crate::plant`) through one
/// leg or the merge of two, ESH4 `passes` times inside [`collected`] after one uncounted pass (each pass at venue
/// positions past the last). Units: records of one pass.
fn merge(legs: &str, passes: u32) -> anyhow::Result<()> {
    let input = plant::MergeInput::load()?;
    let (mut m, mut seq) = (Merge::new(), 0u64);
    let mut units = 0;
    // pass 0 runs first, not counted, as the timed merge cost leaves it out (each channel's first record takes
    // the full rule there); then `passes` counted ones
    for pass in 0..=u64::from(passes) {
        let src = input.pass(pass, &mut seq);
        let want: u64 = src.iter().map(|r| u64::from(r.size)).sum();
        let mut got = 0;
        let mut run = || {
            match legs {
                "one-leg" => got = plant::one_leg(&src),
                "two-legs" => got = plant::two_legs(&mut m, &src),
                _ => anyhow::bail!("case merge-{legs}: unknown (merge-one-leg, merge-two-legs)"),
            }
            Ok(())
        };
        if pass == 0 {
            run()?;
        } else {
            collected(&mut run)?;
        }
        anyhow::ensure!(got == want, "merge-{legs}: {got} lots handed out of {want}");
        units = src.len();
    }
    println!("case=merge-{legs} passes={passes} units={units}");
    Ok(())
}

/// Passes a case runs under callgrind (the first pass warms nothing that counts: instructions do not depend on
/// the caches, so a few suffice).
pub const PASSES: u32 = 3;

/// The figures of `case` (module docs), its callgrind file written into `out_dir`.
pub fn figures(case: &str, out_dir: &Path) -> anyhow::Result<Vec<(String, f64)>> {
    let per_unit = instructions_per_unit(case, PASSES, out_dir)?;
    Ok(match case {
        "mdp3-mdfan" | "mdp3-sbe" => {
            let stem = if case == "mdp3-mdfan" { "mdfan.mdp3_decode" } else { "baseline.mdp3_sbe" };
            let per_entry = per_unit * mdp3::PACKETS as f64 / mdp3::ENTRIES as f64;
            vec![
                (format!("{stem}.instructions_per_packet"), per_unit),
                (format!("{stem}.instructions_per_entry"), per_entry),
            ]
        }
        _ => {
            let (input, decoder) = case.strip_prefix("itch-").and_then(|r| r.split_once('-')).unwrap_or(("", ""));
            let d = itch::Decoder::ALL.into_iter().find(|d| d.arg() == decoder);
            let key = d.map_or("unknown", |d| d.key());
            vec![(format!("{key}.{input}.instructions_per_message"), per_unit)]
        }
    })
}

/// Whether `valgrind` runs here.
pub fn available() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Instructions (callgrind's `Ir`) per unit of `case`, counted over `passes` passes of this executable's
/// `decode` under callgrind; `out_dir` takes the callgrind output file (`callgrind.<case>.out`, kept for
/// `callgrind_annotate`).
pub fn instructions_per_unit(case: &str, passes: u32, out_dir: &Path) -> anyhow::Result<f64> {
    let exe = std::env::current_exe()?;
    let out_file = out_dir.join(format!("callgrind.{case}.out"));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--toggle-collect={COLLECTED}"))
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&exe)
        .args(["decode", "--case", case, "--passes", &passes.to_string()])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "callgrind on {case}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
    );
    let units: f64 = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("units="))
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("callgrind on {case}: no units= in {stdout}"))?;
    let text = std::fs::read_to_string(&out_file)?;
    let ir = total_ir(&text).ok_or_else(|| anyhow::anyhow!("{}: no totals line", out_file.display()))?;
    anyhow::ensure!(ir > 0, "callgrind on {case}: 0 instructions collected (is {COLLECTED} in the binary?)");
    Ok(ir as f64 / (units * f64::from(passes)))
}

/// The `Ir` total of a callgrind output file (`totals:` line, else `summary:`).
pub fn total_ir(text: &str) -> Option<u64> {
    let line =
        |p: &str| text.lines().find_map(|l| l.strip_prefix(p)).and_then(|v| v.split_whitespace().next()?.parse().ok());
    line("totals:").or_else(|| line("summary:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_read_from_the_totals_line() {
        assert_eq!(total_ir("events: Ir\nfn=x\n1 5\ntotals: 123456\n"), Some(123_456));
        assert_eq!(total_ir("events: Ir\nsummary: 77\n"), Some(77));
        assert_eq!(total_ir("events: Ir\n"), None);
    }
}
