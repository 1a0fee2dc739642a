//! Our `nfsd` on a temporary export, on unprivileged ports, inside the test's runtime.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nfsclient::{Mount, MountOptions};
use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::{ExportLine, ExportOptions, Squash};
use tokio::sync::oneshot;

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "nfsclient-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p.canonicalize().unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The export path as MNT wants it.
    pub fn export(&self) -> String {
        self.0.to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A running server; shut down on drop.
pub struct TestServer {
    pub dir: TempDir,
    pub nfs: SocketAddr,
    pub mount: SocketAddr,
    pub portmap: Option<SocketAddr>,
    /// NFS over RPC-over-RDMA (iWARP provider), when started with it.
    pub rdma: Option<SocketAddr>,
    /// The RDMA server's per-connection counters.
    pub rdma_stats: Option<rpcrdma_transport::StatsRegistry>,
    stop: Option<oneshot::Sender<()>>,
    rdma_task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Serves a fresh temporary directory (read-only if asked), with our own
    /// portmapper when `portmap` is set.
    pub async fn start(tag: &str, read_only: bool, portmap: bool) -> TestServer {
        let dir = TempDir::new(tag);
        TestServer::start_on(dir, read_only, portmap).await
    }

    /// Like [`TestServer::start`], also serving NFS over RPC-over-RDMA (the userspace
    /// iWARP provider) from the same NFS server state; MOUNT stays on TCP.
    pub async fn start_rdma(tag: &str) -> TestServer {
        let dir = TempDir::new(tag);
        TestServer::start_inner(dir, false, false, true).await
    }

    pub async fn start_on(dir: TempDir, read_only: bool, portmap: bool) -> TestServer {
        TestServer::start_inner(dir, read_only, portmap, false).await
    }

    async fn start_inner(dir: TempDir, read_only: bool, portmap: bool, rdma: bool) -> TestServer {
        let config = Config {
            // The tests run as root: act as the caller (no root squash), so AUTH_SYS
            // uids other than 0 meet real permission checks.
            exports: vec![ExportLine::everyone(
                dir.path(),
                ExportOptions {
                    read_only,
                    squash: Squash::None,
                    secure: false,
                    ..ExportOptions::default()
                },
            )],
            bind: Ipv4Addr::LOCALHOST.into(),
            nfs_port: 0,
            mount_port: 0,
            rpcbind: if portmap {
                RpcbindMode::Serve
            } else {
                RpcbindMode::Off
            },
            portmap_port: 0,
            handles: nfsd::HandleConfig::new(key_for(dir.path())),
            nlm: None,
            max_memory: nfsd::memory::default_max_memory(),
            inline_metadata: true,
            tcp_read_data: oncrpc::tcp::FileData::Sendfile,
            tcp_splice_writes: true,
            drc_entries: None,
            nfs4_id_domain: None,
            metrics: None,
        };
        let bound = Bound::new(&config).await.expect("nfsd binds");
        let nfs = bound.nfs_addr().unwrap();
        let mount = bound.mount_addr().unwrap();
        let portmap = bound.portmap_addr();
        let (rdma, rdma_stats, rdma_task) = if rdma {
            let (addr, stats, task) = serve_rdma(bound.server().clone()).await;
            (Some(addr), Some(stats), Some(task))
        } else {
            (None, None, None)
        };
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(bound.serve(async move {
            let _ = rx.await;
        }));
        TestServer {
            dir,
            nfs,
            mount,
            portmap,
            rdma,
            rdma_stats,
            stop: Some(tx),
            rdma_task,
        }
    }

    /// Mount options reaching this server directly (no portmapper).
    pub fn options(&self) -> MountOptions {
        MountOptions {
            nfs_port: Some(self.nfs.port()),
            mount_port: Some(self.mount.port()),
            timeout: Duration::from_secs(20),
            ..MountOptions::default()
        }
    }

    pub async fn mount(&self) -> Mount {
        self.mount_with(&self.options()).await
    }

    pub async fn mount_with(&self, opts: &MountOptions) -> Mount {
        Mount::mount("127.0.0.1", &self.dir.export(), opts)
            .await
            .expect("MNT + FSINFO")
    }

    /// Stops the server and hands back its directory (for a restart on it).
    pub fn stop(mut self) -> TempDir {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        std::mem::replace(&mut self.dir, TempDir(PathBuf::new()))
    }

    pub fn local(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// NFS (only: RFC 8267 binds no MOUNT) over RPC-over-RDMA on 127.0.0.1, any port.
async fn serve_rdma(
    server: std::sync::Arc<nfsd::NfsServer>,
) -> (
    SocketAddr,
    rpcrdma_transport::StatsRegistry,
    tokio::task::JoinHandle<()>,
) {
    use std::sync::Arc;
    let mut d = oncrpc::Dispatcher::new();
    d.register(
        nfsclient::nfs3::NFS_PROGRAM,
        [nfsclient::nfs3::NFS_V3],
        Arc::new(nfsd::NfsService::new(server)),
    )
    .unwrap();
    let provider = iwarp::IwarpProvider::new(iwarp::IwarpConfig {
        first_send_delay: Duration::ZERO,
        ..iwarp::IwarpConfig::default()
    });
    let rs = rpcrdma_transport::RdmaServer::new(
        provider,
        Arc::new(d),
        Arc::new(nfsclient::rdma::Nfs3RdmaBinding),
        // What `nfsd` runs by default: both versions, reliable reply offered.
        nfsd::rdma::RdmaOptions::server_transport(true),
    );
    let listener = rs.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = rdma::Listener::local_addr(&listener).unwrap();
    let stats = rs.stats();
    let task = tokio::spawn(async move {
        let _ = rs.serve(listener).await;
    });
    (addr, stats, task)
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.rdma_task.take() {
            t.abort();
        }
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A recognisable byte pattern (not periodic in 2^n).
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// The handle key of a test server exporting `dir`: the same for the same directory,
/// so that a server restarted on it ([`TestServer::start_on`]) takes the handles the
/// first one gave out, as nfsd does with its key file.
fn key_for(dir: &std::path::Path) -> nfsd::HandleKey {
    let mut key = [0x5au8; nfsd::handle_key::KEY_LEN];
    for (i, b) in dir.as_os_str().as_encoded_bytes().iter().enumerate() {
        key[i % key.len()] ^= b.rotate_left(i as u32 % 8);
    }
    nfsd::HandleKey::from_bytes(&key)
}
