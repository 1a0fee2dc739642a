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
//! results are DDP-eligible (for the requester's Write list and Reply chunk), where
//! the data of those results goes back into the reduced Reply (for the requester's
//! reassembly), and where a received Call's DDP-eligible arguments are (for the
//! responder's §8.1.1 check).

use bytes::Bytes;
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

    /// §8.1.1: where the DDP-eligible arguments of a received Call of `proc_id` are,
    /// so that the responder can tell a Read chunk that carries one from a Read chunk
    /// placed over any other item: for each such argument, its Read chunk's Position
    /// (§4.4.5: the offset in the Payload stream where the item's data begins, just
    /// after its length word), in order. `call` is the Call's Payload stream as
    /// received, from its XID, reduced: the data of its Read chunks left out (their
    /// length words kept), so a binding parses it up to each DDP-eligible item and
    /// adds the padded lengths of the earlier ones. Empty for a procedure without
    /// DDP-eligible arguments (most; for NFSv3, all but WRITE and SYMLINK); `None`
    /// when `call` does not parse that far. A Read chunk (other than a Position Zero
    /// Read chunk) at any position not listed carries a data item that is not
    /// DDP-eligible, and the Call is refused (§8.1.1: "a responder MUST NOT process
    /// the Call message"), even where a length word there happens to match the
    /// chunk's length.
    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>>;

    /// Requester: where the data of each DDP-eligible result goes back into a Reply.
    ///
    /// §4.4.6: the responder moves the data of each DDP-eligible result it places in a
    /// Write chunk out of the Payload stream ("consumes one entry in the Write list"),
    /// and the requester must put it back at the result's position to hand its upper
    /// layer the whole message (Linux has the upper layer's XDR decoder do it,
    /// `rpcrdma_inline_fixup`). `reply` is that reduced RPC reply message, from its XID,
    /// with each such result's data left out and its length word kept; the answer is
    /// the offset in `reply` just after the length word of each DDP-eligible result, in
    /// order. Empty when the reply has no such result (an error status: see
    /// [`crate::rpc::results_offset`] for where the results start); `None` when `reply`
    /// does not parse. Never asked by a responder.
    ///
    /// The default answers `None`: a binding that never asks for Write chunks
    /// (`reply_sizing` gives no `ddp_results`) need not implement it, and one that does
    /// but forgets gets its Calls failed rather than Replies put together wrongly.
    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        let _ = (proc_id, reply);
        None
    }
}

/// The Read chunk position of a Call's first argument when it is an `opaque<>` (its
/// data right after its length word), for bindings whose one DDP-eligible argument
/// comes first; `None` when the Call does not parse that far.
pub fn first_argument_position(call: &Bytes) -> Option<Vec<u32>> {
    let mut args = crate::rpc::call_args(call)?;
    args.u32().ok()?;
    Some(vec![u32::try_from(args.position()).ok()?])
}

/// A shared binding is a binding (drivers hold theirs behind an `Arc`, often as a
/// trait object, and hand the same one to every connection's state machine).
impl<T: UpperLayerBinding + ?Sized> UpperLayerBinding for std::sync::Arc<T> {
    fn binds(&self, prog: u32, vers: u32) -> bool {
        (**self).binds(prog, vers)
    }

    fn reply_sizing(&self, proc_id: ProcId, call: &XdrStream) -> ReplySizing {
        (**self).reply_sizing(proc_id, call)
    }

    fn call_ddp_positions(&self, proc_id: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        (**self).call_ddp_positions(proc_id, call)
    }

    fn reply_ddp_offsets(&self, proc_id: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        (**self).reply_ddp_offsets(proc_id, reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{rpc_reply, TestUlb};

    #[test]
    fn reply_ddp_offsets_defaults_to_does_not_parse() {
        // A binding that does not say where placed data goes gets no guess: the
        // requester then fails the Call instead of misplacing the data.
        let reply = rpc_reply(1, &[0, 5], None).to_bytes();
        let id = ProcId {
            prog: 100_003,
            vers: 3,
            proc_num: 6,
        };
        assert_eq!(TestUlb::default().reply_ddp_offsets(id, &reply), None);
    }
}
