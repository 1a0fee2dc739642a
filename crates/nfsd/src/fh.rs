//! The file handle: what a server-issued `nfs_fh3` means (RFC 1813 §2.5 leaves it to
//! the server, up to NFS3_FHSIZE = 64 bytes).
//!
//! Layout (36 bytes, big-endian):
//!
//! ```text
//!  0      4             12            20            28            36
//!  +------+-------------+-------------+-------------+-------------+
//!  |magic |  export id  |   device    |    inode    | generation  |
//!  +------+-------------+-------------+-------------+-------------+
//! ```
//!
//! - magic `rN3` and format version 1;
//! - export id: derived from the export root's device and inode, so it survives a
//!   restart and differs between exports;
//! - device and inode of the object;
//! - generation: the inode's birth time (statx `btime`), so that a handle to a deleted
//!   file whose inode number was reused is stale, not a handle to the new file; 0 where
//!   the file system does not report it.
//!
//! Nothing in the handle is trusted: it only names an inode, which the server then has
//! to find *inside* the export (see [`crate::vfs`]). A forged handle names nothing the
//! export contains and is stale.

use nfs3::{NfsFh3, NfsStat3};
use xdr::Bytes;

/// Magic and format version.
const MAGIC: [u8; 4] = *b"rN3\x01";
/// Encoded length.
pub const FH_LEN: usize = 36;

/// A file system object: device and inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

/// A decoded file handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHandle {
    /// Which export.
    pub export: u64,
    /// Which object.
    pub key: Key,
    /// Inode generation (birth time), 0 if unknown.
    pub gen: u64,
}

impl FileHandle {
    /// Encodes the handle for the wire.
    pub fn to_nfs(&self) -> NfsFh3 {
        let mut b = Vec::with_capacity(FH_LEN);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.export.to_be_bytes());
        b.extend_from_slice(&self.key.dev.to_be_bytes());
        b.extend_from_slice(&self.key.ino.to_be_bytes());
        b.extend_from_slice(&self.gen.to_be_bytes());
        NfsFh3(Bytes::from(b))
    }

    /// Decodes a handle received from a client.
    ///
    /// RFC 1813 §2.6: NFS3ERR_BADHANDLE, "the file handle failed internal consistency
    /// checks": wrong length or magic. Which export and object it names is checked by
    /// the caller (NFS3ERR_STALE when they are not there).
    pub fn from_nfs(fh: &NfsFh3) -> Result<Self, NfsStat3> {
        let b = &fh.0[..];
        if b.len() != FH_LEN || b[..4] != MAGIC {
            return Err(NfsStat3::NFS3ERR_BADHANDLE);
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(w)
        };
        Ok(FileHandle {
            export: word(4),
            key: Key {
                dev: word(12),
                ino: word(20),
            },
            gen: word(28),
        })
    }
}

/// The export id for a root directory: FNV-1a over its device and inode, so it is
/// the same after a restart (no random hashing).
pub fn export_id(root: Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in root.dev.to_be_bytes().iter().chain(&root.ino.to_be_bytes()) {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let fh = FileHandle {
            export: 1,
            key: Key { dev: 2, ino: 3 },
            gen: 4,
        };
        let wire = fh.to_nfs();
        assert_eq!(wire.0.len(), FH_LEN);
        assert!(wire.0.len() <= nfs3::NFS3_FHSIZE as usize);
        assert_eq!(FileHandle::from_nfs(&wire), Ok(fh));
    }

    #[test]
    fn wrong_length_or_magic_is_badhandle() {
        let good = FileHandle {
            export: 1,
            key: Key { dev: 2, ino: 3 },
            gen: 4,
        }
        .to_nfs();
        let short = NfsFh3(good.0.slice(..FH_LEN - 1));
        assert_eq!(
            FileHandle::from_nfs(&short),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        let mut bad = good.0.to_vec();
        bad[0] ^= 0xff;
        assert_eq!(
            FileHandle::from_nfs(&NfsFh3(Bytes::from(bad))),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        assert_eq!(
            FileHandle::from_nfs(&NfsFh3::default()),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
    }

    #[test]
    fn export_ids_are_stable_and_distinct() {
        let a = export_id(Key { dev: 1, ino: 2 });
        assert_eq!(a, export_id(Key { dev: 1, ino: 2 }));
        assert_ne!(a, export_id(Key { dev: 1, ino: 3 }));
    }
}
