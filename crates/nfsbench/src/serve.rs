//! `nfsbench serve`: the server under test, run as a child process of the bench.
//!
//! It is our `nfsd` library as the `nfsd` binary composes it (exports opened,
//! NFS + MOUNT on TCP via [`nfsd::server::Bound`]), plus NFS over RPC-over-RDMA on the
//! userspace iWARP provider from the same [`nfsd::NfsServer`] state, composed as the
//! `nfsclient` RDMA tests do: an NFS-only [`oncrpc::Dispatcher`] fed by
//! [`rpcrdma_transport::RdmaServer`] with the NFSv3 Upper Layer Binding. (The `nfsd`
//! binary does not serve RDMA yet; once it does, the bench can run it instead.)
//!
//! On start it prints one line, `nfsbench-serve nfs=ADDR mount=ADDR rdma=ADDR|none`,
//! then `ready`, and serves until SIGTERM or SIGINT or until its stdin closes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::Squash;

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
    let config = Config {
        exports: vec![opts.export.clone()],
        read_only: false,
        bind: opts.bind,
        nfs_port: opts.nfs_port,
        mount_port: opts.mount_port,
        rpcbind: RpcbindMode::Off,
        portmap_port: 0,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    };
    let bound = Bound::new(&config).await?;
    let nfs = bound.nfs_addr()?;
    let mount = bound.mount_addr()?;
    let rdma = match opts.rdma_port {
        Some(port) => Some(start_rdma(bound.server().clone(), (opts.bind, port).into()).await?),
        None => None,
    };
    let rdma_addr = rdma
        .as_ref()
        .map_or_else(|| "none".to_string(), |(a, _)| a.to_string());
    println!("{ANNOUNCE} nfs={nfs} mount={mount} rdma={rdma_addr}");
    println!("ready");
    bound.serve(stop_signal()).await?;
    if let Some((_, task)) = rdma {
        task.abort();
    }
    Ok(())
}

/// NFS (only: RFC 8267 binds no MOUNT) over RPC-over-RDMA at `addr`.
async fn start_rdma(
    server: Arc<nfsd::NfsServer>,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let mut d = oncrpc::Dispatcher::new();
    d.register(
        nfsclient::nfs3::NFS_PROGRAM,
        [nfsclient::nfs3::NFS_V3],
        Arc::new(nfsd::NfsService::new(server)),
    )
    .map_err(|e| std::io::Error::other(format!("dispatcher: {e:?}")))?;
    let provider = iwarp::IwarpProvider::new(iwarp::IwarpConfig::default());
    let rs = rpcrdma_transport::RdmaServer::new(
        provider,
        Arc::new(d),
        Arc::new(nfsclient::rdma::Nfs3RdmaBinding),
        rpcrdma_transport::RdmaConfig::default(),
    );
    let listener = rs.bind(addr).await?;
    let local = rdma::Listener::local_addr(&listener)?;
    let task = tokio::spawn(async move {
        if let Err(e) = rs.serve(listener).await {
            eprintln!("nfsbench serve: RDMA listener: {e}");
        }
    });
    Ok((local, task))
}

/// SIGTERM, SIGINT, or EOF on stdin.
async fn stop_signal() {
    use tokio::io::AsyncReadExt;
    use tokio::signal::unix::{signal, SignalKind};
    let stdin_eof = async {
        let mut buf = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
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
