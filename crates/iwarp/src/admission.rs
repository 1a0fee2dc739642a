//! Admission of MPA handshakes at a listener (sans-IO: no socket, no clock).
//!
//! Between TCP accept and a complete MPA Request (RFC 5044 §7.1) a peer has proven
//! nothing but a TCP handshake, yet holds a socket and a task. Peers that connect and
//! then stall must not be able to lock honest peers out, so there is no fixed pool
//! of slots that stalled peers can fill and wait on. Instead:
//!
//! - **A deadline** ([`HandshakeLimits::request_timeout`], 5 s): an honest initiator
//!   sends its MPA Request right after TCP connect. Linux siw as the responder waits
//!   5 s for it (`drivers/infiniband/sw/siw/siw_cm.h`: "Reponder waits for 5 seconds
//!   for MPA request to arrive if new TCP connection was set up", `MPAREP_TIMEOUT`).
//! - **A per-source cap** ([`HandshakeLimits::per_source`], 16): one source address
//!   (an IPv4 address, or an IPv6 /64, what one host usually holds) has at most this
//!   many handshakes in progress; a new one from a source at its cap drops that
//!   source's oldest handshake.
//! - **A global cap that never stops accept** ([`HandshakeLimits::max_pending`],
//!   4096): when it is reached, a new connection drops the oldest handshake of the
//!   source with the most handshakes in progress, instead of waiting.
//!
//! Dropping the oldest, rather than refusing the newest, is what keeps an honest peer
//! in: its MPA Request follows its TCP handshake within a round trip, so its
//! handshake is among the youngest, and only a peer that opens more handshakes from
//! the same source (or, at the global cap, a flood from many sources) than the
//! caps allow within that round trip can push it out. A stalled peer that renews its
//! connections only keeps dropping its own.
//!
//! [`Admission`] keeps the books (who is in progress, whom to drop); the driver
//! (`IwarpListener`) runs one task per handshake and cancels the ones named here.
//! [`DropLog`] rate-limits the log lines about dropped handshakes.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Limits on MPA handshakes in progress at one listener (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Time from TCP accept to a complete MPA Request; then the connection is
    /// closed. Default 5 s (Linux siw as the responder waits 5 s).
    pub request_timeout: Duration,
    /// Handshakes in progress from one source (an IPv4 address, an IPv6 /64);
    /// one more drops that source's oldest. Default 16. At least 1.
    pub per_source: usize,
    /// Handshakes in progress in all; one more drops the oldest handshake of the
    /// source with the most in progress. Default 4096. At least 1. Each holds a
    /// file descriptor: keep it well under the process's open file limit
    /// (`RLIMIT_NOFILE`); running out of descriptors drops handshakes the same way.
    pub max_pending: usize,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        HandshakeLimits {
            request_timeout: Duration::from_secs(5),
            per_source: 16,
            max_pending: 4096,
        }
    }
}

/// Whose handshakes count together: an IPv4 address, or an IPv6 /64 (an
/// IPv4-mapped IPv6 address counts as its IPv4 address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    /// The source of a peer at `addr`.
    pub fn of(addr: SocketAddr) -> Source {
        match addr.ip().to_canonical() {
            IpAddr::V4(a) => Source(IpAddr::V4(a)),
            IpAddr::V6(a) => {
                let prefix = u128::from(a) & !((1u128 << 64) - 1);
                Source(IpAddr::V6(prefix.into()))
            }
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// Identifies one handshake in progress.
pub type HandshakeId = u64;

/// Why a handshake was dropped before its MPA Request was complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Its source opened more than [`HandshakeLimits::per_source`].
    PerSource,
    /// All sources together reached [`HandshakeLimits::max_pending`].
    Global,
    /// The process ran out of file descriptors (or socket buffers) to accept with.
    Descriptors,
    /// No complete MPA Request within [`HandshakeLimits::request_timeout`].
    Timeout,
}

/// The outcome of admitting a new handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Admitted {
    /// The new handshake.
    pub id: HandshakeId,
    /// A handshake to cancel (close its connection) to make room, and why.
    pub evict: Option<(HandshakeId, Source, DropReason)>,
}

/// The handshakes in progress at one listener, by source, oldest first.
///
/// Bounds: at most [`HandshakeLimits::max_pending`] entries; admitting is O(1)
/// except at the global cap, where finding the most represented source is O(number
/// of sources).
#[derive(Debug)]
pub struct Admission {
    limits: HandshakeLimits,
    next_id: HandshakeId,
    /// Every source with a handshake in progress (no empty queues), ids in admission
    /// order (oldest first).
    by_source: HashMap<Source, VecDeque<HandshakeId>>,
    /// Sum of the queue lengths.
    total: usize,
}

impl Admission {
    /// An empty table with `limits` (caps of 0 count as 1).
    pub fn new(limits: HandshakeLimits) -> Admission {
        Admission {
            limits: HandshakeLimits {
                per_source: limits.per_source.max(1),
                max_pending: limits.max_pending.max(1),
                ..limits
            },
            next_id: 0,
            by_source: HashMap::new(),
            total: 0,
        }
    }

    /// Handshakes in progress.
    pub fn len(&self) -> usize {
        self.total
    }

    /// No handshake in progress.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Handshakes in progress from `source`.
    pub fn from_source(&self, source: Source) -> usize {
        self.by_source.get(&source).map_or(0, VecDeque::len)
    }

    /// Admits a new handshake from `source`, naming the one to drop if a cap is
    /// reached: that source's oldest at the per-source cap, else at the global cap
    /// the oldest of the source with the most in progress.
    pub fn admit(&mut self, source: Source) -> Admitted {
        let evict = if self.from_source(source) >= self.limits.per_source {
            self.pop_oldest(source)
                .map(|id| (id, source, DropReason::PerSource))
        } else if self.total >= self.limits.max_pending {
            self.evict_one(DropReason::Global)
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        self.by_source.entry(source).or_default().push_back(id);
        self.total += 1;
        Admitted { id, evict }
    }

    /// Removes the oldest handshake of the source with the most in progress (ties:
    /// the source whose oldest is oldest), to free its resources for `reason`.
    pub fn evict_one(&mut self, reason: DropReason) -> Option<(HandshakeId, Source, DropReason)> {
        let source = self
            .by_source
            .iter()
            .max_by_key(|(_, q)| (q.len(), std::cmp::Reverse(q.front().copied())))
            .map(|(s, _)| *s)?;
        self.pop_oldest(source).map(|id| (id, source, reason))
    }

    /// Forgets a handshake that ended (complete, failed, timed out, cancelled).
    /// Forgetting one that is not in progress does nothing.
    pub fn finish(&mut self, id: HandshakeId, source: Source) {
        if let Some(q) = self.by_source.get_mut(&source) {
            if let Some(i) = q.iter().position(|&x| x == id) {
                q.remove(i);
                self.total -= 1;
                if q.is_empty() {
                    self.by_source.remove(&source);
                }
            }
        }
    }

    fn pop_oldest(&mut self, source: Source) -> Option<HandshakeId> {
        let q = self.by_source.get_mut(&source)?;
        let id = q.pop_front()?;
        self.total -= 1;
        if q.is_empty() {
            self.by_source.remove(&source);
        }
        Some(id)
    }
}

/// Counts dropped handshakes and says when to log them: a warning for the first
/// drop, then at most one per [`DropLog::PERIOD`] with the counts since the last
/// one, and a debug line for each of the first [`DropLog::DEBUG_PER_PERIOD`] drops
/// after each warning, so that a peer that makes the listener drop handshakes cannot
/// flood the log.
#[derive(Debug, Default)]
pub struct DropLog {
    last_warning: Option<Instant>,
    /// Drops since the last warning: per-source cap, global cap, descriptors,
    /// timeouts.
    counts: [u64; 4],
    debug_lines: u32,
}

/// Drops counted since the previous warning, for one warning line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropSummary {
    /// Time since the previous warning (`None`: the first).
    pub since: Option<Duration>,
    /// Dropped at the per-source cap.
    pub per_source: u64,
    /// Dropped at the global cap.
    pub global: u64,
    /// Dropped for lack of file descriptors.
    pub descriptors: u64,
    /// Timed out.
    pub timeout: u64,
    /// The source of this drop (the latest).
    pub last: Source,
}

impl DropLog {
    /// Shortest time between two warnings.
    pub const PERIOD: Duration = Duration::from_secs(10);
    /// Debug lines (one per drop) after each warning; later drops are only counted.
    pub const DEBUG_PER_PERIOD: u32 = 10;

    /// Counts a drop at `now`. Returns whether to log this drop at debug level, and
    /// a summary to log as a warning when one is due.
    pub fn record(
        &mut self,
        now: Instant,
        source: Source,
        reason: DropReason,
    ) -> (bool, Option<DropSummary>) {
        self.counts[reason as usize] += 1;
        let since = self.last_warning.map(|t| now.saturating_duration_since(t));
        if since.is_some_and(|d| d < Self::PERIOD) {
            let debug = self.debug_lines < Self::DEBUG_PER_PERIOD;
            self.debug_lines += u32::from(debug);
            return (debug, None);
        }
        let [per_source, global, descriptors, timeout] = self.counts;
        self.counts = [0; 4];
        self.last_warning = Some(now);
        self.debug_lines = 0;
        let summary = DropSummary {
            since,
            per_source,
            global,
            descriptors,
            timeout,
            last: source,
        };
        (false, Some(summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(s: &str) -> Source {
        Source::of(SocketAddr::new(s.parse().unwrap(), 9))
    }

    fn limits(per_source: usize, max_pending: usize) -> HandshakeLimits {
        HandshakeLimits {
            per_source,
            max_pending,
            ..HandshakeLimits::default()
        }
    }

    #[test]
    fn ipv6_sources_are_grouped_by_64_and_mapped_ipv4_is_ipv4() {
        assert_eq!(src("2001:db8:1:2::1"), src("2001:db8:1:2:ffff::9"));
        assert_ne!(src("2001:db8:1:2::1"), src("2001:db8:1:3::1"));
        assert_eq!(src("::ffff:192.0.2.7"), src("192.0.2.7"));
        assert_ne!(src("192.0.2.7"), src("192.0.2.8"));
        assert_eq!(src("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn a_source_at_its_cap_drops_its_own_oldest() {
        let mut a = Admission::new(limits(3, 100));
        let ids: Vec<_> = (0..3).map(|_| a.admit(src("10.0.0.1"))).collect();
        assert!(ids.iter().all(|x| x.evict.is_none()));
        let other = a.admit(src("10.0.0.2"));
        assert_eq!(other.evict, None);
        let next = a.admit(src("10.0.0.1"));
        assert_eq!(
            next.evict,
            Some((ids[0].id, src("10.0.0.1"), DropReason::PerSource))
        );
        assert_eq!(a.from_source(src("10.0.0.1")), 3);
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn at_the_global_cap_the_most_represented_source_loses_its_oldest() {
        let mut a = Admission::new(limits(10, 5));
        let first_b = a.admit(src("10.0.0.2")).id;
        let first_a = a.admit(src("10.0.0.1")).id;
        for _ in 0..2 {
            assert_eq!(a.admit(src("10.0.0.1")).evict, None);
        }
        assert_eq!(a.admit(src("10.0.0.2")).evict, None);
        // Full (a: 3, b: 2): a newcomer pushes out a's oldest, not b's older one.
        let c = a.admit(src("10.0.0.3"));
        assert_eq!(
            c.evict,
            Some((first_a, src("10.0.0.1"), DropReason::Global))
        );
        assert_eq!(a.len(), 5);
        // a: 2, b: 2, c: 1; a tie goes to the source whose oldest is oldest (b).
        let d = a.admit(src("10.0.0.4"));
        assert_eq!(
            d.evict,
            Some((first_b, src("10.0.0.2"), DropReason::Global))
        );
    }

    #[test]
    fn the_global_cap_never_refuses_a_newcomer() {
        let mut a = Admission::new(limits(16, 64));
        // 1,000 handshakes from 100 sources through a table of 64.
        for i in 0..1000u32 {
            let s = src(&format!("10.0.{}.{}", i % 100 / 50, i % 50));
            let adm = a.admit(s);
            assert!(a.len() <= 64);
            assert_eq!(adm.evict.is_some(), i >= 64, "at {i}");
        }
        // An honest newcomer from a fresh source is in.
        let h = a.admit(src("192.0.2.1"));
        assert_eq!(a.from_source(src("192.0.2.1")), 1);
        assert_ne!(h.evict.map(|e| e.1), Some(src("192.0.2.1")));
    }

    #[test]
    fn finish_forgets_once_and_tolerates_the_evicted() {
        let mut a = Admission::new(limits(1, 10));
        let x = a.admit(src("10.0.0.1"));
        let y = a.admit(src("10.0.0.1"));
        assert_eq!(y.evict.map(|e| e.0), Some(x.id));
        a.finish(x.id, src("10.0.0.1"));
        assert_eq!(a.len(), 1);
        a.finish(y.id, src("10.0.0.1"));
        a.finish(y.id, src("10.0.0.1"));
        assert!(a.is_empty());
        assert_eq!(a.from_source(src("10.0.0.1")), 0);
    }

    #[test]
    fn drop_log_warns_at_once_then_once_per_period() {
        let mut log = DropLog::default();
        let t0 = Instant::now();
        let s = src("10.0.0.1");
        let (_, warn) = log.record(t0, s, DropReason::PerSource);
        let w = warn.expect("the first drop is reported at once");
        assert_eq!((w.since, w.per_source), (None, 1));
        let mut debug_lines = 0;
        for i in 1..10_000u64 {
            let (debug, warn) = log.record(t0 + Duration::from_micros(i), s, DropReason::Timeout);
            debug_lines += u32::from(debug);
            assert_eq!(warn, None);
        }
        assert_eq!(debug_lines, DropLog::DEBUG_PER_PERIOD);
        let (_, warn) = log.record(t0 + DropLog::PERIOD, s, DropReason::Global);
        let w = warn.expect("a warning after a period");
        assert_eq!((w.per_source, w.timeout, w.global), (0, 9_999, 1));
        assert_eq!((w.since, w.last), (Some(DropLog::PERIOD), s));
        let (debug, warn) = log.record(t0 + DropLog::PERIOD, s, DropReason::Global);
        assert!(debug);
        assert_eq!(warn, None);
    }
}
