//! The crate's error type. `io::Error` appears only at the `oncrpc` boundary, where its
//! transport traits require it.

use std::io;

/// Why the transport could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Connection setup failed.
    #[error("connection setup failed: {0}")]
    Connect(#[from] rdma::ConnectError),
    /// The connection is gone.
    #[error("not connected")]
    NotConnected,
    /// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8: "Requesters MUST NOT send
    /// RPC-over-RDMA messages for Upper Layer Protocols that do not have a Upper Layer
    /// Binding."
    #[error("no upper layer binding for program {prog} version {vers}")]
    NoBinding {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
    },
    /// The message handed to the transport is not an RPC Call.
    #[error("not an RPC call message")]
    NotACall,
    /// The protocol core cannot marshal the message.
    #[error("cannot marshal: {0}")]
    Marshal(#[from] rpcrdma::MarshalError),
    /// The provider refused a work request.
    #[error("work request refused: {0}")]
    Post(#[from] rdma::PostError),
    /// The device refused to register memory (a chunk's, a buffer pool's).
    #[error("memory registration failed: {0}")]
    Register(#[from] rdma::RegisterError),
    /// The protocol core failed the call: the server answered it with RDMA_ERROR
    /// (`rpcrdma::ReplyError::PeerError`), or its Reply did not match the call (another
    /// RPC-over-RDMA version, chunks other than those offered, a failed pull).
    #[error("{0}")]
    Call(#[from] rpcrdma::Error),
    /// The Reply could not be put back together from its chunks (the binding cannot
    /// parse it, a chunk is missing or shorter than its returned length): the core's
    /// `Requester::assemble_reply`.
    #[error("reply cannot be put together: {0}")]
    BadReply(rpcrdma::ReplyError),
    /// Socket-level failure (listening).
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

impl From<TransportError> for io::Error {
    fn from(e: TransportError) -> io::Error {
        let kind = match &e {
            TransportError::Io(e) => e.kind(),
            TransportError::NotConnected | TransportError::Post(_) => io::ErrorKind::NotConnected,
            TransportError::Register(_) => io::ErrorKind::OutOfMemory,
            TransportError::Connect(rdma::ConnectError::Io(e)) => e.kind(),
            TransportError::Connect(rdma::ConnectError::Timeout) => io::ErrorKind::TimedOut,
            TransportError::Connect(_) => io::ErrorKind::ConnectionRefused,
            TransportError::NoBinding { .. } => io::ErrorKind::Unsupported,
            TransportError::NotACall | TransportError::Marshal(_) => io::ErrorKind::InvalidInput,
            TransportError::Call(_) | TransportError::BadReply(_) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}
