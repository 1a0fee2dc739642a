//! The responder's Version Two optional features (the registry dispatch), responder-
//! provided Read chunks, and the backward-channel gate.
//!
//! Specs: rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1;
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1, §5.2.3, §5.4.3;
//! rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7.2.2, §7.3.1.
//!
//! # A Reply through a responder-provided Read chunk
//! ```text
//! send_reply ── marshal_reply: no room inline, no (big enough) Reply chunk
//!     └─ feature negotiated, Call in v2 ─► reserve a Receive for the RDMA_DONE
//!        ◄── poll_action: RdmaWrite* (Write chunks), Register{Read, position 0}
//! handle_registered(now, xid, segments) ──► RDMA_NOMSG {read list: P0 chunk}
//!        ◄── poll_action: Send                pull table: xid -> (STags, now + timeout)
//! handle_receive(RDMA_DONE xid) ──► Invalidate (driver skips an STag the Send With
//!                                   Invalidate already took), Receive back in grant
//! handle_timeout(now) / handle_disconnect ──► Invalidate what is still exposed
//! ```

use std::time::Instant;

use bytes::Bytes;
use xdr::XdrStream;

use super::Responder;
use crate::action::Action;
use crate::chunks::{ChunkLists, Segment};
use crate::error::{Error, HeaderError, MarshalError};
use crate::header::{Body, Header, Prefix, PrefixView};
use crate::marshal::plan_reply_read_chunk;
use crate::options::{lookup, Feature, ReliableReplyInfo, RELIABLE_REPLY};
use crate::stats::Counter;
use crate::ulb::UpperLayerBinding;
use crate::version::default_inline_threshold;
use crate::wire::{MsgType, OptType, Version, Xid};

fn distinct_handles(segments: &[Segment]) -> Vec<u32> {
    let mut h: Vec<u32> = Vec::with_capacity(segments.len());
    for s in segments {
        if !h.contains(&s.handle) {
            h.push(s.handle);
        }
    }
    h
}

impl<B: UpperLayerBinding, T> Responder<B, T> {
    /// True when a Reply to a Call of `version` may use a responder-provided Read chunk: we
    /// offer the feature, the requester advertised it, and the Call is in Version Two
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §6: "MUST be used only when both peers
    /// support them").
    pub(super) fn reliable_reply_on(&self, version: Version) -> bool {
        version == Version::TWO
            && self.config.reliable_reply.is_some()
            && self.reliable_peer.is_some()
    }

    /// What the requester advertised for reliable reply, once accepted.
    pub fn reliable_reply_peer(&self) -> Option<ReliableReplyInfo> {
        self.reliable_peer
    }

    /// Replies exposed through Read chunks and not yet pulled (or registering).
    pub fn pending_pulls(&self) -> usize {
        self.pulls.len() + self.registering.len() + self.waiting_replies.len()
    }

    /// An RDMA_DONE we must handle ourselves (not refuse as v1 §5.6.2 says): Version
    /// Two, and the feature is on.
    pub(super) fn is_pull_completion(&self, buf: &Bytes) -> bool {
        self.reliable_peer.is_some()
            && PrefixView::new_checked(&buf[..])
                .is_ok_and(|v| v.msg_type() == MsgType::RDMA_DONE && v.version() == Version::TWO)
    }

    pub(super) fn handle_done(&mut self, buf: &Bytes) {
        // §5.2.3 (our choice, see `ResponderCredits::reserve_for_done`): the RDMA_DONE
        // used a Receive reserved for it, which goes back at once.
        self.reposts += 1;
        let Ok(view) = PrefixView::new_checked(&buf[..]) else {
            return;
        };
        let xid = view.xid();
        // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3: "Whenever a responder receives
        // a pull completion notification for an XID for which there is no Read chunk
        // waiting to be invalidated, the responder MUST silently drop the notification."
        let Some(handles) = self.pulls.complete(xid) else {
            self.counters.inc(Counter::RdmaDoneDropped);
            if self.expired_pulls.remove(&xid) {
                // Late, after the pull timeout invalidated the chunk: the Receive held
                // for it is free again.
                self.end_reservation();
            }
            return;
        };
        self.counters.inc(Counter::RdmaDone);
        // The reservation made for this RDMA_DONE ends: its Receive goes back into
        // the grant.
        self.end_reservation();
        // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.4.3: "the responder matches the XID
        // in the message to a waiting reply buffer, invalidates that buffer, and removes
        // the XID from the data structure." An STag the requester invalidated with Send
        // With Invalidate is skipped by the driver (see `Action::Invalidate`).
        self.actions.push_back(Action::Invalidate { xid, handles });
    }

    /// An RDMA_OPTIONAL the policy let through: dispatch on the registry.
    pub(super) fn handle_optional(&mut self, prefix: Prefix, opttype: OptType, optinfo: Bytes) {
        match lookup(opttype).map(|r| r.feature) {
            Some(Feature::ReliableReply) if prefix.version == Version::TWO => {
                if let (Some(ours), Some(theirs)) = (
                    self.config.reliable_reply,
                    ReliableReplyInfo::parse(&optinfo),
                ) {
                    // The advertisement took a Receive like a Call: it goes back before
                    // the answer carries the grant.
                    self.reposts += 1;
                    self.reliable_peer = Some(theirs);
                    self.counters.set(Counter::ReliableReply, 1);
                    let grant = self.credits.grant();
                    let answer = Header {
                        xid: prefix.xid,
                        version: Version::TWO,
                        credits: grant,
                        body: Body::Optional {
                            opttype: RELIABLE_REPLY,
                            optinfo: ReliableReplyInfo {
                                remote_invalidate: ours.remote_invalidate,
                            }
                            .to_bytes(),
                        },
                    };
                    self.actions.push_back(Action::Send {
                        xid: prefix.xid,
                        send: vec![answer.to_bytes()],
                        invalidate: None,
                    });
                    return;
                }
            }
            _ => {}
        }
        // v2 §3.1: "When an implementation does not recognize or support the value
        // contained in the rdma_opttype field, it MUST send ... RDMA_ERR_INVAL_OPTION."
        self.reposts += 1;
        self.refuse_prefix(prefix, HeaderError::UnknownOption(opttype));
    }

    pub(super) fn send_threshold_for(&self, version: Version) -> u32 {
        self.config
            .peer
            .map_or(default_inline_threshold(version), |p| p.send_threshold)
    }

    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.1: the Reply exceeds every reply
    /// resource; expose it.
    pub(super) fn reply_through_read_chunk(
        &mut self,
        prefix: Prefix,
        call_chunks: &ChunkLists,
        stream: &XdrStream,
    ) -> Result<(), Error> {
        let xid = prefix.xid;
        let plan = match plan_reply_read_chunk(xid, prefix.version, stream, call_chunks) {
            Ok(p) => p,
            Err(e) => {
                self.no_reply_possible(&prefix);
                return Err(e.into());
            }
        };
        if self.credits.reserve_for_done().is_err() {
            if !self.pulls.is_empty() || !self.registering.is_empty() {
                // Every spare Receive is held for an RDMA_DONE still to come; that
                // RDMA_DONE (or the timeout) frees one, and this Reply goes then. Its
                // Call keeps its own Receive meanwhile.
                self.counters.inc(Counter::PullsDeferred);
                self.waiting_replies
                    .push_back((prefix, call_chunks.clone(), stream.clone()));
                return Ok(());
            }
            // Fewer than two Receives posted: a Read chunk can never be afforded.
            // draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.1: "If a responder does not
            // support responder-provided Read chunks in this case, it MUST return an
            // appropriate permanent transport error".
            self.no_reply_possible(&prefix);
            return Err(MarshalError::PullsExhausted.into());
        }
        for w in &plan.writes {
            self.actions.push_back(Action::RdmaWrite {
                xid,
                write: w.clone(),
            });
        }
        self.actions.push_back(Action::Register {
            xid,
            registrations: vec![plan.registration.clone()],
        });
        // COPY: none; the plan holds `Bytes` handles of the upper layer's stream.
        self.registering.insert(xid, (plan, prefix));
        Ok(())
    }

    /// The driver registered (read-only) the Payload stream of the Reply to `xid` as
    /// `segments`: the RDMA_NOMSG with the Position Zero Read chunk goes out, and the
    /// chunk stays exposed until RDMA_DONE, `now + pull_timeout`, or a disconnect.
    ///
    /// For an `xid` we no longer wait for (the connection was lost meanwhile), the
    /// segments are invalidated at once and [`HeaderError::UnknownXid`] returned.
    pub fn handle_registered(
        &mut self,
        now: Instant,
        xid: Xid,
        segments: Vec<Vec<Segment>>,
    ) -> Result<(), Error> {
        let segments: Vec<Segment> = segments.into_iter().flatten().collect();
        let handles = distinct_handles(&segments);
        let Some((plan, prefix)) = self.registering.remove(&xid) else {
            if !handles.is_empty() {
                self.actions.push_back(Action::Invalidate { xid, handles });
            }
            return Err(HeaderError::UnknownXid(xid).into());
        };
        // The grant goes out lowered by the reservation made for this RDMA_DONE.
        let grant = self.credits.grant();
        self.counters.set(Counter::CreditsGranted, u64::from(grant));
        let threshold = self.send_threshold_for(prefix.version);
        match plan.finish(grant, segments, threshold) {
            Ok(out) => {
                let timeout = self.config.reliable_reply.unwrap_or_default().pull_timeout;
                if let Some(old) = self.pulls.insert(xid, handles, now + timeout) {
                    // A second Reply for the XID replaces the first: the first's
                    // reservation and exposure end now.
                    self.end_reservation();
                    self.actions
                        .push_back(Action::Invalidate { xid, handles: old });
                }
                self.counters.inc(Counter::PulledReplies);
                self.counters.inc(Counter::PositionZeroReadChunks);
                self.counters.inc(Counter::Replies);
                // The Call's Receive goes back before the RDMA_NOMSG carries the grant.
                self.reposts += 1;
                self.actions.push_back(Action::Send {
                    xid,
                    send: out.send,
                    invalidate: None,
                });
                Ok(())
            }
            Err(e) => {
                self.end_reservation();
                if !handles.is_empty() {
                    self.actions.push_back(Action::Invalidate { xid, handles });
                }
                self.no_reply_possible(&prefix);
                Err(e.into())
            }
        }
    }

    /// Registering the Reply's Payload stream failed. v1 §5.5.4: "If a responder is
    /// unable to construct and transmit a Reply or error message, the responder MUST
    /// close the connection".
    pub fn handle_registration_failed(&mut self, xid: Xid) {
        if self.registering.remove(&xid).is_some() {
            self.credits.release_done_reservation();
        }
        self.actions.push_back(Action::Close);
    }

    /// A Receive reserved for an RDMA_DONE is free again: a Reply waiting for one
    /// goes now.
    fn end_reservation(&mut self) {
        self.credits.release_done_reservation();
        if let Some((prefix, chunks, stream)) = self.waiting_replies.pop_front() {
            let _ = self.reply_through_read_chunk(prefix, &chunks, &stream);
        }
    }

    /// When [`Responder::handle_timeout`] wants to be called next: the first pull
    /// deadline, the retry of a refused credit growth, or the read timeout of the
    /// Call whose RDMA Reads were posted longest ago.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let reads = self.read_deadline().map(|(t, _)| t);
        [self.pulls.poll_timeout(), self.growth_retry_at, reads]
            .into_iter()
            .flatten()
            .min()
    }

    /// Time passed: Read chunks whose pull completion did not come in time are invalidated
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3: "To prevent exhaustion of
    /// responder resources, a responder can choose to invalidate its Read chunks after
    /// waiting for a short period. If the requester attempts additional RDMA Read
    /// operations against that Read chunk, a remote access error occurs and the connection
    /// is lost."). A late RDMA_DONE for them is then dropped silently.
    ///
    /// Also ends the wait after a refused credit growth once [`GROWTH_RETRY`] passed,
    /// so that [`Responder::credit_growth`] offers it again, and reports
    /// [`super::ResponderEvent::ReadTimeout`] once a Call's RDMA Reads have taken
    /// longer than `ResponderConfig::read_timeout`.
    ///
    /// [`GROWTH_RETRY`]: crate::credits::GROWTH_RETRY
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.growth_retry_at.is_some_and(|t| t <= now) {
            self.growth_retry_at = None;
        }
        self.expire_reads(now);
        let expired = self.pulls.expire(now);
        for (xid, handles) in expired {
            self.counters.inc(Counter::PullTimeouts);
            // The Receive reserved for this RDMA_DONE stays reserved: the RDMA_DONE may
            // still come (the requester may have pulled just in time), and it must not
            // land in a Receive the grant promised to a Call. It ends with that
            // RDMA_DONE or the connection.
            self.expired_pulls.insert(xid);
            self.actions.push_back(Action::Invalidate { xid, handles });
        }
        // Replies that waited for a reservation try again: they wait on for a pull
        // still exposed, or, with none left, get ERR_BADHEADER (no Receive to spare).
        let waiting: Vec<_> = self.waiting_replies.drain(..).collect();
        for (prefix, chunks, stream) in waiting {
            let _ = self.reply_through_read_chunk(prefix, &chunks, &stream);
        }
    }

    pub(super) fn invalidate_all_pulls(&mut self) {
        self.waiting_replies.clear();
        for (xid, handles) in self.pulls.drain() {
            self.credits.release_done_reservation();
            self.counters.inc(Counter::PullsInvalidatedOnClose);
            self.actions.push_back(Action::Invalidate { xid, handles });
        }
        for _ in self.expired_pulls.drain() {
            self.credits.release_done_reservation();
        }
        // Registrations still in progress are invalidated when they complete
        // (`handle_registered` no longer knows the XID).
        for _ in 0..self.registering.len() {
            self.credits.release_done_reservation();
        }
        self.registering.clear();
    }

    /// The peer's upper layer said it is prepared for backward-direction Calls (for
    /// NFSv4.1, a session with a back channel on this connection). Until this is
    /// called, [`Responder::start_backward_call`] fails with
    /// [`BackwardError::NotReady`](super::BackwardError::NotReady) (§7.3.1). Also asks the driver to post one
    /// Receive per backward credit we request, for the backward Replies (§7.2.2.2: "an
    /// RPC-over-RDMA server endpoint must pre-post a receive buffer for each backward
    /// direction Call it sends").
    pub fn handle_peer_backward_ready(&mut self) {
        let Some(b) = self.backward.as_ref() else {
            return;
        };
        if !self.backward_ready {
            self.backward_ready = true;
            self.actions
                .push_back(Action::PostBackwardReceives(b.requested()));
        }
    }

    /// True once the peer said it takes backward Calls on this connection.
    pub fn backward_ready(&self) -> bool {
        self.backward_ready
    }
}
