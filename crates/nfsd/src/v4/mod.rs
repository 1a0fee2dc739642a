//! NFSv4.1 (RFC 8881; XDR of RFC 5662 in the `nfs4` crate) beside NFSv3: program
//! 100003 version 4 on the same listeners (TCP and RPC-over-RDMA), over the same
//! export-confined file layer ([`crate::nfs::Table`], [`crate::vfs`], `proc`).
//! Served when [`crate::server::Bound::serve_nfs4`] is called (the binary does unless
//! `--no-nfs4`).
//!
//! ```text
//!   service::Nfs4Service (oncrpc: NULL, COMPOUND)
//!            |
//!   compound (minor version, first-op rules, SEQUENCE + reply cache, op loop,
//!            |  current and saved filehandle and stateid)
//!            |   ops::OPS: name, flags, handler per operation
//!   session_ops   fh_ops (+ attrs, pseudo), readdir, names_ops (+ setattrs),
//!            |    open_ops, io_ops, lock_ops (+ NLM's lock table)
//!            |                 |
//!   state (sans-IO:      the NFSv3 file layer: Table::resolve, proc::*, vfs
//!   clients, sessions,
//!   slots, leases, opens, lock stateids)
//! ```
//!
//! Served: NULL; COMPOUND of minor version 1 with EXCHANGE_ID (SP4_NONE),
//! CREATE_SESSION, SEQUENCE (slots, reply cache), DESTROY_SESSION, DESTROY_CLIENTID,
//! BIND_CONN_TO_SESSION, RECLAIM_COMPLETE, PUTROOTFH/PUTPUBFH (a pseudo root joining the exports),
//! PUTFH, GETFH, SAVEFH, RESTOREFH, LOOKUP, LOOKUPP, ACCESS, GETATTR, READDIR,
//! READLINK, SECINFO and SECINFO_NO_NAME (AUTH_SYS), CREATE (not regular files:
//! OPEN's), LINK, REMOVE, RENAME, SETATTR, VERIFY and NVERIFY; OPEN (CLAIM_NULL with
//! every create mode, CLAIM_FH), CLOSE, OPEN_DOWNGRADE with share reservations
//! across clients, READ, WRITE and COMMIT, LOCK, LOCKT and LOCKU (in NLM's lock
//! table: NFSv3 and NFSv4.1 clients see each other's locks), TEST_STATEID and
//! FREE_STATEID; restart recovery ([`records`], a grace period for CLAIM_PREVIOUS
//! and reclaim LOCKs); `owner` strings numeric or in an ID-mapping domain
//! ([`idmap`]). Minor versions 0 and 2 answer NFS4ERR_MINOR_VERS_MISMATCH. Not
//! yet: delegations and the back channel (BIND_CONN_TO_SESSION binds the fore channel
//! only), NFSv4.2 (the operation table lists them: NFS4ERR_NOTSUPP).

pub mod attrs;
mod compound;
pub mod errors;
mod fh_ops;
pub mod idmap;
mod io_ops;
mod lock_ops;
mod names_ops;
mod open_ops;
mod ops;
pub mod pseudo;
mod read_file;
mod readdir;
pub mod records;
mod reply_size;
pub mod service;
mod session_ops;
pub mod setattrs;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use nfs4::{NfsTime4, OpaqueLimit};
use xdr::{Decoder, XdrStream};

use crate::nfs::{Caller, NfsServer};
pub use service::Nfs4Service;
use state::{Principal, StateTable};

/// The NFSv4.1 server: the NFSv3 server whose exports and file layer it shares, and
/// the client and session state.
#[derive(Debug)]
pub struct Nfs4Server {
    /// The exports, the file layer's settings, the write verifier.
    pub nfs: Arc<NfsServer>,
    state: Mutex<StateTable>,
    /// The byte-range locks (NLM's table, or one of its own without NLM).
    pub(crate) locks: lock_ops::LockSpace,
    /// Where the clients that may reclaim after a restart are kept; held while they
    /// are saved, so that the last save is of the latest set.
    records: Mutex<records::Records>,
    /// `so_major_id` and `eir_server_scope` (RFC 8881 §2.5, §18.35.3): the host name,
    /// stable across restarts, so that a client recognizes the server it reclaims
    /// from.
    owner: OpaqueLimit,
    /// When the server started: pseudo directories' times.
    started: NfsTime4,
    /// `owner` and `owner_group` strings ([`idmap`]).
    ids: idmap::IdMap,
    /// Operations run and failed, by operation (`--metrics`), in the call metrics
    /// of `nfs` ([`oncrpc::metrics::CallMetrics::operations`]).
    pub(crate) op_counts: Arc<oncrpc::metrics::VersionStats>,
}

/// Rows of the operation counts: every operation number of RFC 5662, RFC 7863 and
/// RFC 8276 (0..=75); others (ILLEGAL) count as `other`.
const OPERATION_ROWS: usize = 76;

/// An operation's name without its `OP_` prefix ("READ"), for the metrics.
fn operation_name(op: u32) -> Option<&'static str> {
    let name = nfs4::NfsOpnum4(op).name()?;
    Some(name.strip_prefix("OP_").unwrap_or(name))
}

impl Nfs4Server {
    /// An NFSv4.1 server over `nfs`'s exports, with leases of
    /// [`state::LEASE_TIME`], sharing `nlm`'s lock table if NLM is served.
    pub fn new(nfs: Arc<NfsServer>, nlm: Option<Arc<crate::nlm::Nlm>>) -> Nfs4Server {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut owner = std::fs::read("/proc/sys/kernel/hostname")
            .map(|mut h| {
                h.retain(|b| !b.is_ascii_whitespace());
                h
            })
            .unwrap_or_default();
        if owner.is_empty() {
            owner = b"nfsd".to_vec();
        }
        owner.truncate(nfs4::NFS4_OPAQUE_LIMIT as usize);
        let mut state = StateTable::new(since.as_secs() as u32, state::LEASE_TIME);
        // State never takes the room one largest call needs (as connections).
        let keep_free = u64::from(crate::nfs::MAX_IO) + 64 * 1024;
        state.set_budget(state::budget::StateBudget::new(
            nfs.memory.clone(),
            keep_free,
        ));
        let op_counts = nfs.calls.operations(
            nfs4::NFS4_PROGRAM,
            nfs4::NFS_V4,
            OPERATION_ROWS,
            operation_name,
        );
        Nfs4Server {
            nfs,
            op_counts,
            state: Mutex::new(state),
            locks: lock_ops::LockSpace::new(nlm),
            records: Mutex::new(records::Records::none()),
            owner: OpaqueLimit::from(&owner[..]),
            started: NfsTime4 {
                seconds: since.as_secs() as i64,
                nseconds: since.subsec_nanos(),
            },
            ids: idmap::IdMap::numeric(),
        }
    }

    /// Answers `owner` and `owner_group` as `name@domain` where the system's user
    /// and group database has a name ([`idmap`]); `None` (the default): numeric
    /// strings only.
    pub fn set_id_domain(&mut self, domain: Option<String>) {
        self.ids = idmap::IdMap::new(domain, Box::new(idmap::SystemDirectory));
    }

    /// How ids and owner strings map ([`idmap`]).
    pub fn ids(&self) -> &idmap::IdMap {
        &self.ids
    }

    /// [`Nfs4Server::new`], keeping the clients that may reclaim in `state_dir`
    /// ([`records`]); if the previous run left any, the grace period starts now
    /// ([`state::grace`]). Returns the server and the number of clients that may
    /// reclaim.
    pub fn with_state_dir(
        nfs: Arc<NfsServer>,
        nlm: Option<Arc<crate::nlm::Nlm>>,
        state_dir: &std::path::Path,
    ) -> std::io::Result<(Nfs4Server, usize)> {
        let server = Nfs4Server::new(nfs, nlm);
        let (records, previous) = records::Records::open(state_dir)?;
        let n = previous.len();
        server.state().start_grace(previous, Instant::now());
        *server.records.lock().unwrap_or_else(|p| p.into_inner()) = records;
        Ok((server, n))
    }

    /// Saves the client records if they changed (after a COMPOUND). A failure is
    /// logged: the clients are served on, but could not reclaim after a restart.
    pub(crate) fn save_records(&self) {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let Some(owners) = self.state().take_records_changed() else {
            return;
        };
        if let Err(e) = records.save(&owners) {
            tracing::warn!(error = %e, "cannot save the NFSv4.1 client records; their clients could not reclaim after a restart");
        }
    }

    /// Time left in the grace period.
    pub fn grace_left(&self) -> Option<std::time::Duration> {
        self.state().grace_left(Instant::now())
    }

    /// The client and session state, locked (never across file-system work).
    pub(crate) fn state(&self) -> MutexGuard<'_, StateTable> {
        // Every state change is complete before the lock is released, so a panic
        // elsewhere leaves no half-made change behind: a poisoned lock stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lease time in seconds (`lease_time`, RFC 8881 §5.8.1.11).
    pub fn lease_secs(&self) -> u32 {
        self.state().lease().as_secs() as u32
    }

    /// The server's part of every object's attributes ([`attrs::AttrContext`]).
    pub fn attr_context(&self) -> attrs::AttrContext<'_> {
        attrs::AttrContext {
            lease: self.lease_secs(),
            ids: &self.ids,
        }
    }

    /// Serves one COMPOUND from `caller` (as `principal`) at `now`: `args` holds
    /// `COMPOUND4args`; returns the encoded `COMPOUND4res` (module `compound`).
    pub fn compound(
        &self,
        caller: &Caller,
        principal: Principal,
        args: Decoder,
        now: Instant,
    ) -> XdrStream {
        compound::process(self, caller, principal, compound::decode(args), now)
    }

    /// [`Nfs4Server::compound`] of a COMPOUND decoded first ([`compound::decode`]),
    /// so that the transport's service can see where it should run.
    pub(crate) fn run_decoded(
        &self,
        caller: &Caller,
        principal: Principal,
        decoded: compound::Decoded,
        now: Instant,
    ) -> XdrStream {
        compound::process(self, caller, principal, decoded, now)
    }
}
