// The README's embedding example, verbatim (subscriber/tests/readme.rs checks they are the same): built by
// `cargo test` and linted by clippy, so the README's code compiles warning-free.
use mdfan_subscriber::{Books, CloseReason, Event, Health, IdleStrategy, Idler, Kind, Subscriber, SubscriberConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    mdfan_subscriber::pin_current_thread(0)?; // a core of its own (not the publisher's hot_core): it never sleeps
    let mut sub = Subscriber::connect(&SubscriberConfig::new("127.0.0.1:7700", "my-strategy"))?;
    let (mut books, mut idler, mut done, mut complete) =
        (Books::new(), Idler::new(IdleStrategy::BusySpin), false, false);
    while !done {
        let n = sub.poll(256, |event| match event {
            Event::Record(r) if r.kind() == Some(Kind::EndOfStream) => {
                // a publisher stopping early (Shutdown) or a failed feed (FeedError) ends the same way
                (done, complete) = (true, r.end_reason() == Some(CloseReason::EndOfStream));
            }
            Event::Record(r) => {
                let _ = books.apply(r); // &BookUpdate, read in place from the ring
                if r.is_last() {
                    let _bbo = books.get(r.instrument_id).map(|b| b.bbo()); // consistent: trade on it here
                }
            }
            Event::Gap { expected, got } => eprintln!("gap {expected}..{got}: stale until the snapshot"),
            Event::Closed(_) => done = true,
            Event::Stale { .. } | Event::Corrupt { .. } => {}
        });
        // PAUSE on an empty poll (no syscall); housekeeping at most once per ms (else one TSC read)
        idler.idle(n);
        match sub.maintain_if_due() {
            Some(Health::Ended(_why)) => break, // for good (End says why; sub.bye() has the detail)
            Some(Health::Silent(_quiet_for)) => {} // no record or heartbeat within the silence timeout
            Some(Health::Reconnecting { .. } | Health::Reconnected { .. }) => {} // with cfg.reconnect set only
            Some(Health::Ok) | None => {}
        }
    }
    if !complete {
        eprintln!("the stream did not end whole: the books are partial");
    }
    Ok(())
}
