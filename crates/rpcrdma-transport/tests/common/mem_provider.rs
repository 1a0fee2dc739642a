//! A second RDMA provider for the tests: two queue pairs in one process joined in
//! memory, with no wire format at all (no MPA, DDP or RDMAP, no socket). Sends land in
//! the peer's posted Receives, RDMA Writes and Reads go straight to the peer's
//! registered memory through its protection domain's checks, and everything happens at
//! post time, in order. The transport runs on it unchanged: the proof that its drivers
//! assume nothing of the iWARP provider beyond the `rdma` API.
//!
//! Its device is its own ([`MemProvider::device`], `mem0`, with limits unlike the
//! iWARP provider's): the transport allocates its protection domains there, through
//! the `rdma` API's route and connect request.
//!
//! Semantics kept from verbs: a Send with no Receive posted at the peer is a fatal
//! connection error (verbs RNR with no retry); a remote access error (bad STag, bounds,
//! rights) ends the connection with a completion error on the initiator; a disconnect
//! flushes every posted Receive and ends the completion stream.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use rdma::software::SoftwarePd;
use rdma::{
    Access, BoxFuture, Completion, ConnectError, ConnectParams, ConnectRequest, ConnectionManager,
    Device, DeviceAttributes, DisconnectReason, Listener, LocalSge, PeerParams, PostError,
    ProtectionDomain, QpEvent, QueuePair, RecvWr, Route, SendOp, SendWr, SoftwareDevice, WcOpcode,
    WcStatus,
};
use tokio::sync::{mpsc, oneshot};

/// The provider: a registry of listeners by address, and its one device.
#[derive(Clone)]
pub struct MemProvider {
    listeners: Arc<Mutex<HashMap<SocketAddr, mpsc::UnboundedSender<MemRequest>>>>,
    device: Arc<dyn Device>,
    /// Sends of accepting sides still to be stalled ([`MemProvider::stall_server_sends`]).
    stalled_sends: Arc<AtomicUsize>,
    /// Sends of connecting sides still to be stalled ([`MemProvider::stall_client_sends`]).
    stalled_client_sends: Arc<AtomicUsize>,
    /// Stalled Sends are never flushed ([`MemProvider::never_flush_stalled_sends`]).
    never_flush: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for MemProvider {
    fn default() -> Self {
        MemProvider {
            listeners: Arc::default(),
            stalled_sends: Arc::default(),
            stalled_client_sends: Arc::default(),
            never_flush: Arc::default(),
            device: Arc::new(SoftwareDevice::new(
                "mem0",
                DeviceAttributes {
                    max_mr_size: 1 << 30,
                    max_mr: 1 << 16,
                    max_sge: 8,
                    max_qp_wr: 1024,
                    max_ird: 16,
                    max_ord: 16,
                    invalidate: true,
                },
            )),
        }
    }
}

impl MemProvider {
    /// The device every connection of this provider uses.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The same provider (the same listeners) with a device of other limits: a
    /// client on it reaches servers of `self`.
    pub fn with_attributes(&self, attributes: DeviceAttributes) -> MemProvider {
        MemProvider {
            listeners: self.listeners.clone(),
            stalled_sends: self.stalled_sends.clone(),
            stalled_client_sends: self.stalled_client_sends.clone(),
            never_flush: self.never_flush.clone(),
            device: Arc::new(SoftwareDevice::new("mem1", attributes)),
        }
    }

    /// From now on a stalled Send ([`MemProvider::stall_server_sends`]) is never
    /// completed, not even flushed when its connection ends: the completion stream of
    /// its queue pair never ends, as with a provider that leaves a dead QP unflushed.
    pub fn never_flush_stalled_sends(&self) {
        self.never_flush.store(true, Ordering::SeqCst);
    }

    /// The next `n` Sends posted by accepting sides (servers) stall: they are neither
    /// delivered nor completed, as on a provider whose transmit path hangs, until
    /// their connection ends (then they flush).
    pub fn stall_server_sends(&self, n: usize) {
        self.stalled_sends.store(n, Ordering::SeqCst);
    }

    /// The same for the next `n` Sends posted by connecting sides (clients).
    pub fn stall_client_sends(&self, n: usize) {
        self.stalled_client_sends.store(n, Ordering::SeqCst);
    }
}

static NEXT_PORT: AtomicU16 = AtomicU16::new(40_000);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct SideState {
    recvs: VecDeque<RecvWr>,
    cq: VecDeque<Completion>,
    cq_waker: Option<Waker>,
    events: VecDeque<QpEvent>,
    ev_waker: Option<Waker>,
    connected: bool,
    /// RDMA Reads of this side's memory are never answered (a hostile peer).
    unresponsive: bool,
    /// This side's RDMA Reads left unanswered by such a peer: flushed at the end.
    parked_reads: Vec<u64>,
    /// This side's Sends stalled ([`MemProvider::stall_server_sends`]): flushed at
    /// the end.
    parked_sends: Vec<u64>,
}

struct Side {
    /// Its protection domain with the STag table this provider checks peers'
    /// accesses in.
    pd: SoftwarePd,
    state: Mutex<SideState>,
    /// This side's share of [`MemProvider::stall_server_sends`] (accepting sides) or
    /// [`MemProvider::stall_client_sends`] (connecting sides), and of
    /// [`MemProvider::never_flush_stalled_sends`].
    stalled_sends: Option<(Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>)>,
}

impl Side {
    fn stalling(
        pd: &ProtectionDomain,
        recvs: Vec<RecvWr>,
        stalled_sends: Option<(Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>)>,
    ) -> Result<Arc<Side>, ConnectError> {
        let pd = SoftwarePd::of(pd).ok_or(ConnectError::InvalidParams(
            "the protection domain is not a software device's",
        ))?;
        Ok(Arc::new(Side {
            pd,
            stalled_sends,
            state: Mutex::new(SideState {
                recvs: recvs.into(),
                connected: true,
                ..SideState::default()
            }),
        }))
    }

    fn complete(&self, c: Completion) {
        let mut st = lock(&self.state);
        st.cq.push_back(c);
        if let Some(w) = st.cq_waker.take() {
            w.wake();
        }
    }

    /// Ends this side: every posted Receive flushes, the event says why.
    fn end(&self, reason: DisconnectReason) {
        let mut st = lock(&self.state);
        if !st.connected {
            return;
        }
        st.connected = false;
        for wr_id in std::mem::take(&mut st.parked_reads) {
            st.cq.push_back(Completion::new(
                wr_id,
                WcOpcode::RdmaRead,
                WcStatus::Flushed,
                0,
            ));
        }
        let never_flush = self
            .stalled_sends
            .as_ref()
            .is_some_and(|(_, never)| never.load(Ordering::SeqCst));
        if !never_flush {
            for wr_id in std::mem::take(&mut st.parked_sends) {
                st.cq
                    .push_back(Completion::new(wr_id, WcOpcode::Send, WcStatus::Flushed, 0));
            }
        }
        let flushed: Vec<RecvWr> = st.recvs.drain(..).collect();
        for r in flushed {
            st.cq.push_back(Completion::new(
                r.wr_id,
                WcOpcode::Recv,
                WcStatus::Flushed,
                0,
            ));
        }
        st.events.push_back(QpEvent::Disconnected(reason));
        if let Some(w) = st.cq_waker.take() {
            w.wake();
        }
        if let Some(w) = st.ev_waker.take() {
            w.wake();
        }
    }
}

/// One end of an in-memory connection.
pub struct MemQp {
    me: Arc<Side>,
    peer: Arc<Side>,
    peer_params: PeerParams,
}

impl MemQp {
    /// From now on RDMA Reads of this side's memory are never answered: the peer's
    /// Reads stay outstanding until the connection ends (then they flush), as with
    /// a peer whose RDMA layer stops responding.
    pub fn stop_answering_reads(&self) {
        lock(&self.me.state).unresponsive = true;
    }

    fn gather(&self, sgl: &[LocalSge]) -> Option<Bytes> {
        let mut out = BytesMut::new();
        for l in sgl {
            if l.mr.pd_id() != self.me.pd.id() {
                return None;
            }
            out.extend_from_slice(&l.mr.read(l.offset, l.len)?);
        }
        Some(out.freeze())
    }

    /// A fatal error: both ends go, ours saying we detected it.
    fn fail(&self) {
        self.me.end(DisconnectReason::LocalError {
            layer: 0,
            etype: 1,
            code: 0,
        });
        self.peer.end(DisconnectReason::RemoteError {
            layer: 0,
            etype: 1,
            code: 0,
        });
    }

    fn deliver_send(&self, data: &Bytes, invalidate: Option<rdma::STag>) -> bool {
        let recv = {
            let mut st = lock(&self.peer.state);
            if !st.connected {
                return false;
            }
            st.recvs.pop_front()
        };
        // verbs: a Send that finds no Receive posted is a fatal error (RNR, no retry).
        let Some(recv) = recv else { return false };
        if data.len() > recv.capacity() {
            return false;
        }
        let mut at = 0;
        for sge in &recv.sgl {
            let n = sge.len.min(data.len() - at);
            if n > 0 && !sge.mr.write(sge.offset, &data[at..at + n]) {
                return false;
            }
            at += n;
        }
        let mut c = Completion::new(recv.wr_id, WcOpcode::Recv, WcStatus::Success, data.len());
        if let Some(stag) = invalidate {
            if self.peer.pd.invalidate(stag).is_err() {
                return false;
            }
            c.invalidated = Some(stag);
        }
        self.peer.complete(c);
        true
    }
}

impl QueuePair for MemQp {
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        if !lock(&self.me.state).connected {
            return Err(PostError::NotConnected);
        }
        let (opcode, ok, len) = match &wr.op {
            SendOp::Send
            | SendOp::SendWithSolicitedEvent
            | SendOp::SendWithInvalidate(_)
            | SendOp::SendWithSolicitedEventAndInvalidate(_) => {
                let inv = match wr.op {
                    SendOp::SendWithInvalidate(s)
                    | SendOp::SendWithSolicitedEventAndInvalidate(s) => Some(s),
                    _ => None,
                };
                let Some(data) = self.gather(&wr.sgl) else {
                    return Err(PostError::LocalProtection);
                };
                let stall = self.me.stalled_sends.as_ref().is_some_and(|(n, _)| {
                    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                });
                if stall {
                    lock(&self.me.state).parked_sends.push(wr.wr_id);
                    return Ok(());
                }
                (WcOpcode::Send, self.deliver_send(&data, inv), data.len())
            }
            SendOp::RdmaWrite(remote) => {
                let Some(data) = self.gather(&wr.sgl) else {
                    return Err(PostError::LocalProtection);
                };
                let placed = self
                    .peer
                    .pd
                    .resolve(
                        remote.stag,
                        remote.offset,
                        data.len() as u64,
                        Access::REMOTE_WRITE,
                    )
                    .and_then(|r| r.place(remote.offset, &data));
                (WcOpcode::RdmaWrite, placed.is_ok(), data.len())
            }
            SendOp::RdmaRead { .. } if lock(&self.peer.state).unresponsive => {
                lock(&self.me.state).parked_reads.push(wr.wr_id);
                return Ok(());
            }
            SendOp::RdmaRead { remote, sink } => {
                let mut out = Vec::new();
                let read = self
                    .peer
                    .pd
                    .resolve(
                        remote.stag,
                        remote.offset,
                        sink.len as u64,
                        Access::REMOTE_READ,
                    )
                    .and_then(|r| r.copy_out(remote.offset, sink.len, &mut out));
                let ok = read.is_ok() && sink.mr.write(sink.offset, &out);
                (WcOpcode::RdmaRead, ok, sink.len)
            }
            SendOp::LocalInvalidate(stag) => {
                let ok = self.me.pd.invalidate(*stag).is_ok();
                if !ok {
                    // verbs: a failed LOCAL_INV completes in error and the queue pair
                    // goes to the error state.
                    self.me.complete(Completion::new(
                        wr.wr_id,
                        WcOpcode::LocalInvalidate,
                        WcStatus::LocalProtectionError,
                        0,
                    ));
                    self.fail();
                    return Ok(());
                }
                (WcOpcode::LocalInvalidate, true, 0)
            }
        };
        if ok {
            self.me
                .complete(Completion::new(wr.wr_id, opcode, WcStatus::Success, len));
        } else {
            self.me.complete(Completion::new(
                wr.wr_id,
                opcode,
                WcStatus::RemoteAccessError,
                0,
            ));
            self.fail();
        }
        Ok(())
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let mut st = lock(&self.me.state);
        if !st.connected {
            return Err(PostError::NotConnected);
        }
        st.recvs.push_back(wr);
        Ok(())
    }

    fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Option<Completion>> {
        let mut st = lock(&self.me.state);
        if let Some(c) = st.cq.pop_front() {
            return Poll::Ready(Some(c));
        }
        // Work requests still posted (stalled Sends never flushed) keep the stream open.
        if !st.connected && st.parked_sends.is_empty() {
            return Poll::Ready(None);
        }
        st.cq_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<QpEvent>> {
        let mut st = lock(&self.me.state);
        if let Some(e) = st.events.pop_front() {
            return Poll::Ready(Some(e));
        }
        st.ev_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn disconnect(&self) {
        self.me.end(DisconnectReason::Local);
        self.peer.end(DisconnectReason::PeerClosed);
    }

    fn peer(&self) -> &PeerParams {
        &self.peer_params
    }

    fn pd(&self) -> &ProtectionDomain {
        self.me.pd.pd()
    }
}

/// A connection request waiting at a listener.
pub struct MemRequest {
    peer: PeerParams,
    device: Arc<dyn Device>,
    /// The connecting side, and where the accepting side's answer goes.
    client: Arc<Side>,
    answer: oneshot::Sender<Result<(Arc<Side>, PeerParams), ConnectError>>,
    client_params: PeerParams,
    stalled_sends: (Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>),
}

pub struct MemListener {
    addr: SocketAddr,
    rx: mpsc::UnboundedReceiver<MemRequest>,
}

impl Listener for MemListener {
    type Qp = MemQp;
    type Request = MemRequest;

    fn accept(&mut self) -> BoxFuture<'_, io::Result<MemRequest>> {
        Box::pin(async move {
            self.rx
                .recv()
                .await
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

impl ConnectRequest for MemRequest {
    type Qp = MemQp;

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
    ) -> BoxFuture<'static, Result<MemQp, ConnectError>> {
        let me = match Side::stalling(pd, params.recvs, Some(self.stalled_sends.clone())) {
            Ok(me) => me,
            Err(e) => return Box::pin(async { Err(e) }),
        };
        let ours = PeerParams {
            private_data: params.private_data,
            ird: params.ird,
            ord: params.ord,
            addr: self.client_params.addr,
        };
        let qp = MemQp {
            me: me.clone(),
            peer: self.client.clone(),
            peer_params: self.peer.clone(),
        };
        let sent = self.answer.send(Ok((me, ours)));
        Box::pin(async move {
            sent.map_err(|_| ConnectError::Io(io::ErrorKind::ConnectionAborted.into()))?;
            Ok(qp)
        })
    }

    fn reject(self, private_data: Bytes) -> BoxFuture<'static, io::Result<()>> {
        let _ = self
            .answer
            .send(Err(ConnectError::Rejected { private_data }));
        Box::pin(async { Ok(()) })
    }
}

/// A resolved address of the in-memory provider.
pub struct MemRoute {
    provider: MemProvider,
    addr: SocketAddr,
}

impl Route for MemRoute {
    type Qp = MemQp;

    fn device(&self) -> &Arc<dyn Device> {
        &self.provider.device
    }

    fn connect(
        self,
        pd: &ProtectionDomain,
        params: ConnectParams,
    ) -> BoxFuture<'static, Result<MemQp, ConnectError>> {
        let pd = pd.clone();
        let MemRoute { provider, addr } = self;
        Box::pin(async move {
            let Some(tx) = lock(&provider.listeners).get(&addr).cloned() else {
                return Err(ConnectError::Io(io::ErrorKind::ConnectionRefused.into()));
            };
            let me = Side::stalling(
                &pd,
                params.recvs,
                Some((
                    provider.stalled_client_sends.clone(),
                    provider.never_flush.clone(),
                )),
            )?;
            let local: SocketAddr = "127.0.0.1:1".parse().unwrap_or(addr);
            let (answer, answered) = oneshot::channel();
            let request = MemRequest {
                device: provider.device.clone(),
                peer: PeerParams {
                    private_data: params.private_data,
                    ird: params.ird,
                    ord: params.ord,
                    addr: Some(local),
                },
                client: me.clone(),
                stalled_sends: (provider.stalled_sends.clone(), provider.never_flush.clone()),
                answer,
                client_params: PeerParams {
                    addr: Some(local),
                    ..PeerParams::default()
                },
            };
            tx.send(request)
                .map_err(|_| ConnectError::Io(io::ErrorKind::ConnectionRefused.into()))?;
            let (server, server_params) = answered
                .await
                .map_err(|_| ConnectError::Io(io::ErrorKind::ConnectionAborted.into()))??;
            Ok(MemQp {
                me,
                peer: server,
                peer_params: PeerParams {
                    addr: Some(addr),
                    ..server_params
                },
            })
        })
    }
}

impl ConnectionManager for MemProvider {
    type Qp = MemQp;
    type Route = MemRoute;
    type Listener = MemListener;

    fn resolve<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, Result<MemRoute, ConnectError>> {
        let route = MemRoute {
            provider: self.clone(),
            addr,
        };
        Box::pin(async move { Ok(route) })
    }

    fn listen<'a>(&'a self, addr: SocketAddr) -> BoxFuture<'a, io::Result<MemListener>> {
        Box::pin(async move {
            let addr = if addr.port() == 0 {
                SocketAddr::new(addr.ip(), NEXT_PORT.fetch_add(1, Ordering::Relaxed))
            } else {
                addr
            };
            let (tx, rx) = mpsc::unbounded_channel();
            let mut l = lock(&self.listeners);
            if l.contains_key(&addr) {
                return Err(io::ErrorKind::AddrInUse.into());
            }
            l.insert(addr, tx);
            Ok(MemListener { addr, rx })
        })
    }
}
