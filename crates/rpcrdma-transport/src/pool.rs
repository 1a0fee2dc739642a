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
#![allow(unsafe_code)]

use bytes::Bytes;
use rdma::{
    Access, LocalSge, MemoryRegion, PostError, ProtectionDomain, QueuePair, RecvWr, RegisterError,
    SendOp, SendWr,
};

use crate::counters::{ConnStats, Counter, CounterSink};

/// Kinds of work request, in the top byte of `wr_id`.
pub(crate) mod wr_kind {
    /// A Receive; the low bits are the pool index.
    pub(crate) const RECV: u64 = 1 << 56;
    /// A Send; the low bits are the XID.
    pub(crate) const SEND: u64 = 2 << 56;
    /// An RDMA Read; the low bits name its pull (the `Link`'s Read chunks in flight).
    pub(crate) const READ: u64 = 3 << 56;
    /// An RDMA Write; the low bits are the XID.
    pub(crate) const WRITE: u64 = 4 << 56;
    /// A local invalidation; the low bits are the STag it invalidates.
    pub(crate) const INVALIDATE: u64 = 5 << 56;
    /// Mask of the kind.
    pub(crate) const MASK: u64 = 0xff << 56;
}

/// The Receive buffers of one connection: buffers of `len` bytes cut out of a few
/// registered regions (one allocation and one registration each, not one per buffer).
/// A region is zero-filled by the allocator without touching its pages (a large
/// `calloc` is a fresh mapping), so a buffer costs resident memory only once a message
/// has been placed in it: an idle connection costs its first pages, not `n × len`
/// (docs/hostile-peers.md, "Memory"). More buffers come with a larger credit grant
/// ([`RecvPool::grow`]).
pub(crate) struct RecvPool {
    slabs: Slabs,
    /// Buffers not posted: taken by a completion, or never posted yet (backward
    /// Receives before the channel opens, a larger grant's before the core asks).
    free: Vec<usize>,
}

impl RecvPool {
    /// `posted + unposted` buffers of `len` bytes for local write, with room to grow
    /// to `max` (see [`Slabs::new`]), and the Receives of the first `posted`, to post
    /// with the connection.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        posted: u32,
        unposted: u32,
        max: u32,
        len: usize,
    ) -> Result<(RecvPool, Vec<RecvWr>), RegisterError> {
        let (posted, n) = (posted as usize, (posted + unposted) as usize);
        let slabs = Slabs::new(pd, n, max as usize, len, Access::LOCAL_WRITE)?;
        let pool = RecvPool {
            slabs,
            free: (posted..n).rev().collect(),
        };
        let recvs = (0..posted).filter_map(|i| pool.wr(i)).collect();
        Ok((pool, recvs))
    }

    fn wr(&self, index: usize) -> Option<RecvWr> {
        let (mr, offset) = self.slabs.get(index)?;
        Some(RecvWr {
            wr_id: wr_kind::RECV | index as u64,
            sgl: vec![LocalSge {
                mr: mr.clone(),
                offset,
                len: self.slabs.len,
            }],
        })
    }

    /// Posts `n` buffers not posted now.
    pub(crate) fn post(&mut self, qp: &dyn QueuePair, n: u32) -> Result<(), PostError> {
        for _ in 0..n {
            let Some(index) = self.free.pop() else {
                // Cannot happen: each Receive given back was taken by a completion.
                tracing::warn!(target: "rpcrdma_transport", "no receive buffer to post");
                return Ok(());
            };
            let Some(wr) = self.wr(index) else {
                return Err(PostError::LocalProtection);
            };
            if let Err(e) = qp.post_recv(wr) {
                self.free.push(index);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Bytes of one buffer.
    pub(crate) fn buffer_len(&self) -> usize {
        self.slabs.len
    }

    /// Receives posted now.
    pub(crate) fn posted(&self) -> usize {
        self.slabs.n.saturating_sub(self.free.len())
    }

    /// `more` buffers, not posted.
    pub(crate) fn grow(&mut self, pd: &ProtectionDomain, more: usize) -> Result<(), RegisterError> {
        let added = self.slabs.grow(pd, more)?;
        self.free.extend(added.rev());
        Ok(())
    }

    /// Takes the `len` bytes a Receive completion left in buffer `index`, which is
    /// then free to post again. `None` for a bad index or length.
    pub(crate) fn take(&mut self, index: usize, len: usize) -> Option<Bytes> {
        if len > self.slabs.len {
            return None;
        }
        let (mr, offset) = self.slabs.get(index)?;
        // COPY: receive buffer → message buffer (the inline part of a Call or Reply;
        // at most the inline threshold), so the registered buffer can be re-posted.
        let bytes = mr.read(offset, len)?;
        self.free.push(index);
        Some(bytes)
    }
}

/// Buffers of `len` bytes cut out of as few registered regions as the device allows
/// (each at most its `max_mr_size`): one allocation and one registration per region
/// instead of per buffer. A region is zero-filled by the allocator, which for a large
/// one is a fresh mapping whose pages become resident only when written.
///
/// Buffers `0..n` are in use; more can be added up to a maximum. Where registration
/// pins memory (a verbs device: [`ProtectionDomain::pins_memory`]) regions are
/// registered as buffers are added, so that unused ones are neither pinned nor
/// resident; elsewhere the first regions cover the maximum at once, which costs
/// nothing until a buffer is written and keeps the regions few.
struct Slabs {
    /// Each region and the index of its first buffer, in index order.
    regions: Vec<(usize, MemoryRegion)>,
    /// Buffers covered by `regions`.
    allocated: usize,
    /// Buffers in use: `0..n`.
    n: usize,
    len: usize,
    access: Access,
}

impl Slabs {
    /// `n` buffers in use, and room to grow to `max` (at least `n`).
    fn new(
        pd: &ProtectionDomain,
        n: usize,
        max: usize,
        len: usize,
        access: Access,
    ) -> Result<Slabs, RegisterError> {
        let mut slabs = Slabs {
            regions: Vec::new(),
            allocated: 0,
            n: 0,
            len,
            access,
        };
        let cover = if pd.pins_memory() { n } else { max.max(n) };
        slabs.allocate(pd, cover)?;
        slabs.n = n;
        Ok(slabs)
    }

    /// Registers regions for buffers `allocated..to`.
    fn allocate(&mut self, pd: &ProtectionDomain, to: usize) -> Result<(), RegisterError> {
        let max = usize::try_from(pd.attributes().max_mr_size).unwrap_or(usize::MAX);
        let per_region = (max / self.len.max(1)).max(1);
        while self.allocated < to {
            let count = per_region.min(to - self.allocated);
            let mr = pd.register_zeroed((count * self.len).max(1), self.access)?;
            self.regions.push((self.allocated, mr));
            self.allocated += count;
        }
        Ok(())
    }

    /// `more` buffers added: their indexes.
    fn grow(
        &mut self,
        pd: &ProtectionDomain,
        more: usize,
    ) -> Result<std::ops::Range<usize>, RegisterError> {
        let to = self.n + more;
        self.allocate(pd, to)?;
        let added = self.n..to;
        self.n = to;
        Ok(added)
    }

    /// Buffer `index`: its region and offset there.
    fn get(&self, index: usize) -> Option<(&MemoryRegion, usize)> {
        if index >= self.n {
            return None;
        }
        let r = self.regions.partition_point(|(first, _)| *first <= index);
        let (first, mr) = self.regions.get(r.checked_sub(1)?)?;
        Some((mr, (index - first) * self.len))
    }
}

/// Caller bytes as a gather element: registered as they are, for local access only
/// (`rdma::ProtectionDomain::register_bytes`; software providers send from them
/// without a copy; a device shares the cached registration of the pooled buffer they
/// were frozen from, if they were). The registration lives as long as the work
/// request holds it.
pub(crate) fn gather(
    pd: &ProtectionDomain,
    bytes: Bytes,
    stats: &ConnStats,
) -> Result<LocalSge, RegisterError> {
    let sge = pd.sge(bytes)?;
    stats.count_region(&sge.mr);
    Ok(sge)
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
/// and given back by its completion: slots of registered regions, resident only once
/// used (as [`RecvPool`]'s).
pub(crate) struct SendPool {
    pd: ProtectionDomain,
    slabs: Slabs,
    free: Vec<usize>,
    /// The most slots it may grow to.
    max: usize,
}

impl SendPool {
    /// Registers `n` header buffers of `len` bytes, with room to grow to `max`.
    pub(crate) fn new(
        pd: &ProtectionDomain,
        n: usize,
        max: usize,
        len: usize,
    ) -> Result<SendPool, RegisterError> {
        Ok(SendPool {
            pd: pd.clone(),
            slabs: Slabs::new(pd, n, max, len, Access::NONE)?,
            free: (0..n).rev().collect(),
            max: max.max(n),
        })
    }

    /// `more` slots, free at once.
    pub(crate) fn grow(&mut self, more: usize) -> Result<(), RegisterError> {
        let added = self.slabs.grow(&self.pd, more)?;
        self.free.extend(added.rev());
        Ok(())
    }

    /// Whether every slot is taken (a Send posted now would register its pieces).
    pub(crate) fn exhausted(&self) -> bool {
        self.free.is_empty()
    }

    /// Slots it has.
    pub(crate) fn slots(&self) -> usize {
        self.slabs.n
    }

    /// Slots it may still add.
    pub(crate) fn room(&self) -> usize {
        self.max.saturating_sub(self.slabs.n)
    }

    /// Grows no further (its registrations failed).
    pub(crate) fn stop_growing(&mut self) {
        self.max = self.slabs.n;
    }

    /// Bytes of one slot.
    pub(crate) fn slot_len(&self) -> usize {
        self.slabs.len
    }

    /// Posts a Send of `send` (header first, then payload pieces) with `op`, the header
    /// and, when they fit behind it, the payload pieces copied into a pool slot. When
    /// every slot is busy, or the header does not fit one, the pieces are registered as
    /// they are instead ([`gather`], counted as a fallback). `before` (the
    /// Reply's RDMA Writes) goes in the same list ahead of the Send: one doorbell.
    ///
    /// `wr_id` must have its bits 32..56 clear: the slot number goes there.
    pub(crate) fn post(
        &mut self,
        qp: &dyn QueuePair,
        mut before: Vec<SendWr>,
        wr_id: u64,
        op: SendOp,
        mut send: Vec<Bytes>,
        stats: &ConnStats,
    ) -> Result<(), SendFailure> {
        let header = if send.is_empty() {
            Bytes::new()
        } else {
            send.remove(0)
        };
        let slot = if header.len() <= self.slabs.len {
            self.free.pop()
        } else {
            None
        };
        let payload: usize = send.iter().map(Bytes::len).sum();
        let mut sgl = Vec::with_capacity(1 + send.len());
        let mut id = wr_id;
        let gathered = (|| {
            match slot.and_then(|i| Some((i, self.slabs.get(i)?))) {
                Some((i, (mr, offset))) => {
                    // COPY: the transport header (tens of bytes; at most the inline
                    // threshold) into its registered send buffer.
                    mr.write(offset, &header);
                    let mut len = header.len();
                    if len + payload <= self.slabs.len {
                        // COPY: the inline payload behind it (a Send is at most the
                        // inline threshold, which a slot holds): one gather element,
                        // and no registration per Send, which on a device is a system
                        // call that pins pages (`ibv_reg_mr`).
                        for piece in std::mem::take(&mut send) {
                            mr.write(offset + len, &piece);
                            len += piece.len();
                        }
                        stats.add(Counter::SendCopyBytes, payload as u64);
                    }
                    sgl.push(LocalSge {
                        mr: mr.clone(),
                        offset,
                        len,
                    });
                    id |= (i as u64 + 1) << 32;
                }
                None => sgl.push(gather(&self.pd, header, stats)?),
            }
            for piece in send.into_iter().filter(|b| !b.is_empty()) {
                sgl.push(gather(&self.pd, piece, stats)?);
            }
            Ok::<_, RegisterError>(())
        })();
        let r = match gathered {
            Ok(()) => {
                before.push(SendWr { wr_id: id, op, sgl });
                qp.post_send_list(before).map_err(SendFailure::from)
            }
            Err(e) => Err(e.into()),
        };
        if r.is_err() {
            self.complete(id);
        } else if slot.is_none() {
            stats.inc(Counter::SendPoolFallbacks);
        }
        r
    }

    /// A Send completed (in any status): its slot is free again.
    pub(crate) fn complete(&mut self, wr_id: u64) {
        let slot = ((wr_id >> 32) & 0xff_ffff) as usize;
        if slot > 0 && slot <= self.slabs.n {
            self.free.push(slot - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_share_regions_no_larger_than_the_device_allows() {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes {
            max_mr_size: 10_000,
            ..rdma::DeviceAttributes::SOFTWARE
        });
        let slabs = Slabs::new(&pd, 5, 5, 4096, Access::LOCAL_WRITE).unwrap();
        assert_eq!(slabs.regions.len(), 3, "2 + 2 + 1 buffers");
        assert!(slabs.regions.iter().all(|(_, r)| r.len() <= 10_000));
        let (r4, at4) = slabs.get(4).unwrap();
        assert_eq!((r4.stag(), at4), (slabs.regions[2].1.stag(), 0));
        assert_eq!(slabs.get(3).unwrap().1, 4096);
        assert!(slabs.get(5).is_none());
        let (mut pool, recvs) = RecvPool::new(&pd, 5, 0, 5, 4096).unwrap();
        assert_eq!((recvs.len(), pool.posted()), (5, 5));
        assert!(pool.take(4, 4097).is_none(), "longer than a buffer");
        assert!(pool.take(5, 1).is_none(), "no such buffer");
        assert_eq!(pool.posted(), 5);
        assert_eq!(pool.take(4, 10).unwrap().len(), 10);
        assert_eq!(pool.posted(), 4, "taken: free to post again");
    }

    #[test]
    fn a_software_pool_maps_its_maximum_at_once_and_grows_into_it() {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
        let (mut pool, recvs) = RecvPool::new(&pd, 6, 2, 128, 4096).unwrap();
        assert_eq!((recvs.len(), pool.posted()), (6, 6));
        assert_eq!(pool.free, vec![7, 6]);
        assert_eq!(pool.slabs.regions.len(), 1);
        assert_eq!(pool.slabs.allocated, 128, "lazily resident: nothing pinned");
        assert!(pool.take(8, 1).is_none(), "not in use yet");
        pool.grow(&pd, 8).unwrap();
        assert_eq!(pool.free, vec![7, 6, 15, 14, 13, 12, 11, 10, 9, 8]);
        assert_eq!(pool.slabs.regions.len(), 1, "no new region");
        assert_eq!(pool.take(15, 10).unwrap().len(), 10);
        assert!(pool.take(16, 1).is_none());
    }

    /// A protection domain whose registrations "pin" (a registrar), as a verbs
    /// device's do.
    fn pinning_pd(max_mr_size: u64) -> ProtectionDomain {
        struct Keys;
        impl rdma::DeviceRegistration for Keys {
            fn lkey(&self) -> u32 {
                1
            }
            fn rkey(&self) -> u32 {
                1
            }
            fn remote_base(&self) -> u64 {
                0
            }
        }
        struct Registrar;
        impl rdma::Registrar for Registrar {
            unsafe fn register(
                &self,
                _memory: &[u8],
                _access: Access,
            ) -> Result<Box<dyn rdma::DeviceRegistration>, RegisterError> {
                Ok(Box::new(Keys))
            }
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }
        }
        ProtectionDomain::with_registrar(
            rdma::DeviceAttributes {
                max_mr_size,
                ..rdma::DeviceAttributes::SOFTWARE
            },
            std::sync::Arc::new(Registrar),
        )
    }

    #[test]
    fn a_pinning_pool_registers_regions_only_as_it_grows() {
        let pd = pinning_pd(3 * 4096);
        let mut sends = SendPool::new(&pd, 2, 128, 4096).unwrap();
        assert_eq!((sends.slabs.allocated, sends.slabs.regions.len()), (2, 1));
        assert_eq!(sends.free.len(), 2);
        sends.grow(5).unwrap();
        assert_eq!(sends.slabs.allocated, 7);
        assert_eq!(sends.slabs.regions.len(), 3, "2, then 3 + 2 (max_mr_size)");
        assert_eq!(sends.free.len(), 7);
        let firsts: Vec<usize> = sends.slabs.regions.iter().map(|(f, _)| *f).collect();
        assert_eq!(firsts, [0, 2, 5]);
        let (r, at) = sends.slabs.get(6).unwrap();
        assert_eq!((r.stag(), at), (sends.slabs.regions[2].1.stag(), 4096));
        assert_eq!(sends.slabs.get(4).unwrap().1, 2 * 4096);
        assert!(sends.slabs.get(7).is_none());
    }

    #[test]
    fn a_send_pool_says_when_it_is_exhausted_and_how_far_it_may_grow() {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
        let mut sends = SendPool::new(&pd, 2, 10, 4096).unwrap();
        assert_eq!(
            (sends.slots(), sends.room(), sends.slot_len()),
            (2, 8, 4096)
        );
        let taken: Vec<usize> = (0..2).map(|_| sends.free.pop().unwrap()).collect();
        assert!(sends.exhausted());
        sends.grow(2).unwrap();
        assert!(!sends.exhausted());
        assert_eq!((sends.slots(), sends.room()), (4, 6));
        // A completion gives its slot back (slot numbers are 1-based in `wr_id`).
        sends.complete(wr_kind::SEND | ((taken[0] as u64 + 1) << 32));
        assert_eq!(sends.free.len(), 3);
        sends.stop_growing();
        assert_eq!(sends.room(), 0);
    }
}
