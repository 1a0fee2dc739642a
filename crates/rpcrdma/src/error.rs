//! The crate's one error type, its sub-enums, and what each means on the wire.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.5, §5.6, §8.1.1;
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §3.1.
//!
//! Like rustls' `Error` and h2's `proto::Error`, every error says two things, each by
//! a tested `From` impl:
//! - its [`WireAnswer`]: the RDMA_ERROR code to send, an RPC reply with accept_stat
//!   GARBAGE_ARGS, silence, or nothing sent to the peer (a local condition);
//! - its [`Scope`]: drop this message, fail this RPC, or drop the connection.
//!
//! The XDR layer's [`xdr::XdrError`] only says what was wrong with the bytes; this
//! module says what that means for RPC-over-RDMA (ERR_BADHEADER for a header).

use crate::wire::{ErrCode, MsgType, OptType, Version, Xid};

/// Everything that can go wrong in the protocol core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A received transport header is unacceptable.
    #[error("bad RPC-over-RDMA header: {0}")]
    Header(#[from] HeaderError),
    /// A received Call's Payload stream does not agree with its chunks (responder).
    #[error("bad RPC arguments: {0}")]
    Args(#[from] ArgsError),
    /// A received Reply cannot be completed (requester).
    #[error("bad RPC reply: {0}")]
    Reply(#[from] ReplyError),
    /// We cannot build the message we were asked to send.
    #[error("cannot marshal: {0}")]
    Marshal(#[from] MarshalError),
    /// Credit accounting refuses the operation.
    #[error("credits: {0}")]
    Credit(#[from] CreditError),
}

/// Why a received RPC-over-RDMA header was refused (§5.5.1, §5.5.2, §5.6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Fewer than the 16 bytes of the fixed header: there is no XID to answer.
    #[error("message of {len} bytes is shorter than the fixed header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// §5.5.1: a version we do not support.
    #[error("unsupported RPC-over-RDMA version {0:?}")]
    UnsupportedVersion(Version),
    /// The header is not valid XDR (truncated list, bad optional-data flag, ...).
    #[error("malformed header XDR: {0}")]
    Xdr(#[from] xdr::XdrError),
    /// §5.1.4: "an undefined header type ... is to be treated as an XDR encode/decode
    /// error".
    #[error("unknown message type {0:?}")]
    UnknownMsgType(MsgType),
    /// §5.6.1: RDMA_MSGP is no longer supported.
    #[error("RDMA_MSGP is not supported")]
    MsgpReceived,
    /// §5.6.2: RDMA_DONE is no longer supported.
    #[error("RDMA_DONE is not supported")]
    DoneReceived,
    /// §5.5.2: "an RDMA_NOMSG message that has no chunk lists".
    #[error("RDMA_NOMSG without chunks")]
    NoMsgWithoutChunks,
    /// RDMA_NOMSG whose chunks cannot hold the Payload stream for our role (a Call
    /// without a Position Zero Read chunk; a Reply without a Reply chunk).
    #[error("RDMA_NOMSG has no chunk holding the payload")]
    NoPayloadChunk,
    /// Version Two RDMA_NOMSG followed by bytes: v2 §4.2 (the `rdma_proc` field):
    /// "When the rdma_proc field has any other value [than RDMA_MSG or RDMA_OPTIONAL],
    /// an RPC Payload Stream MUST NOT follow the Transport Header Stream."
    #[error("{len} bytes follow an RDMA_NOMSG header")]
    PayloadAfterNoMsg {
        /// Bytes after the header.
        len: usize,
    },
    /// RDMA_MSG whose Payload stream is too short to hold an XID.
    #[error("RDMA_MSG without a payload")]
    MissingPayload,
    /// §5.2.1 / §5.5.2: the header XID differs from the RPC message's XID.
    #[error("header XID {header:?} does not match payload XID {payload:?}")]
    XidMismatch {
        /// `rdma_xid`.
        header: Xid,
        /// The first word of the Payload stream.
        payload: Xid,
    },
    /// A chunk has more segments than our limit.
    #[error("chunk has more than {max} segments")]
    TooManySegments {
        /// The limit.
        max: u32,
    },
    /// A list has more chunks than our limit.
    #[error("list has more than {max} chunks")]
    TooManyChunks {
        /// The limit.
        max: u32,
    },
    /// The header names more segments than our limit.
    #[error("header has more than {max} segments")]
    TooManyTotalSegments {
        /// The limit.
        max: u32,
    },
    /// A Write or Reply chunk with zero segments.
    #[error("chunk with no segments")]
    EmptyChunk,
    /// §4.4.5.1: a Read segment Position that is not a multiple of four.
    #[error("read position {0} is not a multiple of four")]
    MisalignedPosition(u32),
    /// The same Position used by two separate runs of Read segments.
    #[error("read position {0} appears in two chunks")]
    DuplicatePosition(u32),
    /// A Reply carries a Read list (Linux's client refuses it too).
    #[error("read list in a reply")]
    ReadListInReply,
    /// A Reply's Write list does not match the one the Call provided (§4.4.6: "The
    /// responder MUST NOT change the number of segments in the Write chunk").
    #[error("reply write list does not match the call's")]
    WriteListMismatch,
    /// A Reply uses more of a chunk than the requester provided.
    #[error("reply chunk or write chunk overrun")]
    ChunkOverrun,
    /// A Reply for an XID with no Call outstanding.
    #[error("no call outstanding for {0:?}")]
    UnknownXid(Xid),
    /// v2 §3.1: an RDMA_OPTIONAL whose `rdma_opttype` we do not support.
    #[error("unsupported optional type {0:?}")]
    UnknownOption(OptType),
    /// §5.5: "A receiver MUST silently discard an RDMA_ERROR procedure that cannot be
    /// decoded."
    #[error("undecodable RDMA_ERROR")]
    UndecodableError,
}

/// Why a received Call's Payload stream cannot be handed to the Upper Layer (§5.5.2
/// second paragraph, §4.4.4.1, §8.1.1): answered with an RPC reply, accept_stat
/// GARBAGE_ARGS, in an RDMA_MSG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    /// §4.4.4.1: "Any byte count left in the Payload stream MUST match the sum of the
    /// lengths of the segments making up the chunk."
    #[error("length word {in_stream} at {position} does not match chunk length {chunk}")]
    ChunkLengthMismatch {
        /// Position of the chunk.
        position: u32,
        /// The count the Payload stream carries.
        in_stream: u32,
        /// The sum of the chunk's segment lengths.
        chunk: u64,
    },
    /// A Read chunk Position lies beyond the Payload stream, or before the end of the
    /// previous chunk, or where no length word precedes it.
    #[error("read chunk position {0} does not fit the payload stream")]
    BadPosition(u32),
    /// §8.1.1: a non-DDP-eligible data item in a Read chunk: "a responder MUST NOT
    /// process the Call message".
    #[error("read chunk at {position} holds a data item that is not DDP-eligible")]
    NotDdpEligible {
        /// Position of the offending chunk.
        position: u32,
    },
    /// The RDMA Read data does not have the chunk's length.
    #[error("read chunk data has {got} bytes, the chunk {expected}")]
    ReadDataLength {
        /// Bytes the chunk announced.
        expected: u64,
        /// Bytes supplied.
        got: u64,
    },
    /// The reassembled stream is over the configured maximum.
    #[error("reassembled call of {0} bytes exceeds the limit")]
    TooLarge(u64),
}

/// Why a received Reply cannot be completed (requester side). The RPC fails; the
/// connection stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// A length word in the reply does not match the Write chunk's returned length.
    #[error("write chunk {index}: stream says {in_stream}, chunk returned {chunk}")]
    WriteChunkLengthMismatch {
        /// Index in the Write list.
        index: usize,
        /// The count the Payload stream carries.
        in_stream: u32,
        /// The returned length.
        chunk: u64,
    },
    /// The reply references more Write chunks than it returned.
    #[error("reply needs write chunk {0} which does not exist")]
    MissingWriteChunk(usize),
    /// A DDP item position that does not fit the reply stream.
    #[error("reply item position {0} does not fit the payload stream")]
    BadPosition(u32),
    /// The responder returned a Reply chunk of `len` bytes, and the driver cannot hand
    /// out that many from the Call's Reply chunk (none registered, or a shorter one:
    /// more than was provisioned).
    #[error("reply chunk of {len} bytes was not placed")]
    ReplyChunkNotPlaced {
        /// The length the responder returned.
        len: u64,
    },
    /// The responder returned `len` bytes in Write chunk `index`, and the driver cannot
    /// hand out that many from the Call's Write chunk (none registered, or a shorter
    /// one: more than was provisioned).
    #[error("write chunk {index} of {len} bytes was not placed")]
    WriteChunkNotPlaced {
        /// Index in the Write list.
        index: usize,
        /// The length the responder returned.
        len: u64,
    },
    /// Data was placed in a Write chunk, but the Call's procedure is unknown, so its
    /// Upper Layer Binding cannot say where the data goes back (§5.3.2).
    #[error("no procedure for the call: placed data cannot go back")]
    NoProcedure,
    /// The Upper Layer Binding cannot find the DDP-eligible results in the Reply (it
    /// does not parse), so placed data cannot go back (§5.3.2).
    #[error("the binding finds no results in the reply")]
    ResultsNotFound,
    /// The responder answered with RDMA_ERROR.
    #[error("peer answered {0:?}")]
    PeerError(ErrCode),
    /// The connection was lost before the Reply arrived; retransmit on a new one.
    #[error("connection lost")]
    ConnectionLost,
    /// The RDMA Read of a responder-provided Read chunk failed
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §4.1.2); pull completion was sent.
    #[error("pulling the reply from the responder's read chunk failed")]
    PullFailed,
    /// A responder-provided Read chunk larger than we agree to pull
    /// (`RequesterConfig::max_pulled_reply`, a DoS bound); pull completion was sent.
    #[error("responder-provided read chunk of {0} bytes is over our limit")]
    PullTooLarge(u64),
}

/// Why we cannot send what we were asked to send (local; nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MarshalError {
    /// The reply does not fit inline and the requester gave no Reply chunk.
    #[error("reply of {len} bytes does not fit inline and there is no reply chunk")]
    NoReplyChunk {
        /// Reduced reply payload length.
        len: usize,
    },
    /// The reply does not fit the Reply chunk (§5.5.3: detect before writing past it).
    #[error("reply of {len} bytes does not fit the {room}-byte reply chunk")]
    ReplyChunkTooSmall {
        /// Reply payload length.
        len: usize,
        /// Reply chunk length.
        room: u64,
    },
    /// A DDP-eligible result does not fit its Write chunk.
    #[error("result of {len} bytes does not fit the {room}-byte write chunk {index}")]
    WriteChunkTooSmall {
        /// Index of the Write chunk.
        index: usize,
        /// Data length.
        len: usize,
        /// Chunk length.
        room: u64,
    },
    /// Even the header alone exceeds the peer's inline threshold.
    #[error("header of {len} bytes exceeds the inline threshold {threshold}")]
    HeaderTooLarge {
        /// Header length.
        len: usize,
        /// Inline threshold.
        threshold: u32,
    },
    /// The registrations handed back do not match the plan.
    #[error("registrations do not match the plan")]
    RegistrationMismatch,
    /// A message over 4 GiB, which positions cannot express.
    #[error("message too large for 32-bit positions")]
    TooLarge,
    /// §8: "Requesters MUST NOT send RPC-over-RDMA messages for Upper Layer Protocols
    /// that do not have a Upper Layer Binding."
    #[error("no upper layer binding for this program")]
    NoUpperLayerBinding,
    /// A backward-direction message on a connection without a backward channel
    /// (§7.3.1), or a backward Reply to a Call we did not receive.
    #[error("no backward channel for this message")]
    NoBackwardChannel,
    /// A reply that needs a responder-provided Read chunk, when no Receive can be set
    /// aside for its RDMA_DONE (draft-cel-nfsv4-rpcrdma-reliable-reply-05 §5.2.3):
    /// answered like a reply with no reply resources (ERR_BADHEADER).
    #[error("no receive left to reserve for pull completion")]
    PullsExhausted,
    /// v2 §5: the version-probing first Call must fit in 1024 bytes.
    #[error("first call of {len} bytes exceeds 1024 while probing version two")]
    ProbeTooLarge {
        /// Bytes the Send would need.
        len: usize,
    },
}

/// Credit accounting refusals (§4.3.1, §7.2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreditError {
    /// §4.3.1: "The requester MUST NOT send unacknowledged requests in excess of this
    /// granted responder credit limit." Wait for a reply.
    #[error("{outstanding} calls outstanding, limit {limit}")]
    Exhausted {
        /// Current limit.
        limit: u32,
        /// Calls in flight.
        outstanding: u32,
    },
    /// §4.3.1: "The granted value MUST NOT be zero."
    #[error("a credit grant of zero")]
    ZeroGrant,
    /// A reply or completion with no call outstanding.
    #[error("no call outstanding")]
    NothingOutstanding,
}

/// What the peer is told about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireAnswer {
    /// Send an RDMA_ERROR with this code, echoing XID and version (§5.5). For
    /// [`ErrCode::ERR_VERS`] the sender adds its supported range.
    RdmaError(ErrCode),
    /// Send an RPC reply (RDMA_MSG) with accept_stat GARBAGE_ARGS (§5.5.2).
    GarbageArgs,
    /// Say nothing; discard the message.
    Discard,
    /// A local condition; the peer is not involved.
    Local,
}

/// How much an error takes down with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Only the offending message is dropped.
    Message,
    /// The one RPC (XID) fails; the connection carries on.
    Rpc,
    /// The connection must be closed.
    Connection,
}

impl From<&HeaderError> for WireAnswer {
    fn from(e: &HeaderError) -> Self {
        match e {
            HeaderError::TooShort { .. } | HeaderError::UndecodableError => WireAnswer::Discard,
            HeaderError::UnsupportedVersion(_) => WireAnswer::RdmaError(ErrCode::ERR_VERS),
            HeaderError::UnknownOption(_) => WireAnswer::RdmaError(ErrCode::ERR_INVAL_OPTION),
            // §5.5.2: "If the rdma_vers field contains a recognized value, but an XDR
            // parsing error occurs, the responder MUST reply with an RDMA_ERROR procedure
            // and set the rdma_err value to RDMA_ERR_BADHEADER."
            _ => WireAnswer::RdmaError(ErrCode::ERR_BADHEADER),
        }
    }
}

impl From<&HeaderError> for Scope {
    fn from(e: &HeaderError) -> Self {
        match e {
            HeaderError::TooShort { .. }
            | HeaderError::UndecodableError
            | HeaderError::UnknownXid(_) => Scope::Message,
            _ => Scope::Rpc,
        }
    }
}

impl From<&ArgsError> for WireAnswer {
    fn from(_: &ArgsError) -> Self {
        // §5.5.2: "the responder SHOULD return a RPC_GARBAGEARGS reply, using an
        // RDMA_MSG procedure."
        WireAnswer::GarbageArgs
    }
}

impl From<&ArgsError> for Scope {
    fn from(_: &ArgsError) -> Self {
        Scope::Rpc
    }
}

impl From<&ReplyError> for WireAnswer {
    fn from(_: &ReplyError) -> Self {
        WireAnswer::Local
    }
}

impl From<&ReplyError> for Scope {
    fn from(_: &ReplyError) -> Self {
        Scope::Rpc
    }
}

impl From<&MarshalError> for WireAnswer {
    fn from(e: &MarshalError) -> Self {
        match e {
            // §5.5.3: the responder "should send an RDMA_ERROR reply with an rdma_err
            // value of RDMA_ERR_BADHEADER to indicate that no RPC-level reply is
            // possible for that XID."
            MarshalError::NoReplyChunk { .. }
            | MarshalError::ReplyChunkTooSmall { .. }
            | MarshalError::WriteChunkTooSmall { .. }
            | MarshalError::PullsExhausted => WireAnswer::RdmaError(ErrCode::ERR_BADHEADER),
            _ => WireAnswer::Local,
        }
    }
}

impl From<&MarshalError> for Scope {
    fn from(_: &MarshalError) -> Self {
        Scope::Rpc
    }
}

impl From<&CreditError> for WireAnswer {
    fn from(_: &CreditError) -> Self {
        WireAnswer::Local
    }
}

impl From<&CreditError> for Scope {
    fn from(e: &CreditError) -> Self {
        match e {
            CreditError::Exhausted { .. } => Scope::Message,
            // A zero grant deadlocks the connection (§4.3.1); an unmatched completion
            // means our accounting and the peer's disagree.
            CreditError::ZeroGrant | CreditError::NothingOutstanding => Scope::Connection,
        }
    }
}

impl From<&Error> for WireAnswer {
    fn from(e: &Error) -> Self {
        match e {
            Error::Header(e) => e.into(),
            Error::Args(e) => e.into(),
            Error::Reply(e) => e.into(),
            Error::Marshal(e) => e.into(),
            Error::Credit(e) => e.into(),
        }
    }
}

impl From<&Error> for Scope {
    fn from(e: &Error) -> Self {
        match e {
            Error::Header(e) => e.into(),
            Error::Args(e) => e.into(),
            Error::Reply(e) => e.into(),
            Error::Marshal(e) => e.into(),
            Error::Credit(e) => e.into(),
        }
    }
}

impl Error {
    /// What to tell the peer.
    pub fn wire_answer(&self) -> WireAnswer {
        self.into()
    }

    /// What the error takes down.
    pub fn scope(&self) -> Scope {
        self.into()
    }
}

#[cfg(test)]
mod tests;
