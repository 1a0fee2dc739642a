//! File handles across restarts, through the dispatcher (crate::fh, crate::vfs):
//! kernel handles opened by handle without a search of the export, the fallbacks
//! (no open_by_handle_at, no kernel handles) finding them by searching, handles the
//! same before and after, forged and altered ones refused before anything is
//! searched, removed objects and directories moved out of the export stale.

mod common;

use common::*;
use nfs3::attr::*;
use nfs3::io::*;
use nfs3::readdir::*;
use nfs3::*;
use nfsd::vfs::HandleMode;
use nfsd::{HandleConfig, HandleKey, KernelHandles, Squash};
use xdr::Bytes;

fn getattr(h: &Harness, fh: &NfsFh3) -> NfsResult<GetAttr3ResOk, Void> {
    h.nfs(NfsProc3::GETATTR, &GetAttr3Args { object: fh.clone() })
}

fn read(h: &Harness, fh: &NfsFh3) -> Vec<u8> {
    let r: Read3Res = h.nfs(
        NfsProc3::READ,
        &Read3Args {
            file: fh.clone(),
            offset: 0,
            count: 1000,
        },
    );
    match r {
        NfsResult::Ok(ok) => ok.data.0.to_vec(),
        NfsResult::Fail(s, _) => panic!("READ: {s:?}"),
    }
}

/// Searches of the export so far (each one a walk of the whole export).
fn searches(h: &Harness) -> u64 {
    h.server.table().exports[0].export.searches()
}

fn mode(h: &Harness) -> HandleMode {
    h.server.table().exports[0].export.mode.clone()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A small tree: a/b/c/deep.txt, plus files, and the handles of all of it.
struct Tree {
    root: NfsFh3,
    a: NfsFh3,
    c: NfsFh3,
    deep: NfsFh3,
    top: NfsFh3,
}

fn tree(h: &Harness) -> Tree {
    let root = h.root();
    let a = h.new_dir(&root, "a");
    let b = h.new_dir(&a, "b");
    let c = h.new_dir(&b, "c");
    let deep = h.new_file(&c, "deep.txt");
    let top = h.new_file(&root, "top.txt");
    std::fs::write(h.export.join("a/b/c/deep.txt"), b"deep data").unwrap();
    for i in 0..50 {
        std::fs::write(h.export.join(format!("a/f{i}")), b"").unwrap();
    }
    Tree {
        root,
        a,
        c,
        deep,
        top,
    }
}

/// Everything a client held before the restart works after it, and LOOKUP gives the
/// very same handles again.
fn assert_tree_served(h: &Harness, t: &Tree) {
    assert_eq!(h.root(), t.root, "MNT gives the same root handle");
    assert_eq!(read(h, &t.deep), b"deep data");
    for (fh, ty) in [
        (&t.a, Ftype3::NF3DIR),
        (&t.c, Ftype3::NF3DIR),
        (&t.top, Ftype3::NF3REG),
    ] {
        match getattr(h, fh) {
            NfsResult::Ok(ok) => assert_eq!(ok.obj_attributes.ftype, ty),
            NfsResult::Fail(s, _) => panic!("GETATTR after restart: {s:?}"),
        }
    }
    // LOOKUP ".." of a deep directory opened by handle: its parent, no search.
    let b = h.fh(&t.c, "..");
    assert_eq!(h.fh(&b, "c"), t.c);
    assert_eq!(h.fh(&t.c, "deep.txt"), t.deep);
    assert_eq!(h.fh(&t.root, "top.txt"), t.top);
}

#[test]
fn kernel_handles_resolve_after_a_restart_without_a_search() {
    let h = Harness::new();
    let t = tree(&h);
    // ext4/xfs/tmpfs/btrfs all make handles: kernel kind (byte 4 is 1), and its
    // length is the file system's handle length + 38.
    assert_eq!(t.deep.0[4], 1, "kernel-kind handle");
    assert!(t.deep.0.len() <= NFS3_FHSIZE as usize);
    let h = h.restart();
    if is_root() {
        assert_eq!(mode(&h), HandleMode::OpenByHandle);
    } else {
        // Without CAP_DAC_READ_SEARCH the kernel refuses open_by_handle_at (EPERM):
        // the export says so and searches instead (the binary test runs nfsd as
        // nobody to check that fallback end to end).
        let HandleMode::KernelSearch(why) = mode(&h) else {
            panic!("{:?}", mode(&h))
        };
        assert!(why.contains("CAP_DAC_READ_SEARCH"), "{why}");
    }
    assert_tree_served(&h, &t);
    if is_root() {
        assert_eq!(searches(&h), 0, "opened by handle, never searched");
    }
}

#[test]
fn without_open_by_handle_kernel_handles_are_found_by_a_search() {
    let h = Harness::new().with_kernel_handles(KernelHandles::NoOpen);
    let t = tree(&h);
    assert!(matches!(mode(&h), HandleMode::KernelSearch(_)));
    let h = h.restart();
    assert_eq!(searches(&h), 0);
    assert_tree_served(&h, &t);
    assert!(searches(&h) >= 1, "found by searching the export");
    // A server as root afterwards opens the same handles by handle: the kind does
    // not depend on the privilege.
    let h = h.with_kernel_handles(KernelHandles::Auto);
    assert_tree_served(&h, &t);
}

#[test]
fn inode_handles_are_found_by_a_search() {
    let h = Harness::new().with_kernel_handles(KernelHandles::Off);
    let t = tree(&h);
    assert_eq!(t.deep.0[4], 2, "inode-kind handle");
    assert_eq!(t.deep.0.len(), nfsd::fh::INODE_LEN);
    let h = h.restart();
    assert_tree_served(&h, &t);
    assert!(searches(&h) >= 1);
}

/// A removed file's handle is STALE after a restart, in every mode, even when a new
/// file may have taken its inode number.
#[test]
fn a_removed_file_is_stale_after_a_restart() {
    for kernel in [
        KernelHandles::Auto,
        KernelHandles::NoOpen,
        KernelHandles::Off,
    ] {
        let h = Harness::new().with_kernel_handles(kernel);
        let t = tree(&h);
        let h = h.restart();
        std::fs::remove_file(h.export.join("a/b/c/deep.txt")).unwrap();
        std::fs::remove_file(h.export.join("top.txt")).unwrap();
        // Likely to reuse a freed inode number.
        std::fs::write(h.export.join("a/b/c/new.txt"), b"new").unwrap();
        std::fs::write(h.export.join("top2.txt"), b"new").unwrap();
        for fh in [&t.deep, &t.top] {
            assert_eq!(
                status(&getattr(&h, fh)),
                NfsStat3::NFS3ERR_STALE,
                "{kernel:?}"
            );
        }
    }
}

/// Forged and altered handles are refused by their MAC before anything is searched,
/// even on the fallback that would search the export for an unknown inode.
#[test]
fn forged_handles_never_reach_the_file_system() {
    let h = Harness::new().with_kernel_handles(KernelHandles::Off);
    let t = tree(&h);
    let h = h.restart();
    for fh in [&t.deep, &t.a] {
        for i in 5..fh.0.len() {
            let mut b = fh.0.to_vec();
            b[i] ^= 0x04;
            assert_eq!(
                status(&getattr(&h, &NfsFh3(Bytes::from(b)))),
                NfsStat3::NFS3ERR_STALE,
                "byte {i}"
            );
        }
    }
    assert_eq!(searches(&h), 0, "no forged handle started a search");
    // The genuine one does.
    assert_eq!(read(&h, &t.deep), b"deep data");
    assert_eq!(searches(&h), 1);
}

/// A handle of one export is not one of another, even relabelled with its id; and a
/// server with another key (the key file replaced) does not take old handles.
#[test]
fn handles_of_another_export_or_key_are_stale() {
    let second = TempDir::new("second");
    std::fs::write(second.path().join("other.txt"), b"other").unwrap();
    let h = Harness::with(false, Squash::None, &[second.path()]);
    let t = tree(&h);
    let table = h.server.table();
    let (first, other) = (&table.exports[0].export, &table.exports[1].export);
    let node = other.root().unwrap();
    let in_second = other.handle(&node);
    assert_eq!(status(&getattr(&h, &in_second)), NfsStat3::NFS3_OK);
    let mut relabelled = in_second.0.to_vec();
    relabelled[5..13].copy_from_slice(&first.id.to_be_bytes());
    assert_eq!(
        status(&getattr(&h, &NfsFh3(Bytes::from(relabelled)))),
        NfsStat3::NFS3ERR_STALE
    );
    drop(table);
    let mut h = h;
    h.handles = HandleConfig::new(HandleKey::ephemeral().unwrap());
    let h = h.restart();
    assert_eq!(status(&getattr(&h, &t.deep)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(status(&getattr(&h, &t.root)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(searches(&h), 0);
}

/// A directory moved out of the export after its handle was issued is STALE (it could
/// list what the export does not hold); a file moved out stays readable through the
/// handles issued while it was inside, as with knfsd's default no_subtree_check.
#[test]
fn a_directory_moved_out_of_the_export_is_stale() {
    let h = Harness::new();
    let t = tree(&h);
    let h = h.restart();
    std::fs::rename(h.export.join("a/b/c"), h.outside.join("c")).unwrap();
    std::fs::rename(h.export.join("top.txt"), h.outside.join("top.txt")).unwrap();
    let kernel_opened = mode(&h) == HandleMode::OpenByHandle;
    assert_eq!(status(&getattr(&h, &t.c)), NfsStat3::NFS3ERR_STALE);
    let r: ReadDir3Res = h.nfs(
        NfsProc3::READDIR,
        &ReadDir3Args {
            dir: t.c.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        },
    );
    assert_eq!(status(&r), NfsStat3::NFS3ERR_STALE);
    if kernel_opened {
        assert_eq!(status(&getattr(&h, &t.top)), NfsStat3::NFS3_OK);
    }
    // The file under the moved directory too, when it is found by searching.
    let h = h.with_kernel_handles(KernelHandles::NoOpen);
    assert_eq!(status(&getattr(&h, &t.c)), NfsStat3::NFS3ERR_STALE);
    assert_eq!(status(&getattr(&h, &t.deep)), NfsStat3::NFS3ERR_STALE);
    std::fs::rename(h.outside.join("c"), h.export.join("c")).unwrap();
    std::fs::remove_file(h.outside.join("top.txt")).unwrap();
    h.assert_outside_untouched();
}

/// The same for a directory deeper than the levels the check walks by one statx
/// each (32): inside, it resolves; moved out with its ancestors, it is stale.
#[test]
fn a_deep_directory_resolves_and_moved_out_is_stale() {
    let h = Harness::new();
    let mut dir = h.root();
    let mut deep = Vec::new();
    for i in 0..40 {
        dir = h.new_dir(&dir, &format!("d{i}"));
        deep.push(dir.clone());
    }
    let h = h.restart();
    for fh in [&deep[0], &deep[31], &deep[32], &deep[39]] {
        assert_eq!(status(&getattr(&h, fh)), NfsStat3::NFS3_OK);
    }
    std::fs::rename(h.export.join("d0"), h.outside.join("d0")).unwrap();
    for fh in [&deep[0], &deep[31], &deep[32], &deep[39]] {
        assert_eq!(status(&getattr(&h, fh)), NfsStat3::NFS3ERR_STALE);
    }
    std::fs::rename(h.outside.join("d0"), h.export.join("d0")).unwrap();
    assert_eq!(status(&getattr(&h, &deep[39])), NfsStat3::NFS3_OK);
    h.assert_outside_untouched();
}

/// READDIRPLUS hands out the same handles as LOOKUP, and its cookie verifier does
/// not change across a restart (it does not depend on the handle format).
#[test]
fn readdirplus_handles_and_verifier_survive_a_restart() {
    let h = Harness::new();
    let t = tree(&h);
    let list = |h: &Harness| -> (CookieVerf3, Vec<(String, Option<NfsFh3>)>) {
        let r: ReadDirPlus3Res = h.nfs(
            NfsProc3::READDIRPLUS,
            &ReadDirPlus3Args {
                dir: t.a.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 65536,
                maxcount: 1 << 20,
            },
        );
        let NfsResult::Ok(ok) = r else {
            panic!("READDIRPLUS: {:?}", status(&r))
        };
        assert!(ok.reply.eof);
        let entries = ok
            .reply
            .entries
            .into_iter()
            .map(|e| (String::from_utf8(e.name.0.to_vec()).unwrap(), e.name_handle))
            .collect();
        (ok.cookieverf, entries)
    };
    let before = list(&h);
    let h = h.restart();
    let after = list(&h);
    assert_eq!(before, after);
    assert!(after.1.iter().all(|(_, fh)| fh.is_some()));
    let dotdot = after.1.iter().find(|(n, _)| n == "..").unwrap();
    assert_eq!(dotdot.1.as_ref(), Some(&t.root));
    let b = after.1.iter().find(|(n, _)| n == "b").unwrap();
    assert_eq!(b.1.as_ref(), Some(&h.fh(&t.a, "b")));
}
