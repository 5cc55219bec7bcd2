//! A CME MDP 3.0 instrument definition feed: the definitions of a symbol file sent as a loop of
//! MDInstrumentDefinitionFuture27 messages ([`mdfan_feed::mdp3::write_definition_message`]), what a channel's
//! definition feed carries (CME Client Systems Wiki, "MDP 3.0 - Security Definition", "MDP 3.0 - Instrument
//! Definition Channel"). Each loop goes out whole every `interval_ms`: one message per instrument in ascending
//! `SecurityID`, `TotNumReports` = the instruments, as many messages a packet as fit 1,420 bytes, packets
//! numbered from 1 across loops. The addresses are the lines' ([`crate::sender`]).

use std::net::SocketAddrV4;

use mdfan_feed::mdp3::{write_definition_message, write_packet_header, InstrumentDefinition, DEFINITION_MESSAGE_BYTES};
use mdfan_wire::InstrumentDef;

use crate::feed::RecoveryServer;
use crate::sender::{LineSender, MulticastScope, SendError};

/// Largest definition packet, bytes (as the snapshot feed's).
const MAX_PACKET_BYTES: usize = 1_420;

/// The definition loop of a run ([`crate::SimConfig::definitions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionsConfig {
    /// Where the loop is sent (a multicast group or a loopback address).
    pub addr: SocketAddrV4,
    /// The instruments it defines (a symbol file's, `mdfan_feed::symbols`).
    pub instruments: Vec<InstrumentDef>,
    /// Period of the loop, ms (1 or more).
    pub interval_ms: u64,
}

/// The definition feed's server: the loop of [`DefinitionsConfig::instruments`] every `interval_ms`.
pub struct DefinitionLoop {
    sender: LineSender,
    /// One loop, as packets without their header (`MsgSeqNum`, `SendingTime` go in front at send time).
    bodies: Vec<Vec<u8>>,
    interval_ns: u64,
    next_due_ns: u64,
    next_msg_seq_num: u32,
    packets_sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    packet: Vec<u8>,
}

/// `def` as a definition message's fields: symbol (its first 20 bytes), id, tick size and display factor,
/// update action `A`, `TotNumReports` `total`.
pub fn definition_of(def: &InstrumentDef, total: u32) -> InstrumentDefinition {
    let mut symbol_bytes = [0u8; 20];
    let n = def.symbol.len().min(20);
    symbol_bytes[..n].copy_from_slice(&def.symbol.as_bytes()[..n]);
    InstrumentDefinition {
        template_id: 27,
        tot_num_reports: Some(total),
        update_action: b'A',
        last_update_time_ns: 0,
        symbol_bytes,
        // An id past Int32 goes out as null (receivers refuse it); the CLI refuses such a symbol file.
        security_id: i32::try_from(def.instrument_id).unwrap_or(i32::MAX),
        min_price_increment_e9: (def.tick_size_e9 > 0).then_some(def.tick_size_e9),
        display_factor_e9: def.display_factor_e9,
    }
}

impl DefinitionLoop {
    /// A loop sending `cfg.instruments` to `cfg.addr` (multicast as `scope` says).
    ///
    /// # Errors
    /// [`SendError`] for a destination the sender refuses or a socket that cannot be opened.
    pub fn open(cfg: &DefinitionsConfig, scope: MulticastScope) -> Result<Self, SendError> {
        let sender = LineSender::open_scoped("definitions", cfg.addr, scope)?;
        let mut defs: Vec<&InstrumentDef> = cfg.instruments.iter().collect();
        defs.sort_by_key(|d| d.instrument_id);
        let total = defs.len() as u32;
        let per_packet = ((MAX_PACKET_BYTES - mdfan_feed::mdp3::PACKET_HEADER_BYTES) / DEFINITION_MESSAGE_BYTES).max(1);
        let bodies = defs
            .chunks(per_packet)
            .map(|chunk| {
                let mut body = Vec::with_capacity(per_packet * DEFINITION_MESSAGE_BYTES);
                for d in chunk {
                    write_definition_message(&mut body, &definition_of(d, total));
                }
                body
            })
            .collect();
        Ok(DefinitionLoop {
            sender,
            bodies,
            interval_ns: cfg.interval_ms.max(1) * 1_000_000,
            next_due_ns: 0,
            next_msg_seq_num: 1,
            packets_sent: Default::default(),
            packet: Vec::with_capacity(MAX_PACKET_BYTES),
        })
    }

    /// Packets sent so far, readable after the server was handed to the player.
    pub fn packets_sent(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        std::sync::Arc::clone(&self.packets_sent)
    }
}

impl RecoveryServer for DefinitionLoop {
    fn published(&mut self, _seq: u64, _payload: &[u8]) {}

    fn poll(&mut self, now_ns: u64) -> std::io::Result<usize> {
        if now_ns < self.next_due_ns || self.bodies.is_empty() {
            return Ok(0);
        }
        self.next_due_ns = now_ns.saturating_add(self.interval_ns);
        for body in &self.bodies {
            self.packet.clear();
            write_packet_header(&mut self.packet, self.next_msg_seq_num, now_ns);
            self.packet.extend_from_slice(body);
            self.sender.send(&self.packet).map_err(|e| std::io::Error::other(e.to_string()))?;
            self.next_msg_seq_num = self.next_msg_seq_num.wrapping_add(1);
        }
        let n = self.bodies.len();
        self.packets_sent.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_defines_every_instrument_once_in_id_order_and_decodes_back() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = rx.local_addr().unwrap() else { unreachable!() };
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mut instruments: Vec<InstrumentDef> = (0..9u32)
            .map(|i| InstrumentDef {
                tick_size_e9: 500_000_000,
                display_factor_e9: 100_000,
                ..InstrumentDef::new(1_000 - i, format!("SYM{i}"))
            })
            .collect();
        instruments[0].tick_size_e9 = 0; // unknown: sent as null
        let cfg = DefinitionsConfig { addr, instruments: instruments.clone(), interval_ms: 1_000 };
        let mut l = DefinitionLoop::open(&cfg, MulticastScope::Loopback).unwrap();
        // 238 bytes a message: 5 in a 1,420-byte packet, so 9 instruments are 2 packets
        assert_eq!(l.poll(1).unwrap(), 2);
        assert_eq!(l.poll(2).unwrap(), 0, "not due again before interval_ms");
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        for seq in 1..=2u32 {
            let n = rx.recv(&mut buf).unwrap();
            let h = mdfan_feed::mdp3::decode_definition_packet(&buf[..n], 0, |d| {
                assert_eq!(d.tot_num_reports, Some(9));
                got.push(d.instrument_def().unwrap());
            })
            .unwrap();
            assert_eq!(h.msg_seq_num, seq);
        }
        instruments.sort_by_key(|d| d.instrument_id);
        assert_eq!(got, instruments);
        assert_eq!(l.packets_sent().load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn namespace_routes_are_refused_from_the_namespace_the_process_started_in() {
        if crate::sender::in_own_netns() {
            return; // a CI that runs in a namespace of its own: nothing to refuse here
        }
        let cfg = DefinitionsConfig { addr: "239.255.0.1:9".parse().unwrap(), instruments: Vec::new(), interval_ms: 1 };
        let e = DefinitionLoop::open(&cfg, MulticastScope::NamespaceRoutes).err().unwrap();
        assert!(matches!(e, SendError::NotOwnNamespace { line: "definitions", .. }), "{e}");
    }
}
