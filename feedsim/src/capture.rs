//! Reading a capture: pcap or pcapng, Ethernet / IPv4 / UDP, timestamps in ns.

use std::fs::File;
use std::io::{BufReader, Read};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

/// One UDP datagram of the capture.
#[derive(Debug, Clone)]
pub struct UdpPacket {
    /// Capture timestamp, ns since the UNIX epoch.
    pub ts_ns: u64,
    /// IPv4 source address and UDP port.
    pub src: SocketAddrV4,
    /// IPv4 destination (the multicast group) and UDP port.
    pub dst: SocketAddrV4,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// A capture's UDP datagrams, in file order, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// The UDP/IPv4 datagrams, in file order.
    pub packets: Vec<UdpPacket>,
    /// Packets that were not UDP over IPv4 over Ethernet (ARP, IPv6, TCP, IP fragments): skipped.
    pub skipped: u64,
}

impl Capture {
    /// The destinations (group:port) in the order of their first packet.
    pub fn groups(&self) -> Vec<SocketAddrV4> {
        let mut groups = Vec::new();
        for p in &self.packets {
            if !groups.contains(&p.dst) {
                groups.push(p.dst);
            }
        }
        groups
    }
}

/// A capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The capture file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file header is neither pcap nor pcapng, or is damaged.
    #[error("{}: not a pcap or pcapng file: {detail}", path.display())]
    Header {
        /// The capture file.
        path: PathBuf,
        /// What the reader said.
        detail: String,
    },
    /// A packet (or the block that holds it) is cut short or damaged.
    #[error("{}: packet {packet} (1-based, counting every packet block): {detail}", path.display())]
    Packet {
        /// The capture file.
        path: PathBuf,
        /// 1-based number of the packet (the first one that could not be read).
        packet: u64,
        /// What is wrong.
        detail: String,
    },
}

/// Reads every UDP/IPv4 datagram of a pcap or pcapng file (told apart by their magic numbers).
///
/// Refused, naming the file and packet: a truncated file, a packet block cut short, a packet captured shorter
/// than it was on the wire (snaplen), a UDP datagram whose length field disagrees with the bytes. Skipped and
/// counted: packets that are not UDP over IPv4 over Ethernet.
pub fn read_capture(path: &Path) -> Result<Capture, CaptureError> {
    let io = |source| CaptureError::Io { path: path.to_owned(), source };
    let mut file = BufReader::new(File::open(path).map_err(io)?);
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).map_err(|e| CaptureError::Header { path: path.to_owned(), detail: e.to_string() })?;
    let file = BufReader::new(File::open(path).map_err(io)?);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        read_pcapng(path, file)
    } else {
        read_pcap(path, file)
    }
}

/// What a pcap-file error means for the operator.
fn describe(e: &pcap_file::PcapError) -> String {
    use pcap_file::PcapError as E;
    match e {
        E::IncompleteBuffer => "the file ends inside this packet's record (truncated capture)".into(),
        E::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the file ends inside this packet's record (truncated capture)".into()
        }
        E::IoError(io) => format!("read error: {io}"),
        other => format!("damaged record: {other}"),
    }
}

fn packet_err(path: &Path, packet: u64, detail: impl ToString) -> CaptureError {
    CaptureError::Packet { path: path.to_owned(), packet, detail: detail.to_string() }
}

fn read_pcap(path: &Path, file: BufReader<File>) -> Result<Capture, CaptureError> {
    let mut reader =
        PcapReader::new(file).map_err(|e| CaptureError::Header { path: path.to_owned(), detail: e.to_string() })?;
    let link = reader.header().datalink;
    let mut cap = Capture::default();
    let mut n = 0u64;
    while let Some(p) = reader.next_packet() {
        n += 1;
        let p = p.map_err(|e| packet_err(path, n, describe(&e)))?;
        if p.data.len() < p.orig_len as usize {
            return Err(packet_err(
                path,
                n,
                format!("captured {} of {} bytes (snaplen cut it)", p.data.len(), p.orig_len),
            ));
        }
        let ts_ns = u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX);
        push_udp(path, n, link, ts_ns, &p.data, &mut cap)?;
    }
    Ok(cap)
}

/// ns per timestamp unit for a pcapng `if_tsresol` value (default 6: microseconds), as (multiply, divide).
fn tsresol_scale(resol: Option<u8>) -> (u64, u64) {
    let r = resol.unwrap_or(6);
    if r & 0x80 == 0 {
        let e = u32::from(r);
        if e <= 9 {
            (10u64.pow(9 - e), 1)
        } else {
            (1, 10u64.checked_pow(e - 9).unwrap_or(u64::MAX))
        }
    } else {
        // 2^-n seconds per unit.
        let n = u32::from(r & 0x7f).min(63);
        (1_000_000_000, 1u64 << n)
    }
}

fn read_pcapng(path: &Path, file: BufReader<File>) -> Result<Capture, CaptureError> {
    let mut reader =
        PcapNgReader::new(file).map_err(|e| CaptureError::Header { path: path.to_owned(), detail: e.to_string() })?;
    let mut cap = Capture::default();
    let mut n = 0u64;
    // (link type, if_tsresol) per interface of the current section.
    let mut ifaces: Vec<(DataLink, Option<u8>)> = Vec::new();
    while let Some(block) = reader.next_block() {
        let block = block.map_err(|e| packet_err(path, n + 1, describe(&e)))?;
        let epb = match block {
            Block::SectionHeader(_) => {
                ifaces.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                let resol = idb.options.iter().find_map(|o| match o {
                    InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                    _ => None,
                });
                ifaces.push((idb.linktype, resol));
                continue;
            }
            Block::EnhancedPacket(epb) => epb,
            _ => continue,
        };
        n += 1;
        let &(linktype, resol) = ifaces.get(epb.interface_id as usize).ok_or_else(|| {
            packet_err(path, n, format!("names interface {} that no interface block describes", epb.interface_id))
        })?;
        if epb.data.len() < epb.original_len as usize {
            return Err(packet_err(
                path,
                n,
                format!("captured {} of {} bytes (snaplen cut it)", epb.data.len(), epb.original_len),
            ));
        }
        // pcap-file hands the raw timestamp units over as if they were ns; scale them by if_tsresol.
        let units = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
        let (mul, div) = tsresol_scale(resol);
        let ts_ns = u64::try_from(u128::from(units) * u128::from(mul) / u128::from(div)).unwrap_or(u64::MAX);
        push_udp(path, n, linktype, ts_ns, &epb.data, &mut cap)?;
    }
    Ok(cap)
}

fn push_udp(
    path: &Path,
    n: u64,
    link: DataLink,
    ts_ns: u64,
    data: &[u8],
    cap: &mut Capture,
) -> Result<(), CaptureError> {
    let sliced = match link {
        DataLink::ETHERNET => SlicedPacket::from_ethernet(data),
        DataLink::RAW | DataLink::IPV4 => SlicedPacket::from_ip(data),
        other => return Err(packet_err(path, n, format!("link type {other:?} is not supported (Ethernet or raw IP)"))),
    };
    let Ok(sliced) = sliced else {
        // Cut inside a header that the packet's own lengths say should be there.
        return Err(packet_err(path, n, "truncated or malformed Ethernet/IP/UDP headers"));
    };
    let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(udp))) = (&sliced.net, &sliced.transport) else {
        cap.skipped += 1;
        return Ok(());
    };
    if ip.header().is_fragmenting_payload() {
        cap.skipped += 1;
        return Ok(());
    }
    let payload = udp.payload();
    let declared = usize::from(udp.length()).saturating_sub(8);
    if payload.len() != declared {
        return Err(packet_err(
            path,
            n,
            format!("UDP length says {declared} payload bytes, the packet holds {}", payload.len()),
        ));
    }
    let h = ip.header();
    cap.packets.push(UdpPacket {
        ts_ns,
        src: SocketAddrV4::new(h.source_addr(), udp.source_port()),
        dst: SocketAddrV4::new(h.destination_addr(), udp.destination_port()),
        payload: payload.to_vec(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsresol_scales() {
        assert_eq!(tsresol_scale(None), (1_000, 1));
        assert_eq!(tsresol_scale(Some(9)), (1, 1));
        assert_eq!(tsresol_scale(Some(12)), (1, 1_000));
        assert_eq!(tsresol_scale(Some(0x80 | 10)), (1_000_000_000, 1024));
    }
}
