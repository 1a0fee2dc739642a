//! NFSv4.1 across the wire (issue 27): our `nfsd` (NFSv4.1 by default) on verbs in the server's
//! guest, the Linux kernel client in the other guest.
//!
//! Over siw1 (`pair-nfs4-siw`):
//! - a mount with no options at all, over TCP, settles on NFSv4.1 (the client asks
//!   for 4.2 first and is answered NFS4ERR_MINOR_VERS_MISMATCH);
//! - `vers=4.1,proto=rdma` over siw1; Connectathon (cthon-suite's basic, special and
//!   general groups, nlm-locktest's lock group) passes on both mounts, and 8 MiB
//!   written over RDMA has the same md5 on the server;
//! - two clients, one lock: the server's guest mounts its own server (a second
//!   kernel client) and holds a whole-file lock; the client's guest is refused it
//!   (LOCK4denied), and takes it once the holder lets go;
//! - NFSv3 and NFSv4.1 lockers on one file: a lock taken through a `vers=3` mount
//!   (NLM) refuses the same lock through the `vers=4.1` mount, and the other way
//!   round (one lock table, `nfsd/src/v4/lock_ops.rs`).
//!
//! Over rxe1 (`pair-nfs4-rxe`): `vers=4.1,proto=rdma`, Connectathon and the 8 MiB.

use super::{assert_both_passed, run_pair_with, same_bytes};
use lab::workspace::build_binary;
use lab::Outcome;
use std::time::Duration;

/// cthon-suite's tests (basic 9, special 15, general 4) and the lock group's 13.
const CTHON_TESTS: usize = 28;
const LOCK_TESTS: usize = 13;

/// Our nfsd with NFSv4.1 (and NLM, with its own portmapper, for the NFSv3 locker),
/// exporting /srv/p; with `$SECOND_CLIENT`, this guest's kernel mounts it too and
/// holds a lock the other guest must find taken.
const SERVER: &str = r#"
# The Linux client names itself to the server by its host name (EXCHANGE_ID's
# co_ownerid): two guests of the same name would be one client restarting, whose
# new instance drops the other's state (RFC 8881 §18.35.5).
echo lab-nfs4-server >/proc/sys/kernel/hostname
EXPORT=/srv/p
step export sh -c "mkdir -p /srv/p && mount -t tmpfs -o size=128m tmpfs /srv/p && chmod 777 /srv/p"
RUST_LOG=${NFSD_LOG:-info} /share/bin/nfsd --bind 10.0.3.1 --nfs-port 2049 --mount-port 20048 --rdma-port 20049 \
  --rdma-provider verbs --rpcbind serve --squash none --state-dir /tmp/nfsd-state \
  /srv/p >/share/nfsd.txt 2>&1 &
SPID=$!
step nfsd_ready sh -c 'i=0; until grep -q "^nfsd: ready" /share/nfsd.txt; do i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done'
# This guest's NIC on the wire unable to send, or its own client's mount stuck.
lab_stall_watch server 'NETDEV WATCHDOG\|not responding'
if [ -n "$SECOND_CLIENT" ]; then
  step nfs4_module modprobe nfsv4
  mkdir -p /mnt/s
  echo lock >/srv/p/lockfile
  step second_client_mount mount.nfs 10.0.3.1:/srv/p /mnt/s -n -o vers=4.1,proto=tcp
  # The holder: takes the lock through this guest's mount, says so, and keeps it
  # until the other guest has found it taken (after its Connectathon runs: minutes
  # in these guests, more on a busy host).
  flock -x /mnt/s/lockfile sh -c 'touch /srv/p/held; i=0; until [ -e /srv/p/release ] || [ $i -gt 900 ]; do i=$((i+1)); sleep 1; done' &
  HOLDER=$!
  step other_client_found_it_taken sh -c 'i=0; until [ -e /srv/p/release ]; do i=$((i+1)); [ $i -gt 900 ] && exit 1; sleep 1; done'
  step holder_let_go wait $HOLDER
  touch /srv/p/released
fi
step client_done sh -c "i=0; until [ -s $EXPORT/done ]; do i=\$((i+1)); [ \$i -gt 900 ] && exit 1; sleep 1; done; sleep 2"
record md5 "$(md5sum $EXPORT/f | cut -d' ' -f1)"
[ -n "$SECOND_CLIENT" ] && step second_client_umount umount /mnt/s
if [ -n "$TPID" ]; then kill -INT $TPID; wait $TPID; fi
kill -TERM $SPID; wait $SPID; record server_exit "$?"; cat /share/nfsd.txt
exit 0
"#;

/// The kernel client: the mounts, Connectathon on each, the 8 MiB, and with
/// `$SECOND_CLIENT` the two-client and the NFSv3/NFSv4.1 lock checks.
const CLIENT: &str = r#"
echo lab-nfs4-client >/proc/sys/kernel/hostname
lab_trace_rpcrdma
lab_stall_watch client 'NETDEV WATCHDOG\|not responding'
step nfs_modules sh -c 'modprobe nfsv4 && modprobe nfsv3'
mkdir -p /mnt/plain /mnt/r /mnt/m /mnt/v3
# cthon MOUNTPOINT NAME: Connectathon's groups on it, counts recorded under NAME.
cthon() {
  mkdir -p $1/cthon-$2
  timeout 600 /share/bin/cthon-suite --require-nfs all $1/cthon-$2 >"$LAB_RUN_DIR/cthon-$2.txt" 2>&1
  record cthon_passes_$2 "$(grep -c '^PASS' "$LAB_RUN_DIR/cthon-$2.txt")"
  record cthon_failures_$2 "$(grep '^FAIL' "$LAB_RUN_DIR/cthon-$2.txt" | tr '\n' ';')"
  # The lock group takes seconds; one still running after 120 s is stuck: save what
  # the client waits for (lab_rdma_state) before ending it at 300 s.
  /share/bin/nlm-locktest suite $1/locktest-$2 >"$LAB_RUN_DIR/locks-$2.txt" 2>&1 &
  lt=$!
  i=0; while kill -0 $lt 2>/dev/null && [ $i -lt 300 ]; do
    i=$((i+1)); sleep 1
    [ $i = 120 ] && lab_rdma_state /share/locks-$2-state
  done
  kill -9 $lt 2>/dev/null; wait $lt
  record locks_passes_$2 "$(grep -c '^PASS' "$LAB_RUN_DIR/locks-$2.txt")"
  record locks_failures_$2 "$(grep '^FAIL' "$LAB_RUN_DIR/locks-$2.txt" | tr '\n' ';')"
  # A group that did not pass: what the client was waiting for.
  rm -rf $1/cthon-$2 $1/locktest-$2
}
# taken FILE: flock finds FILE's whole-file lock held by another (its conflict exit
# code, not any other failure).
taken() { flock -n -E 99 "$1" true; rc=$?; [ $rc = 99 ] || { echo "flock exit $rc"; return 1; }; }
if [ -n "$SECOND_CLIENT" ]; then
  # First, while no other mount of the server shares its client: a mount of an
  # already mounted server would take that mount's transport.
  step plain_mount sh -c 'i=0; until mount.nfs 10.0.3.1:/srv/p /mnt/plain -n; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 2; done'
  record plain_opts "$(lab_mountstats /mnt/plain opts:)"
  record plain_xprt "$(lab_xprt /mnt/plain)"
  cthon /mnt/plain plain
  step umount_plain umount /mnt/plain
fi
step rdma_mount sh -c 'i=0; until mount.nfs 10.0.3.1:/srv/p /mnt/r -n -o vers=4.1,proto=rdma,port=20049; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 2; done'
record rdma_opts "$(lab_mountstats /mnt/r opts:)"
record rdma_xprt "$(lab_xprt /mnt/r)"
step make sh -c 'head -c 8388608 /dev/urandom > /tmp/f'
record md5 "$(md5sum /tmp/f | cut -d' ' -f1)"
step write cp /tmp/f /mnt/r/f
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
step read_back cmp /tmp/f /mnt/r/f
[ -z "$LOCK_LOOPS" ] && cthon /mnt/r rdma
# LAB_LOCK_LOOPS=N (a hunt, instead of Connectathon on this mount): the lock group N
# times, the client's state saved after each that fails.
if [ -n "$LOCK_LOOPS" ]; then
  n=0; bad=0
  while [ $n -lt "$LOCK_LOOPS" ]; do
    n=$((n+1))
    timeout 120 /share/bin/nlm-locktest suite /mnt/r/loop-$n >"$LAB_RUN_DIR/loop-$n.txt" 2>&1 ||
      { bad=$((bad+1)); lab_rdma_state /share/loop-$n-state; }
    rm -rf /mnt/r/loop-$n
  done
  record lock_loops "$n runs, $bad failed"
fi
if [ -n "$SECOND_CLIENT" ]; then
  # Markers from the other guest, seen without this client's caches.
  step marker_mount mount.nfs 10.0.3.1:/srv/p /mnt/m -n -o vers=4.1,proto=tcp,nosharecache,lookupcache=none,actimeo=0
  step held_by_the_other_client sh -c 'i=0; until [ -e /mnt/m/held ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.2; done'
  step refused_while_the_other_client_holds_it taken /mnt/r/lockfile
  touch /mnt/m/release
  step the_other_client_let_go sh -c 'i=0; until [ -e /mnt/m/released ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.2; done'
  step granted_once_released flock -n /mnt/r/lockfile true
  # NFSv3 (NLM) and NFSv4.1 lockers of one file, both ways.
  step statd_up lab_statd_up
  step v3_mount mount.nfs 10.0.3.1:/srv/p /mnt/v3 -n -o vers=3,proto=tcp,mountport=20048
  echo mix >/mnt/r/mix
  # mixed HOLDER OTHER H O: a lock on mix held through mount /mnt/HOLDER refuses the
  # same lock through /mnt/OTHER, which gets it once released (H, O: step names).
  mixed() {
    flock -x /mnt/$1/mix sh -c "touch /tmp/held-$1; i=0; until [ -e /tmp/release-$1 ] || [ \$i -gt 600 ]; do i=\$((i+1)); sleep 0.2; done" &
    H=$!
    step ${3}_holds sh -c "i=0; until [ -e /tmp/held-$1 ]; do i=\$((i+1)); [ \$i -gt 300 ] && exit 1; sleep 0.2; done"
    step ${4}_refused_while_${3}_holds taken /mnt/$2/mix
    touch /tmp/release-$1; wait $H
    step ${4}_granted_after_$3 flock -n /mnt/$2/mix true
  }
  mixed v3 r v3 v41
  mixed r v3 v41 v3
  step umount_v3 umount /mnt/v3
  step umount_markers umount /mnt/m
fi
step done sh -c 'echo done > /mnt/r/done && sync'
step umount umount /mnt/r
exit 0
"#;

/// Connectathon's counts recorded under `name` are all passes.
fn cthon_passed(c: &mut Outcome, name: &str) {
    let count = |c: &Outcome, k: &str| {
        c.value(&format!("{k}_{name}"))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let (passes, locks) = (count(c, "cthon_passes"), count(c, "locks_passes"));
    eprintln!("{name}: cthon-suite {passes} of {CTHON_TESTS}, lock group {locks} of {LOCK_TESTS}");
    c.host_step(&format!("cthon_on_{name}"), |c| {
        if passes == CTHON_TESTS && locks == LOCK_TESTS {
            Ok(())
        } else {
            Err(format!(
                "cthon-suite {passes} of {CTHON_TESTS}, lock group {locks} of {LOCK_TESTS}; \
                 failed: {} {}",
                c.value(&format!("cthon_failures_{name}")).unwrap_or(""),
                c.value(&format!("locks_failures_{name}")).unwrap_or("")
            ))
        }
    });
}

/// The mount's `opts:` line (recorded as `key`) says `vers=4.1`, and its `xprt:` line
/// (recorded as `xprt_key`) the transport `proto`.
fn mounted(c: &mut Outcome, key: &str, xprt_key: &str, proto: &str) {
    let (key, xprt_key) = (key.to_string(), xprt_key.to_string());
    c.host_step(&format!("{key}_is_nfsv4_1_over_{proto}"), |c| {
        let vers = c
            .value(&key)
            .is_some_and(|o| o.split([',', ' ', '\t']).any(|w| w == "vers=4.1"));
        let xprt = c
            .value(&xprt_key)
            .is_some_and(|x| x.split_whitespace().take(2).eq(["xprt:", proto]));
        if vers && xprt {
            Ok(())
        } else {
            Err(format!(
                "{key} {:?}, {xprt_key} {:?}: want vers=4.1 over {proto}",
                c.value(&key),
                c.value(&xprt_key)
            ))
        }
    });
}

fn kernel_nfsv41_client_to_our_nfsd(name: &str, dev: &str, second_client: bool) {
    let nfsd_log = std::env::var("LAB_NFSD_LOG").unwrap_or_else(|_| "info".into());
    let lock_loops = std::env::var("LAB_LOCK_LOOPS").unwrap_or_default();
    let env = [
        ("SECOND_CLIENT", if second_client { "1" } else { "" }),
        // Connectathon over RDMA in a TCG guest takes minutes.
        ("LAB_STEP_TIMEOUT", "600"),
        // LAB_NFSD_LOG=info,nfsd::v4=trace logs every NFSv4 operation and status.
        ("NFSD_LOG", nfsd_log.as_str()),
        ("LOCK_LOOPS", lock_loops.as_str()),
    ];
    let binaries = [
        ("cthon-suite", build_binary("lab", "cthon-suite")),
        ("nlm-locktest", build_binary("lab", "nlm-locktest")),
        ("rpc.statd", "/usr/sbin/rpc.statd".into()),
    ];
    let (mut s, mut c) = run_pair_with(
        name,
        dev,
        SERVER,
        CLIENT,
        &env,
        &binaries,
        Duration::from_secs(1200),
    );
    mounted(&mut c, "rdma_opts", "rdma_xprt", "rdma");
    if lock_loops.is_empty() {
        cthon_passed(&mut c, "rdma");
    } else {
        let got = c.value("lock_loops").unwrap_or("none").to_string();
        eprintln!("{name}: lock group loops: {got}");
        c.host_step("lock_loops_passed", |_| {
            if got.ends_with(", 0 failed") {
                Ok(())
            } else {
                Err(format!("lock group loops: {got}"))
            }
        });
    }
    if second_client {
        mounted(&mut c, "plain_opts", "plain_xprt", "tcp");
        cthon_passed(&mut c, "plain");
    }
    same_bytes(&mut s, &c);
    s.host_step("nfsd_exit_clean", |s| match s.value("server_exit") {
        Some("0") => Ok(()),
        other => Err(format!("nfsd exit status {other:?}")),
    });
    assert_both_passed(&s, &c);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_clients_mount_our_verbs_nfsd_across_a_wire_over_siw() {
    kernel_nfsv41_client_to_our_nfsd("pair-nfs4-siw", "siw", true);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_client_mounts_our_verbs_nfsd_across_a_wire_over_rxe() {
    kernel_nfsv41_client_to_our_nfsd("pair-nfs4-rxe", "rxe", false);
}
