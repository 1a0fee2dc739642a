//! The NFS version 3 program: exports, the write verifier, handle resolution and the
//! procedure table (RFC 1813 §3). Transport-neutral: [`crate::service::NfsService`]
//! adapts it to an `oncrpc` dispatcher, which TCP and RPC-over-RDMA both feed.

use std::sync::Arc;

use nfs3::attr::*;
use nfs3::dir::*;
use nfs3::fs::*;
use nfs3::io::*;
use nfs3::readdir::*;
use nfs3::{NfsFh3, NfsProc3, NfsStat3, PostOpAttr, WccData, WriteVerf3};
use oncrpc::ServiceError;
use xdr::{Decode, Decoder, Encode, XdrStream};

use crate::creds::{Identity, Policy};
use crate::fh::FileHandle;
use crate::proc;
use crate::vfs::{Export, Meta, Node};

/// Largest READ and WRITE the server accepts (FSINFO `rtmax` / `wtmax`): 1 MiB.
pub const MAX_IO: u32 = 1024 * 1024;

/// One NFSv3 server: its exports and identity policy.
#[derive(Debug)]
pub struct NfsServer {
    exports: Vec<Arc<Export>>,
    /// How callers' AUTH_SYS identities are applied.
    pub policy: Policy,
    /// RFC 1813 §3.3.7: the write verifier, "changed ... when the server crashes and
    /// recovers": here, on every start (start time in nanoseconds and the pid).
    pub verifier: WriteVerf3,
}

impl NfsServer {
    /// A server for `exports`.
    pub fn new(exports: Vec<Arc<Export>>, policy: Policy) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let verifier = (now ^ (u64::from(std::process::id()) << 48)).to_be_bytes();
        NfsServer {
            exports,
            policy,
            verifier,
        }
    }

    /// The exports.
    pub fn exports(&self) -> &[Arc<Export>] {
        &self.exports
    }

    /// Finds the export and object a handle names.
    ///
    /// Malformed handles are NFS3ERR_BADHANDLE; handles of no export of ours (another
    /// server's, a removed export's) and objects not found inside the export are
    /// NFS3ERR_STALE (RFC 1813 §2.6).
    pub fn resolve(&self, fh: &NfsFh3) -> Result<(&Arc<Export>, Node), NfsStat3> {
        let h = FileHandle::from_nfs(fh)?;
        let ex = self
            .exports
            .iter()
            .find(|e| e.id == h.export)
            .ok_or(NfsStat3::NFS3ERR_STALE)?;
        Ok((ex, ex.resolve(&h)?))
    }

    /// Serves one call of procedure `proc` as `id`, on the calling thread (which may
    /// block in file-system calls).
    ///
    /// Arguments that do not decode, or leave bytes over, are GARBAGE_ARGS
    /// (RFC 5531 §9); an unknown procedure is PROC_UNAVAIL.
    pub fn call(
        &self,
        proc: NfsProc3,
        id: &Identity,
        args: Decoder,
    ) -> Result<XdrStream, ServiceError> {
        let cx = Cx { s: self, id };
        match proc {
            NfsProc3::NULL => run(args, |nfs3::Void| nfs3::Void),
            NfsProc3::GETATTR => run(args, |a: GetAttr3Args| proc::attr::getattr(&cx, a)),
            NfsProc3::SETATTR => run(args, |a: SetAttr3Args| proc::attr::setattr(&cx, a)),
            NfsProc3::LOOKUP => run(args, |a: Lookup3Args| proc::names::lookup(&cx, a)),
            NfsProc3::ACCESS => run(args, |a: Access3Args| proc::attr::access(&cx, a)),
            NfsProc3::READLINK => run(args, |a: ReadLink3Args| proc::names::readlink(&cx, a)),
            NfsProc3::READ => run(args, |a: Read3Args| proc::io::read(&cx, a)),
            NfsProc3::WRITE => run(args, |a: Write3Args| proc::io::write(&cx, a)),
            NfsProc3::CREATE => run(args, |a: Create3Args| proc::names::create(&cx, a)),
            NfsProc3::MKDIR => run(args, |a: MkDir3Args| proc::names::mkdir(&cx, a)),
            NfsProc3::SYMLINK => run(args, |a: Symlink3Args| proc::names::symlink(&cx, a)),
            NfsProc3::MKNOD => run(args, |a: Mknod3Args| proc::names::mknod(&cx, a)),
            NfsProc3::REMOVE => run(args, |a: Remove3Args| proc::names::remove(&cx, a, false)),
            NfsProc3::RMDIR => run(args, |a: Remove3Args| proc::names::remove(&cx, a, true)),
            NfsProc3::RENAME => run(args, |a: Rename3Args| proc::names::rename(&cx, a)),
            NfsProc3::LINK => run(args, |a: Link3Args| proc::names::link(&cx, a)),
            NfsProc3::READDIR => run(args, |a: ReadDir3Args| proc::readdir::readdir(&cx, a)),
            NfsProc3::READDIRPLUS => run(args, |a: ReadDirPlus3Args| {
                proc::readdir::readdirplus(&cx, a)
            }),
            NfsProc3::FSSTAT => run(args, |a: FsRootArgs| proc::fsinfo::fsstat(&cx, a)),
            NfsProc3::FSINFO => run(args, |a: FsRootArgs| proc::fsinfo::fsinfo(&cx, a)),
            NfsProc3::PATHCONF => run(args, |a: FsRootArgs| proc::fsinfo::pathconf(&cx, a)),
            NfsProc3::COMMIT => run(args, |a: Commit3Args| proc::io::commit(&cx, a)),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

/// Decodes the whole argument, runs the procedure, encodes its result.
fn run<A: Decode, R: Encode>(
    mut args: Decoder,
    f: impl FnOnce(A) -> R,
) -> Result<XdrStream, ServiceError> {
    let a = A::decode(&mut args)?;
    args.finish()?;
    Ok(f(a).to_xdr())
}

/// What a procedure runs with: the server and the caller's identity.
pub(crate) struct Cx<'a> {
    pub(crate) s: &'a NfsServer,
    pub(crate) id: &'a Identity,
}

impl Cx<'_> {
    /// Runs `f` with the caller's file-system identity.
    pub(crate) fn as_caller<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = crate::creds::AsCaller::enter(&self.s.policy, self.id);
        f()
    }
}

/// `post_op_attr` of a node, freshly read (`None` if it cannot be read).
pub(crate) fn post_op(ex: &Export, node: &Node) -> PostOpAttr {
    node.stat().ok().map(|m| m.fattr(ex.id))
}

/// `wcc_data` from attributes taken before and a fresh look after.
pub(crate) fn wcc(ex: &Export, before: Option<&Meta>, node: &Node) -> WccData {
    WccData {
        before: before.map(Meta::wcc),
        after: post_op(ex, node),
    }
}
