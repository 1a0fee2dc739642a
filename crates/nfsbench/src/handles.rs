//! `nfsbench handles`: does resolving a file handle after a server restart cost the
//! same however large the export is? (Issue 15, item 5.)
//!
//! For each export size N: builds (or reuses) an export of N empty files, 1,000 per
//! directory; starts the server child (`nfsbench serve`, nfsd as the binary composes
//! it) with a state directory, so the handle key survives; LOOKUPs a sample of files
//! spread over the whole export and times GETATTR of each (warm: the server knows
//! them); stops the server, optionally drops the kernel's caches, starts it again and
//! times GETATTR of the same handles, one call in flight, the first call on its own
//! (before kernel handles, that call walked the whole export). The report gives per
//! size the first call, the median, p99 and maximum, and the ratio of the largest
//! export's figures to the smallest's: about 1 when the time per call does not depend
//! on the export size.
//!
//! `--kernel-handles no-open` or `off` measures the fallbacks (a server without
//! CAP_DAC_READ_SEARCH; a file system without handles), which search the export.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nfsclient::nfs3::NfsFh3;
use nfsclient::{Mount, MountOptions, TransportKind};
use serde::Serialize;

use crate::grid::BenchError;
use crate::server::{ServerChild, SpawnOptions};
use crate::stats::median;

/// Files per directory of the generated exports.
pub const PER_DIR: u64 = 1000;

/// What to measure.
#[derive(Debug, Clone)]
pub struct HandlesPlan {
    /// Scratch directory: exports `DIR/export-N`, the state directory `DIR/state`.
    pub dir: PathBuf,
    /// Export sizes in files.
    pub sizes: Vec<u64>,
    /// Handles taken and timed per size.
    pub sample: usize,
    /// `serve --kernel-handles`.
    pub kernel_handles: String,
    /// Drop the kernel's page, dentry and inode caches before each restart (root).
    pub drop_caches: bool,
    /// Repetitions: the sizes in turn, in alternating order; each figure reported is
    /// the median over the repetitions (a shared machine's noise).
    pub reps: u32,
}

/// Timings of one export size, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Files in the export.
    pub files: u64,
    /// Handles timed.
    pub handles: usize,
    /// GETATTR before the restart: median.
    pub warm_median_us: f64,
    /// The first GETATTR after the restart.
    pub first_us: f64,
    /// After the restart: median, 99th percentile, maximum.
    pub median_us: f64,
    /// 99th percentile after the restart.
    pub p99_us: f64,
    /// Slowest call after the restart.
    pub max_us: f64,
}

/// Runs the plan: per size, the median of each figure over the repetitions.
pub fn run(plan: &HandlesPlan) -> Result<Vec<SizeResult>, BenchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut runs: Vec<Vec<SizeResult>> = vec![Vec::new(); plan.sizes.len()];
    for rep in 0..plan.reps.max(1) {
        let mut order: Vec<usize> = (0..plan.sizes.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            runs[i].push(run_size(plan, &rt, plan.sizes[i])?);
        }
    }
    Ok(runs
        .into_iter()
        .map(|rs| {
            let med = |f: fn(&SizeResult) -> f64| median(&rs.iter().map(f).collect::<Vec<_>>());
            SizeResult {
                files: rs[0].files,
                handles: rs[0].handles,
                warm_median_us: med(|r| r.warm_median_us),
                first_us: med(|r| r.first_us),
                median_us: med(|r| r.median_us),
                p99_us: med(|r| r.p99_us),
                max_us: med(|r| r.max_us),
            }
        })
        .collect())
}

/// One size once: handles, warm GETATTRs, restart, GETATTRs.
fn run_size(
    plan: &HandlesPlan,
    rt: &tokio::runtime::Runtime,
    n: u64,
) -> Result<SizeResult, BenchError> {
    let state = plan.dir.join("state");
    std::fs::create_dir_all(&state)?;
    {
        let export = build_export(&plan.dir, n)?;
        let spawn = SpawnOptions {
            export: &export,
            rdma: false,
            ports: None,
            netns: None,
            state_dir: Some(&state),
            kernel_handles: &plan.kernel_handles,
            tcp_read_data: "sendfile",
        };
        let server = ServerChild::spawn(&spawn)?;
        let (handles, warm) = rt.block_on(async {
            let m = mount(&server, &export).await?;
            let handles = take_handles(&m, n, plan.sample).await?;
            let warm = time_getattrs(&m, &handles).await?;
            Ok::<_, BenchError>((handles, warm))
        })?;
        server.stop();
        if plan.drop_caches {
            rustix::fs::sync();
            std::fs::write("/proc/sys/vm/drop_caches", "3\n")
                .map_err(|e| format!("--drop-caches: /proc/sys/vm/drop_caches: {e}"))?;
        }
        let server = ServerChild::spawn(&spawn)?;
        let after = rt.block_on(async {
            let m = mount(&server, &export).await?;
            time_getattrs(&m, &handles).await
        })?;
        server.stop();
        let mut sorted: Vec<f64> = after.iter().map(us).collect();
        sorted.sort_by(f64::total_cmp);
        let p99 = sorted[((sorted.len() * 99) / 100).min(sorted.len() - 1)];
        Ok(SizeResult {
            files: n,
            handles: handles.len(),
            warm_median_us: median(&warm.iter().map(us).collect::<Vec<_>>()),
            first_us: us(&after[0]),
            median_us: median(&sorted),
            p99_us: p99,
            max_us: *sorted.last().unwrap_or(&0.0),
        })
    }
}

fn us(d: &Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `DIR/export-N` with N empty files `dNNNNN/fNNNNNNNN`, 1,000 per directory; made
/// once (a marker beside it says it is complete).
fn build_export(dir: &Path, n: u64) -> Result<PathBuf, BenchError> {
    let export = dir.join(format!("export-{n}"));
    let done = dir.join(format!("export-{n}.complete"));
    if done.exists() {
        return Ok(export);
    }
    let _ = std::fs::remove_dir_all(&export);
    let started = Instant::now();
    for i in 0..n {
        let d = export.join(format!("d{:05}", i / PER_DIR));
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::File::create(d.join(format!("f{i:08}")))?;
    }
    std::fs::write(&done, b"")?;
    eprintln!(
        "nfsbench handles: made {} files in {:.1} s",
        n,
        started.elapsed().as_secs_f64()
    );
    Ok(export)
}

async fn mount(server: &ServerChild, export: &Path) -> Result<Mount, BenchError> {
    let opts = MountOptions {
        transport: TransportKind::Tcp,
        nfs_port: Some(server.nfs.port()),
        mount_port: Some(server.mount.port()),
        timeout: Duration::from_secs(120),
        ..MountOptions::default()
    };
    let export = export.to_str().ok_or("export path is not UTF-8")?;
    Ok(Mount::mount("127.0.0.1", export, &opts).await?)
}

/// LOOKUPs `sample` files spread evenly over the export, the last one included.
async fn take_handles(m: &Mount, n: u64, sample: usize) -> Result<Vec<NfsFh3>, BenchError> {
    let sample = (sample as u64).clamp(1, n);
    let mut handles = Vec::new();
    let mut dir: Option<(u64, NfsFh3)> = None;
    for k in 0..sample {
        let i = if sample == 1 {
            n - 1
        } else {
            k * (n - 1) / (sample - 1)
        };
        let d = i / PER_DIR;
        if dir.as_ref().map(|(at, _)| *at) != Some(d) {
            let fh = m.nfs().lookup(m.root(), format!("d{d:05}")).await?.object;
            dir = Some((d, fh));
        }
        let (_, dfh) = dir.as_ref().ok_or("no directory")?;
        handles.push(m.nfs().lookup(dfh, format!("f{i:08}")).await?.object);
    }
    Ok(handles)
}

/// GETATTR of each handle in turn, one in flight; each call's time.
async fn time_getattrs(m: &Mount, handles: &[NfsFh3]) -> Result<Vec<Duration>, BenchError> {
    let mut times = Vec::with_capacity(handles.len());
    for fh in handles {
        let t = Instant::now();
        m.nfs().getattr(fh).await?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// The report as text: one line per size, then the ratios of the largest export's
/// figures to the smallest's.
pub fn text(plan: &HandlesPlan, results: &[SizeResult]) -> String {
    let mut s = format!(
        "GETATTR of handles taken before a server restart (kernel handles: {}, caches {}dropped; \
         medians over {} repetitions)\n\
         {:>10} {:>8} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
        plan.kernel_handles,
        if plan.drop_caches { "" } else { "not " },
        plan.reps.max(1),
        "files",
        "handles",
        "warm med us",
        "first us",
        "median us",
        "p99 us",
        "max us"
    );
    for r in results {
        s += &format!(
            "{:>10} {:>8} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>12.1}\n",
            r.files, r.handles, r.warm_median_us, r.first_us, r.median_us, r.p99_us, r.max_us
        );
    }
    if let (Some(small), Some(large)) = (results.first(), results.last()) {
        if results.len() > 1 {
            s += &format!(
                "ratio {} / {} files: first call {:.2}, median {:.2}, p99 {:.2}\n",
                large.files,
                small.files,
                large.first_us / small.first_us,
                large.median_us / small.median_us,
                large.p99_us / small.p99_us
            );
        }
    }
    s
}
