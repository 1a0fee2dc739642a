//! The lock manager over TCP with our own RPC client, as two client hosts: locks
//! conflict between hosts and are seen by TEST, a blocked LOCK is granted by a
//! GRANTED callback when the holder unlocks, SM_NOTIFY from a rebooted client drops
//! its locks, garbage is GARBAGE_ARGS, foreign handles NLM4_STALE_FH, and a server
//! restart sends SM_NOTIFY to the clients and grants only reclaims in the grace
//! period.
//!
//! The clients' side (a portmapper, an NLM service taking GRANTED, an NSM service
//! taking SM_NOTIFY) is served by the test on 127.0.0.1; the server's
//! `client_portmap_port` points at that portmapper.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::TempDir;
use nfsd::nlm::xdr::*;
use nfsd::nlm::NlmConfig;
use nfsd::portmap::{Portmapper, Registration, PMAP_PROGRAM};
use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::{ExportLine, ExportOptions, Squash};
use oncrpc::server::{Server, ServerConfig};
use oncrpc::{
    AcceptStat, Client, ClientConfig, ClientError, Dispatcher, Request, Service, ServiceResult,
    TcpTransport,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use xdr::{Bytes, Decode, Encode, XdrStream};

/// What the fake client hosts received.
#[derive(Debug)]
enum Callback {
    Granted(TestArgs),
    Notify(StatChge),
}

/// The clients' NLM (GRANTED) and NSM (SM_NOTIFY) services.
struct ClientSide(mpsc::UnboundedSender<Callback>);

impl Service for ClientSide {
    async fn call(&self, req: Request) -> ServiceResult {
        let mut a = req.args;
        match (req.prog, req.proc_) {
            (NLM_PROGRAM, proc4::GRANTED) => {
                let g = TestArgs::decode(&mut a)?;
                let cookie = g.cookie.clone();
                let _ = self.0.send(Callback::Granted(g));
                Ok(Res {
                    cookie,
                    stat: Stat::Granted,
                }
                .to_xdr())
            }
            (NSM_PROGRAM, 6) => {
                let _ = self.0.send(Callback::Notify(StatChge::decode(&mut a)?));
                Ok(XdrStream::default())
            }
            _ => Err(oncrpc::ServiceError::ProcUnavail),
        }
    }
}

/// Serves the client side on 127.0.0.1; returns its portmapper's port.
async fn client_side() -> (u16, mpsc::UnboundedReceiver<Callback>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let svc_addr = svc.local_addr().unwrap();
    let mut d = Dispatcher::new();
    let side = Arc::new(ClientSide(tx));
    d.register(NLM_PROGRAM, [NLM_V4], side.clone()).unwrap();
    d.register(NSM_PROGRAM, [NSM_V1], side).unwrap();
    tokio::spawn(Server::new(d, ServerConfig::default()).serve(svc, std::future::pending()));
    let pm = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pm_addr = pm.local_addr().unwrap();
    let table = [(NLM_PROGRAM, NLM_V4), (NSM_PROGRAM, NSM_V1)]
        .map(|(prog, vers)| Registration {
            prog,
            vers,
            netid: "tcp",
            addr: svc_addr,
        })
        .to_vec();
    let mut d = Dispatcher::new();
    d.register(PMAP_PROGRAM, [2], Arc::new(Portmapper::new(table, pm_addr)))
        .unwrap();
    tokio::spawn(Server::new(d, ServerConfig::default()).serve(pm, std::future::pending()));
    (pm_addr.port(), rx)
}

struct Running {
    nlm: Client,
    fh: Bytes,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    server: Arc<nfsd::nlm::Nlm>,
    lines: Vec<String>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn start(export: &TempDir, state: &TempDir, pm_port: u16, grace: Duration) -> Running {
    let config = Config {
        exports: vec![ExportLine::everyone(
            export.path(),
            ExportOptions {
                read_only: false,
                squash: Squash::None,
                secure: false,
                ..ExportOptions::default()
            },
        )],
        bind: Ipv4Addr::LOCALHOST.into(),
        nfs_port: 0,
        mount_port: 0,
        rpcbind: RpcbindMode::Off,
        portmap_port: 0,
        handles: nfsd::HandleConfig::new(nfsd::HandleKey::load_or_create(state.path()).unwrap()),
        max_memory: nfsd::memory::default_max_memory(),
        inline_metadata: true,
        tcp_read_data: oncrpc::tcp::FileData::Sendfile,
        tcp_splice_writes: true,
        drc_entries: None,
        nfs4_id_domain: None,
        metrics: None,
        nlm: Some(NlmConfig {
            port: 0,
            grace,
            client_portmap_port: pm_port,
            ..NlmConfig::new(state.path().to_path_buf())
        }),
    };
    let bound = Bound::new(&config).await.unwrap();
    let lines = bound.describe();
    let table = bound.server().table();
    let ex = &table.exports[0].export;
    let root = ex.root().unwrap();
    let node = ex.child(&root, b"f").unwrap();
    let fh = ex.handle(&node).0;
    let addr: SocketAddr = bound.nlm_addr().unwrap();
    let server = bound.nlm().unwrap().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));
    let nlm = Client::new(
        TcpTransport::new(addr),
        ClientConfig {
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        },
    );
    Running {
        nlm,
        fh,
        stop: Some(stop),
        task,
        server,
        lines,
    }
}

fn lock(host: &str, svid: i32, fh: &Bytes, offset: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Bytes::copy_from_slice(host.as_bytes()),
        fh: fh.clone(),
        oh: Bytes::from(format!("{svid}@{host}")),
        svid,
        offset,
        len,
    }
}

fn lockargs(l: Nlm4Lock, block: bool, reclaim: bool, cookie: &'static [u8]) -> LockArgs {
    LockArgs {
        cookie: Bytes::from_static(cookie),
        block,
        exclusive: true,
        lock: l,
        reclaim,
        state: 1,
    }
}

async fn call<R: Decode>(c: &Client, proc_: u32, args: XdrStream) -> R {
    let mut reply = c.call(NLM_PROGRAM, NLM_V4, proc_, args).await.unwrap();
    R::decode(&mut reply.results).unwrap()
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Callback>) -> Callback {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a callback within 20 s")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_conflict_blocked_lock_is_granted_by_callback_and_restart_is_recovered() {
    let export = TempDir::new("nlm-export");
    std::fs::write(export.path().join("f"), b"locked file").unwrap();
    let state = TempDir::new("nlm-state");
    let (pm_port, mut rx) = client_side().await;
    let s = start(&export, &state, pm_port, Duration::from_secs(3)).await;
    assert!(
        s.lines
            .iter()
            .any(|l| l.contains("NLM v4 and NSM v1 listening on tcp")
                && l.contains("NSM state 1")
                && l.contains("no grace period")),
        "{:?}",
        s.lines
    );
    let fh = s.fh.clone();

    // Host A locks bytes 0..10 exclusively.
    let a = lockargs(lock("ca", 1, &fh, 0, 10), false, false, b"a1");
    let r: Res = call(&s.nlm, proc4::LOCK, a.to_xdr()).await;
    assert_eq!((r.cookie.as_ref(), r.stat), (&b"a1"[..], Stat::Granted));

    // Host B sees it with TEST (the holder, its range), is denied without block.
    let t = TestArgs {
        cookie: Bytes::from_static(b"t"),
        exclusive: false,
        lock: lock("cb", 1, &fh, 5, 1),
    };
    let r: TestRes = call(&s.nlm, proc4::TEST, t.to_xdr()).await;
    assert_eq!(r.stat, Stat::Denied);
    let h = r.holder.unwrap();
    assert_eq!((h.svid, h.offset, h.len, h.exclusive), (1, 0, 10, true));
    let b = lockargs(lock("cb", 7, &fh, 5, 0), false, false, b"b1");
    let r: Res = call(&s.nlm, proc4::LOCK, b.to_xdr()).await;
    assert_eq!(r.stat, Stat::Denied);
    // Outside the range: granted at once.
    let b2 = lockargs(lock("cb", 7, &fh, 10, 5), false, false, b"b2");
    let r: Res = call(&s.nlm, proc4::LOCK, b2.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);

    // B blocks; A unlocks; B's host gets GRANTED with its cookie and lock.
    let b3 = lockargs(lock("cb", 7, &fh, 5, 0), true, false, b"b3");
    let r: Res = call(&s.nlm, proc4::LOCK, b3.to_xdr()).await;
    assert_eq!(r.stat, Stat::Blocked);
    let u = UnlockArgs {
        cookie: Bytes::from_static(b"u"),
        lock: lock("ca", 1, &fh, 0, 0),
    };
    let r: Res = call(&s.nlm, proc4::UNLOCK, u.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);
    match next(&mut rx).await {
        Callback::Granted(g) => {
            assert_eq!(g.cookie.as_ref(), b"b3");
            assert_eq!(g.lock, b3.lock);
            assert!(g.exclusive);
        }
        other => panic!("{other:?}"),
    }
    // B's poll (its LOCK again) is granted; A is now the one denied.
    let r: Res = call(&s.nlm, proc4::LOCK, b3.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);
    let r: Res = call(&s.nlm, proc4::LOCK, a.to_xdr()).await;
    assert_eq!(r.stat, Stat::Denied);

    // CANCEL of a blocked request: it is never granted.
    let a_block = lockargs(lock("ca", 1, &fh, 0, 10), true, false, b"a2");
    let r: Res = call(&s.nlm, proc4::LOCK, a_block.to_xdr()).await;
    assert_eq!(r.stat, Stat::Blocked);
    let c = CancArgs {
        cookie: Bytes::from_static(b"c"),
        block: true,
        exclusive: true,
        lock: a_block.lock.clone(),
    };
    let r: Res = call(&s.nlm, proc4::CANCEL, c.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);

    // Garbage is GARBAGE_ARGS; a handle not ours is NLM4_STALE_FH.
    let err = s
        .nlm
        .call(
            NLM_PROGRAM,
            NLM_V4,
            proc4::LOCK,
            XdrStream::inline_only(Bytes::from_static(&[0, 0, 0, 9])),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Accepted(ref s) if s.stat() == AcceptStat::GARBAGE_ARGS),
        "{err:?}"
    );
    let bogus = lockargs(
        lock("ca", 1, &Bytes::from_static(&[9; 40]), 0, 1),
        false,
        false,
        b"x",
    );
    let r: Res = call(&s.nlm, proc4::LOCK, bogus.to_xdr()).await;
    assert_eq!(r.stat, Stat::StaleFh);

    // Host B reboots: its statd's SM_NOTIFY drops its locks; A may lock again.
    let notice = StatChge {
        mon_name: Bytes::from_static(b"cb"),
        state: 5,
    };
    s.nlm
        .call(NSM_PROGRAM, NSM_V1, 6, notice.to_xdr())
        .await
        .unwrap();
    let r: Res = call(&s.nlm, proc4::LOCK, a.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);
    assert_eq!(s.server.held(&fh).len(), 1);
    assert!(rx.try_recv().is_err(), "A's cancelled request was granted");

    // The server restarts with A's lock held: A's statd gets SM_NOTIFY with the
    // next state; in the grace period a new lock is refused, A's reclaim granted.
    s.stop().await;
    let s = start(&export, &state, pm_port, Duration::from_secs(3)).await;
    assert!(
        s.lines
            .iter()
            .any(|l| l.contains("NSM state 3") && l.contains("grace period 3 s")),
        "{:?}",
        s.lines
    );
    match next(&mut rx).await {
        Callback::Notify(n) => assert_eq!(n.state, 3),
        other => panic!("{other:?}"),
    }
    let other = lockargs(lock("cc", 3, &fh, 100, 1), false, false, b"o");
    let r: Res = call(&s.nlm, proc4::LOCK, other.to_xdr()).await;
    assert_eq!(r.stat, Stat::DeniedGracePeriod);
    let r: TestRes = call(&s.nlm, proc4::TEST, t.to_xdr()).await;
    assert_eq!(r.stat, Stat::DeniedGracePeriod);
    let reclaim = lockargs(lock("ca", 1, &fh, 0, 10), false, true, b"r");
    let r: Res = call(&s.nlm, proc4::LOCK, reclaim.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    // After the grace period: the reclaimed lock is there for others to see.
    let r: TestRes = call(&s.nlm, proc4::TEST, t.to_xdr()).await;
    assert_eq!(r.stat, Stat::Denied);
    let r: Res = call(&s.nlm, proc4::LOCK, other.to_xdr()).await;
    assert_eq!(r.stat, Stat::Granted);
    s.stop().await;
}
