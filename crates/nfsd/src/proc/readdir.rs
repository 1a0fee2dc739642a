//! RFC 1813 §3.3.16 READDIR and §3.3.17 READDIRPLUS.
//!
//! Every listing starts with `.` and `..`, as knfsd and nfs-ganesha answer and as
//! programs reading a directory expect (Connectathon's basic test6 fails without them).
//! RFC 1813 does not require them. Their fileids follow the rule RFC 1094 §2.2.17
//! states for every entry, "The fileid field must be the same number as the fileid in
//! the attributes of the file": `.` has the directory's own fileid, `..` its parent's,
//! and at the export root `..` is the root itself, as LOOKUP ".." answers there: a
//! client never learns of anything above the export. READDIRPLUS gives both their
//! attributes and handles (for the root's `..`, the root's handle), those LOOKUP "."
//! and ".." would give.
//!
//! # Cookies
//!
//! §3.3.16: "cookie: This should be set to 0 in the first request to read the
//! directory. On subsequent requests, it should be a cookie as returned by the
//! server." A cookie is ours to define as long as each one names one place in the
//! listing. Ours:
//!
//! | cookie     | resumes                                   |
//! |------------|-------------------------------------------|
//! | 0          | at the start: `.`, `..`, then the entries |
//! | 1          | after `.`: `..`, then the entries         |
//! | 2          | after `..`: the entries from the first    |
//! | 3 + `off`  | at the file system's directory offset `off` |
//!
//! 1 and 2 are what Linux reports as the `d_off` of `.` and `..` on file systems that
//! list them with `dir_emit_dots` (tmpfs, btrfs): the offset after each. The file
//! system's own offsets (`d_off` from getdents64, resumed with lseek, as knfsd uses
//! them) are moved up by 3 so that no offset a file system returns can be taken for a
//! dot cookie: a FUSE or other file system that lists no dots may well return offsets
//! 1 and 2 for real entries. The file system's own `.` and `..` are skipped wherever
//! it lists them. A negative `d_off` (no local file system makes one) becomes a cookie
//! that resumes as NFS3ERR_BAD_COOKIE, since lseek could not take it back either.
//!
//! On Linux file systems those offsets stay valid while the directory changes (ext4
//! and xfs use name hashes; tmpfs since 6.6 a stable offset map), and 0, 1 and 2 are
//! always valid. So the cookie verifier never needs to change, and listings carry
//! zeros ([`LISTING_VERIFIER`]), as knfsd's and nfs-ganesha's do. A client may resume
//! with zeros or with the verifier listings carried before (the directory's identity
//! and the cookie scheme, [`identity_verifier`]), so that a cookie from a server before
//! this scheme is still NFS3ERR_BAD_COOKIE, not a wrong place.

use nfs3::attr::ObjAttrFail;
use nfs3::readdir::*;
use nfs3::{CookieVerf3, Fattr3, Filename3, NfsFh3, NfsResult, NfsStat3};
use rustix::fs::{Dir, OFlags};
use xdr::{Bytes, ListBuilder};

use rpcrdma::memory::Charge;

use crate::errno::OrStat;
use crate::nfs::{post_op, Cx, MAX_IO};
use crate::vfs::{Export, Meta, Node};

/// Cookie of `.`: the listing resumes at `..`.
pub(crate) const COOKIE_DOT: u64 = 1;
/// Cookie of `..`: the listing resumes at the directory's first entry.
pub(crate) const COOKIE_DOTDOT: u64 = 2;
/// A file system offset `off` is cookie `FS_COOKIE_BASE + off`.
pub(crate) const FS_COOKIE_BASE: u64 = 3;

/// Which cookie scheme the verifier vouches for (1: dots, then file system offsets
/// moved up by [`FS_COOKIE_BASE`]; before it, raw offsets and no dots).
const COOKIE_SCHEME: u64 = 1;

/// The cookie verifier a listing carries: zeros (module docs). A non-zero one costs
/// the Linux client a round trip and lookups on every fresh listing longer than a
/// page of its cache (127 entries): it starts with zeros, and when the first reply's
/// verifier differs it drops what that reply held beyond the first page
/// (`nfs_readdir_invalidate_cache_range` in its fs/nfs/dir.c). Seen in the lab
/// (NFSv4.1, 2,000 files): 4 READDIRs and 2,161 entries looked up where knfsd and
/// nfs-ganesha, whose verifiers are zeros, took 3 and 2,000.
pub(crate) const LISTING_VERIFIER: CookieVerf3 = [0; 8];

/// The verifier listings carried before [`LISTING_VERIFIER`]: the directory's inode
/// number and generation, and the cookie scheme.
fn identity_verifier(dir: &Meta) -> CookieVerf3 {
    (dir.key.ino ^ dir.gen.rotate_left(17) ^ COOKIE_SCHEME).to_be_bytes()
}

/// Whether a listing of `dir` may resume with verifier `verf`: zeros, or the
/// verifier of [`identity_verifier`] (a listing begun before the change goes on).
pub(crate) fn verifier_accepted(dir: &Meta, verf: &CookieVerf3) -> bool {
    *verf == LISTING_VERIFIER || *verf == identity_verifier(dir)
}

/// The cookie of a file system entry whose getdents64 `d_off` is `off`.
fn fs_cookie(off: i64) -> u64 {
    // A negative offset lands above `FS_COOKIE_BASE + i64::MAX`: BAD_COOKIE on resume.
    (off as u64).saturating_add(FS_COOKIE_BASE)
}

/// What comes next in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Dot,
    DotDot,
    Entries,
}

/// Where a listing resumes after `cookie`, and the file system offset to seek to.
fn resume(cookie: u64) -> Result<(Next, Option<i64>), NfsStat3> {
    Ok(match cookie {
        0 => (Next::Dot, None),
        COOKIE_DOT => (Next::DotDot, None),
        COOKIE_DOTDOT => (Next::Entries, None),
        c => {
            let off =
                i64::try_from(c - FS_COOKIE_BASE).map_err(|_| NfsStat3::NFS3ERR_BAD_COOKIE)?;
            (Next::Entries, Some(off))
        }
    })
}

/// One directory entry, as listed.
pub(crate) struct Raw {
    /// `.`, `..`, or an entry of the file system.
    kind: Kind,
    pub(crate) ino: u64,
    pub(crate) name: Vec<u8>,
    pub(crate) cookie: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dot,
    DotDot,
    Entry,
}

/// A listing from some cookie on: the dots still due, then the file system's entries.
/// NFSv4's READDIR ([`crate::v4`]) lists from [`COOKIE_DOTDOT`] on: no dots.
pub(crate) struct Cursor<'a> {
    ex: &'a Export,
    dir: &'a Node,
    next: Next,
    d: Dir,
}

impl Cursor<'_> {
    /// Opens the directory for listing after `cookie`, after the checks both
    /// procedures share: a directory (NFS3ERR_NOTDIR), a verifier that matches
    /// (NFS3ERR_BAD_COOKIE), a cookie we could have made (NFS3ERR_BAD_COOKIE).
    pub(crate) fn open<'a>(
        cx: &Cx<'_>,
        ex: &'a Export,
        dir: &'a Node,
        cookie: u64,
        verf: &CookieVerf3,
    ) -> Result<Cursor<'a>, NfsStat3> {
        if !dir.meta.is_dir() {
            return Err(NfsStat3::NFS3ERR_NOTDIR);
        }
        // §3.3.16: "cookieverf ... should be set to 0 in the first request"; later ones
        // must carry one we gave.
        if cookie != 0 && !verifier_accepted(&dir.meta, verf) {
            return Err(NfsStat3::NFS3ERR_BAD_COOKIE);
        }
        let (next, seek) = resume(cookie)?;
        let fd = cx.as_caller(|| dir.reopen(OFlags::RDONLY | OFlags::DIRECTORY))?;
        let mut d = Dir::new(fd).or_stat()?;
        if let Some(off) = seek {
            d.seek(off).map_err(|_| NfsStat3::NFS3ERR_BAD_COOKIE)?;
        }
        Ok(Cursor { ex, dir, next, d })
    }

    /// The next entry; `Ok(None)` at the end.
    pub(crate) fn next(&mut self) -> Result<Option<Raw>, NfsStat3> {
        match self.next {
            Next::Dot => {
                self.next = Next::DotDot;
                Ok(Some(Raw {
                    kind: Kind::Dot,
                    ino: self.dir.meta.key.ino,
                    name: b".".to_vec(),
                    cookie: COOKIE_DOT,
                }))
            }
            Next::DotDot => {
                self.next = Next::Entries;
                Ok(Some(Raw {
                    kind: Kind::DotDot,
                    ino: self.ex.parent_key(self.dir)?.ino,
                    name: b"..".to_vec(),
                    cookie: COOKIE_DOTDOT,
                }))
            }
            Next::Entries => loop {
                match self.d.read() {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(crate::errno::nfsstat3_from_errno(e)),
                    Some(Ok(e)) => {
                        let name = e.file_name().to_bytes();
                        if name == b"." || name == b".." {
                            continue;
                        }
                        return Ok(Some(Raw {
                            kind: Kind::Entry,
                            ino: e.ino(),
                            name: name.to_vec(),
                            cookie: fs_cookie(e.offset()),
                        }));
                    }
                }
            },
        }
    }
}

fn fail_attrs(ex: Option<(&Export, &Node)>) -> ObjAttrFail {
    ObjAttrFail {
        obj_attributes: ex.and_then(|(ex, n)| post_op(ex, n)),
    }
}

/// Issue 16: a listing is charged to the server's memory budget before it is read:
/// its reply's limit for the encoded reply, and [`entries_memory`] for the entries
/// while they are gathered; the charge lasts until the reply is dropped
/// (`nfs::run_held`). Past the budget: NFS3ERR_JUKEBOX, as for READ (RFC 1813 §2.6:
/// the client retries later).
pub(crate) fn charge_listing(cx: &Cx<'_>, limit: usize) -> Result<Charge, NfsStat3> {
    let bytes = (limit + entries_memory(limit)) as u64;
    cx.s.memory.charge_ahead(bytes).ok_or_else(|| {
        cx.s.memory_refusals.refused(bytes, &cx.s.memory);
        NfsStat3::NFS3ERR_JUKEBOX
    })
}

/// The memory a listing's entries take for a reply of `limit` bytes. They are kept
/// encoded ([`xdr::EncodedList`]), so they take their wire size, at most `limit`, in a
/// buffer that grows by doubling: up to twice that. (Kept as structures they took
/// two to four times their wire size, and a listing bounded by its memory stopped
/// that much short of the client's `count`: more round trips.)
pub(crate) fn entries_memory(limit: usize) -> usize {
    2 * limit
}

/// §3.3.16 READDIR: entries while the READDIR3resok structure stays within `count`.
/// The charge for the listing comes back with the result ([`charge_listing`]).
pub(crate) fn readdir(cx: &Cx<'_>, a: ReadDir3Args) -> (ReadDir3Res, Option<Charge>) {
    let (ex, dir) = match cx.resolve(&a.dir) {
        Ok(r) => r,
        Err(s) => return (NfsResult::Fail(s, fail_attrs(None)), None),
    };
    // Never more than MAX_IO, whatever the client asks (§3.3.16 lets the reply be
    // shorter than `count`).
    let limit = a.count.min(MAX_IO) as usize;
    let charge = match charge_listing(cx, limit) {
        Ok(c) => c,
        Err(s) => return (NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))), None),
    };
    let listed = Cursor::open(cx, ex, &dir, a.cookie, &a.cookieverf).and_then(|mut c| {
        let mut used = RESOK_FIXED_SIZE;
        let mut entries = ListBuilder::new();
        let eof = loop {
            // Read ahead by one: an entry that does not fit is read again next time
            // from the previous entry's cookie.
            let Some(e) = c.next()? else { break true };
            let size = entry3_size(e.name.len());
            if used + size > limit {
                break false;
            }
            used += size;
            entries.push(&Entry3 {
                fileid: e.ino,
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
            });
        };
        // §3.3.16: NFS3ERR_TOOSMALL when not even one entry fits.
        if entries.is_empty() && !eof {
            return Err(NfsStat3::NFS3ERR_TOOSMALL);
        }
        Ok(DirList3 {
            entries: entries.finish(),
            eof,
        })
    });
    let res = match listed {
        Ok(reply) => NfsResult::Ok(ReadDir3ResOk {
            dir_attributes: post_op(ex, &dir),
            cookieverf: LISTING_VERIFIER,
            reply,
        }),
        Err(s) => NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))),
    };
    (res, Some(charge))
}

/// READDIRPLUS's fileid, attributes and handle of one listed entry. An entry whose
/// object vanished since getdents, or that the caller may not look up, is listed
/// without attributes and handle. Runs as the caller: inside the listing's
/// `Cx::as_caller`, which covers every entry (a guard per entry would cost a copy of
/// the caller's identity each).
fn plus_parts(ex: &Export, dir: &Node, e: &Raw) -> (u64, Option<(Fattr3, NfsFh3)>) {
    let parts = |n: &Node| (n.meta.fattr(ex.id), ex.handle(n));
    match e.kind {
        // The directory itself: the caller holds its handle and gets its attributes
        // in this very reply.
        Kind::Dot => (e.ino, Some(parts(dir))),
        // As LOOKUP ".." would find it (the root for the root).
        Kind::DotDot => match ex.parent(dir) {
            Ok(p) => (p.meta.key.ino, Some(parts(&p))),
            Err(_) => (e.ino, None),
        },
        Kind::Entry => (
            e.ino,
            ex.peek_listed(dir, &e.name, e.ino)
                .ok()
                .map(|(meta, fh)| (meta.fattr(ex.id), fh)),
        ),
    }
}

/// §3.3.17 READDIRPLUS: as READDIR, with each entry's attributes and handle;
/// `dircount` bounds the fileid, name and cookie bytes, `maxcount` the whole
/// READDIRPLUS3resok.
pub(crate) fn readdirplus(cx: &Cx<'_>, a: ReadDirPlus3Args) -> (ReadDirPlus3Res, Option<Charge>) {
    let (ex, dir) = match cx.resolve(&a.dir) {
        Ok(r) => r,
        Err(s) => return (NfsResult::Fail(s, fail_attrs(None)), None),
    };
    let limit = a.maxcount.min(MAX_IO) as usize;
    let charge = match charge_listing(cx, limit) {
        Ok(c) => c,
        Err(s) => return (NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))), None),
    };
    // As the caller once for the whole listing, entries' lookups included.
    let listed = cx.as_caller(|| {
        let mut c = Cursor::open(cx, ex, &dir, a.cookie, &a.cookieverf)?;
        let mut used = RESOK_FIXED_SIZE;
        let mut dir_used = 0;
        let mut entries = ListBuilder::new();
        let eof = loop {
            let Some(e) = c.next()? else { break true };
            let dsize = entry3_size(e.name.len());
            let (fileid, parts) = plus_parts(ex, &dir, &e);
            let (name_attributes, name_handle) = parts.unzip();
            let entry = EntryPlus3 {
                fileid,
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
                name_attributes,
                name_handle,
            };
            let size = entryplus3_size(&entry);
            if used + size > limit || dir_used + dsize > a.dircount as usize {
                break false;
            }
            used += size;
            dir_used += dsize;
            entries.push(&entry);
        };
        if entries.is_empty() && !eof {
            return Err(NfsStat3::NFS3ERR_TOOSMALL);
        }
        Ok(DirList3 {
            entries: entries.finish(),
            eof,
        })
    });
    let res = match listed {
        Ok(reply) => NfsResult::Ok(ReadDirPlus3ResOk {
            dir_attributes: post_op(ex, &dir),
            cookieverf: LISTING_VERIFIER,
            reply,
        }),
        Err(s) => NfsResult::Fail(s, fail_attrs(Some((ex, &dir)))),
    };
    (res, Some(charge))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_of_dots_and_file_system_offsets_never_collide() {
        // Every file system offset, including the 0, 1 and 2 a file system without
        // dots may use, is a cookie of 3 or more, and resumes at that offset.
        for off in [0, 1, 2, 3, 12, 1 << 32, i64::MAX - 1, i64::MAX] {
            let c = fs_cookie(off);
            assert!(c >= FS_COOKIE_BASE, "offset {off} -> cookie {c}");
            assert_eq!(resume(c), Ok((Next::Entries, Some(off))));
        }
        assert_eq!(resume(0), Ok((Next::Dot, None)));
        assert_eq!(resume(COOKIE_DOT), Ok((Next::DotDot, None)));
        assert_eq!(resume(COOKIE_DOTDOT), Ok((Next::Entries, None)));
        // A negative offset cannot be sought back to: its cookie is a BAD_COOKIE.
        for off in [-1, -3, i64::MIN] {
            let c = fs_cookie(off);
            assert!(c > FS_COOKIE_BASE + i64::MAX as u64);
            assert_eq!(resume(c), Err(NfsStat3::NFS3ERR_BAD_COOKIE));
        }
        assert_eq!(resume(u64::MAX), Err(NfsStat3::NFS3ERR_BAD_COOKIE));
    }

    #[test]
    fn the_verifier_names_the_cookie_scheme() {
        let meta = Meta {
            key: crate::fh::Key { dev: 1, ino: 42 },
            gen: 7,
            mode: 0o040755,
            nlink: 2,
            uid: 0,
            gid: 0,
            size: 0,
            blocks: 0,
            rdev: (0, 0),
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
        };
        // Not what the server before `.`/`..` answered for the same directory.
        let before = (meta.key.ino ^ meta.gen.rotate_left(17)).to_be_bytes();
        assert_ne!(identity_verifier(&meta), before);
        assert!(!verifier_accepted(&meta, &before));
        assert!(verifier_accepted(&meta, &identity_verifier(&meta)));
        assert!(verifier_accepted(&meta, &LISTING_VERIFIER));
    }
}
