//! What the transport needs from an Upper Layer Binding
//! (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8).
//!
//! [`rpcrdma::ulb::UpperLayerBinding`] answers the reply sizes and the DDP-eligible
//! arguments. A requester that received DDP-eligible results in Write chunks must also
//! put them back into the reply stream at the right place (Linux has the upper layer's
//! XDR decoder do it, `rpcrdma_inline_fixup`); [`RdmaBinding::reply_ddp_offsets`] is
//! that knowledge, until the core's binding trait carries it.

use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::UpperLayerBinding;
use xdr::Decoder;

/// An Upper Layer Binding usable by the transport.
pub trait RdmaBinding: UpperLayerBinding + Send + Sync + 'static {
    /// Offsets in `reply` (the reduced RPC reply message, from its XID, with the data of
    /// each result moved to a Write chunk left out and its count word kept) just after
    /// the count word of each DDP-eligible result, in order. Empty when the reply has no
    /// such result (an error status); `None` when `reply` does not parse.
    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &xdr::Bytes) -> Option<Vec<usize>>;
}

/// The offset of the first result byte of an accepted, successful RPC reply (after the
/// RFC 5531 reply header with its verifier), or `None` for any other reply.
pub fn results_offset(reply: &xdr::Bytes) -> Option<usize> {
    let mut dec = Decoder::new(reply.clone());
    let h = oncrpc::message::ReplyHeader::decode(&mut dec).ok()?;
    match h.body {
        oncrpc::ReplyBody::Accepted {
            status: oncrpc::AcceptedStatus::Success,
            ..
        } => Some(dec.position()),
        _ => None,
    }
}
