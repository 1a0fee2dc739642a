//! Fuzz the RPC-over-RDMA header decoder and validator.
//!
//! Properties checked on every input:
//! - `Header::parse` and `validate::receive` never panic;
//! - a header that parses re-emits to exactly the bytes it was parsed from
//!   (`encoded_len` agrees), and re-parses to the same value;
//! - the RDMA_ERROR answer to a refused message parses back and echoes XID and version.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rpcrdma::header::{Body, Header};
use rpcrdma::validate::{self, Policy};
use rpcrdma::Limits;

fuzz_target!(|data: &[u8]| {
    let buf = Bytes::copy_from_slice(data);
    let limits = Limits {
        max_segments_per_chunk: 8,
        max_chunks_per_list: 4,
        max_total_segments: 16,
    };
    if let Ok(parsed) = Header::parse(&buf, &limits) {
        let h = &parsed.header;
        let out = h.to_bytes();
        assert_eq!(out.len(), h.encoded_len());
        // The XDR of every body is canonical (flags are exactly 0 or 1, padding is
        // zero), so what parsed re-emits byte for byte.
        assert_eq!(&out[..], &buf[..parsed.header_len]);
        let again = Header::parse(&out, &limits).expect("re-parse");
        assert_eq!(&again.header, h);
    }
    let policy = Policy {
        limits,
        ..Policy::default()
    };
    if let Err(err) = validate::receive(&buf, &policy) {
        if let Some(reply) = validate::error_reply(&buf, &err, 32, &policy) {
            let bytes = reply.to_bytes();
            let back = Header::parse(&bytes, &limits).expect("our error reply parses");
            assert_eq!(back.header.xid.0.to_be_bytes(), data[0..4]);
            assert_eq!(back.header.version.0.to_be_bytes(), data[4..8]);
            assert!(matches!(back.header.body, Body::Error(_)));
        }
    }
});
