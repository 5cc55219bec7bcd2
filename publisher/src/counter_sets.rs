//! The counter sets the conductor publishes into the counters file every [`crate::conductor::COUNTERS_PERIOD`]:
//! each part of the publisher that counts something registers one ([`CounterSet`]) when the conductor is built,
//! and a rewrite walks them in order, then the control plane's own counts ([`ControlCounters`]) and the
//! sessions'. Names and labels are Prometheus style; `mdfan-stat` prints them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mdfan_tuning::counters::CountersWriter;
use mdfan_tuning::counters::MetricKind::{Counter, Gauge};

use crate::agent::AgentCounters;
use crate::journal::{FeedState, Journal};

/// A source of rows for the counters file.
pub(crate) trait CounterSet {
    /// Stages this set's rows ([`CountersWriter::set`]).
    fn publish(&self, file: &mut CountersWriter);
}

/// The hot loop's and the feed's progress: records fanned out and read, the feed's end, the duty cycle's
/// quantiles.
pub(crate) struct RunCounters {
    pub(crate) counters: Arc<AgentCounters>,
    pub(crate) journal: Arc<Journal>,
    pub(crate) clock: quanta::Clock,
}

impl CounterSet for RunCounters {
    fn publish(&self, file: &mut CountersWriter) {
        let c = &self.counters;
        let to_ns = |t| self.clock.delta_as_nanos(0, t);
        file.set("mdfan_records_total", "", Counter, c.records.load(Ordering::Relaxed));
        file.set("mdfan_feed_read_total", "", Counter, self.journal.published());
        file.set("mdfan_feed_done", "", Gauge, u64::from(self.journal.state() != FeedState::Running));
        file.set("mdfan_hot_cycle_ns", "quantile=\"0.5\"", Gauge, to_ns(c.cycles.quantile(0.5)));
        file.set("mdfan_hot_cycle_ns", "quantile=\"0.999\"", Gauge, to_ns(c.cycles.quantile(0.999)));
        file.set("mdfan_hot_cycle_ns", "quantile=\"1\"", Gauge, to_ns(c.cycles.max()));
    }
}

impl CounterSet for Arc<dyn crate::feeds::FeedCounters> {
    fn publish(&self, file: &mut CountersWriter) {
        crate::feeds::FeedCounters::publish(&**self, file);
    }
}

/// One live MDP 3.0 channel's rows, each labelled `channel="ID"` (a publisher of several channels writes one set
/// each).
pub(crate) fn publish_live(c: &crate::live::LiveCounters, file: &mut CountersWriter) {
    {
        let f = c.report();
        let ch = format!("channel=\"{}\"", f.channel);
        for (i, line) in ["a", "b"].into_iter().enumerate() {
            let l = format!("{ch},line=\"{line}\"");
            file.set("mdfan_line_datagrams_total", &l, Counter, f.datagrams[i]);
            file.set("mdfan_line_refused_total", &l, Counter, f.refused[i]);
            file.set("mdfan_line_delivered_total", &l, Counter, f.delivered[i]);
        }
        for (name, kind, v) in [
            ("mdfan_feed_duplicates_total", Counter, f.duplicates),
            ("mdfan_feed_late_total", Counter, f.late),
            ("mdfan_feed_jumps_held_total", Counter, f.jumps[0]),
            ("mdfan_feed_jumps_taken_total", Counter, f.jumps[1]),
            ("mdfan_feed_jumps_dropped_total", Counter, f.jumps[2]),
            ("mdfan_feed_start_held_total", Counter, f.jumps[3]),
            ("mdfan_feed_lost_seqs_total", Counter, f.gap_seqs),
            ("mdfan_feed_lost_runs_total", Counter, f.gap_runs),
            ("mdfan_feed_bad_packets_total", Counter, f.bad_packets),
            ("mdfan_feed_level_records_total", Counter, f.level_records),
            ("mdfan_feed_stale_records_total", Counter, f.stale_records),
            ("mdfan_feed_snapshot_packets_total", Counter, f.snapshot_packets),
            ("mdfan_feed_recovered_total", Counter, f.recovered),
            ("mdfan_feed_stale_instruments", Gauge, f.stale_now),
            ("mdfan_feed_recovery_timeouts_total", Counter, f.recovery_timeouts),
            ("mdfan_feed_silences_total", Counter, f.silences),
            ("mdfan_feed_silent", Gauge, f.silent_now),
            ("mdfan_feed_definitions_total", Counter, f.definitions),
            ("mdfan_feed_bad_definition_packets_total", Counter, f.bad_definition_packets),
            ("mdfan_feed_instrument_collisions_total", Counter, f.instrument_collisions),
            ("mdfan_feed_definitions_refused_total", Counter, f.definitions_refused),
            ("mdfan_feed_definitions_dropped_total", Counter, f.definitions_dropped),
        ] {
            file.set(name, &ch, kind, v);
        }
        for (i, feed) in ["snapshot", "definitions"].into_iter().enumerate() {
            let l = format!("{ch},feed=\"{feed}\"");
            file.set("mdfan_feed_side_foreign_sources_total", &l, Counter, f.side_foreign[i]);
        }
    }
}

/// A live ITCH feed's MoldUDP64 rows.
pub(crate) fn publish_mold(c: &crate::live_itch::MoldCounters, file: &mut CountersWriter) {
    {
        let f = c.report();
        for (i, origin) in ["a", "b", "retransmit"].into_iter().enumerate() {
            file.set("mdfan_mold_packets_total", &format!("origin=\"{origin}\""), Counter, f.packets[i]);
        }
        file.set("mdfan_mold_heartbeats_total", "", Counter, f.heartbeats);
        file.set("mdfan_mold_messages_total", "", Counter, f.messages);
        file.set("mdfan_mold_retransmitted_messages_total", "", Counter, f.retransmitted);
        file.set("mdfan_mold_duplicates_total", "", Counter, f.duplicates);
        file.set("mdfan_mold_copy_mismatches_total", "", Counter, f.copy_mismatches);
        file.set("mdfan_mold_ends_contradicted_total", "", Counter, f.ends_contradicted);
        file.set("mdfan_mold_gaps_total", "", Counter, f.gaps);
        file.set("mdfan_mold_requests_total", "", Counter, f.requests);
        file.set("mdfan_mold_retries_total", "", Counter, f.retries);
        file.set("mdfan_mold_given_up_holes_total", "", Counter, f.given_up_holes);
        file.set("mdfan_mold_given_up_messages_total", "", Counter, f.given_up_messages);
        file.set("mdfan_mold_foreign_session_total", "", Counter, f.foreign_session);
        for (i, line) in ["a", "b"].into_iter().enumerate() {
            file.set("mdfan_mold_foreign_sources_total", &format!("line=\"{line}\""), Counter, f.foreign_sources[i]);
        }
        file.set("mdfan_mold_bad_packets_total", "", Counter, f.bad_packets);
        file.set("mdfan_mold_definitions_dropped_total", "", Counter, f.definitions_dropped);
        file.set("mdfan_mold_jumps_held_total", "", Counter, f.jumps_held);
        file.set("mdfan_mold_jumps_taken_total", "", Counter, f.jumps_taken);
        for &(t, n, first) in &f.skipped {
            let l = format!("type=\"{}\"", mdfan_feed::itch::type_label(t));
            file.set("mdfan_mold_skipped_total", &l, Counter, n);
            file.set("mdfan_mold_skipped_first_seq", &l, Gauge, first);
        }
        file.set("mdfan_feed_stale_records_total", "", Counter, f.stale_records);
        file.set("mdfan_itch_unknown_references_total", "", Counter, f.unknown_references);
        file.set("mdfan_itch_duplicate_references_total", "", Counter, f.duplicate_references);
        file.set("mdfan_itch_too_many_shares_total", "", Counter, f.too_many_shares);
        file.set("mdfan_itch_orders_refused_total", "", Counter, f.orders_refused);
        file.set("mdfan_feed_silences_total", "", Counter, f.silences);
        file.set("mdfan_feed_silent", "", Gauge, f.silent_now);
    }
}

/// What the control plane itself counts: connections, refusals by cause, peers closed for not reading.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ControlCounters {
    /// Control connections accepted (TCP and Unix-domain).
    pub connections: u64,
    /// Connections closed at once because [`crate::conductor::MAX_HANDSHAKES`] were already in progress.
    pub handshakes_over_limit: u64,
    /// Connections refused at once because their peer already had
    /// [`crate::conductor::MAX_HANDSHAKES_PER_PEER`] in progress.
    pub handshakes_over_peer_limit: u64,
    /// Connections refused for sending no subscribe message within the handshake timeout.
    pub handshake_timeouts: u64,
    /// Subscriptions refused (`Reject` sent), every cause.
    pub rejects: u64,
    /// Failed authentications (wrong or missing token, unknown name, wrong uid).
    pub auth_failures: u64,
    /// Subscriptions refused unchecked: their peer had failed to authenticate too often.
    pub auth_throttled: u64,
    /// Subscriptions refused for a name already attached.
    pub duplicate_names: u64,
    /// Peers closed because bytes waited for them past the write deadline (they do not read).
    pub write_deadline: u64,
    /// Peers closed because a frame for them did not fit their out buffer.
    pub out_overflow: u64,
    /// Snapshot requests refused past a session's rate.
    pub snapshot_requests_refused: u64,
    /// Sessions ended for a snapshot request flood.
    pub snapshot_floods: u64,
}

impl ControlCounters {
    /// Stages the rows, with the number of subscribers attached now.
    pub(crate) fn publish(&self, file: &mut CountersWriter, subscribers: u64) {
        file.set("mdfan_subscribers", "", Gauge, subscribers);
        file.set("mdfan_control_connections_total", "", Counter, self.connections);
        for (cause, v) in [
            ("handshake_limit", self.handshakes_over_limit),
            ("peer_handshake_limit", self.handshakes_over_peer_limit),
            ("handshake_timeout", self.handshake_timeouts),
            ("write_deadline", self.write_deadline),
            ("out_overflow", self.out_overflow),
        ] {
            file.set("mdfan_control_closed_total", &format!("cause=\"{cause}\""), Counter, v);
        }
        file.set("mdfan_control_rejects_total", "", Counter, self.rejects);
        file.set("mdfan_auth_failures_total", "", Counter, self.auth_failures);
        file.set("mdfan_auth_throttled_total", "", Counter, self.auth_throttled);
        file.set("mdfan_duplicate_names_total", "", Counter, self.duplicate_names);
        file.set("mdfan_snapshot_requests_refused_total", "", Counter, self.snapshot_requests_refused);
        file.set("mdfan_snapshot_floods_total", "", Counter, self.snapshot_floods);
    }
}
