//! A session's fore-channel slot table and its reply cache (RFC 8881 §2.10.6.1,
//! §18.46.4): the exactly-once rules of SEQUENCE, per slot.
//!
//! Each slot remembers the sequence id of the last request it took and, if that
//! request asked for it (`sa_cachethis`) and it completed, its reply as sent, bytes
//! and all. A request on a slot is then one of:
//!
//! | `sa_sequenceid` against the slot's | answer |
//! |---|---|
//! | the same, reply cached | the cached reply, byte for byte (§2.10.6.1.3) |
//! | the same, reply not cached | NFS4ERR_RETRY_UNCACHED_REP (§2.10.6.1.3) |
//! | the same, still in progress | NFS4ERR_DELAY (§2.10.6.2) |
//! | one more (mod 2^32) | a new request (§2.10.6.1) |
//! | anything else | NFS4ERR_SEQ_MISORDERED (§2.10.6.1) |
//!
//! and a slot id past the table is NFS4ERR_BADSLOT (§18.46.3). A slot starts at
//! sequence id 0, so its first request carries 1 (§2.10.6.1: "the first time a slot
//! is used, the requester MUST specify a sequence ID of one").

use nfs4::{NfsStat4, SequenceId4, SlotId4};
use xdr::Bytes;

/// One slot.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// Sequence id of the last request taken on this slot.
    seqid: SequenceId4,
    /// A request was ever taken on it (before, there is nothing to retry: a
    /// request with the slot's initial sequence id 0 is misordered).
    used: bool,
    /// That request has not completed yet.
    in_progress: bool,
    /// Its reply, if it asked to be cached and completed.
    cached: Option<Bytes>,
}

/// What SEQUENCE makes of a request on a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotUse {
    /// A new request: run the COMPOUND, then [`SlotTable::complete`] the slot.
    New,
    /// A retransmission whose reply is cached: send these bytes again, run nothing.
    Replay(Bytes),
}

/// The fore channel's slots of one session.
#[derive(Debug, Clone)]
pub struct SlotTable {
    slots: Vec<Slot>,
    /// Largest reply a slot keeps (`ca_maxresponsesize_cached` as granted).
    max_cached: usize,
}

impl SlotTable {
    /// `count` slots (`ca_maxrequests` as granted, at least 1), each keeping replies
    /// of up to `max_cached` bytes.
    pub fn new(count: u32, max_cached: usize) -> SlotTable {
        SlotTable {
            slots: vec![Slot::default(); count.max(1) as usize],
            max_cached,
        }
    }

    /// The highest slot id (`sr_highest_slotid`, §18.46.3).
    pub fn highest_slotid(&self) -> SlotId4 {
        self.slots.len() as SlotId4 - 1
    }

    /// Largest reply a slot caches (`ca_maxresponsesize_cached` as granted).
    pub fn max_cached(&self) -> usize {
        self.max_cached
    }

    /// Applies the rules of the module docs to a request on `slotid` with `seqid`.
    pub fn begin(&mut self, slotid: SlotId4, seqid: SequenceId4) -> Result<SlotUse, NfsStat4> {
        // §18.46.3: "If the slot ID is greater than the highest slot ID the server
        // supports, the server returns NFS4ERR_BADSLOT" (paraphrased).
        let slot = self
            .slots
            .get_mut(slotid as usize)
            .ok_or(NfsStat4::NFS4ERR_BADSLOT)?;
        if seqid == slot.seqid && slot.used {
            if slot.in_progress {
                // §2.10.6.2: a retry of a request still executing.
                return Err(NfsStat4::NFS4ERR_DELAY);
            }
            return match &slot.cached {
                Some(reply) => Ok(SlotUse::Replay(reply.clone())),
                None => Err(NfsStat4::NFS4ERR_RETRY_UNCACHED_REP),
            };
        }
        if seqid == slot.seqid.wrapping_add(1) {
            slot.seqid = seqid;
            slot.used = true;
            slot.in_progress = true;
            slot.cached = None;
            return Ok(SlotUse::New);
        }
        Err(NfsStat4::NFS4ERR_SEQ_MISORDERED)
    }

    /// Ends the request in progress on `slotid`, keeping `reply` for retransmissions
    /// if given (the client asked `sa_cachethis`; the caller has checked its size
    /// against [`SlotTable::max_cached`]). A slot not in progress is left as it is.
    pub fn complete(&mut self, slotid: SlotId4, reply: Option<Bytes>) {
        if let Some(slot) = self.slots.get_mut(slotid as usize) {
            if slot.in_progress {
                slot.in_progress = false;
                slot.cached = reply.filter(|r| r.len() <= self.max_cached);
            }
        }
    }

    /// Whether any slot has a request in progress (DESTROY_SESSION and lease expiry
    /// leave such a session alone).
    pub fn busy(&self) -> bool {
        self.slots.iter().any(|s| s.in_progress)
    }

    /// Bytes of replies cached.
    pub fn cached_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.cached.as_ref())
            .map(Bytes::len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8881_2_10_6_1_first_request_on_a_slot_carries_seqid_one() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(t.begin(0, 0), Err(NfsStat4::NFS4ERR_SEQ_MISORDERED));
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
    }

    #[test]
    fn rfc8881_18_46_3_slot_past_the_table_is_badslot() {
        let mut t = SlotTable::new(4, 1024);
        assert_eq!(t.highest_slotid(), 3);
        assert_eq!(t.begin(4, 1), Err(NfsStat4::NFS4ERR_BADSLOT));
        assert_eq!(t.begin(u32::MAX, 1), Err(NfsStat4::NFS4ERR_BADSLOT));
        assert_eq!(t.begin(3, 1), Ok(SlotUse::New));
    }

    #[test]
    fn rfc8881_2_10_6_1_3_retry_of_a_cached_request_gets_the_same_bytes() {
        let mut t = SlotTable::new(1, 1024);
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
        t.complete(0, Some(Bytes::from_static(b"reply one")));
        assert_eq!(
            t.begin(0, 1),
            Ok(SlotUse::Replay(Bytes::from_static(b"reply one")))
        );
        // Still cached after the replay.
        assert_eq!(
            t.begin(0, 1),
            Ok(SlotUse::Replay(Bytes::from_static(b"reply one")))
        );
    }

    #[test]
    fn rfc8881_2_10_6_1_3_retry_of_an_uncached_request_is_retry_uncached_rep() {
        let mut t = SlotTable::new(1, 1024);
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
        t.complete(0, None);
        assert_eq!(t.begin(0, 1), Err(NfsStat4::NFS4ERR_RETRY_UNCACHED_REP));
    }

    #[test]
    fn rfc8881_2_10_6_2_retry_while_in_progress_is_delay() {
        let mut t = SlotTable::new(1, 1024);
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
        assert!(t.busy());
        assert_eq!(t.begin(0, 1), Err(NfsStat4::NFS4ERR_DELAY));
        t.complete(0, None);
        assert!(!t.busy());
    }

    #[test]
    fn rfc8881_2_10_6_1_next_seqid_is_new_others_misordered() {
        let mut t = SlotTable::new(2, 1024);
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
        t.complete(0, Some(Bytes::from_static(b"one")));
        assert_eq!(t.begin(0, 3), Err(NfsStat4::NFS4ERR_SEQ_MISORDERED));
        assert_eq!(t.begin(0, 0), Err(NfsStat4::NFS4ERR_SEQ_MISORDERED));
        assert_eq!(t.begin(0, 2), Ok(SlotUse::New));
        t.complete(0, None);
        // The new request replaced the cached reply of the previous one.
        assert_eq!(t.begin(0, 2), Err(NfsStat4::NFS4ERR_RETRY_UNCACHED_REP));
        assert_eq!(t.begin(0, 1), Err(NfsStat4::NFS4ERR_SEQ_MISORDERED));
        // Slots are independent.
        assert_eq!(t.begin(1, 1), Ok(SlotUse::New));
    }

    #[test]
    fn rfc8881_2_10_6_1_sequence_ids_wrap() {
        let mut t = SlotTable::new(1, 1024);
        t.slots[0].seqid = u32::MAX;
        t.slots[0].used = true;
        assert_eq!(t.begin(0, 0), Ok(SlotUse::New));
    }

    #[test]
    fn replies_larger_than_the_cache_limit_are_not_kept() {
        let mut t = SlotTable::new(1, 4);
        assert_eq!(t.begin(0, 1), Ok(SlotUse::New));
        t.complete(0, Some(Bytes::from_static(b"too long")));
        assert_eq!(t.begin(0, 1), Err(NfsStat4::NFS4ERR_RETRY_UNCACHED_REP));
        assert_eq!(t.cached_bytes(), 0);
    }
}
