//! Issue 27, restart recovery with the Linux client: our `nfsd` (NFSv4.1 by default) runs inside the
//! guest (export on a tmpfs, handle key and client records in a fixed `--state-dir`),
//! the guest's kernel client mounts it with `vers=4.1` over TCP twice (the second
//! mount without a shared cache: other inodes, the same client ID, so that a lock
//! conflict between them is decided by the server, not by the client's own lock
//! list). A process holds a write lock (`flock`) on a file through the first mount
//! while `dd` writes another file; nfsd is killed with SIGKILL in the middle of the
//! write and started again a second later. Then:
//! - nfsd's second start finds the client recorded and opens a grace period;
//! - the client reclaims: `dd` finishes and its file reads back with the md5 it was
//!   written with, after the guest drops its caches;
//! - the lock survived the restart: through the second mount `flock -n` is refused
//!   while the holder runs (the reclaimed lock, LOCK4denied), and granted once the
//!   holder has ended.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
E=/srv/v4-restart
M=/mnt/v4-restart
M2=/mnt/v4-restart-2
S=/var/lib/nfsd-v4-restart
step export_dir sh -c "mkdir -p $E $M $M2 $S && mount -t tmpfs -o size=128m tmpfs $E && chmod 777 $E && rm -f $S/nfs4-clients"
lab_on_exit "umount $E 2>/dev/null"
N=0
nfsd_start() {
  /share/bin/nfsd --bind 10.0.2.15 --nfs-port 2049 --mount-port 2049 --rpcbind off \
    --no-nlm --no-rdma --squash none --state-dir $S $E >"$LAB_RUN_DIR/nfsd-$N.log" 2>&1 &
  NFSD_PID=$!
  lab_on_exit "kill -9 $NFSD_PID 2>/dev/null"
  N=$((N + 1))
  lab_wait_listen 2049 60
}
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv4'
step nfsd_start nfsd_start
OPTS="vers=4.1,proto=tcp,port=2049,hard,timeo=50"
step mount mount.nfs 10.0.2.15:$E $M -n -o "$OPTS"
lab_on_exit "umount -f -l $M 2>/dev/null"
step mount_second mount.nfs 10.0.2.15:$E $M2 -n -o "$OPTS,nosharecache"
lab_on_exit "umount -f -l $M2 2>/dev/null"
step make_data sh -c "head -c 33554432 /dev/urandom > /tmp/data"
record data_md5 "$(md5sum /tmp/data | cut -d' ' -f1)"
step make_locked sh -c "echo locked > $M/locked"
# The holder: a write lock held 40 s across the restart.
flock -x $M/locked sleep 40 &
HOLDER=$!
sleep 2
step lock_is_held sh -c "! flock -n -x $M2/locked true"
dd if=/tmp/data of=$M/data bs=1M conv=fsync 2>"$LAB_RUN_DIR/dd.txt" &
DD=$!
wait_size() {
  local i=0
  until [ "$(stat -c %s $E/data 2>/dev/null || echo 0)" -ge "$1" ]; do
    [ $i -ge 1500 ] && return 1
    sleep 0.2
    i=$((i + 1))
  done
}
step reach_8m wait_size 8388608
step sigkill sh -c "kill -9 $NFSD_PID"
wait $NFSD_PID 2>/dev/null
record killed_at "$(stat -c %s $E/data) bytes"
sleep 1
step restart nfsd_start
record restarted_at "$(lab_uptime)"
step dd_done wait $DD
record dd_done_at "$(lab_uptime)"
step reclaimed_lock_still_held sh -c "! flock -n -x $M2/locked true"
record holder_alive "$(kill -0 $HOLDER 2>/dev/null && echo yes || echo no)"
step holder_done wait $HOLDER
step lock_free_after_holder flock -n -x $M2/locked true
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
record read_md5 "$(md5sum $M/data | cut -d' ' -f1)"
record server_md5 "$(md5sum $E/data | cut -d' ' -f1)"
record grace_line "$(grep -o 'grace period [0-9]* s for [0-9]* client(s) to reclaim' $LAB_RUN_DIR/nfsd-1.log)"
record open_ops "$(lab_mountstats $M OPEN:)"
record lock_ops "$(lab_mountstats $M LOCK:)"
step umount_second umount $M2
step umount umount $M
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn nfs4_restart_the_kernel_client_reclaims_its_open_and_lock() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let name = "nfs4-restart";
    let script = GuestScript::inline(name, GUEST)
        .binary("nfsd", &nfsd)
        .env("LAB_STEP_TIMEOUT", "300");
    let mut o = lab
        .guest(script)
        .run_name(name)
        .shared_boot("kclient")
        .timeout(Duration::from_secs(900))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    for k in [
        "killed_at",
        "restarted_at",
        "dd_done_at",
        "open_ops",
        "lock_ops",
    ] {
        eprintln!("{name}: {k}: {:?}", o.value(k));
    }
    o.host_step("grace_period_for_the_recorded_client", |o| {
        match o.value("grace_line") {
            Some(l) if l.ends_with("for 1 client(s) to reclaim") => Ok(()),
            other => Err(format!("nfsd's second start logged {other:?}")),
        }
    });
    o.host_step("holder_outlived_the_check", |o| {
        match o.value("holder_alive") {
            // The refusal after the restart counts only while the holder still held it.
            Some("yes") => Ok(()),
            other => Err(format!("the lock holder was alive at the check: {other:?}")),
        }
    });
    o.host_step("written_data_reads_back", |o| {
        let want = o.value("data_md5").unwrap_or("none");
        match (o.value("read_md5"), o.value("server_md5")) {
            (Some(r), Some(s)) if r == want && s == want => Ok(()),
            other => Err(format!(
                "md5 read back, on the server {other:?}, want {want}"
            )),
        }
    });
    o.assert_passed();
}
