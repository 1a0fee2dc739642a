//! Issue 26: the duplicate request cache over TCP, as a Linux client meets it. A
//! client's REMOVE, RENAME, MKDIR and WRITEs are answered; its connection breaks (an
//! RST); it reconnects from the same source port (SO_REUSEADDR, as the Linux client
//! binds it) and retransmits each call with its xid: each gets the first reply byte
//! for byte, and the file system shows each done once (without the cache the REMOVE
//! would answer NFS3ERR_NOENT, the MKDIR NFS3ERR_EXIST, and the first WRITE would
//! overwrite the second). The same xid with other arguments runs. For NLM, a
//! retransmitted UNLOCK is answered from the cache and leaves the lock taken since.
//! A flood of distinct SETATTRs keeps the cache within its bound. Over
//! RPC-over-RDMA, a retransmission on the connection gets the first reply too.
//!
//! Calls are raw RPC records on a socket of the test's own, so that the test chooses
//! xids, source ports and when connections break.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::TempDir;
use nfs3::dir::{MkDir3Args, Remove3Args, Rename3Args};
use nfs3::io::Write3Args;
use nfs3::{DdpData, DirOpArgs3, NfsFh3, NfsProc3, Sattr3, StableHow, NFS_PROGRAM, NFS_V3};
use nfsd::nlm::xdr::*;
use nfsd::nlm::NlmConfig;
use nfsd::server::{Bound, Config};
use oncrpc::{AcceptedStatus, ReplyBody, ReplyHeader, Xid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use xdr::{Bytes, Decoder, Encode};

/// A client connection from a chosen source port.
struct Conn(TcpStream);

impl Conn {
    /// Connects to `server` from 127.0.0.1:`port` (0: any), the port reusable at
    /// once as the Linux client's.
    async fn open(server: SocketAddr, port: u16) -> Conn {
        let s = TcpSocket::new_v4().unwrap();
        s.set_reuseaddr(true).unwrap();
        s.bind(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
        Conn(s.connect(server).await.unwrap())
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }

    /// Breaks the connection with an RST (no TIME_WAIT keeps the port).
    fn reset(self) {
        self.0.set_zero_linger().unwrap();
        drop(self);
    }

    /// Sends the call record `call` and returns the reply record.
    async fn call(&mut self, call: &Bytes) -> Bytes {
        let mut record = Vec::with_capacity(4 + call.len());
        record.extend_from_slice(&(0x8000_0000 | call.len() as u32).to_be_bytes());
        record.extend_from_slice(call);
        self.0.write_all(&record).await.unwrap();
        let mut reply = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            tokio::time::timeout(Duration::from_secs(10), self.0.read_exact(&mut mark))
                .await
                .expect("a reply within 10 s")
                .unwrap();
            let mark = u32::from_be_bytes(mark);
            let start = reply.len();
            reply.resize(start + (mark & 0x7fff_ffff) as usize, 0);
            self.0.read_exact(&mut reply[start..]).await.unwrap();
            if mark & 0x8000_0000 != 0 {
                return Bytes::from(reply);
            }
        }
    }
}

/// A call message: AUTH_SYS as root.
fn call(xid: u32, prog: u32, vers: u32, proc_: u32, args: impl Encode) -> Bytes {
    common::root_call(b"drc-client", xid, prog, vers, proc_, &args)
}

fn nfs(xid: u32, proc: NfsProc3, args: impl Encode) -> Bytes {
    call(xid, NFS_PROGRAM, NFS_V3, proc.0, args)
}

/// The results of a SUCCESS reply to `xid`.
fn results(reply: &Bytes, xid: u32) -> Decoder {
    let mut dec = Decoder::new(reply.clone());
    let h = ReplyHeader::decode(&mut dec).unwrap();
    assert_eq!(h.xid, Xid(xid));
    match h.body {
        ReplyBody::Accepted {
            status: AcceptedStatus::Success,
            ..
        } => dec,
        other => panic!("xid {xid}: {other:?}"),
    }
}

/// The nfsstat3 a reply to `xid` starts with.
fn nfs_status(reply: &Bytes, xid: u32) -> u32 {
    results(reply, xid).u32().unwrap()
}

fn dirop(dir: &NfsFh3, name: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: name.into(),
    }
}

fn write(file: &NfsFh3, data: &[u8]) -> Write3Args {
    Write3Args {
        file: file.clone(),
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::FILE_SYNC,
        data: DdpData(Bytes::copy_from_slice(data)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retransmissions_after_a_reconnect_from_the_same_port_get_the_first_replies() {
    let dir = TempDir::new("drc");
    let root = dir.path();
    for name in ["victim", "other", "old", "w"] {
        std::fs::write(root.join(name), name).unwrap();
    }
    let bound = Bound::new(&common::loopback_config(root)).await.unwrap();
    assert!(
        bound
            .describe()
            .iter()
            .any(|l| l.starts_with("duplicate request cache: ") && l.contains("entries")),
        "{:?}",
        bound.describe()
    );
    let server = bound.nfs_addr().unwrap();
    let (top, w) = {
        let table = bound.server().table();
        let ex = &table.exports[0].export;
        let top = ex.root().unwrap();
        let w = ex.child(&top, b"w").unwrap();
        (NfsFh3(ex.handle(&top).0), NfsFh3(ex.handle(&w).0))
    };
    let nfsd = bound.server().clone();
    let serving = common::serve(bound);

    let mkdir = MkDir3Args {
        dir_op: dirop(&top, "d"),
        attributes: Sattr3 {
            mode: Some(0o755),
            ..Sattr3::default()
        },
    };
    let calls = [
        nfs(
            101,
            NfsProc3::REMOVE,
            Remove3Args {
                object: dirop(&top, "victim"),
            },
        ),
        nfs(
            102,
            NfsProc3::RENAME,
            Rename3Args {
                from: dirop(&top, "old"),
                to: dirop(&top, "new"),
            },
        ),
        nfs(103, NfsProc3::MKDIR, mkdir),
        nfs(104, NfsProc3::WRITE, write(&w, b"AAAA")),
    ];
    let mut conn = Conn::open(server, 0).await;
    let port = conn.port();
    let mut first = Vec::new();
    for (c, xid) in calls.iter().zip(101..) {
        let reply = conn.call(c).await;
        assert_eq!(nfs_status(&reply, xid), 0, "xid {xid} succeeds");
        first.push(reply);
    }
    // A later WRITE over the same range, with a new xid.
    let later = conn
        .call(&nfs(105, NfsProc3::WRITE, write(&w, b"BBBB")))
        .await;
    assert_eq!(nfs_status(&later, 105), 0);
    conn.reset();

    let mut conn = Conn::open(server, port).await;
    assert_eq!(conn.port(), port);
    for ((c, reply), xid) in calls.iter().zip(&first).zip(101..) {
        let again = conn.call(c).await;
        assert_eq!(&again, reply, "xid {xid}: the first reply, byte for byte");
    }
    // Each done once.
    assert!(!root.join("victim").exists());
    assert!(!root.join("old").exists());
    assert_eq!(std::fs::read(root.join("new")).unwrap(), b"old");
    assert!(root.join("d").is_dir());
    assert_eq!(
        std::fs::read(root.join("w")).unwrap(),
        b"BBBB",
        "WRITE not redone"
    );
    let stats = nfsd.reply_cache.as_ref().unwrap().stats();
    assert_eq!(stats.hits, 4, "{stats}");
    assert_eq!(stats.misses, 5, "{stats}");

    // The same xid with other arguments is a new call, and runs.
    let reuse = nfs(
        101,
        NfsProc3::REMOVE,
        Remove3Args {
            object: dirop(&top, "other"),
        },
    );
    let reply = conn.call(&reuse).await;
    assert_eq!(nfs_status(&reply, 101), 0);
    assert!(!root.join("other").exists());
    // And a retransmission from another port is another client's call: the REMOVE
    // runs again and finds nothing.
    let mut elsewhere = Conn::open(server, 0).await;
    let reply = elsewhere.call(&calls[0]).await;
    assert_eq!(nfs_status(&reply, 101), 2, "NFS3ERR_NOENT");
    assert_eq!(nfsd.reply_cache.as_ref().unwrap().stats().hits, 4);
    drop((conn, elsewhere));
    serving.stop().await;
}

/// A flood of distinct non-idempotent calls (SETATTRs) keeps the cache within its
/// entries and bytes, both charged to the budget at start; the oldest entries are
/// evicted (counted), the newest still answer retransmissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_distinct_calls_stays_within_the_cache_bound() {
    let dir = TempDir::new("drc-flood");
    std::fs::write(dir.path().join("s"), b"s").unwrap();
    let config = Config {
        drc_entries: Some(64),
        nfs4_id_domain: None,
        metrics: None,
        ..common::loopback_config(dir.path())
    };
    let bound = Bound::new(&config).await.unwrap();
    assert_eq!(bound.reply_cache_reserved(), 64 * 1024);
    let budget = bound.server().memory.clone();
    assert!(budget.used() >= 64 * 1024);
    let server = bound.nfs_addr().unwrap();
    let s = {
        let table = bound.server().table();
        let ex = &table.exports[0].export;
        let s = ex.child(&ex.root().unwrap(), b"s").unwrap();
        NfsFh3(ex.handle(&s).0)
    };
    let cache = bound.server().reply_cache.clone().unwrap();
    let limits = cache.limits();
    let serving = common::serve(bound);
    let setattr = |xid: u32| {
        nfs(
            xid,
            NfsProc3::SETATTR,
            nfs3::attr::SetAttr3Args {
                object: s.clone(),
                new_attributes: Sattr3 {
                    mode: Some(0o600 | (xid & 0o77)),
                    ..Sattr3::default()
                },
                guard: None,
            },
        )
    };
    let mut conn = Conn::open(server, 0).await;
    let mut last = Bytes::new();
    for xid in 1000..3000 {
        last = conn.call(&setattr(xid)).await;
        assert_eq!(nfs_status(&last, xid), 0);
        let st = cache.stats();
        assert!(st.entries <= 64 && st.bytes <= limits.max_bytes, "{st}");
    }
    let st = cache.stats();
    assert_eq!(st.misses, 2000, "{st}");
    assert_eq!(st.evictions, 2000 - st.entries as u64, "{st}");
    assert!(st.entries > 32, "{st}");
    // The newest is still cached; the oldest went and runs again.
    assert_eq!(conn.call(&setattr(2999)).await, last);
    conn.call(&setattr(1000)).await;
    let after = cache.stats();
    assert_eq!((after.hits, after.misses), (1, 2001), "{after}");
    drop(conn);
    serving.stop().await;
}

fn nlm_lock(host: &str, svid: i32, fh: &Bytes) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Bytes::copy_from_slice(host.as_bytes()),
        fh: fh.clone(),
        oh: Bytes::from(format!("{svid}@{host}")),
        svid,
        offset: 0,
        len: 10,
    }
}

fn nlm(xid: u32, proc_: u32, args: impl Encode) -> Bytes {
    call(xid, NLM_PROGRAM, NLM_V4, proc_, args)
}

/// The NLM stat of a reply to `xid` (after its cookie).
fn nlm_stat(reply: &Bytes, xid: u32) -> u32 {
    let mut dec = results(reply, xid);
    dec.opaque(1024).unwrap();
    dec.u32().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retransmitted_unlock_is_answered_from_the_cache_and_keeps_the_new_lock() {
    let export = TempDir::new("drc-nlm");
    std::fs::write(export.path().join("f"), b"locked file").unwrap();
    let state = TempDir::new("drc-nlm-state");
    let config = Config {
        nlm: Some(NlmConfig {
            port: 0,
            grace: Duration::ZERO,
            // No callbacks in this test (no blocking lock).
            client_portmap_port: 1,
            ..NlmConfig::new(state.path().to_path_buf())
        }),
        ..common::loopback_config(export.path())
    };
    let bound = Bound::new(&config).await.unwrap();
    let fh = {
        let table = bound.server().table();
        let ex = &table.exports[0].export;
        let f = ex.child(&ex.root().unwrap(), b"f").unwrap();
        ex.handle(&f).0
    };
    let server = bound.nlm_addr().unwrap();
    let serving = common::serve(bound);

    let lock = |cookie: &'static [u8]| LockArgs {
        cookie: Bytes::from_static(cookie),
        block: false,
        exclusive: true,
        lock: nlm_lock("ca", 1, &fh),
        reclaim: false,
        state: 1,
    };
    let unlock = nlm(
        2,
        proc4::UNLOCK,
        UnlockArgs {
            cookie: Bytes::from_static(b"u"),
            lock: nlm_lock("ca", 1, &fh),
        },
    );
    let granted = Stat::Granted as u32;
    let mut conn = Conn::open(server, 0).await;
    let port = conn.port();
    assert_eq!(
        nlm_stat(&conn.call(&nlm(1, proc4::LOCK, lock(b"l1"))).await, 1),
        granted
    );
    let unlocked = conn.call(&unlock).await;
    assert_eq!(nlm_stat(&unlocked, 2), granted);
    assert_eq!(
        nlm_stat(&conn.call(&nlm(3, proc4::LOCK, lock(b"l3"))).await, 3),
        granted
    );
    conn.reset();

    // The UNLOCK again, from the same port after a reconnect: its first reply, and
    // the lock taken since is still held.
    let mut conn = Conn::open(server, port).await;
    assert_eq!(conn.call(&unlock).await, unlocked);
    let test = TestArgs {
        cookie: Bytes::from_static(b"t"),
        exclusive: true,
        lock: nlm_lock("cb", 7, &fh),
    };
    let denied = conn.call(&nlm(4, proc4::TEST, test)).await;
    assert_eq!(
        nlm_stat(&denied, 4),
        Stat::Denied as u32,
        "the lock is still held"
    );
    let other = LockArgs {
        lock: nlm_lock("cb", 7, &fh),
        ..lock(b"b")
    };
    let refused = conn.call(&nlm(5, proc4::LOCK, other)).await;
    assert_eq!(nlm_stat(&refused, 5), Stat::Denied as u32);
    drop(conn);
    serving.stop().await;
}

/// Over RPC-over-RDMA (userspace iWARP on loopback) the cache is the same one, keyed
/// by the connection's peer address without its port: a REMOVE and a WRITE sent again
/// with their xids on the same connection get their first replies (re-reduced against
/// the new Call's chunks by the transport) and do not run again; so does the REMOVE
/// retransmitted on a new connection, which comes from another source port (neither
/// our client nor Linux's rdma_cm binds the old one). The same xid with other
/// arguments runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_rdma_a_retransmission_on_the_connection_or_a_new_one_gets_the_first_reply() {
    use iwarp::{IwarpConfig, IwarpProvider};
    use rpcrdma_transport::{RdmaConfig, RdmaTransport};

    let dir = TempDir::new("drc-rdma");
    let root = dir.path();
    std::fs::write(root.join("victim"), b"v").unwrap();
    std::fs::write(root.join("w"), b"").unwrap();
    let mut bound = Bound::new(&common::loopback_config(root)).await.unwrap();
    bound
        .listen_rdma(&nfsd::rdma::RdmaOptions {
            provider: nfsd::rdma::Provider::Iwarp,
            ..nfsd::rdma::RdmaOptions::new((std::net::Ipv4Addr::LOCALHOST, 0).into())
        })
        .await
        .unwrap();
    let rdma = bound.rdma_addr().unwrap();
    let (top, w) = {
        let table = bound.server().table();
        let ex = &table.exports[0].export;
        let top = ex.root().unwrap();
        let w = ex.child(&top, b"w").unwrap();
        (NfsFh3(ex.handle(&top).0), NfsFh3(ex.handle(&w).0))
    };
    let nfsd = bound.server().clone();
    let serving = common::serve(bound);

    let transport = RdmaTransport::new(
        IwarpProvider::new(IwarpConfig::default()),
        rdma,
        RdmaConfig::default(),
        std::sync::Arc::new(nfs3::rdma::Nfs3Binding),
    );
    let (mut tx, mut rx) = transport.connect_once().await.unwrap();
    let remove = nfs(
        201,
        NfsProc3::REMOVE,
        Remove3Args {
            object: dirop(&top, "victim"),
        },
    );
    let first = rpc(&mut tx, &mut rx, &remove).await;
    assert_eq!(nfs_status(&first, 201), 0);
    let a = nfs(202, NfsProc3::WRITE, write(&w, b"AAAA"));
    let wrote = rpc(&mut tx, &mut rx, &a).await;
    assert_eq!(nfs_status(&wrote, 202), 0);
    assert_eq!(
        nfs_status(
            &rpc(
                &mut tx,
                &mut rx,
                &nfs(203, NfsProc3::WRITE, write(&w, b"BBBB"))
            )
            .await,
            203
        ),
        0
    );
    assert_eq!(
        rpc(&mut tx, &mut rx, &remove).await,
        first,
        "REMOVE: the first reply"
    );
    assert_eq!(
        rpc(&mut tx, &mut rx, &a).await,
        wrote,
        "WRITE: the first reply"
    );
    assert_eq!(
        std::fs::read(root.join("w")).unwrap(),
        b"BBBB",
        "WRITE not redone"
    );
    let stats = nfsd.reply_cache.as_ref().unwrap().stats();
    assert_eq!((stats.hits, stats.misses), (2, 3), "{stats}");

    let (mut tx2, mut rx2) = transport.connect_once().await.unwrap();
    assert_eq!(
        rpc(&mut tx2, &mut rx2, &remove).await,
        first,
        "REMOVE after a reconnect (another port): the first reply"
    );
    let reused = nfs(
        201,
        NfsProc3::REMOVE,
        Remove3Args {
            object: dirop(&top, "never-there"),
        },
    );
    assert_eq!(
        nfs_status(&rpc(&mut tx2, &mut rx2, &reused).await, 201),
        2,
        "the same xid with other arguments runs: NFS3ERR_NOENT"
    );
    drop((tx, rx, tx2, rx2));
    serving.stop().await;
}

/// Sends the call `msg` over an RPC-over-RDMA connection and returns its reply.
async fn rpc(
    tx: &mut impl oncrpc::RecordSender,
    rx: &mut impl oncrpc::RecordReceiver,
    msg: &Bytes,
) -> Bytes {
    let stream = xdr::XdrStream {
        inline: msg.clone(),
        ddp: Vec::new(),
    };
    tx.send(&stream).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a reply within 10 s")
        .unwrap()
        .expect("connection open");
    reply.into_message().expect("a reply message")
}
