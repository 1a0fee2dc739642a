//! Chunk lists: RDMA segments, Read chunks, Write chunks and the Reply chunk.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.3-§4.4.6, §5.3, §5.7 (read the
//! XDR examples there first); rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §4.2
//! (same layout).
//!
//! On the wire (§5.7), with `HLOO` a segment and `PHLOO` a read segment:
//!
//! ```text
//! Read list   1 PHLOO 1 PHLOO ... 0        (optional-data chain of read segments)
//! Write list  1 3 HLOO HLOO HLOO 1 2 HLOO HLOO 0   (chain of counted arrays)
//! Reply chunk 1 2 HLOO HLOO  |  0          (optional counted array)
//! ```
//!
//! Like Linux `svc_rdma_pcl.c`, the lists are parsed once into typed values
//! ([`ChunkLists`]) that every later stage uses; nothing re-reads the raw XDR.
//!
//! # Implementation limits (DoS bounds)
//! [`Limits`] caps segments per chunk, chunks per list and segments per header. A
//! counted array's count is checked against the limit and against the bytes present
//! *before* anything is allocated, so a peer cannot make us allocate more than
//! `16 * max_total_segments` bytes of segments per header.
//!
//! # Sanity checks (all answered with ERR_BADHEADER)
//! - every Read segment Position is a multiple of four (§4.4.5.1);
//! - Read segments sharing a Position are adjacent in the list (§4.4.5: "Segments whose
//!   Position field value match this offset are concatenated afterwards");
//! - no Write chunk or Reply chunk has zero segments (§4.4.6: "an array of one or more
//!   plain RDMA segments").

use bytes::BufMut;
use xdr::Decoder;

use crate::error::HeaderError;

/// An RDMA segment (`rpcrdma1_segment`, §4.4.3): `HLOO` in §5.7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Segment {
    /// Steering tag (STag, R_key) of the registered memory.
    pub handle: u32,
    /// Length of the segment in bytes.
    pub length: u32,
    /// Offset or address of the segment's first byte in the registered region.
    pub offset: u64,
}

/// Bytes of one encoded [`Segment`].
pub const SEGMENT_LEN: usize = 16;
/// Bytes of one encoded read segment (Position + Segment).
pub const READ_SEGMENT_LEN: usize = 20;

impl Segment {
    /// A segment.
    pub const fn new(handle: u32, length: u32, offset: u64) -> Self {
        Segment {
            handle,
            length,
            offset,
        }
    }

    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Segment {
            handle: dec.u32()?,
            length: dec.u32()?,
            offset: dec.u64()?,
        })
    }

    fn emit(&self, buf: &mut impl BufMut) {
        buf.put_u32(self.handle);
        buf.put_u32(self.length);
        buf.put_u64(self.offset);
    }
}

/// A Read chunk (§4.4.5): one or more segments sharing one Position in the Payload
/// stream. In the Read list each of its segments appears as `PHLOO` with the same `P`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadChunk {
    /// Byte offset in the (reassembled) Payload stream where the chunk's data goes.
    /// Invariant after parsing: a multiple of four.
    pub position: u32,
    /// The segments, concatenated in list order. Invariant after parsing: non-empty.
    pub segments: Vec<Segment>,
}

impl ReadChunk {
    /// Sum of the segment lengths (u64: a peer may announce up to 2^32 segments of
    /// 2^32-1 bytes in theory; the limits keep it far smaller).
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.length)).sum()
    }

    /// True if the chunk carries no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A Position Zero Read chunk carries a whole RPC Call (§4.5.3, Long Call).
    pub fn is_position_zero(&self) -> bool {
        self.position == 0
    }
}

/// A Write chunk (§4.4.6), also the shape of the Reply chunk (§5.3.3): a counted array
/// of segments, `3 HLOO HLOO HLOO` in §5.7.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteChunk {
    /// The segments, filled in array order. Invariant after parsing: non-empty.
    pub segments: Vec<Segment>,
}

impl WriteChunk {
    /// A chunk of the given segments.
    pub fn new(segments: Vec<Segment>) -> Self {
        WriteChunk { segments }
    }

    /// Sum of the segment lengths.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.length)).sum()
    }

    /// True if the chunk carries no bytes (an unused Write chunk in a reply, §4.4.6.2).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the encoded counted array.
    pub fn encoded_len(&self) -> usize {
        4 + SEGMENT_LEN * self.segments.len()
    }

    fn emit(&self, buf: &mut impl BufMut) {
        buf.put_u32(self.segments.len() as u32);
        for s in &self.segments {
            s.emit(buf);
        }
    }
}

/// Implementation limits applied while parsing chunk lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most segments in one Read, Write or Reply chunk.
    pub max_segments_per_chunk: u32,
    /// Most Read chunks in the Read list, and most Write chunks in the Write list.
    pub max_chunks_per_list: u32,
    /// Most segments in one header, all lists together.
    pub max_total_segments: u32,
}

impl Default for Limits {
    /// 256 segments per chunk and per header (a 4 KiB receive buffer holds at most 255
    /// encoded segments anyway), 16 chunks per list (Linux sends at most one).
    fn default() -> Self {
        Limits {
            max_segments_per_chunk: 256,
            max_chunks_per_list: 16,
            max_total_segments: 256,
        }
    }
}

/// The three chunk lists of RDMA_MSG and RDMA_NOMSG (`rpcrdma1_chunks`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkLists {
    /// The Read list, grouped into Read chunks, in list order.
    pub reads: Vec<ReadChunk>,
    /// The Write list.
    pub writes: Vec<WriteChunk>,
    /// The Reply chunk, if present.
    pub reply: Option<WriteChunk>,
}

impl ChunkLists {
    /// No chunks: three zero words on the wire.
    pub fn empty() -> Self {
        Self::default()
    }

    /// True if all three lists are empty.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// The Position Zero Read chunk, if the message has one.
    pub fn position_zero(&self) -> Option<&ReadChunk> {
        self.reads.iter().find(|c| c.is_position_zero())
    }

    /// Total segments in all lists.
    pub fn segment_count(&self) -> usize {
        self.reads.iter().map(|c| c.segments.len()).sum::<usize>()
            + self.writes.iter().map(|c| c.segments.len()).sum::<usize>()
            + self.reply.as_ref().map_or(0, |c| c.segments.len())
    }

    /// Every distinct handle named by the lists, in first-seen order.
    pub fn handles(&self) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let all = self
            .reads
            .iter()
            .flat_map(|c| c.segments.iter())
            .chain(self.writes.iter().flat_map(|c| c.segments.iter()))
            .chain(self.reply.iter().flat_map(|c| c.segments.iter()));
        for s in all {
            if !out.contains(&s.handle) {
                out.push(s.handle);
            }
        }
        out
    }

    /// Bytes of the encoded lists.
    pub fn encoded_len(&self) -> usize {
        let reads: usize = self
            .reads
            .iter()
            .map(|c| c.segments.len() * (4 + READ_SEGMENT_LEN))
            .sum();
        let writes: usize = self.writes.iter().map(|c| 4 + c.encoded_len()).sum();
        let reply = self.reply.as_ref().map_or(0, WriteChunk::encoded_len);
        (4 + reads) + (4 + writes) + (4 + reply)
    }

    /// Appends the XDR encoding (§5.7).
    pub fn emit(&self, buf: &mut impl BufMut) {
        // Read list: 1 PHLOO ... 0
        for chunk in &self.reads {
            for seg in &chunk.segments {
                buf.put_u32(1);
                buf.put_u32(chunk.position);
                seg.emit(buf);
            }
        }
        buf.put_u32(0);
        // Write list: 1 n HLOO... ... 0
        for chunk in &self.writes {
            buf.put_u32(1);
            chunk.emit(buf);
        }
        buf.put_u32(0);
        // Reply chunk: 1 n HLOO... | 0
        match &self.reply {
            Some(chunk) => {
                buf.put_u32(1);
                chunk.emit(buf);
            }
            None => buf.put_u32(0),
        }
    }

    /// Parses the three lists, enforcing `limits` and the sanity checks in the module
    /// documentation. Never panics; allocation is bounded by the limits.
    pub fn parse(dec: &mut Decoder, limits: &Limits) -> Result<Self, HeaderError> {
        let mut budget = Budget { limits, total: 0 };
        let reads = parse_read_list(dec, &mut budget)?;
        let mut writes = Vec::new();
        while optional_flag(dec)? {
            if writes.len() as u32 >= limits.max_chunks_per_list {
                return Err(HeaderError::TooManyChunks {
                    max: limits.max_chunks_per_list,
                });
            }
            writes.push(parse_write_chunk(dec, &mut budget)?);
        }
        let reply = if optional_flag(dec)? {
            Some(parse_write_chunk(dec, &mut budget)?)
        } else {
            None
        };
        Ok(ChunkLists {
            reads,
            writes,
            reply,
        })
    }
}

struct Budget<'a> {
    limits: &'a Limits,
    total: u32,
}

impl Budget<'_> {
    fn take(&mut self, n: u32) -> Result<(), HeaderError> {
        self.total = self.total.saturating_add(n);
        if self.total > self.limits.max_total_segments {
            return Err(HeaderError::TooManyTotalSegments {
                max: self.limits.max_total_segments,
            });
        }
        Ok(())
    }
}

/// RFC 4506 §4.19 optional-data discriminant: 0 or 1, anything else is malformed.
fn optional_flag(dec: &mut Decoder) -> Result<bool, HeaderError> {
    match dec.u32()? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(HeaderError::Xdr(xdr::XdrError::InvalidDiscriminant(other))),
    }
}

fn parse_read_list(
    dec: &mut Decoder,
    budget: &mut Budget<'_>,
) -> Result<Vec<ReadChunk>, HeaderError> {
    let limits = budget.limits;
    let mut chunks: Vec<ReadChunk> = Vec::new();
    while optional_flag(dec)? {
        budget.take(1)?;
        let position = dec.u32()?;
        let seg = Segment::decode(dec)?;
        // rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.5.1: "The value in this field
        // MUST be a multiple of four."
        if position % 4 != 0 {
            return Err(HeaderError::MisalignedPosition(position));
        }
        match chunks.last_mut() {
            Some(last) if last.position == position => {
                if last.segments.len() as u32 >= limits.max_segments_per_chunk {
                    return Err(HeaderError::TooManySegments {
                        max: limits.max_segments_per_chunk,
                    });
                }
                last.segments.push(seg);
            }
            _ => {
                // §4.4.5: segments of one Read chunk are concatenated "until there are no
                // more segments at that Position value": a Position seen before, after
                // another one, is ambiguous.
                if chunks.iter().any(|c| c.position == position) {
                    return Err(HeaderError::DuplicatePosition(position));
                }
                if chunks.len() as u32 >= limits.max_chunks_per_list {
                    return Err(HeaderError::TooManyChunks {
                        max: limits.max_chunks_per_list,
                    });
                }
                chunks.push(ReadChunk {
                    position,
                    segments: vec![seg],
                });
            }
        }
    }
    Ok(chunks)
}

fn parse_write_chunk(
    dec: &mut Decoder,
    budget: &mut Budget<'_>,
) -> Result<WriteChunk, HeaderError> {
    let limits = budget.limits;
    let count = dec.u32()?;
    if count == 0 {
        return Err(HeaderError::EmptyChunk);
    }
    if count > limits.max_segments_per_chunk {
        return Err(HeaderError::TooManySegments {
            max: limits.max_segments_per_chunk,
        });
    }
    budget.take(count)?;
    // Check the bytes are there before allocating for them.
    let need = count as usize * SEGMENT_LEN;
    if dec.remaining() < need {
        return Err(HeaderError::Xdr(xdr::XdrError::UnexpectedEnd {
            needed: need,
            remaining: dec.remaining(),
        }));
    }
    let mut segments = Vec::with_capacity(count as usize);
    for _ in 0..count {
        segments.push(Segment::decode(dec)?);
    }
    Ok(WriteChunk { segments })
}
