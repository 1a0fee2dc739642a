//! The client's half of backward-direction RPC: serving the server's Calls with the
//! dispatcher given to [`crate::RdmaTransport::serve_backward`].
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7.1.4, §7.2.2.1, §7.3.1, §7.3.4,
//! §7.3.5, §7.4.
//!
//! A backward Call is told from a forward Reply by its RPC message type, never by its
//! XID (§7.1.4: a separate XID space). Its Receive is re-posted at once, like every
//! Receive on a client; `backward_credits` extra Receives were posted with the
//! connection for them (§7.2.2.1). The Reply goes as RDMA_MSG with empty chunk lists
//! and the backward grant (§7.3.5); one that does not fit inline (§7.4: no reduction)
//! is answered RDMA_ERROR / ERR_BADHEADER so that the server's Call ends.

use std::sync::Arc;

use bytes::Bytes;
use oncrpc::Dispatcher;
use rdma::{QueuePair, SendOp};
use rpcrdma::header::Header;
use rpcrdma::marshal::marshal_backward;
use rpcrdma::{ChunkLists, ErrorBody, Prefix};

use super::reliable::post_header;
use super::Conn;
use crate::counters::Counter;
use crate::pool::wr_kind;

/// A client connection's backward service.
pub(super) struct ClientBackward {
    pub(super) dispatcher: Arc<Dispatcher>,
    /// Backward credits we grant (and extra Receives posted).
    pub(super) grant: u32,
}

/// A backward-direction Call arrived (RDMA_MSG whose payload is an RPC Call).
pub(super) fn handle_call<Q: QueuePair + 'static>(
    conn: &Arc<Conn<Q>>,
    prefix: Prefix,
    chunks: &ChunkLists,
    payload: Bytes,
) {
    let Some(backward) = &conn.backward else {
        // No backward channel: the server should not have sent it (§7.3.1).
        conn.stats.inc(Counter::ErrDiscarded);
        return;
    };
    conn.stats.inc(Counter::BackwardCalls);
    let grant = backward.grant;
    if !chunks.is_empty() {
        // §7.3.4: "All three chunk lists MUST be empty."
        let h = Header::error_reply(&prefix, grant, ErrorBody::BadHeader);
        conn.stats.inc(Counter::BackwardFailed);
        post_header(conn, prefix.xid, h, SendOp::Send);
        return;
    }
    let dispatcher = backward.dispatcher.clone();
    let conn = conn.clone();
    tokio::spawn(async move {
        let Some(reply) = dispatcher.dispatch(payload).await else {
            return;
        };
        let xid = prefix.xid;
        // §7.3.5: RDMA_MSG, empty chunk lists, the backward grant, the Call's version.
        match marshal_backward(
            xid,
            prefix.version,
            grant,
            &reply,
            conn.limits.send_threshold,
        ) {
            Ok(out) => {
                conn.stats.inc(Counter::BackwardReplies);
                conn.stats.inc(Counter::Sends);
                conn.stats.add(Counter::SendBytes, out.send_len as u64);
                let wr_id = wr_kind::SEND | u64::from(xid.0);
                match conn.sends.post(&conn.qp, wr_id, SendOp::Send, out.send) {
                    Ok(true) => {}
                    Ok(false) => conn.stats.inc(Counter::SendPoolFallbacks),
                    Err(_) => conn.qp.disconnect(),
                }
            }
            Err(e) => {
                tracing::debug!(target: "rpcrdma_transport", xid = xid.0, error = %e, "backward reply does not fit");
                conn.stats.inc(Counter::BackwardFailed);
                let h = Header::error_reply(&prefix, grant, ErrorBody::BadHeader);
                post_header(&conn, xid, h, SendOp::Send);
            }
        }
    });
}
