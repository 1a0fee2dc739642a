//! NFS versions 3 and 4 over RPC-over-RDMA: the listener `nfsd` runs next to TCP.
//!
//! Specs: RFC 8267 (NFS Upper Layer Binding: §4.1 DDP-eligible items, §5 port
//! 20049 and "MOUNT ... not bound"), rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §11
//! (netids "rdma" and "rdma6").
//!
//! ```text
//!   client ──RDMA device (verbs: RoCE, IB, iWARP NIC, rxe, siw)──┐
//!   client ──iWARP (MPA/DDP/RDMAP over TCP, userspace)───────────┴► RdmaServer
//!                                 │ NfsBinding (Nfs3Binding + Nfs4Binding)
//!                                   NFS-only oncrpc::Dispatcher (no MOUNT)
//!                                                             │
//!                                 NfsService ── the same NfsServer as TCP
//!                                 Nfs4Service ── the same Nfs4Server as TCP
//! ```
//!
//! The provider ([`Provider`]): rdma-core verbs when the listening address is on an
//! RDMA device, else our userspace iWARP (`auto`, the default), or either on demand.
//! The same `RdmaServer` code runs over both.
//!
//! # Threads
//! On a verbs device, everything that touches the device (binding, the listener, the
//! connections' tasks: completions, posting, registration, rdma_cm; decoding Calls
//! and encoding Replies) runs on threads of its own ([`DeviceThreads`], a one-worker
//! tokio runtime), and each call's file-system work that switches identity
//! ([`crate::creds`]) runs elsewhere: the small metadata calls
//! ([`crate::service::runs_inline`]) on the delegate thread of the device thread's
//! CPU (one per CPU), the device thread waiting
//! for each ([`crate::delegate`], [`NfsService::delegating`]); the rest on the
//! blocking pool of the runtime that bound the listener ([`NfsService::on`]), the
//! result coming back to the call's task as the spawned task's output. Only the
//! device threads post. Why: Linux refuses a `write` to the device's descriptors
//! (uverbs, rdma_cm) from a thread whose credentials changed after they were opened
//! ("changed security contexts after opening file descriptor"), and a thread that
//! switched once never has the same credentials again (docs/linux-facts.md, "RDMA
//! device descriptors and thread credentials"). The device threads are marked
//! ([`crate::creds::keep_identity`]): a switch there panics instead.
//!
//! A call crosses threads as often as over TCP: device thread to the delegate
//! (inline) or to the blocking pool, and back. Handing the whole dispatch to the main runtime
//! instead (`RdmaServer` spawning it there) added a hop to every READ and measured
//! about 5% slower on siw (lab `nfsbench lab --fabric siw`, 109 against 115 MB/s).
//!
//! The userspace iWARP provider uses TCP sockets, which no such rule covers: it runs
//! on the calling runtime as before, its calls too.
//!
//! The data path copies nothing here: READ3resok `data` is a DDP-eligible item
//! ([`xdr::Encoder::ddp_opaque`]) whose `Bytes` become the gather list of the RDMA
//! Write into the client's Write chunk (`rpcrdma_transport::server`); WRITE3args
//! `data` arrives by RDMA Read into a sink region and is handed to the dispatcher as
//! a slice (see the crate's copy count).
//!
//! # What this module does not do
//! It issues no backward-direction calls: NFSv3 has no callback program.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use iwarp::{HandshakeLimits, IwarpConfig, IwarpListener, IwarpProvider};
use nfs3::{NFS_PROGRAM, NFS_V3};
use oncrpc::rpcbind::Registrar;
use oncrpc::Dispatcher;
use rpcrdma::memory::MemoryBudget;
use rpcrdma_transport::{RdmaConfig, RdmaServer, StatsRegistry};
use verbs::{VerbsCm, VerbsListener};

use crate::{NfsServer, NfsService};

mod binding;

pub use binding::NfsBinding;
pub use nfs3::rdma::{Nfs3Binding, NFS_ACL_PROGRAM};

/// Which RDMA provider carries NFS/RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// Verbs when the listening address is on an RDMA device (a wildcard address:
    /// when the host has any), else the userspace iWARP provider. The startup line
    /// says which and why.
    #[default]
    Auto,
    /// rdma-core verbs only (`crates/verbs`): fail if there is no RDMA device or
    /// the address is not on one.
    Verbs,
    /// The userspace iWARP provider only (MPA over TCP sockets; any host).
    Iwarp,
}

/// How to serve NFS over RDMA.
#[derive(Debug, Clone)]
pub struct RdmaOptions {
    /// Where to listen (port 20049 by default, RFC 8267 §5).
    pub addr: SocketAddr,
    /// The RDMA provider (default: auto).
    pub provider: Provider,
    /// Ask for MPA CRC32c on every connection (RFC 5044 §7.2.3; Linux siw turns it
    /// on both ways when asked, docs/linux-facts.md). Off by default, as siw.
    /// Userspace iWARP only (a verbs device negotiates MPA itself).
    pub crc: bool,
    /// Largest ULPDU we put in one FPDU (RFC 5044 MULPDU); `None` for the provider's
    /// default (65,516: fewest headers per byte). Peers accept any size; an FPDU that
    /// fits one TCP segment keeps packet analysers that assume FPDU alignment
    /// (tshark 4.0's MPA dissector) in step.
    pub max_ulpdu: Option<usize>,
    /// Limits on MPA handshakes in progress (TCP connected, MPA Request not yet
    /// complete): the deadline for the MPA Request, and caps per source address and
    /// in all, which drop the oldest handshake of the source at fault rather than
    /// stop accepting (defaults: 5 s, 16, 4096; [`HandshakeLimits`]). Userspace
    /// iWARP only (on a verbs device the kernel runs the handshake).
    pub handshake: HandshakeLimits,
    /// Transport settings (inline thresholds, credits, message limits, versions).
    pub transport: RdmaConfig,
}

impl RdmaOptions {
    /// Defaults at `addr`: no CRC, 4 KiB inline both ways, 128 credits, both
    /// RPC-over-RDMA versions (see [`RdmaOptions::server_transport`]).
    pub fn new(addr: SocketAddr) -> Self {
        RdmaOptions {
            addr,
            provider: Provider::Auto,
            crc: false,
            max_ulpdu: None,
            handshake: HandshakeLimits::default(),
            transport: RdmaOptions::server_transport(true),
        }
    }

    /// The transport settings of a server that accepts Version One only
    /// (`version_two: false`: a Version Two Call gets ERR_VERS 1-1), or both
    /// versions, answering each Call in its own and offering responder-provided Read
    /// chunks to Version Two clients that ask for them (rpcrdma-v2 §5.3,
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05). Accepting Version Two changes
    /// nothing for a Version One client such as Linux: it never sends one.
    ///
    /// The largest Call is [`LARGEST_CALL`] (a whole WRITE of `wtmax` and its
    /// arguments): one whose Read chunks add up to more is answered GARBAGE_ARGS
    /// before any RDMA Read is posted, so that what a connection can make the server
    /// pull at once is bounded by its credits times that, not by the transport's
    /// 16 MiB default (issue 26).
    pub fn server_transport(version_two: bool) -> RdmaConfig {
        RdmaConfig {
            version_two,
            reliable_reply: version_two,
            max_message: LARGEST_CALL,
            ..RdmaConfig::default()
        }
    }
}

/// The largest NFS Call accepted over RDMA, chunks included: the largest WRITE
/// (FSINFO `wtmax`, [`crate::nfs::MAX_IO`]) and a page for its arguments and RPC
/// header, as knfsd's `sv_max_mesg` (its largest payload plus a page).
pub const LARGEST_CALL: u64 = crate::nfs::MAX_IO as u64 + 4096;

/// A bound NFS/RDMA listener, not yet serving.
pub struct RdmaListener {
    served: Served,
    addr: SocketAddr,
    version_two: bool,
    /// Which provider and why, for the startup line.
    provider: String,
}

/// The listener on the provider chosen: the same `RdmaServer` over either.
enum Served {
    // Boxed: the iWARP listener carries its handshake table inline.
    Iwarp(RdmaServer<IwarpProvider>, Box<IwarpListener>),
    /// Bound on, and served by, the device threads.
    Verbs(RdmaServer<VerbsCm>, VerbsListener, DeviceThreads),
}

/// How many worker threads run a verbs device's connections ([`DeviceThreads`]).
/// One: they post, poll, decode and encode, and hand the calls' work on, which keeps
/// one thread below a core. Two were no faster in the lab (2 vCPUs, 128 MiB reads,
/// median MB/s: siw 111 against 116, rxe 61 against 61) and took more guest CPU
/// per GiB.
pub const DEVICE_THREADS: usize = 1;

/// How long [`DeviceThreads::stop`] waits for the device threads to drop what they
/// run (connections: their QPs, CM ids, registrations).
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The threads that use a verbs device: a tokio runtime of their own, whose threads
/// never switch identity (see the module's "Threads"). Created by a thread that never
/// switched either, since a new thread inherits its creator's credentials: the first
/// ones of the process then, which the device's descriptors are opened with.
///
/// Not only posting needs them: dropping the last reference to a connection's
/// protection domain destroys its CM id (`verbs`: a device context opened through
/// rdma_cm keeps the id), an rdma_cm `write`. So whatever may hold registrations last
/// (the READ buffers' idle allocations) is released here too: by their trimmer, and
/// once more when the threads stop ([`DeviceThreads::start`]'s `on_stop`).
pub struct DeviceThreads {
    /// `None` once shut down.
    runtime: Option<tokio::runtime::Runtime>,
}

impl DeviceThreads {
    /// Starts [`DEVICE_THREADS`] workers named `nfsd-rdma`; each of its threads runs
    /// `on_stop` as it ends, after the runtime dropped its tasks.
    pub fn start(on_stop: impl Fn() + Send + Sync + 'static) -> io::Result<DeviceThreads> {
        debug_assert!(
            !crate::creds::ever_switched(),
            "RDMA device threads created by a thread that switched identity"
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(DEVICE_THREADS)
            .thread_name("nfsd-rdma")
            .on_thread_start(crate::creds::keep_identity)
            .on_thread_stop(on_stop)
            .enable_all()
            .build()?;
        Ok(DeviceThreads {
            runtime: Some(runtime),
        })
    }

    /// Their runtime: what may touch the device is spawned here.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("device threads running until dropped")
            .handle()
    }

    /// Runs `task` on the device threads and waits for it; aborted if this future is
    /// dropped first.
    async fn run<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> io::Result<T> {
        struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
        impl<T> Drop for AbortOnDrop<T> {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut task = AbortOnDrop(self.handle().spawn(task));
        (&mut task.0).await.map_err(io::Error::other)
    }

    /// Stops the threads, waiting (at most [`STOP_WAIT`], on the caller's blocking
    /// pool: a runtime may not be waited for inside another's task) until they have
    /// dropped their tasks, the connections with what they hold, and run `on_stop`.
    async fn stop(mut self) {
        if let Some(rt) = self.runtime.take() {
            let _ = tokio::task::spawn_blocking(move || rt.shutdown_timeout(STOP_WAIT)).await;
        }
    }
}

impl Drop for DeviceThreads {
    /// Stops the runtime without waiting (not [`DeviceThreads::stop`]: a listener
    /// dropped unserved): its threads drop what they still run.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for DeviceThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceThreads").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaListener")
            .field("addr", &self.addr)
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl RdmaListener {
    /// Binds `opts.addr` for the NFS program of `nfs`, version 3, and of `nfs4`,
    /// version 4, if given (an NFS-only dispatcher: RFC 8267 binds no MOUNT), on the
    /// provider `opts.provider` names. `nfs4` is the TCP listener's too: one client
    /// and session state whichever transport a client's connections use.
    pub async fn bind(
        nfs: Arc<NfsServer>,
        nfs4: Option<Arc<crate::v4::Nfs4Server>>,
        opts: &RdmaOptions,
    ) -> io::Result<RdmaListener> {
        // One memory budget for the process: the transport charges the NFS program's.
        let memory = nfs.memory.clone();
        let read_buffers = nfs.read_buffers.clone();
        let server = nfs.clone();
        let nfs_only = |service: NfsService, v4: Option<crate::v4::Nfs4Service>| {
            // The server's reply cache too: a retransmission over RDMA is matched as
            // over TCP (by the connection's peer address); and its call counts.
            let mut d = server.dispatcher();
            d.register(NFS_PROGRAM, [NFS_V3], Arc::new(service))
                .map_err(io::Error::other)?;
            if let Some(v4) = v4 {
                d.register(NFS_PROGRAM, [nfs4::NFS_V4], Arc::new(v4))
                    .map_err(io::Error::other)?;
            }
            Ok::<_, io::Error>(Arc::new(d))
        };
        let on_iwarp = nfs_only(
            NfsService::new(nfs.clone()),
            nfs4.clone().map(crate::v4::Nfs4Service::new),
        )?;
        // On a verbs device the calls run on this runtime, never on the device threads
        // (module docs, "Threads").
        let delegate = crate::delegate::Delegate::start("nfsd-rdma-calls")?;
        let on_verbs = nfs_only(
            NfsService::new(nfs)
                .on(tokio::runtime::Handle::current())
                .delegating(delegate.clone()),
            nfs4.map(|v4| {
                crate::v4::Nfs4Service::new(v4)
                    .on(tokio::runtime::Handle::current())
                    .delegating(delegate)
            }),
        )?;
        let context = |e: io::Error| {
            io::Error::new(e.kind(), format!("NFS/RDMA listener on {}: {e}", opts.addr))
        };
        let (served, provider) = match opts.provider {
            Provider::Iwarp => (
                bind_iwarp(on_iwarp, opts, memory).await.map_err(context)?,
                "userspace iWARP [--rdma-provider iwarp]".to_string(),
            ),
            Provider::Verbs => {
                let (served, device) = bind_verbs(on_verbs, opts, memory, read_buffers)
                    .await
                    .map_err(context)?;
                (served, format!("verbs on {device} [--rdma-provider verbs]"))
            }
            Provider::Auto => {
                match bind_verbs(on_verbs, opts, memory.clone(), read_buffers).await {
                    Ok((served, device)) => (served, format!("verbs on {device} [auto]")),
                    // A port taken is an error whatever the provider.
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(context(e)),
                    Err(why) => (
                        bind_iwarp(on_iwarp, opts, memory).await.map_err(context)?,
                        format!("userspace iWARP [auto: no verbs: {why}]"),
                    ),
                }
            }
        };
        let addr = match &served {
            Served::Iwarp(_, l) => l.local_addr()?,
            Served::Verbs(_, l, _) => rdma::Listener::local_addr(l)?,
        };
        Ok(RdmaListener {
            served,
            addr,
            version_two: opts.transport.version_two,
            provider,
        })
    }

    /// The provider serving NFS/RDMA and why it was chosen, e.g. `verbs on rxe0
    /// [auto]` or `userspace iWARP [auto: no verbs: ...]`.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Whether NFS/RDMA runs on a verbs device (rdma-core), not the userspace iWARP
    /// provider.
    pub fn on_verbs(&self) -> bool {
        matches!(self.served, Served::Verbs(..))
    }

    /// The runtime whose threads alone may touch the RDMA device ([`DeviceThreads`]),
    /// when on a verbs device: whatever may deregister memory (the READ buffers'
    /// trimmer) runs there. `None` on the userspace iWARP provider.
    pub fn device_threads(&self) -> Option<&tokio::runtime::Handle> {
        match &self.served {
            Served::Verbs(_, _, threads) => Some(threads.handle()),
            Served::Iwarp(..) => None,
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The RPC-over-RDMA versions served, for startup lines.
    pub fn versions(&self) -> &'static str {
        if self.version_two {
            "RPC-over-RDMA Versions One and Two"
        } else {
            "RPC-over-RDMA Version One"
        }
    }

    /// Every connection's transport counters (RDMA Reads and Writes, chunks, errors).
    pub fn stats(&self) -> StatsRegistry {
        match &self.served {
            Served::Iwarp(server, _) => server.stats(),
            Served::Verbs(server, ..) => server.stats(),
        }
    }

    /// Registers NFS with `registrar` under netid "rdma" ("rdma6" for IPv6, §11),
    /// serves until `shutdown` completes, then disconnects every connection and
    /// removes the registration. Calls in service when the connections close are
    /// dropped unanswered; the client retransmits them on its next connection.
    ///
    /// If the listener's RDMA device goes away (verbs DEVICE_REMOVAL), its
    /// connections are closed, this says so and waits for `shutdown` without
    /// NFS/RDMA: NFS over TCP, served beside it, goes on.
    ///
    /// On a verbs device this serves on the device threads ([`DeviceThreads`]), which
    /// have stopped when it returns.
    pub async fn serve(
        self,
        registrar: Option<Registrar>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<()> {
        let RdmaListener { served, addr, .. } = self;
        match served {
            Served::Iwarp(server, listener) => {
                serve_on(server, *listener, addr, registrar, shutdown).await
            }
            Served::Verbs(server, listener, threads) => {
                let served = threads
                    .run(serve_on(server, listener, addr, registrar, shutdown))
                    .await;
                threads.stop().await;
                served?
            }
        }
    }
}

/// The binding of what `dispatcher` serves: NFSv4's too if it serves version 4.
fn binding_for(dispatcher: &Dispatcher) -> Arc<NfsBinding> {
    let v4 = dispatcher
        .registrations()
        .contains(&(NFS_PROGRAM, nfs4::NFS_V4));
    Arc::new(NfsBinding::new(v4))
}

/// The userspace iWARP listener at `opts.addr`.
async fn bind_iwarp(
    dispatcher: Arc<Dispatcher>,
    opts: &RdmaOptions,
    memory: Arc<MemoryBudget>,
) -> io::Result<Served> {
    let mut iwarp = IwarpConfig {
        crc: opts.crc,
        handshake: opts.handshake,
        ..IwarpConfig::default()
    };
    if let Some(n) = opts.max_ulpdu {
        iwarp.limits.max_ulpdu = n;
    }
    let server = RdmaServer::new(
        IwarpProvider::new(iwarp),
        dispatcher.clone(),
        binding_for(&dispatcher),
        opts.transport.clone(),
    )
    .with_memory(memory);
    let listener = server.bind(opts.addr).await?;
    Ok(Served::Iwarp(server, Box::new(listener)))
}

/// The verbs listener at `opts.addr`, and the device it is on (`all RDMA devices
/// (rxe0, siw0)` for a wildcard address). Fails, saying why, when rdma-core or the
/// kernel's RDMA support is missing, the host has no RDMA device, or the address is
/// on none.
///
/// Bound on device threads of its own ([`DeviceThreads`]), which serve it too
/// (`dispatcher`'s service must run its calls elsewhere: [`NfsService::on`]). The
/// threads release the idle `read_buffers` (nfsd's READ buffers, which the
/// connections register) as they stop.
async fn bind_verbs(
    dispatcher: Arc<Dispatcher>,
    opts: &RdmaOptions,
    memory: Arc<MemoryBudget>,
    read_buffers: rdma::BufferPool,
) -> io::Result<(Served, String)> {
    let threads = DeviceThreads::start(move || {
        read_buffers.release_idle();
    })?;
    let opts = opts.clone();
    let (server, listener, device) = threads
        .run(async move { bind_verbs_here(dispatcher, &opts, memory).await })
        .await??;
    Ok((Served::Verbs(server, listener, threads), device))
}

/// [`bind_verbs`] on the device threads: the server, its listener and the device's
/// name.
async fn bind_verbs_here(
    dispatcher: Arc<Dispatcher>,
    opts: &RdmaOptions,
    memory: Arc<MemoryBudget>,
) -> io::Result<(RdmaServer<VerbsCm>, VerbsListener, String)> {
    let devices = verbs::devices().map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?;
    let names: Vec<String> = devices
        .iter()
        .map(|d| rdma::Device::name(d).to_string())
        .collect();
    if names.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no RDMA device on this host",
        ));
    }
    drop(devices);
    // Registration pins memory against RLIMIT_MEMLOCK (soft-iWARP counts it even
    // for root).
    match verbs::raise_locked_memory_limit() {
        Ok(limit) => tracing::debug!(?limit, "locked-memory limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the locked-memory limit"),
    }
    let server = RdmaServer::new(
        VerbsCm::new(),
        dispatcher.clone(),
        binding_for(&dispatcher),
        opts.transport.clone(),
    )
    .with_memory(memory);
    let listener = server.bind(opts.addr).await.map_err(|e| {
        if e.raw_os_error() == Some(libc::ENODEV) {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not on an RDMA device (devices here: {})",
                    opts.addr.ip(),
                    names.join(", ")
                ),
            )
        } else {
            e
        }
    })?;
    let device = match listener.device_name() {
        Some(name) => name,
        None => format!("all RDMA devices ({})", names.join(", ")),
    };
    // A port going down, or the device failing, is said on the server's output: the
    // first thing to know when NFS/RDMA clients stop.
    if let Err(e) = verbs::watch_device_events(|event| {
        use std::io::Write as _;
        // Never a panic for a closed standard output (as the binary's status lines).
        let _ = writeln!(std::io::stdout(), "nfsd: {event}");
    }) {
        tracing::warn!(error = %e, "cannot watch the RDMA devices' events");
    }
    Ok((server, listener, device))
}

/// Serves `listener` (registered with `registrar`) until `shutdown`; see
/// [`RdmaListener::serve`].
async fn serve_on<P: rdma::ConnectionManager + 'static>(
    server: RdmaServer<P>,
    listener: P::Listener,
    addr: SocketAddr,
    registrar: Option<Registrar>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    if let Some(r) = &registrar {
        server
            .register(r, addr)
            .await
            .map_err(|e| io::Error::other(format!("rpcbind (rdma): {e}")))?;
    }
    tokio::pin!(shutdown);
    let result = tokio::select! {
        r = server.serve(listener) => match r {
            // The device went away (verbs reports it as NotConnected): the
            // connections on it are closed by their own DEVICE_REMOVAL events.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                tracing::error!(%addr, error = %e, "NFS/RDMA stopped: its RDMA device was removed; NFS over TCP goes on");
                eprintln!("nfsd: NFS/RDMA on {addr} stopped: {e}; NFS over TCP goes on");
                shutdown.await;
                Ok(())
            }
            r => r,
        },
        () = &mut shutdown => Ok(()),
    };
    server.shutdown();
    if let Some(r) = &registrar {
        let netid = if addr.is_ipv4() {
            rpcrdma_transport::NETID_RDMA
        } else {
            rpcrdma_transport::NETID_RDMA6
        };
        r.unset_all(
            &[(NFS_PROGRAM, NFS_V3), (NFS_PROGRAM, nfs4::NFS_V4)],
            netid,
            addr,
        )
        .await
        .map_err(|e| io::Error::other(format!("rpcbind (rdma): {e}")))?;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// A provider whose listener fails the way verbs reports a removed device
    /// (`NotConnected` from accept); connecting goes through userspace iWARP.
    struct RemovedDevice(IwarpProvider);

    struct RemovedListener;

    impl rdma::Listener for RemovedListener {
        type Qp = iwarp::IwarpQp;
        type Request = iwarp::IwarpConnectRequest;

        fn accept(&mut self) -> BoxFuture<'_, io::Result<Self::Request>> {
            Box::pin(async {
                Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the listener's RDMA device was removed",
                ))
            })
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok(([127, 0, 0, 1], 20049).into())
        }
    }

    impl rdma::ConnectionManager for RemovedDevice {
        type Qp = iwarp::IwarpQp;
        type Route = <IwarpProvider as rdma::ConnectionManager>::Route;
        type Listener = RemovedListener;

        fn resolve<'a>(
            &'a self,
            addr: SocketAddr,
        ) -> BoxFuture<'a, Result<Self::Route, rdma::ConnectError>> {
            rdma::ConnectionManager::resolve(&self.0, addr)
        }

        fn listen<'a>(&'a self, _addr: SocketAddr) -> BoxFuture<'a, io::Result<RemovedListener>> {
            Box::pin(async { Ok(RemovedListener) })
        }
    }

    /// A removed device ends NFS/RDMA but not the server: `serve_on` waits for the
    /// shutdown signal (so the TCP services beside it go on) and then ends cleanly.
    #[tokio::test]
    async fn a_removed_device_stops_rdma_but_waits_for_shutdown() {
        let server = RdmaServer::new(
            RemovedDevice(IwarpProvider::new(IwarpConfig::default())),
            Arc::new(Dispatcher::new()),
            Arc::new(Nfs3Binding),
            RdmaOptions::server_transport(true),
        );
        let listener = server.bind(([127, 0, 0, 1], 0).into()).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve_on(
            server,
            listener,
            ([127, 0, 0, 1], 20049).into(),
            None,
            async move {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!serving.is_finished(), "NFS/RDMA ended the server");
        stop.send(()).unwrap();
        serving.await.unwrap().unwrap();
    }
}
