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
//! entries.

use crate::fh::{Key, Object};
use crate::generations::Generations;

/// Entries per generation: memory stays below two of them, about
/// 2 x 32,768 x 100 bytes (key, handle and the map's own share), some 6.5 MB.
pub const PER_GENERATION: usize = 32_768;

/// Device and inode -> (birth time, what a handle of that object names).
#[derive(Debug)]
pub struct KnownHandles(Generations<Key, (u64, Object)>);

impl Default for KnownHandles {
    fn default() -> Self {
        KnownHandles(Generations::new(PER_GENERATION))
    }
}

impl KnownHandles {
    /// What a handle of the object `key` born at `gen` names, if known.
    pub fn get(&mut self, key: Key, gen: u64) -> Option<Object> {
        if gen == 0 {
            return None;
        }
        match self.0.get(&key) {
            Some(&(born, object)) if born == gen => Some(object),
            _ => None,
        }
    }

    /// Keeps `object` for `key` born at `gen` (replacing what was kept for an earlier
    /// file of that inode number); nothing without a birth time.
    pub fn keep(&mut self, key: Key, gen: u64, object: Object) {
        if gen != 0 {
            self.0.insert(key, (gen, object));
        }
    }

    /// Forgets what was kept for `key`: a handle made with it was found stale.
    pub fn forget(&mut self, key: Key) {
        self.0.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
