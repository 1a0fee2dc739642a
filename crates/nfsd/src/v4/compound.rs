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
//!   `ca_maxresponsesize_cached`;
//! - the slot a SEQUENCE began ends however its COMPOUND ends ([`SlotInUse`]): one
//!   that panicked (answered SYSTEM_ERR by the service) ends it uncached, so a retry
//!   gets NFS4ERR_RETRY_UNCACHED_REP instead of NFS4ERR_DELAY for ever (§2.10.6.2).
//!
//! - each operation after SEQUENCE must fit the session's reply limits, checked
//!   before it runs ([`super::reply_size`]: NFS4ERR_REP_TOO_BIG, or
//!   NFS4ERR_REP_TOO_BIG_TO_CACHE for a reply to cache; READ and READDIR are
//!   shortened to fit instead).
//!
//! Each operation that ran, and the one that did not decode, is counted for the
//! metrics (`Nfs4Server::op_counts`), failed or not; a replay runs nothing and
//! counts nothing.

use std::sync::Arc;
use std::time::Instant;

use nfs4::compound::{decode_compound_args, Compound4Res, CompoundArgs, NfsArgop4, NfsResop4};
use nfs4::{ClientId4, NfsStat4, SessionId4, StateId4, Utf8Str};
use xdr::{Decoder, Encode, XdrStream};

use super::pseudo::Fh;
use super::state::{Principal, Sequenced};
use super::Nfs4Server;
use super::{ops, reply_size};
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
    /// The current stateid (§16.2.3.1.2): set by OPEN, OPEN_DOWNGRADE and CLOSE,
    /// cleared by the operations flagged [`ops::CLEARS_STATEID`], saved and
    /// restored with the filehandle; what the special "current" stateid stands for.
    pub(crate) current_stateid: Option<StateId4>,
    /// The stateid SAVEFH saved.
    pub(crate) saved_stateid: Option<StateId4>,
    /// The session and client of the SEQUENCE that began the COMPOUND.
    pub(crate) session: Option<(SessionId4, ClientId4)>,
    /// The operation running is the last of the COMPOUND.
    pub(crate) last: bool,
    /// While an OPEN runs, the ACCESS bits the next operation asks (after GETFHs,
    /// which change nothing), when it is ACCESS: what OPEN checks with its own right
    /// (the Linux client's OPEN is followed by ACCESS of the same file, by name with a
    /// GETFH between), so that ACCESS finds them known ([`crate::seen`]).
    pub(crate) next_access: Option<u32>,
    /// Memory charged for results (READDIR's listings), held by the reply's bytes.
    pub(crate) charges: Vec<rpcrdma::memory::Charge>,
    /// READ data left in files over TCP, in the order the READs ran
    /// ([`super::read_file`]).
    pub(crate) file_reads: Vec<xdr::FileRange>,
}

/// The error result of `op` with `status`.
pub(crate) fn fail(op: &NfsArgop4, status: NfsStat4) -> NfsResop4 {
    NfsResop4::Unknown {
        opnum: op.opnum(),
        status,
    }
}

/// The ACCESS bits asked by the first of `rest` past GETFHs, when it is ACCESS
/// ([`Compound::next_access`]).
fn next_access(rest: &[NfsArgop4]) -> Option<u32> {
    match rest.iter().find(|op| !matches!(op, NfsArgop4::GetFh)) {
        Some(NfsArgop4::Access(a)) => Some(a.access),
        _ => None,
    }
}

/// A COMPOUND decoded, before it runs: its operations, or the reply already decided
/// without running any (a header that does not decode, another minor version).
pub(crate) struct Decoded(Result<(CompoundArgs, usize), XdrStream>);

/// Decodes `args` (`COMPOUND4args`) and checks its minor version (module docs).
pub(crate) fn decode(mut args: Decoder) -> Decoded {
    let request_len = args.remaining();
    let c = match decode_compound_args(&mut args) {
        Ok(c) => c,
        Err(_) => {
            return Decoded(Err(Compound4Res {
                status: NfsStat4::NFS4ERR_BADXDR,
                tag: Utf8Str::default(),
                resarray: Vec::new(),
            }
            .to_xdr()))
        }
    };
    if c.minorversion != nfs4::NFS4_MINOR_VERSION {
        return Decoded(Err(Compound4Res {
            status: NfsStat4::NFS4ERR_MINOR_VERS_MISMATCH,
            tag: c.tag,
            resarray: Vec::new(),
        }
        .to_xdr()));
    }
    Decoded(Ok((c, request_len)))
}

impl Decoded {
    /// Whether the COMPOUND, arrived `over` a transport (`None`: in process), is
    /// small metadata work only, to run on the thread that read it: every operation
    /// flagged [`ops::INLINE`], or READ over TCP (its data left in the file for the
    /// connection's writer, [`super::read_file`]); a reply decided without running
    /// anything too.
    pub(crate) fn runs_inline(&self, over: Option<oncrpc::Protocol>) -> bool {
        let Ok((c, _)) = &self.0 else {
            return true;
        };
        c.ops.iter().all(|op| {
            let opnum = op.opnum();
            ops::describe(opnum).is_some_and(|d| d.flags & ops::INLINE != 0)
                || (opnum == nfs4::NfsOpnum4::OP_READ && over == Some(oncrpc::Protocol::Tcp))
        })
    }
}

/// `COMPOUND4res` encoded as its results come (RFC 8881 §16.2.3: `status`, `tag`,
/// `resarray<>`): each result goes into the reply once, and the reply's size so far
/// is its length, where the session's reply limits need it (`reply_size`). The
/// status and the count, known at the end, are written into the room kept for
/// them. (Each result encoded a second time only to be measured, and `fattr4`'s
/// buffer grown from nothing, cost small COMPOUNDs 17-31% of their instructions:
/// docs/bench/README.md, "Per-call instructions, NFSv4.1".)
struct Results {
    enc: xdr::Encoder,
    status_at: xdr::Slot,
    count_at: xdr::Slot,
    /// Bytes of the reply before its results, as `reply_size` counts them (the RPC
    /// header included), less what `enc` holds of them.
    head: usize,
    /// Results so far.
    count: u32,
    /// The last result's status (§16.2.3: the COMPOUND's), `NFS4_OK` before any.
    status: NfsStat4,
}

impl Results {
    fn new(tag: &Utf8Str) -> Results {
        let mut enc = xdr::Encoder::with_capacity(xdr::TO_XDR_CAPACITY);
        let status_at = enc.reserve_u32();
        tag.encode(&mut enc);
        let count_at = enc.reserve_u32();
        Results {
            head: (reply_size::HEAD + tag.0.len()).saturating_sub(enc.xdr_len()),
            enc,
            status_at,
            count_at,
            count: 0,
            status: NfsStat4::NFS4_OK,
        }
    }

    fn push(&mut self, res: &NfsResop4) {
        res.encode(&mut self.enc);
        self.count += 1;
        self.status = res.status();
    }

    /// The reply's size so far (`reply_size::fit`).
    fn used(&self) -> usize {
        self.head + self.enc.xdr_len()
    }

    fn finish(mut self) -> XdrStream {
        self.enc.patch_u32(self.status_at, self.status.0);
        self.enc.patch_u32(self.count_at, self.count);
        self.enc.finish()
    }
}

/// Serves one decoded COMPOUND (module docs). Returns the encoded `COMPOUND4res`.
pub(crate) fn process(
    server: &Nfs4Server,
    caller: &Caller,
    principal: Principal,
    decoded: Decoded,
    now: Instant,
) -> XdrStream {
    let (c, request_len) = match decoded.0 {
        Ok(ok) => ok,
        Err(reply) => return reply,
    };
    let mut cx = Compound {
        server,
        table: server.nfs.table(),
        caller,
        principal,
        now,
        current: None,
        saved: None,
        current_stateid: None,
        saved_stateid: None,
        session: None,
        last: false,
        next_access: None,
        charges: Vec::new(),
        file_reads: Vec::new(),
    };
    // The slot to complete.
    let mut slot: Option<SlotInUse<'_>> = None;
    // The session's reply limits (`ca_maxresponsesize`, and the cached one when the
    // client asked for caching) and the reply's size so far (module reply_size).
    let mut limits: Option<(usize, Option<usize>)> = None;
    let mut results = Results::new(&c.tag);
    for (i, op) in c.ops.iter().enumerate() {
        let desc = ops::describe(op.opnum());
        cx.last = i as u32 + 1 == c.opcount;
        cx.next_access = match op {
            NfsArgop4::Open(_) => next_access(&c.ops[i + 1..]),
            _ => None,
        };
        let fitted;
        let used = results.used();
        let op = match limits.map(|(max, cached)| reply_size::fit(op, used, max, cached)) {
            Some(Err(s)) => {
                results.push(&fail(op, s));
                break;
            }
            Some(Ok(Some(smaller))) => {
                fitted = smaller;
                &fitted
            }
            _ => op,
        };
        let res = match (i, op, desc) {
            (0, NfsArgop4::Sequence(a), _) => {
                // The reply of SEQUENCE alone with this tag, padded.
                let least_reply = super::state::session::MIN_RESPONSE as usize
                    + c.tag.0.len().next_multiple_of(4);
                let r = server
                    .state()
                    .sequence(a, c.opcount, request_len, least_reply, now);
                match r {
                    Err(s) => fail(op, s),
                    Ok(Sequenced::Replay(bytes)) => return XdrStream::inline_only(bytes),
                    Ok(Sequenced::New(ok, client)) => {
                        slot = Some(SlotInUse {
                            server,
                            session: a.sa_sessionid,
                            slotid: a.sa_slotid,
                            cachethis: a.sa_cachethis,
                            now,
                        });
                        cx.session = Some((a.sa_sessionid, client));
                        limits = server.state().session(&a.sa_sessionid).map(|s| {
                            let cached = a
                                .sa_cachethis
                                .then_some(s.fore.ca_maxresponsesize_cached as usize);
                            (s.fore.ca_maxresponsesize as usize, cached)
                        });
                        NfsResop4::Sequence(nfs4::Res4::Ok(ok))
                    }
                }
            }
            (_, NfsArgop4::Sequence(_), _) => fail(op, NfsStat4::NFS4ERR_SEQUENCE_POS),
            #[cfg(test)]
            (1, _, _) if tests::PANIC_AFTER_SEQUENCE.get() => panic!("test: an operation panics"),
            (0, _, Some(d)) if d.flags & ops::SOLO != 0 => {
                if c.opcount > 1 {
                    fail(op, NfsStat4::NFS4ERR_NOT_ONLY_OP)
                } else {
                    ops::run(d, &mut cx, op)
                }
            }
            (0, _, _) => fail(op, NfsStat4::NFS4ERR_OP_NOT_IN_SESSION),
            (_, _, Some(d)) => {
                if d.flags & ops::CLEARS_STATEID != 0 {
                    cx.current_stateid = None;
                }
                ops::run(d, &mut cx, op)
            }
            (_, _, None) => fail(op, NfsStat4::NFS4ERR_NOTSUPP),
        };
        let failed = !res.status().is_ok();
        server.op_counts.count(op.opnum().0, !failed);
        results.push(&res);
        drop(res);
        if failed {
            break;
        }
    }
    // The operation that did not decode is reached only if all before it succeeded.
    if results.count as usize == c.ops.len() && results.status.is_ok() {
        if let Some(stopped) = c.stopped {
            server.op_counts.count(stopped.opnum.0, false);
            results.push(&stopped.result());
        }
    }
    let mut reply = results.finish();
    super::read_file::fill(&mut reply, std::mem::take(&mut cx.file_reads));
    // Locks of lock owners whose client went during this COMPOUND (its lease ran
    // out, its record was replaced or destroyed).
    let released = server.state().take_released();
    if !released.is_empty() {
        server.locks.release(released);
    }
    server.save_records();
    for charge in cx.charges.drain(..) {
        crate::nfs::hold(&mut reply, charge);
    }
    if let Some(slot) = slot {
        // A reply with data left out of line (a READ's, a READLINK's) is not cached:
        // a READ is idempotent, and its retry gets NFS4ERR_RETRY_UNCACHED_REP.
        let keep = (slot.cachethis && reply.ddp.is_empty()).then(|| reply.inline.clone());
        slot.complete(keep);
    }
    reply
}

/// The slot a COMPOUND's SEQUENCE began (§2.10.6), in progress until completed:
/// with the reply to cache by [`SlotInUse::complete`], or, when the COMPOUND never
/// gets that far (an operation panicked: the service answers SYSTEM_ERR), uncached
/// when dropped. A slot left in progress would answer every retry of its request
/// NFS4ERR_DELAY (§2.10.6.2) for as long as the session lives: a client retrying it
/// would wait for ever on a server that looks alive.
struct SlotInUse<'a> {
    server: &'a Nfs4Server,
    session: SessionId4,
    slotid: u32,
    cachethis: bool,
    now: Instant,
}

impl SlotInUse<'_> {
    /// Ends the request, keeping `reply` for retransmissions if given.
    fn complete(self, reply: Option<xdr::Bytes>) {
        let this = std::mem::ManuallyDrop::new(self);
        this.server
            .state()
            .complete(&this.session, this.slotid, reply, this.now);
    }
}

impl Drop for SlotInUse<'_> {
    fn drop(&mut self) {
        self.server
            .state()
            .complete(&self.session, self.slotid, None, self.now);
    }
}

impl Compound<'_> {
    /// The current filehandle, or NFS4ERR_NOFILEHANDLE (§15.1.2.8).
    pub(crate) fn current(&self) -> Result<&Fh, NfsStat4> {
        self.current.as_ref().ok_or(NfsStat4::NFS4ERR_NOFILEHANDLE)
    }

    /// NFS4ERR_GRACE while the grace period runs ([`super::state::grace`]): for
    /// operations that make new state or could take a reclaimed file away.
    pub(crate) fn not_in_grace(&self) -> Result<(), NfsStat4> {
        if self.server.state().in_grace(self.now) {
            Err(NfsStat4::NFS4ERR_GRACE)
        } else {
            Ok(())
        }
    }

    /// Whether a non-reclaim OPEN or LOCK may take new state: not in the grace
    /// period, and only once the COMPOUND's client has sent RECLAIM_COMPLETE
    /// (§18.51.3: "If non-reclaim locking operations are done before the
    /// RECLAIM_COMPLETE, an NFS4ERR_GRACE error will be returned").
    pub(crate) fn may_lock_anew(&self) -> Result<(), NfsStat4> {
        self.not_in_grace()?;
        let client = self.client()?;
        match self.server.state().client(client) {
            Some(c) if c.reclaim_complete => Ok(()),
            _ => Err(NfsStat4::NFS4ERR_GRACE),
        }
    }

    /// The client of the COMPOUND's session (every operation that uses state runs
    /// after SEQUENCE, [`ops::SOLO`]).
    pub(crate) fn client(&self) -> Result<ClientId4, NfsStat4> {
        self.session
            .map(|(_, c)| c)
            .ok_or(NfsStat4::NFS4ERR_OP_NOT_IN_SESSION)
    }

    /// `given` as the operation uses it: the special "current" stateid (seqid 1,
    /// other zeros) stands for the current stateid, NFS4ERR_BAD_STATEID when there
    /// is none (§16.2.3.1.2).
    pub(crate) fn stateid(&self, given: &StateId4) -> Result<StateId4, NfsStat4> {
        if *given == StateId4::CURRENT {
            self.current_stateid.ok_or(NfsStat4::NFS4ERR_BAD_STATEID)
        } else {
            Ok(*given)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use nfs4::compound::{Compound4Args, Compound4Res, NfsArgop4};
    use nfs4::dir::{ReadDir4Args, Remove4Args, Rename4Args};
    use nfs4::fh::*;
    use nfs4::session::*;
    use nfs4::*;
    use proptest::prelude::*;
    use xdr::{Bytes, Decode, Decoder, Encode};

    use super::super::state::Principal;
    use super::super::Nfs4Server;
    use crate::exports::{ExportLine, ExportOptions};
    use crate::nfs::{Caller, NfsServer, Table};
    use crate::vfs::HandleConfig;

    /// A server on a scratch export (a file, a directory, a symbolic link), with a
    /// session set up; the directory is removed when the server is dropped.
    struct Scratch {
        v4: Nfs4Server,
        sid: SessionId4,
        dir: std::path::PathBuf,
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn scratch() -> Scratch {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nfsd-v4-compound-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("f"), b"data").unwrap();
        let _ = std::os::unix::fs::symlink("f", dir.join("l"));
        let options = ExportOptions {
            read_only: false,
            secure: false,
            ..ExportOptions::default()
        };
        let table = Table::open(
            &[ExportLine::everyone(&dir, options)],
            &HandleConfig::ephemeral().unwrap(),
            None,
        )
        .unwrap();
        let v4 = Nfs4Server::new(Arc::new(NfsServer::new(table)), None);
        let now = Instant::now();
        let e = v4
            .state()
            .exchange_id(
                &ExchangeId4Args {
                    eia_clientowner: ClientOwner4 {
                        co_verifier: [1; 8],
                        co_ownerid: "fuzz".into(),
                    },
                    eia_flags: 0,
                    eia_state_protect: StateProtect4A::None,
                    eia_client_impl_id: None,
                },
                Principal::default(),
                now,
            )
            .unwrap();
        let attrs = ChannelAttrs4 {
            ca_headerpadsize: 0,
            ca_maxrequestsize: 1 << 20,
            ca_maxresponsesize: 1 << 20,
            ca_maxresponsesize_cached: 4096,
            ca_maxoperations: 64,
            ca_maxrequests: 4,
            ca_rdma_ird: None,
        };
        let Res4::Ok(cs) = v4.state().create_session(
            &CreateSession4Args {
                csa_clientid: e.clientid,
                csa_sequence: e.sequenceid,
                csa_flags: 0,
                csa_fore_chan_attrs: attrs.clone(),
                csa_back_chan_attrs: attrs,
                csa_cb_program: 1,
                csa_sec_parms: vec![],
            },
            Principal::default(),
            now,
        ) else {
            panic!("CREATE_SESSION")
        };
        Scratch {
            v4,
            sid: cs.csr_sessionid,
            dir,
        }
    }

    thread_local! {
        /// Makes [`super::process`] panic in the operation after SEQUENCE, on this
        /// thread (a stand-in for a defect in an operation).
        pub(super) static PANIC_AFTER_SEQUENCE: std::cell::Cell<bool> =
            const { std::cell::Cell::new(false) };
    }

    /// A COMPOUND that panics after its SEQUENCE began a slot (the service answers it
    /// SYSTEM_ERR) leaves the slot usable: the retry of that request is
    /// NFS4ERR_RETRY_UNCACHED_REP, not NFS4ERR_DELAY for ever (§2.10.6.2), and the
    /// next request on the slot runs.
    #[test]
    fn a_compound_that_panics_ends_its_slot_uncached() {
        let s = scratch();
        let args = |seq: u32| {
            Compound4Args {
                tag: "t".into(),
                minorversion: 1,
                argarray: vec![
                    NfsArgop4::Sequence(Sequence4Args {
                        sa_sessionid: s.sid,
                        sa_sequenceid: seq,
                        sa_slotid: 0,
                        sa_highest_slotid: 0,
                        sa_cachethis: true,
                    }),
                    NfsArgop4::PutRootFh,
                ],
            }
            .to_xdr()
            .to_bytes()
        };
        PANIC_AFTER_SEQUENCE.set(true);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&s, args(1))));
        PANIC_AFTER_SEQUENCE.set(false);
        assert!(panicked.is_err(), "the stand-in defect panics");
        assert_eq!(
            run(&s, args(1)).status,
            NfsStat4::NFS4ERR_RETRY_UNCACHED_REP
        );
        assert_eq!(run(&s, args(2)).status, NfsStat4::NFS4_OK);
    }

    /// Runs `args` through [`super::process`]; the reply must decode, hold at most one
    /// result per operation (plus one for an operation that did not decode), and carry
    /// its last result's status.
    fn run(s: &Scratch, args: Bytes) -> Compound4Res {
        let reply = super::process(
            &s.v4,
            &Caller::default(),
            Principal::default(),
            super::decode(Decoder::new(args)),
            Instant::now(),
        );
        let mut d = Decoder::new(reply.to_bytes());
        let res = Compound4Res::decode(&mut d).expect("our reply decodes");
        d.finish().expect("and nothing follows it");
        let last = res
            .resarray
            .last()
            .map_or(NfsStat4::NFS4_OK, |r| r.status());
        if res.status != NfsStat4::NFS4ERR_MINOR_VERS_MISMATCH
            && res.status != NfsStat4::NFS4ERR_BADXDR
        {
            assert_eq!(res.status, last);
        }
        assert!(res.resarray[..res.resarray.len().saturating_sub(1)]
            .iter()
            .all(|r| r.status().is_ok()));
        res
    }

    fn op(s: &Scratch) -> impl Strategy<Value = NfsArgop4> {
        let sid = s.sid;
        let names =
            prop::sample::select(vec!["f", "d", "l", "..", ".", "", "missing", "a/b", "tmp"]);
        prop_oneof![
            (0u32..4, 0u32..6, any::<bool>(), any::<bool>()).prop_map(
                move |(slot, seq, cache, ours)| {
                    NfsArgop4::Sequence(Sequence4Args {
                        sa_sessionid: if ours { sid } else { [7; 16] },
                        sa_sequenceid: seq,
                        sa_slotid: slot,
                        sa_highest_slotid: 0,
                        sa_cachethis: cache,
                    })
                }
            ),
            Just(NfsArgop4::PutRootFh),
            Just(NfsArgop4::PutPubFh),
            Just(NfsArgop4::GetFh),
            Just(NfsArgop4::SaveFh),
            Just(NfsArgop4::RestoreFh),
            Just(NfsArgop4::LookupP),
            Just(NfsArgop4::ReadLink),
            prop::collection::vec(any::<u8>(), 0..70).prop_map(|b| NfsArgop4::PutFh(PutFh4Args {
                object: NfsFh4(Bytes::from(b)),
            })),
            names
                .clone()
                .prop_map(|n| NfsArgop4::Lookup(Lookup4Args { objname: n.into() })),
            names
                .clone()
                .prop_map(|n| NfsArgop4::SecInfo(SecInfo4Args { name: n.into() })),
            (0u32..3).prop_map(|s| NfsArgop4::SecInfoNoName(SecInfoStyle4(s))),
            any::<u32>().prop_map(|a| NfsArgop4::Access(Access4Args { access: a })),
            prop::collection::vec(any::<u32>(), 0..4).prop_map(|w| NfsArgop4::GetAttr(
                GetAttr4Args {
                    attr_request: Bitmap4(w),
                }
            )),
            (
                0u64..8,
                any::<bool>(),
                0u32..600,
                prop::collection::vec(any::<u32>(), 0..3)
            )
                .prop_map(|(cookie, zero, maxcount, w)| NfsArgop4::ReadDir(
                    ReadDir4Args {
                        cookie,
                        cookieverf: if zero { [0; 8] } else { [9; 8] },
                        dircount: maxcount,
                        maxcount,
                        attr_request: Bitmap4(w),
                    }
                )),
            names
                .clone()
                .prop_map(|n| NfsArgop4::Remove(Remove4Args { target: n.into() })),
            (names.clone(), names.clone()).prop_map(|(a, b)| NfsArgop4::Rename(Rename4Args {
                oldname: a.into(),
                newname: b.into(),
            })),
            any::<bool>()
                .prop_map(|b| NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: b })),
            Just(NfsArgop4::DestroySession(DestroySession4Args {
                dsa_sessionid: sid
            })),
            any::<u64>()
                .prop_map(|c| NfsArgop4::DestroyClientId(DestroyClientId4Args { dca_clientid: c })),
            Just(NfsArgop4::Unknown(NfsOpnum4(10_000))),
            (names.clone(), 0u32..5, 0u32..5, 0u8..4, 0u8..3).prop_map(
                |(n, access, deny, how, claim)| {
                    use nfs4::state::*;
                    let attrs = Fattr4 {
                        attrmask: Bitmap4::from_bits(&[33]),
                        attr_vals: AttrList4(Bytes::from_static(&[0, 0, 1, 0xa4])),
                    };
                    NfsArgop4::Open(Open4Args {
                        seqid: 0,
                        share_access: access,
                        share_deny: deny,
                        owner: StateOwner4 {
                            clientid: 0,
                            owner: "o".into(),
                        },
                        openhow: OpenFlag4(match how {
                            0 => None,
                            1 => Some(CreateHow4::Unchecked(attrs)),
                            2 => Some(CreateHow4::Guarded(attrs)),
                            _ => Some(CreateHow4::Exclusive41([how; 8], attrs)),
                        }),
                        claim: match claim {
                            0 => OpenClaim4::Null(n.into()),
                            1 => OpenClaim4::Fh,
                            _ => OpenClaim4::Previous(OpenDelegationType4::OPEN_DELEGATE_NONE),
                        },
                    })
                }
            ),
            stateid().prop_map(|stateid| NfsArgop4::Read(nfs4::io::Read4Args {
                stateid,
                offset: 0,
                count: 100,
            })),
            stateid().prop_map(|stateid| NfsArgop4::Write(nfs4::io::Write4Args {
                stateid,
                offset: 1,
                stable: nfs4::io::StableHow4::UNSTABLE4,
                data: DdpData(Bytes::from_static(b"xyz")),
            })),
            stateid().prop_map(|open_stateid| NfsArgop4::Close(nfs4::state::Close4Args {
                seqid: 0,
                open_stateid,
            })),
            Just(NfsArgop4::Commit(nfs4::io::Commit4Args {
                offset: 0,
                count: 0
            })),
        ]
    }

    /// Stateids a client might send: the special ones (CURRENT names what an OPEN
    /// before it in the COMPOUND got) and unknown ones.
    fn stateid() -> impl Strategy<Value = StateId4> {
        prop_oneof![
            Just(StateId4::ANONYMOUS),
            Just(StateId4::READ_BYPASS),
            Just(StateId4::CURRENT),
            (0u32..3, 1u8..3).prop_map(|(seqid, n)| {
                let mut other = [0u8; 12];
                other[11] = n;
                StateId4 { seqid, other }
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any bytes as COMPOUND4args: never a panic, always a reply that decodes.
        #[test]
        fn arbitrary_bytes_get_a_reply(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let s = scratch();
            run(&s, Bytes::from(b));
        }

        /// Random COMPOUNDs of the operations served (and some not), in any order with
        /// any arguments: never a panic; the first-operation rules hold.
        #[test]
        fn random_compounds_follow_the_rules(
            ops in prop::collection::vec(op(&scratch()), 0..12),
            minor in prop_oneof![Just(1u32), 0u32..3],
        ) {
            let s = scratch();
            let args = Compound4Args { tag: "fuzz".into(), minorversion: minor, argarray: ops.clone() };
            let res = run(&s, args.to_xdr().to_bytes());
            if minor != 1 {
                prop_assert_eq!(res.status, NfsStat4::NFS4ERR_MINOR_VERS_MISMATCH);
                prop_assert!(res.resarray.is_empty());
            } else if let Some(first) = ops.first() {
                prop_assert!(!res.resarray.is_empty());
                let solo = matches!(first, NfsArgop4::DestroySession(_) | NfsArgop4::DestroyClientId(_));
                if !matches!(first, NfsArgop4::Sequence(_)) && !solo {
                    prop_assert_eq!(res.resarray.len(), 1);
                    let want = if matches!(first, NfsArgop4::Unknown(_)) {
                        NfsStat4::NFS4ERR_OP_ILLEGAL
                    } else {
                        NfsStat4::NFS4ERR_OP_NOT_IN_SESSION
                    };
                    prop_assert_eq!(res.status, want);
                }
                if solo && ops.len() > 1 {
                    prop_assert_eq!(res.status, NfsStat4::NFS4ERR_NOT_ONLY_OP);
                }
            }
            // Nothing outside the export was touched, and it is still there.
            prop_assert!(s.dir.exists());
        }
    }

    /// Where a COMPOUND runs ([`super::Decoded::runs_inline`]): on the thread that
    /// read it when every operation is small metadata work (the kernel client's
    /// OPEN, ACCESS, CLOSE and REMOVE COMPOUNDs), READ only over TCP; on the
    /// blocking pool with one operation that is not (WRITE, RENAME).
    #[test]
    fn small_metadata_compounds_run_inline_and_the_rest_on_the_pool() {
        use nfs4::io::{Read4Args, StableHow4, Write4Args};
        use nfs4::state::*;
        use oncrpc::Protocol::{Rdma, Tcp};
        let decoded = |ops: Vec<NfsArgop4>| {
            let args = Compound4Args {
                tag: "t".into(),
                minorversion: 1,
                argarray: ops,
            };
            super::decode(Decoder::new(args.to_xdr().to_bytes()))
        };
        let seq = NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: [1; 16],
            sa_sequenceid: 1,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        });
        let putfh = NfsArgop4::PutFh(PutFh4Args {
            object: NfsFh4(Bytes::from_static(b"fh")),
        });
        let open = NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_WRITE,
            share_deny: 0,
            owner: StateOwner4 {
                clientid: 1,
                owner: b"o".as_slice().into(),
            },
            openhow: OpenFlag4(None),
            claim: OpenClaim4::Null("f".into()),
        });
        let getattr = NfsArgop4::GetAttr(GetAttr4Args {
            attr_request: Bitmap4::from_bits(&[1, 3, 4]),
        });
        let open_compound = vec![
            seq.clone(),
            putfh.clone(),
            open,
            NfsArgop4::GetFh,
            NfsArgop4::Access(Access4Args { access: 0x1f }),
            getattr.clone(),
        ];
        let remove = vec![
            seq.clone(),
            putfh.clone(),
            NfsArgop4::Remove(Remove4Args { target: "f".into() }),
            getattr.clone(),
        ];
        let read = vec![
            seq.clone(),
            putfh.clone(),
            NfsArgop4::Read(Read4Args {
                stateid: StateId4::ANONYMOUS,
                offset: 0,
                count: 1 << 20,
            }),
        ];
        let write = vec![
            seq.clone(),
            putfh.clone(),
            NfsArgop4::Write(Write4Args {
                stateid: StateId4::ANONYMOUS,
                offset: 0,
                stable: StableHow4::UNSTABLE4,
                data: nfs4::DdpData(Bytes::from_static(b"data")),
            }),
        ];
        let rename = vec![
            seq,
            putfh,
            NfsArgop4::SaveFh,
            NfsArgop4::Rename(Rename4Args {
                oldname: "a".into(),
                newname: "b".into(),
            }),
        ];
        for over in [Some(Tcp), Some(Rdma), None] {
            assert!(decoded(open_compound.clone()).runs_inline(over));
            assert!(decoded(remove.clone()).runs_inline(over));
            assert!(!decoded(write.clone()).runs_inline(over));
            assert!(!decoded(rename.clone()).runs_inline(over));
            assert_eq!(decoded(read.clone()).runs_inline(over), over == Some(Tcp));
        }
        // A reply decided without running anything: no reason to hand it off.
        assert!(super::decode(Decoder::new(Bytes::from_static(&[0, 0]))).runs_inline(None));
    }
}
