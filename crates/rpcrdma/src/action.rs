//! Work the state machines hand to the driver, as values (quinn's `Transmit`).
//!
//! Provider-neutral: STags are `u32` handles, offsets `u64`, lengths `u32`. The driver
//! executes each [`Action`] on its RDMA provider and reports completions back through
//! the state machine's `handle_*` methods.

use bytes::Bytes;

use crate::chunks::Segment;
use crate::marshal::{RdmaWrite, Registration};
use crate::wire::Xid;

/// One thing for the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Action {
    /// Post a Send of `send` (a gather list: transport header first, then payload
    /// pieces). With `invalidate`, post Send With Invalidate of that remote STag.
    Send {
        /// The XID the Send belongs to.
        xid: Xid,
        /// The gather list. Total length is within the peer's inline threshold.
        send: Vec<Bytes>,
        /// STag the peer allowed us to invalidate remotely.
        invalidate: Option<u32>,
    },
    /// Register memory for `xid`, then call `handle_registered` with one segment list
    /// per registration: `Requester::handle_registered(xid, ..)` for a Call's chunks,
    /// `Responder::handle_registered(now, xid, ..)` for a Reply's Payload stream
    /// exposed read-only through a responder-provided Read chunk
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1; `Registration::Read`, remote
    /// read access only).
    Register {
        /// The Call.
        xid: Xid,
        /// What to register, in order.
        registrations: Vec<Registration>,
    },
    /// RDMA Read `segments` (concatenated, in order) into one local buffer, then call
    /// `handle_read_done(xid, chunk, data)` on the state machine that asked: the
    /// responder pulling a Call's Read chunk, or the requester pulling a Reply from a
    /// responder-provided Read chunk (`chunk` 0). On failure call `handle_read_failed`.
    RdmaRead {
        /// The Call.
        xid: Xid,
        /// Index of the Read chunk in the Call's Read list.
        chunk: usize,
        /// The requester's segments.
        segments: Vec<Segment>,
    },
    /// Post an RDMA Write (before the Send of the same XID, which orders it).
    RdmaWrite {
        /// The Reply.
        xid: Xid,
        /// What to write where.
        write: RdmaWrite,
    },
    /// Invalidate (fence) our registrations for Call `xid` before its Upper Layer sees
    /// the reply (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.4.1). Skip a handle the
    /// peer already invalidated with Send With Invalidate. A requester configured with
    /// `posted_invalidation` (verbs LOCAL_INV) holds the Call's Reply until the driver
    /// reports `Requester::handle_invalidated(xid, handle)` for each handle; otherwise the driver fences before
    /// it looks at the events that follow.
    Invalidate {
        /// The Call.
        xid: Xid,
        /// Our STags to invalidate.
        handles: Vec<u32>,
    },
    /// Post `n` more Receives (a credit increase, effective before it is announced).
    PostReceives(u32),
    /// Post `n` Receives set apart for backward-direction messages (§7.2.2: a client
    /// "must pre-post enough additional receive buffers to match its advertised
    /// backward direction credit value"; a server "must pre-post a receive buffer for
    /// each backward direction Call it sends"). They do not count toward the forward
    /// grant: do not report them with `handle_receives_posted`.
    PostBackwardReceives(u32),
    /// Close the connection.
    Close,
}
