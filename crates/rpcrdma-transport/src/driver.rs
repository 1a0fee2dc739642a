//! One connection's driver, the same for both roles: a single task that owns the queue
//! pair and the resources that executing the protocol core's work needs (Receive and
//! Send buffers, RDMA Read sinks, chunk regions, RDMA Writes waiting for their Send),
//! feeds the core what happens (completions, the upper layer's requests, its timer,
//! memory released) and executes what it asks for. The core is either role's
//! (`Requester` or `Responder`), seen through `rpcrdma::Endpoint`: every action is
//! executed, and its outcome reported, by the one [`Link`]. What differs between the
//! roles is the upper layer, a [`Role`]: the client's (`client::ClientRole`: Calls
//! from `oncrpc`, Replies to it) and the server's (`server::ServerRole`: Calls to an
//! `oncrpc::Dispatcher`, backward Calls from services).
//!
//! ```text
//!            ┌──────────────── Driver (one task per connection) ────────────────┐
//!  upper  ──►│ inputs ─► Role::input ─► core ─► drive ─► Link::execute ──────────┼─► QP
//!  layer  ◄──│ Role::event (Replies, Calls)  ◄─ core events                      │
//!            │ completions ─► Link::complete ─► core.handle_* (Endpoint)        ◄┼── QP
//!            │ timer (core's deadline) · memory released · watchdog · dump       │
//!            └───────────────────────────────────────────────────────────────────┘
//! ```
//!
//! The driver also keeps a connection from being silently stuck (issue 31): a
//! [`Watchdog`] judges progress while work is outstanding, and once disconnected the
//! connection waits at most [`TEARDOWN_GRACE`] for the provider to flush its work
//! requests.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use oncrpc::service::poll_once;
use rdma::{
    BufferPool, Completion, PooledBuffer, ProtectionDomain, QueuePair, QueuePairExt, RegisterError,
    RemoteAddr, STag, SendOp, SendWr, WcOpcode, WcStatus,
};
use rpcrdma::liveness::{Verdict, Waiting, Watchdog};
use rpcrdma::marshal::{RdmaWrite, Registration};
use rpcrdma::memory::{Charge, MemoryBudget};
use rpcrdma::{Action, Endpoint, Segment, Xid};
use tokio::sync::{mpsc, watch};

use crate::counters::{lock, ConnStats, Counter, CounterSink, Throttled};
use crate::pool::{gather, wr_kind, RecvPool, SendFailure, SendPool};
use crate::registration::{ChunkRegion, ReadSink, Room};

/// How long a connection waits, once disconnected (by the peer or by us), for the
/// provider to flush the work requests it still has posted before it is torn down
/// without them. A provider flushes at once (verbs: the QP goes to the error state;
/// lab runs flush in milliseconds); one that never does (a QP left in RESET) must not
/// keep the connection's task, buffers, regions and memory charge forever (issue 31).
/// Dropping the queue pair then destroys it, after which no work request touches
/// memory.
pub(crate) const TEARDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Most completions one turn of a connection's loop takes beyond the one it woke for.
const COMPLETIONS_PER_TURN: usize = 16;

/// What one role adds to the [`Driver`]: its upper layer, around the protocol core
/// ([`Role::Core`], `Requester` or `Responder`), whose actions the [`Link`] executes
/// the same way for both.
pub(crate) trait Role<Q: QueuePair + 'static>: Send + Sized + 'static {
    /// What the upper layer sends the connection's task.
    type Input: Send + 'static;
    /// The protocol core.
    type Core: Endpoint + Send + 'static;

    /// An event of the core for the upper layer.
    fn event(
        &mut self,
        core: &mut Self::Core,
        link: &mut Link<Q>,
        event: <Self::Core as Endpoint>::Event,
    );

    /// A request of the upper layer.
    fn input(&mut self, core: &mut Self::Core, link: &mut Link<Q>, input: Self::Input);

    /// Work at the end of a turn that may take a first poll of a future (the
    /// server's Calls).
    fn after_turn(
        &mut self,
        _core: &mut Self::Core,
        _link: &mut Link<Q>,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A message came in or the core's timer fired: demand may have changed (the
    /// server's credit grant grows with it).
    fn demand_changed(&mut self, _core: &mut Self::Core, _link: &mut Link<Q>) {}

    /// The device refused to register the memory of Call `xid` (the core knows).
    fn registration_failed(&mut self, _link: &mut Link<Q>, _xid: Xid, _e: RegisterError) {}

    /// What the connection's Calls wait for in the core and the upper layer (the
    /// watchdog and the state dump; [`Link::waiting`] adds the rest).
    fn waiting(&self, core: &Self::Core) -> Waiting {
        core.waiting(Instant::now())
    }

    /// The connection ended, and the core knows it: fail or fence what is left.
    fn ended(&mut self, core: &mut Self::Core, link: &mut Link<Q>);
}

/// Executes everything the core asks for: Receives back first (§4.3.1: "a credit
/// increase is effected (i.e. RDMA Receives are posted) before the next reply is
/// sent"), then its actions in order, then its events for the upper layer. `remote`
/// is the STag the peer invalidated with the Send With Invalidate just received.
pub(crate) fn drive<Q: QueuePair + 'static, R: Role<Q>>(
    core: &mut R::Core,
    role: &mut R,
    link: &mut Link<Q>,
    remote: Option<STag>,
) {
    loop {
        link.post_recvs(core.poll_reposts());
        if let Some(a) = core.poll_action() {
            if let Err((xid, e)) = link.execute(core, a, remote) {
                role.registration_failed(link, xid, e);
            }
            continue;
        }
        let Some(ev) = core.poll_event() else {
            break;
        };
        role.event(core, link, ev);
    }
    link.flush_writes();
}

/// Why the transport closed a connection (logged, and kept in its counters' close
/// reason).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CloseReason {
    /// The server is shutting down.
    #[error("server shutdown")]
    Shutdown,
    /// The provider refused a work request.
    #[error("posting {0} failed: {1}")]
    Post(&'static str, rdma::PostError),
    /// The device refused to register memory a work request needed.
    #[error("registering {0} failed: {1}")]
    Register(&'static str, RegisterError),
    /// A work request completed in error (§5.5.3: "RDMA operational errors are
    /// typically fatal to the connection").
    #[error("{:?} completed with {:?}", .0.opcode, .0.status)]
    Completion(Completion),
    /// The protocol core asked for it (§5.5.4: no Reply or error could be sent).
    #[error("protocol error: no reply possible")]
    Core,
    /// The provider reported a Receive we cannot read (unknown buffer, bad length).
    #[error("Receive {:#x} of {} bytes is unreadable", .0.wr_id, .0.byte_len)]
    BadReceive(Completion),
    /// A Call's RDMA Reads did not complete within `RdmaConfig::read_timeout`.
    #[error("RDMA Reads of a Call not complete within {0:?}")]
    ReadTimeout(std::time::Duration),
    /// Work requests we posted made no progress for `RdmaConfig::stall_timeout`
    /// (`liveness`).
    #[error("no progress for {0:?} with work requests posted ({1})")]
    Stalled(std::time::Duration, String),
    /// The upper layer no longer takes what the connection delivers.
    #[error("the upper layer went away")]
    UpperLayerGone,
}

/// Connections closed because the device refused to register memory, process-wide:
/// such a failure usually repeats, the peer reconnecting and retransmitting into it
/// (a lab experiment's READs looped 38,000 times in 14 minutes, docs/bench/README.md),
/// which must not go unseen at the default log level ([`Throttled`]).
static REGISTRATION_CLOSES: std::sync::Mutex<Throttled> = std::sync::Mutex::new(Throttled::NEW);

/// Growing a connection's buffers with demand (issue 16): the memory budget they are
/// charged to first, and this connection's charge.
pub(crate) struct Growth {
    pub(crate) budget: Arc<MemoryBudget>,
    /// Room a connection's buffers never take ([`MemoryBudget::try_charge_now`]).
    pub(crate) keep_free: u64,
    /// This connection's buffers' charge, released when the connection ends.
    pub(crate) charge: Charge,
}

/// One Read chunk being pulled into its sink.
struct Pull {
    /// When its Reads were posted (for the live state's oldest Read).
    started: Instant,
    xid: Xid,
    chunk: usize,
    sink: ReadSink,
}

/// The provider side of one connection, the same for both roles: the queue pair, its
/// buffers and the work requests in flight. No protocol state lives here.
pub(crate) struct Link<Q> {
    pub(crate) qp: Arc<Q>,
    pub(crate) pd: ProtectionDomain,
    /// Where Read sinks and chunk regions come from.
    pub(crate) buffers: BufferPool,
    pub(crate) stats: Arc<ConnStats>,
    pub(crate) recvs: RecvPool,
    pub(crate) sends: SendPool,
    /// Sends posted whose completion has not come yet.
    sends_in_flight: usize,
    /// RDMA Writes of the Reply being sent, posted in one list with its Send (one
    /// doorbell; on a verbs device the Writes go unsignaled), or before any other work
    /// request, in the order the core asked for them.
    writes: Vec<SendWr>,
    /// Read chunks being pulled, by the id their RDMA Reads carry.
    pulls: HashMap<u64, Pull>,
    /// Our chunk regions a peer can reach, by STag (the handle the core names them
    /// by), with the Call each was registered for, until they are fenced.
    exposed: HashMap<u32, (Xid, ChunkRegion)>,
    /// Regions whose LOCAL_INV is posted, by STag, until it completes.
    fencing: HashMap<u32, (Xid, ChunkRegion)>,
    /// The buffers of fenced regions whose bytes a Reply is built from
    /// (`Endpoint::wants_placed`), by STag, with where each chunk starts in its
    /// buffer, until the role takes them.
    pub(crate) placed: HashMap<u32, (PooledBuffer, usize)>,
    /// Room around the data of Write chunks and Read sinks.
    room: Room,
    next_pull: u64,
    /// Buffers that grow with demand (the server's); `None`: fixed (the client's).
    pub(crate) growth: Option<Growth>,
    /// Things that moved a Call along, for the [`Watchdog`] (`rpcrdma::liveness`).
    progress: u64,
    closing: Option<CloseReason>,
    /// Once disconnected: when to stop waiting for the provider's flushes.
    teardown_by: Option<Instant>,
}

impl<Q: QueuePair + 'static> Link<Q> {
    /// A connection's provider side: `buffers` are shared with the other connections,
    /// the rest is its own. `room`: around the data placed in Write chunks and Read
    /// sinks. `growth`: the server's buffers grow with demand.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        qp: Arc<Q>,
        pd: ProtectionDomain,
        buffers: BufferPool,
        stats: Arc<ConnStats>,
        recvs: RecvPool,
        sends: SendPool,
        room: Room,
        growth: Option<Growth>,
    ) -> Link<Q> {
        Link {
            qp,
            pd,
            buffers,
            stats,
            recvs,
            sends,
            sends_in_flight: 0,
            writes: Vec::new(),
            pulls: HashMap::new(),
            exposed: HashMap::new(),
            fencing: HashMap::new(),
            placed: HashMap::new(),
            room,
            next_pull: 0,
            growth,
            progress: 0,
            closing: None,
            teardown_by: None,
        }
    }

    /// Something moved a Call along (`rpcrdma::liveness`).
    pub(crate) fn progress(&mut self) {
        self.progress = self.progress.wrapping_add(1);
    }

    /// Whether the connection is closing (by us).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_some()
    }

    /// Disconnects, once, saying why.
    pub(crate) fn close(&mut self, why: CloseReason) {
        if self.closing.is_some() {
            return;
        }
        tracing::debug!(target: "rpcrdma_transport", conn = self.stats.id, reason = %why, "closing connection");
        let throttled = match why {
            CloseReason::Register(..) => lock(&REGISTRATION_CLOSES).count(Instant::now()),
            _ => None,
        };
        if let Some((since, total, note)) = throttled {
            tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, peer = ?self.stats.peer, "closing an RDMA connection: {why}{note}: {since} since the last warning, {total} in all");
        }
        if !matches!(why, CloseReason::Post(..)) {
            self.stats.inc(Counter::ClosedByUs);
        }
        self.closing = Some(why);
        self.teardown_by
            .get_or_insert(Instant::now() + TEARDOWN_GRACE);
        self.qp.disconnect();
    }

    /// Executes one of the core's actions and reports its outcome to `core`.
    /// `remote` is the STag the peer invalidated with the Send With Invalidate just
    /// received. `Err`: the device refused to register the memory of that Call (the
    /// core knows; the role may report it).
    pub(crate) fn execute<C: Endpoint>(
        &mut self,
        core: &mut C,
        action: Action,
        remote: Option<STag>,
    ) -> Result<(), (Xid, RegisterError)> {
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
            Action::Register { xid, registrations } => {
                return self.register(core, xid, &registrations)
            }
            Action::RdmaRead {
                xid,
                chunk,
                segments,
            } => self.post_reads(core, xid, chunk, &segments),
            Action::Invalidate { handles, .. } => {
                for h in handles {
                    self.fence(core, h, remote);
                }
            }
            Action::PostReceives(n) => {
                self.post_recvs(n);
                core.handle_receives_posted(n);
            }
            // §7.2.2: Receives set apart for backward-direction messages.
            Action::PostBackwardReceives(n) => self.post_recvs(n),
            Action::Close => self.close(CloseReason::Core),
        }
        Ok(())
    }

    /// Registers the regions an [`Action::Register`] asks for, for Call `xid` (a
    /// requester's chunks; a responder's Reply exposed through a Read chunk), exposes
    /// them ([`Link::expose`]) and hands their segments to the core. A Write chunk is
    /// registered out of a buffer with [`Link::room`] around it
    /// (`registration::join_in_place`). COPY: a Read chunk of several pieces into its
    /// registered region; one of a single piece (NFS WRITE data) is registered as it
    /// is (`registration`).
    fn register<C: Endpoint>(
        &mut self,
        core: &mut C,
        xid: Xid,
        registrations: &[Registration],
    ) -> Result<(), (Xid, RegisterError)> {
        let regions: Result<Vec<_>, _> = registrations
            .iter()
            .map(|reg| ChunkRegion::register(&self.pd, &self.buffers, reg, self.room, &self.stats))
            .collect();
        let regions = match regions {
            Ok(r) => r,
            Err(e) => {
                // What was registered goes, never exposed.
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "registration failed");
                core.handle_registration_failed(xid);
                return Err((xid, e));
            }
        };
        let segments = regions
            .into_iter()
            .map(|r| vec![self.expose(xid, r)])
            .collect();
        if let Err(e) = core.handle_registered(Instant::now(), xid, segments) {
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "registered, not sent");
        }
        Ok(())
    }

    /// Posts `n` Receive buffers not posted now. Called once per turn of a role's
    /// drive loop, mostly with none to post: that case makes no call.
    pub(crate) fn post_recvs(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        if let Err(e) = self.recvs.post(&*self.qp, n) {
            self.close(CloseReason::Post("a Receive", e));
        }
    }

    /// Charges `bytes` more to the connection's memory budget, if it grows and the
    /// budget has room.
    pub(crate) fn charge_more(&mut self, bytes: u64) -> bool {
        let Some(g) = &mut self.growth else {
            return false;
        };
        let Some(charge) = g.budget.try_charge_now(bytes, g.keep_free) else {
            return false;
        };
        // Charged before anything is allocated; kept if only part of it was (the
        // charge then covers at least what the pools hold).
        g.charge.absorb(charge);
        self.stats.set(Counter::MemoryCharged, g.charge.bytes());
        true
    }

    /// Doubles the Send buffers (up to the pool's most), charged to the memory budget
    /// first as a larger grant's Receives are; without room in the budget, or if they
    /// cannot be registered, the Send registers its own pieces.
    fn grow_sends(&mut self) {
        let more = self.sends.slots().min(self.sends.room());
        if more == 0 || !self.charge_more((more * self.sends.slot_len()) as u64) {
            return;
        }
        if let Err(e) = self.sends.grow(more) {
            tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, error = %e, slots = self.sends.slots(), "cannot register more send buffers: Sends register their own");
            self.sends.stop_growing();
        }
        self.stats
            .set(Counter::SendBuffers, self.sends.slots() as u64);
    }

    /// Posts a Send of `send` (header, then payload pieces), after the RDMA Writes
    /// waiting for it.
    pub(crate) fn post_send(&mut self, xid: Xid, send: Vec<Bytes>, invalidate: Option<u32>) {
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
            Ok(()) => self.sends_in_flight += 1,
            Err(SendFailure::Post(e)) => self.close(CloseReason::Post("a Send", e)),
            Err(SendFailure::Register(e)) => self.close(CloseReason::Register("a Send", e)),
        }
    }

    /// An RDMA Write of a Reply, posted with the next Send or work request. §3.2.2
    /// (ordering): RDMA Writes posted before the Send are placed before it.
    pub(crate) fn post_write(&mut self, xid: Xid, w: RdmaWrite) {
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

    /// Posts the RDMA Writes no Send took along (other work comes first): the send
    /// queue's order is the order the core asked for.
    pub(crate) fn flush_writes(&mut self) {
        if self.writes.is_empty() {
            return;
        }
        let writes = std::mem::take(&mut self.writes);
        if let Err(e) = self.qp.post_send_list(writes) {
            self.close(CloseReason::Post("an RDMA Write", e));
        }
    }

    /// Exposes `region`, registered for Call `xid`, to the peer until [`Link::fence`]:
    /// its segment.
    pub(crate) fn expose(&mut self, xid: Xid, region: ChunkRegion) -> Segment {
        let segment = region.segment();
        self.exposed.insert(segment.handle, (xid, region));
        segment
    }

    /// Fences our region `handle` (v1 §5.4.1 for a requester's chunks, reliable-reply
    /// §4.2 for a responder's Read chunks): a posted LOCAL_INV, unless the peer
    /// invalidated it with the Send With Invalidate that brought its message
    /// (`remote`), the device cannot invalidate (a verbs `ibv_reg_mr` registration:
    /// deregistering it, which dropping the region does, fences it) or the connection
    /// is gone. A region that cannot be invalidated ends the connection (v1 §5.5.4)
    /// and is deregistered. Once fenced, [`Link::fenced`]: now, or when the LOCAL_INV
    /// completes. A handle no longer exposed (fenced already) is ignored.
    fn fence<C: Endpoint>(&mut self, core: &mut C, handle: u32, remote: Option<STag>) {
        let Some((xid, region)) = self.exposed.remove(&handle) else {
            return;
        };
        if !self.pd.attributes().invalidate {
            self.stats.inc(Counter::FencedByDeregistration);
        } else if remote.is_some_and(|r| r.0 == handle) {
            self.stats.inc(Counter::RemoteInvalidations);
        } else {
            let wr = region.invalidate_wr(wr_kind::INVALIDATE | u64::from(handle));
            match self.qp.post_send(wr) {
                Ok(()) => {
                    // Fenced when it completes.
                    self.fencing.insert(handle, (xid, region));
                    return;
                }
                Err(rdma::PostError::NotConnected) => self.stats.inc(Counter::FencedByDisconnect),
                Err(e) => self.close(CloseReason::Post("a local invalidation", e)),
            }
        }
        self.fenced(core, xid, handle, region);
    }

    /// The connection ended: the regions still exposed or being fenced are fenced by
    /// it (no peer reaches them through a dead queue pair) and deregistered.
    fn forget_regions(&mut self) {
        let left = self.exposed.len() + self.fencing.len();
        self.stats.add(Counter::FencedByDisconnect, left as u64);
        self.exposed.clear();
        self.fencing.clear();
    }

    /// Our region `handle`, exposed for Call `xid`, is fenced ([`Link::fence`]):
    /// deregistered, its buffer kept if the
    /// core builds a Reply from its bytes (§5.4.1: "The requester endpoint must ensure
    /// that memory segments associated with each RPC transaction are properly fenced
    /// from responders before allowing Upper Layer access to the data").
    fn fenced<C: Endpoint>(&mut self, core: &mut C, xid: Xid, handle: u32, region: ChunkRegion) {
        let buffer = region.release();
        if core.wants_placed(xid, handle) {
            if let Some(b) = buffer {
                self.placed.insert(handle, b);
            }
        }
        core.handle_invalidated(xid, handle);
    }

    /// §4.4.5 (a responder's Read chunk), reliable-reply §4.1.2 (a requester's pulled
    /// Reply): one RDMA Read per segment of Read chunk `chunk` of `xid` into one sink
    /// with [`Link::room`] around it. The provider holds Reads beyond the peer's IRD
    /// (our ORD) until earlier ones complete. Reads that cannot start fail, as the
    /// core says: a requester's pull fails alone, a responder closes the connection.
    fn post_reads<C: Endpoint>(
        &mut self,
        core: &mut C,
        xid: Xid,
        chunk: usize,
        segments: &[Segment],
    ) {
        let len: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
        let mut sink = match ReadSink::with_room(&self.pd, &self.buffers, len as usize, self.room) {
            Ok(sink) => sink,
            Err(e) => {
                tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, xid = xid.0, error = %e, "cannot register an RDMA Read sink");
                return core.handle_read_failed(xid);
            }
        };
        self.stats.count_region(&sink.mr);
        let id = self.next_pull;
        self.next_pull = (self.next_pull + 1) & !wr_kind::MASK;
        let mut at = 0usize;
        for seg in segments.iter().filter(|s| s.length > 0) {
            self.stats.inc(Counter::RdmaReads);
            self.stats
                .add(Counter::RdmaReadBytes, u64::from(seg.length));
            if let Err(e) = self.qp.post_send(sink.read_wr(wr_kind::READ | id, seg, at)) {
                // Reads already posted complete into a sink nobody waits for.
                tracing::warn!(target: "rpcrdma_transport", conn = self.stats.id, xid = xid.0, error = %e, "cannot post an RDMA Read");
                return core.handle_read_failed(xid);
            }
            sink.outstanding += 1;
            at += seg.length as usize;
        }
        if sink.outstanding == 0 {
            return Self::read_done(core, xid, chunk, sink);
        }
        let started = Instant::now();
        core.handle_reads_posted(xid, chunk, started);
        let pull = Pull {
            started,
            xid,
            chunk,
            sink,
        };
        self.pulls.insert(id, pull);
    }

    /// Every RDMA Read of Read chunk `chunk` of `xid` completed into `sink`.
    fn read_done<C: Endpoint>(core: &mut C, xid: Xid, chunk: usize, sink: ReadSink) {
        match sink.into_bytes() {
            Ok(data) => core.handle_read_done(xid, chunk, data),
            Err(e) => {
                tracing::warn!(target: "rpcrdma_transport", xid = xid.0, error = %e, "RDMA Read sink unusable");
                core.handle_read_failed(xid);
            }
        }
    }

    /// What the connection waits for: `of_core`, the core's and the role's part
    /// ([`Role::waiting`]), with the work requests and buffers that are the link's.
    pub(crate) fn waiting(&self, of_core: Waiting) -> Waiting {
        let outstanding = self.pulls.values().map(|p| p.sink.outstanding).sum();
        let starts = self.pulls.values().map(|p| p.started);
        Waiting {
            recvs_posted: self.recvs.posted(),
            reads: outstanding,
            oldest_read: rpcrdma::liveness::oldest(Instant::now(), starts),
            sends: self.sends_in_flight,
            invalidations: self.fencing.len(),
            charged: self.growth.as_ref().map_or(0, |g| g.charge.bytes()),
            ..of_core
        }
    }

    /// A completion, its outcome reported to `core`. `Some` when a message came in,
    /// with the STag the peer invalidated by sending it With Invalidate.
    fn complete<C: Endpoint>(&mut self, core: &mut C, c: Completion) -> Option<Option<STag>> {
        self.progress();
        let kind = c.wr_id & wr_kind::MASK;
        let id = c.wr_id & !wr_kind::MASK;
        if kind == wr_kind::SEND {
            self.sends.complete(c.wr_id);
            self.sends_in_flight = self.sends_in_flight.saturating_sub(1);
        }
        match c.status {
            WcStatus::Success => {}
            WcStatus::Flushed => {
                self.stats.inc(Counter::Flushed);
                if kind == wr_kind::INVALIDATE && self.fencing.remove(&(id as u32)).is_some() {
                    // Not run, but the connection's end fenced the region.
                    self.stats.inc(Counter::FencedByDisconnect);
                }
                return None;
            }
            _ => {
                self.stats.inc(Counter::ErrCompletion);
                tracing::debug!(target: "rpcrdma_transport", conn = self.stats.id, ?c, "completion error");
                if kind == wr_kind::READ {
                    if let Some(p) = self.pulls.remove(&id) {
                        core.handle_read_failed(p.xid);
                    }
                }
                self.close(CloseReason::Completion(c));
                return None;
            }
        }
        match (c.opcode, kind) {
            (WcOpcode::Recv, wr_kind::RECV) => {
                let Some(buf) = self.recvs.take(id as usize, c.byte_len) else {
                    self.close(CloseReason::BadReceive(c));
                    return None;
                };
                self.stats.inc(Counter::Recvs);
                self.stats.add(Counter::RecvBytes, buf.len() as u64);
                core.handle_receive(buf);
                Some(c.invalidated)
            }
            (WcOpcode::LocalInvalidate, wr_kind::INVALIDATE) => {
                self.stats.inc(Counter::LocalInvalidations);
                if let Some((xid, region)) = self.fencing.remove(&(id as u32)) {
                    self.fenced(core, xid, id as u32, region);
                }
                None
            }
            (WcOpcode::RdmaRead, wr_kind::READ) => {
                let done = self.pulls.get_mut(&id).is_some_and(|p| {
                    p.sink.outstanding = p.sink.outstanding.saturating_sub(1);
                    p.sink.outstanding == 0
                });
                if done {
                    if let Some(p) = self.pulls.remove(&id) {
                        Self::read_done(core, p.xid, p.chunk, p.sink);
                    }
                }
                None
            }
            _ => None,
        }
    }
}

/// One connection's task: the [`Link`], the [`Role`] and what wakes them.
pub(crate) struct Driver<Q, R: Role<Q>>
where
    Q: QueuePair + 'static,
{
    link: Link<Q>,
    core: R::Core,
    role: R,
    /// Judges whether a busy connection makes progress (`rpcrdma::liveness`).
    watchdog: Option<Watchdog>,
    inputs: mpsc::UnboundedReceiver<R::Input>,
    /// The server's shutdown; `None` for a client.
    stop: Option<watch::Receiver<bool>>,
    /// Requests for this connection's live state ([`crate::StatsRegistry::live_states`]).
    dump_requests: watch::Receiver<u64>,
}

impl<Q: QueuePair + 'static, R: Role<Q>> Driver<Q, R> {
    /// `stall_timeout`: `RdmaConfig::stall_timeout`, zero for no watchdog.
    pub(crate) fn new(
        link: Link<Q>,
        core: R::Core,
        role: R,
        inputs: mpsc::UnboundedReceiver<R::Input>,
        stop: Option<watch::Receiver<bool>>,
        dump_requests: watch::Receiver<u64>,
        stall_timeout: std::time::Duration,
    ) -> Self {
        Driver {
            link,
            core,
            role,
            watchdog: Watchdog::new(stall_timeout),
            inputs,
            stop,
            dump_requests,
        }
    }

    /// Runs the connection until it is gone and its work requests are flushed (or
    /// [`TEARDOWN_GRACE`] passed).
    pub(crate) async fn run(mut self) {
        let qp = self.link.qp.clone();
        // One future for the connection's life, not one per turn of the loop (a
        // watch's `changed()` future costs a registration and its removal each). A
        // server dropped without shutting down leaves its connections open.
        let stop = self.stop.take();
        let stop = async move {
            if let Some(mut s) = stop {
                if s.wait_for(|stop| *stop).await.is_ok() {
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        tokio::pin!(stop);
        // The watchdog's tick, and requests for a state dump: one future each for the
        // connection's life, renewed only when they fire.
        let period = self.watchdog.as_ref().map(Watchdog::period);
        let tick = tokio::time::sleep(period.unwrap_or(std::time::Duration::MAX / 4));
        tokio::pin!(tick);
        let dump = next_change(self.dump_requests.clone());
        tokio::pin!(dump);
        let mut inputs_open = true;
        // The provider's disconnect event, taken as it comes so that the teardown's
        // grace period starts then.
        let mut disconnected: Option<rdma::DisconnectReason> = None;
        let mut events_done = false;
        // What the core asked for before the connection's first event (the client's
        // backward Receives, §7.2.2.1).
        self.drive(None);
        loop {
            let teardown = sleep_until(self.link.teardown_by);
            // The core's one timer, armed for its deadline.
            let timer = sleep_until(self.core.poll_timeout());
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
            let mut received = None;
            let mut completed = false;
            // Branches in order, the first ready one taken: completions, then the upper
            // layer, then what is rarely ready. Polling every branch on every turn (an
            // unbiased select starts at a random one) costs the idle ones' polls each
            // time: 1,300 of 26,800 instructions per GETATTR over RDMA. No branch is
            // starved: completions are of work requests we posted (Receives re-posted
            // only as Calls are answered, Sends and Reads of answers), so they run out
            // unless the upper layer is heard.
            tokio::select! {
                biased;
                c = qp.completion() => match c {
                    None => break,
                    Some(c) => {
                        received = self.link.complete(&mut self.core, c);
                        completed = true;
                    }
                },
                input = self.inputs.recv(), if inputs_open => match input {
                    Some(input) => self.role.input(&mut self.core, &mut self.link, input),
                    None => inputs_open = false,
                },
                _ = &mut stop, if self.link.closing.is_none() => self.link.close(CloseReason::Shutdown),
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
                        self.link.teardown_by.get_or_insert(Instant::now() + TEARDOWN_GRACE);
                    }
                    None => events_done = true,
                },
                () = teardown => {
                    let waiting = self.link.waiting(self.role.waiting(&self.core));
                    self.link.stats.inc(Counter::TeardownsUnflushed);
                    tracing::warn!(
                        target: "rpcrdma_transport",
                        conn = self.link.stats.id,
                        peer = ?self.link.stats.peer,
                        "the provider did not flush this connection's work requests within {TEARDOWN_GRACE:?} of its disconnect ({waiting}): torn down without them",
                    );
                    break;
                }
                _ = timer => {
                    self.core.handle_timeout(Instant::now());
                    self.role.demand_changed(&mut self.core, &mut self.link);
                }
                _ = released, if self.link.closing.is_none() => self.core.handle_memory_released(),
            }
            self.turn(received).await;
            // Completions already waiting are taken in this same turn (a Reply's Send
            // may complete as it is posted, a siw QP's does): one turn of the loop per
            // Call, not one per completion, up to a bound that keeps the other
            // branches served.
            if completed && self.take_waiting_completions().await.is_break() {
                break;
            }
        }
        self.core.handle_disconnect();
        self.role.ended(&mut self.core, &mut self.link);
        self.link.forget_regions();
        // Why it closed: a failed post is the consequence of a connection the provider
        // already lost, whose reason (a Terminate from the peer, say, if it has one
        // ready) is the cause; any other reason of ours is the cause itself.
        let ready = std::future::poll_fn(|cx| match qp.poll_event(cx) {
            Poll::Ready(Some(rdma::QpEvent::Disconnected(why))) => Poll::Ready(Some(why)),
            _ => Poll::Ready(None),
        });
        let disconnected = match disconnected {
            Some(why) => Some(why),
            None => ready.await,
        };
        let reason = match (&self.link.closing, disconnected) {
            (Some(CloseReason::Post(..)) | None, Some(why)) => Some(format!("{why:?}")),
            (why, _) => why.as_ref().map(ToString::to_string),
        };
        if let Some(reason) = reason {
            self.link.stats.set_close_reason(reason);
        }
        self.link.stats.close();
    }

    /// The end of a turn: what the core asks for now, and the role's work after it.
    /// `received`: a message came in, with the STag the peer invalidated.
    async fn turn(&mut self, received: Option<Option<STag>>) {
        if received.is_some() {
            self.role.demand_changed(&mut self.core, &mut self.link);
        }
        self.drive(received.flatten());
        self.role.after_turn(&mut self.core, &mut self.link).await;
    }

    /// [`drive`] for this connection.
    fn drive(&mut self, remote: Option<STag>) {
        drive(&mut self.core, &mut self.role, &mut self.link, remote);
    }

    /// Handles the completions the QP has ready now, at most
    /// [`COMPLETIONS_PER_TURN`], each driven to its end; `Break` when the QP has no
    /// more to give (the connection is gone).
    async fn take_waiting_completions(&mut self) -> std::ops::ControlFlow<()> {
        let qp = self.link.qp.clone();
        for _ in 0..COMPLETIONS_PER_TURN {
            match poll_once(std::pin::pin!(qp.completion())).await {
                Poll::Pending => break,
                Poll::Ready(None) => return std::ops::ControlFlow::Break(()),
                Poll::Ready(Some(c)) => {
                    let received = self.link.complete(&mut self.core, c);
                    self.turn(received).await;
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    /// The watchdog's tick: a busy connection without progress is logged once, and
    /// closed when it is stuck on its own work requests (issue 31).
    fn check_liveness(&mut self) {
        let waiting = self.link.waiting(self.role.waiting(&self.core));
        let link = &mut self.link;
        let Some(w) = &mut self.watchdog else {
            return;
        };
        match w.tick(link.progress, &waiting) {
            Verdict::Fine => {}
            Verdict::Warn(quiet) => {
                link.stats.inc(Counter::Stalls);
                let action = if waiting.on_work_requests() {
                    "closed if none comes within the stall timeout"
                } else {
                    "not closed: a new connection would wait the same"
                };
                tracing::warn!(
                    target: "rpcrdma_transport",
                    conn = link.stats.id,
                    peer = ?link.stats.peer,
                    "connection made no progress for {quiet:?} while busy ({waiting}); {action}",
                );
            }
            Verdict::Close(quiet) => {
                link.stats.inc(Counter::StallCloses);
                tracing::warn!(
                    target: "rpcrdma_transport",
                    conn = link.stats.id,
                    peer = ?link.stats.peer,
                    "closing a connection stuck for {quiet:?} on work requests it posted ({waiting}); the peer reconnects and retransmits",
                );
                link.close(CloseReason::Stalled(quiet, waiting.to_string()));
            }
        }
    }

    /// Answers a state dump request ([`crate::StatsRegistry::live_states`]).
    fn set_live_state(&self) {
        let quiet = self
            .watchdog
            .as_ref()
            .map(|w| format!(" no_progress_for>={:?}", w.quiet_for()))
            .unwrap_or_default();
        let closing = match &self.link.closing {
            Some(why) => format!(" closing ({why})"),
            None => String::new(),
        };
        self.link.stats.set_live_state(format!(
            "{}{quiet}{closing}",
            self.link.waiting(self.role.waiting(&self.core))
        ));
    }
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
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
