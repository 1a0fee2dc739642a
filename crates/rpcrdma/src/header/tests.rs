//! Header codec tests: the spec's §5.7 examples and headers captured from Linux.

use super::*;
use crate::chunks::{ReadChunk, Segment, WriteChunk};
use crate::testutil::{hex, vectors::*, words};

fn parse(b: &Bytes) -> Result<Parsed, HeaderError> {
    Header::parse(b, &Limits::default())
}

/// Parse, check the header took all of `b`, re-emit, compare bytes.
fn roundtrip(b: &Bytes) -> Header {
    let p = parse(b).expect("parses");
    assert_eq!(p.header_len, b.len(), "header length");
    assert_eq!(p.header.encoded_len(), b.len(), "encoded_len");
    assert_eq!(p.header.to_bytes(), *b, "re-emitted bytes");
    p.header
}

const H: u32 = 0x1111_0001;
const L: u32 = 0x200;
const OO: u64 = 0x0102_0304_0506_0708;

fn seg(n: u32) -> Segment {
    Segment::new(H + n, L + n, OO + u64::from(n))
}

fn hloo(n: u32) -> Vec<u32> {
    let s = seg(n);
    vec![s.handle, s.length, (s.offset >> 32) as u32, s.offset as u32]
}

fn msg_with(chunks: ChunkLists) -> Header {
    Header {
        xid: Xid(7),
        version: Version::ONE,
        credits: 32,
        body: Body::NoMsg(chunks),
    }
}

fn prefix_words() -> Vec<u32> {
    vec![7, 1, 32, 1]
}

#[test]
fn s5_7_no_chunks_is_three_zero_words() {
    // §5.7: "after the four fixed fields in the RPC-over-RDMA header, there are simply
    // three 32-bit fields that contain zero."
    let h = Header {
        xid: Xid(7),
        version: Version::ONE,
        credits: 32,
        body: Body::Msg(ChunkLists::empty()),
    };
    assert_eq!(h.to_bytes(), words(&[7, 1, 32, 0, 0, 0, 0]));
    assert_eq!(roundtrip(&h.to_bytes()), h);
}

#[test]
fn s5_7_read_list_example_1_phloo_1_phloo_0() {
    // §5.7: "1 PHLOO 1 PHLOO 1 PHLOO 0" (here two segments of one chunk at P=8).
    let chunks = ChunkLists {
        reads: vec![ReadChunk {
            position: 8,
            segments: vec![seg(0), seg(1)],
        }],
        ..ChunkLists::empty()
    };
    let mut w = prefix_words();
    w.extend([1, 8]);
    w.extend(hloo(0));
    w.extend([1, 8]);
    w.extend(hloo(1));
    w.extend([0, 0, 0]); // end of read list, empty write list, no reply chunk
    let h = msg_with(chunks);
    assert_eq!(h.to_bytes(), words(&w));
    assert_eq!(roundtrip(&words(&w)), h);
}

#[test]
fn s5_7_write_list_example_1_3_hloo_hloo_hloo_1_2_hloo_hloo_0() {
    // §5.7: "1 3 HLOO HLOO HLOO 1 2 HLOO HLOO 0"
    let chunks = ChunkLists {
        writes: vec![
            WriteChunk::new(vec![seg(0), seg(1), seg(2)]),
            WriteChunk::new(vec![seg(3), seg(4)]),
        ],
        ..ChunkLists::empty()
    };
    let mut w = prefix_words();
    w.push(0); // empty read list
    w.extend([1, 3]);
    (0..3).for_each(|n| w.extend(hloo(n)));
    w.extend([1, 2]);
    (3..5).for_each(|n| w.extend(hloo(n)));
    w.push(0); // end of write list
    w.push(0); // no reply chunk
    let h = msg_with(chunks);
    assert_eq!(h.to_bytes(), words(&w));
    assert_eq!(roundtrip(&words(&w)), h);
}

#[test]
fn s5_7_reply_chunk_example_1_2_hloo_hloo() {
    // §5.7: "a Reply chunk with 2 segments would look like 1 2 HLOO HLOO"
    let chunks = ChunkLists {
        reply: Some(WriteChunk::new(vec![seg(0), seg(1)])),
        ..ChunkLists::empty()
    };
    let mut w = prefix_words();
    w.extend([0, 0, 1, 2]);
    w.extend(hloo(0));
    w.extend(hloo(1));
    let h = msg_with(chunks);
    assert_eq!(h.to_bytes(), words(&w));
    assert_eq!(roundtrip(&words(&w)), h);
}

#[test]
fn linux_null_call_and_reply_roundtrip() {
    let call = roundtrip(&hex(NULL_CALL_KERNEL_CLIENT));
    assert_eq!(call.xid, Xid(0x02c7_04b8));
    assert_eq!(call.version, Version::ONE);
    assert_eq!(call.credits, 128, "Linux client asks for 128 credits");
    assert_eq!(call.body, Body::Msg(ChunkLists::empty()));
    let reply = roundtrip(&hex(NULL_REPLY_KNFSD));
    assert_eq!(reply.credits, 64, "knfsd grants 64");
}

#[test]
fn linux_write_call_read_list_roundtrip() {
    let h = roundtrip(&hex(WRITE_CALL_READ_LIST));
    assert_eq!(
        h.chunks().unwrap().reads,
        vec![ReadChunk {
            position: 112,
            segments: vec![Segment::new(0xa886_bd01, 131_072, 0x10c7_04b8_c4db_5000)]
        }]
    );
}

#[test]
fn linux_read_call_write_list_roundtrip() {
    let h = roundtrip(&hex(READ_CALL_WRITE_LIST));
    let c = h.chunks().unwrap();
    assert_eq!(
        c.writes,
        vec![WriteChunk::new(vec![Segment::new(
            0x8cd1_cf01,
            4096,
            0x0cc7_04b8_c4d3_4000
        )])]
    );
    assert!(c.reads.is_empty() && c.reply.is_none());
}

#[test]
fn linux_read_call_write_list_with_pad_segment_roundtrip() {
    let h = roundtrip(&hex(READ_CALL_WRITE_LIST_PAD));
    let w = &h.chunks().unwrap().writes;
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].segments.len(), 2);
    assert_eq!(w[0].segments[1], Segment::new(0xafb9_0101, 4, 0x9638_ef2c));
}

#[test]
fn linux_replies_with_rewritten_lengths_roundtrip() {
    let h = roundtrip(&hex(READ_REPLY_WRITE_LIST));
    assert_eq!(h.chunks().unwrap().writes[0].len(), 23);
    let h = roundtrip(&hex(READ_REPLY_WRITE_LIST_PAD));
    assert_eq!(h.chunks().unwrap().writes[0].segments[1].length, 0);
    let h = roundtrip(&hex(GETACL_REPLY_NOMSG));
    assert_eq!(h.msg_type(), MsgType::RDMA_NOMSG);
    assert_eq!(h.chunks().unwrap().reply.as_ref().unwrap().len(), 0x88);
    let h = roundtrip(&hex(READDIRPLUS_REPLY_NOMSG));
    assert_eq!(
        h.chunks().unwrap().reply.as_ref().unwrap().len(),
        124 + 10556
    );
    let h = roundtrip(&hex(EXCHANGE_ID_REPLY_NOMSG));
    assert_eq!(h.chunks().unwrap().reply.as_ref().unwrap().len(), 100);
}

#[test]
fn linux_calls_with_reply_chunk_roundtrip() {
    for v in [
        GETACL_CALL_REPLY_CHUNK,
        READDIRPLUS_CALL_REPLY_CHUNK,
        EXCHANGE_ID_CALL_REPLY_CHUNK,
    ] {
        let h = roundtrip(&hex(v));
        assert!(h.chunks().unwrap().reply.is_some());
    }
}

#[test]
fn linux_err_vers_and_err_chunk_roundtrip() {
    let h = roundtrip(&hex(ERR_VERS_KNFSD));
    assert_eq!(h.version, Version(7), "ERR_VERS echoes the failing version");
    assert_eq!(
        h.body,
        Body::Error(ErrorBody::Vers {
            low: Version::ONE,
            high: Version::ONE
        })
    );
    let h = roundtrip(&hex(ERR_CHUNK_MSGP_KNFSD));
    assert_eq!(h.body, Body::Error(ErrorBody::BadHeader));
    roundtrip(&hex(ERR_CHUNK_UNKNOWN_PROC_KNFSD));
}

#[test]
fn rdma_msgp_is_recognised_and_roundtrips() {
    let h = roundtrip(&hex(MSGP_CALL));
    assert_eq!(
        h.body,
        Body::MsgP {
            align: 0,
            thresh: 0,
            chunks: ChunkLists::empty()
        }
    );
}

#[test]
fn rdma_done_is_recognised() {
    let h = roundtrip(&words(&[1, 1, 1, 3]));
    assert_eq!(h.body, Body::Done);
}

#[test]
fn unknown_proc_is_unknown_msg_type() {
    assert_eq!(
        parse(&hex(UNKNOWN_PROC_CALL)),
        Err(HeaderError::UnknownMsgType(MsgType(9)))
    );
}

#[test]
fn unknown_version_is_not_parsed() {
    assert_eq!(
        parse(&hex(BAD_VERSION_CALL)),
        Err(HeaderError::UnsupportedVersion(Version(7)))
    );
}

#[test]
fn prefix_view_needs_sixteen_bytes() {
    assert_eq!(
        PrefixView::new_checked(&[0u8; 15][..]),
        Err(HeaderError::TooShort { len: 15 })
    );
    let b = hex(NULL_CALL_KERNEL_CLIENT);
    let v = PrefixView::new_checked(&b[..]).unwrap();
    assert_eq!(v.xid(), Xid(0x02c7_04b8));
    assert_eq!(v.credits(), 128);
    assert_eq!(v.msg_type(), MsgType::RDMA_MSG);
}

#[test]
fn v2_optional_roundtrip() {
    let h = Header {
        xid: Xid(9),
        version: Version::TWO,
        credits: 1,
        body: Body::Optional {
            opttype: OptType(0x77),
            optinfo: Bytes::from_static(b"abcde"),
        },
    };
    let b = h.to_bytes();
    assert_eq!(b, words(&[9, 2, 1, 5, 0x77, 5, 0x6162_6364, 0x6500_0000]));
    assert_eq!(roundtrip(&b), h);
}

#[test]
fn v2_err_inval_option_roundtrip_and_v1_has_no_such_code() {
    let b = words(&[9, 2, 1, 4, 3]);
    assert_eq!(roundtrip(&b).body, Body::Error(ErrorBody::InvalOption));
    assert_eq!(
        parse(&words(&[9, 1, 1, 4, 3])),
        Err(HeaderError::UndecodableError)
    );
}

#[test]
fn v2_msgp_has_void_body() {
    assert_eq!(
        roundtrip(&words(&[9, 2, 1, 2])).body,
        Body::MsgP {
            align: 0,
            thresh: 0,
            chunks: ChunkLists::empty()
        }
    );
}

#[test]
fn rdma_optional_is_unknown_in_v1() {
    assert_eq!(
        parse(&words(&[9, 1, 1, 5, 0, 0])),
        Err(HeaderError::UnknownMsgType(MsgType::RDMA_OPTIONAL))
    );
}

#[test]
fn rdma_error_that_cannot_be_decoded_is_undecodable() {
    // Truncated ERR_VERS, unknown code, missing code.
    for w in [&[1u32, 1, 1, 4, 1, 1][..], &[1, 1, 1, 4, 99], &[1, 1, 1, 4]] {
        assert_eq!(
            parse(&words(w)),
            Err(HeaderError::UndecodableError),
            "{w:?}"
        );
    }
}

#[test]
fn truncated_lists_are_xdr_errors() {
    let full = hex(READ_CALL_WRITE_LIST_PAD);
    for cut in 16..full.len() {
        let r = parse(&full.slice(..cut));
        assert!(
            matches!(
                r,
                Err(HeaderError::Xdr(xdr::XdrError::UnexpectedEnd { .. }))
            ),
            "cut {cut}: {r:?}"
        );
    }
}

#[test]
fn optional_flag_other_than_zero_or_one_is_an_xdr_error() {
    assert_eq!(
        parse(&words(&[1, 1, 1, 0, 2, 0, 0])),
        Err(HeaderError::Xdr(xdr::XdrError::InvalidDiscriminant(2)))
    );
}

#[test]
fn read_position_must_be_a_multiple_of_four() {
    let mut w = vec![1, 1, 1, 0, 1, 6];
    w.extend(hloo(0));
    w.extend([0, 0, 0]);
    assert_eq!(parse(&words(&w)), Err(HeaderError::MisalignedPosition(6)));
}

#[test]
fn read_position_reused_after_another_is_refused() {
    let mut w = vec![1, 1, 1, 0];
    for p in [8, 16, 8] {
        w.extend([1, p]);
        w.extend(hloo(0));
    }
    w.extend([0, 0, 0]);
    assert_eq!(parse(&words(&w)), Err(HeaderError::DuplicatePosition(8)));
}

#[test]
fn write_chunk_with_zero_segments_is_refused() {
    assert_eq!(
        parse(&words(&[1, 1, 1, 0, 0, 1, 0, 0, 0])),
        Err(HeaderError::EmptyChunk)
    );
}

#[test]
fn limits_bound_segments_chunks_and_total() {
    let limits = Limits {
        max_segments_per_chunk: 2,
        max_chunks_per_list: 2,
        max_total_segments: 4,
    };
    // A Write chunk announcing 2^32-1 segments: refused before any allocation.
    let b = words(&[1, 1, 1, 0, 0, 1, u32::MAX]);
    assert_eq!(
        Header::parse(&b, &limits),
        Err(HeaderError::TooManySegments { max: 2 })
    );
    // Three segments at one position.
    let mut w = vec![1, 1, 1, 0];
    for _ in 0..3 {
        w.extend([1, 0]);
        w.extend(hloo(0));
    }
    w.extend([0, 0, 0]);
    assert_eq!(
        Header::parse(&words(&w), &limits),
        Err(HeaderError::TooManySegments { max: 2 })
    );
    // Three write chunks.
    let mut w = vec![1, 1, 1, 0, 0];
    for _ in 0..3 {
        w.extend([1, 1]);
        w.extend(hloo(0));
    }
    w.extend([0, 0]);
    assert_eq!(
        Header::parse(&words(&w), &limits),
        Err(HeaderError::TooManyChunks { max: 2 })
    );
    // Five segments in total: 2 + 2 in writes, 1 in reply.
    let mut w = vec![1, 1, 1, 0, 0];
    for _ in 0..2 {
        w.extend([1, 2]);
        w.extend(hloo(0));
        w.extend(hloo(1));
    }
    w.extend([0, 1, 1]);
    w.extend(hloo(2));
    assert_eq!(
        Header::parse(&words(&w), &limits),
        Err(HeaderError::TooManyTotalSegments { max: 4 })
    );
}

#[test]
fn write_chunk_count_larger_than_the_buffer_is_truncation() {
    let b = words(&[1, 1, 1, 0, 0, 1, 200]);
    assert!(matches!(
        parse(&b),
        Err(HeaderError::Xdr(xdr::XdrError::UnexpectedEnd {
            needed: 3200,
            ..
        }))
    ));
}

#[test]
fn error_reply_echoes_xid_and_version() {
    let failed = PrefixView::new_checked(&hex(BAD_VERSION_CALL)[..])
        .unwrap()
        .prefix();
    let h = Header::error_reply(
        &failed,
        64,
        ErrorBody::Vers {
            low: Version::ONE,
            high: Version::ONE,
        },
    );
    assert_eq!(h.to_bytes(), hex(ERR_VERS_KNFSD));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_segment() -> impl Strategy<Value = Segment> {
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(h, l, o)| Segment::new(h, l, o))
    }

    fn arb_write_chunk() -> impl Strategy<Value = WriteChunk> {
        prop::collection::vec(arb_segment(), 1..4).prop_map(WriteChunk::new)
    }

    fn arb_chunks() -> impl Strategy<Value = ChunkLists> {
        (
            prop::collection::btree_set(0u32..1000, 0..4),
            prop::collection::vec(prop::collection::vec(arb_segment(), 1..4), 4),
            prop::collection::vec(arb_write_chunk(), 0..4),
            prop::option::of(arb_write_chunk()),
        )
            .prop_map(|(positions, segs, writes, reply)| ChunkLists {
                reads: positions
                    .into_iter()
                    .zip(segs)
                    .map(|(p, segments)| ReadChunk {
                        position: p * 4,
                        segments,
                    })
                    .collect(),
                writes,
                reply,
            })
    }

    fn arb_header() -> impl Strategy<Value = Header> {
        let v1_body = prop_oneof![
            arb_chunks().prop_map(Body::Msg),
            arb_chunks().prop_map(Body::NoMsg),
            (any::<u32>(), any::<u32>(), arb_chunks()).prop_map(|(align, thresh, chunks)| {
                Body::MsgP {
                    align,
                    thresh,
                    chunks,
                }
            }),
            Just(Body::Done),
            Just(Body::Error(ErrorBody::BadHeader)),
            (any::<u32>(), any::<u32>()).prop_map(|(l, h)| Body::Error(ErrorBody::Vers {
                low: Version(l),
                high: Version(h)
            })),
        ];
        let v2_body = prop_oneof![
            arb_chunks().prop_map(Body::Msg),
            arb_chunks().prop_map(Body::NoMsg),
            Just(Body::MsgP {
                align: 0,
                thresh: 0,
                chunks: ChunkLists::empty()
            }),
            Just(Body::Error(ErrorBody::InvalOption)),
            (any::<u32>(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(t, info)| {
                Body::Optional {
                    opttype: OptType(t),
                    optinfo: Bytes::from(info),
                }
            }),
        ];
        prop_oneof![
            (any::<u32>(), any::<u32>(), v1_body).prop_map(|(x, c, body)| Header {
                xid: Xid(x),
                version: Version::ONE,
                credits: c,
                body
            }),
            (any::<u32>(), any::<u32>(), v2_body).prop_map(|(x, c, body)| Header {
                xid: Xid(x),
                version: Version::TWO,
                credits: c,
                body
            }),
        ]
    }

    proptest! {
        /// Repr round trip: emit writes encoded_len bytes, parse gives the value back
        /// and consumes exactly those bytes.
        #[test]
        fn emit_then_parse_is_identity(h in arb_header()) {
            let b = h.to_bytes();
            prop_assert_eq!(b.len(), h.encoded_len());
            let p = Header::parse(&b, &Limits::default()).unwrap();
            prop_assert_eq!(p.header_len, b.len());
            prop_assert_eq!(p.header, h);
        }

        /// Parse never panics and never reads past the buffer, whatever the bytes.
        #[test]
        fn parse_arbitrary_bytes_never_panics(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let b = Bytes::from(b);
            if let Ok(p) = Header::parse(&b, &Limits::default()) {
                prop_assert!(p.header_len <= b.len());
            }
        }
    }
}
