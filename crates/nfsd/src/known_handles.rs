//! What the handles of objects this server has had open name, by device, inode and
//! birth time, bounded: LOOKUP and READDIR take an entry's handle from here instead
//! of asking the kernel for it again by name (`name_to_handle_at`, one system call
//! per entry beside the `statx` they make anyway; in the lab's TCG guest a listing
//! of 10,000 files spent about half its server time in those two calls).
//!
//! Keyed by device, inode number and birth time: a freed inode number given to a new
//! file comes with that file's birth time, and an inode's kernel handle (inode number
//! and generation) never changes, so one key names one handle. Objects whose file
//! system reports no birth time (generation 0) are not kept.
//!
//! An entry made from a descriptor of the object ([`crate::vfs::Export`]'s handle of
//! an open node) is exact. One made from a name (LOOKUP, READDIR: `statx` of the name,
//! then `name_to_handle_at` of it) pairs the two calls' answers, and a process that
//! replaces the name between them pairs one object's attributes with the other's
//! handle, as the same race does without this map. Resolving such a handle finds its
//! inode number is not the object's and answers NFS3ERR_STALE (NFS4ERR_STALE); that
//! answer forgets the entry ([`KnownHandles::forget`]), so the client's next LOOKUP
//! asks the kernel again instead of getting the same handle.
//!
//! A file replaced at a name shows its own inode number and birth time in the `statx`
//! of that name, so it misses here and is asked for. Bounded as the other maps of an
//! export ([`crate::generations`]): two generations of at most [`PER_GENERATION`]
//! entries. And let go of when the server is idle: once a whole
//! [`crate::dir_cache::AGE_PERIOD`] passed without a call using the map, a
//! generation is dropped each period ([`KnownHandles::age_if_unused`]), so that the
//! memory a burst of listings took goes back when the clients leave (the `soak` test
//! asserts it), while a busy server keeps what it uses.

use crate::fh::{Key, Object};
use crate::generations::Generations;

/// Entries per generation: memory stays below two of them; an entry is 64 bytes (key,
/// birth time and a kernel handle of up to 40 bytes inline), so a full generation's
/// table of 65,536 slots takes about 4.3 MB, and the map at most about 9 MB.
pub const PER_GENERATION: usize = 32_768;

/// Device and inode -> (birth time, what a handle of that object names).
#[derive(Debug)]
pub struct KnownHandles {
    map: Generations<Key, (u64, Object)>,
    /// Whether a call used the map since the last [`KnownHandles::age_if_unused`].
    used: bool,
}

impl Default for KnownHandles {
    fn default() -> Self {
        KnownHandles {
            map: Generations::new(PER_GENERATION),
            used: false,
        }
    }
}

impl KnownHandles {
    /// What a handle of the object `key` born at `gen` names, if known.
    pub fn get(&mut self, key: Key, gen: u64) -> Option<Object> {
        self.used = true;
        if gen == 0 {
            return None;
        }
        match self.map.get(&key) {
            Some(&(born, object)) if born == gen => Some(object),
            _ => None,
        }
    }

    /// Keeps `object` for `key` born at `gen` (replacing what was kept for an earlier
    /// file of that inode number); nothing without a birth time.
    pub fn keep(&mut self, key: Key, gen: u64, object: Object) {
        self.used = true;
        if gen != 0 {
            self.map.insert(key, (gen, object));
        }
    }

    /// Forgets what was kept for `key`: a handle made with it was found stale.
    pub fn forget(&mut self, key: Key) {
        self.map.remove(&key);
    }

    /// Drops a generation if no call used the map since the last time this was
    /// called (module docs): two idle periods and nothing is kept.
    pub fn age_if_unused(&mut self) {
        if !std::mem::take(&mut self.used) {
            self.map.age();
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_map_is_let_go_of_and_a_used_one_kept() {
        let mut k = KnownHandles::default();
        let key = Key { dev: 1, ino: 2 };
        let object = Object::Inode { key, gen: 7 };
        k.keep(key, 7, object);
        // Used since the last tick: kept, however many ticks while it is used.
        for _ in 0..3 {
            k.age_if_unused();
            assert_eq!(k.get(key, 7), Some(object));
        }
        // The period of the last use ends; then one idle period, then another.
        k.age_if_unused();
        k.age_if_unused();
        assert_eq!(
            k.len(),
            1,
            "one idle period: the entry is in the old generation"
        );
        k.age_if_unused();
        assert!(k.is_empty(), "two idle periods: nothing is kept");
    }

    #[test]
    fn an_object_is_known_by_device_inode_and_birth_time_only() {
        let mut k = KnownHandles::default();
        let key = Key { dev: 1, ino: 2 };
        let object = Object::Inode { key, gen: 7 };
        k.keep(key, 7, object);
        assert_eq!(k.get(key, 7), Some(object));
        // The inode number again, born later: another file.
        assert_eq!(k.get(key, 8), None);
        assert_eq!(k.get(Key { dev: 3, ino: 2 }, 7), None);
        // No birth time: never kept, never found.
        k.keep(key, 0, object);
        assert_eq!(k.get(key, 0), None);
        // A handle found stale: forgotten.
        k.forget(key);
        assert_eq!(k.get(key, 7), None);
    }
}
