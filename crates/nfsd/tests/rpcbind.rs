//! rpcbind, checked with the real `rpcbind` and `rpcinfo` (Debian's rpcbind
//! package), each test in its own network namespace (`unshare -n`, root) so that
//! port 111 is private to it:
//! - by default (`--rpcbind auto`) nfsd registers NFS 3 and MOUNT 3 (tcp) with a
//!   running rpcbind, and unregisters them at shutdown;
//! - `--rpcbind serve` answers `rpcinfo` (PORTMAP v2 DUMP, RPCBIND v4 DUMP and
//!   GETADDR) from our own minimal portmapper;
//! - by default with no rpcbind running, nfsd serves that portmapper itself on 111 and
//!   says so; when it cannot listen there either, it says that clients must name the
//!   ports, and serves anyway.

use std::path::Path;
use std::process::Command;

fn need(tool: &str) {
    let found = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| Path::new(d).join(tool).is_file());
    assert!(
        found,
        "`{tool}` not found: this test needs it (apt-get install -y rpcbind util-linux iproute2)"
    );
}

/// Runs `script` with bash in a fresh network namespace; returns its output.
fn in_netns(script: &str) -> String {
    for t in ["unshare", "ip", "rpcinfo", "rpcbind"] {
        need(t);
    }
    let out = Command::new("unshare")
        .args(["-n", "bash", "-c", script])
        .env("NFSD", env!("CARGO_BIN_EXE_nfsd"))
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("unshare runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "script failed (needs root for unshare -n): {text}"
    );
    text
}

fn export_dir(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nfsd-rpcbind-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn registers_with_the_hosts_rpcbind_and_unregisters_at_shutdown() {
    let ex = export_dir("reg");
    let script = format!(
        r#"set -e
ip link set lo up
rpcbind -f &
RP=$!
trap 'kill $RP 2>/dev/null' EXIT
for i in $(seq 50); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
"$NFSD" --state-dir {ex}.state --bind 127.0.0.1 --nfs-port 2049 --mount-port 20048 {ex} > /tmp/nfsd-reg-$$.out &
NP=$!
for i in $(seq 50); do grep -q 'nfsd: ready' /tmp/nfsd-reg-$$.out && break; sleep 0.1; done
echo "== while serving"
rpcinfo -p 127.0.0.1
rpcinfo -t 127.0.0.1 100003 3
rpcinfo -t 127.0.0.1 100005 3
rpcinfo 127.0.0.1
kill -TERM $NP; wait $NP
echo "== after shutdown"
rpcinfo -p 127.0.0.1
rpcinfo 127.0.0.1
cat /tmp/nfsd-reg-$$.out; rm -f /tmp/nfsd-reg-$$.out
"#,
        ex = ex.display()
    );
    let out = in_netns(&script);
    let _ = std::fs::remove_dir_all(&ex);
    let _ = std::fs::remove_dir_all(ex.with_extension("state"));
    let (serving, after) = out
        .split_once("== after shutdown")
        .expect("both phases ran");
    assert!(serving.contains("100003    3   tcp   2049  nfs"), "{out}");
    // The lock manager: NLM v4 on tcp, NSM on tcp and udp, port 4045.
    assert!(
        serving.contains("100021    4   tcp   4045  nlockmgr"),
        "{out}"
    );
    assert!(
        serving.contains("100024    1   udp   4045  status"),
        "{out}"
    );
    assert!(
        serving.contains("100024    1   tcp   4045  status"),
        "{out}"
    );
    assert!(
        serving.contains("100005    3   tcp  20048  mountd"),
        "{out}"
    );
    assert!(
        serving.contains("program 100003 version 3 ready and waiting"),
        "{out}"
    );
    assert!(
        serving.contains("program 100005 version 3 ready and waiting"),
        "{out}"
    );
    assert!(
        out.contains(
            "nfsd: rpcbind: registering NFS, MOUNT, NLM and NSM (tcp), NSM (udp), NFS (rdma) \
             with the host's rpcbind at 127.0.0.1:111 (it answered)"
        ),
        "{out}"
    );
    // rfc5666bis §11: NFS/RDMA under netid "rdma" at port 20049 (= 78.81).
    assert!(
        serving
            .lines()
            .any(|l| l.contains("100003") && l.contains("rdma") && l.contains("127.0.0.1.78.81")),
        "{out}"
    );
    assert!(
        !after
            .lines()
            .any(|l| l.contains("100003") && l.contains("rdma")),
        "rdma still registered after shutdown: {out}"
    );
    assert!(
        !after.contains(" 100003 "),
        "still registered after shutdown: {out}"
    );
    assert!(
        !after.contains(" 100005 "),
        "still registered after shutdown: {out}"
    );
}

#[test]
fn serves_its_own_portmapper() {
    let out = own_portmapper("serve", "--rpcbind serve");
    assert!(
        out.contains(
            "nfsd: rpcbind: serving our own portmapper (v2, rpcbind v3/v4) on tcp and \
             udp 127.0.0.1:111, listing NFS, MOUNT, NLM and NSM (tcp), NSM (udp), NFS (rdma)\n"
        ),
        "{out}"
    );
}

/// The default with no rpcbind on the host: what a plain `mount -t nfs` needs
/// (the Linux client asks port 111 for MOUNT) without the admin choosing anything.
#[test]
fn by_default_serves_its_own_portmapper_when_no_rpcbind_answers() {
    let out = own_portmapper("auto", "");
    assert!(
        out.contains(
            "nfsd: rpcbind: serving our own portmapper (v2, rpcbind v3/v4) on tcp and \
             udp 127.0.0.1:111, listing NFS, MOUNT, NLM and NSM (tcp), NSM (udp), NFS (rdma) (no rpcbind answered on \
             127.0.0.1:111)"
        ),
        "{out}"
    );
}

/// No rpcbind, and our own portmapper's port is taken (here by our own NFS
/// listener): nfsd still serves, and its startup output names the ports clients
/// must give.
#[test]
fn by_default_serves_without_a_portmapper_when_it_cannot_listen_and_says_so() {
    let ex = export_dir("noport");
    let script = format!(
        r#"set -e
ip link set lo up
"$NFSD" --state-dir {ex}.state --bind 127.0.0.1 --nfs-port 2049 --portmap-port 2049 --no-rdma {ex} > /tmp/nfsd-nopm-$$.out 2>&1 &
NP=$!
for i in $(seq 50); do grep -q 'nfsd: ready' /tmp/nfsd-nopm-$$.out && break; sleep 0.1; done
rpcinfo -t 127.0.0.1 nfs 3 || echo "rpcinfo failed: nothing on 111"
ss -ltn
kill -TERM $NP; wait $NP
cat /tmp/nfsd-nopm-$$.out; rm -f /tmp/nfsd-nopm-$$.out
"#,
        ex = ex.display()
    );
    let out = in_netns(&script);
    let _ = std::fs::remove_dir_all(&ex);
    let _ = std::fs::remove_dir_all(ex.with_extension("state"));
    assert!(
        out.contains(
            "nfsd: rpcbind: none answered on 127.0.0.1:111 and our own portmapper cannot \
             listen on 127.0.0.1:2049 (tcp 127.0.0.1:2049: Address already in use (os error \
             98)): registered nowhere, so clients must name the ports (port=2049,mountport=20048), or start \
             rpcbind before nfsd"
        ),
        "{out}"
    );
    assert!(out.contains("rpcinfo failed: nothing on 111"), "{out}");
    // Served all the same, at the ports it named.
    assert!(out.contains("nfsd: ready"), "{out}");
    for port in [2049, 20048] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("LISTEN") && l.contains(&format!("127.0.0.1:{port} "))),
            "nothing listens on {port}: {out}"
        );
    }
}

/// Runs nfsd with `args` and no rpcbind in a fresh network namespace, and checks
/// what `rpcinfo` finds through our portmapper on 111; returns the whole output.
fn own_portmapper(tag: &str, args: &str) -> String {
    let ex = export_dir(tag);
    let script = format!(
        r#"set -e
ip link set lo up
"$NFSD" --state-dir {ex}.state --bind 127.0.0.1 {args} {ex} > /tmp/nfsd-pmap-$$.out &
NP=$!
for i in $(seq 50); do grep -q 'nfsd: ready' /tmp/nfsd-pmap-$$.out && break; sleep 0.1; done
rpcinfo -p 127.0.0.1
rpcinfo 127.0.0.1
rpcinfo -t 127.0.0.1 nfs 3
rpcinfo -t 127.0.0.1 mountd 3
echo "== udp"
rpcinfo -u 127.0.0.1 portmapper 2
rpcinfo -u 127.0.0.1 mountd 3 || echo "mountd not on udp"
echo "== end udp"
kill -TERM $NP; wait $NP
cat /tmp/nfsd-pmap-$$.out; rm -f /tmp/nfsd-pmap-$$.out
"#,
        ex = ex.display()
    );
    let out = in_netns(&script);
    let _ = std::fs::remove_dir_all(&ex);
    let _ = std::fs::remove_dir_all(ex.with_extension("state"));
    // PORTMAP v2 DUMP.
    assert!(out.contains("100003    3   tcp   2049  nfs"), "{out}");
    assert!(out.contains("100005    3   tcp  20048  mountd"), "{out}");
    // RPCBIND v4 DUMP: universal addresses (2049 = 8.1, 20048 = 78.80).
    assert!(out.contains("127.0.0.1.8.1"), "{out}");
    assert!(out.contains("127.0.0.1.78.80"), "{out}");
    // Our portmapper lists NFS/RDMA too (netid "rdma", 20049 = 78.81).
    assert!(
        out.lines()
            .any(|l| l.contains("100003") && l.contains("rdma") && l.contains("127.0.0.1.78.81")),
        "{out}"
    );
    // GETADDR / GETPORT lookups by rpcinfo -t.
    assert!(
        out.contains("program 100003 version 3 ready and waiting"),
        "{out}"
    );
    assert!(
        out.contains("program 100005 version 3 ready and waiting"),
        "{out}"
    );
    // Over UDP (mount.nfs asks there for MOUNT first): the portmapper answers, and
    // says MOUNT is not on UDP, which sends mount.nfs to TCP at once.
    let udp = out
        .split_once("== udp")
        .and_then(|(_, u)| u.split_once("== end udp"))
        .map(|(u, _)| u)
        .unwrap_or_else(|| panic!("no udp section: {out}"));
    assert!(
        udp.contains("program 100000 version 2 ready and waiting"),
        "{out}"
    );
    assert!(udp.contains("mountd not on udp"), "{out}");
    assert!(
        out.contains("100000    2   udp    111  portmapper"),
        "{out}"
    );
    out
}
