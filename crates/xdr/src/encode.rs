//! Encoding, with DDP-eligible items kept apart (the seed paper's "XDR RDMA stream").
//!
//! An [`Encoder`] appends ordinary items to an inline buffer. An item the Upper Layer
//! Binding marks DDP-eligible (NFS READ data, WRITE data, ...) is added with
//! [`Encoder::ddp_opaque`]: its length word goes inline, its data is only *referenced*
//! (a [`Bytes`] handle, no copy) together with where it sits in the stream. The result,
//! an [`XdrStream`], can then be
//! - written to a byte stream as-is (TCP): [`XdrStream::gather`] yields the pieces for a
//!   vectored write, DDP data still uncopied; or
//! - reduced by an RPC-over-RDMA sender: the inline part goes in a Send, each DDP item
//!   moves by RDMA through a chunk whose position is [`XdrStream::xdr_position`].

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::{pad_len, PADDING};

/// Appends XDR items to a growable buffer. Never fails: bounds are the caller's
/// business on the sending side (the types it encodes were built within them).
#[derive(Debug, Default)]
pub struct Encoder {
    inline: BytesMut,
    ddp: Vec<DdpItem>,
}

/// A DDP-eligible opaque item, lifted out of the inline stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdpItem {
    /// Offset in [`XdrStream::inline`] where the item's data would start, i.e. just
    /// after its length word. Non-decreasing across the item list.
    pub inline_offset: usize,
    /// The item's data, without XDR padding. Empty when [`DdpItem::file`] is set.
    pub data: Bytes,
    /// Set when the data was left in a file ([`Encoder::ddp_file`]): `data` is then
    /// empty and the item's bytes are the file's range.
    pub file: Option<FileRange>,
}

/// The data of a DDP-eligible item left in an open file: `len` bytes at `offset`.
///
/// A byte-stream transport sends it from the page cache behind the bytes before it
/// (`oncrpc`'s TCP writer, by `sendfile`), so the data is never copied into user
/// memory. This crate does no I/O: whoever cannot send it that way reads it first
/// ([`XdrStream::materialize`]). Only replies to a byte-stream transport carry one:
/// an RPC-over-RDMA sender reduces `data` and must never be given a file item (nfsd
/// makes them for calls that came over TCP only).
///
/// The range was fixed when the reply was encoded (its length word is already in the
/// stream); if the file shrinks before it is sent, the sender pads it with zeros to
/// keep the record's framing.
#[derive(Debug, Clone)]
pub struct FileRange {
    /// The open file.
    pub file: Arc<std::fs::File>,
    /// Where the range starts.
    pub offset: u64,
    /// Its length in bytes.
    pub len: usize,
}

impl PartialEq for FileRange {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.offset == other.offset && self.len == other.len
    }
}

impl Eq for FileRange {}

impl DdpItem {
    /// The item's data length (without padding), in memory or in its file.
    pub fn len(&self) -> usize {
        self.file.as_ref().map_or(self.data.len(), |f| f.len)
    }

    /// True when the item has no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the item takes in a full XDR stream: data plus round-up padding.
    pub fn padded_len(&self) -> usize {
        crate::padded_len(self.len())
    }
}

/// A piece of a full XDR stream, in order: bytes in memory or a range of a file
/// ([`XdrStream::pieces`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes in memory.
    Bytes(Bytes),
    /// A DDP item's data left in its file.
    File(FileRange),
}

impl Piece {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::File(f) => f.len,
        }
    }

    /// True when the piece has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A complete encoded XDR stream: inline bytes plus the DDP-eligible items cut out of
/// them. The full stream is the inline bytes with each item's data and its zero
/// padding spliced back in at its `inline_offset`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdrStream {
    /// Everything but the DDP-eligible data (their length words included).
    pub inline: Bytes,
    /// DDP-eligible items in stream order.
    pub ddp: Vec<DdpItem>,
}

/// A reserved 4-byte slot whose value is written later ([`Encoder::patch_u32`]),
/// like rustls' back-patched length prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a reserved slot holds zeros until it is patched"]
pub struct Slot(usize);

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty encoder whose inline buffer has room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Encoder {
            inline: BytesMut::with_capacity(capacity),
            ddp: Vec::new(),
        }
    }

    /// Length of the inline part so far.
    pub fn inline_len(&self) -> usize {
        self.inline.len()
    }

    /// Length of the full XDR stream so far (inline plus DDP items with padding).
    pub fn xdr_len(&self) -> usize {
        self.inline.len() + self.ddp.iter().map(DdpItem::padded_len).sum::<usize>()
    }

    // Every append below is `BytesMut::extend_from_slice`, which is `#[inline]`, so a
    // fixed-size item becomes a store after a capacity check. `BufMut::put_u32` and
    // `put_slice` go through `BytesMut`'s `put_slice`, which is not `#[inline]`: a call
    // and a `memcpy` call per item (about 40 instructions for 4 bytes, valgrind),
    // a tenth of a GETATTR's user-space instructions.

    /// RFC 4506 §4.2.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.inline.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// RFC 4506 §4.1 (and enumerations, §4.3).
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.inline.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// RFC 4506 §4.5.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.inline.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// RFC 4506 §4.5.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.inline.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// RFC 4506 §4.4.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }

    /// RFC 4506 §4.9: fixed-length opaque, zero-padded to a multiple of four.
    pub fn opaque_fixed(&mut self, data: &[u8]) -> &mut Self {
        // COPY: ordinary (non-DDP) opaque data is copied into the inline buffer; large
        // payloads should go through `ddp_opaque` instead.
        self.inline.extend_from_slice(data);
        self.inline
            .extend_from_slice(&PADDING[..pad_len(data.len())]);
        self
    }

    /// RFC 4506 §4.10: variable-length opaque (`opaque<>`), or a string (§4.11).
    ///
    /// # Panics
    /// If `data` is 4 GiB or longer, which XDR cannot express.
    pub fn opaque(&mut self, data: &[u8]) -> &mut Self {
        self.u32(xdr_length(data.len()));
        self.opaque_fixed(data)
    }

    /// Like [`Encoder::opaque`], for a string.
    pub fn string(&mut self, s: &[u8]) -> &mut Self {
        self.opaque(s)
    }

    /// A variable-length opaque item the Upper Layer Binding marks DDP-eligible.
    /// The length word is encoded inline; `data` is referenced, never copied.
    ///
    /// # Panics
    /// If `data` is 4 GiB or longer, which XDR cannot express.
    pub fn ddp_opaque(&mut self, data: Bytes) -> &mut Self {
        self.u32(xdr_length(data.len()));
        self.ddp.push(DdpItem {
            inline_offset: self.inline.len(),
            data,
            file: None,
        });
        self
    }

    /// Like [`Encoder::ddp_opaque`], for data left in a file ([`FileRange`]): the
    /// length word is encoded inline, the data stays in the file until a byte-stream
    /// transport sends it.
    ///
    /// # Panics
    /// If the range is 4 GiB or longer, which XDR cannot express.
    pub fn ddp_file(&mut self, range: FileRange) -> &mut Self {
        self.u32(xdr_length(range.len));
        self.ddp.push(DdpItem {
            inline_offset: self.inline.len(),
            data: Bytes::new(),
            file: Some(range),
        });
        self
    }

    /// RFC 4506 §4.19: optional-data.
    pub fn optional<T>(&mut self, v: Option<&T>, item: impl FnOnce(&mut Self, &T)) -> &mut Self {
        match v {
            None => self.bool(false),
            Some(v) => {
                self.bool(true);
                item(self, v);
                self
            }
        }
    }

    /// RFC 4506 §4.13: a variable-length array: count, then the items.
    pub fn array<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) -> &mut Self {
        self.u32(xdr_length(items.len()));
        for v in items {
            item(self, v);
        }
        self
    }

    /// A linked list as a chain of optional-data: TRUE before each entry, FALSE last.
    pub fn list<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) -> &mut Self {
        for v in items {
            self.bool(true);
            item(self, v);
        }
        self.bool(false)
    }

    /// Appends already-encoded XDR bytes verbatim (e.g. an opaque auth body).
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.inline.extend_from_slice(bytes);
        self
    }

    /// Drops what was appended after the inline part was `len` bytes long (DDP items
    /// appended since included): an item that turned out not to fit.
    pub fn truncate(&mut self, len: usize) {
        self.inline.truncate(len);
        self.ddp.retain(|d| d.inline_offset <= len);
    }

    /// Reserves a 4-byte slot to fill in later with [`Encoder::patch_u32`].
    pub fn reserve_u32(&mut self) -> Slot {
        let at = self.inline.len();
        self.inline.extend_from_slice(&[0; 4]);
        Slot(at)
    }

    /// Writes `v` into a slot reserved by this encoder.
    pub fn patch_u32(&mut self, slot: Slot, v: u32) {
        self.inline[slot.0..slot.0 + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Ends encoding.
    pub fn finish(self) -> XdrStream {
        XdrStream {
            inline: self.inline.freeze(),
            ddp: self.ddp,
        }
    }
}

fn xdr_length(len: usize) -> u32 {
    u32::try_from(len).expect("XDR cannot encode an item of 4 GiB or more")
}

impl XdrStream {
    /// A stream with no DDP-eligible items.
    pub fn inline_only(inline: Bytes) -> Self {
        XdrStream {
            inline,
            ddp: Vec::new(),
        }
    }

    /// Length of the full XDR stream (inline plus DDP items with padding).
    pub fn xdr_len(&self) -> usize {
        self.inline.len() + self.ddp.iter().map(DdpItem::padded_len).sum::<usize>()
    }

    /// Position of DDP item `index` in the full XDR stream: where its data starts.
    /// This is the "XDR position" of RPC-over-RDMA Read chunks.
    ///
    /// Returns `None` if there is no such item.
    pub fn xdr_position(&self, index: usize) -> Option<usize> {
        let item = self.ddp.get(index)?;
        let before: usize = self.ddp[..index].iter().map(DdpItem::padded_len).sum();
        Some(item.inline_offset + before)
    }

    /// True when a DDP item's data was left in a file ([`Encoder::ddp_file`]).
    pub fn has_file_data(&self) -> bool {
        self.ddp.iter().any(|item| item.file.is_some())
    }

    /// The full stream as a list of pieces, in order, with DDP items left in files as
    /// [`Piece::File`]. Nothing is copied; padding comes from a static zero buffer;
    /// there are no empty pieces.
    pub fn pieces(&self) -> Vec<Piece> {
        let mut pieces = Vec::with_capacity(1 + 3 * self.ddp.len());
        let mut at = 0;
        for item in &self.ddp {
            if item.inline_offset > at {
                pieces.push(Piece::Bytes(self.inline.slice(at..item.inline_offset)));
            }
            match &item.file {
                Some(f) if f.len > 0 => pieces.push(Piece::File(f.clone())),
                Some(_) => {}
                None if !item.data.is_empty() => pieces.push(Piece::Bytes(item.data.clone())),
                None => {}
            }
            let pad = pad_len(item.len());
            if pad > 0 {
                pieces.push(Piece::Bytes(Bytes::from_static(&PADDING[..pad])));
            }
            at = item.inline_offset;
        }
        if at < self.inline.len() {
            pieces.push(Piece::Bytes(self.inline.slice(at..)));
        }
        pieces
    }

    /// The full stream as a list of pieces for a vectored write, in order. DDP data is
    /// not copied; padding comes from a static zero buffer.
    ///
    /// # Panics
    /// If a DDP item's data is left in a file ([`XdrStream::has_file_data`]): its sender
    /// sends it from the file, or reads it first with [`XdrStream::materialize`].
    pub fn gather(&self) -> Vec<Bytes> {
        self.pieces()
            .into_iter()
            .map(|p| match p {
                Piece::Bytes(b) => b,
                Piece::File(_) => {
                    panic!("XdrStream::gather of data left in a file: materialize it first")
                }
            })
            .collect()
    }

    /// The stream with every DDP item left in a file replaced by its data, read by
    /// `read` (which returns exactly `range.len` bytes or fails). The other items are
    /// moved, not copied.
    pub fn materialize<E>(
        mut self,
        mut read: impl FnMut(&FileRange) -> std::result::Result<Bytes, E>,
    ) -> std::result::Result<XdrStream, E> {
        for item in &mut self.ddp {
            if let Some(f) = item.file.take() {
                item.data = read(&f)?;
            }
        }
        Ok(self)
    }

    /// The full stream in one buffer.
    // COPY: one copy of every byte; for tests and small messages, not the data path.
    pub fn to_bytes(&self) -> Bytes {
        if self.ddp.is_empty() {
            return self.inline.clone();
        }
        let mut out = BytesMut::with_capacity(self.xdr_len());
        for piece in self.gather() {
            out.put_slice(&piece);
        }
        out.freeze()
    }
}
