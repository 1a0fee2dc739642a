//! DDP segment headers (RFC 5041 §4) and RDMAP headers (RFC 5040 §4).
//!
//! Read first: RFC 5041 §4.2-4.4 (control field, tagged and untagged headers), RFC
//! 5040 §4.1-4.8 (RDMAP control field, Read Request, Terminate).

use super::WireError;

/// RFC 5041 §4.2: "DDP Version (DV): 2 bits ... MUST be set to 01b".
pub const DDP_VERSION: u8 = 1;
/// RFC 5040 §4.2: "RDMA Version (RV): 2 bits ... MUST be set to 01b".
pub const RDMAP_VERSION: u8 = 1;
/// Tagged header length (control + STag + TO).
pub const TAGGED_HEADER_LEN: usize = 14;
/// Untagged header length (control + RsvdULP + QN + MSN + MO).
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// RDMA Read Request body length (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;
/// Terminate control field length (RFC 5040 §4.8).
pub const TERMINATE_CONTROL_LEN: usize = 4;

/// Untagged queue numbers (RFC 5040 §5.1).
pub mod queue {
    /// Send and its variants.
    pub const SEND: u32 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
}

/// An RDMAP opcode (RFC 5040 §4.2); open so unknown values survive decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    /// RDMA Write.
    pub const RDMA_WRITE: Opcode = Opcode(0);
    /// RDMA Read Request.
    pub const READ_REQUEST: Opcode = Opcode(1);
    /// RDMA Read Response.
    pub const READ_RESPONSE: Opcode = Opcode(2);
    /// Send.
    pub const SEND: Opcode = Opcode(3);
    /// Send with Invalidate.
    pub const SEND_INVALIDATE: Opcode = Opcode(4);
    /// Send with Solicited Event.
    pub const SEND_SE: Opcode = Opcode(5);
    /// Send with Solicited Event and Invalidate.
    pub const SEND_SE_INVALIDATE: Opcode = Opcode(6);
    /// Terminate.
    pub const TERMINATE: Opcode = Opcode(7);

    /// RFC 5040 §4.2 table: which opcodes use tagged buffers.
    pub fn is_tagged(self) -> bool {
        self == Self::RDMA_WRITE || self == Self::READ_RESPONSE
    }

    /// The untagged queue this opcode uses (RFC 5040 §4.2 table), if untagged.
    pub fn queue(self) -> Option<u32> {
        match self.0 {
            1 => Some(queue::READ_REQUEST),
            3..=6 => Some(queue::SEND),
            7 => Some(queue::TERMINATE),
            _ => None,
        }
    }
}

/// The DDP part of a segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpHeader {
    /// Tagged buffer model (RFC 5041 §4.3).
    Tagged {
        /// Steering Tag.
        stag: u32,
        /// Tagged Offset.
        to: u64,
    },
    /// Untagged buffer model (RFC 5041 §4.4).
    Untagged {
        /// RsvdULP: RDMAP's Invalidate STag for Send with Invalidate, else 0.
        rsvd_ulp: u32,
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number.
        msn: u32,
        /// Message Offset.
        mo: u32,
    },
}

/// A DDP segment header with the RDMAP control byte (the first 14 or 18 bytes of a
/// ULPDU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// L: last segment of the message.
    pub last: bool,
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// Tagged or untagged fields.
    pub ddp: DdpHeader,
}

impl SegmentHeader {
    /// Parses the header at the start of a ULPDU; returns it and its length.
    pub fn parse(b: &[u8]) -> Result<(SegmentHeader, usize), WireError> {
        let c = b.get(..2).ok_or(WireError::Truncated)?;
        let tagged = c[0] & 0x80 != 0;
        let last = c[0] & 0x40 != 0;
        let dv = c[0] & 0x03;
        // RFC 5041 §7.2: a segment with an unsupported DDP version is an error
        // ("Invalid DDP version" in both tagged and untagged tables).
        if dv != DDP_VERSION {
            return Err(WireError::DdpVersion {
                version: dv,
                tagged,
            });
        }
        let rv = c[1] >> 6;
        if rv != RDMAP_VERSION {
            return Err(WireError::RdmapVersion(rv));
        }
        let opcode = Opcode(c[1] & 0x0f);
        if tagged {
            let h = b.get(..TAGGED_HEADER_LEN).ok_or(WireError::Truncated)?;
            let stag = be32(&h[2..6]);
            let to = be64(&h[6..14]);
            Ok((
                SegmentHeader {
                    last,
                    opcode,
                    ddp: DdpHeader::Tagged { stag, to },
                },
                TAGGED_HEADER_LEN,
            ))
        } else {
            let h = b.get(..UNTAGGED_HEADER_LEN).ok_or(WireError::Truncated)?;
            Ok((
                SegmentHeader {
                    last,
                    opcode,
                    ddp: DdpHeader::Untagged {
                        rsvd_ulp: be32(&h[2..6]),
                        qn: be32(&h[6..10]),
                        msn: be32(&h[10..14]),
                        mo: be32(&h[14..18]),
                    },
                },
                UNTAGGED_HEADER_LEN,
            ))
        }
    }

    /// Encoded length.
    pub fn buffer_len(&self) -> usize {
        match self.ddp {
            DdpHeader::Tagged { .. } => TAGGED_HEADER_LEN,
            DdpHeader::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Appends the encoding to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let tagged = matches!(self.ddp, DdpHeader::Tagged { .. });
        let mut c0 = DDP_VERSION;
        if tagged {
            c0 |= 0x80;
        }
        if self.last {
            c0 |= 0x40;
        }
        out.push(c0);
        out.push((RDMAP_VERSION << 6) | (self.opcode.0 & 0x0f));
        match self.ddp {
            DdpHeader::Tagged { stag, to } => {
                out.extend_from_slice(&stag.to_be_bytes());
                out.extend_from_slice(&to.to_be_bytes());
            }
            DdpHeader::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                out.extend_from_slice(&rsvd_ulp.to_be_bytes());
                out.extend_from_slice(&qn.to_be_bytes());
                out.extend_from_slice(&msn.to_be_bytes());
                out.extend_from_slice(&mo.to_be_bytes());
            }
        }
    }
}

/// RDMA Read Request body (RFC 5040 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Parses the 28-byte body.
    pub fn parse(b: &[u8]) -> Result<ReadRequest, WireError> {
        let b = b.get(..READ_REQUEST_LEN).ok_or(WireError::Truncated)?;
        Ok(ReadRequest {
            sink_stag: be32(&b[0..4]),
            sink_to: be64(&b[4..12]),
            size: be32(&b[12..16]),
            src_stag: be32(&b[16..20]),
            src_to: be64(&b[20..28]),
        })
    }

    /// Appends the 28-byte body.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.sink_stag.to_be_bytes());
        out.extend_from_slice(&self.sink_to.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.src_stag.to_be_bytes());
        out.extend_from_slice(&self.src_to.to_be_bytes());
    }
}

/// The Terminate control field (RFC 5040 §4.8): layer, error type, error code, and
/// the HdrCt bits saying which headers of the failed segment follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminateControl {
    /// Layer: 0 RDMAP, 1 DDP, 2 LLP (MPA).
    pub layer: u8,
    /// Error type (meaning depends on layer).
    pub etype: u8,
    /// Error code (meaning depends on layer and type).
    pub code: u8,
    /// M: DDP Segment Length field valid.
    pub hdr_m: bool,
    /// D: the terminated DDP header follows.
    pub hdr_d: bool,
    /// R: the terminated RDMAP header follows.
    pub hdr_r: bool,
}

impl TerminateControl {
    /// Parses the 4-byte control field (trailing headers are informational and left to
    /// the caller).
    pub fn parse(b: &[u8]) -> Result<TerminateControl, WireError> {
        let b = b.get(..TERMINATE_CONTROL_LEN).ok_or(WireError::Truncated)?;
        Ok(TerminateControl {
            layer: b[0] >> 4,
            etype: b[0] & 0x0f,
            code: b[1],
            hdr_m: b[2] & 0x80 != 0,
            hdr_d: b[2] & 0x40 != 0,
            hdr_r: b[2] & 0x20 != 0,
        })
    }

    /// Appends the 4-byte control field.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push((self.layer << 4) | (self.etype & 0x0f));
        out.push(self.code);
        let mut hc = 0u8;
        if self.hdr_m {
            hc |= 0x80;
        }
        if self.hdr_d {
            hc |= 0x40;
        }
        if self.hdr_r {
            hc |= 0x20;
        }
        out.push(hc);
        out.push(0);
    }
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_send_header_roundtrip() {
        // The reference peer's Send header: 0x41 0x43, rsvd 0, qn 0, msn 1, mo 0.
        let b = [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        let (h, n) = SegmentHeader::parse(&b).unwrap();
        assert_eq!(n, 18);
        assert!(h.last);
        assert_eq!(h.opcode, Opcode::SEND);
        assert_eq!(
            h.ddp,
            DdpHeader::Untagged {
                rsvd_ulp: 0,
                qn: 0,
                msn: 1,
                mo: 0
            }
        );
        let mut out = Vec::new();
        h.emit(&mut out);
        assert_eq!(out, b);
    }

    #[test]
    fn rfc5041_wrong_ddp_version_is_an_error() {
        let b = [0x42, 0x43, 0, 0];
        assert_eq!(
            SegmentHeader::parse(&b),
            Err(WireError::DdpVersion {
                version: 2,
                tagged: false
            })
        );
    }

    #[test]
    fn rfc5040_wrong_rdmap_version_is_an_error() {
        let b = [0xc1, 0x80, 0, 0];
        assert_eq!(SegmentHeader::parse(&b), Err(WireError::RdmapVersion(2)));
    }

    #[test]
    fn truncated_tagged_header() {
        let b = [0xc1, 0x40, 0, 0, 0];
        assert_eq!(SegmentHeader::parse(&b), Err(WireError::Truncated));
    }

    #[test]
    fn terminate_control_roundtrip() {
        let t = TerminateControl {
            layer: 1,
            etype: 2,
            code: 5,
            hdr_m: false,
            hdr_d: true,
            hdr_r: false,
        };
        let mut out = Vec::new();
        t.emit(&mut out);
        assert_eq!(out, [0x12, 0x05, 0x40, 0x00]);
        assert_eq!(TerminateControl::parse(&out).unwrap(), t);
    }
}
