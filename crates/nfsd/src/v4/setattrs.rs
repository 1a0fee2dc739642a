//! The attributes a client may set (RFC 8881 §5.5: the writable attributes), parsed
//! from a `fattr4` into NFSv3's `sattr3`, which the shared file layer applies
//! (`proc::attr::apply_sattr`, CREATE's and MKDIR's initial attributes).
//! CREATE's `createattrs` today, SETATTR's when it is served.
//!
//! Served: `mode` (33), `owner` (36) and `owner_group` (37) as numeric strings or,
//! with an ID-mapping domain, `name@domain` ([`super::idmap`]; any other string is
//! NFS4ERR_BADOWNER, §5.9), `time_access_set` (48) and `time_modify_set` (54). `size` (4) is settable
//! but not at CREATE (no regular files there). Any other writable attribute is
//! NFS4ERR_ATTRNOTSUPP; a read-only one NFS4ERR_INVAL (§18.30.3, §18.4.3); values that
//! do not decode, or bytes left after them, NFS4ERR_BADXDR.

use nfs3::{NfsTime3, Sattr3, SetTime};
use nfs4::{Bitmap4, Fattr4, NfsStat4, NfsTime4};
use xdr::{Decode, Decoder};

use super::attrs::{fattr4::*, SUPPORTED};
use super::idmap::{IdMap, Kind};

/// The writable attributes of RFC 8881 §5.5 (REQUIRED and RECOMMENDED): `size`,
/// `acl`, `archive`, `hidden`, `mimetype`, `mode`, `mode_set_masked`, `owner`,
/// `owner_group`, `system`, `time_access_set`, `time_backup`, `time_create`,
/// `time_modify_set`, and the pNFS/retention ones are not served.
const WRITABLE: &[u32] = &[4, 12, 14, 25, 32, 33, 36, 37, 46, 48, 49, 50, 54, 74];

/// What [`parse`] found: the `sattr3` to apply and the attributes it sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settable {
    /// For the file layer.
    pub sattr: Sattr3,
    /// The attributes set (`attrset` of CREATE4resok / SETATTR4res).
    pub set: Bitmap4,
}

fn owner_id(d: &mut Decoder, ids: &IdMap, kind: Kind) -> Result<u32, NfsStat4> {
    let s = d
        .string(nfs4::UTF8STR_DECODE_MAX)
        .map_err(|_| NfsStat4::NFS4ERR_BADXDR)?;
    ids.to_id(kind, &s)
}

fn settime(d: &mut Decoder) -> Result<SetTime, NfsStat4> {
    let bad = |_| NfsStat4::NFS4ERR_BADXDR;
    match d.u32().map_err(bad)? {
        // SET_TO_SERVER_TIME4
        0 => Ok(SetTime::ServerTime),
        // SET_TO_CLIENT_TIME4
        1 => {
            let t = NfsTime4::decode(d).map_err(bad)?;
            let seconds = u32::try_from(t.seconds).map_err(|_| NfsStat4::NFS4ERR_INVAL)?;
            if t.nseconds >= 1_000_000_000 {
                return Err(NfsStat4::NFS4ERR_INVAL);
            }
            Ok(SetTime::ClientTime(NfsTime3 {
                seconds,
                nseconds: t.nseconds,
            }))
        }
        _ => Err(NfsStat4::NFS4ERR_BADXDR),
    }
}

/// Parses `f` (module docs), owners mapped by `ids`; `size_ok`: whether `size` may
/// be set.
pub fn parse(f: &Fattr4, size_ok: bool, ids: &IdMap) -> Result<Settable, NfsStat4> {
    let mut out = Settable::default();
    let mut d = Decoder::new(f.attr_vals.0.clone());
    let bits = (0..f.attrmask.0.len() as u32 * 32).filter(|&b| f.attrmask.is_set(b));
    for bit in bits {
        match bit {
            MODE => {
                let m = d.u32().map_err(|_| NfsStat4::NFS4ERR_BADXDR)?;
                out.sattr.mode = Some(m & 0o7777);
            }
            OWNER => out.sattr.uid = Some(owner_id(&mut d, ids, Kind::User)?),
            OWNER_GROUP => out.sattr.gid = Some(owner_id(&mut d, ids, Kind::Group)?),
            TIME_ACCESS_SET => out.sattr.atime = settime(&mut d)?,
            TIME_MODIFY_SET => out.sattr.mtime = settime(&mut d)?,
            SIZE if size_ok => {
                out.sattr.size = Some(d.u64().map_err(|_| NfsStat4::NFS4ERR_BADXDR)?);
            }
            b if WRITABLE.contains(&b) => return Err(NfsStat4::NFS4ERR_ATTRNOTSUPP),
            b if SUPPORTED.contains(&b) => return Err(NfsStat4::NFS4ERR_INVAL),
            // Neither writable nor known to us: not supported.
            _ => return Err(NfsStat4::NFS4ERR_ATTRNOTSUPP),
        }
        out.set.set(bit);
    }
    d.finish().map_err(|_| NfsStat4::NFS4ERR_BADXDR)?;
    Ok(out)
}

/// §18.30 SETATTR, through NFSv3's (the same write permission, identity and
/// order of changes, [`crate::proc::attr::apply_sattr`]). `size` needs a stateid
/// that allows writing, as WRITE does ([`super::state::StateTable::check_io`]: an
/// open with write access, a lock stateid made from one, or a special stateid no
/// deny mode excludes). Other attributes ignore the stateid (§18.30.3). A pseudo
/// directory is NFS4ERR_ROFS.
/// `attrsset` is what was set (empty on error).
pub(crate) fn setattr(
    cx: &mut super::compound::Compound<'_>,
    a: &nfs4::dir::SetAttr4Args,
) -> nfs4::dir::SetAttr4Res {
    let fail = |status| nfs4::dir::SetAttr4Res {
        status,
        attrsset: Bitmap4::default(),
    };
    let fh = match cx.current() {
        Err(s) => return fail(s),
        Ok(super::pseudo::Fh::Pseudo(_)) => return fail(NfsStat4::NFS4ERR_ROFS),
        Ok(super::pseudo::Fh::Export(fh)) => fh.clone(),
    };
    let parsed = match parse(&a.obj_attributes, true, cx.server.ids()) {
        Ok(p) => p,
        Err(s) => return fail(s),
    };
    if parsed.sattr.size.is_some() {
        let allowed = cx.client().and_then(|client| {
            let id = cx.stateid(&a.stateid)?;
            let state = cx.server.state();
            state.check_io(client, &id, &fh.0, super::state::opens::Io::Write)
        });
        if let Err(s) = allowed {
            return fail(s);
        }
    }
    let cx3 = crate::nfs::Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(&fh));
    let args = nfs3::attr::SetAttr3Args {
        object: fh.clone(),
        new_attributes: parsed.sattr,
        guard: None,
    };
    match crate::proc::attr::setattr(&cx3, args) {
        nfs3::NfsResult::Ok(_) => nfs4::dir::SetAttr4Res {
            status: NfsStat4::NFS4_OK,
            attrsset: parsed.set,
        },
        nfs3::NfsResult::Fail(s, _) => fail(super::errors::stat4(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs4::AttrList4;
    use xdr::Encoder;

    fn ids() -> IdMap {
        IdMap::numeric()
    }

    fn fattr(bits: &[u32], vals: impl FnOnce(&mut Encoder)) -> Fattr4 {
        let mut e = Encoder::new();
        vals(&mut e);
        Fattr4 {
            attrmask: Bitmap4::from_bits(bits),
            attr_vals: AttrList4(e.finish().to_bytes()),
        }
    }

    #[test]
    fn mode_owner_group_and_times_parse_in_bit_order() {
        let f = fattr(
            &[MODE, OWNER, OWNER_GROUP, TIME_ACCESS_SET, TIME_MODIFY_SET],
            |e| {
                e.u32(0o40755).string(b"1000").string(b"100").u32(0);
                e.u32(1).i64(5).u32(6);
            },
        );
        let s = parse(&f, false, &ids()).unwrap();
        assert_eq!(s.sattr.mode, Some(0o755));
        assert_eq!((s.sattr.uid, s.sattr.gid), (Some(1000), Some(100)));
        assert_eq!(s.sattr.atime, SetTime::ServerTime);
        assert_eq!(
            s.sattr.mtime,
            SetTime::ClientTime(NfsTime3 {
                seconds: 5,
                nseconds: 6
            })
        );
        assert_eq!(s.set, f.attrmask);
        assert_eq!(
            parse(&Fattr4::default(), false, &ids()),
            Ok(Settable::default())
        );
    }

    #[test]
    fn rfc8881_18_30_3_errors_of_settable_attributes() {
        // A read-only attribute; a writable one not served; size where not allowed.
        assert_eq!(
            parse(
                &fattr(&[TYPE], |e| {
                    e.u32(1);
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_INVAL)
        );
        assert_eq!(
            parse(
                &fattr(&[14], |e| {
                    e.bool(true);
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_ATTRNOTSUPP)
        );
        assert_eq!(
            parse(
                &fattr(&[SIZE], |e| {
                    e.u64(1);
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_ATTRNOTSUPP)
        );
        assert!(parse(
            &fattr(&[SIZE], |e| {
                e.u64(1);
            }),
            true,
            &ids()
        )
        .is_ok());
        // Truncated and trailing values, an owner name.
        assert_eq!(
            parse(&fattr(&[MODE], |_| {}), false, &ids()),
            Err(NfsStat4::NFS4ERR_BADXDR)
        );
        assert_eq!(
            parse(
                &fattr(&[MODE], |e| {
                    e.u32(1).u32(2);
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_BADXDR)
        );
        assert_eq!(
            parse(
                &fattr(&[OWNER], |e| {
                    e.string(b"alice@example");
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_BADOWNER)
        );
        // A time before 1970 or past 2106 does not fit the file layer's time.
        assert_eq!(
            parse(
                &fattr(&[TIME_MODIFY_SET], |e| {
                    e.u32(1).i64(-1).u32(0);
                }),
                false,
                &ids()
            ),
            Err(NfsStat4::NFS4ERR_INVAL)
        );
    }
}
