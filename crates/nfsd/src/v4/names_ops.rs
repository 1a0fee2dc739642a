//! Operations that change a directory's names (RFC 8881 §18.4 CREATE, §18.9 LINK,
//! §18.25 REMOVE, §18.26 RENAME), through NFSv3's ([`crate::proc::names`]): the
//! same write permission (`ro` exports: NFS4ERR_ROFS), identity, name checks and
//! confinement. The pseudo file system cannot be changed: NFS4ERR_ROFS. During the
//! grace period REMOVE and RENAME are NFS4ERR_GRACE (as knfsd: a name a client is
//! about to reclaim an open of stays).
//!
//! Their `change_info4` comes from NFSv3's weak cache consistency data: `before` and
//! `after` are the directory's `change` attribute ([`super::attrs`]: its ctime) read
//! around the change, with the directory locked against other changes made through
//! this server ([`crate::dir_locks`]). `atomic` (§3.3.6) is TRUE only where the export
//! is declared `nfsd_only`: otherwise a local process may change the directory
//! between the two looks.

use nfs3::dir::{
    Create3Res, DeviceData3, Link3Args, MkDir3Args, Mknod3Args, MknodData3, Remove3Args,
    Rename3Args, Symlink3Args, SymlinkData3,
};
use nfs3::{
    DirOpArgs3, Filename3, Ftype3, NfsFh3, NfsPath3, NfsResult, NfsStat3, NfsTime3, SpecData3,
    WccData,
};
use nfs4::dir::{
    Create4Args, Create4Res, Create4ResOk, CreateType4, Link4Args, Link4Res, Link4ResOk, NfsFtype4,
    Remove4Args, Remove4Res, Remove4ResOk, Rename4Args, Rename4Res, Rename4ResOk,
};
use nfs4::{ChangeInfo4, NfsStat4, Res4};
use xdr::Bytes;

use super::compound::Compound;
use super::errors::stat4;
use super::fh_ops::component;
use super::pseudo::Fh;
use crate::nfs::Cx;

/// `change` as [`super::attrs`] reports it, from a ctime.
pub(crate) fn change(t: NfsTime3) -> u64 {
    u64::from(t.seconds) * 1_000_000_000 + u64::from(t.nseconds)
}

/// `change_info4` from NFSv3's wcc data (module docs), atomic when the export is
/// `nfsd_only` ([`Cx::nfsd_only`]) and both looks were taken.
pub(crate) fn cinfo(cx3: &Cx<'_>, w: &WccData) -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: cx3.nfsd_only && w.before.is_some() && w.after.is_some(),
        before: w.before.as_ref().map_or(0, |b| change(b.ctime)),
        after: w.after.as_ref().map_or(0, |a| change(a.ctime)),
    }
}

/// The directory a changing operation works in: an export's, not a pseudo one.
fn export_dir(fh: &Fh) -> Result<NfsFh3, NfsStat4> {
    match fh {
        Fh::Export(fh) => Ok(fh.clone()),
        Fh::Pseudo(_) => Err(NfsStat4::NFS4ERR_ROFS),
    }
}

/// NFSv3's NOTDIR for the directory `fh`, made NFSv4's: NFS4ERR_SYMLINK for a
/// symbolic link (§18.25.3, §18.26.3), else as mapped.
pub(crate) fn dir_error(cx: &Compound<'_>, fh: &NfsFh3, s: NfsStat3) -> NfsStat4 {
    if s == NfsStat3::NFS3ERR_NOTDIR {
        if let Ok((_, n)) = cx.table.resolve(fh, cx.caller) {
            if n.meta.file_type() == rustix::fs::FileType::Symlink {
                return NfsStat4::NFS4ERR_SYMLINK;
            }
        }
    }
    stat4(s)
}

/// `name` in directory `dir` through NFSv3's LOOKUP: its handle.
pub(crate) fn lookup3(cx3: &Cx<'_>, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, NfsStat3> {
    let args = nfs3::dir::Lookup3Args {
        what: dirop(dir, name),
    };
    match crate::proc::names::lookup(cx3, args) {
        NfsResult::Ok(l) => Ok(l.object),
        NfsResult::Fail(s, _) => Err(s),
    }
}

/// The handle of what a create made as `name` in `dir`: the file layer's (`obj`), or,
/// when it made the object but could not give its handle, looked up.
pub(crate) fn made_handle(
    cx3: &Cx<'_>,
    dir: &NfsFh3,
    name: &[u8],
    obj: Option<NfsFh3>,
) -> Result<NfsFh3, NfsStat4> {
    match obj {
        Some(fh) => Ok(fh),
        None => lookup3(cx3, dir, name).map_err(stat4),
    }
}

pub(crate) fn dirop(dir: &NfsFh3, name: &[u8]) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Filename3(Bytes::copy_from_slice(name)),
    }
}

/// §18.25 REMOVE: a file or a directory (which must be empty: NFS4ERR_NOTEMPTY),
/// NFSv3's REMOVE, or RMDIR when the name is a directory.
pub(crate) fn remove(cx: &mut Compound<'_>, a: &Remove4Args) -> Remove4Res {
    let run = || -> Result<Remove4ResOk, NfsStat4> {
        let dir = export_dir(cx.current()?)?;
        cx.not_in_grace()?;
        let name = component(&a.target)?;
        let cx3 = Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(&dir));
        let args = || Remove3Args {
            object: dirop(&dir, name),
        };
        let mut r = crate::proc::names::remove(&cx3, args(), false);
        if let NfsResult::Fail(NfsStat3::NFS3ERR_ISDIR, _) = r {
            r = crate::proc::names::remove(&cx3, args(), true);
        }
        match r {
            NfsResult::Ok(ok) => Ok(Remove4ResOk {
                cinfo: cinfo(&cx3, &ok.dir_wcc),
            }),
            NfsResult::Fail(s, _) => Err(dir_error(cx, &dir, s)),
        }
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}

/// §18.26 RENAME: `oldname` in the saved directory to `newname` in the current one
/// (no saved filehandle: NFS4ERR_NOFILEHANDLE, §18.26.3), through NFSv3's RENAME
/// (different exports: NFS4ERR_XDEV).
pub(crate) fn rename(cx: &mut Compound<'_>, a: &Rename4Args) -> Rename4Res {
    let run = || -> Result<Rename4ResOk, NfsStat4> {
        let to = export_dir(cx.current()?)?;
        cx.not_in_grace()?;
        let from = export_dir(cx.saved.as_ref().ok_or(NfsStat4::NFS4ERR_NOFILEHANDLE)?)?;
        let oldname = component(&a.oldname)?;
        let newname = component(&a.newname)?;
        let cx3 = Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(&from));
        let args = Rename3Args {
            from: dirop(&from, oldname),
            to: dirop(&to, newname),
        };
        match crate::proc::names::rename(&cx3, args) {
            NfsResult::Ok(ok) => Ok(Rename4ResOk {
                source_cinfo: cinfo(&cx3, &ok.fromdir_wcc),
                target_cinfo: cinfo(&cx3, &ok.todir_wcc),
            }),
            NfsResult::Fail(s, _) => Err(dir_error(cx, &from, s)),
        }
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}

/// §18.4 CREATE: a directory, symbolic link, device, socket or FIFO (regular files
/// are OPEN's: NFS4ERR_BADTYPE, §18.4.3), with `createattrs`
/// ([`super::setattrs`]), through NFSv3's MKDIR, SYMLINK or MKNOD. The new object
/// becomes the current filehandle (§18.4.3).
pub(crate) fn create(cx: &mut Compound<'_>, a: &Create4Args) -> Create4Res {
    let run = |cx: &mut Compound<'_>| -> Result<Create4ResOk, NfsStat4> {
        let dir = export_dir(cx.current()?)?;
        let name = component(&a.objname)?;
        let attrs = super::setattrs::parse(&a.createattrs, false, cx.server.ids())?;
        let cx3 = Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(&dir));
        let dir_op = dirop(&dir, name);
        let sattr = attrs.sattr.clone();
        let spec = |s: &nfs4::dir::SpecData4| SpecData3 {
            specdata1: s.specdata1,
            specdata2: s.specdata2,
        };
        let device = |t, s| {
            MknodData3::Device(
                t,
                DeviceData3 {
                    dev_attributes: sattr.clone(),
                    spec: s,
                },
            )
        };
        let r: Create3Res = match &a.objtype {
            CreateType4::Link(text) => crate::proc::names::symlink(
                &cx3,
                Symlink3Args {
                    dir_op,
                    symlink: SymlinkData3 {
                        symlink_attributes: sattr.clone(),
                        symlink_data: NfsPath3(text.0.clone()),
                    },
                },
            ),
            CreateType4::Blk(s) => crate::proc::names::mknod(
                &cx3,
                Mknod3Args {
                    dir_op,
                    what: device(Ftype3::NF3BLK, spec(s)),
                },
            ),
            CreateType4::Chr(s) => crate::proc::names::mknod(
                &cx3,
                Mknod3Args {
                    dir_op,
                    what: device(Ftype3::NF3CHR, spec(s)),
                },
            ),
            CreateType4::Other(NfsFtype4::NF4DIR) => crate::proc::names::mkdir(
                &cx3,
                MkDir3Args {
                    dir_op,
                    attributes: sattr.clone(),
                },
            ),
            CreateType4::Other(t @ (NfsFtype4::NF4SOCK | NfsFtype4::NF4FIFO)) => {
                let t = if *t == NfsFtype4::NF4SOCK {
                    Ftype3::NF3SOCK
                } else {
                    Ftype3::NF3FIFO
                };
                crate::proc::names::mknod(
                    &cx3,
                    Mknod3Args {
                        dir_op,
                        what: MknodData3::Pipe(t, sattr.clone()),
                    },
                )
            }
            CreateType4::Other(_) => return Err(NfsStat4::NFS4ERR_BADTYPE),
        };
        match r {
            NfsResult::Ok(ok) => {
                let fh = made_handle(&cx3, &dir, name, ok.obj)?;
                cx.current = Some(Fh::Export(fh));
                Ok(Create4ResOk {
                    cinfo: cinfo(&cx3, &ok.dir_wcc),
                    attrset: attrs.set,
                })
            }
            NfsResult::Fail(s, _) => Err(dir_error(cx, &dir, s)),
        }
    };
    run(cx).map_or_else(Res4::Err, Res4::Ok)
}

/// §18.9 LINK: a new name `newname` in the current directory for the saved
/// filehandle's object (no saved filehandle: NFS4ERR_NOFILEHANDLE), through NFSv3's
/// LINK (another export: NFS4ERR_XDEV). A pseudo directory as the object is
/// NFS4ERR_ISDIR (no hard links to directories), as the target NFS4ERR_ROFS.
pub(crate) fn link(cx: &mut Compound<'_>, a: &Link4Args) -> Link4Res {
    let run = || -> Result<Link4ResOk, NfsStat4> {
        let dir = export_dir(cx.current()?)?;
        let file = match cx.saved.as_ref().ok_or(NfsStat4::NFS4ERR_NOFILEHANDLE)? {
            Fh::Export(fh) => fh.clone(),
            Fh::Pseudo(_) => return Err(NfsStat4::NFS4ERR_ISDIR),
        };
        let name = component(&a.newname)?;
        let cx3 = Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(&dir));
        let args = Link3Args {
            file,
            link: dirop(&dir, name),
        };
        match crate::proc::names::link(&cx3, args) {
            NfsResult::Ok(ok) => Ok(Link4ResOk {
                cinfo: cinfo(&cx3, &ok.linkdir_wcc),
            }),
            NfsResult::Fail(s, _) => Err(dir_error(cx, &dir, s)),
        }
    };
    run().map_or_else(Res4::Err, Res4::Ok)
}
