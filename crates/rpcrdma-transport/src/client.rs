//! The requester: an [`oncrpc::Transport`] over RPC-over-RDMA (Linux
//! `transport.c` + the requester half of `rpc_rdma.c`'s callers).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3 (credits), §4.5 (shapes),
//! §5.3.2-§5.3.3 (Write list, Reply chunk), §5.4.1 (invalidate before completion),
//! §7 (backward direction), §8 (bindings); RFC 8797;
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 (Replies pulled from Read chunks).
//!
//! # Driving
//! Each connection is a thin driver around the protocol core's per-connection
//! [`Requester`]:
//! ```text
//!  oncrpc driver ──send(XdrStream)──► start_call (wait for a credit if none)
//!  completion task (one per connection): Receive ──► handle_receive
//!                                        RDMA Read done ──► handle_read_done
//!  every step: the core's actions are executed in order (register chunk regions and
//!  hand the segments back, post Sends, RDMA Read a pulled Reply, fence regions,
//!  post backward Receives), then its events: a Reply is put back together from the
//!  fenced regions and handed to [`RdmaReceiver`]; a backward Call goes to the
//!  dispatcher given to [`RdmaTransport::serve_backward`].
//! ```
//! Message shapes, chunks, credits, version negotiation (ERR_VERS fallback), the
//! reliable-reply exchange, RDMA_DONE, aborted Calls and the backward direction are the
//! core's, and so is putting a Reply back together from what the responder placed
//! (`Requester::assemble_reply`, which takes the bytes out of the fenced regions through
//! [`PlacedChunks`]); this module keeps only what execution needs: the regions it
//! registered per Call, pull sinks in flight and receive buffers.
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
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use oncrpc::{CallFailure, Dispatcher, Incoming, RecordReceiver, RecordSender, Transport};
use rdma::{
    BufferPool, Completion, ConnectionManager, PooledBuffer, ProtectionDomain, QueuePair,
    QueuePairExt, Route, STag, SendOp, WcOpcode, WcStatus,
};
use rpcrdma::marshal::Registration;
use rpcrdma::private_data::PrivateData;
use rpcrdma::requester::{PlacedChunks, ReplyParts};
use rpcrdma::rpc;
use rpcrdma::version::Negotiation;
use rpcrdma::{
    Action, Error, MarshalError, ReplyError, Requester, RequesterConfig, RequesterEvent, Segment,
    Version, Xid,
};
use tokio::sync::{mpsc, Notify};
use xdr::XdrStream;

use crate::binding::RdmaBinding;
use crate::counters::{ConnStats, Counter, StatsRegistry};
use crate::error::TransportError;
use crate::pool::{wr_kind, RecvPool, SendPool};
use crate::registration::{join_in_place, ChunkRegion, ReadSink, Room};
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
    /// we ask for, the completion task started.
    pub async fn connect_once(&self) -> Result<(RdmaSender<P::Qp>, RdmaReceiver), TransportError> {
        let route = self.provider.resolve(self.addr).await?;
        let pd = route.device().alloc_pd()?;
        // Remote invalidation only where this device can invalidate.
        let config = self.config.on_device(&route.device().attributes());
        let backward = self
            .backward
            .clone()
            .filter(|_| config.backward_credits > 0);
        let backward_recvs = if backward.is_some() {
            config.backward_credits
        } else {
            0
        };
        // §4.3.1: the requested credits are Receives we must have posted, since each
        // granted Call may be answered at once; they go up with the connection. The
        // backward ones are posted when the core opens the backward channel.
        let credits = config.credits.max(1);
        let all = credits + backward_recvs;
        let pool = RecvPool::new(&pd, all, all, config.recv_buffer_len())?;
        let recvs = pool.initial(0..credits as usize);
        let unposted: Vec<usize> = (credits as usize..all as usize).rev().collect();
        let qp = route.connect(&pd, config.connect_params(recvs)).await?;
        let limits = config.negotiate(qp.peer());
        let stats = ConnStats::new("client", Some(self.addr));
        stats.set(Counter::PeerIrd, u64::from(qp.peer().ird));
        stats.set(Counter::SendThreshold, u64::from(limits.send_threshold));
        stats.set(Counter::RecvThreshold, u64::from(limits.recv_threshold));
        stats.set(Counter::CreditsRequested, u64::from(config.credits));
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
        let prefer = if config.version_two {
            Version::TWO
        } else {
            Version::ONE
        };
        // RFC 8797: without the server's private data, the version's default
        // thresholds, which the core applies (`rpcrdma::version`).
        let peer_limits = PrivateData::parse(&qp.peer().private_data).map(|_| limits);
        let send_buffer_len = rpcrdma::version::max_send_size(peer_limits.as_ref(), prefer);
        let core = Requester::resume(
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
                // the Reply (`Conn::invalidate`).
                posted_invalidation: true,
            },
            self.negotiation().unwrap_or(Negotiation::new(prefer)),
        )
        .with_counters(stats.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            replies: Mutex::new(Some(tx)),
            // One header buffer per Call we may have outstanding, and one per backward
            // Reply we may owe, each as large as the core may build
            // (`rpcrdma::version::max_send_size`).
            sends: {
                let n = (config.credits.clamp(1, 1024) + backward_recvs.min(1024)) as usize;
                SendPool::new(&pd, n, n, send_buffer_len as usize)?
            },
            qp,
            pd,
            buffers: self.buffers.clone(),
            room_head: limits.recv_threshold as usize,
            stats,
            backward,
            state: Mutex::new(State {
                core,
                regions: HashMap::new(),
                fencing: HashMap::new(),
                fenced: HashMap::new(),
                pulls: HashMap::new(),
                next_pull: 0,
                closed: false,
            }),
            pool,
            unposted: Mutex::new(unposted),
            negotiation: self.negotiation.clone(),
            credit_wait: Notify::new(),
        });
        // §7.2.2.1: the Receives for backward Calls, before the server may send one.
        let work = conn.step(|core| core.open_backward_channel());
        conn.execute(work.1, None);
        tokio::spawn(completions(conn.clone()));
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

/// The regions registered for one Call, in the core's registration order (Read
/// chunks, Write chunks, Reply chunk).
struct CallRegions {
    regions: Vec<ChunkRegion>,
    /// Index in `regions` of each Write chunk, and of the Reply chunk.
    write: Vec<usize>,
    reply: Option<usize>,
}

/// The regions of a Call whose local invalidations are posted (§5.4.1): the newest
/// registration (what the Reply was written into) and any older one (a Call sent again
/// in another version, v2 §5.2), kept registered until every LOCAL_INV completed.
#[derive(Default)]
struct Fencing {
    newest: Option<CallRegions>,
    older: Vec<CallRegions>,
    /// LOCAL_INVs posted and not completed.
    outstanding: usize,
}

impl Fencing {
    /// Regions whose LOCAL_INV has not completed: a connection lost now fences them.
    fn unfenced(&self) -> usize {
        self.outstanding
    }
}

/// A Call's regions after fencing: each Write or Reply chunk's buffer, with where the
/// chunk starts in it. The core takes the bytes the responder placed out of them
/// (`Requester::assemble_reply`); none for a Call that registered no chunk.
#[derive(Default)]
struct Fenced {
    bufs: Vec<Option<(PooledBuffer, usize)>>,
    write: Vec<usize>,
    reply: Option<usize>,
    /// The buffers of the Write chunks the core took data from, in order, for
    /// [`join_in_place`].
    taken: Vec<(PooledBuffer, usize)>,
}

/// The first `len` bytes of a chunk that starts at `at` in `buf`, frozen (no copy);
/// `None` if the buffer is shorter.
fn placed(buf: &PooledBuffer, at: usize, len: usize) -> Option<Bytes> {
    buf.freeze(at..at.checked_add(len)?).ok()
}

impl PlacedChunks for Fenced {
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes> {
        let (buf, at) = self.bufs.get_mut(self.reply?)?.take()?;
        placed(&buf, at, len)
    }

    fn write_chunk(&mut self, index: usize, len: usize) -> Option<Bytes> {
        let i = *self.write.get(index)?;
        let (buf, at) = self.bufs.get_mut(i)?.take()?;
        let data = placed(&buf, at, len)?;
        self.taken.push((buf, at));
        Some(data)
    }
}

/// A Reply being pulled from a responder-provided Read chunk.
struct Pull {
    xid: Xid,
    sink: ReadSink,
}

struct State {
    core: Requester<Arc<dyn RdmaBinding>>,
    regions: HashMap<Xid, CallRegions>,
    /// Calls whose regions are being fenced (posted LOCAL_INVs).
    fencing: HashMap<Xid, Fencing>,
    /// Calls fenced whose Reply the core released (`Requester::handle_invalidated`)
    /// and not yet put together.
    fenced: HashMap<Xid, Fenced>,
    /// Pulls in flight, by pull id (the low bits of their RDMA Reads' `wr_id`).
    pulls: HashMap<u64, Pull>,
    next_pull: u64,
    closed: bool,
}

/// What one step of the core asked for, taken while the state was locked and executed
/// after it was released.
type Work = (Vec<Action>, Vec<RequesterEvent>);

struct Conn<Q> {
    /// Where whole replies go ([`RdmaReceiver`]); `None` once the connection ended,
    /// which ends the receiver.
    replies: Mutex<Option<mpsc::UnboundedSender<Incoming>>>,
    /// Registered buffers for the headers of our Sends.
    sends: SendPool,
    qp: Q,
    pd: ProtectionDomain,
    /// Where Write and Reply chunks and pull sinks come from.
    buffers: BufferPool,
    /// Room before a Write chunk's data in its buffer: at most the inline part of the
    /// Reply, so our receive threshold.
    room_head: usize,
    stats: Arc<ConnStats>,
    /// Serves backward Calls, if configured.
    backward: Option<Arc<Dispatcher>>,
    state: Mutex<State>,
    pool: RecvPool,
    /// Receive buffers not posted yet (the backward ones until the channel opens).
    unposted: Mutex<Vec<usize>>,
    credit_wait: Notify,
    /// Where the negotiation outcome goes when the connection ends.
    negotiation: Arc<Mutex<Option<Negotiation>>>,
}

/// A Call's fenced regions, deregistered: their buffers for the Reply.
fn fenced(r: CallRegions) -> Fenced {
    Fenced {
        bufs: r.regions.into_iter().map(ChunkRegion::release).collect(),
        write: r.write,
        reply: r.reply,
        taken: Vec::new(),
    }
}

/// Room after a Write chunk's data in its region for what follows the data in the
/// Reply: XDR padding (up to 3 bytes) and the rest of the results (nothing for an NFSv3
/// READ; a few short results for an NFSv4 COMPOUND). A longer tail is joined by a copy.
const WRITE_CHUNK_TAIL_ROOM: usize = 256;

impl<Q: QueuePair + 'static> Conn<Q> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Poisoning means a panic elsewhere; the state itself stays consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the core and takes the work it produced, under the lock. Every
    /// step drains the core, so its queues are empty between steps and no work is
    /// taken by another task.
    fn step<R>(&self, f: impl FnOnce(&mut Requester<Arc<dyn RdmaBinding>>) -> R) -> (R, Work) {
        let mut st = self.lock();
        let r = f(&mut st.core);
        let work = drain(&mut st.core);
        drop(st);
        (r, work)
    }

    /// A step on something the responder sent (a Reply, an RDMA_ERROR, an answer to
    /// our RDMA_OPTIONAL, a pulled Reply), which may have freed a credit: Calls
    /// waiting for one try again.
    fn step_received<R>(
        &self,
        f: impl FnOnce(&mut Requester<Arc<dyn RdmaBinding>>) -> R,
    ) -> (R, Work) {
        let out = self.step(f);
        self.credit_wait.notify_waiters();
        out
    }

    /// Hands a whole reply (or a call's failure) to the receiver; false once the
    /// connection has ended.
    fn deliver(&self, incoming: Incoming) -> bool {
        let g = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().is_some_and(|tx| tx.send(incoming).is_ok())
    }

    /// Fails call `xid` alone, saying why.
    fn fail_call(&self, xid: Xid, error: TransportError) {
        let failed = Incoming::CallFailed {
            xid: xid.0,
            error: CallFailure::new(error),
        };
        if !self.deliver(failed) {
            self.close("the receiver is gone");
        }
    }

    /// Ends the receiver.
    fn end_replies(&self) {
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Disconnects, saying why (the provider's own reason, if it has one when the
    /// connection ends, replaces ours: a failed post is the consequence of a lost
    /// connection, not its cause).
    fn close(&self, why: &str) {
        tracing::debug!(target: "rpcrdma_transport", conn = self.stats.id, reason = why, "closing connection");
        self.stats.inc(Counter::ClosedByUs);
        self.stats.set_close_reason(why.to_string());
        self.qp.disconnect();
    }

    /// Executes the core's actions in order, then its events. `remote` is the STag the
    /// responder invalidated with the Send With Invalidate just received.
    fn execute(self: &Arc<Self>, work: Work, remote: Option<STag>) {
        let (actions, events) = work;
        for a in actions {
            match a {
                Action::Send {
                    xid,
                    send,
                    invalidate,
                } => self.post_send(xid, send, invalidate),
                Action::Register { xid, registrations } => {
                    let work = self.register(xid, &registrations);
                    self.execute(work, remote);
                }
                Action::RdmaRead { xid, segments, .. } => self.pull(xid, &segments),
                Action::Invalidate { xid, .. } => self.invalidate(xid, remote),
                Action::PostBackwardReceives(n) | Action::PostReceives(n) => self.post_unposted(n),
                // A requester writes nothing into the responder's memory.
                Action::RdmaWrite { .. } => {
                    self.close("the core asked a requester for an RDMA Write")
                }
                Action::Close => self.close("protocol: the core closed the connection"),
            }
        }
        for ev in events {
            match ev {
                RequesterEvent::Reply {
                    xid,
                    inline,
                    reply_chunk_len,
                    write_lengths,
                    proc_id,
                } => {
                    let fenced = self.lock().fenced.remove(&xid);
                    let reply = ReplyParts {
                        proc_id,
                        inline: &inline,
                        reply_chunk_len,
                        write_lengths: &write_lengths,
                    };
                    match self.assemble(reply, fenced.unwrap_or_default()) {
                        Ok(reply) => {
                            if !self.deliver(Incoming::Message(reply)) {
                                self.close("the receiver is gone");
                            }
                        }
                        Err(e) => {
                            // Counted by the core (`err_bad_reply`).
                            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?proc_id, error = %e, "bad reply");
                            self.fail_call(xid, TransportError::BadReply(e));
                        }
                    }
                }
                RequesterEvent::Failed { xid, error } => {
                    self.lock().fenced.remove(&xid);
                    if let Error::Reply(ReplyError::ConnectionLost) = error {
                        // oncrpc sends it again on the next connection.
                        continue;
                    }
                    tracing::debug!(target: "rpcrdma_transport", xid = xid.0, %error, "call failed");
                    self.fail_call(xid, TransportError::Call(error));
                }
                RequesterEvent::BackwardCall { xid, payload } => self.serve_backward(xid, payload),
            }
        }
    }

    /// Registers what the core asked for and hands the segments back; returns the
    /// work that produced (the Send of the Call).
    fn register(self: &Arc<Self>, xid: Xid, registrations: &[Registration]) -> Work {
        let mut regions = Vec::with_capacity(registrations.len());
        let (mut write, mut reply) = (Vec::new(), None);
        for (i, reg) in registrations.iter().enumerate() {
            match reg {
                Registration::Write { .. } => write.push(i),
                Registration::Reply { .. } => reply = Some(i),
                Registration::Read { .. } => {}
            }
            // A Write chunk is registered out of a buffer with room for the rest of the
            // Reply (`registration::join_in_place`): before it, at most the inline part
            // (our receive threshold); after it, XDR padding and a short tail.
            let room = Room {
                head: self.room_head,
                tail: WRITE_CHUNK_TAIL_ROOM,
            };
            // COPY: a Read chunk of several pieces into its registered region; one of a
            // single piece (NFS WRITE data) is registered as it is (`registration`).
            match ChunkRegion::register_with_room(&self.pd, &self.buffers, reg, room, &self.stats) {
                Ok(r) => regions.push(r),
                Err(e) => {
                    // §5.5.4: a Call that cannot be constructed fails at once; the
                    // connection stays.
                    tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "registration failed");
                    self.stats.inc(Counter::ErrCallFailedLocally);
                    let work = self
                        .step_received(|core| core.handle_registration_failed(xid))
                        .1;
                    self.fail_call(xid, TransportError::Register(e));
                    return work;
                }
            }
        }
        let segments = regions.iter().map(|r| vec![r.segment()]).collect();
        let mut st = self.lock();
        if st.closed {
            // The connection ended while these were registered: its end fences them
            // (the teardown counted those it found; these it could not see).
            self.stats
                .add(Counter::FencedByDisconnect, regions.len() as u64);
            return (Vec::new(), Vec::new());
        }
        // Known before the Send is posted: the Reply may overtake this task.
        st.regions.insert(
            xid,
            CallRegions {
                regions,
                write,
                reply,
            },
        );
        let r = st.core.handle_registered(xid, segments);
        let work = drain(&mut st.core);
        drop(st);
        if let Err(e) = r {
            // The Call was planned but cannot be finished: the core has forgotten
            // nothing, so it fails here, its regions with it.
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "registered call not sent");
        }
        work
    }

    /// §5.4.1: "The requester endpoint must ensure that memory segments associated
    /// with each RPC transaction are properly fenced from responders before allowing
    /// Upper Layer access to the data". Posts a LOCAL_INV for each region of Call
    /// `xid` the responder did not invalidate itself (`remote`, the STag of the Send
    /// With Invalidate that brought the Reply); the core releases the Reply when the
    /// last one completes ([`Conn::invalidated`]).
    fn invalidate(self: &Arc<Self>, xid: Xid, remote: Option<STag>) {
        let mut wrs = Vec::new();
        let done = {
            let mut st = self.lock();
            let regions = st.regions.remove(&xid);
            let fencing = st.fencing.entry(xid).or_default();
            if let Some(r) = regions {
                let posted = self.pd.attributes().invalidate;
                for region in &r.regions {
                    if !posted {
                        // The device cannot invalidate (a verbs `ibv_reg_mr`
                        // registration): deregistering the region fences it
                        // (`Conn::invalidated`).
                        self.stats.inc(Counter::FencedByDeregistration);
                    } else if Some(region.rkey()) == remote {
                        self.stats.inc(Counter::RemoteInvalidations);
                    } else {
                        wrs.push(region.invalidate_wr(wr_kind::INVALIDATE | u64::from(xid.0)));
                    }
                }
                if let Some(previous) = fencing.newest.replace(r) {
                    fencing.older.push(previous);
                }
            }
            fencing.outstanding += wrs.len();
            fencing.outstanding == 0
        };
        for wr in wrs {
            if let Err(e) = self.qp.post_send(wr) {
                // §5.5.4: a region that cannot be invalidated ends the connection,
                // which fences it.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "LOCAL_INV not posted");
                return self.close("posting a local invalidation failed");
            }
        }
        if done {
            self.invalidated(xid);
        }
    }

    /// Every region of Call `xid` is fenced: deregister them, and let the core hand up
    /// the Call's Reply (or failure), if it still waits for one.
    fn invalidated(self: &Arc<Self>, xid: Xid) {
        let work = {
            let mut st = self.lock();
            let Some(fencing) = st.fencing.remove(&xid) else {
                return;
            };
            drop(fencing.older);
            if st.core.handle_invalidated(xid) {
                if let Some(r) = fencing.newest {
                    st.fenced.insert(xid, fenced(r));
                }
            }
            drain(&mut st.core)
        };
        self.execute(work, None);
    }

    /// A LOCAL_INV of Call `xid` completed successfully.
    fn local_invalidate_done(self: &Arc<Self>, xid: Xid) {
        self.stats.inc(Counter::LocalInvalidations);
        let done = {
            let mut st = self.lock();
            let Some(f) = st.fencing.get_mut(&xid) else {
                return;
            };
            f.outstanding = f.outstanding.saturating_sub(1);
            f.outstanding == 0
        };
        if done {
            self.invalidated(xid);
        }
    }

    /// Rebuilds the RPC reply: the core takes what the responder placed out of the
    /// Call's fenced regions and puts it together (`Requester::assemble_reply`,
    /// §5.3.2, the same path the in-memory `pair` tests run); then it is made
    /// contiguous for `oncrpc`.
    fn assemble(&self, reply: ReplyParts<'_>, mut fenced: Fenced) -> Result<Bytes, ReplyError> {
        let full = self.lock().core.assemble_reply(reply, &mut fenced)?;
        // One chunk with data (an NFS READ): the Reply is made contiguous in that
        // chunk's region, around the data, without copying the data.
        let full = match fenced.taken.first() {
            Some((whole, at)) if full.chunk_ranges.len() == 1 => {
                match join_in_place(full, whole, *at) {
                    Ok(reply) => {
                        self.stats.inc(Counter::RepliesJoinedInPlace);
                        return Ok(reply);
                    }
                    Err(full) => full,
                }
            }
            _ => full,
        };
        // COPY: a Reply with several chunks of data (or a long tail) is made contiguous
        // for `oncrpc`'s `RecordReceiver`, which takes one `Bytes`.
        Ok(full.to_bytes())
    }

    /// reliable-reply §4.1.2: pulls a Reply from the responder's Read chunk, one RDMA
    /// Read per segment, into one sink.
    fn pull(self: &Arc<Self>, xid: Xid, segments: &[Segment]) {
        let len: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
        let mut sink = match ReadSink::new(&self.pd, &self.buffers, len as usize) {
            Ok(sink) => sink,
            Err(e) => {
                // reliable-reply §4.1.2: the pull is over "in error": RDMA_DONE still
                // goes, the Call fails, the connection stays.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "pull sink not registered");
                let work = self.step_received(|core| core.handle_read_failed(xid));
                return self.execute(work.1, None);
            }
        };
        self.stats.count_region(&sink.mr);
        let mut wrs = Vec::with_capacity(segments.len());
        let mut at = 0usize;
        let id = {
            let mut st = self.lock();
            let id = st.next_pull;
            st.next_pull = (st.next_pull + 1) & !wr_kind::MASK;
            id
        };
        for seg in segments.iter().filter(|s| s.length > 0) {
            wrs.push(sink.read_wr(wr_kind::READ | id, seg, at));
            at += seg.length as usize;
        }
        sink.outstanding = wrs.len();
        if wrs.is_empty() {
            return self.pulled(xid, sink.into_bytes());
        }
        self.lock().pulls.insert(id, Pull { xid, sink });
        for wr in wrs {
            self.stats.inc(Counter::RdmaReads);
            self.stats.add(Counter::RdmaReadBytes, wr_len(&wr));
            if let Err(e) = self.qp.post_send(wr) {
                // reliable-reply §4.1.2: the pull is over "in error": RDMA_DONE still
                // goes, the Call fails, the connection stays. Reads already posted
                // complete into a sink nobody waits for.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "RDMA Read not posted");
                self.lock().pulls.remove(&id);
                let work = self.step_received(|core| core.handle_read_failed(xid));
                return self.execute(work.1, None);
            }
        }
    }

    /// A pull ended: the Reply for the core, or a failure (its sink could not hand
    /// the data up).
    fn pulled(self: &Arc<Self>, xid: Xid, data: Result<Bytes, rdma::RegisterError>) {
        let work = match data {
            Ok(data) => {
                self.stats
                    .add(Counter::ChunkBytesReceived, data.len() as u64);
                self.step_received(|core| core.handle_read_done(xid, 0, data))
            }
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "pulled reply unusable");
                self.step_received(|core| core.handle_read_failed(xid))
            }
        };
        self.execute(work.1, None);
    }

    fn post_send(&self, xid: Xid, send: Vec<Bytes>, invalidate: Option<u32>) {
        let len: usize = send.iter().map(Bytes::len).sum();
        self.stats.inc(Counter::Sends);
        self.stats.add(Counter::SendBytes, len as u64);
        let op = match invalidate {
            Some(h) => SendOp::SendWithInvalidate(STag(h)),
            None => SendOp::Send,
        };
        // The header from the send pool, then the Payload stream slices, gathered: no
        // copy of the payload here.
        match self.sends.post(
            &self.qp,
            Vec::new(),
            wr_kind::SEND | u64::from(xid.0),
            op,
            send,
            &self.stats,
        ) {
            Ok(true) => {}
            Ok(false) => self.stats.inc(Counter::SendPoolFallbacks),
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", error = %e, "Send not posted");
                self.close("posting a Send failed");
            }
        }
    }

    /// Posts `n` Receive buffers that are not posted yet (§7.2.2.1).
    fn post_unposted(&self, n: u32) {
        for _ in 0..n {
            let Some(i) = self
                .unposted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()
            else {
                tracing::warn!(target: "rpcrdma_transport", "no receive buffer left to post");
                return;
            };
            if self.pool.post(&self.qp, i).is_err() {
                return self.close("posting a Receive failed");
            }
        }
    }

    /// A backward-direction Call (§7.3.4) for the dispatcher; its Reply goes back
    /// through the core (§7.3.5).
    fn serve_backward(self: &Arc<Self>, xid: Xid, payload: Bytes) {
        let Some(dispatcher) = self.backward.clone() else {
            return;
        };
        let conn = self.clone();
        tokio::spawn(async move {
            let Some(reply) = dispatcher.dispatch(payload).await else {
                return;
            };
            let (r, work) = conn.step(|core| core.send_backward_reply(xid, reply));
            if let Err(e) = r {
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "backward reply not sent");
            }
            conn.execute(work, None);
        });
    }
}

fn wr_len(wr: &rdma::SendWr) -> u64 {
    match &wr.op {
        SendOp::RdmaRead { sink, .. } => sink.len as u64,
        _ => 0,
    }
}

/// Everything the core queued.
fn drain(core: &mut Requester<Arc<dyn RdmaBinding>>) -> Work {
    let mut actions = Vec::new();
    while let Some(a) = core.poll_action() {
        actions.push(a);
    }
    let mut events = Vec::new();
    while let Some(e) = core.poll_event() {
        events.push(e);
    }
    (actions, events)
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
        let conn = &self.conn;
        let Some(xid) = rpc::xid(&msg.inline) else {
            return Err(TransportError::NotACall);
        };
        // §4.3.1: "The requester MUST NOT send unacknowledged requests in excess of
        // this granted responder credit limit": the core refuses a Call past the
        // limit, and it waits for a Reply to free a credit.
        let mut waited = false;
        loop {
            let notified = conn.credit_wait.notified();
            if conn.lock().closed {
                return Err(TransportError::NotConnected);
            }
            let (r, work) = conn.step(|core| core.start_call(xid, msg.clone()));
            conn.execute(work, None);
            match r {
                Ok(()) => return Ok(()),
                Err(Error::Credit(_)) => {
                    if !waited {
                        conn.stats.inc(Counter::CreditWaits);
                        waited = true;
                    }
                    notified.await;
                }
                Err(e) => {
                    // §5.5.4: "if a requester is unable to construct and transmit a
                    // Call message, the associated RPC transaction fails immediately."
                    // Failing the connection instead would make oncrpc reconnect and
                    // retry it.
                    let proc_id = rpc::call_proc(&msg.inline);
                    tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "call failed locally");
                    conn.stats.inc(Counter::ErrCallFailedLocally);
                    let error = match (e, proc_id) {
                        // §8: "Requesters MUST NOT send RPC-over-RDMA messages for Upper
                        // Layer Protocols that do not have a Upper Layer Binding."
                        (Error::Marshal(MarshalError::NoUpperLayerBinding), Some(p)) => {
                            TransportError::NoBinding {
                                prog: p.prog,
                                vers: p.vers,
                            }
                        }
                        (e, _) => TransportError::Call(e),
                    };
                    conn.fail_call(xid, error);
                    return Ok(());
                }
            }
        }
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
    /// chunks avoid. Returns false if no such Call is outstanding.
    pub fn abort(&self, xid: u32) -> bool {
        let xid = Xid(xid);
        let (aborted, work) = self.conn.step(|core| core.abort_call(xid));
        self.conn.execute(work, None);
        aborted
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

/// The completion task of one client connection.
async fn completions<Q: QueuePair + 'static>(conn: Arc<Conn<Q>>) {
    while let Some(c) = conn.qp.completion().await {
        if c.wr_id & wr_kind::MASK == wr_kind::SEND {
            conn.sends.complete(c.wr_id);
        }
        if c.status == WcStatus::Flushed {
            conn.stats.inc(Counter::Flushed);
            continue;
        }
        if c.status != WcStatus::Success {
            // §5.5.5: transport errors end the connection; the RPC layer retransmits.
            conn.stats.inc(Counter::ErrCompletion);
            tracing::debug!(target: "rpcrdma_transport", ?c, "completion error");
            if c.wr_id & wr_kind::MASK == wr_kind::READ {
                // reliable-reply §4.1.2: "After RDMA Read operations have completed
                // (successfully or in error), the requester MUST inform the responder
                // that it may invalidate the Read chunk".
                let pull = conn.lock().pulls.remove(&(c.wr_id & !wr_kind::MASK));
                if let Some(p) = pull {
                    let work = conn.step_received(|core| core.handle_read_failed(p.xid));
                    conn.execute(work.1, None);
                }
            }
            conn.close("a work request completed in error");
            continue;
        }
        match (c.opcode, c.wr_id & wr_kind::MASK) {
            (WcOpcode::RdmaRead, wr_kind::READ) => handle_pull_read(&conn, &c),
            (WcOpcode::LocalInvalidate, wr_kind::INVALIDATE) => {
                conn.local_invalidate_done(Xid((c.wr_id & !wr_kind::MASK) as u32))
            }
            (WcOpcode::Recv, wr_kind::RECV) => {
                let index = (c.wr_id & !wr_kind::MASK) as usize;
                let buf = conn.pool.take(index, c.byte_len);
                // The message is copied out: its buffer goes back at once.
                if conn.pool.post(&conn.qp, index).is_err() {
                    conn.close("posting a Receive failed");
                }
                let Some(buf) = buf else { continue };
                conn.stats.inc(Counter::Recvs);
                conn.stats.add(Counter::RecvBytes, buf.len() as u64);
                let work = conn.step_received(|core| core.handle_receive(buf));
                conn.execute(work.1, c.invalidated);
            }
            _ => {}
        }
    }
    // The connection is gone, which fences every region still registered (§5.4.1:
    // no peer reaches them through a dead queue pair): deregister them, wake every
    // Call waiting for a credit, and let oncrpc reconnect and retransmit.
    let next = {
        let mut st = conn.lock();
        st.closed = true;
        st.core.handle_disconnect();
        let _ = drain(&mut st.core);
        st.pulls.clear();
        let pending = st.regions.values().map(|r| r.regions.len()).sum::<usize>()
            + st.fencing.values().map(Fencing::unfenced).sum::<usize>();
        conn.stats.add(Counter::FencedByDisconnect, pending as u64);
        st.regions.clear();
        st.fencing.clear();
        st.fenced.clear();
        st.core.next_connection()
    };
    // v2 §5.2: what this server speaks, for the next connection (no probing loop).
    *conn.negotiation.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
    conn.credit_wait.notify_waiters();
    conn.end_replies();
    crate::driver::record_close_reason(&conn.qp, &conn.stats).await;
    conn.stats.close();
}

/// One RDMA Read of a pull completed; the last one hands the Reply to the core.
fn handle_pull_read<Q: QueuePair + 'static>(conn: &Arc<Conn<Q>>, c: &Completion) {
    let id = c.wr_id & !wr_kind::MASK;
    let done = {
        let mut st = conn.lock();
        let Some(p) = st.pulls.get_mut(&id) else {
            return;
        };
        p.sink.outstanding = p.sink.outstanding.saturating_sub(1);
        if p.sink.outstanding > 0 {
            return;
        }
        st.pulls.remove(&id)
    };
    let Some(p) = done else { return };
    conn.pulled(p.xid, p.sink.into_bytes());
}
