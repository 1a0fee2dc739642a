//! Issue 16, crash and restart: our `nfsd` runs inside the guest (export on a tmpfs,
//! handle key in a fixed `--state-dir`), the guest's kernel NFSv3 client mounts it
//! (`hard`, TCP or RDMA: `proto=rdma` through siw to nfsd's userspace iWARP,
//! `--rdma-provider iwarp`) and fio writes a file with crc32c verify headers
//! (48 MiB in blocks of 64 KiB-1 MiB, buffered; every 32 blocks, ~17 MiB, an fsync,
//! which COMMITs; in between the flusher writes back from 2 MiB of dirty data on,
//! UNSTABLE). So during the run data is acknowledged UNSTABLE and not committed for
//! longer than between a WRITE reply and the COMMIT after it. While fio writes, nfsd is killed with SIGKILL twice
//! (when the server's file reaches 10 and then 28 MiB: before the first COMMIT, and
//! with ~17 MiB committed and more written UNSTABLE; each time once a reply of that
//! start has reached the client) and started again a second later. fio must finish; then the client
//! drops its caches and fio's `verify_only` pass reads the whole file back over NFS:
//! 0 verify errors, and the file reads the same through the mount and on the
//! server's tmpfs.
//!
//! What it proves beyond "the data is intact": nfsd prints its write verifier at
//! each start (new per start, RFC 1813 §3.3.7), and the guest traces the client's
//! `nfs_writeback_done` and `nfs_commit_done` events. The test checks that the three
//! starts had three different verifiers and that the client saw each of them in its
//! WRITE/COMMIT replies, and it reports (does not assert: timing) the ranges
//! acknowledged UNSTABLE under an earlier verifier and written again under a later
//! one: the client resending uncommitted data because the verifier changed. What it cannot prove: that resending was needed for
//! the data to survive. nfsd's WRITE goes straight to `pwrite` on the export (no
//! buffering in nfsd), and a tmpfs keeps what was written when the process dies, so
//! what SIGKILL loses is only the calls in flight (retransmitted by the client after
//! it reconnects), never acknowledged data.

use std::collections::BTreeSet;
use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab, Outcome};

const GUEST: &str = r#". /share/lib.sh
P=$LAB_PROTO
SIZE=${LAB_FIO_SIZE:-48}
E=/srv/crash-$P
M=/mnt/crash-$P
S=/var/lib/nfsd-crash-$P
T=/sys/kernel/tracing
FIO="env LD_LIBRARY_PATH=/share/lib /share/bin/fio"
C="--name=crash --filename=$M/f --rw=write --bsrange=64k-1m --size=${SIZE}m --ioengine=psync --verify=crc32c"
step rdma_up lab_rdma_up
step export_dir sh -c "mkdir -p $E $M $S && mount -t tmpfs -o size=128m tmpfs $E && chmod 777 $E"
lab_on_exit "umount $E 2>/dev/null"
N=0
nfsd_start() {
  /share/bin/nfsd --bind 10.0.2.15 --nfs-port 2049 --mount-port 20048 --rdma-port 20049 \
    --rdma-provider iwarp --rpcbind off --no-nlm --state-dir $S $E >"$LAB_RUN_DIR/nfsd-$N.log" 2>&1 &
  NFSD_PID=$!
  lab_on_exit "kill -9 $NFSD_PID 2>/dev/null"
  N=$((N + 1))
  lab_wait_listen 2049 60 && lab_wait_listen 20049 60
}
nfsd_kill() {
  kill -9 $NFSD_PID || return 1
  wait $NFSD_PID 2>/dev/null
  return 0
}
wait_size() {
  local i=0
  until [ "$(stat -c %s $E/f 2>/dev/null || echo 0)" -ge "$1" ]; do
    [ $i -ge 3000 ] && { lab_log "$E/f not $1 bytes after 600 s"; return 1; }
    kill -0 $FIO_PID 2>/dev/null || { lab_log "fio ended before $E/f had $1 bytes"; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
}
# Waits until the client has had a reply from the running start: its write verifier
# (nfsd's log) is in the traced WRITE and COMMIT replies. The file's size alone is no
# sign: a client resending after a restart may write a high offset first, and a kill
# then can come before any reply of the new start reached the client.
seen_verifier() {
  local v i=0
  v=$(sed -n 's/^nfsd: write verifier //p' "$LAB_RUN_DIR/nfsd-$((N - 1)).log")
  [ -n "$v" ] || { lab_log "no write verifier in nfsd-$((N - 1)).log"; return 1; }
  until grep -q "verifier=$v" $T/trace; do
    [ $i -ge 300 ] && { lab_log "no reply with verifier $v reached the client in 60 s"; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
}
fio_wait() {
  local i=0
  while kill -0 $FIO_PID 2>/dev/null; do
    [ $i -ge 600 ] && { lab_log "fio still writing after 600 s"; return 1; }
    sleep 1
    i=$((i + 1))
  done
  wait $FIO_PID
}
# The events are enabled once per boot and never disabled, and the buffer sized
# once: switching a tracepoint off patches kernel text across CPUs, and under TCG a
# guest once locked up there for 10 minutes (soft lockup in the writing shell).
# Between runs only tracing_on (a flag) changes, and trace_on clears the buffer.
trace_on() {
  [ -d $T/events ] || mount -t tracefs nodev $T || return 1
  if [ ! -e /run/nfs-crash-trace ]; then
    echo 0 >$T/tracing_on && echo 8192 >$T/buffer_size_kb &&
      echo 1 >$T/events/nfs/nfs_writeback_done/enable &&
      echo 1 >$T/events/nfs/nfs_commit_done/enable && touch /run/nfs-crash-trace || return 1
  fi
  echo 0 >$T/tracing_on && echo >$T/trace && echo 1 >$T/tracing_on
}
trace_off() {
  echo 0 >$T/tracing_on && cp $T/trace "$LAB_RUN_DIR/trace.txt"
}
fio_verify() {
  $FIO $C --verify_only=1 >"$LAB_RUN_DIR/fio-verify.txt" 2>&1
}
step fio_runs $FIO --version
step nfsd_start nfsd_start
if [ "$P" = rdma ]; then PORT=20049; else PORT=2049; fi
step mount mount.nfs 10.0.2.15:$E $M -n -o vers=3,proto=$P,port=$PORT,mountproto=tcp,mountport=20048,nolock,hard,timeo=50
lab_on_exit "umount -f -l $M 2>/dev/null"
step xprt lab_expect_xprt $M $P
step trace_on trace_on
# The flusher writes back from 2 MiB of dirty data on (UNSTABLE WRITEs; it COMMITs
# only when no WRITE is outstanding, and an inode's leftovers only after the expiry,
# here 600 s), so between fio's fsyncs data sits acknowledged but uncommitted.
X=$(cat /proc/sys/vm/dirty_expire_centisecs)
B=$(cat /proc/sys/vm/dirty_background_ratio)
echo 60000 >/proc/sys/vm/dirty_expire_centisecs
echo 2097152 >/proc/sys/vm/dirty_background_bytes
lab_on_exit "echo $X >/proc/sys/vm/dirty_expire_centisecs; echo $B >/proc/sys/vm/dirty_background_ratio"
T0=$(lab_uptime)
$FIO $C --do_verify=0 --fsync=32 --end_fsync=1 >"$LAB_RUN_DIR/fio-write.txt" 2>&1 &
FIO_PID=$!
for k in ${LAB_KILL_AT_MIB:-10 28}; do
  step "reach_${k}m" wait_size $((k * 1048576))
  step "replied_${k}m" seen_verifier
  step "sigkill_${k}m" nfsd_kill
  record "killed_at_${k}m" "$(stat -c %s $E/f) bytes at $(lab_uptime)"
  sleep 1
  step "restart_${k}m" nfsd_start
  record "restarted_${k}m" "$(lab_uptime)"
done
step fio_write_done fio_wait
record fio_write_secs "$T0 $(lab_uptime)"
step trace_off trace_off
record write_ops "$(lab_mountstats $M WRITE:)"
record commit_ops "$(lab_mountstats $M COMMIT:)"
record xprt_end "$(lab_xprt $M)"
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
step fio_verify fio_verify
record verify_errors "$(grep -ciE 'verify.*(fail|bad|mismatch)|bad magic|err= *[1-9]' "$LAB_RUN_DIR/fio-verify.txt")"
record verify_read "$(grep -E '^ *READ:' "$LAB_RUN_DIR/fio-verify.txt")"
step same_data lab_same_md5 $M/f $E/f
step umount umount $M
exit 0
"#;

/// The crash-and-restart scenario over `proto`.
fn crash_restart(proto: &str) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let name = format!("nfs-crash-restart-{proto}");
    let script = GuestScript::inline(&name, GUEST)
        .binary("nfsd", &nfsd)
        .binary_with_libraries("fio", fio())
        .env("LAB_PROTO", proto)
        .env("LAB_STEP_TIMEOUT", "300");
    let mut o = lab
        .guest(script)
        .run_name(&name)
        .shared_boot("kclient")
        .timeout(Duration::from_secs(900))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    for k in ["fio_write_secs", "write_ops", "commit_ops", "verify_read"] {
        eprintln!("{name}: {k}: {:?}", o.value(k));
    }
    o.host_step("verify_errors_0", |o| match o.value("verify_errors") {
        Some("0") => Ok(()),
        other => Err(format!(
            "fio verify errors: {other:?} (see share/fio-verify.txt)"
        )),
    });
    o.host_step("verify_read_all", |o| {
        let want = format!("io={}.0MiB", 48);
        match o.value("verify_read") {
            Some(l) if l.contains(&want) => Ok(()),
            other => Err(format!(
                "fio verify pass READ line {other:?}, wanted {want}"
            )),
        }
    });
    o.host_step("xprt_end", |o| match o.value("xprt_end") {
        Some(x) if x.split_whitespace().nth(1) == Some(proto) => Ok(()),
        other => Err(format!("mountstats xprt line is {other:?}, not {proto}")),
    });
    if let Some(v) = o.host_step("verifier_changed_seen_by_client", check_resend) {
        eprintln!("{name}: {v}");
    }
    o.assert_passed();
}

/// fio on the host: installed by lab/setup (Debian's fio), shipped to the guest with
/// its libraries.
fn fio() -> &'static str {
    const FIO: &str = "/usr/bin/fio";
    assert!(
        std::path::Path::new(FIO).exists(),
        "{FIO} missing: lab/setup installs it (apt-get install fio)"
    );
    FIO
}

/// The server's verifiers (one per start, from nfsd-N.log, as the kernel prints
/// them) and, from the client's trace: the verifiers of its WRITE and COMMIT replies,
/// and a range written UNSTABLE under one verifier and written again under a later.
fn check_resend(o: &Outcome) -> Result<String, String> {
    let mut starts = Vec::new();
    for n in 0..3 {
        let log = std::fs::read_to_string(o.share_file(&format!("nfsd-{n}.log")))
            .map_err(|e| format!("share/nfsd-{n}.log: {e}"))?;
        let hex = log
            .lines()
            .find_map(|l| l.strip_prefix("nfsd: write verifier "))
            .ok_or_else(|| format!("nfsd-{n}.log has no write verifier line:\n{log}"))?;
        starts.push(kernel_verifier(hex)?);
    }
    if starts.iter().collect::<BTreeSet<_>>().len() != starts.len() {
        return Err(format!("the three starts share a verifier: {starts:?}"));
    }
    let trace = std::fs::read_to_string(o.share_file("trace.txt"))
        .map_err(|e| format!("share/trace.txt: {e}"))?;
    // (offset, count, stable, verifier) of each WRITE reply; verifiers of COMMITs.
    let mut writes = Vec::new();
    let mut commits = BTreeSet::new();
    for l in trace.lines() {
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_string)
        };
        // error= is the RPC task's status: the bytes written for a WRITE, 0 for a COMMIT.
        let ok = field("error=").is_some_and(|e| !e.starts_with('-'));
        if l.contains("nfs_writeback_done:") && ok {
            let (Some(off), Some(count), Some(stable), Some(verf)) = (
                field("offset=").and_then(|v| v.parse::<u64>().ok()),
                field("count=").and_then(|v| v.parse::<u64>().ok()),
                field("stable="),
                field("verifier="),
            ) else {
                return Err(format!("unparsed trace line: {l}"));
            };
            writes.push((off, count, stable, verf));
        } else if l.contains("nfs_commit_done:") && ok {
            commits.extend(field("verifier="));
        }
    }
    let seen = |v: &String| writes.iter().any(|w| &w.3 == v) || commits.contains(v);
    let unseen: Vec<_> = starts.iter().filter(|v| !seen(v)).collect();
    if !unseen.is_empty() {
        return Err(format!(
            "the client never saw verifiers {unseen:?} of the server's starts {starts:?} \
             (writes {}, commit verifiers {commits:?})",
            writes.len()
        ));
    }
    let rank = |v: &String| starts.iter().position(|s| s == v);
    let mut resent = 0;
    let mut resent_bytes = 0;
    // Per verifier the resent data was first acknowledged under: (writes, bytes).
    let mut by_start = vec![(0, 0); starts.len()];
    for (i, (off, count, stable, verf)) in writes.iter().enumerate() {
        if stable != "UNSTABLE" {
            continue;
        }
        let later = writes[i + 1..]
            .iter()
            .find(|w| w.0 < off + count && *off < w.0 + w.1 && rank(&w.3) > rank(verf));
        if later.is_some() {
            resent += 1;
            resent_bytes += count;
            if let Some(r) = rank(verf) {
                by_start[r].0 += 1;
                by_start[r].1 += count;
            }
        }
    }
    let unstable = writes.iter().filter(|w| w.2 == "UNSTABLE").count();
    let summary = format!(
        "verifiers {starts:?}; {} WRITE replies ({unstable} UNSTABLE), COMMIT verifiers \
         {commits:?}; {resent} UNSTABLE WRITEs ({resent_bytes} bytes) written again under \
         a later verifier ((writes, bytes) by the start they were first acknowledged \
         under: {by_start:?})",
        writes.len()
    );
    // Not asserted: whether a kill lands while data is acknowledged but not yet
    // committed is timing (under TCG the flusher and fio's fsyncs often COMMIT within
    // milliseconds of the last WRITE reply, and the kill trigger polls every 0.2 s).
    // Six runs (docs/hostile-peers.md): a resend after at least 7 of the 22 kills.
    Ok(summary)
}

/// nfsd prints its verifier as its 8 bytes in order, in hex; the kernel's trace
/// prints them in the same order (checked: `verifier=` of its COMMIT replies).
fn kernel_verifier(hex: &str) -> Result<String, String> {
    let v = u64::from_str_radix(hex.trim(), 16).map_err(|e| format!("verifier {hex}: {e}"))?;
    Ok(format!("{v:016x}"))
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn nfs_crash_restart_tcp() {
    crash_restart("tcp");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn nfs_crash_restart_rdma() {
    crash_restart("rdma");
}
