//! Scenario: the exports rules against the Linux kernel's NFSv3 client, over TCP and
//! RDMA. Our `nfsd` runs inside the guest with `--exports` (as in
//! nfs_rdma_guest_server.rs: both ends in the guest, so the server sees the kernel's
//! real address 10.0.2.15 and real source ports, which slirp would hide), and the
//! guest's kernel client, as root:
//! - mounts an export listed for 10.0.2.15 `rw,no_root_squash` over TCP and over RDMA,
//!   and what root writes is owned by 0:0;
//! - reads from an `ro` export and gets EROFS writing to it;
//! - writes as root into an `all_squash,anonuid=1234,anongid=4321` export (files owned
//!   1234:4321) and into a default (`root_squash`) one (65534:65534);
//! - is refused the mount of an export listed for 192.0.2.0/24 only;
//! - with `noresvport` (TCP source ports above 1023) is refused a `secure` export and
//!   mounts an `insecure` one;
//! - after the file is changed to list another host for the rw export and nfsd gets
//!   SIGHUP, gets EACCES from both mounts (TCP and RDMA) it already holds.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
step export_dirs sh -c 'mkdir -p /srv/x && mount -t tmpfs -o size=32m tmpfs /srv/x &&
  cd /srv/x && mkdir rw ro squash rootsq denied secure insecure && chmod 777 * && echo hello > ro/note'
cat > /tmp/exports <<'EOF'
# exports(5) syntax; the guest's kernel client calls from 10.0.2.15
/srv/x/rw       10.0.2.15(rw,no_root_squash)
/srv/x/ro       10.0.2.15(ro)
/srv/x/squash   10.0.2.0/24(rw,all_squash,anonuid=1234,anongid=4321)
/srv/x/rootsq   10.0.2.15(rw)
/srv/x/denied   192.0.2.0/24(rw,no_root_squash)
/srv/x/secure   -rw 10.0.2.15
/srv/x/insecure 10.0.2.15(rw,insecure)
EOF
lab_run_binary nfsd --bind 10.0.2.15 --nfs-port 2049 --mount-port 20048 --rdma-port 20049 --rpcbind off --exports /tmp/exports
step nfsd_listens lab_wait_listen 20049 60
TCP=vers=3,proto=tcp,port=2049,mountproto=tcp,mountport=20048,nolock
RDMA=vers=3,proto=rdma,port=20049,mountproto=tcp,mountport=20048,nolock
mnt() { mkdir -p "$2" && mount.nfs "10.0.2.15:$1" "$2" -n -o "$3"; }
# The command's output and exit code on one line (external commands only: every
# call is bounded by `timeout`).
try() { out=$("$@" 2>&1); echo "$out rc=$?" | tr '\n' ' '; }
for p in tcp rdma; do
  if [ $p = tcp ]; then O=$TCP; else O=$RDMA; fi
  for e in rw ro squash rootsq; do
    step "${p}_mount_$e" mnt /srv/x/$e /mnt/$p-$e "$O"
  done
  step "${p}_xprt" lab_expect_xprt /mnt/$p-rw $p
  step "${p}_write_rw" sh -c "echo x > /mnt/$p-rw/root"
  record "${p}_owner_rw" "$(stat -c %u:%g /srv/x/rw/root)"
  step "${p}_read_ro" grep -q hello /mnt/$p-ro/note
  record "${p}_write_ro" "$(try touch /mnt/$p-ro/new)"
  step "${p}_write_squash" sh -c "echo x > /mnt/$p-squash/root"
  record "${p}_owner_squash" "$(stat -c %u:%g /srv/x/squash/root)"
  step "${p}_write_rootsq" sh -c "echo x > /mnt/$p-rootsq/root"
  record "${p}_owner_rootsq" "$(stat -c %u:%g /srv/x/rootsq/root)"
  mkdir -p /mnt/$p-denied
  record "${p}_mount_denied" "$(try timeout -s KILL 60 mount.nfs 10.0.2.15:/srv/x/denied /mnt/$p-denied -n -o "$O")"
  for e in ro squash rootsq; do
    step "${p}_umount_$e" umount /mnt/$p-$e
    rm /srv/x/$e/root 2>/dev/null
  done
  rm /srv/x/rw/root
done
mkdir -p /mnt/nrp-secure
record tcp_noresvport_secure "$(try timeout -s KILL 60 mount.nfs 10.0.2.15:/srv/x/secure /mnt/nrp-secure -n -o "$TCP,noresvport")"
step tcp_noresvport_insecure mnt /srv/x/insecure /mnt/nrp-insecure "$TCP,noresvport"
step tcp_noresvport_write sh -c 'echo x > /mnt/nrp-insecure/f'
step umount_insecure umount /mnt/nrp-insecure
# Revoke the rw export from this client; both mounts of it see EACCES.
step revoke sed -i 's|^/srv/x/rw .*|/srv/x/rw 192.0.2.1(rw)|' /tmp/exports
step sighup kill -HUP "$LAB_PID_nfsd"
step reloaded sh -c 'i=0; until grep -q "SIGHUP: exports reloaded" "$LAB_RUN_DIR/nfsd.log"; do
  [ $i -ge 50 ] && exit 1; i=$((i + 1)); sleep 0.2; done'
step drop_caches sh -c 'echo 3 >/proc/sys/vm/drop_caches'
for p in tcp rdma; do
  record "${p}_revoked_stat" "$(try timeout -s KILL 60 stat -c %s /mnt/$p-rw/.)"
  record "${p}_revoked_create" "$(try timeout -s KILL 60 touch /mnt/$p-rw/new)"
  step "${p}_umount_rw" umount -l /mnt/$p-rw
done
exit 0
"#;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_client_meets_the_exports_rules_over_tcp_and_rdma() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let script = GuestScript::inline("nfs-exports", GUEST)
        .binary("nfsd", &nfsd)
        .env("LAB_STEP_TIMEOUT", "120");
    let mut o = lab
        .guest(script)
        .run_name("nfs-exports")
        .shared_boot("kclient")
        .timeout(Duration::from_secs(600))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    let expect = |o: &lab::Outcome, key: &str, want: &[&str]| -> Result<(), String> {
        let got = o.value(key).unwrap_or("missing");
        if want.iter().all(|w| got.contains(w)) {
            Ok(())
        } else {
            Err(format!("{key}: {got:?}, want it to contain {want:?}"))
        }
    };
    for p in ["tcp", "rdma"] {
        o.host_step(&format!("{p}_rw_root_not_squashed"), |o| {
            expect(o, &format!("{p}_owner_rw"), &["0:0"])
        });
        o.host_step(&format!("{p}_ro_refuses_writes"), |o| {
            expect(
                o,
                &format!("{p}_write_ro"),
                &["Read-only file system", "rc=1"],
            )
        });
        o.host_step(&format!("{p}_all_squash_to_anonuid"), |o| {
            expect(o, &format!("{p}_owner_squash"), &["1234:4321"])
        });
        o.host_step(&format!("{p}_root_squash_to_nobody"), |o| {
            expect(o, &format!("{p}_owner_rootsq"), &["65534:65534"])
        });
        o.host_step(&format!("{p}_unlisted_client_refused"), |o| {
            expect(
                o,
                &format!("{p}_mount_denied"),
                &["access denied by server", "rc=32"],
            )
        });
        o.host_step(&format!("{p}_revoked_by_sighup"), |o| {
            expect(
                o,
                &format!("{p}_revoked_stat"),
                &["Permission denied", "rc=1"],
            )?;
            expect(
                o,
                &format!("{p}_revoked_create"),
                &["Permission denied", "rc=1"],
            )
        });
    }
    o.host_step("secure_refuses_noresvport", |o| {
        expect(
            o,
            "tcp_noresvport_secure",
            &["access denied by server", "rc=32"],
        )
    });
    o.host_step("nfsd_logged_the_reload", |o| {
        let log = std::fs::read_to_string(o.share_file("nfsd.log"))
            .map_err(|e| format!("share/nfsd.log: {e}"))?;
        let want = "nfsd: export /srv/x/rw to 192.0.2.1(rw,root_squash,secure";
        if log.contains(want) {
            Ok(())
        } else {
            Err(format!("nfsd.log has no {want:?}:\n{log}"))
        }
    });
    o.assert_passed();
}
