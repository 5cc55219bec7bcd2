//! Helpers of the capture crate's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdfan_subscriber::{BookUpdate, Event, Health, Kind, Subscriber, SubscriberConfig};

pub const WATCHDOG: Duration = Duration::from_secs(180);

/// A new empty folder for test `tag`.
pub fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mdfan-capture-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every record of a session (heartbeats and the end of stream aside), until the stream ends.
pub fn subscribe(endpoint: &str, name: &str) -> JoinHandle<Vec<BookUpdate>> {
    let mut cfg = SubscriberConfig::new(endpoint, name);
    cfg.ring_slots = 1 << 17;
    subscribe_with(cfg)
}

/// [`subscribe`] with `cfg`.
pub fn subscribe_with(cfg: SubscriberConfig) -> JoinHandle<Vec<BookUpdate>> {
    let mut sub = Subscriber::connect(&cfg).expect("subscribes");
    std::thread::spawn(move || {
        let (mut out, deadline) = (Vec::new(), Instant::now() + WATCHDOG);
        loop {
            assert!(Instant::now() < deadline, "watchdog: {} not ended", sub.endpoint());
            let n = sub.poll(1024, |e| {
                if let Event::Record(r) = e {
                    if !matches!(r.kind(), Some(Kind::Heartbeat | Kind::EndOfStream)) {
                        out.push(*r);
                    }
                }
            });
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            if let Some(Health::Ended(_)) = sub.maintain_if_due() {
                return out;
            }
        }
    })
}

/// The record as a venue event: the publisher's own fields cleared.
pub fn venue(r: &BookUpdate) -> BookUpdate {
    BookUpdate { seq: 0, ts_send_ticks: 0, ..*r }
}
