//! Glue to `oncrpc`: the NFS and MOUNT programs as [`oncrpc::Service`]s.
//!
//! A call's file-system work runs on tokio's blocking pool (one thread per call in
//! flight), where the caller's identity can be switched per thread ([`crate::creds`]).

use std::sync::Arc;

use nfs3::NfsProc3;
use oncrpc::{Credentials, Request, Service, ServiceError, ServiceResult};

use crate::creds::Identity;
use crate::nfs::NfsServer;

/// The identity a call acts as, from its credentials and the server's policy.
pub fn identity(server: &NfsServer, cred: &Credentials) -> Identity {
    match cred {
        Credentials::Sys(p) => server.policy.identity(Some((p.uid, p.gid, &p.gids))),
        _ => server.policy.identity(None),
    }
}

/// NFS version 3 (program 100003) as an RPC service.
#[derive(Debug, Clone)]
pub struct NfsService {
    server: Arc<NfsServer>,
}

impl NfsService {
    /// Wraps a server.
    pub fn new(server: Arc<NfsServer>) -> Self {
        NfsService { server }
    }
}

impl Service for NfsService {
    async fn call(&self, req: Request) -> ServiceResult {
        let proc = NfsProc3(req.proc_);
        if proc.name().is_none() {
            return Err(ServiceError::ProcUnavail);
        }
        let server = self.server.clone();
        let id = identity(&server, &req.cred);
        let args = req.args;
        tokio::task::spawn_blocking(move || server.call(proc, &id, args))
            .await
            .map_err(|_| ServiceError::SystemErr)?
    }
}
