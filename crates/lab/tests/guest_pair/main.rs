//! Two guests on a wire (issue 14): a server in one guest, a client in the other,
//! joined only by a virtual Ethernet (qemu socket networking, eth1: 10.0.3.1 server,
//! 10.0.3.2 client) with a soft RDMA device on it in each: soft-RoCE `rxe1` or
//! soft-iWARP `siw1`. Client and server run on separate kernels, so the RDMA traffic
//! crosses the wire (RoCEv2 is InfiniBand over UDP port 4791), where the server's
//! guest captures it with tcpdump.
//!
//! - The Linux kernel NFSv3 client mounts our `nfsd` on verbs, over rxe1 and over
//!   siw1: 8 MiB written (our RDMA Reads), caches dropped, read back (our RDMA
//!   Writes) equal, the server's copy with the same md5, `xprt: rdma`, nfsd's
//!   startup line naming the device. Over rxe1, tshark decodes the capture as
//!   InfiniBand carrying RPC-over-RDMA with NFS WRITE and READ calls and no
//!   malformed frame but the NFSv3 READ replies whose data went in Write chunks
//!   (tshark 4.0 marks those from knfsd too). A WRITE whose data travels in a Read
//!   chunk shows as RPC-over-RDMA only: tshark does not follow the RDMA Reads.
//! - Our `nfs` client on verbs against the other guest's knfsd, over rxe1 and siw1:
//!   a Version Two probe, fallback to Version One, 8 MiB PUT and GET, equal.
//! - The providers across the wire over siw1: our `nfs` on verbs against our `nfsd`
//!   on userspace iWARP, and our `nfs` on userspace iWARP (a TCP socket, no device)
//!   against our `nfsd` on verbs; Version Two both ways (both ends speak it).
//! - The soak (issue 31): 3 x 30 MiB written and read back by the kernel client.
//! - Exactly once (issue 26): the kernel client's create/rename/link/mkdir/remove
//!   loops finish without an error while their connection is destroyed under them.

use std::process::Command;
use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab, Outcome};

mod nfs4;
mod wire_watch;

/// Both guests: the device `$DEV` (rxe or siw) as `${DEV}1` on eth1 at `$ADDR`.
const UP: &str = r#". /share/lib.sh
case $DEV in
  rxe) MODS="crc32_generic rdma_rxe" ;;
  siw) MODS="siw" ;;
esac
step modules sh -c "for m in $MODS ib_uverbs rdma_ucm rpcrdma nfsv3 nfsd; do modprobe \$m || exit 1; done"
step eth1_up sh -c "ip link set eth1 up && ip addr add $ADDR/24 dev eth1"
step dev_up sh -c "rdma link add ${DEV}1 type $DEV netdev eth1 && rdma link show ${DEV}1/1"
"#;

/// The server's guest, before its server starts: capture the RoCEv2 traffic (rxe
/// only: the tshark check is for RoCEv2).
const CAPTURE: &str = r#"
TPID=
if [ "$DEV" = rxe ]; then
tcpdump -Z root -i eth1 -s 0 -U -w /share/rdma.pcap udp port 4791 >/share/tcpdump.log 2>&1 &
TPID=$!
step tcpdump_up sh -c 'i=0; until grep -q "listening on eth1" /share/tcpdump.log; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done'
fi
"#;

/// Our nfsd (on `$SERVER_PROVIDER`, default verbs), exporting /srv/p.
const OUR_SERVER: &str = r#"
EXPORT=/srv/p
step export sh -c "mkdir -p /srv/p && mount -t tmpfs -o size=${EXPORT_MB:-64}m tmpfs /srv/p && chmod 777 /srv/p"
/share/bin/nfsd --bind 10.0.3.1 --nfs-port 2049 --mount-port 20048 --rdma-port 20049 \
  --rdma-provider ${SERVER_PROVIDER:-verbs} --rpcbind off --no-nlm --squash none --state-dir /tmp/nfsd-state \
  $NFSD_ARGS /srv/p >/share/nfsd.txt 2>&1 &
SPID=$!
step nfsd_ready sh -c 'i=0; until grep -q "^nfsd: ready" /share/nfsd.txt; do i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done'
"#;

/// The guest's knfsd (lab_knfsd_up: /export, RDMA on 20049, mountd on 20048).
const KNFSD: &str = r#"
EXPORT=/export
step knfsd_up lab_knfsd_up
"#;
/// The server's guest, after its server started: wait for the client's marker. The
/// marker counts once its data is written (not when CREATE made it: the client still
/// WRITEs and COMMITs it, and a server stopped in between failed the client's last
/// step), and the client gets 2 s more for the replies in flight.
const SERVER_END: &str = r#"
lab_stall_watch server 'NETDEV WATCHDOG\|not responding'
step client_done sh -c "i=0; until [ -s $EXPORT/done ]; do i=\$((i+1)); [ \$i -gt 240 ] && exit 1; sleep 1; done; sleep 2"
record md5 "$(md5sum $EXPORT/f | cut -d' ' -f1)"
if [ -n "$TPID" ]; then kill -INT $TPID; wait $TPID; fi
if [ -n "$SPID" ]; then kill -TERM $SPID; wait $SPID; record server_exit "$?"; cat /share/nfsd.txt; fi
exit 0
"#;

/// The kernel client: mount (retrying until the server answers), 8 MiB both ways.
const KERNEL_CLIENT: &str = r#"
lab_stall_watch client 'NETDEV WATCHDOG\|not responding'
step make sh -c 'head -c 8388608 /dev/urandom > /tmp/f'
record md5 "$(md5sum /tmp/f | cut -d' ' -f1)"
mkdir -p /mnt/p
step mount sh -c 'i=0; until mount.nfs 10.0.3.1:/srv/p /mnt/p -n -o vers=3,proto=rdma,port=20049,mountproto=tcp,mountport=20048,nolock; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 2; done'
record xprt "$(lab_xprt /mnt/p)"
step write cp /tmp/f /mnt/p/f
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
step read_back cmp /tmp/f /mnt/p/f
step done sh -c 'echo done > /mnt/p/done && sync'
step umount umount /mnt/p
exit 0
"#;

/// Our client (on `$CLIENT_PROVIDER`, default verbs) against the server's
/// `$REMOTE` export: Version Two probe, PUT, GET.
const OUR_CLIENT: &str = r#"
step make sh -c 'head -c 8388608 /dev/urandom > /tmp/f'
record md5 "$(md5sum /tmp/f | cut -d' ' -f1)"
cat >/tmp/nfs <<'X'
#!/bin/sh
NFS_LOG=nfsclient=info exec /share/bin/nfs -q -v -t rdma --rdma-provider ${CLIENT_PROVIDER:-verbs} --rdma-version 2 \
  --nfs-port 20049 --mount-port 20048 --timeout 60 "$@"
X
chmod +x /tmp/nfs
step reach sh -c 'i=0; until ping -c 1 -W 1 10.0.3.1 >/dev/null 2>&1; do i=$((i+1)); [ $i -gt 120 ] && exit 1; sleep 1; done'
step put sh -c 'i=0; until /tmp/nfs put /tmp/f 10.0.3.1:$REMOTE/f 2>/share/put.txt; do i=$((i+1)); [ $i -gt 30 ] && { cat /share/put.txt; exit 1; }; sleep 2; done; cat /share/put.txt'
step get sh -c '/tmp/nfs get 10.0.3.1:$REMOTE/f /tmp/back 2>/share/get.txt; rc=$?; cat /share/get.txt; exit $rc'
step same cmp /tmp/f /tmp/back
step done sh -c 'echo done >/tmp/done && /tmp/nfs put /tmp/done 10.0.3.1:$REMOTE/done 2>/dev/null'
exit 0
"#;

/// Counts the frames of `pcap` that match the tshark display filter `filter`.
fn count(pcap: &std::path::Path, filter: &str) -> Result<usize, String> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .map_err(|e| format!("tshark: {e} (test-all installs it)"))?;
    if !out.status.success() {
        return Err(format!(
            "tshark -Y {filter:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().count())
}

/// Server and client of one pair run, over `dev` ("rxe" or "siw"), with `env` in
/// both guests.
fn run_pair(
    name: &str,
    dev: &str,
    server: &str,
    client: &str,
    env: &[(&str, &str)],
) -> (Outcome, Outcome) {
    run_pair_with(
        name,
        dev,
        server,
        client,
        env,
        &[],
        Duration::from_secs(400),
    )
}

/// [`run_pair`] with `binaries` (guest name, host path) shipped to both guests, and
/// `timeout` for the whole run.
fn run_pair_with(
    name: &str,
    dev: &str,
    server: &str,
    client: &str,
    env: &[(&str, &str)],
    binaries: &[(&str, std::path::PathBuf)],
    timeout: Duration,
) -> (Outcome, Outcome) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let nfs = build_binary("nfsclient", "nfs");
    let server = GuestScript::inline(
        &format!("{name}-server"),
        format!("{UP}{CAPTURE}{server}{SERVER_END}"),
    )
    .binary("nfsd", &nfsd)
    .env("DEV", dev)
    .env("ADDR", "10.0.3.1")
    .env("LAB_STEP_TIMEOUT", "280");
    let mut client = GuestScript::inline(&format!("{name}-client"), format!("{UP}{client}"))
        .binary("nfs", &nfs)
        .env("DEV", dev)
        .env("ADDR", "10.0.3.2")
        .env("LAB_STEP_TIMEOUT", "200");
    let mut server = server;
    for (k, v) in env {
        server = server.env(k, *v);
        client = client.env(k, *v);
    }
    for (guest_name, path) in binaries {
        server = server.binary(guest_name, path);
        client = client.binary(guest_name, path);
    }
    lab.pair(server, client)
        .run_name(name)
        .timeout(timeout)
        .run()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Both guests' verdicts at once: a stall fails both (the client's calls hang,
/// the server waits for the client to finish), and the server's side of it (its
/// nfsd's connection dump, its kernel) is half of the evidence.
fn assert_both_passed(s: &Outcome, c: &Outcome) {
    let failed: Vec<String> = [("client", c), ("server", s)]
        .iter()
        .filter(|(_, o)| !o.passed())
        .map(|(role, o)| format!("=== the {role} guest ===\n{}", o.report()))
        .collect();
    if !failed.is_empty() {
        panic!("{}", failed.join("\n"));
    }
    eprintln!("{}\n{}", c.report(), s.report());
}

/// The server's copy has the client's bytes.
fn same_bytes(s: &mut Outcome, c: &Outcome) {
    let client_md5 = c.value("md5").map(str::to_string);
    s.host_step("same_bytes_on_the_server", |s| {
        match (s.value("md5"), client_md5.as_deref()) {
            (Some(a), Some(b)) if a == b => Ok(()),
            (a, b) => Err(format!("server md5 {a:?}, client md5 {b:?}")),
        }
    });
}

/// Kernel client -> our nfsd on verbs over `dev`; the startup line names the device.
fn kernel_client_to_our_nfsd(name: &str, dev: &str) -> (Outcome, Outcome) {
    let (mut s, mut c) = run_pair(name, dev, OUR_SERVER, KERNEL_CLIENT, &[]);
    c.host_step("mounted_over_rdma", |c| match c.value("xprt") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", "rdma"]) => Ok(()),
        other => Err(format!("mountstats xprt line is {other:?}, not rdma")),
    });
    same_bytes(&mut s, &c);
    s.host_step("nfsd_on_the_device", |s| {
        let text = std::fs::read_to_string(s.share_file("nfsd.txt"))
            .map_err(|e| format!("share/nfsd.txt: {e}"))?;
        let want = format!("via verbs on {dev}1 [--rdma-provider verbs]");
        if text.lines().any(|l| l.contains(&want)) {
            Ok(())
        } else {
            Err(format!("no RDMA listener line with {want:?} in:\n{text}"))
        }
    });
    (s, c)
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_client_mounts_our_verbs_nfsd_across_a_wire_over_rxe_and_tshark_decodes_the_rocev2() {
    let (mut s, c) = kernel_client_to_our_nfsd("pair-kclient-rxe", "rxe");
    s.host_step("tshark_decodes_rocev2", |s| {
        let pcap = s.share_file("rdma.pcap");
        let ib = count(&pcap, "infiniband")?;
        let rpcrdma = count(&pcap, "rpcordma")?;
        let writes = count(&pcap, "nfs.procedure_v3 == 7 && rpc.msgtyp == 0")?;
        let reads = count(&pcap, "nfs.procedure_v3 == 6 && rpc.msgtyp == 0")?;
        // tshark 4.0 marks NFSv3 READ replies whose data went in a Write chunk
        // "[Malformed Packet: NFS]", from knfsd too (lab::tshark's module docs);
        // anything else malformed, or any other error, fails.
        let read_replies = "nfs.procedure_v3 == 6 && rpc.msgtyp == 1";
        let tolerated = count(&pcap, &format!("_ws.malformed && {read_replies}"))?;
        let bad = count(
            &pcap,
            &format!("(_ws.malformed || _ws.expert.severity == error) && !({read_replies})"),
        )?;
        let line = format!(
            "infiniband={ib} rpcordma={rpcrdma} nfs_write_calls={writes} nfs_read_calls={reads} \
             read_replies_marked_malformed={tolerated} other_malformed_or_errors={bad}"
        );
        eprintln!("capture: {line}");
        if ib > 0 && rpcrdma > 0 && writes > 0 && reads > 0 && bad == 0 {
            Ok(())
        } else {
            Err(format!("capture {}: {line}", pcap.display()))
        }
    });
    assert_both_passed(&s, &c);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_client_mounts_our_verbs_nfsd_across_a_wire_over_siw() {
    let (s, c) = kernel_client_to_our_nfsd("pair-kclient-siw", "siw");
    assert_both_passed(&s, &c);
}

/// Our client on verbs -> the other guest's knfsd over `dev`.
fn our_client_to_knfsd(name: &str, dev: &str) {
    let (mut s, mut c) = run_pair(name, dev, KNFSD, OUR_CLIENT, &[("REMOTE", "/export")]);
    same_bytes(&mut s, &c);
    c.host_step("version_one_after_a_fallback_on_the_device", |c| {
        let log = std::fs::read_to_string(c.share_file("put.txt"))
            .map_err(|e| format!("share/put.txt: {e}"))?;
        let want = format!("provider=verbs on {dev}1");
        let fell_back = log.lines().any(|l| {
            l.starts_with("nfs: rdma ")
                && l.contains("version_fallbacks=1")
                && l.contains("rpcrdma_version=1")
        });
        if log.contains(&want) && fell_back {
            Ok(())
        } else {
            Err(format!(
                "want {want:?} and one fallback to version 1 in:\n{log}"
            ))
        }
    });
    assert_both_passed(&s, &c);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn our_verbs_client_to_knfsd_across_a_wire_over_rxe() {
    our_client_to_knfsd("pair-client-knfsd-rxe", "rxe");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn our_verbs_client_to_knfsd_across_a_wire_over_siw() {
    our_client_to_knfsd("pair-client-knfsd-siw", "siw");
}

/// Our client on `client` against our nfsd on `server` across the wire over siw1:
/// Version Two end to end (no fallback), each side naming its provider.
fn providers_across_the_wire(name: &str, server: &str, client: &str) {
    let env = [
        ("REMOTE", "/srv/p"),
        ("SERVER_PROVIDER", server),
        ("CLIENT_PROVIDER", client),
    ];
    let (mut s, mut c) = run_pair(name, "siw", OUR_SERVER, OUR_CLIENT, &env);
    same_bytes(&mut s, &c);
    let server_line = match server {
        "verbs" => "via verbs on siw1 [--rdma-provider verbs]",
        _ => "via userspace iWARP [--rdma-provider iwarp]",
    };
    s.host_step("server_provider", |s| {
        let text = std::fs::read_to_string(s.share_file("nfsd.txt"))
            .map_err(|e| format!("share/nfsd.txt: {e}"))?;
        if text.lines().any(|l| l.contains(server_line)) {
            Ok(())
        } else {
            Err(format!("no line with {server_line:?} in:\n{text}"))
        }
    });
    let client_says = match client {
        "verbs" => "provider=verbs on siw1",
        _ => "provider=userspace iWARP",
    };
    c.host_step("client_provider_and_version_two", |c| {
        let log = std::fs::read_to_string(c.share_file("put.txt"))
            .map_err(|e| format!("share/put.txt: {e}"))?;
        let v2 = log.lines().any(|l| {
            l.starts_with("nfs: rdma ")
                && l.contains("version_fallbacks=0")
                && l.contains("rpcrdma_version=2")
        });
        if log.contains(client_says) && v2 {
            Ok(())
        } else {
            Err(format!(
                "want {client_says:?} and Version Two without fallback in:\n{log}"
            ))
        }
    });
    assert_both_passed(&s, &c);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn our_verbs_client_to_our_iwarp_nfsd_across_a_wire_over_siw() {
    providers_across_the_wire("pair-verbs-to-iwarp", "iwarp", "verbs");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn our_iwarp_client_to_our_verbs_nfsd_across_a_wire_over_siw() {
    providers_across_the_wire("pair-iwarp-to-verbs", "verbs", "iwarp");
}

// ---------------------------------------------------------------------------------
// Soak (issue 31): the kernel client writes and reads back 3 x 30 MiB with dd, the
// workload under which NFS/RDMA transfers across two lab kernels once stalled
// ("server not responding"). `lab/test` runs each of our configurations once;
// `lab/soak RUNS` loops them, the knfsd controls included, and prints one line per
// run. When a transfer takes longer than it ever should, or the client logs "not
// responding", both guests save what a stall leaves to read (`lab_rdma_state`:
// mountstats, QP/CQ states, device and TCP counters, the kernel's rpcrdma trace) and
// our nfsd its connections' state (SIGUSR1), under `share/stall-*`.
// ---------------------------------------------------------------------------------

/// The soak's transfers: 3 files of this many MiB, each written with fsync, caches
/// dropped, read back and compared.
const SOAK_MIB: &str = "30";

/// The server's guest after its server started: wait for the client's marker; if
/// it never comes, save the server's side of the stall. `SOAK_WAIT` bounds the wait.
const SOAK_SERVER_END: &str = r#"
lab_trace_rpcrdma
i=0; until [ -s $EXPORT/done ] || [ $i -ge $SOAK_WAIT ]; do i=$((i+1)); sleep 1; done
if [ ! -s $EXPORT/done ]; then
  [ -n "$SPID" ] && kill -USR1 $SPID && sleep 2
  lab_rdma_state /share/stall-server
fi
step client_done test -s $EXPORT/done
if [ -n "$SPID" ]; then kill -TERM $SPID; wait $SPID; record server_exit "$?"; cat /share/nfsd.txt; fi
exit 0
"#;

/// The kernel client: mount, then 3 x `SOAK_MIB` MiB written, caches dropped, read
/// back, compared; a watcher saves the client's state once when a transfer runs
/// past `SOAK_SLOW` seconds or the kernel logs "not responding".
const SOAK_CLIENT: &str = r#"
lab_trace_rpcrdma
step make sh -c "head -c $((SOAK_MIB * 1048576)) /dev/urandom > /tmp/src"
SRC=$(md5sum </tmp/src | cut -d' ' -f1)
mkdir -p /mnt/p
step mount sh -c 'i=0; until mount.nfs 10.0.3.1:$REMOTE /mnt/p -n -o vers=3,proto=rdma,port=20049,mountproto=tcp,mountport=20048,nolock; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 2; done'
record xprt "$(lab_xprt /mnt/p)"
(
  while sleep 2; do
    last=$(tail -n 1 $RESULTS)
    set -- $last
    slow=0
    [ "$1" = BEGIN ] && awk -v b="$3" -v n="$(lab_uptime)" -v s="$SOAK_SLOW" 'BEGIN {exit !(n - b > s)}' && slow=1
    if [ $slow = 1 ] || dmesg | grep -q 'not responding'; then
      lab_log "stall: $last at $(lab_uptime)"
      lab_rdma_state /share/stall-client
      break
    fi
  done
) &
WATCHER=$!
lab_on_exit "kill $WATCHER 2>/dev/null"
for i in 1 2 3; do
  step write_$i dd if=/tmp/src of=/mnt/p/f$i bs=1M conv=fsync
  step drop_caches_$i sh -c 'echo 3 >/proc/sys/vm/drop_caches'
  step read_$i sh -c "test \"\$(md5sum </mnt/p/f$i | cut -d' ' -f1)\" = $SRC"
done
record xprt_end "$(lab_xprt /mnt/p)"
record not_responding "$(dmesg | grep -c 'not responding')"
step no_server_not_responding sh -c "! dmesg | grep -q 'not responding'"
step done sh -c 'echo done > /mnt/p/done && sync'
step umount umount /mnt/p
exit 0
"#;

/// Runs the soak `LAB_SOAK_RUNS` times (default 1) against `server` over `dev`,
/// prints one line per run, and fails if any run did (each run's guests are in
/// `lab/out/<name>-<run>-{server,client}`).
fn soak(name: &str, dev: &str, server: &str, env: &[(&str, &str)]) {
    let runs: u32 = std::env::var("LAB_SOAK_RUNS")
        .ok()
        .map(|v| v.parse().expect("LAB_SOAK_RUNS is a number of runs"))
        .unwrap_or(1);
    let mut env = env.to_vec();
    env.extend([
        ("SOAK_MIB", SOAK_MIB),
        // A 30 MiB transfer takes 5-15 s in these guests; 60 s is a stall.
        ("SOAK_SLOW", "60"),
        ("SOAK_WAIT", "560"),
        ("EXPORT_MB", "256"),
        ("LAB_STEP_TIMEOUT", "240"),
    ]);
    let mut failed = Vec::new();
    for run in 1..=runs {
        let run_name = format!("{name}-{run}");
        let script = format!("{server}{SOAK_SERVER_END}");
        let (s, c) = run_pair(&run_name, dev, &script, SOAK_CLIENT, &env);
        let stalled =
            c.share_file("stall-client").exists() || s.share_file("stall-server").exists();
        let verdict = match (c.failure(), s.failure()) {
            (None, None) => "ok".to_string(),
            (Some(f), _) | (None, Some(f)) => format!("FAILED: {f}"),
        };
        eprintln!(
            "soak {name} run {run}/{runs}: {verdict}{}; not_responding={} (lab/out/{run_name}-{{server,client}})",
            if stalled { ", stall state saved under share/stall-*" } else { "" },
            c.value("not_responding").unwrap_or("?"),
        );
        if !(c.passed() && s.passed()) {
            failed.push((run, c.report(), s.report()));
        }
    }
    if let Some((run, c, s)) = failed.first() {
        panic!(
            "soak {name}: {} of {runs} runs failed; the first, run {run}:\n{c}\n{s}",
            failed.len()
        );
    }
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn soak_kernel_client_our_verbs_nfsd_over_siw() {
    soak(
        "soak-verbs-siw",
        "siw",
        OUR_SERVER,
        &[
            ("REMOTE", "/srv/p"),
            ("NFSD_ARGS", "--rdma-stall-timeout 30"),
        ],
    );
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn soak_kernel_client_our_verbs_nfsd_over_rxe() {
    soak(
        "soak-verbs-rxe",
        "rxe",
        OUR_SERVER,
        &[
            ("REMOTE", "/srv/p"),
            ("NFSD_ARGS", "--rdma-stall-timeout 30"),
        ],
    );
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn soak_kernel_client_our_iwarp_nfsd_over_siw() {
    soak(
        "soak-iwarp-siw",
        "siw",
        OUR_SERVER,
        &[
            ("REMOTE", "/srv/p"),
            ("SERVER_PROVIDER", "iwarp"),
            ("NFSD_ARGS", "--rdma-stall-timeout 30"),
        ],
    );
}

/// The control: Linux knfsd in the server's guest, same client and workload. Not
/// run by `lab/test` (it tests the kernels, not this project): `lab/soak` runs it.
#[test]
#[ignore = "kernel lab: run by lab/soak (a control of the kernels, not of our code)"]
fn soak_control_kernel_client_knfsd_over_siw() {
    soak("soak-knfsd-siw", "siw", KNFSD, &[("REMOTE", "/export")]);
}

/// The control over soft-RoCE.
#[test]
#[ignore = "kernel lab: run by lab/soak (a control of the kernels, not of our code)"]
fn soak_control_kernel_client_knfsd_over_rxe() {
    soak("soak-knfsd-rxe", "rxe", KNFSD, &[("REMOTE", "/export")]);
}

// ---------------------------------------------------------------------------------
// Exactly once across broken connections (issue 26): the kernel client creates,
// renames, links, makes and removes files and directories over RDMA in four loops
// while its connection is broken under it several times: the TCP connection siw
// runs the client's QP over is destroyed (`ss -K`, as a reset or a dead link would),
// xprtrdma reconnects and retransmits the calls in flight with their xids. A
// retransmitted REMOVE, RENAME, MKDIR, RMDIR or SYMLINK that ran once already
// answers NOENT or EXIST unless the duplicate request cache answers it: the loops
// must finish with no error. The control (`--drc-entries 0`, not run by `lab/test`)
// shows that this test sees it when the cache is off.
// ---------------------------------------------------------------------------------

/// Breaks of the client's connection, and seconds between them.
const BREAKS: &str = "6";
const BREAK_EVERY: &str = "4";

/// The server's guest after its server started: wait for the client's marker, stop
/// nfsd (which prints the cache's counters as it exits), count what is left.
const CHURN_SERVER_END: &str = r#"
i=0; until [ -s $EXPORT/done ] || [ $i -ge 400 ]; do i=$((i+1)); sleep 1; done
step client_done test -s $EXPORT/done
kill -TERM $SPID; wait $SPID; record server_exit "$?"
record drc "$(grep '^nfsd: duplicate request cache' /share/nfsd.txt | tail -n 1)"
record left_behind "$(ls $EXPORT/d | wc -l)"
cat /share/nfsd.txt
exit 0
"#;

/// The kernel client: four loops of non-idempotent calls under a breaker that
/// destroys the client's connection `BREAKS` times, `BREAK_EVERY` s apart; every
/// failed command is written to /tmp/errors.
const CHURN_CLIENT: &str = r#"
step diag modprobe tcp_diag
mkdir -p /mnt/p
step mount sh -c 'i=0; until mount.nfs 10.0.3.1:/srv/p /mnt/p -n -o vers=3,proto=rdma,port=20049,mountproto=tcp,mountport=20048,nolock; do i=$((i+1)); [ $i -gt 60 ] && exit 1; sleep 2; done'
step mkdir_d mkdir /mnt/p/d
cat >/tmp/worker.sh <<'X'
#!/bin/sh
# One loop: each command's failure is a line in /tmp/errors.
w=$1; i=0
until [ -e /tmp/stop ]; do
  i=$((i+1)); f=/mnt/p/d/$w-$i
  echo $i >$f.c || echo "$w $i create" >>/tmp/errors
  mv $f.c $f.r || echo "$w $i rename" >>/tmp/errors
  ln $f.r $f.l || echo "$w $i link" >>/tmp/errors
  mkdir $f.m || echo "$w $i mkdir" >>/tmp/errors
  ln -s $w-$i.r $f.s || echo "$w $i symlink" >>/tmp/errors
  rmdir $f.m || echo "$w $i rmdir" >>/tmp/errors
  rm $f.r $f.l $f.s || echo "$w $i remove" >>/tmp/errors
done
echo $i >/tmp/iterations.$w
X
chmod +x /tmp/worker.sh
: >/tmp/errors
(
  n=0; tries=0
  while [ $n -lt $BREAKS ] && [ $tries -lt $((BREAKS * 10)) ]; do
    sleep $BREAK_EVERY; tries=$((tries+1))
    # -K destroys the sockets it prints: the client's end of siw's TCP connection.
    if [ -n "$(ss -H -K -t dst 10.0.3.1 dport = :20049)" ]; then
      n=$((n+1)); lab_log "broke the connection ($n)"
    fi
  done
  echo $n >/tmp/breaks
  touch /tmp/stop
) &
step churn sh -c 'for w in 1 2 3 4; do /tmp/worker.sh $w & done; wait'
record breaks "$(cat /tmp/breaks)"
record iterations "$(cat /tmp/iterations.* | awk '{s += $1} END {print s}')"
record errors "$(wc -l </tmp/errors)"
cat /tmp/errors
record xprt_end "$(lab_xprt /mnt/p)"
step done sh -c 'echo done > /mnt/p/done && sync'
step umount umount /mnt/p
exit 0
"#;

/// One churn run against our nfsd on verbs over siw with `nfsd_args`.
fn churn_under_breaks(name: &str, nfsd_args: &str) -> (Outcome, Outcome) {
    let script = format!("{OUR_SERVER}{CHURN_SERVER_END}");
    let (s, mut c) = run_pair(
        name,
        "siw",
        &script,
        CHURN_CLIENT,
        &[
            ("NFSD_ARGS", nfsd_args),
            ("BREAKS", BREAKS),
            ("BREAK_EVERY", BREAK_EVERY),
            ("LAB_STEP_TIMEOUT", "300"),
        ],
    );
    eprintln!(
        "{name}: {} breaks, {} iterations, {} errors; server: {}; xprt at the end: {}",
        c.value("breaks").unwrap_or("?"),
        c.value("iterations").unwrap_or("?"),
        c.value("errors").unwrap_or("?"),
        s.value("drc").unwrap_or("?"),
        c.value("xprt_end").unwrap_or("?"),
    );
    c.host_step("every_break_made", |c| match c.value("breaks") {
        Some(b) if b == BREAKS => Ok(()),
        other => Err(format!(
            "{other:?} of {BREAKS} breaks: the client did not reconnect in time"
        )),
    });
    // mountstats' rdma line: "xprt: rdma <srcport> <bind_count> <connect_count> ...".
    c.host_step("client_reconnected_after_each_break", |c| {
        let connects = c
            .value("xprt_end")
            .and_then(|x| x.split_whitespace().nth(4))
            .and_then(|n| n.parse::<u32>().ok());
        let want = 1 + BREAKS.parse::<u32>().expect("BREAKS is a number");
        match connects {
            Some(n) if n >= want => Ok(()),
            other => Err(format!("connect count {other:?}, want at least {want}")),
        }
    });
    (s, c)
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_client_churn_over_broken_connections_runs_each_call_once_over_siw() {
    let (s, mut c) = churn_under_breaks("drc-churn-siw", "");
    c.host_step("no_spurious_errors", |c| match c.value("errors") {
        Some("0") => Ok(()),
        other => Err(format!(
            "{other:?} commands failed (see the client's log): a retransmission ran twice"
        )),
    });
    assert_both_passed(&s, &c);
}

/// The control: the same churn with the cache off. Not run by `lab/test` (it shows
/// what the test above would see without the cache: `lab/test control_` runs it).
#[test]
#[ignore = "kernel lab: a control, run by `lab/test control_`"]
fn control_kernel_client_churn_over_broken_connections_without_the_cache_over_siw() {
    let (_s, c) = churn_under_breaks("drc-churn-control-siw", "--drc-entries 0");
    eprintln!(
        "control: {} commands failed without the cache",
        c.value("errors").unwrap_or("?")
    );
}
