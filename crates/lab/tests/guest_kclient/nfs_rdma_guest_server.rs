//! Scenario 3: our `nfsd` runs inside the guest on its own userspace iWARP
//! (`--rdma-provider iwarp`: auto would take the guest's siw device), and the
//! guest's kernel NFSv3 client mounts it through siw at 10.0.2.15 with
//! `proto=rdma` (MOUNT over TCP): writes 1 MiB + 1 and 8 MiB, drops its caches,
//! reads them back with matching md5 (READ data by our RDMA Writes, WRITE data by
//! our RDMA Reads), makes and reads a symlink, unmounts; mountstats shows rdma.
//!
//! No host port and no slirp are involved: both ends are in the guest (siw on the
//! guest's loopback device `siw_lo`, our iWARP on a TCP socket).

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
step export_dir sh -c 'mkdir -p /srv/export && mount -t tmpfs -o size=64m tmpfs /srv/export && chmod 777 /srv/export'
lab_run_binary nfsd --bind 10.0.2.15 --nfs-port 2049 --mount-port 20048 --rdma-port 20049 --rdma-provider iwarp --rpcbind off /srv/export
step nfsd_listens lab_wait_listen 20049 60
M=/mnt/g
mkdir -p $M
step mount mount.nfs 10.0.2.15:/srv/export $M -n -o vers=3,proto=rdma,port=20049,mountproto=tcp,mountport=20048,nolock
record xprt "$(lab_xprt $M)"
step xprt_is_rdma lab_expect_xprt $M rdma
for n in 1048577 8388608; do
  step "make_$n" sh -c "head -c $n /dev/urandom > /tmp/f$n"
  step "write_$n" cp /tmp/f$n $M/f$n
done
step drop_caches sh -c 'sync; echo 3 >/proc/sys/vm/drop_caches'
for n in 1048577 8388608; do
  step "read_back_$n" lab_same_md5 /tmp/f$n $M/f$n /srv/export/f$n
done
step symlink ln -s f1048577 $M/link
record readlink "$(readlink $M/link)"
record xprt_end "$(lab_xprt $M)"
step umount umount $M
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_rdma_client_to_our_server_in_the_guest() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let script = GuestScript::inline("nfs-rdma-guest-server", GUEST)
        .binary("nfsd", &nfsd)
        .env("LAB_STEP_TIMEOUT", "180");
    let mut o = lab
        .guest(script)
        .run_name("nfs-rdma-guest-server")
        .shared_boot("kclient")
        .timeout(Duration::from_secs(600))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(x) = o.host_step("xprt_is_rdma", |o| match o.value("xprt_end") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", "rdma"]) => Ok(x.to_string()),
        other => Err(format!("mountstats xprt line is {other:?}, not rdma")),
    }) {
        eprintln!("mountstats after the run: {x}");
    }
    o.host_step("readlink", |o| match o.value("readlink") {
        Some("f1048577") => Ok(()),
        other => Err(format!("readlink gave {other:?}")),
    });
    o.host_step("nfsd_said_rdma", |o| {
        let log = std::fs::read_to_string(o.share_file("nfsd.log"))
            .map_err(|e| format!("share/nfsd.log: {e}"))?;
        if log.contains("NFS listening on rdma 10.0.2.15:20049") {
            Ok(())
        } else {
            Err(format!("nfsd.log has no RDMA listener line:\n{log}"))
        }
    });
    o.assert_passed();
}
