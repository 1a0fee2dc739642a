//! NFS Version 4 Minor Version 1 wire types (RFC 5662, the XDR of RFC 8881), the
//! COMPOUND codec, and the NFSv4 Upper-Layer Binding for RPC-over-RDMA (RFC 8267 §5).
//!
//! Specs to read first: RFC 8881 §16.2 (COMPOUND), §15.1-15.2 (errors, and which an
//! operation that cannot be decoded gets), §18 (the operations), §2.10 (sessions);
//! RFC 5662 (the XDR); RFC 8267 §5.1 (DDP-eligibility), §5.2 (reply size), §5.4
//! (COMPOUNDs with several DDP-eligible items).
//!
//! - The arguments and results of the operations a first NFSv4.1 server needs are Rust
//!   types with [`xdr::Encode`] and [`xdr::Decode`] (see [`compound::NfsArgop4`]): the
//!   session operations ([`session`]), the file handle and lookup operations
//!   ([`fh`]), READ, WRITE, COMMIT and READLINK ([`io`]), the directory and
//!   attribute-changing operations ([`dir`]: CREATE, REMOVE, RENAME, LINK, READDIR,
//!   SETATTR, VERIFY, NVERIFY) and open, lock and stateid state ([`state`]: OPEN,
//!   CLOSE, OPEN_DOWNGRADE, LOCK, LOCKT, LOCKU, FREE_STATEID, TEST_STATEID,
//!   DELEGRETURN). A server decodes arguments and encodes results, a client the
//!   reverse, with the same code.
//! - [`compound::decode_compound_args`] decodes a COMPOUND and never fails past its
//!   header: it returns the operations decoded so far and, if it stopped early, where
//!   and why ([`compound::Stopped`]), with the status RFC 8881 names for it, so the
//!   server can answer the operations before it (RFC 8881 §16.2.3, §15.2).
//! - Wire enumerations ([`NfsStat4`], [`NfsOpnum4`], ...) are open: newtypes over
//!   `u32` with named constants, so an unknown value decodes and the layer above
//!   decides the answer.
//! - The DDP-eligible items of RFC 8267 §5.1 (READ4resok `data`, WRITE4args `data`,
//!   READLINK4resok `link`, CREATE4args' NF4LNK `linkdata`) are encoded with
//!   [`xdr::Encoder::ddp_opaque`]: an RPC-over-RDMA transport can move them by RDMA
//!   without them ever being copied into an XDR buffer. See [`ulb`].
//!
//! This crate does no I/O, knows nothing of RPC headers or transports, keeps file
//! handles and attribute values opaque (`fattr4`'s `attr_vals` is bytes here), and
//! implements no protocol rule beyond the XDR: operation order, sessions, slots and
//! state belong to the server. Operations not listed in [`compound::NfsArgop4`]
//! (OPENATTR, DELEGPURGE, BACKCHANNEL_CTL, SET_SSV, the directory delegation and pNFS
//! operations, NFSv4.2's) are not coded yet: a COMPOUND holding one stops decoding
//! there with NFS4ERR_NOTSUPP. The callback program (CB_COMPOUND) is not coded yet.
#![warn(missing_docs, unreachable_pub)]

#[macro_use]
extern crate xdr;

pub mod compound;
pub mod dir;
pub mod fh;
pub mod io;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod session;
pub mod state;
mod types;
pub mod ulb;

pub use types::*;

/// NFS program number (RFC 8881 §16: `NFS4_PROGRAM`).
pub const NFS4_PROGRAM: u32 = 100_003;
/// NFS protocol version of every NFSv4 minor version (RFC 8881 §16).
pub const NFS_V4: u32 = 4;
/// The minor version this crate's operation set is written for.
pub const NFS4_MINOR_VERSION: u32 = 1;
/// RFC 8881 §16.1: procedure 0, NULL.
pub const NFSPROC4_NULL: u32 = 0;
/// RFC 8881 §16.2: procedure 1, COMPOUND.
pub const NFSPROC4_COMPOUND: u32 = 1;

/// RFC 5662 `NFS4_FHSIZE`: the largest file handle.
pub const NFS4_FHSIZE: u32 = 128;
/// RFC 5662 `NFS4_VERIFIER_SIZE`.
pub const NFS4_VERIFIER_SIZE: usize = 8;
/// RFC 5662 `NFS4_OTHER_SIZE`: the `other` part of a stateid.
pub const NFS4_OTHER_SIZE: usize = 12;
/// RFC 5662 `NFS4_OPAQUE_LIMIT`.
pub const NFS4_OPAQUE_LIMIT: u32 = 1024;
/// RFC 5662 `NFS4_SESSIONID_SIZE`.
pub const NFS4_SESSIONID_SIZE: usize = 16;

/// Most operations [`compound::decode_compound_args`] decodes from one COMPOUND: 200,
/// as Linux knfsd's `NFSD_MAX_OPS_PER_COMPOUND` (fs/nfsd/nfsd.h since 2024; 50
/// before). Past it decoding stops with NFS4ERR_TOO_MANY_OPS; a server also holds each
/// session to the `ca_maxoperations` it negotiated (RFC 8881 §18.36.3).
pub const MAX_OPS_DECODE: u32 = 200;
/// Decoding bound for `utf8string`s (RFC 5662 leaves them unbounded): names, link
/// text, owners' domains. Larger than any name a file system takes, so a long name
/// reaches the server and gets its answer (NFS4ERR_NAMETOOLONG).
pub const UTF8STR_DECODE_MAX: u32 = 16 * 1024;
/// Decoding bound for COMPOUND's `tag` (Linux knfsd refuses tags over 128 bytes; we
/// take up to [`NFS4_OPAQUE_LIMIT`]).
pub const TAG_DECODE_MAX: u32 = NFS4_OPAQUE_LIMIT;
/// Decoding bound for `bitmap4` words: 32 words, 1024 attribute numbers (RFC 8881
/// defines fewer than 100).
pub const BITMAP_DECODE_MAX: u32 = 32;
/// Decoding bound for `attrlist4` (ACLs make it large); it is never copied.
pub const ATTRLIST_DECODE_MAX: u32 = 1024 * 1024;
/// Decoding bound for the data of READ and WRITE: 64 MiB, far above any
/// `ca_maxrequestsize` a server grants. The payload is never copied by the decoder.
pub const DATA_DECODE_MAX: u32 = 64 * 1024 * 1024;
/// Decoding bound for small variable arrays RFC 5662 leaves unbounded
/// (`callback_sec_parms4<>`, `secinfo4<>`, `sec_oid4<>` lists, GSS handles).
pub const SMALL_ARRAY_DECODE_MAX: u32 = 16;

open_enum! {
    /// RFC 5662 `nfs_opnum4`: the operation numbers of COMPOUND (RFC 8881 §16.2.1),
    /// an open enumeration. 3..=58 are NFSv4.1's; 59..=71 are NFSv4.2's (RFC 7863),
    /// 72..=75 the extended attribute operations (RFC 8276).
    pub struct NfsOpnum4 {
        /// RFC 8881 §18.1 ACCESS.
        OP_ACCESS = 3,
        /// RFC 8881 §18.2 CLOSE.
        OP_CLOSE = 4,
        /// RFC 8881 §18.3 COMMIT.
        OP_COMMIT = 5,
        /// RFC 8881 §18.4 CREATE.
        OP_CREATE = 6,
        /// RFC 8881 §18.5 DELEGPURGE.
        OP_DELEGPURGE = 7,
        /// RFC 8881 §18.6 DELEGRETURN.
        OP_DELEGRETURN = 8,
        /// RFC 8881 §18.7 GETATTR.
        OP_GETATTR = 9,
        /// RFC 8881 §18.8 GETFH.
        OP_GETFH = 10,
        /// RFC 8881 §18.9 LINK.
        OP_LINK = 11,
        /// RFC 8881 §18.10 LOCK.
        OP_LOCK = 12,
        /// RFC 8881 §18.11 LOCKT.
        OP_LOCKT = 13,
        /// RFC 8881 §18.12 LOCKU.
        OP_LOCKU = 14,
        /// RFC 8881 §18.13 LOOKUP.
        OP_LOOKUP = 15,
        /// RFC 8881 §18.14 LOOKUPP.
        OP_LOOKUPP = 16,
        /// RFC 8881 §18.15 NVERIFY.
        OP_NVERIFY = 17,
        /// RFC 8881 §18.16 OPEN.
        OP_OPEN = 18,
        /// RFC 8881 §18.17 OPENATTR.
        OP_OPENATTR = 19,
        /// OPEN_CONFIRM: NFSv4.0 only (RFC 7530); RFC 8881 §17 lists it as MUST NOT implement.
        OP_OPEN_CONFIRM = 20,
        /// RFC 8881 §18.18 OPEN_DOWNGRADE.
        OP_OPEN_DOWNGRADE = 21,
        /// RFC 8881 §18.19 PUTFH.
        OP_PUTFH = 22,
        /// RFC 8881 §18.20 PUTPUBFH.
        OP_PUTPUBFH = 23,
        /// RFC 8881 §18.21 PUTROOTFH.
        OP_PUTROOTFH = 24,
        /// RFC 8881 §18.22 READ.
        OP_READ = 25,
        /// RFC 8881 §18.23 READDIR.
        OP_READDIR = 26,
        /// RFC 8881 §18.24 READLINK.
        OP_READLINK = 27,
        /// RFC 8881 §18.25 REMOVE.
        OP_REMOVE = 28,
        /// RFC 8881 §18.26 RENAME.
        OP_RENAME = 29,
        /// RENEW: NFSv4.0 only (RFC 7530); RFC 8881 §17 lists it as MUST NOT implement.
        OP_RENEW = 30,
        /// RFC 8881 §18.27 RESTOREFH.
        OP_RESTOREFH = 31,
        /// RFC 8881 §18.28 SAVEFH.
        OP_SAVEFH = 32,
        /// RFC 8881 §18.29 SECINFO.
        OP_SECINFO = 33,
        /// RFC 8881 §18.30 SETATTR.
        OP_SETATTR = 34,
        /// SETCLIENTID: NFSv4.0 only (RFC 7530); RFC 8881 §17 lists it as MUST NOT implement.
        OP_SETCLIENTID = 35,
        /// SETCLIENTID_CONFIRM: NFSv4.0 only (RFC 7530); RFC 8881 §17 lists it as MUST NOT implement.
        OP_SETCLIENTID_CONFIRM = 36,
        /// RFC 8881 §18.31 VERIFY.
        OP_VERIFY = 37,
        /// RFC 8881 §18.32 WRITE.
        OP_WRITE = 38,
        /// RELEASE_LOCKOWNER: NFSv4.0 only (RFC 7530); RFC 8881 §17 lists it as MUST NOT implement.
        OP_RELEASE_LOCKOWNER = 39,
        /// RFC 8881 §18.33 BACKCHANNEL_CTL.
        OP_BACKCHANNEL_CTL = 40,
        /// RFC 8881 §18.34 BIND_CONN_TO_SESSION.
        OP_BIND_CONN_TO_SESSION = 41,
        /// RFC 8881 §18.35 EXCHANGE_ID.
        OP_EXCHANGE_ID = 42,
        /// RFC 8881 §18.36 CREATE_SESSION.
        OP_CREATE_SESSION = 43,
        /// RFC 8881 §18.37 DESTROY_SESSION.
        OP_DESTROY_SESSION = 44,
        /// RFC 8881 §18.38 FREE_STATEID.
        OP_FREE_STATEID = 45,
        /// RFC 8881 §18.39 GET_DIR_DELEGATION.
        OP_GET_DIR_DELEGATION = 46,
        /// RFC 8881 §18.40 GETDEVICEINFO.
        OP_GETDEVICEINFO = 47,
        /// RFC 8881 §18.41 GETDEVICELIST.
        OP_GETDEVICELIST = 48,
        /// RFC 8881 §18.42 LAYOUTCOMMIT.
        OP_LAYOUTCOMMIT = 49,
        /// RFC 8881 §18.43 LAYOUTGET.
        OP_LAYOUTGET = 50,
        /// RFC 8881 §18.44 LAYOUTRETURN.
        OP_LAYOUTRETURN = 51,
        /// RFC 8881 §18.45 SECINFO_NO_NAME.
        OP_SECINFO_NO_NAME = 52,
        /// RFC 8881 §18.46 SEQUENCE.
        OP_SEQUENCE = 53,
        /// RFC 8881 §18.47 SET_SSV.
        OP_SET_SSV = 54,
        /// RFC 8881 §18.48 TEST_STATEID.
        OP_TEST_STATEID = 55,
        /// RFC 8881 §18.49 WANT_DELEGATION.
        OP_WANT_DELEGATION = 56,
        /// RFC 8881 §18.50 DESTROY_CLIENTID.
        OP_DESTROY_CLIENTID = 57,
        /// RFC 8881 §18.51 RECLAIM_COMPLETE.
        OP_RECLAIM_COMPLETE = 58,
        /// RFC 7862 ALLOCATE.
        OP_ALLOCATE = 59,
        /// RFC 7862 COPY.
        OP_COPY = 60,
        /// RFC 7862 COPY_NOTIFY.
        OP_COPY_NOTIFY = 61,
        /// RFC 7862 DEALLOCATE.
        OP_DEALLOCATE = 62,
        /// RFC 7862 IO_ADVISE.
        OP_IO_ADVISE = 63,
        /// RFC 7862 LAYOUTERROR.
        OP_LAYOUTERROR = 64,
        /// RFC 7862 LAYOUTSTATS.
        OP_LAYOUTSTATS = 65,
        /// RFC 7862 OFFLOAD_CANCEL.
        OP_OFFLOAD_CANCEL = 66,
        /// RFC 7862 OFFLOAD_STATUS.
        OP_OFFLOAD_STATUS = 67,
        /// RFC 7862 READ_PLUS.
        OP_READ_PLUS = 68,
        /// RFC 7862 SEEK.
        OP_SEEK = 69,
        /// RFC 7862 WRITE_SAME.
        OP_WRITE_SAME = 70,
        /// RFC 7862 CLONE.
        OP_CLONE = 71,
        /// RFC 8276 GETXATTR.
        OP_GETXATTR = 72,
        /// RFC 8276 SETXATTR.
        OP_SETXATTR = 73,
        /// RFC 8276 LISTXATTRS.
        OP_LISTXATTRS = 74,
        /// RFC 8276 REMOVEXATTR.
        OP_REMOVEXATTR = 75,
        /// RFC 8881 §18.52 ILLEGAL: the operation number a reply uses for an undefined one.
        OP_ILLEGAL = 10044,
    }
}

impl NfsOpnum4 {
    /// Whether the number names an operation of minor version `minor` (RFC 8881
    /// §15.2: an operation outside that range gets NFS4ERR_OP_ILLEGAL, one inside it
    /// that the server does not support NFS4ERR_NOTSUPP).
    ///
    /// Minor version 1 made the NFSv4.0-only operations (OPEN_CONFIRM, RENEW,
    /// SETCLIENTID, SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER) "MUST NOT be implemented"
    /// (RFC 8881 §17), not illegal: they stay in range and get NFS4ERR_NOTSUPP.
    pub fn defined_in_minor_version(self, minor: u32) -> bool {
        let last = match minor {
            0 => 39,
            1 => 58,
            _ => 75,
        };
        (3..=last).contains(&self.0)
    }
}

#[cfg(test)]
mod tests;
