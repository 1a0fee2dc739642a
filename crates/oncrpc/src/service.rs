//! The service API and the transport-neutral dispatcher.
//!
//! A program implements [`Service`] and is registered for its program number and
//! versions on a [`Dispatcher`]. The dispatcher turns one received call message
//! (`Bytes`, a whole record from TCP or a reassembled RPC-over-RDMA payload) into one
//! reply ([`xdr::XdrStream`], whose DDP-eligible items an RDMA transport can reduce),
//! following RFC 5531 §9: RPC_MISMATCH, authentication (AUTH_NONE, AUTH_SYS),
//! PROG_UNAVAIL, PROG_MISMATCH, then the handler (which may answer PROC_UNAVAIL,
//! GARBAGE_ARGS or SYSTEM_ERR). It does no I/O.
//!
//! # Example
//!
//! ```
//! use oncrpc::{Dispatcher, Request, Service, ServiceError};
//! use std::sync::Arc;
//! use xdr::{Encoder, XdrStream};
//!
//! /// Program 0x2000_0001, versions 1 and 2: procedure 0 is NULL, procedure 1 echoes
//! /// an `opaque<>` back (as a DDP-eligible item: no copy of the data).
//! struct Echo;
//!
//! impl Service for Echo {
//!     async fn call(&self, mut req: Request) -> Result<XdrStream, ServiceError> {
//!         match req.proc_ {
//!             0 => Ok(XdrStream::default()),
//!             1 => {
//!                 let data = req.args.opaque(u32::MAX)?; // XdrError -> GARBAGE_ARGS
//!                 req.args.finish()?;
//!                 let mut enc = Encoder::new();
//!                 enc.ddp_opaque(data);
//!                 Ok(enc.finish())
//!             }
//!             _ => Err(ServiceError::ProcUnavail),
//!         }
//!     }
//! }
//!
//! let mut dispatcher = Dispatcher::new();
//! dispatcher.register(0x2000_0001, [1, 2], Arc::new(Echo)).unwrap();
//! // A transport then calls, for each received call message:
//! // `let reply: Option<XdrStream> = dispatcher.dispatch_from(call_bytes, peer).await;`
//! ```

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use xdr::{Decoder, Encode, Encoder, XdrStream};

use crate::auth::{Credentials, OpaqueAuth};
use crate::drc::{Begin, CacheStats, CallKey, ReplyCache};
use crate::error::{CallError, Disposition, ServiceError};
use crate::message::{CallHeader, MismatchInfo, ReplyBody, ReplyHeader, Xid, RPC_VERSION};
use crate::metrics::{CallMetrics, VersionStats};

/// The dispatcher's tables, looked up by every call: keyed by program (and version)
/// numbers the server registered, so `foldhash` rather than std's SipHash, which
/// cost about 300 instructions a call (docs/bench/percall/instructions41.sh).
type Table<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Where a call's bulk data item lies ([`Service::call_data_item`]).
pub use xdr::DataItem;

/// A call's bulk data item received apart ([`Request::data`]); none without the
/// tokio drivers.
#[cfg(feature = "tokio")]
type ApartData = crate::tcp::CallData;
#[cfg(not(feature = "tokio"))]
type ApartData = std::convert::Infallible;

/// One call, as a service sees it.
#[derive(Debug)]
pub struct Request {
    /// Transaction id (for logging and duplicate request caches).
    pub xid: Xid,
    /// Program number.
    pub prog: u32,
    /// Program version (one the service was registered for).
    pub vers: u32,
    /// Procedure number; the service answers [`ServiceError::ProcUnavail`] for one it
    /// does not have.
    pub proc_: u32,
    /// The decoded, checked credentials.
    pub cred: Credentials,
    /// The credential as received (for flavors' raw bytes, e.g. DRC hashing).
    pub raw_cred: OpaqueAuth,
    /// The procedure's arguments: a decoder over the rest of the call message.
    /// Opaque data decoded from it are slices of the received buffer (no copy).
    pub args: Decoder,
    /// Who sent the call, as the transport knows it; `None` when the call did not
    /// come from a transport (in-process dispatch, tests). Services that grant access
    /// by address (NFS exports) must treat `None` as an unknown host.
    pub peer: Option<Peer>,
    /// When the dispatcher handed the call to the service: the start its latency is
    /// measured from, which services that keep time (NFSv4 leases) take as the call's
    /// time instead of reading the clock again. (Each clock read is a system call on a
    /// host whose clock source has no vDSO path, such as the lab's HPET guest.)
    pub started: Instant,
    /// The call's bulk data item when the transport received it apart
    /// ([`Service::call_data_item`], [`crate::tcp::call_data`]): `args` then decodes
    /// that item as empty ([`Decoder::with_item_elided`]), and its data is here.
    #[cfg(feature = "tokio")]
    pub data: Option<crate::tcp::CallData>,
}

/// The sender of a call: its address and the transport it came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The caller's address and source port (TCP: the connection's remote end;
    /// RPC-over-RDMA: the address the RDMA provider reports for the connection).
    pub addr: SocketAddr,
    /// The transport.
    pub protocol: Protocol,
}

/// The transport a call arrived on (RFC 5665 netid families).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// ONC RPC over TCP with record marking ("tcp", "tcp6").
    Tcp,
    /// RPC-over-RDMA ("rdma", "rdma6").
    Rdma,
}

/// What a handler returns: the encoded results, or an `accept_stat` error.
pub type ServiceResult = Result<XdrStream, ServiceError>;

/// An RPC program (one or more versions of it).
///
/// Implement it with `async fn call(&self, req: Request) -> ServiceResult`. The
/// returned future must be `Send`, since calls run concurrently on a multi-threaded
/// runtime.
pub trait Service: Send + Sync + 'static {
    /// Serves one call. Results are encoded without the reply header, which the
    /// dispatcher adds; DDP-eligible items (`Encoder::ddp_opaque`) stay uncopied.
    fn call(&self, req: Request) -> impl Future<Output = ServiceResult> + Send;

    /// Whether replies to procedure `proc_` of version `vers` go through the
    /// dispatcher's duplicate request cache ([`Dispatcher::with_reply_cache`],
    /// [`crate::drc`]): true for the procedures that are not idempotent, whose
    /// retransmission must not run again (NFSv3 REMOVE, WRITE, ...). By default none.
    fn caches_reply(&self, vers: u32, proc_: u32) -> bool {
        let _ = (vers, proc_);
        false
    }

    /// The name of procedure `proc_` of version `vers` as its specification writes
    /// it (`"GETATTR"`), for metrics ([`Dispatcher::with_metrics`]); `None` (the
    /// default): shown by number.
    fn procedure_name(&self, vers: u32, proc_: u32) -> Option<&'static str> {
        let _ = (vers, proc_);
        None
    }

    /// Where the bulk data of a call of procedure `proc_` of version `vers` lies, from
    /// the first bytes of its arguments (`args`: not necessarily all of them): the
    /// DDP-eligible argument (RFC 8166 §6.1; NFS WRITE's data, RFC 8267) that a
    /// byte-stream transport may then receive apart from the call, into a pipe, as
    /// RPC-over-RDMA receives it by RDMA Read ([`crate::tcp::call_data`]). The call
    /// then comes with [`Request::data`]. `None` (the default): the call has none, or
    /// not within `args`.
    fn call_data_item(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<DataItem> {
        let _ = (vers, proc_, args);
        None
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`Service`], so that different programs share one table.
trait DynService: Send + Sync {
    fn call_dyn(&self, req: Request) -> BoxFuture<'_, ServiceResult>;
    fn caches_reply_dyn(&self, vers: u32, proc_: u32) -> bool;
    fn procedure_name_dyn(&self, vers: u32, proc_: u32) -> Option<&'static str>;
    fn call_data_item_dyn(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<DataItem>;
}

impl<S: Service> DynService for S {
    fn call_dyn(&self, req: Request) -> BoxFuture<'_, ServiceResult> {
        Box::pin(self.call(req))
    }

    fn caches_reply_dyn(&self, vers: u32, proc_: u32) -> bool {
        self.caches_reply(vers, proc_)
    }

    fn procedure_name_dyn(&self, vers: u32, proc_: u32) -> Option<&'static str> {
        self.procedure_name(vers, proc_)
    }

    fn call_data_item_dyn(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<DataItem> {
        self.call_data_item(vers, proc_, args)
    }
}

/// A registration that conflicts with an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("program {prog} version {vers} is already registered")]
pub struct AlreadyRegistered {
    /// Program number.
    pub prog: u32,
    /// Version number.
    pub vers: u32,
}

/// Routes calls to registered services and builds replies. Transport-neutral.
#[derive(Default)]
pub struct Dispatcher {
    programs: Table<u32, BTreeMap<u32, Arc<dyn DynService>>>,
    /// The duplicate request cache in front of every program, if any.
    reply_cache: Option<Arc<ReplyCache>>,
    /// Call counts and service times, if kept ([`Dispatcher::with_metrics`]).
    metrics: Option<Arc<CallMetrics>>,
    /// Each registered version's table in `metrics`, taken once so that counting
    /// a call takes no lock.
    version_stats: Table<(u32, u32), Arc<VersionStats>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("programs", &self.registrations())
            .field("reply_cache", &self.reply_cache)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Dispatcher {
    /// An empty dispatcher: every call gets PROG_UNAVAIL.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `service` for program `prog` at each of `versions`.
    ///
    /// Nothing is registered if any (prog, version) pair already is.
    pub fn register<S: Service>(
        &mut self,
        prog: u32,
        versions: impl IntoIterator<Item = u32>,
        service: Arc<S>,
    ) -> Result<&mut Self, AlreadyRegistered> {
        let versions: Vec<u32> = versions.into_iter().collect();
        let table = self.programs.entry(prog).or_default();
        if let Some(&vers) = versions.iter().find(|v| table.contains_key(v)) {
            return Err(AlreadyRegistered { prog, vers });
        }
        let service: Arc<dyn DynService> = service;
        for vers in versions {
            table.insert(vers, service.clone());
            if let Some(m) = &self.metrics {
                let v = m.version(prog, vers);
                v.name_procedures(|p| service.procedure_name_dyn(vers, p));
                self.version_stats.insert((prog, vers), v);
            }
        }
        Ok(self)
    }

    /// Counts every routed call of this dispatcher's programs in `metrics`
    /// ([`crate::metrics`]), those registered before and after this. One `metrics`
    /// may serve several dispatchers (a server's TCP and RDMA ones), which then
    /// count into the same tables.
    pub fn with_metrics(&mut self, metrics: Arc<CallMetrics>) -> &mut Self {
        self.version_stats = self
            .programs
            .iter()
            .flat_map(|(&p, versions)| versions.iter().map(move |(&v, s)| (p, v, s)))
            .map(|(p, v, service)| {
                let stats = metrics.version(p, v);
                stats.name_procedures(|n| service.procedure_name_dyn(v, n));
                ((p, v), stats)
            })
            .collect();
        self.metrics = Some(metrics);
        self
    }

    /// The call metrics, if kept.
    pub fn metrics(&self) -> Option<&Arc<CallMetrics>> {
        self.metrics.as_ref()
    }

    /// The name of a registered procedure ([`Service::procedure_name`]).
    pub fn procedure_name(&self, prog: u32, vers: u32, proc_: u32) -> Option<&'static str> {
        self.programs
            .get(&prog)?
            .get(&vers)?
            .procedure_name_dyn(vers, proc_)
    }

    /// Puts `cache` in front of every program of this dispatcher (of any transport
    /// that feeds it): a retransmitted call of a procedure its service caches
    /// ([`Service::caches_reply`]) is answered with the first call's reply, or
    /// dropped while the first is in service ([`crate::drc`]). One cache may serve
    /// several dispatchers (a server's TCP and RDMA ones), which then share its bound.
    pub fn with_reply_cache(&mut self, cache: Arc<ReplyCache>) -> &mut Self {
        self.reply_cache = Some(cache);
        self
    }

    /// The duplicate request cache, if there is one.
    pub fn reply_cache(&self) -> Option<&Arc<ReplyCache>> {
        self.reply_cache.as_ref()
    }

    /// The duplicate request cache's counters, if there is one.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.reply_cache.as_ref().map(|c| c.stats())
    }

    /// Every registered (program, version) pair, sorted; what a server registers
    /// with rpcbind.
    pub fn registrations(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = self
            .programs
            .iter()
            .flat_map(|(&p, vs)| vs.keys().map(move |&v| (p, v)))
            .collect();
        out.sort_unstable();
        out
    }

    /// True when `prog` is registered at version `vers`: a call for anything else is
    /// answered PROG_UNAVAIL or PROG_MISMATCH by [`Dispatcher::dispatch`].
    pub fn serves(&self, prog: u32, vers: u32) -> bool {
        self.programs
            .get(&prog)
            .is_some_and(|versions| versions.contains_key(&vers))
    }

    /// Serves one call message and returns the reply message, or `None` when the
    /// message earns no reply (it is not a decodable call header; RFC 5531 gives no
    /// way to answer it). The reply keeps the handler's DDP-eligible items.
    ///
    /// The service sees no peer ([`Request::peer`] is `None`): for calls that do not
    /// come from a network transport. Transports use [`Dispatcher::dispatch_from`].
    pub async fn dispatch(&self, call: Bytes) -> Option<XdrStream> {
        self.dispatch_from(call, None).await
    }

    /// [`Dispatcher::dispatch`] for a call received from `peer`, which the service
    /// sees as [`Request::peer`] (access control by client address and port).
    ///
    /// With a reply cache ([`Dispatcher::with_reply_cache`]), a call of a cached
    /// procedure from a known peer may be answered from it, or get `None` (no reply)
    /// when it duplicates a call still in service.
    ///
    /// Not an `async fn` of its own but [`Dispatcher::dispatch_inner`]'s future: a
    /// future nested in another is copied whole into it when awaited, and one more
    /// level cost about 500 instructions of `memcpy` per call (callgrind).
    pub fn dispatch_from(
        &self,
        call: Bytes,
        peer: Option<Peer>,
    ) -> impl Future<Output = Option<XdrStream>> + Send + '_ {
        self.dispatch_inner(Decoder::new(call), 0, peer, None)
    }

    /// [`Dispatcher::dispatch_from`] for a call whose bulk data item the transport
    /// received apart ([`Dispatcher::call_data_item`]): `call` is the record without
    /// the item's data and padding, `data` the item, which the service gets as
    /// [`Request::data`].
    #[cfg(feature = "tokio")]
    pub fn dispatch_call(
        &self,
        call: Bytes,
        data: Option<crate::tcp::CallData>,
        peer: Option<Peer>,
    ) -> impl Future<Output = Option<XdrStream>> + Send + '_ {
        let (dec, elided) = match &data {
            Some(d) => (
                Decoder::with_item_elided(call, d.offset()),
                xdr::padded_len(d.len()),
            ),
            None => (Decoder::new(call), 0),
        };
        self.dispatch_inner(dec, elided, peer, data)
    }

    /// Where the bulk data item of the call whose record begins with `head` lies in
    /// that record, as its service says ([`Service::call_data_item`]); `None` if the
    /// header does not decode, names no registered program and version, or the
    /// service names none.
    pub fn call_data_item(&self, head: &[u8]) -> Option<DataItem> {
        let mut dec = Decoder::new(Bytes::copy_from_slice(head));
        let header = CallHeader::decode(&mut dec).ok()?;
        let service = self.programs.get(&header.prog)?.get(&header.vers)?;
        let args_at = dec.position();
        let item = service.call_data_item_dyn(header.vers, header.proc_, &head[args_at..])?;
        Some(DataItem {
            offset: item.offset.checked_add(args_at)?,
            len: item.len,
        })
    }

    /// Serves the call `dec` holds, `elided` bytes of it received apart as `data`.
    async fn dispatch_inner(
        &self,
        mut dec: Decoder,
        elided: usize,
        peer: Option<Peer>,
        data: Option<ApartData>,
    ) -> Option<XdrStream> {
        #[cfg(not(feature = "tokio"))]
        let _ = data;
        let header = match CallHeader::decode(&mut dec) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "discarding message that is not a call");
                return None;
            }
        };
        let xid = header.xid;
        let mut pending = None;
        let result = match self.route(&header) {
            Ok((service, cred)) => {
                if let Some(cache) = &self.reply_cache {
                    match peer {
                        Some(peer) if service.caches_reply_dyn(header.vers, header.proc_) => {
                            let key = CallKey::new(&header, peer, dec.rest().as_ref(), elided);
                            match cache.begin(key) {
                                Begin::Miss(p) => pending = Some(p),
                                Begin::Uncached => {}
                                Begin::Hit(reply) => return Some(reply),
                                Begin::InProgress => {
                                    tracing::debug!(
                                        xid = xid.0,
                                        "dropping a duplicate of a call in service"
                                    );
                                    return None;
                                }
                            }
                        }
                        _ => cache.count_not_cached(),
                    }
                }
                let req = Request {
                    xid,
                    prog: header.prog,
                    vers: header.vers,
                    proc_: header.proc_,
                    cred,
                    raw_cred: header.cred,
                    args: dec,
                    peer,
                    started: Instant::now(),
                    #[cfg(feature = "tokio")]
                    data,
                };
                let started = req.started;
                // A panic in the handler fails this call with SYSTEM_ERR, not the
                // task that drives the connection (over TCP and RDMA alike).
                let result = match CatchUnwind(std::pin::pin!(service.call_dyn(req))).await {
                    Ok(result) => result.map_err(CallError::from),
                    Err(panic) => {
                        let e = panic_message(&*panic);
                        tracing::error!(xid = xid.0, error = %e, "handler failed");
                        Err(CallError::Service(ServiceError::SystemErr))
                    }
                };
                if let Some(v) = self.version_stats.get(&(header.prog, header.vers)) {
                    v.record(header.proc_, started.elapsed(), result.is_ok());
                }
                result
            }
            Err(e) => Err(e),
        };
        let reply = match result {
            Ok(results) => Some(reply_message(
                xid,
                &ReplyBody::accepted(crate::message::AcceptStat::SUCCESS),
                results,
            )),
            Err(e) => {
                tracing::debug!(xid = xid.0, error = %e, "call failed");
                match Disposition::from(&e) {
                    Disposition::Reply(body) => {
                        Some(reply_message(xid, &body, XdrStream::default()))
                    }
                    Disposition::Discard | Disposition::Close => None,
                }
            }
        };
        // Every reply of a cached procedure is kept, errors too: an error reply may
        // follow a change (a WRITE that wrote part, then failed), and the client
        // must see the same answer again either way.
        if let Some(p) = pending {
            p.complete(reply.as_ref());
        }
        reply
    }

    /// RFC 5531 §9 checks, in libtirpc's order: RPC version, authentication, program,
    /// version. Returns the service and the decoded credentials.
    fn route(&self, h: &CallHeader) -> Result<(Arc<dyn DynService>, Credentials), CallError> {
        // RFC 5531 §9, `call_body`: "rpcvers; /* must be equal to two (2) */"; else
        // `reject_stat` "RPC_MISMATCH = 0, /* RPC version number != 2 */".
        if h.rpcvers != RPC_VERSION {
            return Err(CallError::RpcMismatch(h.rpcvers));
        }
        let cred = Credentials::authenticate(&h.cred, &h.verf).map_err(CallError::Auth)?;
        let versions = self
            .programs
            .get(&h.prog)
            .filter(|v| !v.is_empty())
            .ok_or(CallError::ProgUnavail(h.prog))?;
        match versions.get(&h.vers) {
            Some(s) => Ok((s.clone(), cred)),
            None => {
                // RFC 5531 §9: "PROG_MISMATCH = 2, /* remote can't support version # */"
                // with "struct { unsigned int low; unsigned int high; } mismatch_info;":
                // the lowest and highest version served (rpcinfo probes version 0 for it).
                let (low, high) = match (versions.keys().next(), versions.keys().next_back()) {
                    (Some(&l), Some(&h)) => (l, h),
                    _ => return Err(CallError::ProgUnavail(h.prog)),
                };
                Err(CallError::ProgMismatch(MismatchInfo { low, high }))
            }
        }
    }
}

/// Prepends a reply header to encoded results, keeping their DDP-eligible items.
pub fn reply_message(xid: Xid, body: &ReplyBody, results: XdrStream) -> XdrStream {
    let header = ReplyHeader {
        xid,
        body: body.clone(),
    };
    prepend(|enc| header.encode(enc), results)
}

/// Encodes a header with `head`, then appends `body`: the body's inline bytes are
/// copied after the header, its DDP-eligible items are moved (not copied) and their
/// offsets shifted.
pub(crate) fn prepend(head: impl FnOnce(&mut Encoder), body: XdrStream) -> XdrStream {
    let mut enc = Encoder::with_capacity(64 + body.inline.len());
    head(&mut enc);
    let shift = enc.inline_len();
    // COPY: the inline part of the results (small; bulk data travels as DDP items).
    enc.raw(&body.inline);
    let mut out = enc.finish();
    out.ddp = body
        .ddp
        .into_iter()
        .map(|mut item| {
            item.inline_offset += shift;
            item
        })
        .collect();
    out
}

/// Polls `f` once: its output if it finished. For transport drivers that give a
/// call's dispatch its first poll in their own task (`server`, and
/// `rpcrdma_transport`'s server) and spawn it only if it waits. A future left pending
/// keeps the waker of the task that polled it until it is polled again elsewhere,
/// which costs that task at most a spurious wake-up.
pub async fn poll_once<F: Future + ?Sized>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

/// A future whose panic, when polled, becomes its output `Err` (the payload) instead
/// of unwinding into the task that polls it. It is not polled again after that.
struct CatchUnwind<'a, F>(Pin<&'a mut F>);

impl<F: Future> Future for CatchUnwind<'_, F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// The message of a panic payload (`panic!` makes a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

#[cfg(test)]
mod tests;
