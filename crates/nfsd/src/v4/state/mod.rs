//! NFSv4.1 client and session state as a sans-IO state machine (RFC 8881 §2.4,
//! §2.10, §8.3, §18.35-18.37, §18.46, §18.50, §18.51): every call takes the
//! operation's arguments, who sent them and the time (`now`, an [`Instant`] the
//! caller reads), and returns the answer; nothing here reads a clock, sleeps or does
//! I/O, so every rule is a unit test (module `tests`).
//!
//! - [`client`]: client records, confirmed or not, and their leases;
//! - [`session`]: sessions and the channel attributes CREATE_SESSION grants;
//! - [`slots`]: a session's slot table and reply cache (SEQUENCE's exactly-once rules);
//! - [`opens`]: open state, share reservations and open stateids;
//! - [`lock_state`]: lock stateids (the locks are in the lock table NLM shares);
//! - [`grace`]: which clients may reclaim after a restart, and until when.
//!
//! [`StateTable`] holds them all and applies the operations' rules. Bounded: at most
//! [`MAX_CLIENTS`] client records and [`MAX_SESSIONS`] sessions (past them: NFS4ERR_DELAY,
//! as knfsd answers when it cannot allocate one); the reply caches of all sessions hold
//! at most `MAX_SESSIONS` x 32 slots x 16 KiB (64 MiB) ([`session::ChannelLimits::FORE`]).
//! And charged to `--max-memory` ([`budget`]): a client record, session, open or lock
//! stateid that does not fit is NFS4ERR_DELAY.
//!
//! Not yet here: state protection other than SP4_NONE, the back channel
//! (CREATE_SESSION grants no CONN_BACK_CHAN) and delegations. What survives a
//! restart is the set of clients that may reclaim ([`StateTable::recorded`], saved by
//! the caller, [`crate::v4::records`]); opens and locks are reclaimed by the clients.

pub mod budget;
pub mod client;
pub mod grace;
pub mod lock_state;
pub mod opens;
pub mod session;
pub mod slots;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nfs4::session::*;
use nfs4::{ClientId4, NfsStat4, Res4, SequenceId4, SessionId4, SlotId4};
use xdr::Bytes;

pub use client::{Client, Principal};
pub use lock_state::{LockState, LockStates};
pub use opens::Opens;
pub use session::{ChannelLimits, Session};
pub use slots::{SlotTable, SlotUse};

/// Lease time (RFC 8881 §5.8.1.11 `lease_time`, §8.3): 90 s, as knfsd's default.
pub const LEASE_TIME: Duration = Duration::from_secs(90);
/// Most client records kept (confirmed and unconfirmed).
pub const MAX_CLIENTS: usize = 4096;
/// Most sessions, all clients together.
pub const MAX_SESSIONS: usize = 128;

/// What EXCHANGE_ID grants (the rest of `EXCHANGE_ID4resok` is the server's
/// identity, [`crate::v4`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchanged {
    /// `eir_clientid`.
    pub clientid: ClientId4,
    /// `eir_sequenceid`: the `csa_sequence` the next CREATE_SESSION carries.
    pub sequenceid: SequenceId4,
    /// The record is confirmed (`EXCHGID4_FLAG_CONFIRMED_R`).
    pub confirmed: bool,
}

/// What SEQUENCE makes of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sequenced {
    /// A new request: the SEQUENCE result to answer and the session's client; run
    /// the rest of the COMPOUND, then [`StateTable::complete`].
    New(Sequence4ResOk, ClientId4),
    /// A retransmission of a request whose reply is cached: these bytes are the
    /// whole `COMPOUND4res` to send again (RFC 8881 §2.10.6.1.3).
    Replay(Bytes),
}

/// A map whose keys the server made (client and session ids, stateids, sealed file
/// handles), hashed with `foldhash` seeded per map rather than std's SipHash: every
/// COMPOUND looks up its session and slot, and SipHash cost about 1,700 of a small
/// COMPOUND's 25,000 instructions (docs/bench/percall/instructions41.sh). No client
/// chooses these keys, so none can make them collide; maps keyed by what a client
/// chooses (lock owners) keep SipHash.
pub(crate) type ServerKeyed<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// All NFSv4.1 client and session state of a server.
#[derive(Debug)]
pub struct StateTable {
    /// Distinguishes this server instance's client and session ids from an earlier
    /// one's (RFC 8881 §2.4: a client ID from before a restart is stale).
    boot: u32,
    next_client: u32,
    next_session: u32,
    lease: Duration,
    clients: ServerKeyed<ClientId4, Client>,
    sessions: ServerKeyed<SessionId4, Session>,
    opens: Opens,
    locks: LockStates,
    /// Lock states dropped with their client (lease expiry, a destroyed or replaced
    /// record), whose locks the caller releases ([`StateTable::take_released`]).
    released: Vec<LockState>,
    grace: grace::Grace,
    /// Owners of the clients that completed their reclaim and are still there: the
    /// records to keep across a restart.
    recorded: std::collections::HashSet<Vec<u8>>,
    /// [`StateTable::recorded`] changed since [`StateTable::take_records_changed`].
    records_changed: bool,
    /// The previous run's clients that did not come back were dropped from the
    /// records (the grace period ended).
    grace_pruned: bool,
    budget: budget::StateBudget,
}

impl StateTable {
    /// Empty state for a server instance `boot` (e.g. its start time in seconds),
    /// with leases of `lease`.
    pub fn new(boot: u32, lease: Duration) -> StateTable {
        StateTable {
            boot,
            next_client: 1,
            next_session: 1,
            lease,
            clients: ServerKeyed::default(),
            sessions: ServerKeyed::default(),
            opens: Opens::new(boot),
            locks: LockStates::new(boot),
            released: Vec::new(),
            grace: grace::Grace::default(),
            recorded: Default::default(),
            records_changed: false,
            grace_pruned: true,
            budget: Default::default(),
        }
    }

    /// Charges new state to `b` ([`budget`]): past it, NFS4ERR_DELAY.
    pub fn set_budget(&mut self, b: budget::StateBudget) {
        self.opens.set_budget(b.clone());
        self.locks.set_budget(b.clone());
        self.budget = b;
    }

    /// Starts the grace period at `now` for the clients the previous run recorded
    /// (`previous`), one lease long; none if there are none.
    pub fn start_grace(&mut self, previous: std::collections::HashSet<Vec<u8>>, now: Instant) {
        // They stay recorded through the grace period, so that another restart
        // before they reclaim does not take their right away; those that did not
        // come back go when it ends ([`StateTable::expire`]).
        self.recorded = previous.clone();
        self.grace = grace::Grace::new(previous, now, self.lease);
        self.grace_pruned = false;
    }

    /// Whether the grace period runs at `now`: new state is NFS4ERR_GRACE.
    pub fn in_grace(&self, now: Instant) -> bool {
        self.grace.active(now)
    }

    /// Time left in the grace period at `now`.
    pub fn grace_left(&self, now: Instant) -> Option<Duration> {
        self.grace.left(now)
    }

    /// Whether `client` may reclaim at `now` ([`grace`]).
    pub fn may_reclaim(&self, client: ClientId4, now: Instant) -> bool {
        self.clients
            .get(&client)
            .is_some_and(|c| self.grace.may_reclaim(&c.owner.0, c.reclaim_complete, now))
    }

    /// The owners to keep across a restart, if they changed since the last call.
    pub fn take_records_changed(&mut self) -> Option<std::collections::HashSet<Vec<u8>>> {
        std::mem::take(&mut self.records_changed).then(|| self.recorded.clone())
    }

    /// The lease time.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The client record `id`, if there is one.
    pub fn client(&self, id: ClientId4) -> Option<&Client> {
        self.clients.get(&id)
    }

    /// The session `id`, if there is one.
    pub fn session(&self, id: &SessionId4) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// The open state.
    pub fn opens(&self) -> &Opens {
        &self.opens
    }

    /// The open state, to change.
    pub fn opens_mut(&mut self) -> &mut Opens {
        &mut self.opens
    }

    /// The lock stateids.
    pub fn locks(&self) -> &LockStates {
        &self.locks
    }

    /// Whether `id`, presented by `client` for `io` on `file`, allows it: an open
    /// stateid or a special one ([`Opens::check_io`]), or a lock stateid (§8.2.1: READ,
    /// WRITE and SETATTR take one; the Linux client sends its lock stateid while it
    /// holds locks), current (§8.2.2) and bound to the file, whose open then decides.
    pub fn check_io(
        &self,
        client: nfs4::ClientId4,
        id: &nfs4::StateId4,
        file: &opens::FileKey,
        io: opens::Io,
    ) -> Result<(), NfsStat4> {
        if self.locks.get(id).is_some() {
            let lock = self.locks.find(client, id, file)?;
            let open = nfs4::StateId4 {
                // §8.2.2: seqid 0 is the open's current one.
                seqid: 0,
                other: lock.open,
            };
            return self.opens.check_io(client, &open, file, io);
        }
        self.opens.check_io(client, id, file, io)
    }

    /// The lock stateids, to change.
    pub fn locks_mut(&mut self) -> &mut LockStates {
        &mut self.locks
    }

    /// §18.2 CLOSE of the open `id` of `client` on `file`: the open ends, and the
    /// lock states made from it go with it (knfsd releases them too); the caller
    /// releases their locks.
    pub fn close(
        &mut self,
        client: ClientId4,
        id: &nfs4::StateId4,
        file: &opens::FileKey,
    ) -> Result<Vec<LockState>, NfsStat4> {
        self.opens.close(client, id, file)?;
        Ok(self.locks.remove_of_open(&id.other))
    }

    /// The lock states whose client went since the last call: the caller releases
    /// their locks.
    pub fn take_released(&mut self) -> Vec<LockState> {
        std::mem::take(&mut self.released)
    }

    /// Number of client records and sessions.
    pub fn counts(&self) -> (usize, usize) {
        (self.clients.len(), self.sessions.len())
    }

    /// RFC 8881 §18.35 EXCHANGE_ID with SP4_NONE from `who`: the cases of §18.35.4
    /// (numbered as there) decide between the existing record, a new unconfirmed
    /// one and an error.
    pub fn exchange_id(
        &mut self,
        args: &ExchangeId4Args,
        who: Principal,
        now: Instant,
    ) -> Result<Exchanged, NfsStat4> {
        // RFC 8881 §18.35.3 added EXCHGID4_FLAG_SUPP_FENCE_OPS (0x4) to RFC 5661's
        // flags (the nfs4 crate follows RFC 5662, which lacks it): a client may set it.
        const SUPP_FENCE_OPS: u32 = 0x0000_0004;
        const DEFINED: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
            | EXCHGID4_FLAG_SUPP_MOVED_MIGR
            | SUPP_FENCE_OPS
            | EXCHGID4_FLAG_BIND_PRINC_STATEID
            | EXCHGID4_FLAG_MASK_PNFS
            | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
        // §18.35.3: a flag the argument does not define (or a result-only flag) is
        // NFS4ERR_INVAL.
        if args.eia_flags & !DEFINED != 0 {
            return Err(NfsStat4::NFS4ERR_INVAL);
        }
        match &args.eia_state_protect {
            StateProtect4A::None => {}
            // No error of §15.2's list for EXCHANGE_ID says "not supported" but
            // these: SSV needs algorithms (§18.35.3: none of the client's encryption
            // algorithms is supported), and an unsupported SP4_MACH_CRED is INVAL as
            // knfsd answers an unsupported `spa_how`.
            StateProtect4A::Ssv(_) => return Err(NfsStat4::NFS4ERR_ENCR_ALG_UNSUPP),
            StateProtect4A::MachCred(_) => return Err(NfsStat4::NFS4ERR_INVAL),
        }
        self.expire(now);
        let owner = &args.eia_clientowner.co_ownerid;
        let verifier = args.eia_clientowner.co_verifier;
        let find = |confirmed: bool| {
            self.clients
                .values()
                .find(|c| c.confirmed == confirmed && &c.owner == owner)
                .map(|c| c.id)
        };
        let confirmed = find(true);
        let unconfirmed = find(false);
        if args.eia_flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0 {
            let c = confirmed
                .and_then(|id| self.clients.get(&id))
                // Case 7: update, but no confirmed record.
                .ok_or(NfsStat4::NFS4ERR_NOENT)?;
            if c.principal != who {
                // Case 9: update by another principal.
                return Err(NfsStat4::NFS4ERR_PERM);
            }
            if c.verifier != verifier {
                // Case 8: update with another verifier.
                return Err(NfsStat4::NFS4ERR_NOT_SAME);
            }
            // Case 6: update (nothing to update with SP4_NONE and no pNFS).
            return Ok(Self::granted(c));
        }
        if let Some(c) = confirmed.and_then(|id| self.clients.get(&id)) {
            if c.principal == who && c.verifier == verifier {
                // Case 2: the same client again.
                return Ok(Self::granted(c));
            }
            // "Client Collision": sessions or opens under a lease still running.
            let has_state =
                !c.expired(self.lease, now) && (!c.sessions.is_empty() || self.opens.held_by(c.id));
            if c.principal != who {
                if has_state {
                    // Case 3: another principal uses the owner of a client with state.
                    return Err(NfsStat4::NFS4ERR_CLID_INUSE);
                }
                // Case 3 without state: nothing of the old principal's is left to
                // protect, and its client ID goes now (NFS4ERR_STALE_CLIENTID from
                // here on), as knfsd expires it (pynfs EID5e).
                let old = c.id;
                self.remove_client(old);
            }
            // Case 4: the client restarted (new verifier): a new unconfirmed record;
            // the confirmed one goes when CREATE_SESSION confirms the new one.
        }
        if let Some(old) = unconfirmed {
            // Case 5: an unconfirmed record is replaced.
            self.remove_client(old);
        }
        // Case 1 (or 4, 5): a new unconfirmed record.
        if self.clients.len() >= MAX_CLIENTS {
            return Err(NfsStat4::NFS4ERR_DELAY);
        }
        let charge = self.budget.charge(budget::client_cost(owner.0.len()))?;
        let id = (u64::from(self.boot) << 32) | u64::from(self.next_client);
        self.next_client = self.next_client.wrapping_add(1).max(1);
        let c = Client {
            id,
            owner: owner.clone(),
            verifier,
            principal: who,
            confirmed: false,
            cs_sequence: 0,
            cs_cached: None,
            sessions: Vec::new(),
            reclaim_complete: false,
            renewed: now,
            charge,
        };
        let granted = Self::granted(&c);
        self.clients.insert(id, c);
        Ok(granted)
    }

    fn granted(c: &Client) -> Exchanged {
        Exchanged {
            clientid: c.id,
            // The CREATE_SESSION to come carries the one after the last executed
            // (for a new record: 1).
            sequenceid: c.cs_sequence.wrapping_add(1),
            confirmed: c.confirmed,
        }
    }

    /// RFC 8881 §18.36 CREATE_SESSION from `who`, with the sequence and reply-cache
    /// rules of §18.36.4: for the client's "CREATE_SESSION slot", `csa_sequence` one
    /// past the last executed is new, equal to it (confirmed client) is answered from
    /// the cache, anything else is NFS4ERR_SEQ_MISORDERED. The first one confirms an
    /// unconfirmed record and retires the confirmed record of the same owner (the
    /// client restarted, §18.35.4 case 4) with its sessions.
    pub fn create_session(
        &mut self,
        args: &CreateSession4Args,
        who: Principal,
        now: Instant,
    ) -> CreateSession4Res {
        self.expire(now);
        let Some(c) = self.clients.get(&args.csa_clientid) else {
            // §18.36.4: no such client ID (expired, destroyed, from another boot).
            return Res4::Err(NfsStat4::NFS4ERR_STALE_CLIENTID);
        };
        if !c.confirmed && c.principal != who {
            // §18.36.4: the unconfirmed record's principal must send the first one.
            return Res4::Err(NfsStat4::NFS4ERR_CLID_INUSE);
        }
        if c.confirmed && args.csa_sequence == c.cs_sequence {
            return match &c.cs_cached {
                Some(res) => res.clone(),
                None => Res4::Err(NfsStat4::NFS4ERR_SEQ_MISORDERED),
            };
        }
        if args.csa_sequence != c.cs_sequence.wrapping_add(1) {
            return Res4::Err(NfsStat4::NFS4ERR_SEQ_MISORDERED);
        }
        // §18.36.3 defines three `csa_flags`; others are refused, as knfsd does (and
        // as §18.35.3 requires of EXCHANGE_ID's flags).
        const DEFINED: u32 = CREATE_SESSION4_FLAG_PERSIST
            | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
            | CREATE_SESSION4_FLAG_CONN_RDMA;
        if args.csa_flags & !DEFINED != 0 {
            return Res4::Err(NfsStat4::NFS4ERR_INVAL);
        }
        let granted = ChannelLimits::FORE
            .negotiate(&args.csa_fore_chan_attrs)
            .and_then(|f| Ok((f, ChannelLimits::BACK.negotiate(&args.csa_back_chan_attrs)?)));
        let (fore, back) = match granted {
            Ok(g) => g,
            Err(e) => return Res4::Err(e),
        };
        if self.sessions.len() >= MAX_SESSIONS {
            return Res4::Err(NfsStat4::NFS4ERR_DELAY);
        }
        let charge = match self.budget.charge(budget::session_cost(&fore)) {
            Ok(c) => c,
            Err(e) => return Res4::Err(e),
        };
        let clientid = args.csa_clientid;
        let mut sid = [0u8; 16];
        sid[..8].copy_from_slice(&clientid.to_be_bytes());
        sid[8..12].copy_from_slice(&self.next_session.to_be_bytes());
        sid[12..].copy_from_slice(&self.boot.to_be_bytes());
        self.next_session = self.next_session.wrapping_add(1);
        let res = Res4::Ok(CreateSession4ResOk {
            csr_sessionid: sid,
            csr_sequence: args.csa_sequence,
            // No persistent reply cache, no back channel (yet), no RDMA mode.
            csr_flags: 0,
            csr_fore_chan_attrs: fore.clone(),
            csr_back_chan_attrs: back.clone(),
        });
        let Some((owner, confirmed)) = self
            .clients
            .get(&clientid)
            .map(|c| (c.owner.clone(), c.confirmed))
        else {
            return Res4::Err(NfsStat4::NFS4ERR_STALE_CLIENTID);
        };
        if !confirmed {
            let old: Vec<ClientId4> = self
                .clients
                .values()
                .filter(|o| o.confirmed && o.owner == owner)
                .map(|o| o.id)
                .collect();
            for id in old {
                // §18.35.5 case 4 confirmed: a restart, or another client that
                // names itself the same (Linux clients of one host name do).
                tracing::info!(
                    owner = %String::from_utf8_lossy(&owner.0),
                    "NFSv4.1 client came back with a new verifier: a restart, or another client of the same name; its former state is dropped"
                );
                self.remove_client(id);
            }
        }
        let Some(c) = self.clients.get_mut(&clientid) else {
            return Res4::Err(NfsStat4::NFS4ERR_STALE_CLIENTID);
        };
        c.confirmed = true;
        c.cs_sequence = args.csa_sequence;
        c.cs_cached = Some(res.clone());
        c.sessions.push(sid);
        c.renewed = now;
        let mut session = Session::new(sid, clientid, fore, back);
        session.charge = charge;
        self.sessions.insert(sid, session);
        res
    }

    /// RFC 8881 §18.46 SEQUENCE beginning a COMPOUND of `opcount` operations whose
    /// arguments are `request_len` bytes: finds the session (NFS4ERR_BADSESSION if
    /// there is none, or its client's lease ran out), holds the COMPOUND to the
    /// session's `ca_maxoperations` (NFS4ERR_TOO_MANY_OPS) and `ca_maxrequestsize`
    /// (NFS4ERR_REQ_TOO_BIG), and its least reply (`least_reply_len`: SEQUENCE's
    /// alone) to `ca_maxresponsesize` (NFS4ERR_REP_TOO_BIG) and, when it is to be
    /// cached, `ca_maxresponsesize_cached` (NFS4ERR_REP_TOO_BIG_TO_CACHE), before it
    /// takes a slot (§2.10.6.4, §18.46.3); applies the slot rules ([`slots`]) and
    /// renews the client's lease (§8.3).
    pub fn sequence(
        &mut self,
        args: &Sequence4Args,
        opcount: u32,
        request_len: usize,
        least_reply_len: usize,
        now: Instant,
    ) -> Result<Sequenced, NfsStat4> {
        let session = self
            .sessions
            .get(&args.sa_sessionid)
            .ok_or(NfsStat4::NFS4ERR_BADSESSION)?;
        let clientid = session.client;
        let expired = match self.clients.get(&clientid) {
            Some(c) => c.expired(self.lease, now) && !self.busy(c),
            None => true,
        };
        if expired {
            self.remove_client(clientid);
            return Err(NfsStat4::NFS4ERR_BADSESSION);
        }
        let session = self
            .sessions
            .get_mut(&args.sa_sessionid)
            .ok_or(NfsStat4::NFS4ERR_BADSESSION)?;
        if opcount > session.fore.ca_maxoperations {
            return Err(NfsStat4::NFS4ERR_TOO_MANY_OPS);
        }
        if request_len > session.fore.ca_maxrequestsize as usize {
            return Err(NfsStat4::NFS4ERR_REQ_TOO_BIG);
        }
        // §18.46.3, for the smallest reply (SEQUENCE's own result): the later
        // operations are checked as they come (`v4::reply_size`). Before the slot is
        // used, so that nothing is cached or advanced (pynfs CSESS27).
        if least_reply_len > session.fore.ca_maxresponsesize as usize {
            return Err(NfsStat4::NFS4ERR_REP_TOO_BIG);
        }
        if args.sa_cachethis && least_reply_len > session.fore.ca_maxresponsesize_cached as usize {
            return Err(NfsStat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
        }
        let used = session.slots.begin(args.sa_slotid, args.sa_sequenceid)?;
        let highest = session.slots.highest_slotid();
        if let Some(c) = self.clients.get_mut(&clientid) {
            c.renewed = now;
        }
        Ok(match used {
            SlotUse::Replay(bytes) => Sequenced::Replay(bytes),
            SlotUse::New => Sequenced::New(
                Sequence4ResOk {
                    sr_sessionid: args.sa_sessionid,
                    sr_sequenceid: args.sa_sequenceid,
                    sr_slotid: args.sa_slotid,
                    sr_highest_slotid: highest,
                    sr_target_highest_slotid: highest,
                    sr_status_flags: 0,
                },
                clientid,
            ),
        })
    }

    /// Ends the request SEQUENCE began on `slotid` of `session`, caching `reply` (the
    /// encoded `COMPOUND4res`) if the client asked for it (`sa_cachethis`) and it fits
    /// `ca_maxresponsesize_cached`. The lease is renewed again: it runs from the end
    /// of the client's last request.
    pub fn complete(
        &mut self,
        session: &SessionId4,
        slotid: SlotId4,
        reply: Option<Bytes>,
        now: Instant,
    ) {
        if let Some(s) = self.sessions.get_mut(session) {
            s.slots.complete(slotid, reply);
            if let Some(c) = self.clients.get_mut(&s.client) {
                c.renewed = now;
            }
        }
    }

    /// RFC 8881 §18.37 DESTROY_SESSION: NFS4ERR_BADSESSION if there is no such
    /// session.
    pub fn destroy_session(&mut self, id: &SessionId4) -> NfsStat4 {
        match self.sessions.remove(id) {
            None => NfsStat4::NFS4ERR_BADSESSION,
            Some(s) => {
                if let Some(c) = self.clients.get_mut(&s.client) {
                    c.sessions.retain(|x| x != id);
                }
                NfsStat4::NFS4_OK
            }
        }
    }

    /// RFC 8881 §18.50 DESTROY_CLIENTID: NFS4ERR_STALE_CLIENTID if there is no such
    /// client, NFS4ERR_CLIENTID_BUSY while it has sessions or opens (§18.50.3; as
    /// knfsd's `client_has_state`).
    pub fn destroy_clientid(&mut self, id: ClientId4, now: Instant) -> NfsStat4 {
        self.expire(now);
        match self.clients.get(&id) {
            None => NfsStat4::NFS4ERR_STALE_CLIENTID,
            Some(c) if !c.sessions.is_empty() || self.opens.held_by(id) => {
                NfsStat4::NFS4ERR_CLIENTID_BUSY
            }
            Some(_) => {
                self.remove_client(id);
                NfsStat4::NFS4_OK
            }
        }
    }

    /// RFC 8881 §18.51 RECLAIM_COMPLETE by `client` (the client of the COMPOUND's
    /// session). With `rca_one_fs` FALSE a second one is NFS4ERR_COMPLETE_ALREADY
    /// (§18.51.3); the first ends the client's reclaims ([`grace`]) and records it,
    /// to reclaim after a restart. With TRUE it concerns one file system: NFS4_OK
    /// (reclaims are per client here).
    pub fn reclaim_complete(&mut self, client: ClientId4, one_fs: bool) -> NfsStat4 {
        let Some(c) = self.clients.get_mut(&client) else {
            return NfsStat4::NFS4ERR_STALE_CLIENTID;
        };
        if one_fs {
            return NfsStat4::NFS4_OK;
        }
        if c.reclaim_complete {
            return NfsStat4::NFS4ERR_COMPLETE_ALREADY;
        }
        c.reclaim_complete = true;
        let owner = c.owner.0.to_vec();
        self.grace.complete(&owner);
        if self.recorded.insert(owner) {
            self.records_changed = true;
        }
        NfsStat4::NFS4_OK
    }

    /// Removes the clients whose lease ran out at `now` (RFC 8881 §8.3), with their
    /// sessions, unless a request of theirs is in progress (it renews the lease
    /// when it completes); once the grace period is over, drops the records of the
    /// previous run's clients that did not reclaim.
    pub fn expire(&mut self, now: Instant) {
        if !self.grace_pruned && !self.grace.active(now) {
            self.grace_pruned = true;
            let clients = &self.clients;
            let before = self.recorded.len();
            self.recorded.retain(|o| {
                clients
                    .values()
                    .any(|c| c.reclaim_complete && c.owner.0[..] == o[..])
            });
            self.records_changed |= self.recorded.len() != before;
        }
        let gone: Vec<ClientId4> = self
            .clients
            .values()
            .filter(|c| c.expired(self.lease, now) && !self.busy(c))
            .map(|c| c.id)
            .collect();
        for id in gone {
            self.remove_client(id);
        }
    }

    fn busy(&self, c: &Client) -> bool {
        c.sessions
            .iter()
            .any(|s| self.sessions.get(s).is_some_and(|s| s.slots.busy()))
    }

    fn remove_client(&mut self, id: ClientId4) {
        self.opens.remove_client(id);
        let gone = self.locks.remove_client(id);
        self.released.extend(gone);
        if let Some(c) = self.clients.remove(&id) {
            // Its record goes, unless another record of the same owner (the client
            // restarted and is confirming a new one) is there to complete again.
            let same_owner = self.clients.values().any(|o| o.owner == c.owner);
            if !same_owner && self.recorded.remove(&c.owner.0[..]) {
                self.records_changed = true;
            }
            for s in &c.sessions {
                self.sessions.remove(s);
            }
        }
    }
}
