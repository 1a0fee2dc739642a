//! RDMA Read Responses from a region registered from the consumer's bytes
//! (`ProtectionDomain::register_bytes`, sent without a copy) are the same bytes on the
//! wire as from a region of owned memory (copied into the FPDU), CRC off and on.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use iwarp::handshake::Negotiated;
use iwarp::wire::ddp::{DdpHeader, Opcode, ReadRequest, SegmentHeader};
use iwarp::wire::mpa;
use iwarp::{Connection, Limits, TxBatch};
use rdma::{Access, MemoryRegion, PeerParams, ProtectionDomain};

fn conn(crc: bool) -> (Connection, ProtectionDomain) {
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let neg = Negotiated {
        active: false,
        crc,
        ird: 1,
        ord: 1,
        peer_revision: 2,
        peer: PeerParams::default(),
    };
    let c = Connection::new(
        pd.clone(),
        &neg,
        Limits::default(),
        Instant::now(),
        Duration::ZERO,
    );
    (c, pd.into())
}

/// Feeds one Read Request for `size` bytes at `src_to` of `src` and returns the bytes
/// the connection sends back (its Read Response FPDUs), and how many of them the send
/// batch takes straight from `mem` (not copied).
fn serve_read(
    c: &mut Connection,
    src: &MemoryRegion,
    src_to: u64,
    size: u32,
    crc: bool,
    mem: &[u8],
) -> (Vec<u8>, usize) {
    let mut body = Vec::new();
    ReadRequest {
        sink_stag: 0x1234_5600,
        sink_to: 77,
        size,
        src_stag: src.stag().0,
        src_to,
    }
    .emit(&mut body);
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::READ_REQUEST,
        ddp: DdpHeader::Untagged {
            rsvd_ulp: 0,
            qn: 1,
            msn: 1,
            mo: 0,
        },
    }
    .emit(&mut u);
    u.extend_from_slice(&body);
    let mut f = Vec::new();
    mpa::encode_fpdu(&u, crc, &mut f);
    let mut buf = BytesMut::from(&f[..]);
    c.handle_input(&mut buf);
    let mut batch = TxBatch::new();
    while c.poll_transmit(Instant::now(), &mut batch, 1 << 20) {}
    let borrowed = batch
        .slices()
        .filter(|s| mem.as_ptr_range().contains(&s.as_ptr()))
        .map(<[u8]>::len)
        .sum();
    (batch.to_vec(), borrowed)
}

fn data(n: usize) -> Bytes {
    (0..n)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[test]
fn read_response_from_shared_bytes_is_wire_identical_to_owned_memory() {
    // One FPDU, a few, and several with an odd offset and a short last one.
    for crc in [false, true] {
        for (at, size) in [(0u64, 1u32), (3, 4093), (0, 65_516), (5, 200_001)] {
            let bytes = data(at as usize + size as usize + 11);
            let (mut owned_conn, pd) = conn(crc);
            let owned = pd
                .register(BytesMut::from(&bytes[..]), Access::REMOTE_READ)
                .unwrap();
            let (want, copied_from) = serve_read(&mut owned_conn, &owned, at, size, crc, &bytes);
            assert_eq!(copied_from, 0);
            let (mut shared_conn, pd) = conn(crc);
            let shared = pd
                .register_bytes(bytes.slice(..), Access::REMOTE_READ)
                .unwrap();
            let (got, sent_from) = serve_read(&mut shared_conn, &shared, at, size, crc, &bytes);
            // Every payload byte goes out of the caller's memory itself.
            assert_eq!(sent_from, size as usize, "crc {crc} {size}@{at}");
            assert!(owned_conn.is_open() && shared_conn.is_open());
            assert!(
                want.len() > size as usize,
                "crc {crc} {size}@{at}: {}",
                want.len()
            );
            assert!(got == want, "crc {crc} {size}@{at}");
            // The caller's bytes and the region's are the same memory, untouched.
            assert_eq!(shared.deregister_bytes().as_ptr(), bytes.as_ptr());
        }
    }
}
