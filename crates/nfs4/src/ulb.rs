//! The NFS Version 4 Upper-Layer Binding for RPC-over-RDMA (RFC 8267 §5), as far as it
//! is a property of the protocol rather than of a transport.
//!
//! - DDP-eligibility (§5.1): "Only the following XDR data items in the COMPOUND
//!   procedure of all NFS version 4 minor versions are DDP-eligible": the opaque
//!   `data` of WRITE4args, the `linkdata` of CREATE4args' NF4LNK arm, the opaque
//!   `data` of READ4resok and the `link` of READLINK4resok. Nothing else, and nothing
//!   of NULL or of the callback program. This crate's encoders mark them with
//!   [`xdr::Encoder::ddp_opaque`] ([`crate::DdpData`], [`crate::DdpLinkText4`]).
//! - Several DDP-eligible items per COMPOUND (§5.4.1): a COMPOUND may hold several
//!   WRITEs (Read chunks are matched to them by their XDR position) and several READs
//!   ("The first chunk in the Write list MUST be used by the first READ operation in
//!   an NFS version 4 COMPOUND procedure. The next Write chunk is used by the next READ
//!   operation, and so on."; a READ without a Write chunk returns its data inline).
//! - Reply size (§5.2): some results have no protocol bound (`attrlist4`, ACLs,
//!   `fs_locations4`, layout bodies), so a requester cannot always compute the largest
//!   reply; for minor version 1 and later §5.2.2 makes the session's
//!   `ca_maxresponsesize` the bound to use then. [`max_resop_size`] gives the exact
//!   bound of each result that has one and `None` for the others;
//!   [`max_compound_reply_size`] sums them for a COMPOUND.
//!
//! The RPC-over-RDMA side (the `rpcrdma::ulb::UpperLayerBinding` implementation,
//! `Nfs4Binding`) is in `rdma`, behind the `rdma` feature.

use xdr::{Bytes, DataItem, Decode, Decoder};

use crate::compound::NfsArgop4;
use crate::fh::PutFh4Args;
use crate::io::StableHow4;
use crate::session::Sequence4Args;
use crate::{
    NfsOpnum4, StateId4, MAX_OPS_DECODE, NFS4_FHSIZE, NFS4_SESSIONID_SIZE, TAG_DECODE_MAX,
};

/// Where the first WRITE's data lies in a COMPOUND's arguments, from their first
/// bytes `args` (not necessarily all of them): the DDP-eligible item (§5.1) a
/// byte-stream transport may receive apart (`oncrpc::tcp::call_data`), as
/// RPC-over-RDMA receives it by Read chunk. `None` when the first WRITE's arguments up
/// to its data's length word do not decode from `args`, or when an operation other
/// than SEQUENCE and the file-handle ones comes before it (a CREATE, whose link text
/// is DDP-eligible too, among them): such calls are read whole.
pub fn call_data_item(args: &[u8]) -> Option<DataItem> {
    let mut dec = Decoder::new(Bytes::copy_from_slice(args));
    dec.string(TAG_DECODE_MAX).ok()?;
    dec.u32().ok()?; // minorversion
    let opcount = dec.u32().ok()?.min(MAX_OPS_DECODE);
    for _ in 0..opcount {
        let op = NfsOpnum4::decode(&mut dec).ok()?;
        match op {
            NfsOpnum4::OP_WRITE => {
                StateId4::decode(&mut dec).ok()?;
                dec.u64().ok()?; // offset
                StableHow4::decode(&mut dec).ok()?;
                let len = dec.u32().ok()?;
                return Some(DataItem {
                    offset: dec.position(),
                    len: len as usize,
                });
            }
            // The operations that come before a WRITE in practice (the Linux client
            // sends SEQUENCE, PUTFH, WRITE); after any other, the call is read whole.
            NfsOpnum4::OP_SEQUENCE => {
                Sequence4Args::decode(&mut dec).ok()?;
            }
            NfsOpnum4::OP_PUTFH => {
                PutFh4Args::decode(&mut dec).ok()?;
            }
            NfsOpnum4::OP_PUTROOTFH
            | NfsOpnum4::OP_PUTPUBFH
            | NfsOpnum4::OP_SAVEFH
            | NfsOpnum4::OP_RESTOREFH
            | NfsOpnum4::OP_GETFH => {}
            _ => return None,
        }
    }
    None
}

/// The NFS/RDMA port 20049 (RFC 8267, as for NFSv3: `nfs3::ulb::NFS_RDMA_PORT`).
pub const NFS_RDMA_PORT: u16 = 20049;
/// Netid for NFS over RDMA on IPv4.
pub const NETID_RDMA: &str = "rdma";
/// Netid for NFS over RDMA on IPv6.
pub const NETID_RDMA6: &str = "rdma6";

/// Longest symbolic link text this binding sizes replies for (Linux `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// RFC 8267 §5.1: whether operation `op`'s arguments hold a DDP-eligible item (WRITE's
/// data; CREATE's `linkdata` when it creates a symbolic link).
pub fn argop_has_ddp_item(op: NfsOpnum4) -> bool {
    matches!(op, NfsOpnum4::OP_WRITE | NfsOpnum4::OP_CREATE)
}

/// RFC 8267 §5.1: whether operation `op`'s result holds a DDP-eligible item (READ's
/// data, READLINK's link text).
pub fn resop_has_ddp_item(op: NfsOpnum4) -> bool {
    matches!(op, NfsOpnum4::OP_READ | NfsOpnum4::OP_READLINK)
}

/// The number of a result plus its status word.
const OP_STATUS: usize = 8;

/// Largest encoded `nfs_resop4` (opnum, status and result) of operation `args`,
/// counting DDP-eligible data in full, or `None` when RFC 5662 puts no bound on it
/// (GETATTR's `attrlist4`, SECINFO's list, EXCHANGE_ID's implementation id and scope
/// strings; RFC 8267 §5.2) or the operation is not coded here.
///
/// Any operation's error result is at most 12 bytes (SETATTR's; LOCK's and LOCKT's
/// NFS4ERR_DENIED arm is counted), within every bound given here.
pub fn max_resop_size(args: &NfsArgop4) -> Option<usize> {
    const FH: usize = 4 + NFS4_FHSIZE as usize;
    const CHANNEL_ATTRS: usize = 6 * 4 + 4 + 4;
    const CINFO: usize = 4 + 8 + 8;
    const STATEID: usize = 16;
    Some(match args {
        NfsArgop4::Lookup(_)
        | NfsArgop4::LookupP
        | NfsArgop4::PutFh(_)
        | NfsArgop4::PutPubFh
        | NfsArgop4::PutRootFh
        | NfsArgop4::RestoreFh
        | NfsArgop4::SaveFh
        | NfsArgop4::DestroySession(_)
        | NfsArgop4::DestroyClientId(_)
        | NfsArgop4::ReclaimComplete(_) => OP_STATUS,
        NfsArgop4::Access(_) => OP_STATUS + 8,
        NfsArgop4::Commit(_) => OP_STATUS + 8,
        NfsArgop4::GetFh => OP_STATUS + FH,
        // eof, the data's length word, the data and its padding.
        NfsArgop4::Read(a) => OP_STATUS + 4 + 4 + xdr::padded_len(a.count as usize),
        NfsArgop4::ReadLink => OP_STATUS + 4 + MAX_PATH,
        NfsArgop4::Write(_) => OP_STATUS + 4 + 4 + 8,
        NfsArgop4::Sequence(_) => OP_STATUS + NFS4_SESSIONID_SIZE + 5 * 4,
        NfsArgop4::CreateSession(_) => OP_STATUS + NFS4_SESSIONID_SIZE + 8 + 2 * CHANNEL_ATTRS,
        NfsArgop4::BindConnToSession(_) => OP_STATUS + NFS4_SESSIONID_SIZE + 8,
        NfsArgop4::Verify(_)
        | NfsArgop4::NVerify(_)
        | NfsArgop4::FreeStateId(_)
        | NfsArgop4::DelegReturn(_) => OP_STATUS,
        NfsArgop4::Remove(_) | NfsArgop4::Link(_) => OP_STATUS + CINFO,
        NfsArgop4::Rename(_) => OP_STATUS + 2 * CINFO,
        // `attrset` / `attrsset` name a subset of the attributes asked to be set.
        NfsArgop4::Create(a) => OP_STATUS + CINFO + 4 + 4 * a.createattrs.attrmask.0.len(),
        NfsArgop4::SetAttr(a) => OP_STATUS + 4 + 4 * a.obj_attributes.attrmask.0.len(),
        // §18.23.3: maxcount is "the maximum size of the READDIR4resok structure".
        NfsArgop4::ReadDir(a) => OP_STATUS + (a.maxcount as usize).max(8 + 4 + 4),
        NfsArgop4::Close(_) | NfsArgop4::OpenDowngrade(_) | NfsArgop4::LockU(_) => {
            OP_STATUS + STATEID
        }
        // The NFS4ERR_DENIED arm: offset, length, type, owner (clientid, opaque<1024>).
        NfsArgop4::Lock(_) | NfsArgop4::LockT(_) => OP_STATUS + 8 + 8 + 4 + 8 + 4 + 1024,
        NfsArgop4::TestStateId(a) => OP_STATUS + 4 + 4 * a.0.len(),
        // OPEN's delegation carries an ACE whose `who` is an unbounded string.
        NfsArgop4::Open(_)
        | NfsArgop4::GetAttr(_)
        | NfsArgop4::SecInfo(_)
        | NfsArgop4::SecInfoNoName(_)
        | NfsArgop4::ExchangeId(_)
        | NfsArgop4::Unknown(_) => return None,
    })
}

/// Like [`max_resop_size`], without the DDP-eligible data: what stays inline when a
/// READ's data moves through a Write chunk (its length word stays inline).
pub fn max_inline_resop_size(args: &NfsArgop4) -> Option<usize> {
    match args {
        NfsArgop4::Read(_) => Some(OP_STATUS + 4 + 4),
        NfsArgop4::ReadLink => Some(OP_STATUS + 4),
        other => max_resop_size(other),
    }
}

/// Largest encoded `COMPOUND4res` answering `ops` with a tag of `tag_len` bytes (the
/// reply echoes it), or `None` if one of the results has no bound (RFC 8267 §5.2: then
/// the session's `ca_maxresponsesize` is the bound).
pub fn max_compound_reply_size(tag_len: usize, ops: &[NfsArgop4]) -> Option<usize> {
    let header = 4 + 4 + xdr::padded_len(tag_len) + 4;
    ops.iter()
        .try_fold(header, |sum, op| Some(sum + max_resop_size(op)?))
}
