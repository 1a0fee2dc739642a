//! XDR, the External Data Representation of RFC 4506, as ONC RPC and RPC-over-RDMA use it.
//!
//! - [`Decoder`] reads from a received [`bytes::Bytes`] buffer. Opaque data and strings
//!   come back as slices of that buffer: decoding copies no payload. Every malformed
//!   input (short buffer, length over its bound, non-zero padding, bad boolean or
//!   discriminant) is an [`XdrError`]; nothing reachable from input panics.
//! - [`Encoder`] writes items, and keeps DDP-eligible opaque items apart from the inline
//!   bytes ([`Encoder::ddp_opaque`]) so that an RPC-over-RDMA transport can move them
//!   by RDMA instead of copying them, while a TCP transport writes them inline
//!   ([`XdrStream::gather`]).
//! - [`Encode`] and [`Decode`] are implemented by message types of the layers above.
//!
//!   An item may also be left in a file ([`Encoder::ddp_file`], [`FileRange`]) for a
//!   byte-stream transport to send from the page cache.
//!
//! This crate does no I/O and knows nothing of RPC.
#![warn(missing_docs, unreachable_pub)]

mod decode;
mod encode;
mod error;
mod list;
mod macros;

pub use bytes::Bytes;
pub use decode::{DataItem, Decoder};
pub use encode::{DdpItem, Encoder, FileRange, Piece, Slot, XdrStream};
pub use error::{Result, XdrError};
pub use list::{EncodedList, Iter as EncodedListIter, ListBuilder};

/// Zero bytes for XDR padding.
pub(crate) const PADDING: [u8; 3] = [0; 3];

/// Bytes of padding after `len` bytes of opaque data (RFC 4506 §3.9).
pub const fn pad_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// `len` rounded up to a multiple of four (RFC 4506 §3.9).
pub const fn padded_len(len: usize) -> usize {
    len + pad_len(len)
}

/// A type with an XDR encoding.
pub trait Encode {
    /// Appends the XDR encoding of `self`.
    fn encode(&self, enc: &mut Encoder);

    /// Encodes `self` alone into a fresh stream.
    ///
    /// The stream starts with room for [`TO_XDR_CAPACITY`] bytes: most encodings
    /// are small replies, and growing a buffer from nothing reallocates it at 8, 16,
    /// 32, 64 and 128 bytes (valgrind of nfsd: about 2,000 of a GETATTR's ~23,000
    /// instructions went to those reallocations).
    fn to_xdr(&self) -> XdrStream {
        let mut enc = Encoder::with_capacity(TO_XDR_CAPACITY);
        self.encode(&mut enc);
        enc.finish()
    }
}

/// Initial room of [`Encode::to_xdr`]'s stream, in bytes: an NFSv3 reply with
/// attributes (GETATTR's is 88 bytes, LOOKUP's about 200) fits without a reallocation.
pub const TO_XDR_CAPACITY: usize = 256;

/// A type that can be decoded from XDR.
pub trait Decode: Sized {
    /// Decodes one value, advancing the decoder.
    fn decode(dec: &mut Decoder) -> Result<Self>;

    /// Decodes one value that must take all of `buf`.
    fn from_xdr(buf: Bytes) -> Result<Self> {
        let mut dec = Decoder::new(buf);
        let v = Self::decode(&mut dec)?;
        dec.finish()?;
        Ok(v)
    }
}

macro_rules! primitive {
    ($t:ty, $m:ident) => {
        impl Encode for $t {
            fn encode(&self, enc: &mut Encoder) {
                enc.$m(*self);
            }
        }
        impl Decode for $t {
            fn decode(dec: &mut Decoder) -> Result<Self> {
                dec.$m()
            }
        }
    };
}
primitive!(u32, u32);
primitive!(i32, i32);
primitive!(u64, u64);
primitive!(i64, i64);
primitive!(bool, bool);

impl<const N: usize> Encode for [u8; N] {
    fn encode(&self, enc: &mut Encoder) {
        enc.opaque_fixed(self);
    }
}

impl<const N: usize> Decode for [u8; N] {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        dec.opaque_array()
    }
}

/// Optional-data (RFC 4506 §4.19).
impl<T: Encode> Encode for Option<T> {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.as_ref(), |e, v| v.encode(e));
    }
}

/// Optional-data (RFC 4506 §4.19).
impl<T: Decode> Decode for Option<T> {
    fn decode(dec: &mut Decoder) -> Result<Self> {
        dec.optional(T::decode)
    }
}

#[cfg(test)]
mod tests;
