//! Running the NFS, MOUNT (and optionally portmapper, on TCP and UDP) programs on TCP, with
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
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

use crate::exports::ExportLine;
use crate::nfs::Table;
use crate::nlm::xdr::{NLM_PROGRAM, NLM_V4, NSM_PROGRAM, NSM_V1};
use crate::nlm::{Nlm, NlmConfig, NlmService, NsmService};
use crate::portmap::{Portmapper, Registration, PMAP_PROGRAM};
use crate::rdma::{RdmaListener, RdmaOptions};
use crate::v4::Nfs4Service;
use crate::vfs::HandleConfig;
use crate::{MountService, NfsServer, NfsService};

/// What to do about rpcbind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcbindMode {
    /// Register with the host's rpcbind if one answers on 127.0.0.1:111; otherwise
    /// serve our own portmapper (as [`RpcbindMode::Serve`]), so that a client that
    /// looks MOUNT (or NFS) up finds it either way: a Linux NFSv3 mount names no
    /// `mountport=` unless told. If our own cannot listen either (no privilege for
    /// port 111, or the port taken), serve without one and say so.
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
    /// Port of our own portmapper with [`RpcbindMode::Serve`], or
    /// [`RpcbindMode::Auto`] when no rpcbind answers (111).
    pub portmap_port: u16,
    /// The handles' key and kind: [`HandleConfig::new`] with
    /// [`crate::HandleKey::load_or_create`] for handles that survive a restart.
    pub handles: HandleConfig,
    /// Locking (NLM v4 and NSM, [`crate::nlm`]); `None`: no lock manager (clients
    /// must mount with `nolock`).
    pub nlm: Option<NlmConfig>,
    /// The server's memory budget in bytes (`--max-memory`, [`crate::memory`]):
    /// NFS/RDMA connections' buffers, WRITE data pulled by RDMA Read, READ buffers.
    /// [`crate::memory::default_max_memory`] by default.
    pub max_memory: u64,
    /// Run GETATTR, LOOKUP, ACCESS, CREATE, REMOVE and READ over TCP, and NFSv4.1
    /// COMPOUNDs of small metadata operations, on the async workers
    /// ([`NfsServer::inline_metadata`]); false puts every call on the blocking pool.
    pub inline_metadata: bool,
    /// How READ data leaves over TCP (`--tcp-read-data`): by `sendfile` (the
    /// default) or one copy from a mapping of the file.
    pub tcp_read_data: oncrpc::tcp::FileData,
    /// WRITE data over TCP goes from the socket into pipes and from them into the
    /// file (`--tcp-write-data splice`, [`oncrpc::tcp::call_data`]); false reads it
    /// into memory with its call.
    pub tcp_splice_writes: bool,
    /// Entries of the duplicate request cache of NFS and NLM (`--drc-entries`,
    /// [`crate::drc`]): `None` for knfsd's default for this machine's memory, 0 for
    /// no cache. Its byte bound is reserved from [`Config::max_memory`].
    pub drc_entries: Option<usize>,
    /// NFSv4.1's ID-mapping domain (`--idmap-domain`, [`crate::v4::idmap`]):
    /// `owner` and `owner_group` as `name@domain`; `None` (the default): numeric
    /// strings.
    pub nfs4_id_domain: Option<String>,
    /// Where to serve the counters over HTTP (`--metrics`, [`crate::metrics`]);
    /// `None`: not served.
    pub metrics: Option<SocketAddr>,
}

/// Listeners bound and exports opened, not yet serving.
#[derive(Debug)]
pub struct Bound {
    server: Arc<NfsServer>,
    /// NFSv4.1 over the same exports, if served ([`Bound::serve_nfs4`]): one client
    /// and session state for TCP and RDMA.
    nfs4: Option<Arc<crate::v4::Nfs4Server>>,
    /// Clients the previous run recorded, which may reclaim (for the log).
    nfs4_reclaimers: usize,
    /// The server's budget as its TCP servers charge it.
    tcp_memory: Arc<crate::memory::TcpMemory>,
    nfs: TcpListener,
    mount: Option<TcpListener>,
    /// Our own portmapper's sockets: the same port on TCP and UDP.
    portmap: Option<(TcpListener, UdpSocket)>,
    rdma: Option<RdmaListener>,
    /// The lock manager and its sockets: NLM and NSM on TCP, NSM on UDP (same port).
    nlm: Option<(Arc<Nlm>, TcpListener, UdpSocket)>,
    registrar: Option<Registrar>,
    /// The mode asked for; with [`RpcbindMode::Auto`], `registrar` or `portmap` (or
    /// `no_portmapper`) says what it chose.
    rpcbind_mode: RpcbindMode,
    /// Why [`RpcbindMode::Auto`] ended up with neither rpcbind nor our own
    /// portmapper: the error binding the portmapper's port.
    no_portmapper: Option<(SocketAddr, std::io::Error)>,
    /// [`Config::tcp_read_data`].
    tcp_read_data: oncrpc::tcp::FileData,
    /// [`Config::tcp_splice_writes`].
    tcp_splice_writes: bool,
    /// The reply cache's byte bound, reserved from the memory budget while serving.
    reply_cache_charge: Option<rpcrdma::memory::Charge>,
    /// [`Config::nfs4_id_domain`].
    nfs4_id_domain: Option<String>,
    /// The metrics listener ([`Config::metrics`]).
    metrics: Option<TcpListener>,
}

impl Bound {
    /// Opens the exports and binds the listeners.
    pub async fn new(config: &Config) -> std::io::Result<Bound> {
        let budget = rpcrdma::memory::MemoryBudget::new(config.max_memory);
        let mut server = NfsServer::new(Table::open(&config.exports, &config.handles, None)?)
            .with_memory(budget.clone());
        let reply_cache_charge = match crate::drc::reserve(config.drc_entries, &budget) {
            Some((cache, charge)) => {
                server = server.with_reply_cache(cache);
                Some(charge)
            }
            None => None,
        };
        server.inline_metadata = config.inline_metadata;
        let server = Arc::new(server);
        // Connections never take the room of one whole call record.
        let tcp_memory = Arc::new(crate::memory::TcpMemory::new(
            server.memory.clone(),
            oncrpc::tcp::DEFAULT_MAX_RECORD as u64,
        ));
        let listen = |what: &'static str, port| async move {
            let addr = SocketAddr::new(config.bind, port);
            TcpListener::bind(addr).await.map_err(|e| {
                // knfsd holds 2049 and 20048 when nfs-server.service runs: say so
                // rather than leave "address in use" to be puzzled over.
                let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another NFS server, such as the kernel's nfs-server.service, may \
                     hold it: stop it, or give nfsd other ports)"
                } else {
                    ""
                };
                std::io::Error::new(e.kind(), format!("{what} tcp {addr}: {e}{hint}"))
            })
        };
        let nfs = listen("NFS", config.nfs_port).await?;
        let nfs_port = nfs.local_addr()?.port();
        let mount = if config.mount_port == config.nfs_port && config.nfs_port != 0 {
            None
        } else {
            Some(listen("MOUNT", config.mount_port).await?)
        };
        let _ = nfs_port;
        let nlm = match &config.nlm {
            Some(c) => {
                let nlm = Arc::new(Nlm::new(c.clone())?);
                let addr = SocketAddr::new(config.bind, c.port);
                let tcp = TcpListener::bind(addr)
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("NLM tcp {addr}: {e}")))?;
                let udp = UdpSocket::bind(tcp.local_addr()?)
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("NSM udp {addr}: {e}")))?;
                Some((nlm, tcp, udp))
            }
            None => None,
        };
        let metrics = match config.metrics {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(e.kind(), format!("metrics listener {addr}: {e}"))
            })?),
            None => None,
        };
        let mut no_portmapper = None;
        let pm_addr = SocketAddr::new(config.bind, config.portmap_port);
        let (registrar, portmap) = match config.rpcbind {
            RpcbindMode::Register => (Some(Registrar::local()), None),
            RpcbindMode::Serve => (None, Some(bind_portmapper(pm_addr).await?)),
            RpcbindMode::Off => (None, None),
            RpcbindMode::Auto if rpcbind_answers().await => (Some(Registrar::local()), None),
            RpcbindMode::Auto => match bind_portmapper(pm_addr).await {
                Ok(l) => (None, Some(l)),
                Err(e) => {
                    no_portmapper = Some((pm_addr, e));
                    (None, None)
                }
            },
        };
        Ok(Bound {
            nfs4: None,
            nfs4_reclaimers: 0,
            server,
            tcp_memory,
            nfs,
            mount,
            portmap,
            rdma: None,
            nlm,
            registrar,
            rpcbind_mode: config.rpcbind,
            no_portmapper,
            tcp_read_data: config.tcp_read_data,
            tcp_splice_writes: config.tcp_splice_writes,
            reply_cache_charge,
            nfs4_id_domain: config.nfs4_id_domain.clone(),
            metrics,
        })
    }

    /// Serves NFS version 4 (minor version 1, [`crate::v4`]) beside version 3 on the
    /// NFS TCP port and on the NFS/RDMA listener added after this (call it before
    /// [`Bound::listen_rdma`]), without restart recovery (no client may reclaim after
    /// a restart: [`Bound::serve_nfs4_recoverable`] keeps them). Not served unless
    /// called (the binary calls it unless `--no-nfs4`): a Linux mount without `vers=`
    /// then settles on NFSv3.
    pub fn serve_nfs4(&mut self) {
        if self.nfs4.is_none() {
            let nlm = self.nlm.as_ref().map(|(n, _, _)| n.clone());
            let mut v4 = crate::v4::Nfs4Server::new(self.server.clone(), nlm);
            v4.set_id_domain(self.nfs4_id_domain.clone());
            self.nfs4 = Some(Arc::new(v4));
        }
    }

    /// [`Bound::serve_nfs4`], keeping the clients that may reclaim after a restart in
    /// `state_dir` ([`crate::v4::records`]); if the previous run left some, the grace
    /// period starts now.
    pub fn serve_nfs4_recoverable(&mut self, state_dir: &std::path::Path) -> std::io::Result<()> {
        if self.nfs4.is_none() {
            let nlm = self.nlm.as_ref().map(|(n, _, _)| n.clone());
            let (mut v4, n) =
                crate::v4::Nfs4Server::with_state_dir(self.server.clone(), nlm.clone(), state_dir)?;
            v4.set_id_domain(self.nfs4_id_domain.clone());
            let v4 = Arc::new(v4);
            if let Some(nlm) = nlm {
                // NFSv3 clients wait for NFSv4.1's reclaims too (one lock table). Weak:
                // the lock manager does not keep the NFSv4.1 server alive.
                let weak = Arc::downgrade(&v4);
                nlm.share_grace(Box::new(move || {
                    weak.upgrade().is_some_and(|v4| v4.grace_left().is_some())
                }));
            }
            self.nfs4_reclaimers = n;
            self.nfs4 = Some(v4);
        }
        Ok(())
    }

    /// Adds the NFS/RDMA listener (NFS only: RFC 8267 binds no MOUNT), bound now,
    /// served and registered (netid "rdma") by [`Bound::serve`].
    pub async fn listen_rdma(&mut self, opts: &RdmaOptions) -> std::io::Result<()> {
        self.rdma = Some(RdmaListener::bind(self.server.clone(), self.nfs4.clone(), opts).await?);
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

    /// The duplicate request cache's counters, if there is a cache.
    pub fn reply_cache_stats(&self) -> Option<oncrpc::CacheStats> {
        self.server.reply_cache.as_ref().map(|c| c.stats())
    }

    /// Bytes of the memory budget reserved for the duplicate request cache.
    pub fn reply_cache_reserved(&self) -> u64 {
        self.reply_cache_charge.as_ref().map_or(0, |c| c.bytes())
    }

    /// What the TCP servers charge to the memory budget, and the connections refused.
    pub fn tcp_memory(&self) -> &Arc<crate::memory::TcpMemory> {
        &self.tcp_memory
    }

    /// Where NFS listens.
    pub fn nfs_addr(&self) -> std::io::Result<SocketAddr> {
        self.nfs.local_addr()
    }

    /// Where our own portmapper listens (TCP and UDP), if we serve one.
    pub fn portmap_addr(&self) -> Option<SocketAddr> {
        self.portmap.as_ref().and_then(|(t, _)| t.local_addr().ok())
    }

    /// The lock manager, if locking is served.
    pub fn nlm(&self) -> Option<&Arc<Nlm>> {
        self.nlm.as_ref().map(|(n, _, _)| n)
    }

    /// Where NLM and NSM listen (TCP; NSM on UDP too), if locking is served.
    pub fn nlm_addr(&self) -> Option<SocketAddr> {
        self.nlm.as_ref().and_then(|(_, t, _)| t.local_addr().ok())
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
            lines.push(format!("NFS listening on tcp {a}"));
        }
        if let Ok(a) = self.mount_addr() {
            lines.push(format!("MOUNT v3 listening on tcp {a}"));
        }
        match &self.rdma {
            Some(r) => lines.push(format!(
                "NFS listening on rdma {} ({}) via {}{}",
                r.local_addr(),
                r.versions(),
                r.provider(),
                if r.on_verbs() {
                    format!(
                        ", connections on {} thread(s) of their own (nfsd-rdma)",
                        crate::rdma::DEVICE_THREADS
                    )
                } else {
                    String::new()
                }
            )),
            None => lines.push("NFS/RDMA: off".to_string()),
        }
        lines.push(match &self.nfs4 {
            Some(v4) => format!(
                "NFS v4.1 on the NFS ports beside v3 [--no-nfs4 turns it off] (sessions, opens, READ, WRITE, \
                 locks; no delegations); v4.0 and v4.2 answer NFS4ERR_MINOR_VERS_MISMATCH; {}; {}",
                match v4.ids().domain() {
                    Some(d) => format!("owners as name@{d} [--idmap-domain]"),
                    None => "owners as numeric ids [--idmap-domain]".to_string(),
                },
                match v4.grace_left() {
                    Some(t) => format!(
                        "grace period {} s for {} client(s) to reclaim",
                        t.as_secs(),
                        self.nfs4_reclaimers
                    ),
                    None => "no grace period".to_string(),
                }
            ),
            None => "NFS v4: off [--no-nfs4] (answered PROG_MISMATCH)".to_string(),
        });
        lines.push(self.describe_nlm());
        lines.push(self.describe_rpcbind());
        lines.push(
            match self.metrics.as_ref().and_then(|l| l.local_addr().ok()) {
                Some(a) => format!("metrics on http://{a}/metrics [--metrics]"),
                None => "metrics: off [--metrics]".to_string(),
            },
        );
        let limit = self.server.memory.limit();
        lines.push(format!(
            "memory budget {} MiB [--max-memory]: RDMA connections' buffers, WRITE data \
             pulled by RDMA Read, TCP connections and call records, READ buffers",
            limit >> 20
        ));
        lines.push(match &self.server.reply_cache {
            Some(cache) => format!(
                "duplicate request cache: {} entries [--drc-entries], {} MiB reserved from \
                 the memory budget, for NFS SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, \
                 REMOVE, RMDIR, RENAME, LINK and the NLM calls that change locks",
                cache.limits().max_entries,
                self.reply_cache_reserved() >> 20
            ),
            None => "duplicate request cache: off [--drc-entries]".to_string(),
        });
        lines.push(if self.server.inline_metadata {
            "GETATTR, LOOKUP, ACCESS, CREATE, REMOVE, READ over TCP (and NFSv4.1 COMPOUNDs \
             of them, OPEN and CLOSE) on the async workers (NFS/RDMA on verbs: on the \
             device thread or a delegate thread on its CPU) [--no-inline-metadata]"
                .to_string()
        } else {
            "every call on the blocking pool [--no-inline-metadata]".to_string()
        });
        lines.push(
            match self.tcp_read_data {
                oncrpc::tcp::FileData::Sendfile => {
                    "READ data over TCP by sendfile from the page cache [--tcp-read-data]"
                }
                oncrpc::tcp::FileData::Copy => {
                    "READ data over TCP copied once, from a mapping of the file [--tcp-read-data]"
                }
            }
            .to_string(),
        );
        lines.push(
            if self.tcp_splice_writes {
                "WRITE data over TCP by splice, socket to pipes to file [--tcp-write-data]"
            } else {
                "WRITE data over TCP read with its call, then written [--tcp-write-data]"
            }
            .to_string(),
        );
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

    /// The startup line about locking: where NLM and NSM listen, our NSM state, and
    /// the grace period after a restart with clients to notify.
    fn describe_nlm(&self) -> String {
        let (Some(nlm), Some(addr)) = (self.nlm(), self.nlm_addr()) else {
            return "locking: off (no NLM; clients must mount with nolock)".to_string();
        };
        let clients = nlm.nsm.previous().len();
        let grace = match nlm.grace_left() {
            Some(g) => format!(
                "grace period {} s: only reclaims granted; SM_NOTIFY to {clients} client(s) \
                 of the previous run",
                g.as_secs_f64().round()
            ),
            None => "no grace period (no client held locks before)".to_string(),
        };
        format!(
            "NLM v4 and NSM v1 listening on tcp {addr} (NSM also on udp), NSM state {}, {grace}",
            nlm.nsm.state
        )
    }

    /// The startup line that says how clients find our ports: through the host's
    /// rpcbind, through our own portmapper, or not at all (then they must name them).
    fn describe_rpcbind(&self) -> String {
        let programs = match (self.rdma.is_some(), self.nlm.is_some()) {
            (true, true) => "NFS, MOUNT, NLM and NSM (tcp), NSM (udp), NFS (rdma)",
            (true, false) => "NFS and MOUNT (tcp), NFS (rdma)",
            (false, true) => "NFS, MOUNT, NLM and NSM (tcp), NSM (udp)",
            (false, false) => "NFS and MOUNT (tcp)",
        };
        if let Some(r) = &self.registrar {
            return format!(
                "rpcbind: registering {programs} with the host's rpcbind at {}{}",
                r.addr,
                if self.rpcbind_mode == RpcbindMode::Auto {
                    " (it answered)"
                } else {
                    ""
                }
            );
        }
        if let Some(a) = self.portmap_addr() {
            return format!(
                "rpcbind: serving our own portmapper (v2, rpcbind v3/v4) on tcp and udp {a}, listing \
                 {programs}{}",
                if self.rpcbind_mode == RpcbindMode::Auto {
                    " (no rpcbind answered on 127.0.0.1:111)"
                } else {
                    ""
                }
            );
        }
        let ports = match (self.nfs_addr(), self.mount_addr()) {
            (Ok(n), Ok(m)) => format!("port={},mountport={}", n.port(), m.port()),
            _ => "port= and mountport=".to_string(),
        };
        match &self.no_portmapper {
            Some((addr, e)) => format!(
                "rpcbind: none answered on 127.0.0.1:111 and our own portmapper cannot listen \
                 on {addr} ({e}): registered nowhere, so clients must name the ports \
                 ({ports}), or start rpcbind before nfsd"
            ),
            None => format!(
                "rpcbind: off (--rpcbind off): registered nowhere, so clients must name the \
                 ports ({ports})"
            ),
        }
    }

    /// Serves until `shutdown` completes; then calls in flight finish, replies are
    /// sent, registrations are removed, and this returns.
    pub async fn serve(mut self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        // Issue 16: TCP connections and the call records they bring are charged to
        // the one budget too (NFS, MOUNT, NLM; not the portmapper's few bytes).
        let config = ServerConfig {
            rpcbind: self.registrar.clone(),
            memory: Some(self.tcp_memory.clone()),
            file_data: self.tcp_read_data,
            call_data: self.tcp_splice_writes.then(oncrpc::tcp::Pipes::default),
            ..ServerConfig::default()
        };
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(listener) = self.metrics.take() {
            let sources = crate::metrics::Sources {
                nfs: self.server.clone(),
                tcp: config.stats.clone(),
                rdma: self.rdma_stats(),
            };
            let stop = stopped(stop_rx.clone());
            tasks.spawn(async move {
                crate::metrics::serve(listener, sources, stop).await;
                Ok(())
            });
        }
        let nfs_service = Arc::new(NfsService::new(self.server.clone()));
        let mount_service = Arc::new(MountService::new(self.server.clone()));
        // Held until every server below has stopped.
        let _reply_cache_charge = self.reply_cache_charge.take();
        let mut nfs_dispatcher = self.server.dispatcher();
        nfs_dispatcher
            .register(NFS_PROGRAM, [NFS_V3], nfs_service)
            .map_err(std::io::Error::other)?;
        let mut nfs_versions = vec![NFS_V3];
        if let Some(v4) = &self.nfs4 {
            nfs_dispatcher
                .register(
                    NFS_PROGRAM,
                    [nfs4::NFS_V4],
                    Arc::new(Nfs4Service::new(v4.clone())),
                )
                .map_err(std::io::Error::other)?;
            nfs_versions.push(nfs4::NFS_V4);
        }
        let mut table = Vec::new();
        for &vers in &nfs_versions {
            table.push(Registration {
                prog: NFS_PROGRAM,
                vers,
                netid: "tcp",
                addr: self.nfs.local_addr()?,
            });
        }
        table.push(Registration {
            prog: MOUNT_PROGRAM,
            vers: MOUNT_V3,
            netid: "tcp",
            addr: self.mount_addr()?,
        });
        let rdma_threads = self
            .rdma
            .as_ref()
            .and_then(RdmaListener::device_threads)
            .cloned();
        if let Some(rdma) = self.rdma {
            let addr = rdma.local_addr();
            for &vers in &nfs_versions {
                table.push(Registration {
                    prog: NFS_PROGRAM,
                    vers,
                    netid: if addr.is_ipv4() {
                        rpcrdma_transport::NETID_RDMA
                    } else {
                        rpcrdma_transport::NETID_RDMA6
                    },
                    addr,
                });
            }
            tasks.spawn(rdma.serve(self.registrar.clone(), stopped(stop_rx.clone())));
        }
        match self.mount {
            Some(listener) => {
                let mut d = self.server.counting_dispatcher();
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
        let mut nsm_udp = None;
        if let Some((nlm, tcp, udp)) = self.nlm {
            let addr = tcp.local_addr()?;
            for (prog, vers, netid) in [
                (NLM_PROGRAM, NLM_V4, "tcp"),
                (NSM_PROGRAM, NSM_V1, "tcp"),
                (NSM_PROGRAM, NSM_V1, "udp"),
            ] {
                table.push(Registration {
                    prog,
                    vers,
                    netid,
                    addr,
                });
            }
            let nsm = Arc::new(NsmService::new(nlm.clone()));
            let mut d = self.server.dispatcher();
            d.register(
                NLM_PROGRAM,
                [NLM_V4],
                Arc::new(NlmService::new(nlm.clone(), self.server.clone())),
            )
            .map_err(std::io::Error::other)?;
            d.register(NSM_PROGRAM, [NSM_V1], nsm.clone())
                .map_err(std::io::Error::other)?;
            tasks.spawn(Server::new(d, config.clone()).serve(tcp, stopped(stop_rx.clone())));
            // NSM on UDP: rebooted clients' sm-notify sends SM_NOTIFY over UDP.
            let mut d = self.server.counting_dispatcher();
            d.register(NSM_PROGRAM, [NSM_V1], nsm)
                .map_err(std::io::Error::other)?;
            if let Some(r) = &self.registrar {
                if let Err(e) = r.set_all(&[(NSM_PROGRAM, NSM_V1)], "udp", addr).await {
                    tracing::warn!(error = %e, "cannot register NSM on udp with rpcbind");
                }
                nsm_udp = Some(addr);
            }
            tasks.spawn(oncrpc::udp::serve_udp(
                udp,
                Arc::new(d),
                stopped(stop_rx.clone()),
            ));
            nlm.notify_clients();
        }
        let s = Server::new(nfs_dispatcher, config);
        tasks.spawn(s.serve(self.nfs, stopped(stop_rx.clone())));
        if let Some((listener, udp)) = self.portmap {
            let portmapper = Arc::new(Portmapper::new(table, listener.local_addr()?));
            let dispatcher = || {
                let mut d = Dispatcher::new();
                d.register(PMAP_PROGRAM, [2, 3, 4], portmapper.clone())
                    .map_err(std::io::Error::other)?;
                Ok::<_, std::io::Error>(d)
            };
            let d = Arc::new(dispatcher()?);
            tasks.spawn(oncrpc::udp::serve_udp(udp, d, stopped(stop_rx.clone())));
            let s = Server::new(dispatcher()?, ServerConfig::default());
            tasks.spawn(s.serve(listener, stopped(stop_rx.clone())));
        }
        // Idle READ buffers go back after a quiet period (issue 16), until we stop;
        // on a verbs device's threads, since that deregisters them.
        let trim = rpcrdma_transport::release_when_quiet(
            self.server.read_buffers.clone(),
            rpcrdma_transport::QUIET_PERIOD,
        );
        let trim = match rdma_threads {
            Some(threads) => threads.spawn(trim),
            None => tokio::spawn(trim),
        };
        let age = tokio::spawn(self.server.clone().age_dir_descriptors());
        // Stop everything on the shutdown signal, or when one server fails.
        let registrar = self.registrar.clone();
        let mut result = Ok(());
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut shutdown => {}
            Some(done) = tasks.join_next() => {
                result = flatten(done);
            }
        }
        let _ = stop_tx.send(true);
        trim.abort();
        age.abort();
        while let Some(done) = tasks.join_next().await {
            if result.is_ok() {
                result = flatten(done);
            }
        }
        if let (Some(r), Some(addr)) = (registrar, nsm_udp) {
            let _ = r.unset_all(&[(NSM_PROGRAM, NSM_V1)], "udp", addr).await;
        }
        if let Some(cache) = &self.server.reply_cache {
            tracing::info!(stats = %cache.stats(), "duplicate request cache");
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
                "export {} to {}, fsid {:#018x}, {}",
                s.export.path.display(),
                s.clients,
                s.export.id,
                s.export.mode
            )
        })
        .collect()
}

fn flatten(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> std::io::Result<()> {
    r.map_err(std::io::Error::other)?
}

/// Our own portmapper's sockets, TCP and UDP on the same port: the Linux kernel asks
/// over TCP for TCP and RDMA mounts, but mount.nfs asks for MOUNT over UDP first and
/// waits three seconds when nothing answers there (see `oncrpc::udp`).
async fn bind_portmapper(addr: SocketAddr) -> std::io::Result<(TcpListener, UdpSocket)> {
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("tcp {addr}: {e}")))?;
    let udp = UdpSocket::bind(tcp.local_addr()?)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("udp {addr}: {e}")))?;
    Ok((tcp, udp))
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
