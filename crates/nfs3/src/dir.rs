//! Name-space procedures: RFC 1813 §3.3.3 LOOKUP, §3.3.5 READLINK, §3.3.8 CREATE,
//! §3.3.9 MKDIR, §3.3.10 SYMLINK, §3.3.11 MKNOD, §3.3.12 REMOVE, §3.3.13 RMDIR,
//! §3.3.14 RENAME and §3.3.15 LINK.

use xdr::{Decode, Decoder, Encode, Encoder};

use crate::attr::ObjAttrFail;
use crate::{
    CreateMode3, CreateVerf3, DirOpArgs3, Ftype3, NfsFh3, NfsPath3, PostOpAttr, PostOpFh3, Sattr3,
    SpecData3, WccData,
};

xdr_struct! {
    /// §3.3.3 `LOOKUP3args`.
    pub struct Lookup3Args {
        /// Directory and name to look up.
        pub what: DirOpArgs3,
    }
}

xdr_struct! {
    /// §3.3.3 `LOOKUP3resok`.
    pub struct Lookup3ResOk {
        /// Handle of the object found.
        pub object: NfsFh3,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// §3.3.3 `LOOKUP3resfail`.
    pub struct Lookup3ResFail {
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
    }
}

nfs_result!(
    /// §3.3.3 `LOOKUP3res`.
    Lookup3Res = Lookup3ResOk, Lookup3ResFail
);

xdr_struct! {
    /// §3.3.5 `READLINK3args`.
    pub struct ReadLink3Args {
        /// The symbolic link.
        pub symlink: NfsFh3,
    }
}

xdr_struct! {
    /// §3.3.5 `READLINK3resok`. `data` is DDP-eligible (RFC 8267 §4.1).
    pub struct ReadLink3ResOk {
        /// The link's attributes.
        pub symlink_attributes: PostOpAttr,
        /// The link's target.
        pub data: NfsPath3,
    }
}

nfs_result!(
    /// §3.3.5 `READLINK3res`; the fail arm is `symlink_attributes`.
    ReadLink3Res = ReadLink3ResOk, ObjAttrFail
);

/// §3.3.8 `createhow3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow3 {
    /// `UNCHECKED`: create or, if it exists, apply the attributes (size 0 truncates).
    Unchecked(Sattr3),
    /// `GUARDED`: fail with NFS3ERR_EXIST if it exists.
    Guarded(Sattr3),
    /// `EXCLUSIVE`: create with the verifier, which a retransmission presents again.
    Exclusive(CreateVerf3),
}

impl Encode for CreateHow3 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            CreateHow3::Unchecked(a) => {
                CreateMode3::UNCHECKED.encode(enc);
                a.encode(enc);
            }
            CreateHow3::Guarded(a) => {
                CreateMode3::GUARDED.encode(enc);
                a.encode(enc);
            }
            CreateHow3::Exclusive(v) => {
                CreateMode3::EXCLUSIVE.encode(enc);
                v.encode(enc);
            }
        }
    }
}

impl Decode for CreateHow3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match CreateMode3::decode(dec)? {
            CreateMode3::UNCHECKED => Sattr3::decode(dec).map(CreateHow3::Unchecked),
            CreateMode3::GUARDED => Sattr3::decode(dec).map(CreateHow3::Guarded),
            CreateMode3::EXCLUSIVE => CreateVerf3::decode(dec).map(CreateHow3::Exclusive),
            other => Err(xdr::XdrError::InvalidDiscriminant(other.0)),
        }
    }
}

xdr_struct! {
    /// §3.3.8 `CREATE3args`.
    pub struct Create3Args {
        /// Where to create.
        pub dir_op: DirOpArgs3,
        /// How.
        pub how: CreateHow3,
    }
}

xdr_struct! {
    /// §3.3.8 `CREATE3resok`, which MKDIR, SYMLINK and MKNOD share.
    pub struct Create3ResOk {
        /// Handle of the new object.
        pub obj: PostOpFh3,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's weak cache consistency data.
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    /// §3.3.8 `CREATE3resfail`, and the fail arm of MKDIR, SYMLINK, MKNOD, REMOVE and
    /// RMDIR (and REMOVE's and RMDIR's ok arm).
    pub struct DirWcc {
        /// The directory's weak cache consistency data.
        pub dir_wcc: WccData,
    }
}

nfs_result!(
    /// §3.3.8 `CREATE3res`, and the results of MKDIR, SYMLINK and MKNOD.
    Create3Res = Create3ResOk, DirWcc
);

xdr_struct! {
    /// §3.3.9 `MKDIR3args`.
    pub struct MkDir3Args {
        /// Where to create.
        pub dir_op: DirOpArgs3,
        /// Initial attributes.
        pub attributes: Sattr3,
    }
}

xdr_struct! {
    /// §3.3.10 `symlinkdata3`.
    pub struct SymlinkData3 {
        /// Initial attributes.
        pub symlink_attributes: Sattr3,
        /// The target. DDP-eligible (RFC 8267 §4.1).
        pub symlink_data: NfsPath3,
    }
}

xdr_struct! {
    /// §3.3.10 `SYMLINK3args`.
    pub struct Symlink3Args {
        /// Where to create.
        pub dir_op: DirOpArgs3,
        /// What.
        pub symlink: SymlinkData3,
    }
}

xdr_struct! {
    /// §3.3.11 `devicedata3`.
    pub struct DeviceData3 {
        /// Initial attributes.
        pub dev_attributes: Sattr3,
        /// Device numbers.
        pub spec: SpecData3,
    }
}

/// §3.3.11 `mknoddata3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MknodData3 {
    /// NF3CHR or NF3BLK: a device node.
    Device(Ftype3, DeviceData3),
    /// NF3SOCK or NF3FIFO: `pipe_attributes`.
    Pipe(Ftype3, Sattr3),
    /// Any other type: no data; the server answers NFS3ERR_BADTYPE.
    Other(Ftype3),
}

impl MknodData3 {
    /// The type asked for.
    pub fn ftype(&self) -> Ftype3 {
        match self {
            MknodData3::Device(t, _) | MknodData3::Pipe(t, _) | MknodData3::Other(t) => *t,
        }
    }
}

impl Encode for MknodData3 {
    fn encode(&self, enc: &mut Encoder) {
        self.ftype().encode(enc);
        match self {
            MknodData3::Device(_, d) => d.encode(enc),
            MknodData3::Pipe(_, a) => a.encode(enc),
            MknodData3::Other(_) => {}
        }
    }
}

impl Decode for MknodData3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let t = Ftype3::decode(dec)?;
        Ok(match t {
            Ftype3::NF3CHR | Ftype3::NF3BLK => MknodData3::Device(t, DeviceData3::decode(dec)?),
            Ftype3::NF3SOCK | Ftype3::NF3FIFO => MknodData3::Pipe(t, Sattr3::decode(dec)?),
            _ => MknodData3::Other(t),
        })
    }
}

xdr_struct! {
    /// §3.3.11 `MKNOD3args`.
    pub struct Mknod3Args {
        /// Where to create.
        pub dir_op: DirOpArgs3,
        /// What.
        pub what: MknodData3,
    }
}

xdr_struct! {
    /// §3.3.12 `REMOVE3args` and §3.3.13 `RMDIR3args` (the same shape).
    pub struct Remove3Args {
        /// Directory and name to remove.
        pub object: DirOpArgs3,
    }
}

nfs_result!(
    /// §3.3.12 `REMOVE3res` and §3.3.13 `RMDIR3res`.
    Remove3Res = DirWcc, DirWcc
);

xdr_struct! {
    /// §3.3.14 `RENAME3args`.
    pub struct Rename3Args {
        /// Source directory and name.
        pub from: DirOpArgs3,
        /// Target directory and name.
        pub to: DirOpArgs3,
    }
}

xdr_struct! {
    /// §3.3.14 `RENAME3resok` and `RENAME3resfail` (the same shape).
    pub struct Rename3Wcc {
        /// The source directory's weak cache consistency data.
        pub fromdir_wcc: WccData,
        /// The target directory's weak cache consistency data.
        pub todir_wcc: WccData,
    }
}

nfs_result!(
    /// §3.3.14 `RENAME3res`.
    Rename3Res = Rename3Wcc, Rename3Wcc
);

xdr_struct! {
    /// §3.3.15 `LINK3args`.
    pub struct Link3Args {
        /// The existing file.
        pub file: NfsFh3,
        /// Directory and name of the new link.
        pub link: DirOpArgs3,
    }
}

xdr_struct! {
    /// §3.3.15 `LINK3resok` and `LINK3resfail` (the same shape).
    pub struct Link3Wcc {
        /// The file's attributes.
        pub file_attributes: PostOpAttr,
        /// The directory's weak cache consistency data.
        pub linkdir_wcc: WccData,
    }
}

nfs_result!(
    /// §3.3.15 `LINK3res`.
    Link3Res = Link3Wcc, Link3Wcc
);
