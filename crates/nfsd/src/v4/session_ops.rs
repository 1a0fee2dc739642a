//! The session and client ID operations (RFC 8881 §18.35 EXCHANGE_ID, §18.36
//! CREATE_SESSION, §18.37 DESTROY_SESSION, §18.50 DESTROY_CLIENTID, §18.51
//! RECLAIM_COMPLETE, §18.34 BIND_CONN_TO_SESSION): arguments in, [`super::state::StateTable`] decides, results
//! out. SEQUENCE is [`super::compound`]'s.

use nfs4::session::*;
use nfs4::{NfsImplId4, NfsStat4, Res4, ServerOwner4};

use super::compound::Compound;

/// §18.35 EXCHANGE_ID: the client record from the state table, and the server's
/// identity: a non-pNFS server (§18.35.3: exactly one of the pNFS role flags),
/// SP4_NONE, its owner and scope ([`super::Nfs4Server`]).
pub(crate) fn exchange_id(cx: &mut Compound<'_>, a: &ExchangeId4Args) -> ExchangeId4Res {
    let got = cx.server.state().exchange_id(a, cx.principal, cx.now);
    match got {
        Err(s) => Res4::Err(s),
        Ok(e) => Res4::Ok(ExchangeId4ResOk {
            eir_clientid: e.clientid,
            eir_sequenceid: e.sequenceid,
            eir_flags: EXCHGID4_FLAG_USE_NON_PNFS
                | if e.confirmed {
                    EXCHGID4_FLAG_CONFIRMED_R
                } else {
                    0
                },
            eir_state_protect: StateProtect4R::None,
            eir_server_owner: ServerOwner4 {
                so_minor_id: 0,
                so_major_id: cx.server.owner.clone(),
            },
            eir_server_scope: cx.server.owner.clone(),
            eir_server_impl_id: Some(NfsImplId4 {
                nii_domain: "rpcrdma-rs".into(),
                nii_name: concat!("nfsd ", env!("CARGO_PKG_VERSION")).into(),
                nii_date: Default::default(),
            }),
        }),
    }
}

/// §18.36 CREATE_SESSION.
pub(crate) fn create_session(cx: &mut Compound<'_>, a: &CreateSession4Args) -> CreateSession4Res {
    cx.server.state().create_session(a, cx.principal, cx.now)
}

/// §18.37 DESTROY_SESSION. Destroying the session of this very COMPOUND is allowed
/// as its last operation only (§18.37.3; NFS4ERR_NOT_ONLY_OP otherwise, as knfsd).
pub(crate) fn destroy_session(cx: &mut Compound<'_>, a: &DestroySession4Args) -> NfsStat4 {
    if cx.session.is_some_and(|(sid, _)| sid == a.dsa_sessionid) && !cx.last {
        return NfsStat4::NFS4ERR_NOT_ONLY_OP;
    }
    cx.server.state().destroy_session(&a.dsa_sessionid)
}

/// §18.50 DESTROY_CLIENTID.
pub(crate) fn destroy_clientid(cx: &mut Compound<'_>, a: &DestroyClientId4Args) -> NfsStat4 {
    cx.server.state().destroy_clientid(a.dca_clientid, cx.now)
}

/// §18.51 RECLAIM_COMPLETE, for the client of the COMPOUND's session. With
/// `rca_one_fs` it needs a current filehandle (§18.51.3).
pub(crate) fn reclaim_complete(cx: &mut Compound<'_>, a: &ReclaimComplete4Args) -> NfsStat4 {
    let Some((_, client)) = cx.session else {
        return NfsStat4::NFS4ERR_OP_NOT_IN_SESSION;
    };
    if a.rca_one_fs && cx.current.is_none() {
        return NfsStat4::NFS4ERR_NOFILEHANDLE;
    }
    cx.server.state().reclaim_complete(client, a.rca_one_fs)
}

/// §18.34 BIND_CONN_TO_SESSION. With SP4_NONE every connection is bound to the fore
/// channel of the sessions it carries requests of (§2.10.3.1: the server binds it
/// implicitly), so binding is a matter of answering: the fore channel for CDFC4_FORE
/// and CDFC4_FORE_OR_BOTH; no back channel is served yet, so CDFC4_BACK and
/// CDFC4_BACK_OR_BOTH, which need one, are NFS4ERR_INVAL. RDMA mode is not granted
/// (`bctsr_use_conn_in_rdma_mode` FALSE). No such session: NFS4ERR_BADSESSION.
pub(crate) fn bind_conn_to_session(
    cx: &mut Compound<'_>,
    a: &BindConnToSession4Args,
) -> BindConnToSession4Res {
    if cx.server.state().session(&a.bctsa_sessid).is_none() {
        return Res4::Err(NfsStat4::NFS4ERR_BADSESSION);
    }
    match a.bctsa_dir {
        ChannelDirFromClient4::CDFC4_FORE | ChannelDirFromClient4::CDFC4_FORE_OR_BOTH => {
            Res4::Ok(BindConnToSession4ResOk {
                bctsr_sessid: a.bctsa_sessid,
                bctsr_dir: ChannelDirFromServer4::CDFS4_FORE,
                bctsr_use_conn_in_rdma_mode: false,
            })
        }
        _ => Res4::Err(NfsStat4::NFS4ERR_INVAL),
    }
}
