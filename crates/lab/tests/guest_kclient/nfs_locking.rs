//! Scenario: locking through our NLM. The guest's Linux kernel client mounts our
//! `nfsd` on the host over TCP and over RDMA **without** `nolock`, so every fcntl
//! lock goes from the kernel's NLM client to our lock manager. Then:
//!
//! 1. `nlm-locktest suite` (crates/lab/src/bin/nlm-locktest.rs) on each mount:
//!    thirteen parent/child lock tests that mirror cthon04's `tlocklfs` tests 1-13
//!    (written for the lab: cthon04 is not available here), including a blocking
//!    F_SETLKW granted when the holder unlocks, in well under the client's 30 s poll:
//!    our GRANTED callback woke it.
//! 2. Two clients: a guest process holds a write lock on bytes 0-99 of a file on the
//!    RDMA mount; a second client (this test, our RPC client, caller name
//!    `lab-host-client`) sees it with NLM TEST (holder 0+100, exclusive), is denied
//!    bytes 0-9, and takes 200-299 with NM_LOCK; the guest sees that lock (F_SETLK
//!    denied, F_GETLK shows it) and blocks on it with F_SETLKW; the host unlocks, and
//!    the guest is granted within seconds (GRANTED callback).
//! 3. Server restart with a lock held: the guest holds bytes 0-99 of a file on the TCP
//!    mount; nfsd is killed (SIGKILL) and started again on the same state directory.
//!    It sends SM_NOTIFY to the guest's statd and serves a 20 s grace period (TEST
//!    answers NLM4_DENIED_GRACE_PERIOD); the guest's kernel reclaims its lock; after
//!    the grace period our TEST finds the guest's lock again (holder 0+100).
//! 4. Client reboot: the guest runs `sm-notify -f` (what a rebooted client's statd
//!    does): our server drops the guest's locks, and our TEST is granted.
//!
//! Network: the guest is behind qemu user networking, so the server (on the host)
//! reaches the guest's portmapper, lockd and statd only through hostfwd ports: guest
//! 111 is host 30111 (nfsd `--client-portmap-port 30111`), the guest's lockd is pinned
//! to 30021 (`/proc/sys/fs/nfs/nlm_tcpport`) and its rpc.statd to 30662 (`-p`), each
//! forwarded from the same host port, so the ports the guest's rpcbind names are the
//! ports the host connects to. The forwards make this scenario boot its own guest
//! (`kclient-nlm`, shared with `nfs_locking_cthon`).
//! nfsd serves its own portmapper on 127.0.0.1:111 (the guest looks NLM up there) and
//! its default ports (NFS 2049, MOUNT 20048, NLM/NSM 4045), RDMA on 30049.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};
use nfsd::nlm::xdr::*;
use oncrpc::{Client, ClientConfig, TcpTransport};
use xdr::{Bytes, Decode, Encode, XdrStream};

const RDMA_PORT: u16 = lab::ports::HOST_SERVER_RDMA;
const CLIENT_PORTMAP: u16 = 30111;
const GUEST_LOCKD: u16 = 30021;
const GUEST_STATD: u16 = 30662;
const NLM_ADDR: &str = "127.0.0.1:4045";
const GRACE_SECS: u64 = 20;
const HOST_NAME: &str = "lab-host-client";

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
wait_line() { # FILE WORD SECS
  local i=0
  until grep -q "$2" "$1" 2>/dev/null; do
    [ $i -ge $(($3 * 5)) ] && { cat "$1"; return 1; }
    sleep 0.2
    i=$((i + 1))
  done
}
locking_on() { ! awk -v m="$1" '$2==m' /proc/mounts | grep -q nolock; }
suite() { /share/bin/nlm-locktest suite "$1" >"$LAB_RUN_DIR/suite-$2.txt" 2>&1; local rc=$?; cat "$LAB_RUN_DIR/suite-$2.txt"; return $rc; }
L=/share/bin/nlm-locktest
step lockd_port lab_lockd_port "$LAB_LOCKD_PORT"
step statd_up lab_statd_up "$LAB_STATD_PORT"
mkdir -p /mnt/tcp /mnt/rdma
step mount_tcp mount.nfs "10.0.2.2:$LAB_EXPORT" /mnt/tcp -n -o vers=3,proto=tcp
step mount_rdma mount.nfs "10.0.2.2:$LAB_EXPORT" /mnt/rdma -n -o "vers=3,proto=rdma,port=$LAB_RDMA_PORT"
record proc_mounts "$(grep ' /mnt/' /proc/mounts | tr '\n' ';')"
step locking_on_tcp locking_on /mnt/tcp
step locking_on_rdma locking_on /mnt/rdma
step xprt_is_rdma lab_expect_xprt /mnt/rdma rdma
step suite_tcp suite /mnt/tcp/suite-tcp tcp
step suite_rdma suite /mnt/rdma/suite-rdma rdma
record suite_passes_tcp "$(grep -c '^PASS' "$LAB_RUN_DIR/suite-tcp.txt")"
record suite_passes_rdma "$(grep -c '^PASS' "$LAB_RUN_DIR/suite-rdma.txt")"
record rpcinfo "$(rpcinfo -p 127.0.0.1 | tr '\n' ';')"

# Two clients, on the RDMA mount.
F=/mnt/rdma/shared
: >"$F"
$L hold "$F" 0 100 w /tmp/stop-hold >/tmp/hold.txt 2>&1 &
step guest_holds wait_line /tmp/hold.txt held 30
lab_ready
step wait_host_locked lab_wait_for host-locked 300
record guest_try_host_range "$($L try "$F" 250 10 w)"
record guest_getlk_host_range "$($L getlk "$F" 200 1 w)"
$L wait "$F" 200 100 w 100 >/tmp/wait.txt 2>&1 &
W=$!
sleep 3
touch "$LAB_RUN_DIR/guest-waiting"
step wait_host_unlocked lab_wait_for host-unlocked 300
waitw() { wait $W; }
step blocked_lock_granted waitw
record guest_wait "$(cat /tmp/wait.txt)"

# Server restart with a lock held, on the TCP mount.
G=/mnt/tcp/restart
: >"$G"
$L hold "$G" 0 100 w /tmp/stop-hold2 >/tmp/hold2.txt 2>&1 &
step guest_holds_tcp wait_line /tmp/hold2.txt held 30
touch "$LAB_RUN_DIR/guest-holds-tcp"
step wait_server_checked lab_wait_for server-checked 300
record dmesg_lockd "$(dmesg | grep -i lockd | tail -5 | tr '\n' ';')"

# The client "reboots": its statd's SM_NOTIFY to the server.
step sm_notify /share/bin/sm-notify -f -d
touch "$LAB_RUN_DIR/client-rebooted"
step wait_host_reboot_checked lab_wait_for host-reboot-checked 300
touch /tmp/stop-hold /tmp/stop-hold2
sleep 1
umount /mnt/tcp || umount -l /mnt/tcp
umount -l /mnt/rdma
exit 0
"#;

/// Our nfsd, run by the test so that it can be killed and started again.
struct Nfsd {
    exe: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Nfsd {
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut child = Command::new(&self.exe)
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start nfsd: {e}"));
        // Copy stdout to the log until "nfsd: ready".
        let out = child.stdout.take().unwrap();
        let log_path = self.log.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(log_path)
                .unwrap();
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(f, "{line}");
                if line.contains("nfsd: ready") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("nfsd not ready in 30 s; see {}", self.log.display()));
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nfsd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn client(addr: &str) -> Client {
    Client::new(
        TcpTransport::new(addr.parse::<SocketAddr>().unwrap()),
        ClientConfig {
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        },
    )
}

/// The handle of `name` in the export: MNT, then LOOKUP.
async fn handle(export: &Path, name: &str) -> Result<Bytes, String> {
    use nfs3::dir::{Lookup3Args, Lookup3Res};
    use nfs3::mount::{DirPath, MountProc3, MountRes3};
    let mut r = client("127.0.0.1:20048")
        .call(
            nfs3::MOUNT_PROGRAM,
            nfs3::MOUNT_V3,
            MountProc3::MNT.0,
            DirPath(Bytes::from(export.display().to_string())).to_xdr(),
        )
        .await
        .map_err(|e| format!("MNT: {e}"))?;
    let root = match MountRes3::decode(&mut r.results).map_err(|e| e.to_string())? {
        MountRes3::Ok { fhandle, .. } => fhandle,
        MountRes3::Fail(s) => return Err(format!("MNT: {s:?}")),
    };
    let args = Lookup3Args {
        what: nfs3::DirOpArgs3 {
            dir: nfs3::NfsFh3(root),
            name: nfs3::Filename3(Bytes::copy_from_slice(name.as_bytes())),
        },
    };
    let mut r = client("127.0.0.1:2049")
        .call(
            nfs3::NFS_PROGRAM,
            nfs3::NFS_V3,
            nfs3::NfsProc3::LOOKUP.0,
            args.to_xdr(),
        )
        .await
        .map_err(|e| format!("LOOKUP: {e}"))?;
    match Lookup3Res::decode(&mut r.results).map_err(|e| e.to_string())? {
        nfs3::NfsResult::Ok(ok) => Ok(ok.object.0),
        nfs3::NfsResult::Fail(s, _) => Err(format!("LOOKUP {name}: {s:?}")),
    }
}

fn host_lock(fh: &Bytes, offset: u64, len: u64) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: Bytes::from_static(HOST_NAME.as_bytes()),
        fh: fh.clone(),
        oh: Bytes::from(format!("4242@{HOST_NAME}")),
        svid: 4242,
        offset,
        len,
    }
}

async fn nlm<R: Decode>(proc_: u32, args: XdrStream) -> Result<R, String> {
    let mut r = client(NLM_ADDR)
        .call(NLM_PROGRAM, NLM_V4, proc_, args)
        .await
        .map_err(|e| format!("NLM proc {proc_}: {e}"))?;
    R::decode(&mut r.results).map_err(|e| e.to_string())
}

async fn test(fh: &Bytes, offset: u64, len: u64) -> Result<TestRes, String> {
    let args = TestArgs {
        cookie: Bytes::from_static(b"t"),
        exclusive: true,
        lock: host_lock(fh, offset, len),
    };
    nlm(proc4::TEST, args.to_xdr()).await
}

async fn nm_lock(fh: &Bytes, offset: u64, len: u64) -> Result<Stat, String> {
    let args = LockArgs {
        cookie: Bytes::from_static(b"l"),
        block: false,
        exclusive: true,
        lock: host_lock(fh, offset, len),
        reclaim: false,
        state: 1,
    };
    Ok(nlm::<Res>(proc4::NM_LOCK, args.to_xdr()).await?.stat)
}

async fn unlock(fh: &Bytes, offset: u64, len: u64) -> Result<Stat, String> {
    let args = UnlockArgs {
        cookie: Bytes::from_static(b"u"),
        lock: host_lock(fh, offset, len),
    };
    Ok(nlm::<Res>(proc4::UNLOCK, args.to_xdr()).await?.stat)
}

/// The guest's exclusive lock on 0+100 is what TEST reports.
fn holder_is_guest_0_100(r: &TestRes) -> Result<String, String> {
    match (&r.stat, &r.holder) {
        (Stat::Denied, Some(h)) if h.exclusive && h.offset == 0 && h.len == 100 => Ok(format!(
            "TEST: NLM4_DENIED, holder svid {} oh {:?} 0+100 exclusive",
            h.svid,
            String::from_utf8_lossy(&h.oh)
        )),
        _ => Err(format!(
            "TEST: {r:?}, expected NLM4_DENIED by the guest's 0+100"
        )),
    }
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_client_locks_through_our_nlm_two_clients_contend_and_restart_is_recovered() {
    let run_name = "nfs-locking";
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd_exe = build_binary("nfsd", "nfsd");
    let locktest = build_binary("lab", "nlm-locktest");
    let export = crate::common::writable_export(run_name);
    let state = std::env::temp_dir().join(format!("lab-{run_name}-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let log = std::env::temp_dir().join(format!("lab-{run_name}-nfsd-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut nfsd = Nfsd {
        exe: nfsd_exe,
        args: [
            "--bind",
            "127.0.0.1",
            "--rdma-port",
            &RDMA_PORT.to_string(),
            "--rpcbind",
            "serve",
            "--grace-period",
            &GRACE_SECS.to_string(),
            "--client-portmap-port",
            &CLIENT_PORTMAP.to_string(),
            "--state-dir",
            &state.display().to_string(),
            &export.display().to_string(),
        ]
        .map(str::to_string)
        .to_vec(),
        log: log.clone(),
        child: None,
    };
    nfsd.start();
    let script = GuestScript::inline(run_name, GUEST)
        .env("LAB_RDMA_PORT", RDMA_PORT.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_LOCKD_PORT", GUEST_LOCKD.to_string())
        .env("LAB_STATD_PORT", GUEST_STATD.to_string())
        .env("LAB_STEP_TIMEOUT", "240")
        .binary("rpc.statd", "/usr/sbin/rpc.statd")
        .binary("sm-notify", "/usr/sbin/sm-notify")
        .binary("nlm-locktest", &locktest);
    let mut guest = lab
        .guest(script)
        .run_name(run_name)
        .forward(CLIENT_PORTMAP, 111)
        .forward(GUEST_LOCKD, GUEST_LOCKD)
        .forward(GUEST_STATD, GUEST_STATD)
        .capture_host_side()
        .shared_boot("kclient-nlm")
        .timeout(Duration::from_secs(900))
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut checks: Vec<(&str, Result<String, String>)> = Vec::new();
    if guest.wait_ready(Duration::from_secs(600)).is_ok() {
        // 2. Two clients.
        let r = rt.block_on(async {
            let fh = handle(&export, "shared").await?;
            let seen = holder_is_guest_0_100(&test(&fh, 50, 1).await?)?;
            let denied = nm_lock(&fh, 0, 10).await?;
            let granted = nm_lock(&fh, 200, 100).await?;
            if denied != Stat::Denied || granted != Stat::Granted {
                return Err(format!(
                    "NM_LOCK 0+10: {denied:?} (want Denied), 200+100: {granted:?} (want Granted)"
                ));
            }
            Ok::<_, String>((fh, seen))
        });
        let fh = match r {
            Ok((fh, seen)) => {
                checks.push(("host_sees_guest_lock_and_is_denied", Ok(seen)));
                Some(fh)
            }
            Err(e) => {
                checks.push(("host_sees_guest_lock_and_is_denied", Err(e)));
                None
            }
        };
        let _ = guest.signal("host-locked");
        if guest
            .wait_for_file("guest-waiting", Duration::from_secs(300))
            .is_ok()
        {
            if let Some(fh) = &fh {
                let r = rt.block_on(unlock(fh, 200, 100));
                checks.push(("host_unlocks", r.map(|s| format!("{s:?}"))));
            }
            let _ = guest.signal("host-unlocked");
        }
        // 3. Server restart with the guest's lock held.
        if guest
            .wait_for_file("guest-holds-tcp", Duration::from_secs(300))
            .is_ok()
        {
            nfsd.kill();
            std::thread::sleep(Duration::from_secs(1));
            nfsd.start();
            let r = rt.block_on(async {
                let fh = handle(&export, "restart").await?;
                let started = Instant::now();
                let mut in_grace = 0;
                loop {
                    let r = test(&fh, 0, 1).await?;
                    match r.stat {
                        Stat::DeniedGracePeriod => in_grace += 1,
                        _ => {
                            let seen = holder_is_guest_0_100(&r)?;
                            return Ok(format!(
                                "{in_grace} TEST(s) answered NLM4_DENIED_GRACE_PERIOD; after \
                                 {:.1} s {seen}",
                                started.elapsed().as_secs_f64()
                            ));
                        }
                    }
                    if started.elapsed() > Duration::from_secs(GRACE_SECS + 40) {
                        return Err("still in the grace period".into());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            checks.push(("restart_lock_reclaimed_in_grace", r));
            let _ = guest.signal("server-checked");
        }
        // 4. The client reboots.
        if guest
            .wait_for_file("client-rebooted", Duration::from_secs(300))
            .is_ok()
        {
            let r = rt.block_on(async {
                let fh = handle(&export, "restart").await?;
                let started = Instant::now();
                loop {
                    let r = test(&fh, 0, 1).await?;
                    if r.stat == Stat::Granted {
                        return Ok(format!(
                            "TEST granted {:.1} s after the guest's SM_NOTIFY",
                            started.elapsed().as_secs_f64()
                        ));
                    }
                    if started.elapsed() > Duration::from_secs(30) {
                        return Err(format!("guest's locks still there: {r:?}"));
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
            checks.push(("client_reboot_drops_its_locks", r));
            let _ = guest.signal("host-reboot-checked");
        }
    }
    let mut o = guest.finish().unwrap_or_else(|e| panic!("{e}"));
    nfsd.kill();
    let _ = std::fs::copy(&log, o.out_dir.join("host-nfsd.log"));
    for (name, r) in checks {
        if let Some(s) = o.host_step(name, |_| r) {
            eprintln!("{name}: {s}");
        }
    }
    for proto in ["tcp", "rdma"] {
        eprintln!(
            "suite {proto}: {} tests passed",
            o.value(&format!("suite_passes_{proto}")).unwrap_or("?")
        );
        o.host_step(&format!("thirteen_lock_tests_pass_{proto}"), |o| {
            match o.value(&format!("suite_passes_{proto}")) {
                Some("13") => Ok(()),
                other => Err(format!("{other:?} of 13 passed")),
            }
        });
    }
    o.host_step("guest_sees_host_lock", |o| {
        let t = o.value("guest_try_host_range").unwrap_or("");
        let g = o.value("guest_getlk_host_range").unwrap_or("");
        if t == "denied" && g == "locked w 200 100" {
            Ok(())
        } else {
            Err(format!("F_SETLK 250+10: `{t}`, F_GETLK 200+1: `{g}`"))
        }
    });
    if let Some(w) = o.host_step("guest_blocked_lock_granted_by_callback", |o| {
        let w = o.value("guest_wait").unwrap_or("").to_string();
        let secs: f64 = w
            .strip_prefix("granted after ")
            .and_then(|s| s.strip_suffix(" s"))
            .and_then(|s| s.parse().ok())
            .ok_or(format!("guest wait: `{w}`"))?;
        // The client polls a blocked lock every 30 s; sooner is our GRANTED.
        if secs < 25.0 {
            Ok(w)
        } else {
            Err(format!(
                "granted only after {secs} s: by the client's poll, not GRANTED"
            ))
        }
    }) {
        eprintln!("guest F_SETLKW: {w}");
    }
    o.host_step("nfsd_sent_sm_notify_after_restart", |o| {
        let log = std::fs::read_to_string(o.out_dir.join("host-nfsd.log")).unwrap_or_default();
        log.lines()
            .find(|l| l.contains("SM_NOTIFY sent"))
            .map(str::to_string)
            .ok_or("no `SM_NOTIFY sent` in host-nfsd.log".to_string())
    });
    if o.passed() {
        let _ = std::fs::remove_dir_all(&export);
        let _ = std::fs::remove_dir_all(&state);
    }
    o.assert_passed();
}
