//! Memory of a running `nfsd` under RDMA load (issue 16, docs/hostile-peers.md):
//! resident set size (VmRSS of `/proc/PID/status`) idle, with N idle NFS/RDMA
//! connections (userspace iWARP over loopback, each answering NULL), after they
//! close, during a burst of large WRITEs and READs over RDMA, and after it.
//!
//! ```text
//! cargo build --release -p nfsd --bin nfsd --example rss_probe
//! target/release/examples/rss_probe --nfsd target/release/nfsd --conns 1000 \
//!     --burst-clients 8 --burst-bytes 268435456 [-- extra nfsd options]
//! ```
//!
//! It starts the `nfsd` binary given on an empty export in a scratch directory (userspace
//! iWARP on 127.0.0.1, rpcbind and NLM off, `--metrics` on a loopback port, from which
//! it reads what the idle connections are charged to the memory budget), prints one
//! line per sample and a summary,
//! and kills the server at the end. The client side runs in this process: its own
//! memory is not counted.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nfsclient::nfs3::StableHow;
use nfsclient::transport::{rpc_client_with, RdmaProvider};
use nfsclient::{IoOptions, Mount, MountOptions, NfsClient, RdmaConfig, TransportKind};
use oncrpc::ClientConfig;
use xdr::Bytes;

struct Args {
    nfsd: PathBuf,
    conns: usize,
    rounds: usize,
    burst_clients: usize,
    burst_bytes: u64,
    settle: Duration,
    extra: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: rss_probe --nfsd PATH [--conns N] [--rounds N] [--burst-clients N] [--burst-bytes N] \
         [--settle SECS] [-- nfsd options]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        nfsd: PathBuf::new(),
        conns: 1000,
        rounds: 1,
        burst_clients: 8,
        burst_bytes: 256 << 20,
        settle: Duration::from_secs(3),
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--nfsd" => a.nfsd = PathBuf::from(value()),
            "--conns" => a.conns = value().parse().unwrap_or_else(|_| usage()),
            "--rounds" => a.rounds = value().parse().unwrap_or_else(|_| usage()),
            "--burst-clients" => a.burst_clients = value().parse().unwrap_or_else(|_| usage()),
            "--burst-bytes" => a.burst_bytes = value().parse().unwrap_or_else(|_| usage()),
            "--settle" => {
                a.settle = Duration::from_secs_f64(value().parse().unwrap_or_else(|_| usage()))
            }
            "--" => {
                a.extra = it.collect();
                break;
            }
            _ => usage(),
        }
    }
    if a.nfsd.as_os_str().is_empty() {
        usage()
    }
    a
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        },
    );
}

struct Server {
    child: Child,
    rdma: SocketAddr,
    mount_port: u16,
    /// nfsd's `--metrics` page.
    metrics: SocketAddr,
    export: PathBuf,
    scratch: PathBuf,
}

impl Server {
    /// A sample of nfsd's `--metrics` page with no labels (`name value`), 0 if absent.
    fn metric(&self, name: &str) -> u64 {
        use std::io::{Read, Write};
        let Ok(mut s) = TcpStream::connect(self.metrics) else {
            return 0;
        };
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n");
        let mut page = String::new();
        let _ = s.read_to_string(&mut page);
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn start_server(nfsd: &Path, extra: &[String]) -> Server {
    let scratch = std::env::temp_dir().join(format!("rss-probe-{}", std::process::id()));
    let export = scratch.join("export");
    std::fs::create_dir_all(&export).expect("scratch directory");
    let (nfs_port, mount_port, rdma_port) = (free_port(), free_port(), free_port());
    let metrics: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()).into();
    let child = Command::new(nfsd)
        .args(["--bind", "127.0.0.1", "--rdma-provider", "iwarp"])
        .args(["--rpcbind", "off", "--no-nlm", "--squash", "none"])
        .args(["--nfs-port", &nfs_port.to_string()])
        .args(["--mount-port", &mount_port.to_string()])
        .args(["--rdma-port", &rdma_port.to_string()])
        .args(["--metrics", &metrics.to_string()])
        .arg("--state-dir")
        .arg(scratch.join("state"))
        .args(extra)
        .arg(&export)
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", nfsd.display()));
    let server = Server {
        child,
        rdma: (Ipv4Addr::LOCALHOST, rdma_port).into(),
        mount_port,
        metrics,
        export,
        scratch,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, mount_port)).is_err()
        || TcpStream::connect(server.rdma).is_err()
    {
        assert!(Instant::now() < deadline, "nfsd did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Samples the server's RSS every 50 ms while `running`; returns the peak (KiB).
fn sampler(pid: u32, running: Arc<AtomicBool>, peak: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        while running.load(Ordering::Relaxed) {
            peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

/// Opens `args.conns` idle connections (each answers NULL), samples, closes them,
/// samples; returns the bytes per connection over `idle`.
async fn idle_connections(args: &Args, server: &Server, idle: u64) -> f64 {
    // N idle connections, each answering NULL.
    let client_rdma = RdmaConfig {
        credits: 8,
        ..RdmaConfig::default()
    };
    let pid = server.child.id();
    let charged_idle = server.metric("nfsd_memory_charged_bytes");
    let mut clients = Vec::with_capacity(args.conns);
    let started = Instant::now();
    // A connection the server rejects (its memory budget, `--max-memory`, is
    // spent) fails its NULL at once instead of retrying: it ends the opening.
    let config = ClientConfig {
        fail_if_unreachable: true,
        ..ClientConfig::default()
    };
    for i in 0..args.conns {
        let (c, _) = rpc_client_with(
            TransportKind::Rdma,
            server.rdma,
            config.clone(),
            &client_rdma,
            RdmaProvider::Iwarp,
        )
        .expect("client");
        let nfs = NfsClient::new(c);
        if let Err(e) = nfs.null().await {
            println!("connection {} refused after {i} were accepted: {e}", i + 1);
            break;
        }
        clients.push(nfs);
    }
    let opened = started.elapsed();
    tokio::time::sleep(args.settle).await;
    let with_conns = rss_kib(pid);
    let charged = server
        .metric("nfsd_memory_charged_bytes")
        .saturating_sub(charged_idle);
    println!(
        "charged to the memory budget for {} open connections: {:.1} MiB, {:.0} KiB per connection (of --max-memory {:.0} MiB)",
        server.metric("nfsd_rdma_connections_open"),
        charged as f64 / 1048576.0,
        charged as f64 / 1024.0 / clients.len().max(1) as f64,
        server.metric("nfsd_memory_limit_bytes") as f64 / 1048576.0,
    );
    let mut answered = 0;
    for c in &clients {
        if c.null().await.is_ok() {
            answered += 1;
        }
    }
    let per_conn = (with_conns.saturating_sub(idle) as f64 * 1024.0) / clients.len().max(1) as f64;
    println!(
        "{} idle connections (opened in {:.1} s, {} answered NULL again): {:.1} MiB, {:.0} KiB per connection",
        clients.len(),
        opened.as_secs_f64(),
        answered,
        mib(with_conns),
        per_conn / 1024.0
    );
    drop(clients);
    tokio::time::sleep(args.settle).await;
    let after_conns = rss_kib(pid);
    println!(
        "after the connections closed ({} s): {:.1} MiB",
        args.settle.as_secs_f64(),
        mib(after_conns)
    );
    per_conn
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = parse_args();
    raise_nofile();
    let server = start_server(&args.nfsd, &args.extra);
    let pid = server.child.id();
    tokio::time::sleep(args.settle).await;
    let idle = rss_kib(pid);
    println!("idle: {:.1} MiB", mib(idle));

    // N idle connections, each answering NULL; opened and closed `rounds` times.
    let mut per_conn = 0.0;
    for round in 1..=args.rounds.max(1) {
        println!("round {round}:");
        per_conn = idle_connections(&args, &server, idle).await;
    }

    // A burst: each client writes `burst_bytes` in 1 MiB WRITEs (RDMA Read chunks)
    // and reads them back (RDMA Write chunks), 8 in flight, over its own connection.
    if args.burst_clients > 0 {
        let running = Arc::new(AtomicBool::new(true));
        let peak = Arc::new(AtomicU64::new(0));
        sampler(pid, running.clone(), peak.clone());
        let export = server.export.to_str().expect("UTF-8 path").to_string();
        let opts = MountOptions {
            transport: TransportKind::Rdma,
            nfs_port: Some(server.rdma.port()),
            mount_port: Some(server.mount_port),
            rdma_provider: RdmaProvider::Iwarp,
            timeout: Duration::from_secs(60),
            ..MountOptions::default()
        };
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..args.burst_clients {
            let (export, opts) = (export.clone(), opts.clone());
            let bytes = args.burst_bytes;
            tasks.push(tokio::spawn(async move {
                let mut m = Mount::mount("127.0.0.1", &export, &opts).await?;
                m.set_io_options(IoOptions {
                    rsize: 1 << 20,
                    wsize: 1 << 20,
                    depth: 8,
                    ..IoOptions::default()
                });
                let fh = m.create_file(&format!("f{i}"), 0o644, false).await?;
                let chunk = Bytes::from(vec![i as u8; 1 << 20]);
                let mut w = m.writer(&fh, StableHow::UNSTABLE);
                let mut at = 0;
                while at < bytes {
                    w.write(at, chunk.clone()).await?;
                    at += chunk.len() as u64;
                }
                w.finish().await?;
                let mut r = m.reader(&fh, 0, None);
                let mut read = 0u64;
                while let Some((_, b)) = r.next_chunk().await? {
                    read += b.len() as u64;
                }
                m.unmount().await?;
                Ok::<u64, nfsclient::Error>(read)
            }));
        }
        let mut moved = 0;
        for t in tasks {
            match t.await {
                Ok(Ok(n)) => moved += n,
                Ok(Err(e)) => println!("burst client failed: {e}"),
                Err(e) => println!("burst client panicked: {e}"),
            }
        }
        let took = started.elapsed();
        running.store(false, Ordering::Relaxed);
        let during = peak.load(Ordering::Relaxed);
        println!(
            "burst: {} clients wrote and read {:.0} MiB each ({:.0} MiB read back in {:.1} s): peak {:.1} MiB",
            args.burst_clients,
            args.burst_bytes as f64 / 1048576.0,
            moved as f64 / 1048576.0,
            took.as_secs_f64(),
            mib(during)
        );
        let mut slept = 0;
        for wait in [1u64, 5, 10, 20, 30] {
            tokio::time::sleep(Duration::from_secs(wait - slept)).await;
            slept = wait;
            println!("{wait} s after the burst: {:.1} MiB", mib(rss_kib(pid)));
        }
        let _ = std::fs::remove_dir_all(&server.export);
    }
    let end = rss_kib(pid);
    println!(
        "summary: idle {:.1} MiB; {:.0} KiB per idle connection; after the burst {:.1} MiB",
        mib(idle),
        per_conn / 1024.0,
        mib(end)
    );
}
