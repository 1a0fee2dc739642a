//! The pseudo file system (RFC 8881 §7.3, §7.5): the directories from `/` down to
//! each export, so that PUTROOTFH and LOOKUPs reach every export by its path, as
//! knfsd builds it from the exports table.
//!
//! A pseudo directory is a path that is a proper prefix of the path of an export
//! the caller is admitted to (the exports file's client rules decide, as for every
//! NFSv3 handle and MNT, [`crate::exports::Clients::admit`]); the pseudo file system
//! shows a caller no path leading only to exports it may not use. Looking up an
//! export's own path yields the export's root handle (from then on the export's
//! handles and access checks rule, [`crate::nfs::Table::resolve`]); if `/` itself is
//! exported, PUTROOTFH is that export's root.
//!
//! Pseudo handles are `rN4P` and a 64-bit SipHash of the path (fixed key: the path
//! is no secret, the handle grants nothing, and it stays the same across restarts
//! so that a client's root handle does not go stale). Exports inside other exports
//! are reached through the pseudo file system only if no export contains their
//! path's parent (a LOOKUP in an export stays in that export, as NFSv3's does).

use std::hash::Hasher;
use std::path::{Component, Path};

use nfs3::NfsFh3;
use nfs4::{NfsFh4, NfsStat4};
use xdr::Bytes;

use crate::nfs::{Caller, Table};

/// Magic of pseudo handles (export handles start `rN3`, [`crate::fh`]).
const MAGIC: &[u8; 4] = b"rN4P";
/// Length of a pseudo handle.
const LEN: usize = 12;

/// Where the current filehandle points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fh {
    /// A pseudo directory: its absolute path, as bytes (`/` for the root).
    Pseudo(Vec<u8>),
    /// An object of an export, by its NFSv3-format handle (the one file layer).
    Export(NfsFh3),
}

impl Fh {
    /// The handle as the client sees it.
    pub fn to_wire(&self) -> NfsFh4 {
        match self {
            Fh::Pseudo(path) => {
                let mut h = Vec::with_capacity(LEN);
                h.extend_from_slice(MAGIC);
                h.extend_from_slice(&hash(path).to_be_bytes());
                NfsFh4(Bytes::from(h))
            }
            Fh::Export(fh) => NfsFh4(fh.0.clone()),
        }
    }

    /// The handle a client sent (PUTFH), checked as far as can be without the file
    /// system: a pseudo handle must name a pseudo directory the caller sees, an
    /// export handle must be one of ours (NFS4ERR_BADHANDLE if not in our format,
    /// NFS4ERR_STALE if its MAC fails or its export is gone, [`crate::fh`]).
    pub fn from_wire(fh: &NfsFh4, table: &Table, caller: &Caller) -> Result<Fh, NfsStat4> {
        if fh.0.starts_with(MAGIC) {
            if fh.0.len() != LEN {
                return Err(NfsStat4::NFS4ERR_BADHANDLE);
            }
            let want = u64::from_be_bytes(fh.0[4..].try_into().expect("8 bytes"));
            return dirs(table, caller)
                .into_iter()
                .find(|d| hash(d) == want)
                .map(Fh::Pseudo)
                .ok_or(NfsStat4::NFS4ERR_STALE);
        }
        let fh3 = NfsFh3(fh.0.clone());
        let h = table
            .decode_in_call(&fh3, caller)
            .map_err(super::errors::stat4)?;
        table.find(h.export).ok_or(NfsStat4::NFS4ERR_STALE)?;
        Ok(Fh::Export(fh3))
    }
}

fn hash(path: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher24::new_with_keys(0x7073_6575_646f_2d66, 0x732d_6e66_7334);
    h.write(path);
    h.finish()
}

/// `path` as normalized absolute bytes (`/a/b`), or `None` for a relative one.
fn path_bytes(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => {
                out.push(b'/');
                out.extend_from_slice(n.as_bytes());
            }
            _ => return None,
        }
    }
    if !path.is_absolute() {
        return None;
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Some(out)
}

/// The paths of the exports `caller` is admitted to, with their root handles.
fn exports(table: &Table, caller: &Caller) -> Vec<(Vec<u8>, NfsFh3)> {
    table
        .exports
        .iter()
        .filter(|s| s.clients.admit(caller.peer.as_ref()).is_ok())
        .filter_map(|s| {
            let path = path_bytes(&s.export.path)?;
            let root = s.export.root().ok()?;
            Some((path, s.export.handle(&root)))
        })
        .collect()
}

/// `dir/name`.
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Whether `dir` is a proper ancestor of `path`.
fn ancestor(dir: &[u8], path: &[u8]) -> bool {
    if dir == b"/" {
        return path != b"/";
    }
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// The pseudo directories `caller` sees: proper ancestors of its exports.
fn dirs(table: &Table, caller: &Caller) -> Vec<Vec<u8>> {
    let ex = exports(table, caller);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (path, _) in &ex {
        let mut at = 0;
        out.push(b"/".to_vec());
        while let Some(i) = path[at + 1..].iter().position(|&b| b == b'/') {
            at += 1 + i;
            out.push(path[..at].to_vec());
        }
    }
    out.sort();
    out.dedup();
    // A path exported itself is the export, not a pseudo directory.
    out.retain(|d| !ex.iter().any(|(p, _)| p == d));
    out
}

/// PUTROOTFH (RFC 8881 §18.21): the pseudo root, or the export of `/`. A caller
/// admitted to no export still gets the root, as knfsd gives it, empty.
pub fn root(table: &Table, caller: &Caller) -> Fh {
    match exports(table, caller).into_iter().find(|(p, _)| p == b"/") {
        Some((_, fh)) => Fh::Export(fh),
        None => Fh::Pseudo(b"/".to_vec()),
    }
}

/// LOOKUP of `name` in pseudo directory `dir`: a pseudo directory, an export's
/// root, or NFS4ERR_NOENT.
pub fn lookup(table: &Table, caller: &Caller, dir: &[u8], name: &[u8]) -> Result<Fh, NfsStat4> {
    let child = join(dir, name);
    if let Some((_, fh)) = exports(table, caller)
        .into_iter()
        .find(|(p, _)| *p == child)
    {
        return Ok(Fh::Export(fh));
    }
    if dirs(table, caller).contains(&child) {
        return Ok(Fh::Pseudo(child));
    }
    Err(NfsStat4::NFS4ERR_NOENT)
}

/// LOOKUPP of pseudo directory `dir`: its parent, NFS4ERR_NOENT at the root
/// (RFC 8881 §18.14.3: "If the current filehandle is the root ... NFS4ERR_NOENT").
pub fn parent(dir: &[u8]) -> Result<Fh, NfsStat4> {
    if dir == b"/" {
        return Err(NfsStat4::NFS4ERR_NOENT);
    }
    let cut = dir.iter().rposition(|&b| b == b'/').unwrap_or(0);
    Ok(Fh::Pseudo(if cut == 0 {
        b"/".to_vec()
    } else {
        dir[..cut].to_vec()
    }))
}

/// LOOKUPP of an export's root: the pseudo directory above it (`None`: the export
/// is `/`, or `root` is no export root the caller is admitted to).
pub fn above_export(table: &Table, caller: &Caller, root: &NfsFh3) -> Option<Fh> {
    let (path, _) = exports(table, caller)
        .into_iter()
        .find(|(_, fh)| fh == root)?;
    parent(&path).ok()
}

/// The entries of pseudo directory `dir` (READDIR): names of the pseudo
/// directories and exports right below it.
pub fn children(table: &Table, caller: &Caller, dir: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = dirs(table, caller)
        .into_iter()
        .chain(exports(table, caller).into_iter().map(|(p, _)| p))
        .filter(|p| ancestor(dir, p))
        .filter_map(|p| {
            let rest = &p[if dir == b"/" { 1 } else { dir.len() + 1 }..];
            (!rest.contains(&b'/')).then(|| rest.to_vec())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A fileid for pseudo directory `path` (RFC 8881 §5.8.1.14 `fileid`): its hash,
/// with the top bit set, apart from the small inode numbers of real files.
pub fn fileid(path: &[u8]) -> u64 {
    hash(path) | (1 << 63)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_and_ancestry_is_by_component() {
        assert_eq!(path_bytes(Path::new("/")), Some(b"/".to_vec()));
        assert_eq!(path_bytes(Path::new("/srv//a/")), Some(b"/srv/a".to_vec()));
        assert_eq!(path_bytes(Path::new("srv")), None);
        assert!(ancestor(b"/", b"/srv"));
        assert!(ancestor(b"/srv", b"/srv/a"));
        assert!(!ancestor(b"/sr", b"/srv/a"));
        assert!(!ancestor(b"/srv/a", b"/srv/a"));
        assert_eq!(join(b"/", b"srv"), b"/srv");
        assert_eq!(join(b"/srv", b"a"), b"/srv/a");
    }

    #[test]
    fn rfc8881_18_14_3_lookupp_of_the_root_is_noent() {
        assert_eq!(parent(b"/"), Err(NfsStat4::NFS4ERR_NOENT));
        assert_eq!(parent(b"/srv"), Ok(Fh::Pseudo(b"/".to_vec())));
        assert_eq!(parent(b"/srv/a"), Ok(Fh::Pseudo(b"/srv".to_vec())));
    }

    #[test]
    fn pseudo_handles_are_stable_and_distinct() {
        let a = Fh::Pseudo(b"/srv".to_vec()).to_wire();
        assert_eq!(a, Fh::Pseudo(b"/srv".to_vec()).to_wire());
        assert_ne!(a, Fh::Pseudo(b"/".to_vec()).to_wire());
        assert_eq!(a.0.len(), LEN);
        assert!(fileid(b"/") >= 1 << 63);
    }
}
