//! Directory and attribute-changing operations (RFC 8881 §18; XDR in RFC 5662):
//! §18.4 CREATE, §18.25 REMOVE, §18.26 RENAME, §18.9 LINK, §18.23 READDIR,
//! §18.30 SETATTR, §18.31 VERIFY and §18.15 NVERIFY.
//!
//! CREATE's `linkdata` (the NF4LNK arm) is DDP-eligible (RFC 8267 §5.1): a
//! [`DdpLinkText4`].

use xdr::{Decode, Decoder, Encode, EncodedList, Encoder};

use crate::{
    Bitmap4, ChangeInfo4, Component4, Count4, DdpLinkText4, Fattr4, NfsStat4, Res4, StateId4,
    Verifier4,
};

open_enum! {
    /// RFC 5662 `nfs_ftype4`: the type of a file.
    pub struct NfsFtype4 {
        /// Regular file.
        NF4REG = 1,
        /// Directory.
        NF4DIR = 2,
        /// Block special device.
        NF4BLK = 3,
        /// Character special device.
        NF4CHR = 4,
        /// Symbolic link.
        NF4LNK = 5,
        /// Socket.
        NF4SOCK = 6,
        /// Named pipe.
        NF4FIFO = 7,
        /// Attribute directory.
        NF4ATTRDIR = 8,
        /// Named attribute.
        NF4NAMEDATTR = 9,
    }
}

xdr_struct! {
    /// RFC 5662 `specdata4`: device numbers.
    #[derive(Copy, Default)]
    pub struct SpecData4 {
        /// Major device number.
        pub specdata1: u32,
        /// Minor device number.
        pub specdata2: u32,
    }
}

/// RFC 5662 `createtype4`: what CREATE makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateType4 {
    /// `NF4LNK`: a symbolic link with its text (DDP-eligible).
    Link(DdpLinkText4),
    /// `NF4BLK`: a block device.
    Blk(SpecData4),
    /// `NF4CHR`: a character device.
    Chr(SpecData4),
    /// `NF4SOCK`, `NF4FIFO`, `NF4DIR`, or any other type (the `default: void` arm,
    /// which the server answers NFS4ERR_BADTYPE).
    Other(NfsFtype4),
}

impl Encode for CreateType4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::Link(l) => {
                NfsFtype4::NF4LNK.encode(enc);
                l.encode(enc);
            }
            Self::Blk(d) => {
                NfsFtype4::NF4BLK.encode(enc);
                d.encode(enc);
            }
            Self::Chr(d) => {
                NfsFtype4::NF4CHR.encode(enc);
                d.encode(enc);
            }
            Self::Other(t) => t.encode(enc),
        }
    }
}

impl Decode for CreateType4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match NfsFtype4::decode(dec)? {
            NfsFtype4::NF4LNK => DdpLinkText4::decode(dec).map(Self::Link),
            NfsFtype4::NF4BLK => SpecData4::decode(dec).map(Self::Blk),
            NfsFtype4::NF4CHR => SpecData4::decode(dec).map(Self::Chr),
            t => Ok(Self::Other(t)),
        }
    }
}

xdr_struct! {
    /// §18.4 `CREATE4args` (not for regular files: OPEN creates those).
    pub struct Create4Args {
        /// The type and its type-specific data.
        pub objtype: CreateType4,
        /// The new entry's name in the current directory.
        pub objname: Component4,
        /// Initial attributes.
        pub createattrs: Fattr4,
    }
}

xdr_struct! {
    /// §18.4 `CREATE4resok`.
    pub struct Create4ResOk {
        /// The directory's change information.
        pub cinfo: ChangeInfo4,
        /// The attributes set.
        pub attrset: Bitmap4,
    }
}

/// §18.4 `CREATE4res`.
pub type Create4Res = Res4<Create4ResOk>;

xdr_struct! {
    /// §18.25 `REMOVE4args`.
    pub struct Remove4Args {
        /// The name to remove from the current directory.
        pub target: Component4,
    }
}

xdr_struct! {
    /// §18.25 `REMOVE4resok`.
    #[derive(Copy)]
    pub struct Remove4ResOk {
        /// The directory's change information.
        pub cinfo: ChangeInfo4,
    }
}

/// §18.25 `REMOVE4res`.
pub type Remove4Res = Res4<Remove4ResOk>;

xdr_struct! {
    /// §18.26 `RENAME4args`: from the saved directory to the current one.
    pub struct Rename4Args {
        /// The name in the saved directory.
        pub oldname: Component4,
        /// The name in the current directory.
        pub newname: Component4,
    }
}

xdr_struct! {
    /// §18.26 `RENAME4resok`.
    #[derive(Copy)]
    pub struct Rename4ResOk {
        /// The source directory's change information.
        pub source_cinfo: ChangeInfo4,
        /// The target directory's change information.
        pub target_cinfo: ChangeInfo4,
    }
}

/// §18.26 `RENAME4res`.
pub type Rename4Res = Res4<Rename4ResOk>;

xdr_struct! {
    /// §18.9 `LINK4args`: link the saved file handle into the current directory.
    pub struct Link4Args {
        /// The new name.
        pub newname: Component4,
    }
}

xdr_struct! {
    /// §18.9 `LINK4resok`.
    #[derive(Copy)]
    pub struct Link4ResOk {
        /// The directory's change information.
        pub cinfo: ChangeInfo4,
    }
}

/// §18.9 `LINK4res`.
pub type Link4Res = Res4<Link4ResOk>;

xdr_struct! {
    /// §18.23 `READDIR4args`.
    pub struct ReadDir4Args {
        /// Where to resume (0: from the start).
        pub cookie: u64,
        /// The verifier that came with `cookie`.
        pub cookieverf: Verifier4,
        /// Hint: bytes of names and cookies wanted.
        pub dircount: Count4,
        /// Largest READDIR4resok the client takes.
        pub maxcount: Count4,
        /// The attributes wanted per entry.
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// RFC 5662 `entry4`, without its `nextentry` link ([`DirList4`] holds the list).
    pub struct Entry4 {
        /// The cookie to resume after this entry.
        pub cookie: u64,
        /// The name.
        pub name: Component4,
        /// The attributes asked for.
        pub attrs: Fattr4,
    }
}

/// Decoding bound on READDIR entries: the list is bounded by the received bytes anyway
/// (each entry takes at least 24), this caps what one reply may announce.
pub const READDIR_ENTRIES_DECODE_MAX: u32 = 1 << 20;

/// RFC 5662 `dirlist4`: the entries (a linked list of optional-data on the wire, kept
/// encoded: [`xdr::EncodedList`]) and whether the directory ends there.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirList4 {
    /// `entry4 *entries`.
    pub entries: EncodedList<Entry4>,
    /// TRUE if the last entry is the directory's last.
    pub eof: bool,
}

impl Encode for DirList4 {
    fn encode(&self, enc: &mut Encoder) {
        self.entries.encode(enc);
        enc.bool(self.eof);
    }
}

impl Decode for DirList4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            entries: EncodedList::decode_max(dec, READDIR_ENTRIES_DECODE_MAX)?,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// §18.23 `READDIR4resok`.
    pub struct ReadDir4ResOk {
        /// The verifier for the cookies.
        pub cookieverf: Verifier4,
        /// The entries.
        pub reply: DirList4,
    }
}

/// §18.23 `READDIR4res`.
pub type ReadDir4Res = Res4<ReadDir4ResOk>;

xdr_struct! {
    /// §18.30 `SETATTR4args`.
    pub struct SetAttr4Args {
        /// The open stateid when the size changes, else the anonymous stateid.
        pub stateid: StateId4,
        /// The attributes to set.
        pub obj_attributes: Fattr4,
    }
}

xdr_struct! {
    /// §18.30 `SETATTR4res`: not a union, `attrsset` follows every status.
    pub struct SetAttr4Res {
        /// The status.
        pub status: NfsStat4,
        /// The attributes set (empty on most errors).
        pub attrsset: Bitmap4,
    }
}

xdr_struct! {
    /// §18.31 `VERIFY4args` and §18.15 `NVERIFY4args` (results: `nfsstat4`).
    pub struct Verify4Args {
        /// The attributes to compare.
        pub obj_attributes: Fattr4,
    }
}
