//! `nfsbench`: NFSv3 READ/WRITE throughput and CPU over TCP and RPC-over-RDMA (iWARP),
//! small-RPC rates, and a peer comparison with nfs-ganesha (see the crate docs).
//!
//! ```text
//! nfsbench run --out docs/bench                 # the full default grid (a few minutes)
//! nfsbench run --file-size 16M --read-sizes 64K --depths 4 --reps 1 --out /tmp/b
//! nfsbench serve --export DIR --rdma-port 0      # the server child (used by `run`)
//! nfsbench lab --out docs/bench                 # the qemu-guest variant (lab/setup first)
//! nfsbench lab --fabric rxe --out docs/bench    # the same over soft-RoCE, with ib_write_bw
//! nfsbench lab --proto tcp --metadata 10000 --out docs/bench  # proto=tcp reads + metadata runs
//! nfsbench lab --nfs-version 4.1 --writes --out docs/bench  # vers=4.1 mounts, reads and writes
//! nfsbench lab --proto tcp --with-ganesha --writes --out docs/bench  # nfs-ganesha as a third server
//! nfsbench handles --sizes 10000,1000000 --out docs/bench   # GETATTR after a restart vs export size
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use nfsbench::grid::{self, Plan};
use nfsbench::machine::{utc_now, Machine};
use nfsbench::report::{tables, Report, Summary};
use nfsbench::serve::{self, ServeOptions};
use nfsclient::TransportKind;

/// The seed paper's NFS-over-RDMA experiment on our stack.
#[derive(Debug, Parser)]
#[command(name = "nfsbench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the benchmark and write the report (JSON, tables, SVG charts).
    Run(RunArgs),
    /// Serve an export over NFSv3 on TCP (and RDMA): the server child of `run`.
    Serve(ServeArgs),
    /// The qemu-lab variant: the guest kernel client reads from knfsd and from our
    /// nfsd in the guest over siw (or rxe, with an ib_write_bw ceiling); needs
    /// `lab/setup` and root.
    Lab(LabArgs),
    /// GETATTR of handles taken before a server restart, for exports of different
    /// sizes: is the time per call independent of the export size?
    Handles(HandlesArgs),
}

#[derive(Debug, Args)]
struct HandlesArgs {
    /// Scratch directory: the exports (DIR/export-N, kept for the next run) and the
    /// server's state directory.
    #[arg(long, default_value = "/tmp/nfsbench-handles")]
    dir: PathBuf,
    /// Export sizes in files, comma-separated (e.g. 10000,1000000).
    #[arg(long, default_value = "2000,20000", value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Handles taken and timed per export.
    #[arg(long, default_value_t = 200)]
    sample: usize,
    /// As `serve --kernel-handles`: auto, no-open (the fallback of a server that is
    /// not root), off (inode handles).
    #[arg(long, value_enum, default_value_t = HandlesArg::Auto)]
    kernel_handles: HandlesArg,
    /// Drop the kernel's caches before each restart (root).
    #[arg(long)]
    drop_caches: bool,
    /// Repetitions (sizes in turn, alternating order); figures are medians over them.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Output directory for handles.txt and handles.json.
    #[arg(long, default_value = "nfsbench-report")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct LabArgs {
    /// Our nfsd binary to ship into the guest (default: `nfsd` next to this binary;
    /// build it with `cargo build --release -p nfsd`).
    #[arg(long)]
    nfsd: Option<PathBuf>,
    /// The lab directory (`lab/`, with its cache); default: $LAB_DIR or the checkout's.
    #[arg(long)]
    lab_dir: Option<PathBuf>,
    /// Size of the file read in the guest, in MiB.
    #[arg(long, default_value_t = 64)]
    mib: u32,
    /// Repetitions (interleaved knfsd / ours, and ganesha with --with-ganesha).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// The guest's RDMA device: siw (soft-iWARP siw0) or rxe (soft-RoCE rxe0, our
    /// nfsd on `--rdma-provider verbs`, plus `ib_write_bw` over rxe0 as the ceiling
    /// after each pair of reads).
    #[arg(long, value_enum, default_value_t = nfsbench::labrun::Fabric::Siw)]
    fabric: nfsbench::labrun::Fabric,
    /// The kernel client's transport: rdma (proto=rdma over the fabric; knfsd on
    /// 20049, ours on 30049) or tcp (knfsd on 2049, ours on 12049).
    #[arg(long, value_enum, default_value_t = nfsbench::labrun::Proto::Rdma)]
    proto: nfsbench::labrun::Proto,
    /// The NFS version both servers are mounted with: 3 (with MOUNT, `nolock`) or
    /// 4.1.
    #[arg(long, value_enum, default_value_t = nfsbench::labrun::NfsVersion::V3)]
    nfs_version: nfsbench::labrun::NfsVersion,
    /// After the reads, the metadata runs with N files per run (create, stat, open,
    /// list, remove; per server and repetition, interleaved): issue 17 uses 10000.
    #[arg(long, value_name = "N")]
    metadata: Option<u32>,
    /// The `fs-meta` binary shipped into the guest for --metadata (default: `fs-meta`
    /// next to this binary; build it with `cargo build --release -p lab --bins`).
    #[arg(long)]
    fs_meta: Option<PathBuf>,
    /// Diagnostics: after the measured reads, one more read from our nfsd with
    /// `strace -c -f` attached (its system call counts and times, in the run's
    /// share as strace-ours.txt); not part of the figures.
    #[arg(long)]
    strace: bool,
    /// After each repetition's reads, the same servers (interleaved) writing a file of
    /// --mib MiB with `dd conv=fsync`: throughput and guest CPU per GiB, compared as
    /// the reads are.
    #[arg(long)]
    writes: bool,
    /// Diagnostics, with --metadata or --writes: after the measured runs, one more
    /// metadata run per server with each phase, and one more write per server,
    /// under the guest's `perf record -a -g`; the profiles go to
    /// <out>/<stem>-profile/ (profile-*.txt, perf-*.data and the guest's kallsyms;
    /// docs/bench/percall/guest-profile.py sums them per call); not part of the
    /// figures. Needs the host's perf (Debian package linux-perf).
    #[arg(long)]
    profile: bool,
    /// How our nfsd sends READ data over TCP (its --tcp-read-data).
    #[arg(long, value_enum, default_value_t = TcpReadData::Sendfile)]
    tcp_read_data: TcpReadData,
    /// nfs-ganesha (Debian's 4.3, VFS backend, installed by lab/setup) as a third
    /// server in the guest, exporting the same tmpfs on port 22049 (MOUNT 22048): the
    /// reads and writes run in interleaved triples, the order rotated per repetition,
    /// and the report adds ours/ganesha (with --metadata, per phase too). Needs --proto
    /// tcp (Debian's ganesha has no NFS/RDMA).
    #[arg(long)]
    with_ganesha: bool,
    /// Run our nfsd with --nfsd-only (the lab's export changes only through the server
    /// under test): its NFSv4.1 directory changes are reported atomic, as knfsd's are.
    /// The report's header says which.
    #[arg(long)]
    nfsd_only: bool,
    /// Output directory for lab.json and lab.txt (the stem gains `-rxe` for `--fabric
    /// rxe`, `-tcp` for `--proto tcp`, `-v4.1` for `--nfs-version 4.1`, `-writes` with
    /// `--writes`, `-metadata` with `--metadata`, `-ganesha` with `--with-ganesha`).
    #[arg(long, default_value = "nfsbench-report")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Output directory for report.json, report.txt and the charts.
    #[arg(long, default_value = "nfsbench-report")]
    out: PathBuf,
    /// Scratch directory (the export and the test file live in DIR/export).
    #[arg(long, default_value = "/tmp/nfsbench")]
    dir: PathBuf,
    /// Size of the test file (K, M, G suffixes: powers of 1024).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    file_size: u64,
    /// Transports, comma-separated: tcp, rdma.
    #[arg(long, default_value = "tcp,rdma", value_delimiter = ',')]
    transports: Vec<TransportKind>,
    /// READ sizes, comma-separated.
    #[arg(long, default_value = "4K,16K,64K,256K,1M", value_delimiter = ',', value_parser = parse_size32)]
    read_sizes: Vec<u32>,
    /// READs in flight, comma-separated.
    #[arg(long, default_value = "1,4,16", value_delimiter = ',')]
    depths: Vec<usize>,
    /// Repetitions (medians are reported; ratios pair runs of one repetition).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Time cap of one READ run in seconds (it also ends at the end of the file).
    #[arg(long, default_value_t = 1.0)]
    point_secs: f64,
    /// WRITE sizes, comma-separated; "none" for no WRITE runs.
    #[arg(long, default_value = "64K,1M", value_delimiter = ',', value_parser = parse_size32_or_none)]
    write_sizes: Vec<u32>,
    /// WRITEs in flight.
    #[arg(long, default_value_t = 8)]
    write_depth: usize,
    /// Bytes per WRITE run at most.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    write_bytes: u64,
    /// Time cap of one WRITE run in seconds (before its COMMIT).
    #[arg(long, default_value_t = 1.5)]
    write_secs: f64,
    /// Small RPCs (NULL, GETATTR) in flight, comma-separated; "none" for no rate runs.
    #[arg(long, default_value = "1,8,32,128", value_delimiter = ',', value_parser = parse_count_or_none)]
    rpc_inflight: Vec<usize>,
    /// Seconds per small-RPC run.
    #[arg(long, default_value_t = 0.5)]
    rpc_secs: f64,
    /// Skip the peer comparison (nfs-cat against our server and nfs-ganesha).
    #[arg(long)]
    no_peers: bool,
    /// How our server sends READ data over TCP (nfsd's --tcp-read-data).
    #[arg(long, value_enum, default_value_t = TcpReadData::Sendfile)]
    tcp_read_data: TcpReadData,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Directory to export.
    #[arg(long)]
    export: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// NFS port (TCP); 0 for any.
    #[arg(long, default_value_t = 0)]
    nfs_port: u16,
    /// MOUNT port (TCP); 0 for any.
    #[arg(long, default_value_t = 0)]
    mount_port: u16,
    /// Serve NFS over RPC-over-RDMA (iWARP) on this port too; 0 for any.
    #[arg(long)]
    rdma_port: Option<u16>,
    /// Keep the file handle key in DIR (handles survive a restart), as nfsd's
    /// --state-dir; without it, handles die with the process.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Kernel file handles: auto (as nfsd), no-open (found by search, as nfsd not
    /// running as root), off (inode handles, as on a file system without them).
    #[arg(long, value_enum, default_value_t = HandlesArg::Auto)]
    kernel_handles: HandlesArg,
    /// How READ data leaves over TCP, as nfsd's --tcp-read-data.
    #[arg(long, value_enum, default_value_t = TcpReadData::Sendfile)]
    tcp_read_data: TcpReadData,
}

/// `--tcp-read-data` (nfsd's option of that name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TcpReadData {
    /// `sendfile` from the page cache (nfsd's default).
    Sendfile,
    /// One copy, from a mapping of the file.
    Copy,
}

impl TcpReadData {
    fn name(self) -> &'static str {
        match self {
            TcpReadData::Sendfile => "sendfile",
            TcpReadData::Copy => "copy",
        }
    }
}

/// `--kernel-handles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HandlesArg {
    Auto,
    NoOpen,
    Off,
}

impl From<HandlesArg> for nfsd::KernelHandles {
    fn from(a: HandlesArg) -> Self {
        match a {
            HandlesArg::Auto => nfsd::KernelHandles::Auto,
            HandlesArg::NoOpen => nfsd::KernelHandles::NoOpen,
            HandlesArg::Off => nfsd::KernelHandles::Off,
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("not a size: {s:?} (e.g. 4096, 64K, 1M, 1G)"))
}

fn parse_size32(s: &str) -> Result<u32, String> {
    u32::try_from(parse_size(s)?).map_err(|_| format!("too large: {s}"))
}

// "none" becomes an empty list (clap then holds one sentinel 0, removed below).
fn parse_size32_or_none(s: &str) -> Result<u32, String> {
    if s == "none" {
        Ok(0)
    } else {
        parse_size32(s)
    }
}

fn parse_count_or_none(s: &str) -> Result<usize, String> {
    if s == "none" {
        return Ok(0);
    }
    s.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("not a positive count: {s}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(a) => {
            let opts = ServeOptions {
                export: a.export,
                bind: a.bind,
                nfs_port: a.nfs_port,
                mount_port: a.mount_port,
                rdma_port: a.rdma_port,
                state_dir: a.state_dir,
                kernel_handles: a.kernel_handles.into(),
                tcp_read_data: match a.tcp_read_data {
                    TcpReadData::Sendfile => oncrpc::tcp::FileData::Sendfile,
                    TcpReadData::Copy => oncrpc::tcp::FileData::Copy,
                },
            };
            match serve::run(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("nfsbench serve: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Handles(a) => match handles(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nfsbench handles: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Lab(a) => match lab(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nfsbench lab: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(a) => match run(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nfsbench: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn handles(a: HandlesArgs) -> Result<(), grid::BenchError> {
    use nfsbench::handles::{self, HandlesPlan};
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let started = utc_now();
    let plan = HandlesPlan {
        dir: a.dir,
        sizes: a.sizes,
        sample: a.sample,
        kernel_handles: match a.kernel_handles {
            HandlesArg::Auto => "auto",
            HandlesArg::NoOpen => "no-open",
            HandlesArg::Off => "off",
        }
        .to_string(),
        drop_caches: a.drop_caches,
        reps: a.reps,
    };
    let results = handles::run(&plan)?;
    let text = format!(
        "command: {command}\nstarted: {started}, finished: {}\n{}",
        utc_now(),
        handles::text(&plan, &results)
    );
    print!("{text}");
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("handles.txt"), &text)?;
    let json = serde_json::json!({
        "command": command,
        "started_utc": started,
        "finished_utc": utc_now(),
        "source_commit": nfsbench::report::source_commit(),
        "host_loadavg_end": nfsbench::machine::loadavg(),
        "kernel_handles": plan.kernel_handles,
        "drop_caches": plan.drop_caches,
        "reps": plan.reps,
        "results": results,
    });
    std::fs::write(
        a.out.join("handles.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// `given`, or `name` next to this executable; an error naming `build` if absent.
fn sibling_binary(
    given: Option<PathBuf>,
    name: &str,
    build: &str,
) -> Result<PathBuf, grid::BenchError> {
    let p = match given {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .ok_or("no directory for this executable")?
            .join(name),
    };
    if !p.exists() {
        return Err(format!("{} not found ({build}, or --{name} PATH)", p.display()).into());
    }
    Ok(p)
}

fn lab(a: LabArgs) -> Result<(), grid::BenchError> {
    let nfsd = sibling_binary(a.nfsd, "nfsd", "cargo build --release -p nfsd")?;
    let metadata = match a.metadata.filter(|&n| n > 0) {
        None => None,
        Some(n) => Some((
            n,
            sibling_binary(a.fs_meta, "fs-meta", "cargo build --release -p lab --bins")?,
        )),
    };
    if a.profile && metadata.is_none() && !a.writes {
        return Err(
            "--profile profiles the metadata runs and the writes: give --metadata N or --writes too"
                .into(),
        );
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let started = utc_now();
    let load_start = nfsbench::machine::loadavg();
    let r = nfsbench::labrun::run(&nfsbench::labrun::LabPlan {
        fabric: a.fabric,
        proto: a.proto,
        nfs_version: a.nfs_version,
        nfsd,
        lab_dir: a.lab_dir,
        mib: a.mib,
        reps: a.reps.max(1),
        strace: a.strace,
        writes: a.writes,
        profile: a.profile,
        metadata,
        tcp_read_data: a.tcp_read_data.name().to_string(),
        ganesha: a.with_ganesha,
        nfsd_only: a.nfsd_only,
    })?;
    let mut stem = String::from("lab");
    if a.fabric == nfsbench::labrun::Fabric::Rxe {
        stem.push_str("-rxe");
    }
    if a.proto == nfsbench::labrun::Proto::Tcp {
        stem.push_str("-tcp");
    }
    if a.nfs_version == nfsbench::labrun::NfsVersion::V41 {
        stem.push_str("-v4.1");
    }
    if a.writes {
        stem.push_str("-writes");
    }
    if r.metadata.is_some() {
        stem.push_str("-metadata");
    }
    if a.with_ganesha {
        stem.push_str("-ganesha");
    }
    let load_end = nfsbench::machine::loadavg();
    let text = format!(
        "command: {command}\nstarted: {started}, finished: {}\nhost load average (1/5/15 min): {:.2} {:.2} {:.2} at start, {:.2} {:.2} {:.2} at end\n{}",
        utc_now(),
        load_start[0],
        load_start[1],
        load_start[2],
        load_end[0],
        load_end[1],
        load_end[2],
        nfsbench::labrun::text(&r)
    );
    print!("{text}");
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join(format!("{stem}.txt")), &text)?;
    if a.profile {
        let to = a.out.join(format!("{stem}-profile"));
        let n = copy_profiles(&r.out_dir.join("share"), &to)?;
        println!("{n} profile files in {}", to.display());
    }
    let json = serde_json::json!({
        "command": command,
        "started_utc": started,
        "finished_utc": utc_now(),
        "source_commit": nfsbench::report::source_commit(),
        "host_loadavg_start": load_start,
        "host_loadavg_end": load_end,
        "lab": r,
    });
    std::fs::write(
        a.out.join(format!("{stem}.json")),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// Copies the guest's profiles (`--profile`: profile-*.txt, perf-*.data and the
/// guest's kallsyms, for `perf report -i perf-X.data --kallsyms kallsyms`) from the
/// run's share to `to`; returns how many files.
fn copy_profiles(share: &std::path::Path, to: &std::path::Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(to)?;
    let mut n = 0;
    for e in std::fs::read_dir(share)? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        let wanted = (name.starts_with("profile-") && name.ends_with(".txt"))
            || (name.starts_with("perf-") && name.ends_with(".data"))
            || name == "kallsyms";
        if wanted {
            std::fs::copy(e.path(), to.join(&*name))?;
            n += 1;
        }
    }
    if n == 0 {
        return Err(std::io::Error::other(format!(
            "--profile: no profiles in {}",
            share.display()
        )));
    }
    Ok(n)
}

fn run(a: RunArgs) -> Result<(), grid::BenchError> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let plan = Plan {
        dir: a.dir,
        file_size: a.file_size,
        transports: a.transports,
        read_sizes: a.read_sizes,
        depths: a.depths,
        reps: a.reps.max(1),
        point_secs: a.point_secs,
        write_sizes: a.write_sizes.into_iter().filter(|&w| w > 0).collect(),
        write_depth: a.write_depth,
        write_bytes: a.write_bytes,
        write_secs: a.write_secs,
        rpc_inflight: a.rpc_inflight.into_iter().filter(|&n| n > 0).collect(),
        rpc_secs: a.rpc_secs,
        peers: !a.no_peers,
        tcp_read_data: a.tcp_read_data.name().to_string(),
    };
    std::fs::create_dir_all(&a.out)?;
    let started = utc_now();
    let mut machine = Machine::probe();
    let results = grid::run(&plan, a.quiet)?;
    machine.finish();
    let mut notes = vec![
        "server: child process `nfsbench serve` = the nfsd library composed as the nfsd \
         binary does (Bound on TCP + Bound::listen_rdma: rpcrdma-transport on the iwarp \
         provider, default RdmaOptions), no rpcbind, squash none"
            .to_string(),
        format!(
            "server: READ data over TCP by {} (--tcp-read-data)",
            plan.tcp_read_data
        ),
        "client: this process, nfsclient::Mount (pipelined FileReader/FileWriter), tokio \
         multi-thread runtime with 2 workers; READ data dropped on arrival"
            .to_string(),
    ];
    notes.extend(results.notes);
    let summary = Summary::compute(
        &results.reads,
        &results.writes,
        &results.rpc_rates,
        &results.peers,
    );
    let report = Report {
        tool: env!("CARGO_PKG_VERSION").into(),
        command,
        source_commit: nfsbench::report::source_commit(),
        started_utc: started,
        finished_utc: utc_now(),
        machine,
        config: serde_json::to_value(&plan)?,
        notes,
        reads: results.reads,
        writes: results.writes,
        rpc_rates: results.rpc_rates,
        peers: results.peers,
        summary,
    };
    let text = tables(&report);
    print!("{text}");
    std::fs::write(a.out.join("report.txt"), &text)?;
    std::fs::write(
        a.out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let charts = nfsbench::charts::draw(&report, &a.out)?;
    println!(
        "\nwrote {} (report.json, report.txt, {} charts)",
        a.out.display(),
        charts.len()
    );
    Ok(())
}
