//! Async client: XID allocation, many calls in flight on one connection, per-call
//! timeouts, reconnect with retransmission of outstanding calls under the same XID.
//!
//! The client runs over any [`Transport`]: TCP ([`crate::tcp::TcpTransport`]) first,
//! RPC-over-RDMA second. A transport connects and hands back a sender and a receiver
//! of whole RPC messages.
//!
//! One driver task per [`Client`] owns the connection and the table of outstanding
//! calls. A reader task per connection forwards received replies to it. When the
//! connection breaks, the driver reconnects (with exponential backoff) as long as calls
//! are outstanding and sends every one of them again with its original XID: RFC 5531
//! §9 lets the server's duplicate request cache recognise a retransmission by its xid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use xdr::{Decoder, Encode, XdrStream};

use crate::auth::OpaqueAuth;
use crate::message::{
    peek_xid_and_type, AcceptedStatus, CallHeader, HeaderError, MsgType, RejectedReply, ReplyBody,
    ReplyHeader, Xid,
};
use crate::service::prepend;
use crate::transport::Transport;
use crate::transport::{CallFailure, Incoming, RecordReceiver, RecordSender};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Default time a call may take, retransmissions included.
    pub timeout: Duration,
    /// Delay before the first reconnect attempt; doubles up to `max_reconnect_delay`.
    pub reconnect_delay: Duration,
    /// Longest delay between reconnect attempts.
    pub max_reconnect_delay: Duration,
    /// Credential sent with every call.
    pub cred: OpaqueAuth,
    /// Fail the waiting calls at once with [`ClientError::Connect`] when a connection
    /// attempt fails before this client ever connected (connection refused, network
    /// unreachable), instead of retrying until their timeout. For a one-shot caller
    /// (a command-line client, a portmapper lookup), nothing listening there is an
    /// answer, and waiting 30 s for it helps no one. Once connected, a broken
    /// connection is retried as always (a server restart is ridden out); a later call
    /// on a client that failed this way tries to connect again.
    pub fail_if_unreachable: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            timeout: Duration::from_secs(30),
            reconnect_delay: Duration::from_millis(50),
            max_reconnect_delay: Duration::from_secs(5),
            cred: OpaqueAuth::none(),
            fail_if_unreachable: false,
        }
    }
}

/// Why a call did not return results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No reply within the call's timeout.
    #[error("call timed out")]
    Timeout,
    /// The client's driver is gone (the runtime is shutting down).
    #[error("client driver stopped")]
    DriverGone,
    /// The server accepted the call but did not return SUCCESS.
    #[error("call failed: {0:?}")]
    Accepted(AcceptedStatus),
    /// The server rejected the call (RPC_MISMATCH or AUTH_ERROR).
    #[error("call rejected: {0:?}")]
    Rejected(RejectedReply),
    /// The reply header does not decode.
    #[error("malformed reply: {0}")]
    BadReply(#[from] HeaderError),
    /// The transport failed the call (over RPC-over-RDMA: the server answered it with
    /// RDMA_ERROR, its Reply did not match the call's chunks, or the call could not be
    /// sent at all); the transport's typed error is inside.
    #[error("transport: {0}")]
    Transport(CallFailure),
    /// The client could not connect (with [`ClientConfig::fail_if_unreachable`], at
    /// the first connection attempt): the error is the transport's (e.g.
    /// `ConnectionRefused`), shared by every call that was waiting.
    #[error("cannot connect: {0}")]
    Connect(Arc<std::io::Error>),
}

/// Per-call settings for [`Client::call_with`]; `None` takes the client's default.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Time the call may take, retransmissions included.
    pub timeout: Option<Duration>,
    /// Credential of this call (e.g. the AUTH_SYS identity of one user).
    pub cred: Option<OpaqueAuth>,
}

/// A successful reply.
#[derive(Debug)]
pub struct Reply {
    /// Transaction id of the call.
    pub xid: Xid,
    /// The server's verifier.
    pub verf: OpaqueAuth,
    /// The procedure's results, positioned at their first byte.
    pub results: Decoder,
}

/// Where a call's reply (or why it got none) goes.
type Waiter = oneshot::Sender<Result<Bytes, Failed>>;

/// Why the driver ended a call without a reply.
enum Failed {
    /// The transport failed this call alone.
    Call(CallFailure),
    /// The first connection attempt failed ([`ClientConfig::fail_if_unreachable`]).
    Connect(Arc<std::io::Error>),
}

enum Cmd {
    Call {
        xid: Xid,
        msg: XdrStream,
        reply: Waiter,
    },
    Cancel(Xid),
}

/// An RPC client over one connection. Cheap to clone; clones share the connection.
#[derive(Debug, Clone)]
pub struct Client {
    cmds: mpsc::UnboundedSender<Cmd>,
    next_xid: Arc<AtomicU32>,
    config: Arc<ClientConfig>,
}

impl Client {
    /// Starts a client (its driver task) on the current tokio runtime. It connects
    /// lazily, at the first call.
    ///
    /// # Panics
    /// Outside a tokio runtime (like `tokio::spawn`).
    pub fn new<T: Transport>(transport: T, config: ClientConfig) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let driver = Driver {
            transport,
            cmds: rx,
            pending: HashMap::new(),
            sender: None,
            generation: 0,
            backoff: config.reconnect_delay,
            next_connect: Instant::now(),
            config: config.clone(),
        };
        tokio::spawn(driver.run());
        Client {
            cmds: tx,
            next_xid: Arc::new(AtomicU32::new(initial_xid())),
            config: Arc::new(config),
        }
    }

    /// Calls `proc_` of (`prog`, `vers`) with encoded arguments, with the default
    /// timeout.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: XdrStream,
    ) -> Result<Reply, ClientError> {
        self.call_with_timeout(prog, vers, proc_, args, self.config.timeout)
            .await
    }

    /// Like [`Client::call`] with an explicit timeout.
    pub async fn call_with_timeout(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: XdrStream,
        timeout: Duration,
    ) -> Result<Reply, ClientError> {
        let opts = CallOptions {
            timeout: Some(timeout),
            cred: None,
        };
        self.call_with(prog, vers, proc_, args, opts).await
    }

    /// Like [`Client::call`], with a per-call timeout and credential.
    pub async fn call_with(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: XdrStream,
        opts: CallOptions,
    ) -> Result<Reply, ClientError> {
        let timeout = opts.timeout.unwrap_or(self.config.timeout);
        let cred = opts.cred.unwrap_or_else(|| self.config.cred.clone());
        let xid = Xid(self.next_xid.fetch_add(1, Ordering::Relaxed));
        let header = CallHeader::new(xid, prog, vers, proc_, cred);
        let msg = prepend(|enc| header.encode(enc), args);
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Call {
                xid,
                msg,
                reply: tx,
            })
            .map_err(|_| ClientError::DriverGone)?;
        let bytes = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(b))) => b,
            Ok(Ok(Err(Failed::Call(failure)))) => return Err(ClientError::Transport(failure)),
            Ok(Ok(Err(Failed::Connect(e)))) => return Err(ClientError::Connect(e)),
            Ok(Err(_)) => return Err(ClientError::DriverGone),
            Err(_) => {
                let _ = self.cmds.send(Cmd::Cancel(xid));
                tracing::debug!(xid = xid.0, "call timed out");
                return Err(ClientError::Timeout);
            }
        };
        let mut dec = Decoder::new(bytes);
        let reply = ReplyHeader::decode(&mut dec)?;
        match reply.body {
            ReplyBody::Accepted {
                verf,
                status: AcceptedStatus::Success,
            } => Ok(Reply {
                xid,
                verf,
                results: dec,
            }),
            ReplyBody::Accepted { status, .. } => Err(ClientError::Accepted(status)),
            ReplyBody::Denied(r) => Err(ClientError::Rejected(r)),
        }
    }
}

/// A starting XID that differs between processes and runs, so a restarted client does
/// not reuse the xids of its previous life (which a server's DRC may still hold).
fn initial_xid() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

struct Driver<T: Transport> {
    transport: T,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    /// Outstanding calls: the encoded call (kept for retransmission) and the waiter.
    pending: HashMap<Xid, (XdrStream, Waiter)>,
    sender: Option<T::Sender>,
    /// Incremented at each connection, to ignore the end of stale readers.
    generation: u64,
    backoff: Duration,
    next_connect: Instant,
    config: ClientConfig,
}

enum Event {
    Reply(Bytes),
    /// The transport failed this call alone.
    CallFailed(Xid, CallFailure),
    Closed(u64),
}

impl<T: Transport> Driver<T> {
    async fn run(mut self) {
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
        loop {
            let want_connect = self.sender.is_none() && !self.pending.is_empty();
            if want_connect && Instant::now() >= self.next_connect {
                self.connect(&ev_tx).await;
                continue;
            }
            tokio::select! {
                cmd = self.cmds.recv() => match cmd {
                    None => return, // every Client handle is gone
                    Some(Cmd::Call { xid, msg, reply }) => {
                        if self.pending.contains_key(&xid) {
                            // Only after 2^32 calls with one still outstanding.
                            tracing::warn!(xid = xid.0, "xid still outstanding; call dropped");
                            continue;
                        }
                        let ok = match &mut self.sender {
                            Some(s) => s.send(&msg).await.is_ok(),
                            None => true,
                        };
                        self.pending.insert(xid, (msg, reply));
                        if !ok {
                            self.disconnect("send failed");
                        }
                    }
                    Some(Cmd::Cancel(xid)) => {
                        self.pending.remove(&xid);
                    }
                },
                ev = ev_rx.recv() => match ev {
                    Some(Event::Reply(bytes)) => self.reply(bytes),
                    Some(Event::CallFailed(xid, failure)) => {
                        if let Some((_, waiter)) = self.pending.remove(&xid) {
                            let _ = waiter.send(Err(Failed::Call(failure)));
                        }
                    }
                    Some(Event::Closed(g)) if g == self.generation => {
                        self.disconnect("connection closed");
                    }
                    _ => {}
                },
                _ = tokio::time::sleep_until(self.next_connect), if want_connect => {}
            }
        }
    }

    fn reply(&mut self, bytes: Bytes) {
        match peek_xid_and_type(&bytes) {
            Some((xid, MsgType::REPLY)) => match self.pending.remove(&xid) {
                Some((_, waiter)) => {
                    let _ = waiter.send(Ok(bytes));
                }
                None => tracing::debug!(xid = xid.0, "reply to no outstanding call"),
            },
            _ => tracing::debug!(len = bytes.len(), "discarding message that is not a reply"),
        }
    }

    fn disconnect(&mut self, why: &str) {
        if self.sender.take().is_some() {
            tracing::info!(why, outstanding = self.pending.len(), "disconnected");
            self.next_connect = Instant::now();
        }
    }

    async fn connect(&mut self, ev_tx: &mpsc::UnboundedSender<Event>) {
        match self.transport.connect().await {
            Ok((mut sender, mut receiver)) => {
                self.generation += 1;
                self.backoff = self.config.reconnect_delay;
                let generation = self.generation;
                let ev_tx = ev_tx.clone();
                tokio::spawn(async move {
                    loop {
                        match receiver.recv().await {
                            Ok(Some(incoming)) => {
                                let ev = match incoming {
                                    Incoming::Message(msg) => Event::Reply(msg),
                                    Incoming::CallFailed { xid, error } => {
                                        Event::CallFailed(Xid(xid), error)
                                    }
                                };
                                if ev_tx.send(ev).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                tracing::debug!(error = %e, "receive failed");
                                break;
                            }
                        }
                    }
                    let _ = ev_tx.send(Event::Closed(generation));
                });
                // Calls whose caller gave up are not sent again.
                self.pending.retain(|_, (_, waiter)| !waiter.is_closed());
                // Retransmit every outstanding call, oldest xid first, same xid.
                let mut xids: Vec<Xid> = self.pending.keys().copied().collect();
                xids.sort_unstable();
                if generation > 1 {
                    tracing::info!(retransmitting = xids.len(), "reconnected");
                } else {
                    tracing::debug!(outstanding = xids.len(), "connected");
                }
                for xid in xids {
                    let Some((msg, _)) = self.pending.get(&xid) else {
                        continue;
                    };
                    if let Err(e) = sender.send(msg).await {
                        tracing::debug!(error = %e, "retransmission failed");
                        self.next_connect = Instant::now() + self.backoff;
                        return;
                    }
                }
                self.sender = Some(sender);
            }
            Err(e) if self.config.fail_if_unreachable && self.generation == 0 => {
                tracing::debug!(error = %e, calls = self.pending.len(), "connect failed; calls failed");
                let e = Arc::new(e);
                for (_, (_, waiter)) in self.pending.drain() {
                    let _ = waiter.send(Err(Failed::Connect(e.clone())));
                }
                // A later call tries again at once.
                self.next_connect = Instant::now();
            }
            Err(e) => {
                tracing::debug!(error = %e, delay = ?self.backoff, "connect failed");
                self.next_connect = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(self.config.max_reconnect_delay);
            }
        }
    }
}
