//! NFS version 4 (program 100003) as an [`oncrpc::Service`]: NULL and COMPOUND
//! (RFC 8881 §16). A COMPOUND runs on the blocking pool (its operations may block in
//! the file system and switch the thread's identity, [`crate::creds`]), on the
//! runtime [`Nfs4Service::on`] names if any.

use std::sync::Arc;

use nfs4::{NFSPROC4_COMPOUND, NFSPROC4_NULL};
use oncrpc::{Credentials, Request, Service, ServiceError, ServiceResult};
use xdr::XdrStream;

use super::state::Principal;
use super::Nfs4Server;
use crate::nfs::Caller;

/// NFS version 4 as an RPC service.
#[derive(Debug, Clone)]
pub struct Nfs4Service {
    server: Arc<Nfs4Server>,
    calls: Option<tokio::runtime::Handle>,
}

impl Nfs4Service {
    /// Wraps a server.
    pub fn new(server: Arc<Nfs4Server>) -> Self {
        Nfs4Service {
            server,
            calls: None,
        }
    }

    /// Runs COMPOUNDs on the blocking pool of `handle`'s runtime, never on the thread
    /// that polls the call (NFS/RDMA on a verbs device, whose threads must keep their
    /// identity, as [`crate::NfsService::on`]).
    pub fn on(mut self, handle: tokio::runtime::Handle) -> Self {
        self.calls = Some(handle);
        self
    }
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

    async fn call(&self, req: Request) -> ServiceResult {
        match req.proc_ {
            // RFC 8881 §16.1: NULL takes and returns nothing.
            NFSPROC4_NULL => {
                req.args.finish()?;
                Ok(XdrStream::default())
            }
            NFSPROC4_COMPOUND => {
                let who = principal(&req.cred);
                let caller = Caller::new(req.peer, req.cred);
                let args = req.args;
                let server = self.server.clone();
                let work = move || server.compound(&caller, who, args, std::time::Instant::now());
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
