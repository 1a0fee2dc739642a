//! Per-procedure call counts and service-time histograms, kept by the
//! [`Dispatcher`](crate::Dispatcher) for every transport that feeds it (one
//! [`CallMetrics`] may be shared by a server's TCP and RDMA dispatchers, as one reply
//! cache is).
//!
//! What is counted: every call routed to a service (its program and version are
//! served), when its handler returns: by procedure, with the time from routing to
//! the encoded reply, and as an error when the reply is not SUCCESS (PROC_UNAVAIL,
//! GARBAGE_ARGS, SYSTEM_ERR) or there is none. Calls answered from the duplicate
//! request cache are not calls here (the cache counts them, `drc::CacheStats`);
//! calls refused before routing (RPC_MISMATCH, AUTH_ERROR, PROG_UNAVAIL,
//! PROG_MISMATCH) are counted per transport by the reason, not here.
//!
//! Bounded whatever clients send: each (program, version) served gets a table of
//! [`PROCEDURES`] procedures, made when it is registered; a procedure number past
//! the table is counted in one `other` row. The hot path takes no lock: a dispatcher
//! holds its versions' tables, and counting is a few relaxed atomic additions.
//!
//! A service whose procedure carries operations of its own (NFSv4's COMPOUND) keeps
//! a second kind of table here, [`CallMetrics::operations`]: per operation, how
//! many ran and how many failed, counted by the service (no clock read per
//! operation: the COMPOUND's time is the call's).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Procedure numbers with a row of their own (0..PROCEDURES); NFSv3 has 22, NLM v4
/// 24, NSM 7, MOUNT 6, NFSv4 2.
pub const PROCEDURES: usize = 32;

/// Upper bounds of the service-time histogram's buckets, in microseconds (the last,
/// unbounded bucket is implied): from a cached GETATTR to a WRITE waiting on a disk.
pub const BUCKETS_MICROS: [u64; 16] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];

/// One procedure's counters.
#[derive(Debug, Default)]
pub struct ProcedureStats {
    calls: AtomicU64,
    errors: AtomicU64,
    /// Calls whose service time fell in each bucket ([`BUCKETS_MICROS`], then the
    /// unbounded one); not cumulative.
    buckets: [AtomicU64; BUCKETS_MICROS.len() + 1],
    micros: AtomicU64,
}

impl ProcedureStats {
    fn record(&self, took: Duration, ok: bool) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_MICROS.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.micros.fetch_add(us, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> ProcedureSnapshot {
        ProcedureSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            micros: self.micros.load(Ordering::Relaxed),
        }
    }
}

/// The counters of one (program, version): [`PROCEDURES`] rows (or as many as
/// [`CallMetrics::operations`] was given) and `other`.
#[derive(Debug)]
pub struct VersionStats {
    procedures: Box<[ProcedureStats]>,
    other: ProcedureStats,
    /// The procedures' names, from the service registered for the version.
    names: std::sync::OnceLock<Box<[Option<&'static str>]>>,
}

impl Default for VersionStats {
    fn default() -> Self {
        VersionStats::with_rows(PROCEDURES)
    }
}

impl VersionStats {
    /// A table of `rows` numbered rows and `other`.
    fn with_rows(rows: usize) -> VersionStats {
        VersionStats {
            procedures: (0..rows).map(|_| ProcedureStats::default()).collect(),
            other: ProcedureStats::default(),
            names: std::sync::OnceLock::new(),
        }
    }

    fn row(&self, proc_: u32) -> &ProcedureStats {
        self.procedures.get(proc_ as usize).unwrap_or(&self.other)
    }

    /// Counts one call of `proc_` that took `took`; `ok`: answered SUCCESS.
    pub fn record(&self, proc_: u32, took: Duration, ok: bool) {
        self.row(proc_).record(took, ok);
    }

    /// Counts one operation `op` that ran, without a time; `ok`: it succeeded.
    pub fn count(&self, op: u32, ok: bool) {
        let row = self.row(op);
        row.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            row.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Names the procedures by `name` (the service's
    /// [`crate::Service::procedure_name`]); the first naming stays.
    pub fn name_procedures(&self, name: impl Fn(u32) -> Option<&'static str>) {
        let _ = self
            .names
            .set((0..self.procedures.len()).map(|p| name(p as u32)).collect());
    }

    /// Its rows called at least once, numbered rows first, `other` last.
    fn rows(&self, prog: u32, vers: u32) -> impl Iterator<Item = ProcedureRow> + '_ {
        let numbered = self
            .procedures
            .iter()
            .enumerate()
            .map(|(i, p)| (Some(i as u32), p));
        numbered
            .chain([(None, &self.other)])
            .filter_map(move |(proc_, p)| {
                let stats = p.snapshot();
                (stats.calls > 0).then(|| ProcedureRow {
                    prog,
                    vers,
                    proc_,
                    name: proc_.and_then(|p| *self.names.get()?.get(p as usize)?),
                    stats,
                })
            })
    }
}

/// Counts and histograms of every (program, version) registered on the
/// dispatchers that share it.
#[derive(Debug, Default)]
pub struct CallMetrics {
    versions: Mutex<BTreeMap<(u32, u32), Arc<VersionStats>>>,
    operations: Mutex<BTreeMap<(u32, u32), Arc<VersionStats>>>,
}

/// What one procedure counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcedureSnapshot {
    /// Calls served.
    pub calls: u64,
    /// Of them, answered other than SUCCESS or not at all.
    pub errors: u64,
    /// Calls per service-time bucket ([`BUCKETS_MICROS`], then the unbounded one).
    pub buckets: [u64; BUCKETS_MICROS.len() + 1],
    /// Total service time in microseconds.
    pub micros: u64,
}

/// A procedure's row in [`CallMetrics::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcedureRow {
    /// Program number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure number; `None` for the `other` row (numbers past [`PROCEDURES`]).
    pub proc_: Option<u32>,
    /// Its name, if the service gave one.
    pub name: Option<&'static str>,
    /// Its counters.
    pub stats: ProcedureSnapshot,
}

impl CallMetrics {
    /// No counters yet.
    pub fn new() -> CallMetrics {
        CallMetrics::default()
    }

    /// The table of (`prog`, `vers`), made on first use.
    pub fn version(&self, prog: u32, vers: u32) -> Arc<VersionStats> {
        let mut v = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        v.entry((prog, vers)).or_default().clone()
    }

    /// The operation table of (`prog`, `vers`) with `rows` numbered rows (larger
    /// operation numbers count as `other`), made on first use; its rows are named
    /// by `name`.
    pub fn operations(
        &self,
        prog: u32,
        vers: u32,
        rows: usize,
        name: impl Fn(u32) -> Option<&'static str>,
    ) -> Arc<VersionStats> {
        let mut v = self.operations.lock().unwrap_or_else(|p| p.into_inner());
        let table = v
            .entry((prog, vers))
            .or_insert_with(|| Arc::new(VersionStats::with_rows(rows)));
        table.name_procedures(name);
        table.clone()
    }

    /// Every procedure that has been called at least once, in (program, version,
    /// procedure) order, `other` last in its version.
    pub fn snapshot(&self) -> Vec<ProcedureRow> {
        Self::rows_of(&self.versions)
    }

    /// Every operation ([`CallMetrics::operations`]) that has run at least once, in
    /// the same order; their `stats` hold calls and errors only.
    pub fn operation_snapshot(&self) -> Vec<ProcedureRow> {
        Self::rows_of(&self.operations)
    }

    fn rows_of(tables: &Mutex<BTreeMap<(u32, u32), Arc<VersionStats>>>) -> Vec<ProcedureRow> {
        let tables: Vec<((u32, u32), Arc<VersionStats>)> = {
            let v = tables.lock().unwrap_or_else(|p| p.into_inner());
            v.iter().map(|(k, s)| (*k, s.clone())).collect()
        };
        tables
            .iter()
            .flat_map(|((prog, vers), s)| s.rows(*prog, *vers).collect::<Vec<_>>())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_procedure_and_bucket() {
        let m = CallMetrics::new();
        let v = m.version(100003, 3);
        v.record(1, Duration::from_micros(20), true);
        v.record(1, Duration::from_micros(25), true);
        v.record(1, Duration::from_micros(26), false);
        v.record(7, Duration::from_secs(60), true);
        v.record(u32::MAX, Duration::ZERO, false);
        let rows = m.snapshot();
        assert_eq!(rows.len(), 3);
        let getattr = rows[0];
        assert_eq!(
            (getattr.prog, getattr.vers, getattr.proc_),
            (100003, 3, Some(1))
        );
        assert_eq!((getattr.stats.calls, getattr.stats.errors), (3, 1));
        // 20 and 25 us in the first bucket (<= 25), 26 in the second.
        assert_eq!(&getattr.stats.buckets[..3], &[2, 1, 0]);
        assert_eq!(getattr.stats.micros, 71);
        let write = rows[1];
        assert_eq!(write.proc_, Some(7));
        assert_eq!(
            write.stats.buckets[BUCKETS_MICROS.len()],
            1,
            "past every bound"
        );
        assert_eq!((rows[2].proc_, rows[2].stats.errors), (None, 1));
    }

    #[test]
    fn one_table_per_version_shared() {
        let m = CallMetrics::new();
        m.version(100003, 3).record(0, Duration::ZERO, true);
        m.version(100003, 3).record(0, Duration::ZERO, true);
        m.version(100003, 4).record(0, Duration::ZERO, true);
        let rows = m.snapshot();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].stats.calls, 2);
    }

    #[test]
    fn operations_are_counted_apart_from_procedures_and_named() {
        let m = CallMetrics::new();
        let name = |op| (op == 25).then_some("READ");
        let ops = m.operations(100003, 4, 72, name);
        ops.count(25, true);
        ops.count(25, false);
        ops.count(70, true);
        ops.count(10044, false);
        assert!(m.snapshot().is_empty(), "no procedure was called");
        // The same table for a second server over the same exports.
        assert!(Arc::ptr_eq(&ops, &m.operations(100003, 4, 72, name)));
        let rows = m.operation_snapshot();
        let seen: Vec<_> = rows
            .iter()
            .map(|r| (r.proc_, r.name, r.stats.calls, r.stats.errors))
            .collect();
        assert_eq!(
            seen,
            [
                (Some(25), Some("READ"), 2, 1),
                (Some(70), None, 1, 0),
                (None, None, 1, 1)
            ]
        );
        assert_eq!(rows[0].stats.buckets, [0; BUCKETS_MICROS.len() + 1]);
    }
}
