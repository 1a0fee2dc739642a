//! Wire values of the RPC-over-RDMA fixed header, as open enums.
//!
//! Specs: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §5.1.2, §5.1.3, §5.2;
//! rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §4.2.
//!
//! Every value is a newtype over the `u32` on the wire with named constants (rustls'
//! `enum_builder!`), so an unknown value survives decoding and gets the spec's answer
//! (ERR_VERS, ERR_BADHEADER, ERR_INVAL_OPTION) instead of a decoding failure.

use core::fmt;

macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$cmeta:meta])* $cname:ident = $val:expr ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl $name {
            $( $(#[$cmeta])* pub const $cname: $name = $name($val); )*

            /// The spec's name for this value, if it has one.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $val => Some(stringify!($cname)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{}::{}", stringify!($name), n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl From<u32> for $name {
            fn from(v: u32) -> Self {
                $name(v)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }
    };
}

open_enum! {
    /// `rdma_vers`: the RPC-over-RDMA protocol version of a message.
    Version {
        /// RPC-over-RDMA Version One (RFC 8166, rfc5666bis).
        ONE = 1,
        /// RPC-over-RDMA Version Two (draft-cel-nfsv4-rpcrdma-version-two).
        TWO = 2,
    }
}

open_enum! {
    /// `rdma_proc` / `rdma_htype`: the header type, which selects the header body.
    MsgType {
        /// Chunk lists followed by a Payload stream.
        RDMA_MSG = 0,
        /// Chunk lists, no Payload stream: the payload moves in a chunk.
        RDMA_NOMSG = 1,
        /// Version One, reserved and no longer supported (§5.6.1).
        RDMA_MSGP = 2,
        /// Version One, reserved and no longer supported (§5.6.2).
        RDMA_DONE = 3,
        /// Reports a header error for the XID.
        RDMA_ERROR = 4,
        /// Version Two: an optional feature message (`rpcrdma2_optional`).
        RDMA_OPTIONAL = 5,
    }
}

open_enum! {
    /// `rdma_err`: the error code of an RDMA_ERROR message.
    ErrCode {
        /// The receiver does not support the version; carries the supported range.
        ERR_VERS = 1,
        /// Header could not be parsed (Linux and RFC 8166 call this ERR_CHUNK).
        ERR_BADHEADER = 2,
        /// Version Two: unrecognised or unsupported `rdma_opttype`.
        ERR_INVAL_OPTION = 3,
    }
}

/// `rdma_opttype` of a Version Two RDMA_OPTIONAL message. The base draft defines no
/// values; they come from other Standards Track documents, so every value is "unknown"
/// unless the application registers support for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct OptType(pub u32);

/// The transaction ID, `rdma_xid`, which MUST equal the XID of the RPC message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Xid(pub u32);

impl fmt::Debug for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Xid({:#010x})", self.0)
    }
}

/// Size of the fixed header (`struct rpcrdma_prefix`): XID, version, credits, type.
pub const PREFIX_LEN: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_enums_keep_unknown_values() {
        assert_eq!(MsgType(9), MsgType::from(9));
        assert_eq!(format!("{:?}", MsgType(9)), "MsgType(9)");
        assert_eq!(format!("{:?}", MsgType::RDMA_NOMSG), "MsgType::RDMA_NOMSG");
        assert_eq!(ErrCode::ERR_BADHEADER.0, 2);
        assert_eq!(u32::from(Version::TWO), 2);
        assert_eq!(format!("{:?}", Xid(0x02c704b8)), "Xid(0x02c704b8)");
    }
}
