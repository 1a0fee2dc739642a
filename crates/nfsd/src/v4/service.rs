//! NFS version 4 (program 100003) as an [`oncrpc::Service`]: NULL and COMPOUND
//! (RFC 8881 §16). A COMPOUND is decoded on the thread that read it; one of small
//! metadata operations only (`compound::Decoded::runs_inline`: SEQUENCE, PUTFH,
//! LOOKUP, GETATTR, ACCESS, OPEN, CLOSE, REMOVE, ...) then runs there too, as
//! NFSv3's GETATTR, LOOKUP, ACCESS, CREATE and REMOVE do ([`crate::service`],
//! `NfsServer::inline_metadata`); the others run on the blocking pool (their
//! operations may block in the file system), and with [`Nfs4Service::on`] (NFS/RDMA
//! on a verbs device, whose threads must keep their identity, [`crate::creds`]) the
//! inline ones on its delegate thread, the others on the blocking pool of the
//! runtime it names.

use std::sync::Arc;

use nfs4::{NFSPROC4_COMPOUND, NFSPROC4_NULL};
use oncrpc::{Credentials, Request, Service, ServiceError, ServiceResult};
use xdr::XdrStream;

use super::compound::Decoded;
use super::state::Principal;
use super::Nfs4Server;
use crate::delegate::Delegate;
use crate::nfs::Caller;

/// NFS version 4 as an RPC service.
#[derive(Debug, Clone)]
pub struct Nfs4Service {
    server: Arc<Nfs4Server>,
    calls: Option<tokio::runtime::Handle>,
    /// Where [`Nfs4Service::on`]'s inline COMPOUNDs run instead.
    delegate: Option<Arc<Delegate>>,
}

impl Nfs4Service {
    /// Wraps a server.
    pub fn new(server: Arc<Nfs4Server>) -> Self {
        Nfs4Service {
            server,
            calls: None,
            delegate: None,
        }
    }

    /// Runs COMPOUNDs on the blocking pool of `handle`'s runtime, never on the thread
    /// that polls the call (NFS/RDMA on a verbs device, whose threads must keep their
    /// identity, as [`crate::NfsService::on`]).
    pub fn on(mut self, handle: tokio::runtime::Handle) -> Self {
        self.calls = Some(handle);
        self
    }

    /// With [`Nfs4Service::on`]: the inline COMPOUNDs run on `delegate`'s thread, the
    /// calling thread waiting for them (as [`crate::NfsService::delegating`]).
    pub fn delegating(mut self, delegate: Arc<Delegate>) -> Self {
        self.delegate = Some(delegate);
        self
    }
}

/// An inline COMPOUND on this thread. A panic fails the call with SYSTEM_ERR, as
/// from the blocking pool (the identity guards restore the thread's identity while
/// unwinding).
fn run_inline(
    server: &Nfs4Server,
    caller: &Caller,
    who: Principal,
    decoded: Decoded,
    now: std::time::Instant,
) -> ServiceResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.run_decoded(caller, who, decoded, now)
    }))
    .map_err(|_| ServiceError::SystemErr)
}

/// The principal client records compare (RFC 8881 §18.35.4) for `cred`.
fn principal(cred: &Credentials) -> Principal {
    match cred {
        Credentials::Sys(p) => Principal {
            flavor: nfs4::session::AUTH_SYS,
            uid: p.uid,
            gid: p.gid,
        },
        Credentials::None => Principal::default(),
    }
}

impl Service for Nfs4Service {
    fn procedure_name(&self, _vers: u32, proc_: u32) -> Option<&'static str> {
        match proc_ {
            NFSPROC4_NULL => Some("NULL"),
            NFSPROC4_COMPOUND => Some("COMPOUND"),
            _ => None,
        }
    }

    /// RFC 8267 §5.1: the first WRITE's data (`nfs4::ulb::call_data_item`).
    fn call_data_item(&self, _vers: u32, proc_: u32, args: &[u8]) -> Option<xdr::DataItem> {
        match proc_ {
            NFSPROC4_COMPOUND => nfs4::ulb::call_data_item(args),
            _ => None,
        }
    }

    async fn call(&self, req: Request) -> ServiceResult {
        match req.proc_ {
            // RFC 8881 §16.1: NULL takes and returns nothing.
            NFSPROC4_NULL => {
                req.args.finish()?;
                Ok(XdrStream::default())
            }
            NFSPROC4_COMPOUND => {
                let who = principal(&req.cred);
                let over = req.peer.map(|p| p.protocol);
                let now = req.started;
                let caller = Caller::new(req.peer, req.cred).with_data(req.data);
                let decoded = super::compound::decode(req.args);
                let server = self.server.clone();
                if self.server.nfs.inline_metadata && decoded.runs_inline(over) {
                    match (&self.calls, &self.delegate) {
                        (None, _) => return run_inline(&server, &caller, who, decoded, now),
                        (Some(h), Some(d)) => {
                            // In the runtime's context, as on its blocking pool: a CLOSE
                            // that frees locks an NLM client waits for spawns the
                            // GRANTED callback there (`Nlm::send_granted`).
                            let h = h.clone();
                            return d
                                .run(move || {
                                    let _runtime = h.enter();
                                    run_inline(&server, &caller, who, decoded, now)
                                })
                                .unwrap_or(Err(ServiceError::SystemErr));
                        }
                        (Some(_), None) => {}
                    }
                }
                let work = move || server.run_decoded(&caller, who, decoded, now);
                match &self.calls {
                    None => tokio::task::spawn_blocking(work),
                    Some(h) => h.spawn_blocking(work),
                }
                .await
                .map_err(|_| ServiceError::SystemErr)
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}
