use super::*;
use crate::auth::{AuthFlavor, AuthStat, AuthSysParms};
use crate::message::{AcceptStat, AcceptedStatus, RejectedReply};
use bytes::Bytes;

const PROG: u32 = 0x2000_0001;

struct Echo;

impl Service for Echo {
    async fn call(&self, mut req: Request) -> ServiceResult {
        match req.proc_ {
            0 => Ok(XdrStream::default()),
            1 => {
                let data = req.args.opaque(u32::MAX)?;
                req.args.finish()?;
                let mut enc = Encoder::new();
                enc.u32(req.vers);
                enc.ddp_opaque(data);
                Ok(enc.finish())
            }
            2 => match req.cred {
                Credentials::Sys(p) => {
                    let mut enc = Encoder::new();
                    enc.u32(p.uid);
                    Ok(enc.finish())
                }
                Credentials::None => Err(ServiceError::Auth(AuthStat::AUTH_TOOWEAK)),
            },
            3 => Err(ServiceError::SystemErr),
            4 => panic!("handler bug"),
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

fn dispatcher() -> Dispatcher {
    let mut d = Dispatcher::new();
    d.register(PROG, [1, 3], Arc::new(Echo)).unwrap();
    d
}

fn call(header: CallHeader, args: &[u8]) -> Bytes {
    let mut enc = Encoder::new();
    header.encode(&mut enc);
    enc.raw(args);
    enc.finish().to_bytes()
}

fn run(d: &Dispatcher, msg: Bytes) -> Option<(ReplyHeader, Bytes)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let reply = rt.block_on(d.dispatch(msg))?;
    let mut dec = Decoder::new(reply.to_bytes());
    let h = ReplyHeader::decode(&mut dec).unwrap();
    Some((h, dec.rest()))
}

fn status(d: &Dispatcher, h: CallHeader, args: &[u8]) -> ReplyBody {
    run(d, call(h, args)).unwrap().0.body
}

#[test]
fn success_reply_carries_results_and_keeps_ddp_items() {
    let d = dispatcher();
    let h = CallHeader::new(Xid(5), PROG, 3, 1, OpaqueAuth::none());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let reply = rt
        .block_on(d.dispatch(call(h, &[0, 0, 0, 3, b'a', b'b', b'c', 0])))
        .unwrap();
    assert_eq!(reply.ddp.len(), 1);
    assert_eq!(&reply.ddp[0].data[..], b"abc");
    assert_eq!(reply.xdr_position(0), Some(24 + 4 + 4));
    let mut dec = Decoder::new(reply.to_bytes());
    let rh = ReplyHeader::decode(&mut dec).unwrap();
    assert_eq!(rh.xid, Xid(5));
    assert_eq!(rh.body, ReplyBody::accepted(AcceptStat::SUCCESS));
    assert_eq!(dec.u32().unwrap(), 3);
    assert_eq!(&dec.opaque(10).unwrap()[..], b"abc");
}

#[test]
fn unknown_program_is_prog_unavail() {
    let h = CallHeader::new(Xid(1), PROG + 1, 1, 0, OpaqueAuth::none());
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::accepted(AcceptStat::PROG_UNAVAIL)
    );
}

#[test]
fn unknown_version_is_prog_mismatch_with_low_and_high() {
    // rpcinfo probes version 0 to learn the range.
    for vers in [0, 2, 4, u32::MAX] {
        let h = CallHeader::new(Xid(1), PROG, vers, 0, OpaqueAuth::none());
        assert_eq!(
            status(&dispatcher(), h, &[]),
            ReplyBody::prog_mismatch(1, 3)
        );
    }
}

#[test]
fn unknown_procedure_is_proc_unavail() {
    let h = CallHeader::new(Xid(1), PROG, 1, 99, OpaqueAuth::none());
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::accepted(AcceptStat::PROC_UNAVAIL)
    );
}

#[test]
fn undecodable_arguments_are_garbage_args() {
    let h = CallHeader::new(Xid(1), PROG, 1, 1, OpaqueAuth::none());
    // Truncated opaque, then trailing bytes, then non-zero padding.
    for args in [
        &[0, 0, 0, 8, 1][..],
        &[0, 0, 0, 0, 1, 2, 3, 4][..],
        &[0, 0, 0, 1, 1, 1, 0, 0][..],
    ] {
        assert_eq!(
            status(&dispatcher(), h.clone(), args),
            ReplyBody::accepted(AcceptStat::GARBAGE_ARGS)
        );
    }
}

#[test]
fn handler_system_err_is_system_err() {
    let h = CallHeader::new(Xid(1), PROG, 1, 3, OpaqueAuth::none());
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::accepted(AcceptStat::SYSTEM_ERR)
    );
}

#[test]
fn rpc_version_other_than_2_is_rpc_mismatch() {
    let mut h = CallHeader::new(Xid(1), PROG, 1, 0, OpaqueAuth::none());
    h.rpcvers = 3;
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::Denied(RejectedReply::RpcMismatch(MismatchInfo { low: 2, high: 2 }))
    );
}

#[test]
fn auth_sys_credentials_reach_the_service() {
    let cred = AuthSysParms {
        uid: 4242,
        ..Default::default()
    }
    .to_opaque_auth();
    let h = CallHeader::new(Xid(1), PROG, 1, 2, cred);
    let (rh, rest) = run(&dispatcher(), call(h, &[])).unwrap();
    assert_eq!(rh.body, ReplyBody::accepted(AcceptStat::SUCCESS));
    assert_eq!(&rest[..], &4242u32.to_be_bytes());
}

#[test]
fn service_auth_error_is_rejected_reply() {
    let h = CallHeader::new(Xid(1), PROG, 1, 2, OpaqueAuth::none());
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::Denied(RejectedReply::AuthError(AuthStat::AUTH_TOOWEAK))
    );
}

#[test]
fn unknown_auth_flavor_is_auth_rejectedcred() {
    let cred = OpaqueAuth {
        flavor: AuthFlavor(77),
        body: Bytes::new(),
    };
    let h = CallHeader::new(Xid(1), PROG, 1, 0, cred);
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::Denied(RejectedReply::AuthError(AuthStat::AUTH_REJECTEDCRED))
    );
}

#[test]
fn garbled_auth_sys_is_auth_badcred() {
    let cred = OpaqueAuth {
        flavor: AuthFlavor::AUTH_SYS,
        body: Bytes::from_static(&[0, 0, 0, 1]),
    };
    let h = CallHeader::new(Xid(1), PROG, 1, 0, cred);
    assert_eq!(
        status(&dispatcher(), h, &[]),
        ReplyBody::Denied(RejectedReply::AuthError(AuthStat::AUTH_BADCRED))
    );
}

#[test]
fn non_call_message_gets_no_reply() {
    let reply = ReplyHeader {
        xid: Xid(1),
        body: ReplyBody::accepted(AcceptStat::SUCCESS),
    };
    assert!(run(&dispatcher(), reply.to_xdr().to_bytes()).is_none());
    assert!(run(&dispatcher(), Bytes::from_static(&[0, 0])).is_none());
}

#[test]
fn duplicate_registration_is_refused_whole() {
    let mut d = dispatcher();
    assert_eq!(
        d.register(PROG, [4, 3], Arc::new(Echo)).unwrap_err(),
        AlreadyRegistered {
            prog: PROG,
            vers: 3
        }
    );
    assert_eq!(d.registrations(), vec![(PROG, 1), (PROG, 3)]);
}

#[test]
fn accepted_status_stat_matches_variant() {
    assert_eq!(AcceptedStatus::Success.stat(), AcceptStat::SUCCESS);
}

#[test]
fn a_handler_panic_is_system_err_for_that_call_only() {
    let d = dispatcher();
    let h = CallHeader::new(Xid(9), PROG, 1, 4, OpaqueAuth::none());
    let (rh, rest) = run(&d, call(h, &[])).expect("a reply");
    assert_eq!(rh.xid, Xid(9));
    assert_eq!(rh.body, ReplyBody::accepted(AcceptStat::SYSTEM_ERR));
    assert!(rest.is_empty());
    let h = CallHeader::new(Xid(10), PROG, 1, 0, OpaqueAuth::none());
    assert_eq!(status(&d, h, &[]), ReplyBody::accepted(AcceptStat::SUCCESS));
}

/// `with_metrics` counts routed calls by procedure, for versions registered before
/// and after it, errors apart; calls never routed (an unknown version) are not
/// counted; two dispatchers sharing one `CallMetrics` count into the same rows.
#[test]
fn metrics_count_routed_calls_by_procedure() {
    let metrics = Arc::new(CallMetrics::new());
    let mut d = Dispatcher::new();
    d.register(PROG, [1], Arc::new(Echo)).unwrap();
    d.with_metrics(metrics.clone());
    d.register(PROG + 1, [1], Arc::new(Echo)).unwrap();
    let mut other = dispatcher();
    other.with_metrics(metrics.clone());
    let calls = [
        (&d, PROG, 1, 0),
        (&d, PROG, 1, 0),
        (&other, PROG, 1, 0),
        (&d, PROG, 1, 99),
        (&d, PROG, 1, 3),
        (&d, PROG + 1, 1, 0),
        (&d, PROG, 2, 0),
    ];
    for (d, prog, vers, proc_) in calls {
        run(
            d,
            call(
                CallHeader::new(Xid(1), prog, vers, proc_, OpaqueAuth::none()),
                &[],
            ),
        );
    }
    let rows: Vec<_> = metrics
        .snapshot()
        .iter()
        .map(|r| (r.prog, r.vers, r.proc_, r.stats.calls, r.stats.errors))
        .collect();
    assert_eq!(
        rows,
        [
            (PROG, 1, Some(0), 3, 0),
            (PROG, 1, Some(3), 1, 1),
            (PROG, 1, None, 1, 1),
            (PROG + 1, 1, Some(0), 1, 0),
        ]
    );
}
