//! The capture format (`mdfan_feed::capture`, docs/CAPTURE.md) on the bundled ESH4 file's 68,792 records: written
//! in blocks and rotated segments, closed segments compressed and indexed, read back record for record; a writer
//! killed mid-block (its segment cut inside a block) leaves every whole block readable and the next writer says
//! what it cut and goes on; a reader follows a segment as it grows; a full disk is an error naming the segment
//! and the bytes.

#[path = "support/esh4.rs"]
mod esh4;

use std::path::{Path, PathBuf};

use mdfan_feed::capture::{
    block_end, close_segment, report, segments, BlockHeader, Fsync, Item, Reader, SegmentMeta, StopReason, Writer,
    WriterConfig, BLOCK_HEADER_BYTES,
};
use mdfan_feed::dbn::MboStream;
use mdfan_wire::{BookUpdate, Books, InstrumentDef, Side};

/// ESH4's records as a subscriber would have received them (seq from 1).
fn records() -> Vec<BookUpdate> {
    let mut s = MboStream::open(&esh4::main_file()).unwrap();
    let mut out = Vec::new();
    while let Some(r) = s.next_update().unwrap() {
        out.push(BookUpdate { seq: out.len() as u64 + 1, ..r });
    }
    assert_eq!(out.len() as u64, esh4::RECORDS);
    out
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mdfan-capture-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn meta() -> SegmentMeta {
    SegmentMeta {
        format_version: mdfan_feed::capture::FORMAT_VERSION,
        name: String::new(),
        segment: 0,
        created_ns: 0,
        source: "127.0.0.1:7700".into(),
        session: "capture".into(),
        book: "mbo".into(),
        feed: mdfan_wire::FeedIdentity::new("dbn", "GLBX.MDP3", "esh4.dbn.zst"),
        symbology: vec![InstrumentDef::new(esh4::INSTRUMENT_ID, "ESH4")],
        fsync: String::new(),
        first_record: 0,
        run_id: None,
        run_first_segment: None,
    }
}

fn config(dir: &Path, rotate_bytes: u64) -> WriterConfig {
    WriterConfig {
        dir: dir.to_owned(),
        name: "esh4".into(),
        rotate_bytes,
        rotate_ns: 0,
        block_records: 256,
        block_ms: 1,
        fsync: Fsync::Rotation,
        compress: true,
    }
}

/// Every item of the capture in `dir`.
fn read_all(dir: &Path) -> (Vec<BookUpdate>, Vec<Item>) {
    let mut r = Reader::open(dir, None, false).unwrap();
    let (mut recs, mut other) = (Vec::new(), Vec::new());
    while let Some(item) = r.next().unwrap() {
        match item {
            Item::Record(rec) => recs.push(rec),
            item => other.push(item),
        }
    }
    assert_eq!(r.torn(), None);
    (recs, other)
}

fn final_book(recs: &[BookUpdate]) -> Books {
    let mut books = Books::new();
    for r in recs {
        books.apply(r).unwrap();
    }
    books
}

#[test]
fn esh4_written_in_rotated_compressed_segments_reads_back_record_for_record() {
    // seqs 30,001 to 30,003 never came: the record after the 30,000th has seq 30,004
    let recs: Vec<BookUpdate> =
        records().into_iter().map(|r| BookUpdate { seq: r.seq + if r.seq > 30_000 { 3 } else { 0 }, ..r }).collect();
    let d = dir("rotate");
    // 1 MiB segments: 68,792 records of 64 bytes (4.4 MB with block headers) make five.
    let (mut w, recovered) = Writer::open(config(&d, 1 << 20), meta(), 1).unwrap();
    assert!(recovered.recovered.is_empty() && recovered.removed.is_none());
    for (i, r) in recs.iter().enumerate() {
        if i == 30_000 {
            w.gap(30_001, 30_004, 2).unwrap(); // as a subscriber reports a gap before record 30,004
        }
        w.record(r, 2).unwrap();
        for closed in w.take_closed() {
            close_segment(&closed, true).unwrap();
        }
    }
    let (stats, last) = w.stop(StopReason::EndOfStream, 3).unwrap();
    for closed in last {
        close_segment(&closed, true).unwrap();
    }
    assert_eq!((stats.records, stats.gaps, stats.missed, stats.segments), (esh4::RECORDS, 1, 3, 5));
    let segs = segments(&d, "esh4").unwrap();
    assert_eq!(segs.len(), 5);
    assert!(segs.iter().all(|(_, p)| p.to_string_lossy().ends_with(".mdcap.zst")), "{segs:?}");
    // The indexes: per block its offset, first seq, first ts_recv_ns, first venue position (4 x u64 LE), the
    // offsets rising within a segment, one entry per block written (the gap and stop blocks included).
    let mut entries = Vec::new();
    for (n, _) in &segs {
        let idx = std::fs::read(d.join(format!("esh4-{n:06}.mdidx"))).unwrap();
        assert!(!idx.is_empty() && idx.len().is_multiple_of(32), "segment {n}: index of {} bytes", idx.len());
        let of_segment: Vec<[u64; 4]> = idx
            .chunks(32)
            .map(|e| std::array::from_fn(|i| u64::from_le_bytes(e[i * 8..i * 8 + 8].try_into().unwrap())))
            .collect();
        assert!(of_segment.windows(2).all(|w| w[0][0] < w[1][0]), "segment {n}: offsets rise");
        entries.push(of_segment);
    }
    assert_eq!(entries.iter().map(Vec::len).sum::<usize>() as u64, stats.blocks);
    let first = entries[0][0];
    assert_eq!(first[1..], [recs[0].seq, recs[0].ts_recv_ns, recs[0].venue_pos], "the first block's entry");
    let second_segment = entries[1][0];
    assert!(second_segment[0] > 18, "past the segment header: {second_segment:?}");
    let (back, other) = read_all(&d);
    assert_eq!(back.len(), recs.len());
    assert!(back == recs, "every record back, in order, byte for byte");
    let metas: Vec<(u64, u64)> = other
        .iter()
        .filter_map(|i| match i {
            Item::Segment(m) => Some((m.segment, m.first_record)),
            _ => None,
        })
        .collect();
    assert_eq!(metas.len(), 5);
    assert_eq!(metas[0], (1, 0));
    // Each segment's first_record is the records of the segments before it.
    let mut r = Reader::open(&d, None, false).unwrap();
    let mut seen = 0u64;
    while let Some(item) = r.next().unwrap() {
        match item {
            Item::Segment(m) => assert_eq!(m.first_record, seen, "segment {}", m.segment),
            Item::Record(_) => seen += 1,
            _ => {}
        }
    }
    assert!(other.contains(&Item::Gap { expected: 30_001, got: 30_004 }));
    assert_eq!(other.last(), Some(&Item::Stop { reason: Some(StopReason::EndOfStream), at_ns: 3 }));
    let book = final_book(&back);
    let b = book.get(esh4::INSTRUMENT_ID).unwrap();
    assert_eq!(b.order_count(), 11_217);
    let top = b.top(Side::Bid, 1);
    assert_eq!((top[0].price_e9, top[0].size), (esh4::TOP_BIDS[0].0, esh4::TOP_BIDS[0].1));
    let rep = report(&d, None).unwrap();
    assert_eq!((rep.segments, rep.records, rep.gaps, rep.missed), (5, esh4::RECORDS, 1, 3));
    assert_eq!((rep.last_ts_recv_ns, rep.stop), (esh4::LAST_TS_RECV_NS, Some(StopReason::EndOfStream)));
    let _ = std::fs::remove_dir_all(&d);
}

/// Rotation by time: a segment is closed once it has been open `rotate_ns`, checked after each block; every
/// record reads back across the segments.
#[test]
fn segments_rotate_by_time() {
    let recs = records();
    let d = dir("rotate-time");
    let cfg = WriterConfig { rotate_ns: 1_000, compress: false, ..config(&d, u64::MAX) };
    let (mut w, _) = Writer::open(cfg, meta(), 0).unwrap();
    // 10 ns a record: each block of 256 spans 2,560 ns, past the 1,000 ns limit, so each block ends its segment:
    // 3 full blocks of the 1,000 records, the last 232 (written at the stop, 2,330 ns after the third) in a
    // fourth, and the stop block in a fifth.
    for (i, r) in recs[..1_000].iter().enumerate() {
        w.record(r, i as u64 * 10).unwrap();
    }
    let (stats, _) = w.stop(StopReason::EndOfStream, 10_000).unwrap();
    assert_eq!((stats.segments, stats.records), (5, 1_000));
    assert_eq!(segments(&d, "esh4").unwrap().len(), 5);
    let (back, _) = read_all(&d);
    assert!(back == recs[..1_000], "{} records read back", back.len());
    let _ = std::fs::remove_dir_all(&d);
}

/// A writer that died between creating its next segment and writing that segment's header whole (a crash, a
/// full disk) leaves a last segment shorter than its header: the next writer removes it (it holds no record),
/// says so, and takes its number; every record of the segments before it is read back. Damage of another kind
/// (another magic) is still an error.
#[test]
fn a_last_segment_cut_inside_its_header_is_removed_and_its_number_taken_again() {
    let recs = records();
    for (tag, stub) in [("empty", &b""[..]), ("magic-only", &b"MDFANCAP"[..]), ("zeroed", &[0u8; 40][..])] {
        let d = dir(&format!("cut-header-{tag}"));
        let (mut w, _) = Writer::open(WriterConfig { compress: false, ..config(&d, u64::MAX) }, meta(), 1).unwrap();
        for r in &recs[..1_000] {
            w.record(r, 2).unwrap();
        }
        for closed in w.stop(StopReason::Interrupted, 3).unwrap().1 {
            close_segment(&closed, false).unwrap();
        }
        let stub_path = d.join("esh4-000002.mdcap");
        std::fs::write(&stub_path, stub).unwrap();
        let (mut w, recovery) = Writer::open(config(&d, u64::MAX), meta(), 5).unwrap();
        assert_eq!(recovery.removed, Some((stub_path.clone(), stub.len() as u64)), "{tag}");
        assert!(recovery.recovered.is_empty(), "{tag}: {:?}", recovery.recovered);
        assert!(w.path().ends_with("esh4-000002.mdcap"), "{tag}: {}", w.path().display());
        for r in &recs[1_000..1_500] {
            w.record(r, 6).unwrap();
        }
        let _ = w.stop(StopReason::EndOfStream, 7).unwrap();
        let (back, _) = read_all(&d);
        assert!(back == recs[..1_500], "{tag}: {} records read back", back.len());
        let _ = std::fs::remove_dir_all(&d);
    }
    // Another file's bytes where the header should be, or a zeroed header with bytes behind it (a header is
    // durable before any block is written): damage, named, not removed.
    let mut zeroed_then_data = vec![0u8; 64];
    zeroed_then_data.extend_from_slice(&[7u8; 64]);
    for (tag, bytes) in [("other", b"PK\x03\x04 not a capture".to_vec()), ("zeroed-then-data", zeroed_then_data)] {
        let d = dir(&format!("cut-header-damage-{tag}"));
        let (w, _) = Writer::open(WriterConfig { compress: false, ..config(&d, u64::MAX) }, meta(), 1).unwrap();
        let _ = w.stop(StopReason::Interrupted, 3).unwrap();
        std::fs::write(d.join("esh4-000002.mdcap"), &bytes).unwrap();
        let e = Writer::open(config(&d, u64::MAX), meta(), 5).err().expect("damage is an error").to_string();
        assert!(e.contains("esh4-000002.mdcap") && e.contains("magic"), "{tag}: {e}");
        assert!(d.join("esh4-000002.mdcap").exists(), "{tag}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn a_writer_killed_mid_block_leaves_every_whole_block_and_the_next_says_what_it_cut() {
    let recs = records();
    let d = dir("torn");
    let (mut w, _) = Writer::open(config(&d, u64::MAX), meta(), 1).unwrap();
    for r in &recs[..1_000] {
        w.record(r, 2).unwrap();
    }
    w.flush(2).unwrap(); // 3 blocks of 256 and one of 232
    let path = w.path().to_owned();
    drop(w); // a SIGKILL: nothing more written, nothing closed
             // The last block cut 100 bytes short, as a kill inside its write would leave it.
    let len = std::fs::metadata(&path).unwrap().len();
    let last_block = len - (BLOCK_HEADER_BYTES as u64 + 232 * 64);
    assert_eq!(block_end(&path, last_block).unwrap(), len);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 100).unwrap();
    // A reader stops at the torn block and says where.
    let mut r = Reader::open(&d, None, false).unwrap();
    let mut n = 0;
    while let Some(item) = r.next().unwrap() {
        n += u64::from(matches!(item, Item::Record(_)));
    }
    assert_eq!(n, 768, "the three whole blocks");
    assert!(r.torn().is_some_and(|t| t.contains("esh4-000001.mdcap") && t.contains("cut short")), "{:?}", r.torn());
    // The next writer cuts the torn block off, says so, and goes on in a new segment.
    let (mut w, recovered) = Writer::open(config(&d, u64::MAX), meta(), 5).unwrap();
    let recovered = recovered.recovered;
    assert_eq!(recovered.len(), 1);
    assert_eq!((recovered[0].scan.blocks, recovered[0].scan.records), (3, 768));
    assert_eq!(recovered[0].cut_bytes, BLOCK_HEADER_BYTES as u64 + 232 * 64 - 100);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), last_block, "cut at the end of the last whole block");
    assert!(w.path().ends_with("esh4-000002.mdcap"));
    for r in &recs[768..] {
        w.record(r, 6).unwrap();
    }
    let _ = w.stop(StopReason::EndOfStream, 7).unwrap();
    let (back, _) = read_all(&d);
    assert_eq!(back.len(), recs.len());
    assert!(back == recs, "the records the torn block lost were written again by the new run");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_reader_follows_a_segment_as_it_is_written_and_never_hands_out_half_a_block() {
    let recs = records();
    let d = dir("follow");
    let (mut w, _) = Writer::open(config(&d, u64::MAX), meta(), 1).unwrap();
    let mut r = Reader::open(&d, Some("esh4"), true).unwrap();
    assert!(matches!(r.next().unwrap(), Some(Item::Segment(_))));
    assert_eq!(r.next().unwrap(), None, "nothing written yet");
    for rec in &recs[..300] {
        w.record(rec, 2).unwrap(); // one block of 256 written, 44 waiting in the writer
    }
    let mut seen = Vec::new();
    while let Some(Item::Record(rec)) = r.next().unwrap() {
        seen.push(rec);
    }
    assert_eq!(seen.len(), 256);
    // Half a block on disk (as a writer mid-write): not handed out, and read whole once it is.
    let path = w.path().to_owned();
    w.flush(3).unwrap();
    let whole = std::fs::read(&path).unwrap();
    let cut = whole.len() - 44 * 64 + 10;
    std::fs::write(&path, &whole[..cut]).unwrap();
    assert_eq!(r.next().unwrap(), None);
    std::fs::write(&path, &whole).unwrap();
    while let Some(Item::Record(rec)) = r.next().unwrap() {
        seen.push(rec);
    }
    assert!(seen == recs[..300], "the 300 records, once each, in order");
    let _ = w.stop(StopReason::Interrupted, 4).unwrap();
    assert_eq!(r.next().unwrap(), Some(Item::Stop { reason: Some(StopReason::Interrupted), at_ns: 4 }));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_disk_is_an_error_naming_the_segment_and_the_bytes_and_the_capture_ends_with_its_stop_block() {
    if !std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
    {
        {
            // on the process's stderr, not the test's captured output: .ci/run must see it
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIP capture full disk: needs root (a 256 KiB tmpfs)");
        }
        return;
    }
    let d = dir("full");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&d)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "mount a 256 KiB tmpfs on {}", d.display());
    let recs = records();
    let (mut w, _) = Writer::open(config(&d, u64::MAX), meta(), 1).unwrap();
    let err = recs.iter().find_map(|r| w.record(r, 2).err()).expect("256 KiB fill up");
    let text = err.to_string();
    assert!(
        text.contains("esh4-000001.mdcap") && text.contains("cannot write") && text.contains("No space left"),
        "{text}"
    );
    assert!(w.stats().records > 3_000, "the blocks before it were written: {:?}", w.stats());
    let written = w.stats().records;
    // The stop block still fits (the writer keeps room for it allocated): the capture ends whole, saying why.
    let stopped = w.stop(StopReason::WriteFailed, 3);
    assert!(stopped.as_ref().is_ok_and(|(stats, _)| stats.records == written), "{stopped:?}");
    let mut r = Reader::open(&d, None, false).unwrap();
    let (mut back, mut last) = (Vec::new(), None);
    while let Some(item) = r.next().unwrap() {
        match item {
            Item::Record(rec) => back.push(rec),
            other => last = Some(other),
        }
    }
    assert_eq!(r.torn(), None, "no block cut short");
    assert_eq!(last, Some(Item::Stop { reason: Some(StopReason::WriteFailed), at_ns: 3 }));
    assert_eq!(back.len() as u64, written, "every whole block before the full disk reads back");
    assert!(back == recs[..written as usize], "the records read back are the ones written");
    let rep = report(&d, None).unwrap();
    assert!(rep.lines()[0].contains(" stop=write_failed "), "{:?}", rep.lines());
    let _ = std::process::Command::new("umount").arg(&d).status();
    let _ = std::fs::remove_dir_all(&d);
}

/// ESH4 in five closed plain segments (indexed, not compressed).
fn five_plain_segments(tag: &str) -> PathBuf {
    let d = dir(tag);
    let (mut w, _) = Writer::open(WriterConfig { compress: false, ..config(&d, 1 << 20) }, meta(), 1).unwrap();
    for r in records() {
        w.record(&r, 2).unwrap();
        for closed in w.take_closed() {
            close_segment(&closed, false).unwrap();
        }
    }
    let (_, last) = w.stop(StopReason::EndOfStream, 3).unwrap();
    for closed in last {
        close_segment(&closed, false).unwrap();
    }
    d
}

fn read_error(d: &Path) -> String {
    let mut r = Reader::open(d, None, false).unwrap();
    loop {
        match r.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end without an error (torn: {:?})", r.torn()),
            Err(e) => return e.to_string(),
        }
    }
}

/// A damaged block inside the capture, or a segment missing, is an error naming the segment and the offset,
/// never a shorter capture read as whole; recovery never cuts a closed segment; a second writer of the same
/// capture is refused while the first lives.
#[test]
fn damage_or_a_missing_segment_is_an_error_and_recovery_never_cuts_a_closed_segment() {
    // One byte flipped in the middle of segment 2 (of 5).
    let d = five_plain_segments("damage");
    let seg2 = d.join("esh4-000002.mdcap");
    let mut bytes = std::fs::read(&seg2).unwrap();
    bytes[500_000] ^= 0xff;
    std::fs::write(&seg2, &bytes).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000002.mdcap") && e.contains("CRC does not match") && e.contains("damaged block"), "{e}");
    let e = report(&d, None).unwrap_err().to_string();
    assert!(e.contains("esh4-000002.mdcap"), "{e}");
    // A writer started on it refuses nothing of the closed segments' content and cuts none of them: the new
    // segment follows, numbered on from all five's records.
    let sizes = |d: &Path| {
        segments(d, "esh4").unwrap().iter().map(|(_, p)| std::fs::metadata(p).unwrap().len()).collect::<Vec<_>>()
    };
    let before = sizes(&d);
    let (w, recovered) = Writer::open(WriterConfig { compress: false, ..config(&d, 1 << 20) }, meta(), 4).unwrap();
    assert!(recovered.recovered.is_empty(), "closed segments are not recovered: {:?}", recovered.recovered);
    assert_eq!(sizes(&d)[..5], before[..], "no segment cut");
    // One writer per capture.
    let second = Writer::open(WriterConfig { compress: false, ..config(&d, 1 << 20) }, meta(), 5);
    let e = second.err().expect("a second writer is refused").to_string();
    assert!(e.contains("esh4.lock") && e.contains("another mdfan-capture writes this capture"), "{e}");
    let (_, last) = w.stop(StopReason::Interrupted, 6).unwrap();
    assert_eq!(last.len(), 1);
    let (m6, _) = mdfan_feed::capture::scan_segment(&last[0]).unwrap();
    assert_eq!((m6.segment, m6.first_record), (6, esh4::RECORDS), "after the five segments' records");
    let _ = std::fs::remove_dir_all(&d);

    // Segment 3 of 5 gone.
    let d = five_plain_segments("missing");
    std::fs::remove_file(d.join("esh4-000003.mdcap")).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000004.mdcap") && e.contains("segment 3 to 3 of this capture are missing"), "{e}");
    let _ = std::fs::remove_dir_all(&d);

    // Segment 2 cut short while segment 3 follows.
    let d = five_plain_segments("cut");
    let seg2 = d.join("esh4-000002.mdcap");
    let len = std::fs::metadata(&seg2).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&seg2).unwrap().set_len(len - 100).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000002.mdcap") && e.contains("a later segment follows"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Segments deleted on purpose from a capture's start (a window of days kept) are said in the report; a closed
/// segment lost from the end, whose index is still there, is an error naming it, not a shorter capture.
#[test]
fn a_capture_says_when_its_first_segments_are_gone_and_refuses_one_lost_from_its_end() {
    let recs = records();
    let d = dir("lost-segments");
    let (mut w, _) = Writer::open(WriterConfig { compress: false, ..config(&d, 1 << 16) }, meta(), 1).unwrap();
    for r in &recs[..5_000] {
        w.record(r, 2).unwrap();
        for closed in w.take_closed() {
            close_segment(&closed, false).unwrap();
        }
    }
    for closed in w.stop(StopReason::EndOfStream, 3).unwrap().1 {
        close_segment(&closed, false).unwrap();
    }
    let segs = segments(&d, "esh4").unwrap();
    assert!(segs.len() >= 4, "{segs:?}");
    // The first segment deleted, with its index: the report starts later and says so.
    std::fs::remove_file(&segs[0].1).unwrap();
    std::fs::remove_file(d.join("esh4-000001.mdidx")).unwrap();
    let line = report(&d, None).unwrap().lines()[0].clone();
    assert!(line.contains(" first_segment=2 records_before="), "{line}");
    // The last segment lost, its index left: an error naming it.
    let (n, last) = segs.last().unwrap();
    std::fs::remove_file(last).unwrap();
    let e = report(&d, None).unwrap_err().to_string();
    assert!(e.contains(&format!("esh4-{n:06}.mdidx")) && e.contains("it is missing"), "{e}");
    // ... and a writer does not take its number (its index would be written over, the capture read as whole).
    let e = Writer::open(config(&d, 1 << 16), meta(), 4).err().expect("refused").to_string();
    assert!(e.contains(&format!("esh4-{n:06}.mdidx")) && e.contains("a writer would take its number"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// One capture, one feed: a writer whose session is of another feed (format, venue) or book than the segments
/// already there is refused before it writes, naming both (a LOBSTER session appended to an ESH4 capture was
/// replayed under the ESH4 identity). The same feed from another file (another channel) goes on.
#[test]
fn a_session_of_another_feed_or_book_is_not_appended_to_a_capture() {
    let d = dir("other-feed");
    let (w, _) = Writer::open(WriterConfig { compress: false, ..config(&d, u64::MAX) }, meta(), 1).unwrap();
    let _ = w.stop(StopReason::EndOfStream, 2).unwrap();
    let lobster =
        SegmentMeta { book: "mbp".into(), feed: mdfan_wire::FeedIdentity::new("lobster", "", "AMZN"), ..meta() };
    let mbp = SegmentMeta { book: "mbp".into(), ..meta() };
    for (tag, other) in [("lobster", lobster), ("mbp", mbp)] {
        let e = Writer::open(config(&d, u64::MAX), other, 3).err().expect("refused").to_string();
        assert!(
            e.contains("esh4-000001.mdcap: offset 0: capture esh4 here is of format=dbn venue=GLBX.MDP3 ")
                && e.contains("(book mbo); this session is of ")
                && e.contains("a capture holds one feed"),
            "{tag}: {e}"
        );
        assert!(!d.join("esh4-000002.mdcap").exists(), "{tag}: nothing written");
    }
    let next_file = SegmentMeta { feed: mdfan_wire::FeedIdentity::new("dbn", "GLBX.MDP3", "esh4-2.dbn.zst"), ..meta() };
    let (w, _) = Writer::open(config(&d, u64::MAX), next_file, 4).unwrap();
    assert!(w.path().ends_with("esh4-000002.mdcap"));
    let _ = w.stop(StopReason::EndOfStream, 5).unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// A closed segment (its index written) is never cut by a writer, so its end is checked: one cut at a block
/// boundary (the index lists more blocks), cut inside a block, or a capture whose last closed segment has no
/// stop block (the segment after it lost with its index) is an error naming the segment, never a shorter
/// capture read as whole with `stop=none`.
#[test]
fn a_closed_segment_cut_short_or_a_last_segment_lost_with_its_index_is_an_error() {
    // The last of five segments cut at a block boundary: its first block's end.
    let d = five_plain_segments("closed-cut-boundary");
    let seg5 = d.join("esh4-000005.mdcap");
    let first_block_end = {
        let (_, scan) = mdfan_feed::capture::scan_segment(&seg5).unwrap();
        assert!(scan.blocks > 2, "{scan:?}");
        let entry = std::fs::read(d.join("esh4-000005.mdidx")).unwrap();
        u64::from_le_bytes(entry[32..40].try_into().unwrap()) // block 2's offset
    };
    std::fs::OpenOptions::new().write(true).open(&seg5).unwrap().set_len(first_block_end).unwrap();
    let e = read_error(&d);
    assert!(
        e.contains("esh4-000005.mdcap") && e.contains("it holds 1 blocks and its index") && e.contains("lists"),
        "{e}"
    );
    // ... and inside a block.
    std::fs::OpenOptions::new().write(true).open(&seg5).unwrap().set_len(first_block_end - 10).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000005.mdcap") && e.contains("a closed segment ends inside a block"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
    // The last segment lost with its index.
    let d = five_plain_segments("closed-last-lost");
    std::fs::remove_file(d.join("esh4-000005.mdcap")).unwrap();
    std::fs::remove_file(d.join("esh4-000005.mdidx")).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000004.mdcap") && e.contains("last segment (4) is closed but has no stop block"), "{e}");
    let e = report(&d, None).unwrap_err().to_string();
    assert!(e.contains("no stop block"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The offsets of a closed plain segment's blocks, from its index (`.mdidx`: 32 bytes per block, its offset first).
fn block_offsets(seg: &Path) -> Vec<usize> {
    let index = std::fs::read(seg.with_extension("mdidx")).unwrap();
    index.chunks(32).map(|e| u64::from_le_bytes(e[..8].try_into().unwrap()) as usize).collect()
}

/// Blocks are numbered in their segment (format 2), so a whole block removed from a segment or repeated in it,
/// its CRCs intact (a spliced file), is an error naming the segment and the block: before, a removed block gave a
/// wrong book with nothing said, and a repeated one read as a recorder restart. A format 1 capture (blocks not
/// numbered) still reads.
#[test]
fn a_block_removed_from_or_repeated_in_a_segment_is_an_error_and_format_1_still_reads() {
    // Block 2 of segment 2 removed, with its index entry (so the index agrees).
    let d = five_plain_segments("block-removed");
    let seg2 = d.join("esh4-000002.mdcap");
    let (bytes, offsets) = (std::fs::read(&seg2).unwrap(), block_offsets(&seg2));
    let spliced = [&bytes[..offsets[2]], &bytes[offsets[3]..]].concat();
    std::fs::write(&seg2, spliced).unwrap();
    let index = std::fs::read(d.join("esh4-000002.mdidx")).unwrap();
    std::fs::write(d.join("esh4-000002.mdidx"), [&index[..64], &index[96..]].concat()).unwrap();
    let e = read_error(&d);
    assert!(
        e.contains(&format!("esh4-000002.mdcap: offset {}", offsets[2]))
            && e.contains("block number 3 where 2 was due")
            && e.contains("blocks missing before it"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);

    // Block 1 of segment 3 repeated after itself.
    let d = five_plain_segments("block-repeated");
    let seg3 = d.join("esh4-000003.mdcap");
    let (bytes, offsets) = (std::fs::read(&seg3).unwrap(), block_offsets(&seg3));
    let spliced = [&bytes[..offsets[2]], &bytes[offsets[1]..]].concat();
    std::fs::write(&seg3, spliced).unwrap();
    let e = read_error(&d);
    assert!(
        e.contains(&format!("esh4-000003.mdcap: offset {}", offsets[2]))
            && e.contains("block number 1 where 2 was due")
            && e.contains("a block repeated or moved"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);

    // Format 1: every segment's version 1 (in its header and its metadata, which has no writer run) and its
    // blocks' numbers 0 (their header CRCs made again).
    let d = five_plain_segments("format-1");
    for (_, seg) in segments(&d, "esh4").unwrap() {
        let (mut bytes, offsets) = (std::fs::read(&seg).unwrap(), block_offsets(&seg));
        for at in offsets {
            let h: &[u8; BLOCK_HEADER_BYTES] = bytes[at..at + BLOCK_HEADER_BYTES].try_into().unwrap();
            let header = BlockHeader { number: 0, ..BlockHeader::decode(h).unwrap() };
            bytes[at..at + BLOCK_HEADER_BYTES].copy_from_slice(&header.encode());
        }
        let meta = mdfan_feed::capture::scan_segment(&seg).unwrap().0;
        let old_header = 18 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
        let v1 = SegmentMeta { format_version: 1, run_id: None, run_first_segment: None, ..meta };
        let mut header = mdfan_feed::capture::segment_header(&v1);
        header[8..10].copy_from_slice(&1u16.to_le_bytes());
        std::fs::write(&seg, [&header[..], &bytes[old_header..]].concat()).unwrap();
        std::fs::remove_file(seg.with_extension("mdidx")).unwrap(); // its offsets moved with the header
    }
    let (recs, _) = read_all(&d);
    assert_eq!(recs, records());
    // The header's version is not under a CRC; the metadata's is: one that says 1 of a format 2 segment is
    // refused (it would switch the block numbers' check off).
    let seg = d.join("esh4-000003.mdcap");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[8..10].copy_from_slice(&2u16.to_le_bytes());
    std::fs::write(&seg, bytes).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000003.mdcap: offset 8: format version 2, but its metadata"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A close interrupted after the compressed segment was renamed into place and before the plain one was
/// removed leaves both: the reader takes the compressed one (made durable before its rename, so whole), whatever
/// the plain one holds, and the next writer removes the plain one.
#[test]
fn a_plain_twin_of_a_compressed_segment_is_not_read_and_the_next_writer_removes_it() {
    let d = dir("twin");
    let (mut w, _) = Writer::open(config(&d, 1 << 20), meta(), 1).unwrap();
    for r in records() {
        w.record(&r, 2).unwrap();
        for closed in w.take_closed() {
            close_segment(&closed, true).unwrap();
        }
    }
    for closed in w.stop(StopReason::EndOfStream, 3).unwrap().1 {
        close_segment(&closed, true).unwrap();
    }
    // Segment 2's plain twin, cut to nothing (as a crash could leave a file not yet written back).
    let twin = d.join("esh4-000002.mdcap");
    std::fs::write(&twin, b"").unwrap();
    let (recs, _) = read_all(&d);
    assert_eq!(recs.len() as u64, esh4::RECORDS);
    let (w, recovery) = Writer::open(config(&d, 1 << 20), meta(), 4).unwrap();
    assert_eq!(recovery.twins_removed, vec![twin.clone()]);
    assert!(!twin.exists());
    let _ = w.stop(StopReason::Interrupted, 5).unwrap();
    // A compressed segment damaged since (its plain twin the good copy): the writer touches neither and refuses.
    let zst = d.join("esh4-000003.mdcap.zst");
    let plain = d.join("esh4-000003.mdcap");
    let bytes = std::fs::read(&zst).unwrap();
    std::fs::write(&plain, zstd::stream::decode_all(&bytes[..]).unwrap()).unwrap();
    std::fs::write(&zst, &bytes[..bytes.len() / 2]).unwrap();
    let e = Writer::open(config(&d, 1 << 20), meta(), 6).err().expect("refused").to_string();
    assert!(e.contains("esh4-000003.mdcap.zst") && e.contains("does not read whole, and a plain twin"), "{e}");
    assert!(plain.exists(), "the good copy kept");
    let _ = std::fs::remove_dir_all(&d);
}

/// A compressed segment cut short inside its zstd frame is an error naming the segment and the offset (in the
/// uncompressed bytes) of the block being read when zstd refused, not a bare "read" error.
#[test]
fn a_damaged_compressed_segment_is_named_with_the_block_offset() {
    let d = dir("zstd-damage");
    let (mut w, _) = Writer::open(config(&d, 1 << 20), meta(), 1).unwrap();
    for r in &records()[..20_000] {
        w.record(r, 2).unwrap();
        for closed in w.take_closed() {
            close_segment(&closed, true).unwrap();
        }
    }
    for closed in w.stop(StopReason::EndOfStream, 3).unwrap().1 {
        close_segment(&closed, true).unwrap();
    }
    let zst = d.join("esh4-000001.mdcap.zst");
    // Cut to half (a copy that stopped short): zstd's "incomplete frame".
    let bytes = std::fs::read(&zst).unwrap();
    std::fs::write(&zst, &bytes[..bytes.len() / 2]).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000001.mdcap.zst: offset ") && e.contains("zstd: "), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A user who can write the capture's folder plants symlinks at the names the writer is about to use (the lock,
/// an index's and a compressed segment's `.tmp`): the writer never writes through them (the targets stay as they
/// were), and a lock that is a symlink is refused.
#[test]
fn symlinks_planted_in_the_capture_folder_are_never_written_through() {
    let d = dir("symlinks");
    let outside = dir("symlinks-outside");
    let (precious, lock_target) = (outside.join("precious"), outside.join("created-by-lock"));
    std::fs::write(&precious, b"precious").unwrap();
    std::os::unix::fs::symlink(&lock_target, d.join("esh4.lock")).unwrap();
    let e = Writer::open(config(&d, u64::MAX), meta(), 1).err().expect("a symlinked lock is refused").to_string();
    assert!(e.contains("esh4.lock") && e.contains("open the lock (not a symlink)"), "{e}");
    assert!(!lock_target.exists(), "nothing created through the link");
    std::fs::remove_file(d.join("esh4.lock")).unwrap();
    let (mut w, _) = Writer::open(config(&d, u64::MAX), meta(), 1).unwrap();
    for r in &records()[..1_000] {
        w.record(r, 2).unwrap();
    }
    let (_, closed) = w.stop(StopReason::EndOfStream, 3).unwrap();
    for tmp in ["esh4-000001.mdidx.tmp", "esh4-000001.mdcap.zst.tmp"] {
        std::os::unix::fs::symlink(&precious, d.join(tmp)).unwrap();
    }
    close_segment(&closed[0], true).unwrap();
    assert_eq!(std::fs::read(&precious).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(d.join("esh4-000001.mdidx")).unwrap().is_file());
    let (recs, _) = read_all(&d);
    assert_eq!(recs.len(), 1_000);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&outside);
}

/// A segment put in from another capture of the same name (the same records, so its `first_record` fits) is
/// refused: it is of another writer run than the segment before it and not that run's first. A segment renamed
/// to another number is refused by its metadata's number.
#[test]
fn a_segment_spliced_in_from_another_capture_or_renamed_is_an_error() {
    let (a, b) = (five_plain_segments("splice-a"), five_plain_segments("splice-b"));
    for f in ["esh4-000002.mdcap", "esh4-000002.mdidx"] {
        std::fs::copy(b.join(f), a.join(f)).unwrap();
    }
    let e = read_error(&a);
    assert!(
        e.contains("esh4-000002.mdcap") && e.contains("of another writer run than segment 1 and not that run's first"),
        "{e}"
    );
    // Segments 4 and 5 swapped (with their indexes): the one read as 4 says 5.
    for ext in ["mdcap", "mdidx"] {
        let name = |n: u32| b.join(format!("esh4-{n:06}.{ext}"));
        std::fs::rename(name(4), name(0)).unwrap();
        std::fs::rename(name(5), name(4)).unwrap();
        std::fs::rename(name(0), name(5)).unwrap();
    }
    let e = read_error(&b);
    assert!(e.contains("esh4-000004.mdcap") && e.contains("its metadata says segment 5 of capture \"esh4\""), "{e}");
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// Block headers made again by hand (their CRCs right) that their payload or place does not bear out: a records
/// block whose header's first seq is not its first record's, and a block after a segment's stop block, are each
/// an error naming the segment and the offset.
#[test]
fn a_block_header_its_records_or_its_place_do_not_bear_out_is_an_error() {
    let d = five_plain_segments("header-lies");
    let seg2 = d.join("esh4-000002.mdcap");
    let (mut bytes, offsets) = (std::fs::read(&seg2).unwrap(), block_offsets(&seg2));
    let at = offsets[1];
    let h: &[u8; BLOCK_HEADER_BYTES] = bytes[at..at + BLOCK_HEADER_BYTES].try_into().unwrap();
    let h = BlockHeader::decode(h).unwrap();
    bytes[at..at + BLOCK_HEADER_BYTES].copy_from_slice(&BlockHeader { first: h.first + 1, ..h }.encode());
    std::fs::write(&seg2, bytes).unwrap();
    let e = read_error(&d);
    assert!(e.contains(&format!("esh4-000002.mdcap: offset {at}: block header (first seq")), "{e}");
    assert!(e.contains("is not its records'"), "{e}");
    let _ = std::fs::remove_dir_all(&d);

    // Two records of a block swapped (its ends, count and CRCs kept): a block's seqs rise.
    let d = five_plain_segments("block-reordered");
    let seg2 = d.join("esh4-000002.mdcap");
    let (mut bytes, offsets) = (std::fs::read(&seg2).unwrap(), block_offsets(&seg2));
    let (at, end) = (offsets[1], offsets[2]);
    let payload = at + BLOCK_HEADER_BYTES;
    let (r1, r2) = (payload + 64, payload + 128);
    let second: Vec<u8> = bytes[r1..r1 + 64].to_vec();
    bytes.copy_within(r2..r2 + 64, r1);
    bytes[r2..r2 + 64].copy_from_slice(&second);
    let h: &[u8; BLOCK_HEADER_BYTES] = bytes[at..at + BLOCK_HEADER_BYTES].try_into().unwrap();
    let crc = crc32fast::hash(&bytes[payload..end]);
    let h = BlockHeader { payload_crc: crc, ..BlockHeader::decode(h).unwrap() };
    bytes[at..at + BLOCK_HEADER_BYTES].copy_from_slice(&h.encode());
    std::fs::write(&seg2, bytes).unwrap();
    let e = read_error(&d);
    assert!(e.contains(&format!("esh4-000002.mdcap: offset {at}: record 2 of the block has seq")), "{e}");
    let _ = std::fs::remove_dir_all(&d);

    // A records block appended after segment 5's stop block, numbered on.
    let d = five_plain_segments("after-stop");
    let seg5 = d.join("esh4-000005.mdcap");
    let (mut bytes, offsets) = (std::fs::read(&seg5).unwrap(), block_offsets(&seg5));
    let (first, end) = (offsets[0], offsets[1]);
    let h: &[u8; BLOCK_HEADER_BYTES] = bytes[first..first + BLOCK_HEADER_BYTES].try_into().unwrap();
    let h = BlockHeader { number: offsets.len() as u32, ..BlockHeader::decode(h).unwrap() };
    let mut block = bytes[first..end].to_vec();
    block[..BLOCK_HEADER_BYTES].copy_from_slice(&h.encode());
    let stop_end = bytes.len();
    bytes.extend_from_slice(&block);
    std::fs::write(&seg5, bytes).unwrap();
    let e = read_error(&d);
    assert!(
        e.contains(&format!("esh4-000005.mdcap: offset {stop_end}: a block after the segment's stop block")),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Segment `seg` with a header-only block `h` put before its block `k` (the blocks from `k` on renumbered, CRCs
/// made again, as a hand-made splice would be) and its index removed (the blocks moved). Returns the offset of
/// the block put in.
fn insert_block(seg: &Path, k: usize, h: BlockHeader) -> usize {
    let (mut bytes, offsets) = (std::fs::read(seg).unwrap(), block_offsets(seg));
    for (n, &at) in offsets.iter().enumerate().skip(k) {
        let old: &[u8; BLOCK_HEADER_BYTES] = bytes[at..at + BLOCK_HEADER_BYTES].try_into().unwrap();
        let renumbered = BlockHeader { number: n as u32 + 1, ..BlockHeader::decode(old).unwrap() };
        bytes[at..at + BLOCK_HEADER_BYTES].copy_from_slice(&renumbered.encode());
    }
    let at = offsets[k];
    let spliced = [&bytes[..at], &BlockHeader { number: k as u32, ..h }.encode()[..], &bytes[at..]].concat();
    std::fs::write(seg, spliced).unwrap();
    std::fs::remove_file(seg.with_extension("mdidx")).unwrap();
    at
}

/// What a block's CRCs cannot tell (a block made by hand, its CRCs made again), a gap's place can: a gap block
/// begins past the last record (or at 1, opening a restarted session) and the record after it bears out its seq
/// that came. Before, a gap of seqs 1 to u64::MAX between two records that follow on read as 2^64 - 2 seqs
/// missed, in the report, the exports and a replay. An index entry that is not its block's, an index that is not
/// a file, and a segment of another feed or book are errors naming the file.
#[test]
fn a_gap_block_the_records_around_it_do_not_bear_out_or_an_index_or_a_segment_not_the_captures_is_an_error() {
    let gap = |first: u64, last: u64| BlockHeader {
        kind: mdfan_feed::capture::BlockKind::Gap,
        number: 0,
        count: 0,
        payload_bytes: 0,
        first,
        last,
        first_ts_recv_ns: 2,
        last_ts_recv_ns: 2,
        first_venue_pos: 0,
        payload_crc: crc32fast::hash(&[]),
    };
    // Block 2 of segment 2 begins at the seq after block 1's last record: a gap before it has no room.
    let d = five_plain_segments("gap-huge");
    let seg2 = d.join("esh4-000002.mdcap");
    let idx = std::fs::read(seg2.with_extension("mdidx")).unwrap();
    let next_seq = u64::from_le_bytes(idx[2 * 32 + 8..2 * 32 + 16].try_into().unwrap());
    let at = insert_block(&seg2, 2, gap(next_seq, u64::MAX));
    let e = read_error(&d);
    let next = at + BLOCK_HEADER_BYTES;
    assert!(
        e.contains(&format!(
            "esh4-000002.mdcap: offset {next}: record 0 of the block has seq {next_seq} after a gap block that says \
             seq {} came",
            u64::MAX
        )),
        "{e}"
    );
    assert!(report(&d, None).is_err(), "the report refuses it too");
    let _ = std::fs::remove_dir_all(&d);

    let d = five_plain_segments("gap-back");
    let seg2 = d.join("esh4-000002.mdcap");
    let at = insert_block(&seg2, 2, gap(50, 60));
    let e = read_error(&d);
    assert!(
        e.contains(&format!("esh4-000002.mdcap: offset {at}: a gap block from seq 50 to 60 after a record of seq "))
            && e.contains("a gap begins past the last record"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);

    // A gap at 1 opens a restarted session: one the records after it continue (a made-up restart with made-up
    // losses), and one just before the stop block (no session follows), are damage too.
    let d = five_plain_segments("gap-restart");
    let seg2 = d.join("esh4-000002.mdcap");
    let idx = std::fs::read(seg2.with_extension("mdidx")).unwrap();
    let next_seq = u64::from_le_bytes(idx[2 * 32 + 8..2 * 32 + 16].try_into().unwrap());
    let at = insert_block(&seg2, 2, gap(1, next_seq));
    let e = read_error(&d);
    assert!(
        e.contains(&format!(
            "esh4-000002.mdcap: offset {}: record 0 of the block has seq {next_seq} after a gap block that opens a \
             restarted session (seqs 1 to {next_seq}), but it goes on from the record before the gap ({})",
            at + BLOCK_HEADER_BYTES,
            next_seq - 1
        )),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
    let d = five_plain_segments("gap-at-end");
    let seg5 = d.join("esh4-000005.mdcap");
    let stop = block_offsets(&seg5).len() - 1;
    let at = insert_block(&seg5, stop, gap(1, u64::MAX));
    let e = read_error(&d);
    let want = format!("esh4-000005.mdcap: offset {}: a stop block after a gap block from seq 1 to", at + 64);
    assert!(e.contains(&want) && e.contains("none follows"), "{e}");
    let _ = std::fs::remove_dir_all(&d);

    // Segment 3's index entries 1 and 2 swapped (its length right).
    let d = five_plain_segments("index-swapped");
    let index = d.join("esh4-000003.mdidx");
    let idx = std::fs::read(&index).unwrap();
    std::fs::write(&index, [&idx[..32], &idx[64..96], &idx[32..64], &idx[96..]].concat()).unwrap();
    let e = read_error(&d);
    assert!(
        e.contains("esh4-000003.mdidx) entry 1 (offset, first seq, first ts_recv_ns, first venue_pos) is [")
            && e.contains("the index is damaged or not this segment's"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);

    // Segment 3's index a folder.
    let d = five_plain_segments("index-folder");
    let index = d.join("esh4-000003.mdidx");
    std::fs::remove_file(&index).unwrap();
    std::fs::create_dir(&index).unwrap();
    let e = read_error(&d);
    assert!(e.contains("esh4-000003.mdidx) is not a regular file"), "{e}");
    let _ = std::fs::remove_dir_all(&d);

    // Segment 3's metadata (its CRC made again) says another book, or another feed.
    let mbp: fn(SegmentMeta) -> SegmentMeta = |m| SegmentMeta { book: "mbp".into(), ..m };
    let itch: fn(SegmentMeta) -> SegmentMeta =
        |m| SegmentMeta { feed: mdfan_wire::FeedIdentity::new("itch50", "XNAS.ITCH", ""), ..m };
    for (tag, other) in [("mbp", mbp), ("itch", itch)] {
        let d = five_plain_segments(&format!("other-{tag}"));
        let seg3 = d.join("esh4-000003.mdcap");
        let bytes = std::fs::read(&seg3).unwrap();
        let meta = mdfan_feed::capture::scan_segment(&seg3).unwrap().0;
        let old_header = 18 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
        let header = mdfan_feed::capture::segment_header(&other(meta));
        std::fs::write(&seg3, [&header[..], &bytes[old_header..]].concat()).unwrap();
        std::fs::remove_file(seg3.with_extension("mdidx")).unwrap();
        let e = read_error(&d);
        assert!(
            e.contains("esh4-000003.mdcap: offset 0: it is of ")
                && e.contains("esh4-000001.mdcap of format=dbn venue=GLBX.MDP3 ")
                && e.contains("a capture holds one feed"),
            "{tag}: {e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
