//! The requester's side of reliable reply: the option exchange, Replies pulled from
//! responder-provided Read chunks, and pull completion (RDMA_DONE).
//!
//! Specs: draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2, §4.1.3, §4.1.4, §5.1.3,
//! §5.2.3, §6; rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1, §5.1; the
//! option exchange is ours (`rpcrdma::options`, docs/rpcrdma-v2.md).
//!
//! ```text
//! first non-error v2 Reply ──► RDMA_OPTIONAL(RELIABLE_REPLY) (takes a credit)
//!   RDMA_OPTIONAL(RELIABLE_REPLY) back ──► on: Calls offer no Reply chunk
//!   RDMA_ERROR back ──────────────────────► refused: Reply chunks as before
//! RDMA_NOMSG {read list: P0 chunk} ──► credit back ──► RDMA Read into a local sink
//!   Read done ──► RDMA_DONE (Send With Invalidate when both allow) ──► fence our
//!                 Write chunks ──► deliver the Reply
//!   a Read failed (completed in error, or not posted) ──► once the others completed:
//!                 RDMA_DONE ──► fence ──► the Call fails (SYSTEM_ERR)
//!   no Call for the XID (aborted, unknown) ──► RDMA_DONE at once, nothing read
//! ```
//! On iWARP a Read that completes in error has ended the stream (RFC 5040 §7.1: the
//! side that detects the error sends a Terminate "and terminate[s] the stream"; on
//! InfiniBand the QP goes to the error state): the RDMA_DONE then cannot be posted and
//! the disconnect itself tells the responder, which invalidates on disconnect
//! (reliable-reply §4.1.3 foresees it: "a remote access error occurs and the
//! connection is lost"). A Read that could not be posted leaves the connection up, and
//! the RDMA_DONE goes out.
//! RDMA_DONE takes no credit: the responder kept a Receive out of its grant for it
//! (§5.2.3; `rpcrdma::credits::ResponderCredits::reserve_for_done`).

use bytes::Bytes;
use rdma::{QueuePair, STag, SendOp};
use rpcrdma::header::{Body, Header};
use rpcrdma::options::{ReliableReplyInfo, RELIABLE_REPLY};
use rpcrdma::reassembly::written_lengths;
use rpcrdma::{ChunkLists, ErrorBody, OptType, Prefix, Segment, Version, Xid};

use super::{
    fence, finish_reply, reply_in_another_version, system_err_reply, Conn, PendingCall, State,
};
use crate::counters::Counter;
use crate::pool::wr_kind;
use crate::registration::ReadSink;

/// Where the reliable-reply exchange stands on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReliableState {
    /// Not advertised (Version Two not settled yet, or not configured).
    NotYet,
    /// Our RDMA_OPTIONAL went out with this XID.
    Advertising(Xid),
    /// Both peers support it; what the responder said.
    On(ReliableReplyInfo),
    /// The responder refused it.
    Refused,
}

impl ReliableState {
    pub(super) fn is_on(&self) -> bool {
        matches!(self, ReliableState::On(_))
    }
}

/// A Reply being pulled.
pub(super) struct Pull {
    call: PendingCall,
    /// The responder's STags (for Send With Invalidate).
    handles: Vec<u32>,
    sink: ReadSink,
    /// What the responder wrote into our Write chunks.
    written: Vec<u64>,
    /// An RDMA Read of the pull completed in error or was not posted.
    failed: bool,
}

impl Pull {
    /// The Call, to fence when the connection ends mid-pull.
    pub(super) fn into_call(self) -> PendingCall {
        self.call
    }

    /// The Call being pulled.
    pub(super) fn call_mut(&mut self) -> &mut PendingCall {
        &mut self.call
    }
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

/// After a non-error Reply to `xid`: the RDMA_OPTIONAL that advertises reliable reply,
/// once Version Two is settled (v2 §5.1), if we take part and have not yet. It takes a
/// credit, as a Call would; the answer returns it.
pub(super) fn advertisement_due<Q>(conn: &Conn<Q>, st: &mut State, xid: Xid) -> Option<Header> {
    let ours = conn.reliable?;
    if st.reliable != ReliableState::NotYet
        || st.negotiation != rpcrdma::version::Negotiation::Settled(Version::TWO)
        || st.credits.try_acquire().is_err()
    {
        return None;
    }
    st.reliable = ReliableState::Advertising(xid);
    Some(Header {
        xid,
        version: Version::TWO,
        credits: st.credits.requested(),
        body: Body::Optional {
            opttype: RELIABLE_REPLY,
            optinfo: ours.to_bytes(),
        },
    })
}

/// Posts a header-only Send; false if it could not be posted (the connection is then
/// closed).
pub(super) fn post_header<Q: QueuePair>(conn: &Conn<Q>, xid: Xid, h: Header, op: SendOp) -> bool {
    conn.stats.inc(Counter::Sends);
    let bytes = h.to_bytes();
    conn.stats.add(Counter::SendBytes, bytes.len() as u64);
    match conn
        .sends
        .post(&conn.qp, wr_kind::SEND | u64::from(xid.0), op, vec![bytes])
    {
        Ok(true) => true,
        Ok(false) => {
            conn.stats.inc(Counter::SendPoolFallbacks);
            true
        }
        Err(_) => {
            conn.qp.disconnect();
            false
        }
    }
}

/// A received RDMA_OPTIONAL (of a type our policy lists): the answer to our
/// advertisement, or ignored.
pub(super) fn handle_optional<Q>(
    conn: &Conn<Q>,
    prefix: &Prefix,
    opttype: OptType,
    optinfo: &Bytes,
) {
    let mut st = conn.lock();
    let ReliableState::Advertising(xid) = st.reliable else {
        conn.stats.inc(Counter::ErrDiscarded);
        return;
    };
    if opttype != RELIABLE_REPLY || prefix.xid != xid || prefix.version != Version::TWO {
        conn.stats.inc(Counter::ErrDiscarded);
        return;
    }
    match ReliableReplyInfo::parse(optinfo) {
        Some(peer) => {
            st.reliable = ReliableState::On(peer);
            let _ = st.credits.handle_reply(prefix.credits);
            conn.stats.set(Counter::ReliableReply, 1);
        }
        None => {
            st.reliable = ReliableState::Refused;
            let _ = st.credits.release();
        }
    }
    drop(st);
    conn.credit_wait.notify_waiters();
}

/// A received RDMA_OPTIONAL whose `rdma_opttype` we do not support (`err`, from
/// `validate::receive`): rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1, "When
/// an implementation does not recognize or support the value contained in the
/// rdma_opttype field, it MUST send an RPC-over-RDMA message with the rdma_xid field set
/// to the same value as the erroneous message, the rdma_proc field set to RDMA_ERROR,
/// and the rdma_err field set to RDMA_ERR_INVAL_OPTION." That binds either peer, so the
/// requester answers too (as the core's `Requester` does). The answer is in the
/// message's version (Two: the only one with RDMA_OPTIONAL), carries our requested
/// credits (a requester's `rdma_credit`, §4.3.1 of Version One) and takes none: it is
/// not a Call, and nothing is owed for the message it answers (no Call of ours is
/// completed, so no credit returns either).
pub(super) fn refuse_option<Q: QueuePair>(
    conn: &Conn<Q>,
    buf: &Bytes,
    err: &rpcrdma::error::HeaderError,
) {
    let Ok(view) = rpcrdma::header::PrefixView::new_checked(&buf[..]) else {
        return;
    };
    let prefix = view.prefix();
    let requested = conn.lock().credits.requested();
    let Some(h) = rpcrdma::validate::error_reply_for(&prefix, err, requested, &conn.policy) else {
        return;
    };
    tracing::debug!(target: "rpcrdma_transport", xid = prefix.xid.0, %err, "RDMA_OPTIONAL refused");
    conn.stats.inc(Counter::ErrRdmaErrorSent);
    let _ = post_header(conn, prefix.xid, h, SendOp::Send);
}

/// An RDMA_ERROR that answers our advertisement (v2 §3.1: ERR_INVAL_OPTION from a
/// responder without the feature): the feature stays off. True if it was that.
pub(super) fn option_refused<Q>(conn: &Conn<Q>, prefix: &Prefix, body: &ErrorBody) -> bool {
    let mut st = conn.lock();
    let ReliableState::Advertising(xid) = st.reliable else {
        return false;
    };
    if prefix.xid != xid || (*body != ErrorBody::InvalOption && st.calls.contains_key(&xid)) {
        return false;
    }
    st.reliable = ReliableState::Refused;
    let _ = st.credits.release();
    drop(st);
    conn.credit_wait.notify_waiters();
    true
}

/// Sends pull completion for `xid` (reliable-reply §4.1.3): Version Two RDMA_DONE,
/// 16 bytes, no credit taken.
///
/// reliable-reply §4.1.4: "If Remote Invalidation support is indicated by both peers,
/// messages carrying pull completion messages SHOULD be transmitted using RDMA Send
/// With Invalidate", and "the requester MUST present only that R_key": used only when
/// the chunk has exactly one STag. Counted in `rdma_done` once posted.
fn send_done<Q: QueuePair>(conn: &Conn<Q>, xid: Xid, handles: &[u32]) {
    if conn.skip_done {
        conn.stats.inc(Counter::RdmaDoneSkipped);
        return;
    }
    let (requested, peer) = {
        let st = conn.lock();
        let peer = match st.reliable {
            ReliableState::On(p) => Some(p),
            _ => None,
        };
        (st.credits.requested(), peer)
    };
    let both = conn.reliable.is_some_and(|i| i.remote_invalidate)
        && peer.is_some_and(|i| i.remote_invalidate);
    let op = match handles {
        [only] if both => SendOp::SendWithInvalidate(STag(*only)),
        _ => SendOp::Send,
    };
    let h = Header {
        xid,
        version: Version::TWO,
        credits: requested,
        body: Body::Done,
    };
    if post_header(conn, xid, h, op) {
        conn.stats.inc(Counter::RdmaDone);
    }
}

/// A Version Two RDMA_NOMSG with a Position Zero Read chunk: a Reply in a
/// responder-provided Read chunk. Starts the pull, or answers at once.
pub(super) fn handle_read_chunk_reply<Q: QueuePair>(
    conn: &Conn<Q>,
    prefix: Prefix,
    chunks: &ChunkLists,
) -> Option<Bytes> {
    let xid = prefix.xid;
    let stats = &conn.stats;
    let p0 = chunks.position_zero()?;
    let handles = distinct_handles(&p0.segments);
    let mut st = conn.lock();
    let on = st.reliable.is_on();
    let Some(call) = st.calls.remove(&xid) else {
        drop(st);
        // reliable-reply §4.1.3: "If a requester receives a reply bearing a Position
        // Zero Read chunk and does not recognize the XID, the requester MUST notify the
        // responder of pull completion."
        stats.inc(Counter::RdmaDoneUnknownXid);
        send_done(conn, xid, &handles);
        return None;
    };
    if prefix.version != call.version {
        drop(st);
        // v2 §5.3: Replies come in the version of their Call; this one does not answer
        // it (`reply_in_another_version` says why the Call fails). The chunk is still
        // exposed: §4.1.3 asks for pull completion even from a requester that does not
        // take the Reply ("it MUST inform the responder of pull completion and
        // terminate the RPC transaction").
        send_done(conn, xid, &handles);
        return reply_in_another_version(conn, xid, call, prefix.version, None);
    }
    // The RDMA_NOMSG is the Reply: its credit grant counts now (v1 §4.3.1).
    let _ = st.credits.handle_reply(prefix.credits);
    let (n, _) = st.negotiation.handle_reply(xid, None);
    st.negotiation = n;
    stats.set(Counter::CreditsGranted, u64::from(prefix.credits));
    drop(st);
    conn.credit_wait.notify_waiters();
    if call.aborted {
        // reliable-reply §5.1.3: the Call was abandoned; the responder still learns it
        // may invalidate, and the connection stays.
        stats.inc(Counter::RdmaDoneUnknownXid);
        send_done(conn, xid, &handles);
        return None;
    }
    let bad = if !on {
        // reliable-reply §4.1.3: "If a requester receives an RPC Reply via a
        // responder-provided Read chunk, but does not support such chunks, it MUST
        // inform the responder of pull completion and terminate the RPC transaction."
        Some("read chunk reply without reliable reply")
    } else if p0.len() > conn.max_message {
        Some("pulled reply too large")
    } else if chunks.reads.len() != 1 || chunks.reply.as_ref().is_some_and(|c| !c.is_empty()) {
        Some("read chunk reply with other chunks")
    } else {
        None
    };
    let written = match (bad, written_lengths(&call.writes, &chunks.writes)) {
        (None, Ok(w)) => w,
        (why, _) => {
            let why = why.unwrap_or("write list");
            stats.inc(Counter::ErrBadReply);
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, why, "bad reply");
            send_done(conn, xid, &handles);
            fence(call, None, stats);
            return Some(system_err_reply(xid));
        }
    };
    // reliable-reply §4.1.2: "Upon receipt of an RDMA_NOMSG message containing a
    // Position Zero Read chunk, the requester pulls the RPC Reply's Payload stream from
    // the responder."
    let sink = ReadSink::new(&conn.pd, p0.len() as usize);
    let mut reads = Vec::with_capacity(p0.segments.len());
    let mut at = 0usize;
    for seg in p0.segments.iter().filter(|s| s.length > 0) {
        let len = seg.length as usize;
        reads.push((len, sink.read_wr(wr_kind::READ | u64::from(xid.0), seg, at)));
        at += len;
    }
    let mut pull = Pull {
        call,
        handles,
        sink,
        written,
        failed: false,
    };
    pull.sink.outstanding = reads.len();
    if reads.is_empty() {
        return finish_pull(conn, xid, pull);
    }
    conn.lock().pulls.insert(xid, pull);
    let total = reads.len();
    for (k, (len, wr)) in reads.into_iter().enumerate() {
        stats.inc(Counter::RdmaReads);
        stats.add(Counter::RdmaReadBytes, len as u64);
        if let Err(e) = conn.qp.post_send(wr) {
            // The Reads not posted are done, in error; pull completion follows once the
            // posted ones completed (reliable-reply §4.1.2, "successfully or in error").
            // The connection itself is not at fault and stays.
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?e, "RDMA Read of a reply not posted");
            return pull_reads_completed(conn, xid, total - k, false);
        }
    }
    None
}

/// `n` RDMA Reads of the pull for `xid` completed, successfully (`ok`) or in error;
/// once all did, pull completion and the Reply (or the failed Call's SYSTEM_ERR).
pub(super) fn pull_reads_completed<Q: QueuePair>(
    conn: &Conn<Q>,
    xid: Xid,
    n: usize,
    ok: bool,
) -> Option<Bytes> {
    let pull = {
        let mut st = conn.lock();
        let p = st.pulls.get_mut(&xid)?;
        p.failed |= !ok;
        p.sink.outstanding = p.sink.outstanding.saturating_sub(n);
        if p.sink.outstanding > 0 {
            return None;
        }
        st.pulls.remove(&xid)?
    };
    finish_pull(conn, xid, pull)
}

/// A Read of the pull for `xid` was flushed (the connection ended). Once a Read of it
/// failed, flushes complete that pull; otherwise the pull is left to the end of the
/// connection, which fences the Call for oncrpc to send again on the next connection,
/// as it does for every Call whose Reply the connection lost.
pub(super) fn pull_read_flushed<Q: QueuePair>(conn: &Conn<Q>, xid: Xid) -> Option<Bytes> {
    if !conn.lock().pulls.get(&xid).is_some_and(|p| p.failed) {
        return None;
    }
    pull_reads_completed(conn, xid, 1, false)
}

/// Every Read of `pull` is done: pull completion, then the Reply.
fn finish_pull<Q: QueuePair>(conn: &Conn<Q>, xid: Xid, pull: Pull) -> Option<Bytes> {
    let stats = &conn.stats;
    // reliable-reply §4.1.2: "After RDMA Read operations have completed (successfully
    // or in error), the requester MUST inform the responder that it may invalidate the
    // Read chunk containing the RPC Reply message."
    send_done(conn, xid, &pull.handles);
    if pull.failed {
        // The Reply is lost. The Call fails rather than being sent again: a responder
        // whose Read chunks cannot be read would otherwise cost a connection per
        // retransmission (rfc5666bis-04 §5.5.3 warns of "a retransmission loop and
        // repeated connection loss"); the core's `Requester::handle_read_failed` fails
        // it the same way (`ReplyError::PullFailed`).
        stats.inc(Counter::PullsFailed);
        drop(pull.sink);
        let aborted = pull.call.aborted;
        fence(pull.call, None, stats);
        tracing::debug!(target: "rpcrdma_transport", xid = xid.0, "pulling the reply failed");
        return (!aborted).then(|| system_err_reply(xid));
    }
    let data = pull.sink.into_bytes();
    if pull.call.aborted {
        fence(pull.call, None, stats);
        return None;
    }
    stats.inc(Counter::PulledReplies);
    stats.add(Counter::ChunkBytesReceived, data.len() as u64);
    let proc_id = pull.call.proc_id;
    match finish_reply(conn, pull.call, Some(data), Ok((pull.written, None)), None) {
        Ok(reply) => Some(reply),
        Err(why) => {
            stats.inc(Counter::ErrBadReply);
            tracing::debug!(target: "rpcrdma_transport", xid = xid.0, ?proc_id, why, "bad reply");
            Some(system_err_reply(xid))
        }
    }
}
