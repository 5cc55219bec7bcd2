//! `mdfan-capture record` (the binary) keeps a publisher's ESH4 replay on disk; a second publisher replays the
//! capture (`format = "capture"`) to two subscribers, whose record streams equal the one a direct subscriber of
//! the first received (the publisher's own fields, `seq` and `ts_send_ticks`, aside) and whose books equal the
//! data README's final ESH4 book. Then a capture killed with SIGKILL mid-stream: its next start says what it
//! kept and cut, and the two runs' capture replays to the same final book. And a recorder on a hot-hot pair,
//! and at a publisher with an access list.

#[path = "../../feed/tests/support/esh4.rs"]
mod esh4;
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{BookUpdate, Books, Kind, Side};
use support::{dir, subscribe, venue, WATCHDOG};

/// A publisher of `feed` (a `[feed]` section's body) waiting for `wait_for` subscribers; its endpoint and thread.
fn publisher(feed: &str, wait_for: usize) -> (String, JoinHandle<mdfan_publisher::RunReport>) {
    let (endpoint, _, run) = stoppable_publisher(feed, wait_for);
    (endpoint, run)
}

/// [`publisher`], with the flag that stops it (a shutdown, as for a restart: its sessions end
/// `publisher_shutdown`).
fn stoppable_publisher(
    feed: &str,
    wait_for: usize,
) -> (String, Arc<AtomicBool>, JoinHandle<mdfan_publisher::RunReport>) {
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = {wait_for}\ncounters_dir = \"\"\n\n[feed]\n{feed}\n\n[fabric]\nprovider = \"shm\"\n"
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("capture-test.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    (endpoint, stop, std::thread::spawn(move || p.run(flag).expect("runs")))
}

fn assert_final_book(who: &str, records: &[BookUpdate]) {
    let mut books = Books::new();
    for r in records {
        books.apply(r).unwrap_or_else(|e| panic!("{who}: {e}"));
    }
    let b = books.get(esh4::INSTRUMENT_ID).unwrap_or_else(|| panic!("{who}: no ESH4 book"));
    assert_eq!(b.order_count(), 11_217, "{who}");
    let top = |side| b.top(side, 10).iter().map(|l| (l.price_e9, l.size, l.orders)).collect::<Vec<_>>();
    assert_eq!(top(Side::Bid), esh4::TOP_BIDS, "{who}: bids");
    assert_eq!(top(Side::Ask), esh4::TOP_ASKS, "{who}: asks");
}

/// A Parquet export's rows as records (`ts_send_ticks`, which it leaves out, 0) with their `symbol`; the file's
/// metadata checked.
fn parquet_rows(path: &Path) -> Vec<(BookUpdate, Option<String>)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Decimal128Type, TimestampNanosecondType, UInt32Type, UInt64Type, UInt8Type};
    use arrow_array::Array;
    let file = std::fs::File::open(path).unwrap();
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let kv: std::collections::HashMap<String, Option<String>> = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .map(|k| (k.key.clone(), k.value.clone()))
        .collect();
    assert_eq!(kv["mdfan.gaps"].as_deref(), Some("[]"));
    assert!(kv["mdfan.restarts"].is_some() && kv["mdfan.session_records"].is_some(), "{kv:?}");
    assert_eq!(kv["mdfan.stop"].as_deref(), Some("end_of_stream"));
    assert_eq!(kv["mdfan.prices_out_of_range"].as_deref(), Some("0"));
    assert_eq!(kv["mdfan.book"].as_deref(), Some("mbo"));
    assert!(kv["mdfan.symbology"].as_deref().unwrap().contains("\"ESH4\""), "{kv:?}");
    let (mut out, mut last_index) = (Vec::new(), None);
    for batch in builder.build().unwrap() {
        let b = batch.unwrap();
        let col = |name: &str| b.column_by_name(name).unwrap_or_else(|| panic!("no column {name}")).clone();
        let (idx, seq, venue_pos, order_id) = (col("capture_index"), col("seq"), col("venue_pos"), col("order_id"));
        let (idx, seq) = (idx.as_primitive::<UInt64Type>(), seq.as_primitive::<UInt64Type>());
        let (venue_pos, order_id) = (venue_pos.as_primitive::<UInt64Type>(), order_id.as_primitive::<UInt64Type>());
        let (ts_event, ts_recv) = (col("ts_event"), col("ts_recv"));
        let ts_event = ts_event.as_primitive::<TimestampNanosecondType>();
        let ts_recv = ts_recv.as_primitive::<TimestampNanosecondType>();
        let (instrument, size) = (col("instrument_id"), col("size"));
        let (instrument, size) = (instrument.as_primitive::<UInt32Type>(), size.as_primitive::<UInt32Type>());
        let (level, flags, price) = (col("level"), col("flags"), col("price"));
        let (level, flags) = (level.as_primitive::<UInt8Type>(), flags.as_primitive::<UInt8Type>());
        let price = price.as_primitive::<Decimal128Type>();
        let (symbol, kind, side) = (col("symbol"), col("kind"), col("side"));
        let (symbol, kind, side) = (symbol.as_string::<i32>(), kind.as_string::<i32>(), side.as_string::<i32>());
        for i in 0..b.num_rows() {
            // The record's index in the capture: rising, past the session's own records (not rows).
            assert!(idx.value(i) >= out.len() as u64 && last_index.is_none_or(|l| idx.value(i) > l), "capture_index");
            last_index = Some(idx.value(i));
            let kind_byte = match kind.value(i) {
                "add" => Kind::Add,
                "modify" => Kind::Modify,
                "cancel" => Kind::Cancel,
                "trade" => Kind::Trade,
                "fill" => Kind::Fill,
                "clear" => Kind::Clear,
                "snapshot_begin" => Kind::SnapshotBegin,
                "snapshot_end" => Kind::SnapshotEnd,
                "end_of_stream" => Kind::EndOfStream,
                "no_action" => Kind::NoAction,
                other => panic!("row {i}: kind {other} in an MBO capture"),
            } as u8;
            let r = BookUpdate {
                seq: seq.value(i),
                ts_event_ns: ts_event.value(i) as u64,
                ts_recv_ns: ts_recv.value(i) as u64,
                venue_pos: venue_pos.value(i),
                price_e9: if price.is_null(i) { i64::MAX } else { i64::try_from(price.value(i)).unwrap() },
                order_id: order_id.value(i),
                instrument_id: instrument.value(i),
                size: size.value(i),
                ts_send_ticks: 0,
                kind: kind_byte,
                side: side.value(i).as_bytes()[0],
                flags: flags.value(i),
                level: level.value(i),
            };
            out.push((r, symbol.is_valid(i).then(|| symbol.value(i).to_owned())));
        }
    }
    out
}

fn capture(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mdfan-capture"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

#[test]
fn a_capture_of_the_esh4_replay_replays_to_the_same_records_and_book() {
    let d = dir("esh4");
    let (endpoint, first) = publisher(&format!("format = \"dbn\"\npath = {:?}", esh4::main_file()), 2);
    let recorder = capture(&[
        "record",
        "--connect",
        &endpoint,
        "--dir",
        d.to_str().unwrap(),
        "--name",
        "esh4",
        "--rotate-mb",
        "1",
        "--fsync",
        "block",
    ])
    .spawn()
    .unwrap();
    // The recorder attaches first (the publisher waits for two), then the direct subscriber.
    let deadline = Instant::now() + WATCHDOG;
    while !d.join("esh4-000001.mdcap").exists() {
        assert!(Instant::now() < deadline, "the recorder did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let direct = subscribe(&endpoint, "direct");
    let direct = direct.join().unwrap();
    first.join().unwrap();
    let out = recorder.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("records={} ", esh4::RECORDS + 1)) && text.contains(" end=end_of_stream"), "{text}");
    assert_eq!(direct.len() as u64, esh4::RECORDS);
    assert_final_book("direct", &direct);

    // What the capture holds, by its own report.
    let out = capture(&["report", d.to_str().unwrap()]).output().unwrap();
    let rep = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{rep}");
    assert!(rep.contains(&format!("records={} gaps=0 missed=0", esh4::RECORDS + 1)), "{rep}");
    assert!(
        rep.contains(&format!("last_ts_recv_ns={}", esh4::LAST_TS_RECV_NS)) && rep.contains("stop=end_of_stream"),
        "{rep}"
    );
    assert!(rep.contains("capture kind=EndOfStream records=1 "), "{rep}");
    assert!(rep.lines().next().unwrap().starts_with("capture segments=5 "), "1 MiB segments: {rep}");
    assert!(
        rep.lines().next().unwrap().ends_with(
            " stop=end_of_stream fsync=block format=dbn venue=GLBX.MDP3 channel=esh4-glbx-mdp3-20231225.mbo.dbn.zst"
        ),
        "the policy it ran with and the feed it is of: {rep}"
    );

    // Exported to Parquet (a row per record, whose values give back the records and the book) and to DBN MBO
    // (the bundled file's own records back, but for the fields a record does not carry).
    let (pq, dbn_out) = (d.join("esh4.parquet"), d.join("esh4.dbn.zst"));
    let export = [
        "export",
        d.to_str().unwrap(),
        "--parquet",
        pq.to_str().unwrap(),
        "--dbn",
        dbn_out.to_str().unwrap(),
        // no --dataset: the capture's header names the feed's (the publisher's Accept: the DBN file's GLBX.MDP3)
    ];
    let out = capture(&export).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // Hourly row groups: the snapshot at midnight, then the hours with records.
    let groups = text.split("row_groups=").nth(1).and_then(|t| t.split(' ').next()).unwrap();
    assert!(
        text.starts_with(&format!("export parquet={} rows=68792 row_groups={groups} gaps=0 ", pq.display()))
            && text.lines().next().is_some_and(|l| l.ends_with(" prices_out_of_range=0")),
        "{text}"
    );
    assert!(
        text.contains(&format!("export dbn={} records=68792 left_out=1 gaps_not_in_dbn=0\n", dbn_out.display())),
        "{text}"
    );
    let rows = parquet_rows(&pq);
    assert_eq!(rows.len() as u64, esh4::RECORDS, "the end of stream is not a row (mdfan.session_records)");
    assert!(rows.iter().all(|(_, sym)| sym.as_deref() == Some("ESH4")), "every row names ESH4");
    let back: Vec<BookUpdate> = rows.iter().map(|(r, _)| venue(r)).collect();
    assert!(back == direct.iter().map(venue).collect::<Vec<_>>(), "the rows are the records, field for field");
    assert_final_book("parquet rows", &back);
    let hours: std::collections::BTreeSet<u64> = back
        .iter()
        .filter(|r| r.flags & mdfan_subscriber::flags::SNAPSHOT == 0)
        .map(|r| r.ts_recv_ns / 3_600_000_000_000)
        .collect();
    assert_eq!(
        groups.parse::<usize>().unwrap(),
        1 + hours.len(),
        "{text}: the snapshot's hour and each hour with records"
    );
    let original = mdfan_feed::dbn::load_mbo_file(&esh4::main_file()).unwrap();
    let mut exported = mdfan_feed::dbn::MboStream::open(&dbn_out).unwrap();
    assert_eq!(exported.dataset(), "GLBX.MDP3");
    assert_eq!(exported.symbology().get(esh4::INSTRUMENT_ID).map(|d| d.symbol.as_str()), Some("ESH4"));
    let mut n = 0;
    while let Some(m) = exported.next_msg().unwrap() {
        let o = &original.records[n];
        let carried = |m: &dbn::MboMsg| {
            (
                m.hd.instrument_id,
                m.hd.ts_event,
                m.order_id,
                m.price,
                m.size,
                m.flags.raw(),
                m.action,
                m.side,
                m.ts_recv,
                m.sequence,
            )
        };
        assert_eq!(carried(&m), carried(o), "DBN record {n}");
        n += 1;
    }
    assert_eq!(n, original.records.len());
    // A reader that goes away early (`| head`): cat stops quietly.
    let mut cat = capture(&["cat", d.to_str().unwrap()]).spawn().unwrap();
    {
        use std::io::BufRead;
        let mut first = String::new();
        std::io::BufReader::new(cat.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(first.starts_with("segment 1 name=esh4 "), "{first}");
    }
    let out = cat.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Never over an existing file.
    let out = capture(&export).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("esh4.parquet: exists already"));

    // The capture replayed to two subscribers: the same venue records, the same book.
    let (endpoint, second) = publisher(&format!("format = \"capture\"\npath = {d:?}"), 2);
    let (a, b) = (subscribe(&endpoint, "replay-a"), subscribe(&endpoint, "replay-b"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let report = second.join().unwrap();
    assert_eq!(
        report.capture.map(|c| (c.read, c.replayed, c.left_out, c.gaps)),
        Some((esh4::RECORDS + 1, esh4::RECORDS, 1, 0)),
        "the end of stream left out"
    );
    let want: Vec<BookUpdate> = direct.iter().map(venue).collect();
    for (who, got) in [("replay-a", &a), ("replay-b", &b)] {
        assert_eq!(got.len(), want.len(), "{who}");
        let got: Vec<BookUpdate> = got.iter().map(venue).collect();
        assert!(got == want, "{who}: the replayed records equal the direct subscriber's, record for record");
        assert_final_book(who, &got);
    }

    // A replay of records 40,000 to 40,999 only (by ts_recv), and of records 20,000 to 20,499 (by venue
    // position): an opening snapshot of the books before, then those records: the books equal the direct
    // subscriber's after the same records.
    let (from, to) = (direct[40_000].ts_recv_ns, direct[40_999].ts_recv_ns);
    let by_time = (
        format!("from_ts_recv_ns = {from}\nto_ts_recv_ns = {to}"),
        direct.iter().position(|r| r.ts_recv_ns >= from).unwrap(),
        direct.iter().rposition(|r| r.ts_recv_ns <= to).unwrap(),
    );
    // By venue position: started at the first record at or past `from`, stopped at the first past `to` (a
    // DBN file's snapshot records carry the snapshot's venue sequence, not rising; the live ones rise).
    let (from, to) = (direct[20_000].venue_pos, direct[20_499].venue_pos);
    let first = direct.iter().position(|r| r.venue_pos >= from).unwrap();
    let last = first + direct[first..].iter().position(|r| r.venue_pos > to).unwrap() - 1;
    assert_eq!((first, last), (20_000, 20_499), "the live records' positions rise");
    let by_position = (format!("from_venue_pos = {from}\nto_venue_pos = {to}"), first, last);
    for (bounds, first, last) in [by_time, by_position] {
        let (endpoint, third) = publisher(&format!("format = \"capture\"\npath = {d:?}\n{bounds}"), 1);
        let bounded = subscribe(&endpoint, "bounded").join().unwrap();
        let report = third.join().unwrap().capture.unwrap();
        assert_eq!(report.replayed as usize, last + 1 - first, "{bounds}: {}", report.line());
        assert!(report.opening_snapshot > 1_000, "{bounds}: the books before record {first}: {}", report.line());
        assert!(report.read < esh4::RECORDS, "{bounds}: the replay stops past its bound: {}", report.line());
        let (mut want, mut got) = (Books::new(), Books::new());
        for r in &direct[..=last] {
            want.apply(r).unwrap();
        }
        for r in &bounded {
            got.apply(r).unwrap_or_else(|e| panic!("{bounds}: the bounded replay's book refused a record: {e}"));
        }
        let (w, g) = (want.get(esh4::INSTRUMENT_ID).unwrap(), got.get(esh4::INSTRUMENT_ID).unwrap());
        assert_eq!(g.order_count(), w.order_count(), "{bounds}");
        for side in [Side::Bid, Side::Ask] {
            assert_eq!(g.top(side, usize::MAX), w.top(side, usize::MAX), "{bounds}: {side:?}");
        }
    }

    // Retention deleted the first segment: a replay would build the book without its start (a helper's replay
    // ended with 2,281 orders, not 11,217, and nothing said why): refused, naming what is gone. The export
    // writes what is left and says so.
    for f in ["esh4-000001.mdcap.zst", "esh4-000001.mdidx"] {
        std::fs::remove_file(d.join(f)).unwrap();
    }
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = \"\"\n\n[feed]\nformat = \"capture\"\npath = {d:?}\n\n\
         [fabric]\nprovider = \"shm\"\n"
    );
    let e = Publisher::bind(Config::parse(&text, Path::new("capture-test.toml")).unwrap()).err().unwrap().to_string();
    assert!(
        e.contains("capture esh4: its first segment is 2 (the ")
            && e.contains(" records before it, in segments 1 to 1, are gone)"),
        "{e}"
    );
    let pq = d.join("rest.parquet");
    let out = capture(&["export", d.to_str().unwrap(), "--parquet", pq.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("capture esh4: its first segment is 2: the ") && err.contains(" records before it are gone"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_capture_killed_mid_stream_says_what_it_kept_on_restart_and_both_runs_replay_to_the_book() {
    let d = dir("kill");
    // Paced at 600x (the two hours in about 12 s): the recorder is killed early in the replay.
    let (endpoint, first) = publisher(&format!("format = \"dbn\"\npath = {:?}\npace = 600.0", esh4::main_file()), 1);
    let args = ["record", "--connect", &endpoint, "--dir", d.to_str().unwrap(), "--name", "run", "--block-ms", "1"];
    let mut killed = capture(&args).spawn().unwrap();
    // Killed once it has written a few thousand records (the replay goes on for seconds after).
    let deadline = Instant::now() + WATCHDOG;
    while mdfan_feed::capture::report(&d, Some("run")).map_or(0, |r| r.records) < 5_000 {
        assert!(Instant::now() < deadline, "the recorder wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.kill().unwrap(); // SIGKILL
    let _ = killed.wait();
    let kept = mdfan_feed::capture::report(&d, Some("run")).unwrap();
    assert!(kept.records > 0 && kept.stop.is_none(), "killed mid-stream: {:?}", kept.lines());
    // The next start cuts what the kill left half written, says what it kept, and goes on (a snapshot first).
    let again = capture(&args).spawn().unwrap();
    let out = again.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let recovered = text.lines().find(|l| l.starts_with("capture recovered segment=")).expect(&text);
    assert!(recovered.contains("run-000001.mdcap kept_blocks="), "{recovered}");
    let kept_records: u64 =
        recovered.split("kept_records=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(kept_records <= kept.records && kept_records > 0, "{recovered}");
    first.join().unwrap();
    let all = mdfan_feed::capture::report(&d, Some("run")).unwrap();
    assert_eq!((all.segments, all.stop), (2, Some(mdfan_feed::capture::StopReason::EndOfStream)), "{:?}", all.lines());
    // Replayed: the first run's records, then the second's snapshot and the rest: the final book.
    let (endpoint, second) = publisher(&format!("format = \"capture\"\npath = {d:?}"), 1);
    let replay = subscribe(&endpoint, "replay").join().unwrap();
    second.join().unwrap();
    assert_final_book("replay of both runs", &replay);
    assert!(
        replay.iter().any(|r| r.flags & mdfan_subscriber::flags::SNAPSHOT != 0),
        "the second run began with a snapshot"
    );
    // Exported, both runs in one file: its rows give the same book.
    let pq = d.join("run.parquet");
    let out = capture(&["export", d.to_str().unwrap(), "--parquet", pq.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<BookUpdate> = parquet_rows(&pq).into_iter().map(|(r, _)| r).collect();
    let session: u64 = [Kind::EndOfStream, Kind::SnapshotBegin, Kind::SnapshotEnd, Kind::Heartbeat]
        .iter()
        .map(|k| all.by_kind.get(&(*k as u8)).copied().unwrap_or(0))
        .sum();
    assert_eq!(rows.len() as u64, all.records - session, "every record but the session's own");
    assert_final_book("parquet rows of both runs", &rows);
    // The restart shows: the report names where the second run began.
    assert_eq!(all.restarts.len(), 1, "{:?}", all.lines());
    assert_eq!(all.restarts[0].record, kept_records, "{:?}", all.lines());
    let _ = std::fs::remove_dir_all(&d);
}

/// A recorder on a hot-hot pair (`--connect A --connect B`): two publishers replay ESH4, paced; A stops mid-stream
/// (a shutdown, as for a restart). The capture, carried on by leg B, holds every venue record once, in order,
/// with no gap, and its book is the final ESH4 book; the recorder said the leg went down.
#[test]
fn a_capture_of_a_hot_hot_pair_loses_nothing_when_one_publisher_stops_mid_stream() {
    let d = dir("pair");
    let feed = format!("format = \"dbn\"\npath = {:?}\npace = 500.0", esh4::main_file());
    let (a, stop_a, run_a) = stoppable_publisher(&feed, 1);
    let (b, run_b) = publisher(&feed, 1);
    let args = ["record", "--connect", &a, "--connect", &b, "--dir", d.to_str().unwrap(), "--name", "pair"];
    let recorder = capture(&args).spawn().unwrap();
    let deadline = Instant::now() + WATCHDOG;
    while mdfan_feed::capture::report(&d, Some("pair")).map_or(0, |r| r.records) < 5_000 {
        assert!(Instant::now() < deadline, "the recorder wrote nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_a.store(true, std::sync::atomic::Ordering::Relaxed);
    run_a.join().unwrap();
    let out = recorder.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.contains(" stream_gaps=0 ") && last.ends_with(" end=end_of_stream"), "{stdout}");
    assert!(stderr.contains("leg a down"), "{stderr}");
    run_b.join().unwrap();
    let mut r = mdfan_feed::capture::Reader::open(&d, Some("pair"), false).unwrap();
    let (mut records, mut gaps) = (Vec::new(), 0);
    while let Some(item) = r.next().unwrap() {
        match item {
            mdfan_feed::capture::Item::Record(rec) if !mdfan_feed::capture::is_session_record(&rec) => {
                records.push(rec)
            }
            mdfan_feed::capture::Item::Gap { .. } => gaps += 1,
            _ => {}
        }
    }
    assert_eq!((gaps, records.len() as u64), (0, esh4::RECORDS), "every venue record once, no gap");
    assert!(records.windows(2).all(|w| w[1].seq == w[0].seq + 1), "the merged stream's own seq, contiguous");
    assert_final_book("the pair's capture", &records);
    let rep = mdfan_feed::capture::report(&d, Some("pair")).unwrap();
    assert!(rep.lines()[0].contains(" format=dbn venue=GLBX.MDP3 "), "{:?}", rep.lines());
    let _ = std::fs::remove_dir_all(&d);
}

/// A publisher with an `[access]` list: a recorder without the token of its session is refused (and writes no
/// segment); with `--token-file` it records the whole stream.
#[test]
fn a_recorder_needs_its_token_at_a_publisher_with_an_access_list() {
    let d = dir("token");
    let token = "c0ffee00c0ffee11c0ffee22c0ffee33-capture";
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 1\ncounters_dir = \"\"\n\n[feed]\nformat = \"dbn\"\npath = {:?}\n\n[fabric]\nprovider = \"shm\"\n\n[access]\n[[access.subscribers]]\nname = \"mdfan-capture-tok\"\ntoken = \"{token}\"\n",
        esh4::main_file()
    );
    let p = Publisher::bind(Config::parse(&text, Path::new("capture-access.toml")).unwrap()).expect("binds");
    let endpoint = p.local_addr().to_string();
    let run = std::thread::spawn(move || p.run(Arc::new(AtomicBool::new(false))).expect("runs"));
    let args = ["record", "--connect", &endpoint, "--dir", d.to_str().unwrap(), "--name", "tok"];
    let refused = capture(&args).env_remove("MDFAN_TOKEN").output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("mdfan-capture-tok"), "the refusal names the session: {err}");
    assert!(mdfan_feed::capture::segments(&d, "tok").unwrap().is_empty(), "no segment written");
    let token_file = d.join("tok.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut with_token = args.to_vec();
    with_token.extend(["--token-file", token_file.to_str().unwrap()]);
    let out = capture(&with_token).env_remove("MDFAN_TOKEN").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.contains(&format!(" records={} ", esh4::RECORDS + 1)) && last.contains(" stream_gaps=0 "), "{stdout}");
    run.join().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Recorded twice into one folder (two sessions of the whole ESH4 replay, the second from the start of the day
/// again): the replay clears every book where the second session begins, as the recorder's subscriber began with
/// empty books, and ends on the final book with no book error. (It once applied the second day on top of the
/// first: every one of the 11,217 resting orders added twice.)
#[test]
fn a_capture_recorded_twice_into_one_folder_replays_each_session_from_empty_books() {
    let d = dir("twice");
    for run in 0..2 {
        let (endpoint, publisher_run) = publisher(&format!("format = \"dbn\"\npath = {:?}", esh4::main_file()), 1);
        let args = ["record", "--connect", &endpoint, "--dir", d.to_str().unwrap(), "--name", "twice"];
        let out = capture(&args).output().unwrap();
        assert!(out.status.success(), "run {run}: {}", String::from_utf8_lossy(&out.stderr));
        publisher_run.join().unwrap();
    }
    let all = mdfan_feed::capture::report(&d, Some("twice")).unwrap();
    assert_eq!(all.restarts.len(), 1, "{:?}", all.lines());
    let (endpoint, replay_run) = publisher(&format!("format = \"capture\"\npath = {d:?}"), 1);
    let replay = subscribe(&endpoint, "replay").join().unwrap();
    let report = replay_run.join().unwrap();
    assert_final_book("replay of two sessions", &replay);
    let feed = report.capture.expect("a capture feed's counters");
    assert_eq!((feed.restarts, feed.gaps), (1, 0), "{}", feed.line());
    // the restart's Clear of ESH4 (flagged SNAPSHOT) comes right before the second session's first record
    let at =
        replay.iter().rposition(|r| r.kind() == Some(Kind::Clear) && r.flags & mdfan_subscriber::flags::SNAPSHOT != 0);
    let clear = &replay[at.expect("a Clear at the restart")];
    assert_eq!(clear.instrument_id, esh4::INSTRUMENT_ID);
    let _ = std::fs::remove_dir_all(&d);
}

/// A replay from a bound opens with a snapshot of every price-level book before it: of each instrument the
/// capture names, however many. Before, the rebuild held 65,536 books: a capture of 70,000 instruments opened
/// without the last 4,464, with nothing said.
#[test]
fn a_bounded_replay_of_a_price_level_capture_opens_with_every_instrument_s_book() {
    const INSTRUMENTS: u32 = 70_000;
    let d = dir("mbp-many");
    let symbology = (1..=INSTRUMENTS).map(|id| mdfan_wire::InstrumentDef::new(id, format!("S{id}"))).collect();
    let cfg = mdfan_feed::capture::WriterConfig {
        dir: d.clone(),
        name: "mbp".into(),
        rotate_bytes: u64::MAX,
        rotate_ns: 0,
        block_records: 1024,
        block_ms: 10,
        fsync: mdfan_feed::capture::Fsync::Rotation,
        compress: false,
    };
    let meta = mdfan_feed::capture::SegmentMeta {
        format_version: mdfan_feed::capture::FORMAT_VERSION,
        name: String::new(),
        segment: 0,
        created_ns: 0,
        source: "127.0.0.1:7700".into(),
        session: "unit".into(),
        book: "mbp".into(),
        feed: mdfan_wire::FeedIdentity::new("mdp3", "XCME", "310"),
        symbology,
        fsync: String::new(),
        first_record: 0,
        run_id: None,
        run_first_segment: None,
    };
    let (mut w, _) = mdfan_feed::capture::Writer::open(cfg, meta, 1).unwrap();
    let level = |seq: u64, id: u32, kind: Kind, size: u32, ts_recv_ns: u64| BookUpdate {
        seq,
        ts_recv_ns,
        ts_event_ns: ts_recv_ns,
        venue_pos: seq << 16,
        instrument_id: id,
        price_e9: 100_000_000_000,
        size,
        level: 1,
        side: Side::Bid as u8,
        flags: mdfan_wire::record::flags::MBP,
        ..BookUpdate::control(kind)
    };
    for id in 1..=INSTRUMENTS {
        w.record(&level(u64::from(id), id, Kind::LevelNew, 5, 1_000 + u64::from(id)), 1).unwrap();
    }
    let last = level(u64::from(INSTRUMENTS) + 1, 1, Kind::LevelChange, 7, 1_000_000);
    w.record(&last, 1).unwrap();
    w.stop(mdfan_feed::capture::StopReason::EndOfStream, 2).unwrap();

    let feed = format!("format = \"capture\"\npath = {d:?}\nfrom_ts_recv_ns = 1000000\n\n[journal]\nrecords = 262144");
    let (endpoint, run) = publisher(&feed, 1);
    let mut cfg = mdfan_subscriber::SubscriberConfig::new(&endpoint, "bounded");
    cfg.ring_slots = 1 << 18;
    let got = support::subscribe_with(cfg).join().unwrap();
    let report = run.join().unwrap().capture.unwrap();
    assert_eq!(report.opening_snapshot, 2 * u64::from(INSTRUMENTS), "a Clear and a level each: {}", report.line());
    assert_eq!(report.replayed, 1, "{}", report.line());
    let mut books = mdfan_wire::MbpBooks::with_capacity(INSTRUMENTS as usize);
    for r in &got {
        books.apply(r).unwrap();
    }
    let size = |id: u32| books.get(id).and_then(|b| b.level(Side::Bid, 1)).map(|l| l.size);
    assert_eq!((size(1), size(INSTRUMENTS)), (Some(7), Some(5)), "the replayed change, and the last instrument's book");
    let _ = std::fs::remove_dir_all(&d);
}
