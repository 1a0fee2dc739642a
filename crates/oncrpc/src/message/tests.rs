use super::*;
use crate::auth::{AuthFlavor, AuthSysParms};
use bytes::Bytes;
use proptest::prelude::*;

/// A NULL call to rpcbind v2 as rpcinfo sends it (captured layout).
const NULL_CALL: &[u8] = &[
    0x12, 0x34, 0x56, 0x78, // xid
    0, 0, 0, 0, // CALL
    0, 0, 0, 2, // rpcvers
    0, 1, 0x86, 0xa0, // prog 100000
    0, 0, 0, 2, // vers
    0, 0, 0, 0, // proc
    0, 0, 0, 0, 0, 0, 0, 0, // cred AUTH_NONE
    0, 0, 0, 0, 0, 0, 0, 0, // verf AUTH_NONE
];

#[test]
fn call_header_decodes_from_byte_literal() {
    let mut dec = Decoder::new(Bytes::from_static(NULL_CALL));
    let h = CallHeader::decode(&mut dec).unwrap();
    assert_eq!(
        h,
        CallHeader::new(Xid(0x1234_5678), 100_000, 2, 0, OpaqueAuth::none())
    );
    assert_eq!(dec.remaining(), 0);
    assert_eq!(&h.to_xdr().to_bytes()[..], NULL_CALL);
}

#[test]
fn call_header_leaves_decoder_at_arguments() {
    let mut msg = NULL_CALL.to_vec();
    msg.extend_from_slice(&[0, 0, 0, 9]);
    let mut dec = Decoder::new(Bytes::from(msg));
    CallHeader::decode(&mut dec).unwrap();
    assert_eq!(dec.u32().unwrap(), 9);
}

#[test]
fn reply_decoded_as_call_is_unexpected_msg_type() {
    let mut msg = NULL_CALL.to_vec();
    msg[7] = 1;
    let err = CallHeader::decode(&mut Decoder::new(Bytes::from(msg))).unwrap_err();
    assert_eq!(err, HeaderError::UnexpectedMsgType(MsgType::REPLY));
}

#[test]
fn unknown_msg_type_is_unexpected_msg_type() {
    let mut msg = NULL_CALL.to_vec();
    msg[7] = 7;
    let err = CallHeader::decode(&mut Decoder::new(Bytes::from(msg))).unwrap_err();
    assert_eq!(err, HeaderError::UnexpectedMsgType(MsgType(7)));
}

#[test]
fn truncated_call_header_is_xdr_error() {
    for n in 0..NULL_CALL.len() {
        let err = CallHeader::decode(&mut Decoder::new(Bytes::copy_from_slice(&NULL_CALL[..n])))
            .unwrap_err();
        assert!(
            matches!(err, HeaderError::Xdr(XdrError::UnexpectedEnd { .. })),
            "{n}: {err:?}"
        );
    }
}

#[test]
fn call_with_cred_body_over_400_is_xdr_error() {
    let mut msg = NULL_CALL[..24].to_vec();
    msg.extend_from_slice(&[0, 0, 0, 1, 0, 0, 1, 145]); // AUTH_SYS, 401 bytes
    msg.extend_from_slice(&[0; 404]);
    msg.extend_from_slice(&[0; 8]);
    let err = CallHeader::decode(&mut Decoder::new(Bytes::from(msg))).unwrap_err();
    assert_eq!(
        err,
        HeaderError::Xdr(XdrError::LengthOverBound { len: 401, max: 400 })
    );
}

fn reply_bytes(body: ReplyBody) -> Vec<u8> {
    ReplyHeader { xid: Xid(1), body }
        .to_xdr()
        .to_bytes()
        .to_vec()
}

#[test]
fn success_reply_byte_exact() {
    assert_eq!(
        reply_bytes(ReplyBody::accepted(AcceptStat::SUCCESS)),
        [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn prog_mismatch_reply_carries_low_and_high() {
    assert_eq!(
        reply_bytes(ReplyBody::prog_mismatch(1, 2))[20..],
        [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]
    );
}

#[test]
fn void_accept_stats_have_no_body() {
    for stat in [
        AcceptStat::PROG_UNAVAIL,
        AcceptStat::PROC_UNAVAIL,
        AcceptStat::GARBAGE_ARGS,
        AcceptStat::SYSTEM_ERR,
    ] {
        let b = reply_bytes(ReplyBody::accepted(stat));
        assert_eq!(b.len(), 24);
        assert_eq!(b[20..], stat.0.to_be_bytes());
    }
}

#[test]
fn rpc_mismatch_reply_byte_exact() {
    let b = reply_bytes(ReplyBody::Denied(RejectedReply::RpcMismatch(
        MismatchInfo { low: 2, high: 2 },
    )));
    assert_eq!(b[8..], [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2]);
}

#[test]
fn auth_error_reply_byte_exact() {
    let b = reply_bytes(ReplyBody::Denied(RejectedReply::AuthError(
        AuthStat::AUTH_TOOWEAK,
    )));
    assert_eq!(b[8..], [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5]);
}

#[test]
fn unknown_accept_stat_decodes_as_void() {
    let mut b = reply_bytes(ReplyBody::accepted(AcceptStat::SUCCESS));
    b[23] = 42;
    let h = ReplyHeader::decode(&mut Decoder::new(Bytes::from(b))).unwrap();
    assert_eq!(
        h.body,
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            status: AcceptedStatus::Void(AcceptStat(42))
        }
    );
}

#[test]
fn unknown_reply_stat_is_invalid_discriminant() {
    let mut b = reply_bytes(ReplyBody::accepted(AcceptStat::SUCCESS));
    b[11] = 2;
    let err = ReplyHeader::decode(&mut Decoder::new(Bytes::from(b))).unwrap_err();
    assert_eq!(err, HeaderError::Xdr(XdrError::InvalidDiscriminant(2)));
}

#[test]
fn unknown_reject_stat_is_invalid_discriminant() {
    let mut b = reply_bytes(ReplyBody::Denied(RejectedReply::AuthError(
        AuthStat::AUTH_BADCRED,
    )));
    b[15] = 9;
    let err = ReplyHeader::decode(&mut Decoder::new(Bytes::from(b))).unwrap_err();
    assert_eq!(err, HeaderError::Xdr(XdrError::InvalidDiscriminant(9)));
}

#[test]
fn call_decoded_as_reply_is_unexpected_msg_type() {
    let err = ReplyHeader::decode(&mut Decoder::new(Bytes::from_static(NULL_CALL))).unwrap_err();
    assert_eq!(err, HeaderError::UnexpectedMsgType(MsgType::CALL));
}

#[test]
fn peek_xid_and_type_needs_eight_bytes() {
    assert_eq!(peek_xid_and_type(&NULL_CALL[..7]), None);
    assert_eq!(
        peek_xid_and_type(NULL_CALL),
        Some((Xid(0x1234_5678), MsgType::CALL))
    );
}

fn arb_auth() -> impl Strategy<Value = OpaqueAuth> {
    prop_oneof![
        Just(OpaqueAuth::none()),
        (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..=255),
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u32>(), 0..=16)
        )
            .prop_map(|(stamp, name, uid, gid, gids)| AuthSysParms {
                stamp,
                machinename: Bytes::from(name),
                uid,
                gid,
                gids: crate::Gids::new(&gids).unwrap()
            }
            .to_opaque_auth()),
        (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..=400)
        )
            .prop_map(|(f, b)| {
                OpaqueAuth {
                    flavor: AuthFlavor(f),
                    body: Bytes::from(b),
                }
            }),
    ]
}

fn arb_reply_body() -> impl Strategy<Value = ReplyBody> {
    let mismatch = (any::<u32>(), any::<u32>()).prop_map(|(low, high)| MismatchInfo { low, high });
    prop_oneof![
        (arb_auth(), Just(AcceptedStatus::Success))
            .prop_map(|(verf, status)| ReplyBody::Accepted { verf, status }),
        (arb_auth(), mismatch.clone()).prop_map(|(verf, m)| ReplyBody::Accepted {
            verf,
            status: AcceptedStatus::ProgMismatch(m)
        }),
        (arb_auth(), any::<u32>())
            .prop_filter("void stats only", |(_, s)| *s != 0 && *s != 2)
            .prop_map(|(verf, s)| ReplyBody::Accepted {
                verf,
                status: AcceptedStatus::Void(AcceptStat(s))
            }),
        mismatch.prop_map(|m| ReplyBody::Denied(RejectedReply::RpcMismatch(m))),
        any::<u32>().prop_map(|s| ReplyBody::Denied(RejectedReply::AuthError(AuthStat(s)))),
    ]
}

proptest! {
    #[test]
    fn call_header_round_trips(
        xid in any::<u32>(), rpcvers in any::<u32>(), prog in any::<u32>(),
        vers in any::<u32>(), proc_ in any::<u32>(), cred in arb_auth(), verf in arb_auth(),
        args in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let h = CallHeader { xid: Xid(xid), rpcvers, prog, vers, proc_, cred, verf };
        let mut enc = Encoder::new();
        h.encode(&mut enc);
        enc.raw(&args);
        let mut dec = Decoder::new(enc.finish().to_bytes());
        prop_assert_eq!(CallHeader::decode(&mut dec).unwrap(), h);
        prop_assert_eq!(&dec.rest()[..], &args[..]);
    }

    #[test]
    fn reply_header_round_trips(xid in any::<u32>(), body in arb_reply_body()) {
        let h = ReplyHeader { xid: Xid(xid), body };
        let bytes = h.to_xdr().to_bytes();
        let mut dec = Decoder::new(bytes);
        prop_assert_eq!(ReplyHeader::decode(&mut dec).unwrap(), h);
        prop_assert_eq!(dec.remaining(), 0);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = CallHeader::decode(&mut Decoder::new(Bytes::from(bytes.clone())));
        let _ = ReplyHeader::decode(&mut Decoder::new(Bytes::from(bytes)));
    }
}
