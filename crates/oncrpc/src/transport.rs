//! The client's transport abstraction: TCP ([`crate::tcp::TcpTransport`]) is the first
//! implementation, RPC-over-RDMA (crate `rpcrdma`) the second. A transport moves
//! whole RPC messages; record marking, RDMA chunks and credits are its business.
//! No runtime here: the traits only name futures.

use std::error::Error;
use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use xdr::XdrStream;

/// A way to reach an RPC server: connects and yields a sender and a receiver of
/// whole RPC messages (records on TCP, RPC-over-RDMA messages on RDMA).
pub trait Transport: Send + Sync + 'static {
    /// The sending half of a connection.
    type Sender: RecordSender;
    /// The receiving half of a connection.
    type Receiver: RecordReceiver;
    /// Opens a new connection.
    fn connect(&self) -> impl Future<Output = io::Result<(Self::Sender, Self::Receiver)>> + Send;
}

/// Sends whole RPC messages.
pub trait RecordSender: Send + 'static {
    /// Sends one message. DDP-eligible items may be moved without copying.
    fn send(&mut self, msg: &XdrStream) -> impl Future<Output = io::Result<()>> + Send;
}

/// Receives whole RPC messages.
pub trait RecordReceiver: Send + 'static {
    /// The next message or call failure; `Ok(None)` when the peer closed the
    /// connection.
    fn recv(&mut self) -> impl Future<Output = io::Result<Option<Incoming>>> + Send;
}

/// What a connection's receiver hands up.
#[derive(Debug)]
pub enum Incoming {
    /// A whole RPC message (for a client, a reply).
    Message(Bytes),
    /// The transport could not complete call `xid`, and says why; only that call
    /// fails (an RPC-over-RDMA server answered it with RDMA_ERROR, say, or its Reply
    /// did not match the chunks the call offered). The connection carries on.
    CallFailed {
        /// The call's transaction id.
        xid: u32,
        /// Why.
        error: CallFailure,
    },
}

impl Incoming {
    /// The message, if this is one.
    pub fn into_message(self) -> Option<Bytes> {
        match self {
            Incoming::Message(m) => Some(m),
            Incoming::CallFailed { .. } => None,
        }
    }
}

/// Why a transport failed one call: the transport's own typed error (for
/// RPC-over-RDMA, `rpcrdma_transport::TransportError`), which a caller can inspect
/// with [`CallFailure::downcast_ref`].
#[derive(Debug, Clone)]
pub struct CallFailure(Arc<dyn Error + Send + Sync>);

impl CallFailure {
    /// Wraps the transport's error.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        CallFailure(Arc::new(error))
    }

    /// The transport's error, if it is a `T`.
    pub fn downcast_ref<T: Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for CallFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}
