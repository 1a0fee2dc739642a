//! File-system access confined to an export.
//!
//! Every object is reached from the export's root directory descriptor one name at a
//! time with `openat(parent, name, O_PATH | O_NOFOLLOW)`, where `name` is a single
//! component that is never `.`, `..`, empty, or contains `/` or NUL ([`check_name`]).
//! So no path walk can leave the export: `..` is never resolved by the kernel from a
//! client name, a symbolic link is never followed (O_NOFOLLOW on the last and only
//! component), and a symlink swapped in for a directory cannot redirect us.
//!
//! File handles ([`crate::fh`]) carry a MAC under the server's key, checked before
//! anything here runs, so every handle we resolve is one we issued for an object of
//! this export. Most carry the kernel's own handle of the object (`name_to_handle_at`),
//! which [`Export::resolve`] opens with `open_by_handle_at` on the export root's
//! mount: constant time, however large the export and whether or not the server has
//! seen the object since it started. A directory opened so is then checked to still
//! lie inside the export by walking its `..` up to the export root (cost: its depth),
//! so a directory moved out of the export is NFS3ERR_STALE and nothing outside is
//! listed or reached through one; a file moved out of the export stays reachable by
//! the handles issued while it was inside, as with knfsd's default `no_subtree_check`
//! (it leads nowhere else). An object that is gone is ESTALE from the kernel (the
//! handle holds the inode's generation), and one with no links left is stale too.
//!
//! The fallback, for a server that may not open by handle (it needs
//! CAP_DAC_READ_SEARCH, i.e. root: `open_by_handle_at` is EPERM otherwise) and for
//! inode-kind handles (file systems without handle support, mounts inside the
//! export): we keep, per export, the name under which each inode was last seen
//! (`links`: inode -> parent inode + name) and re-walk from the root, checking device,
//! inode and generation (for kernel-kind handles: the kernel handle of what we found)
//! at the end. A handle we do not know (after a restart) triggers a breadth-first
//! search of the export that fills `links`; an inode that is not found inside the
//! export is NFS3ERR_STALE. Handles therefore survive restarts either way.
//!
//! DoS bound: forged handles never get here (their MAC fails). Searches run one at a
//! time, and after a search that found nothing no other starts for a second, so
//! handles of removed objects cost at most one walk of the export per second on the
//! fallback (and are then NFS3ERR_STALE at once). Handles of existing objects whose
//! names aged out of `links` each cost a search that ends where the object is found;
//! searches still run one at a time, so they occupy one thread at most.
//!
//! Implementation limits: `links` holds the most recently used names only
//! ([`crate::links`]: two generations of 100,000 entries at most), so a client
//! cannot grow it without bound; a handle whose name fell out is found by a search
//! again; a search after a restart costs one pass over the export tree; a file
//! system mounted inside the export is served, but inode numbers are only unique per
//! device (fileid clashes across such mounts are possible).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nfs3::{Fattr3, Ftype3, NfsFh3, NfsStat3, NfsTime3, SpecData3, WccAttr};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Statx, StatxFlags, CWD};

use crate::dir_cache::DirCache;
use crate::errno::OrStat;
use crate::fh::{export_id, FileHandle, Key, Object, SmallKernelHandle};
use crate::handle_key::HandleKey;
use crate::kernel_fh;
use crate::known_handles::KnownHandles;
use crate::links::{Link, Links};

/// Longest name component we accept (Linux NAME_MAX).
pub const NAME_MAX: usize = 255;

/// Longest symbolic link target we store, terminating NUL included (Linux PATH_MAX).
pub const PATH_MAX: usize = 4096;

/// After a search of the export that found nothing, no new search starts for this
/// long: a stream of forged handles costs at most one walk of the export per period.
const SEARCH_BACKOFF: Duration = Duration::from_secs(1);

/// Deepest directory nesting a handle may be resolved through.
const MAX_DEPTH: usize = 4096;

/// Levels [`Export::inside`] checks by statx of a `../..` path before it opens
/// directories one at a time (the path stays well under PATH_MAX).
const SHORT_WALK: usize = 32;

/// How a name is going to be used, for [`check_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameUse {
    /// LOOKUP: `.` and `..` are legal and handled by the caller.
    Lookup,
    /// CREATE, MKDIR, SYMLINK, MKNOD, LINK, RENAME target: makes a new entry.
    Create,
    /// REMOVE, RMDIR, RENAME source: removes an entry.
    Remove,
}

/// Checks one name component from a client.
///
/// - over [`NAME_MAX`] bytes: NFS3ERR_NAMETOOLONG (RFC 1813 §2.6);
/// - empty, or containing `/` or NUL: NFS3ERR_ACCES, as Linux knfsd answers
///   (`lookup_one_len`), since such a name can never be a single component;
/// - `.` or `..` where an entry is made: NFS3ERR_EXIST; where one is removed:
///   NFS3ERR_INVAL (RFC 1813 §3.3.13: RMDIR of "." is NFS3ERR_INVAL).
pub fn check_name(name: &[u8], usage: NameUse) -> Result<&[u8], NfsStat3> {
    if name.len() > NAME_MAX {
        return Err(NfsStat3::NFS3ERR_NAMETOOLONG);
    }
    if name.is_empty() || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(NfsStat3::NFS3ERR_ACCES);
    }
    if name == b"." || name == b".." {
        return match usage {
            NameUse::Lookup => Ok(name),
            NameUse::Create => Err(NfsStat3::NFS3ERR_EXIST),
            NameUse::Remove => Err(NfsStat3::NFS3ERR_INVAL),
        };
    }
    Ok(name)
}

/// Attributes of one object, as statx reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Device and inode.
    pub key: Key,
    /// Generation (birth time), 0 if unknown.
    pub gen: u64,
    /// `st_mode`, type bits included.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Device numbers of a special file.
    pub rdev: (u32, u32),
    /// Access time.
    pub atime: NfsTime3,
    /// Modification time.
    pub mtime: NfsTime3,
    /// Change time.
    pub ctime: NfsTime3,
}

fn nfstime(t: &rustix::fs::StatxTimestamp) -> NfsTime3 {
    NfsTime3 {
        seconds: u32::try_from(t.tv_sec.max(0)).unwrap_or(u32::MAX),
        nseconds: t.tv_nsec,
    }
}

impl Meta {
    fn from_statx(s: &Statx) -> Self {
        let gen = if StatxFlags::from_bits_retain(s.stx_mask).contains(StatxFlags::BTIME) {
            ((s.stx_btime.tv_sec as u64) << 30) ^ u64::from(s.stx_btime.tv_nsec)
        } else {
            0
        };
        Meta {
            key: Key {
                dev: (u64::from(s.stx_dev_major) << 32) | u64::from(s.stx_dev_minor),
                ino: s.stx_ino,
            },
            gen,
            mode: u32::from(s.stx_mode),
            nlink: s.stx_nlink,
            uid: s.stx_uid,
            gid: s.stx_gid,
            size: s.stx_size,
            blocks: s.stx_blocks,
            rdev: (s.stx_rdev_major, s.stx_rdev_minor),
            atime: nfstime(&s.stx_atime),
            mtime: nfstime(&s.stx_mtime),
            ctime: nfstime(&s.stx_ctime),
        }
    }

    /// The object's type.
    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode as _)
    }

    /// RFC 1813 §2.6 `ftype3` of the object.
    pub fn ftype(&self) -> Ftype3 {
        match self.file_type() {
            FileType::RegularFile => Ftype3::NF3REG,
            FileType::Directory => Ftype3::NF3DIR,
            FileType::BlockDevice => Ftype3::NF3BLK,
            FileType::CharacterDevice => Ftype3::NF3CHR,
            FileType::Symlink => Ftype3::NF3LNK,
            FileType::Socket => Ftype3::NF3SOCK,
            FileType::Fifo => Ftype3::NF3FIFO,
            FileType::Unknown => Ftype3::NF3REG,
        }
    }

    /// Is it a directory?
    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    /// RFC 1813 §2.6 `fattr3`, with `fsid` the export's id.
    pub fn fattr(&self, fsid: u64) -> Fattr3 {
        Fattr3 {
            ftype: self.ftype(),
            mode: self.mode & 0o7777,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            used: self.blocks.saturating_mul(512),
            rdev: SpecData3 {
                specdata1: self.rdev.0,
                specdata2: self.rdev.1,
            },
            fsid,
            fileid: self.key.ino,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }

    /// RFC 1813 §2.6 `wcc_attr`.
    pub fn wcc(&self) -> WccAttr {
        WccAttr {
            size: self.size,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }
}

/// statx of an open descriptor (O_PATH ones included).
pub fn stat_fd(fd: impl AsFd) -> Result<Meta, NfsStat3> {
    let s = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
    .or_stat()?;
    Ok(Meta::from_statx(&s))
}

/// The last file (not a directory: those the export's [`DirCache`] keeps) that one
/// call opened by handle, kept until the call ends. An NFSv4.1 COMPOUND names the
/// same file in several operations (OPEN's permission check, then ACCESS and
/// GETATTR, as the Linux client's OPEN sends them), and each would open it by
/// handle and close it again: two system calls each time, where the kept
/// descriptor needs none. Each use checks it again as a kept directory's is
/// (fresh attributes; a file unlinked since is stale), so a call sees what it
/// would have seen opening it anew. Held by the call's [`crate::nfs::Caller`]; a
/// clone starts empty.
#[derive(Debug, Default)]
pub struct RecentFile(Mutex<Option<(u64, SmallKernelHandle, Arc<OwnedFd>)>>);

impl RecentFile {
    /// The descriptor kept for `handle` of export `export`, if it is the one.
    fn get(&self, export: u64, handle: &SmallKernelHandle) -> Option<Arc<OwnedFd>> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &*kept {
            Some((e, h, fd)) if *e == export && h == handle => Some(fd.clone()),
            _ => None,
        }
    }

    /// Keeps `fd`, opened for `handle` of export `export`, instead of the one before.
    fn keep(&self, export: u64, handle: SmallKernelHandle, fd: Arc<OwnedFd>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((export, handle, fd));
    }
}

impl Clone for RecentFile {
    fn clone(&self) -> Self {
        RecentFile::default()
    }
}

/// An object of the export, open as an O_PATH descriptor. A clone shares the
/// descriptors.
#[derive(Debug, Clone)]
pub struct Node {
    /// O_PATH descriptor: names the inode, gives no read or write access. Shared with
    /// the export's root or its [`DirCache`] where it came from there.
    pub fd: Arc<OwnedFd>,
    /// Its attributes when it was opened.
    pub meta: Meta,
    /// Parent directory (O_PATH) and name, except for the export root.
    pub at: Option<(Arc<OwnedFd>, Vec<u8>)>,
}

impl Node {
    /// `/proc/self/fd/N` for this descriptor: the way to apply path-only calls
    /// (chmod, utimes, truncate, link) to exactly this inode without a path walk.
    pub fn proc_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Re-opens the object with real access (`O_RDONLY`, `O_WRONLY`, ...), checking
    /// that it is still the same inode. Never follows a symbolic link.
    pub fn reopen(&self, flags: OFlags) -> Result<OwnedFd, NfsStat3> {
        self.reopen_stat(flags).map(|(fd, _)| fd)
    }

    /// [`Node::reopen`], with the attributes of the opened file read by the check.
    pub fn reopen_stat(&self, flags: OFlags) -> Result<(OwnedFd, Meta), NfsStat3> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = match &self.at {
            Some((parent, name)) => rustix::fs::openat(
                parent,
                name.as_slice(),
                flags | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .or_stat()?,
            // The root, or an object opened by handle (no name known): through
            // /proc/self/fd/N, which reaches exactly this inode with no path walk (the
            // kernel refuses to open a symbolic link's inode there, ELOOP).
            None => rustix::fs::openat(CWD, self.proc_path(), flags, Mode::empty()).or_stat()?,
        };
        let meta = stat_fd(&fd)?;
        if meta.key != self.meta.key {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        Ok((fd, meta))
    }

    /// Whether the thread's file-system identity may access this object with `mode`
    /// (`faccessat` with `AT_EACCESS`): by its descriptor where the kernel can
    /// ([`crate::faccess`]), else by [`Node::proc_path`].
    pub fn access(&self, mode: rustix::fs::Access) -> Result<(), rustix::io::Errno> {
        match crate::faccess::by_descriptor(self.fd.as_fd(), mode) {
            Some(answer) => answer,
            None => rustix::fs::accessat(CWD, self.proc_path(), mode, AtFlags::EACCESS),
        }
    }

    /// Fresh attributes.
    pub fn stat(&self) -> Result<Meta, NfsStat3> {
        stat_fd(&self.fd)
    }
}

/// Whether exports use the kernel's file handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelHandles {
    /// Kernel-kind handles wherever the file system makes them, opened by handle when
    /// the server may (root), else found by searching the export.
    #[default]
    Auto,
    /// Kernel-kind handles, never opened by handle: as a server without
    /// CAP_DAC_READ_SEARCH would (tests and benchmarks of the fallback as root).
    NoOpen,
    /// Inode-kind handles only: as on a file system without handle support (tests
    /// and benchmarks of the fallback).
    Off,
}

/// How the server makes and checks file handles.
#[derive(Debug, Clone)]
pub struct HandleConfig {
    /// The key of the handles' MAC; [`HandleKey::load_or_create`] keeps it across
    /// restarts.
    pub key: Arc<HandleKey>,
    /// Whether kernel handles are used.
    pub kernel: KernelHandles,
    /// Directory descriptors kept open per export ([`DirCache`]); 0 keeps none.
    pub dir_descriptors: usize,
}

impl HandleConfig {
    /// Kernel handles where possible, MACs under `key`.
    pub fn new(key: HandleKey) -> HandleConfig {
        HandleConfig {
            key: Arc::new(key),
            kernel: KernelHandles::Auto,
            dir_descriptors: crate::dir_cache::DEFAULT_CAPACITY,
        }
    }

    /// A random key for this process only: handles do not survive a restart.
    pub fn ephemeral() -> std::io::Result<HandleConfig> {
        Ok(HandleConfig::new(HandleKey::ephemeral()?))
    }
}

/// How an export resolves handles, as found when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleMode {
    /// Kernel handles, opened by handle: constant time.
    OpenByHandle,
    /// Kernel handles, found by searching the export after a restart (why).
    KernelSearch(String),
    /// Inode handles, found by searching the export after a restart (why).
    InodeSearch(String),
}

impl std::fmt::Display for HandleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandleMode::OpenByHandle => f.write_str("kernel file handles (open_by_handle_at)"),
            HandleMode::KernelSearch(why) => write!(
                f,
                "kernel file handles, found by searching the export after a restart ({why})"
            ),
            HandleMode::InodeSearch(why) => write!(
                f,
                "inode file handles, found by searching the export after a restart ({why})"
            ),
        }
    }
}

/// What an export needs for kernel-kind handles.
#[derive(Debug)]
struct KernelSide {
    /// The mount the export root is on: objects reached through another mount get
    /// inode-kind handles.
    mount_id: i32,
    /// A non-O_PATH descriptor of the root for `open_by_handle_at`, if the server may
    /// open by handle.
    mount_fd: Option<OwnedFd>,
}

/// One exported directory tree.
#[derive(Debug)]
pub struct Export {
    /// Export id (in handles and as `fsid`).
    pub id: u64,
    /// The directory as given on the command line (canonical).
    pub path: PathBuf,
    /// How handles are resolved here.
    pub mode: HandleMode,
    key: Arc<HandleKey>,
    kernel: Option<KernelSide>,
    root: Arc<OwnedFd>,
    root_meta: Meta,
    /// Directories opened by handle, kept open.
    dirs: DirCache,
    links: Mutex<Links>,
    /// What handles of objects had open name, by device, inode and birth time.
    known: Mutex<KnownHandles>,
    /// Serializes searches; holds when the last search that found nothing ended.
    search: Mutex<Option<Instant>>,
    /// Searches of the export so far.
    searches: AtomicU64,
}

impl Export {
    /// Opens `path` as an export, its handles made as `handles` says. Whether the
    /// file system makes kernel handles, and whether the server may open them, is
    /// tried on the root here ([`Export::mode`]).
    pub fn open(path: &Path, handles: &HandleConfig) -> std::io::Result<Export> {
        let path = path.canonicalize()?;
        let root = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let root_meta = stat_fd(&root)
            .map_err(|s| std::io::Error::other(format!("stat {}: {s:?}", path.display())))?;
        let (kernel, mode) = Self::probe(&path, &root, handles.kernel);
        Ok(Export {
            id: export_id(root_meta.key),
            path,
            mode,
            key: handles.key.clone(),
            kernel,
            root: Arc::new(root),
            root_meta,
            dirs: DirCache::new(handles.dir_descriptors),
            links: Mutex::new(Links::default()),
            known: Mutex::new(KnownHandles::default()),
            search: Mutex::new(None),
            searches: AtomicU64::new(0),
        })
    }

    /// Can the root's file system make kernel handles, and can we open them?
    fn probe(path: &Path, root: &OwnedFd, want: KernelHandles) -> (Option<KernelSide>, HandleMode) {
        if want == KernelHandles::Off {
            return (None, HandleMode::InodeSearch("kernel handles off".into()));
        }
        let (handle, mount_id) = match kernel_fh::name_to_handle(root) {
            Ok(h) => h,
            Err(e) => {
                return (
                    None,
                    HandleMode::InodeSearch(format!("name_to_handle_at: {e}")),
                )
            }
        };
        if SmallKernelHandle::new(handle.handle_type, &handle.bytes).is_none() {
            let why = format!(
                "the file system's handles ({} bytes, type {}) do not fit ours",
                handle.bytes.len(),
                handle.handle_type
            );
            return (None, HandleMode::InodeSearch(why));
        }
        let side = |mount_fd| Some(KernelSide { mount_id, mount_fd });
        if want == KernelHandles::NoOpen {
            return (
                side(None),
                HandleMode::KernelSearch("opening by handle off".into()),
            );
        }
        let opened = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .and_then(|fd| kernel_fh::open_by_handle(&fd, &handle, OFlags::PATH).map(|_| fd));
        match opened {
            Ok(fd) => (side(Some(fd)), HandleMode::OpenByHandle),
            Err(e) => {
                let why = if e.raw_os_error() == Some(libc::EPERM) {
                    format!("open_by_handle_at: {e}: it needs CAP_DAC_READ_SEARCH (root)")
                } else {
                    format!("open_by_handle_at: {e}")
                };
                (side(None), HandleMode::KernelSearch(why))
            }
        }
    }

    /// What a handle of `node` names: its kernel handle where it has one that fits
    /// and is on the export root's mount, else device, inode and generation.
    /// Kept in [`KnownHandles`], and taken from there the next time.
    fn object(&self, node: &Node) -> Object {
        self.known_or_ask(&node.meta, || {
            self.kernel
                .as_ref()
                .and_then(|_| kernel_fh::name_to_handle(&node.fd).ok())
        })
    }

    /// What a handle of entry `name` of `dir`, whose `statx` gave `meta`, names: known
    /// if seen before ([`KnownHandles`]), else from its kernel handle read by its
    /// name, and kept (a name replaced between the two calls: the module docs of
    /// [`crate::known_handles`]).
    fn object_named(&self, dir: &Node, name: &[u8], meta: &Meta) -> Object {
        self.known_or_ask(meta, || self.kernel_handle_in(dir, name))
    }

    /// What a handle of the object with attributes `meta` names: known
    /// ([`KnownHandles`]), or made from the kernel handle `ask` gets, and kept.
    fn known_or_ask(
        &self,
        meta: &Meta,
        ask: impl FnOnce() -> Option<(kernel_fh::KernelHandle, i32)>,
    ) -> Object {
        if let Some(object) = self.known().get(meta.key, meta.gen) {
            return object;
        }
        let object = self.object_of(meta, ask());
        self.known().keep(meta.key, meta.gen, object);
        object
    }

    fn known(&self) -> std::sync::MutexGuard<'_, KnownHandles> {
        // Poisoned only by a panic while held: the map is plain values.
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// As [`Export::object`], from the object's attributes and the kernel handle
    /// already asked for it (None when there is none or none was asked for).
    fn object_of(&self, meta: &Meta, kernel: Option<(kernel_fh::KernelHandle, i32)>) -> Object {
        if let (Some(k), Some((h, mount_id))) = (&self.kernel, kernel) {
            if let (true, Some(handle)) = (
                mount_id == k.mount_id,
                SmallKernelHandle::new(h.handle_type, &h.bytes),
            ) {
                return Object::Kernel {
                    ino: meta.key.ino,
                    handle,
                };
            }
        }
        Object::Inode {
            key: meta.key,
            gen: meta.gen,
        }
    }

    /// The handle of an object of this export, decoded.
    pub fn file_handle(&self, node: &Node) -> FileHandle {
        FileHandle {
            export: self.id,
            object: self.object(node),
        }
    }

    /// The handle of an object of this export, as sent to clients.
    pub fn handle(&self, node: &Node) -> NfsFh3 {
        self.file_handle(node).seal(&self.key)
    }

    /// Closes the directory descriptors not used since the last call
    /// ([`DirCache::age`]), and lets go of the known handles while no call uses them
    /// ([`KnownHandles::age_if_unused`]).
    pub fn age_descriptors(&self) {
        self.dirs.age();
        self.known().age_if_unused();
    }

    /// How many directory descriptors are kept open ([`DirCache`]).
    pub fn kept_descriptors(&self) -> usize {
        self.dirs.len()
    }

    /// How many searches of the export have run (each costs a walk of the export;
    /// none should, with kernel handles opened by handle).
    pub fn searches(&self) -> u64 {
        self.searches.load(Ordering::Relaxed)
    }

    /// The export root.
    pub fn root(&self) -> Result<Node, NfsStat3> {
        self.root_node()
    }

    /// Is `key` the export root?
    pub fn is_root(&self, key: Key) -> bool {
        key == self.root_meta.key
    }

    fn root_node(&self) -> Result<Node, NfsStat3> {
        let meta = stat_fd(&self.root)?;
        Ok(Node {
            fd: self.root.clone(),
            meta,
            at: None,
        })
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Links> {
        // A panic while holding the lock cannot leave the map inconsistent (each
        // operation is a single insert or remove), so a poisoned lock is still usable.
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `key` is entry `name` of directory `parent`.
    pub fn remember(&self, key: Key, parent: Key, name: &[u8]) {
        if key == self.root_meta.key {
            return;
        }
        self.links().remember(key, parent, name);
    }

    /// Forgets `key` if it was last seen as `name` in `parent` (after REMOVE, RMDIR,
    /// RENAME).
    pub fn forget(&self, key: Key, parent: Key, name: &[u8]) {
        self.links().forget(key, parent, name);
    }

    /// Opens the object an (authenticated) handle of this export names, or
    /// NFS3ERR_STALE.
    pub fn resolve(&self, fh: &FileHandle) -> Result<Node, NfsStat3> {
        self.resolve_in_call(fh, &RecentFile::default())
    }

    /// [`Export::resolve`] within one call, whose last file opened by handle
    /// `recent` keeps ([`RecentFile`]).
    pub fn resolve_in_call(&self, fh: &FileHandle, recent: &RecentFile) -> Result<Node, NfsStat3> {
        match fh.object {
            Object::Inode { key, gen } => {
                let node = self.walk_or_search(key)?;
                if node.meta.gen != gen {
                    return Err(NfsStat3::NFS3ERR_STALE);
                }
                Ok(node)
            }
            Object::Kernel { ino, handle } => {
                if let Some(mount_fd) = self.kernel.as_ref().and_then(|k| k.mount_fd.as_ref()) {
                    match self.open_by_handle(mount_fd, ino, &handle, recent) {
                        Err(Some(s)) => return Err(s),
                        Ok(node) => return Ok(node),
                        // Not opened for another reason (capabilities dropped since):
                        // the fallback.
                        Err(None) => {}
                    }
                }
                let key = Key {
                    dev: self.root_meta.key.dev,
                    ino,
                };
                let node = self.walk_or_search(key)?;
                // The inode number may have been reused since: the kernel handle holds
                // the generation.
                match kernel_fh::name_to_handle(&node.fd) {
                    Ok((h, _))
                        if SmallKernelHandle::new(h.handle_type, &h.bytes) == Some(handle) =>
                    {
                        Ok(node)
                    }
                    _ => {
                        self.known().forget(key);
                        Err(NfsStat3::NFS3ERR_STALE)
                    }
                }
            }
        }
    }

    /// Opens a kernel-kind handle's object by handle: `Err(Some(status))` for an
    /// answer, `Err(None)` where the kernel would not open it for another reason than
    /// staleness. A directory is kept open ([`DirCache`]), and taken from there the
    /// next time, with the same checks.
    fn open_by_handle(
        &self,
        mount_fd: &OwnedFd,
        ino: u64,
        handle: &SmallKernelHandle,
        recent: &RecentFile,
    ) -> Result<Node, Option<NfsStat3>> {
        if let Some(fd) = self.dirs.get(handle) {
            match self.check_opened(fd, ino) {
                Ok(node) => return Ok(node),
                // Gone or moved out of the export since: no longer kept, and opening
                // it by handle gives the answer.
                Err(_) => self.dirs.remove(handle),
            }
        }
        if let Some(fd) = recent.get(self.id, handle) {
            // Checked as a kept directory is: a file unlinked since is stale.
            return self.check_opened(fd, ino).map_err(Some);
        }
        let kh = kernel_fh::KernelHandle {
            handle_type: i32::from(handle.handle_type),
            bytes: handle.bytes().to_vec(),
        };
        let fd = match kernel_fh::open_by_handle(mount_fd, &kh, OFlags::PATH) {
            Ok(fd) => fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) => {
                return Err(Some(NfsStat3::NFS3ERR_STALE))
            }
            Err(e) => {
                tracing::debug!(export = %self.path.display(), "open_by_handle_at: {e}");
                return Err(None);
            }
        };
        let node = self.check_opened(Arc::new(fd), ino).map_err(Some)?;
        if node.meta.is_dir() {
            self.dirs.insert(*handle, node.fd.clone());
        } else {
            recent.keep(self.id, *handle, node.fd.clone());
        }
        Ok(node)
    }

    /// The object of a descriptor opened by a handle of inode `ino`, with fresh
    /// attributes, or NFS3ERR_STALE: an object with no links left (unlinked but still
    /// open somewhere) is gone for NFS, and a directory must still lie inside the
    /// export.
    fn check_opened(&self, fd: Arc<OwnedFd>, ino: u64) -> Result<Node, NfsStat3> {
        let meta = stat_fd(&fd)?;
        let same = meta.key.dev == self.root_meta.key.dev && meta.key.ino == ino;
        if !same || meta.nlink == 0 {
            // Not the object the handle was made for, or gone: what was kept for it
            // made the handle, or is of no use now.
            self.known().forget(Key {
                dev: self.root_meta.key.dev,
                ino,
            });
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        if meta.is_dir() && !self.inside(&fd, meta.key) {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        Ok(Node { fd, meta, at: None })
    }

    /// Is directory `fd` (device and inode `key`) the export root or below it? Walks
    /// `..` up to the root (cost: the directory's depth); reaching the top of the file
    /// system tree first means it is outside (moved out of the export).
    ///
    /// The first [`SHORT_WALK`] levels are one statx each of `..`, `../..`, ... from
    /// `fd`, so a directory right below the root costs one system call, not three
    /// (an openat of `..`, its statx and its close): every call on a handle of such a
    /// directory paid them. Each statx is one walk up by the kernel from `fd`, so the
    /// level that reaches the root was reached from the directory at one moment.
    /// Deeper directories continue with [`Export::inside_by_descriptors`].
    fn inside(&self, fd: &OwnedFd, key: Key) -> bool {
        // `..`, `../..`, ...: level n is the first 3n - 1 bytes (no allocation).
        let mut ups = [0u8; 3 * SHORT_WALK];
        for level in ups.chunks_exact_mut(3) {
            level.copy_from_slice(b"../");
        }
        let mut here = key;
        for level in 1..=SHORT_WALK {
            if self.is_root(here) {
                return true;
            }
            let path = &ups[..3 * level - 1];
            let Ok(s) = rustix::fs::statx(fd, path, AtFlags::empty(), StatxFlags::INO) else {
                return false;
            };
            let up = Meta::from_statx(&s).key;
            if up == here {
                // The top of the file system tree: outside.
                return false;
            }
            here = up;
        }
        self.is_root(here) || self.inside_by_descriptors(fd, key)
    }

    /// [`Export::inside`] by opening each `..` in turn (any depth, one level at a time:
    /// three system calls per level).
    fn inside_by_descriptors(&self, fd: &OwnedFd, key: Key) -> bool {
        let mut key = key;
        let mut up: Option<OwnedFd> = None;
        for _ in 0..=MAX_DEPTH {
            if self.is_root(key) {
                return true;
            }
            let Ok(parent) = rustix::fs::openat(
                up.as_ref().unwrap_or(fd),
                "..",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                return false;
            };
            let Ok(parent_meta) = stat_fd(&parent) else {
                return false;
            };
            if parent_meta.key == key {
                return false;
            }
            key = parent_meta.key;
            up = Some(parent);
        }
        false
    }

    /// The object `key` by the names remembered, or by searching the export.
    fn walk_or_search(&self, key: Key) -> Result<Node, NfsStat3> {
        match self.walk(key, 0) {
            Some(n) => Ok(n),
            None => self.search_and_walk(key),
        }
    }

    /// Re-walks the remembered names from the root to `key`.
    fn walk(&self, key: Key, depth: usize) -> Option<Node> {
        self.walk_with(key, depth, &HashMap::new())
    }

    /// [`Export::walk`], taking directories from `found` (a search's own map of the
    /// directories it reached) before the remembered names.
    fn walk_with(&self, key: Key, depth: usize, found: &HashMap<Key, Link>) -> Option<Node> {
        if key == self.root_meta.key {
            return self.root_node().ok();
        }
        if depth > MAX_DEPTH {
            return None;
        }
        let link = match found.get(&key) {
            Some(link) => link.clone(),
            None => self.links().get(&key).cloned()?,
        };
        let parent = self.walk_with(link.parent, depth + 1, found)?;
        match self.child(&parent, &link.name) {
            Ok(node) if node.meta.key == key => Some(node),
            _ => {
                self.forget(key, link.parent, &link.name);
                None
            }
        }
    }

    /// Opens entry `name` (already checked, not `.` or `..`) of directory `dir`,
    /// without following a symbolic link, and remembers it.
    pub fn child(&self, dir: &Node, name: &[u8]) -> Result<Node, NfsStat3> {
        let node = self.peek_child(dir, name)?;
        Ok(Node {
            at: Some((dir.fd.clone(), name.to_vec())),
            ..node
        })
    }

    /// As [`Export::child`], for an object only looked at (its attributes and handle:
    /// READDIRPLUS's entries), never re-opened for I/O: it keeps no descriptor of its
    /// parent, which saves two system calls per entry (a dup and its close).
    pub fn peek_child(&self, dir: &Node, name: &[u8]) -> Result<Node, NfsStat3> {
        let fd = rustix::fs::openat(
            &dir.fd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .or_stat()?;
        let meta = stat_fd(&fd)?;
        self.remember(meta.key, dir.meta.key, name);
        Ok(Node {
            fd: Arc::new(fd),
            meta,
            at: None,
        })
    }

    /// READDIRPLUS's attributes and handle of entry `name` of directory `dir`, which
    /// getdents listed as inode `ino`. Two system calls on the name
    /// (`name_to_handle_at`, then `statx`, neither following a symbolic link) instead
    /// of [`Export::peek_child`]'s four (openat, statx, name_to_handle_at, close): in a
    /// guest, where each system call is expensive, listing is the slowest metadata
    /// phase against knfsd.
    ///
    /// Without a descriptor, nothing ties the two calls to one object; the order and
    /// a check do. The handle is taken first, and the attributes must show inode
    /// `ino`. A name that was replaced since getdents would show the new inode, and
    /// since a replacement is never undone by itself, a handle taken before the
    /// attributes still showed `ino` names the listed object too. (An entry renamed
    /// away and back within those microseconds could pair another object's handle
    /// with these attributes; the client then sees the fileid change at its next
    /// GETATTR and drops the handle.) Otherwise, and for a mount point, whose root is
    /// another inode than the directory it covers, this looks as `peek_child` does.
    pub fn peek_listed(
        &self,
        dir: &Node,
        name: &[u8],
        ino: u64,
    ) -> Result<(Meta, NfsFh3), NfsStat3> {
        let meta = self.stat_child(dir, name)?;
        if meta.key.ino != ino {
            let node = self.peek_child(dir, name)?;
            let fh = self.handle(&node);
            return Ok((node.meta, fh));
        }
        let object = self.object_named(dir, name, &meta);
        Ok((meta, self.named_handle(dir, name, &meta, object)))
    }

    /// LOOKUP's attributes and handle of entry `name` (already checked, not `.` or
    /// `..`) of directory `dir`: at most two system calls on the name (`statx`, then
    /// `name_to_handle_at` unless the handle is known, [`KnownHandles`]; neither
    /// following a symbolic link) instead of opening it (openat, statx,
    /// name_to_handle_at, close). Run as the caller, the first checks search
    /// permission on `dir` as opening the name would.
    ///
    /// Nothing ties the two calls to one object. If the name is replaced between
    /// them, the kernel handle names the new object while the attributes, and the
    /// inode number our handle carries, are the old one's: resolving that handle
    /// finds the inode numbers differ and answers NFS3ERR_STALE, and the client looks
    /// the name up again. (If the new object took the old one's freed inode number,
    /// the handle names the new object, as a LOOKUP just after the replacement
    /// would; the client sees its change time differ at the next GETATTR.) Either
    /// way the handle names what was at the name during the call.
    pub fn lookup_child(&self, dir: &Node, name: &[u8]) -> Result<(Meta, NfsFh3), NfsStat3> {
        let meta = self.stat_child(dir, name)?;
        let object = self.object_named(dir, name, &meta);
        Ok((meta, self.named_handle(dir, name, &meta, object)))
    }

    /// The kernel's handle of entry `name` of `dir` (`name_to_handle_at`, not
    /// following a symbolic link), where this export makes kernel handles. (rustix
    /// makes the C string on the stack: no allocation per entry.)
    fn kernel_handle_in(&self, dir: &Node, name: &[u8]) -> Option<(kernel_fh::KernelHandle, i32)> {
        self.kernel.as_ref()?;
        rustix::path::Arg::into_with_c_str(name, |c| Ok(kernel_fh::name_to_handle_in(&dir.fd, c)))
            .ok()
            .and_then(Result::ok)
    }

    /// The handle, as sent, of entry `name` of `dir`, an object with attributes
    /// `meta` that a handle names as `object`, which is remembered if resolving the
    /// handle may need it ([`Export::resolves_by_name`]).
    fn named_handle(&self, dir: &Node, name: &[u8], meta: &Meta, object: Object) -> NfsFh3 {
        if self.resolves_by_name(&object) {
            self.remember(meta.key, dir.meta.key, name);
        }
        FileHandle {
            export: self.id,
            object,
        }
        .seal(&self.key)
    }

    /// Whether resolving a handle of `object` walks the names remembered
    /// ([`Export::walk`]): an inode-kind handle does, and so does a kernel-kind one
    /// where the server cannot open by handle. A kernel-kind handle the server opens
    /// by handle does not (if opening fails for another reason than staleness, the
    /// object is searched for), so LOOKUP and READDIRPLUS remember nothing for it:
    /// no lock, hash and copy of the name per entry, and no map that grows with every
    /// name the clients have seen.
    fn resolves_by_name(&self, object: &Object) -> bool {
        let opens_by_handle = self.kernel.as_ref().is_some_and(|k| k.mount_fd.is_some());
        !(opens_by_handle && matches!(object, Object::Kernel { .. }))
    }

    /// The object just made as entry `name` of directory `dir` (CREATE), by the
    /// descriptor its creation returned: its attributes from that descriptor, so no
    /// second open of the name is needed, and it is remembered.
    pub fn made_child(&self, dir: &Node, name: &[u8], fd: OwnedFd) -> Result<Node, NfsStat3> {
        let meta = stat_fd(&fd)?;
        self.remember(meta.key, dir.meta.key, name);
        Ok(Node {
            fd: Arc::new(fd),
            meta,
            at: None,
        })
    }

    /// The attributes of entry `name` (already checked, not `.` or `..`) of directory
    /// `dir`, by statx of the name (not following a symbolic link), without opening
    /// it or remembering it (REMOVE: only the type and inode of what goes).
    pub fn stat_child(&self, dir: &Node, name: &[u8]) -> Result<Meta, NfsStat3> {
        let s = rustix::fs::statx(
            &dir.fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS | StatxFlags::BTIME,
        )
        .or_stat()?;
        Ok(Meta::from_statx(&s))
    }

    /// The same object again, with fresh attributes (LOOKUP ".").
    pub fn same(&self, n: &Node) -> Result<Node, NfsStat3> {
        Ok(Node {
            fd: n.fd.clone(),
            meta: n.stat()?,
            at: n.at.clone(),
        })
    }

    /// The parent of directory `dir`, staying inside the export: the root's parent
    /// is the root itself (as knfsd answers LOOKUP ".."). The kernel's `..` of `dir`,
    /// checked to be inside the export as a directory opened by handle is (`dir` may
    /// have been moved out meanwhile): its depth in system calls, never a search.
    pub fn parent(&self, dir: &Node) -> Result<Node, NfsStat3> {
        if self.is_root(dir.meta.key) {
            return self.root_node();
        }
        let fd = rustix::fs::openat(
            &dir.fd,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .or_stat()?;
        let meta = stat_fd(&fd)?;
        if !self.inside(&fd, meta.key) {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        Ok(Node {
            fd: Arc::new(fd),
            meta,
            at: None,
        })
    }

    /// The device and inode of directory `dir`'s parent, without opening it: the
    /// root's for the root (as [`Export::parent`]), else the parent under which `dir`
    /// was last seen (resolving `dir` just re-checked that name), else the kernel's
    /// `..` of `dir`'s descriptor, which is only stat'ed, never walked from. (READDIR's
    /// `..` entry: its fileid.)
    pub fn parent_key(&self, dir: &Node) -> Result<Key, NfsStat3> {
        if self.is_root(dir.meta.key) {
            return Ok(self.root_meta.key);
        }
        if let Some(l) = self.links().get(&dir.meta.key) {
            return Ok(l.parent);
        }
        let fd = rustix::fs::openat(
            &dir.fd,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .or_stat()?;
        Ok(stat_fd(&fd)?.key)
    }

    /// Searches the export for `key` (one search at a time, and none within
    /// [`SEARCH_BACKOFF`] of a fruitless one), then opens it; NFS3ERR_STALE if it is
    /// not in the export.
    fn search_and_walk(&self, key: Key) -> Result<Node, NfsStat3> {
        let mut last_miss = self.search.lock().unwrap_or_else(|p| p.into_inner());
        // Another thread's search may have found it meanwhile.
        if let Some(n) = self.walk(key, 0) {
            return Ok(n);
        }
        if last_miss.is_some_and(|t| t.elapsed() < SEARCH_BACKOFF) {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        self.search(key);
        match self.walk(key, 0) {
            Some(n) => {
                *last_miss = None;
                Ok(n)
            }
            None => {
                *last_miss = Some(Instant::now());
                Err(NfsStat3::NFS3ERR_STALE)
            }
        }
    }

    /// Breadth-first search of the export for `target`, remembering every name
    /// seen (the most recent ones stay, [`Links`]). Stops when found, and then
    /// remembers the directories leading to it. Runs with the server's own
    /// credentials.
    ///
    /// The directories still to list are reached by the search's own map of the
    /// directories it has found (`found`, one entry per directory of the export at
    /// most, dropped at the end), not by the remembered names: in an export with more
    /// entries than [`Links`] keeps, the names of directories queued early would be
    /// gone by the time they are listed.
    fn search(&self, target: Key) {
        self.searches.fetch_add(1, Ordering::Relaxed);
        let mut queue = VecDeque::from([self.root_meta.key]);
        // Every directory reached so far but the root: what is queued once.
        let mut found: HashMap<Key, Link> = HashMap::new();
        while let Some(dir_key) = queue.pop_front() {
            let Some(dir) = self.walk_with(dir_key, 0, &found) else {
                continue;
            };
            // (Dir::read_from would reopen with the O_PATH flags, which cannot list.)
            let listing = rustix::fs::openat(
                &dir.fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .and_then(Dir::new);
            let Ok(mut entries) = listing else {
                continue;
            };
            while let Some(Ok(entry)) = entries.read() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let is_dir = entry.file_type() == FileType::Directory;
                if !is_dir && entry.ino() != target.ino {
                    self.remember(
                        Key {
                            dev: dir_key.dev,
                            ino: entry.ino(),
                        },
                        dir_key,
                        name,
                    );
                    continue;
                }
                let Ok(node) = self.child(&dir, name) else {
                    continue;
                };
                if node.meta.key == target {
                    // The way there, for the walk that follows and later ones.
                    let mut up = dir_key;
                    while let Some(link) = found.get(&up) {
                        self.remember(up, link.parent, &link.name);
                        up = link.parent;
                    }
                    return;
                }
                let key = node.meta.key;
                if node.meta.is_dir() && !self.is_root(key) && !found.contains_key(&key) {
                    let parent = dir_key;
                    found.insert(
                        key,
                        Link {
                            parent,
                            name: name.to_vec(),
                        },
                    );
                    queue.push_back(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_components() {
        assert_eq!(check_name(b"a", NameUse::Create), Ok(&b"a"[..]));
        assert_eq!(
            check_name(b"a/b", NameUse::Lookup),
            Err(NfsStat3::NFS3ERR_ACCES)
        );
        assert_eq!(
            check_name(b"", NameUse::Lookup),
            Err(NfsStat3::NFS3ERR_ACCES)
        );
        assert_eq!(
            check_name(b"a\0", NameUse::Create),
            Err(NfsStat3::NFS3ERR_ACCES)
        );
        assert_eq!(
            check_name(&[b'x'; 256], NameUse::Lookup),
            Err(NfsStat3::NFS3ERR_NAMETOOLONG)
        );
        assert!(check_name(&[b'x'; 255], NameUse::Create).is_ok());
        assert_eq!(check_name(b"..", NameUse::Lookup), Ok(&b".."[..]));
        assert_eq!(
            check_name(b"..", NameUse::Create),
            Err(NfsStat3::NFS3ERR_EXIST)
        );
        assert_eq!(
            check_name(b".", NameUse::Remove),
            Err(NfsStat3::NFS3ERR_INVAL)
        );
    }
}

#[cfg(test)]
mod peek_tests {
    use super::*;

    /// A fresh directory with a file, a directory and a symbolic link in it.
    fn export(kernel: KernelHandles) -> (PathBuf, Export) {
        let dir = std::env::temp_dir().join(format!(
            "nfsd-peek-{}-{kernel:?}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("f"), b"data").unwrap();
        std::os::unix::fs::symlink("f", dir.join("l")).unwrap();
        let handles = HandleConfig {
            kernel,
            ..HandleConfig::ephemeral().unwrap()
        };
        let ex = Export::open(&dir, &handles).unwrap();
        (dir, ex)
    }

    /// `peek_listed` gives what opening the entry gives (a symbolic link not
    /// followed), by its own two calls when the listed inode matches and through
    /// `peek_child` when it does not (as for a replaced entry or a mount point).
    #[test]
    fn peek_listed_agrees_with_opening_the_entry() {
        for kernel in [KernelHandles::Auto, KernelHandles::Off] {
            let (dir, ex) = export(kernel);
            let root = ex.root().unwrap();
            for name in [&b"f"[..], b"d", b"l"] {
                let opened = ex.peek_child(&root, name).unwrap();
                let want = (opened.meta.fattr(ex.id), ex.handle(&opened));
                let listed = ex.peek_listed(&root, name, opened.meta.key.ino).unwrap();
                assert_eq!((listed.0.fattr(ex.id), listed.1), want, "{kernel:?}");
                let stale = ex
                    .peek_listed(&root, name, opened.meta.key.ino + 1)
                    .unwrap();
                assert_eq!((stale.0.fattr(ex.id), stale.1), want, "{kernel:?}");
            }
            let l = ex.peek_listed(&root, b"l", 0).unwrap().0;
            assert_eq!(l.file_type(), FileType::Symlink);
            assert_eq!(
                ex.peek_listed(&root, b"gone", 1),
                Err(NfsStat3::NFS3ERR_NOENT)
            );
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// Handles seen before are taken from [`KnownHandles`] by device, inode and
    /// birth time: the same handle again; a file replaced at the name (a new birth
    /// time) gets its own, and the old handle is stale. A kept handle that names
    /// another object (a name replaced between `statx` and `name_to_handle_at`, made
    /// here by hand) is stale once, then forgotten: the next LOOKUP asks the kernel.
    #[test]
    fn known_handles_are_taken_again_and_a_stale_one_is_forgotten() {
        let (dir, ex) = export(KernelHandles::Auto);
        assert_eq!(
            ex.mode,
            HandleMode::OpenByHandle,
            "this test needs to open handles (run as root)"
        );
        let root = ex.root().unwrap();
        let open = |fh: &NfsFh3| FileHandle::open(fh, &ex.key).unwrap();
        let (f, first) = ex.lookup_child(&root, b"f").unwrap();
        assert_ne!(f.gen, 0, "this test needs a file system with birth times");
        assert_eq!(ex.known().get(f.key, f.gen), Some(open(&first).object));
        assert_eq!(ex.lookup_child(&root, b"f").unwrap().1, first);
        let d_ino = ex.lookup_child(&root, b"d").unwrap().0.key.ino;
        assert_eq!(ex.peek_listed(&root, b"f", f.key.ino).unwrap().1, first);

        // Replaced: a new file at the name, birth time of its own.
        std::fs::remove_file(dir.join("f")).unwrap();
        std::fs::write(dir.join("f"), b"new").unwrap();
        let (g, second) = ex.lookup_child(&root, b"f").unwrap();
        assert_ne!((g.key, g.gen), (f.key, f.gen));
        assert_ne!(second, first);
        assert_eq!(ex.resolve(&open(&second)).unwrap().meta.key, g.key);
        assert_eq!(
            ex.resolve(&open(&first)).err(),
            Some(NfsStat3::NFS3ERR_STALE)
        );

        // What the race would keep: the file's key with the directory's kernel handle.
        let d_gen = ex.lookup_child(&root, b"d").unwrap().0.gen;
        let kept = ex.known().get(
            Key {
                dev: g.key.dev,
                ino: d_ino,
            },
            d_gen,
        );
        let Some(Object::Kernel { handle: wrong, .. }) = kept else {
            panic!("a kernel-kind handle on this export: {kept:?}")
        };
        ex.known().keep(
            g.key,
            g.gen,
            Object::Kernel {
                ino: g.key.ino,
                handle: wrong,
            },
        );
        let (_, poisoned) = ex.lookup_child(&root, b"f").unwrap();
        assert_eq!(
            ex.resolve(&open(&poisoned)).err(),
            Some(NfsStat3::NFS3ERR_STALE)
        );
        let (_, again) = ex.lookup_child(&root, b"f").unwrap();
        assert_eq!(again, second);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// LOOKUP's and READDIRPLUS's names are remembered only where resolving the
    /// handle walks them (inode-kind handles here); the handles resolve either way.
    #[test]
    fn names_are_remembered_only_where_handles_resolve_by_name() {
        for kernel in [KernelHandles::Auto, KernelHandles::Off] {
            let (dir, ex) = export(kernel);
            let by_handle = kernel == KernelHandles::Auto;
            assert_eq!(
                ex.mode == HandleMode::OpenByHandle,
                by_handle,
                "this test needs to open handles (run as root)"
            );
            let root = ex.root().unwrap();
            let (f, f_handle) = ex.lookup_child(&root, b"f").unwrap();
            let d_ino =
                std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir.join("d")).unwrap());
            let (d, d_handle) = ex.peek_listed(&root, b"d", d_ino).unwrap();
            let remembered = ex.links().len();
            assert_eq!(remembered, if by_handle { 0 } else { 2 }, "{kernel:?}");
            for (meta, handle) in [(f, f_handle), (d, d_handle)] {
                let fh = FileHandle::open(&handle, &ex.key).unwrap();
                assert_eq!(ex.resolve(&fh).unwrap().meta.key, meta.key, "{kernel:?}");
            }
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

#[cfg(test)]
mod links_tests {
    use super::*;

    /// With inode-kind handles (resolved by names), a client that shows the server
    /// more names than it keeps cannot grow the map past two generations, and a
    /// handle whose names fell out is found again by a search, even when the export
    /// holds more entries than the map keeps (the search reaches its directories by
    /// its own map).
    #[test]
    fn names_are_bounded_and_forgotten_handles_still_resolve() {
        let dir = std::env::temp_dir().join(format!("nfsd-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
        std::fs::write(dir.join("a/b/c/deep"), b"x").unwrap();
        for i in 0..60 {
            std::fs::write(dir.join(format!("f{i}")), b"").unwrap();
            std::fs::write(dir.join(format!("a/g{i}")), b"").unwrap();
        }
        let handles = HandleConfig {
            kernel: KernelHandles::Off,
            ..HandleConfig::ephemeral().unwrap()
        };
        let ex = Export::open(&dir, &handles).unwrap();
        *ex.links() = Links::with_generation(4);
        let mut node = ex.root().unwrap();
        for name in [&b"a"[..], b"b", b"c", b"deep"] {
            node = ex.child(&node, name).unwrap();
        }
        let deep = ex.file_handle(&node);
        let root = ex.root().unwrap();
        for i in 0..60 {
            ex.lookup_child(&root, format!("f{i}").as_bytes()).unwrap();
            assert!(ex.links().len() <= 8, "{} names held", ex.links().len());
        }
        assert_eq!(ex.searches(), 0);
        assert_eq!(ex.resolve(&deep).unwrap().meta.key, node.meta.key);
        assert_eq!(
            ex.searches(),
            1,
            "found without a search: names not bounded"
        );
        assert!(ex.links().len() <= 8, "{} names held", ex.links().len());
        // The search remembered the way: the next resolution walks it.
        assert_eq!(ex.resolve(&deep).unwrap().meta.key, node.meta.key);
        assert_eq!(ex.searches(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[cfg(test)]
mod dir_cache_tests {
    use super::*;

    /// A fresh export holding directory `d` and file `f`, and a directory beside it
    /// (outside the export). Opening by handle needs root (CAP_DAC_READ_SEARCH).
    fn export(test: &str) -> (PathBuf, Export) {
        let base = std::env::temp_dir().join(format!("nfsd-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("export");
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(dir.join("f"), b"data").unwrap();
        let ex = Export::open(&dir, &HandleConfig::ephemeral().unwrap()).unwrap();
        assert_eq!(
            ex.mode,
            HandleMode::OpenByHandle,
            "this test needs to open handles (run as root)"
        );
        (base, ex)
    }

    fn handle_of(ex: &Export, name: &[u8]) -> FileHandle {
        let root = ex.root().unwrap();
        ex.file_handle(&ex.peek_child(&root, name).unwrap())
    }

    /// A directory's handle is opened once and its descriptor used again, with the
    /// same checks: fresh attributes, stale once removed or moved out of the export,
    /// and closed after two idle periods. Files are not kept.
    #[test]
    fn directories_are_kept_open_and_checked_at_each_use() {
        let (base, ex) = export("dir-cache");
        let d = handle_of(&ex, b"d");
        let first = ex.resolve(&d).unwrap();
        assert_eq!(ex.kept_descriptors(), 1);
        let again = ex.resolve(&d).unwrap();
        assert!(Arc::ptr_eq(&first.fd, &again.fd), "opened a second time");
        assert_eq!(ex.kept_descriptors(), 1);

        // Fresh attributes on each use.
        let before = again.meta.mtime;
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(base.join("export/d/new"), b"").unwrap();
        assert_ne!(ex.resolve(&d).unwrap().meta.mtime, before);

        let f = handle_of(&ex, b"f");
        ex.resolve(&f).unwrap();
        assert_eq!(ex.kept_descriptors(), 1, "a file's descriptor was kept");

        // Moved out of the export: stale, and no longer kept; back in: served again.
        std::fs::rename(base.join("export/d"), base.join("outside/d")).unwrap();
        assert_eq!(ex.resolve(&d).err(), Some(NfsStat3::NFS3ERR_STALE));
        assert_eq!(ex.kept_descriptors(), 0);
        std::fs::rename(base.join("outside/d"), base.join("export/d")).unwrap();
        ex.resolve(&d).unwrap();
        assert_eq!(ex.kept_descriptors(), 1);

        // Removed: stale, although the descriptor still names the inode.
        std::fs::remove_file(base.join("export/d/new")).unwrap();
        std::fs::remove_dir(base.join("export/d")).unwrap();
        assert_eq!(ex.resolve(&d).err(), Some(NfsStat3::NFS3ERR_STALE));
        assert_eq!(ex.kept_descriptors(), 0);

        std::fs::create_dir(base.join("export/e")).unwrap();
        ex.resolve(&handle_of(&ex, b"e")).unwrap();
        assert_eq!(ex.kept_descriptors(), 1);
        ex.age_descriptors();
        ex.age_descriptors();
        assert_eq!(ex.kept_descriptors(), 0, "kept while idle");
        std::fs::remove_dir_all(base).unwrap();
    }

    /// Within one call ([`RecentFile`]) a file's handle is opened once and its
    /// descriptor used again, checked at each use as a kept directory's is: fresh
    /// attributes, stale once unlinked; another file's handle replaces it; without
    /// the call's [`RecentFile`], every resolve opens the file anew.
    #[test]
    fn a_calls_last_file_is_opened_once_and_checked_at_each_use() {
        let (base, ex) = export("recent-file");
        let f = handle_of(&ex, b"f");
        let recent = RecentFile::default();
        let first = ex.resolve_in_call(&f, &recent).unwrap();
        let again = ex.resolve_in_call(&f, &recent).unwrap();
        assert!(Arc::ptr_eq(&first.fd, &again.fd), "opened a second time");
        assert!(!Arc::ptr_eq(&first.fd, &ex.resolve(&f).unwrap().fd));
        assert!(!Arc::ptr_eq(
            &first.fd,
            &ex.resolve_in_call(&f, &recent.clone()).unwrap().fd
        ));

        std::fs::write(base.join("export/f"), b"longer than before").unwrap();
        let fresh = ex.resolve_in_call(&f, &recent).unwrap();
        assert!(Arc::ptr_eq(&first.fd, &fresh.fd));
        assert_eq!(fresh.meta.size, 18, "attributes as read when it was kept");

        std::fs::write(base.join("export/g"), b"").unwrap();
        let g = handle_of(&ex, b"g");
        let other = ex.resolve_in_call(&g, &recent).unwrap();
        assert!(!Arc::ptr_eq(&first.fd, &other.fd));
        assert!(!Arc::ptr_eq(
            &first.fd,
            &ex.resolve_in_call(&f, &recent).unwrap().fd
        ));

        std::fs::remove_file(base.join("export/f")).unwrap();
        assert_eq!(
            ex.resolve_in_call(&f, &recent).err(),
            Some(NfsStat3::NFS3ERR_STALE)
        );
        std::fs::remove_dir_all(base).unwrap();
    }

    /// `lookup_child`'s two calls on a name that was replaced between them give the
    /// old object's attributes and inode number with the new object's kernel handle:
    /// such a handle must be stale, never the new object.
    #[test]
    fn a_handle_mixing_two_objects_is_stale() {
        let (base, ex) = export("mixed-handle");
        let root = ex.root().unwrap();
        let (old_meta, _) = ex.lookup_child(&root, b"f").unwrap();
        // Renamed away (so its inode number is not reused), and a new file put there.
        std::fs::rename(base.join("export/f"), base.join("export/g")).unwrap();
        std::fs::write(base.join("export/f"), b"new").unwrap();
        let new = ex.peek_child(&root, b"f").unwrap();
        let Object::Kernel { handle, .. } = ex.file_handle(&new).object else {
            panic!("not a kernel handle");
        };
        let mixed = FileHandle {
            export: ex.id,
            object: Object::Kernel {
                ino: old_meta.key.ino,
                handle,
            },
        };
        assert_eq!(ex.resolve(&mixed).err(), Some(NfsStat3::NFS3ERR_STALE));
        let (meta, fh) = ex.lookup_child(&root, b"f").unwrap();
        assert_eq!(meta.key, new.meta.key);
        assert_eq!(fh, ex.handle(&new));
        std::fs::remove_dir_all(base).unwrap();
    }

    /// A directory several levels down is inside while its ancestors are, and stale
    /// once an ancestor is moved out, below [`SHORT_WALK`] levels (statx of `../..`)
    /// and beyond it (one level at a time by descriptors).
    #[test]
    fn a_directory_moved_out_with_an_ancestor_is_stale_at_any_depth() {
        for depth in [3, SHORT_WALK + 3] {
            let (base, ex) = export(&format!("inside-{depth}"));
            let mut path = base.join("export/top");
            for level in 0..depth {
                path.push(format!("l{level}"));
            }
            std::fs::create_dir_all(&path).unwrap();
            let mut node = ex.root().unwrap();
            for c in path.strip_prefix(base.join("export")).unwrap().components() {
                node = ex
                    .peek_child(&node, c.as_os_str().as_encoded_bytes())
                    .unwrap();
            }
            let fh = ex.file_handle(&node);
            assert_eq!(ex.resolve(&fh).unwrap().meta.key, node.meta.key, "{depth}");
            std::fs::rename(base.join("export/top"), base.join("outside/top")).unwrap();
            assert_eq!(
                ex.resolve(&fh).err(),
                Some(NfsStat3::NFS3ERR_STALE),
                "depth {depth}"
            );
            std::fs::rename(base.join("outside/top"), base.join("export/top")).unwrap();
            assert_eq!(ex.resolve(&fh).unwrap().meta.key, node.meta.key, "{depth}");
            std::fs::remove_dir_all(base).unwrap();
        }
    }
}
