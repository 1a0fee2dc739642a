use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use bytes::Bytes;
use xdr::{Decoder, Encode, Encoder};

use super::*;
use crate::auth::OpaqueAuth;
use crate::message::{ReplyHeader, Xid};
use crate::service::{Dispatcher, Request, Service, ServiceResult};

const PROG: u32 = 0x2000_0002;
/// Cached: bumps the counter and answers its new value and the argument.
const BUMP: u32 = 1;
/// Cached: waits for the gate, then bumps as BUMP.
const SLOW_BUMP: u32 = 2;
/// Not cached (idempotent by declaration): bumps as BUMP.
const PEEK: u32 = 3;

/// A service whose effects are counted, so that a test can tell a call that ran
/// from one answered from the cache.
#[derive(Default)]
struct Counter {
    runs: AtomicU32,
    gate: tokio::sync::Notify,
}

impl Service for Counter {
    async fn call(&self, mut req: Request) -> ServiceResult {
        if req.proc_ == SLOW_BUMP {
            self.gate.notified().await;
        }
        let arg = req.args.u32()?;
        req.args.finish()?;
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let mut enc = Encoder::new();
        enc.u32(n);
        enc.u32(arg);
        Ok(enc.finish())
    }

    fn caches_reply(&self, _vers: u32, proc_: u32) -> bool {
        matches!(proc_, BUMP | SLOW_BUMP)
    }
}

fn peer(port: u16) -> Peer {
    Peer {
        addr: SocketAddr::from(([192, 0, 2, 7], port)),
        protocol: Protocol::Tcp,
    }
}

fn setup(limits: Limits) -> (Arc<Counter>, Arc<Dispatcher>) {
    let counter = Arc::new(Counter::default());
    let mut d = Dispatcher::new();
    d.register(PROG, [1], counter.clone()).unwrap();
    d.with_reply_cache(Arc::new(ReplyCache::new(limits)));
    (counter, Arc::new(d))
}

fn call(xid: u32, proc_: u32, arg: u32) -> Bytes {
    let mut enc = Encoder::new();
    CallHeader::new(Xid(xid), PROG, 1, proc_, OpaqueAuth::none()).encode(&mut enc);
    enc.u32(arg);
    enc.finish().to_bytes()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// The reply's bytes, if any.
fn run(d: &Dispatcher, msg: Bytes, from: Option<Peer>) -> Option<Bytes> {
    rt().block_on(d.dispatch_from(msg, from))
        .map(|r| r.to_bytes())
}

/// The (run count, argument) a reply carries.
fn results(reply: &Bytes) -> (u32, u32) {
    let mut dec = Decoder::new(reply.clone());
    ReplyHeader::decode(&mut dec).unwrap();
    (dec.u32().unwrap(), dec.u32().unwrap())
}

fn big() -> Limits {
    Limits::entries(1024)
}

#[test]
fn a_retransmission_gets_the_first_reply_byte_for_byte_and_does_not_run() {
    let (counter, d) = setup(big());
    let first = run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    let again = run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    assert_eq!(first, again);
    assert_eq!(results(&again), (1, 40));
    assert_eq!(counter.runs.load(Ordering::SeqCst), 1);
    let s = d.cache_stats().unwrap();
    assert_eq!((s.hits, s.misses, s.entries), (1, 1, 1));
    assert!(s.bytes >= ENTRY_OVERHEAD + first.len() as u64);
}

#[test]
fn the_same_xid_with_other_arguments_runs() {
    let (counter, d) = setup(big());
    run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    let other = run(&d, call(7, BUMP, 41), Some(peer(800))).unwrap();
    assert_eq!(results(&other), (2, 41));
    assert_eq!(counter.runs.load(Ordering::SeqCst), 2);
    assert_eq!(d.cache_stats().unwrap().hits, 0);
}

#[test]
fn the_same_xid_from_another_port_or_procedure_or_transport_runs() {
    let (counter, d) = setup(big());
    run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    let port = run(&d, call(7, BUMP, 40), Some(peer(801))).unwrap();
    assert_eq!(results(&port), (2, 40));
    let rdma = Peer {
        protocol: Protocol::Rdma,
        ..peer(800)
    };
    let over_rdma = run(&d, call(7, BUMP, 40), Some(rdma)).unwrap();
    assert_eq!(results(&over_rdma), (3, 40));
    assert_eq!(counter.runs.load(Ordering::SeqCst), 3);
    assert_eq!(d.cache_stats().unwrap().hits, 0);
}

/// Over RPC-over-RDMA a client's reconnection comes from a new port: a retransmission
/// from its address is matched whatever the port (over TCP it would not be).
#[test]
fn over_rdma_the_same_xid_from_the_same_address_and_another_port_hits() {
    let (counter, d) = setup(big());
    let rdma = |port| Peer {
        protocol: Protocol::Rdma,
        ..peer(port)
    };
    let first = run(&d, call(7, BUMP, 40), Some(rdma(800))).unwrap();
    let again = run(&d, call(7, BUMP, 40), Some(rdma(40_123))).unwrap();
    assert_eq!(again, first);
    assert_eq!(counter.runs.load(Ordering::SeqCst), 1);
    assert_eq!(d.cache_stats().unwrap().hits, 1);
    let elsewhere = Peer {
        addr: SocketAddr::from(([192, 0, 2, 8], 800)),
        protocol: Protocol::Rdma,
    };
    run(&d, call(7, BUMP, 40), Some(elsewhere)).unwrap();
    assert_eq!(
        counter.runs.load(Ordering::SeqCst),
        2,
        "another address runs"
    );
}

#[test]
fn a_duplicate_of_a_call_in_service_is_dropped_and_answered_once_done() {
    let (counter, d) = setup(big());
    let rt = rt();
    rt.block_on(async {
        let first = tokio::spawn({
            let d = d.clone();
            async move {
                d.dispatch_from(call(9, SLOW_BUMP, 5), Some(peer(900)))
                    .await
            }
        });
        // Let the first call start and wait at the gate.
        while d.cache_stats().unwrap().misses == 0 {
            tokio::task::yield_now().await;
        }
        let dup = d
            .dispatch_from(call(9, SLOW_BUMP, 5), Some(peer(900)))
            .await;
        assert!(dup.is_none(), "a duplicate in progress gets no reply");
        assert_eq!(d.cache_stats().unwrap().in_progress_drops, 1);
        counter.gate.notify_one();
        let reply = first.await.unwrap().unwrap().to_bytes();
        assert_eq!(results(&reply), (1, 5));
        let later = d
            .dispatch_from(call(9, SLOW_BUMP, 5), Some(peer(900)))
            .await;
        assert_eq!(later.unwrap().to_bytes(), reply);
    });
    assert_eq!(counter.runs.load(Ordering::SeqCst), 1);
}

#[test]
fn a_call_dropped_in_service_leaves_no_entry_so_its_retransmission_runs() {
    let (counter, d) = setup(big());
    let rt = rt();
    rt.block_on(async {
        let first = tokio::spawn({
            let d = d.clone();
            async move {
                d.dispatch_from(call(9, SLOW_BUMP, 5), Some(peer(900)))
                    .await
            }
        });
        while d.cache_stats().unwrap().misses == 0 {
            tokio::task::yield_now().await;
        }
        // The connection went away with the call (the TCP server aborts its tasks).
        first.abort();
        let _ = first.await;
        assert_eq!(d.cache_stats().unwrap().entries, 0);
        counter.gate.notify_one();
        let again = d
            .dispatch_from(call(9, SLOW_BUMP, 5), Some(peer(900)))
            .await;
        assert_eq!(results(&again.unwrap().to_bytes()), (1, 5));
    });
}

#[test]
fn idempotent_procedures_and_calls_without_a_peer_are_not_cached() {
    let (counter, d) = setup(big());
    let a = run(&d, call(3, PEEK, 1), Some(peer(800))).unwrap();
    let b = run(&d, call(3, PEEK, 1), Some(peer(800))).unwrap();
    assert_eq!((results(&a).0, results(&b).0), (1, 2));
    let c = run(&d, call(4, BUMP, 1), None).unwrap();
    let e = run(&d, call(4, BUMP, 1), None).unwrap();
    assert_eq!((results(&c).0, results(&e).0), (3, 4));
    assert_eq!(counter.runs.load(Ordering::SeqCst), 4);
    let s = d.cache_stats().unwrap();
    assert_eq!((s.not_cached, s.misses, s.hits, s.entries), (4, 0, 0, 0));
}

#[test]
fn without_a_cache_a_retransmission_runs_again() {
    let counter = Arc::new(Counter::default());
    let mut d = Dispatcher::new();
    d.register(PROG, [1], counter.clone()).unwrap();
    run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    run(&d, call(7, BUMP, 40), Some(peer(800))).unwrap();
    assert_eq!(counter.runs.load(Ordering::SeqCst), 2);
    assert!(d.cache_stats().is_none());
}

fn key(xid: u32) -> CallKey {
    let h = CallHeader::new(Xid(xid), PROG, 1, BUMP, OpaqueAuth::none());
    CallKey::new(&h, peer(700), &xid.to_be_bytes(), 0)
}

fn reply(len: usize) -> XdrStream {
    XdrStream {
        inline: Bytes::from(vec![0u8; len]),
        ddp: Vec::new(),
    }
}

fn complete(cache: &ReplyCache, xid: u32, len: usize) {
    match cache.begin(key(xid)) {
        Begin::Miss(p) => p.complete(Some(&reply(len))),
        other => panic!("xid {xid}: {other:?}"),
    }
}

#[test]
fn a_flood_of_distinct_calls_stays_within_the_entry_bound() {
    let limits = Limits::entries(100);
    let cache = ReplyCache::new(limits);
    for xid in 0..10_000 {
        complete(&cache, xid, 200);
        let s = cache.stats();
        assert!(s.entries <= 100 && s.bytes <= limits.max_bytes, "{s}");
    }
    let s = cache.stats();
    assert_eq!(s.entries, 100);
    assert_eq!(s.evictions, 10_000 - 100);
    assert_eq!(s.bytes, 100 * (ENTRY_OVERHEAD + 200));
    // The newest are kept, the oldest went.
    assert!(matches!(cache.begin(key(9_999)), Begin::Hit(_)));
    assert!(matches!(cache.begin(key(0)), Begin::Miss(_)));
}

#[test]
fn a_flood_of_large_replies_stays_within_the_byte_bound() {
    let limits = Limits {
        max_entries: 1_000_000,
        max_bytes: 64 * 1024,
    };
    let cache = ReplyCache::new(limits);
    for xid in 0..5_000 {
        complete(&cache, xid, 1000 + (xid as usize % 7) * 100);
        assert!(cache.stats().bytes <= limits.max_bytes);
    }
    let s = cache.stats();
    assert!(s.entries < 64 && s.entries > 30, "{s}");
    assert_eq!(s.evictions, 5_000 - s.entries as u64);
    // A reply larger than the whole bound is not kept (and evicts nothing it
    // cannot replace).
    match cache.begin(key(99_999)) {
        Begin::Miss(p) => p.complete(Some(&reply(100 * 1024))),
        other => panic!("{other:?}"),
    }
    assert_eq!(cache.stats().uncached, 1);
    assert!(matches!(cache.begin(key(99_999)), Begin::Miss(_)));
}

#[test]
fn calls_in_progress_are_never_evicted() {
    let cache = ReplyCache::new(Limits::entries(2));
    complete(&cache, 1, 10);
    let a = cache.begin(key(2));
    let b = cache.begin(key(3));
    assert!(matches!((&a, &b), (Begin::Miss(_), Begin::Miss(_))));
    // The done entry made room for the second; now only calls in service are left.
    assert_eq!(cache.stats().evictions, 1);
    assert!(matches!(cache.begin(key(4)), Begin::Uncached));
    assert!(matches!(cache.begin(key(2)), Begin::InProgress));
    let s = cache.stats();
    assert_eq!((s.uncached, s.in_progress_drops, s.entries), (1, 1, 2));
    drop((a, b));
    assert_eq!(cache.stats().entries, 0);
    assert_eq!(cache.stats().bytes, 0);
}

#[test]
fn a_hit_renews_its_entry() {
    let cache = ReplyCache::new(Limits::entries(2));
    complete(&cache, 1, 10);
    complete(&cache, 2, 10);
    assert!(matches!(cache.begin(key(1)), Begin::Hit(_)));
    complete(&cache, 3, 10);
    assert!(matches!(cache.begin(key(1)), Begin::Hit(_)));
    assert!(matches!(cache.begin(key(2)), Begin::Miss(_)));
}

#[test]
fn no_entries_caches_nothing() {
    let cache = ReplyCache::new(Limits::entries(0));
    assert!(matches!(cache.begin(key(1)), Begin::Uncached));
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn the_checksum_covers_the_first_256_argument_bytes_and_the_length() {
    let h = CallHeader::new(Xid(1), PROG, 1, BUMP, OpaqueAuth::none());
    let args = vec![1u8; 400];
    let mut late = args.clone();
    late[300] = 2;
    let mut early = args.clone();
    early[255] = 2;
    let k = |a: &[u8]| CallKey::new(&h, peer(1), a, 0);
    // knfsd RC_CSUMLEN: a difference past the first 256 bytes, same length, is a
    // retransmission still (WRITE data beyond it is not read twice).
    assert_eq!(k(&args), k(&late));
    assert_ne!(k(&args), k(&early));
    assert_ne!(k(&args), k(&args[..399]));
}

#[test]
fn default_sizes_follow_knfsd() {
    // nfsd_cache_size_limit's table: 64 MB 8192, 1 GB 32768, 16 GB 131072.
    assert_eq!(default_entries(64 << 20), 8192);
    assert_eq!(default_entries(1 << 30), 32768);
    assert_eq!(default_entries(16 << 30), 131_072);
    assert_eq!(default_entries(1 << 40), MAX_DEFAULT_ENTRIES);
    assert_eq!(default_entries(0), 0);
    assert_eq!(isqrt(u64::MAX), u64::from(u32::MAX));
}
