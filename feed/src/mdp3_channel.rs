//! One CME MDP 3.0 incremental channel as a live feed handler sees it, sans I/O: arbitrated packets in
//! (`MsgSeqNum` order, after the A/B arbitration of `mdfan-lines`), records out.
//!
//! - [`Mdp3Channel::on_packet`]: decodes one packet ([`Mdp3Decoder`]) and hands each book entry to the caller as
//!   a price-level record ([`book_record`]), and each `RptSeq` jump as a [`Kind::InstrumentStale`] record naming
//!   the security ([`stale_record`]). A packet the decoder refuses is counted (the error is kept for the report)
//!   and the channel goes on.
//! - [`Mdp3Channel::on_lost_packets`]: packets neither line delivered (`mdfan_lines::Event::Gap`). A lost packet
//!   may have carried an update of any instrument of the channel, so every security the channel has carried so far
//!   is marked stale: one [`Kind::InstrumentStale`] record each, with `venue_seq` = the first lost `MsgSeqNum`,
//!   `order_id` = that same `MsgSeqNum` and `size` = the number of packets lost (saturated to `u32`), flag
//!   [`flags::MAYBE_BAD_BOOK`] (the per-`RptSeq` stale records carry no flag). Subscribers' books stay stale until
//!   a `Clear` (market recovery) rebuilds them. A gap is never silent.
//!
//! The caller owns the sockets, the clock and the journal: this type makes no syscall. After warm-up (the
//! channel's securities seen once) it allocates nothing: the security list is reserved up front
//! ([`Mdp3Channel::with_capacity`]) and grows only past it.
//!
//! Source: CME Client Systems Wiki, "MDP 3.0 - Market Recovery" (a gap on both feeds: recover the instruments
//! from the snapshot channel) and "MDP 3.0 - Packet Sequence Number".

use std::collections::HashSet;

use mdfan_wire::{flags, BookUpdate, Kind};

use crate::mdp3::{book_record, stale_record, DecodeError, Event, Mdp3Decoder};

/// What a channel counted (all since construction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelCounters {
    /// Packets handed to [`Mdp3Channel::on_packet`].
    pub packets: u64,
    /// Of those, refused by the decoder (see [`Mdp3Channel::last_error`]).
    pub bad_packets: u64,
    /// Price-level records emitted (book entries, `Clear` for a book reset).
    pub level_records: u64,
    /// `InstrumentStale` records emitted for `RptSeq` jumps.
    pub rpt_seq_stale_records: u64,
    /// Runs of packets lost on both lines ([`Mdp3Channel::on_lost_packets`] calls).
    pub lost_runs: u64,
    /// Packets lost on both lines.
    pub lost_packets: u64,
    /// `InstrumentStale` records emitted for lost packets (securities marked, summed over the runs).
    pub lost_stale_records: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Mdp3Channel {
    decoder: Mdp3Decoder,
    /// Every security the channel carried, in first-seen order, and the same as a set.
    securities: Vec<i32>,
    known: HashSet<i32>,
    counters: ChannelCounters,
    last_error: Option<DecodeError>,
}

impl Mdp3Channel {
    /// A channel with room for `instruments` securities (decoder `RptSeq` table and the stale list) before it
    /// allocates.
    pub fn with_capacity(instruments: usize) -> Mdp3Channel {
        Mdp3Channel {
            decoder: Mdp3Decoder::with_capacity(instruments),
            securities: Vec::with_capacity(instruments),
            known: HashSet::with_capacity(instruments),
            counters: ChannelCounters::default(),
            last_error: None,
        }
    }

    /// Decodes one packet received at `ts_recv_ns` (ns since the UNIX epoch: the datagram's receive stamp) and
    /// hands its records to `out`, in packet order. Returns the records emitted. A refused packet emits nothing
    /// and is counted.
    pub fn on_packet(&mut self, payload: &[u8], ts_recv_ns: u64, out: &mut impl FnMut(&BookUpdate)) -> usize {
        self.counters.packets += 1;
        let (securities, known, counters) = (&mut self.securities, &mut self.known, &mut self.counters);
        let mut emitted = 0;
        let result = self.decoder.decode_packet(payload, ts_recv_ns, |info, event| {
            let record = match event {
                Event::Book(e) => {
                    if known.insert(e.security_id) {
                        securities.push(e.security_id);
                    }
                    counters.level_records += 1;
                    book_record(info, e)
                }
                Event::RptSeqGap { security_id, expected, got } => {
                    counters.rpt_seq_stale_records += 1;
                    stale_record(info, *security_id, *expected, *got)
                }
                _ => return,
            };
            emitted += 1;
            out(&record);
        });
        if let Err(e) = result {
            self.counters.bad_packets += 1;
            self.last_error = Some(e);
        }
        emitted
    }

    /// Packets `first..=last` (`MsgSeqNum`) came on neither line: marks every security carried so far stale (see
    /// the module docs for the record). Returns the records emitted.
    pub fn on_lost_packets(
        &mut self,
        first: u64,
        last: u64,
        ts_recv_ns: u64,
        out: &mut impl FnMut(&BookUpdate),
    ) -> usize {
        let lost = last.saturating_sub(first) + 1;
        self.counters.lost_runs += 1;
        self.counters.lost_packets += lost;
        for &security_id in &self.securities {
            out(&BookUpdate {
                ts_recv_ns,
                order_id: first,
                instrument_id: security_id as u32,
                size: lost.min(u64::from(u32::MAX)) as u32,
                venue_seq: first as u32,
                flags: flags::MAYBE_BAD_BOOK,
                ..BookUpdate::control(Kind::InstrumentStale)
            });
        }
        self.counters.lost_stale_records += self.securities.len() as u64;
        self.securities.len()
    }

    /// The counters.
    pub fn counters(&self) -> &ChannelCounters {
        &self.counters
    }

    /// The decoder (its own counters: templates, sequence checks).
    pub fn decoder(&self) -> &Mdp3Decoder {
        &self.decoder
    }

    /// The last decode error, naming the packet, message, template and field.
    pub fn last_error(&self) -> Option<&DecodeError> {
        self.last_error.as_ref()
    }

    /// The securities the channel has carried, in first-seen order.
    pub fn securities(&self) -> &[i32] {
        &self.securities
    }
}
