//! The names under which an export's objects were last seen, bounded.
//!
//! [`crate::vfs::Export`] resolves some handles by walking names from the export root
//! (inode-kind handles, and kernel-kind ones where the server may not open by
//! handle). It keeps, per object, the directory and name it was last seen under. A
//! client can show the server any number of names (create a million files, list a
//! huge tree), so the map must not keep them all: it keeps the most recently used
//! ones, in two generations of at most [`Links::per_generation`] entries each.
//!
//! New entries go into the young generation; when that is full, it becomes the old
//! one and the previous old one is dropped whole. An entry found in the old
//! generation moves back to the young one, so a name in use survives any number of
//! turns. This is the usual cheap approximation of least-recently-used (a "2Q"-like
//! scheme without a list to maintain): every entry inserted or used within the last
//! `per_generation` insertions is still there, and memory stays below two
//! generations' worth. A name that fell out costs a search of the export the next
//! time its handle is resolved ([`crate::vfs`]'s fallback), which finds it again.

use std::collections::HashMap;

use crate::fh::Key;

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

/// Object -> where it was last seen, most recently used first, bounded.
#[derive(Debug)]
pub struct Links {
    young: HashMap<Key, Link>,
    old: HashMap<Key, Link>,
    per_generation: usize,
}

impl Default for Links {
    fn default() -> Self {
        Self::with_generation(DEFAULT_PER_GENERATION)
    }
}

impl Links {
    /// A map keeping at least the last `per_generation` entries used (at least 1).
    pub fn with_generation(per_generation: usize) -> Self {
        Self {
            young: HashMap::new(),
            old: HashMap::new(),
            per_generation: per_generation.max(1),
        }
    }

    /// How many entries a generation holds before it ages.
    pub fn per_generation(&self) -> usize {
        self.per_generation
    }

    /// Where `key` was last seen, if still remembered; a use keeps it young.
    pub fn get(&mut self, key: &Key) -> Option<&Link> {
        if !self.young.contains_key(key) {
            let link = self.old.remove(key)?;
            self.insert(*key, link);
        }
        self.young.get(key)
    }

    /// Records where `key` was seen (nothing allocated if it is already recorded so).
    pub fn remember(&mut self, key: Key, parent: Key, name: &[u8]) {
        if self
            .get(&key)
            .is_some_and(|l| l.parent == parent && l.name == name)
        {
            return;
        }
        self.insert(
            key,
            Link {
                parent,
                name: name.to_vec(),
            },
        );
    }

    /// Forgets `key` if it was last seen as `name` in `parent`.
    pub fn forget(&mut self, key: Key, parent: Key, name: &[u8]) {
        let seen_so = |l: &Link| l.parent == parent && l.name == name;
        if self.young.get(&key).is_some_and(seen_so) {
            self.young.remove(&key);
        }
        if self.old.get(&key).is_some_and(seen_so) {
            self.old.remove(&key);
        }
    }

    /// How many entries are held (both generations).
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&mut self, key: Key, link: Link) {
        if self.young.len() >= self.per_generation && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
        }
        self.old.remove(&key);
        self.young.insert(key, link);
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

    /// However many names are seen, at most two generations are held, and every name
    /// seen within the last generation's worth is still there.
    #[test]
    fn bounded_and_keeps_the_recent_ones() {
        let mut links = Links::with_generation(100);
        for ino in 10..10_010 {
            links.remember(key(ino), root(), format!("f{ino}").as_bytes());
            assert!(links.len() <= 200, "{} held", links.len());
        }
        for ino in 9_910..10_010 {
            let l = links.get(&key(ino)).expect("a recent name was dropped");
            assert_eq!(l.name, format!("f{ino}").as_bytes());
        }
        assert!(links.get(&key(10)).is_none(), "the oldest name was kept");
    }

    /// A name in use moves back to the young generation, so it outlives any number of
    /// generations of other names.
    #[test]
    fn a_name_in_use_stays() {
        let mut links = Links::with_generation(10);
        links.remember(key(5), root(), b"dir");
        for ino in 100..1_000 {
            links.remember(key(ino), key(5), b"f");
            assert!(links.get(&key(5)).is_some(), "dropped after {ino}");
        }
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
