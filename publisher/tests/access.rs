//! Access control on the control connection: `[access]` lists the subscribers that may connect, each with its
//! token and entitlement. A subscriber without a token, with a wrong one, unknown, or asking for more than it
//! may have is refused with the reason; the accepted ones get the whole replay; SIGHUP's reload (the conductor's
//! reload flag) takes a new list for the subscriptions that come next.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdfan_publisher::config::Config;
use mdfan_publisher::Publisher;
use mdfan_subscriber::{Event, Health, SubscribeError, Subscriber, SubscriberConfig};

/// The bundled capture (data/README.md): 68,792 MBO records of ESH4, instrument_id 17077.
const RECORDS: u64 = 68_792;
const ESH4: u32 = 17_077;
const TOKEN_A: &str = "a-token-0123456789abcdef-0123456789";
const TOKEN_B: &str = "b-token-0123456789abcdef-0123456789";
const TOKEN_C: &str = "c-token-0123456789abcdef-0123456789";

fn config(entries: &str) -> String {
    let feed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/cme-glbx-mdp3-es-mbo-dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst");
    format!(
        "[publisher]\nlisten = \"127.0.0.1:0\"\nwait_for_subscribers = 2\n\n[feed]\nformat = \"dbn\"\npath = {feed:?}\n\n[access]\n{entries}"
    )
}

fn entry(name: &str, token: &str, instruments: Option<&[u32]>) -> String {
    let ids = instruments.map_or(String::new(), |ids| format!("instruments = {ids:?}\n"));
    format!("[[access.subscribers]]\nname = \"{name}\"\ntoken = \"{token}\"\n{ids}\n")
}

fn sub_cfg(endpoint: &str, name: &str, token: Option<&str>, instruments: Option<Vec<u32>>) -> SubscriberConfig {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.token = token.map(str::to_owned);
    cfg.instruments = instruments;
    cfg
}

fn refused(cfg: &SubscriberConfig) -> String {
    match Subscriber::connect(cfg) {
        Err(SubscribeError::Rejected { reason, .. }) => reason,
        Err(e) => panic!("{}: expected a refusal, got {e}", cfg.name),
        Ok(_) => panic!("{}: accepted", cfg.name),
    }
}

/// Polls to the end of the stream; returns the records received.
fn drain(mut sub: Subscriber) -> u64 {
    let mut records = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "watchdog");
        sub.poll(256, |e| {
            if let Event::Record(_) = e {
                records += 1;
            }
        });
        if let Some(Health::Ended(end)) = sub.maintain_if_due() {
            assert_eq!(end.as_str(), "end_of_stream");
            return records;
        }
    }
}

#[test]
fn only_listed_subscribers_with_their_token_get_what_they_are_entitled_to_and_sighup_takes_a_new_list() {
    let dir = std::env::temp_dir().join(format!("mdfan-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("publisher.toml");
    std::fs::write(&path, config(&(entry("a", TOKEN_A, Some(&[ESH4])) + &entry("b", TOKEN_B, None)))).unwrap();
    let publisher = Publisher::bind(Config::load(&path).unwrap()).unwrap();
    let endpoint = publisher.local_addr().to_string();
    let reload = publisher.reload_flag();
    let run = std::thread::spawn(move || publisher.run(Arc::new(AtomicBool::new(false))));

    let a = Subscriber::connect(&sub_cfg(&endpoint, "a", Some(TOKEN_A), Some(vec![ESH4]))).expect("a is listed");
    let a = std::thread::spawn(move || drain(a));
    assert_eq!(
        refused(&sub_cfg(&endpoint, "b", None, None)),
        "field token: missing: this publisher authenticates its subscribers (\"b\" sent none)"
    );
    assert_eq!(
        refused(&sub_cfg(&endpoint, "b", Some(TOKEN_A), None)),
        "field token: not accepted for subscriber \"b\""
    );
    assert_eq!(
        refused(&sub_cfg(&endpoint, "z", Some(TOKEN_A), None)),
        "field token: not accepted for subscriber \"z\""
    );
    // a second live session under a name already attached is refused, naming the first
    assert_eq!(
        refused(&sub_cfg(&endpoint, "a", Some(TOKEN_A), None)),
        "field name: a subscriber named \"a\" is attached already (session 1); this publisher refuses a second one \
         (publisher.allow_duplicate_names)"
    );
    assert_eq!(
        refused(&sub_cfg(&endpoint, "a2", Some(TOKEN_A), None)),
        "field token: not accepted for subscriber \"a2\""
    );

    // SIGHUP: b is gone from the list, c is new, entitled to ESH4 only: asking for everything, it gets that.
    std::fs::write(&path, config(&(entry("a", TOKEN_A, Some(&[ESH4])) + &entry("c", TOKEN_C, Some(&[ESH4]))))).unwrap();
    reload.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reload.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline, "the conductor never took the reload");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        refused(&sub_cfg(&endpoint, "b", Some(TOKEN_B), None)),
        "field token: not accepted for subscriber \"b\""
    );
    assert_eq!(
        refused(&sub_cfg(&endpoint, "c", Some(TOKEN_C), Some(vec![ESH4, 42]))),
        "field instruments: 42 not entitled; \"c\" may have 17077"
    );
    let c = Subscriber::connect(&sub_cfg(&endpoint, "c", Some(TOKEN_C), None)).expect("c is listed after the reload");
    assert_eq!(c.symbol(ESH4), Some("ESH4"), "its entitlement's definitions came in its accept");
    // a and c are the two the replay waited for; every refusal above left them unaffected.
    let c_records = drain(c);
    let a_records = a.join().unwrap();
    let report = run.join().unwrap().unwrap();
    assert_eq!(report.records, RECORDS);
    assert_eq!(report.sessions.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    // every feed record, plus heartbeats and end of stream
    assert!(a_records > RECORDS && c_records > RECORDS, "a {a_records}, c {c_records}");
    assert_eq!(report.session("a").unwrap().sent, a_records);
    assert_eq!(report.session("c").unwrap().sent, c_records);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn access_lists_with_weak_tokens_empty_entitlements_or_repeated_entries_are_refused_at_load_and_tokens_stay_out_of_debug_output(
) {
    let parse = |entries: &str| Config::parse(&config(entries), std::path::Path::new("access.toml"));
    let e = parse(&entry("a", "0123456789abcdef", None)).unwrap_err().to_string();
    // named with the line of the entry's field (line 12: `token = ...` of the first [[access.subscribers]])
    assert!(
        e.ends_with("line 12: key access.subscribers: entry 1 (a): token too short: at least 32 characters"),
        "{e}"
    );
    let e = parse(&entry("a", &"ab".repeat(20), None)).unwrap_err().to_string();
    assert!(e.ends_with("line 12: key access.subscribers: entry 1 (a): token has 2 distinct characters, at least 8 (openssl rand -hex 32)"), "{e}");
    let e = parse(&entry("a", &format!("{TOKEN_A} x"), None)).unwrap_err().to_string();
    assert!(e.ends_with("entry 1 (a): token holds ' ': only A-Z a-z 0-9 and ._~+/=- (openssl rand -hex 32)"), "{e}");
    let e = parse(&entry("a", TOKEN_A, Some(&[]))).unwrap_err().to_string();
    assert!(
        e.ends_with("line 13: key access.subscribers: entry 1 (a): instruments = []: entitles it to nothing; leave the key out for everything"),
        "{e}"
    );
    let e = parse(&(entry("a", TOKEN_A, None) + &entry("a", TOKEN_B, None))).unwrap_err().to_string();
    assert!(e.ends_with("line 15: key access.subscribers: entry 2: name \"a\" is listed twice"), "{e}");
    let cfg = parse(&entry("a", TOKEN_A, Some(&[ESH4]))).unwrap();
    let shown = format!("{cfg:?}");
    assert!(
        shown.contains("AccessEntry { name: \"a\", instruments: Some([17077]), uid: None }")
            && !shown.contains(TOKEN_A)
    );
}
