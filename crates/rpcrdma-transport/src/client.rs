//! The requester: an [`oncrpc::Transport`] over RPC-over-RDMA (Linux
//! `transport.c` + the requester half of `rpc_rdma.c`'s callers).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3 (credits), §4.5 (shapes),
//! §5.3.2-§5.3.3 (Write list, Reply chunk), §5.4.1 (invalidate before completion),
//! §7 (backward direction), §8 (bindings); RFC 8797;
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 (Replies pulled from Read chunks).
//!
//! # Driving
//! Each connection is one task, the `driver` both roles share, with
//! `ClientRole` around the protocol core's per-connection [`Requester`]:
//! ```text
//!  RdmaSender::send ──ClientInput::Call──► submit_call (waits in the core for a credit)
//!  completions: Receive ──► handle_receive   RDMA Read done ──► handle_read_done
//!  each turn: the core's actions are executed in order (register chunk regions and
//!  hand the segments back, post Sends, RDMA Read a pulled Reply, fence regions,
//!  post backward Receives), then its events: a Reply is put back together from the
//!  fenced regions and handed to [`RdmaReceiver`]; a backward Call goes to the
//!  dispatcher given to [`RdmaTransport::serve_backward`].
//! ```
//! Message shapes, chunks, credits, version negotiation (ERR_VERS fallback), the
//! reliable-reply exchange, RDMA_DONE, aborted Calls and the backward direction are the
//! core's, and so is putting a Reply back together from what the responder placed
//! (`Requester::assemble_reply`, which takes the bytes out of the fenced regions through
//! [`PlacedChunks`]); the regions, and once fenced the buffers a Reply is built from
//! (`Requester::wants_placed`), live in the driver's `Link` by the STag the core names
//! them by.
//!
//! `oncrpc::Client` reconnects when [`RdmaReceiver`] ends and sends every outstanding
//! Call again with its XID; each retransmission is planned and registered afresh on
//! the new connection. The regions of the lost connection are fenced when it ends.
//!
//! A Call the core fails (answered with RDMA_ERROR, a Reply that does not match its
//! chunks or its version, a failed pull) or that cannot be sent at all completes with
//! [`oncrpc::Incoming::CallFailed`] carrying a [`TransportError`], which the caller of
//! `oncrpc::Client` sees as `ClientError::Transport` (counted in the counters).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use oncrpc::{CallFailure, Dispatcher, Incoming, RecordReceiver, RecordSender, Transport};
use rdma::{BufferPool, ConnectionManager, PooledBuffer, QueuePair, Route};
use rpcrdma::private_data::PrivateData;
use rpcrdma::requester::{PlacedChunks, PlacedHandles, ReplyParts};
use rpcrdma::rpc;
use rpcrdma::version::Negotiation;
use rpcrdma::{
    Error, MarshalError, ReplyError, Requester, RequesterConfig, RequesterEvent, Version, Xid,
};
use tokio::sync::{mpsc, oneshot};
use xdr::XdrStream;

use crate::binding::RdmaBinding;
use crate::counters::{ConnStats, Counter, CounterSink, StatsRegistry};
use crate::driver::{CloseReason, Driver, Link, Role};
use crate::error::TransportError;
use crate::pool::{RecvPool, SendPool};
use crate::registration::{contiguous, Room};
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
    /// Buffers for Write and Reply chunks and pull sinks, shared by the connections.
    /// One per transport, so per server: every byte in it came from that server,
    /// which is why chunks are not zeroed (`registration` module docs).
    buffers: BufferPool,
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
            binding,
            stats: StatsRegistry::default(),
            negotiation: Arc::new(Mutex::new(None)),
            backward: None,
            buffers: BufferPool::new(config.max_idle_buffers),
            config,
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
    /// we ask for, the connection's task started.
    pub async fn connect_once(&self) -> Result<(RdmaSender<P::Qp>, RdmaReceiver), TransportError> {
        let route = self.provider.resolve(self.addr).await?;
        let pd = route.device().alloc_pd()?;
        // Remote invalidation only where this device can invalidate.
        let config = self.config.on_device(&route.device().attributes());
        let backward = self
            .backward
            .clone()
            .filter(|_| config.backward_credits > 0);
        let backward_recvs = backward.as_ref().map_or(0, |_| config.backward_credits);
        // §4.3.1: the requested credits are Receives we must have posted, since each
        // granted Call may be answered at once; they go up with the connection. The
        // backward ones are posted when the core opens the backward channel.
        let credits = config.credits.max(1);
        let all = credits + backward_recvs;
        let (recv_pool, recvs) =
            RecvPool::new(&pd, credits, backward_recvs, all, config.recv_buffer_len())?;
        let qp = route.connect(&pd, config.connect_params(recvs)).await?;
        let limits = config.negotiate(qp.peer());
        let addr = Some(self.addr);
        let stats = self
            .stats
            .open("client", addr, qp.peer(), &limits, config.credits);
        tracing::debug!(
            target: "rpcrdma_transport",
            addr = %self.addr,
            send_threshold = limits.send_threshold,
            recv_threshold = limits.recv_threshold,
            remote_invalidate = limits.remote_invalidate,
            peer_ird = qp.peer().ird,
            "connected"
        );
        let prefer = if config.version_two {
            Version::TWO
        } else {
            Version::ONE
        };
        // RFC 8797: without the server's private data, the version's default
        // thresholds, which the core applies (`rpcrdma::version`).
        let peer_limits = PrivateData::parse(&qp.peer().private_data).map(|_| limits);
        let send_buffer_len = rpcrdma::version::max_send_size(peer_limits.as_ref(), prefer);
        let mut core = Requester::resume(
            self.binding.clone(),
            RequesterConfig {
                policy: config.policy(),
                credits: config.credits,
                prefer,
                peer: peer_limits,
                max_segments_per_registration: 1,
                backward_credits: (backward_recvs > 0).then_some(backward_recvs),
                reliable_reply: self
                    .config
                    .reliable_reply_offered()
                    .then(|| config.reliable_reply_info()),
                max_pulled_reply: config.max_message,
                fault_skip_rdma_done: config.fault_skip_rdma_done,
                // Invalidation is posted work (LOCAL_INV) whose completion releases
                // the Reply (`Link::fence`, `Requester::handle_invalidated`).
                posted_invalidation: true,
            },
            self.negotiation().unwrap_or(Negotiation::new(prefer)),
        )
        .with_counters(stats.clone());
        // One header buffer per Call we may have outstanding, and one per backward
        // Reply we may owe, each as large as the core may build
        // (`rpcrdma::version::max_send_size`).
        let sends = {
            let n = (config.credits.clamp(1, 1024) + backward_recvs.min(1024)) as usize;
            SendPool::new(&pd, n, n, send_buffer_len as usize)?
        };
        let qp = Arc::new(qp);
        let buffers = self.buffers.clone();
        // A Write chunk is registered out of a buffer with room for the rest of the
        // Reply: before it, at most the inline part (our receive threshold).
        let room = Room::around(limits.recv_threshold as usize);
        let link = Link::new(
            qp.clone(),
            pd,
            buffers,
            stats.clone(),
            recv_pool,
            sends,
            room,
            None,
        );
        let (replies, rx) = mpsc::unbounded_channel();
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        let role = ClientRole {
            replies: Some(replies),
            backward,
            inputs: inputs_tx.clone(),
            negotiation: self.negotiation.clone(),
        };
        // §7.2.2.1: the Receives for backward Calls, before the server may send one
        // (posted as the connection's task starts).
        core.open_backward_channel();
        // A connection stuck on its own work requests is closed, as a server's is
        // (`rpcrdma::liveness`): oncrpc sends its Calls again on a new one.
        let dump = self.stats.dump_requests();
        let driver = Driver::new(link, core, role, inputs, None, dump, config.stall_timeout);
        tokio::spawn(driver.run());
        Ok((
            RdmaSender {
                inputs: inputs_tx,
                qp,
                stats,
            },
            RdmaReceiver { rx },
        ))
    }
}

impl<P: ConnectionManager + 'static> Transport for RdmaTransport<P> {
    type Sender = RdmaSender<P::Qp>;
    type Receiver = RdmaReceiver;

    async fn connect(&self) -> io::Result<(Self::Sender, Self::Receiver)> {
        self.connect_once().await.map_err(io::Error::from)
    }
}

/// The first `len` bytes of a chunk that starts at `at` in `buf`, frozen (no copy);
/// `None` if the buffer is shorter.
fn placed(buf: &PooledBuffer, at: usize, len: usize) -> Option<Bytes> {
    buf.freeze(at..at.checked_add(len)?).ok()
}

/// The bytes the responder placed in a Call's fenced Write and Reply chunks, found by
/// the handles the core names them by ([`PlacedHandles`]), for
/// `Requester::assemble_reply`.
struct ByHandle<'a> {
    handles: &'a PlacedHandles,
    buffers: &'a mut HashMap<u32, (PooledBuffer, usize)>,
}

impl PlacedChunks for ByHandle<'_> {
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes> {
        let (buf, at) = self.buffers.remove(&self.handles.reply?)?;
        placed(&buf, at, len)
    }

    fn write_chunk(&mut self, index: usize, len: usize) -> Option<Bytes> {
        let handle = (*self.handles.writes.get(index)?)?;
        let (buf, at) = self.buffers.remove(&handle)?;
        placed(&buf, at, len)
    }
}

/// What the client's connection task is given besides completions.
pub(crate) enum ClientInput {
    /// A Call to send (from [`RdmaSender`]).
    Call(Xid, XdrStream),
    /// The upper layer gives up on a Call ([`RdmaSender::abort`]); whether it was
    /// outstanding goes back.
    Abort(Xid, oneshot::Sender<bool>),
    /// The backward dispatcher's Reply to a backward Call.
    BackwardReply(Xid, XdrStream),
}

/// The client's upper layer on a connection: `oncrpc`'s Calls and Replies, around the
/// core's [`Requester`].
struct ClientRole {
    /// Where whole replies go ([`RdmaReceiver`]); `None` once the connection ended,
    /// which ends the receiver.
    replies: Option<mpsc::UnboundedSender<Incoming>>,
    /// Serves backward Calls, if configured, and where their Replies come back.
    backward: Option<Arc<Dispatcher>>,
    inputs: mpsc::UnboundedSender<ClientInput>,
    /// Where the negotiation outcome goes when the connection ends.
    negotiation: Arc<Mutex<Option<Negotiation>>>,
}

type ClientCore = Requester<Arc<dyn RdmaBinding>>;

impl<Q: QueuePair + 'static> Role<Q> for ClientRole {
    type Input = ClientInput;
    type Core = ClientCore;

    fn event(&mut self, core: &mut ClientCore, link: &mut Link<Q>, ev: RequesterEvent) {
        match ev {
            RequesterEvent::Reply {
                xid,
                inline,
                reply_chunk_len,
                write_lengths,
                proc_id,
                placed,
            } => {
                let reply = ReplyParts {
                    proc_id,
                    inline: &inline,
                    reply_chunk_len,
                    write_lengths: &write_lengths,
                };
                let assembled = assemble(core, link, reply, &placed);
                // Chunks the Reply had no use for go too.
                for h in placed.reply.iter().chain(placed.writes.iter().flatten()) {
                    link.placed.remove(h);
                }
                match assembled {
                    Ok(reply) => self.deliver(link, Incoming::Message(reply)),
                    Err(e) => {
                        // Counted by the core (`err_bad_reply`).
                        tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?proc_id, error = %e, "bad reply");
                        self.fail_call(link, xid, TransportError::BadReply(e));
                    }
                }
            }
            RequesterEvent::Failed { xid, error } => {
                if let Error::Reply(ReplyError::ConnectionLost) = error {
                    // oncrpc sends it again on the next connection.
                    return;
                }
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, %error, "call failed");
                self.fail_call(link, xid, TransportError::Call(error));
            }
            RequesterEvent::BackwardCall { xid, payload } => self.serve_backward(xid, payload),
        }
    }

    fn input(&mut self, core: &mut ClientCore, link: &mut Link<Q>, input: ClientInput) {
        match input {
            // §4.3.1: past the credit limit the Call waits in the core.
            ClientInput::Call(xid, msg) => {
                if let Err(e) = core.submit_call(xid, msg.clone()) {
                    self.failed_locally(link, xid, &msg, e);
                }
            }
            ClientInput::Abort(xid, answer) => {
                let _ = answer.send(core.abort_call(xid));
            }
            ClientInput::BackwardReply(xid, reply) => {
                if let Err(e) = core.send_backward_reply(xid, reply) {
                    tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "backward reply not sent");
                }
            }
        }
    }

    /// §5.5.4: a Call that cannot be constructed fails at once; the connection stays.
    fn registration_failed(&mut self, link: &mut Link<Q>, xid: Xid, e: rdma::RegisterError) {
        link.stats.inc(Counter::ErrCallFailedLocally);
        self.fail_call(link, xid, TransportError::Register(e));
    }

    /// The connection is gone, which fences every region still registered (§5.4.1:
    /// no peer reaches them through a dead queue pair; the [`Link`] deregisters
    /// them): oncrpc reconnects and sends the outstanding Calls again (those waiting
    /// for a credit too).
    fn ended(&mut self, core: &mut ClientCore, _link: &mut Link<Q>) {
        while core.poll_action().is_some() {}
        while core.poll_event().is_some() {}
        // v2 §5.2: what this server speaks, for the next connection (no probing loop).
        *self.negotiation.lock().unwrap_or_else(|e| e.into_inner()) = Some(core.next_connection());
        self.replies = None;
    }
}

/// Rebuilds the RPC reply: the core takes what the responder placed out of the Call's
/// fenced regions and puts it together (`Requester::assemble_reply`, §5.3.2, the same
/// path the in-memory `pair` tests run); then it is made contiguous for `oncrpc`.
fn assemble<Q: QueuePair + 'static>(
    core: &mut ClientCore,
    link: &mut Link<Q>,
    reply: ReplyParts<'_>,
    handles: &PlacedHandles,
) -> Result<Bytes, ReplyError> {
    let mut placed = ByHandle {
        handles,
        buffers: &mut link.placed,
    };
    let full = core.assemble_reply(reply, &mut placed)?;
    // One chunk with data (an NFS READ): the Reply is made contiguous in that chunk's
    // region, around the data, without copying the data.
    Ok(contiguous(full, &link.stats, Counter::RepliesJoinedInPlace))
}

impl ClientRole {
    /// §5.5.4: "if a requester is unable to construct and transmit a Call message,
    /// the associated RPC transaction fails immediately." Failing the connection
    /// instead would make oncrpc reconnect and retry it.
    fn failed_locally<Q: QueuePair + 'static>(
        &mut self,
        link: &mut Link<Q>,
        xid: Xid,
        msg: &XdrStream,
        e: Error,
    ) {
        let proc_id = rpc::call_proc(&msg.inline);
        tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "call failed locally");
        link.stats.inc(Counter::ErrCallFailedLocally);
        let error = match (e, proc_id) {
            // §8: "Requesters MUST NOT send RPC-over-RDMA messages for Upper Layer
            // Protocols that do not have a Upper Layer Binding."
            (Error::Marshal(MarshalError::NoUpperLayerBinding), Some(p)) => {
                TransportError::NoBinding {
                    prog: p.prog,
                    vers: p.vers,
                }
            }
            (e, _) => TransportError::Call(e),
        };
        self.fail_call(link, xid, error);
    }

    /// Hands a whole reply (or a call's failure) to the receiver; the connection
    /// closes if nobody takes it any more.
    fn deliver<Q: QueuePair + 'static>(&mut self, link: &mut Link<Q>, incoming: Incoming) {
        let taken = self
            .replies
            .as_ref()
            .is_some_and(|tx| tx.send(incoming).is_ok());
        if !taken {
            link.close(CloseReason::UpperLayerGone);
        }
    }

    /// Fails call `xid` alone, saying why.
    fn fail_call<Q: QueuePair + 'static>(
        &mut self,
        link: &mut Link<Q>,
        xid: Xid,
        error: TransportError,
    ) {
        let failed = Incoming::CallFailed {
            xid: xid.0,
            error: CallFailure::new(error),
        };
        self.deliver(link, failed);
    }

    /// A backward-direction Call (§7.3.4) for the dispatcher; its Reply comes back as
    /// an input and goes through the core (§7.3.5).
    fn serve_backward(&mut self, xid: Xid, payload: Bytes) {
        let Some(dispatcher) = self.backward.clone() else {
            return;
        };
        let inputs = self.inputs.clone();
        tokio::spawn(async move {
            if let Some(reply) = dispatcher.dispatch(payload).await {
                let _ = inputs.send(ClientInput::BackwardReply(xid, reply));
            }
        });
    }
}

/// The sending half of a client connection. Dropping it disconnects.
pub struct RdmaSender<Q: QueuePair + 'static> {
    inputs: mpsc::UnboundedSender<ClientInput>,
    qp: Arc<Q>,
    stats: Arc<ConnStats>,
}

impl<Q: QueuePair + 'static> RdmaSender<Q> {
    /// This connection's counters.
    pub fn stats(&self) -> Arc<ConnStats> {
        self.stats.clone()
    }

    /// Hands Call `msg` to the connection's task, which sends it when a credit is
    /// free (§4.3.1). A Call that cannot be sent fails alone, through
    /// [`RdmaReceiver`].
    fn send_call(&self, msg: &XdrStream) -> Result<(), TransportError> {
        let Some(xid) = rpc::xid(&msg.inline) else {
            return Err(TransportError::NotACall);
        };
        self.inputs
            .send(ClientInput::Call(xid, msg.clone()))
            .map_err(|_| TransportError::NotConnected)
    }

    /// The upper layer gives up on Call `xid` (its caller went away). Its registered
    /// regions are fenced now, so the responder can no longer write into them; its
    /// credit stays taken until the Reply (or RDMA_ERROR) comes, because the
    /// responder still holds the Receive the Call used (§4.3.1). That Reply is then
    /// dropped, and one that comes in a responder-provided Read chunk gets its
    /// RDMA_DONE without being pulled (draft-cel-nfsv4-rpcrdma-reliable-reply-05
    /// §4.1.3), so the connection survives (§5.1.3: "The transport connection is
    /// preserved because no memory protection violation can occur"). The core's
    /// `Requester::abort_call`.
    ///
    /// A responder that writes into a fenced Write or Reply chunk meets an invalid
    /// STag and the connection is lost: the case §5.1.3 says responder-provided Read
    /// chunks avoid. Returns false if no such Call is outstanding (or the connection
    /// is gone).
    pub async fn abort(&self, xid: u32) -> bool {
        let (answer, rx) = oneshot::channel();
        if self
            .inputs
            .send(ClientInput::Abort(Xid(xid), answer))
            .is_err()
        {
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

impl<Q: QueuePair + 'static> RecordSender for RdmaSender<Q> {
    async fn send(&mut self, msg: &XdrStream) -> io::Result<()> {
        self.send_call(msg).map_err(io::Error::from)
    }
}

impl<Q: QueuePair + 'static> Drop for RdmaSender<Q> {
    fn drop(&mut self) {
        self.qp.disconnect();
    }
}

/// The receiving half of a client connection: whole RPC replies, reassembled, and the
/// failures of single calls.
#[derive(Debug)]
pub struct RdmaReceiver {
    rx: mpsc::UnboundedReceiver<Incoming>,
}

impl RecordReceiver for RdmaReceiver {
    async fn recv(&mut self) -> io::Result<Option<Incoming>> {
        Ok(self.rx.recv().await)
    }
}
