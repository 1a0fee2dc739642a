//! Issue 31: a connection is never silently stuck (`RdmaConfig::stall_timeout`).
//!
//! On the in-memory provider, the server's Reply Send stalls in the provider (posted,
//! never delivered, never completed, as a transmit path that hangs): the connection's
//! state dump shows the Send in flight, the watchdog warns, then closes the connection,
//! and the client's retransmission on its new connection is answered. A Call that waits
//! in the dispatcher instead is warned about but its connection is kept: a new one
//! would wait the same. The client's connections run on the same driver: one whose
//! Call's Send stalls is closed too, and the Call answered on the next.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::mem_provider::MemProvider;
use common::*;
use oncrpc::{Client, ClientConfig};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaServer, RdmaTransport, StatsRegistry};
use xdr::Encoder;

/// A server on the in-memory provider with `stall_timeout`, and a client of it.
async fn server_and_client(
    p: &MemProvider,
    stall_timeout: Duration,
) -> (StatsRegistry, Client, tokio::task::JoinHandle<()>) {
    let config = RdmaConfig {
        stall_timeout,
        ..RdmaConfig::default()
    };
    let server = RdmaServer::new(p.clone(), dispatcher(), Arc::new(TestBinding), config);
    let stats = server.stats();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    let client = Client::new(
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
    client
        .call(PROG, VERS, NULL, Encoder::new().finish())
        .await
        .unwrap();
    (stats, client, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_send_shows_in_the_dump_is_warned_about_closed_and_the_retransmission_answered() {
    init_tracing();
    let p = MemProvider::default();
    let (stats, client, task) = server_and_client(&p, Duration::from_millis(800)).await;
    let client = Arc::new(client);

    // The server's next Send (the Reply to this ECHO) hangs in the provider.
    p.stall_server_sends(1);
    let data = pattern(200, 7);
    let call = {
        let (client, data) = (client.clone(), data.clone());
        tokio::spawn(async move { echo(&client, data).await })
    };

    // The dump shows what the connection waits for: the Reply's Send, posted (the Call
    // itself is answered as far as the protocol core is concerned, and its Receive
    // posted again).
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let dumped = loop {
        let live = stats.live_states(Duration::from_secs(1)).await;
        let found = live
            .into_iter()
            .find(|l| l.state.as_deref().is_some_and(|s| s.contains("sends=1")));
        if let Some(l) = found {
            break l;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no dump shows the Send"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let state = dumped.state.unwrap();
    assert!(
        state.starts_with("calls=0 credits=8 recvs_posted=8 in_dispatcher=0 reads=0 sends=1"),
        "{state}"
    );
    assert!(dumped.counters.open);

    // The watchdog warns once, then closes the connection.
    until(|| stats.total(Counter::Stalls) == 1).await;
    // Its close reason is recorded when its task ends, after the counter: wait for
    // the end.
    let ended = || {
        stats
            .snapshots()
            .into_iter()
            .find(|s| s.get(Counter::StallCloses) == 1 && !s.open)
    };
    until(|| ended().is_some()).await;
    let closed = ended().unwrap();
    let why = closed.close_reason.clone().unwrap_or_default();
    assert!(
        why.contains("no progress") && why.contains("sends=1"),
        "{why}"
    );

    // The client reconnects and retransmits; the new connection answers.
    let got = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("answered after the reconnect")
        .unwrap();
    assert!(got == data);
    assert_eq!(stats.snapshots().len(), 2, "one new connection");
    assert_eq!(stats.total(Counter::StallCloses), 1);
    task.abort();
}

/// The client's side of the same (issue 28: one driver, one liveness, for both roles):
/// its Call's Send hangs in the provider, its watchdog warns and closes the
/// connection, and oncrpc's retransmission on the next connection is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connection_stuck_on_its_send_is_closed_and_the_call_answered_on_the_next() {
    init_tracing();
    let p = MemProvider::default();
    let server = RdmaServer::new(
        p.clone(),
        dispatcher(),
        Arc::new(TestBinding),
        RdmaConfig::default(),
    );
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    let transport = RdmaTransport::new(
        p.clone(),
        addr,
        RdmaConfig {
            stall_timeout: Duration::from_millis(800),
            ..RdmaConfig::default()
        },
        Arc::new(TestBinding),
    );
    let stats = transport.stats();
    let client = Client::new(
        transport,
        ClientConfig {
            timeout: Duration::from_secs(30),
            ..ClientConfig::default()
        },
    );
    let data = pattern(300, 3);
    assert!(echo(&client, data.clone()).await == data);

    // The client's next Send (this ECHO's Call) hangs in the provider.
    p.stall_client_sends(1);
    let got = tokio::time::timeout(Duration::from_secs(20), echo(&client, data.clone()))
        .await
        .expect("answered after the reconnect");
    assert!(got == data);
    let snaps = stats.snapshots();
    assert_eq!(snaps.len(), 2, "one new connection");
    assert_eq!(stats.total(Counter::Stalls), 1);
    assert_eq!(stats.total(Counter::StallCloses), 1);
    let why = snaps[0].close_reason.clone().unwrap_or_default();
    assert!(
        why.contains("no progress") && why.contains("sends=1"),
        "{why}"
    );
    drop(client);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_in_the_dispatcher_is_warned_about_but_its_connection_kept() {
    init_tracing();
    let p = MemProvider::default();
    let (stats, client, task) = server_and_client(&p, Duration::from_millis(400)).await;
    // Kept here: a client dropped with its call would close the connection itself.
    let client = Arc::new(client);
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(PROG, VERS, GATED, big_arg(8, b"pad"))
                .await
                .map(|_| ())
        })
    };
    until(|| stats.total(Counter::Stalls) == 1).await;
    let live = stats.live_states(Duration::from_secs(1)).await;
    assert_eq!(live.len(), 1);
    let state = live[0].state.clone().unwrap();
    assert!(state.contains("in_dispatcher=1 (oldest "), "{state}");
    // Two more stall timeouts: warned once, never closed.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(stats.total(Counter::Stalls), 1);
    assert_eq!(stats.total(Counter::StallCloses), 0);
    GATE.add_permits(1);
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("answered once the dispatcher answers")
        .unwrap()
        .unwrap();
    assert_eq!(stats.snapshots().len(), 1, "the same connection");
    assert!(stats.snapshots()[0].open);
    drop(client);
    task.abort();
}

/// A provider that never flushes a dead connection's work requests (its completion
/// stream never ends) does not keep the connection forever: `TEARDOWN_GRACE` (5 s)
/// after the peer's disconnect the task ends without them, says so, and releases the
/// connection's memory charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_connection_whose_work_is_never_flushed_is_torn_down_anyway() {
    init_tracing();
    let p = MemProvider::default();
    let (stats, client, task) = server_and_client(&p, Duration::ZERO).await;
    p.stall_server_sends(1);
    p.never_flush_stalled_sends();
    let client = Arc::new(client);
    let call = {
        let client = client.clone();
        tokio::spawn(async move { echo(&client, pattern(100, 1)).await })
    };
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let live = stats.live_states(Duration::from_secs(1)).await;
        if live
            .iter()
            .any(|l| l.state.as_deref().is_some_and(|s| s.contains("sends=1")))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no dump shows the Send"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The client goes (its connection with it); the server's Send is never flushed.
    call.abort();
    drop(client);
    let t = std::time::Instant::now();
    until(|| stats.snapshots().iter().all(|s| !s.open)).await;
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(4),
        "ended by the grace period, not by a flush: {waited:?}"
    );
    let snap = &stats.snapshots()[0];
    assert_eq!(snap.get(Counter::TeardownsUnflushed), 1, "{snap}");
    assert!(
        snap.close_reason
            .as_deref()
            .is_some_and(|r| r.contains("PeerClosed")),
        "{snap}"
    );
    until(|| stats.memory().is_some_and(|m| m.charged == 0)).await;
    task.abort();
}
