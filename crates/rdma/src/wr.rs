//! Work requests and completions.

use crate::access::STag;
use crate::mr::MemoryRegion;

/// A scatter/gather element: a range of a registered region, named to the provider by
/// the region's local key. Gather lists name registered memory only, as verbs devices
/// need (`ibv_sge.lkey`); bytes the consumer did not register reach a Send through
/// [`crate::ProtectionDomain::register_bytes`] (software providers then send from
/// them without a copy) or a copy into a registered buffer.
#[derive(Clone, Debug)]
pub struct LocalSge {
    /// The region.
    pub mr: MemoryRegion,
    /// Byte offset inside the region.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl LocalSge {
    /// The whole of `mr`.
    pub fn whole(mr: MemoryRegion) -> LocalSge {
        let len = mr.len();
        LocalSge { mr, offset: 0, len }
    }
}

impl From<MemoryRegion> for LocalSge {
    fn from(mr: MemoryRegion) -> LocalSge {
        LocalSge::whole(mr)
    }
}

/// A remote buffer: STag plus tagged offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The remote region's STag.
    pub stag: STag,
    /// The tagged offset inside it.
    pub offset: u64,
}

/// The operation of a send-queue work request.
#[derive(Clone, Debug)]
pub enum SendOp {
    /// Send.
    Send,
    /// Send with Invalidate of the peer's STag.
    SendWithInvalidate(STag),
    /// Send with Solicited Event.
    SendWithSolicitedEvent,
    /// Send with Solicited Event and Invalidate.
    SendWithSolicitedEventAndInvalidate(STag),
    /// RDMA Write of the gather list into the remote buffer.
    RdmaWrite(RemoteAddr),
    /// RDMA Read of `sink.len` bytes from `remote` into `sink` (the gather list is
    /// ignored).
    RdmaRead {
        /// Data source at the peer.
        remote: RemoteAddr,
        /// Data sink here (needs `LOCAL_WRITE`).
        sink: LocalSge,
    },
    /// Local invalidation of one of our own STags (verbs `IBV_WR_LOCAL_INV`): executed
    /// in send-queue order, after the work requests posted before it have been
    /// started; once it completes the peer can no longer reach the region through
    /// that STag. A region that was never registered in this PD, or an STag that
    /// already no longer works, completes with [`WcStatus::LocalProtectionError`].
    /// The gather list is ignored.
    LocalInvalidate(STag),
}

/// A send-queue work request.
#[derive(Clone, Debug)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The gather list (Send and Write payload).
    pub sgl: Vec<LocalSge>,
}

/// A receive-queue work request: where the next incoming Send lands.
#[derive(Clone, Debug)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (each region needs `LOCAL_WRITE`).
    pub sgl: Vec<LocalSge>,
}

impl SendWr {
    /// Total length of the gather list.
    pub fn len(&self) -> usize {
        self.sgl.iter().map(|s| s.len).sum()
    }

    /// True when the gather list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RecvWr {
    /// Total capacity.
    pub fn capacity(&self) -> usize {
        self.sgl.iter().map(|s| s.len).sum()
    }
}

/// Which operation completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send variant.
    Send,
    /// An RDMA Write.
    RdmaWrite,
    /// An RDMA Read.
    RdmaRead,
    /// A local invalidation ([`SendOp::LocalInvalidate`]).
    LocalInvalidate,
    /// A receive.
    Recv,
}

/// Completion status (verbs `ibv_wc_status` subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The operation succeeded.
    Success,
    /// The incoming message did not fit the posted receive buffer.
    LocalLengthError,
    /// A local SGE failed its lkey/rights/bounds check.
    LocalProtectionError,
    /// The peer refused a remote access (invalid STag, bounds, rights).
    RemoteAccessError,
    /// The peer reported an operation error.
    RemoteOperationError,
    /// The work request was flushed because the connection ended.
    Flushed,
    /// The connection failed for another reason.
    FatalError,
}

/// A work completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Which kind of work request.
    pub opcode: WcOpcode,
    /// Outcome.
    pub status: WcStatus,
    /// Bytes received (Recv) or transferred.
    pub byte_len: usize,
    /// The STag the peer invalidated with Send with Invalidate (Recv only).
    pub invalidated: Option<STag>,
    /// The message was a Send with Solicited Event (Recv only).
    pub solicited: bool,
}

impl Completion {
    /// A completion with no extras.
    pub fn new(wr_id: u64, opcode: WcOpcode, status: WcStatus, byte_len: usize) -> Completion {
        Completion {
            wr_id,
            opcode,
            status,
            byte_len,
            invalidated: None,
            solicited: false,
        }
    }
}

/// Why a work request could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue pair is not connected (any more).
    #[error("queue pair is not connected")]
    NotConnected,
    /// A local SGE is out of bounds, lacks rights, or is from another PD.
    #[error("local protection error in scatter/gather list")]
    LocalProtection,
    /// The message is larger than the transport allows (2^32 - 1 bytes for RDMAP).
    #[error("message too long")]
    TooLong,
    /// The queue is full.
    #[error("work queue full")]
    QueueFull,
    /// An RDMA Read was posted but the peer allows none (its IRD, hence our ORD, is 0).
    #[error("no RDMA Read credits: the peer's IRD is 0")]
    NoReadCredits,
}
