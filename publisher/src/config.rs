//! The publisher's TOML config: typed, validated once at start, every key with its unit and default.
//!
//! ```toml
//! [publisher]
//! listen = "127.0.0.1:7700"    # control endpoint (TCP). Default 127.0.0.1:7700.
//! listen_unix = "/run/mdfan/a.sock" # a Unix-domain control socket as well (mode 0660), for subscribers on this
//!                              # host running as other users: the ring travels as a file descriptor. Default: none.
//! allow_duplicate_names = false # accept a second live subscriber under a name already attached. Default false.
//! snapshot_requests_per_s = 10 # snapshot requests a subscriber may make a second (burst as many); past 4 s'
//!                              # worth refused, it is ended (protocol_error). Default 10.
//! hot_core = 1                 # core the hot loop is pinned to. Default: not pinned.
//! hot_idle = "spin"            # the live hot loop on an empty cycle: "spin" (PAUSE, burns its core) or "yield"
//!                              # (sched_yield after 1,000 empty cycles: a host without a core per busy thread).
//!                              # Default "spin".
//! feed_on_hot_thread = false   # file feeds: decode on the hot loop's thread, between records (a host without a
//!                              # core for the feed thread), instead of a thread of its own. Default false.
//! control_core = 0             # core of the control thread. Default: not pinned.
//! wait_for_subscribers = 2     # file feeds: subscribers to wait for before the replay starts (a live feed, a
//!                              # relay among them, starts at once: the venue does not wait). Default 1.
//! max_subscribers = 64         # sessions the hot loop holds at once. Default 64.
//! lock_memory = false          # mlockall at start. Default false.
//! heartbeat_interval_ms = 10   # heartbeat records when nothing was sent this long. Default 10.
//! stall_timeout_ms = 5000      # a full ring that releases nothing this long ends the session. Default 5000.
//! catchup_hold_ms = 100        # file feeds: longest a late joiner catching up may keep the journal full (the
//!                              # feed, and every other subscriber, waits); then it gets a fresh snapshot if the
//!                              # journal moves past it (3 times; the 4th it is dropped). Default 100.
//! policies = ["disconnect", "resync"]  # slow-consumer policies subscribers may choose; add "block" to allow it.
//! counters_dir = "/dev/shm"    # where the counters file mdfan-stat reads goes ("" for none). Default /dev/shm.
//! keep_counters = false        # leave the counters file (marked ended) after a clean exit. Default false.
//!
//! [feed]
//! format = "dbn"               # "dbn" (a DBN MBO file), "itch50" (a Nasdaq ITCH 5.0 BinaryFILE, plain or gzip),
//!                              # "lobster" (a LOBSTER message CSV checked against its order-book CSV),
//!                              # "mdp3" (CME MDP 3.0 live, from [lines]), "capture" (an mdfan capture replayed)
//!                              # or "mdfan" (another publisher's stream: a relay); the last two's keys below
//! path = "data/....mbo.dbn.zst" # dbn, itch50 and lobster (the message CSV); relative paths are taken from the
//!                              # config file's folder
//! session_date = "2019-12-30"  # itch50: the file's trading day (ITCH times are ns since US Eastern midnight);
//!                              # lobster: the same, default the date in the message file's name
//! orderbook = "..._orderbook_1.csv" # lobster only: the order-book CSV. Default: the message file's name with
//!                              # _message_ -> _orderbook_, in its folder
//! pace = "max"                 # "max", "realtime", or a speed-up factor such as 10.0. Default "max".
//! max_gap_ms = 1000            # realtime/factor pacing first shortens idle gaps to this many ms. Default 1000.
//! symbols = "symbols.csv"      # instrument definitions added to the feed's own (DBN metadata mappings): CSV,
//!                              # security_id,symbol,display_factor,tick_size (mdfan_feed::symbols); relative to
//!                              # the config file's folder. For MDP 3.0, whose feed carries none. Default: none.
//!
//! [lines]                      # format "mdp3" only: the channel's incremental feed, lines A and B
//! a = "224.0.31.11:14320"      # line A: multicast group:port (joined on `interface`) or a unicast ip:port; or
//!                              # { addr = "224.0.31.11:14320", sources = ["10.0.0.5"] }: datagrams from any
//!                              # other source are dropped and counted (foreign_sources); a multicast line
//!                              # joins for those sources only (IGMPv3). Default: any source.
//! b = "224.0.32.11:15320"      # line B
//! interface = "10.1.2.3"       # address of the NIC that joins the groups. Default 127.0.0.1.
//! snapshot = "224.0.31.43:..." # market recovery (snapshot) channel; default: none (gaps stay stale)
//! recovery_timeout_ms = 5000   # stale instruments wait this long for a snapshot before it is reported. Default 5000.
//! rcvbuf_bytes = 33554432      # socket receive buffer per line. Default 32 MiB.
//! gap_timeout_ms = 10          # a seq missing on both lines this long is a gap. Default 10.
//! line_tolerance = 8           # ... or once both lines are this many seqs past it. Default 8.
//! confirm_packets = 3          # datagrams at consecutive seqs that set the first expected seq or confirm a jump
//!                              # past the window (either line; one seq on both counts once). Default 3, 1 to 64.
//! instruments = 4096           # securities the channel reserves room for. Default 4096.
//! end_after_idle_ms = 0        # end the stream after this long with no datagram (tests, demos). Default 0: never.
//! silent_after_ms = 5000       # no datagram on any line this long: the feed is silent (a FeedStatus record to
//!                              # every subscriber, and another when datagrams come again; not an end). Set it
//!                              # above the venue's idle heartbeat interval. Default 5000; 0: never.
//! hw_timestamps = "if_available" # NIC receive stamps: "off", "if_available" (default), "required" (refuse without)
//!
//! # format "itch50" with [lines]: Nasdaq TotalView-ITCH 5.0 live over MoldUDP64 (feed.session_date still needed;
//! # no feed.path). Keys a, interface, rcvbuf_bytes, end_after_idle_ms, silent_after_ms as above; b optional (arbitrated by
//! # MoldUDP64 sequence number), and:
//! retransmit = "127.0.0.1:9100" # the MoldUDP64 re-request server. Default: none (a hole waits one timeout for
//!                              # line B, then is given up: every stock locate seen is marked stale)
//! retransmit_timeout_ms = 50   # a request unanswered this long is sent again. Default 50.
//! retransmit_retries = 3       # re-sends after the first request, then the hole is given up. Default 3.
//! session = "000010059B"       # the MoldUDP64 session; default: the first packet's (others are dropped)
//! start = "first_seen"         # or "one": expect sequence number 1 and request what came before. Default first_seen.
//! window_messages = 65536      # messages that may wait behind a hole (64 B each, allocated at start); a packet
//!                              # this far past the highest seq known is held until a second one confirms the jump.
//! max_orders = 16777216        # resting orders at most (about 64 B each): an add past them is refused, counted
//!                              # (orders_refused) and its locate marked stale. 1024 to 2^28; default 2^24.
//!
//! # format "capture" (crate::feeds::capture): path (the capture's folder), pace, max_gap_ms and symbols as above,
//! name = "esh4"                # the capture's name (its segments' prefix). Default: the folder's only capture.
//! from_ts_recv_ns = 1703...    # replay from this ts_recv (ns since the UNIX epoch), beginning with an opening
//!                              # snapshot of every book. Default: the first record.
//! to_ts_recv_ns = 1703...      # ... up to this one (inclusive). Default: the last.
//! from_venue_pos = 0           # the same bounds by venue position (mdfan_wire::record, "Venue position").
//! to_venue_pos = 0
//!
//! # format "mdfan" (crate::feeds::relay; mdfan-relay): one upstream session, or a hot-hot pair
//! connect = ["127.0.0.1:7700"] # the upstream's control endpoint (host:port or unix:PATH), or two: a pair
//! name = "mdfan-relay"         # the upstream session's name (leg B of a pair: NAME-b). Default "mdfan-relay".
//! token = "..."                # the token the upstream's [access] gives `name`. Default: none.
//! ring_slots = 262144          # the upstream ring, 64 B slots, a power of two. Default 262,144 (16 MiB).
//! policy = "resync"            # what the upstream does when that ring is full: resync, disconnect or block.
//! fabric = "shm"               # the upstream fabric: "shm" (shm_dir, default /dev/shm) or "verbs" (device,
//!                              # gid_index as in [fabric.verbs]). Default "shm".
//! instruments = [17077]        # what the upstream session carries (the union local strategies need). Default all.
//! silence_timeout_ms = 50      # no record from upstream this long: the feed is silent downstream. Default 50.
//! reconnect_budget_ms = 86400000 # a lost upstream is tried every 100 ms this long, then the stream ends with a
//!                              # feed error. Default a day.
//! connect_timeout_ms = 2000    # each connect and the upstream's answer. Default 2000.
//! symbols = "symbols.csv"      # instrument definitions added to the upstream's. Default: none.
//!
//! [journal]
//! records = 131072             # normalised records between the feed reader and the hot loop (a power of two,
//!                              # 1024 to 2^28; 128 B each, allocated at start). Default 131072 (16 MiB).
//!
//! [fabric]
//! provider = "shm"             # "shm" (same host); "verbs" with the verbs feature
//! shm_dir = "/dev/shm"         # where subscribers' ring files must be. Default /dev/shm.
//! ring_slots_min = 64          # smallest ring a subscriber may offer, in slots. Default 64.
//! ring_slots_max = 16777216    # largest, in slots (64 B each). Default 2^24.
//!
//! [access]                     # without it, any subscriber may connect (one team's host)
//! [[access.subscribers]]       # with it, only the names listed, each with its token (keep this file 0600)
//! name = "strategy-a"
//! token = "9c1e...64 hex"      # at least 32 characters of A-Z a-z 0-9 . _ ~ + / = -, 8 of them distinct
//!                              # (`openssl rand -hex 32`); compared in constant time
//! instruments = [17077]        # what it may receive (asking for everything gets this); default: everything
//! uid = 2002                   # the token is accepted only from this local user (the connection's SO_PEERCRED,
//!                              # or a loopback TCP socket's owner). Default: any user.
//!
//! [fabric.verbs]               # provider "verbs" only; every key: fabric/src/verbs/config.rs
//! device = "mlx5_0"            # default: the only device
//! gid_index = 3                # default: the first RoCE v2 GID with an IPv4-mapped address
//! ```
//!
//! Unknown keys are errors naming the key and its line.

use std::path::{Path, PathBuf};

use mdfan_fabric::{FabricConfig, Provider};

pub use crate::feeds::FeedConfig;
use mdfan_tuning::IdleStrategy;
use mdfan_wire::control::SlowConsumerPolicy;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// A config that could not be used: one line naming the file, the line and the key.
#[derive(Debug, thiserror::Error)]
#[error("config {path}: {detail}")]
pub struct ConfigError {
    /// The config file.
    pub path: String,
    /// What is wrong, and where.
    pub detail: String,
}

/// The whole config file.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[publisher]`.
    pub publisher: PublisherSection,
    /// `[feed]` (and, for a live feed, `[lines]`), by format ([`crate::feeds`]).
    pub feed: FeedConfig,
    /// `[fabric]`.
    pub fabric: FabricSection,
    /// `[journal]`.
    pub journal: JournalSection,
    /// `[access]`: who may subscribe, with which token, to what. `None`: anyone, to anything.
    pub access: Option<AccessSection>,
    /// The file this config was loaded from ([`Config::load`]), re-read on SIGHUP for `[access]`.
    pub source: Option<PathBuf>,
}

/// The file as one format reads it: the sections every format shares, its `[feed]` keys `F` and its `[lines]`
/// `L` (a file format's `L` refuses a `[lines]` section).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Whole<F, L> {
    #[serde(default)]
    publisher: PublisherSection,
    feed: F,
    #[serde(default)]
    fabric: FabricSection,
    #[serde(default)]
    journal: JournalSection,
    #[serde(default = "Option::default")]
    lines: Option<L>,
    access: Option<AccessSection>,
}

/// The format alone, read first: which format's keys the rest of the file is read with.
#[derive(Deserialize)]
struct Probe {
    feed: ProbeFeed,
}

#[derive(Deserialize)]
struct ProbeFeed {
    format: FeedFormat,
}

/// A file format's `[lines]` is an error: a file feed reads no lines.
fn no_lines<F>(
    w: &Whole<F, toml::Value>,
    format: FeedFormat,
    c: &crate::feeds::Checker<'_>,
) -> Result<(), ConfigError> {
    match w.lines {
        Some(_) => {
            Err(c.bad("lines", format!("[lines] is for a live feed: feed.format is \"{}\" (a file)", format.name())))
        }
        None => Ok(()),
    }
}

/// The lines of a live feed's `[lines]`: the keys every line set shares (lines A and B, interfaces, buffers,
/// stamps, liveness, the arbiter's confirmation), then the format's own keys. Each format's struct has
/// `deny_unknown_fields`, so a key of another format is an error naming it.
macro_rules! line_set {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Line A: a multicast group and port (joined on `interface`), or a unicast address and port to
            /// bind; or a table `{ addr = "...", sources = ["ip", ...], interface = "ip" }` listing the addresses
            /// the venue sends it from and the interface that joins it.
            #[serde(default)]
            pub a: Option<$crate::config::LineAddr>,
            /// Line B, as line A.
            #[serde(default)]
            pub b: Option<$crate::config::LineAddr>,
            /// Address of the interface that joins the groups: every line's, unless the line names its own (or
            /// `interface_b` names line B's). Default 127.0.0.1.
            #[serde(default = "crate::config::default_interface")]
            pub interface: std::net::Ipv4Addr,
            /// Address of the interface that joins every line B (lines A and B on separate NICs), unless the
            /// line names its own. Default: `interface`.
            #[serde(default)]
            pub interface_b: Option<std::net::Ipv4Addr>,
            /// Socket receive buffer per line, bytes: what absorbs a burst, or the journal being full for a
            /// while. 64 KiB to 1 GiB; default 32 MiB.
            #[serde(default = "crate::config::default_rcvbuf_bytes")]
            pub rcvbuf_bytes: usize,
            /// Ends the stream (normally) after this long without a datagram on any line, once one came, in ms.
            /// 0: never (a live feed runs until SIGINT/SIGTERM). For tests and demos that play a capture.
            #[serde(default)]
            pub end_after_idle_ms: u64,
            /// After this long without a datagram on any line (once one came), in ms, the feed is *silent*: a
            /// [`mdfan_wire::Kind::FeedStatus`] record goes to every subscriber, and another when datagrams come
            /// again (the stream goes on; `mdfan_wire::record`, "Feed status records"). Set it above the
            /// venue's idle heartbeat interval. Default 5,000; 0: never.
            #[serde(default = "crate::config::default_silent_after_ms")]
            pub silent_after_ms: u64,
            /// Packets at consecutive seqs (either line; the same seq on both lines counts once) that set the
            /// first expected seq or confirm a jump past the window (`mdfan_arbiter`, "Start" and "Suspect
            /// jumps"). Default 3: two stray datagrams confirm nothing. 1 to 64.
            #[serde(default = "crate::config::default_confirm_packets")]
            pub confirm_packets: usize,
            /// Hardware receive stamps on the lines' device (`mdfan_lines::hwstamp`): `"off"`,
            /// `"if_available"` (default: on where the device stamps every packet and has a PHC, else software
            /// stamps, saying why) or `"required"` (the line does not open without them).
            #[serde(default)]
            pub hw_timestamps: $crate::config::HwTimestampsKey,
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// How to open `line` (of `role`): its address and sources, its interface (its own, else
            /// `interface_b` for a line B, else `interface`), this section's receive buffer and hardware stamps.
            pub fn line_config(
                &self,
                line: &$crate::config::LineAddr,
                role: $crate::config::LineRole,
            ) -> mdfan_lines::LineConfig {
                $crate::config::line_config(
                    line,
                    role,
                    self.interface,
                    self.interface_b,
                    self.rcvbuf_bytes,
                    self.hw_timestamps,
                )
            }

            /// The checks every line set's keys take; the format checks its own.
            pub(crate) fn check_shared(&self, c: &$crate::feeds::Checker<'_>) -> Result<(), ConfigError> {
                if !(1..=64).contains(&self.confirm_packets) {
                    return Err(c.bad("lines.confirm_packets", format!("{}: must be 1 to 64", self.confirm_packets)));
                }
                if self.confirm_packets < 3 {
                    // Allowed for sessions too sparse for 3 (test captures), never silently.
                    tracing::warn!(
                        confirm_packets = self.confirm_packets,
                        "lines.confirm_packets below 3: {} datagram(s) of one source can set the first expected seq \
                         or confirm a jump (the default 3 cannot be fooled so)",
                        self.confirm_packets
                    );
                }
                if !(64 << 10..=1 << 30).contains(&self.rcvbuf_bytes) {
                    return Err(c.bad("lines.rcvbuf_bytes", format!("{}: must be 64 KiB to 1 GiB", self.rcvbuf_bytes)));
                }
                Ok(())
            }
        }
    };
}
pub(crate) use line_set;

/// How to open `line` of `role` ([`line_set`]'s `line_config`).
pub(crate) fn line_config(
    line: &LineAddr,
    role: LineRole,
    interface: std::net::Ipv4Addr,
    interface_b: Option<std::net::Ipv4Addr>,
    rcvbuf_bytes: usize,
    hw_timestamps: HwTimestampsKey,
) -> mdfan_lines::LineConfig {
    let shared = match role {
        LineRole::B => interface_b.unwrap_or(interface),
        LineRole::A => interface,
    };
    mdfan_lines::LineConfig {
        addr: line.addr,
        sources: line.sources.clone(),
        interface: line.interface.unwrap_or(shared),
        rcvbuf_bytes,
        hw_timestamps: match hw_timestamps {
            HwTimestampsKey::Off => mdfan_lines::HwTimestamps::Off,
            HwTimestampsKey::IfAvailable => mdfan_lines::HwTimestamps::IfAvailable,
            HwTimestampsKey::Required => mdfan_lines::HwTimestamps::Required,
        },
    }
}

/// `[access]`: subscriber authentication and entitlements (re-read on SIGHUP; applies to new subscriptions).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSection {
    /// `[[access.subscribers]]`: the subscribers that may connect.
    #[serde(default)]
    pub subscribers: Vec<AccessEntry>,
}

/// One subscriber that may connect.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessEntry {
    /// The name it subscribes with.
    pub name: String,
    /// Its token ([`MIN_TOKEN_BYTES`] characters at least, [`MIN_TOKEN_DISTINCT`] of them distinct).
    pub token: String,
    /// The instrument_ids it may receive; `None`: all. A subscriber asking for everything gets these.
    #[serde(default)]
    pub instruments: Option<Vec<u32>>,
    /// The local user the token is bound to: accepted only from a connection whose peer is this uid.
    #[serde(default)]
    pub uid: Option<u32>,
}

impl std::fmt::Debug for AccessEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the token: configs end up in logs
        f.debug_struct("AccessEntry")
            .field("name", &self.name)
            .field("instruments", &self.instruments)
            .field("uid", &self.uid)
            .finish()
    }
}

/// Minimum token length, in bytes.
pub const MIN_TOKEN_BYTES: usize = 32;
/// Fewest distinct characters a token may have (`aaaa...` is no secret).
pub const MIN_TOKEN_DISTINCT: usize = 8;
/// The characters a token may hold besides ASCII letters and digits.
pub const TOKEN_PUNCTUATION: &str = "._~+/=-";

/// `lines.hw_timestamps`, as [`mdfan_lines::HwTimestamps`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HwTimestampsKey {
    /// Never ask the device.
    Off,
    /// Where the device can.
    #[default]
    IfAvailable,
    /// Or refuse to start.
    Required,
}

/// `lines.a` / `lines.b`: where a line comes in, from which sources and on which interface (`"ip:port"`, or
/// `{ addr = "ip:port", sources = ["ip", ...], interface = "ip" }`). A datagram from a source not listed is
/// dropped before arbitration and counted (`foreign_sources`); no list: any source. Dereferences to the address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineAddr {
    /// The group (or unicast address) and port.
    pub addr: std::net::SocketAddrV4,
    /// The venue's source addresses for this line (at most [`mdfan_lines::MAX_SOURCES`]); empty: any.
    pub sources: Vec<std::net::Ipv4Addr>,
    /// The address of the interface that joins this line's group; `None`: `[lines]`' (`interface`, or
    /// `interface_b` for a line B).
    pub interface: Option<std::net::Ipv4Addr>,
}

impl std::ops::Deref for LineAddr {
    type Target = std::net::SocketAddrV4;
    fn deref(&self) -> &std::net::SocketAddrV4 {
        &self.addr
    }
}

impl std::fmt::Display for LineAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

impl<'de> Deserialize<'de> for LineAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            addr: std::net::SocketAddrV4,
            #[serde(default)]
            sources: Vec<std::net::Ipv4Addr>,
            #[serde(default)]
            interface: Option<std::net::Ipv4Addr>,
        }
        // A string is the address; a table is read with its own field errors (an untagged enum would hide which
        // key was wrong).
        let t = match toml::Value::deserialize(d)? {
            toml::Value::String(s) => {
                let addr = s.parse().map_err(|e| de::Error::custom(format!("{s:?}: {e} (expected \"ip:port\")")))?;
                return Ok(LineAddr { addr, sources: Vec::new(), interface: None });
            }
            v @ toml::Value::Table(_) => Table::deserialize(v).map_err(|e| de::Error::custom(e.message()))?,
            _ => {
                return Err(de::Error::custom(
                    "expected \"ip:port\" or { addr = \"ip:port\", sources = [\"ip\", ...], interface = \"ip\" }",
                ))
            }
        };
        if t.sources.len() > mdfan_lines::MAX_SOURCES {
            return Err(de::Error::custom(format!(
                "sources: {} listed, at most {}",
                t.sources.len(),
                mdfan_lines::MAX_SOURCES
            )));
        }
        Ok(LineAddr { addr: t.addr, sources: t.sources, interface: t.interface })
    }
}

impl LineAddr {
    /// An address with no source list and `[lines]`' interface.
    pub fn new(addr: std::net::SocketAddrV4) -> LineAddr {
        LineAddr { addr, sources: Vec::new(), interface: None }
    }
}

/// Which line of a channel a [`LineAddr`] is: line B takes `lines.interface_b` when it names no interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRole {
    /// Line A, the snapshot feed, the definition feed, a MoldUDP64 re-request socket.
    A,
    /// Line B.
    B,
}

/// `lines.start`: where a MoldUDP64 receiver starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoldStart {
    /// At the first packet seen.
    #[default]
    FirstSeen,
    /// At sequence number 1.
    One,
}

pub(crate) fn default_silent_after_ms() -> u64 {
    5_000
}
pub(crate) fn default_retransmit_timeout_ms() -> u64 {
    50
}
pub(crate) fn default_retransmit_retries() -> u32 {
    3
}
pub(crate) fn default_confirm_packets() -> usize {
    mdfan_lines::arbiter::DEFAULT_CONFIRM_COPIES
}

pub(crate) fn default_window_messages() -> usize {
    1 << 16
}

pub(crate) fn default_max_orders() -> usize {
    1 << 24
}

pub(crate) fn default_interface() -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::LOCALHOST
}
pub(crate) fn default_rcvbuf_bytes() -> usize {
    32 << 20
}
pub(crate) fn default_recovery_timeout_ms() -> u64 {
    5_000
}
pub(crate) fn default_gap_timeout_ms() -> u64 {
    10
}
pub(crate) fn default_line_tolerance() -> u64 {
    8
}
pub(crate) fn default_instruments() -> usize {
    4096
}

/// `[journal]`: the bounded ring of normalised records the feed reader fills and the hot loop and conductor
/// read (`crate::journal`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalSection {
    /// Slots, in records (a power of two, 1024 to 2^28; 128 bytes each, allocated and touched at start).
    /// Default 131,072 (16 MiB), which holds the bundled capture whole. A feed longer than the journal still
    /// replays in full; only a late joiner catching up from further back than this gets a fresh snapshot.
    pub records: u64,
}

impl Default for JournalSection {
    fn default() -> Self {
        JournalSection { records: crate::journal::DEFAULT_RECORDS }
    }
}

/// `[publisher]`: threads, endpoint, start condition.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PublisherSection {
    /// Control endpoint, `host:port`. Port 0 picks a free port.
    pub listen: String,
    /// Core the hot loop is pinned to; `None`: not pinned.
    pub hot_core: Option<usize>,
    /// What the live hot loop does on a cycle that sent nothing ([`HotIdle`]).
    pub hot_idle: HotIdle,
    /// Core the control thread is pinned to; `None`: not pinned.
    pub control_core: Option<usize>,
    /// File feeds: run the feed handler (decode, normalise, append to the journal) on the hot loop's thread,
    /// whenever the hot loop has nothing to send (the journal is empty or the next record is not due), instead
    /// of on thread `mdfan-feed`: one busy thread fewer, for a host with fewer cores than busy threads. A live
    /// feed keeps its own thread (its socket reads are syscalls).
    pub feed_on_hot_thread: bool,
    /// File feeds: subscribers to wait for before the replay starts. A live feed (MDP 3.0 lines, MoldUDP64, a
    /// relay's upstream) ignores it and starts at once: the venue does not wait.
    pub wait_for_subscribers: usize,
    /// Sessions the hot loop can hold at once (preallocated).
    pub max_subscribers: usize,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` at start.
    pub lock_memory: bool,
    /// Heartbeat records go to live subscribers when nothing was sent for this long, in ms (>= 1).
    pub heartbeat_interval_ms: u64,
    /// A subscriber whose ring stays full without releasing anything this long is dropped (`stalled`), in ms.
    pub stall_timeout_ms: u64,
    /// File feeds: the longest a session catching up (a late joiner, a resync) may keep the journal full, in ms
    /// (the feed handler waits for it, and so does every live session); after that the journal goes on without
    /// it and it gets a fresh snapshot if it needs an overwritten position (as on a live feed), which holds the
    /// journal again; the fourth time ([`crate::agent::MAX_HOLD_RELEASES`]) the session is dropped (`stalled`).
    pub catchup_hold_ms: u64,
    /// Slow-consumer policies subscribers may choose. `block` slows everyone: allow it only for recorders.
    pub policies: Vec<SlowConsumerPolicy>,
    /// Folder of the counters file (`mdfan-publisher-<ip>_<port>.counters`, rewritten every 100 ms by the
    /// conductor, read by `mdfan-stat`); empty: no counters file.
    pub counters_dir: PathBuf,
    /// Leave the counters file, marked ended with the final values, after a clean exit (for a post-mortem
    /// read). A publisher that dies leaves it whatever this says (`mdfan-stat` shows it as dead; the next start
    /// on the same endpoint removes it).
    pub keep_counters: bool,
    /// A Unix-domain control socket besides the TCP endpoint (mode 0660, in a folder nobody else may replace
    /// files in): subscribers on this host connect there (`--connect unix:PATH`), their user is known
    /// (`SO_PEERCRED`) and a shared-memory ring travels as a file descriptor, so a subscriber may run as another
    /// user than the publisher. `None`: TCP only.
    pub listen_unix: Option<PathBuf>,
    /// Accept a second live subscriber under a name already attached (default: refused, naming the session).
    pub allow_duplicate_names: bool,
    /// Snapshot requests a subscriber may make per second (as many in a burst); past them a request is refused
    /// and counted, and a subscriber with [`crate::conductor::SNAPSHOT_FLOOD_SECONDS`] seconds' worth refused is
    /// ended (`protocol_error`). 1 to 10,000.
    pub snapshot_requests_per_s: u32,
}

impl Default for PublisherSection {
    fn default() -> Self {
        PublisherSection {
            listen: "127.0.0.1:7700".into(),
            hot_core: None,
            hot_idle: HotIdle::Spin,
            control_core: None,
            feed_on_hot_thread: false,
            wait_for_subscribers: 1,
            max_subscribers: 64,
            lock_memory: false,
            heartbeat_interval_ms: 10,
            stall_timeout_ms: 5000,
            catchup_hold_ms: 100,
            policies: vec![SlowConsumerPolicy::Disconnect, SlowConsumerPolicy::Resync],
            counters_dir: PathBuf::from("/dev/shm"),
            keep_counters: false,
            listen_unix: None,
            allow_duplicate_names: false,
            snapshot_requests_per_s: 10,
        }
    }
}

/// What the live hot loop does on a duty cycle that sent nothing (`publisher.hot_idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HotIdle {
    /// PAUSE and go round again ([`IdleStrategy::BusySpin`]): the lowest latency, for a hot loop on an isolated
    /// core of its own.
    #[default]
    Spin,
    /// PAUSE for [`HotIdle::YIELD_AFTER_CYCLES`] empty cycles in a row, then `sched_yield` on each further one
    /// ([`IdleStrategy::SpinThenYield`]): for a host with fewer cores than busy threads (the feed thread, the hot
    /// loop, subscribers), where a spinning hot loop would starve the feed thread that gives it work. A record
    /// that arrives during a yield waits for the yield to return (about a microsecond on an idle core, a time
    /// slice on a busy one).
    Yield,
}

impl HotIdle {
    /// Empty cycles that only PAUSE before [`HotIdle::Yield`] starts to yield.
    pub const YIELD_AFTER_CYCLES: u32 = 1_000;

    /// The idle strategy of the live hot loop's runner.
    pub fn strategy(self) -> IdleStrategy {
        match self {
            HotIdle::Spin => IdleStrategy::BusySpin,
            HotIdle::Yield => IdleStrategy::SpinThenYield { spins: Self::YIELD_AFTER_CYCLES },
        }
    }
}

/// Feed formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedFormat {
    /// Databento DBN, MBO schema, plain or zstd: a file, replayed.
    Dbn,
    /// CME MDP 3.0 (SBE schema 1 v8), live from UDP lines A and B (`[lines]`): price-level records.
    Mdp3,
    /// Nasdaq TotalView-ITCH 5.0 BinaryFILE (plain or gzip), replayed: order-level records keyed by stock locate;
    /// needs `session_date`.
    Itch50,
    /// A LOBSTER message CSV (`path`) with its order-book CSV (`orderbook`), replayed: price-level (MBP) records
    /// of the order-book file and trades, every message checked against its row (`mdfan_feed::lobster`).
    Lobster,
    /// An mdfan capture (`mdfan_feed::capture`), replayed.
    Capture,
    /// Another mdfan publisher's stream, subscribed to (`crate::feeds::relay`): a relay.
    Mdfan,
}

impl FeedFormat {
    /// Every format.
    pub const ALL: [FeedFormat; 6] = [
        FeedFormat::Dbn,
        FeedFormat::Mdp3,
        FeedFormat::Itch50,
        FeedFormat::Lobster,
        FeedFormat::Capture,
        FeedFormat::Mdfan,
    ];

    /// The name the config spells it with.
    pub fn name(self) -> &'static str {
        match self {
            FeedFormat::Dbn => "dbn",
            FeedFormat::Mdp3 => "mdp3",
            FeedFormat::Itch50 => "itch50",
            FeedFormat::Lobster => "lobster",
            FeedFormat::Capture => "capture",
            FeedFormat::Mdfan => "mdfan",
        }
    }

    /// Whether the format reads key `field` of table `table` (`feed` or `lines`): each format module's list.
    pub fn knows(self, table: &str, field: &str) -> bool {
        let (feed, lines): (&[&str], &[&str]) = match self {
            FeedFormat::Dbn => (crate::feeds::dbn::FEED_KEYS, &[]),
            FeedFormat::Mdp3 => (crate::feeds::mdp3::FEED_KEYS, crate::feeds::mdp3::LINES_KEYS),
            FeedFormat::Itch50 => (crate::feeds::itch::FEED_KEYS, crate::feeds::itch::LINES_KEYS),
            FeedFormat::Lobster => (crate::feeds::lobster::FEED_KEYS, &[]),
            FeedFormat::Capture => (crate::feeds::capture::FEED_KEYS, &[]),
            FeedFormat::Mdfan => (crate::feeds::relay::FEED_KEYS, &[]),
        };
        match table {
            "feed" => feed.contains(&field),
            "lines" => lines.contains(&field) || (!lines.is_empty() && LINE_SET_KEYS.contains(&field)),
            _ => false,
        }
    }
}

/// The `[lines]` keys every live format reads ([`line_set`]).
pub const LINE_SET_KEYS: &[&str] = &[
    "a",
    "b",
    "interface",
    "interface_b",
    "rcvbuf_bytes",
    "end_after_idle_ms",
    "silent_after_ms",
    "confirm_packets",
    "hw_timestamps",
];

/// US Eastern midnight of `date` (`YYYY-MM-DD`), ns since the UNIX epoch: what ITCH and LOBSTER times count
/// from; `None` when `date` is not such a date.
pub fn session_midnight_ns(date: &str) -> Option<u64> {
    let mut it = date.splitn(3, '-');
    let (y, m, day) = (it.next()?, it.next()?, it.next()?);
    if y.len() != 4 || m.len() != 2 || day.len() != 2 {
        return None;
    }
    mdfan_feed::itch::eastern_midnight_ns(y.parse().ok()?, m.parse().ok()?, day.parse().ok()?)
}

/// How fast the replay goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// As fast as the hot loop can post.
    Max,
    /// At the capture's own pace (ts_recv deltas).
    Realtime,
    /// The capture's pace sped up by this factor ([`MIN_PACE`] to [`MAX_PACE`]).
    Factor(f64),
}

impl<'de> Deserialize<'de> for Pace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pace, D::Error> {
        struct PaceVisitor;
        impl Visitor<'_> for PaceVisitor {
            type Value = Pace;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"max\", \"realtime\" or a speed-up factor from 0.001 to 1e9")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Pace, E> {
                match v {
                    "max" => Ok(Pace::Max),
                    "realtime" => Ok(Pace::Realtime),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Pace, E> {
                if v.is_finite() && v > 0.0 {
                    Ok(Pace::Factor(v))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Pace, E> {
                if v > 0 {
                    Ok(Pace::Factor(v as f64))
                } else {
                    Err(E::invalid_value(de::Unexpected::Signed(v), &self))
                }
            }
        }
        d.deserialize_any(PaceVisitor)
    }
}

pub(crate) fn default_pace() -> Pace {
    Pace::Max
}
pub(crate) fn default_max_gap_ms() -> u64 {
    1000
}

/// `[fabric]`: how records reach subscribers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FabricSection {
    /// The provider (`shm` or `verbs`).
    pub provider: Provider,
    /// Folder that shm ring files must be in.
    pub shm_dir: PathBuf,
    /// Smallest ring a subscriber may offer, in slots (power of two).
    pub ring_slots_min: u32,
    /// Largest ring a subscriber may offer, in slots (power of two).
    pub ring_slots_max: u32,
    /// `[fabric.verbs]`: the verbs provider's settings (device, GID index, QP attributes), checked when
    /// `provider = "verbs"`.
    pub verbs: Option<toml::Table>,
    /// The provider with its settings, resolved from the keys above by [`Config::load`].
    #[serde(skip)]
    pub resolved: FabricConfig,
}

impl Default for FabricSection {
    fn default() -> Self {
        FabricSection {
            provider: Provider::Shm,
            shm_dir: PathBuf::from(mdfan_fabric::shm::DEFAULT_DIR),
            ring_slots_min: mdfan_wire::ring::MIN_SLOTS,
            ring_slots_max: mdfan_wire::ring::MAX_SLOTS,
            verbs: None,
            resolved: FabricConfig::default(),
        }
    }
}

/// Most sessions a publisher holds (preallocated in the hot loop).
pub const MAX_SUBSCRIBERS: usize = 4096;
/// Slowest speed-up factor: 1000x slower than the capture.
pub const MIN_PACE: f64 = 1e-3;
/// Fastest speed-up factor.
pub const MAX_PACE: f64 = 1e9;

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// The dotted key (`feed.pace`) a `key = value` line at `offset` sets: its own key under the last `[table]`
/// header above it. `None` when the line is not such a line (a header, a syntax error).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty() || key.starts_with('[') || key.starts_with('#') {
        return None;
    }
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_owned());
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_owned(),
    })
}

/// The 1-based line that sets the dotted `key` (`publisher.hot_core`), or holds the `[table]` header when `key`
/// names a table (`fabric.verbs`). `None` when the text does not set it (a default).
pub(crate) fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let mut table = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = header.trim().to_owned();
            if table == key {
                return Some(i + 1);
            }
        } else if let Some((k, _)) = line.split_once('=') {
            let k = k.trim();
            let dotted = if table.is_empty() { k.to_owned() } else { format!("{table}.{k}") };
            if dotted == key {
                return Some(i + 1);
            }
        }
    }
    None
}

/// The 1-based line that sets `field` in entry `index` (0-based) of the array of tables `table`
/// (`[[access.subscribers]]` blocks), or the entry's header line when the entry does not set it. `None` when the
/// text writes the array inline.
pub(crate) fn line_of_entry_key(text: &str, table: &str, index: usize, field: &str) -> Option<usize> {
    let mut seen = 0;
    let mut header = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            if header.is_some() {
                break; // the entry's block ended without the field
            }
            let name = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")).map(str::trim);
            if name == Some(table) {
                seen += 1;
                if seen == index + 1 {
                    header = Some(i + 1);
                }
            }
        } else if header.is_some() && line.split_once('=').is_some_and(|(k, _)| k.trim() == field) {
            return Some(i + 1);
        }
    }
    header
}

/// `config PATH: line N: key KEY: DETAIL` for a value that parsed but is not allowed (the line that set `key`;
/// none when the text does not set it).
pub(crate) fn bad_key(text: &str, path: &Path, key: &str, detail: String) -> ConfigError {
    let at = line_of_key(text, key).map_or(String::new(), |n| format!("line {n}: "));
    ConfigError { path: path.display().to_string(), detail: format!("{at}key {key}: {detail}") }
}

/// A TOML or serde error as `line N: key KEY: MESSAGE`: the key and line of its span; for an unknown key of a
/// whole table (whose span is the table), the line that sets it and, when another format reads it, which.
fn toml_error(text: &str, e: &toml::de::Error, format: Option<FeedFormat>) -> String {
    let msg = e.message().trim();
    let Some(span) = e.span() else { return msg.to_owned() };
    let (at, key) = match (key_at(text, span.start), unknown_field(msg), table_at(text, span.start)) {
        (Some(key), _, _) => (Some(line_of(text, span.start)), key),
        // An unknown key of a table whose span is the whole table: the line that sets it.
        (None, Some(field), Some((table, from))) => {
            if table == field || table.ends_with(&format!(".{field}")) {
                // The unknown key is this table itself (`[[feed.channels]]` under a format without channels).
                (Some(line_of(text, from)), table)
            } else {
                let key = if table.is_empty() { field.to_owned() } else { format!("{table}.{field}") };
                (line_of_field(text, from, field), key)
            }
        }
        // A missing key or a wrong type of a whole table (`[[feed.channels]]` written as `[feed.channels]`):
        // the table, at its header.
        (None, _, Some((table, from))) if !table.is_empty() => {
            return format!("line {}: key {table}: {msg}", line_of(text, from));
        }
        _ => return format!("line {}: {msg}", line_of(text, span.start)),
    };
    let at = at.map_or(String::new(), |n| format!("line {n}: "));
    let (table, field) = key.rsplit_once('.').unwrap_or(("", &key));
    let owners: Vec<String> = match (unknown_field(msg), format) {
        (Some(unknown), Some(format)) if unknown == field => (FeedFormat::ALL.iter())
            .filter(|f| **f != format && f.knows(table, field))
            .map(|f| format!("\"{}\"", f.name()))
            .collect(),
        _ => Vec::new(),
    };
    match owners.as_slice() {
        [] => format!("{at}key {key}: {msg}"),
        [one] => format!("{at}key {key}: only for feed.format = {one}"),
        [first @ .., last] => format!("{at}key {key}: only for feed.format = {} or {last}", first.join(", ")),
    }
}

/// The field serde's "unknown field `x`, expected ..." names.
fn unknown_field(msg: &str) -> Option<&str> {
    msg.strip_prefix("unknown field `")?.split('`').next()
}

/// The dotted name of the table (or array of tables) whose header is at or above `offset` (`""` before any
/// header), and the byte offset of that header's line.
fn table_at(text: &str, offset: usize) -> Option<(String, usize)> {
    let offset = offset.min(text.len());
    let mut found = (String::new(), 0);
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if start > offset {
            break;
        }
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            found = (t.trim_matches(|c| c == '[' || c == ']').trim().to_owned(), start);
        }
        start += line.len();
    }
    Some(found)
}

/// The 1-based line setting `field` in the table block whose header line starts at byte `from` (up to the next
/// header).
fn line_of_field(text: &str, from: usize, field: &str) -> Option<usize> {
    let first = line_of(text, from);
    for (i, line) in text[from.min(text.len())..].lines().enumerate() {
        let t = line.trim();
        if i > 0 && t.starts_with('[') {
            return None;
        }
        if t.split_once('=').is_some_and(|(k, _)| k.trim() == field) {
            return Some(first + i);
        }
    }
    None
}

impl Config {
    /// Parses and validates a config text; `path` is used in errors and to resolve relative feed paths.
    ///
    /// # Errors
    /// [`ConfigError`] naming the line and key: TOML syntax, an unknown or mistyped key (a key of another
    /// format says which), a bad value.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let err = |detail: String| ConfigError { path: path.display().to_string(), detail };
        // A value that parsed but is not allowed: named with the line that set it, like a parse error.
        let bad = |key: &str, detail: String| bad_key(text, path, key, detail);
        let format = match toml::from_str::<Probe>(text) {
            Ok(p) => p.feed.format,
            Err(e) => {
                // The whole file read as it is, for the first error in it (syntax, a section's key); else the
                // probe's (no [feed], no or a bad format).
                let whole = toml::from_str::<Whole<toml::Table, toml::Table>>(text).err().unwrap_or(e);
                return Err(err(toml_error(text, &whole, None)));
            }
        };
        let checker = crate::feeds::Checker { text, path };
        let (publisher, feed, fabric, journal, access) = match format {
            FeedFormat::Dbn => {
                let w: Whole<crate::feeds::dbn::DbnFeed, toml::Value> = read(text, format).map_err(err)?;
                no_lines(&w, format, &checker)?;
                let mut f = w.feed;
                f.check(&checker)?;
                (w.publisher, FeedConfig::Dbn(f), w.fabric, w.journal, w.access)
            }
            FeedFormat::Lobster => {
                let w: Whole<crate::feeds::lobster::LobsterFeed, toml::Value> = read(text, format).map_err(err)?;
                no_lines(&w, format, &checker)?;
                let mut f = w.feed;
                f.check(&checker)?;
                (w.publisher, FeedConfig::Lobster(f), w.fabric, w.journal, w.access)
            }
            FeedFormat::Capture => {
                let w: Whole<crate::feeds::capture::CaptureFeed, toml::Value> = read(text, format).map_err(err)?;
                no_lines(&w, format, &checker)?;
                let mut f = w.feed;
                f.check(&checker)?;
                (w.publisher, FeedConfig::Capture(f), w.fabric, w.journal, w.access)
            }
            FeedFormat::Mdfan => {
                let w: Whole<crate::feeds::relay::RelayFeed, toml::Value> = read(text, format).map_err(err)?;
                no_lines(&w, format, &checker)?;
                let mut f = w.feed;
                f.check(&checker)?;
                (w.publisher, FeedConfig::Relay(f), w.fabric, w.journal, w.access)
            }
            FeedFormat::Itch50 => {
                let w: Whole<crate::feeds::itch::ItchFeed, crate::feeds::itch::MoldLines> =
                    read(text, format).map_err(err)?;
                let mut f = w.feed;
                f.lines = w.lines;
                f.check(&checker)?;
                (w.publisher, FeedConfig::Itch50(f), w.fabric, w.journal, w.access)
            }
            FeedFormat::Mdp3 => {
                let w: Whole<crate::feeds::mdp3::Mdp3Feed, crate::feeds::mdp3::Mdp3Lines> =
                    read(text, format).map_err(err)?;
                let mut f = w.feed;
                f.check(w.lines, &checker)?;
                (w.publisher, FeedConfig::Mdp3(f), w.fabric, w.journal, w.access)
            }
        };
        let mut cfg = Config { publisher, feed, fabric, journal, access, source: None };
        let (lo, hi) = (cfg.fabric.ring_slots_min, cfg.fabric.ring_slots_max);
        for (key, v) in [("fabric.ring_slots_min", lo), ("fabric.ring_slots_max", hi)] {
            mdfan_wire::ring::check_slot_count(v as u64).map_err(|e| bad(key, e.to_string()))?;
        }
        if lo > hi {
            return Err(bad("fabric.ring_slots_min", format!("{lo} is above fabric.ring_slots_max {hi}")));
        }
        if cfg.publisher.feed_on_hot_thread && cfg.feed.is_live() {
            return Err(bad(
                "publisher.feed_on_hot_thread",
                "a live feed keeps its own thread (its socket reads are syscalls the hot loop must not make)".into(),
            ));
        }
        const HOUR_MS: u64 = 3_600_000;
        for (key, v) in [
            ("publisher.heartbeat_interval_ms", cfg.publisher.heartbeat_interval_ms),
            ("publisher.stall_timeout_ms", cfg.publisher.stall_timeout_ms),
            ("publisher.catchup_hold_ms", cfg.publisher.catchup_hold_ms),
            ("feed.max_gap_ms", cfg.feed.max_gap_ms().max(1)),
        ] {
            if !(1..=HOUR_MS).contains(&v) {
                return Err(bad(key, format!("{v}: must be between 1 and {HOUR_MS} (one hour)")));
            }
        }
        let records = cfg.journal.records;
        let (min, max) = (crate::journal::MIN_RECORDS, crate::journal::MAX_RECORDS);
        if !records.is_power_of_two() || !(min..=max).contains(&records) {
            return Err(bad("journal.records", format!("{records}: must be a power of two from {min} to {max}")));
        }
        if !(1..=MAX_SUBSCRIBERS).contains(&cfg.publisher.max_subscribers) {
            let n = cfg.publisher.max_subscribers;
            return Err(bad("publisher.max_subscribers", format!("{n}: must be between 1 and {MAX_SUBSCRIBERS}")));
        }
        if let Pace::Factor(f) = cfg.feed.pace() {
            if !(MIN_PACE..=MAX_PACE).contains(&f) {
                return Err(bad(
                    "feed.pace",
                    format!("{f:?}: a speed-up factor must be between {MIN_PACE} and {MAX_PACE}"),
                ));
            }
        }
        let allowed = mdfan_tuning::allowed_cores();
        for (key, core) in
            [("publisher.hot_core", cfg.publisher.hot_core), ("publisher.control_core", cfg.publisher.control_core)]
        {
            if let Some(core) = core {
                if !allowed.is_empty() && !allowed.contains(&core) {
                    return Err(bad(key, format!("{core}: not one of the cores this process may use {allowed:?}")));
                }
            }
        }
        if let Err(e) = std::net::ToSocketAddrs::to_socket_addrs(cfg.publisher.listen.as_str()) {
            return Err(bad("publisher.listen", format!("{}: {e} (host:port)", cfg.publisher.listen)));
        }
        let counters_dir = &cfg.publisher.counters_dir;
        if !counters_dir.as_os_str().is_empty() && !counters_dir.is_dir() {
            return Err(bad("publisher.counters_dir", format!("{}: not a directory", counters_dir.display())));
        }
        if let Some(access) = &cfg.access {
            let mut names = std::collections::HashSet::new();
            for (k, e) in access.subscribers.iter().enumerate() {
                // Named with the line of the entry's field (the entry's `[[access.subscribers]]` block).
                let bad = |field: &str, detail: String| {
                    let at = line_of_entry_key(text, "access.subscribers", k, field)
                        .map_or(String::new(), |n| format!("line {n}: "));
                    err(format!("{at}key access.subscribers: {detail}"))
                };
                if !names.insert(e.name.as_str()) {
                    return Err(bad("name", format!("entry {}: name {:?} is listed twice", k + 1, e.name)));
                }
                let entry = format!("entry {} ({})", k + 1, e.name);
                if e.token.len() < MIN_TOKEN_BYTES {
                    return Err(bad(
                        "token",
                        format!("{entry}: token too short: at least {MIN_TOKEN_BYTES} characters"),
                    ));
                }
                if let Some(c) = e.token.chars().find(|c| !c.is_ascii_alphanumeric() && !TOKEN_PUNCTUATION.contains(*c))
                {
                    return Err(bad(
                        "token",
                        format!("{entry}: token holds {c:?}: only A-Z a-z 0-9 and {TOKEN_PUNCTUATION} (openssl rand -hex 32)"),
                    ));
                }
                let distinct = e.token.chars().collect::<std::collections::HashSet<_>>().len();
                if distinct < MIN_TOKEN_DISTINCT {
                    return Err(bad(
                        "token",
                        format!("{entry}: token has {distinct} distinct characters, at least {MIN_TOKEN_DISTINCT} (openssl rand -hex 32)"),
                    ));
                }
                if e.instruments.as_ref().is_some_and(Vec::is_empty) {
                    return Err(bad(
                        "instruments",
                        format!("{entry}: instruments = []: entitles it to nothing; leave the key out for everything"),
                    ));
                }
                if e.name.is_empty()
                    || e.name.len() > crate::access::MAX_NAME_BYTES
                    || e.name.contains(char::is_control)
                {
                    return Err(bad(
                        "name",
                        format!(
                            "entry {}: name {:?}: 1 to {} bytes of printable text",
                            k + 1,
                            e.name,
                            crate::access::MAX_NAME_BYTES
                        ),
                    ));
                }
            }
        }
        if !(1..=10_000).contains(&cfg.publisher.snapshot_requests_per_s) {
            let v = cfg.publisher.snapshot_requests_per_s;
            return Err(bad("publisher.snapshot_requests_per_s", format!("{v}: must be 1 to 10000")));
        }
        if let Some(p) = cfg.publisher.listen_unix.as_mut().filter(|p| p.is_relative()) {
            *p = path.parent().unwrap_or(Path::new(".")).join(&*p);
        }
        if cfg.publisher.policies.is_empty() {
            return Err(bad("publisher.policies", "empty: no subscriber could ever be accepted".into()));
        }
        if cfg.publisher.wait_for_subscribers > cfg.publisher.max_subscribers {
            let (wait, max) = (cfg.publisher.wait_for_subscribers, cfg.publisher.max_subscribers);
            return Err(bad(
                "publisher.wait_for_subscribers",
                format!("{wait} is above publisher.max_subscribers {max}"),
            ));
        }
        // Checked whatever the provider and the build, so a typo under [fabric.verbs] never waits for the day it
        // is used.
        #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
        let verbs = {
            let table = cfg.fabric.verbs.clone().unwrap_or_default();
            let verbs = mdfan_fabric::verbs_config::VerbsConfig::deserialize(table)
                .map_err(|e| bad("fabric.verbs", e.message().trim().to_owned()))?;
            verbs.validate().map_err(|e| bad("fabric.verbs", e.to_string()))?;
            verbs
        };
        cfg.fabric.resolved = match cfg.fabric.provider {
            Provider::Shm if !cfg.fabric.shm_dir.is_dir() => {
                return Err(bad("fabric.shm_dir", format!("{}: not a directory", cfg.fabric.shm_dir.display())));
            }
            Provider::Shm => FabricConfig::Shm { dir: cfg.fabric.shm_dir.clone() },
            #[cfg(feature = "verbs")]
            Provider::Verbs => FabricConfig::Verbs(verbs),
            #[cfg(not(feature = "verbs"))]
            Provider::Verbs => {
                let missing = mdfan_fabric::FabricError::NotBuilt(Provider::Verbs);
                return Err(bad("fabric.provider", format!("\"verbs\": {missing}")));
            }
        };
        Ok(cfg)
    }

    /// Reads and parses a config file.
    ///
    /// # Errors
    /// [`ConfigError`] when the file cannot be read, and as [`Config::parse`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError { path: path.display().to_string(), detail: format!("cannot read: {e}") })?;
        let mut cfg = Config::parse(&text, path)?;
        cfg.source = Some(path.to_owned());
        #[cfg(unix)]
        if cfg.access.is_some() {
            use std::os::unix::fs::PermissionsExt as _;
            if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0) {
                tracing::warn!(config = %path.display(), "the config holds subscriber tokens and is world-readable: chmod 600 it");
            }
        }
        Ok(cfg)
    }
}

/// The file as `format` reads it; an error as [`toml_error`] words it.
fn read<F: serde::de::DeserializeOwned, L: serde::de::DeserializeOwned>(
    text: &str,
    format: FeedFormat,
) -> Result<Whole<F, L>, String> {
    toml::from_str(text).map_err(|e| toml_error(text, &e, Some(format)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[publisher]
listen = "127.0.0.1:0"
hot_core = 1
wait_for_subscribers = 2

[feed]
format = "dbn"
path = "feed.dbn.zst"
pace = 10

[fabric]
provider = "shm"
"#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/mdfan/publisher.toml"))
    }

    /// An MDP 3.0 config's `[feed]`.
    fn mdp3(c: &Config) -> &crate::feeds::mdp3::Mdp3Feed {
        match &c.feed {
            FeedConfig::Mdp3(f) => f,
            other => panic!("not mdp3: {other:?}"),
        }
    }

    /// An MDP 3.0 config's `[lines]`.
    fn lines(c: &Config) -> crate::feeds::mdp3::Mdp3Lines {
        mdp3(c).lines().clone()
    }

    /// A live ITCH config's `[lines]`.
    fn mold(c: &Config) -> crate::feeds::itch::MoldLines {
        match &c.feed {
            FeedConfig::Itch50(f) => f.lines.clone().expect("live"),
            other => panic!("not itch50: {other:?}"),
        }
    }

    #[test]
    fn a_good_config_parses_with_defaults_and_a_resolved_path() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.publisher.hot_core, Some(1));
        assert_eq!(c.publisher.wait_for_subscribers, 2);
        assert_eq!(c.publisher.max_subscribers, 64);
        assert_eq!(c.feed.pace(), Pace::Factor(10.0));
        assert_eq!(c.feed.path(), Some(Path::new("/etc/mdfan/feed.dbn.zst")));
        assert_eq!(c.publisher.hot_idle, HotIdle::Spin);
        assert_eq!(c.publisher.hot_idle.strategy(), IdleStrategy::BusySpin);
        assert_eq!(c.feed.max_gap_ms(), 1000);
        assert_eq!(c.feed.symbols(), None);
        assert_eq!(c.fabric.provider, Provider::Shm);
        assert_eq!(c.fabric.ring_slots_max, 1 << 24);
        let c = parse(&GOOD.replace("pace = 10", "pace = \"realtime\"")).unwrap();
        assert_eq!(c.feed.pace(), Pace::Realtime);
    }

    const LIVE: &str = r#"
[publisher]
listen = "127.0.0.1:0"

[feed]
format = "mdp3"

[lines]
a = "224.0.31.11:14320"
b = "224.0.32.11:15320"
snapshot = "224.0.31.43:14330"
"#;

    #[test]
    fn only_a_file_feed_may_be_decoded_on_the_hot_thread() {
        let file = parse(&GOOD.replace("hot_core = 1", "hot_core = 1\nfeed_on_hot_thread = true")).unwrap();
        assert!(file.publisher.feed_on_hot_thread);
        assert!(!parse(GOOD).unwrap().publisher.feed_on_hot_thread, "off by default");
        let live = LIVE.replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:0\"\nfeed_on_hot_thread = true");
        let e = parse(&live).unwrap_err().to_string();
        assert!(e.contains("key publisher.feed_on_hot_thread: a live feed keeps its own thread"), "{e}");
    }

    #[test]
    fn line_sources_and_confirm_packets_map_onto_the_line_and_arbiter_config() {
        let with = |a: &str| LIVE.replace("a = \"224.0.31.11:14320\"", a);
        let l = lines(
            &parse(&with(
                "a = { addr = \"224.0.31.11:14320\", sources = [\"10.0.0.5\", \"10.0.0.6\"] }\nconfirm_packets = 5",
            ))
            .unwrap(),
        );
        let a = l.line_config(l.a.as_ref().unwrap(), LineRole::A);
        assert_eq!(
            (a.addr, a.sources.clone()),
            ("224.0.31.11:14320".parse().unwrap(), vec![[10, 0, 0, 5].into(), [10, 0, 0, 6].into()])
        );
        assert!(l.line_config(l.b.as_ref().unwrap(), LineRole::B).sources.is_empty(), "line B takes any source");
        assert_eq!((l.confirm_packets, lines(&parse(LIVE).unwrap()).confirm_packets), (5, 3));
        let nine = (1..=9).map(|i| format!("\"10.0.0.{i}\"")).collect::<Vec<_>>().join(", ");
        let e = parse(&with(&format!("a = {{ addr = \"224.0.31.11:14320\", sources = [{nine}] }}")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key lines.a: ") && e.contains("sources: 9 listed, at most 8"), "{e}");
        let e = parse(&with("a = { addr = \"224.0.31.11:14320\", source = [] }")).unwrap_err().to_string();
        assert!(
            e.contains("key lines.a: ")
                && e.contains("unknown field `source`, expected one of `addr`, `sources`, `interface`"),
            "{e}"
        );
        let e = parse(&with("a = 7")).unwrap_err().to_string();
        assert!(e.contains("key lines.a: ") && e.contains("sources = ["), "{e}");
        let e = parse(&with("a = \"224.0.31.11\"")).unwrap_err().to_string();
        assert!(
            e.contains("key lines.a: ")
                && e.contains("\"224.0.31.11\": invalid IPv4 socket address syntax (expected \"ip:port\")"),
            "{e}"
        );
        let e = parse(&format!("{}confirm_packets = 0\n", LIVE)).unwrap_err().to_string();
        assert!(e.ends_with("key lines.confirm_packets: 0: must be 1 to 64"), "{e}");
    }

    #[test]
    fn lines_hw_timestamps_maps_onto_the_line_config() {
        let l = lines(&parse(LIVE).unwrap());
        let a = l.line_config(l.a.as_ref().unwrap(), LineRole::A);
        assert_eq!(
            (a.hw_timestamps, a.rcvbuf_bytes, a.interface),
            (mdfan_lines::HwTimestamps::IfAvailable, 32 << 20, l.interface)
        );
        for (word, want) in [("off", mdfan_lines::HwTimestamps::Off), ("required", mdfan_lines::HwTimestamps::Required)]
        {
            let l = lines(&parse(&LIVE.replace("[lines]", &format!("[lines]\nhw_timestamps = \"{word}\""))).unwrap());
            assert_eq!(l.line_config(l.a.as_ref().unwrap(), LineRole::A).hw_timestamps, want);
        }
        let e = parse(&LIVE.replace("[lines]", "[lines]\nhw_timestamps = \"yes\"")).unwrap_err().to_string();
        assert!(e.contains("hw_timestamps") && e.contains("if_available"), "{e}");
    }

    #[test]
    fn a_live_mdp3_config_parses_with_defaults_and_its_mistakes_are_named() {
        let c = parse(LIVE).unwrap();
        assert_eq!(c.feed.format_name(), "mdp3");
        let l = &lines(&c);
        let a = l.a.as_ref().unwrap();
        assert_eq!((a.addr, a.sources.len(), a.interface), ("224.0.31.11:14320".parse().unwrap(), 0, None));
        assert_eq!(l.b.as_ref().map(|b| b.addr), Some("224.0.32.11:15320".parse().unwrap()));
        assert_eq!(l.snapshot, Some(LineAddr::new("224.0.31.43:14330".parse().unwrap())));
        assert_eq!(l.definitions, None);
        let ch = mdp3(&c).channels();
        assert_eq!((ch.len(), ch[0].id, ch[0].key.as_str(), &ch[0].a), (1, 0, "lines", a));
        assert_eq!(l.interface, std::net::Ipv4Addr::LOCALHOST);
        assert_eq!((l.rcvbuf_bytes, l.gap_timeout_ms, l.line_tolerance), (32 << 20, 10, 8));
        assert_eq!((l.instruments, l.end_after_idle_ms, l.silent_after_ms), (4096, 0, 5000));
        let e = parse(&LIVE.replace("[lines]", "[linez]")).unwrap_err().to_string();
        assert!(e.contains("unknown field `linez`"), "{e}");
        let e = parse(&LIVE.replace("224.0.32.11:15320", "224.0.31.11:14320")).unwrap_err().to_string();
        assert!(e.ends_with("line 10: key lines.b: 224.0.31.11:14320: the same address as lines.a"), "{e}");
        let e = parse(&LIVE.replace("224.0.31.43:14330", "224.0.32.11:15320")).unwrap_err().to_string();
        assert!(e.ends_with("line 11: key lines.snapshot: 224.0.32.11:15320: the same address as lines.b"), "{e}");
        let e =
            parse(&LIVE.replace("format = \"mdp3\"", "format = \"mdp3\"\npath = \"x.pcap\"")).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "line 7: key feed.path: only for feed.format = \"dbn\", \"itch50\", \"lobster\" or \"capture\""
            ),
            "{e}"
        );
        let e = parse(&LIVE.replace("format = \"mdp3\"", "format = \"mdp3\"\npace = 2")).unwrap_err().to_string();
        assert!(
            e.ends_with("key feed.pace: only for feed.format = \"dbn\", \"itch50\", \"lobster\" or \"capture\""),
            "{e}"
        );
        let e = parse(&LIVE[..LIVE.find("[lines]").unwrap()]).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "line 6: key feed.format: \"mdp3\" needs a [lines] section (lines A and B) or [[feed.channels]]"
            ),
            "{e}"
        );
        let e = parse(&LIVE.replace("a = \"224.0.31.11:14320\"", "a = \"224.0.31.11\"")).unwrap_err().to_string();
        assert!(e.contains("line 9: key lines.a: "), "{e}");
        let e = parse(&format!("{LIVE}gap_timeout_ms = 0\n")).unwrap_err().to_string();
        assert!(e.ends_with("key lines.gap_timeout_ms: 0: must be 1 to 60000"), "{e}");
        let e = parse(&format!("{GOOD}\n[lines]\na = \"127.0.0.1:1\"\nb = \"127.0.0.1:2\"\n")).unwrap_err().to_string();
        assert!(e.contains("key lines: [lines] is for a live feed: feed.format is \"dbn\" (a file)"), "{e}");
    }

    const CHANNELS: &str = r#"
[feed]
format = "mdp3"

[lines]
interface = "192.0.2.10"
interface_b = "198.51.100.10"
gap_timeout_ms = 5

[[feed.channels]]
id = 310
a = { addr = "233.252.14.1:14310", sources = ["192.0.2.1"] }
b = "233.252.14.2:15310"
snapshot = "233.252.14.3:16310"
definitions = "233.252.14.4:17310"
symbols = "ch310.csv"

[[feed.channels]]
id = 311
a = "233.252.14.5:14311"
b = { addr = "233.252.14.6:15311", interface = "203.0.113.10" }
"#;

    #[test]
    fn several_channels_each_have_their_lines_and_share_lines_settings_and_interfaces() {
        let c = parse(CHANNELS).unwrap();
        let l = &lines(&c);
        assert_eq!((l.a.as_ref(), l.gap_timeout_ms), (None, 5));
        let ch = mdp3(&c).channels();
        assert_eq!(
            ch.iter().map(|c| (c.id, c.key.as_str())).collect::<Vec<_>>(),
            [(310, "feed.channels[1]"), (311, "feed.channels[2]")]
        );
        assert_eq!(ch[0].symbols, Some(PathBuf::from("/etc/mdfan/ch310.csv")));
        assert_eq!(ch[0].definitions.as_ref().map(|d| d.addr.to_string()), Some("233.252.14.4:17310".into()));
        assert_eq!((ch[1].snapshot.as_ref(), ch[1].definitions.as_ref()), (None, None));
        // Interfaces: A lines, snapshot and definitions on `interface`; B lines on `interface_b`; a line's own first.
        let iface = |line: &LineAddr, role| l.line_config(line, role).interface.to_string();
        assert_eq!(iface(&ch[0].a, LineRole::A), "192.0.2.10");
        assert_eq!(iface(&ch[0].b, LineRole::B), "198.51.100.10");
        assert_eq!(iface(ch[0].definitions.as_ref().unwrap(), LineRole::A), "192.0.2.10");
        assert_eq!(iface(&ch[1].b, LineRole::B), "203.0.113.10");
        assert_eq!(l.line_config(&ch[0].a, LineRole::A).sources, vec![std::net::Ipv4Addr::new(192, 0, 2, 1)]);
        // Without [lines] every shared setting takes its default.
        let bare = CHANNELS
            .replace("[lines]\ninterface = \"192.0.2.10\"\ninterface_b = \"198.51.100.10\"\ngap_timeout_ms = 5\n", "");
        let c = parse(&bare).unwrap();
        assert_eq!((lines(&c).gap_timeout_ms, mdp3(&c).channels().len()), (10, 2));
    }

    #[test]
    fn channel_mistakes_are_named_with_the_line_of_their_entry() {
        let e = parse(&CHANNELS.replace("id = 311", "id = 310")).unwrap_err().to_string();
        assert!(e.ends_with("line 19: key feed.channels[2].id: 310: already the id of feed.channels[1]"), "{e}");
        let e = parse(&CHANNELS.replace("id = 311", "id = 0")).unwrap_err().to_string();
        assert!(e.ends_with("line 19: key feed.channels[2].id: 0: a channel id is 1 to 65535"), "{e}");
        let e = parse(&CHANNELS.replace("233.252.14.5:14311", "233.252.14.3:16310")).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "line 20: key feed.channels[2].a: 233.252.14.3:16310: the same address as feed.channels[1].snapshot"
            ),
            "{e}"
        );
        let e = parse(&CHANNELS.replace("gap_timeout_ms = 5", "gap_timeout_ms = 5\na = \"233.252.14.9:1\""))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("line 9: key lines.a: with [[feed.channels]], each channel names its own lines"), "{e}");
        let e = parse(&CHANNELS.replace("id = 311\n", "id = 311\nsnapshots = \"x\"\n")).unwrap_err().to_string();
        assert!(e.contains("line 20: key feed.channels.snapshots: unknown field `snapshots`"), "{e}");
        let e = parse(&CHANNELS.replace("b = \"233.252.14.2:15310\"\n", "")).unwrap_err().to_string();
        assert!(e.ends_with("line 10: key feed.channels: missing field `b`"), "{e}");
        let e = parse(&CHANNELS.replace("[[feed.channels]]\nid = 311", "[feed.channel]\nid = 311"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 18: key feed.channel: unknown field `channel`, expected one of"), "{e}");
        let one = "[feed]\nformat = \"mdp3\"\n\n[feed.channels]\nid = 311\na = \"1.2.3.4:1\"\nb = \"1.2.3.4:2\"\n";
        let e = parse(one).unwrap_err().to_string();
        assert!(e.ends_with("line 4: key feed.channels: invalid type: map, expected a sequence"), "{e}");
        let e = parse(&CHANNELS.replace("gap_timeout_ms = 5", "gap_timeout_ms = 5\ninstruments = 1048576"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("line 9: key lines.instruments: 1048576 x 2 channels: at most 1048576 instruments in all (each channel reserves lines.instruments)"),
            "{e}"
        );
        let itch =
            "[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n[lines]\na = \"233.54.12.111:26477\"\n";
        let e = parse(&format!("{itch}definitions = \"233.54.12.112:1\"\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 7: key lines.definitions: only for feed.format = \"mdp3\""), "{e}");
        let e = parse(&format!("{itch}\n[[feed.channels]]\nid = 1\na = \"1.2.3.4:5\"\nb = \"1.2.3.4:6\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("line 8: key feed.channels: only for feed.format = \"mdp3\""), "{e}");
    }

    #[test]
    fn a_live_itch_config_parses_with_defaults_and_its_mistakes_are_named() {
        let live = "[publisher]\nlisten = \"127.0.0.1:0\"\n\n[feed]\nformat = \"itch50\"\nsession_date = \"2023-08-22\"\n\n[lines]\na = \"233.54.12.111:26477\"\nretransmit = \"127.0.0.1:9100\"\n";
        let c = parse(live).unwrap();
        let l = &mold(&c);
        assert_eq!((l.b.clone(), l.retransmit), (None, Some("127.0.0.1:9100".parse().unwrap())));
        assert_eq!((l.retransmit_timeout_ms, l.retransmit_retries, l.window_messages), (50, 3, 65_536));
        assert_eq!((l.start, l.session.as_deref(), l.max_orders), (MoldStart::FirstSeen, None, 1 << 24));
        assert_eq!(mold(&parse(&format!("{live}max_orders = 1024\n")).unwrap()).max_orders, 1024);
        let e = parse(&format!("{live}max_orders = 1023\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 11: key lines.max_orders: 1023: must be 1024 to 268435456"), "{e}");
        let c = parse(&format!("{live}start = \"one\"\nsession = \"000010059B\"\n")).unwrap();
        let l = mold(&c);
        assert_eq!((l.start, l.session.as_deref()), (MoldStart::One, Some("000010059B")));
        let e = parse(&format!("{live}retransmit_timeout_ms = 0\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 11: key lines.retransmit_timeout_ms: 0: must be 1 to 60000"), "{e}");
        let e = parse(&format!("{live}session = \"TOO-LONG-SESSION\"\n")).unwrap_err().to_string();
        assert!(e.ends_with("key lines.session: \"TOO-LONG-SESSION\": must be 1 to 10 ASCII characters"), "{e}");
        let e = parse(&live.replace("session_date = \"2023-08-22\"\n", "")).unwrap_err().to_string();
        assert!(e.contains("key feed.session_date: "), "{e}");
        let e = parse(&LIVE.replace("b = \"224.0.32.11:15320\"\n", "")).unwrap_err().to_string();
        assert!(e.contains("key lines: \"mdp3\" needs line B (lines.b)"), "{e}");
        // A key of the other live format is named, with the format that reads it.
        let e = parse(&format!("{LIVE}retransmit = \"127.0.0.1:9100\"\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 12: key lines.retransmit: only for feed.format = \"itch50\""), "{e}");
        let e = parse(&format!("{live}snapshot = \"127.0.0.1:9\"\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 11: key lines.snapshot: only for feed.format = \"mdp3\""), "{e}");
        let e = parse(&format!("{live}window_messages = 17\ninstruments = 9\n")).unwrap_err().to_string();
        assert!(e.ends_with("line 12: key lines.instruments: only for feed.format = \"mdp3\""), "{e}");
        let e = parse(&format!("{live}windows = 17\n")).unwrap_err().to_string();
        assert!(e.contains("line 11: key lines.windows: unknown field `windows`"), "{e}");
    }

    #[test]
    fn the_shipped_live_configs_parse() {
        let ops = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops");
        let c = Config::load(&ops.join("live.toml")).unwrap();
        assert_eq!((c.feed.format_name(), lines(&c).end_after_idle_ms), ("mdp3", 2000));
        // The colo example names cores and a provider this machine may not have: checked with those swapped.
        let text = std::fs::read_to_string(ops.join("colo-mdp3.toml")).unwrap();
        let text = text.replace("hot_core = 3", "hot_core = 0").replace("control_core = 2", "control_core = 0");
        let text =
            if cfg!(feature = "verbs") { text } else { text.replace("provider = \"verbs\"", "provider = \"shm\"") };
        let c = Config::parse(&text, &ops.join("colo-mdp3.toml")).unwrap();
        let ch = mdp3(&c).channels();
        assert_eq!(ch.iter().map(|c| (c.id, c.definitions.is_some())).collect::<Vec<_>>(), [(310, true), (311, true)]);
        let l = lines(&c);
        assert_eq!((l.gap_timeout_ms, l.rcvbuf_bytes, l.end_after_idle_ms), (5, 64 << 20, 0));
        let nic = |line: &LineAddr, role| l.line_config(line, role).interface.to_string();
        assert_eq!(
            (nic(&ch[0].a, LineRole::A), nic(&ch[0].b, LineRole::B)),
            ("192.0.2.10".into(), "198.51.100.10".into())
        );
        // The ITCH examples: a file, and live from mdfan-feedsim's MoldUDP64 on loopback.
        let c = Config::load(&ops.join("itch.toml")).unwrap();
        let path = c.feed.path().unwrap();
        assert!(path.ends_with("12302019_SNIPPET.NASDAQ_ITCH50") && path.exists(), "{c:?}");
        let c = Config::load(&ops.join("live-itch.toml")).unwrap();
        let l = mold(&c);
        assert_eq!(
            (c.feed.format_name(), l.retransmit.map(|a| a.to_string())),
            ("itch50", Some("127.0.0.1:26401".into()))
        );
    }

    #[test]
    fn a_symbol_file_path_is_taken_from_the_config_folder() {
        let c = parse(&GOOD.replace("pace = 10", "symbols = \"mdp3-symbols.csv\"")).unwrap();
        assert_eq!(c.feed.symbols(), Some(Path::new("/etc/mdfan/mdp3-symbols.csv")));
        let c = parse(&GOOD.replace("pace = 10", "symbols = \"/srv/symbols.csv\"")).unwrap();
        assert_eq!(c.feed.symbols(), Some(Path::new("/srv/symbols.csv")));
        let e = parse(&GOOD.replace("pace = 10", "symbols = 7")).unwrap_err().to_string();
        assert!(e.contains("line 10: key feed.symbols: "), "{e}");
    }

    #[test]
    fn a_mistyped_key_is_named_with_its_line() {
        let e = parse(&GOOD.replace("pace = 10", "paec = 10")).unwrap_err().to_string();
        assert!(e.starts_with("config /etc/mdfan/publisher.toml: line 10: key feed.paec: unknown field `paec`"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse(&GOOD.replace("pace = 10", "pace = \"fast\"")).unwrap_err().to_string();
        assert!(
            e.contains("line 10: key feed.pace: ") && e.contains("\"max\", \"realtime\" or a speed-up factor"),
            "{e}"
        );
        let e = parse(&GOOD.replace("pace = 10", "pace = -2")).unwrap_err().to_string();
        assert!(e.contains("line 10: key feed.pace: "), "{e}");
        let e = parse(&GOOD.replace("\"dbn\"", "\"csv\"")).unwrap_err().to_string();
        assert!(e.contains("line 8: key feed.format: ") && e.contains("unknown variant `csv`"), "{e}");
        let e = parse(&GOOD.replace("provider = \"shm\"", "provider = \"shm\"\nring_slots_max = 1000"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fabric.ring_slots_max") && e.contains("1000"), "{e}");
        let e = parse(&GOOD.replace("hot_core = 1", "hot_core = \"one\"")).unwrap_err().to_string();
        assert!(e.contains("line 4: key publisher.hot_core: "), "{e}");
        let c = parse(&GOOD.replace("hot_core = 1", "hot_idle = \"yield\"")).unwrap();
        assert_eq!(c.publisher.hot_idle.strategy(), IdleStrategy::SpinThenYield { spins: 1_000 });
        let e = parse(&GOOD.replace("hot_core = 1", "hot_idle = \"sleep\"")).unwrap_err().to_string();
        assert!(e.contains("line 4: key publisher.hot_idle: ") && e.contains("unknown variant `sleep`"), "{e}");
        let e = parse("[feed]\nformat = \"dbn\"\n").unwrap_err().to_string();
        assert!(e.ends_with("line 2: key feed.format: \"dbn\" needs feed.path (the file to replay)"), "{e}");
        let e = parse(&GOOD.replace("hot_core = 1", "max_subscribers = 4611686018427387904")).unwrap_err().to_string();
        assert!(
            e.ends_with("line 4: key publisher.max_subscribers: 4611686018427387904: must be between 1 and 4096"),
            "{e}"
        );
        let e = parse(&GOOD.replace("pace = 10", "pace = 1e-300")).unwrap_err().to_string();
        assert!(e.contains("line 10: key feed.pace: 1e-300: a speed-up factor must be between 0.001"), "{e}");
        let e = parse(&GOOD.replace("hot_core = 1", "policies = []")).unwrap_err().to_string();
        assert!(e.ends_with("line 4: key publisher.policies: empty: no subscriber could ever be accepted"), "{e}");
        let e = parse(&GOOD.replace("hot_core = 1", "stall_timeout_ms = 9223372036854775807")).unwrap_err().to_string();
        assert!(e.contains("line 4: key publisher.stall_timeout_ms: 9223372036854775807: must be between 1"), "{e}");
        let e = parse(&GOOD.replace("provider = \"shm\"", "provider = \"shm\"\nshm_dir = \"/nonexistent\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key fabric.shm_dir: /nonexistent: not a directory"), "{e}");
        assert!(
            e.contains(&format!("line {}: ", GOOD.lines().position(|l| l.starts_with("provider")).unwrap() + 2)),
            "{e}"
        );
        let e = parse(&GOOD.replace("\"127.0.0.1:0\"", "\"nohost\"")).unwrap_err().to_string();
        assert!(e.contains("line 3: key publisher.listen: nohost: ") && e.ends_with("(host:port)"), "{e}");
        // [fabric.verbs] is checked even when the provider is shm and in builds without the verbs feature
        let e = parse(&format!("{GOOD}\n[fabric.verbs]\ndevicee = \"mlx5_0\"\n")).unwrap_err().to_string();
        assert!(e.contains("key fabric.verbs: unknown field `devicee`"), "{e}");
        let e = parse(&format!("{GOOD}\n[fabric.verbs]\ntimeout = 0\n")).unwrap_err().to_string();
        assert!(e.contains("key fabric.verbs: ") && e.contains("timeout 0 waits forever for an ACK"), "{e}");
        let e = parse(&format!("{GOOD}\n[fabric.verbs]\ntimeout = 32\n")).unwrap_err().to_string();
        assert!(e.contains("key fabric.verbs: ") && e.contains("timeout 32 must be 1..=31"), "{e}");
    }
}
