//! Client and server over the userspace iWARP provider on TCP loopback: the size matrix
//! at three inline thresholds, Reply chunks and Position Zero Read chunks, 128 calls in
//! flight, and a server restart with retransmission.

mod common;

use std::time::Duration;

use common::*;
use rpcrdma_transport::{Counter, RdmaConfig};

const SIZES: &[usize] = &[
    0,
    1,
    3,
    1023,
    1024,
    1025,
    4095,
    4096,
    4097,
    65537,
    (4 << 20) + 3,
];

async fn size_matrix(inline: u32) {
    init_tracing();
    let server = start_server(RdmaConfig::with_inline(inline)).await;
    let (c, cstats) = client(server.addr, RdmaConfig::with_inline(inline));
    for (i, &n) in SIZES.iter().enumerate() {
        let data = pattern(n, i as u8);
        // DDP-eligible argument and result.
        let back = echo(&c, data.clone()).await;
        assert_eq!(back.len(), n, "ECHO size {n} inline {inline}");
        assert!(
            back == data,
            "ECHO bytes differ at size {n} inline {inline}"
        );
        // DDP-eligible result only (Write chunk, like NFS READ).
        let mut r = c.call(PROG, VERS, GEN, u32_arg(n as u32)).await.unwrap();
        let got = r.results.opaque(u32::MAX).unwrap();
        assert!(
            got == pattern(n, 7),
            "GEN bytes differ at size {n} inline {inline}"
        );
        // DDP-eligible argument only (Read chunk, like NFS WRITE).
        let mut r = c
            .call(PROG, VERS, SINK, ddp_arg(data.clone()))
            .await
            .unwrap();
        assert_eq!(r.results.u32().unwrap(), n as u32);
        assert_eq!(r.results.u32().unwrap(), checksum(&data));
    }
    // Results larger than the inline threshold with nothing DDP-eligible: Reply chunk;
    // and a large non-DDP argument: Position Zero Read chunk (Long Call).
    for &n in &[
        inline as usize - 100,
        inline as usize + 1,
        3 * inline as usize + 5,
        1 << 20,
    ] {
        let mut r = c
            .call(PROG, VERS, BIG, big_arg(n as u32, &pattern(n, 3)))
            .await
            .unwrap();
        let got = r.results.opaque(u32::MAX).unwrap();
        assert!(
            got == pattern(n, 9),
            "BIG bytes differ at size {n} inline {inline}"
        );
    }
    let s = cstats.latest().unwrap();
    eprintln!("inline {inline}: {s}");
    let ss = server.stats.latest().unwrap();
    eprintln!("inline {inline}: {ss}");
    assert!(s.get(Counter::ReplyChunks) > 0, "no reply chunk used");
    assert!(
        ss.get(Counter::ReplyChunks) > 0,
        "server used no reply chunk"
    );
    assert!(s.get(Counter::PositionZeroReadChunks) > 0, "no long call");
    assert!(s.get(Counter::ReadChunks) > 0);
    assert!(ss.get(Counter::RdmaWrites) > 0 && ss.get(Counter::RdmaReads) > 0);
    // Calls with one Read chunk (ECHO, SINK: like NFS WRITE) reach the dispatcher
    // made contiguous around the chunk's data in its sink, the data not copied.
    assert!(
        ss.get(Counter::CallsJoinedInPlace) > 0,
        "no call joined in place"
    );
    assert_eq!(s.get(Counter::SendThreshold), u64::from(inline));
    assert_eq!(s.get(Counter::Calls), s.get(Counter::Replies));
    // Every region fenced: by the peer's Send With Invalidate or locally.
    assert_eq!(
        s.get(Counter::Registrations),
        s.get(Counter::LocalInvalidations) + s.get(Counter::RemoteInvalidations)
    );
    assert!(s.get(Counter::RemoteInvalidations) > 0);
    assert_eq!(
        ss.get(Counter::ErrBadHeader) + ss.get(Counter::ErrGarbageArgs),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_matrix_inline_1k() {
    size_matrix(1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_matrix_inline_4k() {
    size_matrix(4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_matrix_inline_64k() {
    size_matrix(65536).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_128() {
    init_tracing();
    // The whole grant from the start: by default it grows from 8 while more than half
    // of it is in service, which 128 quick calls need not show at every step (a run
    // ended at 64). Growth has its own test (memory_budget.rs).
    let server = start_server(RdmaConfig {
        initial_credits: 128,
        ..RdmaConfig::default()
    })
    .await;
    let (c, cstats) = client(server.addr, RdmaConfig::default());
    // The first reply brings the grant (§4.3.3: one credit until then).
    echo(&c, pattern(10, 1)).await;
    let mut tasks = Vec::new();
    for i in 0..128usize {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let n = [0, 1, 1025, 4097, 70_000][i % 5] + i;
            let data = pattern(n, i as u8);
            let back = echo(&c, data.clone()).await;
            assert!(back == data, "call {i} size {n}");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = cstats.latest().unwrap();
    eprintln!("{s}");
    assert_eq!(s.get(Counter::CreditsGranted), 128);
    assert_eq!(s.get(Counter::Calls), 129);
    assert_eq!(s.get(Counter::Replies), 129);
    assert_eq!(s.get(Counter::SendPoolFallbacks), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_limit_below_calls_in_flight() {
    init_tracing();
    // The server grants 4: the client queues the rest and never exceeds the grant.
    let server = start_server(RdmaConfig {
        credits: 4,
        ..RdmaConfig::default()
    })
    .await;
    let (c, cstats) = client(server.addr, RdmaConfig::default());
    let mut tasks = Vec::new();
    for i in 0..64usize {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(5000 + i, i as u8);
            assert!(echo(&c, data.clone()).await == data);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = cstats.latest().unwrap();
    assert_eq!(s.get(Counter::CreditsGranted), 4);
    assert!(s.get(Counter::CreditWaits) > 0);
    assert_eq!(s.get(Counter::Replies), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_client_reconnects_and_retransmits() {
    init_tracing();
    let cfg = RdmaConfig::default();
    let server = std::sync::Arc::new(rpcrdma_transport::RdmaServer::new(
        iwarp(),
        dispatcher(),
        std::sync::Arc::new(TestBinding),
        cfg.clone(),
    ));
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let s1 = server.clone();
    let serve = tokio::spawn(async move { s1.serve(listener).await });
    let (c, cstats) = client(addr, cfg.clone());
    assert!(echo(&c, pattern(100, 1)).await == pattern(100, 1));
    // Calls in service when the server goes down (their replies are lost) ...
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(2000 * i + 3, i as u8);
            let mut r = c
                .call(PROG, VERS, SLOW, ddp_arg(data.clone()))
                .await
                .unwrap();
            assert!(r.results.opaque(u32::MAX).unwrap() == data);
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;

    // Restart: every connection drops, the listener goes away for a while.
    server.shutdown();
    serve.abort();
    let _ = serve.await;
    // ... and calls made while it is down are sent again after reconnecting, with
    // their XIDs and freshly registered chunks.
    for i in 0..16usize {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(3000 * i + 1, i as u8);
            assert!(echo(&c, data.clone()).await == data);
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server2 = start_server_at(cfg, addr).await;
    for t in tasks {
        t.await.unwrap();
    }
    let conns = cstats.snapshots();
    for s in &conns {
        eprintln!("{s}");
    }
    assert!(conns.len() >= 2, "client did not reconnect");
    assert!(server2.stats.total(Counter::Replies) >= 24);
    let first = &conns[0];
    assert!(first.get(Counter::Calls) >= 9 && first.get(Counter::Replies) == 1);
    // Every region was fenced: by a LOCAL_INV, by the server's Send With Invalidate,
    // or, those of the lost connection, by its end.
    for s in &conns {
        assert_eq!(
            s.get(Counter::Registrations),
            s.get(Counter::LocalInvalidations)
                + s.get(Counter::RemoteInvalidations)
                + s.get(Counter::FencedByDisconnect)
        );
    }
    assert!(first.get(Counter::FencedByDisconnect) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_program_is_refused_by_the_requester() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let (c, cstats) = client(server.addr, RdmaConfig::default());
    // §8: the requester sends nothing; §5.5.4: the call fails at once.
    let r = c
        .call_with_timeout(
            UNBOUND_PROG,
            VERS,
            NULL,
            xdr::XdrStream::default(),
            Duration::from_secs(10),
        )
        .await;
    let Err(oncrpc::ClientError::Transport(failure)) = r else {
        panic!("expected a transport failure, got {r:?}");
    };
    assert!(
        matches!(
            failure.downcast_ref::<rpcrdma_transport::TransportError>(),
            Some(rpcrdma_transport::TransportError::NoBinding {
                prog: UNBOUND_PROG,
                vers: VERS
            })
        ),
        "{failure}"
    );
    let s = cstats.latest().unwrap();
    assert_eq!(s.get(Counter::ErrCallFailedLocally), 1);
    assert_eq!(s.get(Counter::Sends), 0);
    assert_eq!(server.stats.total(Counter::Calls), 0);
    // The connection is still there for bound programs.
    assert!(echo(&c, pattern(5, 5)).await == pattern(5, 5));
    assert_eq!(cstats.snapshots().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_budget_defers_calls_and_serves_them_all() {
    init_tracing();
    let server = start_server(RdmaConfig {
        max_read_in_flight: 150_000,
        ..RdmaConfig::default()
    })
    .await;
    let (c, _) = client(server.addr, RdmaConfig::default());
    echo(&c, pattern(1, 1)).await;
    let mut tasks = Vec::new();
    for i in 0..32usize {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(100_000 + i, i as u8);
            let mut r = c
                .call(PROG, VERS, SINK, ddp_arg(data.clone()))
                .await
                .unwrap();
            assert_eq!(r.results.u32().unwrap(), data.len() as u32);
            assert_eq!(r.results.u32().unwrap(), checksum(&data));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = server.stats.latest().unwrap();
    eprintln!("{s}");
    assert!(s.get(Counter::ReadsDeferred) > 0);
    assert_eq!(s.get(Counter::Replies), 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unequal_inline_thresholds_use_the_smaller_each_way() {
    init_tracing();
    // RFC 8797: each side sends at most what the other can receive.
    let server = start_server(RdmaConfig::with_inline(1024)).await;
    let (c, cstats) = client(server.addr, RdmaConfig::with_inline(65536));
    for &n in &[0usize, 900, 1025, 70_000] {
        let data = pattern(n, 2);
        assert!(echo(&c, data.clone()).await == data);
        let mut r = c
            .call(PROG, VERS, BIG, big_arg(n as u32, &pattern(n, 3)))
            .await
            .unwrap();
        assert!(r.results.opaque(u32::MAX).unwrap() == pattern(n, 9));
    }
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    assert_eq!(s.get(Counter::SendThreshold), 1024);
    assert_eq!(s.get(Counter::RecvThreshold), 1024);
    assert_eq!(ss.get(Counter::SendThreshold), 1024);
    assert!(s.get(Counter::PositionZeroReadChunks) > 0 && s.get(Counter::ReplyChunks) > 0);
}
