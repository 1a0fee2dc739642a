//! RFC 1813 §3.3.1 GETATTR, §3.3.2 SETATTR and §3.3.4 ACCESS.

use crate::{Fattr3, NfsFh3, NfsTime3, PostOpAttr, Sattr3, Void, WccData};

xdr_struct! {
    /// §3.3.1 `GETATTR3args`.
    pub struct GetAttr3Args {
        /// The object.
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// §3.3.1 `GETATTR3resok`.
    pub struct GetAttr3ResOk {
        /// Its attributes.
        pub obj_attributes: Fattr3,
    }
}

nfs_result!(
    /// §3.3.1 `GETATTR3res`.
    GetAttr3Res = GetAttr3ResOk, Void
);

xdr_struct! {
    /// §3.3.2 `SETATTR3args`.
    pub struct SetAttr3Args {
        /// The object.
        pub object: NfsFh3,
        /// What to set.
        pub new_attributes: Sattr3,
        /// `sattrguard3`: when present, the object's ctime must equal it
        /// (else NFS3ERR_NOT_SYNC).
        pub guard: Option<NfsTime3>,
    }
}

xdr_struct! {
    /// §3.3.2 `SETATTR3resok` and `SETATTR3resfail` (the same shape).
    pub struct SetAttr3Wcc {
        /// Weak cache consistency data of the object.
        pub obj_wcc: WccData,
    }
}

nfs_result!(
    /// §3.3.2 `SETATTR3res`.
    SetAttr3Res = SetAttr3Wcc, SetAttr3Wcc
);

/// §3.3.4 ACCESS bits.
pub mod access {
    /// Read data from a file or read a directory.
    pub const READ: u32 = 0x0001;
    /// Look up a name in a directory.
    pub const LOOKUP: u32 = 0x0002;
    /// Rewrite existing file data or modify existing directory entries.
    pub const MODIFY: u32 = 0x0004;
    /// Write new data or add directory entries.
    pub const EXTEND: u32 = 0x0008;
    /// Delete an existing directory entry.
    pub const DELETE: u32 = 0x0010;
    /// Execute a file (no meaning for a directory).
    pub const EXECUTE: u32 = 0x0020;
}

xdr_struct! {
    /// §3.3.4 `ACCESS3args`.
    pub struct Access3Args {
        /// The object.
        pub object: NfsFh3,
        /// Bit mask of [`access`] rights to check.
        pub access: u32,
    }
}

xdr_struct! {
    /// §3.3.4 `ACCESS3resok`.
    pub struct Access3ResOk {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
        /// The rights granted, a subset of those asked for.
        pub access: u32,
    }
}

xdr_struct! {
    /// §3.3.4 `ACCESS3resfail` (and the fail arm of several other results that carry
    /// only the object's attributes).
    pub struct ObjAttrFail {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
    }
}

nfs_result!(
    /// §3.3.4 `ACCESS3res`.
    Access3Res = Access3ResOk, ObjAttrFail
);
