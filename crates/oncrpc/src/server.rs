//! Async TCP server: accepts connections, reads records (RFC 5531 §11), runs calls
//! concurrently through the [`Dispatcher`], writes replies as they complete (possibly
//! out of order; RFC 5531 §9: the xid is how a client matches them), and shuts down
//! gracefully: no new calls are read, calls in flight finish and their replies are
//! sent, then connections close. Optionally registers its programs with rpcbind on
//! start and unregisters them on shutdown.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use xdr::XdrStream;

use crate::record::RecordDecoder;
use crate::rpcbind::{Registrar, NETID_TCP};
use crate::service::{poll_once, Dispatcher, Peer, Protocol};
use crate::tcp::call_data::{self, CallData, Pipes, MAX_SPLICED, MIN_SPLICED};
use crate::tcp::{
    close_write, fill, invalid_data, read_into_reused, read_more, reusable, write_replies,
    RecordBuffers, DEFAULT_MAX_FRAGMENT, DEFAULT_MAX_RECORD, READ_CHUNK,
};

/// [`ServerConfig::record_buffers`] gives its idle buffers back, and
/// [`ServerConfig::call_data`] closes its idle pipes, once none was taken for this
/// long (checked as often).
pub const RELEASE_PERIOD: Duration = Duration::from_secs(10);

/// Most replies one write of the connection's writer takes from its queue.
const MAX_BATCH: usize = 32;

/// Memory held for a server until dropped (a charge to its budget).
pub type Held = Box<dyn std::any::Any + Send + Sync>;

/// Default [`ServerConfig::max_large_in_flight`]: as many 1 MiB records as the
/// record buffers keep idle.
pub const DEFAULT_MAX_LARGE_IN_FLIGHT: usize = 16;

/// The memory budget a server's TCP connections are charged to (nfsd: its one
/// `--max-memory` budget, issue 16), so that call records received and in service
/// never take more than the budget. With one ([`ServerConfig::memory`]):
///
/// - each connection is charged [`CONNECTION_BYTES`] (its read buffer) at accept, or
///   closed at once if that does not fit;
/// - a call record is charged before its body is read into memory of its own (from
///   its first fragment header: its length, or the maximum record size if more
///   fragments follow): the connection stops reading, and TCP's flow control holds the
///   client back, until the charge is granted; a record that shares the connection's
///   read buffer is charged once complete, and copied out of it if small, so that
///   calls in service never keep read buffers alive uncharged. Each charge lasts
///   until the call's reply is queued for the writer, or sent by the reader's task
///   itself.
pub trait ConnectionMemory: Send + Sync + fmt::Debug {
    /// Charges a new connection from `peer` `bytes` now, without waiting; `None`
    /// refuses it.
    fn admit(&self, peer: SocketAddr, bytes: u64) -> Option<Held>;

    /// Charges `bytes`, in line with the budget's other waiting charges: at once
    /// when they fit and no one waits ([`Charging::Now`]), else a future that resolves
    /// once charged; `None` if they can never fit (more than the whole budget).
    fn charge(&self, bytes: u64) -> Charging;
}

/// A charge to a [`ConnectionMemory`]: most are granted at once, without a future
/// to allocate and poll; the rest wait their turn.
pub enum Charging {
    /// Decided at once: the charge, or `None` if it can never fit.
    Now(Option<Held>),
    /// Waiting in line until charged (or `None`, as for `Now`).
    Later(Pin<Box<dyn Future<Output = Option<Held>> + Send>>),
}

impl Charging {
    /// The charge, once decided.
    pub async fn granted(self) -> Option<Held> {
        match self {
            Charging::Now(held) => held,
            Charging::Later(waiting) => waiting.await,
        }
    }
}

/// What a TCP connection is charged at accept ([`ConnectionMemory`]): its read
/// buffer.
pub const CONNECTION_BYTES: u64 = READ_CHUNK as u64;

/// Records up to this long are copied out of the connection's read buffer when a
/// budget is charged ([`ConnectionMemory`]): a small call then holds its own bytes
/// rather than the whole buffer it arrived in.
const SMALL_RECORD: usize = 8 * 1024;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest call record accepted; a peer announcing more loses its connection.
    pub max_record: usize,
    /// Largest fragment in replies.
    pub max_fragment: usize,
    /// Calls served concurrently per connection; further calls wait to be read.
    pub max_in_flight: usize,
    /// Of those, calls of at least [`crate::tcp::MIN_REUSED_RECORD`] bytes (NFS WRITE
    /// data) served concurrently per connection; a further one waits to be read, its
    /// client held by TCP's flow control. Each such call is read into a buffer of
    /// `record_buffers`, reused once it is served: with at most as many in service
    /// as the pool keeps idle ([`crate::tcp::DEFAULT_MAX_IDLE_BYTES`], 16 records of
    /// 1 MiB), a stream of WRITEs runs on reused memory instead of a fresh megabyte
    /// for each, which the kernel zeroes page by page as the socket read faults it
    /// in (the Linux client sends a `dd`'s 64 MiB as 64 WRITEs at once; in the lab
    /// guest that zeroing was a third of the server's page clearing, the rest the
    /// page cache's). Their file work is serialised by the file's lock anyway. A
    /// large call must therefore never wait for a later call of its own connection
    /// (none does: a WRITE never waits for a backchannel reply; NFSv4.1 delegation
    /// recalls must keep it so), or the connection would stop.
    pub max_large_in_flight: usize,
    /// Register with this rpcbind on start, unregister on shutdown.
    pub rpcbind: Option<Registrar>,
    /// How long shutdown waits for calls in flight; after it, connections are
    /// dropped with their calls. `None` waits as long as the calls take.
    pub shutdown_grace: Option<Duration>,
    /// The memory budget connections and call records are charged to; `None`:
    /// nothing is charged (bounded only per connection, by `max_record` ×
    /// `max_in_flight`).
    pub memory: Option<Arc<dyn ConnectionMemory>>,
    /// How replies' file ranges are sent.
    pub file_data: crate::tcp::FileData,
    /// Memory reused for large call records (WRITE data), shared by the server's
    /// connections; released after 10 s without one ([`RELEASE_PERIOD`]).
    pub record_buffers: RecordBuffers,
    /// How a large call's bulk data item (NFS WRITE data, as its service names it:
    /// [`crate::Service::call_data_item`]) is received: `Some`, spliced from the socket
    /// into a pipe of this pool and handed to the service apart
    /// ([`crate::tcp::call_data`]: one copy fewer per byte); `None`, read into memory
    /// with the rest of the call.
    pub call_data: Option<Pipes>,
    /// Where the server counts its connections, calls and bytes (shared by every
    /// server given the same one).
    pub stats: Arc<TcpStats>,
}

/// What a TCP server's connections counted: connections, call records read and
/// replies produced, with their bytes (record marks left out).
#[derive(Debug, Default)]
pub struct TcpStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections open now (a gauge).
    pub open: AtomicU64,
    /// Call records read.
    pub calls: AtomicU64,
    /// Their bytes.
    pub call_bytes: AtomicU64,
    /// Replies produced (DRC answers included; a call answered by none has none).
    pub replies: AtomicU64,
    /// Their bytes (READ data sent from a file included).
    pub reply_bytes: AtomicU64,
    /// Calls whose bulk data item was received into pipes ([`ServerConfig::call_data`]).
    pub spliced_calls: AtomicU64,
    /// Bytes of those items (also counted in `call_bytes`).
    pub spliced_bytes: AtomicU64,
    /// Calls whose bulk data item came apart from the call but into memory: the
    /// pipes filled (tiny segments) or none could be opened ([`crate::tcp::call_data`]).
    pub unspliced_items: AtomicU64,
}

/// Counts an open connection in [`TcpStats::open`] until dropped.
struct OpenConnection(Arc<TcpStats>);

impl OpenConnection {
    fn new(stats: &Arc<TcpStats>) -> OpenConnection {
        stats.connections.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(stats.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_record: DEFAULT_MAX_RECORD,
            max_fragment: DEFAULT_MAX_FRAGMENT,
            max_in_flight: 128,
            max_large_in_flight: DEFAULT_MAX_LARGE_IN_FLIGHT,
            rpcbind: None,
            shutdown_grace: Some(Duration::from_secs(30)),
            memory: None,
            file_data: crate::tcp::FileData::default(),
            record_buffers: RecordBuffers::default(),
            call_data: Some(Pipes::default()),
            stats: Arc::default(),
        }
    }
}

/// A TCP ONC RPC server.
#[derive(Debug)]
pub struct Server {
    dispatcher: Arc<Dispatcher>,
    config: ServerConfig,
}

impl Server {
    /// A server for the programs registered on `dispatcher`.
    pub fn new(dispatcher: Dispatcher, config: ServerConfig) -> Self {
        Server {
            dispatcher: Arc::new(dispatcher),
            config,
        }
    }

    /// Serves on `listener` until `shutdown` completes, then finishes the calls in
    /// flight, closes every connection and returns.
    ///
    /// With [`ServerConfig::rpcbind`] set, registers every (program, version) for
    /// netid "tcp" at the listener's port first (an error if rpcbind refuses), and
    /// unregisters them at the end.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let (ready, _) = oneshot::channel();
        self.serve_with_ready(listener, shutdown, ready).await
    }

    /// Like [`Server::serve`], and sends on `ready` once registered with rpcbind
    /// and accepting.
    pub async fn serve_with_ready(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        ready: oneshot::Sender<()>,
    ) -> io::Result<()> {
        let local = listener.local_addr()?;
        let registrations = self.dispatcher.registrations();
        if let Some(r) = &self.config.rpcbind {
            r.set_all(&registrations, NETID_TCP, local).await?;
        }
        tracing::info!(%local, programs = ?registrations, "serving");
        let _ = ready.send(());
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        let _release = AbortOnDrop(tokio::spawn({
            let pool = self.config.record_buffers.clone();
            let pipes = self.config.call_data.clone();
            async move {
                let mut tick = tokio::time::interval(RELEASE_PERIOD);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    pool.release_if_unused_for(RELEASE_PERIOD);
                    if let Some(pipes) = &pipes {
                        pipes.release_if_unused_for(RELEASE_PERIOD);
                    }
                }
            }
        }));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        conns.spawn(connection(
                            stream,
                            peer,
                            self.dispatcher.clone(),
                            self.config.clone(),
                            stop_rx.clone(),
                        ));
                    }
                    Err(e) => tracing::warn!(error = %e, "accept failed"),
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        tracing::info!(connections = conns.len(), "shutting down");
        drop(listener);
        let _ = stop_tx.send(true);
        let drain = async { while conns.join_next().await.is_some() {} };
        match self.config.shutdown_grace {
            None => drain.await,
            Some(grace) => {
                if tokio::time::timeout(grace, drain).await.is_err() {
                    tracing::warn!(
                        ?grace,
                        "calls still in flight after the grace period; dropped"
                    );
                    conns.abort_all();
                    while conns.join_next().await.is_some() {}
                }
            }
        }
        if let Some(r) = &self.config.rpcbind {
            r.unset_all(&registrations, NETID_TCP, local).await?;
        }
        tracing::info!("shut down");
        Ok(())
    }
}

/// Aborts a task when dropped, so that aborting a connection aborts its writer and
/// its handlers.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    config: ServerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let _connection_memory = match &config.memory {
        None => None,
        Some(m) => match m.admit(peer, CONNECTION_BYTES) {
            Some(held) => Some(held),
            // Refused (and logged by the budget's owner): the client sees the
            // connection closed and retries.
            None => return,
        },
    };
    tracing::debug!(%peer, "connection opened");
    let _open = OpenConnection::new(&config.stats);
    let stats = config.stats.clone();
    let (mut rd, wr) = stream.into_split();
    // The connection's write half. Its holder writes whole replies (tcp::write_replies:
    // one `sendmsg` for replies in memory; READ data from the page cache by
    // `sendfile`), so records never interleave.
    let wr = Arc::new(tokio::sync::Mutex::new(wr));
    let max_in_flight = config.max_in_flight.max(1);
    let (tx, mut rx) = mpsc::channel::<XdrStream>(max_in_flight);
    let max_fragment = config.max_fragment;
    let file_data = config.file_data;
    // The writer of the replies of calls that ran as tasks of their own: in completion
    // order, those already queued together in one write.
    let writer = AbortOnDrop(tokio::spawn({
        let wr = wr.clone();
        async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let w = wr.lock().await;
                if let Err(e) = write_replies(w.as_ref(), &batch, max_fragment, file_data).await {
                    tracing::debug!(%peer, error = %e, "write failed");
                    return;
                }
                batch.clear();
            }
            close_write(&mut *wr.lock().await).await;
        }
    }));
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let large = Arc::new(Semaphore::new(config.max_large_in_flight.max(1)));
    let mut calls = JoinSet::new();
    let mut dec = RecordDecoder::new(config.max_record);
    let mut buf = BytesMut::new();
    // Shutdown is seen while the connection waits for a call (one future for the whole
    // connection, polled only when no call is ready: polling it before each call cost
    // 350 of a GETATTR's 13,200 instructions, for its waker's lock), and after each
    // call read (an atomic load): a call read then is dropped, as one still in the
    // socket is.
    let shutting_down = stop.clone();
    let stopped = stop.wait_for(|s| *s);
    tokio::pin!(stopped);
    loop {
        let record = tokio::select! {
            biased;
            r = read_call(&mut rd, &mut dec, &mut buf, &config, &dispatcher, &large) => r,
            _ = &mut stopped => break,
        };
        if shutting_down.has_changed().unwrap_or(true) {
            break;
        }
        match record {
            Ok(Some((call, data, held))) => {
                let apart = data.as_ref().map_or(0, |d| d.len() as u64);
                stats.calls.fetch_add(1, Ordering::Relaxed);
                stats
                    .call_bytes
                    .fetch_add(call.len() as u64 + apart, Ordering::Relaxed);
                match data.as_ref().map(|d| d.spliced()) {
                    Some(true) => {
                        stats.spliced_calls.fetch_add(1, Ordering::Relaxed);
                        stats.spliced_bytes.fetch_add(apart, Ordering::Relaxed);
                    }
                    Some(false) => {
                        stats.unspliced_items.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {}
                }
                let mut call = Box::pin(serve_call(
                    dispatcher.clone(),
                    call,
                    data,
                    peer,
                    stats.clone(),
                ));
                // With no other call of this connection in service, the call's first
                // poll runs here, and most calls (NULL, the metadata calls nfsd runs
                // inline, errors) end in it: no task to spawn, schedule and join
                // (about 3,000 of a GETATTR's 21,000 instructions, valgrind). Its
                // reply then leaves from here too when no other write is under way:
                // no hand-off to the writer task. It takes no permit: nothing else is
                // in service meanwhile. A call that waits, or one that arrives while
                // others are in service, runs as a task of its own, so that a client's
                // concurrent calls still spread over the workers.
                while calls.try_join_next().is_some() {}
                if calls.is_empty() {
                    if let Poll::Ready(reply) = poll_once(call.as_mut()).await {
                        let sent = match (reply, wr.try_lock()) {
                            (None, _) => Ok(()),
                            (Some(reply), Ok(w)) => {
                                let replies = std::slice::from_ref(&reply);
                                write_replies(w.as_ref(), replies, max_fragment, file_data).await
                            }
                            (Some(reply), Err(_)) => {
                                let _ = tx.send(reply).await;
                                Ok(())
                            }
                        };
                        drop(held);
                        if let Err(e) = sent {
                            tracing::debug!(%peer, error = %e, "write failed");
                            return;
                        }
                        continue;
                    }
                }
                // Every call of this connection in service holds a permit, until its
                // reply is queued; with none left, no more calls are read.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let tx = tx.clone();
                calls.spawn(async move {
                    if let Some(reply) = call.await {
                        let _ = tx.send(reply).await;
                    }
                    drop((permit, held));
                });
            }
            Ok(None) => break,
            Err(e) => {
                // RFC 5531 §11 offers no resynchronisation: a broken record stream
                // (e.g. a record over our maximum) closes the connection at once.
                // A reset from a client that simply went away is routine (libnfs
                // closes that way): log it quietly; anything else is worth a warning.
                if e.kind() == std::io::ErrorKind::ConnectionReset {
                    tracing::debug!(%peer, error = %e, "connection reset by peer");
                } else {
                    tracing::warn!(%peer, error = %e, "closing connection");
                }
                calls.abort_all();
                return;
            }
        }
    }
    // Graceful end: finish the calls in flight, send their replies, then FIN.
    while calls.join_next().await.is_some() {}
    drop(tx);
    let mut writer = writer;
    let _ = (&mut writer.0).await;
    tracing::debug!(%peer, "connection closed");
}

/// Runs one call through `dispatcher` (which answers a handler's panic with
/// SYSTEM_ERR): its reply, if it has one.
async fn serve_call(
    dispatcher: Arc<Dispatcher>,
    call: Bytes,
    data: Option<CallData>,
    peer: SocketAddr,
    stats: Arc<TcpStats>,
) -> Option<XdrStream> {
    let from = Peer {
        addr: peer,
        protocol: Protocol::Tcp,
    };
    let reply = dispatcher.dispatch_call(call, data, Some(from)).await;
    if let Some(r) = &reply {
        let len = r.inline.len() + r.ddp.iter().map(|d| d.padded_len()).sum::<usize>();
        stats.replies.fetch_add(1, Ordering::Relaxed);
        stats.reply_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }
    reply
}

/// A call record read, its bulk data item if that was received apart, and the
/// memory charged for it.
type CallRead = (Bytes, Option<CallData>, Option<Held>);

/// Reads one call record from `r` (as [`crate::tcp::read_record`]), charging it to
/// `config.memory` if there is one ([`ConnectionMemory`]); the charge comes back with
/// the record. A large record's bulk data item may come apart ([`read_large_call`]).
/// `Ok(None)` at a clean end of stream.
async fn read_call(
    r: &mut tokio::net::tcp::OwnedReadHalf,
    dec: &mut RecordDecoder,
    buf: &mut BytesMut,
    config: &ServerConfig,
    dispatcher: &Dispatcher,
    large: &Arc<Semaphore>,
) -> io::Result<Option<CallRead>> {
    let memory = config.memory.as_deref();
    let reuse = &config.record_buffers;
    let too_large = || {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            "call record larger than the server's whole memory budget",
        )
    };
    let mut held = None;
    loop {
        if let Some(record) = dec.decode(buf).map_err(invalid_data)? {
            let Some(memory) = memory else {
                return Ok(Some((record, None, None)));
            };
            if record.len() <= SMALL_RECORD {
                // Charged before its copy is allocated (besides a pre-charge, when
                // its header came alone).
                let charge = memory
                    .charge(record.len() as u64)
                    .granted()
                    .await
                    .ok_or_else(too_large)?;
                drop(held);
                // COPY: a small call (at most SMALL_RECORD bytes) out of the read
                // buffer, which it would otherwise keep alive while in service.
                return Ok(Some((Bytes::copy_from_slice(&record), None, Some(charge))));
            }
            let charge = match held {
                Some(charge) => charge,
                // It came whole with an earlier read, in the read buffer, which it
                // keeps: charged for that buffer at least, before the next one.
                None => memory
                    .charge(record.len().max(READ_CHUNK) as u64)
                    .granted()
                    .await
                    .ok_or_else(too_large)?,
            };
            return Ok(Some((record, None, Some(charge))));
        }
        if let (Some(memory), None) = (memory, &held) {
            // The body is about to be read into memory of its own
            // (`read_record` reserves the rest of the fragment): charge first.
            if let Some(bound) = dec.record_bound().filter(|&b| b > SMALL_RECORD) {
                let bytes = bound.max(READ_CHUNK) as u64;
                held = Some(memory.charge(bytes).granted().await.ok_or_else(too_large)?);
            }
        }
        if let Some((pool, len)) = reusable(dec, buf, Some(reuse)) {
            // Charged above for its whole length (`record_bound`); read once fewer
            // than `max_large_in_flight` large calls are in service, which the permit,
            // held with the call, counts.
            let permit = large
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| io::Error::other("connection ended"))?;
            let pipes = config.call_data.as_ref();
            let (record, data) = read_large_call(r, dec, buf, pool, len, pipes, dispatcher).await?;
            return Ok(Some((record, data, Some(Box::new((held, permit)) as Held))));
        }
        if read_more(r, dec, buf).await? == 0 {
            return Ok(dec
                .decode_eof(buf)
                .map_err(invalid_data)?
                .map(|record| (record, None, held)));
        }
    }
}

/// How much of a large call is read before its service is asked where its bulk data
/// item lies: the RPC header with the largest AUTH_SYS credential and verifier and
/// an NFSv4.1 COMPOUND's SEQUENCE, PUTFH and WRITE fit with room to spare. An item
/// beyond it is read with the call.
const CALL_HEAD_BYTES: usize = 2048;

/// Reads the rest of a large call record (`len` bytes, a lone fragment) into a buffer
/// of `pool`; with `pipes`, the bulk data item its service names
/// ([`Dispatcher::call_data_item`]) goes into a pipe instead ([`call_data`]), and
/// the record comes without it (its data and XDR padding taken out, its length word
/// kept: [`xdr::Decoder::with_item_elided`] decodes it).
async fn read_large_call(
    r: &mut tokio::net::tcp::OwnedReadHalf,
    dec: &mut RecordDecoder,
    buf: &mut BytesMut,
    pool: &RecordBuffers,
    len: usize,
    pipes: Option<&Pipes>,
    dispatcher: &Dispatcher,
) -> io::Result<(Bytes, Option<CallData>)> {
    let Some(pipes) = pipes else {
        return Ok((read_into_reused(r, dec, buf, pool, len).await?, None));
    };
    let mut body = pool.take(len);
    dec.take_lone_fragment(buf, body.vec_mut());
    fill(r, &mut body, len.min(CALL_HEAD_BYTES)).await?;
    let head = &body.as_ref()[..body.len().min(CALL_HEAD_BYTES)];
    let item = dispatcher.call_data_item(head).filter(|i| {
        let end = i.offset.checked_add(xdr::padded_len(i.len));
        (MIN_SPLICED..=MAX_SPLICED).contains(&i.len) && end.is_some_and(|end| end <= len)
    });
    let Some(item) = item else {
        fill(r, &mut body, len).await?;
        return Ok((body.freeze(), None));
    };
    fill(r, &mut body, item.offset).await?;
    let item_end = body.len().min(item.offset + item.len);
    let first = &body.as_ref()[item.offset..item_end];
    let data = call_data::receive(r.as_ref(), pipes, first, item).await?;
    // The record without the item's data and padding: what of the data came with
    // the header goes, then the rest is read, and the padding after the data goes.
    body.vec_mut().drain(item.offset..item_end);
    fill(r, &mut body, len - item.len).await?;
    let pad = xdr::padded_len(item.len) - item.len;
    body.vec_mut().drain(item.offset..item.offset + pad);
    // COPY: the call without its data is small (a WRITE's header and the operations
    // after it); its record buffer goes back to the pool now rather than being held,
    // nearly empty, beside the data in pipes while the call is served.
    Ok((Bytes::copy_from_slice(body.as_ref()), Some(data)))
}
