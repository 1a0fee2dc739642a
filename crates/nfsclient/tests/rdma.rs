//! NFSv3 over RPC-over-RDMA (userspace iWARP provider on loopback): MOUNT over TCP,
//! then every kind of NFS exchange over RDMA: READ data through Write chunks, WRITE
//! data through Read chunks, large READDIRPLUS replies through the Reply chunk, and
//! error statuses; plus the CLI with `--transport rdma`, and a Version Two client
//! whose large replies come through responder-provided Read chunks.

mod common;

use common::{pattern, TempDir, TestServer};
use nfsclient::nfs3::{Ftype3, NfsStat3, Sattr3, StableHow};
use nfsclient::{IoOptions, MountOptions, TransportKind};
use rpcrdma_transport::{Counter, RdmaConfig};
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
            err
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
    // Version One by default; `--rdma-version 2` settles on Version Two.
    let err = run(vec![
        "get".into(),
        format!("127.0.0.1:{export}/f.bin"),
        back.to_str().unwrap().into(),
    ])
    .await;
    assert!(err.contains("rpcrdma_version=1"), "{err}");
    let err = run(vec![
        "--rdma-version".into(),
        "2".into(),
        "get".into(),
        format!("127.0.0.1:{export}/f.bin"),
        back.to_str().unwrap().into(),
    ])
    .await;
    assert!(err.contains("rpcrdma_version=2"), "{err}");
    assert_eq!(std::fs::read(&back).unwrap(), data);
}

/// A Version Two client with reliable reply (what `nfs --rdma-version 2` runs) against
/// the server's defaults: the connection settles on Version Two, READ data still
/// comes by RDMA Write into the client's Write chunks, and READDIRPLUS replies too
/// large for the inline threshold, for which the client now offers no Reply chunk,
/// are pulled from the server's memory (RDMA_NOMSG + Position Zero Read chunk, then
/// RDMA_DONE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_two_client_pulls_large_replies_from_the_server() {
    let s = TestServer::start_rdma("rdma-v2").await;
    let opts = MountOptions {
        rdma: RdmaConfig {
            version_two: true,
            reliable_reply: true,
            ..RdmaConfig::default()
        },
        ..rdma_options(&s)
    };
    let mut m = s.mount_with(&opts).await;
    for i in 0..300 {
        std::fs::write(s.local(&format!("entry-{i:03}")), b"").unwrap();
    }
    // The option exchange follows the first Version Two Reply; until the server's
    // answer arrives, Calls still carry Reply chunks, so list until one is pulled.
    let ours = m.rdma_stats().expect("an RDMA mount has counters").clone();
    let mut listings = 0;
    while ours.total(Counter::PulledReplies) == 0 && listings < 20 {
        let all = m.read_dir(m.root(), true).collect_all().await.unwrap();
        let files = all.iter().filter(|e| e.name.starts_with(b"entry-"));
        assert_eq!(files.count(), 300);
        listings += 1;
    }
    let data = pattern(300_001, 5);
    std::fs::write(s.local("f"), &data).unwrap();
    let (fh, _) = m.lookup_path("f").await.unwrap();
    m.set_io_options(IoOptions {
        rsize: 65536,
        depth: 4,
        ..IoOptions::default()
    });
    assert_eq!(m.read_all(&fh).await.unwrap(), data);

    let c = ours.latest().unwrap();
    eprintln!("after {listings} listing(s): {c}");
    assert_eq!(c.get(Counter::Version), 2, "{c}");
    assert_eq!(c.get(Counter::ReliableReply), 1, "{c}");
    assert!(c.get(Counter::PulledReplies) > 0, "{c}");
    assert!(
        c.get(Counter::WriteChunks) > 0,
        "READ data in Write chunks: {c}"
    );
    assert_eq!(c.get(Counter::ErrRdmaErrorReceived), 0, "{c}");
    let server = s.rdma_stats.as_ref().unwrap();
    let pulled = c.get(Counter::PulledReplies);
    // The RDMA_DONE of the last pulled reply may still be on its way.
    for _ in 0..1000 {
        if server.total(Counter::RdmaDone) == pulled {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(server.total(Counter::PulledReplies), pulled);
    assert_eq!(server.total(Counter::RdmaDone), pulled);
    assert_eq!(server.total(Counter::PullTimeouts), 0);
}
