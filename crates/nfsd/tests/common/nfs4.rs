//! An NFSv4.1 test client over TCP: COMPOUNDs built by the `nfs4` crate's encoder
//! on a socket of the test's own, a session set up as the Linux client sets it up,
//! and a server exporting a scratch directory.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use nfs4::compound::{Compound4Args, Compound4Res, NfsArgop4, NfsResop4};
use nfs4::fh::*;
use nfs4::session::*;
use nfs4::*;
use nfsd::server::Bound;
use oncrpc::{AcceptedStatus, ReplyBody, ReplyHeader, Xid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Bytes, Decode, Decoder, Encode};

use super::TempDir;

/// A client connection: raw RPC records over TCP, or calls through our RPC-over-RDMA
/// client (with the NFSv4 binding of RFC 8267 §5, so WRITE data goes in Read chunks
/// and READ data comes back in Write chunks).
pub struct Conn {
    wire: Wire,
    pub xid: u32,
    /// The AUTH_SYS user and group of the calls over TCP (root by default).
    pub uid: u32,
}

enum Wire {
    Tcp(TcpStream),
    Rdma(oncrpc::Client, rpcrdma_transport::StatsRegistry),
}

impl Conn {
    pub async fn open(server: SocketAddr) -> Conn {
        Conn {
            wire: Wire::Tcp(TcpStream::connect(server).await.unwrap()),
            xid: 1,
            uid: 0,
        }
    }

    /// A connection to an NFS/RDMA listener, AUTH_SYS root as [`rpc_call`]'s.
    pub fn open_rdma(server: SocketAddr, config: rpcrdma_transport::RdmaConfig) -> Conn {
        let transport = rpcrdma_transport::RdmaTransport::new(
            iwarp::IwarpProvider::new(iwarp::IwarpConfig::default()),
            server,
            config,
            std::sync::Arc::new(nfs4::rdma::Nfs4Binding::default()),
        );
        let stats = transport.stats();
        let cred = oncrpc::AuthSysParms {
            stamp: 1,
            machinename: Bytes::from_static(b"nfs4-client"),
            uid: 0,
            gid: 0,
            gids: oncrpc::Gids::new(&[]).unwrap(),
        }
        .to_opaque_auth();
        let client = oncrpc::Client::new(
            transport,
            oncrpc::ClientConfig {
                cred,
                ..oncrpc::ClientConfig::default()
            },
        );
        Conn {
            wire: Wire::Rdma(client, stats),
            xid: 1,
            uid: 0,
        }
    }

    /// The transport's counters of a connection made by [`Conn::open_rdma`].
    pub fn rdma_stats(&self) -> Option<&rpcrdma_transport::StatsRegistry> {
        match &self.wire {
            Wire::Tcp(_) => None,
            Wire::Rdma(_, stats) => Some(stats),
        }
    }

    fn sock(&mut self) -> &mut TcpStream {
        match &mut self.wire {
            Wire::Tcp(sock) => sock,
            Wire::Rdma(..) => panic!("raw records are sent over TCP only"),
        }
    }

    /// Sends a call record and returns the reply record.
    pub async fn roundtrip(&mut self, call: &Bytes) -> Bytes {
        let mut record = Vec::with_capacity(4 + call.len());
        record.extend_from_slice(&(0x8000_0000 | call.len() as u32).to_be_bytes());
        record.extend_from_slice(call);
        self.sock().write_all(&record).await.unwrap();
        let mut reply = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            tokio::time::timeout(Duration::from_secs(10), self.sock().read_exact(&mut mark))
                .await
                .expect("a reply within 10 s")
                .unwrap();
            let mark = u32::from_be_bytes(mark);
            let start = reply.len();
            reply.resize(start + (mark & 0x7fff_ffff) as usize, 0);
            self.sock().read_exact(&mut reply[start..]).await.unwrap();
            if mark & 0x8000_0000 != 0 {
                return Bytes::from(reply);
            }
        }
    }

    /// A COMPOUND call message (AUTH_SYS, as [`Conn::uid`]) with a fresh xid.
    pub fn call(&mut self, minorversion: u32, ops: Vec<NfsArgop4>) -> (u32, Bytes) {
        self.xid += 1;
        let args = Compound4Args {
            tag: "nfs4-test".into(),
            minorversion,
            argarray: ops,
        };
        let call = super::call_as(
            b"nfs4-client",
            self.uid,
            self.xid,
            NFS4_PROGRAM,
            NFS_V4,
            NFSPROC4_COMPOUND,
            &args,
        );
        (self.xid, call)
    }

    /// Sends a COMPOUND, returns the reply record (over RDMA: the results) and the
    /// decoded result.
    pub async fn compound(
        &mut self,
        minorversion: u32,
        ops: Vec<NfsArgop4>,
    ) -> (Bytes, Compound4Res) {
        if let Wire::Rdma(client, _) = &self.wire {
            let args = Compound4Args {
                tag: "nfs4-test".into(),
                minorversion,
                argarray: ops,
            };
            let reply = client
                .call(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, args.to_xdr())
                .await
                .expect("a reply over RDMA");
            let bytes = reply.results.rest();
            let res = Compound4Res::decode(&mut Decoder::new(bytes.clone())).expect("COMPOUND4res");
            return (bytes, res);
        }
        let (xid, call) = self.call(minorversion, ops);
        let reply = self.roundtrip(&call).await;
        let res = Compound4Res::decode(&mut results(&reply, xid)).expect("COMPOUND4res");
        (reply, res)
    }
}

pub fn rpc_call(xid: u32, proc_: u32, args: &impl Encode) -> Bytes {
    super::root_call(b"nfs4-client", xid, NFS4_PROGRAM, NFS_V4, proc_, args)
}

/// The results of a SUCCESS reply to `xid`.
pub fn results(reply: &Bytes, xid: u32) -> Decoder {
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

pub fn statuses(res: &Compound4Res) -> Vec<NfsStat4> {
    res.resarray.iter().map(NfsResop4::status).collect()
}

pub fn channel() -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1_049_620,
        ca_maxresponsesize: 1_049_480,
        ca_maxresponsesize_cached: 7584,
        ca_maxoperations: 16,
        ca_maxrequests: 64,
        ca_rdma_ird: None,
    }
}

/// A session set up as the Linux client does it.
pub struct Session {
    pub conn: Conn,
    pub sid: SessionId4,
    pub clientid: u64,
    /// Slot 0's next sequence id.
    pub seq: u32,
}

impl Session {
    /// A session of a new client that has nothing to reclaim: EXCHANGE_ID,
    /// CREATE_SESSION and RECLAIM_COMPLETE, as the Linux client starts (§18.51.3: no
    /// OPEN or LOCK before it).
    pub async fn new(server: SocketAddr, owner: &str) -> Session {
        Session::new_on(Conn::open(server).await, owner).await
    }

    /// A session of a client that may have state to reclaim: no RECLAIM_COMPLETE yet,
    /// and its slot's next sequence id is 1 (tests of the slot rules count from it).
    pub async fn to_reclaim(server: SocketAddr, owner: &str) -> Session {
        Session::to_reclaim_on(Conn::open(server).await, owner).await
    }

    /// [`Session::new`] on the connection given.
    pub async fn new_on(conn: Conn, owner: &str) -> Session {
        let mut s = Session::to_reclaim_on(conn, owner).await;
        let res = s
            .run(vec![NfsArgop4::ReclaimComplete(
                nfs4::session::ReclaimComplete4Args { rca_one_fs: false },
            )])
            .await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "RECLAIM_COMPLETE: {res:?}");
        s
    }

    /// [`Session::to_reclaim`] on the connection given.
    pub async fn to_reclaim_on(mut conn: Conn, owner: &str) -> Session {
        let (_, res) = conn
            .compound(
                1,
                vec![NfsArgop4::ExchangeId(ExchangeId4Args {
                    eia_clientowner: ClientOwner4 {
                        co_verifier: *b"verifier",
                        co_ownerid: owner.into(),
                    },
                    eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_BIND_PRINC_STATEID,
                    eia_state_protect: StateProtect4A::None,
                    eia_client_impl_id: None,
                })],
            )
            .await;
        let NfsResop4::ExchangeId(Res4::Ok(ex)) = &res.resarray[0] else {
            panic!("EXCHANGE_ID: {res:?}")
        };
        assert_eq!(ex.eir_flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
        assert_ne!(ex.eir_flags & EXCHGID4_FLAG_USE_NON_PNFS, 0);
        assert_eq!(ex.eir_state_protect, StateProtect4R::None);
        let clientid = ex.eir_clientid;
        let (_, res) = conn
            .compound(
                1,
                vec![NfsArgop4::CreateSession(CreateSession4Args {
                    csa_clientid: clientid,
                    csa_sequence: ex.eir_sequenceid,
                    csa_flags: CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                    csa_fore_chan_attrs: channel(),
                    csa_back_chan_attrs: channel(),
                    csa_cb_program: 0x4000_0000,
                    csa_sec_parms: vec![CallbackSecParms4::AuthNone],
                })],
            )
            .await;
        let NfsResop4::CreateSession(Res4::Ok(cs)) = &res.resarray[0] else {
            panic!("CREATE_SESSION: {res:?}")
        };
        assert_eq!(cs.csr_sequence, ex.eir_sequenceid);
        // Clamped to the server's limits, never raised.
        assert!(cs.csr_fore_chan_attrs.ca_maxrequests <= 64);
        assert!(cs.csr_fore_chan_attrs.ca_maxoperations <= 16);
        assert_eq!(cs.csr_fore_chan_attrs.ca_maxresponsesize_cached, 7584);
        Session {
            conn,
            sid: cs.csr_sessionid,
            clientid,
            seq: 1,
        }
    }

    pub fn sequence(&self, seq: u32, cachethis: bool) -> NfsArgop4 {
        NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: self.sid,
            sa_sequenceid: seq,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: cachethis,
        })
    }

    /// SEQUENCE (slot 0, the next sequence id) and `ops`.
    pub async fn run(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        let mut all = vec![self.sequence(self.seq, false)];
        all.extend(ops);
        self.seq += 1;
        let (_, res) = self.conn.compound(1, all).await;
        assert_eq!(
            res.resarray[0].status(),
            NfsStat4::NFS4_OK,
            "SEQUENCE: {res:?}"
        );
        res
    }
}

pub const TYPE: u32 = 1;
pub const SIZE: u32 = 4;
pub const FSID: u32 = 8;
pub const FILEID: u32 = 20;
pub const MODE: u32 = 33;
pub const OWNER: u32 = 36;

pub fn getattr() -> NfsArgop4 {
    NfsArgop4::GetAttr(GetAttr4Args {
        attr_request: Bitmap4::from_bits(&[TYPE, SIZE, FSID, FILEID, MODE, OWNER]),
    })
}

/// Type, size, fsid, fileid, mode and owner from [`getattr`]'s result.
#[derive(Debug, PartialEq)]
pub struct Attrs {
    pub ftype: u32,
    pub size: u64,
    pub fsid: (u64, u64),
    pub fileid: u64,
    pub mode: u32,
    pub owner: Vec<u8>,
}

pub fn attrs(r: &NfsResop4) -> Attrs {
    let NfsResop4::GetAttr(Res4::Ok(ok)) = r else {
        panic!("GETATTR: {r:?}")
    };
    let f = &ok.obj_attributes;
    assert_eq!(
        f.attrmask,
        Bitmap4::from_bits(&[TYPE, SIZE, FSID, FILEID, MODE, OWNER])
    );
    let mut d = Decoder::new(f.attr_vals.0.clone());
    let a = Attrs {
        ftype: d.u32().unwrap(),
        size: d.u64().unwrap(),
        fsid: (d.u64().unwrap(), d.u64().unwrap()),
        fileid: d.u64().unwrap(),
        mode: d.u32().unwrap(),
        owner: d.string(64).unwrap().to_vec(),
    };
    d.finish().unwrap();
    a
}

pub fn lookup(name: &[u8]) -> NfsArgop4 {
    NfsArgop4::Lookup(Lookup4Args {
        objname: Utf8Str::from(name),
    })
}

/// LOOKUPs from the root to `path`.
pub fn walk(path: &Path) -> Vec<NfsArgop4> {
    use std::os::unix::ffi::OsStrExt;
    path.iter().skip(1).map(|c| lookup(c.as_bytes())).collect()
}

/// A server exporting a fresh directory (with a file `f` of 5 bytes, a directory `d`
/// and a symbolic link `l` to `f`), served until the returned handle is stopped.
pub async fn server() -> (TempDir, std::path::PathBuf, SocketAddr, super::Serving) {
    let dir = TempDir::new("nfs4");
    std::fs::write(dir.path().join("f"), b"hello").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
    let mut bound = Bound::new(&super::loopback_config(dir.path()))
        .await
        .unwrap();
    bound.serve_nfs4();
    let export = bound.server().table().exports[0].export.path.clone();
    let addr = bound.nfs_addr().unwrap();
    (dir, export, addr, super::serve(bound))
}

/// What [`rdma_server`] started.
pub struct RdmaServer {
    pub dir: TempDir,
    pub nfs: std::sync::Arc<nfsd::nfs::NfsServer>,
    pub export: std::path::PathBuf,
    pub tcp: SocketAddr,
    pub rdma: SocketAddr,
    pub stats: rpcrdma_transport::StatsRegistry,
    pub serving: super::Serving,
}

/// A server exporting a fresh, empty directory over TCP and over RPC-over-RDMA (our
/// userspace iWARP provider on loopback).
pub async fn rdma_server() -> RdmaServer {
    use nfsd::rdma::{Provider, RdmaOptions};
    let dir = TempDir::new("nfs4-rdma");
    let mut bound = Bound::new(&super::loopback_config(dir.path()))
        .await
        .unwrap();
    bound.serve_nfs4();
    bound
        .listen_rdma(&RdmaOptions {
            provider: Provider::Iwarp,
            ..RdmaOptions::new((std::net::Ipv4Addr::LOCALHOST, 0).into())
        })
        .await
        .unwrap();
    RdmaServer {
        nfs: bound.server().clone(),
        export: bound.server().table().exports[0].export.path.clone(),
        tcp: bound.nfs_addr().unwrap(),
        rdma: bound.rdma_addr().unwrap(),
        stats: bound.rdma_stats().unwrap(),
        serving: super::serve(bound),
        dir,
    }
}
