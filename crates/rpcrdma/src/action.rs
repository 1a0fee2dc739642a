//! Work the state machines hand to the driver, as values (quinn's `Transmit`).
//!
//! Provider-neutral: STags are `u32` handles, offsets `u64`, lengths `u32`. The driver
//! executes each [`Action`] on its RDMA provider and reports completions back through
//! the state machine's `handle_*` methods.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::chunks::Segment;
use crate::error::Error;
use crate::liveness::Waiting;
use crate::marshal::{RdmaWrite, Registration};
use crate::memory::MemoryBudget;
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

/// A protocol core as a driver runs it, for either role ([`crate::Requester`],
/// [`crate::Responder`]): the work to do ([`Endpoint::poll_reposts`],
/// [`Endpoint::poll_action`], [`Endpoint::poll_event`]), what came of each piece of
/// work, the core's timer and its wait for memory. One driver loop runs both roles
/// through it; each method is the role's own `handle_*` method of the same name, with
/// one signature for both (a method one role has no use for does nothing there).
pub trait Endpoint {
    /// What the core hands the upper layer.
    type Event;

    /// Receives to post again before the next actions: the ones the messages just
    /// handled came in (a requester's at once; a responder's once the Call is
    /// answered, §4.3.1).
    fn poll_reposts(&mut self) -> u32;

    /// The next action for the driver.
    fn poll_action(&mut self) -> Option<Action>;

    /// The next event for the upper layer.
    fn poll_event(&mut self) -> Option<Self::Event>;

    /// A Receive completed with `buf`.
    fn handle_receive(&mut self, buf: Bytes);

    /// `n` Receives of an [`Action::PostReceives`] are posted.
    fn handle_receives_posted(&mut self, n: u32);

    /// The memory of [`Action::Register`] for `xid` is registered as `segments` (one
    /// list per registration) at `now`.
    fn handle_registered(
        &mut self,
        now: Instant,
        xid: Xid,
        segments: Vec<Vec<Segment>>,
    ) -> Result<(), Error>;

    /// The device refused to register the memory of [`Action::Register`] for `xid`.
    fn handle_registration_failed(&mut self, xid: Xid);

    /// The RDMA Reads of an [`Action::RdmaRead`] are posted, at `now`.
    fn handle_reads_posted(&mut self, xid: Xid, chunk: usize, now: Instant);

    /// Every RDMA Read of Read chunk `chunk` of `xid` completed with `data`.
    fn handle_read_done(&mut self, xid: Xid, chunk: usize, data: Bytes);

    /// An RDMA Read of `xid` failed, or could not be posted.
    fn handle_read_failed(&mut self, xid: Xid);

    /// Whether the bytes placed in our region `handle` of `xid`, now fenced, are
    /// wanted (a Reply is built from them): the driver keeps the region's memory.
    fn wants_placed(&self, xid: Xid, handle: u32) -> bool;

    /// Our region `handle` of `xid` is fenced ([`Action::Invalidate`]).
    fn handle_invalidated(&mut self, xid: Xid, handle: u32);

    /// When [`Endpoint::handle_timeout`] wants to be called next.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The deadline of [`Endpoint::poll_timeout`] passed.
    fn handle_timeout(&mut self, now: Instant);

    /// The memory budget a Call waits for, and the release generation it saw.
    fn memory_wait(&self) -> Option<(&Arc<MemoryBudget>, u64)>;

    /// The budget of [`Endpoint::memory_wait`] released memory.
    fn handle_memory_released(&mut self);

    /// What this connection's Calls wait for at `now` (`liveness`).
    fn waiting(&self, now: Instant) -> Waiting;

    /// The connection is gone.
    fn handle_disconnect(&mut self);
}
