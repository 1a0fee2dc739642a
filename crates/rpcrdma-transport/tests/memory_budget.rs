//! Issue 16: one memory budget for all of a server's connections
//! (`RdmaConfig::max_memory`): their Receive and Send buffers and the Read chunk data
//! of their Calls.
//!
//! Hostile requesters on the in-memory provider announce large Read chunks on several
//! connections and never answer the server's RDMA Reads: the server holds at most its
//! budget for them, a connection attempted meanwhile is rejected, a bystander's NULL
//! and inline calls are answered at once, its Call with a Read chunk waits for memory
//! and is served once the read timeout has closed the hostile connections. Over the
//! userspace iWARP provider: a server whose budget holds three connections accepts
//! three, rejects the fourth while the three still answer, and accepts one again when
//! one leaves; nothing stays charged once all are gone.

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

/// What one connection of the default configuration charges to the budget at
/// accept, computed here independently of the server: its state (24 KiB,
/// `CONNECTION_STATE`), 8 Receive buffers (one per credit of the initial grant,
/// `RdmaConfig::initial_credits`) and 2 Send buffers (more only as Sends find them
/// all taken), 4 KiB each (the thresholds both sides advertise).
const CONN: u64 = (24 << 10) + 8 * 4096 + 2 * 4096;

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
        self.send_echo_of(xid, self.region.len() as u32, &self.region)
    }

    /// An ECHO Call whose Read chunk announces `len` bytes at `region` (more than it
    /// holds, if the peer lies: it never answers the Reads anyway).
    fn send_echo_of(&self, xid: u32, len: u32, region: &MemoryRegion) -> bool {
        let mut e = Encoder::new();
        CallHeader::new(RpcXid(xid), PROG, VERS, ECHO, OpaqueAuth::none()).encode(&mut e);
        e.u32(len);
        let call = e.finish().to_bytes();
        let chunks = ChunkLists {
            reads: vec![ReadChunk {
                position: call.len() as u32,
                segments: vec![Segment {
                    handle: region.stag().0,
                    length: len,
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
    // Read chunk data for two 8 MiB Calls, once the buffers of 4 hostile connections
    // and a bystander's are charged.
    let budget_bytes = 16 * MIB + 5 * CONN;
    let chunk = 8 * MIB as usize;
    let config = RdmaConfig {
        max_memory: budget_bytes,
        read_timeout: Duration::from_secs(1),
        ..RdmaConfig::default()
    };
    let server = RdmaServer::new(p.clone(), dispatcher(), Arc::new(TestBinding), config);
    let budget = server.memory();
    let stats = server.stats();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });

    // A bystander, connected before the flood.
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
    bystander
        .call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();
    assert_eq!(budget.used(), CONN, "the bystander's buffers");

    // 4 connections × 4 Calls × 8 MiB = 128 MiB announced, against 16 MiB left.
    // All connect first: once Calls wait for memory, new connections are rejected.
    let mut hostile = Vec::new();
    for _ in 0..4 {
        hostile.push(Hostile::connect(&p, addr, chunk).await);
    }
    for (c, h) in (1u32..).zip(&hostile) {
        for i in 0..4 {
            assert!(h.send_echo(0x1000 * c + i));
        }
    }
    until(|| stats.total(Counter::ReadsWaitedForMemory) >= 14).await;
    assert_eq!(
        budget.used(),
        budget_bytes,
        "5 connections' buffers and two Calls pulled; 14 wait"
    );
    assert_eq!(stats.total(Counter::RdmaReads), 2);
    assert_eq!(stats.total(Counter::MemoryCharged), 5 * CONN);

    // A new connection does not fit (and Calls wait in line): rejected.
    let late = RdmaTransport::new(
        p.clone(),
        addr,
        RdmaConfig::default(),
        Arc::new(TestBinding),
    );
    let refused = late.connect_once().await.err().expect("rejected");
    assert!(
        matches!(
            refused,
            rpcrdma_transport::TransportError::Connect(rdma::ConnectError::Rejected { .. })
        ),
        "{refused:?}"
    );
    let m = stats.memory().unwrap();
    assert_eq!((m.connections_refused, m.charged), (1, budget_bytes), "{m}");

    // The bystander's NULL and inline calls are answered at once.
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
    // Every hostile connection ends by the read timeout; then only the bystander's
    // buffers are held, and nothing once it has gone.
    until(|| stats.total(Counter::ReadTimeouts) == 4).await;
    until(|| budget.used() == CONN).await;
    // Memory is back: a new connection is accepted.
    late.connect_once()
        .await
        .expect("accepted once memory was released");
    drop(bystander);
    until(|| budget.used() == 0).await;
    assert!(budget.peak() <= budget_bytes);
    assert_eq!(stats.memory().unwrap().connections_refused, 1);
    drop(hostile);
    task.abort();
}

/// Issue 26, measured: 16 hostile connections each send as many Calls as their
/// credits allow (8), each announcing a 16 MiB Read chunk, and never answer an RDMA
/// Read: 2 GiB announced. With nfsd's largest Call (a 1 MiB WRITE and a page,
/// `nfsd::rdma::LARGEST_CALL`) every one is answered GARBAGE_ARGS before any RDMA
/// Read is posted: nothing is pulled, only the connections' buffers are charged (well
/// under 512 MiB), and a bystander is served at once. (With `max_message` raised to
/// 32 MiB the same Calls are pulled instead, up to each connection's 64 MiB
/// `max_read_in_flight`, and this test times out waiting for their answers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_calls_larger_than_the_largest_call_pulls_nothing() {
    init_tracing();
    let p = MemProvider::default();
    let largest_call = MIB + 4096;
    let config = RdmaConfig {
        max_message: largest_call,
        max_memory: 4 << 30,
        ..RdmaConfig::default()
    };
    let server = RdmaServer::new(p.clone(), dispatcher(), Arc::new(TestBinding), config);
    let budget = server.memory();
    let stats = server.stats();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    let bystander = Client::new(
        RdmaTransport::new(
            p.clone(),
            addr,
            RdmaConfig::default(),
            Arc::new(TestBinding),
        ),
        ClientConfig::default(),
    );
    bystander
        .call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();

    let mut hostile = Vec::new();
    for _ in 0..16 {
        hostile.push(Hostile::connect(&p, addr, 4096).await);
    }
    // Each Call its own handle, as a client's are: the server's Send With Invalidate
    // of a handle used twice would break the connection instead.
    let mut regions = Vec::new();
    for (c, h) in (1u32..).zip(&hostile) {
        for i in 0..8 {
            let region = h.pd.register_zeroed(4096, Access::REMOTE_READ).unwrap();
            assert!(h.send_echo_of(0x1000 * c + i, 16 << 20, &region));
            regions.push(region);
        }
    }
    until(|| stats.total(Counter::ErrGarbageArgs) == 16 * 8).await;
    assert_eq!(stats.total(Counter::RdmaReads), 0, "nothing pulled");
    // The answers may have needed more Send buffers than the first two.
    let grown_sends = stats.total(Counter::SendBuffers) - 17 * 2;
    assert_eq!(
        budget.used(),
        17 * CONN + grown_sends * 4096,
        "only the connections' buffers"
    );
    assert!(budget.peak() < 512 * MIB, "peak {}", budget.peak());
    let t = Instant::now();
    let small = pattern(100, 3);
    assert!(echo(&bystander, small.clone()).await == small);
    let big = pattern(700_001, 4);
    assert!(echo(&bystander, big.clone()).await == big);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(hostile);
    task.abort();
}

/// Over the userspace iWARP provider on TCP loopback: a budget that holds three
/// connections' buffers (and a little more, besides the room kept for one Call)
/// admits three clients; the fourth is
/// rejected at connection setup while the three still answer NULL and a Call with a
/// Read chunk is served in the room kept for Calls; when one leaves,
/// a new one gets in; when all have left, nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_rejects_the_next_connection_and_serves_the_others() {
    init_tracing();
    // Connections leave room for one whole Call (`max_message`) free.
    let config = RdmaConfig {
        max_memory: 3 * CONN + CONN / 2 + MIB,
        max_message: MIB,
        ..RdmaConfig::default()
    };
    let server = start_server(config).await;
    let null = |c: &Client| {
        let c = c.clone();
        async move { c.call(PROG, VERS, NULL, Encoder::new().finish()).await }
    };
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (c, _) = client(server.addr, RdmaConfig::default());
        null(&c).await.unwrap();
        clients.push(c);
    }
    let m = server.stats.memory().unwrap();
    assert_eq!((m.charged, m.connections_refused), (3 * CONN, 0), "{m}");

    let fourth = RdmaTransport::new(
        iwarp(),
        server.addr,
        RdmaConfig::default(),
        Arc::new(TestBinding),
    );
    let refused = fourth.connect_once().await.err().expect("rejected");
    assert!(
        matches!(
            refused,
            rpcrdma_transport::TransportError::Connect(rdma::ConnectError::Rejected { .. })
        ),
        "{refused:?}"
    );
    let m = server.stats.memory().unwrap();
    assert_eq!((m.charged, m.connections_refused), (3 * CONN, 1), "{m}");
    assert!(m.peak <= m.limit, "{m}");
    for c in &clients {
        null(c).await.unwrap();
    }
    // The room kept from connections: a Call with a Read chunk still gets in.
    let big = pattern(700_001, 5);
    let got = tokio::time::timeout(Duration::from_secs(20), echo(&clients[0], big.clone()))
        .await
        .expect("a Call with a Read chunk is not kept out by connections");
    assert!(got == big);
    assert_eq!(server.stats.total(Counter::ReadsWaitedForMemory), 0);

    // One leaves: its buffers are released and a newcomer fits.
    drop(clients.pop());
    until(|| server.stats.memory().unwrap().charged == 2 * CONN).await;
    let (c, _) = client(server.addr, RdmaConfig::default());
    null(&c).await.unwrap();
    clients.push(c);
    assert_eq!(server.stats.memory().unwrap().charged, 3 * CONN);

    drop(clients);
    until(|| server.stats.memory().unwrap().charged == 0).await;
    let m = server.stats.memory().unwrap();
    // The peak: three connections and the Call's Read chunk.
    assert_eq!(
        (m.peak, m.connections_refused),
        (3 * CONN + 700_001, 1),
        "{m}"
    );
    assert!(m.peak <= m.limit);
}

/// `n` SLOW Calls (each held 400 ms by the server) at once on one connection; returns
/// once all were answered.
async fn slow_calls(c: &Client, n: usize) {
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let c = c.clone();
        calls.spawn(async move {
            let mut e = Encoder::new();
            e.opaque(&[i as u8; 16]);
            c.call(PROG, VERS, SLOW, e.finish()).await
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap().unwrap();
    }
}

/// Issue 16, credits that grow with demand (`RdmaConfig::initial_credits`): a new
/// connection is granted 8 credits and charged for 8 Receive and 2 Send buffers; a
/// requester that keeps 64 Calls in flight gets its grant doubled up to the
/// server's maximum (128), each step charged to the budget first, and Send buffers
/// as its Replies need them (at most 136); an idle one keeps its small charge. Under
/// a budget with room for one step only, the grant stops there
/// (`credit_growths_refused`), and every Call is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_connection_grows_its_grant_as_far_as_the_budget_allows() {
    init_tracing();
    const PER_CREDIT: u64 = 4096;
    // The state and 128 Receive buffers, and each Send buffer the connection holds.
    const FULL_RECV: u64 = (24 << 10) + 128 * 4096;
    let server = start_server(RdmaConfig {
        max_message: MIB,
        ..RdmaConfig::default()
    })
    .await;
    let (idle, _) = client(server.addr, RdmaConfig::default());
    idle.call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();
    let (busy, _) = client(server.addr, RdmaConfig::default());
    busy.call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();
    assert_eq!(server.stats.memory().unwrap().charged, 2 * CONN);
    // The grant doubles as the requester shows it uses more than half of it; the
    // second round starts at the grant the first one reached.
    slow_calls(&busy, 64).await;
    slow_calls(&busy, 64).await;
    let conns = server.stats.snapshots();
    let grants: Vec<u64> = conns
        .iter()
        .map(|s| s.get(Counter::CreditsGranted))
        .collect();
    let charged: Vec<u64> = conns
        .iter()
        .map(|s| s.get(Counter::MemoryCharged))
        .collect();
    let sends: Vec<u64> = conns.iter().map(|s| s.get(Counter::SendBuffers)).collect();
    assert_eq!(grants, [8, 128], "idle, busy");
    assert_eq!(sends[0], 2, "idle");
    assert!((2..=136).contains(&sends[1]), "busy: {sends:?}");
    let full = FULL_RECV + sends[1] * 4096;
    assert_eq!(charged, [CONN, full], "{grants:?} {sends:?}");
    assert_eq!(server.stats.memory().unwrap().charged, CONN + full);
    assert_eq!(server.stats.total(Counter::CreditGrowthsRefused), 0);
    drop((idle, busy));
    until(|| server.stats.memory().unwrap().charged == 0).await;

    // Room for the initial buffers and one step (8 -> 16), besides the 1 MiB kept
    // for a Call.
    let server = start_server(RdmaConfig {
        max_message: MIB,
        max_memory: MIB + CONN + 8 * PER_CREDIT + 4096,
        ..RdmaConfig::default()
    })
    .await;
    let (busy, _) = client(server.addr, RdmaConfig::default());
    slow_calls(&busy, 64).await;
    let s = server.stats.latest().unwrap();
    assert_eq!(s.get(Counter::CreditsGranted), 16);
    let more_sends = (s.get(Counter::SendBuffers) - 2) * 4096;
    assert_eq!(
        s.get(Counter::MemoryCharged),
        CONN + 8 * PER_CREDIT + more_sends
    );
    assert!(s.get(Counter::CreditGrowthsRefused) >= 1);
    let m = server.stats.memory().unwrap();
    assert!(m.peak <= m.limit, "{m}");
}
