//! The few ONC RPC words the transport itself reads or writes (RFC 5531 §9).
//!
//! The transport reads the XID and message type of a Payload stream (to check the XID
//! against `rdma_xid`, §5.2.1, and to tell backward-direction Calls from Replies, §7),
//! and the program, version and procedure of a Call (to ask the Upper Layer Binding
//! about DDP-eligibility, §8). It writes one RPC message itself: the GARBAGE_ARGS reply
//! of §5.5.2. Everything else is the `oncrpc` crate's business.

use bytes::Bytes;

use crate::wire::Xid;

/// RFC 5531 `msg_type` CALL.
pub const CALL: u32 = 0;
/// RFC 5531 `msg_type` REPLY.
pub const REPLY: u32 = 1;
/// RFC 5531 `accept_stat` GARBAGE_ARGS.
pub const GARBAGE_ARGS: u32 = 4;

/// Program, version and procedure of a Call: the key of the Upper Layer Binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcId {
    /// RPC program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
}

fn word(b: &[u8], i: usize) -> Option<u32> {
    let w = b.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The XID, first word of every RPC message.
pub fn xid(payload: &[u8]) -> Option<Xid> {
    word(payload, 0).map(Xid)
}

/// The `msg_type` word (CALL or REPLY).
pub fn msg_type(payload: &[u8]) -> Option<u32> {
    word(payload, 1)
}

/// Program, version and procedure of a Call message (`xid, CALL, rpcvers, prog, vers,
/// proc`); `None` if `payload` is not a Call or is too short.
pub fn call_proc(payload: &[u8]) -> Option<ProcId> {
    if word(payload, 1)? != CALL {
        return None;
    }
    Some(ProcId {
        prog: word(payload, 3)?,
        vers: word(payload, 4)?,
        proc_num: word(payload, 5)?,
    })
}

/// The RPC reply `xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, GARBAGE_ARGS`.
///
/// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.5.2: "the responder SHOULD return a
/// RPC_GARBAGEARGS reply, using an RDMA_MSG procedure."
pub fn garbage_args_reply(xid: Xid) -> Bytes {
    let words = [xid.0, REPLY, 0, 0, 0, GARBAGE_ARGS];
    Bytes::from(
        words
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<u8>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hex, vectors::NULL_CALL_RPC, words};

    #[test]
    fn reads_linux_null_call() {
        let call = hex(NULL_CALL_RPC);
        assert_eq!(xid(&call), Some(Xid(0x02c7_04b8)));
        assert_eq!(msg_type(&call), Some(CALL));
        assert_eq!(
            call_proc(&call),
            Some(ProcId {
                prog: 100_003,
                vers: 3,
                proc_num: 0
            })
        );
        assert_eq!(call_proc(&call[..20]), None);
    }

    #[test]
    fn garbage_args_reply_bytes() {
        assert_eq!(
            garbage_args_reply(Xid(0xabcd)),
            words(&[0xabcd, 1, 0, 0, 0, 4])
        );
    }
}
