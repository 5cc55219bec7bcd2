//! The subscriber's counters file: what `mdfan-stat` shows for a subscriber process
//! (`<counters_dir>/mdfan-subscriber-<name>-<pid>.counters`, layout in `mdfan_tuning::counters`), rewritten by
//! [`Subscriber::maintain`](crate::Subscriber::maintain) at most every 100 ms, off the poll path. Opt-in:
//! [`SubscriberConfig::counters_dir`](crate::SubscriberConfig::counters_dir). Removed when the subscriber is dropped;
//! the files of killed processes of the same name are removed when the next one starts. Created exclusively
//! (`O_EXCL | O_NOFOLLOW`), mode 0640, group `mdfan` where it exists (`mdfan_tuning::counters`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mdfan_tuning::counters::{CountersWriter, MetricKind};

use crate::receiver::StreamStats;
use crate::{Latency, NicLatency};

/// How often the file is rewritten at most.
pub const PERIOD: Duration = Duration::from_millis(100);

/// The counters file of one subscriber.
pub(crate) struct StatFile {
    writer: CountersWriter,
    written: Instant,
}

impl StatFile {
    /// Creates the file for subscriber `name` of publisher `endpoint`; `None` (the reason on stderr: a library
    /// has no logger of its own) when it cannot.
    pub(crate) fn create(dir: &Path, name: &str, endpoint: &str) -> Option<StatFile> {
        let safe: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let prefix = format!("mdfan-subscriber-{safe}-");
        // the files earlier processes of this name left when they were killed (FC-43)
        mdfan_tuning::counters::prune_dead(dir, &prefix);
        let path: PathBuf = dir.join(format!("{prefix}{}.counters", std::process::id()));
        match CountersWriter::create(&path, "subscriber", &format!("{name}@{endpoint}"), 32) {
            Ok(writer) => Some(StatFile { writer, written: Instant::now() - PERIOD }),
            Err(e) => {
                eprintln!("mdfan-subscriber: no counters file: {e}");
                None
            }
        }
    }

    /// Rewrites the file if [`PERIOD`] has passed (or `force`).
    pub(crate) fn write(
        &mut self,
        s: &StreamStats,
        session_id: u64,
        state: &str,
        latency: Option<&Latency>,
        nic: Option<&NicLatency>,
        force: bool,
    ) {
        if !force && self.written.elapsed() < PERIOD {
            return;
        }
        use MetricKind::{Counter, Gauge};
        let w = &mut self.writer;
        w.begin();
        w.set("mdfan_sub_records_total", "", Counter, s.records);
        w.set("mdfan_sub_gaps_total", "", Counter, s.gaps);
        w.set("mdfan_sub_missed_total", "", Counter, s.missed);
        w.set("mdfan_sub_corrupt_total", "", Counter, s.corrupt);
        w.set("mdfan_sub_stale_total", "", Counter, s.stale);
        w.set("mdfan_sub_snapshots_requested_total", "", Counter, s.snapshots_requested);
        w.set("mdfan_sub_snapshots_received_total", "", Counter, s.snapshots_received);
        w.set("mdfan_sub_reconnects_total", "", Counter, s.reconnects);
        w.set("mdfan_sub_next_seq", "", Gauge, s.next_seq);
        w.set("mdfan_sub_session", "", Gauge, session_id);
        w.set("mdfan_sub_state", &format!("state=\"{state}\""), Gauge, 1);
        if let Some(l) = latency {
            let h = l.histogram();
            let clock = format!("clock=\"{}\"", l.source().as_str());
            for (q, v) in [("0.5", 0.5), ("0.99", 0.99), ("0.999", 0.999)] {
                w.set("mdfan_sub_post_to_poll_ns", &format!("{clock},quantile=\"{q}\""), Gauge, h.value_at_quantile(v));
            }
            w.set("mdfan_sub_post_to_poll_ns", &format!("{clock},quantile=\"1\""), Gauge, h.max());
        }
        // NIC-to-poll only where completions carry NIC timestamps and the clock is mapped onto realtime
        if let Some(n) = nic.filter(|n| n.is_aligned()) {
            let h = n.histogram();
            let clock = format!("clock=\"{}\"", n.source().as_str());
            for (q, v) in [("0.5", 0.5), ("0.99", 0.99), ("0.999", 0.999)] {
                w.set("mdfan_sub_nic_to_poll_ns", &format!("{clock},quantile=\"{q}\""), Gauge, h.value_at_quantile(v));
            }
            w.set("mdfan_sub_nic_to_poll_ns", &format!("{clock},quantile=\"1\""), Gauge, h.max());
        }
        w.commit(unix_ns());
        self.written = Instant::now();
    }
}

impl Drop for StatFile {
    fn drop(&mut self) {
        self.writer.close();
        let _ = std::fs::remove_file(self.writer.path());
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
