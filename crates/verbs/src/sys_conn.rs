//! The crate's second `unsafe` module: librdmacm (event channels, CM ids, connect,
//! accept, reject, disconnect) and the queue pair with its completion queue and
//! completion channel (`rdma_create_qp`, `ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`),
//! through `crate::ffi`: librdmacm (and libibverbs) are loaded by the first
//! [`EventChannel::new`], which fails with `ErrorKind::Unsupported` if they cannot be;
//! every object here holds the loaded tables through its event channel.
//!
//! # Invariants (in addition to those of `crate::sys`)
//!
//! 1. Ownership: [`EventChannel`], [`CmId`] and [`Qp`] each own one rdma-core object
//!    and destroy it once in `Drop`. A [`CmId`] holds an `Arc` of its event channel
//!    (`rdma_destroy_event_channel` needs every id of the channel destroyed first); a
//!    [`Qp`] holds an `Arc` of its CM id (the QP is destroyed with `rdma_destroy_qp`
//!    before the id), of its PD, and owns its CQ and completion channel, destroyed in
//!    the order QP, CQ, completion channel.
//! 2. Events are copied out of an `rdma_cm_event` (private data included) and the
//!    event is acknowledged before [`EventChannel::get_event`] returns, so no pointer
//!    into an event outlives it, and `rdma_destroy_id`/`rdma_migrate_id` (which wait
//!    for every event of the id to be acknowledged) cannot block on us. The one
//!    pointer taken from an event, the new id of a CONNECT_REQUEST, is owned from
//!    then on by a [`CmId`] (destroyed if never used, which rejects the request).
//! 3. Work requests: [`Qp::post_send`] and [`Qp::post_recv`] compute every SGE
//!    themselves from an `rdma::LocalSge`: the region must belong to the QP's
//!    protection domain (so it is registered with this device, VA-based, sys
//!    invariant 7: the SGE's address is the address of the range's first byte) and
//!    the range must lie inside it. The posted regions'
//!    `rdma::MemoryRegion` handles (hence their memory and device registrations) are
//!    kept in the QP's table of outstanding work until [`Qp::poll`] returns that
//!    work request's completion, or until the QP is destroyed (after which the
//!    device touches none of them): the device never reaches freed memory.
//! 4. Completion events: each event got from the completion channel is acknowledged
//!    at once (`ibv_ack_cq_events(cq, 1)`), so `ibv_destroy_cq` never waits.
//! 5. File descriptors of the channels are set non-blocking at creation, so
//!    `get_event` calls return EAGAIN instead of blocking a runtime thread.
//! 6. Threads: as `crate::sys` invariant 5; librdmacm calls on one id from several
//!    threads are serialized by librdmacm, and the outstanding-work table is behind a
//!    mutex.
//! 7. Inline data (`IBV_SEND_INLINE`): only for a plain Send or an RDMA Write whose gather
//!    list totals at most the `max_inline_data` the QP was created with (what
//!    `rdma_create_qp` wrote back); the provider copies the bytes at post time, and
//!    the regions are kept until the completion as for any other work request.
//! 8. Unsignaled work requests: the QP is created with `sq_sig_all = 0`. In a list
//!    posted by [`Qp::post_sends`], an RDMA Write that is not the list's last work
//!    request goes without `IBV_SEND_SIGNALED`; every other work request is signaled,
//!    so each unsignaled one is followed on the send queue by a signaled one. Send
//!    queue work of an RC QP completes in posting order, so when the completion of a
//!    later work request is polled, every unsignaled one posted before it has
//!    completed too (Linux xprtrdma relies on the same rule: `frwr_ops.c`, "FAST_REG
//!    Work Requests are not signaled, and neither are RDMA Send Work Requests").
//!    [`Qp::poll`] then gives each of those a completion of its own (success if the
//!    later one succeeded, else flushed), in posting order ahead of the later one,
//!    and only then releases its regions (invariant 3). A work request that fails
//!    is reported whether signaled or not (rxe's `do_complete` posts a completion
//!    when `wqe->status != IB_WC_SUCCESS`, flushes included); that completion takes
//!    it out of the unsignaled line.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::unix::AsyncFd;

use rdma::{LocalSge, MemoryRegion, WcOpcode};

use crate::ffi;

use crate::sys::{errno, Context, Pd};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An event channel's fd for tokio, holding the channel (so the fd stays open).
pub(crate) struct ChanFd(Arc<EventChannel>);

impl AsRawFd for ChanFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

impl ChanFd {
    pub(crate) fn channel(&self) -> &Arc<EventChannel> {
        &self.0
    }
}

/// A QP's completion-channel fd for tokio, holding the QP (so the fd stays open).
pub(crate) struct QpFd(Arc<Qp>);

impl AsRawFd for QpFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.comp_fd()
    }
}

impl QpFd {
    pub(crate) fn qp(&self) -> &Qp {
        &self.0
    }
}

/// Registers an event channel's fd with tokio (needs a runtime).
pub(crate) fn watch_channel(chan: Arc<EventChannel>) -> io::Result<AsyncFd<ChanFd>> {
    // SAFETY: the AsyncFd owns an Arc of the channel, whose fd stays open and the
    // same until the channel is destroyed, which is after the AsyncFd is dropped.
    Ok(unsafe { AsyncFd::register(ChanFd(chan)) }?)
}

/// A device context's asynchronous-event fd for tokio, holding the context (so the
/// fd stays open).
pub(crate) struct ContextFd(pub(crate) Arc<Context>);

impl AsRawFd for ContextFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.async_fd()
    }
}

/// Sets a context's async-event fd non-blocking (invariant 5) and registers it with
/// tokio (needs a runtime). Meant for a context opened for this alone
/// (`sys::open_devices`): the flag is the context's.
pub(crate) fn watch_context(ctx: Arc<Context>) -> io::Result<AsyncFd<ContextFd>> {
    set_nonblocking(ctx.async_fd())?;
    // SAFETY: the AsyncFd owns an Arc of the context, whose async fd stays open and
    // the same until the context is closed, which is after the AsyncFd is dropped.
    Ok(unsafe { AsyncFd::register(ContextFd(ctx)) }?)
}

/// Registers a QP's completion-channel fd with tokio (needs a runtime).
pub(crate) fn watch_qp(qp: Qp) -> io::Result<AsyncFd<QpFd>> {
    // SAFETY: the AsyncFd owns the QP, whose completion channel (and fd) is
    // destroyed only when the QP is, after the AsyncFd is dropped.
    Ok(unsafe { AsyncFd::register(QpFd(Arc::new(qp))) }?)
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// An `rdma_event_channel` (its fd non-blocking, invariant 5).
pub(crate) struct EventChannel {
    ptr: NonNull<ffi::rdma_event_channel>,
    /// libibverbs and librdmacm, loaded (`crate::ffi` invariant 3).
    v: &'static ffi::Verbs,
    cm: &'static ffi::Rdmacm,
}

// SAFETY: invariant 6.
unsafe impl Send for EventChannel {}
// SAFETY: invariant 6.
unsafe impl Sync for EventChannel {}

/// One CM event, copied out and acknowledged (invariant 2).
pub(crate) struct CmEvent {
    /// `RDMA_CM_EVENT_*`.
    pub(crate) kind: u32,
    /// `event->status` (an errno, negative, or a transport reject reason).
    pub(crate) status: i32,
    /// Private data of the connect/accept/reject, as the kernel reported it.
    pub(crate) private_data: Vec<u8>,
    /// `param.conn.responder_resources` as reported (the peer's initiator depth).
    pub(crate) responder_resources: u8,
    /// `param.conn.initiator_depth` as reported (the peer's responder resources).
    pub(crate) initiator_depth: u8,
    /// The new id of a CONNECT_REQUEST, owned.
    pub(crate) new_id: Option<CmId>,
}

pub(crate) mod event {
    use crate::ffi::rdma_cm_event_type as t;
    pub(crate) const ADDR_RESOLVED: u32 = t::RDMA_CM_EVENT_ADDR_RESOLVED;
    pub(crate) const ROUTE_RESOLVED: u32 = t::RDMA_CM_EVENT_ROUTE_RESOLVED;
    pub(crate) const CONNECT_REQUEST: u32 = t::RDMA_CM_EVENT_CONNECT_REQUEST;
    pub(crate) const ESTABLISHED: u32 = t::RDMA_CM_EVENT_ESTABLISHED;
    pub(crate) const REJECTED: u32 = t::RDMA_CM_EVENT_REJECTED;
    pub(crate) const DISCONNECTED: u32 = t::RDMA_CM_EVENT_DISCONNECTED;
    pub(crate) const DEVICE_REMOVAL: u32 = t::RDMA_CM_EVENT_DEVICE_REMOVAL;
}

impl EventChannel {
    /// `rdma_create_event_channel`, fd set non-blocking; loads librdmacm and
    /// libibverbs at the first call (`ErrorKind::Unsupported` if they cannot be).
    pub(crate) fn new() -> io::Result<Arc<EventChannel>> {
        let (v, cm) = ffi::rdmacm().map_err(|e| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{e} (install rdma-core's librdmacm1, libibverbs1 and the verbs \
                     providers, Debian: librdmacm1 libibverbs1 ibverbs-providers)"
                ),
            )
        })?;
        // SAFETY: no arguments; the result is checked.
        let ptr = unsafe { (cm.rdma_create_event_channel)() };
        let ch = EventChannel {
            ptr: NonNull::new(ptr).ok_or_else(io::Error::last_os_error)?,
            v,
            cm,
        };
        set_nonblocking(ch.fd())?;
        Ok(Arc::new(ch))
    }

    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: live channel (invariant 1).
        unsafe { (*self.ptr.as_ptr()).fd }
    }

    /// The next event, copied and acknowledged; `Ok(None)` when none is waiting.
    pub(crate) fn get_event(self: &Arc<Self>) -> io::Result<Option<CmEvent>> {
        let mut ev: *mut ffi::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: live channel; `ev` is a valid out pointer.
        if unsafe { (self.cm.rdma_get_cm_event)(self.ptr.as_ptr(), &mut ev) } != 0 {
            let e = io::Error::last_os_error();
            return if would_block(&e) { Ok(None) } else { Err(e) };
        }
        // SAFETY: a successful rdma_get_cm_event returns a valid event, read here
        // and acknowledged below (invariant 2). `param.conn` is the member for
        // connected (RC) ids, which are the only ones this crate creates.
        let out = unsafe {
            let e = &*ev;
            let conn = &e.param.conn;
            let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data as *const u8,
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            let new_id = if e.event == event::CONNECT_REQUEST {
                NonNull::new(e.id).map(|ptr| CmId {
                    ptr,
                    chan: self.clone(),
                })
            } else {
                None
            };
            CmEvent {
                kind: e.event,
                status: e.status,
                private_data,
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                new_id,
            }
        };
        // SAFETY: acknowledged once; nothing points into it any more.
        unsafe { (self.cm.rdma_ack_cm_event)(ev) };
        Ok(Some(out))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: invariant 1: every CmId of this channel holds an Arc of it.
        unsafe { (self.cm.rdma_destroy_event_channel)(self.ptr.as_ptr()) };
    }
}

/// An `rdma_cm_id` (RDMA_PS_TCP: reliable connected).
pub(crate) struct CmId {
    ptr: NonNull<ffi::rdma_cm_id>,
    chan: Arc<EventChannel>,
}

// SAFETY: invariant 6.
unsafe impl Send for CmId {}
// SAFETY: invariant 6.
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: invariant 1 (its QP, if any, was destroyed first: a Qp holds an Arc
        // of this id); all its events were acknowledged (invariant 2).
        unsafe { (self.chan.cm.rdma_destroy_id)(self.ptr.as_ptr()) };
    }
}

fn sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// A socket address from a `sockaddr_storage` librdmacm filled in (the bindings'
/// struct is glibc's, `crate::ffi` asserts the layouts equal).
fn from_sockaddr(ss: &ffi::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: same size and alignment as libc's (asserted in crate::ffi), both
    // plain C data.
    let ss = unsafe { &*(ss as *const ffi::sockaddr_storage).cast::<libc::sockaddr_storage>() };
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says sockaddr_in; storage is large and aligned enough.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// What `rdma_connect`/`rdma_accept` send.
pub(crate) struct ConnParam<'a> {
    pub(crate) private_data: &'a [u8],
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl ConnParam<'_> {
    fn raw(&self) -> io::Result<ffi::rdma_conn_param> {
        let len = u8::try_from(self.private_data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "private data too long"))?;
        // SAFETY: all-zero is a valid rdma_conn_param.
        let mut p: ffi::rdma_conn_param = unsafe { std::mem::zeroed() };
        p.private_data = if len == 0 {
            std::ptr::null()
        } else {
            self.private_data.as_ptr().cast()
        };
        p.private_data_len = len;
        p.responder_resources = self.responder_resources;
        p.initiator_depth = self.initiator_depth;
        p.flow_control = 1;
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        Ok(p)
    }
}

fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(errno(rc))
    }
}

impl CmId {
    /// `rdma_create_id(chan, RDMA_PS_TCP)`.
    pub(crate) fn new(chan: &Arc<EventChannel>) -> io::Result<CmId> {
        let mut id: *mut ffi::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: live channel; valid out pointer.
        check(unsafe {
            (chan.cm.rdma_create_id)(
                chan.ptr.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        })?;
        Ok(CmId {
            ptr: NonNull::new(id).ok_or_else(|| io::Error::other("rdma_create_id: null id"))?,
            chan: chan.clone(),
        })
    }

    /// `rdma_resolve_addr(NULL, dst, timeout)`.
    pub(crate) fn resolve_addr(&self, dst: SocketAddr, timeout_ms: i32) -> io::Result<()> {
        let mut ss = sockaddr(dst);
        // SAFETY: live id; `ss` is a valid sockaddr for the call's duration.
        check(unsafe {
            (self.chan.cm.rdma_resolve_addr)(
                self.ptr.as_ptr(),
                std::ptr::null_mut(),
                (&mut ss as *mut libc::sockaddr_storage).cast::<ffi::sockaddr>(),
                timeout_ms,
            )
        })
    }

    /// `rdma_resolve_route`.
    pub(crate) fn resolve_route(&self, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: live id.
        check(unsafe { (self.chan.cm.rdma_resolve_route)(self.ptr.as_ptr(), timeout_ms) })
    }

    /// `rdma_bind_addr` then `rdma_listen`.
    pub(crate) fn listen(&self, addr: SocketAddr, backlog: i32) -> io::Result<()> {
        let mut ss = sockaddr(addr);
        // SAFETY: live id; valid sockaddr.
        check(unsafe {
            (self.chan.cm.rdma_bind_addr)(
                self.ptr.as_ptr(),
                (&mut ss as *mut libc::sockaddr_storage).cast::<ffi::sockaddr>(),
            )
        })?;
        // SAFETY: live, bound id.
        check(unsafe { (self.chan.cm.rdma_listen)(self.ptr.as_ptr(), backlog) })
    }

    /// Moves the id's events to `chan` (`rdma_migrate_id`).
    pub(crate) fn migrate(&mut self, chan: &Arc<EventChannel>) -> io::Result<()> {
        // SAFETY: live id and channel; every event of the id is acknowledged
        // (invariant 2), so this does not block.
        check(unsafe { (chan.cm.rdma_migrate_id)(self.ptr.as_ptr(), chan.ptr.as_ptr()) })?;
        self.chan = chan.clone();
        Ok(())
    }

    fn addr_field(&self, src: bool) -> Option<SocketAddr> {
        // SAFETY: live id; librdmacm keeps route.addr filled in (zero when unknown,
        // which has no family).
        unsafe {
            let a = &(*self.ptr.as_ptr()).route.addr;
            if src {
                from_sockaddr(&a.__bindgen_anon_1.src_storage)
            } else {
                from_sockaddr(&a.__bindgen_anon_2.dst_storage)
            }
        }
    }

    /// The local address (after bind/resolve).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.addr_field(true)
    }

    /// The peer's address (after resolve or a connect request).
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        self.addr_field(false)
            .filter(|a| a.ip() != IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    /// The device context librdmacm bound this id to (after resolve, or on a
    /// connect request's id), as a [`Context`] that keeps the id alive (sys
    /// invariant 6).
    pub(crate) fn context(self: &Arc<Self>) -> Option<Context> {
        // SAFETY: live id.
        let verbs = unsafe { (*self.ptr.as_ptr()).verbs };
        let ptr = NonNull::new(verbs)?;
        // SAFETY: `cm_id->verbs` of a live id, which the Context's owner (this id)
        // keeps alive.
        Some(unsafe { Context::from_cm(ptr, self.chan.v, self.clone()) })
    }

    /// `rdma_connect`.
    pub(crate) fn connect(&self, p: &ConnParam<'_>) -> io::Result<()> {
        let mut raw = p.raw()?;
        // SAFETY: live id with a QP; `raw` and its private data outlive the call
        // (librdmacm copies them).
        check(unsafe { (self.chan.cm.rdma_connect)(self.ptr.as_ptr(), &mut raw) })
    }

    /// `rdma_accept`.
    pub(crate) fn accept(&self, p: &ConnParam<'_>) -> io::Result<()> {
        let mut raw = p.raw()?;
        // SAFETY: as `connect`.
        check(unsafe { (self.chan.cm.rdma_accept)(self.ptr.as_ptr(), &mut raw) })
    }

    /// `rdma_reject` with private data.
    pub(crate) fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "private data too long"))?;
        let ptr = if len == 0 {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: live id; the data outlives the call.
        check(unsafe { (self.chan.cm.rdma_reject)(self.ptr.as_ptr(), ptr, len) })
    }

    /// `rdma_disconnect`: moves the QP to the error state (its outstanding work is
    /// flushed) and tells the peer.
    pub(crate) fn disconnect(&self) -> io::Result<()> {
        // SAFETY: live id.
        check(unsafe { (self.chan.cm.rdma_disconnect)(self.ptr.as_ptr()) })
    }
}

/// A completion, with what the QP recorded at posting (the status and opcode of
/// an error completion are not trustworthy in `ibv_wc`, the recorded ones are).
pub(crate) struct RawWc {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WcOpcode,
    pub(crate) status: u32,
    pub(crate) byte_len: u32,
    /// `Some(rkey)` for a Receive with IBV_WC_WITH_INV.
    pub(crate) invalidated: Option<u32>,
}

/// The operation of a send work request, in verbs terms.
pub(crate) enum RawSendOp {
    Send,
    SendWithInvalidate(u32),
    RdmaWrite { rkey: u32, addr: u64 },
    RdmaRead { rkey: u32, addr: u64 },
    LocalInvalidate(u32),
}

/// Queue sizes of a new QP.
pub(crate) struct QpCaps {
    pub(crate) send_wr: u32,
    pub(crate) recv_wr: u32,
    pub(crate) send_sge: u32,
    pub(crate) recv_sge: u32,
    /// Most inline data asked for; a device that offers less gets a QP with the next
    /// smaller of [`INLINE_FALLBACKS`] it accepts (0: none).
    pub(crate) inline: u32,
}

/// Inline sizes tried, largest first, when a device refuses the one asked for (a
/// device refuses a QP whose `max_inline_data` exceeds its own limit: e.g. siw's 80
/// bytes, rxe's larger one).
pub(crate) const INLINE_FALLBACKS: [u32; 2] = [64, 0];

struct Outstanding {
    wr_id: u64,
    opcode: WcOpcode,
    /// Bytes of the gather list (an unsignaled work request's completion reports it).
    len: u32,
    _regions: Vec<MemoryRegion>,
}

/// Posted work whose completion was not polled yet (invariants 3 and 8).
#[derive(Default)]
struct Outstandings {
    /// By the id given to the device.
    table: HashMap<u64, Outstanding>,
    /// Unsignaled send work requests, by id in posting order.
    unsignaled: VecDeque<u64>,
}

impl Outstandings {
    /// Takes the work request of device completion `id` out, and before it, in posting
    /// order, every unsignaled send work request posted earlier (invariant 8), each
    /// with a completion of `status` (flushed if the later one failed).
    fn complete(&mut self, w: &ffi::ibv_wc, out: &mut Vec<RawWc>) {
        let Some(o) = self.table.remove(&w.wr_id) else {
            return;
        };
        if o.opcode != WcOpcode::Recv && !self.unsignaled.is_empty() {
            if let Some(at) = self.unsignaled.iter().position(|&id| id == w.wr_id) {
                // An unsignaled one reported on its own: it failed.
                self.unsignaled.remove(at);
            }
            let status = if w.status == ffi::ibv_wc_status::IBV_WC_SUCCESS {
                w.status
            } else {
                ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR
            };
            while let Some(&id) = self.unsignaled.front() {
                if id > w.wr_id {
                    break;
                }
                self.unsignaled.pop_front();
                if let Some(u) = self.table.remove(&id) {
                    out.push(RawWc {
                        wr_id: u.wr_id,
                        opcode: u.opcode,
                        status,
                        byte_len: u.len,
                        invalidated: None,
                    });
                }
            }
        }
        let with_inv = w.wc_flags & ffi::ibv_wc_flags::IBV_WC_WITH_INV != 0;
        // SAFETY: both members of the union are plain 32-bit integers; the value
        // means the invalidated rkey only with IBV_WC_WITH_INV, checked below.
        let rkey = unsafe { w.__bindgen_anon_1.invalidated_rkey };
        out.push(RawWc {
            wr_id: o.wr_id,
            opcode: o.opcode,
            status: w.status,
            byte_len: w.byte_len,
            invalidated: (with_inv && o.opcode == WcOpcode::Recv).then_some(rkey),
        });
    }
}

/// One send work request, in verbs terms, for [`Qp::post_sends`].
pub(crate) struct RawSendWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) op: RawSendOp,
    pub(crate) sgl: Vec<&'a LocalSge>,
}

/// Why a work request was not posted.
pub(crate) enum PostFailure {
    /// An SGE names a region of another PD, or a range outside its region.
    Sge,
    /// The provider refused (errno: ENOMEM queue full, EINVAL, ...).
    Os(io::Error),
}

/// A reliable-connected QP made by `rdma_create_qp` on a CM id, with one CQ for
/// both queues on its own completion channel (fd non-blocking).
pub(crate) struct Qp {
    id: Arc<CmId>,
    qp: NonNull<ffi::ibv_qp>,
    cq: NonNull<ffi::ibv_cq>,
    comp: NonNull<ffi::ibv_comp_channel>,
    pd: Arc<Pd>,
    pd_id: u64,
    next: Mutex<u64>,
    outstanding: Mutex<Outstandings>,
    /// The QP's `max_inline_data` (invariant 7).
    max_inline: u32,
    /// Work requests posted with `IBV_SEND_INLINE`.
    inline_posts: std::sync::atomic::AtomicU64,
}

// SAFETY: invariant 6.
unsafe impl Send for Qp {}
// SAFETY: invariant 6.
unsafe impl Sync for Qp {}

impl Qp {
    /// Completion channel, CQ of `send_wr + recv_wr` entries, then `rdma_create_qp`
    /// on `id` with `pd` (which must be of the id's device context). `pd_id` is the
    /// `rdma::ProtectionDomain` whose registrations are on `pd`.
    pub(crate) fn new(id: &Arc<CmId>, pd: &Arc<Pd>, pd_id: u64, caps: &QpCaps) -> io::Result<Qp> {
        // SAFETY: live id.
        let verbs = unsafe { (*id.ptr.as_ptr()).verbs };
        let ctx: &Context = pd.context();
        if verbs.is_null() || verbs != ctx.as_ptr() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the protection domain is not of the connection's device",
            ));
        }
        let v = ctx.verbs();
        let cm = id.chan.cm;
        // SAFETY: live context (kept by the PD).
        let comp = NonNull::new(unsafe { (v.ibv_create_comp_channel)(ctx.as_ptr()) })
            .ok_or_else(io::Error::last_os_error)?;
        // SAFETY: live channel.
        let fd = unsafe { (*comp.as_ptr()).fd };
        let destroy_comp = |comp: NonNull<ffi::ibv_comp_channel>| {
            // SAFETY: created above, no CQ left on it.
            unsafe { (v.ibv_destroy_comp_channel)(comp.as_ptr()) };
        };
        if let Err(e) = set_nonblocking(fd) {
            destroy_comp(comp);
            return Err(e);
        }
        let cqe = i32::try_from(caps.send_wr.saturating_add(caps.recv_wr)).unwrap_or(i32::MAX);
        // SAFETY: live context and channel.
        let cq =
            unsafe { (v.ibv_create_cq)(ctx.as_ptr(), cqe, std::ptr::null_mut(), comp.as_ptr(), 0) };
        let Some(cq) = NonNull::new(cq) else {
            let e = io::Error::last_os_error();
            destroy_comp(comp);
            return Err(e);
        };
        // SAFETY: all-zero is a valid ibv_qp_init_attr.
        let mut attr: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.as_ptr();
        attr.recv_cq = cq.as_ptr();
        attr.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        // Invariant 8: each work request says whether it is signaled.
        attr.sq_sig_all = 0;
        attr.cap.max_send_wr = caps.send_wr;
        attr.cap.max_recv_wr = caps.recv_wr;
        attr.cap.max_send_sge = caps.send_sge;
        attr.cap.max_recv_sge = caps.recv_sge;
        let inline_sizes = std::iter::once(caps.inline)
            .chain(INLINE_FALLBACKS.into_iter().filter(|&n| n < caps.inline));
        let mut rc = -1;
        for inline in inline_sizes {
            attr.cap.max_inline_data = inline;
            // SAFETY: live id, PD and CQ of the id's context (checked above).
            rc = unsafe { (cm.rdma_create_qp)(id.ptr.as_ptr(), pd.as_ptr(), &mut attr) };
            if rc == 0 {
                break;
            }
        }
        // SAFETY: live id; a successful rdma_create_qp sets `id->qp`.
        let qp = (rc == 0).then(|| unsafe { (*id.ptr.as_ptr()).qp });
        let Some(qp) = qp.and_then(NonNull::new) else {
            let e = errno(rc);
            // SAFETY: created above, no QP on it, no events got.
            unsafe { (v.ibv_destroy_cq)(cq.as_ptr()) };
            destroy_comp(comp);
            return Err(e);
        };
        let q = Qp {
            id: id.clone(),
            qp,
            cq,
            comp,
            pd: pd.clone(),
            pd_id,
            next: Mutex::new(1),
            outstanding: Mutex::new(Outstandings::default()),
            // What the provider wrote back: at least what was asked for.
            max_inline: attr.cap.max_inline_data,
            inline_posts: std::sync::atomic::AtomicU64::new(0),
        };
        q.req_notify()?;
        Ok(q)
    }

    /// The completion channel's fd.
    pub(crate) fn comp_fd(&self) -> RawFd {
        // SAFETY: live channel (invariant 1).
        unsafe { (*self.comp.as_ptr()).fd }
    }

    /// Number of posted work requests whose completion was not polled yet.
    pub(crate) fn outstanding(&self) -> usize {
        lock(&self.outstanding).table.len()
    }

    /// Arms the CQ (`ibv_req_notify_cq`, all completions).
    pub(crate) fn req_notify(&self) -> io::Result<()> {
        // SAFETY: live CQ.
        check(unsafe { ffi::ibv_req_notify_cq(self.cq.as_ptr(), 0) })
    }

    /// Consumes every waiting completion-channel event (acknowledging each,
    /// invariant 4); true if there was one.
    pub(crate) fn take_cq_events(&self) -> io::Result<bool> {
        let mut any = false;
        loop {
            let mut cq: *mut ffi::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut std::os::raw::c_void = std::ptr::null_mut();
            // SAFETY: live channel; valid out pointers; fd non-blocking (invariant 5).
            let rc = unsafe { (self.v().ibv_get_cq_event)(self.comp.as_ptr(), &mut cq, &mut ctx) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return if would_block(&e) { Ok(any) } else { Err(e) };
            }
            any = true;
            // SAFETY: the event was for our only CQ on this channel; acknowledged once.
            unsafe { (self.v().ibv_ack_cq_events)(self.cq.as_ptr(), 1) };
        }
    }

    /// Polls up to 16 completions into `out`; returns how many.
    pub(crate) fn poll(&self, out: &mut Vec<RawWc>) -> io::Result<usize> {
        const N: usize = 16;
        // SAFETY: ibv_wc is plain C data; all-zero is valid.
        let mut wc: [ffi::ibv_wc; N] = unsafe { std::mem::zeroed() };
        // SAFETY: live CQ; `wc` has room for N entries.
        let n = unsafe { ffi::ibv_poll_cq(self.cq.as_ptr(), N as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::other(format!("ibv_poll_cq: {n}")));
        }
        let n = n as usize;
        let mut outstanding = lock(&self.outstanding);
        for w in &wc[..n.min(N)] {
            // Invariants 3 and 8: the work request's regions (and those of the
            // unsignaled ones before it) are released here, after the device
            // finished with them.
            outstanding.complete(w, out);
        }
        Ok(n)
    }

    /// SGEs for `sgl` (invariant 3: same PD, in bounds; VA-based addresses).
    fn sges(&self, sgl: &[&LocalSge]) -> Result<Vec<ffi::ibv_sge>, PostFailure> {
        sgl.iter()
            .map(|s| {
                let end = s.offset.checked_add(s.len).ok_or(PostFailure::Sge)?;
                if s.mr.pd_id() != self.pd_id || end > s.mr.len() {
                    return Err(PostFailure::Sge);
                }
                let base = s.mr.with(|b| b.as_ptr() as u64);
                Ok(ffi::ibv_sge {
                    addr: base + s.offset as u64,
                    length: u32::try_from(s.len).map_err(|_| PostFailure::Sge)?,
                    lkey: s.mr.lkey().0,
                })
            })
            .collect()
    }

    /// A new device id for a work request, in posting order.
    fn next_id(&self) -> u64 {
        let mut n = lock(&self.next);
        let id = *n;
        *n = n.wrapping_add(1);
        id
    }

    fn record(&self, wr_id: u64, opcode: WcOpcode, sgl: &[&LocalSge]) -> u64 {
        let id = self.next_id();
        lock(&self.outstanding).table.insert(
            id,
            Outstanding {
                wr_id,
                opcode,
                len: 0,
                _regions: sgl.iter().map(|s| s.mr.clone()).collect(),
            },
        );
        id
    }

    /// `ibv_post_send` of `wrs` chained, in order: one call, one doorbell (on rxe and
    /// siw one system call, in which rxe does a userspace QP's packet work). RDMA
    /// Writes but the last work request go unsignaled (invariant 8). A bad gather
    /// list posts nothing (`Err((0, Sge))`); when the provider refuses work request
    /// `i`, those before it were posted and `Err((i, Os))` says so.
    pub(crate) fn post_sends(&self, wrs: &[RawSendWr<'_>]) -> Result<(), (usize, PostFailure)> {
        let Some(last) = wrs.len().checked_sub(1) else {
            return Ok(());
        };
        let mut sges = Vec::with_capacity(wrs.len());
        for w in wrs {
            sges.push(self.sges(&w.sgl).map_err(|f| (0, f))?);
        }
        // SAFETY: all-zero is a valid ibv_send_wr.
        let mut raw: Vec<ffi::ibv_send_wr> = (0..wrs.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        let mut inline_count = 0;
        {
            let mut outstanding = lock(&self.outstanding);
            for (i, (w, sges)) in wrs.iter().zip(sges.iter_mut()).enumerate() {
                let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
                // Not a Send With Invalidate: siw refused one posted inline (the post
                // failed with EINVAL in the lab; rxe took it), and a Reply that
                // invalidates carries chunk results, rarely fits inline anyway.
                let inline = matches!(w.op, RawSendOp::Send | RawSendOp::RdmaWrite { .. })
                    && total > 0
                    && total <= u64::from(self.max_inline);
                let signaled = i == last || !matches!(w.op, RawSendOp::RdmaWrite { .. });
                let opcode = match w.op {
                    RawSendOp::Send | RawSendOp::SendWithInvalidate(_) => WcOpcode::Send,
                    RawSendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
                    RawSendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
                    RawSendOp::LocalInvalidate(_) => WcOpcode::LocalInvalidate,
                };
                let id = self.next_id();
                outstanding.table.insert(
                    id,
                    Outstanding {
                        wr_id: w.wr_id,
                        opcode,
                        len: u32::try_from(total).unwrap_or(u32::MAX),
                        _regions: w.sgl.iter().map(|s| s.mr.clone()).collect(),
                    },
                );
                if !signaled {
                    outstanding.unsignaled.push_back(id);
                }
                let wr = &mut raw[i];
                wr.wr_id = id;
                wr.sg_list = if sges.is_empty() {
                    std::ptr::null_mut()
                } else {
                    sges.as_mut_ptr()
                };
                wr.num_sge = sges.len() as i32;
                if signaled {
                    wr.send_flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED;
                }
                if inline {
                    // Invariant 7: the device copies the bytes now, not by DMA later.
                    wr.send_flags |= ffi::ibv_send_flags::IBV_SEND_INLINE;
                    inline_count += 1;
                }
                set_op(wr, &w.op);
            }
        }
        // Chain them, last to first (the vector no longer moves).
        for i in (0..last).rev() {
            let next: *mut ffi::ibv_send_wr = &mut raw[i + 1];
            raw[i].next = next;
        }
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the chained `raw` and their `sges` are valid for the call
        // (the provider copies them); the SGEs name memory kept alive by the table
        // (invariant 3); `bad`, if set, points into `raw`.
        let rc = unsafe { ffi::ibv_post_send(self.qp.as_ptr(), raw.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            let first_bad = raw.iter().position(|w| std::ptr::eq(w, bad)).unwrap_or(0);
            // Not posted: out of the table. (The posted ones stay: an unsignaled one
            // left without a signaled one behind it completes, as any work, when the
            // failing connection's QP is flushed.)
            let mut outstanding = lock(&self.outstanding);
            for w in &raw[first_bad..] {
                outstanding.table.remove(&w.wr_id);
                outstanding.unsignaled.retain(|&id| id != w.wr_id);
            }
            return Err((first_bad, PostFailure::Os(errno(rc))));
        }
        self.inline_posts
            .fetch_add(inline_count, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The QP's `max_inline_data`, and how many work requests went inline so far.
    pub(crate) fn inline_data(&self) -> (u32, u64) {
        (
            self.max_inline,
            self.inline_posts.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// `ibv_post_recv` of one work request.
    pub(crate) fn post_recv(&self, wr_id: u64, sgl: &[&LocalSge]) -> Result<(), PostFailure> {
        let mut sges = self.sges(sgl)?;
        let id = self.record(wr_id, WcOpcode::Recv, sgl);
        let mut wr = ffi::ibv_recv_wr {
            wr_id: id,
            next: std::ptr::null_mut(),
            sg_list: if sges.is_empty() {
                std::ptr::null_mut()
            } else {
                sges.as_mut_ptr()
            },
            num_sge: sges.len() as i32,
        };
        let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: as post_send.
        let rc = unsafe { ffi::ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            lock(&self.outstanding).table.remove(&id);
            return Err(PostFailure::Os(errno(rc)));
        }
        Ok(())
    }

    pub(crate) fn id(&self) -> &Arc<CmId> {
        &self.id
    }

    /// The loaded libibverbs (of the PD's context).
    fn v(&self) -> &'static ffi::Verbs {
        self.pd.context().verbs()
    }
}

/// The opcode and its fields of `op` in `wr`.
fn set_op(wr: &mut ffi::ibv_send_wr, op: &RawSendOp) {
    match *op {
        RawSendOp::Send => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND,
        RawSendOp::SendWithInvalidate(rkey) => {
            wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
            wr.__bindgen_anon_1.invalidate_rkey = rkey;
            // libsiw (rdma-core providers/siw/siw.c, push_send_wqe) takes the STag a
            // Send With Invalidate names from `wr.rdma.rkey`, not from
            // `invalidate_rkey`; with only the latter set, siw sends STag 0 and the
            // peer answers with a Terminate (cannot invalidate). The union member is
            // unused by a Send on every other provider.
            wr.wr.rdma = ffi::ibv_send_wr_rdma {
                remote_addr: 0,
                rkey,
            };
        }
        RawSendOp::RdmaWrite { rkey, addr } => {
            wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            wr.wr.rdma = ffi::ibv_send_wr_rdma {
                remote_addr: addr,
                rkey,
            };
        }
        RawSendOp::RdmaRead { rkey, addr } => {
            wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_READ;
            wr.wr.rdma = ffi::ibv_send_wr_rdma {
                remote_addr: addr,
                rkey,
            };
        }
        RawSendOp::LocalInvalidate(rkey) => {
            wr.opcode = ffi::ibv_wr_opcode::IBV_WR_LOCAL_INV;
            wr.num_sge = 0;
            wr.sg_list = std::ptr::null_mut();
            wr.__bindgen_anon_1.invalidate_rkey = rkey;
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: invariant 1: QP, then CQ (every event acknowledged, invariant 4),
        // then the completion channel; the outstanding regions are released after
        // this (fields drop after `drop`), when the device no longer has the QP.
        unsafe {
            (self.id.chan.cm.rdma_destroy_qp)(self.id.ptr.as_ptr());
            (self.v().ibv_destroy_cq)(self.cq.as_ptr());
            (self.v().ibv_destroy_comp_channel)(self.comp.as_ptr());
        }
        let _ = &self.pd;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffi::ibv_wc_status as st;

    fn posted(o: &mut Outstandings, id: u64, opcode: WcOpcode, signaled: bool) {
        o.table.insert(
            id,
            Outstanding {
                wr_id: id * 100,
                opcode,
                len: 7,
                _regions: Vec::new(),
            },
        );
        if !signaled {
            o.unsignaled.push_back(id);
        }
    }

    fn cqe(id: u64, status: u32) -> ffi::ibv_wc {
        // SAFETY: plain C data; all-zero is valid.
        let mut w: ffi::ibv_wc = unsafe { std::mem::zeroed() };
        w.wr_id = id;
        w.status = status;
        w
    }

    fn ids(out: &[RawWc]) -> Vec<(u64, u32)> {
        out.iter().map(|w| (w.wr_id / 100, w.status)).collect()
    }

    #[test]
    fn a_signaled_completion_completes_the_unsignaled_writes_before_it_in_order() {
        let mut o = Outstandings::default();
        posted(&mut o, 1, WcOpcode::RdmaWrite, false);
        posted(&mut o, 2, WcOpcode::RdmaWrite, false);
        posted(&mut o, 3, WcOpcode::Send, true);
        posted(&mut o, 4, WcOpcode::RdmaWrite, false);
        posted(&mut o, 5, WcOpcode::Send, true);
        let mut out = Vec::new();
        o.complete(&cqe(3, st::IBV_WC_SUCCESS), &mut out);
        assert_eq!(
            ids(&out),
            [
                (1, st::IBV_WC_SUCCESS),
                (2, st::IBV_WC_SUCCESS),
                (3, st::IBV_WC_SUCCESS)
            ]
        );
        assert_eq!(out[0].byte_len, 7, "an unsignaled Write reports its length");
        assert_eq!(o.table.len(), 2, "4 and 5 are still on the device");
        out.clear();
        o.complete(&cqe(5, st::IBV_WC_WR_FLUSH_ERR), &mut out);
        assert_eq!(
            ids(&out),
            [(4, st::IBV_WC_WR_FLUSH_ERR), (5, st::IBV_WC_WR_FLUSH_ERR)],
            "behind a failed one, the unsignaled are flushed, not successes"
        );
        assert!(o.table.is_empty() && o.unsignaled.is_empty());
    }

    #[test]
    fn a_failed_unsignaled_write_is_reported_once_and_receives_complete_nothing_else() {
        let mut o = Outstandings::default();
        posted(&mut o, 1, WcOpcode::RdmaWrite, false);
        posted(&mut o, 2, WcOpcode::RdmaWrite, false);
        posted(&mut o, 3, WcOpcode::Send, true);
        posted(&mut o, 4, WcOpcode::Recv, true);
        let mut out = Vec::new();
        // A Receive completes: the send queue's unsignaled work is not its business.
        o.complete(&cqe(4, st::IBV_WC_SUCCESS), &mut out);
        assert_eq!(ids(&out), [(4, st::IBV_WC_SUCCESS)]);
        out.clear();
        // Write 1 succeeded silently; Write 2 failed and is reported on its own.
        o.complete(&cqe(2, st::IBV_WC_REM_ACCESS_ERR), &mut out);
        assert_eq!(
            ids(&out),
            [(1, st::IBV_WC_WR_FLUSH_ERR), (2, st::IBV_WC_REM_ACCESS_ERR)]
        );
        out.clear();
        o.complete(&cqe(3, st::IBV_WC_WR_FLUSH_ERR), &mut out);
        assert_eq!(ids(&out), [(3, st::IBV_WC_WR_FLUSH_ERR)]);
        assert!(o.table.is_empty() && o.unsignaled.is_empty());
    }
}
