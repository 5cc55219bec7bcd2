//! mdfan's stream on NATS JetStream, for the hosts that are not strategies (risk, monitoring, research): the
//! subjects and messages `mdfan-bridge` publishes, and the sans-I/O [`follow::Follower`] that rebuilds an
//! instrument's book from them (what `mdfan-nats-book` and any other consumer run).
//!
//! # Subjects
//!
//! One JetStream stream per bridge (`--stream`), over `PREFIX.>` (`--prefix`, e.g. `md.glbx.310`: venue and
//! channel):
//!
//! | subject              | messages                                                                            |
//! |----------------------|-------------------------------------------------------------------------------------|
//! | `PREFIX.upd.TOKEN`   | `update` (a batch of the instrument's records), `stale`, `end`                      |
//! | `PREFIX.snap.TOKEN`  | `snapshot`: the records that rebuild the instrument's book from empty               |
//! | `PREFIX.status`      | `gap` (the bridge's upstream session missed records), `status` (feed status records) |
//!
//! `TOKEN` is the instrument's symbol with `A-Z a-z 0-9 -` kept and every other byte written `_XX` in hex
//! ([`subject::token`]: `BRK.B` is `BRK_2EB`; no two symbols share a token), or `_id<instrument_id>` when the
//! publisher names no symbol. A consumer of one instrument reads `PREFIX.*.TOKEN`: its updates and snapshots in
//! stream order.
//!
//! # Messages
//!
//! Payloads are mdfan records as they are on the wire (`mdfan_wire::BookUpdate`: 64 bytes each, little-endian,
//! layout in `wire/src/record.rs`); a snapshot's payload is zstd-compressed (`Mdfan-Encoding: zstd`; at most
//! [`message::MAX_SNAPSHOT_BYTES`] once decompressed). Headers ([`message`]): `Mdfan-Kind`, `Mdfan-Run` (one
//! value per bridge run: a restarted bridge numbers its messages anew), `Mdfan-Instrument-Id`, `Mdfan-Inst-Seq`
//! (the instrument's update messages in a run are numbered 1, 2, ... without a hole; a snapshot, stale or end
//! message carries the number of the last update before it), `Mdfan-Seq` (the upstream session's seqs of the
//! records: `first-last`), `Mdfan-Venue-Pos` (`first-last`). Every run begins each instrument with a snapshot
//! (empty, or the book its session began with) before its first update.
//!
//! # Why a late or lagging consumer is exact
//!
//! The bridge publishes on one connection, so JetStream stores its messages in the order it sent them, and a
//! snapshot of an instrument is sent after every update it includes and before every one it does not. A
//! consumer takes the last `PREFIX.snap.TOKEN` message (stream sequence N), then reads `PREFIX.*.TOKEN` from
//! N + 1: every update it applies is one the snapshot does not hold. An update whose `Mdfan-Inst-Seq` skips a
//! number (a publish that failed), a `stale` message (records the bridge could not publish), or a message of
//! another run than its last snapshot's (a bridge restarted) makes its book stale until the next snapshot, which
//! the bridge sends after every such loss and at the start of every run. An `end` counts only from the run and
//! at the update number the book is at.
//!
//! Anyone who may publish on `PREFIX.>` can forge these messages: give only the bridge's NATS user publish
//! rights there (RUNBOOK 5b).

pub mod follow;
pub mod message;
pub mod subject;
