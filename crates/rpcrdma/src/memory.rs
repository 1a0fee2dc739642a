//! A memory budget shared by the connections of one server (issue 16): the bytes of
//! Read chunk data the responders of all its connections hold at once, and whatever
//! else its driver and upper layer charge to the same budget (each connection's
//! Receive and Send buffers, reply buffers): one limit for the server's memory.
//!
//! A Call's Read chunks (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §3.4.5, §4.4.5)
//! are RDMA-Read into memory the responder provides, sized by what the requester
//! announced. Each connection bounds its own (`ResponderConfig::max_read_in_flight`);
//! without a bound across connections, a peer that announces large chunks on many
//! connections (and then never answers the Reads) makes the server allocate for all
//! of them. With a [`MemoryBudget`] a Call is *charged* its Read chunk bytes before
//! any RDMA Read is issued (before its sink is allocated) and keeps the charge until
//! it is finished with (Reply queued, dropped, refused, or the connection lost). A
//! Call that finds the budget spent waits, holding its Receive, and is started when
//! charges are released: nothing is allocated past the budget. A Call larger than the
//! whole budget can never be charged and is answered as one over the reassembly limit
//! (GARBAGE_ARGS, §5.5.2).
//!
//! Waiting is first come, first served: a charge that does not fit, or that finds
//! others already waiting, takes a place in line (a [`Waiter`]) and is charged only
//! from the head of the line, so a large Call cannot be starved by smaller ones that
//! keep fitting into what is released (a peer announcing small chunks on many
//! connections cannot keep another's large Call out). A waiter dropped (its Call or
//! connection gone) leaves the line.
//!
//! Memory that should not wait is charged without a place in line, and a failed
//! charge is a refusal the caller answers: [`MemoryBudget::try_charge_now`] for new
//! long-lived work (a connection's buffers: under memory pressure, while Calls wait
//! in line, a new connection is refused rather than let past them),
//! [`MemoryBudget::charge_ahead`] for memory that finishes work already admitted (a
//! reply's buffer), which goes ahead of the line because finishing it releases
//! memory soon. Neither ever charges past the limit. Going ahead is bounded: once
//! charges ahead have taken as many bytes as the head of the line waits for, since it
//! became the head, further ones are refused until it is charged, so a stream of
//! replies cannot keep a large Call waiting for ever.
//!
//! The budget does no I/O. A driver whose [`crate::Responder`] waits
//! ([`crate::Responder::memory_wait`]) waits with [`MemoryBudget::poll_released`] and
//! then calls [`crate::Responder::handle_memory_released`].

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Bytes of memory shared by connections, charged and released by Calls.
pub struct MemoryBudget {
    limit: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: u64,
    peak: u64,
    /// Incremented at each release: a waiter that saw generation `g` before its
    /// charge failed is woken by any later release.
    generation: u64,
    refused: u64,
    wakers: Vec<Waker>,
    /// Waiters' tickets and the bytes each waits for, first come first.
    line: VecDeque<(u64, u64)>,
    next_ticket: u64,
    /// Bytes charged ahead of the line since its present head became the head.
    overtaken: u64,
}

impl State {
    /// Something changed for the waiters: they look again.
    fn wake_all(&mut self) -> Vec<Waker> {
        self.generation = self.generation.wrapping_add(1);
        std::mem::take(&mut self.wakers)
    }
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit)
            .field("used", &self.used())
            .finish()
    }
}

/// Two budgets are equal only if they are the same budget.
impl PartialEq for MemoryBudget {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for MemoryBudget {}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.state().used
    }

    /// Most bytes ever charged at once.
    pub fn peak(&self) -> u64 {
        self.state().peak
    }

    /// Charges that failed since the budget was made: each made a Call wait
    /// ([`MemoryBudget::try_charge`]) or was refused ([`MemoryBudget::try_charge_now`],
    /// [`MemoryBudget::charge_ahead`]).
    pub fn refused(&self) -> u64 {
        self.state().refused
    }

    /// Charges `bytes` if they fit with `keep_free` bytes to spare and no one is
    /// waiting in line, else `None` (and nothing is queued): for new long-lived work
    /// that is refused under memory pressure rather than queued, such as a new
    /// connection's buffers (module docs). `keep_free` is room such charges may never
    /// take: a connection's buffers stay charged while it is idle, so without room
    /// kept for one whole Call, connections alone could fill the budget and every Call
    /// with Read chunks would wait for ever.
    pub fn try_charge_now(self: &Arc<Self>, bytes: u64, keep_free: u64) -> Option<Charge> {
        let mut st = self.state();
        let room = self.limit.saturating_sub(keep_free);
        let fits = st.used.checked_add(bytes).is_some_and(|u| u <= room);
        let charge = if st.line.is_empty() && fits {
            self.charge_locked(&mut st, bytes)
        } else {
            None
        };
        if charge.is_none() {
            st.refused += 1;
        }
        charge
    }

    /// Charges `bytes` if they fit, ahead of any waiters in line, else `None`: for
    /// memory that finishes work already admitted (a reply's buffer), whose release
    /// follows soon. Never past the limit.
    ///
    /// Refused too once charges ahead have taken, since the head of the line became
    /// the head, as many bytes as it waits for (module docs).
    pub fn charge_ahead(self: &Arc<Self>, bytes: u64) -> Option<Charge> {
        let mut st = self.state();
        let head_waited_enough = st
            .line
            .front()
            .is_some_and(|&(_, need)| st.overtaken >= need);
        let charge = if head_waited_enough {
            None
        } else {
            self.charge_locked(&mut st, bytes)
        };
        match &charge {
            None => st.refused += 1,
            Some(_) if !st.line.is_empty() => st.overtaken += bytes,
            Some(_) => {}
        }
        charge
    }

    /// Charges `bytes` if they fit and no one is waiting: a [`Charge`] that gives them
    /// back when dropped. Otherwise a place at the end of the line, to try again from
    /// ([`Waiter::try_charge`]) once something was released
    /// ([`MemoryBudget::poll_released`]).
    pub fn try_charge(self: &Arc<Self>, bytes: u64) -> Result<Charge, Waiter> {
        let mut st = self.state();
        if st.line.is_empty() {
            if let Some(charge) = self.charge_locked(&mut st, bytes) {
                return Ok(charge);
            }
        }
        st.refused += 1;
        let ticket = st.next_ticket;
        st.next_ticket = st.next_ticket.wrapping_add(1);
        st.line.push_back((ticket, bytes));
        Err(Waiter {
            budget: self.clone(),
            ticket: Some(ticket),
            since: st.generation,
        })
    }

    fn charge_locked(self: &Arc<Self>, st: &mut State, bytes: u64) -> Option<Charge> {
        let used = st.used.checked_add(bytes).filter(|&u| u <= self.limit)?;
        st.used = used;
        st.peak = st.peak.max(used);
        Some(Charge {
            budget: self.clone(),
            bytes,
        })
    }

    /// Waiters in line now.
    pub fn waiting(&self) -> usize {
        self.state().line.len()
    }

    fn release(&self, bytes: u64) {
        let wakers = {
            let mut st = self.state();
            st.used = st.used.saturating_sub(bytes);
            st.wake_all()
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Ready once something was released after generation `since` (the value a
    /// failed [`MemoryBudget::try_charge`] returned); else registers `cx`'s waker.
    pub fn poll_released(&self, since: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.state();
        if st.generation != since {
            return Poll::Ready(());
        }
        if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            st.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A place in a [`MemoryBudget`]'s line (module docs); dropping it leaves the line.
pub struct Waiter {
    budget: Arc<MemoryBudget>,
    /// Its place in the line; `None` once charged (out of line).
    ticket: Option<u64>,
    /// The budget's generation when this waiter last failed to be charged.
    since: u64,
}

impl Waiter {
    /// Charges `bytes` if this waiter is at the head of the line and they fit; the
    /// waiter then leaves the line (and the next one gets its turn). Else the waiter
    /// back, still in line, to wait past the budget's present generation.
    pub fn try_charge(mut self, bytes: u64) -> Result<Charge, Waiter> {
        let budget = self.budget.clone();
        let mut st = budget.state();
        if st.line.front().map(|&(t, _)| t) == self.ticket {
            if let Some(front) = st.line.front_mut() {
                front.1 = bytes;
            }
            if let Some(charge) = budget.charge_locked(&mut st, bytes) {
                st.line.pop_front();
                st.overtaken = 0;
                // The next in line may fit too.
                let wakers = st.wake_all();
                drop(st);
                // Out of line already: dropping it has nothing to leave.
                self.ticket = None;
                drop(self);
                for w in wakers {
                    w.wake();
                }
                return Ok(charge);
            }
        }
        self.since = st.generation;
        drop(st);
        Err(self)
    }

    /// The budget waited for, and the generation to wait past
    /// ([`MemoryBudget::poll_released`]).
    pub fn wait(&self) -> (&Arc<MemoryBudget>, u64) {
        (&self.budget, self.since)
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Waiter({:?})", self.ticket)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let wakers = {
            let Some(ticket) = self.ticket else { return };
            let mut st = self.budget.state();
            let Some(at) = st.line.iter().position(|&(t, _)| t == ticket) else {
                return;
            };
            st.line.remove(at);
            if at == 0 {
                st.overtaken = 0;
            }
            // The head may have changed: let the others look again.
            if at == 0 {
                st.wake_all()
            } else {
                Vec::new()
            }
        };
        for w in wakers {
            w.wake();
        }
    }
}

/// Bytes charged to a [`MemoryBudget`], released when dropped.
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Charge {
    /// The bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes `other`'s bytes into this charge: both are released together, when this
    /// one is dropped. Both must be charges to the same budget.
    pub fn absorb(&mut self, mut other: Charge) {
        debug_assert!(Arc::ptr_eq(&self.budget, &other.budget));
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Charge({})", self.bytes)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn cx_counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    #[test]
    fn charges_up_to_the_limit_and_releases_on_drop() {
        let b = MemoryBudget::new(100);
        let a = b.try_charge(60).unwrap();
        let waiter = b.try_charge(41).unwrap_err();
        assert_eq!((b.used(), b.refused(), b.waiting()), (60, 1, 1));
        // Someone waits: a newcomer queues behind, even one that would fit.
        let behind = b.try_charge(40).unwrap_err();
        assert_eq!(b.waiting(), 2);
        drop(behind);
        assert_eq!(b.waiting(), 1, "a dropped waiter leaves the line");
        let (count, waker) = cx_counting();
        let mut cx = Context::from_waker(&waker);
        let (budget, since) = waiter.wait();
        assert!(budget.poll_released(since, &mut cx).is_pending());
        drop(a);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken by the release");
        assert!(b.poll_released(since, &mut cx).is_ready());
        let c = waiter.try_charge(41).unwrap();
        assert_eq!((b.used(), b.peak(), b.waiting()), (41, 60, 0));
        assert!(b.try_charge(u64::MAX).is_err(), "no overflow");
        drop(c);
        assert_eq!(b.used(), 0);
    }

    /// First come, first served: a large charge at the head of the line is not
    /// overtaken by smaller ones that would fit into what is released.
    #[test]
    fn the_head_of_the_line_is_charged_first() {
        let b = MemoryBudget::new(100);
        let held = b.try_charge(90).unwrap();
        let big = b.try_charge(80).unwrap_err();
        let small = b.try_charge(5).unwrap_err();
        // Not its turn, although 5 fits into the 10 left.
        let small = small.try_charge(5).unwrap_err();
        drop(held);
        let small = small.try_charge(5).unwrap_err();
        let big = big.try_charge(80).unwrap();
        // Now the small one is at the head, and fits.
        let s = small.try_charge(5).unwrap();
        assert_eq!((b.used(), b.waiting()), (85, 0));
        drop((big, s));
        // A head that leaves (its connection gone) lets the next one through.
        let held = b.try_charge(100).unwrap();
        let first = b.try_charge(50).unwrap_err();
        let second = b.try_charge(10).unwrap_err();
        drop(held);
        let second = second.try_charge(10).unwrap_err();
        let (count, waker) = cx_counting();
        let mut cx = Context::from_waker(&waker);
        let (_, since) = second.wait();
        assert!(b.poll_released(since, &mut cx).is_pending());
        drop(first);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the next in line is woken"
        );
        assert!(second.try_charge(10).is_ok());
    }

    /// Charges that do not wait: refused at the limit, `try_charge_now` also while
    /// someone waits in line, `charge_ahead` past the line but never past the limit.
    /// Charges ahead of the line (replies) go ahead of a waiting charge by at most
    /// the bytes it waits for; then they are refused until it is charged.
    #[test]
    fn charges_ahead_overtake_a_waiting_charge_by_at_most_its_size() {
        let b = MemoryBudget::new(10);
        let held = b.try_charge(8).unwrap();
        let w = b.try_charge(5).unwrap_err();
        for _ in 0..3 {
            let reply = b
                .charge_ahead(2)
                .expect("ahead of the line: 2, 4, then 6 bytes");
            drop(reply);
        }
        assert!(
            b.charge_ahead(1).is_none(),
            "6 bytes went ahead of a 5-byte wait"
        );
        drop(held);
        let w = w.try_charge(5).expect("the head is charged");
        assert!(b.charge_ahead(1).is_some(), "no one waits");
        let more = b.try_charge(6).unwrap_err();
        assert!(
            b.charge_ahead(1).is_some(),
            "a new head: nothing overtook it yet"
        );
        drop((w, more));
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn charges_now_are_refused_not_queued() {
        let b = MemoryBudget::new(100);
        let conn = b.try_charge_now(60, 0).unwrap();
        assert!(b.try_charge_now(41, 0).is_none(), "over the limit");
        assert!(
            b.try_charge_now(30, 20).is_none(),
            "into the room kept free"
        );
        assert_eq!((b.used(), b.refused(), b.waiting()), (60, 2, 0));
        let waiter = b.try_charge(50).unwrap_err();
        assert!(b.try_charge_now(10, 0).is_none(), "a Call waits in line");
        let reply = b.charge_ahead(40).unwrap();
        assert_eq!(b.used(), 100);
        assert!(b.charge_ahead(1).is_none(), "never past the limit");
        assert_eq!((b.refused(), b.peak()), (5, 100));
        drop((conn, reply));
        let call = waiter.try_charge(50).unwrap();
        assert!(b.try_charge_now(50, 0).is_some_and(|c| c.bytes() == 50));
        assert!(b.try_charge_now(40, u64::MAX).is_none(), "no overflow");
        drop(call);
        assert_eq!(b.used(), 0);
    }
}
