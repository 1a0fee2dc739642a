//! NFSv4.1 over TCP against the real server (`Bound`, as `nfsd` runs it), with
//! COMPOUNDs built by the `nfs4` crate's encoder on a socket of the test's own: the
//! first exchanges of a Linux `vers=4.1` mount (EXCHANGE_ID, CREATE_SESSION,
//! SEQUENCE + PUTROOTFH + GETATTR, then LOOKUPs down the pseudo file system to the
//! export), the reply cache (a retransmitted SEQUENCE gets the first reply byte for
//! byte), the slot rules, the minor version check and the first-operation rules of
//! RFC 8881 §16.2.3 and §2.6.3.1.1.1, and the exports' client rules on the pseudo
//! file system and on handles.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::nfs4::*;
use common::TempDir;
use nfs4::compound::{Compound4Res, NfsArgop4, NfsResop4};
use nfs4::fh::*;
use nfs4::session::*;
use nfs4::*;
use nfsd::server::Bound;
use oncrpc::{AcceptedStatus, ReplyBody, ReplyHeader};
use xdr::Encode;
use xdr::{Bytes, Decode, Decoder, Encoder};

#[tokio::test]
async fn linux_mount_sequence_reaches_the_export_through_the_pseudo_root() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "linux-mount").await;

    // SEQUENCE + PUTROOTFH + GETATTR: the pseudo root, a directory.
    let res = s.run(vec![NfsArgop4::PutRootFh, getattr()]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK);
    let root = attrs(&res.resarray[2]);
    assert_eq!((root.ftype, root.mode, root.fsid), (2, 0o555, (0, 0)));

    // SEQUENCE + PUTROOTFH + LOOKUP... + GETFH + GETATTR: the export.
    let mut ops = vec![NfsArgop4::PutRootFh];
    ops.extend(walk(&export));
    ops.extend([NfsArgop4::GetFh, getattr()]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let n = res.resarray.len();
    let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[n - 2] else {
        panic!("GETFH")
    };
    let top = attrs(&res.resarray[n - 1]);
    let meta = std::fs::metadata(&export).unwrap();
    assert_eq!(top.ftype, 2);
    assert_eq!(top.fileid, meta.ino());
    assert_eq!(top.mode, meta.mode() & 0o7777);
    assert_eq!(top.owner, meta.uid().to_string().into_bytes());
    assert_ne!(top.fsid, (0, 0), "the export is a file system of its own");

    // PUTFH of that handle, LOOKUP of a file, its attributes; LOOKUPP back; SAVEFH
    // and RESTOREFH.
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args {
                object: fh.object.clone(),
            }),
            NfsArgop4::SaveFh,
            lookup(b"f"),
            getattr(),
            lookup(b"d"),
            NfsArgop4::LookupP,
            NfsArgop4::GetFh,
            lookup(b"l"),
            NfsArgop4::ReadLink,
            NfsArgop4::RestoreFh,
            NfsArgop4::GetFh,
        ])
        .await;
    assert_eq!(
        res.status,
        NfsStat4::NFS4ERR_NOTDIR,
        "LOOKUP in a file: {res:?}"
    );
    assert_eq!(res.resarray.len(), 6);
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args {
                object: fh.object.clone(),
            }),
            NfsArgop4::SaveFh,
            lookup(b"f"),
            getattr(),
            NfsArgop4::RestoreFh,
            lookup(b"d"),
            NfsArgop4::LookupP,
            NfsArgop4::GetFh,
            lookup(b"l"),
            NfsArgop4::ReadLink,
            NfsArgop4::RestoreFh,
            NfsArgop4::GetFh,
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let file = attrs(&res.resarray[4]);
    assert_eq!((file.ftype, file.size), (1, 5));
    assert_eq!(
        file.fileid,
        std::fs::metadata(export.join("f")).unwrap().ino()
    );
    assert_eq!(res.resarray[8], NfsResop4::GetFh(Res4::Ok(fh.clone())));
    let NfsResop4::ReadLink(Res4::Ok(link)) = &res.resarray[10] else {
        panic!("READLINK")
    };
    assert_eq!(&link.link.0[..], b"f");
    assert_eq!(res.resarray[12], NfsResop4::GetFh(Res4::Ok(fh.clone())));
    // Directory operations on a file and on a symbolic link (§18.13.3, §18.14.3).
    for (name, op, want) in [
        (b"f", NfsArgop4::LookupP, NfsStat4::NFS4ERR_NOTDIR),
        (b"l", lookup(b"x"), NfsStat4::NFS4ERR_SYMLINK),
        (b"l", NfsArgop4::LookupP, NfsStat4::NFS4ERR_SYMLINK),
    ] {
        let res = s
            .run(vec![
                NfsArgop4::PutFh(PutFh4Args {
                    object: fh.object.clone(),
                }),
                lookup(name),
                op,
            ])
            .await;
        assert_eq!(res.status, want);
    }
    // READLINK of a file.
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args {
                object: fh.object.clone(),
            }),
            lookup(b"f"),
            NfsArgop4::ReadLink,
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_WRONG_TYPE);

    // ACCESS as root on the export: everything asked for a directory.
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args {
                object: fh.object.clone(),
            }),
            NfsArgop4::Access(Access4Args { access: 0x3f }),
            NfsArgop4::SecInfoNoName(SecInfoStyle4::SECINFO_STYLE4_CURRENT_FH),
            // SECINFO_NO_NAME consumed the current filehandle (§18.45.3).
            NfsArgop4::GetFh,
        ])
        .await;
    assert_eq!(
        res.resarray[2],
        NfsResop4::Access(Res4::Ok(Access4ResOk {
            supported: 0x1f,
            access: 0x1f
        }))
    );
    assert_eq!(
        res.resarray[3],
        NfsResop4::SecInfoNoName(Res4::Ok(SecInfo4ResOk(vec![SecInfo4::Flavor(AUTH_SYS)])))
    );
    assert_eq!(statuses(&res)[4], NfsStat4::NFS4ERR_NOFILEHANDLE);

    // LOOKUPP above the export's root leads back into the pseudo file system, and
    // from the root to nowhere.
    let mut ops = vec![NfsArgop4::PutFh(PutFh4Args {
        object: fh.object.clone(),
    })];
    ops.extend(std::iter::repeat(NfsArgop4::LookupP).take(export.iter().count() - 1));
    ops.extend([getattr(), NfsArgop4::LookupP]);
    let res = s.run(ops).await;
    let n = res.resarray.len();
    assert_eq!(attrs(&res.resarray[n - 2]), root);
    assert_eq!(res.status, NfsStat4::NFS4ERR_NOENT);

    // Teardown as the client does it.
    let sid = s.sid;
    let res = s
        .run(vec![NfsArgop4::DestroySession(DestroySession4Args {
            dsa_sessionid: sid,
        })])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK);
    let (_, res) = s
        .conn
        .compound(
            1,
            vec![NfsArgop4::DestroyClientId(DestroyClientId4Args {
                dca_clientid: s.clientid,
            })],
        )
        .await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4_OK]);
    serving.stop().await;
}

#[tokio::test]
async fn retransmitted_sequence_gets_the_cached_reply_and_misordered_is_refused() {
    let (_dir, _export, addr, serving) = server().await;
    let mut s = Session::to_reclaim(addr, "replay").await;
    let ops = vec![s.sequence(1, true), NfsArgop4::PutRootFh, NfsArgop4::GetFh];
    let (xid, call) = s.conn.call(1, ops);
    let first = s.conn.roundtrip(&call).await;
    let res = Compound4Res::decode(&mut results(&first, xid)).unwrap();
    assert_eq!(res.status, NfsStat4::NFS4_OK);
    // The same call again (same xid, slot and sequence id): the same bytes.
    let again = s.conn.roundtrip(&call).await;
    assert_eq!(again, first);
    // A new xid but the same slot and sequence id: the cached COMPOUND4res.
    let (xid2, call2) = s.conn.call(
        1,
        vec![s.sequence(1, true), NfsArgop4::PutRootFh, NfsArgop4::GetFh],
    );
    let third = s.conn.roundtrip(&call2).await;
    assert_eq!(results(&third, xid2).rest(), results(&first, xid).rest());

    // A sequence id two ahead: misordered, nothing else runs.
    let (_, res) = s
        .conn
        .compound(1, vec![s.sequence(3, false), NfsArgop4::PutRootFh])
        .await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_SEQ_MISORDERED]);
    // Not asked to be cached: its retry is RETRY_UNCACHED_REP.
    let (_, res) = s
        .conn
        .compound(1, vec![s.sequence(2, false), NfsArgop4::PutRootFh])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK);
    let (_, res) = s
        .conn
        .compound(1, vec![s.sequence(2, false), NfsArgop4::PutRootFh])
        .await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_RETRY_UNCACHED_REP]);
    // A slot past the table.
    let mut bad = s.sequence(3, false);
    if let NfsArgop4::Sequence(a) = &mut bad {
        a.sa_slotid = 1000;
    }
    let (_, res) = s.conn.compound(1, vec![bad]).await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_BADSLOT]);
    // An unknown session.
    let mut bad = s.sequence(3, false);
    if let NfsArgop4::Sequence(a) = &mut bad {
        a.sa_sessionid = [0xee; 16];
    }
    let (_, res) = s.conn.compound(1, vec![bad]).await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_BADSESSION]);
    serving.stop().await;
}

#[tokio::test]
async fn minor_versions_other_than_one_are_mismatched_and_the_tag_echoed() {
    let (_dir, _export, addr, serving) = server().await;
    let mut conn = Conn::open(addr).await;
    for minor in [0, 2, 7] {
        let (_, res) = conn.compound(minor, vec![NfsArgop4::PutRootFh]).await;
        assert_eq!(res.status, NfsStat4::NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(res.resarray.is_empty());
        assert_eq!(res.tag, Utf8Str::from("nfs4-test"));
    }
    // NULL answers nothing.
    conn.xid += 1;
    let xid = conn.xid;
    let reply = conn.roundtrip(&rpc_call(xid, NFSPROC4_NULL, &Void)).await;
    assert!(results(&reply, xid).rest().is_empty());
    // An empty COMPOUND is NFS4_OK with no results.
    let (_, res) = conn.compound(1, vec![]).await;
    assert_eq!((res.status, res.resarray.len()), (NfsStat4::NFS4_OK, 0));
    serving.stop().await;
}

#[tokio::test]
async fn first_operation_rules_of_rfc8881_2_6_3_1_1_1_and_16_2_3() {
    let (_dir, _export, addr, serving) = server().await;
    let mut s = Session::new(addr, "rules").await;
    // Not SEQUENCE and not a session operation: OP_NOT_IN_SESSION.
    let (_, res) = s
        .conn
        .compound(1, vec![NfsArgop4::PutRootFh, NfsArgop4::GetFh])
        .await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_OP_NOT_IN_SESSION]);
    // A session operation without SEQUENCE must be alone: NOT_ONLY_OP.
    let destroy = NfsArgop4::DestroyClientId(DestroyClientId4Args {
        dca_clientid: s.clientid,
    });
    let (_, res) = s
        .conn
        .compound(1, vec![destroy.clone(), NfsArgop4::PutRootFh])
        .await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_NOT_ONLY_OP]);
    // Alone, it runs: the client still has a session.
    let (_, res) = s.conn.compound(1, vec![destroy]).await;
    assert_eq!(statuses(&res), [NfsStat4::NFS4ERR_CLIENTID_BUSY]);
    // SEQUENCE not first: SEQUENCE_POS.
    let second = s.sequence(5, false);
    let res = s.run(vec![NfsArgop4::PutRootFh, second]).await;
    assert_eq!(statuses(&res)[2], NfsStat4::NFS4ERR_SEQUENCE_POS);
    // No current filehandle: NOFILEHANDLE, and the COMPOUND stops there.
    let res = s.run(vec![NfsArgop4::GetFh, NfsArgop4::PutRootFh]).await;
    assert_eq!(
        statuses(&res),
        [NfsStat4::NFS4_OK, NfsStat4::NFS4ERR_NOFILEHANDLE]
    );
    assert_eq!(res.status, NfsStat4::NFS4ERR_NOFILEHANDLE);
    // RESTOREFH without SAVEFH.
    let res = s
        .run(vec![NfsArgop4::PutRootFh, NfsArgop4::RestoreFh])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_RESTOREFH);
    // Names: missing, ".", too long, on a file.
    for (name, want) in [
        (&b"missing"[..], NfsStat4::NFS4ERR_NOENT),
        (b".", NfsStat4::NFS4ERR_BADNAME),
        (b"", NfsStat4::NFS4ERR_INVAL),
    ] {
        let res = s
            .run(vec![NfsArgop4::PutRootFh, lookup(name), NfsArgop4::GetFh])
            .await;
        assert_eq!(statuses(&res)[1..], [NfsStat4::NFS4_OK, want], "{name:?}");
    }
    // A handle not of ours, a pseudo handle of no directory.
    for (bytes, want) in [
        (&b"garbage"[..], NfsStat4::NFS4ERR_BADHANDLE),
        (b"rN4Pnothing!", NfsStat4::NFS4ERR_STALE),
    ] {
        let res = s
            .run(vec![NfsArgop4::PutFh(PutFh4Args {
                object: NfsFh4::from(bytes),
            })])
            .await;
        assert_eq!(res.status, want);
    }
    // An operation not served yet.
    let res = s
        .run(vec![
            NfsArgop4::PutRootFh,
            NfsArgop4::DelegReturn(nfs4::state::DelegReturn4Args {
                deleg_stateid: StateId4::ANONYMOUS,
            }),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_NOTSUPP);
    serving.stop().await;
}

#[tokio::test]
async fn exports_client_rules_apply_to_the_pseudo_file_system_and_to_handles() {
    use nfsd::exports::{Client, ClientRule, Clients};
    let base = TempDir::new("nfs4-rules");
    let open = base.path().join("open");
    let closed = base.path().join("closed");
    std::fs::create_dir(&open).unwrap();
    std::fs::create_dir(&closed).unwrap();
    let mut config = common::loopback_config(&open);
    let options = config.exports[0].clients.0[0].options;
    // `closed` is for 10.0.0.0/8 only; the test calls from 127.0.0.1.
    config.exports.push(nfsd::ExportLine {
        path: closed.clone(),
        clients: Clients(vec![ClientRule {
            name: "10.0.0.0/8".into(),
            client: Client::Network([10, 0, 0, 0].into(), 8),
            options,
        }]),
        line: 0,
    });
    let mut bound = Bound::new(&config).await.unwrap();
    bound.serve_nfs4();
    let (base_path, closed_fh) = {
        let table = bound.server().table();
        let ex = &table.exports[1].export;
        let root = ex.root().unwrap();
        (
            table.exports[0].export.path.parent().unwrap().to_path_buf(),
            NfsFh4(ex.handle(&root).0),
        )
    };
    let addr = bound.nfs_addr().unwrap();
    let serving = common::serve(bound);
    let mut s = Session::new(addr, "rules").await;

    // The parent of both exports is a pseudo directory; only `open` is in it.
    let mut ops = vec![NfsArgop4::PutRootFh];
    ops.extend(walk(&base_path));
    ops.extend([
        NfsArgop4::SaveFh,
        lookup(b"open"),
        NfsArgop4::RestoreFh,
        lookup(b"closed"),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_NOENT, "{res:?}");
    let n = res.resarray.len();
    assert_eq!(res.resarray[n - 3].status(), NfsStat4::NFS4_OK, "open");
    // Its handle, obtained elsewhere, is refused as NFSv3 refuses it.
    let res = s
        .run(vec![
            NfsArgop4::PutFh(PutFh4Args { object: closed_fh }),
            getattr(),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_ACCESS, "{res:?}");
    serving.stop().await;
}

/// The same server over RPC-over-RDMA (userspace iWARP): a session made over RDMA
/// is the one TCP sees (one state for both listeners), and the NFSv4 binding
/// (RFC 8267 §5) carries the COMPOUNDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_over_rdma_serves_over_tcp_too() {
    let server = rdma_server().await;
    let mut s = Session::new_on(
        Conn::open_rdma(server.rdma, rpcrdma_transport::RdmaConfig::default()),
        "over-rdma",
    )
    .await;
    let res = s.run(vec![NfsArgop4::PutRootFh, getattr()]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(attrs(&res.resarray[2]).ftype, 2);

    // Slot 0 of the same session, next sequence id, over TCP.
    let mut conn = Conn::open(server.tcp).await;
    let (_, res) = conn
        .compound(
            1,
            vec![
                s.sequence(s.seq, false),
                NfsArgop4::PutRootFh,
                NfsArgop4::GetFh,
            ],
        )
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    drop(s);
    server.serving.stop().await;
}

/// Without [`Bound::serve_nfs4`] (the binary with `--no-nfs4`), version 4 is not
/// served: PROG_MISMATCH 3-3, so that a Linux mount without `vers=` settles on NFSv3.
#[tokio::test]
async fn without_serve_nfs4_version_4_is_prog_mismatch() {
    let dir = TempDir::new("nfs4-off");
    let bound = Bound::new(&common::loopback_config(dir.path()))
        .await
        .unwrap();
    assert!(bound
        .describe()
        .iter()
        .any(|l| l.starts_with("NFS v4: off")));
    let addr = bound.nfs_addr().unwrap();
    let serving = common::serve(bound);
    let mut conn = Conn::open(addr).await;
    let reply = conn.roundtrip(&rpc_call(9, NFSPROC4_NULL, &Void)).await;
    let mut dec = Decoder::new(reply);
    let h = ReplyHeader::decode(&mut dec).unwrap();
    let ReplyBody::Accepted { status, .. } = h.body else {
        panic!("{:?}", h.body)
    };
    assert!(
        matches!(
            status,
            AcceptedStatus::ProgMismatch(oncrpc::MismatchInfo { low: 3, high: 3 })
        ),
        "{status:?}"
    );
    serving.stop().await;
}

fn readdir(cookie: u64, cookieverf: Verifier4, maxcount: u32) -> NfsArgop4 {
    NfsArgop4::ReadDir(nfs4::dir::ReadDir4Args {
        cookie,
        cookieverf,
        dircount: maxcount,
        maxcount,
        attr_request: Bitmap4::from_bits(&[TYPE, FILEID]),
    })
}

/// Name, type, fileid and cookie of a listed entry.
type Listed = (String, u32, u64, u64);

/// The entries, the verifier and eof of a READDIR result.
fn listed(r: &NfsResop4) -> (Vec<Listed>, Verifier4, bool) {
    let NfsResop4::ReadDir(Res4::Ok(ok)) = r else {
        panic!("READDIR: {r:?}")
    };
    let entries = ok
        .reply
        .entries
        .iter()
        .map(|e| {
            let mut d = Decoder::new(e.attrs.attr_vals.0.clone());
            (
                String::from_utf8(e.name.0.to_vec()).unwrap(),
                d.u32().unwrap(),
                d.u64().unwrap(),
                e.cookie,
            )
        })
        .collect();
    (entries, ok.cookieverf, ok.reply.eof)
}

#[tokio::test]
async fn readdir_lists_pseudo_and_export_directories_with_cookies_rfc8881_18_23() {
    let (dir, export, addr, serving) = server().await;
    for i in 0..40 {
        std::fs::write(dir.path().join(format!("file-{i:02}")), b"x").unwrap();
    }
    let mut s = Session::new(addr, "readdir").await;
    // The pseudo root lists the first component of the export's path, a directory.
    let first = export.iter().nth(1).unwrap().to_str().unwrap().to_string();
    let res = s
        .run(vec![NfsArgop4::PutRootFh, readdir(0, [0; 8], 4096)])
        .await;
    let (entries, _, eof) = listed(&res.resarray[2]);
    assert!(eof);
    assert_eq!(
        entries.iter().map(|e| (&e.0[..], e.1)).collect::<Vec<_>>(),
        [(&first[..], 2)]
    );

    // The export, a page of about 300 bytes at a time: every entry once, no dots.
    let mut to_export = vec![NfsArgop4::PutRootFh];
    to_export.extend(walk(&export));
    let mut names = Vec::new();
    let (mut cookie, mut verf) = (0, [0; 8]);
    let mut pages = 0;
    loop {
        let mut ops = to_export.clone();
        ops.push(readdir(cookie, verf, 300));
        let res = s.run(ops).await;
        let (entries, v, eof) = listed(res.resarray.last().unwrap());
        assert!(!entries.is_empty() || eof);
        // As knfsd's: a Linux client drops most of a first page whose verifier is not
        // the zeros it started with.
        assert_eq!(v, [0; 8], "an export's listings carry zeros");
        for (name, ftype, fileid, c) in &entries {
            let meta = std::fs::symlink_metadata(export.join(name)).unwrap();
            assert_eq!(*fileid, meta.ino(), "{name}");
            let want = if meta.is_dir() {
                2
            } else if meta.file_type().is_symlink() {
                5
            } else {
                1
            };
            assert_eq!(*ftype, want, "{name}");
            assert!(*c > 2, "cookies 0, 1 and 2 are reserved");
            names.push(name.clone());
        }
        pages += 1;
        if eof {
            break;
        }
        cookie = entries.last().unwrap().3;
        verf = v;
    }
    assert!(pages > 2, "{pages} pages");
    names.sort();
    let mut want: Vec<String> = std::fs::read_dir(&export)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    want.sort();
    assert_eq!(names, want);

    // Pages are filled up to `maxcount` (the whole READDIR4resok, §18.23.2), not
    // stopped short of it: each page but the last has no room left for the first
    // entry of the next.
    let mut pages: Vec<Vec<nfs4::dir::Entry4>> = Vec::new();
    let (mut cookie, mut verf) = (0, [0; 8]);
    loop {
        let mut ops = to_export.clone();
        ops.push(readdir(cookie, verf, 1024));
        let res = s.run(ops).await;
        let NfsResop4::ReadDir(Res4::Ok(ok)) = res.resarray.last().unwrap() else {
            panic!("READDIR: {res:?}")
        };
        pages.push(ok.reply.entries.to_vec());
        if ok.reply.eof {
            break;
        }
        cookie = ok.reply.entries.last().unwrap().cookie;
        verf = ok.cookieverf;
    }
    assert!(pages.len() >= 2, "{} pages", pages.len());
    let wire = |e: &nfs4::dir::Entry4| 4 + e.to_xdr().xdr_len();
    for pair in pages.windows(2) {
        let used = 8 + 4 + 4 + pair[0].iter().map(wire).sum::<usize>();
        assert!(used <= 1024, "{used}");
        let next = wire(&pair[1][0]);
        assert!(used + next > 1024, "{used} + {next}: room left on the page");
    }

    // Reserved cookies, a wrong verifier, no room for one entry, not a directory.
    for (cookie, verf, maxcount, want) in [
        (1, [0; 8], 4096, NfsStat4::NFS4ERR_BAD_COOKIE),
        (2, [0; 8], 4096, NfsStat4::NFS4ERR_BAD_COOKIE),
        (cookie, *b"notours!", 4096, NfsStat4::NFS4ERR_NOT_SAME),
        (0, [0; 8], 20, NfsStat4::NFS4ERR_TOOSMALL),
    ] {
        let mut ops = to_export.clone();
        ops.push(readdir(cookie, verf, maxcount));
        let res = s.run(ops).await;
        assert_eq!(res.status, want, "cookie {cookie}");
    }
    let mut ops = to_export.clone();
    ops.extend([lookup(b"f"), readdir(0, [0; 8], 4096)]);
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4ERR_NOTDIR);
    serving.stop().await;
}

fn remove(name: &str) -> NfsArgop4 {
    NfsArgop4::Remove(nfs4::dir::Remove4Args {
        target: name.into(),
    })
}

/// Issue 27's exactly-once check: a client that replays a SEQUENCE slot (same slot
/// and sequence id) of a non-idempotent COMPOUND gets the cached reply, not a second
/// execution (RFC 8881 §2.10.6.1.3): REMOVE and RENAME run once.
#[tokio::test]
async fn replayed_remove_and_rename_run_once_and_get_the_cached_reply() {
    let (dir, export, addr, serving) = server().await;
    std::fs::write(dir.path().join("victim"), b"v").unwrap();
    std::fs::write(dir.path().join("old"), b"o").unwrap();
    let mut s = Session::to_reclaim(addr, "exactly-once").await;
    let mut to_export = vec![NfsArgop4::PutRootFh];
    to_export.extend(walk(&export));

    let mut ops = vec![s.sequence(1, true)];
    ops.extend(to_export.clone());
    ops.push(remove("victim"));
    let (xid, call) = s.conn.call(1, ops);
    let first = s.conn.roundtrip(&call).await;
    let res = Compound4Res::decode(&mut results(&first, xid)).unwrap();
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let NfsResop4::Remove(Res4::Ok(ok)) = res.resarray.last().unwrap() else {
        panic!("REMOVE")
    };
    assert!(ok.cinfo.after >= ok.cinfo.before && !ok.cinfo.atomic);
    assert!(!export.join("victim").exists());
    // Recreated behind the server's back: a second execution would remove it.
    std::fs::write(export.join("victim"), b"again").unwrap();
    assert_eq!(s.conn.roundtrip(&call).await, first, "the cached reply");
    assert!(export.join("victim").exists(), "REMOVE ran once");

    // RENAME: SAVEFH of the directory, then the same directory as the target.
    let mut ops = vec![s.sequence(2, true)];
    ops.extend(to_export.clone());
    ops.extend([
        NfsArgop4::SaveFh,
        NfsArgop4::Rename(nfs4::dir::Rename4Args {
            oldname: "old".into(),
            newname: "new".into(),
        }),
    ]);
    let (xid, call) = s.conn.call(1, ops);
    let first = s.conn.roundtrip(&call).await;
    let res = Compound4Res::decode(&mut results(&first, xid)).unwrap();
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(std::fs::read(export.join("new")).unwrap(), b"o");
    std::fs::write(export.join("old"), b"second").unwrap();
    assert_eq!(s.conn.roundtrip(&call).await, first, "the cached reply");
    assert_eq!(
        std::fs::read(export.join("new")).unwrap(),
        b"o",
        "RENAME ran once"
    );
    assert!(export.join("old").exists());
    s.seq = 3;

    // REMOVE of a directory, of a non-empty one, of a missing name, of "..", in the
    // pseudo file system; RENAME without a saved filehandle.
    std::fs::create_dir(export.join("full")).unwrap();
    std::fs::write(export.join("full/x"), b"x").unwrap();
    for (target, want) in [
        ("d", NfsStat4::NFS4_OK),
        ("full", NfsStat4::NFS4ERR_NOTEMPTY),
        ("missing", NfsStat4::NFS4ERR_NOENT),
        ("..", NfsStat4::NFS4ERR_BADNAME),
    ] {
        let mut ops = to_export.clone();
        ops.push(remove(target));
        assert_eq!(s.run(ops).await.status, want, "{target}");
    }
    assert!(!export.join("d").exists());
    let res = s.run(vec![NfsArgop4::PutRootFh, remove("tmp")]).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_ROFS);
    let mut ops = to_export.clone();
    ops.push(NfsArgop4::Rename(nfs4::dir::Rename4Args {
        oldname: "new".into(),
        newname: "newer".into(),
    }));
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4ERR_NOFILEHANDLE);
    serving.stop().await;
}

fn create(objtype: nfs4::dir::CreateType4, name: &str, mode: Option<u32>) -> NfsArgop4 {
    let mut e = Encoder::new();
    let mut mask = Bitmap4::default();
    if let Some(m) = mode {
        mask.set(MODE);
        e.u32(m);
    }
    NfsArgop4::Create(nfs4::dir::Create4Args {
        objtype,
        objname: name.into(),
        createattrs: Fattr4 {
            attrmask: mask,
            attr_vals: AttrList4(e.finish().to_bytes()),
        },
    })
}

/// CREATE (RFC 8881 §18.4): a directory with its mode, a symbolic link, a FIFO; the
/// new object is the current filehandle; a replayed CREATE is answered from the
/// cache and does not run again; regular files (OPEN's), existing names, attributes
/// not served and the pseudo file system are refused.
#[tokio::test]
async fn create_makes_directories_links_and_special_files_once() {
    use nfs4::dir::{CreateType4, NfsFtype4};
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::to_reclaim(addr, "create").await;
    let mut to_export = vec![NfsArgop4::PutRootFh];
    to_export.extend(walk(&export));

    let mut ops = vec![s.sequence(1, true)];
    ops.extend(to_export.clone());
    ops.extend([
        create(CreateType4::Other(NfsFtype4::NF4DIR), "newdir", Some(0o700)),
        getattr(),
    ]);
    let (xid, call) = s.conn.call(1, ops);
    let first = s.conn.roundtrip(&call).await;
    let res = Compound4Res::decode(&mut results(&first, xid)).unwrap();
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let NfsResop4::Create(Res4::Ok(ok)) = &res.resarray[res.resarray.len() - 2] else {
        panic!("CREATE")
    };
    assert_eq!(ok.attrset, Bitmap4::from_bits(&[MODE]));
    let made = attrs(res.resarray.last().unwrap());
    let meta = std::fs::metadata(export.join("newdir")).unwrap();
    assert_eq!((made.ftype, made.mode, made.fileid), (2, 0o700, meta.ino()));
    // Removed behind the server's back: a second execution would make it again.
    std::fs::remove_dir(export.join("newdir")).unwrap();
    assert_eq!(s.conn.roundtrip(&call).await, first, "the cached reply");
    assert!(!export.join("newdir").exists(), "CREATE ran once");
    s.seq = 2;

    let mut ops = to_export.clone();
    ops.extend([
        NfsArgop4::SaveFh,
        create(
            CreateType4::Link(DdpLinkText4(Bytes::from_static(b"f"))),
            "sl",
            None,
        ),
        NfsArgop4::ReadLink,
        NfsArgop4::RestoreFh,
        create(CreateType4::Other(NfsFtype4::NF4FIFO), "pipe", Some(0o600)),
        getattr(),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(
        std::fs::read_link(export.join("sl")).unwrap(),
        Path::new("f")
    );
    assert_eq!(attrs(res.resarray.last().unwrap()).ftype, 7, "NF4FIFO");

    let mut mtime = Encoder::new();
    mtime.bool(true);
    let archive = NfsArgop4::Create(nfs4::dir::Create4Args {
        objtype: CreateType4::Other(NfsFtype4::NF4DIR),
        objname: "x".into(),
        createattrs: Fattr4 {
            attrmask: Bitmap4::from_bits(&[14]),
            attr_vals: AttrList4(mtime.finish().to_bytes()),
        },
    });
    for (op, want) in [
        (
            create(CreateType4::Other(NfsFtype4::NF4REG), "r", None),
            NfsStat4::NFS4ERR_BADTYPE,
        ),
        (
            create(CreateType4::Other(NfsFtype4::NF4DIR), "d", None),
            NfsStat4::NFS4ERR_EXIST,
        ),
        (
            create(CreateType4::Other(NfsFtype4::NF4DIR), "..", None),
            NfsStat4::NFS4ERR_BADNAME,
        ),
        (archive, NfsStat4::NFS4ERR_ATTRNOTSUPP),
    ] {
        let mut ops = to_export.clone();
        ops.push(op);
        assert_eq!(s.run(ops).await.status, want);
    }
    let res = s
        .run(vec![
            NfsArgop4::PutRootFh,
            create(CreateType4::Other(NfsFtype4::NF4DIR), "x", None),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_ROFS);
    serving.stop().await;
}

fn setattr(stateid: StateId4, bits: &[u32], vals: impl FnOnce(&mut Encoder)) -> NfsArgop4 {
    let mut e = Encoder::new();
    vals(&mut e);
    NfsArgop4::SetAttr(nfs4::dir::SetAttr4Args {
        stateid,
        obj_attributes: Fattr4 {
            attrmask: Bitmap4::from_bits(bits),
            attr_vals: AttrList4(e.finish().to_bytes()),
        },
    })
}

/// SETATTR (RFC 8881 §18.30) and LINK (§18.9) through NFSv3's file layer.
#[tokio::test]
async fn setattr_and_link() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "setattr").await;
    let mut to_file = vec![NfsArgop4::PutRootFh];
    to_file.extend(walk(&export));
    to_file.push(lookup(b"f"));

    // Mode, and size with the anonymous stateid (no open state can conflict).
    let mut ops = to_file.clone();
    ops.extend([
        setattr(StateId4::ANONYMOUS, &[SIZE, MODE], |e| {
            e.u64(2).u32(0o640);
        }),
        getattr(),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let NfsResop4::SetAttr(r) = &res.resarray[res.resarray.len() - 2] else {
        panic!("SETATTR")
    };
    assert_eq!(r.attrsset, Bitmap4::from_bits(&[SIZE, MODE]));
    let a = attrs(res.resarray.last().unwrap());
    assert_eq!((a.size, a.mode), (2, 0o640));
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"he");
    // Size with a stateid that is not ours; a read-only attribute; the pseudo root.
    let other = StateId4 {
        seqid: 1,
        other: [5; 12],
    };
    for (op, want) in [
        (
            setattr(other, &[SIZE], |e| {
                e.u64(0);
            }),
            NfsStat4::NFS4ERR_BAD_STATEID,
        ),
        (
            setattr(StateId4::ANONYMOUS, &[TYPE], |e| {
                e.u32(2);
            }),
            NfsStat4::NFS4ERR_INVAL,
        ),
    ] {
        let mut ops = to_file.clone();
        ops.push(op);
        let res = s.run(ops).await;
        assert_eq!(res.status, want);
        let NfsResop4::SetAttr(r) = res.resarray.last().unwrap() else {
            panic!("SETATTR")
        };
        assert!(r.attrsset.0.iter().all(|w| *w == 0));
    }
    let res = s
        .run(vec![
            NfsArgop4::PutRootFh,
            setattr(StateId4::ANONYMOUS, &[MODE], |e| {
                e.u32(0o777);
            }),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_ROFS);

    // LINK: the saved file into the current directory.
    let mut to_dir = vec![NfsArgop4::PutRootFh];
    to_dir.extend(walk(&export));
    let mut ops = to_file.clone();
    ops.push(NfsArgop4::SaveFh);
    ops.extend(to_dir.clone());
    ops.push(NfsArgop4::Link(nfs4::dir::Link4Args {
        newname: "hard".into(),
    }));
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(
        std::fs::metadata(export.join("hard")).unwrap().ino(),
        std::fs::metadata(export.join("f")).unwrap().ino()
    );
    let mut ops = to_dir.clone();
    ops.push(NfsArgop4::Link(nfs4::dir::Link4Args {
        newname: "again".into(),
    }));
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4ERR_NOFILEHANDLE);
    serving.stop().await;
}

/// VERIFY (RFC 8881 §18.31) and NVERIFY (§18.15) against GETATTR's own values.
#[tokio::test]
async fn verify_and_nverify_compare_with_the_objects_attributes() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "verify").await;
    let mut to_file = vec![NfsArgop4::PutRootFh];
    to_file.extend(walk(&export));
    to_file.push(lookup(b"f"));
    let mut ops = to_file.clone();
    ops.push(getattr());
    let res = s.run(ops).await;
    let NfsResop4::GetAttr(Res4::Ok(got)) = res.resarray.last().unwrap() else {
        panic!("GETATTR")
    };
    let same = got.obj_attributes.clone();
    let mut other = same.clone();
    let mut vals = other.attr_vals.0.to_vec();
    vals[11] ^= 1; // the low byte of `size`
    other.attr_vals = AttrList4(Bytes::from(vals));
    let v = |f: &Fattr4| nfs4::dir::Verify4Args {
        obj_attributes: f.clone(),
    };
    let mut rdattr = same.clone();
    rdattr.attrmask.set(11);
    for (op, want) in [
        (NfsArgop4::Verify(v(&same)), NfsStat4::NFS4_OK),
        (NfsArgop4::NVerify(v(&same)), NfsStat4::NFS4ERR_SAME),
        (NfsArgop4::Verify(v(&other)), NfsStat4::NFS4ERR_NOT_SAME),
        (NfsArgop4::NVerify(v(&other)), NfsStat4::NFS4_OK),
        (NfsArgop4::Verify(v(&rdattr)), NfsStat4::NFS4ERR_INVAL),
    ] {
        let mut ops = to_file.clone();
        ops.push(op);
        assert_eq!(s.run(ops).await.status, want);
    }
    serving.stop().await;
}

/// BIND_CONN_TO_SESSION (RFC 8881 §18.34) from a second connection: the fore
/// channel, which the session then serves there; no back channel yet.
#[tokio::test]
async fn bind_conn_to_session_binds_the_fore_channel() {
    let (_dir, _export, addr, serving) = server().await;
    let mut s = Session::to_reclaim(addr, "bind").await;
    let mut other = Conn::open(addr).await;
    let bind = |sid, dir| {
        NfsArgop4::BindConnToSession(BindConnToSession4Args {
            bctsa_sessid: sid,
            bctsa_dir: dir,
            bctsa_use_conn_in_rdma_mode: true,
        })
    };
    let (_, res) = other
        .compound(
            1,
            vec![bind(s.sid, ChannelDirFromClient4::CDFC4_FORE_OR_BOTH)],
        )
        .await;
    assert_eq!(
        res.resarray,
        [NfsResop4::BindConnToSession(Res4::Ok(
            BindConnToSession4ResOk {
                bctsr_sessid: s.sid,
                bctsr_dir: ChannelDirFromServer4::CDFS4_FORE,
                bctsr_use_conn_in_rdma_mode: false,
            }
        ))]
    );
    for (sid, dir, want) in [
        (
            s.sid,
            ChannelDirFromClient4::CDFC4_BACK,
            NfsStat4::NFS4ERR_INVAL,
        ),
        (
            [3; 16],
            ChannelDirFromClient4::CDFC4_FORE,
            NfsStat4::NFS4ERR_BADSESSION,
        ),
    ] {
        let (_, res) = other.compound(1, vec![bind(sid, dir)]).await;
        assert_eq!(res.status, want);
    }
    let (_, res) = other
        .compound(1, vec![s.sequence(1, false), NfsArgop4::PutRootFh])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK);
    s.seq = 2;
    s.run(vec![NfsArgop4::PutRootFh]).await;
    serving.stop().await;
}

/// RFC 8881 §5.8 `owner_group`.
const OWNER_GROUP_ATTR: u32 = 37;

/// `getent DB KEY`'s fields: the system's own answer, not our lookup's.
fn getent(db: &str, key: &str) -> Vec<String> {
    let out = std::process::Command::new("getent")
        .args([db, key])
        .output()
        .expect("getent (libc-bin) runs");
    assert!(out.status.success(), "getent {db} {key}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .split(':')
        .map(str::to_string)
        .collect()
}

/// RFC 8881 §5.9 with an ID-mapping domain (`--idmap-domain`): GETATTR answers an
/// owner that has a name as `name@domain`; SETATTR takes `name@domain` (the domain
/// in any case) and numeric strings, and answers NFS4ERR_BADOWNER for a name not in
/// the database, a name in another domain, or a bare name.
#[tokio::test]
async fn owners_are_names_in_the_idmap_domain() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a file to another user (chown): run it as root"
    );
    let dir = TempDir::new("nfs4-idmap");
    std::fs::write(dir.path().join("f"), b"hello").unwrap();
    let mut config = common::loopback_config(dir.path());
    config.nfs4_id_domain = Some("example.org".into());
    let mut bound = Bound::new(&config).await.unwrap();
    bound.serve_nfs4();
    let export = bound.server().table().exports[0].export.path.clone();
    let addr = bound.nfs_addr().unwrap();
    let serving = common::serve(bound);
    let mut s = Session::new(addr, "idmap").await;
    let mut to_file = vec![NfsArgop4::PutRootFh];
    to_file.extend(walk(&export));
    to_file.push(lookup(b"f"));

    let uid = std::fs::metadata(export.join("f")).unwrap().uid();
    let mut ops = to_file.clone();
    ops.push(getattr());
    let res = s.run(ops).await;
    let owner = attrs(res.resarray.last().unwrap()).owner;
    let name = &getent("passwd", &uid.to_string())[0];
    assert_eq!(
        String::from_utf8(owner).unwrap(),
        format!("{name}@example.org")
    );

    // To daemon by name (uid and gid from getent), then back by number.
    let daemon = getent("passwd", "daemon");
    let group = &getent("group", &daemon[3])[0];
    let mut ops = to_file.clone();
    ops.push(setattr(
        StateId4::ANONYMOUS,
        &[OWNER, OWNER_GROUP_ATTR],
        |e| {
            e.string(b"daemon@EXAMPLE.org")
                .string(format!("{group}@example.org").as_bytes());
        },
    ));
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let meta = std::fs::metadata(export.join("f")).unwrap();
    assert_eq!(
        (meta.uid().to_string(), meta.gid().to_string()),
        (daemon[2].clone(), daemon[3].clone())
    );
    let mut ops = to_file.clone();
    ops.push(setattr(StateId4::ANONYMOUS, &[OWNER], |e| {
        e.string(uid.to_string().as_bytes());
    }));
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4_OK);
    assert_eq!(std::fs::metadata(export.join("f")).unwrap().uid(), uid);

    for bad in [
        "no-such-user-here@example.org",
        "daemon@example.com",
        "daemon",
    ] {
        let mut ops = to_file.clone();
        ops.push(setattr(StateId4::ANONYMOUS, &[OWNER], |e| {
            e.string(bad.as_bytes());
        }));
        assert_eq!(s.run(ops).await.status, NfsStat4::NFS4ERR_BADOWNER, "{bad}");
    }
    serving.stop().await;
}

/// `--metrics` counts each NFSv4 operation inside the COMPOUNDs, over TCP and RDMA
/// together, and the ones that failed; the page is read back by the Prometheus
/// project's parser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_are_counted_on_the_metrics_page() {
    let server = rdma_server().await;
    let page = || {
        let page = nfsd::metrics::render(&nfsd::metrics::Sources {
            nfs: server.nfs.clone(),
            tcp: Default::default(),
            rdma: Some(server.stats.clone()),
        });
        lab::prometheus::parse(&page).unwrap_or_else(|e| panic!("{e}"))
    };
    // EXCHANGE_ID, CREATE_SESSION, SEQUENCE + RECLAIM_COMPLETE.
    let mut tcp = Session::new(server.tcp, "metrics-tcp").await;
    let mut rdma = Session::new_on(
        Conn::open_rdma(server.rdma, rpcrdma_transport::RdmaConfig::default()),
        "metrics-rdma",
    )
    .await;
    for s in [&mut tcp, &mut rdma] {
        let res = s
            .run(vec![
                NfsArgop4::PutRootFh,
                lookup(b"no-such-export"),
                NfsArgop4::GetFh,
            ])
            .await;
        assert_eq!(res.status, NfsStat4::NFS4ERR_NOENT, "{res:?}");
    }
    let m = page();
    let get = |family: &str, op: &str| {
        lab::prometheus::get(
            &m,
            &format!("nfsd_nfs4_{family}{{operation=\"{op}\",version=\"4\"}}"),
        )
    };
    for (op, ran, failed) in [
        ("EXCHANGE_ID", 2.0, 0.0),
        ("CREATE_SESSION", 2.0, 0.0),
        ("RECLAIM_COMPLETE", 2.0, 0.0),
        ("SEQUENCE", 4.0, 0.0),
        ("PUTROOTFH", 2.0, 0.0),
        ("LOOKUP", 2.0, 2.0),
        // After the failed LOOKUP: not run.
        ("GETFH", 0.0, 0.0),
    ] {
        assert_eq!(get("operations_total", op), ran, "{op} run");
        assert_eq!(get("operation_errors_total", op), failed, "{op} failed");
    }
    drop((tcp, rdma));
    server.serving.stop().await;
}

/// `change_info4.atomic` (RFC 8881 §3.3.6): FALSE by default (a local process may
/// change a directory between the server's looks before and after), TRUE on an export
/// declared `nfsd_only`, where changes through the server are made one at a time per
/// directory between those looks; `before` and `after` still frame each change.
#[tokio::test]
async fn changes_of_a_directory_are_atomic_only_on_an_nfsd_only_export() {
    use nfs4::dir::{CreateType4, NfsFtype4};
    for nfsd_only in [false, true] {
        let dir = TempDir::new("nfs4-atomic");
        let mut config = common::loopback_config(dir.path());
        config.exports[0].clients.0[0].options.nfsd_only = nfsd_only;
        let mut bound = Bound::new(&config).await.unwrap();
        bound.serve_nfs4();
        let export = bound.server().table().exports[0].export.path.clone();
        let addr = bound.nfs_addr().unwrap();
        let serving = common::serve(bound);
        let mut s = Session::new(addr, "atomic").await;
        let mut to_export = vec![NfsArgop4::PutRootFh];
        to_export.extend(walk(&export));
        let cinfos = |res: &Compound4Res| -> Vec<nfs4::ChangeInfo4> {
            res.resarray
                .iter()
                .filter_map(|r| match r {
                    NfsResop4::Create(Res4::Ok(ok)) => Some(ok.cinfo),
                    NfsResop4::Remove(Res4::Ok(ok)) => Some(ok.cinfo),
                    NfsResop4::Rename(Res4::Ok(ok)) => Some(ok.source_cinfo),
                    _ => None,
                })
                .collect()
        };
        let mut ops = to_export.clone();
        ops.extend([
            NfsArgop4::SaveFh,
            create(CreateType4::Other(NfsFtype4::NF4DIR), "sub", Some(0o755)),
            NfsArgop4::RestoreFh,
            NfsArgop4::Rename(nfs4::dir::Rename4Args {
                oldname: "sub".into(),
                newname: "moved".into(),
            }),
            remove("moved"),
        ]);
        let res = s.run(ops).await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        let seen = cinfos(&res);
        assert_eq!(seen.len(), 3, "CREATE, RENAME, REMOVE");
        for c in seen {
            assert_eq!(c.atomic, nfsd_only, "nfsd_only {nfsd_only}: {c:?}");
            assert!(c.after >= c.before, "{c:?}");
        }
        serving.stop().await;
    }
}
