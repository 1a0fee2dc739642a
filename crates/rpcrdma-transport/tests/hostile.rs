//! Hostile requesters against the server: each gets the spec's answer, and the server
//! keeps serving its other clients (a well-behaved client calls before and after).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use iwarp::IwarpQp;
use oncrpc::{CallHeader, OpaqueAuth, Xid as RpcXid};
use rdma::{
    Access, LocalSge, MemoryRegion, ProtectionDomain, QueuePair, QueuePairExt, RecvWr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use rpcrdma::header::{Body, ErrorBody, Header};
use rpcrdma::validate::{receive, Policy, Received};
use rpcrdma::{ChunkLists, ReadChunk, Segment, Version, WriteChunk, Xid};
use rpcrdma_transport::{Counter, RdmaConfig};
use xdr::{Encode, Encoder};

/// A requester written by hand on the raw provider API.
struct Raw {
    qp: IwarpQp,
    pd: ProtectionDomain,
    bufs: Vec<MemoryRegion>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        Raw::connect_with(addr, RdmaConfig::default().private_data().emit().to_vec()).await
    }

    /// Connects offering `private_data` (empty: none, as a peer without RFC 8797).
    async fn connect_with(addr: SocketAddr, private_data: Vec<u8>) -> Raw {
        let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
        let bufs: Vec<MemoryRegion> = (0..16)
            .map(|_| pd.register_zeroed(65536, Access::LOCAL_WRITE).unwrap())
            .collect();
        let recvs = bufs
            .iter()
            .enumerate()
            .map(|(i, mr)| RecvWr {
                wr_id: i as u64,
                sgl: vec![LocalSge {
                    mr: mr.clone(),
                    offset: 0,
                    len: 65536,
                }],
            })
            .collect();
        let qp = iwarp()
            .connect(
                addr,
                &pd,
                rdma::ConnectParams {
                    private_data: Bytes::from(private_data),
                    ..RdmaConfig::default().connect_params(recvs)
                },
            )
            .await
            .unwrap();
        Raw {
            qp,
            pd: pd.into(),
            bufs,
        }
    }

    /// Posts a Send; false once the connection is gone (the server may end it).
    fn send(&self, msg: Bytes) -> bool {
        self.qp
            .post_send(SendWr {
                wr_id: 1 << 40,
                op: SendOp::Send,
                sgl: vec![self.pd.sge(msg).unwrap()],
            })
            .is_ok()
    }

    /// The next message received, or `None` once the connection is gone (or 5 s).
    async fn recv(&self) -> Option<Bytes> {
        self.recv_within(Duration::from_secs(5)).await
    }

    /// The next message received within `limit`.
    async fn recv_within(&self, limit: Duration) -> Option<Bytes> {
        loop {
            let c = tokio::time::timeout(limit, self.qp.completion())
                .await
                .ok()??;
            if c.opcode == WcOpcode::Recv && c.status == WcStatus::Success {
                let mr = &self.bufs[c.wr_id as usize];
                let b = mr.read(0, c.byte_len).unwrap();
                self.qp
                    .post_recv(RecvWr {
                        wr_id: c.wr_id,
                        sgl: vec![LocalSge {
                            mr: mr.clone(),
                            offset: 0,
                            len: 65536,
                        }],
                    })
                    .ok()?;
                return Some(b);
            }
        }
    }

    /// Waits until the connection has ended.
    async fn closed(&self) -> bool {
        tokio::time::timeout(Duration::from_secs(5), async {
            while self.qp.completion().await.is_some() {}
        })
        .await
        .is_ok()
    }
}

/// The first server connection to have closed (waits up to 5 s).
async fn wait_closed(stats: &rpcrdma_transport::StatsRegistry) -> rpcrdma_transport::Snapshot {
    for _ in 0..500 {
        if let Some(s) = stats.snapshots().into_iter().find(|s| !s.open) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no server connection closed");
}

fn rpc_call(xid: u32, prog: u32, proc_: u32, args: impl FnOnce(&mut Encoder)) -> Bytes {
    let mut e = Encoder::new();
    CallHeader::new(RpcXid(xid), prog, VERS, proc_, OpaqueAuth::none()).encode(&mut e);
    args(&mut e);
    e.finish().to_bytes()
}

fn msg(xid: u32, chunks: ChunkLists, payload: &[u8]) -> Bytes {
    let h = Header {
        xid: Xid(xid),
        version: Version::ONE,
        credits: 8,
        body: Body::Msg(chunks),
    };
    let mut b = BytesMut::new();
    h.emit(&mut b);
    b.put_slice(payload);
    b.freeze()
}

fn expect_error(reply: Option<Bytes>, xid: u32) -> ErrorBody {
    let reply = reply.expect("no answer");
    match receive(&reply, &Policy::default()).unwrap() {
        Received::Error { prefix, body } => {
            assert_eq!(prefix.xid, Xid(xid));
            body
        }
        other => panic!("expected RDMA_ERROR, got {other:?}"),
    }
}

/// The accept_stat of an RPC reply sent inline.
fn accept_stat(reply: Option<Bytes>, xid: u32) -> u32 {
    let reply = reply.expect("no answer");
    match receive(&reply, &Policy::default()).unwrap() {
        Received::Msg {
            prefix, payload, ..
        } => {
            assert_eq!(prefix.xid, Xid(xid));
            u32::from_be_bytes(payload[20..24].try_into().unwrap())
        }
        other => panic!("expected RDMA_MSG, got {other:?}"),
    }
}

async fn null_works(raw: &Raw, xid: u32) {
    assert!(raw.send(msg(
        xid,
        ChunkLists::empty(),
        &rpc_call(xid, PROG, NULL, |_| {}),
    )));
    assert_eq!(
        accept_stat(raw.recv().await, xid),
        0,
        "NULL after the attack"
    );
}

async fn good_client_works(c: &oncrpc::Client) {
    let data = pattern(70_001, 5);
    assert!(echo(c, data.clone()).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_credit_limit_end_that_connection_only() {
    init_tracing();
    let server = start_server(RdmaConfig {
        credits: 2,
        ..RdmaConfig::default()
    })
    .await;
    let (good, _) = client(server.addr, RdmaConfig::default());
    good_client_works(&good).await;
    let raw = Raw::connect(server.addr).await;
    // Two SLOW calls hold both credits; the third finds no Receive posted.
    // §4.3.1: "If the limit is exceeded, the RDMA layer may signal an error, possibly
    // terminating the connection."
    for xid in 1..=6u32 {
        let call = rpc_call(xid, PROG, SLOW, |e| {
            e.opaque(b"abc");
        });
        let _ = raw.send(msg(xid, ChunkLists::empty(), &call));
    }
    assert!(
        raw.closed().await,
        "connection survived calls past the grant"
    );
    good_client_works(&good).await;
    for s in server.stats.snapshots() {
        eprintln!("{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_segments_get_err_badheader() {
    init_tracing();
    let server = start_server(RdmaConfig::with_inline(65536)).await;
    let (good, _) = client(server.addr, RdmaConfig::default());
    let raw = Raw::connect(server.addr).await;
    // A Write chunk that claims 1,000,000 segments (and carries two).
    let xid = 0x1000;
    let mut b = BytesMut::new();
    for w in [
        xid, 1, 8, 0, /* read list */ 0, /* write list */ 1, 1_000_000,
    ] {
        b.put_u32(w);
    }
    for _ in 0..2 {
        b.put_slice(&[0u8; 16]);
    }
    assert!(raw.send(b.freeze()));
    assert_eq!(expect_error(raw.recv().await, xid), ErrorBody::BadHeader);
    // A Read list of 1000 segments that are really there (24 KB of header).
    let xid = 0x1001;
    let call = rpc_call(xid, PROG, NULL, |_| {});
    let chunks = ChunkLists {
        reads: (0..1000)
            .map(|i| ReadChunk {
                position: 4 * i,
                segments: vec![Segment {
                    handle: 1,
                    length: 4,
                    offset: 0,
                }],
            })
            .collect(),
        writes: vec![],
        reply: None,
    };
    assert!(raw.send(msg(xid, chunks, &call)));
    assert_eq!(expect_error(raw.recv().await, xid), ErrorBody::BadHeader);
    // Version 7: ERR_VERS with our range (§5.5.1).
    let xid = 0x1002;
    let mut b = BytesMut::new();
    for w in [xid, 7, 8, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    assert!(raw.send(b.freeze()));
    assert_eq!(
        expect_error(raw.recv().await, xid),
        ErrorBody::Vers {
            low: Version::ONE,
            high: Version::ONE
        }
    );
    null_works(&raw, 0x1003).await;
    good_client_works(&good).await;
    let s = server.stats.snapshots();
    let srv = s.iter().find(|s| s.get(Counter::ErrBadHeader) > 0).unwrap();
    assert_eq!(srv.get(Counter::ErrBadHeader), 2);
    assert_eq!(srv.get(Counter::ErrVers), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_chunk_with_an_invalid_stag_ends_that_connection_only() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let (good, _) = client(server.addr, RdmaConfig::default());
    good_client_works(&good).await;
    let raw = Raw::connect(server.addr).await;
    let xid = 0x2000;
    let call = rpc_call(xid, PROG, GEN, |e| {
        e.u32(5000);
    });
    let chunks = ChunkLists {
        reads: vec![],
        writes: vec![WriteChunk::new(vec![Segment {
            handle: 0xdead_beef,
            length: 5000,
            offset: 0,
        }])],
        reply: None,
    };
    assert!(raw.send(msg(xid, chunks, &call)));
    // §5.5.3: "If chunk contents are invalid (say, a segment is no longer registered
    // ...), a Remote Access error occurs. RDMA operational errors are typically fatal
    // to the connection." Our provider answers the bad Write with a Terminate.
    assert!(raw.closed().await, "connection survived an invalid STag");
    good_client_works(&good).await;
    // The requester's provider refused the RDMA Write and sent a Terminate.
    let closed = wait_closed(&server.stats).await;
    eprintln!("{closed}");
    assert!(closed
        .close_reason
        .as_deref()
        .is_some_and(|r| r.starts_with("RemoteError")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_chunk_too_small_gets_err_badheader_and_nothing_written() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let (good, _) = client(server.addr, RdmaConfig::default());
    let raw = Raw::connect(server.addr).await;
    let reply_mr = raw
        .pd
        .register_zeroed(100, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let xid = 0x3000;
    let call = rpc_call(xid, PROG, BIG, |e| {
        e.u32(8000).opaque(b"");
    });
    let chunks = ChunkLists {
        reads: vec![],
        writes: vec![],
        reply: Some(WriteChunk::new(vec![Segment {
            handle: reply_mr.stag().0,
            length: 100,
            offset: 0,
        }])),
    };
    assert!(raw.send(msg(xid, chunks, &call)));
    // §5.5.3: "A responder can detect this problem before attempting to write past the
    // end of the Reply chunk" ... "RDMA_ERROR reply with an rdma_err value of
    // RDMA_ERR_BADHEADER".
    assert_eq!(expect_error(raw.recv().await, xid), ErrorBody::BadHeader);
    assert!(
        reply_mr.with(|b| b.iter().all(|&x| x == 0)),
        "reply chunk written"
    );
    null_works(&raw, 0x3001).await;
    good_client_works(&good).await;
    let s = server.stats.snapshots();
    assert_eq!(
        s.iter()
            .map(|s| s.get(Counter::ErrReplyChunkTooSmall))
            .sum::<u64>(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_ddp_item_in_a_read_chunk_gets_garbage_args() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let raw = Raw::connect(server.addr).await;
    let src = raw
        .pd
        .register(BytesMut::from(&b"12345678"[..]), Access::REMOTE_READ)
        .unwrap();
    let xid = 0x4000;
    // BIG's `pad` is not DDP-eligible; move it to a Read chunk anyway.
    let call = rpc_call(xid, PROG, BIG, |e| {
        e.u32(10).u32(8);
    });
    let chunks = ChunkLists {
        reads: vec![ReadChunk {
            position: call.len() as u32,
            segments: vec![Segment {
                handle: src.stag().0,
                length: 8,
                offset: 0,
            }],
        }],
        writes: vec![],
        reply: None,
    };
    assert!(raw.send(msg(xid, chunks, &call)));
    // §8.1.1: "a responder MUST NOT process the Call message"; §5.5.2: GARBAGE_ARGS.
    assert_eq!(accept_stat(raw.recv().await, xid), 4);
    null_works(&raw, 0x4001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_program_gets_no_reply_over_rdma() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let raw = Raw::connect(server.addr).await;
    let xid = 0x5000;
    assert!(raw.send(msg(
        xid,
        ChunkLists::empty(),
        &rpc_call(xid, UNBOUND_PROG, NULL, |_| {}),
    )));
    // §8: "Responders MUST NOT reply to RPC-over-RDMA messages for Upper Layer
    // Protocols that do not have a Upper Layer Binding." The next call is answered.
    null_works(&raw, 0x5001).await;
    let s = server.stats.snapshots();
    assert_eq!(
        s.iter().map(|s| s.get(Counter::ErrNoBinding)).sum::<u64>(),
        1
    );
}

/// An RPC Call header for `prog`/`vers`/NULL with AUTH_NONE.
fn rpc_call_vers(xid: u32, prog: u32, vers: u32) -> Bytes {
    let mut e = Encoder::new();
    CallHeader::new(RpcXid(xid), prog, vers, NULL, OpaqueAuth::none()).encode(&mut e);
    e.finish().to_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_program_or_version_gets_prog_unavail_or_prog_mismatch_over_rdma() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let raw = Raw::connect(server.addr).await;
    // RFC 5531 §9: PROG_UNAVAIL (1) for a program nobody serves.
    let xid = 0x5100;
    let call = rpc_call_vers(xid, 0x2000_7777, 1);
    assert!(raw.send(msg(xid, ChunkLists::empty(), &call)));
    assert_eq!(accept_stat(raw.recv().await, xid), 1, "PROG_UNAVAIL");
    // PROG_MISMATCH (2) with the lowest and highest version served (1, 1): what a Linux
    // mount that probes NFSv4 first needs to settle on version 3.
    let xid = 0x5101;
    let call = rpc_call_vers(xid, PROG, VERS + 3);
    assert!(raw.send(msg(xid, ChunkLists::empty(), &call)));
    let reply = raw.recv().await.expect("no answer to an unserved version");
    let Received::Msg { payload, .. } = receive(&reply, &Policy::default()).unwrap() else {
        panic!("expected RDMA_MSG");
    };
    let words: Vec<u32> = payload
        .chunks(4)
        .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(words, [xid, 1, 0, 0, 0, 2, VERS, VERS], "PROG_MISMATCH 1-1");
    null_works(&raw, 0x5102).await;
    assert_eq!(server.stats.total(Counter::UnservedCalls), 2);
    assert_eq!(server.stats.total(Counter::ErrNoBinding), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_headers_never_stop_the_server() {
    use rand::{Rng, SeedableRng};
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let (good, _) = client(server.addr, RdmaConfig::default());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut answered = 0;
    for round in 0..200u32 {
        let raw = Raw::connect(server.addr).await;
        // A plausible prefix (xid, version 1, credits, a message type 0-5) and random
        // words after it: chunk list discriminants, counts, segments, payload.
        let mut b = BytesMut::new();
        b.put_u32(round);
        b.put_u32(if rng.gen_bool(0.9) { 1 } else { rng.gen() });
        b.put_u32(rng.gen_range(0..4));
        b.put_u32(rng.gen_range(0..6));
        for _ in 0..rng.gen_range(0..40) {
            b.put_u32(match rng.gen_range(0..4) {
                0 => 0,
                1 => 1,
                2 => rng.gen_range(0..64),
                _ => rng.gen(),
            });
        }
        let _ = raw.send(b.freeze());
        if raw.recv_within(Duration::from_millis(200)).await.is_some() {
            answered += 1;
        }
        if round % 50 == 0 {
            good_client_works(&good).await;
        }
    }
    good_client_works(&good).await;
    eprintln!("{answered} of 200 random messages answered");
    assert!(answered > 0);
}

fn v2_header(xid: u32, body: Body) -> Bytes {
    Header {
        xid: Xid(xid),
        version: Version::TWO,
        credits: 8,
        body,
    }
    .to_bytes()
}

fn v2_msg(xid: u32, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::from(&v2_header(xid, Body::Msg(ChunkLists::empty()))[..]);
    b.put_slice(payload);
    b.freeze()
}

fn reliable_reply_server() -> RdmaConfig {
    RdmaConfig {
        version_two: true,
        reliable_reply: true,
        ..RdmaConfig::default()
    }
}

/// A Version Two NULL on `raw`, answered in Version Two.
async fn v2_null_works(raw: &Raw, xid: u32) {
    assert!(raw.send(v2_msg(xid, &rpc_call(xid, PROG, NULL, |_| {}))));
    match receive(&raw.recv().await.expect("no answer"), &Policy::default()).unwrap() {
        Received::Msg { prefix, .. } => {
            assert_eq!((prefix.xid, prefix.version), (Xid(xid), Version::TWO))
        }
        other => panic!("expected RDMA_MSG, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_3_unknown_and_repeated_rdma_done_are_dropped_silently() {
    use rpcrdma::options::RELIABLE_REPLY;
    init_tracing();
    let server = start_server(reliable_reply_server()).await;
    let raw = Raw::connect(server.addr).await;
    v2_null_works(&raw, 1).await;
    // Our option exchange (docs/rpcrdma-v2.md §3.1), without remote invalidation.
    assert!(raw.send(v2_header(
        1,
        Body::Optional {
            opttype: RELIABLE_REPLY,
            optinfo: Bytes::from_static(&[0, 0, 0, 0]),
        },
    )));
    let policy = Policy {
        options: vec![RELIABLE_REPLY],
        ..Policy::default()
    };
    match receive(&raw.recv().await.expect("no answer"), &policy).unwrap() {
        Received::Optional {
            prefix, opttype, ..
        } => assert_eq!((prefix.xid, opttype), (Xid(1), RELIABLE_REPLY)),
        other => panic!("expected RDMA_OPTIONAL, got {other:?}"),
    }
    // An RDMA_DONE for nothing: no answer at all, so the next message we get is the
    // Reply to the next Call (reliable-reply §4.1.3: "MUST silently drop").
    assert!(raw.send(v2_header(0x99, Body::Done)));
    let n = 20_000u32;
    assert!(raw.send(v2_msg(
        2,
        &rpc_call(2, PROG, BIG, |e| {
            e.u32(n).opaque(&[]);
        })
    )));
    match receive(&raw.recv().await.expect("no answer"), &policy).unwrap() {
        Received::NoMsg { prefix, chunks } => {
            assert_eq!(prefix.xid, Xid(2));
            let p0 = chunks.position_zero().expect("position zero read chunk");
            assert!(p0.len() > u64::from(n));
        }
        other => panic!("expected RDMA_NOMSG, got {other:?}"),
    }
    // Pull completion, then the same again: the second finds nothing waiting.
    assert!(raw.send(v2_header(2, Body::Done)));
    assert!(raw.send(v2_header(2, Body::Done)));
    v2_null_works(&raw, 3).await;
    // The server's local invalidation counts at its completion, which the NULL's
    // Reply may overtake.
    until(|| server.stats.total(Counter::LocalInvalidations) == 1).await;
    let ss = server.stats.latest().unwrap();
    eprintln!("{ss}");
    assert_eq!(ss.get(Counter::RdmaDone), 1);
    assert_eq!(ss.get(Counter::RdmaDoneDropped), 2);
    assert_eq!(ss.get(Counter::ErrRdmaErrorSent), 0);
    // Plain Send: the server invalidated its chunk itself.
    assert_eq!(ss.get(Counter::LocalInvalidations), 1);
    assert!(ss.open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_rdma_done_without_the_option_gets_err_badheader() {
    init_tracing();
    let server = start_server(reliable_reply_server()).await;
    let raw = Raw::connect(server.addr).await;
    v2_null_works(&raw, 1).await;
    // v1 §5.6.2 still holds until both peers exchanged RELIABLE_REPLY.
    assert!(raw.send(v2_header(5, Body::Done)));
    assert_eq!(expect_error(raw.recv().await, 5), ErrorBody::BadHeader);
    v2_null_works(&raw, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s2_3_a_version_two_peer_without_private_data_gets_4k_replies_inline() {
    init_tracing();
    let server = start_server(RdmaConfig {
        version_two: true,
        ..RdmaConfig::default()
    })
    .await;
    // No RFC 8797 private data: the Version Two default inline threshold is 4096
    // (v2 §2.3), where Version One assumes 1024 (v1 §4.3.3).
    let raw = Raw::connect_with(server.addr, Vec::new()).await;
    let xid = 0x7100;
    let call = rpc_call(xid, PROG, BIG, |e| {
        e.u32(3000).u32(0);
    });
    assert!(raw.send(v2_msg(xid, &call)));
    let reply = raw.recv().await.expect("no reply");
    match receive(&reply, &Policy::default()).unwrap() {
        Received::Msg {
            prefix,
            chunks,
            payload,
        } => {
            assert_eq!((prefix.xid, prefix.version), (Xid(xid), Version::TWO));
            assert!(chunks.is_empty());
            assert_eq!(payload.len(), 24 + 4 + 3000, "3000 bytes inline");
        }
        other => panic!("expected a Short Reply, got {other:?}"),
    }
    // The same in Version One exceeds 1024: no reply is possible without a Reply
    // chunk (§5.5.3, ERR_BADHEADER).
    let xid = 0x7101;
    let call = rpc_call(xid, PROG, BIG, |e| {
        e.u32(3000).u32(0);
    });
    assert!(raw.send(msg(xid, ChunkLists::empty(), &call)));
    assert_eq!(expect_error(raw.recv().await, xid), ErrorBody::BadHeader);
}
