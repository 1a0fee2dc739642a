//! NFS Version 3 (RFC 1813) and MOUNT Version 3 (RFC 1813 Appendix I) wire types, and
//! the NFSv3 Upper Layer Binding for RPC-over-RDMA (RFC 8267).
//!
//! Specs to read first: RFC 1813 §2 (data types), §3 (procedures), Appendix I (MOUNT);
//! RFC 8267 §4 (DDP-eligibility) and §5 (reply size).
//!
//! - Every argument and result of the 22 NFSv3 procedures and the 6 MOUNT procedures
//!   is a Rust type with [`xdr::Encode`] and [`xdr::Decode`], so a server decodes
//!   arguments and encodes results, and a client does the reverse, with the same code.
//! - Wire enumerations ([`NfsStat3`], [`Ftype3`], [`StableHow`], ...) are open:
//!   newtypes over `u32` with named constants, so an unknown value decodes and the
//!   layer above decides the answer.
//! - The DDP-eligible items of RFC 8267 §4.1 (READ3resok `data`, WRITE3args `data`,
//!   READLINK3resok `data`, SYMLINK3args `symlink_data`) are encoded with
//!   [`xdr::Encoder::ddp_opaque`]: an RPC-over-RDMA transport can move them by RDMA
//!   without them ever being copied into an XDR buffer. See [`ulb`].
//!
//! This crate does no I/O, knows nothing of RPC headers or transports, and does not
//! interpret file handles (they are opaque here, as in the RFC).
#![warn(missing_docs, unreachable_pub)]

#[macro_use]
extern crate xdr;
#[macro_use]
mod macros;

pub mod attr;
pub mod dir;
pub mod fs;
pub mod io;
pub mod mount;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod readdir;
mod types;
pub mod ulb;

pub use types::*;

/// NFS program number (RFC 1813 §1.5 / Appendix: `NFS_PROGRAM`).
pub const NFS_PROGRAM: u32 = 100_003;
/// NFS protocol version implemented here.
pub const NFS_V3: u32 = 3;
/// MOUNT program number (RFC 1813 Appendix I: `MOUNT_PROGRAM`).
pub const MOUNT_PROGRAM: u32 = 100_005;
/// MOUNT protocol version implemented here.
pub const MOUNT_V3: u32 = 3;

/// RFC 1813 §2.4: "NFS3_FHSIZE: The maximum size in bytes of the opaque file handle."
pub const NFS3_FHSIZE: u32 = 64;
/// RFC 1813 §2.4: size of the cookie verifier of READDIR and READDIRPLUS.
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// RFC 1813 §2.4: size of the verifier of exclusive CREATE.
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// RFC 1813 §2.4: size of the WRITE / COMMIT verifier.
pub const NFS3_WRITEVERFSIZE: usize = 8;

/// Decoding bound for `filename3` (RFC 1813 §2.5 leaves `string<>` unbounded).
///
/// Larger than any name a file system accepts, so that a long name reaches the server
/// and gets its answer (NFS3ERR_NAMETOOLONG), while decoding stays zero-copy and can
/// never allocate what the peer announces.
pub const FILENAME_DECODE_MAX: u32 = 16 * 1024;
/// Decoding bound for `nfspath3` (as [`FILENAME_DECODE_MAX`], for symlink targets).
pub const NFSPATH_DECODE_MAX: u32 = 64 * 1024;
/// Decoding bound for the data of READ and WRITE: 64 MiB, far above the `rtmax` and
/// `wtmax` servers advertise. The payload itself is never copied by the decoder.
pub const DATA_DECODE_MAX: u32 = 64 * 1024 * 1024;

/// NFSv3 procedure numbers (RFC 1813 §3), an open enumeration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NfsProc3(pub u32);

impl NfsProc3 {
    /// §3.3.0 NULL: do nothing.
    pub const NULL: Self = Self(0);
    /// §3.3.1 GETATTR.
    pub const GETATTR: Self = Self(1);
    /// §3.3.2 SETATTR.
    pub const SETATTR: Self = Self(2);
    /// §3.3.3 LOOKUP.
    pub const LOOKUP: Self = Self(3);
    /// §3.3.4 ACCESS.
    pub const ACCESS: Self = Self(4);
    /// §3.3.5 READLINK.
    pub const READLINK: Self = Self(5);
    /// §3.3.6 READ.
    pub const READ: Self = Self(6);
    /// §3.3.7 WRITE.
    pub const WRITE: Self = Self(7);
    /// §3.3.8 CREATE.
    pub const CREATE: Self = Self(8);
    /// §3.3.9 MKDIR.
    pub const MKDIR: Self = Self(9);
    /// §3.3.10 SYMLINK.
    pub const SYMLINK: Self = Self(10);
    /// §3.3.11 MKNOD.
    pub const MKNOD: Self = Self(11);
    /// §3.3.12 REMOVE.
    pub const REMOVE: Self = Self(12);
    /// §3.3.13 RMDIR.
    pub const RMDIR: Self = Self(13);
    /// §3.3.14 RENAME.
    pub const RENAME: Self = Self(14);
    /// §3.3.15 LINK.
    pub const LINK: Self = Self(15);
    /// §3.3.16 READDIR.
    pub const READDIR: Self = Self(16);
    /// §3.3.17 READDIRPLUS.
    pub const READDIRPLUS: Self = Self(17);
    /// §3.3.18 FSSTAT.
    pub const FSSTAT: Self = Self(18);
    /// §3.3.19 FSINFO.
    pub const FSINFO: Self = Self(19);
    /// §3.3.20 PATHCONF.
    pub const PATHCONF: Self = Self(20);
    /// §3.3.21 COMMIT.
    pub const COMMIT: Self = Self(21);

    /// The procedure's name as the RFC writes it, or `None` for an unknown number.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 22] = [
            "NULL",
            "GETATTR",
            "SETATTR",
            "LOOKUP",
            "ACCESS",
            "READLINK",
            "READ",
            "WRITE",
            "CREATE",
            "MKDIR",
            "SYMLINK",
            "MKNOD",
            "REMOVE",
            "RMDIR",
            "RENAME",
            "LINK",
            "READDIR",
            "READDIRPLUS",
            "FSSTAT",
            "FSINFO",
            "PATHCONF",
            "COMMIT",
        ];
        NAMES.get(self.0 as usize).copied()
    }
}

#[cfg(test)]
mod tests;
