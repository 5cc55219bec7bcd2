//! The tables a reader of a run's report wants first, built from the same `context` and figures map that
//! `summary.json` holds, and rendered as Markdown (`summary.md`) or HTML (`report.html`):
//!
//! - the run: machine, clock, kernel, tuning, peers built, scenario ([`context`]);
//! - one-way latency by percentile for each ping-pong variant measured ([`latency`]);
//! - mdfan's ping-pong as a ratio to each baseline, percentile by percentile ([`ratios`]); the median of the
//!   per-round ratios with their spread ([`round_ratios`]) and every round's ratios, stalled rounds marked
//!   ([`rounds`]);
//! - book apply cost per record, the pre-allocated book against the reference ([`book_apply`]);
//! - replay throughput by subscriber count against the DBN decode of the same capture ([`throughput`]);
//! - the open loop by rate ([`open_loop`]);
//! - the MDP 3.0 decoder against the reference decoder generated from CME's schema, per packet and per entry,
//!   times and callgrind instructions ([`mdp3`]);
//! - the ITCH 5.0 decoder against `itch5` + a `HashMap` order table, on the snippet and a synthetic day ([`itch`]).
//!
//! A variant absent from a run (a feature not built, the replay skipped) has no row; a table with no row is
//! not given. Names are [`display_name`]s, never figure keys (those are in the flat figures list).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::report::{
    display_name, fmt_int, fmt_ns, fmt_rate, fmt_ratio, percentile_label, LATENCY_VARIANTS, PINGPONG_RATIOS,
    RATIO_PERCENTILES,
};

/// A table: a heading, a sentence saying what is in it, a header row and rows of text.
#[derive(Debug, Clone)]
pub struct Table {
    pub title: String,
    pub note: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Columns from this one on hold figures (right-aligned).
    pub figures_from: usize,
}

impl Table {
    /// `## title`, the note, and a GitHub Markdown table.
    pub fn markdown(&self) -> String {
        let mut md = format!("## {}\n\n", self.title);
        if !self.note.is_empty() {
            let _ = writeln!(md, "{}\n", self.note);
        }
        let cell = |s: &str| s.replace('|', "\\|");
        let _ = writeln!(md, "| {} |", self.head.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "));
        let align: Vec<&str> =
            (0..self.head.len()).map(|i| if i >= self.figures_from { "---:" } else { "---" }).collect();
        let _ = writeln!(md, "|{}|", align.join("|"));
        for row in &self.rows {
            let _ = writeln!(md, "| {} |", row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
        }
        md.push('\n');
        md
    }

    /// `<h2>`, the note as a paragraph, and the table (no header row when every header cell is empty).
    pub fn html(&self) -> String {
        let mut h = format!("<h2>{}</h2>\n", escape(&self.title));
        if !self.note.is_empty() {
            let _ = writeln!(h, "<p class=note>{}</p>", escape(&self.note));
        }
        h.push_str("<table>\n");
        if self.head.iter().any(|c| !c.is_empty()) {
            h.push_str("<tr>");
            for (i, c) in self.head.iter().enumerate() {
                let class = if i >= self.figures_from { " class=n" } else { "" };
                let _ = write!(h, "<th{class}>{}</th>", escape(c));
            }
            h.push_str("</tr>\n");
        }
        for row in &self.rows {
            h.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let (tag, class) = match (i, i >= self.figures_from) {
                    (0, false) => ("th", " scope=row"),
                    (_, true) => ("td", " class=n"),
                    _ => ("td", ""),
                };
                let _ = write!(h, "<{tag}{class}>{}</{tag}>", escape(c));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
        h
    }
}

/// Text for HTML (element content and double-quoted attributes).
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Every table of [`crate::tables`] this run has, in reading order (the run's context first).
pub fn all(context: &serde_json::Value, figures: &BTreeMap<String, f64>) -> Vec<Table> {
    std::iter::once(self::context(context))
        .chain(
            [
                latency(figures),
                ratios(figures),
                round_ratios(context, figures),
                book_apply(figures),
                throughput(figures),
                fanout(figures),
                open_loop(figures),
                mdp3(figures),
                mdp3_loopback(figures),
                itch(figures),
                probe(figures),
                rounds(context),
            ]
            .into_iter()
            .flatten(),
        )
        .collect()
}

/// The run: host, CPU model, cores, clock source, kernel, tuning (pinned or not), peers built, rounds, count per
/// round, duration; then the scenario's other keys. Read from `summary.json`'s `context` (a missing key shows
/// as "-").
pub fn context(c: &serde_json::Value) -> Table {
    use serde_json::Value;
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => "-".to_owned(),
    };
    let get = |k: &str| c.get(k);
    let list = |v: Option<&Value>| -> Option<Vec<String>> {
        v.and_then(Value::as_array).map(|a| a.iter().map(|x| text(Some(x))).collect())
    };
    let cores = match list(get("cores")) {
        Some(v) if v.len() == 2 && v.iter().all(|c| c != "-") => format!("{}, {} (A sends, B receives)", v[0], v[1]),
        _ => "not pinned (fewer than two cores allowed)".to_owned(),
    };
    let clock = match (text(get("clock")), text(get("clocksource"))) {
        (clock, source) if source == "-" => clock,
        (clock, source) => format!("{clock} (kernel clocksource {source})"),
    };
    let tuning = {
        let t = get("tuning");
        let field = |k: &str| t.and_then(|t| t.get(k));
        let none_if_null = |k: &str| match field(k) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => "none".to_owned(),
        };
        format!(
            "{}; isolcpus {}; nohz_full {}; huge pages {} free of {}",
            text(get("pinning")),
            none_if_null("isolcpus"),
            none_if_null("nohz_full"),
            text(field("hugepages_free")),
            text(field("hugepages_total")),
        )
    };
    let peers = match list(get("peers_built")) {
        Some(v) if !v.is_empty() => v.join(", "),
        Some(_) => "none (features aeron, iceoryx2, verbs off)".to_owned(),
        None => "-".to_owned(),
    };
    let count = match (get("count_per_round").and_then(Value::as_f64), get("warmup").and_then(Value::as_f64)) {
        (Some(n), Some(w)) => format!("{} per measurement (after {} warm-up)", fmt_int(n), fmt_int(w)),
        (Some(n), None) => fmt_int(n),
        _ => "-".to_owned(),
    };
    let duration = {
        let elapsed = get("elapsed_s").and_then(Value::as_f64).map(|s| match s {
            s if s < 10.0 => format!("{s:.1} s of measuring"),
            s if s < 600.0 => format!("{s:.0} s of measuring"),
            s => format!("{:.0} min {:.0} s of measuring", (s / 60.0).floor(), s % 60.0),
        });
        let open = get("duration_ms").and_then(Value::as_u64).map(|ms| format!("open loop {ms} ms per rate"));
        match (elapsed, open) {
            (Some(e), Some(o)) => format!("{e} ({o})"),
            (Some(e), None) => e,
            (None, Some(o)) => o,
            (None, None) => "-".to_owned(),
        }
    };
    let fabric = match get("fabric") {
        Some(f) => {
            let mut s = text(f.get("kind"));
            if let Some(d) = f.get("device").and_then(Value::as_str) {
                let _ = write!(s, ", device {d}");
            }
            if let Some(g) = f.get("gid_index").and_then(Value::as_u64) {
                let _ = write!(s, ", GID index {g}");
            }
            s
        }
        None => "-".to_owned(),
    };
    let scenario = {
        let rates: Vec<String> =
            list(get("rates")).unwrap_or_default().iter().map(|r| crate::report::rate_name(r)).collect();
        let replay = match get("replay") {
            Some(Value::Bool(false)) => "replay skipped".to_owned(),
            _ => format!("replay to {} subscribers", list(get("subscribers")).map_or("-".to_owned(), |v| v.join(", "))),
        };
        match c.pointer("/fabric/kind").and_then(Value::as_str) {
            Some("verbs") => "verbs ping-pong beside perftest (no open loop, no replay)".to_owned(),
            _ => format!(
                "open loop at {} to {} subscribers, {}; {replay}",
                if rates.is_empty() { "-".to_owned() } else { rates.join(", ") },
                text(get("open_loop_subscribers")),
                match text(get("source")).as_str() {
                    "replay" => "the capture's records".to_owned(),
                    "synthetic" => "synthetic records".to_owned(),
                    other => format!("{other} records"),
                },
            ),
        }
    };
    let capture = get("capture")
        .and_then(Value::as_str)
        .map(|p| std::path::Path::new(p).file_name().map_or(p.to_owned(), |n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "-".to_owned());
    let mut rows = vec![
        ("host", text(get("host"))),
        ("CPU model", text(get("cpu"))),
        ("cores", cores),
        ("clock source", clock),
        ("kernel", text(get("kernel"))),
        ("tuning", tuning),
        ("peers built", peers),
        ("rounds", text(get("rounds"))),
        ("count per round", count),
        ("duration", duration),
        ("started", get("started_unix_s").and_then(Value::as_u64).map_or("-".to_owned(), utc)),
        ("fabric", fabric),
        ("scenario", scenario),
        ("capture", capture),
    ];
    if let Some(p) =
        get("verbs_rounds").and_then(Value::as_array).and_then(|r| r.first()).and_then(|r| r.get("perftest"))
    {
        rows.push((
            "perftest",
            format!("{} (op {}, {})", text(p.get("command")), text(p.get("op")), text(p.get("version"))),
        ));
    }
    if let Some(c) = get("verbs_rounds").and_then(Value::as_array).and_then(|r| r.first()).and_then(|r| r.get("clocks"))
    {
        rows.push((
            "verbs clocks",
            format!(
                "mdfan ping-pong {}; perftest {}; NIC clock {}",
                text(c.get("mdfan.verbs.pingpong")),
                text(c.get("baseline.perftest")),
                text(c.get("nic"))
            ),
        ));
    }
    rows.push(("mdfan-bench", text(get("version"))));
    Table {
        title: "Run".into(),
        note: String::new(),
        head: vec![String::new(), String::new()],
        rows: rows.into_iter().map(|(k, v)| vec![k.to_owned(), v]).collect(),
        figures_from: 2,
    }
}

/// `2026-11-29 22:51 UTC` from seconds since the epoch.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (h, m) = (secs % 86_400 / 3600, secs % 3600 / 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02} UTC")
}

/// One-way latency by percentile (p50, p99, p99.9, p99.99, max) and the sample count of each ping-pong variant
/// this run measured, in [`LATENCY_VARIANTS`] order.
pub fn latency(f: &BTreeMap<String, f64>) -> Option<Table> {
    let rows: Vec<Vec<String>> = LATENCY_VARIANTS
        .iter()
        .filter(|v| f.contains_key(&format!("{v}.p50_ns")))
        .map(|v| {
            let mut row = vec![display_name(v)];
            row.extend(
                RATIO_PERCENTILES.iter().map(|p| f.get(&format!("{v}.{p}_ns")).map_or("-".into(), |&x| fmt_ns(x))),
            );
            row.push(f.get(&format!("{v}.max_ns")).map_or("-".into(), |&x| fmt_ns(x)));
            row.push(f.get(&format!("{v}.count")).map_or("-".into(), |&x| fmt_int(x)));
            row
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "One-way latency".into(),
        note: "Ping-pong, one message each way at a time between the same two cores, interleaved in every round; \
               one-way = round trip / 2. The cache line is the physical limit."
            .into(),
        head: ["", "p50", "p99", "p99.9", "p99.99", "max", "samples"].map(String::from).to_vec(),
        rows,
        figures_from: 1,
    })
}

/// mdfan's ping-pong against each baseline's at the same percentile (the like-for-like ratios of
/// [`crate::report::add_ratio_figures`]), one row per pair this run has. When Aeron was measured, the note says
/// which of the two Aeron measurements was the better one at each percentile (the targets hold mdfan against it).
pub fn ratios(f: &BTreeMap<String, f64>) -> Option<Table> {
    let rows: Vec<Vec<String>> = PINGPONG_RATIOS
        .iter()
        .filter(|(n, d)| RATIO_PERCENTILES.iter().any(|p| f.contains_key(&format!("ratio.{n}_vs_{d}.{p}"))))
        .map(|(n, d)| {
            let mut row = vec![display_name(n), display_name(d)];
            row.extend(
                RATIO_PERCENTILES
                    .iter()
                    .map(|p| f.get(&format!("ratio.{n}_vs_{d}.{p}")).map_or("-".into(), |&r| fmt_ratio(r))),
            );
            row
        })
        .collect();
    let mut head = vec!["".to_owned(), "as a ratio to".to_owned()];
    head.extend(RATIO_PERCENTILES.iter().map(|p| percentile_label(p)));
    let mut note = "mdfan's one-way latency divided by the baseline's at the same percentile, same run: below 1.00x \
                    mdfan is faster."
        .to_owned();
    let best: Vec<String> = RATIO_PERCENTILES
        .iter()
        .filter_map(|p| crate::report::best_aeron(f, p).map(|v| format!("{} {}", percentile_label(p), display_name(v))))
        .collect();
    if !best.is_empty() {
        let _ = write!(note, " The better Aeron IPC figure, which the targets use: {}.", best.join(", "));
    }
    (!rows.is_empty()).then(|| Table { title: "mdfan against each baseline".into(), note, head, rows, figures_from: 2 })
}

/// Replay throughput by subscriber count: records/s, the ratio to the DBN decode of the same capture (file, and
/// in memory when measured), the hot loop's ns per record per subscriber and the share of the replay it was
/// blocked on a full ring.
pub fn throughput(f: &BTreeMap<String, f64>) -> Option<Table> {
    let rates: Vec<(&str, usize, f64)> = crate::report::REPLAY_STEMS
        .iter()
        .flat_map(|&stem| crate::report::replay_rates_of(f, stem).into_iter().map(move |(n, r)| (stem, n, r)))
        .collect();
    if rates.is_empty() {
        return None;
    }
    let has_mem = f.contains_key("baseline.dbn_decode_mem.rate_per_s");
    let mut head =
        vec!["idle".to_owned(), "subscribers".to_owned(), "records/s".to_owned(), "vs DBN decode (file)".to_owned()];
    if has_mem {
        head.push("vs DBN decode (in memory)".to_owned());
    }
    head.extend(
        [
            "hot loop wall ns per record per subscriber",
            "hot loop blocked",
            "CPU ns per record: feed decode",
            "hot loop, per subscriber",
            "subscriber poll, per subscriber",
        ]
        .map(String::from),
    );
    let rows = rates
        .iter()
        .map(|&(stem, n, rate)| {
            let base = format!("mdfan.{stem}.subs{n}");
            let ratio = |den: &str| f.get(&format!("ratio.{base}_vs_{den}.rate")).map_or("-".into(), |&r| fmt_ratio(r));
            let idle = match stem {
                "replay" => "spin",
                "replay_yield" => "yield",
                _ => "spin, feed on the hot thread",
            };
            let mut row = vec![idle.to_owned(), n.to_string(), fmt_rate(rate), ratio("baseline.dbn_decode")];
            if has_mem {
                row.push(ratio("baseline.dbn_decode_mem"));
            }
            row.push(f.get(&format!("{base}.cpu_ns_per_record_per_sub")).map_or("-".into(), |&v| format!("{v:.0}")));
            row.push(f.get(&format!("{base}.blocked_share")).map_or("-".into(), |&v| format!("{:.0}%", v * 100.0)));
            for k in ["feed_cpu_ns_per_record", "hot_cpu_ns_per_record_per_sub", "poll_cpu_ns_per_record_per_sub"] {
                row.push(f.get(&format!("{base}.{k}")).map_or("-".into(), |&v| format!("{v:.1}")));
            }
            row
        })
        .collect();
    let mut note = "The real publisher replaying the capture at pace max (policy block) to N subscribers of the \
                    subscriber library, polled by one thread. Idle spin: the hot loop and the subscriber thread \
                    busy-spin; yield: both yield after 1,000 empty polls (`publisher.hot_idle = \"yield\"`), which \
                    leaves the unpinned feed thread (zstd, DBN decode, normalise) a core on a host with fewer cores \
                    than busy threads; feed on the hot thread: both spin and the hot loop decodes the feed whenever \
                    it has no record to send (`publisher.feed_on_hot_thread = true`), two busy threads."
        .to_owned();
    let decode: Vec<String> =
        [("baseline.dbn_decode", "from the file (zstd + DBN)"), ("baseline.dbn_decode_mem", "in memory")]
            .iter()
            .filter_map(|(k, what)| f.get(&format!("{k}.rate_per_s")).map(|&r| format!("{} {what}", fmt_rate(r))))
            .collect();
    if !decode.is_empty() {
        let _ = write!(note, " The capture decoded alone: {}.", decode.join(", "));
    }
    note.push_str(
        " CPU time per record of each stage from each thread's own CPU clock (the kernel's per-thread clock, \
         CLOCK_THREAD_CPUTIME_ID, read at the thread's start and end; the publisher's threads sampled every 0.5 ms \
         while they live): where cores are short, records/s measures the scheduler and these say what each stage \
         costs.",
    );
    if let Some(&cores) = f.get("host.cores") {
        let _ = write!(
            note,
            " This host has {cores:.0} cores: {} (spin and yield run 3 busy threads: feed, hot loop, subscriber \
             poll; the feed on the hot thread 2), and the replay targets are judged only where there is a core per \
             busy thread.",
            if cores >= 3.0 {
                "a core per busy thread for every variant"
            } else if cores >= 2.0 {
                "a core per busy thread only with the feed on the hot thread"
            } else {
                "fewer cores than busy threads for every variant"
            }
        );
    }
    Some(Table { title: "Replay throughput".into(), note, head, rows, figures_from: 2 })
}

/// Fan-out scaling by subscriber count: the hot loop's time per record and per record per subscriber, the
/// 64-byte store limit beside it, the subscriber side's time per record; then the cost of one more subscriber
/// (the slopes) and their quotient.
pub fn fanout(f: &BTreeMap<String, f64>) -> Option<Table> {
    let counts = crate::fanout::counts(f);
    if counts.is_empty() {
        return None;
    }
    let ns = |k: String| f.get(&k).map_or("-".into(), |&v| format!("{v:.1}"));
    let mut rows: Vec<Vec<String>> = counts
        .iter()
        .map(|&n| {
            let (m, b) = (format!("mdfan.fanout.subs{n}"), format!("baseline.store64.subs{n}"));
            vec![
                n.to_string(),
                ns(format!("{m}.hot_ns_per_record")),
                ns(format!("{m}.hot_ns_per_record_per_sub")),
                ns(format!("{b}.ns_per_record")),
                ns(format!("{b}.ns_per_record_per_sub")),
                ns(format!("{m}.sub_ns_per_record")),
            ]
        })
        .collect();
    rows.push(vec![
        "one more (slope)".into(),
        ns("mdfan.fanout.extra_sub.ns_per_record".into()),
        f.get("ratio.mdfan.fanout.extra_sub_vs_baseline.store64").map_or("-".into(), |&r| fmt_ratio(r)),
        ns("baseline.store64.extra_sub.ns_per_record".into()),
        String::new(),
        String::new(),
    ]);
    let note = "The real publisher's hot loop (pinned, busy-spinning) fanning the whole capture out of its journal \
                to N subscriber rings (shm, 131,072 slots) that nobody reads meanwhile; then one thread drains the \
                rings through the subscriber library (subscriber side). The limit: the same records copied, 64 bytes \
                each, into N ring-like buffers of the same memory (tmpfs, 4 KiB pages), on the same core, in the \
                same round. Rings, not processes: all N subscribers live in the bench process. The last row: the \
                least-squares slope over N, ns per record per extra subscriber, and the hot loop's against the \
                limit's (target <= 1.5x)."
        .to_owned();
    let head = [
        "subscribers",
        "hot loop ns/record",
        "hot loop ns/record/sub",
        "64 B store limit ns/record",
        "limit ns/record/sub",
        "subscriber side ns/record",
    ]
    .map(String::from)
    .to_vec();
    Some(Table { title: "Fan-out scaling".into(), note, head, rows, figures_from: 1 })
}

/// The open loop by rate: the rate measured, end-to-end and post-to-poll latency, late posts.
pub fn open_loop(f: &BTreeMap<String, f64>) -> Option<Table> {
    let rates = crate::report::openloop_rates(f);
    let rows: Vec<Vec<String>> = rates
        .iter()
        .filter(|r| f.keys().any(|k| k.starts_with(&format!("mdfan.shm.openloop.{r}.")) && k.ends_with("_ns")))
        .map(|r| {
            let base = format!("mdfan.shm.openloop.{r}");
            let ns = |k: &str| f.get(&format!("{base}.{k}")).map_or("-".into(), |&v| fmt_ns(v));
            vec![
                crate::report::rate_name(r),
                f.get(&format!("{base}.rate_per_s")).map_or("-".into(), |&v| fmt_rate(v)),
                ns("end_to_end.p50_ns"),
                ns("end_to_end.p99_ns"),
                ns("end_to_end.p999_ns"),
                ns("post_to_poll.p50_ns"),
                ns("post_to_poll.p99_ns"),
                ns("post_to_poll.p999_ns"),
                f.get(&format!("{base}.late_posts")).map_or("-".into(), |&v| fmt_int(v)),
            ]
        })
        .collect();
    (!rows.is_empty()).then(|| Table {
        title: "Open loop".into(),
        note: "Records normalized and posted to the subscriber rings on a fixed schedule; end to end counts from each \
               record's due time (coordinated omission corrected). At rate max the sender runs ahead of the receiver, \
               so these are queueing times: they are not divided by the cache line."
            .into(),
        head: [
            "rate asked",
            "rate measured",
            "end to end p50",
            "p99",
            "p99.9",
            "post to poll p50",
            "p99",
            "p99.9",
            "late posts",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        figures_from: 1,
    })
}

/// A number of instructions per unit (callgrind), or `-`.
fn fmt_instr(v: Option<&f64>) -> String {
    v.map_or("-".into(), |&v| format!("{v:.0}"))
}

/// MDP 3.0 decode + normalise against the reference decoder (`sbe_gen` views of CME's schema reading the same
/// fields), each per packet (p50 of the per-packet times) and per entry (a pass's time over its entries), with
/// callgrind's instructions beside them; the last row the ratios (target at most 1.5x each).
pub fn mdp3(f: &BTreeMap<String, f64>) -> Option<Table> {
    f.get("mdfan.mdp3_decode.ns_per_entry")?;
    let ns = |k: &str| f.get(k).map_or("-".into(), |&v| format!("{v:.1} ns"));
    let row = |name: &str, stem: &str| {
        vec![
            name.to_owned(),
            ns(&format!("{stem}.packet_p50_ns")),
            ns(&format!("{stem}.ns_per_entry")),
            fmt_instr(f.get(&format!("{stem}.instructions_per_packet"))),
            fmt_instr(f.get(&format!("{stem}.instructions_per_entry"))),
        ]
    };
    let r = "ratio.mdfan.mdp3_decode_vs_baseline.mdp3_sbe";
    let q = |k: &str| f.get(&format!("{r}.{k}")).map_or("-".into(), |&v| fmt_ratio(v));
    Some(Table {
        title: "MDP 3.0 decode".into(),
        note: "The bundled MDP 3.0 capture's line A (5,000 packets, 6,195 entries over templates 32, 35, 37 and 42) \
               in memory on one core. mdfan: validate, decode, RptSeq checks, normalize into a pre-allocated ring \
               of 64-byte records (the journal's stand-in). Reference: views generated from CME's schema by sbe_gen \
               (crate registry) reading every field mdfan's normalization reads, each entry written into a ring of \
               the same size. Per packet: p50 of the TSC around each packet; per entry: a whole pass over the \
               entries (medians over rounds of each round's ratio); instructions from valgrind --tool=callgrind on \
               the same input. Target: at most 1.5x the reference per packet and per entry."
            .into(),
        head: ["decoder", "ns per packet (p50)", "ns per entry", "instructions per packet", "instructions per entry"]
            .map(String::from)
            .to_vec(),
        rows: vec![
            row("mdfan decode + normalize", "mdfan.mdp3_decode"),
            row("reference (sbe_gen views)", "baseline.mdp3_sbe"),
            vec![
                "mdfan / reference (target <= 1.5x)".into(),
                q("per_packet"),
                q("per_entry"),
                q("per_packet.instructions"),
                q("per_entry.instructions"),
            ],
        ],
        figures_from: 1,
    })
}

/// ITCH 5.0 decode + normalise against the reference (`itch5`'s parse + a `std` `HashMap` order table) and
/// `itch5`'s parse alone (a floor), on each input: ns and instructions per message, and mdfan's ratios.
pub fn itch(f: &BTreeMap<String, f64>) -> Option<Table> {
    let mut rows = Vec::new();
    for input in crate::report::ITCH_INPUTS {
        if !f.contains_key(&format!("mdfan.itch_decode.{input}.ns_per_message")) {
            continue;
        }
        let cell = |stem: &str, unit: &str| match f.get(&format!("{stem}.{input}.{unit}")) {
            Some(v) if unit == "ns_per_message" => format!("{v:.1} ns"),
            v => fmt_instr(v),
        };
        let ratio = |den: &str, suffix: &str| {
            f.get(&format!("ratio.mdfan.itch_decode_vs_baseline.{den}.{input}{suffix}"))
                .map_or("-".into(), |&v| fmt_ratio(v))
        };
        let label = if input == "snippet" { "snippet (1,000 messages)" } else { "synthetic day, 1M live orders" };
        rows.push(vec![
            label.to_owned(),
            cell("mdfan.itch_decode", "ns_per_message"),
            cell("baseline.itch5_hashmap", "ns_per_message"),
            cell("baseline.itch5_parse", "ns_per_message"),
            ratio("itch5_hashmap", ""),
            cell("mdfan.itch_decode", "instructions_per_message"),
            cell("baseline.itch5_hashmap", "instructions_per_message"),
            cell("baseline.itch5_parse", "instructions_per_message"),
            ratio("itch5_hashmap", ".instructions"),
        ]);
    }
    if rows.is_empty() {
        return None;
    }
    Some(Table {
        title: "ITCH 5.0 decode".into(),
        note: "In memory on one core. mdfan: the publisher's path, ItchFile over the bytes, decode + normalize with \
               its order reference table sized for 2^20 orders, records into a pre-allocated ring of 64-byte \
               records. Reference: the itch5 crate's zero-copy parse + a std HashMap order table of the same \
               capacity yielding each referenced order's locate, side, price and remaining shares into a ring. \
               Floor: itch5's parse alone. Inputs: the bundled snippet; a synthetic day-shaped stream (adds, \
               deletes, replaces, executions, cancels, trades) over a million live orders after an untimed \
               build-up. Times: median pass, medians over rounds of each round's ratio; instructions: valgrind \
               --tool=callgrind (synthetic: 100,000 messages after the build-up). Target: mdfan at most 1.0x the \
               reference on both inputs."
            .into(),
        head: [
            "input",
            "mdfan ns/message",
            "itch5 + HashMap ns/message",
            "itch5 parse ns/message",
            "mdfan / reference (target <= 1.0x)",
            "mdfan instructions/message",
            "itch5 + HashMap instructions",
            "itch5 parse instructions",
            "instructions, mdfan / reference",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        figures_from: 1,
    })
}

/// MDP 3.0 over loopback UDP: wire-to-poll (the datagram's receive stamp to the subscriber's poll) beside
/// post-to-poll (the ring write to the poll), each with its clock.
pub fn mdp3_loopback(f: &BTreeMap<String, f64>) -> Option<Table> {
    let base = "mdfan.mdp3_loopback";
    let hw = f.get(&format!("{base}.hardware_stamp")).copied()? > 0.0;
    let rows: Vec<Vec<String>> = [
        ("wire to poll", "wire_to_poll", if hw { "realtime (hw stamp)" } else { "realtime (sw stamp)" }),
        ("post to poll", "post_to_poll", "tsc"),
    ]
    .iter()
    .filter(|(_, k, _)| f.contains_key(&format!("{base}.{k}.count")))
    .map(|(name, k, clock)| {
        let ns = |q: &str| f.get(&format!("{base}.{k}.{q}_ns")).map_or("-".into(), |&v| fmt_ns(v));
        let count = f.get(&format!("{base}.{k}.count")).map_or("-".into(), |&v| fmt_int(v));
        vec![(*name).to_owned(), (*clock).to_owned(), ns("p50"), ns("p99"), ns("p999"), ns("max"), count]
    })
    .collect();
    (!rows.is_empty()).then(|| Table {
        title: "MDP 3.0 over loopback UDP".into(),
        note: "Line A sent over loopback UDP to a line socket (SO_TIMESTAMPING), decoded into an shm ring and polled \
               by the subscriber library with latency on: wire to poll is the datagram's receive stamp to the poll \
               (CLOCK_REALTIME), post to poll the ring write to the poll (TSC). Sender, receiver and subscriber \
               share the host's cores."
            .into(),
        head: ["", "clock", "p50", "p99", "p99.9", "max", "samples"].map(String::from).to_vec(),
        rows,
        figures_from: 2,
    })
}

/// The ping-pong ratios as the targets read them: for each pair this run has, the median of the per-round ratios
/// with the smallest and largest round beside it, over the rounds a host stall did not hit ([`crate::rounds`]).
pub fn round_ratios(c: &serde_json::Value, f: &BTreeMap<String, f64>) -> Option<Table> {
    let rounds = f.get("pingpong.rounds").copied()?;
    let rows: Vec<Vec<String>> = PINGPONG_RATIOS
        .iter()
        .filter(|(n, d)| f.contains_key(&format!("ratio.{n}_vs_{d}.p50.min")))
        .map(|(n, d)| {
            let mut row = vec![display_name(n), display_name(d)];
            row.extend(RATIO_PERCENTILES.iter().map(|p| {
                let g = |s: &str| f.get(&format!("ratio.{n}_vs_{d}.{p}{s}")).copied();
                match (g(""), g(".min"), g(".max")) {
                    (Some(m), Some(lo), Some(hi)) => {
                        format!("{} ({} to {})", fmt_ratio(m), fmt_ratio(lo), fmt_ratio(hi))
                    }
                    _ => "-".into(),
                }
            }));
            row
        })
        .collect();
    let stalled = f.get("pingpong.stalled.rounds").copied().unwrap_or(0.0);
    let all = f.get("pingpong.stalled.all_flagged").is_some_and(|&v| v > 0.0);
    let threshold =
        c["pingpong_rounds"]["threshold_ns"].as_f64().or_else(|| f.get("pingpong.stall_threshold_ns").copied());
    let threshold = threshold.map_or("-".into(), fmt_ns);
    let used = if all {
        format!(
            "every one of the {} rounds was flagged (cache-line max above {threshold}), so these use all of them and \
             say little",
            fmt_int(rounds)
        )
    } else {
        format!(
            "{} of {} rounds; {} flagged (cache-line max above {threshold}) and left out",
            fmt_int(rounds - stalled),
            fmt_int(rounds),
            fmt_int(stalled)
        )
    };
    let few = if !all && 2.0 * (rounds - stalled) < rounds {
        " Fewer than half the rounds are left: these medians rest on few rounds."
    } else {
        ""
    };
    let mut head = vec!["".to_owned(), "as a ratio to".to_owned()];
    head.extend(RATIO_PERCENTILES.iter().map(|p| percentile_label(p)));
    (!rows.is_empty()).then(|| Table {
        title: "mdfan against each baseline, round by round".into(),
        note: format!(
            "Each round measures every variant once, interleaved; a ratio is taken per round at each percentile. \
             Given: the median of the rounds' ratios (smallest to largest round in brackets), over {used}. The \
             targets read these medians.{few}"
        ),
        head,
        rows,
        figures_from: 2,
    })
}

/// Every round's ratios (p50, p99, p99.9 of each pair) and its cache-line max, a flagged round marked, from the
/// context's `pingpong_rounds` ([`crate::rounds::PingpongRounds::to_json`]).
pub fn rounds(c: &serde_json::Value) -> Option<Table> {
    let pr = &c["pingpong_rounds"];
    let rounds = pr["rounds"].as_array().filter(|r| !r.is_empty())?;
    let pairs: Vec<(&str, &str)> = PINGPONG_RATIOS
        .iter()
        .copied()
        .filter(|(n, d)| rounds[0]["ratios"].get(format!("{n}_vs_{d}")).is_some())
        .collect();
    let shown = ["p50", "p99", "p999"];
    let mut head = vec!["round".to_owned(), "cache-line max".to_owned()];
    for (n, d) in &pairs {
        let short = if *n == "mdfan.shm.pingpong" {
            display_name(d)
        } else {
            format!("{} / {}", display_name(n), display_name(d))
        };
        head.extend(shown.iter().map(|p| format!("{short} {}", percentile_label(p))));
    }
    let rows = rounds
        .iter()
        .map(|r| {
            let flag = if r["flagged"].as_bool() == Some(true) { " (stall)" } else { "" };
            let mut row =
                vec![format!("{}{flag}", r["round"]), r["stall_probe_max_ns"].as_f64().map_or("-".into(), fmt_ns)];
            for (n, d) in &pairs {
                let by_p = &r["ratios"][format!("{n}_vs_{d}")];
                row.extend(shown.iter().map(|p| by_p[*p].as_f64().map_or("-".into(), fmt_ratio)));
            }
            row
        })
        .collect();
    let threshold = pr["threshold_ns"].as_f64().map_or("-".into(), fmt_ns);
    let flagged: Vec<String> = pr["flagged"].as_array().into_iter().flatten().map(|v| v.to_string()).collect();
    let flagged = match flagged.len() {
        0 => "none".to_owned(),
        1 => format!("round {}", flagged[0]),
        n => format!("{} rounds: {}", n, flagged.join(", ")),
    };
    Some(Table {
        title: "Ping-pong ratios in each round".into(),
        note: format!(
            "mdfan's one-way latency over each baseline's in the same round (below 1.00x mdfan is faster). A round \
             whose cache-line ping-pong max exceeds {threshold} was hit by a host stall: marked (stall) and left \
             out of the medians. Flagged: {flagged}."
        ),
        head,
        rows,
        figures_from: 1,
    })
}

/// Book apply cost per record on the capture: the subscriber library's pre-allocated book against the reference
/// book, TSC around each apply with the read cost taken off ([`crate::book_apply`]).
pub fn book_apply(f: &BTreeMap<String, f64>) -> Option<Table> {
    let rows: Vec<Vec<String>> = ["strategy.book_apply", "baseline.reference_book_apply"]
        .iter()
        .filter(|k| f.contains_key(&format!("{k}.p50_ns")))
        .map(|k| {
            let ns = |q: &str| f.get(&format!("{k}.{q}_ns")).map_or("-".into(), |&v| fmt_ns(v));
            let count = f.get(&format!("{k}.count")).map_or("-".into(), |&v| fmt_int(v));
            vec![display_name(k), ns("p50"), ns("p99"), ns("p999"), ns("max"), count]
        })
        .collect();
    let overhead = f.get("strategy.book_apply.tsc_overhead_ns").map_or("-".into(), |&v| fmt_ns(v));
    let ratio = |p: &str| {
        f.get(&format!("ratio.strategy.book_apply_vs_baseline.reference_book_apply.{p}"))
            .map_or("-".into(), |&r| fmt_ratio(r))
    };
    (!rows.is_empty()).then(|| Table {
        title: "Book apply per record".into(),
        note: format!(
            "Every record of the capture, normalised once beforehand, applied in file order on core A; TSC around \
             each apply, less the cost of two back-to-back reads ({overhead}). The final book is checked against \
             the reference (and the known ESH4 book). Hot over reference: p50 {}, p99 {}.",
            ratio("p50"),
            ratio("p99")
        ),
        head: ["", "p50", "p99", "p99.9", "max", "records"].map(String::from).to_vec(),
        rows,
        figures_from: 1,
    })
}

/// The shm one-way path step by step ([`crate::probe`]): each variant's p50, p99 and p99.9, and its ratio to the
/// cache line at p50, p99 and p99.9 (medians over rounds of each round's ratio).
pub fn probe(f: &BTreeMap<String, f64>) -> Option<Table> {
    const PCTS: [&str; 3] = ["p50", "p99", "p999"];
    let rows: Vec<Vec<String>> =
        crate::probe::VARIANTS
            .iter()
            .filter(|(v, _)| f.contains_key(&format!("{}.p50_ns", crate::probe::key(v))))
            .map(|(v, what)| {
                let k = crate::probe::key(v);
                let mut row = vec![(*v).to_owned(), (*what).to_owned()];
                row.extend(PCTS.iter().map(|p| f.get(&format!("{k}.{p}_ns")).map_or("-".into(), |&x| fmt_ns(x))));
                row.extend(PCTS.iter().map(|p| {
                    f.get(&format!("ratio.{k}_vs_baseline.cacheline.{p}")).map_or("-".into(), |&r| fmt_ratio(r))
                }));
                row
            })
            .collect();
    let mut head = vec!["probe".to_owned(), "one message".to_owned()];
    head.extend(PCTS.iter().map(|p| percentile_label(p)));
    head.extend(PCTS.iter().map(|p| format!("{} / line", percentile_label(p))));
    (!rows.is_empty()).then(|| Table {
        title: "The shm one-way path, step by step".into(),
        note: "Each probe is a ping-pong between the same two cores, one-way = round trip / 2, run in every round \
               right after the cache line; ratios are medians over rounds of the round's ratio to the cache line. \
               Read down the stamp rows: a stamp store into a ring costs about what the cache line costs over a few \
               slots (8 here; 64 varied from 1.1x to 1.4x between runs) and about 1.5x once they rotate through 256 \
               or more; pre-loading or \
               pre-owning the next slot does not change that, and the record's other words, the CQ entry and the \
               reader's occasional CQ load add little on top."
            .into(),
        head,
        rows,
        figures_from: 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc(1_796_010_281), "2026-11-30 03:44 UTC");
    }

    #[test]
    fn a_table_renders_in_both_forms() {
        let t = Table {
            title: "T".into(),
            note: "a < b".into(),
            head: vec!["".into(), "p50".into()],
            rows: vec![vec!["x|y".into(), "1 ns".into()]],
            figures_from: 1,
        };
        assert_eq!(t.markdown(), "## T\n\na < b\n\n|  | p50 |\n|---|---:|\n| x\\|y | 1 ns |\n\n");
        let h = t.html();
        assert!(
            h.contains("<p class=note>a &lt; b</p>") && h.contains("<th scope=row>x|y</th><td class=n>1 ns</td>"),
            "{h}"
        );
    }

    #[test]
    fn the_probe_table_has_a_row_per_measured_variant_in_order_with_its_ratios() {
        let mut f = BTreeMap::new();
        for (k, v) in [
            ("probe.shm.stamp.p50_ns", 75.0),
            ("probe.shm.stamp.p99_ns", 120.0),
            ("ratio.probe.shm.stamp_vs_baseline.cacheline.p50", 1.5),
            ("probe.shm.line.p50_ns", 50.0),
            ("ratio.probe.shm.line_vs_baseline.cacheline.p50", 1.0),
            ("ratio.probe.shm.line_vs_baseline.cacheline.p999", 1.25),
        ] {
            f.insert(k.to_owned(), v);
        }
        let t = probe(&f).expect("two variants measured");
        assert_eq!(t.head[2..], ["p50", "p99", "p99.9", "p50 / line", "p99 / line", "p99.9 / line"]);
        let cells = |r: &Vec<String>| r.iter().skip(2).cloned().collect::<Vec<_>>();
        assert_eq!((t.rows[0][0].as_str(), t.rows[1][0].as_str()), ("line", "stamp"), "VARIANTS order");
        assert_eq!(cells(&t.rows[0]), ["50 ns", "-", "-", "1.00x", "-", "1.25x"]);
        assert_eq!(cells(&t.rows[1]), ["75 ns", "120 ns", "-", "1.50x", "-", "-"]);
        assert!(probe(&BTreeMap::new()).is_none(), "no probe measured: no table");
    }
}
