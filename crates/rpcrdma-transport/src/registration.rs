//! Memory registration and invalidation for chunks, and nothing else (Linux
//! `frwr_ops.c`).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.4.1 ("the requester MUST
//! ensure that ... memory ... is invalidated ... before the RPC transaction is
//! complete"), §5.5.4 (close the connection when a region cannot be invalidated),
//! §10.2 (unpredictable handles).
//!
//! Every region is registered for one Call, with a fresh random STag key (the `rdma`
//! registration table draws one per registration), and only with the rights its chunk
//! needs: remote read for Read chunks, remote write for Write and Reply chunks. After
//! the Reply arrives (or the connection is lost) every region is fenced: invalidated
//! locally unless the peer already did it with Send With Invalidate, then deregistered,
//! which hands the buffer back without a copy.

use bytes::{BufMut, Bytes, BytesMut};
use rdma::{Access, MemoryRegion, ProtectionDomain, STag};
use rpcrdma::marshal::Registration;
use rpcrdma::Segment;

use crate::counters::{ConnStats, Counter};

/// One registered chunk region of a Call.
#[derive(Debug)]
pub(crate) struct ChunkRegion {
    mr: MemoryRegion,
    len: u32,
}

impl ChunkRegion {
    /// Registers what `reg` asks for.
    pub(crate) fn register(pd: &ProtectionDomain, reg: &Registration, stats: &ConnStats) -> Self {
        stats.inc(Counter::Registrations);
        let len = u32::try_from(reg.len()).unwrap_or(u32::MAX);
        let mr = match reg {
            Registration::Read { data, .. } => {
                let mut buf = BytesMut::with_capacity(len as usize);
                for d in data {
                    // COPY: a Read chunk's data into its registered region (the `rdma`
                    // API registers owned, mutable memory; a verbs provider would map
                    // the caller's pages instead).
                    buf.put_slice(d);
                }
                pd.register(buf, Access::REMOTE_READ)
            }
            Registration::Write { len } | Registration::Reply { len } => {
                pd.register_zeroed(*len as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            }
        };
        ChunkRegion { mr, len }
    }

    /// The one segment describing this region (tagged offsets start at 0).
    pub(crate) fn segment(&self) -> Segment {
        Segment {
            handle: self.mr.stag().0,
            length: self.len,
            offset: 0,
        }
    }

    /// Fences the region and returns its bytes. `remote` is the STag the peer
    /// invalidated with Send With Invalidate, if any.
    pub(crate) fn fence(self, remote: Option<STag>, stats: &ConnStats) -> Bytes {
        if remote == Some(self.mr.stag()) {
            stats.inc(Counter::RemoteInvalidations);
        } else {
            self.mr.invalidate();
            stats.inc(Counter::LocalInvalidations);
        }
        self.mr.deregister().freeze()
    }
}

/// A responder's sink for one Read chunk: the RDMA Reads of its segments land in one
/// region, in order.
#[derive(Debug)]
pub(crate) struct ReadSink {
    pub(crate) mr: MemoryRegion,
    /// RDMA Reads still outstanding.
    pub(crate) outstanding: usize,
}

impl ReadSink {
    /// Registers a sink of `len` bytes for local write only (never remotely reachable).
    pub(crate) fn new(pd: &ProtectionDomain, len: usize) -> ReadSink {
        ReadSink {
            mr: pd.register_zeroed(len, Access::LOCAL_WRITE),
            outstanding: 0,
        }
    }

    /// The data, once every Read completed.
    pub(crate) fn into_bytes(self) -> Bytes {
        self.mr.deregister().freeze()
    }
}
