//! Responder rule tests: one input each, exact event and exact bytes sent.

use super::*;
use crate::chunks::{ReadChunk, Segment};
use crate::error::MarshalError;
use crate::header::Body;
use crate::testutil::{hex, nfs_call, rpc_reply, vectors::*, words, TestUlb};
use crate::wire::ErrCode;

fn responder(call_ddp: usize) -> Responder<TestUlb> {
    Responder::new(
        TestUlb {
            call_ddp,
            ..TestUlb::default()
        },
        ResponderConfig {
            policy: Policy::v1_only(),
            credits: 64,
            peer: Some(crate::PeerLimits {
                send_threshold: 4096,
                recv_threshold: 4096,
                remote_invalidate: false,
            }),
            ..ResponderConfig::default()
        },
    )
    .unwrap()
}

fn concat(parts: &[Bytes]) -> Bytes {
    Bytes::from(parts.concat())
}

/// The single Send queued, as bytes.
fn sent(r: &mut Responder<TestUlb>) -> (Bytes, Option<u32>) {
    match r.poll_action() {
        Some(Action::Send {
            send, invalidate, ..
        }) => (concat(&send), invalidate),
        other => panic!("expected a Send, got {other:?}"),
    }
}

/// The Linux WRITE call: header vector, then 112 inline bytes ending with the count.
fn linux_write_call() -> (Bytes, Bytes) {
    let data = Bytes::from(vec![0x5a; 131_072]);
    let call = nfs_call(0x10c7_04b8, 7, &[0; 17], Some(data.clone()));
    assert_eq!(call.inline.len(), 112);
    (
        concat(&[hex(WRITE_CALL_READ_LIST), call.inline.clone()]),
        data,
    )
}

#[test]
fn linux_null_call_gets_knfsd_identical_reply() {
    let mut r = responder(0);
    r.handle_receive(concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]));
    let Some(ResponderEvent::Call {
        xid,
        version,
        payload,
    }) = r.poll_event()
    else {
        panic!()
    };
    assert_eq!((xid, version), (Xid(0x02c7_04b8), Version::ONE));
    assert_eq!(payload.to_bytes(), hex(NULL_CALL_RPC));
    r.send_reply(xid, rpc_reply(0x02c7_04b8, &[], None))
        .unwrap();
    let (bytes, inv) = sent(&mut r);
    // knfsd's header (grant 64) and the 24-byte NULL reply.
    assert_eq!(
        bytes,
        concat(&[hex(NULL_REPLY_KNFSD), words(&[0x02c7_04b8, 1, 0, 0, 0, 0])])
    );
    assert_eq!(inv, None);
    assert_eq!(r.pending_calls(), 0);
}

#[test]
fn s4_4_5_2_read_chunk_is_pulled_then_the_call_is_delivered() {
    let mut r = responder(1);
    let (send, data) = linux_write_call();
    r.handle_receive(send);
    assert_eq!(
        r.poll_action(),
        Some(Action::RdmaRead {
            xid: Xid(0x10c7_04b8),
            chunk: 0,
            segments: vec![crate::Segment::new(
                0xa886_bd01,
                131_072,
                0x10c7_04b8_c4db_5000
            )]
        })
    );
    assert_eq!(r.poll_event(), None, "not before the data is there");
    r.handle_read_done(Xid(0x10c7_04b8), 0, data.clone());
    let Some(ResponderEvent::Call { payload, .. }) = r.poll_event() else {
        panic!()
    };
    assert_eq!(payload.len(), 112 + 131_072);
    assert_eq!(
        payload.parts[1], data,
        "chunk data handed over without a copy"
    );
    assert_eq!(payload.chunk_ranges, vec![(112, 131_072)]);
}

#[test]
fn s8_1_1_non_ddp_eligible_item_in_read_chunk_gets_garbage_args() {
    let mut r = responder(0); // the procedure has no DDP-eligible argument
    let (send, data) = linux_write_call();
    r.handle_receive(send);
    let _ = r.poll_action();
    r.handle_read_done(Xid(0x10c7_04b8), 0, data);
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            xid: Some(Xid(0x10c7_04b8)),
            error: ArgsError::NotDdpEligible { position: 112 }.into(),
            answer: WireAnswer::GarbageArgs,
        })
    );
    let (bytes, _) = sent(&mut r);
    assert_eq!(
        bytes,
        words(&[0x10c7_04b8, 1, 64, 0, 0, 0, 0, 0x10c7_04b8, 1, 0, 0, 0, 4])
    );
}

/// §8.1.1 by XDR position: the procedure has one DDP-eligible argument (its last,
/// as WRITE's data) and the Call one Read chunk, so counting alone would pass it; but
/// the chunk sits over the first argument word, whose length word (8) matches the
/// chunk: refused all the same, with nothing handed up.
#[test]
fn s8_1_1_read_chunk_over_an_item_that_is_not_ddp_eligible_is_refused_by_position() {
    let mut r = responder(1);
    // Header words, then a word 8 at offset 40 (a length word), then 12 more words.
    let call = nfs_call(0x77, 7, &[8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], None);
    let chunks = ChunkLists {
        reads: vec![ReadChunk {
            position: 44,
            segments: vec![Segment {
                handle: 5,
                length: 8,
                offset: 0,
            }],
        }],
        ..ChunkLists::empty()
    };
    let header = Header {
        xid: Xid(0x77),
        version: Version::ONE,
        credits: 8,
        body: Body::Msg(chunks),
    };
    r.handle_receive(concat(&[header.to_bytes(), call.inline.clone()]));
    assert!(matches!(r.poll_action(), Some(Action::RdmaRead { .. })));
    r.handle_read_done(Xid(0x77), 0, Bytes::from(vec![0xee; 8]));
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            xid: Some(Xid(0x77)),
            error: ArgsError::NotDdpEligible { position: 44 }.into(),
            answer: WireAnswer::GarbageArgs,
        })
    );
    assert_eq!(r.poll_event(), None, "nothing handed up");
    let (bytes, _) = sent(&mut r);
    assert_eq!(&bytes[28..], &rpc::garbage_args_reply(Xid(0x77))[..]);
}

#[test]
fn s5_5_2_chunk_length_mismatch_gets_garbage_args_in_rdma_msg() {
    let mut r = responder(1);
    // The count word says 131072, the Read chunk only 4096.
    let data = Bytes::from(vec![0u8; 4096]);
    let call = nfs_call(
        0x10c7_04b8,
        7,
        &[0; 17],
        Some(Bytes::from(vec![0u8; 131_072])),
    );
    let mut hdr = hex(WRITE_CALL_READ_LIST).to_vec();
    hdr[28..32].copy_from_slice(&4096u32.to_be_bytes());
    r.handle_receive(concat(&[Bytes::from(hdr), call.inline.clone()]));
    let _ = r.poll_action();
    r.handle_read_done(Xid(0x10c7_04b8), 0, data);
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            xid: Some(Xid(0x10c7_04b8)),
            error: ArgsError::ChunkLengthMismatch {
                position: 112,
                in_stream: 131_072,
                chunk: 4096
            }
            .into(),
            answer: WireAnswer::GarbageArgs,
        })
    );
    let (bytes, _) = sent(&mut r);
    assert_eq!(&bytes[12..16], &[0, 0, 0, 0], "RDMA_MSG");
    assert_eq!(&bytes[28..], &rpc::garbage_args_reply(Xid(0x10c7_04b8))[..]);
}

#[test]
fn s5_5_1_bad_version_gets_knfsd_identical_err_vers() {
    let mut r = responder(0);
    r.handle_receive(concat(&[hex(BAD_VERSION_CALL), hex(NULL_CALL_RPC)]));
    assert_eq!(sent(&mut r).0, hex(ERR_VERS_KNFSD));
    assert!(matches!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            answer: WireAnswer::RdmaError(ErrCode::ERR_VERS),
            ..
        })
    ));
}

#[test]
fn s5_6_1_msgp_gets_knfsd_identical_err_chunk() {
    let mut r = responder(0);
    r.handle_receive(hex(MSGP_CALL));
    assert_eq!(sent(&mut r).0, hex(ERR_CHUNK_MSGP_KNFSD));
}

#[test]
fn nomsg_call_without_position_zero_chunk_gets_err_badheader() {
    // The Linux EXCHANGE_ID header made RDMA_NOMSG: only a Reply chunk.
    let mut b = hex(EXCHANGE_ID_CALL_REPLY_CHUNK).to_vec();
    b[15] = 1;
    let mut r = responder(0);
    r.handle_receive(Bytes::from(b));
    assert_eq!(sent(&mut r).0, words(&[0xe4d8_5320, 1, 64, 4, 2]));
    assert!(matches!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            error: Error::Header(HeaderError::NoPayloadChunk),
            ..
        })
    ));
}

#[test]
fn s4_5_3_long_call_is_read_from_position_zero_and_xid_checked() {
    let call = nfs_call(0x99, 1, &[7; 300], None).to_bytes();
    let seg = crate::Segment::new(0x42, call.len() as u32, 0x1000);
    let hdr = words(&[
        0x99,
        1,
        8,
        1,
        1,
        0,
        0x42,
        call.len() as u32,
        0,
        0x1000,
        0,
        0,
        0,
    ]);
    let mut r = responder(0);
    r.handle_receive(hdr.clone());
    assert_eq!(
        r.poll_action(),
        Some(Action::RdmaRead {
            xid: Xid(0x99),
            chunk: 0,
            segments: vec![seg]
        })
    );
    r.handle_read_done(Xid(0x99), 0, call.clone());
    let Some(ResponderEvent::Call { payload, .. }) = r.poll_event() else {
        panic!()
    };
    assert_eq!(payload.to_bytes(), call);

    // Same, but the Call inside has another XID: ERR_BADHEADER.
    let mut r = responder(0);
    r.handle_receive(hdr);
    let _ = r.poll_action();
    let mut other = call.to_vec();
    other[3] = 0x98;
    r.handle_read_done(Xid(0x99), 0, Bytes::from(other));
    assert_eq!(sent(&mut r).0, words(&[0x99, 1, 64, 4, 2]));
}

#[test]
fn s5_5_3_reply_too_large_without_reply_chunk_sends_err_badheader() {
    let mut r = responder(0);
    r.handle_receive(concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]));
    let _ = r.poll_event();
    let big = rpc_reply(0x02c7_04b8, &[0; 2000], None);
    assert_eq!(
        r.send_reply(Xid(0x02c7_04b8), big),
        Err(MarshalError::NoReplyChunk { len: 8024 }.into())
    );
    assert_eq!(sent(&mut r).0, words(&[0x02c7_04b8, 1, 64, 4, 2]));
}

#[test]
fn v2_s5_3_reply_uses_the_version_of_the_call() {
    let mut r: Responder<TestUlb> =
        Responder::new(TestUlb::default(), ResponderConfig::default()).unwrap();
    let mut b = concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]).to_vec();
    b[7] = 2;
    r.handle_receive(Bytes::from(b));
    let Some(ResponderEvent::Call { xid, version, .. }) = r.poll_event() else {
        panic!()
    };
    assert_eq!(version, Version::TWO);
    r.send_reply(xid, rpc_reply(xid.0, &[], None)).unwrap();
    let Some(Action::Send { send, .. }) = r.poll_action() else {
        panic!()
    };
    assert_eq!(&send[0][4..8], &[0, 0, 0, 2]);
}

#[test]
fn s5_5_3_failed_rdma_read_closes_the_connection() {
    let mut r = responder(1);
    r.handle_receive(linux_write_call().0);
    let _ = r.poll_action();
    r.handle_read_failed(Xid(0x10c7_04b8));
    assert_eq!(r.poll_action(), Some(Action::Close));
    assert_eq!(r.pending_calls(), 0);
}

#[test]
fn s4_3_1_grant_follows_posted_receives() {
    let mut r = responder(0);
    let null = || concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]);
    r.set_credit_target(100).unwrap();
    assert_eq!(r.poll_action(), Some(Action::PostReceives(36)));
    r.handle_receive(null());
    let _ = r.poll_event();
    r.send_reply(Xid(0x02c7_04b8), rpc_reply(0x02c7_04b8, &[], None))
        .unwrap();
    assert_eq!(
        &sent(&mut r).0[8..12],
        &64u32.to_be_bytes(),
        "not yet posted"
    );
    r.handle_receives_posted(36);
    r.handle_receive(null());
    let _ = r.poll_event();
    r.send_reply(Xid(0x02c7_04b8), rpc_reply(0x02c7_04b8, &[], None))
        .unwrap();
    assert_eq!(&sent(&mut r).0[8..12], &100u32.to_be_bytes());
    assert_eq!(r.set_credit_target(0), Err(CreditError::ZeroGrant));
}

#[test]
fn send_reply_for_unknown_xid_is_refused() {
    let mut r = responder(0);
    assert_eq!(
        r.send_reply(Xid(5), rpc_reply(5, &[], None)),
        Err(HeaderError::UnknownXid(Xid(5)).into())
    );
}

#[test]
fn s5_5_4_failed_reply_send_closes_the_connection() {
    let mut r = responder(0);
    r.handle_send_failed(Xid(1));
    assert_eq!(r.poll_action(), Some(Action::Close));
}

#[test]
fn read_chunks_larger_than_the_reassembly_limit_are_not_read() {
    let mut r = Responder::new(
        TestUlb {
            call_ddp: 1,
            ..TestUlb::default()
        },
        ResponderConfig {
            reassembly: ReassemblyOptions {
                max_len: 65_536,
                ..ReassemblyOptions::default()
            },
            ..ResponderConfig::default()
        },
    )
    .unwrap();
    r.handle_receive(linux_write_call().0);
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::Refused {
            xid: Some(Xid(0x10c7_04b8)),
            error: ArgsError::TooLarge(112 + 131_072).into(),
            answer: WireAnswer::GarbageArgs,
        })
    );
    let (bytes, _) = sent(&mut r);
    assert_eq!(&bytes[28..], &rpc::garbage_args_reply(Xid(0x10c7_04b8))[..]);
    assert_eq!(r.poll_action(), None, "no RDMA Read issued");
}

#[test]
fn v2_s2_3_reply_to_v2_call_assumes_4096_without_private_data() {
    let reply = || rpc_reply(0x02c7_04b8, &[0; 700], None); // 2824 bytes
                                                            // Version One: 1024 assumed, no Reply chunk: cannot be sent.
    let mut r: Responder<TestUlb> =
        Responder::new(TestUlb::default(), ResponderConfig::default()).unwrap();
    r.handle_receive(concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]));
    let _ = r.poll_event();
    assert!(r.send_reply(Xid(0x02c7_04b8), reply()).is_err());
    // Version Two: 4096 assumed: a Short reply.
    let mut r: Responder<TestUlb> =
        Responder::new(TestUlb::default(), ResponderConfig::default()).unwrap();
    let mut b = concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)]).to_vec();
    b[7] = 2;
    r.handle_receive(Bytes::from(b));
    let _ = r.poll_event();
    r.send_reply(Xid(0x02c7_04b8), reply()).unwrap();
    assert_eq!(sent(&mut r).0.len(), 28 + 2824);
}

#[test]
fn s7_3_1_no_backward_call_without_backward_channel() {
    let mut r = responder(0);
    assert_eq!(
        r.start_backward_call(nfs_call(1, 0, &[], None), ()),
        Err((BackwardError::NoChannel, ()))
    );
}

/// Only an RPC Call goes backward: a Reply, or bytes too short to hold an XID, are
/// refused before any other rule, nothing sent.
#[test]
fn s7_3_4_a_backward_message_that_is_not_a_call_is_refused() {
    let mut r = with_backward_credits(2);
    r.handle_peer_backward_ready();
    assert_eq!(r.poll_action(), Some(Action::PostBackwardReceives(2)));
    assert_eq!(
        r.start_backward_call(rpc_reply(0x920, &[], None), ()),
        Err((BackwardError::NotACall, ()))
    );
    let short = xdr::XdrStream {
        inline: bytes::Bytes::from_static(b"ab"),
        ddp: Vec::new(),
    };
    assert_eq!(
        r.start_backward_call(short, ()),
        Err((BackwardError::NotACall, ()))
    );
    assert_eq!(r.poll_action(), None);
    assert_eq!(r.backward_credits().unwrap().outstanding(), 0);
}

#[test]
fn s7_3_1_backward_calls_refused_until_ready_and_again_after_a_disconnect() {
    let mut r = with_backward_credits(2);
    // §7.3.1: "An Upper Layer Protocol consumer MUST NOT perform backward direction
    // ONC RPC operations unless the peer consumer has indicated it is prepared to
    // handle them." Refused, nothing sent, no credit taken.
    assert_eq!(
        r.start_backward_call(nfs_call(0x910, 0, &[], None), ()),
        Err((BackwardError::NotReady, ()))
    );
    assert_eq!(r.poll_action(), None);
    assert_eq!(r.backward_credits().unwrap().outstanding(), 0);
    r.handle_peer_backward_ready();
    assert_eq!(r.poll_action(), Some(Action::PostBackwardReceives(2)));
    r.start_backward_call(nfs_call(0x911, 0, &[], None), ())
        .unwrap();
    assert!(matches!(r.poll_action(), Some(Action::Send { .. })));
    // A new connection's peer must say it again.
    r.handle_disconnect();
    while r.poll_event().is_some() {}
    assert_eq!(
        r.start_backward_call(nfs_call(0x912, 0, &[], None), ()),
        Err((BackwardError::NotReady, ()))
    );
    assert_eq!(r.poll_action(), None);
}

/// A responder with a backward channel of `credits`.
fn with_backward_credits<T>(credits: u32) -> Responder<TestUlb, T> {
    Responder::new(
        TestUlb::default(),
        ResponderConfig {
            backward_credits: Some(credits),
            ..ResponderConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn s7_backward_call_failed_by_rdma_error_or_disconnect() {
    let mut r = with_backward_credits(4);
    // §7.3.1: the client's upper layer said it takes backward Calls.
    r.handle_peer_backward_ready();
    assert_eq!(r.poll_action(), Some(Action::PostBackwardReceives(4)));
    r.start_backward_call(nfs_call(0x900, 0, &[], None), ())
        .unwrap();
    let _ = r.poll_action();
    r.handle_receive(words(&[0x900, 1, 1, 4, 2]));
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::BackwardFailed {
            xid: Xid(0x900),
            reason: BackwardError::Refused,
            token: (),
        })
    );
    assert_eq!(r.backward_credits().unwrap().outstanding(), 0);
    r.start_backward_call(nfs_call(0x901, 0, &[], None), ())
        .unwrap();
    r.handle_disconnect();
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::BackwardFailed {
            xid: Xid(0x901),
            reason: BackwardError::ConnectionLost,
            token: (),
        })
    );
}

#[test]
fn backward_reply_for_unknown_xid_is_dropped() {
    let mut r = responder(0);
    let reply = rpc_reply(0x55, &[], None).to_bytes();
    r.handle_receive(concat(&[words(&[0x55, 1, 1, 0, 0, 0, 0]), reply]));
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.poll_action(), None);
}

#[test]
fn rr_s5_4_3_registration_finishing_after_disconnect_is_invalidated_at_once() {
    let mut r = responder(0);
    r.handle_disconnect();
    let segs = vec![vec![crate::chunks::Segment::new(0x5000_0001, 100, 0)]];
    assert!(r
        .handle_registered(std::time::Instant::now(), Xid(9), segs)
        .is_err());
    assert_eq!(
        r.poll_action(),
        Some(Action::Invalidate {
            xid: Xid(9),
            handles: vec![0x5000_0001]
        })
    );
}

#[test]
fn rr_s6_rdma_done_without_the_feature_still_gets_err_badheader() {
    // Version Two RDMA_DONE from a requester that never advertised reliable reply, to a
    // responder that offers it: v1 §5.6.2 still applies.
    let mut r = Responder::new(
        TestUlb::default(),
        ResponderConfig {
            reliable_reply: Some(crate::responder::ReliableReplyConfig::default()),
            ..ResponderConfig::default()
        },
    )
    .unwrap();
    r.handle_receive(words(&[0x42, 2, 32, 3]));
    let (sent, _) = sent(&mut r);
    assert_eq!(sent, words(&[0x42, 2, 64, 4, 2]));
}

struct Noop;

impl std::task::Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn budgeted(budget: &Arc<MemoryBudget>) -> Responder<TestUlb> {
    Responder::new(
        TestUlb {
            call_ddp: 1,
            ..TestUlb::default()
        },
        ResponderConfig {
            read_memory: Some(budget.clone()),
            ..ResponderConfig::default()
        },
    )
    .unwrap()
}

/// Issue 16: connections sharing a memory budget. A Call whose Read chunks do not
/// fit waits (no RDMA Read, so no sink allocated) until another connection's Call is
/// answered and releases its charge; one larger than the whole budget is refused.
#[test]
fn read_chunks_wait_for_the_shared_memory_budget() {
    let budget = MemoryBudget::new(200_000);
    let (mut a, mut b) = (budgeted(&budget), budgeted(&budget));
    let (send, data) = linux_write_call();
    a.handle_receive(send.clone());
    assert!(matches!(a.poll_action(), Some(Action::RdmaRead { .. })));
    assert_eq!(budget.used(), 131_072);
    b.handle_receive(send);
    assert_eq!(b.poll_action(), None, "no RDMA Read past the budget");
    let (_, since) = b.memory_wait().expect("waits for memory");
    let waker = std::task::Waker::from(Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(budget.poll_released(since, &mut cx).is_pending());
    // A's Call keeps its charge while it is served, until its Reply goes.
    a.handle_read_done(Xid(0x10c7_04b8), 0, data);
    assert!(matches!(a.poll_event(), Some(ResponderEvent::Call { .. })));
    assert_eq!(budget.used(), 131_072);
    a.send_reply(Xid(0x10c7_04b8), rpc_reply(0x10c7_04b8, &[], None))
        .unwrap();
    assert_eq!(budget.used(), 0);
    assert!(budget.poll_released(since, &mut cx).is_ready());
    b.handle_memory_released();
    assert!(matches!(b.poll_action(), Some(Action::RdmaRead { .. })));
    assert_eq!((budget.used(), budget.peak()), (131_072, 131_072));
    assert!(b.memory_wait().is_none());
    // The connection ends: its Call's charge goes with it.
    b.handle_disconnect();
    assert_eq!(budget.used(), 0);

    // A Call larger than the whole budget could never start: GARBAGE_ARGS at once.
    let small = MemoryBudget::new(65_536);
    let mut c = budgeted(&small);
    c.handle_receive(linux_write_call().0);
    assert_eq!(
        c.poll_event(),
        Some(ResponderEvent::Refused {
            xid: Some(Xid(0x10c7_04b8)),
            error: ArgsError::TooLarge(112 + 131_072).into(),
            answer: WireAnswer::GarbageArgs,
        })
    );
    let (bytes, _) = sent(&mut c);
    assert_eq!(&bytes[28..], &rpc::garbage_args_reply(Xid(0x10c7_04b8))[..]);
    assert_eq!(c.poll_action(), None, "no RDMA Read issued");
    assert_eq!(small.used(), 0);
}

/// Issue 16: connections waiting for the shared budget are served first come, first
/// served, and one that goes away leaves the line: a Call that would fit into what
/// is left does not overtake a waiting one, and a connection lost while waiting does
/// not hold the others up.
#[test]
fn connections_wait_for_the_budget_in_line() {
    // Room for one 131,072-byte Call and a little more.
    let budget = MemoryBudget::new(140_000);
    let (mut a, mut b, mut c) = (budgeted(&budget), budgeted(&budget), budgeted(&budget));
    let (send, data) = linux_write_call();
    a.handle_receive(send.clone());
    assert!(matches!(a.poll_action(), Some(Action::RdmaRead { .. })));
    b.handle_receive(send.clone());
    c.handle_receive(send);
    assert_eq!(b.poll_action(), None);
    assert_eq!(c.poll_action(), None);
    assert_eq!(budget.waiting(), 2, "b, then c");
    // b's connection is lost while it waits: it leaves the line.
    b.handle_disconnect();
    assert_eq!(budget.waiting(), 1);
    // a's Call is answered: c, now first, gets the memory.
    a.handle_read_done(Xid(0x10c7_04b8), 0, data);
    assert!(matches!(a.poll_event(), Some(ResponderEvent::Call { .. })));
    a.send_reply(Xid(0x10c7_04b8), rpc_reply(0x10c7_04b8, &[], None))
        .unwrap();
    c.handle_memory_released();
    assert!(matches!(c.poll_action(), Some(Action::RdmaRead { .. })));
    assert_eq!((budget.used(), budget.waiting()), (131_072, 0));
    assert!(c.memory_wait().is_none());
}

/// A Version One RDMA_MSG Call `xid` with no chunks.
fn inline_call(xid: u32) -> Bytes {
    concat(&[
        words(&[xid, 1, 1, 0, 0, 0, 0]),
        nfs_call(xid, 0, &[], None).inline,
    ])
}

#[test]
fn s4_3_1_a_refused_credit_growth_is_offered_again_after_growth_retry() {
    let mut r: Responder<TestUlb> = Responder::new(
        TestUlb::default(),
        ResponderConfig {
            policy: Policy::v1_only(),
            credits: 2,
            ..ResponderConfig::default()
        },
    )
    .unwrap();
    // One Call in service of a grant of two: no growth.
    r.handle_receive(inline_call(1));
    assert_eq!(r.credit_growth(8), None);
    // Two: more than half, so doubled (credits::grown_target).
    r.handle_receive(inline_call(2));
    assert_eq!(r.credit_growth(8), Some(4));
    assert_eq!(r.poll_timeout(), None);
    // The driver found no memory: nothing is offered until GROWTH_RETRY has passed,
    // and the core's timer says when that is.
    let t0 = Instant::now();
    r.handle_credit_growth_refused(t0);
    assert_eq!(r.credit_growth(8), None);
    assert_eq!(r.poll_timeout(), Some(t0 + GROWTH_RETRY));
    r.handle_timeout(t0 + GROWTH_RETRY / 2);
    assert_eq!(r.credit_growth(8), None);
    r.handle_timeout(t0 + GROWTH_RETRY);
    assert_eq!(r.poll_timeout(), None);
    assert_eq!(r.credit_growth(8), Some(4));
    // Granted: the Receives first (§4.3.1), then no more growth at the maximum.
    while r.poll_action().is_some() {}
    r.set_credit_target(4).unwrap();
    assert_eq!(r.poll_action(), Some(Action::PostReceives(2)));
    assert_eq!(r.credit_growth(4), None);
}

#[test]
fn calls_in_service_are_counted_from_when_they_were_taken_until_answered_or_lost() {
    let mut r = responder(0);
    r.handle_receive(inline_call(1));
    r.handle_receive(inline_call(2));
    r.handle_receive(inline_call(3));
    while r.poll_event().is_some() {}
    assert_eq!(r.in_service(), (0, None), "answered at once until taken");
    let t0 = Instant::now();
    r.handle_in_service(Xid(2), t0 + Duration::from_secs(1));
    r.handle_in_service(Xid(3), t0);
    r.handle_in_service(Xid(9), t0 - Duration::from_secs(1));
    assert_eq!(
        r.in_service(),
        (2, Some(t0)),
        "an unknown XID is not counted"
    );
    let w = r.waiting(t0 + Duration::from_secs(5));
    assert_eq!(
        (w.calls, w.in_dispatcher, w.oldest_dispatch),
        (3, 2, Some(Duration::from_secs(5))),
        "what the watchdog reports: the oldest in service, its age"
    );
    r.send_reply(Xid(3), rpc_reply(3, &[], None)).unwrap();
    assert_eq!(r.in_service(), (1, Some(t0 + Duration::from_secs(1))));
    r.handle_disconnect();
    assert_eq!(r.in_service(), (0, None));
}

/// `responder(1)` with a read timeout of `secs`.
fn responder_with_read_timeout(secs: u64) -> Responder<TestUlb> {
    Responder::new(
        TestUlb {
            call_ddp: 1,
            ..TestUlb::default()
        },
        ResponderConfig {
            policy: Policy::v1_only(),
            read_timeout: Some(Duration::from_secs(secs)),
            ..ResponderConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn s5_5_3_reads_not_answered_within_the_read_timeout_close_the_connection() {
    let timeout = Duration::from_secs(30);
    let mut r = responder_with_read_timeout(30);
    let (send, data) = linux_write_call();
    let xid = Xid(0x10c7_04b8);
    r.handle_receive(send);
    assert!(matches!(r.poll_action(), Some(Action::RdmaRead { .. })));
    // The clock starts when the driver posted the Reads, not before.
    assert_eq!(r.poll_timeout(), None);
    let t0 = Instant::now();
    r.handle_reads_posted(xid, 0, t0);
    assert_eq!(r.poll_timeout(), Some(t0 + timeout));
    r.handle_timeout(t0 + timeout - Duration::from_millis(1));
    assert_eq!(r.poll_event(), None);
    r.handle_timeout(t0 + timeout);
    assert_eq!(
        r.poll_event(),
        Some(ResponderEvent::ReadTimeout {
            xid,
            after: timeout
        })
    );
    // Reported once: the driver closes the connection; no timer is armed for it again.
    assert_eq!(r.poll_timeout(), None);
    r.handle_timeout(t0 + 2 * timeout);
    assert_eq!(r.poll_event(), None);
    // A late completion changes nothing; the next connection starts afresh.
    r.handle_read_done(xid, 0, data);
    r.handle_disconnect();
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn s5_5_3_reads_answered_in_time_arm_no_read_timeout() {
    let mut r = responder_with_read_timeout(30);
    let (send, data) = linux_write_call();
    let xid = Xid(0x10c7_04b8);
    r.handle_receive(send);
    let _ = r.poll_action();
    let t0 = Instant::now();
    r.handle_reads_posted(xid, 0, t0);
    r.handle_read_done(xid, 0, data);
    assert!(matches!(r.poll_event(), Some(ResponderEvent::Call { .. })));
    // The Call is with the upper layer: its Reads are no longer timed.
    assert_eq!(r.poll_timeout(), None);
    r.handle_timeout(t0 + Duration::from_secs(3600));
    assert_eq!(r.poll_event(), None);
}

#[test]
fn s7_2_1_backward_calls_wait_for_a_credit_in_order_and_fail_with_the_connection() {
    // Each Call's token is its XID's complement: every outcome names its own.
    let mut r = with_backward_credits::<u32>(4);
    r.handle_peer_backward_ready();
    assert_eq!(r.poll_action(), Some(Action::PostBackwardReceives(4)));
    // §4.3.3 for the backward requester: one Call until the client's first Reply.
    for x in 0x900..0x904 {
        r.start_backward_call(nfs_call(x, 0, &[], None), !x)
            .unwrap();
    }
    assert!(matches!(
        r.poll_action(),
        Some(Action::Send {
            xid: Xid(0x900),
            ..
        })
    ));
    assert_eq!(r.poll_action(), None, "the others wait");
    // An RDMA_ERROR for 0x900 returns its credit: the next goes, in order.
    r.handle_receive(words(&[0x900, 1, 1, 4, 2]));
    assert!(matches!(
        r.poll_event(),
        Some(ResponderEvent::BackwardFailed {
            xid: Xid(0x900),
            token: 0xffff_f6ff,
            ..
        })
    ));
    assert!(matches!(
        r.poll_action(),
        Some(Action::Send {
            xid: Xid(0x901),
            ..
        })
    ));
    assert_eq!(r.poll_action(), None);
    // The queue is bounded.
    for x in 0..(BACKWARD_QUEUE_MAX as u32 - 2) {
        r.start_backward_call(nfs_call(0x1000 + x, 0, &[], None), !(0x1000 + x))
            .unwrap();
    }
    assert!(matches!(
        r.start_backward_call(nfs_call(0x5_0000, 0, &[], None), 7),
        Err((BackwardError::Busy, 7))
    ));
    // The connection's end fails the one in flight and every waiting one.
    r.handle_disconnect();
    let mut failed = Vec::new();
    while let Some(ev) = r.poll_event() {
        let ResponderEvent::BackwardFailed { xid, reason, token } = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(reason, BackwardError::ConnectionLost);
        assert_eq!(token, !xid.0);
        failed.push(xid.0);
    }
    failed.sort();
    assert_eq!(failed.len(), BACKWARD_QUEUE_MAX + 1);
    assert_eq!(&failed[..3], &[0x901, 0x902, 0x903]);
    assert_eq!(r.backward_credits().unwrap().outstanding(), 0);
}
