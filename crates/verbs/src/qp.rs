//! The connected queue pair: `rdma::QueuePair` over a verbs RC QP whose completion
//! channel fd tokio watches, and whose CM events (DISCONNECTED, DEVICE_REMOVAL) a
//! small task per connection turns into `rdma::QpEvent`s.
//!
//! Completions: drain the CQ; when it is empty, arm it (`ibv_req_notify_cq`) and
//! poll once more (a completion that arrived between the last poll and the arming
//! raises no event); then wait for the channel fd, consume its events and start
//! again.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use rdma::{
    Completion, DisconnectReason, PeerParams, PostError, ProtectionDomain, QpEvent, RecvWr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use tokio::io::unix::AsyncFd;

use crate::sys_conn::{self, event, ChanFd, PostFailure, QpFd, RawSendOp, RawSendWr, RawWc};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct State {
    completions: VecDeque<Completion>,
    events: VecDeque<QpEvent>,
    /// No more events after those queued.
    events_done: bool,
    event_waker: Option<Waker>,
    completion_waker: Option<Waker>,
    /// The connection ended: nothing more can be posted.
    dead: bool,
    /// We called disconnect.
    local_disconnect: bool,
    /// The CQ is armed and its channel fd may fire.
    armed: bool,
}

struct Shared {
    /// The QP, its completion channel fd watched by tokio.
    cq: AsyncFd<QpFd>,
    state: Mutex<State>,
    peer: PeerParams,
    pd: ProtectionDomain,
    /// Send-queue batches posted from a thread of their own (`verbs-post`), for a
    /// device whose `ibv_post_send` does the work itself ([`posts_do_the_work`]);
    /// a batch of Sends alone is posted in place when none is queued ([`sends_only`]).
    offload: Option<Mutex<Offload>>,
    /// Dropped with the QP: stops the CM event task.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Batches waiting for the thread that posts them, in order; `running` while one is
/// at it (at most one per QP, so the send queue keeps the posting order). The thread
/// is started when a batch finds none running and ends when it finds the queue empty.
#[derive(Default)]
struct Offload {
    batches: VecDeque<Vec<SendWr>>,
    running: bool,
}

/// Soft-RoCE (rxe, `RXE_VENDOR_ID` 0xFFFFFF in Linux's `rxe_param.h`): for a userspace
/// QP, `ibv_post_send`'s system call runs the device's whole send-side protocol
/// (`rxe_post_send` -> `rxe_run_task`: cutting a 1 MiB Write into a thousand packets,
/// an ICRC each, and, for a local peer, that peer's receive side too) before it
/// returns. Posted on the connection's task, that work keeps the task from taking
/// the next Calls in; posted from a thread of its own, the two overlap, as knfsd's
/// nfsd threads overlap rxe's tasklet (lab, rxe0, 128 MiB reads by the kernel client:
/// ours/knfsd 0.92x in place, 1.06x so). A hardware device's post is a doorbell write:
/// posted in place.
pub(crate) fn posts_do_the_work(vendor_id: u32) -> bool {
    vendor_id == 0x00FF_FFFF
}

/// Whether every work request of `wrs` is a Send: no RDMA Write or Read to carry,
/// so posting it is little work even where posts do the work ([`posts_do_the_work`]).
fn sends_only(wrs: &[SendWr]) -> bool {
    wrs.iter().all(|w| {
        matches!(
            w.op,
            SendOp::Send
                | SendOp::SendWithSolicitedEvent
                | SendOp::SendWithInvalidate(_)
                | SendOp::SendWithSolicitedEventAndInvalidate(_)
        )
    })
}

/// A connected verbs queue pair (`rdma::QueuePair`).
pub struct VerbsQp {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

impl VerbsQp {
    /// Wraps an established QP; `chan` is the connection's own event channel (the
    /// id's), driven by a task until the QP is dropped.
    pub(crate) fn start(
        qp: sys_conn::Qp,
        chan: AsyncFd<ChanFd>,
        peer: PeerParams,
        pd: ProtectionDomain,
        offload_posts: bool,
    ) -> io::Result<VerbsQp> {
        let cq = sys_conn::watch_qp(qp)?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let shared = Arc::new(Shared {
            cq,
            state: Mutex::new(State {
                armed: true,
                ..State::default()
            }),
            peer,
            pd,
            offload: offload_posts.then(Mutex::default),
            _stop: stop,
        });
        tokio::spawn(cm_events(Arc::downgrade(&shared), chan, stopped));
        Ok(VerbsQp { shared })
    }

    /// Inline data on this QP: the most bytes a Send or RDMA Write may carry inline
    /// (`max_inline_data`; 0 where the device offers none), and how many work
    /// requests went inline so far.
    pub fn inline_data(&self) -> InlineData {
        let (max, posted) = self.shared.qp().inline_data();
        InlineData { max, posted }
    }
}

/// See [`VerbsQp::inline_data`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineData {
    /// The QP's `max_inline_data`.
    pub max: u32,
    /// Work requests posted with `IBV_SEND_INLINE`.
    pub posted: u64,
}

/// The connection's CM events: DISCONNECTED and DEVICE_REMOVAL move the QP to the
/// error state (`rdma_disconnect`: outstanding work is flushed) and become
/// `QpEvent::Disconnected`.
async fn cm_events(
    shared: Weak<Shared>,
    fd: AsyncFd<ChanFd>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let ready = tokio::select! {
            _ = &mut stopped => return,
            r = fd.readable() => r,
        };
        let Ok(mut guard) = ready else { return };
        loop {
            let ev = match fd.get_ref().channel().get_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => {
                    guard.clear_ready();
                    break;
                }
                Err(_) => return,
            };
            let Some(s) = shared.upgrade() else { return };
            let reason = match ev.kind {
                event::DISCONNECTED => {
                    let local = lock(&s.state).local_disconnect;
                    if local {
                        DisconnectReason::Local
                    } else {
                        DisconnectReason::PeerClosed
                    }
                }
                event::DEVICE_REMOVAL => DisconnectReason::Transport(io::ErrorKind::NotConnected),
                _ => continue,
            };
            // Moves the QP to the error state (flushing its work) if the peer or the
            // device ended the connection; harmless after our own disconnect.
            let _ = s.qp().id().disconnect();
            let (ew, cw) = {
                let mut st = lock(&s.state);
                if st.events_done {
                    continue;
                }
                st.dead = true;
                st.events.push_back(QpEvent::Disconnected(reason));
                st.events_done = true;
                (st.event_waker.take(), st.completion_waker.take())
            };
            ew.into_iter().chain(cw).for_each(Waker::wake);
        }
    }
}

fn status(raw: u32) -> WcStatus {
    use crate::ffi::ibv_wc_status as s;
    match raw {
        s::IBV_WC_SUCCESS => WcStatus::Success,
        s::IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        s::IBV_WC_LOC_PROT_ERR | s::IBV_WC_LOC_ACCESS_ERR | s::IBV_WC_MW_BIND_ERR => {
            WcStatus::LocalProtectionError
        }
        s::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        s::IBV_WC_REM_OP_ERR
        | s::IBV_WC_REM_INV_REQ_ERR
        | s::IBV_WC_REM_INV_RD_REQ_ERR
        | s::IBV_WC_REM_ABORT_ERR => WcStatus::RemoteOperationError,
        s::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        _ => WcStatus::FatalError,
    }
}

pub(crate) fn completion(w: &RawWc) -> Completion {
    let st = status(w.status);
    let byte_len = if st == WcStatus::Success {
        w.byte_len as usize
    } else {
        0
    };
    let mut c = Completion::new(w.wr_id, w.opcode, st, byte_len);
    if st == WcStatus::Success && w.opcode == WcOpcode::Recv {
        c.invalidated = w.invalidated.map(rdma::STag);
    }
    c
}

fn post_error(f: PostFailure, dead: bool) -> PostError {
    match f {
        PostFailure::Sge => PostError::LocalProtection,
        PostFailure::Os(_) if dead => PostError::NotConnected,
        PostFailure::Os(e) => match e.raw_os_error() {
            Some(libc::ENOMEM) => PostError::QueueFull,
            Some(libc::EINVAL) => PostError::LocalProtection,
            _ => PostError::NotConnected,
        },
    }
}

impl Shared {
    fn qp(&self) -> &sys_conn::Qp {
        self.cq.get_ref().qp()
    }

    /// Posts `wrs` as one chained list.
    fn post_now(&self, wrs: &[SendWr]) -> Result<(), PostError> {
        let raw: Vec<RawSendWr<'_>> = wrs.iter().filter_map(|w| raw_send(w).ok()).collect();
        self.qp()
            .post_sends(&raw)
            .map_err(|(_, f)| post_error(f, lock(&self.state).dead))
    }

    /// The thread of [`Offload`]: posts the queued batches in order until
    /// none is left. A batch the provider refuses ends the connection; its work
    /// requests not posted, and every later batch, complete as flushed.
    fn post_queued(&self) {
        let Some(off) = &self.offload else { return };
        loop {
            let batch = {
                let mut o = lock(off);
                match o.batches.pop_front() {
                    Some(b) => b,
                    None => {
                        o.running = false;
                        return;
                    }
                }
            };
            let unposted = if lock(&self.state).dead {
                &batch[..]
            } else {
                let raw: Vec<RawSendWr<'_>> =
                    batch.iter().filter_map(|w| raw_send(w).ok()).collect();
                match self.qp().post_sends(&raw) {
                    Ok(()) => &batch[..0],
                    Err((i, _)) => &batch[i..],
                }
            };
            if !unposted.is_empty() {
                self.flush_unposted(unposted);
            }
        }
    }

    /// Completions (flushed) for work requests that never reached the device, and the
    /// connection's end (`rdma_disconnect`: the rest of its work is flushed too).
    fn flush_unposted(&self, wrs: &[SendWr]) {
        let waker = {
            let mut st = lock(&self.state);
            st.dead = true;
            for w in wrs {
                let opcode = match w.op {
                    SendOp::RdmaWrite(_) => WcOpcode::RdmaWrite,
                    SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
                    SendOp::LocalInvalidate(_) => WcOpcode::LocalInvalidate,
                    _ => WcOpcode::Send,
                };
                st.completions
                    .push_back(Completion::new(w.wr_id, opcode, WcStatus::Flushed, 0));
            }
            st.completion_waker.take()
        };
        let _ = self.qp().id().disconnect();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Batches still waiting for the posting thread (their completions are to come).
    fn posts_queued(&self) -> bool {
        self.offload.as_ref().is_some_and(|o| {
            let o = lock(o);
            o.running || !o.batches.is_empty()
        })
    }

    fn drain(&self, st: &mut State) -> bool {
        let mut raw = Vec::new();
        let mut any = false;
        while let Ok(n) = self.qp().poll(&mut raw) {
            st.completions.extend(raw.drain(..).map(|w| completion(&w)));
            any |= n > 0;
            if n < 16 {
                break;
            }
        }
        any
    }
}

/// `wr` in verbs terms.
fn raw_send(wr: &SendWr) -> Result<RawSendWr<'_>, PostError> {
    let sgl: Vec<&rdma::LocalSge> = wr.sgl.iter().collect();
    let (op, sgl) = match &wr.op {
        SendOp::Send | SendOp::SendWithSolicitedEvent => (RawSendOp::Send, sgl),
        SendOp::SendWithInvalidate(t) | SendOp::SendWithSolicitedEventAndInvalidate(t) => {
            (RawSendOp::SendWithInvalidate(t.0), sgl)
        }
        SendOp::RdmaWrite(r) => (
            RawSendOp::RdmaWrite {
                rkey: r.stag.0,
                addr: r.offset,
            },
            sgl,
        ),
        SendOp::RdmaRead { remote, sink } => (
            RawSendOp::RdmaRead {
                rkey: remote.stag.0,
                addr: remote.offset,
            },
            vec![sink],
        ),
        SendOp::LocalInvalidate(t) => (RawSendOp::LocalInvalidate(t.0), Vec::new()),
    };
    if sgl.iter().map(|s| s.len as u64).sum::<u64>() > u64::from(u32::MAX) {
        return Err(PostError::TooLong);
    }
    Ok(RawSendWr {
        wr_id: wr.wr_id,
        op,
        sgl,
    })
}

impl rdma::QueuePair for VerbsQp {
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.post_send_list(vec![wr])
    }

    /// One `ibv_post_send` of the chained list; RDMA Writes but the last unsignaled
    /// (`sys_conn` invariant 8). On a device whose post does the work
    /// ([`posts_do_the_work`]), from the QP's posting thread: a failure there ends the
    /// connection, and the work requests not posted complete as flushed.
    fn post_send_list(&self, mut wrs: Vec<SendWr>) -> Result<(), PostError> {
        let s = &self.shared;
        if lock(&s.state).dead {
            return Err(PostError::NotConnected);
        }
        // A work request that cannot be expressed ends the list there: those before
        // it are posted, as the trait says.
        let refused = wrs
            .iter()
            .enumerate()
            .find_map(|(i, w)| raw_send(w).err().map(|e| (i, e)));
        if let Some((i, _)) = refused {
            wrs.truncate(i);
        }
        let refused = refused.map_or(Ok(()), |(_, e)| Err(e));
        if let Some(off) = &s.offload {
            if !wrs.is_empty() {
                let mut o = lock(off);
                if !o.running && o.batches.is_empty() && sends_only(&wrs) {
                    // Sends alone (a Reply without chunks, as every metadata call's)
                    // are little work even for rxe: posted in place, under the lock
                    // so that no batch is queued meanwhile (the posting order holds),
                    // with no thread to start and no hand-off.
                    s.post_now(&wrs)?;
                    return refused;
                }
                o.batches.push_back(wrs);
                if !o.running {
                    // A thread of its own: posting from tokio's blocking pool stalled
                    // the first READ Reply in the lab (its connection then ended with
                    // its work flushed; not understood), a thread of its own did not.
                    let shared = s.clone();
                    let spawned = std::thread::Builder::new()
                        .name("verbs-post".into())
                        .spawn(move || shared.post_queued());
                    match spawned {
                        Ok(_) => o.running = true,
                        Err(_) => {
                            let wrs = o.batches.pop_back().unwrap_or_default();
                            drop(o);
                            s.post_now(&wrs)?;
                        }
                    }
                }
            }
            return refused;
        }
        s.post_now(&wrs)?;
        refused
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let s = &self.shared;
        if lock(&s.state).dead {
            return Err(PostError::NotConnected);
        }
        let sgl: Vec<&rdma::LocalSge> = wr.sgl.iter().collect();
        s.qp()
            .post_recv(wr.wr_id, &sgl)
            .map_err(|f| post_error(f, lock(&s.state).dead))
    }

    fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Option<Completion>> {
        let s = &self.shared;
        loop {
            {
                let mut st = lock(&s.state);
                if let Some(c) = st.completions.pop_front() {
                    return Poll::Ready(Some(c));
                }
                if s.drain(&mut st) {
                    continue;
                }
                if st.dead && s.qp().outstanding() == 0 && !s.posts_queued() {
                    return Poll::Ready(None);
                }
                if !st.armed {
                    if s.qp().req_notify().is_err() {
                        st.dead = true;
                        continue;
                    }
                    st.armed = true;
                    // Poll again: closes the race with a completion that came
                    // before the arming.
                    continue;
                }
                st.completion_waker = Some(cx.waker().clone());
            }
            match s.cq.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => {
                    let mut st = lock(&s.state);
                    st.dead = true;
                    if st.completions.is_empty() {
                        return Poll::Ready(None);
                    }
                }
                Poll::Ready(Ok(mut guard)) => match s.qp().take_cq_events() {
                    Ok(true) => lock(&s.state).armed = false,
                    Ok(false) => guard.clear_ready(),
                    Err(_) => {
                        guard.clear_ready();
                        lock(&s.state).armed = false;
                    }
                },
            }
        }
    }

    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<QpEvent>> {
        let mut st = lock(&self.shared.state);
        if let Some(e) = st.events.pop_front() {
            return Poll::Ready(Some(e));
        }
        if st.events_done {
            return Poll::Ready(None);
        }
        st.event_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn disconnect(&self) {
        let s = &self.shared;
        lock(&s.state).local_disconnect = true;
        // The DISCONNECTED event that follows ends the connection (cm_events).
        let _ = s.qp().id().disconnect();
    }

    fn peer(&self) -> &PeerParams {
        &self.shared.peer
    }

    fn pd(&self) -> &ProtectionDomain {
        &self.shared.pd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::ibv_wc_status as s;

    fn raw(status: u32, opcode: WcOpcode, inv: Option<u32>) -> RawWc {
        RawWc {
            wr_id: 7,
            opcode,
            status,
            byte_len: 100,
            invalidated: inv,
        }
    }

    #[test]
    fn only_batches_of_sends_are_posted_in_place() {
        let wr = |op| SendWr {
            wr_id: 1,
            op,
            sgl: Vec::new(),
        };
        let write = || {
            wr(SendOp::RdmaWrite(rdma::RemoteAddr {
                stag: rdma::STag(1),
                offset: 0,
            }))
        };
        assert!(sends_only(&[wr(SendOp::Send)]));
        assert!(sends_only(&[
            wr(SendOp::SendWithInvalidate(rdma::STag(9))),
            wr(SendOp::SendWithSolicitedEvent),
        ]));
        // A Reply with a Write chunk: the Writes carry the data.
        assert!(!sends_only(&[write(), wr(SendOp::Send)]));
        assert!(!sends_only(&[wr(SendOp::LocalInvalidate(rdma::STag(9)))]));
    }

    #[test]
    fn work_completions_map_to_the_api() {
        let c = completion(&raw(s::IBV_WC_SUCCESS, WcOpcode::Recv, Some(0x1234)));
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.byte_len, 100);
        assert_eq!(c.invalidated, Some(rdma::STag(0x1234)));
        let c = completion(&raw(s::IBV_WC_WR_FLUSH_ERR, WcOpcode::Send, None));
        assert_eq!((c.status, c.byte_len, c.wr_id), (WcStatus::Flushed, 0, 7));
        let c = completion(&raw(s::IBV_WC_SUCCESS, WcOpcode::LocalInvalidate, None));
        assert_eq!(c.opcode, WcOpcode::LocalInvalidate);
        assert_eq!(
            status(s::IBV_WC_REM_ACCESS_ERR),
            WcStatus::RemoteAccessError
        );
        assert_eq!(
            status(s::IBV_WC_LOC_PROT_ERR),
            WcStatus::LocalProtectionError
        );
        assert_eq!(
            status(s::IBV_WC_REM_INV_REQ_ERR),
            WcStatus::RemoteOperationError
        );
        assert_eq!(status(s::IBV_WC_LOC_LEN_ERR), WcStatus::LocalLengthError);
        assert_eq!(status(s::IBV_WC_RETRY_EXC_ERR), WcStatus::FatalError);
        assert_eq!(status(9999), WcStatus::FatalError);
    }

    #[test]
    fn post_failures_map_to_post_errors() {
        let os = |e| PostFailure::Os(io::Error::from_raw_os_error(e));
        assert_eq!(post_error(os(libc::ENOMEM), false), PostError::QueueFull);
        assert_eq!(post_error(os(libc::ENOMEM), true), PostError::NotConnected);
        assert_eq!(
            post_error(PostFailure::Sge, false),
            PostError::LocalProtection
        );
    }
}
