//! verbs-nfsd: our NFSv3 server with its NFS/RDMA listener on the verbs provider
//! (`verbs::VerbsCm`), for the lab (issue 14): the Linux kernel client mounts it over
//! soft-RoCE and soft-iWARP devices. MOUNT and NFS over TCP are the `nfsd` library's,
//! as in the `nfsd` binary; only the RDMA listener differs (the `nfsd` binary does not
//! link the verbs provider yet: docs/verbs-provider.md, the licence question).
//!
//! ```text
//! verbs-nfsd ADDR NFS_PORT MOUNT_PORT RDMA_PORT EXPORT_DIR
//! ```
//!
//! Prints `ok listen rdma ADDR:PORT device-independent` once listening and serves
//! until killed; on SIGTERM prints the RDMA connections' counters.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use nfs3::{NFS_PROGRAM, NFS_V3};
use nfsd::rdma::{Nfs3Binding, RdmaOptions};
use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::{ExportLine, ExportOptions, HandleConfig, HandleKey, NfsService, Squash};
use oncrpc::Dispatcher;
use rpcrdma_transport::RdmaServer;

async fn run(args: &[String]) -> Result<(), String> {
    let [addr, nfs_port, mount_port, rdma_port, dir] = args else {
        return Err("usage: verbs-nfsd ADDR NFS_PORT MOUNT_PORT RDMA_PORT EXPORT_DIR".into());
    };
    let ip: IpAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let port = |p: &String| p.parse::<u16>().map_err(|e| format!("{p}: {e}"));
    let key = HandleKey::ephemeral().map_err(|e| format!("handle key: {e}"))?;
    let config = Config {
        nlm: None,
        handles: HandleConfig::new(key),
        exports: vec![ExportLine::everyone(
            PathBuf::from(dir),
            ExportOptions {
                read_only: false,
                squash: Squash::None,
                secure: false,
                ..ExportOptions::default()
            },
        )],
        bind: ip,
        nfs_port: port(nfs_port)?,
        mount_port: port(mount_port)?,
        rpcbind: RpcbindMode::Off,
        portmap_port: 0,
    };
    let bound = Bound::new(&config)
        .await
        .map_err(|e| format!("TCP listeners: {e}"))?;
    let mut d = Dispatcher::new();
    d.register(
        NFS_PROGRAM,
        [NFS_V3],
        Arc::new(NfsService::new(bound.server().clone())),
    )
    .map_err(|e| format!("register NFS: {e:?}"))?;
    let rdma_addr = SocketAddr::new(ip, port(rdma_port)?);
    let server = RdmaServer::new(
        verbs::VerbsCm::new(),
        Arc::new(d),
        Arc::new(Nfs3Binding),
        RdmaOptions::server_transport(true),
    );
    let stats = server.stats();
    let listener = server
        .bind(rdma_addr)
        .await
        .map_err(|e| format!("NFS/RDMA listener on {rdma_addr}: {e}"))?;
    println!("ok listen rdma {rdma_addr}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM handler: {e}"))?;
    let result = tokio::select! {
        r = server.serve(listener) => r.map_err(|e| format!("NFS/RDMA: {e}")),
        r = bound.serve(std::future::pending()) => r.map_err(|e| format!("NFS/TCP: {e}")),
        _ = term.recv() => Ok(()),
    };
    server.shutdown();
    for s in stats.snapshots() {
        println!("ok {s}");
    }
    result
}

#[tokio::main]
async fn main() -> ExitCode {
    // Modes from clients are applied exactly, as the nfsd binary does.
    rustix::process::umask(rustix::fs::Mode::empty());
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("FAIL verbs-nfsd: {e}");
            ExitCode::FAILURE
        }
    }
}
