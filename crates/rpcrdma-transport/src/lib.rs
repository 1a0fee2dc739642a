//! RPC-over-RDMA as an ONC RPC transport: the protocol core (`rpcrdma`) executed on a
//! verbs-shaped provider (`rdma`, e.g. the userspace iWARP provider), glued to `oncrpc`.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 (Version One; §4.3 credits and
//! inline thresholds, §4.4-§4.5 chunks and message shapes, §5.4 memory registration,
//! §5.5 errors, §7 backward direction, §8 Upper Layer Bindings, §11 netids), RFC 8797
//! (connection private data), rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00
//! (Version Two), draft-cel-nfsv4-rpcrdma-reliable-reply-05 (responder-provided Read
//! chunks); what goes on the wire: docs/rpcrdma-v2.md.
//!
//! ```text
//!   oncrpc::Client ──Transport──► ClientRole          ServerRole ──► Dispatcher
//!        ▲  replies, call failures  rpcrdma::Requester   rpcrdma::Responder  ◄── accept
//!        │                              └────── driver::Driver ──────┘
//!        │                  one task per connection, either role: handle_* in,
//!        │                  actions and events out, completions, watchdog, teardown
//!        └──────────────────────────────┬───────────────────────────────────
//!                                      │ Sends, RDMA Reads/Writes, registrations,
//!                                      │ invalidations, Receives
//!   setup (RFC 8797) · pool (pre-registered Receives) · registration (chunk regions)
//!                                      ▼
//!          rdma::QueuePair (verbs, iwarp, the tests' in-memory provider)
//! ```
//!
//! Modules, one concern each (as Linux's `transport.c` / `verbs.c` / `frwr_ops.c`):
//! - [`setup`]: configuration, RFC 8797 private data, connect and accept parameters;
//! - `pool`: receive buffers and send header buffers, registered once per
//!   connection;
//! - `registration`: chunk regions registered per call and invalidated before the call
//!   completes;
//! - `driver`: one connection's task, the same for both roles: it owns the queue pair,
//!   its buffers and work requests in flight, feeds the role's core and executes its
//!   work, and keeps the connection from being silently stuck (watchdog, teardown
//!   grace);
//! - [`client`]: the requester's role, an [`oncrpc::Transport`] (pulled Replies and
//!   backward Calls included: the core decides, the role registers, reads, fences
//!   and hands Replies up);
//! - [`server`]: the responder's role, feeding an [`oncrpc::Dispatcher`] (reliable
//!   reply and backward Calls included: the core decides, the role registers, posts
//!   and invalidates);
//! - [`backward`]: the service-facing backward-direction API ([`BackwardChannel`]);
//! - [`counters`]: per-connection counters, logged on close, and the live state
//!   dump;
//! - [`binding`]: what the transport needs from an Upper Layer Binding;
//! - [`error`]: the crate's error type.
//!
//! # What this crate does not do
//! It makes no protocol decisions of its own: both roles drive the core's
//! per-connection state machines (`rpcrdma::Requester`, `rpcrdma::Responder`), which
//! choose message shapes, chunk lists, credits, validation, reassembly, error answers,
//! version negotiation, reliable reply and the backward direction; this crate executes
//! their actions on the provider and keeps only what execution needs (buffers, regions,
//! work requests in flight, the upper layer's channels). It speaks
//! Version One, and Version Two on the wire with [`RdmaConfig::version_two`] (probe,
//! ERR_VERS fallback remembered per server, replies in the caller's version). Between
//! two Version Two peers with [`RdmaConfig::reliable_reply`], Replies that fit no
//! requester-provided resource come through responder-provided Read chunks. With
//! [`RdmaConfig::backward_credits`] the server calls the client on its connection
//! ([`RdmaServer::backward_channels`], [`RdmaTransport::serve_backward`]). The
//! duplicate request cache is not here but in the dispatcher (`oncrpc::drc`), the
//! same for TCP and RDMA.
//!
//! # Resource bounds (per connection)
//! - Receives: `credits` buffers of the receive threshold, posted with the connection
//!   (`rdma::ConnectParams::recvs`); a responder re-posts one only when its Call is
//!   answered, so a requester past its grant finds none (§4.3.1).
//! - Send headers: `credits` (+8 on a responder) registered buffers.
//! - Responder Read sinks: at most `max_read_in_flight` bytes at once (one Call alone
//!   up to `max_message`); Calls beyond wait, holding their credit.
//! - Requester chunk regions: those of the Calls in flight (at most the credit limit),
//!   fenced when the Reply arrives or the connection ends.
//! - Responder reply Read chunks: one region per Reply waiting for RDMA_DONE, each
//!   holding one reserved Receive, so at most `credits` - 1; invalidated on RDMA_DONE,
//!   after `pull_timeout`, or when the connection ends.
//! - Requester pull sinks: one per Reply being pulled (at most the credit limit), each
//!   at most `max_message` bytes.
//! - Backward direction: `backward_credits` more Receives on each side; a server's
//!   backward Calls beyond its backward credits wait in a queue (unbounded: the
//!   service's own calls).
//!
//! # Copies per byte (userspace; the iWARP provider's own copies are listed in `iwarp`)
//! - Call, Short or Chunked inline part: 1 on the requester (header and XDR slices are
//!   copied into the registered send buffer, at most the inline threshold, so that a
//!   Send is one gather element with no registration of its own; 0 when every send
//!   buffer is busy: then they go out as a gather list); 1 on the responder (receive
//!   buffer → call buffer, `pool`).
//! - Call, DDP-eligible argument (Read chunk): 0 on the requester when the argument is
//!   one piece (an NFS WRITE's data: its `Bytes` are registered as the region,
//!   `rdma::ProtectionDomain::register_bytes`, and the provider answers the peer's
//!   RDMA Reads from them), else 1 (the pieces into one registered region,
//!   `registration`); on the responder 0 beyond the provider's placement into the sink
//!   region, a pooled buffer reused without a zero fill (a successful Read fills it
//!   whole; `rdma::BufferPool`). A Call
//!   with one Read chunk (an NFS WRITE) is made contiguous for `Dispatcher::dispatch`
//!   in the sink's own buffer, which has room around the chunk: the inline pieces are
//!   copied around the data, the data is not (`registration::join_in_place`); a Call
//!   with several chunks is copied once (`Reassembled::to_bytes`). Measured (nfsbench,
//!   1 MiB x 8, 2026-11-23, before the join and the pool): the zero fill and that
//!   copy were most of the server's CPU difference between WRITE over RDMA and over
//!   TCP.
//! - Reply, DDP-eligible result (Write chunk): 0 on the responder (the result's `Bytes`
//!   are the RDMA Write's gather list); 0 on the requester beyond the provider's
//!   placement into the registered Write chunk when the Reply has one chunk with data
//!   (an NFS READ): the chunk is registered out of a buffer with room around it (only
//!   the chunk is reachable by the peer), and the Reply is made contiguous there for
//!   `oncrpc`'s `RecordReceiver` (`Bytes` only) by copying the inline pieces around
//!   the data (`registration::join_in_place`); 1 with several such chunks or a tail
//!   longer than the room (`Reassembled::to_bytes`). No zero fill either: the Write
//!   chunk is a pooled buffer that only ever held bytes from the same server
//!   (`registration` module docs: what a responder that returns more than it wrote
//!   can show, and why that is safe).
//! - Reply, inline: 1 on the responder (into the registered send buffer, as a Call's
//!   inline part); 1 on the requester (receive buffer → reply buffer), 2 for the
//!   inline pieces of a Reply with Write chunk data (into the room around the chunk,
//!   or the joining copy).
//! - Transport headers: 1 each way (into a registered send buffer; out of the
//!   receive buffer), tens of bytes.
//! - Long messages (Position Zero Read chunk, Reply chunk): as the DDP-eligible rows.
//! - Reply through a responder-provided Read chunk: 1 on the responder (the Payload
//!   stream into its registered read-only region, `registration`); 0 on the requester
//!   beyond the provider's placement into the pull sink (the pulled bytes are the
//!   reply); Write chunk data is joined to it as above (its pieces into the Write
//!   chunk's room when they fit, else 1 copy of everything).
//! - Backward Calls and Replies: as inline Calls and Replies.
//!
//! Each copy in this crate carries a `// COPY:` comment.
#![warn(missing_docs, unreachable_pub)]

pub mod backward;
pub mod binding;
pub mod client;
pub mod counters;
mod driver;
pub mod error;
mod pool;
mod registration;
pub mod server;
pub mod setup;

pub use backward::{BackwardChannel, BackwardError};
pub use binding::RdmaBinding;
pub use client::{RdmaReceiver, RdmaSender, RdmaTransport};
pub use counters::{ConnStats, Counter, LiveState, MemoryStats, Snapshot, StatsRegistry};
pub use error::TransportError;
pub use server::{release_when_quiet, RdmaServer, CONNECTION_STATE, QUIET_PERIOD};
pub use setup::RdmaConfig;

/// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §11: the netid for RPC-over-RDMA on IPv4.
pub const NETID_RDMA: &str = "rdma";
/// §11: the netid for RPC-over-RDMA on IPv6.
pub const NETID_RDMA6: &str = "rdma6";
