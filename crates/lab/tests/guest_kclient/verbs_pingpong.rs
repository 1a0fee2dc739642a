//! The rdma-core provider end to end (issue 14): our `verbs-pingpong` (crates/verbs,
//! only the `rdma` API: `VerbsCm`, `VerbsQp`) as server and client in the guest, over
//! soft-RoCE `rxe0` and then soft-iWARP `siw0`, both on eth0 (10.0.2.15; client and
//! server in one guest, so the device loops the traffic back to itself). Checked: a
//! connect rejected with private data; private data both ways on connect/accept;
//! Send/Receive both ways; a 64 KiB RDMA Read and RDMA Write with byte checks; an
//! orderly disconnect seen by both sides with their outstanding Receives flushed;
//! small Sends posted inline (`IBV_SEND_INLINE`, the QP's `max_inline_data`: the
//! server prints it and how many went inline, and fails if none did where offered);
//! a Send With Invalidate naming the peer's region reaches the peer with its rkey:
//! siw invalidates the `ibv_reg_mr` region (the peer's later RDMA Write to it fails;
//! libsiw does not report the invalidation in the Receive's completion),
//! rxe refuses (the Receive fails), and either way the region's bytes stay untouched
//! (`invalidate_line`).
//!
//! Then the RPC-over-RDMA transport itself (`RdmaServer`/`RdmaTransport` over
//! `verbs::VerbsCm`, our `verbs-rpc-echo`): NULL and ECHO calls of 0 bytes to 1 MiB
//! over each device, the argument and result DDP-eligible: inline below the
//! threshold, through a Read chunk and a Write chunk above it (the server RDMA-Reads
//! and RDMA-Writes the client's regions at the addresses the device registered them
//! at; regions fenced by deregistration, since these devices cannot invalidate them).
//!
//! And our `nfsd` with its NFS/RDMA listener on verbs (`--rdma-provider verbs` on rxe0,
//! `auto` on siw0: the startup line must name the device), mounted by
//! the guest's kernel client with `proto=rdma` over rxe0 (RoCEv2) and over siw0
//! (iWARP): 8 MiB written (the server's RDMA Reads), caches dropped, read back (its
//! RDMA Writes), md5 compared, mountstats `xprt: rdma`, the server's counters checked
//! (one connection: a Terminate or a refused registration would show as a
//! reconnect). Over siw0 this once stalled for two reasons, both fixed in
//! crates/verbs: libsiw takes a Send With Invalidate's STag from `wr.rdma.rkey`
//! (we set only `invalidate_rkey`, so siw named STag 0 and the kernel client
//! answered each Reply with a Terminate), and siw charges registrations to
//! RLIMIT_MEMLOCK even for root (nfsd raises the limit when it takes verbs).
//!
//! With nfsd still serving on rxe0, eth0 goes down and up: nfsd reports the device's
//! port events (`nfsd: RDMA device rxe0 port 1: link down ...`, `... link up`, from
//! `verbs::watch_device_events`).
//!
//! rdma_cm picks the device for 10.0.2.15 among those on eth0, so for the rxe run
//! siw0 is taken away (and put back afterwards, also on failure), and rxe0 is removed
//! again before the siw run and before the next scenario of the shared boot.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
siw0_back() {
  rdma link show siw0/1 >/dev/null 2>&1 || rdma link add siw0 type siw netdev eth0
}
lab_on_exit siw0_back
lab_on_exit lab_rxe_down
# Runs first, on a failure too: an nfsd still holding rxe0 makes `rdma link delete`
# block until it exits, and eth0 must be up for the next scenarios.
nfsds_gone() {
  for f in /tmp/nfsd-*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; rm -f "$f"; done
  sleep 0.5
  eth0_up
}
eth0_up() {
  ip link set eth0 up
  [ -z "$DEFAULT_ROUTE" ] || ip route | grep -q "^default" || ip route add default $DEFAULT_ROUTE
}
DEFAULT_ROUTE=$(ip route | sed -n 's/^default //p' | head -n 1)
lab_on_exit nfsds_gone
pingpong() {
  out="$LAB_RUN_DIR/pingpong-$1"
  /share/bin/verbs-pingpong server "$2" >"$out-server.txt" 2>&1 &
  spid=$!
  i=0
  while ! grep -q '^ok listen' "$out-server.txt" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 50 ] && break; sleep 0.1
  done
  timeout -s KILL 60 /share/bin/verbs-pingpong client "$2" >"$out-client.txt" 2>&1
  crc=$?
  ( sleep 30; kill -9 $spid 2>/dev/null ) &
  wait $spid
  src=$?
  cat "$out-server.txt" "$out-client.txt"
  [ $crc -eq 0 ] && [ $src -eq 0 ]
}
rpc_echo() {
  out="$LAB_RUN_DIR/rpc-echo-$1"
  /share/bin/verbs-rpc-echo server "$2" >"$out-server.txt" 2>&1 &
  spid=$!
  i=0
  while ! grep -q '^ok listen' "$out-server.txt" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 50 ] && break; sleep 0.1
  done
  timeout -s KILL 60 /share/bin/verbs-rpc-echo client "$2" >"$out-client.txt" 2>&1
  crc=$?
  kill $spid; wait $spid
  cat "$out-server.txt" "$out-client.txt"
  [ $crc -eq 0 ]
}
# Our nfsd with its NFS/RDMA listener on verbs, mounted by the
# guest's kernel client over rxe0 and over siw0: 8 MiB written (RDMA Reads by the
# server), caches dropped, read back (RDMA Writes by the server), md5 compared.
verbs_nfsd_up() {
  mkdir -p /srv/v$1 && mount -t tmpfs -o size=64m tmpfs /srv/v$1 && chmod 777 /srv/v$1 || return 1
  RUST_LOG=rpcrdma_transport=info /share/bin/nfsd --bind 10.0.2.15 --nfs-port $2 \
    --mount-port $3 --rdma-port $4 --rdma-provider $5 --rpcbind off --no-nlm \
    --state-dir /tmp/nfsd-state-$1 /srv/v$1 >"$LAB_RUN_DIR/nfsd-$1.txt" 2>&1 &
  echo $! >/tmp/nfsd-$1.pid
  i=0
  while ! grep -q '^nfsd: ready' "$LAB_RUN_DIR/nfsd-$1.txt" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$LAB_RUN_DIR/nfsd-$1.txt"; return 1; }; sleep 0.1
  done
}
verbs_nfsd_down() {
  pid=$(cat /tmp/nfsd-$1.pid)
  rm -f /tmp/nfsd-$1.pid
  kill -TERM $pid
  i=0
  while kill -0 $pid 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 50 ] && { kill -9 $pid; break; }; sleep 0.1
  done
  cat "$LAB_RUN_DIR/nfsd-$1.txt"
}
# The device's events on nfsd's output: eth0 (rxe0's netdev) down and up gives
# IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE (verbs::watch_device_events). The
# default route, which a link going down takes away, is put back.
port_events() {
  out="$LAB_RUN_DIR/nfsd-$1.txt"
  ip link set eth0 down || return 1
  sleep 1
  eth0_up || return 1
  i=0
  while ! grep -q '^nfsd: RDMA device rxe0 port 1: link up' "$out"; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$out"; return 1; }; sleep 0.1
  done
  grep '^nfsd: RDMA device rxe0 port 1: link' "$out"
  grep -q '^nfsd: RDMA device rxe0 port 1: link down' "$out"
}
nfs_over() {
  M=/mnt/v$1
  mkdir -p $M
  step nfs_${1}_up verbs_nfsd_up $1 $2 $3 $4 $5
  step nfs_${1}_mount mount.nfs 10.0.2.15:/srv/v$1 $M -n -o vers=3,proto=rdma,port=$4,mountproto=tcp,mountport=$3,nolock
  record xprt_$1 "$(lab_xprt $M)"
  step nfs_${1}_make sh -c "head -c 8388608 /dev/urandom > /tmp/v$1"
  step nfs_${1}_write cp /tmp/v$1 $M/f
  step nfs_${1}_drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
  step nfs_${1}_read_back lab_same_md5 /tmp/v$1 $M/f /srv/v$1/f
  step nfs_${1}_umount umount $M
  [ "$1" = rxe ] && step nfs_rxe_port_events port_events $1
  step nfs_${1}_down verbs_nfsd_down $1
}
step siw0_away rdma link delete siw0
step rxe_up lab_rxe_up
step pingpong_rxe pingpong rxe 10.0.2.15:7471
step rpc_echo_rxe rpc_echo rxe 10.0.2.15:7473
nfs_over rxe 12049 12048 22049 verbs
step rxe_down lab_rxe_down
step siw0_back siw0_back
step pingpong_siw pingpong siw 10.0.2.15:7472
step rpc_echo_siw rpc_echo siw 10.0.2.15:7474
nfs_over siw 12149 12148 22149 auto
exit 0
"#;

/// The `ok <step> ...` lines a side must print, in order.
const SERVER: &[&str] = &[
    "ok listen",
    "ok reject private=pingpong-reject-me",
    "ok request device=",
    "ok established device=",
    "ok recv msg=\"hello from client\"",
    "ok send regions",
    "ok write-check bytes=65536",
    "ok inline max=",
    "ok closed event=Disconnected(PeerClosed)",
    "INVALIDATE",
    "ok v-untouched",
    "ok server PASS",
];
const CLIENT: &[&str] = &[
    "ok resolve device=",
    "ok rejected private=go-away",
    "ok established device=",
    "ok recv msg=\"regions",
    "ok read-check bytes=65536",
    "ok write bytes=65536",
    "ok closed event=Disconnected(Local)",
    "ok send-with-invalidate rkey=",
    "INVALIDATE",
    "ok client PASS",
];

/// What verbs-rpc-echo's client must print: ONC RPC calls through the
/// RPC-over-RDMA transport over the verbs provider, inline and through chunks.
const RPC_CLIENT: &[&str] = &[
    "ok null",
    "ok echo n=0 calls=10",
    "ok echo n=1 calls=10",
    "ok echo n=100 calls=10",
    "ok echo n=3000 calls=10",
    "ok echo n=70001 calls=10",
    "ok echo n=1048576 calls=5",
    "ok client PASS",
];

/// What the invalidation step must show (the `INVALIDATE` entry of `SERVER` and
/// `CLIENT`). rxe (Linux 6.1) refuses to invalidate, on a Send With Invalidate, the
/// rkey of a region registered with `ibv_reg_mr` (it invalidates only fast-registered
/// regions, which userspace verbs cannot make; remote invalidation would need a type
/// 2 memory window): the receiver's Receive completes with a remote operation error,
/// the connection ends, and the region keeps its bytes. siw invalidates any region
/// of the QP's PD (`siw_invalidate_stag`), though libsiw does not report it in the
/// Receive's completion (no `IBV_WC_WITH_INV`): the sender's RDMA Write to the
/// region afterwards fails. The transport does
/// not rely on either: verbs devices say `invalidate: false` and it fences by
/// deregistration.
fn invalidate_line(dev: &str, server: bool) -> &'static str {
    match (dev, server) {
        ("siw0", true) => "ok recv-invalidated-unreported",
        ("siw0", false) => "ok write-after-invalidate",
        (_, true) => {
            "ok invalidate-refused-by-device recv: Completion { wr_id: 1000, opcode: Recv, status: RemoteOperationError"
        }
        (_, false) => "ok invalidate-refused-by-device",
    }
}

/// Checks that `text` has a line starting with each of `want`, in order, and that
/// every line naming a device names `dev`.
fn check_side(text: &str, want: &[&str], dev: &str) -> Result<(), String> {
    let server = want.first() == SERVER.first();
    let mut lines = text.lines();
    for w in want {
        let w = if *w == "INVALIDATE" {
            invalidate_line(dev, server)
        } else {
            w
        };
        if !lines.any(|l| l.starts_with(w)) {
            return Err(format!("no line {w:?} (in order) in:\n{text}"));
        }
    }
    for l in text.lines().filter(|l| l.contains("device=")) {
        if !l.contains(&format!("device={dev}")) {
            return Err(format!("{l:?}: not on {dev}"));
        }
    }
    Ok(())
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn verbs_pingpong_over_rxe0_and_siw0() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let bin = build_binary("verbs", "verbs-pingpong");
    let echo = build_binary("verbs-rpc-echo", "verbs-rpc-echo");
    let nfsd = build_binary("nfsd", "nfsd");
    let script = GuestScript::inline("verbs-pingpong", GUEST)
        .binary("verbs-pingpong", &bin)
        .binary("verbs-rpc-echo", &echo)
        .binary("nfsd", &nfsd);
    let mut o = lab
        .guest(script)
        .run_name("verbs-pingpong")
        .shared_boot("kclient")
        .timeout(Duration::from_secs(300))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    for (run, dev) in [("rxe", "rxe0"), ("siw", "siw0")] {
        o.host_step(&format!("pingpong_{run}_checked"), |o| {
            let read = |f: &str| {
                std::fs::read_to_string(o.share_file(f)).map_err(|e| format!("share/{f}: {e}"))
            };
            check_side(&read(&format!("pingpong-{run}-server.txt"))?, SERVER, dev)?;
            check_side(&read(&format!("pingpong-{run}-client.txt"))?, CLIENT, dev)
        });
        o.host_step(&format!("rpc_echo_{run}_checked"), |o| {
            let f = format!("rpc-echo-{run}-client.txt");
            let text =
                std::fs::read_to_string(o.share_file(&f)).map_err(|e| format!("share/{f}: {e}"))?;
            check_side(&text, RPC_CLIENT, dev)?;
            check_rpc_stats(&text)
        });
    }
    for run in ["rxe", "siw"] {
        o.host_step(&format!("nfs_{run}_checked"), |o| {
            let xprt = o.value(&format!("xprt_{run}")).unwrap_or("");
            if !xprt.split_whitespace().take(2).eq(["xprt:", "rdma"]) {
                return Err(format!("mountstats xprt line is {xprt:?}, not rdma"));
            }
            let f = format!("nfsd-{run}.txt");
            let text =
                std::fs::read_to_string(o.share_file(&f)).map_err(|e| format!("share/{f}: {e}"))?;
            let provider = match run {
                "rxe" => "via verbs on rxe0 [--rdma-provider verbs]",
                _ => "via verbs on siw0 [auto]",
            };
            if !text.lines().any(|l| {
                l.starts_with("nfsd: NFS listening on rdma 10.0.2.15:") && l.contains(provider)
            }) {
                return Err(format!(
                    "no RDMA listener line with {provider:?} in:\n{text}"
                ));
            }
            check_nfsd_stats(&text)
        });
    }
    o.assert_passed();
}

/// The transport's own counters, printed by the client (`ok stats ...`): the large
/// echoes went through Read and Write chunks, every registered region was fenced by
/// deregistration (these devices cannot invalidate plain registrations) and none by a
/// LOCAL_INV, and chunk data came back.
fn check_rpc_stats(text: &str) -> Result<(), String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("ok stats "))
        .ok_or("no `ok stats` line")?;
    let get = |k: &str| -> Result<u64, String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .ok_or(format!("no {k} in `{line}`"))
    };
    let (reads, writes, regs) = (
        get("read_chunks")?,
        get("write_chunks")?,
        get("registrations")?,
    );
    let fenced = get("fenced_by_deregistration")?;
    let ok = reads >= 15
        && writes >= 15
        && regs >= 30
        && fenced == regs
        && get("local_invalidations")? == 0
        && get("chunk_bytes_rx")? >= 5 << 20;
    if ok {
        Ok(())
    } else {
        Err(format!("transport counters: {line}"))
    }
}

/// nfsd's connection counters (logged when a connection closes: `closed: xprt: rdma
/// server ...`): one connection
/// (a reconnect means a Terminate or a refused registration), the kernel client's
/// 8 MiB WRITE came by our RDMA Reads, its READ back went by our RDMA Writes; and
/// the data paths registered no memory per call: the RDMA Read sinks and the READ
/// data (pooled buffers) shared their buffers' cached registrations (at least one
/// per 1 MiB each way), and Sends went from their registered send buffers; at most a
/// few regions of their own (`device_registrations`: a Reply chunk's body, a Send
/// when every send buffer was busy).
fn check_nfsd_stats(text: &str) -> Result<(), String> {
    let conns: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" closed: xprt: rdma server "))
        .collect();
    let [line] = conns[..] else {
        return Err(format!(
            "{} server connections, not one, in:\n{text}",
            conns.len()
        ));
    };
    let get = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    if get("rdma_read_bytes") >= 8 << 20
        && get("rdma_write_bytes") >= 8 << 20
        && get("cached_registrations") >= 16
        && get("device_registrations") <= 4
    {
        Ok(())
    } else {
        Err(format!("server counters: {line}"))
    }
}

#[test]
fn rpc_stats_check_wants_chunks_fenced_by_deregistration() {
    let good = "ok stats read_chunks=15 write_chunks=15 registrations=30 \
                fenced_by_deregistration=30 local_invalidations=0 chunk_bytes_rx=6000000";
    assert!(check_rpc_stats(good).is_ok());
    assert!(check_rpc_stats(&good.replace("write_chunks=15", "write_chunks=0")).is_err());
    assert!(check_rpc_stats(&good.replace("deregistration=30", "deregistration=29")).is_err());
    assert!(check_rpc_stats("ok null").is_err());
}

#[test]
fn side_checks_want_every_line_in_order_on_the_device() {
    let text = "ok resolve device=rxe0\nok rejected private=go-away\n";
    assert!(check_side(text, &CLIENT[..2], "rxe0").is_ok());
    assert!(check_side(text, &CLIENT[..2], "siw0").is_err());
    assert!(check_side(text, &CLIENT[..3], "rxe0").is_err());
    let swapped = "ok rejected private=go-away\nok resolve device=rxe0\n";
    assert!(check_side(swapped, &CLIENT[..2], "rxe0").is_err());
}

#[test]
fn nfsd_stats_check_wants_one_connection_8_mib_each_way_and_cached_registrations() {
    let log = "T INFO rpcrdma_transport: closed: xprt: rdma server";
    let one = format!(
        "nfsd: ready\n{log} #1 10.0.2.15:1 rdma_reads=64 rdma_read_bytes=8388608 \
         rdma_write_bytes=8388608 cached_registrations=24\n"
    );
    assert!(check_nfsd_stats(&one).is_ok());
    let per_call = one.replace("cached_registrations=24", "device_registrations=24");
    assert!(check_nfsd_stats(&per_call).is_err());
    let few = one.replace("=24", "=24 device_registrations=4");
    assert!(check_nfsd_stats(&few).is_ok());
    let reconnected = format!("{one}{log} #2 10.0.2.15:2 rdma_read_bytes=8388608\n");
    assert!(check_nfsd_stats(&reconnected).is_err());
    let short = format!("{log} #1 10.0.2.15:1 rdma_read_bytes=8388608 rdma_write_bytes=4096\n");
    assert!(check_nfsd_stats(&short).is_err());
    assert!(check_nfsd_stats("nfsd: ready\n").is_err());
}
