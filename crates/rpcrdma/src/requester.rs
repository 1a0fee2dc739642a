//! The requester's per-connection state machine (forward direction; an NFS client).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3 (credits), §4.5, §5.3, §5.4.1
//! (fencing), §5.5, §8.2; rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5. Linux:
//! `rpc_rdma.c` (`rpcrdma_marshal_req`, `rpcrdma_reply_handler`).
//!
//! # Driving it
//! ```text
//! upper layer ──start_call(xid, stream)──► Requester: credit, version, plan_call
//!                 driver ◄──poll_action: Register──┘
//!                 driver ──handle_registered(xid, segments)──► finish: header
//!                 driver ◄──poll_action: Send──────┘
//!     Receive ──handle_receive──► check Reply against the Call, credits, version
//!                 driver ◄──poll_action: Invalidate (fence) then
//! upper layer ◄──poll_event: Reply { reduced stream, Write chunk lengths }
//!                 driver ──assemble_reply(reply, placed chunks)──► the RPC Reply
//! ```
//! With reliable reply agreed (`requester/reliable.rs`), Calls carry no Reply chunk and
//! an RDMA_NOMSG with a Position Zero Read chunk makes `poll_action` return an
//! `RdmaRead`; `handle_read_done` then sends RDMA_DONE and delivers the Reply. Across
//! reconnects, keep `next_connection()` per server and pass it to `resume`.
//!
//! After each call, drain `poll_action` then `poll_event`. A Call that fails (RDMA_ERROR,
//! a bad Reply) completes with [`RequesterEvent::Failed`]; its registrations are still
//! invalidated first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use xdr::XdrStream;

use crate::action::{Action, Endpoint};
use crate::chunks::{ChunkLists, Segment};
use crate::credits::{RequesterCredits, ResponderCredits};
use crate::error::{Error, HeaderError, MarshalError, ReplyError};
use crate::header::{ErrorBody, Prefix};
use crate::liveness::Waiting;
use crate::marshal::{
    marshal_backward, plan_call, plan_call_without_reply_chunk, CallLimits, CallPlan, Shape,
};
use crate::memory::MemoryBudget;
use crate::options::{ReliableReplyInfo, RELIABLE_REPLY};
use crate::private_data::PeerLimits;
use crate::reassembly::{reply_chunk_length, written_lengths};
use crate::rpc;
use crate::stats::{Counter, CounterSink, NoCounters};
use crate::ulb::{ReplySizing, UpperLayerBinding};
use crate::validate::{receive, Policy, Received};
use crate::version::{default_inline_threshold, Negotiation, NegotiationOutcome};
use crate::wire::{Version, Xid};

/// Configuration of a requester connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequesterConfig {
    /// Versions, limits, options.
    pub policy: Policy,
    /// Credits to ask for (Linux asks for 128).
    pub credits: u32,
    /// Open with Version Two (probe) or Version One.
    pub prefer: Version,
    /// Thresholds from RFC 8797 private data, if the peer sent any.
    pub peer: Option<PeerLimits>,
    /// Most segments one registration may produce.
    pub max_segments_per_registration: u32,
    /// Backward-direction Calls we accept at once (§7.2.2.1: Receives posted for
    /// them); the grant in our backward Replies. `None`: no backward channel, and
    /// backward Calls are dropped (§7.3.1).
    pub backward_credits: Option<u32>,
    /// Version Two responder-provided Read chunks (reliable reply): what we advertise
    /// once Version Two is settled. `None`: never advertised; Replies that come in a
    /// Read chunk fail.
    pub reliable_reply: Option<ReliableReplyInfo>,
    /// DoS bound: the largest Reply we RDMA Read from a responder-provided Read chunk
    /// (the responder chooses its length). Larger ones fail the Call, after RDMA_DONE.
    pub max_pulled_reply: u64,
    /// Fault injection for tests: never send RDMA_DONE after pulling a Reply, so that
    /// the responder's pull timeout is exercised. Never set it in production.
    #[doc(hidden)]
    pub fault_skip_rdma_done: bool,
    /// Invalidation is posted work (verbs LOCAL_INV) that completes later: the Reply
    /// (or failure) of a Call with registered chunks is held until the driver reports
    /// [`Requester::handle_invalidated`] for it (§5.4.1: memory is "fenced from
    /// responders before allowing Upper Layer access to the data"). Off: the driver
    /// fences each [`Action::Invalidate`] before it looks at the events that follow
    /// (a software provider invalidates at once).
    pub posted_invalidation: bool,
}

impl Default for RequesterConfig {
    fn default() -> Self {
        RequesterConfig {
            policy: Policy::default(),
            credits: 128,
            prefer: Version::ONE,
            peer: None,
            max_segments_per_registration: 1,
            backward_credits: None,
            reliable_reply: None,
            max_pulled_reply: 64 << 20,
            fault_skip_rdma_done: false,
            posted_invalidation: false,
        }
    }
}

/// What the requester tells its upper layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequesterEvent {
    /// The Reply to `xid` arrived. The Payload stream is `inline` (RDMA_MSG, or pulled
    /// from a responder-provided Read chunk) or the first `reply_chunk_len` bytes of our
    /// Reply chunk buffer (RDMA_NOMSG with our Reply chunk); the data of DDP-eligible
    /// results is in our Write chunk buffers, `write_lengths` bytes each.
    /// [`Requester::assemble_reply`] puts the RPC Reply together from them.
    Reply {
        /// The XID.
        xid: Xid,
        /// Reduced Payload stream: inline, or the bytes pulled from the responder's
        /// Read chunk (draft-cel-nfsv4-rpcrdma-reliable-reply-05); empty when it is in
        /// our Reply chunk.
        inline: Bytes,
        /// Bytes the responder wrote into our Reply chunk, if it used it.
        reply_chunk_len: Option<u64>,
        /// Bytes the responder wrote into each Write chunk.
        write_lengths: Vec<u64>,
        /// The Call's procedure (`None` if its header did not say), for
        /// [`Requester::assemble_reply`].
        proc_id: Option<rpc::ProcId>,
        /// Our regions the Reply's bytes were placed in, by handle: a driver that
        /// registers one region per chunk finds each chunk's bytes by it.
        placed: PlacedHandles,
    },
    /// The Call `xid` failed.
    Failed {
        /// The XID.
        xid: Xid,
        /// Why.
        error: Error,
    },
    /// A backward-direction Call from the responder (§7), payload inline.
    BackwardCall {
        /// The XID (its own XID space, §7.1.4).
        xid: Xid,
        /// The RPC Call.
        payload: Bytes,
    },
}

/// The handles of a Call's Reply chunk and Write chunks (each chunk's first segment):
/// where the responder placed a Reply's bytes ([`RequesterEvent::Reply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacedHandles {
    /// The Reply chunk's, if the Call offered one.
    pub reply: Option<u32>,
    /// Each Write chunk's, in Write list order (`None` for a chunk of no segment).
    pub writes: Vec<Option<u32>>,
}

impl PlacedHandles {
    pub(crate) fn of(chunks: &ChunkLists) -> PlacedHandles {
        let first = |segments: &[Segment]| segments.first().map(|s| s.handle);
        PlacedHandles {
            reply: chunks.reply.as_ref().and_then(|c| first(&c.segments)),
            writes: chunks.writes.iter().map(|c| first(&c.segments)).collect(),
        }
    }

    /// Whether `handle` is one of them.
    pub fn contains(&self, handle: u32) -> bool {
        self.reply == Some(handle) || self.writes.contains(&Some(handle))
    }
}

/// A Call whose regions are being fenced (posted invalidation), with the event that
/// is handed up once they all are.
#[derive(Debug)]
struct Fencing {
    event: RequesterEvent,
    /// Its handles not fenced yet.
    unfenced: Vec<u32>,
}

#[derive(Debug)]
struct OutstandingCall {
    version: Version,
    stream: XdrStream,
    plan: Option<CallPlan>,
    chunks: ChunkLists,
    /// The upper layer gave up on it ([`Requester::abort_call`]): its registrations
    /// are fenced, and its Reply, when it comes, only returns the credit.
    aborted: bool,
}

/// One requester connection.
pub struct Requester<B> {
    ulb: B,
    config: RequesterConfig,
    credits: RequesterCredits,
    /// Backward direction: the server's Calls to us, credited separately (§7.2.1).
    backward: Option<ResponderCredits>,
    backward_calls: HashMap<Xid, Version>,
    negotiation: Negotiation,
    calls: HashMap<Xid, OutstandingCall>,
    actions: VecDeque<Action>,
    events: VecDeque<RequesterEvent>,
    /// Where the reliable-reply exchange stands.
    reliable: ReliableState,
    /// Replies being pulled from responder-provided Read chunks.
    pulls: HashMap<Xid, PendingPull>,
    /// With posted invalidation: each Call whose chunks are being fenced.
    fencing: HashMap<Xid, Fencing>,
    /// Calls submitted while no credit was free ([`Requester::submit_call`]), oldest
    /// first: started as credits return.
    waiting: VecDeque<(Xid, XdrStream)>,
    /// Receives to post again ([`Requester::poll_reposts`]).
    reposts: u32,
    counters: Arc<dyn CounterSink>,
}

impl<B: UpperLayerBinding> Requester<B> {
    /// A new connection.
    pub fn new(ulb: B, config: RequesterConfig) -> Self {
        let mut config = config;
        if config.reliable_reply.is_some() && !config.policy.options.contains(&RELIABLE_REPLY) {
            config.policy.options.push(RELIABLE_REPLY);
        }
        Requester {
            ulb,
            credits: RequesterCredits::new(config.credits),
            // A grant of zero would be refused; treat it as "no backward channel".
            backward: config
                .backward_credits
                .and_then(|n| ResponderCredits::new(n).ok()),
            backward_calls: HashMap::new(),
            negotiation: Negotiation::new(config.prefer),
            config,
            calls: HashMap::new(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            reliable: ReliableState::NotYet,
            pulls: HashMap::new(),
            fencing: HashMap::new(),
            waiting: VecDeque::new(),
            reposts: 0,
            counters: Arc::new(NoCounters),
        }
    }

    /// Counts into `counters` from now on (by default nothing is counted).
    pub fn with_counters(mut self, counters: Arc<dyn CounterSink>) -> Self {
        self.counters = counters;
        self
    }

    /// The next action for the driver. Calls waiting for a credit start here, in
    /// order, once credits have returned ([`Requester::submit_call`]).
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.actions.is_empty() && !self.waiting.is_empty() {
            self.start_waiting();
        }
        self.actions.pop_front()
    }

    /// The next event for the upper layer.
    pub fn poll_event(&mut self) -> Option<RequesterEvent> {
        self.events.pop_front()
    }

    /// Credit state.
    pub fn credits(&self) -> &RequesterCredits {
        &self.credits
    }

    /// What this connection's Calls wait for, as far as the core knows (`liveness`):
    /// the connection task adds its work requests and buffers.
    pub fn waiting(&self) -> Waiting {
        Waiting {
            calls: self.credits.outstanding() as usize,
            credits: self.credits.limit(),
            ..Waiting::default()
        }
    }

    /// Version negotiation state.
    pub fn negotiation(&self) -> Negotiation {
        self.negotiation
    }

    /// Largest Send we may post now: 1024 while probing Version Two (v2 §5), else
    /// the peer's RFC 8797 receive size, else the version's default.
    pub fn send_threshold(&self) -> u32 {
        let peer = self.config.peer.map(|p| p.send_threshold);
        match self.negotiation {
            Negotiation::Settled(v) => peer.unwrap_or(default_inline_threshold(v)),
            _ => crate::version::PROBE_LIMIT.min(peer.unwrap_or(u32::MAX)),
        }
    }

    /// Largest Send the responder may post to us (what it assumes of us).
    pub fn recv_threshold(&self) -> u32 {
        let v = self.negotiation.version();
        let v = if self.negotiation.is_probing() || self.negotiation == Negotiation::Unprobed {
            // Until the responder has answered in v2 it may only know v1's default.
            Version::ONE
        } else {
            v
        };
        self.config
            .peer
            .map_or(default_inline_threshold(v), |p| p.recv_threshold)
    }

    fn limits(&self) -> CallLimits {
        CallLimits {
            send_threshold: self.send_threshold(),
            recv_threshold: self.recv_threshold(),
            max_segments_per_registration: self.config.max_segments_per_registration,
        }
    }

    /// Starts Call `xid` whose encoded message is `stream`, or, when no credit is
    /// free, keeps it until one is, behind the Calls already waiting (§4.3.1: "The
    /// requester MUST NOT send unacknowledged requests in excess of this granted
    /// responder credit limit"). A Call that cannot be sent fails at once (the error
    /// returned), or, once it waited, with a [`RequesterEvent::Failed`] (v1 §5.5.4:
    /// "the associated RPC transaction fails immediately"). Waiting Calls fail with
    /// the connection.
    pub fn submit_call(&mut self, xid: Xid, stream: XdrStream) -> Result<(), Error> {
        self.bound_procedure(&stream)?;
        if !self.waiting.is_empty() || self.credits.available() == 0 {
            self.counters.inc(Counter::CreditWaits);
            self.waiting.push_back((xid, stream));
            return Ok(());
        }
        self.start_call(xid, stream)
    }

    /// Starts the Calls that waited for a credit, in order, while credits last.
    fn start_waiting(&mut self) {
        while self.credits.available() > 0 {
            let Some((xid, stream)) = self.waiting.pop_front() else {
                return;
            };
            if let Err(error) = self.start_call(xid, stream) {
                self.events.push_back(RequesterEvent::Failed { xid, error });
            }
        }
    }

    /// The Call's procedure, if an Upper Layer Binding covers it (§8: "Requesters MUST
    /// NOT send RPC-over-RDMA messages for Upper Layer Protocols that do not have a
    /// Upper Layer Binding").
    fn bound_procedure(&self, stream: &XdrStream) -> Result<rpc::ProcId, Error> {
        match rpc::call_proc(&stream.inline) {
            Some(p) if self.ulb.binds(p.prog, p.vers) => Ok(p),
            _ => Err(MarshalError::NoUpperLayerBinding.into()),
        }
    }

    /// Starts Call `xid` whose encoded message is `stream`. Takes a credit; fails with
    /// [`crate::CreditError::Exhausted`] when none is available (retry after a Reply;
    /// [`Requester::submit_call`] waits instead).
    pub fn start_call(&mut self, xid: Xid, stream: XdrStream) -> Result<(), Error> {
        let proc_id = self.bound_procedure(&stream)?;
        self.credits.try_acquire()?;
        let sizing = self.ulb.reply_sizing(proc_id, &stream);
        match self.plan(xid, &stream, &sizing) {
            Ok(()) => {
                self.negotiation = self.negotiation.on_send(xid);
                Ok(())
            }
            Err(e) => {
                let _ = self.credits.release();
                Err(e)
            }
        }
    }

    fn plan(&mut self, xid: Xid, stream: &XdrStream, sizing: &ReplySizing) -> Result<(), Error> {
        let version = self.negotiation.version();
        let plan_fn = if self.reliable_reply_on() {
            plan_call_without_reply_chunk
        } else {
            plan_call
        };
        let plan = plan_fn(
            xid,
            version,
            self.credits.requested(),
            stream,
            sizing,
            self.limits(),
        )?;
        let call = OutstandingCall {
            version,
            stream: stream.clone(),
            plan: None,
            chunks: ChunkLists::empty(),
            aborted: false,
        };
        self.calls.insert(xid, call);
        self.counters.inc(Counter::Calls);
        self.counters.set(Counter::Version, u64::from(version.0));
        self.counters.inc(match plan.shape {
            Shape::Short => Counter::ShortCalls,
            Shape::Chunked => Counter::ReadChunks,
            Shape::Long => Counter::PositionZeroReadChunks,
        });
        if plan.registrations.is_empty() {
            self.send_planned(xid, plan, Vec::new())
        } else {
            self.actions.push_back(Action::Register {
                xid,
                registrations: plan.registrations.clone(),
            });
            if let Some(c) = self.calls.get_mut(&xid) {
                c.plan = Some(plan);
            }
            Ok(())
        }
    }

    fn send_planned(
        &mut self,
        xid: Xid,
        plan: CallPlan,
        segments: Vec<Vec<Segment>>,
    ) -> Result<(), Error> {
        let out = plan.finish(segments)?;
        let chunks = out.chunks().cloned().unwrap_or_default();
        self.counters
            .add(Counter::WriteChunks, chunks.writes.len() as u64);
        self.counters
            .add(Counter::ReplyChunks, u64::from(chunks.reply.is_some()));
        if let Some(c) = self.calls.get_mut(&xid) {
            c.chunks = chunks;
        }
        self.actions.push_back(Action::Send {
            xid,
            send: out.send,
            invalidate: None,
        });
        Ok(())
    }

    /// The driver registered the memory of [`Action::Register`] for `xid`.
    pub fn handle_registered(
        &mut self,
        xid: Xid,
        segments: Vec<Vec<Segment>>,
    ) -> Result<(), Error> {
        let plan = self
            .calls
            .get_mut(&xid)
            .and_then(|c| c.plan.take())
            .ok_or(HeaderError::UnknownXid(xid))?;
        self.send_planned(xid, plan, segments)
    }

    fn complete(&mut self, xid: Xid, event: RequesterEvent) {
        if let Some(call) = self.calls.remove(&xid) {
            let handles = call.chunks.handles();
            if !handles.is_empty() {
                // §5.4.1: "The requester endpoint must ensure that memory segments
                // associated with each RPC transaction are properly fenced from
                // responders before allowing Upper Layer access to the data".
                self.actions.push_back(Action::Invalidate {
                    xid,
                    handles: handles.clone(),
                });
                if self.config.posted_invalidation {
                    let unfenced = handles;
                    self.fencing.insert(xid, Fencing { event, unfenced });
                    return;
                }
            }
        }
        self.events.push_back(event);
    }

    /// Registering the memory of [`Action::Register`] for Call `xid` failed (the
    /// device refused): the Call was never sent, so no Reply will come; it is
    /// forgotten and its credit returns (v1 §5.5.4: a Call that cannot be
    /// constructed "fails immediately"). A Version Two probe that was never sent
    /// leaves the version unprobed. The driver reports the failure to its caller.
    /// False if `xid` is not a Call waiting for its registration.
    pub fn handle_registration_failed(&mut self, xid: Xid) -> bool {
        if !self.calls.get(&xid).is_some_and(|c| c.plan.is_some()) {
            return false;
        }
        self.calls.remove(&xid);
        let _ = self.credits.release();
        if self.negotiation == (Negotiation::Probing { xid }) {
            self.negotiation = Negotiation::Unprobed;
        }
        true
    }

    /// Posted invalidation: our region `handle` of Call `xid` is fenced (its LOCAL_INV
    /// completed, or the responder's Send With Invalidate, a deregistration or the
    /// connection's end fenced it). Once every region of the Call is, its Reply or
    /// failure is handed up, and true is returned. A handle of no Call being fenced
    /// (an aborted Call's, one of a Call sent again in another version) is ignored:
    /// false.
    pub fn handle_invalidated(&mut self, xid: Xid, handle: u32) -> bool {
        let Some(f) = self.fencing.get_mut(&xid) else {
            return false;
        };
        let Some(i) = f.unfenced.iter().position(|&h| h == handle) else {
            return false;
        };
        f.unfenced.swap_remove(i);
        if !f.unfenced.is_empty() {
            return false;
        }
        if let Some(f) = self.fencing.remove(&xid) {
            self.events.push_back(f.event);
        }
        true
    }

    /// Whether the Reply of Call `xid`, being fenced, is built from the bytes placed in
    /// our region `handle` (its Reply chunk or one of its Write chunks,
    /// [`PlacedHandles`]): the driver keeps that region's memory once it is fenced,
    /// for [`Requester::assemble_reply`], and may release any other.
    pub fn wants_placed(&self, xid: Xid, handle: u32) -> bool {
        self.fencing.get(&xid).is_some_and(
            |f| matches!(&f.event, RequesterEvent::Reply { placed, .. } if placed.contains(handle)),
        )
    }

    fn fail(&mut self, xid: Xid, error: Error) {
        let _ = self.credits.release();
        self.complete(xid, RequesterEvent::Failed { xid, error });
    }

    /// A Reply (or RDMA_ERROR) for `xid` that does not complete a Call: none is
    /// outstanding, or it was aborted. True if it was handled here. An aborted Call's
    /// credit returns now (the responder had held our Call's Receive until it
    /// answered); `grant` is the Reply's, `None` for an RDMA_ERROR.
    fn not_for_a_call(&mut self, xid: Xid, grant: Option<u32>) -> bool {
        match self.calls.get(&xid) {
            None => {
                // No Call outstanding (a late duplicate): discard.
                self.counters.inc(Counter::ErrDiscarded);
                true
            }
            Some(c) if c.aborted => {
                self.calls.remove(&xid);
                match grant {
                    Some(g) => {
                        let _ = self.credits.handle_reply(g);
                    }
                    None => {
                        let _ = self.credits.release();
                    }
                }
                true
            }
            Some(_) => false,
        }
    }

    /// Receives to post again: one for each message received (its bytes are the
    /// core's once [`Requester::handle_receive`] has them, so its Receive goes back at
    /// once, keeping one posted per credit, §4.3.1, and per backward credit, §7.2.2).
    pub fn poll_reposts(&mut self) -> u32 {
        std::mem::take(&mut self.reposts)
    }

    /// A Receive completed with `buf` (one Send from the responder).
    pub fn handle_receive(&mut self, buf: Bytes) {
        self.reposts += 1;
        let received = match receive(&buf, &self.config.policy) {
            Ok(r) => r,
            Err(e) => {
                // A Reply whose header we cannot accept fails its Call, if we can tell
                // which; the connection carries on.
                if let HeaderError::UnknownOption(_) = e {
                    // v2 §3.1: "it MUST send an RPC-over-RDMA message with the rdma_xid
                    // field set to the same value as the erroneous message, the
                    // rdma_proc field set to RDMA_ERROR, and the rdma_err field set to
                    // RDMA_ERR_INVAL_OPTION."
                    return self.refuse_option(&buf, &e);
                }
                let xid = crate::header::PrefixView::new_checked(&buf[..])
                    .ok()
                    .map(|v| v.xid());
                match xid.and_then(|x| self.calls.get(&x).map(|c| (x, c.aborted))) {
                    Some((xid, false)) => {
                        if let HeaderError::UnsupportedVersion(_) = e {
                            // v2 §5.3: a Reply in another version than its Call.
                            self.counters.inc(Counter::ErrReplyVersion);
                        }
                        self.bad_reply(xid, e.into());
                    }
                    Some((xid, true)) => {
                        self.not_for_a_call(xid, None);
                    }
                    None => self.counters.inc(Counter::ErrDiscarded),
                }
                return;
            }
        };
        match received {
            Received::Error { prefix, body } => self.handle_error(prefix, body),
            Received::Msg {
                prefix,
                chunks,
                payload,
            } => {
                if rpc::msg_type(&payload) == Some(rpc::CALL) {
                    return self.handle_backward_call(prefix, chunks, payload);
                }
                self.handle_reply(prefix, chunks, payload, false);
            }
            Received::NoMsg { prefix, chunks } => {
                if chunks.position_zero().is_some() && self.handle_read_chunk_reply(prefix, &chunks)
                {
                    return;
                }
                self.handle_reply(prefix, chunks, Bytes::new(), true)
            }
            Received::Optional {
                prefix,
                opttype,
                optinfo,
                ..
            } => self.handle_optional(prefix, opttype, optinfo),
        }
    }

    fn handle_error(&mut self, prefix: Prefix, body: ErrorBody) {
        let xid = prefix.xid;
        self.counters.inc(Counter::ErrRdmaErrorReceived);
        if self.handle_option_refused(&prefix, &body) {
            return;
        }
        if self.not_for_a_call(xid, None) {
            return;
        }
        let (n, outcome) = self.negotiation.handle_reply(xid, Some(&body));
        self.negotiation = n;
        match outcome {
            NegotiationOutcome::Retry { .. } => {
                // v2 §5.2: send the Call again in the version the responder supports.
                // The credit stays taken by the retried Call.
                self.counters.inc(Counter::VersionFallbacks);
                if let Some(call) = self.calls.remove(&xid) {
                    if !call.chunks.handles().is_empty() {
                        self.actions.push_back(Action::Invalidate {
                            xid,
                            handles: call.chunks.handles(),
                        });
                    }
                    let proc_id = rpc::call_proc(&call.stream.inline);
                    let sizing = proc_id
                        .map(|p| self.ulb.reply_sizing(p, &call.stream))
                        .unwrap_or_default();
                    if let Err(e) = self.plan(xid, &call.stream, &sizing) {
                        let _ = self.credits.release();
                        self.events
                            .push_back(RequesterEvent::Failed { xid, error: e });
                    }
                }
            }
            NegotiationOutcome::NoCommonVersion => {
                self.fail(xid, ReplyError::PeerError(body.code()).into());
                self.actions.push_back(Action::Close);
            }
            NegotiationOutcome::Settled(_) | NegotiationOutcome::Unrelated => {
                // §5.5: "Receipt of this procedure completes the RPC transaction
                // associated with XID in the rdma_xid field."
                self.fail(xid, ReplyError::PeerError(body.code()).into());
            }
        }
    }

    fn handle_reply(&mut self, prefix: Prefix, chunks: ChunkLists, inline: Bytes, nomsg: bool) {
        let xid = prefix.xid;
        let grant = (prefix.version == self.calls.get(&xid).map_or(prefix.version, |c| c.version))
            .then_some(prefix.credits);
        if self.not_for_a_call(xid, grant) {
            return;
        }
        let Some(call) = self.calls.get(&xid) else {
            return;
        };
        // rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5.3:
        // "[I-D.ietf-nfsv4-rfc5666bis] REQUIRES that a responder MUST send Replies with
        // the same RPC-over-RDMA protocol version that the requester uses to send its
        // Calls." Another version is not this Call's Reply; the Call fails rather than
        // waiting (the responder holds nothing more for it), its credit is released
        // without adopting the message's grant, and a probe is not settled by it. The
        // transport's client does the same (`reply_in_another_version`). RDMA_ERROR is
        // exempt (`handle_error`): ERR_VERS comes in the responder's version.
        if prefix.version != call.version {
            self.counters.inc(Counter::ErrReplyVersion);
            return self.bad_reply(xid, HeaderError::UnsupportedVersion(prefix.version).into());
        }
        if !chunks.reads.is_empty() {
            return self.bad_reply(xid, HeaderError::ReadListInReply.into());
        }
        let write_lengths = match written_lengths(&call.chunks.writes, &chunks.writes) {
            Ok(l) => l,
            Err(e) => return self.bad_reply(xid, e.into()),
        };
        // A Short or Chunked Reply does not use the Reply chunk; one echoed with data in
        // it is contradictory (Linux's client refuses it too).
        if !nomsg && chunks.reply.as_ref().is_some_and(|c| !c.is_empty()) {
            return self.bad_reply(xid, HeaderError::ChunkOverrun.into());
        }
        let proc_id = rpc::call_proc(&call.stream.inline);
        let placed = PlacedHandles::of(&call.chunks);
        let reply_chunk_len = if nomsg {
            match (&call.chunks.reply, &chunks.reply) {
                (Some(p), Some(r)) => match reply_chunk_length(p, r) {
                    Ok(l) => Some(l),
                    Err(e) => return self.bad_reply(xid, e.into()),
                },
                _ => return self.bad_reply(xid, HeaderError::NoPayloadChunk.into()),
            }
        } else {
            None
        };
        let _ = self.credits.handle_reply(prefix.credits);
        self.counters
            .set(Counter::CreditsGranted, u64::from(prefix.credits));
        self.counters.inc(Counter::Replies);
        let (n, _) = self.negotiation.handle_reply(xid, None);
        self.negotiation = n;
        self.maybe_advertise(xid);
        self.complete(
            xid,
            RequesterEvent::Reply {
                xid,
                inline,
                reply_chunk_len,
                write_lengths,
                proc_id,
                placed,
            },
        );
    }

    /// A Reply that does not match its Call: the Call fails.
    fn bad_reply(&mut self, xid: Xid, error: Error) {
        self.counters.inc(Counter::ErrBadReply);
        self.fail(xid, error);
    }

    /// §7.3.4: a backward Call is RDMA_MSG with empty chunk lists. Without a backward
    /// channel it is dropped (§7.3.1); with chunks it gets ERR_BADHEADER ("All three
    /// chunk lists MUST be empty").
    fn handle_backward_call(&mut self, prefix: Prefix, chunks: ChunkLists, payload: Bytes) {
        let Some(credits) = self.backward.as_mut() else {
            self.counters.inc(Counter::ErrDiscarded);
            return;
        };
        self.counters.inc(Counter::BackwardCalls);
        if !chunks.is_empty() {
            let grant = credits.grant();
            self.counters.inc(Counter::BackwardFailed);
            self.counters.inc(Counter::ErrRdmaErrorSent);
            let h = crate::header::Header::error_reply(&prefix, grant, ErrorBody::BadHeader);
            self.actions.push_back(Action::Send {
                xid: prefix.xid,
                send: vec![h.to_bytes()],
                invalidate: None,
            });
            return;
        }
        // A Call whose XID is still in service here is a retransmission of it: the
        // Reply to the first answers both (the upper layer never sees it twice).
        if self.backward_calls.contains_key(&prefix.xid) {
            self.counters.inc(Counter::ErrDiscarded);
            return;
        }
        // §7.2.1: "Credits work the same way in the backward direction as they do in
        // the forward direction"; §4.3.1: a requester past its grant, where no RDMA
        // error occurred, may get "an RPC layer error": SYSTEM_ERR, through the
        // Receive the peer pre-posted for this Call's Reply (§7.2.2.2), never the
        // upper layer.
        if self.backward_calls.len() >= credits.target() as usize {
            let grant = credits.grant();
            self.counters.inc(Counter::BackwardFailed);
            let reply = XdrStream::inline_only(crate::rpc::system_err_reply(prefix.xid));
            let threshold = self
                .config
                .peer
                .map_or(default_inline_threshold(prefix.version), |p| {
                    p.send_threshold
                });
            if let Ok(out) = marshal_backward(prefix.xid, prefix.version, grant, &reply, threshold)
            {
                self.actions.push_back(Action::Send {
                    xid: prefix.xid,
                    send: out.send,
                    invalidate: None,
                });
            }
            return;
        }
        self.backward_calls.insert(prefix.xid, prefix.version);
        self.events.push_back(RequesterEvent::BackwardCall {
            xid: prefix.xid,
            payload,
        });
    }

    /// Answers the backward-direction Call `xid` (§7.3.5): RDMA_MSG, empty chunk lists,
    /// the backward grant in `rdma_credit`, the Call's version.
    pub fn send_backward_reply(&mut self, xid: Xid, stream: XdrStream) -> Result<(), Error> {
        let (Some(credits), Some(version)) =
            (self.backward.as_mut(), self.backward_calls.remove(&xid))
        else {
            return Err(MarshalError::NoBackwardChannel.into());
        };
        let grant = credits.grant();
        let threshold = self
            .config
            .peer
            .map_or(default_inline_threshold(version), |p| p.send_threshold);
        match marshal_backward(xid, version, grant, &stream, threshold) {
            Ok(out) => {
                self.counters.inc(Counter::BackwardReplies);
                self.actions.push_back(Action::Send {
                    xid,
                    send: out.send,
                    invalidate: None,
                });
                Ok(())
            }
            Err(e) => {
                // §7.4: backward messages are never reduced; one that does not fit gets
                // ERR_BADHEADER, "no RPC-level reply is possible" (§5.5.3).
                self.counters.inc(Counter::BackwardFailed);
                self.counters.inc(Counter::ErrRdmaErrorSent);
                let prefix = Prefix {
                    xid,
                    version,
                    credits: grant,
                    msg_type: crate::wire::MsgType::RDMA_MSG,
                };
                let h = crate::header::Header::error_reply(&prefix, grant, ErrorBody::BadHeader);
                self.actions.push_back(Action::Send {
                    xid,
                    send: vec![h.to_bytes()],
                    invalidate: None,
                });
                Err(e.into())
            }
        }
    }

    /// Invalidating our registrations for `xid` failed.
    ///
    /// §5.5.4: "if it is unable to invalidate a memory region due to an unrecoverable
    /// problem, the requester MUST close the connection to fence that memory from the
    /// responder before the associated RPC transaction is complete."
    pub fn handle_invalidate_failed(&mut self, _xid: Xid) {
        self.actions.push_back(Action::Close);
    }

    /// The connection was lost: every outstanding Call fails (the upper layer may
    /// retransmit on a new connection) and credits return to the initial state.
    pub fn handle_disconnect(&mut self) {
        self.pulls.clear();
        for (xid, _) in std::mem::take(&mut self.waiting) {
            self.events.push_back(RequesterEvent::Failed {
                xid,
                error: ReplyError::ConnectionLost.into(),
            });
        }
        // Replies whose chunks were still being fenced cannot be handed up: the
        // memory's state is unknown once the connection is gone.
        for (xid, _) in self.fencing.drain() {
            self.events.push_back(RequesterEvent::Failed {
                xid,
                error: ReplyError::ConnectionLost.into(),
            });
        }
        self.reliable = ReliableState::NotYet;
        let xids: Vec<Xid> = self.calls.keys().copied().collect();
        for xid in xids {
            let Some(call) = self.calls.remove(&xid) else {
                continue;
            };
            if !call.aborted {
                self.events.push_back(RequesterEvent::Failed {
                    xid,
                    error: ReplyError::ConnectionLost.into(),
                });
            }
        }
        self.credits.reset();
        self.negotiation = self.negotiation.next_connection();
    }
}

/// The driver's view of a requester ([`Endpoint`]): its own methods, and nothing for
/// what only a responder has (a timer, a memory budget, a growing grant).
impl<B: UpperLayerBinding> Endpoint for Requester<B> {
    type Event = RequesterEvent;

    fn poll_reposts(&mut self) -> u32 {
        Requester::poll_reposts(self)
    }

    fn poll_action(&mut self) -> Option<Action> {
        Requester::poll_action(self)
    }

    fn poll_event(&mut self) -> Option<RequesterEvent> {
        Requester::poll_event(self)
    }

    fn handle_receive(&mut self, buf: Bytes) {
        Requester::handle_receive(self, buf);
    }

    fn handle_receives_posted(&mut self, _n: u32) {}

    fn handle_registered(
        &mut self,
        _now: Instant,
        xid: Xid,
        segments: Vec<Vec<Segment>>,
    ) -> Result<(), Error> {
        Requester::handle_registered(self, xid, segments)
    }

    fn handle_registration_failed(&mut self, xid: Xid) {
        Requester::handle_registration_failed(self, xid);
    }

    fn handle_reads_posted(&mut self, _xid: Xid, _chunk: usize, _now: Instant) {}

    fn handle_read_done(&mut self, xid: Xid, chunk: usize, data: Bytes) {
        Requester::handle_read_done(self, xid, chunk, data);
    }

    fn handle_read_failed(&mut self, xid: Xid) {
        Requester::handle_read_failed(self, xid);
    }

    fn wants_placed(&self, xid: Xid, handle: u32) -> bool {
        Requester::wants_placed(self, xid, handle)
    }

    fn handle_invalidated(&mut self, xid: Xid, handle: u32) {
        Requester::handle_invalidated(self, xid, handle);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn memory_wait(&self) -> Option<(&Arc<MemoryBudget>, u64)> {
        None
    }

    fn handle_memory_released(&mut self) {}

    fn waiting(&self, _now: Instant) -> Waiting {
        Requester::waiting(self)
    }

    fn handle_disconnect(&mut self) {
        Requester::handle_disconnect(self);
    }
}

mod reliable;
use reliable::{PendingPull, ReliableState};

mod reply;
pub use reply::{PlacedBytes, PlacedChunks, ReplyParts};

#[cfg(test)]
mod tests;
