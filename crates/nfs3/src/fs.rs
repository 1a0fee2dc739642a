//! File-system procedures: RFC 1813 §3.3.18 FSSTAT, §3.3.19 FSINFO and §3.3.20
//! PATHCONF.

use crate::attr::ObjAttrFail;
use crate::{NfsFh3, NfsTime3, PostOpAttr};

xdr_struct! {
    /// `FSSTAT3args`, `FSINFO3args`, `PATHCONF3args` (one handle each; GETATTR's
    /// arguments have the same shape).
    pub struct FsRootArgs {
        /// A handle on the file system.
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// §3.3.18 `FSSTAT3resok`.
    pub struct FsStat3ResOk {
        /// The root's attributes.
        pub obj_attributes: PostOpAttr,
        /// Total size in bytes.
        pub tbytes: u64,
        /// Free bytes.
        pub fbytes: u64,
        /// Free bytes available to the user.
        pub abytes: u64,
        /// Total file slots.
        pub tfiles: u64,
        /// Free file slots.
        pub ffiles: u64,
        /// Free file slots available to the user.
        pub afiles: u64,
        /// Seconds for which these values are not expected to change.
        pub invarsec: u32,
    }
}

nfs_result!(
    /// §3.3.18 `FSSTAT3res`.
    FsStat3Res = FsStat3ResOk, ObjAttrFail
);

/// §3.3.19 FSINFO `properties` bits.
pub mod properties {
    /// Hard links are supported.
    pub const FSF3_LINK: u32 = 0x0001;
    /// Symbolic links are supported.
    pub const FSF3_SYMLINK: u32 = 0x0002;
    /// PATHCONF answers are the same for every file.
    pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
    /// SETATTR can set times to the client's time.
    pub const FSF3_CANSETTIME: u32 = 0x0010;
}

xdr_struct! {
    /// §3.3.19 `FSINFO3resok`.
    pub struct FsInfo3ResOk {
        /// The root's attributes.
        pub obj_attributes: PostOpAttr,
        /// Maximum READ size.
        pub rtmax: u32,
        /// Preferred READ size.
        pub rtpref: u32,
        /// Suggested READ size multiple.
        pub rtmult: u32,
        /// Maximum WRITE size.
        pub wtmax: u32,
        /// Preferred WRITE size.
        pub wtpref: u32,
        /// Suggested WRITE size multiple.
        pub wtmult: u32,
        /// Preferred READDIR size.
        pub dtpref: u32,
        /// Maximum file size.
        pub maxfilesize: u64,
        /// Granularity of server times.
        pub time_delta: NfsTime3,
        /// Bit mask of [`properties`].
        pub properties: u32,
    }
}

nfs_result!(
    /// §3.3.19 `FSINFO3res`.
    FsInfo3Res = FsInfo3ResOk, ObjAttrFail
);

xdr_struct! {
    /// §3.3.20 `PATHCONF3resok`.
    pub struct PathConf3ResOk {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
        /// Maximum number of hard links.
        pub linkmax: u32,
        /// Maximum length of a name component.
        pub name_max: u32,
        /// TRUE: a longer name is rejected, not truncated.
        pub no_trunc: bool,
        /// TRUE: changing owner is restricted to the superuser.
        pub chown_restricted: bool,
        /// TRUE: names are case-insensitive.
        pub case_insensitive: bool,
        /// TRUE: names keep their case.
        pub case_preserving: bool,
    }
}

nfs_result!(
    /// §3.3.20 `PATHCONF3res`.
    PathConf3Res = PathConf3ResOk, ObjAttrFail
);
