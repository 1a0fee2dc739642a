//! The run: prepares the test file, starts the server child, mounts once per
//! transport, then runs the READ grid, the WRITEs, the small-RPC rates and the peer
//! comparison, with a progress bar.
//!
//! Interleaving: within a repetition every grid cell runs once per transport, back
//! to back, with the transport order alternating from cell to cell and repetition to
//! repetition, so a ratio RDMA/TCP pairs runs a second apart on this shared machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use nfsclient::nfs3::NfsFh3;
use nfsclient::{Mount, MountOptions, TransportKind};
use serde::Serialize;

use crate::peers::{PeerLab, PeerServer};
use crate::report::{RpcRate, Transfer};
use crate::server::{ServerChild, SpawnOptions};
use crate::workload::{self, Budget, SmallRpc};

/// Errors of a run: setup failures and client errors, reported as text.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Directory for the export and scratch files (created; the test file is kept).
    pub dir: PathBuf,
    /// Size of the READ test file in bytes.
    pub file_size: u64,
    /// Transports to measure.
    #[serde(serialize_with = "ser_transports")]
    pub transports: Vec<TransportKind>,
    /// READ sizes.
    pub read_sizes: Vec<u32>,
    /// READs in flight.
    pub depths: Vec<usize>,
    /// Repetitions of everything.
    pub reps: u32,
    /// Time cap per READ run (it also stops at the end of the file).
    pub point_secs: f64,
    /// WRITE sizes (empty: no WRITE runs).
    pub write_sizes: Vec<u32>,
    /// WRITEs in flight.
    pub write_depth: usize,
    /// Bytes per WRITE run at most.
    pub write_bytes: u64,
    /// Time cap per WRITE run (before the final COMMIT).
    pub write_secs: f64,
    /// Calls in flight for the small-RPC rates (empty: none).
    pub rpc_inflight: Vec<usize>,
    /// Seconds per small-RPC run.
    pub rpc_secs: f64,
    /// Run the peer comparison (nfs-cat, ganesha).
    pub peers: bool,
    /// Our server's `--tcp-read-data`: sendfile or copy.
    pub tcp_read_data: String,
}

fn ser_transports<S: serde::Serializer>(t: &[TransportKind], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(t.iter().map(|k| k.to_string()))
}

/// What a run produced (before the report is assembled).
#[derive(Debug, Default)]
pub struct Results {
    /// READ runs.
    pub reads: Vec<Transfer>,
    /// WRITE runs.
    pub writes: Vec<Transfer>,
    /// Small-RPC runs.
    pub rpc_rates: Vec<RpcRate>,
    /// Peer runs.
    pub peers: Vec<Transfer>,
    /// What did not run, and why.
    pub notes: Vec<String>,
}

/// The test file's name inside the export.
pub const TEST_FILE: &str = "nfsbench-read.bin";
const PROBE_FILE: &str = "nfsbench-probe.txt";

impl Plan {
    /// Runs to perform, for the progress bar.
    fn run_count(&self, peers: bool) -> u64 {
        let t = self.transports.len() as u64;
        let reps = u64::from(self.reps);
        let reads = (self.read_sizes.len() * self.depths.len()) as u64 * t;
        let writes = self.write_sizes.len() as u64 * t;
        let rpc = 2 * self.rpc_inflight.len() as u64 * t;
        let peer = if peers { 3 } else { 1 };
        reps * (reads + writes + rpc + peer)
    }

    fn export(&self) -> PathBuf {
        self.dir.join("export")
    }
}

/// Writes the test file (a pattern, not a sparse file) unless it already has the
/// size, then reads it once so it is in the page cache.
pub fn prepare_file(path: &Path, size: u64) -> std::io::Result<()> {
    use std::io::{Read, Write};
    if std::fs::metadata(path).map(|m| m.len()).ok() != Some(size) {
        let chunk = workload::pattern(8 << 20);
        let mut f = std::fs::File::create(path)?;
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
    }
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 8 << 20];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

fn bar(total: u64) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

/// The transport order for the `i`-th interleaved group: alternate to cancel drift.
fn order(transports: &[TransportKind], i: usize) -> Vec<TransportKind> {
    let mut v = transports.to_vec();
    if i % 2 == 1 {
        v.reverse();
    }
    v
}

/// Runs the whole plan. `quiet` hides the progress bar.
pub fn run(plan: &Plan, quiet: bool) -> Result<Results, BenchError> {
    let export = plan.export();
    std::fs::create_dir_all(&export)?;
    let export = export.canonicalize()?;
    prepare_file(&export.join(TEST_FILE), plan.file_size)?;
    std::fs::write(export.join(PROBE_FILE), b"nfsbench\n")?;

    let mut results = Results::default();
    let peers_why_not = if plan.peers {
        crate::peers::unavailable()
    } else {
        Some("peer comparison not requested".into())
    };
    let pb = bar(plan.run_count(peers_why_not.is_none()));
    if quiet {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }

    let want_rdma = plan.transports.contains(&TransportKind::Rdma);
    let server = ServerChild::spawn(&SpawnOptions {
        export: &export,
        rdma: want_rdma,
        ports: None,
        netns: None,
        state_dir: None,
        kernel_handles: "auto",
        tcp_read_data: &plan.tcp_read_data,
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(our_runs(plan, &export, &server, &pb, &mut results))?;
    drop(rt);
    server.stop();

    // The ceiling, in the same session: one loopback TCP stream, reps times.
    for rep in 0..plan.reps {
        pb.set_message(format!("one loopback TCP stream rep {rep}"));
        let s = crate::baseline::tcp_stream(plan.file_size)?;
        results
            .peers
            .push(Transfer::new("tcp-stream", 0, 0, rep, &s));
        pb.inc(1);
    }

    match peers_why_not {
        None => peer_runs(plan, &export, &pb, &mut results)?,
        Some(why) => results.notes.push(format!("peers skipped: {why}")),
    }
    pb.finish_and_clear();
    Ok(results)
}

async fn mount(
    server: &ServerChild,
    export: &Path,
    kind: TransportKind,
) -> Result<Mount, BenchError> {
    let nfs_port = match kind {
        TransportKind::Tcp => server.nfs.port(),
        TransportKind::Rdma => server.rdma.ok_or("the server child serves no RDMA")?.port(),
    };
    let opts = MountOptions {
        transport: kind,
        nfs_port: Some(nfs_port),
        mount_port: Some(server.mount.port()),
        timeout: Duration::from_secs(60),
        rsize: Some(1 << 20),
        wsize: Some(1 << 20),
        ..MountOptions::default()
    };
    let export = export.to_str().ok_or("export path is not UTF-8")?;
    Ok(Mount::mount("127.0.0.1", export, &opts).await?)
}

async fn our_runs(
    plan: &Plan,
    export: &Path,
    server: &ServerChild,
    pb: &ProgressBar,
    results: &mut Results,
) -> Result<(), BenchError> {
    let pid = Some(server.pid());
    let mut mounts: Vec<(TransportKind, Mount, NfsFh3)> = Vec::new();
    for &kind in &plan.transports {
        let m = mount(server, export, kind).await?;
        let (fh, _) = m.lookup_path(TEST_FILE).await?;
        // Warm-up: connection set-up, first registrations, server threads.
        let warm = Budget {
            bytes: plan.file_size.min(64 << 20),
            time: Duration::from_secs(2),
        };
        workload::seq_read(&m, &fh, 1 << 20, 4, warm, pid).await?;
        mounts.push((kind, m, fh));
    }
    let by_kind = |k: TransportKind| mounts.iter().find(|(kk, _, _)| *kk == k);
    let read_budget = Budget {
        bytes: plan.file_size,
        time: Duration::from_secs_f64(plan.point_secs),
    };
    let mut group = 0usize;
    for rep in 0..plan.reps {
        for &rsize in &plan.read_sizes {
            for &depth in &plan.depths {
                for kind in order(&plan.transports, group + rep as usize) {
                    let Some((_, m, fh)) = by_kind(kind) else {
                        continue;
                    };
                    pb.set_message(format!(
                        "read {kind} {} x{depth} rep {rep}",
                        crate::stats::size_label(rsize.into())
                    ));
                    let s = workload::seq_read(m, fh, rsize, depth, read_budget, pid).await?;
                    results
                        .reads
                        .push(Transfer::new(&kind.to_string(), rsize, depth, rep, &s));
                    pb.inc(1);
                }
                group += 1;
            }
        }
        for &wsize in &plan.write_sizes {
            for kind in order(&plan.transports, group + rep as usize) {
                let Some((_, m, _)) = by_kind(kind) else {
                    continue;
                };
                pb.set_message(format!(
                    "write {kind} {} rep {rep}",
                    crate::stats::size_label(wsize.into())
                ));
                let name = format!("nfsbench-write-{kind}.bin");
                let fh = m.create_file(&name, 0o644, false).await?;
                let budget = Budget {
                    bytes: plan.write_bytes,
                    time: Duration::from_secs_f64(plan.write_secs),
                };
                let s = workload::seq_write(m, &fh, wsize, plan.write_depth, budget, pid).await?;
                results.writes.push(Transfer::new(
                    &kind.to_string(),
                    wsize,
                    plan.write_depth,
                    rep,
                    &s,
                ));
                m.remove_path(&name, false).await?;
                pb.inc(1);
            }
            group += 1;
        }
        for proc in [SmallRpc::Null, SmallRpc::Getattr] {
            for &n in &plan.rpc_inflight {
                for kind in order(&plan.transports, group + rep as usize) {
                    let Some((_, m, fh)) = by_kind(kind) else {
                        continue;
                    };
                    pb.set_message(format!("{} {kind} x{n} rep {rep}", proc.name()));
                    let t = Duration::from_secs_f64(plan.rpc_secs);
                    let s = workload::rpc_rate(m, fh, proc, n, t, pid).await?;
                    results.rpc_rates.push(RpcRate::new(
                        &kind.to_string(),
                        proc.name(),
                        n,
                        rep,
                        &s,
                    ));
                    pb.inc(1);
                }
                group += 1;
            }
        }
    }
    Ok(())
}

fn peer_runs(
    plan: &Plan,
    export: &Path,
    pb: &ProgressBar,
    results: &mut Results,
) -> Result<(), BenchError> {
    pb.set_message("peers: starting rpcbind, ganesha, our server in a network namespace");
    let work = plan.dir.join("peers");
    std::fs::create_dir_all(&work)?;
    let lab = match PeerLab::start(export, PROBE_FILE, &work, &plan.tcp_read_data) {
        Ok(l) => l,
        Err(e) => {
            results.notes.push(format!("peers skipped: {e}"));
            return Ok(());
        }
    };
    // Warm-up of both (first opens, thread pools).
    for s in [PeerServer::Ganesha, PeerServer::Ours] {
        lab.nfs_cat(s, TEST_FILE)?;
    }
    for rep in 0..plan.reps {
        let mut servers = [PeerServer::Ours, PeerServer::Ganesha];
        if rep % 2 == 1 {
            servers.reverse();
        }
        for s in servers {
            pb.set_message(format!("nfs-cat from {} rep {rep}", s.name()));
            let sample = lab.nfs_cat(s, TEST_FILE)?;
            results
                .peers
                .push(Transfer::new(s.name(), 0, 0, rep, &sample));
            pb.inc(1);
        }
    }
    results.notes.push(format!(
        "peers: nfs-cat (libnfs) in network namespace with loopback only; ganesha log {}",
        lab.ganesha_log().display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_alternates() {
        let t = [TransportKind::Tcp, TransportKind::Rdma];
        assert_eq!(order(&t, 0), t.to_vec());
        assert_eq!(order(&t, 1), vec![TransportKind::Rdma, TransportKind::Tcp]);
    }
}
