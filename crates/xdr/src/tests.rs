//! Unit and property tests: every type, every error path.

use bytes::Bytes;
use proptest::prelude::*;

use crate::*;

fn dec(bytes: &[u8]) -> Decoder {
    Decoder::new(Bytes::copy_from_slice(bytes))
}

#[test]
fn integers_are_big_endian() {
    let mut e = Encoder::new();
    e.u32(0x0102_0304)
        .i32(-2)
        .u64(0x0102_0304_0506_0708)
        .i64(-1);
    let s = e.finish();
    assert_eq!(
        &s.inline[..],
        &[
            1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff
        ]
    );
    let mut d = Decoder::new(s.inline);
    assert_eq!(d.u32(), Ok(0x0102_0304));
    assert_eq!(d.i32(), Ok(-2));
    assert_eq!(d.u64(), Ok(0x0102_0304_0506_0708));
    assert_eq!(d.i64(), Ok(-1));
    assert_eq!(d.finish(), Ok(()));
}

/// RFC 4506 §7 encodes the file example; its name field "sillyprog" is
/// 00 00 00 09 73 69 6c 6c 79 70 72 6f 67 00 00 00.
#[test]
fn rfc4506_example_string_is_padded_with_zeros() {
    let mut e = Encoder::new();
    e.string(b"sillyprog");
    let s = e.finish();
    assert_eq!(
        &s.inline[..],
        b"\x00\x00\x00\x09sillyprog\x00\x00\x00".as_slice()
    );
    let mut d = Decoder::new(s.inline);
    assert_eq!(&d.string(255).unwrap()[..], b"sillyprog");
}

#[test]
fn short_buffer_is_unexpected_end() {
    assert_eq!(
        dec(&[0, 0, 1]).u32(),
        Err(XdrError::UnexpectedEnd {
            needed: 4,
            remaining: 3
        })
    );
    assert_eq!(
        dec(&[0; 7]).u64(),
        Err(XdrError::UnexpectedEnd {
            needed: 8,
            remaining: 7
        })
    );
    // Length says 5, only the data is there, not its padding.
    assert_eq!(
        dec(&[0, 0, 0, 5, 1, 2, 3, 4, 5]).opaque(100),
        Err(XdrError::UnexpectedEnd {
            needed: 8,
            remaining: 5
        })
    );
}

#[test]
fn huge_announced_length_fails_before_allocating() {
    assert_eq!(
        dec(&[0xff, 0xff, 0xff, 0xff]).opaque(u32::MAX),
        Err(XdrError::UnexpectedEnd {
            needed: 0xffff_ffff + 1,
            remaining: 0
        })
    );
    // An array that claims four billion entries reserves nothing for them.
    assert_eq!(
        dec(&[0xff, 0xff, 0xff, 0xff]).array(u32::MAX, |d| d.u32()),
        Err(XdrError::UnexpectedEnd {
            needed: 4,
            remaining: 0
        })
    );
}

#[test]
fn length_over_bound_is_refused() {
    assert_eq!(
        dec(&[0, 0, 1, 0]).string(255),
        Err(XdrError::LengthOverBound { len: 256, max: 255 })
    );
    assert_eq!(
        dec(&[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]).array(2, |d| d.u32()),
        Err(XdrError::LengthOverBound { len: 3, max: 2 })
    );
}

#[test]
fn nonzero_padding_is_refused() {
    assert_eq!(
        dec(&[0, 0, 0, 1, 0xaa, 0, 1, 0]).opaque(8),
        Err(XdrError::NonZeroPadding)
    );
    assert_eq!(
        dec(&[0xaa, 0xbb, 0, 9]).opaque_fixed(2),
        Err(XdrError::NonZeroPadding)
    );
}

#[test]
fn bool_other_than_zero_or_one_is_refused() {
    assert_eq!(dec(&[0, 0, 0, 2]).bool(), Err(XdrError::InvalidBool(2)));
    assert_eq!(
        dec(&[0, 0, 0, 7]).optional(|d| d.u32()),
        Err(XdrError::InvalidDiscriminant(7))
    );
}

#[test]
fn trailing_bytes_are_reported() {
    assert_eq!(
        u32::from_xdr(Bytes::from_static(&[0, 0, 0, 1, 0])),
        Err(XdrError::TrailingBytes(1))
    );
}

#[test]
fn opaque_decoding_shares_the_buffer() {
    let buf = Bytes::from_static(&[0, 0, 0, 3, b'a', b'b', b'c', 0]);
    let mut d = Decoder::new(buf.clone());
    let s = d.opaque(3).unwrap();
    assert_eq!(&s[..], b"abc");
    // Same memory: a slice, not a copy.
    assert_eq!(s.as_ptr(), buf[4..].as_ptr());
}

#[test]
fn linked_list_is_a_chain_of_optional_data() {
    let mut e = Encoder::new();
    e.list(&[7u32, 8, 9], |e, v| {
        e.u32(*v);
    });
    let s = e.finish();
    assert_eq!(
        &s.inline[..],
        &[0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0]
    );
    assert_eq!(
        Decoder::new(s.inline.clone()).list(3, |d| d.u32()),
        Ok(vec![7, 8, 9])
    );
    assert_eq!(
        Decoder::new(s.inline).list(2, |d| d.u32()),
        Err(XdrError::LengthOverBound { len: 3, max: 2 })
    );
}

#[test]
fn union_arm_via_discriminant() {
    // A union is a discriminant then the arm; the caller matches on it.
    let mut d = dec(&[0, 0, 0, 1, 0, 0, 0, 42]);
    let v = match d.u32().unwrap() {
        1 => d.u32().unwrap(),
        _ => unreachable!(),
    };
    assert_eq!(v, 42);
}

#[test]
fn back_patched_slot() {
    let mut e = Encoder::new();
    let slot = e.reserve_u32();
    e.u32(5);
    e.patch_u32(slot, 9);
    assert_eq!(&e.finish().inline[..], &[0, 0, 0, 9, 0, 0, 0, 5]);
}

#[test]
fn ddp_item_is_referenced_not_copied_and_positions_are_exact() {
    let data = Bytes::from(vec![0xab; 5]);
    let mut e = Encoder::new();
    e.u32(1)
        .ddp_opaque(data.clone())
        .u32(2)
        .ddp_opaque(Bytes::from_static(b"xyz"))
        .u32(3);
    let s = e.finish();
    // Inline: 1, len 5, 2, len 3, 3.
    assert_eq!(s.inline.len(), 20);
    assert_eq!(s.ddp[0].inline_offset, 8);
    assert_eq!(s.ddp[0].data.as_ptr(), data.as_ptr());
    assert_eq!(s.xdr_position(0), Some(8));
    // Second item: 8 + 8 (5 bytes padded) + 4 (the u32 2) + 4 (its length) = 24.
    assert_eq!(s.xdr_position(1), Some(24));
    assert_eq!(s.xdr_position(2), None);
    assert_eq!(s.xdr_len(), 20 + 8 + 4);

    let mut plain = Encoder::new();
    plain.u32(1).opaque(&data).u32(2).opaque(b"xyz").u32(3);
    assert_eq!(s.to_bytes(), plain.finish().inline);
}

proptest! {
    #[test]
    fn scalars_round_trip(a: u32, b: i32, c: u64, d: i64, f: bool) {
        let mut e = Encoder::new();
        e.u32(a).i32(b).u64(c).i64(d).bool(f);
        let mut x = Decoder::new(e.finish().inline);
        prop_assert_eq!(x.u32(), Ok(a));
        prop_assert_eq!(x.i32(), Ok(b));
        prop_assert_eq!(x.u64(), Ok(c));
        prop_assert_eq!(x.i64(), Ok(d));
        prop_assert_eq!(x.bool(), Ok(f));
        prop_assert_eq!(x.finish(), Ok(()));
    }

    #[test]
    fn opaques_arrays_options_round_trip(
        fixed in proptest::collection::vec(any::<u8>(), 0..40),
        var in proptest::collection::vec(any::<u8>(), 0..40),
        arr in proptest::collection::vec(any::<u32>(), 0..20),
        opt in proptest::option::of(any::<u64>()),
    ) {
        let mut e = Encoder::new();
        e.opaque_fixed(&fixed).opaque(&var).array(&arr, |e, v| { e.u32(*v); });
        opt.encode(&mut e);
        let s = e.finish();
        prop_assert_eq!(s.inline.len() % 4, 0);
        let mut x = Decoder::new(s.inline);
        prop_assert_eq!(&x.opaque_fixed(fixed.len()).unwrap()[..], &fixed[..]);
        prop_assert_eq!(&x.opaque(40).unwrap()[..], &var[..]);
        prop_assert_eq!(x.array(20, |d| d.u32()).unwrap(), arr);
        prop_assert_eq!(Option::<u64>::decode(&mut x), Ok(opt));
        prop_assert_eq!(x.finish(), Ok(()));
    }

    /// With DDP items, the gathered stream equals the plain inline encoding, and each
    /// item's XDR position points at its data in that stream.
    #[test]
    fn ddp_stream_flattens_to_the_inline_encoding(
        items in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..30), any::<bool>()), 0..8)
    ) {
        let mut reduced = Encoder::new();
        let mut plain = Encoder::new();
        for (word, data, ddp) in &items {
            reduced.u32(*word);
            plain.u32(*word);
            if *ddp {
                reduced.ddp_opaque(Bytes::copy_from_slice(data));
            } else {
                reduced.opaque(data);
            }
            plain.opaque(data);
        }
        let s = reduced.finish();
        let full = s.to_bytes();
        prop_assert_eq!(&full, &plain.finish().inline);
        prop_assert_eq!(s.xdr_len(), full.len());
        for (i, item) in s.ddp.iter().enumerate() {
            let pos = s.xdr_position(i).unwrap();
            prop_assert_eq!(&full[pos..pos + item.data.len()], &item.data[..]);
        }
    }

    /// Arbitrary bytes never make the decoder panic.
    #[test]
    fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut d = dec(&bytes);
        let _ = d.list(8, |d| d.opaque(16));
        let _ = d.array(8, |d| d.string(4));
        let _ = d.optional(|d| d.u64());
    }
}

#[test]
fn file_item_keeps_its_place_and_length_until_materialized() {
    let file = std::sync::Arc::new(std::fs::File::open("/dev/null").unwrap());
    let range = FileRange {
        file: file.clone(),
        offset: 10,
        len: 5,
    };
    let mut enc = Encoder::new();
    enc.u32(1).ddp_file(range.clone()).u32(2);
    let s = enc.finish();
    assert!(s.has_file_data());
    assert_eq!(s.xdr_len(), 4 + 4 + 8 + 4);
    assert_eq!(s.xdr_position(0), Some(8));
    assert_eq!(
        s.pieces(),
        vec![
            Piece::Bytes(Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 5])),
            Piece::File(range),
            Piece::Bytes(Bytes::from_static(&[0, 0, 0])),
            Piece::Bytes(Bytes::from_static(&[0, 0, 0, 2])),
        ]
    );
    let m = s
        .materialize(|r| Ok::<_, ()>(Bytes::from(vec![9u8; r.len])))
        .unwrap();
    assert!(!m.has_file_data());
    assert_eq!(
        &m.to_bytes()[..],
        &[0, 0, 0, 1, 0, 0, 0, 5, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 2]
    );
}

/// A reduced stream (an RPC-over-RDMA Call as received: DDP-eligible data in Read
/// chunks, length words inline): `ddp_opaque` reads the length word only, and
/// `stream_position` counts the data left out, so items after it are found where
/// they are in the whole stream.
#[test]
fn a_reduced_stream_skips_ddp_data_and_counts_it_in_the_stream_position() {
    let mut e = crate::Encoder::new();
    e.u32(1)
        .ddp_opaque(bytes::Bytes::from_static(b"hello"))
        .u32(2);
    let s = e.finish();
    let mut whole = Decoder::new(s.to_bytes());
    assert_eq!(whole.u32().unwrap(), 1);
    assert_eq!(&whole.ddp_opaque(16).unwrap()[..], b"hello");
    let after_whole = whole.stream_position();
    assert_eq!(whole.u32().unwrap(), 2);

    let mut reduced = Decoder::reduced(s.inline.clone());
    assert_eq!(reduced.u32().unwrap(), 1);
    assert_eq!(reduced.stream_position(), 4);
    assert!(reduced.ddp_opaque(16).unwrap().is_empty());
    assert_eq!(reduced.position(), 8, "the length word only");
    assert_eq!(
        reduced.stream_position(),
        after_whole,
        "5 bytes and 3 of pad"
    );
    assert_eq!(reduced.u32().unwrap(), 2);
    reduced.finish().unwrap();
}

/// A kept-encoded list encodes as `Encoder::list` does, decodes back to the same
/// entries, stops at its bound, and `push_within` leaves it unchanged when an entry
/// does not fit.
#[test]
fn encoded_lists_match_linked_lists_on_the_wire() {
    let entries: Vec<Vec<u8>> = vec![b"a".to_vec(), b"bcdef".to_vec(), Vec::new()];
    let mut plain = Encoder::new();
    plain.list(&entries, |e, v| {
        e.opaque(v);
    });
    let plain = plain.finish().inline;

    #[derive(Debug)]
    struct O(Vec<u8>);
    impl Encode for O {
        fn encode(&self, enc: &mut Encoder) {
            enc.opaque(&self.0);
        }
    }
    impl Decode for O {
        fn decode(dec: &mut Decoder) -> Result<Self> {
            dec.opaque(16).map(|b| O(b.to_vec()))
        }
    }
    let kept: EncodedList<O> = entries.iter().cloned().map(O).collect::<Vec<_>>().into();
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.to_xdr().inline, plain);
    assert_eq!(kept.entries_xdr_len(), plain.len() - 4);

    let mut dec = Decoder::new(plain.clone());
    let back = EncodedList::<O>::decode_max(&mut dec, 3).unwrap();
    dec.finish().unwrap();
    assert_eq!(back, kept);
    let names: Vec<Vec<u8>> = back.iter().map(|o| o.0).collect();
    assert_eq!(names, entries);
    assert_eq!(back.last().map(|o| o.0), Some(Vec::new()));
    assert!(matches!(
        EncodedList::<O>::decode_max(&mut Decoder::new(plain.clone()), 2),
        Err(XdrError::LengthOverBound { len: 3, max: 2 })
    ));
    // A bad entry, or a list that does not end, is an error.
    let mut bad = plain.to_vec();
    bad[4..8].copy_from_slice(&17u32.to_be_bytes());
    assert!(EncodedList::<O>::decode_max(&mut Decoder::new(Bytes::from(bad)), 9).is_err());
    let cut = plain.slice(..plain.len() - 4);
    assert!(EncodedList::<O>::decode_max(&mut Decoder::new(cut), 9).is_err());

    // First entry: 4 + 4 + 4 bytes; the second (12 more + 4) does not fit in 20.
    let mut b = ListBuilder::new();
    assert!(b.push_within(&O(b"a".to_vec()), 20));
    assert!(!b.push_within(&O(b"bcdef".to_vec()), 20));
    assert_eq!((b.len(), b.entries_xdr_len()), (1, 12));
    assert!(b.push_within(&O(Vec::new()), 20));
    assert_eq!(b.finish().to_vec().len(), 2);
}

/// `Decoder::with_item_elided`: only the DDP-eligible item whose data began at the
/// given offset is taken as left out; an item before it and one after it are read
/// from the buffer, and stream positions count the left-out bytes.
#[test]
fn one_item_elided_leaves_the_others_in_the_stream() {
    // Whole stream: opaque "ab" (at 4..6, padded to 8), opaque of 5 bytes (data at 12,
    // padded to 8), opaque "xyz" (data at 24), then u32 7.
    let mut whole = Encoder::new();
    whole.opaque(b"ab").opaque(b"12345").opaque(b"xyz").u32(7);
    let whole = whole.finish().to_bytes();
    assert_eq!(&whole[12..17], b"12345");
    // The same stream with the second item's data and padding taken out (12..20).
    let mut cut = whole[..12].to_vec();
    cut.extend_from_slice(&whole[20..]);
    let mut d = Decoder::with_item_elided(Bytes::from(cut), 12);
    assert_eq!(&d.ddp_opaque(64).unwrap()[..], b"ab");
    assert!(d.ddp_opaque(64).unwrap().is_empty());
    assert_eq!(d.stream_position(), 20);
    assert_eq!(&d.ddp_opaque(64).unwrap()[..], b"xyz");
    assert_eq!(d.u32().unwrap(), 7);
    d.finish().unwrap();
    // Not elided where no item begins at that offset: every item is read.
    let mut d = Decoder::with_item_elided(whole.clone(), 13);
    assert_eq!(&d.ddp_opaque(64).unwrap()[..], b"ab");
    assert_eq!(&d.ddp_opaque(64).unwrap()[..], b"12345");
}
