//! The RPC-over-RDMA protocol core, sans IO: Version One
//! (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04, i.e. RFC 8166) and Version Two
//! (rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00), with RFC 8797 private data.
//!
//! # What this crate does not do
//! It does no I/O, spawns nothing, reads no clock and never calls an RDMA provider.
//! It does not register memory: it says which bytes need registering and takes the
//! resulting segments back. It knows nothing of ONC RPC beyond the first words of a
//! message (XID, message type, program/version/procedure) and the fixed GARBAGE_ARGS
//! reply. The async transport that posts Sends, RDMA Reads and Writes and invalidations
//! on a provider is a separate crate, and executes the values this one returns.
//! Retransmission belongs to RPC; the timers here (the responder's pull timeout for
//! responder-provided Read chunks, its RDMA Read timeout and credit-growth retry) are
//! driven quinn-style: `now` is an argument
//! (`Responder::handle_registered(now, ..)`, `handle_timeout(now)`) and
//! `Responder::poll_timeout()` says when to call back. The connection watchdog
//! ([`liveness`]) is ticked by its caller every `Watchdog::period`. The clock is never
//! read.
//!
//! # Copies
//! Sending copies no payload byte: a Send is a gather list of `Bytes` (header, inline
//! slices, DDP items), RDMA Writes and Read chunks reference the upper layer's buffers.
//! Receiving copies none either: the Payload stream comes back as slices of the
//! receive buffer and of the RDMA Read buffers ([`reassembly::Reassembled`]); only an
//! upper layer that asks for one contiguous buffer (`Reassembled::to_bytes`) pays one
//! copy of chunk data (marked `// COPY:`).
//!
//! # Shape
//! ```text
//!  received Send ──► validate::receive ──► Received ──► reassembly ──► Payload stream
//!        ▲              (header, chunks)    │  (+ RDMA Read data)         to the ULP
//!        │                                  ▼
//!        │                       error reply (RDMA_ERROR / GARBAGE_ARGS)
//!        │
//!  Send + RDMA Writes ◄── marshal ◄── xdr::XdrStream (inline + DDP-eligible items)
//!                          (Short / Chunked / Long, chunks, credits, version)
//! ```
//!
//! # Modules (one concern each, as in Linux xprtrdma)
//! - [`wire`]: open enums for wire values (version, message type, error code).
//! - [`chunks`]: segments, Read/Write/Reply chunks, list codec and [`Limits`].
//! - [`header`]: the transport header codec ([`PrefixView`], [`Header`]).
//! - [`validate`]: checks on received headers and the RDMA_ERROR answer.
//! - [`error`]: the one [`Error`] type, sub-enums, wire answer and scope.
//! - [`private_data`]: RFC 8797 connection private data.
//! - [`rpc`]: the few RPC message words the transport reads or writes.
//! - [`ulb`]: the Upper Layer Binding interface (reply sizes, DDP-eligibility).
//! - [`marshal`]: sender side: choosing Short / Chunked / Long, building chunks.
//! - [`reassembly`]: receiver side: rebuilding the Payload stream from chunks.
//! - [`credits`]: credit accounting, requester and responder, per direction.
//! - [`version`]: Version Two negotiation (and fallback to Version One).
//! - [`options`]: the registry of Version Two optional features (`rdma_opttype`), and
//!   the reliable-reply option this crate defines (docs/rpcrdma-v2.md).
//! - [`pull`]: responder-provided Read chunks waiting for RDMA_DONE, by XID, with
//!   deadlines.
//! - [`requester`], [`responder`]: per-connection state machines driven by `handle_*`
//!   events, yielding [`Action`]s from `poll_action` and upper-layer events from
//!   `poll_event`.
//! - [`stats`]: the per-connection counters and the sink they go to.
//! - [`liveness`]: the watchdog's judgement of a busy connection that makes no
//!   progress (warn, or close one stuck on its own work requests).
//! - [`action`]: the provider-neutral work items (Send, RDMA Read/Write, register,
//!   invalidate, post Receives, close).
#![warn(missing_docs, unreachable_pub)]

pub mod action;
pub mod chunks;
pub mod credits;
pub mod error;
pub mod header;
pub mod liveness;
pub mod marshal;
pub mod memory;
pub mod options;
pub mod private_data;
pub mod pull;
pub mod reassembly;
pub mod requester;
pub mod responder;
pub mod rpc;
pub mod stats;
pub mod ulb;
pub mod validate;
pub mod version;
pub mod wire;

#[cfg(test)]
mod pair;
#[cfg(test)]
mod testutil;

pub use action::{Action, Endpoint};
pub use chunks::{ChunkLists, Limits, ReadChunk, Segment, WriteChunk};
pub use error::{
    ArgsError, CreditError, Error, HeaderError, MarshalError, ReplyError, Scope, WireAnswer,
};
pub use header::{Body, ErrorBody, Header, Parsed, Prefix, PrefixView};
pub use private_data::{PeerLimits, PrivateData};
pub use requester::{Requester, RequesterConfig, RequesterEvent};
pub use responder::{Responder, ResponderConfig, ResponderEvent};
pub use ulb::{ReplySizing, UpperLayerBinding};
pub use validate::{Policy, Received};
pub use wire::{ErrCode, MsgType, OptType, Version, Xid};
