//! The operation table (RFC 8881 §18, after knfsd's `nfsd4_ops[]`): for every
//! operation the COMPOUND decoder knows, its name, the rules [`super::compound`]
//! applies before running it (as flags) and its handler. Per-operation rules are
//! data here; the handlers live by group ([`super::session_ops`],
//! [`super::fh_ops`], [`super::readdir`], [`super::names_ops`]).
//!
//! Operations whose handler is [`Run::NotYet`] (delegations) answer
//! NFS4ERR_NOTSUPP until they are served; so do the operations the decoder does not
//! code (it stops there, [`nfs4::compound::StopReason::NotSupported`]).

use nfs4::compound::{NfsArgop4, NfsResop4};
use nfs4::{NfsOpnum4, NfsStat4};

use super::compound::{fail, Compound};
use super::{fh_ops, io_ops, lock_ops, open_ops, session_ops};

/// May begin a COMPOUND without SEQUENCE, and must then be its only operation
/// (RFC 8881 §2.6.3.1.1.1 and each operation's §18.x.3).
pub(crate) const SOLO: u8 = 1;
/// Needs a current filehandle (NFS4ERR_NOFILEHANDLE without one, §15.1.2.8).
pub(crate) const CURRENT_FH: u8 = 2;
/// Sets a new current filehandle without a stateid: the current stateid is
/// cleared before it runs (§16.2.3.1.2; knfsd's `OP_CLEAR_STATEID`).
pub(crate) const CLEARS_STATEID: u8 = 4;
/// Small metadata work, a handful of system calls the inode and dentry caches answer:
/// a COMPOUND of such operations only runs on the async worker that read it,
/// without the hand-off to the blocking pool ([`super::compound::Decoded::runs_inline`],
/// for the reasons of NFSv3's [`crate::service::runs_inline`]). Not: WRITE, COMMIT,
/// READDIR and READLINK (data, fsync, long directories), SETATTR (a truncation may
/// free a large file's blocks), CREATE, LINK and RENAME (rarer, and RENAME may
/// remove a large file), the lock operations (they may wait on NLM's table), READ
/// (inline only over TCP, where its data leaves by `sendfile`: decided with the
/// transport).
pub(crate) const INLINE: u8 = 8;
/// Changes no object: no data, attribute, name or access time. What an earlier
/// such operation of the COMPOUND read of an object holds for the next
/// ([`crate::seen`]); any other operation makes the next read afresh.
pub(crate) const READS_ONLY: u8 = 16;

/// How an operation runs.
pub(crate) enum Run {
    /// By this handler.
    Op(fn(&mut Compound<'_>, &NfsArgop4) -> NfsResop4),
    /// SEQUENCE: by [`super::compound`] itself, as the first operation only.
    Sequence,
    /// Not served yet: NFS4ERR_NOTSUPP.
    NotYet,
}

/// One operation's entry.
pub(crate) struct OpDesc {
    /// Its number.
    pub(crate) op: NfsOpnum4,
    /// Its name, for logs.
    pub(crate) name: &'static str,
    /// [`SOLO`], [`CURRENT_FH`], [`CLEARS_STATEID`], [`INLINE`], [`READS_ONLY`].
    pub(crate) flags: u8,
    /// Its handler.
    pub(crate) run: Run,
}

/// A handler from an expression over the operation's arguments (`a`), for the
/// variant `$v` of both `NfsArgop4` and `NfsResop4`.
macro_rules! handler {
    ($v:ident, |$cx:ident, $a:ident| $e:expr) => {
        Run::Op(|$cx, op| match op {
            NfsArgop4::$v($a) => NfsResop4::$v($e),
            _ => fail(op, NfsStat4::NFS4ERR_SERVERFAULT),
        })
    };
    ($v:ident, |$cx:ident| $e:expr) => {
        Run::Op(|$cx, op| match op {
            NfsArgop4::$v => NfsResop4::$v($e),
            _ => fail(op, NfsStat4::NFS4ERR_SERVERFAULT),
        })
    };
}

macro_rules! op {
    ($op:ident, $name:literal, $flags:expr, $run:expr) => {
        OpDesc {
            op: NfsOpnum4::$op,
            name: $name,
            flags: $flags,
            run: $run,
        }
    };
}

/// The table, in operation number order.
pub(crate) static OPS: &[OpDesc] = &[
    op!(
        OP_ACCESS,
        "ACCESS",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(Access, |cx, a| fh_ops::access(cx, a))
    ),
    op!(
        OP_CLOSE,
        "CLOSE",
        CURRENT_FH | INLINE,
        handler!(Close, |cx, a| open_ops::close(cx, a))
    ),
    op!(
        OP_COMMIT,
        "COMMIT",
        CURRENT_FH,
        handler!(Commit, |cx, a| io_ops::commit(cx, a))
    ),
    op!(
        OP_CREATE,
        "CREATE",
        CURRENT_FH | CLEARS_STATEID,
        handler!(Create, |cx, a| super::names_ops::create(cx, a))
    ),
    op!(OP_DELEGRETURN, "DELEGRETURN", CURRENT_FH, Run::NotYet),
    op!(
        OP_GETATTR,
        "GETATTR",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(GetAttr, |cx, a| fh_ops::getattr(cx, a))
    ),
    op!(
        OP_GETFH,
        "GETFH",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(GetFh, |cx| fh_ops::getfh(cx))
    ),
    op!(
        OP_LINK,
        "LINK",
        CURRENT_FH,
        handler!(Link, |cx, a| super::names_ops::link(cx, a))
    ),
    op!(
        OP_LOCK,
        "LOCK",
        CURRENT_FH,
        handler!(Lock, |cx, a| lock_ops::lock(cx, a))
    ),
    op!(
        OP_LOCKT,
        "LOCKT",
        CURRENT_FH,
        handler!(LockT, |cx, a| lock_ops::lockt(cx, a))
    ),
    op!(
        OP_LOCKU,
        "LOCKU",
        CURRENT_FH,
        handler!(LockU, |cx, a| lock_ops::locku(cx, a))
    ),
    op!(
        OP_LOOKUP,
        "LOOKUP",
        CURRENT_FH | CLEARS_STATEID | INLINE | READS_ONLY,
        handler!(Lookup, |cx, a| fh_ops::lookup(cx, a))
    ),
    op!(
        OP_LOOKUPP,
        "LOOKUPP",
        CURRENT_FH | CLEARS_STATEID | INLINE | READS_ONLY,
        handler!(LookupP, |cx| fh_ops::lookupp(cx))
    ),
    op!(
        OP_NVERIFY,
        "NVERIFY",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(NVerify, |cx, a| fh_ops::nverify(cx, a))
    ),
    op!(
        OP_OPEN,
        "OPEN",
        CURRENT_FH | INLINE,
        handler!(Open, |cx, a| open_ops::open(cx, a))
    ),
    op!(
        OP_OPEN_DOWNGRADE,
        "OPEN_DOWNGRADE",
        CURRENT_FH | INLINE,
        handler!(OpenDowngrade, |cx, a| open_ops::open_downgrade(cx, a))
    ),
    op!(
        OP_PUTFH,
        "PUTFH",
        CLEARS_STATEID | INLINE | READS_ONLY,
        handler!(PutFh, |cx, a| fh_ops::putfh(cx, a))
    ),
    op!(
        OP_PUTPUBFH,
        "PUTPUBFH",
        CLEARS_STATEID | INLINE | READS_ONLY,
        handler!(PutPubFh, |cx| fh_ops::putrootfh(cx))
    ),
    op!(
        OP_PUTROOTFH,
        "PUTROOTFH",
        CLEARS_STATEID | INLINE | READS_ONLY,
        handler!(PutRootFh, |cx| fh_ops::putrootfh(cx))
    ),
    op!(
        OP_READ,
        "READ",
        CURRENT_FH,
        handler!(Read, |cx, a| io_ops::read(cx, a))
    ),
    op!(
        OP_READDIR,
        "READDIR",
        CURRENT_FH,
        handler!(ReadDir, |cx, a| super::readdir::readdir(cx, a))
    ),
    op!(
        OP_READLINK,
        "READLINK",
        CURRENT_FH,
        handler!(ReadLink, |cx| fh_ops::readlink(cx))
    ),
    op!(
        OP_REMOVE,
        "REMOVE",
        CURRENT_FH | INLINE,
        handler!(Remove, |cx, a| super::names_ops::remove(cx, a))
    ),
    op!(
        OP_RENAME,
        "RENAME",
        CURRENT_FH,
        handler!(Rename, |cx, a| super::names_ops::rename(cx, a))
    ),
    op!(
        OP_RESTOREFH,
        "RESTOREFH",
        INLINE | READS_ONLY,
        handler!(RestoreFh, |cx| fh_ops::restorefh(cx))
    ),
    op!(
        OP_SAVEFH,
        "SAVEFH",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(SaveFh, |cx| fh_ops::savefh(cx))
    ),
    op!(
        OP_SECINFO,
        "SECINFO",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(SecInfo, |cx, a| fh_ops::secinfo(cx, a))
    ),
    op!(
        OP_SETATTR,
        "SETATTR",
        CURRENT_FH,
        handler!(SetAttr, |cx, a| super::setattrs::setattr(cx, a))
    ),
    op!(
        OP_VERIFY,
        "VERIFY",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(Verify, |cx, a| fh_ops::verify(cx, a))
    ),
    op!(
        OP_WRITE,
        "WRITE",
        CURRENT_FH,
        handler!(Write, |cx, a| io_ops::write(cx, a))
    ),
    op!(
        OP_BIND_CONN_TO_SESSION,
        "BIND_CONN_TO_SESSION",
        SOLO,
        handler!(
            BindConnToSession,
            |cx, a| session_ops::bind_conn_to_session(cx, a)
        )
    ),
    op!(
        OP_EXCHANGE_ID,
        "EXCHANGE_ID",
        SOLO,
        handler!(ExchangeId, |cx, a| session_ops::exchange_id(cx, a))
    ),
    op!(
        OP_CREATE_SESSION,
        "CREATE_SESSION",
        SOLO,
        handler!(CreateSession, |cx, a| session_ops::create_session(cx, a))
    ),
    op!(
        OP_DESTROY_SESSION,
        "DESTROY_SESSION",
        SOLO,
        handler!(DestroySession, |cx, a| session_ops::destroy_session(cx, a))
    ),
    op!(
        OP_FREE_STATEID,
        "FREE_STATEID",
        INLINE,
        handler!(FreeStateId, |cx, a| open_ops::free_stateid(cx, a))
    ),
    op!(
        OP_SECINFO_NO_NAME,
        "SECINFO_NO_NAME",
        CURRENT_FH | INLINE | READS_ONLY,
        handler!(SecInfoNoName, |cx, a| fh_ops::secinfo_no_name(cx, a))
    ),
    op!(OP_SEQUENCE, "SEQUENCE", INLINE, Run::Sequence),
    op!(
        OP_TEST_STATEID,
        "TEST_STATEID",
        INLINE | READS_ONLY,
        handler!(TestStateId, |cx, a| open_ops::test_stateid(cx, a))
    ),
    op!(
        OP_DESTROY_CLIENTID,
        "DESTROY_CLIENTID",
        SOLO,
        handler!(DestroyClientId, |cx, a| session_ops::destroy_clientid(
            cx, a
        ))
    ),
    op!(
        OP_RECLAIM_COMPLETE,
        "RECLAIM_COMPLETE",
        0,
        handler!(ReclaimComplete, |cx, a| session_ops::reclaim_complete(
            cx, a
        ))
    ),
];

/// The entry of `op`, if the table has one.
pub(crate) fn describe(op: NfsOpnum4) -> Option<&'static OpDesc> {
    // The table is in operation number order (a unit test checks it).
    let i = OPS.binary_search_by_key(&op, |d| d.op).ok()?;
    Some(&OPS[i])
}

/// Runs `op` as its entry `d` says: NFS4ERR_NOFILEHANDLE for an operation needing
/// a current filehandle without one, NFS4ERR_NOTSUPP for one not served yet.
pub(crate) fn run(d: &OpDesc, cx: &mut Compound<'_>, op: &NfsArgop4) -> NfsResop4 {
    if d.flags & CURRENT_FH != 0 && cx.current.is_none() {
        return fail(op, NfsStat4::NFS4ERR_NOFILEHANDLE);
    }
    cx.caller.seen.allow(d.flags & READS_ONLY != 0);
    let res = match &d.run {
        Run::Op(h) => h(cx, op),
        Run::Sequence => fail(op, NfsStat4::NFS4ERR_SEQUENCE_POS),
        Run::NotYet => fail(op, NfsStat4::NFS4ERR_NOTSUPP),
    };
    tracing::trace!(op = d.name, status = ?res.status(), "NFSv4 operation");
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_number_order_and_names_match_the_codec() {
        assert!(OPS.windows(2).all(|w| w[0].op.0 < w[1].op.0));
        for d in OPS {
            assert_eq!(
                d.op.name().map(|n| n.trim_start_matches("OP_")),
                Some(d.name)
            );
        }
    }

    #[test]
    fn rfc8881_2_6_3_1_1_1_exactly_the_session_management_ops_may_start_without_sequence() {
        let solo: Vec<&str> = OPS
            .iter()
            .filter(|d| d.flags & SOLO != 0)
            .map(|d| d.name)
            .collect();
        assert_eq!(
            solo,
            [
                "BIND_CONN_TO_SESSION",
                "EXCHANGE_ID",
                "CREATE_SESSION",
                "DESTROY_SESSION",
                "DESTROY_CLIENTID"
            ]
        );
    }

    #[test]
    fn rfc8881_16_2_3_1_filehandle_setters_do_not_need_a_current_filehandle() {
        for name in [
            "PUTFH",
            "PUTROOTFH",
            "PUTPUBFH",
            "RESTOREFH",
            "SEQUENCE",
            "EXCHANGE_ID",
        ] {
            let d = OPS.iter().find(|d| d.name == name).unwrap();
            assert_eq!(d.flags & CURRENT_FH, 0, "{name}");
        }
        for name in [
            "GETFH", "GETATTR", "LOOKUP", "LOOKUPP", "SAVEFH", "ACCESS", "READLINK",
        ] {
            let d = OPS.iter().find(|d| d.name == name).unwrap();
            assert_ne!(d.flags & CURRENT_FH, 0, "{name}");
        }
    }

    #[test]
    fn every_operation_the_codec_decodes_has_an_entry() {
        // NfsArgop4's variants, by number (nfs4::compound's operations! table).
        for n in [
            3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 21, 22, 23, 24, 25, 26, 27, 28,
            29, 31, 32, 33, 34, 37, 38, 41, 42, 43, 44, 45, 52, 53, 55, 57, 58,
        ] {
            assert!(describe(NfsOpnum4(n)).is_some(), "{n}");
        }
    }
}
