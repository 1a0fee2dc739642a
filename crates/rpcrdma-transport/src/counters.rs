//! Per-connection counters, readable while the connection runs and logged when it
//! closes, in the spirit of the `xprt: rdma ...` line of Linux's
//! `/proc/self/mountstats`.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident = $text:literal,)*) => {
        /// One counter of a connection.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Counter {
            $($(#[$doc])* $name,)*
        }

        impl Counter {
            /// Every counter, in display order.
            pub const ALL: &'static [Counter] = &[$(Counter::$name,)*];

            /// The name used in logs.
            pub fn name(self) -> &'static str {
                match self {
                    $(Counter::$name => $text,)*
                }
            }
        }
    };
}

counters! {
    /// Calls sent (requester) or received (responder); retransmissions included.
    Calls = "calls",
    /// Replies received (requester) or sent (responder).
    Replies = "replies",
    /// Calls sent or received Short (§4.5.1).
    ShortCalls = "short_calls",
    /// Calls with Read chunks for DDP-eligible arguments (§4.5.2).
    ReadChunks = "read_chunks",
    /// Calls sent as a Position Zero Read chunk (Long Call, §4.5.3).
    PositionZeroReadChunks = "pos0_read_chunks",
    /// Write chunks provided (requester) or filled (responder).
    WriteChunks = "write_chunks",
    /// Reply chunks provided (requester) or used (responder).
    ReplyChunks = "reply_chunks",
    /// Sends posted.
    Sends = "sends",
    /// Sends whose header went as caller bytes because every send buffer was busy.
    SendPoolFallbacks = "send_pool_fallbacks",
    /// Bytes in Sends posted.
    SendBytes = "send_bytes",
    /// Receives completed.
    Recvs = "recvs",
    /// Bytes received by Receives.
    RecvBytes = "recv_bytes",
    /// RDMA Reads posted (responder).
    RdmaReads = "rdma_reads",
    /// Bytes pulled by RDMA Read.
    RdmaReadBytes = "rdma_read_bytes",
    /// Calls whose RDMA Reads waited for the per-connection read budget (responder).
    ReadsDeferred = "reads_deferred",
    /// RDMA Writes posted (responder).
    RdmaWrites = "rdma_writes",
    /// Bytes pushed by RDMA Write.
    RdmaWriteBytes = "rdma_write_bytes",
    /// Bytes the peer placed in our Write and Reply chunks (requester).
    ChunkBytesReceived = "chunk_bytes_rx",
    /// Replies made contiguous around their Write chunk data in the buffer it was cut from, the
    /// data not copied (requester).
    RepliesJoinedInPlace = "replies_joined_in_place",
    /// Regions registered for chunks.
    Registrations = "registrations",
    /// Regions invalidated locally.
    LocalInvalidations = "local_invalidations",
    /// Regions the peer invalidated with Send With Invalidate.
    RemoteInvalidations = "remote_invalidations",
    /// Replies sent with Send With Invalidate (responder).
    SendWithInvalidate = "send_with_invalidate",
    /// Credits we asked for (requester) or grant (responder): a gauge.
    CreditsRequested = "credits_requested",
    /// The last credit grant (received or sent): a gauge.
    CreditsGranted = "credits_granted",
    /// RPC-over-RDMA version of the last Call sent (requester) or received
    /// (responder): a gauge.
    Version = "rpcrdma_version",
    /// Calls sent again in another version after ERR_VERS (requester, v2 §5.2).
    VersionFallbacks = "version_fallbacks",
    /// Times a Call waited for a credit (requester).
    CreditWaits = "credit_waits",
    /// The peer's IRD at connection setup: a gauge.
    PeerIrd = "peer_ird",
    /// Our send inline threshold after negotiation: a gauge.
    SendThreshold = "send_threshold",
    /// Our receive inline threshold after negotiation: a gauge.
    RecvThreshold = "recv_threshold",
    /// RDMA_ERROR sent (responder; a requester sends only ERR_INVAL_OPTION, v2 §3.1).
    ErrRdmaErrorSent = "err_rdma_error_sent",
    /// RDMA_ERROR received (requester).
    ErrRdmaErrorReceived = "err_rdma_error_rcvd",
    /// ERR_VERS among those sent.
    ErrVers = "err_vers",
    /// ERR_BADHEADER among those sent (header errors, §5.5.2).
    ErrBadHeader = "err_badheader",
    /// Replies refused before writing because the Reply chunk was too small or missing
    /// (§5.5.3), answered with ERR_BADHEADER.
    ErrReplyChunkTooSmall = "err_reply_chunk_too_small",
    /// A DDP-eligible result larger than its Write chunk, answered with ERR_BADHEADER.
    ErrWriteChunkTooSmall = "err_write_chunk_too_small",
    /// GARBAGE_ARGS replies sent (§5.5.2, §8.1.1).
    ErrGarbageArgs = "err_garbage_args",
    /// Calls for programs served without an Upper Layer Binding, dropped unanswered
    /// (§8).
    ErrNoBinding = "err_no_binding",
    /// Calls for a program or version not served, answered PROG_UNAVAIL or
    /// PROG_MISMATCH (RFC 5531 §9).
    UnservedCalls = "unserved_calls",
    /// Messages discarded (too short, unknown XID, duplicate, unparsable reply).
    ErrDiscarded = "err_discarded",
    /// Calls that could not be built or sent (no binding, cannot marshal), failed at
    /// once with a local SYSTEM_ERR reply (§5.5.4; requester).
    ErrCallFailedLocally = "err_call_failed_locally",
    /// Replies that did not match their Call (Write list, Reply chunk, positions).
    ErrBadReply = "err_bad_reply",
    /// Replies in another RPC-over-RDMA version than their Call (v2 §5.3), which fail
    /// that Call (requester; also counted in `err_bad_reply`).
    ErrReplyVersion = "err_reply_version",
    /// Work requests that completed in error (not flushes).
    ErrCompletion = "err_completion",
    /// Work requests flushed by a disconnect.
    Flushed = "flushed",
    /// 1 once both peers agreed to reliable reply (RDMA_OPTIONAL `RELIABLE_REPLY`
    /// exchanged): a gauge.
    ReliableReply = "reliable_reply",
    /// Replies sent (responder) or received (requester) through a responder-provided
    /// Read chunk (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1).
    PulledReplies = "pulled_replies",
    /// RDMA_DONE sent (requester) or received for a waiting Read chunk (responder).
    RdmaDone = "rdma_done",
    /// Pulls of a Reply from a responder-provided Read chunk that failed: an RDMA Read
    /// completed in error or could not be posted (requester). RDMA_DONE is still sent
    /// if the connection can carry it (reliable-reply §4.1.2), and the Call fails.
    PullsFailed = "pulls_failed",
    /// RDMA_DONE sent for an XID with no Call waiting (an aborted Call; requester,
    /// reliable-reply §4.1.3), nothing pulled.
    RdmaDoneUnknownXid = "rdma_done_unknown_xid",
    /// RDMA_DONE for no waiting Read chunk, dropped silently (responder, §4.1.3).
    RdmaDoneDropped = "rdma_done_dropped",
    /// RDMA_DONE left unsent by the test hook `fault_skip_rdma_done` (requester).
    RdmaDoneSkipped = "rdma_done_skipped",
    /// Reply Read chunks invalidated by the pull timeout (responder, §4.1.3).
    PullTimeouts = "pull_timeouts",
    /// Reply Read chunks invalidated because the connection ended (responder, §5.4.3).
    PullsInvalidatedOnClose = "pulls_closed",
    /// Replies that waited for a Receive to reserve for their RDMA_DONE (responder).
    PullsDeferred = "pulls_deferred",
    /// Calls abandoned by the upper layer before their Reply ([`crate::RdmaSender::abort`]).
    CallsAborted = "calls_aborted",
    /// Backward-direction Calls sent (responder) or received (requester), v1 §7.
    BackwardCalls = "backward_calls",
    /// Backward-direction Replies received (responder) or sent (requester).
    BackwardReplies = "backward_replies",
    /// Backward Calls that waited for a backward credit (responder).
    BackwardCreditWaits = "backward_credit_waits",
    /// Backward Calls refused or dropped (not ready, no channel, RDMA_ERROR, lost).
    BackwardFailed = "backward_failed",
}

const N: usize = Counter::ALL.len();

/// The counters of one connection.
#[derive(Debug)]
pub struct ConnStats {
    /// A process-unique connection number.
    pub id: u64,
    /// "client" or "server".
    pub role: &'static str,
    /// The peer's address, if the provider knows it.
    pub peer: Option<SocketAddr>,
    open: AtomicBool,
    values: [AtomicU64; N],
    close_reason: Mutex<Option<String>>,
}

impl ConnStats {
    pub(crate) fn new(role: &'static str, peer: Option<SocketAddr>) -> Arc<ConnStats> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(ConnStats {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            role,
            peer,
            open: AtomicBool::new(true),
            values: std::array::from_fn(|_| AtomicU64::new(0)),
            close_reason: Mutex::new(None),
        })
    }

    fn index(c: Counter) -> usize {
        // `ALL` lists every variant once, so the search always succeeds.
        Counter::ALL.iter().position(|&x| x == c).unwrap_or(0)
    }

    /// Adds `n` to counter `c`.
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.values[Self::index(c)].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub(crate) fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Sets a gauge.
    pub(crate) fn set(&self, c: Counter, v: u64) {
        self.values[Self::index(c)].store(v, Ordering::Relaxed);
    }

    /// The current value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[Self::index(c)].load(Ordering::Relaxed)
    }

    /// True until the connection closes.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Records why the connection ended, as the provider reported it.
    pub(crate) fn set_close_reason(&self, why: String) {
        *self.close_reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// Marks the connection closed and logs its counters (once).
    pub(crate) fn close(&self) {
        if self.open.swap(false, Ordering::Relaxed) {
            tracing::info!(target: "rpcrdma_transport", "closed: {}", self.snapshot());
        }
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            id: self.id,
            role: self.role,
            peer: self.peer,
            open: self.is_open(),
            close_reason: self
                .close_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            values: std::array::from_fn(|i| self.values[i].load(Ordering::Relaxed)),
        }
    }
}

/// The counters of one connection at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Connection number.
    pub id: u64,
    /// "client" or "server".
    pub role: &'static str,
    /// The peer's address.
    pub peer: Option<SocketAddr>,
    /// The connection was open when the snapshot was taken.
    pub open: bool,
    /// Why it ended (the provider's disconnect reason), once it has.
    pub close_reason: Option<String>,
    values: [u64; N],
}

impl Snapshot {
    /// The value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[ConnStats::index(c)]
    }
}

impl fmt::Display for Snapshot {
    /// `xprt: rdma <role> #<id> <peer> name=value ...`, zero counters omitted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "xprt: rdma {} #{}", self.role, self.id)?;
        if let Some(p) = self.peer {
            write!(f, " {p}")?;
        }
        for (c, v) in Counter::ALL.iter().zip(self.values) {
            if v != 0 {
                write!(f, " {}={}", c.name(), v)?;
            }
        }
        if let Some(r) = &self.close_reason {
            write!(f, " closed_by={r}")?;
        }
        Ok(())
    }
}

/// The connections of one transport or server, for reading their counters.
#[derive(Debug, Clone, Default)]
pub struct StatsRegistry {
    conns: Arc<Mutex<Vec<Arc<ConnStats>>>>,
}

impl StatsRegistry {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<ConnStats>>> {
        // A poisoned lock only means a panic elsewhere; the list stays valid.
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add(&self, s: Arc<ConnStats>) {
        let mut v = self.lock();
        // Keep closed connections for reading, but not without bound.
        if v.len() >= 1024 {
            v.retain(|c| c.is_open());
        }
        v.push(s);
    }

    /// Snapshots of every connection, oldest first.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.lock().iter().map(|c| c.snapshot()).collect()
    }

    /// The most recent connection's counters.
    pub fn latest(&self) -> Option<Snapshot> {
        self.lock().last().map(|c| c.snapshot())
    }

    /// The sum of `c` over every connection.
    pub fn total(&self, c: Counter) -> u64 {
        self.lock().iter().map(|s| s.get(c)).sum()
    }
}
