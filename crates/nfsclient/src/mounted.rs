//! A mounted export: MNT over TCP for the root handle (RFC 1813 Appendix I), FSINFO
//! for transfer sizes (§3.3.19), then path walking and file helpers over the NFS
//! connection (TCP or RDMA).

use std::net::SocketAddr;
use std::time::Duration;

use nfs3::dir::CreateHow3;
use nfs3::fs::FsInfo3ResOk;
use nfs3::{Fattr3, Ftype3, NfsFh3, NfsStat3, Sattr3, StableHow, MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::{AuthSysParms, ClientConfig, OpaqueAuth};
use xdr::Bytes;

use crate::error::{Error, ProtocolViolation, Result};
use crate::io::{FileReader, FileWriter, IoOptions};
use crate::mount::MountClient;
use crate::nfs::NfsClient;
use crate::portmap::{getport, PORTMAP_PORT};
use crate::readdir::{DirReader, ReadDirSizes};
use rpcrdma_transport::{RdmaConfig, StatsRegistry};

use crate::transport::{
    choose_rdma_provider, rpc_client, rpc_client_with, RdmaProvider, TransportKind,
    MAX_REPLY_RECORD,
};

/// Room left in a reply record for everything but READ data.
const REPLY_OVERHEAD: u32 = 64 * 1024;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Transport for NFS (MOUNT always uses TCP).
    pub transport: TransportKind,
    /// NFS port; `None`: the transport's default (2049 for TCP, 20049 for RDMA).
    pub nfs_port: Option<u16>,
    /// MOUNT port; `None`: ask the portmapper.
    pub mount_port: Option<u16>,
    /// Portmapper port, used only when `mount_port` is `None`.
    pub portmap_port: u16,
    /// Credential of every call (AUTH_SYS of this process by default).
    pub cred: OpaqueAuth,
    /// Time one call may take.
    pub timeout: Duration,
    /// Largest READ size wanted (capped by FSINFO `rtmax`); `None`: the server's
    /// preferred size `rtpref`.
    pub rsize: Option<u32>,
    /// Largest WRITE size wanted (capped by `wtmax`); `None`: `wtpref`.
    pub wsize: Option<u32>,
    /// READs or WRITEs in flight at once.
    pub depth: usize,
    /// RPC-over-RDMA settings (inline thresholds, credits), used with
    /// [`TransportKind::Rdma`].
    pub rdma: RdmaConfig,
    /// RDMA provider (default: auto, [`crate::transport::choose_rdma_provider`]).
    pub rdma_provider: RdmaProvider,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            transport: TransportKind::Tcp,
            nfs_port: None,
            mount_port: None,
            portmap_port: PORTMAP_PORT,
            cred: auth_sys_self().to_opaque_auth(),
            timeout: Duration::from_secs(30),
            rsize: None,
            wsize: None,
            depth: IoOptions::default().depth,
            rdma: RdmaConfig::default(),
            rdma_provider: RdmaProvider::Auto,
        }
    }
}

/// AUTH_SYS parameters of this process: effective uid and gid, up to 16
/// supplementary groups (RFC 5531 Appendix A: `gids<16>`), and the host name.
pub fn auth_sys_self() -> AuthSysParms {
    let uname = rustix::system::uname();
    let mut machinename = uname.nodename().to_bytes().to_vec();
    machinename.truncate(255); // RFC 5531 Appendix A: "string machinename<255>"
    let groups: Vec<u32> = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    // RFC 5531 Appendix A: "unsigned int gids<16>": the first 16.
    let gids = oncrpc::Gids::truncating(&groups);
    AuthSysParms {
        stamp: std::process::id(),
        machinename: Bytes::from(machinename),
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        gids,
    }
}

/// A mounted export.
#[derive(Debug, Clone)]
pub struct Mount {
    nfs: NfsClient,
    mount: MountClient,
    export: Bytes,
    root: NfsFh3,
    fsinfo: FsInfo3ResOk,
    io: IoOptions,
    dir_sizes: ReadDirSizes,
    rdma_stats: Option<StatsRegistry>,
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "host has no address").into()
        })
}

/// A MOUNT client for `host` (TCP; the port from the options or the portmapper).
async fn mount_client(host: &str, opts: &MountOptions) -> Result<MountClient> {
    let config = rpc_config(opts);
    let mount_port = match opts.mount_port {
        Some(p) => p,
        None => {
            let pm = resolve(host, opts.portmap_port).await?;
            getport(pm, MOUNT_PROGRAM, MOUNT_V3, config.clone()).await?
        }
    };
    let addr = resolve(host, mount_port).await?;
    Ok(MountClient::new(rpc_client(
        TransportKind::Tcp,
        addr,
        config,
    )?))
}

/// An NFS client for `host` over the chosen transport.
async fn nfs_client(host: &str, opts: &MountOptions) -> Result<(NfsClient, Option<StatsRegistry>)> {
    let port = opts
        .nfs_port
        .unwrap_or_else(|| opts.transport.default_nfs_port());
    let addr = resolve(host, port).await?;
    let provider = if opts.transport == TransportKind::Rdma {
        let (provider, why) = choose_rdma_provider(opts.rdma_provider, addr).await;
        tracing::info!(%addr, provider = %why, "NFS over RDMA");
        provider
    } else {
        RdmaProvider::Iwarp
    };
    let (rpc, stats) =
        rpc_client_with(opts.transport, addr, rpc_config(opts), &opts.rdma, provider)?;
    Ok((NfsClient::new(rpc), stats))
}

/// The RPC settings of every client a mount makes. A server that refuses the first
/// connection fails the call at once (no one listens there; waiting out the timeout
/// only delays the same answer); a mounted connection that breaks later is
/// re-established as usual.
fn rpc_config(opts: &MountOptions) -> ClientConfig {
    ClientConfig {
        timeout: opts.timeout,
        cred: opts.cred.clone(),
        fail_if_unreachable: true,
        ..ClientConfig::default()
    }
}

impl Mount {
    /// Mounts `export` on `host`: MNT (over TCP, at `mount_port` or the port the
    /// portmapper gives), then FSINFO on the root to size READs and WRITEs.
    pub async fn mount(host: &str, export: &str, opts: &MountOptions) -> Result<Mount> {
        let mount = mount_client(host, opts).await?;
        let mounted = mount.mnt(export.as_bytes()).await?;
        let (nfs, stats) = nfs_client(host, opts).await?;
        let mut m = Mount::with_root(nfs, mount, export, mounted.root, opts).await?;
        m.rdma_stats = stats;
        Ok(m)
    }

    /// Mounts the longest prefix of `path` that MNT accepts and returns the mount
    /// and the rest of the path (relative to the mounted directory), for targets
    /// such as `host:/srv/export/dir/file` that do not say where the export ends.
    ///
    /// At least `keep` trailing components stay in the rest: 1 for operations on a
    /// directory entry (remove, mkdir), which a server that mounts subdirectories
    /// would otherwise turn into operations on the mount's root.
    ///
    /// A prefix MNT refuses with MNT3ERR_NOENT, NOTDIR or ACCES is skipped in favour
    /// of a shorter one; any other failure ends the search. When no prefix mounts,
    /// the error of the longest one tried is returned.
    pub async fn mount_longest(
        host: &str,
        path: &str,
        keep: usize,
        opts: &MountOptions,
    ) -> Result<(Mount, String)> {
        use nfs3::mount::MountStat3;
        let comps: Vec<&str> = components(path).collect();
        if comps.len() < keep {
            return Err(Error::InvalidArgument("path names the export root"));
        }
        let mount = mount_client(host, opts).await?;
        let mut whole_path_err = None;
        for n in (0..=comps.len() - keep).rev() {
            let export = format!("/{}", comps[..n].join("/"));
            match mount.mnt(export.as_bytes()).await {
                Ok(m) => {
                    let (nfs, stats) = nfs_client(host, opts).await?;
                    let mut mnt = Mount::with_root(nfs, mount, &export, m.root, opts).await?;
                    mnt.rdma_stats = stats;
                    return Ok((mnt, comps[n..].join("/")));
                }
                Err(Error::Mount(
                    s @ (MountStat3::MNT3ERR_NOENT
                    | MountStat3::MNT3ERR_NOTDIR
                    | MountStat3::MNT3ERR_ACCES),
                )) => {
                    whole_path_err.get_or_insert(s);
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Mount(
            whole_path_err.unwrap_or(MountStat3::MNT3ERR_NOENT),
        ))
    }

    /// A mount from a root handle already known (MNT done elsewhere): FSINFO only.
    pub async fn with_root(
        nfs: NfsClient,
        mount: MountClient,
        export: &str,
        root: NfsFh3,
        opts: &MountOptions,
    ) -> Result<Mount> {
        let fsinfo = nfs.fsinfo(&root).await?;
        if fsinfo.rtmax == 0 || fsinfo.wtmax == 0 {
            return Err(Error::Protocol(ProtocolViolation::ZeroTransferSize));
        }
        let io = io_sizes(&fsinfo, opts);
        let dir_sizes = ReadDirSizes::from_dtpref(fsinfo.dtpref, fsinfo.rtmax);
        Ok(Mount {
            nfs,
            mount,
            export: Bytes::copy_from_slice(export.as_bytes()),
            root,
            fsinfo,
            io,
            dir_sizes,
            rdma_stats: None,
        })
    }

    /// UMNT: tells the server's MOUNT service this client is done.
    pub async fn unmount(self) -> Result<()> {
        self.mount.umnt(&self.export).await
    }

    /// The NFS procedures.
    pub fn nfs(&self) -> &NfsClient {
        &self.nfs
    }

    /// The RPC-over-RDMA counters of the NFS connection (RDMA mounts made by
    /// [`Mount::mount`] or [`Mount::mount_longest`]; `None` over TCP).
    pub fn rdma_stats(&self) -> Option<&StatsRegistry> {
        self.rdma_stats.as_ref()
    }

    /// The export's root handle.
    pub fn root(&self) -> &NfsFh3 {
        &self.root
    }

    /// The FSINFO answer for the root.
    pub fn fsinfo(&self) -> &FsInfo3ResOk {
        &self.fsinfo
    }

    /// READ/WRITE sizes and depth in use.
    pub fn io_options(&self) -> IoOptions {
        self.io
    }

    /// Changes READ/WRITE sizes and depth (sizes stay capped by `rtmax`/`wtmax`).
    pub fn set_io_options(&mut self, io: IoOptions) {
        self.io = IoOptions {
            rsize: io.rsize.clamp(1, self.fsinfo.rtmax),
            wsize: io.wsize.clamp(1, self.fsinfo.wtmax),
            ..io
        };
    }

    /// Walks `path` (relative to the export root, `/`-separated) with one LOOKUP per
    /// component and returns the last handle and its attributes. Empty components and
    /// `.` are skipped; `..` is sent to the server (which keeps it inside the export).
    /// Symbolic links are not followed (like `lstat`): a link in the middle of a path
    /// gives NFS3ERR_NOTDIR.
    pub async fn lookup_path(&self, path: &str) -> Result<(NfsFh3, Fattr3)> {
        let mut fh = self.root.clone();
        let mut attrs = None;
        for comp in components(path) {
            let ok = self.nfs.lookup(&fh, comp).await?;
            fh = ok.object;
            attrs = ok.obj_attributes;
        }
        let attrs = match attrs {
            Some(a) => a,
            None => self.nfs.getattr(&fh).await?,
        };
        Ok((fh, attrs))
    }

    /// The directory holding the last component of `path`, and that component.
    /// A path with no component (the root) is [`Error::InvalidArgument`].
    pub async fn lookup_parent<'p>(&self, path: &'p str) -> Result<(NfsFh3, &'p str)> {
        let comps: Vec<&str> = components(path).collect();
        let Some((last, dirs)) = comps.split_last() else {
            return Err(Error::InvalidArgument("path names the export root"));
        };
        let mut fh = self.root.clone();
        for comp in dirs {
            fh = self.nfs.lookup(&fh, comp).await?.object;
        }
        Ok((fh, last))
    }

    /// A pipelined reader of `fh` from `offset` for `len` bytes (`None`: to EOF).
    pub fn reader(&self, fh: &NfsFh3, offset: u64, len: Option<u64>) -> FileReader {
        FileReader::new(self.nfs.clone(), fh.clone(), offset, len, &self.io)
    }

    /// A pipelined writer to `fh` (UNSTABLE + COMMIT unless `stable` says otherwise).
    pub fn writer(&self, fh: &NfsFh3, stable: StableHow) -> FileWriter {
        FileWriter::new(self.nfs.clone(), fh.clone(), stable, &self.io)
    }

    /// A cursor over the entries of directory `dir` (READDIRPLUS when `plus`).
    pub fn read_dir(&self, dir: &NfsFh3, plus: bool) -> DirReader {
        DirReader::new(self.nfs.clone(), dir.clone(), plus, self.dir_sizes)
    }

    /// Reads a whole file into memory.
    pub async fn read_all(&self, fh: &NfsFh3) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut r = self.reader(fh, 0, None);
        while let Some((off, data)) = r.next_chunk().await? {
            debug_assert_eq!(off, out.len() as u64);
            // COPY: convenience API; the pipelined reader itself hands out slices.
            out.extend_from_slice(&data);
        }
        Ok(out)
    }

    /// Creates (or truncates to 0 bytes) the regular file at `path` with `mode`
    /// (CREATE UNCHECKED, RFC 1813 §3.3.8) and returns its handle. With `exclusive`,
    /// GUARDED instead: an existing file is NFS3ERR_EXIST.
    pub async fn create_file(&self, path: &str, mode: u32, exclusive: bool) -> Result<NfsFh3> {
        let (dir, name) = self.lookup_parent(path).await?;
        let attrs = Sattr3 {
            mode: Some(mode),
            size: Some(0),
            ..Sattr3::default()
        };
        let how = if exclusive {
            CreateHow3::Guarded(attrs)
        } else {
            CreateHow3::Unchecked(attrs)
        };
        let ok = self.nfs.create(&dir, name, how).await?;
        self.handle_or_lookup(ok.obj, &dir, name).await
    }

    /// Creates the directory at `path` with `mode`. With `parents`, also creates
    /// missing parents and accepts an existing directory (like `mkdir -p`).
    pub async fn mkdir_path(&self, path: &str, mode: u32, parents: bool) -> Result<NfsFh3> {
        let attrs = Sattr3 {
            mode: Some(mode),
            ..Sattr3::default()
        };
        if !parents {
            let (dir, name) = self.lookup_parent(path).await?;
            let ok = self.nfs.mkdir(&dir, name, &attrs).await?;
            return self.handle_or_lookup(ok.obj, &dir, name).await;
        }
        let mut fh = self.root.clone();
        for comp in components(path) {
            fh = match self.nfs.lookup(&fh, comp).await {
                Ok(ok) => match ok.obj_attributes.map(|a| a.ftype) {
                    Some(Ftype3::NF3DIR) | None => ok.object,
                    Some(_) => {
                        return Err(Error::Nfs {
                            proc: nfs3::NfsProc3::MKDIR,
                            status: NfsStat3::NFS3ERR_EXIST,
                        })
                    }
                },
                Err(e) if e.is(NfsStat3::NFS3ERR_NOENT) => {
                    let ok = self.nfs.mkdir(&fh, comp, &attrs).await?;
                    self.handle_or_lookup(ok.obj, &fh, comp).await?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(fh)
    }

    /// Removes the file (REMOVE) or, with `dir`, the empty directory (RMDIR) at
    /// `path`.
    pub async fn remove_path(&self, path: &str, dir: bool) -> Result<()> {
        let (parent, name) = self.lookup_parent(path).await?;
        if dir {
            self.nfs.rmdir(&parent, name).await?;
        } else {
            self.nfs.remove(&parent, name).await?;
        }
        Ok(())
    }

    /// RFC 1813 §3.3.8: `obj` is a `post_op_fh3`, which a server may leave out; then
    /// the handle is found with LOOKUP.
    async fn handle_or_lookup(
        &self,
        obj: Option<NfsFh3>,
        dir: &NfsFh3,
        name: &str,
    ) -> Result<NfsFh3> {
        match obj {
            Some(fh) => Ok(fh),
            None => Ok(self.nfs.lookup(dir, name).await?.object),
        }
    }
}

/// The components of a path relative to the export root: no empty ones, no `.`.
pub fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// READ and WRITE sizes from FSINFO (§3.3.19): the preferred size, or the asked one,
/// never above the maximum, nor above what a reply record can hold.
fn io_sizes(fsinfo: &FsInfo3ResOk, opts: &MountOptions) -> IoOptions {
    let record_cap = (MAX_REPLY_RECORD as u32).saturating_sub(REPLY_OVERHEAD);
    let pick = |want: Option<u32>, pref: u32, max: u32| {
        let want = want.unwrap_or(if pref == 0 { max } else { pref });
        want.clamp(1, max.max(1)).min(record_cap)
    };
    IoOptions {
        rsize: pick(opts.rsize, fsinfo.rtpref, fsinfo.rtmax),
        wsize: pick(opts.wsize, fsinfo.wtpref, fsinfo.wtmax),
        depth: opts.depth.max(1),
        ..IoOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs3::NfsTime3;

    fn fsinfo(rtmax: u32, rtpref: u32, wtmax: u32, wtpref: u32) -> FsInfo3ResOk {
        FsInfo3ResOk {
            obj_attributes: None,
            rtmax,
            rtpref,
            rtmult: 4096,
            wtmax,
            wtpref,
            wtmult: 4096,
            dtpref: 8192,
            maxfilesize: u64::MAX,
            time_delta: NfsTime3::default(),
            properties: 0,
        }
    }

    #[test]
    fn io_sizes_follow_rfc_1813_fsinfo_preferences_and_maxima() {
        let opts = MountOptions::default();
        let io = io_sizes(&fsinfo(1 << 20, 1 << 20, 1 << 20, 65536), &opts);
        assert_eq!((io.rsize, io.wsize), (1 << 20, 65536));
        // Asked sizes are capped by rtmax/wtmax.
        let opts = MountOptions {
            rsize: Some(8 << 20),
            wsize: Some(4096),
            ..MountOptions::default()
        };
        let io = io_sizes(&fsinfo(1 << 20, 1 << 20, 1 << 20, 1 << 20), &opts);
        assert_eq!((io.rsize, io.wsize), (1 << 20, 4096));
        // A server offering more than a reply record holds is capped by the record.
        let io = io_sizes(&fsinfo(64 << 20, 0, 64 << 20, 0), &MountOptions::default());
        assert!(io.rsize as usize + 64 * 1024 <= MAX_REPLY_RECORD);
    }

    #[test]
    fn components_skip_empty_and_dot() {
        let c: Vec<&str> = components("/a//./b/../c/").collect();
        assert_eq!(c, ["a", "b", "..", "c"]);
        assert_eq!(components("/").count(), 0);
    }

    #[test]
    fn auth_sys_self_fits_rfc_5531_bounds() {
        let p = auth_sys_self();
        assert!(p.machinename.len() <= 255);
        assert!(p.gids.len() <= 16);
        assert_eq!(p.uid, rustix::process::geteuid().as_raw());
    }
}
