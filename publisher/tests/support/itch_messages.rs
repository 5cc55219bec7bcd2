//! ITCH 5.0 messages the publisher's tests build by hand.

/// A Stock Directory message (Nasdaq TotalView-ITCH 5.0 section 4.2.1, 39 bytes, no length prefix) for `locate`
/// and `stock`, stamped `timestamp_ns` (ns since midnight, 6 bytes big-endian). The fields other than locate and
/// symbol are plausible values (category Q, round lot 100).
pub fn stock_directory(locate: u16, stock: &[u8; 8], timestamp_ns: u64) -> Vec<u8> {
    let mut m = vec![b'R'];
    m.extend(locate.to_be_bytes());
    m.extend(0u16.to_be_bytes()); // tracking number
    m.extend(&timestamp_ns.to_be_bytes()[2..]);
    m.extend(stock);
    m.extend([b'Q', b'N']); // market category, financial status
    m.extend(100u32.to_be_bytes()); // round lot size
    m.extend([b'N', b'C', b'Z', b' ', b'P', b'N', b' ', b'1', b'N']); // round lots only .. ETP flag
    m.extend(0u32.to_be_bytes()); // ETP leverage factor
    m.push(b'N'); // inverse
    assert_eq!(m.len(), 39);
    m
}
