//! One malformed input per test: the exact error variant and the exact reply bytes.

use super::*;
use crate::testutil::{hex, vectors::*, words};

fn v1() -> Policy {
    Policy::v1_only()
}

/// The header followed by a NULL call with the header's XID.
fn with_null_call(header: &str) -> Bytes {
    let h = hex(header);
    let mut call = hex(NULL_CALL_RPC).to_vec();
    call[..4].copy_from_slice(&h[..4]);
    Bytes::from([h.to_vec(), call].concat())
}

/// Receives `buf`, expects `err`, and checks the reply we would send.
fn refuse(buf: &Bytes, policy: &Policy, err: HeaderError, reply: Option<Bytes>) {
    assert_eq!(receive(buf, policy), Err(err.clone()));
    assert_eq!(
        error_reply(buf, &err, 64, policy).map(|h| h.to_bytes()),
        reply
    );
}

#[test]
fn accepts_linux_null_call() {
    let buf = with_null_call(NULL_CALL_KERNEL_CLIENT);
    let r = receive(&buf, &v1()).unwrap();
    match r {
        Received::Msg {
            prefix,
            chunks,
            payload,
        } => {
            assert_eq!(prefix.credits, 128);
            assert!(chunks.is_empty());
            assert_eq!(payload, hex(NULL_CALL_RPC));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s5_5_1_wrong_version_gets_err_vers_with_our_range_like_knfsd() {
    // Byte-exact against knfsd's answer to the same call (vectors
    // rpcrdma_bad_version_call_test_requester -> rpcrdma_err_vers_knfsd).
    refuse(
        &with_null_call(BAD_VERSION_CALL),
        &v1(),
        HeaderError::UnsupportedVersion(Version(7)),
        Some(hex(ERR_VERS_KNFSD)),
    );
}

#[test]
fn s5_5_1_err_vers_reports_low_and_high() {
    let buf = with_null_call(BAD_VERSION_CALL);
    let reply = error_reply(
        &buf,
        &HeaderError::UnsupportedVersion(Version(7)),
        64,
        &Policy::default(),
    )
    .unwrap();
    assert_eq!(reply.to_bytes(), words(&[0xdf77_1353, 7, 64, 4, 1, 1, 2]));
}

#[test]
fn s5_6_1_rdma_msgp_gets_err_badheader_like_knfsd() {
    refuse(
        &with_null_call(MSGP_CALL),
        &v1(),
        HeaderError::MsgpReceived,
        Some(hex(ERR_CHUNK_MSGP_KNFSD)),
    );
}

#[test]
fn s5_6_2_rdma_done_gets_err_badheader() {
    refuse(
        &words(&[0x1234, 1, 32, 3]),
        &v1(),
        HeaderError::DoneReceived,
        Some(words(&[0x1234, 1, 64, 4, 2])),
    );
}

#[test]
fn s5_5_2_unknown_proc_gets_err_badheader_like_knfsd() {
    refuse(
        &with_null_call(UNKNOWN_PROC_CALL),
        &v1(),
        HeaderError::UnknownMsgType(MsgType(9)),
        Some(hex(ERR_CHUNK_UNKNOWN_PROC_KNFSD)),
    );
}

#[test]
fn s5_5_2_nomsg_without_chunks_gets_err_badheader() {
    refuse(
        &words(&[0x55, 1, 32, 1, 0, 0, 0]),
        &v1(),
        HeaderError::NoMsgWithoutChunks,
        Some(words(&[0x55, 1, 64, 4, 2])),
    );
}

#[test]
fn s5_5_2_xid_mismatch_gets_err_badheader() {
    let mut buf = with_null_call(NULL_CALL_KERNEL_CLIENT).to_vec();
    buf[28..32].copy_from_slice(&[0, 0, 0, 9]);
    refuse(
        &Bytes::from(buf),
        &v1(),
        HeaderError::XidMismatch {
            header: Xid(0x02c7_04b8),
            payload: Xid(9),
        },
        Some(words(&[0x02c7_04b8, 1, 64, 4, 2])),
    );
}

#[test]
fn rdma_msg_without_payload_gets_err_badheader() {
    refuse(
        &hex(NULL_CALL_KERNEL_CLIENT),
        &v1(),
        HeaderError::MissingPayload,
        Some(words(&[0x02c7_04b8, 1, 64, 4, 2])),
    );
}

#[test]
fn s5_5_2_truncated_header_gets_err_badheader() {
    let full = hex(WRITE_CALL_READ_LIST);
    let cut = full.slice(..30);
    let err = receive(&cut, &v1()).unwrap_err();
    assert!(matches!(err, HeaderError::Xdr(_)), "{err:?}");
    assert_eq!(
        error_reply(&cut, &err, 64, &v1()).unwrap().to_bytes(),
        words(&[0x10c7_04b8, 1, 64, 4, 2])
    );
}

#[test]
fn too_short_for_a_prefix_is_discarded_silently() {
    refuse(
        &Bytes::from_static(&[0; 12]),
        &v1(),
        HeaderError::TooShort { len: 12 },
        None,
    );
}

#[test]
fn s5_5_undecodable_rdma_error_is_discarded_silently() {
    refuse(
        &words(&[0x77, 1, 1, 4, 42]),
        &v1(),
        HeaderError::UndecodableError,
        None,
    );
}

#[test]
fn rdma_error_from_another_version_is_still_decoded() {
    // knfsd's ERR_VERS carries rdma_vers = 7 and must reach a v1 requester.
    let r = receive(&hex(ERR_VERS_KNFSD), &v1()).unwrap();
    assert_eq!(
        r,
        Received::Error {
            prefix: PrefixView::new_checked(&hex(ERR_VERS_KNFSD)[..])
                .unwrap()
                .prefix(),
            body: ErrorBody::Vers {
                low: Version::ONE,
                high: Version::ONE
            }
        }
    );
}

#[test]
fn an_rdma_error_is_never_answered() {
    let err = HeaderError::Xdr(xdr::XdrError::InvalidDiscriminant(3));
    assert_eq!(error_reply(&hex(ERR_VERS_KNFSD), &err, 64, &v1()), None);
}

#[test]
fn v2_unknown_option_gets_err_inval_option() {
    let buf = words(&[0x99, 2, 8, 5, 0x1234, 0]);
    refuse(
        &buf,
        &Policy::default(),
        HeaderError::UnknownOption(OptType(0x1234)),
        Some(words(&[0x99, 2, 64, 4, 3])),
    );
}

#[test]
fn v2_supported_option_is_delivered() {
    let policy = Policy {
        options: vec![OptType(0x1234)],
        ..Policy::default()
    };
    let buf = words(&[0x99, 2, 8, 5, 0x1234, 4, 0xdead_beef, 0x99]);
    match receive(&buf, &policy).unwrap() {
        Received::Optional {
            opttype,
            optinfo,
            rest,
            ..
        } => {
            assert_eq!(opttype, OptType(0x1234));
            assert_eq!(&optinfo[..], &[0xde, 0xad, 0xbe, 0xef]);
            assert_eq!(&rest[..], &[0, 0, 0, 0x99]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn v2_message_to_v1_only_endpoint_gets_err_vers_1_1() {
    let buf = words(&[0x42, 2, 8, 0, 0, 0, 0, 0x42]);
    refuse(
        &buf,
        &v1(),
        HeaderError::UnsupportedVersion(Version::TWO),
        Some(words(&[0x42, 2, 64, 4, 1, 1, 1])),
    );
}

#[test]
fn v2_message_accepted_by_default_policy() {
    let buf = words(&[0x42, 2, 8, 0, 0, 0, 0, 0x42]);
    assert!(matches!(
        receive(&buf, &Policy::default()),
        Ok(Received::Msg { .. })
    ));
}

/// v2 §4.2: "When the rdma_proc field has any other value [than RDMA_MSG or
/// RDMA_OPTIONAL], an RPC Payload Stream MUST NOT follow the Transport Header Stream."
#[test]
fn v2_s4_2_bytes_after_an_rdma_nomsg_header_get_err_badheader() {
    // xid 0x31, v2, 8 credits, RDMA_NOMSG, no Read list, no Write list, a Reply chunk
    // of one segment (handle 7, 64 bytes at 0); then one stray word.
    let header = [0x31, 2, 8, 1, 0, 0, 1, 1, 7, 64, 0, 0];
    let mut with_tail = header.to_vec();
    with_tail.push(0xdead_beef);
    refuse(
        &words(&with_tail),
        &Policy::default(),
        HeaderError::PayloadAfterNoMsg { len: 4 },
        Some(words(&[0x31, 2, 64, 4, 2])),
    );
    assert!(matches!(
        receive(&words(&header), &Policy::default()),
        Ok(Received::NoMsg { .. })
    ));
    // Version One makes no rule of it (its Table 1 only says there is no Payload
    // stream): taken as it comes, as Linux's peers are.
    let mut v1_tail = with_tail.clone();
    v1_tail[1] = 1;
    assert!(matches!(
        receive(&words(&v1_tail), &v1()),
        Ok(Received::NoMsg { .. })
    ));
}

/// v2 §4.2 and §5.5: an RDMA_ERROR with bytes after it cannot be decoded as one, and
/// "A receiver MUST silently discard an RDMA_ERROR procedure that cannot be decoded."
#[test]
fn v2_s4_2_bytes_after_an_rdma_error_discard_it_silently() {
    let err = [0x32, 2, 8, 4, 2];
    assert!(matches!(
        receive(&words(&err), &Policy::default()),
        Ok(Received::Error { .. })
    ));
    let mut with_tail = err.to_vec();
    with_tail.push(0);
    refuse(
        &words(&with_tail),
        &Policy::default(),
        HeaderError::UndecodableError,
        None,
    );
}
