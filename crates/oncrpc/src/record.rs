//! Record marking (RFC 5531 §11), sans-IO.
//!
//! RFC 5531 §11: "A record is composed of one or more record fragments. A record
//! fragment is a four-byte header followed by 0 to (2**31) - 1 bytes of fragment
//! data. The bytes encode an unsigned binary number; as with XDR integers, the byte
//! order is from highest to lowest. The number encodes two values -- a boolean that
//! indicates whether the fragment is the last fragment of the record (bit value 1
//! implies the fragment is the last fragment) and a 31-bit unsigned binary value that
//! is the length in bytes of the fragment's data."
//!
//! - [`RecordDecoder`] cuts records out of a receive buffer, like tokio-util's
//!   `Decoder`: `Ok(None)` means "need more bytes", an error means the stream is dead.
//!   DoS bound: a record whose announced size (fragments so far plus the one
//!   announced) exceeds the configured maximum is an error *before* anything of that
//!   size is reserved; [`RecordDecoder::bytes_wanted`] tells the driver how much it
//!   may usefully read, so it never reserves more than one fragment's remaining bytes.
//! - [`frame`] splits a message (gathered pieces) into fragments, each header a fresh
//!   4-byte buffer, the data pieces sliced (not copied).

use bytes::{Buf, Bytes, BytesMut};
use xdr::{FileRange, Piece};

/// RFC 5531 §11: the last-fragment bit of a record mark.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;
/// RFC 5531 §11: a fragment carries at most 2^31 - 1 bytes.
pub const MAX_FRAGMENT_LEN: u32 = 0x7fff_ffff;

/// Why a record stream is broken. Every variant closes the connection
/// ([`crate::Disposition::Close`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record (fragments so far plus the one just announced) is larger than the
    /// receiver accepts.
    #[error("record of at least {announced} bytes exceeds the maximum of {max}")]
    RecordTooLarge {
        /// Bytes of the record announced so far.
        announced: u64,
        /// The configured maximum.
        max: usize,
    },
    /// The stream ended inside a record.
    #[error("stream ended inside a record ({buffered} bytes buffered)")]
    TruncatedRecord {
        /// Bytes of the unfinished record received.
        buffered: usize,
    },
}

/// Reassembles records from a byte stream (RFC 5531 §11).
#[derive(Debug)]
pub struct RecordDecoder {
    max_record: usize,
    /// Data of the earlier fragments of the current record.
    partial: BytesMut,
    /// Length and last-flag of the fragment whose data is being received, once its
    /// header is read.
    fragment: Option<(usize, bool)>,
}

impl RecordDecoder {
    /// A decoder accepting records of at most `max_record` bytes.
    pub fn new(max_record: usize) -> Self {
        RecordDecoder {
            max_record,
            partial: BytesMut::new(),
            fragment: None,
        }
    }

    /// The maximum record size.
    pub fn max_record(&self) -> usize {
        self.max_record
    }

    /// How many more bytes `src` must hold before [`RecordDecoder::decode`] can make
    /// progress: the rest of the current fragment, or a 4-byte header. A driver
    /// reserves at most this much (capped by its read size).
    pub fn bytes_wanted(&self, src: &BytesMut) -> usize {
        match self.fragment {
            Some((len, _)) => len.saturating_sub(src.len()).max(1),
            None => 4usize.saturating_sub(src.len()).max(1),
        }
    }

    /// The most bytes the record being received can take, once a fragment header
    /// announced it: the fragments so far and the current one if it is the last, else
    /// the maximum record size (later fragments may add up to it). `None` between
    /// records.
    pub fn record_bound(&self) -> Option<usize> {
        match self.fragment {
            Some((len, true)) => Some(self.partial.len() + len),
            Some((_, false)) => Some(self.max_record),
            None if !self.partial.is_empty() => Some(self.max_record),
            None => None,
        }
    }

    /// Takes the next complete record out of `src`, if there is one.
    ///
    /// A record that is a single fragment is split off `src` without a copy; the
    /// fragments of a multi-fragment record are joined (one copy).
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        loop {
            let (len, last) = match self.fragment {
                Some(f) => f,
                None => {
                    if src.len() < 4 {
                        return Ok(None);
                    }
                    let mark = src.get_u32();
                    let len = (mark & MAX_FRAGMENT_LEN) as usize;
                    let last = mark & LAST_FRAGMENT != 0;
                    let announced = self.partial.len() as u64 + len as u64;
                    if announced > self.max_record as u64 {
                        return Err(RecordError::RecordTooLarge {
                            announced,
                            max: self.max_record,
                        });
                    }
                    self.fragment = Some((len, last));
                    (len, last)
                }
            };
            if src.len() < len {
                return Ok(None);
            }
            self.fragment = None;
            let data = src.split_to(len);
            if last {
                if self.partial.is_empty() {
                    return Ok(Some(data.freeze()));
                }
                // COPY: fragments of one record are joined into a contiguous buffer.
                self.partial.extend_from_slice(&data);
                return Ok(Some(std::mem::take(&mut self.partial).freeze()));
            }
            // COPY: see above.
            self.partial.extend_from_slice(&data);
        }
    }

    /// The length of the record being received when its rest may be read into memory
    /// of the driver's own rather than into `src`: the fragment being received is the
    /// record's only one, and `src` holds only its first bytes (so all of `src` is
    /// the record's).
    pub fn lone_fragment(&self, src: &BytesMut) -> Option<usize> {
        match self.fragment {
            Some((len, true)) if self.partial.is_empty() && src.len() < len => Some(len),
            _ => None,
        }
    }

    /// Hands the record [`RecordDecoder::lone_fragment`] announced to the driver:
    /// its first bytes move from `src` (left empty) to `body`, and the decoder waits
    /// for the next record's header; the driver reads the rest into `body` itself.
    pub fn take_lone_fragment(&mut self, src: &mut BytesMut, body: &mut Vec<u8>) {
        debug_assert!(self.lone_fragment(src).is_some());
        // COPY: the record's first bytes, which came with the read that ended the
        // previous record (at most one read's worth).
        body.extend_from_slice(src);
        src.clear();
        self.fragment = None;
    }

    /// Called at end of stream: an error if a record was left unfinished.
    pub fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        match self.decode(src)? {
            Some(r) => Ok(Some(r)),
            None if src.is_empty() && self.partial.is_empty() && self.fragment.is_none() => {
                Ok(None)
            }
            None => Err(RecordError::TruncatedRecord {
                buffered: self.partial.len() + src.len(),
            }),
        }
    }
}

/// Splits a message given as gathered pieces (e.g. [`xdr::XdrStream::gather`]) into
/// record fragments of at most `max_fragment` data bytes each, the last one marked
/// last. Returns the pieces to write, in order; data is sliced, never copied.
///
/// An empty message becomes one empty last fragment. `max_fragment` is clamped to
/// 1..=2^31-1.
pub fn frame(pieces: Vec<Bytes>, max_fragment: usize) -> Vec<Bytes> {
    frame_pieces(pieces.into_iter().map(Piece::Bytes).collect(), max_fragment)
        .into_iter()
        .map(|p| match p {
            Piece::Bytes(b) => b,
            Piece::File(_) => unreachable!("frame_pieces makes file pieces of file pieces only"),
        })
        .collect()
}

/// [`frame`] for pieces that may be ranges of files ([`xdr::XdrStream::pieces`]): a
/// file range that crosses a fragment boundary is cut into two ranges; nothing is
/// read.
pub fn frame_pieces(pieces: Vec<Piece>, max_fragment: usize) -> Vec<Piece> {
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT_LEN as usize);
    let total: usize = pieces.iter().map(Piece::len).sum();
    let mut out = Vec::with_capacity(pieces.len() + 2 + 2 * (total / max_fragment));
    let mut remaining = total;
    let mut room = 0; // data bytes left in the current fragment
    for mut piece in pieces {
        while !piece.is_empty() {
            if room == 0 {
                room = remaining.min(max_fragment);
                remaining -= room;
                out.push(Piece::Bytes(mark(room, remaining == 0)));
            }
            let n = room.min(piece.len());
            out.push(split_to(&mut piece, n));
            room -= n;
        }
    }
    if total == 0 {
        out.push(Piece::Bytes(mark(0, true)));
    }
    out
}

/// The first `n` bytes of `piece`, which keeps the rest.
fn split_to(piece: &mut Piece, n: usize) -> Piece {
    match piece {
        Piece::Bytes(b) => Piece::Bytes(b.split_to(n)),
        Piece::File(f) => {
            let head = FileRange {
                file: f.file.clone(),
                offset: f.offset,
                len: n,
            };
            f.offset += n as u64;
            f.len -= n;
            Piece::File(head)
        }
    }
}

fn mark(len: usize, last: bool) -> Bytes {
    Bytes::copy_from_slice(&mark_word(len, last))
}

/// The record mark of a fragment of `len` data bytes (RFC 5531 §11), `last` or not.
/// `len` must be at most [`MAX_FRAGMENT_LEN`] (the callers clamp their fragments).
pub(crate) fn mark_word(len: usize, last: bool) -> [u8; 4] {
    let mut v = (len as u32) & MAX_FRAGMENT_LEN;
    if last {
        v |= LAST_FRAGMENT;
    }
    v.to_be_bytes()
}

/// The record mark of `message` sent as one last fragment, if it fits in one of at
/// most `max_fragment` bytes (clamped as in [`frame`]): the framing of [`frame`] for
/// a message that needs no more, with nothing to allocate.
pub(crate) fn single_fragment_mark(message_len: usize, max_fragment: usize) -> Option<[u8; 4]> {
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT_LEN as usize);
    (message_len <= max_fragment).then(|| mark_word(message_len, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_fragment_mark_is_the_mark_frame_gives() {
        for (len, max) in [(0, 1), (1, 1), (5, 8), (8, 8), (100, usize::MAX)] {
            let framed = frame(vec![Bytes::from(vec![0u8; len])], max);
            let mark = single_fragment_mark(len, max).expect("fits one fragment");
            assert_eq!(&mark[..], &framed[0][..]);
        }
        assert_eq!(single_fragment_mark(9, 8), None);
        assert_eq!(single_fragment_mark(2, 0), None); // clamped to 1
    }

    #[test]
    fn the_record_bound_is_known_from_the_first_fragment_header() {
        let mut d = RecordDecoder::new(1000);
        let mut src = BytesMut::new();
        assert_eq!(d.record_bound(), None);
        src.extend_from_slice(&(LAST_FRAGMENT | 300).to_be_bytes());
        src.extend_from_slice(&[0; 10]);
        assert!(d.decode(&mut src).unwrap().is_none());
        assert_eq!(d.record_bound(), Some(300), "one fragment: its length");
        src.extend_from_slice(&[0; 290]);
        assert_eq!(d.decode(&mut src).unwrap().unwrap().len(), 300);
        assert_eq!(d.record_bound(), None);
        src.extend_from_slice(&20u32.to_be_bytes());
        assert!(d.decode(&mut src).unwrap().is_none());
        assert_eq!(d.record_bound(), Some(1000), "more fragments may follow");
    }
    use proptest::prelude::*;

    fn concat(pieces: &[Bytes]) -> BytesMut {
        let mut b = BytesMut::new();
        for p in pieces {
            b.extend_from_slice(p);
        }
        b
    }

    #[test]
    fn single_fragment_record_is_decoded_without_copy() {
        let mut src = BytesMut::from(&[0x80, 0, 0, 4, 1, 2, 3, 4, 0x80][..]);
        let mut d = RecordDecoder::new(100);
        let rec = d.decode(&mut src).unwrap().unwrap();
        assert_eq!(&rec[..], &[1, 2, 3, 4]);
        assert_eq!(&src[..], &[0x80]);
        assert_eq!(d.decode(&mut src).unwrap(), None);
    }

    #[test]
    fn multi_fragment_record_is_joined() {
        // RFC 5531 §11: a record is one or more fragments; bit 31 marks the last.
        let mut src = BytesMut::from(&[0, 0, 0, 2, 1, 2, 0, 0, 0, 0, 0x80, 0, 0, 1, 3][..]);
        let mut d = RecordDecoder::new(100);
        assert_eq!(&d.decode(&mut src).unwrap().unwrap()[..], &[1, 2, 3]);
        assert!(src.is_empty());
    }

    #[test]
    fn huge_announced_record_is_refused_before_allocation() {
        let mut src = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        let mut d = RecordDecoder::new(1 << 20);
        assert_eq!(
            d.decode(&mut src),
            Err(RecordError::RecordTooLarge {
                announced: 0x7fff_ffff,
                max: 1 << 20
            })
        );
        assert!(src.capacity() < 1 << 20);
    }

    #[test]
    fn record_over_max_across_fragments_is_refused() {
        let mut src = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3, 0x80, 0, 0, 2][..]);
        let mut d = RecordDecoder::new(4);
        assert_eq!(
            d.decode(&mut src),
            Err(RecordError::RecordTooLarge {
                announced: 5,
                max: 4
            })
        );
    }

    #[test]
    fn record_of_exactly_max_is_accepted() {
        let mut src = BytesMut::from(&[0x80, 0, 0, 4, 1, 2, 3, 4][..]);
        assert!(RecordDecoder::new(4).decode(&mut src).unwrap().is_some());
    }

    #[test]
    fn eof_inside_a_record_is_truncated_record() {
        let mut d = RecordDecoder::new(100);
        let mut src = BytesMut::from(&[0, 0, 0, 1, 9, 0x80, 0][..]);
        assert_eq!(d.decode(&mut src), Ok(None));
        assert_eq!(
            d.decode_eof(&mut src),
            Err(RecordError::TruncatedRecord { buffered: 3 })
        );
        let mut empty = BytesMut::new();
        assert_eq!(RecordDecoder::new(1).decode_eof(&mut empty), Ok(None));
    }

    #[test]
    fn bytes_wanted_never_exceeds_the_fragment() {
        let mut d = RecordDecoder::new(1000);
        let mut src = BytesMut::from(&[0x80, 0, 1, 0][..]);
        assert_eq!(d.bytes_wanted(&src), 1);
        assert_eq!(d.decode(&mut src), Ok(None));
        assert_eq!(d.bytes_wanted(&src), 256);
    }

    #[test]
    fn empty_message_is_one_empty_last_fragment() {
        assert_eq!(concat(&frame(vec![], 10)), &[0x80, 0, 0, 0][..]);
    }

    #[test]
    fn frame_splits_at_max_fragment() {
        let out = concat(&frame(vec![Bytes::from_static(&[1, 2, 3, 4, 5])], 2));
        assert_eq!(
            &out[..],
            &[0, 0, 0, 2, 1, 2, 0, 0, 0, 2, 3, 4, 0x80, 0, 0, 1, 5][..]
        );
    }

    proptest! {
        #[test]
        fn frame_then_decode_round_trips(
            msgs in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
                1..5),
            max_fragment in 1usize..50,
            chunk in 1usize..64,
        ) {
            let mut wire = BytesMut::new();
            let mut expected = Vec::new();
            for pieces in &msgs {
                let pieces: Vec<Bytes> = pieces.iter().cloned().map(Bytes::from).collect();
                expected.push(concat(&pieces).freeze());
                wire.extend_from_slice(&concat(&frame(pieces, max_fragment)));
            }
            // Feed the stream in chunks of `chunk` bytes.
            let mut d = RecordDecoder::new(1000);
            let mut src = BytesMut::new();
            let mut got = Vec::new();
            for c in wire.chunks(chunk) {
                src.extend_from_slice(c);
                while let Some(r) = d.decode(&mut src).unwrap() {
                    got.push(r);
                }
            }
            prop_assert_eq!(d.decode_eof(&mut src).unwrap(), None);
            prop_assert_eq!(got, expected);
        }
    }
}
