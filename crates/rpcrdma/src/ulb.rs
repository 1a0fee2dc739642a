//! The Upper Layer Binding interface (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8).
//!
//! §8: "For RPC-over-RDMA Version One, a ULB provides: A taxonomy of XDR data items
//! that are eligible for Direct Data Placement; A method for determining the maximum
//! size of the reply Payload stream for all procedures in the Upper Layer Protocol".
//!
//! The upper layer (NFSv3 per RFC 8267, ...) implements [`UpperLayerBinding`] once per
//! program. On the sending side it marks DDP-eligible items itself, with
//! [`xdr::Encoder::ddp_opaque`]; this trait answers what the transport must know about
//! the *other* message of the exchange: how big a reply can be and which of its
//! results are DDP-eligible (for the requester's Write list and Reply chunk), and how
//! many DDP-eligible arguments a received Call may carry (for the responder's
//! §8.1.1 check).

use xdr::XdrStream;

use crate::rpc::ProcId;

/// What a requester must provide for one Call's reply (§8.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplySizing {
    /// Largest possible reply Payload stream (whole RPC reply message), in bytes.
    pub max_reply: u32,
    /// Largest size of each DDP-eligible result, in reply order: one Write chunk each.
    pub ddp_results: Vec<u32>,
}

/// An Upper Layer Binding: per-procedure facts the transport needs.
pub trait UpperLayerBinding {
    /// §8: "Requesters MUST NOT send RPC-over-RDMA messages for Upper Layer Protocols
    /// that do not have a Upper Layer Binding. Responders MUST NOT reply to
    /// RPC-over-RDMA messages for Upper Layer Protocols that do not have a Upper Layer
    /// Binding." True if this binding covers `prog`/`vers`.
    fn binds(&self, prog: u32, vers: u32) -> bool;

    /// §8.2: the reply resources a requester must allocate for `call` (the encoded
    /// Call, so that e.g. an NFS READ's count can be read back).
    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing;

    /// §8.1: how many DDP-eligible arguments a Call of `proc_id` has (0 for most
    /// procedures; 1 for NFSv3 WRITE and SYMLINK). A received Call with more Read
    /// chunks (other than a Position Zero Read chunk) carries a non-DDP-eligible item
    /// in a Read chunk and is refused (§8.1.1).
    fn call_ddp_arguments(&self, proc_id: ProcId) -> usize;
}
