//! The RPC-over-RDMA transport header: a checked view of the fixed prefix, and an owned
//! [`Header`] representation with `parse` / `emit` / `encoded_len`.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.1-§5.2 (Table 1), §5.6, §5.7;
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §4.2.
//!
//! ```text
//! +--------+---------+---------+-----------+------------------------+-----------------
//! |  XID   | Version | Credits | Msg type  | body (by type)         | Payload stream
//! +--------+---------+---------+-----------+------------------------+-----------------
//!  RDMA_MSG      chunk lists                                          yes
//!  RDMA_NOMSG    chunk lists                                          no
//!  RDMA_MSGP     v1: align, thresh, chunk lists; v2: void             (refused)
//!  RDMA_DONE     void                                                 (refused)
//!  RDMA_ERROR    rdma_err [, vers_low, vers_high]                     no
//!  RDMA_OPTIONAL v2: opttype, opaque optinfo<>                        may
//! ```
//!
//! Contract (smoltcp `wire`): [`PrefixView::new_checked`] succeeds on any buffer of at
//! least 16 bytes, after which no accessor panics; [`Header::parse`] never panics on
//! any input and allocates only within [`Limits`]; [`Header::emit`] appends exactly
//! [`Header::encoded_len`] bytes.
//!
//! The codec parses every type it knows. Refusing RDMA_MSGP, RDMA_DONE, unsupported
//! versions and options is policy, done by [`crate::validate`].

use bytes::{BufMut, Bytes, BytesMut};
use xdr::Decoder;

use crate::chunks::{ChunkLists, Limits};
use crate::error::HeaderError;
use crate::wire::{ErrCode, MsgType, OptType, Version, Xid, PREFIX_LEN};

/// A checked view of the 16-byte fixed prefix (`struct rpcrdma_prefix`), the part of
/// the header every version shares and every error reply echoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixView<T: AsRef<[u8]>> {
    buf: T,
}

mod field {
    use core::ops::Range;
    pub(super) const XID: Range<usize> = 0..4;
    pub(super) const VERS: Range<usize> = 4..8;
    pub(super) const CREDIT: Range<usize> = 8..12;
    pub(super) const PROC: Range<usize> = 12..16;
}

impl<T: AsRef<[u8]>> PrefixView<T> {
    /// Wraps `buf` if it holds at least the fixed prefix.
    pub fn new_checked(buf: T) -> Result<Self, HeaderError> {
        let len = buf.as_ref().len();
        if len < PREFIX_LEN {
            return Err(HeaderError::TooShort { len });
        }
        Ok(PrefixView { buf })
    }

    fn word(&self, r: core::ops::Range<usize>) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3]])
    }

    /// `rdma_xid`.
    pub fn xid(&self) -> Xid {
        Xid(self.word(field::XID))
    }

    /// `rdma_vers`.
    pub fn version(&self) -> Version {
        Version(self.word(field::VERS))
    }

    /// `rdma_credit`: requested credits in a Call, granted credits in a Reply.
    pub fn credits(&self) -> u32 {
        self.word(field::CREDIT)
    }

    /// `rdma_proc` / `rdma_htype`.
    pub fn msg_type(&self) -> MsgType {
        MsgType(self.word(field::PROC))
    }

    /// The owned prefix fields.
    pub fn prefix(&self) -> Prefix {
        Prefix {
            xid: self.xid(),
            version: self.version(),
            credits: self.credits(),
            msg_type: self.msg_type(),
        }
    }
}

/// The fixed prefix fields, owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// `rdma_xid`.
    pub xid: Xid,
    /// `rdma_vers`.
    pub version: Version,
    /// `rdma_credit`.
    pub credits: u32,
    /// `rdma_proc`.
    pub msg_type: MsgType,
}

/// The body of an RDMA_ERROR (`rpcrdma1_error`, `rpcrdma2_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody {
    /// ERR_VERS with the inclusive range of versions the sender supports.
    Vers {
        /// `rdma_vers_low`.
        low: Version,
        /// `rdma_vers_high`.
        high: Version,
    },
    /// ERR_BADHEADER (ERR_CHUNK in RFC 8166 and Linux).
    BadHeader,
    /// Version Two ERR_INVAL_OPTION.
    InvalOption,
}

impl ErrorBody {
    /// The `rdma_err` code.
    pub fn code(&self) -> ErrCode {
        match self {
            ErrorBody::Vers { .. } => ErrCode::ERR_VERS,
            ErrorBody::BadHeader => ErrCode::ERR_BADHEADER,
            ErrorBody::InvalOption => ErrCode::ERR_INVAL_OPTION,
        }
    }
}

/// The header body, selected by the message type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// RDMA_MSG: chunk lists, then the Payload stream.
    Msg(ChunkLists),
    /// RDMA_NOMSG: chunk lists; the Payload stream is in a chunk.
    NoMsg(ChunkLists),
    /// RDMA_MSGP (Version One `rpcrdma1_padded`), recognised so it can be refused.
    MsgP {
        /// `rdma_align`.
        align: u32,
        /// `rdma_thresh`.
        thresh: u32,
        /// `rdma_chunks`.
        chunks: ChunkLists,
    },
    /// RDMA_DONE, recognised so it can be refused.
    Done,
    /// RDMA_ERROR.
    Error(ErrorBody),
    /// Version Two RDMA_OPTIONAL.
    Optional {
        /// `rdma_opttype`.
        opttype: OptType,
        /// `rdma_optinfo`, a slice of the received buffer.
        optinfo: Bytes,
    },
}

/// An RPC-over-RDMA transport header (the Transport stream), owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// `rdma_xid`.
    pub xid: Xid,
    /// `rdma_vers`.
    pub version: Version,
    /// `rdma_credit`.
    pub credits: u32,
    /// The type-specific body.
    pub body: Body,
}

/// A parsed header and where the Payload stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The header.
    pub header: Header,
    /// Bytes the header takes; the Payload stream (if any) starts here.
    pub header_len: usize,
}

impl Header {
    /// The message type of the body.
    pub fn msg_type(&self) -> MsgType {
        match &self.body {
            Body::Msg(_) => MsgType::RDMA_MSG,
            Body::NoMsg(_) => MsgType::RDMA_NOMSG,
            Body::MsgP { .. } => MsgType::RDMA_MSGP,
            Body::Done => MsgType::RDMA_DONE,
            Body::Error(_) => MsgType::RDMA_ERROR,
            Body::Optional { .. } => MsgType::RDMA_OPTIONAL,
        }
    }

    /// The chunk lists, for RDMA_MSG, RDMA_NOMSG and RDMA_MSGP.
    pub fn chunks(&self) -> Option<&ChunkLists> {
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) | Body::MsgP { chunks: c, .. } => Some(c),
            _ => None,
        }
    }

    /// Parses a header from the start of `buf` (a received Send). Never panics.
    ///
    /// RDMA_ERROR is decoded whatever `rdma_vers` says: the ERR_VERS arm is immutable
    /// across versions (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §9.1). Other types
    /// are decoded for Versions One and Two only; any other version yields
    /// [`HeaderError::UnsupportedVersion`] without looking at the body.
    pub fn parse(buf: &Bytes, limits: &Limits) -> Result<Parsed, HeaderError> {
        let prefix = PrefixView::new_checked(buf.as_ref())?.prefix();
        let mut dec = Decoder::new(buf.clone());
        // Skip the prefix; cannot fail, new_checked saw 16 bytes.
        dec.opaque_fixed(PREFIX_LEN)?;

        if prefix.msg_type == MsgType::RDMA_ERROR {
            let body =
                parse_error_body(&mut dec, prefix.version).ok_or(HeaderError::UndecodableError)?;
            return Ok(Parsed {
                header: Header {
                    xid: prefix.xid,
                    version: prefix.version,
                    credits: prefix.credits,
                    body: Body::Error(body),
                },
                header_len: dec.position(),
            });
        }
        if prefix.version != Version::ONE && prefix.version != Version::TWO {
            return Err(HeaderError::UnsupportedVersion(prefix.version));
        }
        let body = match prefix.msg_type {
            MsgType::RDMA_MSG => Body::Msg(ChunkLists::parse(&mut dec, limits)?),
            MsgType::RDMA_NOMSG => Body::NoMsg(ChunkLists::parse(&mut dec, limits)?),
            MsgType::RDMA_MSGP if prefix.version == Version::ONE => {
                let align = dec.u32()?;
                let thresh = dec.u32()?;
                Body::MsgP {
                    align,
                    thresh,
                    chunks: ChunkLists::parse(&mut dec, limits)?,
                }
            }
            MsgType::RDMA_MSGP => Body::MsgP {
                align: 0,
                thresh: 0,
                chunks: ChunkLists::empty(),
            },
            MsgType::RDMA_DONE => Body::Done,
            MsgType::RDMA_OPTIONAL if prefix.version == Version::TWO => {
                let opttype = OptType(dec.u32()?);
                let max = u32::try_from(dec.remaining()).unwrap_or(u32::MAX);
                let optinfo = dec.opaque(max)?;
                Body::Optional { opttype, optinfo }
            }
            other => return Err(HeaderError::UnknownMsgType(other)),
        };
        Ok(Parsed {
            header: Header {
                xid: prefix.xid,
                version: prefix.version,
                credits: prefix.credits,
                body,
            },
            header_len: dec.position(),
        })
    }

    /// Bytes [`Header::emit`] appends.
    pub fn encoded_len(&self) -> usize {
        PREFIX_LEN
            + match &self.body {
                Body::Msg(c) | Body::NoMsg(c) => c.encoded_len(),
                Body::MsgP { chunks, .. } if self.version == Version::ONE => {
                    8 + chunks.encoded_len()
                }
                Body::MsgP { .. } | Body::Done => 0,
                Body::Error(ErrorBody::Vers { .. }) => 12,
                Body::Error(_) => 4,
                Body::Optional { optinfo, .. } => 8 + xdr::padded_len(optinfo.len()),
            }
    }

    /// Appends the XDR encoding. Never panics (the buffer grows).
    pub fn emit(&self, buf: &mut impl BufMut) {
        buf.put_u32(self.xid.0);
        buf.put_u32(self.version.0);
        buf.put_u32(self.credits);
        buf.put_u32(self.msg_type().0);
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.emit(buf),
            Body::MsgP {
                align,
                thresh,
                chunks,
            } => {
                if self.version == Version::ONE {
                    buf.put_u32(*align);
                    buf.put_u32(*thresh);
                    chunks.emit(buf);
                }
            }
            Body::Done => {}
            Body::Error(e) => {
                buf.put_u32(e.code().0);
                if let ErrorBody::Vers { low, high } = e {
                    buf.put_u32(low.0);
                    buf.put_u32(high.0);
                }
            }
            Body::Optional { opttype, optinfo } => {
                buf.put_u32(opttype.0);
                buf.put_u32(optinfo.len() as u32);
                buf.put_slice(optinfo);
                buf.put_bytes(0, xdr::pad_len(optinfo.len()));
            }
        }
    }

    /// The encoding in a fresh buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(self.encoded_len());
        self.emit(&mut buf);
        buf.freeze()
    }

    /// The RDMA_ERROR answering a message whose prefix was `failed`.
    ///
    /// rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.5: "The rdma_xid field MUST contain
    /// the same XID that was in the rdma_xid field in the failing request; The rdma_vers
    /// field MUST contain the same version that was in the rdma_vers field in the
    /// failing request; The rdma_proc field MUST contain the value RDMA_ERROR".
    pub fn error_reply(failed: &Prefix, credits: u32, body: ErrorBody) -> Header {
        Header {
            xid: failed.xid,
            version: failed.version,
            credits,
            body: Body::Error(body),
        }
    }
}

/// Decodes `rpcrdma1_error` / `rpcrdma2_error`; `None` if it cannot be decoded.
fn parse_error_body(dec: &mut Decoder, version: Version) -> Option<ErrorBody> {
    match ErrCode(dec.u32().ok()?) {
        ErrCode::ERR_VERS => Some(ErrorBody::Vers {
            low: Version(dec.u32().ok()?),
            high: Version(dec.u32().ok()?),
        }),
        ErrCode::ERR_BADHEADER => Some(ErrorBody::BadHeader),
        // Only Version Two defines ERR_INVAL_OPTION (v2 draft §4.2).
        ErrCode::ERR_INVAL_OPTION if version == Version::TWO => Some(ErrorBody::InvalOption),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
