//! Scenario: the guest's Linux kernel NFS client mounts our NFSv3-only `nfsd`
//! (`--no-nfs4`) on the host over RDMA without `vers=`, twice, in one run:
//! - `implied`: `proto=rdma,port=33049,mountproto=tcp,mountport=33048,nolock` (the
//!   nfs_rdma options without `vers=3`). mount.nfs (nfs-utils 2.6.2) takes any of
//!   mountproto=/mounthost=/mountaddr=/mountvers= as asking for NFSv3 and passes the
//!   options without a version: the kernel mounts NFSv3 (its default) and probes
//!   nothing but NFS_ACL v3, which our server answers PROG_UNAVAIL.
//! - `negotiated`: `proto=rdma,port=33049,nolock`, no MOUNT option at all, as a user
//!   types it. mount.nfs asks the kernel for NFSv4.2, then 4.1, then 4.0: each time
//!   the kernel connects over RDMA and sends an NFSv4 NULL, which our server answers
//!   PROG_MISMATCH (versions 3 to 3, RFC 5531 §9), and the kernel gives up on that
//!   version at once; then NFSv3, with MOUNT's port from our nfsd's portmapper
//!   (10.0.2.2:111, over TCP). (With `mountport=` alone, mount.nfs skips each NFSv4
//!   attempt locally, "Unsupported nfs4 mount option(s)", and never asks the server.)
//!   Before the server answered Calls it does not serve, it dropped the NFSv4 NULL
//!   (`err_no_binding`), and this mount hung: the kernel retransmitted it on a new
//!   connection after 60 s (timeo=600) and was still waiting when killed at 90 s.
//!
//! Asserted, for both mounts:
//! - the mount succeeds in at most 30 s (`mount_secs:<name>`, measured in the guest;
//!   the mount is killed at 90 s, so a hang is a failure with its time recorded);
//! - mountstats shows `vers=3` and `xprt: rdma`, /proc/mounts `vers=3,...,proto=rdma`;
//! - 64 KiB written through the mount reads back with matching md5 after the guest
//!   dropped its caches, and the host sees the same bytes.
//!
//! And that the NFSv4 probe happened and was answered:
//! - mount.nfs -v tried a `vers=4` option set for the `negotiated` mount;
//! - our server's connection counters (logged when a connection closes) show
//!   `unserved_calls` >= 1, and a connection whose every Call was unserved (a probe);
//! - qemu's host-side capture, realigned (`lab::realign`, see nfs_rdma.rs) and decoded
//!   by tshark, has an NFS version 4 Call and a PROG_MISMATCH reply to it giving
//!   versions 3 to 3.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use lab::workspace::{build_binary, md5_file};
use lab::{GuestScript, HostProcess, Lab, Outcome};

const RDMA_PORT: u16 = 33049;
const MOUNT_PORT: u16 = 33048;
/// Our nfsd's own portmapper: the kernel looks MOUNT up there when no mount option
/// names its port, and slirp takes the guest to the host's port as is.
const PORTMAP_PORT: u16 = 111;
/// Our nfsd also serves NFS over TCP; the guest does not use it.
const NFS_TCP_PORT: u16 = 34049;
/// Same as nfs_rdma.rs: our FPDUs fit one IPv4 packet of the realigned capture.
const MAX_ULPDU: u16 = 16_000;
/// The longest acceptable mount (the issue: over a minute with the probe unanswered).
const MOUNT_BOUND_SECS: f64 = 30.0;
/// The guest kills the mount after this, so a hang ends as a failure with its time.
const MOUNT_KILL_SECS: u32 = 90;
const NFS_PROGRAM: u32 = 100_003;

const GUEST: &str = r#". /share/lib.sh
# implied: the nfs_rdma options without vers=. mount.nfs takes mountproto= (also
# mounthost=, mountaddr=, mountvers=) as asking for NFSv3 and tries nothing else.
# negotiated: no MOUNT option at all (mountport= would make mount.nfs skip each
# NFSv4 attempt as "Unsupported nfs4 mount option(s)" without asking the server).
# mount.nfs then asks the kernel for NFSv4.2, 4.1, 4.0 over the RDMA port, and for
# NFSv3 once each has failed; the kernel then finds MOUNT through the portmapper on
# the server (our nfsd's, 10.0.2.2:111) and calls it over TCP (its default for
# proto=rdma).
OPTS_IMPLIED="proto=rdma,port=$LAB_NFS_PORT,mountproto=tcp,mountport=$LAB_MOUNT_PORT,nolock"
OPTS_NEGOTIATED="proto=rdma,port=$LAB_NFS_PORT,nolock"
step rdma_up lab_rdma_up
step make_data dd if=/dev/urandom of=/tmp/nv bs=4k count=16
# mount_timed NAME OPTS: mount on /mnt/NAME, timed, killed after LAB_MOUNT_KILL s;
# mount.nfs -v prints each set of options it tries (one per NFS version).
mount_timed() {
  local t0 t1 rc
  mkdir -p /mnt/$1
  t0=$(lab_uptime)
  timeout -s KILL "$LAB_MOUNT_KILL" mount.nfs "10.0.2.2:$LAB_EXPORT" /mnt/$1 -n -v -o "$2" >/tmp/mount-$1.txt 2>&1
  rc=$?
  t1=$(lab_uptime)
  cat /tmp/mount-$1.txt
  record "mount_secs:$1" "$(echo "$t1 $t0" | awk '{printf "%.2f", $1-$2}')"
  record "mount_tried:$1" "$(sed -n "s/.*trying text-based options '\([^']*\)'.*/\1/p" /tmp/mount-$1.txt | tr '\n' ' ')"
  return $rc
}
mount_is_v3() { lab_mountstats $1 opts: | grep -Eq '[[:space:],]vers=3(,|$)'; }
# mount_and_check NAME OPTS: mount, record what it is, write 64 KiB, read it back
# past the page cache, unmount.
mount_and_check() {
  local n=$1 M=/mnt/$1
  step "mount_$n" mount_timed $n "$2"
  record "opts:$n" "$(lab_mountstats $M opts:)"
  record "proc_mounts:$n" "$(awk -v m=$M '$2==m' /proc/mounts)"
  record "xprt:$n" "$(lab_xprt $M)"
  step "xprt_is_rdma_$n" lab_expect_xprt $M rdma
  step "vers_is_3_$n" mount_is_v3 $M
  step "write_$n" cp /tmp/nv $M/nv-$n
  step "drop_caches_$n" sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
  step "read_back_$n" lab_same_md5 /tmp/nv $M/nv-$n
  step "umount_$n" umount $M
}
mount_and_check implied "$OPTS_IMPLIED"
mount_and_check negotiated "$OPTS_NEGOTIATED"
exit 0
"#;

const MOUNTS: [&str; 2] = ["implied", "negotiated"];

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_rdma_mount_without_vers_falls_back_to_nfsv3() {
    let run_name = "nfs-rdma-no-vers";
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let export = crate::common::writable_export(run_name);
    let script = GuestScript::inline(run_name, GUEST)
        .env("LAB_NFS_PORT", RDMA_PORT.to_string())
        .env("LAB_MOUNT_PORT", MOUNT_PORT.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_MOUNT_KILL", MOUNT_KILL_SECS.to_string());
    let server = HostProcess::new("nfsd", &nfsd).args([
        "--no-nfs4".to_string(),
        "--bind".to_string(),
        "127.0.0.1".to_string(),
        "--nfs-port".to_string(),
        NFS_TCP_PORT.to_string(),
        "--rdma-port".to_string(),
        RDMA_PORT.to_string(),
        "--rdma-max-ulpdu".to_string(),
        MAX_ULPDU.to_string(),
        "--mount-port".to_string(),
        MOUNT_PORT.to_string(),
        // The negotiated mount's NFSv3 fallback asks the portmapper on 10.0.2.2:111
        // (the host's 127.0.0.1:111, through slirp) for MOUNT's port.
        "--rpcbind".to_string(),
        "serve".to_string(),
        "--portmap-port".to_string(),
        PORTMAP_PORT.to_string(),
        export.display().to_string(),
    ]);
    let mut o: Outcome = lab
        .guest(script)
        .run_name(run_name)
        .host_process(server.env("RUST_LOG", "info"))
        .capture_host_side()
        .shared_boot("kclient")
        .timeout(Duration::from_secs(300))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    for m in MOUNTS {
        eprintln!(
            "mount `{m}`: {} s; mount.nfs tried: {}",
            o.value(&format!("mount_secs:{m}")).unwrap_or("?"),
            o.value(&format!("mount_tried:{m}")).unwrap_or("?")
        );
        o.host_step(&format!("mount_within_30s_{m}"), |o| {
            let secs: f64 = o
                .value(&format!("mount_secs:{m}"))
                .and_then(|s| s.parse().ok())
                .ok_or("no mount time recorded")?;
            if secs <= MOUNT_BOUND_SECS {
                Ok(())
            } else {
                Err(format!(
                    "the mount without vers= took {secs} s (bound {MOUNT_BOUND_SECS} s; killed \
                     at {MOUNT_KILL_SECS} s): was the NFSv4 probe over RDMA left unanswered?"
                ))
            }
        });
        o.host_step(&format!("mounted_nfsv3_over_rdma_{m}"), |o| {
            let opts = o
                .value(&format!("opts:{m}"))
                .ok_or("no mountstats opts: line recorded")?;
            let mounts = o
                .value(&format!("proc_mounts:{m}"))
                .ok_or("no /proc/mounts line recorded")?;
            let xprt = o
                .value(&format!("xprt:{m}"))
                .ok_or("no mountstats xprt: line recorded")?;
            let has = |line: &str, opt: &str| {
                line.split(|c: char| c == ',' || c.is_whitespace())
                    .any(|w| w == opt)
            };
            if has(opts, "vers=3")
                && has(mounts, "vers=3")
                && has(mounts, "proto=rdma")
                && xprt.split_whitespace().take(2).eq(["xprt:", "rdma"])
            {
                Ok(())
            } else {
                Err(format!(
                    "not NFSv3 over rdma: mountstats `{opts}` `{xprt}`, /proc/mounts `{mounts}`"
                ))
            }
        });
        o.host_step(&format!("host_sees_same_bytes_{m}"), |o| {
            let guest = o.value("md5:/tmp/nv").ok_or("no md5 of /tmp/nv recorded")?;
            let host = md5_file(&export.join(format!("nv-{m}")));
            if host == guest {
                Ok(())
            } else {
                Err(format!("md5 of nv-{m}: guest {guest}, host {host}"))
            }
        });
    }
    // Without mountproto= mount.nfs must have asked for NFSv4 first, or this scenario
    // proves nothing about the probe.
    o.host_step("negotiated_mount_tried_nfsv4", |o| {
        let tried = o
            .value("mount_tried:negotiated")
            .ok_or("no mount_tried:negotiated recorded")?;
        if tried.split_whitespace().any(|t| t.contains("vers=4")) {
            Ok(())
        } else if tried.is_empty() {
            Err("mount.nfs printed no attempt (killed before it flushed its output?)".into())
        } else {
            Err(format!("mount.nfs did not try NFSv4: it tried `{tried}`"))
        }
    });
    // The server logs each connection's counters when it closes (`closed: xprt: rdma
    // server #N <peer> name=value ...`). A connection whose every Call went unserved is
    // an NFSv4 probe; the NFSv3 mounts' connections count the NFS_ACL probe.
    if let Some(lines) = o.host_step("server_answered_unserved_calls", |o| {
        let log = std::fs::read_to_string(o.out_dir.join("host-nfsd.log"))
            .map_err(|e| format!("host-nfsd.log: {e}"))?;
        let lines: Vec<String> = log
            .lines()
            .filter_map(|l| l.find("xprt: rdma server").map(|i| l[i..].to_string()))
            .collect();
        let count = |l: &str, name: &str| -> u64 {
            l.split(&format!(" {name}="))
                .nth(1)
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let unserved: u64 = lines.iter().map(|l| count(l, "unserved_calls")).sum();
        let probes = lines
            .iter()
            .filter(|l| {
                let c = count(l, "calls");
                c > 0 && count(l, "unserved_calls") == c
            })
            .count();
        if unserved >= 1 && probes >= 1 {
            Ok((unserved, probes, lines))
        } else {
            Err(format!(
                "the server's closed-connection counters show {unserved} unserved_calls and \
                 {probes} connection(s) with only unserved calls: {lines:?}"
            ))
        }
    }) {
        let (unserved, probes, lines) = lines;
        eprintln!("server: unserved_calls {unserved} in all, {probes} probe connection(s)");
        for l in lines {
            eprintln!("  {l}");
        }
    }
    let pcap = o.out_dir.join("host.pcap");
    let aligned = o.out_dir.join("host-aligned.pcap");
    if let Some(calls) = o.host_step("capture_shows_v4_probe_answered", |_| {
        let a = lab::realign::realign(&pcap, &aligned, &[RDMA_PORT]).map_err(|e| e.to_string())?;
        if a.incomplete_streams != 0 {
            return Err(format!("a stream ends inside an MPA frame: {a:?}"));
        }
        let rpcs = rpc_messages(lab.tshark(), &aligned)?;
        let mut seen = BTreeMap::<String, usize>::new();
        for m in &rpcs {
            *seen.entry(m.describe()).or_default() += 1;
        }
        let probe = rpcs
            .iter()
            .any(|m| m.call && m.program == NFS_PROGRAM && m.version == 4);
        // Accept state 2 is PROG_MISMATCH; tshark gives the reply its call's program.
        let answer = rpcs.iter().any(|m| {
            !m.call
                && m.program == NFS_PROGRAM
                && m.version == 4
                && m.accept_state == Some(2)
                && m.mismatch == Some((3, 3))
        });
        if probe && answer {
            Ok(seen)
        } else {
            Err(format!(
                "no NFS version 4 Call answered PROG_MISMATCH 3..3 over RDMA (call seen: \
                 {probe}, answer seen: {answer}; realigned: {a:?}); RPC messages: {seen:?}"
            ))
        }
    }) {
        eprintln!("RPC messages over RDMA and MOUNT over TCP (tshark):");
        for (m, n) in calls {
            eprintln!("  {n:4} x {m}");
        }
    }
    let passed = o.passed();
    if passed {
        let _ = std::fs::remove_dir_all(&export);
    }
    o.assert_passed();
}

/// One RPC message as tshark decodes it from the RPC-over-RDMA Sends.
struct RpcMessage {
    call: bool,
    program: u32,
    version: u32,
    procedure: Option<u32>,
    accept_state: Option<u32>,
    mismatch: Option<(u32, u32)>,
}

impl RpcMessage {
    fn describe(&self) -> String {
        let what = if self.call { "Call" } else { "Reply" };
        let mut s = format!("{what} program {} version {}", self.program, self.version);
        if let Some(p) = self.procedure {
            s += &format!(" procedure {p}");
        }
        if let Some(a) = self.accept_state {
            s += &format!(" accept_state {a}");
        }
        if let Some((lo, hi)) = self.mismatch {
            s += &format!(" versions {lo}..{hi}");
        }
        s
    }
}

/// The RPC messages in `pcap` (tshark's `rpc` fields, first occurrence per frame).
fn rpc_messages(
    tshark: &std::path::Path,
    pcap: &std::path::Path,
) -> Result<Vec<RpcMessage>, String> {
    let fields = [
        "rpc.msgtyp",
        "rpc.program",
        "rpc.programversion",
        "rpc.procedure",
        "rpc.state_accept",
        "rpc.programversion.min",
        "rpc.programversion.max",
    ];
    let mut cmd = Command::new(tshark);
    cmd.args(["-n", "-2", "-r"]).arg(pcap);
    cmd.args(["-Y", "rpc", "-T", "fields", "-E", "separator=/t"]);
    cmd.args(["-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tshark.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed on {}: {}",
            tshark.display(),
            pcap.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let num = |s: &str| s.trim().parse::<u32>().ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let messages: Vec<RpcMessage> = stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(RpcMessage {
                call: num(f.first()?)? == 0,
                program: num(f.get(1)?)?,
                version: num(f.get(2)?)?,
                procedure: f.get(3).and_then(|s| num(s)),
                accept_state: f.get(4).and_then(|s| num(s)),
                mismatch: num(f.get(5)?).zip(num(f.get(6)?)),
            })
        })
        .collect();
    if messages.is_empty() {
        return Err(format!(
            "tshark found no RPC message in {} ({} lines out; stderr: {})",
            pcap.display(),
            stdout.lines().count(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(messages)
}
