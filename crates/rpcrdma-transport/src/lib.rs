//! RPC-over-RDMA as an ONC RPC transport: the protocol core (`rpcrdma`) executed on a
//! verbs-shaped provider (`rdma`, e.g. the userspace iWARP provider), glued to `oncrpc`.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 (Version One; §4.3 credits and
//! inline thresholds, §4.4-§4.5 chunks and message shapes, §5.4 memory registration,
//! §5.5 errors, §8 Upper Layer Bindings, §11 netids), RFC 8797 (connection private
//! data).
//!
//! ```text
//!   oncrpc::Client ──Transport──► client (requester)      server (responder) ◄── accept
//!        ▲  whole RPC replies          │ plan_call/finish        │ receive/reassemble
//!        │                             ▼                         ▼ Dispatcher::dispatch
//!        └──────────────── rpcrdma core (sans IO): marshal, reassembly, credits, errors
//!                                      │ Sends, RDMA Reads/Writes, invalidations
//!   setup (RFC 8797) · pool (pre-registered Receives) · registration (chunk regions)
//!                                      ▼
//!                         rdma::QueuePair (iwarp, later verbs / shm)
//! ```
//!
//! Modules, one concern each (as Linux's `transport.c` / `verbs.c` / `frwr_ops.c`):
//! - [`setup`]: configuration, RFC 8797 private data, connect and accept parameters;
//! - `pool`: receive buffers registered once per connection and re-posted;
//! - `registration`: chunk regions registered per call and invalidated before the call
//!   completes;
//! - [`client`]: the requester, an [`oncrpc::Transport`];
//! - [`server`]: the responder, feeding an [`oncrpc::Dispatcher`];
//! - [`counters`]: per-connection counters, logged on close;
//! - [`binding`]: what the transport needs from an Upper Layer Binding;
//! - [`error`]: the crate's error type.
//!
//! # What this crate does not do
//! It makes no protocol decisions of its own: message shapes, chunk lists, credits,
//! validation and error answers come from `rpcrdma`. It speaks Version One only (no
//! Version Two, no backward-direction calls), and keeps no duplicate request cache.
//!
//! # Copies per byte (userspace; the iWARP provider's own copies are listed in `iwarp`)
//! - Call, Short or Chunked inline part: 0 on the requester (header and XDR slices go
//!   out as a gather list); 1 on the responder (receive buffer → call buffer, `pool`).
//! - Call, DDP-eligible argument (Read chunk): 1 on the requester (the argument into
//!   its registered region, `registration`); 0 on the responder beyond the provider's
//!   placement into the sink region, then 1 if the call has several pieces and must be
//!   made contiguous for `Dispatcher::dispatch` (`Reassembled::to_bytes`).
//! - Reply, DDP-eligible result (Write chunk): 0 on the responder (the result's `Bytes`
//!   are the RDMA Write's gather list); on the requester the provider places it into
//!   the registered Write chunk and the region is handed back without a copy, then 1
//!   to make the reply contiguous for `oncrpc`'s `RecordReceiver` (`Bytes` only).
//! - Reply, inline: 1 on the requester (receive buffer → reply buffer).
//! - Long messages (Position Zero Read chunk, Reply chunk): as the DDP-eligible rows.
//!
//! Each copy in this crate carries a `// COPY:` comment.
#![warn(missing_docs, unreachable_pub)]

pub mod binding;
pub mod client;
pub mod counters;
pub mod error;
mod pool;
mod registration;
pub mod server;
pub mod setup;

pub use binding::RdmaBinding;
pub use client::{RdmaReceiver, RdmaSender, RdmaTransport};
pub use counters::{ConnStats, Counter, Snapshot, StatsRegistry};
pub use error::TransportError;
pub use server::RdmaServer;
pub use setup::RdmaConfig;

/// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §11: the netid for RPC-over-RDMA on IPv4.
pub const NETID_RDMA: &str = "rdma";
/// §11: the netid for RPC-over-RDMA on IPv6.
pub const NETID_RDMA6: &str = "rdma6";
