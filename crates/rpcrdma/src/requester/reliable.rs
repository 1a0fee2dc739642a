//! The requester's Version Two optional features, Replies pulled from
//! responder-provided Read chunks, aborted Calls, and version memory across
//! connections.
//!
//! Specs: rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1, §5.2;
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2, §4.1.3, §4.1.4, §5.1.3, §6.
//!
//! ```text
//! first non-error v2 Reply ──► RDMA_OPTIONAL(RELIABLE_REPLY) (takes a credit)
//!   RDMA_OPTIONAL(RELIABLE_REPLY) back ──► On: Calls carry no Reply chunk
//!   RDMA_ERROR (ERR_INVAL_OPTION) back ──► Refused: Reply chunks as before
//! RDMA_NOMSG {read list: P0 chunk} ──► credit back, RdmaRead(xid, 0, segments)
//!   handle_read_done ──► Send RDMA_DONE (With Invalidate when both allow), Reply event
//!   unknown XID (aborted Call) ──► Send RDMA_DONE at once, nothing read
//! ```

use bytes::Bytes;

use super::{PlacedHandles, Requester, RequesterConfig, RequesterEvent};
use crate::action::Action;
use crate::chunks::{ChunkLists, Segment};
use crate::error::{HeaderError, ReplyError};
use crate::header::{Body, ErrorBody, Header, Prefix, PrefixView};
use crate::options::{ReliableReplyInfo, RELIABLE_REPLY};
use crate::reassembly::written_lengths;
use crate::stats::Counter;
use crate::ulb::UpperLayerBinding;
use crate::validate::error_reply_for;
use crate::version::Negotiation;
use crate::wire::{OptType, Version, Xid};

/// Where the reliable-reply exchange stands on this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReliableState {
    /// Not advertised (Version Two not settled yet, or not configured).
    NotYet,
    /// Our RDMA_OPTIONAL went out with this XID.
    Advertising { xid: Xid },
    /// Both peers support it; what the responder said.
    On { peer: ReliableReplyInfo },
    /// The responder answered ERR_INVAL_OPTION (or anything but the option).
    Refused,
}

/// A Reply being pulled.
#[derive(Debug, Clone)]
pub(super) struct PendingPull {
    /// The responder's STags (for Send With Invalidate).
    handles: Vec<u32>,
    /// Bytes of the Read chunk.
    len: u64,
    /// What the responder wrote into our Write chunks.
    write_lengths: Vec<u64>,
}

fn distinct_handles(segments: &[Segment]) -> Vec<u32> {
    let mut h: Vec<u32> = Vec::with_capacity(segments.len());
    for s in segments {
        if !h.contains(&s.handle) {
            h.push(s.handle);
        }
    }
    h
}

impl<B: UpperLayerBinding> Requester<B> {
    /// A new connection to a responder we talked to before: `negotiation` is what
    /// [`Requester::next_connection`] returned on the previous connection. The
    /// transport keeps it per server, so that a responder which answered ERR_VERS (or
    /// lost the probe) is not probed again (v2 §5.2: "a requester can avoid a possible
    /// version negotiation loop when re-establishing another connection by assuming
    /// that particular responder does not support RPC-over-RDMA Version Two").
    pub fn resume(ulb: B, config: RequesterConfig, negotiation: Negotiation) -> Self {
        let mut r = Requester::new(ulb, config);
        r.negotiation = negotiation;
        r
    }

    /// What to remember about this responder for the next connection (see
    /// [`Requester::resume`]).
    pub fn next_connection(&self) -> Negotiation {
        self.negotiation.next_connection()
    }

    /// True when Replies may come through responder-provided Read chunks, so Calls
    /// carry no Reply chunk.
    pub fn reliable_reply_on(&self) -> bool {
        matches!(self.reliable, ReliableState::On { .. })
            && self.negotiation == Negotiation::Settled(Version::TWO)
    }

    /// What the responder said about reliable reply, once both support it.
    pub fn reliable_reply_peer(&self) -> Option<ReliableReplyInfo> {
        match self.reliable {
            ReliableState::On { peer } => Some(peer),
            _ => None,
        }
    }

    /// Replies being pulled from responder-provided Read chunks.
    pub fn pending_pulls(&self) -> usize {
        self.pulls.len()
    }

    /// After a non-error Version Two Reply to `xid`: advertise reliable reply once
    /// (see [`crate::options`] for the exchange). The message takes a credit, as a
    /// Call would; the answer returns it.
    pub(super) fn maybe_advertise(&mut self, xid: Xid) {
        let Some(ours) = self.config.reliable_reply else {
            return;
        };
        if self.reliable != ReliableState::NotYet
            || self.negotiation != Negotiation::Settled(Version::TWO)
            || self.credits.try_acquire().is_err()
        {
            return;
        }
        self.reliable = ReliableState::Advertising { xid };
        let h = Header {
            xid,
            version: Version::TWO,
            credits: self.credits.requested(),
            body: Body::Optional {
                opttype: RELIABLE_REPLY,
                optinfo: ours.to_bytes(),
            },
        };
        self.actions.push_back(Action::Send {
            xid,
            send: vec![h.to_bytes()],
            invalidate: None,
        });
    }

    /// A received RDMA_OPTIONAL of a type we listed.
    pub(super) fn handle_optional(&mut self, prefix: Prefix, opttype: OptType, optinfo: Bytes) {
        let ReliableState::Advertising { xid } = self.reliable else {
            // Unsolicited: nothing to do with it.
            self.counters.inc(Counter::ErrDiscarded);
            return;
        };
        if opttype != RELIABLE_REPLY || prefix.xid != xid || prefix.version != Version::TWO {
            self.counters.inc(Counter::ErrDiscarded);
            return;
        }
        match ReliableReplyInfo::parse(&optinfo) {
            Some(peer) => {
                self.reliable = ReliableState::On { peer };
                self.counters.set(Counter::ReliableReply, 1);
                let _ = self.credits.handle_reply(prefix.credits);
            }
            None => {
                self.reliable = ReliableState::Refused;
                let _ = self.credits.release();
            }
        }
    }

    /// An RDMA_ERROR answering our advertisement: the feature is off. True if it was.
    pub(super) fn handle_option_refused(&mut self, prefix: &Prefix, body: &ErrorBody) -> bool {
        let ReliableState::Advertising { xid } = self.reliable else {
            return false;
        };
        if prefix.xid != xid
            || (*body != ErrorBody::InvalOption && self.calls.contains_key(&prefix.xid))
        {
            return false;
        }
        self.reliable = ReliableState::Refused;
        let _ = self.credits.release();
        true
    }

    /// v2 §3.1: an RDMA_OPTIONAL of a type we do not support gets ERR_INVAL_OPTION.
    pub(super) fn refuse_option(&mut self, buf: &Bytes, err: &HeaderError) {
        let Ok(view) = PrefixView::new_checked(&buf[..]) else {
            return;
        };
        let prefix = view.prefix();
        if let Some(h) =
            error_reply_for(&prefix, err, self.credits.requested(), &self.config.policy)
        {
            self.counters.inc(Counter::ErrRdmaErrorSent);
            self.actions.push_back(Action::Send {
                xid: prefix.xid,
                send: vec![h.to_bytes()],
                invalidate: None,
            });
        }
    }

    /// Sends pull completion for `xid` (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3):
    /// Version Two RDMA_DONE, 16 bytes, no credit taken (the responder reserved a Receive
    /// for it, see `ResponderCredits::reserve_for_done`).
    ///
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.4: "If Remote Invalidation support is
    /// indicated by both peers, messages carrying pull completion messages SHOULD be
    /// transmitted using RDMA Send With Invalidate." and "the requester MUST present only
    /// that R_key": used only when the chunk has exactly one STag.
    fn send_done(&mut self, xid: Xid, handles: &[u32]) {
        if self.config.fault_skip_rdma_done {
            self.counters.inc(Counter::RdmaDoneSkipped);
            return;
        }
        self.counters.inc(Counter::RdmaDone);
        let both = self
            .config
            .reliable_reply
            .is_some_and(|i| i.remote_invalidate)
            && self
                .reliable_reply_peer()
                .is_some_and(|i| i.remote_invalidate);
        let invalidate = match handles {
            [only] if both => Some(*only),
            _ => None,
        };
        let h = Header {
            xid,
            version: Version::TWO,
            credits: self.credits.requested(),
            body: Body::Done,
        };
        self.actions.push_back(Action::Send {
            xid,
            send: vec![h.to_bytes()],
            invalidate,
        });
    }

    /// An RDMA_NOMSG with a Position Zero Read chunk: a Reply in a responder-provided
    /// Read chunk. Returns false to let the ordinary Reply path fail it.
    pub(super) fn handle_read_chunk_reply(&mut self, prefix: Prefix, chunks: &ChunkLists) -> bool {
        let xid = prefix.xid;
        let Some(p0) = chunks.position_zero() else {
            return false;
        };
        let handles = distinct_handles(&p0.segments);
        if prefix.version != Version::TWO {
            return false;
        }
        if !matches!(self.reliable, ReliableState::On { .. }) {
            // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3: "If a requester receives an
            // RPC Reply via a responder-provided Read chunk, but does not support such
            // chunks, it MUST inform the responder of pull completion and terminate the RPC
            // transaction."
            self.send_done(xid, &handles);
            return false;
        }
        let Some(call) = self.calls.get(&xid) else {
            // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3: "If a requester receives a
            // reply bearing a Position Zero Read chunk and does not recognize the XID, the
            // requester MUST notify the responder of pull completion."
            self.counters.inc(Counter::RdmaDoneUnknownXid);
            self.send_done(xid, &handles);
            return true;
        };
        if call.aborted {
            // The same for a Call the upper layer gave up on: nothing is read, and its
            // credit returns with the grant this Reply carries.
            self.calls.remove(&xid);
            let _ = self.credits.handle_reply(prefix.credits);
            self.counters.inc(Counter::RdmaDoneUnknownXid);
            self.send_done(xid, &handles);
            return true;
        }
        if p0.len() > self.config.max_pulled_reply {
            self.send_done(xid, &handles);
            self.bad_reply(xid, ReplyError::PullTooLarge(p0.len()).into());
            return true;
        }
        if call.version != prefix.version {
            // v2 §5.3: Replies come in the version of their Call (see `handle_reply`);
            // pull completion is still owed for the exposed chunk (§4.1.3).
            self.send_done(xid, &handles);
            self.counters.inc(Counter::ErrReplyVersion);
            self.bad_reply(xid, HeaderError::UnsupportedVersion(prefix.version).into());
            return true;
        }
        let malformed =
            chunks.reads.len() != 1 || chunks.reply.as_ref().is_some_and(|c| !c.is_empty());
        let write_lengths = match written_lengths(&call.chunks.writes, &chunks.writes) {
            Ok(l) if !malformed => l,
            Ok(_) => {
                self.send_done(xid, &handles);
                self.bad_reply(xid, HeaderError::ReadListInReply.into());
                return true;
            }
            Err(e) => {
                self.send_done(xid, &handles);
                self.bad_reply(xid, e.into());
                return true;
            }
        };
        // The RDMA_NOMSG is the Reply: its credit grant counts now (v1 §4.3.1).
        let _ = self.credits.handle_reply(prefix.credits);
        self.counters
            .set(Counter::CreditsGranted, u64::from(prefix.credits));
        let (n, _) = self.negotiation.handle_reply(xid, None);
        self.negotiation = n;
        self.pulls.insert(
            xid,
            PendingPull {
                handles,
                len: p0.len(),
                write_lengths,
            },
        );
        // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2: "Upon receipt of an RDMA_NOMSG
        // message containing a Position Zero Read chunk, the requester pulls the RPC
        // Reply's Payload stream from the responder."
        self.actions.push_back(Action::RdmaRead {
            xid,
            chunk: 0,
            segments: p0.segments.clone(),
        });
        true
    }

    /// The RDMA Read of the responder-provided Read chunk of `xid` completed with
    /// `data` (the Reply's whole Payload stream, DDP-eligible results excepted).
    /// Sends pull completion, then delivers the Reply (its `inline` is `data`) unless
    /// the Call was aborted meanwhile.
    pub fn handle_read_done(&mut self, xid: Xid, _chunk: usize, data: Bytes) {
        let Some(pull) = self.pulls.remove(&xid) else {
            return;
        };
        self.counters
            .add(Counter::ChunkBytesReceived, data.len() as u64);
        // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2: "After RDMA Read operations
        // have completed (successfully or in error), the requester MUST inform the
        // responder that it may invalidate the Read chunk containing the RPC Reply
        // message."
        self.send_done(xid, &pull.handles);
        if !self.calls.contains_key(&xid) {
            return;
        }
        if data.len() as u64 != pull.len {
            self.counters.inc(Counter::ErrBadReply);
            return self.complete(
                xid,
                RequesterEvent::Failed {
                    xid,
                    error: ReplyError::PullFailed.into(),
                },
            );
        }
        self.counters.inc(Counter::PulledReplies);
        self.counters.inc(Counter::Replies);
        let call = self.calls.get(&xid);
        let proc_id = call.and_then(|c| crate::rpc::call_proc(&c.stream.inline));
        let placed = call
            .map(|c| PlacedHandles::of(&c.chunks))
            .unwrap_or_default();
        self.complete(
            xid,
            RequesterEvent::Reply {
                xid,
                inline: data,
                reply_chunk_len: None,
                write_lengths: pull.write_lengths,
                proc_id,
                placed,
            },
        );
    }

    /// The RDMA Read of a responder-provided Read chunk failed: pull completion is still
    /// sent (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2, "successfully or in error")
    /// and the Call fails.
    pub fn handle_read_failed(&mut self, xid: Xid) {
        let Some(pull) = self.pulls.remove(&xid) else {
            return;
        };
        self.counters.inc(Counter::PullsFailed);
        self.send_done(xid, &pull.handles);
        if self.calls.contains_key(&xid) {
            self.complete(
                xid,
                RequesterEvent::Failed {
                    xid,
                    error: ReplyError::PullFailed.into(),
                },
            );
        }
    }

    /// The upper layer gives up on Call `xid` (the application went away): its own
    /// registrations are invalidated now and no event follows. Its credit stays taken
    /// until the Reply (or RDMA_ERROR) comes, because the responder holds the Receive the
    /// Call used until it answers (§4.3.1); that Reply then only returns the credit, and
    /// one that comes in a responder-provided Read chunk still gets its RDMA_DONE, unread
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3), so the connection survives
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.1.3: "The transport connection is
    /// preserved because no memory protection violation can occur"). Returns false if no
    /// such Call was outstanding (or it was aborted already). A Call still waiting for a
    /// credit ([`Requester::submit_call`]) is just forgotten.
    ///
    /// A Call that offered Write or Reply chunks loses them now; a responder writing into
    /// them afterwards hits an invalid STag, which costs the connection: that is the case
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.1.3 says responder-provided Read chunks
    /// avoid.
    pub fn abort_call(&mut self, xid: Xid) -> bool {
        if let Some(i) = self.waiting.iter().position(|(x, _)| *x == xid) {
            // Never sent (it waited for a credit): nothing to fence, no credit taken.
            self.waiting.remove(i);
            self.counters.inc(Counter::CallsAborted);
            return true;
        }
        let being_pulled = self.pulls.contains_key(&xid);
        let Some(call) = self.calls.get_mut(&xid).filter(|c| !c.aborted) else {
            return false;
        };
        self.counters.inc(Counter::CallsAborted);
        let handles = std::mem::take(&mut call.chunks).handles();
        if being_pulled {
            // Its credit came back with the RDMA_NOMSG; the pull finishes (and sends
            // RDMA_DONE) with nothing delivered.
            self.calls.remove(&xid);
        } else {
            call.aborted = true;
        }
        if !handles.is_empty() {
            self.actions.push_back(Action::Invalidate { xid, handles });
        }
        true
    }

    /// Asks the driver to post the Receives for backward-direction Calls (§7.2.2.1:
    /// "an RPC-over-RDMA client endpoint must pre-post enough additional receive
    /// buffers to match its advertised backward direction credit value"). Call it
    /// before the upper layer tells the server it takes backward Calls. Returns the
    /// number asked for (0 without a backward channel).
    pub fn open_backward_channel(&mut self) -> u32 {
        let Some(b) = self.backward.as_mut() else {
            return 0;
        };
        let n = b.grant();
        self.actions.push_back(Action::PostBackwardReceives(n));
        n
    }
}
