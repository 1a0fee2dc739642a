//! The peer comparison: an independent client (libnfs `nfs-cat URL > /dev/null`)
//! reads the same file from our server and from nfs-ganesha (VFS backend,
//! NFSv3/TCP), interleaved.
//!
//! Ganesha will not start without rpcbind, and Debian 12's `rpcbind -h 127.0.0.1`
//! crashes, so rpcbind, ganesha, our server and `nfs-cat` all run in a private
//! network namespace with only loopback (`ip netns add`, `ip netns exec`). Ganesha
//! listens on 2049/20048 there and registers with that rpcbind; our server listens on
//! any free ports, given to `nfs-cat` in the URL (`?nfsport=&mountport=`).
//!
//! CPU: `nfs-cat` is a waited-for child (`RUSAGE_CHILDREN`; `ip netns exec` execs it
//! in place), the servers are read from `/proc/PID/stat`.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cpu::Meter;
use crate::server::{ServerChild, SpawnOptions};
use crate::workload::Sample;

/// Which server a peer run read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerServer {
    /// Our server (`nfsbench serve`, the nfsd library), NFSv3/TCP.
    Ours,
    /// nfs-ganesha, VFS backend, NFSv3/TCP.
    Ganesha,
}

impl PeerServer {
    /// The label in reports.
    pub fn name(self) -> &'static str {
        match self {
            PeerServer::Ours => "ours",
            PeerServer::Ganesha => "ganesha",
        }
    }
}

/// Tools the comparison needs, by absolute path.
const TOOLS: [&str; 4] = [
    "/usr/bin/nfs-cat",
    "/usr/bin/ganesha.nfsd",
    "/usr/sbin/rpcbind",
    "/usr/sbin/ip",
];

/// Why the comparison cannot run here, if it cannot (missing tools, not root).
pub fn unavailable() -> Option<String> {
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| !Path::new(t).exists())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "missing {} (apt-get install libnfs-utils nfs-ganesha nfs-ganesha-vfs rpcbind iproute2)",
            missing.join(", ")
        ));
    }
    if !rustix::process::geteuid().is_root() {
        return Some("network namespaces need root".into());
    }
    None
}

/// rpcbind, ganesha and our server running in a private namespace; torn down on drop.
#[derive(Debug)]
pub struct PeerLab {
    ns: String,
    work: PathBuf,
    rpcbind: Option<Child>,
    ganesha: Option<Child>,
    ours: Option<ServerChild>,
    export: PathBuf,
}

fn run_quiet(cmd: &mut Command) -> std::io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn ns_cmd(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// The ganesha configuration: NFSv3 only over TCP, one VFS export of `export`.
fn ganesha_conf(export: &Path) -> String {
    let p = export.display();
    format!(
        "NFS_CORE_PARAM {{ Protocols = 3; NFS_Port = 2049; MNT_Port = 20048; \
         Enable_NLM = false; Enable_RQUOTA = false; }}\n\
         NFSV4 {{ Graceless = true; }}\n\
         EXPORT {{ Export_Id = 1; Path = {p}; Pseudo = {p}; Protocols = 3; \
         Transports = TCP; Access_Type = RW; Squash = No_Root_Squash; SecType = sys; \
         FSAL {{ Name = VFS; }} }}\n\
         LOG {{ Default_Log_Level = WARN; }}\n"
    )
}

impl PeerLab {
    /// Creates the namespace and starts rpcbind, ganesha and our server exporting
    /// `export`; waits until `nfs-cat` can read `probe` (a small file in `export`)
    /// from both. `work` holds ganesha's configuration and log; `tcp_read_data` is our
    /// server's `--tcp-read-data`.
    pub fn start(
        export: &Path,
        probe: &str,
        work: &Path,
        tcp_read_data: &str,
    ) -> std::io::Result<PeerLab> {
        let ns = format!("nfsbench-{}", std::process::id());
        run_quiet(Command::new("ip").args(["netns", "add", &ns]))?;
        let mut lab = PeerLab {
            ns: ns.clone(),
            work: work.to_path_buf(),
            rpcbind: None,
            ganesha: None,
            ours: None,
            export: export.to_path_buf(),
        };
        run_quiet(Command::new("ip").args(["-n", &ns, "link", "set", "lo", "up"]))?;
        lab.rpcbind = Some(
            ns_cmd(&ns, "rpcbind")
                .args(["-f", "-w"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        std::thread::sleep(Duration::from_millis(300));
        let conf = work.join("ganesha.conf");
        std::fs::write(&conf, ganesha_conf(export))?;
        let log = work.join("ganesha.log");
        lab.ganesha = Some(
            ns_cmd(&ns, "ganesha.nfsd")
                .arg("-F")
                .arg("-f")
                .arg(&conf)
                .arg("-L")
                .arg(&log)
                .arg("-p")
                .arg(work.join("ganesha.pid"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        lab.ours = Some(ServerChild::spawn(&SpawnOptions {
            export,
            rdma: false,
            ports: None,
            netns: Some(&ns),
            state_dir: None,
            kernel_handles: "auto",
            tcp_read_data,
        })?);
        for server in [PeerServer::Ganesha, PeerServer::Ours] {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let ok = ns_cmd(&ns, "nfs-cat")
                    .arg(lab.url(server, probe))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(std::io::Error::other(format!(
                        "{} does not serve {probe} (see {})",
                        server.name(),
                        log.display()
                    )));
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        Ok(lab)
    }

    /// The libnfs URL of `file` (relative to the export) on `server`.
    pub fn url(&self, server: PeerServer, file: &str) -> String {
        let path = self.export.join(file);
        match (server, &self.ours) {
            (PeerServer::Ours, Some(o)) => format!(
                "nfs://127.0.0.1{}?version=3&nfsport={}&mountport={}",
                path.display(),
                o.nfs.port(),
                o.mount.port()
            ),
            _ => format!("nfs://127.0.0.1{}?version=3", path.display()),
        }
    }

    fn server_pid(&self, server: PeerServer) -> Option<u32> {
        match server {
            PeerServer::Ours => self.ours.as_ref().map(ServerChild::pid),
            PeerServer::Ganesha => self.ganesha.as_ref().map(Child::id),
        }
    }

    /// `nfs-cat URL > /dev/null` of `file` from `server`, measured.
    pub fn nfs_cat(&self, server: PeerServer, file: &str) -> std::io::Result<Sample> {
        let meter = Meter::start(self.server_pid(server), true);
        let out = ns_cmd(&self.ns, "nfs-cat")
            .arg(self.url(server, file))
            .stdin(Stdio::null())
            .stdout(File::create("/dev/null")?)
            .stderr(Stdio::piped())
            .output()?;
        let m = meter.stop();
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "nfs-cat from {}: {}",
                server.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let bytes = std::fs::metadata(self.export.join(file))?.len();
        Ok(Sample { amount: bytes, m })
    }

    /// Where ganesha's log is.
    pub fn ganesha_log(&self) -> PathBuf {
        self.work.join("ganesha.log")
    }
}

impl Drop for PeerLab {
    fn drop(&mut self) {
        if let Some(o) = self.ours.take() {
            o.stop();
        }
        for child in [self.ganesha.take(), self.rpcbind.take()]
            .into_iter()
            .flatten()
        {
            stop_child(child);
        }
        let _ = run_quiet(Command::new("ip").args(["netns", "del", &self.ns]));
    }
}

/// SIGTERM, up to 10 s to exit (ganesha takes a few), then SIGKILL.
fn stop_child(mut child: Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill has no memory preconditions; the pid is our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    for _ in 0..100 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
