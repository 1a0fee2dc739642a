//! A booted guest: handshakes through the share, host processes beside it,
//! and the bounded wait for power-off.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::host::{HostExit, Spawned};
use crate::outcome::Outcome;
use crate::{GuestConfig, HostProcess, LabError};

/// How often the host polls the share and qemu (no wall-clock speed enters
/// a verdict: waits end on an event or on a generous limit).
const POLL: Duration = Duration::from_millis(100);

/// A guest that has booted and is running its script.
///
/// Dropping it without [`RunningGuest::finish`] kills qemu and the host
/// processes (so a panicking test leaves nothing behind).
#[derive(Debug)]
pub struct RunningGuest {
    cfg: GuestConfig,
    out: PathBuf,
    share: PathBuf,
    qemu: Option<Child>,
    hosts: Vec<Spawned>,
    started: Instant,
    boot_attempts: u32,
    boot_secs: f64,
    /// Held for the whole run: one guest at a time on this machine.
    _lock: File,
}

impl RunningGuest {
    pub(crate) fn boot(cfg: GuestConfig) -> Result<RunningGuest, LabError> {
        let lock = lock_machine()?;
        let out = cfg.lab.out_root().join(&cfg.run_name);
        fs::create_dir_all(cfg.lab.out_root()).map_err(|e| LabError::io("create lab/out", e))?;
        prepare_out(&out, &cfg)?;
        let started = Instant::now();
        let mut hosts = Vec::new();
        for p in &cfg.host_processes {
            hosts.push(p.spawn(&out)?);
        }
        let mut run = RunningGuest {
            cfg,
            share: out.join("share"),
            out,
            qemu: None,
            hosts,
            started,
            boot_attempts: 0,
            boot_secs: 0.0,
            _lock: lock,
        };
        run.boot_with_retry()?;
        Ok(run)
    }

    /// Boot until the guest's init writes `/share/booted`; retry only that.
    fn boot_with_retry(&mut self) -> Result<(), LabError> {
        let share = self.share.clone();
        loop {
            self.boot_attempts += 1;
            let _ = fs::remove_file(share.join("booted"));
            let t0 = Instant::now();
            let mut cmd = self.cfg.qemu_command(&self.out);
            let qlog = self.out.join("qemu.log");
            let qlog = File::create(&qlog).map_err(|e| LabError::io("qemu.log", e))?;
            cmd.stdin(std::process::Stdio::null())
                .stdout(qlog.try_clone().map_err(|e| LabError::io("qemu.log", e))?)
                .stderr(qlog);
            let child = cmd
                .spawn()
                .map_err(|e| LabError::io(format!("spawn {:?}", self.cfg.lab.qemu), e))?;
            self.qemu = Some(child);
            match self.wait_for_file("booted", self.cfg.boot_timeout) {
                Ok(_) => {
                    self.boot_secs = t0.elapsed().as_secs_f64();
                    return Ok(());
                }
                Err(_) => {
                    self.kill_qemu();
                    let console = self.out.join("console.log");
                    // qemu's own complaints (e.g. a hostfwd port already in
                    // use) come first: they explain an empty console.
                    let tail = format!(
                        "{}\n{}",
                        tail_file(&self.out.join("qemu.log"), 10),
                        tail_file(&console, 30)
                    );
                    let kept = self
                        .out
                        .join(format!("console-boot-attempt-{}.log", self.boot_attempts));
                    let _ = fs::rename(&console, &kept);
                    if self.boot_attempts >= self.cfg.boot_attempts {
                        self.stop_hosts();
                        return Err(LabError::BootFailed {
                            attempts: self.boot_attempts,
                            console_tail: tail,
                        });
                    }
                    eprintln!(
                        "lab: guest did not boot (attempt {}), retrying",
                        self.boot_attempts
                    );
                }
            }
        }
    }

    /// The host directory the guest sees as `/share`.
    pub fn share(&self) -> &Path {
        &self.share
    }

    /// The run's output directory (`lab/out/<run>`).
    pub fn out_dir(&self) -> &Path {
        &self.out
    }

    /// Wait until the guest creates `/share/<rel>`; returns its contents.
    /// Fails early if the guest powers off first.
    pub fn wait_for_file(&mut self, rel: &str, limit: Duration) -> Result<String, LabError> {
        let path = self.share.join(rel);
        let end = Instant::now() + limit;
        loop {
            if path.exists() {
                return fs::read_to_string(&path).map_err(|e| LabError::io(rel, e));
            }
            if self.qemu_exited() {
                return Err(LabError::GuestGone(rel.to_string()));
            }
            if Instant::now() >= end {
                return Err(LabError::WaitTimeout {
                    file: rel.to_string(),
                    secs: limit.as_secs(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Wait for the guest script's `lab_ready` (`/share/ready`).
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), LabError> {
        self.wait_for_file("ready", limit).map(|_| ())
    }

    /// Create `/share/<rel>` for the guest's `lab_wait_for <rel>`.
    pub fn signal(&self, rel: &str) -> Result<(), LabError> {
        let path = self.share.join(rel);
        fs::write(&path, b"1\n").map_err(|e| LabError::io(format!("{}", path.display()), e))
    }

    /// Start a host process now; it runs until the run finishes.
    pub fn spawn_host(&mut self, p: &HostProcess) -> Result<(), LabError> {
        let s = p.spawn(&self.out)?;
        self.hosts.push(s);
        Ok(())
    }

    /// Run a host process to completion (killed after `limit`), e.g. our
    /// client against the guest's knfsd through a hostfwd port.
    pub fn run_host(&mut self, p: &HostProcess, limit: Duration) -> Result<HostExit, LabError> {
        let mut s = p.spawn(&self.out)?;
        let status = s.wait_bounded(limit);
        let log = fs::read_to_string(&s.log).unwrap_or_default();
        self.hosts.push(s);
        Ok(HostExit { status, log })
    }

    /// Wait (bounded by the run's timeout) for the guest to power off, stop
    /// the host processes, and collect everything into an [`Outcome`].
    pub fn finish(mut self) -> Result<Outcome, LabError> {
        let end = self.started + self.cfg.timeout;
        let mut timed_out = false;
        while !self.qemu_exited() {
            if Instant::now() >= end {
                timed_out = true;
                self.kill_qemu();
                break;
            }
            std::thread::sleep(POLL);
        }
        self.stop_hosts();
        let host_logs = self
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.log.clone()))
            .collect();
        Ok(Outcome::collect(
            &self.cfg.run_name,
            &self.out,
            timed_out.then_some(self.cfg.timeout),
            self.boot_attempts,
            self.boot_secs,
            self.started.elapsed(),
            host_logs,
        ))
    }

    fn qemu_exited(&mut self) -> bool {
        match self.qemu.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    fn kill_qemu(&mut self) {
        if let Some(mut c) = self.qemu.take() {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }

    fn stop_hosts(&mut self) {
        for h in &mut self.hosts {
            h.stop();
        }
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        self.kill_qemu();
        self.stop_hosts();
    }
}

/// One guest at a time on this machine: an exclusive lock on
/// `$TMPDIR/rpcrdma-lab-guest.lock`, held until the run is dropped. Machine
/// wide, not per checkout: two clones' guests would also fight over the
/// hostfwd ports and the two cores.
fn lock_machine() -> Result<File, LabError> {
    let path = std::env::temp_dir().join("rpcrdma-lab-guest.lock");
    let f =
        File::create(&path).map_err(|e| LabError::io(format!("create {}", path.display()), e))?;
    if f.try_lock().is_err() {
        // Say why a test seems stuck: another checkout's or engineer's guest.
        eprintln!(
            "lab: another guest is running on this machine; waiting for {}",
            path.display()
        );
        let t0 = Instant::now();
        f.lock()
            .map_err(|e| LabError::io(format!("lock {}", path.display()), e))?;
        eprintln!(
            "lab: waited {:.0} s for the other guest",
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(f)
}

/// Fresh `lab/out/<run>/share` with lib.sh, the script, env and binaries.
fn prepare_out(out: &Path, cfg: &GuestConfig) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::io(format!("{what} in {}", out.display()), e);
    if out.exists() {
        fs::remove_dir_all(out).map_err(|e| io("clear", e))?;
    }
    let share = out.join("share");
    fs::create_dir_all(share.join("bin")).map_err(|e| io("create share", e))?;
    let lib = cfg.lab.dir().join("guest/lib.sh");
    fs::copy(&lib, share.join("lib.sh")).map_err(|e| io("copy lib.sh", e))?;
    fs::write(share.join("guest.sh"), &cfg.script.body).map_err(|e| io("write guest.sh", e))?;
    fs::write(share.join("env.sh"), cfg.script.env_sh()).map_err(|e| io("write env.sh", e))?;
    for (name, src) in &cfg.script.binaries {
        if !src.exists() {
            return Err(LabError::NotFound(src.clone()));
        }
        fs::copy(src, share.join("bin").join(name)).map_err(|e| io("copy binary", e))?;
    }
    for (rel, contents) in &cfg.script.files {
        if rel.split('/').any(|c| c == "..") || rel.starts_with('/') {
            return Err(LabError::NotFound(PathBuf::from(rel)));
        }
        let p = share.join(rel);
        if let Some(d) = p.parent() {
            fs::create_dir_all(d).map_err(|e| io("create dir", e))?;
        }
        fs::write(&p, contents).map_err(|e| io("write file", e))?;
    }
    Ok(())
}

/// The last `n` lines of a file ("" if unreadable).
pub(crate) fn tail_file(path: &Path, n: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
