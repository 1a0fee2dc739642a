//! NFSv4.1 state in the server's memory budget (`--max-memory`, [`crate::memory`]):
//! every client record, session, open and lock stateid holds a charge of what it
//! may cost for as long as it exists, and one that does not fit is refused with
//! NFS4ERR_DELAY (the client retries later; NFSv4.1 has no NFS4ERR_RESOURCE, RFC
//! 8881 §15.1.1.4). State is long-lived, so it is charged as connections are
//! (`try_charge_now`): never into the last `keep_free` bytes, which stay for the
//! I/O of calls already admitted. The counts' caps ([`super::MAX_CLIENTS`],
//! [`super::MAX_SESSIONS`], [`super::opens::MAX_OPENS`],
//! [`super::lock_state::MAX_LOCK_STATEIDS`]) still hold beside it.

use std::sync::Arc;

use nfs4::session::ChannelAttrs4;
use nfs4::NfsStat4;
use rpcrdma::memory::{Charge, MemoryBudget};

/// Bookkeeping of one entry beyond its variable parts (hash map slot, struct,
/// allocator rounding): a generous estimate.
pub const ENTRY_OVERHEAD: u64 = 256;

/// Where state is charged (nowhere: unlimited, as in unit tests).
#[derive(Debug, Clone, Default)]
pub struct StateBudget {
    budget: Option<Arc<MemoryBudget>>,
    keep_free: u64,
}

impl StateBudget {
    /// Charges to `budget`, never into its last `keep_free` bytes.
    pub fn new(budget: Arc<MemoryBudget>, keep_free: u64) -> StateBudget {
        StateBudget {
            budget: Some(budget),
            keep_free,
        }
    }

    /// A charge of `bytes` (`None` without a budget), or NFS4ERR_DELAY.
    pub fn charge(&self, bytes: u64) -> Result<Option<Charge>, NfsStat4> {
        match &self.budget {
            None => Ok(None),
            Some(b) => b
                .try_charge_now(bytes, self.keep_free)
                .map(Some)
                .ok_or(NfsStat4::NFS4ERR_DELAY),
        }
    }
}

/// A client record with an owner of `owner` bytes.
pub fn client_cost(owner: usize) -> u64 {
    ENTRY_OVERHEAD + owner as u64
}

/// A session with the fore channel `fore`: its slots' reply caches, full.
pub fn session_cost(fore: &ChannelAttrs4) -> u64 {
    ENTRY_OVERHEAD
        + u64::from(fore.ca_maxrequests)
            * (ENTRY_OVERHEAD + u64::from(fore.ca_maxresponsesize_cached))
}

/// An open or lock stateid of an owner of `owner` bytes on a file whose handle has
/// `file` bytes.
pub fn stateid_cost(owner: usize, file: usize) -> u64 {
    ENTRY_OVERHEAD + owner as u64 + file as u64
}
