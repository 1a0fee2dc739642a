//! COMPOUND processing (RFC 8881 §16.2.3, §2.10.6): the minor version check, the
//! rules on the first operation, SEQUENCE and its reply cache, and running the
//! operations in order until one fails, with the current and saved filehandles.
//!
//! What each operation may do is data in [`super::ops::OPS`]; this module applies it:
//!
//! - `minorversion` other than 1: NFS4ERR_MINOR_VERS_MISMATCH, no results, tag
//!   echoed (§16.2.3; 0 is NFSv4.0, not served; 2 is NFSv4.2, not yet);
//! - a header that does not decode: NFS4ERR_BADXDR, no results (§15.1.1.1);
//! - the first operation is SEQUENCE, or an operation flagged
//!   [`super::ops::SOLO`] (EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION,
//!   BIND_CONN_TO_SESSION, DESTROY_CLIENTID), which must then be the only one
//!   (NFS4ERR_NOT_ONLY_OP, §18.35.3, §18.36.3, §18.37.3, §18.50.3); any other first
//!   operation is NFS4ERR_OP_NOT_IN_SESSION (§2.6.3.1.1.1, §15.1.10.5);
//! - SEQUENCE anywhere else is NFS4ERR_SEQUENCE_POS (§18.46.3);
//! - each operation runs if the one before succeeded; the reply holds the results up
//!   to and including the first failure, its status that of the last (§16.2.3);
//! - an operation that did not decode ends the COMPOUND with the status the decoder
//!   gives ([`nfs4::compound::Stopped`]);
//! - a retransmission on a slot whose reply is cached gets those bytes again, and
//!   nothing runs (§2.10.6.1.3); the reply of a new request is cached when the
//!   client asked (`sa_cachethis`) and it fits the session's
//!   `ca_maxresponsesize_cached`.
//!
//! Not yet: NFS4ERR_REP_TOO_BIG(_TO_CACHE) checks against the session's reply
//! limits (a reply too large to cache is sent but not cached, so its retry gets
//! NFS4ERR_RETRY_UNCACHED_REP).

use std::sync::Arc;
use std::time::Instant;

use nfs4::compound::{decode_compound_args, Compound4Res, NfsArgop4, NfsResop4};
use nfs4::{ClientId4, NfsStat4, SessionId4, Utf8Str};
use xdr::{Decoder, Encode, XdrStream};

use super::ops;
use super::pseudo::Fh;
use super::state::{Principal, Sequenced};
use super::Nfs4Server;
use crate::nfs::{Caller, Table};

/// The state of one COMPOUND as its operations run.
pub(crate) struct Compound<'a> {
    pub(crate) server: &'a Nfs4Server,
    /// The exports in force for this COMPOUND.
    pub(crate) table: Arc<Table>,
    pub(crate) caller: &'a Caller,
    pub(crate) principal: Principal,
    pub(crate) now: Instant,
    /// The current filehandle (§16.2.3.1).
    pub(crate) current: Option<Fh>,
    /// The saved filehandle (SAVEFH, RESTOREFH).
    pub(crate) saved: Option<Fh>,
    /// The session and client of the SEQUENCE that began the COMPOUND.
    pub(crate) session: Option<(SessionId4, ClientId4)>,
    /// The operation running is the last of the COMPOUND.
    pub(crate) last: bool,
    /// Memory charged for results (READDIR's listings), held by the reply's bytes.
    pub(crate) charges: Vec<rpcrdma::memory::Charge>,
}

/// The error result of `op` with `status`.
pub(crate) fn fail(op: &NfsArgop4, status: NfsStat4) -> NfsResop4 {
    NfsResop4::Unknown {
        opnum: op.opnum(),
        status,
    }
}

/// Serves one COMPOUND (module docs); `args` holds `COMPOUND4args`. Returns the
/// encoded `COMPOUND4res`.
pub(crate) fn process(
    server: &Nfs4Server,
    caller: &Caller,
    principal: Principal,
    mut args: Decoder,
    now: Instant,
) -> XdrStream {
    let request_len = args.remaining();
    let c = match decode_compound_args(&mut args) {
        Ok(c) => c,
        Err(_) => {
            return Compound4Res {
                status: NfsStat4::NFS4ERR_BADXDR,
                tag: Utf8Str::default(),
                resarray: Vec::new(),
            }
            .to_xdr()
        }
    };
    if c.minorversion != nfs4::NFS4_MINOR_VERSION {
        return Compound4Res {
            status: NfsStat4::NFS4ERR_MINOR_VERS_MISMATCH,
            tag: c.tag,
            resarray: Vec::new(),
        }
        .to_xdr();
    }
    let mut cx = Compound {
        server,
        table: server.nfs.table(),
        caller,
        principal,
        now,
        current: None,
        saved: None,
        session: None,
        last: false,
        charges: Vec::new(),
    };
    // The slot to complete: session, slot, sa_cachethis.
    let mut slot = None;
    let mut results = Vec::with_capacity(c.ops.len() + 1);
    for (i, op) in c.ops.iter().enumerate() {
        let desc = ops::describe(op.opnum());
        cx.last = i as u32 + 1 == c.opcount;
        let res = match (i, op, desc) {
            (0, NfsArgop4::Sequence(a), _) => {
                let r = server.state().sequence(a, c.opcount, request_len, now);
                match r {
                    Err(s) => fail(op, s),
                    Ok(Sequenced::Replay(bytes)) => return XdrStream::inline_only(bytes),
                    Ok(Sequenced::New(ok, client)) => {
                        slot = Some((a.sa_sessionid, a.sa_slotid, a.sa_cachethis));
                        cx.session = Some((a.sa_sessionid, client));
                        NfsResop4::Sequence(nfs4::Res4::Ok(ok))
                    }
                }
            }
            (_, NfsArgop4::Sequence(_), _) => fail(op, NfsStat4::NFS4ERR_SEQUENCE_POS),
            (0, _, Some(d)) if d.flags & ops::SOLO != 0 => {
                if c.opcount > 1 {
                    fail(op, NfsStat4::NFS4ERR_NOT_ONLY_OP)
                } else {
                    ops::run(d, &mut cx, op)
                }
            }
            (0, _, _) => fail(op, NfsStat4::NFS4ERR_OP_NOT_IN_SESSION),
            (_, _, Some(d)) => ops::run(d, &mut cx, op),
            (_, _, None) => fail(op, NfsStat4::NFS4ERR_NOTSUPP),
        };
        let failed = !res.status().is_ok();
        results.push(res);
        if failed {
            break;
        }
    }
    if results.len() == c.ops.len() {
        if let Some(stopped) = c.stopped {
            results.push(stopped.result());
        }
    }
    let reply = Compound4Res::new(c.tag, results);
    let mut reply = {
        let encoded = reply.to_xdr();
        drop(reply);
        encoded
    };
    for charge in cx.charges.drain(..) {
        crate::nfs::hold(&mut reply, charge);
    }
    if let Some((sid, slotid, cachethis)) = slot {
        // A reply with data left out of line (none yet: READ is not served) is not
        // cached; its retry gets NFS4ERR_RETRY_UNCACHED_REP.
        let keep = (cachethis && reply.ddp.is_empty()).then(|| reply.inline.clone());
        server.state().complete(&sid, slotid, keep, now);
    }
    reply
}

impl Compound<'_> {
    /// The current filehandle, or NFS4ERR_NOFILEHANDLE (§15.1.2.8).
    pub(crate) fn current(&self) -> Result<&Fh, NfsStat4> {
        self.current.as_ref().ok_or(NfsStat4::NFS4ERR_NOFILEHANDLE)
    }
}
