//! Connection management: parameters, private data, connect errors, events.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use crate::device::Device;
use crate::mr::ProtectionDomain;
use crate::qp::QueuePair;
use crate::wr::RecvWr;

/// A boxed, sendable future (keeps the CM traits object safe and runtime neutral).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one side offers at connection setup.
#[derive(Clone, Debug, Default)]
pub struct ConnectParams {
    /// Private data for the peer's ULP (RFC 8797 on RPC-over-RDMA). Providers cap its
    /// length (iWARP: 512 bytes minus the RFC 6581 block).
    pub private_data: Bytes,
    /// Inbound RDMA Read queue depth offered (how many Read Requests the peer may have
    /// outstanding against us).
    pub ird: u16,
    /// Outbound RDMA Read depth wanted.
    pub ord: u16,
    /// Receives posted before the connection carries data (verbs: `post_recv` on the
    /// QP before `rdma_connect`/`rdma_accept`), so that a peer's first Send, which may
    /// follow the MPA Reply at once, always finds a buffer.
    pub recvs: Vec<RecvWr>,
}

/// What the peer offered at connection setup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerParams {
    /// The peer's ULP private data.
    pub private_data: Bytes,
    /// The peer's IRD (0 if the peer did not say: MPA revision 1).
    pub ird: u16,
    /// The peer's ORD.
    pub ord: u16,
    /// The peer's transport address.
    pub addr: Option<SocketAddr>,
}

/// Why an active connect failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The peer rejected the connection, with its private data.
    #[error("connection rejected by peer ({} bytes of private data)", private_data.len())]
    Rejected {
        /// The peer's private data in the reject.
        private_data: Bytes,
    },
    /// Transport failure (refused, reset, closed during setup).
    #[error("transport error during connection setup: {0}")]
    Io(#[from] io::Error),
    /// The peer violated the setup protocol.
    #[error("connection setup protocol error: {0}")]
    Protocol(Box<dyn std::error::Error + Send + Sync>),
    /// Our parameters are unusable (e.g. private data too long).
    #[error("invalid connection parameters: {0}")]
    InvalidParams(&'static str),
    /// The setup did not finish in time.
    #[error("connection setup timed out")]
    Timeout,
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisconnectReason {
    /// We called disconnect.
    Local,
    /// The peer closed the stream in an orderly way.
    PeerClosed,
    /// We detected a protocol violation and told the peer (iWARP: Terminate sent).
    LocalError {
        /// Layer (provider-defined; iWARP: 0 RDMAP, 1 DDP, 2 LLP).
        layer: u8,
        /// Error type.
        etype: u8,
        /// Error code.
        code: u8,
    },
    /// The peer reported an error (iWARP: Terminate received).
    RemoteError {
        /// Layer.
        layer: u8,
        /// Error type.
        etype: u8,
        /// Error code.
        code: u8,
    },
    /// The transport failed (reset, broken pipe, unexpected EOF mid-message).
    Transport(io::ErrorKind),
}

/// Asynchronous queue-pair events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpEvent {
    /// The connection ended; all outstanding work requests complete as flushed.
    Disconnected(DisconnectReason),
}

/// Active and passive connection setup of a provider.
///
/// Connecting takes two steps, as with `rdma_cm`: [`ConnectionManager::resolve`] finds
/// the device that reaches the peer (`rdma_resolve_addr`, `rdma_resolve_route`), the
/// consumer allocates its protection domain on that device and registers its initial
/// Receives there, then [`Route::connect`] connects.
pub trait ConnectionManager: Send + Sync {
    /// The provider's queue pair.
    type Qp: QueuePair;
    /// A resolved path to a peer, ready to connect.
    type Route: Route<Qp = Self::Qp>;
    /// The provider's listener.
    type Listener: Listener<Qp = Self::Qp>;

    /// Finds the device that reaches `addr`.
    fn resolve<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, Result<Self::Route, ConnectError>>;

    /// Listens on `addr`.
    fn listen<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, io::Result<Self::Listener>>;
}

/// A path to a peer on a known device ([`ConnectionManager::resolve`]).
pub trait Route: Send {
    /// The provider's queue pair.
    type Qp: QueuePair;

    /// The device the connection will use: where to allocate its protection domain.
    fn device(&self) -> &Arc<dyn Device>;

    /// Connects, creating a queue pair on `pd` (a protection domain of
    /// [`Route::device`]).
    fn connect(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<Self::Qp, ConnectError>>;
}

/// A listening endpoint.
pub trait Listener: Send {
    /// The provider's queue pair.
    type Qp: QueuePair;
    /// An incoming connection request.
    type Request: ConnectRequest<Qp = Self::Qp>;

    /// Waits for the next connection request (transport connected, the peer's setup
    /// message read).
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Self::Request>>;

    /// The bound address.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// An incoming connection request, to accept or reject.
pub trait ConnectRequest: Send {
    /// The provider's queue pair.
    type Qp: QueuePair;

    /// What the peer offered.
    fn peer(&self) -> &PeerParams;

    /// The device the request arrived on: where to allocate the connection's
    /// protection domain.
    fn device(&self) -> &Arc<dyn Device>;

    /// Accepts, creating a queue pair on `pd` (a protection domain of
    /// [`ConnectRequest::device`]).
    fn accept(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<Self::Qp, ConnectError>>;

    /// Rejects with private data.
    fn reject(self, private_data: Bytes) -> BoxFuture<'static, io::Result<()>>;
}
