//! A userspace iWARP RDMA provider: RDMAP (RFC 5040) over DDP (RFC 5041) over MPA
//! (RFC 5044, enhanced setup of RFC 6581) over an ordinary TCP socket.
//!
//! It speaks real iWARP on the wire (Linux soft-iWARP and Wireshark decode it) and
//! implements the provider-neutral API of the `rdma` crate ([`IwarpProvider`],
//! [`IwarpQp`]).
//!
//! ```text
//!   rdma API (QueuePair, ConnectionManager)
//!        │
//!   driver  ── tokio: sockets, MPA setup, reader + writer task per connection
//!        │ bytes in / TxBatch out
//!   conn     ── sans-IO RDMAP/DDP state machine: placement, MSN/MO, ORD/IRD,
//!        │       Terminate on every violation (error::ProtocolError)
//!   handshake── sans-IO MPA Request/Reply, per-phase types
//!   wire     ── View/Repr codecs: MPA frames + FPDUs (mpa), DDP/RDMAP headers (ddp)
//! ```
//!
//! What it does **not** do: MPA markers (refused at setup, as Linux siw does),
//! peer-to-peer RTR messages, shared receive queues, memory windows, or any kernel
//! bypass. `wire`, `handshake` and `conn` use no runtime, socket or clock.
//!
//! # Copies per byte (userspace, not counting the kernel's socket copies)
//!
//! - **Send** and **RDMA Write** from [`rdma::Sge::Bytes`]: 0 on the sender (the
//!   payload `Bytes` go straight into `writev`); 1 on the receiver (receive buffer →
//!   posted receive buffer or target region, `ResolvedRegion::place`). From
//!   [`rdma::Sge::Local`]: +1 on the sender (region → FPDU scratch).
//! - **RDMA Read**: 1 at the data source (region → FPDU scratch, because the region is
//!   mutable memory behind a lock), 1 at the sink (receive buffer → sink region).
//! - CRC32c, when negotiated, reads each byte once more on each side (no copy).
//!
//! Each remaining copy carries a `// COPY:` comment.
#![warn(missing_docs, unreachable_pub)]

pub mod conn;
pub mod driver;
pub mod error;
pub mod handshake;
pub mod tx;
pub mod wire;

pub use conn::{Connection, Limits};
pub use driver::{IwarpConfig, IwarpConnectRequest, IwarpListener, IwarpProvider, IwarpQp};
pub use error::{ProtocolError, TerminateCode};
pub use handshake::{HandshakeError, IncomingRequest, Initiator, Negotiated, Responder};
pub use tx::TxBatch;
