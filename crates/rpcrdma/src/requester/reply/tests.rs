//! `Requester::assemble_reply` against arbitrary returned lengths and placed memory.
//! The pair scenarios (`pair::tests`) run it on real exchanges.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::requester::RequesterConfig;
use crate::rpc::ProcId;
use crate::testutil::{rpc_reply, TestUlb};

fn requester() -> Requester<TestUlb> {
    let ulb = TestUlb {
        max_reply: 1 << 20,
        ddp_results: vec![8192],
        call_ddp: 0,
    };
    Requester::new(ulb, RequesterConfig::default())
}

const READ: ProcId = ProcId {
    prog: 100_003,
    vers: 3,
    proc_num: 6,
};

proptest! {
    /// Whatever lengths a Reply event carries and whatever the driver's regions hold,
    /// assembly is a Reply or a `ReplyError`, never a panic; a Reply takes exactly the
    /// returned lengths and supplies the data's XDR padding (§4.4.6.1, §5.3.2).
    #[test]
    fn any_lengths_give_a_reply_or_a_typed_error(
        inline_words in 0usize..8,
        reply_chunk in proptest::option::of((0u64..80, 0usize..80)),
        writes in proptest::collection::vec((0u64..40, 0usize..40), 0..3),
        huge in any::<bool>(),
        known_proc in any::<bool>(),
    ) {
        let r = requester();
        let mut lengths: Vec<u64> = writes.iter().map(|&(l, _)| l).collect();
        if huge {
            lengths.push(u64::MAX);
        }
        // Streams made of the first chunk's length as a word, over and over: a
        // 4-aligned stream ends in the right count, so some cases reassemble.
        let count = lengths.first().map_or(0, |&l| l as u32).to_be_bytes();
        let words = |n: usize| Bytes::from(count.iter().copied().cycle().take(n).collect::<Vec<u8>>());
        let inline = words(inline_words * 4);
        let mut placed = PlacedBytes {
            reply: reply_chunk.map(|(_, room)| words(room)),
            writes: writes.iter().map(|&(_, room)| Bytes::from(vec![1u8; room])).collect(),
        };
        let parts = ReplyParts {
            proc_id: known_proc.then_some(READ),
            inline: &inline,
            reply_chunk_len: reply_chunk.map(|(len, _)| len),
            write_lengths: &lengths,
        };
        match r.assemble_reply(parts, &mut placed) {
            Ok(full) => {
                let base = parts.reply_chunk_len.map_or(inline.len() as u64, |l| l);
                // At most the first chunk goes back (`TestUlb` has one result).
                let data = full.chunk_ranges.first().map_or(0, |&(_, l)| u64::from(l));
                prop_assert_eq!(full.len() as u64, base + data + xdr::pad_len(data as usize) as u64);
                if let Some(&(pos, _)) = full.chunk_ranges.first() {
                    prop_assert_eq!(u64::from(pos), base);
                    prop_assert_eq!(Some(data), lengths.first().copied());
                }
            }
            Err(e) => prop_assert!(matches!(
                e,
                ReplyError::ReplyChunkNotPlaced { .. }
                    | ReplyError::WriteChunkNotPlaced { .. }
                    | ReplyError::NoProcedure
                    | ReplyError::WriteChunkLengthMismatch { .. }
                    | ReplyError::BadPosition(_)
            ), "{e:?}"),
        }
    }
}

#[test]
fn a_read_reply_is_rebuilt_from_the_first_bytes_of_its_write_chunk() {
    // The region is the whole 8192-byte chunk; the responder returned 4097: those bytes
    // go back after the count, with three bytes of padding, the rest of the region not.
    let r = requester();
    let file: Bytes = (0..4097u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    let expected = rpc_reply(7, &[1, 2], Some(file.clone())).to_bytes();
    let inline = expected.slice(..24 + 8 + 4);
    let mut region = file.to_vec();
    region.resize(8192, 0xee);
    let mut placed = PlacedBytes {
        reply: None,
        writes: vec![region.into()],
    };
    let full = r
        .assemble_reply(
            ReplyParts {
                proc_id: Some(READ),
                inline: &inline,
                reply_chunk_len: None,
                write_lengths: &[4097],
            },
            &mut placed,
        )
        .unwrap();
    assert_eq!(full.chunk_ranges, vec![(36, 4097)]);
    assert_eq!(full.to_bytes(), expected);
}
