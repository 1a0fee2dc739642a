//! Scenario (issue 27): the guest's Linux kernel NFS client mounts our `nfsd` on the
//! host with `vers=4.1` (served by default), over TCP and over RDMA (siw in the guest, our
//! userspace iWARP provider on the host), and with nothing but NFSv4.1 on the wire
//! (no MOUNT, no portmapper, no NLM):
//! - mountstats shows `vers=4.1` and the transport asked for;
//! - the pseudo file system: the export's path is looked up from the server's root
//!   (`PUTROOTFH`, `LOOKUP` of each component, as the kernel does for `host:/path`);
//! - `ls -la` of the export lists the names the host made, with their sizes and types
//!   (READDIR with attributes; GETATTR of each);
//! - `readlink` of a symlink the host made gives its target (READLINK);
//! - files the host made are copied out with the host's md5 (OPEN, READ: over RDMA
//!   in the client's Write chunks); files the guest makes are copied in and read
//!   back after dropping the guest's caches, and the host sees the guest's bytes
//!   (OPEN with create, WRITE, COMMIT, CLOSE); one is appended to and one truncated
//!   (SETATTR of the size under the open stateid); an exclusive create (`set -C`)
//!   succeeds once and then finds the file taken (EXCLUSIVE4_1);
//! - `flock` takes and releases a lock (LOCK, LOCKU), and through a second mount is
//!   refused while another process holds it (LOCK4denied), as mountstats' LOCK and
//!   LOCKU counts confirm;
//! - Connectathon's basic, special, general and lock groups pass (cthon-suite and
//!   nlm-locktest, as `nfs_locking_cthon.rs` runs them over NFSv3);
//! - a file and a directory the host made are renamed and removed (RENAME, REMOVE),
//!   and the host sees it;
//! - the unmount is clean (the client's DESTROY_SESSION and DESTROY_CLIENTID).

use std::time::Duration;

use lab::workspace::{build_binary, md5_file, pattern};
use lab::{GuestScript, HostProcess, Lab, Outcome};

const NFS_TCP_PORT: u16 = 35049;
const RDMA_PORT: u16 = lab::ports::HOST_SERVER_RDMA;
/// Same as nfs_rdma.rs: our FPDUs fit one IPv4 packet of the capture.
const MAX_ULPDU: u16 = 16_000;
const SIZES: [u64; 3] = [0, 4095, (1 << 20) + 1];
/// Files the guest writes: empty, one page less a byte, past one READ/WRITE
/// (1 MiB), several of them.
/// cthon-suite's tests (basic 9, special 15, general 4) and the lock group's 13, as
/// `nfs_locking_cthon.rs` runs them over NFSv3.
const CTHON_TESTS: usize = 28;
const LOCK_TESTS: usize = 13;
const SIZES_IN: [u64; 4] = [0, 4095, (1 << 20) + 1, 8 << 20];

const GUEST: &str = r#". /share/lib.sh
M=/mnt/v4
mkdir -p $M
if [ "$LAB_PROTO" = rdma ]; then
  step rdma_up lab_rdma_up
  OPTS="vers=4.1,proto=rdma,port=$LAB_NFS_PORT"
else
  OPTS="vers=4.1,proto=tcp,port=$LAB_NFS_PORT"
fi
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv4'
step mount timeout -s KILL 90 mount.nfs "10.0.2.2:$LAB_EXPORT" $M -n -v -o "$OPTS"
record opts "$(lab_mountstats $M opts:)"
record xprt "$(lab_xprt $M)"
step xprt_is_$LAB_PROTO lab_expect_xprt $M $LAB_PROTO
# name size type, one line per entry, sorted: what READDIR and GETATTR gave.
record listing "$(cd $M && for f in $(ls -A | sort); do stat -c '%n %s %F' $f; done | tr '\n' ';')"
record readlink "$(readlink $M/link)"
for n in $LAB_SIZES; do
  step "copy_out_$n" cp $M/from-host-$n /tmp/out-$n
  record "out:$n" "$(md5sum /tmp/out-$n | cut -d' ' -f1)"
done
for n in $LAB_SIZES_IN; do
  step "make_$n" sh -c "head -c $n /dev/urandom > /tmp/f$n"
  record "in:$n" "$(md5sum /tmp/f$n | cut -d' ' -f1)"
  step "copy_in_$n" cp /tmp/f$n $M/in-$n
done
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
for n in $LAB_SIZES_IN; do
  step "read_back_$n" lab_same_md5 /tmp/f$n $M/in-$n
done
step append sh -c "printf more >> $M/in-4095"
step truncate truncate -s 100 $M/in-1048577
step excl_create sh -c "set -C; echo x > $M/excl"
step excl_again_is_refused sh -c "! (set -C; echo y > $M/excl) 2>/dev/null"
# Byte-range locks (flock is a whole-file POSIX lock on NFS). The client checks its
# own processes' locks locally first, so the conflict is made through a second mount
# without a shared cache (other inodes; the same client ID): there the server's
# LOCK4denied (another lock owner) is what refuses it.
M2=/mnt/v4b
mkdir -p $M2
step mount_second timeout -s KILL 90 mount.nfs "10.0.2.2:$LAB_EXPORT" $M2 -n -o "$OPTS,nosharecache"
step lock flock -x $M/in-0 true
(flock -x $M/in-0 sleep 4) &
sleep 1
step lock_held_by_another_owner_is_refused sh -c "! flock -n -x $M2/in-0 true"
wait
step lock_after_release flock -n -x $M2/in-0 true
record lock_ops "$(lab_mountstats $M LOCK:)"
record locku_ops "$(lab_mountstats $M LOCKU:)"
record lock_ops_2 "$(lab_mountstats $M2 LOCK:)"
record locku_ops_2 "$(lab_mountstats $M2 LOCKU:)"
step umount_second umount $M2
# Connectathon's basic, special and general groups (cthon-suite) and its lock group
# (nlm-locktest: fcntl locks, here NFSv4.1 LOCK/LOCKT/LOCKU) on the NFSv4.1 mount.
mkdir -p $M/cthon
timeout 400 /share/bin/cthon-suite --require-nfs all $M/cthon >"$LAB_RUN_DIR/cthon.txt" 2>&1
record cthon_passes "$(grep -c '^PASS' "$LAB_RUN_DIR/cthon.txt")"
record cthon_failures "$(grep '^FAIL' "$LAB_RUN_DIR/cthon.txt" | tr '\n' ';')"
timeout 300 /share/bin/nlm-locktest suite $M/locktest >"$LAB_RUN_DIR/locks.txt" 2>&1
record locks_passes "$(grep -c '^PASS' "$LAB_RUN_DIR/locks.txt")"
record locks_failures "$(grep '^FAIL' "$LAB_RUN_DIR/locks.txt" | tr '\n' ';')"
rm -rf $M/cthon $M/locktest
step rename mv $M/to-rename $M/renamed
# -f: the file is the host's (root_squash: not ours), and rm would ask first.
step remove rm -f $M/renamed
step rmdir rmdir $M/empty-dir
step umount umount $M
exit 0
"#;

/// Mounts the host's nfsd with NFSv4.1 over `proto` ("tcp" or "rdma").
fn kernel_nfsv41_client(proto: &str) {
    let run_name = format!("nfs4-mount-{proto}");
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let suite = build_binary("lab", "cthon-suite");
    let locktest = build_binary("lab", "nlm-locktest");
    let export = crate::common::writable_export(&run_name);
    for (i, n) in SIZES.iter().enumerate() {
        let p = export.join(format!("from-host-{n}"));
        std::fs::write(&p, pattern(*n, i as u64 + 7)).unwrap();
    }
    std::fs::write(export.join("to-rename"), b"rename me\n").unwrap();
    std::fs::create_dir(export.join("empty-dir")).unwrap();
    std::os::unix::fs::symlink("from-host-0", export.join("link")).unwrap();
    let port = if proto == "rdma" {
        RDMA_PORT
    } else {
        NFS_TCP_PORT
    };
    let script = GuestScript::inline(&run_name, GUEST)
        .env("LAB_PROTO", proto)
        .env("LAB_NFS_PORT", port.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_SIZES", join(&SIZES))
        .env("LAB_SIZES_IN", join(&SIZES_IN))
        .env("LAB_STEP_TIMEOUT", "120")
        .binary("cthon-suite", &suite)
        .binary("nlm-locktest", &locktest);
    let mut args = vec![
        "--bind".to_string(),
        "127.0.0.1".to_string(),
        "--nfs-port".to_string(),
        NFS_TCP_PORT.to_string(),
        // MOUNT on the NFS port: NFSv4 needs none, and no other port is taken.
        "--mount-port".to_string(),
        NFS_TCP_PORT.to_string(),
        "--rpcbind".to_string(),
        "off".to_string(),
        "--no-nlm".to_string(),
    ];
    if proto == "rdma" {
        args.extend([
            "--rdma-provider".to_string(),
            "iwarp".to_string(),
            "--rdma-port".to_string(),
            RDMA_PORT.to_string(),
            "--rdma-max-ulpdu".to_string(),
            MAX_ULPDU.to_string(),
        ]);
    } else {
        // TCP only: the host's RDMA port may be another scenario's.
        args.push("--no-rdma".to_string());
    }
    args.push(export.display().to_string());
    let server = HostProcess::new("nfsd", &nfsd).args(args);
    let mut o: Outcome = lab
        .guest(script)
        .run_name(&run_name)
        // LAB_NFSD_LOG=info,nfsd::v4=trace logs every NFSv4 operation and status.
        .host_process(server.env(
            "RUST_LOG",
            &std::env::var("LAB_NFSD_LOG").unwrap_or_else(|_| "info".into()),
        ))
        .shared_boot("kclient")
        .timeout(Duration::from_secs(600))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    o.host_step("mounted_nfsv4_1", |o| match o.value("opts") {
        Some(x) if x.split([',', ' ', '\t']).any(|w| w == "vers=4.1") => Ok(()),
        other => Err(format!("mountstats opts {other:?}, not vers=4.1")),
    });
    o.host_step("listing_is_the_hosts", |o| {
        let got = o.value("listing").unwrap_or("missing");
        let mut want: Vec<String> = SIZES
            .iter()
            .map(|n| {
                format!(
                    "from-host-{n} {n} regular {}file",
                    if *n == 0 { "empty " } else { "" }
                )
            })
            .collect();
        want.push("empty-dir 4096 directory".into());
        want.push("link 11 symbolic link".into());
        want.push("to-rename 10 regular file".into());
        want.sort();
        let got_lines: Vec<&str> = got.split(';').filter(|l| !l.is_empty()).collect();
        // A directory's size is the host file system's; compare the rest exactly.
        let same = got_lines.len() == want.len()
            && got_lines.iter().zip(&want).all(|(g, w)| {
                if w.starts_with("empty-dir ") {
                    g.starts_with("empty-dir ") && g.ends_with(" directory")
                } else {
                    g == w
                }
            });
        if same {
            Ok(())
        } else {
            Err(format!("guest listing {got_lines:?}, want {want:?}"))
        }
    });
    o.host_step("readlink", |o| match o.value("readlink") {
        Some("from-host-0") => Ok(()),
        other => Err(format!("readlink gave {other:?}")),
    });
    o.host_step("copies_out_match_host_md5", |o| {
        for n in SIZES {
            let want = md5_file(&export.join(format!("from-host-{n}")));
            let got = o.value(&format!("out:{n}")).unwrap_or("missing");
            if got != want {
                return Err(format!("from-host-{n}: guest md5 {got}, host {want}"));
            }
        }
        Ok(())
    });
    o.host_step("host_has_the_guests_bytes", |o| {
        // in-4095 was appended to and in-1048577 truncated after these were recorded.
        for n in [0, 8 << 20] {
            let host = md5_file(&export.join(format!("in-{n}")));
            let guest = o.value(&format!("in:{n}")).unwrap_or("missing");
            if host != guest {
                return Err(format!("in-{n}: host md5 {host}, guest {guest}"));
            }
        }
        let size = |name: &str| std::fs::metadata(export.join(name)).map(|m| m.len());
        match (
            size("in-4095"),
            size("in-1048577"),
            std::fs::read(export.join("excl")),
        ) {
            (Ok(4099), Ok(100), Ok(x)) if x == b"x\n" => Ok(()),
            other => Err(format!(
                "appended, truncated, exclusive: {other:?}, want 4099, 100, \"x\\n\""
            )),
        }
    });
    o.host_step("locks_reached_the_server", |o| {
        // "LOCK: ops transmissions timeouts bytes_sent bytes_received queue rtt
        // execute errors": first mount, the flock and the background holder (LOCK and
        // LOCKU each); second mount, the refused LOCK (an error: the server's
        // LOCK4denied) and the one granted after the release, and its LOCKU.
        let field = |k: &str, i: usize| {
            o.value(k)
                .and_then(|l| l.split_whitespace().nth(i))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let got = [
            field("lock_ops", 1),
            field("locku_ops", 1),
            field("lock_ops_2", 1),
            field("lock_ops_2", 9),
            field("locku_ops_2", 1),
        ];
        if got.iter().zip([2, 2, 2, 1, 1]).all(|(g, w)| *g >= w) {
            Ok(())
        } else {
            Err(format!(
                "LOCK, LOCKU ops, second mount's LOCK ops and errors, LOCKU ops {got:?}, \
                 want at least 2, 2, 2, 1, 1"
            ))
        }
    });
    eprintln!(
        "{run_name}: cthon-suite {} of {CTHON_TESTS}, lock group {} of {LOCK_TESTS}",
        o.value("cthon_passes").unwrap_or("?"),
        o.value("locks_passes").unwrap_or("?")
    );
    o.host_step("cthon_lock", |o| {
        let got = o.value("locks_passes").unwrap_or("?");
        if got == LOCK_TESTS.to_string() {
            Ok(())
        } else {
            Err(format!(
                "{got} of {LOCK_TESTS} passed; failed: {}",
                o.value("locks_failures").unwrap_or("").replace(';', "\n  ")
            ))
        }
    });
    o.host_step("cthon_basic_special_general", |o| {
        let got: usize = o
            .value("cthon_passes")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let failures: Vec<&str> = o
            .value("cthon_failures")
            .unwrap_or("")
            .split(';')
            .filter(|l| !l.is_empty())
            .collect();
        if failures.is_empty() && got == CTHON_TESTS {
            Ok(())
        } else {
            Err(format!(
                "{got} of {CTHON_TESTS} passed; failed: {}",
                failures.join("\n  ")
            ))
        }
    });
    o.host_step("renamed_and_removed_on_the_host", |_| {
        let left: Vec<&str> = ["to-rename", "renamed", "empty-dir"]
            .into_iter()
            .filter(|n| export.join(n).exists())
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still on the host: {left:?}"))
        }
    });
    let passed = o.passed();
    if passed {
        let _ = std::fs::remove_dir_all(&export);
    }
    o.assert_passed();
}

fn join(sizes: &[u64]) -> String {
    sizes
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_client_mounts_our_host_server_over_tcp() {
    kernel_nfsv41_client("tcp");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_client_mounts_our_host_server_over_rdma() {
    kernel_nfsv41_client("rdma");
}
