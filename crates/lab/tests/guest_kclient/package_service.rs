//! Scenario (issue 29): nfsd as an admin installs and runs it. The Debian package
//! built from the tree (`scripts/package`) is installed with dpkg into a minimal
//! Debian 12 (lab/setup's debootstrap) booted with systemd in a container
//! (systemd-nspawn, the host's network), and:
//! - `systemctl enable` at install, the boot starts `nfsd-rs.service` (Type=notify:
//!   active only once nfsd sent READY=1), serving `/etc/exports` with the settings
//!   of `/etc/nfsd-rs.conf`, under the unit's hardening;
//! - the guest's kernel client mounts it (`vers=4.1` over TCP, through slirp),
//!   writes a file and reads it back after dropping its caches; the file is in the
//!   container's export with the same bytes;
//! - `systemctl reload` after /etc/exports gained a second export: the journal says
//!   it was reloaded, and the kernel client mounts the new export;
//! - `systemctl stop` ends it cleanly: the unit is inactive, not failed, and the
//!   journal has nfsd's `stopped` line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::workspace::md5_file;
use lab::{GuestScript, Lab};

const NFS_PORT: u16 = 35349;
const METRICS_PORT: u16 = 35350;

const GUEST: &str = r#". /share/lib.sh
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv4'
step wait_service lab_wait_for service-up 300
M=/mnt/svc
mkdir -p $M $M-second
OPTS="vers=4.1,proto=tcp,port=$LAB_NFS_PORT"
step mount timeout -s KILL 90 mount.nfs 10.0.2.2:/srv/export $M -n -o "$OPTS"
step make sh -c "head -c 3000000 /dev/urandom > /tmp/data"
record data "$(md5sum /tmp/data | cut -d' ' -f1)"
step write cp /tmp/data $M/from-guest
step drop_caches sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'
step read_back lab_same_md5 /tmp/data $M/from-guest
step second_is_not_exported_yet sh -c "! timeout -s KILL 60 mount.nfs 10.0.2.2:/srv/second $M-second -n -o $OPTS,retry=0"
touch $LAB_RUN_DIR/guest-mounted
step wait_reload lab_wait_for service-reloaded 300
step mount_second timeout -s KILL 90 mount.nfs 10.0.2.2:/srv/second $M-second -n -o "$OPTS"
record second "$(cat $M-second/note)"
step umount umount $M $M-second
touch $LAB_RUN_DIR/guest-done
exit 0
"#;

/// A container booted from `root`, stopped (poweroff) when dropped.
struct Container {
    nspawn: Child,
}

impl Container {
    fn boot(root: &Path, console: &Path) -> Container {
        let log = std::fs::File::create(console).unwrap();
        let nspawn = Command::new("systemd-nspawn")
            .args([
                "-q",
                "--register=no",
                "--keep-unit",
                "--console=passive",
                "-b",
                "-D",
            ])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("systemd-nspawn (systemd-container, installed by lab/setup)");
        Container { nspawn }
    }

    /// The container's PID 1 (systemd): the first `systemd` among nspawn's
    /// descendants (its child, or with a console of its own its inner child's).
    fn init_pid(&self) -> Option<u32> {
        let children = |pid: u32| -> Vec<u32> {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        };
        let is_systemd = |p: &u32| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "systemd")
        };
        let mut level = children(self.nspawn.id());
        for _ in 0..3 {
            if let Some(p) = level.iter().find(|p| is_systemd(p)) {
                return Some(*p);
            }
            level = level.into_iter().flat_map(children).collect();
        }
        None
    }

    /// Runs `args` inside the booted container: (success, output).
    fn exec(&self, args: &[&str]) -> (bool, String) {
        let Some(pid) = self.init_pid() else {
            return (false, "the container's systemd is not running".into());
        };
        let out = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-a"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// Waits until `systemctl is-active nfsd-rs` answers `want`.
    fn wait_state(&self, want: &str, limit: Duration) -> Result<(), String> {
        let end = Instant::now() + limit;
        let mut last = String::new();
        while Instant::now() < end {
            last = self.exec(&["systemctl", "is-active", "nfsd-rs"]).1;
            if last.trim() == want {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!(
            "nfsd-rs is {:?}, not {want}, after {limit:?}",
            last.trim()
        ))
    }

    fn journal(&self) -> String {
        self.exec(&["journalctl", "-u", "nfsd-rs", "--no-pager"]).1
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let init = self.init_pid();
        let _ = self.exec(&["systemctl", "poweroff"]);
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end && matches!(self.nspawn.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
        // Killing nspawn alone would leave the container's systemd behind.
        if let Some(pid) = init.filter(|_| matches!(self.nspawn.try_wait(), Ok(None))) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// Runs `cmd`, failing the test with its output if it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn debian_package_serves_as_a_systemd_service() {
    let run_name = "package-service";
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let base = lab.service_root().unwrap_or_else(|e| panic!("{e}"));
    // Not under lab/out, whose runs a shared boot clears: the container's root.
    let work = PathBuf::from("/var/tmp/lab-package-service");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let repo = lab.dir().parent().unwrap().to_path_buf();
    let package = Command::new(repo.join("scripts/package"))
        .arg(&work)
        .current_dir(&repo)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&package.stdout);
    assert!(
        package.status.success(),
        "scripts/package failed: {}",
        String::from_utf8_lossy(&package.stderr)
    );
    // Its last line is the .deb's path.
    let deb = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    let root = work.join("root");
    run(Command::new("cp").arg("-a").arg(base).arg(&root));
    std::fs::copy(&deb, root.join("root/nfsd-rs.deb")).unwrap();
    let nspawn = |args: &[&str]| {
        run(Command::new("systemd-nspawn")
            .args(["-q", "--register=no", "--keep-unit", "-D"])
            .arg(&root)
            .args(args))
    };
    nspawn(&["dpkg", "-i", "/root/nfsd-rs.deb"]);
    nspawn(&["systemctl", "enable", "nfsd-rs"]);
    std::fs::create_dir_all(root.join("srv/export")).unwrap();
    std::fs::create_dir_all(root.join("srv/second")).unwrap();
    std::fs::write(root.join("srv/second/note"), "second export\n").unwrap();
    std::fs::write(
        root.join("etc/exports"),
        "/srv/export *(rw,insecure,no_root_squash)\n",
    )
    .unwrap();
    // The packaged file with the lab's settings appended (the command line is the
    // unit's, which gives none).
    let conf = root.join("etc/nfsd-rs.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text += &format!(
        "bind = 127.0.0.1\nnfs-port = {NFS_PORT}\nmount-port = {NFS_PORT}\nrpcbind = off\n\
         no-rdma = true\nno-nlm = true\nmetrics = {METRICS_PORT}\n"
    );
    std::fs::write(&conf, text).unwrap();

    let container = Container::boot(&root, &work.join("console.log"));
    let script = GuestScript::inline(run_name, GUEST).env("LAB_NFS_PORT", NFS_PORT.to_string());
    let mut guest = lab
        .guest(script)
        .run_name(run_name)
        .shared_boot("kclient")
        .timeout(Duration::from_secs(600))
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut checks: Vec<(&str, Result<String, String>)> = Vec::new();
    let started = container.wait_state("active", Duration::from_secs(180));
    let up = started.is_ok();
    checks.push((
        "service_active_after_boot",
        started.map(|()| "active".into()),
    ));
    if up {
        let _ = guest.signal("service-up");
        if guest
            .wait_for_file("guest-mounted", Duration::from_secs(300))
            .is_ok()
        {
            let exports = "/srv/export *(rw,insecure,no_root_squash)\n/srv/second *(ro,insecure)\n";
            std::fs::write(root.join("etc/exports"), exports).unwrap();
            let (ok, text) = container.exec(&["systemctl", "reload", "nfsd-rs"]);
            let journal = container.journal();
            checks.push((
                "systemctl_reload_rereads_exports",
                if ok && journal.contains("SIGHUP: exports reloaded from /etc/exports") {
                    Ok("reloaded".into())
                } else {
                    Err(format!("reload ok={ok}: {text}\n{journal}"))
                },
            ));
            let _ = guest.signal("service-reloaded");
            let _ = guest.wait_for_file("guest-done", Duration::from_secs(300));
        }
        let (ok, text) = container.exec(&["systemctl", "stop", "nfsd-rs"]);
        let stopped = container.wait_state("inactive", Duration::from_secs(30));
        let journal = container.journal();
        checks.push((
            "systemctl_stop_is_clean",
            match (ok, stopped) {
                (true, Ok(())) if journal.contains("nfsd: stopped") => Ok("inactive".into()),
                (ok, s) => Err(format!("stop ok={ok} {text} {s:?}\n{journal}")),
            },
        ));
        let _ = std::fs::write(guest.out_dir().join("journal.txt"), journal);
    }
    drop(container);
    let mut o = guest.finish().unwrap_or_else(|e| panic!("{e}"));
    for (name, r) in checks {
        if let Some(s) = o.host_step(name, |_| r) {
            eprintln!("{name}: {s}");
        }
    }
    o.host_step("guest_bytes_in_the_containers_export", |o| {
        let got = md5_file(&root.join("srv/export/from-guest"));
        match o.value("data") {
            Some(want) if want == got => Ok(()),
            other => Err(format!("container has md5 {got}, guest wrote {other:?}")),
        }
    });
    o.host_step("second_export_after_reload", |o| match o.value("second") {
        Some("second export") => Ok(()),
        other => Err(format!("the second export's note reads {other:?}")),
    });
    o.assert_passed();
    let _ = std::fs::remove_dir_all(&work);
}
