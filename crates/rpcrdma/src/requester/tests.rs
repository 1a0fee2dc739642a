//! Requester rule tests, and a requester/responder pair over simulated memory.

use std::collections::HashMap;

use super::*;
use crate::chunks::WriteChunk;
use crate::error::CreditError;
use crate::marshal::Registration;
use crate::responder::{Responder, ResponderConfig, ResponderEvent};
use crate::testutil::{hex, nfs_call, rpc_reply, vectors::*, words, TestUlb};
use crate::wire::ErrCode;

fn requester(ulb: TestUlb, prefer: Version) -> Requester<TestUlb> {
    Requester::new(
        ulb,
        RequesterConfig {
            prefer,
            ..RequesterConfig::default()
        },
    )
}

fn null_call(xid: u32) -> XdrStream {
    nfs_call(xid, 0, &[], None)
}

fn concat(parts: &[Bytes]) -> Bytes {
    Bytes::from(parts.concat())
}

fn sent(r: &mut Requester<TestUlb>) -> Bytes {
    match r.poll_action() {
        Some(Action::Send { send, .. }) => concat(&send),
        other => panic!("expected a Send, got {other:?}"),
    }
}

fn small() -> TestUlb {
    TestUlb {
        max_reply: 200,
        ..TestUlb::default()
    }
}

#[test]
fn null_call_is_byte_identical_to_linux() {
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(0x02c7_04b8), null_call(0x02c7_04b8))
        .unwrap();
    assert_eq!(
        sent(&mut r),
        concat(&[hex(NULL_CALL_KERNEL_CLIENT), hex(NULL_CALL_RPC)])
    );
}

/// §4.3.1: a Call submitted past the credit limit waits in the core, in order, and
/// goes when a Reply returns a credit; one aborted while waiting is forgotten; those
/// still waiting when the connection goes fail with it.
#[test]
fn s4_3_1_submitted_calls_wait_for_a_credit_in_order() {
    let mut r = requester(small(), Version::ONE);
    r.submit_call(Xid(1), null_call(1)).unwrap();
    let _ = sent(&mut r);
    // The limit is 1 until the first Reply: 2, 3 and 4 wait.
    for x in 2..5 {
        r.submit_call(Xid(x), null_call(x)).unwrap();
    }
    assert_eq!(r.poll_action(), None, "nothing past the credit limit");
    assert!(r.abort_call(Xid(3)), "a waiting Call is forgotten");
    assert!(
        r.submit_call(Xid(5), xdr::Encoder::new().finish()).is_err(),
        "a Call that cannot be sent fails at once, waiting or not"
    );
    // The Reply grants 1 again: exactly the oldest waiting Call goes.
    r.handle_receive(concat(&[
        words(&[1, 1, 1, 0, 0, 0, 0]),
        rpc_reply(1, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
    let Some(Action::Send { xid, .. }) = r.poll_action() else {
        panic!("the oldest waiting Call is sent");
    };
    assert_eq!(xid, Xid(2));
    assert_eq!(r.poll_action(), None);
    r.handle_disconnect();
    let failed: Vec<Xid> = std::iter::from_fn(|| r.poll_event())
        .map(|e| match e {
            RequesterEvent::Failed { xid, .. } => xid,
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed.contains(&Xid(2)) && failed.contains(&Xid(4)),
        "{failed:?}"
    );
}

#[test]
fn s4_3_3_one_call_until_the_first_reply_then_the_grant() {
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(1), null_call(1)).unwrap();
    let _ = sent(&mut r);
    assert_eq!(
        r.start_call(Xid(2), null_call(2)),
        Err(CreditError::Exhausted {
            limit: 1,
            outstanding: 1
        }
        .into())
    );
    // knfsd-style reply granting 64.
    r.handle_receive(concat(&[
        words(&[1, 1, 64, 0, 0, 0, 0]),
        rpc_reply(1, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
    assert_eq!(r.credits().limit(), 64);
    for x in 2..66 {
        r.start_call(Xid(x), null_call(x)).unwrap();
    }
    assert!(r.start_call(Xid(99), null_call(99)).is_err());
}

#[test]
fn s5_5_rdma_error_completes_the_call_without_granting() {
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(0xa95c_540d), null_call(0xa95c_540d))
        .unwrap();
    let _ = sent(&mut r);
    r.handle_receive(hex(ERR_CHUNK_MSGP_KNFSD));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(0xa95c_540d),
            error: ReplyError::PeerError(ErrCode::ERR_BADHEADER).into()
        })
    );
    assert_eq!((r.credits().limit(), r.credits().outstanding()), (1, 0));
}

#[test]
fn v2_s5_2_probe_refused_with_err_vers_is_resent_in_v1() {
    let mut r = requester(small(), Version::TWO);
    r.start_call(Xid(0xdf77_1353), null_call(0xdf77_1353))
        .unwrap();
    let first = sent(&mut r);
    assert_eq!(&first[4..8], &[0, 0, 0, 2], "first Call in Version Two");
    assert!(first.len() <= 1024);
    // knfsd answers a version it does not know with ERR_VERS 1..1 (its vector
    // echoes version 7; here it echoes our 2).
    r.handle_receive(words(&[0xdf77_1353, 2, 64, 4, 1, 1, 1]));
    let again = sent(&mut r);
    assert_eq!(&again[4..8], &[0, 0, 0, 1], "sent again in Version One");
    assert_eq!(&again[8..], &first[8..]);
    assert_eq!(r.negotiation(), Negotiation::Settled(Version::ONE));
    assert_eq!(r.poll_event(), None, "the Call is still outstanding");
    assert_eq!(r.credits().outstanding(), 1);
}

#[test]
fn v2_s5_1_probe_answered_in_v2_settles_on_4096() {
    let mut r = requester(small(), Version::TWO);
    assert_eq!(r.send_threshold(), 1024);
    r.start_call(Xid(3), null_call(3)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(concat(&[
        words(&[3, 2, 32, 0, 0, 0, 0]),
        rpc_reply(3, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
    assert_eq!(r.negotiation(), Negotiation::Settled(Version::TWO));
    assert_eq!(r.send_threshold(), 4096);
    assert_eq!(r.recv_threshold(), 4096);
}

#[test]
fn v2_s5_3_reply_in_another_version_fails_its_call() {
    // A Version One Call answered in Version Two.
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(4), null_call(4)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(concat(&[
        words(&[4, 2, 64, 0, 0, 0, 0]),
        rpc_reply(4, &[], None).to_bytes(),
    ]));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(4),
            error: HeaderError::UnsupportedVersion(Version::TWO).into()
        })
    );
    // The credit is back, the message's grant of 64 not taken.
    assert_eq!((r.credits().limit(), r.credits().outstanding()), (1, 0));
    // The connection goes on: the next Call answered in its version completes.
    r.start_call(Xid(5), null_call(5)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(concat(&[
        words(&[5, 1, 64, 0, 0, 0, 0]),
        rpc_reply(5, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
}

#[test]
fn v2_s5_3_probe_answered_in_version_one_fails_and_settles_nothing() {
    let mut r = requester(small(), Version::TWO);
    r.start_call(Xid(6), null_call(6)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(concat(&[
        words(&[6, 1, 64, 0, 0, 0, 0]),
        rpc_reply(6, &[], None).to_bytes(),
    ]));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(6),
            error: HeaderError::UnsupportedVersion(Version::ONE).into()
        })
    );
    assert_eq!(r.negotiation(), Negotiation::Probing { xid: Xid(6) });
    // v2 §5.2: the next connection assumes Version One.
    assert_eq!(r.next_connection(), Negotiation::Settled(Version::ONE));
}

#[test]
fn v2_s5_2_err_vers_in_a_version_one_header_is_not_a_reply_in_another_version() {
    let mut r = requester(small(), Version::TWO);
    r.start_call(Xid(7), null_call(7)).unwrap();
    let _ = sent(&mut r);
    // RDMA_ERROR ERR_VERS 1-1 in a Version One header.
    r.handle_receive(words(&[7, 1, 64, 4, 1, 1, 1]));
    let again = sent(&mut r);
    assert_eq!(&again[4..8], &[0, 0, 0, 1], "sent again in Version One");
    assert_eq!(r.poll_event(), None);
    r.handle_receive(concat(&[
        words(&[7, 1, 64, 0, 0, 0, 0]),
        rpc_reply(7, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
    assert_eq!(r.negotiation(), Negotiation::Settled(Version::ONE));
}

#[test]
fn v2_s5_probe_larger_than_1024_becomes_a_long_call() {
    let mut r = requester(small(), Version::TWO);
    r.start_call(Xid(3), nfs_call(3, 1, &[0; 400], None))
        .unwrap();
    assert!(matches!(
        r.poll_action(),
        Some(Action::Register { registrations, .. })
            if matches!(registrations[0], Registration::Read { position: 0, .. })
    ));
}

#[test]
fn reply_with_a_read_list_fails_the_call() {
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(1), null_call(1)).unwrap();
    let _ = sent(&mut r);
    let mut reply = words(&[1, 1, 64, 0, 1, 0, 9, 4, 0, 0, 0, 0, 0]).to_vec();
    reply.extend_from_slice(&rpc_reply(1, &[], None).to_bytes());
    r.handle_receive(Bytes::from(reply));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(1),
            error: HeaderError::ReadListInReply.into()
        })
    );
}

fn read_requester() -> Requester<TestUlb> {
    requester(
        TestUlb {
            max_reply: 4096 + 120,
            ddp_results: vec![4096],
            call_ddp: 0,
        },
        Version::ONE,
    )
}

#[test]
fn s5_4_1_reply_write_chunks_are_checked_and_fenced_before_delivery() {
    let mut r = read_requester();
    r.start_call(Xid(0x0cc7_04b8), nfs_call(0x0cc7_04b8, 6, &[0; 16], None))
        .unwrap();
    let Some(Action::Register { registrations, .. }) = r.poll_action() else {
        panic!()
    };
    assert_eq!(registrations, vec![Registration::Write { len: 4096 }]);
    r.handle_registered(
        Xid(0x0cc7_04b8),
        vec![vec![Segment::new(0x8cd1_cf01, 4096, 0x0cc7_04b8_c4d3_4000)]],
    )
    .unwrap();
    assert_eq!(&sent(&mut r)[..52], &hex(READ_CALL_WRITE_LIST)[..]);
    // knfsd's reply: 23 bytes written.
    let inline = rpc_reply(0x0cc7_04b8, &[0; 14], Some(Bytes::from_static(b"x"))).inline;
    r.handle_receive(concat(&[hex(READ_REPLY_WRITE_LIST), inline.clone()]));
    assert_eq!(
        r.poll_action(),
        Some(Action::Invalidate {
            xid: Xid(0x0cc7_04b8),
            handles: vec![0x8cd1_cf01]
        })
    );
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Reply {
            xid: Xid(0x0cc7_04b8),
            inline,
            reply_chunk_len: None,
            write_lengths: vec![23],
            proc_id: Some(rpc::ProcId {
                prog: 100_003,
                vers: 3,
                proc_num: 6
            }),
            placed: PlacedHandles {
                reply: None,
                writes: vec![Some(0x8cd1_cf01)],
            },
        })
    );
}

#[test]
fn s4_4_6_reply_that_grows_a_write_segment_fails_the_call() {
    let mut r = requester(
        TestUlb {
            max_reply: 60,
            ddp_results: vec![32],
            call_ddp: 0,
        },
        Version::ONE,
    );
    r.config.peer = Some(crate::PeerLimits {
        send_threshold: 4096,
        recv_threshold: 82,
        remote_invalidate: false,
    });
    r.start_call(Xid(0x0cc7_04b8), nfs_call(0x0cc7_04b8, 6, &[], None))
        .unwrap();
    let Some(Action::Register { registrations, .. }) = r.poll_action() else {
        panic!()
    };
    assert_eq!(registrations, vec![Registration::Write { len: 32 }]);
    r.handle_registered(
        Xid(0x0cc7_04b8),
        vec![vec![Segment::new(0x8cd1_cf01, 32, 0x0cc7_04b8_c4d3_4000)]],
    )
    .unwrap();
    let _ = sent(&mut r);
    // The reply claims 40 bytes written into the 32-byte segment.
    r.handle_receive(concat(&[
        words(&[
            0x0cc7_04b8,
            1,
            64,
            0,
            0,
            1,
            1,
            0x8cd1_cf01,
            40,
            0x0cc7_04b8,
            0xc4d3_4000,
            0,
            0,
        ]),
        rpc_reply(0x0cc7_04b8, &[], None).to_bytes(),
    ]));
    let _ = r.poll_action();
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(0x0cc7_04b8),
            error: HeaderError::ChunkOverrun.into()
        })
    );
}

#[test]
fn s7_backward_call_is_delivered_separately() {
    let mut r = Requester::new(
        small(),
        RequesterConfig {
            backward_credits: Some(2),
            ..RequesterConfig::default()
        },
    );
    let call = nfs_call(0x77, 0, &[], None).to_bytes();
    r.handle_receive(concat(&[words(&[0x77, 1, 1, 0, 0, 0, 0]), call.clone()]));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::BackwardCall {
            xid: Xid(0x77),
            payload: call
        })
    );
    assert_eq!(r.credits().outstanding(), 0, "forward credits untouched");
    // §7.3.5: RDMA_MSG, version one, the backward grant, empty lists, then the Reply.
    r.send_backward_reply(Xid(0x77), rpc_reply(0x77, &[], None))
        .unwrap();
    assert_eq!(
        sent(&mut r),
        concat(&[
            words(&[0x77, 1, 2, 0, 0, 0, 0]),
            rpc_reply(0x77, &[], None).to_bytes()
        ])
    );
    assert_eq!(
        r.send_backward_reply(Xid(0x77), rpc_reply(0x77, &[], None)),
        Err(MarshalError::NoBackwardChannel.into()),
        "answered once"
    );
}

/// §7.2.1 with §4.3.1: a backward Call beyond the grant (here 1, and one in service)
/// gets the RPC-layer error SYSTEM_ERR, never the upper layer; a retransmission of the
/// Call in service is dropped (its Reply answers both); once it is answered, the next
/// Call is served.
#[test]
fn s7_2_1_a_backward_call_beyond_the_grant_gets_system_err_and_a_duplicate_is_dropped() {
    let mut r = Requester::new(
        small(),
        RequesterConfig {
            backward_credits: Some(1),
            ..RequesterConfig::default()
        },
    );
    let backward = |xid: u32| {
        concat(&[
            words(&[xid, 1, 1, 0, 0, 0, 0]),
            nfs_call(xid, 0, &[], None).to_bytes(),
        ])
    };
    r.handle_receive(backward(0x70));
    assert!(matches!(
        r.poll_event(),
        Some(RequesterEvent::BackwardCall { xid: Xid(0x70), .. })
    ));
    r.handle_receive(backward(0x70));
    assert_eq!(r.poll_event(), None, "a retransmission in service: dropped");
    assert_eq!(r.poll_action(), None);
    r.handle_receive(backward(0x71));
    assert_eq!(r.poll_event(), None, "beyond the grant: not handed up");
    assert_eq!(
        sent(&mut r),
        concat(&[
            words(&[0x71, 1, 1, 0, 0, 0, 0]),
            rpc::system_err_reply(Xid(0x71))
        ])
    );
    r.send_backward_reply(Xid(0x70), rpc_reply(0x70, &[], None))
        .unwrap();
    let _ = sent(&mut r);
    r.handle_receive(backward(0x72));
    assert!(matches!(
        r.poll_event(),
        Some(RequesterEvent::BackwardCall { xid: Xid(0x72), .. })
    ));
}

#[test]
fn s7_3_1_backward_call_without_backward_channel_is_dropped() {
    let mut r = requester(small(), Version::ONE);
    let call = nfs_call(0x77, 0, &[], None).to_bytes();
    r.handle_receive(concat(&[words(&[0x77, 1, 1, 0, 0, 0, 0]), call]));
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.poll_action(), None);
}

#[test]
fn s7_2_1_pair_backward_calls_use_their_own_credits() {
    let ulb = small();
    let mut client = Requester::new(
        ulb.clone(),
        RequesterConfig {
            backward_credits: Some(2),
            ..RequesterConfig::default()
        },
    );
    let mut server = Responder::new(
        ulb,
        ResponderConfig {
            backward_credits: Some(8),
            ..ResponderConfig::default()
        },
    )
    .unwrap();
    // One forward exchange: the client learns the forward grant (64).
    client.start_call(Xid(1), null_call(1)).unwrap();
    server.handle_receive(sent(&mut client));
    let _ = server.poll_event();
    server.send_reply(Xid(1), rpc_reply(1, &[], None)).unwrap();
    let Some(Action::Send { send, .. }) = server.poll_action() else {
        panic!()
    };
    client.handle_receive(concat(&send));
    let _ = client.poll_event();
    assert_eq!(client.credits().limit(), 64);

    // §7.3.1: the client's upper layer said it takes backward Calls.
    server.handle_peer_backward_ready();
    assert_eq!(server.poll_action(), Some(Action::PostBackwardReceives(8)));
    // Backward: one Call until the client's first backward Reply (§4.3.3 applies to
    // the backward requester too), asking for 8.
    server
        .start_backward_call(nfs_call(0x900, 0, &[], None), ())
        .unwrap();
    // The second waits in the core for the credit, and a third of the same XID as
    // one in flight or waiting is refused (§7.1.4).
    server
        .start_backward_call(nfs_call(0x901, 0, &[], None), ())
        .unwrap();
    for dup in [0x900, 0x901] {
        assert_eq!(
            server.start_backward_call(nfs_call(dup, 0, &[], None), ()),
            Err((crate::responder::BackwardError::DuplicateXid(dup), ()))
        );
    }
    let Some(Action::Send { send, .. }) = server.poll_action() else {
        panic!()
    };
    assert_eq!(server.poll_action(), None, "0x901 waits for a credit");
    assert_eq!(&send[0][..], &words(&[0x900, 1, 8, 0, 0, 0, 0])[..]);
    client.handle_receive(concat(&send));
    let Some(RequesterEvent::BackwardCall { xid, .. }) = client.poll_event() else {
        panic!()
    };
    client
        .send_backward_reply(xid, rpc_reply(0x900, &[], None))
        .unwrap();
    server.handle_receive(sent(&mut client));
    assert_eq!(
        server.poll_event(),
        Some(ResponderEvent::BackwardReply {
            xid: Xid(0x900),
            payload: rpc_reply(0x900, &[], None).to_bytes(),
            token: (),
        })
    );
    let b = server.backward_credits().unwrap();
    assert_eq!(b.limit(), 2, "min(requested 8, client's backward grant 2)");
    assert_eq!(client.credits().limit(), 64, "forward credits unchanged");
    // The Reply returned the credit: the waiting Call went.
    assert_eq!(b.outstanding(), 1);
    assert!(matches!(
        server.poll_action(),
        Some(Action::Send {
            xid: Xid(0x901),
            ..
        })
    ));
}

#[test]
fn disconnect_fails_outstanding_calls_and_resets_credits() {
    let mut r = requester(small(), Version::TWO);
    r.start_call(Xid(1), null_call(1)).unwrap();
    r.handle_disconnect();
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(1),
            error: ReplyError::ConnectionLost.into()
        })
    );
    assert_eq!(r.credits().outstanding(), 0);
    assert_eq!(r.negotiation(), Negotiation::Settled(Version::ONE));
}

#[test]
fn s8_no_call_for_a_program_without_binding() {
    let mut r = requester(small(), Version::ONE);
    let mut e = xdr::Encoder::new();
    for w in [1u32, 0, 2, 100_005, 3, 0, 0, 0, 0, 0] {
        e.u32(w);
    }
    assert_eq!(
        r.start_call(Xid(1), e.finish()),
        Err(MarshalError::NoUpperLayerBinding.into())
    );
}

// ---- a requester and a responder over simulated registered memory ----

#[derive(Default)]
struct Memory {
    regions: HashMap<u32, Vec<u8>>,
    next: u32,
}

impl Memory {
    fn register(&mut self, data: Vec<u8>) -> Segment {
        self.next += 1;
        let h = 0xabc0_0000 | self.next;
        let len = data.len() as u32;
        self.regions.insert(h, data);
        Segment::new(h, len, 0)
    }
}

/// Runs one Call through both state machines; the responder's upper layer answers
/// with `answer(call payload)`. Returns the requester's event and what the requester's
/// Write chunks hold.
fn exchange(
    req: &mut Requester<TestUlb>,
    resp: &mut Responder<TestUlb>,
    xid: Xid,
    call: XdrStream,
    answer: impl Fn(Bytes) -> XdrStream,
) -> (RequesterEvent, Vec<Vec<u8>>, Memory) {
    let mut mem = Memory::default();
    let mut write_handles = Vec::new();
    req.start_call(xid, call).unwrap();
    while let Some(a) = req.poll_action() {
        match a {
            Action::Register { registrations, .. } => {
                let segs = registrations
                    .iter()
                    .map(|r| {
                        let seg = match r {
                            Registration::Read { data, .. } => mem.register(data.concat()),
                            Registration::Write { len } | Registration::Reply { len } => {
                                mem.register(vec![0; *len as usize])
                            }
                        };
                        if matches!(r, Registration::Write { .. }) {
                            write_handles.push(seg.handle);
                        }
                        vec![seg]
                    })
                    .collect();
                req.handle_registered(xid, segs).unwrap();
            }
            Action::Send { send, .. } => resp.handle_receive(concat(&send)),
            other => panic!("{other:?}"),
        }
    }
    while let Some(a) = resp.poll_action() {
        match a {
            Action::RdmaRead {
                xid,
                chunk,
                segments,
                ..
            } => {
                let data: Vec<u8> = segments
                    .iter()
                    .flat_map(|s| mem.regions[&s.handle][..s.length as usize].to_vec())
                    .collect();
                resp.handle_read_done(xid, chunk, Bytes::from(data));
            }
            other => panic!("{other:?}"),
        }
    }
    let Some(ResponderEvent::Call { payload, .. }) = resp.poll_event() else {
        panic!("no call")
    };
    resp.send_reply(xid, answer(payload.to_bytes())).unwrap();
    while let Some(a) = resp.poll_action() {
        match a {
            Action::RdmaWrite { write, .. } => {
                let r = mem.regions.get_mut(&write.handle).unwrap();
                let at = write.offset as usize;
                let data = write.data.concat();
                r[at..at + data.len()].copy_from_slice(&data);
            }
            Action::Send { send, .. } => req.handle_receive(concat(&send)),
            other => panic!("{other:?}"),
        }
    }
    let _ = req.poll_action(); // Invalidate
    let ev = req.poll_event().unwrap();
    let writes = write_handles
        .iter()
        .map(|h| mem.regions[h].clone())
        .collect();
    (ev, writes, mem)
}

#[test]
fn pair_nfs_read_moves_data_through_the_write_chunk() {
    let ulb = TestUlb {
        max_reply: 8192 + 120,
        ddp_results: vec![8192],
        call_ddp: 0,
    };
    let mut req = requester(ulb.clone(), Version::ONE);
    let mut resp = Responder::new(ulb, ResponderConfig::default()).unwrap();
    let file: Bytes = (0..5001u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    let f = file.clone();
    let (ev, writes, _) = exchange(
        &mut req,
        &mut resp,
        Xid(10),
        nfs_call(10, 6, &[1, 2, 3], None),
        move |_| rpc_reply(10, &[0; 3], Some(f.clone())),
    );
    let RequesterEvent::Reply {
        ref write_lengths,
        reply_chunk_len,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*write_lengths, vec![5001]);
    assert_eq!(reply_chunk_len, None);
    assert_eq!(&writes[0][..5001], &file[..]);
    // The Write chunk's region, whole (8192 bytes): the core takes the 5001 returned.
    let mut placed = super::PlacedBytes {
        reply: None,
        writes: vec![Bytes::from(writes[0].clone())],
    };
    let full = req
        .assemble_reply(super::ReplyParts::of(&ev).unwrap(), &mut placed)
        .unwrap();
    assert_eq!(full.chunk_ranges, vec![(40, 5001)]);
    assert_eq!(
        full.to_bytes(),
        rpc_reply(10, &[0; 3], Some(file)).to_bytes()
    );
}

#[test]
fn pair_nfs_write_moves_data_through_a_read_chunk() {
    let ulb = TestUlb {
        max_reply: 200,
        ddp_results: vec![],
        call_ddp: 1,
    };
    let mut req = requester(ulb.clone(), Version::ONE);
    let mut resp = Responder::new(ulb, ResponderConfig::default()).unwrap();
    let data: Bytes = vec![0x33; 3001].into();
    let call = nfs_call(11, 7, &[5, 6], Some(data.clone()));
    let expected = call.to_bytes();
    let (ev, _, _) = exchange(&mut req, &mut resp, Xid(11), call, move |payload| {
        assert_eq!(payload, expected);
        rpc_reply(11, &[], None)
    });
    assert!(matches!(ev, RequesterEvent::Reply { .. }), "{ev:?}");
}

#[test]
fn pair_long_call_and_long_reply() {
    let ulb = TestUlb {
        max_reply: 20_000,
        ddp_results: vec![],
        call_ddp: 0,
    };
    let mut req = requester(ulb.clone(), Version::ONE);
    let mut resp = Responder::new(ulb, ResponderConfig::default()).unwrap();
    let call = nfs_call(12, 16, &[9; 600], None);
    let expected = call.to_bytes();
    let reply = rpc_reply(12, &[4; 3000], None);
    let reply_bytes = reply.to_bytes();
    let (ev, _, mem) = exchange(&mut req, &mut resp, Xid(12), call, move |payload| {
        assert_eq!(payload, expected);
        reply.clone()
    });
    let RequesterEvent::Reply {
        inline,
        reply_chunk_len,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert!(inline.is_empty());
    assert_eq!(reply_chunk_len, Some(reply_bytes.len() as u64));
    let reply_region = mem.regions.values().find(|r| r.len() == 20_000).unwrap();
    assert_eq!(&reply_region[..reply_bytes.len()], &reply_bytes[..]);
    let _ = WriteChunk::default();
}

#[test]
fn s5_5_4_a_call_whose_registration_failed_is_forgotten_and_its_credit_returns() {
    let mut r = read_requester();
    let before = r.credits().outstanding();
    r.start_call(Xid(7), nfs_call(7, 6, &[0; 16], None))
        .unwrap();
    assert!(matches!(r.poll_action(), Some(Action::Register { .. })));
    assert_eq!(r.credits().outstanding(), before + 1);
    assert!(r.handle_registration_failed(Xid(7)));
    assert_eq!(r.credits().outstanding(), before);
    assert_eq!((r.poll_action(), r.poll_event()), (None, None));
    // Forgotten: a late registration or a second report finds nothing.
    assert!(r.handle_registered(Xid(7), vec![]).is_err());
    assert!(!r.handle_registration_failed(Xid(7)));
    // A Call already sent is not one to forget this way.
    r.start_call(Xid(8), nfs_call(8, 6, &[0; 16], None))
        .unwrap();
    assert!(matches!(r.poll_action(), Some(Action::Register { .. })));
    let segment = Segment {
        handle: 1,
        length: 4096,
        offset: 0,
    };
    r.handle_registered(Xid(8), vec![vec![segment]]).unwrap();
    assert!(matches!(r.poll_action(), Some(Action::Send { .. })));
    assert!(!r.handle_registration_failed(Xid(8)));
}

#[test]
fn v2_s5_a_probe_never_sent_leaves_the_version_unprobed() {
    let mut r = requester(
        TestUlb {
            max_reply: 4096 + 120,
            ddp_results: vec![4096],
            call_ddp: 0,
        },
        Version::TWO,
    );
    r.start_call(Xid(9), nfs_call(9, 6, &[0; 16], None))
        .unwrap();
    assert_eq!(r.negotiation(), Negotiation::Probing { xid: Xid(9) });
    assert!(r.handle_registration_failed(Xid(9)));
    assert_eq!(r.negotiation(), Negotiation::Unprobed);
}

#[test]
fn s5_5_4_failed_invalidation_closes_the_connection() {
    let mut r = requester(small(), Version::ONE);
    r.handle_invalidate_failed(Xid(1));
    assert_eq!(r.poll_action(), Some(Action::Close));
}

#[test]
fn s4_4_6_1_write_chunk_has_no_room_for_padding() {
    // An odd maximum: Linux adds a 4-byte pad segment; the spec says SHOULD NOT.
    let mut r = requester(
        TestUlb {
            max_reply: 4093 + 120,
            ddp_results: vec![4093],
            call_ddp: 0,
        },
        Version::ONE,
    );
    r.start_call(Xid(1), null_call(1)).unwrap();
    let Some(Action::Register { registrations, .. }) = r.poll_action() else {
        panic!()
    };
    assert_eq!(registrations, vec![Registration::Write { len: 4093 }]);
}

#[test]
fn rdma_msg_reply_with_a_used_reply_chunk_fails_the_call() {
    let mut r = requester(small(), Version::ONE);
    r.start_call(Xid(1), null_call(1)).unwrap();
    let _ = sent(&mut r);
    let reply = concat(&[
        words(&[1, 1, 64, 0, 0, 0, 1, 1, 9, 100, 0, 0]),
        rpc_reply(1, &[], None).to_bytes(),
    ]);
    r.handle_receive(reply);
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(1),
            error: HeaderError::ChunkOverrun.into()
        })
    );
}

// ---- Version Two optional features and reliable reply, requester side ----

fn v2_reliable_requester() -> Requester<TestUlb> {
    let mut r = Requester::new(
        small(),
        RequesterConfig {
            prefer: Version::TWO,
            reliable_reply: Some(crate::options::ReliableReplyInfo {
                remote_invalidate: false,
            }),
            ..RequesterConfig::default()
        },
    );
    r.start_call(Xid(1), null_call(1)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(concat(&[
        words(&[1, 2, 64, 0, 0, 0, 0]),
        rpc_reply(1, &[], None).to_bytes(),
    ]));
    assert!(matches!(r.poll_event(), Some(RequesterEvent::Reply { .. })));
    // The advertisement: RDMA_OPTIONAL(RELIABLE_REPLY), flags 0.
    assert_eq!(sent(&mut r), words(&[1, 2, 128, 5, 0x5252_5031, 4, 0]));
    r
}

#[test]
fn v2_s3_1_requester_answers_unknown_option_with_err_inval_option() {
    let mut r = requester(small(), Version::TWO);
    r.handle_receive(words(&[0x44, 2, 64, 5, 9, 0]));
    assert_eq!(sent(&mut r), words(&[0x44, 2, 128, 4, 3]));
    assert_eq!(r.poll_event(), None);
}

#[test]
fn rr_s4_1_2_failed_pull_still_sends_done() {
    let mut r = v2_reliable_requester();
    r.handle_receive(words(&[1, 2, 64, 5, 0x5252_5031, 4, 1]));
    assert!(r.reliable_reply_on());
    r.start_call(Xid(2), null_call(2)).unwrap();
    let _ = sent(&mut r);
    // RDMA_NOMSG, read list: P0, STag 0x77, 5000 bytes.
    r.handle_receive(words(&[2, 2, 63, 1, 1, 0, 0x77, 5000, 0, 0, 0, 0, 0]));
    assert_eq!(
        r.poll_action(),
        Some(Action::RdmaRead {
            xid: Xid(2),
            chunk: 0,
            segments: vec![Segment::new(0x77, 5000, 0)]
        })
    );
    r.handle_read_failed(Xid(2));
    // Our flags said no remote invalidation: a plain Send.
    assert_eq!(
        r.poll_action(),
        Some(Action::Send {
            xid: Xid(2),
            send: vec![words(&[2, 2, 128, 3])],
            invalidate: None
        })
    );
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(2),
            error: ReplyError::PullFailed.into()
        })
    );
    assert_eq!(r.credits().outstanding(), 0);
}

#[test]
fn rr_s4_1_3_read_chunk_reply_without_the_feature_gets_done_and_fails() {
    let mut r = v2_reliable_requester();
    // The responder refused the option.
    r.handle_receive(words(&[1, 2, 64, 4, 3]));
    assert!(!r.reliable_reply_on());
    assert_eq!(r.credits().outstanding(), 0);
    r.start_call(Xid(2), null_call(2)).unwrap();
    let _ = sent(&mut r);
    r.handle_receive(words(&[2, 2, 64, 1, 1, 0, 0x77, 5000, 0, 0, 0, 0, 0]));
    assert_eq!(sent(&mut r), words(&[2, 2, 128, 3]));
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid: Xid(2),
            error: HeaderError::ReadListInReply.into()
        })
    );
}

/// A requester with posted invalidation that sent the Linux READ Call (one Write
/// chunk) and received knfsd's Reply: the Invalidate is queued; returns the Reply's
/// inline part.
fn posted_read_replied(r: &mut Requester<TestUlb>) -> Bytes {
    let xid = Xid(0x0cc7_04b8);
    r.start_call(xid, nfs_call(0x0cc7_04b8, 6, &[0; 16], None))
        .unwrap();
    let Some(Action::Register { .. }) = r.poll_action() else {
        panic!()
    };
    r.handle_registered(
        xid,
        vec![vec![Segment::new(0x8cd1_cf01, 4096, 0x0cc7_04b8_c4d3_4000)]],
    )
    .unwrap();
    let _ = sent(r);
    let inline = rpc_reply(0x0cc7_04b8, &[0; 14], Some(Bytes::from_static(b"x"))).inline;
    r.handle_receive(concat(&[hex(READ_REPLY_WRITE_LIST), inline.clone()]));
    assert_eq!(
        r.poll_action(),
        Some(Action::Invalidate {
            xid,
            handles: vec![0x8cd1_cf01]
        })
    );
    inline
}

fn posted_requester() -> Requester<TestUlb> {
    Requester::new(
        TestUlb {
            max_reply: 4096 + 120,
            ddp_results: vec![4096],
            call_ddp: 0,
        },
        RequesterConfig {
            posted_invalidation: true,
            ..RequesterConfig::default()
        },
    )
}

#[test]
fn s5_4_1_with_posted_invalidation_the_reply_waits_until_its_chunks_are_fenced() {
    let mut r = posted_requester();
    let xid = Xid(0x0cc7_04b8);
    let inline = posted_read_replied(&mut r);
    // §5.4.1: not before the responder is fenced from the Write chunk.
    assert_eq!(r.poll_event(), None, "the Reply waits for the LOCAL_INV");
    assert!(!r.handle_invalidated(Xid(0xdead), 0x8cd1_cf01));
    assert!(!r.handle_invalidated(xid, 0x1234));
    assert_eq!(
        r.poll_event(),
        None,
        "another XID, or a handle of no region of this Call, releases nothing"
    );
    // The Reply is built from the Write chunk's bytes: the driver keeps them.
    assert!(r.wants_placed(xid, 0x8cd1_cf01));
    assert!(!r.wants_placed(xid, 0x1234));
    assert!(r.handle_invalidated(xid, 0x8cd1_cf01));
    assert!(!r.wants_placed(xid, 0x8cd1_cf01), "handed up");
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Reply {
            xid,
            inline,
            reply_chunk_len: None,
            write_lengths: vec![23],
            proc_id: Some(rpc::ProcId {
                prog: 100_003,
                vers: 3,
                proc_num: 6
            }),
            placed: PlacedHandles {
                reply: None,
                writes: vec![Some(0x8cd1_cf01)],
            },
        })
    );
    assert!(!r.handle_invalidated(xid, 0x8cd1_cf01), "once");
}

#[test]
fn s5_4_1_a_reply_still_being_fenced_when_the_connection_goes_fails() {
    let mut r = posted_requester();
    let xid = Xid(0x0cc7_04b8);
    posted_read_replied(&mut r);
    r.handle_disconnect();
    assert_eq!(
        r.poll_event(),
        Some(RequesterEvent::Failed {
            xid,
            error: ReplyError::ConnectionLost.into()
        })
    );
    assert!(!r.handle_invalidated(xid, 0x8cd1_cf01));
    assert_eq!(r.poll_event(), None);
}

/// §4.3.1: a requester keeps a Receive posted per credit. Every message received, a
/// Reply or one it refuses, gives its Receive back at once (`poll_reposts`), and only
/// once.
#[test]
fn s4_3_1_every_message_received_gives_its_receive_back_once() {
    let mut r = requester(small(), Version::ONE);
    assert_eq!(r.poll_reposts(), 0, "nothing received yet");
    r.start_call(Xid(0xa95c_540d), null_call(0xa95c_540d))
        .unwrap();
    let _ = sent(&mut r);
    r.handle_receive(hex(ERR_CHUNK_MSGP_KNFSD));
    r.handle_receive(Bytes::from_static(b"short"));
    assert_eq!(r.poll_reposts(), 2);
    assert_eq!(r.poll_reposts(), 0, "given back once");
}
