//! RFC 1813 §3.3.1 GETATTR, §3.3.2 SETATTR, §3.3.4 ACCESS, and the application of
//! `sattr3` that CREATE, MKDIR, SYMLINK and MKNOD share.

use nfs3::attr::*;
use nfs3::{NfsResult, NfsStat3, Sattr3, SetTime, Void, WccData};
use rustix::fs::{Access, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, CWD};
use rustix::process::{Gid, Uid};

use crate::errno::OrStat;
use crate::nfs::{resolved_attr, wcc, Cx};
use crate::vfs::Node;

/// §3.3.1 GETATTR.
pub(crate) fn getattr(cx: &Cx<'_>, a: GetAttr3Args) -> GetAttr3Res {
    match cx.resolve(&a.object) {
        Ok((ex, node)) => NfsResult::Ok(GetAttr3ResOk {
            obj_attributes: node.meta.fattr(ex.id),
        }),
        Err(s) => NfsResult::Fail(s, Void),
    }
}

/// §3.3.2 SETATTR, with the guard: "If guard.check is TRUE, the server must compare
/// the value of guard.obj_ctime to the current ctime of the object. If the values are
/// different, the server must preserve the object attributes and must return a status
/// of NFS3ERR_NOT_SYNC."
pub(crate) fn setattr(cx: &Cx<'_>, a: SetAttr3Args) -> SetAttr3Res {
    let (ex, node) = match cx.resolve(&a.object) {
        Ok(r) => r,
        Err(s) => {
            return NfsResult::Fail(
                s,
                SetAttr3Wcc {
                    obj_wcc: WccData::default(),
                },
            )
        }
    };
    let before = node.meta;
    let fail = |s| {
        NfsResult::Fail(
            s,
            SetAttr3Wcc {
                obj_wcc: wcc(ex, Some(&before), &node),
            },
        )
    };
    if a.guard.is_some_and(|ctime| ctime != before.ctime) {
        return fail(NfsStat3::NFS3ERR_NOT_SYNC);
    }
    if cx.read_only {
        return fail(NfsStat3::NFS3ERR_ROFS);
    }
    match cx.as_caller(|| apply_sattr(&node, &a.new_attributes)) {
        Ok(()) => NfsResult::Ok(SetAttr3Wcc {
            obj_wcc: wcc(ex, Some(&before), &node),
        }),
        Err(s) => fail(s),
    }
}

/// Applies `sattr3` to an object: owner, mode, size, then times (size last but for
/// times, since truncation changes mtime).
pub(crate) fn apply_sattr(node: &Node, s: &Sattr3) -> Result<(), NfsStat3> {
    let is_link = node.meta.file_type() == FileType::Symlink;
    if s.uid.is_some() || s.gid.is_some() {
        rustix::fs::chownat(
            &node.fd,
            "",
            s.uid.map(Uid::from_raw),
            s.gid.map(Gid::from_raw),
            AtFlags::EMPTY_PATH,
        )
        .or_stat()?;
    }
    // Linux has no mode on symbolic links; chmod through the link would reach its
    // target, so it is not attempted.
    if let (Some(mode), false) = (s.mode, is_link) {
        rustix::fs::chmodat(
            CWD,
            node.proc_path(),
            Mode::from_raw_mode(mode & 0o7777),
            AtFlags::empty(),
        )
        .or_stat()?;
    }
    if let Some(size) = s.size {
        match node.meta.file_type() {
            FileType::RegularFile => {
                let fd = node.reopen(OFlags::WRONLY)?;
                rustix::fs::ftruncate(&fd, size).or_stat()?;
            }
            FileType::Directory => return Err(NfsStat3::NFS3ERR_ISDIR),
            _ => return Err(NfsStat3::NFS3ERR_INVAL),
        }
    }
    if s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange {
        let times = Timestamps {
            last_access: timespec(s.atime),
            last_modification: timespec(s.mtime),
        };
        match (&node.at, is_link) {
            (Some((parent, name)), true) => {
                rustix::fs::utimensat(parent, name.as_slice(), &times, AtFlags::SYMLINK_NOFOLLOW)
            }
            _ => rustix::fs::utimensat(CWD, node.proc_path(), &times, AtFlags::empty()),
        }
        .or_stat()?;
    }
    Ok(())
}

fn timespec(t: SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        SetTime::ServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        SetTime::ClientTime(t) => Timespec {
            tv_sec: i64::from(t.seconds),
            tv_nsec: i64::from(t.nseconds.min(999_999_999)) as _,
        },
    }
}

/// The kernel rights behind each ACCESS bit, as knfsd's `nfsd_access` maps them: for
/// a directory READ is read, LOOKUP is search, MODIFY/EXTEND/DELETE are write; for a
/// file READ is read, MODIFY/EXTEND are write, EXECUTE is execute; a symbolic link
/// has none.
pub(crate) fn access_rights(file_type: FileType) -> &'static [(u32, Access)] {
    match file_type {
        FileType::Directory => &[
            (access::READ, Access::READ_OK),
            (access::LOOKUP, Access::EXEC_OK),
            (access::MODIFY, Access::WRITE_OK),
            (access::EXTEND, Access::WRITE_OK),
            (access::DELETE, Access::WRITE_OK),
        ],
        FileType::Symlink => &[],
        _ => &[
            (access::READ, Access::READ_OK),
            (access::MODIFY, Access::WRITE_OK),
            (access::EXTEND, Access::WRITE_OK),
            (access::EXECUTE, Access::EXEC_OK),
        ],
    }
}

/// The kernel rights the ACCESS bits `bits` ask of an object of `file_type`
/// ([`access_rights`]): each once, however many bits map to it.
pub(crate) fn wanted_rights(file_type: FileType, bits: u32) -> Access {
    access_rights(file_type)
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .fold(Access::empty(), |acc, (_, right)| acc | *right)
}

/// Which of the rights `wanted` the kernel grants the caller on `node`, asked as the
/// caller; those the permission bits predict granted in one check
/// (`faccess::granted`: the answer is the kernel's either way).
pub(crate) fn granted_rights(cx: &Cx<'_>, node: &Node, wanted: Access) -> Access {
    let m = &node.meta;
    let likely = crate::faccess::likely_granted(
        m.mode,
        (m.uid, m.gid),
        (cx.id.uid, cx.id.gid, &cx.id.groups),
    );
    cx.as_caller(|| crate::faccess::granted(|r| node.access(r).is_ok(), wanted, likely))
}

/// §3.3.4 ACCESS: the kernel checks each right as the caller (faccessat with
/// AT_EACCESS, which uses the file-system ids), mapped as [`access_rights`] says.
/// Rights an earlier operation of the same NFSv4 COMPOUND had the kernel check
/// (OPEN, `crate::seen`) are not asked again.
pub(crate) fn access(cx: &Cx<'_>, a: Access3Args) -> Access3Res {
    let (ex, node) = match cx.resolve(&a.object) {
        Ok(r) => r,
        Err(s) => {
            return NfsResult::Fail(
                s,
                ObjAttrFail {
                    obj_attributes: None,
                },
            )
        }
    };
    let table = access_rights(node.meta.file_type());
    let wanted = wanted_rights(node.meta.file_type(), a.access);
    let rights = match cx.seen().rights(&a.object) {
        Some(known) if known.checked.contains(wanted) => known.granted & wanted,
        _ => granted_rights(cx, &node, wanted),
    };
    let mut granted = table
        .iter()
        .filter(|(_, right)| rights.contains(*right))
        .fold(0, |acc, (bit, _)| acc | bit);
    if node.meta.file_type() == FileType::Symlink {
        granted = a.access & access::READ;
    }
    if cx.read_only {
        granted &= !(access::MODIFY | access::EXTEND | access::DELETE);
    }
    NfsResult::Ok(Access3ResOk {
        obj_attributes: resolved_attr(ex, &node),
        access: granted & a.access,
    })
}
