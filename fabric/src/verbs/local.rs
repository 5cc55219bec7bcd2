//! The subscriber's side: [`PreparedVerbsLocalRing`] (created, granted, waiting for the accept) and
//! [`VerbsLocalRing`] (connected; implements [`LocalRing`]).
#![forbid(unsafe_code)]

use std::sync::atomic::{fence, Ordering};

use mdfan_wire::control::{AcceptFabric, RingGrant, VerbsEndpoint};
use mdfan_wire::ring::{check_slot_count, slot_index, RECORD_SIZE_BYTES};

use super::ffi::{
    self, verbs_error, Access, MemoryRegion, QpCaps, QueuePair, RdmaWrite, RecvBatch, Wc, WriteBatch, POLL_BATCH,
};
use super::timestamp::{NicClock, NicRealtime, RtPair, TickExtender};
use super::{parse_endpoint, random_psn, VerbsDevice};
use crate::credit::CreditWriter;
use crate::{CloseReason, Completion, FabricError, LocalRing, PeerState, Provider, ReadWindow};

/// `wr_id` of every receive WR.
const RECV_WR_ID: u64 = 0x5245_4356; // "RECV"
/// `wr_id` of the credit write.
const CREDIT_WR_ID: u64 = 0x4352_4544; // "CRED"
/// Send WRs on a subscriber QP: one credit write in flight at a time (the next waits for its WC), plus one of
/// slack.
const CREDIT_SEND_DEPTH: u32 = 2;
/// Bytes of the credit word.
const CREDIT_BYTES: usize = 8;

/// The parts both typestates own. Field order is drop order: the QP goes first, so the NIC stops before the
/// memory it could touch is deregistered.
struct Parts {
    /// Owns the credit write's source (its send batch).
    qp: QueuePair,
    recv: RecvBatch,
    ring: MemoryRegion,
    device: VerbsDevice,
    slot_count: u32,
    recv_depth: u32,
    psn: u32,
}

/// A subscriber ring that is registered and granted but not yet connected: its QP is in INIT with the receive
/// queue full. Send [`PreparedVerbsLocalRing::grant`] in `Subscribe.ring`, then call
/// [`PreparedVerbsLocalRing::connect`] with the publisher's `Accept.fabric`.
pub struct PreparedVerbsLocalRing {
    parts: Parts,
    endpoint: VerbsEndpoint,
}

/// A connected subscriber ring over RDMA verbs (the receiver side). Busy-poll it from one thread.
///
/// A record is read in place through the [`Completion`] that named it, which borrows the ring (see
/// [`Completion`] for why it cannot outlive a release).
pub struct VerbsLocalRing {
    parts: Parts,
    endpoint: VerbsEndpoint,
    remote: VerbsEndpoint,
    credit_addr: u64,
    credit_rkey: u32,
    credit_inline: bool,
    /// When to write the consumed seq back (see [`crate::credit`]).
    credit: CreditWriter,
    /// Receive WRs consumed and not yet re-posted.
    recv_deficit: u32,
    repost_batch: u32,
    /// WCs reaped and not yet handed out: `pending[head..len]` are receive completions, in order.
    pending: [Wc; POLL_BATCH],
    head: usize,
    len: usize,
    scratch: [Wc; POLL_BATCH],
    /// The transport code that closed the ring (see [`super::status`]).
    failed: Option<i32>,
    /// Which slots completions may hand out, and how far a release may go.
    window: ReadWindow,
    extender: Option<TickExtender>,
    last_ts_ticks: Option<u64>,
    /// The NIC clock when this ring's CQ carries completion timestamps.
    nic_clock: Option<NicClock>,
    /// The last NIC/realtime pair sampled ([`LocalRing::nic_realtime`]).
    last_rt_pair: Option<RtPair>,
}

impl VerbsLocalRing {
    /// Registers a ring of `slot_count` slots (`slot_count * 64` bytes, LOCAL_WRITE | REMOTE_WRITE, in a PD of its
    /// own), creates its RC QP and CQ, moves the QP RESET -> INIT and posts `recv_queue_depth` zero-SGE receive
    /// WRs. Returns the prepared ring and the grant for `Subscribe.ring`.
    ///
    /// Memory: the ring, one page for the credit source word, the receive queue (`recv_queue_depth` WRs).
    ///
    /// # Errors
    /// [`FabricError::BadRing`] for a slot count that is not a power of two in range; [`FabricError::Verbs`] for a
    /// failed verb (registration: ENOMEM/EPERM when `RLIMIT_MEMLOCK` is too low).
    pub fn create(device: &VerbsDevice, slot_count: u32) -> Result<(PreparedVerbsLocalRing, RingGrant), FabricError> {
        let slot_count = check_slot_count(slot_count as u64).map_err(|e| FabricError::BadRing {
            path: format!("verbs ring on {}", device.name()),
            detail: e.to_string(),
        })?;
        let cfg = device.config();
        let caps = device.caps();
        // As deep as the ring (a stopped reader can then fall a whole ring behind before the publisher sees RNR),
        // within the device's limits: the QP's `max_qp_wr`, and a CQ that holds every receive and credit WC.
        let recv_depth = cfg
            .recv_queue_depth_for(slot_count)
            .min(caps.max_qp_wr.max(1))
            .min(caps.max_cqe.saturating_sub(CREDIT_SEND_DEPTH).max(1));
        let repost = cfg.recv_repost_batch.min(recv_depth);
        let pd = ffi::ProtectionDomain::alloc(device.context())?;
        // Every receive WR and every credit write can complete at once: the CQ holds them all.
        let cq = device.create_cq(recv_depth + CREDIT_SEND_DEPTH, true)?;
        let credit_src = WriteBatch::new(&pd, 1, 1, CREDIT_BYTES)?;
        let qp = QueuePair::create_rc(
            &pd,
            &cq,
            QpCaps { max_send_wr: CREDIT_SEND_DEPTH, max_recv_wr: recv_depth, max_inline_data: CREDIT_BYTES as u32 },
            credit_src,
        )?;
        let ring = MemoryRegion::register(&pd, slot_count as usize * RECORD_SIZE_BYTES, Access::REMOTE_WRITE)?;
        let mut recv = RecvBatch::new(repost as usize, RECV_WR_ID);
        qp.to_init(device.port().port_num, Access::REMOTE_WRITE)?;
        let mut left = recv_depth as usize;
        while left > 0 {
            let n = left.min(recv.capacity());
            qp.post_recv(&mut recv, n).map_err(|errno| {
                verbs_error("ibv_post_recv", format!("{} qpn {:#x}", device.name(), qp.qpn()), errno)
            })?;
            left -= n;
        }
        let psn = random_psn();
        let endpoint = device.endpoint(qp.qpn(), psn);
        let grant =
            RingGrant::Verbs { endpoint: endpoint.clone(), ring_addr: ring.addr(), ring_rkey: ring.rkey(), slot_count };
        tracing::debug!(device = %device.name(), qpn = qp.qpn(), slot_count, recv_depth, cq = ?cq.kind(),
            "verbs: subscriber ring registered");
        let parts = Parts { qp, recv, ring, device: device.clone(), slot_count, recv_depth, psn };
        Ok((PreparedVerbsLocalRing { parts, endpoint }, grant))
    }

    /// Our QP's endpoint.
    pub fn endpoint(&self) -> &VerbsEndpoint {
        &self.endpoint
    }

    /// The publisher's endpoint.
    pub fn remote_endpoint(&self) -> &VerbsEndpoint {
        &self.remote
    }

    /// Released records per credit write.
    pub fn credit_every(&self) -> u64 {
        self.credit.every()
    }

    /// Receive WRs kept posted.
    pub fn recv_queue_depth(&self) -> u32 {
        self.parts.recv_depth
    }

    /// The transport code that closed the ring, if any: a WC status (> 0) or minus an errno (< 0); name it with
    /// [`super::wc_status_name`].
    pub fn failure(&self) -> Option<i32> {
        self.failed
    }

    /// NIC timestamp of the completion [`LocalRing::poll_cq`] returned last, in ns on the NIC's clock (arbitrary
    /// epoch; extended across counter wraps while completions keep coming). `None` when the device or CQ has no
    /// completion timestamps (rxe).
    pub fn last_completion_timestamp_ns(&self) -> Option<u64> {
        let clock = self.parts.device.nic_clock()?;
        self.last_ts_ticks.map(|t| clock.ticks_to_ns(t))
    }

    /// Writes the latest released seq to the publisher now, even if fewer than `credit_every` records were
    /// released since the last credit (or as soon as the credit write in flight completes, during a later
    /// [`LocalRing::poll_cq`]).
    pub fn flush_credit(&mut self) {
        if let Some(seq) = self.credit.flush() {
            self.send_credit(seq);
        }
    }

    /// Posts the credit write of `seq` (one the [`CreditWriter`] returned: no credit is in flight, so the source
    /// word is not under the NIC).
    #[inline]
    fn send_credit(&mut self, seq: u64) {
        if self.failed.is_some() {
            return;
        }
        // Release: the reads of every slot up to `consumed` happen before the write that lets the publisher
        // reuse them is posted (the post's doorbell is a store; x86 never moves loads after it, weaker CPUs could).
        fence(Ordering::Release);
        let bytes = seq.to_le_bytes();
        let w = RdmaWrite {
            wr_id: CREDIT_WR_ID,
            staging_slot: 0,
            payload: &bytes,
            remote_addr: self.credit_addr,
            rkey: self.credit_rkey,
            imm_data: None,
            signaled: true,
            inline: self.credit_inline,
        };
        if !self.parts.qp.send_batch().push(&w) {
            // The batch holds one WR and is emptied by every post: unreachable unless a post was skipped.
            self.failed = Some(-libc::ENOMEM);
            return;
        }
        match self.parts.qp.post_send() {
            Ok(()) => self.credit.posted(seq),
            Err(errno) => self.failed = Some(-errno),
        }
    }

    /// Reaps WCs into `pending`; keeps the receive queue full and the credit flowing. Returns whether any
    /// receive completion is pending.
    #[inline]
    fn refill(&mut self) -> bool {
        let n = match self.parts.qp.cq().poll(&mut self.scratch) {
            Ok(n) => n,
            Err(code) => {
                self.failed = Some(code);
                return false;
            }
        };
        if n == 0 {
            if let Some(seq) = self.credit.on_empty_poll() {
                self.send_credit(seq);
            }
            return false;
        }
        self.head = 0;
        self.len = 0;
        let mut credit_done = false;
        for i in 0..n {
            let wc = self.scratch[i];
            if wc.status != ffi::WC_SUCCESS {
                // The QP is in ERR; the WCs after this one are flushes. What arrived before is still delivered.
                self.failed = Some(wc.status as i32);
                break;
            }
            if wc.wr_id == CREDIT_WR_ID && wc.opcode == ffi::WC_RDMA_WRITE {
                credit_done = true;
            } else if wc.opcode == ffi::WC_RECV_RDMA_WITH_IMM {
                self.pending[self.len] = wc;
                self.len += 1;
                self.recv_deficit += 1;
            } else if wc.wr_id == RECV_WR_ID {
                // A receive without immediate (a SEND from a misbehaving peer): re-post, deliver nothing.
                self.recv_deficit += 1;
            }
        }
        while self.recv_deficit >= self.repost_batch && self.failed.is_none() {
            match self.parts.qp.post_recv(&mut self.parts.recv, self.repost_batch as usize) {
                Ok(()) => self.recv_deficit -= self.repost_batch,
                Err(errno) => self.failed = Some(-errno),
            }
        }
        if self.len > 0 {
            self.credit.on_record();
        }
        if credit_done {
            if let Some(seq) = self.credit.on_complete() {
                self.send_credit(seq);
            }
        }
        self.len > 0
    }
}

impl PreparedVerbsLocalRing {
    /// Our QP's endpoint (also in the grant).
    pub fn endpoint(&self) -> &VerbsEndpoint {
        &self.endpoint
    }

    /// The grant for `Subscribe.ring` (the same one [`VerbsLocalRing::create`] returned).
    pub fn grant(&self) -> RingGrant {
        RingGrant::Verbs {
            endpoint: self.endpoint.clone(),
            ring_addr: self.parts.ring.addr(),
            ring_rkey: self.parts.ring.rkey(),
            slot_count: self.parts.slot_count,
        }
    }

    /// Connects to the publisher named in `accept` (`Accept.fabric`): QP INIT -> RTR -> RTS, then the first
    /// credit write (seq 0), which tells the publisher the QP is live.
    ///
    /// # Errors
    /// [`FabricError::Mismatch`] for a non-verbs accept; [`FabricError::BadRing`] for a malformed endpoint or
    /// credit address; [`FabricError::Verbs`] when a QP transition or the first credit post fails.
    pub fn connect(self, accept: &AcceptFabric) -> Result<VerbsLocalRing, FabricError> {
        let AcceptFabric::Verbs { endpoint, credit_addr, credit_rkey } = accept else {
            return Err(FabricError::Mismatch { offered: Provider::Shm, what: "accept", served: Provider::Verbs });
        };
        let remote = parse_endpoint(endpoint, "the publisher")?;
        if credit_addr % CREDIT_BYTES as u64 != 0 {
            return Err(FabricError::BadRing {
                path: "verbs accept".into(),
                detail: format!("credit_addr {credit_addr:#x} is not 8-byte aligned"),
            });
        }
        let parts = self.parts;
        let device = parts.device.clone();
        parts.qp.to_rtr(&device.rtr_attrs(&remote))?;
        parts.qp.to_rts(&device.rts_attrs(parts.psn))?;
        let credit_inline = parts.qp.caps().max_inline_data >= CREDIT_BYTES as u32;
        let credit_every = device.config().credit_every_for(parts.slot_count) as u64;
        let repost_batch = parts.recv.capacity() as u32;
        // Timestamps only when the CQ was created with them (CqApi::Classic, or an Auto fallback, has none).
        let nic_clock =
            device.nic_clock().filter(|_| matches!(parts.qp.cq().kind(), ffi::CqKind::Extended { timestamps: true }));
        let extender = nic_clock.map(TickExtender::new);
        let mut ring = VerbsLocalRing {
            parts,
            endpoint: self.endpoint,
            remote: endpoint.clone(),
            credit_addr: *credit_addr,
            credit_rkey: *credit_rkey,
            credit_inline,
            credit: CreditWriter::new(credit_every),
            recv_deficit: 0,
            repost_batch,
            pending: [Wc::default(); POLL_BATCH],
            head: 0,
            len: 0,
            scratch: [Wc::default(); POLL_BATCH],
            failed: None,
            window: ReadWindow::default(),
            extender,
            last_ts_ticks: None,
            nic_clock,
            last_rt_pair: None,
        };
        ring.send_credit(0); // the first credit: tells the publisher our QP is live
        if let Some(code) = ring.failed {
            return Err(verbs_error(
                "ibv_post_send",
                format!("{} qpn {:#x} (first credit write)", device.name(), ring.parts.qp.qpn()),
                -code,
            ));
        }
        tracing::info!(device = %device.name(), qpn = ring.parts.qp.qpn(), publisher_qpn = endpoint.qpn,
            slot_count = ring.parts.slot_count, credit_every, credit_inline, "verbs: subscriber ring connected");
        Ok(ring)
    }
}

impl LocalRing for VerbsLocalRing {
    fn slot_count(&self) -> u32 {
        self.parts.slot_count
    }

    #[inline]
    fn poll_cq(&mut self) -> Option<Completion<'_>> {
        if self.head == self.len && !self.refill() {
            return None;
        }
        let wc = self.pending[self.head];
        self.head += 1;
        if let (Some(ext), Some(raw)) = (self.extender.as_mut(), wc.completion_ts) {
            self.last_ts_ticks = Some(ext.extend(raw));
        }
        // A WRITE_WITH_IMM always carries its immediate; 0 would only come from a provider that dropped it, and
        // the reader's seq check against the slot catches that.
        let imm_data = wc.imm_data.unwrap_or(0);
        let (seq, readable) = self.window.complete_imm(imm_data);
        // The WC was reaped, so the WRITE's data is in the MR (IB vol. 1, o9-20); the publisher writes this slot
        // again only after `seq` is released, which needs `&mut self`.
        let record = readable.then(|| self.parts.ring.record(slot_index(seq, self.parts.slot_count) as usize));
        Some(Completion::new(imm_data, seq, record).with_nic_ticks(wc.completion_ts))
    }

    #[inline]
    fn release(&mut self, consumed_seq: u64) {
        let Some(released) = self.window.release(consumed_seq) else { return };
        if let Some(seq) = self.credit.on_release(released) {
            self.send_credit(seq);
        }
    }

    fn peer_state(&self) -> PeerState {
        match self.failed {
            None => PeerState::Attached,
            Some(_) => PeerState::Closed(CloseReason::FabricError),
        }
    }

    fn nic_clock(&self) -> Option<NicClock> {
        self.nic_clock
    }

    /// Samples a pair with `ibv_query_rt_values_ex` ([`ffi::Context::query_rt_pair`]) and fits it with the
    /// previous one ([`NicRealtime::from_pairs`]; the first alone at the nominal rate). `None` without completion
    /// timestamps, or when the device cannot read its clock (logged at debug level: control path).
    fn nic_realtime(&mut self) -> Option<NicRealtime> {
        let clock = self.nic_clock?;
        self.parts.device.sample_nic_realtime(clock, &mut self.last_rt_pair)
    }
}
