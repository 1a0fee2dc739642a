//! Liveness of one connection, of either role (issue 31): a connection that has work
//! outstanding and makes no progress is never silent, and one stuck on its own work
//! requests is closed, so that the client reconnects and retransmits instead of both
//! sides waiting forever. The judgement is here, sans IO, beside the core's other
//! timers; the connection task (rpcrdma-transport's driver) counts progress, calls
//! [`Watchdog::tick`] every [`Watchdog::period`] and logs or closes as it says.
//!
//! Progress is anything that moves a Call along: a completion of any kind, a Reply
//! from the dispatcher. The connection task only bumps a counter for it (no clock read
//! per turn); a [`Watchdog`] tick every quarter of the stall timeout
//! (rpcrdma-transport's `RdmaConfig::stall_timeout`) compares it with the last tick's. A connection that is busy ([`Waiting::is_idle`]
//! false) and made no progress for two ticks is logged once, with what it waits for;
//! after four ticks (the whole `stall_timeout`) it is closed when what it waits for
//! is its own posted work (Sends, RDMA Reads, local invalidations that the provider
//! never completed): a new connection clears that, since the client retransmits every
//! outstanding Call on it (Linux xprtrdma does, with the same XIDs). A wait for the
//! dispatcher (a file system that hangs), for the memory budget, for the server's
//! Replies to a client's Calls or for the peer's backward Replies is only logged: a
//! new connection would wait the same.
//!
//! Why a quarter: the stall is then seen between `stall_timeout` and 1.25 x it, and
//! warned about from half of it on, before a Linux client's own retransmit timeout
//! (`timeo`, 60 s by default for NFS over TCP and RDMA) when `stall_timeout` is that
//! default.

use std::fmt;
use std::time::{Duration, Instant};

/// Ticks without progress before the warning.
const TICKS_TO_WARN: u32 = 2;
/// Ticks without progress before a connection stuck on its own work requests is closed.
const TICKS_TO_CLOSE: u32 = 4;

/// What a busy connection waits for, at one moment: the connection task fills it in
/// from its own tables and the protocol core's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Calls received and not answered (the core's).
    pub calls: usize,
    /// Credits granted now (the core's target).
    pub credits: u32,
    /// Receives posted now.
    pub recvs_posted: usize,
    /// Calls handed to the dispatcher and not answered.
    pub in_dispatcher: usize,
    /// The age of the oldest Call in the dispatcher.
    pub oldest_dispatch: Option<Duration>,
    /// RDMA Reads posted and not completed.
    pub reads: usize,
    /// The age of the oldest Read chunk being pulled.
    pub oldest_read: Option<Duration>,
    /// Sends posted and not completed.
    pub sends: usize,
    /// Local invalidations posted and not completed.
    pub invalidations: usize,
    /// A Call waits for the server's memory budget.
    pub memory_wait: bool,
    /// Our backward Calls waiting for the peer's Reply.
    pub backward: usize,
    /// Bytes of the memory budget this connection's buffers hold.
    pub charged: u64,
}

impl Waiting {
    /// Nothing is outstanding: the connection waits for the peer's next Call, which is
    /// not a stall.
    pub fn is_idle(&self) -> bool {
        self.calls == 0
            && self.in_dispatcher == 0
            && self.reads == 0
            && self.sends == 0
            && self.invalidations == 0
            && self.backward == 0
    }

    /// Work requests posted to the provider and not completed: a stall there is the
    /// provider's, the fabric's or the peer's RDMA layer's, and a new connection clears
    /// it.
    pub fn on_work_requests(&self) -> bool {
        self.reads + self.sends + self.invalidations > 0
    }
}

impl fmt::Display for Waiting {
    /// `calls=2 credits=8 recvs_posted=6 in_dispatcher=1 (oldest 41.0s) reads=0
    /// sends=1 invalidations=0 memory_wait=no backward=0 charged=106496`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let age = |d: Option<Duration>| match d {
            Some(d) => format!(" (oldest {:.1}s)", d.as_secs_f64()),
            None => String::new(),
        };
        write!(
            f,
            "calls={} credits={} recvs_posted={} in_dispatcher={}{} reads={}{} sends={} \
             invalidations={} memory_wait={} backward={} charged={}",
            self.calls,
            self.credits,
            self.recvs_posted,
            self.in_dispatcher,
            age(self.oldest_dispatch),
            self.reads,
            age(self.oldest_read),
            self.sends,
            self.invalidations,
            if self.memory_wait { "yes" } else { "no" },
            self.backward,
            self.charged,
        )
    }
}

/// What a [`Watchdog`] tick found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Idle, or progress since the last tick, or a stall already reported.
    Fine,
    /// No progress for at least this long while busy: warn, once per stall.
    Warn(Duration),
    /// No progress for at least this long while work requests are posted: close.
    Close(Duration),
}

/// Judges a connection's progress at each tick ([module docs](self)).
#[derive(Debug)]
pub struct Watchdog {
    period: Duration,
    /// The progress count at the last tick.
    seen: u64,
    quiet_ticks: u32,
    warned: bool,
}

impl Watchdog {
    /// A watchdog for `stall_timeout`; `None` when that is zero (no watchdog).
    pub fn new(stall_timeout: Duration) -> Option<Watchdog> {
        (!stall_timeout.is_zero()).then(|| Watchdog {
            period: stall_timeout / TICKS_TO_CLOSE,
            seen: 0,
            quiet_ticks: 0,
            warned: false,
        })
    }

    /// How often [`Watchdog::tick`] is to be called.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// At least how long the connection has gone without progress while busy.
    pub fn quiet_for(&self) -> Duration {
        self.period * self.quiet_ticks
    }

    /// One tick: `progress` is the connection's count of progress so far (any
    /// counter that grows by one for each thing that moved a Call along), `waiting`
    /// its state now.
    pub fn tick(&mut self, progress: u64, waiting: &Waiting) -> Verdict {
        let moved = progress != self.seen;
        self.seen = progress;
        if moved || waiting.is_idle() {
            self.quiet_ticks = 0;
            self.warned = false;
            return Verdict::Fine;
        }
        self.quiet_ticks = self.quiet_ticks.saturating_add(1);
        if self.quiet_ticks >= TICKS_TO_CLOSE && waiting.on_work_requests() {
            return Verdict::Close(self.quiet_for());
        }
        if self.quiet_ticks >= TICKS_TO_WARN && !self.warned {
            self.warned = true;
            return Verdict::Warn(self.quiet_for());
        }
        Verdict::Fine
    }
}

/// The ages of the oldest of `starts`, at `now`.
pub fn oldest(now: Instant, starts: impl Iterator<Item = Instant>) -> Option<Duration> {
    starts.min().map(|t| now.saturating_duration_since(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sending() -> Waiting {
        Waiting {
            calls: 1,
            sends: 1,
            ..Waiting::default()
        }
    }

    #[test]
    fn an_idle_connection_is_never_a_stall() {
        let mut w = Watchdog::new(Duration::from_secs(60)).unwrap();
        for _ in 0..20 {
            assert_eq!(w.tick(0, &Waiting::default()), Verdict::Fine);
        }
    }

    #[test]
    fn a_busy_connection_that_progresses_is_fine() {
        let mut w = Watchdog::new(Duration::from_secs(60)).unwrap();
        for progress in 1..20 {
            assert_eq!(w.tick(progress, &sending()), Verdict::Fine);
        }
    }

    #[test]
    fn a_stuck_send_is_warned_about_once_then_closed() {
        let mut w = Watchdog::new(Duration::from_secs(60)).unwrap();
        assert_eq!(w.period(), Duration::from_secs(15));
        assert_eq!(
            w.tick(1, &sending()),
            Verdict::Fine,
            "progress since the start"
        );
        assert_eq!(w.tick(1, &sending()), Verdict::Fine, "one quiet tick");
        assert_eq!(
            w.tick(1, &sending()),
            Verdict::Warn(Duration::from_secs(30)),
            "two"
        );
        assert_eq!(w.tick(1, &sending()), Verdict::Fine, "warned once");
        assert_eq!(
            w.tick(1, &sending()),
            Verdict::Close(Duration::from_secs(60))
        );
    }

    #[test]
    fn a_dispatcher_or_memory_wait_is_warned_about_but_not_closed() {
        let mut w = Watchdog::new(Duration::from_secs(4)).unwrap();
        let slow = Waiting {
            calls: 1,
            in_dispatcher: 1,
            memory_wait: true,
            ..Waiting::default()
        };
        let verdicts: Vec<Verdict> = (0..10).map(|_| w.tick(0, &slow)).collect();
        assert_eq!(
            verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Warn(_)))
                .count(),
            1
        );
        assert!(!verdicts.iter().any(|v| matches!(v, Verdict::Close(_))));
    }

    #[test]
    fn progress_ends_a_stall_and_a_new_one_is_warned_about_again() {
        let mut w = Watchdog::new(Duration::from_secs(4)).unwrap();
        w.tick(0, &sending());
        assert!(matches!(w.tick(0, &sending()), Verdict::Warn(_)));
        assert_eq!(w.tick(1, &sending()), Verdict::Fine);
        assert_eq!(w.quiet_for(), Duration::ZERO);
        w.tick(1, &sending());
        assert!(
            matches!(w.tick(1, &sending()), Verdict::Warn(_)),
            "a new stall"
        );
    }

    #[test]
    fn zero_turns_it_off() {
        assert!(Watchdog::new(Duration::ZERO).is_none());
    }

    #[test]
    fn the_state_names_what_it_waits_for() {
        let w = Waiting {
            calls: 2,
            credits: 8,
            recvs_posted: 6,
            in_dispatcher: 1,
            oldest_dispatch: Some(Duration::from_millis(41_000)),
            sends: 1,
            charged: 106_496,
            ..Waiting::default()
        };
        assert_eq!(
            w.to_string(),
            "calls=2 credits=8 recvs_posted=6 in_dispatcher=1 (oldest 41.0s) reads=0 sends=1 \
             invalidations=0 memory_wait=no backward=0 charged=106496"
        );
        assert!(w.on_work_requests());
    }
}
