//! Our client against our server over TCP on loopback.
#![cfg(feature = "tokio")]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use oncrpc::client::{Client, ClientConfig, ClientError};
use oncrpc::server::{Server, ServerConfig};
use oncrpc::tcp::TcpTransport;
use oncrpc::{
    AcceptStat, AcceptedStatus, Dispatcher, MismatchInfo, Peer, Protocol, Request, Service,
    ServiceError, ServiceResult,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};
use xdr::{Encoder, XdrStream};

const PROG: u32 = 0x2000_0202;
const MAX_PAYLOAD: usize = 4 * 1024 * 1024;

/// Procedures: 0 NULL; 1 ECHO `opaque<>`, after a delay of `u32` ms given first;
/// 2 WAIT (records its xid, then waits until `release` is notified); 3 PANIC.
/// Every call's peer is recorded in `peers`.
#[derive(Default)]
struct Test {
    seen: Mutex<Vec<u32>>,
    peers: Mutex<Vec<Option<Peer>>>,
    release: Notify,
}

impl Service for Test {
    async fn call(&self, mut req: Request) -> ServiceResult {
        self.peers.lock().unwrap().push(req.peer);
        match req.proc_ {
            0 => Ok(XdrStream::default()),
            1 => {
                let delay = req.args.u32()?;
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay.into())).await;
                }
                let mut enc = Encoder::new();
                enc.ddp_opaque(data);
                Ok(enc.finish())
            }
            2 => {
                self.seen.lock().unwrap().push(req.xid.0);
                self.release.notified().await;
                Ok(XdrStream::default())
            }
            3 => panic!("handler bug"),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

async fn start_on(addr: SocketAddr, service: Arc<Test>, config: ServerConfig) -> Running {
    let mut d = Dispatcher::new();
    d.register(PROG, [1, 2], service).unwrap();
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(Server::new(d, config).serve(listener, async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

async fn start(service: Arc<Test>) -> Running {
    start_on(
        "127.0.0.1:0".parse().unwrap(),
        service,
        ServerConfig {
            max_record: MAX_PAYLOAD + 4096,
            max_fragment: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await
}

fn client(addr: SocketAddr) -> Client {
    Client::new(
        TcpTransport {
            addr,
            max_record: MAX_PAYLOAD + 4096,
            max_fragment: 100_000,
        },
        ClientConfig {
            timeout: Duration::from_secs(120),
            reconnect_delay: Duration::from_millis(20),
            ..ClientConfig::default()
        },
    )
}

fn echo_args(delay_ms: u32, data: Bytes) -> XdrStream {
    let mut enc = Encoder::new();
    enc.u32(delay_ms);
    enc.ddp_opaque(data);
    enc.finish()
}

/// Payload of call `i`: its size, and bytes that identify the call.
fn payload(i: usize) -> Bytes {
    let len = match i % 100 {
        0 => MAX_PAYLOAD,
        1 => MAX_PAYLOAD - 1,
        2 => 0,
        3 => 1,
        50 => 1024 * 1024 + 3,
        _ => (i * 7919) % 70_000,
    };
    Bytes::from(
        (0..len)
            .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i as u32 * 17) as u8)
            .collect::<Vec<u8>>(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_calls_on_one_connection_multi_fragment_0_to_4mib() {
    let server = start(Arc::new(Test::default())).await;
    let c = client(server.addr);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..1000usize {
        let c = c.clone();
        calls.spawn(async move {
            let data = payload(i);
            // Varying delays make the server reply out of order.
            let delay = ((i * 37) % 7) as u32;
            let mut reply = c
                .call(PROG, 1 + (i % 2) as u32, 1, echo_args(delay, data.clone()))
                .await?;
            let got = reply.results.opaque(u32::MAX).expect("results decode");
            reply.results.finish().expect("no trailing bytes");
            assert_eq!(got.len(), data.len(), "call {i}: length");
            assert!(got == data, "call {i}: payload differs");
            Ok::<usize, ClientError>(i)
        });
    }
    let mut done = BTreeSet::new();
    while let Some(r) = calls.join_next().await {
        done.insert(r.unwrap().unwrap());
    }
    assert_eq!(done.len(), 1000);
    server.stop().await;
}

#[tokio::test]
async fn unknown_program_version_and_procedure_get_their_accept_stat() {
    let server = start(Arc::new(Test::default())).await;
    let c = client(server.addr);
    let err = c
        .call(PROG + 1, 1, 0, XdrStream::default())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ClientError::Accepted(AcceptedStatus::Void(AcceptStat::PROG_UNAVAIL))
    ));
    let err = c.call(PROG, 0, 0, XdrStream::default()).await.unwrap_err();
    assert!(matches!(
        err,
        ClientError::Accepted(AcceptedStatus::ProgMismatch(MismatchInfo {
            low: 1,
            high: 2
        }))
    ));
    let err = c.call(PROG, 1, 9, XdrStream::default()).await.unwrap_err();
    assert!(matches!(
        err,
        ClientError::Accepted(AcceptedStatus::Void(AcceptStat::PROC_UNAVAIL))
    ));
    let err = c.call(PROG, 1, 1, XdrStream::default()).await.unwrap_err();
    assert!(matches!(
        err,
        ClientError::Accepted(AcceptedStatus::Void(AcceptStat::GARBAGE_ARGS))
    ));
    c.call(PROG, 2, 0, XdrStream::default()).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn call_without_reply_times_out() {
    let svc = Arc::new(Test::default());
    let server = start(svc.clone()).await;
    let c = client(server.addr);
    let err = c
        .call_with_timeout(PROG, 1, 2, XdrStream::default(), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout));
    svc.release.notify_one();
    server.stop().await;
}

/// A port on loopback where nothing listens (bound, then closed).
async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn fail_if_unreachable_fails_calls_at_once_on_a_refused_connection() {
    let addr = closed_port().await;
    let c = Client::new(
        TcpTransport::new(addr),
        ClientConfig {
            timeout: Duration::from_secs(30),
            fail_if_unreachable: true,
            ..ClientConfig::default()
        },
    );
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(
        c.call(PROG, 1, 0, XdrStream::default()),
        c.call(PROG, 1, 0, XdrStream::default())
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for err in [a.unwrap_err(), b.unwrap_err()] {
        match err {
            ClientError::Connect(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}")
            }
            other => panic!("not a connect error: {other:?}"),
        }
    }
    // A later call tries again: with a server there now, it is answered.
    let server = start_on(addr, Arc::new(Test::default()), ServerConfig::default()).await;
    c.call(PROG, 1, 0, XdrStream::default()).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn by_default_a_refused_connection_is_retried_until_the_call_times_out() {
    let addr = closed_port().await;
    let c = client(addr);
    let err = c
        .call_with_timeout(PROG, 1, 0, XdrStream::default(), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outstanding_calls_are_retransmitted_with_same_xid_after_server_restart() {
    let first = Arc::new(Test::default());
    let server = start(first.clone()).await;
    let addr = server.addr;
    let c = client(addr);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let c = c.clone();
        calls.spawn(async move {
            c.call(PROG, 1, 2, XdrStream::default())
                .await
                .map(|r| r.xid.0)
        });
    }
    while first.seen.lock().unwrap().len() < 5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The server dies with the calls in flight (no graceful shutdown)...
    server.task.abort();
    let _ = server.task.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...and comes back on the same port; this one answers WAIT at once.
    let second = Arc::new(Test::default());
    let releaser = second.clone();
    let release = tokio::spawn(async move {
        loop {
            releaser.release.notify_waiters();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let restarted = start_on(addr, second.clone(), ServerConfig::default()).await;
    let mut replied = BTreeSet::new();
    while let Some(r) = calls.join_next().await {
        replied.insert(r.unwrap().unwrap());
    }
    release.abort();
    let before: BTreeSet<u32> = first.seen.lock().unwrap().iter().copied().collect();
    let after: BTreeSet<u32> = second.seen.lock().unwrap().iter().copied().collect();
    assert_eq!(before, after, "retransmitted under the same xids");
    assert_eq!(replied, before);
    restarted.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_calls_in_flight() {
    let svc = Arc::new(Test::default());
    let server = start(svc.clone()).await;
    let c = client(server.addr);
    let call = tokio::spawn({
        let c = c.clone();
        async move { c.call(PROG, 1, 2, XdrStream::default()).await }
    });
    while svc.seen.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stop = tokio::spawn(server.stop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!stop.is_finished(), "shutdown waits for the call in flight");
    svc.release.notify_one();
    stop.await.unwrap();
    call.await.unwrap().expect("the call in flight is answered");
}

#[tokio::test]
async fn huge_announced_record_closes_connection_without_allocation() {
    let server = start(Arc::new(Test::default())).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    // RFC 5531 §11 mark: last fragment, 2^31 - 1 bytes.
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("server closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // The server still serves others.
    client(server.addr)
        .call(PROG, 1, 0, XdrStream::default())
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test]
async fn hand_made_multi_fragment_call_is_answered() {
    let service = Arc::new(Test::default());
    let server = start(service.clone()).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    // NULL call, xid 7, split into fragments of 1, 3 and the rest.
    let mut call = vec![0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 2];
    call.extend_from_slice(&PROG.to_be_bytes());
    call.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    call.extend_from_slice(&[0; 16]);
    let mut wire = vec![0, 0, 0, 1];
    wire.extend_from_slice(&call[..1]);
    wire.extend_from_slice(&[0, 0, 0, 3]);
    wire.extend_from_slice(&call[1..4]);
    wire.extend_from_slice(&((call.len() - 4) as u32 | 0x8000_0000).to_be_bytes());
    wire.extend_from_slice(&call[4..]);
    s.write_all(&wire).await.unwrap();
    let mut reply = [0u8; 28];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[..4], [0x80, 0, 0, 24]);
    assert_eq!(
        reply[4..],
        [0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    // The service saw who called: this connection's address and port, over TCP.
    assert_eq!(
        *service.peers.lock().unwrap(),
        [Some(Peer {
            addr: s.local_addr().unwrap(),
            protocol: Protocol::Tcp,
        })]
    );
    server.stop().await;
}

#[tokio::test]
async fn unknown_auth_flavor_is_rejected_with_auth_rejectedcred() {
    let server = start(Arc::new(Test::default())).await;
    let c = client(server.addr);
    let opts = oncrpc::CallOptions {
        cred: Some(oncrpc::OpaqueAuth {
            flavor: oncrpc::AuthFlavor::RPCSEC_GSS,
            body: Bytes::new(),
        }),
        ..Default::default()
    };
    let err = c
        .call_with(PROG, 1, 0, XdrStream::default(), opts)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ClientError::Rejected(oncrpc::RejectedReply::AuthError(
            oncrpc::AuthStat::AUTH_REJECTEDCRED
        ))
    ));
    server.stop().await;
}

/// A scripted server: reads two calls, sends a stray reply (unknown xid), a message
/// that is not a reply, then answers the second call before the first; the second
/// reply is a malformed header.
#[tokio::test]
async fn client_matches_replies_by_xid_and_ignores_strays() {
    use oncrpc::record::RecordDecoder;
    use oncrpc::tcp::{read_record, write_record};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let (mut r, mut w) = s.into_split();
        let mut dec = RecordDecoder::new(1 << 16);
        let mut buf = bytes::BytesMut::new();
        let a = read_record(&mut r, &mut dec, &mut buf, None)
            .await
            .unwrap()
            .unwrap();
        let b = read_record(&mut r, &mut dec, &mut buf, None)
            .await
            .unwrap()
            .unwrap();
        let reply = |xid: &[u8], tail: &[u8]| {
            let mut m = xid.to_vec();
            m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            m.extend_from_slice(tail);
            XdrStream::inline_only(Bytes::from(m))
        };
        let stray = reply(&[0xde, 0xad, 0xbe, 0xef], &[]);
        let not_a_reply = XdrStream::inline_only(Bytes::copy_from_slice(&b[..8]));
        let bad = {
            let mut m = a[..4].to_vec();
            m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 7]); // reply_stat 7
            XdrStream::inline_only(Bytes::from(m))
        };
        for m in [stray, not_a_reply, reply(&b[..4], &[0, 0, 0, 42]), bad] {
            write_record(&mut w, &m, 5).await.unwrap();
        }
        // Keep the connection open until the client is done.
        let _ = r.read(&mut [0u8; 1]).await;
    });
    let c = client(addr);
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.call(PROG, 1, 0, XdrStream::default()).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut second = c.call(PROG, 1, 0, XdrStream::default()).await.unwrap();
    assert_eq!(second.results.u32().unwrap(), 42);
    let err = first.await.unwrap().unwrap_err();
    assert!(
        matches!(err, ClientError::BadReply(_)),
        "malformed reply header: {err:?}"
    );
    drop(c);
    peer.abort();
}

#[tokio::test]
async fn handler_panic_is_system_err_and_connection_survives() {
    let server = start(Arc::new(Test::default())).await;
    let c = client(server.addr);
    let err = c.call(PROG, 1, 3, XdrStream::default()).await.unwrap_err();
    assert!(matches!(
        err,
        ClientError::Accepted(AcceptedStatus::Void(AcceptStat::SYSTEM_ERR))
    ));
    c.call(PROG, 1, 0, XdrStream::default()).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn shutdown_grace_bounds_the_wait_for_hung_calls() {
    let server = start_on(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(Test::default()),
        ServerConfig {
            shutdown_grace: Some(Duration::from_millis(200)),
            ..ServerConfig::default()
        },
    )
    .await;
    let c = client(server.addr);
    let hung = tokio::spawn({
        let c = c.clone();
        async move {
            c.call_with_timeout(PROG, 1, 2, XdrStream::default(), Duration::from_secs(2))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = std::time::Instant::now();
    server.stop().await;
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(hung.await.unwrap().is_err());
}

/// `ServerConfig::max_large_in_flight`: of large calls (at least
/// `tcp::MIN_REUSED_RECORD` bytes, NFS WRITE data), a connection has at most that
/// many in service; the next is read once one of them is answered.
#[tokio::test]
async fn large_calls_in_service_per_connection_are_bounded() {
    let test = Arc::new(Test::default());
    let server = start_on(
        "127.0.0.1:0".parse().unwrap(),
        test.clone(),
        ServerConfig {
            max_large_in_flight: 2,
            ..ServerConfig::default()
        },
    )
    .await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    // Five WAIT calls (procedure 2) of 200 KiB each: their arguments are ignored.
    for xid in 1..=5u32 {
        let mut m = xid.to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
        m.extend_from_slice(&PROG.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
        m.extend_from_slice(&[0; 16]);
        m.resize(m.len() + 200 * 1024, 0);
        s.write_all(&((m.len() as u32) | 0x8000_0000).to_be_bytes())
            .await
            .unwrap();
        s.write_all(&m).await.unwrap();
    }
    let seen = |n: usize| {
        let test = test.clone();
        async move {
            for _ in 0..200 {
                if test.seen.lock().unwrap().len() >= n {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            test.seen.lock().unwrap().clone()
        }
    };
    assert_eq!(seen(2).await, vec![1, 2], "two in service, the rest unread");
    test.release.notify_waiters();
    assert_eq!(
        seen(4).await,
        vec![1, 2, 3, 4],
        "answered, the next two read"
    );
    test.release.notify_waiters();
    assert_eq!(seen(5).await, vec![1, 2, 3, 4, 5]);
    test.release.notify_waiters();
    drop(s);
    server.stop().await;
}

/// RFC 5531 §9: replies are matched by xid, so the server sends each as soon as it
/// is ready: a slow call does not hold back a fast one behind it.
#[tokio::test]
async fn server_replies_out_of_order_as_calls_complete() {
    let server = start(Arc::new(Test::default())).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let call = |xid: u32, delay: u32| {
        let mut m = xid.to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
        m.extend_from_slice(&PROG.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        m.extend_from_slice(&[0; 16]);
        m.extend_from_slice(&delay.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]); // empty opaque
        let mut w = ((m.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
        w.extend_from_slice(&m);
        w
    };
    s.write_all(&call(1, 300)).await.unwrap();
    s.write_all(&call(2, 0)).await.unwrap();
    let mut first = [0u8; 8];
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(
        first[4..],
        2u32.to_be_bytes(),
        "the fast call is answered first"
    );
    server.stop().await;
}
