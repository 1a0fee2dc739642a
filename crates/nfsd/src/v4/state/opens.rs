//! Open state (RFC 8881 §9: share reservations; §8.2: stateids): which open owner of
//! which client has which file open, with which access and deny modes, under which
//! stateid. Sans-IO like the rest of [`super`]: the caller opens files; this module
//! only decides whether an open may exist and names it.
//!
//! - One open stateid per open owner and file (§9.1.1): a second OPEN by the same
//!   owner adds its modes to the first and bumps the stateid's `seqid` (§8.2.2).
//! - Share reservations (§9.7, §18.16.4): an OPEN whose access meets another open's
//!   deny, or whose deny meets another open's access, is NFS4ERR_SHARE_DENIED; opens
//!   of the same owner do not conflict with each other.
//! - A stateid names its file: used with another current filehandle it is
//!   NFS4ERR_BAD_STATEID (knfsd's `nfs4_check_fh`), as is one of another client.
//! - Seqid rules of §8.2.2: 0 means "the current one"; older is NFS4ERR_OLD_STATEID,
//!   newer NFS4ERR_BAD_STATEID.
//! - I/O with an open stateid (§18.22.3, §18.32.3): WRITE needs write access
//!   (NFS4ERR_OPENMODE); READ is allowed with any open, as knfsd allows it
//!   (`access_permit_read`: a write-only open may read, for a client filling its page
//!   cache). The special stateids (§8.2.3) are checked against the deny modes of every
//!   open of the file (NFS4ERR_LOCKED, §9.7); READ bypass skips that for READ.
//!
//! Stateid `other` (12 bytes): the server instance (4) and a counter (8), never
//! reused within an instance, so a freed stateid is unknown rather than another's.
//! Each open holds a charge of the memory budget ([`super::budget`]): past it, a new
//! open is NFS4ERR_DELAY.

use nfs4::state::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_BOTH};
use nfs4::{ClientId4, NfsStat4, OpaqueLimit, StateId4};
use xdr::Bytes;

use super::ServerKeyed;

/// Most open stateids, all clients together; past it OPEN is NFS4ERR_DELAY (as knfsd
/// answers when it cannot allocate a stateid). An entry costs at most about 1.2 KiB
/// (the owner is at most 1 KiB), so the table stays under 80 MiB.
pub const MAX_OPENS: usize = 1 << 16;

/// The file an open is of: its handle's bytes (handles are the same for an object
/// for as long as it exists, `crate::fh`).
pub type FileKey = Bytes;

/// One open (§9.1.1: per open owner and file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The client.
    pub client: ClientId4,
    /// The open owner, as the client names it.
    pub owner: OpaqueLimit,
    /// The file.
    pub file: FileKey,
    /// The stateid's current `seqid`.
    pub seqid: u32,
    /// `OPEN4_SHARE_ACCESS_*` (1..=3).
    pub access: u32,
    /// `OPEN4_SHARE_DENY_*` (0..=3).
    pub deny: u32,
}

/// What I/O a stateid is presented for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// READ.
    Read,
    /// WRITE, or SETATTR of the size.
    Write,
}

/// The open state of a server instance.
#[derive(Debug)]
pub struct Opens {
    boot: u32,
    next: u64,
    opens: ServerKeyed<[u8; 12], Open>,
    /// The opens of each file, for the share checks.
    by_file: ServerKeyed<FileKey, Vec<[u8; 12]>>,
    /// What each open holds of the memory budget.
    charges: ServerKeyed<[u8; 12], rpcrdma::memory::Charge>,
    budget: super::budget::StateBudget,
}

impl Opens {
    /// Empty, for the server instance `boot`.
    pub fn new(boot: u32) -> Opens {
        Opens {
            boot,
            next: 1,
            opens: ServerKeyed::default(),
            by_file: ServerKeyed::default(),
            charges: ServerKeyed::default(),
            budget: Default::default(),
        }
    }

    /// Charges new opens to `budget` ([`super::budget`]).
    pub fn set_budget(&mut self, budget: super::budget::StateBudget) {
        self.budget = budget;
    }

    /// The opens of `file`.
    fn of_file<'a>(&'a self, file: &FileKey) -> impl Iterator<Item = (&'a [u8; 12], &'a Open)> {
        self.by_file
            .get(file)
            .into_iter()
            .flatten()
            .filter_map(|k| self.opens.get_key_value(k))
    }

    fn remove(&mut self, other: &[u8; 12]) {
        self.charges.remove(other);
        if let Some(o) = self.opens.remove(other) {
            if let Some(v) = self.by_file.get_mut(&o.file) {
                v.retain(|k| k != other);
                if v.is_empty() {
                    self.by_file.remove(&o.file);
                }
            }
        }
    }

    /// Number of opens.
    pub fn len(&self) -> usize {
        self.opens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.opens.is_empty()
    }

    /// Whether `client` has opens (a client with state, §18.35.4 case 3).
    pub fn held_by(&self, client: ClientId4) -> bool {
        self.opens.values().any(|o| o.client == client)
    }

    /// The open `id` names, if any.
    pub fn get(&self, id: &StateId4) -> Option<&Open> {
        self.opens.get(&id.other)
    }

    fn stateid(other: [u8; 12], o: &Open) -> StateId4 {
        StateId4 {
            seqid: o.seqid,
            other,
        }
    }

    /// §18.16 OPEN by `owner` of `client` of `file` with `access` and `deny` (both
    /// already checked to be in range): the open stateid, new (seqid 1) or the
    /// owner's existing one upgraded (seqid + 1). NFS4ERR_SHARE_DENIED on a conflict
    /// with another owner's open, NFS4ERR_DELAY past [`MAX_OPENS`].
    pub fn open(
        &mut self,
        client: ClientId4,
        owner: &OpaqueLimit,
        file: &FileKey,
        access: u32,
        deny: u32,
    ) -> Result<StateId4, NfsStat4> {
        let mine = |o: &Open| o.client == client && &o.owner == owner;
        let conflict = self
            .of_file(file)
            .filter(|(_, o)| !mine(o))
            .any(|(_, o)| access & o.deny != 0 || deny & o.access != 0);
        if conflict {
            return Err(NfsStat4::NFS4ERR_SHARE_DENIED);
        }
        let existing = self.of_file(file).find(|(_, o)| mine(o)).map(|(k, _)| *k);
        if let Some(o) = existing.and_then(|k| self.opens.get_mut(&k)) {
            let other = existing.expect("found");
            o.access |= access;
            o.deny |= deny;
            o.seqid = next_seqid(o.seqid);
            return Ok(Self::stateid(other, o));
        }
        if self.opens.len() >= MAX_OPENS {
            return Err(NfsStat4::NFS4ERR_DELAY);
        }
        let charge = self
            .budget
            .charge(super::budget::stateid_cost(owner.0.len(), file.len()))?;
        let other = new_other(self.boot, &mut self.next);
        let o = Open {
            client,
            owner: owner.clone(),
            file: file.clone(),
            seqid: 1,
            access,
            deny,
        };
        let id = Self::stateid(other, &o);
        self.opens.insert(other, o);
        self.by_file.entry(file.clone()).or_default().push(other);
        if let Some(c) = charge {
            self.charges.insert(other, c);
        }
        Ok(id)
    }

    /// The open `id` of `client` on `file`, its seqid checked (§8.2.2).
    pub fn find(
        &self,
        client: ClientId4,
        id: &StateId4,
        file: &FileKey,
    ) -> Result<&Open, NfsStat4> {
        let o = self
            .opens
            .get(&id.other)
            .filter(|o| o.client == client)
            .ok_or(NfsStat4::NFS4ERR_BAD_STATEID)?;
        if o.file != file {
            return Err(NfsStat4::NFS4ERR_BAD_STATEID);
        }
        check_seqid(o.seqid, id.seqid)?;
        Ok(o)
    }

    /// §18.2 CLOSE: ends the open `id`.
    pub fn close(
        &mut self,
        client: ClientId4,
        id: &StateId4,
        file: &FileKey,
    ) -> Result<(), NfsStat4> {
        self.find(client, id, file)?;
        self.remove(&id.other);
        Ok(())
    }

    /// §18.18 OPEN_DOWNGRADE of the open `id` to `access` and `deny`, which must be
    /// within what it has (NFS4ERR_INVAL otherwise, §18.18.3): the new stateid.
    pub fn downgrade(
        &mut self,
        client: ClientId4,
        id: &StateId4,
        file: &FileKey,
        access: u32,
        deny: u32,
    ) -> Result<StateId4, NfsStat4> {
        let o = self.find(client, id, file)?;
        if access & !o.access != 0 || deny & !o.deny != 0 {
            return Err(NfsStat4::NFS4ERR_INVAL);
        }
        let o = self
            .opens
            .get_mut(&id.other)
            .ok_or(NfsStat4::NFS4ERR_BAD_STATEID)?;
        o.access = access;
        o.deny = deny;
        o.seqid = next_seqid(o.seqid);
        Ok(Self::stateid(id.other, o))
    }

    /// Whether `id`, presented by `client` for `io` on `file`, allows it (module
    /// docs).
    pub fn check_io(
        &self,
        client: ClientId4,
        id: &StateId4,
        file: &FileKey,
        io: Io,
    ) -> Result<(), NfsStat4> {
        let special = *id == StateId4::ANONYMOUS || *id == StateId4::READ_BYPASS;
        if special {
            if io == Io::Read && *id == StateId4::READ_BYPASS {
                return Ok(());
            }
            let bit = match io {
                Io::Read => nfs4::state::OPEN4_SHARE_DENY_READ,
                Io::Write => nfs4::state::OPEN4_SHARE_DENY_WRITE,
            };
            let denied = self.of_file(file).any(|(_, o)| o.deny & bit != 0);
            return if denied {
                Err(NfsStat4::NFS4ERR_LOCKED)
            } else {
                Ok(())
            };
        }
        let o = self.find(client, id, file)?;
        if io == Io::Write && o.access & OPEN4_SHARE_ACCESS_WRITE == 0 {
            return Err(NfsStat4::NFS4ERR_OPENMODE);
        }
        Ok(())
    }

    /// §18.48 TEST_STATEID of one stateid of `client`: NFS4_OK if it is current,
    /// else the error using it would give.
    pub fn test(&self, client: ClientId4, id: &StateId4) -> NfsStat4 {
        match self.opens.get(&id.other).filter(|o| o.client == client) {
            None => NfsStat4::NFS4ERR_BAD_STATEID,
            Some(o) => match check_seqid(o.seqid, id.seqid) {
                Ok(()) => NfsStat4::NFS4_OK,
                Err(e) => e,
            },
        }
    }

    /// §18.38 FREE_STATEID: an open stateid still holds its open, which only CLOSE
    /// ends: NFS4ERR_LOCKS_HELD (§18.38.3); an unknown one NFS4ERR_BAD_STATEID.
    pub fn free(&self, client: ClientId4, id: &StateId4) -> NfsStat4 {
        match self.opens.get(&id.other).filter(|o| o.client == client) {
            None => NfsStat4::NFS4ERR_BAD_STATEID,
            Some(_) => NfsStat4::NFS4ERR_LOCKS_HELD,
        }
    }

    /// Drops every open of `client` (its lease expired, or it was destroyed or
    /// replaced).
    pub fn remove_client(&mut self, client: ClientId4) {
        let gone: Vec<[u8; 12]> = self
            .opens
            .iter()
            .filter(|(_, o)| o.client == client)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }
}

/// A stateid's `other` (module docs): the server instance `boot` and the next value of
/// the counter `next`, which moves on.
pub(crate) fn new_other(boot: u32, next: &mut u64) -> [u8; 12] {
    let mut other = [0u8; 12];
    other[..4].copy_from_slice(&boot.to_be_bytes());
    other[4..].copy_from_slice(&next.to_be_bytes());
    *next += 1;
    other
}

/// The seqid after `s`: it wraps from `u32::MAX` to 1, since 0 means "current"
/// (§8.2.2).
pub(crate) fn next_seqid(s: u32) -> u32 {
    s.checked_add(1).unwrap_or(1)
}

/// §8.2.2: `given` 0 is the current seqid; less than `current` is
/// NFS4ERR_OLD_STATEID; more is NFS4ERR_BAD_STATEID.
pub(crate) fn check_seqid(current: u32, given: u32) -> Result<(), NfsStat4> {
    match given {
        0 => Ok(()),
        g if g == current => Ok(()),
        g if g < current => Err(NfsStat4::NFS4ERR_OLD_STATEID),
        _ => Err(NfsStat4::NFS4ERR_BAD_STATEID),
    }
}

/// Whether OPEN's `share_access` (want bits masked off) and `share_deny` are in
/// range (§18.16.3: access is READ, WRITE or BOTH; deny NONE to BOTH).
pub fn modes_valid(access: u32, deny: u32) -> bool {
    (1..=OPEN4_SHARE_ACCESS_BOTH).contains(&access) && deny <= OPEN4_SHARE_DENY_BOTH
}

#[cfg(test)]
mod tests {
    use nfs4::state::*;

    use super::*;

    const A: ClientId4 = 1;
    const B: ClientId4 = 2;

    fn owner(s: &str) -> OpaqueLimit {
        OpaqueLimit::from(s.as_bytes())
    }

    fn file(s: &'static str) -> FileKey {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn rfc8881_9_7_share_conflicts_are_between_owners_only() {
        let mut t = Opens::new(7);
        let f = file("f");
        t.open(
            A,
            &owner("a"),
            &f,
            OPEN4_SHARE_ACCESS_READ,
            OPEN4_SHARE_DENY_WRITE,
        )
        .unwrap();
        // Every combination of another owner's access and deny against READ/DENY_WRITE.
        for access in 1..=3 {
            for deny in 0..=3 {
                let conflict =
                    access & OPEN4_SHARE_DENY_WRITE != 0 || deny & OPEN4_SHARE_ACCESS_READ != 0;
                let got = t.open(B, &owner("b"), &f, access, deny);
                assert_eq!(got.is_err(), conflict, "{access} {deny}");
                if let Ok(id) = got {
                    t.close(B, &id, &f).unwrap();
                }
            }
        }
        // The same owner upgrading past its own deny: allowed; another file: free.
        assert!(t
            .open(A, &owner("a"), &f, OPEN4_SHARE_ACCESS_WRITE, 0)
            .is_ok());
        assert!(t
            .open(
                B,
                &owner("b"),
                &file("g"),
                OPEN4_SHARE_ACCESS_BOTH,
                OPEN4_SHARE_DENY_BOTH
            )
            .is_ok());
    }

    #[test]
    fn rfc8881_8_2_2_seqids_and_stateid_ownership() {
        let mut t = Opens::new(7);
        let f = file("f");
        let one = t.open(A, &owner("a"), &f, 1, 0).unwrap();
        let two = t.open(A, &owner("a"), &f, 2, 0).unwrap();
        assert_eq!((one.other, one.seqid, two.seqid), (two.other, 1, 2));
        assert_eq!(&one.other[..4], &7u32.to_be_bytes());
        assert_eq!(
            t.find(A, &one, &f).err(),
            Some(NfsStat4::NFS4ERR_OLD_STATEID)
        );
        let three = StateId4 { seqid: 3, ..two };
        assert_eq!(
            t.find(A, &three, &f).err(),
            Some(NfsStat4::NFS4ERR_BAD_STATEID)
        );
        let zero = StateId4 { seqid: 0, ..two };
        assert!(t.find(A, &zero, &f).is_ok());
        assert_eq!(
            t.find(B, &two, &f).err(),
            Some(NfsStat4::NFS4ERR_BAD_STATEID)
        );
        assert_eq!(
            t.find(A, &two, &file("g")).err(),
            Some(NfsStat4::NFS4ERR_BAD_STATEID)
        );
        assert_eq!(next_seqid(u32::MAX), 1);
    }

    #[test]
    fn rfc8881_18_22_3_and_18_32_3_io_by_stateid() {
        let mut t = Opens::new(7);
        let f = file("f");
        let r = t
            .open(A, &owner("r"), &f, OPEN4_SHARE_ACCESS_READ, 0)
            .unwrap();
        assert_eq!(t.check_io(A, &r, &f, Io::Read), Ok(()));
        assert_eq!(
            t.check_io(A, &r, &f, Io::Write),
            Err(NfsStat4::NFS4ERR_OPENMODE)
        );
        // Denying reads meets "r"'s read access; denying writes does not.
        assert_eq!(
            t.open(
                A,
                &owner("w"),
                &f,
                OPEN4_SHARE_ACCESS_WRITE,
                OPEN4_SHARE_DENY_READ
            ),
            Err(NfsStat4::NFS4ERR_SHARE_DENIED)
        );
        let w = t
            .open(
                A,
                &owner("w"),
                &f,
                OPEN4_SHARE_ACCESS_WRITE,
                OPEN4_SHARE_DENY_WRITE,
            )
            .unwrap();
        assert_eq!(t.check_io(A, &w, &f, Io::Write), Ok(()));
        assert_eq!(t.check_io(A, &w, &f, Io::Read), Ok(()), "as knfsd allows");
        for (id, io, want) in [
            (StateId4::ANONYMOUS, Io::Read, Ok(())),
            (
                StateId4::ANONYMOUS,
                Io::Write,
                Err(NfsStat4::NFS4ERR_LOCKED),
            ),
            (StateId4::READ_BYPASS, Io::Read, Ok(())),
            (
                StateId4::READ_BYPASS,
                Io::Write,
                Err(NfsStat4::NFS4ERR_LOCKED),
            ),
        ] {
            assert_eq!(t.check_io(B, &id, &f, io), want, "{id:?} {io:?}");
        }
        assert_eq!(
            t.check_io(B, &StateId4::ANONYMOUS, &file("g"), Io::Write),
            Ok(())
        );
    }

    #[test]
    fn rfc8881_18_18_3_downgrade_only_within_what_the_open_has() {
        let mut t = Opens::new(7);
        let f = file("f");
        let id = t.open(A, &owner("a"), &f, 3, 1).unwrap();
        assert_eq!(t.downgrade(A, &id, &f, 1, 2), Err(NfsStat4::NFS4ERR_INVAL));
        let down = t.downgrade(A, &id, &f, 1, 0).unwrap();
        assert_eq!(down.seqid, 2);
        assert_eq!(t.get(&down).map(|o| (o.access, o.deny)), Some((1, 0)));
        assert_eq!(
            t.downgrade(A, &down, &f, 3, 0),
            Err(NfsStat4::NFS4ERR_INVAL)
        );
    }

    #[test]
    fn closing_and_removing_a_client_leave_no_index_behind() {
        let mut t = Opens::new(7);
        let f = file("f");
        let id = t.open(A, &owner("a"), &f, 1, 0).unwrap();
        t.open(B, &owner("b"), &f, 1, 0).unwrap();
        t.open(B, &owner("b"), &file("g"), 1, 0).unwrap();
        t.close(A, &id, &f).unwrap();
        assert_eq!(t.close(A, &id, &f), Err(NfsStat4::NFS4ERR_BAD_STATEID));
        assert!(t.held_by(B) && !t.held_by(A));
        t.remove_client(B);
        assert!(t.is_empty() && t.by_file.is_empty());
        assert_eq!(t.free(A, &id), NfsStat4::NFS4ERR_BAD_STATEID);
    }
}
