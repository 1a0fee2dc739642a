//! A bounded map that keeps what was used recently: two generations of entries.
//!
//! New and used entries go into the young generation. When the young generation is
//! full, it becomes the old one and the previous old generation is dropped whole;
//! [`Generations::age`] does the same on demand (a caller that also ages by time).
//! An entry found in the old generation moves back to the young one, so an entry in
//! use survives any number of turns. Every entry inserted or used within the last
//! `per_generation` insertions is still there, and the map never holds more than two
//! generations' worth. This is the usual cheap approximation of least-recently-used:
//! no clock read and no order kept per entry, and eviction is a whole map at once.
//!
//! Used by the directory descriptors kept open ([`crate::dir_cache`]) and the names
//! remembered for handles resolved by name ([`crate::links`]).
//!
//! Hashing is `foldhash`'s, seeded per map: a directory cache lookup happens on every
//! call that names a directory, and std's SipHash of a kernel handle cost 380
//! instructions of GETATTR's 13,600 (valgrind, docs/bench/percall/instructions.sh).
//! The keys are not the client's to choose (kernel handles we sealed and whose MAC
//! was checked; device and inode numbers), and the maps are bounded.

use std::collections::HashMap;
use std::hash::Hash;

use foldhash::fast::RandomState;

/// Two generations of entries, at most `per_generation` each (module documentation).
#[derive(Debug)]
pub struct Generations<K, V> {
    young: HashMap<K, V, RandomState>,
    old: HashMap<K, V, RandomState>,
    per_generation: usize,
}

impl<K: Hash + Eq + Clone, V> Generations<K, V> {
    /// An empty map of generations of at most `per_generation` entries (0: a map that
    /// keeps nothing).
    pub fn new(per_generation: usize) -> Self {
        Generations {
            young: HashMap::default(),
            old: HashMap::default(),
            per_generation,
        }
    }

    /// The entry for `key`, if still kept; a use keeps it young.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        if !self.young.contains_key(key) {
            let value = self.old.remove(key)?;
            self.insert(key.clone(), value);
        }
        self.young.get(key)
    }

    /// Keeps `value` for `key` (replacing what was kept for it), in the young
    /// generation; turns the generations over first if that one is full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.per_generation == 0 {
            return;
        }
        self.old.remove(&key);
        if self.young.len() >= self.per_generation && !self.young.contains_key(&key) {
            // The old generation's entries are dropped here.
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, value);
    }

    /// Drops the entry for `key` if `drop_it` says so of its value.
    pub fn remove_if(&mut self, key: &K, drop_it: impl Fn(&V) -> bool) {
        if self.young.get(key).is_some_and(&drop_it) {
            self.young.remove(key);
        }
        if self.old.get(key).is_some_and(&drop_it) {
            self.old.remove(key);
        }
    }

    /// Drops the entry for `key`.
    pub fn remove(&mut self, key: &K) {
        self.remove_if(key, |_| true);
    }

    /// Turns the generations over: drops the entries not used since the last turn,
    /// and makes the young generation the old one.
    pub fn age(&mut self) {
        self.old = std::mem::take(&mut self.young);
    }

    /// How many entries are kept (both generations).
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many entries go in, at most two generations are held, and every entry
    /// inserted within the last generation's worth is still there.
    #[test]
    fn bounded_and_keeps_the_recent_ones() {
        let mut g = Generations::new(100);
        for n in 0..10_000u32 {
            g.insert(n, n);
            assert!(g.len() <= 200, "{} held", g.len());
        }
        for n in 9_900..10_000 {
            assert_eq!(g.get(&n), Some(&n), "a recent entry was dropped");
        }
        assert!(g.get(&0).is_none(), "the oldest entry was kept");
    }

    /// An entry in use moves back to the young generation, so it outlives any number
    /// of generations of other entries.
    #[test]
    fn an_entry_in_use_stays() {
        let mut g = Generations::new(4);
        g.insert(0u32, ());
        for n in 1..1_000 {
            g.insert(n, ());
            assert!(g.get(&0).is_some(), "dropped after {n} inserts");
        }
    }

    #[test]
    fn remove_if_looks_at_the_value_in_either_generation() {
        let mut g = Generations::new(1);
        g.insert(1u32, "a");
        g.insert(2, "b"); // 1 is old now
        g.remove_if(&1, |v| *v == "other");
        assert!(g.get(&1).is_some());
        g.remove_if(&2, |v| *v == "b");
        g.remove_if(&1, |v| *v == "a");
        assert!(g.is_empty());
    }

    #[test]
    fn age_drops_what_was_not_used_for_two_turns() {
        let mut g = Generations::new(8);
        g.insert(1u32, ());
        g.insert(2, ());
        g.age();
        assert!(g.get(&1).is_some(), "used within a turn: kept");
        g.age();
        assert!(g.get(&2).is_none(), "unused for two turns: dropped");
        assert!(g.get(&1).is_some());
    }

    #[test]
    fn zero_keeps_nothing() {
        let mut g = Generations::new(0);
        g.insert(1u32, ());
        assert!(g.is_empty());
    }
}
