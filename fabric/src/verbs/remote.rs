//! The publisher's side: [`VerbsPublisher`] (the device every session hangs from) and [`VerbsRemoteRing`] (one
//! subscriber's ring; implements [`RemoteRing`]).
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mdfan_wire::control::{AcceptFabric, RingGrant, VerbsEndpoint};
use mdfan_wire::ring::{check_slot_count, seq_from_imm, RECORD_SIZE_BYTES};
use mdfan_wire::BookUpdate;

use super::ffi::{
    self, Access, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, RdmaWrite, Wc, WriteBatch, POLL_BATCH,
};
use super::status::CLOSED;
use super::timestamp::{NicClock, NicRealtime, RtPair};
use super::{parse_endpoint, random_psn, VerbsConfig, VerbsDevice};
use crate::send_stamps::SendStampLog;
use crate::{CloseReason, FabricError, PostError, Provider, RemoteRing, SendStamp};

/// What the credit word holds until the subscriber's first credit write lands: no seq can be this large.
const NOT_CONNECTED: u64 = u64::MAX;
/// Receive WRs on a publisher QP: it receives nothing (credits are plain WRITEs, which consume no receive WR), but
/// some providers refuse a receive queue of 0.
const PUBLISHER_RECV_DEPTH: u32 = 1;

/// The publisher's verbs endpoint: the opened device from which one [`VerbsRemoteRing`] per subscriber is made.
///
/// Each ring gets its own PD, send CQ, QP, staging slots and credit word (an 8-byte MR of its own): a subscriber's
/// QP reaches only MRs of its PD, so it can write its own credit word and nothing else; a CQ per QP means a QP in
/// ERR floods only its own CQ and a ring's completions are reaped without looking at other sessions' (the price:
/// one poll per ring, which the fan-out loop does anyway).
#[derive(Debug, Clone)]
pub struct VerbsPublisher {
    device: VerbsDevice,
    /// The last NIC/realtime pair sampled ([`VerbsPublisher::nic_realtime`]).
    last_rt_pair: Option<RtPair>,
}

impl VerbsPublisher {
    /// A publisher on an opened device.
    pub fn new(device: VerbsDevice) -> VerbsPublisher {
        VerbsPublisher { device, last_rt_pair: None }
    }

    /// Opens the device `cfg` names (see [`VerbsDevice::open`]).
    ///
    /// # Errors
    /// As [`VerbsDevice::open`].
    pub fn open(cfg: &VerbsConfig) -> Result<VerbsPublisher, FabricError> {
        VerbsDevice::open(cfg).map(VerbsPublisher::new)
    }

    /// The device.
    pub fn device(&self) -> &VerbsDevice {
        &self.device
    }

    /// Samples a pair with `ibv_query_rt_values_ex` ([`ffi::Context::query_rt_pair`]) and fits it with the
    /// previous one ([`NicRealtime::from_pairs`]; the first alone at the nominal rate): the mapping of the send
    /// completions' NIC timestamps onto `CLOCK_REALTIME`, for every ring of this device. `None` without a NIC
    /// clock, or when the device cannot read it (logged at debug level). Control path: the publisher's conductor
    /// calls it at a session's start and about once a second.
    pub fn nic_realtime(&mut self) -> Option<NicRealtime> {
        let clock = self.device.nic_clock()?;
        self.device.sample_nic_realtime(clock, &mut self.last_rt_pair)
    }

    /// Attaches to the ring a subscriber granted (`Subscribe.ring`): creates the session's PD, send CQ
    /// (`send_queue_depth` entries; extended with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` when the device has a NIC
    /// clock and `cq_api` allows it, else classic), RC QP (asking for 64 bytes of inline data), `send_queue_depth`
    /// staging slots and its credit word (8 bytes, REMOTE_WRITE), and moves the QP RESET -> INIT -> RTR -> RTS
    /// against the grant's endpoint. Returns the ring and the `Accept.fabric` to send back.
    ///
    /// Memory per subscriber: `send_queue_depth * 64` bytes of staging plus one page for the credit word, plus
    /// the provider's queues; with send completion timestamps, `send_queue_depth * 16` bytes of post times and
    /// 1 KiB of stamps ([`SendStampLog`]).
    ///
    /// # Errors
    /// [`FabricError::Mismatch`] for a non-verbs grant; [`FabricError::BadRing`] for a grant whose slot count,
    /// ring address or endpoint is malformed; [`FabricError::Verbs`] for a failed verb (a bad GID or an
    /// unreachable peer shows at RTR).
    pub fn attach(&self, grant: &RingGrant) -> Result<(VerbsRemoteRing, AcceptFabric), FabricError> {
        let RingGrant::Verbs { endpoint, ring_addr, ring_rkey, slot_count } = grant else {
            return Err(FabricError::Mismatch { offered: Provider::Shm, what: "ring", served: Provider::Verbs });
        };
        let whose = format!("subscriber qpn {:#x}", endpoint.qpn);
        let bad = |detail: String| FabricError::BadRing { path: format!("verbs ring of {whose}"), detail };
        let slot_count = check_slot_count(*slot_count as u64).map_err(|e| bad(e.to_string()))?;
        let ring_bytes = slot_count as u64 * RECORD_SIZE_BYTES as u64;
        if ring_addr % RECORD_SIZE_BYTES as u64 != 0 || ring_addr.checked_add(ring_bytes).is_none() {
            return Err(bad(format!("ring_addr {ring_addr:#x} is not a 64-byte aligned ring of {ring_bytes} bytes")));
        }
        let remote = parse_endpoint(endpoint, &whose)?;
        let device = &self.device;
        let cfg = device.config();
        let sq_depth = cfg.send_queue_depth.min(device.caps().max_qp_wr.max(1));
        let pd = ProtectionDomain::alloc(device.context())?;
        // At most `sq_depth` WRs are outstanding and only signalled ones (or flushes of outstanding ones) make
        // CQEs, so `sq_depth` entries can never overflow. With timestamps when the device has a clock (falling
        // back to a classic CQ when the provider refuses them, per `cq_api`): post-to-send-completion, clock=nic.
        let cq = device.create_cq(sq_depth, true)?;
        let send_clock = device.nic_clock().filter(|_| matches!(cq.kind(), ffi::CqKind::Extended { timestamps: true }));
        let batch = WriteBatch::new(&pd, cfg.post_batch.min(sq_depth) as usize, sq_depth as usize, RECORD_SIZE_BYTES)?;
        let post_batch = batch.capacity();
        let qp = QueuePair::create_rc(
            &pd,
            &cq,
            QpCaps {
                max_send_wr: sq_depth,
                max_recv_wr: PUBLISHER_RECV_DEPTH,
                max_inline_data: RECORD_SIZE_BYTES as u32,
            },
            batch,
        )?;
        let inline = qp.caps().max_inline_data >= RECORD_SIZE_BYTES as u32;
        let credit = MemoryRegion::register(&pd, 8, Access::REMOTE_WRITE)?;
        // Relaxed: nothing else is published with it; the subscriber cannot write before it has our accept.
        credit.word(0).store(NOT_CONNECTED, Ordering::Relaxed);
        qp.to_init(device.port().port_num, Access::REMOTE_WRITE)?;
        qp.to_rtr(&device.rtr_attrs(&remote))?;
        let psn = random_psn();
        qp.to_rts(&device.rts_attrs(psn))?;
        let local = device.endpoint(qp.qpn(), psn);
        let accept =
            AcceptFabric::Verbs { endpoint: local.clone(), credit_addr: credit.addr(), credit_rkey: credit.rkey() };
        tracing::info!(device = %device.name(), qpn = qp.qpn(), subscriber_qpn = remote.qpn, slot_count,
            send_queue_depth = sq_depth, signal_every = cfg.signal_every, post_batch, inline,
            send_completion_timestamps = send_clock.is_some(), "verbs: publisher attached to a subscriber ring");
        let ring = VerbsRemoteRing {
            qp,
            credit,
            ring_addr: *ring_addr,
            ring_rkey: *ring_rkey,
            slot_count,
            sq_depth: sq_depth as u64,
            signal_every: cfg.signal_every.min(sq_depth) as u64,
            until_signal: cfg.signal_every.min(sq_depth) as u64,
            staging_next: 0,
            inline,
            posted: 0,
            completed: 0,
            signaled_end: 0,
            last_written_seq: 0,
            consumed: 0,
            scratch: [Wc::default(); POLL_BATCH],
            failed: None,
            closed: false,
            send_clock,
            stamps: send_clock.map(|clock| Box::new(SendStampLog::new(clock, sq_depth as usize))),
            endpoint: local,
            remote: endpoint.clone(),
            device: device.clone(),
        };
        Ok((ring, accept))
    }
}

/// The publisher's handle on one subscriber's ring over RDMA verbs (the sender side).
///
/// Send-queue accounting: WR `i` (from 0) is posted with `wr_id = i`, its record copied into the next of the
/// `send_queue_depth` staging slots in turn (reused only after `send_queue_depth` later WRs, so after it completed);
/// one in `signal_every` is signalled, and so is any WR that fills the queue (which restarts the count), so a full
/// queue always has a WC coming. A signalled WC for `wr_id = i` means WRs `0..=i` are done (an RC send queue completes in order).
///
/// Send completion timestamps: when the send CQ carries them ([`RemoteRing::send_nic_clock`]), each signalled
/// WR's post time (the record's `ts_send_ticks`) is kept by staging slot and paired with its WC's NIC timestamp
/// into a [`SendStamp`] ([`SendStampLog`]), which the publisher takes after each flush
/// ([`RemoteRing::take_send_stamps`]).
pub struct VerbsRemoteRing {
    // Field order is drop order: the QP is destroyed before the staging slots and the credit word.
    qp: QueuePair,
    credit: MemoryRegion,
    ring_addr: u64,
    ring_rkey: u32,
    slot_count: u32,
    sq_depth: u64,
    signal_every: u64,
    /// WRs left until the next one signalled by the `signal_every` rule.
    until_signal: u64,
    /// `posted % sq_depth`, kept without a division: the staging slot of the next write.
    staging_next: usize,
    inline: bool,
    /// WRs handed to the batch so far (posted or about to be).
    posted: u64,
    /// WRs known complete.
    completed: u64,
    /// `wr_id + 1` of the last signalled WR.
    signaled_end: u64,
    /// The highest seq written so far (rebuilt from the immediates).
    last_written_seq: u64,
    /// The last credit value accepted.
    consumed: u64,
    scratch: [Wc; POLL_BATCH],
    failed: Option<i32>,
    closed: bool,
    /// The NIC clock of the send completions' timestamps, when the send CQ carries them.
    send_clock: Option<NicClock>,
    /// Post times of signalled WRs and the stamps of their completions; `Some` with `send_clock`.
    stamps: Option<Box<SendStampLog>>,
    endpoint: VerbsEndpoint,
    remote: VerbsEndpoint,
    device: VerbsDevice,
}

impl VerbsRemoteRing {
    /// Whether the subscriber's first credit write has landed: its QP is connected and writes will be delivered
    /// without retransmission. Wait for it (with a deadline) after sending the accept.
    pub fn peer_connected(&self) -> bool {
        // Atomic because the NIC writes the word behind the compiler's back; no ordering is needed for a yes/no.
        self.credit.word(0).load(Ordering::Relaxed) != NOT_CONNECTED
    }

    /// The transport code that broke the ring, if any: a WC status (> 0) or minus an errno (< 0); name it with
    /// [`super::wc_status_name`]. Once set, every write returns it.
    pub fn failure(&self) -> Option<i32> {
        self.failed
    }

    /// WRs posted (or batched) and not yet known complete.
    pub fn outstanding(&self) -> u64 {
        self.posted - self.completed
    }

    /// Whether writes are sent inline (`IBV_SEND_INLINE`: `max_inline_data >= 64`).
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Our QP's endpoint.
    pub fn endpoint(&self) -> &VerbsEndpoint {
        &self.endpoint
    }

    /// The subscriber's endpoint.
    pub fn remote_endpoint(&self) -> &VerbsEndpoint {
        &self.remote
    }

    /// The device.
    pub fn device(&self) -> &VerbsDevice {
        &self.device
    }

    /// Rings the doorbell on what is batched and spins until every posted WR has completed (so the last record,
    /// typically end-of-stream, was ACKed by the subscriber's NIC), or `timeout` passes. For shutdown, before the
    /// ring is dropped; not for the hot path. Returns whether everything completed.
    ///
    /// # Errors
    /// [`PostError::Transport`] when the QP failed (the code names why).
    pub fn drain(&mut self, timeout: Duration) -> Result<bool, PostError> {
        if let Some(code) = self.failed {
            return Err(PostError::Transport { code });
        }
        self.post_batch()?;
        if self.posted > self.signaled_end && self.outstanding() < self.sq_depth {
            // The tail is unsignalled: a signalled zero-length WRITE (no immediate, touches no memory) completes
            // after everything before it.
            let fence = RdmaWrite {
                wr_id: self.posted,
                staging_slot: 0,
                payload: &[],
                remote_addr: self.ring_addr,
                rkey: self.ring_rkey,
                imm_data: None,
                signaled: true,
                inline: false,
            };
            if self.qp.send_batch().push(&fence) {
                if let Some(log) = self.stamps.as_mut() {
                    // no post time: its completion is not a record's
                    log.clear((self.posted % self.sq_depth) as usize);
                }
                self.posted += 1;
                self.signaled_end = self.posted;
                self.post_batch()?;
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.reap()?;
            if self.completed >= self.posted {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    #[inline]
    fn fail(&mut self, code: i32) -> PostError {
        self.failed = Some(code);
        PostError::Transport { code }
    }

    /// One `ibv_post_send` for everything batched.
    #[inline]
    fn post_batch(&mut self) -> Result<(), PostError> {
        if self.qp.send_batch().is_empty() {
            return Ok(());
        }
        match self.qp.post_send() {
            Ok(()) => Ok(()),
            Err(errno) => Err(self.fail(-errno)),
        }
    }

    /// Reaps send completions: advances `completed`; an error WC breaks the ring.
    #[inline]
    fn reap(&mut self) -> Result<(), PostError> {
        let n = match self.qp.cq().poll(&mut self.scratch) {
            Ok(n) => n,
            Err(code) => return Err(self.fail(code)),
        };
        for i in 0..n {
            let wc = self.scratch[i];
            if wc.status != ffi::WC_SUCCESS {
                return Err(self.fail(wc.status as i32));
            }
            self.completed = self.completed.max(wc.wr_id + 1);
            if let (Some(log), Some(raw)) = (self.stamps.as_mut(), wc.completion_ts) {
                log.completed(wc.wr_id, raw);
            }
        }
        Ok(())
    }
}

impl RemoteRing for VerbsRemoteRing {
    fn slot_count(&self) -> u32 {
        self.slot_count
    }

    /// The credit word, as the subscriber's last RDMA WRITE left it (a little-endian u64). A value below the
    /// last one accepted or above the highest seq written cannot be a credit (the word before the first credit,
    /// or an 8-byte DMA seen half-written) and is ignored.
    #[inline]
    fn consumed_seq(&mut self) -> u64 {
        // SYNC POINT: the subscriber posted this credit after a Release fence that follows its reads of the
        // released slots (`VerbsLocalRing::send_credit`); Acquire keeps our later posts, which overwrite those
        // slots, after this load (a plain load on x86; Relaxed would let a weaker CPU reorder them).
        let raw = u64::from_le(self.credit.word(0).load(Ordering::Acquire));
        if raw >= self.consumed && raw <= self.last_written_seq {
            self.consumed = raw;
        }
        self.consumed
    }

    #[inline]
    fn write_with_imm(&mut self, slot: u32, record: &BookUpdate, imm_data: u32) -> Result<(), PostError> {
        if let Some(code) = self.failed {
            return Err(PostError::Transport { code });
        }
        if self.closed {
            return Err(PostError::Transport { code: CLOSED });
        }
        if slot >= self.slot_count {
            return Err(PostError::SlotOutOfRange { slot, slot_count: self.slot_count });
        }
        if self.posted - self.completed >= self.sq_depth {
            self.post_batch()?;
            self.reap()?;
            if self.posted - self.completed >= self.sq_depth {
                return Err(PostError::SendQueueFull);
            }
        }
        let index = self.posted;
        // Count down instead of `(index + 1) % signal_every`: no division on the hot path.
        self.until_signal -= 1;
        let signaled = self.until_signal == 0 || index + 1 - self.completed == self.sq_depth;
        if signaled {
            self.until_signal = self.signal_every;
            if let Some(log) = self.stamps.as_mut() {
                log.posted(self.staging_next, index, u64::from(record.ts_send_ticks));
            }
        }
        let w = RdmaWrite {
            wr_id: index,
            staging_slot: self.staging_next,
            payload: record.as_bytes(),
            remote_addr: self.ring_addr + slot as u64 * RECORD_SIZE_BYTES as u64,
            rkey: self.ring_rkey,
            imm_data: Some(imm_data),
            signaled,
            inline: self.inline,
        };
        if !self.qp.send_batch().push(&w) {
            // Only when the batch is full, and it is posted as soon as it fills: a bug, reported as a failure.
            return Err(self.fail(-libc::ENOBUFS));
        }
        self.posted += 1;
        self.staging_next += 1;
        if self.staging_next as u64 == self.sq_depth {
            self.staging_next = 0;
        }
        if signaled {
            self.signaled_end = self.posted;
        }
        self.last_written_seq = seq_from_imm(imm_data, self.last_written_seq.wrapping_add(1));
        let batch = self.qp.send_batch();
        if batch.len() == batch.capacity() {
            self.post_batch()?;
        }
        Ok(())
    }

    #[inline]
    fn flush(&mut self) -> Result<(), PostError> {
        if let Some(code) = self.failed {
            return Err(PostError::Transport { code });
        }
        self.post_batch()?;
        self.reap()
    }

    /// Rings the doorbell on what is batched and refuses later writes. The QP stays up, so the records already
    /// posted (end-of-stream first) still arrive; call [`VerbsRemoteRing::drain`] before dropping the ring to be
    /// sure they did. The subscriber does not see the reason through the ring (see the module docs).
    ///
    /// Called on the publisher's hot thread, so it logs nothing: a failed last post is recorded in `failed`,
    /// which `drain`, every later write and [`VerbsRemoteRing::failure`] report (the conductor logs it).
    fn close(&mut self, _reason: CloseReason) {
        if !self.closed && self.failed.is_none() {
            let _ = self.post_batch(); // an error is recorded in `self.failed`
        }
        self.closed = true;
    }

    fn send_nic_clock(&self) -> Option<NicClock> {
        self.send_clock
    }

    #[inline]
    fn take_send_stamps(&mut self) -> &[SendStamp] {
        match self.stamps.as_mut() {
            Some(log) => log.take(),
            None => &[],
        }
    }

    fn send_stamps_lost(&self) -> u64 {
        self.stamps.as_ref().map_or(0, |log| log.lost())
    }
}
