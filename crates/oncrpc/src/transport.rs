//! The client's transport abstraction: TCP ([`crate::tcp::TcpTransport`]) is the first
//! implementation, RPC-over-RDMA (crate `rpcrdma`) the second. A transport moves
//! whole RPC messages; record marking, RDMA chunks and credits are its business.
//! No runtime here: the traits only name futures.

use std::future::Future;
use std::io;

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
    /// The next message; `Ok(None)` when the peer closed the connection.
    fn recv(&mut self) -> impl Future<Output = io::Result<Option<Bytes>>> + Send;
}
