//! Pair scenarios: Version Two on the wire, responder-provided Read chunks, and the
//! backward direction, end to end through both state machines.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::chunks::ChunkLists;
use crate::error::ReplyError;
use crate::header::{Body, Header};
use crate::options::ReliableReplyInfo;
use crate::requester::{PlacedBytes, PlacedChunks, ReplyParts, RequesterConfig};
use crate::responder::{ReliableReplyConfig, ResponderConfig};
use crate::testutil::{nfs_call, rpc_reply};
use crate::validate::Policy;
use crate::version::Negotiation;
use crate::wire::Version;
use crate::Limits;

const CREDITS: u32 = 16;

fn ulb() -> TestUlb {
    // The largest reply this "procedure" may produce is huge: a Version One requester
    // must offer a 32 MiB Reply chunk for it (§5.3.3), a reliable-reply one offers none.
    TestUlb {
        max_reply: 32 << 20,
        ..TestUlb::default()
    }
}

fn client_config(prefer: Version, reliable: bool) -> RequesterConfig {
    RequesterConfig {
        prefer,
        credits: 32,
        reliable_reply: reliable.then_some(ReliableReplyInfo {
            remote_invalidate: true,
        }),
        backward_credits: Some(8),
        ..RequesterConfig::default()
    }
}

fn server_config(policy: Policy, reliable: bool) -> ResponderConfig {
    ResponderConfig {
        policy,
        credits: CREDITS,
        reliable_reply: reliable.then(|| ReliableReplyConfig {
            pull_timeout: Duration::from_secs(5),
            remote_invalidate: true,
        }),
        backward_credits: Some(4),
        ..ResponderConfig::default()
    }
}

fn pair(client: RequesterConfig, server: ResponderConfig) -> Pair {
    Pair::new(
        Requester::new(ulb(), client),
        Responder::new(ulb(), server).unwrap(),
        CREDITS,
    )
}

fn v2_pair() -> Pair {
    pair(
        client_config(Version::TWO, true),
        server_config(Policy::default(), true),
    )
}

fn header(w: &Wire) -> Header {
    Header::parse(&w.bytes, &Limits::default()).unwrap().header
}

/// A NULL-like call with `words` extra argument words.
fn call(xid: u32, words: usize) -> XdrStream {
    nfs_call(xid, 0, &vec![7; words], None)
}

fn reply_data(xid: u32, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(xid) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Runs one Call to completion and returns the client's event.
fn exchange(p: &mut Pair, xid: u32, words: usize) -> RequesterEvent {
    p.client.start_call(Xid(xid), call(xid, words)).unwrap();
    p.run();
    p.client_outcome(Xid(xid)).cloned().expect("no outcome")
}

fn reply_payload(ev: &RequesterEvent) -> Bytes {
    match ev {
        RequesterEvent::Reply {
            inline,
            reply_chunk_len: None,
            ..
        } => inline.clone(),
        other => panic!("{other:?}"),
    }
}

// ---- Version Two on the wire ----

#[test]
fn v2_s5_v2_client_and_v2_server_settle_on_v2_4096_and_reliable_reply() {
    let mut p = v2_pair();
    // The probe: a v2 Call no larger than 1024 bytes.
    let ev = exchange(&mut p, 1, 100);
    assert!(matches!(ev, RequesterEvent::Reply { .. }), "{ev:?}");
    let probe = &p.sent_by_client[0];
    assert_eq!(header(probe).version, Version::TWO);
    assert!(probe.bytes.len() <= 1024);
    assert_eq!(header(&p.sent_by_server[0]).version, Version::TWO);
    // v2 §5.1: "both peers use the default inline threshold value for RPC-over-RDMA
    // Version Two connections (4096 bytes)."
    assert_eq!(p.client.negotiation(), Negotiation::Settled(Version::TWO));
    assert_eq!(p.client.send_threshold(), 4096);
    // The option exchange followed the first Reply.
    assert_eq!(p.sent_by_client[1].msg_type(), Some(MsgType::RDMA_OPTIONAL));
    assert_eq!(p.sent_by_server[1].msg_type(), Some(MsgType::RDMA_OPTIONAL));
    assert!(p.client.reliable_reply_on());
    assert!(p.server.reliable_reply_peer().is_some());
    assert_eq!(
        p.client.credits().outstanding(),
        0,
        "the option's credit returned"
    );
    // A 3000-byte Call now goes Short in one Send (it would be Long under 1024).
    let before = p.sent_by_client.len();
    let ev = exchange(&mut p, 2, 740);
    assert!(matches!(ev, RequesterEvent::Reply { .. }));
    let sent = &p.sent_by_client[before];
    assert!(sent.bytes.len() > 2900 && sent.bytes.len() <= 4096);
    assert_eq!(header(sent).chunks(), Some(&ChunkLists::empty()));
    assert!(p.broken.is_none() && !p.closed);
}

#[test]
fn v2_s5_2_v2_client_to_v1_only_server_falls_back_and_does_not_loop_on_reconnect() {
    let mut p = pair(
        client_config(Version::TWO, true),
        server_config(Policy::v1_only(), true),
    );
    let ev = exchange(&mut p, 1, 10);
    assert!(matches!(ev, RequesterEvent::Reply { .. }), "{ev:?}");
    // ERR_VERS for the probe, then the same Call again in v1, answered in v1.
    let err = header(&p.sent_by_server[0]);
    assert_eq!(err.msg_type(), MsgType::RDMA_ERROR);
    assert_eq!(header(&p.sent_by_client[1]).version, Version::ONE);
    assert_eq!(header(&p.sent_by_server[1]).version, Version::ONE);
    assert_eq!(p.client.negotiation(), Negotiation::Settled(Version::ONE));
    assert_eq!(p.client.send_threshold(), 1024);
    assert!(!p.client.reliable_reply_on(), "no option exchange at v1");
    assert!(p
        .sent_by_client
        .iter()
        .all(|w| w.msg_type() != Some(MsgType::RDMA_OPTIONAL)));

    // The connection is lost; the transport keeps what the requester learned.
    p.client.handle_disconnect();
    let memo = p.client.next_connection();
    assert_eq!(memo, Negotiation::Settled(Version::ONE));
    let mut q = Pair::new(
        Requester::resume(ulb(), client_config(Version::TWO, true), memo),
        Responder::new(ulb(), server_config(Policy::v1_only(), true)).unwrap(),
        CREDITS,
    );
    let ev = exchange(&mut q, 2, 10);
    assert!(matches!(ev, RequesterEvent::Reply { .. }));
    assert_eq!(
        header(&q.sent_by_client[0]).version,
        Version::ONE,
        "no probe"
    );
    assert!(
        q.sent_by_server
            .iter()
            .all(|w| w.msg_type() != Some(MsgType::RDMA_ERROR)),
        "no ERR_VERS on the new connection"
    );
}

#[test]
fn v2_s5_3_v1_client_to_v2_server_is_answered_in_v1() {
    let mut p = pair(
        client_config(Version::ONE, true),
        server_config(Policy::default(), true),
    );
    let data = reply_data(1, 10 << 10);
    let d = data.clone();
    p.server_ulp = Box::new(move |xid, _| Some(rpc_reply(xid.0, &[], Some(d.clone()))));
    let ev = exchange(&mut p, 1, 10);
    // v1: the requester offered a Reply chunk (§5.3.3) and the reply came through it.
    let RequesterEvent::Reply {
        reply_chunk_len: Some(n),
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(n as usize, rpc_reply(1, &[], Some(data)).to_bytes().len());
    assert!(p
        .sent_by_server
        .iter()
        .all(|w| header(w).version == Version::ONE));
    assert!(
        p.sent_by_client
            .iter()
            .all(|w| header(w).version == Version::ONE
                && w.msg_type() != Some(MsgType::RDMA_OPTIONAL))
    );
    assert!(p.server.reliable_reply_peer().is_none());
}

#[test]
fn v2_s3_1_server_without_the_feature_answers_err_inval_option_and_reply_chunks_stay() {
    let mut p = pair(
        client_config(Version::TWO, true),
        server_config(Policy::default(), false),
    );
    exchange(&mut p, 1, 10);
    let refusal = header(&p.sent_by_server[1]);
    assert_eq!(
        refusal.body,
        Body::Error(crate::header::ErrorBody::InvalOption)
    );
    assert!(!p.client.reliable_reply_on());
    assert_eq!(p.client.credits().outstanding(), 0);
    // Without the feature, a big reply needs the Reply chunk, which is offered again.
    let data = reply_data(2, 10 << 10);
    let d = data.clone();
    p.server_ulp = Box::new(move |xid, _| Some(rpc_reply(xid.0, &[], Some(d.clone()))));
    let ev = exchange(&mut p, 2, 10);
    assert!(
        matches!(
            ev,
            RequesterEvent::Reply {
                reply_chunk_len: Some(_),
                ..
            }
        ),
        "{ev:?}"
    );
}

// ---- responder-provided Read chunks ----

fn settle(p: &mut Pair) {
    let ev = exchange(p, 0x100, 1);
    assert!(matches!(ev, RequesterEvent::Reply { .. }));
    assert!(p.client.reliable_reply_on());
}

fn big_replies(p: &mut Pair, len: usize) {
    p.server_ulp =
        Box::new(move |xid, _| Some(rpc_reply(xid.0, &[], Some(reply_data(xid.0, len)))));
}

#[test]
fn rr_s4_1_1_replies_of_10k_1m_16m_without_reply_chunk_come_through_read_chunks() {
    let mut p = v2_pair();
    settle(&mut p);
    for (xid, len) in [(10u32, 10usize << 10), (11, 1 << 20), (12, 16 << 20)] {
        big_replies(&mut p, len);
        let before_c = p.sent_by_client.len();
        let before_s = p.sent_by_server.len();
        let ev = exchange(&mut p, xid, 4);
        // The Call offered no Reply chunk although the reply may be 32 MiB
        // (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.3.1).
        let call_hdr = header(&p.sent_by_client[before_c]);
        assert_eq!(call_hdr.chunks().unwrap().reply, None);
        // The Reply: RDMA_NOMSG with one Position Zero Read chunk.
        let reply_hdr = header(&p.sent_by_server[before_s]);
        let Body::NoMsg(chunks) = &reply_hdr.body else {
            panic!("{reply_hdr:?}")
        };
        assert_eq!(chunks.reads.len(), 1);
        assert!(chunks.reads[0].is_position_zero());
        let expected = rpc_reply(xid, &[], Some(reply_data(xid, len))).to_bytes();
        assert_eq!(chunks.reads[0].len(), expected.len() as u64);
        assert_eq!(reply_payload(&ev), expected, "bytes match for {len}");
        // Pull completion: RDMA_DONE by Send With Invalidate of the one STag.
        let done = p.sent_by_client.last().unwrap();
        assert_eq!(done.msg_type(), Some(MsgType::RDMA_DONE));
        assert_eq!(done.bytes.len(), 16);
        assert_eq!(done.invalidate, Some(chunks.reads[0].segments[0].handle));
        assert_eq!(p.server.pending_pulls(), 0);
        assert!(p.server_mem.regions.is_empty(), "nothing left exposed");
    }
    assert!(p.broken.is_none() && !p.closed, "{:?}", p.broken);
    assert_eq!(p.server.credits().reserved_for_done(), 0);
}

#[test]
fn rr_s4_1_4_without_remote_invalidation_done_is_a_plain_send_and_server_invalidates() {
    let mut c = client_config(Version::TWO, true);
    c.reliable_reply = Some(ReliableReplyInfo {
        remote_invalidate: false,
    });
    let mut p = pair(c, server_config(Policy::default(), true));
    settle(&mut p);
    big_replies(&mut p, 100 << 10);
    exchange(&mut p, 5, 1);
    let done = p.sent_by_client.last().unwrap();
    assert_eq!(done.msg_type(), Some(MsgType::RDMA_DONE));
    assert_eq!(done.invalidate, None);
    assert!(p.server_mem.regions.is_empty());
}

#[test]
fn rr_s4_1_3_lost_done_is_invalidated_by_the_timeout_and_late_done_dropped() {
    let mut p = v2_pair();
    settle(&mut p);
    big_replies(&mut p, 64 << 10);
    p.drop_to_server = Box::new(|w| w.msg_type() == Some(MsgType::RDMA_DONE));
    let ev = exchange(&mut p, 20, 1);
    assert_eq!(reply_payload(&ev).len(), 64 * 1024 + 28);
    let lost = p.sent_by_client.last().unwrap().clone();
    assert_eq!(lost.msg_type(), Some(MsgType::RDMA_DONE));
    // Still exposed; one Receive is held back for the DONE (§5.2.3, our choice).
    assert_eq!(p.server.pending_pulls(), 1);
    assert_eq!(p.server_mem.regions.len(), 1);
    assert_eq!(p.server.credits().reserved_for_done(), 1);
    assert_eq!(p.server.credits().advertised(), CREDITS - 1);
    let deadline = p.server.poll_timeout().unwrap();
    assert_eq!(deadline, p.now + Duration::from_secs(5));
    // Not yet.
    p.server.handle_timeout(p.now + Duration::from_secs(4));
    assert_eq!(p.server.poll_action(), None);
    // The timeout invalidates it.
    p.now = deadline;
    p.server.handle_timeout(p.now);
    assert!(matches!(
        p.server.poll_action(),
        Some(Action::Invalidate { xid: Xid(20), .. })
    ));
    assert_eq!(p.server.pending_pulls(), 0);
    assert_eq!(p.server.poll_timeout(), None);
    // The Receive stays reserved: a late RDMA_DONE must not land in a Receive the
    // grant promised to a Call.
    assert_eq!(p.server.credits().reserved_for_done(), 1);
    // The late RDMA_DONE (and a repeat) are dropped silently; the first ends the
    // reservation, and each Receive goes back.
    p.server.handle_receive(lost.bytes.clone());
    assert_eq!(p.server.credits().reserved_for_done(), 0);
    p.server.handle_receive(lost.bytes);
    assert_eq!(p.server.credits().reserved_for_done(), 0);
    assert_eq!(p.server.poll_reposts(), 2);
    assert_eq!(p.server.poll_action(), None);
    assert_eq!(p.server.poll_event(), None);
    // The next Reply carries the whole grant again.
    p.drop_to_server = Box::new(|_| false);
    p.server_ulp = Box::new(|xid, _| Some(rpc_reply(xid.0, &[], None)));
    exchange(&mut p, 21, 1);
    assert_eq!(p.server.credits().advertised(), CREDITS);
    assert!(p.broken.is_none() && !p.closed);
}

#[test]
fn rr_s4_1_3_unknown_done_is_dropped_silently() {
    let mut p = v2_pair();
    settle(&mut p);
    let done = Header {
        xid: Xid(0xdead),
        version: Version::TWO,
        credits: 32,
        body: Body::Done,
    };
    p.server.handle_receive(done.to_bytes());
    assert_eq!(p.server.poll_action(), None);
    assert_eq!(p.server.poll_event(), None);
}

#[test]
fn rr_s5_1_3_aborted_call_still_gets_done_and_the_connection_survives() {
    let mut p = v2_pair();
    settle(&mut p);
    big_replies(&mut p, 256 << 10);
    // The server's upper layer holds the Call while the client gives up on it.
    let hold = std::rc::Rc::new(std::cell::Cell::new(true));
    let h = hold.clone();
    p.server_ulp = Box::new(move |xid, _| {
        (!h.get()).then(|| rpc_reply(xid.0, &[], Some(reply_data(xid.0, 256 << 10))))
    });
    p.client.start_call(Xid(30), call(30, 1)).unwrap();
    p.run();
    assert_eq!(p.server.pending_calls(), 1);
    assert!(p.client.abort_call(Xid(30)));
    // The credit stays taken until the Reply comes: the server still holds the
    // Receive the Call used (§4.3.1).
    assert_eq!(p.client.credits().outstanding(), 1);
    assert!(!p.client.abort_call(Xid(30)), "aborted once only");
    // Now the reply is sent: RDMA_NOMSG with a Read chunk for an XID the client forgot.
    hold.set(false);
    p.server
        .send_reply(Xid(30), rpc_reply(30, &[], Some(reply_data(30, 256 << 10))))
        .unwrap();
    p.run();
    assert_eq!(
        p.client_outcome(Xid(30)),
        None,
        "no event for an aborted call"
    );
    let done = p.sent_by_client.last().unwrap();
    assert_eq!(done.msg_type(), Some(MsgType::RDMA_DONE));
    assert_eq!(header(done).xid, Xid(30));
    assert_eq!(p.server.pending_pulls(), 0);
    assert!(p.server_mem.regions.is_empty());
    // The connection is intact: the next call works.
    let ev = exchange(&mut p, 31, 1);
    assert_eq!(reply_payload(&ev).len(), 256 * 1024 + 28);
    assert!(p.broken.is_none() && !p.closed, "{:?}", p.broken);
}

#[test]
fn rr_s5_4_3_disconnect_invalidates_exposed_read_chunks() {
    let mut p = v2_pair();
    settle(&mut p);
    big_replies(&mut p, 8 << 10);
    p.drop_to_server = Box::new(|w| w.msg_type() == Some(MsgType::RDMA_DONE));
    exchange(&mut p, 40, 1);
    assert_eq!(p.server_mem.regions.len(), 1);
    p.server.handle_disconnect();
    assert!(matches!(
        p.server.poll_action(),
        Some(Action::Invalidate { xid: Xid(40), .. })
    ));
    assert_eq!(p.server.pending_pulls(), 0);
    assert_eq!(p.server.credits().reserved_for_done(), 0);
}

#[test]
fn rr_s5_2_3_pulls_never_overrun_the_servers_receives() {
    // Many large replies at once with RDMA_DONEs in flight: Calls + DONEs queued at the
    // server never exceed its Receives (the harness breaks the connection if they do).
    let mut p = v2_pair();
    settle(&mut p);
    big_replies(&mut p, 6000);
    let mut next = 1000u32;
    while next < 1200 {
        while next < 1200 && p.client.start_call(Xid(next), call(next, 1)).is_ok() {
            next += 1;
        }
        p.step();
    }
    p.run();
    for x in 1000..1200 {
        assert_eq!(reply_payload(p.client_outcome(Xid(x)).unwrap()).len(), 6028);
    }
    assert!(p.broken.is_none(), "{:?}", p.broken);
    assert!(p.max_forward_in_flight <= CREDITS as usize);
    assert_eq!(p.server.pending_pulls(), 0);
}

// ---- the backward direction ----

#[test]
fn s7_3_1_no_backward_call_before_the_peer_says_it_is_ready() {
    let mut p = v2_pair();
    assert_eq!(
        p.server.start_backward_call(nfs_call(1, 0, &[], None), ()),
        Err((crate::responder::BackwardError::NotReady, ()))
    );
    p.client.open_backward_channel();
    p.server.handle_peer_backward_ready();
    p.run();
    assert_eq!(p.client_backward_receives, 8);
    assert_eq!(p.server_backward_receives, 4);
    p.server
        .start_backward_call(nfs_call(1, 0, &[], None), ())
        .unwrap();
    p.run();
    assert!(matches!(
        p.server_events.last(),
        Some(ResponderEvent::BackwardReply { xid: Xid(1), .. })
    ));
}

#[test]
fn s7_1000_backward_calls_interleaved_with_1000_forward_calls() {
    let mut p = v2_pair();
    // Both upper layers answer with the XID and a direction marker in the results, so
    // a Reply matched to the wrong Call would show.
    p.server_ulp = Box::new(|xid, call| {
        assert_eq!(rpc::msg_type(&call), Some(rpc::CALL));
        Some(rpc_reply(xid.0, &[0xf0f0, xid.0], None))
    });
    p.client_ulp = Box::new(|xid, call| {
        assert_eq!(rpc::msg_type(&call), Some(rpc::CALL));
        rpc_reply(xid.0, &[0xb0b0, xid.0], None)
    });
    p.client.open_backward_channel();
    p.server.handle_peer_backward_ready();
    p.run();
    // The same XID values in both directions (§7.1.4: "independent xid spaces").
    let (mut fwd, mut bwd) = (1u32, 1u32);
    while fwd <= 1000 || bwd <= 1000 {
        while fwd <= 1000 && p.client.start_call(Xid(fwd), call(fwd, 2)).is_ok() {
            fwd += 1;
        }
        while bwd <= 1000
            && p.server
                .start_backward_call(nfs_call(bwd, 0, &[bwd], None), ())
                .is_ok()
        {
            bwd += 1;
        }
        assert!(p.step(), "stalled at fwd {fwd} bwd {bwd}");
    }
    p.run();
    assert!(p.broken.is_none(), "{:?}", p.broken);
    for x in 1..=1000u32 {
        let fwd_reply = reply_payload(p.client_outcome(Xid(x)).unwrap());
        assert_eq!(fwd_reply, rpc_reply(x, &[0xf0f0, x], None).to_bytes());
    }
    let backward: Vec<_> = p
        .server_events
        .iter()
        .filter_map(|e| match e {
            ResponderEvent::BackwardReply { xid, payload, .. } => Some((*xid, payload.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(backward.len(), 1000);
    for (xid, payload) in backward {
        assert_eq!(payload, rpc_reply(xid.0, &[0xb0b0, xid.0], None).to_bytes());
    }
    let calls_seen = p
        .client_events
        .iter()
        .filter(|e| matches!(e, RequesterEvent::BackwardCall { .. }))
        .count();
    assert_eq!(calls_seen, 1000);
    // Credits: each direction within its own grant, nothing left outstanding.
    assert!(p.max_forward_in_flight <= CREDITS as usize);
    assert!(
        p.max_backward_in_flight <= 4,
        "server asked for 4 backward credits"
    );
    assert!(
        p.max_backward_in_flight > 1,
        "backward calls ran concurrently"
    );
    assert!(
        p.max_forward_in_flight > 1,
        "forward calls ran concurrently"
    );
    assert_eq!(p.client.credits().outstanding(), 0);
    assert_eq!(p.client.credits().limit(), CREDITS);
    let b = p.server.backward_credits().unwrap();
    assert_eq!((b.outstanding(), b.limit()), (0, 4));
    assert!(!p.server_events.iter().any(|e| matches!(
        e,
        ResponderEvent::Refused { .. } | ResponderEvent::BackwardFailed { .. }
    )));
}

#[test]
fn rr_s4_1_write_chunks_are_still_used_beside_the_read_chunk() {
    // An NFS READ-like reply: 5000 bytes of DDP-eligible data for the Write chunk, and 40
    // KB of other results that fit no inline Send: the data is RDMA-Written, the rest is
    // pulled (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1: "a responder must still make
    // use of Write chunks").
    let ulb = TestUlb {
        max_reply: 1 << 20,
        ddp_results: vec![8192],
        call_ddp: 0,
    };
    let mut p = Pair::new(
        Requester::new(ulb.clone(), client_config(Version::TWO, true)),
        Responder::new(ulb, server_config(Policy::default(), true)).unwrap(),
        CREDITS,
    );
    settle(&mut p);
    let file = reply_data(50, 5000);
    let f = file.clone();
    p.server_ulp =
        Box::new(move |xid, _| Some(rpc_reply(xid.0, &vec![9; 10_000], Some(f.clone()))));
    let before = p.sent_by_server.len();
    let c0 = p.sent_by_client.len();
    let ev = exchange(&mut p, 50, 1);
    let RequesterEvent::Reply {
        inline,
        write_lengths,
        reply_chunk_len: None,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(write_lengths, vec![5000]);
    let Body::NoMsg(chunks) = header(&p.sent_by_server[before]).body else {
        panic!()
    };
    assert!(chunks.reads[0].is_position_zero());
    assert_eq!(chunks.writes[0].len(), 5000);
    // The pulled stream is the reduced one; with the Write chunk data put back at its
    // position it is the whole reply.
    let position = 24 + 40_000 + 4;
    let ours = header(&p.sent_by_client[c0]).chunks().unwrap().writes[0].segments[0];
    assert_eq!(ours.length, 8192);
    let placed = Bytes::from(p.client_mem.fenced[&ours.handle][..5000].to_vec());
    assert_eq!(placed, file, "the RDMA Write placed the data");
    assert_eq!(inline.len(), position);
    // The requester put the Write chunk's data back into the pulled stream.
    let full = p.client_reply(Xid(50)).unwrap().unwrap();
    assert_eq!(full, rpc_reply(50, &vec![9; 10_000], Some(file)).to_bytes());
    assert!(p.server_mem.regions.is_empty() && p.broken.is_none());
}

mod random {
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Random reply sizes (inline, or pulled), RDMA_DONEs lost on purpose and Calls
        /// aborted before their Reply: every Reply that is delivered has the right
        /// bytes, and once the pull timeout has passed nothing stays exposed, no
        /// Receive stays reserved, no credit is lost and the connection never broke.
        #[test]
        fn rr_random_replies_lost_dones_and_aborts_leave_nothing_behind(
            ops in proptest::collection::vec((0usize..24_000, any::<bool>(), any::<bool>()), 1..24)
        ) {
            let mut p = v2_pair();
            settle(&mut p);
            let lens: Rc<RefCell<HashMap<u32, usize>>> = Rc::default();
            let drops: Rc<RefCell<HashSet<u32>>> = Rc::default();
            let l = lens.clone();
            p.server_ulp = Box::new(move |xid, _| {
                let n = l.borrow()[&xid.0];
                Some(rpc_reply(xid.0, &[], Some(reply_data(xid.0, n))))
            });
            let d = drops.clone();
            // A "dropped" RDMA_DONE arrives late: after the pull timeout invalidated
            // its chunk (the Receive stays reserved for it until then).
            let late: Rc<RefCell<Vec<Wire>>> = Rc::default();
            let held = late.clone();
            p.drop_to_server = Box::new(move |w| {
                let drop = w.msg_type() == Some(MsgType::RDMA_DONE)
                    && d.borrow().contains(&PrefixView::new_checked(&w.bytes[..]).unwrap().xid().0);
                if drop {
                    held.borrow_mut().push(w.clone());
                }
                drop
            });
            let mut aborted = HashSet::new();
            for (i, (len, drop_done, abort)) in ops.iter().enumerate() {
                let xid = 100 + i as u32;
                lens.borrow_mut().insert(xid, *len);
                if *drop_done {
                    drops.borrow_mut().insert(xid);
                }
                p.client.start_call(Xid(xid), call(xid, 1)).unwrap();
                if *abort {
                    prop_assert!(p.client.abort_call(Xid(xid)));
                    aborted.insert(xid);
                }
                p.run();
                if !late.borrow().is_empty() {
                    while let Some(t) = p.server.poll_timeout() {
                        p.now = t;
                        p.server.handle_timeout(t);
                        p.run();
                    }
                    let arriving: Vec<Wire> = late.borrow_mut().drain(..).collect();
                    p.to_server.extend(arriving);
                    p.run();
                }
            }
            // Lost RDMA_DONEs are covered by the timeout; a Reply that waited for a
            // reserved Receive goes out when one frees, and may need its own timeout.
            for _ in 0..ops.len() + 1 {
                let Some(t) = p.server.poll_timeout() else { break };
                p.now = t;
                p.server.handle_timeout(t);
                p.run();
            }
            prop_assert!(p.broken.is_none(), "{:?}", p.broken);
            prop_assert!(!p.closed);
            prop_assert!(p.server_mem.regions.is_empty());
            prop_assert_eq!(p.server.pending_pulls(), 0);
            prop_assert_eq!(p.server.credits().reserved_for_done(), 0);
            prop_assert_eq!(p.client.credits().outstanding(), 0);
            prop_assert_eq!(p.client.pending_pulls(), 0);
            for (i, (len, _, _)) in ops.iter().enumerate() {
                let xid = 100 + i as u32;
                let outcome = p.client_outcome(Xid(xid));
                if aborted.contains(&xid) {
                    prop_assert!(outcome.is_none());
                } else {
                    let expected = rpc_reply(xid, &[], Some(reply_data(xid, *len))).to_bytes();
                    prop_assert_eq!(reply_payload(outcome.unwrap()), expected.clone());
                    prop_assert_eq!(p.client_reply(Xid(xid)), Some(Ok(expected)));
                }
            }
        }
    }
}

// ---- the requester's reply reassembly (the transport's client runs the same) ----
//
// Every Reply the pair's client receives is put back together from the Call's fenced
// chunks by `Requester::assemble_reply`, as the transport's client does
// (`Pair::client_replies`).

/// A Version One pair (Reply chunks, no reliable reply) whose procedure has one
/// DDP-eligible result of at most `ddp_max` bytes (NFS READ-like), or none.
fn v1_read_pair(ddp_max: Option<u32>) -> Pair {
    let ulb = TestUlb {
        max_reply: 1 << 20,
        ddp_results: ddp_max.into_iter().collect(),
        call_ddp: 0,
    };
    Pair::new(
        Requester::new(ulb.clone(), client_config(Version::ONE, false)),
        Responder::new(ulb, server_config(Policy::v1_only(), false)).unwrap(),
        CREDITS,
    )
}

/// The server answers every Call with `extra` words and, if given, `data` as the
/// DDP-eligible result.
fn answer_with(p: &mut Pair, extra: Vec<u32>, data: Option<Bytes>) {
    p.server_ulp = Box::new(move |xid, _| Some(rpc_reply(xid.0, &extra, data.clone())));
}

/// Rewrites the chunk lists of each Reply the client receives (a lying responder).
fn tamper_chunks(p: &mut Pair, f: impl Fn(&mut ChunkLists) + 'static) {
    p.tamper_to_client = Box::new(move |w| {
        let Ok(parsed) = Header::parse(&w.bytes, &Limits::default()) else {
            return;
        };
        let mut h = parsed.header;
        match &mut h.body {
            Body::Msg(c) | Body::NoMsg(c) => f(c),
            _ => return,
        }
        let mut out = h.to_bytes().to_vec();
        out.extend_from_slice(&w.bytes[parsed.header_len..]);
        w.bytes = out.into();
    });
}

#[test]
fn s5_3_2_an_inline_reply_is_the_reply() {
    // A Short Reply (§4.5.1): the Payload stream came inline, no chunk was written
    // (a Reply chunk was offered and not used), and nothing needs a region.
    let mut p = v1_read_pair(None);
    answer_with(&mut p, vec![5; 30], None);
    let ev = exchange(&mut p, 70, 1);
    let RequesterEvent::Reply {
        reply_chunk_len: None,
        ref write_lengths,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert!(write_lengths.is_empty());
    let expected = rpc_reply(70, &[5; 30], None).to_bytes();
    assert_eq!(p.client_reply(Xid(70)), Some(Ok(expected.clone())));
    // A driver with no region at all for the Call gets the same Reply.
    let parts = ReplyParts::of(&ev).unwrap();
    assert!(parts.is_inline_only());
    let r = p
        .client
        .assemble_reply(parts, &mut PlacedBytes::default())
        .unwrap();
    assert_eq!((r.to_bytes(), r.chunk_ranges), (expected, vec![]));
    assert!(p.broken.is_none());
}

#[test]
fn s5_3_3_a_reply_in_the_reply_chunk_is_the_reply() {
    // A Long Reply (§4.5.3): 40 KB fit no inline Send, so the responder RDMA-Writes
    // the whole Payload stream into our Reply chunk and sends RDMA_NOMSG; the Reply is
    // the first `reply_chunk_len` bytes of that chunk, not the rest of it.
    let mut p = v1_read_pair(None);
    answer_with(&mut p, vec![6; 10_000], None);
    let c0 = p.sent_by_client.len();
    let ev = exchange(&mut p, 71, 1);
    let RequesterEvent::Reply {
        ref inline,
        reply_chunk_len: Some(len),
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    let expected = rpc_reply(71, &[6; 10_000], None).to_bytes();
    assert!(inline.is_empty());
    assert_eq!(len, expected.len() as u64);
    let offered = header(&p.sent_by_client[c0])
        .chunks()
        .unwrap()
        .reply
        .clone();
    assert!(
        offered.unwrap().len() > len,
        "the chunk is larger than the Reply"
    );
    assert_eq!(p.client_reply(Xid(71)), Some(Ok(expected)));
    assert!(p.broken.is_none());
}

#[test]
fn s4_4_6_1_read_data_through_a_write_chunk_gets_its_xdr_padding_back() {
    // An NFS READ-like Reply, RDMA_MSG: its inline part up to the data's count word,
    // the data RDMA-Written into our Write chunk without XDR padding (§4.4.6.1), its
    // length returned in the Write list (§4.4.6). The requester inserts the data after
    // the count and supplies the padding (§5.3.2): the Reply is byte for byte what the
    // responder's upper layer encoded, for every length modulo 4, and 0.
    for (xid, len) in [
        (80u32, 5000usize),
        (81, 5001),
        (82, 5002),
        (83, 5003),
        (84, 0),
    ] {
        let mut p = v1_read_pair(Some(8192));
        let file = reply_data(xid, len);
        answer_with(&mut p, vec![1, 2, 3], Some(file.clone()));
        let c0 = p.sent_by_client.len();
        let s0 = p.sent_by_server.len();
        let ev = exchange(&mut p, xid, 1);
        let RequesterEvent::Reply {
            ref inline,
            reply_chunk_len: None,
            ref write_lengths,
            ..
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert_eq!(*write_lengths, vec![len as u64]);
        let sent = header(&p.sent_by_server[s0]);
        assert_eq!(sent.msg_type(), MsgType::RDMA_MSG);
        assert_eq!(
            sent.chunks().unwrap().writes[0].len(),
            len as u64,
            "no padding"
        );
        // Header, three words, the count: the data goes back at 40.
        assert_eq!(inline.len(), 40);
        // The Write chunk was fenced before the Reply was handed up (§5.4.1).
        let ours = header(&p.sent_by_client[c0]).chunks().unwrap().writes[0].segments[0];
        assert!(!p.client_mem.regions.contains_key(&ours.handle));
        assert!(p.client_mem.fenced.contains_key(&ours.handle));
        let full = p.client_replies[&Xid(xid)].clone().unwrap();
        let expected = rpc_reply(xid, &[1, 2, 3], Some(file)).to_bytes();
        assert_eq!(full.len(), 40 + len + xdr::pad_len(len), "len {len}");
        assert_eq!(full.to_bytes(), expected, "len {len}");
        let ranges = if len == 0 {
            vec![]
        } else {
            vec![(40, len as u32)]
        };
        assert_eq!(full.chunk_ranges, ranges);
        assert!(p.broken.is_none());
    }
}

#[test]
fn s5_3_2_a_reply_through_a_write_chunk_and_the_reply_chunk_is_reassembled() {
    // Version One, an NFS READ-like reply: 5000 bytes of DDP-eligible data for the
    // Write chunk, and 40 KB of other results that fit no inline Send: the data is
    // RDMA-Written into the Write chunk, the rest into the Reply chunk (RDMA_NOMSG,
    // §4.4.6.2), and the requester puts the data back where its result is (§5.3.2).
    let mut p = v1_read_pair(Some(8192));
    let file = reply_data(60, 5000);
    answer_with(&mut p, vec![9; 10_000], Some(file.clone()));
    let c0 = p.sent_by_client.len();
    let s0 = p.sent_by_server.len();
    let ev = exchange(&mut p, 60, 1);
    let RequesterEvent::Reply {
        ref inline,
        reply_chunk_len: Some(reply_len),
        ref write_lengths,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*write_lengths, vec![5000]);
    assert!(
        inline.is_empty(),
        "RDMA_NOMSG: the stream is in the Reply chunk"
    );
    let Body::NoMsg(back) = header(&p.sent_by_server[s0]).body else {
        panic!()
    };
    assert_eq!(back.writes[0].len(), 5000);
    let full = p.client_replies[&Xid(60)].clone().unwrap();
    assert_eq!(full.chunk_ranges, vec![(24 + 40_000 + 4, 5000)]);
    let expected = rpc_reply(60, &vec![9; 10_000], Some(file.clone())).to_bytes();
    assert_eq!(full.to_bytes(), expected);
    // The same through `PlacedBytes`, each chunk's region whole as a driver keeps it.
    let ours = header(&p.sent_by_client[c0]).chunks().unwrap().clone();
    let region = |h: u32| Bytes::from(p.client_mem.fenced[&h].clone());
    let mut placed = PlacedBytes {
        reply: Some(region(ours.reply.as_ref().unwrap().segments[0].handle)),
        writes: vec![region(ours.writes[0].segments[0].handle)],
    };
    assert_eq!(placed.writes[0].slice(..5000), file);
    assert_eq!(placed.reply.as_ref().unwrap().len(), 1 << 20);
    let parts = ReplyParts::of(&ev).unwrap();
    let again = p.client.assemble_reply(parts, &mut placed).unwrap();
    assert_eq!(again.to_bytes(), expected);
    // Nothing placed in the Write chunk: the Reply chunk's stream as it is.
    let lengths = [0];
    let unplaced = ReplyParts {
        write_lengths: &lengths,
        ..parts
    };
    assert_eq!(
        p.client
            .assemble_reply(unplaced, &mut placed)
            .unwrap()
            .to_bytes(),
        region(ours.reply.as_ref().unwrap().segments[0].handle).slice(..reply_len as usize)
    );
    assert!(p.broken.is_none());
}

/// A `PlacedChunks` that hands out fewer bytes than asked (a buggy driver).
struct Short;

impl PlacedChunks for Short {
    fn reply_chunk(&mut self, len: usize) -> Option<Bytes> {
        Some(Bytes::from(vec![0; len / 2]))
    }
    fn write_chunk(&mut self, _: usize, len: usize) -> Option<Bytes> {
        Some(Bytes::from(vec![0; len / 2]))
    }
}

#[test]
fn s5_3_2_a_reply_that_cannot_be_put_back_together_is_a_typed_error() {
    // A real Reply with data in the Write chunk and the stream in the Reply chunk,
    // assembled against placed memory that does not hold it: each case is a
    // `ReplyError` (the Call fails, the connection stays), never a panic.
    let mut p = v1_read_pair(Some(8192));
    let file = reply_data(90, 5001);
    answer_with(&mut p, vec![9; 10_000], Some(file.clone()));
    let ev = exchange(&mut p, 90, 1);
    let parts = ReplyParts::of(&ev).unwrap();
    let (reply_len, data_len) = (parts.reply_chunk_len.unwrap() as usize, 5001);
    let good = p.client_replies[&Xid(90)].clone().unwrap();
    let stream = good.parts[0].clone();
    assert_eq!(stream.len(), reply_len);
    let placed = |reply: usize, write: usize| PlacedBytes {
        reply: Some(Bytes::from(vec![0; reply])),
        writes: vec![file.slice(..write.min(file.len()))],
    };
    let client = &p.client;
    let assemble = |parts: ReplyParts<'_>, placed: &mut dyn PlacedChunks| {
        client.assemble_reply(parts, placed).map(|r| r.len())
    };
    // The Call's chunks have no regions at all (the driver lost them).
    assert_eq!(
        assemble(parts, &mut PlacedBytes::default()),
        Err(ReplyError::ReplyChunkNotPlaced {
            len: reply_len as u64
        })
    );
    // Returned lengths larger than what was provisioned (placed).
    assert_eq!(
        assemble(parts, &mut placed(reply_len - 1, data_len)),
        Err(ReplyError::ReplyChunkNotPlaced {
            len: reply_len as u64
        })
    );
    assert_eq!(
        assemble(parts, &mut placed(reply_len, data_len - 1)),
        Err(ReplyError::WriteChunkNotPlaced {
            index: 0,
            len: data_len as u64
        })
    );
    let huge = [u64::MAX];
    let lying = ReplyParts {
        reply_chunk_len: Some(u64::MAX),
        ..parts
    };
    assert_eq!(
        assemble(lying, &mut placed(reply_len, data_len)),
        Err(ReplyError::ReplyChunkNotPlaced { len: u64::MAX })
    );
    let lying = ReplyParts {
        write_lengths: &huge,
        ..parts
    };
    assert_eq!(
        assemble(lying, &mut placed(reply_len, data_len)),
        Err(ReplyError::WriteChunkNotPlaced {
            index: 0,
            len: u64::MAX
        })
    );
    // A driver that hands out fewer bytes than asked is caught too.
    assert_eq!(
        assemble(parts, &mut Short),
        Err(ReplyError::ReplyChunkNotPlaced {
            len: reply_len as u64
        })
    );
    // A second Write chunk the Call never offered.
    let two = [data_len as u64, 4];
    let extra = ReplyParts {
        write_lengths: &two,
        ..parts
    };
    assert_eq!(
        assemble(extra, &mut placed(reply_len, data_len)),
        Err(ReplyError::WriteChunkNotPlaced { index: 1, len: 4 })
    );
    // The stream's count word (5001) disagrees with the returned length (§4.4.4.1,
    // §8.1.1).
    let mut real = PlacedBytes {
        reply: Some(stream.clone()),
        writes: vec![file.clone()],
    };
    let fewer = [4000];
    let short = ReplyParts {
        write_lengths: &fewer,
        ..parts
    };
    assert_eq!(
        assemble(short, &mut real),
        Err(ReplyError::WriteChunkLengthMismatch {
            index: 0,
            in_stream: 5001,
            chunk: 4000
        })
    );
    // Without the Call's procedure, or with a binding that finds no results, placed
    // data cannot go back.
    let anonymous = ReplyParts {
        proc_id: None,
        ..parts
    };
    assert_eq!(assemble(anonymous, &mut real), Err(ReplyError::NoProcedure));
    let blind = Requester::new(TestUlb::default(), RequesterConfig::default());
    assert_eq!(
        blind.assemble_reply(parts, &mut real).map(|r| r.len()),
        Err(ReplyError::ResultsNotFound)
    );
    // And the real memory still gives the Reply.
    assert_eq!(assemble(parts, &mut real), Ok(good.len()));
    assert!(p.broken.is_none());
}

#[test]
fn s4_4_6_a_responder_returning_more_than_was_provisioned_fails_the_call() {
    // §4.4.6: the responder returns the lengths it wrote; one larger than the chunk
    // we offered (a Write chunk, or the Reply chunk) is refused before anything is
    // read from our memory: the Call fails with a typed error, its credit returns and
    // the connection stays. A returned length shorter than the result's count fails
    // the assembly instead.
    let mut p = v1_read_pair(Some(8192));
    tamper_chunks(&mut p, |c| {
        if let Some(w) = c.writes.first_mut() {
            w.segments[0].length = 8192 + 4;
        }
    });
    answer_with(&mut p, vec![1], Some(reply_data(1, 8192)));
    let ev = exchange(&mut p, 100, 1);
    assert!(
        matches!(
            ev,
            RequesterEvent::Failed {
                error: crate::Error::Header(crate::HeaderError::ChunkOverrun),
                ..
            }
        ),
        "{ev:?}"
    );
    assert!(!p.client_replies.contains_key(&Xid(100)));

    tamper_chunks(&mut p, |c| {
        if let Some(r) = c.reply.as_mut() {
            // We offered 1 MiB.
            r.segments[0].length = (1 << 20) + 4;
        }
    });
    answer_with(&mut p, vec![9; 10_000], None);
    let ev = exchange(&mut p, 101, 1);
    assert!(
        matches!(
            ev,
            RequesterEvent::Failed {
                error: crate::Error::Header(crate::HeaderError::ChunkOverrun),
                ..
            }
        ),
        "{ev:?}"
    );

    tamper_chunks(&mut p, |c| {
        if let Some(w) = c.writes.first_mut() {
            w.segments[0].length = 3000;
        }
    });
    answer_with(&mut p, vec![1], Some(reply_data(2, 5000)));
    let ev = exchange(&mut p, 102, 1);
    assert!(matches!(ev, RequesterEvent::Reply { .. }), "{ev:?}");
    assert_eq!(
        p.client_reply(Xid(102)),
        Some(Err(ReplyError::WriteChunkLengthMismatch {
            index: 0,
            in_stream: 5000,
            chunk: 3000
        }))
    );

    // Honest again: the connection and its credits are intact.
    p.tamper_to_client = Box::new(|_| {});
    let file = reply_data(3, 6000);
    answer_with(&mut p, vec![1], Some(file.clone()));
    exchange(&mut p, 103, 1);
    assert_eq!(
        p.client_reply(Xid(103)),
        Some(Ok(rpc_reply(103, &[1], Some(file)).to_bytes()))
    );
    assert_eq!(p.client.credits().outstanding(), 0);
    assert!(p.broken.is_none() && !p.closed);
}
