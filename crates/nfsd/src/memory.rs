//! The server's one memory budget (issue 16, `--max-memory`): a
//! [`rpcrdma::memory::MemoryBudget`] shared by the NFS/RDMA transport (each
//! connection's Receive and Send buffers, the data of WRITEs pulled by RDMA Read) and
//! the NFS program (READ reply buffers). Nothing charged to it is allocated past its
//! limit: a new RDMA connection that does not fit is rejected, a WRITE's data waits
//! in line, a READ that does not fit is answered NFS3ERR_JUKEBOX (RFC 1813 §2.6: "the
//! client should retry later").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default budget: a quarter of the machine's physical memory (MemTotal of
/// /proc/meminfo, read through `sysconf`), at least 256 MiB and at most 16 GiB
/// (1 GiB if the size cannot be read). A quarter leaves the rest to the page cache
/// the exports are served from, the runtime's threads and what is not charged (TCP
/// connections, per-connection state, idle pooled buffers).
pub fn default_max_memory() -> u64 {
    // SAFETY: sysconf reads a system parameter; no memory is passed.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(pages), Ok(page)) if pages > 0 && page > 0 => {
            (pages.saturating_mul(page) / 4).clamp(256 << 20, 16 << 30)
        }
        _ => 1 << 30,
    }
}

/// At most one warning about refused READs per this period (as the transport's
/// warning about rejected connections): a flood of READs must not flood the log.
const WARNING_PERIOD: Duration = Duration::from_secs(10);

/// READs refused for memory: counted, and logged rate-limited.
#[derive(Debug, Default)]
pub struct Refusals {
    total: AtomicU64,
    log: Mutex<(u64, Option<Instant>)>,
}

impl Refusals {
    /// READs answered NFS3ERR_JUKEBOX because their buffer did not fit the budget.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Counts one refusal of `needed` bytes and warns: at the first, then at most
    /// once per [`WARNING_PERIOD`] with the count since the last warning.
    pub(crate) fn refused(&self, needed: u64, budget: &rpcrdma::memory::MemoryBudget) {
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.0 += 1;
        let now = Instant::now();
        let first = log.1.is_none();
        if first || log.1.is_some_and(|t| now - t >= WARNING_PERIOD) {
            let since = std::mem::take(&mut log.0);
            log.1 = Some(now);
            drop(log);
            tracing::warn!(
                needed,
                charged = budget.used(),
                limit = budget.limit(),
                "READs answered NFS3ERR_JUKEBOX: the server's memory budget (--max-memory) is spent{}: {since} since the last warning, {total} in all",
                if first { " (first; further refusals are summed at most every 10 s)" } else { "" },
            );
        }
    }
}
