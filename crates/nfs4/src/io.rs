//! Data operations (RFC 8881 §18; XDR in RFC 5662): §18.22 READ, §18.32 WRITE,
//! §18.3 COMMIT and §18.24 READLINK.
//!
//! RFC 8267 §5.1 makes the `data` of READ4resok and WRITE4args and the `link` of
//! READLINK4resok DDP-eligible: they are a [`DdpData`] / [`DdpLinkText4`], encoded with
//! [`xdr::Encoder::ddp_opaque`] and decoded as a slice of the received buffer.

use crate::{Count4, DdpData, DdpLinkText4, Offset4, Res4, StateId4, Verifier4};

open_enum! {
    /// RFC 5662 `stable_how4`: how far WRITE data must reach before the reply.
    pub struct StableHow4 {
        /// The server may reply before the data is on stable storage.
        UNSTABLE4 = 0,
        /// Data on stable storage; metadata may lag.
        DATA_SYNC4 = 1,
        /// Data and metadata on stable storage.
        FILE_SYNC4 = 2,
    }
}

xdr_struct! {
    /// §18.22 `READ4args`.
    #[derive(Copy)]
    pub struct Read4Args {
        /// Open, lock or delegation stateid (or a special one).
        pub stateid: StateId4,
        /// Byte offset to read from.
        pub offset: Offset4,
        /// Bytes to read.
        pub count: Count4,
    }
}

xdr_struct! {
    /// §18.22 `READ4resok`.
    pub struct Read4ResOk {
        /// TRUE if the read reached the end of the file.
        pub eof: bool,
        /// The data. DDP-eligible.
        pub data: DdpData,
    }
}

/// §18.22 `READ4res`.
pub type Read4Res = Res4<Read4ResOk>;

xdr_struct! {
    /// §18.32 `WRITE4args`.
    pub struct Write4Args {
        /// Open, lock or delegation stateid (or a special one).
        pub stateid: StateId4,
        /// Byte offset to write at.
        pub offset: Offset4,
        /// How stable the data must be before the reply.
        pub stable: StableHow4,
        /// The data. DDP-eligible.
        pub data: DdpData,
    }
}

xdr_struct! {
    /// §18.32 `WRITE4resok`.
    #[derive(Copy)]
    pub struct Write4ResOk {
        /// Bytes written.
        pub count: Count4,
        /// How stable the data is now.
        pub committed: StableHow4,
        /// Changes when the server loses uncommitted data (restart).
        pub writeverf: Verifier4,
    }
}

/// §18.32 `WRITE4res`.
pub type Write4Res = Res4<Write4ResOk>;

xdr_struct! {
    /// §18.3 `COMMIT4args`.
    #[derive(Copy)]
    pub struct Commit4Args {
        /// Start of the range to commit.
        pub offset: Offset4,
        /// Length of the range (0: to the end of the file).
        pub count: Count4,
    }
}

xdr_struct! {
    /// §18.3 `COMMIT4resok`.
    #[derive(Copy)]
    pub struct Commit4ResOk {
        /// The write verifier.
        pub writeverf: Verifier4,
    }
}

/// §18.3 `COMMIT4res`.
pub type Commit4Res = Res4<Commit4ResOk>;

xdr_struct! {
    /// §18.24 `READLINK4resok`.
    pub struct ReadLink4ResOk {
        /// The link's text. DDP-eligible (RFC 8267 §5.1).
        pub link: DdpLinkText4,
    }
}

/// §18.24 `READLINK4res`.
pub type ReadLink4Res = Res4<ReadLink4ResOk>;
