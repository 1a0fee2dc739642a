//! A real, independent ONC RPC client (Debian's libtirpc `rpcinfo`) against our server.
//!
//! rpcinfo always asks rpcbind first, so each test runs Debian's `rpcbind -f -w` in a
//! private network namespace with only loopback (and a private tmpfs on /run, so its
//! lock, socket and warm-start files do not meet the host's or another test's), runs
//! `rpc-echo-server` there (program 0x20000101 = 536871169, versions 1 and 2), which
//! registers with rpcbind, and then checks:
//! - `rpcinfo -p 127.0.0.1` lists both versions on the server's port;
//! - `rpcinfo -t 127.0.0.1 536871169` probes version 0, reads our PROG_MISMATCH
//!   low/high and pings each version ("ready and waiting");
//! - after SIGTERM, the server unregisters: `rpcinfo -p` no longer lists it.
//!
//! Needs root, iproute2 and rpcbind. Without them the test FAILS with a clear
//! message: it never skips silently.
#![cfg(feature = "tokio")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PROG: u32 = 0x2000_0101;

fn require_environment() {
    let uid = Command::new("id").arg("-u").output().expect("run id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the rpcinfo integration test must run as root (it creates a network namespace)"
    );
    for (tool, package) in [
        ("ip", "iproute2"),
        ("rpcbind", "rpcbind"),
        ("rpcinfo", "rpcbind"),
    ] {
        let found = Command::new("sh")
            .args([
                "-c",
                &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            found,
            "`{tool}` not found: install Debian package `{package}` (apt-get install -y {package})"
        );
    }
}

/// A network namespace with loopback up, and the processes started in it; all are
/// killed (by pid) and the namespace deleted on drop.
struct Netns {
    name: String,
    children: Vec<Child>,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("oncrpc-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        run_ok(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]));
        Netns {
            name,
            children: Vec::new(),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    fn rpcinfo(&self, args: &[&str]) -> Output {
        let out = self
            .command("rpcinfo")
            .args(args)
            .output()
            .expect("run rpcinfo");
        println!(
            "$ rpcinfo {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn start_rpcbind(&mut self) {
        // `ip netns exec` gives the command its own mount namespace; the tmpfs on /run
        // stays private to rpcbind.
        let child = self
            .command("sh")
            .args([
                "-c",
                "mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind && exec rpcbind -f -w",
            ])
            .spawn()
            .expect("start rpcbind");
        self.children.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self
                .command("rpcinfo")
                .args(["-p", "127.0.0.1"])
                .output()
                .expect("run rpcinfo");
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "rpcbind did not come up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Lines of `rpcinfo -p` for our program, as (version, proto, port).
fn listed(out: &str) -> Vec<(u32, String, u16)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 4 && f[0] == PROG.to_string() {
                Some((f[1].parse().ok()?, f[2].to_owned(), f[3].parse().ok()?))
            } else {
                None
            }
        })
        .collect()
}

fn rpcinfo_sees_our_server(tag: &str, rpcbind_version: &str) {
    require_environment();
    let mut ns = Netns::new(tag);
    ns.start_rpcbind();

    let mut server = ns
        .command(env!("CARGO_BIN_EXE_rpc-echo-server"))
        .args(["--rpcbind-version", rpcbind_version])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rpc-echo-server");
    let pid = server.id();
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(server.stdout.take().expect("piped stdout"));
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    ns.children.push(server);
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("rpc-echo-server did not start");
    let port: u16 = first
        .strip_prefix("listening on ")
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));

    // rpcinfo -p lists both versions at our port.
    let out = ns.rpcinfo(&["-p", "127.0.0.1"]);
    assert!(out.status.success());
    assert_eq!(
        listed(&stdout(&out)),
        vec![(1, "tcp".to_owned(), port), (2, "tcp".to_owned(), port)]
    );

    // rpcinfo -t with no version: probes version 0, gets PROG_MISMATCH low=1 high=2,
    // then pings versions 1 and 2 with procedure 0.
    let out = ns.rpcinfo(&["-t", "127.0.0.1", &PROG.to_string()]);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        format!(
            "program {PROG} version 1 ready and waiting\nprogram {PROG} version 2 ready and waiting\n"
        )
    );

    // A version we do not serve.
    let out = ns.rpcinfo(&["-t", "127.0.0.1", &PROG.to_string(), "3"]);
    assert!(!out.status.success());

    // Graceful shutdown unregisters.
    run_ok(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let mut last = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(20)) {
        last = line;
    }
    assert_eq!(last, "stopped", "server did not stop cleanly");
    let out = ns.rpcinfo(&["-p", "127.0.0.1"]);
    assert!(out.status.success());
    assert_eq!(listed(&stdout(&out)), vec![]);
}

#[test]
fn rpcinfo_lists_pings_and_sees_unset_with_rpcbind_v4() {
    rpcinfo_sees_our_server("v4", "4");
}

#[test]
fn rpcinfo_lists_pings_and_sees_unset_with_portmap_v2() {
    rpcinfo_sees_our_server("v2", "2");
}

#[test]
fn rpcinfo_lists_pings_and_sees_unset_with_rpcbind_v3() {
    rpcinfo_sees_our_server("v3", "3");
}
