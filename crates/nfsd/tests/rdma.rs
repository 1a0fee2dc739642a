//! NFS over RPC-over-RDMA as `nfsd` composes it (`Bound::listen_rdma`): our NFSv3
//! client over the userspace iWARP provider on loopback mounts (MOUNT over TCP, RFC
//! 8267 binds no MOUNT), writes and reads 1 MiB + 1 byte-exact, and the transport
//! counters show READ data went by RDMA Write and WRITE data by RDMA Read; the
//! `nfsd` binary announces its RDMA listener (both versions unless `--rdma-version 1`)
//! and `--no-rdma` turns it off; an NFS NULL over RDMA is answered at once while
//! 1,000 peers stall in the MPA handshake (issue 16).

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::{pattern, TempDir};
use nfsclient::nfs3::StableHow;
use nfsclient::{IoOptions, Mount, TransportKind};
use nfsd::rdma::{Provider, RdmaOptions};
use nfsd::server::{Bound, Config};
use rpcrdma_transport::Counter;
use xdr::Bytes;

fn config(dir: &TempDir) -> Config {
    common::loopback_config(dir.path())
}

/// RDMA at `addr` on the userspace iWARP provider (these tests run it over
/// loopback; `auto` would pick verbs on a host with an RDMA device).
fn iwarp_options(addr: std::net::SocketAddr) -> RdmaOptions {
    RdmaOptions {
        provider: Provider::Iwarp,
        ..RdmaOptions::new(addr)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_serves_nfs_over_rdma_read_by_rdma_write_write_by_rdma_read() {
    let dir = TempDir::new("rdma");
    let mut bound = Bound::new(&config(&dir)).await.unwrap();
    bound
        .listen_rdma(&iwarp_options((Ipv4Addr::LOCALHOST, 0).into()))
        .await
        .unwrap();
    let rdma = bound.rdma_addr().expect("RDMA listener");
    assert!(
        bound.describe().contains(&format!(
            "NFS listening on rdma {rdma} (RPC-over-RDMA Versions One and Two) via userspace iWARP [--rdma-provider iwarp]"
        )),
        "{:?}",
        bound.describe()
    );
    let stats = bound.rdma_stats().unwrap();
    let mount_port = bound.mount_addr().unwrap().port();
    let serving = common::serve(bound);

    let opts = common::mount_options(
        TransportKind::Rdma,
        rdma.port(),
        mount_port,
        Duration::from_secs(20),
    );
    let export = dir.path().to_str().unwrap().to_string();
    let mut m = Mount::mount("127.0.0.1", &export, &opts).await.unwrap();
    m.set_io_options(IoOptions {
        rsize: 1 << 20,
        wsize: 1 << 20,
        depth: 4,
        ..IoOptions::default()
    });
    let data = pattern((1 << 20) + 1, 7);
    let fh = m.create_file("f", 0o644, false).await.unwrap();
    let mut w = m.writer(&fh, StableHow::UNSTABLE);
    w.write(0, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), data.len() as u64);
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), data);
    assert_eq!(m.read_all(&fh).await.unwrap(), data);

    // RFC 8267 §4.1: READ data went into our Write chunks by RDMA Write, WRITE data
    // was pulled from our Read chunks by RDMA Read (all but a last inline piece).
    let most = data.len() as u64 - 4096;
    assert!(
        stats.total(Counter::RdmaWriteBytes) >= most,
        "{:?}",
        stats.latest()
    );
    assert!(
        stats.total(Counter::RdmaReadBytes) >= most,
        "{:?}",
        stats.latest()
    );
    // Each WRITE Call reached the NFS service made contiguous around its data in the
    // buffer the data was read into, the data not copied.
    assert!(
        stats.total(Counter::CallsJoinedInPlace) >= 1,
        "{:?}",
        stats.latest()
    );
    drop(m);

    serving.stop().await;
}

/// Raises this process's open file limit to its hard limit; returns the limit.
fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    let now = match setrlimit(Resource::Nofile, raised) {
        Ok(()) => raised,
        Err(_) => lim,
    };
    // None: unlimited.
    now.current.unwrap_or(u64::MAX)
}

/// Issue 16: 1,000 peers (10 from each of 100 loopback addresses) connect to the
/// NFS/RDMA port and stall in the MPA Request (half send nothing, half its first
/// bytes); an NFS client still gets its NULL answered over RDMA (TCP connect, MPA
/// setup, RPC-over-RDMA NULL) long before any stalled handshake's deadline.
///
/// The bound is half the MPA Request deadline (5 s): a listener that made the honest
/// peer wait behind a stalled handshake would take at least that deadline. It is not
/// 1 s, although the call normally takes 50-60 ms, because this machine is shared: a
/// loaded host once stretched it past 1 s, with nothing wrong in the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_null_over_rdma_is_answered_before_any_stalled_handshake_times_out() {
    let nofile = raise_nofile();
    let stalled = 1000usize.min((nofile as usize).saturating_sub(400) / 2 / 100 * 100);
    assert!(
        stalled >= 200,
        "open file limit {nofile} too low for this test"
    );
    let dir = TempDir::new("rdma-flood");
    let mut bound = Bound::new(&config(&dir)).await.unwrap();
    bound
        .listen_rdma(&iwarp_options((Ipv4Addr::UNSPECIFIED, 0).into()))
        .await
        .unwrap();
    let rdma = SocketAddr::new(
        Ipv4Addr::LOCALHOST.into(),
        bound.rdma_addr().expect("RDMA listener").port(),
    );
    let serving = common::serve(bound);
    let mut peers = tokio::task::JoinSet::new();
    for i in 0..stalled {
        let src = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % 100) as u8));
        peers.spawn(async move {
            let s = tokio::net::TcpSocket::new_v4()?;
            s.bind(SocketAddr::new(src, 0))?;
            let mut s = s.connect(rdma).await?;
            if i % 2 == 1 {
                tokio::io::AsyncWriteExt::write_all(&mut s, b"MPA ID Req Frame").await?;
            }
            Ok::<_, std::io::Error>(s)
        });
    }
    let mut open = Vec::new();
    while let Some(r) = peers.join_next().await {
        open.push(r.unwrap().expect("a stalled peer connects"));
    }
    let start = Instant::now();
    let client = nfsclient::NfsClient::connect(
        TransportKind::Rdma,
        rdma,
        oncrpc::ClientConfig {
            timeout: Duration::from_secs(10),
            ..oncrpc::ClientConfig::default()
        },
    )
    .unwrap();
    client.null().await.expect("NFS NULL over RDMA");
    let t = start.elapsed();
    eprintln!(
        "{} stalled MPA handshakes open: NFS NULL over RDMA (connect included) in {t:?}",
        open.len()
    );
    let deadline = iwarp::HandshakeLimits::default().request_timeout;
    assert!(t < deadline / 2, "NULL took {t:?}");
    drop(client);
    drop(open);
    serving.stop().await;
}

#[test]
fn binary_announces_rdma_and_no_rdma_turns_it_off() {
    let dir = TempDir::new("rdma-bin");
    let state = TempDir::new("rdma-bin-state");
    let run = |extra: &[&str]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nfsd"))
            .arg("--state-dir")
            .arg(state.path())
            .args([
                "--bind",
                "127.0.0.1",
                "--nfs-port",
                "0",
                "--mount-port",
                "0",
                "--nlm-port",
                "0",
            ])
            .args(["--rpcbind", "off"])
            .args(extra)
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if std::io::BufRead::read_line(&mut out, &mut l).unwrap() == 0 {
                break;
            }
            let done = l.trim() == "nfsd: ready";
            lines.push(l.trim().to_string());
            if done {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        lines
    };
    let on = run(&["--rdma-port", "0"]);
    assert!(
        on.iter()
            .any(|l| l.starts_with("nfsd: NFS listening on rdma 127.0.0.1:")),
        "{on:?}"
    );
    // auto on 127.0.0.1: verbs only if loopback is on an RDMA device, which it is not
    // on a host without RDMA (CI) nor on usual RDMA hosts; the line says why not.
    let why_not = no_verbs_reason();
    assert!(
        on.iter()
            .any(|l| l.contains("via userspace iWARP [auto: no verbs: ") && l.contains(&why_not)),
        "{on:?} (expected the reason {why_not:?})"
    );
    let v1 = run(&[
        "--rdma-port",
        "0",
        "--rdma-version",
        "1",
        "--rdma-provider",
        "iwarp",
    ]);
    assert!(
        v1.iter().any(|l| l
            .ends_with("(RPC-over-RDMA Version One) via userspace iWARP [--rdma-provider iwarp]")),
        "{v1:?}"
    );
    let off = run(&["--no-rdma"]);
    assert!(off.iter().any(|l| l == "nfsd: NFS/RDMA: off"), "{off:?}");
}

/// The RDMA listener hands each Call's peer address to the access check: an export
/// listed only for 127.0.0.1 (our client's address) is served over RDMA, and once a
/// reload lists another host only, the same handle gets NFS3ERR_ACCES over RDMA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_calls_are_checked_against_the_callers_address() {
    let dir = TempDir::new("rdma-exports");
    let only = |host: &str| {
        nfsd::exports::parse(
            &format!(
                "{} {host}(rw,no_root_squash,insecure)",
                dir.path().display()
            ),
            &mut nfsd::exports::system_resolve,
        )
        .unwrap()
    };
    let config = Config {
        exports: only("127.0.0.1"),
        ..config(&dir)
    };
    let mut bound = Bound::new(&config).await.unwrap();
    bound
        .listen_rdma(&iwarp_options((Ipv4Addr::LOCALHOST, 0).into()))
        .await
        .unwrap();
    let rdma = bound.rdma_addr().unwrap();
    let mount_port = bound.mount_addr().unwrap().port();
    let server = bound.server().clone();
    let serving = common::serve(bound);
    let opts = common::mount_options(
        TransportKind::Rdma,
        rdma.port(),
        mount_port,
        Duration::from_secs(20),
    );
    let export = dir.path().to_str().unwrap().to_string();
    let m = Mount::mount("127.0.0.1", &export, &opts).await.unwrap();
    let root = m.root().clone();
    m.nfs().getattr(&root).await.unwrap();
    server.reload(&only("192.0.2.1")).unwrap();
    match m.nfs().getattr(&root).await {
        Err(nfsclient::Error::Nfs { status, .. }) => {
            assert_eq!(status, nfs3::NfsStat3::NFS3ERR_ACCES)
        }
        other => panic!("GETATTR over RDMA after the reload: {other:?}"),
    }
    drop(m);
    serving.stop().await;
}

/// Why verbs cannot serve 127.0.0.1 here, as nfsd says it.
fn no_verbs_reason() -> String {
    match verbs::devices() {
        Err(e) => e.to_string(),
        Ok(d) if d.is_empty() => "no RDMA device on this host".into(),
        Ok(_) => "127.0.0.1 is not on an RDMA device".into(),
    }
}

/// `--rdma-provider verbs` where verbs cannot serve the address: nfsd does not start
/// and says why (no rdma-core, no kernel RDMA, no device, or an address on none),
/// rather than falling back as auto does.
#[test]
fn binary_with_verbs_provider_and_no_device_for_the_address_fails_saying_why() {
    let dir = TempDir::new("rdma-verbs");
    let state = TempDir::new("rdma-verbs-state");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsd"))
        .arg("--state-dir")
        .arg(state.path())
        .args([
            "--bind",
            "127.0.0.1",
            "--nfs-port",
            "0",
            "--mount-port",
            "0",
        ])
        .args(["--rpcbind", "off", "--rdma-port", "0", "--nlm-port", "0"])
        .args(["--rdma-provider", "verbs"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let why_not = no_verbs_reason();
    assert!(
        err.contains("nfsd: NFS/RDMA listener on 127.0.0.1:0: ") && err.contains(&why_not),
        "stderr {err:?} (expected the reason {why_not:?})"
    );
}

/// Issue 16, one memory budget (`Config::max_memory`, `--max-memory`) shared by the
/// NFS/RDMA transport, the TCP servers and the NFS program: two RDMA mounts and one
/// over TCP in, the test takes what other work would hold so that 940 KiB are left:
/// a third RDMA connection is rejected at setup (connections keep a Call's 896 KiB
/// free) while the two still answer; a 1 MiB READ over RDMA (whose READ buffers are
/// charged too) is answered NFS3ERR_JUKEBOX, a 256 KiB one is served, and over TCP (no
/// READ buffer: the data goes by `sendfile`, issue 17) the 1 MiB READ is served; once
/// a mount leaves, a new connection gets in and the 1 MiB READ over RDMA is served;
/// once all have left, nothing stays charged but the duplicate request cache's
/// reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_budget_rejects_rdma_connections_and_reads_past_it() {
    use nfsclient::nfs3::NfsStat3;
    use std::sync::Arc;
    // One connection's state (24 KiB) and buffers at nfsd's defaults: 8 Receive
    // buffers of 4 KiB for its initial grant of 8 credits and 2 Send buffers (more as
    // its Sends need them, which `until_charged` counts).
    const CONN: u64 = (24 << 10) + 8 * 4096 + 2 * 4096;
    const KIB: u64 = 1 << 10;
    let dir = TempDir::new("rdma-budget");
    std::fs::write(dir.path().join("f"), pattern(1 << 20, 3)).unwrap();
    // RDMA connections leave one whole Call's room free (`RdmaConfig::max_message`):
    // 896 KiB here (only small Calls go over RDMA); TCP connections a whole record's
    // (4 MiB + 64 KiB), which the budget has while the mounts are made.
    let mut opts = iwarp_options((Ipv4Addr::LOCALHOST, 0).into());
    opts.transport.max_message = 896 * KIB;
    let config = Config {
        max_memory: 16 << 20,
        ..config(&dir)
    };
    let mut bound = Bound::new(&config).await.unwrap();
    bound.listen_rdma(&opts).await.unwrap();
    let rdma = bound.rdma_addr().unwrap();
    let nfs_port = bound.nfs_addr().unwrap().port();
    let mount_port = bound.mount_addr().unwrap().port();
    let stats = bound.rdma_stats().unwrap();
    let server = bound.server().clone();
    let budget = server.memory.clone();
    // The duplicate request cache's bound (an eighth of the budget), reserved at
    // start and held while serving.
    let reserved = bound.reply_cache_reserved();
    assert_eq!(reserved, config.max_memory / 8);
    let serving = common::serve(bound);
    let export = dir.path().to_str().unwrap().to_string();
    let over = |transport, port| {
        common::mount_options(transport, port, mount_port, Duration::from_secs(20))
    };
    let rdma_opts = over(TransportKind::Rdma, rdma.port());
    let a = Mount::mount("127.0.0.1", &export, &rdma_opts)
        .await
        .unwrap();
    let b = Mount::mount("127.0.0.1", &export, &rdma_opts)
        .await
        .unwrap();
    let tcp = Mount::mount("127.0.0.1", &export, &over(TransportKind::Tcp, nfs_port))
        .await
        .unwrap();
    // Two RDMA connections, and over TCP the TCP mount's NFS connection and each
    // mount's MOUNT connection (kept for UMNT).
    let tcp_conn = oncrpc::server::CONNECTION_BYTES;
    until_charged(&stats, reserved + 2 * CONN + 4 * tcp_conn).await;
    assert_eq!(stats.memory().unwrap().connections_refused, 0);
    let filler = budget
        .charge_ahead(config.max_memory - budget.used() - 940 * KIB)
        .unwrap();

    let connect = || {
        rpcrdma_transport::RdmaTransport::new(
            iwarp::IwarpProvider::new(iwarp::IwarpConfig::default()),
            rdma,
            rpcrdma_transport::RdmaConfig::default(),
            Arc::new(nfs3::rdma::Nfs3Binding),
        )
    };
    let refused = connect().connect_once().await.err().expect("rejected");
    assert!(
        matches!(
            refused,
            rpcrdma_transport::TransportError::Connect(rdma::ConnectError::Rejected { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(stats.memory().unwrap().connections_refused, 1);
    a.nfs().null().await.unwrap();
    b.nfs().null().await.unwrap();

    let (fh, _) = a.lookup_path("f").await.unwrap();
    match a.nfs().read(&fh, 0, 1 << 20).await {
        Err(nfsclient::Error::Nfs { status, .. }) => {
            assert_eq!(status, NfsStat3::NFS3ERR_JUKEBOX)
        }
        other => panic!("a 1 MiB READ past the budget: {:?}", other.map(|r| r.count)),
    }
    assert_eq!(server.memory_refusals.total(), 1);
    // On `a`, which stays open and idle: once the reply has gone, its 256 KiB are
    // released without another Write on the connection (issue 16: the iWARP
    // provider used to keep a written batch, and so the reply's buffer, until the
    // next large Write).
    let got = a.nfs().read(&fh, 0, 256 << 10).await.unwrap();
    assert_eq!(got.data.0.len(), 256 << 10);
    let got = tcp.nfs().read(&fh, 0, 1 << 20).await.unwrap();
    assert_eq!(got.data.0.len(), 1 << 20, "over TCP a READ charges nothing");
    assert_eq!(server.memory_refusals.total(), 1);
    assert!(stats.memory().unwrap().peak <= config.max_memory);
    let held = filler.bytes();
    until_charged(&stats, reserved + held + 2 * CONN + 4 * tcp_conn).await;

    drop(b);
    until_charged(&stats, reserved + held + CONN + 3 * tcp_conn).await;
    let c = connect();
    c.connect_once()
        .await
        .expect("accepted once memory was released");
    drop(c);
    until_charged(&stats, reserved + held + CONN + 3 * tcp_conn).await;
    let got = a.nfs().read(&fh, 0, 1 << 20).await.unwrap();
    assert_eq!(got.data.0.len(), 1 << 20);
    a.nfs().null().await.unwrap();

    drop((a, tcp, got, filler));
    until_charged(&stats, reserved).await;
    let m = stats.memory().unwrap();
    assert!(m.peak <= m.limit, "{m}");
    serving.stop().await;
}

/// Waits until the budget holds exactly `bytes`, and the 4 KiB Send buffers open
/// connections added to their first 2 (connections end asynchronously).
async fn until_charged(stats: &rpcrdma_transport::StatsRegistry, bytes: u64) {
    use rpcrdma_transport::Counter;
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let m = stats.memory().unwrap();
        let grown_sends: u64 = stats
            .snapshots()
            .iter()
            .filter(|s| s.open)
            .map(|s| s.get(Counter::SendBuffers).saturating_sub(2) * 4096)
            .sum();
        let bytes = bytes + grown_sends;
        if m.charged == bytes {
            return;
        }
        assert!(Instant::now() < give_up, "charged {m}, expected {bytes}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Issue 31: SIGUSR1 makes the `nfsd` binary print every NFS/RDMA connection's state
/// (its counters and what its task holds and waits for), then the memory budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_prints_each_rdma_connection_state_on_sigusr1() {
    use std::io::BufRead;
    let dir = TempDir::new("rdma-usr1");
    let state = TempDir::new("rdma-usr1-state");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_nfsd"))
        .arg("--state-dir")
        .arg(state.path())
        .args([
            "--bind",
            "127.0.0.1",
            "--nfs-port",
            "0",
            "--mount-port",
            "0",
        ])
        .args(["--nlm-port", "0", "--rpcbind", "off", "--rdma-port", "0"])
        .args(["--rdma-provider", "iwarp", "--rdma-stall-timeout", "45"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    /// Kills nfsd however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(child);
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let next = || lines.recv_timeout(Duration::from_secs(20)).expect("a line");
    let port_of = |l: &str| -> u16 {
        let addr = l.split(' ').find_map(|w| w.parse::<SocketAddr>().ok());
        addr.unwrap().port()
    };
    let (mut rdma, mut mount) = (None, None);
    loop {
        let l = next();
        if l.starts_with("nfsd: NFS listening on rdma ") {
            rdma = Some(port_of(&l));
        } else if l.starts_with("nfsd: MOUNT v3 listening on tcp ") {
            mount = Some(port_of(&l));
        } else if l == "nfsd: ready" {
            break;
        }
    }
    let opts = common::mount_options(
        TransportKind::Rdma,
        rdma.expect("rdma line"),
        mount.expect("mount line"),
        Duration::from_secs(20),
    );
    let export = dir.path().to_str().unwrap().to_string();
    let m = Mount::mount("127.0.0.1", &export, &opts).await.unwrap();
    m.lookup_path("f").await.unwrap();

    let pid = rustix::process::Pid::from_raw(child.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::USR1).unwrap();
    let head = next();
    assert_eq!(head, "nfsd: SIGUSR1: 1 NFS/RDMA connection(s) open");
    let conn = next();
    assert!(
        conn.starts_with("nfsd: xprt: rdma server #") && conn.contains(" calls="),
        "{conn}"
    );
    let live = next();
    assert!(
        live.starts_with(
            "  state: calls=0 credits=8 recvs_posted=8 in_dispatcher=0 reads=0 sends=0"
        ),
        "{live}"
    );
    let memory = next();
    assert!(memory.starts_with("nfsd: memory: charged="), "{memory}");
    let cache = next();
    assert!(
        cache.starts_with("nfsd: duplicate request cache: 0 hits, 0 misses"),
        "{cache}"
    );
    drop(m);
}

/// Issue 26, the largest Call (`nfsd::rdma::LARGEST_CALL`, as knfsd's `sv_max_mesg`):
/// a WRITE whose Read chunk is larger than `wtmax` plus a page is answered
/// GARBAGE_ARGS before any RDMA Read is posted; the connection goes on serving, and
/// a WRITE of `wtmax` is pulled and served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_larger_than_the_largest_call_is_refused_before_any_rdma_read() {
    let dir = TempDir::new("rdma-largest");
    let mut bound = Bound::new(&config(&dir)).await.unwrap();
    bound
        .listen_rdma(&iwarp_options((Ipv4Addr::LOCALHOST, 0).into()))
        .await
        .unwrap();
    let rdma = bound.rdma_addr().expect("RDMA listener");
    let stats = bound.rdma_stats().unwrap();
    let mount_port = bound.mount_addr().unwrap().port();
    let serving = common::serve(bound);
    let opts = common::mount_options(
        TransportKind::Rdma,
        rdma.port(),
        mount_port,
        Duration::from_secs(20),
    );
    let export = dir.path().to_str().unwrap().to_string();
    let m = Mount::mount("127.0.0.1", &export, &opts).await.unwrap();
    let fh = m.create_file("f", 0o644, false).await.unwrap();
    let reads_before = stats.total(Counter::RdmaReads);

    let over = nfsd::rdma::LARGEST_CALL as usize;
    let refused = m
        .nfs()
        .write(&fh, 0, Bytes::from(pattern(over, 3)), StableHow::UNSTABLE)
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(stats.total(Counter::ErrGarbageArgs), 1);
    assert_eq!(
        stats.total(Counter::RdmaReads),
        reads_before,
        "nothing pulled for it"
    );

    let wtmax = pattern(nfsd::nfs::MAX_IO as usize, 4);
    let ok = m
        .nfs()
        .write(&fh, 0, Bytes::from(wtmax.clone()), StableHow::FILE_SYNC)
        .await
        .unwrap();
    assert_eq!(ok.count as usize, wtmax.len());
    assert!(stats.total(Counter::RdmaReads) > reads_before);
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), wtmax);
    drop(m);
    serving.stop().await;
}
