//! A booted guest: handshakes through the share, host processes beside it,
//! and the bounded wait for power-off; and shared boots, where one guest runs
//! several scenarios in turn.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::host::{HostExit, Spawned};
use crate::outcome::Outcome;
use crate::wire_watch::{End, WireWatch};
use crate::{GuestConfig, GuestScript, HostProcess, LabError};

/// How often the host polls the share and qemu (no wall-clock speed enters
/// a verdict: waits end on an event or on a generous limit).
const POLL: Duration = Duration::from_millis(100);

/// The shared boot of this test process, if one is up (see
/// [`GuestConfig::shared_boot`]). Held by the scenario using it.
static SHARED: Mutex<Option<Boot>> = Mutex::new(None);

/// A qemu guest: the machine, its share, and the machine-wide lock.
#[derive(Debug)]
struct Boot {
    /// `lab/out/<run>` (own boot) or `lab/out/boot-<name>` (shared boot).
    out: PathBuf,
    share: PathBuf,
    qemu: Option<Child>,
    /// Shared boots run qemu under a watchdog shell that kills it when this pipe
    /// closes: when the boot is dropped, or when the test process is gone.
    watchdog: Option<ChildStdin>,
    attempts: u32,
    secs: f64,
    /// What a scenario must match to use this boot (shared boots only).
    key: Option<String>,
    /// Scenarios queued so far (shared boots only).
    runs: u32,
    /// Held for the boot's whole life: one guest at a time on this machine.
    _lock: File,
}

/// Runs qemu ("$@") and kills it when stdin reaches end of file (the test
/// process closed the pipe, or exited): a shared boot outlives each scenario,
/// and nothing else would stop it when the process ends. Kills only the pid it
/// started.
const WATCHDOG: &str = r#"exec 3<&0 0</dev/null
"$@" &
q=$!
{ read -r _ <&3; kill $q 2>/dev/null; } &
w=$!
wait $q
rc=$?
kill $w 2>/dev/null
exit $rc"#;

impl Boot {
    /// Boot until the guest's init writes `/share/booted`; retry only that.
    fn start(cfg: &GuestConfig, out: PathBuf, lock: File, shared: bool) -> Result<Boot, LabError> {
        let mut boot = Boot {
            share: out.join("share"),
            out,
            qemu: None,
            watchdog: None,
            attempts: 0,
            secs: 0.0,
            key: cfg.boot_key().filter(|_| shared),
            runs: 0,
            _lock: lock,
        };
        loop {
            boot.attempts += 1;
            let _ = fs::remove_file(boot.share.join("booted"));
            let t0 = Instant::now();
            // A pair's guests answer QMP too: the wire watcher asks them about eth1.
            let qmp = shared || cfg.wire.is_some();
            let qemu = cfg.qemu_command(&boot.out, cfg.host_capture && !shared, qmp);
            let mut cmd = if shared {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(WATCHDOG)
                    .arg("lab-qemu-watchdog")
                    .arg(qemu.get_program())
                    .args(qemu.get_args())
                    .stdin(Stdio::piped());
                c
            } else {
                let mut c = qemu;
                c.stdin(Stdio::null());
                c
            };
            let qlog =
                File::create(boot.out.join("qemu.log")).map_err(|e| LabError::io("qemu.log", e))?;
            cmd.stdout(qlog.try_clone().map_err(|e| LabError::io("qemu.log", e))?)
                .stderr(qlog);
            let mut child = cmd
                .spawn()
                .map_err(|e| LabError::io(format!("spawn {:?}", cfg.lab.qemu), e))?;
            boot.watchdog = child.stdin.take();
            boot.qemu = Some(child);
            match boot.wait_for(&boot.share.join("booted"), cfg.boot_timeout) {
                Ok(()) => {
                    boot.secs = t0.elapsed().as_secs_f64();
                    return Ok(boot);
                }
                Err(_) => {
                    boot.kill();
                    let console = boot.out.join("console.log");
                    // qemu's own complaints (e.g. a hostfwd port already in
                    // use) come first: they explain an empty console.
                    let tail = format!(
                        "{}\n{}",
                        tail_file(&boot.out.join("qemu.log"), 10),
                        tail_file(&console, 30)
                    );
                    let kept = boot
                        .out
                        .join(format!("console-boot-attempt-{}.log", boot.attempts));
                    let _ = fs::rename(&console, &kept);
                    if boot.attempts >= cfg.boot_attempts {
                        return Err(LabError::BootFailed {
                            attempts: boot.attempts,
                            console_tail: tail,
                        });
                    }
                    eprintln!(
                        "lab: guest did not boot (attempt {}), retrying",
                        boot.attempts
                    );
                }
            }
        }
    }

    /// Wait for `path` to exist; fails if qemu exits first or after `limit`.
    fn wait_for(&mut self, path: &Path, limit: Duration) -> Result<(), LabError> {
        let end = Instant::now() + limit;
        let rel = path
            .strip_prefix(&self.share)
            .unwrap_or(path)
            .display()
            .to_string();
        loop {
            if path.exists() {
                return Ok(());
            }
            if self.exited() {
                return Err(LabError::GuestGone(rel));
            }
            if Instant::now() >= end {
                return Err(LabError::WaitTimeout {
                    file: rel,
                    secs: limit.as_secs(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    fn exited(&mut self) -> bool {
        match self.qemu.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    fn kill(&mut self) {
        // Under the watchdog, closing its pipe makes it kill qemu and exit.
        let watched = self.watchdog.take().is_some();
        if let Some(mut c) = self.qemu.take() {
            if watched {
                let end = Instant::now() + Duration::from_secs(10);
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                    std::thread::sleep(POLL);
                }
            }
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }

    /// Ask qemu, through its QMP socket, to run `command` (a JSON object).
    fn qmp(&self, command: &str) -> Result<(), LabError> {
        crate::qmp::execute(&self.out.join("qmp.sock"), command)
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Which guest a scenario runs in.
#[derive(Debug)]
enum BootRef {
    /// A boot of its own, powered off when its script ends.
    Own(Boot),
    /// The process's shared boot (`None` once it was killed).
    Shared(MutexGuard<'static, Option<Boot>>),
}

/// A guest that has booted and is running its script.
///
/// Dropping it without [`RunningGuest::finish`] kills qemu and the host
/// processes (so a panicking test leaves nothing behind); in a shared boot it
/// kills the shared guest, and the next scenario boots a fresh one.
#[derive(Debug)]
pub struct RunningGuest {
    cfg: GuestConfig,
    out: PathBuf,
    /// This scenario's share directory: the boot's share, or its directory
    /// in the shared boot's share.
    share: PathBuf,
    boot: BootRef,
    hosts: Vec<Spawned>,
    started: Instant,
    /// The QMP id of this scenario's host-side capture (shared boots).
    capture: Option<String>,
    /// This scenario booted the guest (always, unless shared).
    booted_here: bool,
    finished: bool,
}

impl RunningGuest {
    pub(crate) fn boot(cfg: GuestConfig) -> Result<RunningGuest, LabError> {
        if cfg.shared.is_some() {
            return Self::boot_shared(cfg);
        }
        Self::boot_locked(cfg, lock_machine()?)
    }

    /// Boot a guest of its own under `lock` (the machine lock, or a handle of it
    /// shared by the two guests of a pair).
    pub(crate) fn boot_locked(cfg: GuestConfig, lock: File) -> Result<RunningGuest, LabError> {
        let out = cfg.lab.out_root().join(&cfg.run_name);
        fs::create_dir_all(cfg.lab.out_root()).map_err(|e| LabError::io("create lab/out", e))?;
        prepare_out(&out, &cfg)?;
        let started = Instant::now();
        let mut hosts = Vec::new();
        for p in &cfg.host_processes {
            hosts.push(p.spawn(&out)?);
        }
        let boot = match Boot::start(&cfg, out.clone(), lock, false) {
            Ok(b) => b,
            Err(e) => {
                for h in &mut hosts {
                    h.stop();
                }
                return Err(e);
            }
        };
        Ok(RunningGuest {
            share: out.join("share"),
            out,
            boot: BootRef::Own(boot),
            hosts,
            started,
            capture: None,
            booted_here: true,
            finished: false,
            cfg,
        })
    }

    /// Hand the scenario to the shared boot (booting it first if needed).
    fn boot_shared(cfg: GuestConfig) -> Result<RunningGuest, LabError> {
        let key = cfg.boot_key();
        let name = cfg.shared.clone().unwrap_or_default();
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = slot.as_mut() {
            if b.key != key || b.exited() {
                *slot = None; // dropping it kills it
            }
        }
        let mut booted_here = false;
        if slot.is_none() {
            let lock = lock_machine()?;
            let bout = cfg.lab.out_root().join(format!("boot-{name}"));
            prepare_boot_out(&bout, cfg.lab.dir())?;
            *slot = Some(Boot::start(&cfg, bout, lock, true)?);
            booted_here = true;
        }
        let boot = slot.as_mut().expect("a shared boot is up");
        boot.runs += 1;
        let n = boot.runs;
        let out = cfg.lab.out_root().join(&cfg.run_name);
        let share = boot.share.join("runs").join(&cfg.run_name);
        prepare_run(&out, &share, boot, &cfg)?;
        let started = Instant::now();
        let mut guest = RunningGuest {
            out,
            share,
            boot: BootRef::Shared(slot),
            hosts: Vec::new(),
            started,
            capture: None,
            booted_here,
            finished: false,
            cfg,
        };
        for p in guest.cfg.host_processes.clone() {
            let s = p.spawn(&guest.out)?;
            guest.hosts.push(s);
        }
        if guest.cfg.host_capture {
            let id = format!("capture{n}");
            let file = guest.out.join("host.pcap");
            let cmd = format!(
                "{{\"execute\":\"object-add\",\"arguments\":{{\"qom-type\":\"filter-dump\",\
                 \"id\":\"{id}\",\"netdev\":\"n0\",\"file\":\"{}\"}}}}",
                json_escape(&file.display().to_string())
            );
            guest.boot_mut().expect("shared boot").qmp(&cmd)?;
            guest.capture = Some(id);
        }
        // Queue it: the guest's lab_serve_runs picks up queue-<n> (renamed into
        // place, so it is never seen half written).
        let runs = guest.boot_mut().expect("shared boot").share.join("runs");
        let q = runs.join(format!("queue-{n}"));
        let tmp = runs.join(format!(".queue-{n}"));
        fs::write(&tmp, &guest.cfg.run_name).map_err(|e| LabError::io("queue a run", e))?;
        fs::rename(&tmp, &q).map_err(|e| LabError::io("queue a run", e))?;
        Ok(guest)
    }

    fn boot_mut(&mut self) -> Option<&mut Boot> {
        match &mut self.boot {
            BootRef::Own(b) => Some(b),
            BootRef::Shared(g) => g.as_mut(),
        }
    }

    /// Kill the guest (in a shared boot: the shared guest, for everyone).
    fn kill_boot(&mut self) {
        match &mut self.boot {
            BootRef::Own(b) => b.kill(),
            BootRef::Shared(g) => **g = None,
        }
    }

    fn exited(&mut self) -> bool {
        self.boot_mut().is_none_or(|b| b.exited())
    }

    /// The host directory the guest sees as `/share` (in a shared boot: the
    /// scenario's `LAB_RUN_DIR`, where its handshake files and results go).
    pub fn share(&self) -> &Path {
        &self.share
    }

    /// The run's output directory (`lab/out/<run>`).
    pub fn out_dir(&self) -> &Path {
        &self.out
    }

    /// Wait until the guest creates `<share>/<rel>`; returns its contents.
    /// Fails early if the guest powers off first.
    pub fn wait_for_file(&mut self, rel: &str, limit: Duration) -> Result<String, LabError> {
        let path = self.share.join(rel);
        let end = Instant::now() + limit;
        loop {
            if path.exists() {
                return fs::read_to_string(&path).map_err(|e| LabError::io(rel, e));
            }
            if self.exited() {
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

    /// Wait for the guest script's `lab_ready` (`ready` in its share).
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), LabError> {
        self.wait_for_file("ready", limit).map(|_| ())
    }

    /// Create `<share>/<rel>` for the guest's `lab_wait_for <rel>`.
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

    /// Wait (bounded by the run's timeout) for the guest script to end (its
    /// own guest powers off; a shared one stays up for the next scenario),
    /// stop the host processes, and collect everything into an [`Outcome`].
    pub fn finish(self) -> Result<Outcome, LabError> {
        let end = self.started + self.cfg.timeout;
        self.finish_by(end)
    }

    /// Like [`RunningGuest::finish`], but give the script at most `limit` from
    /// now (a scenario that expects the guest to hang).
    pub fn finish_within(self, limit: Duration) -> Result<Outcome, LabError> {
        let end = (self.started + self.cfg.timeout).min(Instant::now() + limit);
        self.finish_by(end)
    }

    fn finish_by(mut self, end: Instant) -> Result<Outcome, LabError> {
        self.finished = true;
        let done = self.share.join("exit-status");
        let shared = matches!(self.boot, BootRef::Shared(_));
        let mut timed_out = false;
        loop {
            if self.exited() || (shared && done.exists()) {
                break;
            }
            if Instant::now() >= end {
                timed_out = true;
                self.kill_boot();
                break;
            }
            std::thread::sleep(POLL);
        }
        if let Some(id) = self.capture.take() {
            if let Some(b) = self.boot_mut() {
                let cmd =
                    format!("{{\"execute\":\"object-del\",\"arguments\":{{\"id\":\"{id}\"}}}}");
                if let Err(e) = b.qmp(&cmd) {
                    eprintln!("lab: could not stop this scenario's capture: {e}");
                }
            }
        }
        self.stop_hosts();
        let host_logs = self
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.log.clone()))
            .collect();
        let timeout = self
            .cfg
            .timeout
            .min(end.saturating_duration_since(self.started));
        let (attempts, secs, shared_note) = match &self.boot {
            BootRef::Own(b) => (b.attempts, b.secs, None),
            BootRef::Shared(g) => {
                let (attempts, secs, runs) = g
                    .as_ref()
                    .map_or((0, 0.0, 0), |b| (b.attempts, b.secs, b.runs));
                let name = self.cfg.shared.clone().unwrap_or_default();
                let note = if self.booted_here {
                    format!("shared boot `boot-{name}`, scenario {runs}, booted by this one")
                } else {
                    format!("shared boot `boot-{name}`, scenario {runs}")
                };
                (attempts, secs, Some(note))
            }
        };
        let mut outcome = Outcome::collect(
            &self.cfg.run_name,
            &self.out,
            timed_out.then_some(timeout),
            if self.booted_here { attempts } else { 0 },
            if self.booted_here { secs } else { 0.0 },
            self.started.elapsed(),
            host_logs,
        );
        outcome.shared_boot = shared_note;
        Ok(outcome)
    }

    fn stop_hosts(&mut self) {
        for h in &mut self.hosts {
            h.stop();
        }
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        match &mut self.boot {
            BootRef::Own(b) => b.kill(),
            // Abandoned mid-scenario: its script may still run; start afresh.
            BootRef::Shared(g) if !self.finished => **g = None,
            BootRef::Shared(_) => {}
        }
        self.stop_hosts();
    }
}

/// Two guests joined by a virtual wire (qemu socket networking: eth1 in each, on
/// no other network), booted together under one machine lock, one vCPU each: a
/// client and a server on separate kernels, so RDMA traffic (RoCEv2 on rxe)
/// crosses a wire where the guests can capture it. Each guest keeps its slirp
/// eth0 (10.0.2.15) and its own share and `lab/out/<run>-<role>/`; its script
/// configures eth1 itself. Coordinate through the network (e.g. the client
/// retries until the server answers), not through the shares.
#[derive(Debug)]
pub struct GuestPair {
    server: GuestConfig,
    client: GuestConfig,
}

impl GuestPair {
    pub(crate) fn new(lab: &crate::Lab, server: GuestScript, client: GuestScript) -> GuestPair {
        let wired = |script, listen, mac| {
            let mut c = lab.guest(script);
            c.wire = Some(crate::qemu::Wire {
                listen,
                port: 0,
                mac,
            });
            c.cpus = 1;
            c
        };
        GuestPair {
            server: wired(server, true, "52:54:00:12:35:01"),
            client: wired(client, false, "52:54:00:12:35:02"),
        }
    }

    /// Run directories `lab/out/<name>-server` and `lab/out/<name>-client`.
    pub fn run_name(mut self, name: &str) -> Self {
        self.server.run_name = format!("{name}-server");
        self.client.run_name = format!("{name}-client");
        self
    }

    /// Each guest's limit from boot to power-off (default 300 s).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.server.timeout = t;
        self.client.timeout = t;
        self
    }

    /// Boot the server's guest (its qemu listens on the wire), then the client's
    /// (which connects), let both scripts run to their end, and collect both.
    pub fn run(mut self) -> Result<(Outcome, Outcome), LabError> {
        let lock = lock_machine()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| LabError::io("pick a port for the wire", e))?
            .port();
        for c in [&mut self.server, &mut self.client] {
            if let Some(w) = &mut c.wire {
                w.port = port;
            }
        }
        let shared_lock = lock
            .try_clone()
            .map_err(|e| LabError::io("share the machine lock", e))?;
        let server = RunningGuest::boot_locked(self.server, shared_lock)?;
        let client = RunningGuest::boot_locked(self.client, lock)?;
        let end = |role, g: &RunningGuest| End {
            role,
            out: g.out.clone(),
            share: g.share.clone(),
        };
        let watch = WireWatch::start(vec![end("server", &server), end("client", &client)], port);
        let client = client.finish();
        let server = server.finish();
        watch.stop();
        Ok((server?, client?))
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
    copy_payload(&share, cfg)
}

/// The script's binaries into `<share>/bin`, its files into `<share>`.
fn copy_payload(share: &Path, cfg: &GuestConfig) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::io(format!("{what} in {}", share.display()), e);
    for (name, src) in &cfg.script.binaries {
        if !src.exists() {
            return Err(LabError::NotFound(src.clone()));
        }
        fs::copy(src, share.join("bin").join(name)).map_err(|e| io("copy binary", e))?;
    }
    for bin in &cfg.script.library_closures {
        copy_libraries(bin, &share.join("lib"))?;
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

/// The shared libraries `bin` needs on the host (`ldd`), into `dir`, less those the
/// initramfs carries for every binary (the libc family and the loader).
fn copy_libraries(bin: &Path, dir: &Path) -> Result<(), LabError> {
    const IN_INITRAMFS: &[&str] = &[
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
    ];
    let io = |what: &str, e| LabError::io(format!("{what} for {}", bin.display()), e);
    let out = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| io("ldd", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("not found") {
        return Err(io(
            "ldd",
            std::io::Error::other(format!("ldd {}: {text}", bin.display())),
        ));
    }
    fs::create_dir_all(dir).map_err(|e| io("create lib dir", e))?;
    // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)"
    for lib in text.lines().filter_map(|l| l.split_whitespace().nth(2)) {
        let src = Path::new(lib);
        let Some(name) = src.file_name() else {
            continue;
        };
        if !src.is_absolute() || IN_INITRAMFS.iter().any(|n| name == *n) {
            continue;
        }
        let dst = dir.join(name);
        // Already there (another scenario of a shared boot): never copy over it, since
        // it may be a hard link to the host's own library.
        if dst.symlink_metadata().is_ok() {
            continue;
        }
        let real = fs::canonicalize(src).map_err(|e| io("resolve library", e))?;
        if fs::hard_link(&real, &dst).is_err() {
            fs::copy(&real, &dst).map_err(|e| io("copy library", e))?;
        }
    }
    Ok(())
}

/// Fresh `lab/out/boot-<name>/share` whose script serves queued scenarios. The runs
/// an earlier boot of that name served (`share/runs/<run>`, which `lab/out/<run>/share`
/// links to) stay until their scenario runs again, as an own boot's `lab/out/<run>`
/// does: a failed run's capture and logs must outlive the later test binaries that
/// boot under the same name (a CI run lost a failed capture that way).
fn prepare_boot_out(out: &Path, lab_dir: &Path) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::io(format!("{what} in {}", out.display()), e);
    if out.exists() {
        clear_except(out, |name| name == "share").map_err(|e| io("clear", e))?;
        clear_except(&out.join("share"), |name| name == "runs").map_err(|e| io("clear", e))?;
        // The queue is numbered from 1 in each boot.
        clear_except(&out.join("share/runs"), |name| !name.starts_with("queue-"))
            .map_err(|e| io("clear the queue", e))?;
    }
    let share = out.join("share");
    fs::create_dir_all(share.join("bin")).map_err(|e| io("create share", e))?;
    fs::create_dir_all(share.join("runs")).map_err(|e| io("create share", e))?;
    fs::copy(lab_dir.join("guest/lib.sh"), share.join("lib.sh"))
        .map_err(|e| io("copy lib.sh", e))?;
    fs::write(share.join("guest.sh"), ". /share/lib.sh\nlab_serve_runs\n")
        .map_err(|e| io("write guest.sh", e))?;
    fs::write(share.join("env.sh"), "").map_err(|e| io("write env.sh", e))
}

/// Removes what `dir` holds except the entries `keep` names (nothing if `dir` is
/// missing).
fn clear_except(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if keep(&entry.file_name().to_string_lossy()) {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// A scenario's directories in a shared boot: `<boot share>/runs/<run>` (its
/// script, env, results, logs), and `lab/out/<run>` with `share` linking to the
/// former, as an own boot would have it, plus links to the boot's console and
/// live kernel log.
fn prepare_run(out: &Path, share: &Path, boot: &Boot, cfg: &GuestConfig) -> Result<(), LabError> {
    let io = |what: &str, e| LabError::io(format!("{what} for run {}", cfg.run_name), e);
    if out.symlink_metadata().is_ok() {
        fs::remove_dir_all(out).map_err(|e| io("clear lab/out/<run>", e))?;
    }
    if share.exists() {
        fs::remove_dir_all(share).map_err(|e| io("clear its share", e))?;
    }
    fs::create_dir_all(out).map_err(|e| io("create lab/out/<run>", e))?;
    fs::create_dir_all(share).map_err(|e| io("create its share", e))?;
    fs::write(share.join("guest.sh"), &cfg.script.body).map_err(|e| io("write guest.sh", e))?;
    fs::write(share.join("env.sh"), cfg.script.env_sh()).map_err(|e| io("write env.sh", e))?;
    copy_payload(&boot.share, cfg)?;
    let link = |target: &Path, at: &Path| {
        std::os::unix::fs::symlink(target, at).map_err(|e| io("link", e))
    };
    link(share, &out.join("share"))?;
    link(&boot.out.join("console.log"), &out.join("console.log"))?;
    link(&boot.share.join("kmsg.txt"), &share.join("kmsg.txt"))
}

/// `s` as the inside of a JSON string.
fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The last `n` lines of a file ("" if unreadable).
pub(crate) fn tail_file(path: &Path, n: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new boot of a name keeps the runs an earlier one served, and nothing else.
    #[test]
    fn a_new_shared_boot_keeps_the_earlier_runs_only() {
        let out = std::env::temp_dir().join(format!("lab-boot-out-{}", std::process::id()));
        let runs = out.join("share/runs");
        fs::create_dir_all(runs.join("failed-scenario")).unwrap();
        fs::write(runs.join("failed-scenario/capture.pcap"), b"kept").unwrap();
        fs::write(runs.join("queue-1"), b"failed-scenario").unwrap();
        fs::write(out.join("share/booted"), b"").unwrap();
        fs::write(out.join("console.log"), b"old").unwrap();
        let lab_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab");
        prepare_boot_out(&out, &lab_dir).unwrap();
        assert_eq!(
            fs::read(runs.join("failed-scenario/capture.pcap")).unwrap(),
            b"kept"
        );
        assert!(!runs.join("queue-1").exists());
        assert!(!out.join("share/booted").exists());
        assert!(!out.join("console.log").exists());
        assert!(out.join("share/lib.sh").exists());
        fs::remove_dir_all(&out).unwrap();
    }
}
