//! Captured UDP multicast from a pcapng or classic pcap file: (capture time in ns, source, destination
//! group:port, UDP payload).
//!
//! The container is read with the `pcap-file` crate (pcapng: section header, interface description and
//! enhanced packet blocks; other blocks are skipped; classic libpcap: the global header in either byte order,
//! micro- or nanosecond magic, then packet records). [`read_udp_capture`] tells the two apart by the first
//! four bytes (pcapng section header block type `0x0A0D0D0A`). The link, network and transport headers are stripped here
//! with checked reads:
//!
//! | layer | bytes | checked |
//! |---|---|---|
//! | Ethernet II | 14 (18 with one 802.1Q tag) | EtherType 0x0800 (IPv4), else the frame is skipped and counted |
//! | IPv4 | IHL x 4, 20..60 | version 4, IHL >= 5, total length within the frame, protocol 17 (UDP, else skipped and counted), not a fragment |
//! | UDP | 8 | length >= 8 and within the IPv4 payload; the payload is `length - 8` bytes (Ethernet padding dropped) |
//!
//! Timestamps: pcapng stores a 64-bit count of units of `if_tsresol` (option 9 of the interface description
//! block; absent = 10^-6 s). `pcap-file` 2.0 hands that raw count back as nanoseconds whatever the resolution,
//! so it is converted here: 10^-n units to ns exactly for n <= 9, by division beyond; 2^-n units in 128-bit
//! arithmetic. Sources: "PCAP Next Generation (pcapng) Capture File Format" (IETF opsawg draft
//! `draft-ietf-opsawg-pcapng`, sections "Interface Description Block" (`if_tsresol`) and "Enhanced Packet
//! Block"), RFC 791 (IPv4 header), RFC 768 (UDP), IEEE 802.1Q (VLAN tag).
//!
//! Loading a file allocates (one `Vec` for the packets, one per payload): it is the test and replay input, not
//! the live path, which will read payloads from a socket into reused buffers.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;

/// Ethernet II header: destination MAC, source MAC, EtherType.
const ETHERNET_HEADER_BYTES: usize = 14;
/// An 802.1Q VLAN tag (TPID 0x8100 + TCI) inserted before the EtherType.
const VLAN_TAG_BYTES: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const IPV4_MIN_HEADER_BYTES: usize = 20;
const IP_PROTOCOL_UDP: u8 = 17;
const UDP_HEADER_BYTES: usize = 8;

/// One UDP datagram from the capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket {
    /// Capture time, ns since the UNIX epoch.
    pub ts_ns: u64,
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination (multicast group) address and port.
    pub dst: SocketAddrV4,
    /// The UDP payload (for MDP 3.0: one binary packet).
    pub payload: Vec<u8>,
}

/// A capture's UDP datagrams, in file order, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct UdpCapture {
    /// Every IPv4/UDP datagram, in file order (not necessarily time order).
    pub packets: Vec<UdpPacket>,
    /// Enhanced packet blocks that were not IPv4/UDP over Ethernet (ARP, IGMP, IPv6 ...): skipped.
    pub skipped_not_udp: u64,
    /// Blocks other than section header, interface description and enhanced packet: skipped.
    pub skipped_blocks: u64,
}

/// A UDP datagram inside one frame, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination (multicast group) address and port.
    pub dst: SocketAddrV4,
    /// The UDP payload, without Ethernet padding.
    pub payload: &'a [u8],
}

/// Why a frame is not a well-formed Ethernet/IPv4/UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame ends inside the named header or payload.
    #[error("{layer}: {have} bytes, need {need}")]
    Truncated {
        /// `Ethernet`, `IPv4` or `UDP`.
        layer: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A header field holds a value this reader refuses.
    #[error("{field} = {value}: {why}")]
    Field {
        /// The header field, e.g. `IPv4 IHL`.
        field: &'static str,
        /// Its value.
        value: u32,
        /// Why it is refused.
        why: &'static str,
    },
}

/// Why a capture could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be read.
    #[error("capture {path}: cannot read: {source}")]
    Open {
        /// The capture file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The pcapng structure is broken at block `block` (1-based; the section header is block 1).
    #[error("capture {path}: pcapng block {block}: {detail}")]
    Block {
        /// The capture file.
        path: PathBuf,
        /// 1-based block index.
        block: u64,
        /// The parser's message.
        detail: String,
    },
    /// Enhanced packet block `packet` (1-based among packets) is not a well-formed Ethernet/IPv4/UDP frame, or
    /// was cut by the snap length.
    #[error("capture {path}: packet {packet}: {detail}")]
    Packet {
        /// The capture file.
        path: PathBuf,
        /// 1-based packet index.
        packet: u64,
        /// What is wrong.
        detail: String,
    },
}

/// Reads every UDP datagram of a pcapng file (module docs).
///
/// # Errors
/// [`CaptureError`], naming the file and the block or packet.
pub fn read_udp_pcapng(path: &Path) -> Result<UdpCapture, CaptureError> {
    let bytes = std::fs::read(path).map_err(|source| CaptureError::Open { path: path.to_owned(), source })?;
    parse_udp_pcapng(&bytes, path)
}

/// As [`read_udp_pcapng`], from bytes already in memory; `path` only names them in errors.
///
/// # Errors
/// [`CaptureError::Block`] or [`CaptureError::Packet`].
pub fn parse_udp_pcapng(bytes: &[u8], path: &Path) -> Result<UdpCapture, CaptureError> {
    let block_err = |block: u64, detail: String| CaptureError::Block { path: path.to_owned(), block, detail };
    let (mut rest, mut parser) = PcapNgParser::new(bytes).map_err(|e| block_err(1, e.to_string()))?;
    let mut out = UdpCapture::default();
    let (mut block, mut packet) = (1u64, 0u64);
    while !rest.is_empty() {
        block += 1;
        let (next, b) = parser.next_block(rest).map_err(|e| block_err(block, e.to_string()))?;
        rest = next;
        let Block::EnhancedPacket(epb) = b else {
            if !matches!(b, Block::SectionHeader(_) | Block::InterfaceDescription(_)) {
                out.skipped_blocks += 1;
            }
            continue;
        };
        packet += 1;
        let packet_err = |detail: String| CaptureError::Packet { path: path.to_owned(), packet, detail };
        let idb = parser
            .packet_interface(&epb)
            .ok_or_else(|| packet_err(format!("interface {} is not described", epb.interface_id)))?;
        if idb.linktype != DataLink::ETHERNET {
            out.skipped_not_udp += 1;
            continue;
        }
        let tsresol = idb
            .options
            .iter()
            .find_map(|o| match o {
                InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                _ => None,
            })
            .unwrap_or(6);
        // pcap-file returns the raw 64-bit count as if it were ns (module docs).
        let raw = u64::try_from(epb.timestamp.as_nanos()).map_err(|_| packet_err("timestamp past 64 bits".into()))?;
        let ts_ns = timestamp_ns(raw, tsresol)
            .ok_or_else(|| packet_err(format!("timestamp {raw} in units of if_tsresol {tsresol} overflows ns")))?;
        if (epb.data.len() as u64) < u64::from(epb.original_len) {
            return Err(packet_err(format!(
                "captured {} of {} bytes (cut by the snap length)",
                epb.data.len(),
                epb.original_len
            )));
        }
        match udp_in_ethernet(&epb.data) {
            Ok(Some(d)) => out.packets.push(UdpPacket { ts_ns, src: d.src, dst: d.dst, payload: d.payload.to_vec() }),
            Ok(None) => out.skipped_not_udp += 1,
            Err(e) => return Err(packet_err(e.to_string())),
        }
    }
    Ok(out)
}

/// Reads every UDP datagram of a capture, pcapng or classic pcap (module docs).
///
/// # Errors
/// [`CaptureError`], naming the file and the block or packet.
pub fn read_udp_capture(path: &Path) -> Result<UdpCapture, CaptureError> {
    let bytes = std::fs::read(path).map_err(|source| CaptureError::Open { path: path.to_owned(), source })?;
    if bytes.starts_with(&PCAPNG_MAGIC) {
        parse_udp_pcapng(&bytes, path)
    } else {
        parse_udp_pcap(&bytes, path)
    }
}

/// The first four bytes of a pcapng file (section header block type).
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Every UDP datagram of a classic libpcap capture held in memory; `path` only names it in errors. The global
/// header counts as block 1 and each packet record as one block after it in [`CaptureError::Block`].
///
/// # Errors
/// [`CaptureError::Block`] (bad header or record) or [`CaptureError::Packet`] (not a well-formed frame, or cut
/// by the snap length).
pub fn parse_udp_pcap(bytes: &[u8], path: &Path) -> Result<UdpCapture, CaptureError> {
    let block_err = |block: u64, detail: String| CaptureError::Block { path: path.to_owned(), block, detail };
    let (mut rest, parser) = PcapParser::new(bytes).map_err(|e| block_err(1, e.to_string()))?;
    let linktype = parser.header().datalink;
    let mut out = UdpCapture::default();
    let mut packet = 0u64;
    while !rest.is_empty() {
        packet += 1;
        let (next, p) = parser.next_packet(rest).map_err(|e| block_err(packet + 1, e.to_string()))?;
        rest = next;
        let packet_err = |detail: String| CaptureError::Packet { path: path.to_owned(), packet, detail };
        if linktype != DataLink::ETHERNET {
            out.skipped_not_udp += 1;
            continue;
        }
        let ts_ns = u64::try_from(p.timestamp.as_nanos()).map_err(|_| packet_err("timestamp past 64 bits".into()))?;
        if (p.data.len() as u64) < u64::from(p.orig_len) {
            return Err(packet_err(format!(
                "captured {} of {} bytes (cut by the snap length)",
                p.data.len(),
                p.orig_len
            )));
        }
        match udp_in_ethernet(&p.data) {
            Ok(Some(d)) => out.packets.push(UdpPacket { ts_ns, src: d.src, dst: d.dst, payload: d.payload.to_vec() }),
            Ok(None) => out.skipped_not_udp += 1,
            Err(e) => return Err(packet_err(e.to_string())),
        }
    }
    Ok(out)
}

/// Converts a pcapng timestamp count in units of `if_tsresol` to ns; `None` on overflow.
pub fn timestamp_ns(raw: u64, tsresol: u8) -> Option<u64> {
    let exp = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 != 0 {
        // units of 2^-exp s
        let ns = (u128::from(raw) * 1_000_000_000) >> exp.min(127);
        return u64::try_from(ns).ok();
    }
    if exp <= 9 {
        raw.checked_mul(10u64.pow(9 - exp))
    } else {
        Some(raw / 10u64.checked_pow(exp - 9).unwrap_or(u64::MAX))
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Strips Ethernet II (optionally one 802.1Q tag), IPv4 and UDP (table in the module docs). `Ok(None)` for a
/// frame that is not IPv4/UDP.
///
/// # Errors
/// [`FrameError`] for a truncated or malformed IPv4/UDP frame, or an IPv4 fragment.
pub fn udp_in_ethernet(frame: &[u8]) -> Result<Option<UdpDatagram<'_>>, FrameError> {
    let need = |layer, need: usize, have: usize| {
        if have < need {
            Err(FrameError::Truncated { layer, need, have })
        } else {
            Ok(())
        }
    };
    need("Ethernet", ETHERNET_HEADER_BYTES, frame.len())?;
    let (mut ethertype, mut ip_at) = (be16(frame, 12), ETHERNET_HEADER_BYTES);
    if ethertype == ETHERTYPE_VLAN {
        need("Ethernet", ETHERNET_HEADER_BYTES + VLAN_TAG_BYTES, frame.len())?;
        ethertype = be16(frame, 16);
        ip_at += VLAN_TAG_BYTES;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return Ok(None);
    }
    let ip = &frame[ip_at..];
    need("IPv4", IPV4_MIN_HEADER_BYTES, ip.len())?;
    let (version, ihl_bytes) = (ip[0] >> 4, usize::from(ip[0] & 0x0f) * 4);
    if version != 4 {
        return Err(FrameError::Field { field: "IPv4 version", value: version.into(), why: "EtherType says IPv4" });
    }
    if ihl_bytes < IPV4_MIN_HEADER_BYTES {
        return Err(FrameError::Field { field: "IPv4 IHL", value: ip[0] as u32 & 0x0f, why: "below 5 words" });
    }
    let total = usize::from(be16(ip, 2));
    need("IPv4", total.max(ihl_bytes), ip.len())?;
    if total < ihl_bytes {
        return Err(FrameError::Field { field: "IPv4 total length", value: total as u32, why: "below the header" });
    }
    let frag = be16(ip, 6);
    if frag & 0x3fff != 0 {
        return Err(FrameError::Field { field: "IPv4 flags/fragment offset", value: frag.into(), why: "a fragment" });
    }
    if ip[9] != IP_PROTOCOL_UDP {
        return Ok(None);
    }
    let src_ip = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst_ip = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let udp = &ip[ihl_bytes..total];
    need("UDP", UDP_HEADER_BYTES, udp.len())?;
    let udp_len = usize::from(be16(udp, 4));
    if udp_len < UDP_HEADER_BYTES {
        return Err(FrameError::Field { field: "UDP length", value: udp_len as u32, why: "below the 8-byte header" });
    }
    need("UDP", udp_len, udp.len())?;
    let src = SocketAddrV4::new(src_ip, be16(udp, 0));
    let dst = SocketAddrV4::new(dst_ip, be16(udp, 2));
    Ok(Some(UdpDatagram { src, dst, payload: &udp[UDP_HEADER_BYTES..udp_len] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (20 B) + UDP carrying `payload`, to 224.0.31.11:14320.
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let total = (20 + 8 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, IP_PROTOCOL_UDP, 0, 0, 205, 209, 221, 73, 224, 0, 31, 11]);
        f.extend_from_slice(&31000u16.to_be_bytes());
        f.extend_from_slice(&14320u16.to_be_bytes());
        f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// A classic pcap file (little-endian, ns magic) holding `frames`, each stamped 1.000000002 s.
    fn classic(frames: &[Vec<u8>], snap_cut: bool) -> Vec<u8> {
        let mut f = vec![0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&262_144u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for fr in frames {
            f.extend_from_slice(&1u32.to_le_bytes());
            f.extend_from_slice(&2u32.to_le_bytes());
            f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
            f.extend_from_slice(&(fr.len() as u32 + u32::from(snap_cut)).to_le_bytes());
            f.extend_from_slice(fr);
        }
        f
    }

    #[test]
    fn classic_pcap_with_nanosecond_timestamps() {
        let name = Path::new("t.pcap");
        let cap = parse_udp_pcap(&classic(&[frame(b"one"), frame(b"two")], false), name).unwrap();
        let got: Vec<(u64, &[u8])> = cap.packets.iter().map(|p| (p.ts_ns, &p.payload[..])).collect();
        assert_eq!(got, [(1_000_000_002, &b"one"[..]), (1_000_000_002, &b"two"[..])]);
        let e = parse_udp_pcap(&classic(&[frame(b"one")], true), name).unwrap_err();
        assert!(matches!(e, CaptureError::Packet { packet: 1, .. }), "{e}");
        let mut cut = classic(&[frame(b"one")], false);
        cut.truncate(cut.len() - 2);
        assert!(matches!(parse_udp_pcap(&cut, name), Err(CaptureError::Block { block: 2, .. })));
        assert!(matches!(parse_udp_pcap(&[0x42; 64], name), Err(CaptureError::Block { block: 1, .. })));
    }

    #[test]
    fn strips_the_headers_and_ethernet_padding() {
        let mut f = frame(b"hello");
        f.extend_from_slice(&[0; 20]); // padding to the Ethernet minimum
        let d = udp_in_ethernet(&f).unwrap().unwrap();
        assert_eq!(d.dst, "224.0.31.11:14320".parse().unwrap());
        assert_eq!(d.src, "205.209.221.73:31000".parse().unwrap());
        assert_eq!(d.payload, b"hello");
    }

    #[test]
    fn truncated_malformed_and_other_frames() {
        let f = frame(b"hello");
        for cut in 0..f.len() {
            assert!(udp_in_ethernet(&f[..cut]).is_err(), "cut at {cut}");
        }
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(udp_in_ethernet(&arp), Ok(None));
        let mut tcp = f.clone();
        tcp[14 + 9] = 6;
        assert_eq!(udp_in_ethernet(&tcp), Ok(None));
        let mut frag = f.clone();
        frag[14 + 6] = 0x20; // more fragments
        assert!(matches!(udp_in_ethernet(&frag), Err(FrameError::Field { field: "IPv4 flags/fragment offset", .. })));
        let mut short_udp = f.clone();
        short_udp[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&4u16.to_be_bytes());
        assert!(matches!(udp_in_ethernet(&short_udp), Err(FrameError::Field { field: "UDP length", .. })));
    }

    #[test]
    fn timestamps_convert_from_every_resolution() {
        assert_eq!(timestamp_ns(1_475_012_773_473_604_000, 9), Some(1_475_012_773_473_604_000));
        assert_eq!(timestamp_ns(1_475_012_773_473_604, 6), Some(1_475_012_773_473_604_000));
        assert_eq!(timestamp_ns(1_500, 12), Some(1));
        assert_eq!(timestamp_ns(3, 0x80 | 1), Some(1_500_000_000));
        assert_eq!(timestamp_ns(u64::MAX, 6), None);
    }
}
