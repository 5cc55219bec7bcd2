//! MDP 3.0 instrument definitions (MDInstrumentDefinitionFuture27, Spread29, Option41) on a definition feed,
//! and the `SecurityID` rewrite a simulator plays a second channel with. Offsets: the bundled schema
//! (data/cme-mdp3-sbe-v8-pcap-20160927/templates_FixBinary.xml, version 8).

use std::net::SocketAddrV4;

use mdfan_feed::mdp3::{
    decode_definition_packet, map_security_ids, write_definition_message, write_packet_header, Event,
    InstrumentDefinition, Mdp3Decoder, Problem, DEFINITION_MESSAGE_BYTES,
};
use mdfan_feed::pcap::read_udp_pcapng;
use mdfan_wire::InstrumentDef;

#[path = "support/mdp3.rs"]
mod mdp3_ref;

fn six_c() -> InstrumentDefinition {
    let mut symbol_bytes = [0u8; 20];
    symbol_bytes[..4].copy_from_slice(b"6CZ6");
    InstrumentDefinition {
        template_id: 27,
        tot_num_reports: Some(2),
        update_action: b'A',
        last_update_time_ns: 1_474_990_000_000_000_000,
        symbol_bytes,
        security_id: 174_969,
        // 0.5 in the feed's units (mantissa 5,000,000 x 1e-7), display factor 0.0001 (mantissa 1,000)
        min_price_increment_e9: Some(500_000_000),
        display_factor_e9: 100_000,
    }
}

fn packet(seq: u32, defs: &[InstrumentDefinition]) -> Vec<u8> {
    let mut p = Vec::new();
    write_packet_header(&mut p, seq, 1_474_990_000_000_000_000);
    for d in defs {
        write_definition_message(&mut p, d);
    }
    p
}

#[test]
fn a_written_future_definition_reads_back_with_its_fields_at_the_schema_offsets() {
    let d = six_c();
    let p = packet(1, &[d]);
    assert_eq!(p.len(), 12 + DEFINITION_MESSAGE_BYTES);
    assert_eq!(DEFINITION_MESSAGE_BYTES, 2 + 8 + 216 + 12, "MsgSize, SBE header, v8 root, four empty groups");
    // SBE header: blockLength 216, template 27, schema 1, version 8
    assert_eq!(p[14..22], [216, 0, 27, 0, 1, 0, 8, 0]);
    let root = 12 + 10;
    assert_eq!(&p[root + 35..root + 39], b"6CZ6", "Symbol at 35");
    assert_eq!(p[root + 55..root + 59], 174_969i32.to_le_bytes(), "SecurityID at 55");
    assert_eq!(p[root + 91..root + 99], 5_000_000i64.to_le_bytes(), "MinPriceIncrement mantissa at 91");
    assert_eq!(p[root + 99..root + 107], 1_000i64.to_le_bytes(), "DisplayFactor mantissa at 99");
    let mut got = Vec::new();
    let h = decode_definition_packet(&p, 5, |d| got.push(*d)).unwrap();
    assert_eq!(h.msg_seq_num, 1);
    assert_eq!(got, [d]);
    assert_eq!(got[0].symbol(), Some("6CZ6"));
    assert_eq!(
        got[0].instrument_def(),
        Some(InstrumentDef {
            instrument_id: 174_969,
            symbol: "6CZ6".into(),
            display_factor_e9: 100_000,
            tick_size_e9: 500_000_000
        })
    );
    // The incremental feed's decoder delivers it too (CME sends a new instrument's definition there).
    let mut dec = Mdp3Decoder::default();
    let mut events = Vec::new();
    dec.decode_packet(&p, 5, |_, e| events.push(*e)).unwrap();
    assert_eq!(events, [Event::Definition(d)]);
    assert_eq!(dec.stats().unknown_templates, 0);
}

#[test]
fn a_definition_with_a_bad_display_factor_or_a_short_root_is_refused_naming_the_field() {
    let mut p = packet(7, &[six_c()]);
    let factor_at = 12 + 10 + 99;
    p[factor_at..factor_at + 8].copy_from_slice(&0i64.to_le_bytes());
    let e = decode_definition_packet(&p, 0, |_| panic!("nothing is delivered from a bad packet")).unwrap_err();
    assert_eq!((e.msg_seq_num, e.template_id, e.field), (Some(7), Some(27), "DisplayFactor"));
    assert_eq!(e.problem, Problem::BadValue { value: 0 });
    // A blockLength that stops before DisplayFactor's end (107).
    let mut p = packet(8, &[six_c()]);
    p[14..16].copy_from_slice(&100u16.to_le_bytes());
    let e = decode_definition_packet(&p, 0, |_| {}).unwrap_err();
    assert_eq!((e.field, e.problem), ("blockLength", Problem::BlockLengthTooShort { got: 100, min: 107 }));
    // Padding that is not printable: no symbol, no InstrumentDef.
    let mut d = six_c();
    d.symbol_bytes[1] = 0x07;
    assert_eq!((d.symbol(), d.instrument_def()), (None, None));
}

#[test]
fn the_capture_with_its_security_ids_moved_decodes_to_the_same_events_with_the_new_ids() {
    const OFFSET: i32 = 1_000_000;
    let a: SocketAddrV4 = "224.0.31.11:14320".parse().unwrap();
    let cap = read_udp_pcapng(&mdp3_ref::capture_path()).unwrap();
    let (mut plain, mut moved) = (Mdp3Decoder::default(), Mdp3Decoder::default());
    let (mut rewritten, mut entries, mut statuses_with_id) = (0, 0, 0);
    for p in cap.packets.iter().filter(|p| p.dst == a) {
        let mut payload = p.payload.clone();
        rewritten += map_security_ids(&mut payload, |id| id + OFFSET).unwrap();
        let mut want = Vec::new();
        plain.decode_packet(&p.payload, 0, |_, e| want.push(*e)).unwrap();
        let mut got = Vec::new();
        moved.decode_packet(&payload, 0, |_, e| got.push(*e)).unwrap();
        for e in &mut want {
            match e {
                Event::Book(b) => b.security_id += OFFSET,
                Event::Statistics(s) => s.security_id += OFFSET,
                Event::Volume(v) => v.security_id += OFFSET,
                Event::TradeSummary(t) => t.security_id += OFFSET,
                Event::SecurityStatus(s) => s.security_id = s.security_id.map(|id| id + OFFSET),
                _ => {}
            }
            entries += u64::from(e.security_rpt_seq().is_some());
            statuses_with_id += u64::from(matches!(e, Event::SecurityStatus(s) if s.security_id.is_some()));
        }
        assert_eq!(got, want, "MsgSeqNum {}", u32::from_le_bytes(p.payload[..4].try_into().unwrap()));
    }
    // README "Per-instrument sequence": 6,195 entries carry a SecurityID and RptSeq (templates 32, 35, 37, 42).
    assert_eq!(entries, 6_195);
    assert_eq!(rewritten as u64, entries + statuses_with_id);
    assert_eq!(moved.rpt_seq(mdp3_ref::SECURITY as i32 + OFFSET), plain.rpt_seq(mdp3_ref::SECURITY as i32));
    // A packet that does not decode is left as it was.
    let mut bad = cap.packets[0].payload.clone();
    bad.truncate(bad.len() - 1);
    let before = bad.clone();
    assert!(map_security_ids(&mut bad, |id| id + 1).is_err());
    assert_eq!(bad, before);
}
