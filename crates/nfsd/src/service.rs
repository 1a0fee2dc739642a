//! Glue to `oncrpc`: the NFS and MOUNT programs as [`oncrpc::Service`]s.
//!
//! A call's file-system work runs on tokio's blocking pool (one thread per call in
//! flight), where the caller's identity can be switched per thread ([`crate::creds`]).

use std::sync::Arc;

use nfs3::NfsProc3;
use oncrpc::{Request, Service, ServiceError, ServiceResult};

use crate::nfs::{Caller, NfsServer};

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
        let caller = Caller::new(req.peer, &req.cred);
        let args = req.args;
        tokio::task::spawn_blocking(move || server.call(proc, &caller, args))
            .await
            .map_err(|_| ServiceError::SystemErr)?
    }
}
