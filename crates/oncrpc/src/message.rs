//! RPC messages: call and reply headers (RFC 5531 §9 "The RPC Message Protocol").
//!
//! ```text
//! struct rpc_msg { unsigned int xid; union switch (msg_type mtype) {
//!     case CALL: call_body cbody; case REPLY: reply_body rbody; } body; };
//! ```
//!
//! The procedure arguments and results are not part of these types: a decoded
//! [`CallHeader`] leaves the [`Decoder`] at the first byte of the arguments, and a
//! decoded [`ReplyHeader`] with [`AcceptedStatus::Success`] at the first byte of the
//! results. Encoding likewise writes the header only; the caller appends the body.
//! Nothing here does I/O.

use xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::auth::{AuthStat, OpaqueAuth};
use crate::wire_enum::wire_enum;

/// RFC 5531 §9, `call_body`: "unsigned int rpcvers; /* must be equal to two (2) */".
pub const RPC_VERSION: u32 = 2;

/// A transaction identifier (RFC 5531 §9: "the xid of a reply message always matches
/// that of the initiating call message").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Xid(pub u32);

impl Encode for Xid {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.0);
    }
}

impl Decode for Xid {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        dec.u32().map(Xid)
    }
}

wire_enum! {
    /// RFC 5531 §9 `msg_type`.
    pub struct MsgType {
        /// A call.
        CALL = 0,
        /// A reply.
        REPLY = 1,
    }
}

wire_enum! {
    /// RFC 5531 §9 `reply_stat`.
    pub struct ReplyStat {
        /// The call was accepted (it may still have failed; see [`AcceptStat`]).
        MSG_ACCEPTED = 0,
        /// The call was rejected (see [`RejectStat`]).
        MSG_DENIED = 1,
    }
}

wire_enum! {
    /// RFC 5531 §9 `accept_stat`.
    pub struct AcceptStat {
        /// RPC executed successfully.
        SUCCESS = 0,
        /// Remote hasn't exported the program.
        PROG_UNAVAIL = 1,
        /// Remote can't support the version number.
        PROG_MISMATCH = 2,
        /// Program can't support the procedure.
        PROC_UNAVAIL = 3,
        /// Procedure can't decode the parameters.
        GARBAGE_ARGS = 4,
        /// E.g. a memory allocation failure.
        SYSTEM_ERR = 5,
    }
}

wire_enum! {
    /// RFC 5531 §9 `reject_stat`.
    pub struct RejectStat {
        /// RPC version number != 2.
        RPC_MISMATCH = 0,
        /// Remote can't authenticate the caller.
        AUTH_ERROR = 1,
    }
}

/// The lowest and highest version supported (of RPC or of a program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MismatchInfo {
    /// Lowest version supported.
    pub low: u32,
    /// Highest version supported.
    pub high: u32,
}

impl Encode for MismatchInfo {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.low).u32(self.high);
    }
}

impl Decode for MismatchInfo {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(MismatchInfo {
            low: dec.u32()?,
            high: dec.u32()?,
        })
    }
}

/// RFC 5531 §9 `call_body`, with the xid of its `rpc_msg`. The arguments follow.
///
/// ```text
/// struct call_body { unsigned int rpcvers; unsigned int prog; unsigned int vers;
///     unsigned int proc; opaque_auth cred; opaque_auth verf; /* args */ };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    /// Transaction id.
    pub xid: Xid,
    /// RPC protocol version; 2 in every valid call, but decoded as sent so the server
    /// can answer RPC_MISMATCH.
    pub rpcvers: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// Credential.
    pub cred: OpaqueAuth,
    /// Verifier.
    pub verf: OpaqueAuth,
}

impl CallHeader {
    /// A version-2 call header with the given credential and an AUTH_NONE verifier.
    pub fn new(xid: Xid, prog: u32, vers: u32, proc_: u32, cred: OpaqueAuth) -> Self {
        CallHeader {
            xid,
            rpcvers: RPC_VERSION,
            prog,
            vers,
            proc_,
            cred,
            verf: OpaqueAuth::none(),
        }
    }
}

impl Encode for CallHeader {
    fn encode(&self, enc: &mut Encoder) {
        self.xid.encode(enc);
        MsgType::CALL.encode(enc);
        enc.u32(self.rpcvers)
            .u32(self.prog)
            .u32(self.vers)
            .u32(self.proc_);
        self.cred.encode(enc);
        self.verf.encode(enc);
    }
}

/// Why a message is not a decodable call header. The server discards such a
/// message without a reply, as libtirpc's `svc_getreq` does when `xdr_callmsg` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The header itself is not valid XDR (short, or a bound exceeded).
    #[error("malformed RPC header: {0}")]
    Xdr(#[from] XdrError),
    /// The message is a reply, or of an unknown type, where a call was expected
    /// (or the reverse).
    #[error("unexpected RPC message type {0}")]
    UnexpectedMsgType(MsgType),
}

impl CallHeader {
    /// Decodes the header of a call message; `dec` is left at the arguments.
    pub fn decode(dec: &mut Decoder) -> Result<Self, HeaderError> {
        let xid = Xid::decode(dec)?;
        let mtype = MsgType::decode(dec)?;
        if mtype != MsgType::CALL {
            return Err(HeaderError::UnexpectedMsgType(mtype));
        }
        Ok(CallHeader {
            xid,
            rpcvers: dec.u32()?,
            prog: dec.u32()?,
            vers: dec.u32()?,
            proc_: dec.u32()?,
            cred: OpaqueAuth::decode(dec)?,
            verf: OpaqueAuth::decode(dec)?,
        })
    }
}

/// The status part of an accepted reply (RFC 5531 §9 `accepted_reply.reply_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptedStatus {
    /// SUCCESS: the procedure's results follow.
    Success,
    /// PROG_MISMATCH with the lowest and highest supported version.
    ProgMismatch(MismatchInfo),
    /// Any other `accept_stat` (PROG_UNAVAIL, PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR,
    /// or an unknown value): RFC 5531 §9 "default: void".
    ///
    /// Invariant: never SUCCESS or PROG_MISMATCH.
    Void(AcceptStat),
}

impl AcceptedStatus {
    /// The `accept_stat` on the wire.
    pub fn stat(&self) -> AcceptStat {
        match self {
            AcceptedStatus::Success => AcceptStat::SUCCESS,
            AcceptedStatus::ProgMismatch(_) => AcceptStat::PROG_MISMATCH,
            AcceptedStatus::Void(s) => *s,
        }
    }
}

/// RFC 5531 §9 `rejected_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectedReply {
    /// RPC_MISMATCH with the lowest and highest RPC version supported.
    RpcMismatch(MismatchInfo),
    /// AUTH_ERROR with the reason.
    AuthError(AuthStat),
}

/// RFC 5531 §9 `reply_body`: accepted (with verifier and status) or rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// MSG_ACCEPTED.
    Accepted {
        /// The server's verifier.
        verf: OpaqueAuth,
        /// The status; for SUCCESS the results follow the header.
        status: AcceptedStatus,
    },
    /// MSG_DENIED.
    Denied(RejectedReply),
}

impl ReplyBody {
    /// An accepted reply with an AUTH_NONE verifier and the given `accept_stat`.
    /// PROG_MISMATCH needs its range: use [`ReplyBody::prog_mismatch`].
    pub fn accepted(stat: AcceptStat) -> Self {
        let status = match stat {
            AcceptStat::SUCCESS => AcceptedStatus::Success,
            other => AcceptedStatus::Void(other),
        };
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            status,
        }
    }

    /// PROG_MISMATCH with the lowest and highest version of the program served.
    pub fn prog_mismatch(low: u32, high: u32) -> Self {
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            status: AcceptedStatus::ProgMismatch(MismatchInfo { low, high }),
        }
    }
}

/// A reply header: xid and `reply_body` (results follow on SUCCESS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Transaction id of the call this answers.
    pub xid: Xid,
    /// The reply body, minus the procedure's results.
    pub body: ReplyBody,
}

impl Encode for ReplyHeader {
    fn encode(&self, enc: &mut Encoder) {
        self.xid.encode(enc);
        MsgType::REPLY.encode(enc);
        match &self.body {
            ReplyBody::Accepted { verf, status } => {
                ReplyStat::MSG_ACCEPTED.encode(enc);
                verf.encode(enc);
                status.stat().encode(enc);
                if let AcceptedStatus::ProgMismatch(m) = status {
                    m.encode(enc);
                }
            }
            ReplyBody::Denied(rej) => {
                ReplyStat::MSG_DENIED.encode(enc);
                match rej {
                    RejectedReply::RpcMismatch(m) => {
                        RejectStat::RPC_MISMATCH.encode(enc);
                        m.encode(enc);
                    }
                    RejectedReply::AuthError(stat) => {
                        RejectStat::AUTH_ERROR.encode(enc);
                        stat.encode(enc);
                    }
                }
            }
        }
    }
}

impl ReplyHeader {
    /// Decodes the header of a reply message; on SUCCESS `dec` is left at the results.
    pub fn decode(dec: &mut Decoder) -> Result<Self, HeaderError> {
        let xid = Xid::decode(dec)?;
        let mtype = MsgType::decode(dec)?;
        if mtype != MsgType::REPLY {
            return Err(HeaderError::UnexpectedMsgType(mtype));
        }
        let body = match ReplyStat::decode(dec)? {
            ReplyStat::MSG_ACCEPTED => {
                let verf = OpaqueAuth::decode(dec)?;
                let status = match AcceptStat::decode(dec)? {
                    AcceptStat::SUCCESS => AcceptedStatus::Success,
                    AcceptStat::PROG_MISMATCH => {
                        AcceptedStatus::ProgMismatch(MismatchInfo::decode(dec)?)
                    }
                    // RFC 5531 §9: "default: /* Void. Cases include PROG_UNAVAIL,
                    // PROC_UNAVAIL, GARBAGE_ARGS, and SYSTEM_ERR. */ void;"
                    other => AcceptedStatus::Void(other),
                };
                ReplyBody::Accepted { verf, status }
            }
            ReplyStat::MSG_DENIED => ReplyBody::Denied(match RejectStat::decode(dec)? {
                RejectStat::RPC_MISMATCH => RejectedReply::RpcMismatch(MismatchInfo::decode(dec)?),
                RejectStat::AUTH_ERROR => RejectedReply::AuthError(AuthStat::decode(dec)?),
                // `rejected_reply` is a union with no default arm.
                other => return Err(XdrError::InvalidDiscriminant(other.0).into()),
            }),
            // `reply_body` is a union with no default arm.
            other => return Err(XdrError::InvalidDiscriminant(other.0).into()),
        };
        Ok(ReplyHeader { xid, body })
    }
}

/// Reads the xid and message type of a message without decoding the rest, as a
/// client does to match a reply to its call. `None` if the message is shorter than 8
/// bytes.
pub fn peek_xid_and_type(msg: &[u8]) -> Option<(Xid, MsgType)> {
    let xid = msg.get(0..4)?;
    let mtype = msg.get(4..8)?;
    let word = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((Xid(word(xid)), MsgType(word(mtype))))
}

#[cfg(test)]
mod tests;
