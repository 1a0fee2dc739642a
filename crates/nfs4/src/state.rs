//! Open, lock and stateid operations (RFC 8881 §18; XDR in RFC 5662): §18.16 OPEN,
//! §18.2 CLOSE, §18.18 OPEN_DOWNGRADE, §18.10 LOCK, §18.11 LOCKT, §18.12 LOCKU,
//! §18.38 FREE_STATEID, §18.48 TEST_STATEID and §18.6 DELEGRETURN.
//!
//! Every claim type of OPEN and every delegation arm decode: which a server honours
//! (the issue: CLAIM_DELEG_* answered as not supported for now) is its call.

use xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::{
    Bitmap4, ChangeInfo4, ClientId4, Component4, Fattr4, Length4, NfsStat4, Offset4, OpaqueLimit,
    Res4, StateId4, Utf8Str, Verifier4,
};

/// RFC 5662 `seqid4`: the sequence id of an open or lock owner (unused in 4.1: 0).
pub type SeqId4 = u32;

xdr_struct! {
    /// RFC 5662 `state_owner4` (`open_owner4`, `lock_owner4`).
    pub struct StateOwner4 {
        /// The client ID.
        pub clientid: ClientId4,
        /// The owner, chosen by the client: `opaque owner<NFS4_OPAQUE_LIMIT>`.
        pub owner: OpaqueLimit,
    }
}

/// OPEN `share_access`: read (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x0000_0001;
/// OPEN `share_access`: write.
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 0x0000_0002;
/// OPEN `share_access`: read and write.
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 0x0000_0003;
/// OPEN `share_deny`: none.
pub const OPEN4_SHARE_DENY_NONE: u32 = 0x0000_0000;
/// OPEN `share_deny`: deny readers.
pub const OPEN4_SHARE_DENY_READ: u32 = 0x0000_0001;
/// OPEN `share_deny`: deny writers.
pub const OPEN4_SHARE_DENY_WRITE: u32 = 0x0000_0002;
/// OPEN `share_deny`: deny both.
pub const OPEN4_SHARE_DENY_BOTH: u32 = 0x0000_0003;
/// OPEN `share_access`: the mask of the delegation "want" bits (RFC 8881 §18.16.3).
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: u32 = 0xFF00;
/// OPEN result flag: the client must confirm (NFSv4.0 only).
pub const OPEN4_RESULT_CONFIRM: u32 = 0x0000_0002;
/// OPEN result flag: POSIX byte-range lock semantics.
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x0000_0004;
/// OPEN result flag: the open state is preserved across server restarts.
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x0000_0008;
/// OPEN result flag: the server may send CB_NOTIFY_LOCK.
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x0000_0020;

open_enum! {
    /// RFC 5662 `createmode4`.
    pub struct CreateMode4 {
        /// Create, or open an existing file.
        UNCHECKED4 = 0,
        /// Fail with NFS4ERR_EXIST if the file exists.
        GUARDED4 = 1,
        /// Exclusive create with a verifier (deprecated in 4.1).
        EXCLUSIVE4 = 2,
        /// Exclusive create with a verifier and attributes.
        EXCLUSIVE4_1 = 3,
    }
}

/// RFC 5662 `createhow4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow4 {
    /// `UNCHECKED4` with the initial attributes.
    Unchecked(Fattr4),
    /// `GUARDED4` with the initial attributes.
    Guarded(Fattr4),
    /// `EXCLUSIVE4` with the verifier.
    Exclusive(Verifier4),
    /// `EXCLUSIVE4_1` (`creatverfattr`): the verifier and initial attributes.
    Exclusive41(Verifier4, Fattr4),
}

impl Encode for CreateHow4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::Unchecked(a) => {
                CreateMode4::UNCHECKED4.encode(enc);
                a.encode(enc);
            }
            Self::Guarded(a) => {
                CreateMode4::GUARDED4.encode(enc);
                a.encode(enc);
            }
            Self::Exclusive(v) => {
                CreateMode4::EXCLUSIVE4.encode(enc);
                v.encode(enc);
            }
            Self::Exclusive41(v, a) => {
                CreateMode4::EXCLUSIVE4_1.encode(enc);
                v.encode(enc);
                a.encode(enc);
            }
        }
    }
}

impl Decode for CreateHow4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match CreateMode4::decode(dec)? {
            CreateMode4::UNCHECKED4 => Fattr4::decode(dec).map(Self::Unchecked),
            CreateMode4::GUARDED4 => Fattr4::decode(dec).map(Self::Guarded),
            CreateMode4::EXCLUSIVE4 => Verifier4::decode(dec).map(Self::Exclusive),
            CreateMode4::EXCLUSIVE4_1 => Ok(Self::Exclusive41(
                Verifier4::decode(dec)?,
                Fattr4::decode(dec)?,
            )),
            other => Err(XdrError::InvalidDiscriminant(other.0)),
        }
    }
}

/// RFC 5662 `openflag4`: `switch (opentype4 opentype) { case OPEN4_CREATE: createhow4
/// how; default: void; }`: `None` is OPEN4_NOCREATE (0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenFlag4(pub Option<CreateHow4>);

impl Encode for OpenFlag4 {
    fn encode(&self, enc: &mut Encoder) {
        match &self.0 {
            None => {
                enc.u32(0);
            }
            Some(how) => {
                enc.u32(1);
                how.encode(enc);
            }
        }
    }
}

impl Decode for OpenFlag4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match dec.u32()? {
            1 => CreateHow4::decode(dec).map(|h| OpenFlag4(Some(h))),
            // `default: void`: any other opentype4 is NOCREATE.
            _ => Ok(OpenFlag4(None)),
        }
    }
}

open_enum! {
    /// RFC 5662 `open_delegation_type4`.
    pub struct OpenDelegationType4 {
        /// No delegation.
        OPEN_DELEGATE_NONE = 0,
        /// Read delegation.
        OPEN_DELEGATE_READ = 1,
        /// Write delegation.
        OPEN_DELEGATE_WRITE = 2,
        /// No delegation, with the reason (4.1).
        OPEN_DELEGATE_NONE_EXT = 3,
    }
}

/// RFC 5662 `open_claim4`: which file OPEN opens, and on what grounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// `CLAIM_NULL`: the name in the current directory.
    Null(Component4),
    /// `CLAIM_PREVIOUS`: reclaim after a server restart (current file handle).
    Previous(OpenDelegationType4),
    /// `CLAIM_DELEGATE_CUR`: open under a delegation, by name.
    DelegateCur(StateId4, Component4),
    /// `CLAIM_DELEGATE_PREV`: reclaim a delegation after a client restart, by name.
    DelegatePrev(Component4),
    /// `CLAIM_FH`: the current file handle.
    Fh,
    /// `CLAIM_DELEG_CUR_FH`: open under a delegation, current file handle.
    DelegCurFh(StateId4),
    /// `CLAIM_DELEG_PREV_FH`: reclaim a delegation, current file handle.
    DelegPrevFh,
}

impl Encode for OpenClaim4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::Null(f) => {
                enc.u32(0);
                f.encode(enc);
            }
            Self::Previous(t) => {
                enc.u32(1);
                t.encode(enc);
            }
            Self::DelegateCur(s, f) => {
                enc.u32(2);
                s.encode(enc);
                f.encode(enc);
            }
            Self::DelegatePrev(f) => {
                enc.u32(3);
                f.encode(enc);
            }
            Self::Fh => {
                enc.u32(4);
            }
            Self::DelegCurFh(s) => {
                enc.u32(5);
                s.encode(enc);
            }
            Self::DelegPrevFh => {
                enc.u32(6);
            }
        }
    }
}

impl Decode for OpenClaim4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(match dec.u32()? {
            0 => Self::Null(Component4::decode(dec)?),
            1 => Self::Previous(OpenDelegationType4::decode(dec)?),
            2 => Self::DelegateCur(StateId4::decode(dec)?, Component4::decode(dec)?),
            3 => Self::DelegatePrev(Component4::decode(dec)?),
            4 => Self::Fh,
            5 => Self::DelegCurFh(StateId4::decode(dec)?),
            6 => Self::DelegPrevFh,
            other => return Err(XdrError::InvalidDiscriminant(other)),
        })
    }
}

xdr_struct! {
    /// §18.16 `OPEN4args`.
    pub struct Open4Args {
        /// The open owner's sequence id (0 in 4.1).
        pub seqid: SeqId4,
        /// `OPEN4_SHARE_ACCESS_*`, with the 4.1 "want" bits.
        pub share_access: u32,
        /// `OPEN4_SHARE_DENY_*`.
        pub share_deny: u32,
        /// The open owner.
        pub owner: StateOwner4,
        /// Whether (and how) to create.
        pub openhow: OpenFlag4,
        /// Which file.
        pub claim: OpenClaim4,
    }
}

xdr_struct! {
    /// RFC 5662 `nfsace4`: one access control entry.
    pub struct NfsAce4 {
        /// `acetype4`: allow, deny, audit, alarm.
        pub acetype: u32,
        /// `aceflag4`.
        pub flag: u32,
        /// `acemask4`.
        pub access_mask: u32,
        /// `utf8str_mixed who`.
        pub who: Utf8Str,
    }
}

/// RFC 5662 `nfs_space_limit4`: how much a write delegation may grow the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceLimit4 {
    /// `NFS_LIMIT_SIZE`: a file size.
    Size(u64),
    /// `NFS_LIMIT_BLOCKS` (`nfs_modified_limit4`): blocks and bytes per block.
    Blocks(u32, u32),
}

impl Encode for SpaceLimit4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::Size(s) => {
                enc.u32(1).u64(*s);
            }
            Self::Blocks(n, b) => {
                enc.u32(2).u32(*n).u32(*b);
            }
        }
    }
}

impl Decode for SpaceLimit4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match dec.u32()? {
            1 => dec.u64().map(Self::Size),
            2 => Ok(Self::Blocks(dec.u32()?, dec.u32()?)),
            other => Err(XdrError::InvalidDiscriminant(other)),
        }
    }
}

/// RFC 5662 `open_delegation4`: the delegation OPEN grants, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4 {
    /// `OPEN_DELEGATE_NONE`.
    None,
    /// `OPEN_DELEGATE_READ` (`open_read_delegation4`): stateid, recall, permissions.
    Read(StateId4, bool, NfsAce4),
    /// `OPEN_DELEGATE_WRITE` (`open_write_delegation4`): stateid, recall, space
    /// limit, permissions.
    Write(StateId4, bool, SpaceLimit4, NfsAce4),
    /// `OPEN_DELEGATE_NONE_EXT` (`open_none_delegation4`): why not (`why_no_delegation4`),
    /// and for WND4_CONTENTION (1) / WND4_RESOURCE (2) the promise that follows.
    NoneExt(u32, Option<bool>),
}

impl Encode for OpenDelegation4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::None => OpenDelegationType4::OPEN_DELEGATE_NONE.encode(enc),
            Self::Read(s, recall, ace) => {
                OpenDelegationType4::OPEN_DELEGATE_READ.encode(enc);
                s.encode(enc);
                enc.bool(*recall);
                ace.encode(enc);
            }
            Self::Write(s, recall, limit, ace) => {
                OpenDelegationType4::OPEN_DELEGATE_WRITE.encode(enc);
                s.encode(enc);
                enc.bool(*recall);
                limit.encode(enc);
                ace.encode(enc);
            }
            Self::NoneExt(why, will) => {
                OpenDelegationType4::OPEN_DELEGATE_NONE_EXT.encode(enc);
                enc.u32(*why);
                if matches!(why, 1 | 2) {
                    enc.bool(will.unwrap_or(false));
                }
            }
        }
    }
}

impl Decode for OpenDelegation4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(match OpenDelegationType4::decode(dec)? {
            OpenDelegationType4::OPEN_DELEGATE_NONE => Self::None,
            OpenDelegationType4::OPEN_DELEGATE_READ => {
                Self::Read(StateId4::decode(dec)?, dec.bool()?, NfsAce4::decode(dec)?)
            }
            OpenDelegationType4::OPEN_DELEGATE_WRITE => Self::Write(
                StateId4::decode(dec)?,
                dec.bool()?,
                SpaceLimit4::decode(dec)?,
                NfsAce4::decode(dec)?,
            ),
            OpenDelegationType4::OPEN_DELEGATE_NONE_EXT => {
                let why = dec.u32()?;
                let will = if matches!(why, 1 | 2) {
                    Some(dec.bool()?)
                } else {
                    None
                };
                Self::NoneExt(why, will)
            }
            other => return Err(XdrError::InvalidDiscriminant(other.0)),
        })
    }
}

xdr_struct! {
    /// §18.16 `OPEN4resok`.
    pub struct Open4ResOk {
        /// The open stateid.
        pub stateid: StateId4,
        /// The directory's change information (when a file was created).
        pub cinfo: ChangeInfo4,
        /// `OPEN4_RESULT_*`.
        pub rflags: u32,
        /// The attributes set on create.
        pub attrset: Bitmap4,
        /// The delegation granted, if any.
        pub delegation: OpenDelegation4,
    }
}

/// §18.16 `OPEN4res`.
pub type Open4Res = Res4<Open4ResOk>;

xdr_struct! {
    /// §18.2 `CLOSE4args`.
    #[derive(Copy)]
    pub struct Close4Args {
        /// The open owner's sequence id (0 in 4.1).
        pub seqid: SeqId4,
        /// The open stateid.
        pub open_stateid: StateId4,
    }
}

/// §18.2 `CLOSE4res`: a stateid the client must not use; knfsd answers
/// [`StateId4::INVALID`].
pub type Close4Res = Res4<StateId4>;

xdr_struct! {
    /// §18.18 `OPEN_DOWNGRADE4args`.
    #[derive(Copy)]
    pub struct OpenDowngrade4Args {
        /// The open stateid.
        pub open_stateid: StateId4,
        /// The open owner's sequence id (0 in 4.1).
        pub seqid: SeqId4,
        /// The access to keep.
        pub share_access: u32,
        /// The deny mode to keep.
        pub share_deny: u32,
    }
}

/// §18.18 `OPEN_DOWNGRADE4res`: the new open stateid.
pub type OpenDowngrade4Res = Res4<StateId4>;

open_enum! {
    /// RFC 5662 `nfs_lock_type4`.
    pub struct NfsLockType4 {
        /// Shared lock.
        READ_LT = 1,
        /// Exclusive lock.
        WRITE_LT = 2,
        /// Shared lock, the client will wait (blocking hint).
        READW_LT = 3,
        /// Exclusive lock, the client will wait.
        WRITEW_LT = 4,
    }
}

xdr_struct! {
    /// RFC 5662 `open_to_lock_owner4`: the first lock of a lock owner.
    pub struct OpenToLockOwner4 {
        /// The open owner's sequence id.
        pub open_seqid: SeqId4,
        /// The open stateid.
        pub open_stateid: StateId4,
        /// The new lock owner's sequence id.
        pub lock_seqid: SeqId4,
        /// The new lock owner.
        pub lock_owner: StateOwner4,
    }
}

xdr_struct! {
    /// RFC 5662 `exist_lock_owner4`: a lock owner with a lock stateid.
    #[derive(Copy)]
    pub struct ExistLockOwner4 {
        /// The lock stateid.
        pub lock_stateid: StateId4,
        /// The lock owner's sequence id.
        pub lock_seqid: SeqId4,
    }
}

/// RFC 5662 `locker4`: `switch (bool new_lock_owner)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker4 {
    /// TRUE: a new lock owner, from an open.
    New(OpenToLockOwner4),
    /// FALSE: an existing lock owner.
    Existing(ExistLockOwner4),
}

impl Encode for Locker4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::New(o) => {
                enc.bool(true);
                o.encode(enc);
            }
            Self::Existing(o) => {
                enc.bool(false);
                o.encode(enc);
            }
        }
    }
}

impl Decode for Locker4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        if dec.bool()? {
            OpenToLockOwner4::decode(dec).map(Self::New)
        } else {
            ExistLockOwner4::decode(dec).map(Self::Existing)
        }
    }
}

xdr_struct! {
    /// §18.10 `LOCK4args`.
    pub struct Lock4Args {
        /// The lock type.
        pub locktype: NfsLockType4,
        /// TRUE to reclaim after a server restart.
        pub reclaim: bool,
        /// Start of the range.
        pub offset: Offset4,
        /// Length of the range (all ones: to the end).
        pub length: Length4,
        /// Who locks.
        pub locker: Locker4,
    }
}

xdr_struct! {
    /// RFC 5662 `LOCK4denied`: the conflicting lock.
    pub struct Lock4Denied {
        /// Its start.
        pub offset: Offset4,
        /// Its length.
        pub length: Length4,
        /// Its type.
        pub locktype: NfsLockType4,
        /// Its owner.
        pub owner: StateOwner4,
    }
}

/// §18.10 `LOCK4res` and §18.11 `LOCKT4res`: `switch (nfsstat4 status) { case NFS4_OK:
/// ok; case NFS4ERR_DENIED: LOCK4denied; default: void; }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockRes<T> {
    /// `NFS4_OK`.
    Ok(T),
    /// `NFS4ERR_DENIED` with the conflicting lock.
    Denied(Lock4Denied),
    /// Any other status. Invariant: neither OK nor DENIED.
    Err(NfsStat4),
}

impl<T> LockRes<T> {
    /// The status word this result is encoded with.
    pub fn status(&self) -> NfsStat4 {
        match self {
            Self::Ok(_) => NfsStat4::NFS4_OK,
            Self::Denied(_) => NfsStat4::NFS4ERR_DENIED,
            Self::Err(s) => *s,
        }
    }
}

impl<T: Encode> Encode for LockRes<T> {
    fn encode(&self, enc: &mut Encoder) {
        self.status().encode(enc);
        match self {
            Self::Ok(v) => v.encode(enc),
            Self::Denied(d) => d.encode(enc),
            Self::Err(_) => {}
        }
    }
}

impl<T: Decode> Decode for LockRes<T> {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(match NfsStat4::decode(dec)? {
            NfsStat4::NFS4_OK => Self::Ok(T::decode(dec)?),
            NfsStat4::NFS4ERR_DENIED => Self::Denied(Lock4Denied::decode(dec)?),
            s => Self::Err(s),
        })
    }
}

/// §18.10 `LOCK4res`: the lock stateid on success.
pub type Lock4Res = LockRes<StateId4>;
/// §18.11 `LOCKT4res`: nothing on success.
pub type LockT4Res = LockRes<crate::Void>;

xdr_struct! {
    /// §18.11 `LOCKT4args`.
    pub struct LockT4Args {
        /// The lock type to test.
        pub locktype: NfsLockType4,
        /// Start of the range.
        pub offset: Offset4,
        /// Length of the range.
        pub length: Length4,
        /// The lock owner testing.
        pub owner: StateOwner4,
    }
}

xdr_struct! {
    /// §18.12 `LOCKU4args`.
    #[derive(Copy)]
    pub struct LockU4Args {
        /// The lock type.
        pub locktype: NfsLockType4,
        /// The lock owner's sequence id.
        pub seqid: SeqId4,
        /// The lock stateid.
        pub lock_stateid: StateId4,
        /// Start of the range.
        pub offset: Offset4,
        /// Length of the range.
        pub length: Length4,
    }
}

/// §18.12 `LOCKU4res`: the lock stateid.
pub type LockU4Res = Res4<StateId4>;

xdr_struct! {
    /// §18.38 `FREE_STATEID4args` (result: `nfsstat4`).
    #[derive(Copy)]
    pub struct FreeStateId4Args {
        /// The stateid to free.
        pub fsa_stateid: StateId4,
    }
}

/// §18.48 `TEST_STATEID4args`: `stateid4 ts_stateids<>`, decoded with at most
/// [`TEST_STATEID_DECODE_MAX`] stateids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TestStateId4Args(pub Vec<StateId4>);

/// Decoding bound on TEST_STATEID's stateids (Linux tests one at a time).
pub const TEST_STATEID_DECODE_MAX: u32 = 1024;

impl Encode for TestStateId4Args {
    fn encode(&self, enc: &mut Encoder) {
        enc.array(&self.0, |e, s| s.encode(e));
    }
}

impl Decode for TestStateId4Args {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.array(TEST_STATEID_DECODE_MAX, StateId4::decode)
            .map(TestStateId4Args)
    }
}

/// §18.48 `TEST_STATEID4resok`: `nfsstat4 tsr_status_codes<>`, one per stateid.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TestStateId4ResOk(pub Vec<NfsStat4>);

impl Encode for TestStateId4ResOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.array(&self.0, |e, s| s.encode(e));
    }
}

impl Decode for TestStateId4ResOk {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.array(TEST_STATEID_DECODE_MAX, NfsStat4::decode)
            .map(TestStateId4ResOk)
    }
}

/// §18.48 `TEST_STATEID4res`.
pub type TestStateId4Res = Res4<TestStateId4ResOk>;

xdr_struct! {
    /// §18.6 `DELEGRETURN4args` (result: `nfsstat4`).
    #[derive(Copy)]
    pub struct DelegReturn4Args {
        /// The delegation stateid.
        pub deleg_stateid: StateId4,
    }
}
