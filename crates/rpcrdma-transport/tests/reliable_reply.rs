//! Reliable reply (responder-provided Read chunks,
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05) between our client and server over the
//! userspace iWARP provider on TCP loopback: Replies that exceed every reply resource
//! the client offered come through a Read chunk of the server's and are pulled;
//! RDMA_DONE invalidates it (by Send With Invalidate here), a lost one is invalidated
//! by the timeout; an aborted Call keeps the connection; peers without the feature
//! (a v1 client, a v1-only server, a v2 server without the option) use Reply chunks.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use oncrpc::{RecordReceiver, RecordSender};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaTransport, StatsRegistry};

fn rr() -> RdmaConfig {
    RdmaConfig {
        version_two: true,
        reliable_reply: true,
        // A 16 MiB opaque plus its RPC header is a little over 16 MiB.
        max_message: 32 << 20,
        ..RdmaConfig::default()
    }
}

/// Waits until the latest connection of `stats` agreed to reliable reply.
async fn agreed(stats: &StatsRegistry) {
    until(|| {
        stats
            .latest()
            .is_some_and(|s| s.get(Counter::ReliableReply) == 1)
    })
    .await;
}

async fn big(c: &oncrpc::Client, n: usize) -> bytes::Bytes {
    let mut r = c
        .call(PROG, VERS, BIG, big_arg(n as u32, &[]))
        .await
        .unwrap();
    let out = r.results.opaque(u32::MAX).unwrap();
    r.results.finish().unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_1_replies_of_10k_1m_16m_without_reply_chunk_are_pulled() {
    init_tracing();
    let server = start_server(rr()).await;
    let (c, cstats) = client(server.addr, rr());
    // The first Reply settles Version Two; the option exchange follows it.
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    agreed(&cstats).await;
    for n in [10 << 10, 1 << 20, 16 << 20] {
        assert!(big(&c, n).await == pattern(n, 9), "reply of {n} bytes");
    }
    let s = cstats.latest().unwrap();
    // The RDMA_DONE of the last Reply may still be on its way.
    until(|| server.stats.total(Counter::RdmaDone) == 3).await;
    let ss = server.stats.latest().unwrap();
    eprintln!("{s}\n{ss}");
    assert_eq!(s.get(Counter::ReplyChunks), 0, "no Reply chunk offered");
    assert_eq!(s.get(Counter::PulledReplies), 3);
    assert_eq!(s.get(Counter::RdmaReads), 3);
    assert_eq!(s.get(Counter::RdmaDone), 3);
    assert_eq!(ss.get(Counter::ReliableReply), 1);
    assert_eq!(ss.get(Counter::PulledReplies), 3);
    assert_eq!(ss.get(Counter::PositionZeroReadChunks), 3);
    // reliable-reply §4.1.4: both sides allow remote invalidation, so each RDMA_DONE
    // came by Send With Invalidate and took the server's STag.
    assert_eq!(ss.get(Counter::RemoteInvalidations), 3);
    assert_eq!(ss.get(Counter::RdmaDoneDropped), 0);
    assert_eq!(ss.get(Counter::ErrBadHeader), 0);
    assert_eq!(ss.get(Counter::PullTimeouts), 0);
    assert_eq!(
        s.get(Counter::ErrCompletion) + ss.get(Counter::ErrCompletion),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_4_without_remote_invalidation_the_server_invalidates_locally() {
    init_tracing();
    let server = start_server(RdmaConfig {
        remote_invalidate: false,
        ..rr()
    })
    .await;
    let (c, cstats) = client(server.addr, rr());
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    agreed(&cstats).await;
    assert!(big(&c, 100_000).await == pattern(100_000, 9));
    until(|| server.stats.total(Counter::RdmaDone) == 1).await;
    // The local invalidation is counted at its completion, which may come after the
    // RDMA_DONE that asked for it.
    until(|| server.stats.total(Counter::LocalInvalidations) == 1).await;
    let ss = server.stats.latest().unwrap();
    assert_eq!(ss.get(Counter::PulledReplies), 1);
    assert_eq!(ss.get(Counter::RemoteInvalidations), 0);
    assert_eq!(ss.get(Counter::LocalInvalidations), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s4_1_3_a_lost_rdma_done_is_invalidated_by_the_timeout() {
    init_tracing();
    let server = start_server(RdmaConfig {
        pull_timeout: Duration::from_millis(200),
        ..rr()
    })
    .await;
    let (c, cstats) = client(
        server.addr,
        RdmaConfig {
            fault_skip_rdma_done: true,
            ..rr()
        },
    );
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    agreed(&cstats).await;
    assert!(big(&c, 10 << 10).await == pattern(10 << 10, 9));
    until(|| server.stats.total(Counter::PullTimeouts) == 1).await;
    // The connection carries on: the next pulled Reply works and times out too.
    assert!(big(&c, 50_000).await == pattern(50_000, 9));
    until(|| server.stats.total(Counter::PullTimeouts) == 2).await;
    // The timeout counts when it fires; the invalidation it posts counts at its
    // completion, later.
    until(|| server.stats.total(Counter::LocalInvalidations) == 2).await;
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    eprintln!("{s}\n{ss}");
    assert_eq!(cstats.snapshots().len(), 1, "one connection throughout");
    assert_eq!(s.get(Counter::RdmaDoneSkipped), 2);
    assert_eq!(s.get(Counter::RdmaDone), 0);
    assert_eq!(ss.get(Counter::RdmaDone), 0);
    assert_eq!(ss.get(Counter::LocalInvalidations), 2);
    assert_eq!(ss.get(Counter::PulledReplies), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s5_1_3_an_aborted_call_with_its_reply_pending_keeps_the_connection() {
    init_tracing();
    let server = start_server(rr()).await;
    let t = RdmaTransport::new(iwarp(), server.addr, rr(), Arc::new(TestBinding));
    let (mut tx, mut rx) = t.connect_once().await.unwrap();
    let stats = tx.stats();
    tx.send(&call_msg(1, PROG, NULL, |_| {})).await.unwrap();
    rx.recv().await.unwrap().unwrap();
    until(|| stats.get(Counter::ReliableReply) == 1).await;

    // A Call whose Reply the server holds until the gate opens: it cannot have come.
    let n = 64 << 10;
    tx.send(&call_msg(2, PROG, GATED, |e| {
        e.u32(n).opaque(&[]);
    }))
    .await
    .unwrap();
    assert!(tx.abort(2).await, "the call is outstanding");
    GATE.add_permits(1);
    // reliable-reply §4.1.3: the Reply comes in a Read chunk for an XID we no longer
    // wait for; we still send RDMA_DONE, without pulling.
    until(|| stats.get(Counter::RdmaDoneUnknownXid) == 1).await;
    until(|| server.stats.total(Counter::RdmaDone) == 1).await;

    // §5.1.3: "The transport connection is preserved": the next Call works, and the
    // aborted Reply was never delivered.
    tx.send(&call_msg(3, PROG, BIG, |e| {
        e.u32(n).opaque(&[]);
    }))
    .await
    .unwrap();
    let (xid, data) = reply_opaque(next_reply(&mut rx).await);
    assert_eq!(xid, 3);
    assert!(data == pattern(n as usize, 9));
    let ss = server.stats.latest().unwrap();
    eprintln!("{}\n{ss}", stats.snapshot());
    assert!(stats.is_open() && ss.open, "connection intact");
    assert_eq!(stats.get(Counter::CallsAborted), 1);
    assert_eq!(stats.get(Counter::PulledReplies), 1, "only the third call");
    assert_eq!(stats.get(Counter::ErrCompletion), 0);
    assert_eq!(ss.get(Counter::PulledReplies), 2);
    assert_eq!(ss.get(Counter::ErrCompletion), 0);
    until(|| server.stats.total(Counter::RdmaDone) == 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s6_v1_client_to_reliable_reply_server_uses_reply_chunks() {
    init_tracing();
    let server = start_server(rr()).await;
    let (c, cstats) = client(server.addr, RdmaConfig::default());
    for n in [20_000, 1 << 20] {
        assert!(big(&c, n).await == pattern(n, 9));
    }
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    assert_eq!(s.get(Counter::Version), 1);
    assert_eq!(s.get(Counter::ReplyChunks), 2);
    assert_eq!(s.get(Counter::PulledReplies), 0);
    assert_eq!(ss.get(Counter::ReliableReply), 0);
    assert_eq!(ss.get(Counter::PulledReplies), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s6_v2_client_to_v1_only_server_falls_back_and_never_advertises() {
    init_tracing();
    let server = start_server(RdmaConfig::default()).await;
    let (c, cstats) = client(server.addr, rr());
    for n in [20_000, 1 << 20] {
        assert!(big(&c, n).await == pattern(n, 9));
    }
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    assert_eq!(s.get(Counter::VersionFallbacks), 1);
    assert_eq!(s.get(Counter::Version), 1);
    assert_eq!(s.get(Counter::ReliableReply), 0);
    assert_eq!(s.get(Counter::PulledReplies), 0);
    // The probe's, its Version One retry's and the second Call's.
    assert_eq!(s.get(Counter::ReplyChunks), 3);
    // ERR_VERS for the probe only: no RDMA_OPTIONAL reached the server.
    assert_eq!(ss.get(Counter::ErrVers), 1);
    assert_eq!(ss.get(Counter::ErrRdmaErrorSent), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_v2_s3_1_v2_server_without_the_option_answers_err_inval_option() {
    init_tracing();
    let server = start_server(RdmaConfig {
        version_two: true,
        ..RdmaConfig::default()
    })
    .await;
    let (c, cstats) = client(server.addr, rr());
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    until(|| {
        cstats
            .latest()
            .is_some_and(|s| s.get(Counter::ErrRdmaErrorReceived) == 1)
    })
    .await;
    for n in [20_000, 1 << 20] {
        assert!(big(&c, n).await == pattern(n, 9));
    }
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    assert_eq!(s.get(Counter::Version), 2);
    assert_eq!(s.get(Counter::ReliableReply), 0);
    assert_eq!(s.get(Counter::ReplyChunks), 2, "Reply chunks as before");
    assert_eq!(ss.get(Counter::ErrRdmaErrorSent), 1);
    assert_eq!(ss.get(Counter::PulledReplies), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s5_4_3_a_disconnect_invalidates_the_reply_chunks_still_exposed() {
    init_tracing();
    let server = start_server(RdmaConfig {
        pull_timeout: Duration::from_secs(3600),
        ..rr()
    })
    .await;
    let t = RdmaTransport::new(
        iwarp(),
        server.addr,
        RdmaConfig {
            fault_skip_rdma_done: true,
            ..rr()
        },
        Arc::new(TestBinding),
    );
    let (mut tx, mut rx) = t.connect_once().await.unwrap();
    let stats = tx.stats();
    tx.send(&call_msg(1, PROG, NULL, |_| {})).await.unwrap();
    rx.recv().await.unwrap().unwrap();
    until(|| stats.get(Counter::ReliableReply) == 1).await;
    for xid in 2..=3 {
        tx.send(&call_msg(xid, PROG, BIG, |e| {
            e.u32(30_000).opaque(&[]);
        }))
        .await
        .unwrap();
        let (x, data) = reply_opaque(next_reply(&mut rx).await);
        assert_eq!(x, xid);
        assert!(data == pattern(30_000, 9));
    }
    assert_eq!(stats.get(Counter::RdmaDoneSkipped), 2);
    // Two Read chunks stay exposed (no RDMA_DONE, no timeout) until the connection goes.
    drop(tx);
    drop(rx);
    until(|| server.stats.latest().is_some_and(|s| !s.open)).await;
    let ss = server.stats.latest().unwrap();
    eprintln!("{ss}");
    assert_eq!(ss.get(Counter::PulledReplies), 2);
    assert_eq!(ss.get(Counter::PullsInvalidatedOnClose), 2);
    assert_eq!(ss.get(Counter::PullTimeouts), 0);
    // Fenced by the connection's end: a LOCAL_INV posted in time, or none needed.
    assert_eq!(
        ss.get(Counter::LocalInvalidations) + ss.get(Counter::FencedByDisconnect),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rr_s5_2_3_pulls_under_a_small_grant_never_overrun_the_servers_receives() {
    init_tracing();
    // Three Receives: at most two Read chunks exposed at once (one Receive is always
    // left for a Call), and the grant drops by one per pull in progress.
    let server = start_server(RdmaConfig { credits: 3, ..rr() }).await;
    let (c, cstats) = client(server.addr, rr());
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    agreed(&cstats).await;
    let mut calls = Vec::new();
    for i in 0..40usize {
        let c = c.clone();
        calls.push(tokio::spawn(async move {
            let n = 5000 + 997 * i;
            assert!(big(&c, n).await == pattern(n, 9), "reply {i}");
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    until(|| server.stats.total(Counter::RdmaDone) == 40).await;
    let s = cstats.latest().unwrap();
    let ss = server.stats.latest().unwrap();
    eprintln!("{s}\n{ss}");
    assert_eq!(cstats.snapshots().len(), 1, "one connection throughout");
    assert_eq!(s.get(Counter::PulledReplies), 40);
    assert_eq!(ss.get(Counter::PulledReplies), 40);
    assert_eq!(
        s.get(Counter::ErrCompletion) + ss.get(Counter::ErrCompletion),
        0
    );
    assert_eq!(ss.get(Counter::ErrRdmaErrorSent), 0);
    assert!(s.open && ss.open);
}
