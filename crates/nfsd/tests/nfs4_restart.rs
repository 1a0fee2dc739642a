//! NFSv4.1 restart recovery (RFC 8881 §8.4.2, §8.6.3) against the real server: a
//! client with an open and a lock completes its reclaim (and so is recorded in the
//! state directory); the server stops and starts again on the same state
//! directory; in the grace period that client reclaims its open (CLAIM_PREVIOUS)
//! and lock (`reclaim`), new state is NFS4ERR_GRACE, another client's reclaim is
//! NFS4ERR_NO_GRACE, and an NFSv3 client's NLM lock waits too (one lock table, one
//! grace period); the recorded client's RECLAIM_COMPLETE ends the grace period,
//! after which the reclaimed lock still stops the other client.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::nfs4::*;
use common::TempDir;
use nfs4::compound::{NfsArgop4, NfsResop4};
use nfs4::session::ReclaimComplete4Args;
use nfs4::state::*;
use nfs4::*;
use nfsd::nlm::xdr::{LockArgs, Nlm4Lock, Stat};
use nfsd::nlm::{Nlm, NlmConfig};
use nfsd::server::Bound;
use std::sync::Arc;
use xdr::Bytes;

fn owner(clientid: u64, name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid,
        owner: name.as_bytes().into(),
    }
}

fn open(clientid: u64, claim: OpenClaim4) -> NfsArgop4 {
    NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(clientid, "open-owner"),
        openhow: OpenFlag4(None),
        claim,
    })
}

fn lock(clientid: u64, open: StateId4, reclaim: bool) -> NfsArgop4 {
    NfsArgop4::Lock(Lock4Args {
        locktype: NfsLockType4::WRITE_LT,
        reclaim,
        offset: 0,
        length: 100,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: owner(clientid, "lock-owner"),
        }),
    })
}

fn reclaim_complete() -> NfsArgop4 {
    NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false })
}

/// Binds a server on `export` keeping its handle key, client records and NSM state
/// in `state`, with NLM.
async fn start(
    export: &Path,
    state: &Path,
) -> (SocketAddr, common::Serving, Vec<String>, Arc<Nlm>) {
    let mut config = common::loopback_config(export);
    config.handles = nfsd::HandleConfig::new(nfsd::HandleKey::load_or_create(state).unwrap());
    config.nlm = Some(NlmConfig {
        port: 0,
        ..NlmConfig::new(state.to_path_buf())
    });
    let mut bound = Bound::new(&config).await.unwrap();
    bound.serve_nfs4_recoverable(state).unwrap();
    let lines = bound.describe();
    let addr = bound.nfs_addr().unwrap();
    let nlm = bound.nlm().unwrap().clone();
    (addr, common::serve(bound), lines, nlm)
}

/// An NFSv3 client's exclusive NLM lock of bytes 1000..1010 of `fh`.
fn nlm_lock(fh: &NfsFh4) -> LockArgs {
    LockArgs {
        cookie: Bytes::from_static(b"c"),
        block: false,
        exclusive: true,
        lock: Nlm4Lock {
            caller_name: Bytes::from_static(b"v3-host"),
            fh: fh.0.clone(),
            oh: Bytes::from_static(b"1@v3-host"),
            svid: 1,
            offset: 1000,
            len: 10,
        },
        reclaim: false,
        state: 1,
    }
}

fn opened(r: &NfsResop4) -> StateId4 {
    match r {
        NfsResop4::Open(Res4::Ok(ok)) => ok.stateid,
        other => panic!("OPEN: {other:?}"),
    }
}

#[tokio::test]
async fn a_recorded_client_reclaims_its_open_and_lock_in_the_grace_period() {
    let dir = TempDir::new("nfs4-restart");
    let state = TempDir::new("nfs4-restart-state");
    std::fs::write(dir.path().join("f"), b"reclaimed file").unwrap();
    let (addr, serving, lines, _) = start(dir.path(), state.path()).await;
    assert!(
        lines.iter().any(|l| l.contains("no grace period")),
        "{lines:?}"
    );
    let export = std::fs::canonicalize(dir.path()).unwrap();
    let mut to_f = vec![NfsArgop4::PutRootFh];
    to_f.extend(walk(&export));
    to_f.push(lookup(b"f"));

    // Before: the client, its (empty) reclaim complete, opens and locks "f".
    let mut a = Session::new(addr, "client-a").await;
    let ca = a.clientid;
    let mut ops = to_f.clone();
    ops.extend([open(ca, OpenClaim4::Fh), NfsArgop4::GetFh]);
    let res = a.run(ops).await;
    let n = res.resarray.len();
    let before = opened(&res.resarray[n - 2]);
    let NfsResop4::GetFh(Res4::Ok(fh)) = &res.resarray[n - 1] else {
        panic!("GETFH")
    };
    let fh = fh.object.clone();
    let put = || NfsArgop4::PutFh(nfs4::fh::PutFh4Args { object: fh.clone() });
    let res = a.run(vec![put(), lock(ca, before, false)]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    serving.stop().await;

    // The restart: one client may reclaim, the grace period runs.
    let (addr, serving, lines, nlm) = start(dir.path(), state.path()).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("grace period") && l.contains("1 client(s)")),
        "{lines:?}"
    );
    let mut a = Session::to_reclaim(addr, "client-a").await;
    // A client with nothing to reclaim says so at once (its RECLAIM_COMPLETE).
    let mut b = Session::new(addr, "client-b").await;
    let (ca, cb) = (a.clientid, b.clientid);
    // New state waits for the grace period: OPEN, REMOVE.
    let mut ops = to_f.clone();
    ops.push(open(cb, OpenClaim4::Fh));
    assert_eq!(b.run(ops).await.status, NfsStat4::NFS4ERR_GRACE);
    let mut ops = to_f.clone();
    ops.pop();
    ops.push(NfsArgop4::Remove(nfs4::dir::Remove4Args {
        target: "f".into(),
    }));
    assert_eq!(b.run(ops).await.status, NfsStat4::NFS4ERR_GRACE);
    // A client that was not recorded has nothing to reclaim.
    let prev = || OpenClaim4::Previous(OpenDelegationType4::OPEN_DELEGATE_NONE);
    let res = b.run(vec![put(), open(cb, prev())]).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_NO_GRACE);
    // The recorded one reclaims its open and its lock; a new lock still waits.
    let res = a.run(vec![put(), open(ca, prev())]).await;
    let reopened = opened(&res.resarray[2]);
    let res = a.run(vec![put(), lock(ca, reopened, true)]).await;
    assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
    let res = a.run(vec![put(), lock(ca, reopened, false)]).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_GRACE);
    // An NFSv3 client's lock waits as well.
    assert_eq!(
        nlm.lock(&nlm_lock(&fh), None, false),
        Stat::DeniedGracePeriod
    );
    // Its RECLAIM_COMPLETE ends its reclaims, and the grace period (it was the only
    // recorded client).
    assert_eq!(
        a.run(vec![reclaim_complete()]).await.status,
        NfsStat4::NFS4_OK
    );
    assert_eq!(nlm.lock(&nlm_lock(&fh), None, false), Stat::Granted);
    let res = a.run(vec![put(), open(ca, prev())]).await;
    assert_eq!(res.status, NfsStat4::NFS4ERR_NO_GRACE);
    // The other client may open now, and the reclaimed lock stops its lock.
    let res = b.run(vec![put(), open(cb, OpenClaim4::Fh)]).await;
    let ob = opened(&res.resarray[2]);
    let res = b.run(vec![put(), lock(cb, ob, false)]).await;
    let NfsResop4::Lock(LockRes::Denied(d)) = &res.resarray[2] else {
        panic!("LOCK: {res:?}")
    };
    assert_eq!(
        (d.owner.clientid, &d.owner.owner.0[..]),
        (ca, &b"lock-owner"[..])
    );
    serving.stop().await;

    // A third start: both clients are recorded (each completed its reclaim).
    let (_, serving, lines, _) = start(dir.path(), state.path()).await;
    assert!(lines.iter().any(|l| l.contains("2 client(s)")), "{lines:?}");
    serving.stop().await;
}
