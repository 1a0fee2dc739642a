//! Directory listing: RFC 1813 §3.3.16 READDIR and §3.3.17 READDIRPLUS.
//!
//! Entry lists are XDR linked lists (`*entry3`). The `*_size` helpers give the exact
//! encoded size of each piece so that a server can fill a reply up to the client's
//! `count` / `maxcount` and no further (§3.3.16: "count: The maximum size of the
//! READDIR3resok structure, in bytes").

use xdr::{Decode, Decoder, Encode, EncodedList, Encoder};

use crate::attr::ObjAttrFail;
use crate::{CookieVerf3, Fattr3, Filename3, NfsFh3, PostOpAttr, PostOpFh3};

/// Decoding bound on entries in one reply (a client-side guard; a 1 MiB reply holds
/// fewer than 2^16 entries of the smallest size).
pub const ENTRIES_DECODE_MAX: u32 = 1 << 17;

xdr_struct! {
    /// §3.3.16 `READDIR3args`.
    pub struct ReadDir3Args {
        /// The directory.
        pub dir: NfsFh3,
        /// Where to resume: 0 for the start, else a cookie from an earlier entry.
        pub cookie: u64,
        /// The verifier returned with `cookie` (zeros with cookie 0).
        pub cookieverf: CookieVerf3,
        /// Maximum size of the READDIR3resok structure, in bytes.
        pub count: u32,
    }
}

xdr_struct! {
    /// §3.3.16 `entry3`.
    pub struct Entry3 {
        /// File number.
        pub fileid: u64,
        /// Name.
        pub name: Filename3,
        /// Cookie to resume after this entry.
        pub cookie: u64,
    }
}

/// §3.3.16 `dirlist3`, its entries kept encoded ([`xdr::EncodedList`]).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DirList3<E> {
    /// Entries, in order.
    pub entries: EncodedList<E>,
    /// TRUE if the last entry of the directory is in `entries`.
    pub eof: bool,
}

impl<E: Decode + std::fmt::Debug> std::fmt::Debug for DirList3<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirList3")
            .field("entries", &self.entries)
            .field("eof", &self.eof)
            .finish()
    }
}

impl<E> Encode for DirList3<E> {
    fn encode(&self, enc: &mut Encoder) {
        self.entries.encode(enc);
        enc.bool(self.eof);
    }
}

impl<E: Decode> Decode for DirList3<E> {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let entries = EncodedList::decode_max(dec, ENTRIES_DECODE_MAX)?;
        Ok(DirList3 {
            entries,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// §3.3.16 `READDIR3resok`.
    pub struct ReadDir3ResOk {
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
        /// The cookie verifier to present with the returned cookies.
        pub cookieverf: CookieVerf3,
        /// The entries.
        pub reply: DirList3<Entry3>,
    }
}

nfs_result!(
    /// §3.3.16 `READDIR3res`; the fail arm is `dir_attributes`.
    ReadDir3Res = ReadDir3ResOk, ObjAttrFail
);

xdr_struct! {
    /// §3.3.17 `READDIRPLUS3args`.
    pub struct ReadDirPlus3Args {
        /// The directory.
        pub dir: NfsFh3,
        /// Where to resume.
        pub cookie: u64,
        /// The verifier returned with `cookie`.
        pub cookieverf: CookieVerf3,
        /// Maximum bytes of directory information (fileid, name and cookie only).
        pub dircount: u32,
        /// Maximum size of the READDIRPLUS3resok structure, in bytes.
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// §3.3.17 `entryplus3`.
    pub struct EntryPlus3 {
        /// File number.
        pub fileid: u64,
        /// Name.
        pub name: Filename3,
        /// Cookie to resume after this entry.
        pub cookie: u64,
        /// The entry's attributes.
        pub name_attributes: PostOpAttr,
        /// The entry's handle.
        pub name_handle: PostOpFh3,
    }
}

xdr_struct! {
    /// §3.3.17 `READDIRPLUS3resok`.
    pub struct ReadDirPlus3ResOk {
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
        /// The cookie verifier.
        pub cookieverf: CookieVerf3,
        /// The entries.
        pub reply: DirList3<EntryPlus3>,
    }
}

nfs_result!(
    /// §3.3.17 `READDIRPLUS3res`.
    ReadDirPlus3Res = ReadDirPlus3ResOk, ObjAttrFail
);

/// Encoded size of `post_op_attr` with attributes present.
pub const POST_OP_ATTR_SIZE: usize = 4 + FATTR3_SIZE;
/// Encoded size of `fattr3`.
pub const FATTR3_SIZE: usize = 84;

/// Encoded size of an `entry3` in a list, with its "value follows" word.
pub fn entry3_size(name_len: usize) -> usize {
    4 + 8 + 4 + xdr::padded_len(name_len) + 8
}

/// Encoded size of an `entryplus3` in a list, with its "value follows" word.
pub fn entryplus3_size(e: &EntryPlus3) -> usize {
    entry3_size(e.name.0.len())
        + 4
        + e.name_attributes.as_ref().map_or(0, |_| FATTR3_SIZE)
        + 4
        + e.name_handle
            .as_ref()
            .map_or(0, |h| 4 + xdr::padded_len(h.0.len()))
}

/// Encoded size of READDIR3resok / READDIRPLUS3resok without entries: the
/// directory's `post_op_attr` (present), the verifier, the list's end and `eof`.
pub const RESOK_FIXED_SIZE: usize = POST_OP_ATTR_SIZE + 8 + 4 + 4;

impl Fattr3 {
    /// Encoded size of `fattr3` (fixed).
    pub const SIZE: usize = FATTR3_SIZE;
}
