//! Hostile responders against the client: a server written by hand on the raw provider
//! API sends what our server never would; the client gives the spec's answer and its
//! calls keep working on the same connection.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use rdma::{
    Access, LocalSge, MemoryRegion, ProtectionDomain, QueuePair, QueuePairExt, RecvWr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use rpcrdma::error::HeaderError;
use rpcrdma::header::{Body, ErrorBody, Header};
use rpcrdma::options::{ReliableReplyInfo, RELIABLE_REPLY};
use rpcrdma::validate::{receive, Policy, Received};
use rpcrdma::{ChunkLists, OptType, ReadChunk, Segment, Version, Xid};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaTransport, StatsRegistry, TransportError};
use tokio::sync::mpsc;

const BUF: usize = 65536;

fn header(xid: u32, version: Version, body: Body) -> Bytes {
    Header {
        xid: Xid(xid),
        version,
        credits: 8,
        body,
    }
    .to_bytes()
}

fn v2_header(xid: u32, body: Body) -> Bytes {
    header(xid, Version::TWO, body)
}

/// RDMA_MSG carrying an RPC reply `xid, REPLY, MSG_ACCEPTED, AUTH_NONE, SUCCESS` then
/// `results` words: with none, the answer to NULL.
fn reply(xid: u32, version: Version, chunks: ChunkLists, results: &[u32]) -> Bytes {
    let mut b = BytesMut::from(&header(xid, version, Body::Msg(chunks))[..]);
    for &w in [xid, 1, 0, 0, 0, 0].iter().chain(results) {
        b.put_u32(w);
    }
    b.freeze()
}

fn null_reply(xid: u32) -> Bytes {
    reply(xid, Version::TWO, ChunkLists::empty(), &[])
}

/// The raw side of a connection: 16 receive buffers of [`BUF`] bytes, posted with
/// the accept and re-posted as each message is taken.
struct RawResponder {
    qp: Arc<dyn QueuePair>,
    bufs: Vec<MemoryRegion>,
    /// The connection's protection domain, for regions the responder exposes.
    pd: ProtectionDomain,
}

impl RawResponder {
    /// Listens on 127.0.0.1; the future accepts the first connection.
    async fn listen() -> (
        std::net::SocketAddr,
        impl std::future::Future<Output = RawResponder>,
    ) {
        Self::listen_with(RdmaConfig::default()).await
    }

    /// [`RawResponder::listen`], accepting with `config`'s connect parameters (IRD,
    /// ORD, private data).
    async fn listen_with(
        config: RdmaConfig,
    ) -> (
        std::net::SocketAddr,
        impl std::future::Future<Output = RawResponder>,
    ) {
        let provider = iwarp();
        let mut listener = provider
            .listen("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = async move {
            let _provider = provider;
            let req = listener.accept().await.unwrap();
            let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
            let bufs: Vec<MemoryRegion> = (0..16)
                .map(|_| pd.register_zeroed(BUF, Access::LOCAL_WRITE).unwrap())
                .collect();
            let recvs = (0..bufs.len()).map(|i| recv_wr(&bufs, i)).collect();
            let qp = req.accept(&pd, config.connect_params(recvs)).await.unwrap();
            RawResponder {
                qp: Arc::new(qp),
                bufs,
                pd: pd.into(),
            }
        };
        (addr, accept)
    }

    /// The next message received, its buffer posted again; `None` when the
    /// connection is gone.
    async fn next_message(&mut self) -> Option<Bytes> {
        while let Some(c) = self.qp.completion().await {
            if c.opcode != WcOpcode::Recv || c.status != WcStatus::Success {
                continue;
            }
            let i = c.wr_id as usize;
            let msg = self.bufs[i].read(0, c.byte_len).unwrap();
            self.qp.post_recv(recv_wr(&self.bufs, i)).ok()?;
            return Some(msg);
        }
        None
    }
}

fn recv_wr(bufs: &[MemoryRegion], i: usize) -> RecvWr {
    RecvWr {
        wr_id: i as u64,
        sgl: vec![LocalSge {
            mr: bufs[i].clone(),
            offset: 0,
            len: BUF,
        }],
    }
}

/// A responder by hand that answers GEN(n) Calls through their Write chunk: call `i`
/// places `places(i).0` bytes of `pattern(n, 7)` into the chunk and returns the length
/// `places(i).1` in the Write list and in the count word (no data inline, as a DDP
/// reduced reply). NULL Calls get their reply.
async fn raw_write_responder(places: fn(usize) -> (usize, u32)) -> std::net::SocketAddr {
    let (addr, accept) = RawResponder::listen().await;
    tokio::spawn(async move {
        let mut peer = accept.await;
        let qp = peer.qp.clone();
        let mut gens = 0;
        while let Some(msg) = peer.next_message().await {
            let Ok(Received::Msg {
                prefix,
                chunks,
                payload,
            }) = receive(&msg, &Policy::default())
            else {
                continue;
            };
            let xid = prefix.xid.0;
            // xid, CALL, rpcvers, prog, vers, proc, AUTH_NONE cred and verf: 40 bytes.
            let word = |at: usize| u32::from_be_bytes(payload[at..at + 4].try_into().unwrap());
            let out = if word(20) == GEN {
                let n = word(40) as usize;
                let (placed, returned) = places(gens);
                gens += 1;
                let seg = chunks.writes[0].segments[0];
                let data = pattern(n, 7).slice(..placed);
                qp.post_send(SendWr {
                    wr_id: 2 << 40,
                    op: SendOp::RdmaWrite(rdma::RemoteAddr {
                        stag: rdma::STag(seg.handle),
                        offset: seg.offset,
                    }),
                    sgl: vec![qp.pd().sge(data).unwrap()],
                })
                .unwrap();
                let mut returned_chunks = chunks.clone();
                returned_chunks.writes[0].segments[0].length = returned;
                returned_chunks.writes.truncate(1);
                reply(xid, prefix.version, returned_chunks, &[returned])
            } else {
                reply(xid, prefix.version, ChunkLists::empty(), &[])
            };
            if qp
                .post_send(SendWr {
                    wr_id: 1 << 40,
                    op: SendOp::Send,
                    sgl: vec![qp.pd().sge(out).unwrap()],
                })
                .is_err()
            {
                break;
            }
        }
    });
    addr
}

/// What the raw responder saw that was not a Call.
#[derive(Debug)]
enum Seen {
    /// An RDMA_ERROR: its header's XID, version and body.
    Error(Xid, Version, ErrorBody),
    /// Anything else that is no Call (its length, shown when a test fails).
    Other(#[allow(dead_code)] usize),
}

/// A responder by hand: answers every Version Two NULL Call, and after the first one
/// sends an RDMA_OPTIONAL of `opttype` with XID `opt_xid`. Reports the rest on `seen`.
async fn raw_responder(
    opttype: OptType,
    opt_xid: u32,
) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let (addr, accept) = RawResponder::listen().await;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut peer = accept.await;
        let qp = peer.qp.clone();
        let send = |msg: Bytes| {
            qp.post_send(SendWr {
                wr_id: 1 << 40,
                op: SendOp::Send,
                sgl: vec![qp.pd().sge(msg).unwrap()],
            })
            .is_ok()
        };
        let mut calls = 0;
        while let Some(msg) = peer.next_message().await {
            match receive(&msg, &Policy::default()) {
                Ok(Received::Msg {
                    prefix, payload, ..
                }) if rpc_msg_type(&payload) == Some(0) => {
                    assert!(send(null_reply(prefix.xid.0)), "reply to {:?}", prefix.xid);
                    calls += 1;
                    if calls == 1 {
                        let opt = v2_header(
                            opt_xid,
                            Body::Optional {
                                opttype,
                                optinfo: Bytes::from_static(b"not for you"),
                            },
                        );
                        assert!(send(opt), "RDMA_OPTIONAL");
                    }
                }
                Ok(Received::Error { prefix, body }) => {
                    let _ = tx.send(Seen::Error(prefix.xid, prefix.version, body));
                }
                _ => {
                    let _ = tx.send(Seen::Other(msg.len()));
                }
            }
        }
    });
    (addr, rx)
}

fn rpc_msg_type(payload: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(payload.get(4..8)?.try_into().ok()?))
}

async fn null(c: &oncrpc::Client) {
    let r = c
        .call(PROG, VERS, NULL, xdr::XdrStream::default())
        .await
        .unwrap();
    r.results.finish().unwrap();
}

/// v2 §3.1: "When an implementation does not recognize or support the value contained
/// in the rdma_opttype field, it MUST send an RPC-over-RDMA message with the rdma_xid
/// field set to the same value as the erroneous message, the rdma_proc field set to
/// RDMA_ERROR, and the rdma_err field set to RDMA_ERR_INVAL_OPTION." Our client is
/// such an implementation when the responder sends the RDMA_OPTIONAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s3_1_unknown_opttype_from_the_responder_gets_err_inval_option() {
    init_tracing();
    let opt_xid = 0x0bad_0b7e;
    let (addr, mut seen) = raw_responder(OptType(0x7777), opt_xid).await;
    let config = RdmaConfig {
        version_two: true,
        ..RdmaConfig::default()
    };
    let t = RdmaTransport::new(iwarp(), addr, config, Arc::new(TestBinding));
    let stats = t.stats();
    let c = oncrpc::Client::new(
        t,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(60),
            ..oncrpc::ClientConfig::default()
        },
    );
    null(&c).await;
    let answer = tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("no answer to the RDMA_OPTIONAL")
        .expect("responder gone");
    match answer {
        Seen::Error(xid, version, body) => {
            assert_eq!(xid, Xid(opt_xid), "rdma_xid of the erroneous message");
            assert_eq!(version, Version::TWO);
            assert_eq!(body, ErrorBody::InvalOption);
        }
        other => panic!("expected RDMA_ERROR, got {other:?}"),
    }
    // The client's calls keep working, on the same connection.
    for _ in 0..3 {
        null(&c).await;
    }
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert!(snaps[0].open);
    assert_eq!(snaps[0].get(Counter::ErrRdmaErrorSent), 1);
    assert!(seen.try_recv().is_err(), "nothing else sent");
}

async fn gen(c: &oncrpc::Client, n: u32) -> Bytes {
    let mut r = c.call(PROG, VERS, GEN, u32_arg(n)).await.unwrap();
    let out = r.results.opaque(u32::MAX).unwrap();
    r.results.finish().unwrap();
    out
}

/// What the client hands up from a Write chunk is bounded by the length the responder
/// returned (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.6: the responder updates
/// the segment lengths to what it wrote), whatever it placed: bytes it placed beyond
/// that length never come up, and bytes it claims but did not place are zeros (a
/// fresh buffer) or bytes this same responder placed for an earlier Call (a reused
/// one: the client's pool holds only what its server sent, `registration` module
/// docs), never anything else. The Reply is made contiguous in the Write chunk's own
/// region (`replies_joined_in_place`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_chunk_data_handed_up_is_bounded_by_the_returned_length() {
    init_tracing();
    let n = 8192;
    let addr = raw_write_responder(|i| match i {
        // Honest, then placed more than returned, then returned more than placed.
        0 => (8192, 8192),
        1 => (8192, 3001),
        _ => (1000, 3000),
    })
    .await;
    let t = RdmaTransport::new(iwarp(), addr, RdmaConfig::default(), Arc::new(TestBinding));
    let stats = t.stats();
    let c = oncrpc::Client::new(
        t,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(60),
            ..oncrpc::ClientConfig::default()
        },
    );
    let full = pattern(n, 7);
    assert!(gen(&c, n as u32).await == full);
    let got = gen(&c, n as u32).await;
    assert_eq!(got.len(), 3001);
    assert!(got == full.slice(..3001));
    let got = gen(&c, n as u32).await;
    assert_eq!(got.len(), 3000);
    assert!(got[..1000] == full[..1000]);
    assert!(
        got[1000..].iter().all(|&b| b == 0) || got[1000..] == full[1000..3000],
        "unwritten bytes are zeros or what this responder placed before"
    );
    null(&c).await;
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert_eq!(snaps[0].get(Counter::RepliesJoinedInPlace), 3);
    assert_eq!(snaps[0].get(Counter::ErrBadReply), 0);
}

/// How [`raw_version_responder`] answers the `i`-th Call, which came in `version`.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The NULL reply, RDMA_MSG in this version.
    Reply(Version),
    /// RDMA_ERROR ERR_VERS, range 1-1, with this version in its header.
    ErrVers(Version),
}

/// A responder by hand that answers every NULL Call as `answer(i, version)` says. The
/// versions of the Calls it received go to the returned channel.
async fn raw_version_responder(
    answer: fn(usize, Version) -> Answer,
) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Version>) {
    let (addr, accept) = RawResponder::listen().await;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut peer = accept.await;
        let qp = peer.qp.clone();
        let mut calls = 0;
        // The raw responder answers in Version Two as well as One.
        while let Some(msg) = peer.next_message().await {
            let Ok(Received::Msg {
                prefix, payload, ..
            }) = receive(&msg, &Policy::default())
            else {
                continue;
            };
            if rpc_msg_type(&payload) != Some(0) {
                continue;
            }
            let _ = tx.send(prefix.version);
            let xid = prefix.xid.0;
            let out = match answer(calls, prefix.version) {
                Answer::Reply(v) => reply(xid, v, ChunkLists::empty(), &[]),
                Answer::ErrVers(v) => header(
                    xid,
                    v,
                    Body::Error(ErrorBody::Vers {
                        low: Version::ONE,
                        high: Version::ONE,
                    }),
                ),
            };
            calls += 1;
            if qp
                .post_send(SendWr {
                    wr_id: 1 << 40,
                    op: SendOp::Send,
                    sgl: vec![qp.pd().sge(out).unwrap()],
                })
                .is_err()
            {
                break;
            }
        }
    });
    (addr, rx)
}

fn v2_client(addr: std::net::SocketAddr) -> (oncrpc::Client, StatsRegistry) {
    let config = RdmaConfig {
        version_two: true,
        ..RdmaConfig::default()
    };
    let t = RdmaTransport::new(iwarp(), addr, config, Arc::new(TestBinding));
    let stats = t.stats();
    let c = oncrpc::Client::new(
        t,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(60),
            ..oncrpc::ClientConfig::default()
        },
    );
    (c, stats)
}

/// rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5.3: "a responder MUST send
/// Replies with the same RPC-over-RDMA protocol version that the requester uses to
/// send its Calls". A Reply in another version is not that Call's Reply: the Call
/// fails with the core's error (counted), its credit returns, the probe is not settled by it,
/// and the connection carries on (the next Call, answered in its own version, works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_3_a_reply_in_another_version_than_its_call_fails_that_call() {
    init_tracing();
    // The Version Two probe is answered in Version One; later Calls in their version.
    let (addr, mut versions) = raw_version_responder(|i, v| match i {
        0 => Answer::Reply(Version::ONE),
        _ => Answer::Reply(v),
    })
    .await;
    let (c, stats) = v2_client(addr);
    let r = c
        .call(PROG, VERS, NULL, xdr::XdrStream::default())
        .await
        .map(|_| ());
    assert!(is_wrong_version(&r), "{r:?}");
    for _ in 0..3 {
        null(&c).await;
    }
    let seen: Vec<Version> = std::iter::from_fn(|| versions.try_recv().ok()).collect();
    assert_eq!(seen, vec![Version::TWO; 4], "every Call in Version Two");
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert!(snaps[0].open);
    assert_eq!(snaps[0].get(Counter::ErrReplyVersion), 1);
    assert_eq!(snaps[0].get(Counter::ErrBadReply), 1);
    // Three Replies completed their Calls; the failed one counts in err_bad_reply.
    assert_eq!(snaps[0].get(Counter::Replies), 3);
}

/// The ERR_VERS fallback is not a Reply in another version: an RDMA_ERROR ERR_VERS in a
/// Version One header answering the Version Two probe (v2 §5.2) makes the client send
/// the Call again in Version One, and it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_2_err_vers_in_version_one_still_falls_back() {
    init_tracing();
    let (addr, mut versions) = raw_version_responder(|_, v| {
        if v == Version::TWO {
            Answer::ErrVers(Version::ONE)
        } else {
            Answer::Reply(v)
        }
    })
    .await;
    let (c, stats) = v2_client(addr);
    for _ in 0..3 {
        null(&c).await;
    }
    let seen: Vec<Version> = std::iter::from_fn(|| versions.try_recv().ok()).collect();
    assert_eq!(
        seen,
        vec![Version::TWO, Version::ONE, Version::ONE, Version::ONE]
    );
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert_eq!(snaps[0].get(Counter::VersionFallbacks), 1);
    assert_eq!(snaps[0].get(Counter::ErrReplyVersion), 0);
    assert_eq!(snaps[0].get(Counter::ErrBadReply), 0);
}

/// v2 §5.3 for a client that speaks Version One only: a Reply in Version Two (which it
/// does not parse) is in another version than its Call, and fails that Call rather
/// than leaving it to time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_3_a_version_one_client_fails_a_call_answered_in_version_two() {
    init_tracing();
    let (addr, mut versions) = raw_version_responder(|i, v| match i {
        1 => Answer::Reply(Version::TWO),
        _ => Answer::Reply(v),
    })
    .await;
    let t = RdmaTransport::new(iwarp(), addr, RdmaConfig::default(), Arc::new(TestBinding));
    let stats = t.stats();
    let c = oncrpc::Client::new(
        t,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(60),
            ..oncrpc::ClientConfig::default()
        },
    );
    null(&c).await;
    let r = c
        .call(PROG, VERS, NULL, xdr::XdrStream::default())
        .await
        .map(|_| ());
    assert!(is_wrong_version(&r), "{r:?}");
    null(&c).await;
    let seen: Vec<Version> = std::iter::from_fn(|| versions.try_recv().ok()).collect();
    assert_eq!(seen, vec![Version::ONE; 3]);
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert_eq!(snaps[0].get(Counter::ErrReplyVersion), 1);
    assert_eq!(snaps[0].get(Counter::ErrDiscarded), 0);
}

/// What [`raw_pull_responder`] saw besides Calls.
#[derive(Debug, PartialEq, Eq)]
enum PullSeen {
    /// An RDMA_DONE for this XID (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3).
    Done(Xid),
    /// The connection ended.
    Closed,
}

/// A reliable-reply responder by hand (draft-cel-nfsv4-rpcrdma-reliable-reply-05):
/// answers NULL Calls in their version, agrees to the
/// client's RDMA_OPTIONAL(RELIABLE_REPLY), and answers every BIG(n) Call with an
/// RDMA_NOMSG whose Position Zero Read chunk exposes the Reply in a read-only region of
/// its own, under that region's STag, or under an STag it never registered when
/// `bad_stag`. RDMA_DONEs and the end of the connection go to the channel.
async fn raw_pull_responder(
    bad_stag: bool,
) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<PullSeen>) {
    let (addr, accept) = RawResponder::listen().await;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut peer = accept.await;
        let qp = peer.qp.clone();
        let mut policy = Policy::default();
        policy.options.push(RELIABLE_REPLY);
        // Exposed Replies stay registered for the whole connection.
        let mut exposed = Vec::new();
        while let Some(msg) = peer.next_message().await {
            let out = match receive(&msg, &policy) {
                Ok(Received::Msg {
                    prefix, payload, ..
                }) if rpc_msg_type(&payload) == Some(0) => {
                    let xid = prefix.xid.0;
                    // xid, CALL, rpcvers, prog, vers, proc, AUTH_NONE cred and verf.
                    let word =
                        |at: usize| u32::from_be_bytes(payload[at..at + 4].try_into().unwrap());
                    if word(20) != BIG {
                        reply(xid, prefix.version, ChunkLists::empty(), &[])
                    } else {
                        let n = word(40) as usize;
                        let mut rpc = BytesMut::new();
                        for w in [xid, 1, 0, 0, 0, 0, n as u32] {
                            rpc.put_u32(w);
                        }
                        rpc.extend_from_slice(&pattern(n, 3));
                        rpc.resize(rpc.len() + (4 - n % 4) % 4, 0);
                        let len = rpc.len() as u32;
                        let mr = peer.pd.register(rpc, Access::REMOTE_READ).unwrap();
                        let handle = if bad_stag {
                            mr.stag().0 ^ 0x00ff_f000
                        } else {
                            mr.stag().0
                        };
                        exposed.push(mr);
                        let chunks = ChunkLists {
                            reads: vec![ReadChunk {
                                position: 0,
                                segments: vec![Segment {
                                    handle,
                                    length: len,
                                    offset: 0,
                                }],
                            }],
                            ..ChunkLists::empty()
                        };
                        header(xid, Version::TWO, Body::NoMsg(chunks))
                    }
                }
                Ok(Received::Optional {
                    prefix, opttype, ..
                }) if opttype == RELIABLE_REPLY => v2_header(
                    prefix.xid.0,
                    Body::Optional {
                        opttype: RELIABLE_REPLY,
                        optinfo: ReliableReplyInfo {
                            remote_invalidate: false,
                        }
                        .to_bytes(),
                    },
                ),
                Err(HeaderError::DoneReceived) => {
                    let xid = rpcrdma::PrefixView::new_checked(&msg[..]).unwrap().xid();
                    let _ = tx.send(PullSeen::Done(xid));
                    continue;
                }
                _ => continue,
            };
            if qp
                .post_send(SendWr {
                    wr_id: 1 << 40,
                    op: SendOp::Send,
                    sgl: vec![qp.pd().sge(out).unwrap()],
                })
                .is_err()
            {
                break;
            }
        }
        let _ = tx.send(PullSeen::Closed);
    });
    (addr, rx)
}

/// A client that takes part in reliable reply, with RDMA Read depth `ord`, once it
/// agreed with the responder.
async fn reliable_client(addr: std::net::SocketAddr, ord: u16) -> (oncrpc::Client, StatsRegistry) {
    let config = RdmaConfig {
        version_two: true,
        reliable_reply: true,
        ord,
        ..RdmaConfig::default()
    };
    let t = RdmaTransport::new(iwarp(), addr, config, Arc::new(TestBinding));
    let stats = t.stats();
    let c = oncrpc::Client::new(
        t,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(60),
            ..oncrpc::ClientConfig::default()
        },
    );
    null(&c).await;
    until(|| {
        stats
            .latest()
            .is_some_and(|s| s.get(Counter::ReliableReply) == 1)
    })
    .await;
    (c, stats)
}

async fn big_result(c: &oncrpc::Client, n: u32) -> Result<(), oncrpc::ClientError> {
    c.call(PROG, VERS, BIG, big_arg(n, &[])).await.map(|_| ())
}

/// The core's error a call failed with (`ClientError::Transport` carrying
/// `TransportError::Call`), if it did.
fn core_error(r: &Result<(), oncrpc::ClientError>) -> Option<&rpcrdma::Error> {
    match r {
        Err(oncrpc::ClientError::Transport(f)) => match f.downcast_ref::<TransportError>() {
            Some(TransportError::Call(e)) => Some(e),
            _ => None,
        },
        _ => None,
    }
}

/// The call failed because its pull failed (reliable-reply §4.1.2).
fn is_pull_failure(r: &Result<(), oncrpc::ClientError>) -> bool {
    matches!(
        core_error(r),
        Some(rpcrdma::Error::Reply(rpcrdma::ReplyError::PullFailed))
    )
}

/// The call failed because its Reply came in another version (v2 §5.3).
fn is_wrong_version(r: &Result<(), oncrpc::ClientError>) -> bool {
    matches!(
        core_error(r),
        Some(rpcrdma::Error::Header(HeaderError::UnsupportedVersion(_)))
    )
}

/// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2: "After RDMA Read operations have
/// completed (successfully or in error), the requester MUST inform the responder that
/// it may invalidate the Read chunk". Here the provider refuses to post the Read (the
/// client asked for an outbound Read depth of 0, a misconfiguration that stands for
/// any Read the provider refuses): the connection is sound, the RDMA_DONE reaches the
/// responder, the Call fails, and the next Calls work on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_2_a_read_that_cannot_be_posted_still_gets_rdma_done() {
    init_tracing();
    let (addr, mut seen) = raw_pull_responder(false).await;
    let (c, stats) = reliable_client(addr, 0).await;
    let r = big_result(&c, 10_000).await;
    assert!(is_pull_failure(&r), "{r:?}");
    let done = tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("no RDMA_DONE")
        .expect("responder gone");
    assert!(matches!(done, PullSeen::Done(_)), "{done:?}");
    null(&c).await;
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection");
    assert!(snaps[0].open);
    assert_eq!(snaps[0].get(Counter::PullsFailed), 1);
    assert_eq!(snaps[0].get(Counter::RdmaDone), 1);
    assert_eq!(snaps[0].get(Counter::PulledReplies), 0);
    assert!(seen.try_recv().is_err(), "nothing else");
}

/// §4.1.2 with a Read that completes in error: the responder exposes an STag it never
/// registered. On iWARP its RNIC answers the Read Request with a Terminate and ends the
/// stream (RFC 5040 §7.1), so the connection is lost (§4.1.3: "a remote access error
/// occurs and the connection is lost") and the RDMA_DONE the client owes can no longer
/// be posted: the disconnect is the responder's notice. The client does not wait for
/// a Reply that cannot come: the Call fails at once with the core's PullFailed (no
/// retransmission loop against such a responder, rfc5666bis §5.5.3), and no RDMA_DONE
/// ever reaches the responder on the lost connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_2_a_read_that_fails_fails_the_call_and_ends_the_connection() {
    init_tracing();
    let (addr, mut seen) = raw_pull_responder(true).await;
    let (c, stats) = reliable_client(addr, 32).await;
    let r = tokio::time::timeout(Duration::from_secs(30), big_result(&c, 10_000))
        .await
        .expect("the call waited for a reply that cannot come");
    assert!(is_pull_failure(&r), "{r:?}");
    let end = tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("the connection stayed")
        .expect("responder gone");
    assert_eq!(end, PullSeen::Closed);
    until(|| !stats.snapshots()[0].open).await;
    let snaps = stats.snapshots();
    let first = &snaps[0];
    assert_eq!(first.get(Counter::PullsFailed), 1);
    assert_eq!(first.get(Counter::ErrCompletion), 1);
    assert_eq!(first.get(Counter::PulledReplies), 0);
}
