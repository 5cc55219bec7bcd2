//! The control plane: a versioned handshake between subscriber and publisher.
//!
//! Transport: a stream socket (TCP, or the publisher's Unix-domain socket on its own host, over which a shared-memory
//! ring travels as a file descriptor: [`RingGrant::ShmFd`]). Framing: a 4-byte little-endian length, then that many bytes of JSON,
//! at most [`MAX_FRAME_BYTES`]. Each frame is an envelope `{"v": <protocol version>, "msg": {...}}`; the version
//! is read before the message, so a peer speaking another version gets a clear [`Reject`] naming both
//! versions instead of a parse error.
//!
//! The exchange: the subscriber sends [`Subscribe`] (its ring grant and what it wants); the publisher answers
//! [`Accept`] or [`Reject`]. Either side may send [`ControlMsg::Bye`] before closing.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The control protocol version this build speaks. 6: [`Accept`] names the feed ([`Accept::feed`], a
/// [`FeedIdentity`]; a version-5 subscriber would refuse such an accept as malformed). 5: [`Accept`] says which book the records build
/// ([`Accept::book`]: `mbo` or `mbp`). 4: the venue position in every record (`crate::record`). 3: [`Subscribe`] may carry `symbols` and a `token`,
/// [`Accept`] the instruments' `definitions` and the `ts_recv_clock` (a version-2 subscriber would refuse such an
/// accept as malformed, so the version says it first). 2: [`Bye`] carries a typed [`CloseReason`] and a separate
/// detail (1 had one free-text reason).
pub const PROTOCOL_VERSION: u32 = 6;
/// Largest control frame accepted, in bytes (the length prefix excluded): 2 MiB, room for an `Accept` carrying a
/// whole Nasdaq day's Stock Directory (some 9,000 definitions of about 90 bytes).
pub const MAX_FRAME_BYTES: u32 = 2 * 1024 * 1024;

/// Where a subscriber's ring lives and how the publisher may write it: the "grant" of the fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fabric", rename_all = "snake_case", deny_unknown_fields)]
pub enum RingGrant {
    /// Shared memory on the publisher's host: a file (under /dev/shm) holding header, CQ and slots.
    Shm {
        /// Absolute path of the ring file; the publisher maps it read-write.
        path: String,
        /// Slots in the ring (power of two).
        slot_count: u32,
    },
    /// Shared memory on the publisher's host, the ring itself passed as a file descriptor (`SCM_RIGHTS`, unix(7))
    /// in the same `sendmsg` as this frame, over the publisher's Unix-domain control socket: no file name, so
    /// nothing another local user could name or open (a sealed `memfd_create(2)` file on Linux).
    ShmFd {
        /// Slots in the ring (power of two).
        slot_count: u32,
    },
    /// RDMA verbs: an RC QP to connect to and the ring MR to write.
    Verbs {
        /// The subscriber's QP and port address.
        endpoint: VerbsEndpoint,
        /// Virtual address of the first slot in the subscriber's ring MR.
        ring_addr: u64,
        /// rkey of the ring MR (REMOTE_WRITE only).
        ring_rkey: u32,
        /// Slots in the ring (power of two).
        slot_count: u32,
    },
}

impl RingGrant {
    /// Slots in the granted ring.
    pub fn slot_count(&self) -> u32 {
        match self {
            RingGrant::Shm { slot_count, .. }
            | RingGrant::ShmFd { slot_count }
            | RingGrant::Verbs { slot_count, .. } => *slot_count,
        }
    }
}

/// One side of an RC connection (IB vol. 1, 12.7.x "connection establishment": QPN, PSN, port address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerbsEndpoint {
    /// 24-bit QP number.
    pub qpn: u32,
    /// 24-bit initial packet sequence number.
    pub psn: u32,
    /// The port's GID at the chosen index, 16 bytes as 32 hex digits.
    pub gid: String,
    /// LID (0 on RoCE).
    pub lid: u16,
}

/// What the publisher hands back on accept, fabric by fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fabric", rename_all = "snake_case", deny_unknown_fields)]
pub enum AcceptFabric {
    /// Nothing more is needed on shared memory.
    Shm,
    /// The publisher's QP, and where the subscriber writes its consumed seq (credits).
    Verbs {
        /// The publisher's QP and port address.
        endpoint: VerbsEndpoint,
        /// Address of this subscriber's 8-byte credit word in the publisher's credit MR.
        credit_addr: u64,
        /// rkey of that MR (REMOTE_WRITE, this subscriber's word only).
        credit_rkey: u32,
    },
}

/// Subscriber -> publisher: "write my ring".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// Free-form name for logs and counters, at most 64 bytes.
    pub name: String,
    /// instrument_ids wanted; `None` = all (unless `symbols` names some).
    pub instruments: Option<Vec<u32>>,
    /// Symbols wanted (`ESH4`), resolved by the publisher against its symbology into instrument_ids and added
    /// to `instruments`; a symbol it does not know is a [`Reject`] naming it. `None` (the default, not sent) =
    /// none named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<Vec<String>>,
    /// The ring.
    pub ring: RingGrant,
    /// What the publisher does when this subscriber's ring is full. Default `disconnect`.
    #[serde(default)]
    pub policy: SlowConsumerPolicy,
    /// Whether to start with a snapshot of the current books when joining mid-stream. Default true.
    #[serde(default = "yes")]
    pub snapshot: bool,
    /// The subscriber's token, for a publisher that authenticates its subscribers (its `[access]` config);
    /// compared in constant time. Sent in clear on the control connection: keep that on a trusted network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl Subscribe {
    /// A subscription named `name` for `ring` with the defaults a client that sends no other field gets: every
    /// instrument, [`SlowConsumerPolicy::Disconnect`], a snapshot on joining, no token.
    pub fn new(name: impl Into<String>, ring: RingGrant) -> Subscribe {
        Subscribe {
            name: name.into(),
            instruments: None,
            symbols: None,
            ring,
            policy: SlowConsumerPolicy::default(),
            snapshot: true,
            token: None,
        }
    }
}

fn yes() -> bool {
    true
}

/// What the publisher does when a subscriber's ring is full (README, "Slow subscribers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowConsumerPolicy {
    /// Drop the subscriber and say why (`ring_full`).
    #[default]
    Disconnect,
    /// Skip records for it while its ring is full; it sees the gap through seq, asks for a snapshot, rebuilds.
    Resync,
    /// Wait for it (lossless; slows the publisher for every subscriber). Only where the publisher allows it.
    Block,
}

impl SlowConsumerPolicy {
    /// The config / wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SlowConsumerPolicy::Disconnect => "disconnect",
            SlowConsumerPolicy::Resync => "resync",
            SlowConsumerPolicy::Block => "block",
        }
    }
}

/// Subscriber -> publisher: send me the current books (after a gap), then the live stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// The seq of the first record the subscriber missed (for the publisher's log).
    pub gap_from_seq: u64,
}

/// Publisher -> subscriber: the ring is attached; records start at `first_seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accept {
    /// The publisher's id for this subscriber (its session).
    pub session_id: u64,
    /// The seq of the first record this subscriber will receive (1).
    pub first_seq: u64,
    /// Fabric-specific reply.
    pub fabric: AcceptFabric,
    /// The policy the publisher applies to this subscriber.
    pub policy: SlowConsumerPolicy,
    /// The publisher sends a heartbeat record when the feed is idle this long, in ms.
    pub heartbeat_interval_ms: u64,
    /// The definitions (symbol, display factor, tick size) of the instruments this subscriber gets that the
    /// publisher knows (all it knows when the subscriber filters nothing). Empty (the default, not sent) when
    /// it knows none. See [`crate::symbology`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub definitions: Vec<crate::symbology::InstrumentDef>,
    /// Whether the records' `ts_recv_ns` is a live receive stamp of this host, and from which clock: what a
    /// subscriber needs to measure wire-to-poll (datagram receipt to its poll). `none` (a file replay, whose
    /// `ts_recv_ns` is the historical capture time, or a publisher that predates the field) is left out of the
    /// JSON, so such an `Accept` reads the same as before.
    #[serde(default, skip_serializing_if = "TsRecvClock::is_none")]
    pub ts_recv_clock: TsRecvClock,
    /// Which book the records build, so a strategy can pick its book type at run time. Left out of the JSON
    /// when [`BookKind::Unknown`].
    #[serde(default, skip_serializing_if = "BookKind::is_unknown")]
    pub book: BookKind,
    /// What the feed is (format, venue, channel): what a recorder writes in its capture's header. Left out of
    /// the JSON when not known.
    #[serde(default, skip_serializing_if = "FeedIdentity::is_unknown")]
    pub feed: FeedIdentity,
}

/// What a publisher's feed is ([`Accept::feed`]): the format it decodes, the venue's dataset when known, and the
/// channel within it. An empty string is not known; a relay passes its upstream's on, and a capture's replay
/// the captured feed's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedIdentity {
    /// The format the publisher decodes: `dbn`, `mdp3`, `itch5`, `moldudp64`, `lobster`, `capture` (a capture
    /// that kept no identity).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub format: String,
    /// The venue's dataset in Databento's naming (`GLBX.MDP3`, from a DBN file's metadata or for CME MDP 3.0),
    /// when the feed says it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub venue: String,
    /// The channel: MDP 3.0's channel ids, a MoldUDP64 feed's line A (`line_a=ADDR`), a file's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
}

impl FeedIdentity {
    /// An identity of `format`, `venue` and `channel`.
    pub fn new(format: impl Into<String>, venue: impl Into<String>, channel: impl Into<String>) -> FeedIdentity {
        FeedIdentity { format: format.into(), venue: venue.into(), channel: channel.into() }
    }

    /// Nothing known.
    pub fn is_unknown(&self) -> bool {
        self.format.is_empty() && self.venue.is_empty() && self.channel.is_empty()
    }
}

impl std::fmt::Display for FeedIdentity {
    /// `format=.. venue=.. channel=..` (`-` for what is not known).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &str| if s.is_empty() { "-".to_owned() } else { s.replace(' ', "_") };
        write!(f, "format={} venue={} channel={}", or(&self.format), or(&self.venue), or(&self.channel))
    }
}

/// Which book a feed's records build ([`Accept::book`]): what a strategy keeps for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BookKind {
    /// Not said: tell by the records (price-level records carry `flags::MBP`).
    #[default]
    Unknown,
    /// Market by order: `Add`, `Cancel`, `Modify`, `Fill`, `Trade` keyed by `order_id` (DBN MBO, ITCH 5.0).
    /// Keep [`crate::Books`] (or [`crate::HotBooks`]).
    Mbo,
    /// Market by price: `LevelNew`, `LevelChange`, `LevelDelete` at a `level`, flagged `MBP` (CME MDP 3.0,
    /// LOBSTER). Keep [`crate::MbpBooks`].
    Mbp,
}

impl BookKind {
    /// The wire name (`unknown`, `mbo`, `mbp`).
    pub fn as_str(self) -> &'static str {
        match self {
            BookKind::Unknown => "unknown",
            BookKind::Mbo => "mbo",
            BookKind::Mbp => "mbp",
        }
    }

    /// Not said (serde's `skip_serializing_if`).
    pub fn is_unknown(&self) -> bool {
        *self == BookKind::Unknown
    }
}

/// Where the records' `ts_recv_ns` comes from ([`Accept::ts_recv_clock`]). Every live variant is ns since the
/// UNIX epoch, stamped on this publisher's host when the datagram was received (`SO_TIMESTAMPING`, the
/// `mdfan-lines` `StampKind` of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TsRecvClock {
    /// Not a live stamp: a file replay (`ts_recv_ns` is when the capture was recorded, years ago). No
    /// wire-to-poll can be measured.
    #[default]
    None,
    /// The kernel's software stamp (`CLOCK_REALTIME` when the datagram entered the stack).
    Software,
    /// The NIC's raw hardware stamp (its PTP hardware clock): comparable with `CLOCK_REALTIME` only when that
    /// clock is disciplined to the host's (e.g. `phc2sys`); a PHC kept on TAI reads 37 s ahead of UTC.
    Hardware,
    /// No kernel stamp came: `CLOCK_REALTIME` read by the feed handler right after `recvmsg`.
    User,
}

impl TsRecvClock {
    /// The wire name (`none`, `software`, `hardware`, `user`).
    pub fn as_str(self) -> &'static str {
        match self {
            TsRecvClock::None => "none",
            TsRecvClock::Software => "software",
            TsRecvClock::Hardware => "hardware",
            TsRecvClock::User => "user",
        }
    }

    /// `None`: not a live receive stamp (serde's `skip_serializing_if`).
    pub fn is_none(&self) -> bool {
        *self == TsRecvClock::None
    }

    /// A live receive stamp: wire-to-poll can be measured against `CLOCK_REALTIME`.
    pub fn is_live(self) -> bool {
        !self.is_none()
    }
}

/// Publisher -> subscriber: refused, with a reason an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reject {
    /// Why, in one line.
    pub reason: String,
    /// The protocol version the publisher speaks.
    pub publisher_version: u32,
}

/// Every control message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlMsg {
    /// See [`Subscribe`].
    Subscribe(Subscribe),
    /// See [`Accept`].
    Accept(Accept),
    /// See [`Reject`].
    Reject(Reject),
    /// See [`SnapshotRequest`].
    SnapshotRequest(SnapshotRequest),
    /// See [`Bye`].
    Bye(Bye),
}

impl ControlMsg {
    /// The message's type as it is spelt on the wire (`subscribe`, `accept`, `reject`, `snapshot_request`,
    /// `bye`), for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            ControlMsg::Subscribe(_) => "subscribe",
            ControlMsg::Accept(_) => "accept",
            ControlMsg::Reject(_) => "reject",
            ControlMsg::SnapshotRequest(_) => "snapshot_request",
            ControlMsg::Bye(_) => "bye",
        }
    }
}

/// Either side -> the other: an orderly close, and why. The publisher sends one for every session it ends (on
/// verbs the ring cannot carry the reason, so this is the only place a subscriber learns it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bye {
    /// Why, typed: what a program acts on (exit codes, reconnect or not).
    pub reason: CloseReason,
    /// What a person reads: the failure named (a `ibv_wc_status`, a control message kind). Empty when the
    /// reason says it all.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Bye {
    /// A bye with no detail.
    pub fn new(reason: CloseReason) -> Bye {
        Bye { reason, detail: String::new() }
    }
}

/// Why a session ended, as both sides name it: stored as a `u32` in a shared-memory ring's header, and sent
/// in a [`Bye`] by name ([`CloseReason::as_str`]).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The stream ended normally (an end-of-stream record was sent first).
    EndOfStream = 1,
    /// The receiver fell a whole ring behind and was dropped (slow-consumer policy `disconnect`).
    RingFull = 2,
    /// The publisher shut down (SIGINT/SIGTERM).
    #[serde(rename = "publisher_shutdown")]
    Shutdown = 3,
    /// The publisher dropped this receiver for a fabric error.
    FabricError = 4,
    /// The receiver released nothing for longer than the publisher's stall timeout while its ring was full, or
    /// was still catching up (a snapshot, the records after it) a stall timeout after the feed ended: it did not
    /// get the whole stream.
    Stalled = 5,
    /// The receiver's control connection closed (it died or left).
    PeerGone = 6,
    /// The peer sent a control message the protocol does not allow at that point.
    ProtocolError = 7,
    /// The publisher's feed failed (a truncated or corrupt file, a broken feed connection): the stream ended
    /// after the last record the feed delivered, and it is not complete. The publisher logs the feed's error
    /// (file, byte offset, record) and exits non-zero.
    FeedError = 8,
}

impl CloseReason {
    /// Decodes the stored word; `None` for 0 (not closed) or an unknown value.
    pub fn from_u32(v: u32) -> Option<CloseReason> {
        Some(match v {
            1 => CloseReason::EndOfStream,
            2 => CloseReason::RingFull,
            3 => CloseReason::Shutdown,
            4 => CloseReason::FabricError,
            5 => CloseReason::Stalled,
            6 => CloseReason::PeerGone,
            7 => CloseReason::ProtocolError,
            8 => CloseReason::FeedError,
            _ => return None,
        })
    }

    /// Lower-case name for logs, summaries and the wire (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::EndOfStream => "end_of_stream",
            CloseReason::RingFull => "ring_full",
            CloseReason::Shutdown => "publisher_shutdown",
            CloseReason::FabricError => "fabric_error",
            CloseReason::Stalled => "stalled",
            CloseReason::PeerGone => "peer_gone",
            CloseReason::ProtocolError => "protocol_error",
            CloseReason::FeedError => "feed_error",
        }
    }
}

/// Why a control frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket failed or closed mid-frame.
    #[error("control frame truncated or socket failed: {0}")]
    Io(#[from] io::Error),
    /// The peer closed cleanly before a frame began.
    #[error("control peer closed the connection")]
    Closed,
    /// The length prefix is over [`MAX_FRAME_BYTES`].
    #[error("control frame length {0} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u32),
    /// The length prefix is over the limit the reader set for this kind of frame ([`take_frame_limited`]).
    #[error("control frame length {len} bytes exceeds the {limit}-byte limit for a {what} frame")]
    OverLimit {
        /// The length the prefix announced.
        len: u32,
        /// The reader's limit.
        limit: u32,
        /// What the reader expected there (`subscribe`, `snapshot_request or bye`).
        what: &'static str,
    },
    /// The frame is not a JSON envelope `{"v": N, "msg": ...}`.
    #[error("control frame is malformed: {0}")]
    Malformed(String),
    /// No whole frame arrived within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The peer speaks another protocol version.
    #[error("control protocol version {got} is not supported (this build speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version the peer sent.
        got: u64,
    },
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    v: u32,
    msg: &'a ControlMsg,
}

/// Encodes one message as a frame (length prefix + envelope).
pub fn encode(msg: &ControlMsg) -> Vec<u8> {
    let body =
        serde_json::to_vec(&EnvelopeOut { v: PROTOCOL_VERSION, msg }).expect("control messages always serialise");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Decodes one frame body (without its length prefix): version first, then the message.
///
/// # Errors
/// [`ControlError::Malformed`] for anything that is not an envelope of a known message,
/// [`ControlError::Version`] for another protocol version.
pub fn decode_body(body: &[u8]) -> Result<ControlMsg, ControlError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ControlError::Malformed(format!("not JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| ControlError::Malformed("envelope is not an object".into()))?;
    let v = obj.get("v").and_then(|v| v.as_u64()).ok_or_else(|| {
        ControlError::Malformed("envelope field `v` (protocol version) missing or not a number".into())
    })?;
    if v != PROTOCOL_VERSION as u64 {
        return Err(ControlError::Version { got: v });
    }
    let msg = obj.get("msg").ok_or_else(|| ControlError::Malformed("envelope field `msg` missing".into()))?;
    serde_json::from_value(msg.clone()).map_err(|e| ControlError::Malformed(format!("field `msg`: {e}")))
}

/// Takes one whole frame off the front of `buf` (bytes read so far from a non-blocking socket), if there is one:
/// the sans-IO frame reader both ends use. `None`: the frame is not complete yet. `Some(Err(..))` for a frame
/// that cannot be used ([`ControlError::TooLarge`]: `buf` is left as it is, the stream cannot be resynchronised;
/// otherwise the frame is consumed).
pub fn take_frame(buf: &mut Vec<u8>) -> Option<Result<ControlMsg, ControlError>> {
    take_frame_limited(buf, MAX_FRAME_BYTES, "control")
}

/// The length a frame's 4-byte prefix announces, once 4 bytes are there.
pub fn frame_length(buf: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(..4)?.try_into().expect("4 bytes")))
}

/// [`take_frame`] with a smaller limit than [`MAX_FRAME_BYTES`] for what the reader expects there (`what`, named
/// in the error): a publisher reads a subscriber's frames with limits sized to a `Subscribe` and to a
/// `SnapshotRequest`, so a peer cannot make it buffer megabytes per connection. A length over it is
/// [`ControlError::OverLimit`] (`buf` left as it is: the stream cannot be resynchronised), known from the
/// 4-byte prefix alone, before the body is read.
pub fn take_frame_limited(
    buf: &mut Vec<u8>,
    limit: u32,
    what: &'static str,
) -> Option<Result<ControlMsg, ControlError>> {
    let len = frame_length(buf)?;
    if len > MAX_FRAME_BYTES {
        return Some(Err(ControlError::TooLarge(len)));
    }
    if len > limit {
        return Some(Err(ControlError::OverLimit { len, limit, what }));
    }
    let end = 4 + len as usize;
    if buf.len() < end {
        return None;
    }
    let msg = decode_body(&buf[4..end]);
    buf.drain(..end);
    Some(msg)
}

/// Writes one message as a frame.
pub fn write_msg(w: &mut impl Write, msg: &ControlMsg) -> io::Result<()> {
    w.write_all(&encode(msg))?;
    w.flush()
}

/// Reads one frame from a socket within `timeout` in all (not per read: a peer that drips one byte at a time
/// cannot hold the reader longer). The socket's read timeout is changed while it reads. Once the time is up it
/// still takes what has already arrived (a read that waits at most 1 µs), so a reader that was held up (stopped
/// with SIGSTOP, whose blocking read then returns EINTR, or descheduled) past the deadline reads a frame that
/// came in time instead of reporting no answer.
///
/// # Errors
/// [`ControlError::Timeout`] when the frame is not complete in time, and as [`read_msg`].
pub fn read_msg_within<S: TimedStream>(
    stream: &mut S,
    timeout: std::time::Duration,
) -> Result<ControlMsg, ControlError> {
    struct Deadline<'a, S> {
        stream: &'a mut S,
        deadline: std::time::Instant,
    }
    impl<S: TimedStream> Read for Deadline<'_, S> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let left = self.deadline.saturating_duration_since(std::time::Instant::now());
            // past the deadline: only what is already there (the smallest SO_RCVTIMEO, 1 µs)
            self.stream.set_read_timeout(Some(left.max(std::time::Duration::from_nanos(1))))?;
            match self.stream.read(buf) {
                // a stop signal ends a read with a timeout in EINTR; past the deadline that is the end
                Err(e) if left.is_zero() && e.kind() == io::ErrorKind::Interrupted => {
                    Err(io::ErrorKind::TimedOut.into())
                }
                other => other,
            }
        }
    }
    let mut r = Deadline { stream, deadline: std::time::Instant::now() + timeout };
    match read_msg(&mut r) {
        Err(ControlError::Io(e)) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            Err(ControlError::Timeout(timeout))
        }
        other => other,
    }
}

/// A stream socket a control frame can be read from under a deadline ([`read_msg_within`]): TCP or Unix-domain.
pub trait TimedStream: Read {
    /// `SO_RCVTIMEO`, as the std sockets set it.
    ///
    /// # Errors
    /// As the socket's own `set_read_timeout`.
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()>;
}

impl TimedStream for std::net::TcpStream {
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, timeout)
    }
}

impl TimedStream for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
}

/// Reads one frame and decodes it. Blocks per the reader's own timeout settings.
///
/// # Errors
/// [`ControlError::Closed`] on a clean close before the frame, [`ControlError::Io`] on a close or error inside
/// it, [`ControlError::TooLarge`] for an absurd length (nothing more is read), and [`decode_body`]'s errors.
pub fn read_msg(r: &mut impl Read) -> Result<ControlMsg, ControlError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Err(ControlError::Closed),
            Ok(0) => return Err(ControlError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(ControlError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    decode_body(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscribe() -> ControlMsg {
        ControlMsg::Subscribe(Subscribe {
            name: "strat-a".into(),
            instruments: Some(vec![17077]),
            symbols: None,
            ring: RingGrant::Shm { path: "/dev/shm/mdfan-1".into(), slot_count: 131_072 },
            policy: SlowConsumerPolicy::Resync,
            snapshot: true,
            token: None,
        })
    }

    fn accept(definitions: Vec<crate::symbology::InstrumentDef>) -> ControlMsg {
        ControlMsg::Accept(Accept {
            session_id: 7,
            first_seq: 1,
            fabric: AcceptFabric::Shm,
            policy: SlowConsumerPolicy::Resync,
            heartbeat_interval_ms: 10,
            definitions,
            ts_recv_clock: TsRecvClock::None,
            book: BookKind::Unknown,
            feed: FeedIdentity::default(),
        })
    }

    #[test]
    fn symbols_and_definitions_round_trip_and_are_left_out_when_absent() {
        use crate::symbology::InstrumentDef;
        // Absent: the frames are the ones a peer without symbology sends and expects.
        let plain = std::str::from_utf8(&encode(&subscribe())[4..]).unwrap().to_owned();
        assert!(!plain.contains("symbols"), "{plain}");
        let body = std::str::from_utf8(&encode(&accept(vec![]))[4..]).unwrap().to_owned();
        assert_eq!(
            body,
            r#"{"v":6,"msg":{"type":"accept","session_id":7,"first_seq":1,"fabric":{"fabric":"shm"},"policy":"resync","heartbeat_interval_ms":10}}"#
        );
        assert_eq!(decode_body(body.as_bytes()).unwrap(), accept(vec![]));
        // Present.
        let ControlMsg::Subscribe(mut sub) = subscribe() else { unreachable!() };
        sub.symbols = Some(vec!["ESH4".into(), "6CZ6".into()]);
        let msg = ControlMsg::Subscribe(sub);
        let frame = encode(&msg);
        assert!(std::str::from_utf8(&frame[4..]).unwrap().contains(r#""symbols":["ESH4","6CZ6"]"#));
        assert_eq!(read_msg(&mut &frame[..]).unwrap(), msg);
        let six_c = InstrumentDef {
            display_factor_e9: 100_000,
            tick_size_e9: 500_000_000,
            ..InstrumentDef::new(174969, "6CZ6")
        };
        let msg = accept(vec![InstrumentDef::new(17077, "ESH4"), six_c.clone()]);
        let frame = encode(&msg);
        assert!(std::str::from_utf8(&frame[4..]).unwrap().contains(
            r#""definitions":[{"instrument_id":17077,"symbol":"ESH4","display_factor_e9":1000000000,"tick_size_e9":0},{"instrument_id":174969,"symbol":"6CZ6","display_factor_e9":100000,"tick_size_e9":500000000}]"#
        ));
        assert_eq!(read_msg(&mut &frame[..]).unwrap(), msg);
        // A definition with only id and symbol takes the defaults (display factor 1, tick unknown).
        let short = br#"{"v":6,"msg":{"type":"accept","session_id":7,"first_seq":1,"fabric":{"fabric":"shm"},"policy":"resync","heartbeat_interval_ms":10,"definitions":[{"instrument_id":17077,"symbol":"ESH4"}]}}"#;
        assert_eq!(decode_body(short).unwrap(), accept(vec![InstrumentDef::new(17077, "ESH4")]));
        let bad = br#"{"v":6,"msg":{"type":"subscribe","name":"a","instruments":null,"symbols":[17077],"ring":{"fabric":"shm","path":"/p","slot_count":8}}}"#;
        let e = decode_body(bad).unwrap_err().to_string();
        assert!(e.contains("invalid type: integer `17077`, expected a string"), "{e}");
    }

    /// A reader held up past its deadline (SIGSTOP, then SIGCONT: the blocking read returns EINTR) still takes a
    /// frame that had arrived; here the time allowed is zero, so the deadline has passed before the first read.
    /// Before, it answered `no answer within 0ns` with the accept sitting in the socket.
    #[test]
    #[cfg_attr(miri, ignore = "sockets with read timeouts")]
    fn a_frame_that_already_arrived_is_read_after_the_deadline() {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        let msg = accept(vec![]);
        let frame = encode(&msg);
        writer.write_all(&frame).unwrap();
        let mut seen = vec![0u8; frame.len()];
        while reader.peek(&mut seen).unwrap() < frame.len() {} // the whole frame is in the socket
        assert_eq!(read_msg_within(&mut reader, std::time::Duration::ZERO).unwrap(), msg);
        // Nothing there: the deadline still ends the wait.
        let e = read_msg_within(&mut reader, std::time::Duration::ZERO).unwrap_err();
        assert_eq!(e.to_string(), "no answer within 0ns");
    }

    #[test]
    fn messages_round_trip_through_frames() {
        let msg = subscribe();
        let frame = encode(&msg);
        assert_eq!(u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize, frame.len() - 4);
        assert_eq!(read_msg(&mut &frame[..]).unwrap(), msg);
    }

    #[test]
    fn a_bye_carries_a_typed_reason_and_its_detail_apart() {
        let bye = ControlMsg::Bye(Bye {
            reason: CloseReason::FabricError,
            detail: "the subscriber's QP never connected".into(),
        });
        let frame = encode(&bye);
        assert_eq!(
            std::str::from_utf8(&frame[4..]).unwrap(),
            r#"{"v":6,"msg":{"type":"bye","reason":"fabric_error","detail":"the subscriber's QP never connected"}}"#
        );
        assert_eq!(read_msg(&mut &frame[..]).unwrap(), bye);
        let shutdown = decode_body(br#"{"v":6,"msg":{"type":"bye","reason":"publisher_shutdown"}}"#).unwrap();
        assert_eq!(shutdown, ControlMsg::Bye(Bye::new(CloseReason::Shutdown)));
        assert_eq!(shutdown.kind(), "bye");
        // a free-text reason (protocol 1) is not a reason any more
        let e = decode_body(br#"{"v":6,"msg":{"type":"bye","reason":"ring_full: behind"}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `ring_full: behind`"), "{e}");
        for v in 1..=8 {
            let r = CloseReason::from_u32(v).unwrap();
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{}\"", r.as_str()));
        }
        assert_eq!(CloseReason::from_u32(8), Some(CloseReason::FeedError));
        assert_eq!(CloseReason::FeedError.as_str(), "feed_error");
        assert_eq!(CloseReason::from_u32(9), None);
    }

    #[test]
    fn take_frame_waits_for_a_whole_frame_and_takes_one_at_a_time() {
        let mut buf = encode(&subscribe());
        buf.extend_from_slice(&encode(&ControlMsg::Bye(Bye::new(CloseReason::PeerGone))));
        let whole = buf.len();
        let mut partial = buf[..whole - 1].to_vec();
        assert_eq!(take_frame(&mut partial).unwrap().unwrap(), subscribe());
        assert!(take_frame(&mut partial).is_none(), "the bye lacks its last byte");
        assert_eq!(take_frame(&mut buf).unwrap().unwrap().kind(), "subscribe");
        assert_eq!(take_frame(&mut buf).unwrap().unwrap(), ControlMsg::Bye(Bye::new(CloseReason::PeerGone)));
        assert!(buf.is_empty() && take_frame(&mut buf).is_none());
        let mut huge = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        assert!(matches!(take_frame(&mut huge), Some(Err(ControlError::TooLarge(_)))));
        assert_eq!(huge.len(), 4, "an oversized frame is left in place");
    }

    fn accept_clocked(ts_recv_clock: TsRecvClock) -> ControlMsg {
        ControlMsg::Accept(Accept {
            session_id: 3,
            first_seq: 1,
            fabric: AcceptFabric::Shm,
            policy: SlowConsumerPolicy::Resync,
            heartbeat_interval_ms: 10,
            definitions: Vec::new(),
            ts_recv_clock,
            book: BookKind::Unknown,
            feed: FeedIdentity::default(),
        })
    }

    #[test]
    fn an_accept_says_which_book_the_records_build_and_one_that_does_not_reads_as_unknown() {
        let ControlMsg::Accept(plain) = accept_clocked(TsRecvClock::None) else { unreachable!() };
        for (book, name) in [(BookKind::Mbo, "mbo"), (BookKind::Mbp, "mbp")] {
            let frame = encode(&ControlMsg::Accept(Accept { book, ..plain.clone() }));
            let text = std::str::from_utf8(&frame[4..]).unwrap();
            assert!(text.ends_with(&format!(r#""heartbeat_interval_ms":10,"book":"{name}"}}}}"#)), "{text}");
            assert_eq!(read_msg(&mut &frame[..]).unwrap(), ControlMsg::Accept(Accept { book, ..plain.clone() }));
            assert_eq!(book.as_str(), name);
        }
        let bad = br#"{"v":6,"msg":{"type":"accept","session_id":3,"first_seq":1,"fabric":{"fabric":"shm"},"policy":"resync","heartbeat_interval_ms":10,"book":"mbx"}}"#;
        assert!(matches!(decode_body(bad), Err(ControlError::Malformed(_))));
    }

    /// The feed's identity rides on the accept, its unknown parts left out; an accept without it (a publisher
    /// that does not know) reads as unknown.
    #[test]
    fn an_accept_names_the_feed_and_leaves_out_what_it_does_not_know() {
        let ControlMsg::Accept(plain) = accept_clocked(TsRecvClock::None) else { unreachable!() };
        assert!(!std::str::from_utf8(&encode(&ControlMsg::Accept(plain.clone()))[4..]).unwrap().contains("feed"));
        let feed = FeedIdentity::new("mdp3", "GLBX.MDP3", "310");
        let frame = encode(&ControlMsg::Accept(Accept { feed: feed.clone(), ..plain.clone() }));
        let text = std::str::from_utf8(&frame[4..]).unwrap();
        assert!(text.ends_with(r#""feed":{"format":"mdp3","venue":"GLBX.MDP3","channel":"310"}}}"#), "{text}");
        let ControlMsg::Accept(back) = read_msg(&mut &frame[..]).unwrap() else { unreachable!() };
        assert_eq!(back.feed, feed);
        assert_eq!(back.feed.to_string(), "format=mdp3 venue=GLBX.MDP3 channel=310");
        let itch = FeedIdentity::new("itch5", "", "12302019_first1000.itch");
        let frame = encode(&ControlMsg::Accept(Accept { feed: itch.clone(), ..plain.clone() }));
        assert!(std::str::from_utf8(&frame[4..])
            .unwrap()
            .ends_with(r#""feed":{"format":"itch5","channel":"12302019_first1000.itch"}}}"#));
        assert_eq!(itch.to_string(), "format=itch5 venue=- channel=12302019_first1000.itch");
    }

    #[test]
    fn an_accept_says_which_clock_stamped_ts_recv_and_a_replay_reads_as_before() {
        let before = r#"{"v":6,"msg":{"type":"accept","session_id":3,"first_seq":1,"fabric":{"fabric":"shm"},"policy":"resync","heartbeat_interval_ms":10}}"#;
        // a replay's accept is byte for byte what a publisher without the field sent, and that one parses as a replay
        let replay = encode(&accept_clocked(TsRecvClock::None));
        assert_eq!(std::str::from_utf8(&replay[4..]).unwrap(), before);
        assert_eq!(decode_body(before.as_bytes()).unwrap(), accept_clocked(TsRecvClock::None));
        for (clock, name) in
            [(TsRecvClock::Software, "software"), (TsRecvClock::Hardware, "hardware"), (TsRecvClock::User, "user")]
        {
            let frame = encode(&accept_clocked(clock));
            let text = std::str::from_utf8(&frame[4..]).unwrap();
            assert!(text.ends_with(&format!(r#""heartbeat_interval_ms":10,"ts_recv_clock":"{name}"}}}}"#)), "{text}");
            assert_eq!(read_msg(&mut &frame[..]).unwrap(), accept_clocked(clock));
            assert_eq!(clock.as_str(), name);
            assert!(clock.is_live());
        }
        assert!(!TsRecvClock::None.is_live());
        let e = decode_body(before.replace("10}", r#"10,"ts_recv_clock":"ptp"}"#).as_bytes()).unwrap_err();
        assert!(e.to_string().contains("unknown variant `ptp`"), "{e}");
    }

    #[test]
    fn another_version_is_refused_by_number() {
        let body = br#"{"v":0,"msg":{"type":"bye","reason":"x"}}"#;
        match decode_body(body) {
            Err(ControlError::Version { got: 0 }) => {}
            other => panic!("expected a version error, got {other:?}"),
        }
    }

    #[test]
    fn truncated_absurd_and_garbage_frames_are_errors() {
        let frame = encode(&subscribe());
        assert!(matches!(read_msg(&mut &frame[..frame.len() - 3]), Err(ControlError::Io(_))));
        assert!(matches!(read_msg(&mut &frame[..2]), Err(ControlError::Io(_))));
        assert!(matches!(read_msg(&mut &[][..]), Err(ControlError::Closed)));
        let huge = (MAX_FRAME_BYTES + 1).to_le_bytes();
        assert!(matches!(read_msg(&mut &huge[..]), Err(ControlError::TooLarge(n)) if n == MAX_FRAME_BYTES + 1));
        assert!(matches!(decode_body(b"\x00\xffgarbage"), Err(ControlError::Malformed(_))));
        assert!(matches!(decode_body(br#"{"v":6,"msg":{"type":"launch"}}"#), Err(ControlError::Malformed(_))));
        assert!(matches!(decode_body(br#"{"msg":{}}"#), Err(ControlError::Malformed(m)) if m.contains("`v`")));
    }
}
