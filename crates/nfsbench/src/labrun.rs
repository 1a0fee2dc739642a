//! The lab variant: in the qemu guest (`crates/lab`, `lab/`), the Linux kernel NFSv3
//! client (xprtrdma over soft-iWARP) reads the same file from the guest's knfsd
//! (over siw) and from our `nfsd` running in the guest on its own userspace iWARP,
//! interleaved, `proto=rdma` both; reports throughput, guest CPU and ours/knfsd.
//!
//! Both servers export the same tmpfs `/export` (so both read from memory). knfsd is
//! started as `lab_knfsd_up` does, but with `/proc/fs/nfsd/max_block_size` raised to
//! 1 MiB before `rpc.nfsd`, so it offers the same 1 MiB `rtmax` as ours (otherwise it
//! caps READs by guest memory). Each read: mount with `rsize=1048576`, drop caches,
//! `dd if=file of=/dev/null bs=1M`, unmount. Guest CPU is the busy time of
//! `/proc/stat` (user + nice + system + irq + softirq) over the `dd`, in jiffies; it
//! covers the client, the server and everything else in the guest.
//!
//! The guest runs under TCG (no KVM here): absolute numbers are far below the host's
//! and only the ratio means something.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lab::{GuestScript, Lab};
use serde::Serialize;

use crate::stats::{cpu_per_gib, mb_per_s, median};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
# lab_knfsd_up, with max_block_size raised before rpc.nfsd starts.
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
  lab_wait_listen 20049 10
}
step knfsd_up knfsd_up
record max_block_size "$(cat /proc/fs/nfsd/max_block_size)"
step make_file dd if=/dev/urandom of=/export/big bs=1M count="$LAB_MIB"
lab_run_binary nfsd --bind 10.0.2.15 --nfs-port 12049 --mount-port 12048 --rdma-port 30049 --rpcbind off --squash none /export
step ours_listens lab_wait_listen 30049 60
M=/mnt/b
mkdir -p $M
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
readone() {
  step "mount_$1_$4" mount.nfs 10.0.2.15:/export $M -n -o "vers=3,proto=rdma,port=$2,mountproto=tcp,mountport=$3,nolock,rsize=1048576"
  [ "$4" = 0 ] && record "mount_$1" "$(grep " $M " /proc/mounts)"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  c0=$(busy)
  t0=$(cut -d" " -f1 /proc/uptime)
  step "read_$1_$4" dd if=$M/big of=/dev/null bs=1M
  t1=$(cut -d" " -f1 /proc/uptime)
  c1=$(busy)
  record "run_$1_$4" "$(echo "$t1 $t0 $c1 $c0" | awk '{printf "%.2f %d", $1-$2, $3-$4}')"
  step "umount_$1_$4" umount $M
}
i=0
while [ $i -lt "$LAB_REPS" ]; do
  if [ $((i % 2)) = 0 ]; then
    readone knfsd 20049 20048 $i
    readone ours 30049 12048 $i
  else
    readone ours 30049 12048 $i
    readone knfsd 20049 20048 $i
  fi
  i=$((i + 1))
done
exit 0
"#;

/// One `dd` read in the guest.
#[derive(Debug, Clone, Serialize)]
pub struct GuestRead {
    /// `knfsd` or `ours`.
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
}

/// The lab variant's report.
#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
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
    /// Where the lab kept the run.
    pub out_dir: PathBuf,
}

/// Boots the guest and runs the comparison; `nfsd` is the host path of our `nfsd`
/// binary (shipped into the guest), `lab_dir` the `lab/` directory (with its cache).
pub fn run(nfsd: &Path, lab_dir: Option<&Path>, mib: u32, reps: u32) -> Result<LabReport, String> {
    let lab = match lab_dir {
        Some(d) => Lab::open_at(d),
        None => Lab::open(),
    }
    .map_err(|e| e.to_string())?;
    let script = GuestScript::inline("nfsbench-lab", GUEST)
        .binary("nfsd", nfsd)
        .env("LAB_MIB", mib.to_string())
        .env("LAB_REPS", reps.to_string())
        .env("LAB_STEP_TIMEOUT", "300");
    let o = lab
        .guest(script)
        .run_name("nfsbench-lab")
        .timeout(Duration::from_secs(1500))
        .run()
        .map_err(|e| e.to_string())?;
    if !o.passed() {
        return Err(o.report());
    }
    let bytes = u64::from(mib) << 20;
    let ticks = 100.0; // USER_HZ in /proc/stat
    let mut reads = Vec::new();
    for rep in 0..reps {
        for server in ["knfsd", "ours"] {
            let key = format!("run_{server}_{rep}");
            let v = o.value(&key).ok_or(format!("no value {key}"))?;
            let mut it = v.split_whitespace();
            let secs: f64 = it
                .next()
                .and_then(|x| x.parse().ok())
                .ok_or(format!("{key}: {v}"))?;
            let jiffies: f64 = it
                .next()
                .and_then(|x| x.parse().ok())
                .ok_or(format!("{key}: {v}"))?;
            let cpu = jiffies / ticks;
            reads.push(GuestRead {
                server: server.into(),
                rep,
                bytes,
                secs,
                mb_s: mb_per_s(bytes, secs),
                guest_cpu_s: cpu,
                guest_cpu_s_per_gib: cpu_per_gib(cpu, bytes),
            });
        }
    }
    let pick = |s: &str, rep: u32| reads.iter().find(|r| r.server == s && r.rep == rep);
    let pairs: Vec<(&GuestRead, &GuestRead)> = (0..reps)
        .filter_map(|rep| Some((pick("ours", rep)?, pick("knfsd", rep)?)))
        .collect();
    let tr: Vec<f64> = pairs.iter().map(|(a, b)| a.mb_s / b.mb_s).collect();
    let cr: Vec<f64> = pairs
        .iter()
        .map(|(a, b)| a.guest_cpu_s_per_gib / b.guest_cpu_s_per_gib)
        .collect();
    let med = |s: &str| {
        median(
            &reads
                .iter()
                .filter(|r| r.server == s)
                .map(|r| r.mb_s)
                .collect::<Vec<_>>(),
        )
    };
    let guest = ["max_block_size", "mount_knfsd", "mount_ours"]
        .iter()
        .filter_map(|k| Some((k.to_string(), o.value(k)?.to_string())))
        .collect();
    Ok(LabReport {
        guest,
        median_mb_s: vec![("knfsd".into(), med("knfsd")), ("ours".into(), med("ours"))],
        ours_over_knfsd_throughput: median(&tr),
        ours_over_knfsd_cpu_per_gib: median(&cr),
        reads,
        out_dir: o.out_dir.clone(),
    })
}

/// The lab report as text.
pub fn text(r: &LabReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Lab: guest kernel NFSv3 client over siw, proto=rdma, reading the same file (dd bs=1M)"
    );
    for (k, v) in &r.guest {
        let _ = writeln!(o, "  {k}: {v}");
    }
    let _ = writeln!(
        o,
        "{:<6} {:>4} {:>8} {:>9} {:>13}",
        "server", "rep", "secs", "MB/s", "guest s/GiB"
    );
    for x in &r.reads {
        let _ = writeln!(
            o,
            "{:<6} {:>4} {:>8.2} {:>9.1} {:>13.2}",
            x.server, x.rep, x.secs, x.mb_s, x.guest_cpu_s_per_gib
        );
    }
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
    let _ = writeln!(o, "lab run kept in {}", r.out_dir.display());
    o
}
