//! ITCH 5.0 over MoldUDP64, real packets (data/nasdaq-itch50-moldudp64-pcap-20230822/): every value asserted here
//! is from that folder's README table.

use std::path::{Path, PathBuf};

use mdfan_feed::itch::{decode_message, eastern_midnight_ns, AddOrder, Body, Message};
use mdfan_feed::moldudp64::{Packet, PacketKind};
use mdfan_feed::pcap::{read_udp_capture, UdpPacket};

fn path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nasdaq-itch50-moldudp64-pcap-20230822").join(name)
}

/// 2023-08-22 00:00 UTC, in µs.
const DAY_UTC_US: u64 = 1_692_662_400_000_000;
const E9: i64 = 1_000_000_000;

fn px(cents: i64) -> i64 {
    cents * E9 / 100
}

/// The capture's UDP packets, each parsed as MoldUDP64 with its ITCH messages decoded.
fn read(name: &str) -> Vec<(UdpPacket, String, u64, u16, Vec<Message>)> {
    let cap = read_udp_capture(&path(name)).unwrap();
    assert_eq!(cap.skipped_not_udp, 0);
    cap.packets
        .into_iter()
        .map(|p| {
            let mold = Packet::parse(&p.payload).unwrap();
            assert_eq!(mold.kind(), PacketKind::Messages);
            let msgs: Vec<Message> = mold
                .messages()
                .map(|b| {
                    let m = decode_message(b.message, b.offset as u64).unwrap();
                    assert_eq!(Some(b.message.len()), mdfan_feed::itch::message_length(m.header.msg_type));
                    m
                })
                .collect();
            assert_eq!(msgs.len(), usize::from(mold.message_count));
            let (session, seq, count) = (mold.session_str().to_owned(), mold.sequence_number, mold.message_count);
            (p, session, seq, count, msgs)
        })
        .collect()
}

/// One single-message packet: (capture µs after 00:00 UTC, rounded as the README gives them, session, sequence number, the message).
fn single(name: &str, nasdaq: bool) -> (u64, String, u64, Message, u64) {
    let mut v = read(name);
    assert_eq!(v.len(), 1);
    let (p, session, seq, count, msgs) = v.remove(0);
    assert_eq!(count, 1);
    let (src, dst) = if nasdaq {
        ("206.200.127.138:49653", "233.54.12.111:26477")
    } else {
        ("206.200.243.241:55143", "233.49.196.40:25475")
    };
    assert_eq!((p.src.to_string().as_str(), p.dst.to_string().as_str()), (src, dst));
    let m = msgs[0];
    // Capture time minus the ITCH time made absolute (US Eastern is UTC-4 in August).
    let latency_ns = p.ts_ns - (eastern_midnight_ns(2023, 8, 22).unwrap() + m.header.timestamp_ns);
    ((p.ts_ns + 500) / 1000 - DAY_UTC_US, session, seq, m, latency_ns)
}

const T1330: u64 = 48_600_000_000;

#[test]
fn nasdaq_single_message_packets() {
    let (t, s, seq, m, lat) = single("nasdaq/OrderReplaceMessage.pcap", true);
    assert_eq!((t, s.as_str(), seq, m.header.stock_locate), (T1330 + 1, "000010059B", 14_757_701, 7603));
    assert_eq!(
        m.body,
        Body::Replace { original_ref: 15_108_479, new_ref: 21_361_351, shares: 100, price_e9: px(10_626) }
    );
    assert!((163_700..=166_700).contains(&lat), "{lat}");

    let (t, s, seq, m, lat) = single("nasdaq/AddOrderNoMpidAttributionMessage.pcap", true);
    assert_eq!((t, s.as_str(), seq, m.header.stock_locate), (T1330 + 59, "000010059B", 14_757_721, 5528));
    let Body::AddOrder(a) = m.body else { panic!("{m:?}") };
    assert_eq!(
        (a.stock.as_str(), a.buy_sell, a.shares, a.price_e9, a.order_ref),
        ("IVOO", b'B', 1600, px(8739), 23_508_286)
    );
    assert!((163_700..=166_700).contains(&lat), "{lat}");

    let (t, _, seq, m, _) = single("nasdaq/OrderDeleteMessage.pcap", true);
    assert_eq!(
        (t, seq, m.header.stock_locate, m.body),
        (T1330 + 60, 14_757_722, 3517, Body::Delete { order_ref: 23_497_686 })
    );

    let (t, _, seq, m, _) = single("nasdaq/OrderExecutedMessage.pcap", true);
    assert_eq!(
        (t, seq, m.header.stock_locate, m.body),
        (T1330 + 100, 14_757_745, 2345, Body::Executed { order_ref: 23_499_418, shares: 25, match_number: 255_547 })
    );

    let (t, _, seq, m, _) = single("nasdaq/NetOrderImbalanceIndicatorMessage.pcap", true);
    assert_eq!((t, seq, m.header.stock_locate), (T1330 + 434, 14_757_919, 6462));
    let Body::Imbalance(i) = m.body else { panic!("{m:?}") };
    assert_eq!((i.stock.as_str(), i.paired_shares, i.imbalance_shares, i.reference_price_e9), ("MDC", 1, 0, px(4644)));

    let (t, _, seq, m, _) = single("nasdaq/MarketParticipantPositionMessage.pcap", true);
    assert_eq!((t, seq, m.header.stock_locate), (T1330 + 24_494_967, 17_861_990, 3731));
    let Body::ParticipantPosition { mpid, stock, primary_market_maker, mode, state } = m.body else { panic!("{m:?}") };
    assert_eq!((mpid.as_str(), stock.as_str(), primary_market_maker, mode, state), ("MAXM", "FGMC", b'Y', b'N', b'A'));

    let (t, _, seq, m, _) = single("nasdaq/StockTradingActionMessage.pcap", true);
    assert_eq!((t, seq, m.header.stock_locate), (T1330 + 563_322_631, 34_147_961, 464));
    let Body::TradingAction { stock, trading_state, .. } = m.body else { panic!("{m:?}") };
    assert_eq!((stock.as_str(), trading_state), ("AMC", b'T'));
}

#[test]
fn bx_single_message_packets() {
    let (t, s, seq, m, lat) = single("bx/AddOrderNoMpidAttributionMessage.pcap", false);
    assert_eq!((t, s.as_str(), seq, m.header.stock_locate), (T1330 + 87, "000010059D", 1_621_717, 524));
    let Body::AddOrder(a) = m.body else { panic!("{m:?}") };
    assert_eq!((a.stock.as_str(), a.buy_sell, a.shares, a.price_e9), ("AMZU", b'B', 300, px(2427)));
    assert!((728_700..=730_600).contains(&lat), "{lat}");

    let (t, _, seq, m, _) = single("bx/OrderDeleteMessage.pcap", false);
    assert_eq!(
        (t, seq, m.header.stock_locate, m.body),
        (T1330 + 255, 1_621_741, 4135, Body::Delete { order_ref: 2_902_330 })
    );

    let (t, _, seq, m, _) = single("bx/OrderReplaceMessage.pcap", false);
    assert_eq!(
        (t, seq, m.header.stock_locate, m.body),
        (
            T1330 + 394,
            1_621_746,
            2908,
            Body::Replace { original_ref: 2_589_422, new_ref: 3_541_246, shares: 100, price_e9: px(5488) }
        )
    );
}

#[test]
fn nasdaq_multiple_packets() {
    let v = read("nasdaq/Multiple.Packets.pcap");
    assert_eq!(v.len(), 2);
    let (p, s, seq, count, msgs) = &v[0];
    assert_eq!(
        ((p.ts_ns + 500) / 1000 - DAY_UTC_US, s.as_str(), *seq, *count),
        (T1330 + 7662, "000010059B", 14_764_496, 1)
    );
    assert_eq!((msgs[0].header.stock_locate, msgs[0].body), (2737, Body::Delete { order_ref: 23_485_802 }));

    let (p, s, seq, count, msgs) = &v[1];
    assert_eq!(
        ((p.ts_ns + 500) / 1000 - DAY_UTC_US, s.as_str(), *seq, *count),
        (T1330 + 38_952_562, "000010059B", 19_009_117, 38)
    );
    // The README says a 1,476-byte UDP payload; the blocks add up to 20 + 36 x (2 + 36) + 2 x (2 + 40) = 1,472
    // bytes, and the 1,518-byte frame is 14 (Ethernet) + 4 (802.1Q tag) + 20 (IPv4) + 8 (UDP) + 1,472.
    assert_eq!(p.payload.len(), 1472);
    let adds: Vec<AddOrder> = msgs
        .iter()
        .map(|m| {
            assert_eq!((m.header.stock_locate, m.header.timestamp_ns), (6514, 34_238_952_381_153));
            let Body::AddOrder(a) = m.body else { panic!("{m:?}") };
            assert_eq!(a.stock.as_str(), "META");
            a
        })
        .collect();
    assert_eq!(msgs.iter().filter(|m| m.header.msg_type == b'A').count(), 36);
    let mpids: Vec<String> = adds.iter().filter_map(|a| a.mpid).map(|m| m.as_str().to_owned()).collect();
    assert_eq!(mpids, ["UBSS", "UBSS"]);
    for (side, n, lo, hi, shares) in [(b'B', 19, px(8000), px(8052), 562u32), (b'S', 19, px(35_733), px(35_800), 499)] {
        let s: Vec<&AddOrder> = adds.iter().filter(|a| a.buy_sell == side).collect();
        assert_eq!(s.len(), n);
        assert_eq!(s.iter().map(|a| a.price_e9).min(), Some(lo));
        assert_eq!(s.iter().map(|a| a.price_e9).max(), Some(hi));
        assert_eq!(s.iter().map(|a| a.shares).sum::<u32>(), shares);
    }
    let lat = p.ts_ns - (eastern_midnight_ns(2023, 8, 22).unwrap() + 34_238_952_381_153);
    assert!((180_000..=181_000).contains(&lat), "{lat}");
}

#[test]
fn nasdaq_packets_merged_show_the_gaps() {
    let names = [
        "OrderReplaceMessage",
        "AddOrderNoMpidAttributionMessage",
        "OrderDeleteMessage",
        "OrderExecutedMessage",
        "NetOrderImbalanceIndicatorMessage",
        "Multiple.Packets",
        "MarketParticipantPositionMessage",
        "StockTradingActionMessage",
    ];
    let mut all: Vec<(u64, u16, u64)> = Vec::new();
    for n in names {
        for (p, _, seq, count, _) in read(&format!("nasdaq/{n}.pcap")) {
            all.push((seq, count, p.ts_ns));
        }
    }
    all.sort_unstable();
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|w| w[0].2 < w[1].2), "sequence and capture time rise together");
    let gaps = all.windows(2).filter(|w| w[0].0 + u64::from(w[0].1) != w[1].0).count();
    let contiguous = all.windows(2).filter(|w| w[0].0 + u64::from(w[0].1) == w[1].0).count();
    // 14,757,721 then 14,757,722 is the only contiguous pair.
    assert_eq!((gaps, contiguous), (7, 1));
    let total: u32 = all.iter().map(|a| u32::from(a.1)).sum();
    assert_eq!(total, 46);
}
