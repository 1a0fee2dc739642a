//! The COMPOUND procedure (RFC 8881 §16.2): `COMPOUND4args`, `COMPOUND4res`, and the
//! `nfs_argop4` / `nfs_resop4` unions of the operations this crate codes.
//!
//! # Decoding a COMPOUND as a server
//! RFC 8881 §16.2.3: "The COMPOUND procedure is used to combine individual operations
//! into a single RPC request. The server interprets each of the operations in turn. If
//! an operation is executed by the server and the status of that operation is NFS4_OK,
//! then the next operation in the COMPOUND procedure is executed." and an operation
//! the server cannot decode ends the COMPOUND: its result is the last one. So
//! [`decode_compound_args`] fails only on the header (tag, minor version, operation
//! count): past it, it returns what it decoded ([`CompoundArgs::ops`]) and, if it
//! stopped before the end, where and why ([`Stopped`]), with the status to answer:
//!
//! | Why ([`StopReason`]) | Status (RFC 8881) | Result's opnum |
//! |---|---|---|
//! | more than [`MAX_OPS_DECODE`] operations | NFS4ERR_TOO_MANY_OPS (§15.1.3, §18.46.3) | the operation's |
//! | number outside the minor version's range | NFS4ERR_OP_ILLEGAL (§15.1.3, §18.52) | OP_ILLEGAL |
//! | operation of the minor version this crate does not code | NFS4ERR_NOTSUPP (§15.2) | the operation's |
//! | arguments do not decode | NFS4ERR_BADXDR (§15.1.1.1) | the operation's |
//!
//! DoS bounds: at most [`MAX_OPS_DECODE`] operations are decoded whatever count the
//! peer announces; every variable item is decoded against its XDR bound or this
//! crate's decoding bound, and opaque data is sliced from the received buffer, never
//! copied. Nothing here panics on input.

use xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::dir::*;
use crate::fh::*;
use crate::io::*;
use crate::session::*;
use crate::state::*;
use crate::{Bitmap4, NfsOpnum4, NfsStat4, Res4, Utf8Str, MAX_OPS_DECODE, TAG_DECODE_MAX};

/// A result that starts with its status word.
trait OpStatus {
    fn op_status(&self) -> NfsStat4;
}

impl OpStatus for NfsStat4 {
    fn op_status(&self) -> NfsStat4 {
        *self
    }
}

impl<T> OpStatus for Res4<T> {
    fn op_status(&self) -> NfsStat4 {
        self.status()
    }
}

impl<T> OpStatus for LockRes<T> {
    fn op_status(&self) -> NfsStat4 {
        self.status()
    }
}

impl OpStatus for SetAttr4Res {
    fn op_status(&self) -> NfsStat4 {
        self.status
    }
}

/// Binds the data of a variant with arguments in a pattern.
macro_rules! bind {
    ($t:ty, $i:ident) => {
        $i
    };
}

/// Decodes one `NfsArgop4` variant's arguments, if it has any.
macro_rules! decode_variant {
    ($v:ident, $dec:ident) => {
        Ok(NfsArgop4::$v)
    };
    ($v:ident, $dec:ident, $arg:ty) => {
        <$arg>::decode($dec).map(NfsArgop4::$v)
    };
}

/// The operation table: one line per operation, `Variant = OP_NUMBER (ArgType) => ResType;`
/// (no `(ArgType)` for operations without arguments). It writes `NfsArgop4`,
/// `NfsResop4`, their codecs and `opnum()`.
macro_rules! operations {
    ( $( $(#[$m:meta])* $v:ident = $op:ident $( ( $arg:ty ) )? => $res:ty; )* ) => {
        /// RFC 5662 `nfs_argop4`: one operation of a COMPOUND with its arguments.
        ///
        /// Each variant's doc names the section of RFC 8881 §18 that defines it.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsArgop4 {
            $( $(#[$m])* $v $( ($arg) )?, )*
            /// An operation this crate does not code, by number. Encodes as the bare
            /// number (as if it had no arguments), for tests and probes; the decoder
            /// never produces it (it stops there, see [`Stopped`]).
            Unknown(NfsOpnum4),
        }

        impl NfsArgop4 {
            /// The operation's number.
            pub fn opnum(&self) -> NfsOpnum4 {
                match self {
                    $( Self::$v $( (bind!($arg, _a)) )? => NfsOpnum4::$op, )*
                    Self::Unknown(op) => *op,
                }
            }

            /// Decodes the arguments of operation `op`; `None` if this crate does not
            /// code it.
            fn decode_args(op: NfsOpnum4, dec: &mut Decoder) -> Option<xdr::Result<Self>> {
                Some(match op {
                    $( NfsOpnum4::$op => decode_variant!($v, dec $(, $arg)?), )*
                    _ => return None,
                })
            }
        }

        impl Encode for NfsArgop4 {
            fn encode(&self, enc: &mut Encoder) {
                self.opnum().encode(enc);
                match self {
                    $( Self::$v $( (bind!($arg, a)) )? => { $( <$arg as Encode>::encode(a, enc); )? } )*
                    Self::Unknown(_) => {}
                }
            }
        }

        /// RFC 5662 `nfs_resop4`: one operation's result.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum NfsResop4 {
            $( $(#[$m])* $v($res), )*
            /// §18.52 `ILLEGAL4res`, under opnum OP_ILLEGAL: the answer to an undefined
            /// operation number (status NFS4ERR_OP_ILLEGAL).
            Illegal(NfsStat4),
            /// The error result of an operation this crate does not code: its number
            /// and status. Invariant: the status is not `NFS4_OK`.
            ///
            /// Correct for every error result of an operation not coded here (their
            /// `default` arms are void); SETATTR's `attrsset`, which follows every
            /// status, is encoded empty, should this be used for SETATTR.
            Unknown {
                /// The operation.
                opnum: NfsOpnum4,
                /// Its status.
                status: NfsStat4,
            },
        }

        impl NfsResop4 {
            /// The operation's number, as the reply carries it.
            pub fn opnum(&self) -> NfsOpnum4 {
                match self {
                    $( Self::$v(_) => NfsOpnum4::$op, )*
                    Self::Illegal(_) => NfsOpnum4::OP_ILLEGAL,
                    Self::Unknown { opnum, .. } => *opnum,
                }
            }

            /// The operation's status.
            pub fn status(&self) -> NfsStat4 {
                match self {
                    $( Self::$v(r) => r.op_status(), )*
                    Self::Illegal(s) => *s,
                    Self::Unknown { status, .. } => *status,
                }
            }
        }

        impl Encode for NfsResop4 {
            fn encode(&self, enc: &mut Encoder) {
                self.opnum().encode(enc);
                match self {
                    $( Self::$v(r) => r.encode(enc), )*
                    Self::Illegal(s) => s.encode(enc),
                    Self::Unknown { opnum, status } => {
                        status.encode(enc);
                        if *opnum == NfsOpnum4::OP_SETATTR {
                            // RFC 5662 SETATTR4res: `bitmap4 attrsset` in every arm.
                            Bitmap4::default().encode(enc);
                        }
                    }
                }
            }
        }

        impl Decode for NfsResop4 {
            fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
                let op = NfsOpnum4::decode(dec)?;
                match op {
                    $( NfsOpnum4::$op => <$res>::decode(dec).map(Self::$v), )*
                    NfsOpnum4::OP_ILLEGAL => NfsStat4::decode(dec).map(Self::Illegal),
                    opnum => {
                        let status = NfsStat4::decode(dec)?;
                        if status.is_ok() {
                            // A success we cannot decode: its length is unknown.
                            return Err(XdrError::InvalidDiscriminant(opnum.0));
                        }
                        if opnum == NfsOpnum4::OP_SETATTR {
                            Bitmap4::decode(dec)?;
                        }
                        Ok(Self::Unknown { opnum, status })
                    }
                }
            }
        }
    };
}

operations! {
    /// §18.1 ACCESS.
    Access = OP_ACCESS (Access4Args) => Access4Res;
    /// §18.2 CLOSE.
    Close = OP_CLOSE (Close4Args) => Close4Res;
    /// §18.3 COMMIT.
    Commit = OP_COMMIT (Commit4Args) => Commit4Res;
    /// §18.4 CREATE.
    Create = OP_CREATE (Create4Args) => Create4Res;
    /// §18.6 DELEGRETURN.
    DelegReturn = OP_DELEGRETURN (DelegReturn4Args) => NfsStat4;
    /// §18.7 GETATTR.
    GetAttr = OP_GETATTR (GetAttr4Args) => GetAttr4Res;
    /// §18.8 GETFH.
    GetFh = OP_GETFH => GetFh4Res;
    /// §18.9 LINK.
    Link = OP_LINK (Link4Args) => Link4Res;
    /// §18.10 LOCK.
    Lock = OP_LOCK (Lock4Args) => Lock4Res;
    /// §18.11 LOCKT.
    LockT = OP_LOCKT (LockT4Args) => LockT4Res;
    /// §18.12 LOCKU.
    LockU = OP_LOCKU (LockU4Args) => LockU4Res;
    /// §18.13 LOOKUP.
    Lookup = OP_LOOKUP (Lookup4Args) => NfsStat4;
    /// §18.14 LOOKUPP.
    LookupP = OP_LOOKUPP => NfsStat4;
    /// §18.15 NVERIFY.
    NVerify = OP_NVERIFY (Verify4Args) => NfsStat4;
    /// §18.16 OPEN.
    Open = OP_OPEN (Open4Args) => Open4Res;
    /// §18.18 OPEN_DOWNGRADE.
    OpenDowngrade = OP_OPEN_DOWNGRADE (OpenDowngrade4Args) => OpenDowngrade4Res;
    /// §18.19 PUTFH.
    PutFh = OP_PUTFH (PutFh4Args) => NfsStat4;
    /// §18.20 PUTPUBFH.
    PutPubFh = OP_PUTPUBFH => NfsStat4;
    /// §18.21 PUTROOTFH.
    PutRootFh = OP_PUTROOTFH => NfsStat4;
    /// §18.22 READ.
    Read = OP_READ (Read4Args) => Read4Res;
    /// §18.23 READDIR.
    ReadDir = OP_READDIR (ReadDir4Args) => ReadDir4Res;
    /// §18.24 READLINK.
    ReadLink = OP_READLINK => ReadLink4Res;
    /// §18.25 REMOVE.
    Remove = OP_REMOVE (Remove4Args) => Remove4Res;
    /// §18.26 RENAME.
    Rename = OP_RENAME (Rename4Args) => Rename4Res;
    /// §18.27 RESTOREFH.
    RestoreFh = OP_RESTOREFH => NfsStat4;
    /// §18.28 SAVEFH.
    SaveFh = OP_SAVEFH => NfsStat4;
    /// §18.29 SECINFO.
    SecInfo = OP_SECINFO (SecInfo4Args) => SecInfo4Res;
    /// §18.30 SETATTR.
    SetAttr = OP_SETATTR (SetAttr4Args) => SetAttr4Res;
    /// §18.31 VERIFY.
    Verify = OP_VERIFY (Verify4Args) => NfsStat4;
    /// §18.32 WRITE.
    Write = OP_WRITE (Write4Args) => Write4Res;
    /// §18.34 BIND_CONN_TO_SESSION.
    BindConnToSession = OP_BIND_CONN_TO_SESSION (BindConnToSession4Args) => BindConnToSession4Res;
    /// §18.35 EXCHANGE_ID.
    ExchangeId = OP_EXCHANGE_ID (ExchangeId4Args) => ExchangeId4Res;
    /// §18.36 CREATE_SESSION.
    CreateSession = OP_CREATE_SESSION (CreateSession4Args) => CreateSession4Res;
    /// §18.37 DESTROY_SESSION.
    DestroySession = OP_DESTROY_SESSION (DestroySession4Args) => NfsStat4;
    /// §18.38 FREE_STATEID.
    FreeStateId = OP_FREE_STATEID (FreeStateId4Args) => NfsStat4;
    /// §18.45 SECINFO_NO_NAME.
    SecInfoNoName = OP_SECINFO_NO_NAME (SecInfoStyle4) => SecInfo4Res;
    /// §18.46 SEQUENCE.
    Sequence = OP_SEQUENCE (Sequence4Args) => Sequence4Res;
    /// §18.48 TEST_STATEID.
    TestStateId = OP_TEST_STATEID (TestStateId4Args) => TestStateId4Res;
    /// §18.50 DESTROY_CLIENTID.
    DestroyClientId = OP_DESTROY_CLIENTID (DestroyClientId4Args) => NfsStat4;
    /// §18.51 RECLAIM_COMPLETE.
    ReclaimComplete = OP_RECLAIM_COMPLETE (ReclaimComplete4Args) => NfsStat4;
}

/// Why [`decode_compound_args`] stopped before the last operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The COMPOUND announced more than [`MAX_OPS_DECODE`] operations.
    TooManyOps,
    /// The operation number is not defined in the COMPOUND's minor version.
    Illegal,
    /// The operation is defined in the minor version but this crate does not code it.
    NotSupported,
    /// The operation's arguments (or its number) do not decode.
    BadXdr(XdrError),
}

impl StopReason {
    /// The status RFC 8881 gives the operation decoding stopped at (the one table of
    /// the module docs).
    pub fn status(self) -> NfsStat4 {
        match self {
            // §18.46.3: more operations than the server accepts.
            StopReason::TooManyOps => NfsStat4::NFS4ERR_TOO_MANY_OPS,
            // §15.1.3 / §18.52: an operation number the minor version does not
            // define (paraphrased).
            StopReason::Illegal => NfsStat4::NFS4ERR_OP_ILLEGAL,
            StopReason::NotSupported => NfsStat4::NFS4ERR_NOTSUPP,
            // §15.1.1.1: "The arguments for this operation do not match those
            // specified in the XDR definition."
            StopReason::BadXdr(_) => NfsStat4::NFS4ERR_BADXDR,
        }
    }
}

/// Where and why [`decode_compound_args`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Index in `argarray` of the operation that was not decoded (= `ops.len()`).
    pub index: usize,
    /// Its number (`OP_ILLEGAL` if even the number did not decode).
    pub opnum: NfsOpnum4,
    /// Why.
    pub reason: StopReason,
}

impl Stopped {
    /// The result to put last in the reply's `resarray` (RFC 8881 §16.2.3, §18.52).
    pub fn result(&self) -> NfsResop4 {
        let status = self.reason.status();
        match self.reason {
            StopReason::Illegal => NfsResop4::Illegal(status),
            _ if self.opnum == NfsOpnum4::OP_ILLEGAL => NfsResop4::Illegal(status),
            _ => NfsResop4::Unknown {
                opnum: self.opnum,
                status,
            },
        }
    }
}

/// A COMPOUND as the server decoded it: see [`decode_compound_args`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundArgs {
    /// `tag`, to be echoed in the reply.
    pub tag: Utf8Str,
    /// `minorversion`. Not checked here (RFC 8881 §16.2.3: the server answers an
    /// unsupported one with NFS4ERR_MINOR_VERS_MISMATCH and an empty `resarray`).
    pub minorversion: u32,
    /// The operation count the client announced (may exceed `ops.len()`).
    pub opcount: u32,
    /// The operations decoded, in order.
    pub ops: Vec<NfsArgop4>,
    /// `None` if all `opcount` operations decoded; else where and why decoding stopped.
    pub stopped: Option<Stopped>,
    /// `(position, length)` of the data of each DDP-eligible argument decoded (RFC
    /// 8267 §5.1: WRITE's `data`, CREATE's NF4LNK `linkdata`), in order, positions
    /// counted as [`Decoder::stream_position`] counts them (in the whole stream, also
    /// when decoding a reduced one): after the length word, where an RPC-over-RDMA
    /// Read chunk's Position points. Lengths are those decoded (0 from a reduced
    /// stream). See [`CompoundArgs::read_chunks_are_ddp_eligible`].
    pub ddp_arguments: Vec<(usize, usize)>,
}

impl CompoundArgs {
    /// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8.1.1: "A DDP-eligibility violation
    /// occurs when a requester forms a Call message with a non-DDP-eligible data item
    /// in a Read chunk". True if every chunk in `chunk_ranges` (`(position, length)`
    /// of each non-Position-Zero Read chunk, as the transport reassembled them, in the
    /// coordinates of the decoder this COMPOUND was decoded from) is exactly the data
    /// of one DDP-eligible argument; a server answers a violation GARBAGE_ARGS.
    pub fn read_chunks_are_ddp_eligible(&self, chunk_ranges: &[(u32, u32)]) -> bool {
        chunk_ranges.iter().all(|&(pos, len)| {
            self.ddp_arguments
                .iter()
                .any(|&(p, l)| p == pos as usize && l == len as usize)
        })
    }
}

/// Decodes `COMPOUND4args` as a server must (module docs): an error only if the header
/// (`tag`, `minorversion`, the operation count) does not decode, which RFC 8881 answers
/// with NFS4ERR_BADXDR and an empty `resarray`; otherwise the operations that decoded
/// and where decoding stopped, if it did.
///
/// Which operation numbers are legal follows `minorversion` (0, 1, or 2 and above); the
/// operations' XDR is the same in every minor version. Bytes after the last operation
/// are left in `dec`.
pub fn decode_compound_args(dec: &mut Decoder) -> xdr::Result<CompoundArgs> {
    let tag = dec.string(TAG_DECODE_MAX).map(Utf8Str)?;
    let minorversion = dec.u32()?;
    let opcount = dec.u32()?;
    let mut out = CompoundArgs {
        tag,
        minorversion,
        opcount,
        ops: Vec::with_capacity(opcount.min(MAX_OPS_DECODE) as usize),
        stopped: None,
        ddp_arguments: Vec::new(),
    };
    for index in 0..opcount as usize {
        let opnum = match NfsOpnum4::decode(dec) {
            Ok(op) => op,
            Err(e) => {
                out.stopped = Some(Stopped {
                    index,
                    opnum: NfsOpnum4::OP_ILLEGAL,
                    reason: StopReason::BadXdr(e),
                });
                break;
            }
        };
        let stop = |reason| {
            Some(Stopped {
                index,
                opnum,
                reason,
            })
        };
        if index >= MAX_OPS_DECODE as usize {
            out.stopped = stop(StopReason::TooManyOps);
            break;
        }
        if !opnum.defined_in_minor_version(minorversion) {
            out.stopped = stop(StopReason::Illegal);
            break;
        }
        let args_at = dec.stream_position();
        match NfsArgop4::decode_args(opnum, dec) {
            Some(Ok(op)) => {
                // The data follows a fixed prefix: WRITE4args' stateid (16), offset
                // (8), stable (4) and length word; createtype4's discriminant and the
                // linktext4 length word.
                match &op {
                    NfsArgop4::Write(w) => out.ddp_arguments.push((args_at + 32, w.data.0.len())),
                    NfsArgop4::Create(Create4Args {
                        objtype: CreateType4::Link(l),
                        ..
                    }) => out.ddp_arguments.push((args_at + 8, l.0.len())),
                    _ => {}
                }
                out.ops.push(op);
            }
            Some(Err(e)) => {
                out.stopped = stop(StopReason::BadXdr(e));
                break;
            }
            None => {
                out.stopped = stop(StopReason::NotSupported);
                break;
            }
        }
    }
    Ok(out)
}

/// RFC 8881 §16.2 `COMPOUND4args`, for a client to encode (and for tests to decode
/// strictly: any operation that does not decode is an error; a server uses
/// [`decode_compound_args`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compound4Args {
    /// `utf8str_cs tag`: echoed by the server, for the client's logs.
    pub tag: Utf8Str,
    /// `uint32_t minorversion`.
    pub minorversion: u32,
    /// `nfs_argop4 argarray<>`.
    pub argarray: Vec<NfsArgop4>,
}

impl Encode for Compound4Args {
    fn encode(&self, enc: &mut Encoder) {
        self.tag.encode(enc);
        enc.u32(self.minorversion);
        enc.array(&self.argarray, |e, op| op.encode(e));
    }
}

impl Decode for Compound4Args {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let c = decode_compound_args(dec)?;
        match c.stopped {
            None => Ok(Self {
                tag: c.tag,
                minorversion: c.minorversion,
                argarray: c.ops,
            }),
            Some(Stopped {
                reason: StopReason::BadXdr(e),
                ..
            }) => Err(e),
            Some(Stopped {
                reason: StopReason::TooManyOps,
                ..
            }) => Err(XdrError::LengthOverBound {
                len: c.opcount,
                max: MAX_OPS_DECODE,
            }),
            Some(Stopped { opnum, .. }) => Err(XdrError::InvalidDiscriminant(opnum.0)),
        }
    }
}

/// RFC 8881 §16.2 `COMPOUND4res`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Res {
    /// The status of the last operation evaluated (RFC 8881 §16.2.3).
    pub status: NfsStat4,
    /// The request's `tag`, echoed.
    pub tag: Utf8Str,
    /// `nfs_resop4 resarray<>`: one result per operation evaluated.
    pub resarray: Vec<NfsResop4>,
}

impl Compound4Res {
    /// A reply whose `status` is that of its last result (or `NFS4_OK` when empty), as
    /// RFC 8881 §16.2.3 requires.
    pub fn new(tag: Utf8Str, resarray: Vec<NfsResop4>) -> Self {
        let status = resarray.last().map_or(NfsStat4::NFS4_OK, NfsResop4::status);
        Self {
            status,
            tag,
            resarray,
        }
    }
}

impl Encode for Compound4Res {
    fn encode(&self, enc: &mut Encoder) {
        self.status.encode(enc);
        self.tag.encode(enc);
        enc.array(&self.resarray, |e, r| r.encode(e));
    }
}

impl Decode for Compound4Res {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            status: NfsStat4::decode(dec)?,
            tag: dec.string(TAG_DECODE_MAX).map(Utf8Str)?,
            resarray: dec.array(MAX_OPS_DECODE, NfsResop4::decode)?,
        })
    }
}
