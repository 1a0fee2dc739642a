//! The server's one memory budget (issue 16, `--max-memory`): a
//! [`rpcrdma::memory::MemoryBudget`] shared by the NFS/RDMA transport (each
//! connection's Receive and Send buffers, the data of WRITEs pulled by RDMA Read), the
//! TCP servers ([`TcpMemory`]: each connection's read buffer, the call records in
//! service) and the NFS program (READ reply buffers, directory listings). Nothing
//! charged to it is allocated past its limit: a new RDMA or TCP connection that does
//! not fit is rejected (RDMA) or closed (TCP), a WRITE's data waits in line, a READ or
//! listing that does not fit is answered NFS3ERR_JUKEBOX (RFC 1813 §2.6: "the client should retry
//! later").
#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncrpc::server::{Charging, ConnectionMemory, Held};
use rpcrdma::memory::MemoryBudget;

/// The default budget: a quarter of the machine's physical memory (MemTotal of
/// /proc/meminfo, read through `sysconf`), at least 256 MiB and at most 16 GiB
/// (1 GiB if the size cannot be read). A quarter leaves the rest to the page cache
/// the exports are served from, the runtime's threads and what is not charged
/// (per-connection state beyond buffers, idle pooled buffers, queued TCP replies).
pub fn default_max_memory() -> u64 {
    match physical_memory() {
        Some(ram) => (ram / 4).clamp(256 << 20, 16 << 30),
        None => 1 << 30,
    }
}

/// The machine's physical memory in bytes (MemTotal of /proc/meminfo, read through
/// `sysconf`), if it can be read.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf reads a system parameter; no memory is passed.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(pages), Ok(page)) if pages > 0 && page > 0 => Some(pages.saturating_mul(page)),
        _ => None,
    }
}

/// At most one warning about refused READs per this period (as the transport's
/// warning about rejected connections): a flood of READs must not flood the log.
const WARNING_PERIOD: Duration = Duration::from_secs(10);

/// Work refused for memory (READs, TCP connections): counted, and logged
/// rate-limited.
#[derive(Debug)]
pub struct Refusals {
    /// What was refused and how, for the log: "READs answered NFS3ERR_JUKEBOX".
    what: &'static str,
    total: AtomicU64,
    log: Mutex<(u64, Option<Instant>)>,
}

impl Refusals {
    /// Counts refusals of `what`.
    pub fn new(what: &'static str) -> Refusals {
        Refusals {
            what,
            total: AtomicU64::new(0),
            log: Mutex::new((0, None)),
        }
    }

    /// Refusals so far (READs: answered NFS3ERR_JUKEBOX because their buffer did
    /// not fit the budget).
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
                "{}: the server's memory budget (--max-memory) is spent{}: {since} since the last warning, {total} in all",
                self.what,
                if first { " (first; further refusals are summed at most every 10 s)" } else { "" },
            );
        }
    }
}

/// The budget as the TCP servers charge it ([`oncrpc::server::ConnectionMemory`]):
/// a connection is admitted as an RDMA one is (never into the last `keep_free`
/// bytes, never past waiting charges), a call record waits in line with the WRITEs
/// over RDMA.
#[derive(Debug)]
pub struct TcpMemory {
    budget: Arc<MemoryBudget>,
    /// Room connections never take: one whole call record's worth, so that idle
    /// connections cannot keep every call waiting.
    keep_free: u64,
    /// TCP connections closed at accept.
    pub refusals: Refusals,
}

impl TcpMemory {
    /// Charges to `budget`, admitting connections only while `keep_free` bytes stay.
    pub fn new(budget: Arc<MemoryBudget>, keep_free: u64) -> TcpMemory {
        TcpMemory {
            budget,
            keep_free,
            refusals: Refusals::new("TCP connections closed at accept"),
        }
    }

    /// The budget charged.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }
}

impl ConnectionMemory for TcpMemory {
    fn admit(&self, peer: SocketAddr, bytes: u64) -> Option<Held> {
        match self.budget.try_charge_now(bytes, self.keep_free) {
            Some(charge) => Some(Box::new(charge)),
            None => {
                tracing::debug!(%peer, bytes, "TCP connection refused: memory budget spent");
                self.refusals.refused(bytes, &self.budget);
                None
            }
        }
    }

    fn charge(&self, bytes: u64) -> Charging {
        if bytes > self.budget.limit() {
            return Charging::Now(None);
        }
        let mut waiter = match self.budget.try_charge(bytes) {
            Ok(charge) => return Charging::Now(Some(Box::new(charge))),
            Err(waiter) => waiter,
        };
        let budget = self.budget.clone();
        Charging::Later(Box::pin(async move {
            loop {
                let since = waiter.wait().1;
                std::future::poll_fn(|cx| budget.poll_released(since, cx)).await;
                match waiter.try_charge(bytes) {
                    Ok(charge) => return Some(Box::new(charge) as Held),
                    Err(again) => waiter = again,
                }
            }
        }))
    }
}
