//! Every raw libibverbs call of the verbs provider, behind safe RAII wrappers. The only `unsafe` in `verbs`.
//!
//! One wrapper per verbs object; each releases its handle in `Drop` and holds an `Arc` to its parent, so
//! teardown runs child-first by construction: [`MemoryRegion`] -> [`ProtectionDomain`] -> [`Context`],
//! [`QueuePair`] -> [`CompletionQueue`] -> [`Context`]. Errors are the errno values the man pages give, turned
//! into [`FabricError::Verbs`] naming the call and the object ([`FabricError::Unsupported`] for `EOPNOTSUPP`).
//!
//! Hot-path pieces: [`WriteBatch`] (a preallocated, pre-linked list of RDMA WRITE WRs posted with one
//! `ibv_post_send`), [`RecvBatch`] (zero-SGE receive WRs), [`CompletionQueue::poll`] (no allocation; fills a
//! caller's `[Wc]`). They never allocate, lock or log; posting rings the provider's doorbell (an MMIO write on
//! hardware, a `write(2)` to the kernel on rxe).
//!
//! Thread safety: libibverbs objects may be used from any thread ("all verbs are thread safe",
//! `ibv_post_send(3)`, rdma-core `Documentation/libibverbs.md`), so the handles are `Send + Sync`. The WR lists
//! hold raw pointers into their own boxed storage and are `Send` only.
//!
//! References: the man pages of each call (named per function), RDMAmojo (<https://www.rdmamojo.com/>), and the
//! InfiniBand Architecture Specification vol. 1 (IB vol. 1), chapters 9-11.
//!
//! # rdma-sys 0.3 and rdma-core 44 gaps handled here
//!
//! - rdma-sys's `verbs_get_ctx` compares `abi_compat` with `u32::MAX` instead of `UINTPTR_MAX`, so its inline
//!   `ibv_query_device_ex`, `ibv_create_cq_ex` and `___ibv_query_port` never reach the provider's extended ops on
//!   64-bit (no timestamp clock, EOPNOTSUPP). Ours go through `verbs_ctx_op!`, written as `verbs.h` has it.
//! - `IBV_LINK_LAYER_*` (an anonymous enum) is not bound: declared here.
//! - `ibv_query_gid_ex` is not bound: the GID type is read from sysfs ([`super::gid`]).
//! - rxe in rdma-core 44 advances its CQ twice when `ibv_next_poll` runs dry and `ibv_end_poll` follows (as the
//!   man page requires): the extended poll never calls `ibv_next_poll` (see [`CompletionQueue::poll`]).

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use mdfan_wire::BookUpdate;
use memmap2::MmapMut;
use rdma_sys as sys;

use crate::nic_clock::RtPair;
use crate::FabricError;

/// WC status `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: u32 = sys::ibv_wc_status::IBV_WC_SUCCESS;
/// WC opcode of a send-side RDMA WRITE (`IBV_WC_RDMA_WRITE`).
pub const WC_RDMA_WRITE: u32 = sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE;
/// WC opcode of a receive consumed by a WRITE-with-immediate (`IBV_WC_RECV_RDMA_WITH_IMM`).
pub const WC_RECV_RDMA_WITH_IMM: u32 = sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM;
/// Port state `IBV_PORT_ACTIVE`.
pub const PORT_ACTIVE: u32 = sys::ibv_port_state::IBV_PORT_ACTIVE;
/// `port_attr.link_layer` of an Ethernet (RoCE) port (`IBV_LINK_LAYER_ETHERNET`; an anonymous enum in
/// `verbs.h` that rdma-sys does not bind).
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `port_attr.link_layer` of an InfiniBand port (`IBV_LINK_LAYER_INFINIBAND`).
pub const LINK_LAYER_INFINIBAND: u8 = 1;

/// Most WCs one [`CompletionQueue::poll`] reaps (a stack array of this many `ibv_wc`, 48 bytes each).
pub const POLL_BATCH: usize = 16;

/// The errno of the last failed libc/libibverbs call; EIO when the library set none.
fn last_errno() -> i32 {
    match io::Error::last_os_error().raw_os_error() {
        Some(0) | None => libc::EIO,
        Some(e) => e,
    }
}

/// The control-path error for verbs call `call` failing with `errno` on `object`.
pub(crate) fn verbs_error(call: &'static str, object: impl Into<String>, errno: i32) -> FabricError {
    let object = object.into();
    if errno == libc::EOPNOTSUPP {
        return FabricError::Unsupported(format!("{call} on {object} (EOPNOTSUPP)"));
    }
    FabricError::Verbs { call, object, source: io::Error::from_raw_os_error(errno) }
}

/// The extended-context op `$op` of context `$ctx`, as `verbs.h`'s `verbs_get_ctx_op` finds it: `None` when the
/// context is not extended, the provider's `verbs_context` is too old to have the op, or the op is NULL.
///
/// rdma-sys 0.3 has this wrong: its `verbs_get_ctx` compares `abi_compat` with `u32::MAX`, while `verbs.h`'s
/// `__VERBS_ABI_IS_EXTENDED` is `(void *)UINTPTR_MAX`, so on 64-bit every extended op looks missing and its
/// `ibv_query_device_ex` silently degrades to `ibv_query_device` (no timestamp clock), its `ibv_create_cq_ex`
/// fails with EOPNOTSUPP, and its `___ibv_query_port` falls back to the compat call. Hence our own.
///
/// Must be used inside an `unsafe` block: `$ctx` must be an open `*mut ibv_context`.
macro_rules! verbs_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let ctx: *mut sys::ibv_context = $ctx;
        if (*ctx).abi_compat as usize != usize::MAX {
            None
        } else {
            // container_of(ctx, struct verbs_context, context), as verbs_get_ctx open-codes it.
            let vctx =
                ctx.cast::<u8>().sub(std::mem::offset_of!(sys::verbs_context, context)).cast::<sys::verbs_context>();
            let needed = std::mem::size_of::<sys::verbs_context>() - std::mem::offset_of!(sys::verbs_context, $op);
            if (*vctx).sz < needed {
                None
            } else {
                (*vctx).$op
            }
        }
    }};
}

/// What `ibv_query_device_ex(3)` says about a device, reduced to what the provider uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Most WRs per send or receive queue (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Most CQEs per CQ (`max_cqe`).
    pub max_cqe: u32,
    /// Ports on the device (`phys_port_cnt`).
    pub phys_port_cnt: u8,
    /// Width mask of the completion timestamp counter; 0 = no completion timestamps (rxe).
    pub completion_timestamp_mask: u64,
    /// Rate of that counter in kHz (`hca_core_clock`); 0 when unknown.
    pub hca_core_clock_khz: u64,
}

/// What `ibv_query_port(3)` says about a port, reduced to what the provider uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// `enum ibv_port_state` (4 = ACTIVE).
    pub state: u32,
    /// Active MTU as `enum ibv_mtu` (1 = 256 B .. 5 = 4096 B).
    pub active_mtu: u32,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// [`LINK_LAYER_ETHERNET`] or [`LINK_LAYER_INFINIBAND`] (0 = unspecified, treated as IB).
    pub link_layer: u8,
}

/// The list `ibv_get_device_list(3)` returned; freed with `ibv_free_device_list` on drop.
struct DeviceList {
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl DeviceList {
    /// Calls `ibv_get_device_list(3)`.
    ///
    /// # Errors
    /// The errno: ENOSYS (the kernel has no RDMA support: no `/sys/class/infiniband_verbs`), ENOMEM.
    fn get() -> Result<DeviceList, i32> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the duration of the call.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            // NULL: nothing was allocated, so nothing is freed (the man page: free only a non-NULL list).
            return Err(last_errno());
        }
        Ok(DeviceList { list, len: n.max(0) as usize })
    }

    fn device(&self, i: usize) -> *mut sys::ibv_device {
        assert!(i < self.len);
        // SAFETY: the list holds `len` device pointers (plus a NULL terminator) until it is freed in Drop.
        unsafe { *self.list.add(i) }
    }

    fn name(&self, i: usize) -> String {
        let dev = self.device(i);
        // SAFETY: `dev` is a live device of this list; `ibv_get_device_name` returns a NUL-terminated string
        // owned by the device, valid until the list is freed, and we copy it out at once.
        unsafe {
            let p = sys::ibv_get_device_name(dev);
            if p.is_null() {
                return format!("<device {i}>");
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from a successful `ibv_get_device_list` and is freed exactly once. Contexts opened
        // from its devices stay valid after the free (ibv_get_device_list(3): "Once the list is freed with
        // ibv_free_device_list, ... Open devices are not affected").
        unsafe { sys::ibv_free_device_list(self.list) }
    }
}

/// An opened RDMA device: `ibv_open_device(3)`, closed with `ibv_close_device` when the last child is gone.
pub struct Context {
    raw: *mut sys::ibv_context,
    name: String,
    caps: DeviceCaps,
}

// SAFETY: an `ibv_context` may be used from any thread (libibverbs verbs are thread-safe); the pointer is freed
// only in Drop, which runs once, after every child (each holds an `Arc<Context>`) is gone.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only offers thread-safe verbs (queries, object creation).
unsafe impl Sync for Context {}

impl Context {
    /// Opens `device` (by its `ibv_devices` name), or the first device when `None`, with
    /// `ibv_get_device_list(3)` + `ibv_open_device(3)`, then reads its attributes with `ibv_query_device_ex(3)`.
    ///
    /// # Errors
    /// [`FabricError::NoDevice`] naming what was found when `ibv_get_device_list` fails (ENOSYS: a kernel without
    /// RDMA support), lists no device, or lacks the one asked for; [`FabricError::Verbs`] when
    /// `ibv_open_device` (ENOMEM, EACCES, ...) or `ibv_query_device_ex` (EINVAL, ENOMEM) fails.
    pub fn open(device: Option<&str>) -> Result<Arc<Context>, FabricError> {
        let list = DeviceList::get().map_err(|errno| {
            let err = io::Error::from_raw_os_error(errno);
            let hint = if errno == libc::ENOSYS {
                " (this kernel has no RDMA support: load ib_uverbs and a provider such as rdma_rxe)"
            } else {
                ""
            };
            FabricError::NoDevice(format!("ibv_get_device_list failed: {err}{hint}; found no RDMA devices"))
        })?;
        let names: Vec<String> = (0..list.len).map(|i| list.name(i)).collect();
        let index = match device {
            None if names.is_empty() => {
                return Err(FabricError::NoDevice(
                    "ibv_get_device_list found 0 devices (for Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)"
                        .into(),
                ))
            }
            None => 0,
            Some(want) => names.iter().position(|n| n == want).ok_or_else(|| {
                FabricError::NoDevice(format!(
                    "device {want} not found; ibv_get_device_list found {}: [{}]",
                    names.len(),
                    names.join(", ")
                ))
            })?,
        };
        let name = names[index].clone();
        // SAFETY: the device pointer is live while `list` is (it is dropped after this call).
        let raw = unsafe { sys::ibv_open_device(list.device(index)) };
        if raw.is_null() {
            return Err(verbs_error("ibv_open_device", name, last_errno()));
        }
        let mut ctx = Context {
            raw,
            name,
            caps: DeviceCaps {
                max_qp_wr: 0,
                max_cqe: 0,
                phys_port_cnt: 0,
                completion_timestamp_mask: 0,
                hca_core_clock_khz: 0,
            },
        };
        ctx.caps = ctx.query_device_ex()?;
        Ok(Arc::new(ctx))
    }

    /// `ibv_query_device_ex(3)`, as the `verbs.h` inline does it: the provider's extended query when it has one
    /// (and does not answer EOPNOTSUPP), else `ibv_query_device(3)`, leaving the extended fields at zero.
    fn query_device_ex(&self) -> Result<DeviceCaps, FabricError> {
        let mut attr = MaybeUninit::<sys::ibv_device_attr_ex>::zeroed();
        // SAFETY: `raw` is an open context (so `verbs_ctx_op!` may read it and its verbs_context); `attr` is
        // writable and zeroed (every field is an integer, array or struct of integers, so zero is valid) and its
        // size is passed; a NULL input means "no input options".
        let mut rc = unsafe {
            match verbs_ctx_op!(self.raw, query_device_ex) {
                Some(query) => {
                    query(self.raw, ptr::null(), attr.as_mut_ptr(), std::mem::size_of::<sys::ibv_device_attr_ex>())
                }
                None => libc::EOPNOTSUPP,
            }
        };
        if rc == libc::EOPNOTSUPP {
            // SAFETY: as above; `orig_attr` is the first field, a writable `ibv_device_attr`.
            rc = unsafe { sys::ibv_query_device(self.raw, ptr::addr_of_mut!((*attr.as_mut_ptr()).orig_attr)) };
        }
        if rc != 0 {
            return Err(verbs_error("ibv_query_device_ex", &self.name, rc));
        }
        // SAFETY: zero-initialised and then filled by the call; all-integer struct.
        let attr = unsafe { attr.assume_init() };
        Ok(DeviceCaps {
            max_qp_wr: attr.orig_attr.max_qp_wr.max(0) as u32,
            max_cqe: attr.orig_attr.max_cqe.max(0) as u32,
            phys_port_cnt: attr.orig_attr.phys_port_cnt,
            completion_timestamp_mask: attr.completion_timestamp_mask,
            hca_core_clock_khz: attr.hca_core_clock,
        })
    }

    /// The device name (`ibv_get_device_name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device attributes read at open.
    pub fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// One [`RtPair`]: the NIC's raw clock from `ibv_query_rt_values_ex(3)` (`IBV_VALUES_MASK_RAW_CLOCK`: the
    /// free-running counter the completion timestamps come from) read between two `clock_gettime(CLOCK_REALTIME)`
    /// (vDSO) and pinned to their midpoint. Of 3 tries, the narrowest window. Control path only (not measured
    /// here: no device on these machines has the clock; call it about once a second).
    ///
    /// # Errors
    /// [`FabricError::Unsupported`] when the provider has no `query_rt_values` op or answers EOPNOTSUPP (rxe);
    /// [`FabricError::Verbs`] with the errno it returned (EINVAL for a mask it does not know).
    pub fn query_rt_pair(&self) -> Result<RtPair, FabricError> {
        let realtime_ns =
            || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let mut best: Option<(u64, RtPair)> = None;
        for _ in 0..3 {
            let mut values = MaybeUninit::<sys::ibv_values_ex>::zeroed();
            // SAFETY: `values` is zeroed (integers only) and writable; comp_mask is its first field.
            unsafe {
                (*values.as_mut_ptr()).comp_mask = sys::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
            }
            let before = realtime_ns();
            // SAFETY: `raw` is an open context (so `verbs_ctx_op!` may read it); `values` outlives the call.
            let rc = unsafe {
                match verbs_ctx_op!(self.raw, query_rt_values) {
                    Some(query) => query(self.raw, values.as_mut_ptr()),
                    None => libc::EOPNOTSUPP,
                }
            };
            let after = realtime_ns();
            if rc != 0 {
                return Err(verbs_error("ibv_query_rt_values_ex", &self.name, rc));
            }
            // SAFETY: zero-initialised, then filled by the provider; integers only.
            let values = unsafe { values.assume_init() };
            if values.comp_mask & sys::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0 == 0 {
                return Err(verbs_error("ibv_query_rt_values_ex", &self.name, libc::EOPNOTSUPP));
            }
            // verbs.h: the raw clock travels in a timespec; mlx5 puts the whole count in tv_nsec (tv_sec 0).
            let ticks = (values.raw_clock.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(values.raw_clock.tv_nsec as u64);
            let width = after.saturating_sub(before);
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, RtPair { nic_ticks: ticks, realtime_ns: before + width / 2 }));
            }
        }
        Ok(best.map(|(_, p)| p).expect("three tries"))
    }

    /// The raw `ibv_context`, for calls this module does not wrap. It stays valid while `self` does.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.raw
    }

    /// `ibv_query_port(3)`, as the `verbs.h` inline `___ibv_query_port` does it: the provider's extended
    /// `query_port` op with the struct size, else the exported compat call (which fills a prefix of the struct).
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for a port that does not exist, ENOMEM).
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr, FabricError> {
        let mut attr = MaybeUninit::<sys::ibv_port_attr>::zeroed();
        // SAFETY: `raw` is an open context; `attr` is a writable, zeroed `ibv_port_attr` (all integers) of the
        // size passed; the compat struct the fallback fills is a prefix of it (verbs.h `_compat_ibv_port_attr`).
        let rc = unsafe {
            match verbs_ctx_op!(self.raw, query_port) {
                Some(query) => query(self.raw, port_num, attr.as_mut_ptr(), std::mem::size_of::<sys::ibv_port_attr>()),
                None => sys::ibv_query_port(self.raw, port_num, attr.as_mut_ptr().cast()),
            }
        };
        if rc != 0 {
            return Err(verbs_error("ibv_query_port", format!("{} port {port_num}", self.name), rc));
        }
        // SAFETY: zeroed, then filled by the call.
        let attr = unsafe { attr.assume_init() };
        Ok(PortAttr {
            state: attr.state,
            active_mtu: attr.active_mtu,
            gid_tbl_len: attr.gid_tbl_len.max(0) as u32,
            lid: attr.lid,
            link_layer: attr.link_layer,
        })
    }

    /// `ibv_query_gid(3)`: GID `index` of port `port_num`, as 16 bytes in network order.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for an index outside the table).
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<[u8; 16], FabricError> {
        let object = || format!("{} port {port_num} gid_index {index}", self.name);
        let idx = c_int::try_from(index).map_err(|_| verbs_error("ibv_query_gid", object(), libc::EINVAL))?;
        let mut gid = MaybeUninit::<sys::ibv_gid>::zeroed();
        // SAFETY: `raw` is an open context, `gid` a writable 16-byte union.
        let rc = unsafe { sys::ibv_query_gid(self.raw, port_num, idx, gid.as_mut_ptr()) };
        if rc != 0 {
            return Err(verbs_error("ibv_query_gid", object(), last_errno()));
        }
        // SAFETY: zeroed then filled; both union members are plain bytes/integers, `raw` views all 16 bytes.
        Ok(unsafe { gid.assume_init().raw })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `ibv_open_device` and every child holding an Arc to us is gone.
        let rc = unsafe { sys::ibv_close_device(self.raw) };
        if rc != 0 {
            tracing::error!(device = %self.name, errno = rc, "ibv_close_device failed: a bug (a child outlived its context?)");
        }
    }
}

/// A protection domain: `ibv_alloc_pd(3)`, freed with `ibv_dealloc_pd`. QPs and MRs work together only within
/// one PD (IB vol. 1, 10.2.3).
pub struct ProtectionDomain {
    raw: *mut sys::ibv_pd,
    ctx: Arc<Context>,
}

// SAFETY: as for `Context`: PD handles are thread-safe and freed once, after the children that hold an Arc.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// `ibv_alloc_pd(3)`.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (ENOMEM).
    pub fn alloc(ctx: &Arc<Context>) -> Result<Arc<ProtectionDomain>, FabricError> {
        // SAFETY: `ctx` is an open context.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.raw) };
        if raw.is_null() {
            return Err(verbs_error("ibv_alloc_pd", ctx.name(), last_errno()));
        }
        Ok(Arc::new(ProtectionDomain { raw, ctx: Arc::clone(ctx) }))
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The raw `ibv_pd`; valid while `self` is.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.raw
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: allocated by `ibv_alloc_pd`; every MR and QP of this PD holds an Arc to it, so none is left.
        let rc = unsafe { sys::ibv_dealloc_pd(self.raw) };
        if rc != 0 {
            tracing::error!(device = %self.ctx.name(), errno = rc, "ibv_dealloc_pd failed: a bug (EBUSY: an MR or QP still uses it)");
        }
    }
}

/// What a peer's or the local NIC may do to an MR (`enum ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// Local read only: a source for sends and writes.
    pub const LOCAL_READ: Access = Access(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: the local NIC may write (receives, RDMA READ targets).
    pub const LOCAL_WRITE: Access = Access(sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// `IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE`: a peer may RDMA WRITE into it (REMOTE_WRITE needs
    /// LOCAL_WRITE, `ibv_reg_mr(3)`).
    pub const REMOTE_WRITE: Access =
        Access(sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);

    /// The flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// Registered memory that the MR owns: a zeroed, page-aligned anonymous mapping of at least `len` bytes,
/// registered with `ibv_reg_mr(3)` over exactly `len` bytes (so an rkey reaches nothing beyond them), deregistered
/// with `ibv_dereg_mr` before the mapping is unmapped.
pub struct MemoryRegion {
    raw: *mut sys::ibv_mr,
    map: MmapMut,
    len: usize,
    lkey: u32,
    rkey: u32,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: the MR handle is thread-safe; the memory is owned by `map` (moves with the struct, never reallocated);
// the accessors below hand out shared views only of words that are read atomically or of slots the ring protocol
// keeps from being written while borrowed.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; `&MemoryRegion` gives only reads (`word`, `record`).
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Allocates `len` bytes (rounded up to whole pages for the mapping, zeroed) and registers them with
    /// `ibv_reg_mr(3)` in `pd` with `access`. Registration pins the pages: do it once per ring, never per message.
    ///
    /// # Errors
    /// [`FabricError::Io`] when the mapping fails; [`FabricError::Verbs`] with the errno of `ibv_reg_mr` (EINVAL,
    /// ENOMEM, EFAULT; EPERM/ENOMEM when `RLIMIT_MEMLOCK` is too low for the pinned pages).
    pub fn register(pd: &Arc<ProtectionDomain>, len: usize, access: Access) -> Result<MemoryRegion, FabricError> {
        let object = || format!("{} ({len} bytes)", pd.ctx.name());
        if len == 0 {
            return Err(verbs_error("ibv_reg_mr", object(), libc::EINVAL));
        }
        let mut map = MmapMut::map_anon(len).map_err(|source| FabricError::Io {
            op: "mmap anonymous",
            path: object(),
            source,
        })?;
        // SAFETY: `map` is a live, writable mapping of at least `len` bytes that this struct keeps until after
        // `ibv_dereg_mr`; `pd` is an allocated PD.
        let raw = unsafe { sys::ibv_reg_mr(pd.raw, map.as_mut_ptr().cast(), len, access.0 as c_int) };
        if raw.is_null() {
            return Err(verbs_error("ibv_reg_mr", object(), last_errno()));
        }
        // SAFETY: `raw` is the MR just returned; lkey/rkey are plain integers set by the call.
        let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
        Ok(MemoryRegion { raw, map, len, lkey, rkey, pd: Arc::clone(pd) })
    }

    /// Virtual address of the first byte (what a peer puts in `remote_addr`).
    pub fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key the local NIC checks on an SGE.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The key a peer presents to access the region remotely.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The PD the region is registered in.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The raw `ibv_mr`; valid while `self` is.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw
    }

    /// The 8-byte word at `offset` (a multiple of 8 inside the region), for memory a NIC writes: read it only
    /// with atomic loads.
    ///
    /// # Panics
    /// If `offset` is misaligned or out of range.
    pub fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset & 7 == 0 && offset + 8 <= self.len, "word offset {offset} outside {} bytes", self.len);
        // SAFETY: in bounds and 8-byte aligned (the map is page-aligned); AtomicU64 has u64's layout; the NIC's
        // DMA writes and our atomic loads are the only accesses, and the reference lives no longer than `self`
        // (which keeps the mapping and registration).
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Record `index` of a region laid out as 64-byte records, borrowed in place. Crate-only: its soundness
    /// rests on the ring protocol, which only the ring types enforce.
    ///
    /// The ring protocol makes this sound for a ring MR that peers write: the reader borrows slot `index` only
    /// after the completion that delivered it was reaped (the NIC has finished writing it, IB vol. 1 o9-20), and
    /// the writer does not write it again until the reader releases its seq, which needs `&mut` of the ring and
    /// so ends this borrow.
    ///
    /// # Panics
    /// If the record is outside the region.
    #[inline]
    pub(crate) fn record(&self, index: usize) -> &BookUpdate {
        let off = index * core::mem::size_of::<BookUpdate>();
        assert!(off + core::mem::size_of::<BookUpdate>() <= self.len, "record {index} outside {} bytes", self.len);
        // SAFETY: in bounds (checked) and 64-byte aligned (page-aligned map, 64-byte records); `BookUpdate` is
        // Pod, so any bytes are a valid value; no one writes the slot while it is borrowed (see above).
        unsafe { &*(self.map.as_ptr().add(off) as *const BookUpdate) }
    }

    /// Copies `bytes` to `offset`. `&mut self`: no borrow from [`MemoryRegion::record`] is alive.
    ///
    /// # Panics
    /// If the range is outside the region.
    #[inline]
    fn write_bytes(&mut self, offset: usize, bytes: &[u8]) {
        self.map[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered by `ibv_reg_mr`; deregistered once, before `map` is unmapped (fields drop after this).
        let rc = unsafe { sys::ibv_dereg_mr(self.raw) };
        if rc != 0 {
            tracing::error!(device = %self.pd.ctx.name(), errno = rc, bytes = self.len, "ibv_dereg_mr failed: a bug (the pages stay pinned)");
        }
    }
}

/// Which completion API a CQ was created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqKind {
    /// `ibv_create_cq(3)`, polled with `ibv_poll_cq(3)`.
    Classic,
    /// `ibv_create_cq_ex(3)`, polled with `ibv_start_poll`/`ibv_end_poll`; `timestamps` when
    /// created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
    Extended {
        /// Each WC carries the NIC's raw completion timestamp.
        timestamps: bool,
    },
}

enum RawCq {
    Classic(*mut sys::ibv_cq),
    Extended(*mut sys::ibv_cq_ex),
}

/// One reaped work completion, copied out of the provider's CQ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wc {
    /// The WR's 64-bit id.
    pub wr_id: u64,
    /// `enum ibv_wc_status` ([`WC_SUCCESS`] = 0). When not success, only `wr_id`, `status` and `qp_num` (classic)
    /// are meaningful.
    pub status: u32,
    /// `enum ibv_wc_opcode` ([`WC_RDMA_WRITE`], [`WC_RECV_RDMA_WITH_IMM`], ...).
    pub opcode: u32,
    /// Bytes transferred (receives).
    pub byte_len: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// The immediate, in host order (the WC carries it in network order, `__be32`), when the WC has one.
    pub imm_data: Option<u32>,
    /// Raw NIC completion timestamp (ticks of `hca_core_clock`, `completion_timestamp_mask` wide), when the CQ
    /// was created with timestamps.
    pub completion_ts: Option<u64>,
}

/// A completion queue: `ibv_create_cq(3)` or `ibv_create_cq_ex(3)`, destroyed with `ibv_destroy_cq`. Busy-polled;
/// no completion channel.
pub struct CompletionQueue {
    raw: RawCq,
    kind: CqKind,
    depth: u32,
    ctx: Arc<Context>,
}

// SAFETY: CQ handles are thread-safe for libibverbs (the provider locks inside poll); freed once, after every
// QP using it (each holds an Arc) is destroyed.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// `ibv_create_cq(3)` with room for `depth` CQEs (the provider may round up), no channel, vector 0.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for a depth over `max_cqe`, ENOMEM).
    pub fn create(ctx: &Arc<Context>, depth: u32) -> Result<Arc<CompletionQueue>, FabricError> {
        let object = || format!("{} (cq of {depth} entries)", ctx.name());
        let cqe = c_int::try_from(depth).map_err(|_| verbs_error("ibv_create_cq", object(), libc::EINVAL))?;
        // SAFETY: `ctx` is open; NULL context/channel are allowed ("no completion events").
        let raw = unsafe { sys::ibv_create_cq(ctx.raw, cqe, ptr::null_mut(), ptr::null_mut(), 0) };
        if raw.is_null() {
            return Err(verbs_error("ibv_create_cq", object(), last_errno()));
        }
        Ok(Arc::new(CompletionQueue { raw: RawCq::Classic(raw), kind: CqKind::Classic, depth, ctx: Arc::clone(ctx) }))
    }

    /// `ibv_create_cq_ex(3)` with room for `depth` CQEs, WCs carrying byte_len, imm and qp_num, and with
    /// `timestamps` also `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` (raw NIC clock ticks; see
    /// [`crate::verbs::timestamp`]).
    ///
    /// # Errors
    /// [`FabricError::Unsupported`] for EOPNOTSUPP (the provider has no extended CQ, or no timestamps: rxe);
    /// [`FabricError::Verbs`] with EINVAL / ENOMEM.
    pub fn create_ex(ctx: &Arc<Context>, depth: u32, timestamps: bool) -> Result<Arc<CompletionQueue>, FabricError> {
        let object = || format!("{} (extended cq of {depth} entries, timestamps {timestamps})", ctx.name());
        let mut wc_flags = sys::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN.0
            | sys::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_IMM.0
            | sys::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_QP_NUM.0;
        if timestamps {
            wc_flags |= sys::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0;
        }
        let mut attr = sys::ibv_cq_init_attr_ex {
            cqe: depth,
            cq_context: ptr::null_mut(),
            channel: ptr::null_mut(),
            comp_vector: 0,
            wc_flags: wc_flags as u64,
            comp_mask: 0,
            flags: 0,
            parent_domain: ptr::null_mut(),
        };
        // SAFETY: `ctx` is open; `attr` is a fully initialised attribute struct that outlives the call; comp_mask
        // 0 means the fields after wc_flags are ignored (so the verbs.h check on comp_mask is moot).
        let raw = unsafe {
            match verbs_ctx_op!(ctx.raw, create_cq_ex) {
                Some(create) => create(ctx.raw, &mut attr),
                None => return Err(verbs_error("ibv_create_cq_ex", object(), libc::EOPNOTSUPP)),
            }
        };
        if raw.is_null() {
            return Err(verbs_error("ibv_create_cq_ex", object(), last_errno()));
        }
        Ok(Arc::new(CompletionQueue {
            raw: RawCq::Extended(raw),
            kind: CqKind::Extended { timestamps },
            depth,
            ctx: Arc::clone(ctx),
        }))
    }

    /// Which API the CQ uses.
    pub fn kind(&self) -> CqKind {
        self.kind
    }

    /// The depth asked for at creation.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The `ibv_cq` view (what `ibv_create_qp` takes); valid while `self` is.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        match self.raw {
            RawCq::Classic(cq) => cq,
            // SAFETY: `ibv_cq_ex_to_cq` is a pointer cast (an `ibv_cq_ex` starts with the `ibv_cq` fields).
            RawCq::Extended(cq) => unsafe { sys::ibv_cq_ex_to_cq(cq) },
        }
    }

    /// Reaps up to `min(out.len(), POLL_BATCH)` completions into `out`, without blocking; returns how many.
    /// Classic: `ibv_poll_cq(3)`. Extended: `ibv_start_poll(3)` + `ibv_end_poll` per WC (see the rxe note inside).
    ///
    /// No allocation, lock (beyond the provider's own) or syscall.
    ///
    /// # Errors
    /// A negative code: `ibv_poll_cq`'s negative return, or minus the errno of `ibv_start_poll`
    /// (anything but ENOENT, which means "empty"). The CQ is then unusable (overrun or device failure).
    #[inline]
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize, i32> {
        let max = out.len().min(POLL_BATCH);
        if max == 0 {
            return Ok(0);
        }
        match self.raw {
            RawCq::Classic(cq) => {
                let mut raw: [MaybeUninit<sys::ibv_wc>; POLL_BATCH] = [const { MaybeUninit::uninit() }; POLL_BATCH];
                // SAFETY: `cq` is a live CQ; `raw` has room for `max` WCs; the provider writes `got` of them.
                let got = unsafe { sys::ibv_poll_cq(cq, max as c_int, raw.as_mut_ptr().cast()) };
                if got < 0 {
                    return Err(got);
                }
                let got = got as usize;
                for (dst, src) in out.iter_mut().zip(raw.iter()).take(got) {
                    // SAFETY: the first `got` entries were written by `ibv_poll_cq`.
                    let wc = unsafe { src.assume_init_ref() };
                    let imm = if wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
                        // SAFETY: both union members are u32; with IBV_WC_WITH_IMM it holds the immediate, __be32.
                        Some(u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }))
                    } else {
                        None
                    };
                    *dst = Wc {
                        wr_id: wc.wr_id,
                        status: wc.status,
                        opcode: wc.opcode,
                        byte_len: wc.byte_len,
                        qp_num: wc.qp_num,
                        imm_data: imm,
                        completion_ts: None,
                    };
                }
                Ok(got)
            }
            RawCq::Extended(cq) => {
                // One WC per start/end batch, never `ibv_next_poll`: rxe in rdma-core 44 (Debian 12) advances the
                // consumer index and unlocks in `next_poll` when it returns ENOENT, and again in `end_poll`, which
                // the man page says must still be called, so a batch that runs dry skips a CQE and double-unlocks
                // (fixed upstream: linux-rdma/rdma-core PRs #1512 and #1617). start -> read -> end is correct on
                // every provider, at the cost of a start/end pair per WC.
                let timestamps = matches!(self.kind, CqKind::Extended { timestamps: true });
                let mut n = 0;
                while n < max {
                    let mut attr = sys::ibv_poll_cq_attr { comp_mask: 0 };
                    // SAFETY: `cq` is a live extended CQ, `attr` a valid attribute; a 0 return starts a poll batch
                    // that is ended with `ibv_end_poll` below; ENOENT or an error starts none.
                    let rc = unsafe { sys::ibv_start_poll(cq, &mut attr) };
                    if rc == libc::ENOENT {
                        break;
                    }
                    if rc != 0 {
                        return Err(-rc.abs());
                    }
                    // SAFETY: inside the batch just started, the current WC's fields may be read with these
                    // accessors (the ones requested at creation); then the batch is ended exactly once.
                    unsafe {
                        out[n] = read_current_ex(cq, timestamps);
                        sys::ibv_end_poll(cq);
                    }
                    n += 1;
                }
                Ok(n)
            }
        }
    }
}

/// Copies the current WC of an extended CQ's poll batch.
///
/// # Safety
/// `cq` is a live extended CQ inside a poll batch (`ibv_start_poll` returned 0), created with
/// byte_len, imm and qp_num, and with the completion timestamp when `timestamps`.
unsafe fn read_current_ex(cq: *mut sys::ibv_cq_ex, timestamps: bool) -> Wc {
    // SAFETY: per the function's contract, `wr_id` and `status` are the current WC's and the read_* accessors are
    // valid for fields requested at creation; for an error WC only wr_id, status and vendor_err are defined, so
    // nothing else is read then.
    unsafe {
        let wr_id = (*cq).wr_id;
        let status = (*cq).status;
        if status != WC_SUCCESS {
            return Wc { wr_id, status, ..Wc::default() };
        }
        let flags = sys::ibv_wc_read_wc_flags(cq);
        let imm_data = if flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            Some(u32::from_be(sys::ibv_wc_read_imm_data(cq)))
        } else {
            None
        };
        Wc {
            wr_id,
            status,
            opcode: sys::ibv_wc_read_opcode(cq),
            byte_len: sys::ibv_wc_read_byte_len(cq),
            qp_num: sys::ibv_wc_read_qp_num(cq),
            imm_data,
            completion_ts: timestamps.then(|| sys::ibv_wc_read_completion_ts(cq)),
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let cq = self.as_raw();
        // SAFETY: created by ibv_create_cq(_ex); every QP using it held an Arc and is destroyed.
        let rc = unsafe { sys::ibv_destroy_cq(cq) };
        if rc != 0 {
            tracing::error!(device = %self.ctx.name(), errno = rc, "ibv_destroy_cq failed: a bug (EBUSY: a QP still uses it)");
        }
    }
}

/// Capacities of a QP: asked for at creation, and as granted (`ibv_create_qp` writes back the real values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send WRs the queue holds.
    pub max_send_wr: u32,
    /// Receive WRs the queue holds.
    pub max_recv_wr: u32,
    /// Largest `IBV_SEND_INLINE` payload in bytes.
    pub max_inline_data: u32,
}

/// Address and sequence parameters for RESET/INIT -> RTR (`ibv_modify_qp(3)`, IB vol. 1, 11.2.4.2 / 12.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttrs {
    /// Our port.
    pub port_num: u8,
    /// Path MTU as `enum ibv_mtu`.
    pub path_mtu: u32,
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// The peer's initial send PSN (our expected receive PSN).
    pub rq_psn: u32,
    /// The peer's GID (the GRH destination).
    pub dgid: [u8; 16],
    /// The peer's LID (0 on RoCE).
    pub dlid: u16,
    /// Our GID index (GRH source).
    pub sgid_index: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// RNR NAK delay code we ask the peer to wait.
    pub min_rnr_timer: u8,
    /// RDMA READ / atomic requests we accept in flight (we take none, but RTR requires the attribute).
    pub max_dest_rd_atomic: u8,
}

/// Parameters for RTR -> RTS (`ibv_modify_qp(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttrs {
    /// Our initial send PSN (the peer's `rq_psn`).
    pub sq_psn: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RDMA READ / atomic requests we issue in flight.
    pub max_rd_atomic: u8,
}

/// A reliable-connected queue pair: `ibv_create_qp(3)` with `IBV_QPT_RC`, destroyed with `ibv_destroy_qp`.
/// Send and receive completions both go to one CQ.
///
/// The QP owns the [`WriteBatch`] its send WRs are built in ([`QueuePair::send_batch`], posted with
/// [`QueuePair::post_send`]), so the registered staging memory the NIC reads for a posted WRITE cannot be freed
/// while the QP can still process it: `Drop` destroys the QP (no WR is processed after `ibv_destroy_qp`
/// returns) before the batch is dropped.
pub struct QueuePair {
    raw: *mut sys::ibv_qp,
    qpn: u32,
    caps: QpCaps,
    // Drop order: the QP is destroyed in Drop before these fields are released.
    send: WriteBatch,
    cq: Arc<CompletionQueue>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: QP verbs (modify, post) are thread-safe in libibverbs; the handle is destroyed once, in Drop.
unsafe impl Send for QueuePair {}
// SAFETY: as above; every `&self` method is a thread-safe verb.
unsafe impl Sync for QueuePair {}

/// Why a post failed: the errno `ibv_post_send`/`ibv_post_recv` returned (EINVAL, ENOMEM: queue full, EFAULT).
pub type PostErrno = i32;

impl QueuePair {
    /// `ibv_create_qp(3)`: an RC QP in `pd` with `cq` for both queues, one SGE per WR, no SRQ, and
    /// `sq_sig_all = 0` (WRs are signalled one by one), owning `send` (registered in `pd`) for its send WRs. If
    /// the device refuses the inline size (EINVAL), it is retried once with `max_inline_data = 0`. The QP starts
    /// in RESET.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for capacities over the device's, ENOMEM, ENOSYS).
    pub fn create_rc(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        want: QpCaps,
        send: WriteBatch,
    ) -> Result<QueuePair, FabricError> {
        let mut caps = want;
        loop {
            let mut attr = sys::ibv_qp_init_attr {
                qp_context: ptr::null_mut(),
                send_cq: cq.as_raw(),
                recv_cq: cq.as_raw(),
                srq: ptr::null_mut(),
                cap: sys::ibv_qp_cap {
                    max_send_wr: caps.max_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: caps.max_inline_data,
                },
                qp_type: sys::ibv_qp_type::IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: `pd` and `cq` are live objects of the same context; `attr` is fully initialised; the call
            // writes the granted capacities back into `attr.cap`.
            let raw = unsafe { sys::ibv_create_qp(pd.raw, &mut attr) };
            if raw.is_null() {
                let errno = last_errno();
                if errno == libc::EINVAL && caps.max_inline_data > 0 {
                    tracing::info!(device = %pd.ctx.name(), max_inline_data = caps.max_inline_data,
                        "ibv_create_qp refused this inline size; retrying without inline data");
                    caps.max_inline_data = 0;
                    continue;
                }
                return Err(verbs_error(
                    "ibv_create_qp",
                    format!("{} (RC, {} send / {} recv WRs)", pd.ctx.name(), caps.max_send_wr, caps.max_recv_wr),
                    errno,
                ));
            }
            // SAFETY: `raw` is the QP just created; qp_num is a plain integer field.
            let qpn = unsafe { (*raw).qp_num };
            let granted = QpCaps {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_inline_data: attr.cap.max_inline_data,
            };
            return Ok(QueuePair { raw, qpn, caps: granted, send, cq: Arc::clone(cq), pd: Arc::clone(pd) });
        }
    }

    /// The 24-bit QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The capacities the device granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The CQ of both queues.
    pub fn cq(&self) -> &Arc<CompletionQueue> {
        &self.cq
    }

    /// The raw `ibv_qp`; valid while `self` is.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.raw
    }

    fn object(&self) -> String {
        format!("{} qpn {:#x}", self.pd.ctx.name(), self.qpn)
    }

    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32, what: &str) -> Result<(), FabricError> {
        // SAFETY: `raw` is a live QP; `attr` is initialised for every field named in `mask`.
        let rc = unsafe { sys::ibv_modify_qp(self.raw, attr, mask as c_int) };
        if rc != 0 {
            return Err(verbs_error("ibv_modify_qp", format!("{} ({what})", self.object()), rc));
        }
        Ok(())
    }

    fn zeroed_attr() -> sys::ibv_qp_attr {
        // SAFETY: `ibv_qp_attr` is plain data (integers, and the address vector of integers and byte arrays);
        // all-zero is a valid value, and the fields not named in a mask are ignored.
        unsafe { MaybeUninit::<sys::ibv_qp_attr>::zeroed().assume_init() }
    }

    /// RESET -> INIT (`ibv_modify_qp(3)` with STATE | PKEY_INDEX | PORT | ACCESS_FLAGS; pkey index 0). `access`
    /// is what the peer may do through this QP (REMOTE_WRITE for both of our sides).
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for a bad port or a state the QP is not in).
    pub fn to_init(&self, port_num: u8, access: Access) -> Result<(), FabricError> {
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port_num;
        a.qp_access_flags = access.0;
        let m = sys::ibv_qp_attr_mask::IBV_QP_STATE.0
            | sys::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | sys::ibv_qp_attr_mask::IBV_QP_PORT.0
            | sys::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        self.modify(&mut a, m, "RESET->INIT")
    }

    /// INIT -> RTR against the peer in `r` (STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC |
    /// MIN_RNR_TIMER). The address vector always carries a GRH (`is_global = 1`): RoCE needs it, IB accepts it.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL for a bad attribute, e.g. a GID index outside the table or
    /// an MTU over the port's; ETIMEDOUT when the kernel cannot resolve the peer's address on RoCE).
    pub fn to_rtr(&self, r: &RtrAttrs) -> Result<(), FabricError> {
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = r.path_mtu;
        a.dest_qp_num = r.dest_qp_num;
        a.rq_psn = r.rq_psn;
        a.max_dest_rd_atomic = r.max_dest_rd_atomic;
        a.min_rnr_timer = r.min_rnr_timer;
        a.ah_attr = sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: r.dgid },
                flow_label: 0,
                sgid_index: r.sgid_index,
                hop_limit: r.hop_limit,
                traffic_class: r.traffic_class,
            },
            dlid: r.dlid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: r.port_num,
        };
        let m = sys::ibv_qp_attr_mask::IBV_QP_STATE.0
            | sys::ibv_qp_attr_mask::IBV_QP_AV.0
            | sys::ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
            | sys::ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
            | sys::ibv_qp_attr_mask::IBV_QP_RQ_PSN.0
            | sys::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | sys::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        self.modify(&mut a, m, "INIT->RTR")
    }

    /// RTR -> RTS (STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC).
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno (EINVAL).
    pub fn to_rts(&self, r: &RtsAttrs) -> Result<(), FabricError> {
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = r.sq_psn;
        a.timeout = r.timeout;
        a.retry_cnt = r.retry_cnt;
        a.rnr_retry = r.rnr_retry;
        a.max_rd_atomic = r.max_rd_atomic;
        let m = sys::ibv_qp_attr_mask::IBV_QP_STATE.0
            | sys::ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | sys::ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | sys::ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | sys::ibv_qp_attr_mask::IBV_QP_SQ_PSN.0
            | sys::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(&mut a, m, "RTR->RTS")
    }

    /// Any state -> ERR: outstanding WRs complete with `IBV_WC_WR_FLUSH_ERR`.
    ///
    /// # Errors
    /// [`FabricError::Verbs`] with the errno.
    pub fn to_error(&self) -> Result<(), FabricError> {
        let mut a = Self::zeroed_attr();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
        self.modify(&mut a, sys::ibv_qp_attr_mask::IBV_QP_STATE.0, "->ERR")
    }

    /// Posts the first `count` WRs of `batch` (zero-SGE receives) with one `ibv_post_recv(3)`.
    ///
    /// # Errors
    /// The errno `ibv_post_recv` returned (ENOMEM: the receive queue is full; EINVAL: the QP is in RESET or
    /// ERR). None of the WRs from the failing one on were posted.
    #[inline]
    pub fn post_recv(&self, batch: &mut RecvBatch, count: usize) -> Result<(), PostErrno> {
        let count = count.min(batch.wrs.len());
        if count == 0 {
            return Ok(());
        }
        let last = count - 1;
        batch.wrs[last].next = ptr::null_mut();
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: `raw` is a live QP; the list is `count` initialised, linked WRs ending in NULL, with no SGEs
        // (nothing for the NIC to write but the WC); the provider copies them before returning.
        let rc = unsafe { sys::ibv_post_recv(self.raw, batch.wrs.as_mut_ptr(), &mut bad) };
        if let Some(next) = batch.wrs.get_mut(last + 1).map(|w| w as *mut sys::ibv_recv_wr) {
            batch.wrs[last].next = next;
        }
        if rc != 0 {
            return Err(rc);
        }
        Ok(())
    }

    /// The batch send WRs are collected in ([`WriteBatch::push`]) before [`QueuePair::post_send`].
    #[inline]
    pub fn send_batch(&mut self) -> &mut WriteBatch {
        &mut self.send
    }

    /// Posts every WR collected in the QP's send batch with one `ibv_post_send(3)` (one doorbell), and empties it.
    /// The NIC reads the staging slots until each WR's WC (inline WRs are copied during this call); the batch
    /// lives as long as the QP.
    ///
    /// # Errors
    /// The errno `ibv_post_send` returned (ENOMEM: the send queue is full; EINVAL: bad WR or QP state). The WRs
    /// from the failing one on were not posted; the batch is emptied either way.
    #[inline]
    pub fn post_send(&mut self) -> Result<(), PostErrno> {
        let batch = &mut self.send;
        let count = batch.len;
        if count == 0 {
            return Ok(());
        }
        let last = count - 1;
        batch.wrs[last].next = ptr::null_mut();
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: `raw` is a live QP; the list is `count` WRs filled by `WriteBatch::push` and linked, ending in
        // NULL; each SGE points into `batch.staging`, registered in this QP's PD and owned by the QP, so alive
        // until the QP is destroyed; inline payloads are read during the call.
        let rc = unsafe { sys::ibv_post_send(self.raw, batch.wrs.as_mut_ptr(), &mut bad) };
        if let Some(next) = batch.wrs.get_mut(last + 1).map(|w| w as *mut sys::ibv_send_wr) {
            batch.wrs[last].next = next;
        }
        batch.len = 0;
        if rc != 0 {
            return Err(rc);
        }
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp and destroyed once; its CQ and PD are still held by our Arcs.
        let rc = unsafe { sys::ibv_destroy_qp(self.raw) };
        if rc != 0 {
            tracing::error!(qp = %self.object(), errno = rc, "ibv_destroy_qp failed: a bug");
        }
    }
}

/// A pre-linked list of zero-SGE receive WRs (`ibv_recv_wr` with `num_sge = 0`), all with the same `wr_id`.
/// A WRITE-with-immediate consumes one and puts no data in it: the data lands at the WRITE's remote address.
pub struct RecvBatch {
    wrs: Box<[sys::ibv_recv_wr]>,
}

// SAFETY: the WRs' `next` pointers point into `wrs`' own heap storage (which moves with the box, never
// reallocated) and their SGE lists are NULL; nothing is shared with another thread.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// A list of `capacity` (>= 1) receive WRs with id `wr_id`.
    pub fn new(capacity: usize, wr_id: u64) -> RecvBatch {
        let capacity = capacity.max(1);
        let mut wrs: Box<[sys::ibv_recv_wr]> = (0..capacity)
            .map(|_| sys::ibv_recv_wr { wr_id, next: ptr::null_mut(), sg_list: ptr::null_mut(), num_sge: 0 })
            .collect();
        for i in 0..capacity - 1 {
            let next: *mut sys::ibv_recv_wr = &mut wrs[i + 1];
            wrs[i].next = next;
        }
        RecvBatch { wrs }
    }

    /// WRs in the list.
    pub fn capacity(&self) -> usize {
        self.wrs.len()
    }
}

/// One RDMA WRITE to add to a [`WriteBatch`].
#[derive(Debug, Clone, Copy)]
pub struct RdmaWrite<'a> {
    /// Comes back in the WC (if signalled).
    pub wr_id: u64,
    /// Which staging slot of the batch holds the payload until the WR completes.
    pub staging_slot: usize,
    /// The payload (at most the batch's slot size; empty = a zero-length WRITE, no SGE).
    pub payload: &'a [u8],
    /// Destination address in the peer's MR.
    pub remote_addr: u64,
    /// The peer MR's rkey.
    pub rkey: u32,
    /// `Some(imm)`: `IBV_WR_RDMA_WRITE_WITH_IMM` carrying `imm` (host order; sent as `imm.to_be()`, the
    /// `__be32` the verbs API wants); `None`: a plain `IBV_WR_RDMA_WRITE`.
    pub imm_data: Option<u32>,
    /// `IBV_SEND_SIGNALED`: produce a WC.
    pub signaled: bool,
    /// `IBV_SEND_INLINE`: the payload is copied into the WQE at post time (only if it fits `max_inline_data`).
    pub inline: bool,
}

/// A preallocated, pre-linked list of send WRs with one registered staging slot per send-queue entry, owned by a
/// [`QueuePair`] and posted with [`QueuePair::post_send`] (doorbell batching). Pushing copies the payload into its staging slot; nothing is
/// allocated after construction.
pub struct WriteBatch {
    wrs: Box<[sys::ibv_send_wr]>,
    sges: Box<[sys::ibv_sge]>,
    len: usize,
    slot_bytes: usize,
    staging_slots: usize,
    staging: MemoryRegion,
}

// SAFETY: `wrs[i].next` and `wrs[i].sg_list` point into this struct's own boxed storage (stable heap addresses),
// and SGEs into its own MR; the struct is used through `&mut self` only.
unsafe impl Send for WriteBatch {}

impl WriteBatch {
    /// A batch of up to `capacity` WRs, with `staging_slots` registered slots of `slot_bytes` (local access
    /// only: the NIC reads them for the WRITEs) in `pd`.
    ///
    /// # Errors
    /// As [`MemoryRegion::register`].
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        capacity: usize,
        staging_slots: usize,
        slot_bytes: usize,
    ) -> Result<WriteBatch, FabricError> {
        let capacity = capacity.max(1);
        let staging_slots = staging_slots.max(1);
        let staging = MemoryRegion::register(pd, staging_slots * slot_bytes.max(1), Access::LOCAL_READ)?;
        let mut sges: Box<[sys::ibv_sge]> =
            (0..capacity).map(|_| sys::ibv_sge { addr: 0, length: 0, lkey: staging.lkey() }).collect();
        let mut wrs: Box<[sys::ibv_send_wr]> = (0..capacity)
            .map(|_| {
                // SAFETY: `ibv_send_wr` is plain data (integers, raw pointers, unions of those): all-zero is a
                // valid value (NULL pointers, opcode 0, no flags); each field used is set by `push`.
                unsafe { MaybeUninit::<sys::ibv_send_wr>::zeroed().assume_init() }
            })
            .collect();
        for i in 0..capacity {
            let sge: *mut sys::ibv_sge = &mut sges[i];
            wrs[i].sg_list = sge;
            if i + 1 < capacity {
                let next: *mut sys::ibv_send_wr = &mut wrs[i + 1];
                wrs[i].next = next;
            }
        }
        Ok(WriteBatch { wrs, sges, len: 0, slot_bytes, staging_slots, staging })
    }

    /// WRs collected and not yet posted.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is waiting to be posted.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most WRs one post carries.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.wrs.len()
    }

    /// Appends `w`, copying its payload into staging slot `w.staging_slot`. Returns `false` (and adds nothing)
    /// when the batch is full, the slot does not exist or the payload is larger than a slot.
    ///
    /// The caller must not reuse a staging slot whose WR may still be read by the NIC (not inline and not yet
    /// completed): the publisher uses slot `post_index % send_queue_depth` and never has more than
    /// `send_queue_depth` WRs outstanding.
    #[inline]
    #[must_use]
    pub fn push(&mut self, w: &RdmaWrite<'_>) -> bool {
        if self.len == self.wrs.len() || w.staging_slot >= self.staging_slots || w.payload.len() > self.slot_bytes {
            return false;
        }
        let offset = w.staging_slot * self.slot_bytes;
        self.staging.write_bytes(offset, w.payload);
        let i = self.len;
        self.sges[i].addr = self.staging.addr() + offset as u64;
        self.sges[i].length = w.payload.len() as u32;
        let wr = &mut self.wrs[i];
        wr.wr_id = w.wr_id;
        wr.num_sge = if w.payload.is_empty() { 0 } else { 1 };
        let mut flags = 0;
        if w.signaled {
            flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if w.inline && !w.payload.is_empty() {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        match w.imm_data {
            Some(imm) => {
                wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            None => {
                wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.imm_data_invalidated_rkey_union.imm_data = 0;
            }
        }
        wr.wr.rdma = sys::rdma_t { remote_addr: w.remote_addr, rkey: w.rkey };
        self.len += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_is_reported_by_name_on_a_host_without_rdma() {
        let has_rdma = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
        match Context::open(None) {
            Err(FabricError::NoDevice(msg)) => {
                assert!(!has_rdma, "a device is in /sys/class/infiniband but open said: {msg}");
                assert!(msg.contains("ibv_get_device_list"), "{msg}");
            }
            Err(other) => panic!("expected NoDevice, got {other}"),
            Ok(ctx) => assert!(has_rdma, "opened {} without /sys/class/infiniband", ctx.name()),
        }
        if !has_rdma {
            let msg = Context::open(Some("mlx5_7")).err().unwrap().to_string();
            assert!(msg.starts_with("no RDMA device: ") && msg.contains("ibv_get_device_list"), "{msg}");
        }
    }

    #[test]
    fn extended_ops_are_found_where_verbs_h_finds_them() {
        unsafe extern "C" fn fake_query(
            _: *mut sys::ibv_context,
            _: *const sys::ibv_query_device_ex_input,
            _: *mut sys::ibv_device_attr_ex,
            _: usize,
        ) -> c_int {
            42
        }
        let mut v: Box<MaybeUninit<sys::verbs_context>> = Box::new(MaybeUninit::zeroed());
        let vp = v.as_mut_ptr();
        let full = std::mem::size_of::<sys::verbs_context>();
        let need = full - std::mem::offset_of!(sys::verbs_context, query_device_ex);
        // SAFETY: a zeroed verbs_context is a valid value (NULL pointers, `None` ops, zero integers); `ctx` points
        // at its embedded ibv_context, as a provider's would; the fake op ignores its arguments.
        unsafe {
            (*vp).sz = full;
            (*vp).query_device_ex = Some(fake_query);
            let ctx = ptr::addr_of_mut!((*vp).context);
            (*ctx).abi_compat = usize::MAX as *mut libc::c_void; // __VERBS_ABI_IS_EXTENDED
            let op = verbs_ctx_op!(ctx, query_device_ex);
            assert_eq!(op.map(|f| f(ctx, ptr::null(), ptr::null_mut(), 0)), Some(42));
            assert!(verbs_ctx_op!(ctx, create_cq_ex).is_none(), "a NULL op is missing");
            (*vp).sz = need - 1;
            assert!(verbs_ctx_op!(ctx, query_device_ex).is_none(), "a verbs_context too old for the op");
            (*vp).sz = need;
            assert!(verbs_ctx_op!(ctx, query_device_ex).is_some());
            (*ctx).abi_compat = u32::MAX as usize as *mut libc::c_void; // what rdma-sys 0.3 compares with
            assert!(verbs_ctx_op!(ctx, query_device_ex).is_none(), "not an extended context");
        }
    }

    #[test]
    fn access_flags_are_the_verbs_h_values() {
        assert_eq!(Access::LOCAL_READ.bits(), 0);
        assert_eq!(Access::LOCAL_WRITE.bits(), 1);
        assert_eq!(Access::REMOTE_WRITE.bits(), 1 | 2, "REMOTE_WRITE always carries LOCAL_WRITE");
        assert_eq!(WC_RECV_RDMA_WITH_IMM, 129);
        assert_eq!(std::mem::size_of::<sys::ibv_wc>(), 48, "struct ibv_wc of verbs.h");
    }
}
