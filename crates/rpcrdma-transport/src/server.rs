//! The responder: accepts RPC-over-RDMA connections and serves their Calls through an
//! [`oncrpc::Dispatcher`] (Linux `svc_rdma_transport.c`, `svc_rdma_recvfrom.c`,
//! `svc_rdma_rw.c`, `svc_rdma_sendto.c`).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.1 (credits), §4.4.5 (Read
//! chunks), §4.5 (shapes), §5.5 (errors), §8 (bindings), §11 (netid); RFC 8797.
//!
//! # One connection
//! ```text
//!  accept (private data) ─► post `credits` Receives
//!  Receive ─► validate ─┬─ bad header ─► RDMA_ERROR (§5.5.1, §5.5.2), re-post
//!                       └─ Call ─► RDMA Read each Read chunk segment into a sink
//!  all Reads done ─► reassemble (GARBAGE_ARGS on mismatch, §5.5.2) ─► §8 / §8.1.1 checks
//!             ─► Dispatcher::dispatch: its first poll in the connection task when no
//!                other Call is in service, else (or if it waits) a task of its own
//!                whose reply stream comes back to the connection task
//!  reply ─► marshal_reply ─┬─ fits the chunks ─► RDMA Writes, re-post, Send (With Inv.)
//!                          └─ Reply/Write chunk too small ─► RDMA_ERROR, nothing written
//! ```
//! The connection task is a thin driver around the protocol core's per-connection
//! [`Responder`]: completions, the dispatcher's replies, the pull timer and
//! [`BackwardChannel`] requests go in through its `handle_*` methods; the Receives it
//! gives back, the actions it returns (Sends, RDMA Reads and Writes, registrations,
//! invalidations) and its events (Calls for the dispatcher, backward Replies) are
//! executed here. Every protocol rule (validation, RDMA_ERROR, GARBAGE_ARGS, §8,
//! credits, the read budget, reliable reply, the backward direction) is the core's.
//!
//! A Receive is re-posted only once its Call is answered, so at most `credits` Calls
//! are in service: a requester that sends past its grant finds no Receive and the
//! provider ends that connection (§4.3.1: "the RDMA layer may signal an error,
//! possibly terminating the connection"); other connections are untouched.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use oncrpc::service::poll_once;
use oncrpc::Dispatcher;
use rdma::{
    BufferPool, Completion, ConnectRequest, ConnectionManager, Listener, PooledBuffer,
    ProtectionDomain, QueuePair, QueuePairExt, RegisterError, RemoteAddr, STag, SendOp, SendWr,
    WcOpcode, WcStatus,
};
use rpcrdma::marshal::RdmaWrite;
use rpcrdma::memory::MemoryBudget;
use rpcrdma::private_data::PrivateData;
use rpcrdma::responder::{BackwardFailure, ReliableReplyConfig};
use rpcrdma::rpc;
use rpcrdma::{Action, MarshalError, Responder, ResponderConfig, ResponderEvent, Segment, Xid};
use tokio::sync::{mpsc, oneshot, watch};
use xdr::XdrStream;

use crate::backward::{BackwardChannel, BackwardError, BackwardRequest};
use crate::binding::RdmaBinding;
use crate::counters::{ConnStats, Counter, StatsRegistry};
use crate::error::TransportError;
use crate::liveness::{Verdict, Waiting, Watchdog};
use crate::pool::{gather, wr_kind, RecvPool, SendFailure, SendPool};
use crate::registration::{join_in_place, ChunkRegion, ReadSink, Room};
use crate::setup::RdmaConfig;

/// An RPC-over-RDMA server for the programs of one dispatcher.
pub struct RdmaServer<P> {
    provider: Arc<P>,
    dispatcher: Arc<Dispatcher>,
    binding: Arc<dyn RdmaBinding>,
    config: RdmaConfig,
    stats: StatsRegistry,
    shutdown: watch::Sender<bool>,
    /// Where each new connection's [`BackwardChannel`] goes, once someone asked.
    backward: Mutex<Option<mpsc::UnboundedSender<BackwardChannel>>>,
    /// RDMA Read sinks, shared by the connections (`RdmaConfig::max_idle_buffers`).
    buffers: BufferPool,
    /// The memory all connections hold (`RdmaConfig::max_memory`): their buffers and
    /// Read chunk data.
    memory: Arc<MemoryBudget>,
}

impl<P> std::fmt::Debug for RdmaServer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaServer")
            .field("config", &self.config)
            .finish()
    }
}

impl<P: ConnectionManager + 'static> RdmaServer<P> {
    /// A server answering with `dispatcher`, for the programs `binding` covers.
    pub fn new(
        provider: P,
        dispatcher: Arc<Dispatcher>,
        binding: Arc<dyn RdmaBinding>,
        config: RdmaConfig,
    ) -> Self {
        RdmaServer {
            provider: Arc::new(provider),
            dispatcher,
            binding,
            buffers: BufferPool::new(config.max_idle_buffers),
            memory: MemoryBudget::new(config.max_memory),
            config,
            stats: StatsRegistry::default(),
            shutdown: watch::channel(false).0,
            backward: Mutex::new(None),
        }
    }

    /// The backward direction of every connection accepted from now on, one
    /// [`BackwardChannel`] each (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7). Empty
    /// unless [`RdmaConfig::backward_credits`] is non-zero. A second call replaces the
    /// first receiver.
    pub fn backward_channels(&self) -> mpsc::UnboundedReceiver<BackwardChannel> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.backward.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    /// Disconnects every connection (those accepted later too): a server restart, as
    /// the requester sees it. Stop [`RdmaServer::serve`] by dropping its future.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// This server's memory budget ([`RdmaConfig::max_memory`]): bytes held now, the
    /// peak, waits and refusals.
    pub fn memory(&self) -> Arc<MemoryBudget> {
        self.memory.clone()
    }

    /// Charges this server's connections to `budget` instead of one of its own
    /// ([`RdmaConfig::max_memory`] is then ignored): one budget for a whole process
    /// whose upper layer charges its own buffers too (nfsd's READ replies).
    pub fn with_memory(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.memory = budget;
        self
    }

    /// Every connection's counters.
    pub fn stats(&self) -> StatsRegistry {
        self.stats.clone()
    }

    /// Listens on `addr`.
    pub async fn bind(&self, addr: SocketAddr) -> io::Result<P::Listener> {
        self.provider.listen(addr).await
    }

    /// Registers every program of the dispatcher with rpcbind under netid "rdma"
    /// (§11: "rdma" for IPv4, "rdma6" for IPv6) at `addr`.
    pub async fn register(
        &self,
        registrar: &oncrpc::Registrar,
        addr: SocketAddr,
    ) -> Result<(), TransportError> {
        let netid = if addr.is_ipv4() {
            crate::NETID_RDMA
        } else {
            crate::NETID_RDMA6
        };
        registrar
            .set_all(&self.dispatcher.registrations(), netid, addr)
            .await
            .map_err(|e| TransportError::Io(e.into()))
    }

    /// Accepts connections on `listener` until it fails, serving each on its own task.
    /// Meanwhile, idle pooled buffers are freed after [`QUIET_PERIOD`] without use.
    pub async fn serve(&self, mut listener: P::Listener) -> io::Result<()> {
        let trimmer = tokio::spawn(release_when_quiet(self.buffers.clone(), QUIET_PERIOD));
        let _trimmer = AbortOnDrop(trimmer);
        self.stats.set_memory(self.memory.clone());
        loop {
            let req = listener.accept().await?;
            let peer = req.peer().clone();
            // Remote invalidation only where this device can invalidate.
            let config = self.config.on_device(&req.device().attributes());
            let limits = config.negotiate(&peer);
            let credits = config.credits.max(1);
            let initial = config.initial_credits.clamp(1, credits);
            let backward_credits = config.backward_credits;
            // RFC 8797: without the peer's private data, each Reply assumes the
            // default threshold of its Call's version; the core says how large a Send
            // can then be (`rpcrdma::version::max_send_size`).
            let peer_limits = PrivateData::parse(&peer.private_data).map(|_| limits);
            let policy = config.policy();
            let send_buffer_len =
                rpcrdma::version::max_send_size(peer_limits.as_ref(), policy.max_version);
            // Issue 16: the connection's Receive and Send buffers for its initial grant
            // are charged to the server's memory budget before they are allocated, for
            // as long as it lives (more as its grant grows, `ServerConn::grow_credits`).
            // One that does not fit (or that arrives while Calls wait for memory) is
            // rejected: the server never allocates past its budget. Room for one whole
            // Call is kept from connections, so that idle ones cannot keep every Call
            // with Read chunks waiting.
            let per_credit = config.recv_buffer_len() as u64;
            let needed = CONNECTION_STATE + conn_buffer_bytes(&config, initial, send_buffer_len);
            let Some(memory) = self.memory.try_charge_now(needed, config.max_message) else {
                self.stats.connection_refused(peer.addr, needed);
                let _ = req.reject(Bytes::new()).await;
                continue;
            };
            // §4.3.1: the Receives for the credits we grant go up with the connection,
            // before the requester can send its first Call. §7.2.2.2: one more per
            // backward credit, posted when the peer is ready for backward Calls. A
            // protection domain per connection, on the device the request came in on
            // (as Linux svcrdma does).
            let setup = req.device().alloc_pd().and_then(|pd| {
                let pool = RecvPool::new(
                    &pd,
                    initial + backward_credits,
                    credits + backward_credits,
                    config.recv_buffer_len(),
                )?;
                Ok((pd, pool))
            });
            let (pd, pool) = match setup {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(target: "rpcrdma_transport", peer = ?peer.addr, device = req.device().name(), error = %e, "cannot set up a connection: rejected");
                    let _ = req.reject(Bytes::new()).await;
                    continue;
                }
            };
            let recvs = pool.initial(0..initial as usize);
            let free_recvs: Vec<usize> = (initial as usize..(initial + backward_credits) as usize)
                .rev()
                .collect();
            let qp = match req.accept(&pd, config.connect_params(recvs)).await {
                Ok(qp) => qp,
                Err(e) => {
                    tracing::debug!(target: "rpcrdma_transport", error = %e, "accept failed");
                    continue;
                }
            };
            let stats = ConnStats::new("server", peer.addr);
            stats.set(Counter::PeerIrd, u64::from(peer.ird));
            stats.set(Counter::SendThreshold, u64::from(limits.send_threshold));
            stats.set(Counter::RecvThreshold, u64::from(limits.recv_threshold));
            stats.set(Counter::CreditsRequested, u64::from(config.credits));
            stats.set(Counter::MemoryCharged, memory.bytes());
            stats.set(Counter::SendBuffers, INITIAL_SEND_SLOTS as u64);
            self.stats.add(stats.clone());
            let core = Responder::new(
                self.binding.clone(),
                ResponderConfig {
                    policy,
                    credits: initial,
                    peer: peer_limits,
                    reassembly: config.reassembly(),
                    backward_credits: (backward_credits > 0).then_some(backward_credits),
                    reliable_reply: config.reliable_reply_offered().then_some(
                        ReliableReplyConfig {
                            pull_timeout: config.pull_timeout,
                            remote_invalidate: config.remote_invalidate,
                        },
                    ),
                    max_read_in_flight: config.max_read_in_flight,
                    read_memory: Some(self.memory.clone()),
                    served: self.dispatcher.registrations(),
                    // A peer that stops answering RDMA Reads loses the connection
                    // (`ResponderEvent::ReadTimeout`).
                    read_timeout: Some(config.read_timeout),
                },
            );
            let core = match core {
                Ok(c) => c.with_counters(stats.clone()),
                Err(_) => continue,
            };
            let backward_rx = if backward_credits > 0 {
                let (tx, rx) = mpsc::unbounded_channel();
                let channel = BackwardChannel {
                    tx,
                    peer: peer.addr,
                    stats: stats.clone(),
                };
                if let Some(to) = &*self.backward.lock().unwrap_or_else(|e| e.into_inner()) {
                    let _ = to.send(channel);
                }
                Some(rx)
            } else {
                None
            };
            // A few Send buffers to start with, more as Sends find them all taken
            // (`ServerConn::grow_sends`): an idle connection holds few.
            let sends = match SendPool::new(
                &pd,
                INITIAL_SEND_SLOTS,
                send_slots(credits),
                send_buffer_len as usize,
            ) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(target: "rpcrdma_transport", peer = ?peer.addr, error = %e, "cannot register send buffers: connection closed");
                    qp.disconnect();
                    continue;
                }
            };
            let (replies, replies_rx) = mpsc::unbounded_channel();
            let conn = ServerConn {
                watchdog: Watchdog::new(config.stall_timeout),
                dump_requests: self.stats.dump_requests(),
                teardown_by: None,
                sends_in_flight: 0,
                recv_buffers: (initial + backward_credits) as usize,
                qp: Arc::new(qp),
                pd: pd.clone(),
                buffers: self.buffers.clone(),
                core,
                dispatcher: self.dispatcher.clone(),
                stats,
                pool,
                free_recvs,
                sends,
                writes: Vec::new(),
                pulls: HashMap::new(),
                reads: HashMap::new(),
                next_id: 0,
                regions: HashMap::new(),
                invalidating: HashMap::new(),
                wholes: HashMap::new(),
                room_head: config.recv_buffer_len(),
                shutdown: self.shutdown.subscribe(),
                to_dispatch: VecDeque::new(),
                in_service: HashMap::new(),
                replies,
                backward_rx,
                backward_waiters: HashMap::new(),
                has_backward: backward_credits > 0,
                closing: None,
                growth: CreditGrowth {
                    max: credits,
                    per_credit,
                    budget: self.memory.clone(),
                    keep_free: config.max_message,
                },
                memory,
            };
            tokio::spawn(conn.run(replies_rx));
        }
    }
}

/// The most Send buffers of a connection granting at most `credits`: one Reply per
/// credit, and room for RDMA_ERRORs, GARBAGE_ARGS answers and backward Calls (which,
/// like any Send past them, fall back to registering caller bytes if they find the
/// pool empty).
fn send_slots(credits: u32) -> usize {
    credits.clamp(1, 1024) as usize + 8
}

/// Send buffers a connection starts with: one Reply in flight and the next (a peer's
/// Calls one at a time never need more). The pool doubles, up to [`send_slots`] of
/// the largest grant, when a Send finds every buffer taken (`ServerConn::grow_sends`).
pub const INITIAL_SEND_SLOTS: usize = 2;

/// What a connection holds besides its Receive and Send buffers (its task, the
/// provider's queues and tables), charged with them at accept: nfsd's RSS grows by
/// 26 KiB per idle connection on the userspace iWARP provider, 8 KiB of it the first
/// pages of its buffers (docs/hostile-peers.md, "Credits that grow with demand").
pub const CONNECTION_STATE: u64 = 24 << 10;

/// The bytes a connection's Receive and Send buffers take at a grant of `credits`
/// ([`RecvPool`], [`SendPool`]), charged to the server's memory budget while it
/// lives. Counted whole, although an idle connection touches only their first pages:
/// a peer that uses all its credits makes them resident.
fn conn_buffer_bytes(config: &RdmaConfig, credits: u32, send_buffer_len: u32) -> u64 {
    let recvs = u64::from(credits.max(1)) + u64::from(config.backward_credits);
    let recv = recvs * config.recv_buffer_len() as u64;
    let send = INITIAL_SEND_SLOTS as u64 * u64::from(send_buffer_len);
    recv + send
}

/// How long a connection waits, once disconnected (by the peer or by us), for the
/// provider to flush the work requests it still has posted before it is torn down
/// without them. A provider flushes at once (verbs: the QP goes to the error state;
/// lab runs flush in milliseconds); one that never does (a QP left in RESET) must not
/// keep the connection's task, buffers, regions and memory charge forever (issue 31).
/// Dropping the queue pair then destroys it, after which no work request touches
/// memory.
const TEARDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What growing a connection's credit grant needs (issue 16, [`RdmaConfig::initial_credits`]).
struct CreditGrowth {
    /// The most credits the connection may be granted ([`RdmaConfig::credits`]).
    max: u32,
    /// The bytes of one more credit's Receive buffer.
    per_credit: u64,
    /// The server's memory budget, which the buffers are charged to.
    budget: Arc<MemoryBudget>,
    /// Room a connection's buffers never take ([`MemoryBudget::try_charge_now`]).
    keep_free: u64,
}

/// How long the buffer pool must go unused before its idle buffers are freed.
pub const QUIET_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// Frees the pool's idle buffers (up to `RdmaConfig::max_idle_buffers`, kept for the
/// next burst) once a whole `period` went by without a buffer taken: after load, that
/// memory goes back (issue 16).
pub async fn release_when_quiet(pool: BufferPool, period: std::time::Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = pool.stats();
    loop {
        tick.tick().await;
        let now = pool.stats();
        let used = (now.reused, now.allocated) != (last.reused, last.allocated);
        if !used && now.idle_bytes > 0 {
            let freed = pool.release_idle();
            tracing::debug!(target: "rpcrdma_transport", freed, "idle buffers released");
        }
        last = pool.stats();
    }
}

/// Aborts a task when dropped (the server's future ended or was dropped).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why the transport closed a connection (logged, and kept in its counters'
/// close reason).
#[derive(Debug)]
enum CloseReason {
    /// The server is shutting down.
    Shutdown,
    /// The provider refused a work request.
    Post(&'static str, rdma::PostError),
    /// The device refused to register memory a work request needed.
    Register(&'static str, RegisterError),
    /// A work request completed in error (§5.5.3: "RDMA operational errors are
    /// typically fatal to the connection").
    Completion(Completion),
    /// The protocol core asked for it (§5.5.4: no Reply or error could be sent).
    Core,
    /// The provider reported a Receive we cannot read (unknown buffer, bad length).
    BadReceive(Completion),
    /// A Call's RDMA Reads did not complete within `RdmaConfig::read_timeout`.
    ReadTimeout(std::time::Duration),
    /// Work requests we posted made no progress for `RdmaConfig::stall_timeout`
    /// (`liveness`).
    Stalled(std::time::Duration, String),
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseReason::Shutdown => f.write_str("server shutdown"),
            CloseReason::Post(what, e) => write!(f, "posting {what} failed: {e}"),
            CloseReason::Register(what, e) => write!(f, "registering {what} failed: {e}"),
            CloseReason::Completion(c) => {
                write!(f, "{:?} completed with {:?}", c.opcode, c.status)
            }
            CloseReason::Core => f.write_str("protocol error: no reply possible"),
            CloseReason::ReadTimeout(t) => {
                write!(f, "RDMA Reads of a Call not complete within {t:?}")
            }
            CloseReason::Stalled(t, waiting) => {
                write!(
                    f,
                    "no progress for {t:?} with work requests posted ({waiting})"
                )
            }
            CloseReason::BadReceive(c) => {
                write!(
                    f,
                    "Receive {:#x} of {} bytes is unreadable",
                    c.wr_id, c.byte_len
                )
            }
        }
    }
}

/// One RDMA Read chunk being pulled into its sink.
struct Pull {
    /// When its Reads were posted (for the live state's oldest Read; the read
    /// timeout is the core's, `Responder::handle_reads_posted`).
    started: Instant,
    xid: Xid,
    chunk: usize,
    len: usize,
    sink: ReadSink,
}

/// Room around a Read sink for the rest of its Call: before the chunk, at most the
/// inline part (the receive buffer); after it, XDR padding and a short tail.
const READ_SINK_TAIL_ROOM: usize = 256;

/// One server connection: the core's [`Responder`] and what executing its actions
/// needs (buffers, work requests in flight, registered regions, the upper layer's
/// reply and backward-call channels). No protocol state lives here.
struct ServerConn<Q> {
    qp: Arc<Q>,
    pd: ProtectionDomain,
    /// Where Read sinks come from (shared by the server's connections).
    buffers: BufferPool,
    core: Responder<Arc<dyn RdmaBinding>>,
    dispatcher: Arc<Dispatcher>,
    stats: Arc<ConnStats>,
    pool: RecvPool,
    /// Receive buffers not posted: taken by a completion, or never posted yet
    /// (backward Receives before the peer is ready).
    free_recvs: Vec<usize>,
    sends: SendPool,
    /// RDMA Writes of the Reply being sent, posted in one list with its Send (one
    /// doorbell; on a verbs device the Writes go unsignaled), or before any other work
    /// request, in the order the core asked for them.
    writes: Vec<SendWr>,
    /// Read chunks being pulled, by sink id; RDMA Reads in flight, by work request id.
    pulls: HashMap<u64, Pull>,
    reads: HashMap<u64, u64>,
    next_id: u64,
    /// Our regions exposed to the peer (responder-provided Read chunks), by STag.
    regions: HashMap<u32, ChunkRegion>,
    /// Regions whose LOCAL_INV is posted, by STag, until it completes.
    invalidating: HashMap<u32, ChunkRegion>,
    /// The buffer (with room) the first Read chunk of each Call in service was read
    /// into, and where the data starts, for making the Call contiguous around it
    /// without a copy. Only Calls the core still holds (`Responder::has_call`).
    wholes: HashMap<Xid, (PooledBuffer, usize)>,
    /// Room in front of a Read sink: our receive buffer length.
    room_head: usize,
    shutdown: watch::Receiver<bool>,
    /// Calls to hand to the dispatcher ([`ServerConn::dispatch_calls`]), in order.
    to_dispatch: VecDeque<(Xid, Bytes)>,
    /// Calls running as tasks of their own, and when each was handed over: their
    /// replies are still to come.
    in_service: HashMap<Xid, Instant>,
    /// Sends posted whose completion has not come yet.
    sends_in_flight: usize,
    /// Receive buffers the connection has (posted or not).
    recv_buffers: usize,
    /// Judges whether a busy connection makes progress (`liveness`); `None` when
    /// `RdmaConfig::stall_timeout` is zero.
    watchdog: Option<Watchdog>,
    /// Requests for this connection's live state ([`StatsRegistry::live_states`]).
    dump_requests: watch::Receiver<u64>,
    /// Once disconnected: when to stop waiting for the provider's flushes
    /// ([`TEARDOWN_GRACE`]).
    teardown_by: Option<Instant>,
    /// Replies from the dispatcher's tasks.
    replies: mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    /// Requests from this connection's [`BackwardChannel`]s (taken by `run`).
    backward_rx: Option<mpsc::UnboundedReceiver<BackwardRequest>>,
    /// Where the Reply of each backward Call the core took goes (sent, or waiting
    /// there for a backward credit).
    backward_waiters: HashMap<Xid, Waiter>,
    has_backward: bool,
    closing: Option<CloseReason>,
    growth: CreditGrowth,
    /// This connection's buffers' charge to the server's memory budget, released
    /// when the connection task ends (its buffers go with it).
    memory: rpcrdma::memory::Charge,
}

type Waiter = oneshot::Sender<Result<Bytes, BackwardError>>;

/// Most completions one turn of a connection's loop takes beyond the one it woke for.
const COMPLETIONS_PER_TURN: usize = 16;

/// Records the provider's disconnect reason, if it has one ready.
pub(crate) async fn record_close_reason(qp: &dyn QueuePair, stats: &ConnStats) {
    let ev = std::future::poll_fn(|cx| match qp.poll_event(cx) {
        std::task::Poll::Ready(e) => std::task::Poll::Ready(e),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await;
    if let Some(rdma::QpEvent::Disconnected(reason)) = ev {
        stats.set_close_reason(format!("{reason:?}"));
    }
}

impl<Q: QueuePair + 'static> ServerConn<Q> {
    async fn run(mut self, mut replies: mpsc::UnboundedReceiver<(Xid, Option<XdrStream>)>) {
        let qp = self.qp.clone();
        let mut shutdown = self.shutdown.clone();
        // One future for the connection's life, not one per turn of the loop (a
        // watch's `changed()` future costs a registration and its removal each). A
        // server dropped without shutting down leaves its connections open.
        let stop = async move {
            if shutdown.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::pin!(stop);
        // The watchdog's tick, and requests for a state dump: one future each for the
        // connection's life, renewed only when they fire.
        let period = self.watchdog.as_ref().map(Watchdog::period);
        let tick = tokio::time::sleep(period.unwrap_or(std::time::Duration::MAX / 4));
        tokio::pin!(tick);
        let dump = next_change(self.dump_requests.clone());
        tokio::pin!(dump);
        let mut backward_rx = self.backward_rx.take();
        // The provider's disconnect event, taken as it comes so that the teardown's
        // grace period starts then.
        let mut disconnected: Option<rdma::DisconnectReason> = None;
        let mut events_done = false;
        loop {
            let teardown_by = self.teardown_by;
            let teardown = async move {
                match teardown_by {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            // The core's one timer, armed for its deadline: reliable-reply §4.1.3's
            // pull timeout, the retry of a refused credit growth, the RDMA Read
            // timeout (`ResponderEvent::ReadTimeout`).
            let deadline = self.core.poll_timeout();
            let timer = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            // A Call waits for the server's memory budget: wake on the next release.
            let memory = self.core.memory_wait().map(|(b, g)| (b.clone(), g));
            let released = async move {
                match memory {
                    Some((budget, since)) => {
                        std::future::poll_fn(|cx| budget.poll_released(since, cx)).await
                    }
                    None => std::future::pending().await,
                }
            };
            let mut remote = None;
            let mut completed = false;
            tokio::select! {
                _ = &mut stop, if self.closing.is_none() => self.close(CloseReason::Shutdown),
                c = qp.completion() => match c {
                    None => break,
                    Some(c) => {
                        remote = self.handle_completion(c);
                        completed = true;
                    }
                },
                Some((xid, reply)) = replies.recv() => {
                    self.in_service.remove(&xid);
                    self.answer(xid, reply);
                }
                () = &mut tick, if period.is_some() => {
                    self.check_liveness();
                    if let Some(p) = period {
                        tick.as_mut().reset(tokio::time::Instant::now() + p);
                    }
                }
                rx = &mut dump => {
                    self.set_live_state();
                    dump.set(next_change(rx));
                }
                ev = qp.event(), if disconnected.is_none() && !events_done => match ev {
                    Some(rdma::QpEvent::Disconnected(why)) => {
                        disconnected = Some(why);
                        self.teardown_by.get_or_insert(Instant::now() + TEARDOWN_GRACE);
                    }
                    None => events_done = true,
                },
                () = teardown => {
                    let waiting = self.waiting();
                    self.stats.inc(Counter::TeardownsUnflushed);
                    tracing::warn!(
                        target: "rpcrdma_transport",
                        conn = self.stats.id,
                        peer = ?self.stats.peer,
                        "the provider did not flush this connection's work requests within {TEARDOWN_GRACE:?} of its disconnect ({waiting}): torn down without them",
                    );
                    break;
                }
                _ = timer => {
                    // Pull deadlines, the retry of a refused credit growth, the read
                    // timeout.
                    self.core.handle_timeout(Instant::now());
                    if self.closing.is_none() {
                        self.grow_credits();
                    }
                }
                _ = released, if self.closing.is_none() => self.core.handle_memory_released(),
                req = recv_backward(&mut backward_rx) => match req {
                    Some(req) => self.handle_backward_request(req),
                    None => backward_rx = None,
                },
            }
            self.drive(remote);
            self.dispatch_calls().await;
            // Completions already waiting are taken in this same turn (a Reply's Send
            // may complete as it is posted, a siw QP's does): one turn of the loop per
            // Call, not one per completion, up to a bound that keeps the other
            // branches served.
            if completed && self.take_waiting_completions().await.is_break() {
                break;
            }
        }
        // The connection is gone: the core invalidates what it exposed (reliable-reply
        // §5.4.3) and fails our backward Calls (§7.3.2).
        self.core.handle_disconnect();
        self.drive(None);
        for (_, w) in self.backward_waiters.drain() {
            let _ = w.send(Err(BackwardError::ConnectionLost));
        }
        // Why it closed: a failed post is the consequence of a connection the provider
        // already lost, whose reason (a Terminate from the peer, say) is the cause; any
        // other reason of ours is the cause itself.
        match (&self.closing, disconnected) {
            (Some(CloseReason::Post(..)) | None, Some(why)) => {
                self.stats.set_close_reason(format!("{why:?}"));
            }
            (Some(CloseReason::Post(..)) | None, None) => {
                if let Some(why) = &self.closing {
                    self.stats.set_close_reason(why.to_string());
                }
                record_close_reason(&*self.qp, &self.stats).await;
            }
            (Some(why), _) => self.stats.set_close_reason(why.to_string()),
        }
        self.stats.close();
    }

    /// Handles the completions the QP has ready now, at most
    /// [`COMPLETIONS_PER_TURN`], each driven to its end; `Break` when the QP has no
    /// more to give (the connection is gone).
    async fn take_waiting_completions(&mut self) -> std::ops::ControlFlow<()> {
        let qp = self.qp.clone();
        for _ in 0..COMPLETIONS_PER_TURN {
            match poll_once(std::pin::pin!(qp.completion())).await {
                Poll::Pending => break,
                Poll::Ready(None) => return std::ops::ControlFlow::Break(()),
                Poll::Ready(Some(c)) => {
                    let remote = self.handle_completion(c);
                    self.drive(remote);
                    self.dispatch_calls().await;
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Hands the Calls [`ServerConn::drive`] found to the dispatcher. When no other
    /// Call of this connection is in service, a Call's first poll runs here, and most
    /// end in it (nfsd's metadata calls, errors): the Reply is sent at once, with no
    /// task, channel and further turn of the connection's loop (the hand-off the TCP
    /// server also skips, `oncrpc::server`). A Call that waits, or one that comes while
    /// others are in service, runs as a task of its own; its reply comes back through
    /// `replies`.
    async fn dispatch_calls(&mut self) {
        while let Some((xid, call)) = self.to_dispatch.pop_front() {
            // The upper layer grants access by client address (NFS exports).
            let peer = self.stats.peer.map(|addr| oncrpc::Peer {
                addr,
                protocol: oncrpc::Protocol::Rdma,
            });
            let dispatcher = self.dispatcher.clone();
            let mut call = Box::pin(async move { dispatcher.dispatch_from(call, peer).await });
            if self.in_service.is_empty() {
                if let Poll::Ready(reply) = poll_once(call.as_mut()).await {
                    self.answer(xid, reply);
                    self.drive(None);
                    continue;
                }
            }
            self.in_service.insert(xid, Instant::now());
            let tx = self.replies.clone();
            tokio::spawn(async move {
                let reply = call.await;
                let _ = tx.send((xid, reply));
            });
        }
    }

    /// Gives the core the dispatcher's answer to Call `xid`.
    fn answer(&mut self, xid: Xid, reply: Option<XdrStream>) {
        if let Some(w) = &mut self.watchdog {
            w.progress();
        }
        match reply {
            Some(stream) => {
                let _ = self.core.send_reply(xid, stream);
            }
            // The dispatcher earns the Call no reply.
            None => self.core.drop_call(xid),
        }
    }

    /// What this connection waits for now (`liveness`).
    fn waiting(&self) -> Waiting {
        let now = Instant::now();
        Waiting {
            calls: self.core.pending_calls(),
            credits: self.core.credits().target(),
            recvs_posted: self.recv_buffers.saturating_sub(self.free_recvs.len()),
            in_dispatcher: self.in_service.len() + self.to_dispatch.len(),
            oldest_dispatch: crate::liveness::oldest(now, self.in_service.values().copied()),
            reads: self.reads.len(),
            oldest_read: crate::liveness::oldest(now, self.pulls.values().map(|p| p.started)),
            sends: self.sends_in_flight,
            invalidations: self.invalidating.len(),
            memory_wait: self.core.memory_wait().is_some(),
            backward: self.backward_waiters.len(),
            charged: self.memory.bytes(),
        }
    }

    /// The watchdog's tick: a busy connection without progress is logged once, and
    /// closed when it is stuck on its own work requests (issue 31).
    fn check_liveness(&mut self) {
        let waiting = self.waiting();
        let Some(w) = &mut self.watchdog else {
            return;
        };
        match w.tick(&waiting) {
            Verdict::Fine => {}
            Verdict::Warn(quiet) => {
                self.stats.inc(Counter::Stalls);
                let action = if waiting.on_work_requests() {
                    "closed if none comes within the stall timeout"
                } else {
                    "not closed: a new connection would wait the same"
                };
                tracing::warn!(
                    target: "rpcrdma_transport",
                    conn = self.stats.id,
                    peer = ?self.stats.peer,
                    "connection made no progress for {quiet:?} while busy ({waiting}); {action}",
                );
            }
            Verdict::Close(quiet) => {
                self.stats.inc(Counter::StallCloses);
                tracing::warn!(
                    target: "rpcrdma_transport",
                    conn = self.stats.id,
                    peer = ?self.stats.peer,
                    "closing a connection stuck for {quiet:?} on work requests it posted ({waiting}); the client reconnects and retransmits",
                );
                self.close(CloseReason::Stalled(quiet, waiting.to_string()));
            }
        }
    }

    /// Answers a state dump request ([`StatsRegistry::live_states`]).
    fn set_live_state(&self) {
        let quiet = self
            .watchdog
            .as_ref()
            .map(|w| format!(" no_progress_for>={:?}", w.quiet_for()))
            .unwrap_or_default();
        let closing = match &self.closing {
            Some(why) => format!(" closing ({why})"),
            None => String::new(),
        };
        self.stats
            .set_live_state(format!("{}{quiet}{closing}", self.waiting()));
    }

    /// Disconnects, once, saying why.
    fn close(&mut self, why: CloseReason) {
        if self.closing.is_some() {
            return;
        }
        tracing::debug!(target: "rpcrdma_transport", conn = self.stats.id, reason = %why, "closing connection");
        if !matches!(why, CloseReason::Post(..)) {
            self.stats.inc(Counter::ClosedByUs);
        }
        self.closing = Some(why);
        self.teardown_by
            .get_or_insert(Instant::now() + TEARDOWN_GRACE);
        self.qp.disconnect();
    }

    /// Executes everything the core asked for: Receives back first (§4.3.1: "a credit
    /// increase is effected (i.e. RDMA Receives are posted) before the next reply is
    /// sent"), then its actions in order, then its events. `remote` is the STag the
    /// peer invalidated with the Send With Invalidate just received.
    fn drive(&mut self, remote: Option<STag>) {
        loop {
            let n = self.core.poll_reposts();
            self.post_recvs(n);
            if let Some(a) = self.core.poll_action() {
                self.execute(a, remote);
                continue;
            }
            let Some(ev) = self.core.poll_event() else {
                break;
            };
            self.handle_event(ev);
        }
        self.flush_writes();
        if !self.wholes.is_empty() {
            // Calls the core dropped or refused leave nothing behind.
            let core = &self.core;
            self.wholes.retain(|xid, _| core.has_call(*xid));
        }
    }

    /// Raises the credit grant when the requester uses more than half of it
    /// ([`rpcrdma::credits::grown_target`]) and the server's memory budget has room
    /// for the buffers: they are charged, added to the pools, and the core asks for
    /// their Receives to be posted before a Reply announces them (§4.3.1).
    fn grow_credits(&mut self) {
        let Some(next) = self.core.credit_growth(self.growth.max) else {
            return;
        };
        let target = self.core.credits().target();
        let more = next - target;
        let bytes = u64::from(more) * self.growth.per_credit;
        let Some(charge) = self
            .growth
            .budget
            .try_charge_now(bytes, self.growth.keep_free)
        else {
            // The core says when to try again (`poll_timeout`, `GROWTH_RETRY`).
            self.core.handle_credit_growth_refused(Instant::now());
            return;
        };
        // Charged before anything is allocated; kept if only part of it was (the
        // charge then covers at least what the pools hold).
        self.memory.absorb(charge);
        self.stats.set(Counter::MemoryCharged, self.memory.bytes());
        match self.pool.grow(&self.pd, more as usize) {
            Ok(added) => {
                self.recv_buffers += added.len();
                self.free_recvs.extend(added.rev());
                // Cannot fail: `next` is at least 1.
                let _ = self.core.set_credit_target(next);
            }
            Err(e) => {
                tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, error = %e, credits = target, "cannot register buffers for more credits: the grant stays");
                self.growth.max = target;
            }
        }
    }

    /// Doubles the Send buffers (up to [`send_slots`] of the largest grant), charged to
    /// the memory budget first as a larger grant's Receives are; without room in the
    /// budget, or if they cannot be registered, the Send registers its own pieces.
    fn grow_sends(&mut self) {
        let more = self.sends.slots().min(self.sends.room());
        if more == 0 {
            return;
        }
        let bytes = (more * self.sends.slot_len()) as u64;
        let Some(charge) = self
            .growth
            .budget
            .try_charge_now(bytes, self.growth.keep_free)
        else {
            return;
        };
        self.memory.absorb(charge);
        self.stats.set(Counter::MemoryCharged, self.memory.bytes());
        if let Err(e) = self.sends.grow(more) {
            tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, error = %e, slots = self.sends.slots(), "cannot register more send buffers: Sends register their own");
            self.sends.stop_growing();
        }
        self.stats
            .set(Counter::SendBuffers, self.sends.slots() as u64);
    }

    fn post_recvs(&mut self, n: u32) {
        for _ in 0..n {
            let Some(i) = self.free_recvs.pop() else {
                // Cannot happen: each Receive given back was taken by a completion.
                tracing::warn!(target: "rpcrdma_transport", "no receive buffer to post");
                return;
            };
            if let Err(e) = self.pool.post(&*self.qp, i) {
                self.free_recvs.push(i);
                return self.close(CloseReason::Post("a Receive", e));
            }
        }
    }

    fn execute(&mut self, action: Action, remote: Option<STag>) {
        if !matches!(action, Action::RdmaWrite { .. } | Action::Send { .. }) {
            // Send-queue order is the order the core asked for.
            self.flush_writes();
        }
        match action {
            Action::Send {
                xid,
                send,
                invalidate,
            } => self.post_send(xid, send, invalidate),
            Action::RdmaWrite { xid, write } => self.post_write(xid, write),
            Action::RdmaRead {
                xid,
                chunk,
                segments,
            } => self.post_reads(xid, chunk, &segments),
            Action::Register { xid, registrations } => {
                // COPY: a Reply's Payload stream into its registered region (see
                // `registration`), registered for remote read only.
                let mut segments = Vec::with_capacity(registrations.len());
                for reg in &registrations {
                    match ChunkRegion::register(&self.pd, &self.buffers, reg, &self.stats) {
                        Ok(region) => {
                            let seg = region.segment();
                            self.regions.insert(seg.handle, region);
                            segments.push(vec![seg]);
                        }
                        Err(e) => {
                            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "Reply chunk not registered");
                            self.core.handle_registration_failed(xid);
                            return;
                        }
                    }
                }
                let _ = self.core.handle_registered(Instant::now(), xid, segments);
            }
            Action::Invalidate { handles, .. } => self.invalidate(&handles, remote),
            Action::PostReceives(n) => {
                self.post_recvs(n);
                self.core.handle_receives_posted(n);
            }
            // §7.2.2.2: "an RPC-over-RDMA server endpoint must pre-post a receive
            // buffer for each backward direction Call it sends".
            Action::PostBackwardReceives(n) => self.post_recvs(n),
            Action::Close => self.close(CloseReason::Core),
        }
    }

    /// Fences our Read chunk regions `handles` (reliable reply: the peer pulled the
    /// Reply, or its time is up): a posted LOCAL_INV each, unless the peer invalidated
    /// it with the Send With Invalidate that brought its RDMA_DONE (`remote`). A
    /// region stays registered until its LOCAL_INV completes.
    fn invalidate(&mut self, handles: &[u32], remote: Option<STag>) {
        for &h in handles {
            let Some(region) = self.regions.remove(&h) else {
                continue;
            };
            if !self.pd.attributes().invalidate {
                // The device cannot invalidate (a verbs `ibv_reg_mr` registration):
                // deregistering the region (dropping it) fences it.
                self.stats.inc(Counter::FencedByDeregistration);
                continue;
            }
            if remote.is_some_and(|r| r.0 == h) {
                self.stats.inc(Counter::RemoteInvalidations);
                continue;
            }
            let wr = region.invalidate_wr(wr_kind::INVALIDATE | u64::from(h));
            match self.qp.post_send(wr) {
                Ok(()) => {
                    self.invalidating.insert(h, region);
                }
                // The connection is gone, which fences the region (reliable-reply
                // §5.4.3: the chunks still exposed when it ends).
                Err(rdma::PostError::NotConnected) => {
                    self.stats.inc(Counter::FencedByDisconnect);
                }
                // v1 §5.5.4 (and reliable-reply §4.2): a region that cannot be
                // invalidated ends the connection, which fences it.
                Err(e) => return self.close(CloseReason::Post("a local invalidation", e)),
            }
        }
    }

    fn handle_event(&mut self, ev: ResponderEvent) {
        match ev {
            ResponderEvent::Call { xid, payload, .. } => {
                // A Call with one Read chunk (an NFS WRITE) is made contiguous in the
                // buffer the chunk was read into, around the data, without copying it.
                let whole = match self.wholes.remove(&xid) {
                    Some((buf, at)) => match join_in_place(payload, &buf, at) {
                        Ok(call) => {
                            self.stats.inc(Counter::CallsJoinedInPlace);
                            call
                        }
                        // COPY: several chunks, or pieces that do not fit the room.
                        Err(payload) => payload.to_bytes(),
                    },
                    // COPY: a Call of several pieces (inline part and Read chunk data)
                    // is made contiguous for `Dispatcher::dispatch`, which takes one
                    // `Bytes`.
                    None => payload.to_bytes(),
                };
                self.to_dispatch.push_back((xid, whole));
            }
            ResponderEvent::Refused { xid, error, answer } => {
                tracing::debug!(target: "rpcrdma_transport", xid = ?xid.map(|x| x.0), %error, ?answer, "refused");
            }
            ResponderEvent::BackwardReply { xid, payload } => {
                if let Some(w) = self.backward_waiters.remove(&xid) {
                    let _ = w.send(Ok(payload));
                }
            }
            // §5.5.3: a peer that does not answer our RDMA Reads loses the connection.
            ResponderEvent::ReadTimeout { after, .. } => {
                if self.closing.is_none() {
                    self.stats.inc(Counter::ReadTimeouts);
                    self.close(CloseReason::ReadTimeout(after));
                }
            }
            ResponderEvent::BackwardFailed { xid, reason } => {
                if let Some(w) = self.backward_waiters.remove(&xid) {
                    let _ = w.send(Err(match reason {
                        BackwardFailure::Refused => BackwardError::Refused,
                        BackwardFailure::ConnectionLost => BackwardError::ConnectionLost,
                    }));
                }
            }
        }
    }

    /// A completion; returns the STag a received Send With Invalidate took.
    fn handle_completion(&mut self, c: Completion) -> Option<STag> {
        if let Some(w) = &mut self.watchdog {
            w.progress();
        }
        if c.wr_id & wr_kind::MASK == wr_kind::SEND {
            self.sends.complete(c.wr_id);
            self.sends_in_flight = self.sends_in_flight.saturating_sub(1);
        }
        match c.status {
            WcStatus::Success => {}
            WcStatus::Flushed => {
                self.stats.inc(Counter::Flushed);
                if c.wr_id & wr_kind::MASK == wr_kind::INVALIDATE {
                    // Not run, but the connection's end fenced the region.
                    self.stats.inc(Counter::FencedByDisconnect);
                }
                return None;
            }
            _ => {
                self.stats.inc(Counter::ErrCompletion);
                self.close(CloseReason::Completion(c));
                return None;
            }
        }
        let id = c.wr_id & !wr_kind::MASK;
        match (c.opcode, c.wr_id & wr_kind::MASK) {
            (WcOpcode::Recv, wr_kind::RECV) => {
                let index = id as usize;
                let Some(buf) = self.pool.take(index, c.byte_len) else {
                    self.close(CloseReason::BadReceive(c));
                    return None;
                };
                self.free_recvs.push(index);
                self.stats.inc(Counter::Recvs);
                self.stats.add(Counter::RecvBytes, buf.len() as u64);
                self.core.handle_receive(buf);
                self.grow_credits();
                c.invalidated
            }
            (WcOpcode::LocalInvalidate, wr_kind::INVALIDATE) => {
                // Fenced: the region goes (deregistered).
                self.stats.inc(Counter::LocalInvalidations);
                self.invalidating.remove(&(id as u32));
                None
            }
            (WcOpcode::RdmaRead, wr_kind::READ) => {
                let pull_id = self.reads.remove(&id)?;
                let done = self.pulls.get_mut(&pull_id).is_some_and(|p| {
                    p.sink.outstanding = p.sink.outstanding.saturating_sub(1);
                    p.sink.outstanding == 0
                });
                if done {
                    if let Some(p) = self.pulls.remove(&pull_id) {
                        let (whole, at) = p.sink.into_whole();
                        let data = match whole.freeze(at..at + p.len) {
                            Ok(data) => data,
                            Err(e) => {
                                let e = RegisterError::Provider(std::io::Error::other(e));
                                self.close(CloseReason::Register("an RDMA Read sink", e));
                                return None;
                            }
                        };
                        if p.chunk == 0 {
                            self.wholes.insert(p.xid, (whole, at));
                        }
                        self.core.handle_read_done(p.xid, p.chunk, data);
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = (self.next_id + 1) & !wr_kind::MASK;
        id
    }

    /// §4.4.5: pulls Read chunk `chunk` of Call `xid` with one RDMA Read per segment
    /// into one sink. The provider holds Reads beyond the peer's IRD (our ORD) until
    /// earlier ones complete.
    fn post_reads(&mut self, xid: Xid, chunk: usize, segments: &[Segment]) {
        let len: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
        let room = Room {
            head: self.room_head,
            tail: READ_SINK_TAIL_ROOM,
        };
        let mut sink = match ReadSink::with_room(&self.pd, &self.buffers, len as usize, room) {
            Ok(sink) => sink,
            Err(e) => return self.close(CloseReason::Register("an RDMA Read sink", e)),
        };
        self.stats.count_region(&sink.mr);
        let pull_id = self.take_id();
        let mut at = 0usize;
        for seg in segments.iter().filter(|s| s.length > 0) {
            let id = self.take_id();
            self.stats.inc(Counter::RdmaReads);
            self.stats
                .add(Counter::RdmaReadBytes, u64::from(seg.length));
            if let Err(e) = self.qp.post_send(sink.read_wr(wr_kind::READ | id, seg, at)) {
                return self.close(CloseReason::Post("an RDMA Read", e));
            }
            self.reads.insert(id, pull_id);
            sink.outstanding += 1;
            at += seg.length as usize;
        }
        if sink.outstanding == 0 {
            match sink.into_bytes() {
                Ok(data) => self.core.handle_read_done(xid, chunk, data),
                Err(e) => self.close(CloseReason::Register("an RDMA Read sink", e)),
            }
        } else {
            let now = Instant::now();
            self.core.handle_reads_posted(xid, chunk, now);
            self.pulls.insert(
                pull_id,
                Pull {
                    started: now,
                    xid,
                    chunk,
                    len: len as usize,
                    sink,
                },
            );
        }
    }

    fn post_send(&mut self, xid: Xid, send: Vec<Bytes>, invalidate: Option<u32>) {
        let len: usize = send.iter().map(Bytes::len).sum();
        self.stats.inc(Counter::Sends);
        self.stats.add(Counter::SendBytes, len as u64);
        let op = match invalidate {
            Some(h) => {
                self.stats.inc(Counter::SendWithInvalidate);
                SendOp::SendWithInvalidate(STag(h))
            }
            None => SendOp::Send,
        };
        let wr_id = wr_kind::SEND | u64::from(xid.0);
        if self.sends.exhausted() {
            self.grow_sends();
        }
        let writes = std::mem::take(&mut self.writes);
        match self
            .sends
            .post(&*self.qp, writes, wr_id, op, send, &self.stats)
        {
            Ok(true) => self.sends_in_flight += 1,
            Ok(false) => {
                self.sends_in_flight += 1;
                self.stats.inc(Counter::SendPoolFallbacks);
            }
            Err(SendFailure::Post(e)) => self.close(CloseReason::Post("a Send", e)),
            Err(SendFailure::Register(e)) => self.close(CloseReason::Register("a Send", e)),
        }
    }

    /// An RDMA Write of a Reply. §3.2.2 (ordering): RDMA Writes posted before the Send
    /// are placed before it.
    fn post_write(&mut self, xid: Xid, w: RdmaWrite) {
        self.stats.inc(Counter::RdmaWrites);
        self.stats.add(Counter::RdmaWriteBytes, w.len());
        // The result's own buffers, registered as they are: no copy.
        let sgl = match w
            .data
            .into_iter()
            .map(|b| gather(&self.pd, b, &self.stats))
            .collect()
        {
            Ok(sgl) => sgl,
            Err(e) => return self.close(CloseReason::Register("an RDMA Write's data", e)),
        };
        self.writes.push(SendWr {
            wr_id: wr_kind::WRITE | u64::from(xid.0),
            op: SendOp::RdmaWrite(RemoteAddr {
                stag: STag(w.handle),
                offset: w.offset,
            }),
            sgl,
        });
    }

    /// Posts the RDMA Writes no Send took along (the core asked for other work first).
    fn flush_writes(&mut self) {
        if self.writes.is_empty() {
            return;
        }
        let writes = std::mem::take(&mut self.writes);
        if let Err(e) = self.qp.post_send_list(writes) {
            self.close(CloseReason::Post("an RDMA Write", e));
        }
    }

    /// A request from a [`BackwardChannel`] (v1 §7).
    fn handle_backward_request(&mut self, req: BackwardRequest) {
        match req {
            BackwardRequest::Ready => self.core.handle_peer_backward_ready(),
            BackwardRequest::Call { msg, reply } => {
                if !self.has_backward {
                    let _ = reply.send(Err(BackwardError::ConnectionLost));
                    return;
                }
                let xid = match rpc::xid(&msg.inline) {
                    Some(x) if rpc::msg_type(&msg.inline) == Some(rpc::CALL) => x,
                    _ => {
                        let _ = reply.send(Err(BackwardError::NotACall));
                        return;
                    }
                };
                self.start_backward(xid, msg, reply);
            }
        }
    }

    /// Hands backward Call `xid` to the core, which sends it when a backward credit
    /// is free. Whether the peer said it is ready (§7.3.1), a duplicate XID, the
    /// inline limit (§7.4) and the wait for credits are the core's rules
    /// (`Responder::start_backward_call`).
    fn start_backward(&mut self, xid: Xid, msg: XdrStream, reply: Waiter) {
        let err = match self.core.start_backward_call(xid, msg) {
            Ok(()) => {
                self.backward_waiters.insert(xid, reply);
                return;
            }
            Err(rpcrdma::Error::Credit(_)) => BackwardError::Busy,
            // §7.4: backward messages are never reduced.
            Err(rpcrdma::Error::Marshal(MarshalError::HeaderTooLarge { len, threshold })) => {
                BackwardError::TooLarge { len, threshold }
            }
            Err(rpcrdma::Error::Marshal(MarshalError::BackwardNotReady)) => BackwardError::NotReady,
            Err(rpcrdma::Error::Marshal(MarshalError::DuplicateBackwardXid(x))) => {
                BackwardError::DuplicateXid(x)
            }
            Err(_) => BackwardError::ConnectionLost,
        };
        self.stats.inc(Counter::BackwardFailed);
        let _ = reply.send(Err(err));
    }
}

/// Waits for the next value of `rx` and gives it back; pending forever once its
/// sender is gone.
async fn next_change(mut rx: watch::Receiver<u64>) -> watch::Receiver<u64> {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
    rx
}

/// The next request of a connection's backward channel; pending forever without one.
async fn recv_backward(
    rx: &mut Option<mpsc::UnboundedReceiver<BackwardRequest>>,
) -> Option<BackwardRequest> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn idle_buffers_go_after_a_quiet_period_not_while_in_use() {
        let pool = BufferPool::new(16 << 20);
        drop(pool.get(100_000));
        let idle = pool.stats().idle_bytes;
        assert!(idle > 0);
        let period = Duration::from_millis(300);
        let _task = AbortOnDrop(tokio::spawn(release_when_quiet(pool.clone(), period)));
        // Busy: a buffer taken in every period keeps the pool's memory.
        for _ in 0..10 {
            drop(pool.get(100_000));
            tokio::time::sleep(period / 6).await;
        }
        assert_eq!(pool.stats().idle_bytes, idle, "kept while in use");
        // Quiet: released within two periods or so.
        tokio::time::sleep(period * 4).await;
        assert_eq!(pool.stats().idle_bytes, 0);
    }
}
