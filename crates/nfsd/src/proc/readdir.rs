//! RFC 1813 §3.3.16 READDIR and §3.3.17 READDIRPLUS.
//!
//! Cookies are the file system's own directory offsets (`d_off` from getdents64,
//! resumed with lseek), which on Linux file systems stay valid while the directory
//! changes (ext4 and xfs use name hashes; tmpfs since 6.6 a stable offset map). So the
//! cookie verifier never needs to change: it is derived from the directory's identity
//! only, and a verifier of zeros is accepted too, as many clients send it.
//! `.` and `..` are not listed (RFC 1813 does not require them).

use nfs3::attr::ObjAttrFail;
use nfs3::readdir::*;
use nfs3::{CookieVerf3, Filename3, NfsResult, NfsStat3};
use rustix::fs::{Dir, OFlags};
use xdr::Bytes;

use crate::errno::OrStat;
use crate::nfs::{post_op, Cx};
use crate::vfs::{Export, Meta, Node};

/// The cookie verifier of a directory: its inode number and generation.
fn verifier(dir: &Meta) -> CookieVerf3 {
    (dir.key.ino ^ dir.gen.rotate_left(17)).to_be_bytes()
}

/// Opens the directory for listing at `cookie`, after the checks both procedures
/// share: a directory (NFS3ERR_NOTDIR), a verifier that matches (NFS3ERR_BAD_COOKIE).
fn open_at_cookie(
    cx: &Cx<'_>,
    dir: &Node,
    cookie: u64,
    verf: &CookieVerf3,
) -> Result<Dir, NfsStat3> {
    if !dir.meta.is_dir() {
        return Err(NfsStat3::NFS3ERR_NOTDIR);
    }
    // §3.3.16: "cookieverf ... should be set to 0 in the first request"; later ones
    // must carry ours.
    if cookie != 0 && *verf != [0; 8] && *verf != verifier(&dir.meta) {
        return Err(NfsStat3::NFS3ERR_BAD_COOKIE);
    }
    let fd = cx.as_caller(|| dir.reopen(OFlags::RDONLY | OFlags::DIRECTORY))?;
    let mut d = Dir::new(fd).or_stat()?;
    if cookie != 0 {
        d.seek(i64::try_from(cookie).map_err(|_| NfsStat3::NFS3ERR_BAD_COOKIE)?)
            .map_err(|_| NfsStat3::NFS3ERR_BAD_COOKIE)?;
    }
    Ok(d)
}

/// One directory entry, as read.
struct Raw {
    ino: u64,
    name: Vec<u8>,
    cookie: u64,
}

/// Next entry other than `.` and `..`; `Ok(None)` at the end.
fn next(d: &mut Dir) -> Result<Option<Raw>, NfsStat3> {
    loop {
        match d.read() {
            None => return Ok(None),
            Some(Err(e)) => return Err(crate::errno::nfsstat3_from_errno(e)),
            Some(Ok(e)) => {
                let name = e.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                return Ok(Some(Raw {
                    ino: e.ino(),
                    name: name.to_vec(),
                    cookie: e.offset() as u64,
                }));
            }
        }
    }
}

fn fail_attrs(ex: Option<(&Export, &Node)>) -> ObjAttrFail {
    ObjAttrFail {
        obj_attributes: ex.and_then(|(ex, n)| post_op(ex, n)),
    }
}

/// §3.3.16 READDIR: entries while the READDIR3resok structure stays within `count`.
pub(crate) fn readdir(cx: &Cx<'_>, a: ReadDir3Args) -> ReadDir3Res {
    let (ex, dir) = match cx.s.resolve(&a.dir) {
        Ok(r) => r,
        Err(s) => return NfsResult::Fail(s, fail_attrs(None)),
    };
    let listed = open_at_cookie(cx, &dir, a.cookie, &a.cookieverf).and_then(|mut d| {
        let limit = a.count as usize;
        let mut used = RESOK_FIXED_SIZE;
        let mut entries = Vec::new();
        let eof = loop {
            // Read ahead by one: an entry that does not fit is read again next time
            // from the previous entry's cookie.
            let Some(e) = next(&mut d)? else { break true };
            let size = entry3_size(e.name.len());
            if used + size > limit {
                break false;
            }
            used += size;
            entries.push(Entry3 {
                fileid: e.ino,
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
            });
        };
        // §3.3.16: NFS3ERR_TOOSMALL when not even one entry fits.
        if entries.is_empty() && !eof {
            return Err(NfsStat3::NFS3ERR_TOOSMALL);
        }
        Ok(DirList3 { entries, eof })
    });
    match listed {
        Ok(reply) => NfsResult::Ok(ReadDir3ResOk {
            dir_attributes: post_op(ex, &dir),
            cookieverf: verifier(&dir.meta),
            reply,
        }),
        Err(s) => NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))),
    }
}

/// §3.3.17 READDIRPLUS: as READDIR, with each entry's attributes and handle;
/// `dircount` bounds the fileid, name and cookie bytes, `maxcount` the whole
/// READDIRPLUS3resok.
pub(crate) fn readdirplus(cx: &Cx<'_>, a: ReadDirPlus3Args) -> ReadDirPlus3Res {
    let (ex, dir) = match cx.s.resolve(&a.dir) {
        Ok(r) => r,
        Err(s) => return NfsResult::Fail(s, fail_attrs(None)),
    };
    let listed = open_at_cookie(cx, &dir, a.cookie, &a.cookieverf).and_then(|mut d| {
        let mut used = RESOK_FIXED_SIZE;
        let mut dir_used = 0;
        let mut entries = Vec::new();
        let eof = loop {
            let Some(e) = next(&mut d)? else { break true };
            let dsize = entry3_size(e.name.len());
            // An entry whose object vanished since getdents is listed without
            // attributes and handle.
            let child = cx.as_caller(|| ex.child(&dir, &e.name)).ok();
            let entry = EntryPlus3 {
                fileid: e.ino,
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
                name_attributes: child.as_ref().map(|c| c.meta.fattr(ex.id)),
                name_handle: child.as_ref().map(|c| ex.handle(&c.meta).to_nfs()),
            };
            let size = entryplus3_size(&entry);
            if used + size > a.maxcount as usize || dir_used + dsize > a.dircount as usize {
                break false;
            }
            used += size;
            dir_used += dsize;
            entries.push(entry);
        };
        if entries.is_empty() && !eof {
            return Err(NfsStat3::NFS3ERR_TOOSMALL);
        }
        Ok(DirList3 { entries, eof })
    });
    match listed {
        Ok(reply) => NfsResult::Ok(ReadDirPlus3ResOk {
            dir_attributes: post_op(ex, &dir),
            cookieverf: verifier(&dir.meta),
            reply,
        }),
        Err(s) => NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))),
    }
}
