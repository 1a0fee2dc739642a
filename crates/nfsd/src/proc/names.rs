//! Name-space procedures: RFC 1813 §3.3.3 LOOKUP, §3.3.5 READLINK, §3.3.8 CREATE,
//! §3.3.9 MKDIR, §3.3.10 SYMLINK, §3.3.11 MKNOD, §3.3.12 REMOVE, §3.3.13 RMDIR,
//! §3.3.14 RENAME, §3.3.15 LINK.
//!
//! Every name is checked by [`check_name`] and used as a single component relative to
//! a directory descriptor of the export, so nothing outside the export is reached.

use nfs3::dir::*;
use nfs3::{
    CreateVerf3, DirOpArgs3, Ftype3, NfsFh3, NfsPath3, NfsResult, NfsStat3, Sattr3, SetTime,
    WccData,
};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, CWD};
use xdr::Bytes;

use crate::errno::OrStat;
use crate::nfs::{post_op, resolved_attr, Cx};
use crate::proc::attr::apply_sattr;
use crate::seen::Seen;
use crate::vfs::{check_name, Export, Meta, NameUse, Node};

/// §3.3.3 LOOKUP. "." is the directory itself and ".." its parent, except that the
/// root's parent is the root: a lookup never leaves the export.
pub(crate) fn lookup(cx: &Cx<'_>, a: Lookup3Args) -> Lookup3Res {
    let fail = |s, dir_attributes| NfsResult::Fail(s, Lookup3ResFail { dir_attributes });
    let (ex, dir) = match cx.resolve(&a.what.dir) {
        Ok(r) => r,
        Err(s) => return fail(s, None),
    };
    if !dir.meta.is_dir() {
        return fail(NfsStat3::NFS3ERR_NOTDIR, resolved_attr(ex, &dir));
    }
    let name = match check_name(&a.what.name.0, NameUse::Lookup) {
        Ok(n) => n,
        Err(s) => return fail(s, resolved_attr(ex, &dir)),
    };
    let found = cx.as_caller(|| {
        // Search permission on the directory, as a local lookup would need. For a
        // name the kernel checks it itself, as the caller, when `peek_child`'s openat
        // looks the name up in the directory (EACCES before ENOENT, as here): one
        // system call less per LOOKUP. "." and ".." are not looked up by name.
        let search = || dir.access(rustix::fs::Access::EXEC_OK).or_stat();
        let handle_of = |n: Node| (n.meta, ex.handle(&n));
        match name {
            b"." => search().and_then(|()| ex.same(&dir)).map(handle_of),
            b".." => search().and_then(|()| ex.parent(&dir)).map(handle_of),
            // Only its handle and attributes go back: not opened.
            _ => ex.lookup_child(&dir, name),
        }
    });
    match found {
        Ok((meta, object)) => {
            // NFSv4's GETATTR after LOOKUP reads these (`crate::seen`).
            cx.seen().keep_meta(&object, ex, meta);
            NfsResult::Ok(Lookup3ResOk {
                object,
                obj_attributes: Some(meta.fattr(ex.id)),
                dir_attributes: resolved_attr(ex, &dir),
            })
        }
        Err(s) => fail(s, resolved_attr(ex, &dir)),
    }
}

/// §3.3.5 READLINK: "If the object is not a symbolic link, NFS3ERR_INVAL".
pub(crate) fn readlink(cx: &Cx<'_>, a: ReadLink3Args) -> ReadLink3Res {
    let (ex, node) = match cx.resolve(&a.symlink) {
        Ok(r) => r,
        Err(s) => {
            return NfsResult::Fail(
                s,
                nfs3::attr::ObjAttrFail {
                    obj_attributes: None,
                },
            )
        }
    };
    let target = if node.meta.file_type() != FileType::Symlink {
        Err(NfsStat3::NFS3ERR_INVAL)
    } else {
        rustix::fs::readlinkat(&node.fd, "", Vec::new()).or_stat()
    };
    match target {
        Ok(t) => NfsResult::Ok(ReadLink3ResOk {
            symlink_attributes: post_op(ex, &node),
            // Bytes::from(Vec) takes the allocation over: no copy.
            data: NfsPath3(Bytes::from(t.into_bytes())),
        }),
        Err(s) => NfsResult::Fail(
            s,
            nfs3::attr::ObjAttrFail {
                obj_attributes: post_op(ex, &node),
            },
        ),
    }
}

/// The directory of a modifying procedure, checked: it exists, is a directory, the
/// export is writable, and the name is acceptable for `usage`.
struct Target<'a> {
    ex: &'a Arc<Export>,
    /// The directory's handle, as the call gave it.
    fh: &'a NfsFh3,
    dir: Node,
    before: Meta,
    name: &'a [u8],
    seen: &'a Seen,
}

impl<'a> Target<'a> {
    // The error is the procedure's failure reply (status and wcc_data), built once
    // per failed call; boxing it would only add an allocation.
    #[allow(clippy::result_large_err)]
    fn open(
        cx: &'a Cx<'_>,
        d: &'a DirOpArgs3,
        usage: NameUse,
    ) -> Result<Target<'a>, (NfsStat3, WccData)> {
        let (ex, dir) = cx.resolve(&d.dir).map_err(|s| (s, WccData::default()))?;
        let before = dir.meta;
        let t = Target {
            ex,
            fh: &d.dir,
            dir,
            before,
            name: &d.name.0,
            seen: cx.seen(),
        };
        if !t.dir.meta.is_dir() {
            return Err(t.fail(NfsStat3::NFS3ERR_NOTDIR));
        }
        if cx.read_only {
            return Err(t.fail(NfsStat3::NFS3ERR_ROFS));
        }
        check_name(t.name, usage).map_err(|s| t.fail(s))?;
        Ok(t)
    }

    /// The directory's wcc data, `after` read now: the last look at the directory
    /// of an operation that changes it, which an NFSv4 GETATTR of it later in the
    /// COMPOUND may take ([`crate::seen`]).
    fn wcc(&self) -> WccData {
        let after = self.dir.stat().ok();
        if let Some(meta) = after {
            let dir = || Node {
                meta,
                ..self.dir.clone()
            };
            self.seen.keep_after_change(self.fh, self.ex, dir);
        }
        WccData {
            before: Some(self.before.wcc()),
            after: after.map(|m| m.fattr(self.ex.id)),
        }
    }

    fn fail(&self, s: NfsStat3) -> (NfsStat3, WccData) {
        (s, self.wcc())
    }

    /// The result of a procedure that made entry `name`.
    fn created(&self, made: Result<(), NfsStat3>) -> Create3Res {
        self.created_by(made.map(|()| None))
    }

    /// The result of a procedure that made entry `name`, with the descriptor its
    /// creation returned where there is one (CREATE EXCLUSIVE's new file): the
    /// attributes and handle are read from it. Otherwise they are read by the name,
    /// as LOOKUP reads them ([`Export::lookup_child`]: not opened).
    fn created_by(&self, made: Result<Option<OwnedFd>, NfsStat3>) -> Create3Res {
        let made = made.and_then(|fd| match fd {
            Some(fd) => {
                let obj = self.ex.made_child(&self.dir, self.name, fd)?;
                Ok((obj.meta, self.ex.handle(&obj)))
            }
            None => self.ex.lookup_child(&self.dir, self.name),
        });
        match made {
            Ok((meta, fh)) => NfsResult::Ok(Create3ResOk {
                obj: Some(fh),
                obj_attributes: Some(meta.fattr(self.ex.id)),
                dir_wcc: self.wcc(),
            }),
            Err(s) => NfsResult::Fail(
                s,
                DirWcc {
                    dir_wcc: self.wcc(),
                },
            ),
        }
    }
}

fn create_fail((s, dir_wcc): (NfsStat3, WccData)) -> Create3Res {
    NfsResult::Fail(s, DirWcc { dir_wcc })
}

/// `sattr3` without the fields a creating call already applied.
fn rest_of(s: &Sattr3) -> Sattr3 {
    Sattr3 {
        mode: None,
        ..s.clone()
    }
}

/// Whether `s` sets nothing ([`apply_sattr`] would make no system call).
fn sets_nothing(s: &Sattr3) -> bool {
    s.mode.is_none()
        && s.uid.is_none()
        && s.gid.is_none()
        && s.size.is_none()
        && s.atime == SetTime::DontChange
        && s.mtime == SetTime::DontChange
}

fn mode_of(s: &Sattr3, default: u32) -> Mode {
    Mode::from_raw_mode(s.mode.unwrap_or(default) & 0o7777)
}

/// §3.3.8 CREATE: UNCHECKED, GUARDED, or EXCLUSIVE with the verifier kept in the new
/// file's atime and mtime seconds (as knfsd does), so a retransmitted EXCLUSIVE
/// create finds the same verifier and succeeds: "the server ... stores the verifier
/// in stable storage ... If the verifier matches, the server returns NFS3_OK".
pub(crate) fn create(cx: &Cx<'_>, a: Create3Args) -> Create3Res {
    create_telling(cx, a).0
}

/// [`create`], and whether this call made the file (not an UNCHECKED or EXCLUSIVE
/// create that found it there): NFSv4.1 OPEN's "owner override" for the file it
/// created, told without a lookup before the create.
pub(crate) fn create_telling(cx: &Cx<'_>, a: Create3Args) -> (Create3Res, bool) {
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.dir_op.dir, None);
    let t = match Target::open(cx, &a.dir_op, NameUse::Create) {
        Ok(t) => t,
        Err(e) => return (create_fail(e), false),
    };
    let fresh = std::cell::Cell::new(false);
    let excl = |mode: Mode| {
        rustix::fs::openat(
            &t.dir.fd,
            t.name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            mode,
        )
    };
    // UNCHECKED and GUARDED make the file by mknodat, as knfsd makes it (vfs_create):
    // nothing is opened, so nothing is closed either; a file system without mknod
    // (EPERM) gets the exclusive open instead. Both fail with EEXIST if the name is
    // taken.
    let make = |mode: Mode| {
        match rustix::fs::mknodat(&t.dir.fd, t.name, FileType::RegularFile, mode, 0) {
            Err(rustix::io::Errno::PERM) => excl(mode).map(drop),
            made => made,
        }
        .inspect(|()| fresh.set(true))
    };
    // The attributes the create did not apply (all but the mode), applied to the new
    // file. A client's plain create sets only the mode: then the file is not opened
    // here at all, and the reply's attributes and handle are read by its name
    // (`Target::created_by`).
    let apply_rest = |attrs: &Sattr3| {
        let rest = rest_of(attrs);
        if !sets_nothing(&rest) {
            apply_sattr(&t.ex.child(&t.dir, t.name)?, &rest)?;
        }
        Ok(None)
    };
    let made = cx.as_caller(|| match &a.how {
        CreateHow3::Guarded(attrs) => {
            make(mode_of(attrs, 0o644)).or_stat()?;
            apply_rest(attrs)
        }
        CreateHow3::Unchecked(attrs) => match make(mode_of(attrs, 0o644)) {
            Ok(()) => apply_rest(attrs),
            Err(rustix::io::Errno::EXIST) => {
                // §3.3.8: UNCHECKED "means that the file should be created without
                // checking for the existence of a duplicate file"; the attributes
                // (size 0 truncates) apply to the file that is there.
                let obj = t.ex.child(&t.dir, t.name)?;
                if obj.meta.file_type() != FileType::RegularFile {
                    return Err(NfsStat3::NFS3ERR_EXIST);
                }
                apply_sattr(&obj, &rest_of(attrs)).map(|()| None)
            }
            Err(e) => Err(crate::errno::nfsstat3_from_errno(e)),
        },
        CreateHow3::Exclusive(verf) => match excl(Mode::empty()) {
            Ok(fd) => rustix::fs::futimens(&fd, &verifier_times(verf))
                .inspect(|()| fresh.set(true))
                .or_stat()
                .map(|()| Some(fd)),
            Err(rustix::io::Errno::EXIST) => {
                let obj = t.ex.child(&t.dir, t.name)?;
                let want = verifier_times(verf);
                let same = obj.meta.file_type() == FileType::RegularFile
                    && i64::from(obj.meta.atime.seconds) == want.last_access.tv_sec
                    && i64::from(obj.meta.mtime.seconds) == want.last_modification.tv_sec;
                if same {
                    Ok(None)
                } else {
                    Err(NfsStat3::NFS3ERR_EXIST)
                }
            }
            Err(e) => Err(crate::errno::nfsstat3_from_errno(e)),
        },
    });
    (t.created_by(made), fresh.get())
}

fn verifier_times(v: &CreateVerf3) -> Timestamps {
    let half = |b: &[u8]| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff);
    Timestamps {
        last_access: Timespec {
            tv_sec: half(&v[..4]),
            tv_nsec: 0,
        },
        last_modification: Timespec {
            tv_sec: half(&v[4..]),
            tv_nsec: 0,
        },
    }
}

/// §3.3.9 MKDIR.
pub(crate) fn mkdir(cx: &Cx<'_>, a: MkDir3Args) -> Create3Res {
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.dir_op.dir, None);
    let t = match Target::open(cx, &a.dir_op, NameUse::Create) {
        Ok(t) => t,
        Err(e) => return create_fail(e),
    };
    let made = cx.as_caller(|| {
        rustix::fs::mkdirat(&t.dir.fd, t.name, mode_of(&a.attributes, 0o755)).or_stat()?;
        let attrs = Sattr3 {
            size: None,
            ..rest_of(&a.attributes)
        };
        apply_sattr(&t.ex.child(&t.dir, t.name)?, &attrs)
    });
    t.created(made)
}

/// §3.3.10 SYMLINK. The target is stored as given: it is data, never followed by
/// this server.
pub(crate) fn symlink(cx: &Cx<'_>, a: Symlink3Args) -> Create3Res {
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.dir_op.dir, None);
    let t = match Target::open(cx, &a.dir_op, NameUse::Create) {
        Ok(t) => t,
        Err(e) => return create_fail(e),
    };
    let target = &a.symlink.symlink_data.0;
    if target.is_empty() || target.contains(&0) || target.len() >= crate::vfs::PATH_MAX {
        let s = if target.len() >= crate::vfs::PATH_MAX {
            NfsStat3::NFS3ERR_NAMETOOLONG
        } else {
            NfsStat3::NFS3ERR_INVAL
        };
        return create_fail(t.fail(s));
    }
    let made = cx.as_caller(|| {
        rustix::fs::symlinkat(&target[..], &t.dir.fd, t.name).or_stat()?;
        let attrs = &a.symlink.symlink_attributes;
        let owner = Sattr3 {
            uid: attrs.uid,
            gid: attrs.gid,
            ..Sattr3::default()
        };
        apply_sattr(&t.ex.child(&t.dir, t.name)?, &owner)
    });
    t.created(made)
}

/// §3.3.11 MKNOD: character and block devices, sockets and FIFOs; other types are
/// NFS3ERR_BADTYPE ("NFS3ERR_BADTYPE: An attempt was made to create an object of a
/// type not supported by the server").
pub(crate) fn mknod(cx: &Cx<'_>, a: Mknod3Args) -> Create3Res {
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.dir_op.dir, None);
    let t = match Target::open(cx, &a.dir_op, NameUse::Create) {
        Ok(t) => t,
        Err(e) => return create_fail(e),
    };
    let (ftype, attrs, dev) = match &a.what {
        MknodData3::Device(ty, d) => {
            let ft = if *ty == Ftype3::NF3CHR {
                FileType::CharacterDevice
            } else {
                FileType::BlockDevice
            };
            let dev = rustix::fs::makedev(d.spec.specdata1, d.spec.specdata2);
            (ft, &d.dev_attributes, dev)
        }
        MknodData3::Pipe(ty, attrs) => {
            let ft = if *ty == Ftype3::NF3FIFO {
                FileType::Fifo
            } else {
                FileType::Socket
            };
            (ft, attrs, 0)
        }
        MknodData3::Other(_) => return create_fail(t.fail(NfsStat3::NFS3ERR_BADTYPE)),
    };
    let made = cx.as_caller(|| {
        rustix::fs::mknodat(&t.dir.fd, t.name, ftype, mode_of(attrs, 0o644), dev).or_stat()?;
        let rest = Sattr3 {
            size: None,
            ..rest_of(attrs)
        };
        apply_sattr(&t.ex.child(&t.dir, t.name)?, &rest)
    });
    t.created(made)
}

/// §3.3.12 REMOVE and §3.3.13 RMDIR.
pub(crate) fn remove(cx: &Cx<'_>, a: Remove3Args, dir_entry: bool) -> Remove3Res {
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.object.dir, None);
    let t = match Target::open(cx, &a.object, NameUse::Remove) {
        Ok(t) => t,
        Err((s, dir_wcc)) => return NfsResult::Fail(s, DirWcc { dir_wcc }),
    };
    let done = cx.as_caller(|| {
        // Only its type and inode are needed: statx of the name, not an open (which
        // cost an openat, a dup of the directory and two closes more per REMOVE).
        let victim = t.ex.stat_child(&t.dir, t.name)?;
        let flags = if dir_entry {
            AtFlags::REMOVEDIR
        } else {
            // unlink(2) of a directory is EISDIR on Linux; RFC 1813 §3.3.12 lets
            // REMOVE of a directory fail, and NFS3ERR_ISDIR says why.
            if victim.is_dir() {
                return Err(NfsStat3::NFS3ERR_ISDIR);
            }
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&t.dir.fd, t.name, flags).or_stat()?;
        t.ex.forget(victim.key, t.dir.meta.key, t.name);
        Ok(())
    });
    let dir_wcc = t.wcc();
    match done {
        Ok(()) => NfsResult::Ok(DirWcc { dir_wcc }),
        Err(s) => NfsResult::Fail(s, DirWcc { dir_wcc }),
    }
}

/// §3.3.14 RENAME. Both directories must be in the same export ("NFS3ERR_XDEV:
/// Attempt to do a cross-device hard link" covers cross-export rename too).
pub(crate) fn rename(cx: &Cx<'_>, a: Rename3Args) -> Rename3Res {
    let both_fail = |s, fromdir_wcc, todir_wcc| {
        NfsResult::Fail(
            s,
            Rename3Wcc {
                fromdir_wcc,
                todir_wcc,
            },
        )
    };
    // Both directories, in lock order, until the looks after the change
    // (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.from.dir, Some(&a.to.dir));
    let from = match Target::open(cx, &a.from, NameUse::Remove) {
        Ok(t) => t,
        Err((s, w)) => return both_fail(s, w, WccData::default()),
    };
    let to = match Target::open(cx, &a.to, NameUse::Create) {
        Ok(t) => t,
        Err((s, w)) => return both_fail(s, from.wcc(), w),
    };
    if from.ex.id != to.ex.id {
        return both_fail(NfsStat3::NFS3ERR_XDEV, from.wcc(), to.wcc());
    }
    let done = cx.as_caller(|| {
        let moved = from.ex.child(&from.dir, from.name)?;
        let replaced = to.ex.child(&to.dir, to.name).ok();
        rustix::fs::renameat(&from.dir.fd, from.name, &to.dir.fd, to.name).or_stat()?;
        if let Some(r) = replaced {
            if r.meta.key != moved.meta.key {
                to.ex.forget(r.meta.key, to.dir.meta.key, to.name);
            }
        }
        to.ex.remember(moved.meta.key, to.dir.meta.key, to.name);
        Ok(())
    });
    let w = Rename3Wcc {
        fromdir_wcc: from.wcc(),
        todir_wcc: to.wcc(),
    };
    match done {
        Ok(()) => NfsResult::Ok(w),
        Err(s) => NfsResult::Fail(s, w),
    }
}

/// §3.3.15 LINK. The new name is made with `linkat` on `/proc/self/fd/N` of the
/// already-resolved file, so the link names exactly that inode.
pub(crate) fn link(cx: &Cx<'_>, a: Link3Args) -> Link3Res {
    let (fex, file) = match cx.resolve(&a.file) {
        Ok(r) => r,
        Err(s) => {
            return NfsResult::Fail(
                s,
                Link3Wcc {
                    file_attributes: None,
                    linkdir_wcc: WccData::default(),
                },
            )
        }
    };
    // Held until the look after the change (`crate::dir_locks`).
    let _held = cx.lock_dirs(&a.link.dir, None);
    let t = match Target::open(cx, &a.link, NameUse::Create) {
        Ok(t) => t,
        Err((s, linkdir_wcc)) => {
            return NfsResult::Fail(
                s,
                Link3Wcc {
                    file_attributes: post_op(fex, &file),
                    linkdir_wcc,
                },
            )
        }
    };
    let done = if fex.id != t.ex.id {
        Err(NfsStat3::NFS3ERR_XDEV)
    } else if file.meta.is_dir() {
        Err(NfsStat3::NFS3ERR_ISDIR)
    } else {
        cx.as_caller(|| {
            rustix::fs::linkat(
                CWD,
                file.proc_path(),
                &t.dir.fd,
                t.name,
                AtFlags::SYMLINK_FOLLOW,
            )
            .or_stat()?;
            t.ex.remember(file.meta.key, t.dir.meta.key, t.name);
            Ok(())
        })
    };
    let w = Link3Wcc {
        file_attributes: post_op(fex, &file),
        linkdir_wcc: t.wcc(),
    };
    match done {
        Ok(()) => NfsResult::Ok(w),
        Err(s) => NfsResult::Fail(s, w),
    }
}
