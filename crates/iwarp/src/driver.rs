//! The tokio driver: TCP sockets, MPA setup, and two tasks per connection that feed
//! the sans-IO [`Connection`] and execute its output.
//!
//! Per connection: a reader task (socket → [`Connection::handle_input`]) and a writer
//! task ([`Connection::poll_transmit`] → vectored socket writes). Both share the core
//! behind a mutex held only for protocol work and the one copy of placement; socket
//! IO happens outside the lock. Reading and writing independently means two peers that
//! both push large transfers at each other cannot deadlock on full TCP buffers.
//!
//! Transmit fast path: a `post_send` that finds nobody on the socket encodes and
//! writes (non-blocking) on the posting thread, and hands the writer task only what
//! the socket does not take. A busy flag under the lock keeps one writer at a time,
//! so FPDUs go out in the same order and with the same bytes as through the task.

use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use rdma::software::SoftwarePd;
use rdma::{
    BoxFuture, Completion, ConnectError, ConnectParams, ConnectRequest, ConnectionManager, Device,
    DeviceAttributes, Listener, PeerParams, PostError, ProtectionDomain, QpEvent, QueuePair,
    RecvWr, Route, SendWr, SoftwareDevice,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::admission::{
    Admission, DropLog, DropReason, DropSummary, HandshakeId, HandshakeLimits, Source,
};
use crate::conn::{Connection, DirectPlacement, Limits};
use crate::handshake::{HandshakeError, IncomingRequest, Initiator, Negotiated, Responder};
use crate::tx::TxBatch;

/// Provider configuration.
#[derive(Clone, Debug)]
pub struct IwarpConfig {
    /// Ask for CRC32c on FPDUs (the peer may also ask; then it is on).
    pub crc: bool,
    /// Queue depths and the maximum ULPDU.
    pub limits: Limits,
    /// Active side: pause before the first FPDU after the MPA Reply. Linux siw as the
    /// passive side needs about 50 ms (docs/linux-facts.md, "siw accept race").
    pub first_send_delay: Duration,
    /// Active side: limit for TCP connect plus MPA setup (10 s: Linux siw as the
    /// initiator waits 10 s for the MPA Reply). The passive side's limits are in
    /// [`IwarpConfig::handshake`].
    pub setup_timeout: Duration,
    /// Passive side: limits on MPA handshakes in progress at a listener (MPA Request
    /// deadline, per-source and global caps; [`HandshakeLimits`]).
    pub handshake: HandshakeLimits,
    /// Bytes gathered per socket write (one `writev`). Payload from regions
    /// registered from the consumer's bytes ([`rdma::ProtectionDomain::register_bytes`])
    /// is referenced, not copied, so a large batch costs only
    /// headers; payload copied out of regions (Read Responses, local SGEs) is held in
    /// a scratch buffer of up to this size per connection. Larger batches mean fewer
    /// writer rounds, lock round trips and completion wakeups per byte.
    pub write_batch: usize,
}

impl Default for IwarpConfig {
    fn default() -> Self {
        IwarpConfig {
            crc: false,
            limits: Limits::default(),
            first_send_delay: Duration::from_millis(50),
            setup_timeout: Duration::from_secs(10),
            handshake: HandshakeLimits::default(),
            write_batch: 2 * 1024 * 1024,
        }
    }
}

/// The iWARP provider: a connection manager over tokio TCP.
///
/// Its one device, [`IwarpProvider::device`], reaches every address (it is the
/// host's TCP stack); its protection domains have the STag table of `rdma::software`,
/// and it takes no other provider's.
#[derive(Clone, Debug)]
pub struct IwarpProvider {
    cfg: IwarpConfig,
    device: Arc<dyn Device>,
}

impl Default for IwarpProvider {
    fn default() -> Self {
        IwarpProvider::new(IwarpConfig::default())
    }
}

fn handshake_err(e: HandshakeError) -> ConnectError {
    match e {
        HandshakeError::Rejected { private_data } => ConnectError::Rejected { private_data },
        HandshakeError::PrivateDataTooLong(_) => {
            ConnectError::InvalidParams("private data longer than the MPA limit")
        }
        other => ConnectError::Protocol(Box::new(other)),
    }
}

impl IwarpProvider {
    /// A provider with `cfg`.
    pub fn new(cfg: IwarpConfig) -> IwarpProvider {
        let attributes = DeviceAttributes {
            max_qp_wr: cfg.limits.max_send_wr.min(cfg.limits.max_recv_wr) as u32,
            ..DeviceAttributes::SOFTWARE
        };
        IwarpProvider {
            device: Arc::new(SoftwareDevice::new("iwarp", attributes)),
            cfg,
        }
    }

    /// The provider's device: where protection domains for its connections come
    /// from.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The configuration.
    pub fn config(&self) -> &IwarpConfig {
        &self.cfg
    }

    /// Active open: TCP connect, MPA Request, wait for the Reply.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> Result<IwarpQp, ConnectError> {
        let pd = software_pd(pd)?;
        let cfg = self.cfg.clone();
        let mut params = params;
        let recvs = std::mem::take(&mut params.recvs);
        let setup = async {
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut out = Vec::new();
            let ini = Initiator::new(params, cfg.crc, &mut out).map_err(handshake_err)?;
            stream.write_all(&out).await?;
            let mut buf = BytesMut::with_capacity(1024);
            let neg = loop {
                if let Some(n) = ini.handle_reply(&mut buf).map_err(handshake_err)? {
                    break n;
                }
                if stream.read_buf(&mut buf).await? == 0 {
                    return Err(ConnectError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
            };
            Ok::<_, ConnectError>((stream, buf, neg))
        };
        let (stream, buf, mut neg) = tokio::time::timeout(cfg.setup_timeout, setup)
            .await
            .map_err(|_| ConnectError::Timeout)??;
        neg.peer.addr = Some(addr);
        spawn_qp(stream, buf, pd, neg, &cfg, recvs)
    }

    /// Passive open.
    pub async fn listen(&self, addr: SocketAddr) -> io::Result<IwarpListener> {
        Ok(IwarpListener {
            listener: bind_listener(addr)?,
            cfg: self.cfg.clone(),
            device: self.device.clone(),
            pending: tokio::task::JoinSet::new(),
            tasks: HashMap::new(),
            aborts: HashMap::new(),
            admission: Admission::new(self.cfg.handshake),
            drops: DropLog::default(),
            accept_warned: None,
        })
    }
}

impl ConnectionManager for IwarpProvider {
    type Qp = IwarpQp;
    type Route = IwarpRoute;
    type Listener = IwarpListener;

    fn resolve<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, Result<IwarpRoute, ConnectError>> {
        // The host's TCP stack reaches any address: nothing to resolve before the
        // connect.
        let route = IwarpRoute {
            provider: self.clone(),
            addr,
        };
        Box::pin(async move { Ok(route) })
    }

    fn listen<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, io::Result<IwarpListener>> {
        Box::pin(IwarpProvider::listen(self, addr))
    }
}

/// The accept queue asked of the kernel (which caps it at `net.core.somaxconn`,
/// 4096 by default since Linux 5.4). Tokio's own `bind` asks for 1024: a burst of
/// about that many connections, as stalled peers renewed together make (issue 16's
/// flood test), overflowed it and the kernel dropped the honest peer's handshake,
/// which then waited a 1 s SYN retransmission (`TcpExtListenOverflows`).
const LISTEN_BACKLOG: u32 = 4096;

fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std's and tokio's `bind` do: a restarted server rebinds at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A peer address on the iWARP provider's device ([`ConnectionManager::resolve`]).
#[derive(Debug)]
pub struct IwarpRoute {
    provider: IwarpProvider,
    addr: SocketAddr,
}

impl Route for IwarpRoute {
    type Qp = IwarpQp;

    fn device(&self) -> &Arc<dyn Device> {
        self.provider.device()
    }

    fn connect(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<IwarpQp, ConnectError>> {
        let pd = pd.clone();
        Box::pin(async move { self.provider.connect(self.addr, &pd, params).await })
    }
}

/// A listening socket that yields MPA connection requests.
///
/// Every TCP connection is accepted at once and its MPA Request read by a task of
/// its own, under [`IwarpConfig::handshake`]: a deadline, a cap per source and a
/// global cap. A cap never stops the listener from accepting: it drops the oldest
/// handshake of the source at fault (`crate::admission`), so stalled peers cannot
/// lock out an honest one, whose MPA Request follows its TCP handshake at once.
#[derive(Debug)]
pub struct IwarpListener {
    listener: TcpListener,
    cfg: IwarpConfig,
    device: Arc<dyn Device>,
    /// MPA Requests being read, one task each.
    pending: tokio::task::JoinSet<Handshake>,
    /// The handshake each task reads.
    tasks: HashMap<tokio::task::Id, (HandshakeId, Source)>,
    /// How to cancel each handshake in progress.
    aborts: HashMap<HandshakeId, tokio::task::AbortHandle>,
    /// Handshakes in progress by source; whom to drop at a cap.
    admission: Admission,
    drops: DropLog,
    /// When we last warned that `accept(2)` failed with nothing left to drop.
    accept_warned: Option<Instant>,
}

/// How one handshake task ended.
enum Handshake {
    Request(Box<IwarpConnectRequest>),
    /// No complete MPA Request within the deadline.
    TimedOut(SocketAddr),
    /// Garbage, markers, or a closed connection (logged by the task).
    Failed,
}

/// Pause before accepting again when the process has no descriptor (or memory) to
/// accept with and no handshake to drop: the connection waits in the kernel's
/// backlog meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

impl IwarpListener {
    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Handshakes in progress (TCP accepted, MPA Request not yet complete).
    pub fn handshakes_in_progress(&self) -> usize {
        self.admission.len()
    }

    /// Waits for the next peer that completes TCP setup and sends a valid MPA
    /// Request. Peers that send garbage or ask for markers are dropped (markers with an
    /// MPA reject) and the wait goes on. Requests are read concurrently, within
    /// [`IwarpConfig::handshake`]'s limits. Cancel safe.
    ///
    /// Errors: only those of the listening socket itself; a failed accept of one
    /// connection (reset before accept, out of descriptors) is logged and the wait
    /// goes on.
    pub async fn accept(&mut self) -> io::Result<IwarpConnectRequest> {
        loop {
            tokio::select! {
                // Finished handshakes first: a flood of new connections must not
                // starve the ones that are ready.
                biased;
                Some(done) = self.pending.join_next_with_id(), if !self.pending.is_empty() => {
                    let task = match &done {
                        Ok((id, _)) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some((id, source)) = self.tasks.remove(&task) {
                        self.aborts.remove(&id);
                        self.admission.finish(id, source);
                        match done {
                            Ok((_, Handshake::Request(req))) => return Ok(*req),
                            Ok((_, Handshake::TimedOut(peer))) => {
                                self.dropped(source, Some(peer), DropReason::Timeout)
                            }
                            Ok((_, Handshake::Failed)) => {}
                            Err(e) if e.is_panic() => {
                                tracing::error!(%source, "MPA handshake task panicked");
                            }
                            Err(_) => {}
                        }
                    }
                }
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.start(stream, peer),
                    Err(e) => self.accept_failed(e).await?,
                },
            }
        }
    }

    /// Admits a new connection's handshake, dropping one to make room if a cap says
    /// so.
    fn start(&mut self, stream: TcpStream, peer: SocketAddr) {
        let source = Source::of(peer);
        let admitted = self.admission.admit(source);
        if let Some((victim, victim_source, reason)) = admitted.evict {
            self.cancel(victim, victim_source, reason);
        }
        let abort = self.pending.spawn(read_request(
            stream,
            peer,
            self.cfg.clone(),
            self.device.clone(),
        ));
        self.tasks.insert(abort.id(), (admitted.id, source));
        self.aborts.insert(admitted.id, abort);
    }

    /// Closes a handshake's connection (its task ends at its next poll).
    fn cancel(&mut self, id: HandshakeId, source: Source, reason: DropReason) {
        if let Some(abort) = self.aborts.remove(&id) {
            abort.abort();
        }
        self.dropped(source, None, reason);
    }

    /// A failed `accept(2)`: out of descriptors or buffers frees one by dropping a
    /// handshake (or waits a moment if there is none); a connection that went away
    /// before it was accepted is skipped; anything else is the listener's own error.
    async fn accept_failed(&mut self, e: io::Error) -> io::Result<()> {
        match e.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                match self.admission.evict_one(DropReason::Descriptors) {
                    Some((id, source, reason)) => {
                        self.cancel(id, source, reason);
                        // Let the cancelled task run its drop (closing the socket).
                        tokio::task::yield_now().await;
                    }
                    None => {
                        let now = Instant::now();
                        if !matches!(self.accept_warned, Some(t) if now - t < DropLog::PERIOD) {
                            self.accept_warned = Some(now);
                            tracing::warn!(error = %e, "MPA listener: cannot accept a connection, retrying every {ACCEPT_BACKOFF:?} (said at most every {:?})", DropLog::PERIOD);
                        }
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                }
                Ok(())
            }
            Some(
                libc::ECONNABORTED | libc::ECONNRESET | libc::EINTR | libc::EPROTO | libc::EPERM,
            ) => {
                tracing::debug!(error = %e, "MPA listener: a connection failed before accept");
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// Counts a dropped handshake and logs it within [`DropLog`]'s rate.
    fn dropped(&mut self, source: Source, peer: Option<SocketAddr>, reason: DropReason) {
        let (debug, warn) = self.drops.record(Instant::now(), source, reason);
        let limits = &self.cfg.handshake;
        if debug {
            match reason {
                DropReason::Timeout => tracing::debug!(
                    peer = ?peer,
                    "MPA request timed out ({:?})",
                    limits.request_timeout
                ),
                DropReason::PerSource => tracing::debug!(
                    %source,
                    "MPA handshake dropped: {} in progress from this source (the cap)",
                    limits.per_source
                ),
                DropReason::Global => tracing::debug!(
                    %source,
                    "MPA handshake dropped: {} in progress in all (the cap); this source had the most",
                    limits.max_pending
                ),
                DropReason::Descriptors => tracing::debug!(
                    %source,
                    "MPA handshake dropped: out of file descriptors"
                ),
            }
        }
        if let Some(w) = warn {
            warn_drops(limits, &w);
        }
    }
}

/// The rate-limited warning about dropped handshakes.
fn warn_drops(limits: &HandshakeLimits, w: &DropSummary) {
    let since = match w.since {
        Some(d) => format!("in the last {} s", d.as_secs()),
        None => "(first; further drops are summed at most every 10 s)".to_string(),
    };
    tracing::warn!(
        latest_source = %w.last,
        "MPA handshakes dropped {since}: {} at the per-source cap ({}), {} at the global cap ({}), {} out of file descriptors, {} timed out ({:?} for the MPA request)",
        w.per_source,
        limits.per_source,
        w.global,
        limits.max_pending,
        w.descriptors,
        w.timeout,
        limits.request_timeout,
    );
}

/// Reads one peer's MPA Request (within `cfg.handshake.request_timeout`): the
/// request, `Failed` if the peer sent garbage, closed, or asked for markers
/// (answered with an MPA reject), or `TimedOut`.
async fn read_request(
    mut stream: TcpStream,
    peer_addr: SocketAddr,
    cfg: IwarpConfig,
    device: Arc<dyn Device>,
) -> Handshake {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer_addr, error = %e, "TCP_NODELAY failed");
        return Handshake::Failed;
    }
    let read_req = async {
        let mut buf = BytesMut::with_capacity(1024);
        loop {
            match Responder::handle_request(&mut buf) {
                Ok(Some(r)) => return Ok((r, buf)),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    };
    match tokio::time::timeout(cfg.handshake.request_timeout, read_req).await {
        Ok(Ok((req, buf))) => {
            if req.wants_markers() {
                let mut out = Vec::new();
                req.reject(&[], &mut out);
                let _ = stream.write_all(&out).await;
                tracing::debug!(%peer_addr, "rejected MPA request asking for markers");
                return Handshake::Failed;
            }
            let mut peer = req.peer.clone();
            peer.addr = Some(peer_addr);
            Handshake::Request(Box::new(IwarpConnectRequest {
                stream,
                req,
                buf,
                peer,
                cfg,
                device,
            }))
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer_addr, error = %e, "bad MPA request");
            Handshake::Failed
        }
        Err(_) => Handshake::TimedOut(peer_addr),
    }
}

impl Listener for IwarpListener {
    type Qp = IwarpQp;
    type Request = IwarpConnectRequest;

    fn accept(&mut self) -> BoxFuture<'_, io::Result<IwarpConnectRequest>> {
        Box::pin(IwarpListener::accept(self))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        IwarpListener::local_addr(self)
    }
}

/// An MPA Request waiting for accept or reject.
#[derive(Debug)]
pub struct IwarpConnectRequest {
    stream: TcpStream,
    req: IncomingRequest,
    buf: BytesMut,
    peer: PeerParams,
    cfg: IwarpConfig,
    device: Arc<dyn Device>,
}

impl IwarpConnectRequest {
    /// What the peer offered.
    pub fn peer(&self) -> &PeerParams {
        &self.peer
    }

    /// Sends the MPA Reply and starts the connection.
    pub async fn accept(
        mut self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> Result<IwarpQp, ConnectError> {
        let pd = software_pd(pd)?;
        let mut out = Vec::new();
        let mut neg = self
            .req
            .accept(&params, self.cfg.crc, &mut out)
            .map_err(handshake_err)?;
        self.stream.write_all(&out).await?;
        neg.peer.addr = self.peer.addr;
        // The initial receives are in the connection before its reader starts, so a
        // Send right behind the Reply finds them.
        spawn_qp(self.stream, self.buf, pd, neg, &self.cfg, params.recvs)
    }

    /// Sends an MPA Reply with the R flag and `private_data`, then closes.
    pub async fn reject(mut self, private_data: Bytes) -> io::Result<()> {
        let mut out = Vec::new();
        self.req.reject(&private_data, &mut out);
        self.stream.write_all(&out).await?;
        self.stream.shutdown().await
    }
}

impl ConnectRequest for IwarpConnectRequest {
    type Qp = IwarpQp;

    fn peer(&self) -> &PeerParams {
        IwarpConnectRequest::peer(self)
    }

    fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    fn accept(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<IwarpQp, ConnectError>> {
        let pd = pd.clone();
        Box::pin(async move { IwarpConnectRequest::accept(self, &pd, params).await })
    }

    fn reject(self, private_data: Bytes) -> BoxFuture<'static, io::Result<()>> {
        Box::pin(IwarpConnectRequest::reject(self, private_data))
    }
}

struct Inner {
    conn: Connection,
    cq_waker: Option<Waker>,
    ev_waker: Option<Waker>,
    /// Someone is encoding or writing FPDUs: the writer task, or a poster on the
    /// transmit fast path. One at a time, so FPDU bytes never interleave.
    tx_busy: bool,
    /// A poster's batch that the socket did not take whole (`WouldBlock`), with the
    /// bytes already written: the writer task writes the rest before anything else.
    tx_pending: Option<(TxBatch, usize)>,
    /// A batch for the fast path, kept for its allocations. Always empty
    /// ([`TxBatch::clear`]ed once written): a written batch still references its
    /// payload (`Bytes` of the posted work), and a spare kept whole would hold a
    /// completed Write's source until the next fast-path post (issue 16).
    tx_spare: Option<TxBatch>,
    /// The socket's write half for the fast path; `None` once the writer has ended.
    tx_sock: Option<Arc<OwnedWriteHalf>>,
}

impl Inner {
    /// Wakes the completion and event pollers that have something to find (every
    /// spurious wakeup is a task switch, often a thread handoff).
    fn wake(&mut self) {
        let open = self.conn.is_open();
        if !open || self.conn.has_completions() {
            if let Some(w) = self.cq_waker.take() {
                w.wake();
            }
        }
        if !open || self.conn.has_events() {
            if let Some(w) = self.ev_waker.take() {
                w.wake();
            }
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    tx_wake: Notify,
    /// Bytes per transmit batch (`IwarpConfig::write_batch`).
    budget: usize,
    pd: SoftwarePd,
    peer: PeerParams,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The core is plain data; a panic elsewhere leaves it usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `pd` as this provider needs it: one of its device's (a [`SoftwareDevice`]'s), whose
/// STag table tagged accesses are resolved in.
fn software_pd(pd: &ProtectionDomain) -> Result<SoftwarePd, ConnectError> {
    SoftwarePd::of(pd).ok_or(ConnectError::InvalidParams(
        "the protection domain is another provider's (not a software device's)",
    ))
}

fn spawn_qp(
    stream: TcpStream,
    buf: BytesMut,
    pd: SoftwarePd,
    neg: Negotiated,
    cfg: &IwarpConfig,
    recvs: Vec<RecvWr>,
) -> Result<IwarpQp, ConnectError> {
    let local = stream.local_addr().ok();
    let mut conn = Connection::new(
        pd.clone(),
        &neg,
        cfg.limits,
        Instant::now(),
        cfg.first_send_delay,
    );
    for wr in recvs {
        conn.post_recv(wr).map_err(|_| {
            ConnectError::InvalidParams("an initial receive failed its local check")
        })?;
    }
    let (rd, wr) = stream.into_split();
    let wr = Arc::new(wr);
    let shared = Arc::new(Shared {
        inner: Mutex::new(Inner {
            conn,
            cq_waker: None,
            ev_waker: None,
            tx_busy: false,
            tx_pending: None,
            tx_spare: None,
            tx_sock: Some(wr.clone()),
        }),
        tx_wake: Notify::new(),
        budget: cfg.write_batch,
        pd,
        peer: neg.peer.clone(),
    });
    let reader = tokio::spawn(reader_task(shared.clone(), rd, buf));
    tokio::spawn(writer_task(shared.clone(), wr, reader));
    Ok(IwarpQp {
        shared,
        crc: neg.crc,
        local,
    })
}

/// During a direct placement, stream bytes read behind the segment's payload (in the
/// same vectored read) into the receive buffer: room for the FPDU's pad and CRC field,
/// the short segment that ends a large message (1 MiB = 16 x 65,502 + 544 bytes) and
/// the next FPDU's header, so that a large segment that follows is placed directly
/// too: one read per segment, at most this much copied.
const DIRECT_TAIL: usize = 1024;

async fn reader_task(shared: Arc<Shared>, mut rd: OwnedReadHalf, mut buf: BytesMut) {
    const READ_CHUNK: usize = 256 * 1024;
    // Bytes that arrived with the MPA frame.
    let mut direct = {
        let mut g = shared.lock();
        g.conn.handle_input(&mut buf);
        let d = g.conn.poll_direct(&mut buf);
        after_input(&shared, g);
        d
    };
    // After a direct placement the stream is likely in a run of large segments (a
    // large Write ends with a short one): read only what completes the pending FPDU
    // plus the next header, rather than swallowing (and copying) the segments behind.
    // `missing`: that bound, while streaming.
    let mut streaming = false;
    let mut missing = 0;
    loop {
        let r = match &direct {
            Some(d) => read_direct(&mut rd, d, &mut buf)
                .await
                .map(|()| d.len.max(1)),
            None if streaming => {
                buf.reserve(missing);
                rd.read_buf(&mut (&mut buf).limit(missing)).await
            }
            None => {
                // COPY (partial): when the buffer is reclaimed, `reserve` moves the
                // tail of a partial FPDU (under 64 KiB per read) to the front of the
                // allocation.
                buf.reserve(READ_CHUNK);
                rd.read_buf(&mut buf).await
            }
        };
        // One lock per read: finish the placement, take the FPDUs that are complete,
        // and offer the next large segment for direct placement.
        // A bounded read that got all it asked for and found no large segment: the
        // run is over, back to large reads.
        let short = matches!(r, Ok(n) if n < missing);
        streaming = direct.is_some() || (streaming && short);
        let mut g = shared.lock();
        match r {
            Ok(0) => g.conn.handle_eof(),
            Ok(_) => {
                if direct.is_some() {
                    g.conn.direct_done();
                }
                g.conn.handle_input(&mut buf);
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => g.conn.handle_eof(),
            Err(e) => g.conn.handle_transport_error(e.kind()),
        }
        direct = g.conn.poll_direct(&mut buf);
        if direct.is_none() {
            missing = g.conn.missing_fpdu_bytes(&buf) + DIRECT_TAIL;
        }
        let open = g.conn.is_open();
        after_input(&shared, g);
        if !open {
            return;
        }
    }
}

/// After input: wakes the pollers with something to find and the writer only when it
/// has work (a Read Response, a Terminate, a send queue that a Read Response
/// unblocked, the end of the connection).
fn after_input(shared: &Shared, mut g: MutexGuard<'_, Inner>) {
    g.wake();
    let tx = g.conn.wants_transmit();
    drop(g);
    if tx {
        shared.tx_wake.notify_one();
    }
}

/// Reads exactly `d.len` bytes from the socket into the region (no userspace copy)
/// and, in the same vectored read once those are in, up to [`DIRECT_TAIL`] bytes
/// that follow into `buf`.
async fn read_direct(
    rd: &mut OwnedReadHalf,
    d: &DirectPlacement,
    buf: &mut BytesMut,
) -> io::Result<()> {
    let mut done = 0usize;
    let mut tail = [0u8; DIRECT_TAIL];
    while done < d.len {
        rd.readable().await?;
        let at = d.offset + done as u64;
        let want = d.len - done;
        match d.region.with_range_mut(at, want, |dst| {
            rd.try_read_vectored(&mut [IoSliceMut::new(dst), IoSliceMut::new(&mut tail)])
        }) {
            Err(_) => {
                // Deregistered under us: the ULP broke its registration.
                return Err(io::Error::other("target region shrank during placement"));
            }
            Ok(Ok(0)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(n)) if n > want => {
                // COPY: what follows the payload (trailer, a short segment, the next
                // header; at most DIRECT_TAIL bytes).
                buf.extend_from_slice(&tail[..n - want]);
                done = d.len;
            }
            Ok(Ok(n)) => done += n,
            Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(Err(e)) => return Err(e),
        }
    }
    Ok(())
}

async fn writer_task(
    shared: Arc<Shared>,
    wr: Arc<OwnedWriteHalf>,
    reader: tokio::task::JoinHandle<()>,
) {
    let mut batch = TxBatch::new();
    // `tx_busy` is ours (set by this task, not by a poster).
    let mut mine = false;
    loop {
        let mut skip = 0;
        let (produced, finished, timeout) = {
            let mut g = shared.lock();
            if let Some((b, done)) = g.tx_pending.take() {
                // A poster's remainder: it goes first, and the socket is ours.
                g.tx_busy = true;
                mine = true;
                let old = std::mem::replace(&mut batch, b);
                g.tx_spare.get_or_insert(old);
                skip = done;
                (true, false, None)
            } else if g.tx_busy && !mine {
                // A poster is writing; it wakes us if it leaves work behind.
                (false, g.conn.is_finished(), g.conn.poll_timeout())
            } else {
                g.tx_busy = true;
                let p = g
                    .conn
                    .poll_transmit(Instant::now(), &mut batch, shared.budget);
                g.wake();
                mine = !batch.is_empty();
                g.tx_busy = mine;
                (p, g.conn.is_finished(), g.conn.poll_timeout())
            }
        };
        let written = if batch.len() > skip {
            write_batch(&wr, &batch, skip).await
        } else {
            Ok(())
        };
        // As soon as the socket has the bytes (or failed): the batch references the
        // posted work's payload, whose work requests may already have completed.
        // Emptied now, not when the next batch is built, so an idle connection holds
        // no sent buffer (issue 16).
        batch.clear();
        if let Err(e) = written {
            let mut g = shared.lock();
            g.conn.handle_transport_error(e.kind());
            g.wake();
            break;
        }
        if produced {
            continue;
        }
        // Leave only when no poster is on the socket (it wakes us when it leaves).
        if finished && (mine || !shared.lock().tx_busy) {
            break;
        }
        match timeout {
            Some(t) => {
                tokio::select! {
                    _ = shared.tx_wake.notified() => {}
                    _ = tokio::time::sleep_until(t.into()) => {}
                }
            }
            None => shared.tx_wake.notified().await,
        }
    }
    // Take the socket from the fast path for good (waiting out a poster that is on it).
    loop {
        {
            let mut g = shared.lock();
            if mine || !g.tx_busy {
                g.tx_busy = true;
                g.tx_sock = None;
                break;
            }
        }
        shared.tx_wake.notified().await;
    }
    if let Ok(mut wr) = Arc::try_unwrap(wr) {
        let _ = wr.shutdown().await;
    }
    // Give the peer a moment to close its side, then stop reading.
    if tokio::time::timeout(Duration::from_secs(2), async {
        while !reader.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_err()
    {
        reader.abort();
        let mut g = shared.lock();
        g.conn.handle_eof();
        g.wake();
    }
}

/// Writes `batch` from byte `skip` on, waiting for the socket as needed.
async fn write_batch(wr: &OwnedWriteHalf, batch: &TxBatch, mut skip: usize) -> io::Result<()> {
    loop {
        skip += try_write_batch(wr, batch, skip)?;
        if skip >= batch.len() {
            return Ok(());
        }
        wr.writable().await?;
    }
}

/// Writes `batch` from byte `skip` on without waiting: until it is all written or the
/// socket would block. Returns the bytes written by this call.
fn try_write_batch(wr: &OwnedWriteHalf, batch: &TxBatch, skip: usize) -> io::Result<usize> {
    let slices: Vec<&[u8]> = batch.slices().filter(|s| !s.is_empty()).collect();
    let (mut i, mut off) = (0usize, skip);
    while i < slices.len() && off >= slices[i].len() {
        off -= slices[i].len();
        i += 1;
    }
    let mut written = 0;
    while i < slices.len() {
        let iov: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&slices[i][off..]))
            .chain(slices[i + 1..].iter().take(511).map(|s| IoSlice::new(s)))
            .collect();
        let mut n = match wr.try_write_vectored(&iov) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(written),
            Err(e) => return Err(e),
        };
        written += n;
        while n > 0 && i < slices.len() {
            let rem = slices[i].len() - off;
            if n >= rem {
                n -= rem;
                i += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
    Ok(written)
}

/// Payload bytes from which `post_send` takes the transmit fast path (one maximum
/// FPDU): below it a syscall per message costs more than the handoff it saves.
const FAST_PATH_MIN: usize = 64 * 1024;

/// A connected iWARP queue pair. Dropping it disconnects.
pub struct IwarpQp {
    shared: Arc<Shared>,
    crc: bool,
    local: Option<SocketAddr>,
}

impl std::fmt::Debug for IwarpQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IwarpQp")
            .field("local", &self.local)
            .field("peer", &self.shared.peer.addr)
            .field("crc", &self.crc)
            .finish()
    }
}

impl IwarpQp {
    /// CRC32c is on for this connection.
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// Our socket address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// True until the connection ends.
    pub fn is_connected(&self) -> bool {
        self.shared.lock().conn.is_open()
    }
}

impl QueuePair for IwarpQp {
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        let shared = &*self.shared;
        let large = wr.len() >= FAST_PATH_MIN;
        let mut g = shared.lock();
        g.conn.post_send(wr)?;
        // Transmit fast path for large messages: with nobody on the socket and nothing
        // handed over, this thread encodes and writes (without blocking) what the
        // writer task would have, and hands it only what the socket does not take.
        // Saves a thread handoff per post. Small messages go to the writer task, which
        // gathers many into one `writev`.
        let sock = match &g.tx_sock {
            Some(s) if large && !g.tx_busy && g.tx_pending.is_none() => s.clone(),
            _ => {
                drop(g);
                shared.tx_wake.notify_one();
                return Ok(());
            }
        };
        g.tx_busy = true;
        let mut batch = g.tx_spare.take().unwrap_or_default();
        g.conn
            .poll_transmit(Instant::now(), &mut batch, shared.budget);
        g.wake();
        drop(g);
        let r = if batch.is_empty() {
            Ok(0)
        } else {
            try_write_batch(&sock, &batch, 0)
        };
        drop(sock);
        let mut g = shared.lock();
        let notify = match r {
            Ok(n) if n >= batch.len() => {
                // Written: drop the payload references before keeping the batch (see
                // `Inner::tx_spare`). The Write completed when it was encoded, so its
                // source must not outlive this.
                batch.clear();
                g.tx_spare = Some(batch);
                g.conn.wants_transmit()
            }
            Ok(n) => {
                g.tx_pending = Some((batch, n));
                true
            }
            Err(e) => {
                g.conn.handle_transport_error(e.kind());
                g.wake();
                true
            }
        };
        g.tx_busy = false;
        drop(g);
        if notify {
            shared.tx_wake.notify_one();
        }
        Ok(())
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.shared.lock().conn.post_recv(wr)
    }

    fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Option<Completion>> {
        let mut g = self.shared.lock();
        if let Some(c) = g.conn.poll_completion() {
            return Poll::Ready(Some(c));
        }
        if !g.conn.is_open() {
            return Poll::Ready(None);
        }
        g.cq_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<QpEvent>> {
        let mut g = self.shared.lock();
        if let Some(e) = g.conn.poll_event() {
            return Poll::Ready(Some(e));
        }
        if !g.conn.is_open() {
            return Poll::Ready(None);
        }
        g.ev_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn disconnect(&self) {
        let mut g = self.shared.lock();
        g.conn.close();
        g.wake();
        drop(g);
        self.shared.tx_wake.notify_one();
    }

    fn peer(&self) -> &PeerParams {
        &self.shared.peer
    }

    fn pd(&self) -> &ProtectionDomain {
        self.shared.pd.pd()
    }
}

impl Drop for IwarpQp {
    fn drop(&mut self) {
        self.disconnect();
    }
}
