//! Responder-provided Read chunks waiting for pull completion, searchable by XID.
//!
//! Specs: draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3, §5.4.3.
//!
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.4.3: "In order for a responder to match
//! incoming RDMA_DONE messages to reply buffers waiting to be invalidated, it might keep
//! references to these buffers in a data structure searchable by XID." The same table
//! serves the housekeeping the draft lists: "Invalidating waiting buffers after a timeout,
//! in case the requester never sends RDMA_DONE; Ignoring retransmitted or garbage RDMA_DONE
//! requests; Explicitly invalidating waiting Read chunks after a connection loss".
//!
//! Pure bookkeeping: no clock is read, `now` is an argument. DoS bound: one entry per
//! Reply sent through a Read chunk, and the responder refuses a new one when it cannot
//! reserve a Receive for its RDMA_DONE ([`crate::credits::ResponderCredits::reserve_for_done`]),
//! so the table never holds more entries than Receives posted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::wire::Xid;

/// Default time a Read chunk stays exposed without pull completion: long enough for an
/// RDMA Read of a large reply over a slow link, short enough to bound exposure.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(30);

/// One exposed Reply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pull {
    handles: Vec<u32>,
    deadline: Instant,
}

/// The responder's exposed Read chunks, by XID.
#[derive(Debug, Clone, Default)]
pub struct PullTable {
    pulls: HashMap<Xid, Pull>,
}

impl PullTable {
    /// Records that the Reply to `xid` is exposed through our STags `handles` until
    /// `deadline`. A second Reply for the same XID replaces the first (its handles are
    /// returned so they can be invalidated at once).
    pub fn insert(&mut self, xid: Xid, handles: Vec<u32>, deadline: Instant) -> Option<Vec<u32>> {
        self.pulls
            .insert(xid, Pull { handles, deadline })
            .map(|p| p.handles)
    }

    /// RDMA_DONE for `xid`: the handles to invalidate, or `None` when nothing waits
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.3: "Whenever a responder receives a
    /// pull completion notification for an XID for which there is no Read chunk waiting to
    /// be invalidated, the responder MUST silently drop the notification.").
    pub fn complete(&mut self, xid: Xid) -> Option<Vec<u32>> {
        self.pulls.remove(&xid).map(|p| p.handles)
    }

    /// The earliest deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pulls.values().map(|p| p.deadline).min()
    }

    /// Removes and returns every entry whose deadline is at or before `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<(Xid, Vec<u32>)> {
        let due: Vec<Xid> = self
            .pulls
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(x, _)| *x)
            .collect();
        let mut out: Vec<(Xid, Vec<u32>)> = due
            .into_iter()
            .filter_map(|x| self.pulls.remove(&x).map(|p| (x, p.handles)))
            .collect();
        out.sort_by_key(|(x, _)| *x);
        out
    }

    /// Removes and returns every entry (connection lost).
    pub fn drain(&mut self) -> Vec<(Xid, Vec<u32>)> {
        let mut out: Vec<(Xid, Vec<u32>)> =
            self.pulls.drain().map(|(x, p)| (x, p.handles)).collect();
        out.sort_by_key(|(x, _)| *x);
        out
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.pulls.len()
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pulls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rr_s4_1_3_unknown_or_repeated_done_finds_nothing() {
        let now = Instant::now();
        let mut t = PullTable::default();
        t.insert(Xid(1), vec![7], now + Duration::from_secs(1));
        assert_eq!(t.complete(Xid(2)), None);
        assert_eq!(t.complete(Xid(1)), Some(vec![7]));
        assert_eq!(t.complete(Xid(1)), None);
        assert!(t.is_empty());
    }

    #[test]
    fn rr_s5_4_3_timeout_expires_only_what_is_due() {
        let now = Instant::now();
        let mut t = PullTable::default();
        t.insert(Xid(1), vec![7], now + Duration::from_secs(1));
        t.insert(Xid(2), vec![8], now + Duration::from_secs(5));
        assert_eq!(t.poll_timeout(), Some(now + Duration::from_secs(1)));
        assert_eq!(t.expire(now), vec![]);
        assert_eq!(
            t.expire(now + Duration::from_secs(1)),
            vec![(Xid(1), vec![7])]
        );
        assert_eq!(t.poll_timeout(), Some(now + Duration::from_secs(5)));
        assert_eq!(t.drain(), vec![(Xid(2), vec![8])]);
        assert_eq!(t.poll_timeout(), None);
    }
}
