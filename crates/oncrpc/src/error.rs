//! Errors of the server side, each with its wire answer and its scope.
//!
//! Like rustls' `Error` → alert and h2's `Reset` vs `GoAway`, every error maps by one
//! `From` impl to a [`Disposition`]: the reply it earns (an `accept_stat` or a
//! `reject_stat`), a silent discard, or closing the connection. [`Scope`] says whether
//! it fails one call or the whole connection. `io::Error` appears only in the drivers
//! (`server`, `client`, `tcp`).

use xdr::XdrError;

use crate::auth::AuthStat;
use crate::message::{
    AcceptStat, HeaderError, MismatchInfo, RejectedReply, ReplyBody, RPC_VERSION,
};
use crate::record::RecordError;

/// What a handler returns instead of results (the `accept_stat` errors a program
/// itself may give).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// PROC_UNAVAIL: the program does not have this procedure.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// GARBAGE_ARGS: the arguments do not decode. `?` on an [`xdr::Decoder`] call in a
    /// handler yields this.
    #[error("garbage arguments: {0}")]
    GarbageArgs(#[from] XdrError),
    /// SYSTEM_ERR: the server failed for a reason of its own (e.g. out of memory).
    #[error("system error")]
    SystemErr,
    /// AUTH_ERROR: the program refuses the caller's credentials (e.g. AUTH_TOOWEAK
    /// when it requires AUTH_SYS). A rejected reply, not an accepted one.
    #[error("authentication error: {0}")]
    Auth(AuthStat),
}

/// Why the dispatcher could not produce results for a received call message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The message is not a decodable call header.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// RFC 5531 §9: rpcvers was not 2.
    #[error("RPC version {0} is not supported")]
    RpcMismatch(u32),
    /// Authentication failed.
    #[error("authentication failed: {0}")]
    Auth(AuthStat),
    /// No service for the program.
    #[error("program {0} unavailable")]
    ProgUnavail(u32),
    /// The program is served, but not at this version.
    #[error("program version unavailable (supported {}..={})", .0.low, .0.high)]
    ProgMismatch(MismatchInfo),
    /// The handler failed the call.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// How far the effect of an error reaches (h2 `proto/error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This call fails (with a reply or without one); the connection goes on.
    Call,
    /// The connection is closed; every call on it is lost.
    Connection,
}

/// What the server does about an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Send this reply body.
    Reply(ReplyBody),
    /// Send nothing; the connection goes on.
    Discard,
    /// Close the connection.
    Close,
}

impl Disposition {
    /// The scope of the disposition.
    pub fn scope(&self) -> Scope {
        match self {
            Disposition::Reply(_) | Disposition::Discard => Scope::Call,
            Disposition::Close => Scope::Connection,
        }
    }
}

impl From<&ServiceError> for Disposition {
    fn from(e: &ServiceError) -> Self {
        Disposition::Reply(match e {
            ServiceError::ProcUnavail => ReplyBody::accepted(AcceptStat::PROC_UNAVAIL),
            ServiceError::GarbageArgs(_) => ReplyBody::accepted(AcceptStat::GARBAGE_ARGS),
            ServiceError::SystemErr => ReplyBody::accepted(AcceptStat::SYSTEM_ERR),
            ServiceError::Auth(stat) => ReplyBody::Denied(RejectedReply::AuthError(*stat)),
        })
    }
}

impl From<&CallError> for Disposition {
    fn from(e: &CallError) -> Self {
        match e {
            // Without a well-formed call header there is nothing to answer; libtirpc
            // drops such a message too.
            CallError::Header(_) => Disposition::Discard,
            // RFC 5531 §9: "RPC_MISMATCH = 0, /* RPC version number != 2 */", and
            // `rejected_reply` "case RPC_MISMATCH: struct { unsigned int low;
            // unsigned int high; } mismatch_info;": we speak version 2 only.
            CallError::RpcMismatch(_) => Disposition::Reply(ReplyBody::Denied(
                RejectedReply::RpcMismatch(MismatchInfo {
                    low: RPC_VERSION,
                    high: RPC_VERSION,
                }),
            )),
            CallError::Auth(stat) => {
                Disposition::Reply(ReplyBody::Denied(RejectedReply::AuthError(*stat)))
            }
            CallError::ProgUnavail(_) => {
                Disposition::Reply(ReplyBody::accepted(AcceptStat::PROG_UNAVAIL))
            }
            CallError::ProgMismatch(m) => {
                Disposition::Reply(ReplyBody::prog_mismatch(m.low, m.high))
            }
            CallError::Service(s) => s.into(),
        }
    }
}

impl From<&RecordError> for Disposition {
    /// A broken record stream cannot be resynchronised: RFC 5531 §11 gives no way to
    /// find the next record mark, so the connection is closed.
    fn from(_: &RecordError) -> Self {
        Disposition::Close
    }
}

impl CallError {
    /// The scope of this error.
    pub fn scope(&self) -> Scope {
        Disposition::from(self).scope()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AcceptedStatus, MsgType};

    fn accept_stat(d: Disposition) -> AcceptStat {
        match d {
            Disposition::Reply(ReplyBody::Accepted { status, .. }) => status.stat(),
            other => panic!("not an accepted reply: {other:?}"),
        }
    }

    #[test]
    fn service_errors_map_to_their_accept_stat() {
        assert_eq!(
            accept_stat((&ServiceError::ProcUnavail).into()),
            AcceptStat::PROC_UNAVAIL
        );
        assert_eq!(
            accept_stat((&ServiceError::GarbageArgs(XdrError::NonZeroPadding)).into()),
            AcceptStat::GARBAGE_ARGS
        );
        assert_eq!(
            accept_stat((&ServiceError::SystemErr).into()),
            AcceptStat::SYSTEM_ERR
        );
        assert_eq!(
            Disposition::from(&ServiceError::Auth(AuthStat::AUTH_TOOWEAK)),
            Disposition::Reply(ReplyBody::Denied(RejectedReply::AuthError(
                AuthStat::AUTH_TOOWEAK
            )))
        );
    }

    #[test]
    fn xdr_error_in_handler_is_garbage_args() {
        let e: ServiceError = XdrError::TrailingBytes(4).into();
        assert_eq!(accept_stat((&e).into()), AcceptStat::GARBAGE_ARGS);
    }

    #[test]
    fn call_errors_map_to_their_wire_answer_and_scope() {
        assert_eq!(
            accept_stat((&CallError::ProgUnavail(7)).into()),
            AcceptStat::PROG_UNAVAIL
        );
        let m = MismatchInfo { low: 1, high: 3 };
        assert_eq!(
            Disposition::from(&CallError::ProgMismatch(m)),
            Disposition::Reply(ReplyBody::Accepted {
                verf: crate::auth::OpaqueAuth::none(),
                status: AcceptedStatus::ProgMismatch(m)
            })
        );
        assert_eq!(
            Disposition::from(&CallError::RpcMismatch(3)),
            Disposition::Reply(ReplyBody::Denied(RejectedReply::RpcMismatch(
                MismatchInfo { low: 2, high: 2 }
            )))
        );
        assert_eq!(
            Disposition::from(&CallError::Auth(AuthStat::AUTH_BADCRED)),
            Disposition::Reply(ReplyBody::Denied(RejectedReply::AuthError(
                AuthStat::AUTH_BADCRED
            )))
        );
        let header = CallError::Header(HeaderError::UnexpectedMsgType(MsgType::REPLY));
        assert_eq!(Disposition::from(&header), Disposition::Discard);
        assert_eq!(header.scope(), Scope::Call);
        assert_eq!(CallError::ProgUnavail(1).scope(), Scope::Call);
        assert_eq!(
            accept_stat((&CallError::Service(ServiceError::SystemErr)).into()),
            AcceptStat::SYSTEM_ERR
        );
    }

    #[test]
    fn record_errors_close_the_connection() {
        let e = RecordError::RecordTooLarge {
            announced: u32::MAX as u64,
            max: 1024,
        };
        let d = Disposition::from(&e);
        assert_eq!(d, Disposition::Close);
        assert_eq!(d.scope(), Scope::Connection);
    }
}
