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

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use oncrpc::service::poll_once;
use oncrpc::Dispatcher;
use rdma::{BufferPool, ConnectRequest, ConnectionManager, Listener, QueuePair};
use rpcrdma::liveness::Waiting;
use rpcrdma::memory::MemoryBudget;
use rpcrdma::private_data::PrivateData;
use rpcrdma::responder::ReliableReplyConfig;
use rpcrdma::{Responder, ResponderConfig, ResponderEvent, Xid};
use tokio::sync::{mpsc, oneshot, watch};
use xdr::XdrStream;

use crate::backward::{BackwardChannel, BackwardError, BackwardRequest};
use crate::binding::RdmaBinding;
use crate::counters::{Counter, CounterSink, StatsRegistry};
use crate::driver::{drive, CloseReason, Driver, Growth, Link, Role};
use crate::error::TransportError;
use crate::pool::{RecvPool, SendPool};
use crate::registration::{contiguous, Room};
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
        // Aborted when this future ends or is dropped.
        let mut trimmer = tokio::task::JoinSet::new();
        trimmer.spawn(release_when_quiet(self.buffers.clone(), QUIET_PERIOD));
        self.stats.set_memory(self.memory.clone());
        loop {
            let req = listener.accept().await?;
            self.open(req).await;
        }
    }

    /// Accepts one connection request and starts its task, or rejects it through the
    /// CM when its buffers do not fit the memory budget or cannot be registered.
    async fn open(&self, req: <P::Listener as Listener>::Request) {
        let peer = req.peer().clone();
        // Remote invalidation only where this device can invalidate.
        let config = self.config.on_device(&req.device().attributes());
        let limits = config.negotiate(&peer);
        let credits = config.credits.max(1);
        let initial = config.initial_credits.clamp(1, credits);
        let backward_credits = config.backward_credits;
        // RFC 8797: without the peer's private data, each Reply assumes the default
        // threshold of its Call's version; the core says how large a Send can then be
        // (`rpcrdma::version::max_send_size`).
        let peer_limits = PrivateData::parse(&peer.private_data).map(|_| limits);
        let policy = config.policy();
        let send_buffer_len =
            rpcrdma::version::max_send_size(peer_limits.as_ref(), policy.max_version) as usize;
        // Issue 16: the connection's Receive and Send buffers for its initial grant are
        // charged to the server's memory budget before they are allocated, for as long
        // as it lives (more as its grant grows, `ServerRole::grow_credits`). One that
        // does not fit (or that arrives while Calls wait for memory) is rejected: the
        // server never allocates past its budget. Room for one whole Call is kept from
        // connections, so that idle ones cannot keep every Call with Read chunks
        // waiting.
        let needed = CONNECTION_STATE + conn_buffer_bytes(&config, initial, send_buffer_len);
        let Some(memory) = self.memory.try_charge_now(needed, config.max_message) else {
            self.stats.connection_refused(peer.addr, needed);
            let _ = req.reject(Bytes::new()).await;
            return;
        };
        // §4.3.1: the Receives for the credits we grant go up with the connection,
        // before the requester can send its first Call. §7.2.2.2: one more per
        // backward credit, posted when the peer is ready for backward Calls. A few Send
        // buffers to start with, more as Sends find them all taken (`Link::post_send`):
        // an idle connection holds few. A protection domain per connection, on the
        // device the request came in on (as Linux svcrdma does).
        let setup = req.device().alloc_pd().and_then(|pd| {
            let (max, len) = (credits + backward_credits, config.recv_buffer_len());
            let (recv_pool, recvs) = RecvPool::new(&pd, initial, backward_credits, max, len)?;
            let sends = SendPool::new(
                &pd,
                INITIAL_SEND_SLOTS,
                send_slots(credits),
                send_buffer_len,
            )?;
            Ok((pd, recv_pool, recvs, sends))
        });
        let (pd, recv_pool, recvs, sends) = match setup {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(target: "rpcrdma_transport", peer = ?peer.addr, device = req.device().name(), error = %e, "cannot set up a connection: rejected");
                let _ = req.reject(Bytes::new()).await;
                return;
            }
        };
        let qp = match req.accept(&pd, config.connect_params(recvs)).await {
            Ok(qp) => qp,
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", error = %e, "accept failed");
                return;
            }
        };
        let stats = self
            .stats
            .open("server", peer.addr, &peer, &limits, config.credits);
        stats.set(Counter::MemoryCharged, memory.bytes());
        stats.set(Counter::SendBuffers, INITIAL_SEND_SLOTS as u64);
        let core = Responder::new(
            self.binding.clone(),
            ResponderConfig {
                policy,
                credits: initial,
                peer: peer_limits,
                reassembly: config.reassembly(),
                backward_credits: (backward_credits > 0).then_some(backward_credits),
                reliable_reply: config
                    .reliable_reply_offered()
                    .then_some(ReliableReplyConfig {
                        pull_timeout: config.pull_timeout,
                        remote_invalidate: config.remote_invalidate,
                    }),
                max_read_in_flight: config.max_read_in_flight,
                read_memory: Some(self.memory.clone()),
                served: self.dispatcher.registrations(),
                // A peer that stops answering RDMA Reads loses the connection
                // (`ResponderEvent::ReadTimeout`).
                read_timeout: Some(config.read_timeout),
            },
        );
        let Ok(core) = core else {
            return;
        };
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        if backward_credits > 0 {
            let channel = BackwardChannel {
                tx: inputs_tx.clone(),
                peer: peer.addr,
                stats: stats.clone(),
            };
            if let Some(to) = &*self.backward.lock().unwrap_or_else(|e| e.into_inner()) {
                let _ = to.send(channel);
            }
        }
        let growth = Some(Growth {
            budget: self.memory.clone(),
            keep_free: config.max_message,
            charge: memory,
        });
        let core = core.with_counters(stats.clone());
        let role = ServerRole {
            dispatcher: self.dispatcher.clone(),
            to_dispatch: VecDeque::new(),
            tasks: 0,
            replies: inputs_tx,
            max_credits: credits,
        };
        let buffers = self.buffers.clone();
        // A Read sink has room around it for the rest of its Call: before the chunk,
        // at most the inline part (our receive buffer).
        let room = Room::around(config.recv_buffer_len());
        let qp = Arc::new(qp);
        let link = Link::new(qp, pd, buffers, stats, recv_pool, sends, room, growth);
        let stop = Some(self.shutdown.subscribe());
        let dump = self.stats.dump_requests();
        let driver = Driver::new(link, core, role, inputs, stop, dump, config.stall_timeout);
        tokio::spawn(driver.run());
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
/// Calls one at a time never need more). The pool doubles, up to `send_slots` of
/// the largest grant, when a Send finds every buffer taken (`Link::post_send`).
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
fn conn_buffer_bytes(config: &RdmaConfig, credits: u32, send_buffer_len: usize) -> u64 {
    let recvs = u64::from(credits.max(1)) + u64::from(config.backward_credits);
    let recv = recvs * config.recv_buffer_len() as u64;
    let send = (INITIAL_SEND_SLOTS * send_buffer_len) as u64;
    recv + send
}

/// How long the buffer pool must go unused before its idle buffers are freed.
pub const QUIET_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// Frees the pool's idle buffers (up to `RdmaConfig::max_idle_buffers`, kept for the
/// next burst) once a whole `period` went by without a buffer taken: after load, that
/// memory goes back (issue 16).
pub async fn release_when_quiet(pool: BufferPool, period: std::time::Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let freed = pool.release_if_unused();
        if freed > 0 {
            tracing::debug!(target: "rpcrdma_transport", freed, "idle buffers released");
        }
    }
}

/// What the server's connection task is given besides completions.
pub(crate) enum ServerInput {
    /// The dispatcher's answer to a Call that ran as a task of its own (`None`: no
    /// reply).
    Reply(Xid, Option<XdrStream>),
    /// A request from the connection's [`BackwardChannel`].
    Backward(BackwardRequest),
}

/// The server's upper layer on a connection: the dispatcher, around the core's
/// [`Responder`] (which keeps every Call's state, backward Calls' waiters with them).
struct ServerRole {
    dispatcher: Arc<Dispatcher>,
    /// Calls to hand to the dispatcher ([`ServerRole::after_turn`]), in order.
    to_dispatch: VecDeque<(Xid, Bytes)>,
    /// Calls running as tasks of their own (the core knows which, and since when:
    /// `Responder::in_service`): their replies are still to come.
    tasks: usize,
    /// Where the tasks' replies go (this connection's inputs).
    replies: mpsc::UnboundedSender<ServerInput>,
    /// The most credits the connection may be granted ([`RdmaConfig::credits`]; less
    /// once buffers for more could not be registered): its grant starts at
    /// [`RdmaConfig::initial_credits`] and grows with demand (issue 16).
    max_credits: u32,
}

type Waiter = oneshot::Sender<Result<Bytes, BackwardError>>;

type ServerCore = Responder<Arc<dyn RdmaBinding>, Waiter>;

impl<Q: QueuePair + 'static> Role<Q> for ServerRole {
    type Input = ServerInput;
    type Core = ServerCore;

    fn event(&mut self, _core: &mut ServerCore, link: &mut Link<Q>, ev: ResponderEvent<Waiter>) {
        match ev {
            ResponderEvent::Call { xid, payload, .. } => {
                // A Call with one Read chunk (an NFS WRITE) is made contiguous in the
                // buffer the chunk was read into, around the data, without copying it.
                let whole = contiguous(payload, &link.stats, Counter::CallsJoinedInPlace);
                self.to_dispatch.push_back((xid, whole));
            }
            ResponderEvent::Refused { xid, error, answer } => {
                tracing::debug!(target: "rpcrdma_transport", xid = ?xid.map(|x| x.0), %error, ?answer, "refused");
            }
            ResponderEvent::BackwardReply { payload, token, .. } => {
                let _ = token.send(Ok(payload));
            }
            // §5.5.3: a peer that does not answer our RDMA Reads loses the connection.
            ResponderEvent::ReadTimeout { after, .. } => {
                if !link.is_closing() {
                    link.stats.inc(Counter::ReadTimeouts);
                    link.close(CloseReason::ReadTimeout(after));
                }
            }
            ResponderEvent::BackwardFailed { reason, token, .. } => {
                let _ = token.send(Err(reason));
            }
        }
    }

    /// Hands the Calls [`drive`] found to the dispatcher. When no other Call of this
    /// connection is in service, a Call's first poll runs here, and most end in it
    /// (nfsd's metadata calls, errors): the Reply is sent at once, with no task,
    /// channel and further turn of the connection's loop (the hand-off the TCP server
    /// also skips, `oncrpc::server`). A Call that waits, or one that comes while
    /// others are in service, runs as a task of its own; its reply comes back as an
    /// input.
    async fn after_turn(&mut self, core: &mut ServerCore, link: &mut Link<Q>) {
        while let Some((xid, call)) = self.to_dispatch.pop_front() {
            // The upper layer grants access by client address (NFS exports).
            let peer = link.stats.peer.map(|addr| oncrpc::Peer {
                addr,
                protocol: oncrpc::Protocol::Rdma,
            });
            let dispatcher = self.dispatcher.clone();
            let mut call = Box::pin(async move { dispatcher.dispatch_from(call, peer).await });
            if self.tasks == 0 {
                if let Poll::Ready(reply) = poll_once(call.as_mut()).await {
                    answer(core, link, xid, reply);
                    drive(core, self, link, None);
                    continue;
                }
            }
            self.tasks += 1;
            core.handle_in_service(xid, Instant::now());
            let tx = self.replies.clone();
            tokio::spawn(async move {
                let reply = call.await;
                let _ = tx.send(ServerInput::Reply(xid, reply));
            });
        }
    }

    fn input(&mut self, core: &mut ServerCore, link: &mut Link<Q>, input: ServerInput) {
        match input {
            ServerInput::Reply(xid, reply) => {
                self.tasks -= 1;
                answer(core, link, xid, reply);
            }
            ServerInput::Backward(req) => handle_backward_request(core, link, req),
        }
    }

    fn demand_changed(&mut self, core: &mut ServerCore, link: &mut Link<Q>) {
        self.grow_credits(core, link);
    }

    /// The core's, with the Calls not yet handed to the dispatcher.
    fn waiting(&self, core: &ServerCore) -> Waiting {
        let core = core.waiting(Instant::now());
        Waiting {
            in_dispatcher: core.in_dispatcher + self.to_dispatch.len(),
            ..core
        }
    }

    /// The core invalidates what it exposed (reliable-reply §5.4.3) and fails our
    /// backward Calls (§7.3.2).
    fn ended(&mut self, core: &mut ServerCore, link: &mut Link<Q>) {
        drive(core, self, link, None);
    }
}

/// Gives the core the dispatcher's answer to Call `xid`.
fn answer<Q: QueuePair + 'static>(
    core: &mut ServerCore,
    link: &mut Link<Q>,
    xid: Xid,
    reply: Option<XdrStream>,
) {
    link.progress();
    match reply {
        Some(stream) => {
            let _ = core.send_reply(xid, stream);
        }
        // The dispatcher earns the Call no reply.
        None => core.drop_call(xid),
    }
}

impl ServerRole {
    /// Raises the credit grant when the requester uses more than half of it
    /// ([`rpcrdma::credits::grown_target`]) and the server's memory budget has room
    /// for the buffers: they are charged, added to the pools, and the core asks for
    /// their Receives to be posted before a Reply announces them (§4.3.1).
    fn grow_credits<Q: QueuePair + 'static>(&mut self, core: &mut ServerCore, link: &mut Link<Q>) {
        let Some(next) = core
            .credit_growth(self.max_credits)
            .filter(|_| !link.is_closing())
        else {
            return;
        };
        let target = core.credits().target();
        let more = next - target;
        if !link.charge_more(u64::from(more) * link.recvs.buffer_len() as u64) {
            // The core says when to try again (`poll_timeout`, `GROWTH_RETRY`).
            core.handle_credit_growth_refused(Instant::now());
            return;
        }
        match link.recvs.grow(&link.pd, more as usize) {
            Ok(()) => {
                // Cannot fail: `next` is at least 1.
                let _ = core.set_credit_target(next);
            }
            Err(e) => {
                tracing::warn!(target: "rpcrdma_transport", conn = link.stats.id, error = %e, credits = target, "cannot register buffers for more credits: the grant stays");
                self.max_credits = target;
            }
        }
    }
}

/// A request from a [`BackwardChannel`] (v1 §7). A backward Call goes to the core,
/// which sends it when a backward credit is free: whether it is a Call, whether the
/// peer said it is ready (§7.3.1), a duplicate XID, the inline limit (§7.4) and the
/// wait for credits are the core's rules (`Responder::start_backward_call`).
fn handle_backward_request<Q: QueuePair + 'static>(
    core: &mut ServerCore,
    link: &mut Link<Q>,
    req: BackwardRequest,
) {
    match req {
        BackwardRequest::Ready => core.handle_peer_backward_ready(),
        BackwardRequest::Call { msg, reply } => {
            if let Err((e, reply)) = core.start_backward_call(msg, reply) {
                link.stats.inc(Counter::BackwardFailed);
                let _ = reply.send(Err(e));
            }
        }
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
        let mut task = tokio::task::JoinSet::new();
        task.spawn(release_when_quiet(pool.clone(), period));
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
