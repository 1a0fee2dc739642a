//! The lab variant: in the qemu guest (`crates/lab`, `lab/`), the Linux kernel NFSv3
//! client (xprtrdma) reads the same file from the guest's knfsd and from our `nfsd`
//! running in the guest, interleaved, `proto=rdma` both; reports throughput, guest
//! CPU and ours/knfsd. [`Fabric::Siw`]: over soft-iWARP siw0, our nfsd with its
//! default `--rdma-provider auto` (rdma-core verbs on siw0 where it has them, else its
//! userspace iWARP; the report records which). [`Fabric::Rxe`]: over soft-RoCE rxe0,
//! our nfsd on `--rdma-provider verbs`, and after each pair of reads perftest's
//! `ib_write_bw` over rxe0 (server and client in the guest, so the device loops back
//! to itself, as it does for the reads) as the ceiling: ours/ceiling, knfsd/ceiling.
//!
//! Both servers export the same tmpfs `/export` (so both read from memory). knfsd is
//! started as `lab_knfsd_up` does, but with `/proc/fs/nfsd/max_block_size` raised to
//! 1 MiB before `rpc.nfsd`, so it offers the same 1 MiB `rtmax` as ours (otherwise it
//! caps READs by guest memory). Each read: mount with `rsize=1048576`, drop caches,
//! `dd if=file of=/dev/null bs=1M`, unmount. Guest CPU is the busy time of
//! `/proc/stat` (user + nice + system + irq + softirq) over the `dd`, in jiffies; it
//! covers the client, the server and everything else in the guest.
//!
//! [`Proto::Tcp`] (`--proto tcp`): the same reads with `proto=tcp` mounts (knfsd on
//! 2049, ours on its `--nfs-port 12049`); the fabric is still set up, and carries
//! nothing (no `ib_write_bw` ceiling then).
//!
//! `--writes`: after each pair of reads, the same servers interleaved writing `LAB_MIB`
//! MiB (`dd if=/dev/zero bs=1M conv=fsync` into a new file on a fresh mount,
//! `wsize=1048576`), timed and charged as the reads are.
//!
//! [`NfsVersion::V41`] (`--nfs-version 4.1`): the same runs with `vers=4.1` mounts of
//! both servers (no MOUNT, no `nolock`: NFSv4.1 has its locks inside), knfsd's and
//! ours on the same ports.
//!
//! `--metadata N` ([`crate::labmeta`]): after the reads, per server and repetition
//! (interleaved as the reads are), `fs-meta` (crates/lab/src/bin/fs-meta.rs, shipped
//! into the guest) creates, stats, opens, lists and removes `N` files in a fresh
//! directory on the mount, remounting between phases so the client asks the server;
//! the mount's per-op counts from `/proc/self/mountstats` are taken around each phase.
//!
//! `--with-ganesha` ([`LabPlan::ganesha`], `--proto tcp` only): nfs-ganesha (Debian 12's
//! 4.3, VFS backend; lab/setup installs it on the host, `ganesha.nfsd` and its
//! `libfsalvfs.so` plugin are shipped into the guest with their libraries) as a third
//! server: started in the guest after ours with its own configuration ([`GANESHA_UP`]:
//! NFS on 22049, MOUNT on 22048, NFSv3 and NFSv4, no NLM or RQUOTA, graceless, 10 s
//! lease, `MaxRead`/`MaxWrite` 1 MiB) exporting the same tmpfs `/export`, and read and
//! written by the same kernel client in interleaved triples: each repetition runs the
//! three servers in an order rotated by the repetition (knfsd, ours, ganesha; ours,
//! ganesha, knfsd; ganesha, knfsd, ours; ...), so no server always goes first. The
//! report adds ours/ganesha (throughput, guest CPU per GiB: medians of the
//! per-repetition ratios, as ours/knfsd) and leaves ours/knfsd as it is; the metadata
//! runs (`--metadata`) take ganesha in turn too, with ours/ganesha per phase. Not over
//! `proto=rdma`: Debian's build of ganesha 4.3 has no NFS/RDMA transport (its
//! libntirpc links neither libibverbs nor librdmacm, and its configuration knows no
//! `NFS_RDMA_Port`; docs/bench/README.md).
//!
//! The guest runs under TCG (no KVM here): absolute numbers are far below the host's
//! and only the ratio means something.

use std::path::PathBuf;
use std::time::Duration;

use lab::{GuestScript, Lab};
use serde::Serialize;

use crate::stats::{cpu_per_gib, mb_per_s, median};

/// Which RDMA fabric the guest's kernel client, knfsd and our nfsd use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// Soft-iWARP `siw0` on eth0; our nfsd with `--rdma-provider auto` (which takes
    /// rdma-core verbs on siw0 when the provider is built in, else its userspace iWARP).
    Siw,
    /// Soft-RoCE `rxe0` on eth0 (siw0 removed, so rdma_cm finds only rxe0); our nfsd
    /// with `--rdma-provider verbs`; plus the `ib_write_bw` ceiling over rxe0.
    Rxe,
}

impl Fabric {
    /// `siw` or `rxe`.
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Siw => "siw",
            Fabric::Rxe => "rxe",
        }
    }
}

/// The transport the guest's kernel client mounts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// `proto=rdma` (xprtrdma over the fabric): knfsd's RDMA listener 20049, ours 30049.
    Rdma,
    /// `proto=tcp`: knfsd on 2049, ours on its `--nfs-port 12049`; the fabric is set up
    /// as for rdma but carries nothing.
    Tcp,
}

impl Proto {
    /// `rdma` or `tcp` (the mount's `proto=`).
    pub fn name(self) -> &'static str {
        match self {
            Proto::Rdma => "rdma",
            Proto::Tcp => "tcp",
        }
    }
}

/// The NFS version the guest's kernel client mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum NfsVersion {
    /// `vers=3` (with MOUNT on the server's mount port, `nolock`).
    #[value(name = "3")]
    #[serde(rename = "3")]
    V3,
    /// `vers=4.1`.
    #[value(name = "4.1")]
    #[serde(rename = "4.1")]
    V41,
}

impl NfsVersion {
    /// `3` or `4.1` (the mount's `vers=`).
    pub fn name(self) -> &'static str {
        match self {
            NfsVersion::V3 => "3",
            NfsVersion::V41 => "4.1",
        }
    }
}

/// What `nfsbench lab` runs.
#[derive(Debug, Clone)]
pub struct LabPlan {
    /// The guest's RDMA device.
    pub fabric: Fabric,
    /// The mounts' transport.
    pub proto: Proto,
    /// The mounts' NFS version.
    pub nfs_version: NfsVersion,
    /// Host path of our `nfsd` binary (shipped into the guest).
    pub nfsd: PathBuf,
    /// The `lab/` directory (with its cache); default: the lab's own lookup.
    pub lab_dir: Option<PathBuf>,
    /// Size of the file read, MiB.
    pub mib: u32,
    /// Repetitions (interleaved pairs).
    pub reps: u32,
    /// One more read from ours under `strace -c -f`.
    pub strace: bool,
    /// Interleaved writes after the reads of each repetition.
    pub writes: bool,
    /// Our nfsd's `--tcp-read-data` (sendfile or copy).
    pub tcp_read_data: String,
    /// Our nfsd with `--nfsd-only` (the lab's export changes only through the server
    /// under test): NFSv4.1 reports its directory changes as atomic.
    pub nfsd_only: bool,
    /// With `metadata`, one more metadata run per server under the guest's `perf
    /// record -a`: where the guest's CPU time goes. (Not the reads: a 64 MiB read ran
    /// 50 times slower under it in the TCG guest, with a few dozen samples.)
    pub profile: bool,
    /// The metadata runs: files per run and the host path of `fs-meta`.
    pub metadata: Option<(u32, PathBuf)>,
    /// nfs-ganesha as a third server of the reads and writes (`--proto tcp` only).
    pub ganesha: bool,
}

/// Host path of Debian's `ganesha.nfsd` (package nfs-ganesha), shipped into the guest.
pub const GANESHA_BIN: &str = "/usr/bin/ganesha.nfsd";
/// Host path of ganesha's VFS backend (package nfs-ganesha-vfs), a plugin ganesha
/// dlopens from its `Plugins_Dir` (the guest's `/share/bin`).
pub const GANESHA_FSAL_VFS: &str = "/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so";

/// The guest's RDMA setup for siw: siw0 and siw_lo (lab_rdma_up).
const SIW_UP: &str = r#"step rdma_up lab_rdma_up
"#;

/// The guest's RDMA setup for rxe: the NFS/RDMA modules without siw, and rxe0 on eth0
/// as the only RDMA device (rdma_cm picks among the devices on eth0 for 10.0.2.15).
/// perftest is checked first, so a guest without it fails before anything slow.
const RXE_UP: &str = r#"perftest_present() {
  command -v ib_write_bw >/dev/null 2>&1 && return 0
  echo "ib_write_bw (Debian package perftest) is not in this guest's initramfs: run lab/setup (it installs perftest on the host and rebuilds the initramfs)"
  return 1
}
step perftest_present perftest_present
rxe_only_up() {
  for m in rpcrdma nfsv3 nfsv4 nfsd rdma_ucm ib_uverbs; do modprobe $m || return 1; done
  lab_rxe_up || return 1
  [ "$(rdma link show | grep -c '^link ')" = 1 ] || { rdma link show; return 1; }
}
step rdma_up rxe_only_up
record rdma_links "$(rdma link show | tr '\n' ' ')"
"#;

/// knfsd (as lab_knfsd_up, with max_block_size raised before rpc.nfsd starts) and the
/// file both servers export.
const KNFSD_UP: &str = r#"# lab_knfsd_up, with max_block_size raised before rpc.nfsd starts.
knfsd_up() {
  mkdir -p /export /run/rpcbind /var/lib/nfs/rpc_pipefs || return 1
  mount -t tmpfs -o size=600m tmpfs /export || return 1
  mount -t nfsd nfsd /proc/fs/nfsd || return 1
  echo 1048576 >/proc/fs/nfsd/max_block_size || return 1
  rpcbind -w || return 1
  echo '/export *(rw,no_root_squash,insecure,fsid=1,no_subtree_check,sync)' >/etc/exports
  exportfs -ra || return 1
  rpc.mountd -p 20048 || return 1
  echo 10 >/proc/fs/nfsd/nfsv4leasetime
  echo 10 >/proc/fs/nfsd/nfsv4gracetime
  rpc.nfsd 8 || return 1
  echo "rdma 20049" >/proc/fs/nfsd/portlist || return 1
  grep -q "rdma 20049" /proc/fs/nfsd/portlist || return 1
  # On an iWARP device (siw) the RDMA listener is a TCP socket; on RoCE there is none.
  if rdma link show | grep -q '^link siw'; then
    lab_wait_listen 20049 10
  fi
}
step knfsd_up knfsd_up
record max_block_size "$(cat /proc/fs/nfsd/max_block_size)"
step make_file dd if=/dev/urandom of=/export/big bs=1M count="$LAB_MIB"
"#;

/// Our nfsd over siw: as before (`auto` provider), ready when its TCP port listens.
const SIW_OURS: &str = r#"lab_run_binary nfsd --bind 10.0.2.15 --nfs-port 12049 --mount-port 12048 --rdma-port 30049 --rpcbind off --squash none --tcp-read-data "$LAB_TCP_READ_DATA" $LAB_NFSD_ONLY /export
step ours_listens lab_wait_listen 30049 60
"#;

/// Our nfsd over rxe: `--rdma-provider verbs`; on RoCE nothing listens on TCP 30049
/// (READS waits for its "ready" line). Its per-connection counters go to nfsd.log.
const RXE_OURS: &str = r#"export RUST_LOG=rpcrdma_transport=info
lab_run_binary nfsd --bind 10.0.2.15 --nfs-port 12049 --mount-port 12048 --rdma-port 30049 --rdma-provider verbs --rpcbind off --squash none --tcp-read-data "$LAB_TCP_READ_DATA" $LAB_NFSD_ONLY /export
"#;

/// nfs-ganesha (with `LAB_GANESHA=1`): its configuration, then `ganesha.nfsd` in the
/// foreground (a child of the script, stopped at exit), ready when its NFS port
/// listens. It registers with the guest's rpcbind (it will not start without one),
/// which takes knfsd's registrations for NFS and MOUNT over: every mount names its
/// ports, so no mount asks rpcbind. Its VFS backend needs the mount table as
/// `/etc/mtab`. Owners are numeric ids, and `UseGetpwnam` keeps its ID mapper off
/// libnfsidmap (whose plugins the guest does not have: ganesha refuses to start then).
pub const GANESHA_UP: &str = r#"ganesha_up() {
  mkdir -p /var/lib/nfs/ganesha /var/run/ganesha || return 1
  [ -e /etc/mtab ] || ln -s /proc/mounts /etc/mtab || return 1
  cat >/tmp/ganesha.conf <<'CONF'
NFS_CORE_PARAM {
  NFS_Port = 22049;
  MNT_Port = 22048;
  Protocols = 3, 4;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Plugins_Dir = "/share/bin";
}
NFSV4 {
  Graceless = true;
  Lease_Lifetime = 10;
  Grace_Period = 10;
  Only_Numeric_Owners = true;
  UseGetpwnam = true;
}
EXPORT {
  Export_Id = 1;
  Path = /export;
  Pseudo = /export;
  Protocols = 3, 4;
  Transports = TCP;
  Access_Type = RW;
  Squash = No_Root_Squash;
  SecType = sys;
  MaxRead = 1048576;
  MaxWrite = 1048576;
  PrefRead = 1048576;
  PrefWrite = 1048576;
  FSAL {
    Name = VFS;
  }
}
LOG {
  Default_Log_Level = EVENT;
}
CONF
  cp /tmp/ganesha.conf "$LAB_RUN_DIR/ganesha.conf"
  LD_LIBRARY_PATH=/share/lib /share/bin/ganesha.nfsd -F -f /tmp/ganesha.conf \
    -L "$LAB_RUN_DIR/ganesha.log" -p /var/run/ganesha/ganesha.pid -N NIV_EVENT \
    >"$LAB_RUN_DIR/ganesha.out" 2>&1 &
  LAB_PID_ganesha=$!
  lab_on_exit "kill $LAB_PID_ganesha 2>/dev/null"
  lab_wait_listen 22049 120 && kill -0 $LAB_PID_ganesha && return 0
  cat "$LAB_RUN_DIR/ganesha.out" "$LAB_RUN_DIR/ganesha.log"
  return 1
}
if [ "${LAB_GANESHA:-0}" = 1 ]; then
  step ganesha_up ganesha_up
  record ganesha_version "$(grep -o 'Ganesha Version [^ ]*' "$LAB_RUN_DIR/ganesha.log" | head -1)"
  record ganesha_rpcbind "$(rpcinfo -p 127.0.0.1 2>&1 | awk '$3 == "tcp" && ($5 == "nfs" || $5 == "mountd") {printf "%s v%s %s; ", $5, $2, $4}')"
fi
"#;

/// The interleaved reads (and, with `LAB_CEILING=1`, the ib_write_bw ceiling after
/// each pair).
const READS: &str = r#"ours_ready() {
  local w=0
  while ! grep -q '^nfsd: ready' "$LAB_RUN_DIR/nfsd.log" 2>/dev/null; do
    w=$((w + 1)); [ $w -gt 300 ] && { cat "$LAB_RUN_DIR/nfsd.log"; return 1; }; sleep 0.2
  done
}
step ours_ready ours_ready
record ours_rdma "$(grep 'listening on rdma' "$LAB_RUN_DIR/nfsd.log")"
record ours_tcp_read_data "$LAB_TCP_READ_DATA"
record ours_nfsd_only "${LAB_NFSD_ONLY:-no}"
M=/mnt/b
mkdir -p $M
# proto=rdma (the default): knfsd's RDMA listener 20049, ours 30049; proto=tcp:
# knfsd's 2049, ours --nfs-port 12049.
P=${LAB_PROTO:-rdma}
if [ "$P" = tcp ]; then KP=2049; OP=12049; else KP=20049; OP=30049; fi
# ports SERVER: its NFS port and its MOUNT port (ganesha: TCP only, 22049 and 22048).
ports() {
  case $1 in
    knfsd) echo "$KP 20048" ;;
    ours) echo "$OP 12048" ;;
    ganesha) echo "22049 22048" ;;
  esac
}
# The servers of the reads and writes: knfsd and ours, and ganesha with LAB_GANESHA=1.
SERVERS="knfsd ours"
[ "${LAB_GANESHA:-0}" = 1 ] && SERVERS="knfsd ours ganesha"
# in_turn FN REP SERVER...: `FN SERVER NFS_PORT MOUNT_PORT REP` for each SERVER, the
# list rotated left by REP (a number) so that no server always goes first: two
# servers alternate (knfsd ours, ours knfsd, ...), three take turns (knfsd ours
# ganesha, ours ganesha knfsd, ganesha knfsd ours, ...).
in_turn() {
  local fn=$1 rep=$2 k s
  shift 2
  k=$((rep % $#))
  while [ $k -gt 0 ]; do
    s=$1
    shift
    set -- "$@" "$s"
    k=$((k - 1))
  done
  for s in "$@"; do
    # shellcheck disable=SC2046
    $fn "$s" $(ports "$s") "$rep"
  done
}
# mount_opts PORT MOUNT_PORT: the options of a mount of NFS version $LAB_VERS.
mount_opts() {
  if [ "${LAB_VERS:-3}" = 3 ]; then
    echo "vers=3,proto=$P,port=$1,mountproto=tcp,mountport=$2,nolock"
  else
    echo "vers=$LAB_VERS,proto=$P,port=$1"
  fi
}
record knfsd_portlist "$(tr '\n' ' ' </proc/fs/nfsd/portlist)"
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
# Busy jiffies of each vCPU, and of our nfsd process (utime + stime), for the
# per-run diagnostics (cpus_*, ours_proc_*).
pcpu() { awk '/^cpu[0-9]/{printf "%d ", $2+$3+$4+$7+$8}' /proc/stat; }
pdelta() { echo "$1|$2" | awk -F'|' '{n=split($1,a," "); split($2,b," "); for(k=1;k<=n;k++) printf "%d ", b[k]-a[k]}'; }
oursproc() { awk '{print $14, $15}' "/proc/$LAB_PID_nfsd/stat" 2>/dev/null || echo 0 0; }
# Diagnostics (--profile, with --metadata or --writes): `perf record -a` (cpu-clock
# samples of both vCPUs, kernel and user, with call chains) around one metadata phase
# or one write (rep "profile", after the measured ones); perf_off leaves
# profile-<label>.txt in the run's share: the samples by process and object, then
# the flat profile by symbol (self time), then the kernel's call chains into it; and
# perf-<label>.data with the guest's kallsyms, for `perf report --kallsyms` on the
# host.
PERF_PID=
perf_on() {
  LD_LIBRARY_PATH=/share/lib /share/bin/perf record -a -g -F 499 -o "/tmp/perf-$1.data" \
    >"$LAB_RUN_DIR/perf-record-$1.log" 2>&1 &
  PERF_PID=$!
  sleep 2
  kill -0 "$PERF_PID" || { cat "$LAB_RUN_DIR/perf-record-$1.log"; return 1; }
}
perf_off() {
  local r="LD_LIBRARY_PATH=/share/lib /share/bin/perf report -i /tmp/perf-$1.data --stdio"
  kill -INT "$PERF_PID"
  wait "$PERF_PID"
  PERF_PID=
  {
    echo "== perf record -a -g -F 499 around $1: samples by process and object"
    eval "$r --no-children --sort comm,dso -g none --percent-limit 0.5"
    echo "== flat profile: self samples by process, object and symbol"
    eval "$r --no-children --sort comm,dso,sym -g none --percent-limit 0.2"
    echo "== call chains (callers) of the symbols above 1%"
    eval "$r --no-children --sort comm,sym -g caller,0.5,callee --percent-limit 1"
  } >"$LAB_RUN_DIR/profile-$1.txt" 2>&1
  mv "/tmp/perf-$1.data" "$LAB_RUN_DIR/perf-$1.data"
  [ -f "$LAB_RUN_DIR/kallsyms" ] || cat /proc/kallsyms >"$LAB_RUN_DIR/kallsyms"
  grep -q "^# Samples" "$LAB_RUN_DIR/profile-$1.txt" || { head -50 "$LAB_RUN_DIR/profile-$1.txt"; return 1; }
}
readone() {
  step "mount_$1_$4" mount.nfs 10.0.2.15:/export $M -n -o "$(mount_opts $2 $3),rsize=1048576"
  [ "$4" = 0 ] && record "mount_$1" "$(grep " $M " /proc/mounts)"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  p0=$(pcpu)
  n0=$(oursproc)
  c0=$(busy)
  t0=$(cut -d" " -f1 /proc/uptime)
  step "read_$1_$4" dd if=$M/big of=/dev/null bs=1M
  t1=$(cut -d" " -f1 /proc/uptime)
  c1=$(busy)
  n1=$(oursproc)
  p1=$(pcpu)
  record "run_$1_$4" "$(echo "$t1 $t0 $c1 $c0" | awk '{printf "%.2f %d", $1-$2, $3-$4}')"
  record "cpus_$1_$4" "$(pdelta "$p0" "$p1")"
  record "ours_proc_$1_$4" "$(pdelta "$n0" "$n1")"
  step "umount_$1_$4" umount $M
}
# writeone SERVER PORT MOUNT_PORT REP: LAB_MIB MiB written into a new file through a
# fresh mount (fsync before dd ends), timed and charged as readone's read.
writeone() {
  step "wmount_$1_$4" mount.nfs 10.0.2.15:/export $M -n -o "$(mount_opts $2 $3),wsize=1048576"
  sync
  p0=$(pcpu)
  n0=$(oursproc)
  c0=$(busy)
  [ "$4" = profile ] && { step "wperf_on_$1" perf_on "write-$1" || return 1; }
  t0=$(cut -d" " -f1 /proc/uptime)
  step "write_$1_$4" dd if=/dev/zero of=$M/written bs=1M count="$LAB_MIB" conv=fsync
  t1=$(cut -d" " -f1 /proc/uptime)
  [ "$4" = profile ] && { step "wperf_off_$1" perf_off "write-$1" || return 1; }
  c1=$(busy)
  n1=$(oursproc)
  p1=$(pcpu)
  record "wrun_$1_$4" "$(echo "$t1 $t0 $c1 $c0" | awk '{printf "%.2f %d", $1-$2, $3-$4}')"
  record "wcpus_$1_$4" "$(pdelta "$p0" "$p1")"
  record "wours_proc_$1_$4" "$(pdelta "$n0" "$n1")"
  step "wremove_$1_$4" rm $M/written
  step "wumount_$1_$4" umount $M
}
# ib_write_bw, server and client in this guest over rxe0 (rdma_cm, port 18515):
# LAB_MIB messages of 1 MiB, the client's report line recorded with the guest's own
# wall time and busy jiffies over the client's run.
ceiling() {
  local out spid w crc src
  out=$LAB_RUN_DIR/ib_write_bw-$1
  ib_write_bw -d rxe0 -R -F -s 1048576 -n "$LAB_MIB" >"$out-server.txt" 2>&1 &
  spid=$!
  w=0
  until rdma resource show cm_id 2>/dev/null | grep -q 18515; do
    w=$((w + 1)); [ $w -gt 50 ] && break; sleep 0.2
  done
  sync
  p0=$(pcpu)
  c0=$(busy)
  t0=$(cut -d" " -f1 /proc/uptime)
  timeout -s KILL 300 ib_write_bw -d rxe0 -R -F -s 1048576 -n "$LAB_MIB" 10.0.2.15 >"$out-client.txt" 2>&1
  crc=$?
  t1=$(cut -d" " -f1 /proc/uptime)
  c1=$(busy)
  p1=$(pcpu)
  ( sleep 30; kill -9 $spid 2>/dev/null ) &
  wait $spid
  src=$?
  echo "--- server (rc=$src)"; cat "$out-server.txt"
  echo "--- client (rc=$crc)"; cat "$out-client.txt"
  [ $crc = 0 ] && [ $src = 0 ] || return 1
  record "ceiling_run_$1" "$(echo "$t1 $t0 $c1 $c0" | awk '{printf "%.2f %d", $1-$2, $3-$4}')"
  record "cpus_ceiling_$1" "$(pdelta "$p0" "$p1")"
  record "ceiling_report_$1" "$(grep -A1 'BW average' "$out-client.txt" | tr -s ' \t\n' ' ')"
}
i=0
while [ $i -lt "$LAB_REPS" ]; do
  # shellcheck disable=SC2086
  in_turn readone $i $SERVERS
  # shellcheck disable=SC2086
  [ "${LAB_WRITES:-0}" = 1 ] && in_turn writeone $i $SERVERS
  [ "${LAB_CEILING:-0}" = 1 ] && step "ceiling_$i" ceiling $i
  i=$((i + 1))
done
if [ "${LAB_PERF:-0}" = 1 ] && [ "${LAB_WRITES:-0}" = 1 ]; then
  for s in $SERVERS; do
    # shellcheck disable=SC2046
    writeone $s $(ports $s) profile
  done
fi
# Diagnostics (--strace): one more read from ours, outside the measured ones, with
# `strace -c -f` attached to our nfsd: its system calls, counted and timed.
strace_ours() {
  local spid
  strace -c -f -p "$LAB_PID_nfsd" -o "$LAB_RUN_DIR/strace-ours.txt" &
  spid=$!
  sleep 2
  readone ours $OP 12048 strace
  kill -INT $spid
  wait $spid
  cat "$LAB_RUN_DIR/strace-ours.txt"
}
[ "${LAB_STRACE:-0}" = 1 ] && strace_ours
"#;

/// The metadata runs (`LAB_META=N` files, 0: none): per server and repetition, in a
/// fresh directory on a fresh mount, `fs-meta` create, then remount (caches
/// dropped) and stat, open, then remount and list, remove. Around each phase the
/// per-op counts of the mount's `/proc/self/mountstats` (`NAME:ops:rtt_ms:
/// execute_ms:errors` for the ops with calls) and the guest's busy jiffies.
const META: &str = r#"meta_mount() {
  mount.nfs 10.0.2.15:/export $M -n -o "$(mount_opts $1 $2)"
}
meta_umount() {
  umount $M || return 1
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
opsnap() {
  awk -v mp="$M" '$1=="device" {f=($5==mp); next} f && $1 ~ /^[A-Z_0-9]+:$/ && NF>=10 && $2>0 {sub(":","",$1); printf "%s:%s:%s:%s:%s ", $1, $2, $8, $9, $10}' /proc/self/mountstats
}
metaphase() {
  local b a c0 c1 out
  b=$(opsnap)
  [ "$2" = profile ] && { perf_on "meta-$1-$3" || return 1; }
  c0=$(busy)
  out=$(timeout -s KILL "$LAB_STEP_TIMEOUT" /share/bin/fs-meta "$3" "$4" "$LAB_META") || { echo "$out"; return 1; }
  c1=$(busy)
  [ "$2" = profile ] && { perf_off "meta-$1-$3" || return 1; }
  a=$(opsnap)
  echo "$out"
  record "meta_$1_$2_$3" "$(echo "$out" | awk '{print $4}') $((c1 - c0))"
  record "metaops_before_$1_$2_$3" "$b"
  record "metaops_after_$1_$2_$3" "$a"
}
metaone() {
  local d=$M/meta-$1-$4
  step "meta_mount_$1_$4" meta_mount $2 $3
  [ "$4" = 0 ] && record "meta_mount_$1" "$(grep " $M " /proc/mounts)"
  step "meta_mkdir_$1_$4" mkdir $d
  step "meta_create_$1_$4" metaphase $1 $4 create $d
  step "meta_remount1_$1_$4" meta_umount
  step "meta_mount1_$1_$4" meta_mount $2 $3
  step "meta_stat_$1_$4" metaphase $1 $4 stat $d
  step "meta_open_$1_$4" metaphase $1 $4 open $d
  step "meta_remount2_$1_$4" meta_umount
  step "meta_mount2_$1_$4" meta_mount $2 $3
  step "meta_list_$1_$4" metaphase $1 $4 list $d
  step "meta_remove_$1_$4" metaphase $1 $4 remove $d
  step "meta_rmdir_$1_$4" rmdir $d
  step "meta_umount_$1_$4" meta_umount
}
if [ "${LAB_META:-0}" -gt 0 ]; then
  i=0
  while [ $i -lt "$LAB_REPS" ]; do
    # shellcheck disable=SC2086
    in_turn metaone $i $SERVERS
    i=$((i + 1))
  done
  if [ "${LAB_PERF:-0}" = 1 ]; then
    for s in $SERVERS; do
      # shellcheck disable=SC2046
      metaone $s $(ports $s) profile
    done
  fi
fi
exit 0
"#;

/// The host's `perf` (Debian package linux-perf), shipped into the guest for
/// `--profile`.
fn host_perf() -> Result<PathBuf, String> {
    let p = PathBuf::from("/usr/bin/perf");
    if p.is_file() {
        Ok(p)
    } else {
        Err("--profile needs perf on the host (/usr/bin/perf, Debian package linux-perf): apt-get install linux-perf".into())
    }
}

/// The guest script for `fabric`.
pub fn guest_script(fabric: Fabric) -> String {
    let (up, ours) = match fabric {
        Fabric::Siw => (SIW_UP, SIW_OURS),
        Fabric::Rxe => (RXE_UP, RXE_OURS),
    };
    format!(". /share/lib.sh\n{up}{KNFSD_UP}{ours}{GANESHA_UP}{READS}{META}")
}

/// One `dd` read in the guest.
#[derive(Debug, Clone, Serialize)]
pub struct GuestRead {
    /// `knfsd`, `ours` or `ganesha`.
    pub server: String,
    /// Repetition.
    pub rep: u32,
    /// Bytes read.
    pub bytes: u64,
    /// Guest wall seconds (`/proc/uptime`).
    pub secs: f64,
    /// MB/s.
    pub mb_s: f64,
    /// Guest busy CPU seconds (all vCPUs).
    pub guest_cpu_s: f64,
    /// Guest CPU seconds per GiB.
    pub guest_cpu_s_per_gib: f64,
    /// Busy jiffies of each vCPU over the `dd` (where the work ran).
    pub per_cpu_busy_jiffies: Vec<u64>,
    /// Jiffies of our nfsd process over the `dd`, user and system (on rxe the
    /// system time includes rxe's requester, which runs in the posting thread for a
    /// userspace QP); for knfsd's reads: what our idle server cost meanwhile.
    pub ours_process_user_system_jiffies: Vec<u64>,
}

/// The interleaved writes (`--writes`), compared as the reads are.
#[derive(Debug, Clone, Serialize)]
pub struct Writes {
    /// Every write (a [`GuestRead`] of the bytes written).
    pub runs: Vec<GuestRead>,
    /// Median MB/s per server.
    pub median_mb_s: Vec<(String, f64)>,
    /// Median guest CPU seconds per GiB per server.
    pub median_cpu_s_per_gib: Vec<(String, f64)>,
    /// Median ours/knfsd throughput over the interleaved pairs.
    pub ours_over_knfsd_throughput: f64,
    /// Median ours/knfsd guest CPU per GiB.
    pub ours_over_knfsd_cpu_per_gib: f64,
    /// Median ours/ganesha throughput over the repetitions (`--with-ganesha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_throughput: Option<f64>,
    /// Median ours/ganesha guest CPU per GiB (`--with-ganesha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_cpu_per_gib: Option<f64>,
}

impl Writes {
    fn of(runs: Vec<GuestRead>, reps: u32) -> Writes {
        let c = Comparison::of(&runs, reps);
        Writes {
            runs,
            median_mb_s: c.median_mb_s,
            median_cpu_s_per_gib: c.median_cpu_s_per_gib,
            ours_over_knfsd_throughput: c.throughput,
            ours_over_knfsd_cpu_per_gib: c.cpu_per_gib,
            ours_over_ganesha_throughput: c.vs_ganesha.map(|r| r.0),
            ours_over_ganesha_cpu_per_gib: c.vs_ganesha.map(|r| r.1),
        }
    }
}

/// Medians per server, ours/knfsd over the interleaved pairs of `reps`, and
/// ours/ganesha when ganesha ran.
struct Comparison {
    median_mb_s: Vec<(String, f64)>,
    median_cpu_s_per_gib: Vec<(String, f64)>,
    throughput: f64,
    cpu_per_gib: f64,
    /// ours/ganesha (throughput, CPU per GiB), if any run is ganesha's.
    vs_ganesha: Option<(f64, f64)>,
}

impl Comparison {
    fn of(runs: &[GuestRead], reps: u32) -> Comparison {
        let pick = |s: &str, rep: u32| runs.iter().find(|r| r.server == s && r.rep == rep);
        // Medians over the repetitions of ours/`other` (throughput, CPU per GiB), each
        // repetition's ratio from that repetition's two runs.
        let ratios = |other: &str| {
            let pairs: Vec<(&GuestRead, &GuestRead)> = (0..reps)
                .filter_map(|rep| Some((pick("ours", rep)?, pick(other, rep)?)))
                .collect();
            (
                median(
                    &pairs
                        .iter()
                        .map(|(a, b)| a.mb_s / b.mb_s)
                        .collect::<Vec<_>>(),
                ),
                median(
                    &pairs
                        .iter()
                        .map(|(a, b)| a.guest_cpu_s_per_gib / b.guest_cpu_s_per_gib)
                        .collect::<Vec<_>>(),
                ),
            )
        };
        let med_of = |s: &str, f: fn(&GuestRead) -> f64| {
            median(
                &runs
                    .iter()
                    .filter(|r| r.server == s)
                    .map(f)
                    .collect::<Vec<_>>(),
            )
        };
        let with_ganesha = runs.iter().any(|r| r.server == "ganesha");
        let servers: &[&str] = if with_ganesha {
            &["knfsd", "ours", "ganesha"]
        } else {
            &["knfsd", "ours"]
        };
        let per_server = |f: fn(&GuestRead) -> f64| {
            servers
                .iter()
                .map(|s| (s.to_string(), med_of(s, f)))
                .collect()
        };
        let (throughput, cpu_per_gib) = ratios("knfsd");
        Comparison {
            median_mb_s: per_server(|r| r.mb_s),
            median_cpu_s_per_gib: per_server(|r| r.guest_cpu_s_per_gib),
            throughput,
            cpu_per_gib,
            vs_ganesha: with_ganesha.then(|| ratios("ganesha")),
        }
    }
}

/// Whitespace-separated integers (the per-CPU diagnostics); empty if absent.
fn ints(v: Option<&str>) -> Vec<u64> {
    v.unwrap_or("")
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect()
}

/// One `ib_write_bw` run in the guest (rxe only): 1 MiB RDMA Writes, `--mib`
/// of them, client and server in the one guest over rxe0.
#[derive(Debug, Clone, Serialize)]
pub struct CeilingRun {
    /// Repetition (run after that repetition's pair of reads).
    pub rep: u32,
    /// Bytes written (message size x iterations).
    pub bytes: u64,
    /// perftest's own "BW average", converted to MB/s (10^6 bytes/s; perftest's
    /// MB/sec is 2^20 bytes/s).
    pub mb_s: f64,
    /// The client's report line as printed (header and figures).
    pub report: String,
    /// Guest wall seconds of the whole client run (connection setup included).
    pub secs: f64,
    /// MB/s over that wall time (a lower bound: it includes the setup).
    pub wall_mb_s: f64,
    /// Guest busy CPU seconds per GiB over the client run (server, client, rxe).
    pub guest_cpu_s_per_gib: f64,
    /// Busy jiffies of each vCPU over the client run.
    pub per_cpu_busy_jiffies: Vec<u64>,
    /// Why perftest's figure was not used (it printed 0), if so; `mb_s` is then NaN
    /// (null in the JSON) and the run is left out of the median and the ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
}

/// The `ib_write_bw` ceiling and the ratios to it.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// What was run.
    pub command: String,
    /// Every run.
    pub runs: Vec<CeilingRun>,
    /// Median MB/s (perftest's figure).
    pub median_mb_s: f64,
    /// Median over repetitions of ours MB/s / that repetition's ceiling.
    pub ours_over_ceiling: f64,
    /// Median over repetitions of knfsd MB/s / that repetition's ceiling.
    pub knfsd_over_ceiling: f64,
}

/// The lab variant's report.
#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    /// The fabric the guest ran on.
    pub fabric: Fabric,
    /// The mounts' transport.
    pub proto: Proto,
    /// The mounts' NFS version.
    pub nfs_version: NfsVersion,
    /// Guest kernel and the mount lines (rsize actually used).
    pub guest: Vec<(String, String)>,
    /// Every read.
    pub reads: Vec<GuestRead>,
    /// Median MB/s per server.
    pub median_mb_s: Vec<(String, f64)>,
    /// Median ours/knfsd throughput over the interleaved pairs.
    pub ours_over_knfsd_throughput: f64,
    /// Median ours/knfsd guest CPU per GiB.
    pub ours_over_knfsd_cpu_per_gib: f64,
    /// Median ours/ganesha throughput over the repetitions (`--with-ganesha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_throughput: Option<f64>,
    /// Median ours/ganesha guest CPU per GiB (`--with-ganesha`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_over_ganesha_cpu_per_gib: Option<f64>,
    /// Median guest CPU seconds per GiB per server.
    pub median_cpu_s_per_gib: Vec<(String, f64)>,
    /// The `ib_write_bw` ceiling (rxe only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
    /// The metadata runs (`--metadata N`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::labmeta::Metadata>,
    /// The writes (`--writes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writes: Option<Writes>,
    /// Where the lab kept the run.
    pub out_dir: PathBuf,
}

/// The `ib_write_bw` invocation (client side; the server is the same without the
/// address).
pub const CEILING_COMMAND: &str = "ib_write_bw -d rxe0 -R -F -s 1048576 -n <mib> 10.0.2.15";

/// Parses perftest's report as recorded (`grep -A1 'BW average'`, whitespace
/// squeezed): the header ` #bytes #iterations BW peak[MB/sec] BW average[MB/sec]
/// MsgRate[Mpps]` and the figures line. Returns (bytes per message, iterations,
/// average MB/s with MB = 10^6 bytes).
pub fn parse_perftest_bw(report: &str) -> Result<(u64, u64, f64), String> {
    let bad = || format!("not a perftest bandwidth report: {report:?}");
    let unit_at = report.find("BW average[").ok_or_else(bad)? + "BW average[".len();
    let unit = report[unit_at..].split(']').next().ok_or_else(bad)?;
    // perftest: MB/sec is 0x100000 bytes per second, Gb/sec 125,000,000.
    let to_mb_s = match unit {
        "MB/sec" => 1.048576,
        "Gb/sec" => 125.0,
        _ => return Err(format!("unknown perftest unit {unit:?} in {report:?}")),
    };
    let header_end = report.find("MsgRate[").ok_or_else(bad)?;
    let after = report[header_end..]
        .split_once(']')
        .map(|(_, r)| r)
        .ok_or_else(bad)?;
    let f: Vec<&str> = after.split_whitespace().collect();
    if f.len() < 4 {
        return Err(bad());
    }
    let int = |x: &str| x.parse::<u64>().map_err(|_| bad());
    let avg: f64 = f[3].parse().map_err(|_| bad())?;
    Ok((int(f[0])?, int(f[1])?, avg * to_mb_s))
}

/// "secs jiffies" as recorded by the guest script.
fn secs_jiffies(key: &str, v: &str) -> Result<(f64, f64), String> {
    let mut it = v.split_whitespace().map(str::parse::<f64>);
    match (it.next(), it.next()) {
        (Some(Ok(s)), Some(Ok(j))) => Ok((s, j)),
        _ => Err(format!("{key}: {v}")),
    }
}

/// Boots the guest and runs the comparison on `fabric`; `nfsd` is the host path of
/// our `nfsd` binary (shipped into the guest), `lab_dir` the `lab/` directory (with
/// its cache). With `strace`, one more read from ours after the measured ones runs
/// under `strace -c -f` (left in the run's share as `strace-ours.txt`).
pub fn run(plan: &LabPlan) -> Result<LabReport, String> {
    let LabPlan {
        fabric,
        proto,
        nfs_version,
        ref nfsd,
        ref lab_dir,
        mib,
        reps,
        strace,
        writes,
        profile,
        ref metadata,
        ref tcp_read_data,
        nfsd_only,
        ganesha,
    } = *plan;
    if ganesha && proto != Proto::Tcp {
        return Err("--with-ganesha needs --proto tcp: Debian's nfs-ganesha 4.3 has no NFS/RDMA transport (docs/bench/README.md, \"nfs-ganesha in the lab guest\")".into());
    }
    let lab = match lab_dir {
        Some(d) => Lab::open_at(d),
        None => Lab::open(),
    }
    .map_err(|e| e.to_string())?;
    let name = match fabric {
        Fabric::Siw => "nfsbench-lab",
        Fabric::Rxe => "nfsbench-lab-rxe",
    };
    // A metadata phase of N files takes ~N round trips or more, each a few ms under
    // TCG (more on a loaded host): bound each step and the whole run accordingly.
    let files = metadata.as_ref().map_or(0, |(n, _)| *n);
    let step_timeout = 300 + u64::from(files) * 60 / 1000;
    let runs = u64::from(reps) + u64::from(profile);
    let n_servers = if ganesha { 3 } else { 2 };
    let run_timeout = 1500 + runs * n_servers * 5 * u64::from(files) * 25 / 1000;
    let mut script = GuestScript::inline(name, guest_script(fabric))
        .binary("nfsd", nfsd)
        .env("LAB_MIB", mib.to_string())
        .env("LAB_REPS", reps.to_string())
        .env("LAB_PROTO", proto.name())
        .env("LAB_VERS", nfs_version.name())
        .env("LAB_TCP_READ_DATA", tcp_read_data)
        .env("LAB_NFSD_ONLY", if nfsd_only { "--nfsd-only" } else { "" })
        .env("LAB_STEP_TIMEOUT", step_timeout.to_string());
    // The ib_write_bw ceiling is an RDMA figure: not for the TCP reads.
    if fabric == Fabric::Rxe && proto == Proto::Rdma {
        script = script.env("LAB_CEILING", "1");
    }
    if let Some((n, fs_meta)) = metadata {
        script = script
            .binary("fs-meta", fs_meta)
            .env("LAB_META", n.to_string());
    }
    if strace {
        script = script.env("LAB_STRACE", "1");
    }
    if writes {
        script = script.env("LAB_WRITES", "1");
    }
    if ganesha {
        for p in [GANESHA_BIN, GANESHA_FSAL_VFS] {
            if !std::path::Path::new(p).is_file() {
                return Err(format!("--with-ganesha needs {p} on the host: run lab/setup (it installs nfs-ganesha and nfs-ganesha-vfs)"));
            }
        }
        script = script
            .binary_with_libraries("ganesha.nfsd", GANESHA_BIN)
            .binary_with_libraries("libfsalvfs.so", GANESHA_FSAL_VFS)
            .env("LAB_GANESHA", "1");
    }
    if profile {
        script = script
            .binary_with_libraries("perf", host_perf()?)
            .env("LAB_PERF", "1");
    }
    let o = lab
        .guest(script)
        .run_name(name)
        .timeout(Duration::from_secs(run_timeout))
        .run()
        .map_err(|e| e.to_string())?;
    if !o.passed() {
        let hint = match o.failure().and_then(|f| f.step) {
            Some(s) if s == "perftest_present" => "ib_write_bw (perftest) is missing in the guest: run lab/setup (it installs perftest on the host and rebuilds the initramfs)\n",
            Some(s) if s.starts_with("ceiling_") => "the ib_write_bw ceiling failed: see ib_write_bw-*-{server,client}.txt in the share\n",
            _ => "",
        };
        return Err(format!("{hint}{}", o.report()));
    }
    let bytes = u64::from(mib) << 20;
    let ticks = 100.0; // USER_HZ in /proc/stat
    let servers: &[&str] = if ganesha {
        &["knfsd", "ours", "ganesha"]
    } else {
        &["knfsd", "ours"]
    };
    // The transfers recorded as `{prefix}run_*`, `{prefix}cpus_*`, `{prefix}ours_proc_*`.
    let transfers = |prefix: &str| -> Result<Vec<GuestRead>, String> {
        let mut runs = Vec::new();
        for rep in 0..reps {
            for &server in servers {
                let key = format!("{prefix}run_{server}_{rep}");
                let v = o.value(&key).ok_or(format!("no value {key}"))?;
                let (secs, jiffies) = secs_jiffies(&key, v)?;
                let cpu = jiffies / ticks;
                runs.push(GuestRead {
                    server: server.into(),
                    rep,
                    bytes,
                    secs,
                    mb_s: mb_per_s(bytes, secs),
                    guest_cpu_s: cpu,
                    guest_cpu_s_per_gib: cpu_per_gib(cpu, bytes),
                    per_cpu_busy_jiffies: ints(o.value(&format!("{prefix}cpus_{server}_{rep}"))),
                    ours_process_user_system_jiffies: ints(
                        o.value(&format!("{prefix}ours_proc_{server}_{rep}")),
                    ),
                });
            }
        }
        Ok(runs)
    };
    let reads = transfers("")?;
    let writes = if writes {
        Some(Writes::of(transfers("w")?, reps))
    } else {
        None
    };
    let pick = |s: &str, rep: u32| reads.iter().find(|r| r.server == s && r.rep == rep);
    let compared = Comparison::of(&reads, reps);
    let ceiling = match (fabric, proto) {
        (Fabric::Siw, _) | (_, Proto::Tcp) => None,
        (Fabric::Rxe, Proto::Rdma) => {
            let mut runs = Vec::new();
            for rep in 0..reps {
                let key = format!("ceiling_report_{rep}");
                let report = o.value(&key).ok_or(format!("no value {key}"))?;
                let (size, iters, mb_s) = parse_perftest_bw(report)?;
                // perftest times itself with the TSC; in the TCG guest it has printed
                // 0.00 for a run that moved every byte (once in 15 runs). Such a figure
                // is no measurement: kept in the report, out of the medians and ratios.
                let (mb_s, discarded) = if mb_s > 0.0 && mb_s.is_finite() {
                    (mb_s, None)
                } else {
                    (
                        f64::NAN,
                        Some(format!("perftest reported {mb_s} MB/s; not used")),
                    )
                };
                let key = format!("ceiling_run_{rep}");
                let v = o.value(&key).ok_or(format!("no value {key}"))?;
                let (secs, jiffies) = secs_jiffies(&key, v)?;
                let b = size * iters;
                runs.push(CeilingRun {
                    rep,
                    bytes: b,
                    mb_s,
                    report: report.trim().to_string(),
                    secs,
                    wall_mb_s: mb_per_s(b, secs),
                    guest_cpu_s_per_gib: cpu_per_gib(jiffies / ticks, b),
                    per_cpu_busy_jiffies: ints(o.value(&format!("cpus_ceiling_{rep}"))),
                    discarded,
                });
            }
            let ratio = |s: &str| {
                median(
                    &runs
                        .iter()
                        .filter_map(|c| Some(pick(s, c.rep)?.mb_s / c.mb_s))
                        .collect::<Vec<_>>(),
                )
            };
            Some(Ceiling {
                command: CEILING_COMMAND.replace("<mib>", &mib.to_string()),
                median_mb_s: median(&runs.iter().map(|c| c.mb_s).collect::<Vec<_>>()),
                ours_over_ceiling: ratio("ours"),
                knfsd_over_ceiling: ratio("knfsd"),
                runs,
            })
        }
    };
    let metadata = match metadata {
        None => None,
        Some((n, _)) => {
            // The measured repetitions, then (--profile) the one under perf, whose
            // records the guest labels "profile".
            let labels = (0..reps)
                .map(|rep| (rep, rep.to_string()))
                .chain(profile.then(|| (reps, "profile".to_string())));
            let (mut runs, mut profiled_runs) = (Vec::new(), Vec::new());
            for (rep, label) in labels {
                for &server in servers {
                    for phase in crate::labmeta::PHASES {
                        let k = format!("{server}_{label}_{phase}");
                        let get = |key: String| o.value(&key).ok_or(format!("no value {key}"));
                        let run = crate::labmeta::MetaRun::from_records(
                            server,
                            rep,
                            phase,
                            *n,
                            get(format!("meta_{k}"))?,
                            get(format!("metaops_before_{k}"))?,
                            get(format!("metaops_after_{k}"))?,
                        )?;
                        if rep < reps {
                            runs.push(run);
                        } else {
                            profiled_runs.push(run);
                        }
                    }
                }
            }
            let mut m = crate::labmeta::summarise(*n, reps, runs);
            m.profiled_runs = profiled_runs;
            Some(m)
        }
    };
    let guest = [
        "max_block_size",
        "knfsd_portlist",
        "rdma_links",
        "ours_rdma",
        "ours_tcp_read_data",
        "ours_nfsd_only",
        "mount_knfsd",
        "mount_ours",
        "mount_ganesha",
        "ganesha_version",
        "ganesha_rpcbind",
        "meta_mount_knfsd",
        "meta_mount_ours",
        "meta_mount_ganesha",
    ]
    .iter()
    .filter_map(|k| Some((k.to_string(), o.value(k)?.to_string())))
    .collect();
    Ok(LabReport {
        fabric,
        proto,
        nfs_version,
        guest,
        metadata,
        writes,
        median_mb_s: compared.median_mb_s,
        median_cpu_s_per_gib: compared.median_cpu_s_per_gib,
        ours_over_knfsd_throughput: compared.throughput,
        ours_over_knfsd_cpu_per_gib: compared.cpu_per_gib,
        ours_over_ganesha_throughput: compared.vs_ganesha.map(|r| r.0),
        ours_over_ganesha_cpu_per_gib: compared.vs_ganesha.map(|r| r.1),
        ceiling,
        reads,
        out_dir: o.out_dir.clone(),
    })
}

/// One line per read or write: server, repetition, seconds, MB/s, guest CPU per GiB.
fn runs_table(o: &mut String, runs: &[GuestRead]) {
    use std::fmt::Write as _;
    for x in runs {
        let _ = writeln!(
            o,
            "{:<7} {:>4} {:>8.2} {:>9.1} {:>13.2}",
            x.server, x.rep, x.secs, x.mb_s, x.guest_cpu_s_per_gib
        );
    }
}

/// The ours/ganesha line of the text report (reads, or `writes ` as `prefix`); the
/// goal (issue 30) is >= 1.3x.
fn vs_ganesha_line(prefix: &str, throughput: f64, cpu_per_gib: f64) -> String {
    format!(
        "{prefix}ours/ganesha (median over repetitions of the interleaved triples): throughput {throughput:.2}x (goal >= 1.3x: {}), guest CPU per GiB {cpu_per_gib:.2}x",
        if throughput >= 1.3 { "MET" } else { "NOT MET" }
    )
}

/// The lab report as text.
pub fn text(r: &LabReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let fabric = match r.fabric {
        Fabric::Siw => "siw",
        Fabric::Rxe => "rxe (soft-RoCE rxe0)",
    };
    let _ = writeln!(
        o,
        "Lab: guest kernel NFSv{} client over {fabric}, proto={}, reading the same file (dd bs=1M)",
        r.nfs_version.name(),
        r.proto.name()
    );
    for (k, v) in &r.guest {
        let _ = writeln!(o, "  {k}: {v}");
    }
    let _ = writeln!(
        o,
        "{:<7} {:>4} {:>8} {:>9} {:>13}",
        "server", "rep", "secs", "MB/s", "guest s/GiB"
    );
    runs_table(&mut o, &r.reads);
    for (s, m) in &r.median_mb_s {
        let _ = writeln!(o, "median {s}: {m:.1} MB/s");
    }
    let _ = writeln!(
        o,
        "ours/knfsd (median of interleaved pairs): throughput {:.2}x (goal >= 1.0x: {}), guest CPU per GiB {:.2}x",
        r.ours_over_knfsd_throughput,
        if r.ours_over_knfsd_throughput >= 1.0 { "MET" } else { "NOT MET" },
        r.ours_over_knfsd_cpu_per_gib
    );
    if let (Some(t), Some(c)) = (
        r.ours_over_ganesha_throughput,
        r.ours_over_ganesha_cpu_per_gib,
    ) {
        let _ = writeln!(o, "{}", vs_ganesha_line("", t, c));
    }
    if let Some(w) = &r.writes {
        let _ = writeln!(
            o,
            "writes (dd if=/dev/zero bs=1M conv=fsync, a new file each):"
        );
        runs_table(&mut o, &w.runs);
        for (s, m) in &w.median_mb_s {
            let _ = writeln!(o, "median write {s}: {m:.1} MB/s");
        }
        let _ = writeln!(
            o,
            "writes ours/knfsd (median of interleaved pairs): throughput {:.2}x, guest CPU per GiB {:.2}x",
            w.ours_over_knfsd_throughput, w.ours_over_knfsd_cpu_per_gib
        );
        if let (Some(t), Some(c)) = (
            w.ours_over_ganesha_throughput,
            w.ours_over_ganesha_cpu_per_gib,
        ) {
            let _ = writeln!(o, "{}", vs_ganesha_line("writes ", t, c));
        }
    }
    if let Some(c) = &r.ceiling {
        let _ = writeln!(
            o,
            "ceiling: {} (server and client in this guest, both on rxe0: device loopback)",
            c.command
        );
        let _ = writeln!(
            o,
            "{:<11} {:>4} {:>9} {:>8} {:>10} {:>13}",
            "", "rep", "MB/s", "secs", "wall MB/s", "guest s/GiB"
        );
        for x in &c.runs {
            let _ = writeln!(
                o,
                "{:<11} {:>4} {:>9.1} {:>8.2} {:>10.1} {:>13.2}{}",
                "ib_write_bw",
                x.rep,
                x.mb_s,
                x.secs,
                x.wall_mb_s,
                x.guest_cpu_s_per_gib,
                x.discarded
                    .as_deref()
                    .map(|d| format!("  ({d})"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(
            o,
            "median ib_write_bw: {:.1} MB/s (perftest's BW average; MB = 10^6 bytes)",
            c.median_mb_s
        );
        let _ = writeln!(
            o,
            "ours/ceiling {:.2}x, knfsd/ceiling {:.2}x (medians over repetitions of each read against that repetition's ib_write_bw)",
            c.ours_over_ceiling, c.knfsd_over_ceiling
        );
    }
    if let Some(m) = &r.metadata {
        o.push_str(&crate::labmeta::text(m));
    }
    let _ = writeln!(o, "lab run kept in {}", r.out_dir.display());
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_report_parses_in_mb_and_gb() {
        let r = " #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps] 1048576 128 95.12 93.40 0.000089 ";
        let (size, iters, mb) = parse_perftest_bw(r).unwrap();
        assert_eq!((size, iters), (1_048_576, 128));
        assert!((mb - 93.40 * 1.048576).abs() < 1e-9, "{mb}");
        let g = r.replace("MB/sec", "Gb/sec").replace("93.40", "0.80");
        assert!((parse_perftest_bw(&g).unwrap().2 - 100.0).abs() < 1e-9);
        assert!(parse_perftest_bw("Couldn't connect to 10.0.2.15:18515").is_err());
        assert!(parse_perftest_bw(&r.replace("MB/sec", "KB/sec")).is_err());
        assert!(parse_perftest_bw(
            " #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps] "
        )
        .is_err());
    }

    #[test]
    fn scripts_differ_only_where_the_fabric_does() {
        let siw = guest_script(Fabric::Siw);
        let rxe = guest_script(Fabric::Rxe);
        assert!(siw.starts_with(". /share/lib.sh\nstep rdma_up lab_rdma_up\n"));
        assert!(
            !siw.contains("rdma-provider"),
            "siw keeps nfsd's default provider"
        );
        assert!(rxe.contains("--rdma-provider verbs"));
        assert!(rxe.contains("step perftest_present"));
        assert!(!rxe.contains("lab_rdma_up"), "no siw device in the rxe run");
        for s in [&siw, &rxe] {
            assert!(s.contains("step ours_ready ours_ready"));
            assert!(s.contains("in_turn readone $i $SERVERS"));
            assert!(s.contains(
                "if [ \"$P\" = tcp ]; then KP=2049; OP=12049; else KP=20049; OP=30049; fi"
            ));
            assert!(s.contains("-o \"$(mount_opts $2 $3),rsize=1048576\""));
            assert!(s.contains("in_turn metaone $i $SERVERS"));
            assert!(s.contains("in_turn writeone $i $SERVERS"));
            assert!(s.contains("[ \"${LAB_GANESHA:-0}\" = 1 ] && SERVERS=\"knfsd ours ganesha\""));
            assert!(s.contains("step ganesha_up ganesha_up"));
            assert!(s.ends_with("exit 0\n"));
        }
    }

    /// The guest script's `ports` and `in_turn`, run by the host's sh: the order of
    /// the servers in each repetition.
    fn turns(servers: &str, reps: u32) -> Vec<String> {
        let script = guest_script(Fabric::Siw);
        let from = script.find("# ports SERVER").unwrap();
        let to = script.find("record knfsd_portlist").unwrap();
        let body = format!(
            "KP=2049; OP=12049\n{}\nshow() {{ printf '%s:%s:%s:%s ' \"$1\" \"$2\" \"$3\" \"$4\"; }}\n\
             i=0; while [ $i -lt {reps} ]; do in_turn show $i {servers}; echo; i=$((i + 1)); done\n",
            &script[from..to]
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &body])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    }

    #[test]
    fn servers_take_turns_going_first() {
        // Two servers alternate as they always have.
        assert_eq!(
            turns("knfsd ours", 3),
            [
                "knfsd:2049:20048:0 ours:12049:12048:0",
                "ours:12049:12048:1 knfsd:2049:20048:1",
                "knfsd:2049:20048:2 ours:12049:12048:2",
            ]
        );
        // Three rotate: each goes first once in three repetitions.
        assert_eq!(
            turns("knfsd ours ganesha", 4),
            [
                "knfsd:2049:20048:0 ours:12049:12048:0 ganesha:22049:22048:0",
                "ours:12049:12048:1 ganesha:22049:22048:1 knfsd:2049:20048:1",
                "ganesha:22049:22048:2 knfsd:2049:20048:2 ours:12049:12048:2",
                "knfsd:2049:20048:3 ours:12049:12048:3 ganesha:22049:22048:3",
            ]
        );
    }

    fn run_of(server: &str, rep: u32, mb_s: f64, cpu: f64) -> GuestRead {
        GuestRead {
            server: server.into(),
            rep,
            bytes: 1 << 20,
            secs: 1.0,
            mb_s,
            guest_cpu_s: cpu,
            guest_cpu_s_per_gib: cpu,
            per_cpu_busy_jiffies: vec![],
            ours_process_user_system_jiffies: vec![],
        }
    }

    #[test]
    fn comparison_adds_ganesha_and_keeps_ours_over_knfsd() {
        let pairs = vec![
            run_of("knfsd", 0, 10.0, 4.0),
            run_of("ours", 0, 20.0, 2.0),
            run_of("ours", 1, 30.0, 3.0),
            run_of("knfsd", 1, 10.0, 6.0),
            run_of("knfsd", 2, 40.0, 1.0),
            run_of("ours", 2, 20.0, 2.0),
        ];
        let c = Comparison::of(&pairs, 3);
        assert_eq!((c.throughput, c.cpu_per_gib), (2.0, 0.5));
        assert!(c.vs_ganesha.is_none());
        assert_eq!(c.median_mb_s.len(), 2);
        let mut triples = pairs.clone();
        triples.extend([
            run_of("ganesha", 0, 10.0, 1.0),
            run_of("ganesha", 1, 20.0, 3.0),
            run_of("ganesha", 2, 5.0, 4.0),
        ]);
        let t = Comparison::of(&triples, 3);
        // ours/knfsd exactly as without ganesha.
        assert_eq!((t.throughput, t.cpu_per_gib), (c.throughput, c.cpu_per_gib));
        // Per repetition ours/ganesha: 2.0, 1.5, 4.0 and CPU 2.0, 1.0, 0.5.
        assert_eq!(t.vs_ganesha, Some((2.0, 1.0)));
        assert_eq!(t.median_mb_s[2], ("ganesha".to_string(), 10.0));
        let w = Writes::of(triples, 3);
        assert_eq!(w.ours_over_ganesha_throughput, Some(2.0));
        assert_eq!(w.ours_over_knfsd_throughput, 2.0);
        let j = serde_json::to_value(Writes::of(pairs, 3)).unwrap();
        assert!(j.get("ours_over_ganesha_throughput").is_none());
    }
}
