//! instrument_id → symbol from DBN metadata: the bundled ESH4 files, and written files for the cases they lack
//! (intervals outside the file's dates, unresolved days, a mapping the other way, a broken mapping).

#[path = "support/dbn_file.rs"]
mod dbn_file;
#[path = "support/mdp3.rs"]
mod mdp3;

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use dbn::encode::{dbn::Encoder, EncodeRecord};
use dbn::{MappingInterval, Metadata, SType, Schema, SymbolMapping};
use dbn_file::{mbo, LAST};
use mdfan_feed::dbn::MboStream;
use time::macros::date;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/cme-glbx-mdp3-es-mbo-dbn").join(name)
}

#[test]
fn the_bundled_esh4_files_map_17077_to_esh4() {
    for name in ["esh4-glbx-mdp3-20231224.mbo.dbn.zst", "esh4-glbx-mdp3-20231225.mbo.dbn.zst"] {
        let stream = MboStream::open(&data(name)).unwrap();
        let s = stream.symbology();
        assert_eq!(s.len(), 1, "{name}");
        assert_eq!(s.symbol(17077), Some("ESH4"), "{name}");
        assert_eq!(s.ids_of("ESH4"), vec![17077], "{name}");
        let def = s.get(17077).unwrap();
        assert_eq!((def.display_factor_e9, def.tick_size_e9), (1_000_000_000, 0), "{name}: DBN carries neither");
        assert_eq!(s.format_price(17077, 4_810_250_000_000), "4810.25");
    }
}

const DEC25_NS: u64 = 1_703_462_400_000_000_000;
const DEC26_NS: u64 = 1_703_548_800_000_000_000;

fn interval(start: time::Date, end: time::Date, symbol: &str) -> MappingInterval {
    MappingInterval { start_date: start, end_date: end, symbol: symbol.to_owned() }
}

fn open_with(
    tag: &str,
    stype_in: SType,
    stype_out: SType,
    mappings: Vec<SymbolMapping>,
) -> Result<MboStream<std::io::BufReader<dbn::decode::DynReader<'static, std::io::BufReader<std::fs::File>>>>, String> {
    let metadata = Metadata::builder()
        .dataset("GLBX.MDP3".to_owned())
        .schema(Some(Schema::Mbo))
        .start(DEC25_NS)
        .end(NonZeroU64::new(DEC26_NS))
        .stype_in(Some(stype_in))
        .stype_out(stype_out)
        .mappings(mappings)
        .build();
    let mut encoder = Encoder::new(Vec::new(), &metadata).unwrap();
    encoder.encode_record(&mbo(17077, 1, b'A', b'B', 1, 4_810_250_000_000, 1, LAST)).unwrap();
    let path = std::env::temp_dir().join(format!("mdfan-symbology-{tag}-{}.dbn", std::process::id()));
    std::fs::write(&path, encoder.get_ref()).unwrap();
    let stream = MboStream::open(&path).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    stream
}

#[test]
fn only_intervals_over_the_files_dates_with_a_symbol_count() {
    let mappings = vec![
        SymbolMapping {
            raw_symbol: "ESH4".into(),
            intervals: vec![
                interval(date!(2023 - 12 - 22), date!(2023 - 12 - 25), "1"), // ends as the file starts
                interval(date!(2023 - 12 - 25), date!(2023 - 12 - 26), "17077"),
                interval(date!(2023 - 12 - 26), date!(2023 - 12 - 27), "2"), // starts as the file ends
            ],
        },
        SymbolMapping {
            raw_symbol: "ESM4".into(),
            intervals: vec![interval(date!(2023 - 12 - 25), date!(2023 - 12 - 26), "")], // not resolved that day
        },
        SymbolMapping {
            raw_symbol: "NQH4".into(),
            intervals: vec![interval(date!(2023 - 12 - 20), date!(2024 - 01 - 10), "4242")],
        },
    ];
    let stream = open_with("raw", SType::RawSymbol, SType::InstrumentId, mappings).unwrap();
    let s = stream.symbology();
    assert_eq!(
        s.iter().map(|d| (d.instrument_id, d.symbol.as_str())).collect::<Vec<_>>(),
        vec![(4242, "NQH4"), (17077, "ESH4")]
    );
}

#[test]
fn a_file_requested_by_instrument_id_maps_the_other_way_and_a_continuous_one_gives_none() {
    let by_id = vec![SymbolMapping {
        raw_symbol: "17077".into(),
        intervals: vec![interval(date!(2023 - 12 - 25), date!(2023 - 12 - 26), "ESH4")],
    }];
    let stream = open_with("by-id", SType::InstrumentId, SType::RawSymbol, by_id).unwrap();
    assert_eq!(stream.symbology().symbol(17077), Some("ESH4"));
    let continuous = vec![SymbolMapping {
        raw_symbol: "ES.c.0".into(),
        intervals: vec![interval(date!(2023 - 12 - 25), date!(2023 - 12 - 26), "ESH4")],
    }];
    let stream = open_with("continuous", SType::Continuous, SType::RawSymbol, continuous).unwrap();
    assert!(stream.symbology().is_empty());
}

#[test]
fn a_mapping_that_is_not_an_instrument_id_names_the_file_symbol_and_dates() {
    let bad = vec![SymbolMapping {
        raw_symbol: "ESH4".into(),
        intervals: vec![interval(date!(2023 - 12 - 25), date!(2023 - 12 - 26), "ES 17077")],
    }];
    let e = open_with("bad", SType::RawSymbol, SType::InstrumentId, bad).map(|_| ()).unwrap_err();
    assert!(e.starts_with("feed ") && e.contains("mdfan-symbology-bad-"), "{e}");
    assert!(
        e.ends_with(": cannot open DBN file: metadata symbol mapping `ESH4` for 2023-12-25..2023-12-26: `ES 17077` is not an instrument_id (0 to 4294967295)"),
        "{e}"
    );
}

/// The example symbol file shipped for the bundled MDP 3.0 capture (an assumed mapping: the capture has no
/// definitions): 174969's levels in the data README, 7580.5 (mantissa x 10^-7) and on, print as 0.75805 and on.
#[test]
fn the_shipped_mdp3_symbol_file_parses_to_its_assumed_mapping() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/mdp3-symbols.csv");
    let s = mdfan_feed::symbols::load_symbol_file(&path).unwrap();
    assert_eq!(s.len(), 1);
    let def = s.get(174969).unwrap();
    assert_eq!((def.symbol.as_str(), def.display_factor_e9, def.tick_size_e9), ("6CZ6", 100_000, 500_000_000));
    // The README's top 5 levels per side of 174969 (mantissa x 10^-7, 7580.5 ..), as a person reads them.
    let print = |levels: [Option<mdfan_wire::MbpLevel>; 5]| -> Vec<String> {
        levels.iter().map(|l| s.format_price(mdp3::SECURITY, l.unwrap().price_e9)).collect()
    };
    assert_eq!(print(mdp3::reference_bids()), ["0.75805", "0.75800", "0.75795", "0.75790", "0.75785"]);
    assert_eq!(print(mdp3::reference_asks()), ["0.75815", "0.75820", "0.75825", "0.75830", "0.75835"]);
    assert_eq!(s.ids_of("6CZ6"), vec![174969]);
}
