//! The NFS version 3 program: exports, the write verifier, handle resolution and the
//! procedure table (RFC 1813 §3). Transport-neutral: [`crate::service::NfsService`]
//! adapts it to an `oncrpc` dispatcher, which TCP and RPC-over-RDMA both feed.

use std::sync::{Arc, RwLock};

use nfs3::attr::*;
use nfs3::dir::*;
use nfs3::fs::*;
use nfs3::io::*;
use nfs3::readdir::*;
use nfs3::{NfsFh3, NfsProc3, NfsStat3, PostOpAttr, WccData, WriteVerf3};
use oncrpc::{Credentials, Gids, Peer, ServiceError};
use xdr::{Decode, Decoder, Encode, XdrStream};

use crate::creds::Identity;
use crate::exports::{Clients, ExportLine, ExportOptions};
use crate::fh::FileHandle;
use crate::proc;
use crate::vfs::{Export, HandleConfig, Meta, Node};

/// Largest READ and WRITE the server accepts (FSINFO `rtmax` / `wtmax`): 1 MiB.
pub const MAX_IO: u32 = 1024 * 1024;

/// An export as served: the open directory and who may use it, how.
#[derive(Debug)]
pub struct Served {
    /// The directory tree.
    pub export: Arc<Export>,
    /// Its clients and their options.
    pub clients: Clients,
}

/// The exports in force. A reload replaces the whole table; a call in flight keeps
/// the one it started with.
#[derive(Debug)]
pub struct Table {
    /// In the order given.
    pub exports: Vec<Served>,
    /// How handles are made and checked (the same across reloads).
    pub handles: HandleConfig,
}

impl Table {
    /// Opens the directories of `lines`, whose handles are made as `handles` says.
    /// Directories `previous` already serves are taken over as they are (their handle
    /// caches survive a reload).
    ///
    /// Fails, naming the path (and line), if a directory cannot be opened or two
    /// lines name the same directory.
    pub fn open(
        lines: &[ExportLine],
        handles: &HandleConfig,
        previous: Option<&Table>,
    ) -> std::io::Result<Table> {
        let mut exports: Vec<Served> = Vec::new();
        for l in lines {
            let at = if l.line > 0 {
                format!(" (line {})", l.line)
            } else {
                String::new()
            };
            let fresh = Export::open(&l.path, handles).map_err(|e| {
                std::io::Error::new(e.kind(), format!("export {}{at}: {e}", l.path.display()))
            })?;
            if let Some(dup) = exports.iter().find(|s| s.export.id == fresh.id) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "export {}{at} is the directory {} again",
                        l.path.display(),
                        dup.export.path.display()
                    ),
                ));
            }
            let export = previous
                .and_then(|t| t.find(fresh.id))
                .filter(|s| s.export.path == fresh.path)
                .map(|s| s.export.clone())
                .unwrap_or_else(|| Arc::new(fresh));
            exports.push(Served {
                export,
                clients: l.clients.clone(),
            });
        }
        Ok(Table {
            exports,
            handles: handles.clone(),
        })
    }

    /// The export with id `id`.
    pub fn find(&self, id: u64) -> Option<&Served> {
        self.exports.iter().find(|s| s.export.id == id)
    }

    /// Decodes and authenticates a handle ([`FileHandle::open`]) under our key.
    pub fn decode(&self, fh: &NfsFh3) -> Result<FileHandle, NfsStat3> {
        FileHandle::open(fh, &self.handles.key)
    }

    /// [`Table::decode`] for `caller`'s call, which keeps its last handle decoded
    /// ([`LastHandle`]): a handle the call names again is not authenticated again.
    pub fn decode_in_call(&self, fh: &NfsFh3, caller: &Caller) -> Result<FileHandle, NfsStat3> {
        caller.last_handle.decode(fh, || self.decode(fh))
    }

    /// Finds the export and object a handle names, for `caller`.
    ///
    /// Handles not in our format are NFS3ERR_BADHANDLE; handles whose MAC does not
    /// verify (forged, altered, another server's or an earlier key's), handles of no
    /// export of ours (a removed export's) and objects no longer there are
    /// NFS3ERR_STALE (RFC 1813 §2.6; [`crate::fh`] says why); a caller the export's
    /// clients do not admit gets NFS3ERR_ACCES. All three are decided before the file
    /// system is touched. Within a COMPOUND's operations that change nothing, an
    /// object they resolved before is taken from `caller.seen` ([`crate::seen`]).
    pub fn resolve(&self, fh: &NfsFh3, caller: &Caller) -> Result<(&Arc<Export>, Node), NfsStat3> {
        let h = self.decode_in_call(fh, caller)?;
        let served = self.find(h.export).ok_or(NfsStat3::NFS3ERR_STALE)?;
        if let Err(why) = served.clients.admit(caller.peer.as_ref()) {
            tracing::debug!(peer = ?caller.peer, export = %served.export.path.display(), ?why, "NFS call refused");
            return Err(NfsStat3::NFS3ERR_ACCES);
        }
        if let Some((_, node)) = caller.seen.node(fh) {
            return Ok((&served.export, node));
        }
        let node = served.export.resolve_in_call(&h, &caller.recent)?;
        caller.seen.keep_node(fh, &served.export, &node);
        Ok((&served.export, node))
    }
}

/// Who makes a call: where it came from and its AUTH_SYS credentials.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The transport's peer (`None`: dispatched in process).
    pub peer: Option<Peer>,
    /// AUTH_SYS uid, gid and groups; `None` for AUTH_NONE.
    pub sys: Option<(u32, u32, Gids)>,
    /// The last file this call opened by handle ([`crate::vfs::RecentFile`]).
    pub recent: crate::vfs::RecentFile,
    /// What this COMPOUND's operations that change nothing last read of an object
    /// ([`crate::seen`]).
    pub seen: crate::seen::Seen,
    /// The last handle this call decoded ([`Table::decode_in_call`]).
    pub last_handle: LastHandle,
    /// The call's WRITE data when the transport received it apart from the call
    /// ([`oncrpc::Request::data`]).
    pub data: CallDataSlot,
}

/// A call's WRITE data received apart ([`oncrpc::tcp::call_data`]: in a pipe, to be
/// spliced into the file), until the WRITE whose data it is takes it. A clone starts
/// empty: the data is written once.
#[derive(Debug, Default)]
pub struct CallDataSlot(std::sync::Mutex<Option<oncrpc::tcp::CallData>>);

impl CallDataSlot {
    /// The data, now the WRITE's.
    pub fn take(&self) -> Option<oncrpc::tcp::CallData> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<oncrpc::tcp::CallData>> {
        // Poisoned only by a panic while held: the state is a plain value.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clone for CallDataSlot {
    fn clone(&self) -> Self {
        CallDataSlot::default()
    }
}

/// The last handle a call decoded and what it decoded to, so that a handle the call
/// names again is not authenticated again: an NFSv4 COMPOUND decodes its current
/// filehandle at PUTFH, for each operation's context ([`Cx::new`]) and to resolve it;
/// an NFSv3 call for its context and to resolve it. The MAC (SipHash-2-4-128 over the
/// handle, [`crate::handle_key`]) costs about 330 instructions; comparing the bytes, a
/// few. A server's handle key is the same for its life ([`Table::handles`]), so the
/// same bytes always decode the same. Only handles that decoded are kept. A clone
/// starts empty, as [`crate::seen::Seen`] does.
#[derive(Debug, Default)]
pub struct LastHandle(std::sync::Mutex<Option<(NfsFh3, FileHandle)>>);

impl LastHandle {
    /// What `fh` decodes to: the kept answer if `fh` is the handle kept, else
    /// `decode`'s (kept if it decoded).
    fn decode(
        &self,
        fh: &NfsFh3,
        decode: impl FnOnce() -> Result<FileHandle, NfsStat3>,
    ) -> Result<FileHandle, NfsStat3> {
        // Poisoned only by a panic while held: the state is a plain value.
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((kept, h)) = &*last {
            if kept.0 == fh.0 {
                return Ok(*h);
            }
        }
        let h = decode()?;
        *last = Some((fh.clone(), h));
        Ok(h)
    }
}

impl Clone for LastHandle {
    fn clone(&self) -> Self {
        LastHandle::default()
    }
}

impl Caller {
    /// The caller of `cred` from `peer` (its groups moved, not copied).
    pub fn new(peer: Option<Peer>, cred: Credentials) -> Caller {
        Caller {
            peer,
            sys: match cred {
                Credentials::Sys(p) => Some((p.uid, p.gid, p.gids)),
                _ => None,
            },
            recent: crate::vfs::RecentFile::default(),
            seen: crate::seen::Seen::default(),
            last_handle: LastHandle::default(),
            data: CallDataSlot::default(),
        }
    }

    /// This caller, with its call's data received apart ([`oncrpc::Request::data`]).
    pub fn with_data(self, data: Option<oncrpc::tcp::CallData>) -> Caller {
        *self.data.lock() = data;
        self
    }

    /// The identity this caller acts as under `options`.
    pub fn identity(&self, options: &ExportOptions) -> Identity {
        options.identity(self.sys)
    }
}

/// One NFSv3 server: its exports and the write verifier.
#[derive(Debug)]
pub struct NfsServer {
    table: RwLock<Arc<Table>>,
    /// Whether callers' identities are applied (the server runs as root).
    pub switching: bool,
    /// Whether the small metadata procedures run on the async worker that received
    /// the call instead of the blocking pool ([`crate::service::runs_inline`] says
    /// which, and why). True unless `--no-inline-metadata`.
    pub inline_metadata: bool,
    /// RFC 1813 §3.3.7: the write verifier, "changed ... when the server crashes and
    /// recovers": here, on every start (start time in nanoseconds and the pid).
    pub verifier: WriteVerf3,
    /// Buffers READ replies are read into, reused across calls (no allocation, page
    /// faults or zero fill per READ) and, over RDMA on a device, sent from the
    /// registration the pool keeps with each buffer (`rdma::pool`). `serve` frees
    /// the idle ones after a quiet period.
    pub read_buffers: rdma::BufferPool,
    /// The server's memory budget (`--max-memory`, [`crate::memory`]), shared with
    /// the NFS/RDMA transport: each READ buffer is charged to it while in use.
    pub memory: std::sync::Arc<rpcrdma::memory::MemoryBudget>,
    /// READs and directory listings refused because their buffer did not fit
    /// [`NfsServer::memory`].
    pub memory_refusals: crate::memory::Refusals,
    /// The duplicate request cache every dispatcher of this server's NFS and NLM
    /// programs keeps (TCP and RDMA: one cache, one bound; [`crate::drc`]); `None`:
    /// none (`--drc-entries 0`).
    pub reply_cache: Option<std::sync::Arc<oncrpc::ReplyCache>>,
    /// Call counts and service times of every program this server's dispatchers
    /// serve, over every transport (`--metrics`, [`crate::metrics`]).
    pub calls: std::sync::Arc<oncrpc::metrics::CallMetrics>,
}

/// Most bytes of idle READ buffers kept for the next calls (a burst of 64 READs of
/// 1 MiB in flight).
pub const MAX_IDLE_READ_BUFFERS: usize = 64 << 20;

impl NfsServer {
    /// A server for the exports of `table`.
    pub fn new(table: Table) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let verifier = (now ^ (u64::from(std::process::id()) << 48)).to_be_bytes();
        NfsServer {
            table: RwLock::new(Arc::new(table)),
            switching: crate::creds::switching(),
            inline_metadata: true,
            verifier,
            read_buffers: rdma::BufferPool::new(MAX_IDLE_READ_BUFFERS),
            memory: rpcrdma::memory::MemoryBudget::new(crate::memory::default_max_memory()),
            memory_refusals: crate::memory::Refusals::new(
                "READs and READDIRs answered NFS3ERR_JUKEBOX",
            ),
            reply_cache: None,
            calls: std::sync::Arc::default(),
        }
    }

    /// The same server, charging its buffers to `budget` (shared with the NFS/RDMA
    /// transport: one budget for the process).
    pub fn with_memory(mut self, budget: std::sync::Arc<rpcrdma::memory::MemoryBudget>) -> Self {
        self.memory = budget;
        self
    }

    /// The same server, with `cache` in front of its NFS and NLM programs
    /// ([`NfsServer::reply_cache`]).
    pub fn with_reply_cache(mut self, cache: std::sync::Arc<oncrpc::ReplyCache>) -> Self {
        self.reply_cache = Some(cache);
        self
    }

    /// A dispatcher with this server's reply cache, if it has one, counting its
    /// calls in [`NfsServer::calls`]: for the NFS and NLM programs.
    pub fn dispatcher(&self) -> oncrpc::Dispatcher {
        let mut d = self.counting_dispatcher();
        if let Some(cache) = &self.reply_cache {
            d.with_reply_cache(cache.clone());
        }
        d
    }

    /// A dispatcher counting its calls in [`NfsServer::calls`], without the reply
    /// cache: for MOUNT and NSM, whose procedures it does not keep.
    pub fn counting_dispatcher(&self) -> oncrpc::Dispatcher {
        let mut d = oncrpc::Dispatcher::new();
        d.with_metrics(self.calls.clone());
        d
    }

    /// Turns the exports' directory descriptor caches over every
    /// [`crate::dir_cache::AGE_PERIOD`], so that an idle server keeps none open.
    pub async fn age_dir_descriptors(self: Arc<Self>) {
        let mut tick = tokio::time::interval(crate::dir_cache::AGE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for served in &self.table().exports {
                served.export.age_descriptors();
            }
        }
    }

    /// The exports in force now.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Serves `lines` from now on (a reload): opens them first, and on any error keeps
    /// the exports in force. Calls in flight finish under the table they started with.
    pub fn reload(&self, lines: &[ExportLine]) -> std::io::Result<()> {
        let current = self.table();
        let table = Table::open(lines, &current.handles, Some(&current))?;
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        Ok(())
    }

    /// Serves one call of procedure `proc` for `caller`, on the calling thread (which
    /// may block in file-system calls).
    ///
    /// Every handle the procedure uses goes through [`Table::resolve`], the access
    /// check. The identity the call acts as and whether it may modify anything come
    /// from the options the caller has on the export of the call's first handle
    /// (every NFSv3 procedure but NULL starts with one, RFC 1813 §3.3); a second
    /// handle (RENAME, LINK) in another export gets NFS3ERR_XDEV anyway.
    ///
    /// Arguments that do not decode, or leave bytes over, are GARBAGE_ARGS
    /// (RFC 5531 §9); an unknown procedure is PROC_UNAVAIL.
    pub fn call(
        &self,
        proc: NfsProc3,
        caller: &Caller,
        args: Decoder,
    ) -> Result<XdrStream, ServiceError> {
        let table = self.table();
        let first = NfsFh3::decode(&mut args.clone()).ok();
        let cx = Cx::new(self, &table, caller, first.as_ref());
        match proc {
            NfsProc3::NULL => run(args, |nfs3::Void| nfs3::Void),
            NfsProc3::GETATTR => run(args, |a: GetAttr3Args| proc::attr::getattr(&cx, a)),
            NfsProc3::SETATTR => run(args, |a: SetAttr3Args| proc::attr::setattr(&cx, a)),
            NfsProc3::LOOKUP => run(args, |a: Lookup3Args| proc::names::lookup(&cx, a)),
            NfsProc3::ACCESS => run(args, |a: Access3Args| proc::attr::access(&cx, a)),
            NfsProc3::READLINK => run(args, |a: ReadLink3Args| proc::names::readlink(&cx, a)),
            NfsProc3::READ => run_encoded(args, |a: Read3Args| proc::io::read(&cx, a)),
            NfsProc3::WRITE => run(args, |a: Write3Args| {
                proc::io::write(&cx, a, cx.take_call_data())
            }),
            NfsProc3::CREATE => run(args, |a: Create3Args| proc::names::create(&cx, a)),
            NfsProc3::MKDIR => run(args, |a: MkDir3Args| proc::names::mkdir(&cx, a)),
            NfsProc3::SYMLINK => run(args, |a: Symlink3Args| proc::names::symlink(&cx, a)),
            NfsProc3::MKNOD => run(args, |a: Mknod3Args| proc::names::mknod(&cx, a)),
            NfsProc3::REMOVE => run(args, |a: Remove3Args| proc::names::remove(&cx, a, false)),
            NfsProc3::RMDIR => run(args, |a: Remove3Args| proc::names::remove(&cx, a, true)),
            NfsProc3::RENAME => run(args, |a: Rename3Args| proc::names::rename(&cx, a)),
            NfsProc3::LINK => run(args, |a: Link3Args| proc::names::link(&cx, a)),
            NfsProc3::READDIR => run_held(args, |a: ReadDir3Args| proc::readdir::readdir(&cx, a)),
            NfsProc3::READDIRPLUS => run_held(args, |a: ReadDirPlus3Args| {
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

/// [`run`] for a procedure whose result was charged to the server's memory budget
/// (READDIR, READDIRPLUS): the result is freed once encoded, the charge lasts as long
/// as the encoded reply, whose bytes hold it.
fn run_held<A: Decode, R: Encode>(
    mut args: Decoder,
    f: impl FnOnce(A) -> (R, Option<rpcrdma::memory::Charge>),
) -> Result<XdrStream, ServiceError> {
    let a = A::decode(&mut args)?;
    args.finish()?;
    let (result, charge) = f(a);
    let mut reply = result.to_xdr();
    drop(result);
    if let Some(charge) = charge {
        hold(&mut reply, charge);
    }
    Ok(reply)
}

/// Makes `reply`'s bytes hold `charge` until the last of them is dropped (a READDIR's
/// charge, NFSv3's or NFSv4's).
pub(crate) fn hold(reply: &mut XdrStream, charge: rpcrdma::memory::Charge) {
    let bytes = std::mem::take(&mut reply.inline);
    reply.inline = xdr::Bytes::from_owner(Charged {
        bytes,
        _charge: charge,
    });
}

/// Bytes that keep a charge to the memory budget until the last of them is dropped.
struct Charged {
    bytes: xdr::Bytes,
    _charge: rpcrdma::memory::Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// [`run`] for a procedure that encodes its own result (READ: its data may be left in
/// the file, [`proc::io::read`]).
fn run_encoded<A: Decode>(
    mut args: Decoder,
    f: impl FnOnce(A) -> XdrStream,
) -> Result<XdrStream, ServiceError> {
    let a = A::decode(&mut args)?;
    args.finish()?;
    Ok(f(a))
}

/// What a procedure runs with: the server, the exports table of this call, the
/// caller, and what the caller may do on the export of the call's first handle.
pub(crate) struct Cx<'a> {
    pub(crate) s: &'a NfsServer,
    table: &'a Table,
    caller: &'a Caller,
    /// The identity the caller acts as.
    pub(crate) id: Identity,
    /// The caller may not modify the export (`ro`): NFS3ERR_ROFS.
    pub(crate) read_only: bool,
    /// The export's directories change only through this server (`nfsd_only`): a
    /// change made under [`Cx::lock_dirs`] is atomic with its looks before and after.
    pub(crate) nfsd_only: bool,
}

impl<'a> Cx<'a> {
    /// The call's WRITE data received apart, if any and not taken yet.
    pub(crate) fn take_call_data(&self) -> Option<oncrpc::tcp::CallData> {
        self.caller.data.take()
    }

    /// The context of a call of `caller` whose first handle is `first`: the identity
    /// and write permission come from the options the caller has on that handle's
    /// export. A first handle that is missing, malformed, stale or refused leaves the
    /// anonymous, read-only defaults: the procedure then fails resolving it, with its
    /// status. NFSv3 calls take their first argument's handle; NFSv4 operations the
    /// current filehandle ([`crate::v4`]).
    pub(crate) fn new(
        s: &'a NfsServer,
        table: &'a Table,
        caller: &'a Caller,
        first: Option<&NfsFh3>,
    ) -> Cx<'a> {
        let options = first
            .and_then(|fh| table.decode_in_call(fh, caller).ok())
            .and_then(|h| table.find(h.export))
            .and_then(|s| s.clients.admit(caller.peer.as_ref()).ok().copied())
            .unwrap_or_default();
        Cx {
            s,
            table,
            caller,
            id: caller.identity(&options),
            read_only: options.read_only,
            nfsd_only: options.nfsd_only,
        }
    }

    /// Locks the directory of handle `dir` and, for RENAME, of `other` against other
    /// changes made through this server ([`crate::dir_locks`]), before either is
    /// resolved, so that the look before the change is taken under the lock. `None`
    /// when `dir` does not decode: the procedure then fails resolving it.
    pub(crate) fn lock_dirs(
        &self,
        dir: &NfsFh3,
        other: Option<&NfsFh3>,
    ) -> Option<crate::dir_locks::Held> {
        let ino = |fh| {
            let h = self.table.decode_in_call(fh, self.caller).ok()?;
            Some(h.object.ino())
        };
        let a = ino(dir)?;
        Some(match other.and_then(ino) {
            Some(b) => crate::dir_locks::lock_two(a, b),
            None => crate::dir_locks::lock_one(a),
        })
    }

    /// Runs `f` with the caller's file-system identity.
    pub(crate) fn as_caller<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = crate::creds::AsCaller::enter(self.s.switching, &self.id);
        f()
    }

    /// What the call's COMPOUND last read of an object ([`crate::seen`]).
    pub(crate) fn seen(&self) -> &crate::seen::Seen {
        &self.caller.seen
    }

    /// True when the call came over a byte-stream transport (TCP), whose writer sends
    /// data left in a file ([`xdr::FileRange`]) from the page cache; RPC-over-RDMA and
    /// in-process calls get data in memory.
    pub(crate) fn byte_stream(&self) -> bool {
        self.caller
            .peer
            .is_some_and(|p| p.protocol == oncrpc::Protocol::Tcp)
    }

    /// The export and object `fh` names, if the caller may use that export: every
    /// procedure resolves every handle here ([`Table::resolve`]).
    pub(crate) fn resolve(&self, fh: &NfsFh3) -> Result<(&Arc<Export>, Node), NfsStat3> {
        self.table.resolve(fh, self.caller)
    }
}

/// `post_op_attr` of a node, freshly read (`None` if it cannot be read).
pub(crate) fn post_op(ex: &Export, node: &Node) -> PostOpAttr {
    node.stat().ok().map(|m| m.fattr(ex.id))
}

/// `post_op_attr` of a node as read when its handle was resolved, in this call: for
/// procedures that change nothing (LOOKUP's directory, ACCESS's object; GETATTR
/// answers with the same), where a fresh statx would only differ by a concurrent
/// change, and cost a system call per call.
pub(crate) fn resolved_attr(ex: &Export, node: &Node) -> PostOpAttr {
    Some(node.meta.fattr(ex.id))
}

/// `wcc_data` from attributes taken before and a fresh look after.
pub(crate) fn wcc(ex: &Export, before: Option<&Meta>, node: &Node) -> WccData {
    WccData {
        before: before.map(Meta::wcc),
        after: post_op(ex, node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fh::{Key, Object};
    use crate::handle_key::HandleKey;

    /// A handle named again is not decoded again; any other bytes are, a forged
    /// MAC included, and a handle that failed is not kept.
    #[test]
    fn the_last_handle_is_decoded_once_and_only_its_exact_bytes_reuse_it() {
        let key = HandleKey::from_bytes(&[0x5a; 32]);
        let h = |ino| FileHandle {
            export: 1,
            object: Object::Inode {
                key: Key { dev: 2, ino },
                gen: 4,
            },
        };
        let (a, b) = (h(3).seal(&key), h(5).seal(&key));
        let mut forged = a.0.to_vec();
        *forged.last_mut().unwrap() ^= 1;
        let forged = NfsFh3(forged.into());
        let last = LastHandle::default();
        let decodes = std::cell::Cell::new(0);
        let decode = |fh: &NfsFh3| {
            last.decode(fh, || {
                decodes.set(decodes.get() + 1);
                FileHandle::open(fh, &key)
            })
        };
        assert_eq!(decode(&a), Ok(h(3)));
        assert_eq!(decode(&a), Ok(h(3)));
        assert_eq!(decodes.get(), 1);
        assert_eq!(decode(&forged), Err(NfsStat3::NFS3ERR_STALE));
        assert_eq!(decode(&forged), Err(NfsStat3::NFS3ERR_STALE));
        assert_eq!(
            decodes.get(),
            3,
            "a handle that failed is decoded each time"
        );
        assert_eq!(decode(&a), Ok(h(3)), "still kept after a failure");
        assert_eq!(decodes.get(), 3);
        assert_eq!(decode(&b), Ok(h(5)));
        assert_eq!(decode(&a), Ok(h(3)));
        assert_eq!(decodes.get(), 5);
    }
}
