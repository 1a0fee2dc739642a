//! `nfs`: list, read, write and remove files on an NFSv3 server, over TCP or
//! RPC-over-RDMA, without mounting anything.
//!
//! ```text
//! nfs ls -l server:/srv/export/dir
//! nfs get nfs://server:2049/srv/export/big.iso ./big.iso
//! nfs put ./notes.txt server:/srv/export/docs/
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use nfsclient::{auth_sys_self, MountOptions, RdmaConfig, RdmaProvider, Target, TransportKind};

mod commands;
mod format;
mod progress;
mod stats;

/// NFSv3 client: ls, get, put, rm, mkdir, stat, cat against host:/path or
/// nfs://host[:port]/path.
#[derive(Debug, Parser)]
#[command(name = "nfs", version, arg_required_else_help = true)]
struct Cli {
    #[command(flatten)]
    global: Global,
    /// Write the man pages (nfs.1 and one nfs-COMMAND.1 per command) into DIR and
    /// exit.
    #[arg(long, value_name = "DIR", exclusive = true, hide = true)]
    generate_man_pages: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Writes nfs.1 and nfs-COMMAND.1 for each command into `dir`.
fn write_man_pages(dir: &std::path::Path) -> std::io::Result<()> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir)?;
    let mut cmd = Cli::command();
    // Propagates the global options into each command, whose page then lists them.
    cmd.build();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    std::fs::write(dir.join("nfs.1"), page)?;
    for sub in cmd.get_subcommands() {
        let name = format!("nfs-{}", sub.get_name());
        let usage = format!("nfs [OPTIONS] {}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(usage);
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
    }
    Ok(())
}

/// Options of every command.
#[derive(Debug, Args)]
struct Global {
    /// Transport for NFS calls (MOUNT always uses TCP).
    #[arg(short, long, global = true, default_value = "tcp", value_parser = ["tcp", "rdma"])]
    transport: String,
    /// NFS port (default 2049 for tcp, 20049 for rdma; a URL's port wins).
    #[arg(long, global = true)]
    nfs_port: Option<u16>,
    /// MOUNT port (default: ask the server's portmapper).
    #[arg(long, global = true)]
    mount_port: Option<u16>,
    /// Portmapper port.
    #[arg(long, global = true, default_value_t = 111)]
    portmap_port: u16,
    /// Where the export ends in the target path (default: the longest prefix MNT accepts).
    #[arg(long, global = true)]
    export: Option<String>,
    /// AUTH_SYS uid (default: this process's).
    #[arg(long, global = true)]
    uid: Option<u32>,
    /// AUTH_SYS gid (default: this process's).
    #[arg(long, global = true)]
    gid: Option<u32>,
    /// READ size in bytes (default: the server's preferred, at most its maximum).
    #[arg(long, global = true)]
    rsize: Option<u32>,
    /// WRITE size in bytes (default: the server's preferred, at most its maximum).
    #[arg(long, global = true)]
    wsize: Option<u32>,
    /// READs or WRITEs in flight at once.
    #[arg(long, global = true, default_value_t = 8)]
    depth: usize,
    /// Seconds one call may take.
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
    /// No progress bar.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// After a transfer, print its rate (and the RDMA counters) on standard error.
    #[arg(short, long, global = true)]
    verbose: bool,
    /// RPC-over-RDMA version to open connections with: 2 probes Version Two (and
    /// asks for responder-provided Read chunks), falling back to Version One when the
    /// server answers ERR_VERS (Linux knfsd does); 1 speaks Version One only.
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    rdma_version: u32,
    /// RDMA provider: auto (rdma-core verbs when rdma_cm routes the server's address
    /// through a local RDMA device, else the userspace iWARP provider; NFS_LOG=info
    /// shows which), verbs (an RDMA NIC, rxe or siw), iwarp (userspace iWARP over a
    /// TCP socket; the server needs an iWARP peer: siw, an iWARP NIC or our nfsd).
    #[arg(long, global = true, default_value = "auto", value_parser = ["auto", "verbs", "iwarp"])]
    rdma_provider: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List a directory (or show one file), sorted by name; `.` and `..` only with -a.
    Ls {
        /// Long format: mode, links, owner, size, mtime (READDIRPLUS).
        #[arg(short, long)]
        long: bool,
        /// Also `.` and `..`, first, as the server lists them (as `ls -a`).
        #[arg(short, long)]
        all: bool,
        /// host:/path or nfs://host[:port]/path.
        target: Target,
    },
    /// Copy a remote file to a local file ("-" for standard output).
    Get {
        /// Remote file.
        target: Target,
        /// Local file (default: the remote file's name, in the current directory).
        local: Option<String>,
    },
    /// Copy a local file to the server (into the directory if the target is one).
    Put {
        /// Local file.
        local: String,
        /// Remote file or directory.
        target: Target,
        /// Ask for FILE_SYNC WRITEs instead of UNSTABLE + COMMIT.
        #[arg(long)]
        sync: bool,
    },
    /// Remove a file (with -d, an empty directory).
    Rm {
        /// Remove an empty directory (RMDIR) instead of a file.
        #[arg(short = 'd', long)]
        dir: bool,
        /// Remote path.
        target: Target,
    },
    /// Make a directory.
    Mkdir {
        /// Make parents as needed; no error if it exists.
        #[arg(short, long)]
        parents: bool,
        /// Permission bits, octal.
        #[arg(short, long, default_value = "755", value_parser = parse_mode)]
        mode: u32,
        /// Remote path.
        target: Target,
    },
    /// Show a file's attributes (GETATTR).
    Stat {
        /// Remote path.
        target: Target,
    },
    /// Write a remote file to standard output.
    Cat {
        /// Remote file.
        target: Target,
    },
    /// Print a running nfsd's counters, as `nfsstat -s` does: calls, errors and mean
    /// service time per procedure, then its other counters that are not zero (read
    /// from its `--metrics` page).
    Stats {
        /// Where nfsd serves its metrics (`nfsd --metrics ADDR:PORT`).
        #[arg(value_name = "ADDR:PORT")]
        addr: String,
    },
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode"))
}

impl Global {
    fn mount_options(&self, target: &Target) -> Result<MountOptions, String> {
        let transport: TransportKind = self.transport.parse().map_err(|e| format!("{e}"))?;
        let mut sys = auth_sys_self();
        if let Some(uid) = self.uid {
            sys.uid = uid;
        }
        if let Some(gid) = self.gid {
            sys.gid = gid;
        }
        Ok(MountOptions {
            transport,
            nfs_port: target.port.or(self.nfs_port),
            mount_port: self.mount_port,
            portmap_port: self.portmap_port,
            cred: sys.to_opaque_auth(),
            timeout: Duration::from_secs(self.timeout.max(1)),
            rsize: self.rsize,
            wsize: self.wsize,
            depth: self.depth.max(1),
            rdma: RdmaConfig {
                version_two: self.rdma_version == 2,
                reliable_reply: self.rdma_version == 2,
                ..RdmaConfig::default()
            },
            rdma_provider: match self.rdma_provider.as_str() {
                "verbs" => RdmaProvider::Verbs,
                "iwarp" => RdmaProvider::Iwarp,
                _ => RdmaProvider::Auto,
            },
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(dir) = &cli.generate_man_pages {
        return match write_man_pages(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nfs: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let Some(command) = cli.command else {
        eprintln!("nfs: a command is needed (nfs --help)");
        return ExitCode::from(2);
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("NFS_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nfs: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(commands::run(cli.global, command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfs: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("nfs: hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
