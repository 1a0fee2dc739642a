//! Filehandle, lookup and attribute operations (RFC 8881 §18.19 PUTFH, §18.20
//! PUTPUBFH, §18.21 PUTROOTFH, §18.8 GETFH, §18.28 SAVEFH, §18.27 RESTOREFH, §18.13
//! LOOKUP, §18.14 LOOKUPP, §18.1 ACCESS, §18.7 GETATTR, §18.24 READLINK, §18.29
//! SECINFO, §18.45 SECINFO_NO_NAME), on the pseudo file system ([`super::pseudo`])
//! or through the file layer NFSv3 uses ([`crate::proc`], [`crate::nfs::Table`]):
//! the same handle checks, export access rules, identities and path confinement.

use nfs3::attr::Access3Args;
use nfs3::dir::{Lookup3Args, ReadLink3Args};
use nfs3::{DirOpArgs3, Filename3, NfsFh3, NfsResult};
use nfs4::fh::*;
use nfs4::io::{ReadLink4Res, ReadLink4ResOk};
use nfs4::session::AUTH_SYS;
use nfs4::{DdpLinkText4, NfsStat4, Res4, Utf8Str};
use rustix::fs::FileType;

use super::attrs::{Space, Values};
use super::compound::Compound;
use super::errors::stat4;
use super::pseudo::{self, Fh};
use crate::nfs::Cx;

impl Compound<'_> {
    /// The NFSv3 file layer's context for an operation on `fh` (identity and
    /// read-only from the caller's options on its export, as for NFSv3).
    pub(crate) fn cx3<'b>(&'b self, fh: &NfsFh3) -> Cx<'b> {
        Cx::new(&self.server.nfs, &self.table, self.caller, Some(fh))
    }
}

/// §18.19 PUTFH.
pub(crate) fn putfh(cx: &mut Compound<'_>, a: &PutFh4Args) -> NfsStat4 {
    match Fh::from_wire(&a.object, &cx.table, cx.caller) {
        Ok(fh) => {
            cx.current = Some(fh);
            NfsStat4::NFS4_OK
        }
        Err(s) => s,
    }
}

/// §18.21 PUTROOTFH, and §18.20 PUTPUBFH: the public filehandle is the root, as
/// knfsd makes it (§18.20.4 lets it be any filehandle the server chooses).
pub(crate) fn putrootfh(cx: &mut Compound<'_>) -> NfsStat4 {
    cx.current = Some(pseudo::root(&cx.table, cx.caller));
    NfsStat4::NFS4_OK
}

/// §18.8 GETFH.
pub(crate) fn getfh(cx: &mut Compound<'_>) -> GetFh4Res {
    match cx.current() {
        Ok(fh) => Res4::Ok(GetFh4ResOk {
            object: fh.to_wire(),
        }),
        Err(s) => Res4::Err(s),
    }
}

/// §18.28 SAVEFH.
pub(crate) fn savefh(cx: &mut Compound<'_>) -> NfsStat4 {
    match cx.current() {
        Ok(fh) => {
            cx.saved = Some(fh.clone());
            cx.saved_stateid = cx.current_stateid;
            NfsStat4::NFS4_OK
        }
        Err(s) => s,
    }
}

/// §18.27 RESTOREFH: without a saved filehandle, NFS4ERR_RESTOREFH (§15.1.16.5).
pub(crate) fn restorefh(cx: &mut Compound<'_>) -> NfsStat4 {
    match &cx.saved {
        Some(fh) => {
            cx.current = Some(fh.clone());
            cx.current_stateid = cx.saved_stateid;
            NfsStat4::NFS4_OK
        }
        None => NfsStat4::NFS4ERR_RESTOREFH,
    }
}

/// A `component4` from a client, checked (RFC 8881 §14.5, §18.13.3): empty or not
/// UTF-8, NFS4ERR_INVAL; `.`, `..`, or holding `/` or NUL, NFS4ERR_BADNAME (no such
/// name can be one component; knfsd's `check_filename`); longer than a file system
/// name, NFS4ERR_NAMETOOLONG.
pub(crate) fn component(name: &Utf8Str) -> Result<&[u8], NfsStat4> {
    let n = &name.0[..];
    if n.is_empty() || std::str::from_utf8(n).is_err() {
        return Err(NfsStat4::NFS4ERR_INVAL);
    }
    if n == b"." || n == b".." || n.iter().any(|&b| b == b'/' || b == 0) {
        return Err(NfsStat4::NFS4ERR_BADNAME);
    }
    if n.len() > crate::vfs::NAME_MAX {
        return Err(NfsStat4::NFS4ERR_NAMETOOLONG);
    }
    Ok(n)
}

/// The error for a directory operation on an object that is not a directory
/// (§18.13.3, §18.14.3): NFS4ERR_SYMLINK for a symbolic link, else NFS4ERR_NOTDIR.
fn not_dir(cx: &Compound<'_>, fh: &NfsFh3) -> NfsStat4 {
    match cx.table.resolve(fh, cx.caller) {
        Ok((_, node)) if node.meta.file_type() == FileType::Symlink => NfsStat4::NFS4ERR_SYMLINK,
        Ok(_) => NfsStat4::NFS4ERR_NOTDIR,
        Err(s) => stat4(s),
    }
}

/// `name` in directory `fh` of an export, through NFSv3's LOOKUP (search
/// permission as the caller, confinement to the export).
fn lookup_in(cx: &Compound<'_>, fh: &NfsFh3, name: &[u8]) -> Result<Fh, NfsStat4> {
    let a = Lookup3Args {
        what: DirOpArgs3 {
            dir: fh.clone(),
            name: Filename3(xdr::Bytes::copy_from_slice(name)),
        },
    };
    match crate::proc::names::lookup(&cx.cx3(fh), a) {
        NfsResult::Ok(ok) => Ok(Fh::Export(ok.object)),
        NfsResult::Fail(nfs3::NfsStat3::NFS3ERR_NOTDIR, _) => Err(not_dir(cx, fh)),
        NfsResult::Fail(s, _) => Err(stat4(s)),
    }
}

/// `name` in the current directory (LOOKUP, SECINFO).
pub(crate) fn child(cx: &Compound<'_>, name: &Utf8Str) -> Result<Fh, NfsStat4> {
    let name = component(name)?;
    match cx.current()? {
        Fh::Pseudo(dir) => pseudo::lookup(&cx.table, cx.caller, dir, name),
        Fh::Export(fh) => lookup_in(cx, fh, name),
    }
}

/// §18.13 LOOKUP.
pub(crate) fn lookup(cx: &mut Compound<'_>, a: &Lookup4Args) -> NfsStat4 {
    match child(cx, &a.objname) {
        Ok(fh) => {
            cx.current = Some(fh);
            NfsStat4::NFS4_OK
        }
        Err(s) => s,
    }
}

/// §18.14 LOOKUPP: the parent directory; from an export's root, the pseudo
/// directory above it; from the root, NFS4ERR_NOENT.
pub(crate) fn lookupp(cx: &mut Compound<'_>) -> NfsStat4 {
    let parent = match cx.current() {
        Err(s) => Err(s),
        Ok(Fh::Pseudo(dir)) => pseudo::parent(dir),
        Ok(Fh::Export(fh)) => match cx.table.resolve(fh, cx.caller) {
            Err(s) => Err(stat4(s)),
            Ok((ex, node)) if ex.is_root(node.meta.key) => {
                pseudo::above_export(&cx.table, cx.caller, fh).ok_or(NfsStat4::NFS4ERR_NOENT)
            }
            Ok(_) => lookup_in(cx, fh, b".."),
        },
    };
    match parent {
        Ok(fh) => {
            cx.current = Some(fh);
            NfsStat4::NFS4_OK
        }
        Err(s) => s,
    }
}

/// The ACCESS bits that mean something for a directory and for other objects, as
/// NFSv3's ACCESS checks them ([`crate::proc::attr`]); `supported` is the request
/// restricted to them (§18.1.3: the bits the server could check).
const DIR_BITS: u32 =
    ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE;
const FILE_BITS: u32 = ACCESS4_READ | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_EXECUTE;

/// §18.1 ACCESS. ACCESS4 bits are NFSv3's (RFC 1813 §3.3.4), so NFSv3's ACCESS
/// checks them as the caller. A pseudo directory may be read and searched, never
/// changed.
pub(crate) fn access(cx: &mut Compound<'_>, a: &Access4Args) -> Access4Res {
    let fh = match cx.current() {
        Ok(Fh::Pseudo(_)) => {
            let supported = a.access & DIR_BITS;
            return Res4::Ok(Access4ResOk {
                supported,
                access: supported & (ACCESS4_READ | ACCESS4_LOOKUP),
            });
        }
        Ok(Fh::Export(fh)) => fh.clone(),
        Err(s) => return Res4::Err(s),
    };
    let a3 = Access3Args {
        object: fh.clone(),
        access: a.access,
    };
    match crate::proc::attr::access(&cx.cx3(&fh), a3) {
        NfsResult::Ok(ok) => {
            let is_dir =
                matches!(ok.obj_attributes, Some(ref f) if f.ftype == nfs3::Ftype3::NF3DIR);
            let supported = a.access & if is_dir { DIR_BITS } else { FILE_BITS };
            Res4::Ok(Access4ResOk {
                supported,
                access: ok.access & supported,
            })
        }
        NfsResult::Fail(s, _) => Res4::Err(stat4(s)),
    }
}

/// The attributes of the current filehandle's object ([`super::attrs`]), for a
/// request of the attributes `asked`: as an earlier operation of this COMPOUND that
/// changed nothing read them ([`crate::seen`]: after LOOKUP, ACCESS or another
/// GETATTR), unless the file system's figures are asked too, or else resolved.
fn values(cx: &Compound<'_>, asked: &nfs4::Bitmap4) -> Result<Values, NfsStat4> {
    Ok(match cx.current()? {
        fh @ Fh::Pseudo(path) => Values::of_pseudo(path, fh.to_wire(), cx.server.started),
        fh @ Fh::Export(fh3) => {
            if !Space::asked(asked) {
                if let Some((ex, meta)) = cx.caller.seen.meta(fh3) {
                    return Ok(Values::of_meta(&ex, &meta, fh.to_wire(), Space::unasked()));
                }
            }
            let (ex, node) = cx.table.resolve(fh3, cx.caller).map_err(stat4)?;
            Values::of_node(ex, &node, fh.to_wire(), asked)
        }
    })
}

/// §18.7 GETATTR ([`super::attrs`]).
pub(crate) fn getattr(cx: &mut Compound<'_>, a: &GetAttr4Args) -> GetAttr4Res {
    match values(cx, &a.attr_request)
        .and_then(|v| v.encode(&a.attr_request, &cx.server.attr_context()))
    {
        Ok(obj_attributes) => Res4::Ok(GetAttr4ResOk { obj_attributes }),
        Err(s) => Res4::Err(s),
    }
}

/// Whether the client's `fattr4` equals the object's current values, for §18.31
/// VERIFY and §18.15 NVERIFY: the same attributes encoded the same (attribute values
/// are compared as their XDR, as §18.31.4 puts it). An attribute not served is
/// NFS4ERR_ATTRNOTSUPP, `rdattr_error` or a write-only one NFS4ERR_INVAL (§18.31.3).
fn same(cx: &Compound<'_>, f: &nfs4::Fattr4) -> Result<bool, NfsStat4> {
    if f.attrmask.is_set(super::attrs::fattr4::RDATTR_ERROR) {
        return Err(NfsStat4::NFS4ERR_INVAL);
    }
    let ours = values(cx, &f.attrmask)?.encode(&f.attrmask, &cx.server.attr_context())?;
    let asked = |b: &nfs4::Bitmap4| -> Vec<u32> {
        (0..b.0.len() as u32 * 32)
            .filter(|&n| b.is_set(n))
            .collect()
    };
    if asked(&ours.attrmask) != asked(&f.attrmask) {
        return Err(NfsStat4::NFS4ERR_ATTRNOTSUPP);
    }
    Ok(ours.attr_vals.0 == f.attr_vals.0)
}

/// §18.31 VERIFY: NFS4_OK if the attributes are the object's, else NFS4ERR_NOT_SAME.
pub(crate) fn verify(cx: &mut Compound<'_>, a: &nfs4::dir::Verify4Args) -> NfsStat4 {
    match same(cx, &a.obj_attributes) {
        Ok(true) => NfsStat4::NFS4_OK,
        Ok(false) => NfsStat4::NFS4ERR_NOT_SAME,
        Err(s) => s,
    }
}

/// §18.15 NVERIFY: NFS4_OK if the attributes differ from the object's, else
/// NFS4ERR_SAME.
pub(crate) fn nverify(cx: &mut Compound<'_>, a: &nfs4::dir::Verify4Args) -> NfsStat4 {
    match same(cx, &a.obj_attributes) {
        Ok(true) => NfsStat4::NFS4ERR_SAME,
        Ok(false) => NfsStat4::NFS4_OK,
        Err(s) => s,
    }
}

/// §18.24 READLINK, through NFSv3's. An object that is not a symbolic link is
/// NFS4ERR_WRONG_TYPE (§18.24.4; NFSv3's layer says NFS3ERR_INVAL), a pseudo
/// directory too.
pub(crate) fn readlink(cx: &mut Compound<'_>) -> ReadLink4Res {
    let fh = match cx.current() {
        Ok(Fh::Pseudo(_)) => return Res4::Err(NfsStat4::NFS4ERR_WRONG_TYPE),
        Ok(Fh::Export(fh)) => fh.clone(),
        Err(s) => return Res4::Err(s),
    };
    let a = ReadLink3Args {
        symlink: fh.clone(),
    };
    match crate::proc::names::readlink(&cx.cx3(&fh), a) {
        NfsResult::Ok(ok) => Res4::Ok(ReadLink4ResOk {
            link: DdpLinkText4(ok.data.0),
        }),
        NfsResult::Fail(nfs3::NfsStat3::NFS3ERR_INVAL, _) => {
            Res4::Err(NfsStat4::NFS4ERR_WRONG_TYPE)
        }
        NfsResult::Fail(s, _) => Res4::Err(stat4(s)),
    }
}

/// The security flavors every export takes: AUTH_SYS (AUTH_NONE callers are served
/// as the anonymous user, as over NFSv3, but are not offered).
fn flavors() -> SecInfo4ResOk {
    SecInfo4ResOk(vec![SecInfo4::Flavor(AUTH_SYS)])
}

/// §18.29 SECINFO: the flavors for `name` in the current directory, which must exist.
/// "As a side effect ... the current filehandle is consumed" (§18.29.3): no current
/// filehandle after it.
pub(crate) fn secinfo(cx: &mut Compound<'_>, a: &SecInfo4Args) -> SecInfo4Res {
    let r = child(cx, &a.name);
    cx.current = None;
    match r {
        Ok(_) => Res4::Ok(flavors()),
        Err(s) => Res4::Err(s),
    }
}

/// §18.45 SECINFO_NO_NAME: the flavors of the current filehandle or (style PARENT)
/// its parent (NFS4ERR_NOENT at the root); the current filehandle is consumed
/// (§18.45.3).
pub(crate) fn secinfo_no_name(cx: &mut Compound<'_>, a: &SecInfoStyle4) -> SecInfo4Res {
    let r = match *a {
        SecInfoStyle4::SECINFO_STYLE4_CURRENT_FH => Ok(()),
        SecInfoStyle4::SECINFO_STYLE4_PARENT => match lookupp(cx) {
            NfsStat4::NFS4_OK => Ok(()),
            s => Err(s),
        },
        _ => Err(NfsStat4::NFS4ERR_INVAL),
    };
    cx.current = None;
    match r {
        Ok(()) => Res4::Ok(flavors()),
        Err(s) => Res4::Err(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8881_18_13_3_component_rules() {
        let c = |s: &[u8]| component(&Utf8Str::from(s)).map(<[u8]>::to_vec);
        assert_eq!(c(b"file"), Ok(b"file".to_vec()));
        assert_eq!(c(b""), Err(NfsStat4::NFS4ERR_INVAL));
        assert_eq!(c(b"\xff\xfe"), Err(NfsStat4::NFS4ERR_INVAL));
        assert_eq!(c(b"."), Err(NfsStat4::NFS4ERR_BADNAME));
        assert_eq!(c(b".."), Err(NfsStat4::NFS4ERR_BADNAME));
        assert_eq!(c(b"a/b"), Err(NfsStat4::NFS4ERR_BADNAME));
        assert_eq!(c(b"a\0b"), Err(NfsStat4::NFS4ERR_BADNAME));
        assert_eq!(c(&[b'x'; 256]), Err(NfsStat4::NFS4ERR_NAMETOOLONG));
    }
}
