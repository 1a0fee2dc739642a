//! RPC-over-RDMA Version Two on the wire (rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00
//! §5) between our client and server over the userspace iWARP provider on TCP loopback:
//! v2 to v2, v2 client to a Version One-only server (ERR_VERS, then Version One, and no
//! probe again after a reconnect), v1 client to v2 server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rpcrdma_transport::{Counter, RdmaConfig};

fn v2() -> RdmaConfig {
    RdmaConfig {
        version_two: true,
        ..RdmaConfig::default()
    }
}

async fn traffic(c: &oncrpc::Client) {
    for (i, n) in [0usize, 1000, 5000, 70_000, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        assert!(echo(c, data.clone()).await == data, "echo {n}");
    }
    // A reply larger than the inline threshold with nothing DDP-eligible: Reply chunk.
    let n = 20_000;
    let mut r = c
        .call(PROG, VERS, BIG, big_arg(n as u32, &pattern(n, 3)))
        .await
        .unwrap();
    assert!(r.results.opaque(u32::MAX).unwrap() == pattern(n, 9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_1_v2_client_and_v2_server_speak_version_two() {
    init_tracing();
    let server = start_server(v2()).await;
    let (c, cstats) = client(server.addr, v2());
    traffic(&c).await;
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    eprintln!("{s}\n{ss}");
    assert_eq!(s.get(Counter::Version), 2);
    assert_eq!(
        ss.get(Counter::Version),
        2,
        "replies in the caller's version"
    );
    assert_eq!(s.get(Counter::VersionFallbacks), 0);
    assert_eq!(s.get(Counter::ErrRdmaErrorReceived), 0);
    assert_eq!(s.get(Counter::Calls), s.get(Counter::Replies));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_3_v1_client_to_v2_server_is_answered_in_v1() {
    init_tracing();
    let server = start_server(v2()).await;
    let (c, cstats) = client(server.addr, RdmaConfig::default());
    traffic(&c).await;
    assert_eq!(cstats.latest().unwrap().get(Counter::Version), 1);
    assert_eq!(server.stats.latest().unwrap().get(Counter::Version), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_s5_2_v2_client_to_v1_only_server_falls_back_and_does_not_loop_on_reconnect() {
    init_tracing();
    let v1 = RdmaConfig::default();
    let server = Arc::new(rpcrdma_transport::RdmaServer::new(
        iwarp(),
        dispatcher(),
        Arc::new(TestBinding),
        v1.clone(),
    ));
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let s1 = server.clone();
    let serve = tokio::spawn(async move { s1.serve(listener).await });
    let (c, cstats) = client(addr, v2());
    traffic(&c).await;
    let first = cstats.latest().unwrap();
    // ERR_VERS for the probe, the Call again in Version One, then Version One only.
    assert_eq!(first.get(Counter::VersionFallbacks), 1);
    assert_eq!(first.get(Counter::Version), 1);
    assert_eq!(first.get(Counter::Calls), first.get(Counter::Replies) + 1);

    // The connection goes; the next one starts in Version One straight away.
    server.shutdown();
    serve.abort();
    let _ = serve.await;
    let c2 = c.clone();
    let retry = tokio::spawn(async move { echo(&c2, pattern(100, 1)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server2 = start_server_at(v1, addr).await;
    assert!(retry.await.unwrap() == pattern(100, 1));
    traffic(&c).await;
    let conns = cstats.snapshots();
    assert!(conns.len() >= 2, "client did not reconnect");
    let last = conns.last().unwrap();
    eprintln!("{last}");
    assert_eq!(
        last.get(Counter::VersionFallbacks),
        0,
        "no probe, no ERR_VERS"
    );
    assert_eq!(last.get(Counter::ErrRdmaErrorReceived), 0);
    assert_eq!(last.get(Counter::Version), 1);
    assert_eq!(server2.stats.total(Counter::ErrBadHeader), 0);
}
