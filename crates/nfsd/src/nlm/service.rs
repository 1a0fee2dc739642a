//! NLM version 4 (program 100021) as an RPC service: decodes each procedure's
//! arguments (RFC 1813 appendix II), checks the file handle against the exports, and
//! hands the rule to [`super::Nlm`]. Arguments that do not decode are GARBAGE_ARGS.

use std::net::IpAddr;
use std::sync::Arc;

use nfs3::{NfsFh3, NfsStat3};
use oncrpc::{Request, Service, ServiceError, ServiceResult};
use xdr::{Bytes, Decode, Decoder, Encode, XdrStream};

use super::xdr::*;
use super::{holder, Nlm};
use crate::nfs::{Caller, NfsServer};

/// The NLM v4 service of a server's exports.
#[derive(Debug, Clone)]
pub struct NlmService {
    nlm: Arc<Nlm>,
    server: Arc<NfsServer>,
}

fn args<T: Decode>(mut a: Decoder) -> Result<T, ServiceError> {
    let v = T::decode(&mut a)?;
    a.finish()?;
    Ok(v)
}

impl NlmService {
    /// NLM for the exports of `server`.
    pub fn new(nlm: Arc<Nlm>, server: Arc<NfsServer>) -> Self {
        NlmService { nlm, server }
    }

    /// Runs `f` on the blocking pool once the handle is known to be one of ours that
    /// the caller may use (RFC 1813's rules via [`crate::nfs::Table::resolve`]): a
    /// stale or foreign handle is NLM4_STALE_FH, a caller the export refuses
    /// NLM4_FAILED, and nothing is recorded for either.
    async fn with_file<R: Send + 'static>(
        &self,
        fh: &Bytes,
        caller: Caller,
        fail: impl FnOnce(Stat) -> R + Send + 'static,
        f: impl FnOnce(&Arc<Nlm>) -> R + Send + 'static,
    ) -> Result<R, ServiceError> {
        let server = self.server.clone();
        let nlm = self.nlm.clone();
        let fh = NfsFh3(fh.clone());
        tokio::task::spawn_blocking(move || match server.table().resolve(&fh, &caller) {
            Ok(_) => f(&nlm),
            Err(NfsStat3::NFS3ERR_ACCES) => fail(Stat::Failed),
            Err(_) => fail(Stat::StaleFh),
        })
        .await
        .map_err(|_| ServiceError::SystemErr)
    }

    async fn test(&self, a: TestArgs, caller: Caller) -> Result<TestRes, ServiceError> {
        let cookie = a.cookie.clone();
        let c2 = cookie.clone();
        let fh = a.lock.fh.clone();
        self.with_file(
            &fh,
            caller,
            move |stat| TestRes {
                cookie: c2,
                stat,
                holder: None,
            },
            move |nlm| {
                let (stat, held) = nlm.test(&a);
                TestRes {
                    cookie,
                    stat,
                    holder: held.as_ref().map(holder),
                }
            },
        )
        .await
    }

    async fn lock(
        &self,
        a: LockArgs,
        caller: Caller,
        peer: Option<IpAddr>,
        monitor: bool,
    ) -> Result<Res, ServiceError> {
        let cookie = a.cookie.clone();
        let fh = a.lock.fh.clone();
        let stat = self
            .with_file(&fh, caller, |s| s, move |nlm| nlm.lock(&a, peer, monitor))
            .await?;
        Ok(Res { cookie, stat })
    }

    async fn share(
        &self,
        a: ShareArgs,
        caller: Caller,
        on: bool,
    ) -> Result<ShareRes, ServiceError> {
        let cookie = a.cookie.clone();
        let fh = a.share.fh.clone();
        let stat = self
            .with_file(
                &fh,
                caller,
                |s| s,
                move |nlm| {
                    if on {
                        nlm.share(&a)
                    } else {
                        nlm.unshare(&a)
                    }
                },
            )
            .await?;
        Ok(ShareRes {
            cookie,
            stat,
            sequence: 0,
        })
    }

    /// A synchronous procedure's results, or for its `_MSG` form an empty reply and
    /// the results sent as a call of the `_RES` procedure.
    fn answer(&self, msg: bool, peer: Option<IpAddr>, res_proc: u32, res: XdrStream) -> XdrStream {
        if msg {
            self.nlm.send_res(peer, res_proc, res);
            XdrStream::default()
        } else {
            res
        }
    }
}

impl Service for NlmService {
    fn procedure_name(&self, _vers: u32, proc_: u32) -> Option<&'static str> {
        proc4::name(proc_)
    }

    async fn call(&self, req: Request) -> ServiceResult {
        use proc4::*;
        let peer = req.peer.map(|p| p.addr.ip());
        let caller = Caller::new(req.peer, req.cred);
        let a = req.args;
        let p = req.proc_;
        let msg = (TEST_MSG..=GRANTED_MSG).contains(&p);
        match p {
            NULL => {
                a.finish()?;
                Ok(XdrStream::default())
            }
            TEST | TEST_MSG => {
                let res = self.test(args(a)?, caller).await?;
                Ok(self.answer(msg, peer, TEST_RES, res.to_xdr()))
            }
            LOCK | LOCK_MSG | NM_LOCK => {
                // NM_LOCK: "non-monitored": the client runs no status monitor, so it
                // is not recorded for SM_NOTIFY.
                let res = self.lock(args(a)?, caller, peer, p != NM_LOCK).await?;
                Ok(self.answer(msg, peer, LOCK_RES, res.to_xdr()))
            }
            CANCEL | CANCEL_MSG => {
                let c: CancArgs = args(a)?;
                let res = Res {
                    stat: self.nlm.cancel(&c),
                    cookie: c.cookie,
                };
                Ok(self.answer(msg, peer, CANCEL_RES, res.to_xdr()))
            }
            UNLOCK | UNLOCK_MSG => {
                let u: UnlockArgs = args(a)?;
                let nlm = self.nlm.clone();
                let lock = u.clone();
                let stat = tokio::task::spawn_blocking(move || nlm.unlock(&lock))
                    .await
                    .map_err(|_| ServiceError::SystemErr)?;
                let res = Res {
                    cookie: u.cookie,
                    stat,
                };
                Ok(self.answer(msg, peer, UNLOCK_RES, res.to_xdr()))
            }
            // GRANTED is the server's callback to a client; we block no one's locks.
            GRANTED | GRANTED_MSG => {
                let g: TestArgs = args(a)?;
                let res = Res {
                    cookie: g.cookie,
                    stat: Stat::Denied,
                };
                Ok(self.answer(msg, peer, GRANTED_RES, res.to_xdr()))
            }
            // Answers to `_MSG` calls we never make (our GRANTED is synchronous).
            TEST_RES..=GRANTED_RES => Ok(XdrStream::default()),
            SHARE | UNSHARE => {
                let res = self.share(args(a)?, caller, p == SHARE).await?;
                Ok(res.to_xdr())
            }
            // FREE_ALL(nlm4_notify): the client host rebooted without a status
            // monitor; everything of `name` goes.
            FREE_ALL => {
                let n: Notify = args(a)?;
                let nlm = self.nlm.clone();
                tokio::task::spawn_blocking(move || nlm.host_rebooted(&n.name))
                    .await
                    .map_err(|_| ServiceError::SystemErr)?;
                Ok(XdrStream::default())
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }

    /// Those that change lock state ([`crate::drc::nlm4_cached`]): a retransmitted
    /// UNLOCK must not release a lock taken again since.
    fn caches_reply(&self, _vers: u32, proc_: u32) -> bool {
        crate::drc::nlm4_cached(proc_)
    }
}
