//! RFC 5662 (RFC 8881 §3): the basic data types shared by the operations.

use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

use crate::{
    ATTRLIST_DECODE_MAX, BITMAP_DECODE_MAX, NFS4_FHSIZE, NFS4_OPAQUE_LIMIT, NFS4_OTHER_SIZE,
    NFS4_SESSIONID_SIZE, NFS4_VERIFIER_SIZE, UTF8STR_DECODE_MAX,
};

open_enum! {
    /// RFC 5662 `nfsstat4`: the status of COMPOUND and of every operation result
    /// (RFC 8881 §15.1). All values of minor version 1.
    pub struct NfsStat4 {
        /// Everything went fine.
        NFS4_OK = 0,
        /// Caller not privileged.
        NFS4ERR_PERM = 1,
        /// No such file or directory.
        NFS4ERR_NOENT = 2,
        /// Hard I/O error.
        NFS4ERR_IO = 5,
        /// No such device.
        NFS4ERR_NXIO = 6,
        /// Access denied.
        NFS4ERR_ACCESS = 13,
        /// File already exists.
        NFS4ERR_EXIST = 17,
        /// Different file systems.
        NFS4ERR_XDEV = 18,
        /// Should be a directory.
        NFS4ERR_NOTDIR = 20,
        /// Should not be a directory.
        NFS4ERR_ISDIR = 21,
        /// Invalid argument.
        NFS4ERR_INVAL = 22,
        /// File exceeds server max.
        NFS4ERR_FBIG = 27,
        /// No space on file system.
        NFS4ERR_NOSPC = 28,
        /// Read-only file system.
        NFS4ERR_ROFS = 30,
        /// Too many hard links.
        NFS4ERR_MLINK = 31,
        /// Name exceeds server max.
        NFS4ERR_NAMETOOLONG = 63,
        /// Directory not empty.
        NFS4ERR_NOTEMPTY = 66,
        /// Hard quota limit reached.
        NFS4ERR_DQUOT = 69,
        /// File no longer exists.
        NFS4ERR_STALE = 70,
        /// Illegal file handle.
        NFS4ERR_BADHANDLE = 10001,
        /// READDIR cookie is stale.
        NFS4ERR_BAD_COOKIE = 10003,
        /// Operation not supported.
        NFS4ERR_NOTSUPP = 10004,
        /// Response limit exceeded.
        NFS4ERR_TOOSMALL = 10005,
        /// Undefined server error.
        NFS4ERR_SERVERFAULT = 10006,
        /// Type invalid for CREATE.
        NFS4ERR_BADTYPE = 10007,
        /// File "busy": retry.
        NFS4ERR_DELAY = 10008,
        /// NVERIFY: attributes are the same.
        NFS4ERR_SAME = 10009,
        /// Lock unavailable.
        NFS4ERR_DENIED = 10010,
        /// Lock lease expired.
        NFS4ERR_EXPIRED = 10011,
        /// I/O failed due to lock.
        NFS4ERR_LOCKED = 10012,
        /// In grace period.
        NFS4ERR_GRACE = 10013,
        /// File handle expired.
        NFS4ERR_FHEXPIRED = 10014,
        /// Share reservation denied.
        NFS4ERR_SHARE_DENIED = 10015,
        /// Wrong security flavor.
        NFS4ERR_WRONGSEC = 10016,
        /// Client ID in use.
        NFS4ERR_CLID_INUSE = 10017,
        /// Resource exhaustion (NFSv4.0 only, RFC 8881 §15.1.1.4).
        NFS4ERR_RESOURCE = 10018,
        /// File system relocated.
        NFS4ERR_MOVED = 10019,
        /// Current file handle not set.
        NFS4ERR_NOFILEHANDLE = 10020,
        /// Minor version not supported.
        NFS4ERR_MINOR_VERS_MISMATCH = 10021,
        /// Server has rebooted.
        NFS4ERR_STALE_CLIENTID = 10022,
        /// Server has rebooted.
        NFS4ERR_STALE_STATEID = 10023,
        /// State is out of sync.
        NFS4ERR_OLD_STATEID = 10024,
        /// Incorrect stateid.
        NFS4ERR_BAD_STATEID = 10025,
        /// Request is out of sequence.
        NFS4ERR_BAD_SEQID = 10026,
        /// VERIFY: attributes are not the same.
        NFS4ERR_NOT_SAME = 10027,
        /// Overlapping lock range.
        NFS4ERR_LOCK_RANGE = 10028,
        /// Should be a file or directory.
        NFS4ERR_SYMLINK = 10029,
        /// No saved file handle.
        NFS4ERR_RESTOREFH = 10030,
        /// Some file system moved.
        NFS4ERR_LEASE_MOVED = 10031,
        /// Recommended attribute not supported.
        NFS4ERR_ATTRNOTSUPP = 10032,
        /// Reclaim outside of grace.
        NFS4ERR_NO_GRACE = 10033,
        /// Reclaim error at server.
        NFS4ERR_RECLAIM_BAD = 10034,
        /// Conflict on reclaim.
        NFS4ERR_RECLAIM_CONFLICT = 10035,
        /// XDR decode failed.
        NFS4ERR_BADXDR = 10036,
        /// File locks held at CLOSE.
        NFS4ERR_LOCKS_HELD = 10037,
        /// Conflict in OPEN and I/O.
        NFS4ERR_OPENMODE = 10038,
        /// Owner translation bad.
        NFS4ERR_BADOWNER = 10039,
        /// UTF-8 character not supported.
        NFS4ERR_BADCHAR = 10040,
        /// Name not supported.
        NFS4ERR_BADNAME = 10041,
        /// Lock range not supported.
        NFS4ERR_BAD_RANGE = 10042,
        /// No atomic up/downgrade.
        NFS4ERR_LOCK_NOTSUPP = 10043,
        /// Undefined operation.
        NFS4ERR_OP_ILLEGAL = 10044,
        /// File locking deadlock.
        NFS4ERR_DEADLOCK = 10045,
        /// Open file blocks operation.
        NFS4ERR_FILE_OPEN = 10046,
        /// Lock-owner state revoked.
        NFS4ERR_ADMIN_REVOKED = 10047,
        /// Callback path down.
        NFS4ERR_CB_PATH_DOWN = 10048,
        /// pNFS: bad I/O mode.
        NFS4ERR_BADIOMODE = 10049,
        /// pNFS: bad layout.
        NFS4ERR_BADLAYOUT = 10050,
        /// Session digest bad.
        NFS4ERR_BAD_SESSION_DIGEST = 10051,
        /// Unknown session.
        NFS4ERR_BADSESSION = 10052,
        /// Slot id out of range.
        NFS4ERR_BADSLOT = 10053,
        /// RECLAIM_COMPLETE already done.
        NFS4ERR_COMPLETE_ALREADY = 10054,
        /// Connection not bound to session.
        NFS4ERR_CONN_NOT_BOUND_TO_SESSION = 10055,
        /// Delegation already wanted.
        NFS4ERR_DELEG_ALREADY_WANTED = 10056,
        /// Backchannel busy.
        NFS4ERR_BACK_CHAN_BUSY = 10057,
        /// pNFS: layout try later.
        NFS4ERR_LAYOUTTRYLATER = 10058,
        /// pNFS: layout unavailable.
        NFS4ERR_LAYOUTUNAVAILABLE = 10059,
        /// pNFS: no matching layout.
        NFS4ERR_NOMATCHING_LAYOUT = 10060,
        /// pNFS: recall conflict.
        NFS4ERR_RECALLCONFLICT = 10061,
        /// pNFS: unknown layout type.
        NFS4ERR_UNKNOWN_LAYOUTTYPE = 10062,
        /// Slot sequence id out of order.
        NFS4ERR_SEQ_MISORDERED = 10063,
        /// SEQUENCE not the first operation.
        NFS4ERR_SEQUENCE_POS = 10064,
        /// Request too big.
        NFS4ERR_REQ_TOO_BIG = 10065,
        /// Reply too big.
        NFS4ERR_REP_TOO_BIG = 10066,
        /// Reply too big to cache.
        NFS4ERR_REP_TOO_BIG_TO_CACHE = 10067,
        /// Retry of an uncached reply.
        NFS4ERR_RETRY_UNCACHED_REP = 10068,
        /// Retry/recovery too hard.
        NFS4ERR_UNSAFE_COMPOUND = 10069,
        /// Too many operations in the COMPOUND.
        NFS4ERR_TOO_MANY_OPS = 10070,
        /// Operation not in a session.
        NFS4ERR_OP_NOT_IN_SESSION = 10071,
        /// Hash algorithm not supported.
        NFS4ERR_HASH_ALG_UNSUPP = 10072,
        /// Client ID busy (has state).
        NFS4ERR_CLIENTID_BUSY = 10074,
        /// pNFS: I/O to a hole.
        NFS4ERR_PNFS_IO_HOLE = 10075,
        /// Sequence id false retry.
        NFS4ERR_SEQ_FALSE_RETRY = 10076,
        /// Bad highest slot id.
        NFS4ERR_BAD_HIGH_SLOT = 10077,
        /// Session being destroyed.
        NFS4ERR_DEADSESSION = 10078,
        /// Encryption algorithm not supported.
        NFS4ERR_ENCR_ALG_UNSUPP = 10079,
        /// pNFS: no layout.
        NFS4ERR_PNFS_NO_LAYOUT = 10080,
        /// Operation must be the only one in the COMPOUND.
        NFS4ERR_NOT_ONLY_OP = 10081,
        /// Permissions: wrong credential.
        NFS4ERR_WRONG_CRED = 10082,
        /// Operation on the wrong object type.
        NFS4ERR_WRONG_TYPE = 10083,
        /// Directory delegation unavailable.
        NFS4ERR_DIRDELEG_UNAVAIL = 10084,
        /// Callback rejected the delegation.
        NFS4ERR_REJECT_DELEG = 10085,
        /// Layout get before return conflict.
        NFS4ERR_RETURNCONFLICT = 10086,
        /// Delegation revoked.
        NFS4ERR_DELEG_REVOKED = 10087,
    }
}

impl NfsStat4 {
    /// True for `NFS4_OK`.
    pub fn is_ok(self) -> bool {
        self == Self::NFS4_OK
    }
}

/// The shape of nearly every NFSv4 operation result (RFC 5662):
/// `union switch (nfsstat4 status) { case NFS4_OK: resok; default: void; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    /// `NFS4_OK` and the `resok` arm.
    Ok(T),
    /// Any other status, without data. Invariant: not `NFS4_OK`.
    Err(NfsStat4),
}

impl<T> Res4<T> {
    /// The status word this result is encoded with.
    pub fn status(&self) -> NfsStat4 {
        match self {
            Res4::Ok(_) => NfsStat4::NFS4_OK,
            Res4::Err(s) => *s,
        }
    }
}

impl<T: Encode> Encode for Res4<T> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Res4::Ok(ok) => {
                NfsStat4::NFS4_OK.encode(enc);
                ok.encode(enc);
            }
            Res4::Err(status) => status.encode(enc),
        }
    }
}

impl<T: Decode> Decode for Res4<T> {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match NfsStat4::decode(dec)? {
            NfsStat4::NFS4_OK => T::decode(dec).map(Res4::Ok),
            status => Ok(Res4::Err(status)),
        }
    }
}

/// An opaque byte string with an XDR bound, decoded as a slice of the received buffer
/// (no copy).
macro_rules! bounded_opaque {
    ($(#[$m:meta])* $name:ident, $max:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub Bytes);

        impl Encode for $name {
            fn encode(&self, enc: &mut Encoder) {
                enc.opaque(&self.0);
            }
        }

        impl Decode for $name {
            fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
                dec.opaque($max).map($name)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(Bytes::copy_from_slice(s.as_bytes()))
            }
        }

        impl From<&[u8]> for $name {
            fn from(s: &[u8]) -> Self {
                $name(Bytes::copy_from_slice(s))
            }
        }
    };
}

bounded_opaque!(
    /// RFC 5662 `nfs_fh4`: `opaque nfs_fh4<NFS4_FHSIZE>` (128 bytes). Opaque to the
    /// client; the server gives it meaning.
    NfsFh4,
    NFS4_FHSIZE
);

bounded_opaque!(
    /// RFC 5662 `utf8string` and its kin (`utf8str_cs`, `utf8str_cis`, `utf8str_mixed`,
    /// `component4`, `linktext4`): `opaque<>`, UTF-8 by contract (RFC 8881 §14), kept as
    /// bytes here: checking the encoding (NFS4ERR_INVAL / BADCHAR) is the server's job.
    /// Decoded with the bound [`UTF8STR_DECODE_MAX`](crate::UTF8STR_DECODE_MAX).
    Utf8Str,
    UTF8STR_DECODE_MAX
);

bounded_opaque!(
    /// An `opaque<NFS4_OPAQUE_LIMIT>` (1024 bytes): owners, server scope, major id.
    OpaqueLimit,
    NFS4_OPAQUE_LIMIT
);

/// RFC 5662 `component4`: one path component.
pub type Component4 = Utf8Str;
/// RFC 5662 `linktext4`: a symbolic link's text.
pub type LinkText4 = Utf8Str;
/// RFC 5662 `verifier4`: `opaque[NFS4_VERIFIER_SIZE]` (8 bytes).
pub type Verifier4 = [u8; NFS4_VERIFIER_SIZE];
/// RFC 5662 `sessionid4`: `opaque[NFS4_SESSIONID_SIZE]` (16 bytes).
pub type SessionId4 = [u8; NFS4_SESSIONID_SIZE];
/// RFC 5662 `clientid4`.
pub type ClientId4 = u64;
/// RFC 5662 `sequenceid4`.
pub type SequenceId4 = u32;
/// RFC 5662 `slotid4`.
pub type SlotId4 = u32;
/// RFC 5662 `count4`.
pub type Count4 = u32;
/// RFC 5662 `offset4`.
pub type Offset4 = u64;
/// RFC 5662 `length4`.
pub type Length4 = u64;
/// RFC 5662 `changeid4`.
pub type ChangeId4 = u64;

/// RFC 5662 `bitmap4`: `uint32_t bitmap4<>`, attribute (and operation) masks; bit `n`
/// is bit `n % 32` of word `n / 32` (RFC 8881 §3.3.7).
///
/// Decoded with at most [`BITMAP_DECODE_MAX`](crate::BITMAP_DECODE_MAX) words.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// A bitmap with the given bits set.
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Bitmap4::default();
        for &bit in bits {
            b.set(bit);
        }
        b
    }

    /// Whether bit `n` is set (bits past the end are clear).
    pub fn is_set(&self, n: u32) -> bool {
        self.0
            .get((n / 32) as usize)
            .is_some_and(|w| w & (1 << (n % 32)) != 0)
    }

    /// Sets bit `n`, growing the bitmap as needed.
    pub fn set(&mut self, n: u32) {
        let word = (n / 32) as usize;
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (n % 32);
    }

    /// Clears bit `n`.
    pub fn clear(&mut self, n: u32) {
        if let Some(w) = self.0.get_mut((n / 32) as usize) {
            *w &= !(1 << (n % 32));
        }
    }
}

impl Encode for Bitmap4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.array(&self.0, |e, w| {
            e.u32(*w);
        });
    }
}

impl Decode for Bitmap4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.array(BITMAP_DECODE_MAX, Decoder::u32).map(Bitmap4)
    }
}

/// RFC 5662 `attrlist4`: `opaque attrlist4<>`, the packed values of the attributes a
/// bitmap names. Kept opaque at this layer (the server's attribute module packs and
/// parses it). Decoded with the bound
/// [`ATTRLIST_DECODE_MAX`](crate::ATTRLIST_DECODE_MAX), without a copy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttrList4(pub Bytes);

impl Encode for AttrList4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.0);
    }
}

impl Decode for AttrList4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.opaque(ATTRLIST_DECODE_MAX).map(AttrList4)
    }
}

xdr_struct! {
    /// RFC 5662 `fattr4`: a set of attributes, as a mask and the packed values.
    #[derive(Default)]
    pub struct Fattr4 {
        /// Which attributes `attr_vals` holds, in bit order.
        pub attrmask: Bitmap4,
        /// Their XDR-encoded values, concatenated.
        pub attr_vals: AttrList4,
    }
}

xdr_struct! {
    /// RFC 5662 `stateid4` (RFC 8881 §8.2).
    #[derive(Copy, Default, Hash)]
    pub struct StateId4 {
        /// Sequence number, bumped as the state changes.
        pub seqid: u32,
        /// Server-chosen identification of the state.
        pub other: [u8; NFS4_OTHER_SIZE],
    }
}

impl StateId4 {
    /// RFC 8881 §8.2.3: the anonymous stateid (all zeros).
    pub const ANONYMOUS: Self = Self {
        seqid: 0,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// RFC 8881 §8.2.3: the READ bypass stateid (all ones).
    pub const READ_BYPASS: Self = Self {
        seqid: u32::MAX,
        other: [0xff; NFS4_OTHER_SIZE],
    };
    /// RFC 8881 §8.2.3: the current stateid (seqid 1, other all zeros).
    pub const CURRENT: Self = Self {
        seqid: 1,
        other: [0; NFS4_OTHER_SIZE],
    };
    /// RFC 8881 §8.2.3: the invalid stateid (seqid `NFS4_UINT32_MAX`, other zeros).
    pub const INVALID: Self = Self {
        seqid: u32::MAX,
        other: [0; NFS4_OTHER_SIZE],
    };
}

xdr_struct! {
    /// RFC 5662 `nfstime4`: seconds (signed) and nanoseconds since the epoch.
    #[derive(Copy, Default, Hash, PartialOrd, Ord)]
    pub struct NfsTime4 {
        /// Seconds since midnight, 1 January 1970, UTC.
        pub seconds: i64,
        /// Nanoseconds within the second.
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// RFC 5662 `change_info4`: a directory's change attribute around an operation.
    #[derive(Copy, Default)]
    pub struct ChangeInfo4 {
        /// TRUE if `before` and `after` were taken atomically with the change.
        pub atomic: bool,
        /// Change attribute before.
        pub before: ChangeId4,
        /// Change attribute after.
        pub after: ChangeId4,
    }
}

xdr_struct! {
    /// RFC 5662 `nfs_impl_id4`: who implemented the client or server (informational).
    pub struct NfsImplId4 {
        /// DNS domain of the implementer (`utf8str_cis`).
        pub nii_domain: Utf8Str,
        /// Product name and version (`utf8str_cs`).
        pub nii_name: Utf8Str,
        /// Build date.
        pub nii_date: NfsTime4,
    }
}

xdr_struct! {
    /// RFC 5662 `server_owner4` (RFC 8881 §2.5): which servers share state (major id)
    /// and which may share sessions (minor id).
    pub struct ServerOwner4 {
        /// Servers with equal major and minor ids may trunk sessions.
        pub so_minor_id: u64,
        /// Servers with equal major ids share client state.
        pub so_major_id: OpaqueLimit,
    }
}

xdr_struct! {
    /// RFC 5662 `client_owner4` (RFC 8881 §2.4): the client's long-lived identity.
    pub struct ClientOwner4 {
        /// Changes every time the client restarts.
        pub co_verifier: Verifier4,
        /// Unique, stable name of the client.
        pub co_ownerid: OpaqueLimit,
    }
}

/// The data of READ4resok and WRITE4args: `opaque data<>`, DDP-eligible under
/// RFC 8267 §5.1, so always encoded with [`Encoder::ddp_opaque`]. Decoding slices the
/// received buffer; neither direction copies the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DdpData(pub Bytes);

impl Encode for DdpData {
    fn encode(&self, enc: &mut Encoder) {
        // RFC 8267 §5.1: WRITE4args `data`, READ4resok `data`.
        enc.ddp_opaque(self.0.clone());
    }
}

impl Decode for DdpData {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.ddp_opaque(crate::DATA_DECODE_MAX).map(DdpData)
    }
}

/// A link's text where RFC 8267 §5.1 makes it DDP-eligible (READLINK4resok `link`,
/// the NF4LNK arm of CREATE's `createtype4`): a `linktext4`, encoded with
/// [`Encoder::ddp_opaque`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DdpLinkText4(pub Bytes);

impl Encode for DdpLinkText4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.ddp_opaque(self.0.clone());
    }
}

impl Decode for DdpLinkText4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.ddp_opaque(UTF8STR_DECODE_MAX).map(DdpLinkText4)
    }
}

/// An empty XDR item (`void`), for operations without arguments or results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Void;

impl Encode for Void {
    fn encode(&self, _enc: &mut Encoder) {}
}

impl Decode for Void {
    fn decode(_dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Void)
    }
}
