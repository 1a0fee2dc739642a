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
//! the Reply arrives every region is fenced: invalidated by posted work
//! ([`ChunkRegion::invalidate_wr`], verbs LOCAL_INV, whose completion says it is done)
//! unless the peer already did it with Send With Invalidate, then deregistered
//! ([`ChunkRegion::into_bytes`]), which hands the buffer back without a copy. A lost
//! connection fences them all: nothing reaches them through a dead queue pair.

use bytes::{BufMut, Bytes, BytesMut};
use rdma::{
    Access, LocalSge, MemoryRegion, ProtectionDomain, RegisterError, RemoteAddr, STag, SendOp,
    SendWr,
};
use rpcrdma::marshal::Registration;
use rpcrdma::reassembly::Reassembled;
use rpcrdma::Segment;

use crate::counters::{ConnStats, Counter};

/// One registered chunk region of a Call.
#[derive(Debug)]
pub(crate) struct ChunkRegion {
    mr: MemoryRegion,
    /// The key the peer reaches the region by.
    rkey: STag,
    len: u32,
    /// Room around a requester's Write chunk, unregistered: the bytes before and
    /// after the registered chunk in the same allocation, for the requester to make a
    /// Reply contiguous around the chunk's data without copying that data
    /// ([`join_in_place`]).
    room: Option<(BytesMut, BytesMut)>,
}

/// Room a requester leaves around a Write chunk: `head` bytes before (what precedes
/// the DDP-eligible result in the Reply: at most the inline part, so the receive
/// inline threshold), `tail` after (XDR padding and what follows it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Room {
    pub(crate) head: usize,
    pub(crate) tail: usize,
}

impl ChunkRegion {
    /// Registers what `reg` asks for.
    pub(crate) fn register(
        pd: &ProtectionDomain,
        reg: &Registration,
        stats: &ConnStats,
    ) -> Result<Self, RegisterError> {
        Self::register_with_room(pd, reg, Room::default(), stats)
    }

    /// Registers what `reg` asks for; a Write chunk is cut out of a buffer with
    /// `room` around it, and only the chunk is registered (the peer reaches nothing
    /// else; its segment's tagged offsets start at 0 as before). The buffer is
    /// zero-filled: the `rdma` API registers initialized memory only and cannot tell
    /// which bytes the peer placed, so a region recycled or left uninitialized could
    /// hand a previous call's bytes to this one whenever a responder returns a length
    /// larger than what it wrote.
    pub(crate) fn register_with_room(
        pd: &ProtectionDomain,
        reg: &Registration,
        room: Room,
        stats: &ConnStats,
    ) -> Result<Self, RegisterError> {
        stats.inc(Counter::Registrations);
        let len = u32::try_from(reg.len()).unwrap_or(u32::MAX);
        let mr = match reg {
            // One piece (a DDP-eligible argument, e.g. NFS WRITE data): its bytes are
            // the region, without a copy; the provider sends the peer's RDMA Reads
            // from them (`rdma::ProtectionDomain::register_bytes`).
            Registration::Read { data, .. } if data.len() == 1 => {
                pd.register_bytes(data[0].clone(), Access::REMOTE_READ)?
            }
            Registration::Read { data, .. } => {
                let mut buf = BytesMut::with_capacity(len as usize);
                for d in data {
                    // COPY: a Read chunk of several pieces (a Position Zero Read chunk
                    // holding a whole Call or Reply) into one registered region.
                    buf.put_slice(d);
                }
                pd.register(buf, Access::REMOTE_READ)?
            }
            Registration::Write { len } if room != Room::default() => {
                // One allocation, split without a copy; `into_bytes` joins it again.
                let mut head = BytesMut::zeroed(room.head + *len as usize + room.tail);
                let mut chunk = head.split_off(room.head);
                let tail = chunk.split_off(*len as usize);
                let mr = pd.register(chunk, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                return Ok(ChunkRegion {
                    rkey: remote_key(&mr)?,
                    mr,
                    len: *len,
                    room: Some((head, tail)),
                });
            }
            Registration::Write { len } | Registration::Reply { len } => {
                pd.register_zeroed(*len as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?
            }
        };
        Ok(ChunkRegion {
            rkey: remote_key(&mr)?,
            mr,
            len,
            room: None,
        })
    }

    /// The one segment describing this region (tagged offsets start at 0).
    pub(crate) fn segment(&self) -> Segment {
        Segment {
            handle: self.rkey.0,
            length: self.len,
            offset: 0,
        }
    }

    /// The key the peer reaches this region by.
    pub(crate) fn rkey(&self) -> STag {
        self.rkey
    }

    /// Where the chunk starts in the bytes [`ChunkRegion::into_bytes`] returns.
    pub(crate) fn at(&self) -> usize {
        self.room.as_ref().map_or(0, |(head, _)| head.len())
    }

    /// The posted work that fences this region from the peer (verbs LOCAL_INV).
    pub(crate) fn invalidate_wr(&self, wr_id: u64) -> SendWr {
        SendWr {
            wr_id,
            op: SendOp::LocalInvalidate(self.rkey),
            sgl: Vec::new(),
        }
    }

    /// Deregisters the fenced region and returns its bytes, with the room around them
    /// if it has some (the chunk at [`ChunkRegion::at`]).
    pub(crate) fn into_bytes(self) -> Bytes {
        match self.room {
            // Without a copy, also for a region registered from the caller's bytes.
            None => self.mr.deregister_bytes(),
            Some((mut head, tail)) => {
                let chunk = self.mr.deregister();
                // Adjacent pieces of one allocation: joined without a copy (`unsplit`
                // copies only if the provider handed back other memory).
                head.unsplit(chunk);
                head.unsplit(tail);
                head.freeze()
            }
        }
    }
}

/// The remote key of a region registered with remote rights.
fn remote_key(mr: &MemoryRegion) -> Result<STag, RegisterError> {
    mr.rkey().ok_or(RegisterError::InvalidAccess(
        "a chunk region needs remote rights",
    ))
}

/// A responder's sink for one Read chunk: the RDMA Reads of its segments land in one
/// region, in order.
#[derive(Debug)]
pub(crate) struct ReadSink {
    pub(crate) mr: MemoryRegion,
    /// RDMA Reads still outstanding.
    pub(crate) outstanding: usize,
    /// Room around the sink, unregistered (see [`ReadSink::with_room`]).
    room: Option<(BytesMut, BytesMut)>,
}

impl ReadSink {
    /// Registers a sink of `len` bytes for local write only (never remotely reachable).
    pub(crate) fn new(pd: &ProtectionDomain, len: usize) -> Result<ReadSink, RegisterError> {
        Ok(ReadSink {
            mr: pd.register_zeroed(len, Access::LOCAL_WRITE)?,
            outstanding: 0,
            room: None,
        })
    }

    /// A sink of `len` bytes cut out of a buffer with `room` before and after it, so
    /// that a Call whose one Read chunk lands here can be made contiguous around the
    /// chunk's data without copying it ([`join_in_place`]; a responder's NFS WRITE).
    /// Only the sink is registered.
    pub(crate) fn with_room(
        pd: &ProtectionDomain,
        len: usize,
        room: Room,
    ) -> Result<ReadSink, RegisterError> {
        // One allocation, split without a copy; `into_whole` joins it again.
        let mut head = BytesMut::zeroed(room.head + len + room.tail);
        let mut sink = head.split_off(room.head);
        let tail = sink.split_off(len);
        Ok(ReadSink {
            mr: pd.register(sink, Access::LOCAL_WRITE)?,
            outstanding: 0,
            room: Some((head, tail)),
        })
    }

    /// The whole buffer, room included, and where the data starts in it, once every
    /// Read completed. The data is `whole[at..at + len]`.
    pub(crate) fn into_whole(self) -> (Bytes, usize) {
        let data = self.mr.deregister();
        match self.room {
            None => (data.freeze(), 0),
            Some((mut head, tail)) => {
                let at = head.len();
                // Adjacent pieces of one allocation: joined without a copy.
                head.unsplit(data);
                head.unsplit(tail);
                (head.freeze(), at)
            }
        }
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
    pub(crate) fn into_bytes(self) -> Bytes {
        let len = self.mr.len();
        let (whole, at) = self.into_whole();
        whole.slice(at..at + len)
    }
}

/// Makes `full`, a message rebuilt around one chunk's data (a requester's Reply with a
/// Write chunk, as [`ChunkRegion::into_bytes`] returned its buffer; a responder's Call with a
/// Read chunk, as [`ReadSink::into_whole`] did), contiguous in that chunk's own buffer
/// `whole` (the data at `at`): the pieces before the data are copied into the room in
/// front of it, the pieces after (XDR padding, the rest of the inline part) behind it,
/// and the message is a slice of the region. Only the bytes the peer returned as written (`full`'s chunk
/// range) come from the region; the rest of the region is never handed up.
///
/// `None` (and `full` back) when `full` is not one chunk, the pieces do not fit the
/// room, or the region is still shared: the caller copies as before.
pub(crate) fn join_in_place(
    full: Reassembled,
    whole: Bytes,
    at: usize,
) -> Result<Bytes, (Reassembled, Bytes)> {
    let [(pos, len)] = full.chunk_ranges[..] else {
        return Err((full, whole));
    };
    let (pos, len) = (pos as usize, len as usize);
    // The data piece: the one starting at `pos`, `len` bytes, a slice of `whole` at
    // `at`.
    let mut offset = 0usize;
    let mut index = None;
    for (i, p) in full.parts.iter().enumerate() {
        if offset == pos
            && p.len() == len
            && len > 0
            && whole.get(at..).map(<[u8]>::as_ptr) == Some(p.as_ptr())
        {
            index = Some(i);
            break;
        }
        offset += p.len();
    }
    let Some(i) = index else {
        return Err((full, whole));
    };
    let head = pos;
    let tail = full.len() - pos - len;
    if head > at || at + len + tail > whole.len() {
        return Err((full, whole));
    }
    let Reassembled {
        mut parts,
        chunk_ranges,
    } = full;
    let after = parts.split_off(i + 1);
    parts.truncate(i); // drops our reference to the data piece
    let mut region = match whole.try_into_mut() {
        Ok(m) => m,
        Err(whole) => {
            parts.push(whole.slice(at..at + len));
            parts.extend(after);
            return Err((
                Reassembled {
                    parts,
                    chunk_ranges,
                },
                whole,
            ));
        }
    };
    let mut o = at - head;
    for p in &parts {
        // COPY: the message's pieces before a chunk's data (the inline part up to the
        // DDP-eligible item: tens to hundreds of bytes) into the room in front of the
        // data, so the data itself is not copied.
        region[o..o + p.len()].copy_from_slice(p);
        o += p.len();
    }
    let mut o = at + len;
    for p in &after {
        // COPY: the pieces after the data (XDR padding, the rest of the inline part).
        region[o..o + p.len()].copy_from_slice(p);
        o += p.len();
    }
    Ok(region.freeze().slice(at - head..at + len + tail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma::reassembly::reassemble_reply;

    fn stats() -> std::sync::Arc<ConnStats> {
        ConnStats::new("client", None)
    }

    /// A Write chunk region of `len` bytes with `room`, the peer's `placed` bytes at
    /// the chunk's start; fenced: (whole region, where the chunk starts).
    fn placed_region(len: u32, room: Room, placed: &[u8]) -> (Bytes, usize) {
        let pd = ProtectionDomain::software(rdma::DeviceAttributes::SOFTWARE);
        let s = stats();
        let r =
            ChunkRegion::register_with_room(&pd, &Registration::Write { len }, room, &s).unwrap();
        // Only the chunk is registered: the peer reaches no byte of the room.
        assert_eq!(r.segment().offset, 0);
        assert_eq!(r.segment().length, len);
        assert_eq!(r.mr.len(), len as usize);
        assert!(r.mr.write(0, placed));
        let chunk_start = r.mr.with(|b| b.as_ptr() as usize);
        let at = r.at();
        assert_eq!(at, room.head);
        let whole = r.into_bytes();
        assert_eq!(whole.len(), room.head + len as usize + room.tail);
        // Joined without a copy: the chunk is where the peer placed it.
        assert_eq!(whole.as_ptr() as usize + at, chunk_start);
        (whole, at)
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
        let pd = ProtectionDomain::software(rdma::DeviceAttributes::SOFTWARE);
        let s = stats();
        let data = Bytes::from((0..70_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let piece = data.slice(3..65_539);
        let reg = Registration::Read {
            position: 40,
            data: vec![piece.clone()],
        };
        let r = ChunkRegion::register(&pd, &reg, &s).unwrap();
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
        let back = r.into_bytes();
        assert_eq!(back.as_ptr(), data[3..].as_ptr());
        assert!(pd.resolve(stag, 0, 1, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn a_read_chunk_of_several_pieces_is_copied_into_one_region() {
        let pd = ProtectionDomain::software(rdma::DeviceAttributes::SOFTWARE);
        let s = stats();
        let reg = Registration::Read {
            position: 0,
            data: vec![Bytes::from_static(b"head"), Bytes::from_static(b"-tail")],
        };
        let r = ChunkRegion::register(&pd, &reg, &s).unwrap();
        assert_eq!(r.segment().length, 9);
        let seen = pd.resolve(r.mr.stag(), 0, 9, Access::REMOTE_READ).unwrap();
        assert_eq!(seen.shared_range(0, 9).unwrap(), None);
        assert_eq!(r.mr.read(0, 9).unwrap(), Bytes::from_static(b"head-tail"));
        assert_eq!(r.into_bytes(), Bytes::from_static(b"head-tail"));
    }

    #[test]
    fn the_reply_is_joined_around_the_data_in_its_own_region() {
        let data: Vec<u8> = (0..5001u32).map(|i| (i * 7) as u8).collect();
        let room = Room {
            head: 1024,
            tail: 64,
        };
        let (whole, at) = placed_region(8192, room, &data);
        let region_start = whole.as_ptr() as usize;
        let (base, off) = reduced(132, 5001, b"tail");
        let full = reassemble_reply(base, &[off], vec![whole.slice(at..at + 5001)]).unwrap();
        let expected = full.to_bytes();
        let reply = join_in_place(full, whole, at)
            .map_err(|_| "not joined")
            .unwrap();
        assert_eq!(reply, expected);
        // No copy of the data: the Reply is a slice of the region, the data in place.
        assert_eq!(reply.as_ptr() as usize, region_start + at - 132);
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
        let full = reassemble_reply(base, &[off], vec![whole.slice(at..at + 1000)]).unwrap();
        let reply = join_in_place(full, whole, at)
            .map_err(|_| "not joined")
            .unwrap();
        assert_eq!(reply.len(), 40 + 1000);
        assert!(reply[40..].iter().all(|&b| b == 0xab));
    }

    /// The responder returned 2000 but placed only 500: the other 1500 bytes are the
    /// region's zero fill, never anything from before this Call.
    #[test]
    fn bytes_the_peer_did_not_write_are_zero() {
        let (whole, at) = placed_region(
            4096,
            Room {
                head: 256,
                tail: 16,
            },
            &[0x5a; 500],
        );
        let (base, off) = reduced(40, 2000, b"");
        let full = reassemble_reply(base, &[off], vec![whole.slice(at..at + 2000)]).unwrap();
        let reply = join_in_place(full, whole, at)
            .map_err(|_| "not joined")
            .unwrap();
        assert_eq!(reply.len(), 40 + 2000);
        assert!(reply[40..540].iter().all(|&b| b == 0x5a));
        assert!(reply[540..].iter().all(|&b| b == 0));
    }

    #[test]
    fn without_room_or_while_shared_the_caller_copies() {
        // No room in front.
        let (whole, at) = placed_region(100, Room::default(), &[1; 100]);
        let (base, off) = reduced(40, 100, b"");
        let full = reassemble_reply(base.clone(), &[off], vec![whole.slice(at..at + 100)]).unwrap();
        let expected = full.to_bytes();
        let (full, _) = join_in_place(full, whole, at).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        // Tail longer than the room behind.
        let (whole, at) = placed_region(100, Room { head: 64, tail: 2 }, &[1; 100]);
        let (base2, off2) = reduced(40, 100, b"more than two");
        let full = reassemble_reply(base2, &[off2], vec![whole.slice(at..at + 100)]).unwrap();
        let expected = full.to_bytes();
        let (full, _) = join_in_place(full, whole, at).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        // Someone else still holds the region: it is not written to.
        let (whole, at) = placed_region(100, Room { head: 64, tail: 8 }, &[1; 100]);
        let other = whole.clone();
        let full = reassemble_reply(base, &[off], vec![whole.slice(at..at + 100)]).unwrap();
        let expected = full.to_bytes();
        let (full, _) = join_in_place(full, whole, at).unwrap_err();
        assert_eq!(full.to_bytes(), expected);
        assert!(other[..at].iter().all(|&b| b == 0), "room untouched");
    }
}
