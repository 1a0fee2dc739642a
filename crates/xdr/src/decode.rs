//! Decoding: a cursor over a received [`Bytes`] buffer.
//!
//! Opaque data and strings are handed out as [`Bytes`] slices of the received buffer:
//! no copy, the slice keeps the buffer alive (quinn `frame.rs`, `take_len`).
//! No method panics, whatever the input; every failure is an [`XdrError`].

use bytes::Bytes;

use crate::error::{Result, XdrError};
use crate::{pad_len, padded_len};

/// Where a DDP-eligible item lies in a stream (an RPC call record, or the part of
/// it an upper layer is shown): the offset of the data's first byte (right after
/// its length word) and the data's length without XDR padding. What
/// [`Decoder::with_item_elided`] is given, once the data was taken out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataItem {
    /// Offset of the data's first byte from the start of the stream.
    pub offset: usize,
    /// Bytes of data (the length word's value).
    pub len: usize,
}

/// A read cursor over one XDR stream.
///
/// Invariant: `pos <= buf.len()`.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    pos: usize,
    /// A reduced stream ([`Decoder::reduced`]): DDP-eligible data items are not in it.
    reduced: bool,
    /// Bytes of DDP-eligible data (padded) left out of a reduced stream so far.
    pub(crate) elided: usize,
    /// Where the one DDP-eligible item left out of this buffer belonged
    /// ([`Decoder::with_item_elided`]): the buffer offset right after its length word;
    /// 0 for none (a length word comes first, so no item's data begins at 0). Not an
    /// `Option`: a decoder is moved with every call, and eight bytes more cost.
    elided_item: usize,
}

impl Decoder {
    /// Starts decoding at the beginning of `buf`.
    pub fn new(buf: Bytes) -> Self {
        Decoder {
            buf,
            pos: 0,
            reduced: false,
            elided: 0,
            elided_item: 0,
        }
    }

    /// Starts decoding a stream from which one DDP-eligible item's data (and its XDR
    /// padding) was taken out, its length word kept: the item whose data began at
    /// offset `at` of the whole stream, which is where that length word ends in `buf`
    /// (a call whose bulk data a byte-stream transport received apart, as RDMA Read
    /// chunks are: `oncrpc::tcp::CallData`). [`Decoder::ddp_opaque`] returns no data
    /// for that item only; every other item is read from `buf` as usual.
    pub fn with_item_elided(buf: Bytes, at: usize) -> Self {
        Decoder {
            elided_item: at,
            ..Decoder::new(buf)
        }
    }

    /// Starts decoding a reduced stream: one whose DDP-eligible data items were moved
    /// out of it, their length words kept (an RPC-over-RDMA Call as received, its Read
    /// chunks' data elsewhere: rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §4.4.4.1).
    /// [`Decoder::ddp_opaque`] then reads only the length word and returns no data, and
    /// [`Decoder::stream_position`] counts the left-out bytes, so an Upper Layer
    /// Binding finds where each item's data belongs in the whole stream.
    pub fn reduced(buf: Bytes) -> Self {
        Decoder {
            reduced: true,
            ..Decoder::new(buf)
        }
    }

    /// Offset of the next byte in the whole stream: [`Decoder::position`] plus the
    /// (padded) data of the DDP-eligible items a reduced stream left out before it.
    pub fn stream_position(&self) -> usize {
        self.pos + self.elided
    }

    /// A DDP-eligible `opaque<max>` (the counterpart of `Encoder::ddp_opaque`): the
    /// data, as [`Decoder::opaque`]; in a reduced stream only the length word is read
    /// and the data is empty (it is elsewhere, at [`Decoder::stream_position`] before
    /// this call plus 4); so too for the one item of [`Decoder::with_item_elided`].
    pub fn ddp_opaque(&mut self, max: u32) -> Result<Bytes> {
        let elided_here = self.elided_item != 0 && self.elided_item == self.pos.saturating_add(4);
        if !self.reduced && !elided_here {
            return self.opaque(max);
        }
        let len = self.length(max)?;
        if elided_here {
            self.elided_item = 0;
        }
        self.elided = self.elided.saturating_add(padded_len(len));
        Ok(Bytes::new())
    }

    /// Offset of the next byte to decode, from the start of the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet decoded.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The undecoded rest of the buffer (no copy); the cursor does not move.
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    /// Fails with [`XdrError::TrailingBytes`] unless everything was consumed.
    pub fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(XdrError::TrailingBytes(n)),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.remaining() {
            return Err(XdrError::UnexpectedEnd {
                needed: n,
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..start + n])
    }

    fn take_word(&mut self) -> Result<[u8; 4]> {
        let mut word = [0u8; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(word)
    }

    /// RFC 4506 §4.2: unsigned integer.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take_word()?))
    }

    /// RFC 4506 §4.1: integer. Also used for enumerations (§4.3).
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.take_word()?))
    }

    /// RFC 4506 §4.5: unsigned hyper integer.
    pub fn u64(&mut self) -> Result<u64> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(word))
    }

    /// RFC 4506 §4.5: hyper integer.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }

    /// RFC 4506 §4.4: boolean, which is 0 or 1 and nothing else.
    pub fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(XdrError::InvalidBool(other)),
        }
    }

    /// Skips `n` zero pad bytes. RFC 4506 §3.9: the pad bytes are zero, and we hold
    /// peers to it.
    fn padding(&mut self, n: usize) -> Result<()> {
        if self.take(n)?.iter().any(|&b| b != 0) {
            return Err(XdrError::NonZeroPadding);
        }
        Ok(())
    }

    /// RFC 4506 §4.9: fixed-length opaque data of `len` bytes plus its padding.
    /// Zero-copy: the result is a slice of the received buffer.
    pub fn opaque_fixed(&mut self, len: usize) -> Result<Bytes> {
        if padded_len(len) > self.remaining() {
            return Err(XdrError::UnexpectedEnd {
                needed: padded_len(len),
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += len;
        self.padding(pad_len(len))?;
        Ok(self.buf.slice(start..start + len))
    }

    /// Fixed-length opaque data into an array (file handles, verifiers, cookies).
    pub fn opaque_array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let data = self.opaque_fixed(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&data);
        Ok(out)
    }

    /// The length word of a variable-length item, checked against its bound and
    /// against the bytes present, before anything is sliced or allocated.
    pub fn length(&mut self, max: u32) -> Result<usize> {
        let len = self.u32()?;
        if len > max {
            return Err(XdrError::LengthOverBound { len, max });
        }
        Ok(len as usize)
    }

    /// RFC 4506 §4.10: variable-length opaque data `opaque<max>`. Zero-copy.
    pub fn opaque(&mut self, max: u32) -> Result<Bytes> {
        let len = self.length(max)?;
        self.opaque_fixed(len)
    }

    /// RFC 4506 §4.11: `string<max>`. XDR strings are ASCII by convention but carry
    /// any bytes (NFS file names are bytes), so this returns the raw bytes. Zero-copy.
    pub fn string(&mut self, max: u32) -> Result<Bytes> {
        self.opaque(max)
    }

    /// RFC 4506 §4.12/§4.13: a fixed or variable-length array. For a variable array
    /// pass the decoded count through [`Decoder::length`] first; this helper does both.
    ///
    /// DoS bound: capacity is reserved for at most `remaining / 4` elements, since
    /// every XDR item takes at least four bytes, whatever count the peer announced.
    pub fn array<T>(
        &mut self,
        max: u32,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let count = self.length(max)?;
        let mut out = Vec::with_capacity(count.min(self.remaining() / 4));
        for _ in 0..count {
            out.push(item(self)?);
        }
        Ok(out)
    }

    /// RFC 4506 §4.19: optional-data `*T`, a boolean followed by the item when TRUE.
    pub fn optional<T>(&mut self, item: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        match self.u32()? {
            0 => Ok(None),
            1 => item(self).map(Some),
            other => Err(XdrError::InvalidDiscriminant(other)),
        }
    }

    /// A linked list written as a chain of optional-data (RFC 4506 §4.19's
    /// `stringlist` example; RPC-over-RDMA's read list and write list), with at most
    /// `max` entries: one more entry is an [`XdrError::LengthOverBound`].
    pub fn list<T>(
        &mut self,
        max: u32,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        while self.bool_discriminant()? {
            if out.len() as u32 >= max {
                return Err(XdrError::LengthOverBound {
                    len: max.saturating_add(1),
                    max,
                });
            }
            out.push(item(self)?);
        }
        Ok(out)
    }

    fn bool_discriminant(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(XdrError::InvalidDiscriminant(other)),
        }
    }
}
