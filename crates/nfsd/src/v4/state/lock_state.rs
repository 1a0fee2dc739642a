//! Lock stateids (RFC 8881 §8.2, §9.1.4, §18.10-18.12): one per lock owner and
//! file, made by the first LOCK of that owner from an open (`open_to_lock_owner4`)
//! and tied to that open; its `seqid` moves with every LOCK and LOCKU that
//! succeeds. The locks themselves (byte ranges, conflicts) are not here: they live
//! in the one lock table NLM uses too ([`crate::nlm::locks`]), so that NFSv3 and
//! NFSv4 clients see each other's locks. Sans-IO, as the rest of [`super`].
//!
//! The stateid's `other`: the server instance (4 bytes) and a counter (8 bytes)
//! whose top bit is set, so it never equals an open stateid's
//! ([`super::opens`]).
//!
//! Found by `other` (every stateid-bearing operation), by owner and file (each
//! LOCK with `open_to_lock_owner4`) and by open (each CLOSE): each a hash lookup,
//! whatever the number of lock states. Only a client's expiry walks them all.

use std::collections::{HashMap, HashSet};

use nfs4::{ClientId4, NfsStat4, OpaqueLimit, StateId4};

use super::opens::FileKey;
use super::ServerKeyed;

/// Most lock stateids, all clients together (NFS4ERR_DELAY past it). Each holds
/// at most about 1.2 KiB (the owner at most 1 KiB).
pub const MAX_LOCK_STATEIDS: usize = 1 << 16;

/// One lock owner's state on one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// The client.
    pub client: ClientId4,
    /// The lock owner, as the client names it.
    pub owner: OpaqueLimit,
    /// The file.
    pub file: FileKey,
    /// The stateid's current `seqid` (0 until its first LOCK succeeded).
    pub seqid: u32,
    /// The open it was made from (its stateid's `other`).
    pub open: [u8; 12],
}

/// The lock stateids of a server instance.
#[derive(Debug)]
pub struct LockStates {
    boot: u32,
    next: u64,
    states: ServerKeyed<[u8; 12], LockState>,
    /// Each state's `other` by its client, owner and file.
    by_owner: HashMap<(ClientId4, OpaqueLimit, FileKey), [u8; 12]>,
    /// The states made from each open, by the open's `other`.
    by_open: ServerKeyed<[u8; 12], HashSet<[u8; 12]>>,
    /// What each holds of the memory budget ([`super::budget`]).
    charges: ServerKeyed<[u8; 12], rpcrdma::memory::Charge>,
    budget: super::budget::StateBudget,
}

impl LockStates {
    /// Empty, for the server instance `boot`.
    pub fn new(boot: u32) -> LockStates {
        LockStates {
            boot,
            next: 1 << 63,
            states: ServerKeyed::default(),
            by_owner: HashMap::new(),
            by_open: ServerKeyed::default(),
            charges: ServerKeyed::default(),
            budget: Default::default(),
        }
    }

    /// Charges new lock stateids to `budget` (past it: NFS4ERR_DELAY).
    pub fn set_budget(&mut self, budget: super::budget::StateBudget) {
        self.budget = budget;
    }

    /// Number of lock stateids.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The lock state `id` names, if any.
    pub fn get(&self, id: &StateId4) -> Option<&LockState> {
        self.states.get(&id.other)
    }

    /// The lock stateid of `owner` of `client` on `file`, made from the open
    /// `open` if the owner has none there yet (§18.10.3: the first LOCK of a lock
    /// owner, `open_to_lock_owner4`).
    pub fn for_owner(
        &mut self,
        client: ClientId4,
        owner: &OpaqueLimit,
        file: &FileKey,
        open: [u8; 12],
    ) -> Result<StateId4, NfsStat4> {
        let key = (client, owner.clone(), file.clone());
        if let Some(other) = self.by_owner.get(&key) {
            return Ok(StateId4 {
                seqid: self.states[other].seqid,
                other: *other,
            });
        }
        if self.states.len() >= MAX_LOCK_STATEIDS {
            return Err(NfsStat4::NFS4ERR_DELAY);
        }
        let charge = self
            .budget
            .charge(super::budget::stateid_cost(owner.0.len(), file.len()))?;
        let other = super::opens::new_other(self.boot, &mut self.next);
        self.states.insert(
            other,
            LockState {
                client,
                owner: owner.clone(),
                file: file.clone(),
                // The LOCK that made it moves it to 1 when it succeeds (§8.2.2:
                // the first stateid a client sees has seqid 1).
                seqid: 0,
                open,
            },
        );
        self.by_owner.insert(key, other);
        self.by_open.entry(open).or_default().insert(other);
        if let Some(c) = charge {
            self.charges.insert(other, c);
        }
        Ok(StateId4 { seqid: 0, other })
    }

    /// The lock state `id` of `client` on `file`, its seqid checked (§8.2.2).
    pub fn find(
        &self,
        client: ClientId4,
        id: &StateId4,
        file: &FileKey,
    ) -> Result<&LockState, NfsStat4> {
        let s = self
            .states
            .get(&id.other)
            .filter(|s| s.client == client && s.file == file)
            .ok_or(NfsStat4::NFS4ERR_BAD_STATEID)?;
        super::opens::check_seqid(s.seqid, id.seqid)?;
        Ok(s)
    }

    /// The next seqid of `other` after a LOCK or LOCKU changed its locks: the
    /// stateid to answer with.
    pub fn bump(&mut self, other: &[u8; 12]) -> Option<StateId4> {
        let s = self.states.get_mut(other)?;
        s.seqid = super::opens::next_seqid(s.seqid);
        Some(StateId4 {
            seqid: s.seqid,
            other: *other,
        })
    }

    /// §18.48 TEST_STATEID of one stateid, if it is a lock stateid of `client`.
    pub fn test(&self, client: ClientId4, id: &StateId4) -> Option<NfsStat4> {
        let s = self.states.get(&id.other).filter(|s| s.client == client)?;
        Some(match super::opens::check_seqid(s.seqid, id.seqid) {
            Ok(()) => NfsStat4::NFS4_OK,
            Err(e) => e,
        })
    }

    /// Removes the lock state `other` (FREE_STATEID of a stateid without locks).
    pub fn remove(&mut self, other: &[u8; 12]) -> Option<LockState> {
        self.charges.remove(other);
        let s = self.states.remove(other)?;
        self.by_owner
            .remove(&(s.client, s.owner.clone(), s.file.clone()));
        if let Some(made) = self.by_open.get_mut(&s.open) {
            made.remove(other);
            if made.is_empty() {
                self.by_open.remove(&s.open);
            }
        }
        Some(s)
    }

    /// Removes `other` if its seqid is still `seqid` (nothing locked or unlocked with
    /// it since it was looked at): whether it was removed.
    pub fn remove_unchanged(&mut self, other: &[u8; 12], seqid: u32) -> bool {
        if self.states.get(other).is_some_and(|s| s.seqid == seqid) {
            self.remove(other);
            true
        } else {
            false
        }
    }

    /// Removes the lock states made from the open `open` (it is being closed); the
    /// caller releases their locks.
    pub fn remove_of_open(&mut self, open: &[u8; 12]) -> Vec<LockState> {
        let made = self.by_open.remove(open).unwrap_or_default();
        made.iter().filter_map(|k| self.remove(k)).collect()
    }

    /// Removes every lock state of `client`; the caller releases their locks.
    pub fn remove_client(&mut self, client: ClientId4) -> Vec<LockState> {
        let keys: Vec<[u8; 12]> = self
            .states
            .iter()
            .filter(|(_, s)| s.client == client)
            .map(|(k, _)| *k)
            .collect();
        keys.iter().filter_map(|k| self.remove(k)).collect()
    }
}
