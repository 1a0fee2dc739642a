//! Connection management through librdmacm: `rdma::ConnectionManager` and friends.
//!
//! Every CM id has its own event channel whose fd tokio watches (a connect request's
//! new id is moved to a channel of its own with `rdma_migrate_id`), so the events of
//! one connection never wait behind another's. The device of a connection is the
//! one librdmacm bound its id to (`cm_id->verbs`), as a [`VerbsDevice`]; the
//! consumer allocates its protection domain there, and `connect`/`accept` create
//! the QP on that PD (`rdma_create_qp`) and post the initial Receives before
//! `rdma_connect`/`rdma_accept`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rdma::{BoxFuture, ConnectError, ConnectParams, Device, PeerParams, ProtectionDomain};
use tokio::io::unix::AsyncFd;

use crate::device::VerbsDevice;
use crate::qp::VerbsQp;
use crate::sys_conn::{self, event, ChanFd, CmEvent, CmId, ConnParam, EventChannel, QpCaps};

/// Address and route resolution time limit (each).
const RESOLVE_MS: i32 = 5000;
/// Connection setup time limit (connect or accept until ESTABLISHED).
const SETUP: Duration = Duration::from_secs(30);
/// Queue depths asked for (capped by the device's `max_qp_wr`).
const QUEUE_DEPTH: u32 = 1024;
/// SGEs per work request asked for (capped by the device's `max_sge`).
const MAX_SGE: u32 = 6;
/// Inline data asked for (`max_inline_data`): a Send of up to this many bytes (an
/// RPC-over-RDMA header with a small reply, e.g. GETATTR's) goes without a DMA read
/// of its buffer. Devices that offer less get less (`sys_conn::INLINE_FALLBACKS`).
const MAX_INLINE: u32 = 256;

/// IB CM reject reason "consumer defined" (the peer's ULP rejected, with private
/// data); IB_CM_REJ_CONSUMER_DEFINED.
const IB_REJ_CONSUMER: i32 = 28;

/// An event channel and tokio's watch of its fd.
struct Chan {
    fd: AsyncFd<ChanFd>,
}

impl Chan {
    fn new() -> io::Result<Chan> {
        let fd = sys_conn::watch_channel(EventChannel::new()?)?;
        Ok(Chan { fd })
    }

    fn chan(&self) -> &Arc<EventChannel> {
        self.fd.get_ref().channel()
    }

    async fn next(&self) -> io::Result<CmEvent> {
        loop {
            let mut g = self.fd.readable().await?;
            match self.chan().get_event()? {
                Some(e) => return Ok(e),
                None => g.clear_ready(),
            }
        }
    }
}

/// The rdma_cm connection manager (`rdma::ConnectionManager`). Needs a tokio runtime
/// (with IO and time enabled) wherever its futures and queue pairs are used.
#[derive(Debug, Default, Clone)]
pub struct VerbsCm {
    _private: (),
}

impl VerbsCm {
    /// A connection manager.
    pub fn new() -> VerbsCm {
        VerbsCm::default()
    }
}

fn unexpected(what: &str, ev: &CmEvent) -> io::Error {
    io::Error::other(format!(
        "{what}: unexpected rdma_cm event {} (status {})",
        ev.kind, ev.status
    ))
}

/// What a CM event says the peer offered (RFC 8797 private data, IRD/ORD from the
/// peer's point of view: the event reports them from ours).
fn peer_params(ev: &CmEvent, addr: Option<SocketAddr>) -> PeerParams {
    PeerParams {
        private_data: Bytes::copy_from_slice(&ev.private_data),
        ird: u16::from(ev.initiator_depth),
        ord: u16::from(ev.responder_resources),
        addr,
    }
}

fn device_of(id: &Arc<CmId>) -> io::Result<VerbsDevice> {
    let ctx = id
        .context()
        .ok_or_else(|| io::Error::other("rdma_cm id has no device"))?;
    VerbsDevice::from_context(ctx).map_err(io::Error::other)
}

/// A resolved route (`rdma::Route`).
pub struct VerbsRoute {
    id: Arc<CmId>,
    chan: Chan,
    vdev: VerbsDevice,
    device: Arc<dyn Device>,
    peer_addr: SocketAddr,
}

/// An incoming connect request (`rdma::ConnectRequest`).
pub struct VerbsRequest {
    id: Arc<CmId>,
    chan: Chan,
    vdev: VerbsDevice,
    device: Arc<dyn Device>,
    peer: PeerParams,
}

/// A listening CM id (`rdma::Listener`).
pub struct VerbsListener {
    id: Arc<CmId>,
    chan: Chan,
    local: SocketAddr,
}

impl VerbsListener {
    /// The RDMA device the listener is bound to: the device of its address, or
    /// `None` for a wildcard address (rdma_cm then listens on every device).
    /// Binding a specific address that is on no RDMA device fails already
    /// (`ENODEV` from `rdma_bind_addr`).
    pub fn device_name(&self) -> Option<String> {
        device_of(&self.id).ok().map(|d| d.name().to_string())
    }
}

impl rdma::ConnectionManager for VerbsCm {
    type Qp = VerbsQp;
    type Route = VerbsRoute;
    type Listener = VerbsListener;

    fn resolve<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, Result<VerbsRoute, ConnectError>> {
        Box::pin(async move {
            let chan = Chan::new()?;
            let id = CmId::new(chan.chan())?;
            id.resolve_addr(addr, RESOLVE_MS)?;
            let ev = chan.next().await?;
            if ev.kind != event::ADDR_RESOLVED {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!(
                        "rdma_resolve_addr {addr}: no RDMA device reaches it (event {}, status {})",
                        ev.kind, ev.status
                    ),
                )
                .into());
            }
            id.resolve_route(RESOLVE_MS)?;
            let ev = chan.next().await?;
            if ev.kind != event::ROUTE_RESOLVED {
                return Err(unexpected("rdma_resolve_route", &ev).into());
            }
            let id = Arc::new(id);
            let vdev = device_of(&id)?;
            Ok(VerbsRoute {
                device: Arc::new(vdev.clone()),
                vdev,
                id,
                chan,
                peer_addr: addr,
            })
        })
    }

    fn listen<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, io::Result<VerbsListener>> {
        Box::pin(async move {
            let chan = Chan::new()?;
            let id = CmId::new(chan.chan())?;
            id.listen(addr, 128)?;
            let local = id.local_addr().unwrap_or(addr);
            Ok(VerbsListener {
                id: Arc::new(id),
                chan,
                local,
            })
        })
    }
}

impl rdma::Listener for VerbsListener {
    type Qp = VerbsQp;
    type Request = VerbsRequest;

    fn accept(&mut self) -> BoxFuture<'_, io::Result<VerbsRequest>> {
        Box::pin(async move {
            loop {
                let mut ev = self.chan.next().await?;
                match ev.kind {
                    event::CONNECT_REQUEST => {}
                    event::DEVICE_REMOVAL => {
                        return Err(io::Error::new(
                            io::ErrorKind::NotConnected,
                            "the listener's RDMA device was removed",
                        ))
                    }
                    _ => continue,
                }
                let Some(mut id) = ev.new_id.take() else {
                    continue;
                };
                // A request that fails here is dropped (its id destroyed, which
                // rejects it); the listener keeps listening.
                let Ok(chan) = Chan::new() else { continue };
                if id.migrate(chan.chan()).is_err() {
                    continue;
                }
                let id = Arc::new(id);
                let Ok(vdev) = device_of(&id) else { continue };
                let peer = peer_params(&ev, id.peer_addr());
                return Ok(VerbsRequest {
                    device: Arc::new(vdev.clone()),
                    vdev,
                    id,
                    chan,
                    peer,
                });
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// What both sides do before connecting/accepting: the QP on the consumer's PD,
/// the initial Receives.
fn prepare(
    id: &Arc<CmId>,
    vdev: &VerbsDevice,
    pd: &ProtectionDomain,
    params: &ConnectParams,
) -> Result<sys_conn::Qp, ConnectError> {
    let dpd = vdev.device_pd(pd).ok_or(ConnectError::InvalidParams(
        "the protection domain was not allocated by this route's device",
    ))?;
    if params.private_data.len() > usize::from(u8::MAX) {
        return Err(ConnectError::InvalidParams("private data too long"));
    }
    let a = rdma::Device::attributes(vdev);
    let caps = QpCaps {
        send_wr: QUEUE_DEPTH.min(a.max_qp_wr),
        recv_wr: QUEUE_DEPTH.max(params.recvs.len() as u32).min(a.max_qp_wr),
        send_sge: MAX_SGE.min(a.max_sge).max(1),
        recv_sge: MAX_SGE.min(a.max_sge).max(1),
        inline: MAX_INLINE,
    };
    let qp = sys_conn::Qp::new(id, &dpd, pd.id(), &caps)?;
    for r in &params.recvs {
        let sgl: Vec<_> = r.sgl.iter().collect();
        qp.post_recv(r.wr_id, &sgl)
            .map_err(|_| ConnectError::InvalidParams("an initial Receive could not be posted"))?;
    }
    Ok(qp)
}

/// What we offer in `rdma_connect`/`rdma_accept`: our private data and IRD/ORD as u8s,
/// clamped to the device.
fn conn_param<'a>(vdev: &VerbsDevice, params: &'a ConnectParams) -> ConnParam<'a> {
    let a = rdma::Device::attributes(vdev);
    let clamp = |v: u16, max: u16| u8::try_from(v.min(max)).unwrap_or(u8::MAX);
    ConnParam {
        private_data: &params.private_data,
        responder_resources: clamp(params.ird, a.max_ird),
        initiator_depth: clamp(params.ord, a.max_ord),
    }
}

/// Waits for ESTABLISHED on a connection's channel, then starts the QP.
async fn established(
    chan: Chan,
    qp: sys_conn::Qp,
    pd: ProtectionDomain,
    peer: Option<PeerParams>,
    addr: Option<SocketAddr>,
    iwarp_refused: bool,
    offload_posts: bool,
) -> Result<VerbsQp, ConnectError> {
    let ev = tokio::time::timeout(SETUP, chan.next())
        .await
        .map_err(|_| ConnectError::Timeout)??;
    match ev.kind {
        event::ESTABLISHED => {
            let peer = peer.unwrap_or_else(|| peer_params(&ev, addr));
            Ok(VerbsQp::start(qp, chan.fd, peer, pd, offload_posts)?)
        }
        event::REJECTED => {
            let consumer =
                ev.status == IB_REJ_CONSUMER || (iwarp_refused && !ev.private_data.is_empty());
            if consumer {
                Err(ConnectError::Rejected {
                    private_data: Bytes::from(ev.private_data),
                })
            } else {
                Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("connection refused (rdma_cm reject status {})", ev.status),
                )
                .into())
            }
        }
        _ => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!(
                "connection setup failed: rdma_cm event {} (status {})",
                ev.kind, ev.status
            ),
        )
        .into()),
    }
}

impl rdma::Route for VerbsRoute {
    type Qp = VerbsQp;

    fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    fn connect(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<VerbsQp, ConnectError>> {
        let pd = pd.clone();
        Box::pin(async move {
            let qp = prepare(&self.id, &self.vdev, &pd, &params)?;
            self.id.connect(&conn_param(&self.vdev, &params))?;
            let iwarp = self.vdev.transport() == crate::Transport::Iwarp;
            let addr = Some(self.peer_addr);
            let offload = crate::qp::posts_do_the_work(self.vdev.vendor().0);
            established(self.chan, qp, pd, None, addr, iwarp, offload).await
        })
    }
}

impl rdma::ConnectRequest for VerbsRequest {
    type Qp = VerbsQp;

    fn peer(&self) -> &PeerParams {
        &self.peer
    }

    fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    fn accept(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<VerbsQp, ConnectError>> {
        let pd = pd.clone();
        Box::pin(async move {
            let qp = prepare(&self.id, &self.vdev, &pd, &params)?;
            self.id.accept(&conn_param(&self.vdev, &params))?;
            let offload = crate::qp::posts_do_the_work(self.vdev.vendor().0);
            established(self.chan, qp, pd, Some(self.peer), None, false, offload).await
        })
    }

    fn reject(self, private_data: Bytes) -> BoxFuture<'static, io::Result<()>> {
        Box::pin(async move { self.id.reject(&private_data) })
    }
}
