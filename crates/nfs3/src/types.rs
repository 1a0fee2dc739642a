//! RFC 1813 §2.5 and §2.6: the basic data types shared by the procedures.

use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

use crate::{FILENAME_DECODE_MAX, NFS3_FHSIZE, NFSPATH_DECODE_MAX};

open_enum! {
    /// RFC 1813 §2.6 `nfsstat3`: the status of every NFSv3 result.
    pub struct NfsStat3 {
        /// Success.
        NFS3_OK = 0,
        /// Not owner.
        NFS3ERR_PERM = 1,
        /// No such file or directory.
        NFS3ERR_NOENT = 2,
        /// I/O error.
        NFS3ERR_IO = 5,
        /// No such device or address.
        NFS3ERR_NXIO = 6,
        /// Permission denied.
        NFS3ERR_ACCES = 13,
        /// File exists.
        NFS3ERR_EXIST = 17,
        /// Attempt at a cross-device hard link.
        NFS3ERR_XDEV = 18,
        /// No such device.
        NFS3ERR_NODEV = 19,
        /// Not a directory.
        NFS3ERR_NOTDIR = 20,
        /// Is a directory.
        NFS3ERR_ISDIR = 21,
        /// Invalid argument or unsupported argument.
        NFS3ERR_INVAL = 22,
        /// File too large.
        NFS3ERR_FBIG = 27,
        /// No space left on device.
        NFS3ERR_NOSPC = 28,
        /// Read-only file system.
        NFS3ERR_ROFS = 30,
        /// Too many hard links.
        NFS3ERR_MLINK = 31,
        /// The filename in an operation was too long.
        NFS3ERR_NAMETOOLONG = 63,
        /// Directory not empty.
        NFS3ERR_NOTEMPTY = 66,
        /// Resource (quota) hard limit exceeded.
        NFS3ERR_DQUOT = 69,
        /// Invalid file handle: the object no longer exists or access to it was revoked.
        NFS3ERR_STALE = 70,
        /// Too many levels of remote in path.
        NFS3ERR_REMOTE = 71,
        /// Illegal NFS file handle: it failed internal consistency checks.
        NFS3ERR_BADHANDLE = 10001,
        /// Update synchronization mismatch (SETATTR guard).
        NFS3ERR_NOT_SYNC = 10002,
        /// READDIR or READDIRPLUS cookie is stale.
        NFS3ERR_BAD_COOKIE = 10003,
        /// Operation is not supported.
        NFS3ERR_NOTSUPP = 10004,
        /// Buffer or request is too small.
        NFS3ERR_TOOSMALL = 10005,
        /// A server error that does not map to any of the legal NFSv3 errors.
        NFS3ERR_SERVERFAULT = 10006,
        /// An attempt to create an object of a type not supported by the server.
        NFS3ERR_BADTYPE = 10007,
        /// The server started the request but could not finish it in time.
        NFS3ERR_JUKEBOX = 10008,
    }
}

open_enum! {
    /// RFC 1813 §2.6 `ftype3`: the type of a file.
    pub struct Ftype3 {
        /// Regular file.
        NF3REG = 1,
        /// Directory.
        NF3DIR = 2,
        /// Block special device.
        NF3BLK = 3,
        /// Character special device.
        NF3CHR = 4,
        /// Symbolic link.
        NF3LNK = 5,
        /// Socket.
        NF3SOCK = 6,
        /// Named pipe.
        NF3FIFO = 7,
    }
}

open_enum! {
    /// RFC 1813 §3.3.7 `stable_how`: how far WRITE data must reach before the reply.
    pub struct StableHow {
        /// The server may reply before the data is on stable storage.
        UNSTABLE = 0,
        /// Data on stable storage before the reply; metadata may lag.
        DATA_SYNC = 1,
        /// Data and metadata on stable storage before the reply.
        FILE_SYNC = 2,
    }
}

open_enum! {
    /// RFC 1813 §3.3.8 `createmode3`.
    pub struct CreateMode3 {
        /// Create or truncate, no error if the file exists.
        UNCHECKED = 0,
        /// Fail with NFS3ERR_EXIST if the file exists.
        GUARDED = 1,
        /// Exclusive create with a verifier, for idempotent retransmission.
        EXCLUSIVE = 2,
    }
}

open_enum! {
    /// RFC 1813 §2.6 `time_how`: how SETATTR sets a time.
    pub struct TimeHow {
        /// Leave the time alone.
        DONT_CHANGE = 0,
        /// Set it to the server's current time.
        SET_TO_SERVER_TIME = 1,
        /// Set it to the time the client gives.
        SET_TO_CLIENT_TIME = 2,
    }
}

/// An empty XDR item (`void`), for result arms without data.
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

/// The shape of nearly every NFSv3 result:
/// `union switch (nfsstat3 status) { case NFS3_OK: resok; default: resfail; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsResult<T, F> {
    /// `NFS3_OK` and the `resok` arm.
    Ok(T),
    /// Any other status and the `resfail` arm. Invariant: the status is not `NFS3_OK`.
    Fail(NfsStat3, F),
}

impl<T, F> NfsResult<T, F> {
    /// The status word this result is encoded with.
    pub fn status(&self) -> NfsStat3 {
        match self {
            NfsResult::Ok(_) => NfsStat3::NFS3_OK,
            NfsResult::Fail(s, _) => *s,
        }
    }
}

impl<T: Encode, F: Encode> Encode for NfsResult<T, F> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            NfsResult::Ok(ok) => {
                NfsStat3::NFS3_OK.encode(enc);
                ok.encode(enc);
            }
            NfsResult::Fail(status, fail) => {
                status.encode(enc);
                fail.encode(enc);
            }
        }
    }
}

impl<T: Decode, F: Decode> Decode for NfsResult<T, F> {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match NfsStat3::decode(dec)? {
            NfsStat3::NFS3_OK => T::decode(dec).map(NfsResult::Ok),
            status => F::decode(dec).map(|f| NfsResult::Fail(status, f)),
        }
    }
}

/// RFC 1813 §2.5 `nfs_fh3`: `opaque data<NFS3_FHSIZE>`. Opaque to the client; the
/// server gives it meaning. Decoding shares the received buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct NfsFh3(pub Bytes);

impl Encode for NfsFh3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque(&self.0);
    }
}

impl Decode for NfsFh3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.opaque(NFS3_FHSIZE).map(NfsFh3)
    }
}

/// RFC 1813 §2.5 `filename3`: `string<>`, a single path component as raw bytes.
///
/// Decoded with the bound [`FILENAME_DECODE_MAX`]; whether the name is acceptable
/// (no `/`, at most 255 bytes, not `.` or `..` where that matters) is the server's call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Filename3(pub Bytes);

impl Encode for Filename3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.string(&self.0);
    }
}

impl Decode for Filename3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.string(FILENAME_DECODE_MAX).map(Filename3)
    }
}

impl From<&str> for Filename3 {
    fn from(s: &str) -> Self {
        Filename3(Bytes::copy_from_slice(s.as_bytes()))
    }
}

/// RFC 1813 §2.5 `nfspath3`: `string<>`, a symbolic link's target.
///
/// It appears only in READLINK3resok and SYMLINK3args, where RFC 8267 §4.1 makes it
/// DDP-eligible, so it is always encoded with [`Encoder::ddp_opaque`] (no copy).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NfsPath3(pub Bytes);

impl Encode for NfsPath3 {
    fn encode(&self, enc: &mut Encoder) {
        // RFC 8267 §4.1: READLINK3resok `data` and SYMLINK3args `symlink_data`.
        enc.ddp_opaque(self.0.clone());
    }
}

impl Decode for NfsPath3 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.string(NFSPATH_DECODE_MAX).map(NfsPath3)
    }
}

/// The payload of READ3resok and WRITE3args: `opaque data<>`, DDP-eligible under
/// RFC 8267 §4.1, so always encoded with [`Encoder::ddp_opaque`]. Decoding slices the
/// received buffer; neither direction copies the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DdpData(pub Bytes);

impl Encode for DdpData {
    fn encode(&self, enc: &mut Encoder) {
        enc.ddp_opaque(self.0.clone());
    }
}

impl Decode for DdpData {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.ddp_opaque(crate::DATA_DECODE_MAX).map(DdpData)
    }
}

/// RFC 1813 §2.5 `cookieverf3`.
pub type CookieVerf3 = [u8; crate::NFS3_COOKIEVERFSIZE];
/// RFC 1813 §2.5 `createverf3`.
pub type CreateVerf3 = [u8; crate::NFS3_CREATEVERFSIZE];
/// RFC 1813 §2.5 `writeverf3`.
pub type WriteVerf3 = [u8; crate::NFS3_WRITEVERFSIZE];

xdr_struct! {
    /// RFC 1813 §2.5 `specdata3`: device numbers of a special file.
    pub struct SpecData3 {
        /// Major device number.
        pub specdata1: u32,
        /// Minor device number.
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// RFC 1813 §2.5 `nfstime3`: seconds and nanoseconds since the epoch.
    #[derive(Copy, Default, PartialOrd, Ord, Hash)]
    pub struct NfsTime3 {
        /// Seconds since midnight, 1 January 1970, GMT.
        pub seconds: u32,
        /// Nanoseconds within the second.
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// RFC 1813 §2.6 `fattr3`: the attributes of a file.
    pub struct Fattr3 {
        /// File type.
        pub ftype: Ftype3,
        /// Protection mode bits (low 12 bits of the POSIX mode).
        pub mode: u32,
        /// Number of hard links.
        pub nlink: u32,
        /// Owner's user id.
        pub uid: u32,
        /// Owner's group id.
        pub gid: u32,
        /// Size in bytes.
        pub size: u64,
        /// Bytes of disk space actually used.
        pub used: u64,
        /// Device numbers, for NF3CHR and NF3BLK.
        pub rdev: SpecData3,
        /// File system identifier.
        pub fsid: u64,
        /// File number, unique within the file system.
        pub fileid: u64,
        /// Last access time.
        pub atime: NfsTime3,
        /// Last data modification time.
        pub mtime: NfsTime3,
        /// Last attribute change time.
        pub ctime: NfsTime3,
    }
}

/// RFC 1813 §2.6 `post_op_attr`: attributes after an operation, if the server has them.
pub type PostOpAttr = Option<Fattr3>;

xdr_struct! {
    /// RFC 1813 §2.6 `wcc_attr`: the subset of attributes for weak cache consistency.
    pub struct WccAttr {
        /// Size in bytes.
        pub size: u64,
        /// Data modification time.
        pub mtime: NfsTime3,
        /// Attribute change time.
        pub ctime: NfsTime3,
    }
}

/// RFC 1813 §2.6 `pre_op_attr`: attributes just before an operation.
pub type PreOpAttr = Option<WccAttr>;

xdr_struct! {
    /// RFC 1813 §2.6 `wcc_data`: attributes before and after a modifying operation.
    #[derive(Default)]
    pub struct WccData {
        /// Attributes before the operation.
        pub before: PreOpAttr,
        /// Attributes after the operation.
        pub after: PostOpAttr,
    }
}

/// RFC 1813 §2.6 `post_op_fh3`: a file handle, if the server returns one.
pub type PostOpFh3 = Option<NfsFh3>;

/// RFC 1813 §2.6 `set_atime` / `set_mtime`: how SETATTR (and CREATE, MKDIR, ...) sets
/// a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// `DONT_CHANGE`.
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME`.
    ServerTime,
    /// `SET_TO_CLIENT_TIME` with the time to set.
    ClientTime(NfsTime3),
}

impl Encode for SetTime {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime::DontChange => TimeHow::DONT_CHANGE.encode(enc),
            SetTime::ServerTime => TimeHow::SET_TO_SERVER_TIME.encode(enc),
            SetTime::ClientTime(t) => {
                TimeHow::SET_TO_CLIENT_TIME.encode(enc);
                t.encode(enc);
            }
        }
    }
}

impl Decode for SetTime {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match TimeHow::decode(dec)? {
            TimeHow::DONT_CHANGE => Ok(SetTime::DontChange),
            TimeHow::SET_TO_SERVER_TIME => Ok(SetTime::ServerTime),
            TimeHow::SET_TO_CLIENT_TIME => NfsTime3::decode(dec).map(SetTime::ClientTime),
            other => Err(xdr::XdrError::InvalidDiscriminant(other.0)),
        }
    }
}

xdr_struct! {
    /// RFC 1813 §2.6 `sattr3`: attributes to set; each `None` leaves one alone.
    #[derive(Default)]
    pub struct Sattr3 {
        /// `set_mode3`.
        pub mode: Option<u32>,
        /// `set_uid3`.
        pub uid: Option<u32>,
        /// `set_gid3`.
        pub gid: Option<u32>,
        /// `set_size3`.
        pub size: Option<u64>,
        /// `set_atime`.
        pub atime: SetTime,
        /// `set_mtime`.
        pub mtime: SetTime,
    }
}

xdr_struct! {
    /// RFC 1813 §2.6 `diropargs3`: a directory and a name in it.
    pub struct DirOpArgs3 {
        /// The directory.
        pub dir: NfsFh3,
        /// The name of the entry.
        pub name: Filename3,
    }
}
