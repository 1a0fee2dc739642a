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
//!             ─► spawn Dispatcher::dispatch ─► reply stream back to the connection task
//!  reply ─► marshal_reply ─┬─ fits the chunks ─► RDMA Writes, re-post, Send (With Inv.)
//!                          └─ Reply/Write chunk too small ─► RDMA_ERROR, nothing written
//! ```
//! With reliable reply agreed (`server/reliable.rs`), a Reply that fits no reply
//! resource goes as RDMA_NOMSG with a Position Zero Read chunk over a read-only region
//! of ours, invalidated on RDMA_DONE, by the pull timer (a `select!` arm armed for
//! `PullTable::poll_timeout`) or when the connection ends. Backward Calls
//! (`server/backward.rs`) come from [`crate::BackwardChannel`]s through a channel into
//! the connection task; Receives that bring RDMA_DONE, RDMA_OPTIONAL, backward Replies
//! or RDMA_ERROR are re-posted at once.
//!
//! A Receive is re-posted only once its Call is answered, so at most `credits` Calls
//! are in service: a requester that sends past its grant finds no Receive and the
//! provider ends that connection (§4.3.1: "the RDMA layer may signal an error,
//! possibly terminating the connection"); other connections are untouched.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use oncrpc::Dispatcher;
use rdma::{
    Completion, ConnectRequest, ConnectionManager, Listener, ProtectionDomain, QueuePair,
    QueuePairExt, RemoteAddr, STag, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma::credits::ResponderCredits;
use rpcrdma::header::{ErrorBody, Header, PrefixView};
use rpcrdma::marshal::{marshal_reply, RdmaWrite, Shape};
use rpcrdma::private_data::PeerLimits;
use rpcrdma::reassembly::reassemble_call;
use rpcrdma::rpc;
use rpcrdma::validate::{error_reply_for, receive, Policy, Received};
use rpcrdma::{ArgsError, ChunkLists, ErrCode, HeaderError, MarshalError, Prefix, Version, Xid};
use tokio::sync::{mpsc, watch};
use xdr::XdrStream;

use crate::backward::{BackwardChannel, BackwardRequest};
use crate::binding::RdmaBinding;
use crate::counters::{ConnStats, Counter, StatsRegistry};
use crate::error::TransportError;
use crate::pool::{wr_kind, RecvPool, SendPool};
use crate::registration::ReadSink;
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
    pub async fn serve(&self, mut listener: P::Listener) -> io::Result<()> {
        loop {
            let req = listener.accept().await?;
            let peer = req.peer().clone();
            let limits = self.config.negotiate(&peer);
            let pd = ProtectionDomain::new();
            // §4.3.1: the Receives for the credits we grant go up with the connection,
            // before the requester can send its first Call.
            // §7.2.2.2: and one more per backward credit, for backward Replies.
            let pool = RecvPool::new(
                &pd,
                self.config.credits.max(1) + self.config.backward_credits,
                self.config.recv_buffer_len(),
            );
            let qp = match req
                .accept(&pd, self.config.connect_params(pool.initial()))
                .await
            {
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
            stats.set(Counter::CreditsRequested, u64::from(self.config.credits));
            self.stats.add(stats.clone());
            let (backward, backward_rx) = if self.config.backward_credits > 0 {
                let (tx, rx) = mpsc::unbounded_channel();
                let channel = BackwardChannel {
                    tx,
                    peer: peer.addr,
                    stats: stats.clone(),
                };
                if let Some(to) = &*self.backward.lock().unwrap_or_else(|e| e.into_inner()) {
                    let _ = to.send(channel);
                }
                (
                    Some(backward::Backward::new(self.config.backward_credits)),
                    Some(rx),
                )
            } else {
                (None, None)
            };
            let conn = ServerConn {
                qp: Arc::new(qp),
                pd: pd.clone(),
                limits,
                policy: self.config.policy(),
                config: self.config.clone(),
                dispatcher: self.dispatcher.clone(),
                binding: self.binding.clone(),
                stats,
                credits: match ResponderCredits::new(self.config.credits.max(1)) {
                    Ok(c) => c,
                    Err(_) => continue,
                },
                pool,
                // Replies are at most one per credit; RDMA_ERRORs and GARBAGE_ARGS
                // answers fall back to caller bytes if they find the pool empty.
                sends: SendPool::new(
                    &pd,
                    self.config.credits.clamp(1, 1024) as usize + 8,
                    limits.send_threshold as usize,
                ),
                calls: HashMap::new(),
                reads: HashMap::new(),
                next_read: 0,
                reading_bytes: 0,
                waiting: VecDeque::new(),
                shutdown: self.shutdown.subscribe(),
                reliable: reliable::Exposed::default(),
                backward,
                backward_rx,
                version: Version::ONE,
            };
            tokio::spawn(conn.run());
        }
    }
}

/// A Call being served.
struct Call {
    prefix: Prefix,
    chunks: ChunkLists,
    inline: Bytes,
    /// The pool index of the Receive that brought the Call, re-posted once answered.
    recv: usize,
    /// Sum of the Read chunk lengths.
    read_len: u64,
    /// One sink per Read chunk while its RDMA Reads run; then its data.
    sinks: Vec<Option<ReadSink>>,
    data: Vec<Option<Bytes>>,
}

struct ServerConn<Q> {
    qp: Arc<Q>,
    pd: ProtectionDomain,
    limits: PeerLimits,
    policy: Policy,
    config: RdmaConfig,
    dispatcher: Arc<Dispatcher>,
    binding: Arc<dyn RdmaBinding>,
    stats: Arc<ConnStats>,
    credits: ResponderCredits,
    pool: RecvPool,
    sends: SendPool,
    calls: HashMap<Xid, Call>,
    /// Outstanding RDMA Reads: id → (XID, Read chunk index).
    reads: HashMap<u64, (Xid, usize)>,
    next_read: u64,
    /// Bytes of Read sinks registered now.
    reading_bytes: u64,
    /// Calls waiting for read budget, oldest first.
    waiting: VecDeque<Xid>,
    shutdown: watch::Receiver<bool>,
    /// Reliable reply: the peer's advertisement, Read chunks exposed.
    reliable: reliable::Exposed,
    /// Backward direction, if configured.
    backward: Option<backward::Backward>,
    /// Requests from this connection's [`BackwardChannel`]s (taken by `run`).
    backward_rx: Option<mpsc::UnboundedReceiver<BackwardRequest>>,
    /// Version of the last Call received (backward Calls go in it).
    version: Version,
}

/// Why a connection must close.
struct Fatal;

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
    async fn run(mut self) {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Xid, Option<XdrStream>)>();
        let qp = self.qp.clone();
        let mut shutdown = self.shutdown.clone();
        let mut stopping = false;
        let mut backward_rx = self.backward_rx.take();
        loop {
            if !stopping && *shutdown.borrow_and_update() {
                stopping = true;
                self.qp.disconnect();
            }
            // reliable-reply §4.1.3: the pull timer, armed for the earliest deadline.
            let deadline = self.reliable.poll_timeout();
            let timer = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            let step = tokio::select! {
                _ = shutdown.changed(), if !stopping => Ok(()),
                c = qp.completion() => match c {
                    None => break,
                    Some(c) => self.handle_completion(c, &tx),
                },
                Some((xid, reply)) = rx.recv() => self.handle_reply(xid, reply),
                _ = timer => self.handle_pull_timeout(Instant::now()),
                req = recv_backward(&mut backward_rx) => match req {
                    Some(req) => self.handle_backward_request(req),
                    None => {
                        backward_rx = None;
                        Ok(())
                    }
                },
            };
            if step.is_err() {
                // §5.5.3, §5.5.4: the connection closes; calls in service are dropped.
                self.qp.disconnect();
            }
        }
        self.invalidate_all_pulls();
        self.fail_all_backward();
        record_close_reason(&*self.qp, &self.stats).await;
        self.stats.close();
    }

    fn handle_completion(
        &mut self,
        c: Completion,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        if c.wr_id & wr_kind::MASK == wr_kind::SEND {
            self.sends.complete(c.wr_id);
        }
        match c.status {
            WcStatus::Success => {}
            WcStatus::Flushed => {
                self.stats.inc(Counter::Flushed);
                return Ok(());
            }
            _ => {
                // §5.5.3: "RDMA operational errors are typically fatal to the
                // connection" (an invalid STag in a chunk, for one).
                self.stats.inc(Counter::ErrCompletion);
                tracing::debug!(target: "rpcrdma_transport", ?c, "completion error");
                return Err(Fatal);
            }
        }
        let id = c.wr_id & !wr_kind::MASK;
        match (c.opcode, c.wr_id & wr_kind::MASK) {
            (WcOpcode::Recv, wr_kind::RECV) => {
                let index = id as usize;
                let Some(buf) = self.pool.take(index, c.byte_len) else {
                    return Err(Fatal);
                };
                self.stats.inc(Counter::Recvs);
                self.stats.add(Counter::RecvBytes, buf.len() as u64);
                self.handle_receive(index, buf, c.invalidated, tx)
            }
            (WcOpcode::RdmaRead, wr_kind::READ) => self.handle_read_done(id, tx),
            _ => Ok(()),
        }
    }

    /// A credit's Receive goes back on the queue (its Call is answered or dropped).
    fn repost(&mut self, index: usize) -> Result<(), Fatal> {
        self.pool.post(&*self.qp, index).map_err(|_| Fatal)
    }

    fn post_send(&self, xid: Xid, send: Vec<Bytes>, invalidate: Option<u32>) -> Result<(), Fatal> {
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
        if !self
            .sends
            .post(&*self.qp, wr_id, op, send)
            .map_err(|_| Fatal)?
        {
            self.stats.inc(Counter::SendPoolFallbacks);
        }
        Ok(())
    }

    /// Answers a bad header with the RDMA_ERROR the core chooses (or silence).
    fn refuse(
        &mut self,
        index: usize,
        prefix: Option<Prefix>,
        err: HeaderError,
    ) -> Result<(), Fatal> {
        tracing::debug!(target: "rpcrdma_transport", error = %err, "refusing message");
        self.repost(index)?;
        let grant = self.credits.grant();
        match prefix.and_then(|p| error_reply_for(&p, &err, grant, &self.policy)) {
            Some(h) => {
                self.stats.inc(Counter::ErrRdmaErrorSent);
                match &h.body {
                    rpcrdma::Body::Error(ErrorBody::Vers { .. }) => {
                        self.stats.inc(Counter::ErrVers)
                    }
                    _ => self.stats.inc(Counter::ErrBadHeader),
                }
                self.post_send(h.xid, vec![h.to_bytes()], None)
            }
            None => {
                self.stats.inc(Counter::ErrDiscarded);
                Ok(())
            }
        }
    }

    fn handle_receive(
        &mut self,
        index: usize,
        buf: Bytes,
        invalidated: Option<STag>,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        if let Some(xid) = self.pull_completion(&buf) {
            return self.handle_done(index, xid, invalidated);
        }
        let (prefix, chunks, inline) = match receive(&buf, &self.policy) {
            Ok(Received::Msg {
                prefix,
                chunks,
                payload,
            }) => {
                if rpc::msg_type(&payload) == Some(rpc::REPLY) {
                    // §7.3.5: the Reply to one of our backward Calls.
                    return self.handle_backward_reply(index, prefix, &chunks, payload);
                }
                (prefix, chunks, payload)
            }
            Ok(Received::NoMsg { prefix, chunks }) => {
                // §4.5.3: a Long Call carries its Payload stream in a Position Zero
                // Read chunk.
                if chunks.position_zero().is_none() {
                    return self.refuse(index, Some(prefix), HeaderError::NoPayloadChunk);
                }
                (prefix, chunks, Bytes::new())
            }
            // A responder's only Calls are backward ones.
            Ok(Received::Error { prefix, .. }) => {
                return self.handle_backward_error(index, prefix.xid);
            }
            Ok(Received::Optional {
                prefix,
                opttype,
                optinfo,
                ..
            }) => return self.handle_optional(index, prefix, opttype, optinfo),
            Err(e) => {
                let prefix = PrefixView::new_checked(buf.as_ref())
                    .ok()
                    .map(|v| v.prefix());
                return self.refuse(index, prefix, e);
            }
        };
        self.stats.inc(Counter::Calls);
        self.version = prefix.version;
        if self.calls.contains_key(&prefix.xid) {
            // A retransmission while the first copy is in service.
            self.stats.inc(Counter::ErrDiscarded);
            return self.repost(index);
        }
        let total: u64 = chunks.reads.iter().map(|c| c.len()).sum();
        if total > self.config.max_message {
            let err = ArgsError::TooLarge(total);
            return self.garbage_args(index, prefix, &chunks, err);
        }
        if chunks.position_zero().is_some() {
            self.stats.inc(Counter::PositionZeroReadChunks);
        } else if !chunks.reads.is_empty() {
            self.stats.inc(Counter::ReadChunks);
        } else {
            self.stats.inc(Counter::ShortCalls);
        }
        let n = chunks.reads.len();
        let read_len = total;
        let call = Call {
            prefix,
            chunks,
            inline,
            recv: index,
            read_len,
            sinks: Vec::with_capacity(n),
            data: vec![None; n],
        };
        self.calls.insert(prefix.xid, call);
        if n == 0 {
            return self.finish_call(prefix.xid, tx);
        }
        // DoS bound: RDMA Read sinks of at most `max_read_in_flight` bytes at once per
        // connection (one Call alone may exceed it, up to `max_message`). Later Calls
        // wait, still holding their credit.
        if self.reading_bytes == 0
            || self.reading_bytes + read_len <= self.config.max_read_in_flight
        {
            self.start_reads(prefix.xid, tx)
        } else {
            self.stats.inc(Counter::ReadsDeferred);
            self.waiting.push_back(prefix.xid);
            Ok(())
        }
    }

    /// §4.4.5: pulls each Read chunk of Call `xid` with RDMA Read, one Read per
    /// segment, into one sink per chunk. The provider holds Reads beyond the peer's IRD
    /// (our ORD) until earlier ones complete.
    fn start_reads(
        &mut self,
        xid: Xid,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        let Some(mut call) = self.calls.remove(&xid) else {
            return Ok(());
        };
        self.reading_bytes += call.read_len;
        for (k, chunk) in call.chunks.reads.iter().enumerate() {
            let mut sink = ReadSink::new(&self.pd, chunk.len() as usize);
            let mut at = 0usize;
            for seg in &chunk.segments {
                let len = seg.length as usize;
                if len == 0 {
                    continue;
                }
                let id = self.next_read;
                self.next_read = (self.next_read + 1) & !wr_kind::MASK;
                self.reads.insert(id, (xid, k));
                self.stats.inc(Counter::RdmaReads);
                self.stats.add(Counter::RdmaReadBytes, len as u64);
                self.qp
                    .post_send(sink.read_wr(wr_kind::READ | id, seg, at))
                    .map_err(|_| Fatal)?;
                sink.outstanding += 1;
                at += len;
            }
            if sink.outstanding == 0 {
                call.data[k] = Some(sink.into_bytes());
                call.sinks.push(None);
            } else {
                call.sinks.push(Some(sink));
            }
        }
        let ready = call.data.iter().all(Option::is_some);
        self.calls.insert(xid, call);
        if ready {
            self.reads_finished(xid, tx)?;
        }
        Ok(())
    }

    /// Call `xid` has all its Read data: release its share of the read budget, serve
    /// it, and start the Calls that waited for the budget.
    fn reads_finished(
        &mut self,
        xid: Xid,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        let len = self.calls.get(&xid).map_or(0, |c| c.read_len);
        self.reading_bytes = self.reading_bytes.saturating_sub(len);
        self.finish_call(xid, tx)?;
        while let Some(&next) = self.waiting.front() {
            let Some(len) = self.calls.get(&next).map(|c| c.read_len) else {
                self.waiting.pop_front();
                continue;
            };
            if self.reading_bytes != 0 && self.reading_bytes + len > self.config.max_read_in_flight
            {
                break;
            }
            self.waiting.pop_front();
            self.start_reads(next, tx)?;
        }
        Ok(())
    }

    fn handle_read_done(
        &mut self,
        id: u64,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        let Some((xid, k)) = self.reads.remove(&id) else {
            return Ok(());
        };
        let Some(call) = self.calls.get_mut(&xid) else {
            return Ok(());
        };
        let (Some(slot), Some(data)) = (call.sinks.get_mut(k), call.data.get_mut(k)) else {
            return Ok(());
        };
        if let Some(sink) = slot {
            sink.outstanding = sink.outstanding.saturating_sub(1);
            if sink.outstanding == 0 {
                *data = slot.take().map(ReadSink::into_bytes);
            }
        }
        if call.data.iter().all(Option::is_some) {
            self.reads_finished(xid, tx)?;
        }
        Ok(())
    }

    /// Every Read chunk is in: rebuild the Call, check it, hand it to the dispatcher.
    fn finish_call(
        &mut self,
        xid: Xid,
        tx: &mpsc::UnboundedSender<(Xid, Option<XdrStream>)>,
    ) -> Result<(), Fatal> {
        let Some(call) = self.calls.get_mut(&xid) else {
            return Ok(());
        };
        let data: Vec<Bytes> = call
            .data
            .iter_mut()
            .map(|d| d.take().unwrap_or_default())
            .collect();
        let result = reassemble_call(
            call.inline.clone(),
            &call.chunks.reads,
            data,
            &self.config.reassembly(),
        );
        let payload = match result {
            Ok(p) => p,
            Err(e) => {
                let Some(call) = self.calls.remove(&xid) else {
                    return Ok(());
                };
                return self.garbage_args(call.recv, call.prefix, &call.chunks, e);
            }
        };
        // COPY: a Call of several pieces (inline part and Read chunk data) is made
        // contiguous for `Dispatcher::dispatch`, which takes one `Bytes`.
        let whole = payload.to_bytes();
        let pos0 = call.chunks.position_zero().is_some();
        let reads_not_p0 = call
            .chunks
            .reads
            .iter()
            .filter(|c| !c.is_position_zero())
            .count();
        if pos0 {
            // §5.2.1: "This XID MUST be the same as the XID in the RPC message"; for a
            // Long Call it can only be checked now.
            if let Some(px) = rpc::xid(&whole).filter(|&px| px != xid) {
                let Some(call) = self.calls.remove(&xid) else {
                    return Ok(());
                };
                let err = HeaderError::XidMismatch {
                    header: xid,
                    payload: px,
                };
                return self.refuse(call.recv, Some(call.prefix), err);
            }
        }
        if let Some(proc_id) = rpc::call_proc(&whole) {
            // RFC 5531 §9: a program or version this server does not serve gets
            // PROG_UNAVAIL or PROG_MISMATCH (with the versions served), over RDMA as
            // over TCP; the dispatcher answers it. A Linux client's mount over RDMA
            // probes NFSv4 first and waits for that answer before trying version 3.
            let served = self.dispatcher.serves(proc_id.prog, proc_id.vers);
            if !served {
                self.stats.inc(Counter::UnservedCalls);
            }
            // §8: "Responders MUST NOT reply to RPC-over-RDMA messages for Upper Layer
            // Protocols that do not have a Upper Layer Binding": a program we serve
            // without a binding (MOUNT, RFC 8267 §6) gets nothing.
            if served && !self.binding.binds(proc_id.prog, proc_id.vers) {
                self.stats.inc(Counter::ErrNoBinding);
                let Some(call) = self.calls.remove(&xid) else {
                    return Ok(());
                };
                return self.repost(call.recv);
            }
            // §8.1.1: "A DDP-eligibility violation occurs when a requester forms a Call
            // message with a non-DDP-eligible data item in a Read chunk ... a responder
            // MUST NOT process the Call message." Answered per §5.5.2.
            if served && reads_not_p0 > self.binding.call_ddp_arguments(proc_id) {
                let Some(call) = self.calls.remove(&xid) else {
                    return Ok(());
                };
                let position = call
                    .chunks
                    .reads
                    .iter()
                    .find(|c| !c.is_position_zero())
                    .map_or(0, |c| c.position);
                let err = ArgsError::NotDdpEligible { position };
                return self.garbage_args(call.recv, call.prefix, &call.chunks, err);
            }
        }
        let dispatcher = self.dispatcher.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let reply = dispatcher.dispatch(whole).await;
            let _ = tx.send((xid, reply));
        });
        Ok(())
    }

    /// §5.5.2: "the responder SHOULD return a RPC_GARBAGEARGS reply, using an
    /// RDMA_MSG procedure."
    fn garbage_args(
        &mut self,
        recv: usize,
        prefix: Prefix,
        chunks: &ChunkLists,
        err: ArgsError,
    ) -> Result<(), Fatal> {
        tracing::debug!(target: "rpcrdma_transport", xid = prefix.xid.0, error = %err, "GARBAGE_ARGS");
        self.stats.inc(Counter::ErrGarbageArgs);
        let stream = XdrStream::inline_only(rpc::garbage_args_reply(prefix.xid));
        self.send_reply(recv, &prefix, chunks, &stream)
    }

    /// The dispatcher answered Call `xid` (`None`: it earns no reply).
    fn handle_reply(&mut self, xid: Xid, reply: Option<XdrStream>) -> Result<(), Fatal> {
        let Some(call) = self.calls.remove(&xid) else {
            return Ok(());
        };
        match reply {
            Some(stream) => self.send_reply(call.recv, &call.prefix, &call.chunks, &stream),
            None => {
                self.stats.inc(Counter::ErrDiscarded);
                self.repost(call.recv)
            }
        }
    }

    /// Marshals and posts a Reply: RDMA Writes, the Receive back, then the Send.
    fn send_reply(
        &mut self,
        recv: usize,
        prefix: &Prefix,
        chunks: &ChunkLists,
        stream: &XdrStream,
    ) -> Result<(), Fatal> {
        let xid = prefix.xid;
        let grant = self.credits.grant();
        self.stats.set(Counter::CreditsGranted, u64::from(grant));
        // v2 §5.3: "a responder MUST send Replies with the same RPC-over-RDMA protocol
        // version that the requester uses to send its Calls" (prefix.version below).
        self.stats
            .set(Counter::Version, u64::from(prefix.version.0));
        let out = match marshal_reply(
            xid,
            prefix.version,
            grant,
            stream,
            chunks,
            self.limits.send_threshold,
            self.limits.remote_invalidate,
        ) {
            Ok(out) => out,
            Err(
                MarshalError::NoReplyChunk { .. }
                | MarshalError::ReplyChunkTooSmall { .. }
                | MarshalError::HeaderTooLarge { .. },
            ) if self.reliable_reply_on(prefix.version) => {
                // reliable-reply §4.1.1: the Reply exceeds every requester-provided
                // reply resource: it goes through a Read chunk of ours.
                return self.reply_through_read_chunk(recv, prefix, chunks, stream);
            }
            Err(e) => {
                // §5.5.3: "If the requester-provided Reply chunk is too small to
                // accommodate a large RPC Reply ... A responder can detect this problem
                // before attempting to write past the end of the Reply chunk", and
                // answers "RDMA_ERROR ... RDMA_ERR_BADHEADER to indicate that no
                // RPC-level reply is possible for that XID." Nothing was written.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "no reply possible");
                match e {
                    MarshalError::ReplyChunkTooSmall { .. } | MarshalError::NoReplyChunk { .. } => {
                        self.stats.inc(Counter::ErrReplyChunkTooSmall)
                    }
                    MarshalError::WriteChunkTooSmall { .. } => {
                        self.stats.inc(Counter::ErrWriteChunkTooSmall)
                    }
                    _ => {}
                }
                self.stats.inc(Counter::ErrRdmaErrorSent);
                self.stats.inc(Counter::ErrBadHeader);
                self.repost(recv)?;
                let h = Header::error_reply(prefix, grant, ErrorBody::BadHeader);
                debug_assert_eq!(ErrCode::ERR_BADHEADER, h_code(&h));
                return self.post_send(xid, vec![h.to_bytes()], None);
            }
        };
        if let Some(ch) = out.send.chunks() {
            let used = ch.writes.iter().filter(|w| !w.is_empty()).count();
            self.stats.add(Counter::WriteChunks, used as u64);
        }
        if out.send.shape == Shape::Long {
            self.stats.inc(Counter::ReplyChunks);
        }
        self.post_writes(xid, out.writes)?;
        // §4.3.1: "the responder needs to ensure that a credit increase is effected
        // (i.e. RDMA Receives are posted) before the next reply is sent."
        self.repost(recv)?;
        self.stats.inc(Counter::Replies);
        self.post_send(xid, out.send.send, out.invalidate)
    }
}

impl<Q: QueuePair + 'static> ServerConn<Q> {
    /// Posts the RDMA Writes of a Reply. §3.2.2 (ordering): RDMA Writes posted before
    /// the Send are placed before it.
    fn post_writes(&self, xid: Xid, writes: Vec<RdmaWrite>) -> Result<(), Fatal> {
        for w in writes {
            self.stats.inc(Counter::RdmaWrites);
            self.stats.add(Counter::RdmaWriteBytes, w.len());
            self.qp
                .post_send(SendWr {
                    wr_id: wr_kind::WRITE | u64::from(xid.0),
                    op: SendOp::RdmaWrite(RemoteAddr {
                        stag: STag(w.handle),
                        offset: w.offset,
                    }),
                    // The result's own buffers: no copy.
                    sgl: w.data.into_iter().map(Sge::Bytes).collect(),
                })
                .map_err(|_| Fatal)?;
        }
        Ok(())
    }
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

mod backward;
mod reliable;

fn h_code(h: &Header) -> ErrCode {
    match &h.body {
        rpcrdma::Body::Error(b) => b.code(),
        _ => ErrCode(0),
    }
}
