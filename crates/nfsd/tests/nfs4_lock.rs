//! NFSv4.1 byte-range locks over TCP against the real server: LOCK, LOCKT, LOCKU
//! (RFC 8881 §18.10-18.12) between two NFSv4.1 clients, the lock stateid's rules,
//! CLOSE and FREE_STATEID with locks held, and the one lock table NFSv3's NLM and
//! NFSv4.1 share: an NLM lock stops an NFSv4.1 LOCK and the other way round.

mod common;

use std::net::SocketAddr;

use common::nfs4::*;
use common::TempDir;
use nfs4::compound::{NfsArgop4, NfsResop4};
use nfs4::state::*;
use nfs4::*;
use nfsd::nlm::xdr::{LockArgs, Nlm4Lock, Stat, TestArgs};
use nfsd::nlm::NlmConfig;
use nfsd::server::Bound;
use xdr::Bytes;

fn owner(clientid: u64, name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid,
        owner: name.as_bytes().into(),
    }
}

/// PUTROOTFH, LOOKUPs to the export, LOOKUP of `f`.
fn to_f(export: &std::path::Path) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::PutRootFh];
    ops.extend(walk(export));
    ops.push(lookup(b"f"));
    ops
}

/// Opens `f` (CLAIM_FH) for `access` as `o`: its open stateid.
async fn open_f(s: &mut Session, export: &std::path::Path, o: &str, access: u32) -> StateId4 {
    let mut ops = to_f(export);
    ops.push(NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(s.clientid, o),
        openhow: OpenFlag4(None),
        claim: OpenClaim4::Fh,
    }));
    let res = s.run(ops).await;
    match res.resarray.last().unwrap() {
        NfsResop4::Open(Res4::Ok(ok)) => ok.stateid,
        other => panic!("OPEN: {other:?}"),
    }
}

fn lock_new(
    c: u64,
    t: NfsLockType4,
    offset: u64,
    length: u64,
    open: StateId4,
    lo: &str,
) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: t,
        reclaim: false,
        offset,
        length,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(c, lo),
        }),
    })
}

fn lock_existing(t: NfsLockType4, offset: u64, length: u64, id: StateId4) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: t,
        reclaim: false,
        offset,
        length,
        locker: Locker4::Existing(ExistLockOwner4 {
            lock_stateid: id,
            lock_seqid: 0,
        }),
    })
}

fn locku(id: StateId4, offset: u64, length: u64) -> NfsArgop4 {
    NfsArgop4::LockU(LockU4Args {
        locktype: NfsLockType4::WRITE_LT,
        seqid: 0,
        lock_stateid: id,
        offset,
        length,
    })
}

/// Runs `op` on `f`: its result.
async fn on_f(s: &mut Session, export: &std::path::Path, op: NfsArgop4) -> NfsResop4 {
    let mut ops = to_f(export);
    ops.push(op);
    s.run(ops).await.resarray.pop().unwrap()
}

fn locked(r: &NfsResop4) -> StateId4 {
    match r {
        NfsResop4::Lock(LockRes::Ok(id)) => *id,
        other => panic!("LOCK: {other:?}"),
    }
}

/// A server exporting a fresh directory with a file `f`, with NLM (a fresh state
/// directory: no grace period) and NFSv4.1 sharing its lock table.
async fn server_with_nlm() -> (
    TempDir,
    TempDir,
    std::path::PathBuf,
    SocketAddr,
    common::Serving,
    std::sync::Arc<nfsd::nlm::Nlm>,
) {
    let dir = TempDir::new("nfs4-lock");
    let state = TempDir::new("nfs4-lock-state");
    std::fs::write(dir.path().join("f"), vec![7u8; 4096]).unwrap();
    let mut config = common::loopback_config(dir.path());
    config.nlm = Some(NlmConfig {
        port: 0,
        ..NlmConfig::new(state.path().to_path_buf())
    });
    let mut bound = Bound::new(&config).await.unwrap();
    bound.serve_nfs4();
    let export = bound.server().table().exports[0].export.path.clone();
    let nlm = bound.nlm().unwrap().clone();
    let addr = bound.nfs_addr().unwrap();
    (dir, state, export, addr, common::serve(bound), nlm)
}

#[tokio::test]
async fn locks_conflict_between_clients_and_follow_the_stateid_rules() {
    let (_dir, _state, export, addr, serving, _nlm) = server_with_nlm().await;
    let mut a = Session::new(addr, "lock-a").await;
    let mut b = Session::new(addr, "lock-b").await;
    let (ca, cb) = (a.clientid, b.clientid);
    let oa = open_f(&mut a, &export, "oa", OPEN4_SHARE_ACCESS_BOTH).await;
    let ob = open_f(&mut b, &export, "ob", OPEN4_SHARE_ACCESS_READ).await;

    // A write-locks bytes 0..100: a new lock owner, lock stateid seqid 1.
    let la = locked(
        &on_f(
            &mut a,
            &export,
            lock_new(ca, NfsLockType4::WRITE_LT, 0, 100, oa, "la"),
        )
        .await,
    );
    assert_eq!(la.seqid, 1);
    assert_ne!(la.other, oa.other);
    // B: a read lock over 50..60 is denied, naming A's lock; so is LOCKT.
    let r = on_f(
        &mut b,
        &export,
        lock_new(cb, NfsLockType4::READ_LT, 50, 10, ob, "lb"),
    )
    .await;
    let want = Lock4Denied {
        offset: 0,
        length: 100,
        locktype: NfsLockType4::WRITE_LT,
        owner: StateOwner4 {
            clientid: a.clientid,
            owner: "la".into(),
        },
    };
    assert_eq!(r, NfsResop4::Lock(LockRes::Denied(want.clone())));
    let lockt = |c: u64, o: &str, off, len| {
        NfsArgop4::LockT(LockT4Args {
            locktype: NfsLockType4::READ_LT,
            offset: off,
            length: len,
            owner: owner(c, o),
        })
    };
    let r = on_f(&mut b, &export, lockt(cb, "lb", 99, 1)).await;
    assert_eq!(r, NfsResop4::LockT(LockRes::Denied(want)));
    assert_eq!(
        on_f(&mut b, &export, lockt(cb, "lb", 100, u64::MAX)).await,
        NfsResop4::LockT(LockRes::Ok(Void))
    );
    // B's write lock needs a write open; a zero length and a range past 2^64 are
    // invalid.
    for (op, want) in [
        (
            lock_new(cb, NfsLockType4::WRITE_LT, 200, 10, ob, "lb"),
            NfsStat4::NFS4ERR_OPENMODE,
        ),
        (
            lock_new(cb, NfsLockType4::READ_LT, 200, 0, ob, "lb"),
            NfsStat4::NFS4ERR_INVAL,
        ),
        (
            lock_new(cb, NfsLockType4::READ_LT, u64::MAX - 5, 10, ob, "lb"),
            NfsStat4::NFS4ERR_INVAL,
        ),
    ] {
        assert_eq!(on_f(&mut b, &export, op).await.status(), want);
    }
    // B read-locks past A's range: its lock stateid.
    let lb = locked(
        &on_f(
            &mut b,
            &export,
            lock_new(cb, NfsLockType4::READ_LT, 100, 10, ob, "lb"),
        )
        .await,
    );

    // A extends with its lock stateid (seqid moves on); the old seqid is old.
    let la2 = locked(
        &on_f(
            &mut a,
            &export,
            lock_existing(NfsLockType4::WRITE_LT, 0, 50, la),
        )
        .await,
    );
    assert_eq!((la2.other, la2.seqid), (la.other, 2));
    assert_eq!(
        on_f(
            &mut a,
            &export,
            lock_existing(NfsLockType4::WRITE_LT, 0, 1, la)
        )
        .await
        .status(),
        NfsStat4::NFS4ERR_OLD_STATEID
    );
    // A's stateid is not B's to use.
    assert_eq!(
        on_f(&mut b, &export, locku(la2, 0, 100)).await.status(),
        NfsStat4::NFS4ERR_BAD_STATEID
    );
    // FREE_STATEID while A holds locks: NFS4ERR_LOCKS_HELD; after LOCKU: freed.
    let free = |id| NfsArgop4::FreeStateId(FreeStateId4Args { fsa_stateid: id });
    assert_eq!(
        a.run(vec![free(la2)]).await.status,
        NfsStat4::NFS4ERR_LOCKS_HELD
    );
    let r = on_f(&mut a, &export, locku(la2, 0, u64::MAX)).await;
    let NfsResop4::LockU(Res4::Ok(la3)) = r else {
        panic!("LOCKU: {r:?}")
    };
    assert_eq!(la3.seqid, 3);
    // Now B gets its read lock over 50..60 (with its lock stateid).
    locked(
        &on_f(
            &mut b,
            &export,
            lock_existing(NfsLockType4::READ_LT, 50, 10, lb),
        )
        .await,
    );
    let res = a
        .run(vec![
            NfsArgop4::TestStateId(TestStateId4Args(vec![la3, lb])),
            free(la3),
        ])
        .await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(
        res.resarray[1],
        NfsResop4::TestStateId(Res4::Ok(TestStateId4ResOk(vec![
            NfsStat4::NFS4_OK,
            NfsStat4::NFS4ERR_BAD_STATEID
        ])))
    );
    // CLOSE releases the locks of the lock owners made from the open: A may then
    // write-lock what B had.
    let r = on_f(
        &mut b,
        &export,
        NfsArgop4::Close(Close4Args {
            seqid: 0,
            open_stateid: ob,
        }),
    )
    .await;
    assert_eq!(r.status(), NfsStat4::NFS4_OK);
    locked(
        &on_f(
            &mut a,
            &export,
            lock_new(ca, NfsLockType4::WRITE_LT, 0, u64::MAX, oa, "la"),
        )
        .await,
    );
    serving.stop().await;
}

#[tokio::test]
async fn nlm_and_nfs4_locks_see_each_other() {
    let (_dir, _state, export, addr, serving, nlm) = server_with_nlm().await;
    let mut s = Session::new(addr, "with-nlm").await;
    let me = s.clientid;
    let open = open_f(&mut s, &export, "o", OPEN4_SHARE_ACCESS_BOTH).await;
    // The file's handle, as NLM gets it (the NFSv3 handle: the same bytes).
    let mut ops = to_f(&export);
    ops.push(NfsArgop4::GetFh);
    let res = s.run(ops).await;
    let NfsResop4::GetFh(Res4::Ok(fh)) = res.resarray.last().unwrap() else {
        panic!("GETFH")
    };
    let nlm_lock = |offset, len| Nlm4Lock {
        caller_name: Bytes::from_static(b"v3-host"),
        fh: fh.object.0.clone(),
        oh: Bytes::from_static(b"1@v3-host"),
        svid: 1,
        offset,
        len,
    };
    // An NFSv3 client's NLM lock on bytes 0..10...
    let args = LockArgs {
        cookie: Bytes::from_static(b"c"),
        block: false,
        exclusive: true,
        lock: nlm_lock(0, 10),
        reclaim: false,
        state: 1,
    };
    assert_eq!(nlm.lock(&args, None, false), Stat::Granted);
    // ...stops an NFSv4.1 LOCK over it, shown with client ID 0 and NLM's owner.
    let r = on_f(
        &mut s,
        &export,
        lock_new(me, NfsLockType4::READ_LT, 5, 1, open, "lo"),
    )
    .await;
    let NfsResop4::Lock(LockRes::Denied(d)) = r else {
        panic!("LOCK: {r:?}")
    };
    assert_eq!((d.offset, d.length, d.owner.clientid), (0, 10, 0));
    assert_eq!(&d.owner.owner.0[..], b"1@v3-host");
    // The NFSv4.1 lock past it, in turn, is what NLM's TEST finds.
    locked(
        &on_f(
            &mut s,
            &export,
            lock_new(me, NfsLockType4::WRITE_LT, 10, 10, open, "lo"),
        )
        .await,
    );
    let (stat, holder) = nlm.test(&TestArgs {
        cookie: Bytes::from_static(b"t"),
        exclusive: false,
        lock: nlm_lock(15, 1),
    });
    assert_eq!(stat, Stat::Denied);
    let h = holder.unwrap();
    assert_eq!((h.range.start, h.range.end, h.exclusive), (10, 19, true));
    assert_eq!(&h.owner.oh[..], b"lo");
    serving.stop().await;
}

/// §8.2.1: READ, WRITE and SETATTR take a lock stateid, and the open it was made
/// from decides what it allows (the Linux client sends its lock stateid while it
/// holds locks). pynfs's CSID4 as a test: LOCK, then WRITE and LOCKU with the
/// current stateid (§16.2.3.1.2: LOCK's), in one COMPOUND.
#[tokio::test]
async fn io_takes_a_lock_stateid_and_its_open_decides() {
    use nfs4::io::{Read4Args, StableHow4, Write4Args};
    let (_dir, _state, export, addr, serving, _nlm) = server_with_nlm().await;
    let mut s = Session::new(addr, "lockio").await;
    let c = s.clientid;
    let open = open_f(&mut s, &export, "o", OPEN4_SHARE_ACCESS_BOTH).await;
    let write = |stateid, data: &[u8]| {
        NfsArgop4::Write(Write4Args {
            stateid,
            offset: 5,
            stable: StableHow4::FILE_SYNC4,
            data: DdpData(Bytes::copy_from_slice(data)),
        })
    };
    let mut ops = to_f(&export);
    ops.extend([
        lock_new(c, NfsLockType4::WRITE_LT, 0, u64::MAX, open, "lo"),
        write(StateId4::CURRENT, b"under the lock"),
        locku(StateId4::CURRENT, 0, u64::MAX),
    ]);
    let res = s.run(ops).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    assert_eq!(
        &std::fs::read(export.join("f")).unwrap()[5..19],
        b"under the lock"
    );

    // A lock stateid made from a read-only open reads, and does not write.
    let ro = open_f(&mut s, &export, "r", OPEN4_SHARE_ACCESS_READ).await;
    let lock = locked(
        &on_f(
            &mut s,
            &export,
            lock_new(c, NfsLockType4::READ_LT, 0, 10, ro, "lr"),
        )
        .await,
    );
    let read = NfsArgop4::Read(Read4Args {
        stateid: lock,
        offset: 0,
        count: 4,
    });
    let r = on_f(&mut s, &export, read).await;
    assert_eq!(r.status(), NfsStat4::NFS4_OK, "{r:?}");
    let w = on_f(&mut s, &export, write(lock, b"no")).await;
    assert_eq!(w.status(), NfsStat4::NFS4ERR_OPENMODE, "{w:?}");
    // An old seqid of the lock stateid is OLD_STATEID, as for an open stateid.
    let relocked = locked(
        &on_f(
            &mut s,
            &export,
            lock_existing(NfsLockType4::READ_LT, 20, 5, lock),
        )
        .await,
    );
    assert!(relocked.seqid > lock.seqid);
    let w = on_f(
        &mut s,
        &export,
        NfsArgop4::Read(Read4Args {
            stateid: lock,
            offset: 0,
            count: 4,
        }),
    )
    .await;
    assert_eq!(w.status(), NfsStat4::NFS4ERR_OLD_STATEID, "{w:?}");
    serving.stop().await;
}

/// The Linux client frees a process's lock state with a FREE_STATEID it does not
/// wait for, and gives the next process the same lock owner name at once: that
/// one's first LOCK finds the same stateid (as knfsd's does), one seqid on. The late
/// FREE_STATEID of the first, with its older seqid, is NFS4ERR_OLD_STATEID and frees
/// nothing: the second keeps locking and unlocking with its stateid (§8.2.2). Before,
/// it freed the stateid between the second's LOCKU and its next LOCK, which failed
/// NFS4ERR_BAD_STATEID (seen in the lab's lock loops under load).
#[tokio::test]
async fn a_late_free_stateid_of_a_reused_lock_owner_frees_nothing() {
    use nfs4::state::FreeStateId4Args;
    let (_dir, _state, export, addr, serving, _nlm) = server_with_nlm().await;
    let mut s = Session::new(addr, "reuse").await;
    let c = s.clientid;
    let open = open_f(&mut s, &export, "o", OPEN4_SHARE_ACCESS_BOTH).await;
    // The first process: a lock and its release.
    let first = locked(
        &on_f(
            &mut s,
            &export,
            lock_new(c, NfsLockType4::WRITE_LT, 0, 1, open, "lock id:1"),
        )
        .await,
    );
    let NfsResop4::LockU(Res4::Ok(freed)) = on_f(&mut s, &export, locku(first, 0, 1)).await else {
        panic!("LOCKU")
    };
    // The second process, same owner name: the same stateid, one seqid on.
    let second = locked(
        &on_f(
            &mut s,
            &export,
            lock_new(c, NfsLockType4::WRITE_LT, 5, 1, open, "lock id:1"),
        )
        .await,
    );
    assert_eq!(second.other, first.other);
    assert!(second.seqid > freed.seqid);
    let NfsResop4::LockU(Res4::Ok(now)) = on_f(&mut s, &export, locku(second, 5, 1)).await else {
        panic!("LOCKU")
    };
    // The first's FREE_STATEID arrives late.
    let late = NfsArgop4::FreeStateId(FreeStateId4Args { fsa_stateid: freed });
    let r = on_f(&mut s, &export, late).await;
    assert_eq!(r.status(), NfsStat4::NFS4ERR_OLD_STATEID, "{r:?}");
    // The second's stateid is still there.
    let again = on_f(
        &mut s,
        &export,
        lock_existing(NfsLockType4::WRITE_LT, 7, 1, now),
    )
    .await;
    assert_eq!(again.status(), NfsStat4::NFS4_OK, "{again:?}");
    serving.stop().await;
}
