//! End to end (shared memory, or verbs with MDFAN_TEST_FABRIC=verbs): the publisher replays the bundled ESH4 capture to two `mdfan-subscribe`
//! processes; each must receive every record in order with no gap and end with the reference book.

#[path = "support/mod.rs"]
mod common;
#[path = "../../feed/tests/support/dbn_file.rs"]
mod dbn_file;
#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;

use std::path::Path;
use std::process::Command;

use common::*;
use mdfan_fabric::CloseReason;
use mdfan_wire::record::format_price_e9;

fn expected_summary(cp: &esh4::Checkpoint) -> String {
    format!(
        "instrument={} symbol=ESH4 records={} gaps=0 last_seq={} orders={} levels_bid={} levels_ask={} bbo={}x{}/{}x{}",
        esh4::INSTRUMENT_ID,
        cp.after_record,
        cp.venue_seq,
        cp.orders,
        cp.levels_bid,
        cp.levels_ask,
        format_price_e9(cp.best_bid.0),
        cp.best_bid.1,
        format_price_e9(cp.best_ask.0),
        cp.best_ask.1
    )
}

fn expected_levels() -> Vec<String> {
    let mut v = Vec::new();
    for (side, levels) in [("bid", esh4::TOP_BIDS), ("ask", esh4::TOP_ASKS)] {
        for (i, (px, size, orders)) in levels.iter().enumerate() {
            v.push(format!(
                "instrument={} side={side} level={} price={} size={size} orders={orders}",
                esh4::INSTRUMENT_ID,
                i + 1,
                format_price_e9(*px)
            ));
        }
    }
    v
}

#[test]
fn two_subscriber_processes_rebuild_the_reference_book_exactly() {
    let publisher = start_publisher(&esh4::main_file(), 2, "pace = \"max\"");
    let a = spawn_subscriber(publisher.addr, "e2e-a", &["--checkpoint", "8725", "--checkpoint", "40000"]);
    let b = spawn_subscriber(publisher.addr, "e2e-b", &["--checkpoint", "8725", "--checkpoint", "40000"]);
    let outs = [wait_with_watchdog(a), wait_with_watchdog(b)];
    let report = publisher.handle.join().expect("publisher thread").expect("publisher run");

    assert_eq!(report.records, esh4::RECORDS);
    assert_eq!(report.end, CloseReason::EndOfStream);
    assert_eq!(report.sessions.len(), 2);
    // Both subscribers take every record: one hot-loop cycle per feed record.
    let count = |buckets: &[(u64, u64)]| buckets.iter().map(|&(_, n)| n).sum::<u64>();
    assert_eq!(count(&report.cycle_buckets_ns), esh4::RECORDS);
    // one record in DECODE_TO_POST_SAMPLE (64) is timed: positions 0, 64, ..
    assert_eq!(count(&report.decode_to_post_buckets_ns), esh4::RECORDS.div_ceil(64));
    for s in &report.sessions {
        assert_eq!(s.sent, esh4::RECORDS + 1 + s.heartbeats, "{}: every record, end of stream, heartbeats", s.name);
        assert_eq!(s.last_seq, s.sent);
        assert_eq!((s.skipped, s.snapshots, s.catchup), (0, 0, 0));
        assert_eq!(s.end, Some(CloseReason::EndOfStream));
    }

    let final_cp = &esh4::CHECKPOINTS[4];
    for out in &outs {
        let lines = stdout_lines(out);
        let text = lines.join("\n");
        assert_eq!(out.status.code(), Some(0), "subscriber failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
        // every record, in order, nothing missing: seq ran from 1 without a jump to the end of stream, and
        // besides heartbeats (sent while waiting for the second subscriber) it carried every feed record
        let stream = lines.iter().find(|l| l.starts_with("stream ")).expect("stream line");
        let f = fields(stream);
        let (records, heartbeats) = (f["records"].parse::<u64>().unwrap(), f["heartbeats"].parse::<u64>().unwrap());
        assert_eq!(records - heartbeats, esh4::RECORDS + 1, "{stream}");
        assert_eq!(f["next_seq"], (records + 1).to_string(), "{stream}");
        assert_eq!(f["book_records"], esh4::RECORDS.to_string(), "{stream}");
        for (k, v) in [("gaps", "0"), ("missed", "0"), ("corrupt", "0"), ("book_errors", "0"), ("end", "end_of_stream")]
        {
            assert_eq!(f[k], v, "{k} in {stream}");
        }
        assert!(!text.contains("\ngap "), "no gap events:\n{text}");
        // the final book
        assert!(lines.contains(&expected_summary(final_cp)), "final summary missing:\n{text}");
        let levels: Vec<String> = lines.iter().filter(|l| l.contains(" side=")).cloned().collect();
        assert_eq!(levels, expected_levels());
        // the checkpoints: end of snapshot and record 40,000
        for cp in [&esh4::CHECKPOINTS[0], &esh4::CHECKPOINTS[2]] {
            let want = format!("checkpoint after={} {}", cp.after_record, expected_summary(cp));
            assert!(lines.contains(&want), "missing `{want}`:\n{text}");
        }
        let latency = lines.iter().find(|l| l.starts_with("latency ")).expect("latency line");
        assert!(latency.starts_with(&format!("latency clock=tsc count={records} p50_ns=")), "{latency}");
        // a file replay's ts_recv is the capture's time: no wire-to-poll
        assert!(!lines.iter().any(|l| l.starts_with("wire_to_poll")), "{lines:?}");
    }
}

#[test]
fn a_filtered_subscriber_gets_only_its_instrument_with_contiguous_seqs() {
    // The snapshot file plus one record of a second instrument (4242) after its first: one subscriber for ESH4,
    // one for 4242, which sees its one record and the end of stream as seqs 1 and 2, and no gap.
    let feed = with_quiet_instrument(&esh4::snapshot_file(), 4242, "snapshot");
    let publisher = start_publisher(&feed, 2, "");
    let a = spawn_subscriber(publisher.addr, "es", &["--instrument", "17077"]);
    let b = spawn_subscriber(publisher.addr, "other", &["--instrument", "4242"]);
    let (a, b) = (wait_with_watchdog(a), wait_with_watchdog(b));
    let report = publisher.handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    let a = stdout_lines(&a);
    let b = stdout_lines(&b);
    assert!(a.iter().any(|l| l.starts_with("instrument=17077 symbol=ESH4 records=8725 gaps=0 last_seq=691 orders=8725 levels_bid=892 levels_ask=559 bbo=4799.00x16/4799.50x23")), "{a:?}");
    let stream = fields(b.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["book_records"], stream["gaps"], stream["end"]), ("1", "0", "end_of_stream"), "{b:?}");
    assert!(b.iter().any(|l| l.starts_with("instrument=4242 records=1 gaps=0 ")), "{b:?}");
    let other = report.session("other").unwrap();
    assert_eq!((other.sent - other.heartbeats, other.filtered), (2, esh4::SNAPSHOT_RECORDS));
}

/// `--symbol ESH4` alone gets only ESH4 (the DBN file maps ESH4 to 17077 in its metadata); with `--instrument 4242`
/// both. Summaries print the symbol beside the id when the publisher knows it (4242 has no mapping).
#[test]
fn a_symbol_subscribes_to_its_instrument_and_the_summary_names_it() {
    let feed = with_quiet_instrument(&esh4::snapshot_file(), 4242, "symbol");
    let publisher = start_publisher(&feed, 2, "");
    let es = spawn_subscriber(publisher.addr, "es", &["--symbol", "ESH4", "--bbo"]);
    let both = spawn_subscriber(publisher.addr, "both", &["--symbol", "ESH4", "--instrument", "4242"]);
    let (es, both) = (wait_with_watchdog(es), wait_with_watchdog(both));
    let report = publisher.handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    let (es, both) = (stdout_lines(&es), stdout_lines(&both));
    let summaries = |lines: &[String]| -> Vec<String> {
        lines.iter().filter(|l| l.starts_with("instrument=") && !l.contains(" side=")).cloned().collect()
    };
    let es_summary = "instrument=17077 symbol=ESH4 records=8725 gaps=0 last_seq=691 orders=8725 levels_bid=892 levels_ask=559 bbo=4799.00x16/4799.50x23";
    assert_eq!(summaries(&es), [es_summary], "{es:?}");
    let first_bbo = es.iter().find(|l| l.starts_with("bbo ")).unwrap();
    assert!(first_bbo.starts_with("bbo instrument=17077 symbol=ESH4 seq="), "{first_bbo}");
    assert!(first_bbo.ends_with(" 4799.00x16/4799.50x23"), "{first_bbo}");
    let stream = fields(es.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["book_records"], stream["gaps"], stream["end"]), ("8725", "0", "end_of_stream"), "{es:?}");
    let both_summaries = summaries(&both);
    assert_eq!(both_summaries.len(), 2, "{both:?}");
    assert_eq!(
        both_summaries[0],
        "instrument=4242 records=1 gaps=0 last_seq=682 orders=1 levels_bid=1 levels_ask=0 bbo=4799.00x2/-"
    );
    assert_eq!(both_summaries[1], es_summary);
    assert_eq!((report.session("es").unwrap().filtered, report.session("both").unwrap().filtered), (1, 0));
}

/// An unknown symbol is refused by name, saying what the publisher knows: exit 1, one line on stderr; the
/// publisher goes on and serves the next subscriber.
#[test]
fn an_unknown_symbol_is_refused_by_name() {
    let publisher = start_publisher(&esh4::snapshot_file(), 1, "");
    let refused =
        wait_with_watchdog(spawn_subscriber(publisher.addr, "typo", &["--symbol", "ESH4", "--symbol", "XYZ"]));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "mdfan-subscribe: error: publisher {} refused: field symbols: XYZ not known to this publisher (it knows 1 symbol: ESH4)",
            publisher.addr
        )
    );
    assert!(stdout_lines(&refused).is_empty());
    the_next_subscriber_is_served_whole(publisher, &["--symbol", "ESH4"]);
}

/// After refusing subscriber `typo`, the publisher still serves the next one, `good` (`args`), the whole
/// snapshot file and its end of stream; `typo` never had a session.
fn the_next_subscriber_is_served_whole(publisher: RunningPublisher, args: &[&str]) {
    let good = wait_with_watchdog(spawn_subscriber(publisher.addr, "good", args));
    assert_eq!(good.status.code(), Some(0));
    let report = publisher.handle.join().unwrap().unwrap();
    assert!(report.session("typo").is_none());
    let good = report.session("good").unwrap();
    assert_eq!(good.sent - good.heartbeats, esh4::SNAPSHOT_RECORDS + 1);
}

/// `[feed] symbols` (a symbol file, as for MDP 3.0) names an instrument the DBN file has no mapping for and gives
/// its display factor and tick size: `--symbol` finds it, and every price prints times the display factor, with
/// the displayed tick's decimals (0.0001 x 0.0001 = 0.00000001: 8 decimals).
#[test]
fn a_symbol_file_names_instruments_and_sets_their_price_display() {
    use dbn_file::{mbo, write_dbn, LAST};
    let px = |ten_thousandths: i64| ten_thousandths * 100_000;
    let feed = write_dbn(
        "e2e-symbol-file",
        &[mbo(42, 1, b'A', b'B', 1, px(1234), 500, LAST), mbo(42, 2, b'A', b'A', 2, px(1236), 400, LAST)],
    );
    let symbols = std::env::temp_dir().join(format!("mdfan-e2e-symbols-{}.csv", std::process::id()));
    std::fs::write(&symbols, "# test\nsecurity_id,symbol,display_factor,tick_size\n42,TEST42,0.0001,0.0001\n").unwrap();
    let publisher = start_publisher(&feed, 1, &format!("symbols = \"{}\"", symbols.display()));
    let out = wait_with_watchdog(spawn_subscriber(publisher.addr, "file", &["--symbol", "TEST42", "--bbo"]));
    publisher.handle.join().unwrap().unwrap();
    let _ = (std::fs::remove_file(&feed), std::fs::remove_file(&symbols));
    let lines = stdout_lines(&out);
    assert_eq!(out.status.code(), Some(0), "{lines:?}");
    let bbo: Vec<&str> = lines.iter().filter(|l| l.starts_with("bbo ")).map(String::as_str).collect();
    assert_eq!(bbo.len(), 2, "{lines:?}");
    assert!(bbo[1].starts_with("bbo instrument=42 symbol=TEST42 seq="), "{lines:?}");
    assert!(bbo[1].ends_with(" venue_seq=2 0.00001234x500/0.00001236x400"), "{lines:?}");
    assert!(
        lines.contains(&"instrument=42 symbol=TEST42 records=2 gaps=0 last_seq=2 orders=2 levels_bid=1 levels_ask=1 bbo=0.00001234x500/0.00001236x400".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"instrument=42 side=ask level=1 price=0.00001236 size=400 orders=1".to_owned()),
        "{lines:?}"
    );
}

#[test]
fn an_instrument_the_feed_does_not_have_is_refused_with_the_list() {
    let publisher = start_publisher(&esh4::snapshot_file(), 1, "");
    let refused = spawn_subscriber(publisher.addr, "typo", &["--instrument", "17077", "--instrument", "999"]);
    let refused = wait_with_watchdog(refused);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("field instruments: 999 not in this feed, no record of it (it has 17077)"), "{err}");
    the_next_subscriber_is_served_whole(publisher, &["--instrument", "17077"]);
}

/// `examples/bbo.rs`, the loop the crate docs recommend, run against a publisher: it prints the reference BBO.
#[test]
fn the_bbo_example_prints_the_reference_bbo() {
    if std::env::var_os("MDFAN_TEST_BIN_DIR").is_some() {
        eprintln!("skipped: the example is not among the binaries copied into the VM");
        return;
    }
    // Built by this test (a no-op when `cargo test` already built it), so it is never older than the library;
    // in the profile this test was built with.
    cargo_build(&["-p", "mdfan-subscriber", "--example", "bbo"]);
    let example = bin_dir().join("examples").join("bbo");
    let publisher = start_publisher(&esh4::snapshot_file(), 1, "");
    let out = Command::new(&example).arg(publisher.addr.to_string()).output().expect("the example runs");
    let report = publisher.handle.join().unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout.trim(),
        "bbo instrument=17077 4799.00x16/4799.50x23",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report.session("bbo-example").unwrap().end, Some(CloseReason::EndOfStream));
}

/// `examples/strategy.rs`, the skeleton the crate docs point strategies at, beside `mdfan-subscribe --bbo` on the
/// same replay: asked for a core this process may not use, it says so and runs unpinned; it acts on exactly the
/// BBO changes the CLI prints, ends with the reference BBO, and counts every record it received in its latency.
#[test]
fn the_strategy_example_acts_on_every_bbo_change_and_reports_latency() {
    if std::env::var_os("MDFAN_TEST_BIN_DIR").is_some() {
        eprintln!("skipped: the example is not among the binaries copied into the VM");
        return;
    }
    cargo_build(&["-p", "mdfan-subscriber", "--example", "strategy"]);
    let example = bin_dir().join("examples").join("strategy");
    let publisher = start_publisher(&esh4::main_file(), 2, "");
    let cli = Watched::new(spawn_subscriber(publisher.addr, "cli", &["--bbo"])); // read as it prints: thousands of lines
    let beyond = mdfan_tuning::allowed_cores().iter().max().copied().unwrap_or(0) + 1;
    let out = Command::new(&example).args([publisher.addr.to_string(), beyond.to_string()]).output().unwrap();
    let (code, cli, _) = cli.finish();
    assert_eq!(code, Some(0), "{cli:?}");
    let report = publisher.handle.join().unwrap().unwrap();
    let (lines, err) = (stdout_lines(&out), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{lines:?}\n{err}");
    assert!(err.starts_with("strategy: running unpinned, yielding when idle: "), "{err}");
    assert!(err.contains(&format!("{beyond}")), "{err}");
    let bbo_changes = cli.iter().filter(|l| l.starts_with("bbo ")).count();
    assert!(bbo_changes > 1_000, "{bbo_changes}");
    assert_eq!(lines.len(), 3, "{lines:?}");
    let summary = fields(&lines[0]);
    assert_eq!(
        (summary["end"], summary["gaps"], summary["snapshots"], summary["reconnects"]),
        ("end_of_stream", "0", "0", "0"),
        "{lines:?}"
    );
    assert_eq!(summary["decisions"], bbo_changes.to_string(), "{lines:?}");
    assert_eq!(lines[1], "bbo instrument=17077 4810.00x22/4810.25x28");
    let records: u64 = summary["records"].parse().unwrap();
    assert!(records > esh4::RECORDS, "every record, the end of stream and heartbeats: {records}");
    assert!(lines[2].starts_with(&format!("latency count={records} p50_ns=")), "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("wire_to_poll")), "a replay has no wire-to-poll: {lines:?}");
    assert_eq!(report.session("strategy-example").unwrap().end, Some(CloseReason::EndOfStream));
}

/// Prices print exactly, whatever their decimals: adds at 0.1234 (bid x500), 0.1236 (ask x400) and 0.1233 (bid
/// x100) once printed `bbo=0.12x500/0.12x400` (truncated to two decimals, a book that looked locked).
#[test]
fn prices_print_exactly_at_every_decimal_they_carry() {
    use dbn_file::{mbo, write_dbn, LAST};
    let px = |ten_thousandths: i64| ten_thousandths * 100_000;
    let feed = write_dbn(
        "e2e-prices",
        &[
            mbo(42, 1, b'A', b'B', 1, px(1234), 500, LAST),
            mbo(42, 2, b'A', b'A', 2, px(1236), 400, LAST),
            mbo(42, 3, b'A', b'B', 3, px(1233), 100, LAST),
        ],
    );
    let publisher = start_publisher(&feed, 1, "");
    let out = wait_with_watchdog(spawn_subscriber(publisher.addr, "prices", &["--bbo"]));
    publisher.handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    let lines = stdout_lines(&out);
    assert_eq!(out.status.code(), Some(0), "{lines:?}");
    let bbo: Vec<&str> =
        lines.iter().filter(|l| l.starts_with("bbo ")).map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(bbo, ["0.1234x500/-", "0.1234x500/0.1236x400"], "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with(
            "instrument=42 records=3 gaps=0 last_seq=3 orders=3 levels_bid=2 levels_ask=1 bbo=0.1234x500/0.1236x400"
        )),
        "{lines:?}"
    );
    let levels: Vec<&str> = lines.iter().filter(|l| l.starts_with("instrument=42 side=")).map(String::as_str).collect();
    assert_eq!(
        levels,
        [
            "instrument=42 side=bid level=1 price=0.1234 size=500 orders=1",
            "instrument=42 side=bid level=2 price=0.1233 size=100 orders=1",
            "instrument=42 side=ask level=1 price=0.1236 size=400 orders=1",
        ],
        "{lines:?}"
    );
}

/// A Nasdaq ITCH 5.0 excerpt of the bundled data (`$MDFAN_DATA_DIR/<name>` in the Soft-RoCE VM, where
/// ops/softroce/make-test-job copies them).
fn itch_excerpt(name: &str) -> std::path::PathBuf {
    match std::env::var_os("MDFAN_DATA_DIR") {
        Some(dir) => Path::new(&dir).join(name),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nasdaq-itch50-20191230-binaryfile-excerpts").join(name)
        }
    }
}

/// A publisher (in this process) replaying the ITCH 5.0 BinaryFILE `feed` of 2019-12-30, waiting for one
/// subscriber: its endpoint and the thread that runs it.
fn itch_publisher(
    feed: &Path,
) -> (std::net::SocketAddr, std::thread::JoinHandle<Result<mdfan_publisher::RunReport, mdfan_publisher::PublisherError>>)
{
    let text = config_text("127.0.0.1:0", feed, 1, "", "session_date = \"2019-12-30\"")
        .replace("format = \"dbn\"", "format = \"itch50\"");
    let cfg = mdfan_publisher::config::Config::parse(&text, Path::new("itch.toml")).unwrap();
    let publisher = mdfan_publisher::Publisher::bind(cfg).unwrap();
    let addr = publisher.local_addr();
    (addr, std::thread::spawn(move || publisher.run(std::sync::Arc::new(false.into()))))
}

/// The whole capture through a journal of 16,384 records (the file has 68,792): the feed handler waits for the hot
/// loop and the conductor again and again, and every subscriber still ends with the reference book, a late
/// joiner (snapshot from the conductor's books, kept current from the journal) too. The late joiner's snapshot
/// position is held in the journal until it has caught up (by the conductor until the hot loop has the session,
/// then by the hot loop), so it gets exactly one snapshot (publisher/tests/agents.rs steps the same with 4,096
/// records; before the conductor's hold, a late joiner over emulated Soft-RoCE with 4,096 was sent snapshot
/// after snapshot).
#[test]
fn a_journal_much_smaller_than_the_feed_still_gives_every_subscriber_the_exact_book() {
    let publisher = start_publisher(&esh4::main_file(), 2, "pace = 500\n\n[journal]\nrecords = 16384\n");
    let mut a = Watched::new(spawn_subscriber(publisher.addr, "a", &[]));
    let mut b = Watched::new(spawn_subscriber(publisher.addr, "b", &[]));
    a.wait_for_line("subscribed ");
    b.wait_for_line("subscribed ");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let late = wait_with_watchdog(spawn_subscriber(publisher.addr, "late", &[]));
    let ((_, a, _), (_, b, _)) = (a.finish(), b.finish());
    let report = publisher.handle.join().unwrap().unwrap();
    assert_clean(&a, "a");
    assert_clean(&b, "b");
    let late = stdout_lines(&late);
    assert_exact(&late, "late");
    let stream = fields(late.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["gaps"], stream["book_errors"], stream["end"]), ("0", "0", "end_of_stream"), "{late:?}");
    assert_eq!(late.iter().filter(|l| l.starts_with("snapshot_begin ")).count(), 1, "{late:?}");
    assert!(late.iter().any(|l| l.starts_with("snapshot_begin seq=1 instruments=1 ")), "{late:?}");
    assert_eq!((report.records, report.end), (esh4::RECORDS, CloseReason::EndOfStream));
}

/// `publisher.feed_on_hot_thread`: the file feed is decoded on the hot loop's thread between records (no
/// `mdfan-feed` thread), through a journal of 4,096 records, so decoding and fan-out take turns some 17 times over
/// the capture: both subscribers get every record in order and the reference book, and the hot loop ran one
/// sending cycle per record.
#[test]
fn the_feed_decoded_on_the_hot_thread_gives_both_subscribers_every_record() {
    let publisher =
        start_publisher_with(&esh4::main_file(), 2, "feed_on_hot_thread = true\n", "\n[journal]\nrecords = 4096\n");
    let a = spawn_subscriber(publisher.addr, "hot-feed-a", &[]);
    let b = spawn_subscriber(publisher.addr, "hot-feed-b", &[]);
    let outs = [wait_with_watchdog(a), wait_with_watchdog(b)];
    let report = publisher.handle.join().unwrap().unwrap();
    assert_eq!((report.records, report.end), (esh4::RECORDS, CloseReason::EndOfStream));
    let count = |buckets: &[(u64, u64)]| buckets.iter().map(|&(_, n)| n).sum::<u64>();
    assert_eq!(count(&report.cycle_buckets_ns), esh4::RECORDS, "one sending cycle per record");
    for s in &report.sessions {
        assert_eq!(s.sent, esh4::RECORDS + 1 + s.heartbeats, "{}: every record, end of stream, heartbeats", s.name);
        assert_eq!((s.skipped, s.snapshots, s.catchup), (0, 0, 0), "{}", s.name);
    }
    for (out, who) in outs.iter().zip(["hot-feed-a", "hot-feed-b"]) {
        assert_eq!(out.status.code(), Some(0), "{who}");
        assert_clean(&stdout_lines(out), who);
    }
}

/// A feed cut in the middle of record 62: the subscriber gets the 61 records before it, then an end of stream
/// that says the feed failed (exit 3, never a normal end); the publisher's report names the record and byte.
#[test]
fn a_feed_that_breaks_mid_replay_ends_the_stream_with_feed_error() {
    use dbn_file::{encode, mbo, LAST};
    let adds: Vec<_> =
        (1..=100u32).map(|i| mbo(5, i, b'A', b'B', i as u64, 1_000_000_000 + i as i64, 1, LAST)).collect();
    let raw = encode(3, &adds);
    let start = 8 + u32::from_le_bytes(raw[4..8].try_into().unwrap()) as usize;
    let feed = std::env::temp_dir().join(format!("mdfan-e2e-cut-{}.dbn", std::process::id()));
    std::fs::write(&feed, &raw[..start + 61 * 56 + 30]).unwrap();
    let publisher = start_publisher(&feed, 1, "");
    let out = wait_with_watchdog(spawn_subscriber(publisher.addr, "cut", &[]));
    let report = publisher.handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    let lines = stdout_lines(&out);
    assert_eq!(out.status.code(), Some(3), "{lines:?}");
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["book_records"], stream["gaps"], stream["end"]), ("61", "0", "feed_error"), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("instrument=5 records=61 gaps=0 last_seq=61 orders=61 ")), "{lines:?}");
    assert_eq!((report.records, report.end), (61, CloseReason::FeedError));
    let err = report.feed_error.expect("the feed's error");
    let offset = start + 61 * 56;
    assert!(
        err.ends_with(&format!("record 62 at byte {offset}: truncated: record needs 56 bytes, the file ends before")),
        "{err}"
    );
    assert!(err.starts_with(&format!("feed {}", feed.display())), "{err}");
}

/// Nasdaq ITCH 5.0: the symbols of the file's Stock Directory messages reach `mdfan-subscribe`. The bundled
/// snippet starts at 09:30 and has no Stock Directory message, so one for QQQ (locate 6556, ITCH 5.0 section
/// 4.2.1, 39 bytes) is put in front of it; `--symbol QQQ` then gets only QQQ, whose summary names it with its
/// prices at ITCH's 4 decimals: the excerpt README's BBO 213.51 x 100 / 213.52 x 500.
#[test]
fn an_itch_symbol_from_the_stock_directory_selects_its_locate_and_prints_4_decimals() {
    let mut r = vec![b'R'];
    r.extend(6556u16.to_be_bytes());
    r.extend([0, 0]); // tracking number
    r.extend(&11_000_000_000_000u64.to_be_bytes()[2..]); // timestamp, 6 bytes
    r.extend(b"QQQ     G N"); // symbol, market category, financial status
    r.truncate(21);
    r.extend(100u32.to_be_bytes()); // round lot size
    r.extend(b"NQE PN 1Y"); // round lots only .. ETP flag
    r.extend(0u32.to_be_bytes()); // ETP leverage factor
    r.push(b'N'); // inverse indicator
    assert_eq!(r.len(), 39);
    let feed = std::env::temp_dir().join(format!("mdfan-itch-cli-{}.itch", std::process::id()));
    let mut bytes = 39u16.to_be_bytes().to_vec();
    bytes.extend(r);
    bytes.extend(std::fs::read(itch_excerpt("12302019_SNIPPET.NASDAQ_ITCH50")).unwrap());
    std::fs::write(&feed, bytes).unwrap();
    let (addr, handle) = itch_publisher(&feed);
    let qqq = wait_with_watchdog(spawn_subscriber(addr, "qqq", &["--symbol", "QQQ", "--levels", "1"]));
    let report = handle.join().unwrap().unwrap();
    let _ = std::fs::remove_file(&feed);
    let lines = stdout_lines(&qqq);
    let summaries: Vec<&String> =
        lines.iter().filter(|l| l.starts_with("instrument=") && !l.contains(" side=")).collect();
    assert_eq!(
        summaries,
        // 13 A, 2 D (the README); the last is the snippet's message 451, 452 behind the R; 11 orders on 4 bid
        // and 5 ask prices (checked by hand with a separate walk of the file)
        ["instrument=6556 symbol=QQQ records=15 gaps=0 last_seq=452 orders=11 levels_bid=4 levels_ask=5 bbo=213.5100x100/213.5200x500"],
        "{lines:?}"
    );
    assert!(
        lines.contains(&"instrument=6556 side=bid level=1 price=213.5100 size=100 orders=1".to_owned()),
        "{lines:?}"
    );
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!((stream["book_records"], stream["gaps"], stream["end"]), ("15", "0", "end_of_stream"), "{lines:?}");
    assert_eq!(report.session("qqq").unwrap().filtered, 812 - 15);
}

/// Nasdaq ITCH 5.0 stale marks through `mdfan-subscribe`: the 09:30 snippet's first reference to an order added
/// before it marks that locate's order book stale (216 locates; the first is message 1, a reference to order
/// 4851694 on locate 3041). Each is printed as an order reference, not an MDP 3.0 `RptSeq` jump; it makes no
/// price-level book, counts as an order-book record (`--checkpoint`), and the locate's order-book summary says
/// `stale=true` (85 of the 216 have a book).
#[test]
fn itch_stale_marks_are_order_book_marks_not_price_level_ones() {
    let feed = itch_excerpt("12302019_SNIPPET.NASDAQ_ITCH50");
    let (addr, handle) = itch_publisher(&feed);
    let all = wait_with_watchdog(spawn_subscriber(addr, "itch-stale", &["--levels", "0", "--checkpoint", "5"]));
    handle.join().unwrap().unwrap();
    let lines = stdout_lines(&all);
    assert_eq!(all.status.code(), Some(0), "{lines:?}");
    let marks: Vec<&String> = lines.iter().filter(|l| l.starts_with("instrument_stale ")).collect();
    assert_eq!(marks.len(), 216, "{marks:?}");
    // (seq is the stream's: 1 or 2, as a heartbeat came first or not)
    let first = fields(marks[0]);
    let first = ["instrument", "cause", "venue_seq", "order_ref"].map(|k| first.get(k).copied().unwrap_or("-"));
    assert_eq!(first, ["3041", "order_ref", "1", "4851694"], "{}", marks[0]);
    assert_eq!(marks[0].split(' ').count(), 6, "{}", marks[0]);
    assert!(marks.iter().all(|l| l.contains(" cause=order_ref ")), "{marks:?}");
    assert!(!lines.iter().any(|l| l.contains("book=mbp") || l.contains("rpt_seq")), "{lines:?}");
    assert!(lines.contains(&"stale records=216 instruments_stale_at_end=216".to_owned()), "{lines:?}");
    let marked: std::collections::BTreeSet<&str> = marks.iter().map(|l| fields(l)["instrument"]).collect();
    assert_eq!(marked.len(), 216);
    let summaries: Vec<&String> =
        lines.iter().filter(|l| l.starts_with("instrument=") && l.contains(" orders=")).collect();
    assert_eq!(summaries.len(), 186, "{summaries:?}");
    for l in &summaries {
        assert_eq!(l.ends_with(" stale=true"), marked.contains(fields(l)["instrument"]), "{l}");
    }
    assert_eq!(summaries.iter().filter(|l| l.ends_with(" stale=true")).count(), 85);
    // Book record 5 is the fourth mark (message 7; 3 and 4 give no record, 6 adds an order on 8381): it counts
    // against the order books, so the checkpoint after it prints them.
    let checkpoint: Vec<&String> = lines.iter().filter(|l| l.starts_with("checkpoint after=5 ")).collect();
    assert_eq!(
        checkpoint,
        ["checkpoint after=5 instrument=8381 records=1 gaps=0 last_seq=6 orders=1 levels_bid=1 levels_ask=0 bbo=21.33x100/-"],
        "{lines:?}"
    );
    assert!(
        lines.contains(
            &"instrument=52 records=3 gaps=0 last_seq=989 orders=3 levels_bid=2 levels_ask=1 bbo=41.61x100/44.69x100 stale=true"
                .to_owned()
        ),
        "{lines:?}"
    );
}

/// Nasdaq ITCH 5.0 trading status through `mdfan-subscribe`: the start-of-day file's Stock Directory names A
/// (locate 1), and its `H` (trading, message 82) and `Y` (no price test, message 83) for A end as A's status line.
#[test]
fn an_itch_subscriber_prints_the_trading_status_of_its_symbol() {
    let feed = itch_excerpt("12302019_first1000.itch");
    let (addr, handle) = itch_publisher(&feed);
    let a = wait_with_watchdog(spawn_subscriber(addr, "a", &["--symbol", "A"]));
    handle.join().unwrap().unwrap();
    let lines = stdout_lines(&a);
    let status: Vec<&String> = lines.iter().filter(|l| l.starts_with("status ")).collect();
    assert_eq!(
        status,
        ["status instrument=1 symbol=A trading=T reason=- reg_sho=0 operational_halt=- halted=false records=2 last_seq=83"],
        "{lines:?}"
    );
    let stream = fields(lines.iter().find(|l| l.starts_with("stream ")).unwrap());
    assert_eq!(
        (stream["book_records"], stream["book_errors"], stream["end"]),
        ("2", "0", "end_of_stream"),
        "{lines:?}"
    );
}
