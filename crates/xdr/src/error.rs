//! The one error type of the XDR layer.
//!
//! Like quinn's `coding::UnexpectedEnd`, this error says only what went wrong with the
//! bytes. The layer above decides what it means on the wire (GARBAGE_ARGS for an RPC
//! argument, ERR_BADHEADER for an RPC-over-RDMA header, a closed connection for a
//! broken record).

/// Why a run of bytes is not valid XDR for the type asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XdrError {
    /// The buffer ended before the item did.
    #[error("XDR item needs {needed} bytes, only {remaining} remain")]
    UnexpectedEnd {
        /// Bytes the item needs (including padding).
        needed: usize,
        /// Bytes left in the buffer.
        remaining: usize,
    },
    /// A variable-length item announced more than its declared bound allows.
    #[error("XDR length {len} exceeds the bound of {max}")]
    LengthOverBound {
        /// The length the peer announced.
        len: u32,
        /// The bound of the type.
        max: u32,
    },
    /// RFC 4506 §3.9: padding bytes "MUST be zero"; the peer sent something else.
    #[error("non-zero XDR padding byte")]
    NonZeroPadding,
    /// RFC 4506 §4.4: a boolean is 0 or 1.
    #[error("invalid XDR boolean {0}")]
    InvalidBool(u32),
    /// A discriminant (union arm, optional-data flag, enum) that the type does not define.
    #[error("invalid XDR discriminant {0}")]
    InvalidDiscriminant(u32),
    /// Bytes were left over after the last item of a message that must be consumed whole.
    #[error("{0} trailing bytes after the XDR message")]
    TrailingBytes(usize),
}

/// Shorthand used throughout the crate.
pub type Result<T> = core::result::Result<T, XdrError>;
