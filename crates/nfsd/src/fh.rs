//! The file handle: what a server-issued `nfs_fh3` means (RFC 1813 §2.5 leaves it to
//! the server, up to NFS3_FHSIZE = 64 bytes).
//!
//! Two kinds, both authenticated by a MAC under the server's key
//! ([`crate::handle_key`]), big-endian:
//!
//! ```text
//! kernel kind (38 + n bytes, n = 1..=26):
//!  0      4  5          13         21   22            22+n         38+n
//!  +------+--+----------+----------+----+-------------+-------------+
//!  |magic |1 | export id|  inode   |type|kernel handle|     MAC     |
//!  +------+--+----------+----------+----+-------------+-------------+
//!
//! inode kind (53 bytes):
//!  0      4  5          13         21         29         37          53
//!  +------+--+----------+----------+----------+----------+-----------+
//!  |magic |2 | export id|  device  |  inode   |generation|    MAC    |
//!  +------+--+----------+----------+----------+----------+-----------+
//! ```
//!
//! - magic `rN3` and format version 3;
//! - export id: derived from the export root's device and inode, so it survives a
//!   restart and differs between exports; under the MAC, so a handle of one export is
//!   never taken for another's;
//! - kernel kind: the kernel's own handle of the object (`name_to_handle_at`, see
//!   [`crate::kernel_fh`]) with its type, which `open_by_handle_at` opens in constant
//!   time, and the inode number, with which a server that may not open by handle
//!   (not root) searches the export instead. Issued for every object on the export
//!   root's mount whose file system makes handles of at most [`KERNEL_MAX`] bytes
//!   (ext4 and xfs 8 or 12, tmpfs 12, btrfs 20) and whose type fits a byte;
//! - inode kind, for everything else (a file system without handle support such as
//!   some FUSE ones, overlayfs' larger handles, a mount inside the export): device,
//!   inode and birth time (statx `btime`, 0 where unknown), found after a restart by
//!   searching the export;
//! - MAC: SipHash-2-4, 128-bit output, over every byte before it.
//!
//! Format version 2 had the same layout with HMAC-SHA-256 (leftmost 128 bits) as its
//! MAC, which costs the server far more per call where the CPU has no SHA extensions
//! ([`crate::handle_key`] says why).
//!
//! The largest handle (btrfs, 58 bytes; inode kind, 53) stays within NFS3_FHSIZE.
//! The kind of a given object depends only on its file system and mount, so its
//! handle is the same after a restart, whether the server runs as root or not.
//!
//! # Which error
//!
//! RFC 1813 §2.6 has two answers for a handle we cannot use: NFS3ERR_BADHANDLE,
//! "the file handle failed internal consistency checks", and NFS3ERR_STALE, "The file
//! referred to by that file handle no longer exists or access to it has been
//! revoked". A handle that is not in our format at all (length, magic, version, kind)
//! is BADHANDLE. A handle in our format whose MAC does not verify is STALE: it is
//! either forged or altered, or one we issued under a key since removed, which the
//! server cannot tell apart; for the latter, access has indeed been revoked, and
//! STALE is the answer a client recovers from (the Linux client looks the path up
//! again on ESTALE, while EBADHANDLE reaches applications as errno 521). Handles of
//! format version 1 (unauthenticated) and 2 (HMAC-SHA-256 under the same key) are
//! STALE for the same reason.

use nfs3::{NfsFh3, NfsStat3};
use xdr::Bytes;

use crate::handle_key::{HandleKey, MAC_LEN};

/// Magic of every version.
const MAGIC: [u8; 3] = *b"rN3";
/// This format's version.
const VERSION: u8 = 3;
/// The format before this one: the same layout, HMAC-SHA-256 as the MAC.
const VERSION_2: u8 = 2;
/// The unauthenticated format before that.
const VERSION_1: u8 = 1;
/// Kind byte of kernel-kind handles.
const KIND_KERNEL: u8 = 1;
/// Kind byte of inode-kind handles.
const KIND_INODE: u8 = 2;
/// Magic, version and kind.
const HEADER: usize = 5;
/// Fixed part of a kernel-kind handle: header, export id, inode, type, MAC.
const KERNEL_FIXED: usize = HEADER + 8 + 8 + 1 + MAC_LEN;
/// Longest kernel handle that fits: 64 - 38 = 26 bytes.
pub const KERNEL_MAX: usize = nfs3::NFS3_FHSIZE as usize - KERNEL_FIXED;
/// Length of an inode-kind handle.
pub const INODE_LEN: usize = HEADER + 8 + 8 + 8 + 8 + MAC_LEN;

/// A file system object: device and inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

/// A kernel handle small enough for ours: at most [`KERNEL_MAX`] bytes, a type below
/// 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmallKernelHandle {
    /// The file system's handle type (`FILEID_*`).
    pub handle_type: u8,
    len: u8,
    bytes: [u8; KERNEL_MAX],
}

impl SmallKernelHandle {
    /// `None` if the handle does not fit (too long, empty, type above 255).
    pub fn new(handle_type: i32, bytes: &[u8]) -> Option<SmallKernelHandle> {
        let handle_type = u8::try_from(handle_type).ok()?;
        if bytes.is_empty() || bytes.len() > KERNEL_MAX {
            return None;
        }
        let mut b = [0; KERNEL_MAX];
        b[..bytes.len()].copy_from_slice(bytes);
        Some(SmallKernelHandle {
            handle_type,
            len: bytes.len() as u8,
            bytes: b,
        })
    }

    /// The opaque handle bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// What a handle names inside its export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// The kernel's handle of an object on the export root's mount, and its inode
    /// number (its device is the root's).
    Kernel {
        /// Inode number.
        ino: u64,
        /// The kernel's handle.
        handle: SmallKernelHandle,
    },
    /// Device, inode and generation (birth time, 0 if unknown).
    Inode {
        /// Device and inode.
        key: Key,
        /// Birth time.
        gen: u64,
    },
}

impl Object {
    /// Its inode number.
    pub fn ino(&self) -> u64 {
        match self {
            Object::Kernel { ino, .. } => *ino,
            Object::Inode { key, .. } => key.ino,
        }
    }
}

/// A decoded, authenticated file handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHandle {
    /// Which export.
    pub export: u64,
    /// Which object.
    pub object: Object,
}

impl FileHandle {
    /// Encodes the handle for the wire, with its MAC under `key`.
    pub fn seal(&self, key: &HandleKey) -> NfsFh3 {
        // Its exact length, so that the bytes become the handle without another
        // allocation (READDIRPLUS seals one per entry).
        let len = match &self.object {
            Object::Kernel { handle, .. } => KERNEL_FIXED + handle.bytes().len(),
            Object::Inode { .. } => INODE_LEN,
        };
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(&MAGIC);
        b.push(VERSION);
        match &self.object {
            Object::Kernel { ino, handle } => {
                b.push(KIND_KERNEL);
                b.extend_from_slice(&self.export.to_be_bytes());
                b.extend_from_slice(&ino.to_be_bytes());
                b.push(handle.handle_type);
                b.extend_from_slice(handle.bytes());
            }
            Object::Inode { key: k, gen } => {
                b.push(KIND_INODE);
                b.extend_from_slice(&self.export.to_be_bytes());
                b.extend_from_slice(&k.dev.to_be_bytes());
                b.extend_from_slice(&k.ino.to_be_bytes());
                b.extend_from_slice(&gen.to_be_bytes());
            }
        }
        let tag = key.mac(&b);
        b.extend_from_slice(&tag);
        debug_assert_eq!(b.len(), len);
        NfsFh3(Bytes::from(b))
    }

    /// Decodes and authenticates a handle received from a client, touching nothing
    /// but its bytes. Not our format: NFS3ERR_BADHANDLE; our format with a MAC that
    /// does not verify under `key`, or format version 1 or 2: NFS3ERR_STALE (see the
    /// module documentation for why). Whether the export and object are there is the
    /// caller's to check.
    pub fn open(fh: &NfsFh3, key: &HandleKey) -> Result<Self, NfsStat3> {
        let b = &fh.0[..];
        if b.len() < HEADER || b[..3] != MAGIC {
            return Err(NfsStat3::NFS3ERR_BADHANDLE);
        }
        let hmac_sealed = match b[3] {
            VERSION => false,
            VERSION_2 => true,
            VERSION_1 if b.len() == 36 => return Err(NfsStat3::NFS3ERR_STALE),
            _ => return Err(NfsStat3::NFS3ERR_BADHANDLE),
        };
        let well_formed = match b[4] {
            KIND_KERNEL => b.len() > KERNEL_FIXED && b.len() <= nfs3::NFS3_FHSIZE as usize,
            KIND_INODE => b.len() == INODE_LEN,
            _ => false,
        };
        if !well_formed {
            return Err(NfsStat3::NFS3ERR_BADHANDLE);
        }
        if hmac_sealed {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        let (body, tag) = b.split_at(b.len() - MAC_LEN);
        if !key.verify(body, tag) {
            return Err(NfsStat3::NFS3ERR_STALE);
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&body[at..at + 8]);
            u64::from_be_bytes(w)
        };
        let object = if b[4] == KIND_KERNEL {
            Object::Kernel {
                ino: word(13),
                // Length checked above: 1..=KERNEL_MAX bytes after the type.
                handle: SmallKernelHandle::new(i32::from(body[21]), &body[22..])
                    .ok_or(NfsStat3::NFS3ERR_BADHANDLE)?,
            }
        } else {
            Object::Inode {
                key: Key {
                    dev: word(13),
                    ino: word(21),
                },
                gen: word(29),
            }
        };
        Ok(FileHandle {
            export: word(5),
            object,
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
    use crate::handle_key::KEY_LEN;

    fn key() -> HandleKey {
        HandleKey::from_bytes(&[0x5a; KEY_LEN])
    }

    fn kernel(n: usize) -> FileHandle {
        let bytes: Vec<u8> = (1..=n as u8).collect();
        FileHandle {
            export: 0x1122_3344_5566_7788,
            object: Object::Kernel {
                ino: 42,
                handle: SmallKernelHandle::new(0x4d, &bytes).unwrap(),
            },
        }
    }

    fn inode() -> FileHandle {
        FileHandle {
            export: 1,
            object: Object::Inode {
                key: Key { dev: 2, ino: 3 },
                gen: 4,
            },
        }
    }

    #[test]
    fn both_kinds_round_trip_within_nfs3_fhsize() {
        let k = key();
        for n in [1, 8, 12, 20, KERNEL_MAX] {
            let fh = kernel(n);
            let wire = fh.seal(&k);
            assert_eq!(wire.0.len(), KERNEL_FIXED + n);
            assert!(wire.0.len() <= nfs3::NFS3_FHSIZE as usize);
            assert_eq!(FileHandle::open(&wire, &k), Ok(fh));
        }
        let wire = inode().seal(&k);
        assert_eq!(wire.0.len(), INODE_LEN);
        assert!(INODE_LEN <= nfs3::NFS3_FHSIZE as usize);
        assert_eq!(FileHandle::open(&wire, &k), Ok(inode()));
        // Deterministic: the same object has the same handle (after a restart too).
        assert_eq!(
            kernel(8).seal(&k),
            kernel(8).seal(&HandleKey::from_bytes(&[0x5a; 32]))
        );
    }

    #[test]
    fn kernel_handles_that_do_not_fit_are_refused() {
        assert!(SmallKernelHandle::new(1, &[0; KERNEL_MAX + 1]).is_none());
        assert!(SmallKernelHandle::new(1, &[]).is_none());
        assert!(SmallKernelHandle::new(256, &[0; 8]).is_none());
        assert!(SmallKernelHandle::new(-1, &[0; 8]).is_none());
    }

    /// Any one byte changed anywhere (export id, inode, kernel handle, MAC) and the
    /// handle no longer verifies: STALE, or BADHANDLE where the layout breaks.
    #[test]
    fn every_tampered_byte_is_refused() {
        let k = key();
        for fh in [kernel(20), inode()] {
            let wire = fh.seal(&k);
            for i in 0..wire.0.len() {
                for flip in [0x01, 0x80] {
                    let mut b = wire.0.to_vec();
                    b[i] ^= flip;
                    // Version 3 with its low bit flipped is version 2: a well-formed
                    // handle of the HMAC format, stale.
                    let version_2 = i == 3 && b[i] == VERSION_2;
                    let got = FileHandle::open(&NfsFh3(Bytes::from(b)), &k);
                    let want = if i < HEADER && !version_2 {
                        NfsStat3::NFS3ERR_BADHANDLE
                    } else {
                        NfsStat3::NFS3ERR_STALE
                    };
                    assert_eq!(got, Err(want), "byte {i} ^ {flip:#x}");
                }
            }
        }
    }

    #[test]
    fn another_export_id_or_key_is_stale() {
        let k = key();
        let wire = kernel(8).seal(&k);
        // Relabelled for another export, even with a MAC made for the original bytes.
        let mut other = wire.0.to_vec();
        other[5..13].copy_from_slice(&7u64.to_be_bytes());
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(other)), &k),
            Err(NfsStat3::NFS3ERR_STALE)
        );
        // Another server's key (or ours, since replaced).
        let wrong = HandleKey::from_bytes(&[0xa5; KEY_LEN]);
        assert_eq!(
            FileHandle::open(&wire, &wrong),
            Err(NfsStat3::NFS3ERR_STALE)
        );
        assert_eq!(
            FileHandle::open(&inode().seal(&k), &wrong),
            Err(NfsStat3::NFS3ERR_STALE)
        );
    }

    #[test]
    fn other_layouts_are_badhandle_and_version_1_is_stale() {
        let k = key();
        let good = kernel(8).seal(&k);
        let short = NfsFh3(good.0.slice(..KERNEL_FIXED));
        assert_eq!(
            FileHandle::open(&short, &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        let mut long = good.0.to_vec();
        long.resize(nfs3::NFS3_FHSIZE as usize + 1, 0);
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(long)), &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        let inode_short = NfsFh3(inode().seal(&k).0.slice(..INODE_LEN - 1));
        assert_eq!(
            FileHandle::open(&inode_short, &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        assert_eq!(
            FileHandle::open(&NfsFh3::default(), &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        let mut kind = good.0.to_vec();
        kind[4] = 9;
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(kind)), &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        // A version 2 handle (this layout, sealed with HMAC-SHA-256): stale, when
        // well formed.
        let mut v2 = good.0.to_vec();
        v2[3] = 2;
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(v2.clone())), &k),
            Err(NfsStat3::NFS3ERR_STALE)
        );
        v2[4] = 9;
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(v2)), &k),
            Err(NfsStat3::NFS3ERR_BADHANDLE)
        );
        // A version 1 handle: magic, version 1, export, device, inode, generation.
        let mut v1 = b"rN3\x01".to_vec();
        v1.resize(36, 0);
        assert_eq!(
            FileHandle::open(&NfsFh3(Bytes::from(v1)), &k),
            Err(NfsStat3::NFS3ERR_STALE)
        );
    }

    #[test]
    fn export_ids_are_stable_and_distinct() {
        let a = export_id(Key { dev: 1, ino: 2 });
        assert_eq!(a, export_id(Key { dev: 1, ino: 2 }));
        assert_ne!(a, export_id(Key { dev: 1, ino: 3 }));
    }
}
