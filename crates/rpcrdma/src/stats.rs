//! Per-connection counters: which ones exist, and the sink the state machines count
//! into.
//!
//! The state machines count protocol events (Calls, shapes, RDMA_ERRORs sent, pulls,
//! backward Calls, ...); the driver counts what it executes (Sends, bytes, RDMA Reads
//! and Writes, registrations, completions). Both write into one [`CounterSink`] per
//! connection, which the driver provides (`rpcrdma-transport`'s `ConnStats`, readable
//! while the connection runs); without one, [`NoCounters`] drops them. Counting is
//! not I/O: the core still never calls out of the process.

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

            /// This counter's place in [`Counter::ALL`] (both list the variants in
            /// the same order), for arrays of counters indexed without a search.
            pub fn index(self) -> usize {
                self as usize
            }

            /// The name used in logs.
            pub fn name(self) -> &'static str {
                match self {
                    $(Counter::$name => $text,)*
                }
            }

            /// True for a gauge: a level a connection sets (its credits, thresholds,
            /// version, memory charge), not a count that only grows. Summed over
            /// open connections only.
            pub fn is_gauge(self) -> bool {
                matches!(
                    self,
                    Counter::MemoryCharged
                        | Counter::CreditsRequested
                        | Counter::CreditsGranted
                        | Counter::Version
                        | Counter::PeerIrd
                        | Counter::SendThreshold
                        | Counter::RecvThreshold
                        | Counter::ReliableReply
                        | Counter::SendBuffers
                )
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
    /// Memory regions registered with the device for this connection's calls (verbs
    /// `ibv_reg_mr`; never on a software provider).
    DeviceRegistrations = "device_registrations",
    /// Regions for local access (RDMA Read sinks, gathered data) that shared their
    /// pooled buffer's cached device registration instead of a registration of their
    /// own.
    CachedRegistrations = "cached_registrations",
    /// Sends posted.
    Sends = "sends",
    /// Sends whose header went as caller bytes because every send buffer was busy.
    SendPoolFallbacks = "send_pool_fallbacks",
    /// Bytes of Send payload (the inline part behind the transport header) copied
    /// into the registered send buffer, so that a Send is one gather element.
    SendCopyBytes = "send_copy_bytes",
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
    /// Of those, Calls that waited because the server's memory budget was spent
    /// (responder, `ResponderConfig::read_memory`).
    ReadsWaitedForMemory = "reads_waited_for_memory",
    /// Connections closed because a Call's RDMA Reads did not complete within the
    /// read timeout (responder driver: a peer that stops answering RDMA Reads).
    ReadTimeouts = "read_timeouts",
    /// Times a busy connection went half its stall timeout without progress and
    /// logged what it waited for (responder driver, `RdmaConfig::stall_timeout`).
    Stalls = "stalls",
    /// Connections closed because work requests they posted made no progress for the
    /// whole stall timeout (responder driver).
    StallCloses = "stall_closes",
    /// Connections torn down without the provider's flush of every work request they
    /// had posted, a grace period after the disconnect (responder driver): a provider
    /// that never completes them must not keep the connection's buffers and regions
    /// forever.
    TeardownsUnflushed = "teardowns_unflushed",
    /// Bytes of the server's memory budget this connection's own buffers hold
    /// (its Receive and Send buffers, charged at accept and as its credit grant
    /// grows; responder driver): a gauge.
    MemoryCharged = "memory_charged",
    /// RDMA Writes posted (responder).
    RdmaWrites = "rdma_writes",
    /// Bytes pushed by RDMA Write.
    RdmaWriteBytes = "rdma_write_bytes",
    /// Bytes the peer placed in our Write and Reply chunks (requester).
    ChunkBytesReceived = "chunk_bytes_rx",
    /// Replies made contiguous around their Write chunk data in the buffer it was cut from, the
    /// data not copied (requester).
    RepliesJoinedInPlace = "replies_joined_in_place",
    /// Calls made contiguous around their Read chunk data in the buffer it was read
    /// into, the data not copied (responder).
    CallsJoinedInPlace = "calls_joined_in_place",
    /// Regions registered for chunks.
    Registrations = "registrations",
    /// Regions invalidated locally.
    LocalInvalidations = "local_invalidations",
    /// Regions the peer invalidated with Send With Invalidate.
    RemoteInvalidations = "remote_invalidations",
    /// Regions fenced by deregistration, on a device that cannot invalidate them by
    /// posted work (`rdma::DeviceAttributes::invalidate`).
    FencedByDeregistration = "fenced_by_deregistration",
    /// Regions deregistered without an invalidation because their connection ended
    /// (no peer reaches memory through a dead queue pair).
    FencedByDisconnect = "fenced_by_disconnect",
    /// Replies sent with Send With Invalidate (responder).
    SendWithInvalidate = "send_with_invalidate",
    /// Credits we asked for (requester) or grant (responder): a gauge.
    CreditsRequested = "credits_requested",
    /// The last credit grant (received or sent): a gauge.
    CreditsGranted = "credits_granted",
    /// Times a connection's credit grant could not grow because the server's memory
    /// budget had no room for its buffers (responder,
    /// `Responder::handle_credit_growth_refused`).
    CreditGrowthsRefused = "credit_growths_refused",
    /// Registered Send buffers the connection holds (responder: a few at first, more
    /// as Sends find them all taken): a gauge.
    SendBuffers = "send_buffers",
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
    /// once with a typed transport error (§5.5.4; requester).
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
    /// Connections we closed (the reason is in the close line).
    ClosedByUs = "closed_by_us",
    /// 1 once both peers agreed to reliable reply (RDMA_OPTIONAL `RELIABLE_REPLY`
    /// exchanged): a gauge.
    ReliableReply = "reliable_reply",
    /// Replies sent (responder) or received (requester) through a responder-provided
    /// Read chunk (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1).
    PulledReplies = "pulled_replies",
    /// RDMA_DONE sent (requester) or received for a waiting Read chunk (responder).
    RdmaDone = "rdma_done",
    /// RDMA_DONE sent for an XID with no Call waiting (an aborted Call; requester,
    /// reliable-reply §4.1.3), nothing pulled.
    RdmaDoneUnknownXid = "rdma_done_unknown_xid",
    /// RDMA_DONE for no waiting Read chunk, dropped silently (responder, §4.1.3).
    RdmaDoneDropped = "rdma_done_dropped",
    /// RDMA_DONE left unsent by the test hook `fault_skip_rdma_done` (requester).
    RdmaDoneSkipped = "rdma_done_skipped",
    /// Pulls of a Reply from a responder-provided Read chunk that failed: an RDMA Read
    /// completed in error or could not be posted (requester). RDMA_DONE is still sent
    /// if the connection can carry it (reliable-reply §4.1.2), and the Call fails.
    PullsFailed = "pulls_failed",
    /// Reply Read chunks invalidated by the pull timeout (responder, §4.1.3).
    PullTimeouts = "pull_timeouts",
    /// Reply Read chunks invalidated because the connection ended (responder, §5.4.3).
    PullsInvalidatedOnClose = "pulls_closed",
    /// Replies that waited for a Receive to reserve for their RDMA_DONE (responder).
    PullsDeferred = "pulls_deferred",
    /// Calls abandoned by the upper layer before their Reply (`RdmaSender::abort` in the transport).
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

/// Where a connection's counters go. Implementations must be cheap and must not block
/// (the transport's is an array of atomics).
pub trait CounterSink: Send + Sync {
    /// Adds `n` to counter `c`.
    fn add(&self, c: Counter, n: u64);
    /// Sets gauge `c` to `v`.
    fn set(&self, c: Counter, v: u64);
    /// Adds one to counter `c`.
    fn inc(&self, c: Counter) {
        self.add(c, 1);
    }
}

/// A sink that drops every count (tests, fuzzers, drivers that keep none).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCounters;

impl CounterSink for NoCounters {
    fn add(&self, _: Counter, _: u64) {}
    fn set(&self, _: Counter, _: u64) {}
}

#[cfg(test)]
mod tests {
    use super::Counter;

    #[test]
    fn each_counter_indexes_its_place_in_all() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{}", c.name());
        }
    }
}
