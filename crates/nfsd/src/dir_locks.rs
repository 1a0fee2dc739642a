//! Changes to one directory's names, one at a time, as knfsd makes them under the
//! directory's inode lock: a procedure that changes a directory (CREATE, MKDIR,
//! SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, and NFSv4.1's OPEN that creates)
//! holds its directory's lock from the look before the change to the look after it
//! (`proc::names::Target`), so no other change made through this server falls between
//! the two. RFC 8881 §3.3.6: `change_info4.atomic` is TRUE when "the before and after
//! change attributes were obtained atomically with respect to the operation"; with
//! the export declared `nfsd_only` (no change beside the server, [`crate::exports`])
//! that holds, and the Linux client keeps its cache of the directory instead of
//! revalidating it after every change (`update_changeattr_locked` in fs/nfs/nfs4proc.c:
//! a non-atomic change_info makes it drop its cached names and access).
//!
//! Locks are a fixed set of [`STRIPES`] mutexes chosen by the directory's inode
//! number: two directories that share one only wait for each other, which costs
//! time, never correctness. RENAME takes its two directories' locks in stripe order,
//! so two RENAMEs between the same directories in opposite directions cannot
//! deadlock. A lock is held over a few system calls on the directory, never across an
//! await; a file system that hangs while one is held stalls the other changes of the
//! directories of that stripe, as it would stall them anyway.

use std::sync::{Mutex, MutexGuard};

/// How many locks directories share.
pub(crate) const STRIPES: usize = 64;

static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

/// The locks of the directories a procedure changes, held until dropped.
#[must_use = "the directories are unlocked when this is dropped"]
pub(crate) struct Held {
    _first: MutexGuard<'static, ()>,
    _second: Option<MutexGuard<'static, ()>>,
}

fn stripe(ino: u64) -> usize {
    // Inode numbers of one directory's neighbours are often consecutive.
    ((ino ^ (ino >> 16) ^ (ino >> 32)) % STRIPES as u64) as usize
}

fn lock(i: usize) -> MutexGuard<'static, ()> {
    // The lock guards no data: a panic while it was held leaves nothing broken.
    LOCKS[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the directory of inode `ino`.
pub(crate) fn lock_one(ino: u64) -> Held {
    Held {
        _first: lock(stripe(ino)),
        _second: None,
    }
}

/// Locks the directories of inodes `a` and `b` (the same one, or two), in stripe order.
pub(crate) fn lock_two(a: u64, b: u64) -> Held {
    let (x, y) = (stripe(a), stripe(b));
    if x == y {
        return lock_one(a);
    }
    let (low, high) = (x.min(y), x.max(y));
    let first = lock(low);
    Held {
        _first: first,
        _second: Some(lock(high)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Two threads renaming between the same two directories in opposite directions,
    /// many times: both finish (stripe order), and while one holds a directory the
    /// other never does.
    #[test]
    fn opposite_renames_never_deadlock_and_exclude_each_other() {
        let (a, b) = (1_000_003, 2_000_017);
        assert_ne!(stripe(a), stripe(b));
        let inside = Arc::new(AtomicBool::new(false));
        let run = |from: u64, to: u64| {
            let inside = inside.clone();
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    let _held = lock_two(from, to);
                    assert!(!inside.swap(true, Ordering::SeqCst), "both inside at once");
                    inside.store(false, Ordering::SeqCst);
                }
            })
        };
        let (t1, t2) = (run(a, b), run(b, a));
        t1.join().unwrap();
        t2.join().unwrap();
    }

    #[test]
    fn one_directory_twice_is_one_lock() {
        let held = lock_two(42, 42);
        assert!(held._second.is_none());
        drop(held);
        // Free again.
        drop(lock_one(42));
    }
}
