//! Locking: the Network Lock Manager (NLM version 4, program 100021) and the status
//! monitor (NSM, program 100024) of the server, for NFSv3 clients that lock files.
//!
//! ```text
//!   client's lockd ── LOCK/UNLOCK/TEST/CANCEL/SHARE ──> service::NlmService ─┐
//!   client's statd ── SM_NOTIFY (it rebooted) ───────> nsm::NsmService ──────┤
//!                                                                            v
//!                                    Nlm: locks::LockTable + ShareTable, grace period
//!                                                                            │
//!   client's lockd <── GRANTED (a blocked lock is ours) ── callback ─────────┤
//!   client's statd <── SM_NOTIFY (we restarted: reclaim) ── callback ────────┘
//! ```
//!
//! Specs: XNFS (Open Group C702) chapters 10-11 and RFC 1813 appendix II (NLM v4).
//! Behaviour of the Linux client, which this serves: it sends LOCK, UNLOCK, TEST and
//! CANCEL synchronously over TCP (for `proto=tcp` and `proto=rdma` mounts alike,
//! fs/nfs/client.c `nfs_start_lockd`), polls a blocked LOCK every 30 s, accepts
//! GRANTED whose source address is the server's and whose range, `svid` and handle
//! match its blocked request (fs/lockd/clntlock.c `nlmclnt_grant`), and reclaims its
//! locks (LOCK with `reclaim`) when its statd gets our SM_NOTIFY. It sends no SHARE,
//! UNSHARE or FREE_ALL; those are served for other clients.
//!
//! Locks live in this process's memory only: they are not applied to the exported
//! files (processes on the server do not see them) and are keyed by file handle (our
//! server gives one handle per file). After a restart, clients reclaim them.

pub mod callback;
pub mod locks;
pub mod nsm;
pub mod service;
pub mod xdr;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::xdr::{Bytes, Decode, Encode};

use self::locks::{Limits, LockError, LockTable, Owner, Range, Share, ShareTable, Waiter};
use self::nsm::NsmState;
use self::xdr::*;

pub use self::nsm::NsmService;
pub use self::service::NlmService;

/// Default grace period after a restart, as Linux lockd (`nlm_grace_period` 0 means
/// the NFSv4 lease time, 90 s).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(90);
/// Default NLM and NSM port (TCP, and UDP for NSM): IANA's "lockd" port.
pub const DEFAULT_PORT: u16 = 4045;

/// Lock manager settings.
#[derive(Debug, Clone)]
pub struct NlmConfig {
    /// Port of NLM and NSM on TCP, and of NSM on UDP (0: any free port; clients find
    /// it through the portmapper).
    pub port: u16,
    /// Where the NSM state lives (`<state_dir>/nsm`).
    pub state_dir: PathBuf,
    /// Grace period after a restart during which only reclaims are granted (when
    /// the previous run had clients holding locks).
    pub grace: Duration,
    /// Port of the clients' portmappers, asked for their NLM and NSM ports (111;
    /// another only when clients sit behind NAT port forwarding, as in the lab).
    pub client_portmap_port: u16,
    /// Bounds on locks and blocked requests.
    pub limits: Limits,
    /// Bound on share reservations in all.
    pub max_shares: usize,
    /// Our name in SM_NOTIFY (`mon_name`): the host name.
    pub name: String,
}

impl NlmConfig {
    /// Defaults, keeping the state in `state_dir`.
    pub fn new(state_dir: PathBuf) -> NlmConfig {
        NlmConfig {
            port: DEFAULT_PORT,
            state_dir,
            grace: DEFAULT_GRACE,
            client_portmap_port: 111,
            limits: Limits::default(),
            max_shares: 65_536,
            name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "nfsd".to_string()),
        }
    }
}

/// What a blocked request keeps for its GRANTED callback.
#[derive(Debug, Clone)]
pub struct Blocked {
    /// The LOCK as received (its cookie and lock go back in GRANTED).
    pub args: LockArgs,
    /// Where the client called from.
    pub peer: Option<IpAddr>,
}

/// The lock manager's state.
#[derive(Debug)]
pub struct Nlm {
    config: NlmConfig,
    locks: Mutex<LockTable<Blocked>>,
    shares: Mutex<ShareTable>,
    /// End of the grace period, if there is one (the previous run had clients).
    grace_until: Option<Instant>,
    /// NSM state and clients.
    pub nsm: NsmState,
    /// Whether NFSv4.1's grace period runs ([`Nlm::share_grace`]).
    v4_grace: std::sync::OnceLock<GraceHook>,
}

/// Another protocol's "in its grace period?" (NFSv4.1's, [`crate::v4`]).
pub struct GraceHook(Box<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for GraceHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GraceHook")
    }
}

/// The reply status of a lock request and, for TEST, the lock in the way.
pub type Outcome = (Stat, Option<locks::Held>);

impl Nlm {
    /// Opens the NSM state (raising the state number) and, if the previous run had
    /// clients, starts the grace period now.
    pub fn new(config: NlmConfig) -> std::io::Result<Nlm> {
        let nsm = NsmState::open(&config.state_dir)?;
        let grace_until = (!nsm.previous().is_empty()).then(|| Instant::now() + config.grace);
        Ok(Nlm {
            locks: Mutex::new(LockTable::new(config.limits)),
            shares: Mutex::new(ShareTable::default()),
            grace_until,
            nsm,
            config,
            v4_grace: std::sync::OnceLock::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &NlmConfig {
        &self.config
    }

    /// Time left in the grace period.
    pub fn grace_left(&self) -> Option<Duration> {
        let left = self.grace_until?.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// Whether a lock that is not a reclaim must wait: NLM's grace period runs, or
    /// NFSv4.1's (one lock table, so one rule: a lock an NFSv4.1 client is about to
    /// reclaim must not be taken by an NFSv3 client meanwhile, as knfsd's lockd and
    /// nfsd share one grace period).
    pub(crate) fn in_grace(&self) -> bool {
        self.grace_left().is_some() || self.v4_grace.get().is_some_and(|h| (h.0)())
    }

    /// Makes NLM wait for NFSv4.1's grace period too (`in_grace` is NFSv4.1's
    /// answer). Set once; later calls are ignored.
    pub(crate) fn share_grace(&self, in_grace: Box<dyn Fn() -> bool + Send + Sync>) {
        let _ = self.v4_grace.set(GraceHook(in_grace));
    }

    /// The lock table, which NFSv4.1's byte-range locks share ([`crate::v4`]).
    pub(crate) fn locks(&self) -> std::sync::MutexGuard<'_, LockTable<Blocked>> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn shares(&self) -> std::sync::MutexGuard<'_, ShareTable> {
        self.shares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The locks held on a file (for tests and diagnostics).
    pub fn held(&self, fh: &[u8]) -> Vec<locks::Held> {
        self.locks().held(fh)
    }

    /// TEST (XNFS NLM_TEST): the conflicting lock, if any. In the grace period
    /// NLM4_DENIED_GRACE_PERIOD, as Linux lockd (a lock about to be reclaimed may
    /// not be in the table yet).
    pub fn test(&self, a: &TestArgs) -> Outcome {
        if self.in_grace() {
            return (Stat::DeniedGracePeriod, None);
        }
        let Some(range) = Range::from_nlm(a.lock.offset, a.lock.len) else {
            return (Stat::Fbig, None);
        };
        match self
            .locks()
            .test(&a.lock.fh, &owner(&a.lock), range, a.exclusive)
        {
            Some(h) => (Stat::Denied, Some(h)),
            None => (Stat::Granted, None),
        }
    }

    /// LOCK / NM_LOCK (XNFS NLM_LOCK): grants, blocks (`block`: NLM4_BLOCKED and a
    /// GRANTED callback later) or denies. In the grace period only reclaims are
    /// granted (NLM4_DENIED_GRACE_PERIOD otherwise); after it, a reclaim is an
    /// ordinary LOCK. With `monitor`, the client is recorded for SM_NOTIFY
    /// ([`NsmState::monitor`]) before the lock is granted; if that record cannot
    /// be written, NLM4_DENIED_NOLOCKS (as Linux lockd when statd fails).
    pub fn lock(self: &Arc<Self>, a: &LockArgs, peer: Option<IpAddr>, monitor: bool) -> Stat {
        if self.in_grace() && !a.reclaim {
            return Stat::DeniedGracePeriod;
        }
        let Some(range) = Range::from_nlm(a.lock.offset, a.lock.len) else {
            return Stat::Fbig;
        };
        if monitor {
            if let Some(ip) = peer {
                if let Err(e) = self.nsm.monitor(&a.lock.caller_name, ip) {
                    tracing::warn!(error = %e, "cannot record an NSM client");
                    return Stat::DeniedNolocks;
                }
            }
        }
        let o = owner(&a.lock);
        let mut t = self.locks();
        match t.lock(&a.lock.fh, &o, range, a.exclusive) {
            Ok(()) => Stat::Granted,
            Err(LockError::NoLocks) => Stat::DeniedNolocks,
            Err(LockError::Conflict(_)) if !a.block => Stat::Denied,
            Err(LockError::Conflict(_)) => {
                let w = Waiter {
                    owner: o,
                    range,
                    exclusive: a.exclusive,
                    data: Blocked {
                        args: a.clone(),
                        peer,
                    },
                };
                match t.block(&a.lock.fh, w) {
                    Ok(()) => Stat::Blocked,
                    Err(_) => Stat::DeniedNolocks,
                }
            }
        }
    }

    /// CANCEL (XNFS NLM_CANCEL): removes a blocked request. NLM4_GRANTED whether or
    /// not one was queued, as Linux lockd answers (if the lock was granted meanwhile,
    /// the client unlocks it).
    pub fn cancel(&self, a: &CancArgs) -> Stat {
        if let Some(range) = Range::from_nlm(a.lock.offset, a.lock.len) {
            self.locks()
                .cancel(&a.lock.fh, &owner(&a.lock), range, a.exclusive);
        }
        Stat::Granted
    }

    /// UNLOCK (XNFS NLM_UNLOCK): always NLM4_GRANTED; blocked requests this frees are
    /// granted and called back.
    pub fn unlock(self: &Arc<Self>, a: &UnlockArgs) -> Stat {
        let Some(range) = Range::from_nlm(a.lock.offset, a.lock.len) else {
            return Stat::Fbig;
        };
        let granted = self.locks().unlock(&a.lock.fh, &owner(&a.lock), range);
        self.send_granted(granted);
        Stat::Granted
    }

    /// SHARE (XNFS NLM_SHARE).
    pub fn share(&self, a: &ShareArgs) -> Stat {
        if self.in_grace() && !a.reclaim {
            return Stat::DeniedGracePeriod;
        }
        let s = Share {
            host: a.share.caller_name.clone(),
            oh: a.share.oh.clone(),
            mode: a.share.mode,
            access: a.share.access,
        };
        match self.shares().share(&a.share.fh, s, self.config.max_shares) {
            Ok(()) => Stat::Granted,
            Err(Some(_)) => Stat::Denied,
            Err(None) => Stat::DeniedNolocks,
        }
    }

    /// UNSHARE (XNFS NLM_UNSHARE).
    pub fn unshare(&self, a: &ShareArgs) -> Stat {
        self.shares()
            .unshare(&a.share.fh, &a.share.caller_name, &a.share.oh);
        Stat::Granted
    }

    /// A client host lost its locks (it rebooted: its SM_NOTIFY names it by
    /// `caller_name` or by address; or FREE_ALL): drop its locks, shares and blocked
    /// requests, grant what that frees, and forget it in the NSM client list.
    pub fn host_rebooted(self: &Arc<Self>, name: &[u8]) {
        let mut hosts = self.nsm.matching(name);
        if !hosts.iter().any(|h| h.as_ref() == name) {
            hosts.push(Bytes::copy_from_slice(name));
        }
        for host in hosts {
            let granted = self.locks().drop_host(&host);
            self.shares().drop_host(&host);
            self.nsm.unmonitor(&host);
            self.send_granted(granted);
        }
    }

    /// Sends GRANTED for each newly granted blocked request, in the background.
    pub(crate) fn send_granted(self: &Arc<Self>, granted: Vec<(Bytes, Waiter<Blocked>)>) {
        for (_, w) in granted {
            let nlm = self.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move { nlm.granted_callback(w).await });
                }
                Err(_) => tracing::warn!("no runtime for a GRANTED callback"),
            }
        }
    }

    /// NLM4 GRANTED (procedure 5, synchronous) to the client of a granted blocked
    /// request, with the LOCK's cookie and lock (XNFS NLM_GRANTED). Answered
    /// NLM4_GRANTED: done. Answered anything else (the client no longer waits: it
    /// cancelled), the lock is released. No answer: tried again, [`GRANT_TRIES`]
    /// times in all; then the lock stays granted, since the client may have taken
    /// it, and a live client's 30 s poll (its LOCK again) is answered NLM4_GRANTED.
    async fn granted_callback(self: Arc<Self>, w: Waiter<Blocked>) {
        let Some(ip) = w.data.peer else {
            return;
        };
        let args = TestArgs {
            cookie: w.data.args.cookie.clone(),
            exclusive: w.exclusive,
            lock: w.data.args.lock.clone(),
        };
        let mut delay = Duration::from_secs(1);
        for attempt in 1..=GRANT_TRIES {
            let call = callback::call_client(
                ip,
                self.config.client_portmap_port,
                NLM_PROGRAM,
                NLM_V4,
                proc4::GRANTED,
                args.to_xdr(),
            );
            match call.await.map(|mut d| Res::decode(&mut d)) {
                Ok(Ok(res)) if res.stat == Stat::Granted => {
                    tracing::debug!(%ip, svid = args.lock.svid, "GRANTED accepted");
                    return;
                }
                Ok(Ok(res)) if res.stat == Stat::DeniedGracePeriod => {}
                Ok(res) => {
                    tracing::info!(%ip, svid = args.lock.svid, ?res,
                        "GRANTED refused: the client no longer waits; releasing the lock");
                    if let Some(range) = Range::from_nlm(args.lock.offset, args.lock.len) {
                        let granted = self.locks().unlock(&args.lock.fh, &w.owner, range);
                        self.send_granted(granted);
                    }
                    return;
                }
                Err(e) => {
                    tracing::info!(%ip, attempt, error = %e, "GRANTED callback failed");
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(8));
        }
        tracing::warn!(%ip, svid = args.lock.svid,
            "GRANTED callback never answered; the lock stays granted (the client's poll finds it)");
    }

    /// Sends the `_RES` answer of a `_MSG` call (XNFS: the asynchronous procedures
    /// answer with a call of procedure `_MSG + 5` to the client). One try.
    fn send_res(&self, peer: Option<IpAddr>, proc_: u32, res: ::xdr::XdrStream) {
        let (Some(ip), Ok(rt)) = (peer, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let port = self.config.client_portmap_port;
        rt.spawn(async move {
            if let Err(e) = callback::call_client(ip, port, NLM_PROGRAM, NLM_V4, proc_, res).await {
                tracing::info!(%ip, proc_, error = %e, "NLM _RES callback failed");
            }
        });
    }

    /// After a restart: SM_NOTIFY(`mon_name` = our name, `state`) to the status
    /// monitor of every client of the previous run, so that each reclaims its locks
    /// in the grace period (XNFS NSM: SM_NOTIFY). Tried every few seconds until
    /// answered or the grace period (at least a minute) is over.
    pub fn notify_clients(self: &Arc<Self>) {
        for (host, ip) in self.nsm.previous().to_vec() {
            let nlm = self.clone();
            tokio::spawn(async move {
                let deadline = Instant::now() + nlm.config.grace.max(Duration::from_secs(60));
                let notice = StatChge {
                    mon_name: Bytes::from(nlm.config.name.clone()),
                    state: nlm.nsm.state,
                };
                loop {
                    let call = callback::call_client(
                        ip,
                        nlm.config.client_portmap_port,
                        NSM_PROGRAM,
                        NSM_V1,
                        sm_proc::NOTIFY,
                        notice.to_xdr(),
                    );
                    match call.await {
                        Ok(_) => {
                            tracing::info!(host = %String::from_utf8_lossy(&host), %ip,
                                state = notice.state, "SM_NOTIFY sent");
                            return;
                        }
                        Err(e) if Instant::now() < deadline => {
                            tracing::info!(host = %String::from_utf8_lossy(&host), error = %e,
                                "SM_NOTIFY failed; trying again");
                            tokio::time::sleep(Duration::from_secs(3)).await;
                        }
                        Err(e) => {
                            tracing::warn!(host = %String::from_utf8_lossy(&host), error = %e,
                                "SM_NOTIFY never delivered");
                            return;
                        }
                    }
                }
            });
        }
    }
}

/// GRANTED callbacks tried per granted blocked request.
pub const GRANT_TRIES: u32 = 5;

fn owner(l: &Nlm4Lock) -> Owner {
    Owner {
        host: l.caller_name.clone(),
        svid: l.svid,
        oh: l.oh.clone(),
    }
}

/// The holder of a conflicting lock as TEST reports it.
fn holder(h: &locks::Held) -> Holder {
    let (offset, len) = h.range.to_nlm();
    Holder {
        exclusive: h.exclusive,
        svid: h.owner.svid,
        oh: h.owner.oh.clone(),
        offset,
        len,
    }
}
