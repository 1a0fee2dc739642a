//! Receive buffers: registered once per connection, posted, and re-posted after their
//! contents are taken (Linux `verbs.c`, `rpcrdma_rep` / `svc_rdma_recv_ctxt`).
//!
//! Work request ids carry a kind in their top byte so that one completion queue serves
//! Receives, Sends, RDMA Reads and RDMA Writes.

use bytes::Bytes;
use rdma::{Access, LocalSge, MemoryRegion, PostError, ProtectionDomain, QueuePair, RecvWr};

/// Kinds of work request, in the top byte of `wr_id`.
pub(crate) mod wr_kind {
    /// A Receive; the low bits are the pool index.
    pub(crate) const RECV: u64 = 1 << 56;
    /// A Send; the low bits are the XID.
    pub(crate) const SEND: u64 = 2 << 56;
    /// An RDMA Read; the low bits index the responder's read table.
    pub(crate) const READ: u64 = 3 << 56;
    /// An RDMA Write; the low bits are the XID.
    pub(crate) const WRITE: u64 = 4 << 56;
    /// Mask of the kind.
    pub(crate) const MASK: u64 = 0xff << 56;
}

/// A connection's receive buffers.
pub(crate) struct RecvPool {
    bufs: Vec<MemoryRegion>,
    len: usize,
}

impl RecvPool {
    /// Registers `n` buffers of `len` bytes for local write.
    pub(crate) fn new(pd: &ProtectionDomain, n: u32, len: usize) -> RecvPool {
        RecvPool {
            bufs: (0..n)
                .map(|_| pd.register_zeroed(len, Access::LOCAL_WRITE))
                .collect(),
            len,
        }
    }

    fn wr(&self, index: usize, mr: &MemoryRegion) -> RecvWr {
        RecvWr {
            wr_id: wr_kind::RECV | index as u64,
            sgl: vec![LocalSge {
                mr: mr.clone(),
                offset: 0,
                len: self.len,
            }],
        }
    }

    /// Posts buffer `index` again.
    pub(crate) fn post(&self, qp: &dyn QueuePair, index: usize) -> Result<(), PostError> {
        let Some(mr) = self.bufs.get(index) else {
            return Err(PostError::LocalProtection);
        };
        qp.post_recv(self.wr(index, mr))
    }

    /// A Receive for every buffer, to be posted at connection setup
    /// ([`rdma::ConnectParams::recvs`]), before the peer can send anything.
    pub(crate) fn initial(&self) -> Vec<RecvWr> {
        self.bufs
            .iter()
            .enumerate()
            .map(|(i, mr)| self.wr(i, mr))
            .collect()
    }

    /// Takes the `len` bytes a Receive completion left in buffer `index`, so that the
    /// buffer can be re-posted at once. `None` for a bad index or length.
    pub(crate) fn take(&self, index: usize, len: usize) -> Option<Bytes> {
        // COPY: receive buffer → message buffer (the inline part of a Call or Reply;
        // at most the inline threshold), so the registered buffer can be re-posted.
        self.bufs.get(index)?.read(0, len)
    }
}
