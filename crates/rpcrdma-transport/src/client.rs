//! The requester: an [`oncrpc::Transport`] over RPC-over-RDMA (Linux
//! `transport.c` + the requester half of `rpc_rdma.c`'s callers).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3 (credits), §4.5 (shapes),
//! §5.3.2-§5.3.3 (Write list, Reply chunk), §5.4.1 (invalidate before completion),
//! §8 (bindings); RFC 8797.
//!
//! # Driving
//! ```text
//!  oncrpc driver ──send(XdrStream)──► RdmaSender: take a credit (wait if none),
//!                                     plan_call, register chunks, finish, post Send
//!  completion task (one per connection):
//!     Receive ──► validate ──► match XID ──► check Write list / Reply chunk
//!             ──► fence every region ──► reassemble ──► credits ──► RdmaReceiver
//! ```
//! With reliable reply agreed (`client/reliable.rs`) Calls offer no Reply chunk, and
//! an RDMA_NOMSG with a Position Zero Read chunk is pulled with RDMA Read (whose
//! completion comes to the same task), answered with RDMA_DONE, then delivered. An
//! RDMA_MSG carrying an RPC Call is a backward Call (`client/backward.rs`).
//!
//! `oncrpc::Client` reconnects when [`RdmaReceiver`] ends and sends every outstanding
//! Call again with its XID; each retransmission is planned and registered afresh on
//! the new connection. The regions of the lost connection are fenced when it ends.
//!
//! `oncrpc`'s transport traits carry whole messages and no per-call error, so a Call
//! answered with RDMA_ERROR, or whose Reply does not match its chunks, comes in another
//! RPC-over-RDMA version than the Call (v2 §5.3) or cannot be pulled from its Read
//! chunk, completes with a locally made RPC reply, MSG_ACCEPTED / SYSTEM_ERR (counted
//! in the counters).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use oncrpc::{Dispatcher, RecordReceiver, RecordSender, Transport};
use rdma::{
    Completion, ConnectionManager, ProtectionDomain, QueuePair, QueuePairExt, STag, SendOp,
    WcOpcode, WcStatus,
};
use rpcrdma::credits::RequesterCredits;
use rpcrdma::error::HeaderError;
use rpcrdma::marshal::{plan_call, plan_call_without_reply_chunk, CallLimits, Registration, Shape};
use rpcrdma::private_data::PeerLimits;
use rpcrdma::reassembly::{reassemble_reply, reply_chunk_length, written_lengths};
use rpcrdma::rpc::{self, ProcId};
use rpcrdma::validate::{receive, Policy, Received};
use rpcrdma::version::{Negotiation, NegotiationOutcome, PROBE_LIMIT};
use rpcrdma::{Version, WriteChunk, Xid};
use tokio::sync::{mpsc, Notify};
use xdr::XdrStream;

use crate::binding::RdmaBinding;
use crate::counters::{ConnStats, Counter, StatsRegistry};
use crate::error::TransportError;
use crate::pool::{wr_kind, RecvPool, SendPool};
use crate::registration::{join_in_place, ChunkRegion, Room};
use crate::setup::RdmaConfig;

/// An RPC-over-RDMA client transport to one server address, for [`oncrpc::Client`].
pub struct RdmaTransport<P> {
    provider: Arc<P>,
    addr: SocketAddr,
    config: RdmaConfig,
    binding: Arc<dyn RdmaBinding>,
    stats: StatsRegistry,
    /// What the last connection learned about this server's version (v2 §5.2).
    negotiation: Arc<Mutex<Option<Negotiation>>>,
    /// Serves the server's backward-direction Calls (§7), if set.
    backward: Option<Arc<Dispatcher>>,
}

impl<P> std::fmt::Debug for RdmaTransport<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("addr", &self.addr)
            .field("config", &self.config)
            .finish()
    }
}

impl<P: ConnectionManager + 'static> RdmaTransport<P> {
    /// A transport reaching `addr` through `provider`, for the programs `binding`
    /// covers.
    pub fn new(
        provider: P,
        addr: SocketAddr,
        config: RdmaConfig,
        binding: Arc<dyn RdmaBinding>,
    ) -> Self {
        RdmaTransport {
            provider: Arc::new(provider),
            addr,
            config,
            binding,
            stats: StatsRegistry::default(),
            negotiation: Arc::new(Mutex::new(None)),
            backward: None,
        }
    }

    /// Serves backward-direction Calls from the server with `dispatcher`
    /// (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7), on every connection made from
    /// now on: [`RdmaConfig::backward_credits`] more Receives are posted with each
    /// connection (§7.2.2.1: "an RPC-over-RDMA client endpoint must pre-post enough
    /// additional receive buffers to match its advertised backward direction credit
    /// value") and the backward Replies grant that many. Without it, or with
    /// `backward_credits` 0, backward Calls are dropped.
    ///
    /// The server sends none before its upper layer says this client is prepared
    /// (§7.3.1, [`crate::BackwardChannel::set_peer_ready`]); telling it is the upper
    /// layer protocol's business (NFSv4.1: CREATE_SESSION with a back channel).
    pub fn serve_backward(mut self, dispatcher: Arc<Dispatcher>) -> Self {
        self.backward = Some(dispatcher);
        self
    }

    /// The version state the next connection starts from: `None` before the first
    /// connection ended; `Settled(ONE)` once this server answered ERR_VERS (or a
    /// Version Two probe was lost with its connection), so it is not probed again.
    pub fn negotiation(&self) -> Option<Negotiation> {
        *self.negotiation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters of every connection this transport made (keep a clone before
    /// handing the transport to [`oncrpc::Client::new`]).
    pub fn stats(&self) -> StatsRegistry {
        self.stats.clone()
    }

    /// Connects once: RFC 8797 private data both ways, Receives posted for the credits
    /// we ask for, the completion task started.
    pub async fn connect_once(&self) -> Result<(RdmaSender<P::Qp>, RdmaReceiver), TransportError> {
        let pd = ProtectionDomain::new();
        // §4.3.1: the requested credits are Receives we must have posted, since each
        // granted Call may be answered at once; they go up with the connection.
        let backward = self
            .backward
            .clone()
            .filter(|_| self.config.backward_credits > 0)
            .map(|dispatcher| backward::ClientBackward {
                dispatcher,
                grant: self.config.backward_credits,
            });
        let backward_recvs = backward.as_ref().map_or(0, |b| b.grant);
        let pool = RecvPool::new(
            &pd,
            self.config.credits.max(1) + backward_recvs,
            self.config.recv_buffer_len(),
        );
        let qp = self
            .provider
            .connect(self.addr, &pd, self.config.connect_params(pool.initial()))
            .await?;
        let limits = self.config.negotiate(qp.peer());
        let stats = ConnStats::new("client", Some(self.addr));
        stats.set(Counter::PeerIrd, u64::from(qp.peer().ird));
        stats.set(Counter::SendThreshold, u64::from(limits.send_threshold));
        stats.set(Counter::RecvThreshold, u64::from(limits.recv_threshold));
        stats.set(Counter::CreditsRequested, u64::from(self.config.credits));
        self.stats.add(stats.clone());
        tracing::debug!(
            target: "rpcrdma_transport",
            addr = %self.addr,
            send_threshold = limits.send_threshold,
            recv_threshold = limits.recv_threshold,
            remote_invalidate = limits.remote_invalidate,
            peer_ird = qp.peer().ird,
            "connected"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            replies: Mutex::new(Some(tx)),
            // One header buffer per Call we may have outstanding, and one per backward
            // Reply we may owe.
            sends: SendPool::new(
                &pd,
                (self.config.credits.clamp(1, 1024) + backward_recvs.min(1024)) as usize,
                limits.send_threshold as usize,
            ),
            qp,
            pd,
            limits,
            policy: self.config.policy(),
            binding: self.binding.clone(),
            stats,
            reliable: self
                .config
                .reliable_reply_offered()
                .then(|| self.config.reliable_reply_info()),
            skip_done: self.config.fault_skip_rdma_done,
            max_message: self.config.max_message,
            backward,
            state: Mutex::new(State {
                credits: RequesterCredits::new(self.config.credits),
                calls: HashMap::new(),
                pulls: HashMap::new(),
                reliable: reliable::ReliableState::NotYet,
                closed: false,
                negotiation: self.negotiation().unwrap_or(Negotiation::new(
                    if self.config.version_two {
                        Version::TWO
                    } else {
                        Version::ONE
                    },
                )),
            }),
            negotiation: self.negotiation.clone(),
            credit_wait: Notify::new(),
        });
        tokio::spawn(completions(conn.clone(), pool));
        Ok((RdmaSender { conn }, RdmaReceiver { rx }))
    }
}

impl<P: ConnectionManager + 'static> Transport for RdmaTransport<P> {
    type Sender = RdmaSender<P::Qp>;
    type Receiver = RdmaReceiver;

    async fn connect(&self) -> io::Result<(Self::Sender, Self::Receiver)> {
        self.connect_once().await.map_err(io::Error::from)
    }
}

/// One outstanding Call on a connection.
struct PendingCall {
    proc_id: ProcId,
    /// Regions in registration order: Read chunks, Write chunks, Reply chunk.
    regions: Vec<ChunkRegion>,
    /// Index in `regions` of each Write chunk, and of the Reply chunk.
    write_regions: Vec<usize>,
    reply_region: Option<usize>,
    /// The Write list and Reply chunk as we advertised them.
    writes: Vec<WriteChunk>,
    reply: Option<WriteChunk>,
    /// The Call, kept to send it again in Version One after ERR_VERS (v2 §5.2).
    msg: XdrStream,
    /// The RPC-over-RDMA version the Call went out in; its Reply must be in the same
    /// (v2 §5.3).
    version: Version,
    /// The upper layer gave up on it ([`RdmaSender::abort`]): its regions are fenced
    /// and its Reply, when it comes, only returns the credit.
    aborted: bool,
}

struct State {
    credits: RequesterCredits,
    calls: HashMap<Xid, PendingCall>,
    /// Replies being pulled from responder-provided Read chunks.
    pulls: HashMap<Xid, reliable::Pull>,
    /// Where the reliable-reply exchange stands.
    reliable: reliable::ReliableState,
    closed: bool,
    /// Version Two negotiation (v2 §5): the version of the next Call.
    negotiation: Negotiation,
}

struct Conn<Q> {
    /// Where whole replies go ([`RdmaReceiver`]); `None` once the connection ended,
    /// which ends the receiver.
    replies: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
    /// Registered buffers for the headers of our Sends.
    sends: SendPool,
    qp: Q,
    pd: ProtectionDomain,
    limits: PeerLimits,
    policy: Policy,
    binding: Arc<dyn RdmaBinding>,
    stats: Arc<ConnStats>,
    /// What we advertise for reliable reply, if we take part in it.
    reliable: Option<rpcrdma::options::ReliableReplyInfo>,
    /// Test hook: never send RDMA_DONE.
    skip_done: bool,
    /// Largest Reply we accept (bounds what we pull).
    max_message: u64,
    /// Backward-direction service, if configured.
    backward: Option<backward::ClientBackward>,
    state: Mutex<State>,
    credit_wait: Notify,
    /// Where the negotiation outcome goes when the connection ends.
    negotiation: Arc<Mutex<Option<Negotiation>>>,
}

impl<Q> Conn<Q> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Poisoning means a panic elsewhere; the table itself stays consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a whole reply to the receiver; false once the connection has ended.
    fn deliver(&self, reply: Bytes) -> bool {
        let g = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().is_some_and(|tx| tx.send(reply).is_ok())
    }

    /// Ends the receiver.
    fn end_replies(&self) {
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

/// The sending half of a client connection. Dropping it disconnects.
pub struct RdmaSender<Q: QueuePair + 'static> {
    conn: Arc<Conn<Q>>,
}

impl<Q: QueuePair + 'static> RdmaSender<Q> {
    /// This connection's counters.
    pub fn stats(&self) -> Arc<ConnStats> {
        self.conn.stats.clone()
    }

    async fn send_call(&self, msg: &XdrStream) -> Result<(), TransportError> {
        let Some(xid) = rpc::xid(&msg.inline) else {
            return Err(TransportError::NotACall);
        };
        match self.try_send_call(xid, msg).await {
            Err(
                e @ (TransportError::NoBinding { .. }
                | TransportError::NotACall
                | TransportError::Marshal(_)),
            ) => {
                // §5.5.4: "if a requester is unable to construct and transmit a Call
                // message, the associated RPC transaction fails immediately." Failing
                // the connection instead would make oncrpc reconnect and retry it.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "call failed locally");
                self.conn.stats.inc(Counter::ErrCallFailedLocally);
                self.conn.deliver(system_err_reply(xid));
                Ok(())
            }
            other => other,
        }
    }

    async fn try_send_call(&self, xid: Xid, msg: &XdrStream) -> Result<(), TransportError> {
        let conn = &self.conn;
        let Some(proc_id) = rpc::call_proc(&msg.inline) else {
            return Err(TransportError::NotACall);
        };
        if !conn.binding.binds(proc_id.prog, proc_id.vers) {
            return Err(TransportError::NoBinding {
                prog: proc_id.prog,
                vers: proc_id.vers,
            });
        }
        // §4.3.1: "The requester MUST NOT send unacknowledged requests in excess of
        // this granted responder credit limit."
        let mut waited = false;
        let requested = loop {
            let notified = conn.credit_wait.notified();
            {
                let mut st = conn.lock();
                if st.closed {
                    return Err(TransportError::NotConnected);
                }
                if st.credits.try_acquire().is_ok() {
                    break st.credits.requested();
                }
            }
            if !waited {
                conn.stats.inc(Counter::CreditWaits);
                waited = true;
            }
            notified.await;
        };
        let result = marshal_and_post(conn, xid, proc_id, requested, msg);
        if result.is_err() {
            let mut st = conn.lock();
            if let Some(call) = st.calls.remove(&xid) {
                fence(call, None, &conn.stats);
            }
            let _ = st.credits.release();
            drop(st);
            conn.credit_wait.notify_waiters();
        }
        result
    }
}

/// Room after a Write chunk's data in its region for what follows the data in the
/// Reply: XDR padding (up to 3 bytes) and the rest of the results (nothing for an NFSv3
/// READ; a few short results for an NFSv4 COMPOUND). A longer tail is joined by a copy.
const WRITE_CHUNK_TAIL_ROOM: usize = 256;

/// Plans, registers and posts Call `xid` in the connection's current version.
fn marshal_and_post<Q: QueuePair>(
    conn: &Conn<Q>,
    xid: Xid,
    proc_id: ProcId,
    requested: u32,
    msg: &XdrStream,
) -> Result<(), TransportError> {
    {
        let sizing = conn.binding.reply_sizing(proc_id, msg);
        let negotiation = conn.lock().negotiation;
        // v2 §5: the first message "can be no larger than the Version One default
        // inline threshold of 1024 bytes" (the responder may speak only Version One).
        let send_threshold = match negotiation {
            Negotiation::Settled(_) => conn.limits.send_threshold,
            _ => conn.limits.send_threshold.min(PROBE_LIMIT),
        };
        let limits = CallLimits {
            send_threshold,
            recv_threshold: conn.limits.recv_threshold,
            max_segments_per_registration: 1,
        };
        let version = negotiation.version();
        conn.stats.set(Counter::Version, u64::from(version.0));
        // reliable-reply §4.1.1: with responder-provided Read chunks agreed, a Reply
        // that does not fit inline comes in one; no Reply chunk is offered.
        let plan_fn =
            if conn.lock().reliable.is_on() && negotiation == Negotiation::Settled(Version::TWO) {
                plan_call_without_reply_chunk
            } else {
                plan_call
            };
        let plan = plan_fn(xid, version, requested, msg, &sizing, limits)?;
        let mut regions = Vec::with_capacity(plan.registrations.len());
        let (mut write_regions, mut reply_region) = (Vec::new(), None);
        for (i, reg) in plan.registrations.iter().enumerate() {
            match reg {
                Registration::Write { .. } => write_regions.push(i),
                Registration::Reply { .. } => reply_region = Some(i),
                Registration::Read { .. } => {}
            }
            // A Write chunk is registered out of a buffer with room for the rest of the
            // data (`registration::join_in_place`): before it, at most the inline part
            // (our receive threshold); after it, XDR padding and a short tail.
            let room = Room {
                head: conn.limits.recv_threshold as usize,
                tail: WRITE_CHUNK_TAIL_ROOM,
            };
            regions.push(ChunkRegion::register_with_room(
                &conn.pd,
                reg,
                room,
                &conn.stats,
            ));
        }
        let segments = regions.iter().map(|r| vec![r.segment()]).collect();
        let shape = plan.shape;
        let out = plan.finish(segments)?;
        let chunks = out.chunks().cloned().unwrap_or_default();
        let stats = &conn.stats;
        stats.inc(Counter::Calls);
        match shape {
            Shape::Short => stats.inc(Counter::ShortCalls),
            Shape::Chunked => stats.inc(Counter::ReadChunks),
            Shape::Long => stats.inc(Counter::PositionZeroReadChunks),
        }
        stats.add(Counter::WriteChunks, chunks.writes.len() as u64);
        stats.add(Counter::ReplyChunks, u64::from(chunks.reply.is_some()));
        stats.inc(Counter::Sends);
        stats.add(Counter::SendBytes, out.send_len as u64);
        {
            // Registered before the Send is posted: the Reply may overtake this task.
            let mut st = conn.lock();
            st.calls.insert(
                xid,
                PendingCall {
                    proc_id,
                    regions,
                    write_regions,
                    reply_region,
                    writes: chunks.writes,
                    reply: chunks.reply,
                    msg: msg.clone(),
                    version,
                    aborted: false,
                },
            );
            st.negotiation = st.negotiation.on_send(xid);
        }
        // The header from the send pool, then the Payload stream slices, gathered: no
        // copy of the payload here.
        let wr_id = wr_kind::SEND | u64::from(xid.0);
        if !conn.sends.post(&conn.qp, wr_id, SendOp::Send, out.send)? {
            stats.inc(Counter::SendPoolFallbacks);
        }
        Ok(())
    }
}

impl<Q: QueuePair + 'static> RdmaSender<Q> {
    /// The upper layer gives up on Call `xid` (its caller went away). Its registered
    /// regions are fenced now, so the responder can no longer write into them; its
    /// credit stays taken until the Reply (or RDMA_ERROR) comes, because the
    /// responder still holds the Receive the Call used (§4.3.1). That Reply is then
    /// dropped, and one that comes in a responder-provided Read chunk gets its
    /// RDMA_DONE without being pulled (draft-cel-nfsv4-rpcrdma-reliable-reply-05
    /// §4.1.3), so the connection survives (§5.1.3: "The transport connection is
    /// preserved because no memory protection violation can occur").
    ///
    /// A responder that writes into a fenced Write or Reply chunk meets an invalid
    /// STag and the connection is lost: the case §5.1.3 says responder-provided Read
    /// chunks avoid. Returns false if no such Call is outstanding.
    pub fn abort(&self, xid: u32) -> bool {
        let xid = Xid(xid);
        let regions = {
            let mut st = self.conn.lock();
            if let Some(call) = st.calls.get_mut(&xid) {
                if call.aborted {
                    return false;
                }
                call.aborted = true;
                call.write_regions.clear();
                call.reply_region = None;
                std::mem::take(&mut call.regions)
            } else if let Some(call) = st.pulls.get_mut(&xid).map(reliable::Pull::call_mut) {
                if call.aborted {
                    return false;
                }
                call.aborted = true;
                Vec::new()
            } else {
                return false;
            }
        };
        self.conn.stats.inc(Counter::CallsAborted);
        for r in regions {
            r.fence(None, &self.conn.stats);
        }
        true
    }
}

impl<Q: QueuePair + 'static> RecordSender for RdmaSender<Q> {
    async fn send(&mut self, msg: &XdrStream) -> io::Result<()> {
        self.send_call(msg).await.map_err(io::Error::from)
    }
}

impl<Q: QueuePair + 'static> Drop for RdmaSender<Q> {
    fn drop(&mut self) {
        self.conn.qp.disconnect();
    }
}

/// The receiving half of a client connection: whole RPC replies, reassembled.
#[derive(Debug)]
pub struct RdmaReceiver {
    rx: mpsc::UnboundedReceiver<Bytes>,
}

impl RecordReceiver for RdmaReceiver {
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        Ok(self.rx.recv().await)
    }
}

/// Fences every region of `call`.
fn fence(call: PendingCall, remote: Option<STag>, stats: &ConnStats) -> Vec<Bytes> {
    call.regions
        .into_iter()
        .map(|r| r.fence(remote, stats))
        .collect()
}

/// RFC 5531 reply `xid, REPLY, MSG_ACCEPTED, AUTH_NONE, SYSTEM_ERR`: how a Call that
/// the transport cannot complete fails through `oncrpc`'s message-only interface.
fn system_err_reply(xid: Xid) -> Bytes {
    const SYSTEM_ERR: u32 = 5;
    let words = [xid.0, rpc::REPLY, 0, 0, 0, SYSTEM_ERR];
    Bytes::from(
        words
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<u8>>(),
    )
}

/// The completion task of one client connection.
async fn completions<Q: QueuePair + 'static>(conn: Arc<Conn<Q>>, pool: RecvPool) {
    while let Some(c) = conn.qp.completion().await {
        if c.wr_id & wr_kind::MASK == wr_kind::SEND {
            conn.sends.complete(c.wr_id);
        }
        if c.wr_id & wr_kind::MASK == wr_kind::READ {
            // An RDMA Read pulling a Reply (the client posts no other Reads).
            let xid = Xid((c.wr_id & !wr_kind::MASK) as u32);
            let reply = match c.status {
                WcStatus::Success => reliable::pull_reads_completed(&conn, xid, 1, true),
                WcStatus::Flushed => {
                    conn.stats.inc(Counter::Flushed);
                    reliable::pull_read_flushed(&conn, xid)
                }
                _ => {
                    conn.stats.inc(Counter::ErrCompletion);
                    tracing::debug!(target: "rpcrdma_transport", ?c, "RDMA Read of a reply failed");
                    // reliable-reply §4.1.2: pull completion is owed "successfully or
                    // in error"; it goes before the disconnect below.
                    reliable::pull_reads_completed(&conn, xid, 1, false)
                }
            };
            if let Some(reply) = reply {
                conn.stats.inc(Counter::Replies);
                if !conn.deliver(reply) {
                    conn.qp.disconnect();
                }
            }
            if !matches!(c.status, WcStatus::Success | WcStatus::Flushed) {
                // §5.5.5: transport errors end the connection (on iWARP the Terminate
                // already has; a verbs QP is in the error state).
                conn.qp.disconnect();
            }
            continue;
        }
        if c.status == WcStatus::Flushed {
            conn.stats.inc(Counter::Flushed);
            continue;
        }
        if c.status != WcStatus::Success {
            // §5.5.5: transport errors end the connection; the RPC layer retransmits.
            conn.stats.inc(Counter::ErrCompletion);
            tracing::debug!(target: "rpcrdma_transport", ?c, "completion error");
            conn.qp.disconnect();
            continue;
        }
        if c.opcode != WcOpcode::Recv || c.wr_id & wr_kind::MASK != wr_kind::RECV {
            continue;
        }
        let index = (c.wr_id & !wr_kind::MASK) as usize;
        let buf = pool.take(index, c.byte_len);
        if pool.post(&conn.qp, index).is_err() {
            conn.qp.disconnect();
        }
        let Some(buf) = buf else { continue };
        conn.stats.inc(Counter::Recvs);
        conn.stats.add(Counter::RecvBytes, buf.len() as u64);
        if let Some(reply) = handle_reply(&conn, buf, &c) {
            conn.stats.inc(Counter::Replies);
            if !conn.deliver(reply) {
                conn.qp.disconnect();
            }
        }
    }
    // The connection is gone: fence every region still registered (§5.4.1), wake
    // every Call waiting for a credit, and let oncrpc reconnect and retransmit.
    let calls: Vec<PendingCall> = {
        let mut st = conn.lock();
        st.closed = true;
        let pulled: Vec<PendingCall> = st.pulls.drain().map(|(_, p)| p.into_call()).collect();
        st.calls.drain().map(|(_, c)| c).chain(pulled).collect()
    };
    for call in calls {
        fence(call, None, &conn.stats);
    }
    // v2 §5.2: what this server speaks, for the next connection (no probing loop).
    let next = conn.lock().negotiation.next_connection();
    *conn.negotiation.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
    conn.credit_wait.notify_waiters();
    conn.end_replies();
    crate::server::record_close_reason(&conn.qp, &conn.stats).await;
    conn.stats.close();
}

/// Completes the Call a received message answers; returns the RPC reply to deliver.
fn handle_reply<Q: QueuePair + 'static>(
    conn: &Arc<Conn<Q>>,
    buf: Bytes,
    c: &Completion,
) -> Option<Bytes> {
    let stats = &conn.stats;
    let received = match receive(&buf, &conn.policy) {
        Ok(r) => r,
        Err(e @ HeaderError::UnknownOption(_)) => {
            reliable::refuse_option(conn, &buf, &e);
            return None;
        }
        Err(HeaderError::UnsupportedVersion(version)) => {
            // A Reply in a version we do not speak is in another version than its
            // Call: v2 §5.3, as in any other version.
            let prefix = rpcrdma::PrefixView::new_checked(&buf[..]).ok()?.prefix();
            let is_reply = matches!(
                prefix.msg_type,
                rpcrdma::MsgType::RDMA_MSG | rpcrdma::MsgType::RDMA_NOMSG
            );
            let call = is_reply
                .then(|| conn.lock().calls.remove(&prefix.xid))
                .flatten();
            let Some(call) = call else {
                tracing::debug!(target: "rpcrdma_transport", ?version, "message in an unsupported version");
                stats.inc(Counter::ErrDiscarded);
                return None;
            };
            return reply_in_another_version(conn, prefix.xid, call, version, c.invalidated);
        }
        Err(e) => {
            // Otherwise a requester answers no RDMA_ERROR; a bad Reply is dropped (its
            // Call is retried by the RPC layer or times out).
            tracing::debug!(target: "rpcrdma_transport", error = %e, "bad reply header");
            stats.inc(Counter::ErrDiscarded);
            return None;
        }
    };
    let xid = received.prefix().xid;
    let credits = received.prefix().credits;
    let version = received.prefix().version;
    let (base, chunks) = match received {
        Received::Msg {
            prefix,
            chunks,
            payload,
        } => {
            if rpc::msg_type(&payload) == Some(rpc::CALL) {
                // §7.3.4: a backward-direction Call from the server.
                backward::handle_call(conn, prefix, &chunks, payload);
                return None;
            }
            (Some(payload), chunks)
        }
        Received::NoMsg { prefix, chunks } => {
            if prefix.version == Version::TWO && chunks.position_zero().is_some() {
                // reliable-reply §4.1.2: a Reply in a responder-provided Read chunk.
                return reliable::handle_read_chunk_reply(conn, prefix, &chunks);
            }
            (None, chunks)
        }
        Received::Error { prefix, body } => {
            stats.inc(Counter::ErrRdmaErrorReceived);
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?body, "RDMA_ERROR");
            if reliable::option_refused(conn, &prefix, &body) {
                return None;
            }
            let mut st = conn.lock();
            let call = st.calls.remove(&xid)?;
            let (n, outcome) = st.negotiation.handle_reply(xid, Some(&body));
            st.negotiation = n;
            if call.aborted {
                // Abandoned (its regions are already fenced): not sent again, nothing
                // delivered; only the credit returns.
                let _ = st.credits.release();
                drop(st);
                conn.credit_wait.notify_waiters();
                return None;
            }
            if let NegotiationOutcome::Retry { version, .. } = outcome {
                // v2 §5.2: "the requester selects a protocol version in the range of
                // responder-supported versions for subsequent messages": the same
                // Call again, same XID, keeping its credit.
                let requested = st.credits.requested();
                drop(st);
                stats.inc(Counter::VersionFallbacks);
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?version, "ERR_VERS: sending the call again");
                let (proc_id, msg) = (call.proc_id, call.msg.clone());
                fence(call, c.invalidated, stats);
                if marshal_and_post(conn, xid, proc_id, requested, &msg).is_ok() {
                    return None;
                }
                let mut st = conn.lock();
                if let Some(call) = st.calls.remove(&xid) {
                    fence(call, None, stats);
                }
                let _ = st.credits.release();
                drop(st);
                conn.credit_wait.notify_waiters();
                return Some(system_err_reply(xid));
            }
            // An RDMA_ERROR carries no grant to trust (v2 draft §5): release only.
            let _ = st.credits.release();
            drop(st);
            conn.credit_wait.notify_waiters();
            fence(call, c.invalidated, stats);
            return Some(system_err_reply(xid));
        }
        Received::Optional {
            prefix,
            opttype,
            optinfo,
            ..
        } => {
            reliable::handle_optional(conn, &prefix, opttype, &optinfo);
            return None;
        }
    };
    let (call, advert) = {
        let mut st = conn.lock();
        let Some(call) = st.calls.remove(&xid) else {
            drop(st);
            stats.inc(Counter::ErrDiscarded);
            return None;
        };
        if version != call.version {
            drop(st);
            return reply_in_another_version(conn, xid, call, version, c.invalidated);
        }
        // §4.3.1: a valid Reply returns the Call's credit and carries the new grant.
        let _ = st.credits.handle_reply(credits);
        // v2 §5.1: a non-error Reply to the probe settles the version.
        let (n, _) = st.negotiation.handle_reply(xid, None);
        st.negotiation = n;
        stats.set(Counter::CreditsGranted, u64::from(credits));
        let advert = reliable::advertisement_due(conn, &mut st, xid);
        (call, advert)
    };
    conn.credit_wait.notify_waiters();
    if let Some(h) = advert {
        reliable::post_header(conn, xid, h, SendOp::Send);
    }
    if call.aborted {
        // The upper layer gave up on it: the credit is back, nothing to deliver.
        return None;
    }
    let proc_id = call.proc_id;
    match complete(conn, call, base, &chunks, c.invalidated) {
        Ok(reply) => Some(reply),
        Err(why) => {
            stats.inc(Counter::ErrBadReply);
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?proc_id, why, "bad reply");
            Some(system_err_reply(xid))
        }
    }
}

/// A Reply (RDMA_MSG or RDMA_NOMSG, possibly with a responder-provided Read chunk) for
/// `call` in `version`, which is not the version the Call went out in.
///
/// rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5.3: "[I-D.ietf-nfsv4-rfc5666bis]
/// REQUIRES that a responder MUST send Replies with the same RPC-over-RDMA protocol
/// version that the requester uses to send its Calls." Such a message is not accepted
/// as the Call's Reply, and the Call fails (SYSTEM_ERR, as any Reply that does not
/// match its Call) rather than waiting: the responder considers the Call answered and
/// holds nothing more for it, so a dropped Reply would leave the Call to oncrpc's
/// timeout with its regions still exposed and its credit taken. This is also what the
/// core's `Requester` does (`HeaderError::UnsupportedVersion`). The message's
/// `rdma_credit` is not adopted (the message breaks the version rules, so its header
/// is not trusted, as for RDMA_ERROR): the Call's credit is only released; nor does
/// it settle a Version Two probe (v2 §5.1 asks for "a valid non-error response"), so a
/// responder answering the probe in Version One leaves it unsettled and the next
/// connection starts in Version One. RDMA_ERROR is not checked here: an ERR_VERS
/// answering a Version Two probe may carry either version in its header (knfsd echoes
/// the Call's, a Version One responder may put its own; v2 §5.2 falls back either way),
/// and any RDMA_ERROR completes its Call anyway.
fn reply_in_another_version<Q>(
    conn: &Conn<Q>,
    xid: Xid,
    call: PendingCall,
    version: Version,
    remote: Option<STag>,
) -> Option<Bytes> {
    let stats = &conn.stats;
    let _ = conn.lock().credits.release();
    conn.credit_wait.notify_waiters();
    stats.inc(Counter::ErrBadReply);
    stats.inc(Counter::ErrReplyVersion);
    tracing::debug!(
        target: "rpcrdma_transport",
        xid = xid.0,
        ?version,
        call_version = ?call.version,
        "reply in another version than its call"
    );
    let aborted = call.aborted;
    fence(call, remote, stats);
    (!aborted).then(|| system_err_reply(xid))
}

/// Checks a Reply against its Call, then [`finish_reply`].
fn complete<Q>(
    conn: &Conn<Q>,
    call: PendingCall,
    inline: Option<Bytes>,
    chunks: &rpcrdma::ChunkLists,
    remote: Option<STag>,
) -> Result<Bytes, &'static str> {
    // Checks first, fence always (the regions go whatever the verdict).
    let checked = (|| {
        if !chunks.reads.is_empty() {
            return Err("read list in a reply");
        }
        let written = written_lengths(&call.writes, &chunks.writes).map_err(|_| "write list")?;
        let reply_len = match (&inline, &call.reply, &chunks.reply) {
            (None, Some(provided), Some(returned)) => {
                Some(reply_chunk_length(provided, returned).map_err(|_| "reply chunk")?)
            }
            (None, _, _) => return Err("RDMA_NOMSG reply without our reply chunk"),
            (Some(_), _, _) => None,
        };
        Ok((written, reply_len))
    })();
    finish_reply(conn, call, inline, checked, remote)
}

/// Fences the Call's regions (§5.4.1: before the upper layer sees the reply) and
/// rebuilds the Payload stream from `inline` (or the Reply chunk, `reply_len` bytes)
/// and the Write chunks (`written` bytes each), if `checked` holds them.
fn finish_reply<Q>(
    conn: &Conn<Q>,
    call: PendingCall,
    inline: Option<Bytes>,
    checked: Result<(Vec<u64>, Option<u64>), &'static str>,
    remote: Option<STag>,
) -> Result<Bytes, &'static str> {
    let stats = &conn.stats;
    let write_regions = call.write_regions.clone();
    let reply_region = call.reply_region;
    let proc_id = call.proc_id;
    let ats: Vec<usize> = call.regions.iter().map(ChunkRegion::at).collect();
    let mut bufs: Vec<Option<Bytes>> = fence(call, remote, stats).into_iter().map(Some).collect();
    let (written, reply_len) = checked?;
    let base = match (inline, reply_len) {
        (Some(b), _) => b,
        (None, Some(len)) => {
            stats.add(Counter::ChunkBytesReceived, len);
            let buf = reply_region
                .and_then(|i| bufs.get_mut(i)?.take())
                .ok_or("reply chunk")?;
            buf.slice(..(len as usize).min(buf.len()))
        }
        (None, None) => return Err("no payload"),
    };
    // Each Write chunk's region, whole, and where its data starts; the data handed up
    // is at most the length the responder returned (checked against what we offered).
    let mut wholes = Vec::with_capacity(written.len());
    let mut data = Vec::with_capacity(written.len());
    for (k, &len) in written.iter().enumerate() {
        let (buf, at) = write_regions
            .get(k)
            .and_then(|&i| Some((bufs.get_mut(i)?.take()?, *ats.get(i)?)))
            .ok_or("write chunk")?;
        stats.add(Counter::ChunkBytesReceived, len);
        let at = at.min(buf.len());
        data.push(buf.slice(at..at + (len as usize).min(buf.len() - at)));
        wholes.push((buf, at));
    }
    if data.iter().all(Bytes::is_empty) {
        // Nothing was placed: the stream is complete as it is.
        return Ok(base);
    }
    let offsets = conn
        .binding
        .reply_ddp_offsets(proc_id, &base)
        .ok_or("reply does not parse")?;
    let n = offsets.len().min(data.len());
    data.truncate(n);
    let full = reassemble_reply(base, &offsets[..n], data).map_err(|_| "reassembly")?;
    // One chunk with data (an NFS READ): the Reply is made contiguous in that chunk's
    // region, around the data, without copying the data.
    let full = if full.chunk_ranges.len() == 1 && !wholes.is_empty() {
        let (whole, at) = wholes.swap_remove(0);
        drop(wholes);
        match join_in_place(full, whole, at) {
            Ok(reply) => {
                stats.inc(Counter::RepliesJoinedInPlace);
                return Ok(reply);
            }
            Err((full, _)) => full,
        }
    } else {
        full
    };
    Ok(full.to_bytes())
}

mod backward;
mod reliable;
