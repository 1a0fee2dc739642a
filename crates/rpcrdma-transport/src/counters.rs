//! Per-connection counters, readable while the connection runs and logged when it
//! closes, in the spirit of the `xprt: rdma ...` line of Linux's
//! `/proc/self/mountstats`.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rpcrdma::memory::MemoryBudget;

pub use rpcrdma::stats::Counter;
pub(crate) use rpcrdma::stats::CounterSink;

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
    /// What the connection task last said of its state when asked
    /// ([`StatsRegistry::live_states`]), and when.
    live: Mutex<Option<(Instant, String)>>,
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
            live: Mutex::new(None),
        })
    }

    /// The connection task's account of its state (credits, Receives posted, work
    /// requests in flight, Calls in service and their age, memory charged), written
    /// when [`StatsRegistry::live_states`] asks.
    pub(crate) fn set_live_state(&self, state: String) {
        *lock(&self.live) = Some((Instant::now(), state));
    }

    /// Counts how `mr`, just registered for this connection, is known to the device:
    /// a registration of its own or a share of its pooled buffer's cached one.
    pub(crate) fn count_region(&self, mr: &rdma::MemoryRegion) {
        match mr.registered() {
            rdma::Registered::Device => self.inc(Counter::DeviceRegistrations),
            rdma::Registered::Cached => self.inc(Counter::CachedRegistrations),
            rdma::Registered::Software => {}
        }
    }

    /// The current value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c.index()].load(Ordering::Relaxed)
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
        self.values[c.index()]
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

/// The connections of one transport or server, for reading their counters, and the
/// server's memory budget.
#[derive(Debug, Clone, Default)]
pub struct StatsRegistry {
    conns: Arc<Mutex<Vec<Arc<ConnStats>>>>,
    /// What connections no longer in `conns` counted, and how many they were, so
    /// that totals only grow.
    retired: Arc<Mutex<Retired>>,
    memory: Arc<ServerMemory>,
    /// Bumped to ask every connection task of a server for its live state.
    dump: Arc<DumpRequests>,
}

/// The counts of connections dropped from a registry's list.
#[derive(Debug, Default)]
struct Retired {
    /// By counter index (empty until the first is retired).
    counts: Vec<u64>,
    connections: u64,
}

/// Requests for the connections' live state: a generation number each connection
/// task watches.
#[derive(Debug)]
struct DumpRequests(tokio::sync::watch::Sender<u64>);

impl Default for DumpRequests {
    fn default() -> Self {
        DumpRequests(tokio::sync::watch::channel(0).0)
    }
}

/// One open connection in a state dump ([`StatsRegistry::live_states`]).
#[derive(Debug, Clone)]
pub struct LiveState {
    /// Its counters, read from outside its task.
    pub counters: Snapshot,
    /// What its task said of its state, if it answered in time: a task that does not
    /// answer is itself stuck (in a system call, say).
    pub state: Option<String>,
}

impl fmt::Display for LiveState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.counters)?;
        match &self.state {
            Some(s) => write!(f, "\n  state: {s}"),
            None => write!(f, "\n  state: its task did not answer"),
        }
    }
}

/// A server's memory budget as its counters see it, and its refusals of connections.
#[derive(Debug, Default)]
struct ServerMemory {
    budget: Mutex<Option<Arc<MemoryBudget>>>,
    refusals: Mutex<Throttled>,
}

/// Events of one kind worth a warning (connections refused for memory, connections
/// closed because the device refused a registration): the total, and what the
/// rate-limited warning has not reported yet. The first is reported at once, the
/// rest at most once per [`WARNING_PERIOD`]: a flood of connections must not flood
/// the log, nor go unseen.
#[derive(Debug, Default)]
pub(crate) struct Throttled {
    total: u64,
    unreported: u64,
    last_warning: Option<Instant>,
}

impl Throttled {
    pub(crate) const NEW: Throttled = Throttled {
        total: 0,
        unreported: 0,
        last_warning: None,
    };

    /// Counts one event at `now`. When a warning is due: the events since the last
    /// one (this one included), the total, and a note for the first warning.
    pub(crate) fn count(&mut self, now: Instant) -> Option<(u64, u64, &'static str)> {
        (self.total, self.unreported) = (self.total + 1, self.unreported + 1);
        let note = match self.last_warning {
            Some(t) if now.saturating_duration_since(t) < WARNING_PERIOD => return None,
            Some(_) => "",
            None => " (first; more are summed at most every 10 s)",
        };
        self.last_warning = Some(now);
        Some((std::mem::take(&mut self.unreported), self.total, note))
    }
}

/// At most one warning of a kind per this period (as the iWARP listener's handshake
/// drops).
const WARNING_PERIOD: Duration = Duration::from_secs(10);

/// A server's memory budget at one moment (`RdmaConfig::max_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// The budget in bytes.
    pub limit: u64,
    /// Bytes charged now.
    pub charged: u64,
    /// Most bytes charged at once.
    pub peak: u64,
    /// Charges that failed: Calls that waited for memory, and refusals.
    pub failed_charges: u64,
    /// Connections rejected because their buffers did not fit the budget.
    pub connections_refused: u64,
}

impl fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory: charged={} peak={} limit={} failed_charges={} connections_refused={}",
            self.charged, self.peak, self.limit, self.failed_charges, self.connections_refused
        )
    }
}

impl StatsRegistry {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<ConnStats>>> {
        // A poisoned lock only means a panic elsewhere; the list stays valid.
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add(&self, s: Arc<ConnStats>) {
        let mut v = self.lock();
        // Keep closed connections for reading, but not without bound; their counts
        // stay in the totals.
        if v.len() >= 1024 {
            let mut retired = lock(&self.retired);
            retired.counts.resize(N, 0);
            for c in v.iter().filter(|c| !c.is_open()) {
                for (i, &k) in Counter::ALL.iter().enumerate() {
                    retired.counts[i] += c.get(k);
                }
                retired.connections += 1;
            }
            v.retain(|c| c.is_open());
        }
        v.push(s);
    }

    /// A new connection's counters, in this registry, with what its set-up learned:
    /// the peer's IRD, the inline thresholds in force and the credits asked for.
    pub(crate) fn open(
        &self,
        role: &'static str,
        addr: Option<SocketAddr>,
        peer: &rdma::PeerParams,
        limits: &rpcrdma::private_data::PeerLimits,
        credits: u32,
    ) -> Arc<ConnStats> {
        let stats = ConnStats::new(role, addr);
        stats.set(Counter::PeerIrd, u64::from(peer.ird));
        stats.set(Counter::SendThreshold, u64::from(limits.send_threshold));
        stats.set(Counter::RecvThreshold, u64::from(limits.recv_threshold));
        stats.set(Counter::CreditsRequested, u64::from(credits));
        self.add(stats.clone());
        stats
    }

    /// Snapshots of every connection, oldest first.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.lock().iter().map(|c| c.snapshot()).collect()
    }

    /// Asks every open connection's task for its state, waits up to `wait` for the
    /// answers, and returns each open connection with its counters and its answer.
    pub async fn live_states(&self, wait: Duration) -> Vec<LiveState> {
        let asked = Instant::now();
        self.dump.0.send_modify(|n| *n = n.wrapping_add(1));
        let answered = |c: &ConnStats| lock(&c.live).as_ref().is_some_and(|(t, _)| *t >= asked);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let all = self
                .lock()
                .iter()
                .filter(|c| c.is_open())
                .all(|c| answered(c));
            if all || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.lock()
            .iter()
            .filter(|c| c.is_open())
            .map(|c| LiveState {
                counters: c.snapshot(),
                state: lock(&c.live)
                    .as_ref()
                    .filter(|(t, _)| *t >= asked)
                    .map(|(_, s)| s.clone()),
            })
            .collect()
    }

    /// Where a connection task learns that its state is asked for.
    pub(crate) fn dump_requests(&self) -> tokio::sync::watch::Receiver<u64> {
        self.dump.0.subscribe()
    }

    /// The most recent connection's counters.
    pub fn latest(&self) -> Option<Snapshot> {
        self.lock().last().map(|c| c.snapshot())
    }

    /// The sum of counter `c` over every connection this registry has had, closed
    /// ones included; of a gauge ([`Counter::is_gauge`]), over the open ones.
    pub fn total(&self, c: Counter) -> u64 {
        let conns = self.lock();
        if c.is_gauge() {
            return conns.iter().filter(|s| s.is_open()).map(|s| s.get(c)).sum();
        }
        let retired = lock(&self.retired)
            .counts
            .get(c.index())
            .copied()
            .unwrap_or(0);
        retired + conns.iter().map(|s| s.get(c)).sum::<u64>()
    }

    /// Connections open now, and every connection this registry has had.
    pub fn connections(&self) -> (u64, u64) {
        let conns = self.lock();
        let open = conns.iter().filter(|s| s.is_open()).count() as u64;
        (open, lock(&self.retired).connections + conns.len() as u64)
    }

    /// The server's memory budget now; `None` for a client's registry.
    pub fn memory(&self) -> Option<MemoryStats> {
        let budget = lock(&self.memory.budget).clone()?;
        Some(MemoryStats {
            limit: budget.limit(),
            charged: budget.used(),
            peak: budget.peak(),
            failed_charges: budget.refused(),
            connections_refused: lock(&self.memory.refusals).total,
        })
    }

    pub(crate) fn set_memory(&self, budget: Arc<MemoryBudget>) {
        *lock(&self.memory.budget) = Some(budget);
    }

    /// Counts a connection refused because its `needed` bytes of buffers did not fit
    /// the budget, and warns: at the first refusal, then at most once per
    /// [`WARNING_PERIOD`] with the count since the last warning ([`Throttled`]).
    pub(crate) fn connection_refused(&self, peer: Option<SocketAddr>, needed: u64) {
        let Some((since, total, note)) = lock(&self.memory.refusals).count(Instant::now()) else {
            return tracing::debug!(target: "rpcrdma_transport", peer = ?peer, needed, "RDMA connection rejected: memory budget spent");
        };
        let memory = self.memory().map(|m| m.to_string()).unwrap_or_default();
        tracing::warn!(
            target: "rpcrdma_transport",
            latest_peer = ?peer,
            needed,
            "RDMA connections rejected: the server's memory budget is spent{note}: {since} since the last warning, {total} in all; {memory}",
        );
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; the data stays valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection's counters, as the state machines of `rpcrdma` and the transport
/// count into them.
impl CounterSink for ConnStats {
    fn add(&self, c: Counter, n: u64) {
        self.values[c.index()].fetch_add(n, Ordering::Relaxed);
    }

    fn set(&self, c: Counter, v: u64) {
        self.values[c.index()].store(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first event warns at once; later ones at most once per period, with the
    /// count since the last warning; the total counts every one.
    #[test]
    fn throttled_warnings_report_the_first_then_sums_per_period() {
        let t0 = Instant::now();
        let mut w = Throttled::NEW;
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            w.count(at(0)),
            Some((1, 1, " (first; more are summed at most every 10 s)"))
        );
        for ms in [1, 500, 9_999] {
            assert_eq!(w.count(at(ms)), None, "within the period, at {ms} ms");
        }
        assert_eq!(w.count(at(10_000)), Some((4, 5, "")));
        assert_eq!(w.count(at(15_000)), None);
        assert_eq!(w.count(at(20_001)), Some((2, 7, "")));
    }

    /// Totals only grow: closed connections dropped from the list (past 1024) keep
    /// their counts; gauges are summed over open connections only.
    #[test]
    fn totals_keep_the_counts_of_dropped_connections() {
        let r = StatsRegistry::default();
        for _ in 0..1500 {
            let c = ConnStats::new("server", None);
            c.add(Counter::SendBytes, 10);
            c.set(Counter::CreditsGranted, 8);
            r.add(c.clone());
            c.close();
        }
        let open = ConnStats::new("server", None);
        open.add(Counter::SendBytes, 1);
        open.set(Counter::CreditsGranted, 32);
        r.add(open);
        assert!(r.lock().len() < 1500, "closed connections were dropped");
        assert_eq!(r.total(Counter::SendBytes), 15_001);
        assert_eq!(r.total(Counter::CreditsGranted), 32);
        assert_eq!(r.connections(), (1, 1501));
    }
}
