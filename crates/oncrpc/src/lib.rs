//! ONC RPC version 2 (RFC 5531): messages, AUTH_NONE and AUTH_SYS, record marking,
//! a transport-neutral dispatcher with a service API, and async (tokio) TCP drivers.
//!
//! ```text
//!   Service (your program)         Client::call(prog, vers, proc, args)
//!        ^  Request / XdrStream          |
//!   Dispatcher: Bytes -> XdrStream       |  xid allocation, timeouts, reconnect
//!        ^                               v
//!   server (tokio TCP)  <-- record marking (RFC 5531 §11) -->  Transport (TCP, RDMA)
//! ```
//!
//! Sans-IO modules (no tokio, no sockets, no clock): [`message`], [`auth`],
//! [`record`], [`service`], [`error`], [`drc`] (the duplicate request cache a
//! dispatcher may keep in front of non-idempotent procedures). Drivers, behind the
//! default `tokio` feature: `server`, `client`, `tcp`, `rpcbind`,
//! `udp` (a datagram server for small idempotent programs such as a portmapper).
//! [`transport`] holds the client's transport trait (TCP first, RDMA second).
//! A call enters the server as `Bytes` (a whole record, or an RPC-over-RDMA payload)
//! and its reply leaves as an [`xdr::XdrStream`], so that an RDMA transport can
//! reduce DDP-eligible results instead of copying them.
//!
//! This crate does not do: RPCSEC_GSS or AUTH_DH (calls with those flavors get
//! AUTH_REJECTEDCRED), a UDP client or a UDP server for programs that are not
//! idempotent, or RPC-over-RDMA itself (the
//! `rpcrdma` crate feeds [`Dispatcher::dispatch`] and implements the client's
//! transport trait).
#![warn(missing_docs, unreachable_pub)]
// Unsafe code only where a module allows it and states its invariants (`tcp::mapped`).
#![deny(unsafe_code)]

pub mod auth;
#[cfg(feature = "tokio")]
pub mod client;
pub mod drc;
pub mod error;
pub mod message;
pub mod metrics;
pub mod record;
#[cfg(feature = "tokio")]
pub mod rpcbind;
#[cfg(feature = "tokio")]
pub mod server;
pub mod service;
#[cfg(feature = "tokio")]
pub mod tcp;
pub mod transport;
#[cfg(feature = "tokio")]
pub mod udp;
mod wire_enum;

pub use auth::{AuthFlavor, AuthStat, AuthSysParms, Credentials, Gids, OpaqueAuth};
#[cfg(feature = "tokio")]
pub use client::{CallOptions, Client, ClientConfig, ClientError, Reply};
pub use drc::{CacheStats, ReplyCache};
pub use error::{CallError, Disposition, Scope, ServiceError};
pub use message::{
    AcceptStat, AcceptedStatus, CallHeader, MismatchInfo, MsgType, RejectStat, RejectedReply,
    ReplyBody, ReplyHeader, ReplyStat, Xid,
};
pub use record::{RecordDecoder, RecordError};
#[cfg(feature = "tokio")]
pub use rpcbind::{Registrar, RpcbindVersion};
#[cfg(feature = "tokio")]
pub use server::{Server, ServerConfig, TcpStats};
pub use service::{Dispatcher, Peer, Protocol, Request, Service, ServiceResult};
#[cfg(feature = "tokio")]
pub use tcp::TcpTransport;
pub use transport::{CallFailure, Incoming, RecordReceiver, RecordSender, Transport};
