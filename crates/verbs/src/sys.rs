//! The crate's `unsafe` code for devices, PDs and MRs: calls into libibverbs through
//! `crate::ffi`, which loads `libibverbs.so.1` at the first call of
//! [`open_devices`] (the process starts without it, docs/verbs-provider.md, checked in
//! a chroot without rdma-core); if it cannot, [`open_devices`] says so
//! ([`ListError::NoLibrary`]) and no object of this module exists. Every object holds
//! the loaded table (`&'static ffi::Verbs`) it was made with.
//!
//! # Invariants (what makes the safe wrappers below sound)
//!
//! 1. Ownership: each wrapper owns exactly one rdma-core object and destroys it once,
//!    in `Drop` (`ibv_close_device`, `ibv_dealloc_pd`, `ibv_dereg_mr`). Pointers are
//!    non-null (checked at creation) and never handed out.
//! 2. Destruction order follows rdma-core's parent/child rule (a PD before its
//!    context, an MR before its PD): a child holds an `Arc` of its parent, so the
//!    parent is dropped after every child.
//! 3. The device list lives only inside [`open_devices`]: devices are opened while
//!    it exists and it is freed before returning (ibv_get_device_list(3): after
//!    `ibv_free_device_list` only opened devices may be used).
//! 4. Registered memory: an [`Mr`] is created only by `crate::mr::VerbsRegistrar`,
//!    i.e. by the `rdma` crate's `ProtectionDomain`, whose `rdma::Registrar` contract
//!    keeps the memory allocated and unmoved until the `Mr` is dropped (the region
//!    drops its device registration before its memory), and never lets the device
//!    write shared (immutable) bytes (the `rdma` crate refuses write rights for them
//!    on a device's PD). What the device writes into a buffer while the CPU reads it
//!    is the consumer's to avoid (no CPU access while work is outstanding on the
//!    region), as on every verbs provider.
//! 6. Contexts of CM ids: librdmacm opens the device context of a CM id itself
//!    (`cm_id->verbs`) and keeps it open while any id uses the device, also after
//!    DEVICE_REMOVAL until the last id is destroyed. A [`Context`] made from it
//!    ([`Context::from_cm`]) holds the id's wrapper, so the context outlives every
//!    PD, CQ and MR made on it, and is never closed by us.
//! 7. Addressing: regions are registered with `ibv_reg_mr` (VA-based), so the
//!    device names a region's byte `i` by its virtual address, both in local SGEs
//!    (with the lkey) and remotely (with the rkey). Zero-based registration
//!    (`ibv_reg_mr_iova` at IOVA 0) is refused by the kernel (EINVAL, checked on
//!    rxe) unless the memory starts on a page boundary, which the `rdma` crate's
//!    regions need not.
//! 8. Asynchronous events: [`Context::next_async_event`] acknowledges every event it
//!    gets (`ibv_ack_async_event`) before returning a copy, so nothing waits on an
//!    unacknowledged event, and it reads the union member the event type says
//!    (`port_num` only for port events).
//! 5. Threads: libibverbs verbs may be called from any thread on shared objects
//!    (rdma-core's locking; RDMAmojo, "libibverbs thread safe level"), and none of
//!    these wrappers mutates through `&self`, so they are `Send` and `Sync`.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::ffi;

/// An open device context (`struct ibv_context`) and what the device list said about
/// the device.
pub(crate) struct Context {
    ptr: NonNull<ffi::ibv_context>,
    /// libibverbs, loaded (`crate::ffi` invariant 3).
    v: &'static ffi::Verbs,
    /// `None`: opened by [`open_devices`], closed in `Drop`. `Some`: librdmacm's
    /// context of a CM id (invariant 6), kept open by that id, never closed here.
    cm_owner: Option<Arc<dyn Send + Sync>>,
    name: String,
    /// `ibv_device.transport_type` (`IBV_TRANSPORT_*`).
    transport: i32,
    /// `ibv_device.node_type` (`IBV_NODE_*`).
    node_type: i32,
}

// SAFETY: invariant 5.
unsafe impl Send for Context {}
// SAFETY: invariant 5.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: invariant 1 (owned, closed once); invariant 2 (no PD outlives it).
        if self.cm_owner.is_none() {
            // SAFETY: invariant 1 (owned, closed once); invariant 2 (no PD outlives
            // it). A failure cannot be handled here; the kernel releases the context
            // with the file descriptor anyway.
            unsafe { (self.v.ibv_close_device)(self.ptr.as_ptr()) };
        }
    }
}

/// The fields of `ibv_device_attr` this crate uses, copied out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawDeviceAttr {
    pub(crate) max_mr_size: u64,
    pub(crate) max_qp_wr: i32,
    pub(crate) max_sge: i32,
    pub(crate) max_mr: i32,
    pub(crate) max_qp_rd_atom: i32,
    pub(crate) max_qp_init_rd_atom: i32,
    pub(crate) phys_port_cnt: u8,
    pub(crate) vendor_id: u32,
    pub(crate) vendor_part_id: u32,
}

/// The fields of `ibv_port_attr` this crate uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawPortAttr {
    /// `IBV_PORT_*` (4 = ACTIVE).
    pub(crate) state: u32,
    /// `IBV_LINK_LAYER_*` (1 = InfiniBand, 2 = Ethernet).
    pub(crate) link_layer: u8,
    /// `IBV_MTU_*` enum (1 = 256 ... 5 = 4096).
    pub(crate) active_mtu: u32,
}

/// One asynchronous event of a device (`struct ibv_async_event`), copied out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawAsyncEvent {
    /// `IBV_EVENT_*`.
    pub(crate) event_type: u32,
    /// The port, for port events.
    pub(crate) port: Option<u8>,
}

/// Whether `IBV_EVENT_*` `t` names a port (`element.port_num`).
pub(crate) fn is_port_event(t: u32) -> bool {
    use ffi::ibv_event_type::*;
    matches!(
        t,
        IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE
    )
}

/// Why [`open_devices`] has no list.
#[derive(Debug)]
pub(crate) enum ListError {
    /// libibverbs could not be loaded (or lacks a function this crate calls). The
    /// `ffi::LoadError` is not kept: `OpenError::NoLibrary` has no room for it.
    NoLibrary,
    /// `ibv_get_device_list` failed with this errno (ENOSYS: no RDMA in the kernel).
    Os(io::Error),
}

/// A listed device, opened, or its name and why it could not be.
pub(crate) type Opened = Result<Context, (String, io::Error)>;

/// Opens every device libibverbs lists, loading libibverbs at the first call. A
/// device that fails to open is returned as its name and error, so one bad device
/// does not hide the others.
pub(crate) fn open_devices() -> Result<Vec<Opened>, ListError> {
    let v = ffi::verbs().map_err(|_| ListError::NoLibrary)?;
    let mut n: std::os::raw::c_int = 0;
    // SAFETY: `n` is a valid out pointer; the list is freed below (invariant 3).
    let list = unsafe { (v.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Err(ListError::Os(io::Error::last_os_error()));
    }
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: ibv_get_device_list returned `n` valid device pointers (then NULL).
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a live entry of the list; name is a NUL-terminated array.
        let (name, transport, node_type) = unsafe {
            let d = &*dev;
            (
                CStr::from_ptr(d.name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
                d.transport_type,
                d.node_type,
            )
        };
        // SAFETY: `dev` is a live entry of the list (invariant 3).
        let ctx = unsafe { (v.ibv_open_device)(dev) };
        out.push(match NonNull::new(ctx) {
            Some(ptr) => Ok(Context {
                ptr,
                v,
                cm_owner: None,
                name,
                transport,
                node_type,
            }),
            None => Err((name, io::Error::last_os_error())),
        });
    }
    // SAFETY: the list came from ibv_get_device_list and is freed once; opened
    // contexts stay valid (invariant 3).
    unsafe { (v.ibv_free_device_list)(list) };
    Ok(out)
}

impl Context {
    /// The device context librdmacm opened for a CM id (`cm_id->verbs`), kept open by
    /// `owner` (the id's wrapper: librdmacm holds a device reference per id and
    /// closes the context only when no id uses it any more, invariant 6).
    ///
    /// # Safety
    /// `ptr` is `cm_id->verbs` of a live CM id that `owner` destroys only when
    /// dropped; `v` is the libibverbs librdmacm was loaded with.
    pub(crate) unsafe fn from_cm(
        ptr: NonNull<ffi::ibv_context>,
        v: &'static ffi::Verbs,
        owner: Arc<dyn Send + Sync>,
    ) -> Context {
        // SAFETY: a live context (this function's contract) names its device.
        let (name, transport, node_type) = unsafe {
            let d = &*(*ptr.as_ptr()).device;
            (
                CStr::from_ptr(d.name.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
                d.transport_type,
                d.node_type,
            )
        };
        Context {
            ptr,
            v,
            cm_owner: Some(owner),
            name,
            transport,
            node_type,
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.ptr.as_ptr()
    }

    /// The loaded libibverbs this context was opened with.
    pub(crate) fn verbs(&self) -> &'static ffi::Verbs {
        self.v
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn transport(&self) -> i32 {
        self.transport
    }

    pub(crate) fn node_type(&self) -> i32 {
        self.node_type
    }

    /// The descriptor libibverbs delivers this context's asynchronous events on
    /// (`ibv_context.async_fd`), open as long as the context is.
    pub(crate) fn async_fd(&self) -> std::os::fd::RawFd {
        // SAFETY: live context (invariant 1).
        unsafe { (*self.ptr.as_ptr()).async_fd }
    }

    /// The next asynchronous event, acknowledged (invariant 8); `None` when there is
    /// none now (the descriptor must be non-blocking: EAGAIN).
    pub(crate) fn next_async_event(&self) -> io::Result<Option<RawAsyncEvent>> {
        let mut ev = MaybeUninit::<ffi::ibv_async_event>::zeroed();
        // SAFETY: live context (invariant 1); `ev` is a valid out pointer.
        let rc = unsafe { (self.v.ibv_get_async_event)(self.ptr.as_ptr(), ev.as_mut_ptr()) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: filled in by a successful call.
        let event_type = unsafe { (*ev.as_ptr()).event_type };
        let port = is_port_event(event_type)
            // SAFETY: the member a port event sets (invariant 8).
            .then(|| unsafe { (*ev.as_ptr()).element.port_num })
            .and_then(|p| u8::try_from(p).ok());
        // SAFETY: the event got above, acknowledged once (invariant 8).
        unsafe { (self.v.ibv_ack_async_event)(ev.as_mut_ptr()) };
        Ok(Some(RawAsyncEvent { event_type, port }))
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> io::Result<RawDeviceAttr> {
        let mut a = MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: live context (invariant 1); `a` is a valid out pointer.
        let rc = unsafe { (self.v.ibv_query_device)(self.ptr.as_ptr(), a.as_mut_ptr()) };
        if rc != 0 {
            return Err(errno(rc));
        }
        // SAFETY: zero-initialised plain C data, filled in by a successful call.
        let a = unsafe { a.assume_init() };
        Ok(RawDeviceAttr {
            max_mr_size: a.max_mr_size,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_mr: a.max_mr,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            phys_port_cnt: a.phys_port_cnt,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
        })
    }

    /// `ibv_query_port` (ports are numbered from 1), as verbs.h's inline wrapper
    /// does it (`crate::ffi::ibv_query_port`).
    pub(crate) fn query_port(&self, port: u8) -> io::Result<RawPortAttr> {
        let mut a = MaybeUninit::<ffi::ibv_port_attr>::zeroed();
        // SAFETY: live context (invariant 1); `a` is a valid out pointer.
        let rc = unsafe { ffi::ibv_query_port(self.v, self.ptr.as_ptr(), port, a.as_mut_ptr()) };
        if rc != 0 {
            return Err(errno(rc));
        }
        // SAFETY: zero-initialised plain C data, filled in by a successful call.
        let a = unsafe { a.assume_init() };
        Ok(RawPortAttr {
            state: a.state,
            link_layer: a.link_layer,
            active_mtu: a.active_mtu,
        })
    }
}

/// A protection domain (`struct ibv_pd`).
pub(crate) struct Pd {
    ptr: NonNull<ffi::ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: invariant 5.
unsafe impl Send for Pd {}
// SAFETY: invariant 5.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub(crate) fn alloc(ctx: &Arc<Context>) -> io::Result<Pd> {
        // SAFETY: live context (invariant 1).
        let pd = unsafe { (ctx.v.ibv_alloc_pd)(ctx.ptr.as_ptr()) };
        match NonNull::new(pd) {
            Some(ptr) => Ok(Pd {
                ptr,
                ctx: ctx.clone(),
            }),
            None => Err(io::Error::last_os_error()),
        }
    }
}

impl Pd {
    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.ptr.as_ptr()
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: invariants 1 and 2 (every Mr holds an Arc of its Pd, so none is left).
        unsafe { (self.ctx.v.ibv_dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A memory registration (`struct ibv_mr`) of memory the `rdma` crate keeps alive
/// (invariant 4).
pub(crate) struct Mr {
    ptr: NonNull<ffi::ibv_mr>,
    lkey: u32,
    rkey: u32,
    pd: Arc<Pd>,
}

// SAFETY: invariant 5; the Mr holds no memory, only the registration.
unsafe impl Send for Mr {}
// SAFETY: invariant 5.
unsafe impl Sync for Mr {}

/// The `IBV_ACCESS_*` bits this crate registers with (none in
/// `IBV_ACCESS_OPTIONAL_RANGE`, see `crate::ffi::ibv_reg_mr`).
pub(crate) mod access {
    use crate::ffi::ibv_access_flags as f;
    pub(crate) const LOCAL_WRITE: i32 = f::IBV_ACCESS_LOCAL_WRITE as i32;
    pub(crate) const REMOTE_WRITE: i32 = f::IBV_ACCESS_REMOTE_WRITE as i32;
    pub(crate) const REMOTE_READ: i32 = f::IBV_ACCESS_REMOTE_READ as i32;
}

impl Mr {
    /// `ibv_reg_mr(pd, mem, len, access)` (VA-based, invariant 7), as verbs.h's
    /// macro does it (`crate::ffi::ibv_reg_mr`).
    ///
    /// # Safety
    /// `mem` must stay allocated at the same address until the returned `Mr` is
    /// dropped, and if `access` lets the device write (`LOCAL_WRITE`, `REMOTE_WRITE`),
    /// nothing else may read or write those bytes while the device can (the
    /// `rdma::Registrar` contract, invariant 4).
    pub(crate) unsafe fn register(pd: &Arc<Pd>, mem: &[u8], access: i32) -> io::Result<Mr> {
        // SAFETY: live PD (invariant 1); the memory outlives the registration (this
        // function's contract).
        let mr = unsafe {
            ffi::ibv_reg_mr(
                pd.ctx.v,
                pd.ptr.as_ptr(),
                mem.as_ptr() as *mut std::os::raw::c_void,
                mem.len(),
                access,
            )
        };
        match NonNull::new(mr) {
            Some(ptr) => {
                // SAFETY: a successful ibv_reg_mr returns an initialised ibv_mr.
                let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
                Ok(Mr {
                    ptr,
                    lkey,
                    rkey,
                    pd: pd.clone(),
                })
            }
            None => Err(io::Error::last_os_error()),
        }
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: invariant 1; the memory is still allocated (invariant 4).
        unsafe { (self.pd.ctx.v.ibv_dereg_mr)(self.ptr.as_ptr()) };
    }
}

/// Verbs that return an errno directly (`ibv_query_*`) or -1 with `errno` set.
pub(crate) fn errno(rc: std::os::raw::c_int) -> io::Error {
    if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    }
}
