//! Restart recovery (RFC 8881 §8.4.2, §8.6.3, §18.51): which clients may reclaim
//! their state after a server restart, and for how long.
//!
//! A client that finished reclaiming (RECLAIM_COMPLETE) is recorded by its
//! `co_ownerid` in the state directory ([`crate::v4::records`]), and the record goes
//! when the client does (lease expiry, DESTROY_CLIENTID). At start, the records of
//! the previous run are the clients that may reclaim, and if there are any the
//! server is in its grace period for one lease time (as knfsd's default):
//! - a recorded client may reclaim (OPEN with CLAIM_PREVIOUS, LOCK with `reclaim`)
//!   until its RECLAIM_COMPLETE; any other reclaim is NFS4ERR_NO_GRACE (§15.1.9.2),
//!   and so is every reclaim after the grace period;
//! - new state meanwhile (OPEN of another claim, LOCK, LOCKT, and REMOVE and RENAME,
//!   which could take a reclaimed file's name away, as knfsd refuses them) is
//!   NFS4ERR_GRACE (§15.1.9.1);
//! - the grace period ends early once every recorded client has sent
//!   RECLAIM_COMPLETE (§8.4.2.1: a server may end it when all clients are done).
//!
//! Sans-IO: the caller loads and saves the records; time is an argument.

use std::collections::HashSet;
use std::time::Instant;

/// The grace period of a server instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grace {
    /// When it ends at the latest (`None`: no grace period, nothing to reclaim).
    until: Option<Instant>,
    /// The owners (`co_ownerid`) recorded by the previous run.
    reclaimable: HashSet<Vec<u8>>,
    /// Those of them that sent RECLAIM_COMPLETE in this run.
    completed: HashSet<Vec<u8>>,
}

impl Grace {
    /// The grace period of a server that starts at `now` with the previous run's
    /// records `previous`, for `length` (a lease time): none if there are none.
    pub fn new(previous: HashSet<Vec<u8>>, now: Instant, length: std::time::Duration) -> Grace {
        Grace {
            until: (!previous.is_empty()).then(|| now + length),
            reclaimable: previous,
            completed: HashSet::new(),
        }
    }

    /// Whether the grace period runs at `now`.
    pub fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u) && self.completed.len() < self.reclaimable.len()
    }

    /// Whether the client of `owner`, whose RECLAIM_COMPLETE has (`done`) or has not
    /// been received, may reclaim at `now`.
    pub fn may_reclaim(&self, owner: &[u8], done: bool, now: Instant) -> bool {
        !done && self.active(now) && self.reclaimable.contains(owner)
    }

    /// RECLAIM_COMPLETE of the client of `owner`.
    pub fn complete(&mut self, owner: &[u8]) {
        if self.reclaimable.contains(owner) {
            self.completed.insert(owner.to_vec());
        }
    }

    /// Time left at `now`, for the log.
    pub fn left(&self, now: Instant) -> Option<std::time::Duration> {
        self.active(now)
            .then(|| self.until.map(|u| u.saturating_duration_since(now)))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc8881_8_4_2_no_records_no_grace_period() {
        let now = Instant::now();
        let g = Grace::new(HashSet::new(), now, Duration::from_secs(90));
        assert!(!g.active(now));
        assert!(!g.may_reclaim(b"a", false, now));
    }

    #[test]
    fn rfc8881_8_4_2_recorded_clients_reclaim_until_done_or_the_end() {
        let now = Instant::now();
        let prev: HashSet<Vec<u8>> = [b"a".to_vec(), b"b".to_vec()].into();
        let mut g = Grace::new(prev, now, Duration::from_secs(90));
        assert!(g.active(now));
        assert!(g.may_reclaim(b"a", false, now));
        assert!(
            !g.may_reclaim(b"a", true, now),
            "after its RECLAIM_COMPLETE"
        );
        assert!(!g.may_reclaim(b"c", false, now), "not recorded");
        let end = now + Duration::from_secs(90);
        assert!(!g.active(end) && !g.may_reclaim(b"a", false, end));
        // Ends early once every recorded client is done.
        g.complete(b"a");
        g.complete(b"c");
        assert!(g.active(now));
        g.complete(b"b");
        assert!(!g.active(now));
        assert_eq!(g.left(now), None);
    }
}
