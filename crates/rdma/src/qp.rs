//! The queue-pair trait every provider implements.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::cm::{PeerParams, QpEvent};
use crate::mr::ProtectionDomain;
use crate::wr::{Completion, PostError, RecvWr, SendWr};

/// A connected queue pair with its completion queue.
///
/// Object safe and runtime neutral. Completions of one queue pair are delivered in
/// the order the provider produced them; send-queue completions are in posting order.
pub trait QueuePair: Send + Sync {
    /// Posts to the send queue.
    fn post_send(&self, wr: SendWr) -> Result<(), PostError>;

    /// Posts `wrs` to the send queue, in order, as one batch: a provider that rings a
    /// doorbell per post (a verbs device; on rxe and siw a system call) rings it once,
    /// and may leave RDMA Writes other than the last unsignaled, giving each its
    /// completion when a later work request completes. Every work request still gets
    /// exactly one completion, in posting order. On an error, the work requests before
    /// the failing one were posted, it and those after it were not.
    fn post_send_list(&self, wrs: Vec<SendWr>) -> Result<(), PostError> {
        wrs.into_iter().try_for_each(|wr| self.post_send(wr))
    }

    /// Posts to the receive queue.
    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError>;

    /// Next completion: `Ready(Some)`, `Ready(None)` once the queue pair is dead and
    /// every completion (including flushes) was delivered, or `Pending`.
    fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Option<Completion>>;

    /// Next asynchronous event (`Ready(None)` after the last one).
    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<QpEvent>>;

    /// Starts an orderly disconnect: queued work is sent first, then the stream closes.
    fn disconnect(&self);

    /// What the peer offered at setup (private data, IRD/ORD).
    fn peer(&self) -> &PeerParams;

    /// The protection domain remote accesses are checked against.
    fn pd(&self) -> &ProtectionDomain;
}

/// Future of [`QueuePairExt::completion`].
pub struct CompletionFuture<'a, Q: ?Sized> {
    qp: &'a Q,
}

impl<Q: QueuePair + ?Sized> Future for CompletionFuture<'_, Q> {
    type Output = Option<Completion>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.qp.poll_completion(cx)
    }
}

/// Future of [`QueuePairExt::event`].
pub struct EventFuture<'a, Q: ?Sized> {
    qp: &'a Q,
}

impl<Q: QueuePair + ?Sized> Future for EventFuture<'_, Q> {
    type Output = Option<QpEvent>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.qp.poll_event(cx)
    }
}

/// Async helpers over [`QueuePair`].
pub trait QueuePairExt: QueuePair {
    /// Waits for the next completion.
    fn completion(&self) -> CompletionFuture<'_, Self> {
        CompletionFuture { qp: self }
    }

    /// Waits for the next event.
    fn event(&self) -> EventFuture<'_, Self> {
        EventFuture { qp: self }
    }
}

impl<Q: QueuePair + ?Sized> QueuePairExt for Q {}
