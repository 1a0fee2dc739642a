//! Every NFSv3 procedure through the client library against our `nfsd` over TCP, on a
//! temporary export: results, and the error statuses RFC 1813 names.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{pattern, TestServer};
use nfsclient::nfs3::attr::access;
use nfsclient::nfs3::dir::CreateHow3;
use nfsclient::nfs3::mount::MountStat3;
use nfsclient::nfs3::{Ftype3, NfsFh3, NfsStat3, NfsTime3, Sattr3, SetTime, StableHow};
use nfsclient::{auth_sys_self, Error, IoOptions, Mount, MountOptions, ReadDirSizes};
use nfsclient::{DirReader, MountClient, NfsClient};
use xdr::Bytes;

fn assert_status<T: std::fmt::Debug>(r: nfsclient::Result<T>, status: NfsStat3) {
    match r {
        Err(e) if e.is(status) => {}
        other => panic!("expected {status:?}, got {other:?}"),
    }
}

async fn mkfile(m: &Mount, path: &str, data: &[u8]) -> NfsFh3 {
    let fh = m.create_file(path, 0o644, false).await.unwrap();
    let mut w = m.writer(&fh, StableHow::UNSTABLE);
    w.write(0, Bytes::copy_from_slice(data)).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), data.len() as u64);
    fh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_fsinfo_fsstat_pathconf_null() {
    let s = TestServer::start("info", false, false).await;
    let m = s.mount().await;
    m.nfs().null().await.unwrap();
    // FSINFO (§3.3.19): our server offers 1 MiB transfers; the client uses them.
    let fi = m.fsinfo();
    assert_eq!(fi.rtmax, 1 << 20);
    assert_eq!(fi.wtmax, 1 << 20);
    assert!(fi.rtpref > 0 && fi.rtpref <= fi.rtmax);
    let io = m.io_options();
    assert_eq!(io.rsize, fi.rtpref);
    assert_eq!(io.wsize, fi.wtpref);
    let st = m.nfs().fsstat(m.root()).await.unwrap();
    assert!(st.tbytes >= st.fbytes && st.fbytes >= st.abytes && st.tbytes > 0);
    let pc = m.nfs().pathconf(m.root()).await.unwrap();
    assert_eq!(pc.name_max, 255);
    assert!(pc.no_trunc);
    let root = m.nfs().getattr(m.root()).await.unwrap();
    assert_eq!(root.ftype, Ftype3::NF3DIR);
    m.unmount().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_through_the_portmapper_and_bad_export_paths() {
    let s = TestServer::start("pmap", false, true).await;
    let pm = s.portmap.expect("nfsd serves a portmapper");
    let opts = MountOptions {
        portmap_port: pm.port(),
        mount_port: None,
        ..s.options()
    };
    let m = Mount::mount("127.0.0.1", &s.dir.export(), &opts)
        .await
        .unwrap();
    assert_eq!(
        m.nfs().getattr(m.root()).await.unwrap().ftype,
        Ftype3::NF3DIR
    );
    // MNT of something that is not exported (Appendix I mountstat3).
    let r = Mount::mount("127.0.0.1", "/no/such/export", &opts).await;
    assert!(
        matches!(r, Err(Error::Mount(MountStat3::MNT3ERR_NOENT))),
        "{r:?}"
    );
    // The longest exported prefix of a path inside the export is found.
    std::fs::create_dir(s.local("sub")).unwrap();
    std::fs::write(s.local("sub/f"), b"x").unwrap();
    let target = format!("{}/sub/f", s.dir.export());
    let (m2, rest) = Mount::mount_longest("127.0.0.1", &target, 0, &opts)
        .await
        .unwrap();
    assert_eq!(rest, "f");
    let (_, a) = m2.lookup_path(&rest).await.unwrap();
    assert_eq!(a.size, 1);
    // Keeping one component: the directory holding it is mounted.
    let sub = format!("{}/sub", s.dir.export());
    let (_, rest) = Mount::mount_longest("127.0.0.1", &sub, 1, &opts)
        .await
        .unwrap();
    assert_eq!(rest, "sub");
    // MOUNT EXPORT lists the export.
    let mc = MountClient::new(
        nfsclient::transport::rpc_client(
            nfsclient::TransportKind::Tcp,
            s.mount,
            oncrpc::ClientConfig::default(),
        )
        .unwrap(),
    );
    mc.null().await.unwrap();
    let ex = mc.exports().await.unwrap();
    assert_eq!(&ex.0[0].ex_dir.0[..], s.dir.export().as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_lookup_getattr_setattr_access() {
    let s = TestServer::start("attr", false, false).await;
    let m = s.mount().await;
    let nfs = m.nfs();
    let fh = m.create_file("f", 0o640, false).await.unwrap();
    let a = nfs.getattr(&fh).await.unwrap();
    assert_eq!(
        (a.ftype, a.mode & 0o7777, a.size),
        (Ftype3::NF3REG, 0o640, 0)
    );
    let l = nfs.lookup(m.root(), "f").await.unwrap();
    assert_eq!(l.object, fh);
    assert_eq!(l.obj_attributes.unwrap().fileid, a.fileid);

    // SETATTR (§3.3.2): mode, size and a client mtime.
    let t = NfsTime3 {
        seconds: 1_000_000_000,
        nseconds: 0,
    };
    let wcc = nfs
        .setattr(
            &fh,
            &Sattr3 {
                mode: Some(0o600),
                size: Some(10),
                mtime: SetTime::ClientTime(t),
                ..Sattr3::default()
            },
            None,
        )
        .await
        .unwrap();
    let after = wcc.after.unwrap();
    assert_eq!(
        (after.mode & 0o7777, after.size, after.mtime),
        (0o600, 10, t)
    );
    assert_eq!(std::fs::metadata(s.local("f")).unwrap().len(), 10);
    // With a guard that is not the current ctime: NFS3ERR_NOT_SYNC and no change.
    let wrong = NfsTime3 {
        seconds: 1,
        nseconds: 2,
    };
    let r = nfs
        .setattr(
            &fh,
            &Sattr3 {
                size: Some(0),
                ..Sattr3::default()
            },
            Some(wrong),
        )
        .await;
    assert_status(r, NfsStat3::NFS3ERR_NOT_SYNC);
    assert_eq!(nfs.getattr(&fh).await.unwrap().size, 10);
    // With the right guard, it applies.
    nfs.setattr(
        &fh,
        &Sattr3 {
            size: Some(0),
            ..Sattr3::default()
        },
        Some(after.ctime),
    )
    .await
    .unwrap();
    assert_eq!(nfs.getattr(&fh).await.unwrap().size, 0);

    // ACCESS (§3.3.4) as root: everything asked for a file except EXECUTE on 0600.
    let want = access::READ | access::MODIFY | access::EXTEND | access::EXECUTE;
    let acc = nfs.access(&fh, want).await.unwrap();
    assert_eq!(acc.access & !want, 0, "never more than asked");
    assert_eq!(acc.access & access::READ, access::READ);
    assert_eq!(acc.access & access::MODIFY, access::MODIFY);

    // CREATE GUARDED of an existing name: NFS3ERR_EXIST; EXCLUSIVE is idempotent
    // with the same verifier (§3.3.8).
    assert_status(
        m.create_file("f", 0o644, true).await,
        NfsStat3::NFS3ERR_EXIST,
    );
    let verf = *b"verifier";
    let e1 = nfs
        .create(m.root(), "x", CreateHow3::Exclusive(verf))
        .await
        .unwrap();
    let e2 = nfs
        .create(m.root(), "x", CreateHow3::Exclusive(verf))
        .await
        .unwrap();
    assert_eq!(e1.obj, e2.obj);
    assert_status(
        nfs.create(m.root(), "x", CreateHow3::Exclusive(*b"another!"))
            .await,
        NfsStat3::NFS3ERR_EXIST,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_write_and_read_of_1_mib_plus_1() {
    let s = TestServer::start("io", false, false).await;
    let mut m = s.mount().await;
    // Small transfers so that many are in flight at once.
    m.set_io_options(IoOptions {
        rsize: 64 * 1024,
        wsize: 48 * 1024,
        depth: 6,
        ..IoOptions::default()
    });
    let data = pattern((1 << 20) + 1, 7);
    let fh = m.create_file("big", 0o644, false).await.unwrap();
    let mut w = m.writer(&fh, StableHow::UNSTABLE);
    // Two calls, the second not aligned to wsize.
    w.write(0, Bytes::copy_from_slice(&data[..100_000]))
        .await
        .unwrap();
    w.write(100_000, Bytes::copy_from_slice(&data[100_000..]))
        .await
        .unwrap();
    assert_eq!(w.finish().await.unwrap(), data.len() as u64);
    assert_eq!(std::fs::read(s.local("big")).unwrap(), data);
    assert_eq!(m.read_all(&fh).await.unwrap(), data);

    // A range in the middle, in order, with offsets.
    let mut r = m.reader(&fh, 70_000, Some(200_000));
    let mut got = Vec::new();
    while let Some((off, chunk)) = r.next_chunk().await.unwrap() {
        assert_eq!(off, 70_000 + got.len() as u64);
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, &data[70_000..270_000]);

    // READ at and past EOF (§3.3.6): no data, eof set.
    let past = m.nfs().read(&fh, data.len() as u64, 10).await.unwrap();
    assert!(past.eof && past.data.0.is_empty());

    // FILE_SYNC writes need no COMMIT and say so (§3.3.7 `committed`).
    let ok = m
        .nfs()
        .write(&fh, 0, Bytes::from_static(b"sync"), StableHow::FILE_SYNC)
        .await
        .unwrap();
    assert_eq!((ok.count, ok.committed), (4, StableHow::FILE_SYNC));
    // COMMIT returns the same verifier as the UNSTABLE WRITEs of this server life.
    let u = m
        .nfs()
        .write(&fh, 4, Bytes::from_static(b"more"), StableHow::UNSTABLE)
        .await
        .unwrap();
    let c = m.nfs().commit(&fh, 0, 0).await.unwrap();
    assert_eq!(u.verf, c.verf);
    let head = m.nfs().read(&fh, 0, 8).await.unwrap();
    assert_eq!(&head.data.0[..], b"syncmore");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_file_and_zero_length_reads() {
    let s = TestServer::start("empty", false, false).await;
    let m = s.mount().await;
    let fh = m.create_file("e", 0o644, false).await.unwrap();
    assert!(m.read_all(&fh).await.unwrap().is_empty());
    let w = m.writer(&fh, StableHow::UNSTABLE);
    assert_eq!(w.finish().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_symlink_readlink_link_rename_remove_rmdir() {
    let s = TestServer::start("names", false, false).await;
    let m = s.mount().await;
    let nfs = m.nfs();
    let d = m.mkdir_path("a/b/c", 0o755, true).await.unwrap();
    assert_eq!(nfs.getattr(&d).await.unwrap().ftype, Ftype3::NF3DIR);
    assert!(s.local("a/b/c").is_dir());
    // mkdir -p again is fine; plain mkdir of an existing directory is EXIST.
    assert_eq!(m.mkdir_path("a/b/c", 0o755, true).await.unwrap(), d);
    assert_status(
        m.mkdir_path("a/b", 0o755, false).await,
        NfsStat3::NFS3ERR_EXIST,
    );

    // SYMLINK and READLINK (§3.3.10, §3.3.5).
    let (ab, _) = m.lookup_path("a/b").await.unwrap();
    let sl = nfs
        .symlink(&ab, "link", "c/../../target", &Sattr3::default())
        .await
        .unwrap();
    let sl = sl.obj.unwrap();
    assert_eq!(nfs.getattr(&sl).await.unwrap().ftype, Ftype3::NF3LNK);
    let rl = nfs.readlink(&sl).await.unwrap();
    assert_eq!(&rl.data.0[..], b"c/../../target");
    assert_eq!(
        std::fs::read_link(s.local("a/b/link")).unwrap().to_str(),
        Some("c/../../target")
    );

    // LINK (§3.3.15): a second name, nlink 2.
    let f = mkfile(&m, "a/f", b"hello").await;
    let l = nfs.link(&f, &ab, "f2").await.unwrap();
    assert_eq!(l.file_attributes.unwrap().nlink, 2);
    let (f2, _) = m.lookup_path("a/b/f2").await.unwrap();
    assert_eq!(m.read_all(&f2).await.unwrap(), b"hello");

    // RENAME (§3.3.14) across directories.
    let (a, _) = m.lookup_path("a").await.unwrap();
    nfs.rename(&a, "f", &d, "moved").await.unwrap();
    assert_status(m.lookup_path("a/f").await, NfsStat3::NFS3ERR_NOENT);
    let (mv, _) = m.lookup_path("a/b/c/moved").await.unwrap();
    assert_eq!(m.read_all(&mv).await.unwrap(), b"hello");

    // REMOVE and RMDIR (§3.3.12, §3.3.13).
    m.remove_path("a/b/c/moved", false).await.unwrap();
    m.remove_path("a/b/f2", false).await.unwrap();
    m.remove_path("a/b/link", false).await.unwrap();
    m.remove_path("a/b/c", true).await.unwrap();
    assert!(!s.local("a/b/c").exists());
    assert_eq!(std::fs::read_dir(s.local("a/b")).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_and_readdirplus_iterate_with_cookies() {
    let s = TestServer::start("readdir", false, false).await;
    let n = 300;
    for i in 0..n {
        std::fs::write(s.local(&format!("file-{i:04}-{}", "x".repeat(i % 40))), b"").unwrap();
    }
    let m = s.mount().await;
    // Small replies, so that listing takes many READDIR calls and cookies.
    let sizes = ReadDirSizes {
        dircount: 1024,
        maxcount: 4096,
    };
    for plus in [false, true] {
        let mut r = DirReader::new(m.nfs().clone(), m.root().clone(), plus, sizes);
        let mut names = Vec::new();
        let mut batches = 0;
        while let Some(batch) = r.next_batch().await.unwrap() {
            batches += 1;
            for e in batch {
                if plus && &e.name[..] != b".." {
                    let a = e.attributes.expect("READDIRPLUS attributes");
                    assert_eq!(a.fileid, e.fileid);
                    assert!(e.handle.is_some());
                }
                names.push(String::from_utf8(e.name.to_vec()).unwrap());
            }
        }
        assert!(batches > 5, "{batches} batches: cookies were not exercised");
        names.retain(|n| n != "." && n != "..");
        names.sort();
        let mut want: Vec<String> = std::fs::read_dir(s.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        want.sort();
        assert_eq!(names, want, "plus={plus}");
    }
    // The one-call helper with the mount's FSINFO-derived sizes.
    let all = m.read_dir(m.root(), true).collect_all().await.unwrap();
    assert!(all.len() >= n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_statuses() {
    let s = TestServer::start("errors", false, false).await;
    let m = s.mount().await;
    let nfs = m.nfs();
    let f = mkfile(&m, "file", b"data").await;
    m.mkdir_path("dir/sub", 0o755, true).await.unwrap();
    let (dir, _) = m.lookup_path("dir").await.unwrap();

    // NOENT: LOOKUP and REMOVE of a missing name.
    assert_status(
        nfs.lookup(m.root(), "missing").await,
        NfsStat3::NFS3ERR_NOENT,
    );
    assert_status(
        nfs.remove(m.root(), "missing").await,
        NfsStat3::NFS3ERR_NOENT,
    );
    // EXIST: MKDIR over a file.
    assert_status(
        nfs.mkdir(m.root(), "file", &Sattr3::default()).await,
        NfsStat3::NFS3ERR_EXIST,
    );
    // NOTDIR: LOOKUP, CREATE and READDIR in a regular file.
    assert_status(nfs.lookup(&f, "x").await, NfsStat3::NFS3ERR_NOTDIR);
    assert_status(
        nfs.create(&f, "x", CreateHow3::Unchecked(Sattr3::default()))
            .await,
        NfsStat3::NFS3ERR_NOTDIR,
    );
    assert_status(
        nfs.readdir(&f, 0, [0; 8], 4096).await,
        NfsStat3::NFS3ERR_NOTDIR,
    );
    assert_status(nfs.rmdir(m.root(), "file").await, NfsStat3::NFS3ERR_NOTDIR);
    // ISDIR: READ and WRITE of a directory.
    assert_status(nfs.read(&dir, 0, 10).await, NfsStat3::NFS3ERR_ISDIR);
    assert_status(
        nfs.write(&dir, 0, Bytes::from_static(b"x"), StableHow::FILE_SYNC)
            .await,
        NfsStat3::NFS3ERR_ISDIR,
    );
    // NOTEMPTY: RMDIR of a directory with an entry.
    assert_status(nfs.rmdir(m.root(), "dir").await, NfsStat3::NFS3ERR_NOTEMPTY);
    // NAMETOOLONG: a 256-byte component (RFC 1813 §2.6).
    let long = "n".repeat(256);
    assert_status(
        nfs.create(m.root(), &long, CreateHow3::Unchecked(Sattr3::default()))
            .await,
        NfsStat3::NFS3ERR_NAMETOOLONG,
    );
    assert_status(
        nfs.lookup(m.root(), &long).await,
        NfsStat3::NFS3ERR_NAMETOOLONG,
    );
    // STALE: the handle of a removed file.
    let gone = mkfile(&m, "gone", b"").await;
    nfs.remove(m.root(), "gone").await.unwrap();
    assert_status(nfs.getattr(&gone).await, NfsStat3::NFS3ERR_STALE);
    assert_status(nfs.read(&gone, 0, 1).await, NfsStat3::NFS3ERR_STALE);
    // BADHANDLE: bytes that are no handle of this server.
    let forged = NfsFh3(Bytes::from_static(b"not a handle"));
    assert_status(nfs.getattr(&forged).await, NfsStat3::NFS3ERR_BADHANDLE);
    // INVAL: RMDIR of "." (§3.3.13).
    assert_status(nfs.rmdir(&dir, ".").await, NfsStat3::NFS3ERR_INVAL);
    // The error names the procedure.
    let e = nfs.lookup(m.root(), "missing").await.unwrap_err();
    assert_eq!(e.to_string(), "NFS LOOKUP: NFS3ERR_NOENT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acces_for_another_user_and_rofs_for_a_read_only_export() {
    // ACCES: uid 1000 reading a 0600 file owned by root, and creating in a 0755
    // directory owned by root.
    let s = TestServer::start("acces", false, false).await;
    std::fs::write(s.local("secret"), b"s").unwrap();
    std::fs::set_permissions(s.local("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut sys = auth_sys_self();
    sys.uid = 1000;
    sys.gid = 1000;
    sys.gids = oncrpc::Gids::default();
    let opts = MountOptions {
        cred: sys.to_opaque_auth(),
        ..s.options()
    };
    let m = s.mount_with(&opts).await;
    let (fh, _) = m.lookup_path("secret").await.unwrap();
    assert_status(m.nfs().read(&fh, 0, 1).await, NfsStat3::NFS3ERR_ACCES);
    assert_status(
        m.create_file("new", 0o644, false).await,
        NfsStat3::NFS3ERR_ACCES,
    );
    let acc = m.nfs().access(&fh, access::READ).await.unwrap();
    assert_eq!(acc.access & access::READ, 0);

    // ROFS: every modifying procedure on a read-only export.
    let ro = TestServer::start("ro", true, false).await;
    std::fs::write(ro.local("f"), b"read me").unwrap();
    let m = ro.mount().await;
    let (fh, _) = m.lookup_path("f").await.unwrap();
    assert_eq!(m.read_all(&fh).await.unwrap(), b"read me");
    let nfs = m.nfs();
    assert_status(
        nfs.write(&fh, 0, Bytes::from_static(b"x"), StableHow::UNSTABLE)
            .await,
        NfsStat3::NFS3ERR_ROFS,
    );
    assert_status(
        m.create_file("g", 0o644, false).await,
        NfsStat3::NFS3ERR_ROFS,
    );
    assert_status(
        m.mkdir_path("d", 0o755, false).await,
        NfsStat3::NFS3ERR_ROFS,
    );
    assert_status(nfs.remove(m.root(), "f").await, NfsStat3::NFS3ERR_ROFS);
    assert_status(
        nfs.setattr(
            &fh,
            &Sattr3 {
                mode: Some(0o777),
                ..Sattr3::default()
            },
            None,
        )
        .await,
        NfsStat3::NFS3ERR_ROFS,
    );
    assert_eq!(std::fs::read(ro.local("f")).unwrap(), b"read me");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_server_restart_and_unstable_data_is_committed() {
    // A write verifier that changes on restart (§3.3.7): data written UNSTABLE before
    // the restart and committed after it must be re-sent by the writer.
    let s = TestServer::start("restart", false, false).await;
    let m = s.mount().await;
    let fh = m.create_file("f", 0o644, false).await.unwrap();
    let before = m
        .nfs()
        .write(&fh, 0, Bytes::from_static(b"abc"), StableHow::UNSTABLE)
        .await
        .unwrap();
    let dir = s.stop();
    let s2 = TestServer::start_on(dir, false, false).await;
    let nfs2 = NfsClient::connect(
        nfsclient::TransportKind::Tcp,
        s2.nfs,
        oncrpc::ClientConfig::default(),
    )
    .unwrap();
    // The old handle still names the file.
    assert_eq!(nfs2.getattr(&fh).await.unwrap().size, 3);
    let c = nfs2.commit(&fh, 0, 0).await.unwrap();
    assert_ne!(c.verf, before.verf, "a restarted server has a new verifier");
}
