//! A small NFSv3 / MOUNT v3 test client over the transport-neutral dispatcher (and,
//! for the binary tests, over TCP), plus temporary exports.

#![allow(dead_code, unreachable_pub)]

pub mod nfs4;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use nfs3::dir::*;
use nfs3::mount::*;
use nfs3::*;
use nfsd::{
    ExportLine, ExportOptions, HandleConfig, KernelHandles, MountService, NfsServer, NfsService,
    Squash, Table,
};
use oncrpc::{
    AcceptStat, AcceptedStatus, AuthSysParms, CallHeader, Dispatcher, OpaqueAuth, Peer, ReplyBody,
    ReplyHeader, Xid,
};
use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

/// `len` pseudo-random bytes (xorshift from `seed`): file contents a test can tell
/// apart by seed and offset.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A server on 127.0.0.1 (ports chosen by the kernel, no rpcbind, no NLM) exporting
/// `dir` read-write to everyone without squashing, with the default memory budget.
pub fn loopback_config(dir: &Path) -> nfsd::server::Config {
    nfsd::server::Config {
        exports: vec![ExportLine::everyone(
            dir,
            ExportOptions {
                read_only: false,
                squash: Squash::None,
                secure: false,
                ..ExportOptions::default()
            },
        )],
        bind: std::net::Ipv4Addr::LOCALHOST.into(),
        nfs_port: 0,
        mount_port: 0,
        rpcbind: nfsd::server::RpcbindMode::Off,
        portmap_port: 0,
        handles: HandleConfig::ephemeral().unwrap(),
        nlm: None,
        max_memory: nfsd::memory::default_max_memory(),
        inline_metadata: true,
        tcp_read_data: oncrpc::tcp::FileData::Sendfile,
        tcp_splice_writes: true,
        drc_entries: None,
        nfs4_id_domain: None,
        metrics: None,
    }
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "nfsd-test-{}-{}-{}",
            tag,
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Who calls.
#[derive(Clone)]
pub enum Who {
    None,
    Sys(u32, u32, Vec<u32>),
}

/// What came back.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// SUCCESS and the results.
    Ok(Bytes),
    /// Another accept_stat.
    Accept(AcceptStat),
    /// A rejected reply.
    Denied,
}

/// An in-process server: an export under a temp dir (with a sibling "outside" dir to
/// prove nothing outside is touched) and its dispatcher.
pub struct Harness {
    pub base: TempDir,
    pub export: PathBuf,
    pub outside: PathBuf,
    pub dispatcher: Dispatcher,
    pub server: Arc<NfsServer>,
    pub who: Who,
    /// The peer calls come from (`None`: in process, as no transport).
    pub peer: Option<Peer>,
    lines: Vec<ExportLine>,
    /// The handle key and kind, kept across [`Harness::restart`] as nfsd keeps its
    /// key file.
    pub handles: HandleConfig,
    xid: AtomicU32,
}

impl Harness {
    pub fn new() -> Harness {
        Self::with(false, Squash::None, &[])
    }

    /// The export (and `extra` ones) for everyone, from any port.
    pub fn with(read_only: bool, squash: Squash, extra: &[&Path]) -> Harness {
        let options = ExportOptions {
            read_only,
            squash,
            secure: false,
            ..ExportOptions::default()
        };
        Self::with_lines(|export| {
            let mut lines = vec![ExportLine::everyone(export, options)];
            for p in extra {
                lines.push(ExportLine::everyone(*p, options));
            }
            lines
        })
    }

    /// Exports the lines `lines(export)` returns.
    pub fn with_lines(lines: impl FnOnce(&Path) -> Vec<ExportLine>) -> Harness {
        let base = TempDir::new("export");
        let export = base.path().join("export");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&export).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"do not touch").unwrap();
        let lines = lines(&export);
        let handles = HandleConfig::ephemeral().unwrap();
        Self::from_lines(base, export, outside, lines, handles)
    }

    /// The same server with its handles made as `kernel` says (a restart).
    pub fn with_kernel_handles(self, kernel: KernelHandles) -> Harness {
        let mut h = self;
        h.handles.kernel = kernel;
        h.restart()
    }

    fn from_lines(
        base: TempDir,
        export: PathBuf,
        outside: PathBuf,
        lines: Vec<ExportLine>,
        handles: HandleConfig,
    ) -> Harness {
        let server = Arc::new(NfsServer::new(Table::open(&lines, &handles, None).unwrap()));
        let mut dispatcher = Dispatcher::new();
        dispatcher
            .register(
                NFS_PROGRAM,
                [NFS_V3],
                Arc::new(NfsService::new(server.clone())),
            )
            .unwrap();
        dispatcher
            .register(
                MOUNT_PROGRAM,
                [MOUNT_V3],
                Arc::new(MountService::new(server.clone())),
            )
            .unwrap();
        Harness {
            base,
            export,
            outside,
            dispatcher,
            server,
            who: Who::Sys(0, 0, vec![]),
            peer: None,
            lines,
            handles,
            xid: AtomicU32::new(1),
        }
    }

    /// A fresh server on the same directories: a restart.
    pub fn restart(self) -> Harness {
        let Harness {
            base,
            export,
            outside,
            who,
            peer,
            lines,
            handles,
            ..
        } = self;
        let mut h = Harness::from_lines(base, export, outside, lines, handles);
        h.who = who;
        h.peer = peer;
        h
    }

    pub fn call_raw(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Reply {
        let cred = match &self.who {
            Who::None => OpaqueAuth::none(),
            Who::Sys(uid, gid, gids) => AuthSysParms {
                stamp: 1,
                machinename: Bytes::from_static(b"testhost"),
                uid: *uid,
                gid: *gid,
                gids: oncrpc::Gids::new(gids).expect("at most 16 groups"),
            }
            .to_opaque_auth(),
        };
        let xid = Xid(self.xid.fetch_add(1, Ordering::Relaxed));
        let mut enc = Encoder::new();
        CallHeader::new(xid, prog, vers, proc_, cred).encode(&mut enc);
        enc.raw(args);
        let call = enc.finish().to_bytes();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let reply = rt
            .block_on(self.dispatcher.dispatch_from(call, self.peer))
            .expect("a reply")
            // READ data over TCP stays in the file until the TCP writer sends it.
            .materialize(oncrpc::tcp::read_range)
            .expect("READ data left in the file is readable")
            .to_bytes();
        decode_reply(reply, xid)
    }

    pub fn nfs_raw(&self, proc: NfsProc3, args: &[u8]) -> Reply {
        self.call_raw(NFS_PROGRAM, NFS_V3, proc.0, args)
    }

    /// A typed NFS call that must get SUCCESS.
    pub fn nfs<A: Encode, R: Decode>(&self, proc: NfsProc3, args: &A) -> R {
        match self.nfs_raw(proc, &args.to_xdr().to_bytes()) {
            Reply::Ok(b) => R::from_xdr(b).expect("result decodes"),
            other => panic!("{:?}: {other:?}", proc.name()),
        }
    }

    pub fn mount<A: Encode, R: Decode>(&self, proc: MountProc3, args: &A) -> R {
        match self.call_raw(MOUNT_PROGRAM, MOUNT_V3, proc.0, &args.to_xdr().to_bytes()) {
            Reply::Ok(b) => R::from_xdr(b).expect("result decodes"),
            other => panic!("MOUNT {proc:?}: {other:?}"),
        }
    }

    /// The export root's handle via MNT.
    pub fn root(&self) -> NfsFh3 {
        let path = DirPath(Bytes::copy_from_slice(
            self.server.table().exports[0]
                .export
                .path
                .as_os_str()
                .as_encoded_bytes(),
        ));
        match self.mount::<_, MountRes3>(MountProc3::MNT, &path) {
            MountRes3::Ok { fhandle, .. } => NfsFh3(fhandle),
            MountRes3::Fail(s) => panic!("MNT: {s:?}"),
        }
    }

    pub fn lookup(&self, dir: &NfsFh3, name: &str) -> Lookup3Res {
        self.nfs(
            NfsProc3::LOOKUP,
            &Lookup3Args {
                what: DirOpArgs3 {
                    dir: dir.clone(),
                    name: name.into(),
                },
            },
        )
    }

    pub fn fh(&self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self.lookup(dir, name) {
            NfsResult::Ok(ok) => ok.object,
            NfsResult::Fail(s, _) => panic!("LOOKUP {name}: {s:?}"),
        }
    }

    pub fn create(&self, dir: &NfsFh3, name: &str, how: CreateHow3) -> Create3Res {
        self.nfs(
            NfsProc3::CREATE,
            &Create3Args {
                dir_op: DirOpArgs3 {
                    dir: dir.clone(),
                    name: name.into(),
                },
                how,
            },
        )
    }

    pub fn mkdir(&self, dir: &NfsFh3, name: &str) -> Create3Res {
        self.nfs(
            NfsProc3::MKDIR,
            &MkDir3Args {
                dir_op: DirOpArgs3 {
                    dir: dir.clone(),
                    name: name.into(),
                },
                attributes: Sattr3 {
                    mode: Some(0o755),
                    ..Sattr3::default()
                },
            },
        )
    }

    /// A new file's handle.
    pub fn new_file(&self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self.create(
            dir,
            name,
            CreateHow3::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Sattr3::default()
            }),
        ) {
            NfsResult::Ok(ok) => ok.obj.expect("handle"),
            NfsResult::Fail(s, _) => panic!("CREATE {name}: {s:?}"),
        }
    }

    pub fn new_dir(&self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        match self.mkdir(dir, name) {
            NfsResult::Ok(ok) => ok.obj.expect("handle"),
            NfsResult::Fail(s, _) => panic!("MKDIR {name}: {s:?}"),
        }
    }

    /// Asserts the "outside" directory still holds exactly its one file.
    pub fn assert_outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
        assert_eq!(
            std::fs::read(self.outside.join("secret")).unwrap(),
            b"do not touch"
        );
        let parent: Vec<_> = std::fs::read_dir(self.base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let mut parent = parent;
        parent.sort();
        assert_eq!(parent, vec!["export", "outside"]);
    }
}

/// A call message of `prog`/`vers`/`proc_` with `args`, from `machine` with AUTH_SYS
/// as root: what the wire tests (drc.rs, nfs4.rs, nfs4_tshark.rs) send over TCP.
pub fn root_call(
    machine: &'static [u8],
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &impl Encode,
) -> Bytes {
    call_as(machine, 0, xid, prog, vers, proc_, args)
}

/// [`root_call`] as user and group `id` (AUTH_SYS, no other groups).
pub fn call_as(
    machine: &'static [u8],
    id: u32,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &impl Encode,
) -> Bytes {
    let cred = AuthSysParms {
        stamp: 1,
        machinename: Bytes::from_static(machine),
        uid: id,
        gid: id,
        gids: oncrpc::Gids::new(&[]).unwrap(),
    }
    .to_opaque_auth();
    let mut enc = Encoder::new();
    CallHeader::new(Xid(xid), prog, vers, proc_, cred).encode(&mut enc);
    args.encode(&mut enc);
    enc.finish().to_bytes()
}

/// Decodes an RPC reply message.
pub fn decode_reply(reply: Bytes, xid: Xid) -> Reply {
    let mut dec = Decoder::new(reply);
    let header = ReplyHeader::decode(&mut dec).expect("reply header");
    assert_eq!(header.xid, xid);
    match header.body {
        ReplyBody::Accepted {
            status: AcceptedStatus::Success,
            ..
        } => Reply::Ok(dec.rest()),
        ReplyBody::Accepted { status, .. } => Reply::Accept(status.stat()),
        ReplyBody::Denied(_) => Reply::Denied,
    }
}

/// The status of any NFS result.
pub fn status<T, F>(r: &NfsResult<T, F>) -> NfsStat3 {
    r.status()
}

/// A [`nfsd::server::Bound`] served on a task of its own until [`Serving::stop`].
pub struct Serving {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Serves `bound` until [`Serving::stop`].
pub fn serve(bound: nfsd::server::Bound) -> Serving {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    Serving { stop, task }
}

impl Serving {
    /// Shuts the server down; fails unless `serve` returns cleanly within 10 s.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), self.task)
            .await
            .expect("serve returns after shutdown")
            .unwrap()
            .unwrap();
    }
}

/// Mount options for a loopback server's NFS port (`transport`) and MOUNT port,
/// with a per-call `timeout`.
pub fn mount_options(
    transport: nfsclient::TransportKind,
    nfs_port: u16,
    mount_port: u16,
    timeout: std::time::Duration,
) -> nfsclient::MountOptions {
    nfsclient::MountOptions {
        transport,
        nfs_port: Some(nfs_port),
        mount_port: Some(mount_port),
        timeout,
        ..nfsclient::MountOptions::default()
    }
}
