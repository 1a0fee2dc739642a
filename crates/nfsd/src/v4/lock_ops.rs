//! Byte-range locks (RFC 8881 §18.10 LOCK, §18.11 LOCKT, §18.12 LOCKU; §9).
//!
//! The locks live in one lock table with NLM's ([`crate::nlm::locks::LockTable`]:
//! POSIX semantics, ranges split and merged per owner), keyed by the same file
//! handle bytes (NFSv4 handles of exports are NFSv3's), so an NFSv3 client's NLM
//! lock and an NFSv4.1 client's LOCK on the same file conflict as two local
//! processes' `fcntl` locks would. An NFSv4 lock owner is, in that table, the
//! owner `nfs4:<client id>` / the client's owner bytes ([`table_owner`]); an NLM
//! lock shown to an NFSv4 client (LOCK4denied) has client ID 0 and NLM's owner
//! handle. When NLM is off (`--no-nlm`), NFSv4.1 has a table of its own.
//!
//! The lock stateids are in [`super::state::lock_state`]. The rules applied here:
//! - a range of length 0 is NFS4ERR_INVAL, and so is one whose end passes
//!   2^64 - 1 unless its length is all ones ("to the end of the file", §18.10.3);
//! - a write lock needs an open with write access (NFS4ERR_OPENMODE, as knfsd);
//! - a conflict is NFS4ERR_DENIED with the lock in the way; the blocking types
//!   (READW_LT, WRITEW_LT) are not queued: the client polls (§9.6; CB_NOTIFY_LOCK
//!   waits for the back channel);
//! - while NFSv4.1's grace period runs ([`super::state::grace`]) or NLM's, a new
//!   lock (and LOCKT) is NFS4ERR_GRACE (a client may be about to reclaim it); a
//!   reclaim (`reclaim` TRUE) is granted while the client may reclaim, and is
//!   NFS4ERR_NO_GRACE otherwise;
//! - LOCKU of what is not locked is no error (POSIX); a lock stateid that still
//!   holds locks cannot be freed (FREE_STATEID: NFS4ERR_LOCKS_HELD); CLOSE releases
//!   the locks of the lock owners made from that open, and a client whose lease
//!   ran out loses its locks.

use std::sync::{Arc, Mutex, MutexGuard};

use nfs4::state::*;
use nfs4::{ClientId4, NfsStat4, OpaqueLimit, Res4, StateId4, Void};
use xdr::Bytes;

use super::compound::Compound;
use super::open_ops::state_file;
use super::state::LockState;
use crate::nlm::locks::{Held, LockError, LockTable, Owner, Range};
use crate::nlm::{Blocked, Nlm};

/// Where the locks are: NLM's table, or one of NFSv4.1's own when NLM is off.
#[derive(Debug)]
pub(crate) enum LockSpace {
    /// Shared with NLM.
    Nlm(Arc<Nlm>),
    /// NFSv4.1's alone.
    Own(Mutex<LockTable<Blocked>>),
}

impl LockSpace {
    /// The lock space of a server with `nlm` (or without).
    pub(crate) fn new(nlm: Option<Arc<Nlm>>) -> LockSpace {
        match nlm {
            Some(n) => LockSpace::Nlm(n),
            None => LockSpace::Own(Mutex::new(LockTable::new(Default::default()))),
        }
    }

    fn table(&self) -> MutexGuard<'_, LockTable<Blocked>> {
        match self {
            LockSpace::Nlm(n) => n.locks(),
            LockSpace::Own(t) => t.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    fn in_grace(&self) -> bool {
        matches!(self, LockSpace::Nlm(n) if n.in_grace())
    }

    /// Releases `owner`'s locks on `range` of `file`; NLM clients whose blocked
    /// requests this grants are called back.
    fn unlock(&self, file: &Bytes, owner: &Owner, range: Range) {
        let granted = self.table().unlock(file, owner, range);
        if let LockSpace::Nlm(n) = self {
            n.send_granted(granted);
        }
    }

    /// Releases every lock of the lock states `gone` (closed with their open, or
    /// dropped with their client).
    pub(crate) fn release(&self, gone: Vec<LockState>) {
        for s in gone {
            self.unlock(&s.file, &table_owner(s.client, &s.owner), Range::ALL);
        }
    }
}

/// The owner of an NFSv4 lock in the shared lock table.
pub(crate) fn table_owner(client: ClientId4, owner: &OpaqueLimit) -> Owner {
    Owner {
        host: Bytes::from(format!("nfs4:{client:016x}")),
        svid: 0,
        oh: Bytes::copy_from_slice(&owner.0),
    }
}

/// `offset` and `length` as a range (module docs).
fn range(offset: u64, length: u64) -> Result<Range, NfsStat4> {
    if length == 0 {
        return Err(NfsStat4::NFS4ERR_INVAL);
    }
    if length == u64::MAX {
        return Ok(Range {
            start: offset,
            end: u64::MAX,
        });
    }
    let end = offset
        .checked_add(length - 1)
        .ok_or(NfsStat4::NFS4ERR_INVAL)?;
    Ok(Range { start: offset, end })
}

fn exclusive(t: NfsLockType4) -> Result<bool, NfsStat4> {
    match t {
        NfsLockType4::READ_LT | NfsLockType4::READW_LT => Ok(false),
        NfsLockType4::WRITE_LT | NfsLockType4::WRITEW_LT => Ok(true),
        _ => Err(NfsStat4::NFS4ERR_INVAL),
    }
}

/// LOCK4denied for the lock `h` in the way.
fn denied(h: &Held) -> Lock4Denied {
    let nfs4_client = h
        .owner
        .host
        .strip_prefix(b"nfs4:")
        .and_then(|x| std::str::from_utf8(x).ok())
        .and_then(|x| u64::from_str_radix(x, 16).ok());
    let length = match h.range.end {
        u64::MAX => u64::MAX,
        end => end - h.range.start + 1,
    };
    Lock4Denied {
        offset: h.range.start,
        length,
        locktype: if h.exclusive {
            NfsLockType4::WRITE_LT
        } else {
            NfsLockType4::READ_LT
        },
        owner: StateOwner4 {
            clientid: nfs4_client.unwrap_or(0),
            owner: OpaqueLimit::from(&h.owner.oh[..]),
        },
    }
}

fn lock_error(e: LockError) -> LockRes<StateId4> {
    match e {
        LockError::Conflict(h) => LockRes::Denied(denied(&h)),
        // Past the table's limits: try later.
        LockError::NoLocks => LockRes::Err(NfsStat4::NFS4ERR_DELAY),
    }
}

/// §18.10 LOCK (module docs).
pub(crate) fn lock(cx: &mut Compound<'_>, a: &Lock4Args) -> Lock4Res {
    // The file, the lock's owner in the table, its range, whether exclusive, the lock
    // stateid's `other` and its open's.
    type Prepared = (Bytes, Owner, Range, bool, [u8; 12], [u8; 12]);
    let prepared = || -> Result<Prepared, NfsStat4> {
        let client = cx.client()?;
        let (_, file) = state_file(cx)?;
        let excl = exclusive(a.locktype)?;
        let r = range(a.offset, a.length)?;
        if a.reclaim {
            if !cx.server.state().may_reclaim(client, cx.now) {
                return Err(NfsStat4::NFS4ERR_NO_GRACE);
            }
        } else if cx.server.locks.in_grace() {
            return Err(NfsStat4::NFS4ERR_GRACE);
        } else {
            cx.may_lock_anew()?;
        }
        let mut state = cx.server.state();
        let (open, lock_owner, lock_id) = match &a.locker {
            Locker4::New(o) => {
                let open_id = cx.stateid(&o.open_stateid)?;
                state.opens().find(client, &open_id, &file)?;
                let id = state.locks_mut().for_owner(
                    client,
                    &o.lock_owner.owner,
                    &file,
                    open_id.other,
                )?;
                (open_id.other, o.lock_owner.owner.clone(), id)
            }
            Locker4::Existing(e) => {
                let id = cx.stateid(&e.lock_stateid)?;
                let s = state.locks().find(client, &id, &file)?;
                (s.open, s.owner.clone(), id)
            }
        };
        let write_open = state
            .opens()
            .get(&StateId4 {
                seqid: 0,
                other: open,
            })
            .is_some_and(|o| o.access & OPEN4_SHARE_ACCESS_WRITE != 0);
        if excl && !write_open {
            return Err(NfsStat4::NFS4ERR_OPENMODE);
        }
        Ok((
            file,
            table_owner(client, &lock_owner),
            r,
            excl,
            lock_id.other,
            open,
        ))
    };
    let (file, owner, r, excl, other, open) = match prepared() {
        Ok(p) => p,
        Err(s) => return LockRes::Err(s),
    };
    if let Err(e) = cx.server.locks.table().lock(&file, &owner, r, excl) {
        return lock_error(e);
    }
    let mut state = cx.server.state();
    let mut bumped = state.locks_mut().bump(&other);
    if bumped.is_none() {
        // The lock state went while the lock was taken: its client's lease ran out,
        // or (a first LOCK of the owner) the FREE_STATEID of the owner's former
        // incarnation freed the stateid this LOCK had found (module
        // free_lock_stateid). A first LOCK makes it anew, with the lock now held.
        if let (Locker4::New(o), Ok(client)) = (&a.locker, cx.client()) {
            let open_id = StateId4 {
                seqid: 0,
                other: open,
            };
            let made = state
                .opens()
                .find(client, &open_id, &file)
                .is_ok()
                .then(|| {
                    state
                        .locks_mut()
                        .for_owner(client, &o.lock_owner.owner, &file, open)
                })
                .and_then(Result::ok);
            bumped = made.and_then(|id| state.locks_mut().bump(&id.other));
        }
    }
    drop(state);
    match bumped {
        Some(id) => {
            cx.current_stateid = Some(id);
            LockRes::Ok(id)
        }
        None => {
            cx.server.locks.unlock(&file, &owner, r);
            LockRes::Err(NfsStat4::NFS4ERR_BAD_STATEID)
        }
    }
}

/// §18.11 LOCKT: the lock in the way of `owner`, if any (its own locks never are).
pub(crate) fn lockt(cx: &mut Compound<'_>, a: &LockT4Args) -> LockT4Res {
    let run = || -> Result<Option<Held>, NfsStat4> {
        let client = cx.client()?;
        let (_, file) = state_file(cx).map_err(|_| NfsStat4::NFS4ERR_ISDIR)?;
        let excl = exclusive(a.locktype)?;
        let r = range(a.offset, a.length)?;
        if cx.server.locks.in_grace() {
            return Err(NfsStat4::NFS4ERR_GRACE);
        }
        cx.not_in_grace()?;
        let owner = table_owner(client, &a.owner.owner);
        Ok(cx.server.locks.table().test(&file, &owner, r, excl))
    };
    match run() {
        Ok(None) => LockRes::Ok(Void),
        Ok(Some(h)) => LockRes::Denied(denied(&h)),
        Err(s) => LockRes::Err(s),
    }
}

/// §18.12 LOCKU: releases the range; the stateid's next seqid.
pub(crate) fn locku(cx: &mut Compound<'_>, a: &LockU4Args) -> LockU4Res {
    let run = |cx: &mut Compound<'_>| -> Result<StateId4, NfsStat4> {
        let client = cx.client()?;
        let (_, file) = state_file(cx)?;
        exclusive(a.locktype)?;
        let r = range(a.offset, a.length)?;
        let id = cx.stateid(&a.lock_stateid)?;
        let owner = {
            let state = cx.server.state();
            let s = state.locks().find(client, &id, &file)?;
            table_owner(client, &s.owner)
        };
        cx.server.locks.unlock(&file, &owner, r);
        let new = cx
            .server
            .state()
            .locks_mut()
            .bump(&id.other)
            .ok_or(NfsStat4::NFS4ERR_BAD_STATEID)?;
        cx.current_stateid = Some(new);
        Ok(new)
    };
    run(cx).map_or_else(Res4::Err, Res4::Ok)
}

/// §18.38 FREE_STATEID of a lock stateid: NFS4ERR_LOCKS_HELD while its owner holds
/// locks on the file, else it goes. Its `seqid` is checked as every stateid's is
/// (§8.2.2, NFS4ERR_OLD_STATEID; knfsd does too): the Linux client frees a lock
/// state in the background when its process is done with it, and reuses the lock
/// owner's name at once for the next process; that one's LOCK
/// (`open_to_lock_owner4`) gets the same stateid, one seqid on, so the late
/// FREE_STATEID of the first must not free the second's.
pub(crate) fn free_lock_stateid(cx: &Compound<'_>, client: ClientId4, id: &StateId4) -> NfsStat4 {
    let Some(s) = cx.server.state().locks().get(id).cloned() else {
        return NfsStat4::NFS4ERR_BAD_STATEID;
    };
    if s.client != client {
        return NfsStat4::NFS4ERR_BAD_STATEID;
    }
    if let Err(e) = super::state::opens::check_seqid(s.seqid, id.seqid) {
        return e;
    }
    let owner = table_owner(client, &s.owner);
    let holds = cx
        .server
        .locks
        .table()
        .held(&s.file)
        .iter()
        .any(|h| h.owner == owner);
    if holds {
        return NfsStat4::NFS4ERR_LOCKS_HELD;
    }
    // A LOCK of the stateid may have run since it was looked at (the state and the
    // lock table are not held together): then it holds a lock, and stays.
    if cx
        .server
        .state()
        .locks_mut()
        .remove_unchanged(&id.other, s.seqid)
    {
        NfsStat4::NFS4_OK
    } else {
        NfsStat4::NFS4ERR_LOCKS_HELD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8881_18_10_3_ranges_zero_length_and_overflow_are_invalid() {
        assert_eq!(range(0, 0), Err(NfsStat4::NFS4ERR_INVAL));
        assert_eq!(range(10, 5), Ok(Range { start: 10, end: 14 }));
        assert_eq!(
            range(10, u64::MAX),
            Ok(Range {
                start: 10,
                end: u64::MAX
            })
        );
        assert_eq!(
            range(u64::MAX, 1),
            Ok(Range {
                start: u64::MAX,
                end: u64::MAX
            })
        );
        assert_eq!(range(u64::MAX, 2), Err(NfsStat4::NFS4ERR_INVAL));
        assert_eq!(
            range(1, u64::MAX - 1),
            Ok(Range {
                start: 1,
                end: u64::MAX - 1
            })
        );
    }

    #[test]
    fn a_denied_lock_names_its_nfs4_owner_or_nlms() {
        let owner = OpaqueLimit::from(&b"lo"[..]);
        let h = Held {
            owner: table_owner(0x1234_5678_9abc_def0, &owner),
            range: Range {
                start: 5,
                end: u64::MAX,
            },
            exclusive: false,
        };
        let d = denied(&h);
        assert_eq!(
            (d.offset, d.length, d.locktype),
            (5, u64::MAX, NfsLockType4::READ_LT)
        );
        assert_eq!(
            (d.owner.clientid, &d.owner.owner.0[..]),
            (0x1234_5678_9abc_def0, &b"lo"[..])
        );
        let nlm = Held {
            owner: Owner {
                host: Bytes::from_static(b"v3-host"),
                svid: 7,
                oh: Bytes::from_static(b"7@v3-host"),
            },
            range: Range { start: 0, end: 9 },
            exclusive: true,
        };
        let d = denied(&nlm);
        assert_eq!(
            (d.offset, d.length, d.locktype),
            (0, 10, NfsLockType4::WRITE_LT)
        );
        assert_eq!(
            (d.owner.clientid, &d.owner.owner.0[..]),
            (0, &b"7@v3-host"[..])
        );
    }
}
