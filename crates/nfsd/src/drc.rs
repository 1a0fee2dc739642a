//! nfsd's duplicate request cache (issue 26; the cache itself is
//! [`oncrpc::drc`]): which NFSv3 and NLM procedures it covers, how large it is by
//! default, and its charge to the server's one memory budget (`--max-memory`).
//!
//! One cache serves every transport (NFS, NLM on TCP, NFS on RPC-over-RDMA): a
//! retransmission is matched by the client's address (and port, over TCP) and the
//! transport, so
//! a call and its retransmission meet in it whichever dispatcher they come to.
//!
//! Why these procedures: knfsd's `nfsd_procedures3` marks SETATTR, WRITE, CREATE,
//! MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME and LINK `RC_REPLBUFF` (their replies
//! cached) and the rest `RC_NOCACHE`, COMMIT included (a second COMMIT is harmless,
//! its verifier tells the client what it needs). Linux lockd keeps no cache, but a
//! retransmitted UNLOCK that runs after the client locked the range again releases
//! the new lock (issue 26): so every NLM procedure that changes lock state is cached,
//! `_MSG` forms too; TEST and the `_RES` answers change nothing. A `_MSG` call
//! answered from the cache gets its empty RPC reply again, but no second `_RES`
//! call: a client that lost the `_RES` waits for it in vain (Linux's client uses the
//! synchronous procedures), where without the cache its UNLOCK_MSG could release a
//! newer lock.
//!
//! Over RPC-over-RDMA a retransmission matches by the client's address alone: a
//! reconnecting client's rdma_cm picks a new port for each connection, so keying by
//! port, as knfsd does, would miss every retransmission after a reconnect, the case
//! the cache is for (`oncrpc::drc`, `client_of`).

use std::sync::Arc;

use nfs3::NfsProc3;
use oncrpc::drc::{Limits, ReplyCache};
use rpcrdma::memory::{Charge, MemoryBudget};

use crate::nlm::xdr::proc4;

/// Whether NFSv3 procedure `proc` is served through the reply cache (module docs).
pub fn nfs3_cached(proc: NfsProc3) -> bool {
    matches!(
        proc,
        NfsProc3::SETATTR
            | NfsProc3::WRITE
            | NfsProc3::CREATE
            | NfsProc3::MKDIR
            | NfsProc3::SYMLINK
            | NfsProc3::MKNOD
            | NfsProc3::REMOVE
            | NfsProc3::RMDIR
            | NfsProc3::RENAME
            | NfsProc3::LINK
    )
}

/// Whether NLM v4 procedure `proc_` is served through the reply cache: those that
/// change lock or share state (module docs).
pub fn nlm4_cached(proc_: u32) -> bool {
    use proc4::*;
    matches!(
        proc_,
        LOCK | CANCEL
            | UNLOCK
            | GRANTED
            | LOCK_MSG
            | CANCEL_MSG
            | UNLOCK_MSG
            | GRANTED_MSG
            | SHARE
            | UNSHARE
            | NM_LOCK
            | FREE_ALL
    )
}

/// The default number of entries: knfsd's for this machine's memory
/// ([`oncrpc::drc::default_entries`]: 32768 for 1 GiB, 131072 for 16 GiB), 32768
/// if its size cannot be read.
pub fn default_entries() -> usize {
    oncrpc::drc::default_entries(crate::memory::physical_memory().unwrap_or(1 << 30))
}

/// The bounds for `entries` entries under a budget of `max_memory` bytes: 1 KiB per
/// entry ([`Limits::entries`]), but never more than an eighth of the budget, which
/// the rest of the server needs more (connections, WRITE data, READ buffers).
pub fn limits(entries: usize, max_memory: u64) -> Limits {
    let mut limits = Limits::entries(entries);
    limits.max_bytes = limits.max_bytes.min(max_memory / 8);
    limits
}

/// A reply cache of `entries` entries (`None`: [`default_entries`]), its byte bound
/// reserved from `budget` for as long as the returned charge is held; `None` for no
/// cache (0 entries, or a budget without room for it, which is logged).
pub fn reserve(
    entries: Option<usize>,
    budget: &Arc<MemoryBudget>,
) -> Option<(Arc<ReplyCache>, Charge)> {
    let entries = entries.unwrap_or_else(default_entries);
    if entries == 0 {
        return None;
    }
    let limits = limits(entries, budget.limit());
    match budget.try_charge_now(limits.max_bytes, 0) {
        Some(charge) => Some((Arc::new(ReplyCache::new(limits)), charge)),
        None => {
            tracing::warn!(
                bytes = limits.max_bytes,
                "no room in the memory budget for the duplicate request cache: serving without one"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knfsd_caches_these_nfs3_procedures_and_not_commit() {
        let cached: Vec<u32> = (0..22).filter(|&p| nfs3_cached(NfsProc3(p))).collect();
        assert_eq!(cached, [2, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(!nfs3_cached(NfsProc3::COMMIT));
    }

    #[test]
    fn nlm_state_changes_are_cached_and_tests_and_answers_are_not() {
        use proc4::*;
        for p in [
            LOCK, UNLOCK, CANCEL, NM_LOCK, FREE_ALL, SHARE, UNSHARE, UNLOCK_MSG,
        ] {
            assert!(nlm4_cached(p), "{p}");
        }
        for p in [
            NULL,
            TEST,
            TEST_MSG,
            TEST_RES,
            LOCK_RES,
            UNLOCK_RES,
            GRANTED_RES,
        ] {
            assert!(!nlm4_cached(p), "{p}");
        }
    }

    #[test]
    fn the_cache_takes_at_most_an_eighth_of_the_budget_and_is_charged_to_it() {
        assert_eq!(limits(32768, 1 << 30).max_bytes, 32 << 20);
        assert_eq!(limits(32768, 64 << 20).max_bytes, 8 << 20);
        let budget = MemoryBudget::new(64 << 20);
        let (cache, charge) = reserve(Some(1000), &budget).unwrap();
        assert_eq!(cache.limits().max_entries, 1000);
        assert_eq!(charge.bytes(), 1000 * 1024);
        assert_eq!(budget.used(), 1000 * 1024);
        drop(charge);
        assert_eq!(budget.used(), 0);
        assert!(reserve(Some(0), &budget).is_none());
    }
}
