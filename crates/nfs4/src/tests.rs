//! Round trips of every operation, hand-checked byte layouts against RFC 5662, DDP
//! marking, reply-size bounds, and hostile input.

use proptest::prelude::*;
use xdr::{Bytes, Decode, Decoder, Encode, XdrError};

use crate::compound::*;
use crate::dir::*;
use crate::fh::*;
use crate::io::*;
use crate::session::*;
use crate::state::*;
use crate::ulb::*;
use crate::*;

fn round_trip<T: Encode + Decode + PartialEq + core::fmt::Debug>(v: &T) -> Bytes {
    let wire = v.to_xdr().to_bytes();
    assert_eq!(&T::from_xdr(wire.clone()).unwrap(), v);
    wire
}

fn fh(n: usize) -> NfsFh4 {
    NfsFh4(Bytes::from(vec![0xa5; n]))
}

const SID: SessionId4 = *b"0123456789abcdef";

fn impl_id() -> NfsImplId4 {
    NfsImplId4 {
        nii_domain: "kernel.org".into(),
        nii_name: "Linux 6.1.0 #1 SMP x86_64".into(),
        nii_date: NfsTime4 {
            seconds: -1,
            nseconds: 999_999_999,
        },
    }
}

fn channel(ird: Option<u32>) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1_049_620,
        ca_maxresponsesize: 1_049_480,
        ca_maxresponsesize_cached: 7584,
        ca_maxoperations: 8,
        ca_maxrequests: 64,
        ca_rdma_ird: ird,
    }
}

fn ops_bitmaps() -> StateProtectOps4 {
    StateProtectOps4 {
        spo_must_enforce: Bitmap4::from_bits(&[42, 43, 44, 53]),
        spo_must_allow: Bitmap4::from_bits(&[3]),
    }
}

/// One of every argument variant this crate codes.
fn every_argop() -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::Access(Access4Args {
            access: ACCESS4_READ | ACCESS4_LOOKUP,
        }),
        NfsArgop4::Commit(Commit4Args {
            offset: 1 << 40,
            count: 0,
        }),
        NfsArgop4::GetAttr(GetAttr4Args {
            attr_request: Bitmap4(vec![0x0010_011a, 0x00b0_a23a, 0]),
        }),
        NfsArgop4::GetFh,
        NfsArgop4::Lookup(Lookup4Args {
            objname: "export".into(),
        }),
        NfsArgop4::LookupP,
        NfsArgop4::PutFh(PutFh4Args { object: fh(128) }),
        NfsArgop4::PutPubFh,
        NfsArgop4::PutRootFh,
        NfsArgop4::Read(Read4Args {
            stateid: StateId4::READ_BYPASS,
            offset: 4096,
            count: 1 << 20,
        }),
        NfsArgop4::ReadLink,
        NfsArgop4::RestoreFh,
        NfsArgop4::SaveFh,
        NfsArgop4::SecInfo(SecInfo4Args { name: "dir".into() }),
        NfsArgop4::Write(Write4Args {
            stateid: StateId4 {
                seqid: 1,
                other: [3; 12],
            },
            offset: 7,
            stable: StableHow4::FILE_SYNC4,
            data: DdpData(Bytes::from_static(b"hello")),
        }),
        NfsArgop4::BindConnToSession(BindConnToSession4Args {
            bctsa_sessid: SID,
            bctsa_dir: ChannelDirFromClient4::CDFC4_BACK_OR_BOTH,
            bctsa_use_conn_in_rdma_mode: true,
        }),
        NfsArgop4::ExchangeId(ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: *b"verifier",
                co_ownerid: "Linux NFSv4.1 client".into(),
            },
            eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER | EXCHGID4_FLAG_BIND_PRINC_STATEID,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: Some(impl_id()),
        }),
        NfsArgop4::CreateSession(CreateSession4Args {
            csa_clientid: 0x5f00_0000_0000_0001,
            csa_sequence: 1,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: channel(None),
            csa_back_chan_attrs: channel(Some(4)),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![
                CallbackSecParms4::AuthNone,
                CallbackSecParms4::AuthSys(AuthSysParms {
                    stamp: 1,
                    machinename: Bytes::from_static(b"guest1"),
                    uid: 0,
                    gid: 0,
                    gids: vec![0, 1, 2],
                }),
            ],
        }),
        NfsArgop4::DestroySession(DestroySession4Args { dsa_sessionid: SID }),
        NfsArgop4::SecInfoNoName(SecInfoStyle4::SECINFO_STYLE4_CURRENT_FH),
        NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: SID,
            sa_sequenceid: 7,
            sa_slotid: 0,
            sa_highest_slotid: 63,
            sa_cachethis: true,
        }),
        NfsArgop4::DestroyClientId(DestroyClientId4Args { dca_clientid: 9 }),
        NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false }),
        NfsArgop4::Create(Create4Args {
            objtype: CreateType4::Link(DdpLinkText4(Bytes::from_static(b"../target"))),
            objname: "link".into(),
            createattrs: mode_attr(),
        }),
        NfsArgop4::Remove(Remove4Args {
            target: "gone".into(),
        }),
        NfsArgop4::Rename(Rename4Args {
            oldname: "a".into(),
            newname: "b".into(),
        }),
        NfsArgop4::Link(Link4Args {
            newname: "hard".into(),
        }),
        NfsArgop4::ReadDir(ReadDir4Args {
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 8192,
            maxcount: 32768,
            attr_request: Bitmap4::from_bits(&[1, 20]),
        }),
        NfsArgop4::SetAttr(SetAttr4Args {
            stateid: StateId4::ANONYMOUS,
            obj_attributes: mode_attr(),
        }),
        NfsArgop4::Verify(Verify4Args {
            obj_attributes: mode_attr(),
        }),
        NfsArgop4::NVerify(Verify4Args {
            obj_attributes: mode_attr(),
        }),
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_BOTH,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: owner(),
            openhow: OpenFlag4(Some(CreateHow4::Exclusive41(*b"exclverf", mode_attr()))),
            claim: OpenClaim4::Null("new".into()),
        }),
        NfsArgop4::Close(Close4Args {
            seqid: 0,
            open_stateid: STATEID,
        }),
        NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: STATEID,
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_NONE,
        }),
        NfsArgop4::Lock(Lock4Args {
            locktype: NfsLockType4::WRITE_LT,
            reclaim: false,
            offset: 0,
            length: u64::MAX,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: STATEID,
                lock_seqid: 0,
                lock_owner: owner(),
            }),
        }),
        NfsArgop4::LockT(LockT4Args {
            locktype: NfsLockType4::READ_LT,
            offset: 10,
            length: 20,
            owner: owner(),
        }),
        NfsArgop4::LockU(LockU4Args {
            locktype: NfsLockType4::WRITE_LT,
            seqid: 0,
            lock_stateid: STATEID,
            offset: 0,
            length: u64::MAX,
        }),
        NfsArgop4::FreeStateId(FreeStateId4Args {
            fsa_stateid: STATEID,
        }),
        NfsArgop4::TestStateId(TestStateId4Args(vec![STATEID, StateId4::INVALID])),
        NfsArgop4::DelegReturn(DelegReturn4Args {
            deleg_stateid: STATEID,
        }),
    ]
}

const STATEID: StateId4 = StateId4 {
    seqid: 1,
    other: [0x11; 12],
};

fn owner() -> StateOwner4 {
    StateOwner4 {
        clientid: 9,
        owner: "open id:\x00\x00\x00\x01".into(),
    }
}

/// A fattr4 with `mode` (attribute 33) = 0644.
fn mode_attr() -> Fattr4 {
    Fattr4 {
        attrmask: Bitmap4::from_bits(&[33]),
        attr_vals: AttrList4(Bytes::from_static(&[0, 0, 1, 0xa4])),
    }
}

fn cinfo() -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: true,
        before: 1,
        after: 2,
    }
}

fn ace() -> NfsAce4 {
    NfsAce4 {
        acetype: 0,
        flag: 0,
        access_mask: 0x1,
        who: "OWNER@".into(),
    }
}

fn denied() -> Lock4Denied {
    Lock4Denied {
        offset: 0,
        length: 1,
        locktype: NfsLockType4::WRITE_LT,
        owner: owner(),
    }
}

/// One successful result of every operation this crate codes, plus the error-only
/// shapes.
fn every_resop() -> Vec<NfsResop4> {
    let ok = NfsStat4::NFS4_OK;
    vec![
        NfsResop4::Access(Res4::Ok(Access4ResOk {
            supported: 0x3f,
            access: 0x3,
        })),
        NfsResop4::Commit(Res4::Ok(Commit4ResOk {
            writeverf: *b"wverf123",
        })),
        NfsResop4::GetAttr(Res4::Ok(GetAttr4ResOk {
            obj_attributes: Fattr4 {
                attrmask: Bitmap4::from_bits(&[1, 4]),
                attr_vals: AttrList4(Bytes::from_static(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x10, 0])),
            },
        })),
        NfsResop4::GetFh(Res4::Ok(GetFh4ResOk { object: fh(28) })),
        NfsResop4::Lookup(NfsStat4::NFS4ERR_NOENT),
        NfsResop4::LookupP(ok),
        NfsResop4::PutFh(NfsStat4::NFS4ERR_STALE),
        NfsResop4::PutPubFh(ok),
        NfsResop4::PutRootFh(ok),
        NfsResop4::Read(Res4::Ok(Read4ResOk {
            eof: true,
            data: DdpData(Bytes::from_static(b"abcde")),
        })),
        NfsResop4::ReadLink(Res4::Ok(ReadLink4ResOk {
            link: DdpLinkText4(Bytes::from_static(b"../target")),
        })),
        NfsResop4::RestoreFh(NfsStat4::NFS4ERR_RESTOREFH),
        NfsResop4::SaveFh(ok),
        NfsResop4::SecInfo(Res4::Ok(SecInfo4ResOk(vec![
            SecInfo4::RpcSecGss(RpcSecGssInfo {
                oid: OpaqueLimit(Bytes::from_static(&[
                    0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02,
                ])),
                qop: 0,
                service: RpcGssSvc::RPC_GSS_SVC_PRIVACY,
            }),
            SecInfo4::Flavor(AUTH_SYS),
        ]))),
        NfsResop4::Write(Res4::Ok(Write4ResOk {
            count: 5,
            committed: StableHow4::UNSTABLE4,
            writeverf: *b"wverf123",
        })),
        NfsResop4::BindConnToSession(Res4::Ok(BindConnToSession4ResOk {
            bctsr_sessid: SID,
            bctsr_dir: ChannelDirFromServer4::CDFS4_BOTH,
            bctsr_use_conn_in_rdma_mode: false,
        })),
        NfsResop4::ExchangeId(Res4::Ok(ExchangeId4ResOk {
            eir_clientid: 0x5f00_0000_0000_0001,
            eir_sequenceid: 1,
            eir_flags: EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R,
            eir_state_protect: StateProtect4R::None,
            eir_server_owner: ServerOwner4 {
                so_minor_id: 0,
                so_major_id: "rpcrdma-rs".into(),
            },
            eir_server_scope: "scope".into(),
            eir_server_impl_id: None,
        })),
        NfsResop4::CreateSession(Res4::Ok(CreateSession4ResOk {
            csr_sessionid: SID,
            csr_sequence: 1,
            csr_flags: 0,
            csr_fore_chan_attrs: channel(None),
            csr_back_chan_attrs: channel(None),
        })),
        NfsResop4::DestroySession(NfsStat4::NFS4ERR_BADSESSION),
        NfsResop4::SecInfoNoName(Res4::Ok(SecInfo4ResOk(vec![SecInfo4::Flavor(AUTH_SYS)]))),
        NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
            sr_sessionid: SID,
            sr_sequenceid: 7,
            sr_slotid: 0,
            sr_highest_slotid: 63,
            sr_target_highest_slotid: 63,
            sr_status_flags: SEQ4_STATUS_RESTART_RECLAIM_NEEDED,
        })),
        NfsResop4::Sequence(Res4::Err(NfsStat4::NFS4ERR_SEQ_MISORDERED)),
        NfsResop4::DestroyClientId(NfsStat4::NFS4ERR_CLIENTID_BUSY),
        NfsResop4::ReclaimComplete(NfsStat4::NFS4ERR_COMPLETE_ALREADY),
        NfsResop4::Create(Res4::Ok(Create4ResOk {
            cinfo: cinfo(),
            attrset: Bitmap4::from_bits(&[33]),
        })),
        NfsResop4::Remove(Res4::Ok(Remove4ResOk { cinfo: cinfo() })),
        NfsResop4::Rename(Res4::Ok(Rename4ResOk {
            source_cinfo: cinfo(),
            target_cinfo: cinfo(),
        })),
        NfsResop4::Link(Res4::Err(NfsStat4::NFS4ERR_XDEV)),
        NfsResop4::ReadDir(Res4::Ok(ReadDir4ResOk {
            cookieverf: *b"cookverf",
            reply: DirList4 {
                entries: vec![
                    Entry4 {
                        cookie: 3,
                        name: "a".into(),
                        attrs: mode_attr(),
                    },
                    Entry4 {
                        cookie: 4,
                        name: "b".into(),
                        attrs: Fattr4::default(),
                    },
                ]
                .into(),
                eof: true,
            },
        })),
        NfsResop4::SetAttr(SetAttr4Res {
            status: NfsStat4::NFS4ERR_PERM,
            attrsset: Bitmap4::default(),
        }),
        NfsResop4::Verify(NfsStat4::NFS4ERR_NOT_SAME),
        NfsResop4::NVerify(NfsStat4::NFS4ERR_SAME),
        NfsResop4::Open(Res4::Ok(Open4ResOk {
            stateid: STATEID,
            cinfo: cinfo(),
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset: Bitmap4::default(),
            delegation: OpenDelegation4::None,
        })),
        NfsResop4::Open(Res4::Ok(Open4ResOk {
            stateid: STATEID,
            cinfo: cinfo(),
            rflags: 0,
            attrset: Bitmap4::from_bits(&[33]),
            delegation: OpenDelegation4::Read(STATEID, false, ace()),
        })),
        NfsResop4::Open(Res4::Ok(Open4ResOk {
            stateid: STATEID,
            cinfo: cinfo(),
            rflags: 0,
            attrset: Bitmap4::default(),
            delegation: OpenDelegation4::Write(STATEID, true, SpaceLimit4::Blocks(8, 4096), ace()),
        })),
        NfsResop4::Open(Res4::Ok(Open4ResOk {
            stateid: STATEID,
            cinfo: cinfo(),
            rflags: 0,
            attrset: Bitmap4::default(),
            delegation: OpenDelegation4::NoneExt(1, Some(true)),
        })),
        NfsResop4::Close(Res4::Ok(StateId4::INVALID)),
        NfsResop4::OpenDowngrade(Res4::Ok(STATEID)),
        NfsResop4::Lock(LockRes::Ok(STATEID)),
        NfsResop4::Lock(LockRes::Denied(denied())),
        NfsResop4::LockT(LockRes::Ok(Void)),
        NfsResop4::LockT(LockRes::Denied(denied())),
        NfsResop4::LockT(LockRes::Err(NfsStat4::NFS4ERR_GRACE)),
        NfsResop4::LockU(Res4::Ok(STATEID)),
        NfsResop4::FreeStateId(NfsStat4::NFS4ERR_LOCKS_HELD),
        NfsResop4::TestStateId(Res4::Ok(TestStateId4ResOk(vec![
            NfsStat4::NFS4_OK,
            NfsStat4::NFS4ERR_BAD_STATEID,
        ]))),
        NfsResop4::DelegReturn(NfsStat4::NFS4_OK),
        NfsResop4::Illegal(NfsStat4::NFS4ERR_OP_ILLEGAL),
        NfsResop4::Unknown {
            opnum: NfsOpnum4::OP_OPENATTR,
            status: NfsStat4::NFS4ERR_NOTSUPP,
        },
    ]
}

/// The samples cover every operation the decoder codes: an operation whose number
/// alone stops with NOTSUPP is not coded; any other must have a sample.
#[test]
fn every_coded_operation_has_a_sample() {
    let sampled: Vec<NfsOpnum4> = every_argop().iter().map(NfsArgop4::opnum).collect();
    let mut coded = 0;
    for n in 3..=58 {
        let mut b = header(1);
        words(&mut b, &[n]);
        let c = decode(b);
        if c.stopped.map(|s| s.reason) == Some(StopReason::NotSupported) {
            continue;
        }
        coded += 1;
        assert!(
            sampled.contains(&NfsOpnum4(n)),
            "{:?} has no sample",
            NfsOpnum4(n)
        );
    }
    assert_eq!(coded, 40);
    let results: Vec<NfsOpnum4> = every_resop().iter().map(NfsResop4::opnum).collect();
    for op in sampled {
        assert!(results.contains(&op), "{op:?} has no result sample");
    }
}

#[test]
fn every_argop_round_trips_alone_and_in_a_compound() {
    for op in every_argop() {
        round_trip(&op_in_compound(op.clone()));
        let wire = op.to_xdr().to_bytes();
        // The opnum comes first.
        assert_eq!(&wire[..4], &op.opnum().0.to_be_bytes());
    }
    let all = Compound4Args {
        tag: "all".into(),
        minorversion: 1,
        argarray: every_argop(),
    };
    round_trip(&all);
}

fn op_in_compound(op: NfsArgop4) -> Compound4Args {
    Compound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        argarray: vec![op],
    }
}

#[test]
fn every_resop_round_trips_and_compound_status_is_the_last_ones() {
    for r in every_resop() {
        round_trip(&r);
    }
    let res = Compound4Res::new("t".into(), every_resop());
    assert_eq!(res.status, NfsStat4::NFS4ERR_NOTSUPP);
    round_trip(&res);
    assert_eq!(
        Compound4Res::new(Utf8Str::default(), vec![]).status,
        NfsStat4::NFS4_OK
    );
}

#[test]
fn error_results_of_every_coded_op_round_trip() {
    // Every result union's default arm is void: opnum then status.
    for op in every_argop() {
        let err = Compound4Res::new(
            Utf8Str::default(),
            vec![NfsResop4::Unknown {
                opnum: op.opnum(),
                status: NfsStat4::NFS4ERR_DELAY,
            }],
        );
        let wire = err.to_xdr().to_bytes();
        let back = Compound4Res::from_xdr(wire).unwrap();
        assert_eq!(back.resarray.len(), 1);
        assert_eq!(back.resarray[0].opnum(), op.opnum());
        assert_eq!(back.resarray[0].status(), NfsStat4::NFS4ERR_DELAY);
    }
}

#[test]
fn state_protection_and_callback_security_arms_round_trip() {
    for sp in [
        StateProtect4A::None,
        StateProtect4A::MachCred(ops_bitmaps()),
        StateProtect4A::Ssv(SsvSpParms4 {
            ssp_ops: ops_bitmaps(),
            ssp_hash_algs: vec![Bytes::from_static(&[6, 9, 0x60, 0x86])],
            ssp_encr_algs: vec![],
            ssp_window: 16,
            ssp_num_gss_handles: 2,
        }),
    ] {
        round_trip(&sp);
    }
    for sp in [
        StateProtect4R::None,
        StateProtect4R::MachCred(ops_bitmaps()),
        StateProtect4R::Ssv(SsvProtInfo4 {
            spi_ops: ops_bitmaps(),
            spi_hash_alg: 0,
            spi_encr_alg: 1,
            spi_ssv_len: 32,
            spi_window: 16,
            spi_handles: vec![Bytes::from_static(b"h1"), Bytes::from_static(b"h2")],
        }),
    ] {
        round_trip(&sp);
    }
    round_trip(&CallbackSecParms4::RpcSecGss(GssCbHandles4 {
        gcbp_service: RpcGssSvc::RPC_GSS_SVC_INTEGRITY,
        gcbp_handle_from_server: "s".into(),
        gcbp_handle_from_client: "c".into(),
    }));
    // state_protect_how4 3 and flavor 7 are undefined: bad discriminants.
    assert_eq!(
        StateProtect4A::from_xdr(Bytes::from_static(&[0, 0, 0, 3])),
        Err(XdrError::InvalidDiscriminant(3))
    );
    assert_eq!(
        CallbackSecParms4::from_xdr(Bytes::from_static(&[0, 0, 0, 7])),
        Err(XdrError::InvalidDiscriminant(7))
    );
}

/// RFC 5662: `SEQUENCE4args` inside a COMPOUND, byte by byte.
#[test]
fn sequence_compound_layout_matches_rfc5662() {
    let c = Compound4Args {
        tag: "ab".into(),
        minorversion: 1,
        argarray: vec![
            NfsArgop4::Sequence(Sequence4Args {
                sa_sessionid: SID,
                sa_sequenceid: 0x0102_0304,
                sa_slotid: 5,
                sa_highest_slotid: 6,
                sa_cachethis: true,
            }),
            NfsArgop4::PutRootFh,
            NfsArgop4::GetFh,
        ],
    };
    let mut want = Vec::new();
    want.extend_from_slice(&[0, 0, 0, 2, b'a', b'b', 0, 0]); // tag<>, padded
    want.extend_from_slice(&[0, 0, 0, 1]); // minorversion
    want.extend_from_slice(&[0, 0, 0, 3]); // argarray count
    want.extend_from_slice(&[0, 0, 0, 53]); // OP_SEQUENCE
    want.extend_from_slice(b"0123456789abcdef"); // sessionid4: fixed, no length
    want.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 1]);
    want.extend_from_slice(&[0, 0, 0, 24]); // OP_PUTROOTFH, no arguments
    want.extend_from_slice(&[0, 0, 0, 10]); // OP_GETFH
    assert_eq!(&round_trip(&c)[..], &want[..]);
}

/// RFC 5662: a reply with SEQUENCE's error, then nothing (§16.2.3: processing stops).
#[test]
fn error_reply_layout_matches_rfc5662() {
    let r = Compound4Res::new(
        Utf8Str::default(),
        vec![NfsResop4::Sequence(Res4::Err(NfsStat4::NFS4ERR_BADSESSION))],
    );
    let want: &[u8] = &[
        0, 0, 0x27, 0x44, // status 10052
        0, 0, 0, 0, // tag<>, empty
        0, 0, 0, 1, // resarray count
        0, 0, 0, 53, // OP_SEQUENCE
        0, 0, 0x27, 0x44, // its status, void arm
    ];
    assert_eq!(&round_trip(&r)[..], want);
    // ILLEGAL4res: opnum 10044, status 10044.
    let ill = Stopped {
        index: 0,
        opnum: NfsOpnum4(99),
        reason: StopReason::Illegal,
    }
    .result();
    assert_eq!(
        &ill.to_xdr().to_bytes()[..],
        &[0, 0, 0x27, 0x3c, 0, 0, 0x27, 0x3c]
    );
}

/// RFC 5662 `channel_attrs4`: `ca_rdma_ird<1>` is an array, count word first.
#[test]
fn channel_attrs_layout_and_ird_bound() {
    let wire = round_trip(&channel(Some(16)));
    assert_eq!(wire.len(), 6 * 4 + 4 + 4);
    assert_eq!(&wire[24..], &[0, 0, 0, 1, 0, 0, 0, 16]);
    assert_eq!(round_trip(&channel(None)).len(), 6 * 4 + 4);
    let mut two = wire[..24].to_vec();
    two.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]);
    assert_eq!(
        ChannelAttrs4::from_xdr(Bytes::from(two)),
        Err(XdrError::LengthOverBound { len: 2, max: 1 })
    );
}

#[test]
fn stateid_and_special_stateids_are_16_bytes() {
    for s in [
        StateId4::ANONYMOUS,
        StateId4::READ_BYPASS,
        StateId4::CURRENT,
        StateId4::INVALID,
    ] {
        assert_eq!(round_trip(&s).len(), 16);
    }
}

#[test]
fn file_handle_over_128_bytes_is_refused() {
    round_trip(&fh(128));
    let wire = Bytes::from([&[0u8, 0, 0, 129][..], &[0; 132]].concat());
    assert_eq!(
        NfsFh4::from_xdr(wire),
        Err(XdrError::LengthOverBound { len: 129, max: 128 })
    );
}

#[test]
fn unknown_enum_values_survive_decoding() {
    let s = NfsStat4::from_xdr(Bytes::from_static(&[0, 0, 0x27, 0xff])).unwrap();
    assert_eq!(s, NfsStat4(10239));
    assert_eq!(s.name(), None);
    assert_eq!(format!("{:?}", NfsStat4::NFS4ERR_DELAY), "NFS4ERR_DELAY");
    assert_eq!(
        NfsOpnum4::OP_RECLAIM_COMPLETE.name(),
        Some("OP_RECLAIM_COMPLETE")
    );
    assert_eq!(format!("{:?}", NfsOpnum4(76)), "NfsOpnum4(76)");
}

/// RFC 5662 lists the operations 3..=58 for minor version 1 (RFC 7863 and RFC 8276
/// continue to 75) without holes; every one has a name.
#[test]
fn every_operation_number_has_a_name() {
    for n in 3..=75 {
        assert!(NfsOpnum4(n).name().is_some(), "{n}");
    }
    assert!(NfsOpnum4(2).name().is_none() && NfsOpnum4(76).name().is_none());
    assert!(NfsOpnum4::OP_SEQUENCE.defined_in_minor_version(1));
    assert!(!NfsOpnum4::OP_SEQUENCE.defined_in_minor_version(0));
    assert!(!NfsOpnum4::OP_SEEK.defined_in_minor_version(1));
    assert!(NfsOpnum4::OP_SEEK.defined_in_minor_version(2));
    assert!(!NfsOpnum4::OP_ILLEGAL.defined_in_minor_version(2));
}

#[test]
fn bitmap_bits() {
    let b = Bitmap4::from_bits(&[0, 33, 75]);
    assert_eq!(b.0, vec![1, 2, 1 << 11]);
    assert!(b.is_set(33) && !b.is_set(34) && !b.is_set(1000));
    round_trip(&b);
    // 33 words: one over the decoding bound.
    let mut wire = vec![0, 0, 0, 33];
    wire.extend(std::iter::repeat(0).take(33 * 4));
    assert!(Bitmap4::from_xdr(Bytes::from(wire)).is_err());
}

/// RFC 8267 §5.1: READ4resok data, WRITE4args data and READLINK4resok link are
/// DDP-eligible and referenced, not copied; nothing else is marked.
#[test]
fn ddp_items_are_marked_without_copy() {
    let data = Bytes::from(vec![7u8; 4097]);
    let res = NfsResop4::Read(Res4::Ok(Read4ResOk {
        eof: false,
        data: DdpData(data.clone()),
    }));
    let s = res.to_xdr();
    assert_eq!(s.ddp.len(), 1);
    assert_eq!(s.ddp[0].data.as_ptr(), data.as_ptr());
    // opnum, status, eof, the length word: then the data.
    assert_eq!(s.xdr_position(0), Some(16));
    round_trip(&res);

    // every_argop's CREATE makes a symbolic link: its linkdata is the DDP item.
    for op in every_argop() {
        let n = op.to_xdr().ddp.len();
        assert_eq!(n, usize::from(argop_has_ddp_item(op.opnum())), "{op:?}");
    }
    let dir = NfsArgop4::Create(Create4Args {
        objtype: CreateType4::Other(NfsFtype4::NF4DIR),
        objname: "d".into(),
        createattrs: Fattr4::default(),
    });
    assert!(dir.to_xdr().ddp.is_empty());
    round_trip(&op_in_compound(dir));
    for r in every_resop() {
        let n = r.to_xdr().ddp.len();
        let want = resop_has_ddp_item(r.opnum()) && r.status().is_ok();
        assert_eq!(n, usize::from(want), "{r:?}");
    }
    // Several WRITEs in one COMPOUND: one DDP item each, in order (RFC 8267 §5.4.1).
    let w = every_argop()
        .into_iter()
        .find(|o| o.opnum() == NfsOpnum4::OP_WRITE)
        .unwrap();
    let c = Compound4Args {
        tag: Utf8Str::default(),
        minorversion: 1,
        argarray: vec![w.clone(), NfsArgop4::GetFh, w],
    };
    assert_eq!(c.to_xdr().ddp.len(), 2);
}

/// Each bound of `max_resop_size` equals the size of the largest result of the
/// operation we can build.
#[test]
fn max_resop_sizes_are_exact_where_bounded() {
    let args = every_argop();
    let find = |op: NfsOpnum4| args.iter().find(|a| a.opnum() == op).unwrap();
    let largest = [
        NfsResop4::Access(Res4::Ok(Access4ResOk {
            supported: 1,
            access: 1,
        })),
        NfsResop4::GetFh(Res4::Ok(GetFh4ResOk { object: fh(128) })),
        NfsResop4::Read(Res4::Ok(Read4ResOk {
            eof: true,
            data: DdpData(Bytes::from(vec![0; 1 << 20])),
        })),
        NfsResop4::ReadLink(Res4::Ok(ReadLink4ResOk {
            link: DdpLinkText4(Bytes::from(vec![b'x'; MAX_PATH])),
        })),
        NfsResop4::CreateSession(Res4::Ok(CreateSession4ResOk {
            csr_sessionid: SID,
            csr_sequence: 1,
            csr_flags: 0,
            csr_fore_chan_attrs: channel(Some(1)),
            csr_back_chan_attrs: channel(Some(1)),
        })),
        NfsResop4::Sequence(Res4::Ok(Sequence4ResOk {
            sr_sessionid: SID,
            sr_sequenceid: 1,
            sr_slotid: 1,
            sr_highest_slotid: 1,
            sr_target_highest_slotid: 1,
            sr_status_flags: 0,
        })),
        NfsResop4::Write(Res4::Ok(Write4ResOk {
            count: 1,
            committed: StableHow4::FILE_SYNC4,
            writeverf: [0; 8],
        })),
        NfsResop4::Commit(Res4::Ok(Commit4ResOk { writeverf: [0; 8] })),
        NfsResop4::BindConnToSession(Res4::Ok(BindConnToSession4ResOk {
            bctsr_sessid: SID,
            bctsr_dir: ChannelDirFromServer4::CDFS4_FORE,
            bctsr_use_conn_in_rdma_mode: false,
        })),
        NfsResop4::PutRootFh(NfsStat4::NFS4_OK),
        NfsResop4::Remove(Res4::Ok(Remove4ResOk { cinfo: cinfo() })),
        NfsResop4::Rename(Res4::Ok(Rename4ResOk {
            source_cinfo: cinfo(),
            target_cinfo: cinfo(),
        })),
        NfsResop4::Create(Res4::Ok(Create4ResOk {
            cinfo: cinfo(),
            attrset: mode_attr().attrmask,
        })),
        NfsResop4::SetAttr(SetAttr4Res {
            status: NfsStat4::NFS4_OK,
            attrsset: mode_attr().attrmask,
        }),
        NfsResop4::Close(Res4::Ok(STATEID)),
        NfsResop4::Lock(LockRes::Denied(Lock4Denied {
            owner: StateOwner4 {
                clientid: 1,
                owner: OpaqueLimit(Bytes::from(vec![0; 1024])),
            },
            ..denied()
        })),
        NfsResop4::TestStateId(Res4::Ok(TestStateId4ResOk(vec![NfsStat4::NFS4_OK; 2]))),
    ];
    for r in largest {
        let op = find(r.opnum());
        assert_eq!(max_resop_size(op), Some(r.to_xdr().xdr_len()), "{op:?}");
    }
    let read = find(NfsOpnum4::OP_READ);
    assert_eq!(max_inline_resop_size(read), Some(16));
    assert_eq!(max_resop_size(find(NfsOpnum4::OP_GETATTR)), None);
    // SEQUENCE, PUTROOTFH, GETFH with tag "ab": 4 + 8 + 4 + 44 + 8 + 140.
    let ops = [
        find(NfsOpnum4::OP_SEQUENCE).clone(),
        NfsArgop4::PutRootFh,
        NfsArgop4::GetFh,
    ];
    assert_eq!(
        max_compound_reply_size(2, &ops),
        Some(4 + 8 + 4 + 44 + 8 + 140)
    );
    let with_getattr = [ops[0].clone(), find(NfsOpnum4::OP_GETATTR).clone()];
    assert_eq!(max_compound_reply_size(0, &with_getattr), None);
}

fn header(opcount: u32) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 0, 0, 0, 0, 1];
    v.extend_from_slice(&opcount.to_be_bytes());
    v
}

fn words(v: &mut Vec<u8>, ws: &[u32]) {
    for w in ws {
        v.extend_from_slice(&w.to_be_bytes());
    }
}

fn decode(bytes: Vec<u8>) -> CompoundArgs {
    decode_compound_args(&mut Decoder::new(Bytes::from(bytes))).unwrap()
}

/// RFC 8881 §15.2: an operation number outside minor version 1 (here 59, SEEK's
/// neighbour ALLOCATE, a 4.2 operation) ends decoding; the operations before it are
/// kept, and its result is ILLEGAL4res.
#[test]
fn s15_2_undefined_op_in_the_middle_keeps_the_ops_before_it() {
    let mut b = header(4);
    words(&mut b, &[24, 10, 59, 10]);
    let c = decode(b);
    assert_eq!(c.ops, vec![NfsArgop4::PutRootFh, NfsArgop4::GetFh]);
    let stop = c.stopped.unwrap();
    assert_eq!((stop.index, stop.opnum), (2, NfsOpnum4::OP_ALLOCATE));
    assert_eq!(stop.reason, StopReason::Illegal);
    assert_eq!(
        stop.result(),
        NfsResop4::Illegal(NfsStat4::NFS4ERR_OP_ILLEGAL)
    );
    // The same number under minor version 2 is legal but not coded: NOTSUPP.
    let mut b = header(2);
    b[7] = 2;
    words(&mut b, &[24, 59]);
    let stop = decode(b).stopped.unwrap();
    assert_eq!(stop.reason, StopReason::NotSupported);
    assert_eq!(
        stop.result(),
        NfsResop4::Unknown {
            opnum: NfsOpnum4::OP_ALLOCATE,
            status: NfsStat4::NFS4ERR_NOTSUPP
        }
    );
    // OP_ILLEGAL itself is illegal; so is 0.
    for n in [0, 1, 2, 10044, u32::MAX] {
        let mut b = header(1);
        words(&mut b, &[n]);
        assert_eq!(
            decode(b).stopped.unwrap().reason,
            StopReason::Illegal,
            "{n}"
        );
    }
}

/// RFC 8881 §15.2: NFSv4.0-only operations are in range in 4.1 but "MUST NOT be
/// implemented": NOTSUPP, not OP_ILLEGAL.
#[test]
fn s15_2_nfsv40_only_ops_are_notsupp() {
    for op in [20, 30, 35, 36, 39] {
        let mut b = header(1);
        words(&mut b, &[op]);
        assert_eq!(
            decode(b).stopped.unwrap().reason,
            StopReason::NotSupported,
            "{op}"
        );
    }
}

/// RFC 8881 §15.1.1.1: arguments that do not decode get NFS4ERR_BADXDR, at their
/// operation.
#[test]
fn s15_1_1_1_bad_arguments_stop_with_badxdr() {
    // PUTFH with a 129-byte handle.
    let mut b = header(3);
    words(&mut b, &[24, 22, 129]);
    let c = decode(b);
    assert_eq!(c.ops, vec![NfsArgop4::PutRootFh]);
    let stop = c.stopped.unwrap();
    assert_eq!(stop.index, 1);
    assert_eq!(
        stop.reason,
        StopReason::BadXdr(XdrError::LengthOverBound { len: 129, max: 128 })
    );
    assert_eq!(
        stop.result(),
        NfsResop4::Unknown {
            opnum: NfsOpnum4::OP_PUTFH,
            status: NfsStat4::NFS4ERR_BADXDR
        }
    );
    // A boolean of 2 in SEQUENCE's sa_cachethis.
    let mut b = header(1);
    words(&mut b, &[53]);
    b.extend_from_slice(&SID);
    words(&mut b, &[1, 0, 0, 2]);
    assert_eq!(
        decode(b).stopped.unwrap().reason,
        StopReason::BadXdr(XdrError::InvalidBool(2))
    );
}

/// A COMPOUND that announces more operations than it holds stops where the bytes
/// end, keeping what decoded.
#[test]
fn truncated_compound_keeps_the_ops_before_the_end() {
    let full = Compound4Args {
        tag: "t".into(),
        minorversion: 1,
        argarray: every_argop(),
    }
    .to_xdr()
    .to_bytes();
    for cut in 0..full.len() {
        let mut dec = Decoder::new(full.slice(..cut));
        match decode_compound_args(&mut dec) {
            // The header (tag, minorversion, count) is 5 words.
            Err(_) => assert!(cut < 20, "{cut}"),
            Ok(c) => {
                let stop = c.stopped.expect("a cut compound stops");
                assert_eq!(stop.index, c.ops.len());
                assert_eq!(c.ops[..], every_argop()[..c.ops.len()]);
                assert!(matches!(stop.reason, StopReason::BadXdr(_)), "{cut}");
                assert_eq!(stop.reason.status(), NfsStat4::NFS4ERR_BADXDR);
            }
        }
    }
}

/// DoS bound: a huge announced count reserves nothing and decodes at most
/// MAX_OPS_DECODE operations, then stops with NFS4ERR_TOO_MANY_OPS.
#[test]
fn huge_op_counts_are_bounded() {
    let mut b = header(u32::MAX);
    words(&mut b, &[24]);
    let c = decode(b);
    assert_eq!(c.opcount, u32::MAX);
    assert_eq!(c.ops, vec![NfsArgop4::PutRootFh]);
    assert!(c.ops.capacity() <= MAX_OPS_DECODE as usize);
    assert!(matches!(c.stopped.unwrap().reason, StopReason::BadXdr(_)));

    let mut b = header(MAX_OPS_DECODE + 1);
    for _ in 0..=MAX_OPS_DECODE {
        words(&mut b, &[10]);
    }
    let c = decode(b);
    assert_eq!(c.ops.len(), MAX_OPS_DECODE as usize);
    let stop = c.stopped.unwrap();
    assert_eq!(stop.index, MAX_OPS_DECODE as usize);
    assert_eq!(stop.reason.status(), NfsStat4::NFS4ERR_TOO_MANY_OPS);
    assert_eq!(
        stop.result(),
        NfsResop4::Unknown {
            opnum: NfsOpnum4::OP_GETFH,
            status: NfsStat4::NFS4ERR_TOO_MANY_OPS
        }
    );
    // The strict decoder refuses it.
    let mut b = header(MAX_OPS_DECODE + 1);
    for _ in 0..=MAX_OPS_DECODE {
        words(&mut b, &[10]);
    }
    assert!(Compound4Args::from_xdr(Bytes::from(b)).is_err());
}

/// rfc5666bis §8.1.1 / RFC 8267 §5.4.1: a COMPOUND may carry several DDP-eligible
/// arguments; the decoder says where each one's data is, so a server can check that
/// every Read chunk lands on one.
#[test]
fn ddp_argument_positions_match_the_data_and_check_read_chunks() {
    let write = |data: &'static [u8]| {
        NfsArgop4::Write(Write4Args {
            stateid: StateId4::ANONYMOUS,
            offset: 0,
            stable: StableHow4::UNSTABLE4,
            data: DdpData(Bytes::from_static(data)),
        })
    };
    let link = NfsArgop4::Create(Create4Args {
        objtype: CreateType4::Link(DdpLinkText4(Bytes::from_static(b"tgt"))),
        objname: "l".into(),
        createattrs: Fattr4::default(),
    });
    let wire = Compound4Args {
        tag: "x".into(),
        minorversion: 1,
        argarray: vec![write(b"first"), NfsArgop4::GetFh, link, write(b"second!!")],
    }
    .to_xdr()
    .to_bytes();
    // Decode after 8 bytes of something else, as a server decodes after the RPC header.
    let mut buf = vec![0xee; 8];
    buf.extend_from_slice(&wire);
    let buf = Bytes::from(buf);
    let mut dec = Decoder::new(buf.clone());
    dec.opaque_fixed(8).unwrap();
    let c = decode_compound_args(&mut dec).unwrap();
    let data: Vec<&[u8]> = c
        .ddp_arguments
        .iter()
        .map(|&(p, l)| &buf[p..p + l])
        .collect();
    assert_eq!(data, vec![&b"first"[..], b"tgt", b"second!!"]);
    let ranges: Vec<(u32, u32)> = c
        .ddp_arguments
        .iter()
        .map(|&(p, l)| (p as u32, l as u32))
        .collect();
    assert!(c.read_chunks_are_ddp_eligible(&ranges));
    assert!(c.read_chunks_are_ddp_eligible(&ranges[1..2]));
    assert!(c.read_chunks_are_ddp_eligible(&[]));
    // A chunk over the tag, or one byte off: a violation.
    assert!(!c.read_chunks_are_ddp_eligible(&[(12, 1)]));
    assert!(!c.read_chunks_are_ddp_eligible(&[(ranges[0].0 + 4, ranges[0].1)]));
    assert!(!c.read_chunks_are_ddp_eligible(&[(ranges[0].0, ranges[0].1 + 1)]));
}

#[test]
fn compound_header_errors_and_oversized_tags() {
    assert!(decode_compound_args(&mut Decoder::new(Bytes::new())).is_err());
    let mut b = vec![0, 0, 4, 1]; // tag of 1025 bytes
    b.extend(std::iter::repeat(b'x').take(1028));
    words(&mut b, &[1, 0]);
    assert_eq!(
        decode_compound_args(&mut Decoder::new(Bytes::from(b))),
        Err(XdrError::LengthOverBound {
            len: 1025,
            max: TAG_DECODE_MAX
        })
    );
    // An empty COMPOUND decodes (RFC 8881 §16.2.3: the reply is NFS4_OK, no results).
    let c = decode(header(0));
    assert!(c.ops.is_empty() && c.stopped.is_none());
}

#[test]
fn reply_with_an_uncoded_successful_op_is_refused_not_misread() {
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    words(&mut b, &[19, 0]); // OP_OPENATTR, NFS4_OK: a result we cannot size
    assert_eq!(
        Compound4Res::from_xdr(Bytes::from(b)),
        Err(XdrError::InvalidDiscriminant(19))
    );
}

/// Decodes `bytes` as every argument and result type; must never panic.
fn decode_everything(bytes: &[u8]) {
    fn try_it<T: Decode>(b: &[u8]) {
        let _ = T::from_xdr(Bytes::copy_from_slice(b));
    }
    let _ = decode_compound_args(&mut Decoder::new(Bytes::copy_from_slice(bytes)));
    try_it::<Compound4Args>(bytes);
    try_it::<Compound4Res>(bytes);
    try_it::<NfsArgop4>(bytes);
    try_it::<NfsResop4>(bytes);
    try_it::<ExchangeId4Args>(bytes);
    try_it::<ExchangeId4Res>(bytes);
    try_it::<CreateSession4Args>(bytes);
    try_it::<CreateSession4Res>(bytes);
    try_it::<Fattr4>(bytes);
    try_it::<SecInfo4Res>(bytes);
}

impl Decode for NfsArgop4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        let mut b = header(1);
        b.extend_from_slice(&dec.rest());
        let mut inner = Decoder::new(Bytes::from(b));
        let c = decode_compound_args(&mut inner)?;
        dec.opaque_fixed(inner.position() - 12)?;
        c.ops
            .into_iter()
            .next()
            .ok_or(XdrError::InvalidDiscriminant(0))
    }
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

proptest! {
    /// No decoder panics on arbitrary input (the wire can send anything).
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        decode_everything(&bytes);
    }

    /// Nor on mostly-valid input: small words (plausible lengths, discriminants and
    /// operation numbers).
    #[test]
    fn small_words_never_panic(ws in proptest::collection::vec(0u32..60, 0..64)) {
        let bytes: Vec<u8> = ws.iter().flat_map(|w| w.to_be_bytes()).collect();
        decode_everything(&bytes);
    }

    #[test]
    fn sequence_args_round_trip(
        sid in any::<[u8; 16]>(), seq in any::<u32>(), slot in any::<u32>(),
        high in any::<u32>(), cache in any::<bool>(),
    ) {
        round_trip(&NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: sid, sa_sequenceid: seq, sa_slotid: slot,
            sa_highest_slotid: high, sa_cachethis: cache,
        }));
    }

    #[test]
    fn exchange_id_round_trips(
        verf in any::<[u8; 8]>(), owner in arb_bytes(1025), flags in any::<u32>(),
        name in arb_bytes(64), secs in any::<i64>(), with_id in any::<bool>(),
    ) {
        let id = NfsImplId4 {
            nii_domain: Utf8Str(name.clone()),
            nii_name: Utf8Str(name),
            nii_date: NfsTime4 { seconds: secs, nseconds: 1 },
        };
        round_trip(&ExchangeId4Args {
            eia_clientowner: ClientOwner4 { co_verifier: verf, co_ownerid: OpaqueLimit(owner) },
            eia_flags: flags,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: with_id.then_some(id),
        });
    }

    #[test]
    fn channel_attrs_and_stateids_round_trip(
        w in proptest::collection::vec(any::<u32>(), 6), ird in proptest::option::of(any::<u32>()),
        seqid in any::<u32>(), other in any::<[u8; 12]>(),
    ) {
        round_trip(&ChannelAttrs4 {
            ca_headerpadsize: w[0], ca_maxrequestsize: w[1], ca_maxresponsesize: w[2],
            ca_maxresponsesize_cached: w[3], ca_maxoperations: w[4], ca_maxrequests: w[5],
            ca_rdma_ird: ird,
        });
        round_trip(&StateId4 { seqid, other });
    }

    #[test]
    fn getattr_results_round_trip(
        mask in proptest::collection::vec(any::<u32>(), 0..32), vals in arb_bytes(512),
    ) {
        round_trip(&NfsResop4::GetAttr(Res4::Ok(GetAttr4ResOk {
            obj_attributes: Fattr4 { attrmask: Bitmap4(mask), attr_vals: AttrList4(vals) },
        })));
    }

    /// Any prefix of a valid op list followed by anything decodes the prefix intact.
    #[test]
    fn garbage_after_valid_ops_keeps_them(n in 0usize..23, junk in arb_bytes(64)) {
        let ops: Vec<NfsArgop4> = every_argop().into_iter().take(n).collect();
        let mut b = Compound4Args { tag: Utf8Str::default(), minorversion: 1, argarray: ops.clone() }
            .to_xdr().to_bytes().to_vec();
        b[11] = (n + 1) as u8;
        b.extend_from_slice(&junk);
        let c = decode(b);
        prop_assert_eq!(&c.ops[..n], &ops[..]);
    }
}

/// `ulb::call_data_item`: the first WRITE's data, found from the COMPOUND's first
/// bytes alone, up to and including its length word; nothing when a CREATE (whose
/// link text is DDP-eligible too) comes first or the bytes end before the length.
#[test]
fn the_first_writes_data_is_found_from_the_compounds_first_bytes() {
    let write = |data: &'static [u8]| {
        NfsArgop4::Write(Write4Args {
            stateid: StateId4::ANONYMOUS,
            offset: 4096,
            stable: StableHow4::UNSTABLE4,
            data: DdpData(Bytes::from_static(data)),
        })
    };
    let compound = |ops: Vec<NfsArgop4>| {
        Compound4Args {
            tag: "t".into(),
            minorversion: 1,
            argarray: ops,
        }
        .to_xdr()
        .to_bytes()
    };
    let sequence = NfsArgop4::Sequence(Sequence4Args {
        sa_sessionid: SID,
        sa_sequenceid: 1,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    });
    let putfh = NfsArgop4::PutFh(PutFh4Args { object: fh(28) });
    let wire = compound(vec![
        sequence.clone(),
        putfh.clone(),
        write(b"hello"),
        NfsArgop4::GetAttr(GetAttr4Args {
            attr_request: Bitmap4(vec![0x18]),
        }),
        write(b"later"),
    ]);
    let item = call_data_item(&wire).expect("the WRITE's data");
    assert_eq!(&wire[item.offset..item.offset + item.len], b"hello");
    // The first bytes up to the length word suffice; one fewer does not.
    assert_eq!(call_data_item(&wire[..item.offset]), Some(item));
    assert_eq!(call_data_item(&wire[..item.offset - 1]), None);
    let link = NfsArgop4::Create(Create4Args {
        objtype: CreateType4::Link(DdpLinkText4(Bytes::from_static(b"tgt"))),
        objname: "l".into(),
        createattrs: Fattr4::default(),
    });
    assert_eq!(
        call_data_item(&compound(vec![sequence.clone(), link, write(b"x")])),
        None
    );
    assert_eq!(call_data_item(&compound(vec![sequence, putfh])), None);
}
