//! Host-side processes run beside the guest: our server the guest's client
//! mounts, our client that drives the guest's knfsd.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::LabError;

/// A host command to run during a guest run; its stdout and stderr go to
/// `lab/out/<run>/host-<name>.log`.
#[derive(Debug, Clone)]
pub struct HostProcess {
    pub(crate) name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl HostProcess {
    /// Run `program`; `name` labels its log.
    pub fn new(name: &str, program: impl Into<PathBuf>) -> HostProcess {
        HostProcess {
            name: name.to_string(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Append one argument.
    pub fn arg(mut self, a: impl Into<String>) -> HostProcess {
        self.args.push(a.into());
        self
    }

    /// Append arguments.
    pub fn args<I, S>(mut self, args: I) -> HostProcess
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> HostProcess {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    pub(crate) fn spawn(&self, out: &Path) -> Result<Spawned, LabError> {
        let log = out.join(format!("host-{}.log", self.name));
        let f = File::create(&log).map_err(|e| LabError::io(format!("{}", log.display()), e))?;
        let f2 = f.try_clone().map_err(|e| LabError::io("dup host log", e))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| LabError::io(format!("spawn {}", self.program.display()), e))?;
        Ok(Spawned {
            name: self.name.clone(),
            child,
            log,
        })
    }
}

/// A started host process.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) name: String,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl Spawned {
    /// Wait up to `limit`; `None` if still running (then it is killed).
    pub(crate) fn wait_bounded(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= end {
                self.stop();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kill (by the pid we started) and reap.
    pub(crate) fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// How a host process run to completion ended (see
/// [`crate::RunningGuest::run_host`]).
#[derive(Debug)]
pub struct HostExit {
    /// Its exit status, or `None` if it overran its time limit and was killed.
    pub status: Option<ExitStatus>,
    /// Everything it printed.
    pub log: String,
}

impl HostExit {
    /// Exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}
