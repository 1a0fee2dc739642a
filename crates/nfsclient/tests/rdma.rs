//! NFSv3 over RPC-over-RDMA (userspace iWARP provider on loopback): MOUNT over TCP,
//! then every kind of NFS exchange over RDMA: READ data through Write chunks, WRITE
//! data through Read chunks, large READDIRPLUS replies through the Reply chunk, and
//! error statuses; plus the CLI with `--transport rdma`.

mod common;

use common::{pattern, TempDir, TestServer};
use nfsclient::nfs3::{Ftype3, NfsStat3, Sattr3, StableHow};
use nfsclient::{IoOptions, MountOptions, TransportKind};
use rpcrdma_transport::Counter;
use xdr::Bytes;

fn rdma_options(s: &TestServer) -> MountOptions {
    MountOptions {
        transport: TransportKind::Rdma,
        nfs_port: Some(s.rdma.expect("server has RDMA").port()),
        ..s.options()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_over_rdma_reads_writes_lists_and_fails_like_tcp() {
    let s = TestServer::start_rdma("rdma").await;
    let mut m = s.mount_with(&rdma_options(&s)).await;
    assert_eq!(m.fsinfo().rtmax, 1 << 20);

    // 1 MiB + 1 through pipelined WRITEs (Read chunks) and READs (Write chunks), with
    // full 1 MiB transfers and with small ones.
    let data = pattern((1 << 20) + 1, 3);
    for (rsize, wsize) in [(1 << 20, 1 << 20), (20_000, 12_345)] {
        m.set_io_options(IoOptions {
            rsize,
            wsize,
            depth: 4,
            ..IoOptions::default()
        });
        let fh = m.create_file("big", 0o644, false).await.unwrap();
        let mut w = m.writer(&fh, StableHow::UNSTABLE);
        w.write(0, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(w.finish().await.unwrap(), data.len() as u64);
        assert_eq!(std::fs::read(s.local("big")).unwrap(), data);
        assert_eq!(m.read_all(&fh).await.unwrap(), data, "rsize {rsize}");
    }

    // Small and empty READs, and READ past EOF.
    let (fh, _) = m.lookup_path("big").await.unwrap();
    let r = m.nfs().read(&fh, 5, 3).await.unwrap();
    assert_eq!(&r.data.0[..], &data[5..8]);
    let r = m.nfs().read(&fh, data.len() as u64, 100).await.unwrap();
    assert!(r.eof && r.data.0.is_empty());

    // SYMLINK (DDP-eligible argument) and READLINK.
    let target = "t/".repeat(600); // 1200 bytes: more than fits small inline buffers
    let sl = m
        .nfs()
        .symlink(m.root(), "link", &target, &Sattr3::default())
        .await
        .unwrap();
    let rl = m.nfs().readlink(&sl.obj.unwrap()).await.unwrap();
    assert_eq!(&rl.data.0[..], target.as_bytes());

    // A directory big enough that READDIRPLUS replies need the Reply chunk.
    for i in 0..200 {
        std::fs::write(s.local(&format!("entry-{i:03}")), b"").unwrap();
    }
    let all = m.read_dir(m.root(), true).collect_all().await.unwrap();
    let files = all
        .iter()
        .filter(|e| e.name.starts_with(b"entry-"))
        .filter(|e| e.attributes.as_ref().map(|a| a.ftype) == Some(Ftype3::NF3REG))
        .count();
    assert_eq!(files, 200);

    // The data really moved by RDMA: READ results by RDMA Write into our Write
    // chunks, WRITE arguments by RDMA Read from our Read chunks, and the large
    // READDIRPLUS replies through Reply chunks.
    let stats = s.rdma_stats.as_ref().unwrap();
    // (Each file is written twice and read twice; a WRITE or READ small enough to
    // fit the 4 KiB inline threshold, like the last 1-byte piece, goes inline.)
    let twice = 2 * (data.len() as u64 - 4096);
    assert!(stats.total(Counter::RdmaWriteBytes) >= twice);
    assert!(stats.total(Counter::RdmaReadBytes) >= twice);
    assert!(stats.total(Counter::ReplyChunks) > 0);
    // The client side agrees: it received that data in its chunks.
    let ours = m.rdma_stats().expect("an RDMA mount has counters");
    assert!(ours.total(Counter::ChunkBytesReceived) >= twice);
    assert!(ours.total(Counter::WriteChunks) > 0);

    // Errors come back the same way.
    let e = m.nfs().lookup(m.root(), "missing").await.unwrap_err();
    assert!(e.is(NfsStat3::NFS3ERR_NOENT), "{e:?}");
    let e = m.nfs().read(m.root(), 0, 10).await.unwrap_err();
    assert!(e.is(NfsStat3::NFS3ERR_ISDIR), "{e:?}");
    m.remove_path("big", false).await.unwrap();
    let e = m.nfs().getattr(&fh).await.unwrap_err();
    assert!(e.is(NfsStat3::NFS3ERR_STALE), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_put_and_get_over_rdma() {
    let s = TestServer::start_rdma("rdma-cli").await;
    let local = TempDir::new("rdma-cli-local");
    let src = local.path().join("f.bin");
    let data = pattern((1 << 20) + 1, 9);
    std::fs::write(&src, &data).unwrap();
    let back = local.path().join("back.bin");
    let export = s.dir.export();
    let run = |args: Vec<String>| {
        let rdma_port = s.rdma.unwrap().port().to_string();
        let mount_port = s.mount.port().to_string();
        async move {
            let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_nfs"))
                .args(["--transport", "rdma", "--nfs-port", &rdma_port])
                .args(["--mount-port", &mount_port, "--quiet", "--verbose"])
                .args(args)
                .output()
                .await
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert!(o.status.success(), "{err}");
            // -v reports the rate and the RDMA counters.
            assert!(err.contains(" bytes in "), "{err}");
            assert!(err.contains("nfs: rdma calls="), "{err}");
        }
    };
    run(vec![
        "put".into(),
        src.to_str().unwrap().into(),
        format!("127.0.0.1:{export}"),
    ])
    .await;
    run(vec![
        "get".into(),
        format!("127.0.0.1:{export}/f.bin"),
        back.to_str().unwrap().into(),
    ])
    .await;
    assert_eq!(std::fs::read(s.local("f.bin")).unwrap(), data);
    assert_eq!(std::fs::read(&back).unwrap(), data);
}
