//! The requester's reply reassembly: a [`RequesterEvent::Reply`] and what the
//! responder placed in the Call's fenced chunks, put back into one RPC Reply.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.6 (returned lengths), §4.4.6.1
//! (no XDR padding in a Write chunk), §5.3.2 (each DDP-eligible result consumes one
//! Write list entry), §5.3.3 / §4.5.3 (RDMA_NOMSG: the Payload stream is in the Reply
//! chunk), §5.4.1 (fenced before the Upper Layer sees the data). Linux: `rpc_rdma.c`
//! (`rpcrdma_inline_fixup`, `rpcrdma_reply_handler`).
//!
//! ```text
//! Reply event {inline, reply_chunk_len, write_lengths, proc_id}
//!   driver ──assemble_reply(.., &mut placed)──► core asks placed for the first
//!   reply_chunk_len bytes of the Reply chunk and write_lengths[k] of Write chunk k,
//!   finds each result's place (the binding), inserts the data with its padding
//!   driver ◄── Reassembled (gather list) or ReplyError (the Call fails)
//! ```
//! The driver keeps its memory (the core never sees a region); it only hands out the
//! bytes the core asks for, through [`PlacedChunks`].

use bytes::Bytes;

use super::{Requester, RequesterEvent};
use crate::error::ReplyError;
use crate::reassembly::{reassemble_reply, Reassembled};
use crate::rpc::ProcId;
use crate::stats::Counter;
use crate::ulb::UpperLayerBinding;

/// What the responder placed in one Call's Write and Reply chunks, as the driver can
/// read it back once the chunks are fenced (§5.4.1). The core asks for exactly the
/// lengths the responder returned, which it already checked against what the Call
/// offered (`reassembly::written_lengths`, §4.4.6); an implementation answers `None`
/// when it has no such chunk or the chunk holds fewer bytes, never a shorter slice.
pub trait PlacedChunks {
    /// The first `len` bytes of the Call's Reply chunk.
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes>;
    /// The first `len` bytes of the Call's Write chunk `index` (Write list order).
    fn write_chunk(&mut self, index: usize, len: usize) -> Option<Bytes>;
}

/// [`PlacedChunks`] over buffers already in memory (each chunk's bytes from its start:
/// a software provider's regions, the in-memory `pair`, tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacedBytes {
    /// The Reply chunk, if the Call offered one.
    pub reply: Option<Bytes>,
    /// Each Write chunk, in Write list order.
    pub writes: Vec<Bytes>,
}

impl PlacedChunks for PlacedBytes {
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes> {
        let r = self.reply.as_ref()?;
        (len <= r.len()).then(|| r.slice(..len))
    }

    fn write_chunk(&mut self, index: usize, len: usize) -> Option<Bytes> {
        let w = self.writes.get(index)?;
        (len <= w.len()).then(|| w.slice(..len))
    }
}

/// The pieces of a [`RequesterEvent::Reply`] that assembly reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyParts<'a> {
    /// The Call's procedure (where its DDP-eligible results are, for the binding).
    pub proc_id: Option<ProcId>,
    /// The Payload stream when it came inline (or pulled).
    pub inline: &'a Bytes,
    /// Bytes the responder wrote into our Reply chunk (RDMA_NOMSG).
    pub reply_chunk_len: Option<u64>,
    /// Bytes the responder wrote into each Write chunk.
    pub write_lengths: &'a [u64],
}

impl<'a> ReplyParts<'a> {
    /// The pieces of `event`, if it is a Reply.
    pub fn of(event: &'a RequesterEvent) -> Option<Self> {
        match event {
            RequesterEvent::Reply {
                inline,
                reply_chunk_len,
                write_lengths,
                proc_id,
                ..
            } => Some(ReplyParts {
                proc_id: *proc_id,
                inline,
                reply_chunk_len: *reply_chunk_len,
                write_lengths,
            }),
            _ => None,
        }
    }

    /// True if the responder placed nothing in our chunks: the inline stream is the
    /// whole Reply and no chunk needs to be read.
    pub fn is_inline_only(&self) -> bool {
        self.reply_chunk_len.is_none() && self.write_lengths.iter().all(|&l| l == 0)
    }
}

impl<B: UpperLayerBinding> Requester<B> {
    /// Rebuilds the RPC Reply of a [`RequesterEvent::Reply`] from what the responder
    /// placed, which the driver hands out through `placed` from the Call's fenced
    /// regions. The Payload stream is the first `reply_chunk_len` bytes of our Reply
    /// chunk (RDMA_NOMSG, §5.3.3) or else `inline`; Write chunk `k` holds the first
    /// `write_lengths[k]` bytes of a DDP-eligible result. §5.3.2: "Each decoded result
    /// consumes one entry in the Write list": the binding finds where each result's
    /// data goes back ([`UpperLayerBinding::reply_ddp_offsets`] for the Call's
    /// procedure), and the data goes in there with its XDR padding (§4.4.6.1: the
    /// responder wrote none). Write chunks the Reply has no result for are left out.
    /// Nothing is copied: the result is a list of pieces.
    ///
    /// A Reply that cannot be rebuilt is a [`ReplyError`] (the Call fails, the
    /// connection stays), counted in `err_bad_reply`; chunk bytes taken are counted
    /// in `chunk_bytes_rx`.
    pub fn assemble_reply(
        &self,
        reply: ReplyParts<'_>,
        placed: &mut dyn PlacedChunks,
    ) -> Result<Reassembled, ReplyError> {
        let r = self.assemble(reply, placed);
        if r.is_err() {
            self.counters.inc(Counter::ErrBadReply);
        }
        r
    }

    fn assemble(
        &self,
        reply: ReplyParts<'_>,
        placed: &mut dyn PlacedChunks,
    ) -> Result<Reassembled, ReplyError> {
        if reply.is_inline_only() {
            // Nothing was placed: the stream is complete as it is.
            return Ok(Reassembled {
                parts: vec![reply.inline.clone()],
                chunk_ranges: Vec::new(),
            });
        }
        let base = match reply.reply_chunk_len {
            None => reply.inline.clone(),
            Some(len) => {
                let not_placed = ReplyError::ReplyChunkNotPlaced { len };
                let data = take(len, not_placed, |n| placed.reply_chunk(n))?;
                self.counters.add(Counter::ChunkBytesReceived, len);
                data
            }
        };
        let mut written = Vec::with_capacity(reply.write_lengths.len());
        for (index, &len) in reply.write_lengths.iter().enumerate() {
            if len == 0 {
                written.push(Bytes::new());
                continue;
            }
            let not_placed = ReplyError::WriteChunkNotPlaced { index, len };
            written.push(take(len, not_placed, |n| placed.write_chunk(index, n))?);
            self.counters.add(Counter::ChunkBytesReceived, len);
        }
        if written.iter().all(Bytes::is_empty) {
            // Only the Reply chunk was used.
            return Ok(Reassembled {
                parts: vec![base],
                chunk_ranges: Vec::new(),
            });
        }
        let proc_id = reply.proc_id.ok_or(ReplyError::NoProcedure)?;
        let offsets = self
            .ulb
            .reply_ddp_offsets(proc_id, &base)
            .ok_or(ReplyError::ResultsNotFound)?;
        let n = offsets.len().min(written.len());
        written.truncate(n);
        reassemble_reply(base, &offsets[..n], written)
    }
}

/// The first `len` bytes of a chunk from `get`, exactly `len` of them, or `error`.
fn take(
    len: u64,
    error: ReplyError,
    get: impl FnOnce(usize) -> Option<Bytes>,
) -> Result<Bytes, ReplyError> {
    let n = usize::try_from(len).map_err(|_| error.clone())?;
    match get(n) {
        Some(b) if b.len() == n => Ok(b),
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests;
