//! Protocol errors and the Terminate each one answers with.
//!
//! One table: [`ProtocolError::terminate`]. Layer / error type / error code values are
//! those of RFC 5040 §4.8 (RDMAP, layer 0), RFC 5041 §7 (DDP, layer 1) and RFC 5044 §8
//! with RFC 6581 (MPA as the LLP, layer 2).

use rdma::software::AccessError;

use crate::wire::WireError;

/// Terminate layer values (RFC 5040 §4.8, "Layer").
pub mod layer {
    /// RDMAP.
    pub const RDMAP: u8 = 0;
    /// DDP.
    pub const DDP: u8 = 1;
    /// The lower layer protocol (MPA).
    pub const LLP: u8 = 2;
}

/// The (layer, error type, error code) triple a Terminate carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminateCode {
    /// Layer.
    pub layer: u8,
    /// Error type.
    pub etype: u8,
    /// Error code.
    pub code: u8,
}

const fn t(layer: u8, etype: u8, code: u8) -> TerminateCode {
    TerminateCode { layer, etype, code }
}

/// A violation by the peer, detected on receive. Every variant ends the connection
/// with the Terminate returned by [`ProtocolError::terminate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The frame did not parse.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// A tagged segment (RDMA Write, Read Response) failed its STag check.
    #[error("tagged placement refused: {0}")]
    Tagged(AccessError),
    /// A Read Request named a source region we may not read.
    #[error("RDMA Read Request refused: {0}")]
    ReadSource(AccessError),
    /// Untagged queue number other than 0, 1, 2.
    #[error("invalid DDP queue number {0}")]
    InvalidQueue(u32),
    /// A Send arrived with no receive posted (or an untagged queue overflowed).
    #[error("no receive buffer for untagged message")]
    NoBuffer,
    /// MSN outside the expected window.
    #[error("message sequence number {got} out of range (expected {want})")]
    MsnRange {
        /// MSN received.
        got: u32,
        /// MSN expected.
        want: u32,
    },
    /// MO not where the message's data so far ends (or MO on a one-segment queue).
    #[error("invalid message offset {0}")]
    InvalidMo(u32),
    /// The Send does not fit the posted receive buffer.
    #[error("message too long for the posted receive buffer")]
    MessageTooLong,
    /// An opcode where it may not appear (unknown opcode, wrong queue or model,
    /// Read Response with no Read outstanding).
    #[error("unexpected RDMAP opcode {0}")]
    UnexpectedOpcode(u8),
    /// More Read Requests outstanding than our IRD.
    #[error("inbound RDMA Read Requests exceed IRD")]
    IrdExceeded,
    /// Send with Invalidate named an STag that cannot be invalidated.
    #[error("STag cannot be invalidated: {0}")]
    CannotInvalidate(AccessError),
    /// A Read Response did not match the outstanding Read Request.
    #[error("RDMA Read Response does not match the request")]
    ReadResponseMismatch,
}

impl ProtocolError {
    /// The Terminate this error is answered with.
    pub fn terminate(&self) -> TerminateCode {
        use layer::*;
        match *self {
            // RFC 5044 §8 / RFC 5040 §4.8 LLP errors: "0x02 Received MPA CRC does not
            // match the calculated value for the FPDU".
            ProtocolError::Wire(WireError::BadCrc { .. }) => t(LLP, 0, 0x02),
            // LLP 0x04: "MPA Request/Reply not valid" (stray setup frames).
            ProtocolError::Wire(WireError::BadMpaKey)
            | ProtocolError::Wire(WireError::PrivateDataTooLong(_)) => t(LLP, 0, 0x04),
            // RFC 5041 §7.2 tagged buffer error 0x04 / untagged 0x06: "Invalid DDP
            // version".
            ProtocolError::Wire(WireError::DdpVersion { tagged: true, .. }) => t(DDP, 1, 0x04),
            ProtocolError::Wire(WireError::DdpVersion { tagged: false, .. }) => t(DDP, 2, 0x06),
            // RFC 5040 §4.8 Remote Operation Error 0x05: "Invalid RDMAP version".
            ProtocolError::Wire(WireError::RdmapVersion(_)) => t(RDMAP, 2, 0x05),
            // A segment shorter than its own header: DDP local catastrophic.
            ProtocolError::Wire(WireError::Truncated) => t(DDP, 0, 0x00),
            // RFC 5041 §7.2 tagged buffer errors: 0x00 Invalid STag, 0x01 Base or
            // bounds violation, 0x02 STag not associated with DDP Stream, 0x03 TO wrap.
            // Rights are checked by RDMAP (RFC 5040 §4.8 Remote Protection 0x02).
            ProtocolError::Tagged(e) => match e {
                AccessError::InvalidStag => t(DDP, 1, 0x00),
                AccessError::BaseBounds => t(DDP, 1, 0x01),
                AccessError::NotAssociated => t(DDP, 1, 0x02),
                AccessError::ToWrap => t(DDP, 1, 0x03),
                AccessError::AccessRights => t(RDMAP, 1, 0x02),
            },
            // RFC 5040 §4.8 Remote Protection Error codes: 0x00 Invalid STag, 0x01 Base
            // or bounds violation, 0x02 Access rights violation, 0x03 STag not
            // associated with RDMAP Stream, 0x04 TO wrap.
            ProtocolError::ReadSource(e) => match e {
                AccessError::InvalidStag => t(RDMAP, 1, 0x00),
                AccessError::BaseBounds => t(RDMAP, 1, 0x01),
                AccessError::AccessRights => t(RDMAP, 1, 0x02),
                AccessError::NotAssociated => t(RDMAP, 1, 0x03),
                AccessError::ToWrap => t(RDMAP, 1, 0x04),
            },
            // RFC 5041 §7.2 untagged buffer errors: 0x01 Invalid QN, 0x02 Invalid MSN -
            // no buffer available, 0x03 Invalid MSN - MSN range, 0x04 Invalid MO,
            // 0x05 DDP Message too long for available buffer.
            ProtocolError::InvalidQueue(_) => t(DDP, 2, 0x01),
            ProtocolError::NoBuffer | ProtocolError::IrdExceeded => t(DDP, 2, 0x02),
            ProtocolError::MsnRange { .. } => t(DDP, 2, 0x03),
            ProtocolError::InvalidMo(_) => t(DDP, 2, 0x04),
            ProtocolError::MessageTooLong => t(DDP, 2, 0x05),
            // RFC 5040 §4.8 Remote Operation Error 0x06: "Unexpected OpCode".
            ProtocolError::UnexpectedOpcode(_) => t(RDMAP, 2, 0x06),
            // RFC 5040 §4.8 Remote Operation Error 0x09: "STag can not be invalidated".
            ProtocolError::CannotInvalidate(_) => t(RDMAP, 2, 0x09),
            ProtocolError::ReadResponseMismatch => t(DDP, 1, 0x01),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_maps_to_the_rfc_triple() {
        let cases = [
            (
                ProtocolError::Wire(WireError::BadCrc { got: 0, want: 1 }),
                (2, 0, 2),
            ),
            (ProtocolError::Tagged(AccessError::InvalidStag), (1, 1, 0)),
            (ProtocolError::Tagged(AccessError::BaseBounds), (1, 1, 1)),
            (ProtocolError::Tagged(AccessError::AccessRights), (0, 1, 2)),
            (
                ProtocolError::ReadSource(AccessError::InvalidStag),
                (0, 1, 0),
            ),
            (
                ProtocolError::ReadSource(AccessError::BaseBounds),
                (0, 1, 1),
            ),
            (
                ProtocolError::ReadSource(AccessError::AccessRights),
                (0, 1, 2),
            ),
            (ProtocolError::InvalidQueue(7), (1, 2, 1)),
            (ProtocolError::NoBuffer, (1, 2, 2)),
            (ProtocolError::MsnRange { got: 5, want: 2 }, (1, 2, 3)),
            (ProtocolError::InvalidMo(3), (1, 2, 4)),
            (ProtocolError::MessageTooLong, (1, 2, 5)),
            (ProtocolError::UnexpectedOpcode(9), (0, 2, 6)),
            (ProtocolError::Wire(WireError::RdmapVersion(2)), (0, 2, 5)),
        ];
        for (e, (l, et, c)) in cases {
            assert_eq!(e.terminate(), t(l, et, c), "{e}");
        }
    }
}
