//! NFSv4.1 open state and I/O over TCP against the real server: OPEN (create and
//! not, by name and by filehandle), WRITE, READ, COMMIT, CLOSE, OPEN_DOWNGRADE,
//! TEST_STATEID and FREE_STATEID (RFC 8881 §18.16, §18.32, §18.22, §18.3, §18.2,
//! §18.18, §18.48, §18.38), the stateid rules of §8.2 and the share reservations
//! of §9.7 across two clients.

mod common;

use common::nfs4::*;
use nfs4::compound::{NfsArgop4, NfsResop4};
use nfs4::fh::*;
use nfs4::io::*;
use nfs4::state::*;
use nfs4::*;
use xdr::{Bytes, Encoder};

const WRITE_VERF_LEN: usize = 8;

/// Fails the test unless it runs as root: it switches the server's identity.
fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test switches the server's identity to a user's: run it as root, as scripts/test-all does"
    );
}

fn owner(s: &Session, name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid: s.clientid,
        owner: name.as_bytes().into(),
    }
}

fn mode_attrs(mode: u32) -> Fattr4 {
    let mut e = Encoder::new();
    e.u32(mode);
    Fattr4 {
        attrmask: Bitmap4::from_bits(&[33]),
        attr_vals: AttrList4(e.finish().to_bytes()),
    }
}

/// OPEN of `name` in the current directory.
fn open_name(
    o: StateOwner4,
    name: &str,
    access: u32,
    deny: u32,
    how: Option<CreateHow4>,
) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: o,
        openhow: OpenFlag4(how),
        claim: OpenClaim4::Null(name.into()),
    })
}

fn write(stateid: StateId4, offset: u64, data: &[u8], stable: StableHow4) -> NfsArgop4 {
    NfsArgop4::Write(Write4Args {
        stateid,
        offset,
        stable,
        data: DdpData(Bytes::copy_from_slice(data)),
    })
}

fn read(stateid: StateId4, offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::Read(Read4Args {
        stateid,
        offset,
        count,
    })
}

fn close(stateid: StateId4) -> NfsArgop4 {
    NfsArgop4::Close(Close4Args {
        seqid: 0,
        open_stateid: stateid,
    })
}

fn opened(r: &NfsResop4) -> Open4ResOk {
    match r {
        NfsResop4::Open(Res4::Ok(ok)) => ok.clone(),
        other => panic!("OPEN: {other:?}"),
    }
}

/// PUTROOTFH and the LOOKUPs to the export (the current directory of the OPENs).
fn to_export(export: &std::path::Path) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::PutRootFh];
    ops.extend(walk(export));
    ops
}

/// Runs `op` (an OPEN) after [`to_export`]: its result, or the status the COMPOUND
/// ended with.
async fn open_then(
    s: &mut Session,
    export: &std::path::Path,
    op: NfsArgop4,
) -> Result<Open4ResOk, NfsStat4> {
    let mut ops = to_export(export);
    ops.push(op);
    let res = s.run(ops).await;
    match res.resarray.last().unwrap() {
        NfsResop4::Open(Res4::Ok(ok)) => Ok(ok.clone()),
        other => Err(other.status()),
    }
}

#[tokio::test]
async fn create_write_read_commit_and_close_a_file() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "io").await;

    // The Linux client's create: OPEN (UNCHECKED4, mode) + GETFH + GETATTR.
    let mut ops = to_export(&export);
    ops.extend([
        open_name(
            owner(&s, "open-owner-1"),
            "new",
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
            Some(CreateHow4::Unchecked(mode_attrs(0o640))),
        ),
        NfsArgop4::GetFh,
        getattr(),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let n = res.resarray.len();
    let open = opened(&res.resarray[n - 3]);
    assert_eq!(open.stateid.seqid, 1);
    assert_ne!(open.stateid.other, [0; 12]);
    assert_ne!(open.rflags & OPEN4_RESULT_LOCKTYPE_POSIX, 0);
    assert_eq!(open.attrset, Bitmap4::from_bits(&[33]));
    assert_eq!(open.delegation, OpenDelegation4::None);
    assert_ne!(open.cinfo.before, open.cinfo.after, "the directory changed");
    let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[n - 2] else {
        panic!("GETFH")
    };
    let a = attrs(&res.resarray[n - 1]);
    assert_eq!((a.ftype, a.size, a.mode), (1, 0, 0o640));
    let put = || {
        NfsArgop4::PutFh(nfs4::fh::PutFh4Args {
            object: fh.object.clone(),
        })
    };

    // WRITE (unstable, then file sync), READ back, COMMIT.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let res = s
        .run(vec![
            put(),
            write(open.stateid, 0, &data[..200_000], StableHow4::UNSTABLE4),
            write(
                open.stateid,
                200_000,
                &data[200_000..],
                StableHow4::FILE_SYNC4,
            ),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let verfs: Vec<[u8; WRITE_VERF_LEN]> = res.resarray[2..]
        .iter()
        .map(|r| match r {
            NfsResop4::Write(Res4::Ok(w)) => w.writeverf,
            other => panic!("WRITE: {other:?}"),
        })
        .collect();
    let NfsResop4::Write(Res4::Ok(w)) = &res.resarray[2] else {
        panic!()
    };
    assert_eq!((w.count, w.committed), (200_000, StableHow4::UNSTABLE4));
    assert_eq!(verfs[0], verfs[1]);
    let res = s
        .run(vec![
            put(),
            read(open.stateid, 0, 1 << 20),
            read(open.stateid, 299_990, 100),
            read(open.stateid, 400_000, 100),
            NfsArgop4::Commit(Commit4Args {
                offset: 0,
                count: 0,
            }),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let got = |i: usize| match &res.resarray[i] {
        NfsResop4::Read(Res4::Ok(r)) => (r.eof, r.data.0.to_vec()),
        other => panic!("READ: {other:?}"),
    };
    assert_eq!(got(2), (true, data.clone()));
    assert_eq!(got(3), (true, data[299_990..].to_vec()));
    assert_eq!(got(4), (true, vec![]));
    let NfsResop4::Commit(Res4::Ok(c)) = &res.resarray[5] else {
        panic!("COMMIT")
    };
    assert_eq!(c.writeverf, verfs[0]);
    assert_eq!(std::fs::read(export.join("new")).unwrap(), data);

    // CLOSE: the invalid stateid; the old one is then unknown.
    let res = s.run(vec![put(), close(open.stateid)]).await;
    assert_eq!(
        res.resarray[2],
        NfsResop4::Close(Res4::Ok(StateId4::INVALID))
    );
    let res = s.run(vec![put(), read(open.stateid, 0, 10)]).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_BAD_STATEID);

    // The current stateid (§16.2.3.1.2): OPEN, WRITE and CLOSE in one COMPOUND.
    let mut ops = to_export(&export);
    let at = ops.len();
    ops.extend([
        open_name(
            owner(&s, "open-owner-1"),
            "new",
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
        write(StateId4::CURRENT, 0, b"HEAD", StableHow4::FILE_SYNC4),
        close(StateId4::CURRENT),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    // Opening the file there changes nothing in the directory: its change attribute
    // is the one the create left (RFC 8881 §18.16.4: cinfo).
    let reopen = opened(&res.resarray[at + 1]); // after SEQUENCE
    assert_eq!(
        (reopen.cinfo.before, reopen.cinfo.after),
        (open.cinfo.after, open.cinfo.after)
    );
    assert_eq!(
        &std::fs::read(export.join("new")).unwrap()[..6],
        b"HEAD\x1c\x23"
    );
    // A PUTFH clears it.
    let res = s
        .run(vec![
            put(),
            write(StateId4::CURRENT, 0, b"x", StableHow4::UNSTABLE4),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_BAD_STATEID);
    serving.stop().await;
}

/// The file an OPEN creates is its creator's to use whatever the mode it was given
/// (knfsd's `op_created`, the "owner override" of open(2) with O_CREAT); an OPEN
/// that finds the file there is checked against its mode, as the caller. Made
/// or found is told by the create itself (`proc::names::create_telling`), not by a
/// lookup before it.
#[tokio::test]
async fn the_creator_may_write_a_file_it_made_read_only_and_a_later_open_may_not() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    require_root();
    let (dir, export, addr, serving) = server().await;
    let public = dir.path().join("public");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut conn = Conn::open(addr).await;
    conn.uid = 1000;
    let mut s = Session::new_on(conn, "override").await;
    let open = |s: &Session| {
        let mut ops = to_export(&export);
        ops.extend([
            lookup(b"public"),
            open_name(
                owner(s, "o"),
                "ro",
                OPEN4_SHARE_ACCESS_WRITE,
                OPEN4_SHARE_DENY_NONE,
                Some(CreateHow4::Unchecked(mode_attrs(0o444))),
            ),
        ]);
        ops
    };
    let res = s.run(open(&s)).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "the creating OPEN: {res:?}");
    let made = std::fs::metadata(public.join("ro")).unwrap();
    assert_eq!((made.uid(), made.mode() & 0o777), (1000, 0o444));
    let res = s.run(open(&s)).await;
    assert_eq!(
        res.status,
        NfsStat4::NFS4ERR_ACCESS,
        "the OPEN that finds it: {res:?}"
    );
    serving.stop().await;
}

/// The Linux client's OPEN is followed by ACCESS of the file in the same COMPOUND;
/// OPEN then has the kernel check ACCESS's rights with its own and keeps them for it
/// (`crate::seen`). ACCESS after OPEN answers exactly as ACCESS alone, for the
/// owner, the group and others, with rights granted and refused, and an OPEN the
/// mode refuses is still NFS4ERR_ACCESS.
#[tokio::test]
async fn access_after_open_in_one_compound_answers_as_access_alone() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let (dir, export, addr, serving) = server().await;
    // (name, owner uid, group gid, mode): the caller is uid 1000, gid 1000.
    let files = [
        ("own-rw", 1000, 1000, 0o644),
        ("own-r", 1000, 1000, 0o444),
        ("own-rx", 1000, 1000, 0o500),
        ("group-rw", 0, 1000, 0o460),
        ("other-rx", 0, 0, 0o755),
        ("other-r", 0, 0, 0o604),
        ("other-none", 0, 0, 0o640),
    ];
    for (name, uid, gid, mode) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, b"x").unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let mut conn = Conn::open(addr).await;
    conn.uid = 1000;
    let mut s = Session::new_on(conn, "access-after-open").await;
    let all = ACCESS4_READ
        | ACCESS4_LOOKUP
        | ACCESS4_MODIFY
        | ACCESS4_EXTEND
        | ACCESS4_DELETE
        | ACCESS4_EXECUTE;
    let access = || NfsArgop4::Access(Access4Args { access: all });
    for (name, _, _, mode) in files {
        let mut alone = to_export(&export);
        alone.extend([lookup(name.as_bytes()), access()]);
        let res = s.run(alone).await;
        let alone = res.resarray.last().unwrap().clone();
        assert!(
            matches!(alone, NfsResop4::Access(Res4::Ok(_))),
            "{name}: {res:?}"
        );

        let mut ops = to_export(&export);
        let o = owner(&s, name);
        ops.extend([
            open_name(
                o,
                name,
                OPEN4_SHARE_ACCESS_READ,
                OPEN4_SHARE_DENY_NONE,
                None,
            ),
            access(),
        ]);
        let res = s.run(ops).await;
        let readable = match (mode & 0o004 != 0, name) {
            (_, "own-rw" | "own-r" | "own-rx" | "group-rw") => true,
            (other, _) => other,
        };
        if !readable {
            assert_eq!(res.status, NfsStat4::NFS4ERR_ACCESS, "{name}: {res:?}");
            continue;
        }
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{name}: {res:?}");
        let n = res.resarray.len();
        assert_eq!(res.resarray[n - 1], alone, "{name}: ACCESS after OPEN");
        let stateid = opened(&res.resarray[n - 2]).stateid;
        let mut ops = to_export(&export);
        ops.extend([lookup(name.as_bytes()), close(stateid)]);
        let res = s.run(ops).await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{name}: {res:?}");
    }
    serving.stop().await;
}

/// §18.51.3: "If non-reclaim locking operations are done before the
/// RECLAIM_COMPLETE, an NFS4ERR_GRACE error will be returned" (pynfs RECC3), even
/// with no grace period running.
#[tokio::test]
async fn no_open_before_the_clients_reclaim_complete_rfc8881_18_51_3() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::to_reclaim(addr, "not-yet-complete").await;
    let o = owner(&s, "o");
    let create = || {
        open_name(
            o.clone(),
            "made-after-reclaim",
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
            Some(CreateHow4::Unchecked(mode_attrs(0o644))),
        )
    };
    let op = create();
    assert_eq!(
        open_then(&mut s, &export, op).await.err(),
        Some(NfsStat4::NFS4ERR_GRACE)
    );
    assert!(
        !export.join("made-after-reclaim").exists(),
        "nothing created"
    );
    let res = s
        .run(vec![NfsArgop4::ReclaimComplete(
            nfs4::session::ReclaimComplete4Args { rca_one_fs: false },
        )])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let op = create();
    assert!(open_then(&mut s, &export, op).await.is_ok());
    serving.stop().await;
}

#[tokio::test]
async fn share_reservations_hold_across_clients_rfc8881_9_7() {
    let (_dir, export, addr, serving) = server().await;
    let mut a = Session::new(addr, "client-a").await;
    let mut b = Session::new(addr, "client-b").await;
    let oa = owner(&a, "a");
    let ob = owner(&b, "b");

    // A reads "f" and denies writers.
    let sa = open_then(
        &mut a,
        &export,
        open_name(
            oa.clone(),
            "f",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_WRITE,
            None,
        ),
    )
    .await
    .unwrap()
    .stateid;
    // B may not open it for writing, may not deny reading, may open it to read.
    for (access, deny, want) in [
        (
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            Err(NfsStat4::NFS4ERR_SHARE_DENIED),
        ),
        (
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
            Err(NfsStat4::NFS4ERR_SHARE_DENIED),
        ),
        (
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_READ,
            Err(NfsStat4::NFS4ERR_SHARE_DENIED),
        ),
    ] {
        let got = open_then(
            &mut b,
            &export,
            open_name(ob.clone(), "f", access, deny, None),
        )
        .await;
        assert_eq!(got.map(|_| ()), want, "{access} {deny}");
    }
    let sb = open_then(
        &mut b,
        &export,
        open_name(
            ob.clone(),
            "f",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
    )
    .await
    .unwrap()
    .stateid;
    // Anonymous WRITE meets A's deny (§9.7: NFS4ERR_LOCKED); READ with B's open works.
    let mut ops = to_export(&export);
    ops.extend([
        lookup(b"f"),
        read(sb, 0, 5),
        write(StateId4::ANONYMOUS, 0, b"x", StableHow4::FILE_SYNC4),
    ]);
    let res = b.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_LOCKED, "{res:?}");
    // B's stateid is not A's: A using it is NFS4ERR_BAD_STATEID.
    let mut ops = to_export(&export);
    ops.extend([lookup(b"f"), read(sb, 0, 5)]);
    assert_eq!(a.run(ops).await.status, NfsStat4::NFS4ERR_BAD_STATEID);
    // A closes: B may now open it for writing.
    let mut ops = to_export(&export);
    ops.extend([lookup(b"f"), close(sa)]);
    assert_eq!(a.run(ops).await.status, NfsStat4::NFS4_OK);
    let sw = open_then(
        &mut b,
        &export,
        open_name(
            ob,
            "f",
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
    )
    .await
    .unwrap()
    .stateid;
    // The same owner's open upgraded: same stateid, next seqid.
    assert_eq!((sw.other, sw.seqid), (sb.other, 2));
    serving.stop().await;
}

#[tokio::test]
async fn stateid_seqids_modes_downgrade_test_and_free_rfc8881_8_2() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "stateids").await;
    let o = owner(&s, "o");
    let first = open_then(
        &mut s,
        &export,
        open_name(
            o.clone(),
            "f",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
    )
    .await
    .unwrap()
    .stateid;
    let second = open_then(
        &mut s,
        &export,
        open_name(
            o.clone(),
            "f",
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
    )
    .await
    .unwrap()
    .stateid;
    assert_eq!(second.seqid, 2);
    let newer = StateId4 { seqid: 3, ..second };
    let zero = StateId4 { seqid: 0, ..second };
    let on_f = |ops: Vec<NfsArgop4>| {
        let mut all = to_export(&export);
        all.push(lookup(b"f"));
        all.extend(ops);
        all
    };
    for (op, want) in [
        (read(first, 0, 1), NfsStat4::NFS4ERR_OLD_STATEID),
        (read(newer, 0, 1), NfsStat4::NFS4ERR_BAD_STATEID),
        (read(zero, 0, 1), NfsStat4::NFS4_OK),
        (read(StateId4::READ_BYPASS, 0, 1), NfsStat4::NFS4_OK),
    ] {
        assert_eq!(s.run(on_f(vec![op])).await.status, want);
    }
    // The stateid names "f": with another file as the current one it is refused.
    let mut ops = to_export(&export);
    ops.extend([
        open_name(
            o.clone(),
            "g",
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
            Some(CreateHow4::Guarded(mode_attrs(0o600))),
        ),
        read(second, 0, 1),
    ]);
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4ERR_BAD_STATEID);

    // OPEN_DOWNGRADE to read: WRITE is then NFS4ERR_OPENMODE; upgrading by
    // downgrade is NFS4ERR_INVAL.
    let res = s
        .run(on_f(vec![NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: second,
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_NONE,
        })]))
        .await;
    let NfsResop4::OpenDowngrade(Res4::Ok(down)) = res.resarray.last().unwrap() else {
        panic!("OPEN_DOWNGRADE: {res:?}")
    };
    assert_eq!(down.seqid, 3);
    let res = s
        .run(on_f(vec![write(*down, 0, b"x", StableHow4::UNSTABLE4)]))
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_OPENMODE);
    let res = s
        .run(on_f(vec![NfsArgop4::OpenDowngrade(OpenDowngrade4Args {
            open_stateid: *down,
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_BOTH,
            share_deny: OPEN4_SHARE_DENY_NONE,
        })]))
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_INVAL);

    // TEST_STATEID: one status each; FREE_STATEID of an open: NFS4ERR_LOCKS_HELD.
    let unknown = StateId4 {
        seqid: 1,
        other: [9; 12],
    };
    let res = s
        .run(vec![
            NfsArgop4::TestStateId(TestStateId4Args(vec![
                *down,
                first,
                unknown,
                StateId4::ANONYMOUS,
            ])),
            NfsArgop4::FreeStateId(FreeStateId4Args { fsa_stateid: *down }),
        ])
        .await;
    assert_eq!(
        res.resarray[1],
        NfsResop4::TestStateId(Res4::Ok(TestStateId4ResOk(vec![
            NfsStat4::NFS4_OK,
            NfsStat4::NFS4ERR_OLD_STATEID,
            NfsStat4::NFS4ERR_BAD_STATEID,
            NfsStat4::NFS4ERR_BAD_STATEID,
        ])))
    );
    assert_eq!(res.status, NfsStat4::NFS4ERR_LOCKS_HELD);
    serving.stop().await;
}

#[tokio::test]
async fn open_claims_and_create_modes_rfc8881_18_16() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "claims").await;
    let o = owner(&s, "o");
    let r = |name: &str, how| {
        open_name(
            o.clone(),
            name,
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_NONE,
            how,
        )
    };
    for (op, want) in [
        (r("d", None), NfsStat4::NFS4ERR_ISDIR),
        (r("l", None), NfsStat4::NFS4ERR_SYMLINK),
        (r("missing", None), NfsStat4::NFS4ERR_NOENT),
        (
            r("f", Some(CreateHow4::Guarded(mode_attrs(0o600)))),
            NfsStat4::NFS4ERR_EXIST,
        ),
        (
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: 0,
                share_deny: 0,
                owner: o.clone(),
                openhow: OpenFlag4(None),
                claim: OpenClaim4::Null("f".into()),
            }),
            NfsStat4::NFS4ERR_INVAL,
        ),
        (
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: 0,
                owner: o.clone(),
                openhow: OpenFlag4(None),
                claim: OpenClaim4::Previous(OpenDelegationType4::OPEN_DELEGATE_NONE),
            }),
            NfsStat4::NFS4ERR_NO_GRACE,
        ),
        (
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: 0,
                owner: o.clone(),
                openhow: OpenFlag4(None),
                claim: OpenClaim4::DelegatePrev("f".into()),
            }),
            NfsStat4::NFS4ERR_NOTSUPP,
        ),
    ] {
        assert_eq!(open_then(&mut s, &export, op).await.map(|_| ()), Err(want));
    }
    // The pseudo root: no create there; its names are directories.
    let res = s
        .run(vec![
            NfsArgop4::PutRootFh,
            r("x", Some(CreateHow4::Unchecked(mode_attrs(0o600)))),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_ROFS);

    // EXCLUSIVE4_1: a retransmission with the same verifier opens the file it made;
    // another verifier finds it taken. The mode is applied after the create.
    let excl = |v: u8| {
        r(
            "excl",
            Some(CreateHow4::Exclusive41([v; 8], mode_attrs(0o604))),
        )
    };
    let first = open_then(&mut s, &export, excl(1)).await.unwrap();
    assert_eq!(first.attrset, Bitmap4::from_bits(&[33]));
    let again = open_then(&mut s, &export, excl(1)).await.unwrap();
    assert_eq!(again.stateid.other, first.stateid.other);
    assert_eq!(
        open_then(&mut s, &export, excl(2)).await.map(|_| ()),
        Err(NfsStat4::NFS4ERR_EXIST)
    );
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(export.join("excl")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o604);
    // Setting a time with EXCLUSIVE4_1 is not allowed (suppattr_exclcreat).
    let mut e = Encoder::new();
    e.u32(0); // SET_TO_SERVER_TIME4
    let times = Fattr4 {
        attrmask: Bitmap4::from_bits(&[54]),
        attr_vals: AttrList4(e.finish().to_bytes()),
    };
    assert_eq!(
        open_then(
            &mut s,
            &export,
            r("excl2", Some(CreateHow4::Exclusive41([3; 8], times)))
        )
        .await
        .map(|_| ()),
        Err(NfsStat4::NFS4ERR_INVAL)
    );

    // CLAIM_FH: the current filehandle itself.
    let mut ops = to_export(&export);
    ops.extend([
        lookup(b"f"),
        NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: 0,
            owner: owner(&s, "fh-owner"),
            openhow: OpenFlag4(None),
            claim: OpenClaim4::Fh,
        }),
        read(StateId4::CURRENT, 0, 100),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let NfsResop4::Read(Res4::Ok(got)) = res.resarray.last().unwrap() else {
        panic!("READ")
    };
    assert_eq!((got.eof, &got.data.0[..]), (true, &b"hello"[..]));
    serving.stop().await;
}

/// The session's cached-reply limit (RFC 8881 §2.10.6.4): with `sa_cachethis`, a READ
/// is shortened to what fits `ca_maxresponsesize_cached` (7584 bytes in this
/// session), and an operation whose result could pass it is refused before it runs
/// with NFS4ERR_REP_TOO_BIG_TO_CACHE.
#[tokio::test]
async fn replies_to_cache_keep_to_the_cached_limit() {
    let (_dir, export, addr, serving) = server().await;
    std::fs::write(export.join("big"), vec![1u8; 20_000]).unwrap();
    let mut s = Session::new(addr, "cached").await;
    let mut ops = vec![s.sequence(s.seq, true), NfsArgop4::PutRootFh];
    ops.extend(walk(&export));
    ops.extend([
        lookup(b"big"),
        read(StateId4::READ_BYPASS, 0, 20_000),
        getattr(),
    ]);
    s.seq += 1;
    let (reply, res) = s.conn.compound(1, ops).await;
    assert_eq!(
        res.status,
        NfsStat4::NFS4ERR_REP_TOO_BIG_TO_CACHE,
        "{res:?}"
    );
    let n = res.resarray.len();
    let NfsResop4::Read(Res4::Ok(r)) = &res.resarray[n - 2] else {
        panic!("READ: {res:?}")
    };
    assert!(
        !r.eof && r.data.0.len() > 6000 && r.data.0.len() < 7584,
        "{}",
        r.data.0.len()
    );
    assert!(
        reply.len() <= 7584 + 64,
        "the reply with its RPC header: {}",
        reply.len()
    );
    // Without caching the whole file comes back.
    let mut ops = to_export(&export);
    ops.extend([lookup(b"big"), read(StateId4::READ_BYPASS, 0, 20_000)]);
    let res = s.run(ops).await;
    let NfsResop4::Read(Res4::Ok(r)) = res.resarray.last().unwrap() else {
        panic!("READ")
    };
    assert_eq!((r.eof, r.data.0.len()), (true, 20_000));
    serving.stop().await;
}

/// `futimens` on a file open for writing, as Connectathon's general `make` test does
/// it: SETATTR of `time_modify_set` (a client time) with the open stateid, then
/// CLOSE; the modification time read back is the one set.
#[tokio::test]
async fn setattr_of_the_modification_time_under_an_open_stateid_sticks() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "times").await;
    let mut ops = to_export(&export);
    ops.extend([
        open_name(
            owner(&s, "o"),
            "f",
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
            None,
        ),
        NfsArgop4::GetFh,
    ]);
    let res = s.run(ops).await;
    let n = res.resarray.len();
    let open = opened(&res.resarray[n - 2]);
    let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[n - 1] else {
        panic!("GETFH")
    };
    let put = || {
        NfsArgop4::PutFh(nfs4::fh::PutFh4Args {
            object: fh.object.clone(),
        })
    };
    let when: i64 = 2_000_000_000;
    let mut e = Encoder::new();
    e.u32(1).i64(when).u32(0); // SET_TO_CLIENT_TIME4, nfstime4
    let set = NfsArgop4::SetAttr(nfs4::dir::SetAttr4Args {
        stateid: open.stateid,
        obj_attributes: Fattr4 {
            attrmask: Bitmap4::from_bits(&[54]),
            attr_vals: AttrList4(e.finish().to_bytes()),
        },
    });
    let time_modify = || {
        NfsArgop4::GetAttr(nfs4::fh::GetAttr4Args {
            attr_request: Bitmap4::from_bits(&[53]),
        })
    };
    let mtime = |r: &NfsResop4| {
        let NfsResop4::GetAttr(Res4::Ok(ok)) = r else {
            panic!("GETATTR: {r:?}")
        };
        let mut d = xdr::Decoder::new(ok.obj_attributes.attr_vals.0.clone());
        d.i64().unwrap()
    };
    // The Linux client's SETATTR: the new attributes come back in the same COMPOUND.
    let res = s.run(vec![put(), set, time_modify()]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(mtime(&res.resarray[3]), when);
    let res = s.run(vec![put(), close(open.stateid), time_modify()]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(mtime(&res.resarray[3]), when);
    let meta = std::fs::metadata(export.join("f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mtime(), when);
    serving.stop().await;
}

/// Within one COMPOUND, a GETATTR after operations that change nothing (LOOKUP,
/// ACCESS, GETATTR) answers with what they read (`nfsd::seen`), one after an
/// operation that changes the file (WRITE, SETATTR) reads it afresh, and one of a
/// directory after a REMOVE in it answers what the REMOVE read last: every GETATTR
/// answers what a GETATTR alone would have at that point.
#[tokio::test]
async fn each_getattr_of_a_compound_sees_the_changes_made_before_it() {
    let (_dir, export, addr, serving) = server().await;
    let mut s = Session::new(addr, "seen").await;
    let mut ops = to_export(&export);
    ops.extend([
        open_name(
            owner(&s, "o"),
            "grows",
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
            Some(CreateHow4::Unchecked(mode_attrs(0o640))),
        ),
        getattr(),
        NfsArgop4::Access(nfs4::fh::Access4Args { access: 0x1f }),
        getattr(),
        write(StateId4::CURRENT, 0, &[7; 100], StableHow4::UNSTABLE4),
        getattr(),
        NfsArgop4::SetAttr(nfs4::dir::SetAttr4Args {
            stateid: StateId4::CURRENT,
            obj_attributes: mode_attrs(0o600),
        }),
        NfsArgop4::Access(nfs4::fh::Access4Args { access: 0x1f }),
        getattr(),
        write(StateId4::CURRENT, 100, &[7; 50], StableHow4::UNSTABLE4),
        NfsArgop4::GetFh,
        getattr(),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let n = res.resarray.len();
    let seen: Vec<(u64, u32)> = [n - 11, n - 9, n - 7, n - 4, n - 1]
        .iter()
        .map(|&i| attrs(&res.resarray[i]))
        .map(|a| (a.size, a.mode))
        .collect();
    assert_eq!(
        seen,
        [
            (0, 0o640),
            (0, 0o640),
            (100, 0o640),
            (100, 0o600),
            (150, 0o600)
        ]
    );
    let open = opened(&res.resarray[n - 12]);
    // LOOKUP then GETATTR: the attributes LOOKUP read, which are the file's now.
    let mut ops = to_export(&export);
    ops.extend([lookup(b"grows"), getattr()]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let looked = attrs(res.resarray.last().unwrap());
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(export.join("grows")).unwrap();
    assert_eq!(
        (looked.size, looked.mode, looked.fileid),
        (150, 0o600, meta.ino())
    );
    let mut ops = to_export(&export);
    ops.extend([lookup(b"grows"), close(open.stateid)]);
    assert_eq!(s.run(ops).await.status, NfsStat4::NFS4_OK);
    // The Linux client's rmdir: REMOVE, then GETATTR of the directory, which sees
    // the directory as the REMOVE left it (its last look, `nfsd::seen`): one link
    // fewer (the removed directory's `..`).
    std::fs::create_dir(export.join("sub")).unwrap();
    let numlinks = || {
        NfsArgop4::GetAttr(nfs4::fh::GetAttr4Args {
            attr_request: Bitmap4::from_bits(&[35]),
        })
    };
    let links_of = |r: &NfsResop4| {
        let NfsResop4::GetAttr(Res4::Ok(ok)) = r else {
            panic!("GETATTR: {r:?}")
        };
        xdr::Decoder::new(ok.obj_attributes.attr_vals.0.clone())
            .u32()
            .unwrap()
    };
    let mut ops = to_export(&export);
    ops.extend([
        numlinks(),
        NfsArgop4::Remove(nfs4::dir::Remove4Args {
            target: "sub".into(),
        }),
        numlinks(),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let n = res.resarray.len();
    let (before, after) = (
        links_of(&res.resarray[n - 3]),
        links_of(&res.resarray[n - 1]),
    );
    assert_eq!(after + 1, before, "the REMOVE took a link of the directory");
    let mut ops = to_export(&export);
    ops.push(numlinks());
    let res = s.run(ops).await;
    assert_eq!(links_of(res.resarray.last().unwrap()), after);
    serving.stop().await;
}

/// NFSv4.1 over RPC-over-RDMA, Version One and Version Two (with reliable reply), our
/// userspace iWARP provider on both ends: a 1 MiB WRITE whose data the server pulls
/// by RDMA Read from the Call's Read chunk, and a 1 MiB READ whose data it pushes by
/// RDMA Write into the Call's Write chunk (RFC 8267 §5.1: the DDP-eligible items),
/// with OPEN, COMMIT and CLOSE around them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_write_and_read_over_rdma_versions_one_and_two() {
    use rpcrdma_transport::Counter;
    for version_two in [false, true] {
        let RdmaServer {
            export,
            rdma,
            stats: served,
            serving,
            dir: _dir,
            ..
        } = rdma_server().await;
        let conn = Conn::open_rdma(
            rdma,
            rpcrdma_transport::RdmaConfig {
                version_two,
                reliable_reply: version_two,
                ..rpcrdma_transport::RdmaConfig::default()
            },
        );
        let mut s = Session::new_on(conn, "rdma-io").await;

        let mut ops = to_export(&export);
        ops.extend([
            open_name(
                owner(&s, "open-owner"),
                "big",
                OPEN4_SHARE_ACCESS_BOTH,
                OPEN4_SHARE_DENY_NONE,
                Some(CreateHow4::Unchecked(mode_attrs(0o644))),
            ),
            NfsArgop4::GetFh,
        ]);
        let res = s.run(ops).await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        let n = res.resarray.len();
        let open = opened(&res.resarray[n - 2]);
        let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[n - 1] else {
            panic!("GETFH")
        };
        let put = || {
            NfsArgop4::PutFh(nfs4::fh::PutFh4Args {
                object: fh.object.clone(),
            })
        };

        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13 % 253) as u8).collect();
        let res = s
            .run(vec![
                put(),
                write(open.stateid, 0, &data, StableHow4::UNSTABLE4),
            ])
            .await;
        let NfsResop4::Write(Res4::Ok(w)) = &res.resarray[2] else {
            panic!("WRITE over RDMA: {res:?}")
        };
        assert_eq!(w.count, 1 << 20);
        let res = s
            .run(vec![
                put(),
                read(open.stateid, 0, 1 << 20),
                NfsArgop4::Commit(Commit4Args {
                    offset: 0,
                    count: 0,
                }),
            ])
            .await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        let NfsResop4::Read(Res4::Ok(r)) = &res.resarray[2] else {
            panic!("READ over RDMA: {res:?}")
        };
        assert!(r.data.0 == data, "READ returns what WRITE wrote");
        let res = s.run(vec![put(), close(open.stateid)]).await;
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        assert!(std::fs::read(export.join("big")).unwrap() == data);

        let ours = s.conn.rdma_stats().unwrap().latest().unwrap();
        let version = if version_two { 2 } else { 1 };
        assert_eq!(ours.get(Counter::Version), version, "{ours}");
        assert_eq!(ours.get(Counter::ReliableReply), u64::from(version_two));
        assert!(
            ours.get(Counter::ReadChunks) >= 1,
            "WRITE data in a Read chunk: {ours}"
        );
        assert!(
            ours.get(Counter::WriteChunks) >= 1,
            "a Write chunk for READ: {ours}"
        );
        assert!(served.total(Counter::RdmaReadBytes) >= 1 << 20);
        assert!(served.total(Counter::RdmaWriteBytes) >= 1 << 20);
        assert_eq!(ours.get(Counter::ErrRdmaErrorReceived), 0, "{ours}");
        drop(s);
        serving.stop().await;
    }
}
