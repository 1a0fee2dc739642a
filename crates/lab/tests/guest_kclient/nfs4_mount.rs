//! Scenario (issue 27): the guest's Linux kernel NFS client mounts our `nfsd` on the
//! host with `vers=4.1` (`--nfs4`), over TCP and over RDMA (siw in the guest, our
//! userspace iWARP provider on the host), and with nothing but NFSv4.1 on the wire
//! (no MOUNT, no portmapper, no NLM):
//! - mountstats shows `vers=4.1` and the transport asked for;
//! - the pseudo file system: the export's path is looked up from the server's root
//!   (`PUTROOTFH`, `LOOKUP` of each component, as the kernel does for `host:/path`);
//! - `ls -la` of the export lists the names the host made, with their sizes and types
//!   (READDIR with attributes; GETATTR of each);
//! - `readlink` of a symlink the host made gives its target (READLINK);
//! - (file data waits for OPEN, READ and WRITE, not served yet: `--nfs4` is opt-in
//!   until they are;)
//! - a file and a directory the host made are renamed and removed (RENAME, REMOVE),
//!   and the host sees it;
//! - the unmount is clean (the client's DESTROY_SESSION and DESTROY_CLIENTID).

use std::time::Duration;

use lab::workspace::{build_binary, pattern};
use lab::{GuestScript, HostProcess, Lab, Outcome};

const NFS_TCP_PORT: u16 = 35049;
const RDMA_PORT: u16 = lab::ports::HOST_SERVER_RDMA;
/// Same as nfs_rdma.rs: our FPDUs fit one IPv4 packet of the capture.
const MAX_ULPDU: u16 = 16_000;
const SIZES: [u64; 3] = [0, 4095, (1 << 20) + 1];

const GUEST: &str = r#". /share/lib.sh
M=/mnt/v4
mkdir -p $M
if [ "$LAB_PROTO" = rdma ]; then
  step rdma_up lab_rdma_up
  OPTS="vers=4.1,proto=rdma,port=$LAB_NFS_PORT"
else
  OPTS="vers=4.1,proto=tcp,port=$LAB_NFS_PORT"
fi
step nfs_modules sh -c 'modprobe sunrpc && modprobe nfs && modprobe nfsv4'
step mount timeout -s KILL 90 mount.nfs "10.0.2.2:$LAB_EXPORT" $M -n -v -o "$OPTS"
record opts "$(lab_mountstats $M opts:)"
record xprt "$(lab_xprt $M)"
step xprt_is_$LAB_PROTO lab_expect_xprt $M $LAB_PROTO
# name size type, one line per entry, sorted: what READDIR and GETATTR gave.
record listing "$(cd $M && for f in $(ls -A | sort); do stat -c '%n %s %F' $f; done | tr '\n' ';')"
record readlink "$(readlink $M/link)"
step rename mv $M/to-rename $M/renamed
# -f: the file is the host's (root_squash: not ours), and rm would ask first.
step remove rm -f $M/renamed
step rmdir rmdir $M/empty-dir
step umount umount $M
exit 0
"#;

/// Mounts the host's nfsd with NFSv4.1 over `proto` ("tcp" or "rdma").
fn kernel_nfsv41_client(proto: &str) {
    let run_name = format!("nfs4-mount-{proto}");
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfsd = build_binary("nfsd", "nfsd");
    let export = crate::common::writable_export(&run_name);
    for (i, n) in SIZES.iter().enumerate() {
        let p = export.join(format!("from-host-{n}"));
        std::fs::write(&p, pattern(*n, i as u64 + 7)).unwrap();
    }
    std::fs::write(export.join("to-rename"), b"rename me\n").unwrap();
    std::fs::create_dir(export.join("empty-dir")).unwrap();
    std::os::unix::fs::symlink("from-host-0", export.join("link")).unwrap();
    let port = if proto == "rdma" {
        RDMA_PORT
    } else {
        NFS_TCP_PORT
    };
    let script = GuestScript::inline(&run_name, GUEST)
        .env("LAB_PROTO", proto)
        .env("LAB_NFS_PORT", port.to_string())
        .env("LAB_EXPORT", export.display().to_string())
        .env("LAB_STEP_TIMEOUT", "120");
    let mut args = vec![
        "--nfs4".to_string(),
        "--bind".to_string(),
        "127.0.0.1".to_string(),
        "--nfs-port".to_string(),
        NFS_TCP_PORT.to_string(),
        // MOUNT on the NFS port: NFSv4 needs none, and no other port is taken.
        "--mount-port".to_string(),
        NFS_TCP_PORT.to_string(),
        "--rpcbind".to_string(),
        "off".to_string(),
        "--no-nlm".to_string(),
    ];
    if proto == "rdma" {
        args.extend([
            "--rdma-provider".to_string(),
            "iwarp".to_string(),
            "--rdma-port".to_string(),
            RDMA_PORT.to_string(),
            "--rdma-max-ulpdu".to_string(),
            MAX_ULPDU.to_string(),
        ]);
    } else {
        // TCP only: the host's RDMA port may be another scenario's.
        args.push("--no-rdma".to_string());
    }
    args.push(export.display().to_string());
    let server = HostProcess::new("nfsd", &nfsd).args(args);
    let mut o: Outcome = lab
        .guest(script)
        .run_name(&run_name)
        .host_process(server.env("RUST_LOG", "info"))
        .shared_boot("kclient")
        .timeout(Duration::from_secs(600))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    o.host_step("mounted_nfsv4_1", |o| match o.value("opts") {
        Some(x) if x.split([',', ' ', '\t']).any(|w| w == "vers=4.1") => Ok(()),
        other => Err(format!("mountstats opts {other:?}, not vers=4.1")),
    });
    o.host_step("listing_is_the_hosts", |o| {
        let got = o.value("listing").unwrap_or("missing");
        let mut want: Vec<String> = SIZES
            .iter()
            .map(|n| {
                format!(
                    "from-host-{n} {n} regular {}file",
                    if *n == 0 { "empty " } else { "" }
                )
            })
            .collect();
        want.push("empty-dir 4096 directory".into());
        want.push("link 11 symbolic link".into());
        want.push("to-rename 10 regular file".into());
        want.sort();
        let got_lines: Vec<&str> = got.split(';').filter(|l| !l.is_empty()).collect();
        // A directory's size is the host file system's; compare the rest exactly.
        let same = got_lines.len() == want.len()
            && got_lines.iter().zip(&want).all(|(g, w)| {
                if w.starts_with("empty-dir ") {
                    g.starts_with("empty-dir ") && g.ends_with(" directory")
                } else {
                    g == w
                }
            });
        if same {
            Ok(())
        } else {
            Err(format!("guest listing {got_lines:?}, want {want:?}"))
        }
    });
    o.host_step("readlink", |o| match o.value("readlink") {
        Some("from-host-0") => Ok(()),
        other => Err(format!("readlink gave {other:?}")),
    });
    o.host_step("renamed_and_removed_on_the_host", |_| {
        let left: Vec<&str> = ["to-rename", "renamed", "empty-dir"]
            .into_iter()
            .filter(|n| export.join(n).exists())
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still on the host: {left:?}"))
        }
    });
    let passed = o.passed();
    if passed {
        let _ = std::fs::remove_dir_all(&export);
    }
    o.assert_passed();
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_client_mounts_our_host_server_over_tcp() {
    kernel_nfsv41_client("tcp");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv4_1_client_mounts_our_host_server_over_rdma() {
    kernel_nfsv41_client("rdma");
}
