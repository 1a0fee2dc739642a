//! Sends N metadata calls of one kind, one at a time, to an NFSv3 server: a driver
//! for counting the server's system calls per call (`strace -f -c -p <nfsd pid>`
//! around one run; a run with N = 0 gives the fixed cost of mounting).
//!
//! ```text
//! metacalls HOST EXPORT NFS_PORT MOUNT_PORT OP N [UID [SUBDIR]]
//! ```
//!
//! OP is one of `create` (files m0 .. m{N-1}, GUARDED, in the export root or in its
//! directory SUBDIR, made if missing: the lab's runs work one level down),
//! `getattr` (the root), `lookup` (m0 .. m{N-1}), `lookup-noent` (names that do not
//! exist, as a kernel client's create sends first), `access` (m0), `open` (GETATTR
//! and ACCESS of m0 .. m{N/2-1}, as the kernel client's open(2) of each), `readdirplus`
//! (the directory's first 4 KiB of names, with attributes and handles, as the
//! kernel client asks: dircount 4096, maxcount 32768), `remove` (m0 .. m{N-1}),
//! `null`. Calls carry AUTH_SYS uid and gid UID (default 1000) with
//! that one supplementary group, as a one-user client sends.
//!
//! With `METACALLS_RDMA=1` the NFS calls go over RPC-over-RDMA by the userspace
//! iWARP provider (NFS_PORT is then the server's RDMA port; MOUNT stays on TCP), for
//! counting the RDMA transport's share on a host without an RDMA device.

use nfsclient::nfs3::dir::CreateHow3;
use nfsclient::nfs3::Sattr3;
use nfsclient::{Mount, MountOptions};
use oncrpc::AuthSysParms;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 7 {
        return Err("usage: metacalls HOST EXPORT NFS_PORT MOUNT_PORT OP N [UID [SUBDIR]]".into());
    }
    let id: u32 = a.get(7).map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let opts = MountOptions {
        nfs_port: Some(a[3].parse()?),
        mount_port: Some(a[4].parse()?),
        cred: AuthSysParms {
            stamp: 1,
            machinename: xdr::Bytes::from_static(b"metacalls"),
            uid: id,
            gid: id,
            gids: oncrpc::Gids::new(&[id]).unwrap(),
        }
        .to_opaque_auth(),
        ..MountOptions::default()
    };
    let opts = if std::env::var_os("METACALLS_RDMA").is_some_and(|v| v == "1") {
        MountOptions {
            transport: nfsclient::TransportKind::Rdma,
            rdma_provider: nfsclient::RdmaProvider::Iwarp,
            ..opts
        }
    } else {
        opts
    };
    let m = Mount::mount(&a[1], &a[2], &opts).await?;
    let nfs = m.nfs();
    let root = match a.get(8) {
        None => m.root().clone(),
        Some(sub) => match nfs.lookup(m.root(), sub).await {
            Ok(r) => r.object,
            Err(_) => {
                let attrs = Sattr3 {
                    mode: Some(0o777),
                    ..Sattr3::default()
                };
                nfs.mkdir(m.root(), sub, &attrs)
                    .await?
                    .obj
                    .ok_or("MKDIR returned no handle")?
            }
        },
    };
    let n: usize = a[6].parse()?;
    let name = |i: usize| format!("m{i}");
    let start = std::time::Instant::now();
    match a[5].as_str() {
        "create" => {
            for i in 0..n {
                let how = CreateHow3::Guarded(Sattr3 {
                    mode: Some(0o644),
                    ..Sattr3::default()
                });
                nfs.create(&root, name(i), how).await?;
            }
        }
        "getattr" => {
            for _ in 0..n {
                nfs.getattr(&root).await?;
            }
        }
        "lookup" => {
            for i in 0..n {
                nfs.lookup(&root, name(i)).await?;
            }
        }
        "lookup-noent" => {
            for i in 0..n {
                assert!(nfs.lookup(&root, format!("none{i}")).await.is_err());
            }
        }
        "access" => {
            let fh = nfs.lookup(&root, name(0)).await?.object;
            for _ in 0..n {
                nfs.access(&fh, 0x3f).await?;
            }
        }
        "open" => {
            // As the kernel client's open phase: the handles first (not timed
            // apart), then GETATTR and ACCESS of each file; N counts both calls.
            let mut handles = Vec::new();
            for i in 0..n / 2 {
                handles.push(nfs.lookup(&root, name(i)).await?.object);
            }
            let start = std::time::Instant::now();
            for fh in &handles {
                nfs.getattr(fh).await?;
                nfs.access(fh, 0x3f).await?;
            }
            eprintln!(
                "open: {:.1} us per call over {} files",
                start.elapsed().as_secs_f64() * 1e6 / (2 * handles.len()).max(1) as f64,
                handles.len()
            );
        }
        "remove" => {
            for i in 0..n {
                nfs.remove(&root, name(i)).await?;
            }
        }
        "readdirplus" => {
            let mut entries = 0;
            for _ in 0..n {
                let r = nfs.readdirplus(&root, 0, [0; 8], 4096, 32768).await?;
                entries += r.reply.entries.len();
            }
            eprintln!("readdirplus: {} entries per call", entries / n.max(1));
        }
        "null" => {
            for _ in 0..n {
                nfs.null().await?;
            }
        }
        op => return Err(format!("unknown OP {op}").into()),
    }
    let took = start.elapsed();
    eprintln!(
        "{} x{n}: {:.1} us per call",
        a[5],
        took.as_secs_f64() * 1e6 / n.max(1) as f64
    );
    m.unmount().await?;
    Ok(())
}
