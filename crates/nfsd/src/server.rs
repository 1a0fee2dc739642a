//! Running the NFS, MOUNT (and optionally portmapper) programs on TCP, with
//! rpcbind registration and graceful shutdown, on `oncrpc`'s TCP server; and NFS on
//! RPC-over-RDMA ([`crate::rdma`]) when [`Bound::listen_rdma`] added a listener.
//!
//! The programs are plain `oncrpc` services; the RPC-over-RDMA listener is one more
//! transport feeding an NFS-only dispatcher, registered with netid "rdma"
//! (RFC 8267 §5, port 20049; rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §11).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use nfs3::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use oncrpc::rpcbind::Registrar;
use oncrpc::server::{Server, ServerConfig};
use oncrpc::Dispatcher;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::exports::ExportLine;
use crate::nfs::Table;
use crate::portmap::{Portmapper, Registration, PMAP_PROGRAM};
use crate::rdma::{RdmaListener, RdmaOptions};
use crate::{MountService, NfsServer, NfsService};

/// What to do about rpcbind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcbindMode {
    /// Register with the host's rpcbind if one answers on port 111.
    Auto,
    /// Register with the host's rpcbind; fail if that does not work.
    Register,
    /// Serve a minimal portmapper ourselves ([`crate::portmap`]).
    Serve,
    /// Neither.
    Off,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// What to export to whom, how: the lines of an exports file
    /// ([`crate::exports::load`]), or directories for everyone
    /// ([`ExportLine::everyone`]).
    pub exports: Vec<ExportLine>,
    /// Address to listen on.
    pub bind: IpAddr,
    /// NFS port (2049).
    pub nfs_port: u16,
    /// MOUNT port (20048); equal to `nfs_port` to serve both on one port.
    pub mount_port: u16,
    /// rpcbind handling.
    pub rpcbind: RpcbindMode,
    /// Port of our own portmapper with [`RpcbindMode::Serve`] (111).
    pub portmap_port: u16,
}

/// Listeners bound and exports opened, not yet serving.
#[derive(Debug)]
pub struct Bound {
    server: Arc<NfsServer>,
    nfs: TcpListener,
    mount: Option<TcpListener>,
    portmap: Option<TcpListener>,
    rdma: Option<RdmaListener>,
    registrar: Option<Registrar>,
}

impl Bound {
    /// Opens the exports and binds the listeners.
    pub async fn new(config: &Config) -> std::io::Result<Bound> {
        let server = Arc::new(NfsServer::new(Table::open(&config.exports, None)?));
        let listen = |port| TcpListener::bind(SocketAddr::new(config.bind, port));
        let nfs = listen(config.nfs_port).await?;
        let nfs_port = nfs.local_addr()?.port();
        let mount = if config.mount_port == config.nfs_port && config.nfs_port != 0 {
            None
        } else {
            Some(listen(config.mount_port).await?)
        };
        let _ = nfs_port;
        let portmap = match config.rpcbind {
            RpcbindMode::Serve => Some(listen(config.portmap_port).await?),
            _ => None,
        };
        let registrar = match config.rpcbind {
            RpcbindMode::Register => Some(Registrar::local()),
            RpcbindMode::Auto if rpcbind_answers().await => Some(Registrar::local()),
            _ => None,
        };
        Ok(Bound {
            server,
            nfs,
            mount,
            portmap,
            rdma: None,
            registrar,
        })
    }

    /// Adds the NFS/RDMA listener (NFS only: RFC 8267 binds no MOUNT), bound now,
    /// served and registered (netid "rdma") by [`Bound::serve`].
    pub async fn listen_rdma(&mut self, opts: &RdmaOptions) -> std::io::Result<()> {
        self.rdma = Some(RdmaListener::bind(self.server.clone(), opts).await?);
        Ok(())
    }

    /// Where NFS/RDMA listens, if it does.
    pub fn rdma_addr(&self) -> Option<SocketAddr> {
        self.rdma.as_ref().map(RdmaListener::local_addr)
    }

    /// The NFS/RDMA transport counters, if RDMA is served.
    pub fn rdma_stats(&self) -> Option<rpcrdma_transport::StatsRegistry> {
        self.rdma.as_ref().map(RdmaListener::stats)
    }

    /// The NFS program state.
    pub fn server(&self) -> &Arc<NfsServer> {
        &self.server
    }

    /// Where NFS listens.
    pub fn nfs_addr(&self) -> std::io::Result<SocketAddr> {
        self.nfs.local_addr()
    }

    /// Where MOUNT listens.
    pub fn mount_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.mount {
            Some(m) => m.local_addr(),
            None => self.nfs.local_addr(),
        }
    }

    /// The startup report: what is exported, where it listens, how identities and
    /// rpcbind are handled. One line each.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = export_lines(&self.server);
        if let Ok(a) = self.nfs_addr() {
            lines.push(format!("NFS v3 listening on tcp {a}"));
        }
        if let Ok(a) = self.mount_addr() {
            lines.push(format!("MOUNT v3 listening on tcp {a}"));
        }
        match &self.rdma {
            Some(r) => lines.push(format!(
                "NFS v3 listening on rdma {} ({}, userspace iWARP)",
                r.local_addr(),
                r.versions()
            )),
            None => lines.push("NFS/RDMA: off".to_string()),
        }
        if let Some(Ok(a)) = self.portmap.as_ref().map(TcpListener::local_addr) {
            lines.push(format!(
                "portmapper (v2, rpcbind v3/v4) listening on tcp {a}"
            ));
        }
        lines.push(match &self.registrar {
            Some(r) if self.rdma.is_some() => format!(
                "registering NFS and MOUNT (tcp), NFS (rdma) with rpcbind at {}",
                r.addr
            ),
            Some(r) => format!("registering NFS and MOUNT (tcp) with rpcbind at {}", r.addr),
            None if self.portmap.is_some() => "not using the host's rpcbind".to_string(),
            None => "rpcbind: not registering (none answered on 127.0.0.1:111, or --rpcbind off)"
                .to_string(),
        });
        lines.push(if self.server.switching {
            "AUTH_SYS identities applied, squashed per export".to_string()
        } else {
            format!(
                "not running as root: every call acts as uid {} (AUTH_SYS identities not applied)",
                rustix::process::geteuid().as_raw()
            )
        });
        lines
    }

    /// Serves until `shutdown` completes; then calls in flight finish, replies are
    /// sent, registrations are removed, and this returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let config = ServerConfig {
            rpcbind: self.registrar.clone(),
            ..ServerConfig::default()
        };
        let nfs_service = Arc::new(NfsService::new(self.server.clone()));
        let mount_service = Arc::new(MountService::new(self.server.clone()));
        let mut nfs_dispatcher = Dispatcher::new();
        nfs_dispatcher
            .register(NFS_PROGRAM, [NFS_V3], nfs_service)
            .map_err(std::io::Error::other)?;
        let mut tasks = tokio::task::JoinSet::new();
        let mut table = vec![Registration {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            netid: "tcp",
            addr: self.nfs.local_addr()?,
        }];
        table.push(Registration {
            prog: MOUNT_PROGRAM,
            vers: MOUNT_V3,
            netid: "tcp",
            addr: self.mount_addr()?,
        });
        if let Some(rdma) = self.rdma {
            let addr = rdma.local_addr();
            table.push(Registration {
                prog: NFS_PROGRAM,
                vers: NFS_V3,
                netid: if addr.is_ipv4() {
                    rpcrdma_transport::NETID_RDMA
                } else {
                    rpcrdma_transport::NETID_RDMA6
                },
                addr,
            });
            tasks.spawn(rdma.serve(self.registrar.clone(), stopped(stop_rx.clone())));
        }
        match self.mount {
            Some(listener) => {
                let mut d = Dispatcher::new();
                d.register(MOUNT_PROGRAM, [MOUNT_V3], mount_service)
                    .map_err(std::io::Error::other)?;
                let s = Server::new(d, config.clone());
                tasks.spawn(s.serve(listener, stopped(stop_rx.clone())));
            }
            None => {
                nfs_dispatcher
                    .register(MOUNT_PROGRAM, [MOUNT_V3], mount_service)
                    .map_err(std::io::Error::other)?;
            }
        }
        let s = Server::new(nfs_dispatcher, config);
        tasks.spawn(s.serve(self.nfs, stopped(stop_rx.clone())));
        if let Some(listener) = self.portmap {
            let own = listener.local_addr()?;
            let mut d = Dispatcher::new();
            d.register(
                PMAP_PROGRAM,
                [2, 3, 4],
                Arc::new(Portmapper::new(table, own)),
            )
            .map_err(std::io::Error::other)?;
            let s = Server::new(d, ServerConfig::default());
            tasks.spawn(s.serve(listener, stopped(stop_rx.clone())));
        }
        // Stop everything on the shutdown signal, or when one server fails.
        let mut result = Ok(());
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut shutdown => {}
            Some(done) = tasks.join_next() => {
                result = flatten(done);
            }
        }
        let _ = stop_tx.send(true);
        while let Some(done) = tasks.join_next().await {
            if result.is_ok() {
                result = flatten(done);
            }
        }
        result
    }
}

/// One line per export: its directory and its clients with their options.
pub fn export_lines(server: &NfsServer) -> Vec<String> {
    server
        .table()
        .exports
        .iter()
        .map(|s| {
            format!(
                "export {} to {}, fsid {:#018x}",
                s.export.path.display(),
                s.clients,
                s.export.id
            )
        })
        .collect()
}

fn flatten(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> std::io::Result<()> {
    r.map_err(std::io::Error::other)?
}

/// Does something accept connections on 127.0.0.1:111?
async fn rpcbind_answers() -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], 111));
    matches!(
        tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr)
        )
        .await,
        Ok(Ok(_))
    )
}
