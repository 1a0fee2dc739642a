//! Access rights and STags.

use std::fmt;
use std::ops::BitOr;

/// Access rights of a memory region (verbs `IBV_ACCESS_*`).
///
/// Local read is always allowed. Remote write and remote read imply nothing else.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Access = Access(0);
    /// The local consumer may receive into the region (receive buffers, Read sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may RDMA Write into the region.
    pub const REMOTE_WRITE: Access = Access(2);
    /// The peer may RDMA Read from the region.
    pub const REMOTE_READ: Access = Access(4);

    /// True if every right in `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.contains(Access::LOCAL_WRITE) {
            parts.push("LOCAL_WRITE");
        }
        if self.contains(Access::REMOTE_WRITE) {
            parts.push("REMOTE_WRITE");
        }
        if self.contains(Access::REMOTE_READ) {
            parts.push("REMOTE_READ");
        }
        if parts.is_empty() {
            parts.push("NONE");
        }
        write!(f, "Access({})", parts.join("|"))
    }
}

/// A Steering Tag: the 32-bit name of a memory region on the wire (RFC 5040 §2.1).
///
/// Layout chosen by the software providers' STag table ([`crate::software`]): the high
/// [`STag::INDEX_BITS`] bits are the table index, the low [`STag::KEY_BITS`] bits a
/// random key that changes on every (re-)registration, so STags are unpredictable and a
/// stale STag from an earlier registration of the same slot does not match.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct STag(pub u32);

impl STag {
    /// Bits of the table index.
    pub const INDEX_BITS: u32 = 20;
    /// Bits of the random key.
    pub const KEY_BITS: u32 = 12;

    /// Builds an STag from index and key (both masked).
    pub fn new(index: u32, key: u32) -> STag {
        let key_mask = (1u32 << Self::KEY_BITS) - 1;
        let index_mask = (1u32 << Self::INDEX_BITS) - 1;
        STag(((index & index_mask) << Self::KEY_BITS) | (key & key_mask))
    }

    /// The registration table index.
    pub fn index(self) -> u32 {
        self.0 >> Self::KEY_BITS
    }

    /// The key bits.
    pub fn key(self) -> u32 {
        self.0 & ((1u32 << Self::KEY_BITS) - 1)
    }
}

impl fmt::Debug for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "STag({:#010x})", self.0)
    }
}

impl fmt::Display for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stag_splits_into_index_and_key() {
        let s = STag::new(0x12345, 0xabc);
        assert_eq!(s.index(), 0x12345);
        assert_eq!(s.key(), 0xabc);
        assert_eq!(s.0, 0x1234_5abc);
    }

    #[test]
    fn access_contains() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(a.contains(Access::REMOTE_READ));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert!(a.contains(Access::NONE));
    }
}
