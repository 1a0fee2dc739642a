//! The server's half of backward-direction RPC: sending the Calls a
//! [`crate::BackwardChannel`] asks for and matching their Replies.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7.1.4, §7.2.1, §7.2.2.2, §7.3.1,
//! §7.3.4, §7.3.5, §7.4.
//!
//! Credits: the core's `RequesterCredits`, apart from the forward grant (§7.2.1:
//! "forward direction credits and backward direction credits are accounted
//! separately"). Receives: `backward_credits` more than the forward grant are posted
//! with the connection (§7.2.2.2: "an RPC-over-RDMA server endpoint must pre-post a
//! receive buffer for each backward direction Call it sends"); a Receive that brings a
//! backward Reply is re-posted at once.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use rdma::QueuePair;
use rpcrdma::credits::RequesterCredits;
use rpcrdma::marshal::marshal_backward;
use rpcrdma::{rpc, ChunkLists, MarshalError, Prefix, Xid};
use tokio::sync::oneshot;
use xdr::XdrStream;

use super::{Fatal, ServerConn};
use crate::backward::{BackwardError, BackwardRequest};
use crate::counters::Counter;

type Waiter = oneshot::Sender<Result<Bytes, BackwardError>>;

/// Backward-direction state of one connection.
pub(super) struct Backward {
    /// §7.3.1: set by [`BackwardRequest::Ready`].
    ready: bool,
    credits: RequesterCredits,
    /// Backward Calls sent, by XID (backward XID space, §7.1.4).
    calls: HashMap<Xid, Waiter>,
    /// Calls waiting for a backward credit, oldest first.
    queue: VecDeque<(Xid, XdrStream, Waiter)>,
}

impl Backward {
    /// A backward channel asking the client for `credits` credits.
    pub(super) fn new(credits: u32) -> Backward {
        Backward {
            ready: false,
            credits: RequesterCredits::new(credits.max(1)),
            calls: HashMap::new(),
            queue: VecDeque::new(),
        }
    }
}

impl<Q: QueuePair + 'static> ServerConn<Q> {
    pub(super) fn handle_backward_request(&mut self, req: BackwardRequest) -> Result<(), Fatal> {
        match req {
            BackwardRequest::Ready => {
                if let Some(b) = self.backward.as_mut() {
                    b.ready = true;
                }
                Ok(())
            }
            BackwardRequest::Call { msg, reply } => {
                let Some(b) = self.backward.as_mut() else {
                    let _ = reply.send(Err(BackwardError::ConnectionLost));
                    return Ok(());
                };
                // §7.3.1: "An Upper Layer Protocol consumer MUST NOT perform backward
                // direction ONC RPC operations unless the peer consumer has indicated
                // it is prepared to handle them."
                if !b.ready {
                    self.stats.inc(Counter::BackwardFailed);
                    let _ = reply.send(Err(BackwardError::NotReady));
                    return Ok(());
                }
                let xid = match rpc::xid(&msg.inline) {
                    Some(x) if rpc::msg_type(&msg.inline) == Some(rpc::CALL) => x,
                    _ => {
                        let _ = reply.send(Err(BackwardError::NotACall));
                        return Ok(());
                    }
                };
                if b.calls.contains_key(&xid) || b.queue.iter().any(|(x, _, _)| *x == xid) {
                    let _ = reply.send(Err(BackwardError::DuplicateXid(xid.0)));
                    return Ok(());
                }
                if b.credits.try_acquire().is_err() {
                    self.stats.inc(Counter::BackwardCreditWaits);
                    b.queue.push_back((xid, msg, reply));
                    return Ok(());
                }
                self.send_backward_call(xid, &msg, reply)
            }
        }
    }

    /// Sends backward Call `xid`; its credit is taken.
    fn send_backward_call(
        &mut self,
        xid: Xid,
        msg: &XdrStream,
        reply: Waiter,
    ) -> Result<(), Fatal> {
        let Some(b) = self.backward.as_mut() else {
            return Ok(());
        };
        // §7.3.4: "The rdma_proc field in the RPC-over-RDMA header MUST contain the
        // value RDMA_MSG. All three chunk lists MUST be empty." In the version the
        // client last used for its Calls (ours is the responder's side of it).
        let threshold = self.limits.send_threshold;
        match marshal_backward(xid, self.version, b.credits.requested(), msg, threshold) {
            Ok(out) => {
                b.calls.insert(xid, reply);
                self.stats.inc(Counter::BackwardCalls);
                self.post_send(xid, out.send, None)
            }
            Err(e) => {
                let _ = b.credits.release();
                self.stats.inc(Counter::BackwardFailed);
                let err = match e {
                    MarshalError::HeaderTooLarge { len, threshold } => {
                        BackwardError::TooLarge { len, threshold }
                    }
                    _ => BackwardError::TooLarge {
                        len: msg.xdr_len(),
                        threshold,
                    },
                };
                let _ = reply.send(Err(err));
                Ok(())
            }
        }
    }

    /// Sends queued backward Calls while credits allow.
    fn pump_backward(&mut self) -> Result<(), Fatal> {
        loop {
            let Some(b) = self.backward.as_mut() else {
                return Ok(());
            };
            if b.queue.is_empty() || b.credits.try_acquire().is_err() {
                return Ok(());
            }
            let Some((xid, msg, reply)) = b.queue.pop_front() else {
                let _ = b.credits.release();
                return Ok(());
            };
            self.send_backward_call(xid, &msg, reply)?;
        }
    }

    /// An RDMA_MSG whose payload is an RPC Reply, in Receive `index`: the Reply to one
    /// of our backward Calls (§7.3.5), or dropped.
    pub(super) fn handle_backward_reply(
        &mut self,
        index: usize,
        prefix: Prefix,
        chunks: &ChunkLists,
        payload: Bytes,
    ) -> Result<(), Fatal> {
        self.repost(index)?;
        let Some(b) = self.backward.as_mut() else {
            self.stats.inc(Counter::ErrDiscarded);
            return Ok(());
        };
        // §7.3.5: "All three chunk lists MUST be empty."
        if !chunks.is_empty() {
            self.stats.inc(Counter::ErrDiscarded);
            return Ok(());
        }
        let Some(waiter) = b.calls.remove(&prefix.xid) else {
            self.stats.inc(Counter::ErrDiscarded);
            return Ok(());
        };
        let _ = b.credits.handle_reply(prefix.credits);
        self.stats.inc(Counter::BackwardReplies);
        let _ = waiter.send(Ok(payload));
        self.pump_backward()
    }

    /// An RDMA_ERROR in Receive `index`: a responder's only Calls are backward ones,
    /// so it can only fail one of those (§5.5: "Receipt of this procedure completes
    /// the RPC transaction associated with XID in the rdma_xid field").
    pub(super) fn handle_backward_error(&mut self, index: usize, xid: Xid) -> Result<(), Fatal> {
        self.repost(index)?;
        let waiter = self.backward.as_mut().and_then(|b| {
            let w = b.calls.remove(&xid)?;
            let _ = b.credits.release();
            Some(w)
        });
        match waiter {
            Some(w) => {
                self.stats.inc(Counter::BackwardFailed);
                let _ = w.send(Err(BackwardError::Refused));
                self.pump_backward()
            }
            None => {
                self.stats.inc(Counter::ErrDiscarded);
                Ok(())
            }
        }
    }

    /// The connection ended: every backward Call fails (§7.3.2).
    pub(super) fn fail_all_backward(&mut self) {
        let Some(b) = self.backward.as_mut() else {
            return;
        };
        let n = b.calls.len() + b.queue.len();
        for (_, w) in b.calls.drain() {
            let _ = w.send(Err(BackwardError::ConnectionLost));
        }
        for (_, _, w) in b.queue.drain(..) {
            let _ = w.send(Err(BackwardError::ConnectionLost));
        }
        self.stats.add(Counter::BackwardFailed, n as u64);
    }
}
