//! NFS/RDMA on a verbs device: the threads that use the device never switch identity
//! (Linux then refuses their writes to it, docs/linux-facts.md, "RDMA device
//! descriptors and thread credentials"). Such a thread is marked
//! (`creds::keep_identity`), and its calls' file-system work runs on another runtime
//! (`NfsService::on`). Needs root (identities are switched only then).

mod common;

use std::sync::Arc;

use common::*;
use nfs3::attr::*;
use nfs3::dir::*;
use nfs3::io::*;
use nfs3::*;
use nfsd::{NfsService, Squash};
use oncrpc::Dispatcher;
use xdr::Encode;

/// `f` on a thread of its own marked as an RDMA device thread.
fn on_a_device_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            nfsd::creds::keep_identity();
            f()
        })
        .join()
        .unwrap()
    })
}

/// A dispatcher of NFS version 3 served by `service`.
fn nfs_only(service: NfsService) -> Dispatcher {
    let mut d = Dispatcher::new();
    d.register(NFS_PROGRAM, [NFS_V3], Arc::new(service))
        .unwrap();
    d
}

#[test]
fn calls_from_a_device_thread_run_elsewhere_and_never_switch_it() {
    let mut h = Harness::with(false, Squash::None, &[]);
    if !h.server.switching {
        eprintln!("not root: identity switching is off, skipping");
        return;
    }
    let root = h.root();
    let file = h.new_file(&root, "f");
    h.who = Who::Sys(1234, 4321, vec![4321]);
    // LOOKUP checks search permission as the caller: it switches.
    let lookup = Lookup3Args {
        what: DirOpArgs3 {
            dir: root.clone(),
            name: "f".into(),
        },
    }
    .to_xdr()
    .to_bytes();
    let read = Read3Args {
        file,
        offset: 0,
        count: 16,
    }
    .to_xdr()
    .to_bytes();
    // A metadata call run inline on a device thread would switch it: refused.
    assert_eq!(
        on_a_device_thread(|| h.nfs_raw(NfsProc3::LOOKUP, &lookup)),
        Reply::Accept(oncrpc::AcceptStat::SYSTEM_ERR)
    );
    // With the work handed to another runtime, both kinds of call succeed (inline on
    // its workers, READ on its blocking pool).
    let calls = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    h.dispatcher = nfs_only(NfsService::new(h.server.clone()).on(calls.handle().clone()));
    on_a_device_thread(|| {
        assert!(matches!(h.nfs_raw(NfsProc3::LOOKUP, &lookup), Reply::Ok(_)));
        assert!(matches!(h.nfs_raw(NfsProc3::READ, &read), Reply::Ok(_)));
        assert!(!nfsd::creds::ever_switched());
    });
    // With a delegate thread, the inline calls that switch run there, the device
    // thread waiting: as the caller (a directory closed to them is NFS3ERR_ACCES),
    // and the device thread still never switched. READ still goes to the runtime.
    h.who = Who::Sys(0, 0, vec![]);
    let private = h.new_dir(&root, "private");
    let closed = SetAttr3Args {
        object: private.clone(),
        new_attributes: Sattr3 {
            mode: Some(0o700),
            ..Sattr3::default()
        },
        guard: None,
    };
    assert!(matches!(
        h.nfs_raw(NfsProc3::SETATTR, &closed.to_xdr().to_bytes()),
        Reply::Ok(_)
    ));
    let lookup_private = Lookup3Args {
        what: DirOpArgs3 {
            dir: private,
            name: "x".into(),
        },
    }
    .to_xdr()
    .to_bytes();
    let delegate = nfsd::delegate::Delegate::start("test-delegate").unwrap();
    h.dispatcher = nfs_only(
        NfsService::new(h.server.clone())
            .on(calls.handle().clone())
            .delegating(delegate),
    );
    on_a_device_thread(|| {
        assert!(matches!(h.nfs_raw(NfsProc3::LOOKUP, &lookup), Reply::Ok(_)));
        assert!(matches!(h.nfs_raw(NfsProc3::READ, &read), Reply::Ok(_)));
        assert!(!nfsd::creds::ever_switched());
    });
    h.who = Who::Sys(999, 999, vec![]);
    on_a_device_thread(|| {
        let Reply::Ok(body) = h.nfs_raw(NfsProc3::LOOKUP, &lookup_private) else {
            panic!("LOOKUP not answered");
        };
        let res = <Lookup3Res as xdr::Decode>::from_xdr(body).unwrap();
        assert_eq!(status(&res), NfsStat3::NFS3ERR_ACCES);
        assert!(!nfsd::creds::ever_switched());
    });
    h.who = Who::Sys(1234, 4321, vec![4321]);
    // NULL and GETATTR never switch: they stay on the device thread. With the other runtime
    // gone, they are still answered, and so is LOOKUP (by the delegate), while a call
    // that needs that runtime (READ) fails.
    drop(calls);
    let getattr = GetAttr3Args { object: root }.to_xdr().to_bytes();
    on_a_device_thread(|| {
        assert!(matches!(h.nfs_raw(NfsProc3::NULL, &[]), Reply::Ok(_)));
        assert!(matches!(
            h.nfs_raw(NfsProc3::GETATTR, &getattr),
            Reply::Ok(_)
        ));
        assert!(matches!(h.nfs_raw(NfsProc3::LOOKUP, &lookup), Reply::Ok(_)));
        assert_eq!(
            h.nfs_raw(NfsProc3::READ, &read),
            Reply::Accept(oncrpc::AcceptStat::SYSTEM_ERR)
        );
        assert!(!nfsd::creds::ever_switched());
    });
}
