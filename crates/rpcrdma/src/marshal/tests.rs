//! Marshaling tests, byte-exact against what Linux sent for the same operation.

use super::*;
use crate::testutil::{hex, vectors::*, words};
use xdr::Encoder;

fn limits(send: u32, recv: u32, segs: u32) -> CallLimits {
    CallLimits {
        send_threshold: send,
        recv_threshold: recv,
        max_segments_per_registration: segs,
    }
}

fn no_reply() -> ReplySizing {
    ReplySizing {
        max_reply: 100,
        ddp_results: vec![],
    }
}

/// An RPC message of `inline_words` words starting with `xid`, then optionally one
/// DDP-eligible item, then `tail` words.
fn stream(xid: u32, inline_words: usize, item: Option<Bytes>, tail: usize) -> XdrStream {
    let mut e = Encoder::new();
    e.u32(xid);
    for i in 1..inline_words {
        e.u32(i as u32);
    }
    if let Some(d) = item {
        e.ddp_opaque(d);
    }
    for i in 0..tail {
        e.u32(0xee00 + i as u32);
    }
    e.finish()
}

fn parse_chunks(v: &str) -> ChunkLists {
    Header::parse(&hex(v), &Default::default())
        .unwrap()
        .header
        .chunks()
        .unwrap()
        .clone()
}

#[test]
fn s4_5_1_short_call_is_header_plus_payload_like_linux_null() {
    let call = XdrStream::inline_only(hex(NULL_CALL_RPC));
    let plan = plan_call(
        Xid(0x02c7_04b8),
        Version::ONE,
        128,
        &call,
        &no_reply(),
        limits(4096, 4096, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Short);
    assert!(plan.registrations.is_empty());
    let out = plan.finish(vec![]).unwrap();
    let expected = [hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)].concat();
    assert_eq!(out.to_bytes(), Bytes::from(expected));
    assert_eq!(out.send.len(), 2, "header and payload gathered, not copied");
}

#[test]
fn s4_4_5_chunked_call_read_chunk_position_like_linux_write() {
    // NFSv3 WRITE of 128 KiB: 112 bytes of call up to and including the count word,
    // then the data in a Read chunk at Position 112.
    let data = Bytes::from(vec![0xab; 131_072]);
    let call = stream(0x10c7_04b8, 27, Some(data.clone()), 0);
    assert_eq!(call.inline.len(), 112);
    let plan = plan_call(
        Xid(0x10c7_04b8),
        Version::ONE,
        128,
        &call,
        &no_reply(),
        limits(4096, 4096, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Chunked);
    assert_eq!(
        plan.registrations,
        vec![Registration::Read {
            position: 112,
            data: vec![data]
        }]
    );
    let out = plan
        .finish(vec![vec![Segment::new(
            0xa886_bd01,
            131_072,
            0x10c7_04b8_c4db_5000,
        )]])
        .unwrap();
    assert_eq!(out.send[0], hex(WRITE_CALL_READ_LIST));
    assert_eq!(out.send_len, 52 + 112);
}

#[test]
fn s4_4_5_1_read_chunk_round_up_is_removed_from_the_payload() {
    // An odd-length item: its padding leaves the Payload stream with it.
    let call = stream(7, 3, Some(Bytes::from(vec![1u8; 5001])), 2);
    let plan = plan_call(
        Xid(7),
        Version::ONE,
        8,
        &call,
        &no_reply(),
        limits(1024, 1024, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Chunked);
    let Registration::Read { position, data } = &plan.registrations[0] else {
        panic!()
    };
    assert_eq!(*position, 16);
    assert_eq!(data[0].len(), 5001, "no padding in the Read chunk");
    let out = plan.finish(vec![vec![Segment::new(1, 5001, 0)]]).unwrap();
    // Reduced payload: xid, 1, 2, count 5001, tail 2 words: 24 bytes, no pad.
    assert_eq!(out.send_len, out.send[0].len() + 24);
}

#[test]
fn s8_2_write_chunk_for_ddp_result_like_linux_read() {
    // NFSv3 READ of 4096: the reply may exceed 4096, its data is DDP-eligible.
    let call = stream(0x0cc7_04b8, 26, None, 0);
    let sizing = ReplySizing {
        max_reply: 4096 + 120,
        ddp_results: vec![4096],
    };
    let plan = plan_call(
        Xid(0x0cc7_04b8),
        Version::ONE,
        128,
        &call,
        &sizing,
        limits(4096, 4096, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Short);
    assert_eq!(plan.registrations, vec![Registration::Write { len: 4096 }]);
    let out = plan
        .finish(vec![vec![Segment::new(
            0x8cd1_cf01,
            4096,
            0x0cc7_04b8_c4d3_4000,
        )]])
        .unwrap();
    assert_eq!(out.send[0], hex(READ_CALL_WRITE_LIST));
}

#[test]
fn s5_3_3_reply_chunk_when_reply_may_exceed_our_threshold_like_linux_getacl() {
    let call = stream(0x0ec7_04b8, 20, None, 0);
    let sizing = ReplySizing {
        max_reply: 0x100 + 0x7000 + 4,
        ddp_results: vec![],
    };
    let plan = plan_call(
        Xid(0x0ec7_04b8),
        Version::ONE,
        128,
        &call,
        &sizing,
        limits(4096, 4096, 3),
    )
    .unwrap();
    assert_eq!(
        plan.registrations,
        vec![Registration::Reply {
            len: 0x100 + 0x7000 + 4
        }]
    );
    let out = plan
        .finish(vec![vec![
            Segment::new(0x6ecf_0802, 0x100, 0x0ec7_04b8_c9f5_d000),
            Segment::new(0x96de_0802, 0x7000, 0x0ec7_04b8_c548_c000),
            Segment::new(0x04a5_ee01, 4, 0x0ec7_04b8_c9f5_d100),
        ]])
        .unwrap();
    assert_eq!(out.send[0], hex(GETACL_CALL_REPLY_CHUNK));
}

#[test]
fn s4_5_3_long_call_is_nomsg_with_position_zero_read_chunk() {
    let call = stream(9, 1000, None, 0);
    let plan = plan_call(
        Xid(9),
        Version::ONE,
        4,
        &call,
        &no_reply(),
        limits(1024, 1024, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Long);
    let Registration::Read { position, data } = &plan.registrations[0] else {
        panic!()
    };
    assert_eq!(*position, 0);
    assert_eq!(data.iter().map(Bytes::len).sum::<usize>(), 4000);
    let out = plan
        .finish(vec![vec![Segment::new(0x55, 4000, 0x1000)]])
        .unwrap();
    assert_eq!(
        out.to_bytes(),
        words(&[9, 1, 4, 1, 1, 0, 0x55, 4000, 0, 0x1000, 0, 0, 0])
    );
    assert_eq!(out.send.len(), 1, "no payload in the Send");
}

#[test]
fn s4_5_3_long_call_when_reduction_is_not_enough() {
    // A DDP item, but the inline rest alone is over the threshold.
    let call = stream(9, 400, Some(Bytes::from(vec![3u8; 64])), 0);
    let plan = plan_call(
        Xid(9),
        Version::ONE,
        4,
        &call,
        &no_reply(),
        limits(1024, 1024, 1),
    )
    .unwrap();
    assert_eq!(plan.shape, Shape::Long);
}

#[test]
fn finish_refuses_segments_that_do_not_match() {
    let call = stream(9, 1000, None, 0);
    let mk = || {
        plan_call(
            Xid(9),
            Version::ONE,
            4,
            &call,
            &no_reply(),
            limits(1024, 1024, 1),
        )
        .unwrap()
    };
    assert_eq!(
        mk().finish(vec![]).unwrap_err(),
        MarshalError::RegistrationMismatch
    );
    assert_eq!(
        mk().finish(vec![vec![Segment::new(1, 3999, 0)]])
            .unwrap_err(),
        MarshalError::RegistrationMismatch
    );
    assert_eq!(
        mk().finish(vec![vec![
            Segment::new(1, 2000, 0),
            Segment::new(2, 2000, 0)
        ]])
        .unwrap_err(),
        MarshalError::RegistrationMismatch,
        "more segments than the room reserved"
    );
}

#[test]
fn header_too_large_for_threshold_is_refused() {
    let call = stream(9, 1000, None, 0);
    assert_eq!(
        plan_call(
            Xid(9),
            Version::ONE,
            4,
            &call,
            &no_reply(),
            limits(40, 1024, 1)
        )
        .unwrap_err(),
        MarshalError::HeaderTooLarge {
            len: 52,
            threshold: 40
        }
    );
}

#[test]
fn s4_4_6_reply_fills_write_chunk_and_rewrites_length_like_knfsd() {
    let call_chunks = parse_chunks(READ_CALL_WRITE_LIST);
    let data = Bytes::from_static(b"hello from guest knfsd\n");
    let reply = stream(0x0cc7_04b8, 20, Some(data.clone()), 0);
    let out = marshal_reply(
        Xid(0x0cc7_04b8),
        Version::ONE,
        64,
        &reply,
        &call_chunks,
        4096,
        true,
    )
    .unwrap();
    assert_eq!(out.send.send[0], hex(READ_REPLY_WRITE_LIST));
    assert_eq!(
        out.writes,
        vec![RdmaWrite {
            handle: 0x8cd1_cf01,
            offset: 0x0cc7_04b8_c4d3_4000,
            data: vec![data]
        }]
    );
    assert_eq!(out.writes[0].len(), 23, "§4.4.6.1: no pad bytes written");
    // Inline: the reduced stream, count word kept, no data, no pad.
    assert_eq!(out.send.send_len, 52 + 84);
    assert_eq!(out.send.shape, Shape::Chunked);
    assert_eq!(out.invalidate, Some(0x8cd1_cf01), "one handle, R flag set");
}

#[test]
fn s4_4_6_unfilled_segment_gets_length_zero_like_knfsd_pad_segment() {
    let call_chunks = parse_chunks(READ_CALL_WRITE_LIST_PAD);
    let reply = stream(0x3958_cd2c, 20, Some(Bytes::from(vec![7u8; 4093])), 0);
    let out = marshal_reply(
        Xid(0x3958_cd2c),
        Version::ONE,
        64,
        &reply,
        &call_chunks,
        4096,
        false,
    )
    .unwrap();
    assert_eq!(out.send.send[0], hex(READ_REPLY_WRITE_LIST_PAD));
    assert_eq!(out.writes.len(), 1);
    assert_eq!(out.invalidate, None, "two handles, or no R flag");
}

#[test]
fn s4_5_3_long_reply_uses_reply_chunk_like_knfsd_readdirplus() {
    let call_chunks = parse_chunks(READDIRPLUS_CALL_REPLY_CHUNK);
    let reply = stream(0x3658_cd2c, 10680 / 4, None, 0);
    let out = marshal_reply(
        Xid(0x3658_cd2c),
        Version::ONE,
        64,
        &reply,
        &call_chunks,
        4096,
        false,
    )
    .unwrap();
    assert_eq!(out.send.to_bytes(), hex(READDIRPLUS_REPLY_NOMSG));
    assert_eq!(out.send.shape, Shape::Long);
    let lens: Vec<u64> = out.writes.iter().map(RdmaWrite::len).collect();
    assert_eq!(lens, vec![124, 10556]);
    assert_eq!(out.writes[1].offset, 0x3658_cd2c_8272_0000);
}

#[test]
fn s5_3_3_short_reply_even_when_a_reply_chunk_was_provided() {
    // §5.3.3: "the responder MAY return it as a Short message". The Reply chunk is
    // then not echoed (Linux's client refuses a non-empty Reply chunk in RDMA_MSG).
    let call_chunks = parse_chunks(EXCHANGE_ID_CALL_REPLY_CHUNK);
    let reply = stream(0xe4d8_5320, 25, None, 0);
    let out = marshal_reply(
        Xid(0xe4d8_5320),
        Version::ONE,
        64,
        &reply,
        &call_chunks,
        4096,
        true,
    )
    .unwrap();
    assert_eq!(out.send.send[0], words(&[0xe4d8_5320, 1, 64, 0, 0, 0, 0]));
    assert!(out.writes.is_empty());
    assert_eq!(out.invalidate, Some(0x1387_5d01));
}

#[test]
fn s4_4_6_2_unused_write_chunk_is_returned_with_zero_lengths() {
    let call_chunks = parse_chunks(READ_CALL_WRITE_LIST);
    let reply = stream(0x0cc7_04b8, 6, None, 0); // an error arm: no data
    let out = marshal_reply(
        Xid(0x0cc7_04b8),
        Version::ONE,
        64,
        &reply,
        &call_chunks,
        4096,
        false,
    )
    .unwrap();
    assert_eq!(
        out.send.send[0],
        words(&[
            0x0cc7_04b8,
            1,
            64,
            0,
            0,
            1,
            1,
            0x8cd1_cf01,
            0,
            0x0cc7_04b8,
            0xc4d3_4000,
            0,
            0
        ])
    );
    assert!(out.writes.is_empty());
}

#[test]
fn items_beyond_the_write_list_stay_inline() {
    let mut e = Encoder::new();
    e.u32(5)
        .ddp_opaque(Bytes::from_static(b"abc"))
        .ddp_opaque(Bytes::from_static(b"defgh"));
    let reply = e.finish();
    let call_chunks = ChunkLists {
        writes: vec![WriteChunk::new(vec![Segment::new(1, 8, 0)])],
        ..ChunkLists::empty()
    };
    let out = marshal_reply(Xid(5), Version::ONE, 1, &reply, &call_chunks, 1024, false).unwrap();
    let hdr_len = out.send.send[0].len();
    let payload = out.send.to_bytes().slice(hdr_len..);
    assert_eq!(
        payload,
        Bytes::from_static(b"\0\0\0\x05\0\0\0\x03\0\0\0\x05defgh\0\0\0")
    );
    assert_eq!(out.writes[0].data, vec![Bytes::from_static(b"abc")]);
}

#[test]
fn s5_5_3_reply_that_cannot_be_sent_is_detected_before_writing() {
    let reply = stream(5, 2000, None, 0);
    assert_eq!(
        marshal_reply(
            Xid(5),
            Version::ONE,
            1,
            &reply,
            &ChunkLists::empty(),
            1024,
            false
        )
        .unwrap_err(),
        MarshalError::NoReplyChunk { len: 8000 }
    );
    let small = ChunkLists {
        reply: Some(WriteChunk::new(vec![Segment::new(1, 4000, 0)])),
        ..ChunkLists::empty()
    };
    assert_eq!(
        marshal_reply(Xid(5), Version::ONE, 1, &reply, &small, 1024, false).unwrap_err(),
        MarshalError::ReplyChunkTooSmall {
            len: 8000,
            room: 4000
        }
    );
    let reply = stream(5, 2, Some(Bytes::from(vec![0u8; 100])), 0);
    let tiny = ChunkLists {
        writes: vec![WriteChunk::new(vec![Segment::new(1, 99, 0)])],
        ..ChunkLists::empty()
    };
    assert_eq!(
        marshal_reply(Xid(5), Version::ONE, 1, &reply, &tiny, 1024, false).unwrap_err(),
        MarshalError::WriteChunkTooSmall {
            index: 0,
            len: 100,
            room: 99
        }
    );
}

#[test]
fn s7_3_4_backward_messages_are_rdma_msg_with_empty_lists() {
    let call = stream(0x77, 10, None, 0);
    let out = marshal_backward(Xid(0x77), Version::ONE, 2, &call, 1024).unwrap();
    assert_eq!(out.send[0], words(&[0x77, 1, 2, 0, 0, 0, 0]));
    let big = stream(0x77, 300, None, 0);
    assert!(matches!(
        marshal_backward(Xid(0x77), Version::ONE, 2, &big, 1024),
        Err(MarshalError::HeaderTooLarge { .. })
    ));
}
