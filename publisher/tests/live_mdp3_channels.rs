//! Two CME MDP 3.0 channels in one publisher (`[[feed.channels]]`): `mdfan-feedsim` plays the bundled capture
//! twice at once, as channel 310 and as channel 311 with every `SecurityID` moved by 1,000,000, each on its own
//! loopback lines A and B with 2% seeded loss per line, its own market recovery (snapshot) feed and its own
//! instrument definition loop. No symbol file: the symbols come from the definition feeds (channel 310's loop
//! defines 174969 as `6CZ6` with the display factor and tick of ops/mdp3-symbols.csv, channel 311's defines
//! 1174969 as `6CZ6-311`). Channel 311 also loses `MsgSeqNum`s 17,350,000 to 17,350,039 on both lines.
//!
//! Each channel's books must be exact (data/cme-mdp3-sbe-v8-pcap-20160927/README.md, "Book replay"), each
//! channel's records carry its id in their venue position, channel 311's hole marks only its own securities
//! stale and its own snapshot feed recovers them, and the counters (run report, counters file) are per channel.
//!
//! As in `live_mdp3.rs`: 32 MiB receive buffers and a 10 s gap timeout, so neither a kernel drop nor a host
//! stall decides a gap; losses are decided by both lines moving past a seq.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_feedsim::{run, DefinitionsConfig, Impairment, Mdp3, RecoveryConfig, SimConfig, Summary};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{
    flags, CloseReason, Event, Health, InstrumentDef, Kind, MbpBooks, Subscriber, SubscriberConfig,
};

#[path = "../../feed/tests/support/mdp3.rs"]
mod mdp3_ref;
use mdp3_ref::SECURITY;

const PACKETS: u64 = 5_000;
const LEVEL_RECORDS: u64 = 5_848;
const SECURITIES: usize = 39;
const OFFSET: u32 = 1_000_000;
const LOST: (u64, u64) = (17_350_000, 17_350_039);
const WATCHDOG: Duration = Duration::from_secs(180);

/// What one subscriber saw.
struct Seen {
    books: MbpBooks,
    gaps: u64,
    /// Level records (not snapshot) by the channel in their venue position.
    levels_by_channel: BTreeMap<u16, u64>,
    /// Records whose channel is not the one their instrument belongs to.
    wrong_channel: u64,
    /// Live stale marks, by channel.
    stale_by_channel: BTreeMap<u16, u64>,
    snapshots: u64,
    end: Option<CloseReason>,
    symbols: Vec<(u32, Option<String>, String)>,
}

fn channel_of(instrument_id: u32) -> u16 {
    if instrument_id >= OFFSET {
        311
    } else {
        310
    }
}

fn subscribe(endpoint: &str, name: &str, symbols: Option<Vec<String>>) -> JoinHandle<Seen> {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.symbols = symbols;
    cfg.ring_slots = 16_384;
    let mut sub = Subscriber::connect(&cfg).expect("subscribe");
    let symbols = [SECURITY, SECURITY + OFFSET]
        .map(|id| (id, sub.symbol(id).map(str::to_owned), sub.format_price(id, 75_805 * 100_000_000)))
        .to_vec();
    // Ready once the ring has had its first completion (a heartbeat): the hot loop serves the session. A live
    // feed starts at once and `connect` returns at the Accept, before that (live_mdp3.rs's `subscribe`, where a
    // sender that ran ahead on a loaded host made a session begin from a snapshot).
    let (ready, is_ready) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let mut ready = Some(ready);
        let mut seen = Seen {
            books: MbpBooks::with_capacity(128),
            gaps: 0,
            levels_by_channel: BTreeMap::new(),
            wrong_channel: 0,
            stale_by_channel: BTreeMap::new(),
            snapshots: 0,
            end: None,
            symbols,
        };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber not ended");
            let n = sub.poll(256, |e| match e {
                Event::Record(r) => {
                    let live = r.flags & flags::SNAPSHOT == 0;
                    if r.kind().is_some_and(Kind::is_level) && live {
                        *seen.levels_by_channel.entry(r.venue_channel()).or_default() += 1;
                    }
                    if r.kind().is_some_and(Kind::is_level) && r.venue_channel() != channel_of(r.instrument_id) {
                        seen.wrong_channel += 1;
                    }
                    if r.kind() == Some(Kind::InstrumentStale) && live {
                        *seen.stale_by_channel.entry(r.venue_channel()).or_default() += 1;
                    }
                    seen.books.apply(r).expect("a price-level record the book takes");
                }
                Event::Gap { .. } => seen.gaps += 1,
                _ => {}
            });
            if n == 0 {
                std::thread::yield_now();
            } else if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            if let Some(Health::Ended(end)) = sub.maintain_if_due() {
                seen.end = end.reason();
                seen.snapshots = sub.stats().snapshots_received;
                return seen;
            }
        }
    });
    let _ = is_ready.recv_timeout(WATCHDOG);
    handle
}

fn assert_reference(who: &str, seen: &Seen, id: u32) {
    mdp3_ref::assert_reference_book(who, seen.books.get(id), id);
}

#[test]
fn two_channels_in_one_publisher_each_exact_with_their_own_ids_stale_marks_recovery_and_counters() {
    let dir = std::env::temp_dir().join(format!("mdfan-channels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let line = "127.0.0.1:0";
    let entry = |id: u16| {
        format!("[[feed.channels]]\nid = {id}\na = \"{line}\"\nb = \"{line}\"\nsnapshot = \"{line}\"\ndefinitions = \"{line}\"\n\n")
    };
    let text = format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = {dir:?}\nkeep_counters = true\n\n[feed]\nformat = \"mdp3\"\n\n\
         [lines]\ngap_timeout_ms = 10000\nend_after_idle_ms = 3000\nrecovery_timeout_ms = 1000\n\n{}{}[fabric]\nprovider = \"shm\"\n",
        entry(310),
        entry(311)
    );
    let publisher = Publisher::bind(Config::parse(&text, Path::new("channels-test.toml")).expect("config parses"))
        .expect("publisher binds both channels' lines");
    let endpoint = publisher.local_addr().to_string();
    let channels = publisher.channels().to_vec();
    assert_eq!(channels.iter().map(|c| c.id).collect::<Vec<_>>(), [310, 311]);
    assert!(publisher.feed_name().starts_with("mdp3 channel=310 line_a=127.0.0.1:"), "{}", publisher.feed_name());
    let publisher = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));
    let all = subscribe(&endpoint, "all", None);

    let six_c = mdfan_feed::symbols::load_symbol_file(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/mdp3-symbols.csv"),
    )
    .unwrap()
    .get(SECURITY)
    .cloned()
    .unwrap();
    let sims: Vec<JoinHandle<Summary>> = channels
        .iter()
        .map(|c| {
            let ch311 = c.id == 311;
            let def = if ch311 {
                InstrumentDef { instrument_id: SECURITY + OFFSET, symbol: "6CZ6-311".into(), ..six_c.clone() }
            } else {
                six_c.clone()
            };
            let loss = Impairment { loss: 0.02, ..Impairment::default() };
            let cfg = SimConfig {
                pcap: mdp3_ref::capture_path(),
                line_a: None,
                line_b: None,
                send_a: c.lines[0],
                send_b: c.lines[1],
                speed: 0.0,
                impair_a: loss,
                impair_b: loss,
                seed: if ch311 { 7 } else { 13 },
                drop_seqs: ch311.then_some(LOST),
                recovery: c.snapshot.map(RecoveryConfig::new),
                multicast: Default::default(),
                definitions: Some(DefinitionsConfig {
                    addr: c.definitions.expect("a definition feed"),
                    instruments: vec![def],
                    interval_ms: 20,
                }),
            };
            let offset = if ch311 { OFFSET as i32 } else { 0 };
            std::thread::spawn(move || {
                run(&cfg, &mut Mdp3 { security_id_offset: offset }, &AtomicBool::new(false)).expect("plays")
            })
        })
        .collect();
    let summaries: Vec<Summary> = sims.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(summaries[1].lines[0].dropped_by_seq, 40);
    assert!(summaries.iter().all(|s| s.definitions_sent.is_some_and(|n| n > 0)));
    // After both captures, a late joiner asks for both instruments by the symbols the definition feeds gave.
    let late = subscribe(&endpoint, "late", Some(vec!["6CZ6".into(), "6CZ6-311".into()]));
    let report = publisher.join().expect("publisher thread").expect("publisher run");
    let (all, late) = (all.join().unwrap(), late.join().unwrap());

    // Per channel: both channels' packets once each, channel 311's hole lost on both lines and recovered.
    assert_eq!(report.live.iter().map(|l| l.channel).collect::<Vec<_>>(), [310, 311]);
    for l in &report.live {
        let lost = if l.channel == 311 { 40 } else { 0 };
        assert_eq!(l.delivered[0] + l.delivered[1], PACKETS - lost, "{}", l.line());
        assert_eq!((l.gap_seqs, l.bad_packets, l.instrument_collisions), (lost, 0, 0), "{}", l.line());
        assert_eq!((l.definitions, l.bad_definition_packets), (1, 0), "one instrument defined: {}", l.line());
        assert!(l.definition_packets > 0, "{}", l.line());
        assert_eq!((l.stale_now, l.recovery_timeouts), (0, 0), "{}", l.line());
        assert!(l.line().starts_with(&format!("feed format=mdp3 channel={} datagrams=", l.channel)));
    }
    let (l310, l311) = (&report.live[0], &report.live[1]);
    assert_eq!((l310.level_records, l310.stale_records, l310.recovered), (LEVEL_RECORDS, 0, 0));
    assert!(l311.stale_records > 0 && l311.recovered > 0, "{}", l311.line());
    assert_eq!(report.end, CloseReason::EndOfStream);

    // The subscriber that saw it all: both channels' books exact, each record under its own channel.
    assert_eq!((all.gaps, all.end, all.wrong_channel), (0, Some(CloseReason::EndOfStream), 0));
    assert_eq!(all.books.len(), 2 * SECURITIES);
    assert_reference("all", &all, SECURITY);
    assert_reference("all", &all, SECURITY + OFFSET);
    assert!(all.books.iter().all(|b| !b.is_stale()), "every book recovered");
    assert_eq!(all.levels_by_channel.get(&310), Some(&LEVEL_RECORDS));
    assert!(
        all.levels_by_channel.get(&311).is_some_and(|n| *n < LEVEL_RECORDS),
        "channel 311 lost 40 packets' entries"
    );
    assert_eq!(all.stale_by_channel.get(&310), None, "channel 310 lost nothing: never stale");
    assert_eq!(all.stale_by_channel.get(&311), Some(&l311.stale_records));
    for b in all.books.iter() {
        assert_eq!(channel_of(b.instrument_id()), (b.last_venue_pos() >> 48) as u16);
    }
    // Symbols before the definitions came: none (the early subscriber attached first).
    assert_eq!(all.symbols[0].1, None);

    // The late joiner, by symbol: the definition feeds named them, with 6C's display factor and tick.
    assert_eq!(
        late.symbols,
        [
            (SECURITY, Some("6CZ6".to_owned()), "0.75805".to_owned()),
            (SECURITY + OFFSET, Some("6CZ6-311".to_owned()), "0.75805".to_owned())
        ]
    );
    assert_eq!((late.books.len(), late.snapshots, late.gaps), (2, 1, 0));
    assert_reference("late", &late, SECURITY);
    assert_reference("late", &late, SECURITY + OFFSET);

    // The counters file: each channel's rows under its own label.
    let file = mdfan_publisher::counters_path(&dir, endpoint.parse().unwrap());
    let text = mdfan_tuning::counters::read(&file).expect("counters file").prometheus();
    let row = |name: &str, labels: &str| -> Option<u64> {
        let l = text.lines().find(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))?;
        l.rsplit(' ').next()?.parse().ok()
    };
    for (ch, levels) in [(310, l310.level_records), (311, l311.level_records)] {
        let labels = format!("channel=\"{ch}\"}}");
        assert_eq!(row("mdfan_feed_level_records_total", &labels), Some(levels), "{text}");
        assert_eq!(row("mdfan_feed_definitions_total", &labels), Some(1), "{text}");
    }
    let a311 = row("mdfan_line_delivered_total", "channel=\"311\",line=\"a\"}");
    assert_eq!(a311, Some(l311.delivered[0]), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One definition packet (`MsgSeqNum` `seq`) defining `id` as `symbol` with 6C's display factor and tick.
fn definition_packet(seq: u32, id: u32, symbol: &str) -> Vec<u8> {
    let mut p = Vec::new();
    mdfan_feed::mdp3::write_packet_header(&mut p, seq, 1);
    let mut symbol_bytes = [0u8; 20];
    symbol_bytes[..symbol.len()].copy_from_slice(symbol.as_bytes());
    let d = mdfan_feed::mdp3::InstrumentDefinition {
        template_id: 27,
        tot_num_reports: Some(1),
        update_action: b'A',
        last_update_time_ns: 7,
        symbol_bytes,
        security_id: id as i32,
        min_price_increment_e9: Some(500_000_000),
        display_factor_e9: 100_000,
    };
    mdfan_feed::mdp3::write_definition_message(&mut p, &d);
    p
}

/// A channel's definition feed is trusted for its own instruments only, and only from the sources it lists:
/// channel 310 owns 174969 by its symbol file; channel 311's definition feed lists 127.0.0.2. A definition of
/// 174969 from 127.0.0.2 (another channel's instrument), one with a blank symbol, and a forged one from 127.0.0.1
/// (not listed) are refused and counted; 1174969 from 127.0.0.2 is taken. A subscriber then finds 6CZ6 as the
/// file says and 6CZ6-311 as the feed says. Two channels' symbol files naming one id, or one symbol, are refused
/// at start.
#[test]
fn a_definition_feed_defines_its_own_channels_instruments_from_its_listed_sources_only() {
    let dir = std::env::temp_dir().join(format!("mdfan-defs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ops = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/mdp3-symbols.csv");
    let text = |ch311_symbols: &str| {
        format!(
            "[publisher]\nlisten = \"127.0.0.1:0\"\ncounters_dir = \"\"\n\n[feed]\nformat = \"mdp3\"\n\n[lines]\n\n\
             [[feed.channels]]\nid = 310\na = \"127.0.0.1:0\"\nb = \"127.0.0.1:0\"\nsymbols = {ops:?}\n\n\
             [[feed.channels]]\nid = 311\na = \"127.0.0.1:0\"\nb = \"127.0.0.1:0\"\n{ch311_symbols}\
             definitions = {{ addr = \"127.0.0.1:0\", sources = [\"127.0.0.2\"] }}\n\n[fabric]\nprovider = \"shm\"\n"
        )
    };
    // Overlapping symbol files are refused before anything is bound.
    let same_id = dir.join("same-id.csv");
    std::fs::write(&same_id, "security_id,symbol,display_factor,tick_size\n174969,OTHER,1,1\n").unwrap();
    let same_symbol = dir.join("same-symbol.csv");
    std::fs::write(&same_symbol, "security_id,symbol,display_factor,tick_size\n1174969,6CZ6,1,1\n").unwrap();
    for (file, want) in [
        (&same_id, "security_id 174969 (feed.channels[2].symbols) is also in feed.channels[1]'s symbol file"),
        (&same_symbol, "symbol 6CZ6 (feed.channels[2].symbols) is also in feed.channels[1]'s symbol file"),
    ] {
        let cfg = Config::parse(&text(&format!("symbols = {file:?}\n")), Path::new("defs.toml")).unwrap();
        let e = Publisher::bind(cfg).err().expect("refused").to_string();
        assert!(e.contains(want), "{e}");
    }

    let cfg = Config::parse(&text(""), Path::new("defs.toml")).unwrap();
    let publisher = Publisher::bind(cfg).expect("binds");
    let endpoint = publisher.local_addr().to_string();
    let ch311 = publisher.channels()[1].clone();
    let shutdown = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&shutdown);
    let publisher = std::thread::spawn(move || publisher.run(stop));
    let to = ch311.definitions.expect("a definition feed");
    let listed = std::net::UdpSocket::bind("127.0.0.2:0").expect("127.0.0.2 is loopback");
    let forger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    forger.send_to(&definition_packet(1, SECURITY + OFFSET, "FORGED"), to).unwrap();
    listed.send_to(&definition_packet(2, SECURITY, "EVIL"), to).unwrap();
    listed.send_to(&definition_packet(3, SECURITY + 7, ""), to).unwrap();
    listed.send_to(&definition_packet(4, SECURITY + OFFSET, "6CZ6-311"), to).unwrap();
    let c = &ch311.counters;
    let deadline = Instant::now() + WATCHDOG;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    while ld(&c.definition_packets) < 4 {
        assert!(Instant::now() < deadline, "watchdog: the definitions were not read");
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = c.report();
    assert_eq!(
        (r.definition_packets, r.side_foreign, r.definitions_refused, r.definitions, r.bad_definition_packets),
        (4, [0, 1], 2, 1, 0),
        "{}",
        r.line()
    );
    let mut cfg = SubscriberConfig::new(&endpoint, "by-symbol");
    cfg.symbols = Some(vec!["6CZ6".into(), "6CZ6-311".into()]);
    cfg.ring_slots = 1_024;
    // The conductor takes the definition in on one of its passes: asked until it knows both symbols.
    let sub = loop {
        match Subscriber::connect(&cfg) {
            Ok(sub) => break sub,
            Err(e) if e.to_string().contains("6CZ6-311 not known") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("both symbols known: {e}"),
        }
    };
    assert_eq!((sub.symbol(SECURITY), sub.symbol(SECURITY + OFFSET)), (Some("6CZ6"), Some("6CZ6-311")));
    assert_eq!(sub.format_price(SECURITY, 75_805 * 100_000_000), "0.75805", "the symbol file's, not the forgery's");
    cfg.symbols = Some(vec!["EVIL".into()]);
    assert!(Subscriber::connect(&cfg).is_err(), "a definition of another channel's instrument was not taken");
    drop(sub);
    shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
    publisher.join().unwrap().expect("the publisher ends on shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
