//! Receive buffers and send header buffers, registered once per connection (Linux
//! `verbs.c`: `rpcrdma_rep` / `svc_rdma_recv_ctxt` for receives, `rpcrdma_req`'s
//! `rl_rdmabuf` / `svc_rdma_send_ctxt` for sends).
//!
//! A Send is a gather list of registered memory, as a verbs device needs it: its
//! RPC-over-RDMA header is copied into a [`SendPool`] slot, its Payload stream pieces
//! are the caller's `Bytes` registered as they are ([`gather`], which software
//! providers send from without a copy).
//!
//! Work request ids carry a kind in their top byte so that one completion queue serves
//! Receives, Sends, RDMA Reads and RDMA Writes.

use std::sync::Mutex;

use bytes::Bytes;
use rdma::{
    Access, LocalSge, MemoryRegion, PostError, ProtectionDomain, QueuePair, RecvWr, RegisterError,
    SendOp, SendWr,
};

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
    /// A local invalidation; the low bits are the XID (requester) or the STag
    /// (responder).
    pub(crate) const INVALIDATE: u64 = 5 << 56;
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
    pub(crate) fn new(
        pd: &ProtectionDomain,
        n: u32,
        len: usize,
    ) -> Result<RecvPool, RegisterError> {
        Ok(RecvPool {
            bufs: (0..n)
                .map(|_| pd.register_zeroed(len, Access::LOCAL_WRITE))
                .collect::<Result<_, _>>()?,
            len,
        })
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

/// Caller bytes as a gather element: registered as they are, for local access only
/// (`rdma::ProtectionDomain::register_bytes`; software providers send from them
/// without a copy). The registration lives as long as the work request holds it.
pub(crate) fn gather(pd: &ProtectionDomain, bytes: Bytes) -> Result<LocalSge, RegisterError> {
    pd.sge(bytes)
}

/// Why a Send could not be posted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendFailure {
    /// Its payload could not be registered.
    #[error("registering its payload failed: {0}")]
    Register(#[from] RegisterError),
    /// The provider refused the work request.
    #[error("{0}")]
    Post(#[from] PostError),
}

/// Registered buffers for the transport headers of Sends, taken when a Send is posted
/// and given back by its completion.
pub(crate) struct SendPool {
    pd: ProtectionDomain,
    bufs: Vec<MemoryRegion>,
    len: usize,
    free: Mutex<Vec<usize>>,
}

impl SendPool {
    /// Registers `n` header buffers of `len` bytes.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        n: usize,
        len: usize,
    ) -> Result<SendPool, RegisterError> {
        Ok(SendPool {
            pd: pd.clone(),
            bufs: (0..n)
                .map(|_| pd.register_zeroed(len, Access::NONE))
                .collect::<Result<_, _>>()?,
            len,
            free: Mutex::new((0..n).rev().collect()),
        })
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        // A poisoned lock only means a panic elsewhere; the free list stays valid.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts a Send of `send` (header first, then payload pieces) with `op`, the header
    /// in a pool slot. When every slot is busy, or the header does not fit one, the
    /// header is registered as it is instead ([`gather`]); returns whether a slot was
    /// used.
    ///
    /// `wr_id` must have its bits 32..56 clear: the slot number goes there.
    pub(crate) fn post(
        &self,
        qp: &dyn QueuePair,
        wr_id: u64,
        op: SendOp,
        mut send: Vec<Bytes>,
    ) -> Result<bool, SendFailure> {
        let header = if send.is_empty() {
            Bytes::new()
        } else {
            send.remove(0)
        };
        let slot = if header.len() <= self.len {
            self.free().pop()
        } else {
            None
        };
        let mut sgl = Vec::with_capacity(1 + send.len());
        let mut id = wr_id;
        let gathered = (|| {
            match slot {
                Some(i) => {
                    let mr = &self.bufs[i];
                    // COPY: the transport header (tens of bytes; at most the inline
                    // threshold) into its registered send buffer.
                    mr.write(0, &header);
                    sgl.push(LocalSge {
                        mr: mr.clone(),
                        offset: 0,
                        len: header.len(),
                    });
                    id |= (i as u64 + 1) << 32;
                }
                None => sgl.push(gather(&self.pd, header)?),
            }
            for piece in send.into_iter().filter(|b| !b.is_empty()) {
                sgl.push(gather(&self.pd, piece)?);
            }
            Ok::<_, RegisterError>(())
        })();
        let r = match gathered {
            Ok(()) => qp
                .post_send(SendWr { wr_id: id, op, sgl })
                .map_err(SendFailure::from),
            Err(e) => Err(e.into()),
        };
        if r.is_err() {
            self.complete(id);
        }
        r.map(|()| slot.is_some())
    }

    /// A Send completed (in any status): its slot is free again.
    pub(crate) fn complete(&self, wr_id: u64) {
        let slot = ((wr_id >> 32) & 0xff_ffff) as usize;
        if slot > 0 && slot <= self.bufs.len() {
            self.free().push(slot - 1);
        }
    }
}
