//! Version Two optional features: the registry where they plug in, and the one this
//! crate defines, responder-provided Read chunks ("reliable reply").
//!
//! Specs: rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1, §3.2, §4.2;
//! draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1, §6.
//!
//! # The registry
//! [`REGISTRY`] is the one table of `rdma_opttype` values this crate knows. A received
//! RDMA_OPTIONAL whose type is not in [`crate::Policy::options`] is refused by
//! [`crate::validate::receive`] with ERR_INVAL_OPTION (v2 §3.1: "When an implementation
//! does not recognize or support the value contained in the rdma_opttype field, it MUST
//! send ... RDMA_ERR_INVAL_OPTION"); one that is listed is looked up here
//! ([`lookup`]) and dispatched by the state machines on the [`Feature`] it names. Adding
//! a feature is: a row in [`REGISTRY`], a [`Feature`] variant, and its `optinfo` codec
//! beside [`ReliableReplyInfo`]; an option listed in a policy that has no row is
//! answered ERR_INVAL_OPTION by the state machines too (nothing can handle it).
//!
//! # Reliable reply on the wire (our definition)
//! The reliable-reply draft §6 requires that responder-provided Read chunks "MUST be
//! used only when both peers support them: ... the base protocol provides an extension
//! mechanism that indicates when support is available." Version Two's extension
//! mechanism is RDMA_OPTIONAL; no document assigns an `rdma_opttype`, so this crate
//! uses a value from a range no standard is likely to take (see [`RELIABLE_REPLY`]):
//!
//! ```text
//! const RPCRDMA2_OPT_RELIABLE_REPLY = 0x52525031;   /* "RRP1" */
//! const RR_F_REMOTE_INVALIDATE      = 0x00000001;
//!
//! struct rpcrdma2_reliable_reply {     /* rdma_optinfo of RPCRDMA2_OPT_RELIABLE_REPLY */
//!         uint32 rr_flags;
//! };
//! ```
//!
//! 1. Once Version Two is settled (the first non-error v2 Reply, v2 §5.1), a requester
//!    that can pull replies sends RDMA_OPTIONAL(RELIABLE_REPLY) with no Payload stream
//!    (v2 §3.2 asks each new opttype to say: a Payload stream MUST NOT follow). Its
//!    `rdma_xid` is the XID of the Call whose Reply settled the version (that
//!    transaction is complete; messages are told apart by `rdma_proc`); `rdma_credit`
//!    is the requester's credit request, and it takes a credit like a Call.
//!    `RR_F_REMOTE_INVALIDATE` in it says "I can send pull completion with Send With
//!    Invalidate".
//! 2. A responder that supports the feature answers with RDMA_OPTIONAL(RELIABLE_REPLY),
//!    same XID, its credit grant in `rdma_credit` (the requester's credit returns), no
//!    Payload stream; `RR_F_REMOTE_INVALIDATE` in it says "you may invalidate my reply
//!    Read chunks remotely". A responder that does not answers ERR_INVAL_OPTION (v2
//!    §3.1), which also returns the credit; the feature is then off.
//! 3. Both peers now know. Pull completion is the Version Two `RDMA_DONE` message
//!    (`rdma_proc` 3, void body, reserved by the v2 base XDR), 16 bytes, sent by Send With
//!    Invalidate of the reply chunk's one STag when both sides set `RR_F_REMOTE_INVALIDATE`
//!    (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.4), else by Send. Without the
//!    feature, RDMA_DONE stays refused with ERR_BADHEADER (v1 §5.6.2).

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::OptType;

/// `RPCRDMA2_OPT_RELIABLE_REPLY`: this crate's `rdma_opttype` advertising support for
/// responder-provided Read chunks (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §6). The
/// value spells "RRP1" in ASCII: far from the small integers a Standards Track document
/// would assign first.
pub const RELIABLE_REPLY: OptType = OptType(0x5252_5031);

/// `RR_F_REMOTE_INVALIDATE` in `rr_flags`.
pub const RR_F_REMOTE_INVALIDATE: u32 = 1;

/// An optional feature this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// Responder-provided Read chunks with RDMA_DONE pull completion
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05).
    ReliableReply,
}

/// One row of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// The `rdma_opttype`.
    pub opttype: OptType,
    /// The feature it belongs to.
    pub feature: Feature,
    /// v2 draft §3.2: whether "an RPC Payload Stream MUST or MUST NOT follow the
    /// Transport Header Stream" for this opttype.
    pub payload_follows: bool,
    /// Where the feature is specified.
    pub spec: &'static str,
}

/// Every `rdma_opttype` this crate knows.
pub const REGISTRY: &[Registered] = &[Registered {
    opttype: RELIABLE_REPLY,
    feature: Feature::ReliableReply,
    payload_follows: false,
    spec: "draft-cel-nfsv4-rpcrdma-reliable-reply-05 §6; docs/rpcrdma-v2.md",
}];

/// The registry row of `opttype`, if this crate implements it.
pub fn lookup(opttype: OptType) -> Option<&'static Registered> {
    REGISTRY.iter().find(|r| r.opttype == opttype)
}

/// `rpcrdma2_reliable_reply`, the `rdma_optinfo` of [`RELIABLE_REPLY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReliableReplyInfo {
    /// `rr_flags` & [`RR_F_REMOTE_INVALIDATE`].
    pub remote_invalidate: bool,
}

impl ReliableReplyInfo {
    /// Bytes of the encoding.
    pub const LEN: usize = 4;

    /// Decodes `optinfo`. Unknown flag bits are ignored (a later revision may add
    /// some); a short `optinfo` is `None`, answered like an unknown option. Never
    /// panics.
    pub fn parse(optinfo: &[u8]) -> Option<Self> {
        let w = optinfo.get(..4)?;
        let flags = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        Some(ReliableReplyInfo {
            remote_invalidate: flags & RR_F_REMOTE_INVALIDATE != 0,
        })
    }

    /// The encoding.
    pub fn to_bytes(self) -> Bytes {
        let mut b = BytesMut::with_capacity(Self::LEN);
        b.put_u32(if self.remote_invalidate {
            RR_F_REMOTE_INVALIDATE
        } else {
            0
        });
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_s3_2_registry_rows_say_whether_a_payload_follows() {
        let r = lookup(RELIABLE_REPLY).unwrap();
        assert_eq!(r.feature, Feature::ReliableReply);
        assert!(!r.payload_follows);
        assert_eq!(lookup(OptType(7)), None);
    }

    #[test]
    fn reliable_reply_info_round_trips_and_ignores_unknown_flags() {
        let i = ReliableReplyInfo {
            remote_invalidate: true,
        };
        assert_eq!(&i.to_bytes()[..], &[0, 0, 0, 1]);
        assert_eq!(ReliableReplyInfo::parse(&i.to_bytes()), Some(i));
        assert_eq!(
            ReliableReplyInfo::parse(&[0xff, 0, 0, 2]),
            Some(ReliableReplyInfo::default())
        );
        assert_eq!(ReliableReplyInfo::parse(&[0, 0, 1]), None);
    }
}
