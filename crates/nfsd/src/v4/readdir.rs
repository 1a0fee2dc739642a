//! §18.23 READDIR (RFC 8881): a directory's entries with the attributes asked for,
//! from the pseudo file system ([`super::pseudo`]) or an export, through NFSv3's
//! listing ([`crate::proc::readdir`]'s cursor: the same cookies, verifier, memory
//! charge and file-system access as the caller).
//!
//! - No `.` or `..` (§18.23.4: "the server ... will not return" them); cookies are
//!   NFSv3's file-system ones (3 and up), so 0 starts the listing and 1 and 2, which
//!   §18.23.4 reserves, are NFS4ERR_BAD_COOKIE (as knfsd).
//! - `cookieverf`: with a non-zero cookie, it must be one this directory's listings
//!   carry (an export's: zeros, as NFSv3's, [`v3::LISTING_VERIFIER`], or the one they
//!   carried before; a pseudo directory's: a hash of its names, or zeros): else
//!   NFS4ERR_NOT_SAME (§18.23.3).
//! - `maxcount` bounds the whole READDIR4resok (and [`crate::nfs::MAX_IO`]);
//!   `dircount` is a hint (§18.23.3) and not used. Not one entry fitting is
//!   NFS4ERR_TOOSMALL.
//! - An entry whose attributes cannot be read gets only `rdattr_error` if it was
//!   asked for (§5.8.1.12); else the READDIR fails with that error. An entry gone
//!   between listing and reading is left out.

use nfs3::NfsFh3;
use nfs4::dir::{DirList4, Entry4, ReadDir4Args, ReadDir4Res, ReadDir4ResOk};
use nfs4::{AttrList4, Bitmap4, Fattr4, NfsStat4, Res4, Utf8Str, Verifier4};
use xdr::{Bytes, Encode, Encoder, ListBuilder};

use super::attrs::{fattr4::RDATTR_ERROR, Space, Values};
use super::compound::Compound;
use super::errors::stat4;
use super::pseudo::{self, Fh};
use crate::proc::readdir::{self as v3, Cursor};

/// READDIR4resok without entries: the verifier, the list's end marker and `eof`.
const RESOK_FIXED: usize = 8 + 4 + 4;

/// A listing being filled within `maxcount`, its entries encoded as they come
/// ([`xdr::EncodedList`]: in memory, their wire size).
struct Fill {
    entries: ListBuilder<Entry4>,
    limit: usize,
}

impl Fill {
    fn new(a: &ReadDir4Args) -> Fill {
        Fill {
            entries: ListBuilder::new(),
            limit: (a.maxcount.min(crate::nfs::MAX_IO)) as usize,
        }
    }

    /// Adds an entry if it fits (`false`: full).
    fn push(&mut self, e: &Entry4) -> bool {
        let room = self.limit.saturating_sub(RESOK_FIXED);
        self.entries.push_within(e, room)
    }

    /// The result: NFS4ERR_TOOSMALL if not one entry fit before the end.
    fn finish(self, eof: bool, cookieverf: Verifier4) -> ReadDir4Res {
        if self.entries.is_empty() && !eof {
            return Res4::Err(NfsStat4::NFS4ERR_TOOSMALL);
        }
        Res4::Ok(ReadDir4ResOk {
            cookieverf,
            reply: DirList4 {
                entries: self.entries.finish(),
                eof,
            },
        })
    }
}

/// The attributes of an entry whose own could not be read: `rdattr_error` alone,
/// if asked for; else the READDIR fails with `status`.
fn rdattr_error(request: &Bitmap4, status: NfsStat4) -> Result<Fattr4, NfsStat4> {
    if !request.is_set(RDATTR_ERROR) {
        return Err(status);
    }
    let mut e = Encoder::new();
    status.encode(&mut e);
    Ok(Fattr4 {
        attrmask: Bitmap4::from_bits(&[RDATTR_ERROR]),
        attr_vals: AttrList4(e.finish().to_bytes()),
    })
}

/// §18.23 READDIR.
pub(crate) fn readdir(cx: &mut Compound<'_>, a: &ReadDir4Args) -> ReadDir4Res {
    if a.cookie == v3::COOKIE_DOT || a.cookie == v3::COOKIE_DOTDOT {
        return Res4::Err(NfsStat4::NFS4ERR_BAD_COOKIE);
    }
    let r = match cx.current() {
        Err(s) => Err(s),
        Ok(Fh::Pseudo(dir)) => {
            let dir = dir.clone();
            pseudo_readdir(cx, &dir, a)
        }
        Ok(Fh::Export(fh)) => {
            let fh = fh.clone();
            export_readdir(cx, &fh, a)
        }
    };
    r.unwrap_or_else(Res4::Err)
}

/// A pseudo directory's entries: cookie 3 + index, verifier from the names listed.
fn pseudo_readdir(
    cx: &mut Compound<'_>,
    dir: &[u8],
    a: &ReadDir4Args,
) -> Result<ReadDir4Res, NfsStat4> {
    let names = pseudo::children(&cx.table, cx.caller, dir);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for n in &names {
        for &b in n.iter().chain([&0u8]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    let verf = h.to_be_bytes();
    if a.cookie != 0 && a.cookieverf != verf && a.cookieverf != [0; 8] {
        return Err(NfsStat4::NFS4ERR_NOT_SAME);
    }
    let start = a.cookie.saturating_sub(v3::FS_COOKIE_BASE) as usize;
    if a.cookie != 0 && start > names.len() {
        return Err(NfsStat4::NFS4ERR_BAD_COOKIE);
    }
    let served = cx.server.attr_context();
    let mut fill = Fill::new(a);
    let mut eof = true;
    for (i, name) in names
        .iter()
        .enumerate()
        .skip(if a.cookie == 0 { 0 } else { start })
    {
        let attrs = match pseudo::lookup(&cx.table, cx.caller, dir, name) {
            Err(NfsStat4::NFS4ERR_NOENT) => continue,
            Err(s) => rdattr_error(&a.attr_request, s),
            Ok(fh) => {
                let wire = fh.to_wire();
                match fh {
                    Fh::Pseudo(path) => Values::of_pseudo(&path, wire, cx.server.started)
                        .encode(&a.attr_request, &served),
                    Fh::Export(fh3) => match cx.table.resolve(&fh3, cx.caller) {
                        Ok((ex, node)) => Values::of_node(ex, &node, wire, &a.attr_request)
                            .encode(&a.attr_request, &served),
                        Err(s) => rdattr_error(&a.attr_request, stat4(s)),
                    },
                }
            }
        }?;
        let e = Entry4 {
            cookie: v3::FS_COOKIE_BASE + i as u64 + 1,
            name: Utf8Str(Bytes::copy_from_slice(name)),
            attrs,
        };
        if !fill.push(&e) {
            eof = false;
            break;
        }
    }
    Ok(fill.finish(eof, verf))
}

/// A directory of an export: NFSv3's cursor from after `..` (or `cookie`), each
/// entry looked up as the caller (`peek_listed`, as READDIRPLUS does).
fn export_readdir(
    cx: &mut Compound<'_>,
    fh: &NfsFh3,
    a: &ReadDir4Args,
) -> Result<ReadDir4Res, NfsStat4> {
    let (ex, dir) = cx.table.resolve(fh, cx.caller).map_err(stat4)?;
    if !dir.meta.is_dir() {
        return Err(if dir.meta.file_type() == rustix::fs::FileType::Symlink {
            NfsStat4::NFS4ERR_SYMLINK
        } else {
            NfsStat4::NFS4ERR_NOTDIR
        });
    }
    let verf = v3::LISTING_VERIFIER;
    if a.cookie != 0 && !v3::verifier_accepted(&dir.meta, &a.cookieverf) {
        return Err(NfsStat4::NFS4ERR_NOT_SAME);
    }
    let served = cx.server.attr_context();
    let cx3 = crate::nfs::Cx::new(&cx.server.nfs, &cx.table, cx.caller, Some(fh));
    let mut fill = Fill::new(a);
    let charge = v3::charge_listing(&cx3, fill.limit).map_err(stat4)?;
    let space = Space::of(&dir, &a.attr_request);
    let listed = cx3.as_caller(|| {
        let from = if a.cookie == 0 {
            v3::COOKIE_DOTDOT
        } else {
            a.cookie
        };
        let mut c = Cursor::open(&cx3, ex, &dir, from, &verf).map_err(stat4)?;
        loop {
            let Some(e) = c.next().map_err(stat4)? else {
                break Ok(true);
            };
            let attrs = match ex.peek_listed(&dir, &e.name, e.ino) {
                Ok((meta, fh3)) => Values::of_meta(ex, &meta, nfs4::NfsFh4(fh3.0), space)
                    .encode(&a.attr_request, &served)?,
                // Gone since it was listed.
                Err(nfs3::NfsStat3::NFS3ERR_NOENT) => continue,
                Err(s) => rdattr_error(&a.attr_request, stat4(s))?,
            };
            let entry = Entry4 {
                cookie: e.cookie,
                name: Utf8Str(Bytes::from(e.name)),
                attrs,
            };
            if !fill.push(&entry) {
                break Ok(false);
            }
        }
    });
    let eof = listed?;
    cx.charges.push(charge);
    Ok(fill.finish(eof, verf))
}
