//! A verbs-shaped, provider-neutral RDMA API.
//!
//! This crate names the objects every RDMA provider exposes: devices ([`Device`],
//! found by the connection manager for an address) that create protection domains
//! ([`ProtectionDomain`]), memory regions registered with access rights
//! ([`MemoryRegion`], [`Access`]; registration can fail, [`RegisterError`]) that have a
//! local key and, with remote rights, a remote key named on the wire ([`STag`]), queue
//! pairs ([`QueuePair`]) on which work requests ([`SendWr`], [`RecvWr`], including
//! local invalidation) are posted and whose results come back as [`Completion`]s, and
//! connection management (a [`Route`] to a peer on a device, private data, IRD/ORD,
//! typed connect errors, disconnect events: [`cm`]). Gather and scatter lists name
//! registered memory only ([`LocalSge`]), as verbs hardware needs.
//!
//! What it does **not** do: it moves no bytes and opens no sockets. Providers do that:
//! the userspace iWARP provider (`iwarp` crate) and the rdma-core provider (`verbs`
//! crate: RDMA NICs, soft-RoCE, soft-iWARP). Provider differences live behind the [`QueuePair`]
//! trait (object safe, runtime neutral: completions are polled with a `Context`, so the
//! crate needs no async runtime).
//!
//! Memory regions are backed by a [`bytes::BytesMut`] owned by the region, so that
//! software providers (iWARP, shared memory) can place tagged data straight into the
//! registered memory, and the buffer comes back to the owner on deregistration. A
//! region that peers only read can instead be the owner's immutable [`bytes::Bytes`]
//! ([`ProtectionDomain::register_bytes`]), which a provider sends from without a copy.
//! A device that registers memory itself (verbs) gives regions its own keys and checks
//! peers' accesses itself ([`Registrar`]); software providers check them in the STag
//! table of [`software`] (STag validity, PD membership, rights, bounds:
//! [`software::AccessError`]), which only their protection domains have.
#![warn(missing_docs, unreachable_pub)]

mod access;
pub mod cm;
mod device;
mod mr;
pub mod pool;
mod qp;
pub mod software;
mod wr;

pub use access::{Access, STag};
pub use cm::{
    BoxFuture, ConnectError, ConnectParams, ConnectRequest, ConnectionManager, DisconnectReason,
    Listener, PeerParams, QpEvent, Route,
};
pub use device::{
    Device, DeviceAttributes, DeviceRegistration, RegisterError, Registrar, SoftwareDevice,
};
pub use mr::{MemoryRegion, ProtectionDomain, Registered, RegistrationStats};
pub use pool::{BufferError, BufferPool, PooledBuffer};
pub use qp::{CompletionFuture, EventFuture, QueuePair, QueuePairExt};
pub use wr::{
    Completion, LocalSge, PostError, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};
