//! File attributes as GETATTR returns them (RFC 8881 §5: `fattr4`, the attribute
//! numbers of §5.8, their XDR in RFC 5662), from the shared file layer's
//! [`Meta`] (statx) and statvfs, or for a pseudo directory ([`super::pseudo`]).
//!
//! [`SUPPORTED`] lists what is served: every REQUIRED attribute (§5.6) and the
//! RECOMMENDED ones (§5.7) the Linux client asks for that a POSIX file system can
//! answer. Not served: ACLs, `fs_locations`, quotas, `time_backup`/`time_create`,
//! `hidden`/`system`/`archive`, `mimetype` and the pNFS attributes. The write-only
//! `time_access_set` and `time_modify_set` ([`WRITE_ONLY`]) are in `supported_attrs`
//! because SETATTR serves them ([`super::setattrs`]): the Linux client masks every
//! SETATTR by `supported_attrs` and, without them, sent `futimens` as an empty
//! SETATTR that set nothing (Connectathon's `general make` saw the file's old
//! mtime). A GETATTR asking for an attribute not served simply does not get it
//! (§18.7.3); asking for a write-only one is NFS4ERR_INVAL (§18.7.3).
//!
//! `owner` and `owner_group` are the numeric uid and gid as strings, or with an
//! ID-mapping domain `name@domain` ([`super::idmap`], §5.9).

use nfs3::NfsTime3;
use nfs4::{AttrList4, Bitmap4, Fattr4, NfsFh4, NfsStat4, NfsTime4};
use rustix::fs::FileType;
use xdr::Encoder;

use super::idmap::{IdMap, Kind};
use crate::vfs::{Export, Meta, Node};

/// What the server adds to an object's attributes: `lease_time` in seconds and the
/// strings of `owner` and `owner_group`.
#[derive(Debug, Clone, Copy)]
pub struct AttrContext<'a> {
    /// `lease_time` (§5.8.1.11).
    pub lease: u32,
    /// How ids become `owner` and `owner_group` strings.
    pub ids: &'a IdMap,
}

/// RFC 8881 §5.8 attribute numbers served here.
pub mod fattr4 {
    #![allow(missing_docs)]
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
}

use fattr4::*;

/// The attributes served, in number order.
pub const SUPPORTED: &[u32] = &[
    SUPPORTED_ATTRS,
    TYPE,
    FH_EXPIRE_TYPE,
    CHANGE,
    SIZE,
    LINK_SUPPORT,
    SYMLINK_SUPPORT,
    NAMED_ATTR,
    FSID,
    UNIQUE_HANDLES,
    LEASE_TIME,
    RDATTR_ERROR,
    CANSETTIME,
    CASE_INSENSITIVE,
    CASE_PRESERVING,
    CHOWN_RESTRICTED,
    FILEHANDLE,
    FILEID,
    FILES_AVAIL,
    FILES_FREE,
    FILES_TOTAL,
    HOMOGENEOUS,
    MAXFILESIZE,
    MAXLINK,
    MAXNAME,
    MAXREAD,
    MAXWRITE,
    MODE,
    NO_TRUNC,
    NUMLINKS,
    OWNER,
    OWNER_GROUP,
    RAWDEV,
    SPACE_AVAIL,
    SPACE_FREE,
    SPACE_TOTAL,
    SPACE_USED,
    TIME_ACCESS,
    TIME_ACCESS_SET,
    TIME_DELTA,
    TIME_METADATA,
    TIME_MODIFY,
    TIME_MODIFY_SET,
    MOUNTED_ON_FILEID,
    SUPPATTR_EXCLCREAT,
];

/// [`SUPPORTED`] as bitmap words (its highest, `suppattr_exclcreat`, is bit 75), for
/// taking a request's served attributes word by word ([`Values::encode`]).
const SUPPORTED_WORDS: [u32; 3] = {
    let mut words = [0u32; 3];
    let mut i = 0;
    while i < SUPPORTED.len() {
        words[(SUPPORTED[i] / 32) as usize] |= 1 << (SUPPORTED[i] % 32);
        i += 1;
    }
    words
};

/// The served attributes a client may set but never read (§5.8.2.37, §5.8.2.43).
pub const WRITE_ONLY: &[u32] = &[TIME_ACCESS_SET, TIME_MODIFY_SET];

/// RFC 5662 `nfs_ftype4` values.
mod ftype4 {
    pub(super) const NF4REG: u32 = 1;
    pub(super) const NF4DIR: u32 = 2;
    pub(super) const NF4BLK: u32 = 3;
    pub(super) const NF4CHR: u32 = 4;
    pub(super) const NF4LNK: u32 = 5;
    pub(super) const NF4SOCK: u32 = 6;
    pub(super) const NF4FIFO: u32 = 7;
}

/// `fsstat`-like figures of the file system (statvfs), absent for pseudo directories:
/// read once per GETATTR, or per READDIR for all its entries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Space {
    files_avail: u64,
    files_free: u64,
    files_total: u64,
    space_avail: u64,
    space_free: u64,
    space_total: u64,
    name_max: u32,
}

/// Everything GETATTR may report of one object.
#[derive(Debug, Clone)]
pub struct Values {
    ftype: u32,
    change: u64,
    size: u64,
    fsid: (u64, u64),
    fileid: u64,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    rawdev: (u32, u32),
    space_used: u64,
    atime: NfsTime4,
    mtime: NfsTime4,
    ctime: NfsTime4,
    fh: NfsFh4,
    space: Space,
}

fn time4(t: NfsTime3) -> NfsTime4 {
    NfsTime4 {
        seconds: i64::from(t.seconds),
        nseconds: t.nseconds,
    }
}

impl Space {
    /// The attributes whose values come from the file system's figures.
    const ATTRS: [u32; 7] = [
        fattr4::FILES_AVAIL,
        fattr4::FILES_FREE,
        fattr4::FILES_TOTAL,
        fattr4::MAXNAME,
        fattr4::SPACE_AVAIL,
        fattr4::SPACE_FREE,
        fattr4::SPACE_TOTAL,
    ];

    /// Whether `asked` names any attribute read from the file system's figures: if
    /// not, they are not read (a `statvfs` saved on most GETATTRs: the Linux client
    /// asks for them only for statfs(2)).
    pub fn asked(asked: &Bitmap4) -> bool {
        Space::ATTRS.iter().any(|&a| asked.is_set(a))
    }

    /// The defaults, for a request that names none of the figures
    /// ([`Space::asked`]): nothing encodes them.
    pub fn unasked() -> Space {
        Space {
            name_max: crate::vfs::NAME_MAX as u32,
            ..Space::default()
        }
    }

    /// The figures of the file system `node` is on, if `asked` names any of them
    /// ([`Space::asked`]); the defaults otherwise, which nothing encodes.
    pub fn of(node: &Node, asked: &Bitmap4) -> Space {
        if !Space::asked(asked) {
            return Space::unasked();
        }
        rustix::fs::fstatvfs(&node.fd)
            .map(|v| {
                let bytes = |blocks: u64| blocks.saturating_mul(v.f_frsize);
                Space {
                    files_avail: v.f_favail,
                    files_free: v.f_ffree,
                    files_total: v.f_files,
                    space_avail: bytes(v.f_bavail),
                    space_free: bytes(v.f_bfree),
                    space_total: bytes(v.f_blocks),
                    name_max: v.f_namemax.min(crate::vfs::NAME_MAX as u64) as u32,
                }
            })
            .unwrap_or(Space {
                name_max: crate::vfs::NAME_MAX as u32,
                ..Space::default()
            })
    }
}

impl Values {
    /// An object of export `ex`, its handle `fh`, with the attributes `node` was
    /// resolved with, for a request of the attributes `asked`.
    pub fn of_node(ex: &Export, node: &Node, fh: NfsFh4, asked: &Bitmap4) -> Values {
        Values::of_meta(ex, &node.meta, fh, Space::of(node, asked))
    }

    /// An object of export `ex` with attributes `m` and handle `fh`, on a file
    /// system of `space`.
    pub fn of_meta(ex: &Export, m: &Meta, fh: NfsFh4, space: Space) -> Values {
        let ftype = match m.file_type() {
            FileType::RegularFile => ftype4::NF4REG,
            FileType::Directory => ftype4::NF4DIR,
            FileType::BlockDevice => ftype4::NF4BLK,
            FileType::CharacterDevice => ftype4::NF4CHR,
            FileType::Symlink => ftype4::NF4LNK,
            FileType::Socket => ftype4::NF4SOCK,
            FileType::Fifo => ftype4::NF4FIFO,
            FileType::Unknown => ftype4::NF4REG,
        };
        Values {
            ftype,
            // §5.8.1.4 `change`: must change whenever the object does; ctime does
            // (knfsd uses ctime where the file system has no i_version).
            change: u64::from(m.ctime.seconds) * 1_000_000_000 + u64::from(m.ctime.nseconds),
            size: m.size,
            // Each export is a file system to the client, as in NFSv3's `fsid`.
            fsid: (ex.id, 0),
            fileid: m.key.ino,
            mode: m.mode & 0o7777,
            nlink: m.nlink,
            uid: m.uid,
            gid: m.gid,
            rawdev: m.rdev,
            space_used: m.blocks.saturating_mul(512),
            atime: time4(m.atime),
            mtime: time4(m.mtime),
            ctime: time4(m.ctime),
            fh,
            space,
        }
    }

    /// Pseudo directory `path` ([`super::pseudo`]): read-only for everyone (0555),
    /// owned by root, its times the server's start, fsid (0, 0) (knfsd's pseudo
    /// root is its fsid 0 export).
    pub fn of_pseudo(path: &[u8], fh: NfsFh4, started: NfsTime4) -> Values {
        Values {
            ftype: ftype4::NF4DIR,
            change: started.seconds as u64,
            size: 4096,
            fsid: (0, 0),
            fileid: super::pseudo::fileid(path),
            mode: 0o555,
            nlink: 2,
            uid: 0,
            gid: 0,
            rawdev: (0, 0),
            space_used: 0,
            atime: started,
            mtime: started,
            ctime: started,
            fh,
            space: Space {
                name_max: crate::vfs::NAME_MAX as u32,
                ..Space::default()
            },
        }
    }

    /// The `fattr4` of the attributes of `request` that are served (§18.7.3), with
    /// the server's part from `server`. A request for a write-only attribute is
    /// NFS4ERR_INVAL.
    pub fn encode(&self, request: &Bitmap4, server: &AttrContext<'_>) -> Result<Fattr4, NfsStat4> {
        if WRITE_ONLY.iter().any(|&a| request.is_set(a)) {
            return Err(NfsStat4::NFS4ERR_INVAL);
        }
        // The attributes asked that are served, word by word (not each served one
        // looked up in the request: a third of a GETATTR's encoding), without the
        // trailing empty words; then their values in number order.
        let mut mask: Vec<u32> = request
            .0
            .iter()
            .zip(SUPPORTED_WORDS)
            .map(|(asked, served)| asked & served)
            .collect();
        while mask.last() == Some(&0) {
            mask.pop();
        }
        // Room for what the Linux client asks with GETATTR and READDIR (about 140 and
        // 200 bytes): grown from nothing, the buffer was reallocated five times.
        let mut e = Encoder::with_capacity(xdr::TO_XDR_CAPACITY);
        for (word, &bits) in (0u32..).zip(&mask) {
            let mut left = bits;
            while left != 0 {
                self.put(&mut e, word * 32 + left.trailing_zeros(), server);
                left &= left - 1;
            }
        }
        let mask = Bitmap4(mask);
        Ok(Fattr4 {
            attrmask: mask,
            attr_vals: AttrList4(e.finish().to_bytes()),
        })
    }

    fn put(&self, e: &mut Encoder, attr: u32, server: &AttrContext<'_>) {
        use xdr::Encode;
        let time = |e: &mut Encoder, t: NfsTime4| t.encode(e);
        match attr {
            SUPPORTED_ATTRS => {
                e.array(&SUPPORTED_WORDS, |e, w| {
                    e.u32(*w);
                });
            }
            TYPE => {
                e.u32(self.ftype);
            }
            // FH4_PERSISTENT (0): our handles stay valid as long as the object.
            FH_EXPIRE_TYPE => {
                e.u32(0);
            }
            CHANGE => {
                e.u64(self.change);
            }
            SIZE => {
                e.u64(self.size);
            }
            LINK_SUPPORT | SYMLINK_SUPPORT | UNIQUE_HANDLES | CANSETTIME | CASE_PRESERVING
            | CHOWN_RESTRICTED | HOMOGENEOUS | NO_TRUNC => {
                e.bool(true);
            }
            NAMED_ATTR | CASE_INSENSITIVE => {
                e.bool(false);
            }
            FSID => {
                e.u64(self.fsid.0).u64(self.fsid.1);
            }
            LEASE_TIME => {
                e.u32(server.lease);
            }
            RDATTR_ERROR => NfsStat4::NFS4_OK.encode(e),
            FILEHANDLE => self.fh.encode(e),
            FILEID | MOUNTED_ON_FILEID => {
                e.u64(self.fileid);
            }
            FILES_AVAIL => {
                e.u64(self.space.files_avail);
            }
            FILES_FREE => {
                e.u64(self.space.files_free);
            }
            FILES_TOTAL => {
                e.u64(self.space.files_total);
            }
            MAXFILESIZE => {
                e.u64(i64::MAX as u64);
            }
            // As NFSv3's PATHCONF answers.
            MAXLINK => {
                e.u32(65_000);
            }
            MAXNAME => {
                e.u32(self.space.name_max);
            }
            MAXREAD | MAXWRITE => {
                e.u64(u64::from(crate::nfs::MAX_IO));
            }
            MODE => {
                e.u32(self.mode);
            }
            NUMLINKS => {
                e.u32(self.nlink);
            }
            OWNER => {
                server.ids.encode(e, Kind::User, self.uid);
            }
            OWNER_GROUP => {
                server.ids.encode(e, Kind::Group, self.gid);
            }
            RAWDEV => {
                e.u32(self.rawdev.0).u32(self.rawdev.1);
            }
            SPACE_AVAIL => {
                e.u64(self.space.space_avail);
            }
            SPACE_FREE => {
                e.u64(self.space.space_free);
            }
            SPACE_TOTAL => {
                e.u64(self.space.space_total);
            }
            SPACE_USED => {
                e.u64(self.space_used);
            }
            TIME_ACCESS => time(e, self.atime),
            TIME_METADATA => time(e, self.ctime),
            TIME_MODIFY => time(e, self.mtime),
            // Nanosecond timestamps (statx).
            TIME_DELTA => time(
                e,
                NfsTime4 {
                    seconds: 0,
                    nseconds: 1,
                },
            ),
            // What OPEN's EXCLUSIVE4_1 may set ([`super::open_ops::EXCLCREAT`]).
            SUPPATTR_EXCLCREAT => Bitmap4::from_bits(super::open_ops::EXCLCREAT).encode(e),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::{Decode, Decoder};

    /// Lease 90 s, numeric owners.
    fn numeric() -> AttrContext<'static> {
        static IDS: std::sync::LazyLock<IdMap> = std::sync::LazyLock::new(IdMap::numeric);
        AttrContext {
            lease: 90,
            ids: &IDS,
        }
    }

    fn pseudo() -> Values {
        Values::of_pseudo(
            b"/srv",
            NfsFh4::from(&b"rN4Pabcdefgh"[..]),
            NfsTime4::default(),
        )
    }

    /// The file system's figures are read only for a request that names one of
    /// them (a `statvfs` saved on every other GETATTR), and then they are real.
    #[test]
    fn file_system_figures_are_read_only_when_asked() {
        let fd = rustix::fs::open(
            std::env::temp_dir(),
            rustix::fs::OFlags::PATH,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let node = crate::vfs::Node {
            meta: crate::vfs::stat_fd(&fd).unwrap(),
            fd: std::sync::Arc::new(fd),
            at: None,
        };
        let plain = Bitmap4::from_bits(&[fattr4::TYPE, fattr4::SIZE, fattr4::MODE]);
        assert!(!Space::asked(&plain));
        let unread = Space::of(&node, &plain);
        assert_eq!((unread.space_total, unread.files_total), (0, 0));
        for attr in Space::ATTRS {
            let asked = Bitmap4::from_bits(&[fattr4::TYPE, attr]);
            assert!(Space::asked(&asked), "attribute {attr}");
            let read = Space::of(&node, &asked);
            assert!(
                read.space_total > 0 && read.name_max > 0,
                "attribute {attr}: {read:?}"
            );
        }
    }

    #[test]
    fn supported_is_in_number_order() {
        assert!(SUPPORTED.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rfc8881_18_7_3_only_served_attributes_are_returned_in_order() {
        // 12 (acl) is not served: left out of the mask.
        let req = Bitmap4::from_bits(&[TYPE, 12, SIZE, OWNER, FSID]);
        let f = pseudo().encode(&req, &numeric()).unwrap();
        assert_eq!(f.attrmask, Bitmap4::from_bits(&[TYPE, SIZE, FSID, OWNER]));
        let mut d = Decoder::new(f.attr_vals.0.clone());
        assert_eq!(d.u32().unwrap(), ftype4::NF4DIR);
        assert_eq!(d.u64().unwrap(), 4096);
        assert_eq!((d.u64().unwrap(), d.u64().unwrap()), (0, 0));
        assert_eq!(&d.string(16).unwrap()[..], b"0");
        d.finish().unwrap();
    }

    /// The reply's mask is the request's bits that are served, whichever they are
    /// (every pair of attribute numbers below 96, write-only ones left out), and its
    /// values the same as those attributes asked alone, in number order.
    #[test]
    fn rfc8881_18_7_3_the_mask_is_the_served_bits_asked() {
        let values = pseudo();
        let alone = |a: u32| {
            let f = values
                .encode(&Bitmap4::from_bits(&[a]), &numeric())
                .unwrap();
            f.attr_vals.0
        };
        for a in (0..96).filter(|a| !WRITE_ONLY.contains(a)) {
            for b in (a..96).filter(|b| !WRITE_ONLY.contains(b)) {
                let f = values
                    .encode(&Bitmap4::from_bits(&[a, b]), &numeric())
                    .unwrap();
                let served: Vec<u32> = [a, b]
                    .into_iter()
                    .filter(|x| SUPPORTED.contains(x))
                    .collect();
                assert_eq!(f.attrmask, Bitmap4::from_bits(&served), "{a}, {b}");
                let mut want = alone(a).to_vec();
                if b != a {
                    want.extend_from_slice(&alone(b));
                }
                assert_eq!(&f.attr_vals.0[..], &want[..], "{a}, {b}");
            }
        }
    }

    #[test]
    fn rfc8881_18_7_3_write_only_attributes_are_inval() {
        let req = Bitmap4::from_bits(&[TYPE, TIME_MODIFY_SET]);
        assert_eq!(
            pseudo().encode(&req, &numeric()),
            Err(NfsStat4::NFS4ERR_INVAL)
        );
    }

    #[test]
    fn supported_attrs_lists_every_served_attribute() {
        let f = pseudo()
            .encode(&Bitmap4::from_bits(&[SUPPORTED_ATTRS]), &numeric())
            .unwrap();
        let mut d = Decoder::new(f.attr_vals.0.clone());
        let b = Bitmap4::decode(&mut d).unwrap();
        for &a in SUPPORTED {
            assert!(b.is_set(a), "{a}");
        }
        // The REQUIRED attributes of §5.6: 0..=11, 19 and 75.
        for a in (0..=11).chain([19, 75]) {
            assert!(b.is_set(a), "{a}");
        }
    }

    /// The Linux client sends only the attributes `supported_attrs` lists: without
    /// the settable times there, `futimens` went out as an empty SETATTR.
    #[test]
    fn supported_attrs_lists_the_settable_times_that_setattr_serves() {
        let f = pseudo()
            .encode(&Bitmap4::from_bits(&[SUPPORTED_ATTRS]), &numeric())
            .unwrap();
        let b = Bitmap4::decode(&mut Decoder::new(f.attr_vals.0.clone())).unwrap();
        assert!(b.is_set(TIME_ACCESS_SET) && b.is_set(TIME_MODIFY_SET));
    }
}
