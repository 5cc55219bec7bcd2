//! The colo example config (ops/colo-mdp3.toml) run as it is, on a stand-in for a colo host: two network
//! namespaces the test makes, an "exchange" and a "colo host", joined by two veth pairs as the host's two NICs
//! with the config's own addresses (NIC 1 192.0.2.10, NIC 2 198.51.100.10; the exchange sends from 192.0.2.1 and
//! 198.51.100.1, the config's sources). `mdfan-feedsim` plays the bundled CME capture in the exchange namespace
//! as both of the config's channels (310 as captured, 311 with every `SecurityID` moved by 1,000,000), each with
//! its market recovery loop and its instrument definition loop, by multicast routed out of the exchange's
//! interfaces (every line B out of NIC 2's link, everything else out of NIC 1's). The publisher binds its lines
//! in the colo namespace; subscribers attach there over shm.
//!
//! What the test changes in the config is only what this host cannot have: the verbs provider (shm), the cores,
//! mlockall, the control endpoint (loopback, port 0) and an end after 3 s of silence. Everything under
//! `[lines]` and `[[feed.channels]]` is the file's.
//!
//! Checked: both channels' books exact (data/cme-mdp3-sbe-v8-pcap-20160927/README.md, "Book replay"), lines A
//! and B of each channel on their own device (`lines` report: `device=`), no datagram from a source the lines do
//! not list, and the symbols from the definition feeds (no symbol file in the config).
//!
//! Needs root (network namespaces, veth, `setns`): as another user it says SKIP on stderr, which `.ci/run`
//! refuses. Nothing leaves the namespaces: they reach only each other.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_feedsim::{run, DefinitionsConfig, Mdp3, MulticastScope, RecoveryConfig, SimConfig};
use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{CloseReason, Event, Health, InstrumentDef, MbpBooks, Subscriber, SubscriberConfig};

#[path = "../../feed/tests/support/mdp3.rs"]
mod mdp3_ref;
use mdp3_ref::SECURITY;

const OFFSET: u32 = 1_000_000;
const WATCHDOG: Duration = Duration::from_secs(180);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2) runs");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// The two namespaces and their veth pairs; deleted (with the veths) when dropped.
struct Hosts {
    exchange: String,
    colo: String,
    /// The colo host's two NICs (the veth ends in its namespace).
    nics: [String; 2],
}

impl Hosts {
    fn make() -> Hosts {
        let id = std::process::id();
        let (exchange, colo) = (format!("mdfan-ex-{id}"), format!("mdfan-colo-{id}"));
        let _ = Command::new("ip").args(["netns", "del", &exchange]).output();
        let _ = Command::new("ip").args(["netns", "del", &colo]).output();
        ip(&["netns", "add", &exchange]);
        let hosts = Hosts { exchange, colo, nics: [format!("mn1-{id}"), format!("mn2-{id}")] };
        ip(&["netns", "add", &hosts.colo]);
        let (ex, co) = (hosts.exchange.as_str(), hosts.colo.as_str());
        for (i, (ex_addr, nic_addr)) in
            [("192.0.2.1/24", "192.0.2.10/24"), ("198.51.100.1/24", "198.51.100.10/24")].into_iter().enumerate()
        {
            let (ex_end, nic) = (format!("mx{}-{id}", i + 1), hosts.nics[i].as_str());
            ip(&["link", "add", &ex_end, "type", "veth", "peer", "name", nic]);
            ip(&["link", "set", &ex_end, "netns", ex]);
            ip(&["link", "set", nic, "netns", co]);
            ip(&["-n", ex, "addr", "add", ex_addr, "dev", &ex_end]);
            ip(&["-n", co, "addr", "add", nic_addr, "dev", nic]);
            ip(&["-n", ex, "link", "set", &ex_end, "up"]);
            ip(&["-n", co, "link", "set", nic, "up"]);
        }
        for ns in [ex, co] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // The exchange's multicast: every line B out of NIC 2's link, the rest out of NIC 1's.
        ip(&["-n", ex, "route", "add", "233.252.14.0/24", "dev", &format!("mx1-{id}")]);
        for b in ["233.252.14.2", "233.252.14.6"] {
            ip(&["-n", ex, "route", "add", &format!("{b}/32"), "dev", &format!("mx2-{id}")]);
        }
        hosts
    }

    /// Moves the calling thread into namespace `name`.
    fn enter(name: &str) {
        let f = std::fs::File::open(format!("/var/run/netns/{name}")).expect("the namespace's file");
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in [&self.exchange, &self.colo] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// The colo config with only what this host cannot have changed (module docs).
fn colo_config() -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/colo-mdp3.toml");
    let mut t: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let publisher = t["publisher"].as_table_mut().unwrap();
    for key in ["hot_core", "control_core", "lock_memory"] {
        publisher.remove(key).expect("the colo config sets it");
    }
    publisher.insert("listen".into(), "127.0.0.1:0".into());
    publisher.insert("counters_dir".into(), "".into());
    let fabric = t["fabric"].as_table_mut().unwrap();
    fabric.remove("verbs").expect("the colo config has [fabric.verbs]");
    fabric.insert("provider".into(), "shm".into());
    t["lines"].as_table_mut().unwrap().insert("end_after_idle_ms".into(), 3_000.into());
    Config::parse(&toml::to_string(&t).unwrap(), &path).expect("the colo config parses")
}

struct Seen {
    books: MbpBooks,
    gaps: u64,
    end: Option<CloseReason>,
    symbols: Vec<Option<String>>,
}

/// A subscriber in the colo namespace (its control connection is the namespace's loopback).
fn subscribe(
    colo: String,
    endpoint: String,
    name: &'static str,
    symbols: Option<Vec<String>>,
) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        Hosts::enter(&colo);
        let mut cfg = SubscriberConfig::new(&endpoint, name);
        cfg.symbols = symbols;
        cfg.ring_slots = 16_384;
        let mut sub = Subscriber::connect(&cfg).expect("subscribe");
        let symbols = [SECURITY, SECURITY + OFFSET].map(|id| sub.symbol(id).map(str::to_owned)).to_vec();
        let mut seen = Seen { books: MbpBooks::with_capacity(128), gaps: 0, end: None, symbols };
        let deadline = Instant::now() + WATCHDOG;
        loop {
            assert!(Instant::now() < deadline, "watchdog: subscriber {name} not ended");
            let n = sub.poll(256, |e| match e {
                Event::Record(r) => seen.books.apply(r).expect("a price-level record the book takes"),
                Event::Gap { .. } => seen.gaps += 1,
                _ => {}
            });
            if n == 0 {
                std::thread::yield_now();
            }
            if let Some(Health::Ended(end)) = sub.maintain_if_due() {
                seen.end = end.reason();
                return seen;
            }
        }
    })
}

fn exact(who: &str, seen: &Seen, id: u32) {
    mdp3_ref::assert_reference_book(who, seen.books.get(id), id);
}

#[test]
fn the_colo_config_runs_two_channels_over_two_nics_exact_with_symbols_from_the_definition_feeds() {
    if !nix::unistd::geteuid().is_root() {
        {
            // on the process's stderr, not the test's captured output: .ci/run must see it
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIP colo netns: needs root (network namespaces, veth, setns)");
        }
        return;
    }
    let hosts = Hosts::make();
    let cfg = colo_config();
    let mdfan_publisher::config::FeedConfig::Mdp3(feed) = &cfg.feed else { panic!("the colo config is mdp3") };
    let channels = feed.channels();
    // The publisher binds in the colo namespace (its sockets stay there; its threads inherit it).
    let (tx, rx) = std::sync::mpsc::channel();
    let colo = hosts.colo.clone();
    let publisher = std::thread::spawn(move || {
        Hosts::enter(&colo);
        let p = Publisher::bind(cfg).expect("the publisher binds the colo config's lines on the two NICs");
        tx.send(p.local_addr().to_string()).unwrap();
        p.run(Arc::new(AtomicBool::new(false)))
    });
    let endpoint = rx.recv().expect("the publisher bound");
    let early = subscribe(hosts.colo.clone(), endpoint.clone(), "early", None);

    // The exchange: one player per channel, from the config's own groups.
    let six_c = mdfan_feed::symbols::load_symbol_file(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/mdp3-symbols.csv"),
    )
    .unwrap()
    .get(SECURITY)
    .cloned()
    .unwrap();
    let players: Vec<_> = channels
        .iter()
        .map(|c| {
            let ch311 = c.id == 311;
            let def = if ch311 {
                InstrumentDef { instrument_id: SECURITY + OFFSET, symbol: "6CZ6-311".into(), ..six_c.clone() }
            } else {
                six_c.clone()
            };
            let group = |l: &mdfan_publisher::config::LineAddr| -> SocketAddrV4 { l.addr };
            let sim = SimConfig {
                pcap: mdp3_ref::capture_path(),
                line_a: None,
                line_b: None,
                send_a: group(&c.a),
                send_b: group(&c.b),
                speed: 0.0,
                impair_a: Default::default(),
                impair_b: Default::default(),
                seed: 1,
                drop_seqs: None,
                recovery: c.snapshot.as_ref().map(|s| RecoveryConfig::new(s.addr)),
                multicast: MulticastScope::NamespaceRoutes,
                definitions: Some(DefinitionsConfig {
                    addr: c.definitions.as_ref().expect("the colo config has definition feeds").addr,
                    instruments: vec![def],
                    interval_ms: 20,
                }),
            };
            let exchange = hosts.exchange.clone();
            std::thread::spawn(move || {
                Hosts::enter(&exchange);
                let offset = if ch311 { OFFSET as i32 } else { 0 };
                run(&sim, &mut Mdp3 { security_id_offset: offset }, &AtomicBool::new(false))
                    .expect("the exchange plays")
            })
        })
        .collect();
    let summaries: Vec<_> = players.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(summaries.iter().all(|s| s.lines.iter().all(|l| l.sent == 5_000)), "clean lines");
    let late = subscribe(hosts.colo.clone(), endpoint, "late", Some(vec!["6CZ6".into(), "6CZ6-311".into()]));
    let report = publisher.join().unwrap().expect("the publisher runs");
    let (early, late) = (early.join().unwrap(), late.join().unwrap());

    assert_eq!(report.live.iter().map(|l| l.channel).collect::<Vec<_>>(), [310, 311]);
    for l in &report.live {
        assert_eq!(
            (l.datagrams, l.foreign),
            ([5_000, 5_000], [0, 0]),
            "every datagram from a listed source: {}",
            l.line()
        );
        assert_eq!((l.delivered[0] + l.delivered[1], l.gap_seqs, l.level_records), (5_000, 0, 5_848), "{}", l.line());
        assert_eq!((l.definitions, l.bad_definition_packets, l.instrument_collisions), (1, 0, 0), "{}", l.line());
        // Line A came in on NIC 1, line B on NIC 2.
        assert!(
            l.hw[0].starts_with("line=a ") && l.hw[0].contains(&format!(" device={} ", hosts.nics[0])),
            "{:?}",
            l.hw
        );
        assert!(
            l.hw[1].starts_with("line=b ") && l.hw[1].contains(&format!(" device={} ", hosts.nics[1])),
            "{:?}",
            l.hw
        );
    }
    assert_eq!(report.end, CloseReason::EndOfStream);
    assert_eq!((early.gaps, early.end, early.books.len()), (0, Some(CloseReason::EndOfStream), 78));
    exact("early", &early, SECURITY);
    exact("early", &early, SECURITY + OFFSET);
    assert_eq!(late.symbols, [Some("6CZ6".to_owned()), Some("6CZ6-311".to_owned())], "from the definition feeds");
    assert_eq!((late.gaps, late.books.len()), (0, 2));
    exact("late", &late, SECURITY);
    exact("late", &late, SECURITY + OFFSET);
    drop(hosts);
}
