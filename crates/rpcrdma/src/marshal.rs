//! Sender side: choosing Short, Chunked or Long, and building the chunks.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4 (reduction, round-up), §4.5
//! (message size), §5.2.4 (gather limit), §5.3 (chunk lists), §7.3.4-§7.3.5 (backward
//! direction). Linux: `rpc_rdma.c` (`rpcrdma_marshal_req`) for calls,
//! `svc_rdma_sendto.c` for replies.
//!
//! Input is an [`xdr::XdrStream`]: the inline bytes plus the DDP-eligible items the
//! upper layer marked. Nothing here copies payload: Sends are gather lists of `Bytes`
//! slices, RDMA Writes name slices of the items, Read chunks name the items' buffers.
//!
//! # Calls (requester), two phases
//! [`plan_call`] picks the shape and lists what must be registered
//! ([`Registration`]); the driver registers it and hands the segments to
//! [`CallPlan::finish`], which builds the header and the Send gather list.
//!
//! # Replies (responder)
//! [`marshal_reply`] fills the Call's Write chunks in order, rewrites their lengths,
//! zeroes unused ones, and uses the Reply chunk (RDMA_NOMSG) when the reduced reply
//! does not fit the requester's inline threshold. It returns the RDMA Writes to post
//! before the Send.

use bytes::{BufMut, Bytes, BytesMut};
use xdr::{pad_len, padded_len, XdrStream};

use crate::chunks::{ChunkLists, ReadChunk, Segment, WriteChunk, READ_SEGMENT_LEN, SEGMENT_LEN};
use crate::error::MarshalError;
use crate::header::{Body, Header};
use crate::ulb::ReplySizing;
use crate::wire::{Version, Xid, PREFIX_LEN};

static ZERO_PAD: [u8; 3] = [0; 3];

/// The three message shapes of §4.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// §4.5.1: the whole Payload stream follows the header in one Send.
    Short,
    /// §4.5.2: DDP-eligible items moved to chunks; the reduced stream goes inline.
    Chunked,
    /// §4.5.3: the Payload stream itself moves by RDMA (Position Zero Read chunk for a
    /// Call, Reply chunk for a Reply); the Send carries only the header (RDMA_NOMSG).
    Long,
}

/// Thresholds and registration granularity for building a Call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// The responder's inline threshold: largest Send we may post.
    pub send_threshold: u32,
    /// Our inline threshold: largest Send the responder may post to us.
    pub recv_threshold: u32,
    /// Most segments one registration may come back as (room reserved in the header).
    pub max_segments_per_registration: u32,
}

impl CallLimits {
    /// The Version One defaults (§4.3.3): 1024 both ways, one segment per registration.
    pub fn v1_default() -> Self {
        CallLimits {
            send_threshold: 1024,
            recv_threshold: 1024,
            max_segments_per_registration: 1,
        }
    }
}

/// Memory the driver must register for a Call, in [`CallPlan::registrations`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Our memory holding Read chunk data, for the responder to RDMA Read: register
    /// these bytes (concatenated) for remote read.
    Read {
        /// The chunk's Position in the Payload stream (0: the whole Call).
        position: u32,
        /// The data, without XDR padding (§4.4.5.1: the requester "MAY choose to send
        /// a Read chunk without any XDR padding").
        data: Vec<Bytes>,
    },
    /// A buffer of `len` bytes for the responder to RDMA Write one DDP-eligible result
    /// into (a Write chunk). No room for XDR padding (§4.4.6.1: "A requester SHOULD NOT
    /// provide extra length in a Write chunk to accommodate XDR pad bytes.").
    Write {
        /// Bytes to register.
        len: u32,
    },
    /// A buffer of `len` bytes for a Long Reply (the Reply chunk).
    Reply {
        /// Bytes to register.
        len: u32,
    },
}

impl Registration {
    /// Bytes to register.
    pub fn len(&self) -> u64 {
        match self {
            Registration::Read { data, .. } => data.iter().map(|b| b.len() as u64).sum(),
            Registration::Write { len } | Registration::Reply { len } => u64::from(*len),
        }
    }

    /// True if nothing is to be registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A Call whose shape is chosen, waiting for its memory registrations.
#[derive(Debug, Clone)]
#[must_use = "register the memory and call finish()"]
pub struct CallPlan {
    /// The shape chosen.
    pub shape: Shape,
    /// What to register, in order: Read chunks, Write chunks, then the Reply chunk.
    pub registrations: Vec<Registration>,
    xid: Xid,
    version: Version,
    credits: u32,
    payload: Vec<Bytes>,
    limits: CallLimits,
}

/// A message ready to Send: the header and the gather list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The shape.
    pub shape: Shape,
    /// The transport header (kept to match the reply against it).
    pub header: Header,
    /// The Send's gather list: header bytes first, then Payload stream pieces.
    pub send: Vec<Bytes>,
    /// Total bytes of the Send. Invariant: at most the peer's inline threshold.
    pub send_len: usize,
}

impl Outgoing {
    fn new(shape: Shape, header: Header, payload: Vec<Bytes>) -> Self {
        let mut send = Vec::with_capacity(1 + payload.len());
        send.push(header.to_bytes());
        send.extend(payload.into_iter().filter(|b| !b.is_empty()));
        let send_len = send.iter().map(Bytes::len).sum();
        Outgoing {
            shape,
            header,
            send,
            send_len,
        }
    }

    /// The chunk lists the header advertises.
    pub fn chunks(&self) -> Option<&ChunkLists> {
        self.header.chunks()
    }

    /// The Send as one buffer.
    // COPY: for tests and diagnostics only; drivers post `send` as a gather list.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.send_len);
        for b in &self.send {
            out.put_slice(b);
        }
        out.freeze()
    }
}

const FIXED: usize = PREFIX_LEN;

fn write_chunk_room(max_segs: u32) -> usize {
    4 + 4 + SEGMENT_LEN * max_segs as usize
}

/// Chooses the shape of a Call and lists the registrations it needs.
///
/// Rules, in order:
/// 1. Reply resources (§5.3.3, §8.2): if the largest reply does not fit our inline
///    threshold, provide a Write chunk per DDP-eligible result, and a Reply chunk if
///    the reply without those results still does not fit. "A requester MUST provide a
///    Reply chunk whenever the maximum possible size of the reply is larger than its
///    own inline threshold."
/// 2. Short (§4.5.1) if header plus whole stream fit the responder's threshold.
/// 3. Chunked (§4.5.2) if reducing every non-empty DDP-eligible item makes it fit.
/// 4. Long (§4.5.3) otherwise: "the RDMA transport MUST use RDMA Read or Write
///    operations to convey the Payload stream itself."
pub fn plan_call(
    xid: Xid,
    version: Version,
    credits: u32,
    stream: &XdrStream,
    sizing: &ReplySizing,
    limits: CallLimits,
) -> Result<CallPlan, MarshalError> {
    plan_call_inner(xid, version, credits, stream, sizing, limits, true)
}

/// Like [`plan_call`], but never provides a Reply chunk: for a connection where the
/// responder can return a large Reply through a responder-provided Read chunk.
///
/// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.3.1: the requester "does not provide a
/// Reply chunk, and relies on a responder-provider Read chunk to handle large
/// replies." Write chunks for DDP-eligible results are still provided (§4.1: "a
/// responder must still make use of Write chunks provided by the requester").
pub fn plan_call_without_reply_chunk(
    xid: Xid,
    version: Version,
    credits: u32,
    stream: &XdrStream,
    sizing: &ReplySizing,
    limits: CallLimits,
) -> Result<CallPlan, MarshalError> {
    plan_call_inner(xid, version, credits, stream, sizing, limits, false)
}

fn plan_call_inner(
    xid: Xid,
    version: Version,
    credits: u32,
    stream: &XdrStream,
    sizing: &ReplySizing,
    limits: CallLimits,
    reply_chunk: bool,
) -> Result<CallPlan, MarshalError> {
    let full_len = stream.xdr_len();
    if u32::try_from(full_len).is_err() {
        return Err(MarshalError::TooLarge);
    }
    let max_segs = limits.max_segments_per_registration.max(1);
    let threshold = limits.send_threshold as usize;

    // 1. Reply resources.
    let mut reply_regs = Vec::new();
    let reply_fixed = FIXED + 12; // empty read list, write list, no reply chunk
    if sizing.max_reply as usize + reply_fixed > limits.recv_threshold as usize {
        let mut reduced = u64::from(sizing.max_reply);
        for &len in &sizing.ddp_results {
            reply_regs.push(Registration::Write { len });
            reduced = reduced.saturating_sub(padded_len(len as usize) as u64);
        }
        let reply_hdr = reply_fixed + reply_regs.len() * write_chunk_room(max_segs);
        if reply_chunk && reduced + reply_hdr as u64 > u64::from(limits.recv_threshold) {
            reply_regs.push(Registration::Reply {
                len: sizing.max_reply,
            });
        }
    }
    let writes_room: usize = reply_regs
        .iter()
        .map(|r| match r {
            Registration::Write { .. } => write_chunk_room(max_segs),
            _ => write_chunk_room(max_segs) - 4,
        })
        .sum();
    let hdr_fixed = FIXED + 12 + writes_room;
    let read_room = 4 + READ_SEGMENT_LEN;

    let plan = |shape, mut regs: Vec<Registration>, payload| {
        regs.extend(reply_regs.iter().cloned());
        CallPlan {
            shape,
            registrations: regs,
            xid,
            version,
            credits,
            payload,
            limits,
        }
    };

    // 2. Short.
    if hdr_fixed + full_len <= threshold {
        return Ok(plan(Shape::Short, Vec::new(), stream.gather()));
    }
    // 3. Chunked: every non-empty DDP-eligible item in its own Read chunk.
    let items: Vec<usize> = (0..stream.ddp.len())
        .filter(|&i| !stream.ddp[i].data.is_empty())
        .collect();
    if !items.is_empty() {
        let hdr = hdr_fixed + items.len() * read_room * max_segs as usize;
        // Empty items contribute nothing beyond their length word, which is inline.
        if hdr + stream.inline.len() <= threshold {
            let regs = items
                .iter()
                .map(|&i| Registration::Read {
                    // Cannot fail: positions are below full_len, which fits in u32.
                    position: stream.xdr_position(i).unwrap_or(0) as u32,
                    data: vec![stream.ddp[i].data.clone()],
                })
                .collect();
            return Ok(plan(Shape::Chunked, regs, vec![stream.inline.clone()]));
        }
    }
    // 4. Long: a Position Zero Read chunk holding the whole Call.
    let hdr = hdr_fixed + read_room * max_segs as usize;
    if hdr > threshold {
        return Err(MarshalError::HeaderTooLarge {
            len: hdr,
            threshold: limits.send_threshold,
        });
    }
    let regs = vec![Registration::Read {
        position: 0,
        // §4.5.3: "Every segment in this Read chunk MUST contain zero in its Position
        // field." The chunk carries the whole stream, padding of items included.
        data: stream.gather(),
    }];
    Ok(plan(Shape::Long, regs, Vec::new()))
}

impl CallPlan {
    /// Builds the Call from the segments the driver registered, one `Vec<Segment>` per
    /// entry of [`CallPlan::registrations`], in order. Each must cover exactly the
    /// registration's length with at most `max_segments_per_registration` segments.
    pub fn finish(self, segments: Vec<Vec<Segment>>) -> Result<Outgoing, MarshalError> {
        if segments.len() != self.registrations.len() {
            return Err(MarshalError::RegistrationMismatch);
        }
        let max_segs = self.limits.max_segments_per_registration.max(1) as usize;
        let mut chunks = ChunkLists::empty();
        for (reg, segs) in self.registrations.iter().zip(segments) {
            let total: u64 = segs.iter().map(|s| u64::from(s.length)).sum();
            if segs.is_empty() || segs.len() > max_segs || total != reg.len() {
                return Err(MarshalError::RegistrationMismatch);
            }
            match reg {
                Registration::Read { position, .. } => chunks.reads.push(ReadChunk {
                    position: *position,
                    segments: segs,
                }),
                Registration::Write { .. } => chunks.writes.push(WriteChunk::new(segs)),
                Registration::Reply { .. } => chunks.reply = Some(WriteChunk::new(segs)),
            }
        }
        let body = match self.shape {
            Shape::Long => Body::NoMsg(chunks),
            Shape::Short | Shape::Chunked => Body::Msg(chunks),
        };
        let header = Header {
            xid: self.xid,
            version: self.version,
            credits: self.credits,
            body,
        };
        let out = Outgoing::new(self.shape, header, self.payload);
        // §5.2.4: "the total length of the gathered send buffers MUST NOT exceed the
        // peer receiver's inline threshold." Guaranteed by the room reserved in
        // plan_call; checked again here.
        if out.send_len > self.limits.send_threshold as usize {
            return Err(MarshalError::HeaderTooLarge {
                len: out.send_len,
                threshold: self.limits.send_threshold,
            });
        }
        Ok(out)
    }
}

/// One RDMA Write to post: `data` (gathered) to the peer's `handle` at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaWrite {
    /// The peer's STag.
    pub handle: u32,
    /// Where in the peer's region the first byte goes.
    pub offset: u64,
    /// The data, as a gather list (slices of the reply's buffers, no copy).
    pub data: Vec<Bytes>,
}

impl RdmaWrite {
    /// Bytes written.
    pub fn len(&self) -> u64 {
        self.data.iter().map(|b| b.len() as u64).sum()
    }

    /// True if nothing is written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A Reply ready to go: RDMA Writes first, then the Send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingReply {
    /// RDMA Writes to post before the Send (§3.2.2: Writes "are ordered with respect to
    /// RDMA Sends").
    pub writes: Vec<RdmaWrite>,
    /// The Send.
    pub send: Outgoing,
    /// An STag to invalidate remotely (Send With Invalidate), if the requester allows it
    /// (RFC 8797 R flag) and its Call named exactly one handle (what Linux knfsd does).
    pub invalidate: Option<u32>,
}

/// Slices of `pieces` placed into `segments` in order: one RDMA Write per segment used,
/// and the segments with lengths rewritten to what was written (zero when unused).
fn fill_segments(pieces: &[Bytes], segments: &[Segment]) -> (Vec<RdmaWrite>, Vec<Segment>) {
    let mut writes = Vec::new();
    let mut out = Vec::with_capacity(segments.len());
    let mut piece = 0;
    let mut at = 0; // offset within pieces[piece]
    for seg in segments {
        let mut room = seg.length as usize;
        let mut data = Vec::new();
        while room > 0 && piece < pieces.len() {
            let p = &pieces[piece];
            let take = (p.len() - at).min(room);
            if take > 0 {
                data.push(p.slice(at..at + take));
            }
            room -= take;
            at += take;
            if at == p.len() {
                piece += 1;
                at = 0;
            }
        }
        let written = seg.length as usize - room;
        out.push(Segment {
            length: written as u32,
            ..*seg
        });
        if written > 0 {
            writes.push(RdmaWrite {
                handle: seg.handle,
                offset: seg.offset,
                data,
            });
        }
    }
    (writes, out)
}

/// The Payload stream as pieces, with the items `reduced(i)` says are moved left out
/// (their length words stay: §4.4.4.1 "the count of bytes stays in the Payload stream")
/// and every other item spliced back with its padding.
fn pieces_without(stream: &XdrStream, reduced: impl Fn(usize) -> bool) -> Vec<Bytes> {
    let mut pieces = Vec::with_capacity(1 + 3 * stream.ddp.len());
    let mut at = 0;
    for (i, item) in stream.ddp.iter().enumerate() {
        if reduced(i) {
            continue;
        }
        if item.inline_offset > at {
            pieces.push(stream.inline.slice(at..item.inline_offset));
        }
        at = item.inline_offset;
        if !item.data.is_empty() {
            pieces.push(item.data.clone());
        }
        let pad = pad_len(item.data.len());
        if pad > 0 {
            pieces.push(Bytes::from_static(&ZERO_PAD[..pad]));
        }
    }
    if at < stream.inline.len() {
        pieces.push(stream.inline.slice(at..));
    }
    pieces
}

/// RDMA Writes of the DDP-eligible results into the Call's Write chunks, and the Write
/// list to echo (§4.4.6.2: unused chunks echoed with zero lengths).
fn fill_write_chunks(
    stream: &XdrStream,
    call_chunks: &ChunkLists,
) -> Result<(Vec<RdmaWrite>, Vec<WriteChunk>), MarshalError> {
    let mut writes = Vec::new();
    let mut write_list = Vec::with_capacity(call_chunks.writes.len());
    for (k, chunk) in call_chunks.writes.iter().enumerate() {
        match stream.ddp.get(k) {
            Some(item) => {
                if item.data.len() as u64 > chunk.len() {
                    return Err(MarshalError::WriteChunkTooSmall {
                        index: k,
                        len: item.data.len(),
                        room: chunk.len(),
                    });
                }
                let (w, segs) = fill_segments(std::slice::from_ref(&item.data), &chunk.segments);
                writes.extend(w);
                write_list.push(WriteChunk::new(segs));
            }
            None => write_list.push(WriteChunk::new(
                chunk
                    .segments
                    .iter()
                    .map(|s| Segment { length: 0, ..*s })
                    .collect(),
            )),
        }
    }
    Ok((writes, write_list))
}

/// A Reply to be sent as RDMA_NOMSG with a responder-provided Position Zero Read
/// chunk, waiting for the registration of its Payload stream.
///
/// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1: "Similar to its use in an RPC Call,
/// a Position Zero Read chunk in an RPC Reply contains an RPC Reply's Payload stream.
/// Position Zero Read chunks are always sent using an RPC-over-RDMA RDMA_NOMSG
/// message." and "a responder must still make use of Write chunks provided by the
/// requester."
#[derive(Debug, Clone)]
#[must_use = "register the payload read-only and call finish()"]
pub struct ReadChunkReply {
    /// RDMA Writes of DDP-eligible results into the requester's Write chunks, posted
    /// before the Send.
    pub writes: Vec<RdmaWrite>,
    /// The (reduced) Payload stream to register for remote read only.
    pub registration: Registration,
    xid: Xid,
    version: Version,
    write_list: Vec<WriteChunk>,
}

/// Plans a Reply through a responder-provided Read chunk (the reply exceeded every
/// reply resource the requester gave).
pub fn plan_reply_read_chunk(
    xid: Xid,
    version: Version,
    stream: &XdrStream,
    call_chunks: &ChunkLists,
) -> Result<ReadChunkReply, MarshalError> {
    if u32::try_from(stream.xdr_len()).is_err() {
        return Err(MarshalError::TooLarge);
    }
    let (writes, write_list) = fill_write_chunks(stream, call_chunks)?;
    let n_reduced = call_chunks.writes.len();
    let payload = pieces_without(stream, |i| i < n_reduced);
    Ok(ReadChunkReply {
        writes,
        registration: Registration::Read {
            position: 0,
            data: payload,
        },
        xid,
        version,
        write_list,
    })
}

impl ReadChunkReply {
    /// Builds the RDMA_NOMSG once the payload is registered as `segments`, granting
    /// `credits`. Fails if the segments do not cover the payload exactly or the header
    /// exceeds `send_threshold`.
    pub fn finish(
        self,
        credits: u32,
        segments: Vec<Segment>,
        send_threshold: u32,
    ) -> Result<Outgoing, MarshalError> {
        let covered: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
        if segments.is_empty() || covered != self.registration.len() {
            return Err(MarshalError::RegistrationMismatch);
        }
        let header = Header {
            xid: self.xid,
            version: self.version,
            credits,
            body: Body::NoMsg(ChunkLists {
                reads: vec![ReadChunk {
                    position: 0,
                    segments,
                }],
                writes: self.write_list,
                reply: None,
            }),
        };
        let send = Outgoing::new(Shape::Long, header, Vec::new());
        if send.send_len > send_threshold as usize {
            return Err(MarshalError::HeaderTooLarge {
                len: send.send_len,
                threshold: send_threshold,
            });
        }
        Ok(send)
    }
}

/// Builds a forward-direction Reply to a Call that advertised `call_chunks`.
///
/// - §5.3.2: "When a Write list is provided for the results of an RPC Call, the
///   responder MUST provide data corresponding to DDP-eligible XDR data items via RDMA
///   Write operations to the memory referenced in the Write list." Item *k* goes in
///   Write chunk *k*; items beyond the last chunk stay inline.
/// - §4.4.6: "The responder MUST NOT change the number of segments in the Write chunk.
///   The responder fills the segments in array order ... updates the segment length
///   fields"; "If a Write chunk segment is not filled by the responder, the updated
///   length of the segment SHOULD be zero."
/// - §4.4.6.1: "A responder MUST NOT write XDR pad bytes for a Write chunk."
/// - §4.4.6.2: "the responder MUST set the length of all segments in the chunk to
///   zero" for an unused Write chunk.
/// - §4.5.3: "If a Reply chunk was provided and the reduced Payload is larger than the
///   requester's inline threshold, the responder MUST use the provided Reply chunk".
pub fn marshal_reply(
    xid: Xid,
    version: Version,
    credits: u32,
    stream: &XdrStream,
    call_chunks: &ChunkLists,
    send_threshold: u32,
    remote_invalidate: bool,
) -> Result<OutgoingReply, MarshalError> {
    let (mut writes, write_list) = fill_write_chunks(stream, call_chunks)?;
    let n_reduced = call_chunks.writes.len();
    let payload = pieces_without(stream, |i| i < n_reduced);
    let payload_len: usize = payload.iter().map(Bytes::len).sum();
    let shape = if n_reduced > 0 && !stream.ddp.is_empty() {
        Shape::Chunked
    } else {
        Shape::Short
    };

    let mut chunks = ChunkLists {
        reads: Vec::new(),
        writes: write_list,
        reply: None,
    };
    let invalidate = match call_chunks.handles().as_slice() {
        [only] if remote_invalidate => Some(*only),
        _ => None,
    };
    let msg_hdr_len = FIXED + chunks.encoded_len();
    if msg_hdr_len + payload_len <= send_threshold as usize {
        let header = Header {
            xid,
            version,
            credits,
            body: Body::Msg(chunks),
        };
        return Ok(OutgoingReply {
            writes,
            send: Outgoing::new(shape, header, payload),
            invalidate,
        });
    }
    let Some(reply_chunk) = &call_chunks.reply else {
        return Err(MarshalError::NoReplyChunk { len: payload_len });
    };
    if payload_len as u64 > reply_chunk.len() {
        return Err(MarshalError::ReplyChunkTooSmall {
            len: payload_len,
            room: reply_chunk.len(),
        });
    }
    let (w, segs) = fill_segments(&payload, &reply_chunk.segments);
    writes.extend(w);
    chunks.reply = Some(WriteChunk::new(segs));
    let header = Header {
        xid,
        version,
        credits,
        body: Body::NoMsg(chunks),
    };
    let send = Outgoing::new(Shape::Long, header, Vec::new());
    if send.send_len > send_threshold as usize {
        return Err(MarshalError::HeaderTooLarge {
            len: send.send_len,
            threshold: send_threshold,
        });
    }
    Ok(OutgoingReply {
        writes,
        send,
        invalidate,
    })
}

/// Builds a backward-direction Call or Reply (§7.3.4, §7.3.5): "The rdma_proc field in
/// the RPC-over-RDMA header MUST contain the value RDMA_MSG. All three chunk lists MUST
/// be empty." Reduction is not allowed (§7.4), so the message must fit inline.
pub fn marshal_backward(
    xid: Xid,
    version: Version,
    credits: u32,
    stream: &XdrStream,
    send_threshold: u32,
) -> Result<Outgoing, MarshalError> {
    let header = Header {
        xid,
        version,
        credits,
        body: Body::Msg(ChunkLists::empty()),
    };
    let out = Outgoing::new(Shape::Short, header, stream.gather());
    if out.send_len > send_threshold as usize {
        return Err(MarshalError::HeaderTooLarge {
            len: out.send_len,
            threshold: send_threshold,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
