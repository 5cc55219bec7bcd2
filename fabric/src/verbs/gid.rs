//! Choosing the GID index: the port's GID table as sysfs shows it, and the rule that picks one.
//!
//! libibverbs 44 (Debian 12) has `ibv_query_gid_ex` with the GID type, but rdma-sys 0.3 does not bind it, so the
//! type comes from sysfs, as `show_gids` and perftest read it:
//!
//! - `/sys/class/infiniband/<dev>/ports/<port>/gids/<idx>`: the GID, as eight groups of four hex digits;
//! - `/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<idx>`: `IB/RoCE v1` or `RoCE v2` (reading an
//!   unused entry fails with EINVAL).
//!
//! Nothing here touches a device, so it is tested against a fake sysfs tree.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

/// The sysfs root of RDMA devices.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// What kind of address a GID entry is (sysfs `gid_attrs/types/<idx>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidType {
    /// `IB/RoCE v1`: native InfiniBand, or RoCE v1 (Ethernet, not routable).
    IbRoceV1,
    /// `RoCE v2`: UDP/IP encapsulated, routable.
    RoceV2,
    /// Anything else the kernel prints.
    Other(String),
}

impl GidType {
    /// Parses the content of a `gid_attrs/types/<idx>` file.
    pub fn parse(text: &str) -> GidType {
        match text.trim() {
            "IB/RoCE v1" => GidType::IbRoceV1,
            "RoCE v2" => GidType::RoceV2,
            other => GidType::Other(other.to_string()),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::IbRoceV1 => f.write_str("IB/RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Other(s) => f.write_str(s),
        }
    }
}

/// One used entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the table (the `sgid_index` to use).
    pub index: u32,
    /// The 16-byte GID.
    pub gid: [u8; 16],
    /// Its type; `None` when sysfs has no `gid_attrs` (old kernels, native IB).
    pub kind: Option<GidType>,
}

impl GidEntry {
    /// Whether the GID holds an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), as a RoCE v2 GID of an IPv4
    /// interface does.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.gid[..10].iter().all(|&b| b == 0) && self.gid[10] == 0xff && self.gid[11] == 0xff
    }
}

/// Parses a sysfs GID (`fe80:0000:0000:0000:0002:00ff:fe00:0000`); `None` if it is not eight groups of four hex
/// digits.
pub fn parse_sysfs_gid(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut groups = 0;
    for (i, group) in text.trim().split(':').enumerate() {
        if i >= 8 || group.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(group, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        groups += 1;
    }
    (groups == 8).then_some(out)
}

/// The GID as 32 lower-case hex digits, as [`crate::wire::control::VerbsEndpoint::gid`] carries it.
pub fn gid_to_hex(gid: &[u8; 16]) -> String {
    gid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses 32 hex digits back into a GID; `None` for anything else.
pub fn gid_from_hex(text: &str) -> Option<[u8; 16]> {
    if text.len() != 32 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The folder of one port in a sysfs tree rooted at `root` (normally [`SYSFS_INFINIBAND`]).
pub fn port_dir(root: &Path, device: &str, port_num: u8) -> PathBuf {
    root.join(device).join("ports").join(port_num.to_string())
}

/// Reads the used entries (non-zero GIDs) among the first `table_len` of a port's GID table from sysfs.
/// Entries whose files cannot be read are skipped (unused entries fail with EINVAL).
pub fn read_gid_table(port_dir: &Path, table_len: u32) -> Vec<GidEntry> {
    let mut out = Vec::new();
    for index in 0..table_len {
        let Ok(text) = std::fs::read_to_string(port_dir.join("gids").join(index.to_string())) else { continue };
        let Some(gid) = parse_sysfs_gid(&text) else { continue };
        if gid == [0u8; 16] {
            continue;
        }
        let kind = std::fs::read_to_string(port_dir.join("gid_attrs").join("types").join(index.to_string()))
            .ok()
            .map(|t| GidType::parse(&t));
        out.push(GidEntry { index, gid, kind });
    }
    out
}

/// Why an index was chosen, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidChoice {
    /// `gid_index` was set in the config.
    Configured,
    /// The first RoCE v2 entry with an IPv4-mapped address.
    RoceV2Ipv4,
    /// The first RoCE v2 entry (IPv6).
    RoceV2,
    /// No RoCE v2 entry: the first used entry (native IB or RoCE v1).
    FirstUsed,
}

impl GidChoice {
    /// Words for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            GidChoice::Configured => "set in config",
            GidChoice::RoceV2Ipv4 => "first RoCE v2 GID with an IPv4-mapped address",
            GidChoice::RoceV2 => "first RoCE v2 GID",
            GidChoice::FirstUsed => "no RoCE v2 GID: first used GID",
        }
    }
}

/// Picks the GID entry to use from a table: the configured index when given (it must be a used entry), else
/// RoCE v2 with IPv4-mapped address, else RoCE v2, else the first used entry.
///
/// # Errors
/// A sentence naming what was looked for and what the table holds.
pub fn choose_gid(table: &[GidEntry], configured: Option<u32>) -> Result<(GidEntry, GidChoice), String> {
    let listing = || {
        if table.is_empty() {
            "the GID table has no used entries".to_string()
        } else {
            table
                .iter()
                .map(|e| {
                    format!(
                        "{}={} ({})",
                        e.index,
                        gid_to_hex(&e.gid),
                        e.kind.as_ref().map_or("type unknown".into(), |k| k.to_string())
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    if let Some(index) = configured {
        return match table.iter().find(|e| e.index == index) {
            Some(e) => Ok((e.clone(), GidChoice::Configured)),
            None => Err(format!("gid_index {index} is not a used entry; used: {}", listing())),
        };
    }
    let v2 = |e: &&GidEntry| e.kind == Some(GidType::RoceV2);
    if let Some(e) = table.iter().filter(v2).find(|e| e.is_ipv4_mapped()) {
        return Ok((e.clone(), GidChoice::RoceV2Ipv4));
    }
    if let Some(e) = table.iter().find(v2) {
        return Ok((e.clone(), GidChoice::RoceV2));
    }
    match table.first() {
        Some(e) => Ok((e.clone(), GidChoice::FirstUsed)),
        None => Err(listing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/sys/class/infiniband/rxe0/ports/1` as rxe on `lo` shows it (taken from the Soft-RoCE VM).
    fn fake_rxe_on_lo(root: &Path) -> PathBuf {
        let port = port_dir(root, "rxe0", 1);
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        let entries = [
            (0, "fe80:0000:0000:0000:0000:0000:0000:0000", Some("IB/RoCE v1")),
            (1, "0000:0000:0000:0000:0000:ffff:7f00:0001", Some("RoCE v2")),
            (2, "0000:0000:0000:0000:0000:0000:0000:0001", Some("IB/RoCE v1")),
            (3, "0000:0000:0000:0000:0000:0000:0000:0001", Some("RoCE v2")),
            (4, "0000:0000:0000:0000:0000:0000:0000:0000", None),
        ];
        for (i, gid, kind) in entries {
            std::fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
            if let Some(k) = kind {
                std::fs::write(port.join("gid_attrs/types").join(i.to_string()), format!("{k}\n")).unwrap();
            }
        }
        port
    }

    fn temp_root(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("mdfan-gid-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn reads_the_table_and_prefers_roce_v2_ipv4() {
        let root = temp_root("v4");
        let port = fake_rxe_on_lo(&root);
        let table = read_gid_table(&port, 8);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(table.iter().map(|e| e.index).collect::<Vec<_>>(), [0, 1, 2, 3], "zero GIDs are unused");
        assert_eq!(table[0].kind, Some(GidType::IbRoceV1));
        assert_eq!(table[1].kind, Some(GidType::RoceV2));
        assert!(table[1].is_ipv4_mapped() && !table[3].is_ipv4_mapped());
        let (e, why) = choose_gid(&table, None).unwrap();
        assert_eq!((e.index, why), (1, GidChoice::RoceV2Ipv4));
        assert_eq!(gid_to_hex(&e.gid), "00000000000000000000ffff7f000001");
        let (e, why) = choose_gid(&table, Some(3)).unwrap();
        assert_eq!((e.index, why), (3, GidChoice::Configured));
        let err = choose_gid(&table, Some(4)).unwrap_err();
        assert!(err.contains("gid_index 4") && err.contains("1=00000000000000000000ffff7f000001 (RoCE v2)"), "{err}");
    }

    #[test]
    fn falls_back_to_roce_v2_ipv6_then_to_the_first_entry() {
        let mk = |index, last: u8, kind| GidEntry {
            index,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last],
            kind,
        };
        let table = [mk(0, 1, Some(GidType::IbRoceV1)), mk(1, 1, Some(GidType::RoceV2))];
        assert_eq!(choose_gid(&table, None).unwrap().1, GidChoice::RoceV2);
        let ib = [mk(0, 1, None), mk(1, 2, None)];
        let (e, why) = choose_gid(&ib, None).unwrap();
        assert_eq!((e.index, why), (0, GidChoice::FirstUsed));
        assert!(choose_gid(&[], None).unwrap_err().contains("no used entries"));
    }

    #[test]
    fn a_missing_port_dir_is_an_empty_table() {
        assert!(read_gid_table(Path::new("/nonexistent/mdfan/ports/1"), 16).is_empty());
    }

    #[test]
    fn gid_type_and_gid_text_parse() {
        assert_eq!(GidType::parse("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1"), GidType::IbRoceV1);
        assert_eq!(GidType::parse("weird"), GidType::Other("weird".into()));
        let g = parse_sysfs_gid("fe80:0000:0000:0000:0002:00ff:fe00:0000\n").unwrap();
        assert_eq!(g[0..2], [0xfe, 0x80]);
        assert_eq!(g[8..16], [0x00, 0x02, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x00]);
        assert_eq!(parse_sysfs_gid("fe80::1"), None);
        assert_eq!(parse_sysfs_gid("fe80:0000:0000:0000:0002:00ff:fe00"), None);
        assert_eq!(parse_sysfs_gid("fe80:0000:0000:0000:0002:00ff:fe00:0000:0000"), None);
        let hex = gid_to_hex(&g);
        assert_eq!(hex, "fe80000000000000000200fffe000000");
        assert_eq!(gid_from_hex(&hex), Some(g));
        assert_eq!(gid_from_hex("xyz"), None);
        assert_eq!(gid_from_hex(&"g".repeat(32)), None);
    }
}
