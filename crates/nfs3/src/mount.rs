//! MOUNT Version 3 (RFC 1813 Appendix I): the protocol a client uses to get the root
//! file handle of an export.

use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

use crate::NFS3_FHSIZE;

/// Appendix I: `MNTPATHLEN`, the maximum bytes in a path name argument.
pub const MNTPATHLEN: u32 = 1024;
/// Appendix I: `MNTNAMLEN`, the maximum bytes in a name argument.
pub const MNTNAMLEN: u32 = 255;
/// Appendix I: `FHSIZE3`, the maximum bytes in a V3 file handle.
pub const FHSIZE3: u32 = NFS3_FHSIZE;

/// Decoding bound on list entries (DUMP and EXPORT results), a client-side guard.
pub const LIST_DECODE_MAX: u32 = 1 << 16;

/// MOUNT v3 procedure numbers, an open enumeration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MountProc3(pub u32);

impl MountProc3 {
    /// MOUNTPROC3_NULL.
    pub const NULL: Self = Self(0);
    /// MOUNTPROC3_MNT: `dirpath` -> `mountres3`.
    pub const MNT: Self = Self(1);
    /// MOUNTPROC3_DUMP: `void` -> `mountlist`.
    pub const DUMP: Self = Self(2);
    /// MOUNTPROC3_UMNT: `dirpath` -> `void`.
    pub const UMNT: Self = Self(3);
    /// MOUNTPROC3_UMNTALL: `void` -> `void`.
    pub const UMNTALL: Self = Self(4);
    /// MOUNTPROC3_EXPORT: `void` -> `exports`.
    pub const EXPORT: Self = Self(5);

    /// The procedure's name (`MOUNTPROC3_` left off), or `None` for an unknown number.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 6] = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"];
        NAMES.get(self.0 as usize).copied()
    }
}

open_enum! {
    /// Appendix I `mountstat3`.
    pub struct MountStat3 {
        /// No error.
        MNT3_OK = 0,
        /// Not owner.
        MNT3ERR_PERM = 1,
        /// No such file or directory.
        MNT3ERR_NOENT = 2,
        /// I/O error.
        MNT3ERR_IO = 5,
        /// Permission denied.
        MNT3ERR_ACCES = 13,
        /// Not a directory.
        MNT3ERR_NOTDIR = 20,
        /// Invalid argument.
        MNT3ERR_INVAL = 22,
        /// Filename too long.
        MNT3ERR_NAMETOOLONG = 63,
        /// Operation not supported.
        MNT3ERR_NOTSUPP = 10004,
        /// A failure on the server.
        MNT3ERR_SERVERFAULT = 10006,
    }
}

/// Appendix I `dirpath`: `string<MNTPATHLEN>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirPath(pub Bytes);

impl Encode for DirPath {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.0);
    }
}

impl Decode for DirPath {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.string(MNTPATHLEN).map(DirPath)
    }
}

/// Appendix I `name`: `string<MNTNAMLEN>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MntName(pub Bytes);

impl Encode for MntName {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.0);
    }
}

impl Decode for MntName {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.string(MNTNAMLEN).map(MntName)
    }
}

/// Appendix I `mountres3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes3 {
    /// `MNT3_OK`: `mountres3_ok`.
    Ok {
        /// `fhandle3`: the export's root handle.
        fhandle: Bytes,
        /// RPC authentication flavors the server accepts, most preferred first.
        auth_flavors: Vec<u32>,
    },
    /// Any other status, no data.
    Fail(MountStat3),
}

impl Encode for MountRes3 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            MountRes3::Ok {
                fhandle,
                auth_flavors,
            } => {
                MountStat3::MNT3_OK.encode(enc);
                enc.opaque(fhandle);
                enc.array(auth_flavors, |e, f| {
                    e.u32(*f);
                });
            }
            MountRes3::Fail(status) => status.encode(enc),
        }
    }
}

impl Decode for MountRes3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match MountStat3::decode(dec)? {
            MountStat3::MNT3_OK => Ok(MountRes3::Ok {
                fhandle: dec.opaque(FHSIZE3)?,
                auth_flavors: dec.array(64, |d| d.u32())?,
            }),
            status => Ok(MountRes3::Fail(status)),
        }
    }
}

xdr_struct! {
    /// Appendix I `mountbody` (one entry of `mountlist`).
    pub struct MountBody {
        /// The client's host name.
        pub ml_hostname: MntName,
        /// The directory it mounted.
        pub ml_directory: DirPath,
    }
}

/// Appendix I `mountlist`: the result of DUMP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountList(pub Vec<MountBody>);

impl Encode for MountList {
    fn encode(&self, enc: &mut Encoder) {
        enc.list(&self.0, |e, v| v.encode(e));
    }
}

impl Decode for MountList {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.list(LIST_DECODE_MAX, MountBody::decode).map(MountList)
    }
}

/// Appendix I `exportnode` (one entry of `exports`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportNode {
    /// The exported directory.
    pub ex_dir: DirPath,
    /// `groups`: the hosts or netgroups allowed to mount it (empty: everyone).
    pub ex_groups: Vec<MntName>,
}

impl Encode for ExportNode {
    fn encode(&self, enc: &mut Encoder) {
        self.ex_dir.encode(enc);
        enc.list(&self.ex_groups, |e, g| g.encode(e));
    }
}

impl Decode for ExportNode {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(ExportNode {
            ex_dir: DirPath::decode(dec)?,
            ex_groups: dec.list(LIST_DECODE_MAX, MntName::decode)?,
        })
    }
}

/// Appendix I `exports`: the result of EXPORT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports(pub Vec<ExportNode>);

impl Encode for Exports {
    fn encode(&self, enc: &mut Encoder) {
        enc.list(&self.0, |e, v| v.encode(e));
    }
}

impl Decode for Exports {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.list(LIST_DECODE_MAX, ExportNode::decode).map(Exports)
    }
}
