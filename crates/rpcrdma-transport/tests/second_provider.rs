//! The transport over a second provider (`common::mem_provider`: two queue pairs
//! joined in memory, no wire format, no socket), so that its server and client drivers
//! are shown to assume nothing of the userspace iWARP provider beyond the `rdma` API:
//! every message shape, Version Two with reliable reply (pulled Replies, RDMA_DONE),
//! the backward direction, credits below the calls in flight, and a reconnect.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::mem_provider::MemProvider;
use common::*;
use oncrpc::{Client, ClientConfig, Dispatcher};
use rpcrdma_transport::{
    BackwardChannel, Counter, RdmaConfig, RdmaServer, RdmaTransport, StatsRegistry,
};
use tokio::sync::mpsc;

struct Served {
    addr: SocketAddr,
    stats: StatsRegistry,
    backward: mpsc::UnboundedReceiver<BackwardChannel>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(p: &MemProvider, config: RdmaConfig) -> Served {
    let server = RdmaServer::new(p.clone(), dispatcher(), Arc::new(TestBinding), config);
    let backward = server.backward_channels();
    let listener = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let stats = server.stats();
    let task = tokio::spawn(async move {
        let _ = server.serve(listener).await;
    });
    Served {
        addr,
        stats,
        backward,
        task,
    }
}

fn connect(t: RdmaTransport<MemProvider>) -> (Client, StatsRegistry) {
    let stats = t.stats();
    let c = Client::new(
        t,
        ClientConfig {
            timeout: Duration::from_secs(60),
            ..ClientConfig::default()
        },
    );
    (c, stats)
}

fn transport(p: &MemProvider, addr: SocketAddr, config: RdmaConfig) -> RdmaTransport<MemProvider> {
    RdmaTransport::new(p.clone(), addr, config, Arc::new(TestBinding))
}

/// Every shape both ways: inline, Read chunks (DDP argument, Long Call), Write chunks
/// (DDP result), Reply chunks; byte-exact.
async fn shapes(c: &Client, inline: usize) {
    for (i, n) in [0usize, 1, 100, inline - 64, inline + 1, 70_001, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        assert!(echo(c, data.clone()).await == data, "ECHO {n}");
        let mut r = c.call(PROG, VERS, GEN, u32_arg(n as u32)).await.unwrap();
        assert!(
            r.results.opaque(u32::MAX).unwrap() == pattern(n, 7),
            "GEN {n}"
        );
        let mut r = c
            .call(PROG, VERS, SINK, ddp_arg(data.clone()))
            .await
            .unwrap();
        assert_eq!(r.results.u32().unwrap(), n as u32);
        assert_eq!(r.results.u32().unwrap(), checksum(&data));
        let mut r = c
            .call(PROG, VERS, BIG, big_arg(n as u32, &pattern(n, 3)))
            .await
            .unwrap();
        assert!(
            r.results.opaque(u32::MAX).unwrap() == pattern(n, 9),
            "BIG {n}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_shape_over_a_second_provider() {
    init_tracing();
    let p = MemProvider::default();
    let s = serve(&p, RdmaConfig::default()).await;
    let (c, cstats) = connect(transport(&p, s.addr, RdmaConfig::default()));
    shapes(&c, 4096).await;
    let cs = cstats.latest().unwrap();
    let ss = s.stats.latest().unwrap();
    eprintln!("{cs}\n{ss}");
    for (name, v) in [
        ("read chunks", cs.get(Counter::ReadChunks)),
        ("long calls", cs.get(Counter::PositionZeroReadChunks)),
        ("write chunks filled", ss.get(Counter::WriteChunks)),
        ("reply chunks used", ss.get(Counter::ReplyChunks)),
        ("remote invalidations", cs.get(Counter::RemoteInvalidations)),
    ] {
        assert!(v > 0, "no {name}");
    }
    assert_eq!(cs.get(Counter::Calls), cs.get(Counter::Replies));
    assert_eq!(
        cs.get(Counter::Registrations),
        cs.get(Counter::LocalInvalidations) + cs.get(Counter::RemoteInvalidations),
        "every region fenced"
    );
    assert_eq!(
        ss.get(Counter::ErrBadHeader) + ss.get(Counter::ErrGarbageArgs),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_two_with_reliable_reply_over_a_second_provider() {
    init_tracing();
    let p = MemProvider::default();
    let rr = RdmaConfig {
        version_two: true,
        reliable_reply: true,
        ..RdmaConfig::default()
    };
    let s = serve(&p, rr.clone()).await;
    let (c, cstats) = connect(transport(&p, s.addr, rr));
    // The first Reply settles Version Two; the option exchange follows it.
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    until(|| {
        cstats
            .latest()
            .is_some_and(|s| s.get(Counter::ReliableReply) == 1)
    })
    .await;
    shapes(&c, 4096).await;
    let cs = cstats.latest().unwrap();
    let ss = s.stats.latest().unwrap();
    eprintln!("{cs}\n{ss}");
    assert_eq!(cs.get(Counter::Version), 2);
    assert!(cs.get(Counter::PulledReplies) > 0, "no Reply pulled");
    assert_eq!(cs.get(Counter::ReplyChunks), 0, "a Reply chunk offered");
    assert_eq!(ss.get(Counter::RdmaDone), cs.get(Counter::PulledReplies));
    assert_eq!(ss.get(Counter::PullTimeouts), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backward_calls_and_a_small_grant_over_a_second_provider() {
    init_tracing();
    let p = MemProvider::default();
    let config = RdmaConfig {
        credits: 4,
        backward_credits: 2,
        ..RdmaConfig::default()
    };
    let mut s = serve(&p, config.clone()).await;
    let mut cb = Dispatcher::new();
    cb.register(0x4000_5151, [VERS], Arc::new(TestProgram))
        .unwrap();
    let t = transport(&p, s.addr, config).serve_backward(Arc::new(cb));
    let (c, cstats) = connect(t);
    c.call(PROG, VERS, NULL, u32_arg(0)).await.unwrap();
    let channel = s.backward.recv().await.unwrap();
    channel.set_peer_ready().unwrap();
    let mut tasks = Vec::new();
    for i in 0..32u32 {
        let c = c.clone();
        let channel = channel.clone();
        tasks.push(tokio::spawn(async move {
            let data = pattern(3000 + i as usize, i as u8);
            assert!(echo(&c, data.clone()).await == data);
            let msg = call_msg(i + 1, 0x4000_5151, ECHO, |e| {
                e.opaque(&data[..100]);
            });
            let reply = channel.call(msg).await.unwrap();
            assert_eq!(reply_opaque(reply), (i + 1, data.slice(..100)));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let cs = cstats.latest().unwrap();
    let ss = s.stats.latest().unwrap();
    eprintln!("{cs}\n{ss}");
    assert_eq!(cs.get(Counter::CreditsGranted), 4);
    assert!(cs.get(Counter::CreditWaits) > 0);
    assert_eq!(ss.get(Counter::BackwardReplies), 32);
    assert_eq!(cs.get(Counter::BackwardCalls), 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_ends_its_connection_is_reconnected_and_calls_go_on() {
    init_tracing();
    let p = MemProvider::default();
    let s = serve(&p, RdmaConfig::default()).await;
    let t = transport(&p, s.addr, RdmaConfig::default());
    let stats = t.stats();
    // One connection, dropped: the transport's next connect is a new queue pair.
    let (tx, rx) = t.connect_once().await.unwrap();
    drop((tx, rx));
    let (c, _) = connect(t);
    let data = pattern(70_001, 1);
    assert!(echo(&c, data.clone()).await == data);
    assert_eq!(stats.snapshots().len(), 2);
    until(|| s.stats.snapshots().iter().filter(|x| !x.open).count() == 1).await;
}

/// The device refuses a registration (a Write chunk larger than its `max_mr_size`):
/// that Call alone fails at once with the typed error, its credit returns, and the
/// connection goes on (v1 §5.5.4: a Call that cannot be constructed "fails
/// immediately").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_the_device_refuses_fails_that_call_alone() {
    init_tracing();
    let p = MemProvider::default();
    let s = serve(&p, RdmaConfig::default()).await;
    let small_device = p.with_attributes(rdma::DeviceAttributes {
        max_mr_size: 64 * 1024,
        ..rdma::DeviceAttributes::SOFTWARE
    });
    let config = RdmaConfig {
        credits: 2,
        ..RdmaConfig::default()
    };
    let (c, cstats) = connect(transport(&small_device, s.addr, config));
    for _ in 0..4 {
        // More failures than credits: each credit came back.
        let r = c.call(PROG, VERS, GEN, u32_arg(100_000)).await;
        let Err(oncrpc::ClientError::Transport(failure)) = r else {
            panic!("expected a transport failure, got {r:?}");
        };
        assert!(
            matches!(
                failure.downcast_ref::<rpcrdma_transport::TransportError>(),
                Some(rpcrdma_transport::TransportError::Register(
                    rdma::RegisterError::TooLarge { .. }
                ))
            ),
            "{failure}"
        );
    }
    let mut r = c.call(PROG, VERS, GEN, u32_arg(60_000)).await.unwrap();
    assert!(r.results.opaque(u32::MAX).unwrap() == pattern(60_000, 7));
    let snaps = cstats.snapshots();
    assert_eq!(snaps.len(), 1, "one connection throughout");
    assert_eq!(snaps[0].get(Counter::ErrCallFailedLocally), 4);
    assert_eq!(s.stats.total(Counter::Calls), 1);
}

/// A device that cannot invalidate by posted work (as a verbs device with plain
/// `ibv_reg_mr` registrations): the client offers no remote invalidation (RFC 8797),
/// posts no LOCAL_INV, and fences each region by deregistering it before the Reply is
/// handed up; every shape still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_without_invalidation_fences_by_deregistration() {
    init_tracing();
    let p = MemProvider::default();
    let s = serve(&p, RdmaConfig::default()).await;
    let no_invalidation = p.with_attributes(rdma::DeviceAttributes {
        invalidate: false,
        ..rdma::DeviceAttributes::SOFTWARE
    });
    let (c, cstats) = connect(transport(&no_invalidation, s.addr, RdmaConfig::default()));
    shapes(&c, 4096).await;
    let snap = cstats.latest().unwrap();
    assert!(snap.get(Counter::Registrations) > 0);
    assert_eq!(
        snap.get(Counter::FencedByDeregistration),
        snap.get(Counter::Registrations)
    );
    assert_eq!(snap.get(Counter::LocalInvalidations), 0);
    assert_eq!(snap.get(Counter::RemoteInvalidations), 0);
    assert_eq!(s.stats.total(Counter::SendWithInvalidate), 0, "not offered");
}
