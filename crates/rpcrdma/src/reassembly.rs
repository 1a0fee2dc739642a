//! Receiver side: rebuilding the Payload stream from inline bytes and chunk data.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.4.1 (counted arrays), §4.4.5
//! (Read chunks and their Positions), §4.4.5.1 (round-up), §4.4.6 and §5.3.2 (Write
//! chunks on the requester), §5.5.2 (GARBAGE_ARGS). Linux: `svc_rdma_rw.c`
//! (`svc_rdma_read_multiple_chunks`), `rpc_rdma.c` (`rpcrdma_inline_fixup`).
//!
//! The result is a [`Reassembled`] gather list: slices of the receive buffer and of
//! the RDMA Read buffers, plus zero padding; no byte is copied until (and unless) the
//! upper layer asks for one contiguous buffer.
//!
//! # Checks
//! - a Read chunk Position must lie inside the stream, after the previous chunk;
//! - the chunk data must have the chunk's length;
//! - §4.4.4.1: "Any byte count left in the Payload stream MUST match the sum of the
//!   lengths of the segments making up the chunk. If they do not agree, an RPC protocol
//!   encoding error results." The word before each chunk's Position is that count
//!   (every DDP-eligible item of the ULBs we know is an `opaque<>` or string); a
//!   mismatch is [`ArgsError::ChunkLengthMismatch`] (GARBAGE_ARGS) or, on the
//!   requester, [`ReplyError::WriteChunkLengthMismatch`].

use bytes::{BufMut, Bytes, BytesMut};
use xdr::pad_len;

use crate::chunks::{ReadChunk, WriteChunk};
use crate::error::{ArgsError, HeaderError, ReplyError};

static ZERO_PAD: [u8; 3] = [0; 3];

/// A rebuilt Payload stream, as a gather list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reassembled {
    /// The stream's pieces, in order.
    pub parts: Vec<Bytes>,
    /// Where chunk data sits in the stream: `(position, length)` per inserted chunk,
    /// for the upper layer's own DDP-eligibility checks.
    pub chunk_ranges: Vec<(u32, u32)>,
}

impl Reassembled {
    /// Total length.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream as one buffer: free when it is a single piece.
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            parts => {
                // COPY: an upper layer that decodes from one contiguous buffer pays one
                // copy of chunk data here; a rope-aware decoder can take `parts`.
                let mut out = BytesMut::with_capacity(self.len());
                for p in parts {
                    out.put_slice(p);
                }
                out.freeze()
            }
        }
    }
}

/// Options for reassembling a Call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyOptions {
    /// Check the count word before each Read chunk (§4.4.4.1). On for ULBs whose
    /// DDP-eligible items are all `opaque<>`/strings (NFS).
    pub check_counts: bool,
    /// Largest reassembled Call accepted.
    pub max_len: u64,
}

impl Default for ReassemblyOptions {
    fn default() -> Self {
        ReassemblyOptions {
            check_counts: true,
            max_len: 16 << 20,
        }
    }
}

fn word_before(stream_so_far: &[Bytes]) -> Option<u32> {
    // The last four bytes emitted, which may straddle pieces.
    let mut w = [0u8; 4];
    let mut need = 4;
    for p in stream_so_far.iter().rev() {
        let take = need.min(p.len());
        w[need - take..need].copy_from_slice(&p[p.len() - take..]);
        need -= take;
        if need == 0 {
            return Some(u32::from_be_bytes(w));
        }
    }
    None
}

/// Rebuilds a Call's Payload stream (responder side).
///
/// - `inline`: the Payload stream that followed an RDMA_MSG header (empty for
///   RDMA_NOMSG);
/// - `reads`: the Read chunks, as parsed;
/// - `data`: what RDMA Read fetched, one buffer per chunk, in `reads` order.
///
/// With a Position Zero Read chunk its data is the base stream (§4.5.3) and the inline
/// part is ignored; other chunks are inserted at their Positions, which count from the
/// start of the rebuilt stream (§4.4.5: "The Position value MUST be computed from the
/// beginning of the Payload stream"). When a chunk's length is not a multiple of four
/// the sender sent no round-up and we supply it (§4.4.5.1: "the responder MUST be
/// prepared to provide appropriate round-up in the reconstructed call XDR stream").
pub fn reassemble_call(
    inline: Bytes,
    reads: &[ReadChunk],
    data: Vec<Bytes>,
    opts: &ReassemblyOptions,
) -> Result<Reassembled, ArgsError> {
    if data.len() != reads.len() {
        return Err(ArgsError::ReadDataLength {
            expected: reads.len() as u64,
            got: data.len() as u64,
        });
    }
    for (chunk, d) in reads.iter().zip(&data) {
        if chunk.len() != d.len() as u64 {
            return Err(ArgsError::ReadDataLength {
                expected: chunk.len(),
                got: d.len() as u64,
            });
        }
    }
    let mut order: Vec<usize> = (0..reads.len()).collect();
    order.sort_by_key(|&i| reads[i].position);
    let mut base = inline;
    let mut rest = order.as_slice();
    if let Some(&first) = rest.first() {
        if reads[first].is_position_zero() {
            base = data[first].clone();
            rest = &rest[1..];
        }
    }
    let mut out = Reassembled::default();
    let mut out_len: u64 = 0;
    let mut cursor = 0usize;
    for &i in rest {
        let chunk = &reads[i];
        let d = &data[i];
        let pos = u64::from(chunk.position);
        if pos < out_len || pos - out_len > (base.len() - cursor) as u64 {
            return Err(ArgsError::BadPosition(chunk.position));
        }
        let take = (pos - out_len) as usize;
        if take > 0 {
            out.parts.push(base.slice(cursor..cursor + take));
        }
        cursor += take;
        out_len = pos;
        let chunk_len = d.len() as u64;
        let pad = if opts.check_counts {
            // The count word must be in the stream just before the chunk.
            if take < 4 {
                return Err(ArgsError::BadPosition(chunk.position));
            }
            let count = word_before(&out.parts).ok_or(ArgsError::BadPosition(chunk.position))?;
            let c = u64::from(count);
            if c == chunk_len {
                pad_len(d.len())
            } else if chunk_len % 4 == 0
                && c < chunk_len
                && c + pad_len(count as usize) as u64 == chunk_len
            {
                // The sender included the round-up in the chunk.
                0
            } else {
                return Err(ArgsError::ChunkLengthMismatch {
                    position: chunk.position,
                    in_stream: count,
                    chunk: chunk_len,
                });
            }
        } else {
            pad_len(d.len())
        };
        if !d.is_empty() {
            out.parts.push(d.clone());
        }
        if pad > 0 {
            out.parts.push(Bytes::from_static(&ZERO_PAD[..pad]));
        }
        out.chunk_ranges.push((chunk.position, d.len() as u32));
        out_len += chunk_len + pad as u64;
        if out_len > opts.max_len {
            return Err(ArgsError::TooLarge(out_len));
        }
    }
    if cursor < base.len() {
        out.parts.push(base.slice(cursor..));
    }
    let total = out_len + (base.len() - cursor) as u64;
    if total > opts.max_len {
        return Err(ArgsError::TooLarge(total));
    }
    Ok(out)
}

/// Checks a Reply's Write list against the one its Call provided and returns the
/// length the responder wrote in each chunk (requester side).
///
/// §4.4.6: "The responder MUST NOT change the number of segments in the Write chunk";
/// segments keep their handle and offset, and no segment may grow.
pub fn written_lengths(
    provided: &[WriteChunk],
    returned: &[WriteChunk],
) -> Result<Vec<u64>, HeaderError> {
    if returned.len() > provided.len() {
        return Err(HeaderError::WriteListMismatch);
    }
    let mut lens = Vec::with_capacity(returned.len());
    for (p, r) in provided.iter().zip(returned) {
        if p.segments.len() != r.segments.len() {
            return Err(HeaderError::WriteListMismatch);
        }
        for (ps, rs) in p.segments.iter().zip(&r.segments) {
            if ps.handle != rs.handle || ps.offset != rs.offset {
                return Err(HeaderError::WriteListMismatch);
            }
            if rs.length > ps.length {
                return Err(HeaderError::ChunkOverrun);
            }
        }
        lens.push(r.len());
    }
    Ok(lens)
}

/// Checks a Reply chunk returned in an RDMA_NOMSG Reply against the one provided and
/// returns the Reply's length.
pub fn reply_chunk_length(
    provided: &WriteChunk,
    returned: &WriteChunk,
) -> Result<u64, HeaderError> {
    written_lengths(
        std::slice::from_ref(provided),
        std::slice::from_ref(returned),
    )
    .map(|l| l.first().copied().unwrap_or(0))
}

/// Rebuilds a Reply's Payload stream (requester side) from the reduced stream and the
/// data the responder wrote into our Write chunks.
///
/// The requester decodes the reply in order; at each DDP-eligible result it meets a
/// count word, and the data is in the next Write chunk (§5.3.2: "Each decoded result
/// consumes one entry in the Write list"). `item_offsets[k]` is the offset in
/// `reduced` just after the count word of the result in Write chunk `k`, as the upper
/// layer's decoder found it; `written[k]` is the chunk's data (our buffer, truncated
/// to the returned length).
pub fn reassemble_reply(
    reduced: Bytes,
    item_offsets: &[usize],
    written: Vec<Bytes>,
) -> Result<Reassembled, ReplyError> {
    let mut out = Reassembled::default();
    let mut cursor = 0usize;
    let mut full_pos = 0usize;
    for (k, &off) in item_offsets.iter().enumerate() {
        let data = written.get(k).ok_or(ReplyError::MissingWriteChunk(k))?;
        if off < cursor || off > reduced.len() || off < 4 {
            return Err(ReplyError::BadPosition(off as u32));
        }
        if off > cursor {
            out.parts.push(reduced.slice(cursor..off));
        }
        full_pos += off - cursor;
        cursor = off;
        let count = word_before(&out.parts).ok_or(ReplyError::BadPosition(off as u32))?;
        if u64::from(count) != data.len() as u64 {
            return Err(ReplyError::WriteChunkLengthMismatch {
                index: k,
                in_stream: count,
                chunk: data.len() as u64,
            });
        }
        if !data.is_empty() {
            out.parts.push(data.clone());
        }
        // §4.4.6.1: the responder wrote no padding; the stream needs it.
        let pad = pad_len(data.len());
        if pad > 0 {
            out.parts.push(Bytes::from_static(&ZERO_PAD[..pad]));
        }
        out.chunk_ranges.push((full_pos as u32, data.len() as u32));
        full_pos += data.len() + pad;
    }
    if cursor < reduced.len() {
        out.parts.push(reduced.slice(cursor..));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
