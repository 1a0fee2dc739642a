//! The few ONC RPC words the transport itself reads or writes (RFC 5531 §9).
//!
//! The transport reads the XID and message type of a Payload stream (to check the XID
//! against `rdma_xid`, §5.2.1, and to tell backward-direction Calls from Replies, §7),
//! and the program, version and procedure of a Call (to ask the Upper Layer Binding
//! about DDP-eligibility, §8). A requester's binding also finds where the results of an
//! accepted Reply begin ([`results_offset`]), to say where DDP-eligible results go back
//! in ([`crate::ulb::UpperLayerBinding::reply_ddp_offsets`]). It writes one RPC message
//! itself: the GARBAGE_ARGS reply of §5.5.2. Everything else is the `oncrpc` crate's
//! business.

use bytes::Bytes;

use crate::wire::Xid;

/// RFC 5531 `msg_type` CALL.
pub const CALL: u32 = 0;
/// RFC 5531 `msg_type` REPLY.
pub const REPLY: u32 = 1;
/// RFC 5531 `reply_stat` MSG_ACCEPTED.
pub const MSG_ACCEPTED: u32 = 0;
/// RFC 5531 `accept_stat` SUCCESS.
pub const SUCCESS: u32 = 0;
/// RFC 5531 `accept_stat` GARBAGE_ARGS.
pub const GARBAGE_ARGS: u32 = 4;
/// RFC 5531 `accept_stat` SYSTEM_ERR.
pub const SYSTEM_ERR: u32 = 5;
/// RFC 5531 §8.2: "the opaque data associated with "opaque_auth" structures ... is
/// limited to 400 bytes" (`MAX_AUTH_BYTES`).
pub const MAX_AUTH_BYTES: u32 = 400;

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

/// The offset of the first result byte of an accepted, successful RPC Reply, or `None`
/// for any other message (a Call, MSG_DENIED, an `accept_stat` other than SUCCESS) and
/// for a truncated or malformed header.
///
/// RFC 5531 §9: `xid, REPLY, reply_stat`; for MSG_ACCEPTED an `accepted_reply`, i.e.
/// `opaque_auth verf` (flavor, then `opaque body<400>`, zero-padded to a multiple of
/// four, RFC 4506 §4.10) and `accept_stat`; for SUCCESS the procedure's results follow.
/// Every length is checked before anything is skipped: no input makes it panic.
pub fn results_offset(reply: &Bytes) -> Option<usize> {
    let mut dec = xdr::Decoder::new(reply.clone());
    dec.u32().ok()?; // xid
    if dec.u32().ok()? != REPLY || dec.u32().ok()? != MSG_ACCEPTED {
        return None;
    }
    dec.u32().ok()?; // verifier flavor
    dec.opaque(MAX_AUTH_BYTES).ok()?; // verifier body (length, bytes, zero padding)
    if dec.u32().ok()? != SUCCESS {
        return None;
    }
    Some(dec.position())
}

/// A decoder over a Call message, placed at its first argument byte; `None` for a
/// message that is not a Call or whose header is truncated or malformed.
///
/// RFC 5531 §9: `xid, CALL, rpcvers, prog, vers, proc`, then `opaque_auth cred` and
/// `opaque_auth verf` (each a flavor, then `opaque body<400>`), then the procedure's
/// arguments. Every length is checked before anything is skipped.
pub fn call_args(call: &Bytes) -> Option<xdr::Decoder> {
    let mut dec = xdr::Decoder::new(call.clone());
    dec.u32().ok()?; // xid
    if dec.u32().ok()? != CALL {
        return None;
    }
    for _ in 0..4 {
        dec.u32().ok()?; // rpcvers, prog, vers, proc
    }
    for _ in 0..2 {
        dec.u32().ok()?; // flavor
        dec.opaque(MAX_AUTH_BYTES).ok()?; // body
    }
    Some(dec)
}

/// The RPC reply `xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SYSTEM_ERR`: "errors
/// like memory allocation failure" (RFC 5531 §9), the RPC-layer error for a Call
/// beyond the credits granted (rfc5666bis §4.3.1).
pub fn system_err_reply(xid: Xid) -> Bytes {
    let words = [xid.0, REPLY, MSG_ACCEPTED, 0, 0, SYSTEM_ERR];
    Bytes::from(
        words
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<u8>>(),
    )
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

    /// `xid, REPLY, MSG_ACCEPTED`, a verifier of `verf` bytes (zero-padded), then
    /// `accept_stat` and one result word.
    fn accepted(verf: &[u8], stat: u32) -> Bytes {
        let mut b = Vec::new();
        for w in [9, REPLY, MSG_ACCEPTED, 6, verf.len() as u32] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b.extend_from_slice(verf);
        b.resize(b.len() + (4 - verf.len() % 4) % 4, 0);
        b.extend_from_slice(&stat.to_be_bytes());
        b.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn results_offset_skips_the_verifier() {
        // AUTH_NONE: 6 words of header.
        assert_eq!(results_offset(&words(&[9, 1, 0, 0, 0, 0, 7])), Some(24));
        // A 5-byte verifier takes 8 bytes with its padding.
        assert_eq!(
            results_offset(&accepted(&[1, 2, 3, 4, 5], SUCCESS)),
            Some(32)
        );
        // RFC 5531 §8.2: the largest verifier.
        assert_eq!(results_offset(&accepted(&[7; 400], SUCCESS)), Some(424));
    }

    #[test]
    fn results_offset_is_none_for_anything_but_success() {
        // MSG_DENIED (AUTH_ERROR), a non-SUCCESS accept_stat, a Call, a verifier over
        // 400 bytes, non-zero padding.
        assert_eq!(results_offset(&words(&[9, 1, 1, 1, 1])), None);
        assert_eq!(results_offset(&accepted(&[], GARBAGE_ARGS)), None);
        assert_eq!(results_offset(&hex(NULL_CALL_RPC)), None);
        assert_eq!(results_offset(&accepted(&[7; 401], SUCCESS)), None);
        let mut bad_pad = accepted(&[1], SUCCESS).to_vec();
        bad_pad[21] = 0xff;
        assert_eq!(results_offset(&Bytes::from(bad_pad)), None);
    }

    #[test]
    fn results_offset_of_every_truncation_is_none() {
        for full in [accepted(&[1, 2, 3, 4, 5], SUCCESS), accepted(&[], SUCCESS)] {
            let at = results_offset(&full).unwrap();
            for n in 0..at {
                assert_eq!(results_offset(&full.slice(..n)), None, "{n} bytes");
            }
            // The results may be empty (a void procedure).
            assert_eq!(results_offset(&full.slice(..at)), Some(at));
        }
        // A verifier length near u32::MAX.
        assert_eq!(results_offset(&words(&[9, 1, 0, 6, u32::MAX, 0])), None);
    }

    #[test]
    fn garbage_args_reply_bytes() {
        assert_eq!(
            garbage_args_reply(Xid(0xabcd)),
            words(&[0xabcd, 1, 0, 0, 0, 4])
        );
    }
}
