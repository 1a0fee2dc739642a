//! READ data left in the file over TCP, as NFSv3's READ leaves it
//! ([`crate::proc::io::read`]): `oncrpc`'s TCP writer sends it from the page cache by
//! `sendfile` behind the reply's other bytes, so the server copies none of it.
//!
//! A COMPOUND reply is encoded from its result structures ([`nfs4::Compound4Res`]),
//! whose READ data is bytes in memory. A READ over TCP therefore puts a stand-in of
//! the right length there ([`stand_in`]: a slice of one static block of zeros, never
//! sent and never written), keeps the file range in the COMPOUND
//! ([`super::compound::Compound::file_reads`]), and once the reply is encoded
//! [`fill`] swaps each stand-in DDP item for its range: the length words and the
//! reply's layout are the ones the stand-in gave. RPC-over-RDMA never gets a file
//! item (its READ data is read into a pooled buffer and sent by RDMA Write), and a
//! reply with DDP items is never kept in a slot's reply cache.

use xdr::{Bytes, FileRange, XdrStream};

use crate::nfs::MAX_IO;

/// The zeros stand-ins are cut from: one READ's worth at most.
static ZEROS: [u8; MAX_IO as usize] = [0; MAX_IO as usize];

/// A stand-in for `len` (at most [`MAX_IO`]) bytes of READ data left in a file.
pub(crate) fn stand_in(len: usize) -> Bytes {
    Bytes::from_static(&ZEROS[..len])
}

/// Whether `data` is a stand-in (its bytes are [`ZEROS`]'s).
fn is_stand_in(data: &Bytes) -> bool {
    let zeros = ZEROS.as_ptr_range();
    !data.is_empty() && zeros.contains(&data.as_ptr())
}

/// Swaps the stand-ins of `reply` for `ranges`, in order (one per READ that left
/// its data in the file, in the order they ran).
pub(crate) fn fill(reply: &mut XdrStream, ranges: Vec<FileRange>) {
    let mut ranges = ranges.into_iter();
    for item in reply.ddp.iter_mut().filter(|i| is_stand_in(&i.data)) {
        let range = ranges
            .next()
            .expect("one file range per READ stand-in in the reply");
        debug_assert_eq!(range.len, item.data.len());
        item.data = Bytes::new();
        item.file = Some(range);
    }
    debug_assert!(ranges.next().is_none(), "a file range without its stand-in");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use xdr::Encoder;

    #[test]
    fn stand_ins_are_swapped_for_their_ranges_in_order_and_other_items_kept() {
        let file = Arc::new(tempfile_with(b"0123456789"));
        let range = |offset, len| FileRange {
            file: file.clone(),
            offset,
            len,
        };
        let mut e = Encoder::new();
        e.u32(7);
        e.ddp_opaque(stand_in(3));
        e.ddp_opaque(Bytes::from_static(b"link"));
        e.ddp_opaque(stand_in(5));
        let mut reply = e.finish();
        let before = reply.inline.clone();
        fill(&mut reply, vec![range(0, 3), range(4, 5)]);
        assert_eq!(reply.inline, before, "the layout is the stand-ins'");
        assert_eq!(reply.ddp[0].file, Some(range(0, 3)));
        assert!(reply.ddp[0].data.is_empty());
        assert_eq!(reply.ddp[1].file, None);
        assert_eq!(&reply.ddp[1].data[..], b"link");
        assert_eq!(reply.ddp[2].file, Some(range(4, 5)));
    }

    #[test]
    fn zeros_from_elsewhere_are_not_stand_ins() {
        assert!(!is_stand_in(&Bytes::from(vec![0u8; 8])));
        assert!(!is_stand_in(&stand_in(0)));
        assert!(is_stand_in(&stand_in(MAX_IO as usize)));
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        use std::io::Write;
        let path = std::env::temp_dir().join(format!("nfsd-read-file-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
