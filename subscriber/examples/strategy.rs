//! A strategy skeleton to copy: one pinned thread that busy-polls the ring, applies every record to its books,
//! acts on the BBO after each complete venue event, knows when its books are stale (a gap, until the snapshot)
//! or dead (the session lost, until the library has reconnected), and prints latency percentiles at the end.
//! Replace `on_bbo` with the strategy.
//!
//! ```sh
//! cargo build --release -p mdfan-subscriber --example strategy   # first: the demo's replay lasts about 3 s
//! ops/run-demo & sleep 1; target/release/examples/strategy 127.0.0.1:7700 0   # joins late: a snapshot, then live
//! ```
//!
//! Arguments: the publisher's endpoint (default 127.0.0.1:7700) and the core to pin to (default 0; the demo publisher pins its hot loop to core 1). Give it a core
//! of its own (not the publisher's `hot_core`, not another poller's): it busy-spins and never sleeps. When that
//! core is not allowed (`taskset`, a cgroup), it says so and runs unpinned, yielding when idle. At the end it prints
//! a summary line, the final BBO of each instrument and the latency percentiles; exit 0 after end of stream, 1 when
//! the subscription cannot be set up or ends any other way (the reason on stderr).
//!
//! Dependencies: `mdfan-subscriber` only (it re-exports the book, the record and the idle strategies).
//!
//! Its books are order books (`HotBooks`): for an order-level feed (DBN, ITCH). A price-level feed (CME MDP 3.0,
//! LOBSTER) needs `MbpBooks` as well (the crate docs, "Which book for which feed").

use std::time::Duration;

use mdfan_subscriber::{format_price_e9, BookCapacity, End, Event, Health, HotBooks, IdleStrategy, Idler, Kind, Level};
use mdfan_subscriber::{CloseReason, Reconnect, Subscriber, SubscriberConfig};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strategy: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The strategy's own state: whatever it needs to decide, updated on complete events only.
#[derive(Default)]
struct Strategy {
    /// BBO changes seen while the books were good.
    decisions: u64,
    /// The last BBO acted on (a real strategy keeps one per instrument, in memory sized before the loop).
    last: Option<(u32, Option<Level>, Option<Level>)>,
}

impl Strategy {
    /// Called after a record with F_LAST, when the books are exact: the place to decide and send orders.
    fn on_bbo(&mut self, instrument_id: u32, bid: Option<Level>, ask: Option<Level>) {
        if self.last == Some((instrument_id, bid, ask)) {
            return;
        }
        self.last = Some((instrument_id, bid, ask));
        self.decisions += 1;
        // ... trade here: no allocation, no syscall, no lock on this thread ...
    }

    /// The books can no longer be trusted (a gap, or the session lost): pull quotes, cancel orders.
    fn on_books_untrusted(&mut self) {
        self.last = None;
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().unwrap_or_else(|| "127.0.0.1:7700".into());
    let core: usize = args.next().map_or(Ok(0), |c| c.parse())?;

    // 1. Pin the polling thread to a core of its own and busy-spin on it. A core this process may not use is an
    //    error from pin_current_thread naming the cores it may use: run unpinned then, and yield when idle.
    let idle = match mdfan_subscriber::pin_current_thread(core) {
        Ok(()) => IdleStrategy::BusySpin,
        Err(e) => {
            eprintln!("strategy: running unpinned, yielding when idle: {e}");
            IdleStrategy::SpinThenYield { spins: 1000 }
        }
    };

    // 2. Subscribe. The reconnect policy makes the library reconnect by itself when the publisher vanishes (killed,
    //    host or network down) or the transport breaks: a try every 100 ms for up to 30 s, and connect_with_retry
    //    waits the same way for a publisher that is not up yet.
    let mut cfg = SubscriberConfig::new(&endpoint, "strategy-example");
    cfg.reconnect = Some(Reconnect::within(Duration::from_secs(30)));
    // `|| false`: nothing asks it to stop waiting (pass a signal flag's load here). with_latency: one histogram
    // add per record, allocated now.
    let mut sub = Subscriber::connect_with_retry(&cfg, || false)?.with_latency();

    // 3. The loop's state, created before the first poll. `HotBooks` reserves its memory here (16,384 resting
    //    orders and 2,048 price levels per side for each of 4 instruments, about 0.9 MiB each: ESH4 peaks at 11,237
    //    orders) and allocates nothing per record after; past that size it grows, and `growths()` says so.
    let mut books = HotBooks::with_capacity(BookCapacity::new(16_384, 2_048, 4));
    let mut strategy = Strategy::default();
    let mut idler = Idler::new(idle);
    let (mut stream_end, mut gaps) = (None, 0u64);

    // 4. The loop: poll (no syscall, no allocation), idle when nothing came, housekeeping when due.
    let end = loop {
        let mut stale = sub.is_stale(); // after a gap the books are not exact until the snapshot has ended
        let n = sub.poll(256, |event| match event {
            Event::Record(r) => match r.kind() {
                // Why the stream ended: a complete replay, or a publisher that stopped early / a failed feed
                // (then the books are partial). An unknown reason counts as a protocol error.
                Some(Kind::EndOfStream) => stream_end = Some(r.end_reason().unwrap_or(CloseReason::ProtocolError)),
                Some(Kind::Heartbeat) => {} // the publisher is alive; nothing to apply
                Some(Kind::SnapshotEnd) => stale = false, // exact again from here (SnapshotBegin emptied them)
                _ => {
                    // The record is borrowed from the ring: read it here, do not keep the reference.
                    let _ = books.apply(r); // errors are expected while stale (orders the books never saw)
                    if r.is_last() && !stale {
                        // The venue's event is complete: the book is consistent, act on it.
                        if let Some(book) = books.get(r.instrument_id) {
                            let (bid, ask) = book.bbo();
                            strategy.on_bbo(r.instrument_id, bid, ask);
                        }
                    }
                }
            },
            Event::Gap { .. } => {
                stale = true; // records are missing: stale until the snapshot (maintain asks for it)
                gaps += 1;
                strategy.on_books_untrusted();
            }
            Event::Closed(_) => {} // maintain reports the end (and whether it reconnects)
            Event::Stale { .. } | Event::Corrupt { .. } => {} // counted in sub.stats()
        });
        if let Some(reason) = stream_end {
            break End::Closed(reason);
        }
        idler.idle(n); // PAUSE on an empty poll; nothing when work was done
        match sub.maintain_if_due() {
            None | Some(Health::Ok) => {}
            Some(Health::Silent(_quiet)) => {} // no record nor heartbeat for 50 ms: the books may be old
            // The session is lost: the books are dead until the new one has rebuilt them.
            Some(Health::Reconnecting { tries: 0 }) => strategy.on_books_untrusted(),
            Some(Health::Reconnecting { .. }) => {} // each try may block up to cfg.timeout (2 s)
            Some(Health::Reconnected { .. }) => books.reset(), // seq restarts at 1; a snapshot follows (memory kept)
            Some(Health::Ended(end)) => break end,
        }
    };

    // 5. After the loop: report (allocating and printing are fine here).
    let stats = sub.stats();
    println!(
        "end={} records={} gaps={gaps} snapshots={} reconnects={} decisions={}",
        end.as_str(),
        stats.records,
        stats.snapshots_received,
        stats.reconnects,
        strategy.decisions
    );
    let side = |l: Option<Level>| l.map_or("-".to_owned(), |l| format!("{}x{}", format_price_e9(l.price_e9), l.size));
    let mut instruments: Vec<_> = books.iter().collect();
    instruments.sort_by_key(|(id, _)| *id);
    for (id, book) in instruments {
        let (bid, ask) = book.bbo();
        println!("bbo instrument={id} {}/{}", side(bid), side(ask));
    }
    if let Some(latency) = sub.latency() {
        let h = latency.histogram(); // ns, publisher post to this poll (same host: one TSC)
        let q = |q: f64| h.value_at_quantile(q);
        println!("latency count={} p50_ns={} p99_ns={} p99.9_ns={}", h.len(), q(0.5), q(0.99), q(0.999));
    }
    // A live feed only (the publisher's accept said its ts_recv is a receive stamp): datagram receipt on the
    // publisher's socket to this poll, CLOCK_REALTIME against that stamp; a file replay has none.
    if let Some(wire) = sub.wire_latency() {
        let h = wire.histogram();
        let q = |q: f64| h.value_at_quantile(q);
        println!(
            "wire_to_poll clock={} count={} p50_ns={} p99_ns={} p99.9_ns={}",
            wire.source().as_str(),
            h.len(),
            q(0.5),
            q(0.99),
            q(0.999)
        );
    }
    match end {
        End::Closed(CloseReason::EndOfStream) => Ok(()),
        other => Err(format!("the subscription ended: {} {:?}", other.as_str(), sub.bye()).into()),
    }
}
