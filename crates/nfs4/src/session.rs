//! Session and client ID operations (RFC 8881 §2.4, §2.10; XDR in RFC 5662):
//! §18.35 EXCHANGE_ID, §18.36 CREATE_SESSION, §18.46 SEQUENCE, §18.37 DESTROY_SESSION,
//! §18.50 DESTROY_CLIENTID, §18.34 BIND_CONN_TO_SESSION, §18.51 RECLAIM_COMPLETE.
//!
//! State protection (`state_protect4_a` / `_r`) decodes all three arms; which a server
//! accepts is its call (RFC 8881 §18.35.3: a server that does not support SP4_MACH_CRED
//! or SP4_SSV answers NFS4ERR_ENCR_ALG_UNSUPP / NFS4ERR_HASH_ALG_UNSUPP, or SP4_NONE
//! only).

use xdr::{Bytes, Decode, Decoder, Encode, Encoder};

use crate::{
    Bitmap4, ClientId4, ClientOwner4, Count4, NfsImplId4, OpaqueLimit, Res4, SequenceId4,
    ServerOwner4, SessionId4, SlotId4, NFS4_OPAQUE_LIMIT, SMALL_ARRAY_DECODE_MAX,
};

/// EXCHANGE_ID flag: the client supports referrals (RFC 8881 §18.35.3).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
/// EXCHANGE_ID flag: the client supports migration.
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
/// EXCHANGE_ID flag: stateids are bound to the principal that created them.
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
/// EXCHANGE_ID flag: a non-pNFS server.
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// EXCHANGE_ID flag: a pNFS metadata server.
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
/// EXCHANGE_ID flag: a pNFS data server.
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
/// EXCHANGE_ID: the three pNFS role bits.
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
/// EXCHANGE_ID flag: update a confirmed client record (argument only).
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
/// EXCHANGE_ID flag: the client record is confirmed (result only).
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// CREATE_SESSION flag: the reply cache is persistent (RFC 8881 §18.36.3).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x0000_0001;
/// CREATE_SESSION flag: use this connection for the backchannel too.
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x0000_0002;
/// CREATE_SESSION flag: use RDMA mode on this connection (RFC 8881 §2.10.6.2).
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x0000_0004;

open_enum! {
    /// RFC 5662 `state_protect_how4`.
    pub struct StateProtectHow4 {
        /// No state protection.
        SP4_NONE = 0,
        /// Machine credential state protection.
        SP4_MACH_CRED = 1,
        /// Secret State Verifier state protection.
        SP4_SSV = 2,
    }
}

xdr_struct! {
    /// RFC 5662 `state_protect_ops4`: operations that must or may use the machine
    /// credential or SSV.
    #[derive(Default)]
    pub struct StateProtectOps4 {
        /// Operations the server must enforce protection for.
        pub spo_must_enforce: Bitmap4,
        /// Operations the client may send with the protected credential.
        pub spo_must_allow: Bitmap4,
    }
}

/// RFC 5662 `sec_oid4`: `opaque<>`, a DER-encoded object identifier, kept as bytes.
fn oid_list(dec: &mut Decoder) -> xdr::Result<Vec<Bytes>> {
    dec.array(SMALL_ARRAY_DECODE_MAX, |d| d.opaque(NFS4_OPAQUE_LIMIT))
}

fn put_opaques(enc: &mut Encoder, items: &[Bytes]) {
    enc.array(items, |e, b| {
        e.opaque(b);
    });
}

/// RFC 5662 `ssv_sp_parms4`: the client's SSV parameters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SsvSpParms4 {
    /// Operations to protect.
    pub ssp_ops: StateProtectOps4,
    /// Hash algorithms the client supports (OIDs).
    pub ssp_hash_algs: Vec<Bytes>,
    /// Encryption algorithms the client supports (OIDs).
    pub ssp_encr_algs: Vec<Bytes>,
    /// SSV window size.
    pub ssp_window: u32,
    /// Number of RPCSEC_GSS handles the client wants.
    pub ssp_num_gss_handles: u32,
}

impl Encode for SsvSpParms4 {
    fn encode(&self, enc: &mut Encoder) {
        self.ssp_ops.encode(enc);
        put_opaques(enc, &self.ssp_hash_algs);
        put_opaques(enc, &self.ssp_encr_algs);
        enc.u32(self.ssp_window).u32(self.ssp_num_gss_handles);
    }
}

impl Decode for SsvSpParms4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            ssp_ops: StateProtectOps4::decode(dec)?,
            ssp_hash_algs: oid_list(dec)?,
            ssp_encr_algs: oid_list(dec)?,
            ssp_window: dec.u32()?,
            ssp_num_gss_handles: dec.u32()?,
        })
    }
}

/// RFC 5662 `state_protect4_a`: the state protection a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateProtect4A {
    /// `SP4_NONE`.
    #[default]
    None,
    /// `SP4_MACH_CRED` with the operations to protect.
    MachCred(StateProtectOps4),
    /// `SP4_SSV` with the SSV parameters.
    Ssv(SsvSpParms4),
}

impl Encode for StateProtect4A {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::None => StateProtectHow4::SP4_NONE.encode(enc),
            Self::MachCred(ops) => {
                StateProtectHow4::SP4_MACH_CRED.encode(enc);
                ops.encode(enc);
            }
            Self::Ssv(p) => {
                StateProtectHow4::SP4_SSV.encode(enc);
                p.encode(enc);
            }
        }
    }
}

impl Decode for StateProtect4A {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match StateProtectHow4::decode(dec)? {
            StateProtectHow4::SP4_NONE => Ok(Self::None),
            StateProtectHow4::SP4_MACH_CRED => StateProtectOps4::decode(dec).map(Self::MachCred),
            StateProtectHow4::SP4_SSV => SsvSpParms4::decode(dec).map(Self::Ssv),
            other => Err(xdr::XdrError::InvalidDiscriminant(other.0)),
        }
    }
}

/// RFC 5662 `ssv_prot_info4`: the SSV parameters the server chose.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SsvProtInfo4 {
    /// Operations protected.
    pub spi_ops: StateProtectOps4,
    /// Index of the chosen hash algorithm in `ssp_hash_algs`.
    pub spi_hash_alg: u32,
    /// Index of the chosen encryption algorithm in `ssp_encr_algs`.
    pub spi_encr_alg: u32,
    /// SSV length in bytes.
    pub spi_ssv_len: u32,
    /// SSV window size.
    pub spi_window: u32,
    /// RPCSEC_GSS handles (`gsshandle4_t<>`).
    pub spi_handles: Vec<Bytes>,
}

impl Encode for SsvProtInfo4 {
    fn encode(&self, enc: &mut Encoder) {
        self.spi_ops.encode(enc);
        enc.u32(self.spi_hash_alg)
            .u32(self.spi_encr_alg)
            .u32(self.spi_ssv_len)
            .u32(self.spi_window);
        put_opaques(enc, &self.spi_handles);
    }
}

impl Decode for SsvProtInfo4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            spi_ops: StateProtectOps4::decode(dec)?,
            spi_hash_alg: dec.u32()?,
            spi_encr_alg: dec.u32()?,
            spi_ssv_len: dec.u32()?,
            spi_window: dec.u32()?,
            spi_handles: oid_list(dec)?,
        })
    }
}

/// RFC 5662 `state_protect4_r`: the state protection the server grants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateProtect4R {
    /// `SP4_NONE`.
    #[default]
    None,
    /// `SP4_MACH_CRED` with the operations protected.
    MachCred(StateProtectOps4),
    /// `SP4_SSV` with the server's SSV parameters.
    Ssv(SsvProtInfo4),
}

impl Encode for StateProtect4R {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::None => StateProtectHow4::SP4_NONE.encode(enc),
            Self::MachCred(ops) => {
                StateProtectHow4::SP4_MACH_CRED.encode(enc);
                ops.encode(enc);
            }
            Self::Ssv(p) => {
                StateProtectHow4::SP4_SSV.encode(enc);
                p.encode(enc);
            }
        }
    }
}

impl Decode for StateProtect4R {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match StateProtectHow4::decode(dec)? {
            StateProtectHow4::SP4_NONE => Ok(Self::None),
            StateProtectHow4::SP4_MACH_CRED => StateProtectOps4::decode(dec).map(Self::MachCred),
            StateProtectHow4::SP4_SSV => SsvProtInfo4::decode(dec).map(Self::Ssv),
            other => Err(xdr::XdrError::InvalidDiscriminant(other.0)),
        }
    }
}

/// `nfs_impl_id4 <1>`: an optional implementation id, encoded as an array of at most
/// one element (not as optional-data, though the bytes are the same).
fn impl_id(dec: &mut Decoder) -> xdr::Result<Option<NfsImplId4>> {
    Ok(dec.array(1, NfsImplId4::decode)?.pop())
}

fn put_impl_id(enc: &mut Encoder, id: &Option<NfsImplId4>) {
    enc.array(id.as_slice(), |e, v| v.encode(e));
}

/// RFC 8881 §18.35 `EXCHANGE_ID4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeId4Args {
    /// The client's owner and boot verifier.
    pub eia_clientowner: ClientOwner4,
    /// `EXCHGID4_FLAG_*`.
    pub eia_flags: u32,
    /// The state protection asked for.
    pub eia_state_protect: StateProtect4A,
    /// `nfs_impl_id4 eia_client_impl_id<1>`.
    pub eia_client_impl_id: Option<NfsImplId4>,
}

impl Encode for ExchangeId4Args {
    fn encode(&self, enc: &mut Encoder) {
        self.eia_clientowner.encode(enc);
        enc.u32(self.eia_flags);
        self.eia_state_protect.encode(enc);
        put_impl_id(enc, &self.eia_client_impl_id);
    }
}

impl Decode for ExchangeId4Args {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            eia_clientowner: ClientOwner4::decode(dec)?,
            eia_flags: dec.u32()?,
            eia_state_protect: StateProtect4A::decode(dec)?,
            eia_client_impl_id: impl_id(dec)?,
        })
    }
}

/// RFC 8881 §18.35 `EXCHANGE_ID4resok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeId4ResOk {
    /// The client ID.
    pub eir_clientid: ClientId4,
    /// The sequence id CREATE_SESSION must use.
    pub eir_sequenceid: SequenceId4,
    /// `EXCHGID4_FLAG_*`.
    pub eir_flags: u32,
    /// The state protection granted.
    pub eir_state_protect: StateProtect4R,
    /// The server's owner (trunking).
    pub eir_server_owner: ServerOwner4,
    /// `opaque eir_server_scope<NFS4_OPAQUE_LIMIT>`.
    pub eir_server_scope: OpaqueLimit,
    /// `nfs_impl_id4 eir_server_impl_id<1>`.
    pub eir_server_impl_id: Option<NfsImplId4>,
}

impl Encode for ExchangeId4ResOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.eir_clientid)
            .u32(self.eir_sequenceid)
            .u32(self.eir_flags);
        self.eir_state_protect.encode(enc);
        self.eir_server_owner.encode(enc);
        self.eir_server_scope.encode(enc);
        put_impl_id(enc, &self.eir_server_impl_id);
    }
}

impl Decode for ExchangeId4ResOk {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            eir_clientid: dec.u64()?,
            eir_sequenceid: dec.u32()?,
            eir_flags: dec.u32()?,
            eir_state_protect: StateProtect4R::decode(dec)?,
            eir_server_owner: ServerOwner4::decode(dec)?,
            eir_server_scope: OpaqueLimit::decode(dec)?,
            eir_server_impl_id: impl_id(dec)?,
        })
    }
}

/// RFC 8881 §18.35 `EXCHANGE_ID4res`.
pub type ExchangeId4Res = Res4<ExchangeId4ResOk>;

/// RFC 5662 `channel_attrs4` (RFC 8881 §18.36.3): the limits of one channel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChannelAttrs4 {
    /// Padding the server may put before each request's payload (RDMA alignment).
    pub ca_headerpadsize: Count4,
    /// Largest request, in bytes, from the RPC header on.
    pub ca_maxrequestsize: Count4,
    /// Largest reply, in bytes.
    pub ca_maxresponsesize: Count4,
    /// Largest reply the reply cache keeps.
    pub ca_maxresponsesize_cached: Count4,
    /// Most operations per COMPOUND.
    pub ca_maxoperations: Count4,
    /// Most outstanding requests (slots).
    pub ca_maxrequests: Count4,
    /// `uint32_t ca_rdma_ird<1>`: the RDMA inbound read depth, over RDMA only.
    pub ca_rdma_ird: Option<u32>,
}

impl Encode for ChannelAttrs4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.ca_headerpadsize)
            .u32(self.ca_maxrequestsize)
            .u32(self.ca_maxresponsesize)
            .u32(self.ca_maxresponsesize_cached)
            .u32(self.ca_maxoperations)
            .u32(self.ca_maxrequests);
        enc.array(self.ca_rdma_ird.as_slice(), |e, v| {
            e.u32(*v);
        });
    }
}

impl Decode for ChannelAttrs4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            ca_headerpadsize: dec.u32()?,
            ca_maxrequestsize: dec.u32()?,
            ca_maxresponsesize: dec.u32()?,
            ca_maxresponsesize_cached: dec.u32()?,
            ca_maxoperations: dec.u32()?,
            ca_maxrequests: dec.u32()?,
            ca_rdma_ird: dec.array(1, Decoder::u32)?.pop(),
        })
    }
}

/// RFC 5531 `authsys_parms` as `callback_sec_parms4` carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSysParms {
    /// Arbitrary id the caller chose.
    pub stamp: u32,
    /// `string machinename<255>`.
    pub machinename: Bytes,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// `unsigned int gids<16>`.
    pub gids: Vec<u32>,
}

impl Encode for AuthSysParms {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.stamp)
            .string(&self.machinename)
            .u32(self.uid)
            .u32(self.gid);
        enc.array(&self.gids, |e, g| {
            e.u32(*g);
        });
    }
}

impl Decode for AuthSysParms {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            stamp: dec.u32()?,
            machinename: dec.string(255)?,
            uid: dec.u32()?,
            gid: dec.u32()?,
            gids: dec.array(16, Decoder::u32)?,
        })
    }
}

/// RFC 5531 `AUTH_NONE`.
pub const AUTH_NONE: u32 = 0;
/// RFC 5531 `AUTH_SYS`.
pub const AUTH_SYS: u32 = 1;
/// RFC 2203 `RPCSEC_GSS`.
pub const RPCSEC_GSS: u32 = 6;

open_enum! {
    /// RFC 2203 `rpc_gss_svc_t`: the RPCSEC_GSS service.
    pub struct RpcGssSvc {
        /// Authentication only.
        RPC_GSS_SVC_NONE = 1,
        /// Integrity.
        RPC_GSS_SVC_INTEGRITY = 2,
        /// Privacy.
        RPC_GSS_SVC_PRIVACY = 3,
    }
}

xdr_struct! {
    /// RFC 5662 `gss_cb_handles4`: RPCSEC_GSS handles for the backchannel.
    pub struct GssCbHandles4 {
        /// Service.
        pub gcbp_service: RpcGssSvc,
        /// Handle from the server (`gsshandle4_t`).
        pub gcbp_handle_from_server: OpaqueLimit,
        /// Handle from the client (`gsshandle4_t`).
        pub gcbp_handle_from_client: OpaqueLimit,
    }
}

/// RFC 5662 `callback_sec_parms4`: how the server authenticates backchannel calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSecParms4 {
    /// `AUTH_NONE`.
    AuthNone,
    /// `AUTH_SYS` with the credential to send.
    AuthSys(AuthSysParms),
    /// `RPCSEC_GSS` with its handles (kept as bytes; GSS is not implemented).
    RpcSecGss(GssCbHandles4),
}

impl Encode for CallbackSecParms4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Self::AuthNone => {
                enc.u32(AUTH_NONE);
            }
            Self::AuthSys(p) => {
                enc.u32(AUTH_SYS);
                p.encode(enc);
            }
            Self::RpcSecGss(h) => {
                enc.u32(RPCSEC_GSS);
                h.encode(enc);
            }
        }
    }
}

impl Decode for CallbackSecParms4 {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        match dec.u32()? {
            AUTH_NONE => Ok(Self::AuthNone),
            AUTH_SYS => AuthSysParms::decode(dec).map(Self::AuthSys),
            RPCSEC_GSS => GssCbHandles4::decode(dec).map(Self::RpcSecGss),
            other => Err(xdr::XdrError::InvalidDiscriminant(other)),
        }
    }
}

/// RFC 8881 §18.36 `CREATE_SESSION4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSession4Args {
    /// The client ID from EXCHANGE_ID.
    pub csa_clientid: ClientId4,
    /// EXCHANGE_ID's `eir_sequenceid`, then one more per CREATE_SESSION.
    pub csa_sequence: SequenceId4,
    /// `CREATE_SESSION4_FLAG_*`.
    pub csa_flags: u32,
    /// Fore channel attributes asked for.
    pub csa_fore_chan_attrs: ChannelAttrs4,
    /// Back channel attributes asked for.
    pub csa_back_chan_attrs: ChannelAttrs4,
    /// RPC program number of the backchannel.
    pub csa_cb_program: u32,
    /// `callback_sec_parms4 csa_sec_parms<>`.
    pub csa_sec_parms: Vec<CallbackSecParms4>,
}

impl Encode for CreateSession4Args {
    fn encode(&self, enc: &mut Encoder) {
        enc.u64(self.csa_clientid)
            .u32(self.csa_sequence)
            .u32(self.csa_flags);
        self.csa_fore_chan_attrs.encode(enc);
        self.csa_back_chan_attrs.encode(enc);
        enc.u32(self.csa_cb_program);
        enc.array(&self.csa_sec_parms, |e, p| p.encode(e));
    }
}

impl Decode for CreateSession4Args {
    fn decode(dec: &mut Decoder) -> xdr::Result<Self> {
        Ok(Self {
            csa_clientid: dec.u64()?,
            csa_sequence: dec.u32()?,
            csa_flags: dec.u32()?,
            csa_fore_chan_attrs: ChannelAttrs4::decode(dec)?,
            csa_back_chan_attrs: ChannelAttrs4::decode(dec)?,
            csa_cb_program: dec.u32()?,
            csa_sec_parms: dec.array(SMALL_ARRAY_DECODE_MAX, CallbackSecParms4::decode)?,
        })
    }
}

xdr_struct! {
    /// RFC 8881 §18.36 `CREATE_SESSION4resok`.
    pub struct CreateSession4ResOk {
        /// The new session.
        pub csr_sessionid: SessionId4,
        /// `csa_sequence` echoed.
        pub csr_sequence: SequenceId4,
        /// `CREATE_SESSION4_FLAG_*` granted.
        pub csr_flags: u32,
        /// Fore channel attributes granted.
        pub csr_fore_chan_attrs: ChannelAttrs4,
        /// Back channel attributes granted.
        pub csr_back_chan_attrs: ChannelAttrs4,
    }
}

/// RFC 8881 §18.36 `CREATE_SESSION4res`.
pub type CreateSession4Res = Res4<CreateSession4ResOk>;

xdr_struct! {
    /// RFC 8881 §18.46 `SEQUENCE4args`.
    #[derive(Copy)]
    pub struct Sequence4Args {
        /// The session.
        pub sa_sessionid: SessionId4,
        /// The slot's sequence id.
        pub sa_sequenceid: SequenceId4,
        /// The slot.
        pub sa_slotid: SlotId4,
        /// Highest slot the client has in use.
        pub sa_highest_slotid: SlotId4,
        /// Whether the server should cache the reply.
        pub sa_cachethis: bool,
    }
}

/// SEQUENCE status flag: the callback path is down (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
/// SEQUENCE status flag: a GSS context for the callback path expires soon.
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
/// SEQUENCE status flag: a GSS context for the callback path expired.
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
/// SEQUENCE status flag: all locks and state expired.
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
/// SEQUENCE status flag: some state expired.
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
/// SEQUENCE status flag: state revoked by the administrator.
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
/// SEQUENCE status flag: recallable state revoked.
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
/// SEQUENCE status flag: lease moved.
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x0000_0080;
/// SEQUENCE status flag: the server restarted (reclaim needed).
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
/// SEQUENCE status flag: the session's callback path is down.
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
/// SEQUENCE status flag: the backchannel has a fault.
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x0000_0400;
/// SEQUENCE status flag: devid changed.
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x0000_0800;
/// SEQUENCE status flag: devid deleted.
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x0000_1000;

xdr_struct! {
    /// RFC 8881 §18.46 `SEQUENCE4resok`.
    #[derive(Copy)]
    pub struct Sequence4ResOk {
        /// The session.
        pub sr_sessionid: SessionId4,
        /// The slot's sequence id.
        pub sr_sequenceid: SequenceId4,
        /// The slot.
        pub sr_slotid: SlotId4,
        /// Highest slot the server will accept now.
        pub sr_highest_slotid: SlotId4,
        /// Highest slot the server wants the client to use.
        pub sr_target_highest_slotid: SlotId4,
        /// `SEQ4_STATUS_*`.
        pub sr_status_flags: u32,
    }
}

/// RFC 8881 §18.46 `SEQUENCE4res`.
pub type Sequence4Res = Res4<Sequence4ResOk>;

xdr_struct! {
    /// RFC 8881 §18.37 `DESTROY_SESSION4args` (result: `nfsstat4`).
    #[derive(Copy)]
    pub struct DestroySession4Args {
        /// The session to destroy.
        pub dsa_sessionid: SessionId4,
    }
}

xdr_struct! {
    /// RFC 8881 §18.50 `DESTROY_CLIENTID4args` (result: `nfsstat4`).
    #[derive(Copy)]
    pub struct DestroyClientId4Args {
        /// The client ID to destroy.
        pub dca_clientid: ClientId4,
    }
}

open_enum! {
    /// RFC 5662 `channel_dir_from_client4`.
    pub struct ChannelDirFromClient4 {
        /// Fore channel only.
        CDFC4_FORE = 0x1,
        /// Back channel only.
        CDFC4_BACK = 0x2,
        /// Fore channel, and back channel if the server wants.
        CDFC4_FORE_OR_BOTH = 0x3,
        /// Back channel, and fore channel if the server wants.
        CDFC4_BACK_OR_BOTH = 0x7,
    }
}

open_enum! {
    /// RFC 5662 `channel_dir_from_server4`.
    pub struct ChannelDirFromServer4 {
        /// Fore channel.
        CDFS4_FORE = 0x1,
        /// Back channel.
        CDFS4_BACK = 0x2,
        /// Both.
        CDFS4_BOTH = 0x3,
    }
}

xdr_struct! {
    /// RFC 8881 §18.34 `BIND_CONN_TO_SESSION4args`.
    #[derive(Copy)]
    pub struct BindConnToSession4Args {
        /// The session.
        pub bctsa_sessid: SessionId4,
        /// Which channels to bind the connection to.
        pub bctsa_dir: ChannelDirFromClient4,
        /// Whether to use RDMA mode.
        pub bctsa_use_conn_in_rdma_mode: bool,
    }
}

xdr_struct! {
    /// RFC 8881 §18.34 `BIND_CONN_TO_SESSION4resok`.
    #[derive(Copy)]
    pub struct BindConnToSession4ResOk {
        /// The session.
        pub bctsr_sessid: SessionId4,
        /// The channels bound.
        pub bctsr_dir: ChannelDirFromServer4,
        /// Whether RDMA mode is used.
        pub bctsr_use_conn_in_rdma_mode: bool,
    }
}

/// RFC 8881 §18.34 `BIND_CONN_TO_SESSION4res`.
pub type BindConnToSession4Res = Res4<BindConnToSession4ResOk>;

xdr_struct! {
    /// RFC 8881 §18.51 `RECLAIM_COMPLETE4args` (result: `nfsstat4`).
    #[derive(Copy)]
    pub struct ReclaimComplete4Args {
        /// TRUE: reclaim is complete for the current file handle's file system only.
        pub rca_one_fs: bool,
    }
}
