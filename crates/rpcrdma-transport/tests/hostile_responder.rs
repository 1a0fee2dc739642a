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
    SendWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma::header::{Body, ErrorBody, Header};
use rpcrdma::validate::{receive, Policy, Received};
use rpcrdma::{ChunkLists, OptType, Version, Xid};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaTransport};
use tokio::sync::mpsc;

const BUF: usize = 65536;

fn v2_header(xid: u32, body: Body) -> Bytes {
    Header {
        xid: Xid(xid),
        version: Version::TWO,
        credits: 8,
        body,
    }
    .to_bytes()
}

/// RDMA_MSG (Version Two) carrying an RPC reply `xid, REPLY, MSG_ACCEPTED, AUTH_NONE,
/// SUCCESS` with no results: the answer to NULL.
fn null_reply(xid: u32) -> Bytes {
    let mut b = BytesMut::from(&v2_header(xid, Body::Msg(ChunkLists::empty()))[..]);
    for w in [xid, 1, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    b.freeze()
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
    let provider = iwarp();
    let mut listener = provider
        .listen("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _provider = provider;
        let req = listener.accept().await.unwrap();
        let pd = ProtectionDomain::new();
        let bufs: Vec<MemoryRegion> = (0..16)
            .map(|_| pd.register_zeroed(BUF, Access::LOCAL_WRITE))
            .collect();
        let recv = |i: usize| RecvWr {
            wr_id: i as u64,
            sgl: vec![LocalSge {
                mr: bufs[i].clone(),
                offset: 0,
                len: BUF,
            }],
        };
        let recvs = (0..bufs.len()).map(recv).collect();
        let qp = req
            .accept(&pd, RdmaConfig::default().connect_params(recvs))
            .await
            .unwrap();
        let send = |msg: Bytes| {
            qp.post_send(SendWr {
                wr_id: 1 << 40,
                op: SendOp::Send,
                sgl: vec![Sge::Bytes(msg)],
            })
            .is_ok()
        };
        let mut calls = 0;
        while let Some(c) = qp.completion().await {
            if c.opcode != WcOpcode::Recv || c.status != WcStatus::Success {
                continue;
            }
            let i = c.wr_id as usize;
            let msg = bufs[i].read(0, c.byte_len).unwrap();
            if qp.post_recv(recv(i)).is_err() {
                break;
            }
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
