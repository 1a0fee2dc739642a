//! The responder's side of reliable reply: Replies that fit no requester-provided
//! resource go out through a read-only region of our own memory (a responder-provided
//! Position Zero Read chunk), exposed until RDMA_DONE, a timeout or the end of the
//! connection.
//!
//! Specs: draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.1, §4.1.3, §4.1.4, §5.2.3,
//! §5.4.3, §6; rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1; the option
//! exchange is ours (`rpcrdma::options`, docs/rpcrdma-v2.md).
//!
//! ```text
//! RDMA_OPTIONAL(RELIABLE_REPLY) ──► re-post, answer RDMA_OPTIONAL(RELIABLE_REPLY)
//! send_reply: marshal_reply finds no room (no/too small Reply chunk, over inline)
//!   └─ peer agreed, Call in v2 ─► reserve a Receive for the RDMA_DONE (core credits)
//!      ─► RDMA Writes (Write chunks) ─► register the Payload stream REMOTE_READ only
//!      ─► pull table: xid -> STag, now + pull_timeout ─► re-post ─► RDMA_NOMSG
//! RDMA_DONE xid ──► re-post at once ─► known: fence (skip if Send With Invalidate
//!                   took it), reservation back ─► next waiting Reply
//!               └─► unknown or repeated: dropped silently
//! timer (poll_timeout) ──► fence what expired;   connection end ──► fence all
//! ```
//!
//! Credits for RDMA_DONE (§5.2.3), the core's choice (`ResponderCredits::reserve_for_done`):
//! the responder keeps one posted Receive out of its grant for each Read chunk waiting
//! for pull completion, and re-posts the Receive an RDMA_DONE arrives in at once. The
//! requester sends RDMA_DONE without taking a credit. A Reply that finds no Receive to
//! reserve waits (its Call keeps its own Receive) until an RDMA_DONE or a timeout frees
//! one.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use rdma::{QueuePair, STag};
use rpcrdma::header::{Body, ErrorBody, Header, PrefixView};
use rpcrdma::marshal::plan_reply_read_chunk;
use rpcrdma::options::{ReliableReplyInfo, RELIABLE_REPLY};
use rpcrdma::pull::PullTable;
use rpcrdma::{ChunkLists, HeaderError, MsgType, OptType, Prefix, Version, Xid};
use xdr::XdrStream;

use super::{Fatal, ServerConn};
use crate::counters::Counter;
use crate::registration::ChunkRegion;

/// A Reply waiting for a Receive to reserve for its RDMA_DONE.
struct WaitingReply {
    recv: usize,
    prefix: Prefix,
    chunks: ChunkLists,
    stream: XdrStream,
}

/// Reliable-reply state of one connection.
#[derive(Default)]
pub(super) struct Exposed {
    /// What the requester advertised, once we accepted it.
    peer: Option<ReliableReplyInfo>,
    /// XID -> our STag and deadline (the core's table).
    table: PullTable,
    /// XID -> the registered Reply. Same keys as `table`.
    regions: HashMap<Xid, ChunkRegion>,
    /// Oldest first.
    waiting: VecDeque<WaitingReply>,
}

impl Exposed {
    /// When the timer must fire next.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.table.poll_timeout()
    }
}

impl<Q: QueuePair + 'static> ServerConn<Q> {
    /// True when a Reply to a Call in `version` may use a Read chunk of ours
    /// (reliable-reply §6: "MUST be used only when both peers support them").
    pub(super) fn reliable_reply_on(&self, version: Version) -> bool {
        version == Version::TWO
            && self.config.reliable_reply_offered()
            && self.reliable.peer.is_some()
    }

    /// The XID of an RDMA_DONE we handle ourselves: Version Two with the feature
    /// agreed. Otherwise RDMA_DONE goes through `validate::receive`, which refuses it
    /// (ERR_BADHEADER, v1 §5.6.2).
    pub(super) fn pull_completion(&self, buf: &Bytes) -> Option<Xid> {
        self.reliable.peer?;
        let v = PrefixView::new_checked(&buf[..]).ok()?;
        (v.msg_type() == MsgType::RDMA_DONE && v.version() == Version::TWO).then(|| v.xid())
    }

    /// RDMA_DONE for `xid` arrived in Receive `index`; `remote` is the STag the
    /// requester invalidated with Send With Invalidate, if it did.
    pub(super) fn handle_done(
        &mut self,
        index: usize,
        xid: Xid,
        remote: Option<STag>,
    ) -> Result<(), Fatal> {
        // §5.2.3 (our choice): the RDMA_DONE used the Receive we reserved; it goes back
        // at once.
        self.repost(index)?;
        // reliable-reply §4.1.3: "Whenever a responder receives a pull completion
        // notification for an XID for which there is no Read chunk waiting to be
        // invalidated, the responder MUST silently drop the notification."
        if self.reliable.table.complete(xid).is_none() {
            self.stats.inc(Counter::RdmaDoneDropped);
            return Ok(());
        }
        self.stats.inc(Counter::RdmaDone);
        // reliable-reply §5.4.3: "the responder matches the XID in the message to a
        // waiting reply buffer, invalidates that buffer, and removes the XID from the
        // data structure."
        if let Some(region) = self.reliable.regions.remove(&xid) {
            region.fence(remote, &self.stats);
        }
        self.end_reservation()
    }

    /// A reserved Receive is free again: the oldest waiting Reply goes now.
    fn end_reservation(&mut self) -> Result<(), Fatal> {
        self.credits.release_done_reservation();
        if let Some(w) = self.reliable.waiting.pop_front() {
            self.reply_through_read_chunk(w.recv, &w.prefix, &w.chunks, &w.stream)?;
        }
        Ok(())
    }

    /// The timer fired: Read chunks whose RDMA_DONE did not come in time are
    /// invalidated (reliable-reply §4.1.3: "a responder can choose to invalidate its
    /// Read chunks after waiting for a short period"). A late RDMA_DONE for them is
    /// then dropped silently.
    pub(super) fn handle_pull_timeout(&mut self, now: Instant) -> Result<(), Fatal> {
        for (xid, _) in self.reliable.table.expire(now) {
            self.stats.inc(Counter::PullTimeouts);
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, "pull timeout: reply chunk invalidated");
            if let Some(region) = self.reliable.regions.remove(&xid) {
                region.fence(None, &self.stats);
            }
            self.end_reservation()?;
        }
        Ok(())
    }

    /// The connection ended: every exposed Reply is invalidated (reliable-reply
    /// §5.4.3: "Explicitly invalidating waiting Read chunks after a connection loss").
    pub(super) fn invalidate_all_pulls(&mut self) {
        self.reliable.waiting.clear();
        for (xid, _) in self.reliable.table.drain() {
            self.credits.release_done_reservation();
            self.stats.inc(Counter::PullsInvalidatedOnClose);
            if let Some(region) = self.reliable.regions.remove(&xid) {
                region.fence(None, &self.stats);
            }
        }
    }

    /// An RDMA_OPTIONAL that `validate::receive` let through (its opttype is in our
    /// policy), in Receive `index`.
    pub(super) fn handle_optional(
        &mut self,
        index: usize,
        prefix: Prefix,
        opttype: OptType,
        optinfo: Bytes,
    ) -> Result<(), Fatal> {
        let theirs = (opttype == RELIABLE_REPLY
            && prefix.version == Version::TWO
            && self.config.reliable_reply_offered())
        .then(|| ReliableReplyInfo::parse(&optinfo))
        .flatten();
        let Some(theirs) = theirs else {
            // v2 §3.1: "When an implementation does not recognize or support the value
            // contained in the rdma_opttype field, it MUST send ... RDMA_ERR_INVAL_OPTION."
            return self.refuse(index, Some(prefix), HeaderError::UnknownOption(opttype));
        };
        // The advertisement took a credit like a Call: its Receive goes back before the
        // answer carries the grant.
        self.repost(index)?;
        self.reliable.peer = Some(theirs);
        self.stats.set(Counter::ReliableReply, 1);
        let answer = Header {
            xid: prefix.xid,
            version: Version::TWO,
            credits: self.credits.grant(),
            body: Body::Optional {
                opttype: RELIABLE_REPLY,
                optinfo: self.config.reliable_reply_info().to_bytes(),
            },
        };
        self.post_send(prefix.xid, vec![answer.to_bytes()], None)
    }

    /// reliable-reply §4.1.1: "A responder MUST send a Position Zero Read chunk when
    /// the actual size of the RPC Reply's Payload stream exceeds all
    /// requester-provided reply resources". `recv` is the Call's Receive, re-posted
    /// before the RDMA_NOMSG goes.
    pub(super) fn reply_through_read_chunk(
        &mut self,
        recv: usize,
        prefix: &Prefix,
        chunks: &ChunkLists,
        stream: &XdrStream,
    ) -> Result<(), Fatal> {
        let xid = prefix.xid;
        let plan = match plan_reply_read_chunk(xid, prefix.version, stream, chunks) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "no reply possible");
                return self.no_reply_possible(recv, prefix);
            }
        };
        if self.credits.reserve_for_done().is_err() {
            if !self.reliable.table.is_empty() {
                // Every spare Receive waits for an RDMA_DONE still to come; that
                // RDMA_DONE (or the timeout) frees one and this Reply goes then.
                self.stats.inc(Counter::PullsDeferred);
                self.reliable.waiting.push_back(WaitingReply {
                    recv,
                    prefix: *prefix,
                    chunks: chunks.clone(),
                    stream: stream.clone(),
                });
                return Ok(());
            }
            // Fewer than two Receives: a Read chunk can never be afforded (§4.1.1: a
            // responder that cannot "MUST return an appropriate permanent transport
            // error").
            return self.no_reply_possible(recv, prefix);
        }
        self.post_writes(xid, plan.writes.clone())?;
        // COPY: the Payload stream into its registered region (see `registration`),
        // registered for remote read only.
        let region = ChunkRegion::register(&self.pd, &plan.registration, &self.stats);
        let segment = region.segment();
        let grant = self.credits.grant();
        self.stats.set(Counter::CreditsGranted, u64::from(grant));
        let out = match plan.finish(grant, vec![segment], self.limits.send_threshold) {
            Ok(out) => out,
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "no reply possible");
                region.fence(None, &self.stats);
                self.credits.release_done_reservation();
                return self.no_reply_possible(recv, prefix);
            }
        };
        let deadline = Instant::now() + self.config.pull_timeout;
        if self
            .reliable
            .table
            .insert(xid, vec![segment.handle], deadline)
            .is_some()
        {
            // A second Reply for the XID replaces the first.
            if let Some(old) = self.reliable.regions.remove(&xid) {
                old.fence(None, &self.stats);
            }
            self.credits.release_done_reservation();
        }
        self.reliable.regions.insert(xid, region);
        self.stats.inc(Counter::PulledReplies);
        self.stats.inc(Counter::PositionZeroReadChunks);
        self.stats.inc(Counter::Replies);
        self.repost(recv)?;
        self.post_send(xid, out.send, None)
    }

    /// v1 §5.5.3: "RDMA_ERROR ... RDMA_ERR_BADHEADER to indicate that no RPC-level
    /// reply is possible for that XID."
    pub(super) fn no_reply_possible(&mut self, recv: usize, prefix: &Prefix) -> Result<(), Fatal> {
        self.stats.inc(Counter::ErrRdmaErrorSent);
        self.stats.inc(Counter::ErrBadHeader);
        self.repost(recv)?;
        let h = Header::error_reply(prefix, self.credits.grant(), ErrorBody::BadHeader);
        self.post_send(prefix.xid, vec![h.to_bytes()], None)
    }
}
