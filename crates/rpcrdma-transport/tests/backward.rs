//! Backward-direction RPC (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §7) between our
//! server and client over the userspace iWARP provider on TCP loopback: the server
//! calls the client on the client's connection, only after the explicit "ready"
//! (§7.3.1), with backward credits, Receives and XIDs of its own (§7.1.4, §7.2), while
//! forward Calls with the same XIDs run.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::*;
use oncrpc::{Dispatcher, RecordSender};
use rpcrdma_transport::{
    BackwardChannel, BackwardError, Counter, RdmaConfig, RdmaServer, RdmaTransport,
};

/// The program the client serves in the backward direction (the test program under
/// another number, as NFSv4.1's callback program is another program).
const CB_PROG: u32 = 0x4000_5151;

fn config(version_two: bool) -> RdmaConfig {
    RdmaConfig {
        version_two,
        backward_credits: 8,
        ..RdmaConfig::default()
    }
}

fn cb_dispatcher() -> Arc<Dispatcher> {
    let mut d = Dispatcher::new();
    d.register(CB_PROG, [VERS], Arc::new(TestProgram)).unwrap();
    Arc::new(d)
}

struct Setup {
    _server: TestServerTask,
    channel: BackwardChannel,
    tx: rpcrdma_transport::RdmaSender<<iwarp::IwarpProvider as rdma::ConnectionManager>::Qp>,
    rx: rpcrdma_transport::RdmaReceiver,
    server_stats: rpcrdma_transport::StatsRegistry,
}

struct TestServerTask(tokio::task::JoinHandle<()>);

impl Drop for TestServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A server with a backward channel, and one client connection serving backward
/// Calls with [`cb_dispatcher`].
async fn setup(version_two: bool) -> Setup {
    let server = RdmaServer::new(
        iwarp(),
        dispatcher(),
        Arc::new(TestBinding),
        config(version_two),
    );
    let mut channels = server.backward_channels();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let server_stats = server.stats();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    let t = RdmaTransport::new(iwarp(), addr, config(version_two), Arc::new(TestBinding))
        .serve_backward(cb_dispatcher());
    let (tx, rx) = t.connect_once().await.unwrap();
    let channel = channels.recv().await.unwrap();
    Setup {
        _server: TestServerTask(task),
        channel,
        tx,
        rx,
        server_stats,
    }
}

fn echo_call(xid: u32, prog: u32, data: &[u8]) -> xdr::XdrStream {
    call_msg(xid, prog, ECHO, |e| {
        e.opaque(data);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bc_s7_3_1_a_backward_call_before_ready_is_refused_with_not_ready() {
    init_tracing();
    let mut s = setup(false).await;
    let data = pattern(100, 1);
    assert_eq!(
        s.channel.call(echo_call(7, CB_PROG, &data)).await,
        Err(BackwardError::NotReady)
    );
    // Nothing went on the wire, and the forward direction is unaffected.
    s.tx.send(&echo_call(7, PROG, &data)).await.unwrap();
    let (xid, got) = reply_opaque(next_reply(&mut s.rx).await);
    assert_eq!((xid, got), (7, data.clone()));
    let ss = s.server_stats.latest().unwrap();
    assert_eq!(ss.get(Counter::BackwardCalls), 0);
    assert_eq!(ss.get(Counter::BackwardFailed), 1);

    // The upper layer learned the client is prepared: now it goes.
    s.channel.set_peer_ready().unwrap();
    let reply = s.channel.call(echo_call(7, CB_PROG, &data)).await.unwrap();
    assert_eq!(reply_opaque(reply), (7, data));
    let ss = s.server_stats.latest().unwrap();
    assert_eq!(ss.get(Counter::BackwardCalls), 1);
    assert_eq!(ss.get(Counter::BackwardReplies), 1);
    assert_eq!(s.tx.stats().get(Counter::BackwardCalls), 1);
    assert_eq!(s.tx.stats().get(Counter::BackwardReplies), 1);
}

async fn thousand_each_way(version_two: bool) {
    init_tracing();
    const N: u32 = 1000;
    let s = setup(version_two).await;
    s.channel.set_peer_ready().unwrap();
    let (mut tx, mut rx, channel) = (s.tx, s.rx, s.channel);
    let cstats = tx.stats();
    // §7.1.4: the backward XID space is separate, so the same XIDs go both ways at
    // once; each side tells Calls from Replies by the RPC message type.
    let forward = tokio::spawn(async move {
        for xid in 1..=N {
            let data = pattern(16 + (xid as usize % 300), xid as u8);
            tx.send(&echo_call(xid, PROG, &data)).await.unwrap();
        }
        tx
    });
    let replies = tokio::spawn(async move {
        let mut seen = HashSet::new();
        while seen.len() < N as usize {
            let (xid, data) = reply_opaque(next_reply(&mut rx).await);
            assert!(
                data == pattern(16 + (xid as usize % 300), xid as u8),
                "forward {xid}"
            );
            assert!(seen.insert(xid), "forward reply {xid} twice");
        }
        rx
    });
    let mut backward = Vec::new();
    for xid in 1..=N {
        let channel = channel.clone();
        backward.push(tokio::spawn(async move {
            let data = pattern(8 + (xid as usize % 200), !(xid as u8));
            let reply = channel.call(echo_call(xid, CB_PROG, &data)).await.unwrap();
            assert_eq!(reply_opaque(reply), (xid, data), "backward {xid}");
        }));
    }
    for b in backward {
        b.await.unwrap();
    }
    let _tx = forward.await.unwrap();
    let _rx = replies.await.unwrap();
    let c = cstats.snapshot();
    let ss = s.server_stats.latest().unwrap();
    eprintln!("{c}\n{ss}");
    assert_eq!(ss.get(Counter::BackwardCalls), u64::from(N));
    assert_eq!(ss.get(Counter::BackwardReplies), u64::from(N));
    assert_eq!(c.get(Counter::BackwardCalls), u64::from(N));
    assert_eq!(c.get(Counter::BackwardReplies), u64::from(N));
    assert_eq!(c.get(Counter::Calls), u64::from(N));
    assert_eq!(c.get(Counter::Replies), u64::from(N));
    assert_eq!(ss.get(Counter::Calls), u64::from(N));
    // No credit or XID confusion: nothing dropped, no error, one connection.
    assert_eq!(
        ss.get(Counter::ErrDiscarded) + c.get(Counter::ErrDiscarded),
        0
    );
    assert_eq!(
        ss.get(Counter::BackwardFailed) + c.get(Counter::BackwardFailed),
        0
    );
    assert_eq!(ss.get(Counter::ErrRdmaErrorSent), 0);
    assert_eq!(c.get(Counter::ErrRdmaErrorReceived), 0);
    assert_eq!(
        ss.get(Counter::ErrCompletion) + c.get(Counter::ErrCompletion),
        0
    );
    assert!(c.open && ss.open);
    // Eight backward credits for a thousand concurrent Calls: most waited for one.
    assert!(ss.get(Counter::BackwardCreditWaits) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bc_s7_1000_backward_calls_while_1000_forward_calls_run_v1() {
    thousand_each_way(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bc_s7_1000_backward_calls_while_1000_forward_calls_run_v2() {
    thousand_each_way(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bc_s7_3_2_backward_calls_fail_when_the_connection_is_lost() {
    init_tracing();
    let s = setup(false).await;
    s.channel.set_peer_ready().unwrap();
    drop(s.tx);
    drop(s.rx);
    until(|| s.server_stats.latest().is_some_and(|x| !x.open)).await;
    assert_eq!(
        s.channel.call(echo_call(1, CB_PROG, b"x")).await,
        Err(BackwardError::ConnectionLost)
    );
}
