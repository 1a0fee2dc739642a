//! Our `nfsd` on a temporary export, on unprivileged ports, inside the test's runtime.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nfsclient::{Mount, MountOptions};
use nfsd::server::{Bound, Config, RpcbindMode};
use nfsd::Squash;
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
    stop: Option<oneshot::Sender<()>>,
}

impl TestServer {
    /// Serves a fresh temporary directory (read-only if asked), with our own
    /// portmapper when `portmap` is set.
    pub async fn start(tag: &str, read_only: bool, portmap: bool) -> TestServer {
        let dir = TempDir::new(tag);
        TestServer::start_on(dir, read_only, portmap).await
    }

    pub async fn start_on(dir: TempDir, read_only: bool, portmap: bool) -> TestServer {
        let config = Config {
            exports: vec![dir.path().to_path_buf()],
            read_only,
            bind: Ipv4Addr::LOCALHOST.into(),
            nfs_port: 0,
            mount_port: 0,
            rpcbind: if portmap {
                RpcbindMode::Serve
            } else {
                RpcbindMode::Off
            },
            portmap_port: 0,
            // The tests run as root: act as the caller (no root squash), so AUTH_SYS
            // uids other than 0 meet real permission checks.
            squash: Squash::None,
            anon_uid: 65534,
            anon_gid: 65534,
        };
        let bound = Bound::new(&config).await.expect("nfsd binds");
        let nfs = bound.nfs_addr().unwrap();
        let mount = bound.mount_addr().unwrap();
        // `Bound` reports the portmapper's address only in its startup lines.
        let portmap = bound.describe().iter().find_map(|l| {
            l.strip_prefix("portmapper (v2, rpcbind v3/v4) listening on tcp ")
                .map(|a| a.parse().unwrap())
        });
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(bound.serve(async move {
            let _ = rx.await;
        }));
        TestServer {
            dir,
            nfs,
            mount,
            portmap,
            stop: Some(tx),
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

impl Drop for TestServer {
    fn drop(&mut self) {
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
