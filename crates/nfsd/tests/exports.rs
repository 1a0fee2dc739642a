//! The exports rules through the dispatcher, with the caller's address and port as a
//! transport reports them (`Dispatcher::dispatch_from`): MNT and every NFS procedure
//! refuse a client the export does not list (or a `secure` export a high port), read-
//! only and squash options are the caller's, a reload takes effect at once. The
//! `nfsd` binary with libnfs (tests/binary.rs) and the guest kernel (the lab) check the
//! same rules with real clients.

mod common;

use std::path::Path;

use common::{Harness, Reply};
use nfs3::dir::*;
use nfs3::mount::*;
use nfs3::*;
use nfsd::exports::parse;
use nfsd::ExportLine;
use oncrpc::{Peer, Protocol};
use xdr::{Bytes, Encoder};

fn peer(addr: &str, protocol: Protocol) -> Option<Peer> {
    Some(Peer {
        addr: addr.parse().unwrap(),
        protocol,
    })
}

fn lines(text: &str) -> Vec<ExportLine> {
    parse(text, &mut nfsd::exports::system_resolve).unwrap()
}

fn mnt(h: &Harness, path: &Path) -> MountRes3 {
    let path = DirPath(Bytes::copy_from_slice(path.as_os_str().as_encoded_bytes()));
    h.mount(MountProc3::MNT, &path)
}

/// The status word of an NFS reply.
fn status_of(r: Reply) -> NfsStat3 {
    match r {
        Reply::Ok(b) => NfsStat3(u32::from_be_bytes(b[..4].try_into().unwrap())),
        other => panic!("{other:?}"),
    }
}

/// Arguments of each NFSv3 procedure but NULL, all naming `fh` (twice for RENAME and
/// LINK), otherwise harmless.
fn every_procedure(fh: &NfsFh3) -> Vec<(NfsProc3, Bytes)> {
    let sattr = |e: &mut Encoder| {
        for _ in 0..6 {
            e.u32(0);
        }
    };
    let mut out = Vec::new();
    let mut add = |p: NfsProc3, tail: &dyn Fn(&mut Encoder)| {
        let mut e = Encoder::new();
        e.opaque(&fh.0);
        tail(&mut e);
        out.push((p, e.finish().to_bytes()));
    };
    add(NfsProc3::GETATTR, &|_| {});
    add(NfsProc3::SETATTR, &|e| {
        sattr(e);
        e.bool(false);
    });
    add(NfsProc3::LOOKUP, &|e| {
        e.string(b"f");
    });
    add(NfsProc3::ACCESS, &|e| {
        e.u32(0x3f);
    });
    add(NfsProc3::READLINK, &|_| {});
    add(NfsProc3::READ, &|e| {
        e.u64(0).u32(10);
    });
    add(NfsProc3::WRITE, &|e| {
        e.u64(0).u32(1).u32(2).opaque(b"x");
    });
    add(NfsProc3::CREATE, &|e| {
        e.string(b"new").u32(0);
        sattr(e);
    });
    add(NfsProc3::MKDIR, &|e| {
        e.string(b"newdir");
        sattr(e);
    });
    add(NfsProc3::SYMLINK, &|e| {
        e.string(b"newlink");
        sattr(e);
        e.string(b"f");
    });
    add(NfsProc3::MKNOD, &|e| {
        e.string(b"fifo").u32(7);
        sattr(e);
    });
    add(NfsProc3::REMOVE, &|e| {
        e.string(b"f");
    });
    add(NfsProc3::RMDIR, &|e| {
        e.string(b"d");
    });
    add(NfsProc3::RENAME, &|e| {
        e.string(b"f").opaque(&fh.0).string(b"g");
    });
    add(NfsProc3::LINK, &|e| {
        e.opaque(&fh.0).string(b"hard");
    });
    add(NfsProc3::READDIR, &|e| {
        e.u64(0).opaque_fixed(&[0; 8]).u32(4096);
    });
    add(NfsProc3::READDIRPLUS, &|e| {
        e.u64(0).opaque_fixed(&[0; 8]).u32(4096).u32(8192);
    });
    add(NfsProc3::FSSTAT, &|_| {});
    add(NfsProc3::FSINFO, &|_| {});
    add(NfsProc3::PATHCONF, &|_| {});
    add(NfsProc3::COMMIT, &|e| {
        e.u64(0).u32(0);
    });
    out
}

/// A client the export does not list: MNT3ERR_ACCES, and NFS3ERR_ACCES from every
/// procedure for every handle it got while it was listed, over TCP and RDMA; the
/// export is left as it was.
#[test]
fn a_client_not_listed_gets_acces_from_mnt_and_every_procedure() {
    let mut h = Harness::with_lines(|ex| {
        lines(&format!(
            "{} 10.0.0.1(rw,no_root_squash,insecure)",
            ex.display()
        ))
    });
    h.peer = peer("10.0.0.1:40000", Protocol::Tcp);
    let root = h.root();
    let file = h.new_file(&root, "f");
    h.new_dir(&root, "d");
    let listing = |h: &Harness| {
        let mut v: Vec<_> = std::fs::read_dir(&h.export)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing(&h);
    for (who, transport) in [
        ("10.0.0.2:40000", Protocol::Tcp),
        ("[::ffff:10.0.0.3]:700", Protocol::Tcp),
        ("10.0.0.2:40000", Protocol::Rdma),
    ] {
        h.peer = peer(who, transport);
        assert_eq!(
            mnt(&h, &h.export.clone()),
            MountRes3::Fail(MountStat3::MNT3ERR_ACCES),
            "{who}"
        );
        let procs = every_procedure(&root);
        assert_eq!(procs.len(), 21);
        for fh in [&root, &file] {
            for (p, args) in every_procedure(fh) {
                let got = status_of(h.nfs_raw(p, &args));
                assert_eq!(got, NfsStat3::NFS3ERR_ACCES, "{:?} from {who}", p.name());
            }
        }
        // NULL has no handle: answered.
        assert!(matches!(h.nfs_raw(NfsProc3::NULL, &[]), Reply::Ok(_)));
    }
    assert_eq!(listing(&h), before);
    // The listed client still gets everything.
    h.peer = peer("10.0.0.1:40000", Protocol::Rdma);
    assert!(matches!(mnt(&h, &h.export.clone()), MountRes3::Ok { .. }));
    let (p, args) = &every_procedure(&file)[0];
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3_OK);
    h.assert_outside_untouched();
}

/// `secure`: a TCP caller from port 1024 or above is refused (MNT and handles); one
/// from below 1024, or over RDMA (as knfsd counts it), is served.
#[test]
fn secure_exports_refuse_high_tcp_ports_and_accept_rdma() {
    let mut h = Harness::with_lines(|ex| lines(&format!("{} 10.0.0.0/8(rw)", ex.display())));
    h.peer = peer("10.0.0.1:1023", Protocol::Tcp);
    let root = h.root();
    h.peer = peer("10.0.0.1:1024", Protocol::Tcp);
    assert_eq!(
        mnt(&h, &h.export.clone()),
        MountRes3::Fail(MountStat3::MNT3ERR_ACCES)
    );
    let (p, args) = &every_procedure(&root)[0];
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3ERR_ACCES);
    h.peer = peer("10.0.0.1:50000", Protocol::Rdma);
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3_OK);
}

/// Read-only and squash options are those of the caller's entry.
#[test]
fn read_only_and_squash_are_per_client() {
    let mut h = Harness::with_lines(|ex| {
        lines(&format!(
            "{} 10.0.0.1(ro,insecure) 10.0.0.2(rw,all_squash,anonuid=1234,anongid=4321,insecure) 10.0.0.3(rw,no_root_squash,insecure)",
            ex.display()
        ))
    });
    assert!(
        h.server.switching,
        "this test runs as root (identities are switched only then), as scripts/test-all does"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&h.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    h.peer = peer("10.0.0.1:700", Protocol::Tcp);
    let root = h.root();
    let ro = h.create(&root, "ro", CreateHow3::Unchecked(Sattr3::default()));
    assert_eq!(status(&ro), NfsStat3::NFS3ERR_ROFS);
    h.peer = peer("10.0.0.2:700", Protocol::Tcp);
    h.new_file(&root, "squashed");
    h.peer = peer("10.0.0.3:700", Protocol::Tcp);
    h.new_file(&root, "as-root");
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(h.export.join("squashed")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 4321));
    let m = std::fs::metadata(h.export.join("as-root")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    assert!(!h.export.join("ro").exists());
}

fn status<T, F>(r: &NfsResult<T, F>) -> NfsStat3 {
    match r {
        NfsResult::Ok(_) => NfsStat3::NFS3_OK,
        NfsResult::Fail(s, _) => *s,
    }
}

/// A reload replaces the rules for calls from then on; a handle taken before is
/// refused once its client is no longer listed, and served again when it is.
#[test]
fn a_reload_takes_effect_for_handles_already_given_out() {
    let mut h = Harness::with_lines(|ex| lines(&format!("{} 10.0.0.1(rw,insecure)", ex.display())));
    h.peer = peer("10.0.0.1:700", Protocol::Tcp);
    let root = h.root();
    let (p, args) = &every_procedure(&root)[0];
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3_OK);
    let ex = h.export.display().to_string();
    h.server
        .reload(&lines(&format!("{ex} 10.0.0.9(rw,insecure)")))
        .unwrap();
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3ERR_ACCES);
    // A reload that fails (a directory that does not exist) changes nothing.
    let e = h
        .server
        .reload(&lines(&format!(
            "{ex} 10.0.0.1(rw,insecure)\n/nonexistent/dir *(rw)"
        )))
        .unwrap_err();
    assert!(
        e.to_string().contains("export /nonexistent/dir (line 2)"),
        "{e}"
    );
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3ERR_ACCES);
    h.server
        .reload(&lines(&format!("{ex} 10.0.0.0/24(rw,insecure)")))
        .unwrap();
    assert_eq!(status_of(h.nfs_raw(*p, args)), NfsStat3::NFS3_OK);
}
