//! Memory registration and invalidation for chunks, and nothing else (Linux
//! `frwr_ops.c`).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.4.1 ("the requester MUST
//! ensure that ... memory ... is invalidated ... before the RPC transaction is
//! complete"), §5.5.4 (close the connection when a region cannot be invalidated),
//! §10.2 (unpredictable handles).
//!
//! Every region is registered for one Call, with a fresh random key (the software
//! providers' STag table draws one per registration, as a device does for its rkeys),
//! and only with the rights its chunk
//! needs: remote read for Read chunks, remote write for Write and Reply chunks. After
//! the Reply arrives every region is fenced: invalidated by posted work
//! ([`ChunkRegion::invalidate_wr`], verbs LOCAL_INV, whose completion says it is done)
//! unless the peer already did it with Send With Invalidate, then deregistered
//! ([`ChunkRegion::release`]), which gives the buffer back without a copy. A lost
//! connection fences them all: nothing reaches them through a dead queue pair.
//!
//! Buffers the peer places data into (Write and Reply chunks, RDMA Read sinks) come
//! from a [`BufferPool`] shared by the connections, with room around the data where
//! the message is later made contiguous ([`join_in_place`]): no allocation, page
//! faults or zero fill per call. A Read sink is filled whole by a successful RDMA
//! Read. A Write or Reply chunk may not be: a responder may return a length larger
//! than what it wrote, and the bytes it did not write are then whatever the reused
//! buffer held. That is safe because a requester's pool is its transport's, and a
//! transport talks to one server: every byte in the pool was placed there by that
//! server (Write and Reply chunks, pulled Replies, the inline pieces joined around
//! them) or is a fresh allocation's zero, never the client's own data (Read chunks
//! are registered from the caller's bytes, not pooled). A lying server can show the
//! application only bytes it sent earlier, which it could send again anyway. (Linux
//! xprtrdma places READ data straight into page-cache or user pages, unzeroed.)

use bytes::{BufMut, Bytes, BytesMut};
use rdma::{
    Access, BufferPool, LocalSge, MemoryRegion, PooledBuffer, ProtectionDomain, RegisterError,
    RemoteAddr, STag, SendOp, SendWr,
};
use rpcrdma::marshal::Registration;
use rpcrdma::reassembly::Reassembled;
use rpcrdma::Segment;

use crate::counters::{ConnStats, Counter, CounterSink};

/// One registered chunk region of a Call.
#[derive(Debug)]
pub(crate) struct ChunkRegion {
    mr: MemoryRegion,
    /// The key the peer reaches the region by.
    rkey: STag,
    len: u32,
    /// A Write or Reply chunk: the pooled buffer it was cut out of and where the chunk
    /// starts in it (room before and after it stays ours, unregistered).
    placed: Option<(PooledBuffer, usize)>,
}

/// Room around the data a peer places in our buffers (a requester's Write chunk, a
/// responder's Read sink), where the message it belongs to is later made contiguous
/// ([`join_in_place`]): `head` bytes before it (what precedes the DDP-eligible item: at
/// most the message's inline part, so our receive buffer), `tail` after (XDR padding
/// and what follows the item).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Room {
    pub(crate) head: usize,
    pub(crate) tail: usize,
}

impl Room {
    /// `head` bytes before, and [`TAIL_ROOM`] after. A longer tail is joined by a copy.
    pub(crate) fn around(head: usize) -> Room {
        Room {
            head,
            tail: TAIL_ROOM,
        }
    }
}

/// Room after placed data for the rest of its message: XDR padding (up to 3 bytes) and
/// the results or arguments that follow (nothing for an NFSv3 READ or WRITE; a few
/// short ones for an NFSv4 COMPOUND).
const TAIL_ROOM: usize = 256;

/// A pooled buffer with `room` around `len` bytes, not zeroed (module docs).
fn pooled(pool: &BufferPool, len: usize, room: Room) -> PooledBuffer {
    pool.get(room.head + len + room.tail)
}

/// A pooled-buffer error as a registration error (the range was out of bounds or in
/// use: a transport bug, reported rather than hidden).
fn buffer_err(e: rdma::BufferError) -> RegisterError {
    RegisterError::Provider(std::io::Error::other(e))
}

impl ChunkRegion {
    /// Registers what `reg` asks for; a Write chunk is cut out of a pooled buffer with
    /// `room` around it, and only the chunk is registered (the peer reaches nothing
    /// else; its segment's tagged offsets start at 0 as before). `pool` must hold only
    /// what this peer placed (module docs).
    pub(crate) fn register(
        pd: &ProtectionDomain,
        pool: &BufferPool,
        reg: &Registration,
        room: Room,
        stats: &ConnStats,
    ) -> Result<Self, RegisterError> {
        stats.inc(Counter::Registrations);
        let len = u32::try_from(reg.len()).unwrap_or(u32::MAX);
        let (mr, placed) = match reg {
            // One piece (a DDP-eligible argument, e.g. NFS WRITE data): its bytes are
            // the region, without a copy; the provider sends the peer's RDMA Reads
            // from them (`rdma::ProtectionDomain::register_bytes`).
            Registration::Read { data, .. } if data.len() == 1 => (
                pd.register_bytes(data[0].clone(), Access::REMOTE_READ)?,
                None,
            ),
            Registration::Read { data, .. } => {
                let mut buf = BytesMut::with_capacity(len as usize);
                for d in data {
                    // COPY: a Read chunk of several pieces (a Position Zero Read chunk
                    // holding a whole Call or Reply) into one registered region.
                    buf.put_slice(d);
                }
                (pd.register(buf, Access::REMOTE_READ)?, None)
            }
            Registration::Write { len } | Registration::Reply { len } => {
                let room = match reg {
                    Registration::Write { .. } => room,
                    _ => Room::default(),
                };
                let buf = pooled(pool, *len as usize, room);
                let chunk = room.head..room.head + *len as usize;
                let mr =
                    pd.register_pooled(&buf, chunk, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                (mr, Some((buf, room.head)))
            }
        };
        stats.count_region(&mr);
        Ok(ChunkRegion {
            rkey: remote_key(&mr)?,
            mr,
            len,
            placed,
        })
    }

    /// The one segment describing this region: its remote key, length, and the
    /// offset the peer names its first byte by (0 on a zero-based provider such as
    /// iWARP, the address on a verbs device: `rdma::MemoryRegion::remote_offset`).
    pub(crate) fn segment(&self) -> Segment {
        Segment {
            handle: self.rkey.0,
            length: self.len,
            offset: self.mr.remote_offset(0),
        }
    }

    /// The posted work that fences this region from the peer (verbs LOCAL_INV).
    pub(crate) fn invalidate_wr(&self, wr_id: u64) -> SendWr {
        SendWr {
            wr_id,
            op: SendOp::LocalInvalidate(self.rkey),
            sgl: Vec::new(),
        }
    }

    /// Deregisters the fenced region; a Write or Reply chunk's buffer comes back, with
    /// where the chunk starts in it.
    pub(crate) fn release(self) -> Option<(PooledBuffer, usize)> {
        self.mr.release();
        self.placed
    }
}

/// The remote key of a region registered with remote rights.
fn remote_key(mr: &MemoryRegion) -> Result<STag, RegisterError> {
    mr.rkey().ok_or(RegisterError::InvalidAccess(
        "a chunk region needs remote rights",
    ))
}

/// A sink for one Read chunk: the RDMA Reads of its segments land in one region, in
/// order, cut out of a pooled buffer (not zeroed: the Reads fill it whole).
#[derive(Debug)]
pub(crate) struct ReadSink {
    pub(crate) mr: MemoryRegion,
    /// RDMA Reads still outstanding.
    pub(crate) outstanding: usize,
    buf: PooledBuffer,
    /// Where the sink starts in `buf`, and its length.
    at: usize,
    len: usize,
}

impl ReadSink {
    /// A sink of `len` bytes with `room` before and after it in its buffer, so that a
    /// Call whose one Read chunk lands here can be made contiguous around the chunk's
    /// data without copying it ([`join_in_place`]; a responder's NFS WRITE). Only the
    /// sink is registered.
    pub(crate) fn with_room(
        pd: &ProtectionDomain,
        pool: &BufferPool,
        len: usize,
        room: Room,
    ) -> Result<ReadSink, RegisterError> {
        let buf = pooled(pool, len, room);
        Ok(ReadSink {
            mr: pd.register_pooled(&buf, room.head..room.head + len, Access::LOCAL_WRITE)?,
            outstanding: 0,
            buf,
            at: room.head,
            len,
        })
    }

    /// Once every Read completed: the buffer, room included, and where the data
    /// starts in it. The data is `buf[at..at + len]`.
    pub(crate) fn into_whole(self) -> (PooledBuffer, usize) {
        self.mr.release();
        (self.buf, self.at)
    }

    /// The RDMA Read that pulls the peer's segment `seg` into this sink at `at`.
    pub(crate) fn read_wr(&self, wr_id: u64, seg: &Segment, at: usize) -> SendWr {
        SendWr {
            wr_id,
            op: SendOp::RdmaRead {
                remote: RemoteAddr {
                    stag: STag(seg.handle),
                    offset: seg.offset,
                },
                sink: LocalSge {
                    mr: self.mr.clone(),
                    offset: at,
                    len: seg.length as usize,
                },
            },
            sgl: Vec::new(),
        }
    }

    /// The data, once every Read completed.
    pub(crate) fn into_bytes(self) -> Result<Bytes, RegisterError> {
        let len = self.len;
        let (buf, at) = self.into_whole();
        buf.freeze(at..at + len).map_err(buffer_err)
    }
}

/// `full` as one `Bytes` for `oncrpc` (`Dispatcher::dispatch` and `RecordReceiver`
/// take one): made contiguous around its one chunk's data ([`join_in_place`], counted
/// in `joined`), else copied.
pub(crate) fn contiguous(full: Reassembled, stats: &ConnStats, joined: Counter) -> Bytes {
    match join_in_place(full) {
        Ok(whole) => {
            stats.inc(joined);
            whole
        }
        // COPY: a message of several pieces that could not be joined around its one
        // chunk's data (several chunks, or pieces that do not fit the room).
        Err(full) => full.to_bytes(),
    }
}

/// Makes `full`, a message rebuilt around one chunk's data (a requester's Reply with a
/// Write chunk, a responder's Call with a Read chunk), contiguous in the pooled buffer
/// that chunk's data was placed in (a Write chunk region or a Read sink cut out of a
/// buffer with [`Room`] around it; the data, frozen there, leads back to its buffer,
/// [`PooledBuffer::holding`]): the pieces before the data are copied into the room in
/// front of it, the pieces after (XDR padding, the rest of the inline part) behind it,
/// and the message is one frozen range of the buffer. Only the bytes the peer returned
/// as written (`full`'s chunk range) come from the region; the rest of the region is
/// never handed up.
///
/// `Err(full)` when `full` is not one chunk of pooled data, or the pieces do not fit
/// the room (or it is taken): the caller copies as before.
pub(crate) fn join_in_place(full: Reassembled) -> Result<Bytes, Reassembled> {
    let [(pos, len)] = full.chunk_ranges[..] else {
        return Err(full);
    };
    let (pos, len) = (pos as usize, len as usize);
    // The data piece: the one starting at `pos`, `len` bytes.
    let mut offset = 0usize;
    let mut index = None;
    for (i, p) in full.parts.iter().enumerate() {
        if offset == pos && p.len() == len && len > 0 {
            index = Some(i);
            break;
        }
        offset += p.len();
    }
    let Some(i) = index else {
        return Err(full);
    };
    let Some((buf, at)) = PooledBuffer::holding(&full.parts[i]) else {
        return Err(full);
    };
    let head = pos;
    let tail = full.len() - pos - len;
    if head > at || at + len + tail > buf.len() {
        return Err(full);
    }
    let room_written = (|| {
        let mut o = at - head;
        for p in &full.parts[..i] {
            // COPY: the message's pieces before a chunk's data (the inline part up to
            // the DDP-eligible item: tens to hundreds of bytes) into the room in front
            // of the data, so the data itself is not copied.
            buf.write(o, p)?;
            o += p.len();
        }
        let mut o = at + len;
        for p in &full.parts[i + 1..] {
            // COPY: the pieces after the data (XDR padding, the rest of the inline
            // part).
            buf.write(o, p)?;
            o += p.len();
        }
        buf.freeze(at - head..at + len + tail)
    })();
    room_written.map_err(|_| full)
}
#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma::reassembly::reassemble_reply;

    fn stats() -> std::sync::Arc<ConnStats> {
        ConnStats::new("client", None)
    }

    fn pd() -> ProtectionDomain {
        rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE).into()
    }

    /// A Write chunk region of `len` bytes with `room` from `pool`, the peer's
    /// `placed` bytes at the chunk's start; fenced: (its buffer, where the chunk
    /// starts).
    fn placed_in(pool: &BufferPool, len: u32, room: Room, placed: &[u8]) -> (PooledBuffer, usize) {
        let s = stats();
        let reg = Registration::Write { len };
        let r = ChunkRegion::register(&pd(), pool, &reg, room, &s).unwrap();
        // Only the chunk is registered: the peer reaches no byte of the room.
        assert_eq!(r.segment().offset, 0);
        assert_eq!(r.segment().length, len);
        assert_eq!(r.mr.len(), len as usize);
        assert!(r.mr.write(0, placed));
        let chunk_start = r.mr.with(|b| b.as_ptr());
        let (whole, at) = r.release().unwrap();
        assert_eq!(at, room.head);
        assert_eq!(whole.len(), room.head + len as usize + room.tail);
        // The chunk is where the peer placed it, in the buffer.
        assert_eq!(whole.addr(at), Some(chunk_start));
        (whole, at)
    }

    fn placed_region(len: u32, room: Room, placed: &[u8]) -> (PooledBuffer, usize) {
        placed_in(&BufferPool::new(1 << 20), len, room, placed)
    }

    /// An NFSv3-READ-like reduced reply: `head` bytes ending with the count word
    /// `count`, then `tail`.
    fn reduced(head_len: usize, count: u32, tail: &[u8]) -> (Bytes, usize) {
        let mut b: Vec<u8> = (0..head_len - 4).map(|i| i as u8 | 0x80).collect();
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(tail);
        (Bytes::from(b), head_len)
    }

    #[test]
    fn a_read_chunk_of_one_piece_is_registered_without_a_copy() {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
        let s = stats();
        let data = Bytes::from((0..70_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let piece = data.slice(3..65_539);
        let reg = Registration::Read {
            position: 40,
            data: vec![piece.clone()],
        };
        let r = ChunkRegion::register(&pd, &BufferPool::new(0), &reg, Room::default(), &s).unwrap();
        assert_eq!(r.segment().length, 65_536);
        assert_eq!(r.mr.access(), Access::REMOTE_READ);
        // The peer reads the caller's bytes themselves, and only the piece's.
        let seen = pd
            .resolve(r.mr.stag(), 0, 65_536, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(seen.shared_range(0, 65_536).unwrap(), Some(piece.clone()));
        assert_eq!(
            seen.shared_range(0, 65_536).unwrap().unwrap().as_ptr(),
            data[3..].as_ptr()
        );
        assert!(pd
            .resolve(r.mr.stag(), 0, 65_537, Access::REMOTE_READ)
            .is_err());
        assert!(pd.resolve(r.mr.stag(), 0, 1, Access::REMOTE_WRITE).is_err());
        let stag = r.mr.stag();
        assert!(r.release().is_none());
        assert!(pd.resolve(stag, 0, 1, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn a_read_chunk_of_several_pieces_is_copied_into_one_region() {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
        let s = stats();
        let reg = Registration::Read {
            position: 0,
            data: vec![Bytes::from_static(b"head"), Bytes::from_static(b"-tail")],
        };
        let r = ChunkRegion::register(&pd, &BufferPool::new(0), &reg, Room::default(), &s).unwrap();
        assert_eq!(r.segment().length, 9);
        let seen = pd.resolve(r.mr.stag(), 0, 9, Access::REMOTE_READ).unwrap();
        assert_eq!(seen.shared_range(0, 9).unwrap(), None);
        assert_eq!(r.mr.read(0, 9).unwrap(), Bytes::from_static(b"head-tail"));
    }

    #[test]
    fn the_reply_is_joined_around_the_data_in_its_own_region() {
        let data: Vec<u8> = (0..5001u32).map(|i| (i * 7) as u8).collect();
        let room = Room {
            head: 1024,
            tail: 64,
        };
        let (whole, at) = placed_region(8192, room, &data);
        let (base, off) = reduced(132, 5001, b"tail");
        let data_bytes = whole.freeze(at..at + 5001).unwrap();
        let full = reassemble_reply(base, &[off], vec![data_bytes]).unwrap();
        let expected = full.to_bytes();
        let reply = join_in_place(full).map_err(|_| "not joined").unwrap();
        assert_eq!(reply, expected);
        // No copy of the data: the Reply is a range of the buffer, the data in place.
        assert_eq!(Some(reply.as_ptr()), whole.addr(at - 132));
        assert_eq!(&reply[132..132 + 5001], &data[..]);
        assert_eq!(&reply[132 + 5001..], b"\0\0\0tail");
    }

    /// The responder placed 3000 bytes but returned 1000: exactly 1000 come up, the
    /// rest of what it wrote (and the rest of the region) is never handed up.
    #[test]
    fn only_the_returned_length_is_handed_up() {
        let data = vec![0xabu8; 3000];
        let (whole, at) = placed_region(
            4096,
            Room {
                head: 256,
                tail: 16,
            },
            &data,
        );
        let (base, off) = reduced(40, 1000, b"");
        let full =
            reassemble_reply(base, &[off], vec![whole.freeze(at..at + 1000).unwrap()]).unwrap();
        let reply = join_in_place(full).map_err(|_| "not joined").unwrap();
        assert_eq!(reply.len(), 40 + 1000);
        assert!(reply[40..].iter().all(|&b| b == 0xab));
    }

    /// The responder returned 2000 but placed only 500: the other 1500 bytes are a
    /// fresh buffer's zeros, or in a buffer the pool gives out again, bytes this same
    /// responder placed there for an earlier Call (module docs: why that is safe),
    /// never anything the client wrote.
    #[test]
    fn bytes_the_peer_did_not_write_are_zero_or_its_own_earlier_bytes() {
        let pool = BufferPool::new(1 << 20);
        let room = Room {
            head: 256,
            tail: 16,
        };
        let (base, off) = reduced(40, 2000, b"");
        let reply_of = |whole: &PooledBuffer, at: usize| {
            let data = whole.freeze(at..at + 2000).unwrap();
            let full = reassemble_reply(base.clone(), &[off], vec![data]).unwrap();
            join_in_place(full).map_err(|_| "not joined").unwrap()
        };
        let (fresh, at) = placed_in(&pool, 4096, room, &[0x5a; 500]);
        let ptr = fresh.addr(0);
        let reply = reply_of(&fresh, at);
        assert!(reply[40..540].iter().all(|&b| b == 0x5a));
        assert!(
            reply[540..].iter().all(|&b| b == 0),
            "a fresh buffer is zero"
        );
        drop((reply, fresh));
        let (reused, at) = placed_in(&pool, 4096, room, &[0x77; 100]);
        assert_eq!(reused.addr(0), ptr, "the same buffer, reused");
        let reply = reply_of(&reused, at);
        assert!(reply[40..140].iter().all(|&b| b == 0x77));
        assert!(
            reply[140..540].iter().all(|&b| b == 0x5a),
            "the peer's earlier bytes"
        );
        assert!(reply[540..].iter().all(|&b| b == 0));
    }

    #[test]
    fn without_room_or_with_the_room_handed_out_the_caller_copies() {
        // No room in front.
        let (whole, at) = placed_region(100, Room::default(), &[1; 100]);
        let (base, off) = reduced(40, 100, b"");
        let data = whole.freeze(at..at + 100).unwrap();
        let full = reassemble_reply(base.clone(), &[off], vec![data]).unwrap();
        let expected = full.to_bytes();
        let full = join_in_place(full).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        // Tail longer than the room behind.
        let (whole, at) = placed_region(100, Room { head: 64, tail: 2 }, &[1; 100]);
        let (base2, off2) = reduced(40, 100, b"more than two");
        let data = whole.freeze(at..at + 100).unwrap();
        let full = reassemble_reply(base2, &[off2], vec![data]).unwrap();
        let expected = full.to_bytes();
        let full = join_in_place(full).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        // Part of the room was handed out already: it is not written to.
        let (whole, at) = placed_region(100, Room { head: 64, tail: 8 }, &[1; 100]);
        let other = whole.freeze(0..at).unwrap();
        let before = other.clone();
        let data = whole.freeze(at..at + 100).unwrap();
        let full = reassemble_reply(base, &[off], vec![data]).unwrap();
        let expected = full.to_bytes();
        let full = join_in_place(full).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        assert_eq!(other, before, "room untouched");
    }

    /// A Read sink comes from the pool without a zero fill: the Reads fill it whole.
    #[test]
    fn read_sinks_are_reused_without_zero_fill() {
        let pool = BufferPool::new(1 << 20);
        let pd = pd();
        let sink = ReadSink::with_room(&pd, &pool, 10, Room::default()).unwrap();
        assert!(sink.mr.write(0, b"0123456789"));
        assert_eq!(&sink.into_bytes().unwrap()[..], b"0123456789");
        let again = ReadSink::with_room(&pd, &pool, 10, Room::default()).unwrap();
        assert_eq!(
            again.mr.read(0, 10).unwrap(),
            Bytes::from_static(b"0123456789")
        );
        assert_eq!(pool.stats().reused, 1);
    }
}
