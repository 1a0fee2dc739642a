//! The responder's per-connection state machine (forward direction; an NFS server).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.5.2, §4.5, §5.5, §8.1.1;
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5.3. Linux: `svc_rdma_recvfrom.c`,
//! `svc_rdma_sendto.c`.
//!
//! # Driving it
//! ```text
//! driver                              Responder                          upper layer
//! Receive completion ──handle_receive──►  validate, take chunks
//!        ◄──poll_action: RdmaRead──────   (one per Read chunk)
//! Read completion ───handle_read_done──►  reassemble, §8.1.1 check ──poll_event──► Call
//!                                                    ◄──────────send_reply(xid, stream)
//!        ◄──poll_action: RdmaWrite*, Send──  marshal_reply, credit grant
//! ```
//! A Reply that fits no reply resource of a Version Two requester that agreed to
//! reliable reply goes through a responder-provided Read chunk instead
//! (`responder/reliable.rs` has that diagram): `Register`, `handle_registered(now, ..)`,
//! RDMA_NOMSG, then `Invalidate` on RDMA_DONE, on `handle_timeout(now)` (arm a timer
//! for `poll_timeout()`) or on `handle_disconnect`.
//!
//! Backward Calls (`start_backward_call`) go only after
//! `handle_peer_backward_ready` (v1 §7.3.1). Each carries a token of the caller's
//! (type `T`: the transport's is where the Reply goes), which comes back in the
//! `BackwardReply` or `BackwardFailed` event that ends it: the caller keeps no table
//! of its own.
//!
//! After each `handle_*` or `send_reply` call, post the Receives [`Responder::poll_reposts`]
//! gives back, then drain `poll_action`, then `poll_event`. A Receive is given back only
//! when the message it brought is finished with: at once for RDMA_DONE, RDMA_OPTIONAL,
//! RDMA_ERROR, backward Replies and refused messages, and for a Call only when its
//! Reply (or error) is queued or the upper layer drops it. So at most the grant of
//! Calls is ever in service, and a requester that sends past its grant finds no
//! Receive and loses only its own connection (§4.3.1).
//! A bad header is answered here (RDMA_ERROR), bad arguments too (GARBAGE_ARGS); the
//! upper layer only ever sees Calls that passed both.
//!
//! Per Call: `Reading` (waiting for RDMA Reads) → `WithUpperLayer` → removed when the
//! Reply is sent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use xdr::XdrStream;

use crate::action::{Action, Endpoint};
use crate::chunks::ChunkLists;
use crate::credits::{grown_target, RequesterCredits, ResponderCredits, GROWTH_RETRY};
use crate::error::{ArgsError, CreditError, Error, HeaderError, MarshalError, WireAnswer};
use crate::header::{ErrorBody, Header, Prefix};
use crate::liveness::Waiting;
use crate::marshal::{marshal_backward, marshal_reply, ReadChunkReply, Shape};
use crate::memory::{Charge, MemoryBudget, Waiter};
use crate::options::{ReliableReplyInfo, RELIABLE_REPLY};
use crate::private_data::PeerLimits;
use crate::pull::{PullTable, DEFAULT_PULL_TIMEOUT};
use crate::reassembly::{reassemble_call, Reassembled, ReassemblyOptions};
use crate::rpc;
use crate::stats::{Counter, CounterSink, NoCounters};
use crate::ulb::UpperLayerBinding;
use crate::validate::{error_reply_for, receive, Policy, Received};
use crate::wire::{Version, Xid};

/// Configuration of a responder connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Versions, limits, options.
    pub policy: Policy,
    /// Receives posted at connection time (the initial grant).
    pub credits: u32,
    /// What the requester's RFC 8797 private data said (its receive threshold and R
    /// flag). `None`: no private data, so each Reply assumes the default threshold of
    /// the Call's version (1024 for v1, 4096 for v2) and no remote invalidation.
    pub peer: Option<PeerLimits>,
    /// Reassembly checks and bounds.
    pub reassembly: ReassemblyOptions,
    /// Backward-direction Calls we may send (§7): the credits we ask the client for.
    /// `None`: no backward channel.
    pub backward_credits: Option<u32>,
    /// Version Two responder-provided Read chunks (reliable reply), offered to a
    /// requester that advertises them. `None`: the option is refused with
    /// ERR_INVAL_OPTION and too-large replies get ERR_BADHEADER as in Version One.
    pub reliable_reply: Option<ReliableReplyConfig>,
    /// DoS bound: most bytes of Read chunks being pulled at once on this connection
    /// (one Call alone may still pull up to `reassembly.max_len`). Later Calls wait,
    /// each still holding its Receive.
    pub max_read_in_flight: u64,
    /// DoS bound across connections (issue 16): the server's budget for Read chunk
    /// data ([`MemoryBudget`]). Each Call with Read chunks is charged their length
    /// before any RDMA Read is issued and keeps the charge until it is finished with
    /// (Reply queued, dropped, refused, connection lost); a Call that finds the
    /// budget spent waits, holding its Receive, until
    /// [`Responder::handle_memory_released`]. A Call larger than the whole budget is
    /// answered GARBAGE_ARGS, as one over `reassembly.max_len`. `None`: no bound but
    /// the per-connection one. The driver may charge other memory to the same budget
    /// (the transport: each connection's buffers; nfsd: READ buffers), so that one
    /// limit bounds the server.
    pub read_memory: Option<Arc<MemoryBudget>>,
    /// The (program, version) pairs the upper layer serves. A Call for one of them
    /// that the binding does not cover is dropped unanswered (§8); a Call for
    /// anything else is handed up, so that RPC answers it PROG_UNAVAIL or
    /// PROG_MISMATCH (RFC 5531 §9). Empty: nothing is known, every unbound Call is
    /// handed up.
    pub served: Vec<(u32, u32)>,
    /// How long a Call's RDMA Reads may take, from when the driver posted them
    /// ([`Responder::handle_reads_posted`]), before [`Responder::handle_timeout`]
    /// reports [`ResponderEvent::ReadTimeout`] and the connection is to be closed
    /// (§5.5.3: "RDMA operational errors are typically fatal to the connection"): a
    /// peer that announces Read chunks and never answers the Reads holds the Call's
    /// Receive, read budget and memory charge no longer than this. `None`: no bound.
    pub read_timeout: Option<Duration>,
}

/// Our side of the reliable-reply feature (draft-cel-nfsv4-rpcrdma-reliable-reply-05).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReliableReplyConfig {
    /// How long a Read chunk stays exposed without RDMA_DONE before we invalidate it
    /// (§4.1.3: "a responder can choose to invalidate its Read chunks after waiting for
    /// a short period").
    pub pull_timeout: Duration,
    /// Allow the requester to invalidate our Read chunk STag with Send With Invalidate
    /// (§4.1.4).
    pub remote_invalidate: bool,
}

impl Default for ReliableReplyConfig {
    fn default() -> Self {
        ReliableReplyConfig {
            pull_timeout: DEFAULT_PULL_TIMEOUT,
            remote_invalidate: true,
        }
    }
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            policy: Policy::default(),
            credits: 64,
            peer: None,
            reassembly: ReassemblyOptions::default(),
            backward_credits: None,
            reliable_reply: None,
            max_read_in_flight: 64 << 20,
            read_memory: None,
            served: Vec::new(),
            read_timeout: None,
        }
    }
}

/// What the responder tells its upper layer. `T` is the token of a backward Call
/// ([`Responder::start_backward_call`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponderEvent<T = ()> {
    /// A Call ready for the upper layer; answer it with [`Responder::send_reply`].
    Call {
        /// The XID.
        xid: Xid,
        /// The version it came in (the Reply uses it).
        version: Version,
        /// The reassembled Payload stream.
        payload: Reassembled,
    },
    /// The Reply to our backward-direction Call `xid` (§7), payload inline.
    BackwardReply {
        /// The XID (backward XID space, §7.1.4).
        xid: Xid,
        /// The RPC Reply.
        payload: Bytes,
        /// The token the Call was started with.
        token: T,
    },
    /// The RDMA Reads of Call `xid` did not complete within
    /// [`ResponderConfig::read_timeout`] (`after`): close the connection (§5.5.3),
    /// which releases what its Calls hold. Reported once per connection.
    ReadTimeout {
        /// The Call whose Reads were posted longest ago.
        xid: Xid,
        /// The timeout that passed.
        after: Duration,
    },
    /// Our backward-direction Call `xid` failed.
    BackwardFailed {
        /// The XID.
        xid: Xid,
        /// Why.
        reason: BackwardError,
        /// The token the Call was started with.
        token: T,
    },
    /// A Call was refused; the peer has been answered (`answer`).
    Refused {
        /// The XID, if one could be read.
        xid: Option<Xid>,
        /// Why.
        error: Error,
        /// What the peer was sent.
        answer: WireAnswer,
    },
}

/// Why a backward-direction Call of ours (§7) was not sent
/// ([`Responder::start_backward_call`]) or got no Reply
/// ([`ResponderEvent::BackwardFailed`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackwardError {
    /// This connection has no backward channel (no backward credits).
    #[error("no backward channel on this connection")]
    NoChannel,
    /// §7.3.1: "An Upper Layer Protocol consumer MUST NOT perform backward direction
    /// ONC RPC operations unless the peer consumer has indicated it is prepared to
    /// handle them." The client has not (yet) said so on this connection.
    #[error("the client has not said it takes backward calls")]
    NotReady,
    /// The message is not an RPC Call.
    #[error("not an RPC call message")]
    NotACall,
    /// A Call of ours with this XID is in flight or waiting for a credit (§7.1.4: the
    /// backward direction's XIDs are one space of ours).
    #[error("backward xid {0:#x} already outstanding")]
    DuplicateXid(u32),
    /// §7.4: backward messages are never reduced; this one does not fit inline.
    #[error("backward call of {len} bytes exceeds the inline threshold {threshold}")]
    TooLarge {
        /// The Call's length, header included.
        len: usize,
        /// The client's inline receive threshold.
        threshold: u32,
    },
    /// [`BACKWARD_QUEUE_MAX`] Calls already wait for a backward credit.
    #[error("too many backward calls waiting for a credit")]
    Busy,
    /// The client answered RDMA_ERROR (§5.5: it "completes the RPC transaction").
    #[error("the client refused the backward call (RDMA_ERROR)")]
    Refused,
    /// The connection was lost before the Reply (§7.3.2).
    #[error("connection lost")]
    ConnectionLost,
}

impl From<MarshalError> for BackwardError {
    fn from(e: MarshalError) -> Self {
        match e {
            MarshalError::HeaderTooLarge { len, threshold } => {
                BackwardError::TooLarge { len, threshold }
            }
            MarshalError::NoBackwardChannel => BackwardError::NoChannel,
            // `marshal_backward` refuses nothing else: a backward Call is one RDMA_MSG
            // of the stream as it is.
            _ => BackwardError::NotACall,
        }
    }
}

#[derive(Debug)]
struct PendingCall {
    prefix: Prefix,
    chunks: ChunkLists,
    inline: Bytes,
    data: Vec<Option<Bytes>>,
    /// Bytes of its Read chunks (charged to the read budget while they are pulled).
    read_len: u64,
    /// Its charge to the server's memory budget (`ResponderConfig::read_memory`),
    /// from the start of its RDMA Reads until the Call is forgotten (dropping it
    /// releases the bytes).
    charge: Option<Charge>,
    /// When the driver posted its first RDMA Read, until all its Read chunks are in
    /// (`ResponderConfig::read_timeout` runs from here).
    reads_posted: Option<Instant>,
    /// When the upper layer took it into service without answering at once
    /// ([`Responder::handle_in_service`]): the driver's watchdog reports the oldest.
    in_service: Option<Instant>,
}

/// Whether a Call's RDMA Reads could start.
enum ReadStart {
    Started,
    /// The connection's own read budget is in use (`max_read_in_flight`).
    WaitConnection,
    /// The server's memory budget is spent.
    WaitMemory,
}

/// Most backward Calls that wait for a backward credit on one connection
/// ([`Responder::start_backward_call`]); past it the caller is told to wait
/// (`CreditError::Exhausted`).
pub const BACKWARD_QUEUE_MAX: usize = 1024;

/// One responder connection; `T` is the token each backward Call carries.
pub struct Responder<B, T = ()> {
    ulb: B,
    config: ResponderConfig,
    credits: ResponderCredits,
    /// Backward direction: our Calls to the client, credited separately (§7.2.1).
    backward: Option<RequesterCredits>,
    /// Our backward Calls sent and not yet answered, with their tokens.
    backward_calls: HashMap<Xid, T>,
    /// Backward Calls waiting for a backward credit, oldest first (at most
    /// [`BACKWARD_QUEUE_MAX`]): sent as Replies return credits.
    backward_waiting: VecDeque<(Xid, XdrStream, T)>,
    /// Version of the last Call received (backward messages use it).
    version: Version,
    calls: HashMap<Xid, PendingCall>,
    actions: VecDeque<Action>,
    events: VecDeque<ResponderEvent<T>>,
    /// §7.3.1: no backward Call until the peer's upper layer said it is prepared.
    backward_ready: bool,
    /// What the requester advertised for reliable reply, once we accepted it.
    reliable_peer: Option<ReliableReplyInfo>,
    /// Replies whose Payload stream is being registered for a Read chunk.
    registering: HashMap<Xid, (ReadChunkReply, Prefix)>,
    /// Read chunks exposed, waiting for RDMA_DONE.
    pulls: PullTable,
    /// Replies that need a Read chunk while every spare Receive is reserved for an
    /// RDMA_DONE: sent, in order, as reservations end.
    waiting_replies: VecDeque<(Prefix, ChunkLists, XdrStream)>,
    /// Read chunks invalidated by the pull timeout whose RDMA_DONE may still come: each
    /// keeps its reserved Receive until it does (or the connection ends), so a late
    /// RDMA_DONE never lands in a Receive the grant promised to a Call.
    expired_pulls: HashSet<Xid>,
    /// Receives whose message is finished with, to be posted again.
    reposts: u32,
    /// Bytes of Read chunks being pulled now.
    reading_bytes: u64,
    /// Calls waiting for the read budget, oldest first.
    deferred_reads: VecDeque<Xid>,
    /// The first deferred Call's place in the memory budget's line
    /// ([`crate::memory::Waiter`]): the driver waits for a release, then it tries again.
    memory_wait: Option<Waiter>,
    /// After a refused credit growth: no growth is offered before then
    /// ([`GROWTH_RETRY`]; [`Responder::poll_timeout`] includes it).
    growth_retry_at: Option<Instant>,
    /// A read timeout was reported: no other is, until the connection is lost.
    read_timed_out: bool,
    counters: Arc<dyn CounterSink>,
}

impl<B: UpperLayerBinding, T> Responder<B, T> {
    /// A new connection.
    pub fn new(ulb: B, config: ResponderConfig) -> Result<Self, CreditError> {
        let credits = ResponderCredits::new(config.credits)?;
        let mut config = config;
        // The registry row makes the option acceptable to `receive` (v2 §3.1).
        if config.reliable_reply.is_some() && !config.policy.options.contains(&RELIABLE_REPLY) {
            config.policy.options.push(RELIABLE_REPLY);
        }
        Ok(Responder {
            ulb,
            backward: config.backward_credits.map(RequesterCredits::new),
            backward_calls: HashMap::new(),
            backward_waiting: VecDeque::new(),
            version: config.policy.min_version,
            config,
            credits,
            calls: HashMap::new(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            backward_ready: false,
            reliable_peer: None,
            registering: HashMap::new(),
            pulls: PullTable::default(),
            waiting_replies: VecDeque::new(),
            expired_pulls: HashSet::new(),
            reposts: 0,
            reading_bytes: 0,
            deferred_reads: VecDeque::new(),
            memory_wait: None,
            growth_retry_at: None,
            read_timed_out: false,
            counters: Arc::new(NoCounters),
        })
    }

    /// Counts into `counters` from now on (by default nothing is counted).
    pub fn with_counters(mut self, counters: Arc<dyn CounterSink>) -> Self {
        self.counters = counters;
        self
    }

    /// How many Receives to post again, before executing the next actions: one for
    /// each received message now finished with (§4.3.1: "the responder needs to
    /// ensure that a credit increase is effected (i.e. RDMA Receives are posted)
    /// before the next reply is sent").
    pub fn poll_reposts(&mut self) -> u32 {
        std::mem::take(&mut self.reposts)
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next event for the upper layer.
    pub fn poll_event(&mut self) -> Option<ResponderEvent<T>> {
        self.events.pop_front()
    }

    /// Credits (forward direction).
    pub fn credits(&self) -> &ResponderCredits {
        &self.credits
    }

    /// Changes the forward grant. An increase first asks the driver to post Receives
    /// ([`Action::PostReceives`]); replies announce it only once
    /// [`Responder::handle_receives_posted`] says they are there (§4.3.1: "a credit
    /// increase is effected (i.e. RDMA Receives are posted) before the next reply is
    /// sent").
    pub fn set_credit_target(&mut self, n: u32) -> Result<(), CreditError> {
        let more = self.credits.set_target(n)?;
        if more > 0 {
            self.actions.push_back(Action::PostReceives(more));
        }
        Ok(())
    }

    /// The grant to grow to now, if any (§4.3.1 lets a responder "dynamically adjust
    /// the granted credit value to match its needs or policies"; ours is
    /// [`grown_target`]: doubled, up to `max`, once the requester keeps more than half
    /// of it in service), unless a growth was refused less than [`GROWTH_RETRY`] ago.
    /// The driver, which allocates the buffers, then calls
    /// [`Responder::set_credit_target`] or [`Responder::handle_credit_growth_refused`].
    pub fn credit_growth(&self, max: u32) -> Option<u32> {
        if self.growth_retry_at.is_some() {
            return None;
        }
        grown_target(self.credits.target(), self.calls.len(), max)
    }

    /// The driver could not grow the grant (the server's memory budget had no room
    /// for the buffers at `now`): [`Responder::credit_growth`] offers nothing until
    /// [`Responder::handle_timeout`] is called [`GROWTH_RETRY`] later.
    pub fn handle_credit_growth_refused(&mut self, now: Instant) {
        self.counters.inc(Counter::CreditGrowthsRefused);
        self.growth_retry_at = Some(now + GROWTH_RETRY);
    }

    /// The driver posted `n` more Receives.
    pub fn handle_receives_posted(&mut self, n: u32) {
        self.credits.handle_receives_posted(n);
    }

    /// Calls received and not yet answered.
    pub fn pending_calls(&self) -> usize {
        self.calls.len()
    }

    /// True while Call `xid` is received and not yet answered or dropped.
    pub fn has_call(&self, xid: Xid) -> bool {
        self.calls.contains_key(&xid)
    }

    /// The upper layer took Call `xid` into service at `now` and answers it later
    /// (a task of its own): [`Responder::in_service`] counts it until its Reply.
    pub fn handle_in_service(&mut self, xid: Xid, now: Instant) {
        if let Some(call) = self.calls.get_mut(&xid) {
            call.in_service = Some(now);
        }
    }

    /// How many Calls are in service ([`Responder::handle_in_service`]) and when the
    /// oldest was taken: what a watchdog reports of a connection waiting on its upper
    /// layer. Walks the pending Calls (at most the grant).
    pub fn in_service(&self) -> (usize, Option<Instant>) {
        let starts = self.calls.values().filter_map(|c| c.in_service);
        (starts.clone().count(), starts.min())
    }

    /// What this connection's Calls wait for at `now`, as far as the core knows
    /// (`liveness`): the connection task adds its work requests and buffers.
    pub fn waiting(&self, now: Instant) -> Waiting {
        let (in_dispatcher, oldest) = self.in_service();
        Waiting {
            calls: self.pending_calls(),
            credits: self.credits.target(),
            in_dispatcher,
            oldest_dispatch: crate::liveness::oldest(now, oldest.into_iter()),
            memory_wait: self.memory_wait.is_some(),
            backward: self.backward_calls(),
            ..Waiting::default()
        }
    }

    /// Answers a message whose header did not pass: RDMA_ERROR when the core's table
    /// says so (§5.5.1, §5.5.2, v2 §3.1), else silence. Its Receive goes back.
    fn refuse_header(&mut self, buf: &[u8], err: HeaderError) {
        self.reposts += 1;
        let prefix = crate::header::PrefixView::new_checked(buf)
            .ok()
            .map(|v| v.prefix());
        self.refuse(prefix, err);
    }

    /// The RDMA_ERROR (or silence) for `err`, counted, and the Refused event. The
    /// caller gives the message's Receive back.
    fn refuse(&mut self, prefix: Option<Prefix>, err: HeaderError) {
        let answer = WireAnswer::from(&err);
        let grant = self.credits.grant();
        match prefix.and_then(|p| error_reply_for(&p, &err, grant, &self.config.policy)) {
            Some(h) => {
                self.counters.inc(Counter::ErrRdmaErrorSent);
                match &h.body {
                    crate::header::Body::Error(ErrorBody::Vers { .. }) => {
                        self.counters.inc(Counter::ErrVers)
                    }
                    _ => self.counters.inc(Counter::ErrBadHeader),
                }
                self.actions.push_back(Action::Send {
                    xid: h.xid,
                    send: vec![h.to_bytes()],
                    invalidate: None,
                });
            }
            None => self.counters.inc(Counter::ErrDiscarded),
        }
        self.events.push_back(ResponderEvent::Refused {
            xid: prefix.map(|p| p.xid),
            error: err.into(),
            answer,
        });
    }

    /// A Receive completed with `buf` (one Send from the requester). The Receive is
    /// the connection's until [`Responder::poll_reposts`] gives it back.
    pub fn handle_receive(&mut self, buf: Bytes) {
        if self.is_pull_completion(&buf) {
            return self.handle_done(&buf);
        }
        let received = match receive(&buf, &self.config.policy) {
            Ok(r) => r,
            Err(e) => return self.refuse_header(&buf, e),
        };
        match received {
            Received::Msg {
                prefix,
                chunks,
                payload,
            } => {
                if rpc::msg_type(&payload) == Some(rpc::REPLY) {
                    return self.handle_backward_reply(prefix, chunks, payload);
                }
                self.start_call(prefix, chunks, payload)
            }
            Received::NoMsg { prefix, chunks } => {
                // A Call sent as RDMA_NOMSG carries its Payload stream in a Position Zero
                // Read chunk (§4.5.3, Long Call).
                if chunks.position_zero().is_none() {
                    return self.refuse_header(&buf, HeaderError::NoPayloadChunk);
                }
                self.start_call(prefix, chunks, Bytes::new())
            }
            // An RDMA_ERROR can only concern one of our backward Calls (§5.5: "Receipt
            // of this procedure completes the RPC transaction associated with XID").
            Received::Error { prefix, .. } => {
                self.reposts += 1;
                if let Some(token) = self.backward_calls.remove(&prefix.xid) {
                    if let Some(b) = self.backward.as_mut() {
                        let _ = b.release();
                    }
                    self.counters.inc(Counter::BackwardFailed);
                    self.events.push_back(ResponderEvent::BackwardFailed {
                        xid: prefix.xid,
                        reason: BackwardError::Refused,
                        token,
                    });
                    self.send_waiting_backward();
                } else {
                    self.counters.inc(Counter::ErrDiscarded);
                }
            }
            Received::Optional {
                prefix,
                opttype,
                optinfo,
                ..
            } => self.handle_optional(prefix, opttype, optinfo),
        }
    }

    fn start_call(&mut self, prefix: Prefix, chunks: ChunkLists, inline: Bytes) {
        self.counters.inc(Counter::Calls);
        self.version = prefix.version;
        if self.calls.contains_key(&prefix.xid) {
            // A retransmission while the first copy is being served: drop it.
            self.reposts += 1;
            self.counters.inc(Counter::ErrDiscarded);
            return;
        }
        let read_len = chunks.reads.iter().map(|c| c.len()).sum::<u64>();
        // DoS bound: never RDMA Read more than a reassembled Call may hold.
        let total = read_len + inline.len() as u64;
        let too_large = total > self.config.reassembly.max_len
            || (self.config.read_memory.as_ref()).is_some_and(|b| read_len > b.limit());
        let n = chunks.reads.len();
        if chunks.position_zero().is_some() {
            self.counters.inc(Counter::PositionZeroReadChunks);
        } else if n > 0 {
            self.counters.inc(Counter::ReadChunks);
        } else {
            self.counters.inc(Counter::ShortCalls);
        }
        self.calls.insert(
            prefix.xid,
            PendingCall {
                prefix,
                chunks,
                inline,
                data: vec![None; n],
                read_len,
                charge: None,
                reads_posted: None,
                in_service: None,
            },
        );
        if too_large {
            return self.garbage_args(prefix, ArgsError::TooLarge(total));
        }
        if n == 0 {
            return self.finish_call(prefix.xid);
        }
        // Behind Calls of this connection that wait already: they start in order.
        let start = if self.deferred_reads.is_empty() {
            self.try_start_reads(prefix.xid)
        } else if self.memory_wait.is_some() {
            ReadStart::WaitMemory
        } else {
            ReadStart::WaitConnection
        };
        match start {
            ReadStart::Started => {}
            wait => {
                self.counters.inc(Counter::ReadsDeferred);
                if matches!(wait, ReadStart::WaitMemory) {
                    self.counters.inc(Counter::ReadsWaitedForMemory);
                }
                self.deferred_reads.push_back(prefix.xid);
            }
        }
    }

    /// §4.4.5: one RDMA Read action per Read chunk of Call `xid`, if both budgets
    /// allow. DoS bounds: Read chunks of at most `max_read_in_flight` bytes are pulled
    /// at once on this connection (one Call alone may exceed it), and every Call is
    /// charged to the server's memory budget (`read_memory`) before its Reads are
    /// issued. A Call that may not start waits, holding its Receive.
    fn try_start_reads(&mut self, xid: Xid) -> ReadStart {
        let Some(call) = self.calls.get_mut(&xid) else {
            // Gone: nothing to wait for.
            return ReadStart::Started;
        };
        let read_len = call.read_len;
        if self.reading_bytes != 0 && self.reading_bytes + read_len > self.config.max_read_in_flight
        {
            return ReadStart::WaitConnection;
        }
        if let Some(budget) = &self.config.read_memory {
            // This connection's place in line, if it already waits (only its first
            // deferred Call ever does: they start in order).
            let charged = match self.memory_wait.take() {
                Some(waiter) => waiter.try_charge(read_len),
                None => budget.try_charge(read_len),
            };
            match charged {
                Ok(charge) => call.charge = Some(charge),
                Err(waiter) => {
                    self.memory_wait = Some(waiter);
                    return ReadStart::WaitMemory;
                }
            }
        }
        self.reading_bytes += read_len;
        for (i, c) in call.chunks.reads.iter().enumerate() {
            self.actions.push_back(Action::RdmaRead {
                xid,
                chunk: i,
                segments: c.segments.clone(),
            });
        }
        ReadStart::Started
    }

    /// Call `xid` has all its Read data (or is gone): its share of the connection's
    /// read budget returns, and Calls that waited for it start.
    fn end_reads(&mut self, read_len: u64) {
        self.reading_bytes = self.reading_bytes.saturating_sub(read_len);
        self.start_deferred();
    }

    /// Starts waiting Calls, oldest first, while the budgets allow.
    fn start_deferred(&mut self) {
        while let Some(&next) = self.deferred_reads.front() {
            if !matches!(self.try_start_reads(next), ReadStart::Started) {
                break;
            }
            self.deferred_reads.pop_front();
        }
        if self.deferred_reads.is_empty() {
            // No Call waits any more: out of the memory budget's line, so that a
            // place held for nothing never stalls the other connections.
            self.memory_wait = None;
        }
    }

    /// The memory budget this connection waits for, and the generation to wait past
    /// ([`MemoryBudget::poll_released`]): `Some` while a Call waits because the
    /// server's budget was spent. Then call [`Responder::handle_memory_released`].
    pub fn memory_wait(&self) -> Option<(&Arc<MemoryBudget>, u64)> {
        self.memory_wait.as_ref().map(Waiter::wait)
    }

    /// Memory was released to the server's budget: Calls waiting for it start, if it
    /// now has room for them.
    pub fn handle_memory_released(&mut self) {
        self.start_deferred();
    }

    fn handle_backward_reply(&mut self, prefix: Prefix, chunks: ChunkLists, payload: Bytes) {
        self.reposts += 1;
        // §7.3.5: a backward Reply is RDMA_MSG with "All three chunk lists ... empty".
        let token = if self.backward.is_some() && chunks.is_empty() {
            self.backward_calls.remove(&prefix.xid)
        } else {
            None
        };
        let Some(token) = token else {
            self.counters.inc(Counter::ErrDiscarded);
            return;
        };
        if let Some(b) = self.backward.as_mut() {
            let _ = b.handle_reply(prefix.credits);
        }
        self.counters.inc(Counter::BackwardReplies);
        self.events.push_back(ResponderEvent::BackwardReply {
            xid: prefix.xid,
            payload,
            token,
        });
        self.send_waiting_backward();
    }

    /// Sends backward-direction Call `stream` (§7.3.4) to the client, at once if a
    /// backward credit is free (accounted apart from the forward grant, §7.2.1), else
    /// when a Reply returns one: it waits here, in order (its outcome is a later
    /// `BackwardReply` or `BackwardFailed` event either way). Returns its XID. Fails
    /// ([`BackwardError`], with `token` back) if it is not an RPC Call, if there is no
    /// backward channel, if the peer has not said it is ready (§7.3.1), if a Call of
    /// ours with the same XID is in flight or waiting, if the Call does not fit inline
    /// (§7.4: no reduction), or if [`BACKWARD_QUEUE_MAX`] Calls already wait.
    pub fn start_backward_call(
        &mut self,
        stream: XdrStream,
        token: T,
    ) -> Result<Xid, (BackwardError, T)> {
        let xid = match rpc::xid(&stream.inline) {
            Some(x) if rpc::msg_type(&stream.inline) == Some(rpc::CALL) => x,
            _ => return Err((BackwardError::NotACall, token)),
        };
        match self.check_backward_call(xid, &stream) {
            Ok(true) => {
                self.counters.inc(Counter::BackwardCreditWaits);
                self.backward_waiting.push_back((xid, stream, token));
                Ok(xid)
            }
            Ok(false) => match self.send_backward(xid, &stream) {
                Ok(()) => {
                    self.backward_calls.insert(xid, token);
                    Ok(xid)
                }
                Err(e) => Err((e, token)),
            },
            Err(e) => Err((e, token)),
        }
    }

    /// Whether backward Call `xid` may go ([`Responder::start_backward_call`]'s
    /// rules), and if so whether it waits for a credit (true) or goes now.
    fn check_backward_call(&self, xid: Xid, stream: &XdrStream) -> Result<bool, BackwardError> {
        let threshold = self.send_threshold_for(self.version);
        let Some(b) = self.backward.as_ref() else {
            return Err(BackwardError::NoChannel);
        };
        // §7.3.1: "An Upper Layer Protocol consumer MUST NOT perform backward direction
        // ONC RPC operations unless the peer consumer has indicated it is prepared to
        // handle them."
        if !self.backward_ready {
            return Err(BackwardError::NotReady);
        }
        // §7.1.4: our backward XIDs are one space; a Reply could not tell two Calls
        // with the same XID apart.
        if self.backward_calls.contains_key(&xid)
            || self.backward_waiting.iter().any(|(x, ..)| *x == xid)
        {
            return Err(BackwardError::DuplicateXid(xid.0));
        }
        // §7.4: a backward Call that does not fit inline is refused now, not when its
        // turn comes.
        marshal_backward(xid, self.version, b.requested(), stream, threshold)?;
        if !self.backward_waiting.is_empty() || b.available() == 0 {
            if self.backward_waiting.len() >= BACKWARD_QUEUE_MAX {
                return Err(BackwardError::Busy);
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Sends the backward Calls that wait, while credits allow.
    fn send_waiting_backward(&mut self) {
        while let Some((xid, stream, token)) = self.backward_waiting.pop_front() {
            let free = self.backward.as_ref().is_some_and(|b| b.available() > 0);
            if !free {
                self.backward_waiting.push_front((xid, stream, token));
                return;
            }
            if self.send_backward(xid, &stream).is_ok() {
                self.backward_calls.insert(xid, token);
            } else {
                // Cannot happen: checked when it was queued, and a credit is free.
                self.counters.inc(Counter::BackwardFailed);
                self.events.push_back(ResponderEvent::BackwardFailed {
                    xid,
                    reason: BackwardError::ConnectionLost,
                    token,
                });
            }
        }
    }

    /// Takes a backward credit and sends backward Call `xid` (its caller keeps its
    /// token in `backward_calls`).
    fn send_backward(&mut self, xid: Xid, stream: &XdrStream) -> Result<(), BackwardError> {
        let threshold = self.send_threshold_for(self.version);
        let Some(b) = self.backward.as_mut() else {
            return Err(BackwardError::NoChannel);
        };
        b.try_acquire().map_err(|_| BackwardError::Busy)?;
        let requested = b.requested();
        // §7.3.4: "The rdma_proc field in the RPC-over-RDMA header MUST contain the value
        // RDMA_MSG. All three chunk lists MUST be empty." In the version the client last
        // used for its Calls.
        match marshal_backward(xid, self.version, requested, stream, threshold) {
            Ok(out) => {
                self.counters.inc(Counter::BackwardCalls);
                self.actions.push_back(Action::Send {
                    xid,
                    send: out.send,
                    invalidate: None,
                });
                Ok(())
            }
            Err(e) => {
                let _ = b.release();
                Err(e.into())
            }
        }
    }

    /// The connection was lost: pending Calls are forgotten (the client retransmits),
    /// our backward Calls fail and backward credits return to the initial state
    /// (§7.3.2: the server waits for the client to reconnect before retransmitting).
    ///
    /// Read chunks exposed for replies are invalidated
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.4.3: "Explicitly invalidating waiting
    /// Read chunks after a connection loss"), and the peer must say again that it takes
    /// backward Calls (§7.3.1).
    pub fn handle_disconnect(&mut self) {
        self.calls.clear();
        self.deferred_reads.clear();
        self.memory_wait = None;
        self.reading_bytes = 0;
        self.reposts = 0;
        self.invalidate_all_pulls();
        self.backward_ready = false;
        self.read_timed_out = false;
        let waiting = self.backward_waiting.drain(..).map(|(x, _, t)| (x, t));
        let lost: Vec<(Xid, T)> = self.backward_calls.drain().chain(waiting).collect();
        self.counters
            .add(Counter::BackwardFailed, lost.len() as u64);
        for (xid, token) in lost {
            self.events.push_back(ResponderEvent::BackwardFailed {
                xid,
                reason: BackwardError::ConnectionLost,
                token,
            });
        }
        if let Some(b) = self.backward.as_mut() {
            b.reset();
        }
    }

    /// Our backward Calls not yet ended: sent and unanswered, or waiting for a
    /// credit.
    pub fn backward_calls(&self) -> usize {
        self.backward_calls.len() + self.backward_waiting.len()
    }

    /// Backward credits, if there is a backward channel.
    pub fn backward_credits(&self) -> Option<&RequesterCredits> {
        self.backward.as_ref()
    }

    /// An RDMA Read for Read chunk `chunk` of Call `xid` completed with `data`.
    pub fn handle_read_done(&mut self, xid: Xid, chunk: usize, data: Bytes) {
        let Some(call) = self.calls.get_mut(&xid) else {
            return;
        };
        if let Some(slot) = call.data.get_mut(chunk) {
            *slot = Some(data);
        }
        if call.data.iter().all(Option::is_some) {
            call.reads_posted = None;
            let read_len = call.read_len;
            self.finish_call(xid);
            self.end_reads(read_len);
        }
    }

    /// The driver posted the RDMA Reads of Read chunk `chunk` of Call `xid`
    /// ([`Action::RdmaRead`]) at `now`. [`ResponderConfig::read_timeout`] runs from
    /// the first of a Call's until its last Read chunk is in
    /// ([`Responder::handle_read_done`]); [`Responder::poll_timeout`] includes it.
    pub fn handle_reads_posted(&mut self, xid: Xid, _chunk: usize, now: Instant) {
        if let Some(call) = self.calls.get_mut(&xid) {
            call.reads_posted.get_or_insert(now);
        }
    }

    /// When the Reads posted longest ago time out, if a read timeout is configured
    /// and none was reported yet; and that Call.
    pub(super) fn read_deadline(&self) -> Option<(Instant, Xid)> {
        let timeout = self.config.read_timeout.filter(|_| !self.read_timed_out)?;
        self.calls
            .iter()
            .filter_map(|(xid, c)| c.reads_posted.map(|t| (t + timeout, *xid)))
            .min()
    }

    /// The read timeout (§5.5.3), from [`Responder::handle_timeout`]: reported once;
    /// the driver closes the connection.
    pub(super) fn expire_reads(&mut self, now: Instant) {
        let Some((deadline, xid)) = self.read_deadline() else {
            return;
        };
        if deadline <= now {
            self.read_timed_out = true;
            let after = self.config.read_timeout.unwrap_or_default();
            self.events
                .push_back(ResponderEvent::ReadTimeout { xid, after });
        }
    }

    /// An RDMA Read failed (Remote Access error, flushed). §5.5.3: "RDMA operational
    /// errors are typically fatal to the connection."
    pub fn handle_read_failed(&mut self, _xid: Xid) {
        self.calls.clear();
        self.actions.push_back(Action::Close);
    }

    /// An RDMA Write or the Send of a Reply (or of an RDMA_ERROR) failed.
    ///
    /// §5.5.4: "If a responder is unable to construct and transmit a Reply or error
    /// message, the responder MUST close the connection to signal to the requester that
    /// a reply was lost."
    pub fn handle_send_failed(&mut self, _xid: Xid) {
        self.calls.clear();
        self.actions.push_back(Action::Close);
    }

    fn finish_call(&mut self, xid: Xid) {
        let Some(call) = self.calls.get_mut(&xid) else {
            return;
        };
        let data: Vec<Bytes> = call
            .data
            .iter_mut()
            .map(|d| d.take().unwrap_or_default())
            .collect();
        // The Payload stream without the data of its normal Read chunks, for the
        // binding's §8.1.1 answer: the inline part, or a Long Call's Position Zero
        // chunk (a Bytes clone, no copy).
        let reduced = match call.chunks.reads.iter().position(|c| c.is_position_zero()) {
            Some(i) => data.get(i).cloned().unwrap_or_default(),
            None => call.inline.clone(),
        };
        let result = reassemble_call(
            call.inline.clone(),
            &call.chunks.reads,
            data,
            &self.config.reassembly,
        );
        let prefix = call.prefix;
        let payload = match result {
            Ok(p) => p,
            Err(e) => return self.garbage_args(prefix, e),
        };
        // The RPC words the checks read (XID, message type, program, version,
        // procedure) are the first 24 bytes.
        let head = payload_head(&payload);
        // For a Long Call the XID is checked only now (§5.2.1: "This XID MUST be the
        // same as the XID in the RPC message").
        if call.chunks.position_zero().is_some() {
            if let Some(px) = rpc::xid(&head).filter(|&px| px != xid) {
                self.calls.remove(&xid);
                self.reposts += 1;
                let err = HeaderError::XidMismatch {
                    header: xid,
                    payload: px,
                };
                return self.refuse(Some(prefix), err);
            }
        }
        let reads_not_p0 = call
            .chunks
            .reads
            .iter()
            .filter(|c| !c.is_position_zero())
            .count();
        if let Some(proc_id) = rpc::call_proc(&head) {
            // RFC 5531 §9: a program or version not served gets PROG_UNAVAIL or
            // PROG_MISMATCH from RPC, over RDMA as over TCP (a Linux mount over RDMA
            // probes NFSv4 first and waits for that answer).
            let served = self.config.served.is_empty()
                || self.config.served.contains(&(proc_id.prog, proc_id.vers));
            if !self.config.served.is_empty() && !served {
                self.counters.inc(Counter::UnservedCalls);
            }
            let bound = self.ulb.binds(proc_id.prog, proc_id.vers);
            // §8: "Responders MUST NOT reply to RPC-over-RDMA messages for Upper Layer
            // Protocols that do not have a Upper Layer Binding": a program served
            // without a binding (MOUNT, RFC 8267 §6) gets nothing.
            if served && !bound && !self.config.served.is_empty() {
                self.counters.inc(Counter::ErrNoBinding);
                if self.calls.remove(&xid).is_some() {
                    self.reposts += 1;
                }
                return;
            }
            // §8.1.1: "A DDP-eligibility violation occurs when a requester forms a Call
            // message with a non-DDP-eligible data item in a Read chunk ... a responder
            // MUST NOT process the Call message." Reported per §5.5.2: GARBAGE_ARGS.
            // Each normal Read chunk must sit where the binding says a DDP-eligible
            // argument is, by XDR position, not merely be no more numerous than them.
            if served && reads_not_p0 > 0 {
                let eligible = if bound {
                    self.ulb.call_ddp_positions(proc_id, &reduced)
                } else {
                    None
                };
                let misplaced = call.chunks.reads.iter().find(|c| {
                    !c.is_position_zero()
                        && !eligible.as_ref().is_some_and(|p| p.contains(&c.position))
                });
                if let Some(c) = misplaced {
                    let err = ArgsError::NotDdpEligible {
                        position: c.position,
                    };
                    return self.garbage_args(prefix, err);
                }
            }
        }
        self.events.push_back(ResponderEvent::Call {
            xid,
            version: prefix.version,
            payload,
        });
    }

    fn refuse_prefix(&mut self, prefix: Prefix, err: HeaderError) {
        self.refuse(Some(prefix), err);
    }

    fn garbage_args(&mut self, prefix: Prefix, err: ArgsError) {
        // §5.5.2: "the responder SHOULD return a RPC_GARBAGEARGS reply, using an
        // RDMA_MSG procedure."
        self.counters.inc(Counter::ErrGarbageArgs);
        let reply = XdrStream::inline_only(rpc::garbage_args_reply(prefix.xid));
        let _ = self.send_reply(prefix.xid, reply);
        self.events.push_back(ResponderEvent::Refused {
            xid: Some(prefix.xid),
            error: err.into(),
            answer: WireAnswer::GarbageArgs,
        });
    }

    /// Sends the Reply to Call `xid`: RDMA Writes for its Write chunks (and Reply
    /// chunk), then the Send, granting credits; the Call's Receive goes back first.
    ///
    /// v2 draft §5.3: "a responder MUST send Replies with the same RPC-over-RDMA protocol
    /// version that the requester uses to send its Calls." If the reply cannot be sent
    /// (§5.5.3: a Reply chunk too small, none at all, a result larger than its Write
    /// chunk), RDMA_ERROR/ERR_BADHEADER goes instead, "to indicate that no RPC-level
    /// reply is possible for that XID", and the error is returned. Nothing is written.
    pub fn send_reply(&mut self, xid: Xid, stream: XdrStream) -> Result<(), Error> {
        let Some(call) = self.calls.remove(&xid) else {
            return Err(HeaderError::UnknownXid(xid).into());
        };
        let grant = self.credits.grant();
        self.counters.set(Counter::CreditsGranted, u64::from(grant));
        self.counters
            .set(Counter::Version, u64::from(call.prefix.version.0));
        // v1 §4.3.3 / v2 §2.3: without a discovery mechanism, assume the version's
        // default inline threshold.
        let send_threshold = self.send_threshold_for(call.prefix.version);
        match marshal_reply(
            xid,
            call.prefix.version,
            grant,
            &stream,
            &call.chunks,
            send_threshold,
            self.config.peer.is_some_and(|p| p.remote_invalidate),
        ) {
            Ok(out) => {
                if let Some(ch) = out.send.chunks() {
                    let used = ch.writes.iter().filter(|w| !w.is_empty()).count();
                    self.counters.add(Counter::WriteChunks, used as u64);
                }
                if out.send.shape == Shape::Long {
                    self.counters.inc(Counter::ReplyChunks);
                }
                for w in out.writes {
                    self.actions.push_back(Action::RdmaWrite { xid, write: w });
                }
                self.reposts += 1;
                self.counters.inc(Counter::Replies);
                self.actions.push_back(Action::Send {
                    xid,
                    send: out.send.send,
                    invalidate: out.invalidate,
                });
                Ok(())
            }
            Err(
                MarshalError::NoReplyChunk { .. }
                | MarshalError::ReplyChunkTooSmall { .. }
                | MarshalError::HeaderTooLarge { .. },
            ) if self.reliable_reply_on(call.prefix.version) => {
                // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.1: "A responder MUST send
                // a Position Zero Read chunk when the actual size of the RPC Reply's
                // Payload stream exceeds all requester-provided reply resources".
                self.reply_through_read_chunk(call.prefix, &call.chunks, &stream)
            }
            Err(e) => {
                match e {
                    MarshalError::ReplyChunkTooSmall { .. } | MarshalError::NoReplyChunk { .. } => {
                        self.counters.inc(Counter::ErrReplyChunkTooSmall)
                    }
                    MarshalError::WriteChunkTooSmall { .. } => {
                        self.counters.inc(Counter::ErrWriteChunkTooSmall)
                    }
                    _ => {}
                }
                self.no_reply_possible(&call.prefix);
                Err(e.into())
            }
        }
    }

    /// v1 §5.5.3: "RDMA_ERROR ... RDMA_ERR_BADHEADER to indicate that no RPC-level
    /// reply is possible for that XID". The Call's Receive goes back.
    fn no_reply_possible(&mut self, prefix: &Prefix) {
        self.counters.inc(Counter::ErrRdmaErrorSent);
        self.counters.inc(Counter::ErrBadHeader);
        self.reposts += 1;
        let h = Header::error_reply(prefix, self.credits.grant(), ErrorBody::BadHeader);
        self.actions.push_back(Action::Send {
            xid: prefix.xid,
            send: vec![h.to_bytes()],
            invalidate: None,
        });
    }

    /// Gives up on Call `xid` without replying (the upper layer dropped it, or §8):
    /// its Receive goes back.
    pub fn drop_call(&mut self, xid: Xid) {
        if self.calls.remove(&xid).is_some() {
            self.reposts += 1;
            self.counters.inc(Counter::ErrDiscarded);
        }
    }
}

/// The first 24 bytes of a Payload stream (fewer if it is shorter): the RPC words the
/// responder reads.
fn payload_head(payload: &Reassembled) -> Bytes {
    match payload.parts.first() {
        Some(p) if p.len() >= 24 || payload.parts.len() == 1 => p.clone(),
        _ => {
            // COPY: at most 24 bytes, when the RPC header straddles pieces.
            let mut head = Vec::with_capacity(24);
            for p in &payload.parts {
                let need = 24 - head.len();
                head.extend_from_slice(&p[..need.min(p.len())]);
                if head.len() == 24 {
                    break;
                }
            }
            Bytes::from(head)
        }
    }
}

/// The driver's view of a responder ([`Endpoint`]): its own methods; the Reads it
/// posts need no fenced bytes kept, and its regions' invalidation needs no answer.
impl<B: UpperLayerBinding, T> Endpoint for Responder<B, T> {
    type Event = ResponderEvent<T>;

    fn poll_reposts(&mut self) -> u32 {
        Responder::poll_reposts(self)
    }

    fn poll_action(&mut self) -> Option<Action> {
        Responder::poll_action(self)
    }

    fn poll_event(&mut self) -> Option<ResponderEvent<T>> {
        Responder::poll_event(self)
    }

    fn handle_receive(&mut self, buf: Bytes) {
        Responder::handle_receive(self, buf);
    }

    fn handle_receives_posted(&mut self, n: u32) {
        Responder::handle_receives_posted(self, n);
    }

    fn handle_registered(
        &mut self,
        now: Instant,
        xid: Xid,
        segments: Vec<Vec<crate::chunks::Segment>>,
    ) -> Result<(), Error> {
        Responder::handle_registered(self, now, xid, segments)
    }

    fn handle_registration_failed(&mut self, xid: Xid) {
        Responder::handle_registration_failed(self, xid);
    }

    fn handle_reads_posted(&mut self, xid: Xid, chunk: usize, now: Instant) {
        Responder::handle_reads_posted(self, xid, chunk, now);
    }

    fn handle_read_done(&mut self, xid: Xid, chunk: usize, data: Bytes) {
        Responder::handle_read_done(self, xid, chunk, data);
    }

    fn handle_read_failed(&mut self, xid: Xid) {
        Responder::handle_read_failed(self, xid);
    }

    fn wants_placed(&self, _xid: Xid, _handle: u32) -> bool {
        false
    }

    fn handle_invalidated(&mut self, _xid: Xid, _handle: u32) {}

    fn poll_timeout(&self) -> Option<Instant> {
        Responder::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        Responder::handle_timeout(self, now);
    }

    fn memory_wait(&self) -> Option<(&Arc<MemoryBudget>, u64)> {
        Responder::memory_wait(self)
    }

    fn handle_memory_released(&mut self) {
        Responder::handle_memory_released(self);
    }

    fn waiting(&self, now: Instant) -> Waiting {
        Responder::waiting(self, now)
    }

    fn handle_disconnect(&mut self) {
        Responder::handle_disconnect(self);
    }
}

mod reliable;

#[cfg(test)]
mod tests;
