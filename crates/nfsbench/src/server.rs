//! The server under test as a child process (`nfsbench serve`, see [`crate::serve`]),
//! so its CPU time is read from `/proc/PID/stat` apart from the client's.
#![allow(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::serve::ANNOUNCE;

/// A running child server.
#[derive(Debug)]
pub struct ServerChild {
    child: Child,
    /// Closing it tells the child to stop (it also stops on SIGTERM).
    stdin: Option<ChildStdin>,
    /// NFS over TCP.
    pub nfs: SocketAddr,
    /// MOUNT over TCP.
    pub mount: SocketAddr,
    /// NFS over RPC-over-RDMA (iWARP), when served.
    pub rdma: Option<SocketAddr>,
}

/// How to start the child.
#[derive(Debug, Clone)]
pub struct SpawnOptions<'a> {
    /// Exported directory.
    pub export: &'a Path,
    /// Serve RDMA too.
    pub rdma: bool,
    /// Fixed NFS and MOUNT ports (`None`: any free ones).
    pub ports: Option<(u16, u16)>,
    /// Run inside this network namespace (`ip netns exec NS ...`).
    pub netns: Option<&'a str>,
    /// Keep the handle key here, so that handles survive a restart of the child
    /// (`serve --state-dir`); `None`: handles die with the child.
    pub state_dir: Option<&'a Path>,
    /// `serve --kernel-handles`: auto, no-open or off.
    pub kernel_handles: &'a str,
    /// `serve --tcp-read-data`: sendfile or copy.
    pub tcp_read_data: &'a str,
}

impl ServerChild {
    /// Starts `nfsbench serve` (this executable) and waits for its `ready` line.
    pub fn spawn(opts: &SpawnOptions<'_>) -> std::io::Result<ServerChild> {
        let exe = std::env::current_exe()?;
        let mut cmd = match opts.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let (nfs_port, mount_port) = opts.ports.unwrap_or((0, 0));
        cmd.arg("serve")
            .arg("--export")
            .arg(opts.export)
            .args(["--bind", "127.0.0.1"])
            .args(["--nfs-port", &nfs_port.to_string()])
            .args(["--mount-port", &mount_port.to_string()]);
        if opts.rdma {
            cmd.args(["--rdma-port", "0"]);
        }
        if let Some(dir) = opts.state_dir {
            cmd.arg("--state-dir").arg(dir);
        }
        cmd.args(["--kernel-handles", opts.kernel_handles]);
        cmd.args(["--tcp-read-data", opts.tcp_read_data]);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut announce = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(ANNOUNCE) {
                    announce = Some(line);
                } else if line == "ready" {
                    let _ = tx.send(announce.take());
                }
                // Keep draining so the child never blocks on a full pipe.
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(l)) => l,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::other("server child did not become ready"));
            }
        };
        let (nfs, mount, rdma) = parse_announce(&line)
            .ok_or_else(|| std::io::Error::other(format!("bad announce line: {line}")))?;
        Ok(ServerChild {
            child,
            stdin,
            nfs,
            mount,
            rdma,
        })
    }

    /// The child's pid (the server itself: `ip netns exec` execs it in place).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the child (SIGTERM) and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stdin.take();
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our own child.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.shutdown();
        }
    }
}

fn parse_announce(line: &str) -> Option<(SocketAddr, SocketAddr, Option<SocketAddr>)> {
    let mut nfs = None;
    let mut mount = None;
    let mut rdma = None;
    for word in line.split_whitespace().skip(1) {
        let (k, v) = word.split_once('=')?;
        match k {
            "nfs" => nfs = v.parse().ok(),
            "mount" => mount = v.parse().ok(),
            "rdma" => rdma = v.parse().ok(),
            _ => {}
        }
    }
    Some((nfs?, mount?, rdma))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announce_line_parses() {
        let (n, m, r) =
            parse_announce("nfsbench-serve nfs=127.0.0.1:1 mount=127.0.0.1:2 rdma=none").unwrap();
        assert_eq!(n.port(), 1);
        assert_eq!(m.port(), 2);
        assert!(r.is_none());
        let (_, _, r) =
            parse_announce("nfsbench-serve nfs=127.0.0.1:1 mount=127.0.0.1:2 rdma=127.0.0.1:3")
                .unwrap();
        assert_eq!(r.unwrap().port(), 3);
    }
}
