//! `nfsbench serve`: the server under test, run as a child process of the bench.
//!
//! It is our `nfsd` composed exactly as the `nfsd` binary composes it (its `run`):
//! exports opened, NFS + MOUNT on TCP via [`nfsd::server::Bound`], NFS over
//! RPC-over-RDMA (userspace iWARP) via [`nfsd::server::Bound::listen_rdma`] with the
//! default [`nfsd::rdma::RdmaOptions`] but the provider (userspace iWARP, not auto), no
//! rpcbind, identities as the caller
//! (`--squash none`). Being part of this binary keeps the bench self-contained (an
//! integration test cannot build another package's binary).
//!
//! On start it prints one line, `nfsbench-serve nfs=ADDR mount=ADDR rdma=ADDR|none`,
//! then `ready`, and serves until SIGTERM or SIGINT or until its stdin closes.

use std::net::IpAddr;
use std::path::PathBuf;

use nfsd::rdma::{Provider, RdmaOptions};
use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::{ExportLine, ExportOptions, HandleConfig, HandleKey, KernelHandles, Squash};

/// What to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Exported directory.
    pub export: PathBuf,
    /// Address to listen on.
    pub bind: IpAddr,
    /// NFS port (TCP); 0 for any.
    pub nfs_port: u16,
    /// MOUNT port (TCP); 0 for any.
    pub mount_port: u16,
    /// NFS/RDMA port; `None` for no RDMA listener, `Some(0)` for any port.
    pub rdma_port: Option<u16>,
    /// State directory holding the file handle key, so that handles survive a
    /// restart of the child (as nfsd's `--state-dir`); `None`: a key for this process
    /// only.
    pub state_dir: Option<PathBuf>,
    /// Whether kernel file handles are used (the default, [`KernelHandles::Auto`], is
    /// the `nfsd` binary's).
    pub kernel_handles: KernelHandles,
    /// How READ data leaves over TCP (nfsd's `--tcp-read-data`).
    pub tcp_read_data: oncrpc::tcp::FileData,
}

/// The line prefix announcing the addresses.
pub const ANNOUNCE: &str = "nfsbench-serve";

/// Runs the server until a signal or until stdin reaches EOF (the parent died).
pub fn run(opts: &ServeOptions) -> std::io::Result<()> {
    // Modes from clients are applied exactly, as knfsd (and our nfsd binary) do.
    rustix::process::umask(rustix::fs::Mode::empty());
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(serve(opts))
}

async fn serve(opts: &ServeOptions) -> std::io::Result<()> {
    let key = match &opts.state_dir {
        Some(dir) => HandleKey::load_or_create(dir)?,
        None => HandleKey::ephemeral()?,
    };
    let config = Config {
        nlm: None,
        max_memory: nfsd::memory::default_max_memory(),
        inline_metadata: true,
        tcp_read_data: opts.tcp_read_data,
        tcp_splice_writes: true,
        drc_entries: None,
        nfs4_id_domain: None,
        metrics: None,
        handles: HandleConfig {
            kernel: opts.kernel_handles,
            ..HandleConfig::new(key)
        },
        exports: vec![ExportLine::everyone(
            opts.export.clone(),
            ExportOptions {
                read_only: false,
                squash: Squash::None,
                secure: false,
                ..ExportOptions::default()
            },
        )],
        bind: opts.bind,
        nfs_port: opts.nfs_port,
        mount_port: opts.mount_port,
        rpcbind: RpcbindMode::Off,
        portmap_port: 0,
    };
    let mut bound = Bound::new(&config).await?;
    if let Some(port) = opts.rdma_port {
        bound
            .listen_rdma(&RdmaOptions {
                // What the bench's figures are about; `auto` would take a verbs
                // device where the host (or the lab guest) has one.
                provider: Provider::Iwarp,
                ..RdmaOptions::new((opts.bind, port).into())
            })
            .await?;
    }
    let nfs = bound.nfs_addr()?;
    let mount = bound.mount_addr()?;
    let rdma_addr = bound
        .rdma_addr()
        .map_or_else(|| "none".to_string(), |a| a.to_string());
    println!("{ANNOUNCE} nfs={nfs} mount={mount} rdma={rdma_addr}");
    // Handlers first: a SIGTERM sent as soon as "ready" is read must be caught.
    let stop = stop_signal();
    println!("ready");
    bound.serve(stop).await
}

/// SIGTERM, SIGINT, or EOF on stdin. The signal handlers are installed when this is
/// called, not when the future is first polled.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::io::AsyncReadExt;
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let stdin_eof = async {
            let mut buf = [0u8; 64];
            let mut stdin = tokio::io::stdin();
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        };
        match handlers {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                    _ = stdin_eof => {}
                }
            }
            _ => stdin_eof.await,
        }
    }
}
