//! Loopback benchmark: RDMA Write throughput and Send/Recv message rate of the iWARP
//! provider next to a plain TCP socket moving the same payload bytes, with the ratio.
//!
//! Run: `cargo bench -p iwarp --bench loopback` (add `-- --quick` for a short run).
//!
//! Prints wall-clock throughput (or message rate) and CPU time (user + system, all
//! threads, per GiB or per message) for both, best of N, alternating the two sides.
//! Ratios are plain TCP time / iwarp time, so above 1 means iwarp is faster or
//! cheaper. On a loaded machine the CPU columns are the steadier ones.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use iwarp::{IwarpConfig, IwarpProvider, IwarpQp};
use rdma::{
    Access, ConnectParams, LocalSge, ProtectionDomain, QueuePair, QueuePairExt, RecvWr, RemoteAddr,
    SendOp, SendWr, WcStatus,
};

async fn pair(crc: bool) -> (IwarpQp, IwarpQp, ProtectionDomain, ProtectionDomain) {
    pair_direct(crc, true).await
}

async fn pair_direct(
    crc: bool,
    direct: bool,
) -> (IwarpQp, IwarpQp, ProtectionDomain, ProtectionDomain) {
    let mut cfg = IwarpConfig {
        crc,
        first_send_delay: Duration::ZERO,
        ..IwarpConfig::default()
    };
    if !direct {
        cfg.limits.direct_placement_min = 0;
    }
    let mut l = IwarpProvider::new(cfg.clone())
        .listen("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = l.local_addr().unwrap();
    let pd_b = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let pd_b2 = pd_b.clone();
    let t = tokio::spawn(async move {
        let r = l.accept().await.unwrap();
        r.accept(
            &pd_b2,
            ConnectParams {
                ird: 16,
                ord: 16,
                ..Default::default()
            },
        )
        .await
        .unwrap()
    });
    let pd_a = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let a = IwarpProvider::new(cfg)
        .connect(
            addr,
            &pd_a,
            ConnectParams {
                ird: 16,
                ord: 16,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    (a, t.await.unwrap(), pd_a.into(), pd_b.into())
}

/// RDMA Write `total` bytes in `size` writes, `depth` outstanding; returns seconds.
async fn rdma_write(size: usize, total: usize, depth: usize, crc: bool, direct: bool) -> f64 {
    let (a, b, _pa, pb) = pair_direct(crc, direct).await;
    let target = pb
        .register(
            BytesMut::zeroed(size),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let rx = pb
        .register(BytesMut::zeroed(64), Access::LOCAL_WRITE)
        .unwrap();
    b.post_recv(RecvWr {
        wr_id: 0,
        sgl: vec![LocalSge {
            mr: rx.clone(),
            offset: 0,
            len: 64,
        }],
    })
    .unwrap();
    let data = Bytes::from(vec![0xa5u8; size]);
    let n = total / size;
    let start = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < n {
        while posted < n && posted - done < depth {
            a.post_send(SendWr {
                wr_id: posted as u64,
                op: SendOp::RdmaWrite(RemoteAddr {
                    stag: target.stag(),
                    offset: 0,
                }),
                sgl: vec![a.pd().sge(data.clone()).unwrap()],
            })
            .unwrap();
            posted += 1;
        }
        let c = a.completion().await.unwrap();
        assert_eq!(c.status, WcStatus::Success);
        done += 1;
    }
    // A Send after the Writes arrives after they are placed (in-order stream).
    a.post_send(SendWr {
        wr_id: 9,
        op: SendOp::Send,
        sgl: vec![],
    })
    .unwrap();
    assert_eq!(b.completion().await.unwrap().status, WcStatus::Success);
    start.elapsed().as_secs_f64()
}

/// Plain TCP: the same bytes in `size` writes, read into a `size` buffer. Blocking
/// std sockets on two threads: the strongest simple baseline.
fn tcp_stream(size: usize, total: usize) -> f64 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; size.max(256 * 1024)];
        let mut got = 0;
        while got < total {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got += n;
        }
        s.write_all(&[1]).unwrap();
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let data = vec![0xa5u8; size];
    let start = Instant::now();
    for _ in 0..total / size {
        s.write_all(&data).unwrap();
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).unwrap();
    let t = start.elapsed().as_secs_f64();
    reader.join().unwrap();
    t
}

/// Plain TCP through tokio (the same runtime as the iwarp side): the cost of the
/// async readiness model alone, for reading the iwarp numbers.
async fn tcp_stream_tokio(size: usize, total: usize) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let reader = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; size.max(256 * 1024)];
        let mut got = 0;
        while got < total {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got += n;
        }
        s.write_all(&[1]).await.unwrap();
    });
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let data = vec![0xa5u8; size];
    let start = Instant::now();
    for _ in 0..total / size {
        s.write_all(&data).await.unwrap();
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).await.unwrap();
    let t = start.elapsed().as_secs_f64();
    reader.await.unwrap();
    t
}

/// `count` Sends of `size` bytes, `depth` outstanding; returns seconds.
async fn send_recv(size: usize, count: usize, depth: usize) -> f64 {
    let (a, b, _pa, pb) = pair(false).await;
    let rx = pb
        .register(BytesMut::zeroed(size * depth * 2), Access::LOCAL_WRITE)
        .unwrap();
    let slots = depth * 2;
    for i in 0..slots.min(count) {
        b.post_recv(RecvWr {
            wr_id: i as u64,
            sgl: vec![LocalSge {
                mr: rx.clone(),
                offset: (i % slots) * size,
                len: size,
            }],
        })
        .unwrap();
    }
    let data = Bytes::from(vec![0x5au8; size]);
    // Receive credits, as an RDMA ULP must have: one per posted receive.
    let credits = tokio::sync::Semaphore::new(slots.min(count));
    let start = Instant::now();
    let recv = async {
        let mut posted = slots.min(count);
        for _ in 0..count {
            let c = b.completion().await.unwrap();
            assert_eq!(c.status, WcStatus::Success);
            if posted < count {
                let i = c.wr_id as usize % slots;
                b.post_recv(RecvWr {
                    wr_id: posted as u64,
                    sgl: vec![LocalSge {
                        mr: rx.clone(),
                        offset: i * size,
                        len: size,
                    }],
                })
                .unwrap();
                posted += 1;
                credits.add_permits(1);
            }
        }
    };
    let send = async {
        let (mut posted, mut done) = (0, 0);
        while done < count {
            while posted < count && posted - done < depth {
                credits.acquire().await.unwrap().forget();
                a.post_send(SendWr {
                    wr_id: posted as u64,
                    op: SendOp::Send,
                    sgl: vec![a.pd().sge(data.clone()).unwrap()],
                })
                .unwrap();
                posted += 1;
            }
            a.completion().await.unwrap();
            done += 1;
        }
    };
    tokio::join!(recv, send);
    start.elapsed().as_secs_f64()
}

/// Plain TCP message rate: `count` messages of `size` bytes, one write each (as
/// ONC RPC over TCP writes one record per call), read with a buffered reader.
fn tcp_messages(size: usize, count: usize) -> f64 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut r = std::io::BufReader::with_capacity(256 * 1024, s);
        let mut buf = vec![0u8; size];
        for _ in 0..count {
            r.read_exact(&mut buf).unwrap();
        }
        r.get_mut().write_all(&[1]).unwrap();
    });
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let data = vec![0x5au8; size];
    let start = Instant::now();
    for _ in 0..count {
        s.write_all(&data).unwrap();
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).unwrap();
    let t = start.elapsed().as_secs_f64();
    reader.join().unwrap();
    t
}

/// CPU seconds (user + system, all threads) this process has used so far, from
/// /proc/self/stat (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) are the 12th and 13th after the command name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// (wall seconds, CPU seconds) of one run.
fn measured(f: &mut impl FnMut() -> f64) -> (f64, f64) {
    let c0 = cpu_seconds();
    let wall = f();
    (wall, cpu_seconds() - c0)
}

/// Best of `runs` for both sides (least wall time; least CPU time), alternating them
/// so load changes on a shared machine hit both alike.
fn best_pair(
    runs: usize,
    (iwarp_only, tcp_only): (bool, bool),
    mut a: impl FnMut() -> f64,
    mut b: impl FnMut() -> f64,
) -> ((f64, f64), (f64, f64)) {
    let mut best_a = (f64::INFINITY, f64::INFINITY);
    let mut best_b = (f64::INFINITY, f64::INFINITY);
    for _ in 0..runs {
        if !tcp_only {
            let (w, c) = measured(&mut a);
            best_a = (best_a.0.min(w), best_a.1.min(c));
        }
        if iwarp_only {
            continue;
        }
        let (w, c) = measured(&mut b);
        best_b = (best_b.0.min(w), best_b.1.min(c));
    }
    (best_a, best_b)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--iwarp-only` / `--tcp-only`: run one side (for profiling).
    let only = (
        args.iter().any(|a| a == "--iwarp-only"),
        args.iter().any(|a| a == "--tcp-only"),
    );
    // `--runs N` overrides best-of-N; any other argument not starting with `--`
    // selects the cases whose name contains it (`=name`: exactly that case).
    let runs_arg = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok());
    let filters: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with("--")
                && !(*i > 0 && (args[i - 1] == "--runs" || args[i - 1] == "--runtime"))
        })
        .map(|(_, a)| a)
        .collect();
    let selected = |name: &str| {
        filters.is_empty()
            || filters.iter().any(|f| match f.strip_prefix('=') {
                Some(exact) => name == exact,
                None => name.contains(f.as_str()),
            })
    };
    // `--runtime current` / `--runtime multi1` / `--runtime multi2` (default).
    let flavour = args
        .iter()
        .position(|a| a == "--runtime")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .unwrap_or("multi2");
    let rt = match flavour {
        "current" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        "multi1" => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    };
    let gib = if quick { 256 << 20 } else { 1usize << 30 };
    let runs = runs_arg.unwrap_or(if quick { 1 } else { 5 });
    println!(
        "iwarp loopback benchmark (best of {runs}; {} MiB per throughput run)",
        gib >> 20
    );
    println!(
        "{:<28} {:>11} {:>11} {:>6} | {:>10} {:>10} {:>6}",
        "case", "iwarp wall", "TCP wall", "ratio", "iwarp CPU", "TCP CPU", "ratio"
    );
    let cases = [
        (1usize << 20, false, true),
        (1 << 20, false, false),
        (1 << 20, true, true),
        (64 << 10, false, true),
    ];
    for &(size, crc, direct) in &cases {
        let name = format!(
            "RDMA Write {} KiB{}{}",
            size >> 10,
            if crc { " +CRC" } else { "" },
            if direct { "" } else { " no-direct" }
        );
        if !selected(&name) {
            continue;
        }
        let ((t_rdma, c_rdma), (t_tcp, c_tcp)) = best_pair(
            runs,
            only,
            || rt.block_on(rdma_write(size, gib, 8, crc, direct)),
            || tcp_stream(size, gib),
        );
        let mbs = |t: f64| gib as f64 / t / 1e6;
        let per_gib = |c: f64| c / (gib as f64 / (1u64 << 30) as f64);
        println!(
            "{:<28} {:>6.0} MB/s {:>6.0} MB/s {:>6.3} | {:>6.3} s/G {:>6.3} s/G {:>6.3}",
            name,
            mbs(t_rdma),
            mbs(t_tcp),
            t_tcp / t_rdma,
            per_gib(c_rdma),
            per_gib(c_tcp),
            c_tcp / c_rdma
        );
    }
    // Reference row: the same plain TCP stream through tokio on the runtime the iwarp
    // side uses (in the "iwarp" columns), against the std-thread baseline: what the
    // async readiness model costs by itself.
    let name = "(ref) tokio TCP 1024 KiB";
    if selected(name) {
        let size = 1 << 20;
        let ((t_tok, c_tok), (t_tcp, c_tcp)) = best_pair(
            runs,
            only,
            || rt.block_on(tcp_stream_tokio(size, gib)),
            || tcp_stream(size, gib),
        );
        let mbs = |t: f64| gib as f64 / t / 1e6;
        let per_gib = |c: f64| c / (gib as f64 / (1u64 << 30) as f64);
        println!(
            "{:<28} {:>6.0} MB/s {:>6.0} MB/s {:>6.3} | {:>6.3} s/G {:>6.3} s/G {:>6.3}",
            name,
            mbs(t_tok),
            mbs(t_tcp),
            t_tcp / t_tok,
            per_gib(c_tok),
            per_gib(c_tcp),
            c_tcp / c_tok
        );
    }
    let count = if quick { 50_000 } else { 300_000 };
    for &size in &[64usize, 4096] {
        let name = format!("Send/Recv {size} B msgs");
        if !selected(&name) {
            continue;
        }
        let ((t_rdma, c_rdma), (t_tcp, c_tcp)) = best_pair(
            runs,
            only,
            || rt.block_on(send_recv(size, count, 64)),
            || tcp_messages(size, count),
        );
        let rate = |t: f64| count as f64 / t / 1e3;
        println!(
            "{:<28} {:>7.0} k/s {:>7.0} k/s {:>6.3} | {:>6.2} us {:>7.2} us {:>6.3}",
            name,
            rate(t_rdma),
            rate(t_tcp),
            t_tcp / t_rdma,
            c_rdma / count as f64 * 1e6,
            c_tcp / count as f64 * 1e6,
            c_tcp / c_rdma
        );
    }
}
