//! Client records (RFC 8881 §2.4): who a client is (its `client_owner4` and the
//! principal that sent EXCHANGE_ID), whether CREATE_SESSION confirmed it, its
//! CREATE_SESSION sequence and cached result (§18.36.4), and its lease (§8.3).

use std::time::{Duration, Instant};

use nfs4::session::CreateSession4Res;
use nfs4::{ClientId4, OpaqueLimit, SequenceId4, SessionId4, Verifier4};

/// Who sent a request, as far as client records compare them (RFC 8881 §18.35.4
/// speaks of "the principal"): the RPC flavor and, for AUTH_SYS, uid and gid (knfsd
/// compares the same for AUTH_SYS, `same_creds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Principal {
    /// RPC authentication flavor.
    pub flavor: u32,
    /// AUTH_SYS uid (0 for other flavors).
    pub uid: u32,
    /// AUTH_SYS gid (0 for other flavors).
    pub gid: u32,
}

/// One client record.
#[derive(Debug)]
pub struct Client {
    /// Its id (`eir_clientid`).
    pub id: ClientId4,
    /// `co_ownerid`: the client's stable name.
    pub owner: OpaqueLimit,
    /// `co_verifier`: changes when the client restarts.
    pub verifier: Verifier4,
    /// The principal that created the record.
    pub principal: Principal,
    /// CREATE_SESSION confirmed it (§18.36.4).
    pub confirmed: bool,
    /// Unconfirmed: the `csa_sequence` the first CREATE_SESSION must carry
    /// (`eir_sequenceid`). Confirmed: that of the last CREATE_SESSION executed.
    pub cs_sequence: SequenceId4,
    /// The result of the last CREATE_SESSION executed, for its retransmission
    /// (§18.36.4: the client's CREATE_SESSION "slot" and its reply cache).
    pub cs_cached: Option<CreateSession4Res>,
    /// Its sessions.
    pub sessions: Vec<SessionId4>,
    /// RECLAIM_COMPLETE (rca_one_fs FALSE) done (§18.51.3).
    pub reclaim_complete: bool,
    /// When the lease was last renewed (§8.3: by any SEQUENCE of the client).
    pub renewed: Instant,
    /// What the record holds of the memory budget ([`super::budget`]).
    pub charge: Option<rpcrdma::memory::Charge>,
}

impl Client {
    /// Whether the lease of `lease` renewed at [`Client::renewed`] has run out at
    /// `now` (§8.3).
    pub fn expired(&self, lease: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.renewed) > lease
    }
}
