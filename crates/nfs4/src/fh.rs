//! File handle, lookup and attribute operations (RFC 8881 §18; XDR in RFC 5662):
//! §18.19 PUTFH, §18.20 PUTPUBFH, §18.21 PUTROOTFH, §18.8 GETFH, §18.28 SAVEFH,
//! §18.27 RESTOREFH, §18.13 LOOKUP, §18.14 LOOKUPP, §18.1 ACCESS, §18.7 GETATTR,
//! §18.29 SECINFO, §18.45 SECINFO_NO_NAME.
//!
//! PUTPUBFH, PUTROOTFH, SAVEFH, RESTOREFH and LOOKUPP have no arguments, and they and
//! PUTFH and LOOKUP answer a bare `nfsstat4`: they need no types here.

use xdr::{Decode, Decoder, Encode, Encoder};

use crate::session::{RpcGssSvc, RPCSEC_GSS};
use crate::{Bitmap4, Component4, Fattr4, NfsFh4, Res4, SMALL_ARRAY_DECODE_MAX};

xdr_struct! {
    /// §18.19 `PUTFH4args` (result: `nfsstat4`).
    pub struct PutFh4Args {
        /// The new current file handle.
        pub object: NfsFh4,
    }
}

xdr_struct! {
    /// §18.8 `GETFH4resok`.
    pub struct GetFh4ResOk {
        /// The current file handle.
        pub object: NfsFh4,
    }
}

/// §18.8 `GETFH4res`.
pub type GetFh4Res = Res4<GetFh4ResOk>;

xdr_struct! {
    /// §18.13 `LOOKUP4args` (result: `nfsstat4`).
    pub struct Lookup4Args {
        /// The name to look up in the current directory.
        pub objname: Component4,
    }
}

/// ACCESS bit: read data or list a directory (RFC 8881 §18.1.3).
pub const ACCESS4_READ: u32 = 0x0000_0001;
/// ACCESS bit: look up a name in a directory.
pub const ACCESS4_LOOKUP: u32 = 0x0000_0002;
/// ACCESS bit: rewrite data or modify a directory's entries.
pub const ACCESS4_MODIFY: u32 = 0x0000_0004;
/// ACCESS bit: write new data or add directory entries.
pub const ACCESS4_EXTEND: u32 = 0x0000_0008;
/// ACCESS bit: delete a directory entry.
pub const ACCESS4_DELETE: u32 = 0x0000_0010;
/// ACCESS bit: execute a file.
pub const ACCESS4_EXECUTE: u32 = 0x0000_0020;

xdr_struct! {
    /// §18.1 `ACCESS4args`.
    #[derive(Copy)]
    pub struct Access4Args {
        /// `ACCESS4_*` bits to check.
        pub access: u32,
    }
}

xdr_struct! {
    /// §18.1 `ACCESS4resok`.
    #[derive(Copy)]
    pub struct Access4ResOk {
        /// The bits the server could check.
        pub supported: u32,
        /// The bits granted.
        pub access: u32,
    }
}

/// §18.1 `ACCESS4res`.
pub type Access4Res = Res4<Access4ResOk>;

xdr_struct! {
    /// §18.7 `GETATTR4args`.
    pub struct GetAttr4Args {
        /// The attributes wanted.
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// §18.7 `GETATTR4resok`.
    pub struct GetAttr4ResOk {
        /// The attributes, values kept opaque.
        pub obj_attributes: Fattr4,
    }
}

/// §18.7 `GETATTR4res`.
pub type GetAttr4Res = Res4<GetAttr4ResOk>;

xdr_struct! {
    /// §18.29 `SECINFO4args`.
    pub struct SecInfo4Args {
        /// The name in the current directory whose security to report.
        pub name: Component4,
    }
}

xdr_struct! {
    /// RFC 5662 `rpcsec_gss_info`.
    pub struct RpcSecGssInfo {
        /// The mechanism's OID (`sec_oid4`), DER bytes.
        pub oid: crate::OpaqueLimit,
        /// Quality of protection (`qop4`).
        pub qop: u32,
        /// Service.
        pub service: RpcGssSvc,
    }
}

/// RFC 5662 `secinfo4`: one security flavor the server accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecInfo4 {
    /// `RPCSEC_GSS` with its mechanism, QOP and service.
    RpcSecGss(RpcSecGssInfo),
    /// Any other flavor (`AUTH_NONE` 0, `AUTH_SYS` 1, ...), without data.
    Flavor(u32),
}

impl Encode for SecInfo4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::RpcSecGss(info) => {
                enc.u32(RPCSEC_GSS);
                info.encode(enc);
            }
            Self::Flavor(f) => {
                enc.u32(*f);
            }
        }
    }
}

impl Decode for SecInfo4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match dec.u32()? {
            RPCSEC_GSS => RpcSecGssInfo::decode(dec).map(Self::RpcSecGss),
            f => Ok(Self::Flavor(f)),
        }
    }
}

/// §18.29 `SECINFO4resok`: `secinfo4 SECINFO4resok<>`, in the server's order of
/// preference. Decoded with at most
/// [`SMALL_ARRAY_DECODE_MAX`] entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecInfo4ResOk(pub Vec<SecInfo4>);

impl Encode for SecInfo4ResOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.array(&self.0, |e, s| s.encode(e));
    }
}

impl Decode for SecInfo4ResOk {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.array(SMALL_ARRAY_DECODE_MAX, SecInfo4::decode)
            .map(SecInfo4ResOk)
    }
}

/// §18.29 `SECINFO4res` (also §18.45 `SECINFO_NO_NAME4res`).
pub type SecInfo4Res = Res4<SecInfo4ResOk>;

open_enum! {
    /// §18.45 `secinfo_style4`: the argument of SECINFO_NO_NAME.
    pub struct SecInfoStyle4 {
        /// The current file handle's security.
        SECINFO_STYLE4_CURRENT_FH = 0,
        /// Its parent directory's security.
        SECINFO_STYLE4_PARENT = 1,
    }
}
