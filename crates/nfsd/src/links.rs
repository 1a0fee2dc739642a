//! The names under which an export's objects were last seen, bounded.
//!
//! [`crate::vfs::Export`] resolves some handles by walking names from the export root
//! (inode-kind handles, and kernel-kind ones where the server may not open by
//! handle). It keeps, per object, the directory and name it was last seen under. A
//! client can show the server any number of names (create a million files, list a
//! huge tree), so the map must not keep them all: it keeps the most recently used
//! ones, in two generations of at most [`DEFAULT_PER_GENERATION`] entries each
//! ([`crate::generations`]). A name that fell out costs a search of the export the
//! next time its handle is resolved ([`crate::vfs`]'s fallback), which finds it again.

use crate::fh::Key;
use crate::generations::Generations;

/// Entries per generation by default: memory for the map stays below two of them,
/// about 2 x 100,000 x (48 bytes + the name), some 20 MB for 50-byte names.
pub const DEFAULT_PER_GENERATION: usize = 100_000;

/// Where an object was last seen: entry `name` of directory `parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The directory.
    pub parent: Key,
    /// The entry's name in it.
    pub name: Vec<u8>,
}

/// Object -> where it was last seen, most recently used kept, bounded.
#[derive(Debug)]
pub struct Links(Generations<Key, Link>);

impl Default for Links {
    fn default() -> Self {
        Self::with_generation(DEFAULT_PER_GENERATION)
    }
}

impl Links {
    /// A map keeping at least the last `per_generation` entries used (at least 1).
    pub fn with_generation(per_generation: usize) -> Self {
        Links(Generations::new(per_generation.max(1)))
    }

    /// Where `key` was last seen, if still remembered; a use keeps it young.
    pub fn get(&mut self, key: &Key) -> Option<&Link> {
        self.0.get(key)
    }

    /// Records where `key` was seen (nothing allocated if it is already recorded so).
    pub fn remember(&mut self, key: Key, parent: Key, name: &[u8]) {
        if self
            .get(&key)
            .is_some_and(|l| l.parent == parent && l.name == name)
        {
            return;
        }
        let name = name.to_vec();
        self.0.insert(key, Link { parent, name });
    }

    /// Forgets `key` if it was last seen as `name` in `parent`.
    pub fn forget(&mut self, key: Key, parent: Key, name: &[u8]) {
        self.0
            .remove_if(&key, |l| l.parent == parent && l.name == name);
    }

    /// How many entries are held (both generations).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64) -> Key {
        Key { dev: 1, ino }
    }

    fn root() -> Key {
        key(2)
    }

    /// Forgetting takes the entry only if it still says the same place, in either
    /// generation; seen again elsewhere, the new place replaces the old.
    #[test]
    fn forget_and_move() {
        let mut links = Links::with_generation(2);
        links.remember(key(10), root(), b"a");
        links.remember(key(11), root(), b"b");
        links.remember(key(12), root(), b"c"); // 10 and 11 are now old
        links.forget(key(10), root(), b"other");
        assert!(links.get(&key(10)).is_some());
        links.forget(key(11), root(), b"b");
        assert!(links.get(&key(11)).is_none());
        links.remember(key(12), key(10), b"moved");
        assert_eq!(
            links.get(&key(12)),
            Some(&Link {
                parent: key(10),
                name: b"moved".to_vec()
            })
        );
        assert!(links.len() <= 4);
    }
}
