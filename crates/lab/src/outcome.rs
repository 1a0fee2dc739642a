//! What a guest run produced, and its verdict.
//!
//! The guest records steps in `/share/results` (see `lab/guest/lib.sh`); the
//! host adds its own checks as `host:` steps. The verdict is the first
//! failed step, or the step that was running when the guest hung or died.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::run::tail_file;

/// How one step ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StepStatus {
    /// It succeeded.
    Passed,
    /// It failed; the guest's exit code for the step (or 1 for host steps).
    Failed(i32),
    /// It began and never ended (the guest hung, died or timed out in it).
    Unfinished,
}

/// One named step of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// Step name; host-side steps are prefixed `host:`.
    pub name: String,
    /// How it ended.
    pub status: StepStatus,
    /// Guest uptime (s) when it began; `None` for host steps.
    pub began: Option<f64>,
    /// Guest uptime (s) when it ended.
    pub ended: Option<f64>,
    /// Why a host step failed.
    pub detail: Option<String>,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The step that failed or hung, when one can be named.
    pub step: Option<String>,
    /// What happened.
    pub reason: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.step {
            Some(s) => write!(f, "step `{s}` failed: {}", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

/// Everything a run left behind, with its verdict.
#[derive(Debug)]
pub struct Outcome {
    /// Run name (`lab/out/<name>`).
    pub name: String,
    /// Run directory: `share/` (results, guest.log, dmesg.txt, syslog.txt,
    /// captures), `console.log`, `qemu.log`, `host-*.log`, `host.pcap`.
    pub out_dir: PathBuf,
    /// Steps in the order they began.
    pub steps: Vec<StepResult>,
    /// `record`ed values by key.
    pub values: BTreeMap<String, String>,
    /// The guest script's exit code, if it finished.
    pub exit_status: Option<i32>,
    /// The run limit, if the run hit it and the guest was killed.
    pub timed_out: Option<Duration>,
    /// How many boots it took (more than 1 only if a boot failed).
    pub boot_attempts: u32,
    /// Seconds from qemu start to the share being mounted.
    pub boot_secs: f64,
    /// Wall time from boot (or, in a shared boot, from this scenario's start)
    /// to collection.
    pub wall: Duration,
    /// In a shared boot: which one, and this scenario's place in it.
    pub shared_boot: Option<String>,
    host_logs: Vec<(String, PathBuf)>,
}

impl Outcome {
    pub(crate) fn collect(
        name: &str,
        out: &Path,
        timed_out: Option<Duration>,
        boot_attempts: u32,
        boot_secs: f64,
        wall: Duration,
        host_logs: Vec<(String, PathBuf)>,
    ) -> Outcome {
        let share = out.join("share");
        let results = std::fs::read_to_string(share.join("results")).unwrap_or_default();
        let (steps, values) = parse_results(&results);
        let exit_status = std::fs::read_to_string(share.join("exit-status"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        Outcome {
            name: name.to_string(),
            out_dir: out.to_path_buf(),
            steps,
            values,
            exit_status,
            timed_out,
            boot_attempts,
            boot_secs,
            wall,
            shared_boot: None,
            host_logs,
        }
    }

    /// A file the guest left in the share (e.g. `capture.pcap`).
    pub fn share_file(&self, rel: &str) -> PathBuf {
        self.out_dir.join("share").join(rel)
    }

    /// A recorded value.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// A step by name.
    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Run a host-side check as step `host:<name>`; an `Err` fails the run
    /// with that step named, exactly like a guest step.
    pub fn host_step<T, E: fmt::Display>(
        &mut self,
        name: &str,
        check: impl FnOnce(&Outcome) -> Result<T, E>,
    ) -> Option<T> {
        let (status, detail, value) = match check(self) {
            Ok(v) => (StepStatus::Passed, None, Some(v)),
            Err(e) => (StepStatus::Failed(1), Some(e.to_string()), None),
        };
        self.steps.push(StepResult {
            name: format!("host:{name}"),
            status,
            began: None,
            ended: None,
            detail,
        });
        value
    }

    /// Why the run failed, or `None` if it passed.
    pub fn failure(&self) -> Option<Failure> {
        let unfinished = self
            .steps
            .iter()
            .find(|s| s.status == StepStatus::Unfinished)
            .map(|s| s.name.clone());
        if let Some(s) = self
            .steps
            .iter()
            .find(|s| matches!(s.status, StepStatus::Failed(_)))
        {
            let reason = match (&s.status, &s.detail) {
                (_, Some(d)) => d.clone(),
                (StepStatus::Failed(rc), None) => format!("exit code {rc} (see guest.log)"),
                _ => unreachable!("filtered on Failed"),
            };
            return Some(Failure {
                step: Some(s.name.clone()),
                reason,
            });
        }
        if let Some(t) = self.timed_out {
            return Some(Failure {
                step: unfinished,
                reason: format!("guest still running after {} s; killed", t.as_secs()),
            });
        }
        match self.exit_status {
            None => Some(Failure {
                step: unfinished,
                reason: "guest powered off before its script finished (panic? see dmesg/console)"
                    .into(),
            }),
            Some(0) if self.steps.is_empty() => Some(Failure {
                step: None,
                reason: "guest script recorded no steps: nothing was checked".into(),
            }),
            Some(0) => None,
            Some(rc) => Some(Failure {
                step: unfinished,
                reason: format!("guest script exited with {rc} outside any step"),
            }),
        }
    }

    /// True if no step failed and the guest script finished with 0.
    pub fn passed(&self) -> bool {
        self.failure().is_none()
    }

    /// A human report: verdict, steps, and on failure the tails of the guest
    /// script log, dmesg, syslog (rpc.mountd & co) and host process logs.
    pub fn report(&self) -> String {
        let mut r = String::new();
        let verdict = match self.failure() {
            None => "PASSED".to_string(),
            Some(f) => format!("FAILED: {f}"),
        };
        let boot = match (&self.shared_boot, self.boot_attempts) {
            (Some(s), 0) => s.clone(),
            (Some(s), n) => format!("{s} in {:.1} s ({n} attempt(s))", self.boot_secs),
            (None, n) => format!("boot {:.1} s ({n} attempt(s))", self.boot_secs),
        };
        r += &format!(
            "lab run `{}`: {verdict}\n  {boot}, wall {:.1} s, out {}\n",
            self.name,
            self.wall.as_secs_f64(),
            self.out_dir.display()
        );
        for s in &self.steps {
            let t = match (s.began, s.ended) {
                (Some(b), Some(e)) => format!(" ({:.1}s)", e - b),
                _ => String::new(),
            };
            let d = s
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            r += &format!("  {:<10} {}{t}{d}\n", status_word(&s.status), s.name);
        }
        for (k, v) in &self.values {
            r += &format!("  value {k} = {v}\n");
        }
        if self.failure().is_some() {
            let share = self.out_dir.join("share");
            // dmesg.txt exists only if the guest ended cleanly; after a hang
            // the live kernel log stream is what there is.
            let kernel_log = if share.join("dmesg.txt").exists() {
                ("guest dmesg", share.join("dmesg.txt"), 40)
            } else {
                ("guest dmesg (live kernel log)", share.join("kmsg.txt"), 40)
            };
            let mut sections = vec![
                // A pair that stalled: the host's look at the wire (wire_watch).
                (
                    "host's view of the wire at the stall",
                    self.out_dir.join("wire-stall.txt"),
                    40,
                ),
                ("guest script log", share.join("guest.log"), 40),
                kernel_log,
                ("guest syslog (server logs)", share.join("syslog.txt"), 20),
                ("serial console", self.out_dir.join("console.log"), 20),
                // Our nfsd started by a pair's server script (its SIGUSR1
                // connection dump lands here when a stall watcher fires).
                ("our nfsd in the guest", share.join("nfsd.txt"), 40),
            ];
            // Logs of processes the guest script started (lab_run_binary:
            // a server of ours running in the guest), then host processes.
            let mut guest_logs: Vec<PathBuf> = std::fs::read_dir(&share)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .filter(|p| !p.ends_with("guest.log"))
                .collect();
            guest_logs.sort();
            sections.extend(guest_logs.into_iter().map(|p| ("guest process", p, 30)));
            for (_, log) in &self.host_logs {
                sections.push(("host process", log.clone(), 30));
            }
            for (title, path, n) in sections {
                let t = tail_file(&path, n);
                if !t.is_empty() {
                    r += &format!("--- {title}: {} (last {n} lines)\n{t}\n", path.display());
                }
            }
        }
        r
    }

    /// Panic with [`Outcome::report`] unless the run passed.
    pub fn assert_passed(&self) {
        if !self.passed() {
            panic!("{}", self.report());
        }
        eprintln!("{}", self.report());
    }
}

fn status_word(s: &StepStatus) -> &'static str {
    match s {
        StepStatus::Passed => "ok",
        StepStatus::Failed(_) => "FAILED",
        StepStatus::Unfinished => "UNFINISHED",
    }
}

/// Parse `/share/results` (format in `lab/guest/lib.sh`).
fn parse_results(text: &str) -> (Vec<StepResult>, BTreeMap<String, String>) {
    let mut steps: Vec<StepResult> = Vec::new();
    let mut values = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.splitn(3, ' ');
        let (kind, name, rest) = (
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
        );
        let last_num = |s: &str| s.split_whitespace().last().and_then(|t| t.parse().ok());
        match kind {
            "BEGIN" => steps.push(StepResult {
                name: name.to_string(),
                status: StepStatus::Unfinished,
                began: last_num(rest),
                ended: None,
                detail: None,
            }),
            "PASS" | "FAIL" => {
                let status = if kind == "PASS" {
                    StepStatus::Passed
                } else {
                    let rc = rest
                        .split_whitespace()
                        .find_map(|t| t.strip_prefix("rc="))
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(1);
                    StepStatus::Failed(rc)
                };
                if let Some(s) = steps
                    .iter_mut()
                    .rev()
                    .find(|s| s.name == name && s.status == StepStatus::Unfinished)
                {
                    s.status = status;
                    s.ended = last_num(rest);
                }
            }
            "VALUE" => {
                values.insert(name.to_string(), rest.to_string());
            }
            _ => {}
        }
    }
    (steps, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(results: &str, exit: Option<i32>, timed_out: bool) -> Outcome {
        let (steps, values) = parse_results(results);
        Outcome {
            name: "t".into(),
            out_dir: PathBuf::from("/nonexistent"),
            steps,
            values,
            exit_status: exit,
            timed_out: timed_out.then_some(Duration::from_secs(9)),
            boot_attempts: 1,
            boot_secs: 1.0,
            wall: Duration::from_secs(2),
            shared_boot: None,
            host_logs: vec![],
        }
    }

    #[test]
    fn all_steps_passing_passes() {
        let o = outcome(
            "BEGIN a 1.0\nPASS a 2.0\nVALUE xprt xprt: rdma 0 0\n",
            Some(0),
            false,
        );
        assert_eq!(o.failure(), None);
        assert_eq!(o.value("xprt"), Some("xprt: rdma 0 0"));
        assert_eq!(o.step("a").unwrap().ended, Some(2.0));
    }

    #[test]
    fn failed_step_is_named_with_its_exit_code() {
        let o = outcome(
            "BEGIN a 1\nPASS a 2\nBEGIN mount 3\nFAIL mount rc=32 4\n",
            Some(1),
            false,
        );
        let f = o.failure().unwrap();
        assert_eq!(f.step.as_deref(), Some("mount"));
        assert!(f.reason.contains("32"), "{f}");
    }

    #[test]
    fn timeout_names_the_hanging_step() {
        let o = outcome("BEGIN a 1\nPASS a 2\nBEGIN read_back 3\n", None, true);
        let f = o.failure().unwrap();
        assert_eq!(f.step.as_deref(), Some("read_back"));
        assert!(f.reason.contains("killed"));
    }

    #[test]
    fn guest_death_without_exit_status_fails() {
        let o = outcome("BEGIN a 1\n", None, false);
        assert_eq!(o.failure().unwrap().step.as_deref(), Some("a"));
    }

    #[test]
    fn a_script_that_checked_nothing_does_not_pass() {
        assert!(outcome("", Some(0), false).failure().is_some());
    }

    #[test]
    fn nonzero_exit_outside_steps_fails() {
        let o = outcome("BEGIN a 1\nPASS a 2\n", Some(2), false);
        assert!(o.failure().unwrap().reason.contains("exited with 2"));
    }

    #[test]
    fn host_step_failure_is_named() {
        let mut o = outcome("BEGIN a 1\nPASS a 2\n", Some(0), false);
        let v: Option<()> = o.host_step("capture", |_| Err("3 malformed frames"));
        assert!(v.is_none());
        let f = o.failure().unwrap();
        assert_eq!(f.step.as_deref(), Some("host:capture"));
        assert_eq!(f.reason, "3 malformed frames");
        assert!(o.report().contains("FAILED: step `host:capture` failed"));
    }
}
