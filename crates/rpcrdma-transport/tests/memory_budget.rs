//! Issue 16: one memory budget for the Read chunks of all of a server's connections
//! (`RdmaConfig::max_read_memory`). Hostile requesters on the in-memory provider
//! announce large Read chunks on several connections and never answer the server's
//! RDMA Reads: the server holds at most its budget for them, a bystander's NULL and
//! inline calls are answered at once, its Call with a Read chunk waits for memory and
//! is served once the read timeout has closed the hostile connections.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::mem_provider::{MemProvider, MemQp};
use common::*;
use oncrpc::{CallHeader, Client, ClientConfig, OpaqueAuth, Xid as RpcXid};
use rdma::{
    Access, ConnectionManager, LocalSge, MemoryRegion, ProtectionDomain, QueuePair, RecvWr, Route,
    SendOp, SendWr,
};
use rpcrdma::header::{Body, Header};
use rpcrdma::{ChunkLists, ReadChunk, Segment, Version, Xid};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaServer, RdmaTransport};
use xdr::{Encode, Encoder};

const MIB: u64 = 1 << 20;

/// A requester on the raw provider API whose memory never answers RDMA Reads.
struct Hostile {
    qp: MemQp,
    pd: ProtectionDomain,
    /// What its Read chunks point at (registered, never read).
    region: MemoryRegion,
    _recv: Vec<MemoryRegion>,
}

impl Hostile {
    async fn connect(p: &MemProvider, addr: SocketAddr, chunk: usize) -> Hostile {
        let pd = p.device().alloc_pd().unwrap();
        let recv: Vec<MemoryRegion> = (0..8)
            .map(|_| pd.register_zeroed(4096, Access::LOCAL_WRITE).unwrap())
            .collect();
        let recvs = recv
            .iter()
            .enumerate()
            .map(|(i, mr)| RecvWr {
                wr_id: i as u64,
                sgl: vec![LocalSge {
                    mr: mr.clone(),
                    offset: 0,
                    len: 4096,
                }],
            })
            .collect();
        let route = p.resolve(addr).await.unwrap();
        let qp = route
            .connect(&pd, RdmaConfig::default().connect_params(recvs))
            .await
            .unwrap();
        qp.stop_answering_reads();
        let region = pd.register_zeroed(chunk, Access::REMOTE_READ).unwrap();
        Hostile {
            qp,
            pd,
            region,
            _recv: recv,
        }
    }

    /// An ECHO Call whose argument (the whole region) is in a Read chunk.
    fn send_echo(&self, xid: u32) -> bool {
        let mut e = Encoder::new();
        CallHeader::new(RpcXid(xid), PROG, VERS, ECHO, OpaqueAuth::none()).encode(&mut e);
        e.u32(self.region.len() as u32);
        let call = e.finish().to_bytes();
        let chunks = ChunkLists {
            reads: vec![ReadChunk {
                position: call.len() as u32,
                segments: vec![Segment {
                    handle: self.region.stag().0,
                    length: self.region.len() as u32,
                    offset: 0,
                }],
            }],
            writes: vec![],
            reply: None,
        };
        let mut b = BytesMut::new();
        Header {
            xid: Xid(xid),
            version: Version::ONE,
            credits: 8,
            body: Body::Msg(chunks),
        }
        .emit(&mut b);
        b.put_slice(&call);
        let msg: Bytes = b.freeze();
        self.qp
            .post_send(SendWr {
                wr_id: u64::from(xid),
                op: SendOp::Send,
                sgl: vec![self.pd.sge(msg).unwrap()],
            })
            .is_ok()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_read_chunks_on_many_connections_stay_within_the_server_budget() {
    init_tracing();
    let p = MemProvider::default();
    let budget_bytes = 16 * MIB;
    let chunk = 8 * MIB as usize;
    let config = RdmaConfig {
        max_read_memory: budget_bytes,
        read_timeout: Duration::from_secs(1),
        ..RdmaConfig::default()
    };
    let server = RdmaServer::new(p.clone(), dispatcher(), Arc::new(TestBinding), config);
    let budget = server.read_memory();
    let stats = server.stats();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });

    // 4 connections × 4 Calls × 8 MiB = 128 MiB announced, against 16 MiB.
    let mut hostile = Vec::new();
    for c in 0..4u32 {
        let h = Hostile::connect(&p, addr, chunk).await;
        for i in 0..4 {
            assert!(h.send_echo(0x1000 * (c + 1) + i));
        }
        hostile.push(h);
    }
    until(|| stats.total(Counter::ReadsWaitedForMemory) >= 14).await;
    assert_eq!(budget.used(), budget_bytes, "two Calls pulled, 14 wait");
    assert_eq!(stats.total(Counter::RdmaReads), 2);

    // A bystander: NULL and inline calls are answered at once.
    let bystander = Client::new(
        RdmaTransport::new(
            p.clone(),
            addr,
            RdmaConfig::default(),
            Arc::new(TestBinding),
        ),
        ClientConfig {
            timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let t = Instant::now();
    bystander
        .call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();
    let small = pattern(100, 3);
    assert!(echo(&bystander, small.clone()).await == small);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert!(budget.used() <= budget_bytes);

    // Its Call with a Read chunk waits for memory: the read timeout closes hostile
    // connections one after another (each releases what it held), and it gets in.
    let big = pattern(70_001, 4);
    let got = tokio::time::timeout(Duration::from_secs(20), echo(&bystander, big.clone()))
        .await
        .expect("served once the hostile peers' reads timed out");
    assert!(got == big);
    assert!(stats.total(Counter::ReadTimeouts) >= 1);
    assert!(
        budget.peak() <= budget_bytes,
        "peak {} over the budget",
        budget.peak()
    );
    // Every hostile connection ends by the read timeout; then nothing is held.
    until(|| stats.total(Counter::ReadTimeouts) == 4).await;
    until(|| budget.used() == 0).await;
    assert!(budget.peak() <= budget_bytes);
    drop(hostile);
    task.abort();
}
