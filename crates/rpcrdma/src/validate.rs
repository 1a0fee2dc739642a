//! Validation of received headers, and the RDMA_ERROR that answers a bad one.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.2.1, §5.2.4, §5.5.1, §5.5.2, §5.6;
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1, §4.2.
//!
//! [`receive`] turns a received Send into a [`Received`] value or a [`HeaderError`];
//! [`error_reply`] turns that error into the RDMA_ERROR to send back (or `None`: stay
//! silent). Role-specific checks (a Reply's Write list must match its Call's) live in
//! the requester and responder state machines.
//!
//! # Checks, in order (each answered as [`crate::error::WireAnswer`] says)
//! 1. fewer than 16 bytes: discard (no XID to answer);
//! 2. RDMA_ERROR: decode whatever the version; undecodable: discard silently;
//! 3. version outside our range: ERR_VERS with our range;
//! 4. body not valid XDR, unknown type, chunk limits: ERR_BADHEADER;
//! 5. RDMA_MSGP, RDMA_DONE: ERR_BADHEADER;
//! 6. RDMA_NOMSG without chunks: ERR_BADHEADER;
//! 7. RDMA_MSG whose payload XID differs from `rdma_xid`: ERR_BADHEADER;
//! 8. RDMA_OPTIONAL of an unsupported type: ERR_INVAL_OPTION.

use bytes::Bytes;

use crate::chunks::{ChunkLists, Limits};
use crate::error::{HeaderError, WireAnswer};
use crate::header::{Body, ErrorBody, Header, Prefix, PrefixView};
use crate::wire::{ErrCode, MsgType, OptType, Version, Xid};

/// What this endpoint accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Lowest version we speak.
    pub min_version: Version,
    /// Highest version we speak.
    pub max_version: Version,
    /// Chunk list limits.
    pub limits: Limits,
    /// Version Two `rdma_opttype` values we support (none by default).
    pub options: Vec<OptType>,
}

impl Default for Policy {
    /// Versions One and Two, default limits, no optional features.
    fn default() -> Self {
        Policy {
            min_version: Version::ONE,
            max_version: Version::TWO,
            limits: Limits::default(),
            options: Vec::new(),
        }
    }
}

impl Policy {
    /// A Version One only endpoint.
    pub fn v1_only() -> Self {
        Policy {
            max_version: Version::ONE,
            ..Policy::default()
        }
    }

    /// True if `v` is in our range.
    pub fn supports(&self, v: Version) -> bool {
        self.min_version <= v && v <= self.max_version
    }
}

/// A received message that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// RDMA_MSG: chunks, and the (possibly reduced) Payload stream that followed.
    Msg {
        /// The fixed fields.
        prefix: Prefix,
        /// The chunk lists.
        chunks: ChunkLists,
        /// The inline Payload stream, a slice of the receive buffer. At least 4 bytes,
        /// starting with the header's XID.
        payload: Bytes,
    },
    /// RDMA_NOMSG: the Payload stream is in a chunk. At least one list is non-empty.
    NoMsg {
        /// The fixed fields.
        prefix: Prefix,
        /// The chunk lists.
        chunks: ChunkLists,
    },
    /// RDMA_ERROR from the peer, for `prefix.xid`.
    Error {
        /// The fixed fields.
        prefix: Prefix,
        /// The error.
        body: ErrorBody,
    },
    /// Version Two RDMA_OPTIONAL of a type listed in [`Policy::options`].
    Optional {
        /// The fixed fields.
        prefix: Prefix,
        /// `rdma_opttype`.
        opttype: OptType,
        /// `rdma_optinfo`.
        optinfo: Bytes,
        /// Whatever followed the header (the option defines whether it is a payload).
        rest: Bytes,
    },
}

impl Received {
    /// The fixed fields.
    pub fn prefix(&self) -> &Prefix {
        match self {
            Received::Msg { prefix, .. }
            | Received::NoMsg { prefix, .. }
            | Received::Error { prefix, .. }
            | Received::Optional { prefix, .. } => prefix,
        }
    }
}

/// Parses and validates one received Send. On error, the caller answers with
/// [`error_reply`] (if the prefix could be read) and drops the message.
pub fn receive(buf: &Bytes, policy: &Policy) -> Result<Received, HeaderError> {
    let prefix = PrefixView::new_checked(buf.as_ref())?.prefix();
    // RDMA_ERROR first: its ERR_VERS arm is readable whatever the version (§9.1).
    if prefix.msg_type != MsgType::RDMA_ERROR && !policy.supports(prefix.version) {
        // rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.5.1: "When a receiver detects an
        // RPC-over-RDMA header version that it does not support ..., it MUST reply with
        // an RDMA_ERROR procedure and set the rdma_err value to RDMA_ERR_VERS".
        return Err(HeaderError::UnsupportedVersion(prefix.version));
    }
    let parsed = Header::parse(buf, &policy.limits)?;
    let Header { body, .. } = parsed.header;
    match body {
        Body::Msg(chunks) => {
            let payload = buf.slice(parsed.header_len..);
            let Some(first) = payload.get(..4) else {
                return Err(HeaderError::MissingPayload);
            };
            let payload_xid = Xid(u32::from_be_bytes([first[0], first[1], first[2], first[3]]));
            // §5.2.1: "This XID MUST be the same as the XID in the RPC message." §5.5.2
            // lists a mismatch among the errors answered with RDMA_ERR_BADHEADER.
            if payload_xid != prefix.xid {
                return Err(HeaderError::XidMismatch {
                    header: prefix.xid,
                    payload: payload_xid,
                });
            }
            Ok(Received::Msg {
                prefix,
                chunks,
                payload,
            })
        }
        // v2 §4.2 (rdma_proc): "When the rdma_proc field has any other value [than
        // RDMA_MSG or RDMA_OPTIONAL], an RPC Payload Stream MUST NOT follow the Transport
        // Header Stream": answered ERR_BADHEADER (§5.5.2), as any malformed header.
        Body::NoMsg(chunks) => {
            // §5.2.4: "Though any of these MAY be marked as not present, one MUST be
            // present and MUST hold the Payload stream". §5.5.2: "an RDMA_NOMSG message
            // that has no chunk lists" is an XDR error.
            if chunks.is_empty() {
                return Err(HeaderError::NoMsgWithoutChunks);
            }
            let rest = buf.len() - parsed.header_len;
            if rest > 0 && prefix.version == Version::TWO {
                return Err(HeaderError::PayloadAfterNoMsg { len: rest });
            }
            Ok(Received::NoMsg { prefix, chunks })
        }
        // §5.6.1: "When receiving an RDMA_MSGP procedure, receivers SHOULD reply with an
        // RDMA_ERROR procedure, setting the rdma_err field to RDMA_ERR_BADHEADER."
        Body::MsgP { .. } => Err(HeaderError::MsgpReceived),
        // §5.6.2: "When receiving an RDMA_DONE procedure, receivers SHOULD reply with an
        // RDMA_ERROR procedure, setting the rdma_err field to RDMA_ERR_BADHEADER."
        Body::Done => Err(HeaderError::DoneReceived),
        // v2 §4.2: no Payload stream after an RDMA_ERROR either; one that has bytes
        // after it is malformed, and §5.5: "A receiver MUST silently discard an
        // RDMA_ERROR procedure that cannot be decoded." (Version One's Table 1 says
        // neither procedure has a Payload stream, but makes no rule of it: Version One
        // peers are taken as they come, as Linux does.)
        Body::Error(_) if prefix.version == Version::TWO && parsed.header_len < buf.len() => {
            Err(HeaderError::UndecodableError)
        }
        Body::Error(body) => Ok(Received::Error { prefix, body }),
        Body::Optional { opttype, optinfo } => {
            // v2 draft §3.1: "When an implementation does not recognize or support the
            // value contained in the rdma_opttype field, it MUST send ... RDMA_ERROR, and
            // the rdma_err field set to RDMA_ERR_INVAL_OPTION."
            if !policy.options.contains(&opttype) {
                return Err(HeaderError::UnknownOption(opttype));
            }
            Ok(Received::Optional {
                prefix,
                opttype,
                optinfo,
                rest: buf.slice(parsed.header_len..),
            })
        }
    }
}

/// The RDMA_ERROR answering `err` for a message that began with `buf`, granting
/// `credits`; `None` when the spec says to stay silent (or there is no XID to echo).
pub fn error_reply(buf: &[u8], err: &HeaderError, credits: u32, policy: &Policy) -> Option<Header> {
    let prefix = PrefixView::new_checked(buf).ok()?.prefix();
    error_reply_for(&prefix, err, credits, policy)
}

/// Like [`error_reply`], from an already-read prefix.
pub fn error_reply_for(
    prefix: &Prefix,
    err: &HeaderError,
    credits: u32,
    policy: &Policy,
) -> Option<Header> {
    // Never answer an RDMA_ERROR with an RDMA_ERROR: that could loop between peers.
    if prefix.msg_type == MsgType::RDMA_ERROR {
        return None;
    }
    let body = match WireAnswer::from(err) {
        WireAnswer::RdmaError(ErrCode::ERR_VERS) => ErrorBody::Vers {
            // §5.5.1: "also providing the low and high inclusive version numbers it
            // does, in fact, support."
            low: policy.min_version,
            high: policy.max_version,
        },
        WireAnswer::RdmaError(ErrCode::ERR_INVAL_OPTION) => ErrorBody::InvalOption,
        WireAnswer::RdmaError(_) => ErrorBody::BadHeader,
        WireAnswer::GarbageArgs | WireAnswer::Discard | WireAnswer::Local => return None,
    };
    Some(Header::error_reply(prefix, credits, body))
}

#[cfg(test)]
mod tests;
