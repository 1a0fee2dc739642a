//! Scenario: Connectathon's four test groups (issue 15) on kernel mounts of our
//! `nfsd`, over TCP and over RDMA, **without** `nolock`. The guest's Linux client
//! mounts our nfsd on the host twice (`vers=3,proto=tcp` and
//! `vers=3,proto=rdma,port=30049`, locking on: no `nolock` in /proc/mounts) and runs
//! on each mount:
//!
//! - `cthon-suite --require-nfs all` (crates/lab/src/bin/cthon-suite.rs): the checks
//!   of cthon04's basic (test1-test9), special (op_unlk, op_ren, op_chmod, dupreq,
//!   excltest, negseek, rename, truncate, holey, nfsidem, rewind, telldir, freesp,
//!   bigfile, bigfile2) and general groups, re-implemented from cthon04's description
//!   (cthon04 cannot be built in the guest: no compiler; docs/cthon.md), at its `lab`
//!   scale (fewer repetitions than cthon04's defaults; every check kept);
//! - `nlm-locktest suite`: the lock group (cthon04 `tlocklfs` tests 1-13) through our
//!   NLM, including a blocked F_SETLKW woken by our GRANTED callback.
//!
//! Asserted: each mount is locking-enabled and on the expected transport; 28 of 28
//! cthon-suite tests pass on each (any `FAIL` line is reported with its test and
//! operation); 13 of 13 lock tests pass on each.
//!
//! For the lock group's GRANTED callbacks the server must reach the guest's lockd:
//! the same port forwards as `nfs_locking` (guest rpcbind as host 30111, lockd 30021,
//! statd 30662), so this scenario shares `nfs_locking`'s boot (`kclient-nlm`) rather
//! than the plain `kclient` one; its module name sorts right after `nfs_locking`, so
//! a `--test-threads=1` run of the test binary boots that guest once for both. nfsd serves its own portmapper on 127.0.0.1:111 and
//! its default ports (NFS 2049, MOUNT 20048, NLM 4045), RDMA on 30049: those host ports
//! must be free.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, HostProcess, Lab};

const RDMA_PORT: u16 = lab::ports::HOST_SERVER_RDMA;
const CLIENT_PORTMAP: u16 = 30111;
const GUEST_LOCKD: u16 = 30021;
const GUEST_STATD: u16 = 30662;
/// cthon-suite's tests: basic 9, special 15, general 4.
const CTHON_TESTS: usize = 28;
const LOCK_TESTS: usize = 13;

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
locking_on() { ! awk -v m="$1" '$2==m' /proc/mounts | grep -q nolock; }
# cthon MNT PROTO: the suite in MNT/cthon-PROTO, output to cthon-PROTO.txt, timed.
cthon() {
  local t0 rc
  mkdir -p "$1/cthon-$2" || return 1
  t0=$(lab_uptime)
  timeout 300 /share/bin/cthon-suite --require-nfs all "$1/cthon-$2" >"$LAB_RUN_DIR/cthon-$2.txt" 2>&1
  rc=$?
  record "cthon_secs_$2" "$(echo "$(lab_uptime) $t0" | awk '{printf "%.1f", $1-$2}')"
  cat "$LAB_RUN_DIR/cthon-$2.txt"
  rmdir "$1/cthon-$2" 2>/dev/null
  return $rc
}
locks() {
  local t0 rc
  t0=$(lab_uptime)
  timeout 200 /share/bin/nlm-locktest suite "$1/locktest-$2" >"$LAB_RUN_DIR/locks-$2.txt" 2>&1
  rc=$?
  record "locks_secs_$2" "$(echo "$(lab_uptime) $t0" | awk '{printf "%.1f", $1-$2}')"
  cat "$LAB_RUN_DIR/locks-$2.txt"
  rm -f "$1/locktest-$2"
  return $rc
}
step lockd_port lab_lockd_port "$LAB_LOCKD_PORT"
step statd_up lab_statd_up "$LAB_STATD_PORT"
mkdir -p /mnt/ct-tcp /mnt/ct-rdma
step mount_tcp mount.nfs "10.0.2.2:$LAB_EXPORT" /mnt/ct-tcp -n -o vers=3,proto=tcp
step mount_rdma mount.nfs "10.0.2.2:$LAB_EXPORT" /mnt/ct-rdma -n -o "vers=3,proto=rdma,port=$LAB_RDMA_PORT"
record proc_mounts "$(grep ' /mnt/ct-' /proc/mounts | tr '\n' ';')"
step locking_on_tcp locking_on /mnt/ct-tcp
step locking_on_rdma locking_on /mnt/ct-rdma
step xprt_is_tcp lab_expect_xprt /mnt/ct-tcp tcp
step xprt_is_rdma lab_expect_xprt /mnt/ct-rdma rdma
# Every test runs even after a failure: the host reports each FAIL line.
cthon /mnt/ct-tcp tcp
cthon /mnt/ct-rdma rdma
locks /mnt/ct-tcp tcp
locks /mnt/ct-rdma rdma
for p in tcp rdma; do
  record "cthon_passes_$p" "$(grep -c '^PASS' "$LAB_RUN_DIR/cthon-$p.txt")"
  record "cthon_failures_$p" "$(grep '^FAIL' "$LAB_RUN_DIR/cthon-$p.txt" | tr '\n' ';')"
  record "locks_passes_$p" "$(grep -c '^PASS' "$LAB_RUN_DIR/locks-$p.txt")"
  record "locks_failures_$p" "$(grep '^FAIL' "$LAB_RUN_DIR/locks-$p.txt" | tr '\n' ';')"
done
step umount_tcp umount /mnt/ct-tcp
step umount_rdma umount /mnt/ct-rdma
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn connectathon_basic_special_general_and_lock_pass_over_tcp_and_rdma_with_locking() {
    let run_name = "nfs-locking-cthon";
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let suite = build_binary("lab", "cthon-suite");
    let locktest = build_binary("lab", "nlm-locktest");
    let export = crate::common::writable_export(run_name);
    let state = std::env::temp_dir().join(format!("lab-{run_name}-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let server = HostProcess::new("nfsd", &nfsd)
        .args([
            "--bind".to_string(),
            "127.0.0.1".to_string(),
            "--rdma-port".to_string(),
            RDMA_PORT.to_string(),
            "--rpcbind".to_string(),
            "serve".to_string(),
            "--client-portmap-port".to_string(),
            CLIENT_PORTMAP.to_string(),
            "--state-dir".to_string(),
            state.display().to_string(),
            export.display().to_string(),
        ])
        .env("RUST_LOG", "info");
    let script = GuestScript::inline(run_name, GUEST)
        .env("LAB_RDMA_PORT", RDMA_PORT.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_LOCKD_PORT", GUEST_LOCKD.to_string())
        .env("LAB_STATD_PORT", GUEST_STATD.to_string())
        .binary("rpc.statd", "/usr/sbin/rpc.statd")
        .binary("cthon-suite", &suite)
        .binary("nlm-locktest", &locktest);
    let mut o = lab
        .guest(script)
        .run_name(run_name)
        .host_process(server)
        .forward(CLIENT_PORTMAP, 111)
        .forward(GUEST_LOCKD, GUEST_LOCKD)
        .forward(GUEST_STATD, GUEST_STATD)
        .shared_boot("kclient-nlm")
        .timeout(Duration::from_secs(900))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    for proto in ["tcp", "rdma"] {
        eprintln!(
            "cthon-suite {proto}: {} of {CTHON_TESTS} passed in {} s; lock suite: {} of \
             {LOCK_TESTS} in {} s",
            o.value(&format!("cthon_passes_{proto}")).unwrap_or("?"),
            o.value(&format!("cthon_secs_{proto}")).unwrap_or("?"),
            o.value(&format!("locks_passes_{proto}")).unwrap_or("?"),
            o.value(&format!("locks_secs_{proto}")).unwrap_or("?"),
        );
        o.host_step(&format!("cthon_basic_special_general_{proto}"), |o| {
            let fails = o
                .value(&format!("cthon_failures_{proto}"))
                .unwrap_or("")
                .to_string();
            let passes = o.value(&format!("cthon_passes_{proto}")).unwrap_or("?");
            if !fails.is_empty() {
                return Err(format!(
                    "{passes} of {CTHON_TESTS} passed; failed: {}",
                    fails.replace(';', "\n  ")
                ));
            }
            if passes != CTHON_TESTS.to_string() {
                return Err(format!(
                    "{passes} of {CTHON_TESTS} passed (see cthon-{proto}.txt)"
                ));
            }
            Ok(())
        });
        o.host_step(&format!("cthon_lock_{proto}"), |o| {
            let passes = o.value(&format!("locks_passes_{proto}")).unwrap_or("?");
            if passes == LOCK_TESTS.to_string() {
                Ok(())
            } else {
                Err(format!(
                    "{passes} of {LOCK_TESTS} passed; failed: {}",
                    o.value(&format!("locks_failures_{proto}")).unwrap_or("")
                ))
            }
        });
    }
    if o.passed() {
        let _ = std::fs::remove_dir_all(&export);
        let _ = std::fs::remove_dir_all(&state);
    }
    o.assert_passed();
}
