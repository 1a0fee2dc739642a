//! A verbs-shaped, provider-neutral RDMA API.
//!
//! This crate names the objects every RDMA provider exposes: protection domains
//! ([`ProtectionDomain`]), memory regions registered with access rights
//! ([`MemoryRegion`], [`Access`]) that are named on the wire by an [`STag`], queue pairs
//! ([`QueuePair`]) on which work requests ([`SendWr`], [`RecvWr`]) are posted and whose
//! results come back as [`Completion`]s, and connection management (private data,
//! IRD/ORD, typed connect errors, disconnect events: [`cm`]).
//!
//! What it does **not** do: it moves no bytes and opens no sockets. Providers do that:
//! the userspace iWARP provider (`iwarp` crate) today; an rdma-core provider and a
//! shared-memory provider later. Provider differences live behind the [`QueuePair`]
//! trait (object safe, runtime neutral: completions are polled with a `Context`, so the
//! crate needs no async runtime).
//!
//! Memory regions are backed by a [`bytes::BytesMut`] owned by the region, so that
//! software providers (iWARP, shared memory) can place tagged data straight into the
//! registered memory, and the buffer comes back to the owner on deregistration. A
//! region that peers only read can instead be the owner's immutable [`bytes::Bytes`]
//! ([`ProtectionDomain::register_bytes`]), which a provider sends from without a copy.
//! The registration table ([`ProtectionDomain`]) checks every remote access for
//! STag validity, PD membership, bounds and rights ([`AccessError`]).
#![warn(missing_docs, unreachable_pub)]

mod access;
pub mod cm;
mod device;
mod mr;
mod qp;
mod wr;

pub use access::{Access, STag};
pub use cm::{
    BoxFuture, ConnectError, ConnectParams, ConnectRequest, ConnectionManager, DisconnectReason,
    Listener, PeerParams, QpEvent, Route,
};
pub use device::{Device, DeviceAttributes, RegisterError, SoftwareDevice};
pub use mr::{AccessError, MemoryRegion, ProtectionDomain, ResolvedRegion};
pub use qp::{CompletionFuture, EventFuture, QueuePair, QueuePairExt};
pub use wr::{
    Completion, LocalSge, PostError, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};
