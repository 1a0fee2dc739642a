//! Record-marking reader (RFC 5531 §11): arbitrary bytes, fed in arbitrary chunks,
//! must yield records or a `RecordError`, never a panic, and never a record over the
//! maximum.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use oncrpc::record::RecordDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, data)) = data.split_first() else {
        return;
    };
    let max = 1usize << (ctl % 24);
    let chunk = 1 + (ctl as usize >> 3);
    let mut dec = RecordDecoder::new(max);
    let mut src = BytesMut::new();
    for c in data.chunks(chunk) {
        src.extend_from_slice(c);
        assert!(dec.bytes_wanted(&src) >= 1);
        loop {
            match dec.decode(&mut src) {
                Ok(Some(rec)) => assert!(rec.len() <= max),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = dec.decode_eof(&mut src);
});
