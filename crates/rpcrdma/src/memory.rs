//! A memory budget shared by the connections of one server (issue 16): the bytes of
//! Read chunk data the responders of all its connections hold at once.
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
//! The budget does no I/O. A driver whose [`crate::Responder`] waits
//! ([`crate::Responder::memory_wait`]) waits with [`MemoryBudget::poll_released`] and
//! then calls [`crate::Responder::handle_memory_released`].

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

    /// Charges that failed (each made a Call wait) since the budget was made.
    pub fn refused(&self) -> u64 {
        self.state().refused
    }

    /// Charges `bytes` if they fit: a [`Charge`] that gives them back when dropped.
    /// If they do not, the generation to wait past ([`MemoryBudget::poll_released`]).
    pub fn try_charge(self: &Arc<Self>, bytes: u64) -> Result<Charge, u64> {
        let mut st = self.state();
        match st.used.checked_add(bytes).filter(|&u| u <= self.limit) {
            Some(used) => {
                st.used = used;
                st.peak = st.peak.max(used);
                Ok(Charge {
                    budget: self.clone(),
                    bytes,
                })
            }
            None => {
                st.refused += 1;
                Err(st.generation)
            }
        }
    }

    fn release(&self, bytes: u64) {
        let wakers = {
            let mut st = self.state();
            st.used = st.used.saturating_sub(bytes);
            st.generation = st.generation.wrapping_add(1);
            std::mem::take(&mut st.wakers)
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
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Charge({})", self.bytes)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
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

    #[test]
    fn charges_up_to_the_limit_and_releases_on_drop() {
        let b = MemoryBudget::new(100);
        let a = b.try_charge(60).unwrap();
        let since = b.try_charge(41).unwrap_err();
        let c = b.try_charge(40).unwrap();
        assert_eq!((b.used(), b.peak(), b.refused()), (100, 100, 1));
        assert!(b.try_charge(u64::MAX).is_err(), "no overflow");
        drop(a);
        assert_eq!(b.used(), 40);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        // A release after the failed charge: ready at once, nothing lost.
        assert!(b.poll_released(since, &mut cx).is_ready());
        let since = b.try_charge(61).unwrap_err();
        assert!(b.poll_released(since, &mut cx).is_pending());
        drop(c);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(b.poll_released(since, &mut cx).is_ready());
        assert_eq!((b.used(), b.peak()), (0, 100));
    }
}
