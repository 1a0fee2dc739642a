//! Reassembly rules, and the marshal -> reassemble property tests.

use std::collections::HashMap;

use super::*;
use crate::chunks::{ChunkLists, Segment};
use crate::marshal::{marshal_reply, plan_call, CallLimits, Registration};
use crate::testutil::words;
use crate::ulb::ReplySizing;
use crate::validate::{receive, Policy, Received};
use crate::wire::{Version, Xid};
use proptest::prelude::*;
use xdr::{Encoder, XdrStream};

fn rc(position: u32, lens: &[u32]) -> ReadChunk {
    ReadChunk {
        position,
        segments: lens
            .iter()
            .enumerate()
            .map(|(i, &l)| Segment::new(i as u32, l, 0))
            .collect(),
    }
}

fn opts() -> ReassemblyOptions {
    ReassemblyOptions::default()
}

#[test]
fn s4_4_5_read_chunk_inserted_at_position_with_round_up_supplied() {
    // xid, count=5 | chunk "hello" | tail word
    let inline = words(&[1, 5, 0xfeed]);
    let r = reassemble_call(
        inline,
        &[rc(8, &[5])],
        vec![Bytes::from_static(b"hello")],
        &opts(),
    )
    .unwrap();
    assert_eq!(
        r.to_bytes(),
        Bytes::from_static(b"\0\0\0\x01\0\0\0\x05hello\0\0\0\0\0\xfe\xed")
    );
    assert_eq!(r.chunk_ranges, vec![(8, 5)]);
}

#[test]
fn s4_4_5_1_read_chunk_that_includes_round_up_is_accepted() {
    let inline = words(&[1, 5]);
    let r = reassemble_call(
        inline,
        &[rc(8, &[8])],
        vec![Bytes::from_static(b"hello\0\0\0")],
        &opts(),
    )
    .unwrap();
    assert_eq!(r.len(), 16);
}

#[test]
fn s4_4_5_segments_of_a_chunk_are_concatenated() {
    let inline = words(&[1, 6]);
    let r = reassemble_call(
        inline,
        &[rc(8, &[2, 4])],
        vec![Bytes::from_static(b"abcdef")],
        &opts(),
    )
    .unwrap();
    assert_eq!(
        r.to_bytes(),
        Bytes::from_static(b"\0\0\0\x01\0\0\0\x06abcdef\0\0")
    );
}

#[test]
fn s4_5_3_position_zero_chunk_is_the_whole_call() {
    let call = words(&[1, 2, 3]);
    let r = reassemble_call(Bytes::new(), &[rc(0, &[12])], vec![call.clone()], &opts()).unwrap();
    assert_eq!(r.to_bytes(), call);
}

#[test]
fn s4_5_3_position_zero_chunk_with_a_further_read_chunk() {
    // The Long Call (P0) is itself reduced: its count word 3 at offset 4, data at 8.
    let p0 = words(&[1, 3, 0xfeed]);
    let r = reassemble_call(
        Bytes::new(),
        &[rc(8, &[3]), rc(0, &[12])],
        vec![Bytes::from_static(b"abc"), p0],
        &opts(),
    )
    .unwrap();
    assert_eq!(
        r.to_bytes(),
        Bytes::from_static(b"\0\0\0\x01\0\0\0\x03abc\0\0\0\xfe\xed")
    );
}

#[test]
fn s4_4_4_1_count_that_differs_from_chunk_length_is_garbage_args() {
    let inline = words(&[1, 6]);
    assert_eq!(
        reassemble_call(
            inline,
            &[rc(8, &[5])],
            vec![Bytes::from_static(b"hello")],
            &opts()
        ),
        Err(ArgsError::ChunkLengthMismatch {
            position: 8,
            in_stream: 6,
            chunk: 5
        })
    );
}

#[test]
fn position_beyond_the_stream_is_garbage_args() {
    let inline = words(&[1, 5]);
    assert_eq!(
        reassemble_call(
            inline,
            &[rc(12, &[5])],
            vec![Bytes::from_static(b"hello")],
            &opts()
        ),
        Err(ArgsError::BadPosition(12))
    );
}

#[test]
fn read_data_of_the_wrong_length_is_refused() {
    let inline = words(&[1, 5]);
    assert_eq!(
        reassemble_call(
            inline,
            &[rc(8, &[5])],
            vec![Bytes::from_static(b"hell")],
            &opts()
        ),
        Err(ArgsError::ReadDataLength {
            expected: 5,
            got: 4
        })
    );
}

#[test]
fn reassembled_size_is_bounded() {
    let inline = words(&[1, 8]);
    let o = ReassemblyOptions {
        max_len: 12,
        ..opts()
    };
    assert_eq!(
        reassemble_call(inline, &[rc(8, &[8])], vec![Bytes::from(vec![0u8; 8])], &o),
        Err(ArgsError::TooLarge(16))
    );
}

#[test]
fn s4_4_6_reply_write_list_must_keep_segments() {
    let provided = vec![WriteChunk::new(vec![
        Segment::new(1, 10, 100),
        Segment::new(2, 4, 200),
    ])];
    let ok = vec![WriteChunk::new(vec![
        Segment::new(1, 10, 100),
        Segment::new(2, 1, 200),
    ])];
    assert_eq!(written_lengths(&provided, &ok), Ok(vec![11]));
    let fewer = vec![WriteChunk::new(vec![Segment::new(1, 10, 100)])];
    assert_eq!(
        written_lengths(&provided, &fewer),
        Err(HeaderError::WriteListMismatch)
    );
    let moved = vec![WriteChunk::new(vec![
        Segment::new(1, 10, 101),
        Segment::new(2, 0, 200),
    ])];
    assert_eq!(
        written_lengths(&provided, &moved),
        Err(HeaderError::WriteListMismatch)
    );
    let grown = vec![WriteChunk::new(vec![
        Segment::new(1, 11, 100),
        Segment::new(2, 0, 200),
    ])];
    assert_eq!(
        written_lengths(&provided, &grown),
        Err(HeaderError::ChunkOverrun)
    );
    assert_eq!(
        written_lengths(&provided, &[provided[0].clone(), provided[0].clone()]),
        Err(HeaderError::WriteListMismatch)
    );
}

#[test]
fn requester_rebuilds_reply_from_write_chunk_lengths() {
    let reduced = words(&[1, 5, 0xfeed]);
    let r = reassemble_reply(reduced.clone(), &[8], vec![Bytes::from_static(b"hello")]).unwrap();
    assert_eq!(
        r.to_bytes(),
        Bytes::from_static(b"\0\0\0\x01\0\0\0\x05hello\0\0\0\0\0\xfe\xed")
    );
    assert_eq!(
        reassemble_reply(reduced.clone(), &[8], vec![Bytes::from_static(b"hell")]),
        Err(ReplyError::WriteChunkLengthMismatch {
            index: 0,
            in_stream: 5,
            chunk: 4
        })
    );
    assert_eq!(
        reassemble_reply(reduced, &[8], vec![]),
        Err(ReplyError::MissingWriteChunk(0))
    );
}

// ---- property tests: marshal, move the chunks, reassemble ----

/// Simulated registered memory on both ends: handle -> bytes.
#[derive(Default)]
struct Memory {
    regions: HashMap<u32, Vec<u8>>,
    next: u32,
}

impl Memory {
    /// Registers `data` as `n` segments (the last ones may be short).
    fn register(&mut self, data: &[u8], n: usize) -> Vec<Segment> {
        let n = n.max(1);
        let per = data.len().div_ceil(n).max(1);
        let mut segs = Vec::new();
        let mut at = 0;
        for _ in 0..n {
            let end = (at + per).min(data.len());
            self.next += 1;
            let h = 0x1000 + self.next;
            self.regions.insert(h, data[at..end].to_vec());
            segs.push(Segment::new(
                h,
                (end - at) as u32,
                0x8000_0000_0000_0000 | u64::from(h) << 16,
            ));
            at = end;
        }
        segs
    }

    fn read(&self, seg: &Segment) -> Vec<u8> {
        self.regions[&seg.handle][..seg.length as usize].to_vec()
    }

    fn write(&mut self, handle: u32, offset: u64, data: &[u8]) {
        let base = 0x8000_0000_0000_0000 | u64::from(handle) << 16;
        let at = (offset - base) as usize;
        let r = self.regions.get_mut(&handle).unwrap();
        r[at..at + data.len()].copy_from_slice(data);
    }
}

/// Runs of inline words, each followed by an optional DDP-eligible item.
type Parts = Vec<(Vec<u32>, Option<Vec<u8>>)>;

/// A random RPC-like stream: the XID first, then runs of words and DDP items.
fn arb_stream() -> impl Strategy<Value = (u32, Parts)> {
    (
        any::<u32>(),
        prop::collection::vec(
            (
                prop::collection::vec(any::<u32>(), 0..150),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..3000)),
            ),
            0..5,
        ),
    )
}

fn build(xid: u32, parts: &Parts) -> XdrStream {
    let mut e = Encoder::new();
    e.u32(xid);
    for (ws, item) in parts {
        for w in ws {
            e.u32(*w);
        }
        if let Some(d) = item {
            e.ddp_opaque(Bytes::from(d.clone()));
        }
    }
    e.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Call direction: plan_call + registration, then the responder receives the Send,
    /// RDMA Reads the chunks and reassembles: the original stream comes back, and the
    /// Send never exceeds the threshold.
    #[test]
    fn call_marshal_then_reassemble_is_identity(
        (xid, parts) in arb_stream(),
        send_threshold in 320u32..6000,
        recv_threshold in 1024u32..9000,
        segs in 1u32..4,
        max_reply in 0u32..20_000,
        ddp_results in prop::collection::vec(0u32..8000, 0..3),
    ) {
        let stream = build(xid, &parts);
        let limits = CallLimits {
            send_threshold,
            recv_threshold,
            max_segments_per_registration: segs,
        };
        let sizing = ReplySizing { max_reply, ddp_results };
        // Never fails: a Long Call's header, with room for up to 2 Write chunks and a
        // Reply chunk of 3 segments each, always fits 320 bytes (it needs at most 264).
        let plan = plan_call(Xid(xid), Version::ONE, 32, &stream, &sizing, limits).unwrap();
        let mut requester_mem = Memory::default();
        let regs: Vec<Vec<Segment>> = plan
            .registrations
            .iter()
            .map(|r| match r {
                Registration::Read { data, .. } => {
                    let flat: Vec<u8> = data.iter().flat_map(|b| b.iter().copied()).collect();
                    requester_mem.register(&flat, segs as usize)
                }
                Registration::Write { len } | Registration::Reply { len } => {
                    requester_mem.register(&vec![0; *len as usize], segs as usize)
                }
            })
            .collect();
        let n_writes = plan
            .registrations
            .iter()
            .filter(|r| matches!(r, Registration::Write { .. }))
            .count();
        let has_reply = plan
            .registrations
            .iter()
            .any(|r| matches!(r, Registration::Reply { .. }));
        let out = plan.finish(regs).unwrap();
        prop_assert!(out.send_len <= send_threshold as usize);
        // §5.3.3: a Reply chunk whenever the reply may not fit our threshold unreduced.
        if !has_reply {
            let ddp: u64 = sizing.ddp_results[..n_writes]
                .iter()
                .map(|&l| xdr::padded_len(l as usize) as u64)
                .sum();
            let reduced = u64::from(max_reply).saturating_sub(ddp);
            let reply_header = 28 + n_writes as u64 * (8 + 16 * u64::from(segs));
            prop_assert!(reduced + reply_header <= u64::from(recv_threshold));
        }

        let received = receive(&out.to_bytes(), &Policy::default()).unwrap();
        let (inline, chunks) = match received {
            Received::Msg { payload, chunks, .. } => (payload, chunks),
            Received::NoMsg { chunks, .. } => (Bytes::new(), chunks),
            other => panic!("{other:?}"),
        };
        let data: Vec<Bytes> = chunks
            .reads
            .iter()
            .map(|c| Bytes::from(c.segments.iter().flat_map(|s| requester_mem.read(s)).collect::<Vec<u8>>()))
            .collect();
        prop_assert_eq!(chunks.writes.len(), n_writes);
        prop_assert_eq!(chunks.reply.is_some(), has_reply);
        let r = reassemble_call(inline, &chunks.reads, data, &ReassemblyOptions::default()).unwrap();
        prop_assert_eq!(r.to_bytes(), stream.to_bytes());
    }

    /// Reply direction: the requester provides Write chunks for the first `k` items
    /// (and maybe a Reply chunk); marshal_reply; the RDMA Writes land in the
    /// requester's memory; the requester reassembles from the returned lengths.
    #[test]
    fn reply_marshal_then_reassemble_is_identity(
        (xid, parts) in arb_stream(),
        send_threshold in 320u32..6000,
        k in 0usize..5,
        segs in 1usize..4,
        slack in 0u32..64,
        with_reply_chunk in any::<bool>(),
    ) {
        let stream = build(xid, &parts);
        let k = k.min(stream.ddp.len());
        let mut mem = Memory::default();
        let writes: Vec<WriteChunk> = stream.ddp[..k]
            .iter()
            .map(|it| WriteChunk::new(mem.register(&vec![0u8; it.data.len() + slack as usize], segs)))
            .collect();
        let reply = with_reply_chunk
            .then(|| WriteChunk::new(mem.register(&vec![0u8; stream.xdr_len() + 8], segs)));
        let provided = ChunkLists { reads: vec![], writes: writes.clone(), reply: reply.clone() };
        let out = match marshal_reply(Xid(xid), Version::ONE, 8, &stream, &provided, send_threshold, false) {
            Ok(o) => o,
            Err(e) => {
                // Only allowed when the reply cannot fit inline and no chunk helps.
                prop_assert!(!with_reply_chunk, "{e:?}");
                return Ok(());
            }
        };
        prop_assert!(out.send.send_len <= send_threshold as usize);
        for w in &out.writes {
            let flat: Vec<u8> = w.data.iter().flat_map(|b| b.iter().copied()).collect();
            mem.write(w.handle, w.offset, &flat);
        }
        let received = receive(&out.send.to_bytes(), &Policy::default()).unwrap();
        let (reduced, chunks) = match received {
            Received::Msg { payload, chunks, .. } => (payload, chunks),
            Received::NoMsg { chunks, .. } => {
                let rc = chunks.reply.clone().unwrap();
                let len = reply_chunk_length(reply.as_ref().unwrap(), &rc).unwrap();
                let data: Vec<u8> = rc.segments.iter().flat_map(|s| mem.read(s)).collect();
                prop_assert_eq!(data.len() as u64, len);
                (Bytes::from(data), chunks)
            }
            other => panic!("{other:?}"),
        };
        let lens = written_lengths(&writes, &chunks.writes).unwrap();
        let written: Vec<Bytes> = chunks
            .writes
            .iter()
            .map(|c| Bytes::from(c.segments.iter().flat_map(|s| mem.read(s)).collect::<Vec<u8>>()))
            .collect();
        for (w, l) in written.iter().zip(&lens) {
            prop_assert_eq!(w.len() as u64, *l);
        }
        let offsets: Vec<usize> = stream.ddp[..k].iter().map(|it| it.inline_offset).collect();
        let r = reassemble_reply(reduced, &offsets, written).unwrap();
        prop_assert_eq!(r.to_bytes(), stream.to_bytes());
    }
}
