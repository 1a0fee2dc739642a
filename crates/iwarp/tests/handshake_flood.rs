//! Hostile peers at the MPA handshake (issue 16): peers that connect and stall
//! before their MPA Request is complete, kept open and renewed as an attacker would,
//! must not keep an honest peer out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp::{HandshakeLimits, IwarpConfig, IwarpListener, IwarpProvider};
use rdma::{ConnectParams, ProtectionDomain};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

fn params() -> ConnectParams {
    ConnectParams {
        ird: 8,
        ord: 8,
        ..Default::default()
    }
}

fn pd() -> ProtectionDomain {
    rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE).into()
}

/// Raises this process's open file limit to its hard limit (each stalled peer costs
/// two descriptors here: its socket and the listener's); returns the limit.
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

/// Serves MPA requests on `l` forever: each one is accepted.
fn serve(mut l: IwarpListener) {
    tokio::spawn(async move {
        loop {
            let Ok(req) = l.accept().await else { return };
            tokio::spawn(async move {
                if let Ok(qp) = req.accept(&pd(), params()).await {
                    // Keep it up a little so the honest client sees a live connection.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    drop(qp);
                }
            });
        }
    });
}

/// Stalled peers: `per_source` connections from each of `sources`, each sending
/// nothing or the first bytes of an MPA Request, then waiting for the server to
/// close it and reconnecting (an attacker renewing its handshakes).
struct Attack {
    open: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Attack {
    fn start(addr: SocketAddr, sources: &[IpAddr], per_source: usize, renew: bool) -> Attack {
        let open = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (i, src) in sources.iter().enumerate() {
            for j in 0..per_source {
                let (open, closed, src) = (open.clone(), closed.clone(), *src);
                let half = (i + j) % 2 == 1;
                tasks.push(tokio::spawn(async move {
                    loop {
                        let Ok(mut s) = stalled(addr, src, half).await else {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        };
                        open.fetch_add(1, Ordering::SeqCst);
                        // The server sends nothing to a peer whose request is not
                        // complete: this returns when it closes the connection.
                        let mut b = [0u8; 64];
                        let _ = s.read(&mut b).await;
                        open.fetch_sub(1, Ordering::SeqCst);
                        closed.fetch_add(1, Ordering::SeqCst);
                        if !renew {
                            return;
                        }
                    }
                }));
            }
        }
        Attack {
            open,
            closed,
            tasks,
        }
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits (up to `limit`) until `f(self)` holds.
    async fn until(&self, limit: Duration, f: impl Fn(&Attack) -> bool) -> bool {
        let start = Instant::now();
        while !f(self) {
            if start.elapsed() > limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn stalled(
    addr: SocketAddr,
    src: IpAddr,
    half: bool,
) -> std::io::Result<tokio::net::TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(src, 0))?;
    let mut s = s.connect(addr).await?;
    if half {
        // The key and flags of an MPA Request; the rest never comes.
        s.write_all(b"MPA ID Req Frame\x00\x00").await?;
    }
    Ok(s)
}

/// Loopback addresses 127.0.0.2 and up (127.0.0.1 is the honest client's).
fn sources(n: u8) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + i)))
        .collect()
}

/// Time for an honest peer's connect (TCP + MPA Request + Reply), up to `limit`.
async fn honest(cfg: &IwarpConfig, addr: SocketAddr, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let (provider, pd) = (IwarpProvider::new(cfg.clone()), pd());
    let connect = provider.connect(addr, &pd, params());
    match tokio::time::timeout(limit, connect).await {
        Ok(Ok(_qp)) => Some(start.elapsed()),
        Ok(Err(e)) => {
            eprintln!("honest peer: {e}");
            None
        }
        Err(_) => None,
    }
}

async fn listen(handshake: HandshakeLimits) -> (IwarpConfig, SocketAddr) {
    let cfg = IwarpConfig {
        first_send_delay: Duration::ZERO,
        handshake,
        ..IwarpConfig::default()
    };
    let l = IwarpProvider::new(cfg.clone())
        .listen("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap();
    let addr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), l.local_addr().unwrap().port());
    serve(l);
    (cfg, addr)
}

/// Issue 16's figure: 1,000 stalled handshakes from 100 addresses (10 each, under the
/// per-source cap, so all of them stay open), renewed by the attacker whenever the
/// server closes one; honest peers connect throughout. The deadline is shortened to
/// 1 s (default 5 s) so that every stalled handshake times out and is renewed
/// during the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_peer_is_served_within_1s_while_1000_stalled_handshakes_are_open() {
    let nofile = raise_nofile();
    // Two descriptors per stalled peer (ours and the listener's) plus headroom.
    let stalled_peers = 1000usize.min((nofile as usize).saturating_sub(400) / 2 / 100 * 100);
    assert!(
        stalled_peers >= 200,
        "open file limit {nofile} too low for this test"
    );
    let (cfg, addr) = listen(HandshakeLimits {
        request_timeout: Duration::from_secs(1),
        ..HandshakeLimits::default()
    })
    .await;
    let attack = Attack::start(addr, &sources(100), stalled_peers / 100, true);
    assert!(
        attack
            .until(Duration::from_secs(20), |a| a.open() >= stalled_peers)
            .await,
        "only {} of {stalled_peers} stalled peers connected",
        attack.open()
    );
    // Honest peers every 200 ms for at least 1.6 s: across the deadline, while the
    // attacker renews every stalled handshake. They go on until every stalled
    // handshake has been closed once, for at most 10 s: the deadline is 1 s, but on a
    // loaded host the attacker's tasks see some closes late (CI once counted 892 of
    // 1,000 at 1.6 s).
    let mut times = Vec::new();
    let mut open_at_connect = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1600)
        || (attack.closed() < stalled_peers && start.elapsed() < Duration::from_secs(10))
    {
        open_at_connect.push(attack.open());
        let t = honest(&cfg, addr, Duration::from_secs(5)).await;
        times.push(t.unwrap_or(Duration::MAX));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let renewed = attack.closed();
    times.sort();
    eprintln!(
        "handshake flood: {stalled_peers} stalled handshakes from 100 addresses \
         (open at each honest connect: min {}, max {}), {renewed} closed by the server and renewed; \
         {} honest connects (TCP + MPA): median {:?}, max {:?}",
        open_at_connect.iter().min().unwrap(),
        open_at_connect.iter().max().unwrap(),
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1],
    );
    assert!(
        renewed >= stalled_peers,
        "the 1 s deadline closed only {renewed} of {stalled_peers} stalled handshakes in {:?}",
        start.elapsed()
    );
    assert!(
        times[times.len() - 1] < Duration::from_secs(1),
        "an honest peer waited {:?} (all: {times:?})",
        times[times.len() - 1]
    );
}

/// One source that opens 100 stalled handshakes keeps only `per_source` of them
/// (its oldest are closed), and an honest peer from the same address still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_keeps_at_most_per_source_handshakes_and_loses_its_oldest() {
    raise_nofile();
    let (cfg, addr) = listen(HandshakeLimits {
        request_timeout: Duration::from_secs(60),
        per_source: 8,
        ..HandshakeLimits::default()
    })
    .await;
    let attack = Attack::start(addr, &[Ipv4Addr::LOCALHOST.into()], 100, false);
    assert!(
        attack
            .until(Duration::from_secs(10), |a| a.closed() >= 92
                && a.open() <= 8)
            .await,
        "one source holds {} handshakes ({} closed), cap 8",
        attack.open(),
        attack.closed()
    );
    // Give the server a moment: nothing more is closed without a new handshake.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!((attack.open(), attack.closed()), (8, 92));
    let t = honest(&cfg, addr, Duration::from_secs(5)).await;
    eprintln!("per-source cap 8: honest peer from the same address served in {t:?}");
    assert!(t.is_some_and(|t| t < Duration::from_secs(1)), "{t:?}");
    // Its handshake took the place of that source's oldest stalled one.
    assert!(
        attack
            .until(Duration::from_secs(5), |a| a.closed() == 93)
            .await
    );
}

/// At the global cap the listener keeps accepting: the most represented source loses
/// its oldest handshake, and an honest peer from elsewhere gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_cap_drops_handshakes_instead_of_stopping_accept() {
    raise_nofile();
    let (cfg, addr) = listen(HandshakeLimits {
        request_timeout: Duration::from_secs(60),
        per_source: 16,
        max_pending: 64,
    })
    .await;
    // 200 stalled handshakes from 20 addresses: all are accepted, 136 are dropped.
    let attack = Attack::start(addr, &sources(20), 10, false);
    assert!(
        attack
            .until(Duration::from_secs(10), |a| a.closed() >= 136
                && a.open() <= 64)
            .await,
        "{} open, {} closed (cap 64 of 200)",
        attack.open(),
        attack.closed()
    );
    let t = honest(&cfg, addr, Duration::from_secs(5)).await;
    eprintln!("global cap 64: honest peer served in {t:?}");
    assert!(t.is_some_and(|t| t < Duration::from_secs(1)), "{t:?}");
}
