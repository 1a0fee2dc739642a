//! Scenario: the guest's Linux kernel NFSv3 client mounts our `nfsd` running on the
//! host over TCP (`vers=3,proto=tcp,mountproto=tcp,nolock`; the guest sees the
//! host's 127.0.0.1 as 10.0.2.2), and:
//! - copies files of 0 B, 1 B, 4095 B, 1 MiB + 1 and 64 MiB in; after dropping its
//!   caches reads them back with matching md5, and the host sees the same bytes;
//! - copies files the host made out, md5 matching the host's;
//! - lists `.` and `..` (`ls -a`; getdents64 as strace shows it) in the mount root and
//!   two directories the host made: their d_ino are the host's inode numbers of the
//!   directory and its parent, and the mount root's `..` is the root itself;
//! - makes directories, renames, makes and reads a symlink, lists a directory of
//!   2,000 entries, removes it all, and unmounts cleanly;
//! - mountstats shows the TCP transport;
//! - nfsd's `--metrics` page says the kernel client's WRITEs of 1 MiB came apart from
//!   their calls (`oncrpc::tcp::call_data`), some of them spliced into pipes (through
//!   qemu's user-mode network the segments are small, and a WRITE whose data fills
//!   its pipes is read into memory instead).

use std::time::Duration;

use lab::workspace::{build_binary, check_nfs_copy_tree, md5_file, pattern};
use lab::{GuestScript, HostProcess, Lab, Outcome};

const NFS_PORT: u16 = 32049;
const MOUNT_PORT: u16 = 32048;
const SIZES: [u64; 5] = [0, 1, 4095, (1 << 20) + 1, 64 << 20];
/// nfsd's `--metrics` on the host; the guest scrapes it through slirp.
const METRICS_PORT: u16 = 32750;

const GUEST: &str = r#". /share/lib.sh
OPTS="vers=3,proto=tcp,port=$LAB_NFS_PORT,mountproto=tcp,mountport=$LAB_MOUNT_PORT,nolock"
M=/mnt/h
mkdir -p $M
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv3'
step mount mount.nfs "10.0.2.2:$LAB_EXPORT" $M -n -o "$OPTS"
record xprt "$(lab_xprt $M)"
step xprt_is_tcp lab_expect_xprt $M tcp
# `.` and `..` as getdents64 hands them to ls: "name d_ino d_off" for each.
dots() {
  strace -qq -v -s 256 -e trace=getdents64 -o /tmp/dots.st ls -a "$1" >/dev/null &&
    grep -o '{d_ino=[^}]*d_name="\.\.\?"}' /tmp/dots.st |
    sed 's/^{d_ino=\([0-9]*\), d_off=\([0-9]*\),.*d_name="\(.*\)"}$/\3 \1 \2/' |
    tr '\n' ' '
}
record "dots:root" "$(dots $M)"
record "dots:dots" "$(dots $M/dots)"
record "dots:sub" "$(dots $M/dots/sub)"
record ls_a "$(ls -a $M/dots | tr '\n' ' ')"
record ls_ai_root "$(ls -ai $M | head -2 | tr -s ' \n' '  ')"
step rmdir_dots rmdir $M/dots/sub $M/dots
step metrics_before wget -q -O $LAB_RUN_DIR/metrics-before.txt "http://10.0.2.2:$LAB_METRICS_PORT/metrics"
for n in $LAB_SIZES; do
  step "make_$n" sh -c "head -c $n /dev/urandom > /tmp/f$n"
  step "copy_in_$n" cp /tmp/f$n $M/in-$n
  step "copy_out_$n" cp $M/from-host-$n /tmp/out-$n
  record "out:$n" "$(md5sum /tmp/out-$n | cut -d' ' -f1)"
done
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
for n in $LAB_SIZES; do
  step "read_back_$n" lab_same_md5 /tmp/f$n $M/in-$n
done
step metrics_after wget -q -O $LAB_RUN_DIR/metrics-after.txt "http://10.0.2.2:$LAB_METRICS_PORT/metrics"
step mkdir mkdir -p $M/d1/d2
step rename mv $M/in-1 $M/d1/d2/renamed
step rename_dir mv $M/d1 $M/d1moved
step symlink ln -s d1moved/d2/renamed $M/link
record readlink "$(readlink $M/link)"
step read_via_symlink lab_same_md5 /tmp/f1 $M/link
step make_2000 sh -c "mkdir $M/many && cd $M/many && i=0 && while [ \$i -lt 2000 ]; do : > f\$i; i=\$((i+1)); done"
step drop_caches_2 sh -c 'echo 3 >/proc/sys/vm/drop_caches'
record many "$(ls $M/many | wc -l)"
step remove_2000 rm -r $M/many
step remove_link rm $M/link
step rmdir sh -c "rm $M/d1moved/d2/renamed && rmdir $M/d1moved/d2 $M/d1moved"
step umount umount $M
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_tcp_client_to_our_host_server() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let export = crate::common::writable_export("nfs-tcp");
    // Directories whose `.` and `..` the guest lists (and then removes).
    std::fs::create_dir_all(export.join("dots/sub")).unwrap();
    let ino = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().ino()
    };
    let (root_ino, dots_ino, sub_ino) = (
        ino(&export),
        ino(&export.join("dots")),
        ino(&export.join("dots/sub")),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let all = std::fs::Permissions::from_mode(0o777);
        std::fs::set_permissions(export.join("dots"), all).unwrap();
    }
    let mut host_md5 = Vec::new();
    for (i, n) in SIZES.iter().enumerate() {
        let p = export.join(format!("from-host-{n}"));
        std::fs::write(&p, pattern(*n, i as u64 + 1)).unwrap();
        host_md5.push(md5_file(&p));
    }
    let sizes: Vec<String> = SIZES.iter().map(u64::to_string).collect();
    let script = GuestScript::inline("nfs-tcp", GUEST)
        .env("LAB_NFS_PORT", NFS_PORT.to_string())
        .env("LAB_MOUNT_PORT", MOUNT_PORT.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_SIZES", sizes.join(" "))
        .env("LAB_METRICS_PORT", METRICS_PORT.to_string())
        .env("LAB_STEP_TIMEOUT", "240");
    let server = HostProcess::new("nfsd", &nfsd).args([
        "--bind".to_string(),
        "127.0.0.1".to_string(),
        "--nfs-port".to_string(),
        NFS_PORT.to_string(),
        "--mount-port".to_string(),
        MOUNT_PORT.to_string(),
        "--rpcbind".to_string(),
        "off".to_string(),
        // TCP only: host port 20049 may be the lab's hostfwd (nfs_rdma.rs covers RDMA).
        "--no-rdma".to_string(),
        "--metrics".to_string(),
        format!("127.0.0.1:{METRICS_PORT}"),
        export.display().to_string(),
    ]);
    let mut o: Outcome = lab
        .guest(script)
        .run_name("nfs-tcp")
        .host_process(server)
        .shared_boot("kclient")
        .timeout(Duration::from_secs(900))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    o.host_step("xprt_is_tcp", |o| match o.value("xprt") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", "tcp"]) => Ok(x.to_string()),
        other => Err(format!("mountstats xprt line is {other:?}, not tcp")),
    });
    o.host_step("copies_out_match_host_md5", |o| {
        for (n, want) in SIZES.iter().zip(&host_md5) {
            let got = o.value(&format!("out:{n}")).unwrap_or("missing");
            if got != want {
                return Err(format!("from-host-{n}: guest md5 {got}, host {want}"));
            }
        }
        Ok(())
    });
    o.host_step("dot_entries_name_the_right_inodes", |o| {
        // getdents64 d_ino is the fileid of our READDIR(PLUS) entry: `.` the
        // directory, `..` its parent, and at the mount root the root again.
        for (key, dot, dotdot) in [
            ("dots:root", root_ino, root_ino),
            ("dots:dots", dots_ino, root_ino),
            ("dots:sub", sub_ino, dots_ino),
        ] {
            let got = o.value(key).unwrap_or("missing");
            let f: Vec<&str> = got.split_whitespace().collect();
            let ok = f.len() == 6
                && (f[0], f[1], f[3], f[4]) == (".", &*dot.to_string(), "..", &*dotdot.to_string());
            if !ok {
                return Err(format!(
                    "{key}: getdents64 gave {got:?}, want `. {dot} <off> .. {dotdot} <off>`"
                ));
            }
        }
        match o.value("ls_a") {
            Some(l) if l.split_whitespace().eq([".", "..", "sub"]) => Ok(()),
            other => Err(format!("ls -a of dots: {other:?}")),
        }
    });
    check_nfs_copy_tree(&mut o, &export, &SIZES, 2000);
    o.host_step("write_data_came_in_by_splice", |o| {
        use lab::prometheus::{get, parse};
        let page = |name: &str| {
            let p = o.share_file(name);
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            parse(&text)
        };
        let (before, after) = (page("metrics-before.txt")?, page("metrics-after.txt")?);
        let moved = |key: &str| get(&after, key) - get(&before, key);
        let spliced = moved("nfsd_tcp_spliced_calls_total{}");
        let unspliced = moved("nfsd_tcp_unspliced_items_total{}");
        let bytes = moved("nfsd_tcp_spliced_bytes_total{}");
        // The 64 MiB file goes in 1 MiB WRITEs: each one's data comes apart.
        let at_least = (SIZES[4] >> 20) as f64;
        if spliced + unspliced < at_least || bytes <= 0.0 {
            return Err(format!(
                "WRITEs whose data came apart: {spliced} spliced ({bytes} bytes) and \
                 {unspliced} into memory, expected {at_least} at least, some spliced"
            ));
        }
        Ok(format!(
            "{spliced} WRITEs spliced ({bytes} bytes), {unspliced} into memory"
        ))
    });
    let passed = o.passed();
    if passed {
        let _ = std::fs::remove_dir_all(&export);
    }
    o.assert_passed();
}
