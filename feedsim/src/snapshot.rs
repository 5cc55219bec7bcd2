//! CME MDP 3.0 market recovery: the snapshot feed, served from the simulator's own state.
//!
//! [`SnapshotState`] keeps what the exchange would: it decodes every packet the simulator publishes (before
//! impairment, so it knows what the lines lost) with the feed crate's `Mdp3Decoder`, applies the book entries to
//! `mdfan_wire::MbpBooks` (the same price-level book subscribers keep) and remembers per instrument its last
//! `RptSeq` and `TransactTime` (every template carrying one) and the last `MsgSeqNum` published.
//!
//! [`Mdp3SnapshotServer`] sends it as a loop on its own UDP address, every `interval_ms`: one
//! SnapshotFullRefresh38 per instrument (ascending `SecurityID`, `TotNumReports` = the instruments in the loop),
//! holding its outright and implied levels (the book's filled positions, `MDPriceLevel` = the position, at most
//! [`mdfan_wire::MBP_DEPTH`] per side), `LastMsgSeqNumProcessed` = the last `MsgSeqNum` published and `RptSeq` =
//! the instrument's last. Messages are packed into MDP 3.0 packets of at most [`MAX_PACKET_BYTES`], numbered
//! by a `MsgSeqNum` of the snapshot feed's own, from 1 and up across loops (CME Client Systems Wiki, "MDP 3.0 -
//! Binary Packet Header": every feed numbers its packets). Prices go out as the decoded mantissas.
//! The loop keeps going after the capture ends for `linger_ms` ([`crate::run`]), so a late recovery can finish;
//! `silent` keeps the state and sends nothing (a snapshot feed that never answers). Same destinations as the
//! lines: loopback unicast or multicast on 127.0.0.1 with TTL 0 ([`crate::sender`]).
//!
//! Not modelled: statistics entries (trade, open, high/low, settlement, volume), instrument definitions,
//! ChannelReset4 (its book reset entries do clear the books), feed B of the snapshot channel.

use std::collections::BTreeMap;

use mdfan_feed::mdp3::{
    book_record, write_packet_header, write_snapshot_message, DecodeError, Event, Mdp3Decoder, SnapshotEntry,
    SnapshotRefresh, LOCAL_MKT_DATE_NULL, PACKET_HEADER_BYTES,
};
use mdfan_wire::{MbpBooks, MbpLevel, Side, MBP_DEPTH};

use crate::feed::{RecoveryConfig, RecoveryServer};
use crate::sender::{LineSender, SendError};

/// Largest snapshot packet sent (UDP payload bytes), below a 1,500-byte Ethernet MTU.
pub const MAX_PACKET_BYTES: usize = 1_420;
/// Instruments the state's books reserve room for.
pub const MAX_INSTRUMENTS: usize = 4_096;

/// What the snapshot feed knows of one instrument besides its book.
#[derive(Debug, Clone, Copy)]
struct Instrument {
    rpt_seq: u32,
    transact_time_ns: u64,
}

/// The exchange-side state the snapshot feed is built from (module docs).
#[derive(Debug)]
pub struct SnapshotState {
    decoder: Mdp3Decoder,
    books: MbpBooks,
    instruments: BTreeMap<i32, Instrument>,
    last_msg_seq_num: u32,
    refused: u64,
}

impl Default for SnapshotState {
    fn default() -> Self {
        SnapshotState {
            decoder: Mdp3Decoder::default(),
            books: MbpBooks::with_capacity(MAX_INSTRUMENTS),
            instruments: BTreeMap::new(),
            last_msg_seq_num: 0,
            refused: 0,
        }
    }
}

impl SnapshotState {
    /// Takes one published incremental packet.
    ///
    /// # Errors
    /// The decoder's [`DecodeError`] (the packet changes nothing; counted in [`SnapshotState::refused`]).
    pub fn publish(&mut self, payload: &[u8]) -> Result<(), DecodeError> {
        let (books, instruments, refused) = (&mut self.books, &mut self.instruments, &mut self.refused);
        let out = self.decoder.decode_packet(payload, 0, |info, ev| {
            if let Event::Book(e) = ev {
                if books.apply(&book_record(info, e)).is_err() {
                    *refused += 1;
                }
            }
            if let Some((security_id, rpt_seq)) = ev.security_rpt_seq() {
                instruments.insert(security_id, Instrument { rpt_seq, transact_time_ns: info.transact_time_ns });
            }
        });
        match out {
            Ok(o) => {
                if !o.stale {
                    self.last_msg_seq_num = o.header.msg_seq_num;
                }
                Ok(())
            }
            Err(e) => {
                self.refused += 1;
                Err(e)
            }
        }
    }

    /// The books, as of the last packet published.
    pub fn books(&self) -> &MbpBooks {
        &self.books
    }

    /// The last `MsgSeqNum` published (0 before the first).
    pub fn last_msg_seq_num(&self) -> u32 {
        self.last_msg_seq_num
    }

    /// The instrument's last `RptSeq`.
    pub fn rpt_seq(&self, security_id: i32) -> Option<u32> {
        self.instruments.get(&security_id).map(|i| i.rpt_seq)
    }

    /// Instruments in a loop (every one that carried an `RptSeq`).
    pub fn instruments(&self) -> usize {
        self.instruments.len()
    }

    /// Packets refused by the decoder and book records the books refused.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Encodes one loop: packets numbered from `first_msg_seq_num`, each handed to `emit`. Returns the packets.
    ///
    /// # Errors
    /// The first error `emit` returns (the loop stops there).
    pub fn encode_loop<E>(
        &self,
        first_msg_seq_num: u32,
        sending_time_ns: u64,
        mut emit: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u32, E> {
        let mut packet = Vec::with_capacity(MAX_PACKET_BYTES);
        let mut entries: Vec<SnapshotEntry> = Vec::with_capacity(4 * MBP_DEPTH);
        let mut seq = first_msg_seq_num;
        let mut packets = 0;
        for (&security_id, inst) in &self.instruments {
            entries.clear();
            if let Some(book) = self.books.get(security_id as u32) {
                let sides = [
                    (book.top(Side::Bid, MBP_DEPTH), b'0'),
                    (book.top(Side::Ask, MBP_DEPTH), b'1'),
                    (book.implied_top(Side::Bid, MBP_DEPTH), b'E'),
                    (book.implied_top(Side::Ask, MBP_DEPTH), b'F'),
                ];
                for (levels, entry_type) in sides {
                    for (pos, level) in levels.iter().enumerate() {
                        if let Some(l) = level {
                            entries.push(entry(security_id, pos, l, entry_type));
                        }
                    }
                }
            }
            let s = SnapshotRefresh {
                last_msg_seq_num_processed: self.last_msg_seq_num,
                tot_num_reports: self.instruments.len() as u32,
                security_id,
                rpt_seq: inst.rpt_seq,
                transact_time_ns: inst.transact_time_ns,
                last_update_time_ns: 0,
                trade_date: LOCAL_MKT_DATE_NULL,
                trading_status: u8::MAX,
                high_limit_price_e9: None,
                low_limit_price_e9: None,
                max_price_variation_e9: None,
                entries: entries.len() as u8,
            };
            let size = mdfan_feed::mdp3::snapshot_message_bytes(entries.len());
            if packet.len() > PACKET_HEADER_BYTES && packet.len() + size > MAX_PACKET_BYTES {
                emit(&packet)?;
                packets += 1;
                packet.clear();
            }
            if packet.is_empty() {
                write_packet_header(&mut packet, seq, sending_time_ns);
                seq = seq.wrapping_add(1);
            }
            write_snapshot_message(&mut packet, &s, &entries);
        }
        if packet.len() > PACKET_HEADER_BYTES {
            emit(&packet)?;
            packets += 1;
        }
        Ok(packets)
    }
}

fn entry(security_id: i32, pos: usize, l: &MbpLevel, entry_type: u8) -> SnapshotEntry {
    let null_i32 = |v: u32| Some(i32::try_from(v).unwrap_or(i32::MAX));
    SnapshotEntry {
        security_id,
        price_e9: Some(l.price_e9).filter(|p| *p != i64::MAX),
        size: null_i32(l.size),
        orders: null_i32(l.orders),
        price_level: Some(pos as i8 + 1),
        trading_reference_date: LOCAL_MKT_DATE_NULL,
        open_close_settl_flag: u8::MAX,
        settl_price_type: 0,
        entry_type,
        book: None,
        last_book_entry: false,
    }
}

/// The MDP 3.0 snapshot feed's server: a [`SnapshotState`] sent as a loop every `interval_ms` (module docs).
pub struct Mdp3SnapshotServer {
    state: SnapshotState,
    /// `None` when silent.
    sender: Option<LineSender>,
    interval_ns: u64,
    next_due_ns: u64,
    next_msg_seq_num: u32,
    loops: u64,
    packets_sent: u64,
}

impl Mdp3SnapshotServer {
    /// A server sending to `cfg.addr` (loopback unicast, or multicast as `cfg.multicast` says).
    ///
    /// # Errors
    /// [`SendError`] for another destination or a socket that cannot be opened.
    pub fn open(cfg: &RecoveryConfig) -> Result<Self, SendError> {
        crate::sender::check_dest("snapshot", cfg.addr)?;
        let sender =
            if cfg.silent { None } else { Some(LineSender::open_scoped("snapshot", cfg.addr, cfg.multicast)?) };
        Ok(Mdp3SnapshotServer {
            state: SnapshotState::default(),
            sender,
            interval_ns: cfg.interval_ms.max(1) * 1_000_000,
            next_due_ns: 0,
            next_msg_seq_num: 1,
            loops: 0,
            packets_sent: 0,
        })
    }

    /// The state it serves.
    pub fn state(&self) -> &SnapshotState {
        &self.state
    }

    /// Loops sent.
    pub fn loops(&self) -> u64 {
        self.loops
    }

    /// Packets sent.
    pub fn packets_sent(&self) -> u64 {
        self.packets_sent
    }
}

impl RecoveryServer for Mdp3SnapshotServer {
    fn published(&mut self, _seq: u64, payload: &[u8]) {
        // A packet the decoder refuses is counted in the state and changes nothing: the capture is the truth.
        let _ = self.state.publish(payload);
    }

    fn poll(&mut self, now_ns: u64) -> std::io::Result<usize> {
        let Some(sender) = &self.sender else { return Ok(0) };
        if now_ns < self.next_due_ns || self.state.instruments() == 0 {
            return Ok(0);
        }
        self.next_due_ns = now_ns.saturating_add(self.interval_ns);
        let packets = self.state.encode_loop(self.next_msg_seq_num, now_ns, |p| {
            sender.send(p).map_err(|e| std::io::Error::other(e.to_string()))
        })?;
        self.next_msg_seq_num = self.next_msg_seq_num.wrapping_add(packets);
        self.loops += 1;
        self.packets_sent += u64::from(packets);
        Ok(packets as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::path::PathBuf;

    use mdfan_feed::mdp3::{decode_snapshot_packet, snapshot_clear_record, snapshot_level_record, Event};
    use mdfan_wire::{BookUpdate, MbpBooks, MbpLevel, Side, MBP_DEPTH};

    use super::{SnapshotState, MAX_PACKET_BYTES};
    use crate::read_capture;

    const LINE_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(224, 0, 31, 11), 14320);

    fn line_a_payloads() -> Vec<Vec<u8>> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../data/cme-mdp3-sbe-v8-pcap-20160927/Cme.Mdp3.Sbe.v8.1.Example.pcap");
        let c = read_capture(&path).unwrap();
        c.packets.into_iter().filter(|p| p.dst == LINE_A).map(|p| p.payload).collect()
    }

    /// Encodes one loop of `state`, decodes it back into fresh books; returns them and the packets' MsgSeqNums.
    fn round_trip(state: &SnapshotState, first_seq: u32) -> (MbpBooks, Vec<u32>, u64) {
        let mut books = MbpBooks::with_capacity(64);
        let (mut seqs, mut snapshots) = (Vec::new(), 0u64);
        let packets = state
            .encode_loop(first_seq, 99, |p| {
                assert!(p.len() <= MAX_PACKET_BYTES);
                let h = decode_snapshot_packet(p, 5, |info, ev| {
                    let r: Option<BookUpdate> = match ev {
                        Event::Snapshot(s) => {
                            snapshots += 1;
                            assert_eq!(s.last_msg_seq_num_processed, state.last_msg_seq_num());
                            assert_eq!(Some(s.rpt_seq), state.rpt_seq(s.security_id));
                            assert_eq!(s.tot_num_reports as usize, state.instruments());
                            Some(snapshot_clear_record(info, s))
                        }
                        Event::SnapshotEntry(e) => {
                            let s = mdfan_feed::mdp3::SnapshotRefresh {
                                last_msg_seq_num_processed: state.last_msg_seq_num(),
                                tot_num_reports: 0,
                                security_id: e.security_id,
                                rpt_seq: 0,
                                transact_time_ns: 0,
                                last_update_time_ns: 0,
                                trade_date: 0,
                                trading_status: 0,
                                high_limit_price_e9: None,
                                low_limit_price_e9: None,
                                max_price_variation_e9: None,
                                entries: 0,
                            };
                            Some(snapshot_level_record(info, &s, e).expect("only book entries are sent"))
                        }
                        other => panic!("{other:?}"),
                    };
                    books.apply(&r.unwrap()).unwrap();
                })
                .unwrap();
                seqs.push(h.msg_seq_num);
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(packets as usize, seqs.len());
        (books, seqs, snapshots)
    }

    fn assert_same_levels(state: &SnapshotState, got: &MbpBooks) {
        let mut n = 0;
        for want in state.books().iter() {
            let b = got.get(want.instrument_id()).expect("every book is in the loop");
            for side in [Side::Bid, Side::Ask] {
                assert_eq!(b.top(side, MBP_DEPTH), want.top(side, MBP_DEPTH), "{} {side:?}", want.instrument_id());
                assert_eq!(b.implied_top(side, MBP_DEPTH), want.implied_top(side, MBP_DEPTH));
            }
            assert!(!b.is_stale());
            n += 1;
        }
        assert_eq!(n, got.len());
    }

    #[test]
    fn a_loop_decodes_back_to_the_servers_own_books() {
        let payloads = line_a_payloads();
        assert_eq!(payloads.len(), 5_000);
        let mut state = SnapshotState::default();
        // Mid-capture: the books hold "padding" (positions never filled): the loop keeps the positions.
        for p in &payloads[..2_500] {
            state.publish(p).unwrap();
        }
        let (books, seqs, snapshots) = round_trip(&state, 1);
        assert_same_levels(&state, &books);
        assert_eq!(state.last_msg_seq_num(), 17_347_815 + 2_499);
        assert_eq!(snapshots, state.instruments() as u64);
        assert_eq!(seqs, (1..=seqs.len() as u32).collect::<Vec<_>>(), "MsgSeqNum from 1, one per packet");
        // The whole capture: 39 instruments, and 174969's book is the data README's.
        for p in &payloads[2_500..] {
            state.publish(p).unwrap();
        }
        let (books, seqs2, snapshots) = round_trip(&state, 1_000);
        assert_same_levels(&state, &books);
        assert_eq!((state.instruments(), snapshots, state.refused()), (39, 39, 0));
        assert_eq!(state.last_msg_seq_num(), 17_352_814);
        assert_eq!(seqs2[0], 1_000);
        let lv = |tenths: i64, size: u32, orders: u32| Some(MbpLevel { price_e9: tenths * 100_000_000, size, orders });
        let b = books.get(174_969).unwrap();
        assert_eq!(b.top(Side::Bid, 2), [lv(75_805, 8, 5), lv(75_800, 16, 9)]);
        assert_eq!(b.top(Side::Ask, 2), [lv(75_815, 19, 9), lv(75_820, 9, 6)]);
    }
}
