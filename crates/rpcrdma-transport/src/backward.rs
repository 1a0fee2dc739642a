//! Backward-direction RPC (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7): the server
//! calls the client on the connection the client opened.
//!
//! Specs: §7.1.4 (separate XID space), §7.2 (backward credits accounted apart from
//! forward ones, Receives pre-posted for them), §7.3.1 (no backward Call before the
//! peer said it is prepared), §7.3.4-§7.3.5 (RDMA_MSG, all chunk lists empty), §7.4 (no
//! reduction: backward messages fit inline).
//!
//! ```text
//!  service ── RdmaServer::backward_channels() ──► BackwardChannel (one per connection)
//!          ── set_peer_ready() (the ULP learned the client takes backward Calls)
//!          ── call(msg).await ──► server connection task: backward credit (wait if
//!             none), RDMA_MSG, empty chunks ──► client: RdmaTransport::serve_backward's
//!             Dispatcher ──► RDMA_MSG Reply ──► server: match XID in the backward
//!             table, credit back ──► call() returns the RPC Reply
//! ```
//! Calls and Replies are told apart by the RPC message type, so a backward XID may
//! equal a forward one in flight (§7.1.4: "the XID ... is independent of the XID space
//! of the forward direction").

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use xdr::XdrStream;

pub use rpcrdma::responder::BackwardError;

use crate::counters::ConnStats;
use crate::server::ServerInput;

/// What a [`BackwardChannel`] asks of its connection's task.
pub(crate) enum BackwardRequest {
    /// The peer's upper layer said it takes backward Calls.
    Ready,
    /// A backward Call and where its Reply goes.
    Call {
        msg: XdrStream,
        reply: oneshot::Sender<Result<Bytes, BackwardError>>,
    },
}

/// A service's handle on the backward direction of one server connection. Cheap to
/// clone; it outlives the connection (calls then fail with
/// [`BackwardError::ConnectionLost`]).
#[derive(Clone)]
pub struct BackwardChannel {
    pub(crate) tx: mpsc::UnboundedSender<ServerInput>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) stats: Arc<ConnStats>,
}

impl std::fmt::Debug for BackwardChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardChannel")
            .field("peer", &self.peer)
            .field("connection", &self.stats.id)
            .finish()
    }
}

impl BackwardChannel {
    /// The client's address, if the provider knows it.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The connection's counters.
    pub fn stats(&self) -> Arc<ConnStats> {
        self.stats.clone()
    }

    /// The explicit "ready" of §7.3.1: the server's upper layer learned (for NFSv4.1,
    /// from a CREATE_SESSION or BIND_CONN_TO_SESSION with a back channel) that the
    /// client takes backward Calls on this connection. Until then [`Self::call`] fails
    /// with [`BackwardError::NotReady`].
    pub fn set_peer_ready(&self) -> Result<(), BackwardError> {
        self.tx
            .send(ServerInput::Backward(BackwardRequest::Ready))
            .map_err(|_| BackwardError::ConnectionLost)
    }

    /// Sends the RPC Call `msg` (a whole Call message, XID included, from the
    /// backward XID space the caller manages) to the client and returns its RPC
    /// Reply. Waits for a backward credit when all are in use.
    pub async fn call(&self, msg: XdrStream) -> Result<Bytes, BackwardError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(ServerInput::Backward(BackwardRequest::Call { msg, reply }))
            .map_err(|_| BackwardError::ConnectionLost)?;
        rx.await.unwrap_or(Err(BackwardError::ConnectionLost))
    }
}
