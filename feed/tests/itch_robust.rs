//! ITCH and MoldUDP64 on bad input: random bytes never panic, unknown types are skipped by their length and
//! counted, a gzip file reads as the plain one, and a cut or corrupt file is refused naming the file and offset.

use std::io::Write;
use std::path::{Path, PathBuf};

use mdfan_feed::itch::{
    decode_message, eastern_midnight_ns, stock_directory, ItchFile, ItchFileError, ItchNormalizer, Problem,
};
use mdfan_feed::moldudp64::Packet;
use proptest::prelude::*;

fn snippet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_SNIPPET.NASDAQ_ITCH50")
}

/// Decodes a BinaryFILE held in memory to its end or first error; normalises what decodes.
fn walk(bytes: &[u8]) -> (u64, Result<(), ItchFileError>) {
    let mut f = ItchFile::from_reader(Path::new("mem.itch"), bytes);
    let mut norm = ItchNormalizer::new(0, 16);
    let mut n = 0u64;
    loop {
        match f.next_message() {
            Ok(Some((_, m))) => {
                n += 1;
                let _ = norm.normalize(&m, n, 0);
            }
            Ok(None) => return (f.stats().messages, Ok(())),
            Err(e) => return (f.stats().messages, Err(e)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_message(&bytes, 0);
        let _ = walk(&bytes);
        if let Ok(p) = Packet::parse(&bytes) {
            for b in p.messages() {
                let _ = decode_message(b.message, b.offset as u64);
            }
        }
    }

    /// Random messages of every type byte, well framed: known types decode or are refused, unknown ones are
    /// skipped and counted, and the stream always goes on to the end when nothing is refused.
    #[test]
    fn framed_random_messages_never_panic(msgs in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..60)), 0..20)) {
        let mut file = Vec::new();
        for (t, body) in &msgs {
            file.extend_from_slice(&((body.len() + 1) as u16).to_be_bytes());
            file.push(*t);
            file.extend_from_slice(body);
        }
        let (n, r) = walk(&file);
        if r.is_ok() {
            prop_assert_eq!(n, msgs.len() as u64);
        }
    }
}

#[test]
fn unknown_types_are_skipped_by_length_and_counted() {
    let real = std::fs::read(snippet()).unwrap();
    // Two unknown types (`z`, 7 bytes, and 0xF0, 1 byte) before, one between and after the real messages.
    let mut file = vec![0, 7, b'z', 1, 2, 3, 4, 5, 6, 0, 1, 0xF0];
    let first_len = usize::from(u16::from_be_bytes([real[0], real[1]]));
    file.extend_from_slice(&real[..2 + first_len]);
    file.extend_from_slice(&[0, 3, b'~', 0, 0]);
    file.extend_from_slice(&real[2 + first_len..]);
    file.extend_from_slice(&[0, 0x20]);
    file.extend_from_slice(&[b'!'; 0x20]);
    let mut f = ItchFile::from_reader(Path::new("mixed.itch"), &file[..]);
    while f.next_message().unwrap().is_some() {}
    let s = f.stats();
    assert_eq!((s.messages, s.unknown), (1004, 4));
    assert_eq!((s.of(b'z'), s.of(0xF0), s.of(b'~'), s.of(b'!')), (1, 1, 1, 1));
    assert_eq!((s.of(b'S'), s.of(b'A'), s.of(b'U')), (1, 367, 225));
}

#[test]
fn gzip_reads_as_the_plain_file() {
    let real = std::fs::read(snippet()).unwrap();
    let dir = std::env::temp_dir().join(format!("mdfan-itch-gz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gz = dir.join("snippet.itch.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&real).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let read_all = |p: &Path| {
        let mut f = ItchFile::open(p).unwrap();
        let mut v = Vec::new();
        while let Some(m) = f.next_message().unwrap() {
            v.push(m);
        }
        v
    };
    let (plain, zipped) = (read_all(&snippet()), read_all(&gz));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(plain.len(), 1000);
    assert_eq!(plain, zipped);
    assert_eq!(plain.last().map(|(off, _)| *off), Some(35_570 - 2 - 35), "the last message is a U (35 bytes)");
}

#[test]
fn cut_and_corrupt_files_name_the_file_and_offset() {
    let real = std::fs::read(snippet()).unwrap();
    // Cut inside the last message.
    let (n, r) = walk(&real[..real.len() - 5]);
    assert_eq!(n, 999);
    match r {
        Err(ItchFileError::Truncated { path, offset, what: "message", .. }) => {
            assert_eq!((path.to_str(), offset), (Some("mem.itch"), 35_533));
        }
        other => panic!("{other:?}"),
    }
    // Cut inside a length prefix.
    let (_, r) = walk(&real[..1]);
    assert!(matches!(r, Err(ItchFileError::Truncated { offset: 0, what: "length prefix", .. })), "{r:?}");
    // The first message (D, 19 bytes) claims 5: too short for its type.
    let mut bad = real.clone();
    bad[1] = 5;
    let (_, r) = walk(&bad);
    let Err(ItchFileError::Decode { source, .. }) = r else { panic!("{r:?}") };
    assert_eq!((source.offset, source.msg_type, source.field), (0, b'D', "length"));
    assert_eq!(source.problem, Problem::Truncated { have: 5, need: 19 });
    assert_eq!(
        source.to_string(),
        "ITCH message at byte 0, type D (Order Delete), field length: 5 bytes, the type has 19"
    );
    // The first add (message 6, at byte 126): buy/sell is neither B nor S.
    let mut bad = real;
    bad[126 + 2 + 19] = b'Q';
    let (n, r) = walk(&bad);
    assert_eq!(n, 5);
    let Err(ItchFileError::Decode { source, .. }) = r else { panic!("{r:?}") };
    assert_eq!((source.offset, source.msg_type, source.field), (126, b'A', "buy/sell"));
    assert_eq!(
        source.to_string(),
        "ITCH message at byte 126, type A (Add Order), field buy/sell: value 81 (0x51) is not one the specification allows"
    );
    assert!(ItchFile::open(Path::new("/nonexistent/x.itch")).is_err());
    let _ = eastern_midnight_ns(2019, 12, 30).unwrap();
}

#[test]
fn a_zero_length_prefix_is_an_error_naming_the_offset_after_the_messages_before_it() {
    let real = std::fs::read(snippet()).unwrap();
    // A zero length prefix after the first message (D, 19 bytes: ends at byte 21).
    let mut file = real[..21].to_vec();
    file.extend_from_slice(&[0, 0]);
    file.extend_from_slice(&real[21..]);
    let (n, r) = walk(&file);
    assert_eq!(n, 1, "the message before it was read");
    let Err(ItchFileError::Decode { source, .. }) = r else { panic!("{r:?}") };
    assert_eq!((source.offset, source.problem), (21, Problem::Empty));
    assert!(source.to_string().contains("byte 21"), "{source}");
}

/// A zero length prefix is refused where it is, by the Stock Directory pass before the replay too. That pass used
/// to skip it as a message that is not `R`, read the next message's type and first byte as a length, and report
/// the file cut 2 bytes further on (`byte 20409: ends inside a message (20463 of 20993 bytes)`), or, in a longer
/// file, skip 20,993 bytes and decode from the middle of a message.
#[test]
fn an_empty_message_is_refused_at_its_offset_by_the_stock_directory_pass() {
    let first1000 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data/nasdaq-itch50-20191230-binaryfile-excerpts/12302019_first1000.itch");
    let mut bad = std::fs::read(first1000).unwrap();
    // Message 501 (an R of 39 bytes) at byte 20,407: its length prefix set to 0.
    assert_eq!((&bad[20_407..20_410], bad.len()), (&[0, 39, b'R'][..], 40_874));
    bad[20_408] = 0;
    let dir = std::env::temp_dir().join(format!("mdfan-itch-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.itch");
    std::fs::write(&path, &bad).unwrap();
    let (defs, stopped) = stock_directory(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // The pass stops there, keeping the definitions before it (495 R messages among the 500).
    assert_eq!((defs.len(), defs.symbol(1)), (495, Some("A")));
    let Some(ItchFileError::Decode { source, .. }) = stopped else { panic!("{stopped:?}") };
    assert_eq!((source.offset, source.msg_type, source.field, source.problem), (20_407, 0, "length", Problem::Empty));
    // The replay refuses it at the same place, after the 500 messages before it.
    let (n, r) = walk(&bad);
    assert_eq!(n, 500);
    let Err(ItchFileError::Decode { source: replayed, .. }) = r else { panic!("{r:?}") };
    assert_eq!(replayed, source);
    // The error line names the place and the field in words, with no control byte for the missing type.
    assert_eq!(
        source.to_string(),
        "ITCH message at byte 20407, type 0x00 (unknown), field length: 0 bytes, a message has at least its type byte"
    );
}

/// A NOII (`I`, spec 4.6, 50 bytes) of locate 1 whose cross type is `cross_type`.
fn noii(cross_type: u8) -> Vec<u8> {
    let mut m = vec![b'I', 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    m.extend(100u64.to_be_bytes()); // paired shares
    m.extend(20u64.to_be_bytes()); // imbalance shares
    m.push(b'B');
    m.extend(b"AAPL    ");
    for _ in 0..3 {
        m.extend(2_900_000u32.to_be_bytes()); // far, near, current reference price
    }
    m.extend([cross_type, b' ']);
    assert_eq!(m.len(), 50);
    m
}

/// A LULD Auction Collar (`J`, spec 4.2.10, 35 bytes) of locate 1.
fn luld_collar() -> Vec<u8> {
    let mut m = vec![b'J', 0, 1, 0, 0, 0, 0, 0, 0, 0, 2];
    m.extend(b"AAPL    ");
    for p in [2_900_000u32, 3_000_000, 2_800_000, 1] {
        m.extend(p.to_be_bytes());
    }
    assert_eq!(m.len(), 35);
    m
}

fn framed(m: &[u8]) -> Vec<u8> {
    let mut f = (m.len() as u16).to_be_bytes().to_vec();
    f.extend(m);
    f
}

#[test]
fn skipped_messages_are_counted_by_type_with_the_first_ones_byte_offset() {
    let real = std::fs::read(snippet()).unwrap();
    let first_len = 2 + usize::from(u16::from_be_bytes([real[0], real[1]]));
    // After the snippet's first message: a NOII of an unknown cross type `Z`, a `J`, an unknown type `z`.
    let inserted = [noii(b'Z'), luld_collar(), vec![b'z', 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 9, 9]];
    let mut file = real[..first_len].to_vec();
    let mut at = Vec::new();
    for m in &inserted {
        at.push(file.len() as u64);
        file.extend(framed(m));
    }
    file.extend(&real[first_len..]);
    let skipped_of = |bytes: &[u8]| {
        let mut f = ItchFile::from_reader(Path::new("mem.itch"), bytes);
        let mut norm = ItchNormalizer::new(0, 1 << 12);
        let mut out = mdfan_feed::itch::Records::default();
        let mut n = 0;
        while let Some((offset, m)) = f.next_message().unwrap() {
            n += 1;
            norm.normalize_at(&m, n, 0, offset, &mut out);
        }
        norm.stats().skipped.clone()
    };
    let (plain, got) = (skipped_of(&real), skipped_of(&file));
    let plain_count = |t: u8| plain.get(t).map_or(0, |(n, _)| n);
    assert_eq!(got.get(b'I'), Some((plain_count(b'I') + 1, at[0])), "NOII: every one, the inserted one first");
    assert_eq!(got.get(b'J'), Some((plain_count(b'J') + 1, at[1])));
    assert_eq!(got.get(b'z'), Some((1, at[2])), "an unknown type, skipped by its length");
    assert_eq!(got.total(), plain.total() + 3);
    assert_eq!((at[0], at[1], at[2]), (first_len as u64, first_len as u64 + 52, first_len as u64 + 89));
    let line = got.to_string();
    assert!(line.contains(&format!("I:{}@{}", plain_count(b'I') + 1, at[0])), "{line}");
    assert!(line.contains(&format!(",z:1@{}", at[2])), "{line}");
}
