//! Data procedures: RFC 1813 §3.3.6 READ, §3.3.7 WRITE and §3.3.21 COMMIT.
//!
//! The `data` of READ3resok and WRITE3args is DDP-eligible (RFC 8267 §4.1) and is a
//! [`DdpData`]: encoded with [`xdr::Encoder::ddp_opaque`], decoded as a slice of the
//! received buffer.

use xdr::{Encode, Encoder, FileRange, XdrStream};

use crate::attr::ObjAttrFail;
use crate::{DdpData, NfsFh3, NfsStat3, PostOpAttr, StableHow, WccData, WriteVerf3};

xdr_struct! {
    /// §3.3.6 `READ3args`.
    pub struct Read3Args {
        /// The file.
        pub file: NfsFh3,
        /// Byte offset to read from.
        pub offset: u64,
        /// Bytes to read.
        pub count: u32,
    }
}

xdr_struct! {
    /// §3.3.6 `READ3resok`.
    pub struct Read3ResOk {
        /// The file's attributes.
        pub file_attributes: PostOpAttr,
        /// Bytes read (the length of `data`).
        pub count: u32,
        /// TRUE if the read reached the end of the file.
        pub eof: bool,
        /// The data. DDP-eligible.
        pub data: DdpData,
    }
}

nfs_result!(
    /// §3.3.6 `READ3res`; the fail arm is `file_attributes`.
    Read3Res = Read3ResOk, ObjAttrFail
);

/// §3.3.6 `READ3res`, NFS3_OK arm, whose data is left in a file: `data` is the
/// range ([`Encoder::ddp_file`]), and `count` its length. The same encoding as
/// `Read3Res::Ok(Read3ResOk { .. })` with the range's bytes as `data`, for a
/// byte-stream transport to send from the page cache.
pub fn read_ok_from_file(file_attributes: &PostOpAttr, eof: bool, data: FileRange) -> XdrStream {
    let mut enc = Encoder::new();
    NfsStat3::NFS3_OK.encode(&mut enc);
    file_attributes.encode(&mut enc);
    enc.u32(u32::try_from(data.len).expect("a READ count fits in 32 bits"));
    enc.bool(eof);
    enc.ddp_file(data);
    enc.finish()
}

xdr_struct! {
    /// §3.3.7 `WRITE3args`.
    pub struct Write3Args {
        /// The file.
        pub file: NfsFh3,
        /// Byte offset to write at.
        pub offset: u64,
        /// Bytes to write; RFC 1813 §3.3.7 says it equals the length of `data`.
        pub count: u32,
        /// How stable the data must be before the reply.
        pub stable: StableHow,
        /// The data. DDP-eligible.
        pub data: DdpData,
    }
}

xdr_struct! {
    /// §3.3.7 `WRITE3resok`.
    pub struct Write3ResOk {
        /// The file's weak cache consistency data.
        pub file_wcc: WccData,
        /// Bytes written.
        pub count: u32,
        /// How stable the data is now.
        pub committed: StableHow,
        /// The server's write verifier: it changes when the server may have lost
        /// unstable data (a restart).
        pub verf: WriteVerf3,
    }
}

xdr_struct! {
    /// §3.3.7 `WRITE3resfail`, §3.3.21 `COMMIT3resfail`.
    pub struct FileWcc {
        /// The file's weak cache consistency data.
        pub file_wcc: WccData,
    }
}

nfs_result!(
    /// §3.3.7 `WRITE3res`.
    Write3Res = Write3ResOk, FileWcc
);

xdr_struct! {
    /// §3.3.21 `COMMIT3args`.
    pub struct Commit3Args {
        /// The file.
        pub file: NfsFh3,
        /// Start of the range to commit.
        pub offset: u64,
        /// Bytes to commit; 0 means to the end of the file.
        pub count: u32,
    }
}

xdr_struct! {
    /// §3.3.21 `COMMIT3resok`.
    pub struct Commit3ResOk {
        /// The file's weak cache consistency data.
        pub file_wcc: WccData,
        /// The write verifier.
        pub verf: WriteVerf3,
    }
}

nfs_result!(
    /// §3.3.21 `COMMIT3res`.
    Commit3Res = Commit3ResOk, FileWcc
);
