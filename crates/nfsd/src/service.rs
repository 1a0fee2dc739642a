//! Glue to `oncrpc`: the NFS and MOUNT programs as [`oncrpc::Service`]s.
//!
//! A call's file-system work runs on tokio's blocking pool (one thread per call in
//! flight), where the caller's identity can be switched per thread ([`crate::creds`]),
//! except for the small metadata procedures of [`runs_inline`], which by default
//! ([`NfsServer::inline_metadata`]) run on the async worker that received the call
//! (for NFS/RDMA on a verbs device, whose threads never switch identity: those that
//! switch on a delegate thread, [`NfsService::delegating`], the others on the
//! blocking pool of another runtime, [`NfsService::on`]).

use std::sync::Arc;

use nfs3::NfsProc3;
use oncrpc::{Request, Service, ServiceError, ServiceResult};

use crate::delegate::Delegate;
use crate::nfs::{Caller, NfsServer};

/// NFS version 3 (program 100003) as an RPC service.
#[derive(Debug, Clone)]
pub struct NfsService {
    server: Arc<NfsServer>,
    /// Where calls run ([`NfsService::on`]); `None`: the runtime that polls the call.
    calls: Option<tokio::runtime::Handle>,
    /// Where [`NfsService::on`]'s inline calls that switch identity run instead.
    delegate: Option<Arc<Delegate>>,
}

impl NfsService {
    /// Wraps a server.
    pub fn new(server: Arc<NfsServer>) -> Self {
        NfsService {
            server,
            calls: None,
            delegate: None,
        }
    }

    /// Runs every call's file-system work on the runtime of `handle` (the inline
    /// procedures on its workers, the rest on its blocking pool), never on the thread
    /// that polls the call: for a transport whose threads must keep their identity
    /// (NFS/RDMA on a verbs device, `crate::rdma`, "Threads"). Decoding and encoding
    /// stay with the transport, so a call takes as many thread hand-offs as over TCP.
    pub fn on(mut self, handle: tokio::runtime::Handle) -> Self {
        self.calls = Some(handle);
        self
    }

    /// With [`NfsService::on`]: the inline calls that switch identity run on
    /// `delegate`'s thread, the calling thread waiting for them
    /// ([`crate::delegate`]: a cheaper hand-off than a task of `on`'s runtime).
    pub fn delegating(mut self, delegate: Arc<Delegate>) -> Self {
        self.delegate = Some(delegate);
        self
    }
}

impl Service for NfsService {
    fn procedure_name(&self, _vers: u32, proc_: u32) -> Option<&'static str> {
        NfsProc3(proc_).name()
    }

    async fn call(&self, req: Request) -> ServiceResult {
        let proc = NfsProc3(req.proc_);
        if proc.name().is_none() {
            return Err(ServiceError::ProcUnavail);
        }
        let over = req.peer.map(|p| p.protocol);
        let caller = Caller::new(req.peer, req.cred).with_data(req.data);
        let args = req.args;
        if self.server.inline_metadata && runs_inline(proc, over) {
            let Some(h) = &self.calls else {
                return call_inline(&self.server, proc, &caller, args);
            };
            // A call that never switches identity may stay on a thread that must keep
            // its own: no hand-off to another runtime and back.
            if runs_as_server(proc) {
                return call_inline(&self.server, proc, &caller, args);
            }
            let server = self.server.clone();
            if let Some(d) = &self.delegate {
                return d
                    .run(move || call_inline(&server, proc, &caller, args))
                    .unwrap_or(Err(ServiceError::SystemErr));
            }
            return h
                .spawn(async move { call_inline(&server, proc, &caller, args) })
                .await
                .unwrap_or(Err(ServiceError::SystemErr));
        }
        let server = self.server.clone();
        let work = move || server.call(proc, &caller, args);
        match &self.calls {
            None => tokio::task::spawn_blocking(work),
            Some(h) => h.spawn_blocking(work),
        }
        .await
        .map_err(|_| ServiceError::SystemErr)?
    }

    /// RFC 8267 §4.1: WRITE's data (`nfs3::ulb::call_data_item`).
    fn call_data_item(&self, _vers: u32, proc_: u32, args: &[u8]) -> Option<xdr::DataItem> {
        nfs3::ulb::call_data_item(NfsProc3(proc_), args)
    }

    /// The procedures knfsd caches ([`crate::drc::nfs3_cached`]).
    fn caches_reply(&self, _vers: u32, proc_: u32) -> bool {
        crate::drc::nfs3_cached(NfsProc3(proc_))
    }
}

/// A call of [`runs_inline`] on this thread. A panic fails the call with SYSTEM_ERR,
/// as from the blocking pool (the identity guards restore the thread's identity while
/// unwinding).
fn call_inline(
    server: &NfsServer,
    proc: NfsProc3,
    caller: &Caller,
    args: xdr::Decoder,
) -> ServiceResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.call(proc, caller, args)
    }))
    .unwrap_or(Err(ServiceError::SystemErr))
}

/// Whether `proc` does all its work as the server, never as the caller, so that it
/// never switches the thread's identity ([`crate::creds`]): GETATTR resolves the
/// handle and reads the attributes as the server (RFC 1813 §3.3.1 asks no
/// permission), and NULL does nothing. [`NfsService::on`]'s transport then runs them
/// on its own thread (an RDMA device thread, where a switch would panic:
/// `creds::keep_identity`), saving the two thread hand-offs of every other call.
pub fn runs_as_server(proc: NfsProc3) -> bool {
    matches!(proc, NfsProc3::NULL | NfsProc3::GETATTR)
}

/// Whether `proc`, arrived `over` a transport (`None`: in process), has its
/// file-system work run on the async worker thread, without the
/// hand-off to the blocking pool (when [`NfsServer::inline_metadata`]): NULL (no
/// work at all: clients' and monitors' pings), GETATTR, LOOKUP, ACCESS, CREATE and
/// REMOVE, a handful of metadata system calls each that the page and inode caches
/// normally answer in microseconds.
///
/// Why: the hand-off costs more than the work. Per call it took 4 futex calls, an
/// extra epoll_wait and an eventfd write, and about 13 clock reads in tokio (its
/// workers' busy-time and poll-time statistics around each wake-up, the time driver
/// on each park, the pool's idle timeout): 19 clock reads per call in all, against
/// 6 inline (host strace and a clock_gettime counter, `docs/bench/README.md`, "Per-call
/// system calls"). In a guest whose clock source has no vDSO (HPET under TCG) each
/// clock read is a system call too.
///
/// READ over TCP runs there too: its data leaves by
/// `sendfile` from the socket's writer, so its own work is a handle, an open and a
/// statx (lab, kernel client reading 128 MiB over TCP: 194 -> 206 MB/s median,
/// `docs/bench/README.md`, "READ over TCP inline").
///
/// The cost: while such a call blocks, its worker runs nothing else. READ over RDMA, WRITE,
/// COMMIT, READDIR and READDIRPLUS (data, fsync, long directories), SETATTR (a
/// truncation may free a large file's blocks) and the rest stay on the pool. Exports
/// on file systems whose metadata calls may hang (network file systems) want
/// `--no-inline-metadata`, which puts every call on the pool.
pub fn runs_inline(proc: NfsProc3, over: Option<oncrpc::Protocol>) -> bool {
    match proc {
        NfsProc3::NULL
        | NfsProc3::GETATTR
        | NfsProc3::LOOKUP
        | NfsProc3::ACCESS
        | NfsProc3::CREATE
        | NfsProc3::REMOVE => true,
        NfsProc3::READ => over == Some(oncrpc::Protocol::Tcp),
        _ => false,
    }
}
