//! The recommended strategy loop, whole: pin, busy-poll with PAUSE, maintain on a timer, read the book only after a
//! record with F_LAST (the venue's event is complete), stop at end of stream. Prints the last BBO of each
//! instrument.
//!
//! ```sh
//! cargo build --release -p mdfan-subscriber --example bbo     # first: the demo's replay lasts about 3 s
//! ops/run-demo & sleep 1; target/release/examples/bbo 127.0.0.1:7700   # joins late: a snapshot, then live
//! ```
//!
//! Arguments: the publisher's endpoint (default 127.0.0.1:7700) and, optionally, a core to pin to and busy-spin
//! on: one of its own, not the publisher's hot_core nor another subscriber's (on a 2-core host beside the demo,
//! leave it out: unpinned, the loop spins a little and then yields).
//!
//! Dependencies: `mdfan-subscriber` only (it re-exports the book, the record and the idle strategies).
//! Its books are order books (`Books`): for an order-level feed (DBN, ITCH); a price-level feed (CME MDP 3.0,
//! LOBSTER) needs `MbpBooks` (the crate docs, "Which book for which feed").

use std::collections::BTreeMap;

use mdfan_subscriber::{format_price_e9, Books, Event, Health, IdleStrategy, Idler, Kind, Level};
use mdfan_subscriber::{Subscriber, SubscriberConfig};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bbo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().unwrap_or_else(|| "127.0.0.1:7700".into());
    let idle = match args.next() {
        Some(core) => {
            mdfan_subscriber::pin_current_thread(core.parse()?)?; // an isolated core: spin on it
            IdleStrategy::BusySpin
        }
        None => IdleStrategy::SpinThenYield { spins: 1000 }, // not pinned: leave the core to others when idle
    };
    let mut sub = Subscriber::connect(&SubscriberConfig::new(&endpoint, "bbo-example"))?;
    let mut books = Books::new();
    let mut bbo: BTreeMap<u32, (Option<Level>, Option<Level>)> = BTreeMap::new();
    let mut idler = Idler::new(idle);
    let (mut done, mut silent) = (false, false);
    while !done {
        let n = sub.poll(256, |event| match event {
            Event::Record(r) if r.kind() == Some(Kind::EndOfStream) => done = true,
            Event::Record(r) => {
                let _ = books.apply(r);
                if r.is_last() {
                    if let Some(book) = books.get(r.instrument_id) {
                        bbo.insert(r.instrument_id, book.bbo());
                    }
                }
            }
            Event::Gap { expected, got } => {
                eprintln!("gap: seq {expected} to {} missing; stale until a snapshot", got - 1)
            }
            Event::Closed(reason) => {
                eprintln!("closed: {}", reason.as_str());
                done = true;
            }
            Event::Stale { .. } | Event::Corrupt { .. } => {}
        });
        idler.idle(n);
        match sub.maintain_if_due() {
            Some(Health::Ended(end)) => {
                match sub.bye() {
                    Some(bye) => eprintln!("publisher ended the session: {} {}", bye.reason.as_str(), bye.detail),
                    None => eprintln!("session ended: {}", end.as_str()),
                }
                break;
            }
            Some(Health::Silent(quiet)) if !silent => {
                silent = true; // once per silence
                eprintln!("publisher silent for {} ms", quiet.as_millis());
            }
            Some(Health::Ok) => silent = false,
            // no reconnect policy in this config, so never Reconnecting (examples/strategy.rs has one)
            Some(Health::Silent(_) | Health::Reconnecting { .. } | Health::Reconnected { .. }) | None => {}
        }
    }
    let side = |l: Option<Level>| l.map_or("-".to_owned(), |l| format!("{}x{}", format_price_e9(l.price_e9), l.size));
    for (id, (bid, ask)) in bbo {
        println!("bbo instrument={id} {}/{}", side(bid), side(ask));
    }
    Ok(())
}
