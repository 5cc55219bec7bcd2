//! The messages' headers and payloads (crate docs, "Messages").

use mdfan_wire::record::RECORD_SIZE_BYTES;
use mdfan_wire::BookUpdate;

/// Header: the message's kind ([`MessageKind::as_str`]).
pub const KIND: &str = "Mdfan-Kind";
/// Header: the bridge run that sent the message (a value per run, in hex).
pub const RUN: &str = "Mdfan-Run";
/// Header: the instrument's id (absent on `PREFIX.status`).
pub const INSTRUMENT_ID: &str = "Mdfan-Instrument-Id";
/// Header: the instrument's update number (crate docs).
pub const INST_SEQ: &str = "Mdfan-Inst-Seq";
/// Header: the upstream seqs of the payload's records, `first-last`.
pub const SEQ: &str = "Mdfan-Seq";
/// Header: the venue positions of the payload's records, `first-last`.
pub const VENUE_POS: &str = "Mdfan-Venue-Pos";
/// Header: `zstd` when the payload is compressed (snapshots).
pub const ENCODING: &str = "Mdfan-Encoding";
/// Header on `gap`: the upstream seq that was due and the one that came, `expected-got`.
pub const GAP: &str = "Mdfan-Gap";

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A batch of an instrument's records, in upstream order.
    Update,
    /// The records that rebuild the instrument's book from empty (a `Clear`, then its orders or levels).
    Snapshot,
    /// The instrument's records from here until its next snapshot could not all be published: its book is
    /// stale until then.
    Stale,
    /// The upstream stream ended; nothing more comes on this subject from this bridge run.
    End,
    /// The bridge's upstream session missed records (`Mdfan-Gap`); every instrument is stale until its next
    /// snapshot (which follows the session's resync).
    Gap,
    /// Feed status records (the live feed's lines went silent or came back).
    Status,
}

impl MessageKind {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Update => "update",
            MessageKind::Snapshot => "snapshot",
            MessageKind::Stale => "stale",
            MessageKind::End => "end",
            MessageKind::Gap => "gap",
            MessageKind::Status => "status",
        }
    }

    /// From the header value.
    pub fn parse(s: &str) -> Option<MessageKind> {
        Some(match s {
            "update" => MessageKind::Update,
            "snapshot" => MessageKind::Snapshot,
            "stale" => MessageKind::Stale,
            "end" => MessageKind::End,
            "gap" => MessageKind::Gap,
            "status" => MessageKind::Status,
            _ => return None,
        })
    }
}

/// The most a snapshot may hold once decompressed: 64 MiB (a book of a million orders). A larger one is refused
/// (a forged payload that would expand without bound).
pub const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// What a message's headers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// `Mdfan-Kind`.
    pub kind: MessageKind,
    /// `Mdfan-Run` (empty when absent).
    pub run: String,
    /// `Mdfan-Inst-Seq` (0 when absent).
    pub inst_seq: u64,
    /// `Mdfan-Encoding` is `zstd`.
    pub zstd: bool,
    /// `Mdfan-Instrument-Id`, when present: every record of the message must be of it.
    pub instrument_id: Option<u32>,
    /// `Mdfan-Seq` (`first-last`), when present: an update's first and last records' seqs.
    pub seq: Option<(u64, u64)>,
}

impl Meta {
    /// Reads the headers through `get` (a header's value by name).
    ///
    /// # Errors
    /// A missing or unknown `Mdfan-Kind`, or an `Mdfan-Inst-Seq` that is not a number, named.
    pub fn read<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Meta, String> {
        let kind = get(KIND).ok_or_else(|| format!("no {KIND} header"))?;
        let kind = MessageKind::parse(kind).ok_or_else(|| format!("{KIND}: {kind:?} is no kind this build knows"))?;
        let inst_seq = match get(INST_SEQ) {
            None => 0,
            Some(v) => v.parse().map_err(|_| format!("{INST_SEQ}: {v:?} is not a number"))?,
        };
        let zstd = match get(ENCODING) {
            None => false,
            Some("zstd") => true,
            Some(other) => return Err(format!("{ENCODING}: {other:?}: only zstd is known")),
        };
        let run = get(RUN).unwrap_or_default().to_owned();
        let instrument_id = match get(INSTRUMENT_ID) {
            None => None,
            Some(v) => Some(v.parse().map_err(|_| format!("{INSTRUMENT_ID}: {v:?} is not an instrument id"))?),
        };
        let seq = match get(SEQ) {
            None => None,
            Some(v) => Some(
                v.split_once('-')
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                    .ok_or_else(|| format!("{SEQ}: {v:?} is not FIRST-LAST"))?,
            ),
        };
        Ok(Meta { kind, run, inst_seq, zstd, instrument_id, seq })
    }
}

/// `first-last` as a header value.
pub fn span(first: u64, last: u64) -> String {
    format!("{first}-{last}")
}

/// Appends `r`'s 64 bytes to `out`.
pub fn push_record(out: &mut Vec<u8>, r: &BookUpdate) {
    out.extend_from_slice(r.as_bytes());
}

/// The records of a payload (decompressed first when `zstd`).
///
/// # Errors
/// A payload that is not a whole number of 64-byte records, or zstd data that cannot be read, named with
/// its length.
pub fn records(payload: &[u8], zstd: bool) -> Result<Vec<BookUpdate>, String> {
    let plain;
    let bytes = if zstd {
        plain = zstd::bulk::decompress(payload, MAX_SNAPSHOT_BYTES).map_err(|e| {
            format!("payload of {} bytes: not zstd data of at most {MAX_SNAPSHOT_BYTES} bytes: {e}", payload.len())
        })?;
        &plain[..]
    } else {
        payload
    };
    if bytes.len() % RECORD_SIZE_BYTES != 0 {
        return Err(format!(
            "payload of {} bytes: not a whole number of {RECORD_SIZE_BYTES}-byte records",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(RECORD_SIZE_BYTES)
        .map(|c| BookUpdate::from_bytes(c.try_into().expect("a 64-byte chunk")))
        .collect())
}

/// A snapshot's payload: the records, zstd-compressed (level 3).
pub fn compress(records: &[BookUpdate]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(records.len() * RECORD_SIZE_BYTES);
    for r in records {
        push_record(&mut raw, r);
    }
    zstd::stream::encode_all(&raw[..], 3).expect("compressing to memory does not fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdfan_wire::Kind;

    #[test]
    fn payloads_round_trip_and_bad_ones_are_named() {
        let rs: Vec<BookUpdate> =
            (1..=3).map(|i| BookUpdate { seq: i, order_id: 10 * i, ..BookUpdate::control(Kind::Add) }).collect();
        let mut raw = Vec::new();
        for r in &rs {
            push_record(&mut raw, r);
        }
        assert_eq!(records(&raw, false).unwrap(), rs);
        assert_eq!(records(&compress(&rs), true).unwrap(), rs);
        assert_eq!(
            records(&raw[..100], false).unwrap_err(),
            "payload of 100 bytes: not a whole number of 64-byte records"
        );
        assert!(
            records(&raw, true).unwrap_err().starts_with("payload of 192 bytes: not zstd data"),
            "{:?}",
            records(&raw, true)
        );
        let h = |k: &str| match k {
            KIND => Some("update"),
            INST_SEQ => Some("7"),
            _ => None,
        };
        assert_eq!(
            Meta::read(h).unwrap(),
            Meta {
                kind: MessageKind::Update,
                run: String::new(),
                inst_seq: 7,
                zstd: false,
                instrument_id: None,
                seq: None
            }
        );
        // A zstd frame that would expand past the limit is refused, not allocated.
        let bomb = zstd::stream::encode_all(&vec![0u8; MAX_SNAPSHOT_BYTES + 64][..], 19).unwrap();
        assert!(records(&bomb, true).unwrap_err().contains("not zstd data of at most 67108864 bytes"));
        assert_eq!(Meta::read(|_| None).unwrap_err(), "no Mdfan-Kind header");
        assert_eq!(
            Meta::read(|k| (k == KIND).then_some("bogus")).unwrap_err(),
            "Mdfan-Kind: \"bogus\" is no kind this build knows"
        );
    }
}
