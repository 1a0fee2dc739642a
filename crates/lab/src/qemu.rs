//! How a guest is booted: the fixed machine shape and the qemu command line.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{GuestScript, HostProcess, Lab, LabError, Outcome, RunningGuest};

/// Guest memory. Fixed: runs must not depend on the machine they run on.
pub const MEMORY_MIB: u32 = 1024;
/// Guest vCPUs. Fixed, and equal to this machine's core count.
pub const CPUS: u32 = 2;

/// A TCP port forward from the host's 127.0.0.1 into the guest (qemu
/// `hostfwd`). The host port is occupied by qemu for the whole run, so a
/// host-side server under test must use another port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortForward {
    /// Port on 127.0.0.1 of the host.
    pub host: u16,
    /// Port on the guest (10.0.2.15).
    pub guest: u16,
}

impl PortForward {
    /// Forward host 127.0.0.1:`host` to guest :`guest`.
    pub fn tcp(host: u16, guest: u16) -> PortForward {
        PortForward { host, guest }
    }
}

/// A guest run being configured; finish with [`GuestConfig::boot`] (to do
/// host-side work while it runs) or [`GuestConfig::run`] (guest-only).
#[derive(Debug)]
pub struct GuestConfig {
    pub(crate) lab: Lab,
    pub(crate) script: GuestScript,
    pub(crate) run_name: String,
    pub(crate) forwards: Vec<PortForward>,
    pub(crate) host_capture: bool,
    pub(crate) host_processes: Vec<HostProcess>,
    pub(crate) timeout: Duration,
    pub(crate) boot_timeout: Duration,
    pub(crate) boot_attempts: u32,
    /// `Some(name)`: run in the shared boot `name` (see [`GuestConfig::shared_boot`]).
    pub(crate) shared: Option<String>,
    /// A second NIC (eth1) on a wire to another guest ([`crate::GuestPair`]).
    pub(crate) wire: Option<Wire>,
    /// vCPUs ([`CPUS`], or one each for the two guests of a pair).
    pub(crate) cpus: u32,
}

/// One end of the virtual wire between the two guests of a [`crate::GuestPair`]:
/// qemu's socket networking, a second virtio NIC (eth1 in the guest) whose frames
/// go over a TCP connection on the host's 127.0.0.1 to the other guest's.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    /// `true`: this qemu listens on `port`; `false`: it connects to it.
    pub(crate) listen: bool,
    pub(crate) port: u16,
    pub(crate) mac: &'static str,
}

impl GuestConfig {
    pub(crate) fn new(lab: Lab, script: GuestScript) -> GuestConfig {
        GuestConfig {
            run_name: script.name.clone(),
            lab,
            script,
            forwards: Vec::new(),
            host_capture: false,
            host_processes: Vec::new(),
            // Under TCG a full NFS scenario takes 25-35 s; these bounds only
            // catch hangs, they never decide a pass.
            timeout: Duration::from_secs(300),
            boot_timeout: Duration::from_secs(120),
            boot_attempts: 2,
            shared: None,
            wire: None,
            cpus: CPUS,
        }
    }

    /// Name of the run directory `lab/out/<name>` (default: the script name).
    pub fn run_name(mut self, name: &str) -> Self {
        self.run_name = name.to_string();
        self
    }

    /// Add a hostfwd: host 127.0.0.1:`host` -> guest :`guest`.
    pub fn forward(mut self, host: u16, guest: u16) -> Self {
        self.forwards.push(PortForward::tcp(host, guest));
        self
    }

    /// Forward the guest knfsd's NFS/RDMA port (20049) and rpc.mountd's
    /// (20048) to the same ports on the host's 127.0.0.1.
    pub fn forward_knfsd(self) -> Self {
        self.forward(crate::ports::NFS_RDMA, crate::ports::NFS_RDMA)
            .forward(crate::ports::MOUNTD, crate::ports::MOUNTD)
    }

    /// Capture the guest's network traffic on the host side (qemu
    /// `filter-dump` on the guest NIC) into `<out>/host.pcap`. This sees all
    /// host<->guest traffic; guest-internal traffic needs tcpdump in the guest.
    pub fn capture_host_side(mut self) -> Self {
        self.host_capture = true;
        self
    }

    /// Start `p` on the host before the guest boots (e.g. our server, which
    /// must listen before the guest's client mounts). It is killed when the
    /// run finishes and its log is part of a failure report.
    pub fn host_process(mut self, p: HostProcess) -> Self {
        self.host_processes.push(p);
        self
    }

    /// Whole-run limit from boot to power-off (default 300 s); in a shared boot,
    /// from the moment this scenario is handed to the guest to its end.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Run this scenario in the shared boot `name` instead of a guest of its own:
    /// one boot (and one siw/knfsd setup, which `lab_rdma_up` and `lab_knfsd_up`
    /// do once per boot) serves every scenario of this test process that asks
    /// for the same `name`, port forwards and `LAB_SIW`, one after another. Each
    /// scenario keeps its own `lab/out/<run>/` (its `share/` is its directory in
    /// the boot's share), its own results, logs, host processes and host-side
    /// capture (added and removed through QMP), and its own [`Outcome`]: the
    /// guest's `lab_serve_runs` runs its script in a fresh shell, and a failing
    /// step ends only that scenario.
    ///
    /// The boot is booted by the first such scenario and lives until a scenario
    /// needs another boot, a scenario overruns or is abandoned (then it is killed
    /// and the next one boots afresh), or the test process exits (qemu runs
    /// under a watchdog that kills it when the process is gone). Only scenarios of
    /// the same test binary can share, so scenarios that share a guest setup live
    /// in one test binary (`tests/<group>/main.rs`).
    pub fn shared_boot(mut self, name: &str) -> Self {
        self.shared = Some(name.to_string());
        self
    }

    /// What must match for two scenarios to share a boot.
    pub(crate) fn boot_key(&self) -> Option<String> {
        let name = self.shared.as_ref()?;
        let siw = self
            .script
            .env
            .get("LAB_SIW")
            .map_or("stock", String::as_str);
        Some(format!("{name} siw={siw} forwards={:?}", self.forwards))
    }

    /// Boot the guest and return once its init has mounted the share. A
    /// guest that does not get that far is killed and booted again, up to
    /// twice in all; nothing else is ever retried.
    pub fn boot(self) -> Result<RunningGuest, LabError> {
        RunningGuest::boot(self)
    }

    /// Boot, let the guest script run to the end, power off, collect.
    pub fn run(self) -> Result<Outcome, LabError> {
        self.boot()?.finish()
    }

    /// The qemu command for this configuration, writing into `out`: `capture` puts the host-side capture on the command line;
    /// `qmp` adds a QMP socket at `<out>/qmp.sock` (shared boots add and remove
    /// captures per scenario through it; a pair's wire watcher reads eth1's queues).
    pub(crate) fn qemu_command(&self, out: &Path, capture: bool, qmp: bool) -> Command {
        let mut netdev = "user,id=n0".to_string();
        for f in &self.forwards {
            netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{}-:{}", f.host, f.guest));
        }
        let mut cmd = Command::new(&self.lab.qemu);
        cmd.args(["-accel", "tcg", "-cpu", "max"])
            .args([
                "-m",
                &MEMORY_MIB.to_string(),
                "-smp",
                &self.cpus.to_string(),
            ])
            .args(["-nodefaults", "-display", "none", "-no-reboot"])
            .args(["-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", out.join("console.log").display()))
            .arg("-kernel")
            .arg(&self.lab.kernel)
            .arg("-initrd")
            .arg(&self.lab.initrd)
            .args(["-append", "console=ttyS0 quiet loglevel=4 panic=-1"])
            .args(["-netdev", &netdev])
            .args(["-device", "virtio-net-pci,netdev=n0"])
            .arg("-virtfs")
            .arg(format!(
                "local,path={},mount_tag=host0,security_model=none,id=host0",
                out.join("share").display()
            ));
        if let Some(w) = &self.wire {
            let end = if w.listen { "listen" } else { "connect" };
            cmd.args([
                "-netdev",
                &format!("socket,id=n1,{end}=127.0.0.1:{}", w.port),
            ])
            // `event_idx=off`: with event indexes, qemu 7.2's virtio-net loses a
            // transmit kick now and then (docs/stalls.md, "The wire's transmit queue
            // stops"): a frame the guest queues while qemu finishes a send that had
            // to wait for the socket is never taken, nor any after it, and the wire
            // is dead one way. Without them the guest kicks whenever qemu's
            // "no notify" flag is clear, and qemu clears it before its last look.
            .args([
                "-device",
                &format!(
                    "virtio-net-pci,netdev=n1,mac={},id=wire,event_idx=off",
                    w.mac
                ),
            ]);
        }
        if qmp {
            cmd.arg("-qmp").arg(format!(
                "unix:{},server=on,wait=off",
                out.join("qmp.sock").display()
            ));
        }
        if capture {
            cmd.arg("-object").arg(format!(
                "filter-dump,id=f0,netdev=n0,file={}",
                out.join("host.pcap").display()
            ));
        }
        cmd
    }
}
