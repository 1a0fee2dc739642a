//! Linked lists kept in their XDR encoding ([`EncodedList`]), for the long lists of
//! small entries a server fills up to a byte limit (NFS READDIR's `dirlist3` and
//! `dirlist4`).
//!
//! A list of decoded entries costs much more memory than it takes on the wire: each
//! entry's structure (a 96-byte NFSv4 `entry4` holds two `Bytes` handles and a `Vec`),
//! a heap allocation or two for its name and attributes, and the `Vec` of entries
//! doubling. A server that bounds its memory per listing then stops a listing well
//! before the client's byte limit (by about four times for short names), and the
//! client needs that many more round trips. Kept encoded, a list takes exactly its
//! wire size, is built with one copy of each entry (into the list's buffer) and sent
//! with one more (into the reply).

use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;

use crate::{Decode, Decoder, Encode, Encoder, Result, XdrError};

/// An XDR linked list written as a chain of optional-data (RFC 4506 §4.19: TRUE
/// before each entry, FALSE after the last), kept encoded. Built with a
/// [`ListBuilder`], or decoded (each entry checked once); read back with
/// [`EncodedList::iter`], which decodes each entry again.
pub struct EncodedList<T> {
    /// Each entry preceded by its TRUE; not the closing FALSE.
    xdr: Bytes,
    len: usize,
    entry: PhantomData<fn() -> T>,
}

impl<T> EncodedList<T> {
    /// An empty list.
    pub fn new() -> Self {
        EncodedList {
            xdr: Bytes::new(),
            len: 0,
            entry: PhantomData,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the entries take on the wire (each with its TRUE; the closing FALSE
    /// not counted).
    pub fn entries_xdr_len(&self) -> usize {
        self.xdr.len()
    }
}

impl<T: Decode> EncodedList<T> {
    /// The entries, decoded from the list's bytes.
    pub fn iter(&self) -> Iter<T> {
        Iter {
            dec: Decoder::new(self.xdr.clone()),
            left: self.len,
            entry: PhantomData,
        }
    }

    /// The entries, decoded.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().collect()
    }

    /// The last entry, decoded.
    pub fn last(&self) -> Option<T> {
        self.iter().last()
    }

    /// Decodes a list of at most `max` entries (one more is an
    /// [`XdrError::LengthOverBound`], as [`Decoder::list`]), checking each entry.
    pub fn decode_max(dec: &mut Decoder, max: u32) -> Result<Self> {
        let start = dec.position();
        let rest = dec.rest();
        let elided = dec.elided;
        // Each entry decoded and dropped (a `Vec<()>` allocates nothing).
        let len = dec.list(max, |d| T::decode(d).map(drop))?.len();
        if dec.elided != elided {
            // A DDP-eligible item left out of a reduced stream: its bytes are not
            // here to keep.
            return Err(XdrError::UnexpectedEnd {
                needed: dec.elided - elided,
                remaining: 0,
            });
        }
        // Everything read but the closing FALSE.
        let end = dec.position() - 4;
        Ok(EncodedList {
            xdr: rest.slice(..end - start),
            len,
            entry: PhantomData,
        })
    }
}

impl<T: Encode> From<Vec<T>> for EncodedList<T> {
    fn from(entries: Vec<T>) -> Self {
        let mut b = ListBuilder::new();
        for e in &entries {
            b.push(e);
        }
        b.finish()
    }
}

impl<T> Encode for EncodedList<T> {
    fn encode(&self, enc: &mut Encoder) {
        enc.raw(&self.xdr);
        enc.bool(false);
    }
}

impl<T> Clone for EncodedList<T> {
    fn clone(&self) -> Self {
        EncodedList {
            xdr: self.xdr.clone(),
            len: self.len,
            entry: PhantomData,
        }
    }
}

impl<T> Default for EncodedList<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Equal lists encode alike (XDR has one encoding per value).
impl<T> PartialEq for EncodedList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.xdr == other.xdr
    }
}

impl<T> Eq for EncodedList<T> {}

impl<T: Decode + fmt::Debug> fmt::Debug for EncodedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Decode> IntoIterator for &EncodedList<T> {
    type Item = T;
    type IntoIter = Iter<T>;

    fn into_iter(self) -> Iter<T> {
        self.iter()
    }
}

impl<T: Decode> IntoIterator for EncodedList<T> {
    type Item = T;
    type IntoIter = Iter<T>;

    fn into_iter(self) -> Iter<T> {
        self.iter()
    }
}

/// The entries of an [`EncodedList`], decoded one by one.
pub struct Iter<T> {
    dec: Decoder,
    left: usize,
    entry: PhantomData<fn() -> T>,
}

impl<T: Decode> Iterator for Iter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Every entry was encoded by a `ListBuilder` or checked by `decode_max`.
        match self.dec.u32().and_then(|_| T::decode(&mut self.dec)) {
            Ok(e) => Some(e),
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// Builds an [`EncodedList`] entry by entry, each encoded once into the list's
/// buffer.
pub struct ListBuilder<T> {
    enc: Encoder,
    len: usize,
    entry: PhantomData<fn() -> T>,
}

impl<T: Encode> ListBuilder<T> {
    /// An empty list.
    pub fn new() -> Self {
        ListBuilder {
            enc: Encoder::new(),
            len: 0,
            entry: PhantomData,
        }
    }

    /// Bytes the entries take so far (each with its TRUE).
    pub fn entries_xdr_len(&self) -> usize {
        self.enc.inline_len()
    }

    /// Number of entries so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `entry`.
    pub fn push(&mut self, entry: &T) {
        // No limit: it always fits.
        self.push_within(entry, usize::MAX);
    }

    /// Appends `entry` if the entries then take at most `limit` bytes (each with its
    /// TRUE); `false`, and the list unchanged, if not.
    pub fn push_within(&mut self, entry: &T, limit: usize) -> bool {
        let before = self.enc.inline_len();
        self.enc.bool(true);
        entry.encode(&mut self.enc);
        if self.enc.inline_len() > limit {
            self.enc.truncate(before);
            return false;
        }
        self.len += 1;
        true
    }

    /// The list.
    pub fn finish(self) -> EncodedList<T> {
        let stream = self.enc.finish();
        // Entries with DDP-eligible items (none today) are kept with their data.
        let xdr = if stream.ddp.is_empty() {
            stream.inline
        } else {
            stream.to_bytes()
        };
        EncodedList {
            xdr,
            len: self.len,
            entry: PhantomData,
        }
    }
}

impl<T: Encode> Default for ListBuilder<T> {
    fn default() -> Self {
        Self::new()
    }
}
