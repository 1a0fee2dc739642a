//! Each error maps to its wire answer and scope.

use super::*;
use crate::wire::OptType;

#[test]
fn header_errors_map_to_rdma_error_codes() {
    let bad = WireAnswer::RdmaError(ErrCode::ERR_BADHEADER);
    let cases: Vec<(HeaderError, WireAnswer, Scope)> = vec![
        (
            HeaderError::TooShort { len: 3 },
            WireAnswer::Discard,
            Scope::Message,
        ),
        (
            HeaderError::UndecodableError,
            WireAnswer::Discard,
            Scope::Message,
        ),
        (HeaderError::UnknownXid(Xid(1)), bad, Scope::Message),
        (
            HeaderError::UnsupportedVersion(Version(7)),
            WireAnswer::RdmaError(ErrCode::ERR_VERS),
            Scope::Rpc,
        ),
        (
            HeaderError::UnknownOption(OptType(5)),
            WireAnswer::RdmaError(ErrCode::ERR_INVAL_OPTION),
            Scope::Rpc,
        ),
        (
            HeaderError::Xdr(xdr::XdrError::InvalidDiscriminant(2)),
            bad,
            Scope::Rpc,
        ),
        (HeaderError::UnknownMsgType(MsgType(9)), bad, Scope::Rpc),
        (HeaderError::MsgpReceived, bad, Scope::Rpc),
        (HeaderError::DoneReceived, bad, Scope::Rpc),
        (HeaderError::NoMsgWithoutChunks, bad, Scope::Rpc),
        (HeaderError::NoPayloadChunk, bad, Scope::Rpc),
        (HeaderError::MissingPayload, bad, Scope::Rpc),
        (
            HeaderError::XidMismatch {
                header: Xid(1),
                payload: Xid(2),
            },
            bad,
            Scope::Rpc,
        ),
        (HeaderError::TooManySegments { max: 1 }, bad, Scope::Rpc),
        (HeaderError::TooManyChunks { max: 1 }, bad, Scope::Rpc),
        (
            HeaderError::TooManyTotalSegments { max: 1 },
            bad,
            Scope::Rpc,
        ),
        (HeaderError::EmptyChunk, bad, Scope::Rpc),
        (HeaderError::MisalignedPosition(2), bad, Scope::Rpc),
        (HeaderError::DuplicatePosition(4), bad, Scope::Rpc),
        (HeaderError::ReadListInReply, bad, Scope::Rpc),
        (HeaderError::WriteListMismatch, bad, Scope::Rpc),
        (HeaderError::ChunkOverrun, bad, Scope::Rpc),
    ];
    for (e, answer, scope) in cases {
        assert_eq!(WireAnswer::from(&e), answer, "{e:?}");
        assert_eq!(Scope::from(&e), scope, "{e:?}");
        let top = Error::from(e.clone());
        assert_eq!(top.wire_answer(), answer);
        assert_eq!(top.scope(), scope);
    }
}

#[test]
fn args_errors_map_to_garbage_args_and_fail_the_rpc() {
    for e in [
        ArgsError::ChunkLengthMismatch {
            position: 4,
            in_stream: 1,
            chunk: 2,
        },
        ArgsError::BadPosition(8),
        ArgsError::NotDdpEligible { position: 8 },
        ArgsError::ReadDataLength {
            expected: 1,
            got: 2,
        },
        ArgsError::TooLarge(1),
    ] {
        assert_eq!(WireAnswer::from(&e), WireAnswer::GarbageArgs);
        assert_eq!(Scope::from(&e), Scope::Rpc);
        assert_eq!(Error::from(e).wire_answer(), WireAnswer::GarbageArgs);
    }
}

#[test]
fn reply_errors_are_local_and_fail_the_rpc() {
    for e in [
        ReplyError::MissingWriteChunk(1),
        ReplyError::BadPosition(3),
        ReplyError::PeerError(ErrCode::ERR_BADHEADER),
        ReplyError::ConnectionLost,
        ReplyError::ReplyChunkNotPlaced { len: 9 },
        ReplyError::WriteChunkNotPlaced { index: 0, len: 9 },
        ReplyError::NoProcedure,
        ReplyError::ResultsNotFound,
        ReplyError::WriteChunkLengthMismatch {
            index: 0,
            in_stream: 1,
            chunk: 2,
        },
    ] {
        assert_eq!(WireAnswer::from(&e), WireAnswer::Local);
        assert_eq!(Scope::from(&e), Scope::Rpc);
    }
}

#[test]
fn responder_marshal_failures_answer_err_badheader() {
    // §5.5.3: no RPC-level reply is possible for that XID.
    let bad = WireAnswer::RdmaError(ErrCode::ERR_BADHEADER);
    assert_eq!(
        WireAnswer::from(&MarshalError::NoReplyChunk { len: 1 }),
        bad
    );
    assert_eq!(
        WireAnswer::from(&MarshalError::ReplyChunkTooSmall { len: 2, room: 1 }),
        bad
    );
    assert_eq!(
        WireAnswer::from(&MarshalError::WriteChunkTooSmall {
            index: 0,
            len: 2,
            room: 1
        }),
        bad
    );
    for e in [
        MarshalError::HeaderTooLarge {
            len: 1,
            threshold: 0,
        },
        MarshalError::RegistrationMismatch,
        MarshalError::TooLarge,
        MarshalError::NoUpperLayerBinding,
        MarshalError::NoBackwardChannel,
        MarshalError::ProbeTooLarge { len: 2000 },
    ] {
        assert_eq!(WireAnswer::from(&e), WireAnswer::Local);
        assert_eq!(Scope::from(&e), Scope::Rpc);
    }
}

#[test]
fn credit_errors_scope() {
    let e = CreditError::Exhausted {
        limit: 1,
        outstanding: 1,
    };
    assert_eq!(Scope::from(&e), Scope::Message);
    assert_eq!(WireAnswer::from(&e), WireAnswer::Local);
    assert_eq!(Scope::from(&CreditError::ZeroGrant), Scope::Connection);
    assert_eq!(
        Error::from(CreditError::NothingOutstanding).scope(),
        Scope::Connection
    );
}
