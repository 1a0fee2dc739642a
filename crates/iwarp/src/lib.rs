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
//!        │       (admission: handshakes in progress per source, whom to drop)
//!        │ bytes in / TxBatch out
//!   conn     ── sans-IO RDMAP/DDP state machine: placement, MSN/MO, ORD/IRD,
//!        │       Terminate on every violation (error::ProtocolError)
//!   handshake── sans-IO MPA Request/Reply, per-phase types
//!   wire     ── View/Repr codecs: MPA frames + FPDUs (mpa), DDP/RDMAP headers (ddp)
//! ```
//!
//! What it does **not** do: MPA markers (refused at setup, as Linux siw does),
//! peer-to-peer RTR messages, shared receive queues, memory windows, or any kernel
//! bypass. `wire`, `handshake`, `conn` and `admission` use no runtime, socket or
//! clock.
//!
//! # Copies per byte (userspace, not counting the kernel's socket copies)
//!
//! - **RDMA Write**: on the sender 0 from a region registered from the consumer's
//!   bytes ([`rdma::ProtectionDomain::register_bytes`]: they go straight into
//!   `writev`), else 1 as for a Send. On the receiver, with CRC off, 0 for the part of each
//!   segment not yet buffered when its header arrives (direct placement: the socket
//!   is read straight into the target region, `conn::direct`, one vectored read per
//!   segment that also fetches the next FPDU's header; in practice every byte of a
//!   large Write but at most 1 KiB per 64 KiB segment read behind each payload); 1
//!   for the rest and whenever CRC is on (receive buffer → region,
//!   `ResolvedRegion::place`).
//! - **Send**: on the sender 0 from a region registered from the consumer's bytes,
//!   1 from a region of owned memory ([`rdma::ProtectionDomain::register`]: region →
//!   FPDU scratch); 1 on the receiver (receive buffer → posted receive buffer).
//! - **RDMA Read**: at the data source 0 from a region registered from the consumer's
//!   bytes ([`rdma::ProtectionDomain::register_bytes`]: the Read Response gathers
//!   slices of them), else 1 (region → FPDU scratch, because the region is mutable
//!   memory behind a lock); at the sink as for a Write (0 with direct placement, else
//!   1).
//! - CRC32c, when negotiated, reads each byte once more on each side (no copy).
//!
//! Each remaining copy carries a `// COPY:` comment. The receive buffer adds a
//! partial one: reclaiming it moves the unread tail of a partial FPDU to its front.
//!
//! # Defaults worth knowing
//!
//! - FPDUs carry at most [`Limits::max_ulpdu`] = 65,516 bytes of ULPDU (fewest headers
//!   per byte). Linux siw reassembles such FPDUs across TCP segments (the lab's
//!   knfsd pulls a 60 kB call from us as one FPDU); tshark 4.0's MPA dissector,
//!   however, loses FPDU sync on loopback captures when one FPDU spans several large
//!   TCP segments, so the tshark test uses 16,000.
//! - As the active side we hold our first FPDU for [`IwarpConfig::first_send_delay`]
//!   (50 ms) after the MPA Reply: stock Linux siw may not read an FPDU that arrives
//!   before it has hooked up its receive path (docs/linux-facts.md, "siw accept
//!   race"). Set it to zero between two endpoints of this crate.
//! - Receives can (and for a server, should) be posted before the connection carries
//!   data: [`rdma::ConnectParams::recvs`].
//! - A listener reads every MPA Request concurrently under
//!   [`IwarpConfig::handshake`] ([`HandshakeLimits`]): 5 s to send it, at most 16
//!   handshakes in progress per source address (IPv6: per /64) and 4096 in all; a
//!   cap drops the oldest handshake of the source at fault and never stops accept,
//!   so stalled peers cannot lock honest ones out (`admission`).
//! - RDMAP does not order a Read Response against Writes the requester posted after
//!   the Read (RFC 5040 §5.5); the send queue is not fenced.
//!
//! # Evidence
//!
//! Loopback tests between two endpoints over real TCP (`tests/loopback.rs`),
//! per-rule Terminate tests (`tests/rules.rs`), stalled handshakes
//! (`tests/handshake_flood.rs`, `tests/accept.rs`), byte-exact replay of Linux siw
//! captures (`tests/pcap_vectors.rs`), property tests (`tests/proptest_wire.rs`),
//! a tshark check of our own capture (`tests/tshark_capture.rs`), a fuzz target
//! (`fuzz/`, see `FUZZING.md`), a loopback benchmark (`benches/loopback.rs`), and
//! two kernel-lab scenarios against Linux siw
//! (`crates/lab/tests/guest_knfsd/iwarp_to_knfsd.rs`,
//! `crates/lab/tests/guest_kclient/kclient_to_iwarp.rs`).
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod conn;
pub mod driver;
pub mod error;
pub mod handshake;
pub mod tx;
pub mod wire;

pub use admission::HandshakeLimits;
pub use conn::{Connection, DirectPlacement, Limits};
pub use driver::{IwarpConfig, IwarpConnectRequest, IwarpListener, IwarpProvider, IwarpQp};
pub use error::{ProtocolError, TerminateCode};
pub use handshake::{HandshakeError, IncomingRequest, Initiator, Negotiated, Responder};
pub use tx::TxBatch;
