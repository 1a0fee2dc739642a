//! Buffer pools for data paths: buffers that come back for reuse, so that a call
//! neither allocates, zero-fills nor page-faults a fresh buffer for the data a peer
//! is about to overwrite.
//!
//! A [`BufferPool`] hands out [`PooledBuffer`]s. One buffer is one allocation shared
//! by the memory region a provider places data into
//! ([`crate::ProtectionDomain::register_pooled`]) and the [`Bytes`] the consumer hands
//! up ([`PooledBuffer::freeze`]); when the last of them is gone, the allocation goes
//! back to its pool (up to the pool's retention cap), **not zeroed**: a new buffer
//! holds whatever its last user left there. Use one only where every byte handed up
//! is first written (an RDMA Read sink, which a successful Read fills whole), or zero
//! it ([`PooledBuffer::zero`]).
//!
//! # Safety model (the only `unsafe` of this crate)
//!
//! The allocation is written through a raw pointer while `Bytes` over other parts of
//! it exist, so the buffer tracks two kinds of ranges under its lock:
//! - **frozen** ranges ([`PooledBuffer::freeze`]): handed out as `Bytes`, immutable
//!   from then on until the allocation goes back to the pool, which happens only
//!   when no `Bytes` (they each hold the buffer) remain;
//! - **lent** ranges (`PooledBuffer::lend`): owned by one memory region, which alone
//!   reads and writes them (under its own lock) until it gives them back.
//!
//! A write ([`PooledBuffer::write`]) needs a range neither frozen nor lent; a freeze
//! needs one not lent; a lend needs one neither frozen nor lent. So no byte is ever
//! written while anyone else can read it, and every `&[u8]`/`&mut [u8]` made from the
//! pointer covers bytes only its maker may touch. The allocation is a `Box<[u8]>`
//! taken apart with `Box::into_raw` and put back together once, on drop.
//!
//! # Registration cache
//!
//! A device that registers memory itself (verbs `ibv_reg_mr`: a system call that
//! pins pages) would otherwise register every RDMA Read sink and every reply's data
//! again for each call. An allocation of a pool therefore keeps, per protection
//! domain, one device registration of its whole self for **local access only**
//! ([`PooledBuffer::local_registration`]): made on first use, kept while the
//! allocation is idle in its pool, and dropped (deregistered) before the memory is
//! freed (`Idle`'s field order, `BufShared`'s drop). No peer can reach such a
//! registration (no remote rights), so keeping it across calls exposes nothing, as
//! the long-lived Send and Receive buffers of a connection expose nothing; regions
//! with remote rights are still registered for one call each. The cached
//! registration is only ever named through regions: written through ranges lent to
//! one region (RDMA Read sinks), read through frozen ranges (gather lists), so the
//! range rules above still say who touches which byte. [`local_registration_of`]
//! finds the allocation behind `Bytes` frozen from a pooled buffer by address.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;

use crate::device::{DeviceRegistration, RegisterError};

/// Why a pooled buffer refused an access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// The range lies (partly) outside the buffer.
    #[error("range {0:?} outside the buffer")]
    OutOfBounds(Range<usize>),
    /// Part of the range was handed out as `Bytes` and is immutable.
    #[error("range {0:?} overlaps bytes already handed out")]
    Frozen(Range<usize>),
    /// Part of the range is lent to a memory region.
    #[error("range {0:?} overlaps a range lent to a memory region")]
    Lent(Range<usize>),
}

/// Buffers are kept by capacity, rounded up to this granule.
const GRANULE: usize = 64 * 1024;

/// A pool of reusable buffers. Cheap to clone (shared handle); shared across
/// connections, so the memory it keeps serves them all.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolShared>,
}

/// A device registration of a whole allocation for local access, and the id of the
/// protection domain it belongs to.
type CachedRegistration = (u64, Arc<dyn DeviceRegistration>);

/// An allocation idle in its pool, with the registrations it keeps. Field order
/// matters: the registrations are dropped (deregistered) before the memory is freed.
struct Idle {
    registrations: Vec<CachedRegistration>,
    mem: Box<[u8]>,
}

struct PoolShared {
    /// Idle allocations by capacity.
    free: Mutex<HashMap<usize, Vec<Idle>>>,
    /// Most bytes kept idle; a buffer coming back beyond it is freed.
    max_idle: usize,
    stats: Mutex<PoolStats>,
    /// Buffers taken (reused and allocated) when [`BufferPool::release_if_unused`]
    /// last looked.
    taken_at_last_look: AtomicU64,
}

/// What a pool did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers handed out from idle allocations.
    pub reused: u64,
    /// Buffers that needed a new allocation.
    pub allocated: u64,
    /// Bytes idle in the pool now.
    pub idle_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere; free lists and range lists stay
    // valid (each update is one push, pop or retain).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl BufferPool {
    /// A pool keeping at most `max_idle` bytes of idle buffers.
    pub fn new(max_idle: usize) -> BufferPool {
        BufferPool {
            inner: Arc::new(PoolShared {
                free: Mutex::new(HashMap::new()),
                max_idle,
                stats: Mutex::new(PoolStats::default()),
                taken_at_last_look: AtomicU64::new(0),
            }),
        }
    }

    /// A buffer of `len` bytes: an idle one if the pool has one of that capacity
    /// (its contents are stale, see the module docs), else a new zeroed allocation.
    pub fn get(&self, len: usize) -> PooledBuffer {
        let capacity = len.div_ceil(GRANULE).max(1) * GRANULE;
        let reused = lock(&self.inner.free).get_mut(&capacity).and_then(Vec::pop);
        let idle = {
            let mut st = lock(&self.inner.stats);
            match reused {
                Some(m) => {
                    st.reused += 1;
                    st.idle_bytes -= capacity;
                    m
                }
                None => {
                    st.allocated += 1;
                    drop(st);
                    Idle {
                        registrations: Vec::new(),
                        mem: vec![0u8; capacity].into_boxed_slice(),
                    }
                }
            }
        };
        PooledBuffer::from_idle(idle, len, Arc::downgrade(&self.inner))
    }

    /// What the pool did so far.
    pub fn stats(&self) -> PoolStats {
        *lock(&self.inner.stats)
    }

    /// Frees every idle buffer (buffers in use come back as usual); returns the bytes
    /// freed. For a quiet period: the pool keeps up to its cap idle for the next
    /// burst, and this gives that memory back when no burst comes.
    pub fn release_idle(&self) -> usize {
        let idle = std::mem::take(&mut *lock(&self.inner.free));
        let freed: usize = idle.values().flatten().map(|m| m.mem.len()).sum();
        let mut st = lock(&self.inner.stats);
        st.idle_bytes = st.idle_bytes.saturating_sub(freed);
        freed
    }

    /// Frees every idle buffer if none was taken since the last call: called once a
    /// period, it gives the memory kept for the next burst back after a period
    /// without one. Returns the bytes freed.
    pub fn release_if_unused(&self) -> usize {
        let st = self.stats();
        let taken = st.reused + st.allocated;
        let before = self.inner.taken_at_last_look.swap(taken, Ordering::Relaxed);
        if taken != before || st.idle_bytes == 0 {
            return 0;
        }
        self.release_idle()
    }
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("max_idle", &self.inner.max_idle)
            .field("stats", &self.stats())
            .finish()
    }
}

impl PoolShared {
    fn give_back(&self, mem: Idle) {
        let capacity = mem.mem.len();
        let mut st = lock(&self.stats);
        if st.idle_bytes + capacity > self.max_idle {
            return;
        }
        st.idle_bytes += capacity;
        drop(st);
        lock(&self.free).entry(capacity).or_default().push(mem);
    }
}

/// One buffer of a [`BufferPool`]. Clones share it (module docs).
#[derive(Clone)]
pub struct PooledBuffer {
    shared: Arc<BufShared>,
}

#[derive(Default)]
struct Ranges {
    frozen: Vec<Range<usize>>,
    lent: Vec<Range<usize>>,
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

impl Ranges {
    fn frozen_overlap(&self, r: &Range<usize>) -> bool {
        self.frozen.iter().any(|f| overlaps(f, r))
    }

    fn lent_overlap(&self, r: &Range<usize>) -> bool {
        self.lent.iter().any(|l| overlaps(l, r))
    }
}

struct BufShared {
    /// Start of the allocation (`Box::into_raw`); valid for `capacity` bytes until
    /// `drop` puts the box back together.
    ptr: *mut u8,
    capacity: usize,
    /// Bytes usable: `len <= capacity`.
    len: usize,
    ranges: Mutex<Ranges>,
    /// Device registrations of the whole allocation for local access, one per
    /// protection domain (module docs, "Registration cache").
    registrations: Mutex<Vec<CachedRegistration>>,
    pool: Weak<PoolShared>,
    /// What the user asked to keep while the buffer is in use
    /// ([`PooledBuffer::hold`]); dropped with it.
    held: Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
}

/// Allocations of pools by start address, so that `Bytes` frozen from one can be
/// traced back to it ([`local_registration_of`]). An entry lives as long as its
/// `BufShared`: inserted when made, removed when dropped, before the memory goes.
static LIVE: Mutex<BTreeMap<usize, (usize, Weak<BufShared>)>> = Mutex::new(BTreeMap::new());

/// The cached local registration, with protection domain `pd_id`, of the pooled
/// allocation that `bytes` lie in, making it if there is none yet
/// ([`PooledBuffer::local_registration`]); `None` when `bytes` are not (wholly)
/// inside a live pooled allocation, or when one cannot be made now.
///
/// Sound because two live allocations never overlap: if `bytes` (alive, held by the
/// caller) lie inside a live allocation's range, they are that allocation's, and the
/// caller's `Bytes` keep it alive.
pub(crate) fn local_registration_of(
    bytes: &[u8],
    pd_id: u64,
    register: impl FnOnce(&[u8]) -> Result<Box<dyn DeviceRegistration>, RegisterError>,
) -> Result<Option<Arc<dyn DeviceRegistration>>, RegisterError> {
    match live_allocation(bytes) {
        Some((buf, _)) => buf.local_registration(pd_id, register),
        None => Ok(None),
    }
}

/// The live pooled allocation `bytes` lie wholly inside, and their offset in it.
fn live_allocation(bytes: &[u8]) -> Option<(Arc<BufShared>, usize)> {
    let start = bytes.as_ptr() as usize;
    let end = start.checked_add(bytes.len())?;
    let live = lock(&LIVE);
    let (&base, (alloc_end, buf)) = live.range(..=start).next_back()?;
    if end > *alloc_end {
        return None;
    }
    Some((buf.upgrade()?, start - base))
}

impl BufShared {
    /// See [`PooledBuffer::local_registration`].
    fn local_registration(
        &self,
        pd_id: u64,
        register: impl FnOnce(&[u8]) -> Result<Box<dyn DeviceRegistration>, RegisterError>,
    ) -> Result<Option<Arc<dyn DeviceRegistration>>, RegisterError> {
        let mut regs = lock(&self.registrations);
        if let Some((_, r)) = regs.iter().find(|(id, _)| *id == pd_id) {
            return Ok(Some(r.clone()));
        }
        // Held while the device registers: no range can be lent or written meanwhile.
        let ranges = lock(&self.ranges);
        if !ranges.lent.is_empty() {
            // A region may be writing a lent range: the whole allocation cannot be
            // borrowed as `&[u8]` now. The caller registers its own range instead.
            return Ok(None);
        }
        // SAFETY: the whole allocation, live while `self` is; nothing is lent
        // (checked) and nothing can be written or lent while we hold `ranges`, so a
        // shared borrow for the duration of the registration call is sound.
        let whole = unsafe { std::slice::from_raw_parts(self.ptr, self.capacity) };
        let reg: Arc<dyn DeviceRegistration> = Arc::from(register(whole)?);
        drop(ranges);
        regs.push((pd_id, reg.clone()));
        Ok(Some(reg))
    }
}

// SAFETY: the allocation is owned by `BufShared` alone and every access to its bytes
// follows the range rules of the module docs, enforced under `ranges`: shared reads
// only of frozen bytes (never written again), exclusive access to lent bytes by the
// one region that borrowed them, writes only to bytes neither frozen nor lent and
// under the lock. So moving or sharing it between threads creates no data race.
unsafe impl Send for BufShared {}
// SAFETY: as for `Send`.
unsafe impl Sync for BufShared {}

impl Drop for BufShared {
    fn drop(&mut self) {
        {
            let mut live = lock(&LIVE);
            if matches!(live.get(&(self.ptr as usize)), Some((_, w)) if std::ptr::eq(w.as_ptr(), &*self))
            {
                live.remove(&(self.ptr as usize));
            }
        }
        let registrations = std::mem::take(
            self.registrations
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()),
        );
        // SAFETY: `ptr`/`capacity` came from `Box::into_raw` of a `Box<[u8]>` of that
        // length (`from_idle`), and this is the only place that rebuilds it, once. No
        // `Bytes` or region can still point into it: each holds an `Arc<BufShared>`.
        let mem =
            unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.capacity)) };
        // Dropped here or by the pool: registrations first, then the memory.
        let idle = Idle { registrations, mem };
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(idle);
        }
    }
}

impl PooledBuffer {
    fn from_idle(idle: Idle, len: usize, pool: Weak<PoolShared>) -> PooledBuffer {
        let Idle { registrations, mem } = idle;
        let capacity = mem.len();
        let ptr = Box::into_raw(mem).cast::<u8>();
        let pooled = pool.strong_count() > 0;
        let shared = Arc::new(BufShared {
            ptr,
            capacity,
            len: len.min(capacity),
            ranges: Mutex::new(Ranges::default()),
            registrations: Mutex::new(registrations),
            pool,
            held: Mutex::new(Vec::new()),
        });
        if pooled {
            lock(&LIVE).insert(
                ptr as usize,
                (ptr as usize + capacity, Arc::downgrade(&shared)),
            );
        }
        PooledBuffer { shared }
    }

    /// Keeps `guard` until this buffer is done with: until its last clone and the
    /// last `Bytes` frozen from it are dropped, which is when its memory goes back to
    /// the pool or is freed. For a charge to a memory budget that must last as long
    /// as the memory it stands for, wherever the frozen bytes travel (a reply's data
    /// gathered into a Send or an RDMA Write).
    pub fn hold(&self, guard: Box<dyn std::any::Any + Send + Sync>) {
        lock(&self.shared.held).push(guard);
    }

    /// A buffer holding `data`, in no pool (freed when dropped).
    pub fn from_vec(data: Vec<u8>) -> PooledBuffer {
        let len = data.len();
        let idle = Idle {
            registrations: Vec::new(),
            mem: data.into_boxed_slice(),
        };
        PooledBuffer::from_idle(idle, len, Weak::new())
    }

    /// The device registration of this buffer's whole allocation, for local access,
    /// with protection domain `pd_id`: the cached one, or one made now by `register`
    /// (called with the whole allocation) and kept with the allocation, idle periods
    /// in its pool included, until the allocation is freed (module docs). `Ok(None)`
    /// when none exists and part of the buffer is lent (register the range alone).
    pub(crate) fn local_registration(
        &self,
        pd_id: u64,
        register: impl FnOnce(&[u8]) -> Result<Box<dyn DeviceRegistration>, RegisterError>,
    ) -> Result<Option<Arc<dyn DeviceRegistration>>, RegisterError> {
        self.shared.local_registration(pd_id, register)
    }

    /// The pooled buffer that `bytes` (frozen from it, [`PooledBuffer::freeze`]) lie
    /// in, and where they start in it: `Bytes` handed along lead back to their buffer,
    /// so that a message can be joined around them in the room their owner left
    /// ([`PooledBuffer::write`] never touches frozen or lent bytes). `None` when they
    /// are not wholly inside the usable part of a live pooled buffer. Sound for the
    /// reason [`local_registration_of`] is.
    pub fn holding(bytes: &[u8]) -> Option<(PooledBuffer, usize)> {
        let (shared, at) = live_allocation(bytes)?;
        if at + bytes.len() > shared.len {
            return None;
        }
        Some((PooledBuffer { shared }, at))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.shared.len
    }

    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address of byte `offset`, to recognize `Bytes` frozen from this buffer;
    /// `None` beyond its end.
    pub fn addr(&self, offset: usize) -> Option<*const u8> {
        (offset <= self.shared.len).then(|| self.shared.ptr.wrapping_add(offset).cast_const())
    }

    fn check(&self, r: &Range<usize>) -> Result<(), BufferError> {
        if r.start > r.end || r.end > self.shared.len {
            return Err(BufferError::OutOfBounds(r.clone()));
        }
        Ok(())
    }

    /// Copies `data` in at `offset`: those bytes must be neither handed out nor lent.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), BufferError> {
        let r = offset..offset.saturating_add(data.len());
        self.with_mut(r, |m| m.copy_from_slice(data))
    }

    /// Runs `f` over the bytes of `r` (neither handed out nor lent), mutably: to fill
    /// them in place, e.g. by reading a file into them. The buffer's lock is held while
    /// `f` runs; its other ranges cannot be frozen or lent meanwhile.
    pub fn with_mut<R>(
        &self,
        r: Range<usize>,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, BufferError> {
        self.check(&r)?;
        let ranges = lock(&self.shared.ranges);
        if ranges.frozen_overlap(&r) {
            return Err(BufferError::Frozen(r));
        }
        if ranges.lent_overlap(&r) {
            return Err(BufferError::Lent(r));
        }
        // SAFETY: `r` is inside the allocation (checked) and neither frozen nor lent
        // (checked under the lock, which we hold until `f` returns): no one else reads
        // or writes it, so this is the only reference to those bytes.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(self.shared.ptr.add(r.start), r.len()) };
        let out = f(bytes);
        drop(ranges);
        Ok(out)
    }

    /// Zeroes the bytes of `r` (neither handed out nor lent).
    pub fn zero(&self, r: Range<usize>) -> Result<(), BufferError> {
        self.with_mut(r, |m| m.fill(0))
    }

    /// The bytes of `r` as `Bytes`, without a copy. They are immutable from now on;
    /// the buffer goes back to its pool when these and every other handle are gone.
    pub fn freeze(&self, r: Range<usize>) -> Result<Bytes, BufferError> {
        self.check(&r)?;
        let mut ranges = lock(&self.shared.ranges);
        if ranges.lent_overlap(&r) {
            return Err(BufferError::Lent(r));
        }
        if !ranges
            .frozen
            .iter()
            .any(|f| f.start <= r.start && r.end <= f.end)
        {
            ranges.frozen.push(r.clone());
        }
        drop(ranges);
        Ok(Bytes::from_owner(Frozen {
            buf: self.shared.clone(),
            range: r,
        }))
    }

    /// Lends `r` to one memory region, which alone accesses it until it drops the
    /// returned [`Lent`] (crate-internal: `ProtectionDomain::register_pooled`).
    pub(crate) fn lend(&self, r: Range<usize>) -> Result<Lent, BufferError> {
        self.check(&r)?;
        let mut ranges = lock(&self.shared.ranges);
        if ranges.frozen_overlap(&r) {
            return Err(BufferError::Frozen(r));
        }
        if ranges.lent_overlap(&r) {
            return Err(BufferError::Lent(r));
        }
        ranges.lent.push(r.clone());
        Ok(Lent {
            buf: self.shared.clone(),
            range: r,
        })
    }
}

impl std::fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("len", &self.shared.len)
            .field("capacity", &self.shared.capacity)
            .finish()
    }
}

/// A frozen range, the owner behind the `Bytes` of [`PooledBuffer::freeze`].
struct Frozen {
    buf: Arc<BufShared>,
    range: Range<usize>,
}

impl AsRef<[u8]> for Frozen {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the range is inside the allocation (checked at freeze), frozen (so
        // never written again), and the allocation lives as long as `self.buf`.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.add(self.range.start), self.range.len()) }
    }
}

/// A range of a pooled buffer lent to one memory region: its only accessor until
/// dropped.
pub(crate) struct Lent {
    buf: Arc<BufShared>,
    range: Range<usize>,
}

impl Lent {
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: lent to us alone (module docs), inside the allocation (checked when
        // lent), alive while `self.buf` is.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.add(self.range.start), self.range.len()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only live reference the
        // region hands out.
        unsafe {
            std::slice::from_raw_parts_mut(self.buf.ptr.add(self.range.start), self.range.len())
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut ranges = lock(&self.buf.ranges);
        if let Some(i) = ranges.lent.iter().position(|l| *l == self.range) {
            ranges.lent.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_buffers_go_only_after_a_period_in_which_none_was_taken() {
        let pool = BufferPool::new(16 << 20);
        drop(pool.get(100_000));
        let idle = pool.stats().idle_bytes;
        assert!(idle > 0);
        assert_eq!(pool.release_if_unused(), 0, "taken since the last look");
        drop(pool.get(100_000));
        assert_eq!(pool.release_if_unused(), 0, "taken again");
        assert_eq!(pool.stats().idle_bytes, idle);
        assert_eq!(pool.release_if_unused(), idle, "a quiet period");
        assert_eq!(pool.stats().idle_bytes, 0);
        assert_eq!(pool.release_if_unused(), 0, "nothing idle");
    }

    /// What a buffer holds lasts as long as the last `Bytes` frozen from it.
    #[test]
    fn a_held_guard_goes_with_the_last_frozen_bytes() {
        struct Guard(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pool = BufferPool::new(1 << 20);
        let b = pool.get(100);
        b.hold(Box::new(Guard(dropped.clone())));
        let bytes = b.freeze(0..10).unwrap();
        drop(b);
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(bytes);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn buffers_come_back_and_are_reused_without_zeroing() {
        let pool = BufferPool::new(1 << 20);
        let b = pool.get(1000);
        assert_eq!(b.len(), 1000);
        b.write(0, b"stale").unwrap();
        let ptr = b.shared.ptr;
        let bytes = b.freeze(0..5).unwrap();
        drop(b);
        // Still held by the Bytes: not back yet.
        assert_eq!(pool.stats().idle_bytes, 0);
        assert_eq!(&bytes[..], b"stale");
        drop(bytes);
        assert_eq!(pool.stats().idle_bytes, GRANULE);
        let again = pool.get(2000);
        assert_eq!(again.shared.ptr, ptr);
        assert_eq!(&again.freeze(0..5).unwrap()[..], b"stale");
        assert_eq!(
            pool.stats(),
            PoolStats {
                reused: 1,
                allocated: 1,
                idle_bytes: 0
            }
        );
    }

    /// Frozen bytes lead back to their pooled buffer, whose free bytes can still be
    /// written around them; bytes of no pool, or past the usable length, do not.
    #[test]
    fn frozen_bytes_lead_back_to_their_buffer() {
        let pool = BufferPool::new(1 << 20);
        let b = pool.get(100);
        b.write(40, b"data").unwrap();
        let data = b.freeze(40..44).unwrap();
        drop(b);
        let (again, at) = PooledBuffer::holding(&data).expect("a live pooled buffer");
        assert_eq!(at, 40);
        assert_eq!(again.addr(at), Some(data.as_ptr()));
        assert_eq!(again.write(36, b"head"), Ok(()));
        assert_eq!(again.write(42, b"xx"), Err(BufferError::Frozen(42..44)));
        assert!(PooledBuffer::holding(&data[1..3]).is_some_and(|(_, at)| at == 41));
        assert!(PooledBuffer::holding(b"not pooled").is_none());
        let unpooled = PooledBuffer::from_vec(vec![1; 8]);
        assert!(PooledBuffer::holding(&unpooled.freeze(0..8).unwrap()).is_none());
    }

    #[test]
    fn with_mut_fills_free_bytes_only() {
        let b = PooledBuffer::from_vec(vec![0; 16]);
        assert_eq!(b.with_mut(0..4, |m| m.copy_from_slice(b"abcd")), Ok(()));
        let frozen = b.freeze(0..4).unwrap();
        assert_eq!(&frozen[..], b"abcd");
        assert_eq!(b.with_mut(2..6, |_| ()), Err(BufferError::Frozen(2..6)));
        let _lent = b.lend(8..12).unwrap();
        assert_eq!(b.with_mut(10..11, |_| ()), Err(BufferError::Lent(10..11)));
        assert_eq!(
            b.with_mut(12..17, |_| ()),
            Err(BufferError::OutOfBounds(12..17))
        );
        assert_eq!(b.with_mut(4..8, |m| m.len()), Ok(4));
    }

    #[test]
    fn the_idle_cap_frees_what_does_not_fit() {
        let pool = BufferPool::new(GRANULE);
        let (a, b) = (pool.get(1), pool.get(1));
        drop(a);
        drop(b);
        assert_eq!(pool.stats().idle_bytes, GRANULE);
    }

    #[test]
    fn idle_buffers_are_released_on_demand_and_buffers_in_use_still_come_back() {
        let pool = BufferPool::new(4 * GRANULE);
        let (a, b, c) = (pool.get(1), pool.get(GRANULE + 1), pool.get(1));
        drop((a, b));
        assert_eq!(pool.stats().idle_bytes, 3 * GRANULE);
        assert_eq!(pool.release_idle(), 3 * GRANULE);
        assert_eq!(pool.stats().idle_bytes, 0);
        assert_eq!(pool.release_idle(), 0);
        drop(c);
        assert_eq!(pool.stats().idle_bytes, GRANULE, "in use then, pooled now");
        let before = pool.stats().allocated;
        drop(pool.get(GRANULE + 1));
        assert_eq!(pool.stats().allocated, before + 1, "released ones are gone");
    }

    #[test]
    fn frozen_bytes_are_never_written_and_lent_bytes_are_exclusive() {
        let b = PooledBuffer::from_vec(vec![0; 100]);
        let data = b.freeze(10..20).unwrap();
        assert_eq!(b.write(15, b"x"), Err(BufferError::Frozen(15..16)));
        assert_eq!(b.zero(0..11), Err(BufferError::Frozen(0..11)));
        assert!(b.lend(19..30).is_err());
        b.write(0, b"head").unwrap();
        let mut lent = b.lend(20..40).unwrap();
        lent.as_mut_slice()[0] = 7;
        assert_eq!(b.write(39, b"y"), Err(BufferError::Lent(39..40)));
        assert_eq!(b.freeze(30..31), Err(BufferError::Lent(30..31)));
        assert!(b.lend(25..26).is_err());
        drop(lent);
        // Given back: frozen around the earlier range, together.
        let whole = b.freeze(0..40).unwrap();
        assert_eq!(&whole[..4], b"head");
        assert_eq!(whole[20], 7);
        assert_eq!(data.as_ptr(), whole[10..].as_ptr());
        assert_eq!(b.write(99, b"zz"), Err(BufferError::OutOfBounds(99..101)));
        let (start, end) = (5, 3);
        assert_eq!(
            b.freeze(start..end),
            Err(BufferError::OutOfBounds(start..end))
        );
    }
}
