//! Directory descriptors kept open by kernel handle, so that a call on a directory's
//! handle does not open it again (`open_by_handle_at`, then `close`).
//!
//! Why: LOOKUP, CREATE, REMOVE, MKDIR, RENAME and READDIR all name a directory by its
//! handle, and a client creating, looking up or removing files in one directory sends
//! that same handle call after call. Opening by handle is the dearest system call of
//! such a call after the reply's `sendmsg` (docs/bench/README.md, "Where the guest's
//! time goes": 0.045-0.063 ms of a LOOKUP's 0.8-0.9 ms of server CPU in the lab's
//! guest). knfsd keeps the directory's dentry from its handle's last use the same
//! way, in the kernel's dentry cache.
//!
//! What a cached descriptor does not skip: the caller still reads the directory's
//! attributes (`statx`: they go back in the reply, and a directory with no links left
//! is NFS3ERR_STALE), and checks it still lies inside the export
//! ([`crate::vfs::Export`] walks `..`), exactly as after opening it by handle. A
//! descriptor names its inode for as long as it is open, so it cannot come to name
//! another object; the key is the whole kernel handle, generation included.
//!
//! Only directories are kept. A descriptor keeps its inode allocated: for a file
//! removed by a local process, that would hold the file's blocks until the entry
//! left the cache; a removed directory is empty, and is NFS3ERR_STALE by its link
//! count meanwhile.
//!
//! Bounds: at most `capacity` descriptors per export, in two generations of half
//! the capacity each ([`crate::generations`]): when the young one is full, the old
//! generation is closed and the young one becomes the old. The generations also turn
//! over every [`AGE_PERIOD`] ([`DirCache::age`], from a task of the server), so a
//! descriptor not used for two periods is closed: an idle server keeps none. An
//! entry used again within a generation or two stays; a stream of handles of many
//! directories (a tree walk, or a hostile client) only turns generations over. No
//! clock is read per call and no order is kept per entry.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::fh::SmallKernelHandle;
use crate::generations::Generations;

/// Default number of directory descriptors kept open per export.
pub const DEFAULT_CAPACITY: usize = 1024;

/// How often the generations turn over by time ([`DirCache::age`]): a descriptor
/// unused for two periods is closed.
pub const AGE_PERIOD: Duration = Duration::from_secs(5);

/// Open directory descriptors by kernel handle (module documentation).
#[derive(Debug)]
pub struct DirCache {
    // A dropped entry's descriptor is closed as its last `Arc` goes: a call still
    // using one keeps it until it ends.
    generations: Mutex<Generations<SmallKernelHandle, Arc<OwnedFd>>>,
}

impl DirCache {
    /// A cache of at most `capacity` descriptors; 0 keeps none.
    pub fn new(capacity: usize) -> DirCache {
        DirCache {
            generations: Mutex::new(Generations::new(capacity / 2)),
        }
    }

    fn generations(&self) -> MutexGuard<'_, Generations<SmallKernelHandle, Arc<OwnedFd>>> {
        // Each operation leaves both maps consistent at every step, so a poisoned
        // lock (a panic elsewhere while holding it) is still usable.
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The descriptor kept for `handle`, if any; it counts as used.
    pub fn get(&self, handle: &SmallKernelHandle) -> Option<Arc<OwnedFd>> {
        self.generations().get(handle).cloned()
    }

    /// Keeps `fd` (a directory just opened by `handle`).
    pub fn insert(&self, handle: SmallKernelHandle, fd: Arc<OwnedFd>) {
        self.generations().insert(handle, fd);
    }

    /// Drops the descriptor kept for `handle` (its directory is stale, or outside the
    /// export now).
    pub fn remove(&self, handle: &SmallKernelHandle) {
        self.generations().remove(handle);
    }

    /// Turns the generations over: closes the descriptors not used since the last
    /// call, and makes the young generation the old one.
    pub fn age(&self) {
        self.generations().age();
    }

    /// How many descriptors are kept.
    pub fn len(&self) -> usize {
        self.generations().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u32) -> SmallKernelHandle {
        SmallKernelHandle::new(1, &n.to_be_bytes()).unwrap()
    }

    fn fd() -> Arc<OwnedFd> {
        Arc::new(std::fs::File::open("/").unwrap().into())
    }

    #[test]
    fn keeps_what_was_inserted_until_removed() {
        let c = DirCache::new(8);
        let a = fd();
        c.insert(handle(1), a.clone());
        assert!(Arc::ptr_eq(&c.get(&handle(1)).unwrap(), &a));
        assert!(c.get(&handle(2)).is_none());
        c.remove(&handle(1));
        assert!(c.get(&handle(1)).is_none());
        assert!(c.is_empty());
    }

    #[test]
    fn never_holds_more_than_its_capacity_and_keeps_what_is_used() {
        let c = DirCache::new(8);
        let hot = handle(0);
        c.insert(hot, fd());
        for n in 1..100 {
            c.insert(handle(n), fd());
            assert!(c.len() <= 8, "{} entries after {n} inserts", c.len());
            // Used between inserts: it moves to the young generation and stays.
            assert!(c.get(&hot).is_some(), "lost after {n} inserts");
        }
        // The ones not used since went with their generation.
        assert!(c.get(&handle(1)).is_none());
        assert!(c.get(&handle(99)).is_some());
    }

    #[test]
    fn closes_the_descriptors_it_drops() {
        let c = DirCache::new(2);
        let a = fd();
        c.insert(handle(1), a.clone());
        c.insert(handle(2), fd());
        c.insert(handle(3), fd());
        // handle 1 went with the old generation: only our own reference is left.
        assert!(c.get(&handle(1)).is_none());
        assert_eq!(Arc::strong_count(&a), 1);
    }

    #[test]
    fn what_is_not_used_for_two_periods_is_closed() {
        let c = DirCache::new(8);
        c.insert(handle(1), fd());
        c.insert(handle(2), fd());
        c.age();
        assert!(c.get(&handle(1)).is_some(), "used within a period: kept");
        c.age();
        assert!(
            c.get(&handle(2)).is_none(),
            "unused for two periods: closed"
        );
        assert!(c.get(&handle(1)).is_some());
        c.age();
        c.age();
        assert!(c.is_empty());
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let c = DirCache::new(0);
        c.insert(handle(1), fd());
        assert!(c.get(&handle(1)).is_none());
        assert!(c.is_empty());
    }
}
