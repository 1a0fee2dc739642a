//! Every NFSv3 procedure and every error status, through the RPC dispatcher, against
//! a temporary export (RFC 1813 §3.3 per test).

mod common;

use common::*;
use nfs3::attr::*;
use nfs3::dir::*;
use nfs3::fs::*;
use nfs3::io::*;
use nfs3::mount::*;
use nfs3::readdir::*;
use nfs3::*;
use nfsd::Squash;
use xdr::{Bytes, Encode};

fn sattr_mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

fn write(h: &Harness, fh: &NfsFh3, offset: u64, data: &[u8], stable: StableHow) -> Write3Res {
    h.nfs(
        NfsProc3::WRITE,
        &Write3Args {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: DdpData(Bytes::copy_from_slice(data)),
        },
    )
}

fn read(h: &Harness, fh: &NfsFh3, offset: u64, count: u32) -> Read3Res {
    h.nfs(
        NfsProc3::READ,
        &Read3Args {
            file: fh.clone(),
            offset,
            count,
        },
    )
}

fn getattr(h: &Harness, fh: &NfsFh3) -> NfsResult<GetAttr3ResOk, Void> {
    h.nfs(NfsProc3::GETATTR, &GetAttr3Args { object: fh.clone() })
}

fn attrs(h: &Harness, fh: &NfsFh3) -> Fattr3 {
    match getattr(h, fh) {
        NfsResult::Ok(ok) => ok.obj_attributes,
        NfsResult::Fail(s, _) => panic!("GETATTR: {s:?}"),
    }
}

fn remove(h: &Harness, proc: NfsProc3, dir: &NfsFh3, name: &str) -> Remove3Res {
    h.nfs(
        proc,
        &Remove3Args {
            object: DirOpArgs3 {
                dir: dir.clone(),
                name: name.into(),
            },
        },
    )
}

fn readdir(h: &Harness, dir: &NfsFh3, cookie: u64, verf: CookieVerf3, count: u32) -> ReadDir3Res {
    h.nfs(
        NfsProc3::READDIR,
        &ReadDir3Args {
            dir: dir.clone(),
            cookie,
            cookieverf: verf,
            count,
        },
    )
}

#[test]
fn null_answers_void() {
    let h = Harness::new();
    assert_eq!(h.nfs_raw(NfsProc3::NULL, &[]), Reply::Ok(Bytes::new()));
}

#[test]
fn mount_mnt_export_dump_umnt() {
    let h = Harness::new();
    let root = h.root();
    assert_eq!(attrs(&h, &root).ftype, Ftype3::NF3DIR);
    // A directory inside the export can be mounted too; a file or a missing path not.
    h.new_dir(&root, "sub");
    h.new_file(&root, "file");
    let sub = format!("{}/sub", h.export.display());
    let res: MountRes3 = h.mount(MountProc3::MNT, &DirPath(Bytes::from(sub.into_bytes())));
    assert!(matches!(res, MountRes3::Ok { .. }));
    for (path, want) in [
        (
            format!("{}/file", h.export.display()),
            MountStat3::MNT3ERR_NOTDIR,
        ),
        (
            format!("{}/nope", h.export.display()),
            MountStat3::MNT3ERR_NOENT,
        ),
        ("/".to_string(), MountStat3::MNT3ERR_NOENT),
        (
            format!("{}/../outside", h.export.display()),
            MountStat3::MNT3ERR_NOENT,
        ),
    ] {
        let res: MountRes3 = h.mount(MountProc3::MNT, &DirPath(Bytes::from(path.into_bytes())));
        assert_eq!(res, MountRes3::Fail(want));
    }
    let exports: Exports = h.mount(MountProc3::EXPORT, &Void);
    assert_eq!(exports.0.len(), 1);
    assert_eq!(
        &exports.0[0].ex_dir.0[..],
        h.export.as_os_str().as_encoded_bytes()
    );
    let dump: MountList = h.mount(MountProc3::DUMP, &Void);
    assert_eq!(dump.0.len(), 2);
    let export_path = DirPath(Bytes::copy_from_slice(
        h.export.as_os_str().as_encoded_bytes(),
    ));
    let _: Void = h.mount(MountProc3::UMNT, &export_path);
    let dump: MountList = h.mount(MountProc3::DUMP, &Void);
    assert_eq!(dump.0.len(), 1);
    let _: Void = h.mount(MountProc3::UMNTALL, &Void);
    let dump: MountList = h.mount(MountProc3::DUMP, &Void);
    assert!(dump.0.is_empty());
}

#[test]
fn getattr_reports_the_file() {
    let h = Harness::new();
    std::fs::write(h.export.join("f"), b"12345").unwrap();
    let f = h.fh(&h.root(), "f");
    let a = attrs(&h, &f);
    assert_eq!(a.ftype, Ftype3::NF3REG);
    assert_eq!(a.size, 5);
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(h.export.join("f")).unwrap();
    assert_eq!(a.fileid, md.ino());
    assert_eq!(a.mode, md.mode() & 0o7777);
    assert_eq!(a.mtime.seconds as i64, md.mtime());
}

/// RFC 1813 §2.6: a handle not in our format is NFS3ERR_BADHANDLE; one whose MAC
/// fails (altered), or naming an object that is gone, is NFS3ERR_STALE.
#[test]
fn forged_foreign_and_stale_handles() {
    let h = Harness::new();
    let root = h.root();
    let f = h.new_file(&root, "f");
    // Forged: random bytes.
    let forged = NfsFh3(Bytes::from_static(b"0123456789abcdef0123456789abcdef"));
    assert_eq!(status(&getattr(&h, &forged)), NfsStat3::NFS3ERR_BADHANDLE);
    assert_eq!(
        status(&getattr(&h, &NfsFh3::default())),
        NfsStat3::NFS3ERR_BADHANDLE
    );
    // Another export's id: the MAC no longer verifies (crate::fh: STALE).
    let mut other = f.0.to_vec();
    other[5] ^= 0x55;
    assert_eq!(
        status(&getattr(&h, &NfsFh3(Bytes::from(other)))),
        NfsStat3::NFS3ERR_STALE
    );
    // Our export, but the inode of a file outside it: the same.
    use std::os::unix::fs::MetadataExt;
    let secret = std::fs::metadata(h.outside.join("secret")).unwrap();
    let mut outside = f.0.to_vec();
    outside[13..21].copy_from_slice(&secret.ino().to_be_bytes());
    let outside = NfsFh3(Bytes::from(outside));
    assert_eq!(status(&getattr(&h, &outside)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(status(&read(&h, &outside, 0, 100)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(
        status(&write(&h, &outside, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_STALE
    );
    // Removed: stale.
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &root, "f")),
        NfsStat3::NFS3_OK
    );
    assert_eq!(status(&getattr(&h, &f)), NfsStat3::NFS3ERR_STALE);
    h.assert_outside_untouched();
}

#[test]
fn handles_survive_a_restart() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "a");
    let d2 = h.new_dir(&d, "b");
    let f = h.new_file(&d2, "deep");
    write(&h, &f, 0, b"still here", StableHow::FILE_SYNC);
    let verf_before = h.server.verifier;
    let h = h.restart();
    assert_ne!(
        h.server.verifier, verf_before,
        "write verifier changes on restart"
    );
    assert_eq!(h.root(), root);
    match read(&h, &f, 0, 100) {
        NfsResult::Ok(ok) => assert_eq!(&ok.data.0[..], b"still here"),
        NfsResult::Fail(s, _) => panic!("READ after restart: {s:?}"),
    }
    assert_eq!(attrs(&h, &d).ftype, Ftype3::NF3DIR);
}

#[test]
fn lookup_names_and_errors() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "dir");
    let f = h.new_file(&d, "file");
    match h.lookup(&root, "dir") {
        NfsResult::Ok(ok) => {
            assert_eq!(ok.object, d);
            assert!(ok.obj_attributes.is_some() && ok.dir_attributes.is_some());
        }
        NfsResult::Fail(s, _) => panic!("{s:?}"),
    }
    assert_eq!(h.fh(&d, "file"), f);
    assert_eq!(h.fh(&d, "."), d);
    assert_eq!(h.fh(&d, ".."), root);
    // The root's parent is the root: no way out.
    assert_eq!(h.fh(&root, ".."), root);
    let fail = |dir: &NfsFh3, name: &[u8]| {
        let r: Lookup3Res = h.nfs(
            NfsProc3::LOOKUP,
            &Lookup3Args {
                what: DirOpArgs3 {
                    dir: dir.clone(),
                    name: Filename3(Bytes::copy_from_slice(name)),
                },
            },
        );
        status(&r)
    };
    assert_eq!(fail(&root, b"missing"), NfsStat3::NFS3ERR_NOENT);
    assert_eq!(fail(&root, b"dir/file"), NfsStat3::NFS3ERR_ACCES);
    assert_eq!(fail(&root, b"../outside"), NfsStat3::NFS3ERR_ACCES);
    assert_eq!(fail(&root, &[b'x'; 256]), NfsStat3::NFS3ERR_NAMETOOLONG);
    assert_eq!(fail(&root, b""), NfsStat3::NFS3ERR_ACCES);
    assert_eq!(fail(&f, b"x"), NfsStat3::NFS3ERR_NOTDIR);
}

/// A symbolic link is data: READLINK returns it, LOOKUP never follows it, so a link
/// pointing outside the export leads nowhere.
#[test]
fn symlinks_are_never_followed() {
    let h = Harness::new();
    let root = h.root();
    std::os::unix::fs::symlink(&h.outside, h.export.join("escape")).unwrap();
    let link = h.fh(&root, "escape");
    assert_eq!(attrs(&h, &link).ftype, Ftype3::NF3LNK);
    match h.lookup(&link, "secret") {
        NfsResult::Fail(s, _) => assert_eq!(s, NfsStat3::NFS3ERR_NOTDIR),
        NfsResult::Ok(_) => panic!("followed a symlink out of the export"),
    }
    let c = h.create(&link, "planted", CreateHow3::Unchecked(Sattr3::default()));
    assert_eq!(status(&c), NfsStat3::NFS3ERR_NOTDIR);
    assert_eq!(status(&read(&h, &link, 0, 10)), NfsStat3::NFS3ERR_INVAL);
    assert_eq!(
        status(&write(&h, &link, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_INVAL
    );
    // SETATTR of mode on the link does not chmod its target.
    let r: SetAttr3Res = h.nfs(
        NfsProc3::SETATTR,
        &SetAttr3Args {
            object: link.clone(),
            new_attributes: sattr_mode(0o777),
            guard: None,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3_OK);
    use std::os::unix::fs::PermissionsExt;
    assert_ne!(
        std::fs::metadata(&h.outside).unwrap().permissions().mode() & 0o777,
        0o777
    );
    h.assert_outside_untouched();
}

#[test]
fn symlink_and_readlink() {
    let h = Harness::new();
    let root = h.root();
    let r: Create3Res = h.nfs(
        NfsProc3::SYMLINK,
        &Symlink3Args {
            dir_op: DirOpArgs3 {
                dir: root.clone(),
                name: "l".into(),
            },
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: NfsPath3(Bytes::from_static(b"../../etc/passwd")),
            },
        },
    );
    let NfsResult::Ok(ok) = r else {
        panic!("SYMLINK {r:?}")
    };
    let l = ok.obj.unwrap();
    let rl: ReadLink3Res = h.nfs(NfsProc3::READLINK, &ReadLink3Args { symlink: l.clone() });
    match rl {
        NfsResult::Ok(ok) => assert_eq!(&ok.data.0[..], b"../../etc/passwd"),
        NfsResult::Fail(s, _) => panic!("{s:?}"),
    }
    assert_eq!(
        std::fs::read_link(h.export.join("l")).unwrap(),
        std::path::Path::new("../../etc/passwd")
    );
    // READLINK of a non-link: §3.3.5 NFS3ERR_INVAL.
    let f = h.new_file(&root, "f");
    let rl: ReadLink3Res = h.nfs(NfsProc3::READLINK, &ReadLink3Args { symlink: f });
    assert_eq!(status(&rl), NfsStat3::NFS3ERR_INVAL);
    // An existing name: NFS3ERR_EXIST.
    let again: Create3Res = h.nfs(
        NfsProc3::SYMLINK,
        &Symlink3Args {
            dir_op: DirOpArgs3 {
                dir: root.clone(),
                name: "l".into(),
            },
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: NfsPath3(Bytes::from_static(b"x")),
            },
        },
    );
    assert_eq!(status(&again), NfsStat3::NFS3ERR_EXIST);
}

#[test]
fn create_unchecked_guarded_exclusive() {
    let h = Harness::new();
    let root = h.root();
    let f = h.new_file(&root, "f");
    write(&h, &f, 0, b"contents", StableHow::FILE_SYNC);
    assert_eq!(attrs(&h, &f).mode, 0o644);
    // GUARDED on an existing name: EXIST.
    let r = h.create(&root, "f", CreateHow3::Guarded(Sattr3::default()));
    assert_eq!(status(&r), NfsStat3::NFS3ERR_EXIST);
    // UNCHECKED on an existing file with size 0: truncates, same file.
    let r = h.create(
        &root,
        "f",
        CreateHow3::Unchecked(Sattr3 {
            size: Some(0),
            ..Sattr3::default()
        }),
    );
    let NfsResult::Ok(ok) = r else {
        panic!("{r:?}")
    };
    assert_eq!(ok.obj, Some(f.clone()));
    assert_eq!(ok.obj_attributes.unwrap().size, 0);
    assert!(ok.dir_wcc.before.is_some() && ok.dir_wcc.after.is_some());
    // EXCLUSIVE: a retransmission with the same verifier succeeds with the same
    // file; another verifier is EXIST.
    let e1 = h.create(&root, "x", CreateHow3::Exclusive(*b"verf0001"));
    let NfsResult::Ok(ok1) = e1 else {
        panic!("{e1:?}")
    };
    let e2 = h.create(&root, "x", CreateHow3::Exclusive(*b"verf0001"));
    let NfsResult::Ok(ok2) = e2 else {
        panic!("{e2:?}")
    };
    assert_eq!(ok1.obj, ok2.obj);
    let e3 = h.create(&root, "x", CreateHow3::Exclusive(*b"verf0002"));
    assert_eq!(status(&e3), NfsStat3::NFS3ERR_EXIST);
    // Names: "/" is ACCES, over 255 bytes NAMETOOLONG, "." EXIST.
    assert_eq!(
        status(&h.create(&root, "a/b", CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_ACCES
    );
    let long = "n".repeat(256);
    assert_eq!(
        status(&h.create(&root, &long, CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_NAMETOOLONG
    );
    assert_eq!(
        status(&h.create(&root, ".", CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_EXIST
    );
    let ok255 = "n".repeat(255);
    assert_eq!(
        status(&h.create(&root, &ok255, CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3_OK
    );
    // In a file: NOTDIR.
    assert_eq!(
        status(&h.create(&f, "y", CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_NOTDIR
    );
    h.assert_outside_untouched();
}

#[test]
fn write_stabilities_read_and_commit() {
    let h = Harness::new();
    let root = h.root();
    let f = h.new_file(&root, "data");
    let verf = h.server.verifier;
    for (i, stable) in [
        StableHow::UNSTABLE,
        StableHow::DATA_SYNC,
        StableHow::FILE_SYNC,
    ]
    .into_iter()
    .enumerate()
    {
        let r = write(&h, &f, (i * 4) as u64, b"abcd", stable);
        let NfsResult::Ok(ok) = r else {
            panic!("{r:?}")
        };
        assert_eq!(ok.count, 4);
        assert_eq!(ok.committed, stable);
        assert_eq!(ok.verf, verf);
        assert_eq!(ok.file_wcc.before.unwrap().size, (i * 4) as u64);
        assert_eq!(ok.file_wcc.after.unwrap().size, (i * 4 + 4) as u64);
    }
    assert_eq!(
        std::fs::read(h.export.join("data")).unwrap(),
        b"abcdabcdabcd"
    );
    // A big write and read back, 1 MiB + 1 bytes in two READs (rtmax is 1 MiB).
    let big: Vec<u8> = (0..(1 << 20) + 1).map(|i| (i * 7 % 251) as u8).collect();
    let NfsResult::Ok(_) = write(&h, &f, 0, &big[..1 << 20], StableHow::UNSTABLE) else {
        panic!()
    };
    let NfsResult::Ok(_) = write(&h, &f, 1 << 20, &big[1 << 20..], StableHow::UNSTABLE) else {
        panic!()
    };
    let NfsResult::Ok(r1) = read(&h, &f, 0, 2 << 20) else {
        panic!()
    };
    assert_eq!(r1.count, 1 << 20, "READ is capped at rtmax");
    assert!(!r1.eof);
    let NfsResult::Ok(r2) = read(&h, &f, 1 << 20, 1 << 20) else {
        panic!()
    };
    assert_eq!(r2.count, 1);
    assert!(r2.eof);
    assert_eq!([&r1.data.0[..], &r2.data.0[..]].concat(), big);
    // Past the end: nothing, eof.
    let NfsResult::Ok(r3) = read(&h, &f, 10 << 20, 10) else {
        panic!()
    };
    assert_eq!((r3.count, r3.eof), (0, true));
    // COMMIT: same verifier.
    let c: Commit3Res = h.nfs(
        NfsProc3::COMMIT,
        &Commit3Args {
            file: f.clone(),
            offset: 0,
            count: 0,
        },
    );
    let NfsResult::Ok(c) = c else { panic!("{c:?}") };
    assert_eq!(c.verf, verf);
    // WRITE and READ of a directory: ISDIR.
    assert_eq!(
        status(&write(&h, &root, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_ISDIR
    );
    assert_eq!(status(&read(&h, &root, 0, 1)), NfsStat3::NFS3ERR_ISDIR);
    let c: Commit3Res = h.nfs(
        NfsProc3::COMMIT,
        &Commit3Args {
            file: root.clone(),
            offset: 0,
            count: 0,
        },
    );
    assert_eq!(status(&c), NfsStat3::NFS3ERR_ISDIR);
    // count larger than the data: INVAL.
    let w: Write3Res = h.nfs(
        NfsProc3::WRITE,
        &Write3Args {
            file: f.clone(),
            offset: 0,
            count: 10,
            stable: StableHow::FILE_SYNC,
            data: DdpData(Bytes::from_static(b"abc")),
        },
    );
    assert_eq!(status(&w), NfsStat3::NFS3ERR_INVAL);
}

#[test]
fn setattr_with_guard() {
    let h = Harness::new();
    let root = h.root();
    let f = h.new_file(&root, "f");
    write(&h, &f, 0, b"0123456789", StableHow::FILE_SYNC);
    let a = attrs(&h, &f);
    let set = |new_attributes: Sattr3, guard: Option<NfsTime3>| -> SetAttr3Res {
        h.nfs(
            NfsProc3::SETATTR,
            &SetAttr3Args {
                object: f.clone(),
                new_attributes,
                guard,
            },
        )
    };
    // Guard mismatch: NOT_SYNC and nothing changes.
    let wrong = NfsTime3 {
        seconds: a.ctime.seconds.wrapping_sub(100),
        nseconds: 0,
    };
    assert_eq!(
        status(&set(sattr_mode(0o600), Some(wrong))),
        NfsStat3::NFS3ERR_NOT_SYNC
    );
    assert_eq!(attrs(&h, &f).mode, 0o644);
    // Guard match: applied.
    let r = set(
        Sattr3 {
            mode: Some(0o600),
            size: Some(3),
            atime: SetTime::ClientTime(NfsTime3 {
                seconds: 1_000_000,
                nseconds: 5,
            }),
            mtime: SetTime::ClientTime(NfsTime3 {
                seconds: 2_000_000,
                nseconds: 7,
            }),
            ..Sattr3::default()
        },
        Some(a.ctime),
    );
    let NfsResult::Ok(ok) = r else {
        panic!("{r:?}")
    };
    let after = ok.obj_wcc.after.unwrap();
    assert_eq!(after.mode, 0o600);
    assert_eq!(after.size, 3);
    assert_eq!(after.atime.seconds, 1_000_000);
    assert_eq!(after.mtime.seconds, 2_000_000);
    assert_eq!(ok.obj_wcc.before.unwrap().size, 10);
    assert_eq!(std::fs::read(h.export.join("f")).unwrap(), b"012");
    // Server time.
    let r = set(
        Sattr3 {
            mtime: SetTime::ServerTime,
            ..Sattr3::default()
        },
        None,
    );
    let NfsResult::Ok(ok) = r else { panic!() };
    assert!(ok.obj_wcc.after.unwrap().mtime.seconds > 2_000_000);
    // Size of a directory: ISDIR... via the root.
    let r: SetAttr3Res = h.nfs(
        NfsProc3::SETATTR,
        &SetAttr3Args {
            object: root.clone(),
            new_attributes: Sattr3 {
                size: Some(0),
                ..Sattr3::default()
            },
            guard: None,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3ERR_ISDIR);
}

#[test]
fn access_reports_rights() {
    let h = Harness::new();
    let root = h.root();
    let f = h.new_file(&root, "f");
    let all = 0x3f;
    let r: Access3Res = h.nfs(
        NfsProc3::ACCESS,
        &Access3Args {
            object: f.clone(),
            access: all,
        },
    );
    let NfsResult::Ok(ok) = r else { panic!() };
    // Root (not squashed here), mode 0644: read, modify, extend; not execute.
    assert_eq!(ok.access, access::READ | access::MODIFY | access::EXTEND);
    assert!(ok.obj_attributes.is_some());
    let r: Access3Res = h.nfs(
        NfsProc3::ACCESS,
        &Access3Args {
            object: root.clone(),
            access: all,
        },
    );
    let NfsResult::Ok(ok) = r else { panic!() };
    assert_eq!(
        ok.access,
        access::READ | access::LOOKUP | access::MODIFY | access::EXTEND | access::DELETE
    );
}

#[test]
fn mkdir_rmdir_remove() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "d");
    assert_eq!(attrs(&h, &d).mode, 0o755);
    assert_eq!(status(&h.mkdir(&root, "d")), NfsStat3::NFS3ERR_EXIST);
    h.new_file(&d, "f");
    assert_eq!(
        status(&remove(&h, NfsProc3::RMDIR, &root, "d")),
        NfsStat3::NFS3ERR_NOTEMPTY
    );
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &root, "d")),
        NfsStat3::NFS3ERR_ISDIR
    );
    assert_eq!(
        status(&remove(&h, NfsProc3::RMDIR, &d, "f")),
        NfsStat3::NFS3ERR_NOTDIR
    );
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &d, "nope")),
        NfsStat3::NFS3ERR_NOENT
    );
    assert_eq!(
        status(&remove(&h, NfsProc3::RMDIR, &d, ".")),
        NfsStat3::NFS3ERR_INVAL
    );
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &d, "a/b")),
        NfsStat3::NFS3ERR_ACCES
    );
    let r = remove(&h, NfsProc3::REMOVE, &d, "f");
    let NfsResult::Ok(ok) = r else { panic!() };
    assert!(ok.dir_wcc.before.is_some() && ok.dir_wcc.after.is_some());
    assert_eq!(
        status(&remove(&h, NfsProc3::RMDIR, &root, "d")),
        NfsStat3::NFS3_OK
    );
    assert!(!h.export.join("d").exists());
    assert_eq!(status(&getattr(&h, &d)), NfsStat3::NFS3ERR_STALE);
}

#[test]
fn mknod_fifo_and_badtype() {
    let h = Harness::new();
    let root = h.root();
    let mk = |what: MknodData3, name: &str| -> Create3Res {
        h.nfs(
            NfsProc3::MKNOD,
            &Mknod3Args {
                dir_op: DirOpArgs3 {
                    dir: root.clone(),
                    name: name.into(),
                },
                what,
            },
        )
    };
    let r = mk(MknodData3::Pipe(Ftype3::NF3FIFO, sattr_mode(0o600)), "fifo");
    let NfsResult::Ok(ok) = r else {
        panic!("{r:?}")
    };
    assert_eq!(ok.obj_attributes.unwrap().ftype, Ftype3::NF3FIFO);
    // READ of a FIFO is INVAL, and does not hang.
    assert_eq!(
        status(&read(&h, &ok.obj.unwrap(), 0, 10)),
        NfsStat3::NFS3ERR_INVAL
    );
    let r = mk(MknodData3::Other(Ftype3::NF3DIR), "dir");
    assert_eq!(status(&r), NfsStat3::NFS3ERR_BADTYPE);
    let r = mk(MknodData3::Other(Ftype3::NF3REG), "reg");
    assert_eq!(status(&r), NfsStat3::NFS3ERR_BADTYPE);
}

#[test]
fn rename_and_link() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "d");
    let f = h.new_file(&root, "f");
    let g = h.new_file(&root, "g");
    let ren = |fd: &NfsFh3, from: &str, td: &NfsFh3, to: &str| -> Rename3Res {
        h.nfs(
            NfsProc3::RENAME,
            &Rename3Args {
                from: DirOpArgs3 {
                    dir: fd.clone(),
                    name: from.into(),
                },
                to: DirOpArgs3 {
                    dir: td.clone(),
                    name: to.into(),
                },
            },
        )
    };
    let r = ren(&root, "f", &d, "moved");
    let NfsResult::Ok(ok) = r else {
        panic!("{r:?}")
    };
    assert!(ok.fromdir_wcc.after.is_some() && ok.todir_wcc.after.is_some());
    // The handle still works, through its new name.
    assert_eq!(attrs(&h, &f).ftype, Ftype3::NF3REG);
    assert_eq!(h.fh(&d, "moved"), f);
    // Over an existing file: replaces it; the old handle is stale.
    assert_eq!(status(&ren(&d, "moved", &root, "g")), NfsStat3::NFS3_OK);
    assert_eq!(status(&getattr(&h, &g)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(
        status(&ren(&root, "nope", &root, "x")),
        NfsStat3::NFS3ERR_NOENT
    );
    assert_eq!(
        status(&ren(&root, "d", &d, "inside")),
        NfsStat3::NFS3ERR_INVAL
    );
    assert_eq!(
        status(&ren(&root, "g", &root, "a/b")),
        NfsStat3::NFS3ERR_ACCES
    );
    // A directory moved keeps serving its children.
    let e = h.new_file(&d, "child");
    assert_eq!(status(&ren(&root, "d", &root, "d2")), NfsStat3::NFS3_OK);
    assert_eq!(attrs(&h, &e).ftype, Ftype3::NF3REG);
    // LINK.
    let l: Link3Res = h.nfs(
        NfsProc3::LINK,
        &Link3Args {
            file: f.clone(),
            link: DirOpArgs3 {
                dir: root.clone(),
                name: "hard".into(),
            },
        },
    );
    let NfsResult::Ok(ok) = l else {
        panic!("{l:?}")
    };
    assert_eq!(ok.file_attributes.unwrap().nlink, 2);
    assert_eq!(h.fh(&root, "hard"), f);
    let l: Link3Res = h.nfs(
        NfsProc3::LINK,
        &Link3Args {
            file: f.clone(),
            link: DirOpArgs3 {
                dir: root.clone(),
                name: "hard".into(),
            },
        },
    );
    assert_eq!(status(&l), NfsStat3::NFS3ERR_EXIST);
    let l: Link3Res = h.nfs(
        NfsProc3::LINK,
        &Link3Args {
            file: root.clone(),
            link: DirOpArgs3 {
                dir: root.clone(),
                name: "dirlink".into(),
            },
        },
    );
    assert_eq!(status(&l), NfsStat3::NFS3ERR_ISDIR);
    h.assert_outside_untouched();
}

#[test]
fn cross_export_rename_is_xdev() {
    let second = TempDir::new("second");
    let h = Harness::with(false, Squash::None, &[second.path()]);
    let root = h.root();
    h.new_file(&root, "f");
    let path = DirPath(Bytes::copy_from_slice(
        h.server.table().exports[1]
            .export
            .path
            .as_os_str()
            .as_encoded_bytes(),
    ));
    let MountRes3::Ok { fhandle, .. } = h.mount::<_, MountRes3>(MountProc3::MNT, &path) else {
        panic!()
    };
    let other = NfsFh3(fhandle);
    assert_ne!(other, root);
    let r: Rename3Res = h.nfs(
        NfsProc3::RENAME,
        &Rename3Args {
            from: DirOpArgs3 {
                dir: root.clone(),
                name: "f".into(),
            },
            to: DirOpArgs3 {
                dir: other.clone(),
                name: "f".into(),
            },
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3ERR_XDEV);
}

/// A page is filled up to `count` (RFC 1813 §3.3.16: "The maximum size of the
/// READDIR3resok structure"), not stopped short of it: each page but the last has
/// no room left for the first entry of the next.
#[test]
fn readdir_fills_each_page_up_to_count() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "full");
    for i in 0..300 {
        std::fs::write(h.export.join("full").join(format!("file-{i:04}")), b"").unwrap();
    }
    let (mut cookie, mut verf) = (0, [0; 8]);
    let mut pages = Vec::new();
    loop {
        let r = readdir(&h, &d, cookie, verf, 4096);
        let NfsResult::Ok(ok) = r else {
            panic!("{r:?}")
        };
        // The verifier is zeros, as knfsd's (`proc::readdir::LISTING_VERIFIER`).
        assert_eq!(ok.cookieverf, [0; 8]);
        let entries = ok.reply.entries.to_vec();
        pages.push((ok.to_xdr().xdr_len(), entries.clone()));
        if ok.reply.eof {
            break;
        }
        cookie = entries.last().unwrap().cookie;
        verf = ok.cookieverf;
    }
    assert!(pages.len() >= 2, "{} pages", pages.len());
    for pair in pages.windows(2) {
        let (used, next) = (
            pair[0].0,
            nfs3::readdir::entry3_size(pair[1].1[0].name.0.len()),
        );
        assert!(
            used <= 4096 && used + next > 4096,
            "{used} + {next}: room left"
        );
    }
}

#[test]
fn readdir_pages_with_cookies_while_the_directory_changes() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "big");
    let mut names: Vec<String> = (0..300).map(|i| format!("file-{i:04}")).collect();
    for n in &names {
        std::fs::write(h.export.join("big").join(n), b"").unwrap();
    }
    let mut seen = Vec::new();
    let (mut cookie, mut verf) = (0, [0; 8]);
    let mut pages = 0;
    loop {
        let r = readdir(&h, &d, cookie, verf, 1024);
        let NfsResult::Ok(ok) = r else {
            panic!("{r:?}")
        };
        let encoded = ok.to_xdr().xdr_len();
        assert!(encoded <= 1024, "READDIR3resok of {encoded} bytes > count");
        verf = ok.cookieverf;
        for e in &ok.reply.entries {
            seen.push(String::from_utf8(e.name.0.to_vec()).unwrap());
            cookie = e.cookie;
        }
        pages += 1;
        // The directory changes between pages: new entries and a removed one that
        // was already listed. Cookies and the verifier stay valid.
        if pages == 2 {
            for i in 0..20 {
                std::fs::write(h.export.join("big").join(format!("new-{i}")), b"").unwrap();
            }
            std::fs::remove_file(h.export.join("big").join(&seen[2])).unwrap();
        }
        if ok.reply.eof {
            break;
        }
    }
    assert!(pages > 3);
    // `.` and `..` first, once each.
    assert_eq!(seen[..2], [".", ".."]);
    assert!(!seen[2..].iter().any(|n| n == "." || n == ".."));
    // Every original entry except the removed one is listed exactly once.
    let removed = seen[2].clone();
    names.retain(|n| *n != removed);
    let mut listed: Vec<String> = seen
        .iter()
        .filter(|n| n.starts_with("file-"))
        .cloned()
        .collect();
    listed.sort();
    let dups = listed.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dups, 0);
    listed.retain(|n| *n != removed);
    assert_eq!(listed, names);
    // A wrong verifier: BAD_COOKIE. Too small a count: TOOSMALL. Not a dir: NOTDIR.
    let r = readdir(&h, &d, cookie, *b"wrongvrf", 4096);
    assert_eq!(status(&r), NfsStat3::NFS3ERR_BAD_COOKIE);
    let r = readdir(&h, &d, 0, [0; 8], 120);
    assert_eq!(status(&r), NfsStat3::NFS3ERR_TOOSMALL);
    let f = h.new_file(&root, "plain");
    assert_eq!(
        status(&readdir(&h, &f, 0, [0; 8], 4096)),
        NfsStat3::NFS3ERR_NOTDIR
    );
}

#[test]
fn readdirplus_gives_usable_handles() {
    let h = Harness::new();
    let root = h.root();
    for i in 0..50 {
        std::fs::write(h.export.join(format!("f{i}")), format!("{i}")).unwrap();
    }
    let mut count = 0;
    let (mut cookie, mut verf) = (0, [0; 8]);
    loop {
        let r: ReadDirPlus3Res = h.nfs(
            NfsProc3::READDIRPLUS,
            &ReadDirPlus3Args {
                dir: root.clone(),
                cookie,
                cookieverf: verf,
                dircount: 512,
                maxcount: 4096,
            },
        );
        let NfsResult::Ok(ok) = r else {
            panic!("{r:?}")
        };
        assert!(ok.to_xdr().xdr_len() <= 4096);
        verf = ok.cookieverf;
        for e in &ok.reply.entries {
            let fh = e.name_handle.clone().unwrap();
            let name = String::from_utf8(e.name.0.to_vec()).unwrap();
            assert_eq!(e.name_attributes.as_ref().unwrap().fileid, e.fileid);
            cookie = e.cookie;
            if name == "." || name == ".." {
                // The root, both (tests below check them in detail).
                assert_eq!(fh, root);
                continue;
            }
            let NfsResult::Ok(data) = read(&h, &fh, 0, 10) else {
                panic!()
            };
            assert_eq!(&data.data.0[..], &name.as_bytes()[1..]);
            count += 1;
        }
        if ok.reply.eof {
            break;
        }
    }
    assert_eq!(count, 50);
}

/// One listed entry, from READDIR or READDIRPLUS.
#[derive(Debug, Clone, PartialEq)]
struct Listed {
    name: String,
    fileid: u64,
    cookie: u64,
    attrs: Option<Fattr3>,
    handle: Option<NfsFh3>,
}

/// One READDIR (`plus` false: `count` is READDIR's count) or READDIRPLUS (`count`
/// is dircount) page, or its failure status.
fn page(
    h: &Harness,
    dir: &NfsFh3,
    plus: bool,
    cookie: u64,
    verf: CookieVerf3,
    count: u32,
    maxcount: u32,
) -> Result<(Vec<Listed>, CookieVerf3, bool), NfsStat3> {
    if !plus {
        return match readdir(h, dir, cookie, verf, count) {
            NfsResult::Ok(ok) => {
                assert!(ok.to_xdr().xdr_len() <= count as usize);
                let l = ok.reply.entries.iter().map(|e| Listed {
                    name: String::from_utf8(e.name.0.to_vec()).unwrap(),
                    fileid: e.fileid,
                    cookie: e.cookie,
                    attrs: None,
                    handle: None,
                });
                Ok((l.collect(), ok.cookieverf, ok.reply.eof))
            }
            NfsResult::Fail(s, _) => Err(s),
        };
    }
    let r: ReadDirPlus3Res = h.nfs(
        NfsProc3::READDIRPLUS,
        &ReadDirPlus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf: verf,
            dircount: count,
            maxcount,
        },
    );
    match r {
        NfsResult::Ok(ok) => {
            assert!(ok.to_xdr().xdr_len() <= maxcount as usize);
            let dir_bytes: usize = ok
                .reply
                .entries
                .iter()
                .map(|e| entry3_size(e.name.0.len()))
                .sum();
            assert!(dir_bytes <= count as usize);
            let l = ok.reply.entries.iter().map(|e| Listed {
                name: String::from_utf8(e.name.0.to_vec()).unwrap(),
                fileid: e.fileid,
                cookie: e.cookie,
                attrs: e.name_attributes.clone(),
                handle: e.name_handle.clone(),
            });
            Ok((l.collect(), ok.cookieverf, ok.reply.eof))
        }
        NfsResult::Fail(s, _) => Err(s),
    }
}

/// The rest of a listing after `cookie`, page by page; every page but an `eof` one
/// must hold an entry. Returns the entries, the last verifier and the page count.
fn list_after(
    h: &Harness,
    dir: &NfsFh3,
    plus: bool,
    mut cookie: u64,
    mut verf: CookieVerf3,
    count: u32,
    maxcount: u32,
) -> (Vec<Listed>, CookieVerf3, usize) {
    let (mut all, mut pages) = (Vec::new(), 0);
    loop {
        let (l, v, eof) = page(h, dir, plus, cookie, verf, count, maxcount)
            .unwrap_or_else(|s| panic!("listing after cookie {cookie}: {s:?}"));
        pages += 1;
        assert!(eof || !l.is_empty(), "no entry and no eof after {cookie}");
        verf = v;
        if let Some(last) = l.last() {
            cookie = last.cookie;
        }
        all.extend(l);
        if eof {
            return (all, verf, pages);
        }
    }
}

fn list(h: &Harness, dir: &NfsFh3, plus: bool) -> Vec<Listed> {
    list_after(h, dir, plus, 0, [0; 8], 4096, 65536).0
}

fn local_ino(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().ino()
}

#[test]
fn readdir_lists_dot_and_dotdot_first_with_their_fileids() {
    let h = Harness::new();
    let root = h.root();
    let a = h.new_dir(&root, "a");
    let b = h.new_dir(&a, "b");
    h.new_file(&b, "f");
    let (root_p, a_p, b_p) = (h.export.clone(), h.export.join("a"), h.export.join("a/b"));
    for plus in [false, true] {
        for (dir, path, parent_path) in [
            (&root, &root_p, &root_p),
            (&a, &a_p, &root_p),
            (&b, &b_p, &a_p),
        ] {
            let l = list(&h, dir, plus);
            let what = format!("plus={plus} {}", path.display());
            assert_eq!(
                (l[0].name.as_str(), l[0].fileid, l[0].cookie),
                (".", local_ino(path), 1),
                "{what}"
            );
            assert_eq!(
                (l[1].name.as_str(), l[1].fileid, l[1].cookie),
                ("..", local_ino(parent_path), 2),
                "{what}"
            );
            assert_eq!(l[0].fileid, attrs(&h, dir).fileid, "{what}");
            // The rest are the directory's entries, each once, no dots among them.
            let mut rest: Vec<String> = l[2..].iter().map(|e| e.name.clone()).collect();
            rest.sort();
            let mut want: Vec<String> = std::fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            want.sort();
            assert_eq!(rest, want, "{what}");
            for e in &l[2..] {
                assert!(e.cookie >= 3, "{what}: {e:?}");
            }
        }
    }
    // The root's `..` is the root, never the directory the export sits in.
    let l = list(&h, &root, false);
    assert_ne!(l[1].fileid, local_ino(h.export.parent().unwrap()));
    h.assert_outside_untouched();
}

#[test]
fn readdirplus_handles_of_dot_and_dotdot_resolve() {
    let h = Harness::new();
    let root = h.root();
    let a = h.new_dir(&root, "a");
    let b = h.new_dir(&a, "b");
    for (dir, parent, child_of_parent) in [
        (&root, &root, None),
        (&a, &root, Some("a")),
        (&b, &a, Some("b")),
    ] {
        let l = list(&h, dir, true);
        let (dot, dotdot) = (&l[0], &l[1]);
        assert_eq!((dot.name.as_str(), dotdot.name.as_str()), (".", ".."));
        // The very handles LOOKUP "." and ".." give.
        assert_eq!(dot.handle.as_ref(), Some(dir));
        assert_eq!(dotdot.handle.as_ref(), Some(parent));
        assert_eq!(dot.handle, Some(h.fh(dir, ".")));
        assert_eq!(dotdot.handle, Some(h.fh(dir, "..")));
        // GETATTR with them: the fileids listed, directories, with the attributes
        // READDIRPLUS gave.
        for e in [dot, dotdot] {
            let got = attrs(&h, e.handle.as_ref().unwrap());
            assert_eq!(got.fileid, e.fileid, "{e:?}");
            assert_eq!(got.ftype, Ftype3::NF3DIR);
            let listed = e.attrs.as_ref().expect("attributes");
            assert_eq!((listed.fileid, listed.ftype), (got.fileid, got.ftype));
        }
        // `..`'s handle works as a directory: looking `dir` up in it finds `dir`.
        if let Some(name) = child_of_parent {
            let again = h.fh(dotdot.handle.as_ref().unwrap(), name);
            assert_eq!(attrs(&h, &again).fileid, dot.fileid);
        }
    }
    // At the root, `..` is the root's own handle: nothing above the export.
    let l = list(&h, &root, true);
    assert_eq!(l[1].handle.as_ref(), Some(&root));
    assert_eq!(l[1].fileid, l[0].fileid);
    h.assert_outside_untouched();
}

#[test]
fn readdir_and_readdirplus_resume_after_every_cookie() {
    let h = Harness::new();
    let root = h.root();
    let d = h.new_dir(&root, "d");
    for i in 0..40 {
        let name = format!("{i}-{}", "n".repeat(i % 13));
        std::fs::write(h.export.join("d").join(name), b"").unwrap();
    }
    for plus in [false, true] {
        let (full, verf, _) = list_after(&h, &d, plus, 0, [0; 8], 65536, 1 << 20);
        assert_eq!(full.len(), 42);
        assert_eq!((full[0].name.as_str(), full[1].name.as_str()), (".", ".."));
        let mut cookies: Vec<u64> = full.iter().map(|e| e.cookie).collect();
        cookies.sort();
        cookies.dedup();
        assert_eq!(cookies.len(), full.len(), "cookies are distinct");
        // From each entry's cookie (`.` and `..` included), the rest follows: nothing
        // repeated, nothing lost; with our verifier and with zeros.
        for (i, e) in full.iter().enumerate() {
            for v in [verf, [0; 8]] {
                let (rest, _, _) = list_after(&h, &d, plus, e.cookie, v, 65536, 1 << 20);
                assert_eq!(rest, full[i + 1..], "plus={plus} after {e:?}");
            }
        }
        // Small pages give the same listing.
        let (paged, _, pages) = list_after(&h, &d, plus, 0, [0; 8], 200, 1200);
        assert_eq!(paged, full, "plus={plus}");
        assert!(pages > 5, "{pages} pages");
    }
    // Another verifier with a dot cookie, and a cookie we never made: BAD_COOKIE.
    for cookie in [1, 2] {
        let r = readdir(&h, &d, cookie, *b"wrongvrf", 4096);
        assert_eq!(status(&r), NfsStat3::NFS3ERR_BAD_COOKIE);
    }
    let r = readdir(&h, &d, u64::MAX, [0; 8], 4096);
    assert_eq!(status(&r), NfsStat3::NFS3ERR_BAD_COOKIE);
}

#[test]
fn tiny_counts_list_one_entry_at_a_time() {
    let h = Harness::new();
    let root = h.root();
    let t = h.new_dir(&root, "t");
    // Names of 1 to 4 bytes: entries the size of `.` and `..` (names padded to 4).
    for n in ["a", "bb", "ccc", "dddd"] {
        std::fs::write(h.export.join("t").join(n), b"").unwrap();
    }
    let want = list(&h, &t, false);
    let names = |l: &[Listed]| l.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&want[..2]), [".", ".."]);
    assert_eq!(want.len(), 6);

    // READDIR: room for `.` and nothing more; one byte less is TOOSMALL.
    let one = (RESOK_FIXED_SIZE + entry3_size(1)) as u32;
    let (l, _, eof) = page(&h, &t, false, 0, [0; 8], one, 0).unwrap();
    assert_eq!((names(&l), eof), (vec![".".to_string()], false));
    assert_eq!(
        page(&h, &t, false, 0, [0; 8], one - 1, 0).unwrap_err(),
        NfsStat3::NFS3ERR_TOOSMALL
    );
    let (l, _, pages) = list_after(&h, &t, false, 0, [0; 8], one, 0);
    assert_eq!((l, pages), (want.clone(), 6));

    // READDIRPLUS: a dircount for one entry.
    let (l, _, pages) = list_after(&h, &t, true, 0, [0; 8], entry3_size(4) as u32, 65536);
    assert_eq!(names(&l), names(&want));
    assert_eq!(pages, 6);
    // A maxcount for `.` with its attributes and handle (every entry here is that
    // size): one entry a page; one byte less is TOOSMALL.
    let plus = list(&h, &t, true);
    let sized = EntryPlus3 {
        fileid: plus[0].fileid,
        name: Filename3(Bytes::from_static(b".")),
        cookie: plus[0].cookie,
        name_attributes: plus[0].attrs.clone(),
        name_handle: plus[0].handle.clone(),
    };
    let one = (RESOK_FIXED_SIZE + entryplus3_size(&sized)) as u32;
    let (l, _, pages) = list_after(&h, &t, true, 0, [0; 8], 65536, one);
    assert_eq!((l, pages), (plus.clone(), 6));
    assert_eq!(
        page(&h, &t, true, 0, [0; 8], 65536, one - 1).unwrap_err(),
        NfsStat3::NFS3ERR_TOOSMALL
    );
    // Right after `.`, the same room holds `..`.
    let (l, _, eof) = page(&h, &t, true, 1, [0; 8], 65536, one).unwrap();
    assert_eq!((l, eof), (plus[1..2].to_vec(), false));
}

#[test]
fn fsstat_fsinfo_pathconf() {
    let h = Harness::new();
    let root = h.root();
    let s: FsStat3Res = h.nfs(
        NfsProc3::FSSTAT,
        &FsRootArgs {
            fsroot: root.clone(),
        },
    );
    let NfsResult::Ok(s) = s else { panic!() };
    assert!(s.tbytes >= s.fbytes && s.fbytes >= s.abytes && s.tbytes > 0);
    let i: FsInfo3Res = h.nfs(
        NfsProc3::FSINFO,
        &FsRootArgs {
            fsroot: root.clone(),
        },
    );
    let NfsResult::Ok(i) = i else { panic!() };
    assert_eq!((i.rtmax, i.wtmax), (1 << 20, 1 << 20));
    assert!(i.obj_attributes.is_some());
    let p: PathConf3Res = h.nfs(
        NfsProc3::PATHCONF,
        &FsRootArgs {
            fsroot: root.clone(),
        },
    );
    let NfsResult::Ok(p) = p else { panic!() };
    assert_eq!(p.name_max, 255);
    assert!(p.no_trunc && p.case_preserving && !p.case_insensitive);
    let bad = NfsFh3(Bytes::from_static(b"bad"));
    let s: FsStat3Res = h.nfs(
        NfsProc3::FSSTAT,
        &FsRootArgs {
            fsroot: bad.clone(),
        },
    );
    assert_eq!(status(&s), NfsStat3::NFS3ERR_BADHANDLE);
    let i: FsInfo3Res = h.nfs(
        NfsProc3::FSINFO,
        &FsRootArgs {
            fsroot: bad.clone(),
        },
    );
    assert_eq!(status(&i), NfsStat3::NFS3ERR_BADHANDLE);
    let p: PathConf3Res = h.nfs(NfsProc3::PATHCONF, &FsRootArgs { fsroot: bad });
    assert_eq!(status(&p), NfsStat3::NFS3ERR_BADHANDLE);
}

#[test]
fn read_only_export_refuses_changes_with_rofs() {
    let h = Harness::with(true, Squash::None, &[]);
    std::fs::write(h.export.join("f"), b"ro").unwrap();
    let root = h.root();
    let f = h.fh(&root, "f");
    assert_eq!(
        status(&write(&h, &f, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_ROFS
    );
    assert_eq!(
        status(&h.create(&root, "n", CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_ROFS
    );
    assert_eq!(status(&h.mkdir(&root, "n")), NfsStat3::NFS3ERR_ROFS);
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &root, "f")),
        NfsStat3::NFS3ERR_ROFS
    );
    let r: SetAttr3Res = h.nfs(
        NfsProc3::SETATTR,
        &SetAttr3Args {
            object: f.clone(),
            new_attributes: sattr_mode(0o600),
            guard: None,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3ERR_ROFS);
    let NfsResult::Ok(data) = read(&h, &f, 0, 10) else {
        panic!()
    };
    assert_eq!(&data.data.0[..], b"ro");
    let r: Access3Res = h.nfs(
        NfsProc3::ACCESS,
        &Access3Args {
            object: f,
            access: 0x3f,
        },
    );
    let NfsResult::Ok(ok) = r else { panic!() };
    assert_eq!(
        ok.access & (access::MODIFY | access::EXTEND | access::DELETE),
        0
    );
    assert_eq!(std::fs::read(h.export.join("f")).unwrap(), b"ro");
}

/// RFC 5531 §9: arguments that do not decode are GARBAGE_ARGS; an unknown procedure
/// is PROC_UNAVAIL.
#[test]
fn garbage_and_truncated_arguments() {
    let h = Harness::new();
    let root = h.root();
    let good = Read3Args {
        file: root.clone(),
        offset: 0,
        count: 10,
    }
    .to_xdr()
    .to_bytes();
    // Truncated at every length.
    for cut in 0..good.len() {
        assert_eq!(
            h.nfs_raw(NfsProc3::READ, &good[..cut]),
            Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS),
            "READ args cut at {cut}"
        );
    }
    // Trailing garbage.
    let mut long = good.to_vec();
    long.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        h.nfs_raw(NfsProc3::READ, &long),
        Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS)
    );
    // A handle over 64 bytes, an undefined union arm, a huge string length.
    assert_eq!(
        h.nfs_raw(NfsProc3::GETATTR, &[0, 0, 0, 65]),
        Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS)
    );
    let mut create = DirOpArgs3 {
        dir: root.clone(),
        name: "x".into(),
    }
    .to_xdr()
    .to_bytes()
    .to_vec();
    create.extend_from_slice(&[0, 0, 0, 9]);
    assert_eq!(
        h.nfs_raw(NfsProc3::CREATE, &create),
        Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS)
    );
    let mut lookup = root.to_xdr().to_bytes().to_vec();
    lookup.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        h.nfs_raw(NfsProc3::LOOKUP, &lookup),
        Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS)
    );
    // Every procedure with pure garbage.
    for p in 1..22 {
        assert_eq!(
            h.nfs_raw(NfsProc3(p), &[0xde, 0xad, 0xbe]),
            Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS),
            "procedure {p}"
        );
    }
    assert_eq!(
        h.nfs_raw(NfsProc3(22), &[]),
        Reply::Accept(oncrpc::AcceptStat::PROC_UNAVAIL)
    );
    assert_eq!(
        h.call_raw(MOUNT_PROGRAM, MOUNT_V3, 1, &[0, 0, 4, 1]),
        Reply::Accept(oncrpc::AcceptStat::GARBAGE_ARGS)
    );
    assert_eq!(
        h.call_raw(MOUNT_PROGRAM, MOUNT_V3, 6, &[]),
        Reply::Accept(oncrpc::AcceptStat::PROC_UNAVAIL)
    );
    h.assert_outside_untouched();
}

/// AUTH_SYS identities are applied (the test runs as root, as CI does; otherwise the
/// server cannot switch identities and the test only checks that it says so).
#[test]
fn auth_sys_identity_and_root_squash() {
    let mut h = Harness::with(false, Squash::Root, &[]);
    if !h.server.switching {
        eprintln!("not root: identity switching is off, skipping");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&h.export, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = h.root();
    // Root is squashed to 65534, who may not write into a root-owned 0755 dir.
    assert_eq!(
        status(&h.create(&root, "r", CreateHow3::Unchecked(Sattr3::default()))),
        NfsStat3::NFS3ERR_ACCES
    );
    std::fs::set_permissions(&h.export, std::fs::Permissions::from_mode(0o777)).unwrap();
    h.who = Who::Sys(1234, 4321, vec![4321]);
    let f = h.new_file(&root, "owned");
    let a = attrs(&h, &f);
    assert_eq!((a.uid, a.gid), (1234, 4321));
    // Owner override (knfsd's): the owner writes a file it made read-only, as
    // `cp -p` of a read-only file does; nobody else may.
    let ro = match h.create(&root, "ro", CreateHow3::Guarded(sattr_mode(0o444))) {
        NfsResult::Ok(ok) => ok.obj.unwrap(),
        r => panic!("{r:?}"),
    };
    assert_eq!(
        status(&write(&h, &ro, 0, b"mine", StableHow::FILE_SYNC)),
        NfsStat3::NFS3_OK
    );
    assert_eq!(std::fs::read(h.export.join("ro")).unwrap(), b"mine");
    // Another user cannot write it (0644).
    h.who = Who::Sys(999, 999, vec![]);
    assert_eq!(
        status(&write(&h, &f, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_ACCES
    );
    assert_eq!(
        status(&write(&h, &ro, 0, b"x", StableHow::FILE_SYNC)),
        NfsStat3::NFS3ERR_ACCES
    );
    // Nor chmod it.
    let r: SetAttr3Res = h.nfs(
        NfsProc3::SETATTR,
        &SetAttr3Args {
            object: f.clone(),
            new_attributes: sattr_mode(0o666),
            guard: None,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3ERR_PERM);
    // ACCESS as someone else: read only (0644, each right checked once).
    let r: Access3Res = h.nfs(
        NfsProc3::ACCESS,
        &Access3Args {
            object: f.clone(),
            access: 0x3f,
        },
    );
    let NfsResult::Ok(ok) = r else { panic!() };
    assert_eq!(ok.access, access::READ);
    // A directory its owner closed (0700): no one else may look names up in it or
    // remove from it, whether the name exists or not (the kernel's search check).
    h.who = Who::Sys(1234, 4321, vec![4321]);
    let private = h.new_dir(&root, "private");
    h.new_file(&private, "in");
    let r: SetAttr3Res = h.nfs(
        NfsProc3::SETATTR,
        &SetAttr3Args {
            object: private.clone(),
            new_attributes: sattr_mode(0o700),
            guard: None,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3_OK);
    assert_eq!(status(&h.lookup(&private, "in")), NfsStat3::NFS3_OK);
    h.who = Who::Sys(999, 999, vec![]);
    for name in ["in", "missing", ".", ".."] {
        assert_eq!(
            status(&h.lookup(&private, name)),
            NfsStat3::NFS3ERR_ACCES,
            "LOOKUP {name}"
        );
    }
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &private, "in")),
        NfsStat3::NFS3ERR_ACCES
    );
    h.who = Who::Sys(1234, 4321, vec![4321]);
    assert_eq!(
        status(&remove(&h, NfsProc3::REMOVE, &private, "in")),
        NfsStat3::NFS3_OK
    );
    h.who = Who::Sys(999, 999, vec![]);
    // AUTH_NONE is anonymous.
    h.who = Who::None;
    let a2 = match h.create(&root, "anon", CreateHow3::Unchecked(Sattr3::default())) {
        NfsResult::Ok(ok) => ok.obj_attributes.unwrap(),
        r => panic!("{r:?}"),
    };
    assert_eq!(a2.uid, 65534);
}
