//! Scenario (issue 27, `--idmap-domain`): owners cross NFSv4.1 as names. Our nfsd on
//! the host runs with `--idmap-domain lab.test`; the guest's kernel client mounts it
//! with `vers=4.1` over TCP, with ID mapping on (`nfs4_disable_idmapping=N`) and the
//! Linux idmapper wired up as a distribution does it: the kernel's `id_resolver` key
//! upcall runs `/sbin/request-key`, which runs `nfsidmap` (nfs-common, with its
//! nsswitch plugin) in the domain of `/etc/idmapd.conf`. The guest's own user
//! database gives `daemon` other numbers than the host's (4242:4343, the host's are
//! 1:1), so only a name can carry the owner across:
//! - a file the host gave to daemon:daemon shows as 4242:4343 in the guest (the
//!   server sent `daemon@lab.test`, the idmapper found the guest's daemon);
//! - a file the guest gives to daemon:daemon (`chown`, SETATTR with the names the
//!   client's idmapper made) is daemon's on the host, 1:1 (the server looked the
//!   names up in the host's database).
//!
//! The guest's changes (idmapper, users, `nfs4_disable_idmapping`) are undone when
//! its script exits, for the scenarios that share the boot.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, HostProcess, Lab, Outcome};

const NFS_TCP_PORT: u16 = 35149;
const DOMAIN: &str = "lab.test";

const GUEST: &str = r#". /share/lib.sh
# Everything below is undone at exit: the other scenarios of the shared boot expect
# the kernel client's default (no ID mapping) and the initramfs's user database.
cp /etc/passwd /tmp/passwd.orig
cp /etc/group /tmp/group.orig
lab_on_exit 'umount /mnt/idmap 2>/dev/null; cp /tmp/passwd.orig /etc/passwd; cp /tmp/group.orig /etc/group; rm -f /sbin/request-key /sbin/nfsidmap /etc/request-key.d/id_resolver.conf /etc/idmapd.conf; echo Y > /sys/module/nfs/parameters/nfs4_disable_idmapping 2>/dev/null; true'
# The idmapper as nfs-common installs it, from the share: request-key (keyutils) and
# nfsidmap with their libraries, nfsidmap's nsswitch plugin where it looks for it.
cat > /sbin/request-key <<'EOF'
#!/bin/sh
LD_LIBRARY_PATH=/share/lib exec /share/bin/request-key "$@"
EOF
cat > /sbin/nfsidmap <<'EOF'
#!/bin/sh
LD_LIBRARY_PATH=/share/lib exec /share/bin/nfsidmap "$@"
EOF
chmod +x /sbin/request-key /sbin/nfsidmap
mkdir -p /etc/request-key.d /usr/lib/x86_64-linux-gnu/libnfsidmap
echo 'create id_resolver * * /sbin/nfsidmap -t 600 %k %d' > /etc/request-key.d/id_resolver.conf
cp /share/nsswitch.so /usr/lib/x86_64-linux-gnu/libnfsidmap/nsswitch.so
printf '[General]\nDomain = %s\n[Translation]\nMethod = nsswitch\n' "$LAB_DOMAIN" > /etc/idmapd.conf
echo 'daemon:x:4242:4343:daemon:/:/bin/false' >> /etc/passwd
echo 'daemon:x:4343:' >> /etc/group
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv4'
step idmapping_on sh -c 'echo N > /sys/module/nfs/parameters/nfs4_disable_idmapping'
M=/mnt/idmap
mkdir -p $M
step mount timeout -s KILL 90 mount.nfs "10.0.2.2:$LAB_EXPORT" $M -n -o "vers=4.1,proto=tcp,port=$LAB_NFS_PORT"
record host_owned "$(stat -c %u:%g $M/owned-by-daemon)"
step create sh -c "echo mine > $M/given-to-daemon"
step chown chown daemon:daemon $M/given-to-daemon
record guest_given "$(stat -c %u:%g $M/given-to-daemon)"
step umount umount $M
exit 0
"#;

/// Owners as `name@lab.test` both ways between our nfsd and the kernel's idmapper.
#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv41_client_maps_owners_by_name() {
    let run_name = "nfs4-idmap";
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let export = crate::common::writable_export(run_name);
    let owned = export.join("owned-by-daemon");
    std::fs::write(&owned, b"the host's daemon owns this\n").unwrap();
    // The host's daemon: uid and gid 1 on Debian (base-passwd).
    std::os::unix::fs::chown(&owned, Some(1), Some(1)).unwrap();
    let plugin = std::fs::read("/usr/lib/x86_64-linux-gnu/libnfsidmap/nsswitch.so")
        .expect("nfsidmap's nsswitch plugin (nfs-common, installed by lab/setup)");
    let script = GuestScript::inline(run_name, GUEST)
        .env("LAB_NFS_PORT", NFS_TCP_PORT.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_DOMAIN", DOMAIN)
        .binary_with_libraries("request-key", "/sbin/request-key")
        .binary_with_libraries("nfsidmap", "/usr/sbin/nfsidmap")
        .file("nsswitch.so", plugin);
    let server = HostProcess::new("nfsd", &nfsd).args([
        "--bind",
        "127.0.0.1",
        "--nfs-port",
        &NFS_TCP_PORT.to_string(),
        "--mount-port",
        &NFS_TCP_PORT.to_string(),
        "--rpcbind",
        "off",
        "--no-nlm",
        "--no-rdma",
        // Root from the guest stays root: its chown must be allowed.
        "--squash",
        "none",
        "--idmap-domain",
        DOMAIN,
        &export.display().to_string(),
    ]);
    let mut o: Outcome = lab
        .guest(script)
        .run_name(run_name)
        .host_process(server.env("RUST_LOG", "info"))
        .shared_boot("kclient")
        .timeout(Duration::from_secs(300))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    o.host_step("host_daemon_is_guest_daemon", |o| {
        match o.value("host_owned") {
            Some("4242:4343") => Ok(()),
            other => Err(format!(
            "the guest sees the host's daemon:daemon file as {other:?}, not 4242:4343 (its daemon)"
        )),
        }
    });
    o.host_step("guest_daemon_is_host_daemon", |o| {
        let m = std::fs::metadata(export.join("given-to-daemon")).map_err(|e| e.to_string())?;
        match ((m.uid(), m.gid()), o.value("guest_given")) {
            ((1, 1), Some("4242:4343")) => Ok(()),
            (host, guest) => Err(format!(
                "the file the guest gave to daemon:daemon ({guest:?} there) is {host:?} on the host, not (1, 1)"
            )),
        }
    });
    o.assert_passed();
}
