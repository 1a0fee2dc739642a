//! Open state operations (RFC 8881 §18.16 OPEN, §18.2 CLOSE, §18.18 OPEN_DOWNGRADE,
//! §18.48 TEST_STATEID, §18.38 FREE_STATEID): the file work through NFSv3's file
//! layer (LOOKUP, CREATE, permission by opening as the caller), the state in
//! [`super::state::opens`].
//!
//! OPEN serves `CLAIM_NULL` (a name in the current directory, created if asked) and
//! `CLAIM_FH` (the current filehandle), NFS4ERR_GRACE during the grace period or before
//! the client's RECLAIM_COMPLETE (§18.51.3), and
//! `CLAIM_PREVIOUS` (the current filehandle, reopened after a restart) while the
//! client may reclaim, NFS4ERR_NO_GRACE otherwise ([`super::state::grace`],
//! §18.16.3). The `CLAIM_DELEG*` claims are NFS4ERR_NOTSUPP: no delegation is ever
//! granted. No delegation is offered either: OPEN_DELEGATE_NONE, or
//! OPEN_DELEGATE_NONE_EXT with WND4_NOT_WANTED / WND4_RESOURCE when the client
//! stated a want (§18.16.3).
//!
//! Creation (§18.16.3 `createhow4`): UNCHECKED4 and GUARDED4 are NFSv3's UNCHECKED
//! and GUARDED with the initial attributes (a `size` other than 0 is ignored, as the
//! RFC asks); EXCLUSIVE4 and EXCLUSIVE4_1 are NFSv3's EXCLUSIVE (the verifier kept in
//! the file's atime and mtime, so a retransmission finds it), EXCLUSIVE4_1's
//! attributes applied after. `suppattr_exclcreat` ([`super::attrs`]) says which:
//! mode, owner and owner_group.
//!
//! Permission: opening a file that exists is checked as the caller by the kernel's
//! access check for the access asked (`faccessat2` with `AT_EACCESS` on its
//! descriptor, [`crate::vfs::Node::access`], as knfsd checks `inode_permission`
//! without opening the file); a
//! file this OPEN created is the caller's to use whatever its mode (knfsd's
//! `op_created`: "owner override"). A write open on a read-only export is
//! NFS4ERR_ROFS.

use nfs3::dir::{Create3Args, Create3Res, CreateHow3};
use nfs3::{NfsFh3, NfsResult, NfsStat3, Sattr3};
use nfs4::state::*;
use nfs4::{Bitmap4, ChangeInfo4, NfsStat4, Res4, StateId4};
use rustix::fs::{Access, FileType};

use super::compound::Compound;
use super::errors::stat4;
use super::fh_ops::component;
use super::names_ops::{change, cinfo, dir_error, dirop, made_handle};
use super::pseudo::Fh;
use super::state::opens::{modes_valid, FileKey};

/// `OPEN4_SHARE_ACCESS_WANT_NO_DELEG` (RFC 8881 §18.16.3).
const WANT_NO_DELEG: u32 = 0x0400;
/// `why_no_delegation4`: WND4_NOT_WANTED.
const WND4_NOT_WANTED: u32 = 0;
/// `why_no_delegation4`: WND4_RESOURCE.
const WND4_RESOURCE: u32 = 2;

/// The attributes EXCLUSIVE4_1 may set (`suppattr_exclcreat`): not the times, which
/// hold the verifier.
pub(crate) const EXCLCREAT: &[u32] = &[
    super::attrs::fattr4::MODE,
    super::attrs::fattr4::OWNER,
    super::attrs::fattr4::OWNER_GROUP,
];

/// The export file an operation on open state works on, and its key in the open
/// table: a pseudo directory has no open state (NFS4ERR_BAD_STATEID, as a stateid
/// cannot name it).
pub(crate) fn state_file(cx: &Compound<'_>) -> Result<(NfsFh3, FileKey), NfsStat4> {
    match cx.current()? {
        Fh::Export(fh) => Ok((fh.clone(), fh.0.clone())),
        Fh::Pseudo(_) => Err(NfsStat4::NFS4ERR_BAD_STATEID),
    }
}

/// What OPEN found or made.
struct Target {
    fh: NfsFh3,
    cinfo: ChangeInfo4,
    attrset: Bitmap4,
    /// Made by this OPEN (or a retransmission of its exclusive create).
    created: bool,
}

/// §18.16 OPEN (module docs).
pub(crate) fn open(cx: &mut Compound<'_>, a: &Open4Args) -> Open4Res {
    let run = |cx: &mut Compound<'_>| -> Result<Open4ResOk, NfsStat4> {
        let client = cx.client()?;
        let access = a.share_access & 0xFF;
        let want = a.share_access & !0xFF;
        if !modes_valid(access, a.share_deny) {
            return Err(NfsStat4::NFS4ERR_INVAL);
        }
        let this_file = |cx: &Compound<'_>| match cx.current()? {
            Fh::Pseudo(_) => Err(NfsStat4::NFS4ERR_ISDIR),
            Fh::Export(fh) => Ok(Target {
                fh: fh.clone(),
                cinfo: ChangeInfo4::default(),
                attrset: Bitmap4::default(),
                created: false,
            }),
        };
        let target = match &a.claim {
            OpenClaim4::Null(name) => {
                cx.may_lock_anew()?;
                open_by_name(cx, name, &a.openhow)?
            }
            OpenClaim4::Fh => {
                cx.may_lock_anew()?;
                this_file(cx)?
            }
            // A reclaim of an open from before the restart: the current filehandle
            // is the file (§18.16.3).
            OpenClaim4::Previous(_) => {
                if !cx.server.state().may_reclaim(client, cx.now) {
                    return Err(NfsStat4::NFS4ERR_NO_GRACE);
                }
                this_file(cx)?
            }
            OpenClaim4::DelegateCur(..)
            | OpenClaim4::DelegatePrev(_)
            | OpenClaim4::DelegCurFh(_)
            | OpenClaim4::DelegPrevFh => return Err(NfsStat4::NFS4ERR_NOTSUPP),
        };
        check_open(cx, &target, access)?;
        let stateid = cx.server.state().opens_mut().open(
            client,
            &a.owner.owner,
            &target.fh.0,
            access,
            a.share_deny,
        )?;
        cx.current = Some(Fh::Export(target.fh));
        cx.current_stateid = Some(stateid);
        let delegation = match want & 0xFF00 {
            0 => OpenDelegation4::None,
            WANT_NO_DELEG => OpenDelegation4::NoneExt(WND4_NOT_WANTED, None),
            _ => OpenDelegation4::NoneExt(WND4_RESOURCE, Some(false)),
        };
        Ok(Open4ResOk {
            stateid,
            cinfo: target.cinfo,
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset: target.attrset,
            delegation,
        })
    };
    run(cx).map_or_else(Res4::Err, Res4::Ok)
}

/// CLAIM_NULL: `name` in the current directory, created as `how` says.
fn open_by_name(
    cx: &Compound<'_>,
    name: &nfs4::Component4,
    how: &OpenFlag4,
) -> Result<Target, NfsStat4> {
    let dir = match cx.current()? {
        Fh::Pseudo(_) if how.0.is_some() => return Err(NfsStat4::NFS4ERR_ROFS),
        // Every name in a pseudo directory is a directory (or nothing).
        Fh::Pseudo(_) => {
            return Err(match super::fh_ops::child(cx, name) {
                Ok(_) => NfsStat4::NFS4ERR_ISDIR,
                Err(s) => s,
            })
        }
        Fh::Export(fh) => fh.clone(),
    };
    let name = component(name)?;
    let cx3 = cx.cx3(&dir);
    let Some(how) = &how.0 else {
        // The directory's change attribute comes from the lookup's own resolve of it
        // (one stat of the directory, not two); an OPEN that creates nothing changes
        // nothing in it: before = after, one look, atomic where the export says no
        // one else changes it either (`nfsd_only`).
        let args = nfs3::dir::Lookup3Args {
            what: dirop(&dir, name),
        };
        return match crate::proc::names::lookup(&cx3, args) {
            NfsResult::Ok(l) => {
                let before = l.dir_attributes.as_ref().map_or(0, |a| change(a.ctime));
                Ok(Target {
                    fh: l.object,
                    cinfo: ChangeInfo4 {
                        atomic: cx3.nfsd_only,
                        before,
                        after: before,
                    },
                    attrset: Bitmap4::default(),
                    created: false,
                })
            }
            NfsResult::Fail(s, _) => Err(dir_error(cx, &dir, s)),
        };
    };
    let (how3, after) = match how {
        CreateHow4::Unchecked(f) | CreateHow4::Guarded(f) => {
            let mut parsed = super::setattrs::parse(f, true, cx.server.ids())?;
            // §18.16.3: a size other than 0 at create is ignored.
            if parsed.sattr.size.is_some_and(|s| s != 0) {
                parsed.sattr.size = None;
                parsed.set.clear(super::attrs::fattr4::SIZE);
            }
            let sattr = parsed.sattr.clone();
            let how3 = if matches!(how, CreateHow4::Guarded(_)) {
                CreateHow3::Guarded(sattr)
            } else {
                CreateHow3::Unchecked(sattr)
            };
            (how3, Some((parsed, false)))
        }
        CreateHow4::Exclusive(v) => (CreateHow3::Exclusive(*v), None),
        CreateHow4::Exclusive41(v, f) => {
            let parsed = super::setattrs::parse(f, false, cx.server.ids())?;
            let allowed = (0..parsed.set.0.len() as u32 * 32)
                .filter(|&b| parsed.set.is_set(b))
                .all(|b| EXCLCREAT.contains(&b));
            if !allowed {
                return Err(NfsStat4::NFS4ERR_INVAL);
            }
            (CreateHow3::Exclusive(*v), Some((parsed, true)))
        }
    };
    let (r, made): (Create3Res, bool) = crate::proc::names::create_telling(
        &cx3,
        Create3Args {
            dir_op: dirop(&dir, name),
            how: how3,
        },
    );
    let ok = match r {
        NfsResult::Ok(ok) => ok,
        NfsResult::Fail(s, _) => return Err(dir_error(cx, &dir, s)),
    };
    let fh = made_handle(&cx3, &dir, name, ok.obj)?;
    let mut attrset = Bitmap4::default();
    if let Some((parsed, apply_after)) = after {
        if apply_after && parsed.sattr != Sattr3::default() {
            let r = crate::proc::attr::setattr(
                &cx.cx3(&fh),
                nfs3::attr::SetAttr3Args {
                    object: fh.clone(),
                    new_attributes: parsed.sattr,
                    guard: None,
                },
            );
            if let NfsResult::Fail(s, _) = r {
                return Err(stat4(s));
            }
        }
        attrset = parsed.set;
    }
    Ok(Target {
        fh,
        cinfo: cinfo(&cx3, &ok.dir_wcc),
        attrset,
        created: made || matches!(how, CreateHow4::Exclusive(_) | CreateHow4::Exclusive41(..)),
    })
}

/// The checks on the file OPEN opens: a regular file (§18.16.3: NFS4ERR_ISDIR,
/// NFS4ERR_SYMLINK, else NFS4ERR_WRONG_TYPE), writable export for write access,
/// and the caller's permission (module docs).
fn check_open(cx: &Compound<'_>, t: &Target, access: u32) -> Result<(), NfsStat4> {
    let cx3 = cx.cx3(&t.fh);
    let (ex, node) = cx3.resolve(&t.fh).map_err(stat4)?;
    // OPEN's last look at the file (the rest changes only open state): what the
    // Linux client's ACCESS and GETATTR after it take (`crate::seen`).
    cx3.seen().keep_after_change(&t.fh, ex, || node.clone());
    match node.meta.file_type() {
        FileType::RegularFile => {}
        FileType::Directory => return Err(NfsStat4::NFS4ERR_ISDIR),
        FileType::Symlink => return Err(NfsStat4::NFS4ERR_SYMLINK),
        _ => return Err(NfsStat4::NFS4ERR_WRONG_TYPE),
    }
    let write = access & OPEN4_SHARE_ACCESS_WRITE != 0;
    if write && cx3.read_only {
        return Err(NfsStat4::NFS4ERR_ROFS);
    }
    if t.created {
        return Ok(());
    }
    let mode = match access {
        OPEN4_SHARE_ACCESS_READ => Access::READ_OK,
        OPEN4_SHARE_ACCESS_WRITE => Access::WRITE_OK,
        _ => Access::READ_OK | Access::WRITE_OK,
    };
    // With an ACCESS next (the Linux client's OPEN), its rights are checked here too,
    // under the same identity switch, and kept for it (`crate::seen`): one switch
    // and fewer checks for the two. A refusal is checked again alone, for its errno.
    if let Some(bits) = cx.next_access {
        let wanted = mode | crate::proc::attr::wanted_rights(node.meta.file_type(), bits);
        let granted = crate::proc::attr::granted_rights(&cx3, &node, wanted);
        let rights = crate::seen::Rights {
            checked: wanted,
            granted,
        };
        cx3.seen().keep_rights(&t.fh, rights);
        if granted.contains(mode) {
            return Ok(());
        }
    }
    cx3.as_caller(|| node.access(mode))
        .map_err(crate::errno::nfsstat3_from_errno)
        .map_err(|s| match s {
            NfsStat3::NFS3ERR_ACCES | NfsStat3::NFS3ERR_PERM => NfsStat4::NFS4ERR_ACCESS,
            s => stat4(s),
        })
}

/// §18.2 CLOSE: ends the open; the result is the invalid stateid (§18.2.4: the
/// client must not use it).
pub(crate) fn close(cx: &mut Compound<'_>, a: &Close4Args) -> Close4Res {
    let run = |cx: &mut Compound<'_>| -> Result<StateId4, NfsStat4> {
        let client = cx.client()?;
        let id = cx.stateid(&a.open_stateid)?;
        let (_, file) = state_file(cx)?;
        let gone = cx.server.state().close(client, &id, &file)?;
        cx.server.locks.release(gone);
        cx.current_stateid = Some(StateId4::INVALID);
        Ok(StateId4::INVALID)
    };
    run(cx).map_or_else(Res4::Err, Res4::Ok)
}

/// §18.18 OPEN_DOWNGRADE: the open keeps `share_access` and `share_deny`, which
/// must be within what it has.
pub(crate) fn open_downgrade(cx: &mut Compound<'_>, a: &OpenDowngrade4Args) -> OpenDowngrade4Res {
    let run = |cx: &mut Compound<'_>| -> Result<StateId4, NfsStat4> {
        let client = cx.client()?;
        let id = cx.stateid(&a.open_stateid)?;
        let access = a.share_access & 0xFF;
        if !modes_valid(access, a.share_deny) {
            return Err(NfsStat4::NFS4ERR_INVAL);
        }
        let (_, file) = state_file(cx)?;
        let new =
            cx.server
                .state()
                .opens_mut()
                .downgrade(client, &id, &file, access, a.share_deny)?;
        cx.current_stateid = Some(new);
        Ok(new)
    };
    run(cx).map_or_else(Res4::Err, Res4::Ok)
}

/// §18.48 TEST_STATEID: one status per stateid, open or lock; the special stateids are never
/// valid to test (NFS4ERR_BAD_STATEID, §18.48.3).
pub(crate) fn test_stateid(cx: &mut Compound<'_>, a: &TestStateId4Args) -> TestStateId4Res {
    let client = match cx.client() {
        Ok(c) => c,
        Err(s) => return Res4::Err(s),
    };
    let state = cx.server.state();
    let codes =
        a.0.iter()
            .map(|id| match state.locks().test(client, id) {
                Some(s) => s,
                None => state.opens().test(client, id),
            })
            .collect();
    Res4::Ok(TestStateId4ResOk(codes))
}

/// §18.38 FREE_STATEID: of an open stateid, NFS4ERR_LOCKS_HELD (CLOSE ends an
/// open); of a lock stateid, [`super::lock_ops::free_lock_stateid`].
pub(crate) fn free_stateid(cx: &mut Compound<'_>, a: &FreeStateId4Args) -> NfsStat4 {
    let run = || -> Result<NfsStat4, NfsStat4> {
        let client = cx.client()?;
        let id = cx.stateid(&a.fsa_stateid)?;
        let is_lock = cx.server.state().locks().get(&id).is_some();
        if is_lock {
            return Ok(super::lock_ops::free_lock_stateid(cx, client, &id));
        }
        Ok(cx.server.state().opens().free(client, &id))
    };
    run().unwrap_or_else(|s| s)
}
