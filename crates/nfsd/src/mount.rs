//! The MOUNT version 3 program (RFC 1813 Appendix I): hands out export root handles.
//!
//! MNT accepts an export's path, or a directory below it (as Linux `mountd` does);
//! the path below the export is walked one checked component at a time, like LOOKUP.

use std::sync::{Arc, Mutex};

use nfs3::mount::*;
use oncrpc::{Peer, Request, Service, ServiceError, ServiceResult};
use xdr::{Bytes, Decode, Decoder, Encode};

use crate::exports::Denied;
use crate::nfs::NfsServer;
use crate::vfs::{check_name, NameUse};

/// AUTH_SYS, then AUTH_NONE: the flavors MNT offers (RFC 5531 flavor numbers).
const AUTH_FLAVORS: [u32; 2] = [1, 0];

/// MOUNT version 3 (program 100005) as an RPC service.
#[derive(Debug)]
pub struct MountService {
    server: Arc<NfsServer>,
    /// DUMP's answer: (client host name, directory) of MNT calls not yet UMNTed.
    mounts: Mutex<Vec<(Bytes, Bytes)>>,
}

impl MountService {
    /// The MOUNT program for a server's exports.
    pub fn new(server: Arc<NfsServer>) -> Self {
        MountService {
            server,
            mounts: Mutex::new(Vec::new()),
        }
    }

    fn mounts(&self) -> std::sync::MutexGuard<'_, Vec<(Bytes, Bytes)>> {
        self.mounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// MNT: the handle of `path`, an export or a directory inside one (of the
    /// deepest export that holds it), if the export's clients admit `peer`
    /// (MNT3ERR_ACCES otherwise, as Linux mountd answers).
    pub fn mnt(&self, path: &[u8], peer: Option<&Peer>) -> MountRes3 {
        let table = self.server.table();
        let trimmed = trim_slashes(path);
        let found = table
            .exports
            .iter()
            .filter_map(|s| {
                let root = trim_slashes(s.export.path.as_os_str().as_encoded_bytes());
                let rest = if trimmed == root {
                    &b""[..]
                } else if root == b"/" && trimmed.starts_with(b"/") {
                    &trimmed[1..]
                } else if trimmed.starts_with(root) && trimmed.get(root.len()) == Some(&b'/') {
                    &trimmed[root.len() + 1..]
                } else {
                    return None;
                };
                Some((root.len(), s, rest))
            })
            .max_by_key(|(len, ..)| *len);
        let Some((_, served, rest)) = found else {
            return MountRes3::Fail(MountStat3::MNT3ERR_NOENT);
        };
        if let Err(why) = served.clients.admit(peer) {
            // As Linux mountd logs "refused mount request from ...": an admin's first
            // clue when a client cannot mount.
            let from = peer.map_or("a caller with no address".to_string(), |p| {
                p.addr.to_string()
            });
            tracing::warn!(
                "refused mount request from {from} for {}: {}",
                served.export.path.display(),
                match why {
                    Denied::NotListed => "no client entry matches",
                    Denied::InsecurePort => "source port not below 1024 (export is `secure`)",
                }
            );
            return MountRes3::Fail(MountStat3::MNT3ERR_ACCES);
        }
        let ex = &served.export;
        let mut node = match ex.root() {
            Ok(n) => n,
            Err(_) => return MountRes3::Fail(MountStat3::MNT3ERR_IO),
        };
        for comp in rest.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            let Ok(name) = check_name(comp, NameUse::Create) else {
                return MountRes3::Fail(MountStat3::MNT3ERR_NOENT);
            };
            node = match ex.child(&node, name) {
                Ok(n) => n,
                Err(_) => return MountRes3::Fail(MountStat3::MNT3ERR_NOENT),
            };
        }
        if !node.meta.is_dir() {
            return MountRes3::Fail(MountStat3::MNT3ERR_NOTDIR);
        }
        MountRes3::Ok {
            fhandle: ex.handle(&node).0,
            auth_flavors: AUTH_FLAVORS.to_vec(),
        }
    }

    /// EXPORT: every export and its clients as written (`showmount -e` prints them).
    pub fn exports(&self) -> Exports {
        Exports(
            self.server
                .table()
                .exports
                .iter()
                .map(|s| ExportNode {
                    ex_dir: DirPath(Bytes::copy_from_slice(
                        s.export.path.as_os_str().as_encoded_bytes(),
                    )),
                    ex_groups: s
                        .clients
                        .0
                        .iter()
                        .map(|r| MntName(Bytes::copy_from_slice(r.name.as_bytes())))
                        .collect(),
                })
                .collect(),
        )
    }
}

fn trim_slashes(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.ends_with(b"/") {
        p = &p[..p.len() - 1];
    }
    p
}

fn run<A: Decode, R: Encode>(mut args: Decoder, f: impl FnOnce(A) -> R) -> ServiceResult {
    let a = A::decode(&mut args)?;
    args.finish()?;
    Ok(f(a).to_xdr())
}

impl Service for MountService {
    fn procedure_name(&self, _vers: u32, proc_: u32) -> Option<&'static str> {
        MountProc3(proc_).name()
    }

    async fn call(&self, req: Request) -> ServiceResult {
        let host = match &req.cred {
            oncrpc::Credentials::Sys(p) => p.machinename.clone(),
            _ => Bytes::from_static(b"unknown"),
        };
        match MountProc3(req.proc_) {
            MountProc3::NULL => run(req.args, |nfs3::Void| nfs3::Void),
            MountProc3::MNT => {
                let mut args = req.args;
                let path = DirPath::decode(&mut args)?;
                args.finish()?;
                let res = self.mnt(&path.0, req.peer.as_ref());
                if matches!(res, MountRes3::Ok { .. }) {
                    self.mounts().push((host, path.0));
                }
                Ok(res.to_xdr())
            }
            MountProc3::DUMP => run(req.args, |nfs3::Void| {
                MountList(
                    self.mounts()
                        .iter()
                        .map(|(h, d)| MountBody {
                            ml_hostname: MntName(h.clone()),
                            ml_directory: DirPath(d.clone()),
                        })
                        .collect(),
                )
            }),
            MountProc3::UMNT => run(req.args, |path: DirPath| {
                self.mounts().retain(|(h, d)| !(h == &host && d == &path.0));
                nfs3::Void
            }),
            MountProc3::UMNTALL => run(req.args, |nfs3::Void| {
                self.mounts().retain(|(h, _)| h != &host);
                nfs3::Void
            }),
            MountProc3::EXPORT => run(req.args, |nfs3::Void| self.exports()),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}
