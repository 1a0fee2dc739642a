//! Wire formats: MPA frames and FPDUs ([`mpa`]), DDP segment headers and RDMAP
//! messages ([`ddp`]).
//!
//! Contract (as smoltcp's `wire`): parsers take untrusted bytes and never panic; they
//! return [`WireError`] or `Ok(None)` for "need more bytes". Emitters write into a
//! caller-provided `Vec<u8>` and never panic.

pub mod ddp;
pub mod mpa;

/// A malformed frame. The protocol core maps each to the Terminate it answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header needs.
    #[error("truncated header")]
    Truncated,
    /// The 16-byte MPA key is neither the Request nor the Reply key.
    #[error("not an MPA Request/Reply key")]
    BadMpaKey,
    /// MPA private data longer than 512 bytes.
    #[error("MPA private data length {0} exceeds 512")]
    PrivateDataTooLong(usize),
    /// FPDU CRC mismatch.
    #[error("FPDU CRC mismatch: got {got:#010x}, computed {want:#010x}")]
    BadCrc {
        /// CRC field received.
        got: u32,
        /// CRC computed.
        want: u32,
    },
    /// DDP version is not 1.
    #[error("DDP version {version} not supported (tagged: {tagged})")]
    DdpVersion {
        /// The version field.
        version: u8,
        /// Whether the segment was tagged.
        tagged: bool,
    },
    /// RDMAP version is not 1.
    #[error("RDMAP version {0} not supported")]
    RdmapVersion(u8),
}
