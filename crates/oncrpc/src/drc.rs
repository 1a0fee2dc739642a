//! A duplicate request cache (DRC): exactly-once replies to retransmitted calls of
//! non-idempotent procedures, as knfsd keeps one (`fs/nfsd/nfscache.c`).
//!
//! Why: ONC RPC gives at-most-once nowhere (RFC 5531 §8: "the RPC protocol itself
//! ... does not guarantee" execution semantics; a client that lost a reply
//! retransmits with the same xid). A Linux client retransmits its outstanding calls
//! after a reconnect, over TCP from the same source port. A REMOVE that succeeded but
//! whose reply was lost then runs again and answers NFS3ERR_NOENT; a retransmitted
//! WRITE after a later WRITE to the same range undoes it; a retransmitted NLM UNLOCK
//! releases a lock taken again since. The cache answers such a retransmission with the
//! reply the first call got, byte for byte, without running it again.
//!
//! ```text
//!   call ──► CallKey (xid, prog, vers, proc, client addr (+port over TCP), transport,
//!                      call length, CRC32c of the first 256 argument bytes)
//!              │
//!   ReplyCache::begin ──► Miss(Pending)  ─► serve ─► Pending::complete(reply)
//!              │                                      (entry: InProgress -> Done)
//!              ├────────► InProgress ─► drop the call, no reply: the first one's
//!              │                        reply answers both
//!              ├────────► Hit(reply) ─► send the cached reply
//!              └────────► Uncached   ─► serve without an entry (cache full of
//!                                       calls in service)
//! ```
//!
//! Which procedures are cached is the program's to say
//! ([`crate::Service::caches_reply`]); [`crate::Dispatcher::with_reply_cache`] puts a
//! cache in front of every program of a dispatcher, for every transport that feeds it
//! (TCP, RPC-over-RDMA). A call with no peer (in-process dispatch) is never cached:
//! nothing tells its clients apart.
//!
//! # Matching (knfsd `nfsd_cache_key_cmp`)
//! A retransmission is the same xid, program, version and procedure from the same
//! client address and (over TCP) port over the same transport, with the same argument length and
//! the same checksum of the first [`CSUM_LEN`] bytes of the arguments (knfsd's
//! RC_CSUMLEN): a client that reuses an xid for other arguments (after a reboot, or a
//! wrapped xid counter) is not answered with another call's reply.
//!
//! # Bounds
//! At most [`Limits::max_entries`] entries and [`Limits::max_bytes`] bytes (each
//! entry is charged [`ENTRY_OVERHEAD`], plus its reply's length once done). To make
//! room the entry done longest ago (or hit longest ago: a hit renews it, as knfsd's
//! LRU) goes first; an entry in progress is never evicted (its call runs, and a
//! duplicate of it must still be dropped): when only those are left, a new call is
//! served without an entry ([`CacheStats::uncached`]). Entries do not expire by age
//! (knfsd drops them after 120 s): a bounded cache of retransmission candidates needs
//! no clock, and a call whose xid comes back after longer is a retransmission still.
//!
//! The cache does no I/O and reads no clock; one mutex guards it (two short critical
//! sections per cached call, none for the others).
//!
//! # What it does not do
//! It does not cache replies of idempotent procedures (READ, GETATTR, ...: running
//! them again is harmless and their replies are large), and an NLM `_MSG` call that
//! hits gets its cached (empty) RPC reply, not its `_RES` callback again.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use xdr::XdrStream;

use crate::message::CallHeader;
use crate::service::{Peer, Protocol};

/// Bytes of the arguments checksummed into a [`CallKey`] (knfsd `RC_CSUMLEN`, 256):
/// enough to cover NFSv3's file handles and names, and WRITE's offset and count.
pub const CSUM_LEN: usize = 256;

/// Bytes charged per entry besides its reply: the key, the map slot, the order slot
/// and the reply's headers (measured: `CallKey` is 64 bytes, a hash map slot with the
/// entry about 120, a B-tree slot about 24; rounded up).
pub const ENTRY_OVERHEAD: u64 = 256;

/// knfsd's bound on its number of entries whatever the memory (`nfsd_cache_size_limit`:
/// "a hard cap of 256k entries").
pub const MAX_DEFAULT_ENTRIES: usize = 256 * 1024;

/// What identifies a call for the cache (module docs, "Matching").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// The client's address and, over TCP, its source port (0 over RDMA).
    pub addr: SocketAddr,
    /// The transport the call came over.
    pub protocol: Protocol,
    /// Length of the arguments.
    pub args_len: usize,
    /// CRC32c of the first [`CSUM_LEN`] bytes of the arguments.
    pub csum: u32,
}

impl CallKey {
    /// The key of the call `header` from `peer`, whose arguments (everything after the
    /// call header) are `args`, and `elided` more bytes that the transport received
    /// apart (a bulk data item, [`crate::tcp::call_data`]): counted in the length,
    /// not checksummed. A retransmission is received the same way (which item goes
    /// apart depends on the call's bytes alone), so it has the same key.
    pub fn new(header: &CallHeader, peer: Peer, args: &[u8], elided: usize) -> CallKey {
        let head = &args[..args.len().min(CSUM_LEN)];
        CallKey {
            xid: header.xid.0,
            prog: header.prog,
            vers: header.vers,
            proc_: header.proc_,
            addr: client_of(peer),
            protocol: peer.protocol,
            args_len: args.len() + elided,
            csum: crc32c::crc32c(head),
        }
    }
}

/// Who a call is from, for the cache: over TCP the client's address and source port
/// (a Linux client reconnects from the same port, and retransmits there); over
/// RPC-over-RDMA its address alone, since every connection gets a new port from the
/// RDMA connection manager (Linux's xprtrdma binds none), so a retransmission after
/// a reconnect would never match its first call by port (issue 26: "for RDMA, the
/// connection's peer address"). Two RDMA clients behind one address are still told
/// apart by xid, procedure, argument length and checksum together.
fn client_of(peer: Peer) -> SocketAddr {
    match peer.protocol {
        Protocol::Tcp => peer.addr,
        Protocol::Rdma => SocketAddr::new(peer.addr.ip(), 0),
    }
}

/// The cache's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries, in progress and done; 0 caches nothing.
    pub max_entries: usize,
    /// Most bytes: [`ENTRY_OVERHEAD`] per entry plus each done entry's reply.
    pub max_bytes: u64,
}

impl Limits {
    /// `max_entries` entries of at most 1 KiB each: knfsd's estimate of an entry's
    /// worst case ("each entry will be ~1k"), its cached replies being small (no READ
    /// data or directory listing is cached).
    pub fn entries(max_entries: usize) -> Limits {
        Limits {
            max_entries,
            max_bytes: (max_entries as u64).saturating_mul(1024),
        }
    }
}

/// knfsd's default number of entries for a machine of `ram` bytes
/// (`nfsd_cache_size_limit`): 16 × √(pages of 4 KiB) × 4, so 32768 for 1 GiB,
/// 131072 for 16 GiB, at most [`MAX_DEFAULT_ENTRIES`].
pub fn default_entries(ram: u64) -> usize {
    let pages = ram / 4096;
    let entries = 16 * isqrt(pages) * 4;
    usize::try_from(entries)
        .unwrap_or(usize::MAX)
        .min(MAX_DEFAULT_ENTRIES)
}

/// ⌊√n⌋ (`u64::isqrt` is newer than the workspace's rust-version).
fn isqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r.checked_mul(r).map_or(true, |sq| sq > n) {
        r -= 1;
    }
    while (r + 1).checked_mul(r + 1).is_some_and(|sq| sq <= n) {
        r += 1;
    }
    r
}

/// The cache's counters and size, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Retransmissions answered from the cache.
    pub hits: u64,
    /// New calls of cached procedures, entered in progress.
    pub misses: u64,
    /// Retransmissions of a call still in service, dropped (no reply).
    pub in_progress_drops: u64,
    /// Done entries dropped to make room.
    pub evictions: u64,
    /// Calls of cached procedures served without an entry: the cache was full of calls
    /// in service, or the reply alone was over the byte bound.
    pub uncached: u64,
    /// Calls of procedures the program does not cache (idempotent), or with no peer.
    pub not_cached: u64,
    /// Entries now (in progress and done).
    pub entries: usize,
    /// Bytes charged now.
    pub bytes: u64,
}

impl std::fmt::Display for CacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} hits, {} misses, {} in-progress drops, {} evictions, {} uncached, \
             {} not cached (idempotent); {} entries, {} bytes",
            self.hits,
            self.misses,
            self.in_progress_drops,
            self.evictions,
            self.uncached,
            self.not_cached,
            self.entries,
            self.bytes
        )
    }
}

/// What to do with a call ([`ReplyCache::begin`]).
#[derive(Debug)]
#[must_use = "a Miss must be completed, a Hit sent, an InProgress dropped"]
pub enum Begin<'a> {
    /// A new call, now in progress: serve it and give its reply to
    /// [`Pending::complete`] (dropping the `Pending` unserved removes the entry).
    Miss(Pending<'a>),
    /// A retransmission of a call in service: drop it, no reply.
    InProgress,
    /// A retransmission of a finished call: send this reply (the first call's).
    Hit(XdrStream),
    /// No room for an entry: serve the call uncached.
    Uncached,
}

/// A call in progress in the cache. [`Pending::complete`] records its reply; dropped
/// without it (the call's future dropped with its connection, or no reply), the entry
/// goes, so that a retransmission runs.
#[derive(Debug)]
pub struct Pending<'a> {
    cache: &'a ReplyCache,
    key: Option<CallKey>,
}

impl Pending<'_> {
    /// Records the call's reply for its retransmissions (`None`: the call earned no
    /// reply; the entry goes).
    pub fn complete(mut self, reply: Option<&XdrStream>) {
        if let Some(key) = self.key.take() {
            match reply {
                Some(reply) => self.cache.done(&key, reply),
                None => self.cache.abandon(&key),
            }
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.cache.abandon(&key);
        }
    }
}

enum State {
    InProgress,
    Done {
        reply: XdrStream,
        /// Position in [`Table::order`].
        seq: u64,
        /// Charged bytes, [`ENTRY_OVERHEAD`] included.
        bytes: u64,
    },
}

#[derive(Default)]
struct Table {
    entries: HashMap<CallKey, State>,
    /// Done entries, oldest (done or hit longest ago) first.
    order: BTreeMap<u64, CallKey>,
    next_seq: u64,
    /// Charged bytes of all entries. Invariant: at most `Limits::max_bytes`.
    bytes: u64,
    hits: u64,
    misses: u64,
    in_progress_drops: u64,
    evictions: u64,
    uncached: u64,
}

impl Table {
    /// Drops the oldest done entry; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, key)) = self.order.pop_first() else {
            return false;
        };
        if let Some(State::Done { bytes, .. }) = self.entries.remove(&key) {
            self.bytes -= bytes;
        }
        self.evictions += 1;
        true
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }
}

/// The duplicate request cache (module docs). Shared by the dispatchers of a server
/// (`Arc`), so that all its transports charge one bound.
pub struct ReplyCache {
    limits: Limits,
    table: Mutex<Table>,
    not_cached: AtomicU64,
}

impl std::fmt::Debug for ReplyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyCache")
            .field("limits", &self.limits)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Bytes a reply is charged: its inline part and its DDP-eligible data.
fn reply_bytes(reply: &XdrStream) -> u64 {
    let ddp: usize = reply.ddp.iter().map(|d| d.data.len()).sum();
    (reply.inline.len() + ddp) as u64
}

impl ReplyCache {
    /// An empty cache bounded by `limits`.
    pub fn new(limits: Limits) -> ReplyCache {
        ReplyCache {
            limits,
            table: Mutex::new(Table::default()),
            not_cached: AtomicU64::new(0),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while the lock was held left the table consistent (no step of it
        // panics between updates of `entries`, `order` and `bytes`).
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks the call `key` up, and enters it in progress if it is new.
    pub fn begin(&self, key: CallKey) -> Begin<'_> {
        let mut t = self.table();
        let found = t.entries.get(&key).map(|state| match state {
            State::InProgress => None,
            State::Done { reply, seq, .. } => Some((reply.clone(), *seq)),
        });
        match found {
            Some(None) => {
                t.in_progress_drops += 1;
                return Begin::InProgress;
            }
            Some(Some((reply, old))) => {
                // A hit renews the entry: the client may retransmit again.
                let new = t.seq();
                if let Some(State::Done { seq, .. }) = t.entries.get_mut(&key) {
                    *seq = new;
                }
                t.order.remove(&old);
                t.order.insert(new, key);
                t.hits += 1;
                return Begin::Hit(reply);
            }
            None => {}
        }
        while t.entries.len() >= self.limits.max_entries
            || t.bytes + ENTRY_OVERHEAD > self.limits.max_bytes
        {
            if !t.evict_oldest() {
                t.uncached += 1;
                return Begin::Uncached;
            }
        }
        t.entries.insert(key, State::InProgress);
        t.bytes += ENTRY_OVERHEAD;
        t.misses += 1;
        Begin::Miss(Pending {
            cache: self,
            key: Some(key),
        })
    }

    /// Counts a call the cache was not asked about ([`CacheStats::not_cached`]).
    pub fn count_not_cached(&self) {
        self.not_cached.fetch_add(1, Ordering::Relaxed);
    }

    /// The call `key` in progress finished with `reply`: done, or gone if the reply
    /// does not fit even with every other done entry evicted.
    fn done(&self, key: &CallKey, reply: &XdrStream) {
        let mut t = self.table();
        if !matches!(t.entries.get(key), Some(State::InProgress)) {
            return;
        }
        let bytes = ENTRY_OVERHEAD.saturating_add(reply_bytes(reply));
        // Its overhead is charged already.
        let more = bytes - ENTRY_OVERHEAD;
        while t.bytes + more > self.limits.max_bytes {
            if !t.evict_oldest() {
                t.entries.remove(key);
                t.bytes -= ENTRY_OVERHEAD;
                t.uncached += 1;
                return;
            }
        }
        let seq = t.seq();
        t.bytes += more;
        t.order.insert(seq, *key);
        t.entries.insert(
            *key,
            State::Done {
                reply: reply.clone(),
                seq,
                bytes,
            },
        );
    }

    /// The call `key` in progress ended without a reply to keep: its entry goes.
    fn abandon(&self, key: &CallKey) {
        let mut t = self.table();
        if matches!(t.entries.get(key), Some(State::InProgress)) {
            t.entries.remove(key);
            t.bytes -= ENTRY_OVERHEAD;
        }
    }

    /// The counters and size now.
    pub fn stats(&self) -> CacheStats {
        let t = self.table();
        CacheStats {
            hits: t.hits,
            misses: t.misses,
            in_progress_drops: t.in_progress_drops,
            evictions: t.evictions,
            uncached: t.uncached,
            not_cached: self.not_cached.load(Ordering::Relaxed),
            entries: t.entries.len(),
            bytes: t.bytes,
        }
    }
}

#[cfg(test)]
mod tests;
