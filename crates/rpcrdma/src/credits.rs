//! Credit accounting (flow control of RDMA Sends).
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.3.1 (credit limit), §4.3.3
//! (initial connection state), §5.2.3, §7.2 (backward direction);
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5. Linux: `rpc_rdma.c`
//! (`rpcrdma_update_cwnd`, credits of 0 taken as 1), `svc_rdma_sendto.c`.
//!
//! A connection has one requester side and one responder side per direction in use,
//! and §7.2.1 says "forward direction credits and backward direction credits are
//! accounted separately": [`CreditBook`] holds one [`RequesterCredits`] (our Calls)
//! and one [`ResponderCredits`] (the peer's Calls), and a requester endpoint uses
//! them for the forward and backward direction respectively, a responder endpoint
//! the other way round. Nothing in one is touched by the other.

use crate::error::CreditError;

/// The requester's view: how many Calls it may have outstanding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequesterCredits {
    /// What we ask for in `rdma_credit`. Invariant: at least 1 (§7.2.1: "The
    /// rdma_credit field in a backward direction RPC-over-RDMA message MUST NOT contain
    /// the value zero"; a forward request of 0 would deadlock too).
    requested: u32,
    /// The last grant from a valid (non-error) Reply, 0 taken as 1.
    granted: u32,
    /// A valid Reply has been received on this connection.
    got_reply: bool,
    /// Calls sent and not yet completed.
    outstanding: u32,
}

impl RequesterCredits {
    /// A fresh connection asking for `requested` credits (Linux asks for 128).
    pub fn new(requested: u32) -> Self {
        RequesterCredits {
            requested: requested.max(1),
            granted: 1,
            got_reply: false,
            outstanding: 0,
        }
    }

    /// The value to put in `rdma_credit` of our Calls.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// §4.3.1: "The requester MAY dynamically adjust the requested credit value to
    /// match its expected needs." Zero is taken as one.
    pub fn set_requested(&mut self, n: u32) {
        self.requested = n.max(1);
    }

    /// The current limit on outstanding Calls.
    ///
    /// §4.3.3: "a requester MUST NOT assume more than one credit is available, and MUST
    /// receive a valid reply from the responder carrying the actual number of available
    /// credits, prior to sending its next request." §4.3.1: the limit "is always the
    /// lower of the requested and granted credit values".
    pub fn limit(&self) -> u32 {
        if self.got_reply {
            self.requested.min(self.granted)
        } else {
            1
        }
    }

    /// Calls in flight.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Calls that may be sent now.
    pub fn available(&self) -> u32 {
        self.limit().saturating_sub(self.outstanding)
    }

    /// Takes a credit to send a Call.
    ///
    /// §4.3.1: "The requester MUST NOT send unacknowledged requests in excess of this
    /// granted responder credit limit."
    pub fn try_acquire(&mut self) -> Result<(), CreditError> {
        if self.outstanding >= self.limit() {
            return Err(CreditError::Exhausted {
                limit: self.limit(),
                outstanding: self.outstanding,
            });
        }
        self.outstanding += 1;
        Ok(())
    }

    /// A valid Reply arrived granting `granted`: its Call completes and the grant is
    /// recorded. Like Linux, a grant of 0 (which §4.3.1 forbids) is taken as 1 rather
    /// than deadlocking.
    pub fn handle_reply(&mut self, granted: u32) -> Result<(), CreditError> {
        self.granted = granted.max(1);
        self.got_reply = true;
        self.release()
    }

    /// A Call completed without a valid Reply (RDMA_ERROR, or abandoned after the
    /// connection was lost): its credit returns, the grant is unchanged.
    ///
    /// v2 draft §5: the requester assumes one credit "until it receives a non-error
    /// RPC-over-RDMA message from the responder that reports the responder's actual
    /// credit limit."
    pub fn release(&mut self) -> Result<(), CreditError> {
        if self.outstanding == 0 {
            return Err(CreditError::NothingOutstanding);
        }
        self.outstanding -= 1;
        Ok(())
    }

    /// A new connection: back to the initial state of §4.3.3 (one credit, nothing in
    /// flight; Calls to retransmit take credits again).
    pub fn reset(&mut self) {
        *self = RequesterCredits::new(self.requested);
    }
}

/// The responder's view: what to grant, never more than the Receives it has posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderCredits {
    /// The grant we want. Invariant: at least 1.
    target: u32,
    /// Receives posted for this direction (capacity actually in place).
    posted: u32,
    /// The last value sent in a Reply.
    advertised: u32,
    /// Receives held back from the grant for RDMA_DONE messages we expect (one per
    /// responder-provided Read chunk awaiting pull completion).
    reserved: u32,
}

impl ResponderCredits {
    /// A responder with `posted` Receives already posted, granting that many.
    ///
    /// §4.3.1: "The granted value MUST NOT be zero, since such a value would result in
    /// deadlock."
    pub fn new(posted: u32) -> Result<Self, CreditError> {
        if posted == 0 {
            return Err(CreditError::ZeroGrant);
        }
        Ok(ResponderCredits {
            target: posted,
            posted,
            advertised: 0,
            reserved: 0,
        })
    }

    /// Changes the grant we want (§4.3.1: the responder "MAY dynamically adjust the
    /// granted credit value"). Returns how many more Receives must be posted (and
    /// reported with [`ResponderCredits::handle_receives_posted`]) before the increase
    /// shows in a grant. A decrease shows in the next grant.
    pub fn set_target(&mut self, n: u32) -> Result<u32, CreditError> {
        if n == 0 {
            return Err(CreditError::ZeroGrant);
        }
        self.target = n;
        Ok(n.saturating_sub(self.posted))
    }

    /// The grant we want ([`ResponderCredits::set_target`]).
    pub fn target(&self) -> u32 {
        self.target
    }

    /// The driver posted `n` more Receives.
    pub fn handle_receives_posted(&mut self, n: u32) {
        self.posted = self.posted.saturating_add(n);
    }

    /// The driver took `n` Receives back (after a decrease).
    pub fn handle_receives_retired(&mut self, n: u32) {
        self.posted = self.posted.saturating_sub(n).max(1);
    }

    /// The value for the next Reply's `rdma_credit`.
    ///
    /// §4.3.1: "the responder needs to ensure that a credit increase is effected (i.e.
    /// RDMA Receives are posted) before the next reply is sent": the grant never exceeds
    /// the Receives posted. It is never zero.
    ///
    /// Receives reserved for expected RDMA_DONE messages
    /// ([`ResponderCredits::reserve_for_done`]) are not granted.
    pub fn grant(&mut self) -> u32 {
        let g = self
            .target
            .min(self.posted.saturating_sub(self.reserved))
            .max(1);
        self.advertised = g;
        g
    }

    /// The last value granted (0 before the first Reply).
    pub fn advertised(&self) -> u32 {
        self.advertised
    }

    /// Holds one posted Receive back from the grant for the RDMA_DONE that will
    /// complete a responder-provided Read chunk. Fails (nothing reserved) when that
    /// would leave no Receive for a Call.
    ///
    /// draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.2.3: "Sending an RDMA_DONE message
    /// consumes one credit, temporarily reducing RPC concurrency on the connection.
    /// There is no response to RDMA_DONE, so it is not clear to the sender when that
    /// credit becomes available again." Our choice: the responder, which knows exactly
    /// how many RDMA_DONEs it is owed, accounts for them. Each Read chunk awaiting pull
    /// completion keeps one Receive out of the grant, so Calls (at most the grant) plus
    /// RDMA_DONEs (at most the reservations) never exceed the Receives posted. The
    /// requester sends RDMA_DONE without taking a credit and needs no new rule: the
    /// RDMA_NOMSG that asks for the pull already carries the lowered grant, and the
    /// first Reply after the reservation ends carries it restored.
    pub fn reserve_for_done(&mut self) -> Result<(), CreditError> {
        if self.posted.saturating_sub(self.reserved) < 2 {
            return Err(CreditError::Exhausted {
                limit: self.posted,
                outstanding: self.reserved,
            });
        }
        self.reserved += 1;
        Ok(())
    }

    /// An RDMA_DONE arrived (or the Read chunk was invalidated without one): its
    /// Receive goes back into the grant.
    pub fn release_done_reservation(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
    }

    /// Receives held back for expected RDMA_DONEs.
    pub fn reserved_for_done(&self) -> u32 {
        self.reserved
    }
}

/// A responder's next grant for a connection whose requester is using it, or `None`
/// to keep `target`: double it (at most `max`) once more than half of it is in
/// service (`in_service` Calls received and not yet answered).
///
/// §4.3.1 lets the responder "dynamically adjust the granted credit value to match
/// its needs or policies". Ours (issue 16): a connection starts with a small grant, so
/// an idle one holds few Receive and Send buffers, and its grant grows with the
/// concurrency its requester shows, as memory allows. It never shrinks: a requester
/// may send up to the last grant it saw at any time, and no message tells the
/// responder which grant that is, so buffers promised once stay posted (Linux's
/// client sets `rnr_retry_count` to 0: a Send that finds no Receive ends its
/// connection; docs/linux-facts.md, "Linux as an RPC-over-RDMA peer (6.1)"). A
/// requester that keeps few Calls in flight keeps the small grant, which is all it
/// uses.
pub fn grown_target(target: u32, in_service: usize, max: u32) -> Option<u32> {
    let busy = in_service.saturating_mul(2) > target as usize;
    (busy && target < max).then(|| target.saturating_mul(2).clamp(1, max))
}

/// How long a responder whose grant could not grow (the driver found no room for the
/// buffers in the server's memory budget, `Responder::handle_credit_growth_refused`)
/// waits before it offers the growth again ([`grown_target`] says whether there is
/// one): memory is released as Calls are answered, but a connection that asked on
/// every Receive would charge and refuse at the rate of its Calls.
pub const GROWTH_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The credits of one connection, per direction (§7.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditBook {
    /// Our Calls to the peer (forward direction on a client, backward on a server).
    pub ours: RequesterCredits,
    /// The peer's Calls to us; `None` when that direction is not in use.
    pub theirs: Option<ResponderCredits>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s4_3_3_requester_starts_with_one_credit_until_first_reply() {
        let mut c = RequesterCredits::new(128);
        assert_eq!(c.requested(), 128);
        assert_eq!(c.limit(), 1);
        c.try_acquire().unwrap();
        assert_eq!(
            c.try_acquire(),
            Err(CreditError::Exhausted {
                limit: 1,
                outstanding: 1
            })
        );
        c.handle_reply(64).unwrap();
        assert_eq!(c.limit(), 64);
        assert_eq!(c.available(), 64);
    }

    #[test]
    fn s4_3_1_outstanding_never_exceeds_min_requested_granted() {
        let mut c = RequesterCredits::new(4);
        c.try_acquire().unwrap();
        c.handle_reply(64).unwrap();
        assert_eq!(c.limit(), 4, "min(requested 4, granted 64)");
        for _ in 0..4 {
            c.try_acquire().unwrap();
        }
        assert!(matches!(
            c.try_acquire(),
            Err(CreditError::Exhausted { .. })
        ));
        c.handle_reply(2).unwrap();
        assert_eq!(c.limit(), 2);
        assert_eq!(c.outstanding(), 3);
        assert_eq!(c.available(), 0, "over the new limit: wait for replies");
        assert!(c.try_acquire().is_err());
    }

    #[test]
    fn grant_of_zero_is_taken_as_one_like_linux() {
        let mut c = RequesterCredits::new(128);
        c.try_acquire().unwrap();
        c.handle_reply(0).unwrap();
        assert_eq!(c.limit(), 1);
        c.try_acquire().unwrap();
    }

    #[test]
    fn v2_s5_error_reply_does_not_end_the_initial_single_credit() {
        let mut c = RequesterCredits::new(128);
        c.try_acquire().unwrap();
        c.release().unwrap(); // RDMA_ERROR
        assert_eq!(c.limit(), 1);
        assert_eq!(c.release(), Err(CreditError::NothingOutstanding));
    }

    #[test]
    fn requested_credits_are_never_zero() {
        let mut c = RequesterCredits::new(0);
        assert_eq!(c.requested(), 1);
        c.set_requested(0);
        assert_eq!(c.requested(), 1);
    }

    #[test]
    fn reset_returns_to_initial_connection_state() {
        let mut c = RequesterCredits::new(128);
        c.try_acquire().unwrap();
        c.handle_reply(64).unwrap();
        c.try_acquire().unwrap();
        c.reset();
        assert_eq!((c.limit(), c.outstanding()), (1, 0));
    }

    #[test]
    fn s4_3_1_the_grant_doubles_when_more_than_half_is_in_service_up_to_the_maximum() {
        assert_eq!(grown_target(8, 4, 128), None, "half in service");
        assert_eq!(grown_target(8, 5, 128), Some(16));
        assert_eq!(grown_target(64, 33, 128), Some(128));
        assert_eq!(grown_target(96, 60, 128), Some(128), "capped");
        assert_eq!(grown_target(128, 128, 128), None, "at the maximum");
        assert_eq!(grown_target(1, 1, 2), Some(2));
        assert_eq!(grown_target(8, 0, 128), None, "idle");
    }

    #[test]
    fn s4_3_1_responder_never_grants_zero() {
        assert_eq!(ResponderCredits::new(0), Err(CreditError::ZeroGrant));
        let mut r = ResponderCredits::new(64).unwrap();
        assert_eq!(r.set_target(0), Err(CreditError::ZeroGrant));
        r.handle_receives_retired(1000);
        assert_eq!(r.grant(), 1);
    }

    #[test]
    fn s4_3_1_credit_increase_is_effective_before_the_reply_that_announces_it() {
        let mut r = ResponderCredits::new(64).unwrap();
        assert_eq!(r.grant(), 64);
        assert_eq!(r.set_target(128), Ok(64), "post 64 more receives first");
        assert_eq!(
            r.grant(),
            64,
            "not announced before the receives are posted"
        );
        r.handle_receives_posted(32);
        assert_eq!(r.grant(), 96);
        r.handle_receives_posted(32);
        assert_eq!(r.grant(), 128);
        assert_eq!(r.advertised(), 128);
    }

    #[test]
    fn responder_decrease_shows_in_next_grant() {
        let mut r = ResponderCredits::new(64).unwrap();
        assert_eq!(r.set_target(8), Ok(0));
        assert_eq!(r.grant(), 8);
    }

    #[test]
    fn rr_s5_2_3_receives_reserved_for_rdma_done_are_left_out_of_the_grant() {
        let mut r = ResponderCredits::new(4).unwrap();
        r.reserve_for_done().unwrap();
        r.reserve_for_done().unwrap();
        assert_eq!(r.grant(), 2, "4 posted, 2 held for RDMA_DONEs");
        r.reserve_for_done().unwrap();
        assert_eq!(r.grant(), 1);
        // Never the last Receive: a Call must still fit.
        assert!(r.reserve_for_done().is_err());
        assert_eq!(r.reserved_for_done(), 3);
        r.release_done_reservation();
        assert_eq!(r.grant(), 2);
        // A single posted Receive can never be reserved.
        assert!(ResponderCredits::new(1)
            .unwrap()
            .reserve_for_done()
            .is_err());
    }

    #[test]
    fn s7_2_1_forward_and_backward_credits_are_accounted_separately() {
        let mut book = CreditBook {
            ours: RequesterCredits::new(128),
            theirs: Some(ResponderCredits::new(2).unwrap()),
        };
        // Forward Call and Reply.
        book.ours.try_acquire().unwrap();
        book.ours.handle_reply(64).unwrap();
        // Backward Calls arrive and are answered with backward grants.
        let backward = book.theirs.as_mut().unwrap();
        assert_eq!(backward.grant(), 2);
        assert_eq!(
            book.ours.limit(),
            64,
            "backward grant does not touch forward"
        );
        book.ours.try_acquire().unwrap();
        assert_eq!(book.theirs.as_mut().unwrap().grant(), 2);
    }
}
